// The ops a KV-cache decode step is built from (include/alk/generate.h): the cache write,
// attention of one query row per slot over its cached length, and sampling on the device.
// Shape and dtype rules here; the kernels are each backend's (src/backend/cpu/kernels_decode.cpp
// is the reference).
#include <cmath>

#include "alk/generate.h"
#include "graph/autograd.h"
#include "ops/ops.h"

namespace alk {

namespace {

void check_index_vector(const Tensor& t, int64_t slots, const char* what, const char* op, Loc loc) {
  check_defined(t, op, loc);
  check(t.dtype() == DType::I64 || t.dtype() == DType::I32, op, loc, what, " must be i64 or i32, got ",
        dtype_name(t.dtype()));
  check(t.dim() == 1 && t.shape()[0] == slots, op, loc, what, " must be [", slots, "] (one per slot), got ",
        to_string(t.shape()));
}

void check_cache(const Tensor& cache, const char* name, const char* op, Loc loc) {
  check_defined(cache, op, loc);
  check(cache.dim() == 4, op, loc, name, " must be [slots, context, kv_heads, head_dim], got ", to_string(cache.shape()));
  check(is_floating(cache.dtype()), op, loc, name, " must be a float tensor, got ", dtype_name(cache.dtype()));
}

}  // namespace

Tensor kv_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions, Loc loc) {
  constexpr const char* kOp = "kv_cache_write";
  check_cache(cache, "cache", kOp, loc);
  check_defined(rows, kOp, loc);
  const Shape& c = cache.shape();
  check(rows.dim() == 3 && rows.shape()[0] == c[0] && rows.shape()[1] == c[2] && rows.shape()[2] == c[3], kOp, loc,
        "rows must be [", c[0], ", ", c[2], ", ", c[3], "] (one row per slot for cache ", to_string(c), "), got ",
        to_string(rows.shape()));
  check_index_vector(positions, c[0], "positions", kOp, loc);
  check(!needs_grad({&cache, &rows}), kOp, loc, "has no gradient (it fills an inference cache)");
  // The rows take the cache's dtype (a bf16 cache under autocast gets the projection's bf16).
  const Tensor r = rows.dtype() == cache.dtype() ? rows : cast(rows, cache.dtype(), loc);
  return make_node(OpId::KvCacheWrite, c, cache.dtype(), {alias(cache), alias(r), alias(positions)}, std::monostate{},
                   loc);
}

Tensor decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& lengths,
                        double scale, Loc loc) {
  constexpr const char* kOp = "decode_attention";
  check_defined(q, kOp, loc);
  check_cache(k_cache, "k_cache", kOp, loc);
  check_cache(v_cache, "v_cache", kOp, loc);
  check(q.dim() == 3, kOp, loc, "q must be [slots, heads, head_dim], got ", to_string(q.shape()));
  check(k_cache.shape() == v_cache.shape(), kOp, loc, "k_cache and v_cache must have one shape, got ",
        to_string(k_cache.shape()), " and ", to_string(v_cache.shape()));
  const int64_t S = q.shape()[0], H = q.shape()[1], D = q.shape()[2], Hkv = k_cache.shape()[2];
  check(k_cache.shape()[0] == S && k_cache.shape()[3] == D, kOp, loc, "q ", to_string(q.shape()),
        " does not match the caches ", to_string(k_cache.shape()), " (slots and head_dim must agree)");
  check(Hkv > 0 && H % Hkv == 0, kOp, loc, "heads ", H, " must be a multiple of the caches' kv heads ", Hkv);
  check_index_vector(lengths, S, "lengths", kOp, loc);
  check(std::isfinite(scale), kOp, loc, "scale must be finite, got ", scale);
  if (scale < 0) scale = D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
  check(!needs_grad({&q, &k_cache, &v_cache}), kOp, loc, "has no gradient (an inference kernel)");
  DType t = to_floating(promote(q.dtype(), k_cache.dtype()));
  if (autocast_dtype() && (t == DType::BF16 || t == DType::F16)) t = DType::F32;
  // q is read in its own dtype when it is the caches' (a bf16 projection), else cast to it.
  const Tensor qq = q.dtype() == k_cache.dtype() ? q : cast(q, k_cache.dtype(), loc);
  return make_node(OpId::DecodeAttention, {S, H, D}, t,
                   {alias(qq), alias(k_cache), alias(v_cache), alias(lengths)},
                   AttentionParams{false, scale}, loc);
}

Tensor sample_tokens(const Tensor& logits, const Tensor& settings, const Tensor& seeds, const Tensor& counters,
                     Loc loc) {
  constexpr const char* kOp = "sample_tokens";
  check_defined(logits, kOp, loc);
  check_defined(settings, kOp, loc);
  check(logits.dim() == 2 && logits.shape()[1] > 0, kOp, loc, "logits must be [rows, vocab], got ",
        to_string(logits.shape()));
  check(is_floating(logits.dtype()), kOp, loc, "logits must be a float tensor, got ", dtype_name(logits.dtype()));
  const int64_t S = logits.shape()[0];
  check(settings.dim() == 2 && settings.shape()[0] == S && settings.shape()[1] == 3 &&
            settings.dtype() == DType::F32,
        kOp, loc, "settings must be f32 [", S, ", 3] (temperature, top_k, top_p per row), got ",
        dtype_name(settings.dtype()), " ", to_string(settings.shape()));
  check_index_vector(seeds, S, "seeds", kOp, loc);
  check_index_vector(counters, S, "counters", kOp, loc);
  check(seeds.dtype() == DType::I64, kOp, loc, "seeds must be i64 (64-bit Philox keys), got ", dtype_name(seeds.dtype()));
  return make_node(OpId::SampleTokens, {S}, DType::I64,
                   {alias(logits), alias(settings), alias(seeds), alias(counters)}, std::monostate{}, loc);
}

}  // namespace alk
