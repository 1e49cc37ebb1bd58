#include "backend/vulkan/shader.h"

#include <shaderc/shaderc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "runtime/disk_cache.h"

namespace alk::vk {

namespace {

std::string first_lines(const std::string& s, int n) {
  std::istringstream in(s);
  std::string out, line;
  for (int i = 1; i <= n && std::getline(in, line); ++i) out += std::to_string(i) + ": " + line + "\n";
  return out;
}

constexpr std::string_view kMagic{"ALKSPV2\n", 8};

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
    fail("GLSL compile of " + name + " failed:\n" + log + "source (first lines):\n" + first_lines(source, std::getenv("ALK_VK_FULL_SOURCE") ? 100000 : 12));
  }
  const size_t bytes = shaderc_result_get_length(result.get());
  std::vector<uint32_t> words(bytes / 4);
  std::memcpy(words.data(), shaderc_result_get_bytes(result.get()), words.size() * 4);
  return words;
}

std::string cache_dir() {
  static const std::string dir = alk::cache_dir("vulkan");
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
  std::optional<std::string> stored = path.empty() ? std::nullopt : read_cache_entry(path, kMagic, source);
  if (stored && stored->size() >= 20 && stored->size() % 4 == 0) {
    words.resize(stored->size() / 4);
    std::memcpy(words.data(), stored->data(), stored->size());
  }
  if (!words.empty() && words[0] == 0x07230203u) {  // the SPIR-V magic number
    ++stats_.disk_hits;
  } else {
    if (!path.empty() && ::access(path.c_str(), F_OK) == 0) ++stats_.disk_rejected;
    words = compile_glsl(source);
    ++stats_.compiles;
    if (!path.empty())
      write_cache_entry(path, kMagic, source,
                        std::string_view(reinterpret_cast<const char*>(words.data()), words.size() * 4));
  }
  return memory_.emplace(source, std::move(words)).first->second;
}

ShaderCache::Stats ShaderCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace alk::vk
