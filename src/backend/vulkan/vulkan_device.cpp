#include "backend/vulkan/vulkan_device.h"

#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/index_errors.h"
#include "backend/vulkan/stream.h"

namespace alk::vk {

namespace {

// What a Buffer's opaque handle points to on this backend.
struct Slot {
  std::shared_ptr<Allocation> alloc;
};


expr::MapSignature map_signature(const Kernel& k) {
  expr::MapSignature sig{"map", {}, k.output.dtype};
  for (const KernelArg& a : k.inputs) sig.inputs.push_back(a.dtype);
  return sig;
}

std::string layout_reason(const Context& ctx, const Kernel& k) {
  if (k.output.shape.size() > 8) return "rank " + std::to_string(k.output.shape.size()) + " > 8";
  const int64_t n = numel(k.output.shape);
  if (n > std::numeric_limits<uint32_t>::max()) return "more than 2^32 elements (32-bit indices)";
  // Each view binds only the bytes it touches; those must fit one binding.
  auto span_bytes = [](const KernelArg& a) {
    uint64_t elements = 1;
    for (size_t d = 0; d < a.shape.size() && d < a.strides.size(); ++d)
      elements += static_cast<uint64_t>(a.shape[d] > 0 ? a.shape[d] - 1 : 0) * static_cast<uint64_t>(std::abs(a.strides[d]));
    return elements * dtype_size(a.dtype);
  };
  const uint64_t range = ctx.info().max_storage_buffer_range;
  for (const KernelArg& a : k.inputs)
    if (span_bytes(a) > range) return "an input spans more than maxStorageBufferRange (" + std::to_string(range) + " bytes)";
  if (span_bytes(k.output) > range) return "the output spans more than maxStorageBufferRange (" + std::to_string(range) + " bytes)";
  return "";
}

// Runs f, which prepares, encodes or launches kernel k. An alk::Error raised inside the
// backend (vk::fail names op "vulkan" and loader.cpp's line; template kernels name their own
// files) is raised again naming the kernel's op and the user's call site (Kernel::node.loc),
// as the CPU's kernels do; errors that already name a call site outside src/backend pass.
template <class F>
decltype(auto) at_call_site(const Kernel& k, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (std::string_view(e.file()).find("src/backend/") == std::string_view::npos) throw;
    if (e.op() != "vulkan") throw Error(e.op(), e.detail(), k.node.loc);  // a kernel's own error ("random", ...)
    throw Error(k.node.name.empty() ? std::string(op_name(k.node.op)) : k.node.name, "vulkan: " + e.detail(), k.node.loc);
  }
}

struct PreparedMap final : PreparedKernel {
  std::unique_ptr<MapKernel> kernel;
};
struct PreparedTemplate final : PreparedKernel {
  TemplateOp op;
};

struct VulkanRecording final : alk::Recording {
  std::shared_ptr<vk::Recording> commands;
};

alk::DeviceInfo runtime_info(const vk::DeviceInfo& d) {
  alk::DeviceInfo info;
  info.name = "vulkan:" + std::to_string(d.index);
  info.kind = "vulkan";
  info.description = d.name;
  switch (d.kind) {
    case vk::DeviceInfo::Kind::Discrete: info.type = "discrete"; break;
    case vk::DeviceInfo::Kind::Integrated: info.type = "integrated"; break;
    case vk::DeviceInfo::Kind::Virtual: info.type = "virtual"; break;
    case vk::DeviceInfo::Kind::Cpu: case vk::DeviceInfo::Kind::Other: info.type = "software"; break;
  }
  info.driver = d.driver_name + " " + d.driver_info;
  for (const auto& h : d.heaps)
    if (h.device_local) info.memory_bytes = std::max<int64_t>(info.memory_bytes, static_cast<int64_t>(h.bytes));
  info.alignment = std::max<size_t>(64, static_cast<size_t>(d.min_storage_offset_alignment));
  info.max_allocation = d.max_memory_allocation ? d.max_memory_allocation : SIZE_MAX;
  if (d.float64) info.features.push_back("f64");
  if (d.int64) info.features.push_back("i64");
  if (d.storage16) info.features.push_back("f16"), info.features.push_back("bf16");
  if (d.storage8) info.features.push_back("u8"), info.features.push_back("bool");
  if (d.subgroup_size) info.features.push_back("subgroups(" + std::to_string(d.subgroup_size) + ")");
  if (d.cooperative_matrix) info.features.push_back("cooperative_matrix");
  if (d.cooperative_matrix_nv) info.features.push_back("cooperative_matrix_nv(f16 16x16x16)");
  return info;
}

class VulkanDevice final : public Device {
 public:
  explicit VulkanDevice(const vk::DeviceInfo& d) : index_(d.index), info_(runtime_info(d)) {}
  const alk::DeviceInfo& info() const override { return info_; }

