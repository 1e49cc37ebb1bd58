// Tokenizer::load on a vocab.json and merges.txt (the input's two parts, split at a
// "\n----\n" line); a tokenizer that loads must encode and decode text.
#include <cstdint>
#include <string_view>

#include "alk/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  alk::fuzz::write_scratch("vocab.json", alk::fuzz::next_part(rest));
  alk::fuzz::write_scratch("merges.txt", alk::fuzz::next_part(rest));
  try {
    alk::Tokenizer tok = alk::Tokenizer::load(alk::fuzz::scratch_dir());
    const std::string text = "Hello, world! The 3 cats' naïve café\n";
    tok.decode(tok.encode(text));
    tok.encode(rest);  // what is left of the input, as text
  } catch (const alk::Error&) {
  }
  return 0;
}
