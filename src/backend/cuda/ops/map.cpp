#include "backend/cuda/ops/map.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace alk::cuda {

void launch_map(Context& ctx, const expr::Expr& e, const std::vector<Arg>& in, const Arg& out,
                const std::vector<ExtraArg>& extra) {
  expr::MapSignature sig{"map", {}, out.dtype, {}};
  for (const Arg& a : in) sig.inputs.push_back(a.dtype);
  std::vector<expr::Expr> extra_exprs;
  for (const ExtraArg& x : extra) {
    sig.extra_outputs.push_back(x.arg.dtype);
    extra_exprs.push_back(x.expr);
  }
  const int64_t n = numel(out.shape);
  // Fewer dims, fewer divisions per element: size-1 dims are dropped and a dim merges into
  // the one outside it wherever every input steps through both as one (the output is
  // contiguous): a contiguous elementwise kernel runs with rank 1.
  Shape shape;
  std::vector<Shape> strides(in.size());
  for (size_t d = 0; d < out.shape.size(); ++d) {
    if (out.shape[d] == 1) continue;
    bool merge = !shape.empty();
    for (size_t k = 0; k < in.size() && merge; ++k) merge = strides[k].back() == in[k].strides[d] * out.shape[d];
    if (merge) {
      shape.back() *= out.shape[d];
      for (size_t k = 0; k < in.size(); ++k) strides[k].back() = in[k].strides[d];
    } else {
      shape.push_back(out.shape[d]);
      for (size_t k = 0; k < in.size(); ++k) strides[k].push_back(in[k].strides[d]);
    }
  }
  // The kernel is compiled for its rank, and for 32-bit index math where every element it
  // reaches lies below 2^31 (ALK_RANK, ALK_INDEX32 in emit_cuda.cpp).
  bool index32 = n < (int64_t{1} << 31) && out.offset + n < (int64_t{1} << 31);
  for (const ExtraArg& x : extra) index32 = index32 && x.arg.offset + n < (int64_t{1} << 31);
  for (size_t k = 0; k < in.size() && index32; ++k) {
    int64_t last = in[k].offset;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (strides[k][d] < 0) index32 = false;
      last += (shape[d] - 1) * std::max<int64_t>(strides[k][d], 0);
    }
    index32 = index32 && in[k].offset >= 0 && last < (int64_t{1} << 31);
  }
  std::string defs = "#define ALK_RANK " + std::to_string(std::max<size_t>(1, shape.size())) + "\n";
  if (index32) defs += "#define ALK_INDEX32 1\n";
  // Inputs with one value for the launch (a learning rate, a step count): loaded, and what
  // they alone decide computed, once per thread (emit_map_kernel).
  std::vector<bool> uniform(in.size());
  for (size_t k = 0; k < in.size(); ++k)
    uniform[k] = std::all_of(strides[k].begin(), strides[k].end(), [](int64_t s) { return s == 0; });
  // Operands contiguous along the innermost dim go 16 bytes per thread and load: vec
  // elements of the widest per-element operand's type, each vector inside one row (the
  // innermost size a multiple of vec, unless the launch is one row) and on a vector
  // boundary (offsets and outer strides multiples of vec). An operand constant along the
  // innermost dim (stride 0 there: a mask over [B, T, 3, H, D]'s third dim, a row's
  // statistic) is loaded once per vector (ALK_VEC_BCAST_<k>).
  std::vector<bool> row_broadcast(in.size());
  for (size_t k = 0; k < in.size(); ++k)
    row_broadcast[k] = !uniform[k] && shape.size() > 1 && !strides[k].empty() && strides[k].back() == 0;
  size_t widest = dtype_size(out.dtype);
  for (const ExtraArg& x : extra) widest = std::max(widest, dtype_size(x.arg.dtype));
  for (size_t k = 0; k < in.size(); ++k)
    if (!uniform[k] && !row_broadcast[k]) widest = std::max(widest, dtype_size(in[k].dtype));
  const int64_t vec = static_cast<int64_t>(16 / widest);
  bool aligned = vec > 1 && n >= 4 * vec && out.offset % vec == 0 && (shape.size() <= 1 || shape.back() % vec == 0);
  for (const ExtraArg& x : extra) aligned = aligned && x.arg.offset % vec == 0;
  for (size_t k = 0; k < in.size() && aligned; ++k) {
    if (uniform[k] || row_broadcast[k] || strides[k].empty()) continue;
    aligned = strides[k].back() == 1 && in[k].offset % vec == 0;
    for (size_t d = 0; d + 1 < strides[k].size() && aligned; ++d) aligned = strides[k][d] % vec == 0;
  }
  if (aligned) {
    defs += "#define ALK_VEC " + std::to_string(vec) + "\n";
    for (size_t k = 0; k < in.size(); ++k)
      if (row_broadcast[k]) defs += "#define ALK_VEC_BCAST_" + std::to_string(k) + " 1\n";
  }
  CUfunction f = ctx.function(defs + expr::emit_map_kernel(e, sig, expr::Target::Cuda, uniform, extra_exprs), "map");
  // The params block of emit_cuda.cpp: n, rank, shape[8], strides[K][8], offset[K + 1 + extra].
  std::vector<int64_t> p;
  p.push_back(n);
  p.push_back(static_cast<int64_t>(shape.size()));
  for (size_t d = 0; d < 8; ++d) p.push_back(d < shape.size() ? shape[d] : 1);
  for (size_t k = 0; k < std::max<size_t>(1, in.size()); ++k)
    for (size_t d = 0; d < 8; ++d) p.push_back(k < in.size() && d < strides[k].size() ? strides[k][d] : 0);
  for (const Arg& a : in) p.push_back(a.offset);
  p.push_back(out.offset);
  for (const ExtraArg& x : extra) p.push_back(x.arg.offset);
  std::vector<uint32_t> magic(16, 0);  // magic[8], then shift[8]
  for (size_t d = 0; d < shape.size(); ++d) std::tie(magic[d], magic[8 + d]) = expr::cuda_division_magic(shape[d]);
  const size_t bytes = p.size() * sizeof(int64_t);
  p.resize(p.size() + 8);
  std::memcpy(reinterpret_cast<char*>(p.data()) + bytes, magic.data(), 64);
  Args args;
  for (const Arg& a : in) args.add(a.ptr);
  args.add(out.ptr);
  for (const ExtraArg& x : extra) args.add(x.arg.ptr);
  args.add_bytes(p.data(), bytes + 64);
  ctx.launch(f, blocks_for(ctx, aligned ? (n + vec - 1) / vec : n), 1, 1, kBlock, 0, args);
}

