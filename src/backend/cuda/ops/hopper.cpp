#include "backend/cuda/ops/hopper.h"

namespace alk::cuda {

std::string wgmma_tile_code(int bn, const char* kind, int a_kmajor, int b_kmajor) {
  const int regs = bn / 2;
  std::string list, operands;
  for (int i = 0; i < regs; ++i) {
    list += (i ? ", %" : "%") + std::to_string(i);
    operands += std::string(i ? ", " : "") + "\"+f\"(d[" + std::to_string(i) + "])";
  }
  const std::string n = std::to_string(regs);
  return "__device__ __forceinline__ void wgmma_tile(float (&d)[" + n + "], u64 da, u64 db) {\n"
         "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + std::to_string(regs + 2) +
         ", 0;\\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(bn) + "k16.f32." + kind + "." + kind + " {" +
         list + "}, %" + n + ", %" + std::to_string(regs + 1) + ", p, 1, 1, " + (a_kmajor ? "0" : "1") + ", " +
         (b_kmajor ? "0" : "1") + ";\\n}\\n\"\n    : " + operands + "\n    : \"l\"(da), \"l\"(db), \"r\"(1));\n}\n";
}

std::string wgmma_tile_ra_code(int bn, const char* kind, int b_kmajor) {
  const int regs = bn / 2;
  std::string list, operands, a;
  for (int i = 0; i < regs; ++i) {
    list += (i ? ", %" : "%") + std::to_string(i);
    operands += std::string(i ? ", " : "") + "\"+f\"(d[" + std::to_string(i) + "])";
  }
  for (int i = 0; i < 4; ++i) a += (i ? ", %" : "%") + std::to_string(regs + i);
  return "__device__ __forceinline__ void wgmma_tile_ra(float (&d)[" + std::to_string(regs) +
         "], const unsigned a[4], u64 db) {\n"
         "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + std::to_string(regs + 5) +
         ", 0;\\nwgmma.mma_async.sync.aligned.m64n" + std::to_string(bn) + "k16.f32." + kind + "." + kind + " {" + list +
         "}, {" + a + "}, %" + std::to_string(regs + 4) + ", p, 1, 1, " + (b_kmajor ? "0" : "1") + ";\\n}\\n\"\n    : " +
         operands + "\n    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db), \"r\"(1));\n}\n";
}

TensorMap tensor_map(DType t, uint64_t first, uint64_t inner, uint64_t rows, int64_t row_stride, unsigned box_rows) {
  TensorMap map{};
  const uint64_t dims[2] = {inner, rows}, strides[1] = {static_cast<uint64_t>(row_stride) * 2};
  const unsigned box[2] = {64, box_rows}, element_strides[2] = {1, 1};
  constexpr int kBf16 = 9, kF16 = 6, kInterleaveNone = 0, kSwizzle128 = 3, kL2Promote128 = 2, kFillZero = 0;
  check(driver()->cuTensorMapEncodeTiled(&map, t == DType::BF16 ? kBf16 : kF16, 2, reinterpret_cast<void*>(first), dims,
                                         strides, box, element_strides, kInterleaveNone, kSwizzle128, kL2Promote128,
                                         kFillZero),
        "cuTensorMapEncodeTiled");
  return map;
}

}  // namespace alk::cuda
