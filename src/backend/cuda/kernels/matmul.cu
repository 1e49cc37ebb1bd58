// Matrix products on the CUDA cores, for every dtype (the reference path; tensor-core
// kernels take the shapes and dtypes they can). out[b] = a[b] @ b[b] over a batch.
// Defines: TA, TB, TO (storage types), ACC (float for f16/bf16/f32, double, i64).
//
// Tiles of 64 x 64 outputs per block of 256 threads, 4 x 4 per thread (rows ty + 16 i,
// columns tx + 16 j, so a warp's shared-memory reads fall in distinct banks), K in steps
// of 16 through shared memory. Any strides: a and b are read through (row, column)
// strides and the batch part of their views.

struct MatmulParams {
  View a_batch, b_batch;  // the batch dims of a and b (out's batch shape; broadcast = stride 0)
  i64 a_rs, a_cs, b_rs, b_cs;
  i64 M, N, K, batch, out_offset;
  int batch_rank;
};

extern "C" __global__ void __launch_bounds__(256) matmul_simt(const TA* __restrict__ a, const TB* __restrict__ b,
                                                              TO* __restrict__ out, const MatmulParams p) {
  __shared__ ACC as[16][64 + 1];
  __shared__ ACC bs[16][64 + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const i64 m0 = (i64)blockIdx.y * 64, n0 = (i64)blockIdx.x * 64;
  for (i64 z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const i64 abase = lead_offset(p.a_batch, z), bbase = lead_offset(p.b_batch, z);
    ACC acc[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = 0;
    for (i64 k0 = 0; k0 < p.K; k0 += 16) {
      for (int e = 0; e < 4; ++e) {
        const int idx = tid + 256 * e;
        const int r = idx / 16, kk = idx % 16;  // a tile: 64 rows x 16
        const i64 gm = m0 + r, gk = k0 + kk;
        as[kk][r] = (gm < p.M && gk < p.K) ? cvt<ACC>(a[abase + gm * p.a_rs + gk * p.a_cs]) : (ACC)0;
        const int kb = idx / 64, c = idx % 64;  // b tile: 16 x 64 columns
        const i64 gkb = k0 + kb, gn = n0 + c;
        bs[kb][c] = (gkb < p.K && gn < p.N) ? cvt<ACC>(b[bbase + gkb * p.b_rs + gn * p.b_cs]) : (ACC)0;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < 16; ++kk) {
        ACC av[4], bv[4];
        for (int i = 0; i < 4; ++i) av[i] = as[kk][ty + 16 * i];
        for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx + 16 * j];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
      }
      __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const i64 gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
        if (gm < p.M && gn < p.N) out[p.out_offset + (z * p.M + gm) * p.N + gn] = cvt<TO>(acc[i][j]);
      }
  }
}
