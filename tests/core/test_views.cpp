// Property tests of the view/stride ops against a naive row-major reference.
//
// A seeded generator builds random shapes and random chains of valid view ops; each chain
// is applied to an alk::Tensor and to a tiny naive N-d array, and the shapes and values are
// compared exactly. Chains that only take views of a realized tensor are also checked for
// sharing: the view stays realized, and its (offset, strides) address the original buffer
// exactly where the naive reference says each element came from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/kernel.h"  // numel
#include "error_expect.h"

namespace {

using alk::Shape;
using alk::Tensor;

// ---------------------------------------------------------------------------------------
// The naive reference: data + shape, row-major, every op written out index by index.
// ---------------------------------------------------------------------------------------

std::vector<int64_t> unravel(int64_t i, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d) i = i * shape[d] + idx[d];
  return i;
}

std::string str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

struct Naive {
  std::vector<double> data;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const { return alk::numel(shape); }
  double at(const std::vector<int64_t>& idx) const { return data[static_cast<size_t>(ravel(idx, shape))]; }

  // out[idx] = this->at(src(idx)) for every idx of out_shape.
  template <class F>
  Naive gather(Shape out_shape, F src) const {
    Naive out{{}, out_shape};
    out.data.resize(static_cast<size_t>(alk::numel(out_shape)));
    for (int64_t i = 0; i < alk::numel(out_shape); ++i) out.data[static_cast<size_t>(i)] = at(src(unravel(i, out_shape)));
    return out;
  }
};

int64_t norm_dim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

Naive n_reshape(const Naive& x, Shape s) {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1)
      infer = static_cast<int>(i);
    else
      known *= s[i];
  }
  if (infer >= 0) s[static_cast<size_t>(infer)] = x.numel() / known;
  return Naive{x.data, s};
}

Naive n_permute(const Naive& x, std::vector<int64_t> dims) {
  for (auto& d : dims) d = norm_dim(d, x.rank());
  Shape out(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) out[k] = x.shape[static_cast<size_t>(dims[k])];
  return x.gather(out, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> src(o.size());
    for (size_t k = 0; k < dims.size(); ++k) src[static_cast<size_t>(dims[k])] = o[k];
    return src;
  });
}

Naive n_transpose(const Naive& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> dims(static_cast<size_t>(x.rank()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<size_t>(norm_dim(d0, x.rank()))], dims[static_cast<size_t>(norm_dim(d1, x.rank()))]);
  return n_permute(x, dims);
}

// Python's slice(start, end, step).indices(n) for a positive step.
Naive n_slice(const Naive& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = norm_dim(dim, x.rank());
  const int64_t n = x.shape[static_cast<size_t>(dim)];
  auto fix = [n](int64_t v) {
    if (v < 0) {
      v += n;
      if (v < 0) v = 0;
    } else if (v > n) {
      v = n;
    }
    return v;
  };
  start = fix(start);
  end = fix(end);
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  Shape out = x.shape;
  out[static_cast<size_t>(dim)] = len;
  return x.gather(out, [&](std::vector<int64_t> o) {
    o[static_cast<size_t>(dim)] = start + o[static_cast<size_t>(dim)] * step;
    return o;
  });
}

Naive n_select(const Naive& x, int64_t dim, int64_t index) {
  dim = norm_dim(dim, x.rank());
  if (index < 0) index += x.shape[static_cast<size_t>(dim)];
  Shape out = x.shape;
  out.erase(out.begin() + dim);
  return x.gather(out, [&](std::vector<int64_t> o) {
    o.insert(o.begin() + dim, index);
    return o;
  });
}

Naive n_expand(const Naive& x, Shape s) {
  const size_t lead = s.size() - x.shape.size();
  for (size_t i = lead; i < s.size(); ++i)
    if (s[i] == -1) s[i] = x.shape[i - lead];
  return x.gather(s, [&](const std::vector<int64_t>& o) {
    std::vector<int64_t> src(x.shape.size());
    for (size_t j = 0; j < x.shape.size(); ++j) src[j] = x.shape[j] == 1 ? 0 : o[j + lead];
    return src;
  });
}

Naive n_squeeze(const Naive& x) {
  Shape s;
  for (int64_t d : x.shape)
    if (d != 1) s.push_back(d);
  return Naive{x.data, s};
}

