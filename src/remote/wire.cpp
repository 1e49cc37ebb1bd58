#include "remote/wire.h"

#include <limits>
#include <type_traits>
#include <variant>

#include "alk/device.h"
#include "alk/expr.h"
#include "alk/kernel_spec.h"

namespace alk::remote {

namespace {

// Limits on what one kernel message may describe: far above anything the scheduler makes.
constexpr int kMaxRank = 16;
constexpr int kMaxExprNodes = 1 << 16;
constexpr int kMaxArgs = 4096;

[[noreturn]] void malformed(const std::string& what) { fail("remote", Loc::current(), "malformed kernel: ", what); }

template <class Repeated>
Shape to_shape(const Repeated& r) {
  return Shape(r.begin(), r.end());
}

void encode_expr(const expr::Expr& e, ExprMsg& out) {
  for (const expr::Node& n : e.nodes) {
    ExprNode* m = out.add_nodes();
    m->set_fn(static_cast<uint32_t>(n.fn));
    m->set_type(static_cast<uint32_t>(n.type));
    m->set_slot(n.slot);
    m->set_value(n.value);
    for (int a : n.args) m->add_args(a);
  }
}

// Rebuilds the expression through expr::Builder, which keeps its invariants (types promoted,
// operands before their users), and refuses one that does not come out the same.
expr::Expr decode_expr(const ExprMsg& m, int max_slot) {
  const int n = m.nodes_size();
  if (n == 0 || n > kMaxExprNodes) malformed("an expression of " + std::to_string(n) + " nodes");
  expr::Builder b;
  std::vector<int> id(static_cast<size_t>(n));
  expr::Expr sent;
  for (int i = 0; i < n; ++i) {
    const ExprNode& node = m.nodes(i);
    if (node.fn() >= static_cast<uint32_t>(expr::kFnCount)) malformed("expression function " + std::to_string(node.fn()));
    if (node.type() > static_cast<uint32_t>(expr::Type::F64)) malformed("expression type " + std::to_string(node.type()));
    if (node.args_size() != 3) malformed("an expression node without its 3 argument slots");
    const auto fn = static_cast<expr::Fn>(node.fn());
    const auto type = static_cast<expr::Type>(node.type());
    const int arity = expr::fn_arity(fn);
    int args[3];
    for (int k = 0; k < 3; ++k) {
      args[k] = node.args(k);
      if (k < arity && (args[k] < 0 || args[k] >= i)) malformed("node " + std::to_string(i) + " reads node " + std::to_string(args[k]));
    }
    expr::Node plain{fn, type};
    plain.slot = node.slot();
    plain.value = node.value();
    for (int k = 0; k < 3; ++k) plain.args[k] = k < arity ? args[k] : -1;
    sent.nodes.push_back(plain);
    switch (fn) {
      case expr::Fn::Input:
        if (node.slot() < 0 || node.slot() >= max_slot) malformed("input slot " + std::to_string(node.slot()));
        id[i] = b.input(node.slot(), type);
        break;
      case expr::Fn::Const: id[i] = b.constant(node.value(), type); break;
      case expr::Fn::Cast: id[i] = b.cast(id[args[0]], type); break;
      case expr::Fn::Select: id[i] = b.select(id[args[0]], id[args[1]], id[args[2]]); break;
      default: id[i] = arity == 1 ? b.unary(fn, id[args[0]]) : b.binary(fn, id[args[0]], id[args[1]]);
    }
  }
  expr::Expr rebuilt = b.finish(id[n - 1]);
  if (rebuilt.str() != sent.str()) malformed("an expression that is not in canonical form: " + sent.str());
  return rebuilt;
}

void encode_arg(const KernelArg& a, const HandleOf& handle_of, ArgMsg& out) {
  out.set_buffer(a.buffer ? handle_of(*a.buffer) : 0);
  out.set_byte_offset(a.byte_offset);
  out.set_dtype(static_cast<uint32_t>(a.dtype));
  for (int64_t d : a.shape) out.add_shape(d);
  for (int64_t s : a.strides) out.add_strides(s);
  out.set_offset(a.offset);
}

DType decode_dtype(uint32_t v) {
  if (v >= static_cast<uint32_t>(kNumDTypes)) malformed("dtype " + std::to_string(v));
  return static_cast<DType>(v);
}

void check_shape(const Shape& s) {
  if (s.size() > static_cast<size_t>(kMaxRank)) malformed("rank " + std::to_string(s.size()));
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) malformed("a negative dim in " + to_string(s));
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d) malformed("a shape whose size overflows: " + to_string(s));
    n *= d;
  }
}

