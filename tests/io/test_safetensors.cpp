// safetensors save/load: round trips, the Python-made reference file, malformed input, fuzz.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "alk/alk.h"
#include "alk/io.h"
#include "error_expect.h"
#include "graph/graph.h"
#include "io/temp_dir.h"

#ifndef ALK_SOURCE_DIR
#define ALK_SOURCE_DIR "."
#endif

namespace alk {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

// The contiguous row-major bytes of t (bit patterns, for f16/bf16 too).
std::string raw(const Tensor& t) {
  const std::vector<unsigned char> bytes = host_bytes(t);
  return std::string(bytes.begin(), bytes.end());
}

Tensor from_u16_bits(const std::vector<uint16_t>& bits, Shape shape, DType dtype) {
  return from_bytes(bits.data(), bits.size() * 2, std::move(shape), dtype);
}

// A file: u64 N, header (not padded), data.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "safetensors");
    return e.detail();
  }
  return "";
}

TEST(Safetensors, RoundTripsEveryDtypeBitExact) {
  TempDir dir;
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (int i = 0; i < kNumDTypes; ++i) {
    auto dt = static_cast<DType>(i);
    Shape shape{3, 5};
    std::string bytes(15 * dtype_size(dt), '\0');
    for (char& c : bytes) c = static_cast<char>(dt == DType::Bool ? rng() % 2 : rng());
    tensors.emplace_back(std::string(dtype_name(dt)), from_bytes(bytes.data(), bytes.size(), shape, dt));
  }
  // Special f16/bf16 patterns: signed zero, subnormals, infinities, NaN payloads.
  tensors.emplace_back("f16_special",
                       from_u16_bits({0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E01, 0x7BFF}, {7}, DType::F16));
  tensors.emplace_back("bf16_special",
                       from_u16_bits({0x8000, 0x0001, 0x007F, 0x7F80, 0xFF80, 0x7FC1, 0x7F7F}, {7}, DType::BF16));
  std::string path = dir / "all.safetensors";
  save_safetensors(path, tensors);
  SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  EXPECT_TRUE(f.metadata.empty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);
    EXPECT_EQ(f.tensors[i].second.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(f.tensors[i].second.shape(), tensors[i].second.shape());
    EXPECT_EQ(raw(f.tensors[i].second), raw(tensors[i].second));
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"all.safetensors"});  // no temp file left
}

TEST(Safetensors, SavesViewsLazyAndBroadcastTensors) {
  TempDir dir;
  Tensor x = arange(24).reshape({2, 3, 4});
  Tensor h = from_u16_bits({0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600}, {2, 3}, DType::F16);
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"permuted", x.permute({2, 0, 1})},
      {"sliced", x.slice(2, 1, 4, 2).select(0, 1)},
      {"offset_rows", x.reshape({6, 4}).slice(0, 2, 5)},  // contiguous, nonzero offset
      {"lazy", x.to(DType::F32) * 0.5 + 1},
      {"broadcast", tensor(std::vector<float>{1, 2, 3}, {3}).expand({2, 3})},
      {"f16_transposed", h.t()},
  };
  std::string path = dir / "views.safetensors";
  save_safetensors(path, tensors);
  SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    const Tensor& got = f.tensors[i].second;
    EXPECT_EQ(f.tensors[i].first, tensors[i].first);
    EXPECT_EQ(got.shape(), tensors[i].second.shape());
    EXPECT_EQ(got.dtype(), tensors[i].second.dtype());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_EQ(got.to_vector<double>(), tensors[i].second.to_vector<double>());
  }
  EXPECT_EQ(f.tensors[0].second.to_vector<int64_t>()[0], 0);
  EXPECT_EQ(f.tensors[0].second.to_vector<int64_t>()[1], 4);  // permuted: element [0,0,1] is x[0,1,0]
  EXPECT_EQ(raw(f.tensors[5].second), raw(h.t()));
}

