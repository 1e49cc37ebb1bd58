// The CUDA backend as a runtime Device (include/alk/device.h), registered as "cuda:N".
//
// What runs: Map kernels from the CUDA C emitter (src/expr/emit_cuda.cpp), reductions
// with their fused prologue (emit_function), and the template ops in kernels/*.cu, all
// compiled at run time by NVRTC (context.h caches the cubins in memory and on disk). A
// Reduce or Matmul epilogue runs as a Map kernel over the op's result, as on the CPU.
// Recording (alk::compile) captures the stream into a CUDA graph.
#include "backend/cuda/cuda_device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>

#include "backend/cuda/context.h"
#include "core/half.h"
#include "expr/emit.h"
#include "runtime/device.h"

namespace alk::cuda {

namespace sources {  // kernels/*.cu(h), embedded by CMake (cuda_kernel_sources.cpp)
extern const std::string_view common, rows, index, loss, matmul, matmul_mma, matmul_shared, matmul_tc, matmul_wgmma,
    attention_shared, attention, attention_tiled, attention_mma;
}  // namespace sources

namespace {

// ---- kernel arguments ----

// The kernels' View (kernels/common.cuh), byte for byte.
struct KView {
  int64_t offset = 0;
  int32_t rank = 0;
  int32_t contiguous = 0;
  int64_t shape[8] = {};
  int64_t strides[8] = {};
};
static_assert(sizeof(KView) == 144);

KView kview(const Shape& shape, const Shape& strides, int64_t offset) {
  KView v;
  v.offset = offset;
  v.rank = static_cast<int32_t>(shape.size());
  bool contiguous = true;
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    v.shape[d] = shape[d];
    v.strides[d] = strides[d];
    if (shape[d] != 1 && strides[d] != expect) contiguous = false;
    expect *= shape[d];
  }
  v.contiguous = contiguous;
  return v;
}

// A tensor as the kernels see it: the pointer to its storage's first byte, and its view.
struct Arg {
  CUdeviceptr ptr = 0;
  DType dtype = DType::F32;
  Shape shape, strides;
  int64_t offset = 0;
  KView view() const { return kview(shape, strides, offset); }
};

CUdeviceptr device_ptr(const Buffer& b) { return reinterpret_cast<CUdeviceptr>(b.handle); }

Arg arg_of(const KernelArg& a) {
  if (!a.buffer) fail("a kernel argument without a buffer");
  if (a.buffer->device->info().kind != "cuda") fail("a kernel argument on " + a.buffer->device->name() + ", not CUDA");
  return Arg{device_ptr(*a.buffer) + a.byte_offset, a.dtype, a.shape, a.strides, a.offset};
}


// The C type arithmetic on a dtype runs in (kernels' ACC).
const char* acc_type(DType t) {
  switch (t) {
    case DType::F64: return "double";
    case DType::F16: case DType::BF16: case DType::F32: return "float";
    case DType::Bool: return "int";
    case DType::U8: case DType::I32: case DType::I64: return "long long";
  }
  return "?";
}
// A raw element type of the dtype's size (kernels that only move bits).
const char* raw_type(DType t) {
  switch (dtype_size(t)) {
    case 1: return "unsigned char";
    case 2: return "unsigned short";
    case 4: return "unsigned int";
    default: return "unsigned long long";
  }
}
std::string storage(DType t) { return expr::cuda_storage_type(t); }

// `value` stored as dtype, as raw bits in the low bytes of a u64.
uint64_t bits_of(DType t, double value) {
  uint64_t bits = 0;
  switch (t) {
    case DType::F32: { float f = static_cast<float>(value); std::memcpy(&bits, &f, 4); break; }
    case DType::F64: std::memcpy(&bits, &value, 8); break;
    case DType::F16: bits = f32_to_f16(static_cast<float>(value)); break;
    case DType::BF16: bits = f32_to_bf16(static_cast<float>(value)); break;
    case DType::Bool: bits = value != 0; break;
    case DType::U8: bits = static_cast<uint8_t>(static_cast<int64_t>(value)); break;
    case DType::I32: { int32_t i = static_cast<int32_t>(value); std::memcpy(&bits, &i, 4); break; }
    case DType::I64: { int64_t i = static_cast<int64_t>(value); std::memcpy(&bits, &i, 8); break; }
  }
  return bits;
}

std::string defines(std::initializer_list<std::pair<const char*, std::string>> d) {
  std::string s;
  for (auto& [name, value] : d) s += std::string("#define ") + name + " " + value + "\n";
  return s;
}
std::string kernel_source(const std::string& defs, std::string_view body) {
  return defs + std::string(sources::common) + "\n" + std::string(body);
}

constexpr unsigned kBlock = 256;
unsigned blocks_for(const Context& ctx, int64_t items, int64_t per_block = kBlock) {
  const int64_t want = (items + per_block - 1) / per_block;
  // Enough blocks for many loads in flight per SM (grid-stride loops cover the rest).
  const int64_t cap = static_cast<int64_t>(std::max(1, ctx.props().multiprocessors)) * 256;
  return static_cast<unsigned>(std::clamp<int64_t>(want, 1, cap));
}

// ALK_CUDA_<name>=old selects the kernels a newer path replaced (A/B runs on the device).
bool old_path(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string_view(v) == "old";
}

// ---- Map ----

// extra: the kernel's further outputs (Kernel::extra_outputs), contiguous over out's shape.
struct ExtraArg {
  Arg arg;
  expr::Expr expr;
};

void launch_map(Context& ctx, const expr::Expr& e, const std::vector<Arg>& in, const Arg& out,
                const std::vector<ExtraArg>& extra = {}) {
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

// ---- multi-tensor Map launches ----
// An optimizer step is the same few elementwise kernels once per parameter; the scheduler
// places them side by side (batch_independent_maps in src/graph/schedule.cpp). A run of such
// kernels - one source, contiguous or single-value operands, none reading what another
// writes - becomes one launch per up to ~4 KB of member table (PyTorch's multi_tensor_apply):
// 148 parameters' t/m/v/p updates in ~10 launches instead of ~600.
struct GroupOperand {
  CUdeviceptr ptr = 0;  // where the member's range starts
  size_t bytes = 0;     // what it reads or writes from there
  bool uniform = false;
};
struct GroupMember {
  std::vector<GroupOperand> in;
  GroupOperand out;
  int64_t n = 0;
};

// The member form of a Map kernel, if it has one: every operand contiguous in the output's
// order or a single value (all strides 0 over the dims that are not 1), under 2^31 elements.
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

// True when b's operands neither write what a reads or writes nor read what a writes
// (a member reading and writing its own range, as an in-place update does, is fine).
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

// ---- Reduce (with its prologue) ----

const char* compute_ctype(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::U8: case DType::I32: case DType::I64: return "long long";
    case DType::F16: case DType::BF16: case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}
std::string load_as_compute(DType t, const std::string& raw) {
  switch (t) {
    case DType::Bool: return "(" + raw + " != 0)";
    case DType::F16: return "__half2float(" + raw + ")";
    case DType::BF16: return "__bfloat162float(" + raw + ")";
    case DType::U8: case DType::I32: return "(long long)" + raw;
    case DType::I64: case DType::F32: case DType::F64: return raw;
  }
  return raw;
}

// Where a reduction's result goes: `core` is the reduced value's dtype (the node's); with an
// epilogue (an elementwise expression of that value, rounded to `core` first as a separate pass
// would read it back, and of up to kReduceEpilogueInputs tensors of the result's shape, read at
// the output's index through their views) the store applies it and writes `out`'s dtype, so a
// bias gradient's cast to f32 costs no launch of its own.
constexpr size_t kReduceEpilogueInputs = 4;
struct ReduceStore {
  explicit ReduceStore(DType value) : core(value) {}
  DType core;
  const expr::Expr* epilogue = nullptr;
  std::vector<DType> epilogue_inputs;
  DType out = DType::F32;  // the stored dtype with an epilogue (else core's)
};

// The store of one output: `store_result(out, p, e, o, acc)`, and EpiArgs (the epilogue inputs'
// pointers and views; one unused slot without an epilogue, so every kernel has one signature).
std::string reduce_store_source(const ReduceStore& st) {
  const size_t E = st.epilogue ? st.epilogue_inputs.size() : 0;
  const std::string slots = std::to_string(std::max<size_t>(1, E));
  std::string s = "struct EpiArgs { unsigned long long ptr[" + slots + "]; View v[" + slots + "]; };\n";
  if (!st.epilogue) {
    s += "__device__ __forceinline__ void store_result(" + storage(st.core) +
         "* __restrict__ out, const ReduceParams& p, const EpiArgs&, i64 o, ACC acc) {\n  out[p.out_offset + o] = " +
         std::string(st.core == DType::Bool ? "(unsigned char)(acc != 0)" : "cvt<" + storage(st.core) + ">(acc)") +
         ";\n}\n";
    return s;
  }
  expr::MapSignature sig{"epilogue", {st.core}, st.out};
  for (DType t : st.epilogue_inputs) sig.inputs.push_back(t);
  s += expr::emit_function(*st.epilogue, sig, expr::Target::Cuda) + "\n";
  s += "__device__ __forceinline__ void store_result(" + storage(st.out) +
       "* __restrict__ out, const ReduceParams& p, const EpiArgs& e, i64 o, ACC acc) {\n";
  s += "  const " + std::string(compute_ctype(st.core)) + " x0 = " +
       load_as_compute(st.core, "cvt<" + storage(st.core) + ">(acc)") + ";\n";
  std::string call = "epilogue(x0";
  for (size_t i = 0; i < E; ++i) {
    const std::string n = std::to_string(i), t = storage(st.epilogue_inputs[i]);
    s += "  const " + std::string(compute_ctype(st.epilogue_inputs[i])) + " x" + std::to_string(i + 1) + " = " +
         load_as_compute(st.epilogue_inputs[i], "((const " + t + "*)e.ptr[" + n + "])[at(e.v[" + n + "], o)]") + ";\n";
    call += ", x" + std::to_string(i + 1);
  }
  s += "  out[p.out_offset + o] = cvt<" + storage(st.out) + ">(" + call + "));\n}\n";
  return s;
}
std::string reduce_out_type(const ReduceStore& st) { return storage(st.epilogue ? st.out : st.core); }

// Column mode (a sum over rows of a row-major matrix: bias gradients), with vectors:
// a block is 8 warps over 32 x RVEC adjacent outputs, lane l owning outputs l RVEC ..
// + RVEC - 1 and reading them with one load of RVEC elements per input and row (16 bytes
// for bf16 x 8 or f32 x 4; the host sets RVEC = 1 where an input is not aligned for it).
// Warp w of chunk c (blockIdx.y) takes rows r0 + w, r0 + w + 8, ...; the warps' sums are
// combined in warp order and written once per chunk; reduce_finish_slices then combines the
// chunks, 8 slices per output in a fixed order (deterministic) and stores them (store_result).
// Where every input steps through the reduced rows by one stride (`strided`: a bias
// gradient's [B, T] rows merged into one dim), a warp issues ROWS_IN_FLIGHT rows' loads
// before it adds the first (a 16-byte load a lane and input each): one row in flight a warp
// left the [16384, 768] bf16 sum at ~2.6 TB/s (bench_cuda_rows), latency-bound.
std::string reduce_columns_vec_source(const std::vector<DType>& inputs, const ReduceStore& st, const std::string& ident,
                                      const std::string& call, bool strided) {
  const size_t K = inputs.size();
  const int in_flight = K == 1 ? 8 : K == 2 ? 4 : 2;  // rows; 16 bytes x in_flight x K registers a lane
  std::string s = "#define ROWS_IN_FLIGHT " + std::to_string(in_flight) + "\n";
  for (size_t i = 0; i < K; ++i) {
    const std::string n = std::to_string(i), t = storage(inputs[i]);
    s += "struct __align__(RVEC * sizeof(" + t + ")) ColumnVec" + n + " { " + t + " v[RVEC]; };\n";
  }
  s += "extern \"C\" __global__ void __launch_bounds__(256) reduce_columns_vec(";
  for (size_t i = 0; i < K; ++i) s += "const " + storage(inputs[i]) + "* __restrict__ in" + std::to_string(i) + ", ";
  s += "ACC* __restrict__ partial, const ReduceParams p, i64 per_chunk) {\n";
  s += "  __shared__ ACC part[8][32 * RVEC];\n";
  s += "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n";
  s += "  const i64 o0 = ((i64)blockIdx.x * 32 + lane) * RVEC;\n";
  s += "  const i64 r0 = (i64)blockIdx.y * per_chunk, r1 = min(p.R, r0 + per_chunk);\n";
  s += "  ACC acc[RVEC];\n#pragma unroll\n  for (int e = 0; e < RVEC; ++e) acc[e] = " + ident + ";\n";
  // One row's values (ColumnVec v<i>) into the accumulators.
  std::string add_row = "#pragma unroll\n      for (int e = 0; e < RVEC; ++e) {\n";
  for (size_t i = 0; i < K; ++i) {
    const std::string n = std::to_string(i);
    add_row += "        const " + std::string(compute_ctype(inputs[i])) + " x" + n + " = " +
               load_as_compute(inputs[i], "v" + n + ".v[e]") + ";\n";
  }
  add_row += "        acc[e] = combine(acc[e], (ACC)" + call + "));\n      }\n";
  s += "  if (o0 < p.outputs) {\n";  // RVEC divides the kept rows (host): all RVEC outputs exist
  for (size_t i = 0; i < K; ++i) s += "    const i64 base" + std::to_string(i) + " = at(p.kept[" + std::to_string(i) + "], o0);\n";
  if (strided) {
    // Pointers in vectors: the host checked that bases and strides are multiples of RVEC.
    s += "    i64 r = r0 + warp;\n";
    for (size_t i = 0; i < K; ++i) {
      const std::string n = std::to_string(i);
      s += "    const i64 step" + n + " = p.red[" + n + "].strides[0] * 8 / RVEC;\n";
      s += "    const ColumnVec" + n + "* row" + n + " = reinterpret_cast<const ColumnVec" + n + "*>(in" + n + " + base" + n +
           " + r * p.red[" + n + "].strides[0]);\n";
    }
    s += "    for (; r + 8 * (ROWS_IN_FLIGHT - 1) < r1; r += 8 * ROWS_IN_FLIGHT) {\n";
    for (size_t i = 0; i < K; ++i) {
      const std::string n = std::to_string(i);
      s += "      ColumnVec" + n + " batch" + n + "[ROWS_IN_FLIGHT];\n#pragma unroll\n      for (int u = 0; u < ROWS_IN_FLIGHT; ++u) batch" +
           n + "[u] = row" + n + "[u * step" + n + "];\n      row" + n + " += ROWS_IN_FLIGHT * step" + n + ";\n";
    }
    s += "#pragma unroll\n      for (int u = 0; u < ROWS_IN_FLIGHT; ++u) {\n";
    for (size_t i = 0; i < K; ++i) s += "      const ColumnVec" + std::to_string(i) + " v" + std::to_string(i) + " = batch" + std::to_string(i) + "[u];\n";
    s += add_row + "      }\n    }\n";
    s += "    for (; r < r1; r += 8) {\n";
    for (size_t i = 0; i < K; ++i) {
      const std::string n = std::to_string(i);
      s += "      const ColumnVec" + n + " v" + n + " = *row" + n + ";\n      row" + n + " += step" + n + ";\n";
    }
    s += add_row + "    }\n  }\n";
  } else {
    s += "#pragma unroll 4\n    for (i64 r = r0 + warp; r < r1; r += 8) {\n";
    for (size_t i = 0; i < K; ++i) {
      const std::string n = std::to_string(i);
      s += "      const ColumnVec" + n + " v" + n + " = *reinterpret_cast<const ColumnVec" + n + "*>(in" + n + " + base" + n +
           " + at(p.red[" + n + "], r));\n";
    }
    s += add_row + "    }\n  }\n";
  }
  s += "#pragma unroll\n  for (int e = 0; e < RVEC; ++e) part[warp][lane * RVEC + e] = acc[e];\n";
  s += "  __syncthreads();\n";
  s += "  for (int t = threadIdx.x; t < 32 * RVEC; t += blockDim.x) {\n";
  s += "    const i64 o = (i64)blockIdx.x * 32 * RVEC + t;\n    if (o >= p.outputs) break;\n";
  s += "    ACC a = part[0][t];\n    for (int w = 1; w < 8; ++w) a = combine(a, part[w][t]);\n";
  s += "    partial[(i64)blockIdx.y * p.outputs + o] = a;\n  }\n}\n";
  s += "extern \"C\" __global__ void reduce_finish_slices(const ACC* __restrict__ partial, " + reduce_out_type(st) +
       "* __restrict__ out, const ReduceParams p, i64 chunks, const EpiArgs epi) {\n";
  s += "  __shared__ ACC part[8][33];\n  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n";
  s += "  const i64 o = (i64)blockIdx.x * 32 + tx;\n  ACC acc = " + ident + ";\n";
  s += "  if (o < p.outputs)\n#pragma unroll 4\n    for (i64 c = ty; c < chunks; c += 8) acc = combine(acc, partial[c * p.outputs + o]);\n";
  s += "  part[ty][tx] = acc;\n  __syncthreads();\n  if (ty == 0 && o < p.outputs) {\n";
  s += "    for (int k = 1; k < 8; ++k) acc = combine(acc, part[k][tx]);\n";
  s += "    store_result(out, p, epi, o, acc);\n  }\n}\n";
  return s;
}

// The reduction kernels for one prologue, dtypes and store: reduce_kernel (W lanes per output)
// and reduce_columns_vec + reduce_finish_slices (RVEC adjacent outputs per lane; `strided`:
// rows by one stride, above).
std::string reduce_source(const expr::Expr& prologue, const std::vector<DType>& inputs, const ReduceStore& st, ReduceOp op,
                          int W, int rvec = 1, bool strided = false) {
  const DType core = st.core;
  const size_t K = inputs.size();
  expr::MapSignature sig{"prologue", inputs, core};
  const std::string acc = acc_type(core);
  const bool floating = is_floating(core);
  std::string ident, combine;
  switch (op) {
    case ReduceOp::Sum: ident = "0"; combine = "a + b"; break;
    case ReduceOp::Prod: ident = "1"; combine = "a * b"; break;
    case ReduceOp::Max:
      ident = floating ? "-(ACC)ALK_INF" : core == DType::Bool ? "0" : "(-9223372036854775807ll - 1)";
      combine = "max_nan(a, b)";
      break;
    case ReduceOp::Min:
      ident = floating ? "(ACC)ALK_INF" : core == DType::Bool ? "1" : "9223372036854775807ll";
      combine = "min_nan(a, b)";
      break;
  }
  std::string s = defines({{"ACC", acc}, {"W", std::to_string(W)}, {"K", std::to_string(K)}, {"RVEC", std::to_string(rvec)}});
  s += std::string(sources::common) + "\n";
  s += expr::emit_function(prologue, sig, expr::Target::Cuda) + "\n";
  s += "__device__ __forceinline__ ACC combine(ACC a, ACC b) { return " + combine + "; }\n";
  s += "struct ReduceParams { i64 outputs, R, out_offset; View kept[K]; View red[K]; };\n";
  s += reduce_store_source(st);
  s += "extern \"C\" __global__ void reduce_kernel(";
  for (size_t i = 0; i < K; ++i) s += "const " + storage(inputs[i]) + "* __restrict__ in" + std::to_string(i) + ", ";
  s += reduce_out_type(st) + "* __restrict__ out, const ReduceParams p, const EpiArgs epi) {\n";
  s += "  const int lane = threadIdx.x % W, group = threadIdx.x / W, G = blockDim.x / W;\n";
  if (W == 256) s += "  __shared__ ACC part[256];\n";
  s += "  for (i64 ob = (i64)blockIdx.x * G; ob < p.outputs; ob += (i64)gridDim.x * G) {\n";
  s += "    const i64 o = ob + group;\n    const bool valid = o < p.outputs;\n";
  s += "    ACC acc = " + ident + ";\n    if (valid) {\n";
  for (size_t i = 0; i < K; ++i) s += "      const i64 base" + std::to_string(i) + " = at(p.kept[" + std::to_string(i) + "], o);\n";
  s += "      for (i64 r = lane; r < p.R; r += W) {\n";
  std::string call = "prologue(";
  for (size_t i = 0; i < K; ++i) {
    const std::string n = std::to_string(i);
    s += "        const " + std::string(compute_ctype(inputs[i])) + " x" + n + " = " +
         load_as_compute(inputs[i], "in" + n + "[base" + n + " + at(p.red[" + n + "], r)]") + ";\n";
    call += (i ? ", x" : "x") + n;
  }
  s += "        acc = combine(acc, (ACC)" + call + "));\n      }\n    }\n";
  if (W == 256) {
    s += "    part[threadIdx.x] = acc;\n    __syncthreads();\n";
    s += "    for (int h = 128; h > 0; h >>= 1) {\n      if (threadIdx.x < h) part[threadIdx.x] = combine(part[threadIdx.x], part[threadIdx.x + h]);\n"
         "      __syncthreads();\n    }\n    acc = part[0];\n    __syncthreads();\n";
  } else {
    s += "    for (int h = W / 2; h > 0; h >>= 1) acc = combine(acc, __shfl_xor_sync(0xffffffffu, acc, h, W));\n";
  }
  s += "    if (valid && lane == 0) store_result(out, p, epi, o, acc);\n";
  s += "  }\n}\n";
  s += reduce_columns_vec_source(inputs, st, ident, call, strided);
  return s;
}

// Outputs per lane of reduce_columns_vec: 16 bytes of the widest input (at most 8), halved
// until every input's rows start at that many elements' alignment: the kept rows' length,
// every other stride and offset a multiple of it, and the pointer 16-byte aligned.
int column_vector_width(const Kernel& k, const std::vector<KView>& kept, const std::vector<KView>& red) {
  size_t widest = 1;
  for (const KernelArg& a : k.inputs) widest = std::max(widest, dtype_size(a.dtype));
  for (int vec = static_cast<int>(std::min<size_t>(8, 16 / widest)); vec > 1; vec /= 2) {
    bool ok = true;
    for (size_t i = 0; i < k.inputs.size() && ok; ++i) {
      const KView& kv = kept[i];
      ok = kv.rank >= 1 && kv.strides[kv.rank - 1] == 1 && kv.shape[kv.rank - 1] % vec == 0 && kv.offset % vec == 0 &&
           arg_of(k.inputs[i]).ptr % 16 == 0;
      for (int d = 0; d + 1 < kv.rank && ok; ++d) ok = kv.shape[d] == 1 || kv.strides[d] % vec == 0;
      for (int d = 0; d < red[i].rank && ok; ++d) ok = red[i].shape[d] == 1 || red[i].strides[d] % vec == 0;
    }
    if (ok) return vec;
  }
  return 1;
}

// Whether reduce_finish_slices / reduce_kernel can store k's epilogue (ReduceStore): floating
// value and result, a contiguous result, inputs of its shape.
bool reduce_fuses_epilogue(const Kernel& k, const Arg& out) {
  if (!k.epilogue || !k.extra_outputs.empty() || k.epilogue_inputs.size() > kReduceEpilogueInputs) return false;
  if (!is_floating(k.node.dtype) || !is_floating(out.dtype) || out.strides != contiguous_strides(out.shape)) return false;
  if (numel(out.shape) != numel(k.node.shape)) return false;
  for (const KernelArg& x : k.epilogue_inputs)
    if (arg_of(x).shape != out.shape) return false;
  return true;
}

// k's reduction into out; with `epilogue` (reduce_fuses_epilogue) out is the kernel's output
// and the store applies k's epilogue, else out holds the node's value.
void launch_reduce(Context& ctx, const Kernel& k, const Arg& out, bool epilogue = false) {
  const auto& p = std::get<ReduceParams>(k.node.params);
  const Shape& in_shape = k.node.in_shape;
  ReduceStore store{epilogue ? k.node.dtype : out.dtype};
  std::vector<char> epi_args;  // EpiArgs: pointers, then views (one unused slot without inputs)
  if (epilogue) {
    store.epilogue = &*k.epilogue, store.out = out.dtype;
    std::vector<uint64_t> ptrs;
    std::vector<KView> views;
    for (const KernelArg& x : k.epilogue_inputs) {
      const Arg a = arg_of(x);
      store.epilogue_inputs.push_back(a.dtype);
      ptrs.push_back(a.ptr);
      views.push_back(kview(a.shape, a.strides, a.offset));
    }
    if (ptrs.empty()) ptrs.push_back(0), views.push_back(KView{});
    epi_args.resize(ptrs.size() * 8 + views.size() * sizeof(KView));
    std::memcpy(epi_args.data(), ptrs.data(), ptrs.size() * 8);
    std::memcpy(epi_args.data() + ptrs.size() * 8, views.data(), views.size() * sizeof(KView));
  } else {
    epi_args.resize(8 + sizeof(KView), 0);
  }
  const DType core = store.core;
  std::vector<DType> in_dtypes;
  for (const KernelArg& a : k.inputs) in_dtypes.push_back(a.dtype);
  std::vector<bool> reduced(in_shape.size(), false);
  for (int a : p.axes) reduced[static_cast<size_t>(a)] = true;
  int64_t R = 1;
  for (int a : p.axes) R *= in_shape[static_cast<size_t>(a)];
  const int64_t outputs = numel(out.shape);
  // Threads per output: a warp (or fewer lanes) for short rows, the whole block for long.
  int W = 256;
  if (R < 1024) {
    W = 1;
    while (W < 32 && W < R) W *= 2;
  }
  const std::string acc = acc_type(core);
  std::vector<char> params;
  auto put = [&params](const void* data, size_t bytes) {
    params.insert(params.end(), static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  };
  put(&outputs, 8);
  put(&R, 8);
  put(&out.offset, 8);
  // The reduced dims, merged where every input steps through two of them as one (a bias
  // gradient's [B, T] rows become one dim of B T): fewer divisions per element read.
  Shape rs;
  std::vector<Shape> rst(k.inputs.size());
  for (int ax : p.axes) {
    const auto d = static_cast<size_t>(ax);
    bool merge = !rs.empty();
    for (size_t i = 0; i < k.inputs.size() && merge; ++i) merge = rst[i].back() == k.inputs[i].strides[d] * in_shape[d];
    if (merge) rs.back() *= in_shape[d];
    else rs.push_back(in_shape[d]);
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      if (merge) rst[i].back() = k.inputs[i].strides[d];
      else rst[i].push_back(k.inputs[i].strides[d]);
    }
  }
  std::vector<KView> kept, red;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const KernelArg& a = k.inputs[i];
    Shape ks, kst;
    for (size_t d = 0; d < in_shape.size(); ++d)
      if (!reduced[d]) ks.push_back(in_shape[d]), kst.push_back(a.strides[d]);
    kept.push_back(kview(ks, kst, a.offset));
    red.push_back(kview(rs, rst[i], 0));
  }
  put(kept.data(), kept.size() * sizeof(KView));
  put(red.data(), red.size() * sizeof(KView));
  const bool columns = outputs >= 64 && R >= 256 && kept[0].rank >= 1 &&
                       kept[0].strides[kept[0].rank - 1] == 1 && red[0].rank >= 1 && red[0].strides[red[0].rank - 1] != 1;
  const size_t acc_bytes = std::string(acc) == "double" || std::string(acc) == "long long" ? 8 : 4;
  if (columns) {
    const int rvec = column_vector_width(k, kept, red);
    bool strided = true;
    for (const KView& r : red) strided = strided && r.rank == 1;
    const std::string s = reduce_source(*k.expr, in_dtypes, store, p.op, W, rvec, strided);
    const int64_t blocks_x = (outputs + 32 * rvec - 1) / (32 * rvec);
    // ~4 blocks of 8 warps per SM over all chunks, each warp with 16 rows or more.
    const int64_t chunks = std::clamp<int64_t>(4 * int64_t{ctx.props().multiprocessors} / blocks_x, 1,
                                               std::clamp<int64_t>(R / 128, 1, 1024));
    const int64_t per_chunk = (R + chunks - 1) / chunks;
    const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(chunks * outputs) * acc_bytes);
    Args a1;
    for (const KernelArg& a : k.inputs) a1.add(arg_of(a).ptr);
    a1.add(partial);
    a1.add_bytes(params.data(), params.size());
    a1.add(per_chunk);
    ctx.launch(ctx.function(s, "reduce_columns_vec"), static_cast<unsigned>(blocks_x), static_cast<unsigned>(chunks), 1,
               kBlock, 0, a1);
    Args a2;
    a2.add(partial).add(out.ptr);
    a2.add_bytes(params.data(), params.size());
    a2.add(chunks);
    a2.add_bytes(epi_args.data(), epi_args.size());
    ctx.launch(ctx.function(s, "reduce_finish_slices"), static_cast<unsigned>((outputs + 31) / 32), 1, 1, kBlock, 0, a2);
    return;
  }
  const std::string s = reduce_source(*k.expr, in_dtypes, store, p.op, W);
  CUfunction f = ctx.function(s, "reduce_kernel");
  Args args;
  for (const KernelArg& a : k.inputs) args.add(arg_of(a).ptr);
  args.add(out.ptr);
  args.add_bytes(params.data(), params.size());
  args.add_bytes(epi_args.data(), epi_args.size());
  ctx.launch(f, blocks_for(ctx, outputs, 256 / W), 1, 1, kBlock, 0, args);
}