std::optional<GroupMember> group_member(const Kernel& k) {
  if (k.op != OpId::Map || !k.expr || k.epilogue || !k.extra_outputs.empty() ||
      k.output.buffer->device->info().kind != "cuda")
    return std::nullopt;
  const Shape& shape = k.output.shape;
  const int64_t n = numel(shape);
  if (n < 1 || n >= (int64_t{1} << 31)) return std::nullopt;
  const Shape dense = contiguous_strides(shape);
  auto form = [&](const KernelArg& a, bool allow_uniform) -> std::optional<GroupOperand> {
    if (a.shape.size() != shape.size() || a.strides.size() != shape.size()) return std::nullopt;
    bool contiguous = true, uniform = true;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      contiguous = contiguous && a.strides[d] == dense[d];
      uniform = uniform && a.strides[d] == 0;
    }
    const size_t size = dtype_size(a.dtype);
    const CUdeviceptr at = arg_of(a).ptr + static_cast<CUdeviceptr>(a.offset * static_cast<int64_t>(size));
    if (uniform && allow_uniform) return GroupOperand{at, size, true};
    if (contiguous && a.shape == shape) return GroupOperand{at, static_cast<size_t>(n) * size, false};
    return std::nullopt;
  };
  GroupMember m;
  m.n = n;
  for (const KernelArg& a : k.inputs) {
    auto o = form(a, true);
    if (!o) return std::nullopt;
    m.in.push_back(*o);
  }
  auto o = form(k.output, false);
  if (!o) return std::nullopt;
  m.out = *o;
  return m;
}

bool independent(const GroupMember& a, const GroupMember& b) {
  auto overlap = [](const GroupOperand& x, const GroupOperand& y) {
    return x.ptr < y.ptr + y.bytes && y.ptr < x.ptr + x.bytes;
  };
  if (overlap(a.out, b.out)) return false;
  for (const GroupOperand& i : a.in)
    if (overlap(i, b.out)) return false;
  for (const GroupOperand& i : b.in)
    if (overlap(i, a.out)) return false;
  return true;
}

