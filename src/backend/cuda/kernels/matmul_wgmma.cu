// Matrix products of bf16 or f16 operands on Hopper's warpgroup tensor-core instructions
// (wgmma, sm_90a), f32 accumulation, for operands the host found 16-byte-vector readable.
// The host prepends matmul_shared.cuh and wgmma_tile(), the one wgmma instruction of this
// block shape and operand layout (its 64 x BN accumulator list is generated text).
// Defines: TA, TO, A_KMAJOR, B_KMAJOR (as matmul_tc.cu), BN (128 or 256), STAGES (>= 3),
// WAIT_DEPTH (wgmma groups left in flight at the end of a K step: 0 or 1), MIN_BLOCKS
// (blocks per SM the registers must allow), EPILOGUE, TMA (1: the bulk-copy kernels
// further down instead of matmul_wgmma), with TMA: PERSIST and PINGPONG (the persistent
// kernel and its schedule; EPI_TILE, EPI_COLS, EPI_REST: how it reads the epilogue's
// inputs), STREAMK (the stream-K kernel and its sum), CONSUMERS (2, or 3 for blocks of 192
// rows: matmul_wgmma_tma only).
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

#ifndef CONSUMERS
#define CONSUMERS 2
#endif
#if CONSUMERS != 2 && (!TMA || PERSIST || STREAMK || MIN_BLOCKS > 1)
#error "blocks of three consumer warpgroups are matmul_wgmma_tma's, one per SM"
#endif
#define BM (64 * CONSUMERS)
#define BK 64
#define A_STAGE_BYTES (BM * BK * 2)
#define B_STAGE_BYTES (BN * BK * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define LOOKAHEAD (STAGES - 1 - WAIT_DEPTH)

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
    store_tile<BM, 256>(tile, out, p, z, m0, n0, threadIdx.x EPI_ARG);
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
// 64 x 64 (B transposed, BN / 64 per stage), innermost dimension first (TensorMap, the
// mbarrier and tma_load helpers: common.cuh).
// Output tile `pid` (in launch order) to its (M, N) tile: groups of 8 M tiles are swept
// along N together, so the tiles in flight at once (one per SM) read a few rows of A and a
// band of B that both stay in L2. Row by row instead, an [M, 50304] product (the LM head)
// streams all of B from memory again for every row of tiles.
__device__ __forceinline__ void tile_coords(int pid, int tiles_m, int tiles_n, int& mt, int& nt) {
  constexpr int kGroup = 8;
  const int per_group = kGroup * tiles_n, first = pid / per_group * kGroup;
  const int rows = min(tiles_m - first, kGroup), in_group = pid % per_group;
  mt = first + in_group % rows;
  nt = in_group / rows;
}

// The ring's barriers, set up by thread 0 before anything else: full[s] (one arrival, the
// producer's, with the copies' bytes) and empty[s] (`readers` consumer warpgroups retired
// the slot), then `extra` more of one arrival each after them.
__device__ __forceinline__ void init_barriers(unsigned bars, unsigned readers, int extra = 0) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (STAGES + s), readers);
    }
    for (int i = 0; i < extra; ++i) mbar_init(bars + 8 * (2 * STAGES + i), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

// The copies that fill one ring slot (A at `as`, B at `bs`) with K step k of the tile at
// (m0, n0), all completing on the slot's `full` barrier: A's 64 x 128 box (two 64 x 64 when
// M-contiguous), B's 64 x BN box (BN / 64 boxes of 64 x 64 when N-contiguous).
__device__ __forceinline__ void tma_load_stage(unsigned as, unsigned bs, const TensorMap& ta, const TensorMap& tb,
                                               unsigned full, int k, int m0, int n0) {
#if A_KMAJOR
  tma_load(as, ta, full, k, m0);
#else
#pragma unroll
  for (int q = 0; q < BM / 64; ++q) tma_load(as + q * BK * 128, ta, full, m0 + q * 64, k);
#endif
#if B_KMAJOR
  tma_load(bs, tb, full, k, n0);
#else
#pragma unroll
  for (int q = 0; q < BN / 64; ++q) tma_load(bs + q * BK * 128, tb, full, n0 + q * 64, k);
#endif
}

// One K step of a consumer warpgroup of the bulk-copy kernels: wait for ring slot s's copies
// (phase `parity`), issue its BK / 16 products into acc (the warpgroup's 64-row slab `slab` of
// the A tile), and once the step before has retired (one group left in flight) release that
// step's slot `prev` to the producer (release_prev: there is one; thread `ct % 128 == 0` of
// each warpgroup arrives).
__device__ __forceinline__ void consume_step(float (&acc)[BN / 2], unsigned base, unsigned bars, int s, unsigned parity,
                                             int slab, bool release_prev, int prev, int ct) {
  mbar_wait(bars + 8 * s, parity);
  const unsigned as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int ks = 0; ks < BK / 16; ++ks) wgmma_tile(acc, a_desc(as, slab, ks), b_desc(bs, ks));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  if (release_prev && ct % 128 == 0) mbar_arrive(bars + 8 * (STAGES + prev));
}

