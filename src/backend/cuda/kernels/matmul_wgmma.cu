// Matrix products of bf16 or f16 operands on Hopper's warpgroup tensor-core instructions
// (wgmma, sm_90a), f32 accumulation, for operands the host found 16-byte-vector readable.
// The host prepends matmul_shared.cuh and wgmma_tile(), the one wgmma instruction of this
// block shape and operand layout (its 64 x BN accumulator list is generated text).
// Defines: TA, TO, A_KMAJOR, B_KMAJOR (as matmul_tc.cu), BN (128 or 256), STAGES (>= 3),
// WAIT_DEPTH (wgmma groups left in flight at the end of a K step: 0 or 1), MIN_BLOCKS
// (blocks per SM the registers must allow), EPILOGUE, TMA (1: the kernel at the end of
// this file, matmul_wgmma_tma, instead of matmul_wgmma).
//
// A block is two warpgroups (256 threads) computing 128 x BN outputs, each warpgroup a
// 64 x BN slab; K goes in steps of 64 through a STAGES-deep ring of shared memory filled by
// cp.async (16-byte copies, zero-filled past the edges). The tensor cores read both
// operands straight from shared memory through matrix descriptors, so tiles are stored in
// the layout the descriptors name: rows of 128 bytes (64 elements), the 16-byte chunks of
// row r at chunk index c ^ (r % 8) (the "128-byte swizzle": the 8 rows of a 1024-byte atom
// spread every chunk column over all banks). A K-contiguous operand is stored as rows of
// its M (N) index, 64 of K per row; an M- (N-) contiguous one as rows of K, in column
// blocks of 64 of M (N), each block 64 rows x 128 bytes, and the instruction transposes it.
//
// Ring discipline (one barrier per K step): at step kt, after the barrier, every warpgroup
// has retired the wgmma group of step kt - 1 - WAIT_DEPTH (wgmma.wait_group WAIT_DEPTH at
// the end of step kt - 1), so that group's slot is refilled with step kt + LOOKAHEAD
// (LOOKAHEAD = STAGES - 1 - WAIT_DEPTH). WAIT_DEPTH 1 keeps the tensor cores busy across
// the barrier (one block per SM, 128 x 256 tiles); WAIT_DEPTH 0 lets loads run further
// ahead in a shallower ring, and two blocks per SM cover each other's barriers and
// epilogues (128 x 128 tiles).
//
// The results go through shared memory (store_tile in matmul_shared.cuh): the epilogue's
// loads and the stores to `out` are then contiguous along rows.

#define BM 128
#define BK 64
#define A_STAGE_BYTES (BM * BK * 2)
#define B_STAGE_BYTES (BN * BK * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define LOOKAHEAD (STAGES - 1 - WAIT_DEPTH)

// Byte offset of 16-byte chunk c of row r in a tile of 128-byte rows, 128-byte swizzle.
__device__ __forceinline__ unsigned swizzled(int r, int c) { return (unsigned)(r * 128 + ((c ^ (r & 7)) << 4)); }

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (in 16-
// byte units), 128-byte swizzle.
__device__ __forceinline__ u64 smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}

// One stage: the A tile (128 of M x 64 of K: 1024 vectors, four per thread) and the B tile
// (BN x 64: BN / 32 vectors per thread).
__device__ __forceinline__ void load_stage(unsigned as, unsigned bs, const TA* __restrict__ a, const TA* __restrict__ b,
                                           const MatmulParams& p, i64 abase, i64 bbase, i64 m0, i64 n0, i64 k0) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int v = tid + 256 * i;
#if A_KMAJOR
    const int r = v >> 3, c = v & 7;
    const i64 gm = m0 + r, gk = k0 + c * 8;
    const bool ok = gm < p.M && gk < p.K;
    cp_async16(as + swizzled(r, c), ok ? a + abase + gm * p.a_rs + gk : a, ok);
