// `alk sample`: text from a trained GPT run directory (train::sample: the KV-cache engine of
// `alk generate`, with its sampling rule, when the prompt and tokens fit the context).
#include <iostream>

#include "alk/train.h"
#include "tools/alk/commands.h"

namespace alk::cli {

void add_sample_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "generate text from a trained GPT");
  static std::string dir, prompt = "\n";
  static int64_t tokens = 200, top_k = 40;
  static double temperature = 0.8;
  static uint64_t seed = 0;
  cmd->add_option("--from", dir, "run directory written by alk train")->required();
  cmd->add_option("--prompt", prompt, "text to continue");
  cmd->add_option("--tokens", tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", temperature, "softmax temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", top_k, "sample among the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--seed", seed, "random seed")->capture_default_str();
  cmd->callback([] { std::cout << train::sample(dir, prompt, tokens, temperature, top_k, seed) << "\n"; });
}

}  // namespace alk::cli
