// Fused softmax cross-entropy over rows (ops.h cross_entropy_rows): one block per row of
// the logits x [N, C], read in their own dtype (bf16 logits are never widened to an f32
// copy). Defines: T (the logits' storage), ACC (float, or double for f64), IDX (the
// targets' storage), P (the packed output's storage: float or double), VEC (1: rows are
// 16-byte aligned and C a multiple of VW = 16 / sizeof(T), so each thread moves 16 bytes
// at a time).
//
// Forward: each thread folds its elements into an online (max, sum of exp(x - max)) pair,
// the block combines the pairs, and thread 0 writes (lse - x[target], lse), or (0, lse) for
// an ignored row. With VEC a 16-byte vector is folded at once: its max first, so the
// running sum is rescaled at most once per vector and each element costs one exponential
// (the hardware's, exp_fast) and no branch: at GPT-2's [16384, 50304] bf16 logits the
// per-element fold, with its branch and the precise expf, made the pass compute-bound.
// Backward: d x = (g_nll + g_lse) exp(x - lse) - g_nll [c == target], in T, from the
// forward's lse (no second reduction).

struct CrossEntropyParams {
  View x, targets, packed, grad;  // packed and grad: [N, 2]
  i64 rows, classes, ignore_index, out_offset;
  u64 launch;  // the index-error launch id (a target outside [0, C))
};

__device__ __forceinline__ void fold(ACC& m, ACC& s, ACC v) {
  if (v > m) {
    s = s * exp(m - v) + 1;
    m = v;
  } else if (v != -(ACC)ALK_INF) {
    s += exp(v - m);
  }
}
__device__ __forceinline__ void merge(ACC& m, ACC& s, ACC mo, ACC so) {
  const ACC mm = m > mo ? m : mo;
  if (mm == -(ACC)ALK_INF) return;
  s = s * exp(m - mm) + so * exp(mo - mm);
  m = mm;
}

// exp(x) for x <= 0 (an element less the running max): the MUFU's 2^x (a few ulp) in f32.
__device__ __forceinline__ float exp_fast(float x) { return exp2_ftz(x * 1.4426950408889634f); }
__device__ __forceinline__ double exp_fast(double x) { return exp(x); }

#define VW ((int)(16 / sizeof(T)))
// Elements c .. c + VW - 1 of a row, read as one 16-byte vector.
__device__ __forceinline__ void load_vec(const T* __restrict__ row, i64 c, ACC v[VW]) {
  const uint4 raw = *(const uint4*)(row + c);
  const T* e = (const T*)&raw;
#pragma unroll
  for (int i = 0; i < VW; ++i) v[i] = cvt<ACC>(e[i]);
}

__device__ __forceinline__ i64 target_of(const IDX* __restrict__ targets, const CrossEntropyParams& p, i64 r, u64* flag) {
  const i64 t = (i64)targets[at(p.targets, r)];
  if (t != p.ignore_index && (t < 0 || t >= p.classes)) {
    report_bad_index(flag, p.launch, r, t);
    return p.ignore_index;  // reported; the row then reads nothing out of range
  }
  return t;
}

extern "C" __global__ void __launch_bounds__(256) cross_entropy_rows(const T* __restrict__ x, const IDX* __restrict__ targets,
                                                                    P* __restrict__ packed, u64* flag,
                                                                    const CrossEntropyParams p) {
  __shared__ ACC sm[8], ss[8];
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* row = x + at(p.x, r * p.classes);
    ACC m = -(ACC)ALK_INF, s = 0;
#if VEC
    for (i64 c = (i64)threadIdx.x * VW; c < p.classes; c += 256 * VW) {
      ACC v[VW];
      load_vec(row, c, v);
      ACC mv = v[0];
#pragma unroll
      for (int i = 1; i < VW; ++i) mv = v[i] > mv ? v[i] : mv;
      if (mv > m) {
        s *= exp_fast(m - mv);  // (0 while m is -inf: s is 0 then too)
        m = mv;
      }
      if (m != -(ACC)ALK_INF) {  // (all -inf so far: they add nothing)
        ACC t = 0;
#pragma unroll
        for (int i = 0; i < VW; ++i) t += exp_fast(v[i] - m);
        s += t;
      }
    }
#else
    for (i64 c = threadIdx.x; c < p.classes; c += 256) fold(m, s, cvt<ACC>(row[c * p.x.strides[1]]));
#endif
    for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = m, ss[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < 8; ++w) merge(m, s, sm[w], ss[w]);
      const ACC lse = m + log(s);
      const i64 t = target_of(targets, p, r, flag);
      const ACC nll = t == p.ignore_index ? (ACC)0 : lse - cvt<ACC>(row[t * p.x.strides[1]]);
      packed[p.out_offset + 2 * r] = (P)nll;
      packed[p.out_offset + 2 * r + 1] = (P)lse;
    }
    __syncthreads();  // sm/ss are reused by the next row
  }
}

// out may be x itself (the scheduler writes the gradient over dying logits): each element is
// read before its own gradient is stored, so x and out are not __restrict__.
extern "C" __global__ void __launch_bounds__(256) cross_entropy_backward_rows(
    const T* x, const IDX* __restrict__ targets, const P* __restrict__ packed, const P* __restrict__ grad,
    T* out, u64* flag, const CrossEntropyParams p) {
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* row = x + at(p.x, r * p.classes);
    T* orow = out + p.out_offset + r * p.classes;
    const i64 t = target_of(targets, p, r, flag);
    const ACC lse = (ACC)packed[at(p.packed, 2 * r + 1)];
    const ACC g_nll = t == p.ignore_index ? (ACC)0 : (ACC)grad[at(p.grad, 2 * r)];
    const ACC scale = g_nll + (ACC)grad[at(p.grad, 2 * r + 1)];
#if VEC
    for (i64 c = (i64)threadIdx.x * VW; c < p.classes; c += 256 * VW) {
      ACC v[VW];
      load_vec(row, c, v);
      uint4 raw;
      T* e = (T*)&raw;
#pragma unroll
      for (int i = 0; i < VW; ++i) e[i] = cvt<T>(scale * exp(v[i] - lse) - (c + i == t ? g_nll : (ACC)0));
      *(uint4*)(orow + c) = raw;
    }
#else
    for (i64 c = threadIdx.x; c < p.classes; c += 256)
      orow[c] = cvt<T>(scale * exp(cvt<ACC>(row[c * p.x.strides[1]]) - lse) - (c == t ? g_nll : (ACC)0));
#endif
  }
}
