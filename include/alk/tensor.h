// alk::Tensor: a handle (shape, strides, offset, dtype) over either a realized
// buffer or a lazy graph node. Ops record nodes; data is computed on demand.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alk/device.h"
#include "alk/dtype.h"
#include "alk/error.h"

namespace alk {

using Shape = std::vector<int64_t>;
struct TensorImpl;  // src/graph/graph.h

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;  // in elements
  int64_t offset() const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t size(int64_t d, Loc loc = Loc::current()) const;
  DType dtype() const;
  bool is_contiguous() const;
  bool is_realized() const;
  Device& device() const;  // where the data lives and the ops on it run

  // ---- data out (realizes) ----
  template <class T>
  std::vector<T> to_vector(Loc loc = Loc::current()) const;  // float double int32_t int64_t uint8_t
  double item(Loc loc = Loc::current()) const;
  const Tensor& realize() const;
  std::string str() const;  // printed like PyTorch

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true, Loc loc = Loc::current());
  Tensor grad() const;  // undefined until backward() reached it
  void zero_grad() const;
  void backward(const Tensor& seed = Tensor(), Loc loc = Loc::current()) const;
  Tensor detach() const;
  bool is_leaf() const;

  // ---- views (no data moves) ----
  Tensor reshape(Shape shape, Loc loc = Loc::current()) const;  // copies only if it cannot view
  Tensor view(Shape shape, Loc loc = Loc::current()) const;     // errors if it cannot view
  Tensor permute(std::vector<int64_t> dims, Loc loc = Loc::current()) const;
  Tensor transpose(int64_t d0, int64_t d1, Loc loc = Loc::current()) const;
  Tensor t(Loc loc = Loc::current()) const;  // transpose of the last two dims
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1, Loc loc = Loc::current()) const;
  Tensor select(int64_t dim, int64_t index, Loc loc = Loc::current()) const;
  Tensor expand(Shape shape, Loc loc = Loc::current()) const;  // -1 keeps a dim
  Tensor squeeze(Loc loc = Loc::current()) const;
  Tensor squeeze(int64_t dim, Loc loc = Loc::current()) const;
  Tensor unsqueeze(int64_t dim, Loc loc = Loc::current()) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1, Loc loc = Loc::current()) const;
  Tensor contiguous(Loc loc = Loc::current()) const;
  Tensor to(DType dtype, Loc loc = Loc::current()) const;
  // A copy on another device (an explicit copy node, differentiable); itself when already there.
  Tensor to(Device& device, Loc loc = Loc::current()) const;
  Tensor to(std::string_view device, Loc loc = Loc::current()) const;  // "cpu", "vulkan:0", "auto"

  // ---- in place (how optimizers and load_state_dict update parameters) ----
  // Makes this handle (and every copy of it) refer to `value`'s data from now on. Same
  // shape and dtype required; autograd identity (leaf, requires_grad, .grad) is kept.
  // Functional underneath: tensors computed from the old value keep seeing the old value.
  Tensor& assign_(const Tensor& value, Loc loc = Loc::current());

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// An operand of an elementwise op: a tensor or a number. Numbers are "weak": they take
// the tensor's dtype unless a float meets an integer tensor (docs/dtypes.md).
// An operand of an elementwise op: a tensor or a number. Numbers are "weak": they take
// the tensor's dtype unless a float meets an integer tensor (docs/dtypes.md). The
// conversion records where it happened, so errors from operators (a + b) name the
// user's line even though operators cannot take a location argument.
struct Operand {
  Operand(const Tensor& t, Loc at = Loc::current()) : tensor(t), loc(at) {}  // NOLINT(google-explicit-constructor)
  Operand(double v, Loc at = Loc::current()) : scalar(v), is_scalar(true), is_float(true), loc(at) {}  // NOLINT
  Operand(float v, Loc at = Loc::current()) : scalar(v), is_scalar(true), is_float(true), loc(at) {}   // NOLINT
  Operand(int v, Loc at = Loc::current()) : scalar(v), is_scalar(true), loc(at) {}                      // NOLINT
  Operand(int64_t v, Loc at = Loc::current())  // NOLINT
      : scalar(static_cast<double>(v)), is_scalar(true), loc(at) {}
  Operand(bool v, Loc at = Loc::current()) : scalar(v), is_scalar(true), is_bool(true), loc(at) {}  // NOLINT
  Tensor tensor;
  double scalar = 0;
  bool is_scalar = false, is_float = false, is_bool = false;
  Loc loc;
};

