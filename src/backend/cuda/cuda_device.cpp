// The CUDA backend as a runtime Device (include/alk/device.h), registered as "cuda:N".
//
// What runs: Map kernels from the CUDA C emitter (ops/map.cpp), and the template ops of
// template_ops() (each kernel family's file under ops/ registers its ops: reductions with their
// fused prologue, matmul, attention, norms, ...), all compiled at run time by NVRTC (context.h
// caches the cubins in memory and on disk). A template op's epilogue runs in its own store
// where its kernels take it, else as a Map kernel over the op's result, as on the CPU.
// Recording (alk::compile) captures the stream into a CUDA graph.
#include "backend/cuda/cuda_device.h"

#include <mutex>
#include <optional>

#include "backend/cuda/gpu_timer.h"
#include "backend/cuda/ops/map.h"
#include "backend/cuda/template_ops.h"

namespace alk::cuda {

namespace {

// Which entry runs k: Map kernels are the device's own (ops/map.cpp), the rest the table's
// (nullptr where the table has none).
const TemplateOp* entry_of(const Kernel& k) { return k.op == OpId::Map ? &map_kernels() : template_ops().find(k.op); }

// "" when the device runs k, else why not: the views the kernels take, then the op's entry.
std::string unsupported_reason(const Kernel& k) {
  auto rank_ok = [](const KernelArg& a) { return a.shape.size() <= 8; };
  if (!rank_ok(k.output)) return "rank " + std::to_string(k.output.shape.size()) + " > 8";
  for (const KernelArg& a : k.inputs)
    if (!rank_ok(a)) return "an input of rank " + std::to_string(a.shape.size()) + " > 8";
  const TemplateOp* op = entry_of(k);
  if (!op) {
    const OpSupport& s = template_ops().coverage().support(k.op);
    if (s.status == OpSupport::Status::Refused) return s.note;
    return "no CUDA kernel for " + std::string(op_name(k.op)) + " yet";
  }
  return op->unsupported ? op->unsupported(k) : "";
}

struct PreparedCuda final : PreparedKernel {};

struct CudaRecording final : alk::Recording {
  Context* ctx = nullptr;
  Context::Graph graph;
  std::vector<std::shared_ptr<const void>> keep;  // buffers the graph names
  ~CudaRecording() override {
    if (ctx) ctx->destroy(graph);
  }
};

DeviceInfo device_info(const DeviceProps& p) {
  DeviceInfo info;
  info.name = "cuda:" + std::to_string(p.index);
  info.kind = "cuda";
  info.description = p.name;
  info.type = "discrete";
  int version = 0;
  driver()->cuDriverGetVersion(&version);
  info.driver = "CUDA driver " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) + ", compute " +
                std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor) + ", " + std::to_string(p.multiprocessors) +
                " SMs";
  info.memory_bytes = static_cast<int64_t>(p.memory_bytes);
  info.alignment = 256;
  info.features = {"f64", "i64", "f16", "bf16", "tensor_cores", "cross_entropy", "attention_16bit"};
  return info;
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(const DeviceProps& p) : index_(p.index), info_(device_info(p)) {}
  const DeviceInfo& info() const override { return info_; }

