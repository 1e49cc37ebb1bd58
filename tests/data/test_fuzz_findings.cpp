// What the fuzzers (fuzz/) found, kept as regression tests; they matter most in the ASan+UBSan
// run of the suite.
#include <cstdint>
#include <string>
#include <vector>

#include "alk/data.h"
#include "io/temp_dir.h"
#include "testing.h"

namespace alk {
namespace {

// fuzz_mnist: an IDX pair with 0 images made tensor() memcpy from a null pointer (UB, even
// for 0 bytes), on the way to an empty i64 label tensor.
TEST(FuzzFindings, EmptyIdxAndEmptyI64Tensor) {
  Tensor t = tensor(std::vector<int64_t>{}, {0});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.to_vector<int64_t>().empty());
  testing::TempDir dir;
  testing::write_file(dir / "t10k-images-idx3-ubyte", std::string("\0\0\x08\x03\0\0\0\0\0\0\0\x1c\0\0\0\x1c", 16));
  testing::write_file(dir / "t10k-labels-idx1-ubyte", std::string("\0\0\x08\x01\0\0\0\0", 8));
  MnistSplit s = load_mnist(dir.path(), false);
  EXPECT_EQ(s.images.shape(), (Shape{0, 28, 28}));
  EXPECT_EQ(s.labels.numel(), 0);
}

}  // namespace
}  // namespace alk
