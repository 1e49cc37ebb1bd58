// Checkpoints committed as one unit. A checkpoint is a directory
//   DIR/checkpoints/step-00000020/{model,optimizer}.safetensors
// and DIR/checkpoint.json ({"step": 20, "dir": "checkpoints/step-00000020"}) names the one
// that is complete. A save writes the new directory (each file atomically, fsynced), then
// replaces checkpoint.json atomically: that rename is the commit. Only after it are the
// older directories removed, so a kill at any moment leaves checkpoint.json naming a
// complete pair. DIR/model.safetensors and DIR/optimizer.safetensors are hard links to the
// committed pair, for `alk sample`, `alk inspect` and other readers of a run directory; they
// are replaced after the commit, so they can lag one checkpoint behind when a kill lands
// in between, and readers that must agree with the step (resume, sample) go through
// checkpoint.json. A failed save (disk full, a file size limit) removes what it wrote and
// leaves the previous checkpoint as it was.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "alk/io.h"
#include "io/json.h"
#include "train/job.h"

namespace alk::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "checkpoint.json";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

// Replaces DIR/NAME with a hard link to `target` (a copy where links are not supported),
// atomically: the link is made under a temporary name and renamed over NAME.
void link_atomic(const std::string& target, const std::string& path, Loc loc) {
  const std::string tmp = path + ".link-tmp";
  ::unlink(tmp.c_str());
  if (::link(target.c_str(), tmp.c_str()) == 0) {
    if (::rename(tmp.c_str(), path.c_str()) == 0) return;
    ::unlink(tmp.c_str());
  }
  write_file_atomic(path, read_file(target, "checkpoint", loc), loc);
}

}  // namespace

std::optional<CheckpointFiles> find_checkpoint(const std::string& dir, Loc loc) {
  const std::string manifest = dir + "/" + kManifest;
  if (std::optional<std::string> text = try_read_file(manifest)) {
    json::Value v;
    try {
      v = json::parse(*text, json::kDefaultMaxDepth, loc);
    } catch (const Error& e) {
      fail("checkpoint", loc, manifest, " is not valid JSON: ", e.detail());
    }
    const json::Value* step = v.is_object() ? v.find("step", loc) : nullptr;
    const json::Value* sub = v.is_object() ? v.find("dir", loc) : nullptr;
    check(step && sub && step->is_int() && sub->is_string(), "checkpoint", loc, manifest,
          " must hold {\"step\": N, \"dir\": \"checkpoints/...\"}");
    const std::string& name = sub->as_string(loc);
    check(name.rfind("checkpoints/", 0) == 0 && name.find("..") == std::string::npos, "checkpoint", loc, manifest,
          " names '", name, "', not a directory under checkpoints/");
    return CheckpointFiles{dir + "/" + name + "/model.safetensors", dir + "/" + name + "/optimizer.safetensors",
                           step->as_int(loc)};
  }
  // A run directory written before checkpoint.json existed: the pair at the top level.
  if (fs::exists(dir + "/model.safetensors"))
    return CheckpointFiles{dir + "/model.safetensors", dir + "/optimizer.safetensors", -1};
  return std::nullopt;
}

void remove_stale_files(const std::string& dir) {
  std::error_code ec;
  // AtomicFile's temporaries (".NAME.tmp-XXXXXX") and link_atomic's, left by a killed writer.
  for (const std::string& d : {dir, dir + "/tokenizer"})
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const std::string name = e.path().filename().string();
      if ((name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos) ||
          name.ends_with(".link-tmp"))
        fs::remove(e.path(), ec);
    }
  // Checkpoint directories that checkpoint.json does not name: a save that was killed.
  std::optional<CheckpointFiles> committed;
  try {
    committed = find_checkpoint(dir);
  } catch (const Error&) {
    return;  // a damaged manifest is reported by whoever reads it; delete nothing
  }
  if (!committed || committed->step < 0) return;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints", ec))
    if (committed->model.find("/checkpoints/" + e.path().filename().string() + "/") == std::string::npos)
      fs::remove_all(e.path(), ec);
}

