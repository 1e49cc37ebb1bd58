// alk::compile: warm-up call, traced call, then replays of the recorded kernel list.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "alk/compile.h"
#include "graph/generator.h"
#include "graph/graph.h"
#include "graph/program_contents.h"
#include "graph/trace.h"

namespace alk {

namespace {
thread_local std::map<std::string, Tensor>* g_captures = nullptr;

// The realized, contiguous bytes behind t (t must view its node's whole buffer in order).
bool whole_buffer(const TensorImpl* t) {
  const Node* n = t->node.get();
  return n->realized() && t->offset == 0 && t->strides == contiguous_strides(t->shape) && t->shape == n->shape;
}
}  // namespace

void capture(const std::string& name, const Tensor& t, Loc loc) {
  check(t.defined(), "capture", loc, "'", name, "' is an undefined tensor");
  if (g_captures) (*g_captures)[name] = t;
}

bool inside_compiled_step() { return g_captures != nullptr || active_trace() != nullptr; }

struct Program::State {
  StepFn fn;
  int calls = 0;
  std::vector<Kernel> kernels;
  // The kernels as a replay runs them: kernels (kept as traced, for export) with each Random
  // kernel reading its seed and base offset from its device's rng state buffer where the
  // device supports that, so its recorded dispatch never changes.
  std::vector<Kernel> run;
  // One i64 [2] {seed, generator offset at the step's start} per device; a replay writes it
  // before launching (as set_lr writes the learning rate's buffer).
  struct RngState {
    Device* device;
    std::shared_ptr<Buffer> buffer;
  };
  std::vector<RngState> rng_states;
  // How a replay runs the kernels: runs of kernels on one device recorded once as one device
  // object (a Vulkan command buffer), replayed with no per-kernel host work; a copy between
  // devices, or a Random kernel its device cannot read the rng state for (its offset, a
  // parameter then, moves every call), is launched on its own.
  struct Segment {
    size_t begin, end;                     // kernels[begin, end)
    std::unique_ptr<Recording> recording;  // null: launch kernels[begin] alone
    std::shared_ptr<PreparedKernel> prepared;
  };
  std::vector<Segment> segments;
  std::vector<Tensor> inputs;  // the traced call's inputs: replays copy new data into them
  struct Carry {
    std::shared_ptr<Buffer> from, to;  // the step's result -> the buffer the next step reads
    size_t bytes;
  };
  std::vector<Carry> carries;         // as traced (what an export replays)
  std::vector<Carry> replay_carries;  // the carries a replay still copies (write_in_place took the rest)
  std::map<std::string, Tensor> captures;  // values of the latest call (their buffers are rewritten by replays)
  uint64_t rng_used = 0;                   // generator offsets one step consumes
  int64_t held_bytes = 0, naive_bytes = 0;

  void run_eager(const std::vector<Tensor>& in) {
    std::map<std::string, Tensor> caps;
    g_captures = &caps;
    try {
      fn(in);
    } catch (...) {
      g_captures = nullptr;
      throw;
    }
    g_captures = nullptr;
    std::vector<Tensor> targets;
    for (auto& [name, t] : caps) targets.push_back(t);
    realize(targets);
    captures = std::move(caps);
  }

