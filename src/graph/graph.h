// The lazy graph. A TensorImpl is a view (shape, strides, offset) of the contiguous
// output of a Node; a Node is either realized (it holds a Buffer) or lazy (it holds
// its op, params and input views). Views share their Node, so taking a view never
// forces computation; the scheduler (schedule.h) turns lazy nodes into kernels.
#pragma once
#include <functional>
#include <memory>
#include <source_location>
#include <variant>
#include <vector>

#include "alk/tensor.h"
#include "expr/expr.h"
#include "ops/op_table.h"

namespace alk {

// Device memory. Today only the CPU: host memory, 64-byte aligned.
struct Buffer {
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data = nullptr;
  size_t bytes = 0;
  static int64_t live_count();  // for the leak report and tests
  static int64_t live_bytes();
};
// Returns the blocks kept for reuse (large freed buffers are cached) to the system.
void release_cached_memory();

// ---- typed parameters, one struct per template op family ----
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
struct RandomParams { int dist; uint64_t seed, offset; double low, high; };
struct ConstParams { double value; };
struct AttentionParams { bool causal; double scale; };
// unfold: [N, C, H, W] -> [N, C*kh*kw, L]; fold is its adjoint (overlaps summed) back to [N, C, h, w].
struct UnfoldParams {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t h, w;  // the spatial size of the [N, C, H, W] side
  double pad_value;
};
using Params = std::variant<std::monostate, MapParams, ReduceParams, AxisParams, NormParams, IndexParams,
                            OneHotParams, TriParams, PadParams, SliceScatterParams, RandomParams, ConstParams,
                            AttentionParams, UnfoldParams>;

struct Node {
  OpId op = OpId::Buffer;
  Shape shape;  // of the contiguous output
  DType dtype = DType::F32;
  std::vector<std::shared_ptr<TensorImpl>> inputs;
  Params params;
  std::shared_ptr<Buffer> buffer;  // set once realized; then inputs and params are dropped
  Loc loc;                         // the user's call site, for errors raised while running
  std::string name;                // the user-facing op, when a composite built this node
  bool realized() const { return buffer != nullptr; }
  int64_t numel() const;
};

// A backward rule: given the gradient of the output, the gradients of the inputs
// (undefined Tensor where an input gets none). Written with Tensor ops, so backward
// graphs are lazy and fused like any other.
struct GradFn;
// Where an input's gradient goes: on to the grad_fn that produced it, or into a leaf's
// .grad. Edges hold no data, so keeping the autograd graph does not keep forward values
// alive (only what backward rules capture does), and the scheduler stays free to fuse.
struct GradEdge {
  std::shared_ptr<GradFn> fn;          // set for non-leaf inputs
  std::shared_ptr<TensorImpl> leaf;    // set for leaves that require grad
  Shape shape;
  DType dtype = DType::F32;
  bool active() const { return fn || leaf; }
};

struct GradFn {
  std::string name;
  std::vector<GradEdge> next;  // one per forward input
  std::function<std::vector<Tensor>(const Tensor& grad_output)> backward;
};

struct TensorImpl {
  Shape shape, strides;
  int64_t offset = 0;
  DType dtype = DType::F32;
  std::shared_ptr<Node> node;
  bool requires_grad = false;
  std::shared_ptr<GradFn> grad_fn;
  std::shared_ptr<TensorImpl> grad;  // accumulated on leaves by backward()
};

Shape contiguous_strides(const Shape& shape);
// A fresh lazy tensor viewing the whole contiguous output of a new node.
Tensor make_node(OpId op, Shape shape, DType dtype, std::vector<Tensor> inputs, Params params, Loc loc);
// A realized tensor over a new buffer of shape x dtype (contents uninitialized).
Tensor make_buffer_tensor(Shape shape, DType dtype);
// Same node and view, no autograd history.
Tensor alias(const Tensor& t);
// A view of t's node with the given geometry; records no autograd (callers do).
Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset);

// Realizes every tensor's node (one schedule for all of them).
void realize_all(const std::vector<TensorImpl*>& targets);
bool eager_mode();  // ALK_EAGER=1
void set_eager_mode(bool on);  // for tests and tools; overrides ALK_EAGER

}  // namespace alk
