// TokenDataset: split, seeded batches (a pure function of the seed and step), token cache.
#include <gtest/gtest.h>

#include <numeric>

#include "alk/alk.h"
#include "alk/data.h"
#include "core/philox.h"
#include "io/temp_dir.h"

namespace alk {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::vector<int32_t> iota_ids(int32_t n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

// A byte-level "tokenizer" that counts its calls.
struct ByteEncoder {
  int* calls;
  std::vector<int32_t> operator()(std::string_view s) const {
    ++*calls;
    std::vector<int32_t> out;
    for (char c : s) out.push_back(static_cast<unsigned char>(c));
    return out;
  }
};

TEST(TokenDataset, SplitsTailIntoValidation) {
  TokenDataset d(iota_ids(100), 0.1);
  EXPECT_EQ(d.train_size(), 90);
  EXPECT_EQ(d.val_size(), 10);
  EXPECT_EQ(TokenDataset(iota_ids(100), 0.0).val_size(), 0);
  EXPECT_EQ(TokenDataset(iota_ids(7), 0.5).train_size(), 4);  // floor(3.5) = 3 validation tokens
  EXPECT_THROW(TokenDataset(iota_ids(10), 1.0), Error);
  EXPECT_THROW(TokenDataset(iota_ids(10), -0.1), Error);
  EXPECT_THROW(TokenDataset(std::vector<int32_t>{1, -2, 3}), Error);
}

TEST(TokenDataset, TargetsAreInputsShiftedByOne) {
  TokenDataset d(iota_ids(1000), 0.2);  // train 0..799, validation 800..999
  for (bool train : {true, false}) {
    auto [x, y] = d.batch(train, 8, 16, uint64_t{1234});
    EXPECT_EQ(x.dtype(), DType::I64);
    EXPECT_EQ(y.dtype(), DType::I64);
    EXPECT_EQ(x.shape(), (Shape{8, 16}));
    EXPECT_EQ(y.shape(), (Shape{8, 16}));
    std::vector<int64_t> xv = x.to_vector<int64_t>(), yv = y.to_vector<int64_t>();
    for (size_t i = 0; i < xv.size(); ++i) {
      EXPECT_EQ(yv[i], xv[i] + 1);  // ids are positions: the next token
      if (i % 16 != 15) {
        EXPECT_EQ(xv[i + 1], yv[i]);  // and rows are consecutive windows
      }
      if (train) {
        EXPECT_LT(yv[i], 800);  // never crosses into validation
      } else {
        EXPECT_GE(xv[i], 800);
      }
    }
  }
}

TEST(TokenDataset, BatchesAreAPureFunctionOfSeedAndStep) {
  TokenDataset d(iota_ids(5000), 0.1), same(iota_ids(5000), 0.1);
  auto a = d.batch(true, 4, 32, uint64_t{7}, uint64_t{3});
  auto b = same.batch(true, 4, 32, uint64_t{7}, uint64_t{3});  // another object, same data
  EXPECT_EQ(a.first.to_vector<int64_t>(), b.first.to_vector<int64_t>());
  EXPECT_EQ(a.second.to_vector<int64_t>(), b.second.to_vector<int64_t>());
  d.batch(true, 4, 32, uint64_t{7}, uint64_t{2});  // no hidden state: order of calls does not matter
  EXPECT_EQ(d.batch(true, 4, 32, uint64_t{7}, uint64_t{3}).first.to_vector<int64_t>(), a.first.to_vector<int64_t>());
  EXPECT_EQ(d.batch(true, 4, 32, TokenDataset::step_seed(7, 3)).first.to_vector<int64_t>(),
            a.first.to_vector<int64_t>());
  EXPECT_NE(d.batch(true, 4, 32, uint64_t{7}, uint64_t{4}).first.to_vector<int64_t>(), a.first.to_vector<int64_t>());
  EXPECT_NE(d.batch(true, 4, 32, uint64_t{8}, uint64_t{3}).first.to_vector<int64_t>(), a.first.to_vector<int64_t>());
  EXPECT_NE(TokenDataset::step_seed(1, 0), TokenDataset::step_seed(0, 1));
  // A smaller batch is a prefix of a larger one with the same seed (row b uses counter b).
  std::vector<int64_t> two = d.batch(true, 2, 32, uint64_t{99}).first.to_vector<int64_t>();
  std::vector<int64_t> four = d.batch(true, 4, 32, uint64_t{99}).first.to_vector<int64_t>();
  EXPECT_EQ(two, std::vector<int64_t>(four.begin(), four.begin() + 64));
}

TEST(TokenDataset, BatchOffsetsArePinned) {
  // Pinned so that a checkpoint resumed by a later alk sees the same data order. If this
  // changes, resuming old runs is no longer bit-identical: change it only on purpose.
  TokenDataset d(iota_ids(100000), 0.0);
  std::vector<int64_t> starts;
  auto x = d.batch(true, 4, 8, uint64_t{42}).first.to_vector<int64_t>();
  for (int b = 0; b < 4; ++b) starts.push_back(x[static_cast<size_t>(b * 8)]);
  EXPECT_EQ(starts, (std::vector<int64_t>{48963, 78975, 63477, 39885}));
  for (uint64_t b = 0; b < 4; ++b)  // row b starts at philox_integer(seed, b, 0, n - T)
    EXPECT_EQ(starts[b], philox_integer(42, b, 0, 100000 - 8));
  EXPECT_EQ(TokenDataset::step_seed(42, 1000), 0xf42d5e4cb9b0a1bbull);
  auto y = d.batch(true, 2, 8, uint64_t{42}, uint64_t{1000}).first.to_vector<int64_t>();
  EXPECT_EQ(y[0], 94539);
  EXPECT_EQ(y[8], 88764);
}

TEST(TokenDataset, BatchErrors) {
  TokenDataset d(iota_ids(100), 0.1);
  EXPECT_THROW(d.batch(true, 0, 4, uint64_t{1}), Error);
  EXPECT_THROW(d.batch(true, 2, 0, uint64_t{1}), Error);
  EXPECT_THROW(d.batch(true, 2, 90, uint64_t{1}), Error);  // needs 91 train tokens
  EXPECT_NO_THROW(d.batch(true, 2, 89, uint64_t{1}));
  EXPECT_THROW(d.batch(false, 2, 10, uint64_t{1}), Error);  // 10 validation tokens
  EXPECT_THROW(TokenDataset(iota_ids(100), 0.0).batch(false, 1, 1, uint64_t{1}), Error);
}

TEST(TokenDataset, Fnv1a64KnownVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(TokenDataset, CacheIsWrittenReusedAndInvalidated) {
  TempDir dir;
  std::string text = dir / "corpus.txt", cache = dir / "corpus.tok";
  write_file(text, "hello world, hello tokens");
  int calls = 0;
  ByteEncoder enc{&calls};

  TokenDataset first = TokenDataset::from_file(text, enc, cache, 0.2);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(first.from_cache());
  EXPECT_EQ(first.ids().size(), 25u);
  EXPECT_EQ(first.ids()[0], 'h');
  std::string bytes = read_file(cache);
  ASSERT_EQ(bytes.size(), 24u + 4 * 25);
  EXPECT_EQ(bytes.substr(0, 8), std::string("ALKTOK1\0", 8));
  uint64_t count = 0, key = 0;
  for (int i = 7; i >= 0; --i) {
    count = (count << 8) | static_cast<unsigned char>(bytes[8 + static_cast<size_t>(i)]);
    key = (key << 8) | static_cast<unsigned char>(bytes[16 + static_cast<size_t>(i)]);
  }
  EXPECT_EQ(count, 25u);
  EXPECT_EQ(key, fnv1a64("hello world, hello tokens"));
  EXPECT_EQ(static_cast<unsigned char>(bytes[24]), 'h');

  TokenDataset second = TokenDataset::from_file(text, enc, cache, 0.2);
  EXPECT_EQ(calls, 1);  // reused
  EXPECT_TRUE(second.from_cache());
  EXPECT_EQ(second.ids(), first.ids());
  EXPECT_EQ(second.train_size(), first.train_size());

  write_file(text, "different text");  // new hash: re-encode and rewrite
  TokenDataset third = TokenDataset::from_file(text, enc, cache, 0.2);
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(third.from_cache());
  EXPECT_EQ(third.ids().size(), 14u);
  EXPECT_TRUE(TokenDataset::from_file(text, enc, cache, 0.2).from_cache());
  EXPECT_EQ(calls, 2);

  // A different encoder fingerprint invalidates the cache.
  EXPECT_FALSE(TokenDataset::from_file(text, enc, cache, 0.2, 0xabcdef).from_cache());
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(TokenDataset::from_file(text, enc, cache, 0.2, 0xabcdef).from_cache());

  // A damaged cache is rebuilt, not trusted.
  std::string damaged = read_file(cache);
  write_file(cache, damaged.substr(0, damaged.size() - 2));
  EXPECT_FALSE(TokenDataset::from_file(text, enc, cache, 0.2, 0xabcdef).from_cache());
  write_file(cache, "ALKTOK2" + damaged.substr(7));
  EXPECT_FALSE(TokenDataset::from_file(text, enc, cache, 0.2, 0xabcdef).from_cache());
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(read_file(cache), damaged);
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"corpus.tok", "corpus.txt"}));  // no temp files
}

TEST(TokenDataset, FromFileWithoutCacheAndErrors) {
  TempDir dir;
  std::string text = dir / "t.txt";
  write_file(text, "abc");
  int calls = 0;
  TokenDataset d = TokenDataset::from_file(text, ByteEncoder{&calls}, "", 0.0);
  EXPECT_EQ(d.ids(), (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(dir.list(), std::vector<std::string>{"t.txt"});
  EXPECT_THROW(TokenDataset::from_file(dir / "missing.txt", ByteEncoder{&calls}, ""), Error);
  auto negative = [](std::string_view) { return std::vector<int32_t>{1, -5}; };
  EXPECT_THROW(TokenDataset::from_file(text, negative, dir / "neg.tok"), Error);
  EXPECT_THROW(TokenDataset::from_file(text, TextEncoder(), dir / "none.tok"), Error);
}

}  // namespace
}  // namespace alk
