// Fused attention on Vulkan (OpId::Attention, OpId::AttentionBackward): the contract of
// the CPU kernels (src/backend/cpu/kernels.h, attention_impl.inc), FlashAttention-2 style.
//
//   forward:  q [..., T, D], k and v [..., S, D] (any strides, batch dims flattened into
//             B) -> out [B, T, D + 1]: the output in [..., :D], each row's logsumexp of
//             the scaled (masked) scores in [..., D] (-inf and a zero row when a query sees
//             no key). Causal: query t sees keys s <= t + (S - T).
//   backward: + fwd (the forward's packed output) and d_out [..., T, D] -> out
//             [3, B, max(T, S), D] packing dq (rows < T), dk and dv (rows < S), zeros past.
//
// Shape of the work: one invocation per query row (forward, dq) or key row (dk, dv) holds
// its row, the row it reads against and its accumulators in registers (the head size D is
// a compile-time constant of the shader); the other side streams through shared memory in
// tiles loaded by the whole workgroup. The forward keeps a running max and sum per row
// (online softmax) and never stores scores; the backward recomputes the probabilities per
// tile from the saved logsumexp, in two dispatches with one writer per output element and
// no atomics (dk/dv per key block, then dq per query block), so results are deterministic.
// Causal tiles past a block's last visible key (or before its first seeing query) are
// skipped. Accumulation is in f32 for f16/bf16/f32 and in f64 for f64 (whose exp/log run in
// f32: GLSL has no double transcendentals).
//
// Batches are addressed through a table of per-batch element offsets (one uint per batch
// and tensor, built on the host) so any number of batch dims with any strides -- [B, H, T, D]
// views of a fused qkv projection, whose B and H strides do not merge -- is read in place.
#pragma once
#include <cstdint>
#include <string>

#include "alk/dtype.h"
#include "backend/vulkan/map_kernel.h"

namespace alk::vk {

// Why `ctx` cannot run attention over `dtype` with head size `head_dim` ("" when it can).
std::string attention_unsupported_reason(const Context& ctx, DType dtype, int64_t head_dim);

class AttentionForwardKernel {
 public:
  // Builds the pipeline (compiled once per dtype and head size; see shader.h). Throws
  // alk::Error when the device cannot run it.
  AttentionForwardKernel(Context& ctx, DType dtype, int64_t head_dim);
  void launch(Encoder& enc, const ViewArg& q, const ViewArg& k, const ViewArg& v, const ViewArg& out, bool causal,
              double scale) const;
  const std::string& source() const { return source_; }

 private:
  Context& ctx_;
  DType dtype_;
  int64_t head_dim_;
  std::string source_;
  int queries_ = 1;  // queries an invocation (two on CPU implementations)
  const Pipeline* pipeline_ = nullptr;
};

class AttentionBackwardKernel {
 public:
  AttentionBackwardKernel(Context& ctx, DType dtype, int64_t head_dim);
  void launch(Encoder& enc, const ViewArg& q, const ViewArg& k, const ViewArg& v, const ViewArg& fwd,
              const ViewArg& d_out, const ViewArg& out, bool causal, double scale) const;

 private:
  Context& ctx_;
  DType dtype_;
  int64_t head_dim_;
  const Pipeline* dkdv_ = nullptr;
  const Pipeline* dq_ = nullptr;
  int keys_ = 1;  // keys (dK/dV pass) and queries (dQ pass) an invocation
};

}  // namespace alk::vk
