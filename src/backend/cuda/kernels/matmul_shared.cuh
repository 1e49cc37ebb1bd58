// What the tensor-core matrix kernels (matmul_tc.cu, matmul_wgmma.cu) share: their
// parameters, and the stores of results through the optional fused epilogue (EPILOGUE 1:
// the host prepended EpiParams, epilogue_bases(), epilogue_load/apply() and epilogue_at()):
// a pair of adjacent results from registers, or a whole block tile staged in shared memory.

struct MatmulParams {
  View a_batch, b_batch;
  i64 a_rs, a_cs, b_rs, b_cs;
  i64 M, N, K, batch, out_offset;
  int batch_rank;
};

__device__ __forceinline__ void store_pair(float* o, float x0, float x1) { *(float2*)o = make_float2(x0, x1); }
__device__ __forceinline__ void store_pair(__nv_bfloat16* o, float x0, float x1) {
  *(__nv_bfloat162*)o = __floats2bfloat162_rn(x0, x1);
}
__device__ __forceinline__ void store_pair(__half* o, float x0, float x1) { *(__half2*)o = __floats2half2_rn(x0, x1); }

#if EPILOGUE
#define EPI_PARAM , const EpiParams e
#define EPI_BASES(z) \
  i64 eb[4];         \
  epilogue_bases(z, e, eb)
#define EPI_ARG , eb, e
#define EPI_STORE_PARAM , const i64 eb[4], const EpiParams& e
#else
#define EPI_PARAM
#define EPI_BASES(z) (void)0
#define EPI_ARG
#define EPI_STORE_PARAM
#endif

// One paired store where both columns are in range and the pair's first element sits at an
// even index (aligned for the pair's width); single stores at the edges.
__device__ __forceinline__ void store_result_pair(TO* __restrict__ out, const MatmulParams& p, i64 z, i64 gm, i64 gn,
                                                  float a0, float a1 EPI_STORE_PARAM) {
  if (gm >= p.M || gn >= p.N) return;
  const i64 at = p.out_offset + (z * p.M + gm) * p.N + gn;
#if EPILOGUE
  const float x0 = epilogue_at(a0, eb, gm, gn, e);
  const float x1 = gn + 1 < p.N ? epilogue_at(a1, eb, gm, gn + 1, e) : 0.0f;
#else
  const float x0 = a0, x1 = a1;
#endif
  if (gn + 1 < p.N && (at & 1) == 0) {
    store_pair(out + at, x0, x1);
  } else {
    out[at] = cvt<TO>(x0);
    if (gn + 1 < p.N) out[at + 1] = cvt<TO>(x1);
  }
}

#ifdef BN
// A block's ROWS x BN results, staged as f32 in shared memory (`tile`, rows TILE_LD floats
// apart: the padding puts the 8 rows a warp writes from its fragments in distinct banks),
// stored with the epilogue applied by THREADS threads. Thread i owns 4 consecutive columns of
// every (THREADS / (BN / 4))-th row: the warp's loads of epilogue inputs and its stores to `out` are
// contiguous along the row (16-byte vectors where aligned). The epilogue first loads the
// inputs of 8 rows into registers, then computes, so their latencies overlap instead of
// adding up element by element.
#define TILE_LD (BN + 8)
// `tid`: the thread's index among those that store.
template <int ROWS, int THREADS>
__device__ __forceinline__ void store_tile(float* tile, TO* __restrict__ out, const MatmulParams& p, i64 z, i64 m0,
                                           i64 n0, int tid EPI_STORE_PARAM) {
  constexpr int kThreadsPerRow = BN / 4, kRowsPerPass = THREADS / kThreadsPerRow, kPasses = ROWS / kRowsPerPass;
  static_assert(THREADS % kThreadsPerRow == 0 && ROWS % kRowsPerPass == 0, "whole rows a pass, whole passes a tile");
  const int c0 = (tid % kThreadsPerRow) * 4, r0 = tid / kThreadsPerRow;
  const i64 gn0 = n0 + c0;
#if EPILOGUE
  constexpr int kBatch = MIN_BLOCKS > 1 ? 4 : 8;  // two blocks per SM: half the registers
#pragma unroll 1
  for (int pb = 0; pb < kPasses; pb += kBatch) {
    EpiIn in[kBatch][4] = {};
    const int count = gn0 < p.N ? (int)min((i64)4, p.N - gn0) : 0;
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const i64 gm = m0 + (pb + q) * kRowsPerPass + r0;
      if (gm < p.M) epilogue_load_row<4>(eb, gm, gn0, count, e, in[q]);
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      float* v = tile + ((pb + q) * kRowsPerPass + r0) * TILE_LD + c0;
#pragma unroll
      for (int c = 0; c < 4; ++c) v[c] = epilogue_apply(v[c], in[q][c]);
    }
  }
#endif
#pragma unroll 4
  for (int pass = 0; pass < kPasses; ++pass) {
    const int r = pass * kRowsPerPass + r0;
    const i64 gm = m0 + r;
    if (gm >= p.M || gn0 >= p.N) continue;
    const float4 v = *(const float4*)(tile + r * TILE_LD + c0);
    const i64 at = p.out_offset + (z * p.M + gm) * p.N + gn0;
    if (gn0 + 3 < p.N && (at & 3) == 0) {
      store_pair(out + at, v.x, v.y);
      store_pair(out + at + 2, v.z, v.w);
    } else {
      const float x[4] = {v.x, v.y, v.z, v.w};
      for (int c = 0; c < 4 && gn0 + c < p.N; ++c) out[at + c] = cvt<TO>(x[c]);
    }
  }
}
#endif

// Split-K's second half (the host cut K into `splits` slices, each a batch item whose f32
// product went to partial[s]): out = the sum of the slices, in slice order, through the
// product's epilogue if it has one (rows of n).
extern "C" __global__ void matmul_split_sum(const float* __restrict__ partial, TO* __restrict__ out, i64 mn, i64 splits,
                                            i64 out_offset, i64 n EPI_PARAM) {
  EPI_BASES(0);
  ALK_FOR(i, mn) {
    float acc = 0.0f;
    for (i64 s = 0; s < splits; ++s) acc += partial[s * mn + i];
#if EPILOGUE
    acc = epilogue_at(acc, eb, i / n, i % n, e);
#else
    (void)n;
#endif
    out[out_offset + i] = cvt<TO>(acc);
  }
}
