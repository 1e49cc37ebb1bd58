// The CPU Device: host memory, and kernels run on the thread pool. Map kernels go to
// the expression evaluator (eval.h); template ops to their kernels (kernels.h).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backend/cpu/conv_epilogue.h"
#include "backend/cpu/eval.h"
#include "backend/cpu/gemm_kernel.h"
#include "backend/cpu/kernel_observer.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "runtime/device.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernel_cache.h"
#include "backend/cpu/thread_pool.h"

namespace alk {

namespace {

constexpr size_t kAlign = 64;  // a cache line, and an AVX-512 vector

// Freed blocks of 1 MB and more are kept for reuse, keyed by size class (the size rounded
// up to 1/8 of its power of two): a fresh large block from the OS costs a page fault and
// a page clear per 4 KB, which for a training step's buffers costs more than the kernels.
class BlockCache {
 public:
  static constexpr size_t kMinCached = size_t{1} << 20;
  static constexpr size_t kMaxCachedBytes = size_t{2} << 30;

  static size_t size_class(size_t n) {
    if (n < kMinCached) return (n + kAlign - 1) / kAlign * kAlign;
    size_t p = size_t{1} << (63 - __builtin_clzll(n));  // highest power of two <= n
    size_t step = p / 8;
    return (n + step - 1) / step * step;
  }

  void* take(size_t cls) {
    if (cls >= kMinCached) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= cls;
        return p;
      }
    }
    void* p = ::operator new(cls == 0 ? kAlign : cls, std::align_val_t{align_of(cls)});
    if (cls >= kHuge) ::madvise(p, cls, MADV_HUGEPAGE);  // 2 MB pages: far fewer TLB misses streaming it
    return p;
  }

  // Large blocks start on a 2 MB boundary so the kernel can back them with huge pages.
  static constexpr size_t kHuge = size_t{4} << 20;
  static size_t align_of(size_t cls) { return cls >= kHuge ? size_t{2} << 20 : kAlign; }

  void give(void* p, size_t cls) {
    if (cls >= kMinCached) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + cls <= kMaxCachedBytes) {
        free_[cls].push_back(p);
        cached_bytes_ += cls;
        return;
      }
    }
    ::operator delete(p, std::align_val_t{align_of(cls)});
  }

  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) ::operator delete(p, std::align_val_t{align_of(cls)});
    free_.clear();
    cached_bytes_ = 0;
  }

  ~BlockCache() { release(); }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_bytes_ = 0;
};

BlockCache& block_cache() {
  static BlockCache cache;
  return cache;
}


cpu::View view_of(const KernelArg& a) {
  return cpu::View{static_cast<char*>(a.buffer->handle) + a.byte_offset, a.dtype, a.shape, a.strides, a.offset};
}

std::vector<cpu::View> views_of(const std::vector<KernelArg>& args) {
  std::vector<cpu::View> v;
  for (auto& a : args) v.push_back(view_of(a));
  return v;
}

// A matmul epilogue that only adds f32 tensors to the product (a bias row, a residual),
// as a chain from the product outward: the addends, innermost first, which cpu::matmul adds
// to each tile in registers before storing it (the same sums in the same order as the
// separate pass). nullopt: any other epilogue.
std::optional<std::vector<cpu::View>> matmul_addends(const Kernel& k, const cpu::View& out) {
  if (k.node.op != OpId::Matmul || out.dtype != DType::F32 || k.node.dtype != DType::F32 || out.shape != k.node.shape)
    return std::nullopt;
  const expr::Expr& e = *k.epilogue;
  auto is_addend = [&](int id) {
    const expr::Node& x = e.nodes[static_cast<size_t>(id)];
    return x.fn == expr::Fn::Input && x.slot > 0 && x.type == expr::Type::F32;
  };
  std::vector<cpu::View> outward;
  for (int id = e.root();;) {
    const expr::Node& x = e.nodes[static_cast<size_t>(id)];
    if (x.fn == expr::Fn::Input && x.slot == 0) break;
    if (x.fn != expr::Fn::Add || x.type != expr::Type::F32 || outward.size() == cpu::gemm::Addends::kMax) return std::nullopt;
    const int leaf = is_addend(x.args[0]) ? x.args[0] : is_addend(x.args[1]) ? x.args[1] : -1;
    if (leaf < 0) return std::nullopt;
    const cpu::View v = view_of(k.epilogue_inputs[static_cast<size_t>(e.nodes[static_cast<size_t>(leaf)].slot - 1)]);
    if (v.dtype != DType::F32 || v.shape != out.shape || v.strides.back() != 1) return std::nullopt;
    outward.push_back(v);
    id = leaf == x.args[0] ? x.args[1] : x.args[0];
  }
  if (outward.empty()) return std::nullopt;
  return std::vector<cpu::View>(outward.rbegin(), outward.rend());
}

