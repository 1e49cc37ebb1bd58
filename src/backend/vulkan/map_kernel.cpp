#include "backend/vulkan/map_kernel.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "backend/vulkan/context.h"
#include "backend/vulkan/shader.h"

namespace alk::vk {

namespace {

bool mentions(const std::string& text, std::string_view word) {
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    const bool left = at == 0 || !ident(text[at - 1]);
    const bool right = at + word.size() >= text.size() || !ident(text[at + word.size()]);
    if (left && right) return true;
  }
  return false;
}

// The kernel's text without its header comment (which quotes the original expression).
std::string body_of(const std::string& glsl) {
  const size_t at = glsl.find("layout(local_size_x");
  return at == std::string::npos ? glsl : glsl.substr(at);
}

struct Bound {
  size_t offset;    // from the allocation's start, aligned
  size_t bytes;     // bound range
  uint32_t first;   // offset[] value: element 0 of the view, counted from the binding's start
};

Bound bind(const Context& ctx, const ViewArg& a, const char* what) {
  if (a.strides.size() != a.shape.size()) fail(std::string(what) + ": shape and strides differ in rank");
  const int64_t esz = static_cast<int64_t>(dtype_size(a.dtype));
  int64_t lo = 0, hi = 0, numel = 1;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    numel *= a.shape[d];
    const int64_t span = (a.shape[d] - 1) * a.strides[d];
    (span < 0 ? lo : hi) += span;
  }
  if (numel == 0) lo = hi = 0;
  if (a.byte_offset % static_cast<size_t>(esz) != 0)
    fail(std::string(what) + ": byte offset " + std::to_string(a.byte_offset) + " is not a multiple of the " +
         std::string(dtype_name(a.dtype)) + " element size");
  const int64_t start0 = static_cast<int64_t>(a.alloc->offset() + a.byte_offset) + a.offset * esz;  // element 0
  const int64_t first_byte = start0 + lo * esz, end_byte = start0 + (hi + 1) * esz;
  const int64_t base = static_cast<int64_t>(a.alloc->offset());
  if (first_byte < base || end_byte > base + static_cast<int64_t>(a.alloc->bytes()))
    fail(std::string(what) + ": the view reaches outside its buffer");
  const int64_t align = static_cast<int64_t>(ctx.binding_alignment());
  const int64_t bound = first_byte / align * align;
  // Round the range up to whole 32-bit words where the allocation has them: a driver may
  // read 8/16-bit elements a word at a time.
  int64_t end = std::min<int64_t>((end_byte + 3) / 4 * 4, base + static_cast<int64_t>((a.alloc->bytes() + 3) / 4 * 4));
  end = std::max(end, end_byte);
  const uint64_t range = static_cast<uint64_t>(end - bound);
  if (range > ctx.info().max_storage_buffer_range)
    fail(std::string(what) + ": " + std::to_string(range) + " bytes exceed maxStorageBufferRange (" +
         std::to_string(ctx.info().max_storage_buffer_range) + ")");
  const int64_t first = (start0 - bound) / esz;
  if (first > std::numeric_limits<uint32_t>::max()) fail(std::string(what) + ": element offset beyond 32 bits");
  return Bound{static_cast<size_t>(bound - base), static_cast<size_t>(range), static_cast<uint32_t>(first)};
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

}  // namespace

BoundView bind_view(const Context& ctx, const ViewArg& a, bool write) {
  const Bound b = bind(ctx, a, write ? "output view" : "input view");
  return BoundView{Binding{a.alloc, b.offset, b.bytes, write}, b.first};
}

