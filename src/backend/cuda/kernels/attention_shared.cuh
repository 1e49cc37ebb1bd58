// What every attention kernel (attention.cu, attention_tiled.cu, attention_mma.cu) shares:
// the launch parameters (the host fills AttnLaunchParams in cuda_device.cpp with the same
// layout, then appends `scale` in ACC) and the causal rule.
// q [B, Tq, D], k and v [B, S, D] as views (any batch dims through lead_offset, rows and
// columns by the strides below); causal: query t sees keys s <= t + (S - Tq).

struct AttnParams {
  View q, k, v;      // batch part through lead_offset; rows and columns by rs/cs below
  View o, dout;      // the forward's output rows [B, Tq, D] (its logsumexp: lse_at) and dL/dout [B, Tq, D]
  i64 q_rs, q_cs, k_rs, k_cs, v_rs, v_cs, o_rs, o_cs, d_rs, d_cs;
  i64 B, Tq, S, D, out_offset, rows_out;  // Tq: queries (T is the storage type); rows_out: max(Tq, S)
  // -1: each output row is followed by its logsumexp (packed [B, Tq, D + 1]); else the
  // element (of the forward's 16-bit buffer) where the f32 logsumexps [B, Tq] start
  // (AttentionParams::out_heads; the mma kernels only).
  i64 lse_at;
  // Where the backward writes gradient `plane` (0 dq, 1 dk, 2 dv) of batch b, row t:
  // plane * g_plane + (b / g_heads) * g_bs + (b % g_heads) * g_hs + t * g_rs from out_offset.
  // [3, B, rows_out, D], or the packed projection's [b, T, 3, H, D] (AttentionParams::grads_qkv).
  i64 g_plane, g_bs, g_hs, g_rs, g_heads;
  int batch_rank, causal;
  ACC scale;
};

__device__ __forceinline__ i64 limit_of(const AttnParams& p, i64 t) {  // the last key query t sees
  return p.causal ? min(p.S - 1, t + (p.S - p.Tq)) : p.S - 1;
}