cpu::Reduction reduction_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return cpu::Reduction::Sum;
    case ReduceOp::Max: return cpu::Reduction::Max;
    case ReduceOp::Min: return cpu::Reduction::Min;
    case ReduceOp::Prod: return cpu::Reduction::Prod;
  }
  return cpu::Reduction::Sum;
}

// A compiled Map kernel on the CPU: the expression the evaluator runs (kept by the cache).
struct CpuMapKernel final : PreparedKernel {
  const expr::Expr* program = nullptr;
};
struct CpuTemplateKernel final : PreparedKernel {};

DeviceInfo cpu_info() {
  DeviceInfo info;
  info.name = info.kind = info.type = "cpu";
  info.driver = "alk cpu (" + std::string(cpu::isa_name(cpu::isa())) + ", " +
                std::to_string(cpu::num_threads()) + " threads)";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      info.description = line.substr(line.find(':') + 2);
      break;
    }
  if (info.description.empty()) info.description = "host CPU";
  info.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  info.alignment = kAlign;
  info.features = {"f64", "i64", "f16", "bf16", "conv2d"};  // conv2d: the fused Conv2d kernel (ops/conv.cpp)
  return info;
}

std::atomic<const cpu::KernelObserver*>& kernel_observer() {
  static std::atomic<const cpu::KernelObserver*> observer{nullptr};
  return observer;
}

