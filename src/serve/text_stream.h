// A generation's bytes turned into the text a client is sent: stop strings cut the text before
// them (and end the generation), text that might be the start of a stop string is held back
// until it is not, and so is an incomplete UTF-8 sequence at the end (a token may end inside a
// character). What is emitted is always valid UTF-8 (invalid bytes become U+FFFD).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace alk::serve {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop = {});
  // Appends a token's bytes; returns the text that may be sent now.
  std::string push(std::string_view bytes);
  // The end of the generation: what was held back (stop strings can no longer complete).
  std::string finish();
  bool stopped() const { return stopped_; }  // a stop string was found: nothing more is emitted

 private:
  std::vector<std::string> stop_;
  std::string pending_;  // bytes not yet emitted
  bool stopped_ = false;
};

// Bytes as valid UTF-8: each invalid byte (or incomplete sequence) replaced by U+FFFD.
std::string valid_utf8(std::string_view bytes);
// Bytes at the end of s that start an incomplete (but so far valid) UTF-8 sequence.
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace alk::serve
