// Kernels over rows: softmax, argmax/argmin, cumsum (a row runs along one axis of any
// view), and the norms (a row is `inner` trailing elements).
// Defines: T (the tensor's storage type), ACC (the type arithmetic runs in: float for
// f16/bf16/f32, double for f64, i64 for integers), FLOATING (1 for float dtypes: softmax
// and the norms exist only then), and for argreduce IS_MAX. The layer-norm backward reads
// the output gradient as TG (default T: a bf16 gradient of an f32 norm is widened as it
// loads), and the row-in-registers forward may end in an EPILOGUE (epilogue_at, from the
// host's epilogue_code) storing TO (default T).
//
// Axis rows: `outer` is the view with the axis removed (shape and strides of the other
// dims), so row r starts at at(outer, r) and steps `stride` along the axis; the output is
// contiguous in the input's shape, described the same way by out_outer / out_stride.

#ifndef IS_MAX
#define IS_MAX 1
#endif
#ifndef TG
#define TG T
#endif
#ifndef TO
#define TO T
#endif
#ifndef EPILOGUE
#define EPILOGUE 0
#endif
#ifndef NORM_SUM
#define NORM_SUM 0  // layer norm backward: dx adds a fourth input (CudaDevice::norm_backward_adds)
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
// With NORM_SUM, dx adds `sum` (its view p.b): the gradient x had from elsewhere.
extern "C" __global__ void layer_norm_backward_rows(const T* __restrict__ x, const T* __restrict__ w,
                                                    const TG* __restrict__ g, const T* __restrict__ sum,
                                                    T* __restrict__ out, ACC* __restrict__ stats, const NormParams p) {
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
      const ACC dx = rstd * (gw - a - xhat * c);
      out[p.out_offset + first + j] = cvt<T>(NORM_SUM ? dx + cvt<ACC>(sum[at(p.b, first + j)]) : dx);
    }
    if (lane == 0) stats[2 * r] = mean, stats[2 * r + 1] = rstd;
  }
}

