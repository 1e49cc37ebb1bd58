// The Vulkan function table, filled at run time: libvulkan.so.1 is opened with dlopen and
// every entry point comes from vkGetInstanceProcAddr, so alk links no Vulkan library and
// starts on machines without one. Only this backend's .cpp files and its tests include
// this header (vulkan_core.h is large; nothing public pulls it in).
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include <string>

namespace alk::vk {

// Global functions (no instance yet).
#define ALK_VK_GLOBAL_FNS(X) \
  X(vkCreateInstance)        \
  X(vkEnumerateInstanceLayerProperties) \
  X(vkEnumerateInstanceExtensionProperties)

// Instance and device functions, resolved through the instance (the loader's trampolines
// dispatch device calls; one process-wide instance keeps this simple).
#define ALK_VK_INSTANCE_FNS(X)                  \
  X(vkDestroyInstance)                          \
  X(vkEnumeratePhysicalDevices)                 \
  X(vkGetPhysicalDeviceProperties)              \
  X(vkGetPhysicalDeviceProperties2)             \
  X(vkGetPhysicalDeviceFeatures2)               \
  X(vkGetPhysicalDeviceMemoryProperties)        \
  X(vkGetPhysicalDeviceQueueFamilyProperties)   \
  X(vkEnumerateDeviceExtensionProperties)       \
  X(vkCreateDevice)                             \
  X(vkDestroyDevice)                            \
  X(vkGetDeviceQueue)                           \
  X(vkDeviceWaitIdle)                           \
  X(vkAllocateMemory)                           \
  X(vkFreeMemory)                               \
  X(vkMapMemory)                                \
  X(vkUnmapMemory)                              \
  X(vkCreateBuffer)                             \
  X(vkDestroyBuffer)                            \
  X(vkGetBufferMemoryRequirements)              \
  X(vkBindBufferMemory)                         \
  X(vkCreateShaderModule)                       \
  X(vkDestroyShaderModule)                      \
  X(vkCreatePipelineCache)                      \
  X(vkDestroyPipelineCache)                     \
  X(vkGetPipelineCacheData)                     \
  X(vkCreateComputePipelines)                   \
  X(vkDestroyPipeline)                          \
  X(vkCreatePipelineLayout)                     \
  X(vkDestroyPipelineLayout)                    \
  X(vkCreateDescriptorSetLayout)                \
  X(vkDestroyDescriptorSetLayout)               \
  X(vkCreateDescriptorPool)                     \
  X(vkDestroyDescriptorPool)                    \
  X(vkAllocateDescriptorSets)                   \
  X(vkUpdateDescriptorSets)                     \
  X(vkCreateCommandPool)                        \
  X(vkDestroyCommandPool)                       \
  X(vkAllocateCommandBuffers)                   \
  X(vkFreeCommandBuffers)                       \
  X(vkBeginCommandBuffer)                       \
  X(vkEndCommandBuffer)                         \
  X(vkResetCommandBuffer)                       \
  X(vkCmdBindPipeline)                          \
  X(vkCmdBindDescriptorSets)                    \
  X(vkCmdPushConstants)                         \
  X(vkCmdDispatch)                              \
  X(vkCmdCopyBuffer)                            \
  X(vkCmdPipelineBarrier)                       \
  X(vkCreateFence)                              \
  X(vkDestroyFence)                             \
  X(vkResetFences)                              \
  X(vkWaitForFences)                            \
  X(vkGetFenceStatus)                           \
  X(vkCreateQueryPool)                          \
  X(vkDestroyQueryPool)                         \
  X(vkCmdResetQueryPool)                        \
  X(vkCmdWriteTimestamp)                        \
  X(vkGetQueryPoolResults)                      \
  X(vkQueueSubmit)

struct Api {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define ALK_VK_MEMBER(name) PFN_##name name = nullptr;
  ALK_VK_GLOBAL_FNS(ALK_VK_MEMBER)
  ALK_VK_INSTANCE_FNS(ALK_VK_MEMBER)
#undef ALK_VK_MEMBER
};

// The table, or nullptr when there is no usable loader; why_not() then says why.
// Opening happens once; instance-level entries are filled by load_instance_fns.
Api* api();
const std::string& why_not();
// Resolves every instance/device function through `instance`; false (with why) when one is missing.
bool load_instance_fns(VkInstance instance, std::string& why);

// Throws alk::Error("vulkan", "<what>: <result name>") when r is not VK_SUCCESS.
void check(VkResult r, const char* what);
[[noreturn]] void fail(const std::string& message);  // alk::Error("vulkan", message)
const char* result_name(VkResult r);

}  // namespace alk::vk
