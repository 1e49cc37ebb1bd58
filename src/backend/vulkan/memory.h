// Device memory: a sub-allocating pool. Vulkan limits the number of VkDeviceMemory
// objects (maxMemoryAllocationCount, 4096 on many drivers) and allocating one is slow,
// so tensors are carved out of big blocks. Each block is one VkDeviceMemory with one
// VkBuffer over all of it; a suballocation is (that buffer, an offset). Offsets are
// multiples of max(minStorageBufferOffsetAlignment, 64), so an allocation's start binds
// as a storage buffer directly; views and arena slices inside it bind at the aligned
// offset below their first element (map_kernel.cpp). Requests above the dedicated
// threshold get a block of their own (sizes rounded up to 2 MiB); freed, it is kept and
// handed to the next request it fits without wasting more than a quarter of it, as
// PyTorch's caching allocator does: a training step allocates the same large tensors
// every step, and a fresh VkDeviceMemory each time is slow to get (and on the H200 a GEMM
// over freshly allocated operands ran up to 5x slower after a few such cycles: NOTES.md).
// trim() returns kept blocks to the driver, and a failed allocation trims and retries.
// Freed ranges of shared blocks are coalesced and reused.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/vulkan/loader.h"

namespace alk::vk {

// The VkDevice and what must outlive every object made from it: pools and allocations
// hold a shared_ptr, so the device is destroyed after the last of them.
struct DeviceHandle {
  VkDevice device = VK_NULL_HANDLE;
  ~DeviceHandle();
};

class Pool;

// One suballocation. Freed (returned to its pool) when the last shared_ptr goes: the
// stream holds one for every command still pending on it.
class Allocation {
 public:
  Allocation(std::shared_ptr<Pool> pool, size_t block, size_t offset, size_t bytes, size_t reserved)
      : pool_(std::move(pool)), block_(block), offset_(offset), bytes_(bytes), reserved_(reserved) {}
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  VkBuffer buffer() const;        // the block's buffer
  size_t offset() const { return offset_; }  // in that buffer, aligned
  size_t bytes() const { return bytes_; }    // as requested
  // Host pointer to the first byte when the memory is host-visible (unified memory,
  // staging), else nullptr.
  void* mapped() const;
  // Stream bookkeeping: the serial of the last batch that used this allocation.
  uint64_t last_use = 0;

 private:
  friend class Pool;
  std::shared_ptr<Pool> pool_;
  size_t block_, offset_, bytes_, reserved_;
};

struct PoolStats {
  size_t blocks = 0;            // VkDeviceMemory objects alive (shared + dedicated)
  size_t reserved_bytes = 0;    // their total size
  size_t used_bytes = 0;        // handed out (rounded to the alignment)
  size_t allocations = 0;       // live suballocations
  size_t cached_bytes = 0;      // dedicated blocks kept for reuse (no live allocation)
};

class Pool : public std::enable_shared_from_this<Pool> {
 public:
  struct Options {
    uint32_t memory_type = 0;
    bool host_visible = false;             // map every block
    size_t alignment = 64;                 // power of two
    size_t block_bytes = size_t(64) << 20;
    size_t dedicated_bytes = size_t(16) << 20;  // requests above this get their own block
    size_t max_allocation = SIZE_MAX;     // maxMemoryAllocationSize
    VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                               VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  };
  Pool(std::shared_ptr<DeviceHandle> device, Options options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  std::shared_ptr<Allocation> allocate(size_t bytes);
  const Options& options() const { return options_; }
  PoolStats stats() const;
  // Returns empty blocks (shared and kept dedicated ones) to the driver.
  void trim();

 private:
  friend class Allocation;
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    size_t bytes = 0;
    void* mapped = nullptr;
    bool dedicated = false;
    std::map<size_t, size_t> free;  // offset -> size, coalesced
    size_t live = 0;                // suballocations out of this block
  };
  size_t new_block(size_t bytes, bool dedicated);  // index into blocks_ (reuses empty slots)
  // The new_block's VkDeviceMemory, or VK_NULL_HANDLE with its buffer destroyed when the
  // driver has no memory left (other errors throw).
  bool try_new_block(Block& b);
  size_t reuse_dedicated(size_t bytes);  // a kept block for a request of `bytes`, or SIZE_MAX
  void trim_locked();
  PoolStats stats_locked() const;
  void destroy_block(Block& b);
  void release(size_t block, size_t offset, size_t reserved);

  std::shared_ptr<DeviceHandle> device_;
  Options options_;
  mutable std::mutex mutex_;
  std::vector<Block> blocks_;  // a destroyed block keeps its slot (memory == null) so indices stay valid
};

}  // namespace alk::vk