// Pass 2: column sums of g xhat (dweight) and g (dbias) over a chunk of rows each
// (blockIdx.y = chunk), into partial[chunk][2][inner].
extern "C" __global__ void layer_norm_backward_columns(const T* __restrict__ x, const TG* __restrict__ g,
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

#if FLOATING && defined(ROW_VEC)
// ---- norms with each row in registers (compiled with ROW_VEC, ROW_WARPS, ROW_ITEMS, and
// ROW_MIN_BLOCKS: the backward's blocks per SM, which bounds its registers) ----
// A group of ROW_WARPS warps owns a row; lane t of the group holds the vectors t, t + GROUP,
// ... (ROW_ITEMS of them, ROW_VEC elements apiece, one 16-byte load each where the host
// found x, g and out contiguous and aligned, else ROW_VEC = 1 and loads go through the
// View). A lane therefore holds the same columns for every row it visits, so its share
// of a column sum (layer-norm dweight / dbias) stays in registers across rows. Blocks are
// 256 threads: ROW_GROUPS rows in flight per block.
#define ROW_GROUP (32 * ROW_WARPS)
#define ROW_GROUPS (256 / ROW_GROUP)
#define ROW_SPAN (ROW_GROUP * ROW_VEC * ROW_ITEMS)  // columns a group covers (>= inner)

template <class E>
struct __align__(ROW_VEC * sizeof(E)) RowVecOf {
  E v[ROW_VEC];
};
using RowVec = RowVecOf<T>;

// Vector k of this lane: columns row_column(k) .. + ROW_VEC - 1, all present or all absent
// (the host picks ROW_VEC > 1 only when it divides inner).
__device__ __forceinline__ i64 row_column(int lane, int k) { return (i64)(lane + k * ROW_GROUP) * ROW_VEC; }

template <class E>
__device__ __forceinline__ RowVecOf<E> load_row(const E* __restrict__ base, const View& v, i64 i) {
  RowVecOf<E> r;
#if ROW_VEC > 1
  r = *reinterpret_cast<const RowVecOf<E>*>(base + v.offset + i);  // contiguous and aligned (host)
#else
  r.v[0] = base[at(v, i)];
#endif
  return r;
}

template <class E>
__device__ __forceinline__ void zero_row(RowVecOf<E>& r) {
#pragma unroll
  for (int e = 0; e < ROW_VEC; ++e) r.v[e] = cvt<E>((ACC)0);
}

// The sum over the row's group; every lane gets the same value (a fixed order: the xor
// butterfly, then the group's warps in order). Every thread of the block calls it together.
__device__ __forceinline__ ACC group_sum(ACC v, ACC* red) {
  v = warp_sum(v);
#if ROW_WARPS > 1
  const int warp = threadIdx.x / 32, first = warp / ROW_WARPS * ROW_WARPS;
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  v = 0;
#pragma unroll
  for (int i = 0; i < ROW_WARPS; ++i) v += red[first + i];
  __syncthreads();
#endif
  return v;
}

// Layer norm / RMS norm forward: x read once (kept in registers), out written once.
// With EPILOGUE, row r is row r % e_rows of batch item r / e_rows of the epilogue's
// inputs (EpiParams: the output's shape as [batch..., e_rows, inner]).
extern "C" __global__ void __launch_bounds__(256) layer_norm_rows_fused(const T* __restrict__ x, const T* __restrict__ w,
                                                                        const T* __restrict__ b, TO* __restrict__ out,
                                                                        const NormParams p, int rms
#if EPILOGUE
                                                                        , const EpiParams ep, i64 e_rows
#endif
) {
  __shared__ ACC red[8];
  // The affine parameters, read once per block (as T; the host keeps the two within 40 KB).
  __shared__ T wsh[ROW_SPAN], bsh[ROW_SPAN];
  const int lane = threadIdx.x % ROW_GROUP, group = threadIdx.x / ROW_GROUP;
  const ACC n = (ACC)p.inner;
  for (int j = threadIdx.x; j < ROW_SPAN; j += blockDim.x) {
    wsh[j] = j < p.inner ? w[at(p.w, j)] : cvt<T>((ACC)0);
    bsh[j] = j < p.inner && !rms ? b[at(p.b, j)] : cvt<T>((ACC)0);
  }
  __syncthreads();
  for (i64 rb = (i64)blockIdx.x * ROW_GROUPS; rb < p.rows; rb += (i64)gridDim.x * ROW_GROUPS) {
    const i64 r = rb + group, first = r * p.inner;
    const bool valid = r < p.rows;
    RowVec xv[ROW_ITEMS];
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k) {
      if (valid && row_column(lane, k) < p.inner) xv[k] = load_row(x, p.x, first + row_column(lane, k));
      else zero_row(xv[k]);
    }
    ACC mean = 0;
    if (!rms) {
      ACC s = 0;
#pragma unroll
      for (int k = 0; k < ROW_ITEMS; ++k)
#pragma unroll
        for (int e = 0; e < ROW_VEC; ++e) s += cvt<ACC>(xv[k].v[e]);
      mean = group_sum(s, red) / n;
    }
    ACC q = 0;
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k)
      if (row_column(lane, k) < p.inner)  // absent columns hold 0, which is not x - mean
#pragma unroll
        for (int e = 0; e < ROW_VEC; ++e) {
          const ACC d = cvt<ACC>(xv[k].v[e]) - mean;
          q += d * d;
        }
    const ACC rstd = (ACC)1 / sqrt(group_sum(q, red) / n + (ACC)p.eps);
    if (!valid) continue;  // (after the last group_sum: every thread reaches each barrier)
#if EPILOGUE
    i64 ebase[4];
    epilogue_bases(r / e_rows, ep, ebase);
    const i64 erow = r % e_rows;
#endif
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k) {
      const i64 j0 = row_column(lane, k);
      if (j0 >= p.inner) continue;
      RowVecOf<TO> o;
#pragma unroll
      for (int e = 0; e < ROW_VEC; ++e) {
        const ACC y = (cvt<ACC>(xv[k].v[e]) - mean) * rstd * cvt<ACC>(wsh[j0 + e]) + cvt<ACC>(bsh[j0 + e]);
#if EPILOGUE
        o.v[e] = cvt<TO>(epilogue_at((float)y, ebase, erow, j0 + e, ep));
#else
        o.v[e] = cvt<TO>(y);
#endif
      }
#if ROW_VEC > 1
      *reinterpret_cast<RowVecOf<TO>*>(out + p.out_offset + first + j0) = o;
#else
      out[p.out_offset + first + j0] = o.v[0];
#endif
    }
  }
}

