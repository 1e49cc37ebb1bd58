// Scaled dot-product attention on the tensor cores, for ops that allow bf16 products
// (AttentionParams::reduced_precision, set under autocast): q, k, v and dout are read in
// their storage type T and rounded to bf16 as tiles enter shared memory; every product is an
// mma.sync m16n8k16 (bf16 in, f32 accumulate); the online softmax, the logsumexp, the output
// and the gradients stay f32 (T). Defines: T (storage, f32/bf16/f16), HD (the head dim, a
// multiple of 16 up to 128). AttnParams and limit_of(): attention_shared.cuh.
//
// The FlashAttention-2 arrangement. Forward: a block of 8 warps owns 128 queries (16 rows
// per warp, the m of every mma) and walks the keys in tiles of 64; dq: the same with 4 warps
// and 64 queries. dk/dv: 4 warps own 64 keys and walk the queries, computing the transposed scores
// K Q^T so that P^T and dS^T come out of the accumulators already in the A-operand layout
// (an m16n8 accumulator pair is an m16k16 A fragment), so P never touches shared memory.
// Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 g + c; an accumulator holds rows g and
// g + 8, columns 2c and 2c + 1. Masks are computed only on tiles that cross the causal
// diagonal (or the end of the rows); a warp skips a tile none of whose columns it sees.

#define OWN 128           // queries a forward block owns, 16 per warp
#define THREADS 256       // the forward's 8 warps
#define BOWN 64           // rows a backward block owns: queries (dq) or keys (dk/dv), 16 per warp
#define BTHREADS 128      // the backward's 4 warps (more accumulators per thread: fewer warps per block)
#define STREAM 64         // rows of the tiles a block walks through: keys (forward, dq) or queries (dk/dv)
#define LDS (HD + 8)      // shared-memory row pitch in elements: 16 bytes of padding keeps ldmatrix conflict-free
#define NT (STREAM / 8)   // n-tiles of 8 across a streamed tile
#define KD (HD / 16)      // k-steps of 16 across the head dim
#define DT (HD / 8)       // n-tiles of 8 across the head dim
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

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