class CpuDevice final : public Device {
 public:
  const DeviceInfo& info() const override {
    static const DeviceInfo info = cpu_info();
    return info;
  }
  std::shared_ptr<Buffer> allocate(size_t bytes) override {
    return std::make_shared<Buffer>(this, block_cache().take(BlockCache::size_class(bytes)), bytes);
  }
  void release_cached_memory() override { block_cache().release(); }
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(static_cast<char*>(dst.handle) + offset, src, bytes);
  }
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes) override {
    if (bytes) std::memcpy(dst, static_cast<const char*>(src.handle) + offset, bytes);
  }
  void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) override {
    if (bytes) std::memmove(static_cast<char*>(dst.handle) + dst_offset, static_cast<const char*>(src.handle) + src_offset, bytes);
  }
  void synchronize() override {}
  void* address(const Buffer& b, size_t offset, Loc) const override { return static_cast<char*>(b.handle) + offset; }
  // The reference runs everything: every Map, and every template op in its table.
  bool supports(const Kernel& k) const override { return k.op == OpId::Map || cpu::template_ops().find(k.op); }
  // A norm's epilogue runs over its result in place (run_template): no second buffer. Its
  // backward loads the output gradient in any dtype (RowLayout::load).
  bool fuses_epilogue(OpId core) const override {
    return Device::fuses_epilogue(core) || core == OpId::LayerNorm || core == OpId::RmsNorm;
  }
  bool widens_input(OpId op, size_t slot) const override { return op == OpId::LayerNormBackward && slot == 2; }
  // Each extra output its own pass (launch, run_template): for ALK_EXTRA_OUTPUTS=1 in tests.
  ExtraOutputs extra_outputs(OpId) const override { return ExtraOutputs::Runs; }

  std::shared_ptr<PreparedKernel> prepare(const Kernel& k) override {
    if (k.op != OpId::Map) return template_kernel_;
    auto p = std::make_shared<CpuMapKernel>();
    p->program = &cpu_kernel_cache().get(map_kernel_key(k), *k.expr);
    return p;
  }

  void launch(PreparedKernel& prepared, const Kernel& k) override {
    if (const cpu::KernelObserver* observe = kernel_observer().load(std::memory_order_acquire)) (*observe)(k);
    if (k.op == OpId::Map && !k.extra_outputs.empty()) {
      // Each extra output as its own pass, before the main one (which may write over an input).
      for (size_t j = 0; j < k.extra_outputs.size(); ++j) run(extra_output_kernel(k, j));
      Kernel main = k;
      main.extra_outputs.clear();
      return run(main);
    }
    if (k.op == OpId::Map) {
      auto in = views_of(k.inputs);
      cpu::eval_map(*static_cast<CpuMapKernel&>(prepared).program, in, view_of(k.output));
      return;
    }
    run_template(k);
  }

 protected:
  void free(void* handle, size_t bytes) noexcept override { block_cache().give(handle, BlockCache::size_class(bytes)); }

 private:
  std::shared_ptr<CpuTemplateKernel> template_kernel_ = std::make_shared<CpuTemplateKernel>();

  void run_template(const Kernel& k) {
    if (!k.epilogue) {
      try {
        run_core(k, view_of(k.output));
      } catch (const Error& e) {
        // A composite (embedding) owns the errors of the node it built.
        if (k.node.name.empty() || e.op() == k.node.name) throw;
        throw Error(k.node.name, e.detail(), k.node.loc);
      }
      return;
    }
    const KernelOp& core = k.node;
    cpu::View out = view_of(k.output);
    const bool extras = !k.extra_outputs.empty();  // they read the value: the generic path below
    if (std::optional<std::vector<cpu::View>> addends = extras ? std::nullopt : matmul_addends(k, out)) {
      auto in = views_of(k.inputs);
      cpu::matmul(in[0], in[1], out, *addends);
      return;
    }
    if (!extras && core.op == OpId::Conv2d && core.dtype == DType::F32 && core.shape == out.shape) {
      // relu/hardswish (after a residual add) applied by the convolution to each part of its
      // output while in cache (kernels_conv.cpp), not as a second pass over the whole output.
      auto in = views_of(k.inputs);
      auto extra = views_of(k.epilogue_inputs);
      const auto& p = std::get<UnfoldParams>(core.params);
      if (cpu::conv2d_epilogue(in[0], in[1], in.size() > 2 ? &in[2] : nullptr, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw,
                               *k.epilogue, extra, out))
        return;
    }
    // The core writes its value where the epilogue can read it: the output itself when
    // the types match (the epilogue then runs in place), else a scratch buffer. Both
    // views are contiguous over the same memory: the core's shape, then the output's.
    std::shared_ptr<Buffer> scratch;
    void* value_data = out.data;
    if (core.dtype != k.output.dtype) {
      int64_t numel = 1;
      for (int64_t d : core.shape) numel *= d;
      scratch = allocate(static_cast<size_t>(numel) * dtype_size(core.dtype));
      value_data = scratch->handle;
    }
    run_core(k, cpu::View{value_data, core.dtype, core.shape, contiguous_strides(core.shape), 0});
    std::vector<cpu::View> in{cpu::View{value_data, core.dtype, out.shape, contiguous_strides(out.shape), 0}};
    for (auto& a : k.epilogue_inputs) in.push_back(view_of(a));
    // Extra outputs (over the epilogue's operands) before the epilogue, which may run in place.
    for (const ExtraOutput& x : k.extra_outputs) cpu::eval_map(x.expr, in, view_of(x.arg));
    cpu::eval_map(*k.epilogue, in, out);
  }

 private:
  void run_core(const Kernel& k, const cpu::View& out) {
    const cpu::TemplateLaunch* run = cpu::template_ops().find(k.node.op);
    if (!run) fail(std::string(op_name(k.node.op)), k.node.loc, "the cpu backend has no kernel for this op");
    (*run)(k, views_of(k.inputs), out);
  }
};

}  // namespace

TemplateOpTable<cpu::TemplateLaunch>& cpu::template_ops() {
  static TemplateOpTable<TemplateLaunch> table("cpu");
  return table;
}

namespace {
// The entries the device itself holds: Map kernels (the evaluator runs every expression in
// every dtype), reductions (the evaluator's reduce over a prologue) and host calls; the
// kernel families register theirs in their own files (kernels_*.cpp).
[[maybe_unused]] const bool registered = [] {
  auto& ops = cpu::template_ops();
  ops.coverage().set_elementwise(kAllDTypes);
  ops.add(OpId::Reduce, kAllDTypes, [](const Kernel& k, const std::vector<cpu::View>& in, const cpu::View& out) {
    const auto& p = std::get<ReduceParams>(k.node.params);
    cpu::eval_reduce(*k.expr, in, k.node.in_shape, p.axes, reduction_of(p.op), out);
  });
  ops.add(OpId::HostCall, kAllDTypes, [](const Kernel& k, const std::vector<cpu::View>&, const cpu::View&) {
    std::get<HostCallParams>(k.node.params).fn->run(k);
  });
  return true;
}();
}  // namespace

void cpu::set_kernel_observer(const KernelObserver* observer) { kernel_observer().store(observer, std::memory_order_release); }

Device& cpu_device() {
  static CpuDevice* device = new CpuDevice;  // never destroyed: tensors in statics free into it at exit
  return *device;
}

}  // namespace alk
