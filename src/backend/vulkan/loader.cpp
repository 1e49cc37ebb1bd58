#include "backend/vulkan/loader.h"

#include <dlfcn.h>

#include <cstdlib>

#include "alk/error.h"

namespace alk::vk {

namespace {

struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
};

Loaded& loaded() {
  static Loaded l = [] {
    Loaded r;
    // ALK_VK_LOADER names another loader (tests use a missing path to check the no-Vulkan path).
    const char* name = std::getenv("ALK_VK_LOADER");
    if (!name || !*name) name = "libvulkan.so.1";
    void* lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);  // never closed: drivers may run code at exit
    if (!lib) {
      const char* err = ::dlerror();
      r.why = std::string("no Vulkan loader (dlopen ") + name + ": " + (err ? err : "failed") + ")";
      return r;
    }
    r.api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(::dlsym(lib, "vkGetInstanceProcAddr"));
    if (!r.api.vkGetInstanceProcAddr) {
      r.why = std::string(name) + " has no vkGetInstanceProcAddr";
      return r;
    }
#define ALK_VK_LOAD_GLOBAL(fn)                                                                  \
  r.api.fn = reinterpret_cast<PFN_##fn>(r.api.vkGetInstanceProcAddr(VK_NULL_HANDLE, #fn));      \
  if (!r.api.fn) {                                                                              \
    r.why = std::string("the Vulkan loader lacks ") + #fn;                                      \
    return r;                                                                                   \
  }
    ALK_VK_GLOBAL_FNS(ALK_VK_LOAD_GLOBAL)
#undef ALK_VK_LOAD_GLOBAL
    r.ok = true;
    return r;
  }();
  return l;
}

}  // namespace

Api* api() { return loaded().ok ? &loaded().api : nullptr; }
const std::string& why_not() { return loaded().why; }

bool load_instance_fns(VkInstance instance, std::string& why) {
  Api& a = loaded().api;
#define ALK_VK_LOAD_INSTANCE(fn)                                                   \
  a.fn = reinterpret_cast<PFN_##fn>(a.vkGetInstanceProcAddr(instance, #fn));       \
  if (!a.fn) {                                                                     \
    why = std::string("the Vulkan instance lacks ") + #fn + " (Vulkan 1.1+ needed)"; \
    return false;                                                                  \
  }
  ALK_VK_INSTANCE_FNS(ALK_VK_LOAD_INSTANCE)
#undef ALK_VK_LOAD_INSTANCE
  return true;
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult error";
  }
}

void fail(const std::string& message) { throw Error("vulkan", message, Loc::current()); }

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) fail(std::string(what) + ": " + result_name(r) + " (" + std::to_string(r) + ")");
}

}  // namespace alk::vk
