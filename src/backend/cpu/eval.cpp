#include "backend/cpu/eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "backend/cpu/thread_pool.h"

namespace alk::cpu {

namespace {

using expr::Fn;
using expr::Type;

// Registers: float for F32, double for F64, int64 for I64 and Bool (0/1).
template <class F>
decltype(auto) with_reg_type(Type t, F&& f) {
  switch (t) {
    case Type::F32: return f(float{});
    case Type::F64: return f(double{});
    case Type::I64:
    case Type::Bool: break;
  }
  return f(int64_t{});
}

// How an input is walked over a block of consecutive linear indices.
enum class Walk : uint8_t { Linear, Uniform, Strided };

Walk walk_of(const View& v) {
  bool uniform = true;
  for (size_t d = 0; d < v.shape.size(); ++d)
    if (v.shape[d] != 1 && v.strides[d] != 0) uniform = false;
  if (uniform) return Walk::Uniform;
  int64_t expect = 1;
  for (size_t d = v.shape.size(); d-- > 0;) {
    if (v.shape[d] != 1 && v.strides[d] != expect) return Walk::Strided;
    expect *= v.shape[d];
  }
  return Walk::Linear;
}

template <class R>
void load_at(const View& v, const int64_t* offs, int n, R* dst) {
  const void* p = v.data;
  switch (v.dtype) {
    case DType::F32: for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(static_cast<const float*>(p)[offs[j]]); break;
    case DType::F64: for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(static_cast<const double*>(p)[offs[j]]); break;
    case DType::I64: for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(static_cast<const int64_t*>(p)[offs[j]]); break;
    case DType::I32: for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(static_cast<const int32_t*>(p)[offs[j]]); break;
    case DType::U8: for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(static_cast<const uint8_t*>(p)[offs[j]]); break;
    case DType::Bool:
      for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(static_cast<const uint8_t*>(p)[offs[j]] != 0);
      break;
    case DType::F16:
      for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(f16_to_f32(static_cast<const uint16_t*>(p)[offs[j]]));
      break;
    case DType::BF16:
      for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(bf16_to_f32(static_cast<const uint16_t*>(p)[offs[j]]));
      break;
  }
}

template <class R>
void load_linear(const View& v, int64_t start, int n, R* dst) {
  const void* p = v.data;
  switch (v.dtype) {
    case DType::F32: { auto s = static_cast<const float*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(s[j]); break; }
    case DType::F64: { auto s = static_cast<const double*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(s[j]); break; }
    case DType::I64: { auto s = static_cast<const int64_t*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(s[j]); break; }
    case DType::I32: { auto s = static_cast<const int32_t*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(s[j]); break; }
    case DType::U8: { auto s = static_cast<const uint8_t*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(s[j]); break; }
    case DType::Bool: { auto s = static_cast<const uint8_t*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(s[j] != 0); break; }
    case DType::F16: { auto s = static_cast<const uint16_t*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(f16_to_f32(s[j])); break; }
    case DType::BF16: { auto s = static_cast<const uint16_t*>(p) + start; for (int j = 0; j < n; ++j) dst[j] = static_cast<R>(bf16_to_f32(s[j])); break; }
  }
}

template <class R>
void store_linear(const R* src, int n, const View& out, int64_t start) {
  void* p = out.data;
  switch (out.dtype) {
    case DType::F32: { auto d = static_cast<float*>(p) + start; for (int j = 0; j < n; ++j) d[j] = static_cast<float>(src[j]); break; }
    case DType::F64: { auto d = static_cast<double*>(p) + start; for (int j = 0; j < n; ++j) d[j] = static_cast<double>(src[j]); break; }
    case DType::I64: { auto d = static_cast<int64_t*>(p) + start; for (int j = 0; j < n; ++j) d[j] = static_cast<int64_t>(src[j]); break; }
    case DType::I32: { auto d = static_cast<int32_t*>(p) + start; for (int j = 0; j < n; ++j) d[j] = static_cast<int32_t>(static_cast<int64_t>(src[j])); break; }
    case DType::U8: { auto d = static_cast<uint8_t*>(p) + start; for (int j = 0; j < n; ++j) d[j] = static_cast<uint8_t>(static_cast<int64_t>(src[j])); break; }
    case DType::Bool: { auto d = static_cast<uint8_t*>(p) + start; for (int j = 0; j < n; ++j) d[j] = src[j] != 0; break; }
    case DType::F16: { auto d = static_cast<uint16_t*>(p) + start; for (int j = 0; j < n; ++j) d[j] = f32_to_f16(static_cast<float>(src[j])); break; }
    case DType::BF16: { auto d = static_cast<uint16_t*>(p) + start; for (int j = 0; j < n; ++j) d[j] = f32_to_bf16(static_cast<float>(src[j])); break; }
  }
}

// Integer arithmetic wraps (two's complement) instead of overflowing.
inline int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
inline int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
inline int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

template <class T>
T math1(Fn f, T x) {
  if constexpr (std::is_integral_v<T>) {
    switch (f) {
      case Fn::Neg: return wrap_sub(0, x);
      case Fn::Abs: return x < 0 ? wrap_sub(0, x) : x;
      case Fn::Floor: case Fn::Ceil: case Fn::Round: return x;
      case Fn::Not: return !x;
      default: return static_cast<T>(math1<double>(f, static_cast<double>(x)));
    }
  } else {
    switch (f) {
      case Fn::Neg: return -x;
      case Fn::Not: return !x;
      case Fn::Exp: return std::exp(x);
      case Fn::Log: return std::log(x);
      case Fn::Log1p: return std::log1p(x);
      case Fn::Expm1: return std::expm1(x);
      case Fn::Sqrt: return std::sqrt(x);
      case Fn::Rsqrt: return T(1) / std::sqrt(x);
      case Fn::Sin: return std::sin(x);
      case Fn::Cos: return std::cos(x);
      case Fn::Tanh: return std::tanh(x);
      case Fn::Erf: return std::erf(x);
      case Fn::Abs: return std::fabs(x);
      case Fn::Floor: return std::floor(x);
      case Fn::Ceil: return std::ceil(x);
      case Fn::Round: return std::nearbyint(x);  // default rounding mode: half to even
      default: return x;
    }
  }
}

// Shape of one evaluation: per-node registers for a block, and each input's walk.
class Block {
 public:
  Block(const expr::Expr& e, std::span<const View> inputs, const std::vector<int64_t>& shape)
      : e_(e), inputs_(inputs), shape_(shape), regs_(e.nodes.size() * kBlock), offs_(kBlock) {
    for (const View& v : inputs) walks_.push_back(walk_of(v));
  }