TEST(Safetensors, EmptyAndZeroDimTensors) {
  TempDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"scalar", scalar_tensor(3.5)},
      {"empty", zeros({0, 3})},
      {"int_scalar", full({}, 7, DType::I32)},
      {"empty_1d", from_bytes(nullptr, 0, {0}, DType::I64)},
      {"after", tensor(std::vector<int32_t>{1, 2}, {2})},
  };
  std::string path = dir / "small.safetensors";
  save_safetensors(path, tensors);
  SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(f.tensors[0].second.shape(), Shape{});
  EXPECT_EQ(f.tensors[0].second.item(), 3.5);
  EXPECT_EQ(f.tensors[1].second.shape(), (Shape{0, 3}));
  EXPECT_EQ(f.tensors[1].second.numel(), 0);
  EXPECT_EQ(f.tensors[2].second.dtype(), DType::I32);
  EXPECT_EQ(f.tensors[2].second.item(), 7);
  EXPECT_EQ(f.tensors[3].second.shape(), Shape{0});
  EXPECT_EQ(f.tensors[4].second.to_vector<int32_t>(), (std::vector<int32_t>{1, 2}));
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(f.tensors[i].first, tensors[i].first);

  save_safetensors(dir / "none.safetensors", {});
  EXPECT_TRUE(load_safetensors(dir / "none.safetensors").tensors.empty());
  EXPECT_EQ(read_file(dir / "none.safetensors"), make_file("{}      ", ""));
}

TEST(Safetensors, MetadataAndOrder) {
  TempDir dir;
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"step", "1200"}, {"quote\"d", "line\nbreak \xC3\xA9 \xF0\x9F\x98\x80"}, {"", ""}};
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"z", ones({2})}, {"a", zeros({1})}, {"m.weight", ones({2, 2}, DType::F64)}};
  std::string path = dir / "meta.safetensors";
  save_safetensors(path, tensors, meta);
  SafetensorsFile f = load_safetensors(path);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors[0].first, "z");
  EXPECT_EQ(f.tensors[1].first, "a");
  EXPECT_EQ(f.tensors[2].first, "m.weight");
  // The header is padded to a multiple of 8 and starts with the metadata.
  std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.substr(8, 16), "{\"__metadata__\":");
}

TEST(Safetensors, HeaderPaddingForEveryLength) {
  TempDir dir;
  for (int len = 1; len <= 9; ++len) {
    std::string path = dir / "p.safetensors";
    save_safetensors(path, {{std::string(static_cast<size_t>(len), 'n'), ones({1})}});
    std::string bytes = read_file(path);
    uint64_t n = static_cast<unsigned char>(bytes[0]);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + n + 4);
    EXPECT_EQ(load_safetensors(path).tensors[0].first.size(), static_cast<size_t>(len));
  }
}

// tests/fixtures/safetensors/reference.safetensors comes from scripts/gen_safetensors_fixture.py,
// an independent byte-by-byte writer in plain Python.
std::vector<std::pair<std::string, Tensor>> reference_tensors() {
  return {
      {"weight", tensor(std::vector<float>{1.5f, -2.0f, 0.25f, 1024.0f, -0.0f, 3.0f}, {2, 3})},
      {"bias", tensor(std::vector<double>{0.1, -1e300, 5e-324}, {3})},
      {"half", from_u16_bits({0x3C00, 0xC000, 0x7C00, 0x0001}, {4}, DType::F16)},
      {"brain", from_u16_bits({0x3F80, 0xC040, 0xFF80, 0x0001}, {2, 2}, DType::BF16)},
      {"ids", tensor(std::vector<int64_t>{-1, int64_t{1} << 40}, {2})},
      {"counts", tensor(std::vector<int32_t>{7, -8, 2147483647}, {3})},
      {"pixels", tensor(std::vector<uint8_t>{0, 255, 17, 128}, {2, 2})},
      {"mask", tensor(std::vector<uint8_t>{1, 0, 1}, {3}, DType::Bool)},
      {"scalar", scalar_tensor(42.0)},
      {"empty", zeros({0, 4})},
  };
}
const std::map<std::string, std::string> kReferenceMetadata = {{"format", "pt"},
                                                               {"note", "h\xC3\xA9llo \"quoted\"\n\ttab"}};
const std::string kReferencePath = ALK_SOURCE_DIR "/tests/fixtures/safetensors/reference.safetensors";

TEST(Safetensors, ReadsPythonReferenceFile) {
  SafetensorsFile f = load_safetensors(kReferencePath);
  auto want = reference_tensors();
  EXPECT_EQ(f.metadata, kReferenceMetadata);
  ASSERT_EQ(f.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    EXPECT_EQ(f.tensors[i].first, want[i].first);
    EXPECT_EQ(f.tensors[i].second.dtype(), want[i].second.dtype());
    EXPECT_EQ(f.tensors[i].second.shape(), want[i].second.shape());
    EXPECT_EQ(raw(f.tensors[i].second), raw(want[i].second));
  }
  EXPECT_EQ(f.tensors[0].second.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 0.25f, 1024.0f, -0.0f, 3.0f}));
  EXPECT_EQ(f.tensors[2].second.to_vector<float>()[1], -2.0f);
  EXPECT_EQ(f.tensors[3].second.to_vector<float>()[1], -3.0f);
  EXPECT_EQ(f.tensors[8].second.item(), 42.0);
}

