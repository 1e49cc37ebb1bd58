// The bitwise ops of the table (bitwise_and/or/xor/not, left and right shifts, rotations) in each integer
// dtype's own width, against the same operations on the C++ types (the PyTorch parity fixture
// has the i64 and bool cases); bools take the logical forms; floats are an error naming the op
// and the caller's line. The compiled CPU tier and the interpreter agree (Jit.* runs every
// entry); Vulkan and WebGPU are checked against the CPU by the parity suites.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "alk/alk.h"

namespace alk {
namespace {

template <class T>
std::vector<T> draws(size_t n, uint32_t seed, int64_t lo, int64_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(rng));
  return v;
}

// What a shift gives in a type of `bits` bits: the value as that type after shifting the
// two's complement bits; amounts of `bits` or more give 0 (<<) or the sign (>>).
template <class T>
T shl_ref(T a, int64_t b) {
  if (b < 0 || b >= static_cast<int64_t>(8 * sizeof(T))) return 0;
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) << b));
}
template <class T>
T shr_ref(T a, int64_t b) {
  if (b < 0 || b >= static_cast<int64_t>(8 * sizeof(T))) return a < 0 ? T(-1) : T(0);
  return static_cast<T>(a >> b);
}

template <class T>
void check_dtype(DType t, int64_t lo, int64_t hi) {
  SCOPED_TRACE(dtype_name(t));
  const size_t n = 257;
  const std::vector<T> a = draws<T>(n, 1, lo, hi), b = draws<T>(n, 2, lo, hi);
  // Shift amounts over [0, 2 * width), so some reach past the width.
  const std::vector<T> s = draws<T>(n, 3, 0, std::min<int64_t>(hi, 2 * 8 * static_cast<int64_t>(sizeof(T)) - 1));
  auto as_tensor = [&](const std::vector<T>& v) {
    std::vector<int64_t> w(v.begin(), v.end());
    return cast(tensor(w, {static_cast<int64_t>(n)}), t);
  };
  const Tensor ta = as_tensor(a), tb = as_tensor(b), ts = as_tensor(s);
  // Stored first, in the op's dtype: that store is what truncates to the width (a consumer fused
  // with the op reads its i64 compute value; docs/dtypes.md, "Integer").
  auto values = [](const Tensor& x) {
    x.realize();
    std::vector<int64_t> out = cast(x, DType::I64).template to_vector<int64_t>();
    return out;
  };
  const std::vector<int64_t> and_ = values(bitwise_and(ta, tb)), or_ = values(bitwise_or(ta, tb)),
                             xor_ = values(bitwise_xor(ta, tb)), not_ = values(bitwise_not(ta)),
                             shl = values(bitwise_left_shift(ta, ts)), shr = values(bitwise_right_shift(ta, ts));
  EXPECT_EQ(bitwise_and(ta, tb).dtype(), t);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(and_[i], static_cast<T>(a[i] & b[i])) << i;
    ASSERT_EQ(or_[i], static_cast<T>(a[i] | b[i])) << i;
    ASSERT_EQ(xor_[i], static_cast<T>(a[i] ^ b[i])) << i;
    ASSERT_EQ(not_[i], static_cast<T>(~a[i])) << i;
    ASSERT_EQ(shl[i], shl_ref<T>(a[i], s[i])) << a[i] << " << " << static_cast<int64_t>(s[i]);
    ASSERT_EQ(shr[i], shr_ref<T>(a[i], s[i])) << a[i] << " >> " << static_cast<int64_t>(s[i]);
  }
}

TEST(Bitwise, EachIntegerDtypeInItsOwnWidth) {
  check_dtype<int64_t>(DType::I64, -(int64_t{1} << 40), int64_t{1} << 40);
  check_dtype<int32_t>(DType::I32, -2000000000, 2000000000);
  check_dtype<uint8_t>(DType::U8, 0, 255);
}

