// Builds the WebGPU plan (plan.h) from compiled Programs: one pass over each recorded
// kernel list resolves every read to the value that last wrote it (or to exported state),
// emits the kernel's WGSL (Map kernels from the WGSL emitter, template ops from
// wgsl_templates.cpp), then a second pass gives values GPU buffers, reusing a buffer once
// its value's last reader has run.
#include "webgpu/plan.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "expr/emit.h"
#include "alk/expr.h"
#include "expr/wgsl_f16.h"
#include "graph/graph.h"
#include "graph/program_contents.h"
#include "runtime/device.h"
#include "webgpu/wgsl_templates.h"

namespace alk::webgpu {

std::string gpu_dtype_name(DType t) {
  switch (t) {
    case DType::F64: case DType::F32: return "f32";
    case DType::I64: case DType::I32: return "i32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
  }
  return "?";
}

namespace {

constexpr int kLive = std::numeric_limits<int>::max();


// CPU bytes of n elements of t -> the GPU layout (i64 -> i32 checked, f64 -> f32).
std::vector<unsigned char> to_gpu(const unsigned char* src, size_t count, DType t, const std::string& what, Loc loc) {
  std::vector<unsigned char> out(gpu_bytes(t, static_cast<int64_t>(count)), 0);
  if (t == DType::I64) {
    for (size_t i = 0; i < count; ++i) {
      int64_t v;
      std::memcpy(&v, src + 8 * i, 8);
      check(v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max(), "export", loc,
            "webgpu: ", what, " holds the i64 value ", v, " at element ", i,
            ", which does not fit in i32 (WebGPU has no 64-bit integers; token ids must fit)");
      const int32_t w = static_cast<int32_t>(v);
      std::memcpy(out.data() + 4 * i, &w, 4);
    }
  } else if (t == DType::F64) {
    for (size_t i = 0; i < count; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      const float f = static_cast<float>(v);
      std::memcpy(out.data() + 4 * i, &f, 4);
    }
  } else {
    std::memcpy(out.data(), src, count * dtype_size(t));
  }
  return out;
}

struct Value {
  size_t bytes = 0;
  DType dtype = DType::F32;
  int state = -1;     // a state buffer's id, else -1
  int last_use = -1;  // the last dispatch binding it (kLive: read after the step)
};

// A range of a CPU buffer's bytes that a value holds; `origin` is the byte of its element 0.
struct Interval {
  size_t begin, end, origin;
  int value;
};

struct Binding {
  int value;
  int64_t offset;  // element offset of the view's element 0 in the value
};

struct Builder {
  Plan plan;
  Loc loc;
  std::map<const Buffer*, int> state_of;           // CPU buffer -> state buffer id
  std::map<const Buffer*, std::string> names;      // CPU buffer -> its state name
  std::map<std::string, int> shader_of;

  // Per program.
  std::vector<Value> values;
  std::map<const Buffer*, std::vector<Interval>> written;
  std::map<int, int> value_of_state;
  struct Pending {
    int shader;
    std::string label;
    std::vector<int> values;
    std::vector<int> defines;  // values first written here
    std::vector<uint32_t> params;
    std::array<uint32_t, 3> groups;
    bool random = false;
  };
  std::vector<Pending> pending;

  int new_value(DType t, int64_t count) {
    values.push_back(Value{gpu_bytes(t, count), t, -1, -1});
    return static_cast<int>(values.size()) - 1;
  }

  // A kernel's shader: `text` runs on every adapter; `native` is its shader-f16 variant
  // (the same text when the kernel touches no f16; a function of `text`, which names the dtypes).
  int shader(const std::string& text, const std::string& native) {
    auto [it, fresh] = shader_of.emplace(text, static_cast<int>(plan.shaders.size()));
    if (fresh) {
      plan.shaders.push_back(text);
      plan.shaders_f16.push_back(native == text ? std::string() : native);
    }
    return it->second;
  }

