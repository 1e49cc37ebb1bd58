#include "runtime/device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace alk {

namespace {
std::atomic<int64_t> g_live_buffers{0}, g_live_bytes{0}, g_peak_bytes{0};

// ALK_LEAKS=1: buffers still alive when the program exits (tensors a static or a leak holds).
struct LeakReport {
  ~LeakReport() {
    const char* v = std::getenv("ALK_LEAKS");
    if (!v || !*v || std::strcmp(v, "0") == 0) return;
    std::fprintf(stderr, "[alk leaks] %lld buffers (%lld bytes) alive at exit\n",
                 static_cast<long long>(g_live_buffers.load()), static_cast<long long>(g_live_bytes.load()));
  }
} g_leak_report;
}  // namespace

Buffer::Buffer(Device* owner, void* handle_, size_t bytes_) : device(owner), handle(handle_), bytes(bytes_) {
  ++g_live_buffers;
  const int64_t live = g_live_bytes += static_cast<int64_t>(bytes);
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

Buffer::~Buffer() {
  device->free(handle, bytes);
  --g_live_buffers;
  g_live_bytes -= static_cast<int64_t>(bytes);
}

int64_t Buffer::live_count() { return g_live_buffers; }
int64_t Buffer::live_bytes() { return g_live_bytes; }
int64_t Buffer::peak_bytes() { return g_peak_bytes; }
void Buffer::reset_peak_bytes() { g_peak_bytes = g_live_bytes.load(); }

namespace {
struct PreparedList final : Recording {
  std::vector<Kernel> kernels;
  std::vector<std::shared_ptr<PreparedKernel>> prepared;
};
}  // namespace

bool Device::fuses_epilogue(OpId core) const {
  return core == OpId::Reduce || core == OpId::Matmul || core == OpId::Conv2d;
}

bool Device::widens_input(OpId, size_t) const { return false; }
bool Device::norm_backward_adds() const { return false; }
void* Device::address(const Buffer& buffer, size_t offset, Loc loc) const {
  (void)buffer;
  fail("address", loc, name(), "'s memory has no address outside its backend (offset ", offset,
       "): copy the tensor to the CPU first");
}
Device::ExtraOutputs Device::extra_outputs(OpId core) const { return core == OpId::Map ? ExtraOutputs::Runs : ExtraOutputs::No; }

void Device::run_batch(const std::vector<Kernel>& kernels) {
  for (const Kernel& k : kernels) run(k);
}

std::unique_ptr<Recording> Device::record(const std::vector<Kernel>& kernels) {
  auto r = std::make_unique<PreparedList>();
  r->kernels = kernels;
  for (const Kernel& k : kernels) r->prepared.push_back(prepare(k));
  return r;
}

void Device::replay(Recording& recording) {
  auto& r = dynamic_cast<PreparedList&>(recording);
  for (size_t i = 0; i < r.kernels.size(); ++i) launch(*r.prepared[i], r.kernels[i]);
}

void copy_buffer(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) {
  if (bytes == 0) return;
  if (src.device == dst.device) return src.device->copy(src, src_offset, dst, dst_offset, bytes);
  std::vector<unsigned char> host(bytes);
  src.device->download(src, src_offset, host.data(), bytes);
  dst.device->upload(dst, dst_offset, host.data(), bytes);
}

namespace {
std::atomic<bool>& tf32_allowed() {
  static std::atomic<bool> allowed = [] {
    const char* e = std::getenv("ALK_TF32");
    return e && *e && std::string_view(e) != "0";
  }();
  return allowed;
}
}  // namespace

void set_float32_matmul_precision(std::string_view precision, Loc loc) {
  check(precision == "highest" || precision == "high", "set_float32_matmul_precision", loc,
        "precision must be \"highest\" or \"high\", got \"", precision, "\"");
  tf32_allowed() = precision == "high";
}

std::string_view float32_matmul_precision() { return tf32_allowed() ? "high" : "highest"; }

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Zero dims count as 1: an empty tensor's strides stay those of its non-empty dims, which
    // shape checks keep within 64 bits (a zero next to huge dims once overflowed here).
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string kernel_label(const Kernel& k) {
  std::string name = k.op == OpId::Map ? "map:" + std::string(op_name(k.node.op)) : std::string(op_name(k.op));
  if (k.op == OpId::Reduce) name += " " + to_string(k.node.in_shape) + " -> " + to_string(k.node.shape);
  else if (k.op != OpId::Map || numel(k.output.shape) > (1 << 20)) name += " " + to_string(k.output.shape);
  if (k.op == OpId::Matmul)
    for (size_t i = 0; i < 2 && i < k.inputs.size(); ++i) {
      const KernelArg& a = k.inputs[i];
      const size_t r = a.shape.size();
      name += (i == 0 ? " " : " x ") + to_string(a.shape);
      if (r >= 2 && a.strides[r - 1] != 1 && a.strides[r - 2] == 1) name += "^T";
    }
  if (k.op == OpId::Conv2d && k.inputs.size() >= 2)  // a depthwise layer's weight is [C, 1, kh, kw]
    name += " " + to_string(k.inputs[0].shape) + " * " + to_string(k.inputs[1].shape);
  if (k.epilogue) {
    name += " +epilogue(";
    for (size_t i = 0; i < k.epilogue_inputs.size(); ++i) {
      const KernelArg& a = k.epilogue_inputs[i];
      Shape extent = a.shape;
      for (size_t d = 0; d < extent.size(); ++d)
        if (a.strides[d] == 0) extent[d] = 1;
      name += std::string(i ? ", " : "") + std::string(dtype_name(a.dtype)) + to_string(extent);
    }
    name += ")";
  }
  for (const ExtraOutput& x : k.extra_outputs) name += " +" + std::string(dtype_name(x.arg.dtype)) + " out";
  return name;
}

std::string map_kernel_key(const Kernel& k) {
  std::string key = k.expr ? k.expr->str() : std::string();
  key += " -> ";
  key += dtype_name(k.output.dtype);
  for (const KernelArg& in : k.inputs) {
    key += ' ';
    key += dtype_name(in.dtype);
  }
  for (const ExtraOutput& x : k.extra_outputs) {
    key += " ; ";
    key += x.expr.str() + " -> " + std::string(dtype_name(x.arg.dtype));
  }
  return key;
}

Kernel extra_output_kernel(const Kernel& k, size_t j) {
  Kernel one;
  one.node = k.node;
  one.op = OpId::Map;
  one.inputs = k.inputs;
  one.output = k.extra_outputs.at(j).arg;
  one.expr = k.extra_outputs[j].expr;
  return one;
}

std::vector<DeviceProbeEntry>& device_probes() {
  static std::vector<DeviceProbeEntry> list;
  return list;
}

DeviceRegistration::DeviceRegistration(std::string kind, int priority, DeviceProbe probe) {
  device_probes().push_back({std::move(kind), priority, std::move(probe)});
}

std::vector<DeviceFactoryEntry>& device_factories() {
  static std::vector<DeviceFactoryEntry> list;
  return list;
}

DeviceFactoryRegistration::DeviceFactoryRegistration(std::string kind, DeviceFactory factory) {
  device_factories().push_back({std::move(kind), std::move(factory)});
}

}  // namespace alk
