#include "backend/vulkan/context.h"

#include <shaderc/shaderc.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "backend/vulkan/shader.h"
#include "backend/vulkan/stream.h"

namespace alk::vk {

namespace {

// The process-wide instance and what it found. Built on first use; never throws.
struct Instance {
  VkInstance instance = VK_NULL_HANDLE;
  std::vector<DeviceInfo> devices;
  std::vector<VkPhysicalDevice> handles;  // parallel to devices
  std::string why;

  Instance() {
    Api* vk = api();
    if (!vk) {
      why = why_not();
      return;
    }
    try {
      create(*vk);
    } catch (const std::exception& e) {
      why = e.what();
      devices.clear();
      handles.clear();
    }
  }

  void create(Api& vk) {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "alk";
    app.pEngineName = "alk";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    // Validation only on request, and only when the layer is installed.
    const char* validation = "VK_LAYER_KHRONOS_validation";
    if (const char* v = std::getenv("ALK_VK_VALIDATE"); v && std::string_view(v) == "1") {
      uint32_t n = 0;
      vk.vkEnumerateInstanceLayerProperties(&n, nullptr);
      std::vector<VkLayerProperties> layers(n);
      vk.vkEnumerateInstanceLayerProperties(&n, layers.data());
      for (const auto& l : layers)
        if (std::strcmp(l.layerName, validation) == 0) {
          ci.enabledLayerCount = 1;
          ci.ppEnabledLayerNames = &validation;
        }
    }
    VkResult r = vk.vkCreateInstance(&ci, nullptr, &instance);
    if (r != VK_SUCCESS) {
      why = std::string("vkCreateInstance failed: ") + result_name(r);
      instance = VK_NULL_HANDLE;
      return;
    }
    if (!load_instance_fns(instance, why)) return;
    uint32_t n = 0;
    check(vk.vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> all(n);
    check(vk.vkEnumeratePhysicalDevices(instance, &n, all.data()), "vkEnumeratePhysicalDevices");
    std::vector<std::pair<DeviceInfo, VkPhysicalDevice>> found;
    std::string skipped;
    for (VkPhysicalDevice pd : all) {
      DeviceInfo info;
      std::string why_skip;
      if (describe(vk, instance, pd, info, why_skip)) found.emplace_back(std::move(info), pd);
      else skipped += (skipped.empty() ? "" : "; ") + why_skip;
    }
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first.kind < b.first.kind; });
    for (size_t i = 0; i < found.size(); ++i) {
      found[i].first.index = static_cast<int>(i);
      devices.push_back(std::move(found[i].first));
      handles.push_back(found[i].second);
    }
    if (devices.empty())
      why = n == 0 ? "the Vulkan loader found no device" : "no usable Vulkan device (" + skipped + ")";
  }

