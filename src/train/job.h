// Pieces shared by the training jobs (src/train/*_job.cpp).
#pragma once
#include <atomic>
#include <iosfwd>
#include <string>

#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/train.h"

namespace alk::train {

Result run_gpt(const Config& c, bool resume, std::ostream& log, const std::atomic<bool>* stop);
Result run_mnist(const Config& c, bool resume, std::ostream& log, const std::atomic<bool>* stop);

// model.safetensors + optimizer.safetensors (+ the RNG state and step in their metadata),
// each written atomically. load_checkpoint returns the step to continue from.
void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                     const std::string& config_json);
int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& opt);

}  // namespace alk::train