// rotl/rotr turn the low 32 bits (C++20's std::rotl/std::rotr on uint32_t, the amount mod 32):
// an i32 result holds the u32's bit pattern, an i64 result the u32's value.
TEST(Bitwise, RotationsOfThe32BitPattern) {
  std::mt19937 rng(7);
  const size_t n = 300;
  std::vector<int32_t> a(n), s(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<int32_t>(rng());
    s[i] = static_cast<int32_t>(rng() % 80) - 8;  // negative and past 32: taken mod 32
  }
  const Tensor ta = tensor(a, {static_cast<int64_t>(n)}), ts = tensor(s, {static_cast<int64_t>(n)});
  const std::vector<int32_t> l32 = rotl(ta, ts).to_vector<int32_t>(), r32 = rotr(ta, ts).to_vector<int32_t>();
  const std::vector<int64_t> l64 = rotl(cast(ta, DType::I64), ts).to_vector<int64_t>();
  EXPECT_EQ(rotl(ta, ts).dtype(), DType::I32);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(a[i]);
    const int k = static_cast<int>(static_cast<uint32_t>(s[i]) & 31);
    ASSERT_EQ(static_cast<uint32_t>(l32[i]), std::rotl(u, k)) << a[i] << " rotl " << s[i];
    ASSERT_EQ(static_cast<uint32_t>(r32[i]), std::rotr(u, k)) << a[i] << " rotr " << s[i];
    ASSERT_EQ(l64[i], static_cast<int64_t>(std::rotl(u, k))) << a[i] << " rotl " << s[i] << " (i64)";
  }
  // SHA-256's sigma0 of one word, written with the ops: rotr 7 ^ rotr 18 ^ shr 3 (logical: on
  // the u32's value held in i64).
  const Tensor w = cast(tensor(std::vector<int64_t>{0x61626380}, {1}), DType::I64);
  const int64_t sigma0 = bitwise_xor(bitwise_xor(rotr(w, 7), rotr(w, 18)), bitwise_right_shift(w, 3)).to_vector<int64_t>()[0];
  const uint32_t x = 0x61626380u;
  EXPECT_EQ(sigma0, static_cast<int64_t>(std::rotr(x, 7) ^ std::rotr(x, 18) ^ (x >> 3)));
}

TEST(Bitwise, ScalarsAndBroadcasting) {
  const Tensor x = tensor(std::vector<int64_t>{0x0F, 0xF0, 0xFF}, {3, 1});
  EXPECT_EQ(bitwise_and(x, 0x3C).to_vector<int64_t>(), (std::vector<int64_t>{0x0C, 0x30, 0x3C}));
  const Tensor y = bitwise_xor(x, tensor(std::vector<int64_t>{1, 2}, {2}));
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{0x0E, 0x0D, 0xF1, 0xF2, 0xFE, 0xFD}));
  EXPECT_EQ(bitwise_left_shift(x, 4).to_vector<int64_t>(), (std::vector<int64_t>{0xF0, 0xF00, 0xFF0}));
}

TEST(Bitwise, BoolsAreLogical) {
  const Tensor a = tensor(std::vector<int64_t>{1, 1, 0, 0}, {4}) > 0, b = tensor(std::vector<int64_t>{1, 0, 1, 0}, {4}) > 0;
  EXPECT_EQ(bitwise_and(a, b).dtype(), DType::Bool);
  EXPECT_EQ(cast(bitwise_and(a, b), DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(cast(bitwise_or(a, b), DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ(cast(bitwise_xor(a, b), DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(cast(bitwise_not(a), DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
}

TEST(Bitwise, FloatsAreAnErrorNamingTheOpAndTheLine) {
  const Tensor f = ones({3});
  const int line = __LINE__ + 2;
  try {
    (void)bitwise_and(f, tensor(std::vector<int64_t>{1, 2, 3}, {3}));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bitwise_and"), std::string::npos) << what;
    EXPECT_NE(what.find("f32"), std::string::npos) << what;
    EXPECT_NE(what.find("test_bitwise.cpp:" + std::to_string(line)), std::string::npos) << what;
  }
  EXPECT_THROW((void)bitwise_not(f), Error);
  EXPECT_THROW((void)bitwise_left_shift(f, 1), Error);
}

}  // namespace
}  // namespace alk
