// `alk train`: runs a training job (train/). Flags override --config, which overrides the
// defaults; --resume DIR continues the run in DIR from its config and checkpoint.
#include <csignal>
#include <filesystem>
#include <iostream>

#include "alk/dist.h"
#include "alk/io.h"
#include "alk/train.h"
#include "tools/alk/commands.h"

namespace alk::cli {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

// SIGINT (Ctrl-C) and SIGTERM (kill, a scheduler's stop) end the run after the current
// step, with a checkpoint; a second signal of the same kind ends the process at once.
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  g_stop = true;
  std::signal(sig, SIG_DFL);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a model: a GPT on text (default) or a CNN on MNIST");
  static train::Config flags;
  static std::string config_file, resume_dir;
  static int nproc = 1;
  static train::Config defaults;
  cmd->add_option("--task", flags.task, "gpt or mnist")->capture_default_str();
  cmd->add_option("--corpus", flags.corpus, "gpt: training text file (default: the KJV Bible, data/kjv.txt)");
  cmd->add_option("--data", flags.data, "mnist: directory with the IDX files (default: found automatically)");
  cmd->add_option("--steps", flags.steps, "optimizer steps")->capture_default_str();
  cmd->add_option("--device", flags.device, "auto, cpu, cuda:N, vulkan:N (alk devices lists them)")->capture_default_str();
  cmd->add_option("--dtype", flags.dtype, "f32, or bf16/f16 mixed precision (f32 master weights)")->capture_default_str();
  cmd->add_option("--out", flags.out, "run directory (default runs/gpt or runs/mnist)");
  cmd->add_option("--resume", resume_dir, "continue the run in DIR from its last checkpoint");
  cmd->add_option("--init-from", flags.init_from,
                  "gpt: fine-tune a Hugging Face model directory (GPT-2, LLaMA, Qwen2, Mistral): its architecture, "
                  "weights and tokenizer");
  cmd->add_option("--config", config_file, "JSON config file (flags override it)");
  cmd->add_option("--seed", flags.seed, "random seed")->capture_default_str();
  cmd->add_option("--batch", flags.batch, "batch size")->capture_default_str();
  cmd->add_option("--ctx", flags.ctx, "gpt: context length")->capture_default_str();
  cmd->add_option("--dim", flags.dim, "gpt: model width")->capture_default_str();
  cmd->add_option("--layers", flags.layers, "gpt: transformer blocks")->capture_default_str();
  cmd->add_option("--heads", flags.heads, "gpt: attention heads")->capture_default_str();
  cmd->add_option("--vocab-size", flags.vocab_size, "gpt: BPE vocabulary size")->capture_default_str();
  cmd->add_option("--lr", flags.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--warmup", flags.warmup, "steps of linear learning-rate warmup")->capture_default_str();
  cmd->add_option("--eval-every", flags.eval_every, "gpt: validation every N steps")->capture_default_str();
  cmd->add_option("--ckpt-every", flags.ckpt_every, "checkpoint every N steps")->capture_default_str();
  cmd->add_option("--log-every", flags.log_every, "metrics line every N steps")->capture_default_str();
  cmd->add_option("--sample-tokens", flags.sample_tokens, "gpt: tokens sampled at the end")->capture_default_str();
  cmd->add_option("--memory-budget", flags.memory_budget,
                  "plan every step within this much device memory (e.g. 64MB); refuse before allocating if not");
  cmd->add_option("--nproc", nproc,
                  "data parallel over N local processes (--batch stays the global batch; or launch with mpirun)")
      ->capture_default_str();
  cmd->add_option("--zero", flags.zero, "1: ZeRO-1, the optimizer state sharded over the ranks")->capture_default_str();
  cmd->callback([cmd] {
    if (nproc > 1 && !dist::launched()) {
      const int code = dist::launch_local(nproc);
      if (code != 0) throw CLI::RuntimeError(code);
      return;
    }
    train::Config c;
    if (flags.task == "mnist") {  // MNIST's own defaults
      c.task = "mnist";
      c.out = "runs/mnist";
      c.steps = 1200;
      c.batch = 64;
      c.lr = 2e-3;
      c.min_lr = 1e-4;
      c.warmup = 50;
      c.weight_decay = 0.01;
      c.log_every = 50;
      c.ckpt_every = 400;
    }
    if (!resume_dir.empty()) {
      c = train::config_from_json(read_file(resume_dir + "/config.json", "train"), c);
      c.out = resume_dir;
    }
    if (!config_file.empty()) c = train::config_from_json(read_file(config_file, "train"), c);
    // Every flag given on the command line wins.
    auto given = [cmd](const char* name) { return cmd->count(name) > 0; };
    if (given("--task")) c.task = flags.task;
    if (given("--corpus")) c.corpus = flags.corpus;
    if (given("--init-from")) c.init_from = flags.init_from;
    if (given("--warmup")) c.warmup = flags.warmup;
    if (given("--data")) c.data = flags.data;
    if (given("--steps")) c.steps = flags.steps;
    if (given("--device")) c.device = flags.device;
    if (given("--dtype")) c.dtype = flags.dtype;
    if (given("--out")) c.out = flags.out;
    if (given("--seed")) c.seed = flags.seed;
    if (given("--batch")) c.batch = flags.batch;
    if (given("--ctx")) c.ctx = flags.ctx;
    if (given("--dim")) c.dim = flags.dim;
    if (given("--layers")) c.layers = flags.layers;
    if (given("--heads")) c.heads = flags.heads;
    if (given("--vocab-size")) c.vocab_size = flags.vocab_size;
    if (given("--lr")) c.lr = flags.lr;
    if (given("--eval-every")) c.eval_every = flags.eval_every;
    if (given("--ckpt-every")) c.ckpt_every = flags.ckpt_every;
    if (given("--log-every")) c.log_every = flags.log_every;
    if (given("--sample-tokens")) c.sample_tokens = flags.sample_tokens;
    if (given("--memory-budget")) c.memory_budget = flags.memory_budget;
    if (given("--zero")) c.zero = flags.zero;
    c = train::config_from_json(train::config_to_json(c), train::Config{});  // validates
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    train::Result r;
    try {
      r = train::run(c, !resume_dir.empty(), std::cerr, &g_stop);
    } catch (const Error& e) {
      // One rank failing alone would leave the others waiting in a collective: end the job.
      if (dist::launched()) {
        // One write: the ranks share the terminal.
        std::cerr << ("alk " + e.op() + ": " + e.detail() + " (rank " + std::to_string(dist::rank()) + "; ending the job)\n");
        dist::abort_job(1);
      }
      throw;
    }
    if (r.interrupted) {
      std::cerr << "interrupted: checkpoint saved in " << c.out << "; continue with: alk train --resume " << c.out
                << "\n";
      throw CLI::RuntimeError(128 + (g_signal.load() != 0 ? g_signal.load() : SIGINT));  // the shell's convention
    }
  });
}

}  // namespace alk::cli
