// alk::parse_npy on arbitrary bytes: every header field, size and dtype is checked; an array
// that parses must write (npy_bytes) and parse again to the same shape, dtype and bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "alk/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  alk::Tensor t;
  try {
    t = alk::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
  } catch (const alk::Error&) {
    return 0;
  }
  const std::string again = alk::npy_bytes(t);
  alk::Tensor u = alk::parse_npy(again, "round trip");
  if (u.shape() != t.shape() || u.dtype() != t.dtype() || alk::npy_bytes(u) != again) std::abort();
  return 0;
}