// Two blocks per SM (128 x 128 tiles, so one block's epilogue and pipeline fill overlap the
// other's main loop) must share the SM's 64 K registers, and ptxas compiles the whole kernel
// under the launch bound (a 64 x 128 wgmma needs ~90 a thread): there the producer is one
// warp after the two consumer warpgroups (288 threads, 112 registers each) instead of a
// warpgroup that hands its registers to the consumers (setmaxnreg).
// Three consumer warpgroups (BM = 192) hold 96 accumulators a thread and share what the
// producer warpgroup gives up: 152 registers each.
#if MIN_BLOCKS > 1
#define TMA_THREADS 288
#define TMA_CONSUMER0 0
#else
#define TMA_THREADS (128 * (CONSUMERS + 1))
#define TMA_CONSUMER0 128
#endif
#define CONSUMER_THREADS (128 * CONSUMERS)
#if CONSUMERS == 3
#define CONSUMER_REGS "152"
#else
#define CONSUMER_REGS "232"
#endif

#if !PERSIST
extern "C" __global__ void __launch_bounds__(TMA_THREADS, MIN_BLOCKS)
    matmul_wgmma_tma(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb, TO* __restrict__ out,
                     const MatmulParams p EPI_PARAM) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const unsigned bars = base + STAGES * STAGE_BYTES;  // full[STAGES], then empty[STAGES]
  const int ct = (int)threadIdx.x - TMA_CONSUMER0;  // thread index among the consumers
  const bool producer = ct < 0 || ct >= CONSUMER_THREADS;
  init_barriers(bars, CONSUMERS);
  int mt, nt;
  tile_coords((int)(blockIdx.y * gridDim.x + blockIdx.x), (int)gridDim.y, (int)gridDim.x, mt, nt);
  const int m0 = mt * BM, n0 = nt * BN, z = (int)blockIdx.z;
  const int ktiles = (int)((p.K + BK - 1) / BK), k_begin = z * (int)p.K;
  if (producer) {
#if MIN_BLOCKS == 1
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
#endif
    if (threadIdx.x == (TMA_CONSUMER0 ? 0 : CONSUMER_THREADS)) {
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((kt / STAGES) & 1) ^ 1);
        const unsigned full = bars + 8 * s, as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
        mbar_expect_tx(full, STAGE_BYTES);
        const int k = k_begin + kt * BK;
        tma_load_stage(as, bs, ta, tb, full, k, m0, n0);
      }
    }
  } else {
#if MIN_BLOCKS == 1
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " CONSUMER_REGS ";\n");
#endif
    const int cw = ct / 128;  // consumer warpgroup
    const int warp = ct / 32, lane = ct % 32, g = lane >> 2, t = lane & 3, wr = warp % 4;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < ktiles; ++kt)
      consume_step(acc, base, bars, kt % STAGES, (kt / STAGES) & 1, cw, kt > 0, (kt - 1) % STAGES, ct);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    // Every copy the producer issued has been waited for: the ring takes the results now.
    asm volatile("bar.sync 1, %0;\n" ::"n"(CONSUMER_THREADS) : "memory");
    float* tile = (float*)(smem_raw + (base - smem_u32(smem_raw)));
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *(float2*)(tile + (cw * 64 + wr * 16 + g + h * 8) * TILE_LD + j * 8 + 2 * t) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    asm volatile("bar.sync 1, %0;\n" ::"n"(CONSUMER_THREADS) : "memory");
    EPI_BASES(z);
    store_tile<BM, CONSUMER_THREADS>(tile, out, p, z, m0, n0, ct EPI_ARG);
  }
}
#endif  // !PERSIST

