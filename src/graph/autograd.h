// Reverse-mode autodiff. Ops call with_grad() after recording their forward node;
// backward() walks grad_fns from the root in reverse topological order.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace alk {

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);
// Marks `out` as produced by `name` from `inputs` with the given backward rule (when needed).
Tensor with_grad(Tensor out, std::string name, std::vector<Tensor> inputs, BackwardFn backward);
// The same, with a rule that may fold in the gradient already summed for input `folded_input`
// (GradFn::backward_folding).
using FoldingBackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const Tensor& pending)>;
Tensor with_grad(Tensor out, std::string name, std::vector<Tensor> inputs, BackwardFn backward, size_t folded_input,
                 FoldingBackwardFn folding);
// Sums g over broadcast dims so it has `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

// Tensors that Tensor::backward realizes in its one schedule, ahead of the gradients, made
// by `make` once the leaves' .grad are set (this thread, for the guard's scope): data
// parallel's gradient buckets (src/dist), so that each bucket's hand-off to the
// communication thread runs as soon as the backward has made the bucket's gradients (the
// scheduler walks its targets depth first, in order).
using BackwardTargets = std::function<std::vector<Tensor>()>;
class WithBackwardTargets {
 public:
  explicit WithBackwardTargets(const BackwardTargets& make);
  ~WithBackwardTargets();
  WithBackwardTargets(const WithBackwardTargets&) = delete;
  WithBackwardTargets& operator=(const WithBackwardTargets&) = delete;

 private:
  const BackwardTargets* previous_;
};

}  // namespace alk