Naive n_squeeze(const Naive& x, int64_t dim) {
  dim = x.rank() == 0 ? 0 : norm_dim(dim, x.rank());
  if (x.rank() == 0 || x.shape[static_cast<size_t>(dim)] != 1) return x;
  Shape s = x.shape;
  s.erase(s.begin() + dim);
  return Naive{x.data, s};
}

Naive n_unsqueeze(const Naive& x, int64_t dim) {
  dim = norm_dim(dim, x.rank() + 1);
  Shape s = x.shape;
  s.insert(s.begin() + dim, 1);
  return Naive{x.data, s};
}

Naive n_flatten(const Naive& x, int64_t start, int64_t end) {
  if (x.rank() == 0) return Naive{x.data, {1}};
  start = norm_dim(start, x.rank());
  end = norm_dim(end, x.rank());
  Shape s(x.shape.begin(), x.shape.begin() + start);
  int64_t n = 1;
  for (int64_t d = start; d <= end; ++d) n *= x.shape[static_cast<size_t>(d)];
  s.push_back(n);
  s.insert(s.end(), x.shape.begin() + end + 1, x.shape.end());
  return Naive{x.data, s};
}

Naive n_cat(const std::vector<Naive>& xs, int64_t dim) {
  dim = norm_dim(dim, xs[0].rank());
  Shape out = xs[0].shape;
  out[static_cast<size_t>(dim)] = 0;
  for (const Naive& x : xs) out[static_cast<size_t>(dim)] += x.shape[static_cast<size_t>(dim)];
  Naive r{{}, out};
  for (int64_t i = 0; i < alk::numel(out); ++i) {
    std::vector<int64_t> o = unravel(i, out);
    int64_t at = o[static_cast<size_t>(dim)];
    for (const Naive& x : xs) {
      int64_t n = x.shape[static_cast<size_t>(dim)];
      if (at < n) {
        o[static_cast<size_t>(dim)] = at;
        r.data.push_back(x.at(o));
        break;
      }
      at -= n;
    }
  }
  return r;
}

Naive n_stack(const std::vector<Naive>& xs, int64_t dim) {
  std::vector<Naive> us;
  for (const Naive& x : xs) us.push_back(n_unsqueeze(x, dim));
  return n_cat(us, norm_dim(dim, xs[0].rank() + 1));
}

// PyTorch's split: pieces of `size` along dim, the last one shorter; a dim of size 0
// gives one empty piece.
std::vector<Naive> n_split(const Naive& x, int64_t size, int64_t dim) {
  dim = norm_dim(dim, x.rank());
  const int64_t n = x.shape[static_cast<size_t>(dim)];
  std::vector<Naive> out;
  if (n == 0) return {x};
  for (int64_t at = 0; at < n; at += size) out.push_back(n_slice(x, dim, at, at + size, 1));
  return out;
}

std::vector<Naive> n_chunk(const Naive& x, int64_t chunks, int64_t dim) {
  const int64_t n = x.shape[static_cast<size_t>(norm_dim(dim, x.rank()))];
  return n_split(x, (n + chunks - 1) / chunks, dim);
}

// Whether shape/strides can be viewed as new_shape without a copy, by brute force: a view
// exists iff the element offsets, in row-major order of new_shape, are an affine function
// of the new multi-index.
bool can_view(const Shape& shape, const Shape& strides, const Shape& new_shape) {
  const int64_t n = alk::numel(shape);
  if (n == 0) return true;
  std::vector<int64_t> off(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> idx = unravel(i, shape);
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o += idx[d] * strides[d];
    off[static_cast<size_t>(i)] = o;
  }
  Shape s(new_shape.size(), 0);
  for (size_t k = 0; k < new_shape.size(); ++k) {
    if (new_shape[k] <= 1) continue;
    std::vector<int64_t> e(new_shape.size(), 0);
    e[k] = 1;
    s[k] = off[static_cast<size_t>(ravel(e, new_shape))] - off[0];
  }
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> idx = unravel(i, new_shape);
    int64_t o = off[0];
    for (size_t k = 0; k < new_shape.size(); ++k) o += idx[k] * s[k];
    if (o != off[static_cast<size_t>(i)]) return false;
  }
  return true;
}

Shape resolve(Shape s, int64_t numel) {
  int64_t known = 1;
  for (int64_t d : s)
    if (d != -1) known *= d;
  for (int64_t& d : s)
    if (d == -1) d = numel / known;
  return s;
}