// ---- elementwise ops: one function per entry of include/alk/elementwise.def ----
#define ALK_DECLARE_1(name) Tensor name(const Operand& x, Loc loc = Loc::current());
#define ALK_DECLARE_2(name) Tensor name(const Operand& a, const Operand& b, Loc loc = Loc::current());
#define ALK_DECLARE_3(name) \
  Tensor name(const Operand& a, const Operand& b, const Operand& c, Loc loc = Loc::current());
#define ALK_EW(name, arity, ...) ALK_DECLARE_##arity(name)
#include "alk/elementwise.def"
#undef ALK_EW
#undef ALK_DECLARE_1
#undef ALK_DECLARE_2
#undef ALK_DECLARE_3

Tensor cast(const Tensor& x, DType dtype, Loc loc = Loc::current());

// A user-defined elementwise op, written in the op table's expression language
// (include/alk/elementwise.def): it fuses with its neighbours, runs on every backend and is
// differentiable through its gradient expressions (names: the inputs, y = the output,
// g = the incoming gradient; "" = no gradient for that input).
struct CustomOp {
  std::string name;
  std::vector<std::string> inputs;    // e.g. {"x"} or {"a", "b"}
  std::string forward;                // e.g. "x * tanh(log1p(exp(x)))"
  std::vector<std::string> backward;  // one per input, or empty for no gradient
  bool float_result = true;           // integer operands give f32 (else the promoted type)
};
Tensor custom_elementwise(const CustomOp& op, const std::vector<Operand>& operands, Loc loc = Loc::current());
// The kernel text alk generates for a lazy elementwise tensor's node ("cpp", "cuda",
// "glsl", "wgsl"), as `alk kernels` prints it.
std::string generated_kernel(const Tensor& t, std::string_view target, Loc loc = Loc::current());

Tensor operator+(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a, const Operand& b);
Tensor operator*(const Operand& a, const Operand& b);
Tensor operator/(const Operand& a, const Operand& b);
Tensor operator-(const Operand& x);
Tensor operator<(const Operand& a, const Operand& b);
Tensor operator<=(const Operand& a, const Operand& b);
Tensor operator>(const Operand& a, const Operand& b);
Tensor operator>=(const Operand& a, const Operand& b);
Tensor operator&&(const Operand& a, const Operand& b);
Tensor operator||(const Operand& a, const Operand& b);
Tensor operator!(const Operand& x);

// ---- creation ----
Tensor tensor(const std::vector<float>& data, Shape shape, Loc loc = Loc::current());
Tensor tensor(const std::vector<double>& data, Shape shape, Loc loc = Loc::current());
Tensor tensor(const std::vector<int64_t>& data, Shape shape, Loc loc = Loc::current());
Tensor tensor(const std::vector<int32_t>& data, Shape shape, Loc loc = Loc::current());
Tensor tensor(const std::vector<uint8_t>& data, Shape shape, DType dtype = DType::U8, Loc loc = Loc::current());
// From raw bytes of a given dtype (f16/bf16 bit patterns, bool as bytes).
Tensor from_bytes(const void* data, size_t bytes, Shape shape, DType dtype, Loc loc = Loc::current());
Tensor scalar_tensor(double value, DType dtype = DType::F32);
Tensor zeros(Shape shape, DType dtype = DType::F32, Loc loc = Loc::current());
Tensor ones(Shape shape, DType dtype = DType::F32, Loc loc = Loc::current());
Tensor full(Shape shape, double value, DType dtype = DType::F32, Loc loc = Loc::current());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor arange(double start, double end, double step = 1, DType dtype = DType::I64, Loc loc = Loc::current());
Tensor arange(int64_t end, Loc loc = Loc::current());
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::F32, Loc loc = Loc::current());
Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::F32, Loc loc = Loc::current());

