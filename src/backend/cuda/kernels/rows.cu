// Kernels over rows: softmax, argmax/argmin, cumsum (a row runs along one axis of any
// view), and the norms (a row is `inner` trailing elements).
// Defines: T (the tensor's storage type), ACC (the type arithmetic runs in: float for
// f16/bf16/f32, double for f64, i64 for integers), FLOATING (1 for float dtypes: softmax
// and the norms exist only then), and for argreduce IS_MAX.
//
// Axis rows: `outer` is the view with the axis removed (shape and strides of the other
// dims), so row r starts at at(outer, r) and steps `stride` along the axis; the output is
// contiguous in the input's shape, described the same way by out_outer / out_stride.

#ifndef IS_MAX
#define IS_MAX 1
#endif

struct AxisRows {
  View outer, out_outer;
  i64 rows, len, stride, out_stride;
};

#if FLOATING  // softmax and the norms: float dtypes only
// One warp per row: the max and the sum of exponentials online (rescaling the sum when
// the max grows), then one pass writing exp(x - max) / sum or x - max - log(sum).
extern "C" __global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ out, const AxisRows p, int log_out) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 r = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < p.rows; r += warps) {
    const i64 base = at(p.outer, r), obase = at(p.out_outer, r);
    ACC m = -(ACC)ALK_INF, s = 0;
    for (i64 j = lane; j < p.len; j += 32) {
      const ACC v = cvt<ACC>(x[base + j * p.stride]);
      if (v > m) {
        s = s * exp(m - v) + 1;
        m = v;
      } else if (is_nan(v)) {
        m = v;
      } else if (v != -(ACC)ALK_INF) {  // adds nothing (and -inf - -inf would be NaN)
        s += exp(v - m);
      }
    }
    // Combine the lanes' (max, sum) pairs.
    for (int o = 16; o > 0; o >>= 1) {
      const ACC mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
      const ACC mm = max_nan(m, mo);
      const ACC a = (m == mm) ? s : s * exp(m - mm), b = (mo == mm) ? so : so * exp(mo - mm);
      s = a + b;
      m = mm;
    }
    const ACC log_s = log(s), inv_s = (ACC)1 / s;
    for (i64 j = lane; j < p.len; j += 32) {
      const ACC v = cvt<ACC>(x[base + j * p.stride]);
      out[obase + j * p.out_stride] = cvt<T>(log_out ? v - m - log_s : exp(v - m) * inv_s);
    }
  }
}

#endif  // FLOATING

// One thread per row: the index of the first extremum; a NaN is the extremum of floats.
extern "C" __global__ void argreduce_rows(const T* __restrict__ x, i64* __restrict__ out, const AxisRows p) {
  ALK_FOR(r, p.rows) {
    const i64 base = at(p.outer, r);
    ACC best = cvt<ACC>(x[base]);
    i64 arg = 0;
    for (i64 j = 1; j < p.len && !is_nan(best); ++j) {
      const ACC v = cvt<ACC>(x[base + j * p.stride]);
      if (is_nan(v) || (IS_MAX ? v > best : v < best)) best = v, arg = j;
    }
    out[at(p.out_outer, r)] = arg;
  }
}

// One thread per row, in order (the CPU's order of additions).
extern "C" __global__ void cumsum_rows(const T* __restrict__ x, T* __restrict__ out, const AxisRows p, int reverse) {
  ALK_FOR(r, p.rows) {
    const i64 base = at(p.outer, r), obase = at(p.out_outer, r);
    ACC s = 0;
    for (i64 k = 0; k < p.len; ++k) {
      const i64 j = reverse ? p.len - 1 - k : k;
      s += cvt<ACC>(x[base + j * p.stride]);
      out[obase + j * p.out_stride] = cvt<T>(s);
    }
  }
}

#if FLOATING
// ---- norms: rows of `inner` elements; out is contiguous --------------------------------
struct NormParams {
  View x, w, b, g;  // b (layer norm) and g (backward) unused where absent
  i64 rows, inner, out_offset;
  double eps;
};

__device__ __forceinline__ ACC row_sum(ACC v) {
  return warp_sum(v);
}