  std::shared_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_shared<Buffer>(this, reinterpret_cast<void*>(ctx().allocate(bytes)), bytes);
  }
  void release_cached_memory() override {
    if (opened_) ctx().trim();
  }
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    ctx().upload(device_ptr(dst) + offset, src, bytes);
  }
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    ctx().download(device_ptr(src) + offset, dst, bytes);
  }
  void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) override {
    if (src.device != this || dst.device != this) return copy_buffer(src, src_offset, dst, dst_offset, bytes);
    ctx().copy(device_ptr(src) + src_offset, device_ptr(dst) + dst_offset, bytes);
  }
  void synchronize() override {
    if (opened_) ctx().synchronize();
  }
  void* address(const Buffer& b, size_t offset, Loc) const override {
    return reinterpret_cast<void*>(device_ptr(b) + offset);
  }

  bool supports(const Kernel& k) const override { return unsupported_reason(k).empty(); }
  // Beyond reductions and products, the ops whose kernels apply an epilogue in their store
  // (the norms, ops/norm.cpp: under autocast a layer norm writes the next product's bf16
  // operand itself). Layer norm's backward widens a 16-bit gradient as it loads, and adds the
  // gradient its input already has (a residual stream's) as it writes dx.
  bool fuses_epilogue(OpId core) const override {
    const TemplateOp* op = template_ops().find(core);
    return Device::fuses_epilogue(core) || (op && op->launch_with_epilogue);
  }
  bool widens_input(OpId op, size_t slot) const override { return op == OpId::LayerNormBackward && slot == 2; }
  bool norm_backward_adds() const override { return true; }
  // Map kernels: one pass storing an f32 sum and its bf16 cast (the residual gradient and the
  // next product's operand), the cast's read of the sum saved. A product's epilogue runs them
  // (the ping-pong kernel stages the extra output first), but not faster yet: the GPT-2 fc
  // products with the GELU beside them took 258 us against 204 apart (bench/cuda/NOTES.md).
  ExtraOutputs extra_outputs(OpId core) const override {
    return core == OpId::Map ? ExtraOutputs::Fuses : core == OpId::Matmul ? ExtraOutputs::Runs : ExtraOutputs::No;
  }

  std::shared_ptr<PreparedKernel> prepare(const Kernel& k) override {
    if (std::string why = unsupported_reason(k); !why.empty())
      fail(std::string(op_name(k.node.op)) + " cannot run on " + info_.name + ": " + why);
    // Compiling is launching with compile_only set: the launchers build the same sources.
    Context& c = ctx();
    std::lock_guard lock(mutex_);
    c.compile_only = true;
    try {
      enqueue(c, k);
    } catch (...) {
      c.compile_only = false;
      c.release_scratch();
      throw;
    }
    c.compile_only = false;
    c.release_scratch();
    return prepared_;
  }

  void launch(PreparedKernel&, const Kernel& k) override {
    Context& c = ctx();
    std::lock_guard lock(mutex_);
    GpuTimer timer(c);
    try {
      enqueue(c, k);
    } catch (...) {
      c.release_scratch();
      c.time_next_launch(nullptr);
      throw;
    }
    c.release_scratch();
    timer.add(c, kernel_label(k), 1);
  }

  void run_batch(const std::vector<Kernel>& kernels) override {
    Context& c = ctx();
    const std::vector<Group> groups = groups_of(kernels);
    std::lock_guard lock(mutex_);
    for (const Group& g : groups) {
      GpuTimer timer(c);
      try {
        enqueue_group(c, kernels, g);
      } catch (...) {
        c.release_scratch();
        c.time_next_launch(nullptr);
        throw;
      }
      c.release_scratch();
      // A multi-tensor group by its op (members of any shape), counted once per member.
      const Kernel& first = kernels[g.begin];
      const size_t members = g.members.size();
      timer.add(c, members > 1 ? "group: map:" + std::string(op_name(first.node.op)) : kernel_label(first),
                static_cast<int64_t>(std::max<size_t>(1, members)));
    }
  }

  std::unique_ptr<alk::Recording> record(const std::vector<Kernel>& kernels) override {
    const std::vector<Group> groups = groups_of(kernels);
    Context& c = ctx();
    for (const Group& g : groups) {  // compile everything before capturing
      if (g.members.size() < 2) {
        prepare(kernels[g.begin]);
        continue;
      }
      std::lock_guard lock(mutex_);
      c.compile_only = true;
      try {
        enqueue_group(c, kernels, g);
      } catch (...) {
        c.compile_only = false;
        throw;
      }
      c.compile_only = false;
    }
    auto r = std::make_unique<CudaRecording>();
    std::lock_guard lock(mutex_);
    c.synchronize();
    c.begin_capture();
    try {
      for (const Group& g : groups) {
        enqueue_group(c, kernels, g);
        c.release_scratch();  // stream order: the next kernels may take it again
      }
    } catch (...) {
      Context::Graph g = c.end_capture();
      c.destroy(g);
      throw;
    }
    r->graph = c.end_capture();
    r->ctx = &c;
    for (const Kernel& k : kernels) {
      for (const KernelArg& a : k.inputs) r->keep.push_back(a.buffer);
      for (const KernelArg& a : k.epilogue_inputs) r->keep.push_back(a.buffer);
      r->keep.push_back(k.output.buffer);
      for (const ExtraOutput& x : k.extra_outputs) r->keep.push_back(x.arg.buffer);
    }
    return r;
  }
  void replay(alk::Recording& recording) override {
    auto* r = dynamic_cast<CudaRecording*>(&recording);
    if (!r) fail("replay of a recording made by another device");
    ctx().replay(r->graph);
  }

 protected:
  void free(void* handle, size_t bytes) noexcept override {
    ctx().release(reinterpret_cast<CUdeviceptr>(handle), bytes);
  }

 private:
  // Runs of independent Map kernels of one source become multi-tensor launches: a group is
  // one kernel (members empty or one) or members launched together (launch_map_group).
  struct Group {
    size_t begin, end;
    std::vector<GroupMember> members;
  };
  static std::vector<Group> groups_of(const std::vector<Kernel>& kernels) {
    std::vector<Group> groups;
    for (size_t i = 0; i < kernels.size();) {
      std::optional<GroupMember> first = group_member(kernels[i]);
      Group g{i, i + 1, {}};
      if (first) {
        g.members.push_back(std::move(*first));
        const std::string key = map_kernel_key(kernels[i]);
        while (g.end < kernels.size()) {
          std::optional<GroupMember> next = group_member(kernels[g.end]);
          bool fits = next && map_kernel_key(kernels[g.end]) == key;
          for (size_t k = 0; fits && k < next->in.size(); ++k) fits = next->in[k].uniform == g.members[0].in[k].uniform;
          for (const GroupMember& m : g.members) fits = fits && independent(m, *next);
          if (!fits) break;
          g.members.push_back(std::move(*next));
          ++g.end;
        }
      }
      i = g.end;
      groups.push_back(std::move(g));
    }
    return groups;
  }
  void enqueue_group(Context& c, const std::vector<Kernel>& kernels, const Group& g) {
    if (g.members.size() < 2) return enqueue(c, kernels[g.begin]);
    const Kernel& k = kernels[g.begin];
    expr::MapSignature sig{"map", {}, k.output.dtype};
    for (const KernelArg& a : k.inputs) sig.inputs.push_back(a.dtype);
    launch_map_group(c, *k.expr, sig, g.members);
  }

  Context& ctx() const {
    std::call_once(open_once_, [this] {
      ctx_ = &Context::get(index_);
      opened_ = true;
    });
    return *ctx_;
  }

  // Queues k: the core op into the output (or into scratch of the core's dtype when an
  // epilogue changes it), then the epilogue as a Map kernel over that value, unless the op's
  // kernels apply it in their store.
  void enqueue(Context& c, const Kernel& k) {
    const TemplateOp* op = entry_of(k);
    if (!op) fail(std::string(op_name(k.node.op)) + " cannot run on " + info_.name + ": " + unsupported_reason(k));
    if (k.op == OpId::HostCall) return op->launch(c, k, Arg{});  // runs on the host now: no output of its own
    const Arg out = arg_of(k.output);
    if (k.op == OpId::Map) return op->launch(c, k, out);  // its extra outputs beside it
    if (k.epilogue && op->launch_with_epilogue && op->launch_with_epilogue(c, k, out)) return;
    Arg value = out;
    if (k.epilogue) {
      value.dtype = k.node.dtype;
      value.shape = k.node.shape;
      value.strides = contiguous_strides(k.node.shape);
      if (k.node.dtype != out.dtype) {
        value.ptr = c.scratch(static_cast<size_t>(numel(k.node.shape)) * dtype_size(k.node.dtype));
        value.offset = 0;
      }
    }
    op->launch(c, k, value);
    if (!k.epilogue) return;
    std::vector<Arg> in{Arg{value.ptr, value.dtype, out.shape, contiguous_strides(out.shape), value.offset}};
    for (const KernelArg& a : k.epilogue_inputs) in.push_back(arg_of(a));
    std::vector<ExtraArg> extra;  // over the same operands as the epilogue
    for (const ExtraOutput& x : k.extra_outputs) extra.push_back({arg_of(x.arg), x.expr});
    launch_map(c, *k.epilogue, in, out, extra);
  }

  int index_;
  DeviceInfo info_;
  mutable std::once_flag open_once_;
  mutable Context* ctx_ = nullptr;
  mutable bool opened_ = false;
  std::mutex mutex_;
  std::shared_ptr<PreparedCuda> prepared_ = std::make_shared<PreparedCuda>();
};

const DeviceRegistration registration("cuda", 2, [] {
  std::vector<std::unique_ptr<Device>> found;
  for (const DeviceProps& p : devices()) found.push_back(std::make_unique<CudaDevice>(p));
  return found;
});

}  // namespace

}  // namespace alk::cuda