// ---- random: Philox4x32-10 keyed by (seed, offset); every backend draws the same numbers ----
void manual_seed(uint64_t seed);
uint64_t random_seed();
uint64_t random_offset();
void set_random_state(uint64_t seed, uint64_t offset);
Tensor rand(Shape shape, DType dtype = DType::F32, Loc loc = Loc::current());   // U[0, 1)
Tensor randn(Shape shape, DType dtype = DType::F32, Loc loc = Loc::current());  // N(0, 1)
Tensor randint(int64_t low, int64_t high, Shape shape, DType dtype = DType::I64, Loc loc = Loc::current());
Tensor dropout_mask(Shape shape, double p, Loc loc = Loc::current());  // bool, true = keep (prob 1-p)
Tensor dropout(const Tensor& x, double p, bool training = true, Loc loc = Loc::current());

// ---- reductions (axes empty = all) ----
Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor min(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor prod(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor var(const Tensor& x, std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false,
           Loc loc = Loc::current());
Tensor std(const Tensor& x, std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false,
           Loc loc = Loc::current());
Tensor logsumexp(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false, Loc loc = Loc::current());
// dim empty: over the flattened tensor. Result i64.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false, Loc loc = Loc::current());
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false, Loc loc = Loc::current());

// ---- template ops ----
Tensor matmul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());  // NumPy rules
Tensor softmax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
Tensor log_softmax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
// Normalizes over the trailing dims given by normalized_shape; weight/bias optional.
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5, Loc loc = Loc::current());
Tensor rms_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = Tensor(), double eps = 1e-6,
                Loc loc = Loc::current());
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, Loc loc = Loc::current());
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, Loc loc = Loc::current());
Tensor embedding(const Tensor& weight, const Tensor& ids, Loc loc = Loc::current());
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current());
Tensor one_hot(const Tensor& ids, int64_t num_classes, Loc loc = Loc::current());
Tensor tril(const Tensor& x, int64_t k = 0, Loc loc = Loc::current());
Tensor triu(const Tensor& x, int64_t k = 0, Loc loc = Loc::current());
Tensor cumsum(const Tensor& x, int64_t dim, Loc loc = Loc::current());
// pads: (before, after) pairs starting from the LAST dim, like torch.nn.functional.pad.
Tensor pad(const Tensor& x, std::vector<int64_t> pads, double value = 0, Loc loc = Loc::current());
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0, Loc loc = Loc::current());
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0, Loc loc = Loc::current());
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim = 0, Loc loc = Loc::current());
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0, Loc loc = Loc::current());
Tensor broadcast_to(const Tensor& x, Shape shape, Loc loc = Loc::current());

// Fused attention over q, k, v [..., T, D] (k, v: [..., S, D]): softmax(q k^T * scale [+ causal
// mask]) v, computed tile by tile with an online softmax; no T x S matrix is kept for backward.
// scale < 0 means 1/sqrt(D).
// Grouped-query attention: q [..., H, T, D] with k, v [..., Hkv, S, D], H a multiple of Hkv
// (query head h reads key/value head h / (H / Hkv)); the gradients of k and v sum over each
// group.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                                    double scale = -1, Loc loc = Loc::current());
// Rotary position embedding in the rotate-half layout (transformers' apply_rotary_pos_emb):
// x [..., P, H, D] (D even) at positions [P] (integer) -> x * cos + rotate_half(x) * sin, where
// rotate_half(x) = [-x2, x1] for the halves x1, x2 of the last dim, and cos, sin of
// positions[p] * inv_freq [D / 2] repeated over both halves (angles in inv_freq's dtype, as
// transformers computes them in f32, then cast to x's). Its gradient is the inverse rotation.
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Loc loc = Loc::current());

