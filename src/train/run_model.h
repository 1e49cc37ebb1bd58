// A trained GPT run directory as a model to generate from: its config, tokenizer and
// committed checkpoint (what `alk sample` and `alk generate` load).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "alk/nn.h"
#include "alk/pretrained.h"
#include "alk/tokenizer.h"
#include "alk/train.h"

namespace alk::train {

struct RunModel {
  Config config;
  Tokenizer tokenizer;
  std::shared_ptr<nn::GPT> model;  // in eval mode, on the device asked for
  std::optional<HfModelInfo> hf;   // runs fine-tuning a Hugging Face model (--init-from): what hf/config.json says
  std::string hf_dir;              // that run's hf/ directory (config and tokenizer files)
};

// A run fine-tuning a Hugging Face model keeps its config and tokenizer files here.
inline std::string hf_files_dir(const std::string& run_dir) { return run_dir + "/hf"; }

// device: a registry spec ("cpu", "cuda:0", "vulkan:0", "auto"); "" keeps the default device.
RunModel load_run_model(const std::string& dir, const std::string& device = "", Loc loc = Loc::current());

}  // namespace alk::train