// This lane's column sums added into column[] group by group, in group order.
__device__ __forceinline__ void add_columns(ACC* column, const ACC (&acc)[ROW_ITEMS][ROW_VEC], int lane, int group,
                                            i64 inner) {
#if ROW_GROUPS > 1
  for (int s = 0; s < ROW_GROUPS; ++s) {
    if (group == s)
#pragma unroll
      for (int k = 0; k < ROW_ITEMS; ++k)
        if (row_column(lane, k) < inner)
#pragma unroll
          for (int e = 0; e < ROW_VEC; ++e) {
            const i64 j = row_column(lane, k) + e;
            column[j] = (s ? column[j] : (ACC)0) + acc[k][e];
          }
    __syncthreads();
  }
#else
#pragma unroll
  for (int k = 0; k < ROW_ITEMS; ++k)
    if (row_column(lane, k) < inner)
#pragma unroll
      for (int e = 0; e < ROW_VEC; ++e) column[row_column(lane, k) + e] = acc[k][e];
#endif
}

// Layer norm backward in one pass: each group reads its rows of x and g once (registers),
// writes dx, and adds g xhat and g into its lanes' column sums; at the end the block's
// sums go to partial[block][2][inner] (dweight, dbias), summed by the finish kernel below.
//   xhat = (x - mean) rstd, gw = g w, dx = rstd (gw - mean(gw) - xhat mean(gw xhat))
// With NORM_SUM, dx adds `sum` (its view p.b), read as dx is written: the residual stream's
// gradient from the layers above, which a separate add would read with dx again.
extern "C" __global__ void __launch_bounds__(256, ROW_MIN_BLOCKS)
    layer_norm_backward_fused(const T* __restrict__ x, const T* __restrict__ w, const TG* __restrict__ g,
                              const T* __restrict__ sum, T* __restrict__ out, ACC* __restrict__ partial,
                              const NormParams p) {
  __shared__ ACC red[8];
  __shared__ __align__(16) ACC wsh[ROW_SPAN];  // the weight (registers are short: the row and the sums)
  const int lane = threadIdx.x % ROW_GROUP, group = threadIdx.x / ROW_GROUP;
  const ACC n = (ACC)p.inner;
  for (int j = threadIdx.x; j < ROW_SPAN; j += blockDim.x) wsh[j] = j < p.inner ? cvt<ACC>(w[at(p.w, j)]) : (ACC)0;
  __syncthreads();
  ACC dw[ROW_ITEMS][ROW_VEC], db[ROW_ITEMS][ROW_VEC];
#pragma unroll
  for (int k = 0; k < ROW_ITEMS; ++k)
#pragma unroll
    for (int e = 0; e < ROW_VEC; ++e) dw[k][e] = db[k][e] = 0;
  for (i64 rb = (i64)blockIdx.x * ROW_GROUPS; rb < p.rows; rb += (i64)gridDim.x * ROW_GROUPS) {
    const i64 r = rb + group, first = r * p.inner;
    const bool valid = r < p.rows;
    RowVec xv[ROW_ITEMS];
    RowVecOf<TG> gv[ROW_ITEMS];
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k) {
      if (valid && row_column(lane, k) < p.inner) {
        xv[k] = load_row(x, p.x, first + row_column(lane, k));
        gv[k] = load_row(g, p.g, first + row_column(lane, k));
#if NORM_SUM && ROW_VEC > 1
        // The sum is read only when dx is written; asked into L2 now, its latency overlaps the
        // row's statistics (loading it here would take registers the row's sums need).
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(sum + p.b.offset + first + row_column(lane, k)));
#endif
      } else {
        zero_row(xv[k]);
        zero_row(gv[k]);
      }
    }
    ACC s = 0;
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k)
#pragma unroll
      for (int e = 0; e < ROW_VEC; ++e) s += cvt<ACC>(xv[k].v[e]);
    const ACC mean = group_sum(s, red) / n;
    ACC q = 0;
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k)
      if (row_column(lane, k) < p.inner)  // absent columns hold 0, which is not x - mean