  int state_buffer(const std::shared_ptr<Buffer>& buf, DType t) {
    if (auto it = state_of.find(buf.get()); it != state_of.end()) return it->second;
    check(buf->device != nullptr, "export", loc, "webgpu: a buffer without a device");
    const size_t esz = dtype_size(t);
    const size_t count = buf->bytes / esz;
    std::vector<unsigned char> host(buf->bytes);
    buf->device->download(*buf, 0, host.data(), buf->bytes);
    PlanBuffer pb;
    pb.dtype = t;
    pb.bytes = gpu_bytes(t, static_cast<int64_t>(count));
    auto nm = names.find(buf.get());
    pb.state = nm != names.end() ? nm->second : "state" + std::to_string(plan.buffers.size());
    pb.shape = {static_cast<int64_t>(count)};
    pb.init = to_gpu(host.data(), count, t, "'" + pb.state + "'", loc);
    plan.buffers.push_back(std::move(pb));
    const int id = static_cast<int>(plan.buffers.size()) - 1;
    state_of[buf.get()] = id;
    return id;
  }

  int state_value(int state) {
    if (auto it = value_of_state.find(state); it != value_of_state.end()) return it->second;
    values.push_back(Value{plan.buffers[static_cast<size_t>(state)].bytes, plan.buffers[static_cast<size_t>(state)].dtype, state, -1});
    const int v = static_cast<int>(values.size()) - 1;
    value_of_state[state] = v;
    return v;
  }

  // The value and element offset behind a view read by a kernel.
  Binding read(const std::shared_ptr<Buffer>& buf, size_t byte_offset, DType t, const Shape& shape, const Shape& strides,
               int64_t offset, const std::string& what) {
    const int64_t esz = static_cast<int64_t>(dtype_size(t));
    int64_t lo = 0, hi = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t span = (shape[d] - 1) * strides[d];
      (span < 0 ? lo : hi) += span;
    }
    if (numel(shape) == 0) lo = hi = 0;
    const int64_t begin = static_cast<int64_t>(byte_offset) + (offset + lo) * esz;
    const int64_t end = static_cast<int64_t>(byte_offset) + (offset + hi + 1) * esz;
    auto& ivs = written[buf.get()];
    for (const Interval& iv : ivs) {
      if (static_cast<int64_t>(iv.begin) <= begin && end <= static_cast<int64_t>(iv.end)) {
        const int64_t rel = static_cast<int64_t>(byte_offset) - static_cast<int64_t>(iv.origin);
        check(rel % esz == 0 && dtype_size(values[static_cast<size_t>(iv.value)].dtype) == static_cast<size_t>(esz), "export",
              loc, "webgpu: ", what, " reads ", dtype_name(t), " elements from bytes written as ",
              dtype_name(values[static_cast<size_t>(iv.value)].dtype));
        return {iv.value, rel / esz + offset};
      }
      check(static_cast<int64_t>(iv.end) <= begin || end <= static_cast<int64_t>(iv.begin), "export", loc, "webgpu: ", what,
            " reads bytes written by two different kernels");
    }
    const int state = state_buffer(buf, t);
    check(dtype_size(plan.buffers[static_cast<size_t>(state)].dtype) == static_cast<size_t>(esz) &&
              static_cast<int64_t>(byte_offset) % esz == 0,
          "export", loc, "webgpu: ", what, " reads a buffer as ", dtype_name(t), " and as ",
          dtype_name(plan.buffers[static_cast<size_t>(state)].dtype));
    return {state_value(state), static_cast<int64_t>(byte_offset) / esz + offset};
  }

  Binding read(const KernelArg& a, const std::string& what) {
    return read(a.buffer, a.byte_offset, a.dtype, a.shape, a.strides, a.offset, what);
  }

