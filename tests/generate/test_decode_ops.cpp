// The decode ops (include/alk/generate.h) against float64 references computed here: the KV
// cache write, decode attention (grouped-query, per-slot lengths) and on-device sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "alk/alk.h"
#include "alk/generate.h"
#include "core/philox.h"
#include "error_expect.h"
#include "graph/graph.h"

namespace alk {
namespace {

std::vector<double> randoms(size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

TEST(DecodeOps, KvCacheWriteWritesEachSlotsRowAtItsPosition) {
  std::mt19937 rng(1);
  const int64_t S = 3, T = 5, Hkv = 2, D = 4;
  const std::vector<double> c = randoms(static_cast<size_t>(S * T * Hkv * D), rng);
  const std::vector<double> r = randoms(static_cast<size_t>(S * Hkv * D), rng);
  const std::vector<int64_t> pos = {1, 4, 0};
  Tensor cache = tensor(c, {S, T, Hkv, D}).to(DType::F32).realize();
  const Buffer* before = cache.impl()->node->buffer.get();
  Tensor old = tensor(c, {S, T, Hkv, D}).to(DType::F32);
  Tensor out = kv_cache_write(old, tensor(r, {S, Hkv, D}), tensor(pos, {S}));
  std::vector<double> want = c;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < Hkv * D; ++i)
      want[static_cast<size_t>((s * T + pos[static_cast<size_t>(s)]) * Hkv * D + i)] =
          static_cast<float>(r[static_cast<size_t>(s * Hkv * D + i)]);
  const std::vector<double> got = out.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], static_cast<float>(want[i])) << i;
  // Updating a cache nothing else reads writes where it lies.
  cache.assign_(kv_cache_write(cache, tensor(r, {S, Hkv, D}).to(DType::F32), tensor(pos, {S})));
  cache.realize();
  EXPECT_EQ(cache.impl()->node->buffer.get(), before);
  const std::vector<double> got2 = cache.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got2[i], static_cast<float>(want[i])) << i;
}

TEST(DecodeOps, KvCacheWriteRejectsPositionsOutsideTheCache) {
  Tensor cache = zeros({2, 4, 1, 2}).contiguous();
  EXPECT_ALK_ERROR(kv_cache_write(cache, zeros({2, 1, 2}), tensor(std::vector<int64_t>{0, 4}, {2})).realize(), "kv_cache_write", "position 4", "slot 1", "4 rows");
  EXPECT_ALK_ERROR(kv_cache_write(cache, zeros({2, 2, 2}), tensor(std::vector<int64_t>{0, 1}, {2})), "kv_cache_write", "[2, 1, 2]", "[2, 2, 2]");
  EXPECT_ALK_ERROR(kv_cache_write(cache, zeros({2, 1, 2}), tensor(std::vector<int64_t>{0}, {1})), "kv_cache_write", "[2]", "[1]");
}

// Slot s, head h attends to kv head h / (H / Hkv) over rows [0, lengths[s]).
TEST(DecodeOps, DecodeAttentionMatchesAFloat64Reference) {
  std::mt19937 rng(2);
  const int64_t S = 3, T = 6, H = 4, Hkv = 2, D = 5;
  const std::vector<int64_t> lengths = {3, 0, 6};
  const std::vector<double> q = randoms(static_cast<size_t>(S * H * D), rng);
  const std::vector<double> k = randoms(static_cast<size_t>(S * T * Hkv * D), rng);
  const std::vector<double> v = randoms(static_cast<size_t>(S * T * Hkv * D), rng);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> want(static_cast<size_t>(S * H * D), 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv), len = lengths[static_cast<size_t>(s)];
      std::vector<double> w(static_cast<size_t>(len));
      double m = -INFINITY, total = 0;
      for (int64_t t = 0; t < len; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += q[static_cast<size_t>((s * H + h) * D + d)] * k[static_cast<size_t>(((s * T + t) * Hkv + g) * D + d)];
        w[static_cast<size_t>(t)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      for (double& x : w) total += x = std::exp(x - m);
      for (int64_t t = 0; t < len; ++t)
        for (int64_t d = 0; d < D; ++d)
          want[static_cast<size_t>((s * H + h) * D + d)] +=
              w[static_cast<size_t>(t)] / total * v[static_cast<size_t>(((s * T + t) * Hkv + g) * D + d)];
    }
  // f64 to rounding; f32 (and a transposed, strided q) to f32's precision.
  Tensor got64 = decode_attention(tensor(q, {S, H, D}), tensor(k, {S, T, Hkv, D}), tensor(v, {S, T, Hkv, D}),
                                  tensor(lengths, {S}));
  EXPECT_EQ(got64.dtype(), DType::F64);
  const std::vector<double> a = got64.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-12) << i;
  Tensor qt = tensor(q, {S, H, D}).to(DType::F32).transpose(0, 1).contiguous().transpose(0, 1);
  Tensor got32 = decode_attention(qt, tensor(k, {S, T, Hkv, D}).to(DType::F32), tensor(v, {S, T, Hkv, D}).to(DType::F32),
                                  tensor(std::vector<int32_t>{3, 0, 6}, {S}));
  const std::vector<double> b = got32.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(b[i], want[i], 1e-5) << i;
}