#if STREAMK
// Stream-K, for products of few output tiles and a long K (the weight gradients): the
// tiles' K steps, tile after tile (row-major tile order), are cut into gridDim.x equal
// ranges, one per block, so every SM gets the same work whatever the tile count (equal
// K slices per tile leave the last wave part empty: 72 tiles x 3 slices on 132 SMs is 1.6
// waves). A range crosses at most one tile boundary (the host ensures a range is no
// longer than a tile's K), so a block computes at most two pieces; each piece's f32
// accumulators go to the workspace `ws` (slot 2 x block + piece, a 128 x BN tile), and
// matmul_stream_k_sum adds each tile's pieces in block order.
__device__ __forceinline__ i64 stream_k_begin(i64 block, i64 steps, i64 blocks) { return block * steps / blocks; }
extern "C" __global__ void __launch_bounds__(384, 1)
    matmul_wgmma_tma_stream_k(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb,
                              float* __restrict__ ws, const MatmulParams p) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const unsigned bars = base + STAGES * STAGE_BYTES;  // full[STAGES], then empty[STAGES]
  init_barriers(bars, 2);
  const int tiles_n = (int)((p.N + BN - 1) / BN), ktiles = (int)((p.K + BK - 1) / BK);
  const i64 steps = (i64)((p.M + BM - 1) / BM) * tiles_n * ktiles;
  const i64 begin = stream_k_begin(blockIdx.x, steps, gridDim.x), end = stream_k_begin(blockIdx.x + 1, steps, gridDim.x);
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      for (i64 it = begin; it < end; ++it) {
        const int i = (int)(it - begin), s = i % STAGES;
        if (i >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((i / STAGES) & 1) ^ 1);
        const int tile = (int)(it / ktiles), kt = (int)(it % ktiles);
        const unsigned full = bars + 8 * s, as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
        mbar_expect_tx(full, STAGE_BYTES);
        tma_load_stage(as, bs, ta, tb, full, kt * BK, tile / tiles_n * BM, tile % tiles_n * BN);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int ct = threadIdx.x - 128, cw = ct / 128;
  const int warp = ct / 32, lane = ct % 32, g = lane >> 2, t = lane & 3, wr = warp % 4;
  i64 it = begin;
  for (int piece = 0; it < end; ++piece) {
    const i64 piece_end = min(end, (it / ktiles + 1) * ktiles);
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    for (const i64 first = it; it < piece_end; ++it) {
      const int i = (int)(it - begin);
      // The step before is released once retired, if it was this piece's (the last of the
      // piece before was released after its final wait).
      consume_step(acc, base, bars, i % STAGES, (i / STAGES) & 1, cw, it > first, (i - 1) % STAGES, ct);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (ct % 128 == 0) mbar_arrive(bars + 8 * (STAGES + (int)(it - 1 - begin) % STAGES));
    // Accumulator 4 j + 2 q (+1): row 16 wr + g + 8 q of the warpgroup's slab, columns 8 j + 2 t (+1).
    float* slot = ws + ((i64)blockIdx.x * 2 + piece) * (BM * BN);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        *(float2*)(slot + (cw * 64 + wr * 16 + g + 8 * q) * BN + 8 * j + 2 * t) =
            make_float2(acc[4 * j + 2 * q], acc[4 * j + 2 * q + 1]);
  }
}

// out = the sum of each tile's pieces (matmul_wgmma_tma_stream_k), in block order, through
// the product's epilogue if it has one (a weight gradient's cast to f32). Four consecutive
// columns a thread (N is a multiple of 8: the bulk copies' rows).
extern "C" __global__ void matmul_stream_k_sum(const float* __restrict__ ws, TO* __restrict__ out, const MatmulParams p,
                                               int blocks EPI_PARAM) {
  EPI_BASES(0);
  const int tiles_n = (int)((p.N + BN - 1) / BN), ktiles = (int)((p.K + BK - 1) / BK);
  const i64 steps = (i64)((p.M + BM - 1) / BM) * tiles_n * ktiles;
  ALK_FOR(v, p.M * p.N / 4) {
    const i64 m = v * 4 / p.N, n = v * 4 % p.N;
    const i64 tile = m / BM * tiles_n + n / BN, first_step = tile * ktiles;
    // The blocks whose ranges meet the tile: block b begins at stream_k_begin(b).
    const i64 b0 = ((first_step + 1) * blocks - 1) / steps, b1 = ((first_step + ktiles) * blocks - 1) / steps;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (i64 b = b0; b <= b1; ++b) {
      const int piece = stream_k_begin(b, steps, blocks) >= first_step ? 0 : 1;
      const float4 x = *(const float4*)(ws + (b * 2 + piece) * (BM * BN) + (m % BM) * BN + n % BN);
      acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
    }
#if EPILOGUE
    acc.x = epilogue_at(acc.x, eb, m, n, e), acc.y = epilogue_at(acc.y, eb, m, n + 1, e);
    acc.z = epilogue_at(acc.z, eb, m, n + 2, e), acc.w = epilogue_at(acc.w, eb, m, n + 3, e);
#endif
    TO* o = out + p.out_offset + m * p.N + n;
    o[0] = cvt<TO>(acc.x), o[1] = cvt<TO>(acc.y), o[2] = cvt<TO>(acc.z), o[3] = cvt<TO>(acc.w);
  }
}
#endif  // STREAMK

#if PERSIST
// The persistent form, for a whole matrix with a 16-bit result: gridDim.x blocks (one per
// SM) take the 128 x BN output tiles in turn. The producer's ring runs on across tiles, so
// while the consumers apply the epilogue of one tile the next tile's first steps are
// already landing.
//
// PINGPONG: each consumer warpgroup owns whole tiles (the block's even tiles go to the
// first, its odd ones to the second; both 64-row halves, 2 x BN / 2 accumulators a thread),
// so while one applies the epilogue of its tile, the other's products keep the tensor cores
// busy (CUTLASS's "ping-pong" schedule). Without it both warpgroups share each tile (a 64-row
// slab each). Each ring slot is then released by the one warpgroup that read it, and the two
// warpgroups' main loops take turns (named barriers 4 + w: "warpgroup w has issued its
// tile's last products"): besides keeping one warpgroup's epilogue under the other's
// products, the turns keep the ring's waits unambiguous, since a parity wait on a slot tells
// its phase apart only from the one before (a warpgroup may not wait for a step whose slot
// is two fills behind).
//
// The epilogue is arithmetic on shared memory; its memory traffic is bulk copies issued by
// the producer warpgroup's other warps:
// - each tile's results go to a staging tile (one per warpgroup in ping-pong), in the ring's
//   128-byte-swizzled layout, BN / 64 boxes of 128 rows x 64 columns, and a storer warp
//   (warp 1 + w of the producer warpgroup) writes it out with bulk tensor copies (`tout`),
//   then frees it (barrier stage_free[w]);
// - EPI_TILE >= 0: that epilogue input, a 16-bit tensor of the output's shape, is copied
//   into the staging tile by the producer while the tile's main loop runs (`tin`, barrier
//   stage_full[w]), and each result is written over its input element;
// - EPI_COLS: the inputs constant along rows (a bias) are loaded into registers before the
//   tile's main loop;
// - EPI_REST: the other inputs are loaded from memory in the epilogue, as elsewhere.
#ifndef PINGPONG
#define PINGPONG 0
#endif
#ifndef EPI_TILE
#define EPI_TILE -1
#endif
#ifndef EPI_COLS
#define EPI_COLS 0
#endif
#ifndef EPI_REST
#define EPI_REST 0
#endif
#ifndef EPI_EXTRA
#define EPI_EXTRA 0
#endif
// EPI_EXTRA (ping-pong only): an extra output (epilogue_extra_apply) of the result's shape goes
// out through the same staging tile, first: the warpgroup writes the extra values there (over
// the staged input, element by element) and keeps its results packed in registers; the storer
// copies the tile out through its own tensor map `tx` and frees it (stage_free: two phases a
// tile); then the results follow as without. (A second staging tile a warpgroup cost a ring
// stage: with 3, the fc product ran 2.6x slower, its loads no longer ahead of the products.)
#if EPI_EXTRA
#define EXTRA_MAP_PARAM const __grid_constant__ TensorMap tx,
#define FREES_PER_TILE 2
#else
#define EXTRA_MAP_PARAM
#define FREES_PER_TILE 1
#endif
// The parity of stage_free's phase that frees a warpgroup's tile t (its last store's reads).
#define TILE_FREED(t) ((FREES_PER_TILE * (t) + FREES_PER_TILE - 1) & 1)
#if PINGPONG
#define SLABS 2         // 64-row halves a warpgroup computes per tile
#define TILE_TEAM 128   // consumer threads writing a staging tile
#define SLOT_READERS 1  // warpgroups releasing each ring slot
#define STAGINGS 2
#else
#define SLABS 1
#define TILE_TEAM 256
#define SLOT_READERS 2
#define STAGINGS 1
#endif
#define STAGING_BYTES (BM * BN * 2)
#if EPI_EXTRA && !PINGPONG
#error "EPI_EXTRA needs the ping-pong schedule"
#endif

// Byte offset of element (r, c) (16-bit) in a staging tile: box c / 64, its 16-byte chunk
// (c % 64) / 8 of row r at the swizzled position.
__device__ __forceinline__ unsigned staged(int r, int c) {
  return (unsigned)((c >> 6) * (BM * 128)) + swizzled(r, (c >> 3) & 7) + (unsigned)((c & 7) * 2);
}
__device__ __forceinline__ void tma_store(const TensorMap& map, unsigned src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"((u64)&map), "r"(x),
               "r"(y), "r"(src)
               : "memory");
}
__device__ __forceinline__ float2 to_float2(unsigned v, __nv_bfloat16*) {
  return __bfloat1622float2(*(const __nv_bfloat162*)&v);
}
__device__ __forceinline__ float2 to_float2(unsigned v, __half*) { return __half22float2(*(const __half2*)&v); }
__device__ __forceinline__ unsigned packed_pair(float x0, float x1, __nv_bfloat16*) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x0, x1);
  return *(const unsigned*)&v;
}
__device__ __forceinline__ unsigned packed_pair(float x0, float x1, __half*) {
  const __half2 v = __floats2half2_rn(x0, x1);
  return *(const unsigned*)&v;
}

