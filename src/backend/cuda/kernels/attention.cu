// Scaled dot-product attention, forward and backward, never materializing the T x S
// scores (online softmax, as in FlashAttention). One warp per row; lane l holds the
// head-dim elements l, l + 32, ... (D <= 32 * DPL). Defines: T (storage), ACC, DPL.
// AttnParams and the causal rule: attention_shared.cuh.

// out [B, T, D + 1]: the attention output, then the row's logsumexp of scaled scores.
extern "C" __global__ void attention_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                             T* __restrict__ out, const AttnParams p) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 row = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < p.B * p.Tq; row += warps) {
    const i64 b = row / p.Tq, t = row % p.Tq;
    const i64 qb = lead_offset(p.q, b) + t * p.q_rs;
    const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
    ACC qv[DPL], acc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const i64 d = lane + 32 * j;
      qv[j] = d < p.D ? cvt<ACC>(q[qb + d * p.q_cs]) * p.scale : (ACC)0;
      acc[j] = 0;
    }
    ACC m = -(ACC)ALK_INF, l = 0;
    const i64 last = limit_of(p, t);
    for (i64 s = 0; s <= last; ++s) {
      ACC dot = 0;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const i64 d = lane + 32 * j;
        if (d < p.D) dot += qv[j] * cvt<ACC>(k[kb + s * p.k_rs + d * p.k_cs]);
      }
      dot = warp_sum(dot);
      const ACC mn = max_nan(m, dot), corr = exp(m - mn), e = exp(dot - mn);
      l = l * corr + e;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const i64 d = lane + 32 * j;
        acc[j] = acc[j] * corr + (d < p.D ? e * cvt<ACC>(v[vb + s * p.v_rs + d * p.v_cs]) : (ACC)0);
      }
      m = mn;
    }
    // A row that sees no key (causal with S < T) is 0, its logsumexp -inf (the CPU's rule).
    const bool any = l > 0;
    const ACC inv = any ? (ACC)1 / l : (ACC)0;
    T* o = out + p.out_offset + row * (p.D + 1);
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const i64 d = lane + 32 * j;
      if (d < p.D) o[d] = cvt<T>(acc[j] * inv);
    }
    if (lane == 0) o[p.D] = cvt<T>(any ? m + log(l) : -(ACC)ALK_INF);
  }
}

// Backward, pass 1 (one warp per query row): dq = scale * sum_s ds_s k_s with
// p_s = exp(scale q.k_s - lse), ds_s = p_s (dout.v_s - delta), delta = dout.o; delta goes
// to scratch for pass 2. out packs [3, B, rows_out, D]: dq, dk, dv.
extern "C" __global__ void attention_backward_dq(const T* __restrict__ q, const T* __restrict__ k,
                                                 const T* __restrict__ v, const T* __restrict__ fwd,
                                                 const T* __restrict__ dout, T* __restrict__ out,
                                                 ACC* __restrict__ delta_out, const AttnParams p) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 row = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < p.B * p.Tq; row += warps) {
    const i64 b = row / p.Tq, t = row % p.Tq;
    const i64 qb = lead_offset(p.q, b) + t * p.q_rs;
    const i64 kb = lead_offset(p.k, b), vb = lead_offset(p.v, b);
    const i64 ob = lead_offset(p.o, b) + t * p.o_rs, db = lead_offset(p.dout, b) + t * p.d_rs;
    ACC qv[DPL], dv[DPL], dq[DPL];
    ACC delta = 0;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const i64 d = lane + 32 * j;
      const bool in = d < p.D;
      qv[j] = in ? cvt<ACC>(q[qb + d * p.q_cs]) * p.scale : (ACC)0;
      dv[j] = in ? cvt<ACC>(dout[db + d * p.d_cs]) : (ACC)0;
      delta += in ? dv[j] * cvt<ACC>(fwd[ob + d * p.o_cs]) : (ACC)0;
      dq[j] = 0;
    }
    delta = warp_sum(delta);
    const ACC lse = cvt<ACC>(fwd[ob + p.D * p.o_cs]);
    const i64 last = limit_of(p, t);
    for (i64 s = 0; s <= last; ++s) {
      ACC dot = 0, dp = 0;
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const i64 d = lane + 32 * j;
        if (d < p.D) {
          dot += qv[j] * cvt<ACC>(k[kb + s * p.k_rs + d * p.k_cs]);
          dp += dv[j] * cvt<ACC>(v[vb + s * p.v_rs + d * p.v_cs]);
        }
      }
      dot = warp_sum(dot);
      dp = warp_sum(dp);
      const ACC ds = exp(dot - lse) * (dp - delta);
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const i64 d = lane + 32 * j;
        if (d < p.D) dq[j] += ds * cvt<ACC>(k[kb + s * p.k_rs + d * p.k_cs]);
      }
    }
    T* o = out + p.out_offset + (b * p.rows_out + t) * p.D;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const i64 d = lane + 32 * j;
      if (d < p.D) o[d] = cvt<T>(dq[j] * p.scale);
    }
    if (lane == 0) delta_out[row] = delta;
  }
}

