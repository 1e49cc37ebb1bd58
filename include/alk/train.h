// The training jobs behind `alk train` and `alk sample`: a GPT on raw text and a CNN on
// MNIST, with checkpoints, resume, metrics and a loss curve in one run directory:
//   config.json  model.safetensors  optimizer.safetensors  metrics.jsonl  loss.svg
//   tokenizer/vocab.json  tokenizer/merges.txt  tokens.bin (the tokenized corpus cache)
//   hf/ (--init-from runs: the Hugging Face directory's config and tokenizer files)
//   checkpoint.json  checkpoints/step-N/{model,optimizer}.safetensors (the committed pair;
//   the top-level pair are hard links to it; src/train/checkpoint.cpp)
#pragma once
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "alk/error.h"

namespace alk::nn {
class Sequential;
}

namespace alk::train {

struct Config {
  std::string task = "gpt";  // gpt | mnist
  std::string corpus;        // gpt: text file; "" = the KJV Bible (Debian's bible-kjv), cached in data/
  std::string data;          // mnist: directory of IDX files; "" = find_mnist_dir()
  std::string out = "runs/gpt";
  // gpt: a Hugging Face model directory to fine-tune (alk/pretrained.h): its architecture,
  // weights and tokenizer replace ctx-independent model flags (dim, heads, layers,
  // vocab_size); its config and tokenizer files are copied to the run's hf/ directory.
  std::string init_from;
  std::string device = "auto";  // auto (the best GPU found, else the CPU), cpu, cuda:N, vulkan:N (`alk devices`)
  std::string dtype = "f32";     // f32, or bf16 / f16: mixed precision (Autocast; f32 master weights)
  uint64_t seed = 1337;
  int64_t steps = 2000;
  int64_t batch = 8;
  // GPT
  int64_t ctx = 128, dim = 128, heads = 4, layers = 4, vocab_size = 1024;
  double dropout = 0;
  // The model's family: GPT-2 (these defaults) or the LLaMA family, as nn::GPTConfig's fields of
  // the same names (0 for kv_heads and mlp_hidden: heads and 4 * dim).
  int64_t kv_heads = 0, mlp_hidden = 0;
  std::string norm = "layernorm";      // layernorm | rmsnorm
  double norm_eps = 1e-5;
  std::string positions = "learned";  // learned | rotary
  double rope_theta = 10000;
  std::string rope_scaling;           // "" | llama3, with the factors below
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int64_t rope_original_context = 0;
  std::string mlp = "gelu_tanh";      // gelu_tanh | swiglu
  bool bias = true, qkv_bias = false, tie_embeddings = true;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, grad_clip = 1.0;
  int64_t warmup = 100;
  double val_fraction = 0.05;
  int64_t eval_every = 200, eval_batches = 8, ckpt_every = 500, log_every = 10;
  int64_t sample_tokens = 200;  // printed at the end of a GPT run (0 = none)
  // Device memory the run may plan: "" = no limit; "64MB", "1.5GB", "512KB" (powers of 1024),
  // or a number of bytes. Every realize, the compiled step's schedules together, is planned
  // under it (parameters counted) and refused before allocating when it does not fit.
  std::string memory_budget;
  // Multi-rank runs (mpirun, alk train --nproc): 1 = ZeRO-1, the optimizer state sharded
  // over the ranks (the same losses; its memory divided by the world size).
  int64_t zero = 0;
};

// "64MB" -> 67108864 (KB/MB/GB and KiB/MiB/GiB are powers of 1024; a bare number is bytes).
int64_t parse_bytes(const std::string& text, Loc loc = Loc::current());

// config.json <-> Config. Keys not present keep `base`'s value; unknown keys are an error.
std::string config_to_json(const Config& c);
Config config_from_json(const std::string& text, Config base, Loc loc = Loc::current());

struct Result {
  int64_t steps_done = 0;
  std::vector<double> losses;  // training loss per step run in this call
  double val_loss = 0;         // last measured (gpt)
  double test_accuracy = 0;    // mnist
  bool interrupted = false;
};

// Runs (or resumes, when cfg.out holds a checkpoint and `resume` is set) a job. Progress
// goes to `log`; `stop` (set by Ctrl-C) ends the run after the current step, with a checkpoint.
Result run(const Config& cfg, bool resume, std::ostream& log, const std::atomic<bool>* stop = nullptr);

// Generates `tokens` tokens after `prompt` from a GPT run directory.
std::string sample(const std::string& dir, const std::string& prompt, int64_t tokens, double temperature = 0.8,
                   int64_t top_k = 40, uint64_t seed = 0, Loc loc = Loc::current());

// The CNN `alk train --task mnist` trains ([N, 1, 28, 28] -> logits [N, 10]), freshly initialized.
std::shared_ptr<nn::Sequential> mnist_cnn();

// The default corpus: data/kjv.txt, made with Debian's `bible` program if missing.
std::string default_corpus(Loc loc = Loc::current());

}  // namespace alk::train