KernelArg decode_arg(const ArgMsg& m, const BufferOf& buffer_of) {
  KernelArg a;
  if (m.buffer() != 0) a.buffer = buffer_of(m.buffer());
  a.byte_offset = m.byte_offset();
  a.dtype = decode_dtype(m.dtype());
  a.shape = to_shape(m.shape());
  a.strides = to_shape(m.strides());
  a.offset = m.offset();
  check_shape(a.shape);
  if (a.strides.size() != a.shape.size())
    malformed("strides " + to_string(a.strides) + " for shape " + to_string(a.shape));
  const ByteSpan span = window_bytes(a);
  if (span.end > span.first) {
    if (!a.buffer) malformed("a window of " + std::to_string(span.end - span.first) + " bytes on no buffer");
    if (span.end > a.buffer->bytes)
      malformed("a window reaching byte " + std::to_string(span.end) + " of a " + std::to_string(a.buffer->bytes) +
                "-byte buffer (shape " + to_string(a.shape) + ", strides " + to_string(a.strides) + ")");
  }
  return a;
}

void encode_params(const Params& p, ParamsMsg& m) {
  m.set_kind(static_cast<uint32_t>(p.index()));
  std::visit(
      [&m](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, MapParams>) {
          encode_expr(v.expr, *m.mutable_expr());
        } else if constexpr (std::is_same_v<T, ReduceParams>) {
          m.set_reduce_op(static_cast<uint32_t>(v.op));
          for (int a : v.axes) m.add_axes(a);
        } else if constexpr (std::is_same_v<T, AxisParams>) {
          m.set_axis(v.axis), m.set_flag(v.flag);
        } else if constexpr (std::is_same_v<T, NormParams>) {
          m.set_i0(v.inner), m.set_d0(v.eps);
        } else if constexpr (std::is_same_v<T, IndexParams>) {
          m.set_axis(v.dim);
        } else if constexpr (std::is_same_v<T, OneHotParams>) {
          m.set_i0(v.num_classes);
        } else if constexpr (std::is_same_v<T, TriParams>) {
          m.set_i0(v.k), m.set_upper(v.upper);
        } else if constexpr (std::is_same_v<T, PadParams>) {
          for (int64_t x : v.pads) m.add_ints(x);
          m.set_d0(v.value);
        } else if constexpr (std::is_same_v<T, SliceScatterParams>) {
          m.set_axis(v.dim), m.set_i0(v.start), m.set_i1(v.step);
        } else if constexpr (std::is_same_v<T, RandomParams>) {
          m.set_dist(v.dist), m.set_seed(v.seed), m.set_rng_offset(v.offset), m.set_d0(v.low), m.set_d1(v.high);
        } else if constexpr (std::is_same_v<T, ConstParams>) {
          m.set_d0(v.value);
        } else if constexpr (std::is_same_v<T, AttentionParams>) {
          m.set_causal(v.causal), m.set_d0(v.scale), m.set_reduced_precision(v.reduced_precision);
          m.set_out_heads(v.out_heads), m.set_grads_qkv(v.grads_qkv);
        } else if constexpr (std::is_same_v<T, UnfoldParams>) {
          for (int64_t x : {v.kh, v.kw, v.sh, v.sw, v.ph, v.pw, v.dh, v.dw, v.h, v.w}) m.add_ints(x);
          m.set_d0(v.pad_value);
        } else if constexpr (std::is_same_v<T, CrossEntropyParams>) {
          m.set_i0(v.ignore_index);
        } else if constexpr (std::is_same_v<T, HostCallParams>) {
          fail("remote", Loc::current(), "a host function cannot run on a remote device");
        } else if constexpr (std::is_same_v<T, UserKernelParams>) {
          // Its C++ body would be compiled and run by the peer's process: code execution on the
          // server for anyone holding a token. Refused until a peer can opt in.
          fail("remote", Loc::current(), "the user kernel '", v.spec ? v.spec->name : std::string("?"),
               "' cannot run on a remote device (the peer would compile and run its source)");
        }
      },
      p);
}