// ---- axis rows: softmax, argmax/argmin, cumsum ----

struct AxisRowsParams {
  KView outer, out_outer;
  int64_t rows, len, stride, out_stride;
};
AxisRowsParams axis_rows(const Arg& x, int axis, const Arg& out) {
  AxisRowsParams p;
  Shape os, ost, oos, oost;
  const Shape out_strides = contiguous_strides(out.shape);
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (static_cast<int>(d) != axis) {
      os.push_back(x.shape[d]), ost.push_back(x.strides[d]);
      oos.push_back(out.shape[d]), oost.push_back(out_strides[d]);
    }
  p.outer = kview(os, ost, x.offset);
  p.out_outer = kview(oos, oost, out.offset);
  p.rows = numel(os);
  p.len = x.shape.empty() ? 1 : x.shape[static_cast<size_t>(axis)];
  p.stride = x.shape.empty() ? 0 : x.strides[static_cast<size_t>(axis)];
  p.out_stride = x.shape.empty() ? 0 : out_strides[static_cast<size_t>(axis)];
  return p;
}

std::string rows_source(DType t, std::initializer_list<std::pair<const char*, std::string>> extra = {}) {
  std::string d = defines({{"T", storage(t)}, {"ACC", acc_type(t)}, {"FLOATING", is_floating(t) ? "1" : "0"}});
  for (auto& [name, value] : extra) d += std::string("#define ") + name + " " + value + "\n";
  return kernel_source(d, sources::rows);
}

// A template op's epilogue fused into its kernel's store (a matmul's, a norm's): the expression
// over the op's value (rounded to the node's dtype first, as the separate pass would read it back) and
// up to four more tensors, each read through its batch view and its row/column strides.
constexpr size_t kMaxEpilogueInputs = 4;
struct EpiLaunch {
  uint64_t ptr[kMaxEpilogueInputs] = {};
  KView batch[kMaxEpilogueInputs];
  int64_t rs[kMaxEpilogueInputs] = {}, cs[kMaxEpilogueInputs] = {};
  uint64_t extra = 0;  // the extra output's element 0 (EPI_EXTRA: contiguous, the result's shape)
};

// node: the product's dtype (epilogue slot 0); inputs: the other slots' dtypes. extra: an extra
// output's expression over the same slots (Kernel::extra_outputs), stored as extra_dtype:
// epilogue_extra_apply(), and EPI_EXTRA / EPI_EXTRA_T for the kernel.
std::string epilogue_code(const expr::Expr& epilogue, DType node, const std::vector<DType>& inputs, DType out,
                          const expr::Expr* extra = nullptr, DType extra_dtype = DType::BF16) {
  expr::MapSignature sig{"epilogue", {}, out};
  sig.inputs.push_back(node);
  for (DType t : inputs) sig.inputs.push_back(t);
  std::string s = "struct EpiParams { unsigned long long ptr[4]; View batch[4]; i64 rs[4], cs[4]; unsigned long long extra; };\n";
  s += expr::emit_function(epilogue, sig, expr::Target::Cuda) + "\n";
  if (extra) {
    expr::MapSignature xsig = sig;
    xsig.name = "epilogue_extra";
    xsig.output = extra_dtype;
    s += "#define EPI_EXTRA 1\n#define EPI_EXTRA_T " + storage(extra_dtype) + "\n" +
         expr::emit_function(*extra, xsig, expr::Target::Cuda) + "\n";
  }
  // Each input's first element of batch item z, computed once per item (divisions).
  s += "__device__ __forceinline__ void epilogue_bases(i64 z, const EpiParams& e, i64 base[4]) {\n";
  for (size_t i = 0; i < inputs.size(); ++i)
    s += "  base[" + std::to_string(i) + "] = lead_offset(e.batch[" + std::to_string(i) + "], z);\n";
  s += "}\n";
  // The inputs at (gm, gn) are loaded apart from the arithmetic (epilogue_load, then
  // epilogue_apply), so a kernel can issue many loads before it needs the first value.
  std::string fields, load = "  EpiIn in;\n";
  std::string call = "epilogue(x0";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType t = inputs[i];
    const std::string n = std::to_string(i), x = "x" + std::to_string(i + 1);
    fields += std::string(" ") + compute_ctype(t) + " " + x + ";";
    load += "  in." + x + " = " +
            load_as_compute(t, "((const " + storage(t) + "*)e.ptr[" + n + "])[base[" + n + "] + gm * e.rs[" + n +
                                   "] + gn * e.cs[" + n + "]]") +
            ";\n";
    call += ", in." + x;
  }
  s += "struct EpiIn {" + fields + " };\n";
  // The inputs of W consecutive columns of one row (`count` of them in range): each input's
  // row address computed once, then stepped by its column stride. Only the inputs in MASK
  // (bit i: input i) are loaded; the others' fields are left as they are.
  std::string load4 =
      "template <int W, int MASK = 15>\n__device__ __forceinline__ void epilogue_load_row(const i64 base[4], i64 gm, "
      "i64 gn0, int count, const EpiParams& e, EpiIn (&in)[W]) {\n";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string n = std::to_string(i), x = "x" + std::to_string(i + 1), st = storage(inputs[i]);
    load4 += "  if (MASK & " + std::to_string(1 << i) + ") {\n    const " + st + "* row = (const " + st + "*)e.ptr[" + n +
             "] + (base[" + n + "] + gm * e.rs[" + n +
             "] + gn0 * e.cs[" + n + "]);\n    const i64 cs = e.cs[" + n + "];\n#pragma unroll\n" +
             "    for (int c = 0; c < W; ++c)\n      if (c < count) in[c]." + x + " = " + load_as_compute(inputs[i], "row[c * cs]") +
             ";\n  }\n";
  }
  s += load4 + "}\n";
  s += "__device__ __forceinline__ EpiIn epilogue_load(const i64 base[4], i64 gm, i64 gn, const EpiParams& e) {\n" +
       load + "  return in;\n}\n";
  s += "__device__ __forceinline__ float epilogue_apply(float acc, const EpiIn& in) {\n";
  s += "  const float x0 = cvt<float>(cvt<" + storage(node) + ">(acc));\n";
  s += "  return (float)" + call + ");\n}\n";
  if (extra) {
    s += "__device__ __forceinline__ float epilogue_extra_apply(float acc, const EpiIn& in) {\n";
    s += "  const float x0 = cvt<float>(cvt<" + storage(node) + ">(acc));\n";
    s += "  return (float)epilogue_extra" + call.substr(std::string("epilogue").size()) + ");\n}\n";
  }
  s += "__device__ __forceinline__ float epilogue_at(float acc, const i64 base[4], i64 gm, i64 gn, const EpiParams& e) {\n";
  return s + "  return epilogue_apply(acc, epilogue_load(base, gm, gn, e));\n}\n";
}

std::vector<DType> epilogue_input_types(const Kernel& k) {
  std::vector<DType> types;
  for (const KernelArg& x : k.epilogue_inputs) types.push_back(x.dtype);
  return types;
}
// A fused kernel's epilogue text, for a result of dtype `out` (and its extra output, if any).
std::string epilogue_code(const Kernel& k, DType out) {
  const ExtraOutput* x = k.extra_outputs.empty() ? nullptr : &k.extra_outputs[0];
  return epilogue_code(*k.epilogue, k.node.dtype, epilogue_input_types(k), out, x ? &x->expr : nullptr,
                       x ? x->arg.dtype : DType::BF16);
}

EpiLaunch epilogue_params(const Kernel& k) {
  EpiLaunch e;
  for (size_t i = 0; i < k.epilogue_inputs.size(); ++i) {
    const Arg a = arg_of(k.epilogue_inputs[i]);
    const size_t r = a.shape.size();
    e.ptr[i] = a.ptr;
    e.batch[i] = kview(Shape(a.shape.begin(), a.shape.end() - 2), Shape(a.strides.begin(), a.strides.end() - 2), a.offset);
    e.rs[i] = a.strides[r - 2], e.cs[i] = a.strides[r - 1];
  }
  if (!k.extra_outputs.empty()) {
    const Arg x = arg_of(k.extra_outputs[0].arg);
    e.extra = x.ptr + static_cast<uint64_t>(x.offset) * dtype_size(x.dtype);
  }
  return e;
}

