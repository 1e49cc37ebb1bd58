// NumPy's .npy format (numpy/lib/format.py, "The .npy format"): the array files `alk onnx run`
// reads its inputs from and writes its outputs to.
//
//   "\x93NUMPY" | major | minor | header length (u16 for 1.x, u32 for 2.x/3.x, little-endian)
//   | an ASCII Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//   | the data, C order (or Fortran order when the dict says so)
//
// Read: dtypes <f2 <f4 <f8 |i1 |u1 <i4 <i8 |b1 (big-endian '>' is byteswapped; i1 becomes i32,
// alk has no i8); shapes up to 16 dims whose element count fits the data that is there;
// anything else is alk::Error("npy", ...) naming the file and the offending value. Written:
// version 1.0, little-endian, C order, the header padded to a multiple of 64 bytes; bf16
// (which NumPy lacks) is written as <f4.
#pragma once
#include <string>
#include <string_view>

#include "alk/tensor.h"

namespace alk {

Tensor load_npy(const std::string& path, Loc loc = Loc::current());
// The same from bytes in memory; `what` names the source in errors.
Tensor parse_npy(std::string_view bytes, const std::string& what, Loc loc = Loc::current());
std::string npy_bytes(const Tensor& t, Loc loc = Loc::current());
void save_npy(const std::string& path, const Tensor& t, Loc loc = Loc::current());

}  // namespace alk