  // Marks the bytes of a kernel's (contiguous) output as held by a new value.
  int write(const KernelArg& out, const std::string& what) {
    check(out.strides == contiguous_strides(out.shape), "export", loc, "webgpu: ", what, " writes a strided output");
    const size_t esz = dtype_size(out.dtype);
    const size_t begin = out.byte_offset + static_cast<size_t>(out.offset) * esz;
    const size_t end = begin + static_cast<size_t>(numel(out.shape)) * esz;
    const int v = new_value(out.dtype, numel(out.shape));
    auto& ivs = written[out.buffer.get()];
    std::vector<Interval> kept;
    for (const Interval& iv : ivs) {
      if (iv.end <= begin || end <= iv.begin) {
        kept.push_back(iv);
        continue;
      }
      if (iv.begin < begin) kept.push_back({iv.begin, begin, iv.origin, iv.value});
      if (end < iv.end) kept.push_back({end, iv.end, iv.origin, iv.value});
    }
    kept.push_back({begin, end, begin, v});
    ivs = std::move(kept);
    return v;
  }

  // The Map kernel params block (expr/emit.h's contract). The (contiguous) output's dims are
  // merged where every input's strides let them (dims of size 1 dropped): the common all-
  // contiguous kernel becomes rank 1, which the WGSL's alk_offset computes without the
  // per-dim division (lavapipe runs integer division lane by lane: an SGD update of 200K
  // elements took 24 ms with rank 2).
  static std::vector<uint32_t> map_params(const std::vector<TView>& in, const Shape& out_shape, int64_t out_offset,
                                          const std::string& what, Loc loc) {
    for (size_t k = 0; k < in.size(); ++k)
      check(in[k].shape == out_shape, "export", loc, "webgpu: ", what, ": input ", k,
            " is not viewed over the output's shape");
    Shape shape;
    std::vector<Shape> in_strides(in.size());
    for (size_t d = 0; d < out_shape.size(); ++d) {
      if (out_shape[d] == 1) continue;
      bool merge = !shape.empty();
      for (size_t k = 0; k < in.size() && merge; ++k) merge = in_strides[k].back() == out_shape[d] * in[k].strides[d];
      if (merge) {
        shape.back() *= out_shape[d];
        for (size_t k = 0; k < in.size(); ++k) in_strides[k].back() = in[k].strides[d];
      } else {
        shape.push_back(out_shape[d]);
        for (size_t k = 0; k < in.size(); ++k) in_strides[k].push_back(in[k].strides[d]);
      }
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (Shape& st : in_strides) st.push_back(0);
    }
    check(shape.size() <= 8, "export", loc, "webgpu: ", what, ": rank ", shape.size(), " > 8");
    std::vector<uint32_t> p;
    p.push_back(static_cast<uint32_t>(numel(out_shape)));
    p.push_back(static_cast<uint32_t>(shape.size()));
    for (size_t d = 0; d < 8; ++d) p.push_back(d < shape.size() ? static_cast<uint32_t>(shape[d]) : 1u);
    const size_t k_in = in.size();
    std::vector<uint32_t> strides(8 * std::max<size_t>(1, k_in), 0);
    for (size_t k = 0; k < k_in; ++k) {
      for (size_t d = 0; d < in_strides[k].size(); ++d) {
        const int64_t s = in_strides[k][d];
        check(s >= std::numeric_limits<int32_t>::min() && s <= std::numeric_limits<int32_t>::max(), "export", loc,
              "webgpu: ", what, ": stride beyond 32 bits");
        strides[8 * k + d] = static_cast<uint32_t>(static_cast<int32_t>(s));
      }
    }
    p.insert(p.end(), strides.begin(), strides.end());
    for (const TView& v : in) p.push_back(static_cast<uint32_t>(v.offset));
    p.push_back(static_cast<uint32_t>(out_offset));
    return p;
  }