// acc[n] (16 x 8, n < DT) += P (16 x STREAM, accumulators p) times tile: the streamed
// tile's rows are the k index, its head dim the n index.
__device__ __forceinline__ void mul_tile(float acc[DT][4], const float p[NT][4], const h16* tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < STREAM / 16; ++kc) {
    unsigned a[4];
    acc_to_a(a, p[2 * kc], p[2 * kc + 1]);
#pragma unroll
    for (int n = 0; n < DT; n += 2) {
      unsigned r[4];
      ldmatrix_x4_trans(r, tile + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + n * 8 + (lane >> 4) * 8);
      mma_bf16(acc[n], a, r[0], r[1]);
      mma_bf16(acc[n + 1], a, r[2], r[3]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(float x[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
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

// out [B, Tq, HD + 1]: the output rows and each row's logsumexp of scaled scores.
extern "C" __global__ void __launch_bounds__(THREADS, HD <= 64 ? 2 : 1) attention_forward_mma(const T* __restrict__ q,
                                                                           const T* __restrict__ k,
                                                                           const T* __restrict__ v, T* __restrict__ out,
                                                                           const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Qs = smem;               // [OWN][LDS]
  h16* Ks = Qs + OWN * LDS;     // [STREAM][LDS]
  h16* Vs = Ks + STREAM * LDS;  // [STREAM][LDS]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  const i64 b = blockIdx.y, t0 = (i64)blockIdx.x * OWN;
  const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
  load_tile<OWN, THREADS>(Qs, q, lead_offset(p.q, b), p.q_rs, p.q_cs, t0, p.Tq);
  __syncthreads();
  unsigned qf[KD][4];
  load_a_rows(qf, Qs, warp, lane);
  const i64 row[2] = {t0 + warp * 16 + g, t0 + warp * 16 + g + 8};
  const i64 lim[2] = {limit_of(p, row[0]), limit_of(p, row[1])};
  // The warp's rows see keys up to limit_of(first row) all, and none past limit_of(last row).
  const i64 warp_all = limit_of(p, t0 + warp * 16), warp_any = limit_of(p, t0 + warp * 16 + 15);
  const float sl2 = (float)p.scale * LOG2E;  // scores in the log2 domain: exp2 is one instruction
  float m[2] = {-(float)ALK_INF, -(float)ALK_INF}, l[2] = {0.0f, 0.0f};  // l: this thread's columns only
  float o[DT][4];
  zero<DT>(o);
  const i64 block_last = limit_of(p, min(p.Tq - 1, t0 + OWN - 1));
  for (i64 s0 = 0; s0 <= block_last; s0 += STREAM) {
    __syncthreads();  // the previous tile is consumed
    load_tile<STREAM, THREADS>(Ks, k, kb, p.k_rs, p.k_cs, s0, p.S);
    load_tile<STREAM, THREADS>(Vs, v, vb, p.v_rs, p.v_cs, s0, p.S);
    __syncthreads();
    if (s0 > warp_any) continue;  // every key of this tile is past the warp's rows
    float s[NT][4];
    zero<NT>(s);
    mul_tile_t(s, qf, Ks, lane);
    float mx[2] = {m[0], m[1]};
    if (s0 + STREAM - 1 <= warp_all) {  // no key of the tile is masked for the warp
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] *= sl2;
          mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
        }
    } else {
      const int hi[2] = {clamp_cols(lim[0] - s0 + 1), clamp_cols(lim[1] - s0 + 1)};
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = masked(j, e, c, 0, hi[e >> 1]) ? -(float)ALK_INF : s[j][e] * sl2;
          s[j][e] = x;
          mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    }
    float corr[2], shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      // Nothing seen yet (max -inf): every term is 0; shift by 0 so no -inf - -inf NaN appears.
      shift[r] = mx[r] == -(float)ALK_INF ? 0.0f : mx[r];
      corr[r] = exp2f(m[r] - shift[r]);
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = exp2f(s[j][e] - shift[e >> 1]);
        s[j][e] = x;
        l[e >> 1] += x;
      }
#pragma unroll
    for (int n = 0; n < DT; ++n) o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
    mul_tile(o, s, Vs, lane);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    if (row[r] >= p.Tq) continue;
    // A row that sees no key (causal with S < Tq) is 0, its logsumexp -inf (the CPU's rule).
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    T* dst = out + p.out_offset + (b * p.Tq + row[r]) * (HD + 1);
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      dst[n * 8 + 2 * c] = cvt<T>(o[n][2 * r] * inv);
      dst[n * 8 + 2 * c + 1] = cvt<T>(o[n][2 * r + 1] * inv);
    }
    if (c == 0) dst[HD] = cvt<T>(sum > 0 ? (m[r] + log2f(sum)) * LN2 : -(float)ALK_INF);
  }
}

// dq into out[0] ([3, B, rows_out, HD]); also writes delta[b * Tq + t] = sum_d dout * o,
// which the dk/dv kernel reads after it.
extern "C" __global__ void __launch_bounds__(BTHREADS) attention_backward_dq_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ fwd,
    const T* __restrict__ dout, T* __restrict__ out, float* __restrict__ delta, const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Qs = smem;               // [BOWN][LDS]
  h16* Gs = Qs + BOWN * LDS;    // dout, [BOWN][LDS]
  h16* Ks = Gs + BOWN * LDS;     // [STREAM][LDS]
  h16* Vs = Ks + STREAM * LDS;  // [STREAM][LDS]
  float* row_delta = (float*)(Vs + STREAM * LDS);  // [BOWN]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  const i64 b = blockIdx.y, t0 = (i64)blockIdx.x * BOWN;
  const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b), ob = lead_offset(p.o, b), db = lead_offset(p.dout, b);
  load_tile<BOWN, BTHREADS>(Qs, q, lead_offset(p.q, b), p.q_rs, p.q_cs, t0, p.Tq);
  load_tile<BOWN, BTHREADS>(Gs, dout, db, p.d_rs, p.d_cs, t0, p.Tq);
  // delta in f32 from the stored values (not the bf16 tiles): a warp per row.
  for (int r = warp; r < BOWN; r += BTHREADS / 32) {
    const i64 t = t0 + r;
    float acc = 0.0f;
    if (t < p.Tq)
      for (int d = lane; d < HD; d += 32)
        acc += cvt<float>(dout[db + t * p.d_rs + d * p.d_cs]) * cvt<float>(fwd[ob + t * p.o_rs + d * p.o_cs]);
    acc = warp_sum(acc);
    if (lane == 0) {
      row_delta[r] = acc;
      if (t < p.Tq) delta[b * p.Tq + t] = acc;
    }
  }
  __syncthreads();
  unsigned qf[KD][4], gf[KD][4];
  load_a_rows(qf, Qs, warp, lane);
  load_a_rows(gf, Gs, warp, lane);
  const int lr[2] = {warp * 16 + g, warp * 16 + g + 8};
  const i64 row[2] = {t0 + lr[0], t0 + lr[1]};
  const i64 lim[2] = {limit_of(p, row[0]), limit_of(p, row[1])};
  const i64 warp_all = limit_of(p, t0 + warp * 16), warp_any = limit_of(p, t0 + warp * 16 + 15);
  const float sl2 = (float)p.scale * LOG2E;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // Rows past Tq get +inf: exp2(x - inf) = 0, no probability.
    lse2[r] = row[r] < p.Tq ? cvt<float>(fwd[ob + row[r] * p.o_rs + HD * p.o_cs]) * LOG2E : (float)ALK_INF;
    dl[r] = row_delta[lr[r]];
  }
  float dq[DT][4];
  zero<DT>(dq);
  const i64 block_last = limit_of(p, min(p.Tq - 1, t0 + BOWN - 1));
  for (i64 s0 = 0; s0 <= block_last; s0 += STREAM) {
    __syncthreads();
    load_tile<STREAM, BTHREADS>(Ks, k, kb, p.k_rs, p.k_cs, s0, p.S);
    load_tile<STREAM, BTHREADS>(Vs, v, vb, p.v_rs, p.v_cs, s0, p.S);
    __syncthreads();
    if (s0 > warp_any) continue;
    float s[NT][4], dp[NT][4];
    zero<NT>(s);
    zero<NT>(dp);
    mul_tile_t(s, qf, Ks, lane);   // Q K^T
    mul_tile_t(dp, gf, Vs, lane);  // dO V^T
    const bool full = s0 + STREAM - 1 <= warp_all;
    const int hi[2] = {clamp_cols(lim[0] - s0 + 1), clamp_cols(lim[1] - s0 + 1)};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        // A row that saw no key has lse -inf; its columns are all masked here.
        const float pr = full || !masked(j, e, c, 0, hi[r]) ? exp2f(s[j][e] * sl2 - lse2[r]) : 0.0f;
        s[j][e] = pr * (dp[j][e] - dl[r]);  // dS, the gradient of the scaled score
      }
    mul_tile(dq, s, Ks, lane);  // dS K
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= p.Tq) continue;
    T* dst = out + p.out_offset + (b * p.rows_out + row[r]) * HD;
