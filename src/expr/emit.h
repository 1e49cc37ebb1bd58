// Kernel text for one fused elementwise expression, in four languages. One walk
// over the IR (emit_common.cpp) names every node's value once (v0, v1, ... in
// topological order, so shared subexpressions are computed once); a small per-language
// table of overrides (emit_cpp.cpp, emit_cuda.cpp, emit_glsl.cpp, emit_wgsl.cpp) says
// how to spell types, literals, functions, loads, stores and the kernel around them.
// What a language lacks (erf, log1p and expm1 in GLSL/WGSL, f64 in WGSL, f64 math in
// GLSL) is supplied by rewriting the IR first, never by patching output text.
//
// C++ is the CPU's, and the CPU compiles no whole kernel: its evaluator loads, stores and
// computes uniform values itself, and compiles only the arithmetic of long chains, a block
// of elements at a time. The C++ kernel is that block body (emit_cpu_block, contract in
// emit_cpp.cpp), over the expression's own nodes and types: the rest of this contract is
// the GPU languages'.
//
// Kernel contract, CUDA, GLSL and WGSL: output element i (0 <= i < n, row-major over the
// output shape) is computed from input k read at element offset
//   offset[k] + sum_d coord_d(i) * strides[k][d]   (element strides; 0 on broadcast dims)
// and stored at element offset[K] + i of the output (K = number of inputs).
// The params block is, in this order: n, rank, shape[8], strides[max(1, K)][8],
// offset[K + 1] (int64 in CUDA; u32 n/rank/shape/offset and i32 strides in GLSL/WGSL);
// CUDA adds u32 magic[8], shift[8] (division by shape[d] as a multiply:
// cuda_division_magic). GPU buffers bind only at aligned byte offsets
// (minStorageBufferOffsetAlignment), so a view or arena slice that starts at an arbitrary
// element is bound at the aligned offset below it and the remainder goes in offset[]
// (CUDA takes offsets too, so all three GPU contracts are one).
// GLSL/WGSL bind inputs 0..K-1, then the output, as storage buffers. GLSL puts params in
// push constants when they fit in kPushConstantBudget bytes (glsl_params_in_push_constants),
// else in a storage buffer at binding K + 1; WGSL always binds them at K + 1.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alk/dtype.h"
#include "alk/expr.h"

