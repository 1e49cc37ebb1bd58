// Scaled dot-product attention on the tensor cores, for ops that allow bf16 products
// (AttentionParams::reduced_precision, set under autocast): q, k, v and dout are read in
// their storage type T and rounded to bf16 as tiles enter shared memory; every product is an
// mma.sync m16n8k16 (bf16 in, f32 accumulate); the online softmax, the logsumexp, the output
// and the gradients stay f32 (T). Defines: T (storage, f32/bf16/f16), HD (the head dim, a
// multiple of 16 up to 128). AttnParams and limit_of(): attention_shared.cuh.
//
// The FlashAttention-2 arrangement, 4 warps per block. Forward and dq: a block owns 64
// queries (16 rows per warp, the m of every mma) and walks the keys in tiles of 64. dk/dv: a
// block owns 64 keys (16 per warp) and walks the queries, computing the transposed scores
// K Q^T so that P^T and dS^T come out of the accumulators already in the A-operand layout
// (an m16n8 accumulator pair is an m16k16 A fragment), so P never touches shared memory.
// Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 g + c; an accumulator holds rows g and
// g + 8, columns 2c and 2c + 1.

#define TILE 64            // queries per block (forward, dq), keys per tile; keys per block (dk/dv)
#define LDS (HD + 8)       // shared-memory row pitch in elements: 16 bytes of padding keeps ldmatrix conflict-free
#define NT (TILE / 8)      // n-tiles of 8 across a tile of keys (or queries)
#define KD (HD / 16)       // k-steps of 16 across the head dim
#define DT (HD / 8)        // n-tiles of 8 across the head dim
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

