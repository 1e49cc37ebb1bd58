// GLSL -> SPIR-V (shaderc, linked statically), cached in memory by the full source text
// and on disk, and the compute pipelines built from it.
//
// Disk cache: one file per shader in the cache directory ($ALK_CACHE_DIR/vulkan, else
// $XDG_CACHE_HOME/alk/vulkan, else ~/.cache/alk/vulkan), named by a 64-bit hash of the
// source, the device, its driver version and the compiler version. The file stores the
// source it was compiled from; an entry is used only when that source equals the one
// asked for and the SPIR-V is well formed, so a hash collision or a damaged file costs a
// recompile, never a wrong kernel.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/vulkan/loader.h"

namespace alk::vk {

// Compiles a compute shader for Vulkan 1.2. Throws alk::Error with the compiler log and
// the first lines of the source when it does not compile.
std::vector<uint32_t> compile_glsl(const std::string& source, const std::string& name = "kernel.comp");

// The cache directory ("" when none is writable: then only the memory cache is used).
std::string cache_dir();

class ShaderCache {
 public:
  // `device_key` names the device and driver (part of every disk entry's name).
  ShaderCache(std::string dir, std::string device_key);
  const std::vector<uint32_t>& spirv(const std::string& source);

  struct Stats {
    int64_t memory_hits = 0, disk_hits = 0, compiles = 0, disk_rejected = 0;
  };
  Stats stats() const;
  // The disk file an entry for `source` lives in ("" without a disk cache).
  std::string path_for(const std::string& source) const;

 private:
  std::string dir_, device_key_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::vector<uint32_t>> memory_;  // full source -> SPIR-V
  Stats stats_;
};

struct Pipeline {
  VkShaderModule module = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t bindings = 0, push_bytes = 0;
};

}  // namespace alk::vk