  void map_dispatch(const expr::Expr& e, const std::vector<TView>& in, const std::vector<int>& in_values, DType out_dtype,
                    const Shape& out_shape, int out_value, const std::string& label) {
    expr::MapSignature sig{"main", {}, out_dtype};
    for (const TView& v : in) sig.inputs.push_back(v.dtype);
    Pending d;
    std::string native;
    {
      expr::WgslNativeF16 f16;
      native = expr::emit_map_kernel(e, sig, expr::Target::Wgsl);
    }
    d.shader = shader(expr::emit_map_kernel(e, sig, expr::Target::Wgsl), native);
    d.label = label;
    d.values = in_values;
    d.values.push_back(out_value);
    d.defines = {out_value};
    d.params = map_params(in, out_shape, 0, label, loc);
    const int64_t n = numel(out_shape);
    d.groups = {static_cast<uint32_t>(std::clamp<int64_t>((n + 255) / 256, 1, 65535)), 1, 1};
    pending.push_back(std::move(d));
  }

  void kernel(const Kernel& k) {
    const std::string op = k.node.name.empty() ? std::string(op_name(k.op)) : k.node.name;
    const std::string label =
        op + " (" + k.node.loc.file_name() + ":" + std::to_string(k.node.loc.line()) + ")";
    check(k.op != OpId::ToDevice, "export", loc, "webgpu: the program copies between devices (", label,
          "): trace it on one device");
    std::vector<TView> in;
    std::vector<int> in_values;
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const KernelArg& a = k.inputs[i];
      const Binding b = read(a, label);
      in.push_back(TView{a.dtype, a.shape, a.strides, b.offset});
      in_values.push_back(b.value);
    }
    if (k.op == OpId::Map) {
      // Extra outputs first, each its own dispatch (the main one may write over an input).
      for (const ExtraOutput& x : k.extra_outputs)
        map_dispatch(x.expr, in, in_values, x.arg.dtype, x.arg.shape, write(x.arg, label), label);
      const int out = write(k.output, label);
      map_dispatch(*k.expr, in, in_values, k.output.dtype, k.output.shape, out, label);
      return;
    }
    check(k.extra_outputs.empty(), "export", loc, "webgpu: ", label,
          " stores extra outputs from a template op's epilogue (ALK_EXTRA_OUTPUTS): trace it without");
    // Epilogue inputs are read before the output is written (it may reuse their bytes).
    std::vector<TView> epi;
    std::vector<int> epi_values;
    for (const KernelArg& a : k.epilogue_inputs) {
      const Binding b = read(a, label);
      epi.push_back(TView{a.dtype, a.shape, a.strides, b.offset});
      epi_values.push_back(b.value);
    }
    const int out = write(k.output, label);
    const DType core_dtype = k.node.dtype;
    const int core = k.epilogue ? new_value(core_dtype, numel(k.node.shape)) : out;
    // Template kernels write 32-bit elements: a 16-bit core (an autocast matmul's f16) is
    // computed in f32 and rounded by a cast dispatch (packed or native f16 stores, as the
    // Map emitter writes them; the CPU rounds its f32 accumulator the same way).
    const bool narrow = dtype_size(core_dtype) < 4 && is_floating(core_dtype);
    const int computed = narrow ? new_value(DType::F32, numel(k.node.shape)) : core;
    const TView core_view{narrow ? DType::F32 : core_dtype, k.node.shape, contiguous_strides(k.node.shape), 0};
    const TemplatePlan tp = template_passes(k, in, core_view);
    TemplatePlan tp_f16;
    {
      expr::WgslNativeF16 f16;
      tp_f16 = template_passes(k, in, core_view);
    }
    check(tp_f16.passes.size() == tp.passes.size(), "export", loc, "webgpu: ", label,
          ": the f16 variant has other passes");
    std::vector<int> temps;
    for (auto& [dt, count] : tp.temps) temps.push_back(new_value(dt, count));
    std::set<int> defined;
    for (size_t pi = 0; pi < tp.passes.size(); ++pi) {
      const Pass& pass = tp.passes[pi];
      Pending d;
      d.shader = shader(pass.source, tp_f16.passes[pi].source);
      d.label = label;
      d.groups = pass.groups;
      d.params = pass.params;
      d.random = pass.random;
      for (const Slot& s : pass.slots) {
        const int v = s.kind == Slot::Input ? in_values[static_cast<size_t>(s.index)]
                      : s.kind == Slot::Output ? computed
                                               : temps[static_cast<size_t>(s.index)];
        d.values.push_back(v);
        if (s.kind != Slot::Input && defined.insert(v).second) d.defines.push_back(v);
      }
      pending.push_back(std::move(d));
    }
    if (narrow) {
      expr::Builder b;
      const expr::Expr identity = b.finish(b.input(0, expr::Type::F32));
      map_dispatch(identity, {core_view}, {computed}, core_dtype, k.node.shape, core,
                   label + " to " + std::string(dtype_name(core_dtype)));
    }
    if (k.epilogue) {
      std::vector<TView> ein{TView{core_dtype, k.output.shape, contiguous_strides(k.output.shape), 0}};
      ein.insert(ein.end(), epi.begin(), epi.end());
      std::vector<int> evals{core};
      evals.insert(evals.end(), epi_values.begin(), epi_values.end());
      map_dispatch(*k.epilogue, ein, evals, k.output.dtype, k.output.shape, out, label + " epilogue");
    }
  }