  void trace(const std::vector<Tensor>& in, Loc loc) {
    for (const Tensor& t : in) {
      t.realize();
      check(whole_buffer(t.impl()), "compile", loc, "inputs must be realized contiguous tensors");
    }
    inputs = in;
    const uint64_t rng_before = random_offset();
    TraceRecorder rec;
    active_trace() = &rec;
    try {
      run_eager(in);
      // Everything the step carries forward must be realized inside the trace.
      std::vector<Tensor> carried;
      for (auto& a : rec.assigned) carried.push_back(Tensor(a.impl));
      realize(carried);
    } catch (...) {
      active_trace() = nullptr;
      throw;
    }
    active_trace() = nullptr;
    rng_used = random_offset() - rng_before;
    rng_base = traced_rng_base = rng_before;
    kernels = std::move(rec.kernels);
    run = kernels;
    const uint64_t state[2] = {random_seed(), rng_base};
    for (Kernel& k : run) {
      if (k.node.op != OpId::Random) continue;
      Device* dev = k.output.buffer->device;
      auto it = std::find_if(rng_states.begin(), rng_states.end(), [&](const RngState& r) { return r.device == dev; });
      if (it == rng_states.end()) {
        rng_states.push_back({dev, dev->allocate(sizeof state)});
        dev->upload(*rng_states.back().buffer, 0, state, sizeof state);
        it = rng_states.end() - 1;
      }
      Kernel reads_state = k;
      std::get<RandomParams>(reads_state.node.params).offset -= rng_base;
      reads_state.inputs = {KernelArg{it->buffer, 0, DType::I64, {2}, {1}, 0}};
      if (dev->supports(reads_state)) k = std::move(reads_state);
    }
    held_bytes = rec.held_bytes;
    naive_bytes = rec.naive_bytes;
    // Each carried tensor goes back to the buffer the step read it from; from now on a
    // replay ends by copying the new value there.
    // The node of each carried new value: a tensor still viewing it after the carried
    // tensors are pointed back (a view the step made and left outside it) reads the
    // buffer the traced kernels wrote, so that buffer must keep being written.
    std::vector<std::weak_ptr<Node>> made;
    for (auto& a : rec.assigned) {
      TensorImpl* impl = a.impl.get();
      TensorImpl before;
      before.node = a.before;
      before.shape = impl->shape;
      before.strides = a.strides;
      before.offset = a.offset;
      // A view (a gradient seen through a transpose, say) is not carried: it keeps the
      // traced result, whose buffer every replay rewrites.
      if (!whole_buffer(impl) || !whole_buffer(&before)) continue;
      const size_t bytes = a.before->buffer->bytes;
      if (impl->node->buffer != a.before->buffer) {
        carries.push_back({impl->node->buffer, a.before->buffer, bytes});
        made.push_back(impl->node);
        copy_buffer(*impl->node->buffer, 0, *a.before->buffer, 0, bytes);
      } else if (rec.produced.count(a.before->buffer.get())) {
        // The scheduler wrote the new value over the old one (find_overwritable): nothing
        // to copy, but an exporter still needs to know the step updates this state.
        carries.push_back({a.before->buffer, a.before->buffer, bytes});
        made.emplace_back();
      }
      impl->node = a.before;
      impl->strides = a.strides;
      impl->offset = a.offset;
    }
    // Where it is safe, the kernel that makes a carried value writes it where the step read
    // it, so a replay copies nothing for it.
    // (A host function may hold buffers its kernel does not list, data parallel's buckets:
    // a step with one keeps its copies.)
    // The traced list (for export) is rewritten alike, and the carry then names `to` as its
    // own source (the exporter reads it as "the value the step last wrote there"), so the
    // buffers the step wrote the new values into are freed: a compiled step holds no more
    // than an eager one.
    const bool host_calls = std::any_of(run.begin(), run.end(), [](const Kernel& k) { return k.op == OpId::HostCall; });
    for (size_t i = 0; i < carries.size(); ++i) {
      Carry& c = carries[i];
      if (c.from == c.to) continue;
      if (host_calls || made[i].use_count() > 0 || !write_in_place(run, c)) {
        replay_carries.push_back(c);
        continue;
      }
      redirect_writes(kernels, c);
      c.from = c.to;
    }
    // A HostCall runs its host function on every replay: never inside a device recording
    // (a CUDA graph would replay only what the function queued while being captured).
    auto alone = [](const Kernel& k) {
      return k.op == OpId::ToDevice || k.op == OpId::HostCall || (k.node.op == OpId::Random && k.inputs.empty());
    };
    for (size_t i = 0; i < run.size();) {
      const Kernel& k = run[i];
      if (alone(k)) {
        segments.push_back({i, i + 1, nullptr, k.op == OpId::ToDevice ? nullptr : k.output.buffer->device->prepare(k)});
        ++i;
        continue;
      }
      Device* dev = k.output.buffer->device;
      size_t end = i + 1;
      while (end < run.size() && !alone(run[end]) && run[end].output.buffer->device == dev) ++end;
      const std::vector<Kernel> part(run.begin() + static_cast<long>(i), run.begin() + static_cast<long>(end));
      segments.push_back({i, end, dev->record(part), nullptr});
      i = end;
    }
  }

