// Gradients of every differentiable op in the table against central differences in
// float64. Elementwise cases are generated from the table itself; template ops have one
// case each below, and the Coverage test fails when a differentiable op has none.
#include <map>
#include <set>

#include "backend/cpu/kernel_observer.h"
#include "ops/ops.h"
#include "testing.h"

namespace alk {
namespace {

using testing::f64_tensor;
using testing::gradcheck;

Tensor leaf(Tensor t) { return t.requires_grad_(); }

TEST(Gradcheck, EveryElementwiseEntry) {
  std::mt19937 rng(7);
  for (const ElementwiseEntry& e : elementwise_table()) {
    if (!e.differentiable()) continue;
    SCOPED_TRACE(std::string(e.name));
    std::vector<Tensor> xs;
    if (e.name == "where") {
      xs = {tensor(std::vector<uint8_t>{1, 0, 1, 0, 0, 1}, {2, 3}, DType::Bool),
            leaf(f64_tensor({2, 3}, e.domain, rng)), leaf(f64_tensor({3}, e.domain, rng))};
    } else if (e.name == "clamp") {
      // Keep x away from the bounds so the kinks are not sampled.
      xs = {leaf(tensor(std::vector<double>{-1.7, -0.2, 0.3, 1.9, 0.9, -0.9}, {2, 3})),
            leaf(tensor(std::vector<double>{-1.0, -0.5, -1.2}, {3})),
            leaf(tensor(std::vector<double>{0.6, 1.5}, {2, 1}))};
    } else {
      // Operands broadcast against each other: [2, 3] with [3] (and [2, 1]).
      const Shape shapes[] = {{2, 3}, {3}, {2, 1}};
      for (int k = 0; k < e.arity; ++k) xs.push_back(leaf(f64_tensor(shapes[k], e.domain, rng)));
    }
    OpId op = e.op;
    gradcheck([op](const std::vector<Tensor>& in) {
      return apply_elementwise(op, std::vector<Operand>(in.begin(), in.end()), Loc::current());
    }, xs);
  }
}

// One gradcheck per differentiable template op (and the compositions built on them).
using Case = std::function<void(std::mt19937&)>;
const std::map<OpId, Case>& template_cases() {

  static const std::map<OpId, Case> cases = {
      {OpId::Attention, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); },
                   {leaf(f64_tensor({2, 3, 4}, Domain::Any, rng)), leaf(f64_tensor({2, 5, 4}, Domain::Any, rng)),
                    leaf(f64_tensor({2, 5, 4}, Domain::Any, rng))});
       }},
      {OpId::Cast, [](std::mt19937& rng) {
         // Through f32: the function is the identity up to f32 rounding, so use a wide step.
         gradcheck([](auto& x) { return cast(cast(x[0], DType::F32), DType::F64) * 2.0; },
                   {leaf(f64_tensor({4}, Domain::Any, rng))}, 1e-4, 1e-4, 1e-2);
       }},
      {OpId::Reduce, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return sum(x[0], {1}); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
         gradcheck([](auto& x) { return sum(x[0], {0, 2}, true); }, {leaf(f64_tensor({2, 3, 2}, Domain::Any, rng))});
         gradcheck([](auto& x) { return max(x[0], {0}); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
         gradcheck([](auto& x) { return min(x[0], {1}, true); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
         gradcheck([](auto& x) { return prod(x[0], {1}); }, {leaf(f64_tensor({2, 3}, Domain::Positive, rng))});
         gradcheck([](auto& x) { return mean(x[0], {0}); }, {leaf(f64_tensor({3, 2}, Domain::Any, rng))});
         gradcheck([](auto& x) { return var(x[0], {1}); }, {leaf(f64_tensor({2, 5}, Domain::Any, rng))});
         gradcheck([](auto& x) { return std(x[0]); }, {leaf(f64_tensor({2, 5}, Domain::Any, rng))});
         gradcheck([](auto& x) { return logsumexp(x[0], {1}); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
       }},
      {OpId::Matmul, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return matmul(x[0], x[1]); },
                   {leaf(f64_tensor({2, 3, 4}, Domain::Any, rng)), leaf(f64_tensor({4, 5}, Domain::Any, rng))});
         gradcheck([](auto& x) { return matmul(x[0], x[1]); },
                   {leaf(f64_tensor({4}, Domain::Any, rng)), leaf(f64_tensor({2, 4, 3}, Domain::Any, rng))});
         gradcheck([](auto& x) { return matmul(x[0], x[1]); },
                   {leaf(f64_tensor({3, 4}, Domain::Any, rng)), leaf(f64_tensor({4}, Domain::Any, rng))});
         // A b shared over a's batch (its gradient is one matmul over batch and rows), with a
         // batch dim of size 1 and a transposed (non-contiguous) a.
         gradcheck([](auto& x) { return matmul(x[0].transpose(-1, -2), x[1]); },
                   {leaf(f64_tensor({2, 4, 3}, Domain::Any, rng)), leaf(f64_tensor({1, 4, 5}, Domain::Any, rng))});
       }},
      {OpId::Softmax, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return softmax(x[0], 1); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
         gradcheck([](auto& x) { return softmax(x[0], 0); }, {leaf(f64_tensor({3, 2}, Domain::Any, rng))});
       }},
      {OpId::LogSoftmax, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return log_softmax(x[0], -1); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
       }},
      {OpId::CrossEntropy, [](std::mt19937& rng) {
         const Tensor t = tensor(std::vector<int64_t>{2, -100, 0, 4}, {4});
         gradcheck([t](auto& x) { return cross_entropy_rows(x[0], t, -100, Loc::current()); },
                   {leaf(f64_tensor({4, 5}, Domain::Any, rng))});
       }},
      {OpId::LayerNorm, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return layer_norm(x[0], {4}, x[1], x[2]); },
                   {leaf(f64_tensor({2, 3, 4}, Domain::Any, rng)), leaf(f64_tensor({4}, Domain::Any, rng)),
                    leaf(f64_tensor({4}, Domain::Any, rng))});
         gradcheck([](auto& x) { return layer_norm(x[0], {2, 3}); }, {leaf(f64_tensor({2, 2, 3}, Domain::Any, rng))});
       }},
      {OpId::RmsNorm, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return rms_norm(x[0], {4}, x[1]); },
                   {leaf(f64_tensor({3, 4}, Domain::Any, rng)), leaf(f64_tensor({4}, Domain::Any, rng))});
       }},
      {OpId::Gather, [](std::mt19937& rng) {
         Tensor idx = tensor(std::vector<int64_t>{0, 3, 1, 1, 2, 0}, {3, 2});
         gradcheck([idx](auto& x) { return gather(x[0], 1, idx); }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
       }},
      {OpId::IndexSelect, [](std::mt19937& rng) {
         Tensor idx = tensor(std::vector<int64_t>{0, 2, 2}, {3});
         gradcheck([idx](auto& x) { return index_select(x[0], 0, idx); }, {leaf(f64_tensor({4, 3}, Domain::Any, rng))});
         Tensor ids = tensor(std::vector<int64_t>{1, 0, 1, 3}, {2, 2});
         gradcheck([ids](auto& x) { return embedding(x[0], ids); }, {leaf(f64_tensor({4, 3}, Domain::Any, rng))});
       }},
      {OpId::ScatterAdd, [](std::mt19937& rng) {
         Tensor idx = tensor(std::vector<int64_t>{0, 3, 3, 1, 2, 0}, {3, 2});
         gradcheck([idx](auto& x) { return scatter_add(x[0], 1, idx, x[1]); },
                   {leaf(f64_tensor({3, 4}, Domain::Any, rng)), leaf(f64_tensor({3, 2}, Domain::Any, rng))});
       }},
      {OpId::Tri, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return tril(x[0]) + triu(x[0], 1) * 3.0; }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
       }},
      {OpId::Cumsum, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return cumsum(x[0], 1); }, {leaf(f64_tensor({2, 4}, Domain::Any, rng))});
       }},
      {OpId::Pad, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return pad(x[0], {1, 2, 0, 1}, 0.5); }, {leaf(f64_tensor({2, 3}, Domain::Any, rng))});
         gradcheck([](auto& x) { return pad(x[0], {-1, 0}); }, {leaf(f64_tensor({2, 3}, Domain::Any, rng))});
       }},
      {OpId::Concat, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return cat({x[0], x[1]}, 1); },
                   {leaf(f64_tensor({2, 3}, Domain::Any, rng)), leaf(f64_tensor({2, 1}, Domain::Any, rng))});
         gradcheck([](auto& x) { return stack({x[0], x[1]}, 0); },
                   {leaf(f64_tensor({2, 3}, Domain::Any, rng)), leaf(f64_tensor({2, 3}, Domain::Any, rng))});
       }},
      {OpId::SliceScatter, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return x[0].slice(1, 1, 5, 2) * x[0].slice(0, 0, 1).slice(1, 0, 2); },
                   {leaf(f64_tensor({2, 5}, Domain::Any, rng))});
       }},
      {OpId::Unfold, [](std::mt19937& rng) {
         // kernel 2x3, stride (2, 1), padding (1, 1), dilation (1, 2); conv2d composes unfold with matmul.
         gradcheck([](auto& x) { return unfold2d(x[0], Conv2dGeometry{2, 3, 2, 1, 1, 1, 1, 2}); },
                   {leaf(f64_tensor({2, 2, 4, 5}, Domain::Any, rng))});
         gradcheck([](auto& x) { return conv2d(x[0], x[1], x[2], 1, 1); },
                   {leaf(f64_tensor({1, 2, 3, 4}, Domain::Any, rng)), leaf(f64_tensor({2, 2, 3, 3}, Domain::Any, rng)),
                    leaf(f64_tensor({2}, Domain::Any, rng))});
       }},
      {OpId::Conv2d, [](std::mt19937& rng) {
         // kernel 3x2, stride (2, 1), padding (1, 2), dilation (1, 2); conv2d with groups == channels uses it.
         gradcheck([](auto& x) { return depthwise_conv2d(x[0], x[1], Conv2dGeometry{3, 2, 2, 1, 1, 2, 1, 2}); },
                   {leaf(f64_tensor({2, 3, 5, 6}, Domain::Any, rng)), leaf(f64_tensor({3, 1, 3, 2}, Domain::Any, rng))});
         gradcheck([](auto& x) { return conv2d(x[0], x[1], x[2], 1, 1, 1, 2); },
                   {leaf(f64_tensor({1, 2, 4, 3}, Domain::Any, rng)), leaf(f64_tensor({2, 1, 3, 3}, Domain::Any, rng)),
                    leaf(f64_tensor({2}, Domain::Any, rng))});
       }},
      {OpId::Fold, [](std::mt19937& rng) {
         gradcheck([](auto& x) { return fold2d(x[0], 4, 5, Conv2dGeometry{2, 3, 2, 1, 1, 1, 1, 2}); },
                   {leaf(f64_tensor({2, 12, 9}, Domain::Any, rng))});
       }},
  };
  return cases;
}

