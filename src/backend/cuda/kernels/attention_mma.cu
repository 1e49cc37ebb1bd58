// Scaled dot-product attention on the tensor cores, for ops that allow bf16 products
// (AttentionParams::reduced_precision, set under autocast): q, k, v and dout are read in
// their storage type T and rounded to bf16 as tiles enter shared memory; every product is an
// mma.sync m16n8k16 (bf16 in, f32 accumulate); the online softmax, the logsumexp and the
// accumulators stay f32. Defines: T (the storage of q, k, v and dout: f32/bf16/f16), TF (the
// forward output's: f32 when packed with its logsumexps, 16-bit when they are kept apart
// (AttnParams::lse_at)), TG (the gradients'), HD (the head dim, a
// multiple of 16 up to 128), T_BF16 (1 when T is bf16: tiles are then copied to shared
// memory as they are, by cp.async, while the previous tile is being multiplied).
// AttnParams and limit_of(): attention_shared.cuh.
//
// The FlashAttention-2 arrangement. Forward: a block of 8 warps owns 128 queries (16 rows
// per warp, the m of every mma) and walks the keys in tiles of 64. Backward, one pass: 4 or 8
// warps own 64 or 128 keys and walk the query tiles that see them, computing the transposed scores
// K Q^T so that P^T and dS^T come out of the accumulators already in the A-operand layout
// (an m16n8 accumulator pair is an m16k16 A fragment) for dV += P^T dO and dK += dS^T Q;
// dS^T goes through shared memory once for dQ += dS K, which every key block adds into an
// f32 accumulator with atomic adds (attention_backward_prep zeroes it and computes each row's
// delta = rowsum(dO * O) and log2-domain logsumexp before; attention_backward_dq_finish scales
// and stores it after).
// Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 g + c; an accumulator holds rows g and
// g + 8, columns 2c and 2c + 1. Masks are computed only on tiles that cross the causal
// diagonal (or the end of the rows); a warp skips a tile none of whose columns it sees.
//
// LPT: every tensor-core kernel here runs on a grid (batch, tile), so blocks start batch by
// batch for one tile index, x fastest. Under a causal mask a forward block's work grows with its
// query tile and a backward block's shrinks with its key tile: the forward numbers its tiles from
// the last, so each wave starts the longest blocks left and the last wave holds the short ones
// (longest processing time first, as FlashAttention's causal schedulers). Measured on the H200
// (thirteenth session): no change in GPT-2's step against tile-fastest order; kept because the
// batch in x lifts y's limit of 65535 off batch x heads.

#define OWN 128           // queries a forward block owns, 16 per warp
#define THREADS 256       // the forward's 8 warps
#define STREAM 64         // rows of the tiles a block walks through: keys (forward, dq) or queries (dk/dv)
#define LDS (HD + 8)      // shared-memory row pitch in elements: 16 bytes of padding keeps ldmatrix conflict-free
#define DLS (STREAM + 8)  // the same for the backward's dS^T tile, whose rows are STREAM queries
#define NT (STREAM / 8)   // n-tiles of 8 across a streamed tile
#define KD (HD / 16)      // k-steps of 16 across the head dim
#define DT (HD / 8)       // n-tiles of 8 across the head dim
#define LOG2E 1.4426950408889634f
#ifndef TF
#define TF T
#endif
#ifndef TG
#define TG T
#endif
#ifndef T_BF16
#define T_BF16 0
#endif
#define LN2 0.6931471805599453f

// The block's batch item and tile index on the (batch, tile) grid (LPT above): last_first
// numbers the tiles from the last.
__device__ __forceinline__ void block_tile(bool last_first, i64& b, i64& tile) {
  b = blockIdx.x, tile = last_first ? gridDim.y - 1 - blockIdx.y : blockIdx.y;
}

__device__ __forceinline__ void mma_bf16(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two f32 values as one bf16x2 register, the lower column in the low half.
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(const unsigned*)&v;
}

// Accumulators n-tiles j and j + 1 (16 rows x 16 columns) as the A fragment of the next
// product, whose k runs over those 16 columns.
__device__ __forceinline__ void acc_to_a(unsigned a[4], const float x[4], const float y[4]) {
  a[0] = pack_bf16(x[0], x[1]), a[1] = pack_bf16(x[2], x[3]), a[2] = pack_bf16(y[0], y[1]), a[3] = pack_bf16(y[2], y[3]);
}

// Four consecutive elements as f32 (one 16-byte load for f32, one 8-byte load for 16-bit).
__device__ __forceinline__ float4 load4(const float* p) { return *(const float4*)p; }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const uint2 u = *(const uint2*)p;
  const float2 a = __bfloat1622float2(*(const __nv_bfloat162*)&u.x), b = __bfloat1622float2(*(const __nv_bfloat162*)&u.y);
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 load4(const __half* p) {
  const uint2 u = *(const uint2*)p;
  const float2 a = __half22float2(*(const __half2*)&u.x), b = __half22float2(*(const __half2*)&u.y);
  return make_float4(a.x, a.y, b.x, b.y);
}

// Rows [r0, r0 + N) of a [rows, HD] view (row stride rs, column stride cs, first element
// base) into shared memory as bf16, dst[r * LDS + d]; rows past `rows` are zero. Rows that
// are contiguous and start at multiples of 4 elements are read 4 elements per load, each
// thread stepping one pointer down its column of vectors.
template <int N, int NTH>
__device__ __forceinline__ void load_tile(h16* dst, const T* __restrict__ src, i64 base, i64 rs, i64 cs, i64 r0, i64 rows) {
  if (cs == 1 && rs % 4 == 0 && base % 4 == 0) {
    constexpr int per_row = HD / 4, rows_per_pass = NTH / per_row;
    const int r = threadIdx.x / per_row, d = (threadIdx.x % per_row) * 4;
    const T* p = src + base + (r0 + r) * rs + d;
    const i64 step = rows_per_pass * rs;
    const int left = (int)min((i64)N, max((i64)0, rows - r0));  // rows of this tile that exist
#pragma unroll
    for (int i = 0; i < N / rows_per_pass; ++i, p += step) {
      const int row = r + i * rows_per_pass;
      const float4 x = row < left ? load4(p) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y), hi = __floats2bfloat162_rn(x.z, x.w);
      *(uint2*)(dst + row * LDS + d) = make_uint2(*(const unsigned*)&lo, *(const unsigned*)&hi);
    }
    return;
  }
  for (int e = threadIdx.x; e < N * HD; e += NTH) {
    const int r = e / HD, d = e % HD;
    const float x = r0 + r < rows ? cvt<float>(src[base + (r0 + r) * rs + d * cs]) : 0.0f;
    dst[r * LDS + d] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
}

// Whether rows of a view go to shared memory as they are, by 16-byte cp.async: bf16 storage,
// contiguous rows starting on 16-byte boundaries (base and row stride in elements).
__device__ __forceinline__ bool rows_async(i64 base, i64 rs, i64 cs) {
  return T_BF16 && cs == 1 && rs % 8 == 0 && base % 8 == 0;
}

// A thread's share of copying [N, HD] tiles of a view into shared memory by cp.async (the
// rows_async case; the caller commits and waits): 16-byte chunk `tr % CHUNKS` of rows tr,
// tr + RPP, ... (tr = threadIdx.x / CHUNKS). The pointers are set up once per block, so a
// tile costs a multiply and a few adds per copy, not the view's index arithmetic.
template <int N, int NTH>
struct TileCopy {
  static constexpr int CHUNKS = HD / 8, RPP = NTH / CHUNKS, PASSES = (N + RPP - 1) / RPP;
  const T* src;  // this thread's chunk in row tr of the view
  i64 rs, step;  // the view's row stride; RPP rows of it
  unsigned dst;  // the chunk's shared-memory address in the tile at `tile`
  int tr;
  __device__ __forceinline__ TileCopy(const T* __restrict__ view, i64 base, i64 rs_, const h16* tile) {
    tr = threadIdx.x / CHUNKS;
    const int d = (threadIdx.x % CHUNKS) * 8;
    src = view + base + tr * rs_ + d;
    rs = rs_, step = RPP * rs_;
    dst = smem_u32(tile + tr * LDS + d);
  }
  // Rows [r0, r0 + N) into the tile `offset` bytes past the constructor's; rows past `rows` are zeros.
  __device__ __forceinline__ void copy(int r0, int rows, unsigned offset) const {
    const T* from = src + r0 * rs;
#pragma unroll
    for (int i = 0; i < PASSES; ++i, from += step) {
      const int row = tr + i * RPP;
      if (RPP * PASSES > N && row >= N) break;  // fewer rows than threads (small head dims)
      const bool ok = r0 + row < rows;
      cp_async16(dst + offset + i * RPP * LDS * 2, ok ? (const void*)from : (const void*)src, ok);
    }
  }
};

