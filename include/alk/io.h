// File formats: safetensors checkpoints and atomic file writes.
//
// safetensors (https://github.com/huggingface/safetensors, "Format"):
//   u64 little-endian N | N bytes of UTF-8 JSON header | data buffer
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data buffer) plus an optional "__metadata__" object of string -> string.
//
// What alk writes (deterministic, so the same tensors give the same bytes; the script
// scripts/gen_safetensors_fixture.py writes the same bytes from plain Python):
//   - header JSON without any whitespace; "__metadata__" first (omitted when empty, keys in
//     std::map order = byte order), then the tensors in the caller's order, each as
//     {"dtype":..,"shape":[..],"data_offsets":[b,e]} in that key order;
//   - strings escaped like Python's json.dumps(ensure_ascii=False): '"', '\\' and control
//     characters only, non-ASCII as UTF-8;
//   - the header padded with spaces (0x20) to a multiple of 8 bytes;
//   - tensor data in the caller's order, contiguous row-major, no gaps.
//
// What alk reads: any file following the spec, treated as untrusted. N must fit the file
// and be <= 100 MB; the header must be strict JSON (json.h); dtypes F64 F32 F16 BF16 I64 I32
// U8 BOOL (others are rejected by name); shape product * dtype size == end - begin; the
// tensors must cover the data buffer exactly (no holes, overlaps or trailing bytes); names
// unique; "__metadata__" an object of strings (or null). Any violation is
// alk::Error("safetensors", ...) naming the file, the tensor and the offending values.
// BOOL bytes other than 0 read as true (1).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alk/tensor.h"

namespace alk {

// ---- atomic writes ----

// Writes a file so that readers see either the old contents or the complete new contents:
// data goes to DIR/.NAME.tmp-XXXXXX (same directory, so rename is atomic), which is
// flushed, fsynced, renamed over the target, and the directory is fsynced. A new file gets
// mode 0644; an existing target keeps its mode. If commit() is never reached (an exception,
// a failed write), the destructor removes the temp file and the target is untouched.
// Failures throw alk::Error("write_file", ...) naming the path and the errno text.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path, Loc loc = Loc::current());
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail_errno(const std::string& what, int err);
  void abandon() noexcept;
  std::string path_, temp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
  Loc loc_;
};

// One-shot form of AtomicFile.
void write_file_atomic(const std::string& path, std::string_view bytes, Loc loc = Loc::current());

// The whole file's bytes, or nothing when it cannot be opened or read.
std::optional<std::string> try_read_file(const std::string& path);
// The whole file's bytes; otherwise an alk::Error of `op` naming the path and the reason
// (a file larger than the memory available to this process is refused before reading).
std::string read_file(const std::string& path, const std::string& op = "read_file", Loc loc = Loc::current());

// ---- resource limits ----

// Memory this process can still take: the kernel's MemAvailable, lowered by a cgroup
// memory limit (v2 memory.max or v1 limit_in_bytes, minus current usage) when there is one.
uint64_t available_memory_bytes();
// Refuses, with an alk::Error of `op` naming `what` and both sizes, to go on with work that
// needs `bytes` of memory when less than that is available: a clear error instead of the
// kernel's OOM killer (a file's header can ask for any size).
void check_memory_for(uint64_t bytes, const std::string& op, const std::string& what, Loc loc = Loc::current());

// ---- safetensors ----

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order (sorted by offset)
  std::map<std::string, std::string> metadata;
};

// The parsed and validated header, without reading tensor data (for `alk inspect`).
struct SafetensorsEntry {
  std::string name;
  std::string dtype_tag;  // as in the file: "F32", "BF16", ...
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data buffer
};
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by offset (ties keep header order)
  std::map<std::string, std::string> metadata;
  uint64_t header_bytes = 0;  // N
  uint64_t data_bytes = 0;    // size of the data buffer
};

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Realizes every tensor (lazy, views, broadcasts, any dtype) and writes its contiguous
// row-major bytes; atomic (AtomicFile). Names must be unique and not "__metadata__".
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}, Loc loc = Loc::current());
SafetensorsFile load_safetensors(const std::string& path, Loc loc = Loc::current());
SafetensorsHeader read_safetensors_header(const std::string& path, Loc loc = Loc::current());

// Reads a safetensors file one tensor at a time (a checkpoint larger than host memory loads
// onto a GPU): the header is read and validated once, the file stays open, and each read
// goes from the file into a new buffer on `device` in the file's dtype, through a host
// staging buffer of at most kSafetensorsStagingBytes (on the CPU, straight into the tensor).
inline constexpr size_t kSafetensorsStagingBytes = 16u << 20;
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path, Loc loc = Loc::current());
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;
  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsEntry* find(std::string_view name) const;  // nullptr when absent
  Tensor read(const SafetensorsEntry& entry, Device& device, Loc loc = Loc::current()) const;
  Tensor read(std::string_view name, Device& device, Loc loc = Loc::current()) const;  // absent: an error

 private:
  std::string path_;
  SafetensorsHeader header_;
  std::FILE* file_ = nullptr;
};

// A checkpoint directory's weights as Hugging Face writes them: model.safetensors, or shards
// listed by model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard
// file}}; every shard is a plain file name in the directory, every tensor of a shard is
// listed and every listed tensor is in its shard). Errors name the file and the tensor.
class SafetensorsCheckpoint {
 public:
  static SafetensorsCheckpoint open(const std::string& dir, Loc loc = Loc::current());
  std::vector<std::string> names() const;  // sorted
  const SafetensorsEntry* find(std::string_view name) const;
  const SafetensorsEntry& entry(std::string_view name, Loc loc = Loc::current()) const;
  Tensor read(std::string_view name, Device& device, Loc loc = Loc::current()) const;
  const std::vector<std::string>& files() const { return files_; }  // the file(s) read

 private:
  std::vector<std::string> files_;
  std::vector<SafetensorsReader> readers_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor -> reader
};

// The safetensors dtype tag of an alk dtype ("F32", "BOOL", ...), and back (false if unknown).
std::string_view safetensors_dtype_tag(DType t);
bool safetensors_dtype_from_tag(std::string_view tag, DType* out);

}  // namespace alk
