// Shared by the libFuzzer harnesses: alk's loaders read files, so each input is written to
// a file in a per-process scratch directory first. An alk::Error is the expected answer to
// bad input; anything else (a crash, a sanitizer report, another exception, a hang) is a
// finding.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace alk::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/alk_fuzz_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

// Splits one input into parts at the separator line "\n----\n" (seed files use it too).
inline std::string_view next_part(std::string_view& rest) {
  static constexpr std::string_view kSep = "\n----\n";
  const size_t at = rest.find(kSep);
  std::string_view part = rest.substr(0, at);
  rest = at == std::string_view::npos ? std::string_view() : rest.substr(at + kSep.size());
  return part;
}

}  // namespace alk::fuzz