  // Evaluates elements [begin, begin + n) (n <= kBlock); returns the root's register.
  const void* run(int64_t begin, int n) {
    for (size_t i = 0; i < e_.nodes.size(); ++i) {
      const expr::Node& nd = e_.nodes[i];
      with_reg_type(nd.type, [&](auto tag) {
        using T = decltype(tag);
        compute<T>(nd, reinterpret_cast<T*>(reg(i)), begin, n);
      });
    }
    return reg(e_.nodes.size() - 1);
  }

 private:
  uint64_t* reg(size_t i) { return regs_.data() + i * kBlock; }
  Type type(int arg) const { return e_.nodes[static_cast<size_t>(arg)].type; }
  template <class T>
  const T* arg(const expr::Node& nd, int k) {
    return reinterpret_cast<const T*>(reg(static_cast<size_t>(nd.args[k])));
  }

  void offsets(const View& v, int64_t begin, int n) {
    const int rank = static_cast<int>(shape_.size());
    int64_t coord[16], off = v.offset, rem = begin;
    for (int d = rank; d-- > 0;) {
      coord[d] = rem % shape_[d];
      rem /= shape_[d];
      off += coord[d] * v.strides[d];
    }
    for (int j = 0; j < n; ++j) {
      offs_[j] = off;
      for (int d = rank; d-- > 0;) {  // advance the coordinate like an odometer
        off += v.strides[d];
        if (++coord[d] < shape_[d]) break;
        off -= coord[d] * v.strides[d];
        coord[d] = 0;
      }
    }
  }

