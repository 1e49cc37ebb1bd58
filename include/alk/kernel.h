// What a device runs: a Kernel is one op (a fused elementwise expression, or a template
// op with its parameters and optional fused prologue/epilogue) over strided windows of
// device buffers. Kernels are plain data, copied out of the lazy graph, so a recorded
// kernel list replays after the graph it came from is gone (alk::compile). This header
// knows nothing of the graph or the scheduler: backends depend on it, not on them.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "alk/dtype.h"
#include "alk/error.h"
#include "alk/expr.h"
#include "alk/op_table.h"

namespace alk {

using Shape = std::vector<int64_t>;
struct Buffer;  // runtime/device.h

// ---- op parameters, one struct per template op family ----
struct MapParams { expr::Expr expr; };                   // elementwise: expr over the inputs
enum class ReduceOp : uint8_t { Sum, Max, Min, Prod };
struct ReduceParams { ReduceOp op; std::vector<int> axes; };  // output keeps reduced dims as 1
struct AxisParams { int axis; bool flag = false; };       // softmax(log), cumsum(reverse), argreduce(is_max)
struct NormParams { int64_t inner; double eps; };
struct IndexParams { int dim; };                          // gather, index_select, scatter_add, concat
struct OneHotParams { int64_t num_classes; };
struct TriParams { int64_t k; bool upper; };
struct PadParams { std::vector<int64_t> pads; double value; };  // 2 * rank, in dim order
struct SliceScatterParams { int dim; int64_t start, step; };
enum class RandomDistribution : uint8_t { Uniform, Normal, Integer };  // RandomParams::dist's values
struct RandomParams { int dist; uint64_t seed, offset; double low, high; };
struct ConstParams { double value; };
struct CrossEntropyParams { int64_t ignore_index; };  // rows whose target is this contribute nothing
// reduced_precision: the products may be computed in bf16 with f32 accumulation (set under
// autocast, where PyTorch runs attention on half inputs); the softmax statistics, the output
// and the logsumexp stay in the node's dtype. Backends without such a kernel ignore it.
// out_heads: the forward node's layout. 0: packed rows [B, T, D + 1] in the node's dtype
// (every backend). n >= 1 (devices with the "attention_16bit" feature): the node is 16-bit,
// the output rows first, laid out [B / n, T, n, D] (n = H for q [b, H, T, D]: the [b, T, C]
// the next projection reads, no copy), then each row's logsumexp as f32, [B, T], at element
// B * T * D (two 16-bit slots each). The backward node carries the same params.
// grads_qkv (backward nodes of scaled_dot_product_attention_qkv with out_heads = H): the
// gradients are written as the packed projection's, [b, T, 3, H, D], not [3, B, T, D].
struct AttentionParams {
  bool causal;
  double scale;
  bool reduced_precision = false;
  int64_t out_heads = 0;
  bool grads_qkv = false;
};
// unfold: [N, C, H, W] -> [N, C*kh*kw, L]; fold is its adjoint (overlaps summed) back to [N, C, h, w].
struct UnfoldParams {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t h, w;  // the spatial size of the [N, C, H, W] side
  double pad_value;
};
// HostCall: a host function run as a kernel, in graph order (src/dist hands a gradient bucket to
// its communication thread the moment the backward has made it). It gets the kernel's buffers
// as their device holds them (CPU: host pointers; CUDA: device pointers, called where the kernel
// would be queued, so it queues its own work on the stream); Vulkan declines it. Kept by shared
// pointer: each replay calls it again (alk::compile launches it alone, outside recordings).
struct Kernel;
struct HostFunction {
  virtual ~HostFunction() = default;
  virtual void run(const Kernel& k) const = 0;
};
struct HostCallParams { std::shared_ptr<const HostFunction> fn; };
// UserKernel: a kernel from the user's source text (alk/user_kernel.h holds KernelSpec).
struct KernelSpec;
struct UserKernelParams {
  std::shared_ptr<const KernelSpec> spec;
  std::vector<double> attrs;  // the spec's attributes' values, in its order
  int64_t invocations = 0;    // how many times the body runs (the grid)
};
using Params = std::variant<std::monostate, MapParams, ReduceParams, AxisParams, NormParams, IndexParams,
                            OneHotParams, TriParams, PadParams, SliceScatterParams, RandomParams, ConstParams,
                            AttentionParams, UnfoldParams, CrossEntropyParams, HostCallParams, UserKernelParams>;

Shape contiguous_strides(const Shape& shape);
int64_t numel(const Shape& shape);  // the product of the dims (1 for a scalar)

// A strided window on a device buffer, as a kernel sees it.
struct KernelArg {
  std::shared_ptr<Buffer> buffer;  // keeps the memory alive while the kernel may run
  size_t byte_offset = 0;          // where this tensor's storage starts inside buffer (arena slices)
  DType dtype = DType::F32;
  Shape shape, strides;            // in elements; stride 0 on broadcast dims
  int64_t offset = 0;              // in elements, on top of byte_offset (views)
};

// What a kernel computes, copied out of its node.
struct KernelOp {
  OpId op = OpId::Map;
  Params params;
  Shape shape, in_shape;  // the op's output shape; a Reduce's input shape
  DType dtype = DType::F32;
  Loc loc;
  std::string name;  // the user-facing op, when a composite built the node
};

// A further result of a kernel's pass (multi-output fusion), stored at element i of arg as the
// main output is (same shape, contiguous): expr over a Map kernel's inputs, or over a template
// op's epilogue operands (slot 0 its value, slot s the epilogue input s - 1). The scheduler
// forms them where the device fuses them (Device::extra_outputs: CUDA's Map kernels), or under
// ALK_EXTRA_OUTPUTS=1: an f32 sum and its bf16 cast for the next product in one pass.
struct ExtraOutput {
  KernelArg arg;
  expr::Expr expr;
};

struct Kernel {
  KernelOp node;        // the op (for Map: the root of the fused expression)
  OpId op = OpId::Map;  // Map for fused elementwise kernels, else the template op
  std::vector<KernelArg> inputs;
  KernelArg output;
  // Map: the fused expression over inputs. Reduce: the prologue computing the reduced
  // value from inputs (shape = the reduce input's shape).
  std::optional<expr::Expr> expr;
  // Reduce/Matmul epilogue: Input slot 0 is the op's result; slot k > 0 is epilogue_inputs[k-1].
  std::optional<expr::Expr> epilogue;
  std::vector<KernelArg> epilogue_inputs;
  // More results of the same pass (Map kernels, template ops with an epilogue); none
  // writes over an input.
  std::vector<ExtraOutput> extra_outputs;
};

// The Map kernel computing extra output j of Map kernel k alone (a backend without
// multi-output kernels runs these, then k without them: k may write over an input they read).
Kernel extra_output_kernel(const Kernel& k, size_t j);

// The text that fixes a Map kernel's generated source: the expressions' canonical forms and
// the storage dtypes. Backends key their compiled-kernel caches by it (never by a hash alone:
// two kernels whose hashes collide must not share code).
std::string map_kernel_key(const Kernel& k);

// How ALK_DEBUG=timing lists a kernel (every backend the same way): a Map by its root op
// ("map:gelu_tanh", with its shape past 2^20 elements), another op by its output shape (a
// Reduce's as in -> out), a Matmul's operands ("^T": read transposed), a Conv2d's input and
// weight, and a fused epilogue's inputs with their broadcast dims as 1 ("+epilogue(bf16[1, 1,
// 3072])": a bias; the fc forward and fc2's dX have the same shapes but not the same epilogue).
std::string kernel_label(const Kernel& k);

}  // namespace alk