TEST(Gradcheck, TemplateOps) {
  for (auto& [op, run] : template_cases()) {
    SCOPED_TRACE(std::string(op_name(op)));
    std::mt19937 rng(11 + static_cast<int>(op));
    run(rng);
  }
}

// op_backward_uses (what `alk ops` judges a backend's backward support by) names every
// template op a gradient runs: each case's kernels on the CPU, seen by the kernel observer.
TEST(Gradcheck, BackwardUsesNameWhatTheBackwardRuns) {
  for (auto& [op, run] : template_cases()) {
    SCOPED_TRACE(std::string(op_name(op)));
    std::set<OpId> seen;
    const cpu::KernelObserver observer = [&seen](const Kernel& k) { seen.insert(k.node.op); };
    cpu::set_kernel_observer(&observer);
    std::mt19937 rng(11 + static_cast<int>(op));
    run(rng);
    cpu::set_kernel_observer(nullptr);
    const std::vector<OpId>& uses = op_backward_uses(op);
    for (OpId s : seen) {
      // The case's own forward, what the scheduler runs on every device, the harness's sum
      // of the outputs (a Reduce), and Unfold's second case, conv2d, which is unfold + matmul.
      if (s == op || is_elementwise(s) || s == OpId::Map || s == OpId::Const || s == OpId::Buffer || s == OpId::Cast ||
          s == OpId::ToDevice || s == OpId::Reduce || (op == OpId::Unfold && s == OpId::Matmul))
        continue;
      EXPECT_NE(std::find(uses.begin(), uses.end(), s), uses.end())
          << "the backward of " << op_name(op) << " ran " << op_name(s) << ", which op_backward_uses does not name";
    }
  }
}