#else
    const int r = v >> 4, cv = v & 15;  // r: row of K; cv: vector along M (block cv / 8)
    const i64 gk = k0 + r, gm = m0 + cv * 8;
    const bool ok = gm < p.M && gk < p.K;
    cp_async16(as + (cv >> 3) * (BK * 128) + swizzled(r, cv & 7), ok ? a + abase + gk * p.a_cs + gm : a, ok);
#endif
  }
#pragma unroll
  for (int i = 0; i < BN / 32; ++i) {
    const int v = tid + 256 * i;
#if B_KMAJOR
    const int r = v >> 3, c = v & 7;
    const i64 gn = n0 + r, gk = k0 + c * 8;
    const bool ok = gn < p.N && gk < p.K;
    cp_async16(bs + swizzled(r, c), ok ? b + bbase + gn * p.b_cs + gk : b, ok);
#else
    const int r = v / (BN / 8), cv = v % (BN / 8);
    const i64 gk = k0 + r, gn = n0 + cv * 8;
    const bool ok = gn < p.N && gk < p.K;
    cp_async16(bs + (cv >> 3) * (BK * 128) + swizzled(r, cv & 7), ok ? b + bbase + gk * p.b_rs + gn : b, ok);
#endif
  }
}

// The descriptors of K step s (16 of K) of one stage. K-contiguous: 8-row groups 1024
// bytes apart (SBO), a K step is 32 bytes along the row. Transposed: 8-row (of K) groups
// 1024 bytes apart (SBO), 64-wide column blocks BK * 128 bytes apart (LBO), a K step is 16
// rows.
__device__ __forceinline__ u64 a_desc(unsigned as, int wg, int s) {
#if A_KMAJOR
  return smem_desc(as + wg * 64 * 128 + s * 32, 16, 1024);
#else
  return smem_desc(as + wg * BK * 128 + s * 16 * 128, BK * 128, 1024);
#endif
}
__device__ __forceinline__ u64 b_desc(unsigned bs, int s) {
#if B_KMAJOR
  return smem_desc(bs + s * 32, 16, 1024);
#else
  return smem_desc(bs + s * 16 * 128, BK * 128, 1024);
#endif
}

#if !TMA
extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) matmul_wgmma(const TA* __restrict__ a, const TA* __restrict__ b,
                                                                  TO* __restrict__ out, const MatmulParams p EPI_PARAM) {
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must sit on 1024-byte boundaries (the host asks for 1 KiB extra).
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  float* tile = (float*)(smem_raw + (base - smem_u32(smem_raw)));  // the results, after the main loop
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int wg = warp / 4, wr = warp % 4;  // warpgroup, and the warp's 16 rows within its slab
  const i64 m0 = (i64)blockIdx.y * BM, n0 = (i64)blockIdx.x * BN;
  const i64 ktiles = (p.K + BK - 1) / BK;
  for (i64 z = blockIdx.z; z < p.batch; z += gridDim.z) {
    const i64 abase = lead_offset(p.a_batch, z), bbase = lead_offset(p.b_batch, z);
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < LOOKAHEAD; ++s) {
      if (s < ktiles)
        load_stage(base + s * STAGE_BYTES, base + s * STAGE_BYTES + A_STAGE_BYTES, a, b, p, abase, bbase, m0, n0,
                   (i64)s * BK);
      cp_async_commit();
    }
    for (i64 kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<LOOKAHEAD - 1>();
      // cp.async wrote through the generic proxy; the tensor cores read through the async one.
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      const i64 next = kt + LOOKAHEAD;
      if (next < ktiles) {
        const unsigned slot = base + (unsigned)(next % STAGES) * STAGE_BYTES;
        load_stage(slot, slot + A_STAGE_BYTES, a, b, p, abase, bbase, m0, n0, next * BK);
      }
      cp_async_commit();
      const unsigned as = base + (unsigned)(kt % STAGES) * STAGE_BYTES, bs = as + A_STAGE_BYTES;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int s = 0; s < BK / 16; ++s) wgmma_tile(acc, a_desc(as, wg, s), b_desc(bs, s));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(WAIT_DEPTH) : "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: it takes the results now
    // Accumulator i: row 16 wr + g (+ 8 when bit 1 of i is set), column 8 (i / 4) + 2 t (+ 1
    // for odd i), within the warpgroup's slab.
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *(float2*)(tile + (wg * 64 + wr * 16 + g + h * 8) * TILE_LD + j * 8 + 2 * t) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    __syncthreads();
    EPI_BASES(z);
    store_tile(tile, out, p, z, m0, n0, threadIdx.x EPI_ARG);
    __syncthreads();  // the next batch item refills the ring
  }
}
#endif

