#include "backend/vulkan/shader.h"

#include <shaderc/shaderc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace alk::vk {

namespace {

// FNV-1a, 64 bits: only names files; entries are verified against the full source.
uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string first_lines(const std::string& s, int n) {
  std::istringstream in(s);
  std::string out, line;
  for (int i = 1; i <= n && std::getline(in, line); ++i) out += std::to_string(i) + ": " + line + "\n";
  return out;
}

bool make_dirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string part = path.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(path.c_str(), W_OK) == 0;
}

constexpr char kMagic[8] = {'A', 'L', 'K', 'S', 'P', 'V', '1', '\n'};

// File: magic, u64 source bytes, source, u64 SPIR-V words, words.
bool read_entry(const std::string& path, const std::string& source, std::vector<uint32_t>& spirv) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  char magic[8];
  uint64_t n = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return false;
  if (!in.read(reinterpret_cast<char*>(&n), 8) || n != source.size() || n > size) return false;
  std::string stored(n, '\0');
  if (!in.read(stored.data(), static_cast<std::streamsize>(n)) || stored != source) return false;
  uint64_t words = 0;
  if (!in.read(reinterpret_cast<char*>(&words), 8) || words < 5 || words * 4 != size - 24 - n) return false;
  spirv.resize(words);
  if (!in.read(reinterpret_cast<char*>(spirv.data()), static_cast<std::streamsize>(words * 4))) return false;
  return spirv[0] == 0x07230203u;  // the SPIR-V magic number
}

void write_entry(const std::string& path, const std::string& source, const std::vector<uint32_t>& spirv) {
  // Written beside, then renamed: a reader never sees half a file.
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    const uint64_t n = source.size(), words = spirv.size();
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(source.data(), static_cast<std::streamsize>(n));
    out.write(reinterpret_cast<const char*>(&words), 8);
    out.write(reinterpret_cast<const char*>(spirv.data()), static_cast<std::streamsize>(words * 4));
    if (!out) {
      std::remove(tmp.c_str());
      return;  // a full disk costs a recompile next time, nothing more
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace

std::vector<uint32_t> compile_glsl(const std::string& source, const std::string& name) {
  // shaderc compilers are thread-safe to use concurrently; one per process is enough.
  static shaderc_compiler_t compiler = shaderc_compiler_initialize();
  if (!compiler) fail("shaderc_compiler_initialize failed");
  std::unique_ptr<shaderc_compile_options, void (*)(shaderc_compile_options_t)> options(
      shaderc_compile_options_initialize(), shaderc_compile_options_release);
  shaderc_compile_options_set_target_env(options.get(), shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_2);
  // No SPIR-V optimizer: every driver optimizes the module itself, and the passes would
  // cost compile time for each of the many small Map kernels.
  shaderc_compile_options_set_optimization_level(options.get(), shaderc_optimization_level_zero);
  std::unique_ptr<shaderc_compilation_result, void (*)(shaderc_compilation_result_t)> result(
      shaderc_compile_into_spv(compiler, source.data(), source.size(), shaderc_compute_shader, name.c_str(), "main",
                               options.get()),
      shaderc_result_release);
  if (!result || shaderc_result_get_compilation_status(result.get()) != shaderc_compilation_status_success) {
    std::string log = result ? shaderc_result_get_error_message(result.get()) : "no result";
    fail("GLSL compile of " + name + " failed:\n" + log + "source (first lines):\n" + first_lines(source, 12));
  }
  const size_t bytes = shaderc_result_get_length(result.get());
  std::vector<uint32_t> words(bytes / 4);
  std::memcpy(words.data(), shaderc_result_get_bytes(result.get()), words.size() * 4);
  return words;
}

std::string cache_dir() {
  static const std::string dir = [] {
    std::string base;
    if (const char* d = std::getenv("ALK_CACHE_DIR"); d && *d) base = d;
    else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = std::string(x) + "/alk";
    else if (const char* h = std::getenv("HOME"); h && *h) base = std::string(h) + "/.cache/alk";
    if (base.empty()) return std::string();
    std::string d = base + "/vulkan";
    return make_dirs(d) ? d : std::string();
  }();
  return dir;
}

ShaderCache::ShaderCache(std::string dir, std::string device_key) : dir_(std::move(dir)), device_key_(std::move(device_key)) {}

std::string ShaderCache::path_for(const std::string& source) const {
  if (dir_.empty()) return "";
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.spv",
                static_cast<unsigned long long>(fnv1a(source, fnv1a(device_key_))));
  return dir_ + "/" + name;
}

const std::vector<uint32_t>& ShaderCache::spirv(const std::string& source) {
  std::lock_guard lock(mutex_);
  if (auto it = memory_.find(source); it != memory_.end()) {
    ++stats_.memory_hits;
    return it->second;
  }
  std::vector<uint32_t> words;
  const std::string path = path_for(source);
  if (!path.empty() && read_entry(path, source, words)) {
    ++stats_.disk_hits;
  } else {
    if (!path.empty() && ::access(path.c_str(), F_OK) == 0) ++stats_.disk_rejected;
    words = compile_glsl(source);
    ++stats_.compiles;
    if (!path.empty()) write_entry(path, source, words);
  }
  return memory_.emplace(source, std::move(words)).first->second;
}

ShaderCache::Stats ShaderCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void ShaderCache::clear_memory() {
  std::lock_guard lock(mutex_);
  memory_.clear();
}

}  // namespace alk::vk