  static bool describe(Api& vk, VkInstance instance, VkPhysicalDevice pd, DeviceInfo& info, std::string& why) {
    VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    subgroup.pNext = &driver;
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &subgroup;
    vk.vkGetPhysicalDeviceProperties2(pd, &props);
    const VkPhysicalDeviceProperties& p = props.properties;
    info.name = p.deviceName;
    if (p.apiVersion < VK_API_VERSION_1_2) {
      why = info.name + " supports only Vulkan " + std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." +
            std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) + " (1.2 needed)";
      return false;
    }
    switch (p.deviceType) {
      case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: info.kind = DeviceInfo::Kind::Discrete; break;
      case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: info.kind = DeviceInfo::Kind::Integrated; break;
      case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: info.kind = DeviceInfo::Kind::Virtual; break;
      case VK_PHYSICAL_DEVICE_TYPE_CPU: info.kind = DeviceInfo::Kind::Cpu; break;
      default: info.kind = DeviceInfo::Kind::Other; break;
    }
    info.driver_name = driver.driverName;
    info.driver_info = driver.driverInfo;
    info.vendor_id = p.vendorID;
    info.device_id = p.deviceID;
    info.driver_version = p.driverVersion;
    info.api_version = p.apiVersion;
    std::memcpy(info.pipeline_cache_uuid, p.pipelineCacheUUID, VK_UUID_SIZE);
    const VkPhysicalDeviceLimits& l = p.limits;
    info.min_storage_offset_alignment = l.minStorageBufferOffsetAlignment;
    info.max_storage_buffer_range = l.maxStorageBufferRange;
    for (int d = 0; d < 3; ++d) {
      info.max_workgroup_count[d] = l.maxComputeWorkGroupCount[d];
      info.max_workgroup_size[d] = l.maxComputeWorkGroupSize[d];
    }
    info.max_workgroup_invocations = l.maxComputeWorkGroupInvocations;
    info.max_push_constants = l.maxPushConstantsSize;
    info.max_shared_memory = l.maxComputeSharedMemorySize;
    info.max_bound_descriptor_sets = l.maxBoundDescriptorSets;
    info.max_storage_buffers_per_stage = l.maxPerStageDescriptorStorageBuffers;
    info.timestamp_period = l.timestampPeriod;
    info.subgroup_size = subgroup.subgroupSize;
    if (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) info.subgroup_ops = subgroup.supportedOperations;

    VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props2.pNext = &m3;
    vk.vkGetPhysicalDeviceProperties2(pd, &props2);
    info.max_memory_allocation = m3.maxMemoryAllocationSize;

    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    f11.pNext = &f12;
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &f11;
    vk.vkGetPhysicalDeviceFeatures2(pd, &features);
    info.float64 = features.features.shaderFloat64;
    info.int64 = features.features.shaderInt64;
    info.storage16 = f11.storageBuffer16BitAccess;
    info.storage8 = f12.storageBuffer8BitAccess;
    info.float16 = f12.shaderFloat16;
    info.int8 = f12.shaderInt8;