void launch_map_group(Context& ctx, const expr::Expr& e, const expr::MapSignature& sig,
                      const std::vector<GroupMember>& members) {
  const size_t K = sig.inputs.size(), slots = std::max<size_t>(1, K);
  std::vector<bool> uniform(K);
  for (size_t k = 0; k < K; ++k) uniform[k] = members[0].in[k].uniform;
  // 16 bytes per operand and load where every member's ranges start on 16 bytes.
  size_t widest = dtype_size(sig.output);
  for (size_t k = 0; k < K; ++k)
    if (!uniform[k]) widest = std::max(widest, dtype_size(sig.inputs[k]));
  const int64_t vec = static_cast<int64_t>(16 / widest);
  bool aligned = vec > 1;
  for (const GroupMember& m : members) {
    aligned = aligned && m.out.ptr % 16 == 0;
    for (size_t k = 0; k < K; ++k) aligned = aligned && (uniform[k] || m.in[k].ptr % 16 == 0);
  }
  // The table is the kernel's only parameter: at most 4 KB (the classic limit) of members.
  const size_t member_bytes = (slots + 1) * 8 + 16;
  const size_t per_launch = std::min<size_t>(64, (4096 - 64) / member_bytes);
  std::string defs = "#define ALK_RANK 1\n#define ALK_INDEX32 1\n#define ALK_GROUP " + std::to_string(per_launch) + "\n";
  if (aligned) defs += "#define ALK_VEC " + std::to_string(vec) + "\n";
  CUfunction f = ctx.function(defs + expr::emit_map_kernel(e, sig, expr::Target::Cuda, uniform) +
                                   expr::cuda_map_group_entry(sig, uniform),
                               sig.name + "_group");
  // A launch's blocks fill the GPU about once (8 of 256 threads per SM), shared among its
  // members by size (at least one each), each member's grid-stride loop covering the rest:
  // as many bytes in flight as one kernel per member, without tens of thousands of blocks
  // each looking up its member.
  const int64_t launch_blocks = static_cast<int64_t>(std::max(1, ctx.props().multiprocessors)) * 8;
  for (size_t first = 0; first < members.size(); first += per_launch) {
    const size_t count = std::min(per_launch, members.size() - first);
    int64_t items_total = 0;
    for (size_t j = 0; j < count; ++j) items_total += members[first + j].n;
    std::vector<char> table(per_launch * member_bytes, 0);
    int32_t blocks_total = 0;
    for (size_t j = 0; j < count; ++j) {
      const GroupMember& m = members[first + j];
      char* at = table.data() + j * member_bytes;
      for (size_t k = 0; k < K; ++k) std::memcpy(at + k * 8, &m.in[k].ptr, 8);
      std::memcpy(at + slots * 8, &m.out.ptr, 8);
      std::memcpy(at + (slots + 1) * 8, &m.n, 8);
      const int64_t share = launch_blocks * m.n / std::max<int64_t>(1, items_total);
      const int64_t want = ((aligned ? (m.n + vec - 1) / vec : m.n) + kBlock - 1) / kBlock;
      const auto blocks = static_cast<int32_t>(std::clamp<int64_t>(share, 1, std::max<int64_t>(1, want)));
      std::memcpy(at + (slots + 1) * 8 + 8, &blocks_total, 4);
      std::memcpy(at + (slots + 1) * 8 + 12, &blocks, 4);
      blocks_total += blocks;
    }
    Args args;
    args.add_bytes(table.data(), table.size());
    ctx.launch(f, static_cast<unsigned>(blocks_total), 1, 1, kBlock, 0, args);
  }
}

namespace {

void map_op(Context& ctx, const Kernel& k, const Arg& out) {
  std::vector<Arg> in;
  for (const KernelArg& a : k.inputs) in.push_back(arg_of(a));
  std::vector<ExtraArg> extra;
  for (const ExtraOutput& x : k.extra_outputs) extra.push_back({arg_of(x.arg), x.expr});
  launch_map(ctx, *k.expr, in, out, extra);
}

std::string map_unsupported(const Kernel& k) { return k.expr ? "" : "a Map kernel without an expression"; }

// The emitter writes every dtype (f64, 16-bit floats and integers alike).
const bool registered = (template_ops().coverage().set_elementwise(kAllDTypes), true);

}  // namespace

const TemplateOp& map_kernels() {
  static const TemplateOp map{map_unsupported, map_op};
  return map;
}

}  // namespace alk::cuda