  template <class T>
  void compute(const expr::Node& nd, T* out, int64_t begin, int n) {
    switch (nd.fn) {
      case Fn::Input: {
        const View& v = inputs_[static_cast<size_t>(nd.slot)];
        switch (walks_[static_cast<size_t>(nd.slot)]) {
          case Walk::Linear: load_linear(v, v.offset + begin, n, out); break;
          case Walk::Uniform: load_linear(v, v.offset, 1, out); std::fill(out + 1, out + n, out[0]); break;
          case Walk::Strided: offsets(v, begin, n); load_at(v, offs_.data(), n, out); break;
        }
        return;
      }
      case Fn::Const: std::fill(out, out + n, static_cast<T>(nd.value)); return;
      case Fn::Cast:
        with_reg_type(type(nd.args[0]), [&](auto tag) {
          using S = decltype(tag);
          const S* a = arg<S>(nd, 0);
          if (nd.type == Type::Bool)
            for (int j = 0; j < n; ++j) out[j] = a[j] != 0;
          else
            for (int j = 0; j < n; ++j) out[j] = static_cast<T>(a[j]);
        });
        return;
      case Fn::Lt: case Fn::Le: case Fn::Gt: case Fn::Ge: case Fn::Eq: case Fn::Ne:
        with_reg_type(type(nd.args[0]), [&](auto tag) { compare(nd, arg<decltype(tag)>(nd, 0), arg<decltype(tag)>(nd, 1), out, n); });
        return;
      case Fn::Select: {
        const int64_t* c = arg<int64_t>(nd, 0);
        const T *a = arg<T>(nd, 1), *b = arg<T>(nd, 2);
        for (int j = 0; j < n; ++j) out[j] = c[j] ? a[j] : b[j];
        return;
      }
      case Fn::Add: case Fn::Sub: case Fn::Mul: case Fn::Div: case Fn::Pow: case Fn::Max: case Fn::Min:
      case Fn::And: case Fn::Or:
        binary(nd.fn, arg<T>(nd, 0), arg<T>(nd, 1), out, n);
        return;
      default: {
        const T* a = arg<T>(nd, 0);
        const Fn f = nd.fn;
        if (f == Fn::Neg && !std::is_integral_v<T>) {
          for (int j = 0; j < n; ++j) out[j] = -a[j];
        } else if (f == Fn::Exp && std::is_same_v<T, float>) {
          for (int j = 0; j < n; ++j) out[j] = static_cast<T>(std::exp(a[j]));
        } else {
          for (int j = 0; j < n; ++j) out[j] = math1<T>(f, a[j]);
        }
        return;
      }
    }
  }

  template <class S, class T>
  static void compare(const expr::Node& nd, const S* a, const S* b, T* out, int n) {
    switch (nd.fn) {
      case Fn::Lt: for (int j = 0; j < n; ++j) out[j] = a[j] < b[j]; break;
      case Fn::Le: for (int j = 0; j < n; ++j) out[j] = a[j] <= b[j]; break;
      case Fn::Gt: for (int j = 0; j < n; ++j) out[j] = a[j] > b[j]; break;
      case Fn::Ge: for (int j = 0; j < n; ++j) out[j] = a[j] >= b[j]; break;
      case Fn::Eq: for (int j = 0; j < n; ++j) out[j] = a[j] == b[j]; break;
      default: for (int j = 0; j < n; ++j) out[j] = a[j] != b[j]; break;
    }
  }

