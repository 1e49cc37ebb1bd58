// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11):
// a counter-based generator, so element i of any random tensor is a pure function of
// (seed, offset + i) and every backend draws the same numbers in any order.
//
// alk's convention: element i uses the block at counter c = offset + i (words 0 and 1).
//   uniform  u = (word0 >> 8) * 2^-24 in [0, 1)
//   normal   Box-Muller: sqrt(-2 ln(1 - u0)) * cos(2 pi u1) with u0, u1 from words 0, 1
//   integer  low + ((word1 << 32 | word0) mod (high - low))
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace alk {

// The generator on a full 128-bit counter and 64-bit key (the form of the paper's known-answer
// vectors, which tests/backend/cpu/test_random.cpp checks).
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  return c;
}

// alk's draws: a 64-bit counter (words 2 and 3 zero) and a 64-bit key.
inline std::array<uint32_t, 4> philox4x32_10(uint64_t counter, uint64_t key) {
  return philox4x32_10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
                       {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
}

inline float philox_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(philox4x32_10(counter, seed)[0] >> 8) * (1.0f / 16777216.0f);
}

inline float philox_normal(uint64_t seed, uint64_t counter) {
  auto w = philox4x32_10(counter, seed);
  double u0 = (w[0] >> 8) * (1.0 / 16777216.0), u1 = (w[1] >> 8) * (1.0 / 16777216.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(1.0 - u0)) * std::cos(6.283185307179586 * u1));
}

inline int64_t philox_integer(uint64_t seed, uint64_t counter, int64_t low, int64_t high) {
  auto w = philox4x32_10(counter, seed);
  uint64_t bits = (static_cast<uint64_t>(w[1]) << 32) | w[0];
  return low + static_cast<int64_t>(bits % static_cast<uint64_t>(high - low));
}

}  // namespace alk
