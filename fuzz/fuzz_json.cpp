// json::parse: strict RFC 8259 with a depth limit; whatever parses must dump and parse back
// to an equal value.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "alk/error.h"
#include "io/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  alk::json::Value v;
  try {
    v = alk::json::parse(text);
  } catch (const alk::Error&) {
    return 0;
  }
  std::string compact, pretty;
  try {
    compact = alk::json::dump(v);
    pretty = alk::json::dump(v, 2);
  } catch (const alk::Error&) {
    return 0;  // NaN/inf cannot be written (a huge number like 1e999 parses to inf)
  }
  if (!(alk::json::parse(compact) == v) || !(alk::json::parse(pretty) == v)) std::abort();
  return 0;
}