  template <class T>
  static void binary(Fn f, const T* a, const T* b, T* out, int n) {
    if constexpr (std::is_integral_v<T>) {
      switch (f) {
        case Fn::Add: for (int j = 0; j < n; ++j) out[j] = wrap_add(a[j], b[j]); return;
        case Fn::Sub: for (int j = 0; j < n; ++j) out[j] = wrap_sub(a[j], b[j]); return;
        case Fn::Mul: for (int j = 0; j < n; ++j) out[j] = wrap_mul(a[j], b[j]); return;
        case Fn::Div:
          for (int j = 0; j < n; ++j)
            out[j] = b[j] == 0 || (b[j] == -1 && a[j] == std::numeric_limits<int64_t>::min()) ? 0 : a[j] / b[j];
          return;
        case Fn::Pow:
          for (int j = 0; j < n; ++j) out[j] = static_cast<T>(std::pow(static_cast<double>(a[j]), static_cast<double>(b[j])));
          return;
        default: break;
      }
    } else {
      switch (f) {
        case Fn::Add: for (int j = 0; j < n; ++j) out[j] = a[j] + b[j]; return;
        case Fn::Sub: for (int j = 0; j < n; ++j) out[j] = a[j] - b[j]; return;
        case Fn::Mul: for (int j = 0; j < n; ++j) out[j] = a[j] * b[j]; return;
        case Fn::Div: for (int j = 0; j < n; ++j) out[j] = a[j] / b[j]; return;
        case Fn::Pow: for (int j = 0; j < n; ++j) out[j] = std::pow(a[j], b[j]); return;
        default: break;
      }
    }
    switch (f) {
      // NaN propagates through max/min, as in PyTorch's maximum/minimum.
      case Fn::Max: for (int j = 0; j < n; ++j) out[j] = (a[j] != a[j] || a[j] > b[j]) ? a[j] : b[j]; return;
      case Fn::Min: for (int j = 0; j < n; ++j) out[j] = (a[j] != a[j] || a[j] < b[j]) ? a[j] : b[j]; return;
      case Fn::And: for (int j = 0; j < n; ++j) out[j] = (a[j] != 0) && (b[j] != 0); return;
      case Fn::Or: for (int j = 0; j < n; ++j) out[j] = (a[j] != 0) || (b[j] != 0); return;
      default: return;
    }
  }

  const expr::Expr& e_;
  std::span<const View> inputs_;
  const std::vector<int64_t>& shape_;
  std::vector<uint64_t> regs_;
  std::vector<int64_t> offs_;
  std::vector<Walk> walks_;
};

constexpr int64_t kGrain = 16384;  // elements per task: amortizes the pool's hand-off

}  // namespace

void eval_map(const expr::Expr& e, std::span<const View> inputs, const View& out) {
  const int64_t n = out.numel();
  const Type root = e.type();
  parallel_for((n + kBlock - 1) / kBlock, kGrain / kBlock, [&](int64_t b0, int64_t b1) {
    Block block(e, inputs, out.shape);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock;
      const int len = static_cast<int>(std::min<int64_t>(kBlock, n - begin));
      const void* r = block.run(begin, len);
      with_reg_type(root, [&](auto tag) {
        store_linear(static_cast<const decltype(tag)*>(r), len, out, out.offset + begin);
      });
    }
  });
}

