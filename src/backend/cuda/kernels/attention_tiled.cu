// Scaled dot-product attention in tiles (D <= 128): the same math as attention.cu, with
// the work arranged so each K/V (or Q/dO) tile is read from global memory once per block
// and no dot product needs a cross-lane reduction. Defines: T (storage), ACC, DPL
// (= ceil(D / 32), lane l owns head dims l, l + 32, ...), VEC4 (1 when ACC is float: shared
// memory broadcasts read as float4). AttnParams and limit_of() in
// attention_shared.cuh; causal: query t sees keys s <= t + (S - Tq).
//
// Forward and dq: a block of 4 warps owns 64 queries (16 per warp) and walks the keys in
// tiles of 32: lane j scores key j against the warp's 16 queries (Q is in shared memory
// as Qs[d][query], read as broadcasts), the online softmax runs per query with two warp
// reductions per tile, and P goes through shared memory for P V. dk/dv: a block owns 32
// keys (8 per warp) and walks the queries in tiles of 32 (lane = query), the mirror image.

#define QB 64  // queries per block (forward, dq)
#define QW 16  // queries per warp
#define KT 32  // keys per tile
#define KB 32  // keys per block (dk/dv)
#define KW 8   // keys per warp (dk/dv)

// Loads rows [r0, r0 + n) of a [rows, D] matrix view (row stride rs, column stride cs,
// first element base) into shared memory, either transposed (dst[d * ld + r]) or not
// (dst[r * ld + d]); rows past `rows` are zero. `mul` scales every value.
__device__ __forceinline__ void load_rows(ACC* dst, int ld, bool transposed, const T* __restrict__ src, i64 base,
                                          i64 rs, i64 cs, i64 r0, int n, i64 rows, i64 D, ACC mul) {
  for (int e = threadIdx.x; e < n * D; e += blockDim.x) {
    const int r = e / (int)D, d = e % (int)D;
    const ACC x = r0 + r < rows ? cvt<ACC>(src[base + (r0 + r) * rs + d * cs]) * mul : (ACC)0;
    dst[transposed ? d * ld + r : r * ld + d] = x;
  }
}