// A test hook (tests/train/test_crash_safety.cpp): ALK_TEST_PAUSE_IN_SAVE="<point>,<step>,<file>"
// stops this process (SIGSTOP) at `point` of the save of `step`, once it has created `file`, so
// the test's SIGKILL lands there and nowhere else. Points: "optimizer" (its file written, the
// model's not), "model" (both written, not committed), "commit" (committed, not yet linked).
static void test_pause_point(const char* point, int64_t step) {
  static const char* spec = std::getenv("ALK_TEST_PAUSE_IN_SAVE");
  if (!spec || !*spec) return;
  const std::string s = spec;
  const size_t a = s.find(','), b = a == std::string::npos ? a : s.find(',', a + 1);
  if (b == std::string::npos || s.compare(0, a, point) != 0 || s.substr(a + 1, b - a - 1) != std::to_string(step)) return;
  std::ofstream(s.substr(b + 1)) << point << " " << step << "\n";
  ::raise(SIGSTOP);
}

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& opt, int64_t step,
                     const std::string& config_json) {
  const Loc loc = Loc::current();
  const std::map<std::string, std::string> meta{{"format", "alk"},
                                                {"step", std::to_string(step)},
                                                {"rng_seed", std::to_string(random_seed())},
                                                {"rng_offset", std::to_string(random_offset())}};
  // A fresh name: never the committed directory, even when this save repeats its step.
  std::string name = step_name(step);
  for (int n = 1; fs::exists(dir + "/checkpoints/" + name); ++n) name = step_name(step) + "." + std::to_string(n);
  const std::string rel = "checkpoints/" + name, sub = dir + "/" + rel;
  try {
    fs::create_directories(sub);
    save_safetensors(sub + "/optimizer.safetensors", opt.state_dict(), meta);
    test_pause_point("optimizer", step);
    auto model_meta = meta;
    model_meta["config"] = config_json;
    save_safetensors(sub + "/model.safetensors", model.state_dict(), model_meta);
    test_pause_point("model", step);
    json::Object m;
    m.emplace_back("step", json::Value(step));
    m.emplace_back("dir", json::Value(rel));
    write_file_atomic(dir + "/" + kManifest, json::dump(json::Value(std::move(m))) + "\n", loc);  // the commit
  } catch (...) {
    std::error_code ec;
    fs::remove_all(sub, ec);  // best effort; the previous checkpoint is untouched either way
    throw;
  }
  test_pause_point("commit", step);
  link_atomic(sub + "/model.safetensors", dir + "/model.safetensors", loc);
  link_atomic(sub + "/optimizer.safetensors", dir + "/optimizer.safetensors", loc);
  // Older checkpoints, and directories a killed save left behind.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints", ec))
    if (e.path().filename() != name) fs::remove_all(e.path(), ec);
}

int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& opt) {
  const Loc loc = Loc::current();
  const std::optional<CheckpointFiles> files = find_checkpoint(dir, loc);
  check(files.has_value(), "resume", loc, "no checkpoint in ", dir, " (", kManifest,
        " and model.safetensors are missing)");
  SafetensorsFile m = load_safetensors(files->model, loc);
  SafetensorsFile o = load_safetensors(files->optimizer, loc);
  auto get = [&](const SafetensorsFile& f, const char* key) {
    auto it = f.metadata.find(key);
    check(it != f.metadata.end(), "resume", loc, "checkpoint metadata has no '", key, "'");
    uint64_t v = 0;
    try {
      v = std::stoull(it->second);
    } catch (const std::exception&) {
      fail("resume", loc, "checkpoint metadata '", key, "' is not a number: '", it->second, "'");
    }
    return v;
  };
  const uint64_t step = get(m, "step");
  check(get(o, "step") == step, "resume", loc, "model (step ", step, ") and optimizer (step ", get(o, "step"),
        ") checkpoints differ: the run was interrupted between the two writes");
  check(files->step < 0 || static_cast<uint64_t>(files->step) == step, "resume", loc, dir, "/", kManifest,
        " says step ", files->step, " but ", files->model, " holds step ", step);
  model.load_state_dict(m.tensors, true, loc);
  opt.load_state_dict(o.tensors);
  set_random_state(get(m, "rng_seed"), get(m, "rng_offset"));
  return static_cast<int64_t>(step);
}

}  // namespace alk::train
