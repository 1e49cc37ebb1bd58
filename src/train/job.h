// Pieces shared by the training jobs (src/train/*_job.cpp).
#pragma once
#include <atomic>
#include <iosfwd>
#include <optional>
#include <string>

#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/train.h"

namespace alk::train {

// The model a run's config describes (config.json's model fields), with the tokenizer's vocab.
nn::GPTConfig gpt_config(const Config& c, int64_t vocab);

Result run_gpt(const Config& c, bool resume, std::ostream& log, const std::atomic<bool>* stop);
Result run_mnist(const Config& c, bool resume, std::ostream& log, const std::atomic<bool>* stop);

// model.safetensors + optimizer.safetensors (+ the RNG state and step in their metadata),
// committed together (checkpoint.cpp says how). load_checkpoint returns the step to
// continue from.
struct CheckpointFiles {
  std::string model, optimizer;
  int64_t step = -1;  // from checkpoint.json; -1 for a run directory older than it
};
// The committed checkpoint of a run directory, or nothing when it has none.
std::optional<CheckpointFiles> find_checkpoint(const std::string& dir, Loc loc = Loc::current());
// Removes what writers killed in the middle of a write left in a run directory (temporary
// files, uncommitted checkpoint directories). A run starts with it.
void remove_stale_files(const std::string& dir);
void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                     const std::string& config_json);
int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& opt);

}  // namespace alk::train
