// What every CUDA kernel family's launcher shares (src/backend/cuda/ops/*.cpp): the tensors as
// the kernels see them (Arg, KView), the C types a dtype is stored and computed in, the embedded
// kernels/*.cu(h) texts and the defines put before them, and the grid sizes of grid-stride loops.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "backend/cuda/context.h"
#include "runtime/device.h"

namespace alk::cuda {

namespace sources {  // kernels/*.cu(h), embedded by CMake (cuda_kernel_sources.cpp)
extern const std::string_view common, rows, index, loss, matmul, matmul_mma, matmul_shared, matmul_tc, matmul_wgmma,
    attention_shared, attention, attention_tiled, attention_mma, decode;
}  // namespace sources

// ---- kernel arguments ----

// The kernels' View (kernels/common.cuh), byte for byte.
struct KView {
  int64_t offset = 0;
  int32_t rank = 0;
  int32_t contiguous = 0;
  int64_t shape[8] = {};
  int64_t strides[8] = {};
};
static_assert(sizeof(KView) == 144);

KView kview(const Shape& shape, const Shape& strides, int64_t offset);

// A tensor as the kernels see it: the pointer to its storage's first byte, and its view.
struct Arg {
  CUdeviceptr ptr = 0;
  DType dtype = DType::F32;
  Shape shape, strides;
  int64_t offset = 0;
  KView view() const { return kview(shape, strides, offset); }
};

CUdeviceptr device_ptr(const Buffer& b);
Arg arg_of(const KernelArg& a);

// ---- C types ----

// The C type arithmetic on a dtype runs in (kernels' ACC).
const char* acc_type(DType t);
// A raw element type of the dtype's size (kernels that only move bits).
const char* raw_type(DType t);
// The type a dtype is stored as (expr::cuda_storage_type).
std::string storage(DType t);
// The C type an emitted expression (prologue, epilogue) computes a dtype's values in, and the
// text converting a stored value `raw` to it.
const char* compute_ctype(DType t);
std::string load_as_compute(DType t, const std::string& raw);
// `value` stored as dtype, as raw bits in the low bytes of a u64.
uint64_t bits_of(DType t, double value);

// ---- sources ----

// "#define NAME VALUE" lines.
std::string defines(std::initializer_list<std::pair<const char*, std::string>> d);
// defs, then kernels/common.cuh, then body.
std::string kernel_source(const std::string& defs, std::string_view body);

// ---- launches ----

inline constexpr unsigned kBlock = 256;  // threads a block, unless a kernel says otherwise
// Blocks for a grid-stride loop over `items`, `per_block` a block.
unsigned blocks_for(const Context& ctx, int64_t items, int64_t per_block = kBlock);

// The op's name for errors: the node's (the user's call) or `fallback`.
const std::string& op_name_of(const Kernel& k, const char* fallback);
// Index tensors are i64 or i32: anything else is the caller's error, named as op.
void check_index_dtype(const Kernel& k, const char* op, DType t);

}  // namespace alk::cuda
