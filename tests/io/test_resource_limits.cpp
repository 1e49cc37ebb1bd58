// Files that ask for more memory than there is get a clear alk::Error before anything is
// allocated or read, never a visit from the OOM killer: safetensors and IDX headers whose
// (sparse) files claim huge tensors, a corpus larger than memory, a vocabulary of millions
// of entries. ALK_MEMORY_LIMIT stands in for a small machine; the files are sparse, so the
// test uses no real disk or memory.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "alk/data.h"
#include "alk/io.h"
#include "alk/tokenizer.h"
#include "io/temp_dir.h"
#include "testing.h"

namespace alk {
namespace {

using testing::TempDir;

// Sets ALK_MEMORY_LIMIT for one test.
struct MemoryLimit {
  explicit MemoryLimit(uint64_t bytes) { ::setenv("ALK_MEMORY_LIMIT", std::to_string(bytes).c_str(), 1); }
  ~MemoryLimit() { ::unsetenv("ALK_MEMORY_LIMIT"); }
};

// `head` followed by a hole: the file is `size` bytes long and takes no space.
void sparse_file(const std::string& path, const std::string& head, uint64_t size) {
  testing::write_file(path, head);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ResourceLimits, AvailableMemoryIsKnownAndLimitable) {
  const uint64_t avail = available_memory_bytes();
  EXPECT_GT(avail, 1u << 20);
  MemoryLimit limit(12345678);
  EXPECT_EQ(available_memory_bytes(), 12345678u);
}

TEST(ResourceLimits, SafetensorsClaimingAHugeTensor) {
  TempDir dir;
  // One F32 tensor of 2^28 elements = 1 GiB, in a sparse file of the right size.
  std::string header = R"({"w":{"dtype":"F32","shape":[268435456],"data_offsets":[0,1073741824]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string path = dir / "huge.safetensors";
  sparse_file(path, head + header, 8 + header.size() + (1ull << 30));
  MemoryLimit limit(64 << 20);
  EXPECT_EQ(read_safetensors_header(path).entries.at(0).shape, (Shape{268435456}));  // inspect still works
  const std::string msg = error_of([&] { load_safetensors(path); });
  EXPECT_NE(msg.find("needs 1073741824 bytes of memory, more than the 67108864 bytes available"), std::string::npos)
      << msg;
}

TEST(ResourceLimits, IdxClaimingHugeImages) {
  TempDir dir;
  // 1000000 images of 28 x 28 (784 MB), sparse.
  std::string h = {0, 0, 8, 3, 0, 0x0f, 0x42, 0x40, 0, 0, 0, 28, 0, 0, 0, 28};
  sparse_file(dir / "train-images-idx3-ubyte", h, h.size() + 784000000ull);
  std::string l = {0, 0, 8, 1, 0, 0x0f, 0x42, 0x40};
  sparse_file(dir / "train-labels-idx1-ubyte", l, l.size() + 1000000);
  MemoryLimit limit(64 << 20);
  const std::string msg = error_of([&] { load_mnist(dir.path(), true); });
  EXPECT_NE(msg.find("needs 784000000 bytes of memory"), std::string::npos) << msg;
}

TEST(ResourceLimits, CorpusLargerThanMemory) {
  TempDir dir;
  sparse_file(dir / "corpus.txt", "In the beginning", 200ull << 20);
  MemoryLimit limit(64 << 20);
  const std::string msg = error_of([&] { read_file(dir / "corpus.txt", "train"); });
  EXPECT_NE(msg.find("alk::train: reading '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 209715200 bytes of memory"), std::string::npos) << msg;
}

TEST(ResourceLimits, VocabularyOfMillionsOfEntries) {
  TempDir dir;
  // 2 million entries (about 30 MB of JSON): parsing it would take far more than 64 MB.
  std::string vocab = "{";
  for (int i = 0; i < 2000000; ++i) vocab += (i ? ", \"t" : "\"t") + std::to_string(i) + "\": " + std::to_string(i);
  vocab += "}";
  testing::write_file(dir / "vocab.json", vocab);
  testing::write_file(dir / "merges.txt", "#version: 0.2\n");
  MemoryLimit limit(64 << 20);
  const std::string msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(msg.find("parsing '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bytes of memory, more than the 67108864 bytes available"), std::string::npos) << msg;
}

}  // namespace
}  // namespace alk