// A 4-byte cp.async (one f32 of per-row statistics); valid == false writes a zero.
__device__ __forceinline__ void cp_async4(unsigned smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 4 : 0));
}

// Two adjacent f32 added into global memory by one instruction (sm_90's vector reduction).
__device__ __forceinline__ void red_add2(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// A fragments of the warp's 16 rows of a tile (rows 16 w ..), all KD k-steps of the head dim.
__device__ __forceinline__ void load_a_rows(unsigned f[KD][4], const h16* tile, int warp, int lane) {
#pragma unroll
  for (int kc = 0; kc < KD; ++kc) ldmatrix_x4(f[kc], tile + (warp * 16 + (lane & 15)) * LDS + kc * 16 + (lane >> 4) * 8);
}

// acc[j] (16 x 8, j < NT) += A (16 x HD, fragments f) times tile^T: the streamed tile's rows
// are the n index (keys or queries), its head dim the k index.
__device__ __forceinline__ void mul_tile_t(float acc[NT][4], const unsigned f[KD][4], const h16* tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < KD; ++kc)
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      unsigned r[4];
      ldmatrix_x4(r, tile + (j * 8 + (lane & 7) + (lane >> 4) * 8) * LDS + kc * 16 + ((lane >> 3) & 1) * 8);
      mma_bf16(acc[j], f[kc], r[0], r[1]);
      mma_bf16(acc[j + 1], f[kc], r[2], r[3]);
    }
}

// acc[n] (16 x 8, n < DT) += A (16 x 16, fragment a) times rows [16 kc, 16 kc + 16) of tile:
// the tile's rows are the k index, its head dim the n index.
__device__ __forceinline__ void mul_rows(float acc[DT][4], const unsigned a[4], const h16* tile, int kc, int lane) {
#pragma unroll
  for (int n = 0; n < DT; n += 2) {
    unsigned r[4];
    ldmatrix_x4_trans(r, tile + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + n * 8 + (lane >> 4) * 8);
    mma_bf16(acc[n], a, r[0], r[1]);
    mma_bf16(acc[n + 1], a, r[2], r[3]);
  }
}

// acc[n] (16 x 8, n < DT) += P (16 x STREAM, accumulators p) times tile: the streamed
// tile's rows are the k index, its head dim the n index.
__device__ __forceinline__ void mul_tile(float acc[DT][4], const float p[NT][4], const h16* tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < STREAM / 16; ++kc) {
    unsigned a[4];
    acc_to_a(a, p[2 * kc], p[2 * kc + 1]);
    mul_rows(acc, a, tile, kc, lane);
  }
}