// How the persistent GEMM (kernels/matmul_wgmma.cu) reads a fused epilogue's inputs: `tile`,
// the first 16-bit input of the result's shape whose rows bulk copies can read (16-byte
// aligned, contiguous), comes into the staging tile by TMA under the main loop; `cols`
// (bit i: input i), the inputs constant along rows (a bias), into registers before it; the
// `rest` from memory in the epilogue. The kernel's source carries them as defines.
struct EpiRoles {
  int tile = -1, cols = 0, rest = 0;
  std::string defines(const std::vector<DType>& types) const {
    std::string d = "#define EPI_TILE " + std::to_string(tile) + "\n#define EPI_COLS " + std::to_string(cols) +
                    "\n#define EPI_REST " + std::to_string(rest) + "\n";
    if (tile >= 0)
      d += "#define EPI_TILE_FIELD x" + std::to_string(tile + 1) + "\n#define EPI_TILE_T " +
           storage(types[static_cast<size_t>(tile)]) + "\n";
    return d;
  }
};
EpiRoles epilogue_roles(const EpiLaunch& e, const std::vector<DType>& types) {
  EpiRoles r;
  for (size_t i = 0; i < types.size(); ++i) {
    const int bit = 1 << i;
    const bool half = types[i] == DType::BF16 || types[i] == DType::F16;
    if (e.rs[i] == 0) r.cols |= bit;
    else if (r.tile < 0 && half && e.cs[i] == 1 && e.rs[i] % 8 == 0 && (e.ptr[i] + e.batch[i].offset * 2) % 16 == 0)
      r.tile = static_cast<int>(i);
    else r.rest |= bit;
  }
  return r;
}

// ---- the template ops ----

using Launcher = void (*)(Context&, const Kernel&, const Arg& out);

void softmax_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  AxisRowsParams rp = axis_rows(x, p.axis, out);
  CUfunction f = ctx.function(rows_source(x.dtype), "softmax_rows");
  Args args;
  args.add(x.ptr).add(out.ptr).add(rp).add(static_cast<int>(k.node.op == OpId::LogSoftmax));
  ctx.launch(f, blocks_for(ctx, rp.rows, kBlock / 32), 1, 1, kBlock, 0, args);
}

void argreduce_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  AxisRowsParams rp = axis_rows(x, p.axis, out);
  if (rp.rows > 0 && rp.len == 0)
    alk::fail(p.flag ? "argmax" : "argmin", k.node.loc, "cannot reduce an empty dim " + std::to_string(p.axis));
  CUfunction f = ctx.function(rows_source(x.dtype, {{"IS_MAX", p.flag ? "1" : "0"}}), "argreduce_rows");
  Args args;
  args.add(x.ptr).add(out.ptr).add(rp);
  ctx.launch(f, blocks_for(ctx, rp.rows), 1, 1, kBlock, 0, args);
}

void cumsum_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<AxisParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  AxisRowsParams rp = axis_rows(x, p.axis, out);
  CUfunction f = ctx.function(rows_source(x.dtype), "cumsum_rows");
  Args args;
  args.add(x.ptr).add(out.ptr).add(rp).add(static_cast<int>(p.flag));
  ctx.launch(f, blocks_for(ctx, rp.rows), 1, 1, kBlock, 0, args);
}

struct NormLaunchParams {
  KView x, w, b, g;
  int64_t rows, inner, out_offset;
  double eps;
};

// How the row-in-registers norm kernels (rows.cu, ROW_VEC) cover a row of `inner`: vectors
// of `vec` elements (16 bytes where every row tensor is contiguous and 16-byte aligned),
// `warps` warps per row, `items` vectors per lane. The fewest warps (no block barriers with
// one) such that a lane holds at most 24 elements (12 in f64): the backward then keeps x, g
// and two column sums per element in at most 128 registers, so 2 blocks fit an SM
// (ROW_MIN_BLOCKS; GPT-2's 768 columns: one warp, 24 elements in f32 or bf16); else 32
// elements (16 in f64) at one block per SM. None beyond that (inner > 8192; 4096 in f64):
// the older kernels run then.
struct RowPlan {
  int vec = 1, warps = 1;
  int64_t items = 1;
  int min_blocks = 1;  // blocks per SM the backward is compiled to fit
  std::string defines() const {
    return "#define ROW_VEC " + std::to_string(vec) + "\n#define ROW_WARPS " + std::to_string(warps) +
           "\n#define ROW_ITEMS " + std::to_string(items) + "\n#define ROW_MIN_BLOCKS " + std::to_string(min_blocks) +
           "\n";
  }
};
std::optional<RowPlan> row_plan(int64_t inner, DType t, std::initializer_list<const Arg*> rows) {
  const int size = static_cast<int>(dtype_size(t));
  int vec = 16 / size;
  bool aligned = inner % vec == 0;
  for (const Arg* a : rows)
    aligned = aligned && a->view().contiguous && a->offset % vec == 0 && a->ptr % 16 == 0;
  if (!aligned) vec = 1;
  const int small = size == 8 ? 12 : 24;
  for (int per_lane : {small, small * 4 / 3})
    for (int warps = 1; warps <= 8; warps *= 2) {
      const int64_t items = (inner + 32 * warps * vec - 1) / (32 * warps * vec);
      if (items * vec <= per_lane) return RowPlan{vec, warps, std::max<int64_t>(1, items), per_lane == small ? 2 : 1};
    }
  return std::nullopt;
}

// The row-in-registers norm of T = x's dtype storing TO = out's through `epilogue` (epilogue_code's text).
std::string norm_epilogue_source(const RowPlan& plan, DType x, DType out, const std::string& epilogue) {
  return plan.defines() + kernel_source(defines({{"T", storage(x)}, {"ACC", acc_type(x)}, {"FLOATING", "1"},
                                                  {"TO", storage(out)}, {"EPILOGUE", "1"}}),
                                        epilogue + std::string(sources::rows));
}

// The norm into out; with `fuse_epilogue`, k's epilogue applied in the store of the
// row-in-registers kernel (returns false, having launched nothing, where that kernel does
// not take it: the caller then runs the norm and the epilogue apart).
bool launch_norm(Context& ctx, const Kernel& k, const Arg& out, bool fuse_epilogue) {
  const auto& p = std::get<NormParams>(k.node.params);
  const bool rms = k.node.op == OpId::RmsNorm;
  const Arg x = arg_of(k.inputs[0]), w = arg_of(k.inputs[1]);
  const Arg b = rms ? w : arg_of(k.inputs[2]);
  NormLaunchParams np{x.view(), w.view(), b.view(), {}, numel(x.shape) / std::max<int64_t>(1, p.inner), p.inner,
                      out.offset, p.eps};
  Args args;
  args.add(x.ptr).add(w.ptr).add(b.ptr).add(out.ptr).add(np).add(static_cast<int>(rms));
  const std::optional<RowPlan> plan = old_path("ALK_CUDA_LN_FORWARD") ? std::nullopt : row_plan(p.inner, x.dtype, {&x, &out});
  // (The kernel keeps weight and bias in static shared memory: 2 x the span in T, <= 40 KB.)
  const auto affine_bytes = [&](const RowPlan& r) {
    return 2 * 32 * r.warps * r.vec * r.items * static_cast<int64_t>(dtype_size(x.dtype));
  };
  const bool fused = plan && np.rows > 0 && affine_bytes(*plan) <= 40 * 1024;
  std::string src;
  if (fuse_epilogue) {
    // The epilogue reads its inputs at (batch item, row, column) of the output seen as
    // [batch..., e_rows, inner]: the norm must run over the last dim alone, into a
    // contiguous output, with every input of the output's shape; its value is a float.
    auto half_or_f32 = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
    const Shape& shape = k.node.shape;
    bool takes = fused && half_or_f32(k.node.dtype) && half_or_f32(out.dtype) && shape.size() >= 2 &&
                 shape.back() == p.inner && out.shape == shape && out.strides == contiguous_strides(shape) &&
                 k.epilogue_inputs.size() <= kMaxEpilogueInputs;
    for (const KernelArg& a : k.epilogue_inputs) takes = takes && a.shape == shape;
    if (!takes) return false;
    std::vector<DType> types;
    for (const KernelArg& a : k.epilogue_inputs) types.push_back(a.dtype);
    src = norm_epilogue_source(*plan, x.dtype, out.dtype, epilogue_code(*k.epilogue, k.node.dtype, types, out.dtype));
    args.add(epilogue_params(k)).add(shape[shape.size() - 2]);
  } else if (fused) {
    src = plan->defines() + rows_source(x.dtype);
  } else {
    ctx.launch(ctx.function(rows_source(x.dtype), "layer_norm_rows"), blocks_for(ctx, np.rows, kBlock / 32), 1, 1, kBlock,
               0, args);
    return true;
  }
  // The row in registers: x read once with vector loads (a grid-stride loop over rows).
  const int64_t groups = 8 / plan->warps;
  const int64_t blocks = std::clamp<int64_t>((np.rows + groups - 1) / groups, 1, 8 * int64_t{ctx.props().multiprocessors});
  ctx.launch(ctx.function(src, "layer_norm_rows_fused"), static_cast<unsigned>(blocks), 1, 1, kBlock, 0, args);
  return true;
}

void norm_op(Context& ctx, const Kernel& k, const Arg& out) { launch_norm(ctx, k, out, false); }

void layer_norm_backward_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<NormParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]), w = arg_of(k.inputs[1]), g = arg_of(k.inputs[2]);
  // A fourth input (CudaDevice::norm_backward_adds): a gradient of x's shape that dx adds,
  // read through the params' `b` view (the forward's bias, absent here); none: x stands in.
  const bool adds = k.inputs.size() > 3;
  const Arg sum = adds ? arg_of(k.inputs[3]) : x;
  NormLaunchParams np{x.view(), w.view(), sum.view(), g.view(), numel(x.shape) / std::max<int64_t>(1, p.inner), p.inner,
                      out.offset, p.eps};
  const CUdeviceptr sum_ptr = adds ? sum.ptr : 0;
  const size_t acc_bytes = x.dtype == DType::F64 ? 8 : 4;
  // A 16-bit gradient of an f32 norm (read as it is: CudaDevice::widens_input) is widened as it loads.
  const std::string tg(storage(g.dtype));
  const std::string rows_src = g.dtype == x.dtype ? (adds ? rows_source(x.dtype, {{"NORM_SUM", "1"}}) : rows_source(x.dtype))
                               : adds             ? rows_source(x.dtype, {{"TG", tg}, {"NORM_SUM", "1"}})
                                                  : rows_source(x.dtype, {{"TG", tg}});
  const std::optional<RowPlan> plan =
      old_path("ALK_CUDA_LN_BACKWARD") ? std::nullopt : row_plan(p.inner, x.dtype, {&x, &g, &out, &sum});
  if (plan && np.rows > 0 && np.inner > 0) {
    // One pass (rows.cu layer_norm_backward_fused): x and g read once, dx written once, each
    // block's dweight/dbias column sums written once; then the blocks' sums in a fixed order.
    // As many blocks as fit the device at once (ROW_MIN_BLOCKS per SM), each looping over
    // rows: few partial sums (2 inner per block).
    const int64_t groups = 8 / plan->warps;
    const int64_t blocks = std::clamp<int64_t>((np.rows + groups - 1) / groups, 1,
                                               plan->min_blocks * int64_t{ctx.props().multiprocessors});
    const std::string src = plan->defines() + rows_src;
    const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(blocks * 2 * np.inner) * acc_bytes);
    Args a1;
    a1.add(x.ptr).add(w.ptr).add(g.ptr).add(sum_ptr).add(out.ptr).add(partial).add(np);
    ctx.launch(ctx.function(src, "layer_norm_backward_fused"), static_cast<unsigned>(blocks), 1, 1, kBlock, 0, a1);
    Args a2;
    a2.add(partial).add(out.ptr).add(np).add(blocks);
    ctx.launch(ctx.function(src, "layer_norm_backward_fused_finish"), static_cast<unsigned>((2 * np.inner + 31) / 32), 1,
               1, kBlock, 0, a2);
    return;
  }
  const std::string& src = rows_src;
  const CUdeviceptr stats = ctx.scratch(static_cast<size_t>(std::max<int64_t>(1, np.rows)) * 2 * acc_bytes);
  Args a1;
  a1.add(x.ptr).add(w.ptr).add(g.ptr).add(sum_ptr).add(out.ptr).add(stats).add(np);
  ctx.launch(ctx.function(src, "layer_norm_backward_rows"), blocks_for(ctx, np.rows, kBlock / 32), 1, 1, kBlock, 0, a1);
  // Column sums in chunks of rows (enough blocks to fill the device), then the chunks in order.
  const int64_t chunks = std::clamp<int64_t>(np.rows / 64, 1, 256);
  const int64_t rows_per_chunk = (np.rows + chunks - 1) / chunks;
  const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(chunks * 2 * std::max<int64_t>(1, np.inner)) * acc_bytes);
  Args a2;
  a2.add(x.ptr).add(g.ptr).add(stats).add(partial).add(np).add(rows_per_chunk);
  ctx.launch(ctx.function(src, "layer_norm_backward_columns"), static_cast<unsigned>((np.inner + kBlock - 1) / kBlock),
             static_cast<unsigned>(chunks), 1, kBlock, 0, a2);
  Args a3;
  a3.add(partial).add(out.ptr).add(np).add(chunks);
  ctx.launch(ctx.function(src, "layer_norm_backward_finish"), blocks_for(ctx, 2 * np.inner), 1, 1, kBlock, 0, a3);
}

// ---- index kernels ----

struct IndexLaunchParams {
  KView x, index, src;
  int64_t n;
  int32_t dim, rank;
  int64_t shape[8];
  int64_t out_strides[8];
  int64_t size;
  int64_t out_offset;
  uint64_t launch, one_bits;
};

bool has_atomic_add(DType t) { return t != DType::U8 && t != DType::Bool; }

std::string index_source(DType value, DType index_dtype) {
  return kernel_source(defines({{"E", raw_type(value)},
                                {"T", storage(value)},
                                {"ACC", acc_type(value)},
                                {"IDX", storage(index_dtype)},
                                {"HAS_ATOMIC_ADD", has_atomic_add(value) ? "1" : "0"},
                                {"INTEGER_OUT", "0"}}),
                       sources::index);
}

const std::string& op_name_of(const Kernel& k, const char* fallback) {
  static thread_local std::string s;
  s = k.node.name.empty() ? fallback : k.node.name;
  return s;
}

void fill_walk(IndexLaunchParams& ip, const Shape& shape) {
  ip.rank = static_cast<int32_t>(shape.size());
  const Shape st = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) ip.shape[d] = shape[d], ip.out_strides[d] = st[d];
}

void check_index_dtype(const Kernel& k, const char* op, DType t) {
  if (t != DType::I64 && t != DType::I32)
    alk::fail(op_name_of(k, op), k.node.loc, std::string("index must be i64 or i32, got ") + std::string(dtype_name(t)));
}

// ---- fused cross-entropy (kernels/loss.cu) ----

struct CrossEntropyLaunchParams {
  KView x, targets, packed, grad;
  int64_t rows, classes, ignore_index, out_offset;
  uint64_t launch;
};

std::string loss_source(DType logits, DType targets, DType packed, bool vec) {
  return kernel_source(defines({{"T", storage(logits)},
                                {"ACC", logits == DType::F64 ? "double" : "float"},
                                {"IDX", storage(targets)},
                                {"P", storage(packed)},
                                {"VEC", vec ? "1" : "0"}}),
                       sources::loss);
}

// Rows of whole 16-byte vectors: contiguous, C a multiple of the vector, every row aligned.
bool rows_are_vectors(const Arg& x, int64_t classes) {
  const int64_t per_vector = 16 / static_cast<int64_t>(dtype_size(x.dtype));
  return x.strides[1] == 1 && x.strides[0] == classes && classes % per_vector == 0 && x.offset % per_vector == 0 &&
         x.ptr % 16 == 0;
}

// in: logits, targets[, packed, grad]; the index-error launch names the op and its call site.
CrossEntropyLaunchParams cross_entropy_params(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), t = arg_of(k.inputs[1]);
  check_index_dtype(k, "cross_entropy", t.dtype);
  CrossEntropyLaunchParams p{};
  p.x = x.view(), p.targets = t.view();
  if (k.inputs.size() == 4) p.packed = arg_of(k.inputs[2]).view(), p.grad = arg_of(k.inputs[3]).view();
  p.rows = x.shape[0], p.classes = x.shape[1];
  p.ignore_index = std::get<CrossEntropyParams>(k.node.params).ignore_index;
  p.out_offset = out.offset;
  p.launch = ctx.add_index_launch({op_name_of(k, "cross_entropy"), "target", k.node.loc, p.classes, 1});
  return p;
}

void cross_entropy_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), t = arg_of(k.inputs[1]);
  const CrossEntropyLaunchParams p = cross_entropy_params(ctx, k, out);
  if (p.rows == 0) return;
  const std::string src = loss_source(x.dtype, t.dtype, out.dtype, rows_are_vectors(x, p.classes));
  Args args;
  args.add(x.ptr).add(t.ptr).add(out.ptr).add(ctx.index_flag()).add(p);
  ctx.launch(ctx.function(src, "cross_entropy_rows"), static_cast<unsigned>(std::min<int64_t>(p.rows, 1 << 20)), 1, 1,
             kBlock, 0, args);
}

void cross_entropy_backward_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg x = arg_of(k.inputs[0]), t = arg_of(k.inputs[1]), packed = arg_of(k.inputs[2]), g = arg_of(k.inputs[3]);
  const CrossEntropyLaunchParams p = cross_entropy_params(ctx, k, out);
  if (p.rows == 0) return;
  const bool vec = rows_are_vectors(x, p.classes) && out.offset % (16 / static_cast<int64_t>(dtype_size(out.dtype))) == 0 &&
                   out.ptr % 16 == 0;
  const std::string src = loss_source(x.dtype, t.dtype, packed.dtype, vec);
  Args args;
  args.add(x.ptr).add(t.ptr).add(packed.ptr).add(g.ptr).add(out.ptr).add(ctx.index_flag()).add(p);
  ctx.launch(ctx.function(src, "cross_entropy_backward_rows"), static_cast<unsigned>(std::min<int64_t>(p.rows, 1 << 20)),
             1, 1, kBlock, 0, args);
}

void gather_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Arg x = arg_of(k.inputs[0]), index = arg_of(k.inputs[1]);
  check_index_dtype(k, "gather", index.dtype);
  IndexLaunchParams ip{};
  ip.x = x.view(), ip.index = index.view(), ip.n = numel(out.shape), ip.dim = dim, ip.size = x.shape[static_cast<size_t>(dim)];
  ip.out_offset = out.offset;
  fill_walk(ip, out.shape);
  ip.launch = ctx.add_index_launch({op_name_of(k, "gather"), "index", k.node.loc, ip.size, dim});
  Args args;
  args.add(x.ptr).add(index.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(x.dtype, index.dtype), "gather_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock, 0, args);
}

void index_select_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Arg x = arg_of(k.inputs[0]), index = arg_of(k.inputs[1]);
  check_index_dtype(k, "index_select", index.dtype);
  IndexLaunchParams ip{};
  ip.x = x.view(), ip.index = index.view(), ip.n = numel(out.shape), ip.dim = dim, ip.size = x.shape[static_cast<size_t>(dim)];
  ip.out_offset = out.offset;
  fill_walk(ip, out.shape);
  ip.launch = ctx.add_index_launch({op_name_of(k, "index_select"), "index", k.node.loc, ip.size, dim});
  Args args;
  args.add(x.ptr).add(index.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(x.dtype, index.dtype), "index_select_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock,
             0, args);
}