TEST(Gradcheck, ViewsAndComposites) {
  std::mt19937 rng(3);

  gradcheck([](auto& x) { return x[0].permute({2, 0, 1}) * sum(x[0]); },
            {leaf(f64_tensor({2, 3, 2}, Domain::Any, rng))});
  gradcheck([](auto& x) { return x[0].reshape({3, 2}).t().contiguous(); }, {leaf(f64_tensor({2, 3}, Domain::Any, rng))});
  gradcheck([](auto& x) { return x[0].unsqueeze(0).expand({4, 2, 3}) * x[0].select(0, 1); },
            {leaf(f64_tensor({2, 3}, Domain::Any, rng))});
  gradcheck([](auto& x) { return x[0].flatten().squeeze(); }, {leaf(f64_tensor({2, 1, 3}, Domain::Any, rng))});
  // A q/k/v split: every select of one dim used, each differently (their gradients fuse
  // into one kernel with the sum), and a select at a negative index of a transposed view.
  gradcheck([](auto& x) { return x[0].select(2, 0) * x[0].select(2, 1) + exp(x[0].select(2, 2)); },
            {leaf(f64_tensor({2, 3, 3, 2}, Domain::Any, rng))});
  gradcheck([](auto& x) { return x[0].t().select(0, -1) * 2.0; }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
  gradcheck([](auto& x) { return split(x[0], 2, 1)[1] * chunk(x[0], 2, 1)[0].slice(1, 0, 1); },
            {leaf(f64_tensor({2, 4}, Domain::Any, rng))});
  gradcheck([](auto& x) {
    manual_seed(5);  // the same mask at every evaluation
    return dropout(x[0], 0.4);
  }, {leaf(f64_tensor({3, 4}, Domain::Any, rng))});
}

TEST(Gradcheck, Coverage) {
  // Every differentiable op must have a case: elementwise ones are enumerated above from
  // the table; template ops need an entry in template_cases().
  std::set<OpId> missing;
  for (int i = 0; i < kNumOps; ++i) {
    OpId op = static_cast<OpId>(i);
    if (is_elementwise(op) || !op_differentiable(op)) continue;
    if (!template_cases().count(op)) missing.insert(op);
  }
  std::string names;
  for (OpId op : missing) names += std::string(op_name(op)) + " ";
  EXPECT_TRUE(missing.empty()) << "differentiable ops without a gradcheck case: " << names;
  int differentiable_elementwise = 0;
  for (auto& e : elementwise_table()) differentiable_elementwise += e.differentiable();
  EXPECT_GE(differentiable_elementwise, 30);
}

}  // namespace
}  // namespace alk