#pragma unroll
    for (int n = 0; n < DT; ++n) {
      dst[n * 8 + 2 * c] = cvt<T>(dq[n][2 * r] * (float)p.scale);
      dst[n * 8 + 2 * c + 1] = cvt<T>(dq[n][2 * r + 1] * (float)p.scale);
    }
  }
}

// dk into out[1], dv into out[2]; reads delta from the dq kernel.
extern "C" __global__ void __launch_bounds__(BTHREADS) attention_backward_dkdv_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ fwd,
    const T* __restrict__ dout, T* __restrict__ out, const float* __restrict__ delta, const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Ks = smem;               // [BOWN][LDS]
  h16* Vs = Ks + BOWN * LDS;    // [BOWN][LDS]
  h16* Qs = Vs + BOWN * LDS;     // [STREAM][LDS]
  h16* Gs = Qs + STREAM * LDS;  // dout, [STREAM][LDS]
  float* col_lse2 = (float*)(Gs + STREAM * LDS);  // [STREAM], log2 domain
  float* col_delta = col_lse2 + STREAM;           // [STREAM]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  const i64 b = blockIdx.y, s0 = (i64)blockIdx.x * BOWN;
  const i64 qb = lead_offset(p.q, b), ob = lead_offset(p.o, b), db = lead_offset(p.dout, b);
  load_tile<BOWN, BTHREADS>(Ks, k, lead_offset(p.k, b), p.k_rs, p.k_cs, s0, p.S);
  load_tile<BOWN, BTHREADS>(Vs, v, lead_offset(p.v, b), p.v_rs, p.v_cs, s0, p.S);
  __syncthreads();
  unsigned kf[KD][4], vf[KD][4];
  load_a_rows(kf, Ks, warp, lane);
  load_a_rows(vf, Vs, warp, lane);
  const i64 key[2] = {s0 + warp * 16 + g, s0 + warp * 16 + g + 8};
  // Query t sees key s when s <= limit_of(t): causal, t >= s - (S - Tq).
  const i64 shift = p.causal ? p.S - p.Tq : (i64)1 << 62;  // non-causal: every query sees every key
  const i64 warp_first = s0 + warp * 16 - shift, warp_last = s0 + warp * 16 + 15 - shift;  // first queries seeing them
  const float sl2 = (float)p.scale * LOG2E;
  float dk[DT][4], dv[DT][4];
  zero<DT>(dk);
  zero<DT>(dv);
  const i64 first = max((i64)0, p.causal ? s0 - shift : (i64)0);  // the first query that sees the block's first key
  for (i64 t0 = first / STREAM * STREAM; t0 < p.Tq; t0 += STREAM) {
    __syncthreads();
    load_tile<STREAM, BTHREADS>(Qs, q, qb, p.q_rs, p.q_cs, t0, p.Tq);
    load_tile<STREAM, BTHREADS>(Gs, dout, db, p.d_rs, p.d_cs, t0, p.Tq);
    for (int r = threadIdx.x; r < STREAM; r += BTHREADS) {
      const i64 t = t0 + r;
      col_lse2[r] = t < p.Tq ? cvt<float>(fwd[ob + t * p.o_rs + HD * p.o_cs]) * LOG2E : (float)ALK_INF;
      col_delta[r] = t < p.Tq ? delta[b * p.Tq + t] : 0.0f;
    }
    __syncthreads();
    if (t0 + STREAM - 1 < warp_first) continue;  // no query of the tile sees the warp's keys
    float st[NT][4], dpt[NT][4];
    zero<NT>(st);
    zero<NT>(dpt);
    mul_tile_t(st, kf, Qs, lane);   // K Q^T: rows keys, columns queries
    mul_tile_t(dpt, vf, Gs, lane);  // V dO^T
    const bool full = t0 >= warp_last && t0 + STREAM <= p.Tq;
    const int hi = clamp_cols(p.Tq - t0);
    const int lo[2] = {clamp_cols(key[0] - shift - t0), clamp_cols(key[1] - shift - t0)};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + 2 * c + (e & 1);
        const float pr = full || !masked(j, e, c, lo[e >> 1], hi) ? exp2f(st[j][e] * sl2 - col_lse2[col]) : 0.0f;
        st[j][e] = pr;
        dpt[j][e] = pr * (dpt[j][e] - col_delta[col]);  // dS^T
      }
    mul_tile(dv, st, Gs, lane);   // P^T dO
    mul_tile(dk, dpt, Qs, lane);  // dS^T Q
  }
  const i64 plane = p.B * p.rows_out * HD;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= p.S) continue;
    T* dkr = out + p.out_offset + plane + (b * p.rows_out + key[r]) * HD;
    T* dvr = dkr + plane;
#pragma unroll
    for (int n = 0; n < DT; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        dkr[n * 8 + 2 * c + e] = cvt<T>(dk[n][2 * r + e] * (float)p.scale);
        dvr[n * 8 + 2 * c + e] = cvt<T>(dv[n][2 * r + e]);
      }
  }
}