    uint32_t n = 0;
    vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> ext(n);
    vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
    bool nv_matrix = false, executable_properties = false;
    for (const auto& e : ext) {
      info.cooperative_matrix |= std::strcmp(e.extensionName, "VK_KHR_cooperative_matrix") == 0;
      executable_properties |= std::strcmp(e.extensionName, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) == 0;
      nv_matrix |= std::strcmp(e.extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0;
    }
    if (executable_properties) {
      VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe{
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
      VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
      f2.pNext = &pe;
      vk.vkGetPhysicalDeviceFeatures2(pd, &f2);
      info.pipeline_statistics = pe.pipelineExecutableInfo;
    }
    if (nv_matrix && info.float16 && info.storage16 && info.subgroup_size == 32) {
      VkPhysicalDeviceCooperativeMatrixFeaturesNV cm{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
      VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
      f2.pNext = &cm;
      vk.vkGetPhysicalDeviceFeatures2(pd, &f2);
      auto props = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
          vk.vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
      uint32_t count = 0;
      if (cm.cooperativeMatrix && props && props(pd, &count, nullptr) == VK_SUCCESS && count > 0) {
        std::vector<VkCooperativeMatrixPropertiesNV> shapes(count, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
        if (props(pd, &count, shapes.data()) == VK_SUCCESS)
          for (const auto& c : shapes) {
            auto type = [](VkComponentTypeNV t) -> std::string {
              switch (t) {
                case VK_COMPONENT_TYPE_FLOAT16_NV: return "f16";
                case VK_COMPONENT_TYPE_FLOAT32_NV: return "f32";
                case VK_COMPONENT_TYPE_FLOAT64_NV: return "f64";
                case VK_COMPONENT_TYPE_SINT8_NV: return "s8";
                case VK_COMPONENT_TYPE_UINT8_NV: return "u8";
                case VK_COMPONENT_TYPE_SINT32_NV: return "s32";
                case VK_COMPONENT_TYPE_UINT32_NV: return "u32";
                default: return "type" + std::to_string(static_cast<int>(t));
              }
            };
            info.cooperative_matrix_nv_shapes.push_back(
                std::to_string(c.MSize) + "x" + std::to_string(c.NSize) + "x" + std::to_string(c.KSize) + " " +
                type(c.AType) + "*" + type(c.BType) + "+" + type(c.CType) + "->" + type(c.DType) +
                (c.scope == VK_SCOPE_SUBGROUP_NV ? " subgroup" : " scope" + std::to_string(static_cast<int>(c.scope))));
            info.cooperative_matrix_nv |= c.MSize == 16 && c.NSize == 16 && c.KSize == 16 &&
                                          c.AType == VK_COMPONENT_TYPE_FLOAT16_NV && c.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                                          c.CType == VK_COMPONENT_TYPE_FLOAT32_NV && c.DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                                          c.scope == VK_SCOPE_SUBGROUP_NV;
          }
      }
    }

    VkPhysicalDeviceMemoryProperties mem;
    vk.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
      info.heaps.push_back({mem.memoryHeaps[h].size, (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});

    vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, families.data());
    // A compute queue; one without graphics first (a dedicated compute engine, if any).
    for (int pass = 0; pass < 2 && info.compute_queue_family == UINT32_MAX; ++pass)
      for (uint32_t q = 0; q < n; ++q) {
        const VkQueueFlags f = families[q].queueFlags;
        if ((f & VK_QUEUE_COMPUTE_BIT) && (pass == 1 || !(f & VK_QUEUE_GRAPHICS_BIT))) {
          info.compute_queue_family = q;
          break;
        }
      }
    if (info.compute_queue_family == UINT32_MAX) {
      why = info.name + " has no compute queue";
      return false;
    }
    info.timestamp_bits = families[info.compute_queue_family].timestampValidBits;
    return true;
  }
};

// Never destroyed, like the devices of the runtime registry: buffers held by static
// objects may be freed after every static destructor of ours has run, and destroying the
// instance under a live VkDevice crashed NVIDIA's driver at exit.
Instance& instance() {
  static Instance* i = new Instance;
  return *i;
}

std::string hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Memory type index with all of `want` among `allowed`, preferring ones in a bigger heap; -1 if none.
int find_memory_type(const VkPhysicalDeviceMemoryProperties& mem, VkMemoryPropertyFlags want, VkMemoryPropertyFlags nice) {
  int best = -1;
  auto score = [&](uint32_t t) {
    const VkMemoryPropertyFlags f = mem.memoryTypes[t].propertyFlags;
    return std::make_pair((f & nice) == nice, mem.memoryHeaps[mem.memoryTypes[t].heapIndex].size);
  };
  for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
    if ((mem.memoryTypes[t].propertyFlags & want) != want) continue;
    if (best < 0 || score(t) > score(static_cast<uint32_t>(best))) best = static_cast<int>(t);
  }
  return best;
}

}  // namespace

std::string DeviceInfo::kind_name() const {
  switch (kind) {
    case Kind::Discrete: return "discrete";
    case Kind::Integrated: return "integrated";
    case Kind::Virtual: return "virtual";
    case Kind::Cpu: return "cpu";
    case Kind::Other: return "other";
  }
  return "other";
}

std::string DeviceInfo::describe() const {
  std::ostringstream s;
  s << "vulkan:" << index << "  " << name << " (" << kind_name() << ")\n";
  s << "  driver: " << driver_name << " " << driver_info << " (version 0x" << std::hex << driver_version << std::dec
    << "), Vulkan " << VK_API_VERSION_MAJOR(api_version) << "." << VK_API_VERSION_MINOR(api_version) << "."
    << VK_API_VERSION_PATCH(api_version) << "\n";
  s << "  memory heaps:";
  for (const Heap& h : heaps) s << " " << (h.bytes >> 20) << " MiB" << (h.device_local ? " (device-local)" : "");
  s << "\n  limits: storage offset alignment " << min_storage_offset_alignment << ", storage range "
    << max_storage_buffer_range << ", push constants " << max_push_constants << ", workgroups "
    << max_workgroup_count[0] << "x" << max_workgroup_count[1] << "x" << max_workgroup_count[2] << " of up to "
    << max_workgroup_invocations << ", shared memory " << max_shared_memory << "\n";
  s << "  features: f64 " << float64 << ", i64 " << int64 << ", 16-bit storage " << storage16 << ", 8-bit storage "
    << storage8 << ", f16 math " << float16 << ", i8 math " << int8 << ", subgroup " << subgroup_size << " (ops 0x"
    << std::hex << subgroup_ops << std::dec << "), cooperative matrix " << cooperative_matrix << " (NV 16x16x16 f16 "
    << cooperative_matrix_nv << "), pipeline statistics " << pipeline_statistics << "\n";
  if (!cooperative_matrix_nv_shapes.empty()) {
    s << "  VK_NV_cooperative_matrix shapes:";
    for (const std::string& c : cooperative_matrix_nv_shapes) s << " [" << c << "]";
    s << "\n";
  }
  return s.str();
}

const std::vector<DeviceInfo>& devices() { return instance().devices; }

const std::string& unavailable_reason() {
  static const std::string none;
  return instance().devices.empty() ? instance().why : none;
}

int parse_device_name(std::string_view name) {
  if (name == "vulkan") return 0;
  if (!name.starts_with("vulkan:")) return -1;
  std::string_view digits = name.substr(7);
  int n = -1;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || p != digits.data() + digits.size() || digits.empty() || n < 0) return -1;
  return n;
}

std::shared_ptr<Context> Context::get(int index) {
  const auto& list = devices();
  if (list.empty()) fail("no Vulkan device: " + unavailable_reason());
  if (index < 0 || static_cast<size_t>(index) >= list.size())
    fail("no device vulkan:" + std::to_string(index) + " (" + std::to_string(list.size()) + " found)");
  // Contexts live as long as the process (see instance()). At exit, before the driver's
  // own teardown (this handler is registered after the driver was loaded, so it runs
  // first), pending work is finished and the pipeline caches are written.
  static std::mutex mutex;
  static auto* contexts = new std::vector<std::shared_ptr<Context>>(list.size());
  std::lock_guard lock(mutex);
  auto& slot = (*contexts)[static_cast<size_t>(index)];
  if (!slot) {
    slot = std::make_shared<Context>(list[static_cast<size_t>(index)]);
    static const bool registered = [] {
      std::atexit([] {
        std::lock_guard exit_lock(mutex);
        for (auto& c : *contexts) {
          if (!c) continue;
          try {
            c->stream().synchronize();
          } catch (const std::exception&) {  // a lost device: nothing to wait for
          }
          c->save_pipeline_cache();
        }
      });
      return true;
    }();
    (void)registered;
  }
  return slot;
}

Context::Context(const DeviceInfo& info) : info_(info) {
  const Api& vk = *api();
  VkPhysicalDevice pd = instance().handles.at(static_cast<size_t>(info.index));

  // Enable what alk's kernels may use, where the device has it.
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.storageBuffer8BitAccess = info.storage8;
  f12.shaderFloat16 = info.float16;
  f12.shaderInt8 = info.int8;
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.pNext = &f12;
  f11.storageBuffer16BitAccess = info.storage16;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features.pNext = &f11;
  features.features.shaderFloat64 = info.float64;
  features.features.shaderInt64 = info.int64;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV matrix{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  std::vector<const char*> extensions;
  if (info.cooperative_matrix_nv) {
    matrix.cooperativeMatrix = VK_TRUE;
    f12.pNext = &matrix;
    extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executable{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  const char* stats_env = std::getenv("ALK_VK_PIPELINE_STATS");
  capture_statistics_ = info.pipeline_statistics && stats_env && std::string_view(stats_env) == "1";
  if (capture_statistics_) {
    executable.pipelineExecutableInfo = VK_TRUE;
    executable.pNext = features.pNext;
    features.pNext = &executable;
    extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  }
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = info.compute_queue_family;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.pNext = &features;
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  di.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  di.ppEnabledExtensionNames = extensions.data();
  device_ = std::make_shared<DeviceHandle>();
  check(vk.vkCreateDevice(pd, &di, nullptr, &device_->device), "vkCreateDevice");
  vk.vkGetDeviceQueue(device_->device, info.compute_queue_family, 0, &queue_);

  // Tensor memory: device-local. When that memory is also host-visible and coherent
  // (lavapipe, integrated GPUs), it is mapped and no staging is needed.
  VkPhysicalDeviceMemoryProperties mem;
  vk.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int device_type = find_memory_type(mem, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  if (device_type < 0) device_type = find_memory_type(mem, 0, 0);
  const VkMemoryPropertyFlags device_flags = mem.memoryTypes[device_type].propertyFlags;
  // ALK_VK_FORCE_STAGING=1 takes the discrete-GPU path (staging copies) on any device, so
  // machines with only lavapipe test it too.
  const char* force_staging = std::getenv("ALK_VK_FORCE_STAGING");
  unified_ = (device_flags & host) == host && info.kind != DeviceInfo::Kind::Discrete &&
             !(force_staging && std::string_view(force_staging) == "1");
  Pool::Options po;
  po.memory_type = static_cast<uint32_t>(device_type);
  po.host_visible = unified_;
  po.alignment = binding_alignment();
  po.max_allocation = info.max_memory_allocation ? info.max_memory_allocation : SIZE_MAX;
  const uint64_t heap = mem.memoryHeaps[mem.memoryTypes[device_type].heapIndex].size;
  po.block_bytes = std::min<size_t>(po.block_bytes, std::max<size_t>(heap / 8, size_t(1) << 20));
  pool_ = std::make_shared<Pool>(device_, po);
  // Small per-step state where device-local memory is also host-visible (the BAR window
  // of a discrete GPU): written by memcpy, read by kernels at device-memory speed.
  // ALK_VK_NO_MAPPED_STATE=1 leaves it out (the test of the staging path's submit count).
  const char* no_mapped_state = std::getenv("ALK_VK_NO_MAPPED_STATE");
  const int mapped_type = find_memory_type(mem, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host, 0);
  if (!unified_ && mapped_type >= 0 && !(no_mapped_state && std::string_view(no_mapped_state) == "1")) {
    Pool::Options mo = po;
    mo.memory_type = static_cast<uint32_t>(mapped_type);
    mo.host_visible = true;
    mo.block_bytes = size_t(1) << 20;
    mapped_small_ = std::make_shared<Pool>(device_, mo);
  }
  const int staging_type = find_memory_type(mem, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (staging_type < 0) fail(info.name + " has no host-visible coherent memory");
  Pool::Options so;
  so.memory_type = static_cast<uint32_t>(staging_type);
  so.host_visible = true;
  so.alignment = binding_alignment();
  so.block_bytes = size_t(16) << 20;
  so.dedicated_bytes = size_t(4) << 20;
  staging_ = std::make_shared<Pool>(device_, so);

  // Caches: SPIR-V by source (shader.h), pipelines through a VkPipelineCache on disk.
  uint32_t spv_version = 0, spv_revision = 0;
  shaderc_get_spv_version(&spv_version, &spv_revision);
  std::string key = info.name + "|" + info.driver_name + "|" + std::to_string(info.driver_version) + "|shaderc " +
                    std::to_string(spv_version) + "." + std::to_string(spv_revision);
  const std::string dir = cache_dir();
  shaders_ = std::make_unique<ShaderCache>(dir, key);
  std::vector<char> data;
  if (!dir.empty()) {
    uint64_t uuid = 0;
    std::memcpy(&uuid, info.pipeline_cache_uuid, 8);
    pipeline_cache_path_ = dir + "/pipelines-" + hex(uuid ^ (uint64_t(info.vendor_id) << 32 | info.device_id) ^
                                                     info.driver_version) + ".bin";
    std::ifstream in(pipeline_cache_path_, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
    // Only data whose header names this very device and driver build reaches the driver
    // (drivers check too, but a damaged file should never be the driver's problem).
    uint32_t header[4] = {};
    if (data.size() >= 16 + VK_UUID_SIZE) std::memcpy(header, data.data(), 16);
    const bool ok = data.size() >= 16 + VK_UUID_SIZE && header[0] >= 16 + VK_UUID_SIZE && header[0] <= data.size() &&
                    header[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && header[2] == info.vendor_id &&
                    header[3] == info.device_id &&
                    std::memcmp(data.data() + 16, info.pipeline_cache_uuid, VK_UUID_SIZE) == 0;
    if (!ok) data.clear();
  }
  VkPipelineCacheCreateInfo pci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  pci.initialDataSize = data.size();
  pci.pInitialData = data.empty() ? nullptr : data.data();
  if (vk.vkCreatePipelineCache(device_->device, &pci, nullptr, &pipeline_cache_) != VK_SUCCESS) {
    pci.initialDataSize = 0;
    pci.pInitialData = nullptr;
    check(vk.vkCreatePipelineCache(device_->device, &pci, nullptr, &pipeline_cache_), "vkCreatePipelineCache");
  }
  stream_ = std::make_unique<Stream>(*this);
}

Context::~Context() {
  stream_.reset();  // waits for the queue; drops what pending work kept alive
  save_pipeline_cache();
  const Api& vk = *api();
  VkDevice d = device_->device;
  for (auto& [key, p] : pipelines_) {
    vk.vkDestroyPipeline(d, p->pipeline, nullptr);
    vk.vkDestroyPipelineLayout(d, p->layout, nullptr);
    vk.vkDestroyDescriptorSetLayout(d, p->set_layout, nullptr);
    vk.vkDestroyShaderModule(d, p->module, nullptr);
  }
  vk.vkDestroyPipelineCache(d, pipeline_cache_, nullptr);
  // The pools and the device go with their last owner (allocations still held elsewhere).
}

size_t Context::binding_alignment() const {
  return std::max<size_t>(64, static_cast<size_t>(info_.min_storage_offset_alignment));
}

void Context::save_pipeline_cache() {
  if (pipeline_cache_path_.empty() || pipeline_cache_ == VK_NULL_HANDLE) return;
  std::lock_guard lock(pipelines_mutex_);
  const Api& vk = *api();
  size_t n = 0;
  if (vk.vkGetPipelineCacheData(device_->device, pipeline_cache_, &n, nullptr) != VK_SUCCESS || n == 0) return;
  std::vector<char> data(n);
  if (vk.vkGetPipelineCacheData(device_->device, pipeline_cache_, &n, data.data()) != VK_SUCCESS) return;
  // Written beside and renamed: concurrent processes (ctest -j) each replace it whole.
  const std::string tmp = pipeline_cache_path_ + "." + std::to_string(::getpid()) + "." +
                          std::to_string(reinterpret_cast<uintptr_t>(this)) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(n));
    if (!out) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), pipeline_cache_path_.c_str()) != 0) std::remove(tmp.c_str());
}

std::string Context::pipeline_statistics(const Pipeline& p) const {
  if (!capture_statistics_) return "";
  const Api& vk = *api();
  auto properties = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vk.vkGetInstanceProcAddr(instance().instance, "vkGetPipelineExecutablePropertiesKHR"));
  auto statistics = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vk.vkGetInstanceProcAddr(instance().instance, "vkGetPipelineExecutableStatisticsKHR"));
  if (!properties || !statistics) return "(the loader has no VK_KHR_pipeline_executable_properties entry points)";
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = p.pipeline;
  uint32_t executables = 0;
  if (properties(device_->device, &pi, &executables, nullptr) != VK_SUCCESS) return "(no executables)";
  std::string out;
  for (uint32_t e = 0; e < executables; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = p.pipeline;
    ei.executableIndex = e;
    uint32_t n = 0;
    if (statistics(device_->device, &ei, &n, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> stats(n, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (statistics(device_->device, &ei, &n, stats.data()) != VK_SUCCESS) continue;
    for (const auto& st : stats) {
      if (!out.empty()) out += ", ";
      out += std::string(st.name) + " = ";
      switch (st.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: out += st.value.b32 ? "true" : "false"; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: out += std::to_string(st.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: out += std::to_string(st.value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: out += std::to_string(st.value.f64); break;
        default: out += "?";
      }
    }
  }
  return out;
}

const Pipeline& Context::pipeline(const std::string& source, uint32_t bindings, uint32_t push_bytes) {
  if (push_bytes > info_.max_push_constants)
    fail(std::to_string(push_bytes) + " push-constant bytes exceed the device's " + std::to_string(info_.max_push_constants));
  if (bindings > info_.max_storage_buffers_per_stage)
    fail(std::to_string(bindings) + " storage buffers exceed the device's " +
         std::to_string(info_.max_storage_buffers_per_stage) + " per stage");
  const std::string key = std::to_string(bindings) + " " + std::to_string(push_bytes) + "\n" + source;
  {
    std::lock_guard lock(pipelines_mutex_);
    if (auto it = pipelines_.find(key); it != pipelines_.end()) return *it->second;
  }
  const std::vector<uint32_t>& spirv = shaders_->spirv(source);
  const Api& vk = *api();
  VkDevice d = device_->device;
  auto p = std::make_unique<Pipeline>();
  p->bindings = bindings;
  p->push_bytes = push_bytes;
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = spirv.size() * 4;
  mi.pCode = spirv.data();
  check(vk.vkCreateShaderModule(d, &mi, nullptr, &p->module), "vkCreateShaderModule");
  std::vector<VkDescriptorSetLayoutBinding> b(bindings);
  for (uint32_t k = 0; k < bindings; ++k)
    b[k] = VkDescriptorSetLayoutBinding{k, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = bindings;
  li.pBindings = b.data();
  check(vk.vkCreateDescriptorSetLayout(d, &li, nullptr, &p->set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &p->set_layout;
  pli.pushConstantRangeCount = push_bytes ? 1 : 0;
  pli.pPushConstantRanges = push_bytes ? &range : nullptr;
  check(vk.vkCreatePipelineLayout(d, &pli, nullptr, &p->layout), "vkCreatePipelineLayout");
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = VkPipelineShaderStageCreateInfo{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = p->module;
  ci.stage.pName = "main";
  ci.layout = p->layout;
  if (capture_statistics_) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  check(vk.vkCreateComputePipelines(d, pipeline_cache_, 1, &ci, nullptr, &p->pipeline), "vkCreateComputePipelines");
  if (capture_statistics_) {
    const size_t comment = source.find("// ");
    const std::string label =
        comment == std::string::npos ? source.substr(0, 60) : source.substr(comment, source.find('\n', comment) - comment);
    std::fprintf(stderr, "[alk vulkan pipeline] %s: %s\n", label.c_str(), pipeline_statistics(*p).c_str());
  }
  std::lock_guard lock(pipelines_mutex_);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) {  // another thread built it meanwhile
    vk.vkDestroyPipeline(d, p->pipeline, nullptr);
    vk.vkDestroyPipelineLayout(d, p->layout, nullptr);
    vk.vkDestroyDescriptorSetLayout(d, p->set_layout, nullptr);
    vk.vkDestroyShaderModule(d, p->module, nullptr);
    return *it->second;
  }
  return *pipelines_.emplace(key, std::move(p)).first->second;
}

}  // namespace alk::vk