// dst view = src view (same shape), moving raw elements.
void copy_view(Context& ctx, const Arg& src, const Arg& dst) {
  const int64_t n = numel(src.shape);
  if (n == 0) return;
  Args args;
  args.add(src.ptr).add(dst.ptr).add(src.view()).add(dst.view()).add(n);
  ctx.launch(ctx.function(index_source(src.dtype, DType::I64), "copy_view_kernel"), blocks_for(ctx, n), 1, 1, kBlock, 0, args);
}
Arg contiguous_out(const Arg& out) { return Arg{out.ptr, out.dtype, out.shape, contiguous_strides(out.shape), out.offset}; }

void scatter_add_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Arg x = arg_of(k.inputs[0]), index = arg_of(k.inputs[1]), src = arg_of(k.inputs[2]);
  check_index_dtype(k, "scatter_add", index.dtype);
  copy_view(ctx, x, contiguous_out(out));
  IndexLaunchParams ip{};
  ip.index = index.view(), ip.src = src.view(), ip.n = numel(src.shape), ip.dim = dim;
  ip.size = out.shape[static_cast<size_t>(dim)], ip.out_offset = out.offset;
  fill_walk(ip, src.shape);
  const Shape ost = contiguous_strides(out.shape);
  for (size_t d = 0; d < out.shape.size(); ++d) ip.out_strides[d] = ost[d];
  ip.launch = ctx.add_index_launch({op_name_of(k, "scatter_add"), "index", k.node.loc, ip.size, dim});
  Args args;
  args.add(src.ptr).add(index.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(out.dtype, index.dtype), "scatter_add_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock,
             0, args);
}

void one_hot_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg ids = arg_of(k.inputs[0]);
  if (ids.dtype != DType::I64 && ids.dtype != DType::I32)
    alk::fail(op_name_of(k, "one_hot"), k.node.loc, "ids must be i64 or i32, got " + std::string(dtype_name(ids.dtype)));
  IndexLaunchParams ip{};
  ip.index = ids.view(), ip.n = numel(out.shape), ip.size = std::get<OneHotParams>(k.node.params).num_classes;
  ip.out_offset = out.offset, ip.one_bits = bits_of(out.dtype, 1.0);
  ip.launch = ctx.add_index_launch(
      {op_name_of(k, "one_hot"), "class id", k.node.loc, ip.size, static_cast<int64_t>(ids.shape.size())});
  if (ip.size <= 0) return;
  Args args;
  args.add(ids.ptr).add(out.ptr).add(ctx.index_flag()).add(ip);
  ctx.launch(ctx.function(index_source(out.dtype, ids.dtype), "one_hot_kernel"), blocks_for(ctx, ip.n), 1, 1, kBlock, 0, args);
}

void tri_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<TriParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  const size_t r = x.shape.size();
  const int64_t n = numel(out.shape), rows = r >= 2 ? x.shape[r - 2] : 1, cols = r >= 1 ? x.shape[r - 1] : 1;
  Args args;
  args.add(x.ptr).add(out.ptr).add(x.view()).add(n).add(rows).add(cols).add(p.k).add(static_cast<int>(p.upper)).add(out.offset);
  ctx.launch(ctx.function(index_source(x.dtype, DType::I64), "tri_kernel"), blocks_for(ctx, n), 1, 1, kBlock, 0, args);
}

struct PadLaunchParams {
  KView x;
  int64_t n, out_offset;
  int32_t rank;
  int64_t out_shape[8], before[8];
  uint64_t value_bits;
};
void pad_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<PadParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  PadLaunchParams pp{};
  pp.x = x.view(), pp.n = numel(out.shape), pp.out_offset = out.offset, pp.rank = static_cast<int32_t>(out.shape.size());
  for (size_t d = 0; d < out.shape.size(); ++d) pp.out_shape[d] = out.shape[d], pp.before[d] = p.pads[2 * d];
  pp.value_bits = bits_of(out.dtype, p.value);
  Args args;
  args.add(x.ptr).add(out.ptr).add(pp);
  ctx.launch(ctx.function(index_source(x.dtype, DType::I64), "pad_kernel"), blocks_for(ctx, pp.n), 1, 1, kBlock, 0, args);
}

void concat_op(Context& ctx, const Kernel& k, const Arg& out) {
  const int dim = std::get<IndexParams>(k.node.params).dim;
  const Shape ost = contiguous_strides(out.shape);
  int64_t at = 0;
  for (const KernelArg& ka : k.inputs) {
    const Arg x = arg_of(ka);
    copy_view(ctx, x, Arg{out.ptr, out.dtype, x.shape, ost, out.offset + at * ost[static_cast<size_t>(dim)]});
    at += x.shape[static_cast<size_t>(dim)];
  }
}

void slice_scatter_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<SliceScatterParams>(k.node.params);
  const Arg g = arg_of(k.inputs[0]);
  const size_t esize = dtype_size(out.dtype);
  ctx.memset0(out.ptr + static_cast<CUdeviceptr>(out.offset) * esize, static_cast<size_t>(numel(out.shape)) * esize);
  Shape st = contiguous_strides(out.shape);
  const int64_t start_off = p.start * st[static_cast<size_t>(p.dim)];
  st[static_cast<size_t>(p.dim)] *= p.step;
  copy_view(ctx, g, Arg{out.ptr, out.dtype, g.shape, st, out.offset + start_off});
}

struct ConvLaunchParams {
  KView x;
  int64_t n, out_offset;
  int64_t channels, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  uint64_t pad_bits;
};
ConvLaunchParams conv_params(const UnfoldParams& p, const Arg& x, const Arg& out, int64_t channels) {
  ConvLaunchParams c{};
  c.x = x.view(), c.n = numel(out.shape), c.out_offset = out.offset, c.channels = channels;
  c.h = p.h, c.w = p.w, c.kh = p.kh, c.kw = p.kw, c.sh = p.sh, c.sw = p.sw, c.ph = p.ph, c.pw = p.pw, c.dh = p.dh, c.dw = p.dw;
  c.oh = (p.h + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  c.ow = (p.w + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  c.pad_bits = bits_of(out.dtype, p.pad_value);
  return c;
}
void unfold_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const Arg x = arg_of(k.inputs[0]);
  ConvLaunchParams c = conv_params(p, x, out, x.shape[1]);
  Args args;
  args.add(x.ptr).add(out.ptr).add(c);
  ctx.launch(ctx.function(index_source(x.dtype, DType::I64), "unfold_kernel"), blocks_for(ctx, c.n), 1, 1, kBlock, 0, args);
}
void fold_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<UnfoldParams>(k.node.params);
  const Arg cols = arg_of(k.inputs[0]);
  ConvLaunchParams c = conv_params(p, cols, out, out.shape[1]);
  Args args;
  args.add(cols.ptr).add(out.ptr).add(c);
  ctx.launch(ctx.function(index_source(cols.dtype, DType::I64), "fold_kernel"), blocks_for(ctx, c.n), 1, 1, kBlock, 0, args);
}

std::string random_source(DType t) {
  const bool integer_out = !is_floating(t) && t != DType::Bool;
  return kernel_source(defines({{"E", raw_type(t)},
                                {"T", storage(t)},
                                {"ACC", acc_type(t)},
                                {"IDX", "long long"},
                                {"HAS_ATOMIC_ADD", "0"},
                                {"INTEGER_OUT", integer_out ? "1" : "0"}}),
                       sources::index);
}

void random_op(Context& ctx, const Kernel& k, const Arg& out) {
  const auto& p = std::get<RandomParams>(k.node.params);
  const int64_t ilow = static_cast<int64_t>(p.low), ihigh = static_cast<int64_t>(p.high);
  if (p.dist == 2 && ihigh <= ilow)
    alk::fail("random", k.node.loc, "integer range [" + std::to_string(ilow) + ", " + std::to_string(ihigh) + ") is empty");
  const int64_t n = numel(out.shape);
  const std::string src = random_source(out.dtype);
  Args args;
  args.add(out.ptr).add(n).add(out.offset).add(p.dist).add(p.seed).add(p.offset).add(p.low).add(p.high).add(ilow).add(ihigh);
  ctx.launch(ctx.function(src, "random_kernel"), blocks_for(ctx, n), 1, 1, kBlock, 0, args);
}

// ---- matmul ----

struct MatmulLaunchParams {
  KView a_batch, b_batch;
  int64_t a_rs, a_cs, b_rs, b_cs;
  int64_t M, N, K, batch, out_offset;
  int32_t batch_rank;
};

std::string matmul_source(DType a, DType b, DType out) {
  return kernel_source(
      defines({{"TA", storage(a)}, {"TB", storage(b)}, {"TO", storage(out)}, {"ACC", acc_type(out)}}), sources::matmul);
}

// The tensor-core kernel's operand type ("bf16", "f16", "tf32"), or nullptr for the CUDA-core
// kernel: 16-bit float operands of one dtype, or f32 when TF32 is allowed
// (float32_matmul_precision() "high", as torch.backends.cuda.matmul.allow_tf32).
const char* mma_kind(const Arg& a, const Arg& b, DType out) {
  if (a.dtype != b.dtype || !is_floating(out)) return nullptr;
  if (a.dtype == DType::BF16) return "bf16";
  if (a.dtype == DType::F16) return "f16";
  if (a.dtype == DType::F32 && float32_matmul_precision() == "high") return "tf32";
  return nullptr;
}

// The tensor-core GEMM's kernel and block shape. On sm_90a: kernels/matmul_wgmma.cu,
// 128 x bn blocks (bn 256, or 128 for narrow N) and a `stages`-deep ring. Elsewhere
// kernels/matmul_tc.cu (mma.sync): wn m16n8 tiles per warp along N (block width 32 wn);
// wide blocks halve the shared-memory reads per mma, narrow ones keep more blocks for small
// N. ALK_CUDA_GEMM=wgmmatma|wgmmatma128|wgmmatma192|wgmmatmap|wgmmatmapp|wgmma256|wgmma128|wide|narrow forces one
// (benchmarks; wgmma only on sm_90a; the bulk-copy kernels only where tma_fits() holds, else
// the cp.async one of the same width).
struct TcShape {
  int wn, stages;  // wn: the block's width in 32-column units (mma.sync: m16n8 tiles per warp)
  bool wgmma = false;
  int wait_depth = 1, min_blocks = 1;  // wgmma: groups in flight per K step, blocks per SM
  bool tma = false;                    // wgmma fed by the bulk tensor copies (matmul_wgmma_tma)
  bool persistent = false;             // tma: one block per SM looping over tiles (16-bit results, no split-K)
  bool pingpong = false;               // persistent: each consumer warpgroup owns whole tiles, in turn
  int consumers = 2;                   // tma, per tile: consumer warpgroups, 64 rows each (2 or 3)
  int bn() const { return 32 * wn; }
  int bm() const { return 64 * consumers; }
};
constexpr TcShape kWgmmaWide{8, 4, true, 1, 1}, kWgmmaNarrow{4, 3, true, 0, 2}, kWgmmaTma{8, 4, true, 1, 1, true},
                  kWgmmaTmaPair{4, 3, true, 1, 2, true},  // 128 x 128 tiles, two blocks per SM
                  kWgmmaTmaPersistent{8, 3, true, 1, 1, true, true},
                  kWgmmaTmaPingpong{4, 4, true, 1, 1, true, true, true};  // 128 x 128 tiles, one per warpgroup
// 192 x 192 tiles (three consumer warpgroups) for the weight gradients' K slices (wave_slices).
constexpr TcShape kWgmmaTma192{6, 4, true, 1, 1, true, false, false, 3};
TcShape tc_shape(const Context& ctx, int64_t N, int64_t K) {
  const char* force = std::getenv("ALK_CUDA_GEMM");
  const std::string_view f = force ? force : "";
  const DeviceProps& d = ctx.props();
  if (d.cc_major == 9 && d.cc_minor == 0 && (f.empty() || f.substr(0, 5) == "wgmma")) {
    if (f == "wgmma256") return kWgmmaWide;
    if (f == "wgmma128") return kWgmmaNarrow;
    if (f == "wgmmatma") return kWgmmaTma;
    if (f == "wgmmatma128") return kWgmmaTmaPair;
    if (f == "wgmmatmap") return kWgmmaTmaPersistent;
    if (f == "wgmmatmapp") return kWgmmaTmaPingpong;
    if (f == "wgmmatma192") return kWgmmaTma192;
    if (N <= 128) return kWgmmaNarrow;
    // Short K (GPT-2's K = 768 products: 12 steps of 64 per tile): a tile's pipeline fill and
    // epilogue are a large share of its time. Two 128 x 128 blocks per SM overlap one's
    // epilogue with the other's main loop (in the GPT-2 step: the fc products 309 -> 248 us);
    // very wide N (the LM head) does better persistent (its ring keeps streaming across
    // tiles: 2.77 -> 2.38 ms). Long K keeps the 128 x 256 per-tile kernel. (bench/cuda/NOTES.md, v19.)
    // The persistent ping-pong kernel (each consumer warpgroup owns whole 128 x 128 tiles, one
    // storing while the other multiplies) does better still where its epilogue is arithmetic
    // on shared memory (inputs by TMA or in registers, results out by TMA; NOTES.md, tenth
    // session); ALK_CUDA_SHORT_K=old keeps the two-block kernel.
    if (K <= 1024) return N > 4096 ? kWgmmaTmaPersistent : old_path("ALK_CUDA_SHORT_K") ? kWgmmaTmaPair : kWgmmaTmaPingpong;
    return kWgmmaTma;
  }
  const bool wide = !f.empty() && f.substr(0, 5) != "wgmma" ? f == "wide" : N > 128;
  return wide ? TcShape{8, 4} : TcShape{4, 3};
}