// ---------------------------------------------------------------------------------------
// Random generation.
// ---------------------------------------------------------------------------------------

constexpr int64_t kMaxNumel = 1500;
constexpr int64_t kMaxRank = 6;

struct Rng {
  std::mt19937 g;
  explicit Rng(uint32_t seed) : g(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(g); }
  // A dim index in [0, rank), written negatively half the time.
  int64_t dim(int64_t rank) {
    int64_t d = uniform(0, rank - 1);
    return coin() ? d - rank : d;
  }
};

Shape random_shape(Rng& r) {
  Shape s(static_cast<size_t>(r.uniform(0, 4)));
  for (int64_t& d : s) d = r.uniform(1, 5);
  return s;
}

// A random shape with the given number of elements, possibly with one -1.
Shape random_factorization(Rng& r, int64_t n) {
  Shape s;
  if (n == 0) {
    s.resize(static_cast<size_t>(r.uniform(1, 4)));
    for (int64_t& d : s) d = r.uniform(1, 3);
    s[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(s.size()) - 1))] = 0;
    return s;
  }
  int64_t rank = r.uniform(0, 4);
  if (rank == 0 && n != 1) rank = 1;
  int64_t rem = n;
  for (int64_t k = 0; k + 1 < rank; ++k) {
    std::vector<int64_t> divs;
    for (int64_t d = 1; d <= rem; ++d)
      if (rem % d == 0) divs.push_back(d);
    int64_t d = divs[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(divs.size()) - 1))];
    s.push_back(d);
    rem /= d;
  }
  if (rank > 0) s.push_back(rem);
  std::shuffle(s.begin(), s.end(), r.g);
  if (!s.empty() && r.coin(0.3)) s[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(s.size()) - 1))] = -1;
  return s;
}

Naive naive_iota(const Shape& s, double base) {
  Naive x{{}, s};
  for (int64_t i = 0; i < alk::numel(s); ++i) x.data.push_back(base + static_cast<double>(i));
  return x;
}

Tensor to_alk(const Naive& x) { return alk::tensor(x.data, x.shape); }

// One step of a chain: the same op on both sides. `pure` tracks whether the alk tensor
// is still a view over the original buffer (no copy, no compute).
struct Chain {
  Tensor t;
  Naive n;
  bool pure;
  std::ostringstream log;
  int extra = 0;  // counter for values of extra cat/stack operands
};

