// safetensors read/write (alk/io.h). The header is validated completely before any
// tensor data is read; data is read straight into each tensor's buffer.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include "alk/io.h"
#include "graph/graph.h"
#include "io/json.h"

namespace alk {

namespace {

constexpr DType kAllDTypes[] = {DType::Bool, DType::U8,   DType::I32, DType::I64,
                                DType::F16,  DType::BF16, DType::F32, DType::F64};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string supported_tags() {
  std::string s;
  for (DType t : kAllDTypes) s += (s.empty() ? "" : " ") + std::string(safetensors_dtype_tag(t));
  return s;
}

// Opens path, checks it is a regular file, and returns it with its size.
FilePtr open_regular(const std::string& path, uint64_t* size, Loc loc) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    int err = errno;
    fail("safetensors", loc, "cannot open ", quoted(path), ": ", std::strerror(err));
  }
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode))
    fail("safetensors", loc, quoted(path), " is not a regular file");
  *size = static_cast<uint64_t>(st.st_size);
  return f;
}

bool read_exact(std::FILE* f, void* out, size_t bytes) { return bytes == 0 || std::fread(out, 1, bytes, f) == bytes; }

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json::Value& v,
                             uint64_t data_bytes, Loc loc) {
  auto bad = [&](const auto&... parts) {
    fail("safetensors", loc, quoted(path), ": tensor ", quoted(name), ": ", parts...);
  };
  if (!v.is_object()) bad("entry must be an object, got ", json::kind_name(v.kind()));
  SafetensorsEntry e;
  e.name = name;
  bool has_dtype = false, has_shape = false, has_offsets = false;
  for (auto& [key, field] : v.as_object()) {
    if (key == "dtype") {
      if (!field.is_string()) bad("\"dtype\" must be a string, got ", json::kind_name(field.kind()));
      e.dtype_tag = field.as_string();
      if (!safetensors_dtype_from_tag(e.dtype_tag, &e.dtype))
        bad("unsupported dtype ", quoted(e.dtype_tag), " (alk reads ", supported_tags(), ")");
      has_dtype = true;
    } else if (key == "shape") {
      if (!field.is_array()) bad("\"shape\" must be an array, got ", json::kind_name(field.kind()));
      for (auto& d : field.as_array()) {
        if (!d.is_int() || d.as_int() < 0) bad("\"shape\" entries must be non-negative integers");
        e.shape.push_back(d.as_int());
      }
      has_shape = true;
    } else if (key == "data_offsets") {
      if (!field.is_array() || field.as_array().size() != 2) bad("\"data_offsets\" must be an array [begin, end]");
      const json::Value &b = field.as_array()[0], &en = field.as_array()[1];
      if (!b.is_int() || !en.is_int() || b.as_int() < 0 || en.as_int() < 0)
        bad("\"data_offsets\" must be non-negative integers");
      e.begin = static_cast<uint64_t>(b.as_int());
      e.end = static_cast<uint64_t>(en.as_int());
      has_offsets = true;
    } else {
      bad("unknown field \"", key, "\" (expected dtype, shape, data_offsets)");
    }
  }
  if (!has_dtype || !has_shape || !has_offsets) bad("needs \"dtype\", \"shape\" and \"data_offsets\"");
  if (e.begin > e.end) bad("data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end > data_bytes)
    bad("data_offsets [", e.begin, ", ", e.end, "] run past the data buffer of ", data_bytes, " bytes");
  // Product of the shape without overflow: anything beyond the buffer is already wrong.
  uint64_t bytes = dtype_size(e.dtype);
  bool overflow = false;
  for (int64_t d : e.shape) overflow = overflow || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
  if (overflow || bytes != e.end - e.begin)
    bad("shape ", to_string(e.shape), " of ", e.dtype_tag, " needs ",
        overflow ? std::string("more than 2^64") : std::to_string(bytes), " bytes but data_offsets [", e.begin, ", ",
        e.end, "] hold ", e.end - e.begin);
  int64_t span = 1;  // with a 0 dim the strides are still products of the others
  for (int64_t d : e.shape)
    if (d != 0 && __builtin_mul_overflow(span, d, &span)) bad("shape ", to_string(e.shape), " overflows 64-bit strides");
  return e;
}

SafetensorsHeader read_header(std::FILE* f, const std::string& path, uint64_t file_size, Loc loc) {
  auto bad = [&](const auto&... parts) { fail("safetensors", loc, quoted(path), ": ", parts...); };
  if (file_size < 8) bad("file has ", file_size, " bytes, fewer than the 8-byte header length");
  unsigned char len_bytes[8];
  if (!read_exact(f, len_bytes, 8)) bad("cannot read the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kSafetensorsMaxHeader) bad("header length ", n, " exceeds the limit of ", kSafetensorsMaxHeader, " bytes");
  if (n > file_size - 8) bad("header length ", n, " exceeds the ", file_size - 8, " bytes after the length field");
  std::string text(n, '\0');
  if (!read_exact(f, text.data(), n)) bad("cannot read the ", n, "-byte header");

  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_bytes = file_size - 8 - n;
  json::Value root;
  try {
    root = json::parse(text, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    bad("header is not valid JSON: ", e.detail());
  }
  if (!root.is_object()) bad("header must be a JSON object, got ", json::kind_name(root.kind()));
  for (auto& [key, v] : root.as_object()) {
    if (key == "__metadata__") {
      if (v.is_null()) continue;  // Python writers may emit null for "no metadata"
      if (!v.is_object()) bad("\"__metadata__\" must be an object, got ", json::kind_name(v.kind()));
      for (auto& [mk, mv] : v.as_object()) {
        if (!mv.is_string()) bad("metadata ", quoted(mk), " must be a string, got ", json::kind_name(mv.kind()));
        h.metadata[mk] = mv.as_string();
      }
      continue;
    }
    h.entries.push_back(parse_entry(path, key, v, h.data_bytes, loc));
  }
  // JSON keys are unique (the parser rejects duplicates), so names are unique here.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const SafetensorsEntry* prev = nullptr;
  for (auto& e : h.entries) {
    if (e.begin < covered)
      bad("tensor ", quoted(e.name), " data_offsets [", e.begin, ", ", e.end, "] overlap tensor ", quoted(prev->name),
          " [", prev->begin, ", ", prev->end, "]");
    if (e.begin > covered)
      bad("hole in the data buffer: bytes [", covered, ", ", e.begin, ") before tensor ", quoted(e.name),
          " belong to no tensor");
    covered = e.end;
    prev = &e;
  }
  if (covered != h.data_bytes)
    bad("hole in the data buffer: bytes [", covered, ", ", h.data_bytes, ") at the end belong to no tensor");
  return h;
}

}  // namespace

std::string_view safetensors_dtype_tag(DType t) {
  switch (t) {
    case DType::Bool:
      return "BOOL";
    case DType::U8:
      return "U8";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
  }
  return "?";
}

bool safetensors_dtype_from_tag(std::string_view tag, DType* out) {
  for (DType t : kAllDTypes)
    if (safetensors_dtype_tag(t) == tag) {
      *out = t;
      return true;
    }
  return false;
}

SafetensorsHeader read_safetensors_header(const std::string& path, Loc loc) {
  uint64_t size = 0;
  FilePtr f = open_regular(path, &size, loc);
  return read_header(f.get(), path, size, loc);
}

SafetensorsFile load_safetensors(const std::string& path, Loc loc) {
  uint64_t size = 0;
  FilePtr f = open_regular(path, &size, loc);
  SafetensorsHeader h = read_header(f.get(), path, size, loc);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  check_memory_for(h.data_bytes, "safetensors", quoted(path) + "'s tensors", loc);  // a sparse file can claim any size
  // The entries tile the data buffer in order, so the data is read sequentially.
  for (auto& e : h.entries) {
    // Read on the host, then handed to the CPU device (files carry no device; `to` moves them).
    size_t bytes = static_cast<size_t>(e.end - e.begin);
    std::vector<unsigned char> host(bytes);
    if (bytes && !read_exact(f.get(), host.data(), bytes))
      fail("safetensors", loc, quoted(path), ": tensor ", quoted(e.name), ": cannot read ", bytes,
           " bytes at data offset ", e.begin, " (file changed while reading?)");
    if (e.dtype == DType::Bool)
      for (unsigned char& c : host) c = c != 0;
    out.tensors.emplace_back(e.name, tensor_from_host(host.data(), e.shape, e.dtype, cpu_device()));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata, Loc loc) {
  std::set<std::string_view> names;
  std::vector<Tensor> data;
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : tensors) {
      check(name != "__metadata__", "safetensors", loc, "cannot save ", quoted(path),
            ": \"__metadata__\" is reserved and cannot name a tensor");
      check(names.insert(name).second, "safetensors", loc, "cannot save ", quoted(path), ": duplicate tensor name ",
            quoted(name));
      check(t.defined(), "safetensors", loc, "cannot save ", quoted(path), ": tensor ", quoted(name), " is undefined");
      data.push_back(t);
    }
    realize(data);  // one schedule for all of them
  }

  json::Object root;
  if (!metadata.empty()) {
    json::Object meta;
    for (auto& [k, v] : metadata) meta.emplace_back(k, json::Value(v));
    root.emplace_back("__metadata__", json::Value(std::move(meta)));
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = data[i];
    json::Array shape;
    for (int64_t d : t.shape()) shape.emplace_back(d);
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    json::Object entry;
    entry.emplace_back("dtype", json::Value(safetensors_dtype_tag(t.dtype())));
    entry.emplace_back("shape", json::Value(std::move(shape)));
    entry.emplace_back("data_offsets", json::Value(json::Array{json::Value(offset), json::Value(offset + bytes)}));
    root.emplace_back(tensors[i].first, json::Value(std::move(entry)));
    offset += bytes;
  }
  std::string header = json::dump(json::Value(std::move(root)), -1, loc);
  header.append((8 - header.size() % 8) % 8, ' ');

  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i)
    len_bytes[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  AtomicFile file(path, loc);
  file.write(len_bytes, 8);
  file.write(header);
  for (const Tensor& t : data) {
    const std::vector<unsigned char> bytes = host_bytes(t);
    if (!bytes.empty()) file.write(bytes.data(), bytes.size());
  }
  file.commit();
}

}  // namespace alk

