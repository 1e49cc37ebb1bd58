// SafetensorsReader and SafetensorsCheckpoint: tensors read one at a time in the file's
// dtype, sharded checkpoints through model.safetensors.index.json, malformed indexes.
#include <gtest/gtest.h>

#include "alk/alk.h"
#include "alk/io.h"
#include "graph/graph.h"
#include "io/temp_dir.h"

namespace alk {
namespace {

using testing::TempDir;
using testing::write_file;

std::string raw(const Tensor& t) {
  const std::vector<unsigned char> bytes = host_bytes(t);
  return std::string(bytes.begin(), bytes.end());
}

TEST(SafetensorsReader, ReadsEachTensorInItsDtype) {
  TempDir dir;
  manual_seed(3);
  const Tensor a = randn({3, 5}), b = randn({7}).to(DType::BF16), c = tensor(std::vector<int64_t>{1, 2, 3}, {3});
  save_safetensors(dir / "m.safetensors", {{"a", a}, {"b", b}, {"c", c}});
  const SafetensorsReader r(dir / "m.safetensors");
  ASSERT_EQ(r.header().entries.size(), 3u);
  const Tensor b2 = r.read("b", cpu_device());
  EXPECT_EQ(b2.dtype(), DType::BF16);
  EXPECT_EQ(raw(b2), raw(b));
  EXPECT_EQ(raw(r.read("a", cpu_device())), raw(a));
  EXPECT_EQ(raw(r.read("c", cpu_device())), raw(c));
  EXPECT_THROW(r.read("nope", cpu_device()), Error);
}

TEST(SafetensorsReader, LargeTensorGoesThroughTheStagingBufferInPieces) {
  // More than one staging buffer of data, read in order into one tensor.
  TempDir dir;
  const int64_t n = static_cast<int64_t>(kSafetensorsStagingBytes / 4) + 1000;
  const Tensor big = arange(0, static_cast<double>(n), 1, DType::F32);
  save_safetensors(dir / "big.safetensors", {{"big", big}});
  const SafetensorsReader r(dir / "big.safetensors");
  EXPECT_EQ(raw(r.read("big", cpu_device())), raw(big));
}

// Two shards and their index, as transformers writes a sharded checkpoint.
void write_sharded(const TempDir& dir, const std::string& index) {
  save_safetensors(dir / "model-00001-of-00002.safetensors", {{"x.weight", ones({2, 2})}, {"y.bias", zeros({2})}});
  save_safetensors(dir / "model-00002-of-00002.safetensors", {{"z.weight", full({3}, 2.0)}});
  write_file(dir / "model.safetensors.index.json", index);
}

const char* kIndex = R"({"metadata": {"total_size": 28},
  "weight_map": {"x.weight": "model-00001-of-00002.safetensors", "y.bias": "model-00001-of-00002.safetensors",
                 "z.weight": "model-00002-of-00002.safetensors"}})";

TEST(SafetensorsCheckpoint, ReadsShardsThroughTheIndex) {
  TempDir dir;
  write_sharded(dir, kIndex);
  const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(dir.path());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"x.weight", "y.bias", "z.weight"}));
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.read("z.weight", cpu_device()).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(c.entry("x.weight").shape, (Shape{2, 2}));
  EXPECT_EQ(c.find("w"), nullptr);
}

TEST(SafetensorsCheckpoint, SingleFile) {
  TempDir dir;
  save_safetensors(dir / "model.safetensors", {{"w", ones({4})}});
  const SafetensorsCheckpoint c = SafetensorsCheckpoint::open(dir.path());
  EXPECT_EQ(c.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(c.read("w", cpu_device()).to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
}

void expect_index_refused(const std::string& index, const std::string& needle) {
  TempDir dir;
  write_sharded(dir, index);
  try {
    SafetensorsCheckpoint::open(dir.path());
    ADD_FAILURE() << "accepted an index that should fail with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SafetensorsCheckpoint, MalformedIndexIsAnErrorNamingIt) {
  expect_index_refused("{", "model.safetensors.index.json");
  expect_index_refused(R"({"metadata": {}})", "no \"weight_map\"");
  expect_index_refused(R"({"weight_map": {}, "extra": 1})", "unknown field \"extra\"");
  expect_index_refused(R"({"weight_map": {"x.weight": 3}})", "must be a file name");
  expect_index_refused(R"({"weight_map": {"x.weight": "../model-00001-of-00002.safetensors"}})",
                       "not a plain file name");
  expect_index_refused(R"({"weight_map": {"x.weight": "missing.safetensors"}})", "missing.safetensors");
  // A shard holding a tensor the index does not list, and a listed tensor its shard lacks.
  expect_index_refused(R"({"weight_map": {"x.weight": "model-00001-of-00002.safetensors",
                                           "z.weight": "model-00002-of-00002.safetensors"}})",
                       "'y.bias', which is not listed");
  expect_index_refused(R"({"weight_map": {"x.weight": "model-00001-of-00002.safetensors",
    "y.bias": "model-00001-of-00002.safetensors", "z.weight": "model-00002-of-00002.safetensors",
    "w.weight": "model-00002-of-00002.safetensors"}})",
                       "'w.weight' is listed in shard");
}

TEST(SafetensorsCheckpoint, EmptyDirectoryIsAnError) {
  TempDir dir;
  EXPECT_THROW(SafetensorsCheckpoint::open(dir.path()), Error);
}

}  // namespace
}  // namespace alk
