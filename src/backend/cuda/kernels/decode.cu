// The generation engine's kernels (include/alk/generate.h; the CPU's kernels_decode.cpp is the
// reference): the KV cache write, attention of one query row per slot over its cached length,
// and sampling of one token per row. Defines: T (the cache's and q's storage type), ACC (what
// attention accumulates in: float, double for f64), OUT (the attention output's storage type),
// IDX (positions/lengths/counters: long long or int), DPL (head-dim elements a lane holds:
// ceil(D / 8)), PARTS (key ranges each (slot, head) is split into; 1: no combine pass).

struct PairParams {  // [S, X] views the kernels read row by row
  i64 offset, stride0, stride1;
};

__device__ __forceinline__ i64 load_idx(const IDX* p, i64 offset, i64 stride, i64 s) { return (i64)p[offset + s * stride]; }

// ---- kv_cache_write: out[s, positions[s]] = rows[s] (out already holds the cache) ----
struct KvWriteParams {
  i64 n, Tmax, Hkv, D;              // n = S * Hkv * D
  i64 rows_offset, rs0, rs1, rs2;  // rows [S, Hkv, D]
  i64 pos_offset, pos_stride;
  i64 out_offset;
  u64 launch;
};

extern "C" __global__ void kv_cache_write_kernel(const T* __restrict__ rows, const IDX* __restrict__ positions,
                                                 T* __restrict__ out, u64* flag, const KvWriteParams p) {
  const i64 row = p.Hkv * p.D;
  ALK_FOR(i, p.n) {
    const i64 s = i / row, r = i % row, h = r / p.D, d = r % p.D;
    const i64 pos = load_idx(positions, p.pos_offset, p.pos_stride, s);
    if (pos < 0 || pos >= p.Tmax) {
      if (r == 0) report_bad_index(flag, p.launch, s, pos);
      continue;
    }
    out[p.out_offset + (s * p.Tmax + pos) * row + r] = rows[p.rows_offset + s * p.rs0 + h * p.rs1 + d * p.rs2];
  }
}

// ---- decode_attention ----
// Block (slot, head, part): 4 warps, each of 4 groups of 8 lanes; a group takes one key at a
// time (lane g of the group holds head-dim elements g, g + 8, ...), so a key row is read by 8
// adjacent lanes and its dot product needs 3 shuffles. Each group runs an online softmax over
// keys first + group, first + group + 16, ... of the block's range; the 16 states are combined
// in shared memory. With PARTS > 1 each part's (max, sum, unnormalized row) goes to an f32
// workspace and decode_combine_kernel finishes (flash-decoding: a batch-1 step has only
// S * H blocks otherwise, GPT-2: 12 on 132 SMs).
struct DecodeParams {
  i64 H, Tmax, group;  // group = H / Hkv
  i64 q_offset, qs0, qs1, qs2;
  i64 k_offset, ks0, ks1, ks2, ks3;
  i64 v_offset, vs0, vs1, vs2, vs3;
  i64 len_offset, len_stride;
  i64 out_offset;
  int D;
  ACC scale;
};

#define DECODE_GROUPS 16

