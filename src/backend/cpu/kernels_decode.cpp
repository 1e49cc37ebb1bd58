// The CPU's decode kernels (the reference the other backends are tested against): the KV
// cache write, attention of one query row per slot over its cached length (grouped-query:
// kv head h / (H / Hkv)), and sampling of one token per row (include/alk/generate.h states
// each op's contract). Decode work is small per call (a row per slot), so these stay plain
// loops over the thread pool; the matmuls around them dominate a decode step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "alk/error.h"
#include "backend/cpu/kernels_decode.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/thread_pool.h"
#include "core/philox.h"

namespace alk::cpu {

namespace {

// Element (i) of a contiguous row of dtype t as float/double.
template <class Acc>
void load_row(const View& v, int64_t at, int64_t n, int64_t stride, Acc* out) {
  const char* base = static_cast<const char*>(v.data);
  if (v.dtype == DType::F32 && stride == 1) {
    const float* p = reinterpret_cast<const float*>(base) + at;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Acc>(p[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Acc>(load_as_double(v.data, v.dtype, at + i * stride));
}

int64_t index_at(const View& v, int64_t i) { return load_as_int(v.data, v.dtype, v.offset + i * v.strides[0]); }

// Strides of a rank-4 view (broadcast dims allowed).
struct Strides4 {
  int64_t s0, s1, s2, s3;
};
Strides4 strides4(const View& v) { return {v.strides[0], v.strides[1], v.strides[2], v.strides[3]}; }

// q . k over D elements in 8 running sums (lane j takes d = j mod 8), so the compiler can keep
// them in one vector register; the order is fixed by D alone.
template <class Acc>
Acc dot_product(const Acc* q, const Acc* k, int64_t D) {
  Acc part[8] = {};
  int64_t d = 0;
  for (; d + 8 <= D; d += 8)
    for (int j = 0; j < 8; ++j) part[j] += q[d + j] * k[d + j];
  for (; d < D; ++d) part[d % 8] += q[d] * k[d];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

template <class Acc>
void decode_attention_typed(const View& q, const View& k, const View& v, const View& lengths, double scale,
                            const View& out) {
  const int64_t S = q.shape[0], H = q.shape[1], D = q.shape[2], Hkv = k.shape[2];
  const int64_t group = H / Hkv;
  const Strides4 ks = strides4(k), vs = strides4(v);
  const bool direct = std::is_same_v<Acc, float> && k.dtype == DType::F32 && v.dtype == DType::F32 && ks.s3 == 1 &&
                      vs.s3 == 1;
  parallel_for(S * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<Acc> qrow(static_cast<size_t>(D)), krow(static_cast<size_t>(D)), acc(static_cast<size_t>(D)),
        scores;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t s = u / H, h = u % H, kvh = h / group;
      const int64_t len = index_at(lengths, s);
      load_row(q, q.offset + s * q.strides[0] + h * q.strides[1], D, q.strides[2], qrow.data());
      std::fill(acc.begin(), acc.end(), Acc(0));
      scores.assign(static_cast<size_t>(len), Acc(0));
      Acc m = -INFINITY;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t at = k.offset + s * ks.s0 + t * ks.s1 + kvh * ks.s2;
        // Rows of an f32 cache are read in place; others are converted first.
        const Acc* row = direct ? reinterpret_cast<const Acc*>(static_cast<const float*>(k.data) + at) : krow.data();
        if (!direct) load_row(k, at, D, ks.s3, krow.data());
        const Acc dot = dot_product(qrow.data(), row, D);
        scores[static_cast<size_t>(t)] = dot * static_cast<Acc>(scale);
        m = std::max(m, scores[static_cast<size_t>(t)]);
      }
      Acc total = 0;
      for (int64_t t = 0; t < len; ++t) {
        const Acc p = std::exp(scores[static_cast<size_t>(t)] - m);
        total += p;
        const int64_t at = v.offset + s * vs.s0 + t * vs.s1 + kvh * vs.s2;
        const Acc* row = direct ? reinterpret_cast<const Acc*>(static_cast<const float*>(v.data) + at) : krow.data();
        if (!direct) load_row(v, at, D, vs.s3, krow.data());
        Acc* a = acc.data();
        for (int64_t d = 0; d < D; ++d) a[d] += p * row[d];
      }
      const int64_t o = (s * H + h) * D;
      for (int64_t d = 0; d < D; ++d)
        store_double(out.data, out.dtype, o + d, len > 0 ? static_cast<double>(acc[static_cast<size_t>(d)] / total) : 0.0);
    }
  });
}

// One row of sample_tokens: the chosen id (generate.h gives the rule).
int64_t sample_row(std::vector<double>& z, double temperature, int64_t top_k, double top_p, uint64_t seed,
                   uint64_t counter) {
  const int64_t V = static_cast<int64_t>(z.size());
  if (!(temperature > 0)) return std::max_element(z.begin(), z.end()) - z.begin();
  for (double& x : z) x /= temperature;
  const double m = *std::max_element(z.begin(), z.end());
  double keep_from = -INFINITY;  // z below this is dropped
  if (top_k > 0 && top_k < V) {
    std::vector<double> sorted = z;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<double>());
    keep_from = sorted[static_cast<size_t>(top_k - 1)];
  }
  std::vector<double> p(static_cast<size_t>(V));
  double total = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double x = z[static_cast<size_t>(i)];
    p[static_cast<size_t>(i)] = x >= keep_from ? std::exp(x - m) : 0.0;
    total += p[static_cast<size_t>(i)];
  }
  if (top_p < 1) {
    std::vector<double> sorted;
    for (double x : p)
      if (x > 0) sorted.push_back(x);
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    double mass = 0, threshold = sorted.empty() ? 0 : sorted.back();
    for (double x : sorted) {
      mass += x;
      if (mass >= top_p * total) {
        threshold = x;
        break;
      }
    }
    total = 0;
    for (double& x : p) {
      if (x < threshold) x = 0;
      total += x;
    }
  }
  double u = static_cast<double>(philox_uniform(seed, counter)) * total;
  int64_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double x = p[static_cast<size_t>(i)];
    if (x <= 0) continue;
    last = i;
    if (u < x) return i;
    u -= x;
  }
  return last;  // u rounded past the end: the last kept token
}

}  // namespace