namespace {

template <class Acc>
struct Reducer {
  Reduction op;
  Acc identity() const {
    switch (op) {
      case Reduction::Sum: return 0;
      case Reduction::Prod: return 1;
      case Reduction::Max: return std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::lowest();
      case Reduction::Min: return std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::max();
    }
    return 0;
  }
  Acc combine(Acc a, Acc b) const {
    switch (op) {
      case Reduction::Sum:
        if constexpr (std::is_integral_v<Acc>) return wrap_add(a, b); else return a + b;
      case Reduction::Prod:
        if constexpr (std::is_integral_v<Acc>) return wrap_mul(a, b); else return a * b;
      case Reduction::Max: return (a != a || a > b) ? a : b;  // NaN wins, as in PyTorch
      case Reduction::Min: return (a != a || a < b) ? a : b;
    }
    return a;
  }
};

// Reduces e over the trailing `r` elements of each row of a [rows, r] iteration space.
template <class T, class Acc>
void reduce_rows(const expr::Expr& e, std::span<const View> inputs, const std::vector<int64_t>& shape,
                 int64_t rows, int64_t r, Reduction op, const View& out) {
  Reducer<Acc> red{op};
  if (rows == 1 && r >= 2 * kGrain) {
    // One output: split the row across threads, combine partials in a fixed order.
    const int64_t blocks = (r + kBlock - 1) / kBlock;
    const int64_t parts = std::min<int64_t>(num_threads() * 4, blocks);
    std::vector<Acc> partial(static_cast<size_t>(parts), red.identity());
    parallel_for(parts, 1, [&](int64_t p0, int64_t p1) {
      Block block(e, inputs, shape);
      for (int64_t p = p0; p < p1; ++p) {
        Acc acc = red.identity();
        for (int64_t b = blocks * p / parts; b < blocks * (p + 1) / parts; ++b) {
          const int64_t begin = b * kBlock;
          const int len = static_cast<int>(std::min<int64_t>(kBlock, r - begin));
          const T* v = static_cast<const T*>(block.run(begin, len));
          for (int j = 0; j < len; ++j) acc = red.combine(acc, static_cast<Acc>(v[j]));
        }
        partial[static_cast<size_t>(p)] = acc;
      }
    });
    Acc acc = red.identity();
    for (Acc a : partial) acc = red.combine(acc, a);
    store_linear(&acc, 1, out, out.offset);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(r, 1));
  parallel_for(rows, grain, [&](int64_t o0, int64_t o1) {
    Block block(e, inputs, shape);
    std::vector<Acc> acc(static_cast<size_t>(o1 - o0), red.identity());
    const int64_t end = o1 * r;
    for (int64_t begin = o0 * r; begin < end; begin += kBlock) {
      const int len = static_cast<int>(std::min<int64_t>(kBlock, end - begin));
      const T* v = static_cast<const T*>(block.run(begin, len));
      int64_t row = begin / r - o0, left = r - begin % r;
      for (int j = 0; j < len; ++j) {
        acc[static_cast<size_t>(row)] = red.combine(acc[static_cast<size_t>(row)], static_cast<Acc>(v[j]));
        if (--left == 0) {
          ++row;
          left = r;
        }
      }
    }
    store_linear(acc.data(), static_cast<int>(o1 - o0), out, out.offset + o0);
  });
}

}  // namespace

void eval_reduce(const expr::Expr& e, std::span<const View> inputs, const std::vector<int64_t>& shape,
                 const std::vector<int>& axes, Reduction op, const View& out) {
  // Permute the iteration space so kept dims come first and reduced dims last: each
  // output is then one contiguous run of r linear indices.
  std::vector<int> perm;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) perm.push_back(d);
  perm.insert(perm.end(), axes.begin(), axes.end());
  std::vector<int64_t> pshape;
  for (int d : perm) pshape.push_back(shape[static_cast<size_t>(d)]);
  std::vector<View> pin(inputs.begin(), inputs.end());
  for (View& v : pin) {
    std::vector<int64_t> st;
    for (int d : perm) st.push_back(v.strides[static_cast<size_t>(d)]);
    v.shape = pshape;
    v.strides = st;
  }
  int64_t r = 1;
  for (int a : axes) r *= shape[static_cast<size_t>(a)];
  const int64_t rows = out.numel();
  if (rows == 0) return;
  if (r == 0) {  // empty reduction: the identity
    with_reg_type(e.type(), [&](auto tag) {
      using T = decltype(tag);
      T id = Reducer<T>{op}.identity();
      for (int64_t i = 0; i < rows; ++i) store_linear(&id, 1, out, out.offset + i);
    });
    return;
  }
  switch (e.type()) {
    case Type::F32: reduce_rows<float, double>(e, pin, pshape, rows, r, op, out); break;
    case Type::F64: reduce_rows<double, double>(e, pin, pshape, rows, r, op, out); break;
    default: reduce_rows<int64_t, int64_t>(e, pin, pshape, rows, r, op, out); break;
  }
}

}  // namespace alk::cpu
