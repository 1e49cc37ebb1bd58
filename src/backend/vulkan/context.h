// Vulkan devices: discovery (what each physical device is and offers) and a Context per
// device in use (logical device, one compute queue, the memory pools, the shader and
// pipeline caches, the command stream).
//
// Order of devices, as `vulkan:N` counts them: discrete GPUs, then integrated, then
// virtual, then CPU implementations (lavapipe), each group in the driver's order.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/vulkan/loader.h"
#include "backend/vulkan/memory.h"

namespace alk::vk {

struct DeviceInfo {
  enum class Kind { Discrete, Integrated, Virtual, Cpu, Other };
  int index = 0;  // N in vulkan:N
  Kind kind = Kind::Other;
  std::string name, driver_name, driver_info;
  uint32_t vendor_id = 0, device_id = 0, driver_version = 0, api_version = 0;
  uint8_t pipeline_cache_uuid[VK_UUID_SIZE] = {};
  struct Heap {
    uint64_t bytes = 0;
    bool device_local = false;
  };
  std::vector<Heap> heaps;
  // Limits alk relies on.
  uint64_t min_storage_offset_alignment = 0;
  uint64_t max_storage_buffer_range = 0;
  uint64_t max_memory_allocation = 0;
  uint32_t max_workgroup_count[3] = {};
  uint32_t max_workgroup_size[3] = {};
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_push_constants = 0;
  uint32_t max_shared_memory = 0;  // maxComputeSharedMemorySize (bytes)
  uint32_t max_bound_descriptor_sets = 0;
  uint32_t max_storage_buffers_per_stage = 0;
  // Features (what alk enables when present).
  bool float64 = false, int64 = false, storage16 = false, storage8 = false, float16 = false, int8 = false;
  uint32_t subgroup_size = 0;
  VkSubgroupFeatureFlags subgroup_ops = 0;  // in compute shaders
  bool cooperative_matrix = false;          // VK_KHR_cooperative_matrix offered (not enabled yet)
  // VK_NV_cooperative_matrix with 16x16x16 f16 x f16 + f32 -> f32 at subgroup scope, and
  // 32-wide subgroups: enabled at device creation when offered (the f16 matmul uses it;
  // the KHR extension needs a newer shader compiler than alk builds with today).
  bool cooperative_matrix_nv = false;
  // Every VkCooperativeMatrixPropertiesNV the driver lists, as "MxNxK A*B+C->D scope"
  // (printed by `alk devices` and the GEMM benchmark).
  std::vector<std::string> cooperative_matrix_nv_shapes;
  // VK_KHR_pipeline_executable_properties with pipelineExecutableInfo: the driver can say
  // what it compiled a pipeline to (registers, shared memory, spills: names vary by driver).
  // Enabled only under ALK_VK_PIPELINE_STATS=1 (capturing may cost compile time).
  bool pipeline_statistics = false;
  uint32_t compute_queue_family = UINT32_MAX;
  // Timestamps on that queue (ALK_VK_PROFILE): valid bits (0: none) and ns per tick.
  uint32_t timestamp_bits = 0;
  float timestamp_period = 0;

  std::string kind_name() const;  // "discrete" "integrated" "virtual" "cpu" "other"
  std::string describe() const;   // several lines for `alk devices` and test logs
};

// Every usable device, in vulkan:N order. Empty when there is no loader or no device;
// unavailable_reason() then says why. Never throws.
const std::vector<DeviceInfo>& devices();
const std::string& unavailable_reason();
// "vulkan" -> 0, "vulkan:N" -> N; -1 when the name is not a Vulkan device name.
int parse_device_name(std::string_view name);

class Stream;
class ShaderCache;
struct Pipeline;

class Context {
 public:
  // The context of device `index` (created on first use, kept for the process).
  // Throws alk::Error when there is no such device.
  static std::shared_ptr<Context> get(int index);
  explicit Context(const DeviceInfo& info);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  VkDevice device() const { return device_->device; }
  VkQueue queue() const { return queue_; }
  // Device-local memory for tensors; mapped when the device memory is host-visible too
  // (unified memory: lavapipe, integrated GPUs), then uploads and downloads are memcpy.
  Pool& pool() { return *pool_; }
  Pool& staging() { return *staging_; }
  // Small allocations (<= kSmallStateBytes: scalars such as the generator state, the
  // learning rate, step counts, a loss) in memory both device-local and host-visible:
  // `pool()` itself on unified memory, else a pool in the device's host-visible
  // device-local type (NVIDIA's BAR window, AMD's SAM) where one exists. Uploads into it
  // are a memcpy (after the GPU's last use), so a compiled step's replay is one submit.
  // Null where the device has no such memory (the small state then goes through staging).
  static constexpr size_t kSmallStateBytes = 4096;
  Pool* mapped_small() { return unified_ ? pool_.get() : mapped_small_.get(); }
  // The storage-buffer binding alignment every suballocation honours.
  size_t binding_alignment() const;
  Stream& stream() { return *stream_; }
  ShaderCache& shaders() { return *shaders_; }
  VkPipelineCache pipeline_cache() const { return pipeline_cache_; }
  // A compute pipeline for GLSL `source` with `bindings` storage buffers (set 0,
  // bindings 0..bindings-1) and a push-constant block of push_bytes (0: none). Compiled
  // once; cached by the full source text and the layout.
  const Pipeline& pipeline(const std::string& source, uint32_t bindings, uint32_t push_bytes);
  // Writes the VkPipelineCache to disk now (also done when the context is destroyed).
  void save_pipeline_cache();
  // What the driver reports about `p`'s compiled code ("Register Count = 168, ..."; the
  // names are the driver's), or "" unless ALK_VK_PIPELINE_STATS=1 enabled the capture on
  // a device offering it (DeviceInfo::pipeline_statistics). With the variable set, every
  // new pipeline's statistics also go to stderr beside the shader's first comment line.
  std::string pipeline_statistics(const Pipeline& p) const;

 private:
  DeviceInfo info_;
  std::shared_ptr<DeviceHandle> device_;
  VkQueue queue_ = VK_NULL_HANDLE;
  bool unified_ = false;
  std::shared_ptr<Pool> pool_, staging_, mapped_small_;
  std::unique_ptr<ShaderCache> shaders_;
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  std::string pipeline_cache_path_;
  bool capture_statistics_ = false;  // ALK_VK_PIPELINE_STATS=1 on a device offering it
  std::mutex pipelines_mutex_;
  std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines_;  // key: layout + '\n' + source
  std::unique_ptr<Stream> stream_;
};

}  // namespace alk::vk
