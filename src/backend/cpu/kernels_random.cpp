// random(): element i is a pure function of (seed, offset + i), per core/philox.h,
// so results do not depend on thread count or chunking.
//
// Parameters by distribution:
//   Uniform: low + (high - low) * u, u in [0, 1)
//   Normal:  mean = low, standard deviation = high: low + high * z, z ~ N(0, 1)
//   Integer: philox_integer in [low, high) (low and high truncated to integers)
//
// The Philox words come 8 or 16 counters at a time from the AVX2 / AVX-512 code in
// random_impl.inc (the same bits as philox4x32_10, which computes the rest); the
// distributions are then applied to the words with core/philox.h's expressions.
#include <cstring>

#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "runtime/device.h"
#include "backend/cpu/kernels_internal.h"
#include "core/philox.h"

namespace alk::cpu {

namespace avx2 {
int64_t philox_words(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w0, uint32_t* w1);
}
namespace avx512 {
int64_t philox_words(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w0, uint32_t* w1);
}

namespace {

// Words 0 and 1 of Philox4x32-10 for counters counter + i, i in [0, n).
void philox_words(uint64_t seed, uint64_t counter, int64_t n, uint32_t* w0, uint32_t* w1) {
  int64_t done = 0;
  switch (isa()) {
    case Isa::Avx512: done = avx512::philox_words(seed, counter, n, w0, w1); break;
    case Isa::Avx2: done = avx2::philox_words(seed, counter, n, w0, w1); break;
    case Isa::Generic: break;
  }
  for (int64_t i = done; i < n; ++i) {
    const auto w = philox4x32_10(counter + static_cast<uint64_t>(i), seed);
    w0[i] = w[0];
    w1[i] = w[1];
  }
}

// philox_uniform, philox_normal and philox_integer (core/philox.h) from the words.
float uniform_of(uint32_t w0) { return static_cast<float>(w0 >> 8) * (1.0f / 16777216.0f); }
float normal_of(uint32_t w0, uint32_t w1) {
  double u0 = (w0 >> 8) * (1.0 / 16777216.0), u1 = (w1 >> 8) * (1.0 / 16777216.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(1.0 - u0)) * std::cos(6.283185307179586 * u1));
}
int64_t integer_of(uint32_t w0, uint32_t w1, int64_t low, int64_t high) {
  uint64_t bits = (static_cast<uint64_t>(w1) << 32) | w0;
  return low + static_cast<int64_t>(bits % static_cast<uint64_t>(high - low));
}

}  // namespace

void random(Distribution dist, uint64_t seed, uint64_t offset, double low, double high, const View& out) {
  int64_t ilow = static_cast<int64_t>(low), ihigh = static_cast<int64_t>(high);
  if (dist == Distribution::Integer && ihigh <= ilow)
    fail("random", Loc::current(), "integer range [", ilow, ", ", ihigh, ") is empty");
  parallel_for(out.numel(), 16384, [&](int64_t lo, int64_t hi) {
    constexpr int64_t kChunk = 256;
    alignas(64) uint32_t w0[kChunk], w1[kChunk];
    detail::dispatch(out.dtype, [&](auto e) {
      using E = decltype(e);
      for (int64_t c0 = lo; c0 < hi; c0 += kChunk) {
        const int64_t len = std::min(kChunk, hi - c0);
        philox_words(seed, offset + static_cast<uint64_t>(c0), len, w0, w1);
        const int64_t at = out.offset + c0;
        switch (dist) {
          case Distribution::Uniform:
            for (int64_t i = 0; i < len; ++i)
              E::store(out.data, at + i, low + (high - low) * static_cast<double>(uniform_of(w0[i])));
            break;
          case Distribution::Normal:
            for (int64_t i = 0; i < len; ++i)
              E::store(out.data, at + i, low + high * static_cast<double>(normal_of(w0[i], w1[i])));
            break;
          case Distribution::Integer:
            for (int64_t i = 0; i < len; ++i) {
              const int64_t v = integer_of(w0[i], w1[i], ilow, ihigh);
              if (is_integral(out.dtype))
                detail::store_int(out.data, out.dtype, at + i, v);
              else
                E::store(out.data, at + i, static_cast<double>(v));
            }
            break;
        }
      }
    });
  });
}

// The CPU's template-op table entry for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  template_ops().add(OpId::Random, kFloatDTypes | kIntDType, [](const Kernel& k, const std::vector<View>&, const View& out) {
    const auto& p = std::get<RandomParams>(k.node.params);
    const auto dist = static_cast<Distribution>(p.dist);
    if (!k.inputs.empty()) {
      // A compiled step's draw: seed and base offset live in an i64 [2] buffer the replay
      // rewrites (alk::compile), p.offset is relative to that base.
      uint64_t state[2];
      std::memcpy(state, static_cast<const char*>(k.inputs[0].buffer->handle) + k.inputs[0].byte_offset, sizeof state);
      random(dist, state[0], state[1] + p.offset, p.low, p.high, out);
      return;
    }
    random(dist, p.seed, p.offset, p.low, p.high, out);
  });
  return true;
}();
}  // namespace

}  // namespace alk::cpu