// Pass 2 (one warp per key row s): dv_s = sum_t p_ts dout_t, dk_s = scale * sum_t ds_ts q_t
// over the queries that see s.
extern "C" __global__ void attention_backward_dkdv(const T* __restrict__ q, const T* __restrict__ k,
                                                   const T* __restrict__ v, const T* __restrict__ fwd,
                                                   const T* __restrict__ dout, T* __restrict__ out,
                                                   const ACC* __restrict__ delta, const AttnParams p) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 row = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < p.B * p.S; row += warps) {
    const i64 b = row / p.S, s = row % p.S;
    const i64 qb = lead_offset(p.q, b), ob = lead_offset(p.o, b);
    const i64 db = lead_offset(p.dout, b);
    const i64 kb = lead_offset(p.k, b) + s * p.k_rs, vb = lead_offset(p.v, b) + s * p.v_rs;
    ACC kv[DPL], vv[DPL], dk[DPL], dvacc[DPL];
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const i64 d = lane + 32 * j;
      const bool in = d < p.D;
      kv[j] = in ? cvt<ACC>(k[kb + d * p.k_cs]) : (ACC)0;
      vv[j] = in ? cvt<ACC>(v[vb + d * p.v_cs]) : (ACC)0;
      dk[j] = dvacc[j] = 0;
    }
    // Queries t see s when s <= t + (S - T), i.e. t >= s - (S - T).
    const i64 first = p.causal ? max((i64)0, s - (p.S - p.Tq)) : 0;
    for (i64 t = first; t < p.Tq; ++t) {
      ACC dot = 0, dp = 0, qd[DPL], gd[DPL];
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        const i64 d = lane + 32 * j;
        const bool in = d < p.D;
        qd[j] = in ? cvt<ACC>(q[qb + t * p.q_rs + d * p.q_cs]) * p.scale : (ACC)0;
        gd[j] = in ? cvt<ACC>(dout[db + t * p.d_rs + d * p.d_cs]) : (ACC)0;
        dot += qd[j] * kv[j];
        dp += gd[j] * vv[j];
      }
      dot = warp_sum(dot);
      dp = warp_sum(dp);
      const ACC pr = exp(dot - cvt<ACC>(fwd[ob + t * p.o_rs + p.D * p.o_cs]));
      const ACC ds = pr * (dp - delta[b * p.Tq + t]);
#pragma unroll
      for (int j = 0; j < DPL; ++j) {
        dvacc[j] += pr * gd[j];
        dk[j] += ds * qd[j];  // qd already carries the scale
      }
    }
    T* dko = out + p.out_offset + ((p.B + b) * p.rows_out + s) * p.D;
    T* dvo = out + p.out_offset + ((2 * p.B + b) * p.rows_out + s) * p.D;
#pragma unroll
    for (int j = 0; j < DPL; ++j) {
      const i64 d = lane + 32 * j;
      if (d < p.D) dko[d] = cvt<T>(dk[j]), dvo[d] = cvt<T>(dvacc[j]);
    }
  }
}