  void replay(const std::vector<Tensor>& in, Loc loc) {
    check(in.size() == inputs.size(), "compile", loc, "the program was traced with ", inputs.size(),
          " inputs, got ", in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      check(in[i].shape() == inputs[i].shape() && in[i].dtype() == inputs[i].dtype(), "compile", loc, "input ", i,
            " has shape ", to_string(in[i].shape()), " ", dtype_name(in[i].dtype()), " but the program was traced with ",
            to_string(inputs[i].shape()), " ", dtype_name(inputs[i].dtype()));
      if (in[i].impl()->node == inputs[i].impl()->node) continue;
      Tensor src = in[i].contiguous();
      src.realize();
      copy_buffer(*src.impl()->node->buffer, static_cast<size_t>(src.offset()) * dtype_size(src.dtype()),
                  *inputs[i].impl()->node->buffer, 0, static_cast<size_t>(src.numel()) * dtype_size(src.dtype()));
    }
    // Random kernels draw what an eager call would now: offsets from the generator's current
    // position (the recorded ones start at rng_base), which then moves on by one step's use.
    const uint64_t start = advance_random_offset(rng_used);  // taken at once: another thread may draw too
    const uint64_t state[2] = {random_seed(), start};
    for (const RngState& r : rng_states) r.device->upload(*r.buffer, 0, state, sizeof state);
    const bool timing = kernel_timing_enabled();
    for (Segment& seg : segments) {
      if (seg.recording && !timing) {
        run[seg.begin].output.buffer->device->replay(*seg.recording);
        continue;
      }
      for (size_t i = seg.begin; i < seg.end; ++i) {
        Kernel& k = run[i];
        if (k.node.op == OpId::Random && k.inputs.empty()) {
          auto& p = std::get<RandomParams>(k.node.params);
          p.offset = p.offset - rng_base + start;
          p.seed = random_seed();
        }
        launch(k, timing, seg.prepared.get());  // ALK_DEBUG=timing: each kernel, timed
      }
    }
    rng_base = start;
    for (const Carry& c : replay_carries) copy_buffer(*c.from, 0, *c.to, 0, c.bytes);
  }

