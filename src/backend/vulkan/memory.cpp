#include "backend/vulkan/memory.h"

#include <algorithm>
#include <string>

namespace alk::vk {

DeviceHandle::~DeviceHandle() {
  if (device != VK_NULL_HANDLE) {
    api()->vkDeviceWaitIdle(device);
    api()->vkDestroyDevice(device, nullptr);
  }
}

Allocation::~Allocation() { pool_->release(block_, offset_, reserved_); }

VkBuffer Allocation::buffer() const {
  std::lock_guard lock(pool_->mutex_);
  return pool_->blocks_[block_].buffer;
}

void* Allocation::mapped() const {
  std::lock_guard lock(pool_->mutex_);
  void* base = pool_->blocks_[block_].mapped;
  return base ? static_cast<char*>(base) + offset_ : nullptr;
}

Pool::Pool(std::shared_ptr<DeviceHandle> device, Options options) : device_(std::move(device)), options_(options) {}

Pool::~Pool() {
  for (Block& b : blocks_) destroy_block(b);
}

namespace {
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

size_t Pool::new_block(size_t bytes, bool dedicated) {
  Block b;
  b.bytes = bytes;
  b.dedicated = dedicated;
  if (!try_new_block(b)) {
    trim_locked();  // memory kept for reuse goes back to the driver first
    if (!try_new_block(b))
      fail("vkAllocateMemory of " + std::to_string(bytes) + " bytes: out of memory (" +
           std::to_string(stats_locked().reserved_bytes) + " bytes in blocks with live tensors)");
  }
  b.free.emplace(0, bytes);
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].memory == VK_NULL_HANDLE) {
      blocks_[i] = std::move(b);
      return i;
    }
  blocks_.push_back(std::move(b));
  return blocks_.size() - 1;
}

bool Pool::try_new_block(Block& b) {
  const Api& vk = *api();
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = b.bytes;
  bi.usage = options_.usage;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vk.vkCreateBuffer(device_->device, &bi, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vk.vkGetBufferMemoryRequirements(device_->device, b.buffer, &req);
  if (!(req.memoryTypeBits & (1u << options_.memory_type))) {
    vk.vkDestroyBuffer(device_->device, b.buffer, nullptr);
    fail("the pool's memory type " + std::to_string(options_.memory_type) + " cannot hold storage buffers");
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = options_.memory_type;
  VkResult r = vk.vkAllocateMemory(device_->device, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vk.vkDestroyBuffer(device_->device, b.buffer, nullptr);
    b.buffer = VK_NULL_HANDLE, b.memory = VK_NULL_HANDLE;
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) return false;
    fail("vkAllocateMemory of " + std::to_string(b.bytes) + " bytes: " + result_name(r));
  }
  check(vk.vkBindBufferMemory(device_->device, b.buffer, b.memory, 0), "vkBindBufferMemory");
  if (options_.host_visible) check(vk.vkMapMemory(device_->device, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
  return true;
}

size_t Pool::reuse_dedicated(size_t bytes) {
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    if (b.memory == VK_NULL_HANDLE || !b.dedicated || b.live || b.bytes < bytes || b.bytes - bytes > b.bytes / 4) continue;
    if (best == SIZE_MAX || b.bytes < blocks_[best].bytes) best = i;
  }
  return best;
}

void Pool::destroy_block(Block& b) {
  if (b.memory == VK_NULL_HANDLE) return;
  const Api& vk = *api();
  vk.vkDestroyBuffer(device_->device, b.buffer, nullptr);
  if (b.mapped) vk.vkUnmapMemory(device_->device, b.memory);
  vk.vkFreeMemory(device_->device, b.memory, nullptr);
  b = Block{};
}

std::shared_ptr<Allocation> Pool::allocate(size_t bytes) {
  // Zero-byte tensors still get a distinct, bindable range.
  const size_t reserved = round_up(bytes == 0 ? 1 : bytes, options_.alignment);
  if (reserved > options_.max_allocation)
    fail("allocation of " + std::to_string(bytes) + " bytes exceeds the device's maxMemoryAllocationSize (" +
         std::to_string(options_.max_allocation) + ")");
  std::lock_guard lock(mutex_);
  size_t block = SIZE_MAX, offset = 0;
  if (reserved > options_.dedicated_bytes) {
    const size_t rounded = std::max(reserved, std::min(round_up(reserved, size_t(2) << 20), options_.max_allocation));
    block = reuse_dedicated(reserved);
    if (block == SIZE_MAX) block = new_block(rounded, true);
  } else {
    for (size_t i = 0; i < blocks_.size() && block == SIZE_MAX; ++i) {
      Block& b = blocks_[i];
      if (b.memory == VK_NULL_HANDLE || b.dedicated) continue;
      for (auto& [off, size] : b.free)
        if (size >= reserved) {  // first fit
          block = i, offset = off;
          break;
        }
    }
    if (block == SIZE_MAX) block = new_block(std::max(options_.block_bytes, reserved), false);
  }
  Block& b = blocks_[block];
  auto it = b.free.find(offset);
  const size_t size = it->second;
  b.free.erase(it);
  if (size > reserved) b.free.emplace(offset + reserved, size - reserved);
  ++b.live;
  return std::make_shared<Allocation>(shared_from_this(), block, offset, bytes, reserved);
}

void Pool::release(size_t block, size_t offset, size_t reserved) {
  std::lock_guard lock(mutex_);
  Block& b = blocks_[block];
  --b.live;
  if (b.dedicated) {  // kept whole for the next request it fits (reuse_dedicated)
    b.free.clear();
    b.free.emplace(0, b.bytes);
    return;
  }
  auto it = b.free.emplace(offset, reserved).first;
  if (auto next = std::next(it); next != b.free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    b.free.erase(next);
  }
  if (it != b.free.begin())
    if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
      prev->second += it->second;
      b.free.erase(it);
    }
}

void Pool::trim() {
  std::lock_guard lock(mutex_);
  trim_locked();
}

void Pool::trim_locked() {
  for (Block& b : blocks_)
    if (b.memory != VK_NULL_HANDLE && b.live == 0) destroy_block(b);
}

PoolStats Pool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_locked();
}

PoolStats Pool::stats_locked() const {
  PoolStats s;
  for (const Block& b : blocks_) {
    if (b.memory == VK_NULL_HANDLE) continue;
    ++s.blocks;
    s.reserved_bytes += b.bytes;
    s.allocations += b.live;
    size_t free = 0;
    for (auto& [off, size] : b.free) free += size;
    s.used_bytes += b.bytes - free;
    if (b.dedicated && !b.live) s.cached_bytes += b.bytes;
  }
  return s;
}

}  // namespace alk::vk