// The one wgmma instruction of a 64 x bn slab (kernels/matmul_wgmma.cu's wgmma_tile): its
// bn / 2 accumulators per thread are listed one by one, so the list is generated here.
std::string wgmma_tile_code(int bn, const char* kind, int a_kmajor, int b_kmajor) {
  const int regs = bn / 2;
  std::string list, operands;
  for (int i = 0; i < regs; ++i) {
    list += (i ? ", %" : "%") + std::to_string(i);
    operands += std::string(i ? ", " : "") + "\"+f\"(d[" + std::to_string(i) + "])";
  }
  const std::string n = std::to_string(regs);
  return "__device__ __forceinline__ void wgmma_tile(float (&d)[" + n + "], u64 da, u64 db) {\n"
         "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + std::to_string(regs + 2) +
         ", 0;\\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(bn) + "k16.f32." + kind + "." + kind + " {" +
         list + "}, %" + n + ", %" + std::to_string(regs + 1) + ", p, 1, 1, " + (a_kmajor ? "0" : "1") + ", " +
         (b_kmajor ? "0" : "1") + ";\\n}\\n\"\n    : " + operands + "\n    : \"l\"(da), \"l\"(db), \"r\"(1));\n}\n";
}

// The same with A from registers (four bf16x2 a thread: the m16n8k16 A fragment of the
// warp's 16 rows), B from shared memory: wgmma_tile_ra(d, a, db).
std::string wgmma_tile_ra_code(int bn, const char* kind, int b_kmajor) {
  const int regs = bn / 2;
  std::string list, operands, a;
  for (int i = 0; i < regs; ++i) {
    list += (i ? ", %" : "%") + std::to_string(i);
    operands += std::string(i ? ", " : "") + "\"+f\"(d[" + std::to_string(i) + "])";
  }
  for (int i = 0; i < 4; ++i) a += (i ? ", %" : "%") + std::to_string(regs + i);
  return "__device__ __forceinline__ void wgmma_tile_ra(float (&d)[" + std::to_string(regs) +
         "], const unsigned a[4], u64 db) {\n"
         "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + std::to_string(regs + 5) +
         ", 0;\\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(bn) + "k16.f32." + kind + "." + kind + " {" + list +
         "}, {" + a + "}, %" + std::to_string(regs + 4) + ", p, 1, 1, " + (b_kmajor ? "0" : "1") + ";\\n}\\n\"\n    : " +
         operands + "\n    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db), \"r\"(1));\n}\n";
}

// `epilogue`: empty, or the text epilogue_code() writes (EpiParams and epilogue_at()).
// stream_k: the source of matmul_wgmma_tma_stream_k and matmul_stream_k_sum (stream_k_matmul).
std::string matmul_tc_source(DType t, DType out, const char* kind, int a_kmajor, int b_kmajor, TcShape shape,
                             const std::string& epilogue = {}, bool stream_k = false) {
  const std::string defs = defines({{"TA", storage(t)},
                                     {"TO", storage(out)},
                                     {"MMA_TYPE", std::string("\"") + kind + "\""},
                                     {"A_KMAJOR", std::to_string(a_kmajor)},
                                     {"B_KMAJOR", std::to_string(b_kmajor)},
                                     {"WN", std::to_string(shape.wn)},
                                     {"BN", std::to_string(shape.bn())},
                                     {"STAGES", std::to_string(shape.stages)},
                                     {"WAIT_DEPTH", std::to_string(shape.wait_depth)},
                                     {"MIN_BLOCKS", std::to_string(shape.min_blocks)},
                                     {"TMA", shape.tma ? "1" : "0"},
                                     {"PERSIST", shape.persistent ? "1" : "0"},
                                     {"PINGPONG", shape.pingpong ? "1" : "0"},
                                     {"STREAMK", stream_k ? "1" : "0"},
                                     {"CONSUMERS", std::to_string(shape.consumers)},
                                     {"EPILOGUE", epilogue.empty() ? "0" : "1"}});
  std::string body = epilogue + std::string(sources::matmul_shared);
  if (shape.wgmma) body += wgmma_tile_code(shape.bn(), kind, a_kmajor, b_kmajor) + std::string(sources::matmul_wgmma);
  else body += std::string(sources::matmul_tc);
  return kernel_source(defs, body);
}
const char* tc_entry(TcShape shape) {
  return shape.persistent ? "matmul_wgmma_tma_persistent" : shape.tma ? "matmul_wgmma_tma" : shape.wgmma ? "matmul_wgmma" : "matmul_tc";
}

// The ring's bytes. mma.sync: BM = 128, BN = 32 WN, BK = 32, rows padded by 8 elements;
// wgmma: BM = 128, BK = 64, unpadded (swizzled) rows, plus 1 KiB to align the ring.
int matmul_tc_shared_bytes(int a_kmajor, int b_kmajor, TcShape shape) {
  const int bn = shape.bn();
  // The persistent kernel: the ring, its barriers (in a 1 KiB slot, so the staging tiles after
  // them stay aligned) and the staging tiles of 16-bit results (one per warpgroup in ping-pong).
  if (shape.persistent)
    return shape.stages * (128 + bn) * 64 * 2 + 2048 + (shape.pingpong ? 2 : 1) * 128 * bn * 2;
  if (shape.wgmma) return shape.stages * (shape.bm() + bn) * 64 * 2 + 1024;
  const int a = a_kmajor ? 128 * (32 + 8) : 32 * (128 + 8), b = b_kmajor ? bn * (32 + 8) : 32 * (bn + 8);
  return shape.stages * (a + b) * 2;
}

// matmul_wgmma_tma's tensor map of one operand (kernels/matmul_wgmma.cu): `rows` rows of
// `inner` elements, `row_stride` elements apart, read in boxes of 64 x box_rows with the
// 128-byte swizzle (zero-filled past the edges).
struct alignas(64) TensorMap {
  uint64_t bits[16];
};
// `first`: the address of element 0 (16-byte aligned, as the row stride's bytes must be).
TensorMap tensor_map(DType t, uint64_t first, uint64_t inner, uint64_t rows, int64_t row_stride, unsigned box_rows) {
  TensorMap map{};
  const uint64_t dims[2] = {inner, rows}, strides[1] = {static_cast<uint64_t>(row_stride) * 2};
  const unsigned box[2] = {64, box_rows}, element_strides[2] = {1, 1};
  constexpr int kBf16 = 9, kF16 = 6, kInterleaveNone = 0, kSwizzle128 = 3, kL2Promote128 = 2, kFillZero = 0;
  check(driver()->cuTensorMapEncodeTiled(&map, t == DType::BF16 ? kBf16 : kF16, 2, reinterpret_cast<void*>(first), dims,
                                         strides, box, element_strides, kInterleaveNone, kSwizzle128, kL2Promote128,
                                         kFillZero),
        "cuTensorMapEncodeTiled");
  return map;
}
TensorMap tensor_map(const Arg& x, uint64_t inner, uint64_t rows, int64_t row_stride, unsigned box_rows) {
  return tensor_map(x.dtype, x.ptr + static_cast<uint64_t>(x.offset) * 2, inner, rows, row_stride, box_rows);
}
// Whether matmul_wgmma_tma takes a product: one matrix at least one box in each dimension
// (smaller ones go to matmul_wgmma). Its split-K slices are whole 64-wide K steps, the last
// one zero-filled past K by the copies (split_k_matmul).
bool tma_fits(const MatmulLaunchParams& mp, TcShape shape) {
  return mp.batch == 1 && mp.M >= shape.bm() && mp.N >= shape.bn() && mp.K >= 64;
}
// The bulk-copy kernels' first two arguments: the tensor maps of A and B (boxes as
// kernels/matmul_wgmma.cu's tma_load_stage reads them), `k_extent` long in K.
void add_operand_maps(Args& args, const Arg& a, const Arg& b, const MatmulLaunchParams& mp, int la, int lb, int64_t bn,
                      int64_t k_extent, unsigned bm = 128) {
  const uint64_t k_total = static_cast<uint64_t>(k_extent);
  args.add(la ? tensor_map(a, k_total, mp.M, mp.a_rs, bm) : tensor_map(a, mp.M, k_total, mp.a_cs, 64));
  args.add(lb ? tensor_map(b, k_total, mp.N, mp.b_cs, static_cast<unsigned>(bn)) : tensor_map(b, mp.N, k_total, mp.b_rs, 64));
}
// Whether the persistent kernel can store a product's result: 16-bit, one matrix (bulk
// copies out of the staging tile: rows of whole 16-byte vectors from a 16-byte boundary).
bool persistent_fits(const Arg& out, const MatmulLaunchParams& mp) {
  return dtype_size(out.dtype) == 2 && mp.batch == 1 && mp.N % 8 == 0 && (out.ptr + static_cast<uint64_t>(mp.out_offset) * 2) % 16 == 0;
}
// Launches matmul_wgmma_tma over `slices` K slices of mp.K each (1: the whole product) of
// operands `k_extent` long in K (reads past it are zeros). The persistent kernel also takes
// the tensor maps of the result and of the epilogue input `tile_input` (EpiRoles::tile).
void launch_tma(Context& ctx, const Arg& a, const Arg& b, CUdeviceptr out, DType out_dtype, const MatmulLaunchParams& mp,
                int la, int lb, TcShape shape, int slices, int64_t k_extent, const std::string& src, const Kernel* epilogue,
                int tile_input = -1) {
  const int64_t bn = shape.bn();
  const EpiLaunch epi = epilogue ? epilogue_params(*epilogue) : EpiLaunch{};
  Args args;
  add_operand_maps(args, a, b, mp, la, lb, bn, k_extent, static_cast<unsigned>(shape.bm()));
  if (shape.persistent) {
    const uint64_t m = static_cast<uint64_t>(mp.M), n = static_cast<uint64_t>(mp.N);
    const TensorMap tout = tensor_map(out_dtype, out + static_cast<uint64_t>(mp.out_offset) * 2, n, m, mp.N, 128);
    TensorMap tin = tout;  // unread without a tile input
    if (tile_input >= 0) {
      const size_t i = static_cast<size_t>(tile_input);
      tin = tensor_map(epilogue->epilogue_inputs[i].dtype, epi.ptr[i] + static_cast<uint64_t>(epi.batch[i].offset) * 2, n,
                       m, epi.rs[i], 128);
    }
    args.add(tout).add(tin);
    if (epilogue && !epilogue->extra_outputs.empty()) {  // the extra output's map (EPI_EXTRA), as the result's
      const KernelArg& x = epilogue->extra_outputs.at(0).arg;
      args.add(tensor_map(x.dtype, epi.extra, n, m, mp.N, 128));
    }
    args.add(mp);
    if (epilogue) args.add(epi);
    const int shared = matmul_tc_shared_bytes(la, lb, shape);
    const int64_t tiles = ((mp.M + 127) / 128) * ((mp.N + bn - 1) / bn);
    ctx.launch(ctx.function(src, tc_entry(shape), shared),
               static_cast<unsigned>(std::min<int64_t>(tiles, std::max(1, ctx.props().multiprocessors))), 1, 1, 384,
               static_cast<unsigned>(shared), args);
    return;
  }
  args.add(out).add(mp);
  if (epilogue) args.add(epi);
  const int shared = matmul_tc_shared_bytes(la, lb, shape) + 2 * shape.stages * 8;  // + the ring's barriers
  ctx.launch(ctx.function(src, tc_entry(shape), shared), static_cast<unsigned>((mp.N + bn - 1) / bn),
             static_cast<unsigned>((mp.M + shape.bm() - 1) / shape.bm()), static_cast<unsigned>(slices),
             shape.min_blocks > 1 ? 288 : 128 * (shape.consumers + 1),
             static_cast<unsigned>(shared),
             args);
}

}  // namespace

WaveSlices wave_slices(int64_t m, int64_t n, int64_t k, int64_t sms, bool only_192) {
  const int64_t steps = (k + 63) / 64;
  WaveSlices best;
  int64_t best_work = 0;
  for (const auto& [bm, bn] : {std::pair<int64_t, int64_t>{192, 192}, {128, 256}}) {
    if (m < bm || n < bn || k < 64 || (only_192 && bm != 192)) continue;
    const int64_t tiles = ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
    for (int64_t s = 1; tiles * s <= sms; ++s) {
      const int64_t work = (steps + s - 1) / s * bm * bn;
      if (tiles * s * 5 < sms * 4 || steps / s < 8 || (best.slices && work >= best_work)) continue;
      best = WaveSlices{static_cast<int>(bm), static_cast<int>(bn), static_cast<int>(s)}, best_work = work;
    }
  }
  return best;
}

int split_k_slices(int64_t tiles, int64_t k, int64_t bn, int64_t mn, int64_t sms) {
  const int64_t steps = (k + 63) / 64;
  // A 128 x BN x 64 step at ~80% of an SM's ~7 TFLOP/s; ~5 us to fill a block and store its
  // f32 slice; ~3 TB/s for the slices' bytes; ~4 us for the summing launch.
  const double step_us = 128.0 * static_cast<double>(bn) * 64 * 2 / 5.7e6, block_us = 5;
  const double mn_bytes = static_cast<double>(mn) * 4;
  auto estimate = [&](int s) {
    const int64_t per_slice = (steps + s - 1) / s, waves = (tiles * s + sms - 1) / sms;
    const double sum_us = s > 1 ? 2 * s * mn_bytes / 3e6 + 4 : 0;
    return static_cast<double>(waves) * (static_cast<double>(per_slice) * step_us + block_us) + sum_us;
  };
  int best = 1;
  for (int s = 2; s <= 16; ++s) {
    const int64_t per_slice = (steps + s - 1) / s;
    if (per_slice < 8 || per_slice * (s - 1) >= steps) continue;  // short slices; an empty last slice
    if (estimate(s) < estimate(best)) best = s;
  }
  return best;
}

namespace {

// Split-K for products with few output tiles and a long K (the weight gradients dY^T x of a
// training step: [768, 16384] x [16384, 768] fills 18 blocks of 132 SMs): K is cut into
// `splits` equal slices run as a batch of products into an f32 workspace, then summed.
//
// On the bulk-copy kernel (one block per SM, any number of slices of whole K steps) the count
// comes from a model of the time, since wave quantization decides it: GPT-2's dW products
// ([768, 16384] x [16384, 3072]: 72 tiles) took 2 slices, 144 blocks, two waves of which the
// second held 12 blocks. Time ~ waves x (steps per slice x a step's time + a block's fill
// and f32 store) + the slices' round trip through memory (written, then read by the sum).
int split_k(const Context& ctx, const MatmulLaunchParams& mp, TcShape shape) {
  if (mp.batch != 1 || shape.pingpong) return 1;  // ping-pong: short K (tc_shape), not worth slicing
  const int64_t tiles = ((mp.M + shape.bm() - 1) / shape.bm()) * ((mp.N + shape.bn() - 1) / shape.bn());
  const int64_t sms = std::max(1, ctx.props().multiprocessors);
  if (shape.tma && shape.min_blocks == 1 && tma_fits(mp, shape) && !old_path("ALK_CUDA_SPLIT_K"))
    return split_k_slices(tiles, mp.K, shape.bn(), mp.M * mp.N, sms);
  int splits = 1;
  // Double while the grid is short of one block per SM and each slice keeps >= 1024 of K in
  // whole 16-byte vectors.
  while (tiles * splits < sms && mp.K % (splits * 2 * 8) == 0 && mp.K / (splits * 2) >= 1024) splits *= 2;
  return splits;
}

// Stream-K on the bulk-copy kernel (kernels/matmul_wgmma.cu): the tiles' K steps in equal
// ranges, one block per SM, each range's (at most two) pieces into an f32 workspace, then
// summed per tile. Unlike equal slices per tile it leaves no partial last wave (GPT-2's fc
// dW: 72 tiles x 256 steps = 139.6 steps a block on 132 SMs, against 3 slices of 85 steps
// in 1.6 waves). With `epilogue` the sum applies it (a weight gradient's cast to f32 then
// costs no pass of its own). False where it does not apply: the caller slices K evenly.
bool stream_k_matmul(Context& ctx, const Arg& a, const Arg& b, const Arg& out, const MatmulLaunchParams& mp,
                     const char* kind, int la, int lb, TcShape shape, const Kernel* epilogue = nullptr) {
  const char* force = std::getenv("ALK_CUDA_SPLIT_K");  // "slices", "old": equal slices per tile
  if (force && *force) return false;
  if (!shape.tma || shape.persistent || shape.min_blocks != 1 || shape.consumers != 2 || !tma_fits(mp, shape) ||
      mp.N % 8 != 0)
    return false;
  const int64_t bn = shape.bn(), tiles = ((mp.M + 127) / 128) * ((mp.N + bn - 1) / bn), ktiles = (mp.K + 63) / 64;
  const int64_t steps = tiles * ktiles;
  // At least 8 steps a block; no range longer than a tile's K (so at most two pieces a block).
  const int64_t blocks = std::min<int64_t>(std::max(1, ctx.props().multiprocessors), steps / 8);
  if (blocks < tiles || (steps + blocks - 1) / blocks > ktiles) return false;
  const CUdeviceptr ws = ctx.scratch(static_cast<size_t>(2 * blocks * 128 * bn) * 4);
  const std::string src = matmul_tc_source(a.dtype, out.dtype, kind, la, lb, shape, {}, true);
  Args args;
  add_operand_maps(args, a, b, mp, la, lb, bn, mp.K);
  args.add(ws).add(mp);
  const int shared = matmul_tc_shared_bytes(la, lb, shape) + 2 * shape.stages * 8;  // + the ring's barriers
  ctx.launch(ctx.function(src, "matmul_wgmma_tma_stream_k", shared), static_cast<unsigned>(blocks), 1, 1, 384,
             static_cast<unsigned>(shared), args);
  // The sum's own source carries the epilogue: the products' kernel is the same with or without one.
  std::string sum_src = src;
  Args sum;
  sum.add(ws).add(out.ptr).add(mp).add(static_cast<int32_t>(blocks));
  if (epilogue) {
    sum_src = matmul_tc_source(a.dtype, out.dtype, kind, la, lb, shape, epilogue_code(*epilogue, out.dtype), true);
    sum.add(epilogue_params(*epilogue));
  }
  ctx.launch(ctx.function(sum_src, "matmul_stream_k_sum"), blocks_for(ctx, mp.M * mp.N / 4), 1, 1, kBlock, 0, sum);
  return true;
}

// With `epilogue` the sum applies it; `even`: slices even where stream-K would apply (wave_slices).
void split_k_matmul(Context& ctx, const Arg& a, const Arg& b, const Arg& out, const MatmulLaunchParams& whole,
                    const char* kind, int la, int lb, TcShape shape, int splits, bool even,
                    const Kernel* epilogue = nullptr) {
  if (!even && stream_k_matmul(ctx, a, b, out, whole, kind, la, lb, shape, epilogue)) return;
  // Whole 64-wide steps a slice on the bulk-copy kernel (the last slice's overrun reads
  // zeros); K / splits elsewhere (split_k divides K evenly there).
  const int64_t slice = shape.tma ? ((whole.K + 63) / 64 + splits - 1) / splits * 64 : whole.K / splits;
  const int64_t mn = whole.M * whole.N;
  MatmulLaunchParams mp = whole;
  mp.K = slice, mp.batch = splits, mp.batch_rank = 1, mp.out_offset = 0;
  mp.a_batch = kview({splits}, {slice * whole.a_cs}, a.offset);  // slice s starts at column s * slice of a
  mp.b_batch = kview({splits}, {slice * whole.b_rs}, b.offset);  // and at row s * slice of b
  const CUdeviceptr partial = ctx.scratch(static_cast<size_t>(splits * mn) * 4);
  const std::string src = matmul_tc_source(a.dtype, DType::F32, kind, la, lb, shape);
  if (shape.tma) {
    launch_tma(ctx, a, b, partial, DType::F32, mp, la, lb, shape, splits, whole.K, src, nullptr);
  } else {
    const int shared = matmul_tc_shared_bytes(la, lb, shape);
    const int64_t bn = shape.bn();
    Args args;
    args.add(a.ptr).add(b.ptr).add(partial).add(mp);
    ctx.launch(ctx.function(src, tc_entry(shape), shared), static_cast<unsigned>((whole.N + bn - 1) / bn),
               static_cast<unsigned>((whole.M + 127) / 128), static_cast<unsigned>(splits), kBlock,
               static_cast<unsigned>(shared), args);
  }
  Args sum;
  sum.add(partial).add(out.ptr).add(mn).add(static_cast<int64_t>(splits)).add(whole.out_offset).add(whole.N);
  if (epilogue) sum.add(epilogue_params(*epilogue));
  ctx.launch(ctx.function(matmul_tc_source(a.dtype, out.dtype, kind, la, lb, shape,
                                           epilogue ? epilogue_code(*epilogue, out.dtype) : std::string()),
                          "matmul_split_sum"),
             blocks_for(ctx, mn), 1, 1, kBlock, 0, sum);
}

MatmulLaunchParams matmul_params(const Arg& a, const Arg& b, const Arg& out) {
  const size_t r = a.shape.size();
  MatmulLaunchParams mp{};
  Shape batch(out.shape.begin(), out.shape.end() - 2);
  mp.a_batch = kview(batch, Shape(a.strides.begin(), a.strides.end() - 2), a.offset);
  mp.b_batch = kview(batch, Shape(b.strides.begin(), b.strides.end() - 2), b.offset);
  mp.a_rs = a.strides[r - 2], mp.a_cs = a.strides[r - 1], mp.b_rs = b.strides[r - 2], mp.b_cs = b.strides[r - 1];
  mp.M = a.shape[r - 2], mp.K = a.shape[r - 1], mp.N = b.shape[r - 1], mp.batch = numel(batch);
  mp.out_offset = out.offset, mp.batch_rank = static_cast<int32_t>(batch.size());
  return mp;
}

// Whether batch item z of a view starts `step` elements after item z - 1, for every z
// (size-1 dims aside): the items' rows then continue one another.
bool batch_steps_by(const KView& v, int64_t step) {
  int64_t expect = step;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.shape[d] == 1) continue;
    if (v.strides[d] != expect) return false;
    expect *= v.shape[d];
  }
  return true;
}
// A batched product whose B is one matrix for every item (a weight broadcast over [B, T, .]
// activations) and whose A rows continue from item to item is one product of batch * M
// rows: one launch with M tiles to spare instead of a loop over items. The caller checks
// that the epilogue's inputs fold the same way.
bool fold_batch_into_rows(MatmulLaunchParams& mp) {
  if (mp.batch <= 1 || mp.a_cs != 1 || !batch_steps_by(mp.a_batch, mp.M * mp.a_rs) || !batch_steps_by(mp.b_batch, 0))
    return false;
  mp.M *= mp.batch;
  mp.batch = 1, mp.batch_rank = 0;
  mp.a_batch = kview({}, {}, mp.a_batch.offset);
  mp.b_batch = kview({}, {}, mp.b_batch.offset);
  return true;
}


// How the pipelined tensor-core kernel (kernels/matmul_tc.cu) runs a product, when its
// 16-bit operands are 16-byte-vector readable.
struct TcPlan {
  const char* kind;
  int la, lb;  // each operand: 1 contiguous along K, 0 along M (N)
  TcShape shape;
  int splits;
  bool even_slices = false;  // wave_slices chose the slices: no stream-K
};
std::optional<TcPlan> plan_tc(const Context& ctx, const Arg& a, const Arg& b, const MatmulLaunchParams& mp, DType out) {
  const char* kind = mma_kind(a, b, out);
  if (!kind || a.dtype == DType::F32) return std::nullopt;
  auto aligned = [&](const Arg& x, const KView& batch) {
    bool ok = x.offset % 8 == 0 && x.ptr % 16 == 0;
    for (int d = 0; d < batch.rank; ++d) ok = ok && batch.strides[d] % 8 == 0;
    return ok;
  };
  // 1: contiguous along K; 0: along M (N); -1: neither (the general kernel reads it).
  auto layout = [](int64_t k_stride, int64_t other_stride, int64_t K, int64_t other) {
    if (k_stride == 1 && other_stride % 8 == 0 && K % 8 == 0) return 1;
    if (other_stride == 1 && k_stride % 8 == 0 && other % 8 == 0) return 0;
    return -1;
  };
  const int la = aligned(a, mp.a_batch) ? layout(mp.a_cs, mp.a_rs, mp.K, mp.M) : -1;
  const int lb = aligned(b, mp.b_batch) ? layout(mp.b_rs, mp.b_cs, mp.K, mp.N) : -1;
  if (la < 0 || lb < 0) return std::nullopt;
  TcShape shape = tc_shape(ctx, mp.N, mp.K);
  int splits = split_k(ctx, mp, shape);
  if (shape.tma && !tma_fits(mp, shape)) shape = shape.bn() == 256 ? kWgmmaWide : kWgmmaNarrow;  // same block shape, same splits
  // The persistent kernel stages 16-bit results; split-K slices and f32 results take the
  // per-tile kernel of the same block shape.
  if (shape.persistent && (splits > 1 || dtype_size(out) != 2)) shape = shape.pingpong ? kWgmmaTmaPair : kWgmmaTma;
  if (splits > 1 && shape.tma && !shape.persistent && shape.min_blocks == 1 && !old_path("ALK_CUDA_DW")) {
    const char* force = std::getenv("ALK_CUDA_DW");
    const WaveSlices w = wave_slices(mp.M, mp.N, mp.K, std::max(1, ctx.props().multiprocessors),
                                     force && std::string_view(force) == "192");
    if (w.slices) return TcPlan{kind, la, lb, w.bm == 192 ? kWgmmaTma192 : kWgmmaTma, w.slices, true};
  }
  return TcPlan{kind, la, lb, shape, splits};
}

