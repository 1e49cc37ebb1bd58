// Index, shape and random kernels: one thread per output element in grid-stride loops.
// Defines: E (a raw element type of the tensor's size: moves bits, no arithmetic), T and
// ACC where values are combined (scatter_add, fold), IDX (the index tensor's storage),
// HAS_ATOMIC_ADD (scatter_add exists), INTEGER_OUT (random integers stored as integers).
// Outputs are contiguous (offset `out_offset`); inputs are Views (common.cuh).

struct IndexParams {
  View x, index, src;
  i64 n;            // elements to produce
  int dim, rank;    // the indexed dim; the rank of the coordinate space walked
  i64 shape[8];     // that space's shape (the output's, or src's for scatter_add)
  i64 out_strides[8];  // contiguous strides of the output (scatter_add writes by coordinates)
  i64 size;         // valid indices are [0, size)
  i64 out_offset;
  u64 launch, one_bits;  // the index-error launch id; one_hot's "1" as raw bits
};

__device__ __forceinline__ i64 load_index(const IDX* index, const View& v, i64 i) { return (i64)index[at(v, i)]; }

// A bad index is reported and clamped, so a read stays inside x.
__device__ __forceinline__ i64 checked(i64 idx, i64 size, i64 position, u64* flag, u64 launch) {
  if (idx < 0 || idx >= size) {
    report_bad_index(flag, launch, position, idx);
    return idx < 0 ? 0 : size - 1;
  }
  return idx;
}

// torch.gather: out[c] = x[c with c[dim] = index[c]]; the walk is over index's shape.
extern "C" __global__ void gather_kernel(const E* __restrict__ x, const IDX* __restrict__ index, E* __restrict__ out,
                                         u64* flag, const IndexParams p) {
  ALK_FOR(i, p.n) {
    const i64 idx = checked(load_index(index, p.index, i), p.size, i, flag, p.launch);
    i64 rest = i, off = p.x.offset;
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 c = rest % p.shape[d];
      rest /= p.shape[d];
      off += (d == p.dim ? idx : c) * p.x.strides[d];
    }
    out[p.out_offset + i] = x[off];
  }
}

// out = x with dim `dim` replaced by the entries of the 1-D index.
extern "C" __global__ void index_select_kernel(const E* __restrict__ x, const IDX* __restrict__ index,
                                               E* __restrict__ out, u64* flag, const IndexParams p) {
  ALK_FOR(i, p.n) {
    i64 rest = i, off = p.x.offset;
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 c = rest % p.shape[d];
      rest /= p.shape[d];
      off += (d == p.dim ? checked(load_index(index, p.index, c), p.size, c, flag, p.launch) : c) * p.x.strides[d];
    }
    out[p.out_offset + i] = x[off];
  }
}

#if HAS_ATOMIC_ADD  // scatter_add: dtypes with an atomic add (not u8/bool)
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(long long* p, long long v) { atomicAdd((u64*)p, (u64)v); }

// out (already a copy of x) += src at the indexed positions; the walk is over src's shape.
// Atomic adds: the order of additions into one element is not fixed.
extern "C" __global__ void scatter_add_kernel(const T* __restrict__ src, const IDX* __restrict__ index, T* out,
                                              u64* flag, const IndexParams p) {
  ALK_FOR(i, p.n) {
    const i64 raw = load_index(index, p.index, i);
    if (raw < 0 || raw >= p.size) {  // skipped: a write never leaves out
      report_bad_index(flag, p.launch, i, raw);
      continue;
    }
    i64 rest = i, off = p.out_offset;
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 c = rest % p.shape[d];
      rest /= p.shape[d];
      off += (d == p.dim ? raw : c) * p.out_strides[d];
    }
    atomic_add(out + off, src[at(p.src, i)]);
  }
}
#endif  // HAS_ATOMIC_ADD

// out [..., C] = 1 where the class is ids[...], else 0 (raw bits).
extern "C" __global__ void one_hot_kernel(const IDX* __restrict__ ids, E* __restrict__ out, u64* flag,
                                          const IndexParams p) {
  ALK_FOR(i, p.n) {
    const i64 row = i / p.size, cls = i % p.size;
    const i64 id = load_index(ids, p.index, row);
    if (cls == 0 && (id < 0 || id >= p.size)) report_bad_index(flag, p.launch, row, id);
    const u64 bits = id == cls ? p.one_bits : 0;
    out[p.out_offset + i] = *(const E*)&bits;
  }
}

// dst view = src view, element for element (same shape): concat, slice_scatter, copies.
extern "C" __global__ void copy_view_kernel(const E* __restrict__ src, E* __restrict__ dst, const View s, const View d,
                                            i64 n) {
  ALK_FOR(i, n) { dst[at(d, i)] = src[at(s, i)]; }
}

// Keeps x[..., r, c] where c - r <= k (tril) or c - r >= k (triu), zero elsewhere.
extern "C" __global__ void tri_kernel(const E* __restrict__ x, E* __restrict__ out, const View v, i64 n, i64 rows,
                                      i64 cols, i64 k, int upper, i64 out_offset) {
  ALK_FOR(i, n) {
    const i64 c = i % cols, r = (i / cols) % rows;
    const bool keep = upper ? c - r >= k : c - r <= k;
    out[out_offset + i] = keep ? x[at(v, i)] : (E)0;
  }
}