// Sliding windows, as torch.nn.functional.unfold: [N, C, H, W] -> [N, C*kh*kw, L] where L is
// the number of window positions; out-of-image taps read pad_value. fold is the adjoint:
// [N, C*kh*kw, L] -> [N, C, H, W], summing overlapping taps.
struct Conv2dGeometry {
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
};
Tensor unfold2d(const Tensor& x, const Conv2dGeometry& g, double pad_value = 0, Loc loc = Loc::current());
Tensor fold2d(const Tensor& cols, int64_t h, int64_t w, const Conv2dGeometry& g, Loc loc = Loc::current());
// x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, Loc loc = Loc::current());
// Depthwise convolution (groups == channels, one filter per channel): x [N, C, H, W], weight
// [C, 1, kh, kw] -> [N, C, OH, OW], out-of-image taps read 0. conv2d calls it for such layers.
Tensor depthwise_conv2d(const Tensor& x, const Tensor& weight, const Conv2dGeometry& g, Loc loc = Loc::current());
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = -1, int64_t padding = 0,
                  Loc loc = Loc::current());  // stride -1 = kernel
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride = -1, int64_t padding = 0,
                  Loc loc = Loc::current());
Shape broadcast_shapes(const Shape& a, const Shape& b, Loc loc = Loc::current());

// ---- autograd ----
// Gradients of sum(outputs[i] * seeds[i]) with respect to inputs; leaves' .grad untouched.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& seeds = {}, bool create_graph = false,
                         Loc loc = Loc::current());
bool is_grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Mixed precision, as torch.autocast: inside the scope (this thread), matmuls of f32 (or
// f64) tensors run in `dtype` (bf16 or f16, with f32 accumulation) and give that dtype,
// while softmax, log_softmax, the norms and attention take 16-bit inputs in f32 (their
// sums and statistics need it). Parameters stay f32 (master weights); their gradients come
// back through the casts as f32.
class Autocast {
 public:
  explicit Autocast(DType dtype = DType::BF16, Loc loc = Loc::current());
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};
// The autocast dtype of this thread, when inside an Autocast scope.
std::optional<DType> autocast_dtype();

// Inside a PortableOps scope (this thread), ops that have a fused kernel on some devices only
// (the CPU's Conv2d, CUDA's fused cross-entropy) build their portable composition instead,
// so a program traced here runs on every backend: trace under it what you export
// (the WebGPU bundle's step is traced so).
class PortableOps {
 public:
  PortableOps();
  ~PortableOps();
  PortableOps(const PortableOps&) = delete;
  PortableOps& operator=(const PortableOps&) = delete;

 private:
  bool previous_;
};
bool portable_ops();  // whether this thread is inside a PortableOps scope

// Realizes several tensors in one schedule (shared work is computed once).
void realize(const std::vector<Tensor>& ts);

// ---- memory ----
// While a MemoryBudget lives, every realize whose plan needs more than max_bytes at its
// peak is refused at plan time, before anything is allocated, with an alk::Error naming
// the peak, the budget and the largest tensors.
class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t max_bytes);
  ~MemoryBudget();
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

 private:
  int64_t previous_;
};
int64_t memory_budget();  // -1: none
// The most recent realize's plan: peak bytes (stored outputs + arena) vs one buffer per tensor.
struct MemoryPlan {
  int64_t planned_bytes = 0, naive_bytes = 0, arena_bytes = 0, kernels = 0;
};
MemoryPlan last_memory_plan();

}  // namespace alk
