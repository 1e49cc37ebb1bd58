// Reductions (OpId::Reduce) with their fused prologue (an elementwise expression of up to 8
// inputs, emit_function) and, where the store can apply it, their epilogue: a warp or a block
// per output over rows (reduce_kernel), or column sums (bias gradients) by vectors of adjacent
// outputs over chunks of rows, the chunks combined in a fixed order (deterministic).
#include <algorithm>
#include <cstring>

#include "backend/cuda/template_ops.h"
#include "expr/emit.h"

namespace alk::cuda {

namespace {

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

// ---- the table ----

void reduce_op(Context& ctx, const Kernel& k, const Arg& out) { launch_reduce(ctx, k, out); }

bool reduce_with_epilogue(Context& ctx, const Kernel& k, const Arg& out) {
  if (!reduce_fuses_epilogue(k, out)) return false;
  launch_reduce(ctx, k, out, true);
  return true;
}

std::string reduce_unsupported(const Kernel& k) {
  if (!k.expr) return "a Reduce kernel without its prologue";
  if (k.inputs.size() > 8) return "a reduction prologue with more than 8 inputs";
  return "";
}

const bool registered = (template_ops().add(OpId::Reduce, kAllDTypes,
                                            {reduce_unsupported, reduce_op, reduce_with_epilogue},
                                            "sum, prod, max, min over a prologue of up to 8 inputs"),
                         true);

// Reductions around prologues: sum(a * b) in f32 (lanes and block), max of bf16, a count of
// bools into i64, prod of f64; column sums over strided rows (RED_STRIDED) with one and two
// inputs, and stores through epilogues (a bias gradient's bf16 sum cast to f32; an f64
// epilogue reading a tensor beside the value).
void samples(SampleSources& out) {
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
const bool sampled = add_sample_sources(samples);

}  // namespace

}  // namespace alk::cuda
