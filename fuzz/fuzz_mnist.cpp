// load_mnist on four IDX files (the input's parts, split at "\n----\n" lines: train images,
// train labels, test images, test labels).
#include <cstdint>
#include <string_view>

#include "alk/data.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  alk::fuzz::write_scratch("train-images-idx3-ubyte", alk::fuzz::next_part(rest));
  alk::fuzz::write_scratch("train-labels-idx1-ubyte", alk::fuzz::next_part(rest));
  alk::fuzz::write_scratch("t10k-images-idx3-ubyte", alk::fuzz::next_part(rest));
  alk::fuzz::write_scratch("t10k-labels-idx1-ubyte", alk::fuzz::next_part(rest));
  for (bool train : {true, false}) {
    try {
      alk::MnistSplit s = alk::load_mnist(alk::fuzz::scratch_dir(), train);
      s.images.realize();
      s.labels.realize();
    } catch (const alk::Error&) {
    }
  }
  return 0;
}