// One launch of matmul_tc into out; with `epilogue`, its expression is applied in the store.
void launch_tc(Context& ctx, const Arg& a, const Arg& b, const Arg& out, const MatmulLaunchParams& mp, TcPlan plan,
               const Kernel* epilogue) {
  if (plan.shape.persistent && !persistent_fits(out, mp)) plan.shape = plan.shape.pingpong ? kWgmmaTmaPair : kWgmmaTma;
  std::string epi;
  EpiRoles roles;
  if (epilogue) {
    const std::vector<DType> types = epilogue_input_types(*epilogue);
    epi = epilogue_code(*epilogue, out.dtype);
    if (plan.shape.persistent) {
      roles = epilogue_roles(epilogue_params(*epilogue), types);
      epi += roles.defines(types);
    }
  }
  const std::string src = matmul_tc_source(a.dtype, out.dtype, plan.kind, plan.la, plan.lb, plan.shape, epi);
  if (plan.shape.tma)
    return launch_tma(ctx, a, b, out.ptr, out.dtype, mp, plan.la, plan.lb, plan.shape, 1, mp.K, src, epilogue, roles.tile);
  const int shared = matmul_tc_shared_bytes(plan.la, plan.lb, plan.shape);
  const int64_t bn = plan.shape.bn();
  Args args;
  args.add(a.ptr).add(b.ptr).add(out.ptr).add(mp);
  if (epilogue) args.add(epilogue_params(*epilogue));
  ctx.launch(ctx.function(src, tc_entry(plan.shape), shared), static_cast<unsigned>((mp.N + bn - 1) / bn),
             static_cast<unsigned>((mp.M + 127) / 128), static_cast<unsigned>(std::min<int64_t>(mp.batch, 65535)), kBlock,
             static_cast<unsigned>(shared), args);
}

// A Matmul with an epilogue, both in one tensor-core kernel where that kernel takes the
// product (floating result and output, at most four more epilogue inputs; with split-K
// the sum of the slices applies it).
// False: the caller runs the product and then the epilogue as a Map kernel.
bool matmul_with_epilogue(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg a = arg_of(k.inputs[0]), b = arg_of(k.inputs[1]);
  auto half_or_f32 = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  if (!half_or_f32(k.node.dtype) || !half_or_f32(out.dtype) || k.epilogue_inputs.size() > kMaxEpilogueInputs) return false;
  // The kernel stores row-major at out.offset and reads each input by its last two strides.
  if (out.shape != k.node.shape || out.strides != contiguous_strides(out.shape)) return false;
  for (const KernelArg& x : k.epilogue_inputs)
    if (arg_of(x).shape != out.shape) return false;
  MatmulLaunchParams mp = matmul_params(a, b, out);
  if (mp.M == 0 || mp.N == 0 || mp.batch == 0 || mp.K == 0) return false;
  MatmulLaunchParams folded = mp;
  if (fold_batch_into_rows(folded)) {
    const EpiLaunch e = epilogue_params(k);
    bool inputs_fold = true;
    for (size_t i = 0; i < k.epilogue_inputs.size(); ++i) inputs_fold = inputs_fold && batch_steps_by(e.batch[i], mp.M * e.rs[i]);
    if (inputs_fold) mp = folded;
  }
  const std::optional<TcPlan> plan = plan_tc(ctx, a, b, mp, k.node.dtype);
  if (!plan) return false;
  // An extra output: the persistent ping-pong kernel stores one, 16-bit, of the result's shape
  // and contiguous (the GELU of fc's product beside it); elsewhere the product is stored and
  // the caller's Map pass computes the epilogue and the extra output.
  if (!k.extra_outputs.empty()) {
    const Arg x = arg_of(k.extra_outputs[0].arg);
    if (k.extra_outputs.size() != 1 || dtype_size(x.dtype) != 2 || x.shape != out.shape ||
        x.strides != contiguous_strides(x.shape) || plan->splits > 1 || !plan->shape.pingpong ||
        !persistent_fits(out, mp) || (x.ptr + static_cast<uint64_t>(x.offset) * 2) % 16 != 0)
      return false;
  }
  // Split K: the sum of the slices applies the epilogue.
  if (plan->splits > 1)
    split_k_matmul(ctx, a, b, out, mp, plan->kind, plan->la, plan->lb, plan->shape, plan->splits, plan->even_slices, &k);
  else launch_tc(ctx, a, b, out, mp, *plan, &k);
  return true;
}

void matmul_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg a = arg_of(k.inputs[0]), b = arg_of(k.inputs[1]);
  MatmulLaunchParams mp = matmul_params(a, b, out);
  if (mp.M == 0 || mp.N == 0 || mp.batch == 0) return;
  fold_batch_into_rows(mp);
  if (const std::optional<TcPlan> plan = plan_tc(ctx, a, b, mp, out.dtype)) {
    if (plan->splits > 1)
      split_k_matmul(ctx, a, b, out, mp, plan->kind, plan->la, plan->lb, plan->shape, plan->splits, plan->even_slices);
    else launch_tc(ctx, a, b, out, mp, *plan, nullptr);
    return;
  }
  if (const char* kind = mma_kind(a, b, out.dtype)) {
    // Tensor cores: how each operand's tiles are read (kernels/matmul_mma.cu).
    const int64_t esize = static_cast<int64_t>(dtype_size(a.dtype));
    auto mode = [&](const Arg& x, int64_t k_stride, int64_t other_stride, const KView& batch) {
      bool aligned = k_stride == 1 && mp.K % 8 == 0 && other_stride % 8 == 0 && x.offset % 8 == 0 &&
                     (x.ptr % 16) == 0;
      for (int d = 0; d < batch.rank; ++d) aligned = aligned && batch.strides[d] % 8 == 0;
      (void)esize;
      return aligned ? 0 : k_stride == 1 ? 1 : other_stride == 1 ? 2 : 1;
    };
    const int a_mode = mode(a, mp.a_cs, mp.a_rs, mp.a_batch), b_mode = mode(b, mp.b_rs, mp.b_cs, mp.b_batch);
    const std::string src = kernel_source(
        defines({{"TA", storage(a.dtype)},
                 {"TO", storage(out.dtype)},
                 {"MMA_TF32", a.dtype == DType::F32 ? "1" : "0"},
                 {"MMA_TYPE", std::string("\"") + kind + "\""},
                 {"A_MODE", std::to_string(a_mode)},
                 {"B_MODE", std::to_string(b_mode)}}),
        sources::matmul_mma);
    Args args;
    args.add(a.ptr).add(b.ptr).add(out.ptr).add(mp);
    ctx.launch(ctx.function(src, "matmul_mma"), static_cast<unsigned>((mp.N + 127) / 128),
               static_cast<unsigned>((mp.M + 127) / 128), static_cast<unsigned>(std::min<int64_t>(mp.batch, 65535)), kBlock,
               0, args);
    return;
  }
  const std::string src = matmul_source(a.dtype, b.dtype, out.dtype);
  Args args;
  args.add(a.ptr).add(b.ptr).add(out.ptr).add(mp);
  ctx.launch(ctx.function(src, "matmul_simt"), static_cast<unsigned>((mp.N + 63) / 64), static_cast<unsigned>((mp.M + 63) / 64),
             static_cast<unsigned>(std::min<int64_t>(mp.batch, 65535)), kBlock, 0, args);
}

// ---- attention ----

struct AttnLaunchParams {
  KView q, k, v, o, dout;
  int64_t q_rs, q_cs, k_rs, k_cs, v_rs, v_cs, o_rs, o_cs, d_rs, d_cs;
  int64_t B, Tq, S, D, out_offset, rows_out, lse_at = -1;
  int64_t g_plane, g_bs, g_hs, g_rs, g_heads;
  int32_t batch_rank, causal;
};

// The batch part of a [..., rows, D] view, with its row and column strides.
void attn_view(const Arg& a, KView& v, int64_t& rs, int64_t& cs) {
  const size_t r = a.shape.size();
  v = kview(Shape(a.shape.begin(), a.shape.end() - 2), Shape(a.strides.begin(), a.strides.end() - 2), a.offset);
  rs = a.strides[r - 2], cs = a.strides[r - 1];
}

std::string attention_source(DType t, int64_t D, bool tiled = false) {
  return kernel_source(defines({{"T", storage(t)},
                                {"ACC", acc_type(t)},
                                {"DPL", std::to_string((D + 31) / 32)},
                                {"VEC4", t == DType::F64 ? "0" : "1"}}),
                       std::string(sources::attention_shared) + std::string(tiled ? sources::attention_tiled : sources::attention));
}

// The tensor-core kernels (kernels/attention_mma.cu): bf16 products, for ops that allow
// them (AttentionParams::reduced_precision), head dims a multiple of 16 up to 128. t: the
// storage of q, k, v and dout; fwd: the packed forward output's; grads: the gradients'
// (under autocast q, k, v may be bf16 while the packed output is f32).
// kwarps: the one-pass backward's warps per block (4, or 8 where D % 32 == 0).
std::string attention_mma_source(DType t, DType fwd, DType grads, int64_t D, int kwarps = 4) {
  return kernel_source(defines({{"T", storage(t)},
                                {"TF", storage(fwd)},
                                {"TG", storage(grads)},
                                {"T_BF16", t == DType::BF16 ? "1" : "0"},
                                {"ACC", "float"},
                                {"HD", std::to_string(D)},
                                {"KWARPS", std::to_string(kwarps)}}),
                       std::string(sources::attention_shared) + std::string(sources::attention_mma));
}
// The kernels on Hopper's warpgroup instructions (kernels/attention_mma.cu, ATTN_WGMMA): bf16
// q, k, v (and dout), head dim 64; fwd: the forward output's storage, grads: the gradients'.
// wgmma_tile for n = 64 (K-major operands: the scores) and n = 32 (both transposed: the
// backward's dq halves), wgmma_tile_ra for n = 64 (B transposed: P V, P^T dO, dS^T Q).
std::string attention_wgmma_source(DType fwd, DType grads) {
  return kernel_source(defines({{"T", storage(DType::BF16)},
                                {"TF", storage(fwd)},
                                {"TG", storage(grads)},
                                {"T_BF16", "1"},
                                {"ACC", "float"},
                                {"HD", "64"},
                                {"KWARPS", "4"},
                                {"ATTN_WGMMA", "1"}}),
                       std::string(sources::attention_shared) + wgmma_tile_code(64, "bf16", 1, 1) +
                           wgmma_tile_code(32, "bf16", 0, 0) + wgmma_tile_ra_code(64, "bf16", 0) +
                           std::string(sources::attention_mma));
}
// Whether the warpgroup kernels take an attention op: sm_90a, bf16 rows of 64 that 16-byte
// copies read from every batch item (q, k, v and, for the backward, dout), where their tensor
// maps can be encoded too (attention_maps); unless the mma.sync
// kernels are asked for (ALK_CUDA_ATTENTION_FORWARD=mma; ALK_CUDA_ATTENTION_BACKWARD=mma or
// 64-keys). In GPT-2's step they take 0.161 ms a layer forward (mma.sync 0.198) and 0.417
// backward (0.553), bench/cuda/NOTES.md, eleventh session.
bool attention_wgmma_ok(const Context& ctx, const AttnLaunchParams& ap, DType t, bool backward) {
  const char* choice = std::getenv(backward ? "ALK_CUDA_ATTENTION_BACKWARD" : "ALK_CUDA_ATTENTION_FORWARD");
  const bool wanted = !choice || !*choice || std::string_view(choice) == "wgmma";
  if (!wanted || ctx.props().cc_major != 9 || ctx.props().cc_minor != 0 || t != DType::BF16 || ap.D != 64)
    return false;
  auto rows_16byte = [](const KView& v, int64_t rs, int64_t cs) {
    bool ok = cs == 1 && rs % 8 == 0 && v.offset % 8 == 0;
    for (int d = 0; d < v.rank; ++d) ok = ok && v.strides[d] % 8 == 0;
    return ok;
  };
  return rows_16byte(ap.q, ap.q_rs, ap.q_cs) && rows_16byte(ap.k, ap.k_rs, ap.k_cs) &&
         rows_16byte(ap.v, ap.v_rs, ap.v_cs) && (!backward || rows_16byte(ap.dout, ap.d_rs, ap.d_cs));
}
// The warpgroup kernels' tensor maps (kernels/attention_mma.cu): q, k, v (and the backward's
// dout) as rank-5 maps of [64, rows, batch dims fastest first] (missing batch dims of extent
// 1), boxes of a forward block's 128 queries and 64 keys, or a backward block's 128 keys and 64
// queries; the backward's per-query statistics ([2][B][Tq] f32: delta, then the log2-domain
// logsumexp) as a rank-3 map, boxes of 64 queries of both planes; and the two batch extents
// that unravel a block's batch item. nullopt where a bulk copy cannot address the views (more
// than three batch dims, batch shapes that differ, strides off 16 bytes or zero, Tq not a
// multiple of 4 for the statistics): the mma.sync kernels take those.
struct AttentionMaps {
  TensorMap q, k, v, dout, stats;
  unsigned batch_fast = 1, batch_mid = 1;
};
std::optional<AttentionMaps> attention_maps(const AttnLaunchParams& ap, CUdeviceptr q, CUdeviceptr k, CUdeviceptr v,
                                            CUdeviceptr dout = 0, CUdeviceptr stats = 0) {
  const bool backward = dout != 0;
  const int r = ap.q.rank;
  if (r > 3 || ap.k.rank != r || ap.v.rank != r || (backward && ap.dout.rank != r)) return std::nullopt;
  for (int d = 0; d < r; ++d)
    if (ap.k.shape[d] != ap.q.shape[d] || ap.v.shape[d] != ap.q.shape[d] || (backward && ap.dout.shape[d] != ap.q.shape[d]))
      return std::nullopt;
  auto encode = [&](CUdeviceptr ptr, const KView& view, int64_t rows, int64_t rs, unsigned box_rows) -> std::optional<TensorMap> {
    const uint64_t first = ptr + static_cast<uint64_t>(view.offset) * 2;
    uint64_t dims[5] = {64, static_cast<uint64_t>(rows), 1, 1, 1}, strides[4];
    strides[0] = static_cast<uint64_t>(rs) * 2;
    for (int i = 0; i < 3; ++i) {  // batch dim r - 1 - i (fastest first)
      const int d = r - 1 - i;
      dims[2 + i] = d >= 0 ? static_cast<uint64_t>(view.shape[d]) : 1;
      strides[1 + i] = d >= 0 && view.shape[d] > 1 ? static_cast<uint64_t>(view.strides[d]) * 2 : 16;
    }
    if (first % 16 != 0 || rows <= 0 || rows > (int64_t{1} << 31)) return std::nullopt;
    for (uint64_t st : strides)
      if (st == 0 || st % 16 != 0 || st >= (uint64_t{1} << 40)) return std::nullopt;
    TensorMap map{};
    const unsigned box[5] = {64, box_rows, 1, 1, 1}, element_strides[5] = {1, 1, 1, 1, 1};
    constexpr int kBf16 = 9, kInterleaveNone = 0, kSwizzle128 = 3, kL2Promote128 = 2, kFillZero = 0;
    if (driver()->cuTensorMapEncodeTiled(&map, kBf16, 5, reinterpret_cast<void*>(first), dims, strides, box,
                                         element_strides, kInterleaveNone, kSwizzle128, kL2Promote128, kFillZero) != 0)
      return std::nullopt;
    return map;
  };
  const unsigned query_box = backward ? 64 : 128, key_box = backward ? 128 : 64;
  const auto mq = encode(q, ap.q, ap.Tq, ap.q_rs, query_box), mk = encode(k, ap.k, ap.S, ap.k_rs, key_box),
             mv = encode(v, ap.v, ap.S, ap.v_rs, key_box);
  if (!mq || !mk || !mv) return std::nullopt;
  AttentionMaps maps{*mq, *mk, *mv, {}, {}};
  if (backward) {
    const auto md = encode(dout, ap.dout, ap.Tq, ap.d_rs, 64);
    if (!md || ap.Tq % 4 != 0 || stats % 16 != 0) return std::nullopt;
    maps.dout = *md;
    const uint64_t dims[3] = {static_cast<uint64_t>(ap.Tq), static_cast<uint64_t>(ap.B), 2},
                   strides[2] = {static_cast<uint64_t>(ap.Tq) * 4, static_cast<uint64_t>(ap.B * ap.Tq) * 4};
    const unsigned box[3] = {64, 1, 2}, element_strides[3] = {1, 1, 1};
    constexpr int kF32 = 7, kInterleaveNone = 0, kSwizzleNone = 0, kL2Promote128 = 2, kFillZero = 0;
    if (driver()->cuTensorMapEncodeTiled(&maps.stats, kF32, 3, reinterpret_cast<void*>(stats), dims, strides, box,
                                         element_strides, kInterleaveNone, kSwizzleNone, kL2Promote128, kFillZero) != 0)
      return std::nullopt;
  }
  if (r >= 1) maps.batch_fast = static_cast<unsigned>(ap.q.shape[r - 1]);
  if (r >= 2) maps.batch_mid = static_cast<unsigned>(ap.q.shape[r - 2]);
  return maps;
}
bool attention_mma_ok(const Kernel& k, DType t, int64_t D, int64_t B) {
  return std::get<AttentionParams>(k.node.params).reduced_precision && t != DType::F64 && D % 16 == 0 && D >= 16 &&
         D <= 128 && B <= 65535;
}
// Shared memory in bytes: bf16 rows of D + 8 elements. Forward: 128 queries and two
// stages of 64 keys and 64 values; backward: 16 kwarps keys and as many values,
// two stages of 64 queries and 64 output gradients, the keys x 64 dS^T tile (rows of 64 + 8),
// and two stages of per-query f32 statistics.
int attention_mma_shared(int64_t D, bool backward, int kwarps = 4) {
  const int64_t row = (D + 8) * 2, keys = 16 * kwarps;
  if (!backward) return static_cast<int>(384 * row);
  return static_cast<int>((2 * keys + 256) * row + keys * (64 + 8) * 2 + 4 * 64 * 4);
}

// The tiled kernels (kernels/attention_tiled.cu) take head dims up to 128; their shared
// memory, in bytes, per kernel (the layouts at the top of each).
bool attention_tiled_ok(const AttnLaunchParams& ap) { return ap.D >= 1 && ap.D <= 128 && ap.B <= 65535; }
int attention_tiled_shared(DType t, int64_t D, int which) {
  const int64_t acc = t == DType::F64 ? 8 : 4, p = 4 * 32 * 17;
  const int64_t n = which == 0   ? D * 64 + 32 * (D + 1) + 32 * D + p
                    : which == 1 ? 2 * D * 64 + 2 * 32 * (D + 1) + p + 128
                                 : 2 * D * 32 + 2 * 32 * (D + 1) + p + 64;
  return static_cast<int>(n * acc);
}