void step(Chain& c, Rng& r) {
  const int64_t rank = c.n.rank();
  for (;;) {
    switch (r.uniform(0, 15)) {
      case 0: {  // reshape
        Shape s = random_factorization(r, c.n.numel());
        c.pure = c.pure && can_view(c.t.shape(), c.t.strides(), resolve(s, c.n.numel()));
        c.log << " reshape" << str(s);
        c.t = c.t.reshape(s);
        c.n = n_reshape(c.n, s);
        return;
      }
      case 1: {  // view: works iff a strided view exists
        Shape s = random_factorization(r, c.n.numel());
        c.log << " view" << str(s);
        if (can_view(c.t.shape(), c.t.strides(), resolve(s, c.n.numel()))) {
          c.t = c.t.view(s);
          c.n = n_reshape(c.n, s);
        } else {
          SCOPED_TRACE(c.log.str());
          EXPECT_ALK_ERROR(c.t.view(s), "view", alk::to_string(c.t.shape()), alk::to_string(c.t.strides()), "reshape()");
          c.log << "(throws)";
        }
        return;
      }
      case 2: {  // permute
        std::vector<int64_t> dims(static_cast<size_t>(rank));
        std::iota(dims.begin(), dims.end(), 0);
        std::shuffle(dims.begin(), dims.end(), r.g);
        for (int64_t& d : dims)
          if (r.coin(0.3)) d -= rank;
        c.log << " permute" << str(dims);
        c.t = c.t.permute(dims);
        c.n = n_permute(c.n, dims);
        return;
      }
      case 3: {  // transpose / t
        if (rank < 1) break;
        if (rank >= 2 && r.coin(0.3)) {
          c.log << " t()";
          c.t = c.t.t();
          c.n = n_transpose(c.n, -2, -1);
          return;
        }
        int64_t d0 = r.dim(rank), d1 = r.dim(rank);
        c.log << " transpose(" << d0 << "," << d1 << ")";
        c.t = c.t.transpose(d0, d1);
        c.n = n_transpose(c.n, d0, d1);
        return;
      }
      case 4:
      case 5: {  // slice, with out-of-range and negative bounds
        if (rank < 1) break;
        int64_t d = r.dim(rank);
        int64_t n = c.n.shape[static_cast<size_t>(norm_dim(d, rank))];
        int64_t start = r.uniform(-n - 2, n + 2), end = r.uniform(-n - 2, n + 2), st = r.uniform(1, 3);
        c.log << " slice(" << d << "," << start << "," << end << "," << st << ")";
        c.t = c.t.slice(d, start, end, st);
        c.n = n_slice(c.n, d, start, end, st);
        return;
      }
      case 6: {  // select
        if (rank < 1) break;
        int64_t d = r.dim(rank);
        int64_t n = c.n.shape[static_cast<size_t>(norm_dim(d, rank))];
        if (n == 0) break;
        int64_t i = r.uniform(-n, n - 1);
        c.log << " select(" << d << "," << i << ")";
        c.t = c.t.select(d, i);
        c.n = n_select(c.n, d, i);
        return;
      }
      case 7: {  // expand (size-1 dims grow, others stay or are -1; new leading dims)
        int64_t lead = rank < kMaxRank ? r.uniform(0, std::min<int64_t>(2, kMaxRank - rank)) : 0;
        Shape s;
        int64_t grown = 1;
        for (int64_t i = 0; i < lead; ++i) s.push_back(r.uniform(1, 3));
        for (int64_t d : c.n.shape) {
          if (d == 1 && r.coin())
            s.push_back(r.uniform(0, 4));
          else
            s.push_back(r.coin(0.3) ? -1 : d);
        }
        for (size_t i = 0; i < s.size(); ++i)
          grown *= s[i] == -1 ? c.n.shape[i - static_cast<size_t>(lead)] : s[i];
        if (grown > kMaxNumel) break;
        c.log << " expand" << str(s);
        c.t = c.t.expand(s);
        c.n = n_expand(c.n, s);
        return;
      }
      case 8: {  // squeeze
        if (rank >= 1 && r.coin()) {
          int64_t d = r.dim(rank);
          c.log << " squeeze(" << d << ")";
          c.t = c.t.squeeze(d);
          c.n = n_squeeze(c.n, d);
        } else {
          c.log << " squeeze()";
          c.t = c.t.squeeze();
          c.n = n_squeeze(c.n);
        }
        return;
      }
      case 9: {  // unsqueeze
        if (rank >= kMaxRank) break;
        int64_t d = r.dim(rank + 1);
        c.log << " unsqueeze(" << d << ")";
        c.t = c.t.unsqueeze(d);
        c.n = n_unsqueeze(c.n, d);
        return;
      }
      case 10: {  // flatten
        int64_t s = 0, e = -1;
        if (rank >= 1) {
          int64_t a = r.uniform(0, rank - 1), b = r.uniform(0, rank - 1);
          s = std::min(a, b);
          e = std::max(a, b);
          if (r.coin()) s -= rank;
          if (r.coin()) e -= rank;
          Shape after = n_flatten(c.n, s, e).shape;
          c.pure = c.pure && can_view(c.t.shape(), c.t.strides(), after);
        } else {
          c.pure = false;  // a 0-d flatten reshapes to [1]; always viewable, but keep it simple
        }
        c.log << " flatten(" << s << "," << e << ")";
        c.t = c.t.flatten(s, e);
        c.n = n_flatten(c.n, s, e);
        return;
      }
      case 11: {  // contiguous
        c.log << " contiguous()";
        c.t = c.t.contiguous();
        c.pure = false;
        return;
      }
      case 12: {  // cat with a fresh tensor, before or after
        if (rank < 1) break;
        int64_t d = r.dim(rank);
        Shape s = c.n.shape;
        s[static_cast<size_t>(norm_dim(d, rank))] = r.uniform(0, 3);
        if (alk::numel(s) + c.n.numel() > kMaxNumel) break;
        Naive other = naive_iota(s, 10000.0 * ++c.extra);
        bool first = r.coin();
        c.log << " cat(" << (first ? "x, other" : "other, x") << str(s) << ", " << d << ")";
        c.t = first ? alk::cat({c.t, to_alk(other)}, d) : alk::cat({to_alk(other), c.t}, d);
        c.n = first ? n_cat({c.n, other}, d) : n_cat({other, c.n}, d);
        c.pure = false;
        return;
      }
      case 13: {  // stack with a fresh tensor of the same shape
        if (rank >= kMaxRank || 3 * c.n.numel() > kMaxNumel) break;
        int64_t d = r.dim(rank + 1);
        Naive other = naive_iota(c.n.shape, 10000.0 * ++c.extra);
        c.log << " stack(x, other, " << d << ")";
        c.t = alk::stack({c.t, to_alk(other), c.t}, d);
        c.n = n_stack({c.n, other, c.n}, d);
        c.pure = false;
        return;
      }
      case 14: {  // split / chunk, then continue with one piece
        if (rank < 1) break;
        int64_t d = r.dim(rank);
        int64_t size = r.uniform(1, 4);
        bool use_chunk = r.coin();
        // PyTorch's chunk of an empty dim gives `chunks` empty pieces; not modelled here.
        if (use_chunk && c.n.shape[static_cast<size_t>(norm_dim(d, rank))] == 0) break;
        std::vector<Tensor> ts = use_chunk ? alk::chunk(c.t, size, d) : alk::split(c.t, size, d);
        std::vector<Naive> ns = use_chunk ? n_chunk(c.n, size, d) : n_split(c.n, size, d);
        c.log << (use_chunk ? " chunk(" : " split(") << size << "," << d << ")";
        EXPECT_EQ(ts.size(), ns.size()) << c.log.str();
        if (ts.size() != ns.size()) return;
        for (size_t i = 0; i < ts.size(); ++i) {
          EXPECT_EQ(ts[i].shape(), ns[i].shape) << c.log.str() << " piece " << i;
          if (ts[i].shape() == ns[i].shape) {
            EXPECT_EQ(ts[i].to_vector<double>(), ns[i].data) << c.log.str() << " piece " << i;
          }
        }
        size_t k = static_cast<size_t>(r.uniform(0, static_cast<int64_t>(ts.size()) - 1));
        c.log << "[" << k << "]";
        c.t = ts[k];
        c.n = ns[k];
        return;
      }
      case 15: {  // elementwise compute: what follows are views of a lazy tensor
        c.log << " +1";
        c.t = c.t + 1.0;
        for (double& v : c.n.data) v += 1;
        c.pure = false;
        return;
      }
    }
  }
}