TEST(Safetensors, WritesTheSameBytesAsThePythonReference) {
  TempDir dir;
  std::string path = dir / "ours.safetensors";
  save_safetensors(path, reference_tensors(), kReferenceMetadata);
  std::string ours = read_file(path), theirs = read_file(kReferencePath);
  ASSERT_FALSE(theirs.empty()) << kReferencePath;
  EXPECT_EQ(ours, theirs);
}

TEST(Safetensors, HeaderOnlyRead) {
  SafetensorsHeader h = read_safetensors_header(kReferencePath);
  ASSERT_EQ(h.entries.size(), 10u);
  EXPECT_EQ(h.entries[1].name, "bias");
  EXPECT_EQ(h.entries[1].dtype_tag, "F64");
  EXPECT_EQ(h.entries[1].begin, 24u);
  EXPECT_EQ(h.entries[1].end, 48u);
  EXPECT_EQ(h.header_bytes % 8, 0u);
  EXPECT_EQ(h.data_bytes, 24u + 24 + 8 + 8 + 16 + 12 + 4 + 3 + 4);
}

TEST(Safetensors, SaveRejectsBadNames) {
  TempDir dir;
  std::string path = dir / "bad.safetensors";
  EXPECT_ALK_ERROR(save_safetensors(path, {{"a", ones({1})}, {"a", ones({1})}}), "safetensors", "duplicate tensor name 'a'");
  EXPECT_ALK_ERROR(save_safetensors(path, {{"__metadata__", ones({1})}}), "safetensors", "__metadata__", "reserved");
  EXPECT_ALK_ERROR(save_safetensors(path, {{"a", Tensor()}}), "safetensors", "'a' is undefined");
  EXPECT_TRUE(dir.list().empty());
}

TEST(Safetensors, RejectsMalformedFiles) {
  TempDir dir;
  const std::string f32x2 = std::string(8, '\1');
  struct Case {
    std::string name, bytes, message;
  };
  std::vector<Case> cases = {
      {"short", "\x05\0\0", "fewer than the 8-byte header length"},
      {"len_past_end", make_file("{}", "").substr(0, 8) + "{", "header length 2 exceeds the 1 bytes"},
      {"len_over_cap", std::string("\x00\xc2\xeb\x0b\x00\x00\x00\x00", 8) + "{}",
       "header length 200000000 exceeds the limit of 100000000"},
      {"bad_json", make_file("{\"a\":", ""), "header is not valid JSON: expected a value at byte 5"},
      {"not_object", make_file("[]", ""), "header must be a JSON object, got array"},
      {"unknown_dtype", make_file(R"({"w":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}})", "ab"),
       "tensor 'w': unsupported dtype 'I16'"},
      {"size_mismatch", make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2),
       "tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8"},
      {"past_buffer", make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32x2),
       "tensor 'w': data_offsets [0, 16] run past the data buffer of 8 bytes"},
      {"reversed", make_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[5,3]}})", f32x2),
       "tensor 'w': data_offsets [5, 3] end before they begin"},
      {"overlap",
       make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           f32x2),
       "tensor 'b' data_offsets [4, 8] overlap tensor 'a' [0, 8]"},
      {"hole",
       make_file(
           R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
           f32x2),
       "hole in the data buffer: bytes [2, 6) before tensor 'b'"},
      {"trailing", make_file(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", f32x2),
       "hole in the data buffer: bytes [2, 8) at the end"},
      {"duplicate",
       make_file(
           R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
           f32x2),
       "duplicate key \"a\""},
      {"meta_not_string", make_file(R"({"__metadata__":{"step":12}})", ""),
       "metadata 'step' must be a string, got integer"},
      {"meta_not_object", make_file(R"({"__metadata__":"x"})", ""), "\"__metadata__\" must be an object"},
      {"negative_dim", make_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""),
       "tensor 'w': \"shape\" entries must be non-negative integers"},
      {"float_offset", make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}})", "a"),
       "\"data_offsets\" must be non-negative integers"},
      {"missing_field", make_file(R"({"w":{"dtype":"U8","shape":[1]}})", "a"),
       "needs \"dtype\", \"shape\" and \"data_offsets\""},
      {"unknown_field", make_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", "a"),
       "unknown field \"x\""},
      {"entry_not_object", make_file(R"({"w":[1]})", ""), "tensor 'w': entry must be an object, got array"},
      {"shape_overflow",
       make_file(R"({"w":{"dtype":"F64","shape":[1099511627776,1099511627776,1099511627776],"data_offsets":[0,8]}})",
                 f32x2),
       "needs more than 2^64 bytes"},
      {"shape_wraps_to_size",  // 2^61 * 8 wraps to 0 in 64 bits: must not be taken as 0 bytes
       make_file(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", ""),
       "needs more than 2^64 bytes"},
      {"bad_utf8_name", make_file("{\"\xff\":{}}", ""), "invalid UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string path = dir / (c.name + ".safetensors");
    write_file(path, c.bytes);
    std::string err = load_error(path);
    EXPECT_NE(err.find(c.message), std::string::npos) << "error: " << err;
    EXPECT_NE(err.find(path), std::string::npos) << "error does not name the file: " << err;
  }
  EXPECT_NE(load_error(dir / "missing.safetensors").find("No such file or directory"), std::string::npos);
  EXPECT_NE(load_error(dir.path()).find("is not a regular file"), std::string::npos);
}