  // A carried value computed straight into the buffer it replaces (an optimizer's
  // `p = p - lr * u`, its moments, its step count), instead of into `from` and copied back
  // after every replay: possible when one kernel writes all of `from`, no kernel after it
  // reads `to` (they would now see the new value), nothing else writes `to`, and the writer
  // reads `to` only as a Map reads an operand it overwrites element by element (the same
  // view as its output, as the scheduler's own in-place reuse). Later readers of `from`
  // read `to` instead. Captured values keep their buffers (captured() reads them).
  bool write_in_place(std::vector<Kernel>& kernels, const Carry& c) const {
    for (const auto& [name, t] : captures)
      if (t.defined() && t.impl()->node->buffer == c.from) return false;
    auto same_view = [](const KernelArg& a, const KernelArg& b) {
      return a.byte_offset == b.byte_offset && a.offset == b.offset && a.shape == b.shape && a.strides == b.strides &&
             dtype_size(a.dtype) == dtype_size(b.dtype);
    };
    std::optional<size_t> writer;
    for (size_t i = 0; i < kernels.size(); ++i) {
      for (const ExtraOutput& x : kernels[i].extra_outputs)  // left to the copy after the replay
        if (x.arg.buffer == c.to || x.arg.buffer == c.from) return false;
      const KernelArg& out = kernels[i].output;
      if (out.buffer == c.to) return false;
      if (out.buffer != c.from) continue;
      if (writer || out.byte_offset != 0 || out.offset != 0 || out.strides != contiguous_strides(out.shape) ||
          static_cast<size_t>(numel(out.shape)) * dtype_size(out.dtype) != c.bytes)
        return false;
      writer = i;
    }
    if (!writer) return false;
    const Kernel& w = kernels[*writer];
    for (const KernelArg& a : w.epilogue_inputs)
      if (a.buffer == c.to) return false;
    for (const KernelArg& a : w.inputs)
      if (a.buffer == c.to && (w.op != OpId::Map || !same_view(a, w.output))) return false;
    for (size_t i = *writer + 1; i < kernels.size(); ++i) {
      for (const KernelArg& a : kernels[i].inputs)
        if (a.buffer == c.to) return false;
      for (const KernelArg& a : kernels[i].epilogue_inputs)
        if (a.buffer == c.to) return false;
    }
    redirect_writes(kernels, c);
    return true;
  }

  // Every use of `from` in the list becomes `to` (write_in_place has checked that is safe).
  static void redirect_writes(std::vector<Kernel>& kernels, const Carry& c) {
    for (Kernel& k : kernels) {
      if (k.output.buffer == c.from) k.output.buffer = c.to;
      for (KernelArg& a : k.inputs)
        if (a.buffer == c.from) a.buffer = c.to;
      for (KernelArg& a : k.epilogue_inputs)
        if (a.buffer == c.from) a.buffer = c.to;
    }
  }

  uint64_t rng_base = 0;  // the generator offset run's host-patched Random kernels start from
  uint64_t traced_rng_base = 0;  // the one kernels' Random offsets (as traced) start from
};

Program::Program(StepFn fn) : s_(std::make_shared<State>()) { s_->fn = std::move(fn); }

Program compile(StepFn fn) { return Program(std::move(fn)); }

void Program::operator()(const std::vector<Tensor>& inputs, Loc loc) {
  State& s = *s_;
  if (s.calls == 0) {
    s.run_eager(inputs);
  } else if (s.calls == 1) {
    s.trace(inputs, loc);
  } else {
    s.replay(inputs, loc);
  }
  ++s.calls;
}

Tensor Program::captured(const std::string& name, Loc loc) const {
  auto it = s_->captures.find(name);
  check(it != s_->captures.end(), "compile", loc, "nothing was captured as '", name, "'");
  const Tensor& t = it->second;
  // A copy on the value's device: the traced buffer is rewritten by the next replay.
  const std::vector<unsigned char> bytes = host_bytes(t);
  (void)loc;
  return tensor_from_host(bytes.data(), t.shape(), t.dtype(), t.device());
}

bool Program::traced() const { return s_->calls >= 2; }
int64_t Program::kernels() const { return static_cast<int64_t>(s_->kernels.size()); }
int64_t Program::replay_copies() const { return static_cast<int64_t>(s_->replay_carries.size()); }
MemoryPlan Program::plan() const {
  return {s_->held_bytes, s_->naive_bytes, 0, static_cast<int64_t>(s_->kernels.size())};
}

ProgramContents ProgramAccess::contents(const Program& p, Loc loc) {
  const Program::State& s = *p.s_;
  check(s.calls >= 2, "export", loc, "the program is not traced yet: call it twice first (a warm-up call, then the traced one)");
  ProgramContents c;
  c.kernels = &s.kernels;
  c.inputs = &s.inputs;
  for (const auto& carry : s.carries) c.carries.push_back({carry.from, carry.to, carry.bytes});
  c.captures = &s.captures;
  c.rng_base = s.traced_rng_base;
  c.rng_used = s.rng_used;
  return c;
}

}  // namespace alk
