// Batched matmul on Vulkan (OpId::Matmul): [.., m, k] x [.., k, n] -> [.., m, n] with
// broadcast batch dims, the semantics of cpu::matmul. Operands are strided views read in
// place (a weight gradient's transposed x^T is never copied); f32, f16 and bf16 inputs
// accumulate in f32, f64 in f64 (where the device has shaderFloat64).
//
// The kernel is a shared-memory tiled GEMM: a workgroup computes a BM x BN tile of C,
// staging BK-deep slices of A and B in shared memory (the next slice is fetched into
// registers while the current one is multiplied), and each invocation accumulates a
// TM x TN micro-tile in registers. Global loads walk each operand along its contiguous
// dimension (a compile-time choice per layout), so both row- and column-major operands
// load coalesced. Two tile shapes are compiled: 128x128 (8x8 per invocation) for large
// products, 64x64 (4x4) when the large tiles would leave the device idle. f16 x f16 on a
// device with VK_NV_cooperative_matrix (DeviceInfo::cooperative_matrix_nv) runs on the
// tensor cores instead: 128x256 tiles for large products (choose_matmul_tiles), 8 subgroups owning
// 4x4 16x16 f32 accumulators (64x64), slices double-buffered in shared memory where two
// fit the device's limit (else one), 16-byte loads where the operands are aligned.
//
// Batch dims are collapsed on the host where the strides allow (and folded into the rows
// when B is shared by every batch matrix, as for a linear layer), up to 3 batch dims in
// the kernel; more are looped over on the host.
//
// The epilogue (Kernel::epilogue: slot 0 = the product, rounded to the node's dtype;
// slot e > 0 = epilogue input e-1) is emitted from the IR as a GLSL function
// (expr::emit_glsl_function) and applied as each element is stored. Epilogue inputs are
// strided views too; when one cannot be described over the product's [batch.., m, n]
// layout (or there are too many), the product goes to a scratch buffer and the
// epilogue runs as a Map kernel after it.
//
// Bindings: A, B, epilogue inputs in order, the output; the params block (sizes, strides,
// element offsets of each view's first element, per vulkan_device.h's convention) in push
// constants when it fits 128 bytes (at most 2 epilogue inputs), else a storage buffer
// bound last.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/map_kernel.h"

namespace alk {
struct Kernel;
}

