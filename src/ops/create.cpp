// Tensor creation: from host data (realized at once), constants (a lazy one-element
// node broadcast to the shape, so it fuses into consumers as a literal), ranges, and
// random tensors (lazy Random nodes keyed by the generator's (seed, offset)).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/element.h"
#include "graph/autograd.h"
#include "graph/generator.h"
#include "ops/ops.h"

namespace alk {

namespace {

void check_shape(const Shape& shape, const char* op, Loc loc) {
  for (int64_t s : shape) check(s >= 0, op, loc, "negative dimension ", s, " in shape ", to_string(shape));
  // A zero dim makes the tensor empty, but the strides of the other dims are still products of
  // their sizes (contiguous_strides), which must not overflow (found by fuzz_npy).
  int64_t strided = 1;
  for (int64_t s : shape)
    check(!__builtin_mul_overflow(strided, std::max<int64_t>(s, 1), &strided), op, loc, "shape ", to_string(shape),
          " is too large (its element count overflows 64 bits)");
}

template <class T>
Tensor from_vector(const std::vector<T>& data, Shape shape, DType dtype, Loc loc) {
  check_shape(shape, "tensor", loc);
  check(numel(shape) == static_cast<int64_t>(data.size()), "tensor", loc, "shape ", to_string(shape), " needs ",
        numel(shape), " elements, got ", data.size());
  std::vector<unsigned char> host(data.size() * dtype_size(dtype));
  for (size_t i = 0; i < data.size(); ++i)
    store_double(host.data(), dtype, static_cast<int64_t>(i), static_cast<double>(data[i]));
  if constexpr (std::is_same_v<T, int64_t>)  // exact; memcpy of no bytes may not be given null (found by fuzz_mnist)
    if (!host.empty()) std::memcpy(host.data(), data.data(), host.size());
  return tensor_from_host(host.data(), std::move(shape), dtype, default_device());
}

struct Generator {
  uint64_t seed = 0x5eed;
  uint64_t offset = 0;
};
// The state and its lock (graph/generator.h).
std::mutex& generator_mutex() {
  static std::mutex m;
  return m;
}
Generator& generator() {
  static Generator g;
  return g;
}

Tensor random_tensor(RandomDistribution dist, double low, double high, Shape shape, DType dtype, const char* op,
                     Loc loc) {
  check_shape(shape, op, loc);
  RandomParams p;
  {
    std::lock_guard lock(generator_mutex());
    Generator& g = generator();
    p = RandomParams{static_cast<int>(dist), g.seed, g.offset, low, high};
    g.offset += static_cast<uint64_t>(numel(shape));
  }
  return make_node(OpId::Random, std::move(shape), dtype, {}, p, loc);
}

}  // namespace

Tensor tensor(const std::vector<float>& d, Shape s, Loc loc) { return from_vector(d, std::move(s), DType::F32, loc); }
Tensor tensor(const std::vector<double>& d, Shape s, Loc loc) { return from_vector(d, std::move(s), DType::F64, loc); }
Tensor tensor(const std::vector<int64_t>& d, Shape s, Loc loc) { return from_vector(d, std::move(s), DType::I64, loc); }
Tensor tensor(const std::vector<int32_t>& d, Shape s, Loc loc) { return from_vector(d, std::move(s), DType::I32, loc); }
Tensor tensor(const std::vector<uint8_t>& d, Shape s, DType dtype, Loc loc) {
  return from_vector(d, std::move(s), dtype, loc);
}

Tensor from_bytes(const void* data, size_t bytes, Shape shape, DType dtype, Loc loc) {
  check_shape(shape, "from_bytes", loc);
  size_t need = static_cast<size_t>(numel(shape)) * dtype_size(dtype);
  check(bytes == need, "from_bytes", loc, "shape ", to_string(shape), " of ", dtype_name(dtype), " needs ", need,
        " bytes, got ", bytes);
  return tensor_from_host(data, std::move(shape), dtype, default_device());
}

Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

Tensor full(Shape shape, double value, DType dtype, Loc loc) {
  check_shape(shape, "full", loc);
  Tensor one = make_node(OpId::Const, {}, dtype, {}, ConstParams{value}, loc);
  if (shape.empty()) return one;
  return make_view(one, shape, Shape(shape.size(), 0), 0);
}
Tensor zeros(Shape shape, DType dtype, Loc loc) { return full(std::move(shape), 0, dtype, loc); }
Tensor ones(Shape shape, DType dtype, Loc loc) { return full(std::move(shape), 1, dtype, loc); }
Tensor zeros_like(const Tensor& t) {
  DeviceGuard on(t.device());
  return zeros(t.shape(), t.dtype());
}
Tensor ones_like(const Tensor& t) {
  DeviceGuard on(t.device());
  return ones(t.shape(), t.dtype());
}

Tensor arange(double start, double end, double step, DType dtype, Loc loc) {
  check(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange", loc,
        "invalid range start=", start, " end=", end, " step=", step);
  check((end - start) / step >= 0, "arange", loc, "step ", step, " does not move from ", start, " toward ", end);
  int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  std::vector<unsigned char> host(static_cast<size_t>(n) * dtype_size(dtype));
  for (int64_t i = 0; i < n; ++i) store_double(host.data(), dtype, i, start + i * step);
  return tensor_from_host(host.data(), {n}, dtype, default_device());
}
Tensor arange(int64_t end, Loc loc) { return arange(0, static_cast<double>(end), 1, DType::I64, loc); }

Tensor linspace(double start, double end, int64_t steps, DType dtype, Loc loc) {
  check(steps >= 0, "linspace", loc, "steps must be non-negative, got ", steps);
  std::vector<unsigned char> host(static_cast<size_t>(steps) * dtype_size(dtype));
  double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  for (int64_t i = 0; i < steps; ++i) {
    // Fill from both ends so the last value is exactly `end`, as PyTorch does.
    double v = i < steps / 2 ? start + delta * i : end - delta * (steps - 1 - i);
    store_double(host.data(), dtype, i, v);
  }
  return tensor_from_host(host.data(), {steps}, dtype, default_device());
}

Tensor eye(int64_t n, int64_t m, DType dtype, Loc loc) {
  if (m < 0) m = n;
  check(n >= 0, "eye", loc, "n must be non-negative, got ", n);
  std::vector<unsigned char> host(static_cast<size_t>(n * m) * dtype_size(dtype));
  for (int64_t i = 0; i < n * m; ++i) store_double(host.data(), dtype, i, i / m == i % m);
  return tensor_from_host(host.data(), {n, m}, dtype, default_device());
}

void manual_seed(uint64_t seed) { set_random_state(seed, 0); }
uint64_t random_seed() {
  std::lock_guard lock(generator_mutex());
  return generator().seed;
}
uint64_t random_offset() {
  std::lock_guard lock(generator_mutex());
  return generator().offset;
}
void set_random_state(uint64_t seed, uint64_t offset) {
  std::lock_guard lock(generator_mutex());
  generator() = {seed, offset};
}
uint64_t advance_random_offset(uint64_t n) {
  std::lock_guard lock(generator_mutex());
  const uint64_t at = generator().offset;
  generator().offset += n;
  return at;
}

Tensor rand(Shape shape, DType dtype, Loc loc) {
  check(is_floating(dtype), "rand", loc, "needs a floating dtype, got ", dtype_name(dtype));
  return random_tensor(RandomDistribution::Uniform, 0, 1, std::move(shape), dtype, "rand", loc);
}
Tensor randn(Shape shape, DType dtype, Loc loc) {
  check(is_floating(dtype), "randn", loc, "needs a floating dtype, got ", dtype_name(dtype));
  return random_tensor(RandomDistribution::Normal, 0, 1, std::move(shape), dtype, "randn", loc);
}
Tensor randint(int64_t low, int64_t high, Shape shape, DType dtype, Loc loc) {
  check(low < high, "randint", loc, "empty range [", low, ", ", high, ")");
  return random_tensor(RandomDistribution::Integer, static_cast<double>(low), static_cast<double>(high),
                       std::move(shape), dtype, "randint", loc);
}

Tensor dropout_mask(Shape shape, double p, Loc loc) {
  check(p >= 0 && p <= 1, "dropout", loc, "probability must be in [0, 1], got ", p);
  return rand(std::move(shape), DType::F32, loc) >= p;
}

Tensor dropout(const Tensor& x, double p, bool training, Loc loc) {
  check_floating(x, "dropout", loc);
  check(p >= 0 && p <= 1, "dropout", loc, "probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  DeviceGuard on(x.device());  // the mask is drawn where x lives
  return where(dropout_mask(x.shape(), p, loc), x * (1.0 / (1.0 - p)), 0.0, loc);
}

}  // namespace alk
