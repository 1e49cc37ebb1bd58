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
#include "alk/expr.h"
#include "alk/op_table.h"
#include "runtime/device.h"

namespace alk {

struct Node {
  OpId op = OpId::Buffer;
  Shape shape;  // of the contiguous output
  DType dtype = DType::F32;
  std::vector<std::shared_ptr<TensorImpl>> inputs;
  Params params;
  Device* device = nullptr;        // where the value lives (and the kernel computing it runs)
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
  // Optional: the same rule, also given the gradient that input `folded_input` has received
  // so far (from the consumers that ran before it). Its result for that input includes that
  // sum and replaces it, instead of being added to it: layer norm's backward adds the
  // residual stream's gradient as it writes dx, where a separate add would read both again.
  // An empty result declines (backward runs instead).
  std::function<std::vector<Tensor>(const Tensor& grad_output, const Tensor& pending)> backward_folding;
  size_t folded_input = 0;
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

// A fresh lazy tensor viewing the whole contiguous output of a new node, on its inputs'
// device (all must agree, else alk::Error naming both), or the default device for a node
// without inputs. An unrealized constant takes any device: it is a literal in the kernel.
Tensor make_node(OpId op, Shape shape, DType dtype, std::vector<Tensor> inputs, Params params, Loc loc);
// A realized tensor over a new buffer of shape x dtype on device (contents uninitialized).
Tensor make_buffer_tensor(Shape shape, DType dtype, Device& device);

// ---- host <-> device: the one way data crosses (nothing outside src/backend touches device memory) ----
// A realized tensor on device holding bytes (numel x dtype_size bytes, row-major).
Tensor tensor_from_host(const void* bytes, Shape shape, DType dtype, Device& device);
// t's elements, row-major and contiguous, in t's dtype (realizes t; waits for the device).
std::vector<unsigned char> host_bytes(const Tensor& t);
// Overwrites the whole buffer of a realized tensor that views it contiguously (a learning
// rate, a step counter: state a compiled step reads from the same buffer every replay).
void write_host(const Tensor& t, const void* bytes, size_t size);
// Same node and view, no autograd history.
Tensor alias(const Tensor& t);
// A view of t's node with the given geometry; records no autograd (callers do).
Tensor make_view(const Tensor& t, Shape shape, Shape strides, int64_t offset);

// Realizes every tensor's node (one schedule for all of them).
void realize_all(const std::vector<TensorImpl*>& targets);
bool eager_mode();  // ALK_EAGER=1
void set_eager_mode(bool on);  // for tests and tools; overrides ALK_EAGER

}  // namespace alk