// Each slot's output equals the fused attention over its own cached rows (the prefill's op).
TEST(DecodeOps, DecodeAttentionEqualsFusedAttentionOverTheCachedRows) {
  std::mt19937 rng(3);
  const int64_t S = 2, T = 7, H = 2, D = 8;
  Tensor q = tensor(randoms(static_cast<size_t>(S * H * D), rng), {S, H, D});
  Tensor k = tensor(randoms(static_cast<size_t>(S * T * H * D), rng), {S, T, H, D});
  Tensor v = tensor(randoms(static_cast<size_t>(S * T * H * D), rng), {S, T, H, D});
  const std::vector<int64_t> lengths = {7, 4};
  const std::vector<double> got = decode_attention(q, k, v, tensor(lengths, {S})).to_vector<double>();
  for (int64_t s = 0; s < S; ++s) {
    const int64_t len = lengths[static_cast<size_t>(s)];
    Tensor ks = k.select(0, s).slice(0, 0, len).transpose(0, 1), vs = v.select(0, s).slice(0, 0, len).transpose(0, 1);
    const std::vector<double> want =
        scaled_dot_product_attention(q.select(0, s).unsqueeze(1), ks, vs, false).to_vector<double>();
    for (int64_t i = 0; i < H * D; ++i)
      EXPECT_NEAR(got[static_cast<size_t>(s * H * D + i)], want[static_cast<size_t>(i)], 1e-12) << s << " " << i;
  }
}

TEST(DecodeOps, DecodeAttentionRejectsBadShapesAndLengths) {
  Tensor q = zeros({2, 3, 4}), kv = zeros({2, 5, 2, 4}).contiguous();
  EXPECT_ALK_ERROR(decode_attention(q, kv, kv, tensor(std::vector<int64_t>{1, 1}, {2})), "decode_attention", "heads 3", "kv heads 2");  // 3 heads, 2 kv heads
  Tensor q4 = zeros({2, 4, 4});
  EXPECT_ALK_ERROR(decode_attention(q4, kv, kv, tensor(std::vector<int64_t>{1, 6}, {2})).realize(), "decode_attention", "length 6", "slot 1");
  EXPECT_ALK_ERROR(decode_attention(q4, kv, kv, tensor(std::vector<double>{1, 1}, {2})), "decode_attention", "f64");
}