  PlanTensor tensor_of(const Tensor& t, const std::string& what) {
    const TensorImpl* impl = t.impl();
    check(impl->node->realized(), "export", loc, "webgpu: ", what, " is not realized");
    const Binding b = read(impl->node->buffer, 0, impl->dtype, impl->shape, impl->strides, impl->offset, what);
    values[static_cast<size_t>(b.value)].last_use = kLive;
    return PlanTensor{b.value, impl->dtype, impl->shape, impl->strides, b.offset};
  }

  void program(const std::string& name, const Program& prog) {
    values.clear();
    written.clear();
    value_of_state.clear();
    pending.clear();
    ProgramContents c = ProgramAccess::contents(prog, loc);
    PlanProgram pp;
    pp.name = name;
    pp.rng_used = c.rng_used;
    // Inputs are state (their traced batch is exported), listed so a step can overwrite them.
    for (size_t i = 0; i < c.inputs->size(); ++i) {
      const Tensor& t = (*c.inputs)[i];
      names.emplace(t.impl()->node->buffer.get(), name + ".input" + std::to_string(i));
      pp.inputs.push_back(tensor_of(t, "input " + std::to_string(i)));
    }
    // Asked of the registry before anything is planned: every op the step's kernels run,
    // with why the exporter cannot write it, not just the first one met.
    std::string refused;
    for (const Kernel& k : *c.kernels)
      if (k.op != OpId::Map && k.op != OpId::ToDevice)
        if (std::string why = unsupported_reason(k.op); !why.empty() && refused.find(why) == std::string::npos)
          refused += std::string(refused.empty() ? "" : "; ") + std::string(op_name(k.op)) + ": " + why;
    check(refused.empty(), "export", loc, "webgpu: program '", name, "' runs ops the exporter cannot write (", refused, ")");
    for (const Kernel& k : *c.kernels) kernel(k);
    for (const auto& [cname, t] : *c.captures) pp.captures.push_back({cname, tensor_of(t, "capture '" + cname + "'")});
    std::vector<std::pair<int, int>> copies;  // values
    for (const auto& carry : c.carries) {
      auto it = written.find(carry.from.get());
      check(it != written.end(), "export", loc, "webgpu: a carried tensor is not written by the step");
      Binding from{-1, 0};
      for (const Interval& iv : it->second)
        if (iv.begin == 0 && iv.origin == 0 && iv.end >= carry.bytes) from = {iv.value, 0};
      check(from.value >= 0, "export", loc, "webgpu: a carried tensor is not the whole output of one kernel");
      const int to = state_buffer(carry.to, values[static_cast<size_t>(from.value)].dtype);
      values[static_cast<size_t>(from.value)].last_use = kLive;
      copies.push_back({from.value, to});
      pp.copies.push_back({-1, to, gpu_bytes(values[static_cast<size_t>(from.value)].dtype,
                                              static_cast<int64_t>(carry.bytes / dtype_size(values[static_cast<size_t>(from.value)].dtype)))});
    }
    // Liveness, then buffers: a value's buffer returns to the pool after its last reader.
    for (size_t i = 0; i < pending.size(); ++i)
      for (int v : pending[i].values) {
        Value& val = values[static_cast<size_t>(v)];
        if (val.last_use != kLive) val.last_use = std::max(val.last_use, static_cast<int>(i));
      }
    std::vector<int> buffer_of(values.size(), -1);
    for (size_t v = 0; v < values.size(); ++v)
      if (values[v].state >= 0) buffer_of[v] = values[v].state;
    std::multimap<size_t, int> pool;  // bytes -> free buffer
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& d = pending[i];
      for (int v : d.defines) {
        const Value& val = values[static_cast<size_t>(v)];
        auto it = pool.find(val.bytes);
        if (it != pool.end()) {
          buffer_of[static_cast<size_t>(v)] = it->second;
          pool.erase(it);
        } else {
          PlanBuffer pb;
          pb.bytes = val.bytes;
          pb.dtype = val.dtype;
          plan.buffers.push_back(std::move(pb));
          buffer_of[static_cast<size_t>(v)] = static_cast<int>(plan.buffers.size()) - 1;
        }
      }
      PlanDispatch pd;
      pd.shader = d.shader;
      pd.label = d.label;
      pd.params = d.params;
      pd.groups = d.groups;
      pd.random = d.random;
      for (int v : d.values) {
        check(buffer_of[static_cast<size_t>(v)] >= 0, "export", loc, "webgpu: ", d.label, " reads a value before it is written");
        pd.buffers.push_back(buffer_of[static_cast<size_t>(v)]);
      }
      pp.dispatches.push_back(std::move(pd));
      std::set<int> released;
      for (int v : d.values)
        if (values[static_cast<size_t>(v)].last_use == static_cast<int>(i) && values[static_cast<size_t>(v)].state < 0 &&
            released.insert(v).second)
          pool.emplace(values[static_cast<size_t>(v)].bytes, buffer_of[static_cast<size_t>(v)]);
    }
    auto buffer_for = [&](int v) {
      check(buffer_of[static_cast<size_t>(v)] >= 0, "export", loc, "webgpu: a result is never written");
      return buffer_of[static_cast<size_t>(v)];
    };
    for (auto& in : pp.inputs) in.buffer = buffer_for(in.buffer);
    for (auto& [cname, t] : pp.captures) t.buffer = buffer_for(t.buffer);
    for (size_t i = 0; i < copies.size(); ++i) pp.copies[i].from = buffer_for(copies[i].first);
    plan.programs.push_back(std::move(pp));
  }
};

