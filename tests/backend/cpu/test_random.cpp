// random(): determinism, the counter-offset convention, and distribution moments.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/philox.h"
#include "kernel_test_util.h"

namespace alk::cpu {
namespace {

using namespace alk::cpu::testing;

std::vector<double> draw(Distribution d, uint64_t seed, uint64_t offset, double lo, double hi, int64_t n,
                         DType dt = DType::F32) {
  Buf out = make_output({n}, dt);
  random(d, seed, offset, lo, hi, out.view);
  expect_guards(out);
  return out.values();
}

TEST(Random, DeterministicAndOffsetShifts) {
  for (Distribution d : {Distribution::Uniform, Distribution::Normal, Distribution::Integer}) {
    std::vector<double> a = draw(d, 42, 100, 0, 10, 1000), b = draw(d, 42, 100, 0, 10, 1000);
    EXPECT_EQ(a, b);
    std::vector<double> shifted = draw(d, 42, 99, 0, 10, 1001);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], shifted[i + 1]) << i;
    EXPECT_NE(a, draw(d, 43, 100, 0, 10, 1000));
  }
}

TEST(Random, IndependentOfThreadCount) {
  int saved = num_threads();
  set_num_threads(1);
  std::vector<double> one = draw(Distribution::Normal, 7, 0, 0, 1, 100000);
  set_num_threads(4);
  std::vector<double> four = draw(Distribution::Normal, 7, 0, 0, 1, 100000);
  set_num_threads(saved);
  EXPECT_EQ(one, four);
}

// Philox4x32-10's known-answer vectors (Random123's kat_vectors, from the paper's reference
// implementation; the same three checked by scripts/philox_kat.py, an independent
// implementation of the paper's round function): core/philox.h, which every device's
// "bit-identical random" is compared with, is the published generator.
TEST(Random, PhiloxKnownAnswers) {
  using Words = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10(Words{0, 0, 0, 0}, {0, 0}), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10(Words{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10(Words{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // alk's form (64-bit counter in words 0-1, key = seed), across the low word's carry.
  EXPECT_EQ(philox4x32_10(uint64_t{0}, uint64_t{0}), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10((uint64_t{1} << 32) | 5, uint64_t{42}), (Words{0x131a8a04, 0x494efee7, 0xe24f0e03, 0x5128a584}));
}

// The kernel's uniform draws at seed 7, counters 0..3: (word0 >> 8) * 2^-24 of the published
// generator (values from scripts/philox_kat.py), on every ISA path.
TEST(Random, UniformDrawsAreThePublishedGenerators) {
  const double want[] = {16015482.0 / 16777216, 6827662.0 / 16777216, 101923.0 / 16777216, 6546454.0 / 16777216};
  const Isa saved = isa();
  for (Isa path : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(path)) continue;
    set_isa(path);
    SCOPED_TRACE(isa_name(path));
    std::vector<double> u = draw(Distribution::Uniform, 7, 0, 0, 1, 4, DType::F64);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(u[i], want[i]) << "counter " << i;
  }
  set_isa(saved);
}

TEST(Random, FollowsPhiloxConvention) {
  std::vector<double> u = draw(Distribution::Uniform, 5, 1000, 0, 1, 10, DType::F64);
  std::vector<double> z = draw(Distribution::Normal, 5, 1000, 0, 1, 10, DType::F64);
  std::vector<double> k = draw(Distribution::Integer, 5, 1000, -3, 4, 10, DType::I64);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(u[i], philox_uniform(5, 1000 + i));
    EXPECT_EQ(z[i], philox_normal(5, 1000 + i));
    EXPECT_EQ(k[i], philox_integer(5, 1000 + i, -3, 4));
  }
}

// The AVX2 / AVX-512 paths compute 8 / 16 counters at a time: every path must give
// core/philox.h's scalar bits, at odd offsets and lengths (vector body plus scalar tail),
// and across the carry from the counter's low 32-bit word into the high one.
TEST(Random, EveryIsaPathMatchesScalarPhilox) {
  const Isa saved = isa();
  for (Isa path : {Isa::Generic, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(path)) continue;
    set_isa(path);
    for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{1001}, uint64_t{0xFFFFFFF5u}, uint64_t{0x1FFFFFFFDull}})
      for (int64_t n : {1, 7, 8, 15, 17, 33, 300, 20011}) {
        const uint64_t seed = 0x9E3779B97F4A7C15ull + offset;
        std::vector<double> u = draw(Distribution::Uniform, seed, offset, 0, 1, n, DType::F64);
        std::vector<double> z = draw(Distribution::Normal, seed, offset, 0, 1, n, DType::F64);
        std::vector<double> k = draw(Distribution::Integer, seed, offset, -5, 1000003, n, DType::I64);
        std::vector<double> f = draw(Distribution::Uniform, seed, offset, -2, 3, n, DType::F32);
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t c = offset + static_cast<uint64_t>(i);
          ASSERT_EQ(u[i], philox_uniform(seed, c)) << isa_name(path) << " offset " << offset << " i " << i;
          ASSERT_EQ(z[i], philox_normal(seed, c)) << isa_name(path) << " offset " << offset << " i " << i;
          ASSERT_EQ(k[i], static_cast<double>(philox_integer(seed, c, -5, 1000003))) << isa_name(path) << " i " << i;
          ASSERT_EQ(f[i], static_cast<double>(static_cast<float>(-2.0 + 5.0 * static_cast<double>(philox_uniform(seed, c)))))
              << isa_name(path) << " i " << i;
        }
      }
  }
  set_isa(saved);
}