void kv_cache_write(const View& cache, const View& rows, const View& positions, const View& out, Loc loc) {
  const int64_t S = cache.shape[0], T = cache.shape[1], Hkv = cache.shape[2], D = cache.shape[3];
  // Every position is checked before anything is written.
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p = index_at(positions, s);
    check(p >= 0 && p < T, "kv_cache_write", loc, "position ", p, " of slot ", s, " is outside the cache's ", T,
          " rows");
  }
  const size_t esize = dtype_size(out.dtype);
  char* o = static_cast<char*>(out.data) + out.offset * static_cast<int64_t>(esize);
  const char* c = static_cast<const char*>(cache.data) + cache.offset * static_cast<int64_t>(esize);
  // Written in place (the scheduler gave the output the cache's memory): only the new rows.
  if (o != c || !cache.is_contiguous()) {
    if (cache.is_contiguous()) {
      std::memcpy(o, c, static_cast<size_t>(cache.numel()) * esize);
    } else {
      const int64_t n = cache.numel();
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(o + i * static_cast<int64_t>(esize),
                    static_cast<const char*>(cache.data) + cache.offset_of(i) * static_cast<int64_t>(esize), esize);
    }
  }
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p = index_at(positions, s);
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t from = rows.offset + s * rows.strides[0] + h * rows.strides[1] + d * rows.strides[2];
        const int64_t to = ((s * T + p) * Hkv + h) * D + d;
        if (rows.dtype == out.dtype)
          std::memcpy(o + to * static_cast<int64_t>(esize),
                      static_cast<const char*>(rows.data) + from * static_cast<int64_t>(esize), esize);
        else
          store_double(o, out.dtype, to, load_as_double(rows.data, rows.dtype, from));
      }
  }
}

void decode_attention(const View& q, const View& k, const View& v, const View& lengths, double scale, const View& out,
                      Loc loc) {
  const int64_t S = q.shape[0], T = k.shape[1];
  for (int64_t s = 0; s < S; ++s) {
    const int64_t len = index_at(lengths, s);
    check(len >= 0 && len <= T, "decode_attention", loc, "length ", len, " of slot ", s, " is outside [0, ", T,
          "] (the cache's rows)");
  }
  if (q.dtype == DType::F64 || k.dtype == DType::F64 || out.dtype == DType::F64)
    decode_attention_typed<double>(q, k, v, lengths, scale, out);
  else
    decode_attention_typed<float>(q, k, v, lengths, scale, out);
}

void sample_tokens(const View& logits, const View& settings, const View& seeds, const View& counters, const View& out,
                   Loc loc) {
  const int64_t S = logits.shape[0], V = logits.shape[1];
  for (int64_t s = 0; s < S; ++s) {
    const double top_p = load_as_double(settings.data, settings.dtype, settings.offset + s * settings.strides[0] + 2 * settings.strides[1]);
    const double top_k = load_as_double(settings.data, settings.dtype, settings.offset + s * settings.strides[0] + settings.strides[1]);
    check(top_p > 0 && top_p <= 1 && top_k >= 0, "sample_tokens", loc, "row ", s, ": top_p ", top_p,
          " must be in (0, 1] and top_k ", top_k, " >= 0");
  }
  parallel_for(S, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> z(static_cast<size_t>(V));
    for (int64_t s = begin; s < end; ++s) {
      load_row(logits, logits.offset + s * logits.strides[0], V, logits.strides[1], z.data());
      auto setting = [&](int j) {
        return load_as_double(settings.data, settings.dtype, settings.offset + s * settings.strides[0] + j * settings.strides[1]);
      };
      const uint64_t seed = static_cast<uint64_t>(index_at(seeds, s));
      const uint64_t counter = static_cast<uint64_t>(index_at(counters, s));
      const int64_t id = sample_row(z, setting(0), static_cast<int64_t>(setting(1)), setting(2), seed, counter);
      static_cast<int64_t*>(out.data)[out.offset + s] = id;
    }
  });
}

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  ops.add(OpId::KvCacheWrite, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    kv_cache_write(in[0], in[1], in[2], out, k.node.loc);
  }, "only the new rows are written when the result has the cache's memory");
  ops.add(OpId::DecodeAttention, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    decode_attention(in[0], in[1], in[2], in[3], std::get<AttentionParams>(k.node.params).scale, out, k.node.loc);
  });
  ops.add(OpId::SampleTokens, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    sample_tokens(in[0], in[1], in[2], in[3], out, k.node.loc);
  }, "float logits; i64 ids");
  return true;
}();
}  // namespace

}  // namespace alk::cpu