extern "C" __global__ void __launch_bounds__(128) decode_attention_kernel(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc, const IDX* __restrict__ lengths,
    OUT* __restrict__ out, float* __restrict__ partials, const DecodeParams p) {
  __shared__ ACC sm_m[DECODE_GROUPS], sm_l[DECODE_GROUPS];
  __shared__ ACC sm_acc[DECODE_GROUPS][DPL * 8];
  const i64 u = blockIdx.x, slot = u / p.H, h = u % p.H, kvh = h / p.group;
  const int part = blockIdx.y, lane = threadIdx.x & 7, grp = threadIdx.x >> 3;
  i64 len = load_idx(lengths, p.len_offset, p.len_stride, slot);
  len = len < 0 ? 0 : (len > p.Tmax ? p.Tmax : len);
  const i64 chunk = (p.Tmax + PARTS - 1) / PARTS;
  const i64 first = min((i64)part * chunk, len), end = min(first + chunk, len);
  ACC qr[DPL], acc[DPL];
  for (int j = 0; j < DPL; ++j) {
    const int d = lane + 8 * j;
    qr[j] = d < p.D ? cvt<ACC>(q[p.q_offset + slot * p.qs0 + h * p.qs1 + d * p.qs2]) : (ACC)0;
    acc[j] = 0;
  }
  ACC m = -ALK_INF, l = 0;
  // A warp's four groups take keys t0 .. t0 + 3 together: the loop's trip count is the same
  // for the whole warp (the shuffles need every lane), a group past the range reads nothing.
  for (i64 t0 = first + (grp & ~3); t0 < end; t0 += DECODE_GROUPS) {
    const i64 t = t0 + (grp & 3);
    const bool valid = t < end;
    const i64 ko = p.k_offset + slot * p.ks0 + t * p.ks1 + kvh * p.ks2;
    ACC dot = 0;
    for (int j = 0; j < DPL; ++j) {
      const int d = lane + 8 * j;
      if (valid && d < p.D) dot += qr[j] * cvt<ACC>(kc[ko + d * p.ks3]);
    }
    for (int o = 4; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (!valid) continue;
    const ACC s = dot * p.scale, mn = max(m, s), a = exp(m - mn), e = exp(s - mn);
    const i64 vo = p.v_offset + slot * p.vs0 + t * p.vs1 + kvh * p.vs2;
    for (int j = 0; j < DPL; ++j) {
      const int d = lane + 8 * j;
      acc[j] = acc[j] * a + (d < p.D ? e * cvt<ACC>(vc[vo + d * p.vs3]) : (ACC)0);
    }
    l = l * a + e;
    m = mn;
  }
  if (lane == 0) sm_m[grp] = m, sm_l[grp] = l;
  __syncthreads();
  ACC mall = -ALK_INF;
  for (int g = 0; g < DECODE_GROUPS; ++g)
    if (sm_l[g] > (ACC)0) mall = max(mall, sm_m[g]);
  const ACC w = l > (ACC)0 ? exp(m - mall) : (ACC)0;
  for (int j = 0; j < DPL; ++j) sm_acc[grp][lane + 8 * j] = acc[j] * w;
  __syncthreads();
  ACC total = 0;
  for (int g = 0; g < DECODE_GROUPS; ++g) total += sm_l[g] > (ACC)0 ? sm_l[g] * exp(sm_m[g] - mall) : (ACC)0;
  for (int d = threadIdx.x; d < p.D; d += blockDim.x) {
    ACC v = 0;
    for (int g = 0; g < DECODE_GROUPS; ++g) v += sm_acc[g][d];
#if PARTS > 1
    partials[(u * PARTS + part) * (p.D + 2) + 2 + d] = (float)v;
#else
    out[p.out_offset + u * p.D + d] = cvt<OUT>(total > (ACC)0 ? v / total : (ACC)0);
#endif
  }
#if PARTS > 1
  if (threadIdx.x == 0) {
    partials[(u * PARTS + part) * (p.D + 2)] = (float)mall;
    partials[(u * PARTS + part) * (p.D + 2) + 1] = (float)total;
  }
#endif
}

// The parts of each (slot, head) rescaled to their common maximum and summed.
extern "C" __global__ void decode_combine_kernel(const float* __restrict__ partials, OUT* __restrict__ out, i64 out_offset,
                                                 int D) {
  const i64 u = blockIdx.x;
  const float* at = partials + u * PARTS * (D + 2);
  float mall = -ALK_INF, total = 0;
  for (int k = 0; k < PARTS; ++k)
    if (at[k * (D + 2) + 1] > 0.f) mall = max(mall, at[k * (D + 2)]);
  for (int k = 0; k < PARTS; ++k)
    if (at[k * (D + 2) + 1] > 0.f) total += at[k * (D + 2) + 1] * expf(at[k * (D + 2)] - mall);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0;
    for (int k = 0; k < PARTS; ++k)
      if (at[k * (D + 2) + 1] > 0.f) v += at[k * (D + 2) + 2 + d] * expf(at[k * (D + 2)] - mall);
    out[out_offset + u * D + d] = cvt<OUT>(total > 0.f ? v / total : 0.f);
  }
}

// ---- sample_tokens: one block of 256 a row ----
// Floats as unsigned keys in their order (negatives flipped), and back.
__device__ __forceinline__ unsigned fkey(float f) {
  const unsigned b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ __forceinline__ float funkey(unsigned k) { return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k); }

struct SampleParams {
  i64 V;
  i64 x_offset, xs0, xs1;
  i64 st_offset, sts0, sts1;
  i64 seed_offset, seed_stride;
  i64 ctr_offset, ctr_stride;
  i64 out_offset;
};

// Block-wide sums (256 threads = 8 warps), every thread gets the total.
template <class V>
__device__ __forceinline__ V block_sum(V v, V* shared8) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared8[threadIdx.x >> 5] = v;
  __syncthreads();
  V total = 0;
  for (int w = 0; w < 8; ++w) total += shared8[w];
  return total;
}

