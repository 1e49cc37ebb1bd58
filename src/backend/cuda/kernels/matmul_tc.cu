// Matrix products of bf16 or f16 operands on the tensor cores (mma.sync), f32 accumulation,
// for operands the host found 16-byte-vector readable (else matmul_mma.cu takes them); on
// sm_90a the host prefers matmul_wgmma.cu. The host prepends matmul_shared.cuh.
// Defines: TA (operand storage), TO (output storage), MMA_TYPE ("bf16" / "f16"),
// A_KMAJOR (1: a is contiguous along K, a[m][k]; 0: along M, a^T as stored),
// B_KMAJOR (1: b contiguous along K, i.e. b^T as stored, a weight W used as W^T; 0: along N),
// WN (m16n8 tiles per warp along N: 4 or 8), STAGES (the ring's depth, >= 2), EPILOGUE (1:
// the host prepended EpiParams and epilogue_at(), applied to each value as it is stored).
//
// A block computes 128 x (32 WN) outputs with 8 warps (2 x 4, 64 x 8 WN each: 4 x WN
// m16n8k16 tiles; WN = 8 reads 8 ldmatrix per 32 mma instead of 6 per 16), K in steps of 32
// through a STAGES-deep ring of shared memory filled by cp.async (16-byte copies,
// zero-filled past the edges), so loads of step k + STAGES - 1 overlap the math of step k. Each operand keeps its global layout in shared memory (rows padded by 16
// bytes, so the 8 rows an ldmatrix phase reads fall in distinct banks) and fragments are
// read with ldmatrix, transposing (.trans) where the operand is M- or N-contiguous.


#define BM 128
// BN (= 32 WN) comes from the host.
#define BK 32
#if A_KMAJOR
#define A_LD (BK + 8)  // As[m][k]
#define A_STAGE (BM * A_LD)
#else
#define A_LD (BM + 8)  // As[k][m]
#define A_STAGE (BK * A_LD)
#endif
#if B_KMAJOR
#define B_LD (BK + 8)  // Bs[n][k]
#define B_STAGE (BN * B_LD)
#else
#define B_LD (BN + 8)  // Bs[k][n]
#define B_STAGE (BK * B_LD)
#endif

// One stage: the A tile (128 rows of M x 32 of K: 512 16-byte vectors, two per thread) and
// the B tile (32 x BN of N: 4 BN vectors, BN / 64 per thread).
__device__ __forceinline__ void load_stage(h16* as, h16* bs, const TA* __restrict__ a, const TA* __restrict__ b,
                                           const MatmulParams& p, i64 abase, i64 bbase, i64 m0, i64 n0, i64 k0) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int v = tid + 256 * i;
#if A_KMAJOR
    const int r = v / 4, c = (v % 4) * 8;
    const i64 gm = m0 + r, gk = k0 + c;
    const bool ok = gm < p.M && gk < p.K;
    cp_async16(smem_u32(as + r * A_LD + c), ok ? a + abase + gm * p.a_rs + gk : a, ok);
#else
    const int r = v / 16, c = (v % 16) * 8;
    const i64 gk = k0 + r, gm = m0 + c;
    const bool ok = gm < p.M && gk < p.K;
    cp_async16(smem_u32(as + r * A_LD + c), ok ? a + abase + gk * p.a_cs + gm : a, ok);
#endif
  }
#pragma unroll
  for (int i = 0; i < BN / 64; ++i) {
    const int v = tid + 256 * i;
#if B_KMAJOR
    const int rb = v / 4, cb = (v % 4) * 8;
    const i64 gn = n0 + rb, gkb = k0 + cb;
    const bool okb = gn < p.N && gkb < p.K;
    cp_async16(smem_u32(bs + rb * B_LD + cb), okb ? b + bbase + gn * p.b_cs + gkb : b, okb);
#else
    const int rb = v / (BN / 8), cb = (v % (BN / 8)) * 8;
    const i64 gkb = k0 + rb, gn = n0 + cb;
    const bool okb = gn < p.N && gkb < p.K;
    cp_async16(smem_u32(bs + rb * B_LD + cb), okb ? b + bbase + gkb * p.b_rs + gn : b, okb);
#endif
  }
}


extern "C" __global__ void __launch_bounds__(256) matmul_tc(const TA* __restrict__ a, const TA* __restrict__ b,
                                                            TO* __restrict__ out, const MatmulParams p EPI_PARAM) {
  extern __shared__ __align__(16) h16 smem[];
  h16* as_all = smem;
  h16* bs_all = smem + STAGES * A_STAGE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int wm = warp / 4, wn = warp % 4;
  const i64 m0 = (i64)blockIdx.y * BM, n0 = (i64)blockIdx.x * BN;
  const i64 ktiles = (p.K + BK - 1) / BK;
  for (i64 z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const i64 abase = lead_offset(p.a_batch, z), bbase = lead_offset(p.b_batch, z);
    float acc[4][WN][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ktiles) load_stage(as_all + s * A_STAGE, bs_all + s * B_STAGE, a, b, p, abase, bbase, m0, n0, (i64)s * BK);
      cp_async_commit();
    }
    for (i64 kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage kt has landed for every thread; stage kt - 1 is free again
      const i64 next = kt + STAGES - 1;
      if (next < ktiles) {
        const int s = (int)(next % STAGES);
        load_stage(as_all + s * A_STAGE, bs_all + s * B_STAGE, a, b, p, abase, bbase, m0, n0, next * BK);
      }
      cp_async_commit();
      const h16* as = as_all + (kt % STAGES) * A_STAGE;
      const h16* bs = bs_all + (kt % STAGES) * B_STAGE;
#pragma unroll
      for (int ks = 0; ks < BK; ks += 16) {
        unsigned af[4][4], bf[WN][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int mb = wm * 64 + i * 16;
#if A_KMAJOR
          ldmatrix_x4(af[i], as + (mb + (lane & 15)) * A_LD + ks + (lane >> 4) * 8);
#else
          ldmatrix_x4_trans(af[i], as + (ks + (lane & 7) + (lane >> 4) * 8) * A_LD + mb + ((lane >> 3) & 1) * 8);
#endif
        }
#pragma unroll
        for (int j = 0; j < WN; j += 2) {
          const int nb = wn * WN * 8 + j * 8;
          unsigned r[4];
#if B_KMAJOR
          ldmatrix_x4(r, bs + (nb + (lane & 7) + (lane >> 4) * 8) * B_LD + ks + ((lane >> 3) & 1) * 8);
#else
          ldmatrix_x4_trans(r, bs + (ks + (lane & 7) + ((lane >> 3) & 1) * 8) * B_LD + nb + (lane >> 4) * 8);
#endif
          bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < WN; ++j) {
            float* d = acc[i][j];
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPE "." MMA_TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                "{%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
          }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the next batch item refills the ring
    EPI_BASES(z);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < WN; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          store_result_pair(out, p, z, m0 + wm * 64 + i * 16 + g + h * 8, n0 + wn * WN * 8 + j * 8 + 2 * t,
                            acc[i][j][2 * h], acc[i][j][2 * h + 1] EPI_ARG);
  }
}