#if TMA
// The same product with Hopper's bulk tensor copies (TMA) and warp specialization, for one
// matrix (or split-K slices: blockIdx.z = slice, each p.K long, a multiple of BK). 384
// threads: warpgroup 0 is the producer (one thread issues the copies, which write the
// 128-byte-swizzled layout above by themselves and zero-fill past the edges), warpgroups 1
// and 2 compute a 64 x BN slab each. Each ring slot has a "full" barrier (the copies'
// bytes landed) and an "empty" one (both consumers' wgmma groups that read it retired), so
// the producer runs up to STAGES steps ahead with no block-wide barrier in the loop.
// `ta`, `tb`: the host's tensor maps (cuTensorMapEncodeTiled) of A and B, boxes of 64 x 128
// (A, K-contiguous), 64 x 64 (A transposed, two per stage), 64 x BN (B, K-contiguous) or
// 64 x 64 (B transposed, BN / 64 per stage), innermost dimension first.
struct __align__(64) TensorMap { unsigned long long bits[16]; };

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra.uni WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, unsigned bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"((u64)&map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

extern "C" __global__ void __launch_bounds__(384, 1)
    matmul_wgmma_tma(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb, TO* __restrict__ out,
                     const MatmulParams p EPI_PARAM) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const unsigned bars = base + STAGES * STAGE_BYTES;  // full[STAGES], then empty[STAGES]
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (STAGES + s), 2);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int m0 = (int)blockIdx.y * BM, n0 = (int)blockIdx.x * BN, z = (int)blockIdx.z;
  const int ktiles = (int)((p.K + BK - 1) / BK), k_begin = z * (int)p.K;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((kt / STAGES) & 1) ^ 1);
        const unsigned full = bars + 8 * s, as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
        mbar_expect_tx(full, STAGE_BYTES);
        const int k = k_begin + kt * BK;
#if A_KMAJOR
        tma_load(as, ta, full, k, m0);
#else
        tma_load(as, ta, full, m0, k);
        tma_load(as + BK * 128, ta, full, m0 + 64, k);
#endif
#if B_KMAJOR
        tma_load(bs, tb, full, k, n0);
#else
#pragma unroll
        for (int q = 0; q < BN / 64; ++q) tma_load(bs + q * BK * 128, tb, full, n0 + q * 64, k);
#endif
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1, ct = threadIdx.x - 128;  // consumer warpgroup, thread index among consumers
    const int warp = ct / 32, lane = ct % 32, g = lane >> 2, t = lane & 3, wr = warp % 4;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % STAGES;
      mbar_wait(bars + 8 * s, (kt / STAGES) & 1);
      const unsigned as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) wgmma_tile(acc, a_desc(as, cw, ks), b_desc(bs, ks));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      // Step kt - 1's group has retired: its slot may be refilled.
      if (kt > 0 && ct % 128 == 0) mbar_arrive(bars + 8 * (STAGES + (kt - 1) % STAGES));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // Every copy the producer issued has been waited for: the ring takes the results now.
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    float* tile = (float*)(smem_raw + (base - smem_u32(smem_raw)));
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *(float2*)(tile + (cw * 64 + wr * 16 + g + h * 8) * TILE_LD + j * 8 + 2 * t) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    EPI_BASES(z);
    store_tile(tile, out, p, z, m0, n0, ct EPI_ARG);
  }
}
#endif