// Checks that the pure-view chain addresses the original buffer where the reference says:
// the naive values of a realized iota base are the linear indices into that buffer.
void expect_addresses_base(const Tensor& t, const Naive& n, const std::string& what) {
  ASSERT_EQ(t.strides().size(), t.shape().size()) << what;
  for (int64_t i = 0; i < n.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, n.shape);
    int64_t off = t.offset();
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    ASSERT_EQ(static_cast<double>(off), n.data[static_cast<size_t>(i)])
        << what << " element " << i << " strides " << str(t.strides()) << " offset " << t.offset();
  }
}

void run_random_chain(uint32_t seed) {
  Rng r(seed);
  const Shape base = random_shape(r);
  const bool lazy_base = r.coin(0.3);
  Chain c;
  c.n = naive_iota(base, 0);
  c.t = to_alk(c.n);
  c.pure = !lazy_base;
  c.log << "seed " << seed << " base " << str(base) << (lazy_base ? " lazy(x+0.5)" : "");
  if (lazy_base) {
    c.t = c.t + 0.5;
    for (double& v : c.n.data) v += 0.5;
    EXPECT_FALSE(c.t.is_realized()) << c.log.str();
  }
  const int64_t steps = r.uniform(1, 5);
  for (int64_t i = 0; i < steps; ++i) {
    try {
      step(c, r);
    } catch (const alk::Error& e) {
      ADD_FAILURE() << c.log.str() << " <- threw: " << e.what();
      return;
    }
    ASSERT_EQ(c.t.shape(), c.n.shape) << c.log.str();
    ASSERT_EQ(c.t.dim(), c.n.rank()) << c.log.str();
    ASSERT_EQ(c.t.numel(), c.n.numel()) << c.log.str();
  }
  if (c.pure) {
    EXPECT_TRUE(c.t.is_realized()) << c.log.str() << ": a view of a realized tensor must not need computing";
    expect_addresses_base(c.t, c.n, c.log.str());
  }
  // ALK_VIEWS_TRACE=1 prints each chain before it is realized (to find a crashing seed).
  if (std::getenv("ALK_VIEWS_TRACE")) std::fprintf(stderr, "%s\n", c.log.str().c_str());
  std::vector<double> got;
  try {
    got = c.t.to_vector<double>();
  } catch (const alk::Error& e) {
    ADD_FAILURE() << c.log.str() << " <- to_vector threw: " << e.what();
    return;
  }
  EXPECT_EQ(got, c.n.data) << c.log.str();
  EXPECT_EQ(c.t.dtype(), alk::DType::F64) << c.log.str();
}

