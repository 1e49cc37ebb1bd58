// random(): element i is a pure function of (seed, offset + i), per core/philox.h,
// so results do not depend on thread count or chunking.
//
// Parameters by distribution:
//   Uniform: low + (high - low) * u, u in [0, 1)
//   Normal:  mean = low, standard deviation = high: low + high * z, z ~ N(0, 1)
//   Integer: philox_integer in [low, high) (low and high truncated to integers)
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_internal.h"
#include "core/philox.h"

namespace alk::cpu {

void random(Distribution dist, uint64_t seed, uint64_t offset, double low, double high, const View& out) {
  int64_t ilow = static_cast<int64_t>(low), ihigh = static_cast<int64_t>(high);
  if (dist == Distribution::Integer && ihigh <= ilow)
    fail("random", Loc::current(), "integer range [", ilow, ", ", ihigh, ") is empty");
  parallel_for(out.numel(), 16384, [&](int64_t lo, int64_t hi) {
    detail::dispatch(out.dtype, [&](auto e) {
      using E = decltype(e);
      for (int64_t i = lo; i < hi; ++i) {
        uint64_t counter = offset + static_cast<uint64_t>(i);
        int64_t at = out.offset + i;
        switch (dist) {
          case Distribution::Uniform:
            E::store(out.data, at, low + (high - low) * static_cast<double>(philox_uniform(seed, counter)));
            break;
          case Distribution::Normal:
            E::store(out.data, at, low + high * static_cast<double>(philox_normal(seed, counter)));
            break;
          case Distribution::Integer:
            if (is_integral(out.dtype))
              detail::store_int(out.data, out.dtype, at, philox_integer(seed, counter, ilow, ihigh));
            else
              E::store(out.data, at, static_cast<double>(philox_integer(seed, counter, ilow, ihigh)));
            break;
        }
      }
    });
  });
}

}  // namespace alk::cpu