// The forward's output rows and logsumexps in its 16-bit node (AttentionParams::out_heads
// n >= 1): rows [B / n, Tq, n, D] from the node's first element, then f32 logsumexps. Only
// the tensor-core kernels know this layout.
void lse_apart_views(const Kernel& k, DType t, AttnLaunchParams& ap, int64_t out_heads, int64_t node_offset) {
  alk::check(attention_mma_ok(k, t, ap.D, ap.B), "scaled_dot_product_attention", k.node.loc,
             "a 16-bit output with its logsumexps apart needs the tensor-core kernel (head dim ", ap.D, ")");
  const int64_t n = out_heads;
  ap.o = kview({ap.B / n, n}, {ap.Tq * n * ap.D, ap.D}, node_offset);
  ap.o_rs = n * ap.D, ap.o_cs = 1;
  ap.lse_at = node_offset + ap.B * ap.Tq * ap.D;
}

AttnLaunchParams attention_params(const Kernel& k, const Arg& q, const Arg& kk, const Arg& v) {
  const auto& p = std::get<AttentionParams>(k.node.params);
  AttnLaunchParams ap{};
  attn_view(q, ap.q, ap.q_rs, ap.q_cs);
  attn_view(kk, ap.k, ap.k_rs, ap.k_cs);
  attn_view(v, ap.v, ap.v_rs, ap.v_cs);
  const size_t r = q.shape.size();
  ap.B = numel(Shape(q.shape.begin(), q.shape.end() - 2));
  ap.Tq = q.shape[r - 2], ap.S = kk.shape[r - 2], ap.D = q.shape[r - 1];
  ap.rows_out = std::max(ap.Tq, ap.S);
  ap.g_plane = ap.B * ap.rows_out * ap.D, ap.g_bs = ap.rows_out * ap.D, ap.g_hs = 0, ap.g_rs = ap.D, ap.g_heads = 1;
  ap.batch_rank = static_cast<int32_t>(r - 2), ap.causal = p.causal;
  return ap;
}

template <class Scale>
void add_attention_params(Args& args, const AttnLaunchParams& ap, DType t, double scale) {
  // The kernel's struct ends with `ACC scale` (float or double): appended in that type.
  std::vector<char> bytes(sizeof(ap));
  std::memcpy(bytes.data(), &ap, sizeof(ap));
  const Scale s = static_cast<Scale>(scale);
  const size_t align = alignof(Scale);
  bytes.resize((bytes.size() + align - 1) / align * align);
  const size_t at = bytes.size();
  bytes.resize(at + sizeof(Scale));
  std::memcpy(bytes.data() + at, &s, sizeof(Scale));
  bytes.resize((bytes.size() + 7) / 8 * 8);  // the struct's alignment (it holds i64)
  (void)t;
  args.add_bytes(bytes.data(), bytes.size());
}
void add_attention(Args& args, const AttnLaunchParams& ap, DType t, double scale) {
  if (t == DType::F64) add_attention_params<double>(args, ap, t, scale);
  else add_attention_params<float>(args, ap, t, scale);
}

// The tensor-core kernels' grid is (batch, tile), so that blocks start heaviest first under a
// causal mask (LPT in kernels/attention_mma.cu); y holds at most 65535 tiles.
unsigned attention_tiles(const Kernel& k, int64_t rows, int64_t per_block) {
  const int64_t tiles = (rows + per_block - 1) / per_block;
  alk::check(tiles <= 65535, "scaled_dot_product_attention", k.node.loc,
             "sequence length " + std::to_string(rows) + " needs " + std::to_string(tiles) +
                 " tiles of " + std::to_string(per_block) + " rows; the CUDA kernels take at most 65535");
  return static_cast<unsigned>(tiles);
}

void attention_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg q = arg_of(k.inputs[0]), kk = arg_of(k.inputs[1]), v = arg_of(k.inputs[2]);
  AttnLaunchParams ap = attention_params(k, q, kk, v);
  ap.out_offset = out.offset;
  const auto& params = std::get<AttentionParams>(k.node.params);
  if (params.out_heads) lse_apart_views(k, q.dtype, ap, params.out_heads, out.offset);
  Args args;
  args.add(q.ptr).add(kk.ptr).add(v.ptr).add(out.ptr);
  add_attention(args, ap, q.dtype, params.scale);
  const std::optional<AttentionMaps> maps = attention_mma_ok(k, q.dtype, ap.D, ap.B) &&
                                                    attention_wgmma_ok(ctx, ap, q.dtype, false)
                                                ? attention_maps(ap, q.ptr, kk.ptr, v.ptr)
                                                : std::nullopt;
  if (maps) {
    // Q, four stages of K and V (128-byte rows), 1 KiB to align them, the ring's barriers.
    const int shared = (128 + 8 * 64) * 128 + 1024 + 64;
    Args wargs;
    wargs.add(maps->q).add(maps->k).add(maps->v).add(out.ptr);
    add_attention(wargs, ap, q.dtype, params.scale);
    wargs.add(maps->batch_fast).add(maps->batch_mid);
    ctx.launch(ctx.function(attention_wgmma_source(out.dtype, out.dtype), "attention_forward_wgmma", shared),
               static_cast<unsigned>(ap.B), attention_tiles(k, ap.Tq, 128), 1, 256, static_cast<unsigned>(shared), wargs);
    return;
  }
  if (attention_mma_ok(k, q.dtype, ap.D, ap.B)) {
    const int shared = attention_mma_shared(ap.D, false);
    ctx.launch(ctx.function(attention_mma_source(q.dtype, out.dtype, out.dtype, ap.D), "attention_forward_mma", shared),
               static_cast<unsigned>(ap.B), attention_tiles(k, ap.Tq, 128), 1, 256, static_cast<unsigned>(shared), args);
    return;
  }
  if (attention_tiled_ok(ap)) {
    const int shared = attention_tiled_shared(q.dtype, ap.D, 0);
    ctx.launch(ctx.function(attention_source(q.dtype, ap.D, true), "attention_forward_tiled", shared),
               static_cast<unsigned>((ap.Tq + 63) / 64), static_cast<unsigned>(ap.B), 1, 128, static_cast<unsigned>(shared),
               args);
    return;
  }
  ctx.launch(ctx.function(attention_source(q.dtype, ap.D), "attention_forward"), blocks_for(ctx, ap.B * ap.Tq, kBlock / 32),
             1, 1, kBlock, 0, args);
}

void attention_backward_op(Context& ctx, const Kernel& k, const Arg& out) {
  const Arg q = arg_of(k.inputs[0]), kk = arg_of(k.inputs[1]), v = arg_of(k.inputs[2]);
  const Arg fwd = arg_of(k.inputs[3]), dout = arg_of(k.inputs[4]);
  AttnLaunchParams ap = attention_params(k, q, kk, v);
  const auto& params = std::get<AttentionParams>(k.node.params);
  if (params.out_heads) lse_apart_views(k, q.dtype, ap, params.out_heads, fwd.offset);
  else attn_view(fwd, ap.o, ap.o_rs, ap.o_cs);
  if (params.grads_qkv) {  // [b, T, 3, H, D]
    const int64_t h = params.out_heads;
    alk::check(h > 0 && ap.Tq == ap.S && ap.B % h == 0, "scaled_dot_product_attention", k.node.loc,
               "the packed projection's gradient layout needs T == S and the heads' layout");
    ap.g_heads = h, ap.g_plane = h * ap.D, ap.g_hs = ap.D, ap.g_rs = 3 * h * ap.D, ap.g_bs = ap.Tq * ap.g_rs;
  }
  attn_view(dout, ap.dout, ap.d_rs, ap.d_cs);
  ap.out_offset = out.offset;
  const double scale = params.scale;
  const size_t esize = dtype_size(out.dtype);
  if (ap.Tq != ap.S)  // rows past T (dq) or S (dk, dv) are zero
    ctx.memset0(out.ptr + static_cast<CUdeviceptr>(out.offset) * esize, static_cast<size_t>(numel(out.shape)) * esize);
  const size_t query_rows = static_cast<size_t>(std::max<int64_t>(1, ap.B * ap.Tq));
  // The tiled and per-row variants run two kernels with the same arguments: dq (which also
  // writes delta), then dk/dv (which reads it).
  CUdeviceptr delta = 0;  // theirs, allocated below (the tensor-core path keeps its own statistics)
  auto pass = [&](const std::string& src, const char* name, int shared, unsigned grid_x, unsigned grid_y, unsigned block) {
    Args args;
    args.add(q.ptr).add(kk.ptr).add(v.ptr).add(fwd.ptr).add(dout.ptr).add(out.ptr).add(delta);
    add_attention(args, ap, q.dtype, scale);
    ctx.launch(ctx.function(src, name, shared), grid_x, grid_y, 1, block, static_cast<unsigned>(shared), args);
  };
  auto tiles = [](int64_t rows, int64_t per_block) { return static_cast<unsigned>((rows + per_block - 1) / per_block); };
  const auto batch = static_cast<unsigned>(ap.B);
  if (attention_mma_ok(k, q.dtype, ap.D, ap.B)) {
    const char* variant_env = std::getenv("ALK_CUDA_ATTENTION_BACKWARD");
    const std::string_view variant = variant_env ? variant_env : "";
    // stats: each query row's delta, then its logsumexp in the log2 domain (f32 each).
    const CUdeviceptr stats = ctx.scratch(2 * query_rows * 4);
    const std::optional<AttentionMaps> maps = attention_wgmma_ok(ctx, ap, q.dtype, true)
                                                  ? attention_maps(ap, q.ptr, kk.ptr, v.ptr, dout.ptr, stats)
                                                  : std::nullopt;
    const bool wgmma = maps.has_value();
    // 8 warps (128 keys) per block halve the q/dout tile loads and dq atomics per key.
    const int kwarps = ap.D % 32 == 0 && variant != "64-keys" ? 8 : 4;
    const std::string src = wgmma ? attention_wgmma_source(fwd.dtype, out.dtype)
                                  : attention_mma_source(q.dtype, fwd.dtype, out.dtype, ap.D, kwarps);
    // One pass over the key blocks; dq gathered in f32 by atomic adds (mma.sync) or bulk
    // reduce-adds of whole tiles (wgmma), then scaled and stored.
    // The warpgroup kernel's dq_acc is whole tiles of 64 queries (DQ_CHUNK in
    // kernels/attention_mma.cu); prep zeroes the first B * Tq * D floats, all of it when Tq is
    // a multiple of 64, else it is cleared here first.
    const int64_t dq_rows = wgmma ? ap.B * ((ap.Tq + 63) / 64 * 64) : ap.B * ap.Tq;
    const size_t dq_bytes = static_cast<size_t>(std::max<int64_t>(1, dq_rows * ap.D)) * 4;
    const CUdeviceptr dq_acc = ctx.scratch(dq_bytes);
    if (dq_rows != ap.B * ap.Tq) ctx.memset0(dq_acc, dq_bytes);
    Args prep;
    prep.add(fwd.ptr).add(dout.ptr).add(stats).add(dq_acc);
    add_attention(prep, ap, q.dtype, scale);
    // HD / 8 lanes per row: 8 warps cover 256 * 8 / HD rows a pass.
    ctx.launch(ctx.function(src, "attention_backward_prep"), blocks_for(ctx, ap.B * ap.Tq, kBlock * 8 / ap.D), 1, 1,
               kBlock, 0, prep);
    if (wgmma) {
      // K, V (128 rows each), two stages of q and dout (64 rows), two dS^T buffers (128 rows):
      // 128-byte rows; two stages of two f32 statistics per query; 1 KiB to align.
      // Then two dq buffers a warpgroup (64 x 32 f32), then the copies' barriers.
      const int shared = (128 * 4 + 4 * 64) * 128 + 2 * 2 * 64 * 4 + 4 * 64 * 32 * 4 + 1024 + 64;
      Args main;
      main.add(maps->q).add(maps->k).add(maps->v).add(maps->dout).add(maps->stats).add(out.ptr).add(dq_acc);
      add_attention(main, ap, q.dtype, scale);
      main.add(maps->batch_fast).add(maps->batch_mid);
      ctx.launch(ctx.function(src, "attention_backward_wgmma", shared), batch, attention_tiles(k, ap.S, 128), 1, 256,
                 static_cast<unsigned>(shared), main);
    } else {
      Args main;
      main.add(q.ptr).add(kk.ptr).add(v.ptr).add(stats).add(dout.ptr).add(out.ptr).add(dq_acc);
      add_attention(main, ap, q.dtype, scale);
      const int shared = attention_mma_shared(ap.D, true, kwarps);
      ctx.launch(ctx.function(src, "attention_backward_mma", shared), batch, attention_tiles(k, ap.S, 16 * kwarps), 1,
                 static_cast<unsigned>(32 * kwarps), static_cast<unsigned>(shared), main);
    }
    Args finish;
    finish.add(dq_acc).add(out.ptr);
    add_attention(finish, ap, q.dtype, scale);
    // Four elements a thread, or (wgmma) 16 of a 64-query tile's chunk.
    ctx.launch(ctx.function(src, "attention_backward_dq_finish"), blocks_for(ctx, dq_rows * ap.D / (wgmma ? 16 : 4)), 1, 1,
               kBlock, 0, finish);
    return;
  }
  delta = ctx.scratch(query_rows * (q.dtype == DType::F64 ? 8 : 4));
  if (attention_tiled_ok(ap)) {
    const std::string src = attention_source(q.dtype, ap.D, true);
    pass(src, "attention_backward_dq_tiled", attention_tiled_shared(q.dtype, ap.D, 1), tiles(ap.Tq, 64), batch, 128);
    pass(src, "attention_backward_dkdv_tiled", attention_tiled_shared(q.dtype, ap.D, 2), tiles(ap.S, 32), batch, 128);
    return;
  }
  const std::string src = attention_source(q.dtype, ap.D);  // a warp per row, grid-stride over every batch
  pass(src, "attention_backward_dq", 0, blocks_for(ctx, ap.B * ap.Tq, kBlock / 32), 1, kBlock);
  pass(src, "attention_backward_dkdv", 0, blocks_for(ctx, ap.B * ap.S, kBlock / 32), 1, kBlock);
}

// ---- which kernels run here ----

const std::map<OpId, Launcher>& launchers() {
  static const std::map<OpId, Launcher> m = {
      {OpId::Softmax, softmax_op},       {OpId::LogSoftmax, softmax_op},
      {OpId::ArgReduce, argreduce_op},   {OpId::Cumsum, cumsum_op},
      {OpId::LayerNorm, norm_op},        {OpId::RmsNorm, norm_op},
      {OpId::LayerNormBackward, layer_norm_backward_op},
      {OpId::Gather, gather_op},         {OpId::IndexSelect, index_select_op},
      {OpId::ScatterAdd, scatter_add_op}, {OpId::OneHot, one_hot_op},
      {OpId::Tri, tri_op},               {OpId::Pad, pad_op},
      {OpId::Concat, concat_op},         {OpId::SliceScatter, slice_scatter_op},
      {OpId::Unfold, unfold_op},         {OpId::Fold, fold_op},
      {OpId::Random, random_op},         {OpId::Matmul, matmul_op},
      {OpId::Attention, attention_op},   {OpId::AttentionBackward, attention_backward_op},
      {OpId::CrossEntropy, cross_entropy_op}, {OpId::CrossEntropyBackward, cross_entropy_backward_op},
  };
  return m;
}

std::string unsupported_reason(const Kernel& k) {
  auto rank_ok = [](const KernelArg& a) { return a.shape.size() <= 8; };
  if (!rank_ok(k.output)) return "rank " + std::to_string(k.output.shape.size()) + " > 8";
  for (const KernelArg& a : k.inputs)
    if (!rank_ok(a)) return "an input of rank " + std::to_string(a.shape.size()) + " > 8";
  if (k.op == OpId::Map) return k.expr ? "" : "a Map kernel without an expression";
  if (k.op == OpId::HostCall) return "";  // its function queues its own work on the stream (src/dist)
  if (k.op == OpId::Reduce) {
    if (!k.expr) return "a Reduce kernel without its prologue";
    if (k.inputs.size() > 8) return "a reduction prologue with more than 8 inputs";
    return "";
  }
  if (!launchers().count(k.op)) return "no CUDA kernel for " + std::string(op_name(k.op)) + " yet";
  switch (k.op) {
    case OpId::Attention: case OpId::AttentionBackward:
      if (k.inputs[0].shape.size() < 2 || k.inputs[0].shape.back() > 256) return "attention with head dim > 256";
      break;
    case OpId::Matmul:
      if (k.inputs[0].shape.size() < 2 || k.inputs[0].shape.size() != k.inputs[1].shape.size())
        return "matmul operands of different ranks";
      break;
    case OpId::Random:  // alk::compile then launches it alone with its seed and offset patched in
      if (!k.inputs.empty()) return "random with its seed and offset in a buffer";
      break;
    case OpId::ScatterAdd:
      if (k.output.dtype == DType::Bool || k.output.dtype == DType::U8) return "scatter_add into u8/bool (no atomics)";
      break;
    case OpId::Softmax: case OpId::LogSoftmax: case OpId::LayerNorm: case OpId::RmsNorm:
    case OpId::LayerNormBackward: case OpId::Fold:
      if (!is_floating(k.output.dtype)) return std::string(op_name(k.op)) + " of a non-float dtype";
      break;
    case OpId::CrossEntropy: case OpId::CrossEntropyBackward:
      if (k.inputs[0].shape.size() != 2 || !is_floating(k.inputs[0].dtype)) return "cross_entropy of non-float or non-2-D logits";
      break;
    default: break;
  }
  return "";
}

// ---- the Device ----

// ALK_DEBUG=timing: the GPU time of each kernel, from events around it (the scheduler's own
// table measures host time to completion, launch and synchronization included), by op
// and shapes, printed at exit. Eager launches only: a replayed graph is one launch.
bool gpu_timing_enabled() {
  static const bool on = [] {
    const char* d = std::getenv("ALK_DEBUG");
    const std::string v = d ? d : "";
    return v.find("timing") != std::string::npos || v.find("all") != std::string::npos;
  }();
  return on;
}

struct GpuTimes {
  std::mutex mu;
  std::map<std::string, std::pair<int64_t, double>> by_kernel;  // name -> (calls, ms)
  ~GpuTimes() {
    if (by_kernel.empty()) return;
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (auto& [name, t] : by_kernel) rows.emplace_back(t.second, name), total += t.second;
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "[alk cuda timing] %.3f ms of GPU time in kernels\n", total);
    for (auto& [ms, name] : rows)
      std::fprintf(stderr, "[alk cuda timing] %9.3f ms %5.1f%% %7lld x %s\n", ms, 100 * ms / std::max(total, 1e-9),
                   static_cast<long long>(by_kernel[name].first), name.c_str());
  }
};
GpuTimes& gpu_times() {
  static GpuTimes* t = new GpuTimes;  // printed by an atexit handler, after every device is done
  static const bool registered = [] { return std::atexit([] { delete t; }) == 0; }();
  (void)registered;
  return *t;
}

