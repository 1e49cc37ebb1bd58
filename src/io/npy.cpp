// .npy read and write (include/alk/npy.h). The header dict is parsed strictly: exactly the
// three keys NumPy writes, each once, with the value forms NumPy writes.
#include "alk/npy.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "alk/io.h"
#include "graph/graph.h"

namespace alk {

namespace {

constexpr int kMaxDims = 16;

struct NpyDtype {
  DType dtype;
  size_t file_size;   // bytes per element in the file
  bool from_i8 = false;  // |i1 widened to i32
};

bool parse_descr(std::string_view d, NpyDtype* out, bool* big_endian) {
  if (d.size() != 3) return false;
  const char order = d[0];
  *big_endian = order == '>';
  const std::string_view code = d.substr(1);
  const bool one_byte = code == "i1" || code == "u1" || code == "b1";
  if (one_byte ? (order != '|' && order != '<' && order != '>') : (order != '<' && order != '>')) return false;
  if (code == "f2") *out = {DType::F16, 2};
  else if (code == "f4") *out = {DType::F32, 4};
  else if (code == "f8") *out = {DType::F64, 8};
  else if (code == "i4") *out = {DType::I32, 4};
  else if (code == "i8") *out = {DType::I64, 8};
  else if (code == "u1") *out = {DType::U8, 1};
  else if (code == "b1") *out = {DType::Bool, 1};
  else if (code == "i1") *out = {DType::I32, 1, true};
  else return false;
  return true;
}

// A tiny cursor over the header dict.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
  }
  bool eat(char c) {
    skip_ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool quoted(std::string* out) {
    skip_ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return false;
    const char q = s[i++];
    const size_t start = i;
    while (i < s.size() && s[i] != q) ++i;
    if (i >= s.size()) return false;
    *out = std::string(s.substr(start, i - start));
    ++i;
    return true;
  }
  bool word(std::string_view w) {
    skip_ws();
    if (s.substr(i, w.size()) != w) return false;
    i += w.size();
    return true;
  }
  bool integer(int64_t* out) {
    skip_ws();
    size_t start = i;
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      v = v * 10 + (s[i] - '0');
      ++i;
    }
    if (i < s.size() && s[i] == 'L') ++i;  // Python 2 longs
    *out = v;
    return i > start;
  }
};

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& what, Loc loc) {
  static constexpr std::string_view kMagic = "\x93NUMPY";
  check(bytes.size() >= 10 && bytes.substr(0, 6) == kMagic, "npy", loc, what, ": not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  check(major >= 1 && major <= 3, "npy", loc, what, ": unsupported .npy version ", major);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else {
    check(bytes.size() >= 12, "npy", loc, what, ": truncated header length");
    for (int k = 3; k >= 0; --k) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + k]);
    header_start = 12;
  }
  check(header_len <= bytes.size() - header_start, "npy", loc, what, ": header of ", header_len,
        " bytes runs past the end of the file (", bytes.size(), " bytes)");
  Cursor c{bytes.substr(header_start, header_len)};
  NpyDtype dt{DType::F32, 4};
  bool big_endian = false, fortran = false, have_descr = false, have_order = false, have_shape = false;
  Shape shape;
  check(c.eat('{'), "npy", loc, what, ": header is not a dict");
  while (!c.eat('}')) {
    std::string key;
    check(c.quoted(&key) && c.eat(':'), "npy", loc, what, ": malformed header dict");
    if (key == "descr" && !have_descr) {
      std::string d;
      check(c.quoted(&d), "npy", loc, what, ": descr is not a string");
      check(parse_descr(d, &dt, &big_endian), "npy", loc, what, ": unsupported dtype '", d,
            "' (supported: f2 f4 f8 i1 u1 i4 i8 b1)");
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      if (c.word("True")) fortran = true;
      else check(c.word("False"), "npy", loc, what, ": fortran_order is not True/False");
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      check(c.eat('('), "npy", loc, what, ": shape is not a tuple");
      while (!c.eat(')')) {
        int64_t d = 0;
        check(c.integer(&d), "npy", loc, what, ": shape holds a non-integer or too large dim");
        check(static_cast<int>(shape.size()) < kMaxDims, "npy", loc, what, ": more than ", kMaxDims, " dims");
        shape.push_back(d);
        if (!c.eat(',')) {
          check(c.eat(')'), "npy", loc, what, ": malformed shape tuple");
          break;
        }
      }
      have_shape = true;
    } else {
      fail("npy", loc, what, ": unexpected or repeated header key '", key, "'");
    }
    if (!c.eat(',')) {
      check(c.eat('}'), "npy", loc, what, ": malformed header dict");
      break;
    }
  }
  check(have_descr && have_order && have_shape, "npy", loc, what, ": header lacks descr, fortran_order or shape");
  // The element count, checked against the bytes that are there before anything is allocated.
  const size_t data_bytes = bytes.size() - header_start - header_len;
  uint64_t count = 1;
  bool zero = false;
  for (int64_t d : shape) zero = zero || d == 0;
  for (int64_t d : shape) {
    if (zero) break;
    check(count <= data_bytes / static_cast<uint64_t>(d), "npy", loc, what, ": shape ", to_string(shape),
          " needs more data than the file's ", data_bytes, " bytes");
    count *= static_cast<uint64_t>(d);
  }
  if (zero) count = 0;
  check(count * dt.file_size == data_bytes, "npy", loc, what, ": shape ", to_string(shape), " of ", dt.file_size,
        "-byte elements needs ", count * dt.file_size, " data bytes, the file has ", data_bytes);
  std::string data(bytes.substr(header_start + header_len));
  if (big_endian && dt.file_size > 1)
    for (size_t e = 0; e < count; ++e)
      for (size_t k = 0; k < dt.file_size / 2; ++k) std::swap(data[e * dt.file_size + k], data[e * dt.file_size + dt.file_size - 1 - k]);
  if (dt.dtype == DType::Bool)
    for (char& b : data) b = b != 0;
  Tensor t;
  if (dt.from_i8) {
    std::vector<int32_t> wide(count);
    for (size_t e = 0; e < count; ++e) wide[e] = static_cast<int8_t>(data[e]);
    Shape s = shape;
    t = from_bytes(wide.data(), wide.size() * 4, s, DType::I32, loc);
  } else {
    Shape s = shape;
    if (fortran) std::reverse(s.begin(), s.end());
    t = from_bytes(data.data(), data.size(), s, dt.dtype, loc);
  }
  if (fortran && !dt.from_i8 && shape.size() > 1) {
    std::vector<int64_t> perm(shape.size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(perm.size() - 1 - k);
    t = t.permute(perm).contiguous();
  } else if (fortran && dt.from_i8 && shape.size() > 1) {
    fail("npy", loc, what, ": Fortran-order i1 arrays are not supported");
  }
  return t;
}