namespace alk::expr {

enum class Target { Cpp, Cuda, Glsl, Wgsl };
std::optional<Target> parse_target(std::string_view name);  // "cpp" "cuda" "glsl" "wgsl"
std::string_view target_name(Target t);

struct MapSignature {
  std::string name;
  std::vector<alk::DType> inputs;
  alk::DType output;
  std::vector<alk::DType> extra_outputs = {};  // CUDA only: more results of the same pass
};

// A complete kernel: input k (Expr Input slot k) has storage dtype sig.inputs[k].
// uniform_inputs[k] (optional): input k has one value for the whole launch (every stride 0);
// where a kernel loops over elements (CUDA), that value is loaded, and everything computed
// from such inputs alone (an optimizer's bias corrections, a learning-rate cast) is computed,
// once per thread before the loop instead of once per element; in C++ the CPU's evaluator
// computes those once and the body reads them (emit_cpu_block).
// extra_outputs[j] (CUDA only, dtype sig.extra_outputs[j]): a further result over the same
// inputs, stored at element i of output j + 1 (kernel parameter `out<j+1>_data`, its first
// element at offset[K + 1 + j]); values the outputs share are computed once.
std::string emit_map_kernel(const Expr& e, const MapSignature& sig, Target t,
                            const std::vector<bool>& uniform_inputs = {}, const std::vector<Expr>& extra_outputs = {});
// The CPU's compiled block body for e (Target::Cpp's kernel, contract in emit_cpp.cpp):
// `extern "C" void alk_block(const void* const* leaves, void* out)` computing e over
// kCpuBlockElements elements a call, leaves[i] holding node i's values where node i is an
// input or uniform. The text depends on e and uniform_inputs only (not on storage dtypes, a
// name, or the instruction set, which the compiler's -m flags choose).
std::string emit_cpu_block(const Expr& e, const std::vector<bool>& uniform_inputs = {});
inline constexpr int kCpuBlockElements = 256;  // the CPU evaluator's block (backend/cpu/eval.h)

// exp, log, log1p, expm1, sin, cos, tanh, erf and pow: the functions that cost a call.
bool is_transcendental(Fn f);

// How GLSL stores a dtype in a buffer ("uint16_t" bit patterns for bf16): the emitter's and
// the Vulkan template kernels' one spelling.
std::string glsl_storage_type(alk::DType t);
// The same for CUDA C (the emitter and the CUDA template kernels): "__nv_bfloat16", "long long", ...
std::string cuda_storage_type(alk::DType t);
// The kernel `<sig.name>_group` appended to a CUDA Map kernel's source compiled with
// ALK_GROUP (the table size), ALK_RANK 1 and ALK_INDEX32: one launch over many members of the
// same expression (a multi-tensor optimizer update), each a contiguous range: its operands'
// addresses (uniform inputs: their one value), its n, and its blocks. The member table is a
// kernel parameter: struct { const void* in[max(1, K)]; void* out; i64 n; i32 first_block,
// blocks; } m[ALK_GROUP], members in block order, unused ones with blocks = 0.
std::string cuda_map_group_entry(const MapSignature& sig, const std::vector<bool>& uniform_inputs);

// The expression alone, as a function a hand-written kernel calls (a reduction's prologue,
// a matmul's or reduction's epilogue): `R name(T0 in0, T1 in1, ...)` returning e, where
// Tk is the compute type of sig.inputs[k] and R that of sig.output. The caller loads and
// converts the arguments and stores the result; the body is the same value walk as in
// emit_map_kernel (same rewrites, so the same numbers). Every parameter is declared even
// when e does not read it. Helpers the body needs are the caller's (none today).
std::string emit_function(const Expr& e, const MapSignature& sig, Target t);

// The GLSL/WGSL params block as bytes: every field is a 4-byte scalar, laid out in the
// order above with no padding (std430 and push-constant layout agree on this).
size_t map_params_bytes(size_t inputs);
// The smallest maxPushConstantsSize Vulkan guarantees: GLSL kernels whose params fit use
// push constants on every device (one, or two inputs), so the source never depends on it.
inline constexpr size_t kPushConstantBudget = 128;
inline bool glsl_params_in_push_constants(size_t inputs) { return map_params_bytes(inputs) <= kPushConstantBudget; }

// The CUDA params' magic[d], shift[d] for dividing by `divisor` (>= 1): for 0 <= i < 2^31,
// i / divisor == (umulhi(i, magic) + i) >> shift (Granlund and Montgomery's method).
std::pair<uint32_t, uint32_t> cuda_division_magic(int64_t divisor);

// ---- IR rewrites the emitters use (public so tests can evaluate them) ------------------

struct Rewrites {
  bool expand_erf = false;     // erf -> Abramowitz-Stegun 7.1.26 (|error| <= 1.5e-7)
  bool expand_log1p = false;   // log1p(x) -> u = 1 + x; u == 1 ? x : log(u) * x / (u - 1)
  bool expand_expm1 = false;   // expm1(x) -> Kahan's (u - 1) * x / log(u), u = exp(x)
  bool f64_to_f32 = false;     // every f64 value becomes f32 (WGSL has no f64)
  bool f64_math_in_f32 = false;  // transcendental functions of f64 computed in f32 (GLSL)
  bool expand_pow = false;       // pow(x, y) -> C's pow from a pow defined only for x > 0 (GLSL, WGSL)
};
Expr rewrite(const Expr& e, const Rewrites& r);
// Makes e's inputs and root match the signature's compute types (inserting casts),
// so loads and stores only convert between a storage dtype and its compute type.
Expr conform(const Expr& e, const MapSignature& sig);

// The expansions, as IR building blocks over an existing node x.
int build_erf(Builder& b, int x);
int build_log1p(Builder& b, int x);
int build_expm1(Builder& b, int x);
int build_pow(Builder& b, int x, int y);

namespace emit_detail {

// The per-language overrides. The base walk (emit_common.cpp) owns everything that
// is the same in all four languages: operator precedence (every operation is fully
// parenthesized), value naming, and the order of loads, computation and store.
struct Lang {
  virtual ~Lang() = default;
  virtual Rewrites rewrites() const = 0;
  virtual std::string type(Type t) const = 0;
  // A finite, non-negative literal; the base adds parentheses around negatives.
  virtual std::string literal(double v, Type t) const = 0;
  virtual std::string special(double v, Type t) const = 0;  // inf, -inf, nan
  // The call name of a math function on type t ("expf", "exp", "inversesqrt"), or
  // empty for ops the base spells as operators.
  virtual std::string fn_name(Fn f, Type t) const = 0;
  // A cheaper spelling of f on t for a kernel whose stored result is bf16 (bf16_result); empty:
  // fn_name's. CUDA: tanh.approx, a quarter of tanhf's instructions (GELU's gradient in fc2's
  // product epilogue, where the arithmetic is the cost: 0.212 -> 0.173 ms on the H200). Its
  // error, 2^-10.99 relative to tanh, is below bf16's rounding (2^-9) for tanh itself; where an
  // expression cancels it (1 + tanh(u) at u << 0) it is an absolute error of up to ~5e-4 in
  // that term (PyTorch computes GELU's gradient with tanhf before rounding to bf16).
  virtual std::string fn_name_bf16_result(Fn, Type) const { return ""; }
  // The language's own spelling of node x over its arguments' text (args[k]), where the
  // shared one (node_text) is not what the kernel must compute; empty: the shared one. C++:
  // integer arithmetic that wraps (a C++ overflow is undefined), the CPU evaluator's helpers.
  virtual std::string own_spelling(const Node&, const std::string* /*args*/) const { return ""; }
  bool bf16_result = false;  // set by the entry points from the signature's output dtype
  virtual std::string cast(Type to, const std::string& a) const = 0;
  virtual std::string select(const std::string& c, const std::string& a, const std::string& b) const {
    return "(" + c + " ? " + a + " : " + b + ")";
  }
  // True when a is NaN (a floating value): x != x, except where the language says NaN
  // compares ordered (GLSL's != may compile to an ordered compare; it has isnan).
  virtual std::string is_nan(const std::string& a) const { return "(" + a + " != " + a + ")"; }
  // An f32 value's bits as a 32-bit unsigned integer, and back (RoundBf16 works on them).
  virtual std::string f32_bits(const std::string& a) const = 0;
  virtual std::string f32_from_bits(const std::string& u) const = 0;
  virtual std::string let(Type t, const std::string& name, const std::string& value) const = 0;
  // Statements that define `in<k>` (compute type of `storage`) from input k at offset
  // `idx`, and that store `value` (compute type of `storage`) to output element i.
  virtual std::string load(int k, DType storage, const std::string& idx) const = 0;
  virtual std::string store(DType storage, const std::string& value) const = 0;
  // The same for extra output j >= 1 (languages with multi-output kernels: CUDA).
  virtual std::string store_extra(size_t j, DType storage, const std::string& value) const;
  // Everything before the per-element statements, and after them. `original` is the
  // caller's expression (for the header comment), `lowered` the one being emitted;
  // `used[k]` says whether input k is read at all.
  virtual std::string prologue(const Expr& original, const Expr& lowered, const MapSignature& sig,
                               const std::vector<bool>& used) const = 0;
  virtual std::string epilogue() const = 0;
  virtual std::string offset_call(int k) const = 0;  // the index helper's call for input k
  // Languages whose kernel loops over elements: the prologue stops before the loop, which
  // loop_open() opens, so values of uniform inputs go between (uniform_offset(k): where
  // input k's one element is). Others keep "" / "" and hoist nothing.
  virtual std::string loop_open() const { return ""; }
  virtual std::string uniform_offset(int) const { return ""; }
  // Languages that may also walk contiguous operands a vector of elements per iteration
  // (CUDA under ALK_VEC): the text that opens that loop (vector loads of the per-element
  // inputs; inside, in<k>_data and out_data name the vector's registers and o the element
  // in it, so load() and store() spell the same statements) and closes it (the vector
  // store). "" where there is no such loop.
  virtual std::string vector_loop_open(const MapSignature&, const std::vector<bool>&) const { return ""; }
  virtual std::string vector_loop_close(const MapSignature&) const { return ""; }
  // The opening line of a function (emit_function): C-like by default.
  virtual std::string function_head(const std::string& name, const std::vector<Type>& params, Type ret) const {
    std::string s = type(ret) + " " + name + "(";
    for (size_t k = 0; k < params.size(); ++k) s += (k ? ", " : "") + type(params[k]) + " in" + std::to_string(k);
    return s + ") {";
  }
  std::string indent = "    ";
};

std::string emit(const Lang& lang, const Expr& e, const MapSignature& sig, const std::vector<bool>& uniform_inputs = {},
                 const std::vector<Expr>& extra_outputs = {});
std::string emit_function(const Lang& lang, const Expr& e, const MapSignature& sig);
// Shortest text that reads back as the same value, always with '.' or 'e'.
std::string float_text(double v, Type t);
std::string header_comment(const Expr& e, const MapSignature& sig, std::string_view line_comment);
// A literal's text (negatives in parentheses, inf and NaN by the language's special()).
std::string value_text(const Lang& lang, const Node& x);
// Node x's value as one expression, its arguments named by v (v[k]: node k's text).
std::string node_text(const Lang& lang, const Node& x, const std::vector<std::string>& v);
// Which nodes have one value for the whole launch: inputs marked in uniform_inputs, and
// nodes that read only such values and literals (one at least: literals alone are folded
// already); a node marked in is_output never (it is stored per element).
std::vector<bool> uniform_nodes(const Expr& e, const std::vector<bool>& uniform_inputs, const std::vector<bool>& is_output);

std::unique_ptr<Lang> make_cpp();
std::unique_ptr<Lang> make_cuda();
std::unique_ptr<Lang> make_glsl();
std::unique_ptr<Lang> make_wgsl();

}  // namespace emit_detail
}  // namespace alk::expr
