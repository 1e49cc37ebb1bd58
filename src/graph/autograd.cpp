#include "graph/autograd.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace alk {

namespace {
thread_local bool g_grad_enabled = true;
}

bool is_grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor with_grad(Tensor out, std::string name, std::vector<Tensor> inputs, BackwardFn backward) {
  if (!needs_grad(inputs)) return out;
  auto fn = std::make_shared<GradFn>();
  fn->name = std::move(name);
  for (const Tensor& t : inputs) {
    GradEdge e;
    if (t.defined() && t.requires_grad()) {
      if (t.impl()->grad_fn)
        e.fn = t.impl()->grad_fn;
      else
        e.leaf = t.impl_ptr();
      e.shape = t.shape();
      e.dtype = t.dtype();
    }
    fn->next.push_back(std::move(e));
  }
  fn->backward = std::move(backward);
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::move(fn);
  return out;
}

Tensor with_grad(Tensor out, std::string name, std::vector<Tensor> inputs, BackwardFn backward, size_t folded_input,
                 FoldingBackwardFn folding) {
  out = with_grad(std::move(out), std::move(name), std::move(inputs), std::move(backward));
  if (GradFn* fn = out.impl()->grad_fn.get()) {
    fn->folded_input = folded_input;
    fn->backward_folding = std::move(folding);
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  Tensor s = axes.empty() ? g : sum(g, axes, true);
  return s.reshape(shape);
}

namespace {

// Gradients are keyed by the GradFn they flow into, or by the leaf they land in.
const void* grad_key(const GradEdge& e) { return e.fn ? static_cast<const void*>(e.fn.get()) : e.leaf.get(); }
const void* grad_key(const Tensor& t) {
  return t.impl()->grad_fn ? static_cast<const void*>(t.impl()->grad_fn.get()) : t.impl();
}

// Reverse topological order of the GradFns reachable from the roots.
std::vector<GradFn*> backward_order(const std::vector<Tensor>& roots) {
  std::vector<GradFn*> order;
  std::unordered_set<GradFn*> seen;
  std::vector<std::pair<GradFn*, size_t>> stack;
  for (const Tensor& r : roots) {
    GradFn* root = r.impl()->grad_fn.get();
    if (!root || !seen.insert(root).second) continue;
    stack.push_back({root, 0});
    while (!stack.empty()) {
      GradFn* fn = stack.back().first;
      size_t& next = stack.back().second;
      if (next < fn->next.size()) {
        GradFn* child = fn->next[next++].fn.get();
        if (child && seen.insert(child).second) stack.push_back({child, 0});
        continue;
      }
      order.push_back(fn);
      stack.pop_back();
    }
  }
  return {order.rbegin(), order.rend()};
}

struct BackwardResult {
  std::unordered_map<const void*, Tensor> grads;                 // by grad_key
  std::vector<std::pair<TensorImpl*, const void*>> leaves;       // leaves reached
  std::unordered_map<const void*, size_t> completed;              // leaf -> backward step of its last gradient part
};

// The GradFns that ran and that only this graph reaches let go of what their rules
// captured (forward values, attention's packed output, layer norm's statistics), as PyTorch
// frees its graph after backward: the gradients about to be realized reference what they
// need directly, and whatever nobody else holds can then live in the scheduler's arena
// instead of being stored. A GradFn that a tensor in the caller's hands still leads to (a
// view kept for another forward, say) keeps its rule, so backward through it again works.
// The edges stay; a second backward through a released rule is an error that says so.
const BackwardTargets*& backward_targets() {
  thread_local const BackwardTargets* make = nullptr;
  return make;
}

void release_saved_values(const std::vector<Tensor>& roots, const std::vector<GradFn*>& ran, Loc loc) {
  // References to each GradFn from inside the graph (its consumers' edges, the roots), and
  // a shared_ptr to read its total reference count from.
  std::unordered_map<GradFn*, long> inside;
  std::unordered_map<GradFn*, const std::shared_ptr<GradFn>*> handle;
  for (const Tensor& r : roots)
    if (const auto& fn = r.impl()->grad_fn) ++inside[fn.get()], handle[fn.get()] = &fn;
  for (GradFn* fn : ran)
    for (const GradEdge& e : fn->next)
      if (e.fn) ++inside[e.fn.get()], handle[e.fn.get()] = &e.fn;
  for (GradFn* fn : ran) {
    auto h = handle.find(fn);
    if (h == handle.end() || h->second->use_count() != inside[fn]) continue;  // held from outside
    fn->backward = [name = fn->name, loc](const Tensor&) -> std::vector<Tensor> {
      fail("backward", loc, "trying to run backward through ", name,
           " a second time: its saved values were freed by the first backward (run the forward again)");
    };
    fn->backward_folding = nullptr;
  }
}

BackwardResult run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, Loc loc,
                            std::vector<GradFn*>* ran = nullptr) {
  BackwardResult r;
  auto accumulate = [&r](const void* key, const Tensor& g) {
    auto [it, fresh] = r.grads.emplace(key, g);
    if (!fresh) it->second = it->second + g;
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    check(root.defined() && root.requires_grad(), "backward", loc, "tensor of shape ",
          root.defined() ? to_string(root.shape()) : "undefined", " does not require grad and has no grad_fn");
    Tensor seed;
    if (i < seeds.size() && seeds[i].defined()) {
      seed = seeds[i];
      check(seed.shape() == root.shape(), "backward", loc, "seed gradient shape ", to_string(seed.shape()),
            " does not match output shape ", to_string(root.shape()));
    } else {
      check(root.numel() == 1, "backward", loc,
            "grad can be implicitly created only for scalar outputs; got shape ", to_string(root.shape()),
            ": pass a seed gradient");
      DeviceGuard on(root.device());  // the seed lives where the output does
      seed = ones(root.shape(), root.dtype());
    }
    if (!root.impl()->grad_fn) r.leaves.push_back({root.impl(), root.impl()});
    accumulate(grad_key(root), seed);
  }
  size_t step = 0;
  for (GradFn* fn : backward_order(roots)) {
    ++step;
    auto it = r.grads.find(fn);
    if (it == r.grads.end()) continue;
    // A rule that folds in the sum its input has received so far (GradFn::backward_folding)
    // returns that input's whole gradient: it replaces the sum.
    std::vector<Tensor> in_grads;
    bool folded = false;
    if (fn->backward_folding && fn->folded_input < fn->next.size() && fn->next[fn->folded_input].active()) {
      auto pending = r.grads.find(grad_key(fn->next[fn->folded_input]));
      if (pending != r.grads.end()) {
        in_grads = fn->backward_folding(it->second, pending->second);
        folded = !in_grads.empty();
      }
    }
    if (!folded) in_grads = fn->backward(it->second);
    if (ran) ran->push_back(fn);
    for (size_t k = 0; k < fn->next.size() && k < in_grads.size(); ++k) {
      const GradEdge& e = fn->next[k];
      if (!e.active() || !in_grads[k].defined()) continue;
      Tensor g = in_grads[k];
      check(g.shape() == e.shape, "backward", loc, "gradient of ", fn->name, " input ", k, " has shape ",
            to_string(g.shape()), " but the input has shape ", to_string(e.shape));
      if (g.dtype() != e.dtype) g = cast(g, e.dtype);
      if (e.leaf && !r.grads.count(e.leaf.get())) r.leaves.push_back({e.leaf.get(), e.leaf.get()});
      if (e.leaf) r.completed[e.leaf.get()] = step;
      if (folded && k == fn->folded_input)
        r.grads.at(grad_key(e)) = g;
      else
        accumulate(grad_key(e), g);
    }
  }
  return r;
}

}  // namespace