// The storer's round: waits until warpgroup w's threads filled its staging tile (named barrier
// 6 + w), copies the tile out through `map` at column x0, row y0, and frees it (stage_free)
// once the copies have read it.
__device__ __forceinline__ void copy_out_staged(const TensorMap& map, unsigned tile, int x0, int y0, unsigned stage_free,
                                                int w, int lane) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(6 + w), "n"(TILE_TEAM + 32) : "memory");
  if (lane == 0) {
#pragma unroll
    for (int q = 0; q < BN / 64; ++q) tma_store(map, tile + q * BM * 128, x0 + q * 64, y0);
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    mbar_arrive(stage_free);
  }
  __syncwarp();
}

extern "C" __global__ void __launch_bounds__(384, 1)
    matmul_wgmma_tma_persistent(const __grid_constant__ TensorMap ta, const __grid_constant__ TensorMap tb,
                                const __grid_constant__ TensorMap tout, const __grid_constant__ TensorMap tin,
                                EXTRA_MAP_PARAM const MatmulParams p EPI_PARAM) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  // full[STAGES], empty[STAGES], stage_full[2], stage_free[2]; the staging tiles after 1 KiB.
  const unsigned bars = base + STAGES * STAGE_BYTES, staging = bars + 1024;
  const unsigned stage_full = bars + 16 * STAGES, stage_free = stage_full + 16;
  unsigned char* const staging_ptr = smem_raw + (staging - smem_u32(smem_raw));
  init_barriers(bars, SLOT_READERS, 4);  // and stage_full[2], stage_free[2]
  const int tiles_n = (int)((p.N + BN - 1) / BN), tiles_m = (int)((p.M + BM - 1) / BM), tiles = tiles_m * tiles_n;
  const int ktiles = (int)((p.K + BK - 1) / BK);
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    const int warp = threadIdx.x / 32;
    if (threadIdx.x == 0) {
      int it = 0;  // K steps issued over every tile so far: slot it % STAGES, phase it / STAGES
      int local = 0;  // the block's tiles so far
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++local) {
        int mt, nt;
        tile_coords(tile, tiles_m, tiles_n, mt, nt);
        const int m0 = mt * BM, n0 = nt * BN;
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((it / STAGES) & 1) ^ 1);
          const unsigned full = bars + 8 * s, as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
          mbar_expect_tx(full, STAGE_BYTES);
          tma_load_stage(as, bs, ta, tb, full, kt * BK, m0, n0);
