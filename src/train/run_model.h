// A trained GPT run directory as a model to generate from: its config, tokenizer and
// committed checkpoint (what `alk sample` and `alk generate` load).
#pragma once
#include <memory>
#include <string>

#include "alk/nn.h"
#include "alk/tokenizer.h"
#include "alk/train.h"

namespace alk::train {

struct RunModel {
  Config config;
  Tokenizer tokenizer;
  std::shared_ptr<nn::GPT> model;  // in eval mode, on the device asked for
};

// device: a registry spec ("cpu", "cuda:0", "vulkan:0", "auto"); "" keeps the default device.
RunModel load_run_model(const std::string& dir, const std::string& device = "", Loc loc = Loc::current());

}  // namespace alk::train
