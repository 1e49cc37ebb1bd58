// The runtime layer: what a backend implements, below both the scheduler and the backends.
// Split by concern, as ggml's backend interface and tinygrad's runtime are:
//   allocator  allocate(bytes) -> Buffer {device, opaque handle, bytes}, freed through the device
//   stream     one in-order queue per device: upload/copy/launch enqueue; download and
//              synchronize are the only calls that wait (the host waits where it reads)
//   compiler   prepare(kernel) -> a compiled kernel, cached by its full source; launch(it, kernel)
//   graphs     record(kernels) once -> replay() many times (a command buffer, a CUDA graph)
//   support    supports(kernel): the scheduler sends a device only what it can run;
//              fuses_epilogue(op) / widens_input(op, slot) / extra_outputs(op) / norm_backward_adds():
//              what it may fuse for the device
// and a registry of the devices this process found: "cpu", "vulkan", "vulkan:N", "auto".
// Nothing outside src/backend reads or writes device memory except through this interface.
// Public, so a user can list devices and pick one, and a backend built against an installed
// alk implements it: alk/kernel.h defines the Kernel it runs, alk/op_table.h the OpId,
// alk/op_registry.h the table it registers its template ops in (examples/backend/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alk/error.h"

namespace alk {

class Device;
struct Kernel;  // alk/kernel.h: what a device runs
enum class OpId : uint16_t;  // alk/op_table.h

// Device memory. Only the owning backend interprets the handle (a host pointer on the CPU,
// a pool slot on Vulkan); everyone else passes the Buffer back to its device (an address for
// code outside alk: Device::address).
struct Buffer {
  Buffer(Device* owner, void* handle_, size_t bytes_);
  ~Buffer();  // returns the memory to its device
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Device* const device;
  void* const handle;
  const size_t bytes;
  static int64_t live_count();  // for the leak report (ALK_LEAKS=1) and tests
  static int64_t live_bytes();
  // The high-water mark of live_bytes() (every device together) since the process started
  // or the last reset_peak_bytes(): what torch.cuda.max_memory_allocated tells, for alk.
  static int64_t peak_bytes();
  static void reset_peak_bytes();
};

struct DeviceInfo {
  std::string name;         // "cpu", "vulkan:0"
  std::string kind;         // "cpu", "vulkan", "cuda"
  std::string description;  // the adapter ("AMD EPYC 9R14", "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)")
  std::string type;         // "cpu", "discrete", "integrated", "virtual", "software"
  std::string driver;       // driver name and version
  int64_t memory_bytes = 0;  // device-local memory (the host's RAM for the CPU)
  size_t alignment = 64;     // the byte alignment of buffers, arena slices and bound views
  size_t max_allocation = SIZE_MAX;
  std::vector<std::string> features;  // "f64", "i64", "f16", "bf16", "subgroups", "cooperative_matrix", ...
};

// A kernel compiled for one device (a pipeline, a loaded module), valid for every launch
// of a kernel with the same source.
struct PreparedKernel {
  virtual ~PreparedKernel() = default;
};

// A kernel list recorded once and replayed as one device object.
struct Recording {
  virtual ~Recording() = default;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  const std::string& name() const { return info().name; }

  // ---- allocator ----
  // Contents are undefined. Throws alk::Error when the device cannot hold it.
  virtual std::shared_ptr<Buffer> allocate(size_t bytes) = 0;
  // Returns memory kept for reuse to the system (or the driver).
  virtual void release_cached_memory() {}

  // ---- stream ----
  // src is copied before upload returns (the caller may reuse it at once).
  virtual void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) = 0;
  // Waits for the queued work that writes src, then copies to host memory.
  virtual void download(const Buffer& src, size_t offset, void* dst, size_t bytes) = 0;
  virtual void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Where byte `offset` of `buffer` (memory of this device) lies, for code outside alk that
  // reads or writes it in place: a host pointer on the CPU (NumPy's view of a tensor, MPI), a
  // device pointer (CUdeviceptr) on CUDA (NCCL). The default, for memory without an address
  // (Vulkan's pool slots), raises alk::Error; nobody but the owning backend reads Buffer::handle.
  virtual void* address(const Buffer& buffer, size_t offset, Loc loc = Loc::current()) const;

