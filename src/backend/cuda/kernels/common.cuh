// Shared by every hand-written CUDA kernel of alk (compiled at run time by NVRTC, with
// the defines a launch needs prepended): the View a kernel reads tensors through, and
// conversions between storage types and the types arithmetic runs in.
//
// A View is a strided window over one buffer, as the runtime's KernelArg describes it:
// element i of the view (row-major over `shape`) lives at element offset
//   offset + sum_d coord_d(i) * strides[d]      (strides in elements, 0 on broadcast dims)
// `contiguous` is set by the host when that is offset + i, so hot loops skip the divisions.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long i64;
typedef unsigned long long u64;

struct View {
  i64 offset;
  int rank;
  int contiguous;
  i64 shape[8];
  i64 strides[8];
};

// Unravelling costs a division per dim; 64-bit divisions are tens of instructions on the
// GPU, so indices and extents that fit 32 bits (nearly all) divide in 32 bits.
__device__ __forceinline__ i64 at(const View& v, i64 i) {
  if (v.contiguous) return v.offset + i;
  if (v.rank == 1) return v.offset + i * v.strides[0];
  i64 off = v.offset;
  for (int d = v.rank - 1; d >= 0; --d) {
    const i64 s = v.shape[d];
    if (((u64)i | (u64)s) <= 0xffffffffull) {
      const unsigned q = (unsigned)i / (unsigned)s;
      off += (i64)((unsigned)i - q * (unsigned)s) * v.strides[d];
      i = q;
    } else {
      off += (i % s) * v.strides[d];
      i /= s;
    }
  }
  return off;
}

// The first element of batch item `r` of a matrix view, given the view of its batch dims
// (the host passes the leading dims' shape and strides; `offset` is the matrix's first).
__device__ __forceinline__ i64 lead_offset(const View& v, i64 r) {
  i64 off = v.offset;
  for (int d = v.rank - 1; d >= 0; --d) {
    const i64 s = v.shape[d];
    off += (r % s) * v.strides[d];
    r /= s;
  }
  return off;
}

// cvt<To>(from): value conversion with round-to-nearest-even into f16/bf16 (the CPU's
// conversions in core/half.h do the same), C casts otherwise.
template <class To, class From>
__device__ __forceinline__ To cvt(From v) { return (To)v; }
template <> __device__ __forceinline__ float cvt<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ double cvt<double, __half>(__half v) { return (double)__half2float(v); }
template <> __device__ __forceinline__ i64 cvt<i64, __half>(__half v) { return (i64)__half2float(v); }
template <> __device__ __forceinline__ float cvt<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ double cvt<double, __nv_bfloat16>(__nv_bfloat16 v) { return (double)__bfloat162float(v); }
template <> __device__ __forceinline__ i64 cvt<i64, __nv_bfloat16>(__nv_bfloat16 v) { return (i64)__bfloat162float(v); }
template <> __device__ __forceinline__ __half cvt<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __half cvt<__half, double>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __half cvt<__half, i64>(i64 v) { return __ll2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16, double>(double v) { return __double2bfloat16(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16, i64>(i64 v) { return __float2bfloat16_rn((float)v); }

// Propagating max/min: a NaN operand wins (torch.max semantics; the CPU does the same).
// (Template parameters are named V: kernels #define T as their storage type.)
// 2^x in one MUFU.EX2 (results below 2^-126 flush to zero: probabilities that small add
// nothing in f32 anyway; exp2f without fast math adds a range fix-up of three instructions).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

template <class V> __device__ __forceinline__ bool is_nan(V v) { return v != v; }
template <class V> __device__ __forceinline__ V max_nan(V a, V b) { return (is_nan(a) || a > b) ? a : b; }
template <class V> __device__ __forceinline__ V min_nan(V a, V b) { return (is_nan(a) || a < b) ? a : b; }

// Out-of-range indices: kernels never touch memory outside their tensors (a bad index is
// clamped for reads, skipped for writes) and report the first bad one here; the host
// reads the flag at its next synchronize and raises the CPU's alk::Error.
//   flag[0] = launch id (0: none), flag[1] = position in the index tensor, flag[2] = value
__device__ __forceinline__ void report_bad_index(u64* flag, u64 launch, i64 position, i64 value) {
  if (atomicCAS(flag, 0ull, launch) == 0ull) {
    flag[1] = (u64)position;
    flag[2] = (u64)value;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Philox4x32-10 (core/philox.h): the four words of the block at `counter` under `key`, as the
// CPU draws them (the random kernels and sample_tokens both use it).
__device__ __forceinline__ void philox(u64 counter, u64 key, unsigned w[4]) {
  unsigned c0 = (unsigned)counter, c1 = (unsigned)(counter >> 32), c2 = 0, c3 = 0;
  unsigned k0 = (unsigned)key, k1 = (unsigned)(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const u64 p0 = (u64)0xD2511F53u * c0, p1 = (u64)0xCD9E8D57u * c2;
    const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ k0, n1 = (unsigned)p1;
    const unsigned n2 = (unsigned)(p0 >> 32) ^ c3 ^ k1, n3 = (unsigned)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}


// +infinity (NVRTC has no math.h, so no INFINITY); converts to every float type.
#define ALK_INF __longlong_as_double(0x7ff0000000000000ll)

// Grid-stride loop over n items.
#define ALK_FOR(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// Tensor-core fragments (sm_75+; only kernels that use them emit them): 16-bit elements as
// raw bits, shared-memory addresses for PTX, ldmatrix of four 8 x 8 matrices.
typedef unsigned short h16;  // 16-bit elements as raw bits

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// A 16-byte copy from global to shared memory that the thread does not wait for (cp.async,
// sm_80+); valid == false reads nothing and writes zeros. Groups of copies are committed and
// waited for with cp_async_commit / cp_async_wait<N> (at most N groups still in flight).
__device__ __forceinline__ void cp_async16(unsigned smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const h16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const h16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// Hopper's warpgroup tensor-core operands (wgmma, sm_90a): tiles of 128-byte rows stored with
// the 128-byte swizzle (the 16-byte chunks of row r at chunk index c ^ (r % 8), so the 8 rows
// of a 1024-byte atom spread every chunk column over all banks), read through descriptors.
// Byte offset of 16-byte chunk c of row r in such a tile:
__device__ __forceinline__ unsigned swizzled(int r, int c) { return (unsigned)(r * 128 + ((c ^ (r & 7)) << 4)); }
// A shared-memory matrix descriptor: start address, leading and stride byte offsets (in 16-
// byte units), 128-byte swizzle.
__device__ __forceinline__ u64 smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(lbo >> 4) << 16) | ((u64)(sbo >> 4) << 32) | (1ull << 62);
}

// Hopper's bulk tensor copies (TMA, sm_90) and the transaction barriers they complete on.
// A tensor map is the host's cuTensorMapEncodeTiled result, passed as a __grid_constant__
// kernel parameter; copies land in shared memory in the map's (128-byte-swizzled) layout.
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

// The same for rank-3 and rank-5 maps: coordinates innermost first.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const TensorMap& map, unsigned bar, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          dst),
      "l"((u64)&map), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(unsigned dst, const TensorMap& map, unsigned bar, int x, int y, int z, int w,
                                            int v) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
      "[%7];\n" ::"r"(dst),
      "l"((u64)&map), "r"(x), "r"(y), "r"(z), "r"(w), "r"(v), "r"(bar)
      : "memory");
}
