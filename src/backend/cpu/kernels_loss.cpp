// Fused softmax cross-entropy over rows (ops.h cross_entropy_rows), the reference the GPU
// kernels are checked against: double accumulation, any float dtype of logits.
#include <cmath>

#include "alk/error.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/template_ops.h"
#include "backend/cpu/kernels_internal.h"

namespace alk::cpu {

namespace {

int64_t at2(const View& v, int64_t r, int64_t c) { return v.offset + r * v.strides[0] + c * v.strides[1]; }

// The targets, checked before any row is computed: ignore_index or a class in [0, C).
std::vector<int64_t> load_targets(const View& targets, int64_t classes, int64_t ignore_index, Loc loc) {
  std::vector<int64_t> t(static_cast<size_t>(targets.shape[0]));
  for (int64_t r = 0; r < targets.shape[0]; ++r) {
    const int64_t v = detail::load_index(targets, targets.offset + r * targets.strides[0]);
    check(v == ignore_index || (v >= 0 && v < classes), "cross_entropy", loc, "target ", v, " at row ", r,
          " is out of range for ", classes, " classes (ignore_index ", ignore_index, ")");
    t[static_cast<size_t>(r)] = v;
  }
  return t;
}

}  // namespace

void cross_entropy(const View& x, const View& targets, int64_t ignore_index, const View& out, Loc loc) {
  const int64_t rows = x.shape[0], classes = x.shape[1];
  const std::vector<int64_t> t = load_targets(targets, classes, ignore_index, loc);
  parallel_for(rows, detail::grain_for(classes), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      double mx = -INFINITY;
      for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, load_as_double(x.data, x.dtype, at2(x, r, c)));
      double sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(load_as_double(x.data, x.dtype, at2(x, r, c)) - mx);
      const double lse = mx + std::log(sum);
      const int64_t target = t[static_cast<size_t>(r)];
      const double nll = target == ignore_index ? 0.0 : lse - load_as_double(x.data, x.dtype, at2(x, r, target));
      store_double(out.data, out.dtype, at2(out, r, 0), nll);
      store_double(out.data, out.dtype, at2(out, r, 1), lse);
    }
  });
}

// out may be x itself (op_table.h: the op writes over input 0): each element is read before
// its gradient is stored.
void cross_entropy_backward(const View& x, const View& targets, const View& packed, const View& g, int64_t ignore_index,
                            const View& out, Loc loc) {
  const int64_t rows = x.shape[0], classes = x.shape[1];
  const std::vector<int64_t> t = load_targets(targets, classes, ignore_index, loc);
  parallel_for(rows, detail::grain_for(classes), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t target = t[static_cast<size_t>(r)];
      const double lse = load_as_double(packed.data, packed.dtype, at2(packed, r, 1));
      const double g_nll = target == ignore_index ? 0.0 : load_as_double(g.data, g.dtype, at2(g, r, 0));
      const double g_lse = load_as_double(g.data, g.dtype, at2(g, r, 1));
      for (int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(load_as_double(x.data, x.dtype, at2(x, r, c)) - lse);
        store_double(out.data, out.dtype, at2(out, r, c), (g_nll + g_lse) * p - (c == target ? g_nll : 0.0));
      }
    }
  });
}

// The CPU's template-op table entries for this family (src/backend/cpu/template_ops.h).
namespace {
[[maybe_unused]] const bool registered = [] {
  auto& ops = template_ops();
  ops.add(OpId::CrossEntropy, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    cross_entropy(in[0], in[1], std::get<CrossEntropyParams>(k.node.params).ignore_index, out, k.node.loc);
  });
  ops.add(OpId::CrossEntropyBackward, kFloatDTypes, [](const Kernel& k, const std::vector<View>& in, const View& out) {
    cross_entropy_backward(in[0], in[1], in[2], in[3], std::get<CrossEntropyParams>(k.node.params).ignore_index, out,
                           k.node.loc);
  });
  return true;
}();
}  // namespace

}  // namespace alk::cpu