  // ---- kernels ----
  virtual bool supports(const Kernel& k) const = 0;
  // What the scheduler may fuse for this device, asked before it builds kernels:
  // whether a Map over the result of template op `core` may run as that op's epilogue
  // (Kernel::epilogue; the default: reductions, matmuls and convolutions, which every
  // backend takes), and whether the kernel of `op` reads input `slot` in any floating
  // dtype, widening as it loads, so a 16-bit tensor may stand in for its f32 cast.
  virtual bool fuses_epilogue(OpId core) const;
  virtual bool widens_input(OpId op, size_t slot) const;
  // Whether LayerNormBackward may take a fourth input of x's shape and dtype, a gradient its
  // dx rows add as they are written: autograd then sums the residual stream's gradient there
  // (GradFn::backward_folding) instead of in an add reading both again. Default: no.
  virtual bool norm_backward_adds() const;
  // Whether kernels of op `core` (OpId::Map, or a template op with an epilogue) may store
  // extra outputs (Kernel::extra_outputs: an f32 sum and its bf16 cast in one pass): Fuses (in
  // the same pass, faster: the scheduler forms them), Runs (correctly, but each output its own
  // pass or no faster: formed only under ALK_EXTRA_OUTPUTS=1), No. The default: Map kernels Run.
  enum class ExtraOutputs : uint8_t { No, Runs, Fuses };
  virtual ExtraOutputs extra_outputs(OpId core) const;
  virtual std::shared_ptr<PreparedKernel> prepare(const Kernel& k) = 0;
  // Enqueues k; errors found while it runs may surface here or at the next synchronize.
  virtual void launch(PreparedKernel& prepared, const Kernel& k) = 0;
  void run(const Kernel& k) {  // prepare + launch
    auto p = prepare(k);
    launch(*p, k);
  }
  // Kernels the scheduler placed side by side that may run as one launch: Map kernels of one
  // source, none reading what another writes (an optimizer's per-parameter updates). The
  // default runs them one by one; CUDA launches runs of them as multi-tensor kernels.
  virtual void run_batch(const std::vector<Kernel>& kernels);

  // ---- record / replay ----
  // The default records the prepared kernels and replays them one launch each; a GPU
  // backend records them into one device object. Buffers the kernels name are kept alive.
  virtual std::unique_ptr<Recording> record(const std::vector<Kernel>& kernels);
  virtual void replay(Recording& recording);

 protected:
  friend struct Buffer;
  virtual void free(void* handle, size_t bytes) noexcept = 0;
};

// ---- the registry ----
// The CPU device, always present.
Device& cpu_device();
// A device by name: "cpu", "vulkan" (= vulkan:0), "vulkan:1", "cuda:0", "auto" (the best
// GPU found, else the CPU). Unknown or absent devices raise alk::Error listing what exists.
Device& get_device(std::string_view spec, Loc loc = Loc::current());
// Every device this process found (probing the backends the first time).
std::vector<Device*> available_devices();
// A backend's probe: creates the devices it finds (may find none). Backends register one
// at static-initialization time through DeviceRegistration.
using DeviceProbe = std::function<std::vector<std::unique_ptr<Device>>()>;
struct DeviceRegistration {
  DeviceRegistration(std::string kind, int priority, DeviceProbe probe);
};
// Devices made from their name on first use instead of found by a probe: a name "KIND:..."
// whose KIND has a factory ("remote:HOST:PORT/cpu", src/remote) is made once by it, kept by
// the registry for the process, and listed by available_devices() from then on.
using DeviceFactory = std::function<std::unique_ptr<Device>(std::string_view name, Loc loc)>;
struct DeviceFactoryRegistration {
  DeviceFactoryRegistration(std::string kind, DeviceFactory factory);
};
// Returns every device's cached memory (Device::release_cached_memory).
void release_cached_memory();

// How f32 matmuls may run on GPUs: "highest" (f32 arithmetic, the default) or "high" (TF32
// tensor cores: 10-bit mantissas in, f32 sums; ~1e-3 relative error), as PyTorch's
// torch.set_float32_matmul_precision. ALK_TF32=1 starts the process at "high". Read when a
// kernel is prepared: a compiled step keeps the choice it was recorded with.
void set_float32_matmul_precision(std::string_view precision, Loc loc = Loc::current());
std::string_view float32_matmul_precision();

// The device new tensors are created on: ALK_DEVICE, else the CPU; DeviceGuard changes it
// for a scope (like PyTorch's `with torch.device(...)`).
Device& default_device();
class DeviceGuard {
 public:
  explicit DeviceGuard(Device& device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device* previous_;
};

}  // namespace alk