// out [B, Tq, D + 1]: the output rows and each row's logsumexp.
extern "C" __global__ void __launch_bounds__(128) attention_forward_tiled(const T* __restrict__ q, const T* __restrict__ k,
                                                                        const T* __restrict__ v, T* __restrict__ out,
                                                                        const AttnParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = (int)p.D;
  ACC* Qs = (ACC*)smem_raw;           // [D][QB]
  ACC* Ks = Qs + D * QB;              // [KT][D + 1]
  ACC* Vs = Ks + KT * (D + 1);        // [KT][D]
  ACC* Ps = Vs + KT * D;              // [4 warps][KT][QW + 1]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 b = blockIdx.y, t0 = (i64)blockIdx.x * QB;
  const i64 qb = lead_offset(p.q, b), kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
  load_rows(Qs, QB, true, q, qb, p.q_rs, p.q_cs, t0, QB, p.Tq, p.D, p.scale);
  ACC m[QW], l[QW], o[QW][DPL];
#pragma unroll
  for (int i = 0; i < QW; ++i) {
    m[i] = -(ACC)ALK_INF, l[i] = 0;
#pragma unroll
    for (int c = 0; c < DPL; ++c) o[i][c] = 0;
  }
  const i64 my_first = t0 + warp * QW;
  const i64 block_last = limit_of(p, min(p.Tq - 1, t0 + QB - 1));
  ACC* P = Ps + warp * KT * (QW + 1);
  for (i64 s0 = 0; s0 <= block_last; s0 += KT) {
    __syncthreads();  // the previous tile is consumed
    load_rows(Ks, D + 1, false, k, kb, p.k_rs, p.k_cs, s0, KT, p.S, p.D, (ACC)1);
    load_rows(Vs, D, false, v, vb, p.v_rs, p.v_cs, s0, KT, p.S, p.D, (ACC)1);
    __syncthreads();
    ACC s[QW];
#pragma unroll
    for (int i = 0; i < QW; ++i) s[i] = 0;
    for (int d = 0; d < D; ++d) {
      const ACC kv = Ks[lane * (D + 1) + d];
      const ACC* qd = Qs + d * QB + warp * QW;
      // Every lane reads the same 16 queries: broadcasts, 4 at a time where ACC is float.
#if VEC4
#pragma unroll
      for (int i = 0; i < QW; i += 4) {
        const float4 q4 = *(const float4*)(qd + i);
        s[i] += q4.x * kv, s[i + 1] += q4.y * kv, s[i + 2] += q4.z * kv, s[i + 3] += q4.w * kv;
      }
#else
#pragma unroll
      for (int i = 0; i < QW; ++i) s[i] += qd[i] * kv;
#endif
    }
    const i64 key = s0 + lane;
#pragma unroll
    for (int i = 0; i < QW; ++i) {
      const i64 t = my_first + i;
      const bool ok = t < p.Tq && key <= limit_of(p, t) && key < p.S;
      const ACC sv = ok ? s[i] : -(ACC)ALK_INF;
      const ACC mn = max_nan(m[i], warp_max(sv));
      // Nothing seen yet (mn = -inf): every term is 0, shift by 0 so no NaN appears.
      const ACC shift = mn == -(ACC)ALK_INF ? (ACC)0 : mn;
      const ACC e = ok ? exp(sv - shift) : (ACC)0;
      const ACC corr = exp(m[i] - shift);
      l[i] = l[i] * corr + warp_sum(e);
      m[i] = mn;
#pragma unroll
      for (int c = 0; c < DPL; ++c) o[i][c] *= corr;
      P[lane * (QW + 1) + i] = e;
    }
    __syncwarp();
    for (int j = 0; j < KT; ++j) {
      ACC vv[DPL];
#pragma unroll
      for (int c = 0; c < DPL; ++c) vv[c] = lane + 32 * c < D ? Vs[j * D + lane + 32 * c] : (ACC)0;
#pragma unroll
      for (int i = 0; i < QW; ++i) {
        const ACC pij = P[j * (QW + 1) + i];
#pragma unroll
        for (int c = 0; c < DPL; ++c) o[i][c] += pij * vv[c];
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int i = 0; i < QW; ++i) {
    const i64 t = my_first + i;
    if (t >= p.Tq) break;
    const bool any = l[i] > 0;
    const ACC inv = any ? (ACC)1 / l[i] : (ACC)0;
    T* row = out + p.out_offset + (b * p.Tq + t) * (p.D + 1);
#pragma unroll
    for (int c = 0; c < DPL; ++c)
      if (lane + 32 * c < D) row[lane + 32 * c] = cvt<T>(o[i][c] * inv);
    if (lane == 0) row[p.D] = cvt<T>(any ? m[i] + log(l[i]) : -(ACC)ALK_INF);
  }
}

// Backward, dq (and delta = rowsum(dout * o) into `delta` for the dk/dv pass): per query
// tile as the forward, with p = exp(scale q.k - lse), ds = p (dout.v - delta),
// dq = scale * sum_s ds k_s. out packs [3, B, rows_out, D].
extern "C" __global__ void __launch_bounds__(128) attention_backward_dq_tiled(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ fwd,
    const T* __restrict__ dout, T* __restrict__ out, ACC* __restrict__ delta, const AttnParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = (int)p.D;
  ACC* Qs = (ACC*)smem_raw;        // [D][QB], scaled
  ACC* Gs = Qs + D * QB;           // [D][QB]: dout
  ACC* Ks = Gs + D * QB;           // [KT][D + 1]
  ACC* Vs = Ks + KT * (D + 1);     // [KT][D + 1]
  ACC* Ps = Vs + KT * (D + 1);     // [4][KT][QW + 1]: ds
  ACC* stats = Ps + 4 * KT * (QW + 1);  // [QB][2]: lse, delta
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 b = blockIdx.y, t0 = (i64)blockIdx.x * QB;
  const i64 qb = lead_offset(p.q, b), kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
  const i64 ob = lead_offset(p.o, b), gb = lead_offset(p.dout, b);
  load_rows(Qs, QB, true, q, qb, p.q_rs, p.q_cs, t0, QB, p.Tq, p.D, p.scale);
  load_rows(Gs, QB, true, dout, gb, p.d_rs, p.d_cs, t0, QB, p.Tq, p.D, (ACC)1);
  for (int r = threadIdx.x; r < QB; r += blockDim.x) {
    const i64 t = t0 + r;
    ACC dl = 0, lse = 0;
    if (t < p.Tq) {
      for (int d = 0; d < D; ++d) dl += cvt<ACC>(dout[gb + t * p.d_rs + d * p.d_cs]) * cvt<ACC>(fwd[ob + t * p.o_rs + d * p.o_cs]);
      lse = cvt<ACC>(fwd[ob + t * p.o_rs + p.D * p.o_cs]);
      delta[b * p.Tq + t] = dl;
    }
    stats[2 * r] = lse, stats[2 * r + 1] = dl;
  }
  ACC dq[QW][DPL];
#pragma unroll
  for (int i = 0; i < QW; ++i)
#pragma unroll
    for (int c = 0; c < DPL; ++c) dq[i][c] = 0;
  const i64 my_first = t0 + warp * QW;
  const i64 block_last = limit_of(p, min(p.Tq - 1, t0 + QB - 1));
  ACC* P = Ps + warp * KT * (QW + 1);
  for (i64 s0 = 0; s0 <= block_last; s0 += KT) {
    __syncthreads();
    load_rows(Ks, D + 1, false, k, kb, p.k_rs, p.k_cs, s0, KT, p.S, p.D, (ACC)1);
    load_rows(Vs, D + 1, false, v, vb, p.v_rs, p.v_cs, s0, KT, p.S, p.D, (ACC)1);
    __syncthreads();
    ACC s[QW], dp[QW];
#pragma unroll
    for (int i = 0; i < QW; ++i) s[i] = dp[i] = 0;
    for (int d = 0; d < D; ++d) {
      const ACC kv = Ks[lane * (D + 1) + d], vv = Vs[lane * (D + 1) + d];
      const ACC* qd = Qs + d * QB + warp * QW;
      const ACC* gd = Gs + d * QB + warp * QW;
#if VEC4
#pragma unroll
      for (int i = 0; i < QW; i += 4) {
        const float4 q4 = *(const float4*)(qd + i), g4 = *(const float4*)(gd + i);
        s[i] += q4.x * kv, s[i + 1] += q4.y * kv, s[i + 2] += q4.z * kv, s[i + 3] += q4.w * kv;
        dp[i] += g4.x * vv, dp[i + 1] += g4.y * vv, dp[i + 2] += g4.z * vv, dp[i + 3] += g4.w * vv;
      }
#else
#pragma unroll
      for (int i = 0; i < QW; ++i) s[i] += qd[i] * kv, dp[i] += gd[i] * vv;
#endif
    }
    const i64 key = s0 + lane;
#pragma unroll
    for (int i = 0; i < QW; ++i) {
      const i64 t = my_first + i;
      const bool ok = t < p.Tq && key <= limit_of(p, t) && key < p.S;
      const int r = warp * QW + i;
      P[lane * (QW + 1) + i] = ok ? exp(s[i] - stats[2 * r]) * (dp[i] - stats[2 * r + 1]) : (ACC)0;
    }
    __syncwarp();
    for (int j = 0; j < KT; ++j) {
      ACC kk[DPL];
#pragma unroll
      for (int c = 0; c < DPL; ++c) kk[c] = lane + 32 * c < D ? Ks[j * (D + 1) + lane + 32 * c] : (ACC)0;
#pragma unroll
      for (int i = 0; i < QW; ++i) {
        const ACC ds = P[j * (QW + 1) + i];
#pragma unroll
        for (int c = 0; c < DPL; ++c) dq[i][c] += ds * kk[c];
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int i = 0; i < QW; ++i) {
    const i64 t = my_first + i;
    if (t >= p.Tq) break;
    T* row = out + p.out_offset + (b * p.rows_out + t) * p.D;
#pragma unroll
    for (int c = 0; c < DPL; ++c)
      if (lane + 32 * c < D) row[lane + 32 * c] = cvt<T>(dq[i][c] * p.scale);
  }
}

// Backward, dk and dv: a block owns KB keys (KW per warp) and walks the queries that see
// them in tiles of 32 (lane = query): dv_s = sum_t p_ts dout_t, dk_s = scale sum_t ds_ts q_t.
extern "C" __global__ void __launch_bounds__(128) attention_backward_dkdv_tiled(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ fwd,
    const T* __restrict__ dout, T* __restrict__ out, const ACC* __restrict__ delta, const AttnParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int D = (int)p.D;
  ACC* Ks = (ACC*)smem_raw;          // [D][KB]
  ACC* Vs = Ks + D * KB;             // [D][KB]
  ACC* Qs = Vs + D * KB;             // [32][D + 1], scaled
  ACC* Gs = Qs + 32 * (D + 1);       // [32][D + 1]: dout
  ACC* Ps = Gs + 32 * (D + 1);       // [4][32][2 KW + 1]: p, then ds
  ACC* stats = Ps + 4 * 32 * (2 * KW + 1);  // [32][2]: lse, delta
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 b = blockIdx.y, s0 = (i64)blockIdx.x * KB;
  const i64 qb = lead_offset(p.q, b), kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
  const i64 ob = lead_offset(p.o, b), gb = lead_offset(p.dout, b);
  load_rows(Ks, KB, true, k, kb, p.k_rs, p.k_cs, s0, KB, p.S, p.D, (ACC)1);
  load_rows(Vs, KB, true, v, vb, p.v_rs, p.v_cs, s0, KB, p.S, p.D, (ACC)1);
  ACC dk[KW][DPL], dv[KW][DPL];
#pragma unroll
  for (int i = 0; i < KW; ++i)
#pragma unroll
    for (int c = 0; c < DPL; ++c) dk[i][c] = dv[i][c] = 0;
  const i64 my_first = s0 + warp * KW;
  // Queries t see key s when t >= s - (S - Tq): the first query that sees the block's first key.
  const i64 first_t = p.causal ? max((i64)0, s0 - (p.S - p.Tq)) : 0;
  ACC* P = Ps + warp * 32 * (2 * KW + 1);
  for (i64 tq = first_t - first_t % 32; tq < p.Tq; tq += 32) {
    __syncthreads();
    load_rows(Qs, D + 1, false, q, qb, p.q_rs, p.q_cs, tq, 32, p.Tq, p.D, p.scale);
    load_rows(Gs, D + 1, false, dout, gb, p.d_rs, p.d_cs, tq, 32, p.Tq, p.D, (ACC)1);
    if (threadIdx.x < 32) {
      const i64 t = tq + threadIdx.x;
      stats[2 * threadIdx.x] = t < p.Tq ? cvt<ACC>(fwd[ob + t * p.o_rs + p.D * p.o_cs]) : (ACC)0;
      stats[2 * threadIdx.x + 1] = t < p.Tq ? delta[b * p.Tq + t] : (ACC)0;
    }
    __syncthreads();
    ACC s[KW], dp[KW];
#pragma unroll
    for (int i = 0; i < KW; ++i) s[i] = dp[i] = 0;
    for (int d = 0; d < D; ++d) {
      const ACC qv = Qs[lane * (D + 1) + d], gv = Gs[lane * (D + 1) + d];
      const ACC* kd = Ks + d * KB + warp * KW;
      const ACC* vd = Vs + d * KB + warp * KW;
#if VEC4
#pragma unroll
      for (int i = 0; i < KW; i += 4) {
        const float4 k4 = *(const float4*)(kd + i), v4 = *(const float4*)(vd + i);
        s[i] += qv * k4.x, s[i + 1] += qv * k4.y, s[i + 2] += qv * k4.z, s[i + 3] += qv * k4.w;
        dp[i] += gv * v4.x, dp[i + 1] += gv * v4.y, dp[i + 2] += gv * v4.z, dp[i + 3] += gv * v4.w;
      }
#else
#pragma unroll
      for (int i = 0; i < KW; ++i) s[i] += qv * kd[i], dp[i] += gv * vd[i];
#endif
    }
    const i64 t = tq + lane;
    const ACC lse = stats[2 * lane], dl = stats[2 * lane + 1];
#pragma unroll
    for (int i = 0; i < KW; ++i) {
      const i64 key = my_first + i;
      const bool ok = t < p.Tq && key < p.S && key <= limit_of(p, t);
      const ACC pr = ok ? exp(s[i] - lse) : (ACC)0;
      P[lane * (2 * KW + 1) + i] = pr;
      P[lane * (2 * KW + 1) + KW + i] = pr * (dp[i] - dl);
    }
    __syncwarp();
    for (int j = 0; j < 32; ++j) {
      ACC qq[DPL], gg[DPL];
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const bool in = lane + 32 * c < D;
        qq[c] = in ? Qs[j * (D + 1) + lane + 32 * c] : (ACC)0;
        gg[c] = in ? Gs[j * (D + 1) + lane + 32 * c] : (ACC)0;
      }
#pragma unroll
      for (int i = 0; i < KW; ++i) {
        const ACC pr = P[j * (2 * KW + 1) + i], ds = P[j * (2 * KW + 1) + KW + i];
#pragma unroll
        for (int c = 0; c < DPL; ++c) dv[i][c] += pr * gg[c], dk[i][c] += ds * qq[c];  // qq carries the scale
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int i = 0; i < KW; ++i) {
    const i64 key = my_first + i;
    if (key >= p.S) break;
    T* dkr = out + p.out_offset + ((p.B + b) * p.rows_out + key) * p.D;
    T* dvr = out + p.out_offset + ((2 * p.B + b) * p.rows_out + key) * p.D;
#pragma unroll
    for (int c = 0; c < DPL; ++c)
      if (lane + 32 * c < D) dkr[lane + 32 * c] = cvt<T>(dk[i][c]), dvr[lane + 32 * c] = cvt<T>(dv[i][c]);
  }
}