#pragma unroll
        for (int e = 0; e < ROW_VEC; ++e) {
          const ACC d = cvt<ACC>(xv[k].v[e]) - mean;
          q += d * d;
        }
    const ACC rstd = (ACC)1 / sqrt(group_sum(q, red) / n + (ACC)p.eps);
    // Absent columns and rows hold g = 0 (and w = 0): they add nothing below.
    ACC a = 0, c = 0;
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k)
#pragma unroll
      for (int e = 0; e < ROW_VEC; ++e) {
        const ACC xhat = (cvt<ACC>(xv[k].v[e]) - mean) * rstd, gval = cvt<ACC>(gv[k].v[e]);
        const ACC gw = gval * wsh[row_column(lane, k) + e];
        a += gw;
        c += gw * xhat;
        dw[k][e] += gval * xhat;
        db[k][e] += gval;
      }
    a = group_sum(a, red) / n;
    c = group_sum(c, red) / n;
    if (!valid) continue;  // (after the last group_sum: every thread reaches each barrier)
#pragma unroll
    for (int k = 0; k < ROW_ITEMS; ++k) {
      const i64 j0 = row_column(lane, k);
      if (j0 >= p.inner) continue;
      RowVec o;
#pragma unroll
      for (int e = 0; e < ROW_VEC; ++e) {
        const ACC xhat = (cvt<ACC>(xv[k].v[e]) - mean) * rstd;
        o.v[e] = cvt<T>(rstd * (cvt<ACC>(gv[k].v[e]) * wsh[j0 + e] - a - xhat * c));
      }
      if (NORM_SUM) {
        const RowVec s = load_row(sum, p.b, first + j0);
#pragma unroll
        for (int e = 0; e < ROW_VEC; ++e) o.v[e] = cvt<T>(cvt<ACC>(o.v[e]) + cvt<ACC>(s.v[e]));
      }
#if ROW_VEC > 1
      *reinterpret_cast<RowVec*>(out + p.out_offset + first + j0) = o;
#else
      out[p.out_offset + first + j0] = o.v[0];
#endif
    }
  }
  // The block's column sums: one group's registers straight out, several through shared
  // memory in group order (deterministic).
#if ROW_GROUPS > 1
  __shared__ ACC column[ROW_SPAN];
  add_columns(column, dw, lane, group, p.inner);
  for (i64 j = threadIdx.x; j < p.inner; j += blockDim.x) partial[(i64)blockIdx.x * 2 * p.inner + j] = column[j];
  __syncthreads();
  add_columns(column, db, lane, group, p.inner);
  for (i64 j = threadIdx.x; j < p.inner; j += blockDim.x) partial[((i64)blockIdx.x * 2 + 1) * p.inner + j] = column[j];
#else
  add_columns(partial + (i64)blockIdx.x * 2 * p.inner, dw, lane, group, p.inner);
  add_columns(partial + ((i64)blockIdx.x * 2 + 1) * p.inner, db, lane, group, p.inner);
#endif
}

// The blocks' partial sums (`blocks` rows of [2][inner]) into out rows `rows` and `rows + 1`:
// 32 columns x 8 slices per block, slice s summing blocks s, s + 8, ...; then the slices in
// order (a fixed order: deterministic).
extern "C" __global__ void layer_norm_backward_fused_finish(const ACC* __restrict__ partial, T* __restrict__ out,
                                                            const NormParams p, i64 blocks) {
  __shared__ ACC slice[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const i64 i = (i64)blockIdx.x * 32 + tx, width = 2 * p.inner;
  ACC s = 0;
  if (i < width)
#pragma unroll 4
    for (i64 c = ty; c < blocks; c += 8) s += partial[c * width + i];
  slice[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && i < width) {
    ACC t = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) t += slice[k][tx];
    out[p.out_offset + p.rows * p.inner + i] = cvt<T>(t);
  }
}
#endif  // FLOATING && ROW_VEC