// ALK_DEBUG=timing: GPU events around what is enqueued between its construction (from the
// next launch on: Context::time_next_launch) and add(), which waits for the stop event and
// adds the time to the table under `name`, counted `calls` times. Off, it does nothing.
class GpuTimer {
 public:
  explicit GpuTimer(Context& c) {
    if (!gpu_timing_enabled()) return;
    check(driver()->cuEventCreate(&start_, 0), "cuEventCreate");
    check(driver()->cuEventCreate(&stop_, 0), "cuEventCreate");
    c.time_next_launch(start_);
  }
  ~GpuTimer() {
    if (start_) driver()->cuEventDestroy_v2(start_);
    if (stop_) driver()->cuEventDestroy_v2(stop_);
  }
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  void add(Context& c, const std::string& name, int64_t calls) {
    if (!start_) return;
    c.finish_timing();
    check(driver()->cuEventRecord(stop_, c.stream()), "cuEventRecord");
    check(driver()->cuEventSynchronize(stop_), "cuEventSynchronize");
    float ms = 0;
    driver()->cuEventElapsedTime(&ms, start_, stop_);
    std::lock_guard tl(gpu_times().mu);
    auto& t = gpu_times().by_kernel[name];
    t.first += calls;
    t.second += ms;
  }

 private:
  CUevent start_ = nullptr, stop_ = nullptr;
};

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
  // A norm applies its epilogue in its store (launch_norm: under autocast it writes the
  // next product's bf16 operand itself); its backward widens a 16-bit gradient as it loads.
  bool fuses_epilogue(OpId core) const override {
    return Device::fuses_epilogue(core) || core == OpId::LayerNorm || core == OpId::RmsNorm;
  }
  bool widens_input(OpId op, size_t slot) const override { return op == OpId::LayerNormBackward && slot == 2; }
  bool norm_backward_adds() const override {
    static const bool adds = !old_path("ALK_CUDA_NORM_SUM");  // =old: the add its own kernel (A/B)
    return adds;
  }
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
    const bool one_each = old_path("ALK_CUDA_GROUP");  // =old: every kernel its own launch
    for (size_t i = 0; i < kernels.size();) {
      std::optional<GroupMember> first = group_member(kernels[i]);
      Group g{i, i + 1, {}};
      if (first) {
        g.members.push_back(std::move(*first));
        const std::string key = map_kernel_key(kernels[i]);
        while (g.end < kernels.size() && !one_each) {
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
  // epilogue changes it), then the epilogue as a Map kernel over that value.
  void enqueue(Context& c, const Kernel& k) {
    if (k.op == OpId::HostCall) {  // runs now, on the host: it queues its work in stream order itself
      if (!c.compile_only) std::get<HostCallParams>(k.node.params).fn->run(k);
      return;
    }
    const Arg out = arg_of(k.output);
    if (k.op == OpId::Map) {
      std::vector<Arg> in;
      for (const KernelArg& a : k.inputs) in.push_back(arg_of(a));
      std::vector<ExtraArg> extra;
      for (const ExtraOutput& x : k.extra_outputs) extra.push_back({arg_of(x.arg), x.expr});
      return launch_map(c, *k.expr, in, out, extra);
    }
    if (k.op == OpId::Matmul && k.epilogue && matmul_with_epilogue(c, k, out)) return;
    if ((k.op == OpId::LayerNorm || k.op == OpId::RmsNorm) && k.epilogue && k.extra_outputs.empty() &&
        launch_norm(c, k, out, true))
      return;
    if (k.op == OpId::Reduce && reduce_fuses_epilogue(k, out)) return launch_reduce(c, k, out, true);
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
    if (k.op == OpId::Reduce) launch_reduce(c, k, value);
    else launchers().at(k.op)(c, k, value);
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

std::vector<std::pair<std::string, std::string>> template_sources() {
  std::vector<std::pair<std::string, std::string>> out;
  const DType all[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool};
  for (DType t : all) {
    const std::string name(dtype_name(t));
    out.emplace_back("index " + name, index_source(t, DType::I64));
    out.emplace_back("random " + name, random_source(t));
    if (t == DType::I32) out.emplace_back("index i32 indices", index_source(DType::F32, DType::I32));
    if (is_floating(t)) {
      out.emplace_back("rows " + name, rows_source(t, {{"IS_MAX", "1"}}));
      // The row-in-registers norms: 16-byte vectors, a warp per row, 8 rows per block (GPT-2's
      // 768 columns); scalar loads, 8 warps per row (block barriers in the row sums).
      const int vec = 16 / static_cast<int>(dtype_size(t)), per_lane = t == DType::F64 ? 12 : 24;
      out.emplace_back("rows " + name + " norms, vectors", RowPlan{vec, 1, per_lane / vec, 2}.defines() + rows_source(t));
      out.emplace_back("rows " + name + " norms, scalar 8 warps",
                       RowPlan{1, 8, per_lane * 4 / 3, 1}.defines() + rows_source(t));
      if (t == DType::F32) {
        // Under autocast: the forward storing bf16 through an epilogue (a cast and a residual),
        // the backward reading a bf16 gradient.
        const std::vector<std::string> names = {"a", "b"};
        const std::vector<expr::Type> types = {expr::Type::F32, expr::Type::F32};
        const expr::Expr residual = expr::parse("a * 0.5 + b", names, types, expr::Type::F32);
        for (const RowPlan& plan : {RowPlan{vec, 1, per_lane / vec, 2}, RowPlan{1, 8, per_lane * 4 / 3, 1}}) {
          const std::string shape = plan.vec > 1 ? "vectors" : "scalar 8 warps";
          out.emplace_back("rows f32 norms -> bf16 epilogue, " + shape,
                           norm_epilogue_source(plan, t, DType::BF16,
                                                epilogue_code(residual, t, {DType::BF16}, DType::BF16)));
          out.emplace_back("rows f32 norms, bf16 gradient, " + shape,
                           plan.defines() + rows_source(t, {{"TG", storage(DType::BF16)}}));
          out.emplace_back("rows f32 norms, bf16 gradient, residual sum, " + shape,
                           plan.defines() + rows_source(t, {{"TG", storage(DType::BF16)}, {"NORM_SUM", "1"}}));
        }
      }
      out.emplace_back("matmul " + name, matmul_source(t, t, t));
      out.emplace_back("attention " + name + " D=64", attention_source(t, 64));
      out.emplace_back("attention (tiled) " + name + " D=64", attention_source(t, 64, true));
      if (t != DType::F64) {
        out.emplace_back("attention (tensor cores) " + name + " D=64", attention_mma_source(t, t, t, 64));
        out.emplace_back("attention (tensor cores) " + name + " D=128", attention_mma_source(t, t, t, 128));
        if (t != DType::F32)  // autocast's 16-bit operands with the f32 packed output
          out.emplace_back("attention (tensor cores) " + name + " in, f32 out, D=64",
                           attention_mma_source(t, DType::F32, t, 64, 8));
      }
    }
  }
  out.emplace_back("rows i64 (argmax, cumsum)", rows_source(DType::I64, {{"IS_MAX", "0"}}));
  {
    // Reductions around prologues: sum(a * b) in f32 (lanes and block), max of bf16, a
    // count of bools into i64, prod of f64; column sums over strided rows (RED_STRIDED) with
    // one and two inputs, and stores through epilogues (a bias gradient's bf16 sum cast to
    // f32; an f64 epilogue reading a tensor beside the value).
    const std::vector<std::string> names = {"a", "b"}, one = {"a"};
    const std::vector<expr::Type> f32 = {expr::Type::F32, expr::Type::F32}, f64 = {expr::Type::F64},
                                  boolean = {expr::Type::Bool}, f32_one = {expr::Type::F32},
                                  f64_two = {expr::Type::F64, expr::Type::F64};
    const expr::Expr mul = expr::parse("a * b", names, f32, expr::Type::F32), id_f32 = expr::parse("a", one, f32_one, expr::Type::F32),
                     id_f64 = expr::parse("a", one, f64, expr::Type::F64);
    const ReduceStore f32_store{DType::F32}, f64_store{DType::F64};
    ReduceStore bias_store{DType::BF16}, f64_epilogue{DType::F64};
    const expr::Expr cast_f32 = expr::parse("a", one, f32_one, expr::Type::F32),
                     scale_by = expr::parse("a * b + 1.0", names, f64_two, expr::Type::F64);
    bias_store.epilogue = &cast_f32, bias_store.out = DType::F32;
    f64_epilogue.epilogue = &scale_by, f64_epilogue.epilogue_inputs = {DType::F32}, f64_epilogue.out = DType::F64;
    out.emplace_back("reduce sum(a*b) f32 W=32", reduce_source(mul, {DType::F32, DType::F32}, f32_store, ReduceOp::Sum, 32));
    out.emplace_back("reduce sum(a*b) f32 W=256", reduce_source(mul, {DType::F32, DType::F32}, f32_store, ReduceOp::Sum, 256));
    out.emplace_back("reduce sum(a*b) f32 columns x4",
                     reduce_source(mul, {DType::F32, DType::F32}, f32_store, ReduceOp::Sum, 256, 4));
    out.emplace_back("reduce sum(a*b) f32 columns x4, strided rows",
                     reduce_source(mul, {DType::F32, DType::F32}, f32_store, ReduceOp::Sum, 256, 4, true));
    out.emplace_back("reduce sum bf16 -> f32 columns x8", reduce_source(id_f32, {DType::BF16}, f32_store, ReduceOp::Sum, 256, 8));
    out.emplace_back("reduce sum bf16 columns x8, strided rows, cast to f32 (bias gradient)",
                     reduce_source(id_f32, {DType::BF16}, bias_store, ReduceOp::Sum, 256, 8, true));
    out.emplace_back("reduce sum f64 W=32 + an epilogue with an f32 input",
                     reduce_source(id_f64, {DType::F64}, f64_epilogue, ReduceOp::Sum, 32));
    out.emplace_back("reduce max f64 columns x2", reduce_source(id_f64, {DType::F64}, f64_store, ReduceOp::Max, 256, 2));
    out.emplace_back("reduce max bf16", reduce_source(id_f32, {DType::BF16}, ReduceStore{DType::BF16}, ReduceOp::Max, 8));
    out.emplace_back("reduce count bool -> i64",
                     reduce_source(expr::parse("a", one, boolean, expr::Type::I64), {DType::Bool}, ReduceStore{DType::I64},
                                   ReduceOp::Sum, 32));
    out.emplace_back("reduce prod f64", reduce_source(id_f64, {DType::F64}, f64_store, ReduceOp::Prod, 1));
  }
  out.emplace_back("cross_entropy bf16 rows of vectors", loss_source(DType::BF16, DType::I64, DType::F32, true));
  out.emplace_back("cross_entropy f32 strided", loss_source(DType::F32, DType::I32, DType::F32, false));
  out.emplace_back("cross_entropy f64 rows of vectors", loss_source(DType::F64, DType::I64, DType::F64, true));
  out.emplace_back("matmul i64", matmul_source(DType::I64, DType::I64, DType::I64));
  out.emplace_back("matmul bf16 x bf16 -> f32", matmul_source(DType::BF16, DType::BF16, DType::F32));
  for (int la = 0; la < 2; ++la)
    for (int lb = 0; lb < 2; ++lb)
      out.emplace_back("matmul_tc bf16 layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, TcShape{8, 4}));
  out.emplace_back("matmul_tc f16 -> f32 narrow", matmul_tc_source(DType::F16, DType::F32, "f16", 1, 1, TcShape{4, 3}));
  for (int la = 0; la < 2; ++la)
    for (int lb = 0; lb < 2; ++lb)
      out.emplace_back("matmul_wgmma bf16 layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaWide));
  for (int la = 0; la < 2; ++la)
    for (int lb = 0; lb < 2; ++lb) {
      out.emplace_back("matmul_wgmma_tma bf16 layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTma));
      out.emplace_back("matmul_wgmma_tma 128 x 128, two blocks per SM, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTmaPair));
      out.emplace_back("matmul_wgmma_tma persistent, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTmaPersistent));
      out.emplace_back("matmul_wgmma_tma ping-pong, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTmaPingpong));
      out.emplace_back("matmul_wgmma_tma stream-K, layouts " + std::to_string(la) + std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", la, lb, kWgmmaTma, {}, true));
      out.emplace_back("matmul_wgmma_tma 192 x 192, three consumer warpgroups, f32, layouts " + std::to_string(la) +
                           std::to_string(lb),
                       matmul_tc_source(DType::BF16, DType::F32, "bf16", la, lb, kWgmmaTma192));
    }
  out.emplace_back("attention wgmma, packed f32 output", attention_wgmma_source(DType::F32, DType::F32));
  out.emplace_back("attention wgmma, bf16 output and gradients", attention_wgmma_source(DType::BF16, DType::BF16));
  out.emplace_back("attention wgmma, packed f32 output, bf16 gradients", attention_wgmma_source(DType::F32, DType::BF16));
  out.emplace_back("matmul_wgmma f16 -> f32 narrow",
                   matmul_tc_source(DType::F16, DType::F32, "f16", 1, 0, kWgmmaNarrow));
  {
    // A fused epilogue: a bf16 product plus an f32 bias, then tanh-GELU, stored as bf16.
    const std::vector<std::string> names = {"a", "b"};
    const std::vector<expr::Type> types = {expr::Type::F32, expr::Type::F32};
    const expr::Expr gelu_bias = expr::parse("0.5 * (a + b) * (1 + tanh(0.79788456 * (a + b)))", names, types,
                                             expr::Type::F32);
    out.emplace_back("matmul_tc bf16 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, TcShape{8, 4},
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma bf16 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 0, 0, kWgmmaWide,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    const std::vector<std::string> names5 = {"a", "b", "c", "d", "e"};
    const std::vector<expr::Type> types5(5, expr::Type::F32);
    const expr::Expr sum4 = expr::parse("a + b + c + d + e", names5, types5, expr::Type::F32);
    out.emplace_back("matmul_wgmma_tma bf16 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTma,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma persistent + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPersistent,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma persistent f16 + 4-input epilogue",
                     matmul_tc_source(DType::F16, DType::F16, "f16", 0, 0, kWgmmaTmaPersistent,
                                      epilogue_code(sum4, DType::F16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::F16)));
    out.emplace_back("matmul_wgmma_tma ping-pong + 4-input epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPingpong,
                                      epilogue_code(sum4, DType::BF16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::BF16)));
    // The persistent kernel's epilogue roles (EpiRoles): a staged tile input, row-constant
    // inputs and the rest, in both schedules.
    const std::vector<DType> four = {DType::F32, DType::BF16, DType::F32, DType::F16};
    for (const auto& [name, shape] : {std::pair{"ping-pong", kWgmmaTmaPingpong}, std::pair{"persistent", kWgmmaTmaPersistent}}) {
      EpiRoles tile_and_cols;
      tile_and_cols.tile = 1, tile_and_cols.cols = 1 | 4, tile_and_cols.rest = 8;
      out.emplace_back(std::string("matmul_wgmma_tma ") + name + " + staged, row-constant and loaded epilogue inputs",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 0, shape,
                                        epilogue_code(sum4, DType::BF16, four, DType::BF16) + tile_and_cols.defines(four)));
      EpiRoles bias;
      bias.cols = 1;
      out.emplace_back(std::string("matmul_wgmma_tma ") + name + " + a bias",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, shape,
                                        epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16) +
                                            bias.defines({DType::F32})));
      EpiRoles staged;
      staged.tile = 0;
      out.emplace_back(std::string("matmul_wgmma_tma ") + name + " + a staged input",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 0, shape,
                                        epilogue_code(gelu_bias, DType::BF16, {DType::BF16}, DType::BF16) +
                                            staged.defines({DType::BF16})));
    }
    {
      // An extra output (Kernel::extra_outputs, ping-pong only): fc1's GELU beside its biased
      // product; fc2's input gradient with the GELU of its staged epilogue input beside it.
      const expr::Expr plus_bias = expr::parse("a + b", names, types, expr::Type::F32);
      EpiRoles bias;
      bias.cols = 1;
      out.emplace_back("matmul_wgmma_tma ping-pong + a bias and an extra output",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 0, kWgmmaTmaPingpong,
                                        epilogue_code(plus_bias, DType::BF16, {DType::F32}, DType::BF16, &gelu_bias) +
                                            bias.defines({DType::F32})));
      const expr::Expr input_gelu = expr::parse("0.5 * b * (1 + tanh(0.79788456 * b))", names, types, expr::Type::F32);
      EpiRoles staged;
      staged.tile = 0;
      out.emplace_back("matmul_wgmma_tma ping-pong + a staged input and an extra output",
                       matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPingpong,
                                        epilogue_code(gelu_bias, DType::BF16, {DType::BF16}, DType::BF16, &input_gelu) +
                                            staged.defines({DType::BF16})));
    }
    out.emplace_back("matmul_wgmma_tma 192 x 192 + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTma192,
                                      epilogue_code(sum4, DType::BF16, four, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma stream-K + epilogue in the sum",
                     matmul_tc_source(DType::BF16, DType::F32, "bf16", 0, 0, kWgmmaTma,
                                      epilogue_code(sum4, DType::BF16, four, DType::F32), true));
    out.emplace_back("matmul_wgmma_tma 128 x 128, two blocks per SM, + epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 1, 1, kWgmmaTmaPair,
                                      epilogue_code(gelu_bias, DType::BF16, {DType::F32}, DType::BF16)));
    out.emplace_back("matmul_wgmma_tma 128 x 128, two blocks per SM, + 4-input epilogue",
                     matmul_tc_source(DType::BF16, DType::BF16, "bf16", 0, 0, kWgmmaTmaPair,
                                      epilogue_code(sum4, DType::BF16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::BF16)));
    out.emplace_back("matmul_wgmma narrow + 4-input epilogue",
                     matmul_tc_source(DType::BF16, DType::F32, "bf16", 1, 0, kWgmmaNarrow,
                                      epilogue_code(sum4, DType::BF16, {DType::F32, DType::BF16, DType::F32, DType::F16},
                                                    DType::F32)));
  }
  for (const char* kind : {"bf16", "f16", "tf32"})
    for (auto [a_mode, b_mode] : {std::pair{0, 0}, std::pair{1, 2}, std::pair{2, 1}}) {
        const DType t = kind[0] == 'b' ? DType::BF16 : kind[0] == 'f' && kind[1] == '1' ? DType::F16 : DType::F32;
        out.emplace_back(std::string("matmul_mma ") + kind + " modes " + std::to_string(a_mode) + std::to_string(b_mode),
                         kernel_source(defines({{"TA", storage(t)},
                                                {"TO", storage(t)},
                                                {"MMA_TF32", t == DType::F32 ? "1" : "0"},
                                                {"MMA_TYPE", std::string("\"") + kind + "\""},
                                                {"A_MODE", std::to_string(a_mode)},
                                                {"B_MODE", std::to_string(b_mode)}}),
                                       sources::matmul_mma));
    }
  return out;
}

}  // namespace alk::cuda
