#include "graph/schedule.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "alk/kernel_spec.h"
#include "alk/op_registry.h"
#include "core/half.h"
#include "expr/emit.h"
#include "graph/trace.h"

namespace alk {

namespace {

thread_local ScheduleStats g_stats;

int debug_level(const char* what) {
  static const char* v = std::getenv("ALK_DEBUG");
  if (!v) return 0;
  return std::strstr(v, what) || std::strstr(v, "all") ? 1 : 0;
}

bool is_map(const Node* n) { return std::holds_alternative<MapParams>(n->params); }

// True when impl reads node n's whole output in n's own layout (the only view through
// which an elementwise producer can be inlined into a consumer of the same shape).
bool identity_view(const TensorImpl* impl) {
  const Node* n = impl->node.get();
  return impl->offset == 0 && impl->shape == n->shape && impl->strides == contiguous_strides(n->shape);
}

// True when impl reads node n's output in n's memory order, perhaps reshaped (element i
// of the view is element i of n): enough for an epilogue or an in-place write.
bool linear_view(const TensorImpl* impl) {
  const Node* n = impl->node.get();
  if (impl->offset != 0) return false;
  int64_t numel = 1, expect = 1;
  for (int64_t s : impl->shape) numel *= s;
  if (numel != n->numel()) return false;
  for (size_t d = impl->shape.size(); d-- > 0;) {
    if (impl->shape[d] == 1) continue;
    if (impl->strides[d] != expect) return false;
    expect *= impl->shape[d];
  }
  return true;
}

struct NodeInfo {
  int users = 0;          // input slots (in this graph) reading the node
  bool external = false;  // someone outside the graph holds it: it must be stored
  bool fused = false;     // inlined into a consumer or taken as a kernel's core
  int kernel = -1;        // the kernel that produces its value
};

// ALK_DEBUG=timing: time per kind of kernel (Map kernels by their root op), printed at exit.
struct KernelTimes {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, double>> by_op;
  ~KernelTimes() {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [op, t] : by_op) {
      rows.emplace_back(t.second, op);
      total += t.second;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "[alk timing] %.3f s in kernels\n", total);
    for (auto& [sec, op] : rows)
      std::fprintf(stderr, "[alk timing] %-28s %8lld calls %9.3f s %5.1f%%\n", op.c_str(),
                   static_cast<long long>(by_op[op].first), sec, 100 * sec / std::max(total, 1e-12));
  }
};

}  // namespace

bool kernel_timing_enabled() { return debug_level("timing") != 0; }

namespace {
void check_supported(const Device& dev, const Kernel& k) {
  if (dev.supports(k)) return;
  // The backend's op table says why where it refuses the op outright (alk/op_registry.h).
  std::string why;
  if (const OpCoverage* c = find_op_coverage(dev.info().kind))
    if (const OpSupport& s = c->support(k.op); s.status == OpSupport::Status::Refused) why = ": " + s.note;
  if (k.op == OpId::UserKernel) {  // named by the user's kernel; a body per device language decides
    const KernelSpec& spec = *std::get<UserKernelParams>(k.node.params).spec;
    fail("user kernel " + spec.name, k.node.loc, "the ", dev.name(), " device cannot run it (", dev.info().kind,
         " needs a body in its language: C++ for cpu, CUDA for cuda, GLSL for vulkan; GLSL takes f32 and i32 "
         "tensors); defined at ", spec.defined_at.file_name(), ":", spec.defined_at.line());
  }
  fail(std::string(op_name(k.node.op)), k.node.loc, "the ", dev.name(), " device cannot run this kernel (",
       op_name(k.op), " of ", dtype_name(k.output.dtype), why, "); move the tensors to a device that can with .to(device)");
}

void launch_now(const Kernel& k, PreparedKernel* prepared) {
  if (k.op == OpId::ToDevice) {
    const KernelArg &in = k.inputs[0], &out = k.output;
    const size_t size = dtype_size(out.dtype);
    size_t bytes = size;
    for (int64_t d : out.shape) bytes *= static_cast<size_t>(d);
    copy_buffer(*in.buffer, in.byte_offset + static_cast<size_t>(in.offset) * size, *out.buffer,
                out.byte_offset + static_cast<size_t>(out.offset) * size, bytes);
    return;
  }
  Device& dev = *k.output.buffer->device;
  if (prepared) return dev.launch(*prepared, k);
  check_supported(dev, k);
  dev.run(k);
}

// A multi-tensor run (Map kernels of one source on one device, independent of each other).
// Timed as the device runs it, whole (an optimizer's step is a few such runs: timing its
// hundreds of kernels one by one would show launches the step does not make); the time is
// shared evenly among the run's kernels.
void launch_batch(const std::vector<Kernel>& run, bool timing) {
  Device& dev = *run[0].output.buffer->device;
  for (const Kernel& k : run) check_supported(dev, k);
  const auto t0 = std::chrono::steady_clock::now();
  dev.run_batch(run);
  if (!timing) return;
  dev.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Kernel& k : run) record_kernel_time(k, seconds / static_cast<double>(run.size()));
}
}  // namespace