json::Value shape_json(const Shape& s) {
  json::Array a;
  for (int64_t d : s) a.emplace_back(d);
  return a;
}

json::Value tensor_json(const PlanTensor& t) {
  return json::Object{{"buffer", t.buffer},
                      {"dtype", std::string(dtype_name(t.dtype))},
                      {"gpu_dtype", gpu_dtype_name(t.dtype)},
                      {"shape", shape_json(t.shape)},
                      {"strides", shape_json(t.strides)},
                      {"offset", t.offset}};
}

}  // namespace

Plan build_plan(const PlanRequest& r, Loc loc) {
  Builder b;
  b.loc = loc;
  for (const auto& [name, t] : r.names) {
    if (!t.defined()) continue;
    t.realize();
    if (t.impl()->node->buffer) b.names.emplace(t.impl()->node->buffer.get(), name);
  }
  if (r.lr.defined()) {
    r.lr.realize();
    b.names[r.lr.impl()->node->buffer.get()] = "lr";
  }
  for (const auto& [name, prog] : r.programs) b.program(name, *prog);
  if (r.lr.defined())
    if (auto it = b.state_of.find(r.lr.impl()->node->buffer.get()); it != b.state_of.end()) b.plan.lr_buffer = it->second;
  // Named state takes the shape of its tensor.
  for (const auto& [name, t] : r.names) {
    if (!t.defined() || !t.impl()->node->buffer) continue;
    auto it = b.state_of.find(t.impl()->node->buffer.get());
    if (it != b.state_of.end() && numel(t.shape()) == b.plan.buffers[static_cast<size_t>(it->second)].shape[0])
      b.plan.buffers[static_cast<size_t>(it->second)].shape = t.shape();
  }
  return std::move(b.plan);
}

