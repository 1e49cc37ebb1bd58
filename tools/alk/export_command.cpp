// `alk export --target hf --out DIR (--from RUN_DIR | --model HF_DIR) [--dtype f32|bf16|f16]`: a
// directory transformers' from_pretrained loads (config.json, model.safetensors with its key
// names and layouts, the tokenizer files): a run of alk train (fine-tuned from a Hugging Face
// model with --init-from, or an alk GPT, written as GPT-2 with a tokenizer.json of its BPE),
// or a Hugging Face directory read and written again.
// `alk export --target webgpu --out DIR [--size tiny|micro] [--text FILE] [--tokenizer bpe|bytes|DIR] [--dtype f16]`:
// a GPT whose compiled training step (forward, backward, AdamW) and forward pass are written as
// a WebGPU bundle (src/webgpu/): plan, WGSL kernels, weights, the tokenizer's files, the
// JavaScript runtime and a page that trains it in the browser on the text and samples.
// The tokenizer is alk train's by default: a byte-level BPE (--vocab-size, 1024) trained on
// the bundle's text; DIR loads one (a run's tokenizer/); `bytes` makes the bytes the tokens.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "alk/error.h"
#include "alk/io.h"
#include "alk/pretrained.h"
#include "alk/train.h"
#include "tools/alk/commands.h"
#include "train/run_model.h"
#include "webgpu/gpt_bundle.h"

namespace alk::cli {

namespace {
struct ExportFlags {
  std::string target = "webgpu", out, size = "tiny", text, tokenizer = "bpe", dtype = "f32", from, model, device;
  int64_t text_bytes = 1 << 20, vocab_size = train::Config{}.vocab_size;
};

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), "export", Loc::current(), "cannot read ", path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void export_hf(const ExportFlags& f) {
  const Loc loc = Loc::current();
  check(f.from.empty() != f.model.empty(), "export", loc,
        "--target hf exports a run directory (--from) or a Hugging Face directory (--model)");
  const DType dtype = f.dtype == "bf16" ? DType::BF16 : f.dtype == "f16" ? DType::F16 : DType::F32;
  if (!f.model.empty()) {
    Pretrained p = load_pretrained(f.model, f.device, loc);
    save_pretrained(*p.model, p.info, f.out, f.model, dtype, loc);
  } else {
    train::RunModel r = train::load_run_model(f.from, f.device, loc);
    if (r.hf) {
      save_pretrained(*r.model, *r.hf, f.out, r.hf_dir, dtype, loc);
    } else {
      // An alk GPT is a GPT-2; its byte-level BPE goes out as a tokenizer.json.
      HfModelInfo info;
      info.model_type = "gpt2";
      save_pretrained(*r.model, info, f.out, "", dtype, loc);
      write_file_atomic(f.out + "/tokenizer.json", r.tokenizer.to_tokenizer_json(loc), loc);
    }
  }
  std::cout << "wrote " << f.out << " (config.json, model.safetensors in " << f.dtype
            << ", tokenizer files): load it with transformers' AutoModelForCausalLM.from_pretrained\n";
}
}  // namespace

void add_export_command(CLI::App& app) {
  auto flags = std::make_shared<ExportFlags>();
  auto* cmd = app.add_subcommand("export", "export a compiled model for another runtime (webgpu: a bundle for browsers and Node)");
  cmd->add_option("--target", flags->target, "webgpu, or hf (a Hugging Face directory; onnx: alk onnx export)")
      ->check(CLI::IsMember({"webgpu", "hf", "onnx"}));
  cmd->add_option("--out", flags->out, "the bundle directory (hf: the model directory)")->required();
  cmd->add_option("--from", flags->from, "hf: a run directory of alk train");
  cmd->add_option("--model", flags->model, "hf: a Hugging Face model directory, written again");
  cmd->add_option("--device", flags->device, "hf: where the model is loaded (default: the CPU)");
  cmd->add_option("--size", flags->size, "tiny (for real GPUs) or micro (software adapters, CI)")
      ->check(CLI::IsMember({"tiny", "micro"}));
  cmd->add_option("--text", flags->text, "training text (default: the KJV Bible, as alk train uses)");
  cmd->add_option("--text-bytes", flags->text_bytes, "bytes of the text put in the bundle (default 1 MiB)");
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "bpe (trained on the text, as alk train does), bytes, or a tokenizer directory (a run's tokenizer/)");
  cmd->add_option("--vocab-size", flags->vocab_size, "--tokenizer bpe: the BPE vocabulary size")->capture_default_str();
  cmd->add_option("--dtype", flags->dtype,
                  "f16: mixed precision as Autocast(f16) (f16 activations and matmul inputs, f32 accumulation and "
                  "master weights; native f16 where the adapter has shader-f16, packed in u32 words where not)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->callback([flags] {
    const ExportFlags& f = *flags;
    if (f.target == "hf") return export_hf(f);
    check(f.dtype != "bf16", "export", Loc::current(), "--dtype bf16 is for --target hf (webgpu: f32 or f16)");
    check(f.target == "webgpu", "export", Loc::current(), "--target ", f.target,
          " is not built into alk export (only webgpu); ONNX models: alk onnx export");
    webgpu::GptBundleConfig c = f.size == "micro" ? webgpu::GptBundleConfig::micro() : webgpu::GptBundleConfig::tiny();
    c.text = read_all(f.text.empty() ? train::default_corpus() : f.text);
    check(f.text_bytes > 0, "export", Loc::current(), "--text-bytes must be positive");
    if (static_cast<int64_t>(c.text.size()) > f.text_bytes) c.text.resize(static_cast<size_t>(f.text_bytes));
    if (f.tokenizer == "bpe") {
      std::cout << "training a " << f.vocab_size << "-token BPE on " << c.text.size() << " bytes of text...\n";
      c.tokenizer = Tokenizer::train(c.text, static_cast<int>(f.vocab_size));
    } else if (f.tokenizer != "bytes") {
      c.tokenizer = Tokenizer::load(f.tokenizer);
    }
    if (c.tokenizer) c.model.vocab = c.tokenizer->vocab_size();
    if (f.dtype == "f16") c.compute = DType::F16;
    std::cout << "tracing the " << f.size << " GPT's training step on the CPU...\n";
    webgpu::GptBundle bundle(c);
    const webgpu::ExportSummary s = bundle.write(f.out);
    std::cout << "wrote " << f.out << ": " << s.dispatches << " dispatches (step + forward), " << s.shaders
              << " WGSL kernels, " << s.buffers << " buffers (" << s.buffer_bytes / 1024 << " KiB), state "
              << s.state_bytes / 1024 << " KiB\n"
              << (s.shaders_f16 ? "f16: " + std::to_string(s.shaders_f16) +
                                      " kernels have a shader-f16 variant (used where the adapter offers it)\n"
                                : std::string())
              << "tokenizer: "
              << (c.tokenizer ? "byte-level BPE, " + std::to_string(c.tokenizer->vocab_size()) + " tokens (tokenizer/)"
                              : std::string("bytes"))
              << "; the text is " << bundle.tokens.size() << " tokens\n"
              << "open the page: python3 -m http.server -d " << f.out << " 8000, then http://localhost:8000/\n"
              << "  (a browser with WebGPU; for Chromium without a GPU: --enable-unsafe-webgpu)\n"
              << "from Node: import { load } from '" << f.out << "/alk_webgpu.mjs' (npm webgpu gives the GPU)\n";
  });
}

}  // namespace alk::cli