TEST(Random, UniformMoments) {
  std::vector<double> u = draw(Distribution::Uniform, 1, 0, 0, 1, 100000);
  double mean = 0;
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    mean += v / static_cast<double>(u.size());
  }
  EXPECT_NEAR(mean, 0.5, 0.01);
  std::vector<double> r = draw(Distribution::Uniform, 2, 0, -3, 5, 100000, DType::F64);
  double rmean = 0;
  for (double v : r) {
    ASSERT_GE(v, -3.0);
    ASSERT_LT(v, 5.0);
    rmean += v / static_cast<double>(r.size());
  }
  EXPECT_NEAR(rmean, 1.0, 0.05);
}

TEST(Random, NormalMomentsUseLowAsMeanHighAsStd) {
  for (auto [mu, sigma] : {std::pair{0.0, 1.0}, std::pair{3.0, 0.5}}) {
    std::vector<double> z = draw(Distribution::Normal, 9, 0, mu, sigma, 100000);
    double mean = 0, var = 0;
    for (double v : z) mean += v / static_cast<double>(z.size());
    for (double v : z) var += (v - mean) * (v - mean) / static_cast<double>(z.size());
    EXPECT_NEAR(mean, mu, 0.02 * sigma);
    EXPECT_NEAR(std::sqrt(var), sigma, 0.02 * sigma);
  }
}

TEST(Random, IntegersInRange) {
  for (DType dt : {DType::I64, DType::I32, DType::F32}) {
    std::vector<double> k = draw(Distribution::Integer, 3, 0, -5, 7, 20000, dt);
    std::vector<int> counts(12, 0);
    for (double v : k) {
      ASSERT_EQ(v, std::floor(v));
      ASSERT_GE(v, -5);
      ASSERT_LT(v, 7);
      ++counts[static_cast<size_t>(v + 5)];
    }
    for (int c : counts) EXPECT_GT(c, 20000 / 12 / 2);  // every value turns up
  }
  Buf out = make_output({4}, DType::I64);
  EXPECT_THROW(random(Distribution::Integer, 1, 0, 3, 3, out.view), Error);
}

TEST(Random, NarrowDtypes) {
  for (DType dt : {DType::BF16, DType::F16}) {
    std::vector<double> u = draw(Distribution::Uniform, 4, 0, 0, 1, 10000, dt);
    double mean = 0;
    for (double v : u) {
      ASSERT_GE(v, 0.0);
      ASSERT_LE(v, 1.0);
      mean += v / 10000.0;
    }
    EXPECT_NEAR(mean, 0.5, 0.02);
  }
}

}  // namespace
}  // namespace alk::cpu
