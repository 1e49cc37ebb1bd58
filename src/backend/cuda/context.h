// One CUDA device, opened: its primary context, the one stream alk queues work on, a
// caching allocator, pinned staging for uploads, compiled functions, and the flag that
// device kernels report bad indices in.
//
// One stream per device keeps every kernel, copy and free in order, so a block freed on
// the host may be handed out again at once: whatever reads it later is queued after what
// used it before. Recording (CUDA graphs) captures that stream; blocks a captured kernel
// uses outside the memory plan (scratch) are kept by the recording and reused only by the
// recording's later kernels (a captured stream replays in its order, as the stream ran).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "alk/error.h"
#include "backend/cuda/driver.h"

namespace alk::cuda {

struct DeviceProps {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  size_t memory_bytes = 0, l2_bytes = 0;
  int max_shared_optin = 0;  // bytes of shared memory a block may opt in to
};

// The GPUs the driver sees (empty without a driver; driver_unavailable_reason() says why).
const std::vector<DeviceProps>& devices();

// The NVRTC target for a device ("sm_90a" on Hopper, so wgmma is available; else sm_XY).
std::string arch_of(const DeviceProps& p);
// CUDA C -> cubin for `arch`, cached in memory and on disk ($ALK_CACHE_DIR/cuda, keyed by
// the source, arch, options and NVRTC version). Throws alk::Error with NVRTC's log and
// the source's first lines when it does not compile. Needs no GPU.
std::string compile_cubin(const std::string& source, const std::string& arch);
// What ptxas says compiling `source` (uncached, `-v`): each function's registers and spills,
// and its performance advisories (C7520: wgmma instructions serialized). For tests.
std::string ptxas_report(const std::string& source, const std::string& arch);
struct CompileStats {
  int64_t memory_hits = 0, disk_hits = 0, compiles = 0;
};
CompileStats compile_stats();

// Kernel arguments in the layout cuLaunchKernel takes: each value copied, then a pointer
// to each copy.
class Args {
 public:
  template <class T>
  Args& add(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    auto& slot = storage_.emplace_back(sizeof(T));
    std::memcpy(slot.data(), &v, sizeof(T));
    return *this;
  }
  Args& add_bytes(const void* data, size_t bytes) {
    auto& slot = storage_.emplace_back(bytes);
    std::memcpy(slot.data(), data, bytes);
    return *this;
  }
  void** pointers() {
    ptrs_.clear();
    for (auto& s : storage_) ptrs_.push_back(s.data());
    return ptrs_.data();
  }

 private:
  std::vector<std::vector<char>> storage_;
  std::vector<void*> ptrs_;
};

class Context {
 public:
  // The context of device `index`, opened on first use and kept for the process.
  static Context& get(int index);
  const DeviceProps& props() const { return props_; }
  CUstream stream() const { return stream_; }
  void make_current() const;

  // ---- memory ----
  CUdeviceptr allocate(size_t bytes);  // throws alk::Error when the device is full
  void release(CUdeviceptr ptr, size_t bytes);
  void trim();  // frees cached blocks
  int64_t cached_bytes() const;
  struct MemoryStats {
    int64_t in_use_bytes = 0, peak_bytes = 0;  // handed out (rounded sizes), and its high-water mark
  };
  MemoryStats memory_stats() const;
  // Scratch for the kernels of one template op. release_scratch() (after they are queued)
  // hands it back: stream order makes that safe. While capturing, the recording keeps it.
  CUdeviceptr scratch(size_t bytes);
  void release_scratch();

  // ---- transfers (stream-ordered) ----
  void upload(CUdeviceptr dst, const void* src, size_t bytes);
  void download(CUdeviceptr src, void* dst, size_t bytes);  // waits
  void copy(CUdeviceptr src, CUdeviceptr dst, size_t bytes);
  void memset0(CUdeviceptr dst, size_t bytes);
  void synchronize();  // waits, then reports bad indices and asynchronous faults

  // ---- kernels ----
  // The function `entry` of `source`, compiled (compile_cubin) and loaded once.
  CUfunction function(const std::string& source, const std::string& entry, int dynamic_shared = 0);
  // Whether a kernel named `entry` has been loaded (from any source): which kernel an op chose,
  // for tests where every choice gives the same results.
  bool loaded(std::string_view entry) const;
  // ALK_DEBUG=timing: `start` is recorded on the stream just before the next kernel launch,
  // so a template op's GPU time excludes the host's own work before it (compile-cache
  // lookups, argument packing). finish_timing() records it now if no launch took it.
  void time_next_launch(CUevent start) { timing_start_ = start; }
  void finish_timing();
  void launch(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block, unsigned shared,
              Args& args);
  // When set, launch() only compiles (record() prepares a kernel list this way before capture).
  bool compile_only = false;

  // ---- index errors ----
  struct IndexLaunch {
    std::string op, what = "index";
    Loc loc;
    int64_t size = 0, dim = 0;
  };
  // The flag kernels report into, and an id for a launch about to be queued.
  CUdeviceptr index_flag();
  uint64_t add_index_launch(IndexLaunch l);

  // ---- capture (record/replay) ----
  void begin_capture();
  // The captured graph, instantiated; scratch allocated while capturing is handed over.
  struct Graph {
    CUgraphExec exec = nullptr;
    std::vector<std::pair<CUdeviceptr, size_t>> scratch;
  };
  Graph end_capture();
  void destroy(Graph& g);
  void replay(const Graph& g);
  bool capturing() const { return capturing_; }

 private:
  explicit Context(const DeviceProps& props);
  void check_index_flag();

  DeviceProps props_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent timing_start_ = nullptr;  // time_next_launch
  std::string arch_;
  mutable std::mutex mutex_;
  std::multimap<size_t, CUdeviceptr> free_blocks_;  // by rounded size
  int64_t cached_bytes_ = 0;
  MemoryStats stats_;
  std::unordered_map<std::string, CUfunction> functions_;  // entry + "\n" + source
  std::unordered_map<CUfunction, int> shared_opt_in_;      // dynamic shared bytes allowed so far
  // Pinned staging blocks for uploads, each reusable once its event has passed.
  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    CUevent done = nullptr;
  };
  std::vector<Staging> staging_;
  // Scratch handed out for the op being queued; while capturing, what earlier ops of the
  // recording released (the recording keeps both).
  std::vector<std::pair<CUdeviceptr, size_t>> scratch_, captured_free_;
  bool capturing_ = false;
  CUdeviceptr flag_ = 0;
  std::map<uint64_t, IndexLaunch> index_launches_;
  uint64_t next_launch_ = 1;
  bool index_pending_ = false;
};

}  // namespace alk::cuda
