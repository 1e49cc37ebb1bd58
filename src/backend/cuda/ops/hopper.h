// What the GEMM (matmul.cpp) and attention (attention.cpp) share of Hopper's (sm_90a)
// instructions: the text of one warpgroup product (wgmma) and the tensor maps the bulk tensor
// copies (TMA) read through.
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/launch.h"

namespace alk::cuda {

// The one wgmma instruction of a 64 x bn slab (kernels/matmul_wgmma.cu's wgmma_tile): its
// bn / 2 accumulators per thread are listed one by one, so the list is generated here.
std::string wgmma_tile_code(int bn, const char* kind, int a_kmajor, int b_kmajor);
// The same with A from registers (four bf16x2 a thread: the m16n8k16 A fragment of the
// warp's 16 rows), B from shared memory: wgmma_tile_ra(d, a, db).
std::string wgmma_tile_ra_code(int bn, const char* kind, int b_kmajor);

// A CUtensorMap, opaque: what cuTensorMapEncodeTiled writes and a kernel parameter carries.
struct alignas(64) TensorMap {
  uint64_t bits[16];
};
// The map of `rows` rows of `inner` 16-bit elements (bf16 or f16), `row_stride` elements
// apart from `first` (the address of element 0: 16-byte aligned, as the row stride's bytes
// must be), read in boxes of 64 x box_rows with the 128-byte swizzle (zero-filled past the edges).
TensorMap tensor_map(DType t, uint64_t first, uint64_t inner, uint64_t rows, int64_t row_stride, unsigned box_rows);

}  // namespace alk::cuda