// out = x shifted by `before` per dim, `value` outside (negative `before` crops).
struct PadParams {
  View x;
  i64 n, out_offset;
  int rank;
  i64 out_shape[8], before[8];
  u64 value_bits;
};
extern "C" __global__ void pad_kernel(const E* __restrict__ x, E* __restrict__ out, const PadParams p) {
  ALK_FOR(i, p.n) {
    i64 rest = i, off = p.x.offset;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      const i64 c = rest % p.out_shape[d] - p.before[d];
      rest /= p.out_shape[d];
      inside = inside && c >= 0 && c < p.x.shape[d];
      off += c * p.x.strides[d];
    }
    const u64 bits = p.value_bits;
    out[p.out_offset + i] = inside ? x[off] : *(const E*)&bits;
  }
}

// ---- unfold / fold (im2col and its adjoint) ----
struct ConvParams {
  View x;  // unfold: the image [N, C, H, W]; fold: the columns [N, C*kh*kw, L]
  i64 n, out_offset;
  i64 channels, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
  u64 pad_bits;
};
// out [N, C*kh*kw, L]: column (c, ki, kj) at output position l reads x[n, c, y, x].
extern "C" __global__ void unfold_kernel(const E* __restrict__ x, E* __restrict__ out, const ConvParams p) {
  ALK_FOR(i, p.n) {
    const i64 L = p.oh * p.ow, l = i % L, row = (i / L) % (p.channels * p.kh * p.kw), n = i / (L * p.channels * p.kh * p.kw);
    const i64 c = row / (p.kh * p.kw), ki = (row / p.kw) % p.kh, kj = row % p.kw;
    const i64 y = (l / p.ow) * p.sh - p.ph + ki * p.dh, xx = (l % p.ow) * p.sw - p.pw + kj * p.dw;
    const u64 bits = p.pad_bits;
    E v = *(const E*)&bits;
    if (y >= 0 && y < p.h && xx >= 0 && xx < p.w)
      v = x[p.x.offset + n * p.x.strides[0] + c * p.x.strides[1] + y * p.x.strides[2] + xx * p.x.strides[3]];
    out[p.out_offset + i] = v;
  }
}
// out [N, C, h, w]: each pixel sums the columns that read it (no atomics: deterministic).
extern "C" __global__ void fold_kernel(const T* __restrict__ cols, T* __restrict__ out, const ConvParams p) {
  ALK_FOR(i, p.n) {
    const i64 xx = i % p.w, y = (i / p.w) % p.h, c = (i / (p.w * p.h)) % p.channels, n = i / (p.w * p.h * p.channels);
    ACC s = 0;
    for (i64 ki = 0; ki < p.kh; ++ki) {
      const i64 ty = y + p.ph - ki * p.dh;
      if (ty < 0 || ty % p.sh != 0 || ty / p.sh >= p.oh) continue;
      for (i64 kj = 0; kj < p.kw; ++kj) {
        const i64 tx = xx + p.pw - kj * p.dw;
        if (tx < 0 || tx % p.sw != 0 || tx / p.sw >= p.ow) continue;
        const i64 row = (c * p.kh + ki) * p.kw + kj, l = (ty / p.sh) * p.ow + tx / p.sw;
        s += cvt<ACC>(cols[p.x.offset + n * p.x.strides[0] + row * p.x.strides[1] + l * p.x.strides[2]]);
      }
    }
    out[p.out_offset + i] = cvt<T>(s);
  }
}

// ---- random: Philox4x32-10 (common.cuh), element i from counter offset + i ----
// dist 0 uniform [low, high), 1 normal (mean low, std high), 2 integer [low, high).
extern "C" __global__ void random_kernel(T* __restrict__ out, i64 n, i64 out_offset, int dist, u64 seed, u64 offset,
                                         double low, double high, i64 ilow, i64 ihigh) {
  ALK_FOR(i, n) {
    unsigned w[4];
    philox(offset + (u64)i, seed, w);
    T v;
    if (dist == 0) {
      const float u = (float)(w[0] >> 8) * (1.0f / 16777216.0f);
      v = cvt<T>(low + (high - low) * (double)u);
    } else if (dist == 1) {
      const double u0 = (w[0] >> 8) * (1.0 / 16777216.0), u1 = (w[1] >> 8) * (1.0 / 16777216.0);
      const float z = (float)(sqrt(-2.0 * log(1.0 - u0)) * cos(6.283185307179586 * u1));
      v = cvt<T>(low + high * (double)z);
    } else {
      const u64 bits = ((u64)w[1] << 32) | w[0];
      const i64 r = ilow + (i64)(bits % (u64)(ihigh - ilow));
#if INTEGER_OUT
      v = (T)r;
#else
      v = cvt<T>((double)r);
#endif
    }
    out[out_offset + i] = v;
  }
}
