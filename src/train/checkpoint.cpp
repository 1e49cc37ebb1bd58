#include <cstdio>
#include <filesystem>
#include <map>

#include "alk/io.h"
#include "train/job.h"

namespace alk::train {

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                     const std::string& config_json) {
  const std::map<std::string, std::string> meta{{"format", "alk"},
                                                {"step", std::to_string(step)},
                                                {"rng_seed", std::to_string(random_seed())},
                                                {"rng_offset", std::to_string(random_offset())}};
  // Optimizer first, model last: a model file at step N implies its optimizer is there too.
  save_safetensors(dir + "/optimizer.safetensors", opt.state_dict(), meta);
  auto model_meta = meta;
  model_meta["config"] = config_json;
  save_safetensors(dir + "/model.safetensors", model.state_dict(), model_meta);
}

int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& opt) {
  const Loc loc = Loc::current();
  check(std::filesystem::exists(dir + "/model.safetensors"), "resume", loc, "no checkpoint in ", dir,
        " (model.safetensors is missing)");
  SafetensorsFile m = load_safetensors(dir + "/model.safetensors");
  SafetensorsFile o = load_safetensors(dir + "/optimizer.safetensors");
  auto get = [&](const SafetensorsFile& f, const char* key) {
    auto it = f.metadata.find(key);
    check(it != f.metadata.end(), "resume", loc, "checkpoint metadata has no '", key, "'");
    return std::stoull(it->second);
  };
  const uint64_t step = get(m, "step");
  check(get(o, "step") == step, "resume", loc, "model (step ", step, ") and optimizer (step ", get(o, "step"),
        ") checkpoints differ: the run was interrupted between the two writes");
  model.load_state_dict(m.tensors);
  opt.load_state_dict(o.tensors);
  set_random_state(get(m, "rng_seed"), get(m, "rng_offset"));
  return static_cast<int64_t>(step);
}

}  // namespace alk::train