Params decode_params(const ParamsMsg& m) {
  switch (m.kind()) {
    case 0: return std::monostate{};
    // The node's own expression: its slots are the node's inputs, not the kernel's (a
    // constant input is inlined), so only the general bound applies.
    case 1: return MapParams{decode_expr(m.expr(), kMaxArgs)};
    case 2: {
      if (m.reduce_op() > static_cast<uint32_t>(ReduceOp::Prod)) malformed("reduce op " + std::to_string(m.reduce_op()));
      if (m.axes_size() > kMaxRank) malformed("more axes than dims");
      return ReduceParams{static_cast<ReduceOp>(m.reduce_op()), std::vector<int>(m.axes().begin(), m.axes().end())};
    }
    case 3: return AxisParams{m.axis(), m.flag()};
    case 4: return NormParams{m.i0(), m.d0()};
    case 5: return IndexParams{m.axis()};
    case 6: return OneHotParams{m.i0()};
    case 7: return TriParams{m.i0(), m.upper()};
    case 8:
      if (m.ints_size() > 2 * kMaxRank) malformed("pads for more dims than a tensor has");
      return PadParams{std::vector<int64_t>(m.ints().begin(), m.ints().end()), m.d0()};
    case 9: return SliceScatterParams{m.axis(), m.i0(), m.i1()};
    case 10: return RandomParams{m.dist(), m.seed(), m.rng_offset(), m.d0(), m.d1()};
    case 11: return ConstParams{m.d0()};
    case 12: return AttentionParams{m.causal(), m.d0(), m.reduced_precision(), m.out_heads(), m.grads_qkv()};
    case 13: {
      if (m.ints_size() != 10) malformed("unfold params of " + std::to_string(m.ints_size()) + " numbers");
      const auto& i = m.ints();
      return UnfoldParams{i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7], i[8], i[9], m.d0()};
    }
    case 14: return CrossEntropyParams{m.i0()};
    default: malformed("params kind " + std::to_string(m.kind()) + " (host functions do not run remotely)");
  }
}

static_assert(std::variant_size_v<Params> == 17, "a new params struct needs its field mapping in remote/wire.cpp");

}  // namespace

ByteSpan window_bytes(const KernelArg& a) {
  const size_t size = dtype_size(a.dtype);
  __int128 lo = a.offset, hi = a.offset;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] == 0) return {};
    const __int128 reach = static_cast<__int128>(a.shape[d] - 1) * a.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  const __int128 first = static_cast<__int128>(a.byte_offset) + lo * static_cast<__int128>(size);
  const __int128 end = static_cast<__int128>(a.byte_offset) + (hi + 1) * static_cast<__int128>(size);
  if (first < 0) malformed("a window starting " + std::to_string(static_cast<int64_t>(-first)) + " bytes before its buffer");
  if (end > static_cast<__int128>(std::numeric_limits<uint64_t>::max())) malformed("a window past 2^64 bytes");
  return {static_cast<uint64_t>(first), static_cast<uint64_t>(end)};
}

void encode_kernel(const Kernel& k, const HandleOf& handle_of, KernelMsg& out) {
  out.set_op(static_cast<uint32_t>(k.op));
  out.set_node_op(static_cast<uint32_t>(k.node.op));
  encode_params(k.node.params, *out.mutable_params());
  for (int64_t d : k.node.shape) out.add_shape(d);
  for (int64_t d : k.node.in_shape) out.add_in_shape(d);
  out.set_dtype(static_cast<uint32_t>(k.node.dtype));
  out.set_name(k.node.name);
  for (const KernelArg& a : k.inputs) encode_arg(a, handle_of, *out.add_inputs());
  encode_arg(k.output, handle_of, *out.mutable_output());
  if (k.expr) encode_expr(*k.expr, *out.mutable_expr());
  if (k.epilogue) encode_expr(*k.epilogue, *out.mutable_epilogue());
  for (const KernelArg& a : k.epilogue_inputs) encode_arg(a, handle_of, *out.add_epilogue_inputs());
  for (const ExtraOutput& e : k.extra_outputs) {
    encode_arg(e.arg, handle_of, *out.add_extra_output_args());
    encode_expr(e.expr, *out.add_extra_output_exprs());
  }
}

