#include "runtime/disk_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace alk {

bool make_dirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string part = path.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(path.c_str(), W_OK) == 0;
}

std::string cache_dir(std::string_view sub) {
  std::string base;
  if (const char* d = std::getenv("ALK_CACHE_DIR"); d && *d) base = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = std::string(x) + "/alk";
  else if (const char* h = std::getenv("HOME"); h && *h) base = std::string(h) + "/.cache/alk";
  if (base.empty()) return "";
  std::string dir = base + "/" + std::string(sub);
  return make_dirs(dir) ? dir : std::string();
}

uint64_t fnv1a(std::string_view s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::optional<std::string> read_cache_entry(const std::string& path, std::string_view magic, std::string_view key) {
  std::ifstream in(path, std::ios::binary);
  if (!in || magic.size() != 8) return std::nullopt;
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  char stored_magic[8];
  uint64_t n = 0;
  if (!in.read(stored_magic, 8) || std::string_view(stored_magic, 8) != magic) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&n), 8) || n != key.size() || n > size) return std::nullopt;
  std::string stored(n, '\0');
  if (!in.read(stored.data(), static_cast<std::streamsize>(n)) || stored != key) return std::nullopt;
  uint64_t bytes = 0;
  if (!in.read(reinterpret_cast<char*>(&bytes), 8) || bytes != size - 24 - n) return std::nullopt;
  std::string payload(bytes, '\0');
  if (!in.read(payload.data(), static_cast<std::streamsize>(bytes))) return std::nullopt;
  return payload;
}

void write_cache_entry(const std::string& path, std::string_view magic, std::string_view key, std::string_view payload) {
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    const uint64_t n = key.size(), bytes = payload.size();
    out.write(magic.data(), 8);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(key.data(), static_cast<std::streamsize>(n));
    out.write(reinterpret_cast<const char*>(&bytes), 8);
    out.write(payload.data(), static_cast<std::streamsize>(bytes));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace alk
