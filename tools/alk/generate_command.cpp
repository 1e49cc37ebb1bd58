// `alk generate`: text (or ids) from a trained GPT run directory (--from) or a Hugging Face
// model directory (--model) on the KV-cache engine, streamed as it is made; the last line
// (stderr) gives prefill and decode tokens/s. A Hugging Face model's prompt gets its BOS and
// generation stops at its EOS ids (generation_config.json).
#include <iostream>
#include <sstream>

#include "alk/generate.h"
#include "alk/pretrained.h"
#include "alk/train.h"
#include "tools/alk/commands.h"
#include "train/run_model.h"

namespace alk::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used == item.size() && !item.empty() && v >= 0 && v <= INT32_MAX, "generate", Loc::current(),
          "--prompt-ids takes comma-separated token ids, got '", item, "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

struct GenerateArgs {
  std::string dir, model_dir, prompt, prompt_ids, device, dtype = "auto", memory_budget;
  int64_t tokens = 200, top_k = 40, batch = 1;
  double temperature = 0.8, top_p = 1.0, presence = 0, frequency = 0;
  uint64_t seed = 0;
  bool print_ids = false;
};

void run_generate(const GenerateArgs& a) {
  check(a.dir.empty() != a.model_dir.empty(), "generate", Loc::current(),
        "give a run directory (--from) or a Hugging Face model directory (--model)");
  train::RunModel r;
  std::vector<int32_t> eos_ids;
  if (!a.model_dir.empty()) {
    Pretrained p = load_pretrained(a.model_dir, a.device);
    r.tokenizer = std::move(p.tokenizer);
    r.model = std::move(p.model);
    eos_ids = p.generation.eos_ids;
  } else {
    r = train::load_run_model(a.dir, a.device);
  }
  check(a.batch >= 1, "generate", Loc::current(), "--batch must be >= 1, got ", a.batch);
  std::vector<int32_t> prompt = a.prompt_ids.empty() ? r.tokenizer.encode(a.prompt, true) : parse_ids(a.prompt_ids);
  if (prompt.empty()) prompt.push_back(eos_ids.empty() ? r.tokenizer.byte_id('\n') : eos_ids[0]);
  Device& dev = r.model->wte->weight.device();
  GeneratorOptions opt;
  opt.slots = a.batch;
  // GPUs compute in bf16 (f32 master weights, as training's --dtype); CPUs, and Vulkan on a
  // CPU (lavapipe), in f32.
  std::string dtype = a.dtype;
  const std::string& type = dev.info().type;
  if (dtype == "auto") dtype = type == "discrete" || type == "integrated" ? "bf16" : "f32";
  check(dtype == "f32" || dtype == "bf16" || dtype == "f16", "generate", Loc::current(),
        "--dtype must be auto, f32, bf16 or f16, got ", dtype);
  if (dtype != "f32") opt.autocast = dtype == "bf16" ? DType::BF16 : DType::F16;
  if (!a.memory_budget.empty()) opt.memory_budget = train::parse_bytes(a.memory_budget);
  Generator gen(r.model, opt);
  std::cerr << "KV cache: " << gen.slots() << " slot" << (gen.slots() > 1 ? "s" : "") << " x " << gen.max_context()
            << " positions, " << static_cast<double>(gen.cache_bytes()) / (1 << 20) << " MiB (" << dtype << ")\n";
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < a.batch; ++b) {
    GenerateRequest req;
    req.prompt = prompt;
    req.sampling.temperature = a.temperature;
    req.sampling.top_k = a.top_k;
    req.sampling.top_p = a.top_p;
    req.sampling.presence_penalty = a.presence;
    req.sampling.frequency_penalty = a.frequency;
    req.sampling.seed = a.seed + static_cast<uint64_t>(b);
    req.sampling.max_tokens = a.tokens;
    for (int32_t eos : eos_ids) req.sampling.stop.push_back({eos});
    ids.push_back(gen.submit(req));
  }
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(a.batch));
  // One sequence streams as it is made; a batch prints each sequence when all are done.
  const bool stream = a.batch == 1;
  if (stream && !a.print_ids) std::cout << (a.prompt_ids.empty() ? a.prompt : r.tokenizer.decode(prompt)) << std::flush;
  while (!gen.idle()) {
    for (const TokenEvent& e : gen.step()) {
      if (e.token < 0) continue;
      const size_t which = static_cast<size_t>(e.request - ids.front());
      out[which].push_back(e.token);
      if (!stream) continue;
      if (a.print_ids) std::cout << (out[which].size() > 1 ? " " : "") << e.token << std::flush;
      else if (!r.tokenizer.is_special(e.token)) std::cout << r.tokenizer.token_bytes(e.token) << std::flush;
    }
  }
  if (!stream) {
    for (size_t b = 0; b < out.size(); ++b) {
      if (a.print_ids) {
        for (size_t i = 0; i < out[b].size(); ++i) std::cout << (i ? " " : "") << out[b][i];
        std::cout << "\n";
      } else {
        std::cout << "--- sequence " << b << "\n"
                  << (a.prompt_ids.empty() ? a.prompt : r.tokenizer.decode(prompt)) << r.tokenizer.decode(out[b])
                  << "\n";
      }
    }
  } else {
    std::cout << "\n";
  }
  const GeneratorStats& s = gen.stats();
  auto rate = [](int64_t n, double sec) { return sec > 0 ? static_cast<double>(n) / sec : 0.0; };
  std::cerr << "prefill: " << s.prefill_tokens << " tokens, " << rate(s.prefill_tokens, s.prefill_seconds)
            << " tokens/s; decode: " << s.decode_tokens << " tokens in " << s.decode_steps << " steps, "
            << rate(s.decode_tokens, s.decode_seconds) << " tokens/s (" << gen.slots() << " slot"
            << (gen.slots() > 1 ? "s" : "") << ", " << dev.name() << ", " << dtype << ")\n";
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "generate from a trained GPT with a KV cache, streaming the text");
  static GenerateArgs a;
  auto* from = cmd->add_option("--from", a.dir, "run directory written by alk train");
  auto* model = cmd->add_option("--model", a.model_dir,
                                "a Hugging Face model directory (config.json, safetensors, tokenizer.json)");
  from->excludes(model);
  auto* text = cmd->add_option("--prompt", a.prompt, "text to continue");
  auto* ids = cmd->add_option("--prompt-ids", a.prompt_ids, "token ids to continue, comma-separated (1,2,3)");
  text->excludes(ids);
  cmd->add_option("--tokens", a.tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", a.temperature, "softmax temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", a.top_k, "sample among the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--top-p", a.top_p, "sample among the most likely tokens holding this much probability")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", a.presence, "subtracted from the logits of tokens generated before");
  cmd->add_option("--frequency-penalty", a.frequency, "times the count, subtracted from generated tokens' logits");
  cmd->add_option("--seed", a.seed, "random seed (sequence b of a batch uses seed + b)")->capture_default_str();
  cmd->add_option("--device", a.device, "cpu, cuda:N, vulkan:N or auto (default: ALK_DEVICE, else the CPU)");
  cmd->add_option("--dtype", a.dtype, "auto (f32 on the CPU, bf16 on GPUs), f32, bf16, f16")->capture_default_str();
  cmd->add_option("--batch", a.batch, "sequences generated at once from the prompt")->capture_default_str();
  cmd->add_option("--memory-budget", a.memory_budget,
                  "bytes the KV cache may take (64MB, 1.5GB, ...): a --batch that does not fit is refused");
  cmd->add_flag("--print-ids", a.print_ids, "print the generated ids (not the prompt's), space-separated");
  cmd->callback([] { run_generate(a); });
}

}  // namespace alk::cli
