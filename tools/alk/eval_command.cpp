// `alk eval --model HF_DIR --text FILE` (or --from RUN_DIR): the model's perplexity on a text.
// The text is tokenized whole (with the tokenizer's BOS, as transformers' tokenizer(text)
// gives) and cut into consecutive windows of --ctx tokens (default: the model's context);
// each window predicts its tokens from those before it in the window, as the perplexity
// recipe of transformers' documentation does with stride = context.
// `--logits-for IDS.safetensors --logits-out OUT.safetensors` instead writes the model's f32
// logits.{i} for every input_ids.{i} of IDS (the layout of tests/fixtures/hf/reference/):
// scripts/check_hf_export.py compares them with what transformers computes from the
// directory `alk export --target hf` wrote.
#include <cmath>
#include <iomanip>
#include <iostream>

#include "alk/io.h"
#include "alk/nn.h"
#include "alk/pretrained.h"
#include "tools/alk/commands.h"
#include "train/run_model.h"

namespace alk::cli {

namespace {

struct EvalArgs {
  std::string model_dir, run_dir, text, device, logits_for, logits_out;
  int64_t ctx = 0, max_tokens = 0;
};

void run_eval(const EvalArgs& a) {
  const Loc loc = Loc::current();
  check(a.model_dir.empty() != a.run_dir.empty(), "eval", loc,
        "give a Hugging Face model directory (--model) or a run directory (--from)");
  std::shared_ptr<nn::GPT> model;
  Tokenizer tok;
  if (!a.model_dir.empty()) {
    Pretrained p = load_pretrained(a.model_dir, a.device, loc);
    model = p.model;
    tok = std::move(p.tokenizer);
  } else {
    train::RunModel r = train::load_run_model(a.run_dir, a.device, loc);
    model = r.model;
    tok = std::move(r.tokenizer);
  }
  if (!a.logits_for.empty()) {
    check(!a.logits_out.empty(), "eval", loc, "--logits-for needs --logits-out");
    const SafetensorsFile in = load_safetensors(a.logits_for, loc);
    std::vector<std::pair<std::string, Tensor>> out;
    NoGradGuard no_grad;
    for (const auto& [name, ids] : in.tensors) {
      if (!name.starts_with("input_ids.")) continue;
      check(ids.dim() == 1 && ids.dtype() == DType::I64, "eval", loc, a.logits_for, ": ", name, " must be i64 [T]");
      Tensor logits = (*model)(ids.reshape({1, -1}).to(model->wte->weight.device())).select(0, 0).to(DType::F32);
      out.emplace_back(name, ids);
      out.emplace_back("logits." + name.substr(10), logits.to(cpu_device()));
    }
    check(!out.empty(), "eval", loc, a.logits_for, " has no input_ids.N tensors");
    save_safetensors(a.logits_out, out, {}, loc);
    std::cout << "wrote " << out.size() / 2 << " inputs' logits to " << a.logits_out << "\n";
    return;
  }
  check(!a.text.empty(), "eval", loc, "give --text FILE (or --logits-for and --logits-out)");
  std::vector<int32_t> ids = tok.encode(read_file(a.text, "eval", loc), true);
  if (a.max_tokens > 0 && static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(static_cast<size_t>(a.max_tokens));
  const int64_t ctx = a.ctx > 0 ? a.ctx : model->cfg.ctx;
  check(ctx >= 1 && ctx <= model->cfg.ctx, "eval", loc, "--ctx must be in 1..", model->cfg.ctx, ", got ", ctx);
  check(ids.size() >= 2, "eval", loc, a.text, " gives ", ids.size(), " tokens; perplexity needs at least 2");
  Device& dev = model->wte->weight.device();
  NoGradGuard no_grad;
  double total = 0;
  int64_t counted = 0;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t start = 0; start + 1 < n; start += ctx) {
    const int64_t len = std::min(ctx, n - 1 - start);
    std::vector<int64_t> x(ids.begin() + start, ids.begin() + start + len),
        y(ids.begin() + start + 1, ids.begin() + start + len + 1);
    Tensor logits = (*model)(tensor(x, {1, len}).to(dev));
    Tensor loss = nn::cross_entropy(logits.reshape({len, -1}).to(DType::F32), tensor(y, {len}).to(dev));
    total += loss.item() * static_cast<double>(len);
    counted += len;
  }
  const double mean = total / static_cast<double>(counted);
  std::cout << std::fixed << std::setprecision(4) << "tokens: " << counted << " predicted (" << n
            << " in the text), windows of " << ctx << "\nloss: " << mean << " nats/token\nperplexity: " << std::exp(mean)
            << "\n";
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "perplexity of a model on a text file");
  static EvalArgs a;
  auto* model = cmd->add_option("--model", a.model_dir, "a Hugging Face model directory");
  auto* from = cmd->add_option("--from", a.run_dir, "a run directory of alk train");
  model->excludes(from);
  cmd->add_option("--text", a.text, "the text file");
  cmd->add_option("--logits-for", a.logits_for, "a safetensors file of input_ids.N (i64 [T]): write their logits");
  cmd->add_option("--logits-out", a.logits_out, "where --logits-for writes input_ids.N and logits.N");
  cmd->add_option("--ctx", a.ctx, "tokens per window (default: the model's context)");
  cmd->add_option("--max-tokens", a.max_tokens, "evaluate only the first N tokens of the text");
  cmd->add_option("--device", a.device, "cpu, cuda:N, vulkan:N or auto (default: ALK_DEVICE, else the CPU)");
  cmd->callback([] { run_eval(a); });
}

}  // namespace alk::cli