void Tensor::backward(const Tensor& seed, Loc loc) const {
  check(defined(), "backward", loc, "called on an undefined tensor");
  std::vector<Tensor> leaf_grads;
  {
    NoGradGuard no_grad;
    std::vector<GradFn*> ran;
    BackwardResult r = run_backward({*this}, {seed}, loc, &ran);
    release_saved_values({*this}, ran, loc);
    // Leaves whose gradient is complete first come first: the scheduler orders the graph
    // depth first from its targets, so each layer's weight gradients are then computed as
    // the backward reaches that layer (PyTorch's order), and the activations they read die
    // layer by layer. (A tied embedding is reached first, through the output head, but is
    // complete only at the bottom: first, it would pull the whole backward before any
    // layer's weight gradient.)
    auto completed = [&r](const void* key) {  // a root that is itself a leaf: step 0
      auto it = r.completed.find(key);
      return it == r.completed.end() ? size_t{0} : it->second;
    };
    std::stable_sort(r.leaves.begin(), r.leaves.end(),
                     [&](const auto& a, const auto& b) { return completed(a.second) < completed(b.second); });
    for (auto [impl, key] : r.leaves) {
      const Tensor& g = r.grads.at(key);
      // A fresh tensor per leaf: one gradient tensor can reach several leaves (a + b hands
      // its g to both), and an assign_ to one leaf's grad must not change another's.
      // A gradient that is part of a larger result (layer norm's backward packs dx, dgamma
      // and dbeta in one node) is copied out, so holding .grad does not keep the whole
      // result stored: the rest can live in the scheduler's arena.
      Tensor acc = impl->grad ? Tensor(impl->grad) + g : g.numel() == g.impl()->node->numel() ? alias(g) : g.contiguous();
      impl->grad = acc.impl_ptr();
      leaf_grads.push_back(acc);
    }
  }
  // Backward runs now, as one schedule, like PyTorch's: the graph it frees is large.
  if (const BackwardTargets* make = backward_targets()) {
    std::vector<Tensor> targets = (*make)();
    targets.insert(targets.end(), leaf_grads.begin(), leaf_grads.end());
    alk::realize(targets);
    return;
  }
  alk::realize(leaf_grads);
}

WithBackwardTargets::WithBackwardTargets(const BackwardTargets& make) : previous_(backward_targets()) {
  backward_targets() = &make;
}
WithBackwardTargets::~WithBackwardTargets() { backward_targets() = previous_; }

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& seeds, bool create_graph, Loc loc) {
  check(seeds.empty() || seeds.size() == outputs.size(), "grad", loc, "got ", seeds.size(), " seeds for ",
        outputs.size(), " outputs");
  for (size_t i = 0; i < inputs.size(); ++i)
    check(inputs[i].defined() && inputs[i].requires_grad(), "grad", loc, "input ", i,
          " does not require grad");
  BackwardResult r;
  if (create_graph) {
    r = run_backward(outputs, seeds, loc);
  } else {
    NoGradGuard no_grad;
    r = run_backward(outputs, seeds, loc);
  }
  std::vector<Tensor> result;
  std::unordered_set<const TensorImpl*> returned;  // each input's gradient its own tensor (see backward())
  for (const Tensor& in : inputs) {
    auto it = r.grads.find(grad_key(in));
    Tensor g = it != r.grads.end() ? it->second : zeros(in.shape(), in.dtype());
    if (!returned.insert(g.impl()).second) g = g.view(g.shape());  // a view keeps the history
    result.push_back(g);
  }
  return result;
}

}  // namespace alk