// The rule of generate.h in float64: temperature, the top-k and top-p filters, then the
// inverse CDF in vocabulary order at Philox's uniform for (seed, counter).
int64_t reference_sample(const std::vector<double>& logits, double temperature, int64_t top_k, double top_p,
                         uint64_t seed, uint64_t counter) {
  const size_t V = logits.size();
  if (temperature <= 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<double> z(V);
  for (size_t i = 0; i < V; ++i) z[i] = logits[i] / temperature;
  std::vector<double> sorted = z;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double kth = top_k > 0 && static_cast<size_t>(top_k) < V ? sorted[static_cast<size_t>(top_k - 1)] : -INFINITY;
  std::vector<double> p(V);
  double total = 0;
  for (size_t i = 0; i < V; ++i) total += p[i] = z[i] >= kth ? std::exp(z[i] - sorted[0]) : 0.0;
  std::vector<double> ps = p;
  std::sort(ps.begin(), ps.end(), std::greater<double>());
  double mass = 0, threshold = 0;
  for (double x : ps) {
    if (x <= 0) break;
    mass += x;
    threshold = x;
    if (mass >= top_p * total) break;
  }
  double kept = 0;
  for (double& x : p) kept += x = x >= threshold ? x : 0.0;
  double u = philox_uniform(seed, counter) * kept;
  for (size_t i = 0; i < V; ++i) {
    if (p[i] <= 0) continue;
    if (u < p[i]) return static_cast<int64_t>(i);
    u -= p[i];
  }
  return -1;
}

TEST(DecodeOps, SampleTokensFollowsAFloat64ReferenceOfItsFilters) {
  std::mt19937 rng(4);
  const int64_t V = 50;
  struct Setting {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  const std::vector<Setting> settings = {{0, 0, 1}, {1, 0, 1}, {0.7, 5, 1}, {1.3, 0, 0.6}, {0.9, 10, 0.8}, {2, 1, 1}};
  const int64_t S = static_cast<int64_t>(settings.size());
  int draws = 0, agree = 0;
  for (int round = 0; round < 40; ++round) {
    const std::vector<double> logits = randoms(static_cast<size_t>(S * V), rng, 2.0);
    std::vector<float> st;
    std::vector<int64_t> seeds, counters;
    for (const Setting& x : settings) {
      st.insert(st.end(), {static_cast<float>(x.temperature), static_cast<float>(x.top_k), static_cast<float>(x.top_p)});
      seeds.push_back(1000 + round);
      counters.push_back(round * 7 + static_cast<int64_t>(seeds.size()));
    }
    const std::vector<int64_t> got =
        sample_tokens(tensor(logits, {S, V}).to(DType::F32), tensor(st, {S, 3}), tensor(seeds, {S}), tensor(counters, {S}))
            .to_vector<int64_t>();
    for (int64_t s = 0; s < S; ++s) {
      // The reference sees the f32 logits the op sees.
      std::vector<double> row(static_cast<size_t>(V));
      for (int64_t i = 0; i < V; ++i) row[static_cast<size_t>(i)] = static_cast<float>(logits[static_cast<size_t>(s * V + i)]);
      const Setting& x = settings[static_cast<size_t>(s)];
      const int64_t want = reference_sample(row, static_cast<float>(x.temperature), x.top_k, static_cast<float>(x.top_p),
                                            static_cast<uint64_t>(seeds[static_cast<size_t>(s)]),
                                            static_cast<uint64_t>(counters[static_cast<size_t>(s)]));
      ++draws;
      agree += got[static_cast<size_t>(s)] == want;
      EXPECT_EQ(got[static_cast<size_t>(s)], want) << "round " << round << " setting " << s;
    }
  }
  EXPECT_EQ(agree, draws);
}

TEST(DecodeOps, SampleTokensOfARowDependsOnItsSeedAndCounterOnly) {
  std::mt19937 rng(5);
  const int64_t V = 40;
  const std::vector<double> row = randoms(static_cast<size_t>(V), rng);
  std::vector<double> three = randoms(static_cast<size_t>(3 * V), rng);
  std::copy(row.begin(), row.end(), three.begin() + V);  // the same row in the middle of a batch
  const std::vector<float> st1 = {1, 0, 0.9f};
  std::vector<float> st3 = {0.5f, 3, 1, 1, 0, 0.9f, 0, 0, 1};
  for (int64_t counter = 0; counter < 20; ++counter) {
    const int64_t alone = sample_tokens(tensor(row, {1, V}), tensor(st1, {1, 3}), tensor(std::vector<int64_t>{77}, {1}),
                                        tensor(std::vector<int64_t>{counter}, {1}))
                              .to_vector<int64_t>()[0];
    const int64_t batched = sample_tokens(tensor(three, {3, V}), tensor(st3, {3, 3}),
                                          tensor(std::vector<int64_t>{5, 77, 9}, {3}),
                                          tensor(std::vector<int64_t>{3, counter, 8}, {3}))
                                .to_vector<int64_t>()[1];
    EXPECT_EQ(alone, batched) << counter;
  }
}

TEST(DecodeOps, SampleTokensRejectsBadSettings) {
  Tensor logits = zeros({1, 4}).contiguous();
  auto run = [&](std::vector<float> st, Loc loc = Loc::current()) {  // errors name the caller's line
    return sample_tokens(logits, tensor(st, {1, 3}), tensor(std::vector<int64_t>{1}, {1}),
                         tensor(std::vector<int64_t>{0}, {1}), loc)
        .realize();
  };
  EXPECT_ALK_ERROR(run({1, 0, 0}), "sample_tokens", "top_p 0");  // top_p 0
  EXPECT_ALK_ERROR(run({1, 0, 1.5f}), "sample_tokens", "top_p 1.5");  // top_p > 1
  EXPECT_ALK_ERROR(run({1, -1, 1}), "sample_tokens", "top_k -1");  // negative top_k
  EXPECT_THROW(sample_tokens(logits, zeros({1, 2}), tensor(std::vector<int64_t>{1}, {1}),
                             tensor(std::vector<int64_t>{0}, {1})),
               Error);
}

}  // namespace
}  // namespace alk
