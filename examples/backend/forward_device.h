// An example backend, built against an installed alk (find_package(alk)) from its public
// headers alone: "forward:0", a device whose memory is CPU buffers it owns and whose every
// kernel runs on the CPU device, counted by op. It is what a new backend starts from: the
// Device interface (alk/device.h), the Kernel it receives (alk/kernel.h), the op table's OpId
// (alk/op_table.h), registered at static initialization with DeviceRegistration.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "alk/device.h"
#include "alk/kernel.h"
#include "alk/op_table.h"

namespace forward_backend {

class ForwardDevice final : public alk::Device {
 public:
  ForwardDevice();
  const alk::DeviceInfo& info() const override { return info_; }

  std::shared_ptr<alk::Buffer> allocate(size_t bytes) override;
  void release_cached_memory() override;
  void upload(const alk::Buffer& dst, size_t offset, const void* src, size_t bytes) override;
  void download(const alk::Buffer& src, size_t offset, void* dst, size_t bytes) override;
  void copy(const alk::Buffer& src, size_t src_offset, const alk::Buffer& dst, size_t dst_offset,
            size_t bytes) override;
  void synchronize() override;
  void* address(const alk::Buffer& buffer, size_t offset, alk::Loc loc) const override;

  // The scheduler asks these before it builds kernels: answering as the CPU does gives this
  // device the CPU's kernels, so its results are the CPU's.
  bool supports(const alk::Kernel& k) const override;
  bool fuses_epilogue(alk::OpId core) const override;
  bool widens_input(alk::OpId op, size_t slot) const override;
  bool norm_backward_adds() const override;
  ExtraOutputs extra_outputs(alk::OpId core) const override;
  std::shared_ptr<alk::PreparedKernel> prepare(const alk::Kernel& k) override;
  void launch(alk::PreparedKernel& prepared, const alk::Kernel& k) override;

  // Kernels launched on this device since the process started: of one op, and in all.
  int64_t launches(alk::OpId op) const;
  int64_t launches() const;
  // Buffers of this device alive now.
  size_t live_buffers() const;

 protected:
  void free(void* handle, size_t bytes) noexcept override;

 private:
  // The CPU buffer behind one of this device's buffers.
  const std::shared_ptr<alk::Buffer>& cpu_buffer(const alk::Buffer& mine) const;
  // k with every argument on this device's memory moved to the CPU buffer behind it.
  alk::Kernel on_cpu(const alk::Kernel& k) const;

  alk::DeviceInfo info_;
  mutable std::mutex mutex_;
  uintptr_t next_handle_ = 0;                                          // handles are numbers, not addresses
  std::unordered_map<void*, std::shared_ptr<alk::Buffer>> cpu_buffers_;  // by this device's handle
  std::array<std::atomic<int64_t>, alk::kNumOps> launches_{};
};

// The registered device (what get_device("forward") finds).
ForwardDevice& forward_device();

}  // namespace forward_backend