// Rows [r0, r0 + TILE) of a [rows, HD] view (row stride rs, column stride cs, first element
// base) into shared memory as bf16, dst[r * LDS + d]; rows past `rows` are zero.
__device__ __forceinline__ void load_tile(h16* dst, const T* __restrict__ src, i64 base, i64 rs, i64 cs, i64 r0, i64 rows) {
  for (int e = threadIdx.x; e < TILE * HD; e += blockDim.x) {
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

// acc[j] (16 x 8, j < NT) += A (16 x HD, fragments f) times tile^T: the tile's rows are the n
// index (keys or queries), its head dim the k index.
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

// acc[n] (16 x 8, n < DT) += P (16 x TILE, accumulators p) times tile: the tile's rows are the
// k index, its head dim the n index.
__device__ __forceinline__ void mul_tile(float acc[DT][4], const float p[NT][4], const h16* tile, int lane) {
#pragma unroll
  for (int kc = 0; kc < TILE / 16; ++kc) {
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

// out [B, Tq, HD + 1]: the output rows and each row's logsumexp of scaled scores.
extern "C" __global__ void __launch_bounds__(128) attention_forward_mma(const T* __restrict__ q, const T* __restrict__ k,
                                                                       const T* __restrict__ v, T* __restrict__ out,
                                                                       const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Qs = smem;
  h16* Ks = Qs + TILE * LDS;
  h16* Vs = Ks + TILE * LDS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  const i64 b = blockIdx.y, t0 = (i64)blockIdx.x * TILE;
  const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
  load_tile(Qs, q, lead_offset(p.q, b), p.q_rs, p.q_cs, t0, p.Tq);
  __syncthreads();
  unsigned qf[KD][4];
  load_a_rows(qf, Qs, warp, lane);
  const i64 row[2] = {t0 + warp * 16 + g, t0 + warp * 16 + g + 8};
  const i64 lim[2] = {limit_of(p, row[0]), limit_of(p, row[1])};
  const float sl2 = (float)p.scale * LOG2E;  // scores in the log2 domain: exp2 is one instruction
  float m[2] = {-(float)ALK_INF, -(float)ALK_INF}, l[2] = {0.0f, 0.0f};  // l: this thread's columns only
  float o[DT][4];
  zero<DT>(o);
  const i64 block_last = limit_of(p, min(p.Tq - 1, t0 + TILE - 1));
  for (i64 s0 = 0; s0 <= block_last; s0 += TILE) {
    __syncthreads();  // the previous tile is consumed
    load_tile(Ks, k, kb, p.k_rs, p.k_cs, s0, p.S);
    load_tile(Vs, v, vb, p.v_rs, p.v_cs, s0, p.S);
    __syncthreads();
    float s[NT][4];
    zero<NT>(s);
    mul_tile_t(s, qf, Ks, lane);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const i64 key = s0 + j * 8 + 2 * c + (e & 1);
        const float x = key <= lim[e >> 1] ? s[j][e] * sl2 : -(float)ALK_INF;
        s[j][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      // Nothing seen yet (max -inf): every term is 0, and no -inf - -inf NaN appears.
      corr[r] = mx[r] == -(float)ALK_INF ? 1.0f : exp2f(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = s[j][e] == -(float)ALK_INF ? 0.0f : exp2f(s[j][e] - m[e >> 1]);
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
extern "C" __global__ void __launch_bounds__(128) attention_backward_dq_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ fwd,
    const T* __restrict__ dout, T* __restrict__ out, float* __restrict__ delta, const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Qs = smem;
  h16* Gs = Qs + TILE * LDS;  // dout
  h16* Ks = Gs + TILE * LDS;
  h16* Vs = Ks + TILE * LDS;
  float* row_delta = (float*)(Vs + TILE * LDS);  // [TILE]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  const i64 b = blockIdx.y, t0 = (i64)blockIdx.x * TILE;
  const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b), ob = lead_offset(p.o, b), db = lead_offset(p.dout, b);
  load_tile(Qs, q, lead_offset(p.q, b), p.q_rs, p.q_cs, t0, p.Tq);
  load_tile(Gs, dout, db, p.d_rs, p.d_cs, t0, p.Tq);
  // delta in f32 from the stored values (not the bf16 tiles): a warp per row.
  for (int r = warp; r < TILE; r += 4) {
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
  const float sl2 = (float)p.scale * LOG2E;
  float lse2[2], dl[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse2[r] = row[r] < p.Tq ? cvt<float>(fwd[ob + row[r] * p.o_rs + HD * p.o_cs]) * LOG2E : (float)ALK_INF;
    dl[r] = row_delta[lr[r]];
  }
  float dq[DT][4];
  zero<DT>(dq);
  const i64 block_last = limit_of(p, min(p.Tq - 1, t0 + TILE - 1));
  for (i64 s0 = 0; s0 <= block_last; s0 += TILE) {
    __syncthreads();
    load_tile(Ks, k, kb, p.k_rs, p.k_cs, s0, p.S);
    load_tile(Vs, v, vb, p.v_rs, p.v_cs, s0, p.S);
    __syncthreads();
    float s[NT][4], dp[NT][4];
    zero<NT>(s);
    zero<NT>(dp);
    mul_tile_t(s, qf, Ks, lane);   // Q K^T
    mul_tile_t(dp, gf, Vs, lane);  // dO V^T
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const i64 key = s0 + j * 8 + 2 * c + (e & 1);
        // lse = -inf (a row that saw no key) gives no probability, not inf - inf.
        const float pr = key <= lim[r] && lse2[r] > -(float)ALK_INF ? exp2f(s[j][e] * sl2 - lse2[r]) : 0.0f;
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
extern "C" __global__ void __launch_bounds__(128) attention_backward_dkdv_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ fwd,
    const T* __restrict__ dout, T* __restrict__ out, const float* __restrict__ delta, const AttnParams p) {
  extern __shared__ __align__(16) h16 smem[];
  h16* Ks = smem;
  h16* Vs = Ks + TILE * LDS;
  h16* Qs = Vs + TILE * LDS;
  h16* Gs = Qs + TILE * LDS;  // dout
  float* col_lse2 = (float*)(Gs + TILE * LDS);  // [TILE], log2 domain
  float* col_delta = col_lse2 + TILE;           // [TILE]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, c = lane & 3;
  const i64 b = blockIdx.y, s0 = (i64)blockIdx.x * TILE;
  const i64 qb = lead_offset(p.q, b), ob = lead_offset(p.o, b), db = lead_offset(p.dout, b);
  load_tile(Ks, k, lead_offset(p.k, b), p.k_rs, p.k_cs, s0, p.S);
  load_tile(Vs, v, lead_offset(p.v, b), p.v_rs, p.v_cs, s0, p.S);
  __syncthreads();
  unsigned kf[KD][4], vf[KD][4];
  load_a_rows(kf, Ks, warp, lane);
  load_a_rows(vf, Vs, warp, lane);
  const i64 key[2] = {s0 + warp * 16 + g, s0 + warp * 16 + g + 8};
  const float sl2 = (float)p.scale * LOG2E;
  float dk[DT][4], dv[DT][4];
  zero<DT>(dk);
  zero<DT>(dv);
  // The first query that sees this block's first key: t + (S - Tq) >= s0.
  const i64 first = p.causal ? max((i64)0, s0 - (p.S - p.Tq)) : 0;
  for (i64 t0 = first / TILE * TILE; t0 < p.Tq; t0 += TILE) {
    __syncthreads();
    load_tile(Qs, q, qb, p.q_rs, p.q_cs, t0, p.Tq);
    load_tile(Gs, dout, db, p.d_rs, p.d_cs, t0, p.Tq);
    for (int r = threadIdx.x; r < TILE; r += blockDim.x) {
      const i64 t = t0 + r;
      col_lse2[r] = t < p.Tq ? cvt<float>(fwd[ob + t * p.o_rs + HD * p.o_cs]) * LOG2E : -(float)ALK_INF;
      col_delta[r] = t < p.Tq ? delta[b * p.Tq + t] : 0.0f;
    }
    __syncthreads();
    float st[NT][4], dpt[NT][4];
    zero<NT>(st);
    zero<NT>(dpt);
    mul_tile_t(st, kf, Qs, lane);   // K Q^T: rows keys, columns queries
    mul_tile_t(dpt, vf, Gs, lane);  // V dO^T
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + 2 * c + (e & 1);
        const i64 t = t0 + col;
        const float lse2 = col_lse2[col];
        // Past Tq, or a query that saw no key (lse -inf), or a key it does not see: no probability.
        const bool seen = t < p.Tq && lse2 > -(float)ALK_INF && key[e >> 1] <= limit_of(p, t);
        const float pr = seen ? exp2f(st[j][e] * sl2 - lse2) : 0.0f;
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