std::string Plan::shader_path(size_t i, bool f16) {
  return "kernels/k" + std::to_string(i) + (f16 ? ".f16.wgsl" : ".wgsl");
}

json::Value Plan::to_json(const json::Value& meta) const {
  json::Array bufs;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const PlanBuffer& b = buffers[i];
    json::Object o{{"bytes", static_cast<int64_t>(b.bytes)}, {"dtype", gpu_dtype_name(b.dtype)}};
    if (!b.state.empty()) {
      o.emplace_back("state", b.state);
      o.emplace_back("shape", shape_json(b.shape));
      o.emplace_back("cpu_dtype", std::string(dtype_name(b.dtype)));
    }
    bufs.emplace_back(std::move(o));
  }
  json::Array shaders_json;
  json::Object shaders_f16_json;  // shader index -> its shader-f16 variant
  for (size_t i = 0; i < shaders.size(); ++i) {
    shaders_json.emplace_back(shader_path(i, false));
    if (!shaders_f16[i].empty()) shaders_f16_json.emplace_back(std::to_string(i), shader_path(i, true));
  }
  json::Object progs;
  for (const PlanProgram& p : programs) {
    json::Array inputs, dispatches, copies;
    json::Object captures;
    for (const PlanTensor& t : p.inputs) inputs.emplace_back(tensor_json(t));
    for (const PlanDispatch& d : p.dispatches) {
      json::Array bs, ps;
      for (int b : d.buffers) bs.emplace_back(b);
      for (uint32_t w : d.params) ps.emplace_back(static_cast<int64_t>(w));
      json::Object o{{"shader", d.shader}, {"label", d.label}, {"buffers", bs},
                     {"groups", json::Array{static_cast<int64_t>(d.groups[0]), static_cast<int64_t>(d.groups[1]),
                                            static_cast<int64_t>(d.groups[2])}}};
      if (!d.params.empty()) o.emplace_back("params", ps);
      if (d.random) o.emplace_back("random", true);
      dispatches.emplace_back(std::move(o));
    }
    for (const auto& c : p.copies)
      copies.emplace_back(json::Object{{"from", c.from}, {"to", c.to}, {"bytes", static_cast<int64_t>(c.bytes)}});
    for (const auto& [name, t] : p.captures) captures.emplace_back(name, tensor_json(t));
    progs.emplace_back(p.name, json::Object{{"inputs", inputs}, {"dispatches", dispatches}, {"copies", copies},
                                            {"captures", captures}, {"rng_used", std::to_string(p.rng_used)}});
  }
  json::Object root{{"format", "alk-webgpu-1"},
                    {"note", "i64 tensors are i32 on the GPU (checked at export), f64 are f32"},
                    {"buffers", bufs},
                    {"shaders", shaders_json},
                    {"shaders_f16", shaders_f16_json},
                    {"programs", progs},
                    {"weights", "weights.safetensors"},
                    {"meta", meta}};
  if (lr_buffer >= 0) root.emplace_back("lr_buffer", lr_buffer);
  return root;
}

}  // namespace alk::webgpu