template <int N>
__device__ __forceinline__ void zero(float x[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
}
// Accumulators a wgmma product wrote, read only after this point: an empty asm that claims to
// change them keeps the compiler from moving their reads above the wait that retires the
// product (the registers are an asynchronous instruction's until then).
template <int N>
__device__ __forceinline__ void fence_operands(float x[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(x[i][0]), "+f"(x[i][1]), "+f"(x[i][2]), "+f"(x[i][3])::"memory");
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Columns [lo, hi) of a streamed tile are visible to accumulator row r (as ints relative to
// the tile); the rest become -inf (scores) or 0 (probabilities) through `masked`.
__device__ __forceinline__ bool masked(int j, int e, int c, int lo, int hi) {
  const int col = j * 8 + 2 * c + (e & 1);
  return col < lo || col >= hi;
}
__device__ __forceinline__ int clamp_cols(i64 x) { return (int)min((i64)STREAM, max((i64)0, x)); }

// The online softmax over one key tile's scores s (the accumulators of the warp's 16 rows x
// STREAM keys): the running max m (log2 domain) and sum l (this thread's columns) updated, s
// turned into the tile's probabilities, corr the factor the rows' output so far is to be
// rescaled by (rescale_rows). The max is taken over the raw scores, so scaling into the log2
// domain and subtracting it is one FFMA per score.
__device__ __forceinline__ void softmax_tile(float s[NT][4], float m[2], float l[2], int s0, i64 warp_all,
                                             const i64 lim[2], float sl2, int c, float corr[2]) {
  float mx[2] = {-(float)ALK_INF, -(float)ALK_INF};
  if (s0 + STREAM - 1 <= warp_all) {  // no key of the tile is masked for the warp
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
  } else {
    const int hi[2] = {clamp_cols(lim[0] - s0 + 1), clamp_cols(lim[1] - s0 + 1)};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = masked(j, e, c, 0, hi[e >> 1]) ? -(float)ALK_INF : s[j][e];
        s[j][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
  }
  float shift[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // The running max in the log2 domain (sl2 > 0 keeps the order of the raw scores).
    const float tile_max = quad_max(mx[r]) * sl2, now = fmaxf(m[r], tile_max);
    // Nothing seen yet (max -inf): every term is 0; shift by 0 so no -inf - -inf NaN appears.
    shift[r] = now == -(float)ALK_INF ? 0.0f : now;
    corr[r] = exp2_ftz(m[r] - shift[r]);
    m[r] = now;
    l[r] *= corr[r];
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = exp2_ftz(fmaf(s[j][e], sl2, -shift[e >> 1]));
      s[j][e] = x;
      l[e >> 1] += x;
    }
}
__device__ __forceinline__ void rescale_rows(float o[DT][4], const float corr[2]) {
#pragma unroll
  for (int n = 0; n < DT; ++n) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
}

// One key/value tile of the forward for the warp's 16 rows: scores, the online softmax, and
// o accumulated.
__device__ __forceinline__ void attend_tile(float o[DT][4], float m[2], float l[2], const unsigned qf[KD][4],
                                            const h16* K_tile, const h16* V_tile, int s0, i64 warp_all,
                                            const i64 lim[2], float sl2, int lane, int c) {
  float s[NT][4];
  zero<NT>(s);
  mul_tile_t(s, qf, K_tile, lane);
  float corr[2];
  softmax_tile(s, m, l, s0, warp_all, lim, sl2, c, corr);
  rescale_rows(o, corr);
  mul_tile(o, s, V_tile, lane);
}

// The forward's results for the thread's two rows (row[r], this thread's columns of o): the
// rows normalized, and each row's logsumexp (natural log).
__device__ __forceinline__ void store_rows(TF* __restrict__ out, const AttnParams& p, i64 b, const i64 row[2],
                                           const float o[DT][4], const float m[2], const float l[2], int c) {
  const i64 ob = p.lse_at >= 0 ? lead_offset(p.o, b) : 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    if (row[r] >= p.Tq) continue;
    // A row that sees no key (causal with S < Tq) is 0, its logsumexp -inf (the CPU's rule).
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    const float lse = sum > 0 ? (m[r] + log2f(sum)) * LN2 : -(float)ALK_INF;
    TF* dst = p.lse_at >= 0 ? out + ob + row[r] * p.o_rs : out + p.out_offset + (b * p.Tq + row[r]) * (HD + 1);
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      dst[n * 8 + 2 * c] = cvt<TF>(o[n][2 * r] * inv);
      dst[n * 8 + 2 * c + 1] = cvt<TF>(o[n][2 * r + 1] * inv);
    }
    if (c != 0) continue;
    if (p.lse_at >= 0) ((float*)(out + p.lse_at))[b * p.Tq + row[r]] = lse;
    else dst[HD] = cvt<TF>(lse);
  }
}

// Scores scaled into the log2 domain (exp2 is one instruction). Kept above zero: a zero scale
// would make a masked score's -inf * 0 a NaN; 1e-30 changes no finite score measurably.
__device__ __forceinline__ float log2_scale(const AttnParams& p) { return fmaxf((float)p.scale * LOG2E, 1e-30f); }

// out [B, Tq, HD + 1]: the output rows and each row's logsumexp of scaled scores; or (p.lse_at
// >= 0) the rows where p.o puts them and the logsumexps apart, as f32.
extern "C" __global__ void __launch_bounds__(THREADS, HD <= 64 ? 2 : 1) attention_forward_mma(const T* __restrict__ q,
                                                                           const T* __restrict__ k,
                                                                           const T* __restrict__ v, TF* __restrict__ out,
                                                                           const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Qs = smem;                   // [OWN][LDS]
  h16* Ks = Qs + OWN * LDS;         // [2][STREAM][LDS]: the tile in use and the next
  h16* Vs = Ks + 2 * STREAM * LDS;  // [2][STREAM][LDS]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  i64 b, t0;
  block_tile(true, b, t0);
  t0 *= OWN;
  const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
  const bool async = rows_async(kb, p.k_rs, p.k_cs) && rows_async(vb, p.v_rs, p.v_cs);
  load_tile<OWN, THREADS>(Qs, q, lead_offset(p.q, b), p.q_rs, p.q_cs, t0, p.Tq);
  const TileCopy<STREAM, THREADS> kcopy(k, kb, p.k_rs, Ks), vcopy(v, vb, p.v_rs, Vs);
  const int S = (int)p.S;
  auto fetch = [&](int s0, int stage) {  // key/value tile s0 into `stage`, one commit group
    if (async) {
      kcopy.copy(s0, S, stage * STREAM * LDS * 2);
      vcopy.copy(s0, S, stage * STREAM * LDS * 2);
    } else {
      load_tile<STREAM, THREADS>(Ks + stage * STREAM * LDS, k, kb, p.k_rs, p.k_cs, s0, p.S);
      load_tile<STREAM, THREADS>(Vs + stage * STREAM * LDS, v, vb, p.v_rs, p.v_cs, s0, p.S);
    }
    cp_async_commit();
  };
  fetch(0, 0);
  __syncthreads();
  unsigned qf[KD][4];
  load_a_rows(qf, Qs, warp, lane);
  const i64 row[2] = {t0 + warp * 16 + g, t0 + warp * 16 + g + 8};
  const i64 lim[2] = {limit_of(p, row[0]), limit_of(p, row[1])};
  // The warp's rows see keys up to limit_of(first row) all, and none past limit_of(last row).
  const i64 warp_all = limit_of(p, t0 + warp * 16), warp_any = limit_of(p, t0 + warp * 16 + 15);
  const float sl2 = log2_scale(p);
  float m[2] = {-(float)ALK_INF, -(float)ALK_INF}, l[2] = {0.0f, 0.0f};  // l: this thread's columns only
  float o[DT][4];
  zero<DT>(o);
  const int block_last = (int)limit_of(p, min(p.Tq - 1, t0 + OWN - 1));
  int stage = 0;
  for (int s0 = 0; s0 <= block_last; s0 += STREAM, stage ^= 1) {
    const bool more = s0 + STREAM <= block_last;
    if (more) fetch(s0 + STREAM, stage ^ 1);  // in flight while this tile is multiplied
    if (more) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    const h16* K_tile = Ks + stage * STREAM * LDS;
    const h16* V_tile = Vs + stage * STREAM * LDS;
    if (s0 <= warp_any) attend_tile(o, m, l, qf, K_tile, V_tile, s0, warp_all, lim, sl2, lane, c);
    __syncthreads();  // the stage is consumed before the next iteration refills it
  }
  store_rows(out, p, b, row, o, m, l, c);
}

#if ATTN_WGMMA
// Results of the warpgroup kernels leave through shared memory: a warp's accumulators hold
// rows g and g + 8 in pairs of columns, so stored straight to global memory they are 2-byte
// stores eight rows apart (Nsight Compute, thirteenth session: the backward's dk/dv stores and
// the wait for them to drain before the block exits were ~20% of its warps' stall samples,
// with one block per SM and nothing else to run). Each thread's pairs go into 128-byte
// swizzled rows (conflict-free: the eight rows of a quad column land in different banks),
// then the warpgroup copies whole rows out 16 bytes a thread.
template <class V>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
  V v[2] = {cvt<V>(lo), cvt<V>(hi)};
  return *(const unsigned*)v;
}
// The warp's 16 rows (16 * warp + g, + 8) of 64 columns, times `scale`, into `tile` (64 rows).
template <class V>
__device__ __forceinline__ void stage_rows(unsigned char* tile, const float acc[DT][4], float scale, int warp, int g,
                                           int c) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int n = 0; n < DT; ++n)
      *(unsigned*)(tile + swizzled(warp * 16 + g + 8 * r, n) + 4 * c) =
          pack_pair<V>(acc[n][2 * r] * scale, acc[n][2 * r + 1] * scale);
}
// The 64 staged rows to dst + r * rs (r < rows), by the warpgroup's thread t; the caller has
// synchronized the warpgroup after stage_rows.
template <class V>
__device__ __forceinline__ void copy_staged_rows(V* __restrict__ dst, i64 rs, i64 rows, const unsigned char* tile, int t) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (t + 128 * i) >> 3, j = (t + 128 * i) & 7;
    if (r < rows) *(uint4*)(dst + r * rs + j * 8) = *(const uint4*)(tile + swizzled(r, j));
  }
}
// Warpgroup wg's 128 threads wait for each other (named barrier 1 + wg; 0 is __syncthreads).
// Immediate ids: with an id in a register ptxas reserves all 16 barriers for the block.
__device__ __forceinline__ void warpgroup_sync(int wg) {
  if (wg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}
// The thread's bulk operations but the newest group have read their shared memory (when `leader`).
__device__ __forceinline__ void bulk_wait_read1(unsigned leader) {
  asm volatile("{\n.reg .pred leader;\nsetp.ne.u32 leader, %0, 0;\n@leader cp.async.bulk.wait_group.read 1;\n}\n" ::"r"(leader)
               : "memory");
}
// Whether a 16-bit element offset is 16 bytes aligned.
__device__ __forceinline__ bool vector_aligned(i64 elements) { return (elements & 7) == 0; }

// The forward on Hopper's warpgroup instructions (sm_90a; bf16 q, k, v whose rows are 16-byte
// copyable; HD = 64, so a row is one 128-byte swizzled line). A block of two warpgroups owns
// 128 queries, 64 a warpgroup, and walks the key tiles of 64 (a four-stage ring of keys and
// values, two tiles copied ahead). Per tile j a warpgroup
// issues S_j = Q K_j^T (wgmma, both operands from shared memory through descriptors) and then
// the previous tile's O += P_{j-1} V_{j-1} (P from registers as the A operand: an accumulator
// pair is an A fragment; V read transposed), and runs tile j's online softmax while the
// second product is in flight (FlashAttention-3's overlap within a warpgroup); O is rescaled
// once that product is done. The accumulators of a warp have the mma kernel's layout (rows
// 16 w + g and + 8, columns 8 j + 2 c (+1)), so softmax_tile is shared. Host side: wgmma_tile
// (A and B in shared memory) and wgmma_tile_ra (A in registers, B transposed) for n = 64.
//
// Tiles come in by bulk tensor copies (TMA): `tq`, `tk`, `tv` are rank-5 maps of the views
// (head dim, rows, then the batch dims fastest first, `batch_fast` and `batch_mid` of them
// unravelling the block's batch item; boxes of 128 query rows or 64 key rows, zero past the
// edges), issued by thread 0. Stage s of the ring has a `full` barrier (the copies landed)
// and an `empty` one (both warpgroups' last product reading it retired: V_j's, in iteration
// j + 1), so the warpgroups meet no block barrier in the loop. Until the fifteenth session the
// block's 256 threads copied each tile by cp.async, ~90 instructions a warp and tile of
// address arithmetic and a block barrier (bench/cuda/NOTES.md).
#define KV_STAGES 4
extern "C" __global__ void __launch_bounds__(256, 2)
    attention_forward_wgmma(const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tk,
                            const __grid_constant__ TensorMap tv, TF* __restrict__ out, const AttnParams p,
                            unsigned batch_fast, unsigned batch_mid) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Swizzled tiles sit on 1024-byte boundaries (the host asks for 1 KiB extra). Q: 128 rows;
  // K and V: KV_STAGES stages of 64 rows each; then the barriers: full[KV_STAGES],
  // empty[KV_STAGES], Q's.
  const unsigned qs = (smem_u32(smem_raw) + 1023u) & ~1023u, ks = qs + 128 * 128, vs = ks + KV_STAGES * STREAM * 128;
  const unsigned full = vs + KV_STAGES * STREAM * 128, empty = full + 8 * KV_STAGES, q_full = empty + 8 * KV_STAGES;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;
  i64 b, t0;
  block_tile(true, b, t0);
  t0 *= 128;
  // The batch item's coordinates in the maps' batch dims (32-bit: the grid's x).
  const unsigned bi = (unsigned)b, b_mid = bi / batch_fast;
  const int c_fast = (int)(bi - b_mid * batch_fast), c_mid = (int)(b_mid % batch_mid), c_slow = (int)(b_mid / batch_mid);
  // The block's tiles. Both warpgroups take every one: a tile the first sees none of (the
  // diagonal's last) is all masked and adds nothing; skipping it would put the wgmma
  // instructions on a path the compiler cannot prove warpgroup-uniform, and it serializes them.
  const int tiles = (int)(limit_of(p, min(p.Tq - 1, t0 + 127)) + STREAM) / STREAM;
  auto fetch = [&](int j) {  // key/value tile j into stage j % KV_STAGES (thread 0)
    const int s = j % KV_STAGES;
    mbar_expect_tx(full + 8 * s, 2 * STREAM * 128);
    tma_load_5d(ks + s * STREAM * 128, tk, full + 8 * s, 0, j * STREAM, c_fast, c_mid, c_slow);
    tma_load_5d(vs + s * STREAM * 128, tv, full + 8 * s, 0, j * STREAM, c_fast, c_mid, c_slow);
  };
  if (tid == 0) {
    for (int s = 0; s < KV_STAGES; ++s) mbar_init(full + 8 * s, 1), mbar_init(empty + 8 * s, 2);
    mbar_init(q_full, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    mbar_expect_tx(q_full, 128 * 128);
    tma_load_5d(qs, tq, q_full, 0, (int)t0, c_fast, c_mid, c_slow);
    for (int j = 0; j < min(tiles, KV_STAGES - 1); ++j) fetch(j);
  }
  __syncthreads();  // the barriers are initialized
  const i64 row[2] = {t0 + wg * 64 + warp * 16 + g, t0 + wg * 64 + warp * 16 + g + 8};
  const i64 lim[2] = {limit_of(p, row[0]), limit_of(p, row[1])};
  // The warp's rows see keys up to limit_of(first row) all.
  const i64 warp_all = limit_of(p, t0 + wg * 64 + warp * 16);
  const float sl2 = log2_scale(p);
  float m[2] = {-(float)ALK_INF, -(float)ALK_INF}, l[2] = {0.0f, 0.0f};
  float o[DT][4];
  zero<DT>(o);
  const unsigned q_rows = qs + wg * 64 * 128;
  unsigned a[STREAM / 16][4];  // P of the previous tile
  // O += P V for tile j's values, P in `a`, issued and committed (the caller waits).
  auto multiply_pv = [&](int j) {
    const unsigned v_tile = vs + (j % KV_STAGES) * STREAM * 128;
#pragma unroll
    for (int kc = 0; kc < STREAM / 16; ++kc)
      wgmma_tile_ra(reinterpret_cast<float(&)[DT * 4]>(o), a[kc], smem_desc(v_tile + kc * 16 * 128, STREAM * 128, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  };
  // Tile j's stage is free once both warpgroups' P V product of it retired.
  auto release = [&](int j) {
    if (tid % 128 == 0) mbar_arrive(empty + 8 * (j % KV_STAGES));
  };
  mbar_wait(q_full, 0);
  for (int j = 0; j < tiles; ++j) {
    // Thread 0 keeps the ring KV_STAGES - 2 tiles ahead of this one: tile j + 2 takes the
    // stage of tile j - 2, whose P V product both warpgroups retired in iteration j - 1 (that
    // stage's `empty` phase); tile j - 1's values are still being read. The first
    // KV_STAGES - 1 tiles went before the loop.
    const int ahead = j + KV_STAGES - 2;
    if (tid == 0 && ahead < tiles && ahead >= KV_STAGES - 1) {
      if (ahead >= KV_STAGES) mbar_wait(empty + 8 * (ahead % KV_STAGES), (ahead / KV_STAGES - 1) & 1);
      fetch(ahead);
    }
    mbar_wait(full + 8 * (j % KV_STAGES), (j / KV_STAGES) & 1);  // tile j landed
    float s[NT][4];
    zero<NT>(s);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const unsigned k_tile = ks + (j % KV_STAGES) * STREAM * 128;
#pragma unroll
    for (int kc = 0; kc < KD; ++kc)
      wgmma_tile(reinterpret_cast<float(&)[NT * 4]>(s), smem_desc(q_rows + kc * 32, 16, 1024),
                 smem_desc(k_tile + kc * 32, 16, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    if (j > 0) {
      multiply_pv(j - 1);
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // S_j done, P V in flight
    } else {
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    float corr[2];
    softmax_tile(s, m, l, j * STREAM, warp_all, lim, sl2, c, corr);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");  // O and a are free
    if (j > 0) release(j - 1);
    rescale_rows(o, corr);
#pragma unroll
    for (int kc = 0; kc < STREAM / 16; ++kc) acc_to_a(a[kc], s[2 * kc], s[2 * kc + 1]);
  }
  if (tiles > 0) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    multiply_pv(tiles - 1);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  const i64 ob = p.lse_at >= 0 ? lead_offset(p.o, b) : 0;
  if (sizeof(TF) != 2 || p.lse_at < 0 || p.o_cs != 1 || !vector_aligned(ob | p.o_rs) || ((u64)out & 15) != 0) {
    store_rows(out, p, b, row, o, m, l, c);
    return;
  }
  // The rows through this warpgroup's Q rows (its last S product has retired; the other
  // warpgroup never reads them), then the logsumexps.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    // A row that sees no key (causal with S < Tq) is 0, its logsumexp -inf (the CPU's rule).
    inv[r] = sum > 0 ? 1.0f / sum : 0.0f;
    if (c == 0 && row[r] < p.Tq)
      ((float*)(out + p.lse_at))[b * p.Tq + row[r]] = sum > 0 ? (m[r] + log2f(sum)) * LN2 : -(float)ALK_INF;
  }
#pragma unroll
  for (int n = 0; n < DT; ++n) o[n][0] *= inv[0], o[n][1] *= inv[0], o[n][2] *= inv[1], o[n][3] *= inv[1];
  unsigned char* tile = smem_raw + (q_rows - smem_u32(smem_raw));
  stage_rows<TF>(tile, o, 1.0f, warp, g, c);
  warpgroup_sync(wg);
  const i64 first = t0 + wg * 64;
  copy_staged_rows<TF>(out + ob + first * p.o_rs, p.o_rs, p.Tq - first, tile, tid % 128);
}
#endif  // ATTN_WGMMA

// Query row t's logsumexp (of scaled scores, natural log) in batch b: after the row's outputs
// (ob: lead_offset(p.o, b)), or apart as f32 (p.lse_at).
__device__ __forceinline__ float lse_of(const TF* __restrict__ fwd, const AttnParams& p, i64 b, i64 t, i64 ob) {
  return p.lse_at >= 0 ? ((const float*)(fwd + p.lse_at))[b * p.Tq + t] : cvt<float>(fwd[ob + t * p.o_rs + HD * p.o_cs]);
}

// ---- the one-pass backward ----

#ifndef KWARPS
#define KWARPS 4  // the one-pass backward's warps per block
#endif
#define KOWN (16 * KWARPS)
#define KTHREADS (32 * KWARPS)
#define NDT (DT / (KWARPS / 4))  // head-dim n-tiles of a warp's dq share


// Per query row (b * Tq + t): delta = sum_d dout * o (f32, from the stored values) and lse2,
// the row's logsumexp in the log2 domain, side by side in `stats` ([2][B * Tq]) for the main
// kernel to copy with the tiles; the row of the f32 dq accumulator zeroed. HD / 8 lanes per
// row, 8 elements each (two 4-element loads where the rows allow), one division per row.
extern "C" __global__ void attention_backward_prep(const TF* __restrict__ fwd, const T* __restrict__ dout,
                                                   float* __restrict__ stats, float* __restrict__ dq_acc, const AttnParams p) {
  constexpr int L = HD / 8, RPW = 32 / L;  // lanes per row, rows per warp and pass
  const int lane = threadIdx.x % 32, sub = lane % L;
  const i64 rows = p.B * p.Tq, warps = (i64)gridDim.x * (blockDim.x / 32);
  // Every lane of a warp runs every pass (the shuffles need them all); rows past the end read nothing.
  for (i64 base = ((i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * RPW; base < rows; base += warps * RPW) {
    const i64 row = base + lane / L;
    float acc = 0.0f;
    i64 b = 0, t = 0, ob = 0;
    if (row < rows) {
      b = row / p.Tq, t = row % p.Tq, ob = lead_offset(p.o, b);
      const i64 d0 = sub * 8, gi = lead_offset(p.dout, b) + t * p.d_rs + d0 * p.d_cs, oi = ob + t * p.o_rs + d0 * p.o_cs;
      if (p.d_cs == 1 && p.o_cs == 1 && gi % 4 == 0 && oi % 4 == 0) {
#pragma unroll
        for (int h = 0; h < 8; h += 4) {
          const float4 x = load4(dout + gi + h), y = load4(fwd + oi + h);
          acc += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
        }
      } else {
#pragma unroll
        for (int h = 0; h < 8; ++h) acc += cvt<float>(dout[gi + h * p.d_cs]) * cvt<float>(fwd[oi + h * p.o_cs]);
      }
      float4* zero_at = (float4*)(dq_acc + row * HD + d0);
      zero_at[0] = zero_at[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (row < rows && sub == 0) {
      stats[row] = acc;
      stats[rows + row] = lse_of(fwd, p, b, t, ob) * LOG2E;
    }
  }
}

// The backward's dk (scaled) and dv of the thread's two keys (rows key[r] of the accumulators,
// this thread's columns) into out's planes 1 and 2.
__device__ __forceinline__ void store_key_grads(TG* __restrict__ out, const AttnParams& p, i64 b, const i64 key[2],
                                                const float dk[DT][4], const float dv[DT][4], int c) {
  TG* const grads_b = out + p.out_offset + (b / p.g_heads) * p.g_bs + (b % p.g_heads) * p.g_hs;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= p.S) continue;
    TG* dkr = grads_b + p.g_plane + key[r] * p.g_rs;
    TG* dvr = dkr + p.g_plane;
#pragma unroll
    for (int n = 0; n < DT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        dkr[n * 8 + 2 * c + e] = cvt<TG>(dk[n][2 * r + e] * (float)p.scale);
        dvr[n * 8 + 2 * c + e] = cvt<TG>(dv[n][2 * r + e]);
      }
  }
}

// The thread's dq share of a query tile (accumulator rows t_row and t_row + 8, N n-tiles of 8
// columns from dst, a row of dq_acc) added into dq_acc; rows past Tq are skipped.
template <int N>
__device__ __forceinline__ void add_dq_rows(float* dst, const float dq[N][4], int t_row, int Tq) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (t_row + 8 * r >= Tq) continue;
#pragma unroll
    for (int n = 0; n < N; ++n) red_add2(dst + r * 8 * HD + n * 8, dq[n][2 * r], dq[n][2 * r + 1]);
  }
}

// P^T of one query tile for the thread's accumulator rows (keys) in place of the scores st
// (K Q^T): exp2(st * sl2 - lse2 of the column's query); columns a key does not see are 0.
// full: every query of the tile sees every key of the thread's warp; else columns [lo[r], hi)
// are visible to row r (relative to the tile).
__device__ __forceinline__ void probabilities_t(float st[NT][4], const float* lse2, float sl2, bool full, const int lo[2],
                                                int hi, int c) {
  if (full) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float2 l2 = *(const float2*)(lse2 + j * 8 + 2 * c);
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = exp2_ftz(fmaf(st[j][e], sl2, -(e & 1 ? l2.y : l2.x)));
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 l2 = *(const float2*)(lse2 + j * 8 + 2 * c);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      st[j][e] = masked(j, e, c, lo[e >> 1], hi) ? 0.0f : exp2_ftz(fmaf(st[j][e], sl2, -(e & 1 ? l2.y : l2.x)));
  }
}
// dS^T = P^T (dP^T - delta of the column's query) in place of dpt (V dO^T).
__device__ __forceinline__ void score_grads_t(float dpt[NT][4], const float pt[NT][4], const float* dlt, int c) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 dl = *(const float2*)(dlt + j * 8 + 2 * c);
#pragma unroll
    for (int e = 0; e < 4; ++e) dpt[j][e] = pt[j][e] * (dpt[j][e] - (e & 1 ? dl.y : dl.x));
  }
}

// dk into out[1], dv into out[2]; dq accumulated into dq_acc ([B, Tq, HD], f32, unscaled).
// A block owns KOWN keys (16 per warp, KWARPS warps: 4, or 8 where HD % 32 == 0 so that
// two warps can split each 16-query group's dq over halves of the head dim) and walks the
// query tiles that see them; the next tile's q, dout and row statistics are copied while this
// one is multiplied (cp.async; q and dout through registers where not rows_async). Per tile a
// warp's work is its five products; everything else is kept to a few instructions: copy
// pointers set up once, masks only on tiles that cross the diagonal or the end of the rows,
// one FFMA and one MUFU per probability, dq added two values per reduction.
extern "C" __global__ void __launch_bounds__(KTHREADS) attention_backward_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const float* __restrict__ stats,
    const T* __restrict__ dout, TG* __restrict__ out, float* __restrict__ dq_acc, const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Ks = smem;                        // [KOWN][LDS]
  h16* Vs = Ks + KOWN * LDS;             // [KOWN][LDS]
  h16* Qs = Vs + KOWN * LDS;             // [2][STREAM][LDS]: the tile in use and the next
  h16* Gs = Qs + 2 * STREAM * LDS;       // dout, [2][STREAM][LDS]
  h16* Ds = Gs + 2 * STREAM * LDS;       // dS^T of the tile in bf16, [KOWN][DLS]: rows keys, columns queries
  float* col_lse2 = (float*)(Ds + KOWN * DLS);  // [2][STREAM], log2 domain
  float* col_delta = col_lse2 + 2 * STREAM;      // [2][STREAM]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  i64 b, s0;
  block_tile(false, b, s0);
  s0 *= KOWN;
  const i64 qb = lead_offset(p.q, b), db = lead_offset(p.dout, b);
  const int Tq = (int)p.Tq;
  const bool async = rows_async(qb, p.q_rs, p.q_cs) && rows_async(db, p.d_rs, p.d_cs);
  load_tile<KOWN, KTHREADS>(Ks, k, lead_offset(p.k, b), p.k_rs, p.k_cs, s0, p.S);
  load_tile<KOWN, KTHREADS>(Vs, v, lead_offset(p.v, b), p.v_rs, p.v_cs, s0, p.S);
  const TileCopy<STREAM, KTHREADS> qcopy(q, qb, p.q_rs, Qs), gcopy(dout, db, p.d_rs, Gs);
  // Thread r < STREAM copies row r's statistics of each tile.
  const float* delta_row = stats + b * p.Tq + threadIdx.x;
  const float* lse2_row = delta_row + p.B * p.Tq;
  const unsigned stats_dst = smem_u32(col_lse2 + threadIdx.x);
  auto fetch = [&](int t0, int stage) {  // query tile t0 (q, dout, statistics) into `stage`
    if (async) {
      qcopy.copy(t0, Tq, stage * STREAM * LDS * 2);
      gcopy.copy(t0, Tq, stage * STREAM * LDS * 2);
    } else {
      load_tile<STREAM, KTHREADS>(Qs + stage * STREAM * LDS, q, qb, p.q_rs, p.q_cs, t0, p.Tq);
      load_tile<STREAM, KTHREADS>(Gs + stage * STREAM * LDS, dout, db, p.d_rs, p.d_cs, t0, p.Tq);
    }
    if (threadIdx.x < STREAM) {
      // Rows past Tq read as zeros: their columns are masked (hi below), and their q and dout are zero.
      const bool ok = t0 + (int)threadIdx.x < Tq;
      cp_async4(stats_dst + stage * STREAM * 4, ok ? (const void*)(lse2_row + t0) : (const void*)stats, ok);
      cp_async4(stats_dst + (2 + stage) * STREAM * 4, ok ? (const void*)(delta_row + t0) : (const void*)stats, ok);
    }
    cp_async_commit();
  };
  const i64 key[2] = {s0 + warp * 16 + g, s0 + warp * 16 + g + 8};
  // Query t sees key s when s <= limit_of(t): causal, t >= s - (S - Tq).
  const i64 shift = p.causal ? p.S - p.Tq : (i64)1 << 40;  // non-causal: every query sees every key
  // The first queries seeing the warp's first and last keys (clamped to int range).
  const int warp_first = (int)max((i64)-STREAM, min((i64)Tq, s0 + warp * 16 - shift));
  const int warp_last = (int)max((i64)-STREAM, min((i64)Tq, s0 + warp * 16 + 15 - shift));
  const float sl2 = log2_scale(p);
  // The first query seeing the block's first key; past the last one, the block has nothing to add to dq.
  const i64 first_query = max((i64)0, p.causal ? s0 - shift : (i64)0);
  const int first = (int)min(first_query, (i64)Tq), t_first = first_query >= Tq ? Tq : first / STREAM * STREAM;
  if (t_first < Tq) fetch(t_first, 0);
  __syncthreads();
  unsigned kf[KD][4], vf[KD][4];
  load_a_rows(kf, Ks, warp, lane);
  load_a_rows(vf, Vs, warp, lane);
  float dk[DT][4], dv[DT][4];
  zero<DT>(dk);
  zero<DT>(dv);
  // dQ's share of this thread: rows qg * 16 + g (+ 8) of each tile, columns n0 * 8 + 2c (+ 1) of n-tile n.
  const int qg = warp % 4, n0 = (warp / 4) * NDT;
  float* dq_row = dq_acc + (b * p.Tq + qg * 16 + g) * HD + n0 * 8 + 2 * c;
  // The warp's keys relative to a tile's first query: key - shift - t0 (where its visible columns start).
  const int key_lo[2] = {(int)max((i64)-STREAM, min((i64)Tq, key[0] - shift)),
                         (int)max((i64)-STREAM, min((i64)Tq, key[1] - shift))};
  int stage = 0;
  for (int t0 = t_first; t0 < Tq; t0 += STREAM, stage ^= 1) {
    const bool more = t0 + STREAM < Tq;
    if (more) fetch(t0 + STREAM, stage ^ 1);  // in flight while this tile is multiplied
    if (more) cp_async_wait<1>();
    else cp_async_wait<0>();
    __syncthreads();
    const h16* Q_tile = Qs + stage * STREAM * LDS;
    const h16* G_tile = Gs + stage * STREAM * LDS;
    const float* lse2 = col_lse2 + stage * STREAM;
    const float* dlt = col_delta + stage * STREAM;
    float st[NT][4], dpt[NT][4];
    zero<NT>(st);
    zero<NT>(dpt);
    if (t0 + STREAM - 1 >= warp_first) {  // some query of the tile sees the warp's keys
      mul_tile_t(st, kf, Q_tile, lane);   // K Q^T: rows keys, columns queries
      mul_tile_t(dpt, vf, G_tile, lane);  // V dO^T
      const int lo[2] = {key_lo[0] - t0, key_lo[1] - t0};
      // full: every query of the tile sees every key of the warp
      probabilities_t(st, lse2, sl2, t0 >= warp_last && t0 + STREAM <= Tq, lo, min(STREAM, Tq - t0), c);
      score_grads_t(dpt, st, dlt, c);
      mul_tile(dv, st, G_tile, lane);   // P^T dO
      mul_tile(dk, dpt, Q_tile, lane);  // dS^T Q
    }
    // dS^T to shared memory (zeros where the warp's keys are unseen), for dQ = dS K.
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *(unsigned*)(Ds + (warp * 16 + g + 8 * r) * DLS + j * 8 + 2 * c) = pack_bf16(dpt[j][2 * r], dpt[j][2 * r + 1]);
    __syncthreads();
    // dQ (64 x HD) = dS (64 x KOWN keys) K (KOWN x HD), the A fragments read transposed from Ds,
    // added into dq_acc: a warp takes 16 queries (qg) and NDT n-tiles of the head dim from n0.
    if (t0 + qg * 16 < Tq && t0 + qg * 16 + 15 >= first) {
      float dq[NDT][4];
      zero<NDT>(dq);
#pragma unroll
      for (int kc = 0; kc < KOWN / 16; ++kc) {
        unsigned a[4];
        ldmatrix_x4_trans(a, Ds + (kc * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * DLS + qg * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int n = 0; n < NDT; n += 2) {
          unsigned r[4];
          ldmatrix_x4_trans(r, Ks + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + (n0 + n) * 8 + (lane >> 4) * 8);
          mma_bf16(dq[n], a, r[0], r[1]);
          mma_bf16(dq[n + 1], a, r[2], r[3]);
        }
      }
      add_dq_rows<NDT>(dq_row + (i64)t0 * HD, dq, t0 + qg * 16 + g, Tq);
    }
    __syncthreads();  // Ds and the stage are consumed before the next iteration refills them
  }
  store_key_grads(out, p, b, key, dk, dv, c);
}

#if ATTN_WGMMA
// dq_acc of the warpgroup backward: per batch item b, query tile t (of STREAM) and head-dim half
// h (the warpgroup), a chunk of DQ_CHUNK f32 at ((b * tiles + t) * 2 + h) * DQ_CHUNK, in the
// accumulators' fragment order [n-tile 4][warp 4][lane 32][4] (attention_backward_dq_finish
// reads it back into rows).
#define DQ_CHUNK (STREAM * 32)
// The one-pass backward on Hopper's warpgroup instructions (sm_90a; bf16 q, k, v and dout with
// 16-byte copyable rows; HD = 64). A block of two warpgroups owns 128 keys, 64 a warpgroup, and
// walks the query tiles of 64 that see them (q, dout and the rows' statistics in two stages, the
// next tile copied while this one is used: bulk tensor copies issued by thread 0 through the
// host's maps `tq`, `tk`, `tv`, `tg` (dout) and `tstats`, as the forward's, each stage with a
// `full` barrier). Per tile a warpgroup computes, on its
// keys: S^T = K Q^T and dP^T = V dO^T (both operands from shared memory), P^T and dS^T in
// registers (probabilities_t, as the mma.sync kernel), dV += P^T dO and dK += dS^T Q (the
// accumulators as the register A operand, dO and Q read transposed); then dS^T goes to shared
// memory, and after a block barrier each warpgroup computes half the head dim of the tile's
// dQ = dS K over all 128 keys (dS read transposed as the A operand, K as B), which it adds
// into dq_acc (a bulk reduce-add from shared memory, DQ_CHUNK) after the next tile's S^T and
// dP^T products are issued: a block adds each
// tile's dq once, as the 128-key mma.sync kernel does; dS^T has two buffers, so that product
// may still read one while the next tile's dS^T is written. The accumulators of a warp have the
// mma kernel's layout (rows 16 w + g and + 8, columns 8 j + 2 c (+1)). Host side: wgmma_tile
// for n = 64 (S^T, dP^T) and n = 32 (dQ, both operands transposed), wgmma_tile_ra for n = 64
// (B transposed). Measured on the H200 (bench/cuda/NOTES.md, eleventh session) and not kept:
// waiting for S^T alone to run P^T's exponentials under dP^T and dS^T under dV (no change);
// each product's first k step overwriting its accumulators instead of zeroing them (12% slower:
// 234 registers instead of 212); blocks of one warpgroup, without the barrier between
// warpgroups (5% slower: twice the dq atomics).
extern "C" __global__ void __launch_bounds__(256, 1) attention_backward_wgmma(
    const __grid_constant__ TensorMap tq, const __grid_constant__ TensorMap tk, const __grid_constant__ TensorMap tv,
    const __grid_constant__ TensorMap tg, const __grid_constant__ TensorMap tstats, TG* __restrict__ out,
    float* __restrict__ dq_acc, const AttnParams p, unsigned batch_fast, unsigned batch_mid) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // 1024-byte aligned swizzled tiles (the host asks for 1 KiB extra): K and V 128 rows each, q
  // and dout two stages of 64, dS^T two buffers of 128 rows (keys) of 64 queries; then the
  // statistics, [2 stages][delta, lse2][64] f32; then two dq buffers a warpgroup (DQ_CHUNK f32);
  // then the barriers: full[2] (a stage's copies landed), K and V's.
  // K and V rows hold dk and dv on the way out (stage_rows).
  const unsigned base = smem_u32(smem_raw), ks = (base + 1023u) & ~1023u, vs = ks + 128 * 128, qs = vs + 128 * 128,
                 gs = qs + 2 * STREAM * 128, dss = gs + 2 * STREAM * 128, stat = dss + 2 * 128 * 128,
                 dqs = stat + 2 * 2 * STREAM * 4, full = dqs + 4 * DQ_CHUNK * 4, kv_full = full + 16;
  float* const col_stats = (float*)(smem_raw + (stat - base));
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;
  i64 b, s0;
  block_tile(false, b, s0);
  s0 *= 128;
  const int Tq = (int)p.Tq;
  // The batch item's coordinates in the maps' batch dims (32-bit: the grid's x).
  const unsigned bi = (unsigned)b, b_mid = bi / batch_fast;
  const int c_fast = (int)(bi - b_mid * batch_fast), c_mid = (int)(b_mid % batch_mid), c_slow = (int)(b_mid / batch_mid);
  // Query tile t0 (q, dout, both planes of statistics) into `stage` (thread 0). Rows past Tq
  // come as zeros: their columns are masked, and their q and dout are zero.
  auto fetch = [&](int t0, int stage) {
    const unsigned bar = full + 8 * stage;
    mbar_expect_tx(bar, 2 * STREAM * 128 + 2 * STREAM * 4);
    tma_load_5d(qs + stage * STREAM * 128, tq, bar, 0, t0, c_fast, c_mid, c_slow);
    tma_load_5d(gs + stage * STREAM * 128, tg, bar, 0, t0, c_fast, c_mid, c_slow);
    tma_load_3d(stat + stage * 2 * STREAM * 4, tstats, bar, t0, (int)b, 0);
  };
  const i64 key0 = s0 + wg * 64 + warp * 16;  // the warp's first key
  const i64 key[2] = {key0 + g, key0 + g + 8};
  // Query t sees key s when s <= limit_of(t): causal, t >= s - (S - Tq).
  const i64 shift = p.causal ? p.S - p.Tq : (i64)1 << 40;
  const int warp_last = (int)max((i64)-STREAM, min((i64)Tq, key0 + 15 - shift));
  const int key_lo[2] = {(int)max((i64)-STREAM, min((i64)Tq, key[0] - shift)),
                         (int)max((i64)-STREAM, min((i64)Tq, key[1] - shift))};
  const float sl2 = log2_scale(p);
  // The first query seeing the block's first key. Both warpgroups take every tile: one that
  // sees none of a warpgroup's keys is all masked for it and adds nothing (skipping it would
  // put wgmma on a path ptxas cannot prove warpgroup-uniform, and it serializes them).
  const i64 first_query = max((i64)0, p.causal ? s0 - shift : (i64)0);
  const int t_first = first_query >= Tq ? Tq : (int)first_query / STREAM * STREAM;
  if (tid == 0) {
    mbar_init(full, 1), mbar_init(full + 8, 1), mbar_init(kv_full, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    mbar_expect_tx(kv_full, 2 * 128 * 128);
    tma_load_5d(ks, tk, kv_full, 0, (int)s0, c_fast, c_mid, c_slow);
    tma_load_5d(vs, tv, kv_full, 0, (int)s0, c_fast, c_mid, c_slow);
    if (t_first < Tq) fetch(t_first, 0);
  }
  __syncthreads();  // the barriers are initialized
  mbar_wait(kv_full, 0);
  const unsigned k_rows = ks + wg * 64 * 128, v_rows = vs + wg * 64 * 128;
  float dk[DT][4], dv[DT][4];
  zero<DT>(dk);
  zero<DT>(dv);
  // The thread's dq share of a tile: rows warp * 16 + g (+ 8), columns 32 wg + 8 n + 2 c (+ 1).
  float dq[4][4];
  zero<4>(dq);
  // dq goes out through shared memory: the warpgroup's share of a tile (2048 f32 in fragment
  // order, DQ_CHUNK) into one of two buffers, then one bulk reduce-add of 8 KB into dq_acc by
  // the warpgroup's first thread (ncu: the 8 vector atomics a thread had issued per tile held
  // their source registers until the memory system took them, ~8% of the stall samples).
  const i64 q_tiles = (p.Tq + STREAM - 1) / STREAM;
  int adds = 0;  // the dq tiles this warpgroup has sent: buffer adds % 2
  // The warpgroup's first thread issues and waits for the bulk operations, predicated in the
  // instructions: under a branch ptxas serialized every wgmma of the kernel (C7515).
  const unsigned leader = tid % 128 == 0;
  auto add_dq = [&](int t0) {
    const unsigned buf = dqs + (2 * wg + (adds & 1)) * DQ_CHUNK * 4;
#pragma unroll
    for (int n = 0; n < 4; ++n)
      *(float4*)(smem_raw + (buf - base) + ((n * 4 + warp) * 32 + lane) * 16) = make_float4(dq[n][0], dq[n][1], dq[n][2], dq[n][3]);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    warpgroup_sync(wg);
    const float* dst = dq_acc + ((b * q_tiles + t0 / STREAM) * 2 + wg) * DQ_CHUNK;
    asm volatile("{\n.reg .pred leader;\nsetp.ne.u32 leader, %3, 0;\n"
                 "@leader cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 "@leader cp.async.bulk.commit_group;\n}\n" ::"l"(dst), "r"(buf), "n"(DQ_CHUNK * 4), "r"(leader)
                 : "memory");
    ++adds;
  };
  int stage = 0, uses = 0;  // uses: the tiles so far (stage uses / 2 give the `full` phase)
  for (int t0 = t_first; t0 < Tq; t0 += STREAM, stage ^= 1, ++uses) {
    mbar_wait(full + 8 * stage, (uses >> 1) & 1);  // tile t0 landed
    // The dq buffer this iteration fills was sent two adds ago: read out before the barrier.
    bulk_wait_read1(leader);
    // Both warpgroups are done with the previous tile's stage (its dV and dK products retired
    // at the end of the last iteration), which the next tile takes.
    __syncthreads();
    if (tid == 0 && t0 + STREAM < Tq) fetch(t0 + STREAM, stage ^ 1);
    const unsigned q_tile = qs + stage * STREAM * 128, g_tile = gs + stage * STREAM * 128,
                   ds_tile = dss + stage * 128 * 128;
    const float* dlt = col_stats + stage * 2 * STREAM;
    const float* lse2 = dlt + STREAM;
    float st[NT][4], dpt[NT][4];
    zero<NT>(st);
    zero<NT>(dpt);
    // dP^T's zeros set before the stage's first product: ptxas had moved them between the two
    // products and waited for S^T there (C7519/C7517: an injected arrive and wait). (S^T's it
    // folds into its first product; fencing those too serializes every product, C7514.)
    fence_operands<NT>(dpt);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kc = 0; kc < KD; ++kc)
      wgmma_tile(reinterpret_cast<float(&)[NT * 4]>(st), smem_desc(k_rows + kc * 32, 16, 1024),
                 smem_desc(q_tile + kc * 32, 16, 1024));
#pragma unroll
    for (int kc = 0; kc < KD; ++kc)
      wgmma_tile(reinterpret_cast<float(&)[NT * 4]>(dpt), smem_desc(v_rows + kc * 32, 16, 1024),
                 smem_desc(g_tile + kc * 32, 16, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    // In flight: the previous tile's dQ, then S^T and dP^T (groups retire in order): dQ's
    // atomics run under this tile's first products.
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    fence_operands<4>(dq);
    if (t0 > t_first) add_dq(t0 - STREAM);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_operands<NT>(st);
    fence_operands<NT>(dpt);
    const int lo[2] = {key_lo[0] - t0, key_lo[1] - t0};
    probabilities_t(st, lse2, sl2, t0 >= warp_last && t0 + STREAM <= Tq, lo, min(STREAM, Tq - t0), c);
    score_grads_t(dpt, st, dlt, c);
    unsigned pa[STREAM / 16][4], da[STREAM / 16][4];  // P^T and dS^T as A fragments
#pragma unroll
    for (int kc = 0; kc < STREAM / 16; ++kc) {
      acc_to_a(pa[kc], st[2 * kc], st[2 * kc + 1]);
      acc_to_a(da[kc], dpt[2 * kc], dpt[2 * kc + 1]);
    }
    // dS^T in bf16 to shared memory (row = key, 16-byte chunk j = queries 8 j ..; the packed
    // A fragments' values), fenced before dV's and dK's products are issued: a proxy fence
    // after them waited for them to finish (ncu: ~5% of the stall samples at that fence).
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = wg * 64 + warp * 16 + g + 8 * r;
        *(unsigned*)(smem_raw + (ds_tile - base) + swizzled(row, j) + 4 * c) = da[j / 2][(j % 2) * 2 + r];
      }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kc = 0; kc < STREAM / 16; ++kc)  // dV += P^T dO
      wgmma_tile_ra(reinterpret_cast<float(&)[DT * 4]>(dv), pa[kc], smem_desc(g_tile + kc * 16 * 128, STREAM * 128, 1024));
#pragma unroll
    for (int kc = 0; kc < STREAM / 16; ++kc)  // dK += dS^T Q
      wgmma_tile_ra(reinterpret_cast<float(&)[DT * 4]>(dk), da[kc], smem_desc(q_tile + kc * 16 * 128, STREAM * 128, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    __syncthreads();  // both warpgroups' dS^T
    // dQ[:, 32 wg ..] (64 queries x 32) = dS (64 x 128 keys) K[:, 32 wg ..]: A is dS^T read
    // transposed, B the key rows from column 32 wg (64 bytes into each swizzled row).
    zero<4>(dq);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kc = 0; kc < 128 / 16; ++kc)
      wgmma_tile(reinterpret_cast<float(&)[16]>(dq), smem_desc(ds_tile + kc * 16 * 128, STREAM * 128, 1024),
                 smem_desc(ks + wg * 64 + kc * 16 * 128, STREAM * 128, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // dV and dK done; dQ in flight
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_operands<4>(dq);
  if (t_first < Tq) {
    bulk_wait_read1(leader);
    warpgroup_sync(wg);
    add_dq(t_first + (Tq - 1 - t_first) / STREAM * STREAM);  // the last tile's
  }
  // The block's shared memory must outlive the reduce-adds' reads of it.
  asm volatile("{\n.reg .pred leader;\nsetp.ne.u32 leader, %0, 0;\n@leader cp.async.bulk.wait_group 0;\n}\n" ::"r"(leader)
               : "memory");
  if (sizeof(TG) != 2 || !vector_aligned(p.out_offset | p.g_plane | p.g_bs | p.g_hs | p.g_rs) || ((u64)out & 15) != 0) {
    store_key_grads(out, p, b, key, dk, dv, c);
    return;
  }
  // dk and dv through this warpgroup's K and V rows, once both warpgroups' last dQ products
  // (which read every K row) have retired.
  __syncthreads();
  unsigned char* const k_tile = smem_raw + (k_rows - base);
  unsigned char* const v_tile = smem_raw + (v_rows - base);
  stage_rows<TG>(k_tile, dk, (float)p.scale, warp, g, c);
  stage_rows<TG>(v_tile, dv, 1.0f, warp, g, c);
  warpgroup_sync(wg);
  TG* const dk_rows =
      out + p.out_offset + (b / p.g_heads) * p.g_bs + (b % p.g_heads) * p.g_hs + p.g_plane + (s0 + wg * 64) * p.g_rs;
  copy_staged_rows<TG>(dk_rows, p.g_rs, p.S - (s0 + wg * 64), k_tile, tid % 128);
  copy_staged_rows<TG>(dk_rows + p.g_plane, p.g_rs, p.S - (s0 + wg * 64), v_tile, tid % 128);
}
#endif  // ATTN_WGMMA

#if ATTN_WGMMA
// dq = scale * dq_acc into out's plane 0, dq_acc in the warpgroup backward's chunks (DQ_CHUNK):
// a thread takes the four lanes of one accumulator row group (64 contiguous bytes: rows
// 16 warp + g and + 8, eight columns each) and writes each row's eight as one 16-byte store
// where the gradient layout allows.
extern "C" __global__ void attention_backward_dq_finish(const float* __restrict__ dq_acc, TG* __restrict__ out,
                                                        const AttnParams p) {
  const float scale = (float)p.scale;
  const i64 tiles = (p.Tq + STREAM - 1) / STREAM, units = p.B * tiles * 2 * (DQ_CHUNK / 16);
  const bool vector = sizeof(TG) == 2 && ((p.out_offset | p.g_bs | p.g_hs | p.g_rs) & 7) == 0 && ((u64)out & 15) == 0;
  for (i64 u = (i64)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += (i64)gridDim.x * blockDim.x) {
    const i64 chunk = u / (DQ_CHUNK / 16);
    const int in = (int)(u % (DQ_CHUNK / 16)), n = in >> 5, warp = (in >> 3) & 3, g = in & 7;
    const int half = (int)(chunk & 1);
    const i64 b = (chunk >> 1) / tiles, tile = (chunk >> 1) % tiles;
    const float4* src = (const float4*)(dq_acc + chunk * DQ_CHUNK) + (n * 4 + warp) * 32 + 4 * g;
    float v[2][8];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float4 x = src[c];
      v[0][2 * c] = x.x * scale, v[0][2 * c + 1] = x.y * scale, v[1][2 * c] = x.z * scale, v[1][2 * c + 1] = x.w * scale;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const i64 t = tile * STREAM + warp * 16 + g + 8 * r;
      if (t >= p.Tq) continue;
      TG* dst = out + p.out_offset + (b / p.g_heads) * p.g_bs + (b % p.g_heads) * p.g_hs + t * p.g_rs + 32 * half + 8 * n;
      if (vector) {
        uint4 w;
        w.x = pack_pair<TG>(v[r][0], v[r][1]), w.y = pack_pair<TG>(v[r][2], v[r][3]);
        w.z = pack_pair<TG>(v[r][4], v[r][5]), w.w = pack_pair<TG>(v[r][6], v[r][7]);
        *(uint4*)dst = w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) dst[e] = cvt<TG>(v[r][e]);
      }
    }
  }
}
#else
// dq = scale * dq_acc into out's plane 0. Where its rows are dq_acc's (Tq rows per batch in
// [3, B, Tq, D]), four elements a thread and no index arithmetic; else four elements a thread
// placed by the gradient layout (32-bit divisions where the rows fit).
extern "C" __global__ void attention_backward_dq_finish(const float* __restrict__ dq_acc, TG* __restrict__ out,
                                                        const AttnParams p) {
  const float scale = (float)p.scale;
  const i64 n = p.B * p.Tq * HD, step = (i64)gridDim.x * blockDim.x * 4;  // n: a multiple of 16 (HD is)
  const i64 first = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (p.rows_out == p.Tq && p.g_heads == 1) {
    TG* dst = out + p.out_offset;
    for (i64 i = first; i < n; i += step) {
      const float4 x = *(const float4*)(dq_acc + i);
      dst[i] = cvt<TG>(x.x * scale), dst[i + 1] = cvt<TG>(x.y * scale);
      dst[i + 2] = cvt<TG>(x.z * scale), dst[i + 3] = cvt<TG>(x.w * scale);
    }
    return;
  }
  const bool small = p.B * p.Tq < (i64)0xffffffff;
  for (i64 i = first; i < n; i += step) {
    const i64 row = i / HD, d = i % HD;
    i64 b, t;
    if (small) {
      const unsigned r32 = (unsigned)row, tq = (unsigned)p.Tq, b32 = r32 / tq;
      b = b32, t = r32 - b32 * tq;
    } else {
      b = row / p.Tq, t = row % p.Tq;
    }
    TG* dst = out + p.out_offset + (b / p.g_heads) * p.g_bs + (b % p.g_heads) * p.g_hs + t * p.g_rs + d;
    const float4 x = *(const float4*)(dq_acc + i);
    dst[0] = cvt<TG>(x.x * scale), dst[1] = cvt<TG>(x.y * scale), dst[2] = cvt<TG>(x.z * scale), dst[3] = cvt<TG>(x.w * scale);
  }
}
#endif  // ATTN_WGMMA