  std::shared_ptr<Buffer> allocate(size_t bytes) override {
    // Small buffers (per-step state, scalars) where the host writes and reads them directly
    // (Context::mapped_small): a replayed step needs no staging copy before it.
    Pool* small = bytes <= Context::kSmallStateBytes ? ctx().mapped_small() : nullptr;
    auto slot = new Slot{(small ? *small : ctx().pool()).allocate(bytes)};
    return std::make_shared<Buffer>(this, slot, bytes);
  }
  void release_cached_memory() override {
    if (!ctx_) return;
    ctx_->stream().synchronize();  // what pending work kept alive is released
    ctx_->pool().trim();
    ctx_->staging().trim();
    if (Pool* small = ctx_->mapped_small()) small->trim();
  }
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    ctx().stream().upload(alloc(dst), offset, src, bytes);
  }
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    ctx().stream().download(alloc(src), offset, dst, bytes);
    check_index_errors(ctx());  // a bad index on the device surfaces here (index_errors.h)
  }
  void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) override {
    if (src.device != this || dst.device != this) return copy_buffer(src, src_offset, dst, dst_offset, bytes);
    ctx().stream().copy(alloc(src), src_offset, alloc(dst), dst_offset, bytes);
  }
  void synchronize() override {
    if (!ctx_) return;
    ctx_->stream().synchronize();
    check_index_errors(*ctx_);
  }

  bool supports(const Kernel& k) const override { return unsupported(k).empty(); }
  // The layer-norm backward's dx pass adds a fourth input (kernels/reduce.cpp): a residual
  // stream's gradient costs no pass of its own.
  bool norm_backward_adds() const override { return true; }

  std::shared_ptr<PreparedKernel> prepare(const Kernel& k) override {
    return at_call_site(k, [&] { return prepare_kernel(k); });
  }

  void launch(PreparedKernel& prepared, const Kernel& k) override {
    at_call_site(k, [&] { encode(ctx().stream(), prepared, k); });
  }

  std::unique_ptr<alk::Recording> record(const std::vector<Kernel>& kernels) override {
    auto r = std::make_unique<VulkanRecording>();
    r->commands = ctx().stream().record();
    for (const Kernel& k : kernels) {
      auto p = prepare(k);
      if (r->commands->profiled()) r->commands->label(kernel_label(k));
      at_call_site(k, [&] { encode(*r->commands, *p, k); });
      r->commands->keep(p);
      // The buffers the recording names stay alive with it (their allocations already do,
      // but the Buffer objects own the handles).
      for (const KernelArg& a : k.inputs) r->commands->keep(a.buffer);
      for (const KernelArg& a : k.epilogue_inputs) r->commands->keep(a.buffer);
      r->commands->keep(k.output.buffer);
      for (const ExtraOutput& x : k.extra_outputs) r->commands->keep(x.arg.buffer);
    }
    r->commands->finish();
    return r;
  }

 private:
  std::shared_ptr<PreparedKernel> prepare_kernel(const Kernel& k) {
    if (std::string why = unsupported(k); !why.empty())
      fail(std::string(op_name(k.node.op)) + " cannot run on " + info_.name + ": " + why);
    if (k.op != OpId::Map) {
      auto p = std::make_shared<PreparedTemplate>();
      p->op = *template_ops().find(k.op);  // unsupported() found it
      return p;
    }
    const std::string key = map_kernel_key(k);
    std::lock_guard lock(mutex_);
    auto& slot = prepared_[key];
    if (!slot) {
      auto p = std::make_shared<PreparedMap>();
      p->kernel = std::make_unique<MapKernel>(ctx(), *k.expr, map_signature(k));
      slot = p;
    }
    return slot;
  }


 public:
  void replay(alk::Recording& recording) override {
    auto* r = dynamic_cast<VulkanRecording*>(&recording);
    if (!r) fail("replay of a recording made by another device");
    ctx().stream().replay(r->commands);
  }

  std::string unsupported(const Kernel& k) const {
    if (k.op != OpId::Map && !k.extra_outputs.empty()) return "extra outputs of a template op's epilogue";
    for (size_t j = 0; j < k.extra_outputs.size(); ++j)
      if (std::string why = unsupported(extra_output_kernel(k, j)); !why.empty()) return why;
    const std::string key = k.op == OpId::Map ? map_kernel_key(k) : std::string();
    if (k.op == OpId::Map) {
      std::lock_guard lock(mutex_);
      if (auto it = reasons_.find(key); it != reasons_.end())
        return it->second.empty() ? layout_reason(ctx(), k) : it->second;
    }
    std::string why;
    if (k.op == OpId::Map) {
      if (!k.expr) {
        why = "a Map kernel without an expression";
      } else {
        const expr::MapSignature sig = map_signature(k);
        const std::string glsl = expr::emit_map_kernel(*k.expr, sig, expr::Target::Glsl);
        const size_t bindings = sig.inputs.size() + 1 + (expr::glsl_params_in_push_constants(sig.inputs.size()) ? 0 : 1);
        why = map_unsupported_reason(ctx(), glsl, bindings);
      }
      std::lock_guard lock(mutex_);
      reasons_[key] = why;
      return why.empty() ? layout_reason(ctx(), k) : why;
    }
    const TemplateOp* t = template_ops().find(k.op);
    if (!t) {
      const OpSupport& s = template_ops().coverage().support(k.op);
      return s.status == OpSupport::Status::Refused ? s.note : "no Vulkan kernel for " + std::string(op_name(k.op));
    }
    return t->unsupported ? t->unsupported(ctx(), k) : "";
  }

 protected:
  void free(void* handle, size_t) noexcept override { delete static_cast<Slot*>(handle); }

 private:
  static const std::shared_ptr<Allocation>& alloc(const Buffer& b) { return static_cast<const Slot*>(b.handle)->alloc; }

  // The context is opened on first use: probing only lists devices.
  Context& ctx() const {
    std::call_once(opened_, [this] { ctx_ = Context::get(index_); });
    return *ctx_;
  }

  void encode(Encoder& enc, PreparedKernel& prepared, const Kernel& k) {
    if (k.op != OpId::Map) {
      static_cast<PreparedTemplate&>(prepared).op.launch(ctx(), enc, k);
      return;
    }
    std::vector<ViewArg> in;
    for (const KernelArg& a : k.inputs) in.push_back(view_arg(a));
    // Extra outputs (ALK_EXTRA_OUTPUTS=1; Vulkan does not ask for them) as their own
    // dispatches, before the main one, which may write over an input they read.
    for (size_t j = 0; j < k.extra_outputs.size(); ++j) {
      const Kernel one = extra_output_kernel(k, j);
      static_cast<PreparedMap&>(*prepare_kernel(one)).kernel->launch(enc, in, view_arg(one.output));
    }
    static_cast<PreparedMap&>(prepared).kernel->launch(enc, in, view_arg(k.output));
  }

  int index_;
  alk::DeviceInfo info_;
  mutable std::once_flag opened_;
  mutable std::shared_ptr<Context> ctx_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::string> reasons_;  // map kernel key -> why not ("" = fine)
  std::unordered_map<std::string, std::shared_ptr<PreparedMap>> prepared_;
};