Tensor load_npy(const std::string& path, Loc loc) { return parse_npy(read_file(path, "npy", loc), path, loc); }

std::string npy_bytes(const Tensor& t0, Loc loc) {
  check(t0.defined(), "npy", loc, "cannot write an undefined tensor");
  Tensor t = t0.dtype() == DType::BF16 ? t0.to(DType::F32) : t0;
  std::string descr;
  switch (t.dtype()) {
    case DType::Bool: descr = "|b1"; break;
    case DType::U8: descr = "|u1"; break;
    case DType::I32: descr = "<i4"; break;
    case DType::I64: descr = "<i8"; break;
    case DType::F16: descr = "<f2"; break;
    case DType::F32: descr = "<f4"; break;
    case DType::F64: descr = "<f8"; break;
    default: fail("npy", loc, "dtype ", dtype_name(t.dtype()), " has no .npy form");
  }
  std::string shape = "(";
  for (int64_t d : t.shape()) shape += std::to_string(d) + ", ";
  if (t.shape().size() > 1) shape.resize(shape.size() - 2);
  else if (t.shape().size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  const std::vector<unsigned char> data = host_bytes(t);
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  return out;
}

void save_npy(const std::string& path, const Tensor& t, Loc loc) { write_file_atomic(path, npy_bytes(t, loc), loc); }

}  // namespace alk
