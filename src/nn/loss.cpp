// Losses, composed from table ops (the scheduler fuses the elementwise parts).
#include "alk/nn.h"
#include "ops/ops.h"

namespace alk::nn {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double smoothing, Loc loc) {
  check(logits.defined() && targets.defined(), "cross_entropy", loc, "undefined input");
  check(logits.dim() >= 1 && is_floating(logits.dtype()), "cross_entropy", loc,
        "logits must be a floating tensor [..., C], got ", dtype_name(logits.dtype()), " ", to_string(logits.shape()));
  check(targets.dtype() == DType::I64 || targets.dtype() == DType::I32, "cross_entropy", loc,
        "targets must be i64 or i32, got ", dtype_name(targets.dtype()));
  const int64_t c = logits.shape().back();
  Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  check(targets.shape() == lead, "cross_entropy", loc, "targets shape ", to_string(targets.shape()),
        " must be the logits shape without the class dim ", to_string(lead));
  check(smoothing >= 0 && smoothing <= 1, "cross_entropy", loc, "label_smoothing must be in [0, 1], got ", smoothing);
  if (smoothing == 0 && fused_kernel_on(logits, "cross_entropy")) {
    // The device's fused kernel: the logits are read in their dtype, no log-probabilities kept.
    const Tensor t = targets.reshape({-1}, loc);
    const Tensor rows = cross_entropy_rows(logits.reshape({-1, c}, loc), t, ignore_index, loc);
    const Tensor kept = sum(ne(t, ignore_index).to(rows.dtype()));
    return sum(rows.select(1, 0)) / maximum(kept, 1.0);
  }
  Tensor lp = log_softmax(logits.reshape({-1, c}, loc), 1, loc);  // [N, C]
  Tensor t = targets.reshape({-1, 1}, loc);
  Tensor keep = ne(t, ignore_index);                        // [N, 1]
  Tensor safe = where(keep, t, int64_t{0});                 // ignored rows gather class 0, then are masked
  Tensor picked = gather(lp, 1, safe.to(DType::I64), loc);  // [N, 1]
  picked.impl()->node->name = "cross_entropy";  // a target out of range is reported as cross_entropy's, at this call
  Tensor nll = -picked;
  if (smoothing > 0) nll = nll * (1 - smoothing) - mean(lp, {1}, true) * smoothing;
  Tensor w = keep.to(logits.dtype());
  return sum(nll * w) / maximum(sum(w), 1.0);
}

namespace {

// The operands of an elementwise loss broadcast as in PyTorch; shapes that do not are the
// loss's error (not its inner sub's), at the caller's line.
void check_broadcastable(const std::string& op, const Tensor& a, const Tensor& b, Loc loc) {
  check(a.defined() && b.defined(), op, loc, "undefined input");
  try {
    broadcast_shapes(a.shape(), b.shape(), loc);
  } catch (const Error& e) {
    throw Error(op, e.detail(), loc);
  }
}

}  // namespace

Tensor mse_loss(const Tensor& x, const Tensor& target, Loc loc) {
  check_broadcastable("mse_loss", x, target, loc);
  return mean(square(x - target), {}, false, loc);
}

// max(x, 0) - x*y + log(1 + exp(-|x|)): stable for large |x|.
Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& y, Loc loc) {
  check_broadcastable("binary_cross_entropy_with_logits", x, y, loc);
  // softplus(x) - x y: softplus is max(x, 0) + log1p(exp(-|x|)) (no overflow), and its table
  // gradient sigmoid(x) keeps d/dx = sigmoid(x) - y exact at x = 0, where relu's kink is.
  return mean(softplus(x, loc) - x * y, {}, false, loc);
}

}  // namespace alk::nn