// ---- one tensor at a time: SafetensorsReader, SafetensorsCheckpoint ----

namespace alk {

SafetensorsReader::SafetensorsReader(std::string path, Loc loc) : path_(std::move(path)) {
  uint64_t size = 0;
  FilePtr f = open_regular(path_, &size, loc);
  header_ = read_header(f.get(), path_, size, loc);
  file_ = f.release();
}

SafetensorsReader::~SafetensorsReader() {
  if (file_) std::fclose(file_);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)), header_(std::move(o.header_)), file_(std::exchange(o.file_, nullptr)) {}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& o) noexcept {
  if (this != &o) {
    if (file_) std::fclose(file_);
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
    file_ = std::exchange(o.file_, nullptr);
  }
  return *this;
}

const SafetensorsEntry* SafetensorsReader::find(std::string_view name) const {
  for (const SafetensorsEntry& e : header_.entries)
    if (e.name == name) return &e;
  return nullptr;
}

Tensor SafetensorsReader::read(std::string_view name, Device& device, Loc loc) const {
  const SafetensorsEntry* e = find(name);
  check(e != nullptr, "safetensors", loc, quoted(path_), " has no tensor ", quoted(name));
  return read(*e, device, loc);
}

Tensor SafetensorsReader::read(const SafetensorsEntry& e, Device& device, Loc loc) const {
  check(file_ != nullptr, "safetensors", loc, quoted(path_), ": the reader was moved from");
  const uint64_t at = 8 + header_.header_bytes + e.begin;
  const size_t bytes = static_cast<size_t>(e.end - e.begin);
  Tensor t = make_buffer_tensor(e.shape, e.dtype, device);
  if (bytes == 0) return t;
  const Buffer& buffer = *t.impl()->node->buffer;
  auto failed = [&](size_t done) {
    fail("safetensors", loc, quoted(path_), ": tensor ", quoted(e.name), ": cannot read ", bytes,
         " bytes at data offset ", e.begin, " (", done, " read; file changed while reading?)");
  };
  if (::fseeko(file_, static_cast<off_t>(at), SEEK_SET) != 0) failed(0);
  // The CPU's buffers are host memory: the file is read into the tensor itself.
  unsigned char* direct =
      device.info().kind == "cpu" ? static_cast<unsigned char*>(device.address(buffer, 0, loc)) : nullptr;
  std::vector<unsigned char> staging(direct ? 0 : std::min(bytes, kSafetensorsStagingBytes));
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, direct ? bytes : staging.size());
    unsigned char* into = direct ? direct + done : staging.data();
    if (!read_exact(file_, into, n)) failed(done);
    if (e.dtype == DType::Bool)
      for (size_t i = 0; i < n; ++i) into[i] = into[i] != 0;
    if (!direct) device.upload(buffer, done, into, n);
    done += n;
  }
  return t;
}

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& dir, Loc loc) {
  SafetensorsCheckpoint c;
  const std::string single = dir + "/model.safetensors", index_path = dir + "/model.safetensors.index.json";
  struct stat st {};
  const bool has_index = ::stat(index_path.c_str(), &st) == 0;
  if (!has_index) {
    check(::stat(single.c_str(), &st) == 0, "safetensors", loc, "no weights in ", quoted(dir),
          ": neither model.safetensors nor model.safetensors.index.json");
    c.files_.push_back(single);
    c.readers_.emplace_back(single, loc);
    for (const SafetensorsEntry& e : c.readers_[0].header().entries) c.where_.emplace(e.name, 0);
    return c;
  }
  auto bad = [&](const auto&... parts) { fail("safetensors", loc, quoted(index_path), ": ", parts...); };
  const std::string text = read_file(index_path, "safetensors", loc);
  json::Value root;
  try {
    root = json::parse(text, json::kDefaultMaxDepth, loc);
  } catch (const Error& e) {
    bad("not valid JSON: ", e.detail());
  }
  if (!root.is_object()) bad("must be a JSON object, got ", json::kind_name(root.kind()));
  const json::Value* map = nullptr;
  for (auto& [key, v] : root.as_object()) {
    if (key == "weight_map") map = &v;
    else if (key != "metadata") bad("unknown field \"", key, "\" (expected metadata, weight_map)");
  }
  if (!map) bad("has no \"weight_map\"");
  if (!map->is_object()) bad("\"weight_map\" must be an object, got ", json::kind_name(map->kind()));
  std::map<std::string, size_t> shard_of_file;
  std::map<std::string, std::string> listed;  // tensor -> file
  for (auto& [name, v] : map->as_object()) {
    if (!v.is_string()) bad("tensor ", quoted(name), ": the shard must be a file name, got ", json::kind_name(v.kind()));
    const std::string& file = v.as_string();
    // A shard is a file beside the index: no directories, so an index cannot reach elsewhere.
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
        file == "." || file == "..")
      bad("tensor ", quoted(name), ": shard ", quoted(file), " is not a plain file name");
    listed.emplace(name, file);
    if (shard_of_file.count(file)) continue;
    shard_of_file.emplace(file, c.readers_.size());
    c.files_.push_back(dir + "/" + file);
    c.readers_.emplace_back(dir + "/" + file, loc);
  }
  if (listed.empty()) bad("\"weight_map\" lists no tensors");
  for (auto& [file, i] : shard_of_file)
    for (const SafetensorsEntry& e : c.readers_[i].header().entries) {
      auto it = listed.find(e.name);
      if (it == listed.end()) bad("shard ", quoted(file), " holds tensor ", quoted(e.name), ", which is not listed");
      if (it->second != file)
        bad("tensor ", quoted(e.name), " is listed in ", quoted(it->second), " but also stored in ", quoted(file));
      c.where_.emplace(e.name, i);
    }
  for (auto& [name, file] : listed)
    if (!c.where_.count(name)) bad("tensor ", quoted(name), " is listed in shard ", quoted(file), ", which lacks it");
  return c;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsEntry* SafetensorsCheckpoint::find(std::string_view name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : readers_[it->second].find(name);
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(std::string_view name, Loc loc) const {
  const SafetensorsEntry* e = find(name);
  check(e != nullptr, "safetensors", loc, "the checkpoint (", files_.empty() ? "" : files_[0], files_.size() > 1 ? ", ..." : "",
        ") has no tensor ", quoted(name));
  return *e;
}

Tensor SafetensorsCheckpoint::read(std::string_view name, Device& device, Loc loc) const {
  const SafetensorsEntry& e = entry(name, loc);
  return readers_[where_.find(name)->second].read(e, device, loc);
}

}  // namespace alk