std::string map_unsupported_reason(const Context& ctx, const std::string& glsl, size_t bindings) {
  const DeviceInfo& info = ctx.info();
  const std::string body = body_of(glsl);
  if (mentions(body, "double") && !info.float64) return info.name + " has no shaderFloat64";
  if (mentions(body, "int64_t") && !info.int64) return info.name + " has no shaderInt64 (integer kernels compute in i64)";
  if (mentions(body, "uint8_t") && !info.storage8) return info.name + " has no 8-bit storage (bool/u8 tensors)";
  if ((mentions(body, "float16_t") || mentions(body, "uint16_t")) && !info.storage16)
    return info.name + " has no 16-bit storage (f16/bf16 tensors)";
  if (bindings > info.max_storage_buffers_per_stage)
    return std::to_string(bindings) + " buffers exceed " + info.name + "'s " +
           std::to_string(info.max_storage_buffers_per_stage) + " per stage";
  return "";
}

MapKernel::MapKernel(Context& ctx, const expr::Expr& e, const expr::MapSignature& sig)
    : MapKernel(ctx, expr::emit_map_kernel(e, sig, expr::Target::Glsl), sig) {}

MapKernel::MapKernel(Context& ctx, std::string glsl, const expr::MapSignature& sig)
    : ctx_(ctx), sig_(sig), source_(std::move(glsl)) {
  push_ = expr::glsl_params_in_push_constants(sig.inputs.size());
  vector_path_ = source_.find("alk_vec_path") != std::string::npos && !std::getenv("ALK_VK_MAP_SCALAR");
  const uint32_t bindings = static_cast<uint32_t>(sig.inputs.size() + 1 + (push_ ? 0 : 1));
  if (std::string why = map_unsupported_reason(ctx, source_, bindings); !why.empty())
    fail("kernel " + sig.name + " cannot run on vulkan:" + std::to_string(ctx.info().index) + ": " + why);
  pipeline_ = &ctx.pipeline(source_, bindings,
                            push_ ? static_cast<uint32_t>(expr::map_params_bytes(sig.inputs.size())) : 0);
}

