#include "forward_device.h"

#include <vector>

#include "alk/error.h"

namespace forward_backend {

using alk::Buffer;
using alk::Kernel;
using alk::KernelArg;
using alk::OpId;

ForwardDevice::ForwardDevice() : info_(alk::cpu_device().info()) {
  info_.name = "forward:0";
  info_.kind = "forward";
  info_.description = "the CPU's kernels on memory of its own (examples/backend)";
  // type stays "cpu": "auto" never picks it. features, alignment, dtypes: the CPU's, whose
  // kernels it runs (features also decide which fused kernels the ops choose).
}

std::shared_ptr<Buffer> ForwardDevice::allocate(size_t bytes) {
  std::shared_ptr<Buffer> on_cpu = alk::cpu_device().allocate(bytes);
  std::lock_guard lock(mutex_);
  void* handle = reinterpret_cast<void*>(++next_handle_);
  cpu_buffers_.emplace(handle, std::move(on_cpu));
  return std::make_shared<Buffer>(this, handle, bytes);
}

void ForwardDevice::free(void* handle, size_t) noexcept {
  std::shared_ptr<Buffer> released;  // freed outside the lock: it calls the CPU device
  std::lock_guard lock(mutex_);
  auto it = cpu_buffers_.find(handle);
  if (it == cpu_buffers_.end()) return;
  released = std::move(it->second);
  cpu_buffers_.erase(it);
}

const std::shared_ptr<Buffer>& ForwardDevice::cpu_buffer(const Buffer& mine) const {
  alk::check(mine.device == this, "forward", alk::Loc::current(), "a buffer of ", mine.device->name(),
             " given to ", name());
  std::lock_guard lock(mutex_);
  return cpu_buffers_.at(mine.handle);  // the map's nodes stay put while the buffer lives
}

void ForwardDevice::release_cached_memory() { alk::cpu_device().release_cached_memory(); }

void ForwardDevice::upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  alk::cpu_device().upload(*cpu_buffer(dst), offset, src, bytes);
}

void ForwardDevice::download(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  alk::cpu_device().download(*cpu_buffer(src), offset, dst, bytes);
}

void ForwardDevice::copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) {
  alk::cpu_device().copy(*cpu_buffer(src), src_offset, *cpu_buffer(dst), dst_offset, bytes);
}

void ForwardDevice::synchronize() { alk::cpu_device().synchronize(); }

void* ForwardDevice::address(const Buffer& buffer, size_t offset, alk::Loc loc) const {
  return alk::cpu_device().address(*cpu_buffer(buffer), offset, loc);
}

bool ForwardDevice::supports(const Kernel& k) const { return alk::cpu_device().supports(k); }
bool ForwardDevice::fuses_epilogue(OpId core) const { return alk::cpu_device().fuses_epilogue(core); }
bool ForwardDevice::widens_input(OpId op, size_t slot) const { return alk::cpu_device().widens_input(op, slot); }
bool ForwardDevice::norm_backward_adds() const { return alk::cpu_device().norm_backward_adds(); }
alk::Device::ExtraOutputs ForwardDevice::extra_outputs(OpId core) const {
  return alk::cpu_device().extra_outputs(core);
}

Kernel ForwardDevice::on_cpu(const Kernel& k) const {
  Kernel out = k;
  auto move = [this](KernelArg& a) {
    if (a.buffer && a.buffer->device == this) a.buffer = cpu_buffer(*a.buffer);
  };
  move(out.output);
  for (KernelArg& a : out.inputs) move(a);
  for (KernelArg& a : out.epilogue_inputs) move(a);
  for (alk::ExtraOutput& e : out.extra_outputs) move(e.arg);
  return out;
}

std::shared_ptr<alk::PreparedKernel> ForwardDevice::prepare(const Kernel& k) {
  return alk::cpu_device().prepare(on_cpu(k));
}

void ForwardDevice::launch(alk::PreparedKernel& prepared, const Kernel& k) {
  launches_[static_cast<size_t>(k.op)].fetch_add(1, std::memory_order_relaxed);
  alk::cpu_device().launch(prepared, on_cpu(k));
}

int64_t ForwardDevice::launches(OpId op) const { return launches_[static_cast<size_t>(op)].load(); }

int64_t ForwardDevice::launches() const {
  int64_t n = 0;
  for (const auto& count : launches_) n += count.load();
  return n;
}

size_t ForwardDevice::live_buffers() const {
  std::lock_guard lock(mutex_);
  return cpu_buffers_.size();
}

namespace {
ForwardDevice* g_device = nullptr;
// The backend's probe, run the first time anyone lists or names devices.
const alk::DeviceRegistration kRegistration("forward", 0, [] {
  std::vector<std::unique_ptr<alk::Device>> found;
  auto device = std::make_unique<ForwardDevice>();
  g_device = device.get();
  found.push_back(std::move(device));
  return found;
});
}  // namespace

ForwardDevice& forward_device() {
  alk::get_device("forward");  // probes the backends once
  return *g_device;
}

}  // namespace forward_backend