TEST(ViewsRandom, ChainsMatchNaiveReference) {
  for (uint32_t seed = 1; seed <= 600; ++seed) {
    run_random_chain(seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Each op alone, over many random shapes: a failure here names a single op.
TEST(ViewsRandom, SingleOpsMatchNaiveReference) {
  Rng r(4242);
  for (int trial = 0; trial < 300; ++trial) {
    Shape s = random_shape(r);
    Naive n = naive_iota(s, 0);
    Tensor t = to_alk(n);
    const int64_t rank = n.rank();
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), r.g);
    EXPECT_EQ(t.permute(perm).to_vector<double>(), n_permute(n, perm).data) << str(s) << str(perm);
    if (rank >= 1) {
      int64_t d = r.dim(rank);
      int64_t len = n.shape[static_cast<size_t>(norm_dim(d, rank))];
      int64_t a = r.uniform(-len - 3, len + 3), b = r.uniform(-len - 3, len + 3), st = r.uniform(1, 4);
      Tensor sl = t.slice(d, a, b, st);
      Naive nsl = n_slice(n, d, a, b, st);
      EXPECT_EQ(sl.shape(), nsl.shape) << str(s) << " slice " << d << " " << a << " " << b << " " << st;
      EXPECT_EQ(sl.to_vector<double>(), nsl.data) << str(s) << " slice " << d << " " << a << " " << b << " " << st;
      int64_t i = r.uniform(-len, len - 1);
      EXPECT_EQ(t.select(d, i).to_vector<double>(), n_select(n, d, i).data) << str(s) << " select " << d << " " << i;
      int64_t f0 = r.uniform(0, rank - 1), f1 = r.uniform(f0, rank - 1);
      EXPECT_EQ(t.flatten(f0, f1).shape(), n_flatten(n, f0, f1).shape) << str(s) << " flatten " << f0 << " " << f1;
    }
    EXPECT_EQ(t.squeeze().shape(), n_squeeze(n).shape) << str(s);
    int64_t u = r.dim(rank + 1);
    EXPECT_EQ(t.unsqueeze(u).shape(), n_unsqueeze(n, u).shape) << str(s) << " unsqueeze " << u;
    EXPECT_EQ(t.flatten().shape(), Shape{alk::numel(s)}) << str(s);
  }
}

// ---------------------------------------------------------------------------------------
// Directed checks.
// ---------------------------------------------------------------------------------------

std::vector<double> iota_values(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  return v;
}

TEST(ViewsStrides, TransposeExpandSliceShareTheBuffer) {
  Tensor a = alk::tensor(iota_values(24), {2, 3, 4});
  ASSERT_TRUE(a.is_realized());
  EXPECT_EQ(a.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(a.is_contiguous());

  Tensor tr = a.transpose(0, 2);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tr.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(tr.offset(), 0);
  EXPECT_TRUE(tr.is_realized());
  EXPECT_FALSE(tr.is_contiguous());

  Tensor p = a.permute({1, 2, 0});
  EXPECT_EQ(p.strides(), (Shape{4, 1, 12}));

  Tensor col = alk::tensor(std::vector<double>{7, 8, 9}, {3, 1});
  Tensor ex = col.expand({2, 3, 4});
  EXPECT_EQ(ex.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(ex.strides(), (Shape{0, 1, 0}));
  EXPECT_TRUE(ex.is_realized());
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (double v : {7.0, 8.0, 9.0})
      for (int k = 0; k < 4; ++k) want.push_back(v);
  EXPECT_EQ(ex.to_vector<double>(), want);

  Tensor sl = a.slice(2, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(sl.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(sl.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(sl.offset(), 1);
  EXPECT_TRUE(sl.is_realized());

  Tensor se = a.select(1, -1);
  EXPECT_EQ(se.shape(), (Shape{2, 4}));
  EXPECT_EQ(se.strides(), (Shape{12, 1}));
  EXPECT_EQ(se.offset(), 8);
  EXPECT_EQ(se.to_vector<double>(), (std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23}));
}

TEST(ViewsStrides, ViewOfNonContiguousThrowsReshapeCopies) {
  Tensor a = alk::tensor(iota_values(6), {2, 3});
  Tensor at = a.t();  // [3, 2], strides [1, 3]
  ASSERT_EQ(at.strides(), (Shape{1, 3}));
  EXPECT_ALK_ERROR(at.view({6}), "view", "[3, 2]", "[1, 3]", "[6]");
  EXPECT_ALK_ERROR(at.view({2, 3}), "view", "[3, 2]", "[1, 3]", "[2, 3]");
  Tensor r = at.reshape({6});
  EXPECT_EQ(r.shape(), Shape{6});
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(r.is_contiguous());

  // Splitting a dim of a transposed tensor is still a view.
  Tensor v = alk::tensor(iota_values(12), {3, 4}).t().view({2, 2, 3});
  EXPECT_TRUE(v.is_realized());
  EXPECT_EQ(v.strides(), (Shape{2, 1, 4}));
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));

  // reshape of a viewable tensor does not copy.
  Tensor rv = a.reshape({3, 2});
  EXPECT_TRUE(rv.is_realized());
  EXPECT_EQ(rv.strides(), (Shape{2, 1}));

  // An expanded tensor cannot be flattened as a view; reshape copies.
  Tensor e = alk::tensor(std::vector<double>{1, 2}, {2, 1}).expand({2, 3});
  EXPECT_ALK_ERROR(e.view({6}), "view", "[2, 3]", "[1, 0]", "[6]");
  EXPECT_EQ(e.reshape({6}).to_vector<double>(), (std::vector<double>{1, 1, 1, 2, 2, 2}));
  // ... but merging two stride-0 dims is a view.
  Tensor z = alk::tensor(std::vector<double>{5}, {1, 1}).expand({2, 3});
  Tensor zv = z.view({6});
  EXPECT_EQ(zv.strides(), Shape{0});
  EXPECT_EQ(zv.to_vector<double>(), std::vector<double>(6, 5.0));
}

TEST(ViewsStrides, ContiguousCopiesOnlyWhenNeeded) {
  Tensor a = alk::tensor(iota_values(6), {2, 3});
  Tensor c = a.contiguous();
  EXPECT_TRUE(c.is_realized());
  EXPECT_EQ(c.impl(), a.impl());  // same handle back: no copy
  Tensor ct = a.t().contiguous();
  EXPECT_TRUE(ct.is_contiguous());
  EXPECT_EQ(ct.strides(), (Shape{2, 1}));
  EXPECT_EQ(ct.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // The source is untouched.
  EXPECT_EQ(a.to_vector<double>(), iota_values(6));
}

TEST(ViewsLazy, ViewsOfUnrealizedTensors) {
  Tensor a = alk::tensor(iota_values(12), {3, 4});
  Tensor lazy = a + 1.0;
  ASSERT_FALSE(lazy.is_realized());
  Tensor v = lazy.t().slice(0, 1, 3);  // [2, 3]: columns 1, 2 of (a + 1)
  EXPECT_FALSE(v.is_realized());
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{2, 6, 10, 3, 7, 11}));

  Tensor w = (a * 2.0).reshape({2, 6}).select(0, 1).slice(0, -4, 100, 2);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{16, 20}));

  Tensor e = (alk::tensor(std::vector<double>{1, 2, 3}, {3}) - 1.0).unsqueeze(1).expand({3, 2}).t();
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
}

