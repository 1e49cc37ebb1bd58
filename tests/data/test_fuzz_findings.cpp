// What the fuzzers (fuzz/) found, kept as regression tests; they matter most in the ASan+UBSan
// run of the suite.
#include <cstdint>
#include <string>
#include <vector>

#include "alk/data.h"
#include "alk/io.h"
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

// fuzz_mnist: dims [4278321929, 4294967295, 0] hold 0 bytes, but their strides overflowed
// int64 (UB) when the tensor was made. Refused now, as the same shape in safetensors is.
TEST(FuzzFindings, ZeroSizedShapeWithOverflowingStrides) {
  testing::TempDir dir;
  testing::write_file(dir / "t10k-images-idx3-ubyte",
                      std::string("\0\0\x08\x03\xff\x01\x02\x09\xff\xff\xff\xff\0\0\0\0", 16));
  testing::write_file(dir / "t10k-labels-idx1-ubyte", std::string("\0\0\x08\x01\0\0\0\0", 8));
  EXPECT_THROW(load_mnist(dir.path(), false), Error);
  std::string header = R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  testing::write_file(dir / "z.safetensors", file + header);
  EXPECT_THROW(load_safetensors(dir / "z.safetensors"), Error);
}

}  // namespace
}  // namespace alk
