// What a run directory's small files are parsed by: config.json (config_from_json and the
// memory budget's size), checkpoint.json (find_checkpoint) and metrics.jsonl (read_metrics,
// truncate_metrics); the input's three parts are split at "\n----\n" lines.
#include <cstdint>
#include <string>
#include <string_view>

#include "alk/train.h"
#include "fuzz_util.h"
#include "train/job.h"
#include "train/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string config(alk::fuzz::next_part(rest));
  try {
    alk::train::Config c = alk::train::config_from_json(config, alk::train::Config{});
    alk::train::config_from_json(alk::train::config_to_json(c), alk::train::Config{});  // round trip
  } catch (const alk::Error&) {
  }
  const std::string& dir = alk::fuzz::scratch_dir();
  alk::fuzz::write_scratch("checkpoint.json", alk::fuzz::next_part(rest));
  try {
    alk::train::find_checkpoint(dir);
  } catch (const alk::Error&) {
  }
  const std::string metrics = alk::fuzz::write_scratch("metrics.jsonl", alk::fuzz::next_part(rest));
  try {
    alk::train::read_metrics(metrics);
    alk::train::truncate_metrics(metrics, 5);
  } catch (const alk::Error&) {
  }
  try {
    alk::train::parse_bytes(std::string(rest));
  } catch (const alk::Error&) {
  }
  return 0;
}