TEST(ViewsSlice, PythonClamping) {
  Tensor a = alk::tensor(iota_values(5), {5});
  auto vals = [&](int64_t s, int64_t e, int64_t st = 1) { return a.slice(0, s, e, st).to_vector<double>(); };
  EXPECT_EQ(vals(-2, 5), (std::vector<double>{3, 4}));
  EXPECT_EQ(vals(-100, 2), (std::vector<double>{0, 1}));
  EXPECT_EQ(vals(1, -1), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(vals(3, 1), std::vector<double>{});
  EXPECT_EQ(vals(7, 9), std::vector<double>{});
  EXPECT_EQ(vals(0, 100, 2), (std::vector<double>{0, 2, 4}));
  EXPECT_EQ(vals(-4, -100), std::vector<double>{});
  EXPECT_EQ(vals(1, 5, 3), (std::vector<double>{1, 4}));
  EXPECT_EQ(a.slice(0, 4, 2).shape(), Shape{0});
}

TEST(ViewsSplit, PiecesAndCounts) {
  Tensor a = alk::tensor(iota_values(7), {7});
  auto pieces = alk::split(a, 3);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].to_vector<double>(), std::vector<double>{6});
  auto ch = alk::chunk(a, 3);  // ceil(7/3) = 3 per chunk
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[1].to_vector<double>(), (std::vector<double>{3, 4, 5}));
  auto ch4 = alk::chunk(alk::tensor(iota_values(5), {5}), 4);  // PyTorch: sizes 2, 2, 1
  ASSERT_EQ(ch4.size(), 3u);
  EXPECT_EQ(ch4[2].shape(), Shape{1});
  // Pieces of a realized tensor are views of it.
  for (const Tensor& p : pieces) EXPECT_TRUE(p.is_realized());
}