// The CPU's rule (generate.h) with probabilities in double: z = x / temperature, p = exp(z -
// max z); the top-k threshold is the k-th largest logit (bisection on the float keys: 32
// counting passes), top-p's the largest logit x* whose tokens (x >= x*) hold top_p of the
// mass (32 mass passes); p is monotone in x, so these keep the CPU's sets. Sums are reduced
// in another order than the CPU's sequential loop: a draw differs only where u lands within
// rounding of a boundary between two tokens.
extern "C" __global__ void __launch_bounds__(256) sample_tokens_kernel(
    const float* __restrict__ x, const float* __restrict__ settings, const i64* __restrict__ seeds,
    const IDX* __restrict__ counters, i64* __restrict__ out, const SampleParams p) {
  __shared__ double sd[8];
  __shared__ unsigned su[8];
  __shared__ float best_v[256];
  __shared__ int best_i[256];
  __shared__ double chunk_sum[256];
  __shared__ int chunk_last[256];
  const i64 row = blockIdx.x, V = p.V;
  const int tid = threadIdx.x;
  const float* xr = x + p.x_offset + row * p.xs0;
#define XR(i) xr[(i) * p.xs1]
  const float* st = settings + p.st_offset + row * p.sts0;
  const double temp = st[0], topk = st[p.sts1], topp = st[2 * p.sts1];
  // The first maximum.
  float bv = -ALK_INF;
  int bi = -1;
  for (i64 i = tid; i < V; i += 256) {
    const float v = XR(i);
    if (bi < 0 || v > bv) bv = v, bi = (int)i;
  }
  best_v[tid] = bv, best_i[tid] = bi;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (tid < w) {
      const float o = best_v[tid + w];
      const int oi = best_i[tid + w];
      if (oi >= 0 && (best_i[tid] < 0 || o > best_v[tid] || (o == best_v[tid] && oi < best_i[tid])))
        best_v[tid] = o, best_i[tid] = oi;
    }
    __syncthreads();
  }
  const float best = best_v[0];
  const int best_index = best_i[0];
  if (!(temp > 0)) {
    if (tid == 0) out[p.out_offset + row] = best_index;
    return;
  }
  // top-k: the largest key u with count(key >= u) >= k is the k-th largest logit's.
  const i64 k = (i64)topk;
  float kth = -ALK_INF;
  if (k > 0 && k < V) {
    unsigned lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      const unsigned mid = lo + (hi - lo) / 2 + 1;
      unsigned c = 0;
      for (i64 i = tid; i < V; i += 256) c += fkey(XR(i)) >= mid;
      if (block_sum(c, su) >= (unsigned)k) lo = mid; else hi = mid - 1;
    }
    kth = funkey(lo);
  }
  const double zmax = (double)best / temp;
#define PROB(v) ((v) >= kth ? exp((double)(v) / temp - zmax) : 0.0)
  double part = 0;
  for (i64 i = tid; i < V; i += 256) part += PROB(XR(i));
  double total = block_sum(part, sd);
  float keep = kth;
  if (topp < 1) {
    // The largest logit key u whose tokens (key >= u) hold at least top_p of the mass.
    unsigned lo = fkey(kth == -ALK_INF ? -ALK_INF : kth), hi = fkey(best);
    while (lo < hi) {
      const unsigned mid = lo + (hi - lo) / 2 + 1;
      double mass = 0;
      for (i64 i = tid; i < V; i += 256) {
        const float v = XR(i);
        if (fkey(v) >= mid) mass += PROB(v);
      }
      if (block_sum(mass, sd) >= topp * total) lo = mid; else hi = mid - 1;
    }
    keep = funkey(lo);
    part = 0;
    for (i64 i = tid; i < V; i += 256) {
      const float v = XR(i);
      part += v >= keep ? PROB(v) : 0.0;
    }
    total = block_sum(part, sd);
  }
#define KEPT(v) ((v) >= keep ? PROB(v) : 0.0)
  // Each thread's contiguous chunk, its sum and its last kept token; thread 0 walks them in order.
  const i64 chunk = (V + 255) / 256, b = min(tid * chunk, V), e = min(b + chunk, V);
  double mine = 0;
  int last = -1;
  for (i64 i = b; i < e; ++i) {
    const double q = KEPT(XR(i));
    mine += q;
    if (q > 0) last = (int)i;
  }
  chunk_sum[tid] = mine, chunk_last[tid] = last;
  __syncthreads();
  if (tid != 0) return;
  const u64 key = (u64)seeds[p.seed_offset + row * p.seed_stride];
  const u64 counter = (u64)load_idx(counters, p.ctr_offset, p.ctr_stride, row);
  unsigned w[4];
  philox(counter, key, w);  // the draw's uniform: (w0 >> 8) / 2^24, as core/philox.h's
  double u = (double)((float)(w[0] >> 8) * (1.0f / 16777216.0f)) * total;
  int pick = -1, last_kept = best_index;
  for (int j = 0; j < 256 && pick < 0; ++j) {
    if (chunk_last[j] < 0) continue;
    last_kept = chunk_last[j];
    if (u >= chunk_sum[j]) {
      u -= chunk_sum[j];
      continue;
    }
    const i64 jb = min((i64)j * chunk, V), je = min(jb + chunk, V);
    for (i64 i = jb; i < je && pick < 0; ++i) {
      const double q = KEPT(XR(i));
      if (q <= 0) continue;
      if (u < q) pick = (int)i; else u -= q;
    }
  }
  out[p.out_offset + row] = pick >= 0 ? pick : last_kept;
#undef KEPT
#undef PROB
#undef XR
}