// One warp per row: mean, then the variance about it (two passes over the row, which
// stays in L1), then the normalized, scaled and shifted row.
extern "C" __global__ void layer_norm_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                           T* __restrict__ out, const NormParams p, int rms) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 r = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < p.rows; r += warps) {
    const i64 first = r * p.inner;
    ACC mean = 0;
    if (!rms) {
      ACC s = 0;
      for (i64 j = lane; j < p.inner; j += 32) s += cvt<ACC>(x[at(p.x, first + j)]);
      mean = row_sum(s) / (ACC)p.inner;
    }
    ACC q = 0;
    for (i64 j = lane; j < p.inner; j += 32) {
      const ACC d = cvt<ACC>(x[at(p.x, first + j)]) - mean;
      q += d * d;
    }
    const ACC rstd = (ACC)1 / sqrt(row_sum(q) / (ACC)p.inner + (ACC)p.eps);
    for (i64 j = lane; j < p.inner; j += 32) {
      ACC y = (cvt<ACC>(x[at(p.x, first + j)]) - mean) * rstd * cvt<ACC>(w[at(p.w, j)]);
      if (!rms) y += cvt<ACC>(b[at(p.b, j)]);
      out[p.out_offset + first + j] = cvt<T>(y);
    }
  }
}

// Layer norm backward, pass 1 (one warp per row): dx into out rows [0, rows), and each
// row's mean and 1/std into stats[2 r], stats[2 r + 1] for pass 2.
//   xhat = (x - mean) rstd, gw = g w, dx = rstd (gw - mean(gw) - xhat mean(gw xhat))
extern "C" __global__ void layer_norm_backward_rows(const T* __restrict__ x, const T* __restrict__ w,
                                                    const T* __restrict__ g, T* __restrict__ out,
                                                    ACC* __restrict__ stats, const NormParams p) {
  const int lane = threadIdx.x & 31;
  const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
  for (i64 r = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < p.rows; r += warps) {
    const i64 first = r * p.inner;
    ACC s = 0;
    for (i64 j = lane; j < p.inner; j += 32) s += cvt<ACC>(x[at(p.x, first + j)]);
    const ACC mean = row_sum(s) / (ACC)p.inner;
    ACC q = 0;
    for (i64 j = lane; j < p.inner; j += 32) {
      const ACC d = cvt<ACC>(x[at(p.x, first + j)]) - mean;
      q += d * d;
    }
    const ACC rstd = (ACC)1 / sqrt(row_sum(q) / (ACC)p.inner + (ACC)p.eps);
    ACC a = 0, c = 0;
    for (i64 j = lane; j < p.inner; j += 32) {
      const ACC xhat = (cvt<ACC>(x[at(p.x, first + j)]) - mean) * rstd;
      const ACC gw = cvt<ACC>(g[at(p.g, first + j)]) * cvt<ACC>(w[at(p.w, j)]);
      a += gw;
      c += gw * xhat;
    }
    a = row_sum(a) / (ACC)p.inner;
    c = row_sum(c) / (ACC)p.inner;
    for (i64 j = lane; j < p.inner; j += 32) {
      const ACC xhat = (cvt<ACC>(x[at(p.x, first + j)]) - mean) * rstd;
      const ACC gw = cvt<ACC>(g[at(p.g, first + j)]) * cvt<ACC>(w[at(p.w, j)]);
      out[p.out_offset + first + j] = cvt<T>(rstd * (gw - a - xhat * c));
    }
    if (lane == 0) stats[2 * r] = mean, stats[2 * r + 1] = rstd;
  }
}

// Pass 2: column sums of g xhat (dweight) and g (dbias) over a chunk of rows each
// (blockIdx.y = chunk), into partial[chunk][2][inner].
extern "C" __global__ void layer_norm_backward_columns(const T* __restrict__ x, const T* __restrict__ g,
                                                       const ACC* __restrict__ stats, ACC* __restrict__ partial,
                                                       const NormParams p, i64 rows_per_chunk) {
  const i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= p.inner) return;
  const i64 r0 = (i64)blockIdx.y * rows_per_chunk, r1 = min(p.rows, r0 + rows_per_chunk);
  ACC dw = 0, db = 0;
  for (i64 r = r0; r < r1; ++r) {
    const ACC gv = cvt<ACC>(g[at(p.g, r * p.inner + j)]);
    const ACC xhat = (cvt<ACC>(x[at(p.x, r * p.inner + j)]) - stats[2 * r]) * stats[2 * r + 1];
    dw += gv * xhat;
    db += gv;
  }
  partial[((i64)blockIdx.y * 2) * p.inner + j] = dw;
  partial[((i64)blockIdx.y * 2 + 1) * p.inner + j] = db;
}

// Pass 3: the chunks' partial sums, in chunk order, into out rows `rows` and `rows + 1`.
extern "C" __global__ void layer_norm_backward_finish(const ACC* __restrict__ partial, T* __restrict__ out,
                                                      const NormParams p, i64 chunks) {
  ALK_FOR(i, 2 * p.inner) {
    const i64 which = i / p.inner, j = i % p.inner;
    ACC s = 0;
    for (i64 c = 0; c < chunks; ++c) s += partial[(c * 2 + which) * p.inner + j];
    out[p.out_offset + (p.rows + which) * p.inner + j] = cvt<T>(s);
  }
}
#endif  // FLOATING
