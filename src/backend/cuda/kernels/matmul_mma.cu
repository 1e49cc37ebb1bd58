// Matrix products on the tensor cores (mma.sync, sm_80 and later): bf16 or f16 operands
// with f32 accumulation (m16n8k16), or f32 operands rounded to TF32 (m16n8k8) when the
// user allows it. Defines: TA (= TB, the operands' storage type), TO (output storage),
// MMA_TF32 (0/1), A_MODE, B_MODE (how a tile is read from global memory, below).
//
// A block computes a 128 x 128 tile with 8 warps (2 x 4, 64 x 32 each: 4 x 4 mma tiles),
// stepping K by 32 through shared memory, where both operands are stored K-contiguous
// (As[m][k], Bs[n][k]), so each fragment register is one 32-bit load; rows are padded so
// the 8 rows a fragment load touches fall in distinct banks.
// Global reads (A_MODE / B_MODE): 0 = 16-byte vectors along K (K-contiguous, K % 8 == 0,
// 16-byte aligned: the host checks), 1 = scalars walking K, 2 = scalars walking M (or N),
// for operands contiguous along M (N): transposed views read coalesced.
//
// MatmulParams is the one of matmul.cu (same batch and stride description).

struct MatmulParams {
  View a_batch, b_batch;
  i64 a_rs, a_cs, b_rs, b_cs;
  i64 M, N, K, batch, out_offset;
  int batch_rank;
};

#if MMA_TF32
typedef float SmemT;      // TF32 values in 32-bit words
#define KSTEP 8
#define PAD 4
#else
typedef TA SmemT;
#define KSTEP 16
#define PAD 8
#endif
#define BM 128
#define BN 128
#define BK 32

__device__ __forceinline__ SmemT to_smem(TA v) {
#if MMA_TF32
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return __uint_as_float(r);
#else
  return v;
#endif
}

// One operand tile (rows x BK, K-contiguous in shared memory) from global memory.
template <int MODE, int ROWS>
__device__ __forceinline__ void load_tile(SmemT (*s)[BK + PAD], const TA* __restrict__ g, i64 base, i64 rs, i64 ks,
                                          i64 row0, i64 rows_total, i64 k0, i64 K) {
  const int tid = threadIdx.x;
  if (MODE == 0) {
    // ROWS * BK / 8 vectors of 8 elements (16 bytes as bf16/f16, 32 as f32: two uint4).
    for (int v = tid; v < ROWS * BK / 8; v += 256) {
      const int r = v / (BK / 8), kc = (v % (BK / 8)) * 8;
      const i64 gr = row0 + r, gk = k0 + kc;
      if (gr < rows_total && gk < K) {
        const TA* src = g + base + gr * rs + gk;
#if MMA_TF32
        const float4 x0 = *(const float4*)src, x1 = *(const float4*)(src + 4);
        s[r][kc + 0] = to_smem(x0.x); s[r][kc + 1] = to_smem(x0.y); s[r][kc + 2] = to_smem(x0.z); s[r][kc + 3] = to_smem(x0.w);
        s[r][kc + 4] = to_smem(x1.x); s[r][kc + 5] = to_smem(x1.y); s[r][kc + 6] = to_smem(x1.z); s[r][kc + 7] = to_smem(x1.w);
#else
        *(uint4*)&s[r][kc] = *(const uint4*)src;
#endif
      } else {
        for (int i = 0; i < 8; ++i) s[r][kc + i] = to_smem((TA)0.0f);
      }
    }
  } else {
    for (int e = tid; e < ROWS * BK; e += 256) {
      const int r = MODE == 1 ? e / BK : e % ROWS, kk = MODE == 1 ? e % BK : e / ROWS;
      const i64 gr = row0 + r, gk = k0 + kk;
      s[r][kk] = to_smem(gr < rows_total && gk < K ? g[base + gr * rs + gk * ks] : (TA)0.0f);
    }
  }
}

__device__ __forceinline__ unsigned word(const SmemT* p) { return *(const unsigned*)p; }

extern "C" __global__ void __launch_bounds__(256) matmul_mma(const TA* __restrict__ a, const TA* __restrict__ b,
                                                             TO* __restrict__ out, const MatmulParams p) {
  __shared__ __align__(16) SmemT as[BM][BK + PAD];
  __shared__ __align__(16) SmemT bs[BN][BK + PAD];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int wm = warp / 4, wn = warp % 4;
  const i64 m0 = (i64)blockIdx.y * BM, n0 = (i64)blockIdx.x * BN;
  for (i64 z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const i64 abase = lead_offset(p.a_batch, z), bbase = lead_offset(p.b_batch, z);
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
    for (i64 k0 = 0; k0 < p.K; k0 += BK) {
      // A rows are M (row stride a_rs, K stride a_cs); B "rows" are N (stride b_cs), K stride b_rs.
      load_tile<A_MODE, BM>(as, a, abase, p.a_rs, p.a_cs, m0, p.M, k0, p.K);
      load_tile<B_MODE, BN>(bs, b, bbase, p.b_cs, p.b_rs, n0, p.N, k0, p.K);
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < BK; ks += KSTEP) {
        unsigned af[4][4], bf[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = wm * 64 + i * 16 + g;
#if MMA_TF32
          af[i][0] = word(&as[r][ks + t]);
          af[i][1] = word(&as[r + 8][ks + t]);
          af[i][2] = word(&as[r][ks + t + 4]);
          af[i][3] = word(&as[r + 8][ks + t + 4]);
#else
          af[i][0] = word(&as[r][ks + 2 * t]);
          af[i][1] = word(&as[r + 8][ks + 2 * t]);
          af[i][2] = word(&as[r][ks + 2 * t + 8]);
          af[i][3] = word(&as[r + 8][ks + 2 * t + 8]);
#endif
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = wn * 32 + j * 8 + g;
#if MMA_TF32
          bf[j][0] = word(&bs[c][ks + t]);
          bf[j][1] = word(&bs[c][ks + t + 4]);
#else
          bf[j][0] = word(&bs[c][ks + 2 * t]);
          bf[j][1] = word(&bs[c][ks + 2 * t + 8]);
#endif
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float* d = acc[i][j];
#if MMA_TF32
            asm volatile(
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                "{%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
#else
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                "{%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
#endif
          }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const i64 gm = m0 + wm * 64 + i * 16 + g + (c >= 2 ? 8 : 0), gn = n0 + wn * 32 + j * 8 + 2 * t + (c & 1);
          if (gm < p.M && gn < p.N) out[p.out_offset + (z * p.M + gm) * p.N + gn] = cvt<TO>(acc[i][j][c]);
        }
  }
}