void MapKernel::launch(Encoder& enc, std::span<const ViewArg> inputs, const ViewArg& out) const {
  const size_t k_in = sig_.inputs.size();
  if (inputs.size() != k_in)
    fail("kernel " + sig_.name + ": " + std::to_string(inputs.size()) + " inputs for " + std::to_string(k_in));
  if (out.shape.size() > 8) fail("kernel " + sig_.name + ": rank " + std::to_string(out.shape.size()) + " > 8");
  int64_t n = 1;
  for (int64_t s : out.shape) n *= s;
  last_vectorized_ = false;
  if (n == 0) return;
  if (n > std::numeric_limits<uint32_t>::max()) fail("kernel " + sig_.name + ": more than 2^32 elements");
  std::vector<Binding> bindings;
  std::vector<uint32_t> first;
  std::vector<int32_t> strides(8 * std::max<size_t>(1, k_in), 0);
  for (size_t k = 0; k < k_in; ++k) {
    const ViewArg& a = inputs[k];
    if (a.dtype != sig_.inputs[k]) fail("kernel " + sig_.name + ": input " + std::to_string(k) + " has the wrong dtype");
    if (a.shape != out.shape || a.strides.size() != a.shape.size())
      fail("kernel " + sig_.name + ": input " + std::to_string(k) + " is not viewed over the output's shape");
    const Bound b = bind(ctx_, a, "map input");
    bindings.push_back(Binding{a.alloc, b.offset, b.bytes, false});
    first.push_back(b.first);
  }
  // The shape the kernel unravels: size-1 dims dropped, and a dim merged into the one inside
  // it wherever every input steps evenly across both (the output is contiguous), so the
  // common cases (contiguous operands, scalars) are rank 1 and index without divides.
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> in_strides(k_in);
  for (size_t d = 0; d < out.shape.size(); ++d) {
    if (out.shape[d] == 1) continue;
    bool merge = !shape.empty();
    for (size_t k = 0; k < k_in && merge; ++k) merge = in_strides[k].back() == inputs[k].strides[d] * out.shape[d];
    if (merge) {
      shape.back() *= out.shape[d];
      for (size_t k = 0; k < k_in; ++k) in_strides[k].back() = inputs[k].strides[d];
    } else {
      shape.push_back(out.shape[d]);
      for (size_t k = 0; k < k_in; ++k) in_strides[k].push_back(inputs[k].strides[d]);
    }
  }
  for (size_t k = 0; k < k_in; ++k)
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t st = in_strides[k][d];
      if (st < std::numeric_limits<int32_t>::min() || st > std::numeric_limits<int32_t>::max())
        fail("kernel " + sig_.name + ": stride beyond 32 bits");
      strides[8 * k + d] = static_cast<int32_t>(st);
    }
  if (out.dtype != sig_.output) fail("kernel " + sig_.name + ": the output has the wrong dtype");
  // The kernel writes output element i at offset[K] + i: the output must be contiguous.
  int64_t expect = 1;
  for (size_t d = out.shape.size(); d-- > 0;) {
    if (out.shape[d] != 1 && out.strides[d] != expect) fail("kernel " + sig_.name + ": the output is not contiguous");
    expect *= out.shape[d];
  }
  const Bound ob = bind(ctx_, out, "map output");
  bindings.push_back(Binding{out.alloc, ob.offset, ob.bytes, true});
  first.push_back(ob.first);

  // The vector loop (emit_glsl.cpp: p.rank bit 8, bit 16 + k for a splatted input): four
  // elements per iteration where each per-element operand steps by 1 along the innermost
  // dim from a 16-byte-aligned element 0 (offsets and outer strides multiples of 4, and the
  // rows a multiple of 4 long unless there is one row: vectors never straddle a row), or is
  // constant along it (stride 0: loaded once per vector). The tail (n % 4) goes scalar.
  uint32_t vector_bits = 0;
  if (vector_path_ && n >= 8 && !shape.empty() && ob.first % 4 == 0 && (shape.size() == 1 || shape.back() % 4 == 0)) {
    vector_bits = 0x100u;
    for (size_t k = 0; k < k_in && vector_bits; ++k) {
      const int64_t inner = in_strides[k].back();
      if (inner == 0) {
        vector_bits |= 0x10000u << k;  // the emitter vectorizes kernels of <= 16 inputs only
        continue;
      }
      // Inputs other than f32/i32 are vector operands only as splats (emit_glsl.cpp).
      bool aligned = inner == 1 && first[k] % 4 == 0 && (sig_.inputs[k] == DType::F32 || sig_.inputs[k] == DType::I32);
      for (size_t d = 0; d + 1 < shape.size() && aligned; ++d) aligned = in_strides[k][d] % 4 == 0;
      if (!aligned) vector_bits = 0;
    }
  }

  last_vectorized_ = vector_bits != 0;
  // The params block (emit.h): n, rank, shape[8], strides[8 * max(1, K)], offset[K + 1].
  std::vector<uint8_t> params;
  put32(params, static_cast<uint32_t>(n));
  put32(params, static_cast<uint32_t>(shape.size()) | vector_bits);
  for (size_t d = 0; d < 8; ++d) put32(params, d < shape.size() ? static_cast<uint32_t>(shape[d]) : 1u);
  for (int32_t s : strides) put32(params, static_cast<uint32_t>(s));
  for (uint32_t f : first) put32(params, f);
  if (params.size() != expr::map_params_bytes(k_in)) fail("kernel " + sig_.name + ": params block size mismatch");

  const DeviceInfo& info = ctx_.info();
  // A grid-stride loop covers any n: enough groups to fill the device, never more than n needs.
  const int64_t items = vector_bits ? n / 4 : n;
  const uint32_t groups = static_cast<uint32_t>(
      std::min<int64_t>({(items + 255) / 256, static_cast<int64_t>(info.max_workgroup_count[0]), 65535}));
  if (push_) {
    enc.dispatch(*pipeline_, bindings, params, Groups{groups, 1, 1});
    return;
  }
  std::shared_ptr<Allocation> pbuf = ctx_.pool().allocate(params.size());
  ctx_.stream().upload(pbuf, 0, params.data(), params.size());
  bindings.push_back(Binding{pbuf, 0, params.size(), false});
  enc.dispatch(*pipeline_, bindings, {}, Groups{groups, 1, 1});
}

}  // namespace alk::vk