TEST(Safetensors, ReadsValidHandWrittenVariants) {
  TempDir dir;
  // Whitespace in the header, tensors listed out of offset order, empty tensor between two.
  std::string header =
      R"( { "b" : {"dtype":"U8","shape":[2],"data_offsets":[2,4]}, "e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
      R"( "a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]} } )";
  std::string path = dir / "v.safetensors";
  write_file(path, make_file(header, std::string("\x00\x07\x05\x06", 4)));
  SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.tensors[0].first, "a");
  EXPECT_EQ(f.tensors[1].first, "e");
  EXPECT_EQ(f.tensors[2].first, "b");
  EXPECT_EQ(f.tensors[0].second.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1}));  // bool byte 7 reads as 1
  EXPECT_EQ(f.tensors[2].second.to_vector<uint8_t>(), (std::vector<uint8_t>{5, 6}));
  write_file(path, make_file(R"({"__metadata__":null})", ""));
  EXPECT_TRUE(load_safetensors(path).metadata.empty());
}

// Random byte flips and truncations of a valid file: every outcome is a clean load or an
// alk::Error, never a crash, hang or over-read (run under ALK_SANITIZE=ON to check the last).
TEST(Safetensors, FuzzMutationsNeverCrash) {
  TempDir dir;
  const std::string valid = read_file(kReferencePath);
  ASSERT_GT(valid.size(), 100u);
  uint64_t header_end = 8 + static_cast<unsigned char>(valid[0]) + 256u * static_cast<unsigned char>(valid[1]);
  std::mt19937_64 rng(20240601);
  std::string path = dir / "fuzz.safetensors";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = valid;
    int mode = static_cast<int>(rng() % 4);
    if (mode == 0 || mode == 3) {  // flip 1-4 bytes, mostly inside the header
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        size_t at = rng() % 4 ? rng() % header_end : rng() % bytes.size();
        bytes[at] = static_cast<char>(rng() % 3 == 0 ? bytes[at] ^ (1 << (rng() % 8)) : static_cast<char>(rng()));
      }
    }
    if (mode == 1 || mode == 3) bytes.resize(rng() % bytes.size());  // truncate
    if (mode == 2) {                                                 // replace a digit in the header
      size_t at = 8 + rng() % (header_end - 8);
      if (bytes[at] >= '0' && bytes[at] <= '9')
        bytes[at] = static_cast<char>('0' + rng() % 10);
      else
        bytes[at] = "{}[],:\" 0-9eE.\\u"[rng() % 16];
    }
    // Overwritten in place, then cut to size: truncating to 0 makes ext4 flush the file on
    // every close (auto_da_alloc), which costs milliseconds per iteration.
    ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes.size())), 0);
    try {
      SafetensorsFile f = load_safetensors(path);
      for (auto& [name, t] : f.tensors) t.realize();
      ++loaded;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": not an alk::Error: " << e.what();
    }
  }
  ::close(fd);
  RecordProperty("loaded", loaded);
  EXPECT_EQ(loaded + rejected, 2000);
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(loaded, 10);  // mutations in the data buffer still load
}

}  // namespace
}  // namespace alk