namespace alk::vk {

struct DeviceInfo;

struct MatmulSignature {
  DType input = DType::F32;   // A and B (the scheduler casts both to one dtype)
  DType value = DType::F32;   // the product's dtype (the node's): what the epilogue's slot 0 sees
  DType output = DType::F32;  // the stored dtype (== value without an epilogue)
  std::optional<expr::Expr> epilogue;
  std::vector<DType> epilogue_inputs;
};

// The tile shape of a compiled variant.
struct MatmulTiles {
  uint32_t bm, bn, bk, tm, tn;
  // Cooperative matrices (f16 on VK_NV_cooperative_matrix): subgroups of 32, each owning
  // tm x tn 16x16 accumulators.
  bool coop = false;
  // Register blocks for CPU implementations (lavapipe): each invocation computes tm
  // consecutive rows by tn consecutive columns straight from the operands, k unrolled by 4,
  // with no shared memory and no barriers. llvmpipe turns every per-invocation load into a
  // scalar loop over its SIMD lanes, so what counts is loads per fma: (4 tm + 4 tn) per
  // 4 tm tn here, against staging through shared memory at 2 loads + 1 store per element.
  bool cpu = false;
  // Cooperative-matrix tiles whose subgroups load their A and B fragments straight from the
  // operands (L1/L2) instead of staging slices in shared memory: no barriers in the k loop,
  // the next k step's fragments loaded while this one's are multiplied. Needs both operands
  // contiguous along k / n with 16-byte aligned rows, and M, N, K multiples of 16.
  bool direct = false;
  uint32_t threads() const { return coop ? 32 * (bm / (16 * tm)) * (bn / (16 * tn)) : (bm / tm) * (bn / tn); }
};
inline constexpr MatmulTiles kMatmulLarge{128, 128, 16, 8, 8};
inline constexpr MatmulTiles kMatmulSmall{64, 64, 16, 4, 4};
// Cooperative-matrix tiles (f16 on VK_NV_cooperative_matrix). Tall, the first choice for
// large products: 16 subgroups of 32x64 (2x4 accumulators, 126 registers on NVIDIA 580) over
// 256x128, one 32-deep slice (44.5 KiB): on the H200 149 TFLOP/s at 4096^3, against 126 for
// the large tiles below (8 subgroups of 64x64: 4x4 accumulators take 204 registers, so one
// workgroup an SM) with the clocks held up for every variant (bench/vulkan/NOTES.md, the
// seventeenth session). Large: where Tall does not fit; where two 32-deep slices do not fit
// either (54 KiB), 16-deep slices double-buffered rather than 32-deep ones single-buffered.
inline constexpr MatmulTiles kMatmulCoopTall{256, 128, 32, 2, 4, true};
inline constexpr MatmulTiles kMatmulCoopLarge{128, 256, 32, 4, 4, true};
inline constexpr MatmulTiles kMatmulCoopLargeK16{128, 256, 16, 4, 4, true};
inline constexpr MatmulTiles kMatmulCoop{128, 128, 32, 2, 4, true};
inline constexpr MatmulTiles kMatmulCoopSmall{64, 64, 32, 2, 2, true};
// Every cooperative-matrix variant the benchmark measures (and the tests compile).
inline constexpr MatmulTiles kMatmulCoopVariants[] = {
    kMatmulCoopLarge, {256, 128, 32, 4, 4, true}, kMatmulCoopLargeK16, {256, 128, 16, 4, 4, true},
    {128, 256, 64, 4, 4, true}, kMatmulCoop, {128, 128, 64, 2, 4, true}, {128, 128, 32, 4, 4, true},
    kMatmulCoopSmall, {128, 256, 16, 4, 4, true, false, true}, {128, 128, 16, 2, 4, true, false, true},
    // 16 subgroups (512 invocations) of 32x64: the 128x256 reuse with twice the subgroups per SM
    {128, 256, 32, 2, 4, true}, kMatmulCoopTall};
// bench/vulkan/NOTES.md: the register-block tiles measured on lavapipe.
inline constexpr MatmulTiles kMatmulCpu{64, 64, 4, 8, 8, false, true};

class MatmulKernel {
 public:
  // Builds (or finds in the context's cache) the pipelines the signature needs. Throws
  // alk::Error when the device cannot run it (matmul_unsupported_reason).
  MatmulKernel(Context& ctx, MatmulSignature sig);
  ~MatmulKernel();
  // Records out = epilogue(a @ b, epilogue inputs...) into enc. a: [.., m, k], b: [.., k, n]
  // (batch dims already broadcast to the output's, stride 0), out contiguous; epilogue
  // inputs are viewed over the output's shape.
  void launch(Encoder& enc, const ViewArg& a, const ViewArg& b, const ViewArg& out,
              std::span<const ViewArg> epilogue_inputs = {}) const;
  // Tests and benchmarks: always these tiles (nullopt: chosen by shape). Not while launching.
  void force_tiles(std::optional<MatmulTiles> t) { forced_ = t; }
  // Tests: whether the last launch read A / B with 16-byte (vec4 / 8-half) loads.
  std::pair<bool, bool> last_vector_loads() const { return last_vec_; }
  // The GLSL of the variant for these layouts (tests, golden inspection). vec_a / vec_b
  // (cooperative-matrix tiles): the operand is contiguous along k / n with rows and
  // its start 16-byte aligned, and is read 8 halfs at a time; (CPU register-block tiles,
  // f32) the operand is read a vec4 at a time along its contiguous dim, 16-byte aligned.
  // shared_limit: the shared memory to plan for (0: the device's maxComputeSharedMemorySize);
  // cooperative-matrix tiles double-buffer their slices where two fit, else use one.
  std::string source(const MatmulTiles& tiles, bool a_k_contiguous, bool b_n_contiguous, bool fused_epilogue,
                     bool vec_a = false, bool vec_b = false, uint32_t shared_limit = 0) const;

 private:
  struct Variant;
  const Variant& variant(const MatmulTiles& tiles, bool a_k_contiguous, bool b_n_contiguous, bool fused, bool vec_a,
                         bool vec_b) const;
  void launch_fused(Encoder& enc, const ViewArg& a, const ViewArg& b, const ViewArg& out,
                    std::span<const ViewArg> epilogue_inputs, bool fused) const;

  Context& ctx_;
  MatmulSignature sig_;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Variant>> variants_;
  mutable std::unique_ptr<MapKernel> epilogue_map_;
  std::optional<MatmulTiles> forced_;
  mutable std::pair<bool, bool> last_vec_{false, false};  // the unfused epilogue, built on first need
};

// The tiles a product of M x N (x `batches`) with operands of `input` runs on, on `info`
// (what MatmulKernel::launch picks when no tiles are forced).
MatmulTiles choose_matmul_tiles(const DeviceInfo& info, DType input, int64_t M, int64_t N, int64_t K, int64_t batches);

// Shared memory of a cooperative-matrix variant: the A and B slices (`buffers` of each,
// rows padded by 8 halfs) and one f32 16x16 tile per subgroup for the stores.
uint32_t coop_shared_bytes(const MatmulTiles& t, uint32_t buffers);

// Why the device cannot run this signature ("" when it can).
std::string matmul_unsupported_reason(const Context& ctx, const MatmulSignature& sig);

// The signature of a Matmul kernel (its epilogue included).
MatmulSignature matmul_signature(const Kernel& k);

}  // namespace alk::vk