Kernel decode_kernel(const KernelMsg& m, const BufferOf& buffer_of) {
  if (m.op() >= static_cast<uint32_t>(kNumOps) || m.node_op() >= static_cast<uint32_t>(kNumOps))
    malformed("op " + std::to_string(m.op()));
  if (m.inputs_size() > kMaxArgs || m.epilogue_inputs_size() > kMaxArgs || m.extra_output_args_size() > kMaxArgs)
    malformed("more than " + std::to_string(kMaxArgs) + " arguments");
  if (m.extra_output_args_size() != m.extra_output_exprs_size()) malformed("extra outputs without their expressions");
  Kernel k;
  k.op = static_cast<OpId>(m.op());
  if (k.op == OpId::HostCall) malformed("a host function (they do not run remotely)");
  if (k.op == OpId::UserKernel || m.node_op() == static_cast<uint32_t>(OpId::UserKernel))
    malformed("a user kernel (their source does not run on a peer)");
  k.node.op = static_cast<OpId>(m.node_op());
  const int inputs = m.inputs_size(), epilogue_slots = m.epilogue_inputs_size() + 1;
  k.node.params = decode_params(m.params());
  k.node.shape = to_shape(m.shape());
  k.node.in_shape = to_shape(m.in_shape());
  check_shape(k.node.shape);
  check_shape(k.node.in_shape);
  k.node.dtype = decode_dtype(m.dtype());
  k.node.name = m.name().substr(0, 256);
  for (const ArgMsg& a : m.inputs()) k.inputs.push_back(decode_arg(a, buffer_of));
  k.output = decode_arg(m.output(), buffer_of);
  if (!k.output.buffer) malformed("a kernel without an output buffer");
  if (m.has_expr()) k.expr = decode_expr(m.expr(), inputs);
  if (m.has_epilogue()) k.epilogue = decode_expr(m.epilogue(), epilogue_slots);
  for (const ArgMsg& a : m.epilogue_inputs()) k.epilogue_inputs.push_back(decode_arg(a, buffer_of));
  for (int j = 0; j < m.extra_output_args_size(); ++j) {
    ExtraOutput e{decode_arg(m.extra_output_args(j), buffer_of), decode_expr(m.extra_output_exprs(j), k.op == OpId::Map ? inputs : epilogue_slots)};
    if (e.arg.shape != k.output.shape) malformed("an extra output of shape " + to_string(e.arg.shape));
    k.extra_outputs.push_back(std::move(e));
  }
  // A matmul kernel takes m, k, n from its operands' last dims and the number of products from
  // the output's size (the output may be a view of another shape: a convolution's [N, O, H, W]
  // of [N, O, H*W]); the CPU's kernel checks only ranks. The dims must agree, or the product
  // would step outside the windows checked above.
  if (k.op == OpId::Matmul) {
    if (k.inputs.size() != 2) malformed("a matmul of " + std::to_string(k.inputs.size()) + " operands");
    const Shape &a = k.inputs[0].shape, &b = k.inputs[1].shape, &o = k.output.shape;
    const size_t r = a.size();
    bool ok = r >= 2 && b.size() == r && a[r - 1] == b[r - 2];
    for (size_t d = 0; ok && d + 2 < r; ++d) ok = a[d] == b[d];
    if (ok) ok = static_cast<__int128>(numel(o)) == static_cast<__int128>(numel(Shape(a.begin(), a.end() - 1))) * b[r - 1];
    if (!ok) malformed("a matmul " + to_string(a) + " x " + to_string(b) + " -> " + to_string(o));
  }
  // A Map kernel walks its output's index space and reads each input at the same index
  // through the input's strides: every input must have the output's rank and dims.
  if (k.op == OpId::Map) {
    if (!k.expr) malformed("a Map kernel without its expression");
    for (const KernelArg& a : k.inputs)
      if (a.shape != k.output.shape)
        malformed("a Map input of shape " + to_string(a.shape) + " for an output of shape " + to_string(k.output.shape));
  }
  return k;
}

}  // namespace alk::remote