void launch(const Kernel& k, bool timing, PreparedKernel* prepared) {
  if (!timing) return launch_now(k, prepared);
  auto t0 = std::chrono::steady_clock::now();
  launch_now(k, prepared);
  k.output.buffer->device->synchronize();  // an asynchronous device's time is the time to finish
  record_kernel_time(k, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void record_kernel_time(const Kernel& k, double seconds) {
  static KernelTimes times;
  const std::string name = kernel_label(k);
  std::lock_guard<std::mutex> lock(times.mu);
  auto& t = times.by_op[name];
  ++t.first;
  t.second += seconds;
}

namespace {

class Scheduler {
 public:
  explicit Scheduler(const std::vector<TensorImpl*>& targets) : targets_(targets) {}

  void run() {
    collect();
    if (order_.empty()) return;
    find_external();
    if (rematerialize()) {  // the graph changed: look at it again
      info_.clear();
      order_.clear();
      overwritable_.clear();
      collect();
      find_external();
    }
    read_narrow_inputs();
    build_kernels();
    merge_extra_outputs();
    batch_independent_maps();
    plan_memory();
    execute();
  }

  // The fused elementwise kernel that would compute the (single) target, without running
  // anything: what `generated_kernel` shows.
  std::optional<std::pair<expr::Expr, expr::MapSignature>> fused_map() {
    collect();
    if (order_.empty()) return std::nullopt;
    find_external();
    build_kernels();
    for (auto& k : kernels_) {
      if (k->root != targets_[0]->node.get() || k->op != OpId::Map || !k->expr) continue;
      const Node* n = k->root;
      expr::MapSignature sig{n->name.empty() ? std::string(op_name(n->op)) : n->name, {}, n->dtype};
      for (auto* l : k->leaves) sig.inputs.push_back(l->dtype);
      return std::make_pair(*k->expr, sig);
    }
    return std::nullopt;
  }

 private:
  // ---- 1. the graph, topologically ordered ----
  void collect() {
    std::vector<std::pair<Node*, size_t>> stack;
    auto visit = [&](Node* n) {
      if (n->realized() || info_.count(n)) return;
      info_[n];
      stack.push_back({n, 0});
      while (!stack.empty()) {
        Node* cur = stack.back().first;
        size_t& next = stack.back().second;
        if (next < cur->inputs.size()) {
          Node* child = cur->inputs[next++]->node.get();
          if (!child->realized() && !info_.count(child)) {
            info_[child];
            stack.push_back({child, 0});
          }
          continue;
        }
        order_.push_back(cur);
        stack.pop_back();
      }
    };
    for (TensorImpl* t : targets_) visit(t->node.get());
  }

  // ---- 2. what must be stored ----
  // Reference counts tell who else holds a node: a TensorImpl with more owners than the
  // graph's input slots is held by the user (or a backward rule, or a temporary of the
  // caller's expression); a Node viewed by more TensorImpls than the graph's own is
  // viewed from outside. Held template-op results are stored, since recomputing them
  // would be costly. Held elementwise results are not: they stay lazy and are fused
  // here (and recomputed if asked for later), as tinygrad does; anything that must be
  // kept is a target.
  void find_external() {
    std::unordered_map<const TensorImpl*, long> slot_refs, impl_owners;
    std::unordered_map<const Node*, std::unordered_set<const TensorImpl*>> impls_of;
    for (Node* n : order_)
      for (auto& in : n->inputs) {
        ++slot_refs[in.get()];
        impl_owners[in.get()] = in.use_count();
        impls_of[in->node.get()].insert(in.get());
        if (info_.count(in->node.get())) ++info_[in->node.get()].users;
      }
    auto hold = [this](const Node* n) {
      if (info_.count(n) && !is_map(n) && n->op != OpId::Const) info_[n].external = true;
    };
    // In a trace, the recorder holds the value each carried tensor started from (trace.h):
    // that hold alone does not make a realized value seen from outside.
    std::unordered_map<const Node*, long> recorder_holds;
    if (const TraceRecorder* trace = active_trace())
      for (const auto& a : trace->assigned) ++recorder_holds[a.before.get()];
    std::unordered_set<const Node*> held;  // viewed from outside the graph
    for (auto& [impl, owners] : impl_owners)
      if (owners > slot_refs[impl]) held.insert(impl->node.get());
    for (auto& [node, impls] : impls_of) {
      auto it = recorder_holds.find(node);
      const long recorder = it == recorder_holds.end() ? 0 : it->second;
      if (!impls.empty() && (*impls.begin())->node.use_count() > static_cast<long>(impls.size()) + recorder)
        held.insert(node);
    }
    for (const Node* n : held) hold(n);
    for (TensorImpl* t : targets_) info_[t->node.get()].external = true;
    find_overwritable(impls_of, held);
  }

  // Realized values that only this schedule can still read, so their last reader may write
  // its result over them (an optimizer's `p = p - lr * u`, its moments, a clipped gradient):
  // an update then needs no second copy of the state it updates, as PyTorch's in-place
  // optimizers. A value qualifies when every TensorImpl viewing its node is one of the
  // graph's input slots (the tensor that held it was assigned a new value), no Map held
  // from outside can recompute from it later (a lazy result outlives the schedule), and
  // its buffer has no other owner (a compiled program's kernels, a host function's
  // buffers). In a trace, the recorder's own hold of the value a carried tensor started
  // from and the traced kernels' references are expected: the in-place write is then the
  // carried state's update itself (program.cpp).
  void find_overwritable(const std::unordered_map<const Node*, std::unordered_set<const TensorImpl*>>& impls_of,
                         const std::unordered_set<const Node*>& held) {
    // Realized values a Map that outlives the schedule (held, not stored) may recompute from.
    std::unordered_set<const Node*> reachable, seen;
    std::vector<const Node*> stack;
    for (const Node* n : held)
      if (info_.count(n) && is_map(n) && !info_[n].external) stack.push_back(n);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (auto& in : n->inputs) {
        const Node* c = in->node.get();
        if (c->realized()) reachable.insert(c);
        else stack.push_back(c);
      }
    }
    std::unordered_map<const Buffer*, long> kernel_refs;
    if (const TraceRecorder* trace = active_trace()) {
      for (const Kernel& k : trace->kernels) {
        ++kernel_refs[k.output.buffer.get()];
        for (const KernelArg& a : k.inputs) ++kernel_refs[a.buffer.get()];
        for (const KernelArg& a : k.epilogue_inputs) ++kernel_refs[a.buffer.get()];
      }
    }
    for (auto& [node, impls] : impls_of) {
      if (!node->realized() || held.count(node) || reachable.count(node)) continue;
      auto refs = kernel_refs.find(node->buffer.get());
      if (node->buffer.use_count() != 1 + (refs == kernel_refs.end() ? 0 : refs->second)) continue;
      overwritable_.insert(node);
    }
  }

  // ---- 2b. recomputation ----
  // A training step keeps each layer's activation from the forward to the backward; where
  // such a value is a cheap elementwise result of values the backward keeps anyway (a GELU
  // of the fc output, which the GELU's own backward reads), reading it again late costs
  // memory for the whole time in between. The late readers get a copy of the node
  // instead, computed again just before them (torch.compile's recomputation of pointwise
  // ops; ~1.2 GB of GPT-2's peak, which comes at the start of the backward). A value
  // qualifies when it is a Map result nobody outside holds, of at least kRecomputeBytes,
  // whose reads have a gap of at least kRecomputeGap nodes (the schedule's order), and its
  // inputs are live across the start of that gap anyway. On GPUs only (not the CPU, nor
  // lavapipe, Vulkan on the CPU): there elementwise kernels cost the bytes they move and
  // device memory is what runs out; a CPU computes a GELU slower than it reads one and has
  // the host's memory (the tiny GPT's step took 9% longer with it). ALK_RECOMPUTE=1
  // applies it on every device, =0 on none.
  static constexpr size_t kRecomputeBytes = size_t{1} << 20;
  static constexpr int kRecomputeGap = 24;
  bool rematerialize() {
    const char* setting = std::getenv("ALK_RECOMPUTE");
    if (setting && std::string_view(setting) == "0") return false;
    const bool everywhere = setting && std::string_view(setting) == "1";
    std::unordered_map<const Node*, int> pos;
    std::unordered_map<const Node*, std::vector<std::pair<Node*, size_t>>> readers;  // (reader, input slot)
    for (size_t i = 0; i < order_.size(); ++i) {
      pos[order_[i]] = static_cast<int>(i);
      for (size_t s = 0; s < order_[i]->inputs.size(); ++s) readers[order_[i]->inputs[s]->node.get()].push_back({order_[i], s});
    }
    bool changed = false;
    for (Node* y : std::vector<Node*>(order_)) {
      if (!is_map(y) || y->op == OpId::Const || y->inputs.empty() || info_[y].external ||
          (!everywhere && y->device->info().type != "discrete" && y->device->info().type != "integrated") ||
          static_cast<size_t>(y->numel()) * dtype_size(y->dtype) < kRecomputeBytes)
        continue;
      // A function of realized tensors alone (a bf16 cast of a weight) is parameter-sized, not
      // batch-sized: kept, it costs little; recomputed, a kernel per step.
      if (std::all_of(y->inputs.begin(), y->inputs.end(),
                      [](const auto& in) { return in->node->realized() || in->node->op == OpId::Const; }))
        continue;
      auto& rs = readers[y];
      if (rs.size() < 2) continue;
      std::sort(rs.begin(), rs.end(), [&](auto& a, auto& b) { return pos[a.first] < pos[b.first]; });
      size_t split = 0;
      int widest = 0;
      for (size_t i = 1; i < rs.size(); ++i)
        if (int gap = pos[rs[i].first] - pos[rs[i - 1].first]; gap > widest) widest = gap, split = i;
      if (widest < kRecomputeGap) continue;
      // Each input must still be live when the last early read is done (read again later
      // by someone else); what it then has to live longer than it would have, up to the
      // first late read, may cost at most the bytes the recomputation frees.
      const int last_early = pos[rs[split - 1].first], first_late = pos[rs[split].first];
      size_t extended = 0;
      bool inputs_live = true;
      for (const auto& in : y->inputs) {
        const Node* x = in->node.get();
        if (x->realized() || x->op == OpId::Const) continue;
        int x_last = -1;
        for (auto& r : readers[x])
          if (r.first != y) x_last = std::max(x_last, pos[r.first]);
        inputs_live = inputs_live && x_last > last_early;
        if (x_last < first_late) extended += static_cast<size_t>(x->numel()) * dtype_size(x->dtype);
      }
      if (!inputs_live || extended > static_cast<size_t>(y->numel()) * dtype_size(y->dtype)) continue;
      auto copy = std::make_shared<Node>(*y);
      std::unordered_map<const TensorImpl*, std::shared_ptr<TensorImpl>> views;  // a shared view stays shared
      for (size_t i = split; i < rs.size(); ++i) {
        auto& slot = rs[i].first->inputs[rs[i].second];
        auto& view = views[slot.get()];
        if (!view) {
          view = std::make_shared<TensorImpl>();
          view->shape = slot->shape;
          view->strides = slot->strides;
          view->offset = slot->offset;
          view->dtype = slot->dtype;
          view->node = copy;
        }
        slot = view;
      }
      // The copy runs just before its first reader: later candidates see it read y's inputs there.
      pos[copy.get()] = first_late;
      for (size_t s = 0; s < copy->inputs.size(); ++s) readers[copy->inputs[s]->node.get()].push_back({copy.get(), s});
      readers[copy.get()].assign(rs.begin() + static_cast<long>(split), rs.end());
      rs.resize(split);
      changed = true;
    }
    return changed;
  }

  // ---- 2c. 16-bit inputs read as they are ----
  // Under autocast a template op computing in f32 is often handed the f32 cast of a 16-bit
  // tensor (a layer norm's backward gets its output gradient from a bf16 product): the cast
  // writes twice the bytes of its input, and the op reads them again. Where the op's kernel
  // widens that input itself (Device::widens_input), it reads the 16-bit tensor instead, and
  // the cast, read by nobody else, is never computed.
  void read_narrow_inputs() {
    for (Node* n : order_) {
      if (is_map(n) || n->realized()) continue;
      for (size_t s = 0; s < n->inputs.size(); ++s) {
        std::shared_ptr<TensorImpl>& slot = n->inputs[s];
        const Node* c = slot->node.get();
        if (c->op != OpId::Cast || c->realized() || c->inputs.size() != 1 || info_[c].external ||
            info_[c].users != 1 || !identity_view(slot.get()) || !n->device->widens_input(n->op, s))
          continue;
        const std::shared_ptr<TensorImpl>& source = c->inputs[0];
        const bool widening = c->dtype == DType::F32 && (source->dtype == DType::BF16 || source->dtype == DType::F16);
        if (!widening || source->shape != c->shape) continue;
        info_[c].users = 0;  // (its input keeps one reader: this op instead of the cast)
        info_[c].fused = true;  // never built: its one reader reads its input now
        slot = source;
      }
    }
  }

  // ---- 3. fusion and kernels ----
  bool can_inline(const TensorImpl* impl, const Shape& consumer_shape) {
    Node* p = impl->node.get();
    if (p->realized()) return false;
    if (p->op == OpId::Const) return true;  // a uniform value fits any view
    const NodeInfo& pi = info_[p];
    if (!is_map(p) || pi.external || kept_stored_.count(p)) return false;
    if (pi.users != 1) return shared_inline_.count(p) && identity_view(impl) && impl->shape == consumer_shape;
    // The IR computes f16/bf16 values in f32: inlined, a 16-bit intermediate would skip its
    // rounding. A bf16 one is rounded in the kernel (RoundBf16, leaf_or_inline), the bits a
    // stored one would have; f16 results are stored (rounded) and read back, as eager
    // execution does.
    if (p->dtype == DType::F16) return false;
    // A one-element producer (a learning rate cast, a bias correction) fits any view too:
    // recomputing a scalar per element costs less than a kernel launch.
    return (identity_view(impl) && impl->shape == consumer_shape) || p->numel() == 1;
  }

  // Builds the expression for node n into b, inlining producers; leaves become inputs.
  int build_expr(expr::Builder& b, const Node* n, std::vector<const TensorImpl*>& leaves) {
    const expr::Expr& e = std::get<MapParams>(n->params).expr;
    std::vector<int> ids;
    for (auto& in : n->inputs) ids.push_back(leaf_or_inline(b, in.get(), n->shape, leaves));
    return b.inline_expr(e, ids);
  }

  // Inside a one-element producer inlined into a larger consumer (broadcast_shape_ set),
  // every leaf is read as a broadcast over the consumer's shape.
  int leaf_or_inline(expr::Builder& b, const TensorImpl* impl, const Shape& shape,
                     std::vector<const TensorImpl*>& leaves) {
    Node* p = impl->node.get();
    if (can_inline(impl, shape)) {
      // A constant may also be read as a leaf elsewhere: whether it needs memory is
      // decided once all kernels are known (build_kernels).
      if (p->op == OpId::Const)
        return b.constant(round_to(std::get<ConstParams>(p->params).value, p->dtype), compute_type(p->dtype));
      info_[p].fused = true;
      auto rounded = [&](int id) { return p->dtype == DType::BF16 ? b.unary(expr::Fn::RoundBf16, id) : id; };
      const size_t before = leaves.size();
      int id;
      if (p->numel() != 1 || broadcast_shape_ || (impl->shape == shape && identity_view(impl))) {
        id = rounded(build_expr(b, p, leaves));
      } else {
        broadcast_shape_ = &shape;
        id = rounded(build_expr(b, p, leaves));
        broadcast_shape_ = nullptr;
      }
      inlined_.emplace_back(p, leaves.size() - before);
      return id;
    }
    if (broadcast_shape_) impl = broadcast_view(impl, *broadcast_shape_);
    for (size_t k = 0; k < leaves.size(); ++k)
      if (leaves[k] == impl || (leaves[k]->node == impl->node && leaves[k]->shape == impl->shape &&
                                leaves[k]->strides == impl->strides && leaves[k]->offset == impl->offset)) {
        ++leaf_reads_[leaves[k]];
        return b.input(static_cast<int>(k), compute_type(impl->dtype));
      }
    leaves.push_back(impl);
    leaf_reads_[impl] = 1;
    return b.input(static_cast<int>(leaves.size() - 1), compute_type(impl->dtype));
  }

  // A view of impl's (single) element repeated over shape; kept alive by the scheduler.
  const TensorImpl* broadcast_view(const TensorImpl* impl, const Shape& shape) {
    auto v = std::make_unique<TensorImpl>();
    v->node = impl->node;
    v->dtype = impl->dtype;
    v->shape = shape;
    v->strides = Shape(shape.size(), 0);
    v->offset = impl->offset;
    synthetic_.push_back(std::move(v));
    return synthetic_.back().get();
  }

  // Maps read more than once whose every reader is inlined into the Map kernel rooted at root
  // (add(matmul, bias) read twice by the hardswish after it): they are inlined too, once per
  // read (recomputed: cheaper than storing them and a second kernel). Only one level: nothing
  // under such a map is shared again, so the expression grows linearly.
  void find_shared_inlines(const Node* root) {
    shared_inline_.clear();
    std::unordered_map<const Node*, int> reads;
    std::vector<std::pair<const Node*, bool>> stack{{root, false}};  // (inlined node, under a shared one)
    while (!stack.empty()) {
      auto [n, under_shared] = stack.back();
      stack.pop_back();
      for (auto& in : n->inputs) {
        Node* p = in->node.get();
        if (p->realized() || !is_map(p) || p->op == OpId::Const || p->dtype == DType::F16 || p->dtype == DType::BF16)
          continue;
        const NodeInfo& pi = info_[p];
        if (pi.external || kept_stored_.count(p) || !identity_view(in.get()) || in->shape != n->shape) continue;
        if (pi.users == 1) {
          stack.push_back({p, under_shared});
        } else if (!under_shared && ++reads[p] == pi.users) {
          shared_inline_.insert(p);
          stack.push_back({p, true});
        }
      }
    }
  }

  // A template op whose only reader is one fused Map, reading all of it in order, can hand
  // its result straight to that Map as an epilogue where its device takes one
  // (Device::fuses_epilogue: a Reduce, Matmul or Conv2d anywhere; a layer norm on CUDA,
  // which then writes a 16-bit copy for the next product itself). The Map may read it more
  // than once (x * clamp(x / 6 + 0.5, 0, 1), a hardswish): every graph reader of the core is then
  // inside this kernel's expression, reading the same view, which the epilogue gets as one value.
  bool epilogue_core(const TensorImpl* leaf) {
    const Node* p = leaf->node.get();
    if (p->realized() || info_[p].external || !linear_view(leaf) || is_map(p)) return false;
    auto reads = leaf_reads_.find(leaf);
    if (info_[p].users != 1 && (reads == leaf_reads_.end() || reads->second != info_[p].users)) return false;
    return p->device->fuses_epilogue(p->op);
  }

  // A kernel reads at most kMaxKernelLeaves stored tensors: on a GPU each is a buffer
  // binding, and Vulkan devices allow few per shader (lavapipe 32, of which the output, the
  // params block and a reduction's scratch take some). `build` fills `leaves` (clearing it
  // first); while they are too many, the inlined producer bringing the most leaves that fit
  // one kernel is stored instead and the kernel rebuilt (clip_grad_norm's sum of 54
  // per-parameter norms is one chain of adds: it splits into a few kernels).
  static constexpr size_t kMaxKernelLeaves = 16;
  template <class Build>
  void within_leaf_limit(const std::vector<const TensorImpl*>& leaves, Build build) {
    for (;;) {
      inlined_.clear();
      build();
      if (leaves.size() <= kMaxKernelLeaves) return;
      Node* cut = nullptr;
      size_t best = 1;  // storing a producer of one leaf would not lower the count
      for (const auto& [p, n] : inlined_)
        if (n > best && n < kMaxKernelLeaves) cut = p, best = n;
      if (!cut)
        for (const auto& [p, n] : inlined_)
          if (n > best) cut = p, best = n;
      if (!cut) return;  // leaves read directly: nothing to split off
      for (const auto& [p, n] : inlined_) info_[p].fused = false;
      kept_stored_.insert(cut);
    }
  }

  void build_kernels() {
    // Consumers before producers, so a producer knows whether it was inlined.
    std::vector<std::unique_ptr<PendingKernel>> pending;
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      Node* n = *it;
      if (info_[n].fused) continue;
      auto k = std::make_unique<PendingKernel>();
      k->root = n;
      if (n->op == OpId::Const) {
        expr::Builder b;
        k->expr = b.finish(b.constant(std::get<ConstParams>(n->params).value, compute_type(n->dtype)));
      } else if (!is_map(n)) {
        prepare_core(*k, n);
      } else {
        expr::Builder b;
        std::vector<const TensorImpl*> leaves;
        int root = 0;
        within_leaf_limit(leaves, [&] {
          b = expr::Builder();
          leaves.clear();
          leaf_reads_.clear();
          find_shared_inlines(n);
          root = build_expr(b, n, leaves);
        });
        // An epilogue's leaves add to its core's (a Reduce prologue's up to kMaxKernelLeaves).
        auto core = leaves.size() > kMaxKernelLeaves / 2
                        ? leaves.end()
                        : std::find_if(leaves.begin(), leaves.end(), [this](auto* l) { return epilogue_core(l); });
        if (core == leaves.end()) {
          k->expr = b.finish(root);
          k->leaves = std::move(leaves);
        } else {
          // Rebuild with the core's value as input slot 0; the rest are the epilogue's leaves.
          Node* core_node = (*core)->node.get();
          info_[core_node].fused = true;
          expr::Builder eb;
          std::vector<const TensorImpl*> epilogue_leaves{*core};
          k->epilogue = eb.finish(build_expr(eb, n, epilogue_leaves));
          k->epilogue_leaves.assign(epilogue_leaves.begin() + 1, epilogue_leaves.end());
          prepare_core(*k, core_node);
        }
      }
      pending.push_back(std::move(k));
    }
    std::reverse(pending.begin(), pending.end());
    // A constant needs memory only when stored or read as a leaf (template-op inputs);
    // everywhere else it was inlined as a literal.
    std::unordered_set<const Node*> read;
    for (auto& k : pending) {
      for (auto* l : k->leaves) read.insert(l->node.get());
      for (auto* l : k->epilogue_leaves) read.insert(l->node.get());
    }
    for (auto& k : pending) {
      NodeInfo& ni = info_[k->root];
      if (ni.fused || (k->root->op == OpId::Const && !ni.external && !read.count(k->root))) continue;
      ni.kernel = static_cast<int>(kernels_.size());
      kernels_.push_back(std::move(k));
    }
    g_stats.nodes = static_cast<int64_t>(order_.size());
    g_stats.kernels = static_cast<int64_t>(kernels_.size());
    g_stats.fused_nodes = 0;
    for (auto& [n, ni] : info_) g_stats.fused_nodes += ni.fused;
  }

  struct PendingKernel {
    Node* root = nullptr;  // whose value the kernel produces
    Node* core = nullptr;  // the template op (== root unless an epilogue wraps it)
    OpId op = OpId::Map;
    std::vector<const TensorImpl*> leaves;  // Map leaves, or the template op's inputs
    std::optional<expr::Expr> expr;
    std::optional<expr::Expr> epilogue;
    std::vector<const TensorImpl*> epilogue_leaves;
    // Map results stored by the same pass (merge_extra_outputs): each node with its value
    // as an expression over `leaves`.
    std::vector<std::pair<const Node*, expr::Expr>> extra_outputs;
    int batch = -1;  // its multi-tensor run (batch_independent_maps), when it has company
  };

  void prepare_core(PendingKernel& k, Node* core) {
    k.core = core;
    k.op = core->op;
    if (core->op == OpId::Reduce) {
      // The reduced value may itself be a fused elementwise expression (the prologue).
      expr::Builder b;
      int root = 0;
      within_leaf_limit(k.leaves, [&] {
        b = expr::Builder();
        k.leaves.clear();
        root = leaf_or_inline(b, core->inputs[0].get(), core->inputs[0]->shape, k.leaves);
      });
      k.expr = b.finish(root);
    } else {
      for (auto& in : core->inputs) k.leaves.push_back(in.get());
    }
  }

  // ---- 3a. kernels with several outputs ----
  // Under autocast the backward's residual gradient is an f32 sum, and the next products
  // read its bf16 cast: a second kernel reading the whole sum back. Where the device asks
  // for it (Device::extra_outputs: Fuses), a Map result computed from what another kernel
  // already has at each element is stored by that kernel's pass (XLA's multi-output fusion):
  // - from a Map kernel's result, or a template op's result after its epilogue (the bf16
  //   cast of the residual-gradient sum; the GELU of the fc product, beside the product);
  // - from inputs of a template op's epilogue, where the kernel comes shortly before (the
  //   GELU recomputed for fc2's weight gradient, from the fc product that fc2's input
  //   gradient reads in its epilogue).
  // Nothing is read twice, and a launch is saved. ALK_EXTRA_OUTPUTS=1 applies it wherever the
  // device runs such kernels (Runs: the CPU and Vulkan, each output its own pass; CUDA's
  // product epilogues, no faster yet), =0 nowhere.
  static constexpr size_t kMaxExtraOutputs = 2;
  static constexpr size_t kMaxExtraOutputGap = 16;  // kernels an epilogue sibling may move up
  void merge_extra_outputs() {
    g_stats.extra_outputs = 0;
    const char* setting = std::getenv("ALK_EXTRA_OUTPUTS");
    if (setting && std::string_view(setting) == "0") return;
    const bool everywhere = setting && std::string_view(setting) == "1";
    std::unordered_map<const Node*, size_t> producer;
    std::unordered_map<const Node*, std::vector<size_t>> epilogue_readers;
    for (size_t i = 0; i < kernels_.size(); ++i) {
      producer[kernels_[i]->root] = i;
      for (const TensorImpl* l : kernels_[i]->epilogue_leaves) epilogue_readers[l->node.get()].push_back(i);
    }
    std::vector<bool> merged(kernels_.size(), false);
    for (size_t i = 0; i < kernels_.size(); ++i) {
      if (merged[i]) continue;  // a kernel that moved up to an earlier place
      PendingKernel& c = *kernels_[i];
      if (c.op != OpId::Map || !c.expr || c.epilogue || c.leaves.empty() || !c.extra_outputs.empty()) continue;
      std::vector<size_t> candidates;
      if (auto it = producer.find(c.leaves[0]->node.get()); it != producer.end()) candidates.push_back(it->second);
      // A kernel reading c's operands in its epilogue, shortly before c (c moves up to it) or
      // after it (it moves up to c, if no kernel in between makes what it reads): the GELU
      // recomputed for fc2's weight gradient, just before that product, and fc2's input
      // gradient just after, which reads the same fc product in its epilogue.
      auto makes_what_it_reads = [&](size_t m, const PendingKernel& k) {
        if (merged[m]) return false;
        std::vector<const Node*> made{kernels_[m]->root};
        for (auto& [n, e] : kernels_[m]->extra_outputs) made.push_back(n);
        auto reads = [&](const TensorImpl* l) { return std::find(made.begin(), made.end(), l->node.get()) != made.end(); };
        return std::any_of(k.leaves.begin(), k.leaves.end(), reads) ||
               std::any_of(k.epilogue_leaves.begin(), k.epilogue_leaves.end(), reads);
      };
      if (auto it = epilogue_readers.find(c.leaves[0]->node.get()); it != epilogue_readers.end())
        for (size_t j : it->second) {
          if (j < i ? i - j > kMaxExtraOutputGap : j - i > kMaxExtraOutputGap) continue;
          bool blocked = false;
          for (size_t m = i + 1; m < j && !blocked; ++m) blocked = makes_what_it_reads(m, *kernels_[j]);
          if (!blocked) candidates.push_back(j);
        }
      for (size_t j : candidates) {
        if (merged[j] || j == i) continue;
        std::optional<expr::Expr> e = extra_output_expr(*kernels_[j], c, everywhere);
        if (!e) continue;
        kernels_[j]->extra_outputs.emplace_back(c.root, std::move(*e));
        if (j < i) {
          merged[i] = true;
        } else {  // k takes c's place
          kernels_[i] = std::move(kernels_[j]);
          merged[j] = true;
          producer[kernels_[i]->root] = i;
          for (const TensorImpl* l : kernels_[i]->epilogue_leaves)
            std::replace(epilogue_readers[l->node.get()].begin(), epilogue_readers[l->node.get()].end(), j, i);
        }
        break;
      }
    }
    std::vector<std::unique_ptr<PendingKernel>> kept;
    for (size_t i = 0; i < kernels_.size(); ++i)
      if (!merged[i]) kept.push_back(std::move(kernels_[i]));
    kernels_ = std::move(kept);
    for (size_t i = 0; i < kernels_.size(); ++i) {
      info_[kernels_[i]->root].kernel = static_cast<int>(i);
      for (auto& [n, e] : kernels_[i]->extra_outputs) info_[n].kernel = static_cast<int>(i);
    }
    g_stats.kernels = static_cast<int64_t>(kernels_.size());
    g_stats.extra_outputs = static_cast<int64_t>(std::count(merged.begin(), merged.end(), true));
  }

  // Map kernel c's value as an extra output of kernel k, over k's operands (a Map kernel's
  // leaves; a template op's epilogue slots: 0 its value, s + 1 epilogue leaf s), if every
  // leaf of c is k's whole result or one of those operands through the same view.
  std::optional<expr::Expr> extra_output_expr(const PendingKernel& k, const PendingKernel& c, bool everywhere) {
    const Node* root = k.root;
    const bool template_core = k.op != OpId::Map;
    if ((template_core ? !k.epilogue : !k.expr) || c.root->device != root->device || c.root->shape != root->shape)
      return std::nullopt;
    const Device::ExtraOutputs mode = root->device->extra_outputs(k.op);
    if (mode == Device::ExtraOutputs::No || (mode == Device::ExtraOutputs::Runs && !everywhere)) return std::nullopt;
    if (k.extra_outputs.size() >= (template_core ? 1 : kMaxExtraOutputs)) return std::nullopt;
    const std::vector<const TensorImpl*>& operands = template_core ? k.epilogue_leaves : k.leaves;
    const int first = template_core ? 1 : 0;
    expr::Builder b;
    std::vector<int> slots;
    if (template_core) slots.push_back(b.input(0, compute_type(k.core->dtype)));
    for (size_t s = 0; s < operands.size(); ++s)
      slots.push_back(b.input(static_cast<int>(s) + first, compute_type(operands[s]->dtype)));
    int value = -1;  // root's value as stored, built at its first read
    std::vector<int> reads;
    for (const TensorImpl* l : c.leaves) {
      if (l->node.get() == root) {
        // f32 and f64 are the computed value, bf16 its rounding (RoundBf16, bit for bit);
        // other dtypes are left to their own kernel.
        if (!identity_view(l) || (root->dtype != DType::F32 && root->dtype != DType::F64 && root->dtype != DType::BF16))
          return std::nullopt;
        if (value < 0) {
          value = b.cast(b.inline_expr(template_core ? *k.epilogue : *k.expr, slots), compute_type(root->dtype));
          if (root->dtype == DType::BF16) value = b.unary(expr::Fn::RoundBf16, value);
        }
        reads.push_back(value);
        continue;
      }
      if (!template_core) return std::nullopt;  // siblings of Map kernels: left apart (they batch)
      auto same = std::find_if(operands.begin(), operands.end(), [l](const TensorImpl* o) {
        return o->node == l->node && o->shape == l->shape && o->strides == l->strides && o->offset == l->offset;
      });
      if (same == operands.end()) return std::nullopt;
      reads.push_back(slots[static_cast<size_t>(same - operands.begin()) + static_cast<size_t>(first)]);
    }
    return b.finish(b.inline_expr(*c.expr, reads));
  }

  // ---- 3b. multi-tensor batches ----
  // An optimizer step is the same few elementwise kernels once per parameter, and the
  // depth-first order interleaves them (t0 m0 v0 p0 t1 m1 v1 p1 ...). Map kernels of one
  // source whose results are stored and whose inputs lie outside the arena (realized
  // tensors, stored results; or one element) are moved next to each other (t0 t1 ... m0 m1 ... p0 p1 ...),
  // so a backend may run such a run as one launch (CUDA's multi-tensor Map kernel: PyTorch's
  // foreach/fused optimizers). Moving them shifts no large arena lifetime; a batch is placed
  // before the first kernel that reads one of its results, after the batches its members
  // read, and kernels that are not moved keep their order.
  std::string batch_key(const PendingKernel& k) {
    if (k.op != OpId::Map || !k.expr || k.epilogue || !k.extra_outputs.empty()) return {};
    auto it = info_.find(k.root);
    if (it == info_.end() || !it->second.external) return {};
    std::string key = k.expr->str() + " -> " + std::string(dtype_name(k.root->dtype));
    for (const TensorImpl* l : k.leaves) {
      const Node* n = l->node.get();
      auto li = info_.find(n);
      // (A one-element intermediate, the learning rate in the parameters' dtype, may live a
      // little longer in the arena.)
      if (!n->realized() && n->numel() != 1 && (li == info_.end() || !li->second.external)) return {};
      key += ' ';
      key += dtype_name(l->dtype);
      if (std::all_of(l->strides.begin(), l->strides.end(), [](int64_t st) { return st == 0; })) key += '.';  // one value
    }
    char device[32];
    std::snprintf(device, sizeof device, " @%p", static_cast<const void*>(k.root->device));
    return key + device;
  }

  void batch_independent_maps() {
    struct Batch {
      std::string key;
      std::vector<std::unique_ptr<PendingKernel>> members;
      std::vector<size_t> after;  // batches to place first
      bool placed = false;
    };
    std::vector<Batch> batches;
    std::unordered_map<std::string, size_t> open;      // key -> its batch still taking members
    std::unordered_map<const Node*, size_t> batch_of;  // a member's result -> its batch
    std::vector<std::unique_ptr<PendingKernel>> ordered;
    auto place = [&](size_t b, auto& self) -> void {
      if (batches[b].placed) return;
      batches[b].placed = true;
      if (auto it = open.find(batches[b].key); it != open.end() && it->second == b) open.erase(it);
      for (size_t d : batches[b].after) self(d, self);
      for (auto& m : batches[b].members) {
        if (batches[b].members.size() > 1) m->batch = static_cast<int>(b);
        ordered.push_back(std::move(m));
      }
    };
    // True when batch `from` must follow batch `on` (through its `after` edges).
    auto follows = [&](size_t from, size_t on, auto& self) -> bool {
      if (from == on) return true;
      for (size_t d : batches[from].after)
        if (!batches[d].placed && self(d, on, self)) return true;
      return false;
    };
    for (auto& k : kernels_) {
      std::vector<size_t> from;  // unplaced batches whose results k reads
      auto note = [&](const TensorImpl* l) {
        auto it = batch_of.find(l->node.get());
        if (it != batch_of.end() && !batches[it->second].placed &&
            std::find(from.begin(), from.end(), it->second) == from.end())
          from.push_back(it->second);
      };
      for (const TensorImpl* l : k->leaves) note(l);
      for (const TensorImpl* l : k->epilogue_leaves) note(l);
      const std::string key = batch_key(*k);
      if (key.empty()) {
        for (size_t b : from) place(b, place);
        ordered.push_back(std::move(k));
        continue;
      }
      auto it = open.find(key);
      size_t b = it == open.end() ? batches.size() : it->second;
      // k cannot join a batch it reads from, directly or through another batch: that batch
      // is placed and k starts the next one.
      if (b < batches.size())
        for (size_t f : from)
          if (follows(f, b, follows)) {
            place(b, place);
            b = batches.size();
            break;
          }
      if (b == batches.size()) {
        batches.push_back(Batch{key, {}, {}, false});
        open[key] = b;
      }
      for (size_t f : from)
        if (!batches[f].placed && f != b && std::find(batches[b].after.begin(), batches[b].after.end(), f) == batches[b].after.end())
          batches[b].after.push_back(f);
      batch_of[k->root] = b;
      batches[b].members.push_back(std::move(k));
    }
    for (size_t b = 0; b < batches.size(); ++b) place(b, place);
    g_stats.batched = 0;
    for (const Batch& b : batches)
      if (b.members.size() > 1) g_stats.batched += static_cast<int64_t>(b.members.size());
    kernels_ = std::move(ordered);
    for (size_t i = 0; i < kernels_.size(); ++i) info_[kernels_[i]->root].kernel = static_cast<int>(i);
  }

  // ---- 4. memory ----
  // One arena per device: intermediates of the kernels that run there.
  struct Block { size_t offset, size; };
  struct Arena {
    std::vector<Block> free_blocks;
    size_t end = 0;
    size_t align = 64;
    std::shared_ptr<Buffer> buffer;

    // Best fit: the smallest free block that holds `size` (first fit left the GPT step's
    // arena 5% above its live peak; best fit keeps large holes for large tensors).
    size_t take(size_t size) {
      size_t best = free_blocks.size();
      for (size_t i = 0; i < free_blocks.size(); ++i)
        if (free_blocks[i].size >= size && (best == free_blocks.size() || free_blocks[i].size < free_blocks[best].size))
          best = i;
      if (best < free_blocks.size()) {
        Block b = free_blocks[best];
        free_blocks.erase(free_blocks.begin() + static_cast<long>(best));
        if (b.size > size) free_blocks.push_back({b.offset + size, b.size - size});
        return b.offset;
      }
      size_t at = end;
      end += size;
      return at;
    }
    void give_back(size_t offset, size_t size) {
      free_blocks.push_back({offset, size});
      std::sort(free_blocks.begin(), free_blocks.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
      for (size_t i = 0; i + 1 < free_blocks.size();)  // merge neighbours
        if (free_blocks[i].offset + free_blocks[i].size == free_blocks[i + 1].offset) {
          free_blocks[i].size += free_blocks[i + 1].size;
          free_blocks.erase(free_blocks.begin() + static_cast<long>(i) + 1);
        } else {
          ++i;
        }
    }
    // Slices start where the device can bind them (minStorageBufferOffsetAlignment on Vulkan).
    size_t padded(size_t bytes) const { return (bytes + align - 1) / align * align; }
  };

  Arena& arena_of(const Node* n) {
    Arena& a = arenas_[n->device];
    a.align = std::max<size_t>(64, n->device->info().alignment);
    return a;
  }

  // True when kernel k reads l's node through no other view than l (element i of the
  // output then reads only element i of the node: it may write over it). `a + a.T` may not.
  static bool reads_only_through(const PendingKernel& k, const TensorImpl* l) {
    auto same = [l](const TensorImpl* o) {
      return o == l || o->node != l->node ||
             (o->offset == l->offset && o->shape == l->shape && o->strides == l->strides);
    };
    return std::all_of(k.leaves.begin(), k.leaves.end(), same) &&
           std::all_of(k.epilogue_leaves.begin(), k.epilogue_leaves.end(), same);
  }

  void plan_memory() {
    const int nk = static_cast<int>(kernels_.size());
    // Last kernel reading each node's value.
    std::unordered_map<const Node*, int> last_use;
    std::unordered_map<const Node*, int> last_realized_use;
    auto note = [&](const TensorImpl* impl, int at) {
      const Node* p = impl->node.get();
      int& last = p->realized() ? last_realized_use[p] : last_use[p];
      last = std::max(last, at);
    };
    for (int i = 0; i < nk; ++i) {
      for (auto* l : kernels_[i]->leaves) note(l, i);
      for (auto* l : kernels_[i]->epilogue_leaves) note(l, i);
    }
    g_stats.naive_bytes = g_stats.planned_bytes = g_stats.in_place = 0;
    std::vector<std::vector<const Node*>> dies_at(static_cast<size_t>(nk));
    // ALK_DEBUG=memory: which intermediates the arena holds at its peak.
    const bool show_memory = debug_level("memory");
    std::unordered_set<const Node*> live_now;
    std::vector<const Node*> live_at_peak;
    int peak_kernel = -1;
    for (auto& [n, at] : last_use)
      if (info_.count(n) && !info_[n].external) dies_at[at].push_back(n);
    for (int i = 0; i < nk; ++i) {
      PendingKernel& k = *kernels_[i];
      const Node* out = k.root;
      size_t bytes = static_cast<size_t>(out->numel()) * dtype_size(out->dtype);
      g_stats.naive_bytes += static_cast<int64_t>(bytes);
      if (info_[out].external) {
        // A stored Map result may take the buffer of a realized input it alone reads last, and
        // so may a template op that writes over its input 0 (a KV cache's write: the cache
        // updated where it lies, not copied per token).
        const TensorImpl* over = nullptr;
        std::vector<const TensorImpl*> candidates;
        if (k.op == OpId::Map) candidates = k.leaves;
        else if (op_writes_over_input0(k.op) && !k.epilogue && !k.leaves.empty()) candidates = {k.leaves[0]};
        for (const TensorImpl* l : candidates) {
            const Node* p = l->node.get();
            if (overwritable_.count(p) && last_realized_use[p] == i && p->device == out->device && linear_view(l) &&
                l->shape == out->shape && dtype_size(p->dtype) == dtype_size(out->dtype) && p->buffer->bytes == bytes &&
                !in_place_taken_.count(p) && reads_only_through(k, l)) {
              over = l;
              break;
            }
          }
        if (over) {
          in_place_taken_.insert(over->node.get());
          stored_[out] = over->node->buffer;
          ++g_stats.in_place;
        } else {
          stored_bytes_.emplace_back(out, bytes);
          g_stats.planned_bytes += static_cast<int64_t>(bytes);
        }
      } else {
        // In place: a Map may overwrite a same-sized input that dies here, and so may a template
        // op whose table entry says it writes over input 0 (the cross-entropy backward over the
        // logits: the [N, vocab] gradient takes the logits' 1.6 GB at GPT-2 size).
        std::optional<size_t> slot;
        std::vector<const TensorImpl*> overwritable;
        if (k.op == OpId::Map) overwritable = k.leaves;
        else if (op_writes_over_input0(k.op) && !k.epilogue && !k.leaves.empty()) overwritable = {k.leaves[0]};
        for (const TensorImpl* l : overwritable) {
          const Node* p = l->node.get();
          auto it = arena_offset_.find(p);
          if (it != arena_offset_.end() && p->device == out->device && last_use[p] == i && linear_view(l) &&
              l->shape == out->shape && dtype_size(p->dtype) == dtype_size(out->dtype) && !in_place_taken_.count(p) &&
              reads_only_through(k, l)) {
            slot = it->second;
            in_place_taken_.insert(p);
            ++g_stats.in_place;
            live_now.erase(p);  // out takes its place
            break;
          }
        }
        Arena& arena = arena_of(out);
        arena_offset_[out] = slot ? *slot : arena.take(arena.padded(bytes));
        // Read by no later kernel (its readers all became this kernel's extra outputs): its
        // memory is free again once this kernel has run.
        if (!last_use.count(out)) dies_at[static_cast<size_t>(i)].push_back(out);
        if (show_memory) live_now.insert(out);
        if (!slot) {
          live_arena_bytes_ += arena.padded(bytes);
          if (live_arena_bytes_ > live_arena_peak_) {
            live_arena_peak_ = live_arena_bytes_;
            if (show_memory) live_at_peak.assign(live_now.begin(), live_now.end()), peak_kernel = i;
          }
        }
      }
      // Extra outputs get their own memory (never an input's: the CPU computes them in passes
      // of their own, which must still find the inputs the main output may overwrite).
      for (auto& [extra, e] : k.extra_outputs) {
        const size_t extra_bytes = static_cast<size_t>(extra->numel()) * dtype_size(extra->dtype);
        g_stats.naive_bytes += static_cast<int64_t>(extra_bytes);
        if (info_[extra].external) {
          stored_bytes_.emplace_back(extra, extra_bytes);
          g_stats.planned_bytes += static_cast<int64_t>(extra_bytes);
          continue;
        }
        Arena& arena = arena_of(extra);
        arena_offset_[extra] = arena.take(arena.padded(extra_bytes));
        if (show_memory) live_now.insert(extra);
        live_arena_bytes_ += arena.padded(extra_bytes);
        if (live_arena_bytes_ > live_arena_peak_) {
          live_arena_peak_ = live_arena_bytes_;
          if (show_memory) live_at_peak.assign(live_now.begin(), live_now.end()), peak_kernel = i;
        }
      }
      for (const Node* dead : dies_at[i]) {
        if (!arena_offset_.count(dead) || in_place_taken_.count(dead)) continue;
        Arena& arena = arena_of(dead);
        arena.give_back(arena_offset_[dead], arena.padded(static_cast<size_t>(dead->numel()) * dtype_size(dead->dtype)));
        live_arena_bytes_ -= arena.padded(static_cast<size_t>(dead->numel()) * dtype_size(dead->dtype));
        live_now.erase(dead);
      }
    }
    if (show_memory && !live_at_peak.empty()) print_live_at_peak(live_at_peak, peak_kernel);
    g_stats.arena_bytes = 0;
    for (auto& [dev, arena] : arenas_) g_stats.arena_bytes += static_cast<int64_t>(arena.end);
    g_stats.planned_bytes += g_stats.arena_bytes;
    // In a traced step, an arena that fits in the trace's arena of its device reuses it
    // (TraceRecorder::arenas): only the stored outputs and arena growth add to what it holds.
    TraceRecorder* trace = active_trace();
    auto reusable = [&](const Device* dev, const Arena& arena) -> std::shared_ptr<Buffer> {
      if (!trace) return nullptr;
      auto it = trace->arenas.find(dev);
      return it != trace->arenas.end() && it->second && it->second->bytes >= arena.end ? it->second : nullptr;
    };
    int64_t added = g_stats.planned_bytes;
    for (auto& [dev, arena] : arenas_)
      if (reusable(dev, arena)) added -= static_cast<int64_t>(arena.end);
    check_budget(added);
    if (trace) {
      trace->held_bytes += added;
      trace->naive_bytes += g_stats.naive_bytes;
    }
    // Only now, with the plan accepted, is anything allocated.
    for (auto& [node, bytes] : stored_bytes_) stored_[node] = node->device->allocate(bytes);
    // Even an all-empty arena is allocated, so zero-size intermediates have an address.
    for (auto& [dev, arena] : arenas_) {
      if (auto shared = reusable(dev, arena)) {
        arena.buffer = shared;
        continue;
      }
      arena.buffer = dev->allocate(arena.end);
      if (trace) trace->arenas[dev] = arena.buffer;
    }
  }

  // Refuses a plan whose peak exceeds the budget, naming the largest tensors it holds.
  // `added`: the bytes this plan allocates (in a traced step, an arena that reuses the
  // trace's is not counted again).
  void check_budget(int64_t added) {
    // A traced step (alk::compile) keeps every schedule's stored memory: the budget covers them all.
    const TraceRecorder* trace = active_trace();
    const int64_t held = trace ? trace->held_bytes : 0;
    const int64_t budget = memory_budget();
    if (budget < 0 || held + added <= budget) return;
    std::vector<std::pair<int64_t, const Node*>> sizes;
    for (auto& k : kernels_)
      sizes.emplace_back(k->root->numel() * static_cast<int64_t>(dtype_size(k->root->dtype)), k->root);
    std::sort(sizes.begin(), sizes.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::ostringstream largest;
    for (size_t i = 0; i < std::min<size_t>(3, sizes.size()); ++i)
      largest << (i ? "; " : "") << op_name(sizes[i].second->op) << " " << dtype_name(sizes[i].second->dtype) << " "
              << to_string(sizes[i].second->shape) << " = " << sizes[i].first << " bytes";
    const Node* first = targets_.empty() ? nullptr : targets_[0]->node.get();
    fail("budget", first ? first->loc : Loc::current(), "the plan needs a peak of ", held + added,
         " bytes but the memory budget is ", budget, " bytes (", held,
         " of them held by the step's earlier schedules; one buffer per tensor of this schedule would need ",
         g_stats.naive_bytes, "); largest tensors: ", largest.str());
  }

  KernelArg arg_for(const TensorImpl* impl) {
    const Node* p = impl->node.get();
    KernelArg a;
    a.dtype = impl->dtype;
    a.shape = impl->shape;
    a.strides = impl->strides;
    a.offset = impl->offset;
    if (p->realized()) {
      a.buffer = p->buffer;
    } else if (auto it = stored_.find(p); it != stored_.end()) {
      a.buffer = it->second;
    } else {
      a.buffer = arenas_.at(p->device).buffer;
      a.byte_offset = arena_offset_.at(p);
    }
    return a;
  }

  // ---- 5. run ----
  void execute() {
    const bool show_kernels = debug_level("kernels"), show_schedule = debug_level("schedule");
    const bool timing = debug_level("timing");
    auto kernel_of = [&](const PendingKernel& pk) {
      Kernel k;
      const Node* core = pk.core ? pk.core : pk.root;
      k.node = KernelOp{core->op, core->params, core->shape,
                        core->op == OpId::Reduce ? core->inputs[0]->shape : Shape{}, core->dtype, core->loc, core->name};
      k.op = pk.op;
      for (auto* l : pk.leaves) k.inputs.push_back(arg_for(l));
      for (auto* l : pk.epilogue_leaves) k.epilogue_inputs.push_back(arg_for(l));
      TensorImpl out_view;
      out_view.node = std::shared_ptr<Node>(std::shared_ptr<Node>{}, pk.root);  // non-owning
      out_view.shape = pk.root->shape;
      out_view.strides = contiguous_strides(pk.root->shape);
      out_view.dtype = pk.root->dtype;
      k.output = arg_for(&out_view);
      k.expr = pk.expr;
      k.epilogue = pk.epilogue;
      for (auto& [extra, e] : pk.extra_outputs) {
        TensorImpl view;
        view.node = std::shared_ptr<Node>(std::shared_ptr<Node>{}, const_cast<Node*>(extra));  // non-owning
        view.shape = extra->shape;
        view.strides = contiguous_strides(extra->shape);
        view.dtype = extra->dtype;
        k.extra_outputs.push_back({arg_for(&view), e});
      }
      if (k.op == OpId::Map && show_kernels) {
        // The C++ the CPU's compiled tier builds for this kernel: it reads an input with one
        // value for the launch (every dim of size 1 or stride 0, as the evaluator finds it) as
        // one value, so the text says which inputs are.
        expr::MapSignature sig{"map", {}, k.output.dtype};
        std::vector<bool> uniform;
        for (auto& in : k.inputs) {
          sig.inputs.push_back(in.dtype);
          bool one = true;
          for (size_t d = 0; d < in.shape.size(); ++d) one = one && (in.shape[d] == 1 || in.strides[d] == 0);
          uniform.push_back(one);
        }
        std::fprintf(stderr, "[alk kernel %s on %s]\n%s\n", std::string(op_name(pk.root->op)).c_str(),
                     pk.root->device->name().c_str(),
                     expr::emit_map_kernel(*k.expr, sig, expr::Target::Cpp, uniform).c_str());
      } else if (show_kernels) {
        std::fprintf(stderr, "[alk kernel %s]%s%s\n", std::string(op_name(k.op)).c_str(),
                     k.expr ? (" prologue: " + k.expr->str()).c_str() : "",
                     k.epilogue ? (" epilogue: " + k.epilogue->str()).c_str() : "");
      }
      if (show_schedule) {
        // One line a kernel, in launch order: what it computes (a Map by its root op), whether
        // a prologue or epilogue was fused into it, what it reads and writes, its multi-tensor run.
        std::string reads;
        for (const KernelArg& a : k.inputs) reads += " " + std::string(dtype_name(a.dtype)) + to_string(a.shape);
        for (const KernelArg& a : k.epilogue_inputs) reads += " " + std::string(dtype_name(a.dtype)) + to_string(a.shape);
        const std::string what = k.op == OpId::Map ? "map:" + std::string(op_name(pk.root->op)) : std::string(op_name(k.op));
        std::string writes = std::string(dtype_name(k.output.dtype)) + to_string(k.output.shape);
        for (const ExtraOutput& x : k.extra_outputs) writes += " " + std::string(dtype_name(x.arg.dtype)) + to_string(x.arg.shape);
        std::fprintf(stderr, "[alk schedule]   %s%s%s:%s -> %s%s\n", what.c_str(),
                     k.op == OpId::Reduce && k.expr && k.expr->nodes.size() > 1 ? " +prologue" : "",
                     k.epilogue ? " +epilogue" : "", reads.c_str(), writes.c_str(),
                     pk.batch >= 0 ? (" (run " + std::to_string(pk.batch) + ")").c_str() : "");
      }
      return k;
    };
    for (size_t i = 0; i < kernels_.size();) {
      // A multi-tensor run goes to its device whole.
      size_t end = i + 1;
      if (kernels_[i]->batch >= 0)
        while (end < kernels_.size() && kernels_[end]->batch == kernels_[i]->batch) ++end;
      std::vector<Kernel> run;
      for (size_t j = i; j < end; ++j) run.push_back(kernel_of(*kernels_[j]));
      if (run.size() == 1) launch(run[0], timing);
      else launch_batch(run, timing);
      if (TraceRecorder* trace = active_trace())
        for (Kernel& k : run) {
          trace->produced.insert(k.output.buffer.get());
          for (const ExtraOutput& x : k.extra_outputs) trace->produced.insert(x.arg.buffer.get());
          trace->kernels.push_back(std::move(k));
        }
      i = end;
    }
    // Stored nodes become realized data; their inputs (and so the graph below) are freed.
    for (auto& [node, buffer] : stored_) {
      Node* n = const_cast<Node*>(node);
      n->buffer = buffer;
      n->inputs.clear();
      n->params = std::monostate{};
      n->op = OpId::Buffer;
    }
    if (debug_level("schedule"))
      std::fprintf(stderr,
                   "[alk schedule] nodes=%lld kernels=%lld fused=%lld in_place=%lld batched=%lld extra_outputs=%lld "
                   "planned=%lld B naive=%lld B (arena %lld B, most live at once %lld B)\n",
                   static_cast<long long>(g_stats.nodes), static_cast<long long>(g_stats.kernels),
                   static_cast<long long>(g_stats.fused_nodes), static_cast<long long>(g_stats.in_place),
                   static_cast<long long>(g_stats.batched), static_cast<long long>(g_stats.extra_outputs),
                   static_cast<long long>(g_stats.planned_bytes), static_cast<long long>(g_stats.naive_bytes),
                   static_cast<long long>(g_stats.arena_bytes), static_cast<long long>(live_arena_peak_));
  }

  // The arena's live intermediates at its peak, largest first, with the ops that made them
  // and their call sites: what to look at when a step needs more memory than expected.
  void print_live_at_peak(std::vector<const Node*> live, int at) const {
    auto bytes = [](const Node* n) { return static_cast<size_t>(n->numel()) * dtype_size(n->dtype); };
    std::sort(live.begin(), live.end(), [&](const Node* a, const Node* b) { return bytes(a) > bytes(b); });
    size_t total = 0;
    for (const Node* n : live) total += bytes(n);
    std::fprintf(stderr, "[alk memory] arena peak %zu B at kernel %d of %zu (%s): %zu live intermediates\n", total, at,
                 kernels_.size(), at >= 0 ? std::string(op_name(kernels_[static_cast<size_t>(at)]->root->op)).c_str() : "-",
                 live.size());
    for (const Node* n : live)
      std::fprintf(stderr, "[alk memory]   %10zu B %-5s %-16s %s  %s:%u\n", bytes(n), dtype_name(n->dtype).data(),
                   to_string(n->shape).c_str(), (n->name.empty() ? std::string(op_name(n->op)) : n->name).c_str(),
                   n->loc.file_name(), static_cast<unsigned>(n->loc.line()));
  }

  std::vector<TensorImpl*> targets_;
  std::vector<Node*> order_;
  std::unordered_map<const Node*, NodeInfo> info_;
  std::vector<std::unique_ptr<PendingKernel>> kernels_;
  std::map<const Node*, std::shared_ptr<Buffer>> stored_;
  std::vector<std::pair<const Node*, size_t>> stored_bytes_;
  std::unordered_map<const Node*, size_t> arena_offset_;
  std::unordered_set<const Node*> in_place_taken_;
  size_t live_arena_bytes_ = 0, live_arena_peak_ = 0;  // the arena's live bytes (ALK_DEBUG=schedule)
  std::map<Device*, Arena> arenas_;
  const Shape* broadcast_shape_ = nullptr;
  std::vector<std::unique_ptr<TensorImpl>> synthetic_;
  // Maps with several readers inlined into the Map kernel being built (find_shared_inlines).
  std::unordered_set<const Node*> shared_inline_;
  // How often the Map kernel being built reads each of its leaves (epilogue_core).
  std::unordered_map<const TensorImpl*, int> leaf_reads_;
  std::vector<std::pair<Node*, size_t>> inlined_;  // this build's inlined producers, leaves each brought
  std::unordered_set<const Node*> kept_stored_;     // producers stored to keep kernels within kMaxKernelLeaves
  std::unordered_set<const Node*> overwritable_;    // realized values only this schedule reads (find_overwritable)
};

}  // namespace

const ScheduleStats& last_schedule_stats() { return g_stats; }

TraceRecorder*& active_trace() {
  thread_local TraceRecorder* trace = nullptr;
  return trace;
}

namespace {
int64_t g_budget = -1;
}
int64_t memory_budget() { return g_budget; }
MemoryBudget::MemoryBudget(int64_t max_bytes) : previous_(g_budget) { g_budget = max_bytes; }
MemoryBudget::~MemoryBudget() { g_budget = previous_; }

MemoryPlan last_memory_plan() {
  return {g_stats.planned_bytes, g_stats.naive_bytes, g_stats.arena_bytes, g_stats.kernels};
}

void realize_all(const std::vector<TensorImpl*>& targets) {
  Scheduler s(targets);
  s.run();
}

std::optional<std::pair<expr::Expr, expr::MapSignature>> fused_map_kernel(TensorImpl* target) {
  Scheduler s({target});
  return s.fused_map();
}

}  // namespace alk