// The devices the probe made, by index (the registry owns them; this layer sits below it).
std::vector<VulkanDevice*>& probed_devices() {
  static std::vector<VulkanDevice*> list;
  return list;
}

const DeviceRegistration registration("vulkan", 1, [] {
  std::vector<std::unique_ptr<Device>> found;
  for (const vk::DeviceInfo& d : devices()) {
    auto dev = std::make_unique<VulkanDevice>(d);
    probed_devices().push_back(dev.get());
    found.push_back(std::move(dev));
  }
  return found;
});

}  // namespace

ViewArg view_arg(const KernelArg& a) {
  if (!a.buffer) fail("a kernel argument without a buffer");
  if (a.buffer->device->info().kind != "vulkan") fail("a kernel argument on " + a.buffer->device->name() + ", not Vulkan");
  return ViewArg{static_cast<const Slot*>(a.buffer->handle)->alloc, a.byte_offset, a.dtype, a.shape, a.strides, a.offset};
}

TemplateOpTable<TemplateOp>& template_ops() {
  static TemplateOpTable<TemplateOp> table("vulkan");
  return table;
}

namespace {
// What the kernel families under kernels/ do not register: Map kernels are the GLSL
// emitter's (f64 only where the device has shaderFloat64), and the ops no kernel exists for.
[[maybe_unused]] const bool refused = [] {
  auto& ops = template_ops();
  ops.coverage().set_elementwise(kAllDTypes, "f64 where the device has shaderFloat64");
  ops.refuse(OpId::HostCall, "host functions need host pointers or the CUDA stream; Vulkan buffers have neither");
  ops.refuse(OpId::CrossEntropy, "no fused kernel: cross_entropy is composed of log_softmax and gather here");
  ops.refuse(OpId::CrossEntropyBackward, "no fused kernel: cross_entropy is composed of log_softmax and gather here");
  ops.refuse(OpId::Conv2d, "no direct kernel: conv2d is composed of unfold and matmul here (no \"conv2d\" feature)");
  return true;
}();
}  // namespace

std::string unsupported_reason(int index, const Kernel& k) {
  const std::string name = "vulkan:" + std::to_string(index);
  for (VulkanDevice* d : probed_devices())
    if (d->name() == name) return d->unsupported(k);
  return "no device " + name + " (or the registry has not probed it yet)";
}

}  // namespace alk::vk