// PyTorch: splitting a dim of size 0 gives one empty piece (torch.empty(0, 3).split(2)
// has length 1), so code that takes piece [0] keeps working.
TEST(ViewsSplit, EmptyDimGivesOneEmptyPiece) {
  Tensor e = alk::zeros({0, 3}, alk::DType::F64);
  auto pieces = alk::split(e, 2, 0);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].shape(), (Shape{0, 3}));
}

TEST(ViewsCat, ViewsAndMixedOperands) {
  Tensor a = alk::tensor(iota_values(6), {2, 3});
  Tensor b = alk::tensor(std::vector<double>{10, 11}, {2, 1});
  Tensor c = alk::cat({a.t(), b.t()}, 0);  // [4, 2]
  EXPECT_EQ(c.shape(), (Shape{4, 2}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5, 10, 11}));
  Tensor s = alk::stack({a.select(1, 0), a.select(1, 2)}, -1);  // [2, 2]
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{0, 2, 3, 5}));
  Tensor s0 = alk::stack({a, a + 1.0}, 1);  // [2, 2, 3]
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s0.to_vector<double>(), (std::vector<double>{0, 1, 2, 1, 2, 3, 3, 4, 5, 4, 5, 6}));
}

TEST(ViewsZeroDim, ScalarViews) {
  Tensor s = alk::tensor(std::vector<double>{4.5}, {});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.unsqueeze(0).shape(), Shape{1});
  EXPECT_EQ(s.reshape({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(s.flatten().shape(), Shape{1});
  EXPECT_EQ(s.expand({2, 3}).strides(), (Shape{0, 0}));
  EXPECT_EQ(s.expand({2, 3}).to_vector<double>(), std::vector<double>(6, 4.5));
  EXPECT_EQ(s.reshape({1, 1, 1}).squeeze().shape(), Shape{});
  EXPECT_EQ(s.permute({}).to_vector<double>(), std::vector<double>{4.5});
}

// A zero-element tensor that is an intermediate of a realize (not itself a target) must
// work like any other: realizing gives an empty result. Runs in a child process because
// the failure mode is a segfault (a kernel argument with no buffer).
TEST(ViewsZeroSize, LazyEmptyIntermediateDoesNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto run = [](int which) {
    Tensor e = alk::tensor(std::vector<double>{}, {2, 0});
    Tensor y = alk::tensor(std::vector<double>{1, 2, 3}, {3, 1});
    Tensor out;
    if (which == 0) out = (e + 1.0).t() + 1.0;            // [0, 2]
    if (which == 1) out = alk::cat({e, e}, 0) + 1.0;       // [4, 0]
    if (which == 2) out = alk::cat({(e + 1.0).t(), y.t().expand({0, 3})}, 1);  // [0, 5]
    bool ok = out.to_vector<double>().empty() && out.numel() == 0;
    std::exit(ok ? 0 : 1);
  };
  for (int which = 0; which < 3; ++which)
    EXPECT_EXIT(run(which), ::testing::ExitedWithCode(0), "") << "case " << which;
}

}  // namespace
