// load_safetensors and read_safetensors_header on arbitrary bytes: every size and offset is
// checked; a file that loads must save and load again with the same tensors.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "alk/io.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      alk::fuzz::write_scratch("in.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    alk::read_safetensors_header(path);
  } catch (const alk::Error&) {
  }
  alk::SafetensorsFile f;
  try {
    f = alk::load_safetensors(path);
  } catch (const alk::Error&) {
    return 0;
  }
  const std::string again = alk::fuzz::scratch_dir() + "/again.safetensors";
  alk::save_safetensors(again, f.tensors, f.metadata);
  alk::SafetensorsFile g = alk::load_safetensors(again);
  if (g.tensors.size() != f.tensors.size() || g.metadata != f.metadata) std::abort();
  for (size_t i = 0; i < f.tensors.size(); ++i)
    if (g.tensors[i].first != f.tensors[i].first || g.tensors[i].second.shape() != f.tensors[i].second.shape())
      std::abort();
  return 0;
}