#if EPI_TILE >= 0
          // The epilogue input, once the warpgroup's previous tile has left its staging tile: by
          // step STAGES of this tile the warpgroup has begun it (it released step 0's slot), so
          // its previous epilogue is done and the wait is at most for the store's reads.
          if (kt == min(ktiles - 1, STAGES)) {
            const int w = PINGPONG ? local & 1 : 0, wg_tile = PINGPONG ? local >> 1 : local;
            if (wg_tile > 0) mbar_wait(stage_free + 8 * w, TILE_FREED(wg_tile - 1));
            mbar_expect_tx(stage_full + 8 * w, STAGING_BYTES);
#pragma unroll
            for (int q = 0; q < BN / 64; ++q)
              tma_load(staging + w * STAGING_BYTES + q * BM * 128, tin, stage_full + 8 * w, n0 + q * 64, m0);
          }
#endif
        }
      }
    } else if (warp >= 1 && warp <= STAGINGS) {
      // Storer of staging tile w: waits until its warpgroup(s) wrote a tile, copies it out.
      const int w = warp - 1, lane = threadIdx.x % 32;
      for (int tile = blockIdx.x + (PINGPONG ? w : 0) * gridDim.x; tile < tiles; tile += (PINGPONG ? 2 : 1) * gridDim.x) {
        int mt, nt;
        tile_coords(tile, tiles_m, tiles_n, mt, nt);
#if EPI_EXTRA
        // The extra output first (the warpgroup then writes its results into the freed tile).
        copy_out_staged(tx, staging + w * STAGING_BYTES, nt * BN, mt * BM, stage_free + 8 * w, w, lane);
#endif
        copy_out_staged(tout, staging + w * STAGING_BYTES, nt * BN, mt * BM, stage_free + 8 * w, w, lane);
      }
      if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int ct = threadIdx.x - 128, cw = ct / 128;  // thread among the consumers, its warpgroup
  const int warp = ct / 32, lane = ct % 32, g = lane >> 2, t = lane & 3, wr = warp % 4;
#if PINGPONG
  // The block's tiles j = cw, cw + 2, ...: K steps of the other warpgroup's tiles are skipped.
  const int first = cw, step = 2, w = cw;
#else
  const int first = 0, step = 1, w = 0;
#endif
  TO* const my_staging = (TO*)(staging_ptr + w * STAGING_BYTES);
  EPI_BASES(0);
  int it = first * ktiles, wg_tile = 0;  // wg_tile: this warpgroup's tiles so far
  for (int tile = blockIdx.x + first * gridDim.x; tile < tiles;
       tile += step * gridDim.x, it += (step - 1) * ktiles, ++wg_tile) {
    int mt, nt;
    tile_coords(tile, tiles_m, tiles_n, mt, nt);
    const int m0 = mt * BM, n0 = nt * BN;
#if EPILOGUE && EPI_COLS
    // Row-constant inputs of the thread's columns 8 j + 2 t (+1), loaded under the main loop.
    EpiIn cols[BN / 8][2] = {};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const i64 gn = n0 + 8 * j + 2 * t;
      epilogue_load_row<2, EPI_COLS>(eb, 0, gn, gn < p.N ? (int)min((i64)2, p.N - gn) : 0, e, cols[j]);
    }
#endif
    float acc[SLABS][BN / 2];
#pragma unroll
    for (int h = 0; h < SLABS; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.0f;
#if PINGPONG
    // The other warpgroup's turn at the block's previous tile must be over (none before tile 0).
    if (tile != (int)blockIdx.x) asm volatile("bar.sync %0, 256;\n" ::"r"(4 + (cw ^ 1)) : "memory");
#endif
    for (int kt = 0; kt < ktiles; ++kt, ++it) {
      const int s = it % STAGES;
      mbar_wait(bars + 8 * s, (it / STAGES) & 1);
      const unsigned as = base + s * STAGE_BYTES, bs = as + A_STAGE_BYTES;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks)
#pragma unroll
        for (int h = 0; h < SLABS; ++h) wgmma_tile(acc[h], a_desc(as, PINGPONG ? h : cw, ks), b_desc(bs, ks));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      // The previous step's group has retired: its slot may be refilled.
      if (kt > 0 && ct % 128 == 0) mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
    }
#if PINGPONG
    // Every product of this tile is issued: the other warpgroup's turn (if the block has a next tile).
    if (tile + (int)gridDim.x < tiles) asm volatile("bar.arrive %0, 256;\n" ::"r"(4 + cw) : "memory");
#endif
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (ct % 128 == 0) mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
#if EPI_TILE >= 0
    mbar_wait(stage_full + 8 * w, wg_tile & 1);  // the input landed (after the previous tile's store)
#else
    if (wg_tile > 0) mbar_wait(stage_free + 8 * w, TILE_FREED(wg_tile - 1));  // the previous tile is out
#endif
#if EPI_EXTRA
    unsigned results[SLABS][BN / 4];  // the results as packed 16-bit pairs, while the extra output is out
#endif
#pragma unroll
    for (int h = 0; h < SLABS; ++h) {
      // Accumulator 4 j + 2 q (+1): row 16 wr + g + 8 q, columns 8 j + 2 t (+1) of the slab.
      const int r_base = (PINGPONG ? h : cw) * 64 + wr * 16 + g;
#pragma unroll
      for (int j0 = 0; j0 < BN / 8; j0 += 4) {
#if EPILOGUE
        EpiIn in[4][2][2];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
#if EPI_COLS
              in[j][q][c] = cols[j0 + j][c];
#else
              in[j][q][c] = EpiIn{};
#endif
            }
#if EPI_REST
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const i64 gm = m0 + r_base + 8 * q, gn = n0 + 8 * (j0 + j) + 2 * t;
            if (gm < p.M && gn < p.N) epilogue_load_row<2, EPI_REST>(eb, gm, gn, (int)min((i64)2, p.N - gn), e, in[j][q]);
          }
#endif
#endif
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            TO* at = (TO*)((unsigned char*)my_staging + staged(r_base + 8 * q, 8 * (j0 + j) + 2 * t));
            float x0 = acc[h][4 * (j0 + j) + 2 * q], x1 = acc[h][4 * (j0 + j) + 2 * q + 1];
#if EPILOGUE
#if EPI_TILE >= 0
            const float2 v = to_float2(*(const unsigned*)at, (EPI_TILE_T*)nullptr);
            in[j][q][0].EPI_TILE_FIELD = v.x;
            in[j][q][1].EPI_TILE_FIELD = v.y;
#endif
#if EPI_EXTRA
            // The extra output (the GELU of the product, or of an epilogue input) goes to the
            // staging tile first, at the result's place (pair stores to global memory from here,
            // 16 bytes a row a warp, made the GPT-2 fc product 3.2x slower).
            const float y0 = epilogue_extra_apply(x0, in[j][q][0]), y1 = epilogue_extra_apply(x1, in[j][q][1]);
#endif
            x0 = epilogue_apply(x0, in[j][q][0]);
            x1 = epilogue_apply(x1, in[j][q][1]);
#endif
#if EPI_EXTRA
            store_pair((EPI_EXTRA_T*)at, y0, y1);
            results[h][2 * (j0 + j) + q] = packed_pair(x0, x1, (TO*)nullptr);
#else
            store_pair(at, x0, x1);
#endif
          }
      }
    }
#if EPI_EXTRA
    // The extra output is staged: out with it, then the results into the freed tile.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.arrive %0, %1;\n" ::"r"(6 + w), "n"(TILE_TEAM + 32) : "memory");
    mbar_wait(stage_free + 8 * w, 0);  // phase 2 wg_tile: the extra output's reads are done
#pragma unroll
    for (int h = 0; h < SLABS; ++h) {
      const int r_base = (PINGPONG ? h : cw) * 64 + wr * 16 + g;
#pragma unroll
      for (int jj = 0; jj < BN / 8; ++jj)
#pragma unroll
        for (int q = 0; q < 2; ++q)
          *(unsigned*)((unsigned char*)my_staging + staged(r_base + 8 * q, 8 * jj + 2 * t)) = results[h][2 * jj + q];
    }
#endif
    // The bulk copies read through the async proxy what these threads wrote through the generic one.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("bar.arrive %0, %1;\n" ::"r"(6 + w), "n"(TILE_TEAM + 32) : "memory");
  }
}
#endif  // PERSIST
#endif
