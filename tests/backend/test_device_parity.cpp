// Device parity: every GPU device alk finds against the CPU backend, through the public
// Tensor API, forward and gradients. Device-generic: it runs on every GPU device of
// available_devices() ("vulkan:N", "cuda:N", ...: DeviceInfo::type is not "cpu"), or only on
// those named in ALK_PARITY_DEVICES (a comma list, e.g. "cuda:0"); with none it skips and says so.
// A backend built outside alk runs it too: examples/backend compiles this file against an
// installed alk with its device ("forward:0", named in ALK_PARITY_DEVICES) linked in.
//
// How a case runs: inputs are made on the CPU (seeded), copied with .to(dev), the same
// function is applied on both sides, the device's result must live on the device and is
// brought back with .to(cpu) and compared; for differentiable cases on f32 the inputs are
// leaves on each side and the gradients of sum(out * w), w random, are compared too.
//
// Families (one TEST each, looping over devices; SCOPED_TRACE names device, case, dtype):
//   ElementwiseTable  every entry of include/alk/elementwise.def, iterated from the table, over
//                     every dtype, in two operand layouts (A: operand k = layout k, B: k+1):
//                     0 transposed and offset ([6,3].slice(0,1,6).t()), 1 a row [5] broadcast,
//                     2 a column [3,1] broadcast (unary ops: expanded); inputs in the entry's
//                     Domain; gradients of every operand that has one, on f32
//   Casts             every (source, destination) dtype pair, exact
//   Reductions        sum mean max min prod var logsumexp over axes / keepdim / all, fused
//                     prologue and epilogue, transposed input, integer sums; argmax/argmin;
//                     column sums over rows (bias gradients) at aligned, odd and sliced widths,
//                     cast or through an epilogue with another input
//   Matmul            2D, batched, broadcast batch, transposed views, matrix-vector, fused
//                     epilogues (relu(a@b + bias), gelu(a@b + bias) + residual)
//   SoftmaxAndNorms   softmax / log_softmax on three axes and a transposed view, layer_norm
//                     (with and without affine, one and two normalized dims), rms_norm;
//                     layer_norm's gradients in every dtype (rows of 768, 1001, 4000, views)
//   IndexOps          gather, index_select, embedding, scatter_add (repeated ids), one_hot
//   ShapeOps          tril/triu, cumsum, pad, cat/stack, slice_scatter (a strided slice's gradient)
//   Random            rand/randn/randint/dropout_mask/dropout give the CPU's numbers (Philox keyed
//                     by seed and offset: tensor.h promises every backend draws the same stream)
//                     and sane statistics on the device
//   Attention         scaled_dot_product_attention, causal and not, head dims 8/32/64, cross
//                     attention (S != T), q/k/v as strided views of one packed projection,
//                     grouped-query (k/v with fewer heads), rotary_embedding of a projection's slice
//   Conv              unfold2d/fold2d, conv2d (padding, stride, dilation, groups), max/avg_pool2d
//   LargeShapes       sizes past one workgroup/block and one tile: elementwise over 300001,
//                     long/many/outer-dim reductions, argmax, softmax/layer_norm/cumsum of long
//                     rows, GEMMs and attention with partial tiles, colliding scatters, Philox
//                     over a million values
//   Decode            kv_cache_write, decode_attention (grouped-query, per-slot lengths),
//                     sample_tokens where it is a pure function of the logits
//   UserKernels       kernels from source text (alk/user_kernel.h): an f32 body with an attribute
//                     over a grid of one invocation per element, an i32 body with rotations and
//                     its own count rule (each invocation writes a row); the device's body
//                     against the C++ body on the CPU
//   CompiledGptSteps  a 2-layer GPT-2 and LLaMA-layout model, 20 compiled AdamW steps each: the
//                     device's losses are the CPU's
//   EveryTemplateOpHasAFamily  the ALK_TEMPLATE_OPS list (op_table.h) against the families above,
//                     so a new template op cannot be added without a parity case
// Template-op families run f32 (forward and gradients) and f64/f16/bf16 forward; copy-like ops
// (index, shape) also run the integer dtypes and bool.
//
// Dtypes the device may lack: f64, f16 and bf16 are tried only where info().features names
// them (DeviceInfo documents them as optional); every other dtype is always tried. A kernel
// the device refuses (the scheduler's alk::Error "... device cannot run this kernel") is a
// FAILURE on f32 -- every backend must run every op in f32 -- and otherwise a skip, listed
// in the summary each family prints. Dtypes the op itself refuses on the CPU (neg of bool)
// are counted as such, never run.
//
// Tolerances: |device - cpu| <= atol * max(1, max|cpu|) + rtol * |cpu| over each output, NaN
// matches NaN, infinities must match exactly. By output dtype:
//   bool, u8, i32, i64   exact (indices, comparisons, integer arithmetic, copies, casts)
//   f32                  elementwise 1e-6 (2e-5 with a transcendental: GPU exp/log/sin/...
//                        are specified to a few ulp, erf/log1p/expm1 are the IR's expansions);
//                        template ops 5e-5 (sums of up to ~100 terms accumulated in f32 in
//                        another order; the CPU accumulates in f64); gradients 5e-5
//   f64                  1e-12 elementwise, 1e-10 template ops; 2e-5 on Vulkan where the
//                        computation has exp/log/... (GLSL has no double transcendentals:
//                        they run in f32 there), i.e. transcendental elementwise entries and
//                        attention
//   f16                  one unit in the last place: elementwise 2^-10 relative + 1e-4 (the
//                        same value computed slightly differently may round one step away);
//                        template ops 2e-3
//   bf16                 elementwise 2^-7 relative + 2e-5; template ops 1.6e-2
//   random               rand, randint, dropout masks exact; randn as f32 transcendental
//   LargeShapes          the template tolerance x4 for sums of 4000 to 200000 terms, x2 for
//                        GEMMs with k = 260 (rounding error grows with the number of terms)
//   GPT                  losses within 2e-4 * max(1, loss) over 20 steps
// f32 matmul tolerances assume f32 arithmetic: run with TF32 off (ALK_TF32 unset), which is
// the default; TF32's 10-bit operands are ~1e-3 off by design.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "alk/alk.h"
#include "alk/generate.h"
#include "alk/kernel.h"
#include "alk/op_table.h"
#include "alk/user_kernel.h"
#include "required.h"
#include "testing.h"
// In alk_tests the suite also checks what only internals show (the scheduler's kernel count,
// the fused cross-entropy rows). A backend built against an installed alk compiles it with
// ALK_PARITY_PUBLIC_ONLY (examples/backend): the public headers, every other family.
#ifndef ALK_PARITY_PUBLIC_ONLY
#include "graph/schedule.h"
#include "ops/ops.h"
#endif

namespace alk {
namespace {

// ============================================================================================
// KNOWN DEVICE FAILURES: cases that fail because of a real bug in a backend (not in this
// test). Each is still listed in the family's summary line as KNOWN FAILURE; delete the
// line once the backend is fixed. Matched on the device kind and the case name's prefix.
// ============================================================================================
struct KnownFailure {
  const char* kind;    // info().kind
  const char* prefix;  // case name prefix, as the summary prints it
  const char* why;
};
const std::vector<KnownFailure> kKnownFailures = {
    // None: every case passes on vulkan:0 (lavapipe, Mesa 22.3.6, LLVM 15). Form of an entry:
    // {"vulkan", "cumsum dim 0 f16", "what is wrong in the backend, and where"},
};

// The backend whose kernels a device runs, for tolerances and known failures: its kind, or for
// a remote device ("remote:HOST:PORT/vulkan:0", docs/remote.md) the peer's device's kind.
std::string backend_kind(const Device& dev) {
  if (dev.info().kind != "remote") return dev.info().kind;
  const std::string& name = dev.info().name;
  const std::string peer = name.substr(name.find('/') + 1);
  return peer.substr(0, peer.find(':'));
}

const char* known_failure(const Device& dev, const std::string& what) {
  for (const KnownFailure& k : kKnownFailures)
    if (backend_kind(dev) == k.kind && what.rfind(k.prefix, 0) == 0) return k.why;
  return nullptr;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

const std::vector<DType> kAllDTypes = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                       DType::I64, DType::I32, DType::U8,  DType::Bool};
const std::vector<DType> kFloatDTypes = {DType::F32, DType::F64, DType::F16, DType::BF16};

// The devices under test: ALK_PARITY_DEVICES, else every GPU: each device whose type is not
// "cpu" (the CPU itself, and CPU-memory devices such as tests/runtime's testdev, are not
// what this suite is for; "auto" never picks them either).
std::vector<Device*> devices_under_test() {
  std::vector<Device*> out;
  const char* env = std::getenv("ALK_PARITY_DEVICES");
  if (env && *env) {
    std::stringstream list(env);
    std::string name;
    while (std::getline(list, name, ','))
      if (!name.empty()) out.push_back(&get_device(name));  // an absent device is an error, not a skip
    return out;
  }
  for (Device* d : available_devices())
    if (d->info().type != "cpu") out.push_back(d);
  return out;
}

#define ALK_PARITY_DEVICES_OR_SKIP(devs)                                                                     \
  DeviceGuard alk_parity_on_cpu_(cpu_device()); /* inputs are made on the CPU even with ALK_DEVICE */        \
  const std::vector<Device*> devs = devices_under_test();                                                    \
  if (devs.empty())                                                                                          \
    ALK_SKIP_OR_FAIL_IF_REQUIRED("vulkan", "no GPU device found (available_devices() lists only CPU-type devices)"); \
  static_assert(true)

// f64/f16/bf16 are optional device capabilities (DeviceInfo::features); the rest are not.
bool device_declares(const Device& d, DType t) {
  if (t != DType::F64 && t != DType::F16 && t != DType::BF16) return true;
  const auto& f = d.info().features;
  return std::find(f.begin(), f.end(), std::string(dtype_name(t))) != f.end();
}

bool is_refusal(const Error& e) { return std::string(e.what()).find("cannot run this kernel") != std::string::npos; }

struct Tol {
  double atol, rtol;
};
using TolFn = std::function<Tol(DType out)>;

#ifdef ALK_SOURCE_DIR
const char* const kParitySourceDir = ALK_SOURCE_DIR;
#else
const char* const kParitySourceDir = ".";  // examples/backend: a device no list names
#endif

// The device's checked-in list of what it does not run, per family: the cases it refuses and
// the dtypes it does not declare. tests/backend/parity_expected/<kind>-<adapter>/<family>.txt
// (adapter: the first word of info().description, "llvmpipe" for lavapipe), one
// "refused <case>" or "undeclared <case>" a line; ALK_PARITY_WRITE_EXPECTED=1 rewrites it.
std::string expected_refusals_path(const Device& dev, const std::string& family) {
  std::string adapter = dev.info().description.substr(0, dev.info().description.find(' '));
  for (char& c : adapter)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  std::string dir = std::string(kParitySourceDir) + "/tests/backend/parity_expected/" + dev.info().kind + "-" + adapter;
  std::string file = family;
  std::replace(file.begin(), file.end(), ' ', '_');
  return dir + "/" + file + ".txt";
}

// What a family ran and what it could not, printed per device so skips are visible, and
// checked against the device's expected list: a kernel or dtype the device stops running
// fails here (a regression that made a backend refuse every f16 kernel would otherwise pass),
// and so does a listed refusal that now runs (the list is stale).
struct Tally {
  explicit Tally(std::string name) : family(std::move(name)) {}
  std::string family;
  int ran = 0;
  std::vector<std::string> refused, op_rejected, undeclared, known;
  void print(const Device& dev) const {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 40; ++i) s += (i ? ", " : "") + v[i];
      if (v.size() > 40) s += ", ...";
      return s;
    };
    std::cout << "[parity " << dev.name() << "] " << family << ": " << ran << " cases ran";
    if (!undeclared.empty()) std::cout << "; dtype not in the device's features, skipped: " << list(undeclared);
    if (!refused.empty()) std::cout << "; refused by the device, skipped: " << list(refused);
    if (!op_rejected.empty()) std::cout << "; " << op_rejected.size() << " (op, dtype) pairs the op refuses";
    if (!known.empty()) std::cout << "; KNOWN FAILURE (see kKnownFailures): " << list(known);
    std::cout << "\n";
    check_expected(dev);
  }
  void check_expected(const Device& dev) const {
    std::set<std::string> now;
    for (const std::string& r : refused) now.insert("refused " + r);
    for (const std::string& u : undeclared) now.insert("undeclared " + u);
    const std::string path = expected_refusals_path(dev, family);
    if (const char* w = std::getenv("ALK_PARITY_WRITE_EXPECTED"); w && std::string(w) == "1") {
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      std::ofstream out(path);
      out << "# " << family << " cases " << dev.info().description
          << " does not run (tests/backend/test_device_parity.cpp; ALK_PARITY_WRITE_EXPECTED=1 rewrites)\n";
      for (const std::string& line : now) out << line << "\n";
      std::cout << "wrote " << path << "\n";
      return;
    }
    std::ifstream in(path);
    if (!in.good()) {
      // A device nobody has listed (a new GPU): nothing to compare with, unless it is one the
      // run requires (tests/required.h), whose list must be checked in.
      if (testing::required(dev.info().kind) && !now.empty())
        ADD_FAILURE() << dev.name() << " (" << dev.info().description << ") refuses " << now.size() << " " << family
                      << " cases and has no expected list at " << path << " (ALK_PARITY_WRITE_EXPECTED=1 writes it)";
      return;
    }
    std::set<std::string> expected;
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') expected.insert(line);
    for (const std::string& n : now)
      if (!expected.count(n)) ADD_FAILURE() << dev.name() << " newly does not run " << family << ": " << n << " (" << path << ")";
    for (const std::string& e : expected)
      if (!now.count(e)) ADD_FAILURE() << dev.name() << " now runs " << family << ": " << e << "; remove it from " << path;
  }
};

// Non-fatal comparison of a device result (any device) with the CPU's; true when close.
bool expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    ADD_FAILURE() << what << ": device gave " << to_string(got.shape()) << " " << dtype_name(got.dtype())
                  << ", the CPU " << to_string(want.shape()) << " " << dtype_name(want.dtype());
    return false;
  }
  const std::vector<double> g = got.to(cpu_device()).to_vector<double>(), w = want.to_vector<double>();
  // The absolute part scales with the output's largest reference magnitude, with no floor of
  // 1: outputs whose values are all far below 1 (softmax rows of thousands, small gradients)
  // are compared at their own size. The smallest normal f32 keeps all-zero outputs comparable.
  double scale = std::numeric_limits<float>::min();
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) continue;
    const bool ok = std::isfinite(w[i]) || std::isfinite(g[i])
                        ? std::fabs(g[i] - w[i]) <= tol.atol * scale + tol.rtol * std::fabs(w[i])
                        : g[i] == w[i];
    if (!ok && bad++ == 0) first = i;
    if (std::isfinite(w[i])) worst = std::max(worst, std::fabs(g[i] - w[i]));
  }
  if (bad == 0) return true;
  ADD_FAILURE() << what << ": " << bad << " of " << w.size() << " elements differ; first at flat index " << first
                << ": device " << g[first] << ", cpu " << w[first] << "; largest |difference| " << worst
                << "; tolerance " << tol.atol << " * " << scale << " + " << tol.rtol << " * |cpu|";
  return false;
}

// Forward (and, where wrt marks inputs, gradient) parity of f on dev against the CPU.
// `in` are realized CPU tensors. `f32_required`: a device refusal is a failure.
void check_parity(Device& dev, const std::string& what, const std::vector<Tensor>& in, const std::vector<bool>& wrt,
                  const Fn& f, const TolFn& tol, Tol grad_tol, bool f32_required, Tally& tally, std::mt19937& rng) {
  SCOPED_TRACE(what);
  if (const char* why = known_failure(dev, what)) {
    tally.known.push_back(what + " (" + why + ")");
    return;
  }
  const bool grads = std::find(wrt.begin(), wrt.end(), true) != wrt.end();
  std::vector<Tensor> cin = in, din;
  for (size_t i = 0; i < in.size(); ++i)
    if (grads && wrt[i]) cin[i] = in[i].detach().requires_grad_();
  Tensor want;
  try {
    want = f(cin);
    want.realize();
  } catch (const Error& e) {
    if (f32_required) ADD_FAILURE() << what << ": the CPU refused the f32 case: " << e.what();
    tally.op_rejected.push_back(what);
    return;
  }
  Tensor got;
  try {
    // Inside the try: a device without the dtype may already refuse the upload's kernels.
    for (size_t i = 0; i < in.size(); ++i) {
      Tensor d = in[i].to(dev);
      d.realize();
      din.push_back(grads && wrt[i] ? d.detach().requires_grad_() : d);
    }
    got = f(din);
    EXPECT_EQ(&got.device(), &dev) << what << ": the result is not on the device under test";
    got.to(cpu_device()).realize();
  } catch (const Error& e) {
    if (!is_refusal(e) || f32_required) {
      ADD_FAILURE() << what << " on " << dev.name() << ": " << e.what();
      return;
    }
    tally.refused.push_back(what);
    return;
  }
  ++tally.ran;
  expect_close(got, want, tol(want.dtype()), what + " forward");
  if (!grads) return;
  // Weights make every output element's gradient distinct (a plain sum would hide permutations).
  std::vector<double> wv = testing::sample(Domain::Any, static_cast<size_t>(want.numel()), rng);
  Tensor w = cast(tensor(wv, want.shape()), want.dtype());
  std::vector<Tensor> cl, dl;
  std::vector<size_t> which;
  for (size_t i = 0; i < in.size(); ++i)
    if (wrt[i]) cl.push_back(cin[i]), dl.push_back(din[i]), which.push_back(i);
  try {
    std::vector<Tensor> gc = grad({sum(want * w)}, cl), gd = grad({sum(got * w.to(dev))}, dl);
    for (size_t j = 0; j < which.size(); ++j) {
      const std::string g = what + " gradient of input " + std::to_string(which[j]);
      ASSERT_EQ(gc[j].defined(), gd[j].defined()) << g;
      if (!gc[j].defined()) continue;
      EXPECT_EQ(&gd[j].device(), &dev) << g << " is not on the device under test";
      expect_close(gd[j], gc[j], grad_tol, g);
    }
  } catch (const Error& e) {
    ADD_FAILURE() << what << " backward on " << dev.name() << ": " << e.what();
  }
}

// A realized f32 CPU tensor with values in the domain.
Tensor randt(Shape shape, std::mt19937& rng, Domain d = Domain::Any) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor t = cast(tensor(testing::sample(d, static_cast<size_t>(n), rng), shape), DType::F32);
  t.realize();
  return t;
}

Tensor randids(Shape shape, int64_t high, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = static_cast<int64_t>(rng() % static_cast<uint32_t>(high));
  return tensor(v, shape);
}

// ---- tolerances (the header's table) ----
Tol exact() { return {0, 0}; }

Tol elementwise_tol(const Device& dev, DType out, bool transcendental) {
  switch (out) {
    case DType::F32:
      return transcendental ? Tol{2e-5, 2e-5} : Tol{1e-6, 1e-6};
    case DType::F64:
      if (!transcendental) return {1e-12, 1e-12};
      return backend_kind(dev) == "vulkan" ? Tol{2e-5, 2e-5} : Tol{1e-10, 1e-10};
    case DType::F16:
      return {1e-4, std::ldexp(1.0, -10) + 2e-5};
    case DType::BF16:
      return {2e-5, std::ldexp(1.0, -7) + 2e-5};
    default:
      return exact();
  }
}

Tol template_tol(const Device& dev, DType out, bool transcendental) {
  switch (out) {
    case DType::F32:
      return {5e-5, 5e-5};
    case DType::F64:
      return transcendental && backend_kind(dev) == "vulkan" ? Tol{2e-5, 2e-5} : Tol{1e-10, 1e-10};
    case DType::F16:
      return {2e-3, 2e-3};
    case DType::BF16:
      return {1.6e-2, 1.6e-2};
    default:
      return exact();
  }
}

const Tol kGradTol{5e-5, 5e-5};

// ============================================================================================
// 1. The elementwise table
// ============================================================================================

bool has_transcendental(std::string_view forward) {
  for (const char* f : {"exp", "log", "sqrt", "sin", "cos", "tanh", "erf", "pow"})
    if (forward.find(f) != std::string_view::npos) return true;
  return false;
}

// One value of dtype t in the entry's domain. Floats come from the gradcheck sampler
// (away from kinks and poles); Frac also draws exact halves, where round() must round to
// even and floor/ceil are exact; integers stay small (pow of 1..5 by 1..5 fits everything).
double draw(Domain d, DType t, std::mt19937& rng) {
  if (t == DType::Bool) return static_cast<double>(rng() % 2);
  if (is_floating(t)) {
    if (d == Domain::Frac && rng() % 2) return static_cast<double>(static_cast<int>(rng() % 9) - 4) + 0.5;
    return testing::sample(d, 1, rng)[0];
  }
  if (d == Domain::Positive) return static_cast<double>(1 + rng() % 5);
  const int64_t lo = t == DType::U8 ? 0 : -6;
  int64_t v = lo + static_cast<int64_t>(rng() % 13);
  if (d == Domain::NonZero && v == 0) v = 3;
  return static_cast<double>(v);
}

// Operand layouts over the output [3, 5] (see the header).
const Shape kLayoutBase[3] = {{6, 3}, {5}, {3, 1}};
const char* const kLayoutName[3] = {"transposed+offset", "row-broadcast", "column-broadcast"};

Tensor layout_view(const Tensor& base, int layout, int arity) {
  if (layout == 0) return base.slice(0, 1, 6).t();
  return arity == 1 ? base.expand({3, 5}) : base;  // a unary op broadcasts nothing by itself
}

// Entry `op` of the table through the function alk/tensor.h declares for it (one per line of
// elementwise.def, by the same X-macro): the public API, as a user calls it.
Tensor call_elementwise(OpId op, const std::vector<Operand>& x) {
  switch (op) {
#define ALK_CALL_1(name) alk::name(x.at(0))
#define ALK_CALL_2(name) alk::name(x.at(0), x.at(1))
#define ALK_CALL_3(name) alk::name(x.at(0), x.at(1), x.at(2))
#define ALK_EW(name, arity, ...) \
  case OpId::name: return ALK_CALL_##arity(name);
#include "alk/elementwise.def"
#undef ALK_EW
#undef ALK_CALL_1
#undef ALK_CALL_2
#undef ALK_CALL_3
    default: break;
  }
  fail("parity", Loc::current(), op_name(op), " is not an elementwise op");
}

TEST(DeviceParity, ElementwiseTable) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  for (Device* dev : devs) {
    SCOPED_TRACE("device " + dev->name());
    Tally tally("elementwise");
    std::mt19937 rng(17);
    for (const ElementwiseEntry& e : elementwise_table()) {
      const int ran_before = tally.ran;
      const bool transcendental = has_transcendental(e.forward);
      for (DType t : kAllDTypes) {
        if (e.rule == DTypeRule::Integer && is_floating(t)) continue;  // bitwise ops refuse floats (tests/ops)
        if (!device_declares(*dev, t)) {
          tally.undeclared.push_back(std::string(e.name) + " " + std::string(dtype_name(t)));
          continue;
        }
        for (int pass = 0; pass < 2; ++pass) {
          std::vector<int> layout;
          std::vector<Tensor> in;
          std::vector<bool> wrt;
          std::string what = std::string(e.name) + " " + std::string(dtype_name(t)) + " [";
          for (int k = 0; k < e.arity; ++k) {
            const DType dk = e.rule == DTypeRule::Select && k == 0 ? DType::Bool : t;
            layout.push_back((k + pass) % 3);
            const Shape& sh = kLayoutBase[layout.back()];
            std::vector<double> v(static_cast<size_t>(sh[0] * (sh.size() > 1 ? sh[1] : 1)));
            for (double& x : v) x = draw(e.domain, dk, rng);
            Tensor x = cast(tensor(v, sh), dk);
            x.realize();
            in.push_back(x);
            wrt.push_back(t == DType::F32 && is_floating(dk) && !e.backward[static_cast<size_t>(k)].empty());
            what += std::string(k ? ", " : "") + kLayoutName[layout.back()];
          }
          what += "]";
          const int arity = e.arity;
          const OpId op = e.op;
          Fn f = [op, arity, layout](const std::vector<Tensor>& xs) {
            std::vector<Operand> ops;
            for (int k = 0; k < arity; ++k)
              ops.emplace_back(layout_view(xs[static_cast<size_t>(k)], layout[static_cast<size_t>(k)], arity));
            return call_elementwise(op, ops);
          };
          const Device& d = *dev;
          check_parity(
              *dev, what, in, wrt, f,
              [&d, transcendental](DType out) { return elementwise_tol(d, out, transcendental); }, kGradTol,
              t == DType::F32, tally, rng);
        }
      }
      EXPECT_GT(tally.ran, ran_before) << e.name << " ran on no dtype";
    }
    tally.print(*dev);
  }
}

// ============================================================================================
// Casts: every dtype pair
// ============================================================================================

TEST(DeviceParity, Casts) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  // Values every destination represents or rounds by rule: fractions (truncation toward zero,
  // round to nearest even for narrower floats), zero and near zero (bool), magnitudes up to
  // 120 (u8, f16 and bf16 round differently). u8 pairs see no negatives (a negative float to
  // u8 is undefined in C and CUDA); float-to-float pairs also get an f16 overflow, an f16
  // underflow, infinities and NaN.
  const std::vector<double> kSigned = {0, 0.25, -0.75, 1, -1, 2.5, -3.5, 7.9, -119.6, 100.1, 1.0 / 3, -65.999};
  const std::vector<double> kFloatOnly = {1e5, -7e4, 1e-8, INFINITY, -INFINITY, NAN};
  for (Device* dev : devs) {
    SCOPED_TRACE("device " + dev->name());
    Tally tally("casts");
    std::mt19937 rng(3);
    for (DType src : kAllDTypes)
      for (DType dst : kAllDTypes) {
        if (!device_declares(*dev, src) || !device_declares(*dev, dst)) {
          tally.undeclared.push_back(std::string(dtype_name(src)) + "->" + std::string(dtype_name(dst)));
          continue;
        }
        std::vector<double> v = kSigned;
        if (src == DType::U8 || dst == DType::U8)
          for (double& x : v) x = std::fabs(x);
        if (is_floating(src) && is_floating(dst)) v.insert(v.end(), kFloatOnly.begin(), kFloatOnly.end());
        Tensor x = cast(tensor(v, {static_cast<int64_t>(v.size())}), src);
        x.realize();
        const std::string what = "cast " + std::string(dtype_name(src)) + "->" + std::string(dtype_name(dst));
        check_parity(
            *dev, what, {x}, {false}, [dst](const std::vector<Tensor>& xs) { return cast(xs[0], dst); },
            [](DType) { return exact(); }, kGradTol, src == DType::F32 && dst == DType::F32, tally, rng);
      }
    // Gradients through casts (f32 -> narrower or wider -> f32).
    Tensor x = randt({4, 5}, rng);
    for (DType mid : {DType::F64, DType::F16, DType::BF16}) {
      if (!device_declares(*dev, mid)) continue;
      const std::string what = "cast f32->" + std::string(dtype_name(mid)) + "->f32 gradient";
      check_parity(
          *dev, what, {x}, {true},
          [mid](const std::vector<Tensor>& xs) { return cast(cast(xs[0], mid) * 3.0, DType::F32); },
          [&](DType o) { return template_tol(*dev, o, false); }, kGradTol, true, tally, rng);
    }
    // A chain of bf16 ops fuses into one kernel whose bf16 intermediates are rounded in the
    // kernel (RoundBf16): exactly the CPU's bits, infinities and NaN included.
    if (device_declares(*dev, DType::BF16)) {
      std::vector<double> v = kSigned;
      v.insert(v.end(), kFloatOnly.begin(), kFloatOnly.end());
      Tensor xb = cast(tensor(v, {static_cast<int64_t>(v.size())}), DType::BF16);
      xb.realize();
      check_parity(
          *dev, "bf16 chain", {xb}, {false},
          [](const std::vector<Tensor>& xs) {
            Tensor a = xs[0] * 1.37 + 0.5;
            return maximum(a * a - 3.0, -a);
          },
          [](DType) { return exact(); }, kGradTol, true, tally, rng);
    }
    tally.print(*dev);
  }
}

// ============================================================================================
// 2. Template ops: a case list per family, run over dtypes
// ============================================================================================

struct Case {
  std::string name;
  std::vector<Tensor> inputs;  // realized CPU tensors; the f32 ones are cast to each run's dtype
  std::vector<bool> wrt;       // differentiated on the f32 run (empty: none)
  Fn f;
  std::vector<DType> dtypes = kFloatDTypes;
  bool transcendental = false;  // widens f64 on Vulkan (the header's table)
  double tol_scale = 1;         // LargeShapes: sums of ~1e5 terms (the header's table)
};

void run_cases(const char* family, const std::vector<Device*>& devs, const std::vector<Case>& cases) {
  for (Device* dev : devs) {
    SCOPED_TRACE("device " + dev->name());
    Tally tally(family);
    std::mt19937 rng(99);
    for (const Case& c : cases)
      for (DType t : c.dtypes) {
        const std::string what = c.name + " " + std::string(dtype_name(t));
        if (!device_declares(*dev, t)) {
          tally.undeclared.push_back(what);
          continue;
        }
        std::vector<Tensor> in = c.inputs;
        for (Tensor& x : in)
          if (x.dtype() == DType::F32 && t != DType::F32) (x = cast(x, t)).realize();
        std::vector<bool> wrt = c.wrt;
        if (t != DType::F32) wrt.assign(in.size(), false);
        wrt.resize(in.size(), false);
        const Device& d = *dev;
        const bool tr = c.transcendental;
        const double k = c.tol_scale;
        auto tol = [&d, tr, k](DType o) {
          const Tol base = template_tol(d, o, tr);
          return Tol{base.atol * k, base.rtol * k};
        };
        // The case's first dtype (f32, or the one an integer-only op takes) must run everywhere.
        check_parity(*dev, what, in, wrt, c.f, tol, Tol{kGradTol.atol * k, kGradTol.rtol * k},
                     t == DType::F32 || t == c.dtypes.front(), tally, rng);
      }
    tally.print(*dev);
  }
}

TEST(DeviceParity, Reductions) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(5);
  const Tensor x = randt({4, 6, 5}, rng), pos = randt({4, 6, 5}, rng, Domain::Positive) * 0.4 + 0.3;
  pos.realize();
  // Small integers with ties, for integer sums and for argmax/argmin's first-index rule. Held
  // as f32 (exact) so that each run casts them to its dtype, like every other data input.
  std::vector<double> iv(120);
  for (double& v : iv) v = static_cast<double>(rng() % 7) - 3;
  const Tensor ints = cast(tensor(iv, {4, 6, 5}), DType::F32);
  ints.realize();
  using V = std::vector<Tensor>;
  const std::vector<DType> kInts = {DType::I64, DType::I32, DType::F32};
  std::vector<Case> cases = {
      {"sum axis 1", {x}, {true}, [](const V& v) { return sum(v[0], {1}); }},
      {"sum axes 0,2 keepdim",
       {x},
       {true},
       [](const V& v) {
         return sum(v[0], {0, 2}, true);
       }},
      {"sum all", {x}, {true}, [](const V& v) { return sum(v[0]); }},
      {"sum of a transposed view", {x}, {true}, [](const V& v) { return sum(v[0].transpose(0, 2), {1}); }},
      {"mean axis -1 keepdim", {x}, {true}, [](const V& v) { return mean(v[0], {-1}, true); }},
      {"mean all", {x}, {true}, [](const V& v) { return mean(v[0]); }},
      {"max axis 0", {x}, {true}, [](const V& v) { return max(v[0], {0}); }},
      {"min axes 1,2 keepdim",
       {x},
       {true},
       [](const V& v) {
         return min(v[0], {1, 2}, true);
       }},
      {"max all", {x}, {true}, [](const V& v) { return max(v[0]); }},
      {"prod axis 1", {pos}, {true}, [](const V& v) { return prod(v[0], {1}); }},
      {"var axis 2", {x}, {true}, [](const V& v) { return var(v[0], {2}); }},
      {"logsumexp axis 1", {x}, {true}, [](const V& v) { return logsumexp(v[0], {1}); }, kFloatDTypes, true},
      // A Map producer becomes the reduction's prologue, a Map consumer its epilogue.
      {"fused sqrt(sum(x*x) + 1)",
       {x},
       {true},
       [](const V& v) { return sqrt(sum(v[0] * v[0], {2}) + 1.0); },
       kFloatDTypes,
       true},
      {"integer sum axis 1", {ints}, {}, [](const V& v) { return sum(v[0], {1}); }, kInts},
      {"integer max axes 0,2",
       {ints},
       {},
       [](const V& v) {
         return max(v[0], {0, 2});
       },
       kInts},
      {"argmax dim 1", {x}, {}, [](const V& v) { return argmax(v[0], 1); }},
      {"argmin flattened", {x}, {}, [](const V& v) { return argmin(v[0]); }},
      {"argmax dim 0 keepdim", {x}, {}, [](const V& v) { return argmax(v[0], 0, true); }},
      {"argmin dim 2 of a transposed view", {x}, {}, [](const V& v) { return argmin(v[0].transpose(1, 2), 2); }},
      {"argmax with ties (first index)", {ints}, {}, [](const V& v) { return argmax(v[0], 1); }, kInts},
      {"argmin with ties (first index)", {ints}, {}, [](const V& v) { return argmin(v[0], 2); }, kInts},
  };
  // Sums over the rows of a row-major matrix (bias gradients; CUDA's column mode, with a
  // lane over 16 bytes of adjacent columns where every input allows): 768 columns (16-byte
  // vectors in every dtype), 771 (odd: one column per lane), a two-input prologue, a
  // column slice at an aligned and at an odd offset, a max, integer sums; row counts that
  // are not a multiple of a chunk.
  std::vector<double> civ(1000 * 64);
  for (double& v : civ) v = static_cast<double>(rng() % 7) - 3;
  const Tensor col_ints = cast(tensor(civ, {1000, 64}), DType::F32);
  col_ints.realize();
  const std::vector<Case> column_cases = {
      {"column sum [1000,768] axis 0",
       {randt({1000, 768}, rng)},
       {true},
       [](const V& v) { return sum(v[0], {0}); },
       kFloatDTypes,
       false,
       4},
      {"column sum [3,300,771] axes 0,1",
       {randt({3, 300, 771}, rng)},
       {true},
       [](const V& v) {
         return sum(v[0], {0, 1});
       },
       kFloatDTypes,
       false,
       4},
      {"column sum(x*y) [520,96] axis 0",
       {randt({520, 96}, rng), randt({520, 96}, rng)},
       {true, true},
       [](const V& v) { return sum(v[0] * v[1], {0}); },
       kFloatDTypes,
       false,
       4},
      {"column sum of columns 8..136 of [600,144]",
       {randt({600, 144}, rng)},
       {true},
       [](const V& v) { return sum(v[0].slice(1, 8, 136), {0}); },
       kFloatDTypes,
       false,
       4},
      {"column sum of columns 1..129 of [600,144]",
       {randt({600, 144}, rng)},
       {true},
       [](const V& v) { return sum(v[0].slice(1, 1, 129), {0}); },
       kFloatDTypes,
       false,
       4},
      // A bias gradient as the GPT step has it: [B, T] rows merged into one strided dim, the
      // sum cast to f32 (CUDA stores the cast from the reduction, not in a pass of its own);
      // an epilogue that reads a tensor beside the sum.
      {"column sum [4,250,768] axes 0,1 cast to f32",
       {randt({4, 250, 768}, rng)},
       {true},
       [](const V& v) { return cast(sum(v[0], {0, 1}), DType::F32); },
       kFloatDTypes,
       false,
       4},
      {"column sum [1000,136] axis 0 * y + 1",
       {randt({1000, 136}, rng), randt({136}, rng)},
       {true, true},
       [](const V& v) { return sum(v[0], {0}) * v[1] + 1.0; },
       kFloatDTypes,
       false,
       4},
      {"column max [700,136] axis 0", {randt({700, 136}, rng)}, {true}, [](const V& v) { return max(v[0], {0}); }},
      {"integer column sum [1000,64] axis 0", {col_ints}, {}, [](const V& v) { return sum(v[0], {0}); }, kInts},
  };
  cases.insert(cases.end(), column_cases.begin(), column_cases.end());
  run_cases("reductions", devs, cases);
}

TEST(DeviceParity, Matmul) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(6);
  using V = std::vector<Tensor>;
  auto mm = [](const V& v) { return matmul(v[0], v[1]); };
  std::vector<Case> cases = {
      {"2d [7,9]@[9,5]", {randt({7, 9}, rng), randt({9, 5}, rng)}, {true, true}, mm},
      {"batched [3,7,9]@[3,9,5]", {randt({3, 7, 9}, rng), randt({3, 9, 5}, rng)}, {true, true}, mm},
      {"broadcast batch [2,1,7,9]@[3,9,5]", {randt({2, 1, 7, 9}, rng), randt({3, 9, 5}, rng)}, {true, true}, mm},
      {"shared B [4,7,9]@[9,5]", {randt({4, 7, 9}, rng), randt({9, 5}, rng)}, {true, true}, mm},
      {"transposed views [9,7]^T@[5,9]^T",
       {randt({9, 7}, rng), randt({5, 9}, rng)},
       {true, true},
       [](const V& v) { return matmul(v[0].t(), v[1].t()); }},
      {"batched transposed A [3,9,7]^T@[3,9,5]",
       {randt({3, 9, 7}, rng), randt({3, 9, 5}, rng)},
       {true, true},
       [](const V& v) { return matmul(v[0].transpose(1, 2), v[1]); }},
      {"matrix-vector [7,9]@[9]", {randt({7, 9}, rng), randt({9}, rng)}, {true, true}, mm},
      {"vector-matrix [9]@[9,5]", {randt({9}, rng), randt({9, 5}, rng)}, {true, true}, mm},
      {"epilogue relu(a@b + bias)",
       {randt({7, 9}, rng), randt({9, 5}, rng), randt({5}, rng)},
       {true, true, true},
       [](const V& v) { return relu(matmul(v[0], v[1]) + v[2]); }},
      {"epilogue gelu(a@b + bias) + residual",
       {randt({2, 7, 9}, rng), randt({9, 5}, rng), randt({5}, rng), randt({2, 7, 5}, rng)},
       {true, true, true, true},
       [](const V& v) { return gelu(matmul(v[0], v[1]) + v[2]) + v[3]; },
       kFloatDTypes,
       true},
      {"odd sizes [33,65]@[65,17]", {randt({33, 65}, rng), randt({65, 17}, rng)}, {true, true}, mm},
  };
  run_cases("matmul", devs, cases);
}

TEST(DeviceParity, SoftmaxAndNorms) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(7);
  using V = std::vector<Tensor>;
  const Tensor x = randt({4, 5, 6}, rng), y = randt({4, 5, 8}, rng);
  std::vector<Case> cases;
  for (int64_t dim : {0, 1, -1}) {
    cases.push_back({"softmax dim " + std::to_string(dim),
                     {x},
                     {true},
                     [dim](const V& v) { return softmax(v[0], dim); },
                     kFloatDTypes,
                     true});
    cases.push_back({"log_softmax dim " + std::to_string(dim),
                     {x},
                     {true},
                     [dim](const V& v) { return log_softmax(v[0], dim); },
                     kFloatDTypes,
                     true});
  }
  cases.push_back({"softmax of a transposed view",
                   {x},
                   {true},
                   [](const V& v) { return softmax(v[0].transpose(0, 2), -1); },
                   kFloatDTypes,
                   true});
  cases.push_back({"layer_norm [8] affine", {y, randt({8}, rng), randt({8}, rng)}, {true, true, true}, [](const V& v) {
                     return layer_norm(v[0], {8}, v[1], v[2]);
                   }});
  cases.push_back({"layer_norm [5,8] plain", {y}, {true}, [](const V& v) { return layer_norm(v[0], {5, 8}); }});
  cases.push_back(
      {"layer_norm of a transposed view", {y, randt({4}, rng), randt({4}, rng)}, {true, true, true}, [](const V& v) {
         return layer_norm(v[0].transpose(0, 2), {4}, v[1], v[2]);
       }});
  cases.push_back({"rms_norm [8] weight", {y, randt({8}, rng)}, {true, true}, [](const V& v) {
                     return rms_norm(v[0], {8}, v[1]);
                   }});
  cases.push_back({"rms_norm [5,8] plain", {y}, {true}, [](const V& v) { return rms_norm(v[0], {5, 8}); }});
  // The layer-norm backward kernel in every dtype (gradients are otherwise compared on f32
  // only): the case returns y, dx, dweight and dbias flattened into one vector. Row widths
  // for each way a row is spread over a warp group (CUDA rows.cu ROW_VEC kernels): 768 (16-byte
  // vectors, a warp per row), 1001 (odd: scalar loads, two warps per row), 4000 (8 warps per
  // row in f32), a transposed view and a contiguous view at an odd offset (scalar loads);
  // row counts that leave a block's last rows empty.
  auto ln_with_grads = [](int64_t inner, std::function<Tensor(const Tensor&)> view) {
    return [inner, view](const V& v) {
      Tensor x = v[0].detach().requires_grad_(), w = v[1].detach().requires_grad_(), b = v[2].detach().requires_grad_();
      Tensor out = layer_norm(view(x), {inner}, w, b);
      std::vector<Tensor> g = grad({out}, {x, w, b}, {v[3]});
      return cat({out.reshape({-1}), g[0].reshape({-1}), g[1], g[2]});
    };
  };
  auto same = [](const Tensor& t) { return t; };
  for (auto [rows, inner] : {std::pair<int64_t, int64_t>{37, 768}, {21, 1001}, {9, 4000}})
    cases.push_back({"layer_norm gradients [" + std::to_string(rows) + "," + std::to_string(inner) + "]",
                     {randt({rows, inner}, rng), randt({inner}, rng), randt({inner}, rng), randt({rows, inner}, rng)},
                     {},
                     ln_with_grads(inner, same)});
  cases.push_back({"layer_norm gradients of a transposed view [64,40]^T",
                   {randt({64, 40}, rng), randt({64}, rng), randt({64}, rng), randt({40, 64}, rng)},
                   {},
                   ln_with_grads(64, [](const Tensor& t) { return t.t(); })});
  cases.push_back({"layer_norm gradients at an odd offset [19,256]",
                   {randt({19 * 256 + 3}, rng), randt({256}, rng), randt({256}, rng), randt({19, 256}, rng)},
                   {},
                   ln_with_grads(256, [](const Tensor& t) {
                     return t.slice(0, 3, 19 * 256 + 3).reshape({19, 256});
                   })});
  // A residual stream: x feeds the norm and the sum after it, so the norm's backward gets the
  // gradient x already has (devices whose kernel adds it: Device::norm_backward_adds), in
  // CUDA's row-in-registers kernel (768; 1001, odd: scalar loads; 4000 on 8 warps), its
  // per-row kernels (9000: wider than registers hold) and with that gradient an odd view (the
  // residual taken through a transposed product).
  auto ln_residual = [](int64_t inner, bool transposed) {
    return [inner, transposed](const V& v) {
      Tensor x = v[0].detach().requires_grad_(), w = v[1].detach().requires_grad_(), b = v[2].detach().requires_grad_();
      Tensor skip = transposed ? (x.t() * 1.5).t() : x * 1.5;
      Tensor out = layer_norm(x, {inner}, w, b) * v[3] + skip;  // (backward reaches skip first)
      std::vector<Tensor> g = grad({out}, {x, w, b}, {v[3]});
      return cat({out.reshape({-1}), g[0].reshape({-1}), g[1], g[2]});
    };
  };
  for (auto [rows, inner, transposed] : {std::tuple<int64_t, int64_t, bool>{37, 768, false}, {21, 1001, false},
                                         {9, 4000, false}, {5, 9000, false}, {16, 256, true}})
    cases.push_back({"layer_norm gradients in a residual stream [" + std::to_string(rows) + "," + std::to_string(inner) +
                         "]" + (transposed ? " (its gradient a transposed view)" : ""),
                     {randt({rows, inner}, rng), randt({inner}, rng), randt({inner}, rng), randt({rows, inner}, rng)},
                     {},
                     ln_residual(inner, transposed)});
  cases.push_back(
      {"rms_norm [21,1001] weight", {randt({21, 1001}, rng), randt({1001}, rng)}, {true, true}, [](const V& v) {
         return rms_norm(v[0], {1001}, v[1]);
       }});
  run_cases("softmax and norms", devs, cases);
}

#ifndef ALK_PARITY_PUBLIC_ONLY
// On a device whose layer-norm backward adds the gradient its input already has (a residual
// stream's: Device::norm_backward_adds), the residual costs the backward no kernel of its own.
// (Values: the residual-stream cases of SoftmaxAndNorms.)
TEST(DeviceParity, LayerNormBackwardAddsTheResidualGradient) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  for (Device* dev : devs) {
    if (!dev->norm_backward_adds()) continue;
    SCOPED_TRACE("device " + dev->name());
    const Tensor x0 = randn({64, 768}).to(*dev), w = randn({768}).to(*dev), b = randn({768}).to(*dev);
    const Tensor seed = randn({64, 768}).to(*dev);
    realize({x0, w, b, seed});
    auto backward_kernels = [&](bool residual) {
      Tensor x = x0.detach().requires_grad_();
      Tensor y = layer_norm(x, {768}, w, b);
      if (residual) y = y + x;  // backward reaches x through the sum before the norm's rule runs
      y.realize();
      std::vector<Tensor> g = grad({y}, {x}, {seed});
      g[0].realize();
      return last_schedule_stats().kernels;
    };
    EXPECT_EQ(backward_kernels(true), backward_kernels(false));
  }
}

// The fused softmax cross-entropy (ops.h cross_entropy_rows) on the devices that have its
// kernels (the "cross_entropy" feature; elsewhere nn::cross_entropy composes log_softmax):
// the packed (nll, logsumexp) rows and the logits' gradient through both columns.
TEST(DeviceParity, FusedCrossEntropy) {
  ALK_PARITY_DEVICES_OR_SKIP(all_devs);
  std::vector<Device*> devs;
  for (Device* d : all_devs) {
    const auto& f = d->info().features;
    if (std::find(f.begin(), f.end(), "cross_entropy") != f.end()) devs.push_back(d);
  }
  if (devs.empty()) GTEST_SKIP() << "no device under test has the fused cross-entropy kernels";
  std::mt19937 rng(12);
  using V = std::vector<Tensor>;
  const Tensor targets = tensor(std::vector<int64_t>{3, -100, 0, 39, 7, 12}, {6});
  // Long rows (many vectors a thread) with masked entries: every 7th logit -inf, and row 5
  // -inf but for its target (its loss 0).
  std::vector<double> masked = testing::sample(Domain::Any, 6 * 3000, rng);
  for (size_t i = 0; i < masked.size(); ++i) {
    masked[i] *= 8.0;
    if (i % 7 == 3 || (i / 3000 == 5 && i % 3000 != 12)) masked[i] = -INFINITY;
  }
  const Tensor masked_logits = tensor(masked, {6, 3000});
  std::vector<Case> cases = {
      {"rows of 3000 classes with -inf entries (masked logits), one row all -inf but its target",
       {masked_logits, targets},
       {true},
       [](const V& v) { return cross_entropy_rows(v[0], v[1], -100, Loc::current()); },
       kFloatDTypes,
       true},
      {"rows of 40 classes (16-byte vectors), one ignored",
       {randt({6, 40}, rng), targets},
       {true},
       [](const V& v) { return cross_entropy_rows(v[0], v[1], -100, Loc::current()); },
       kFloatDTypes,
       true},
      {"a transposed view of the logits",
       {randt({40, 6}, rng), targets.to(DType::I32)},
       {true},
       [](const V& v) { return cross_entropy_rows(v[0].t(), v[1], -100, Loc::current()); },
       kFloatDTypes,
       true},
      {"37 classes (no vectors), ignore_index 0",
       {randt({6, 37}, rng), tensor(std::vector<int64_t>{0, 36, 0, 5, 1, 2}, {6})},
       {true},
       [](const V& v) { return cross_entropy_rows(v[0], v[1], 0, Loc::current()); },
       kFloatDTypes,
       true},
  };
  run_cases("fused cross-entropy", devs, cases);
}

#endif  // ALK_PARITY_PUBLIC_ONLY

TEST(DeviceParity, IndexOps) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(8);
  using V = std::vector<Tensor>;
  const Tensor x = randt({4, 6}, rng);
  std::vector<Case> cases = {
      {"gather dim 1",
       {x, randids({4, 3}, 6, rng)},
       {true},
       [](const V& v) { return gather(v[0], 1, v[1]); },
       kAllDTypes},
      {"gather dim 0",
       {x, randids({5, 6}, 4, rng)},
       {true},
       [](const V& v) { return gather(v[0], 0, v[1]); },
       kAllDTypes},
      {"gather of a transposed view",
       {x, randids({6, 2}, 4, rng)},
       {true},
       [](const V& v) { return gather(v[0].t(), 1, v[1]); },
       kAllDTypes},
      {"index_select dim 0 (repeats)",
       {x, tensor(std::vector<int64_t>{3, 0, 3, 1, 2}, {5})},
       {true},
       [](const V& v) { return index_select(v[0], 0, v[1]); },
       kAllDTypes},
      {"index_select dim 1",
       {x, tensor(std::vector<int64_t>{5, 1, 1}, {3})},
       {true},
       [](const V& v) { return index_select(v[0], 1, v[1]); },
       kAllDTypes},
      {"embedding",
       {randt({10, 4}, rng), randids({2, 7}, 10, rng)},
       {true},
       [](const V& v) { return embedding(v[0], v[1]); }},
      {"scatter_add dim 1 (repeated ids)",
       {x, randids({4, 5}, 6, rng), randt({4, 5}, rng)},
       {true, false, true},
       [](const V& v) { return scatter_add(v[0], 1, v[1], v[2]); },
       {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32}},
      {"scatter_add dim 0",
       {x, randids({7, 6}, 4, rng), randt({7, 6}, rng)},
       {true, false, true},
       [](const V& v) { return scatter_add(v[0], 0, v[1], v[2]); }},
      {"one_hot", {randids({2, 5}, 7, rng)}, {}, [](const V& v) { return one_hot(v[0], 7); }, {DType::I64}},
  };
  run_cases("index ops", devs, cases);
}

TEST(DeviceParity, ShapeOps) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(9);
  using V = std::vector<Tensor>;
  const Tensor m = randt({2, 5, 6}, rng), c = randt({3, 4, 5}, rng);
  std::vector<Case> cases;
  for (int64_t k : {0, 1, -2}) {
    cases.push_back(
        {"tril k=" + std::to_string(k), {m}, {true}, [k](const V& v) { return tril(v[0], k); }, kAllDTypes});
    cases.push_back(
        {"triu k=" + std::to_string(k), {m}, {true}, [k](const V& v) { return triu(v[0], k); }, kAllDTypes});
  }
  cases.push_back(
      {"triu of a transposed view", {m}, {true}, [](const V& v) { return triu(v[0].transpose(1, 2)); }, kAllDTypes});
  for (int64_t dim : {0, 2})
    cases.push_back({"cumsum dim " + std::to_string(dim),
                     {c},
                     {true},
                     [dim](const V& v) { return cumsum(v[0], dim); },
                     {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32}});
  cases.push_back(
      {"cumsum of a transposed view", {c}, {true}, [](const V& v) { return cumsum(v[0].transpose(0, 2), 1); }});
  cases.push_back({"pad last dim (1, 2)", {c}, {true}, [](const V& v) { return pad(v[0], {1, 2}); }, kAllDTypes});
  cases.push_back({"pad two dims value 0.5", {c}, {true}, [](const V& v) { return pad(v[0], {1, 0, 2, 1}, 0.5); }});
  cases.push_back({"cat dim 0 (one operand transposed)",
                   {randt({2, 3}, rng), randt({4, 3}, rng), randt({3, 1}, rng)},
                   {true, true, true},
                   [](const V& v) {
                     return cat({v[0], v[1], v[2].t()}, 0);
                   },
                   kAllDTypes});
  cases.push_back({"cat dim 1",
                   {randt({3, 2}, rng), randt({3, 4}, rng)},
                   {true, true},
                   [](const V& v) {
                     return cat({v[0], v[1]}, 1);
                   },
                   kAllDTypes});
  cases.push_back({"stack dim 1", {randt({3, 4}, rng), randt({3, 4}, rng)}, {true, true}, [](const V& v) {
                     return stack({v[0], v[1]}, 1);
                   }});
  // The gradient of a strided slice longer than one position is a SliceScatter kernel.
  cases.push_back({"slice_scatter (gradient of x[:, 1:6:2])", {randt({3, 7, 2}, rng)}, {true}, [](const V& v) {
                     return v[0].slice(1, 1, 6, 2) * 3.0;
                   }});
  cases.push_back({"slice_scatter (gradient of x[1:3, 2:])",
                   {randt({4, 5}, rng)},
                   {true},
                   [](const V& v) { return exp(v[0].slice(0, 1, 3).slice(1, 2, 5)); },
                   kFloatDTypes,
                   true});
  run_cases("shape ops", devs, cases);
}

TEST(DeviceParity, Attention) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(10);
  using V = std::vector<Tensor>;
  std::vector<Case> cases;
  struct Shape4 {
    int64_t t, s, d;
    bool causal;
  };
  for (const Shape4& s : {Shape4{7, 7, 8, true}, Shape4{17, 17, 32, false}, Shape4{5, 9, 64, false},
                          Shape4{17, 17, 64, true}, Shape4{9, 5, 16, true}}) {
    const bool causal = s.causal;
    cases.push_back({"sdpa T=" + std::to_string(s.t) + " S=" + std::to_string(s.s) + " D=" + std::to_string(s.d) +
                         (causal ? " causal" : ""),
                     {randt({2, 2, s.t, s.d}, rng), randt({2, 2, s.s, s.d}, rng), randt({2, 2, s.s, s.d}, rng)},
                     {true, true, true},
                     [causal](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], causal); },
                     kFloatDTypes,
                     true});
  }
  // q, k, v as the strided [B, H, T, D] views of one [B, T, 3, H, D] projection (as a model has them).
  cases.push_back({"sdpa of a packed qkv projection, scale 0.3",
                   {randt({2, 6, 3, 2, 16}, rng)},
                   {true},
                   [](const V& v) {
                     Tensor p = v[0].permute({2, 0, 3, 1, 4});
                     return scaled_dot_product_attention(p.select(0, 0), p.select(0, 1), p.select(0, 2), true, 0.3);
                   },
                   kFloatDTypes,
                   true});
  // Grouped-query (the LLaMA family): 6 query heads over 2 key/value heads, read through the
  // stride-0 group dim; the gradients of k and v summed over each group.
  for (bool causal : {true, false})
    cases.push_back({std::string("sdpa grouped-query 6 heads over 2") + (causal ? " causal" : ""),
                     {randt({2, 6, 9, 16}, rng), randt({2, 2, 9, 16}, rng), randt({2, 2, 9, 16}, rng)},
                     {true, true, true},
                     [causal](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], causal); },
                     kFloatDTypes,
                     true});
  // Rotary positions on a slice of a projection [B, T, heads, D] (the q part), positions given
  // as a tensor (a decode step's per-slot positions are not 0..T-1).
  Tensor positions = tensor(std::vector<int64_t>{0, 1, 2, 9, 30}, {5});
  Tensor inv_freq = tensor(nn::rotary_inv_freq(16, 10000, {"llama3", 8, 1, 4, 8}), {8});
  positions.realize(), inv_freq.realize();
  cases.push_back({"rotary_embedding of a projection's slice",
                   {randt({2, 5, 7, 16}, rng), positions, inv_freq},
                   {true, false, false},
                   [](const V& v) { return rotary_embedding(v[0].slice(2, 1, 4), v[1], v[2]); },
                   kFloatDTypes,
                   true});
  run_cases("attention", devs, cases);
}

// The decode ops of include/alk/generate.h: the cache write (rows as a strided slice of a
// packed projection), grouped-query decode attention over per-slot lengths (0 included), and
// sampling where it is a pure function of the logits (greedy, top-k 1; the Vulkan suite
// compares tempered draws, which f32 rounding may move across a boundary).
TEST(DeviceParity, Decode) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(12);
  using V = std::vector<Tensor>;
  std::vector<Case> cases;
  Tensor positions = tensor(std::vector<int64_t>{5, 0, 2}, {3});
  Tensor lengths = tensor(std::vector<int64_t>{6, 0, 3}, {3});
  positions.realize(), lengths.realize();
  cases.push_back({"kv_cache_write of a projection's slice",
                   {randt({3, 6, 2, 8}, rng), randt({3, 3, 2, 8}, rng), positions},
                   {},
                   [](const V& v) { return kv_cache_write(v[0], v[1].select(1, 1), v[2]); },
                   kFloatDTypes});
  cases.push_back({"decode_attention, 4 heads over 2 kv heads",
                   {randt({3, 4, 8}, rng), randt({3, 6, 2, 8}, rng), randt({3, 6, 2, 8}, rng), lengths},
                   {},
                   [](const V& v) { return decode_attention(v[0], v[1], v[2], v[3]); },
                   kFloatDTypes,
                   true});
  Tensor settings = tensor(std::vector<float>{0, 0, 1, 1, 1, 1, 0.5f, 1, 0.5f, 0, 7, 0.3f}, {4, 3});
  Tensor seeds = tensor(std::vector<int64_t>{1, 2, 3, 4}, {4}), counters = tensor(std::vector<int64_t>{0, 5, 9, 2}, {4});
  settings.realize(), seeds.realize(), counters.realize();
  cases.push_back({"sample_tokens, greedy and top-k 1",
                   {randt({4, 300}, rng), settings, seeds, counters},
                   {},
                   [](const V& v) { return sample_tokens(v[0], v[1], v[2], v[3]); },
                   {DType::F32}});
  run_cases("decode", devs, cases);
}

TEST(DeviceParity, Conv) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(11);
  using V = std::vector<Tensor>;
  const Tensor x = randt({2, 3, 7, 6}, rng);
  Conv2dGeometry g;
  g.kh = 3, g.kw = 2, g.stride_h = 2, g.stride_w = 1, g.pad_h = 1, g.pad_w = 1, g.dilation_h = 1, g.dilation_w = 2;
  // The number of window positions with that geometry: ((7+2-3)/2+1) * ((6+2-2-1)/1+1) = 4 * 6.
  const int64_t positions = 4 * 6;
  std::vector<Case> cases = {
      {"unfold2d k3x2 s2x1 p1 d1x2", {x}, {true}, [g](const V& v) { return unfold2d(v[0], g); }, kAllDTypes},
      {"unfold2d pad value -1", {x}, {true}, [g](const V& v) { return unfold2d(v[0], g, -1.0); }},
      {"fold2d (adjoint of the unfold)",
       {randt({2, 3 * 3 * 2, positions}, rng)},
       {true},
       [g](const V& v) { return fold2d(v[0], 7, 6, g); }},
      {"conv2d 3->4 k3 p1 + bias",
       {x, randt({4, 3, 3, 3}, rng), randt({4}, rng)},
       {true, true, true},
       [](const V& v) { return conv2d(v[0], v[1], v[2], 1, 1); }},
      {"conv2d 3->6 k3 s2 d2 groups 3",
       {x, randt({6, 1, 3, 3}, rng)},
       {true, true},
       [](const V& v) { return conv2d(v[0], v[1], Tensor(), 2, 2, 2, 3); }},
      {"conv2d depthwise 3 k3 s2 p1 + bias",
       {x, randt({3, 1, 3, 3}, rng), randt({3}, rng)},
       {true, true, true},
       [](const V& v) { return conv2d(v[0], v[1], v[2], 2, 1, 1, 3); }},
      {"max_pool2d k2", {x}, {true}, [](const V& v) { return max_pool2d(v[0], 2); }},
      {"max_pool2d k3 s2 p1", {x}, {true}, [](const V& v) { return max_pool2d(v[0], 3, 2, 1); }},
      {"avg_pool2d k2", {x}, {true}, [](const V& v) { return avg_pool2d(v[0], 2); }},
  };
  run_cases("conv", devs, cases);
}

// Shapes past one workgroup / thread block, tile and shared-memory tile: grid-stride loops, rows
// split across workgroups, multi-pass reductions and scans, partial GEMM and attention tiles,
// many colliding scatter writes. f32 (and gradients) only, but GEMM and attention, whose tensor
// core paths are the likeliest to go wrong at tile edges, in every float dtype.
TEST(DeviceParity, LargeShapes) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(12);
  using V = std::vector<Tensor>;
  const std::vector<DType> kF32 = {DType::F32};
  std::vector<Case> cases = {
      {"elementwise over 300001: gelu(x) * y + 1",
       {randt({300001}, rng), randt({300001}, rng)},
       {true, true},
       [](const V& v) { return gelu(v[0]) * v[1] + 1.0; },
       kF32,
       true},
      {"sum of long rows [3,70001] axis 1",
       {randt({3, 70001}, rng)},
       {true},
       [](const V& v) { return sum(v[0], {1}); },
       kF32,
       false,
       4},
      {"sum of many short rows [20001,3] axis 1",
       {randt({20001, 3}, rng)},
       {true},
       [](const V& v) { return sum(v[0], {1}); },
       kF32},
      {"sum over the outer dim [5003,40] axis 0",
       {randt({5003, 40}, rng)},
       {true},
       [](const V& v) { return sum(v[0], {0}); },
       kF32,
       false,
       4},
      {"mean of all 200003", {randt({200003}, rng)}, {true}, [](const V& v) { return mean(v[0]); }, kF32, false, 4},
      {"max of all 200003", {randt({200003}, rng)}, {true}, [](const V& v) { return max(v[0]); }, kF32},
      {"argmax of long rows [2,50001]", {randt({2, 50001}, rng)}, {}, [](const V& v) { return argmax(v[0], 1); }, kF32},
      {"softmax of rows of 5000",
       {randt({3, 5000}, rng)},
       {true},
       [](const V& v) { return softmax(v[0], 1); },
       kF32,
       true},
      {"layer_norm of rows of 4100",
       {randt({3, 4100}, rng), randt({4100}, rng), randt({4100}, rng)},
       {true, true, true},
       [](const V& v) { return layer_norm(v[0], {4100}, v[1], v[2]); },
       kF32,
       false,
       4},
      {"cumsum of long rows [2,10007]",
       {randt({2, 10007}, rng)},
       {true},
       [](const V& v) { return cumsum(v[0], 1); },
       kF32,
       false,
       4},
      {"matmul [130,260]@[260,70]",
       {randt({130, 260}, rng), randt({260, 70}, rng)},
       {true, true},
       [](const V& v) { return matmul(v[0], v[1]); },
       kFloatDTypes,
       false,
       2},
      // K and every row stride multiples of 8 (16-byte rows): the aligned tile loads of a
      // tensor-core GEMM; the two cases around it take its unaligned and strided paths.
      {"matmul [256,128]@[128,192] aligned",
       {randt({256, 128}, rng), randt({128, 192}, rng)},
       {true, true},
       [](const V& v) { return matmul(v[0], v[1]); },
       kFloatDTypes,
       false,
       2},
      {"matmul [2,129,64]@[64,131]^T-view + bias",
       {randt({2, 129, 64}, rng), randt({131, 64}, rng), randt({131}, rng)},
       {true, true, true},
       [](const V& v) { return matmul(v[0], v[1].t()) + v[2]; },
       kFloatDTypes,
       false,
       2},
      {"sdpa T=130 D=64 causal",
       {randt({1, 2, 130, 64}, rng), randt({1, 2, 130, 64}, rng), randt({1, 2, 130, 64}, rng)},
       {true, true, true},
       [](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], true); },
       kFloatDTypes,
       true},
      {"embedding of 1200 ids into [300,64]",
       {randt({300, 64}, rng), randids({4, 300}, 300, rng)},
       {true},
       [](const V& v) { return embedding(v[0], v[1]); },
       kF32},
      {"scatter_add of [5000,8] into [10,8]",
       {randt({10, 8}, rng), randids({5000, 8}, 10, rng), randt({5000, 8}, rng)},
       {true, false, true},
       [](const V& v) { return scatter_add(v[0], 0, v[1], v[2]); },
       kF32,
       false,
       4},
      // Philox over many counters: every thread must take its own part of the stream.
      {"rand of 1000003 on the device",
       {randt({1}, rng)},
       {},
       [](const V& v) {
         DeviceGuard on(v[0].device());
         manual_seed(77);
         return rand({1000003});
       },
       kF32},
  };
  run_cases("large shapes", devs, cases);
}

// ============================================================================================
// Random: the same stream on every device
// ============================================================================================

TEST(DeviceParity, Random) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  struct Draws {
    Tensor u, n, i, mask, drop;
  };
  auto draw_on = [](Device& d, DType t) {
    DeviceGuard on(d);
    manual_seed(1234);
    Draws r;
    r.u = rand({37, 11}, t);  // 407 values: not a multiple of Philox's 4 per counter
    r.n = randn({37, 11}, t);
    r.i = randint(-3, 9, {5, 7});
    r.mask = dropout_mask({9, 13}, 0.3);
    r.drop = dropout(ones({6, 7}, t), 0.5);
    realize({r.u, r.n, r.i, r.mask, r.drop});
    return r;
  };
  for (Device* dev : devs) {
    SCOPED_TRACE("device " + dev->name());
    Tally tally("random");
    for (DType t : kFloatDTypes) {
      const std::string what = "random " + std::string(dtype_name(t));
      SCOPED_TRACE(what);
      if (!device_declares(*dev, t)) {
        tally.undeclared.push_back(what);
        continue;
      }
      if (const char* why = known_failure(*dev, what)) {
        tally.known.push_back(what + " (" + why + ")");
        continue;
      }
      Draws c, g;
      try {
        c = draw_on(cpu_device(), t);
        g = draw_on(*dev, t);
      } catch (const Error& e) {
        if (t == DType::F32 || !is_refusal(e)) {
          ADD_FAILURE() << what << ": " << e.what();
        } else {
          tally.refused.push_back(what);
        }
        continue;
      }
      ++tally.ran;
      for (const Tensor* r : {&g.u, &g.n, &g.i, &g.mask, &g.drop})
        EXPECT_EQ(&r->device(), dev) << what << ": drawn off the device under test";
      expect_close(g.u, c.u, exact(), what + " rand values");
      expect_close(g.n, c.n, template_tol(*dev, t, true), what + " randn values");
      expect_close(g.i, c.i, exact(), what + " randint values");
      expect_close(g.mask, c.mask, exact(), what + " dropout_mask values");
      expect_close(g.drop, c.drop, exact(), what + " dropout values");
      // Statistics computed on the device (independent of the CPU reference).
      const double umin = min(g.u).item(), umax = max(g.u).item(), umean = mean(cast(g.u, DType::F32)).item();
      EXPECT_GE(umin, 0.0) << what;
      EXPECT_LE(umax, 1.0) << what;  // f16/bf16 may round values just below 1 up to 1
      EXPECT_NEAR(umean, 0.5, 0.05) << what;
      const Tensor n32 = cast(g.n, DType::F32);
      EXPECT_NEAR(mean(n32).item(), 0.0, 0.15) << what;
      EXPECT_NEAR(std(n32).item(), 1.0, 0.15) << what;
      EXPECT_GE(min(g.i).item(), -3) << what;
      EXPECT_LE(max(g.i).item(), 8) << what;
      EXPECT_NEAR(mean(cast(g.mask, DType::F32)).item(), 0.7, 0.1) << what;
    }
    tally.print(*dev);
  }
}

// ============================================================================================
// 3. A compiled GPT training step (the pattern of tests/backend/vulkan/test_vulkan_gpt.cpp)
// ============================================================================================

std::vector<double> gpt_losses(Device& dev, int steps, bool llama = false) {
  manual_seed(5);
  nn::GPTConfig cfg;
  if (llama) {  // RMSNorm, rotary, SwiGLU, 4 heads over 2 key/value heads, q/k/v biases, untied head
    cfg.norm = nn::NormKind::RMSNorm, cfg.positions = nn::PositionKind::Rotary, cfg.mlp = nn::MLPKind::SwiGLU;
    cfg.heads = 4, cfg.kv_heads = 2, cfg.mlp_hidden = 48, cfg.bias = false, cfg.qkv_bias = true;
    cfg.tie_embeddings = false;
  }
  cfg.vocab = 97;
  cfg.ctx = 16;
  cfg.dim = 32;
  if (!llama) cfg.heads = 2;
  cfg.layers = 2;
  nn::GPT model(cfg);  // initialized on the CPU, then moved: every run starts from the same weights
  model.to(dev);
  optim::AdamW opt(model.named_parameters(), 3e-3);
  Program step = testing::compiled_lm_step(model, opt);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    // A repeating sequence the model can learn, shifted per step.
    std::vector<int64_t> ids(2 * 17);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(s) * 3) % 97);
    const Tensor all = tensor(ids, {2, 17});
    step({all.slice(1, 0, 16).contiguous().to(dev), all.slice(1, 1, 17).contiguous().to(dev)});
    const Tensor loss = step.captured("loss");
    EXPECT_EQ(&loss.device(), &dev) << "step " << s << ": the loss was not computed on " << dev.name();
    losses.push_back(loss.item());
  }
  return losses;
}

TEST(DeviceParity, CompiledGptSteps) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  for (bool llama : {false, true}) {
    const char* family = llama ? "llama" : "gpt";
    const std::vector<double> cpu = gpt_losses(cpu_device(), 20, llama);
    ASSERT_EQ(cpu.size(), 20u);
    EXPECT_LT(cpu.back(), cpu.front() - 0.5) << family << ": the model learns the repeating sequence";
    for (Device* dev : devs) {
      SCOPED_TRACE("device " + dev->name() + " " + family);
      if (const char* why = known_failure(*dev, "gpt")) {
        std::cout << "[parity " << dev->name() << "] " << family << ": KNOWN FAILURE (" << why << ")\n";
        continue;
      }
      const std::vector<double> got = gpt_losses(*dev, 20, llama);
      ASSERT_EQ(got.size(), cpu.size());
      for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(got[i], cpu[i], 2e-4 * std::max(1.0, cpu[i])) << "step " << i;
      std::cout << "[parity " << dev->name() << "] " << family << ": 20 compiled AdamW steps, loss " << got.front()
                << " -> " << got.back() << " (cpu " << cpu.front() << " -> " << cpu.back() << ")\n";
    }
  }
}

// ============================================================================================
// Coverage: every template op of op_table.h has a family above, or a reason it has none
// ============================================================================================

TEST(DeviceParity, EveryTemplateOpHasAFamily) {
  // Which test exercises each template op (through the Tensor API; the *Backward ops and
  // SliceScatter are reached through gradients, Buffer/Const/Map/ToDevice in every case).
  const std::set<std::string> covered = {
      "Buffer",       "Const",
      "Map",          "ToDevice",   // every case
      "Cast",                       // Casts
      "Reduce",       "ArgReduce",  // Reductions
      "Matmul",                     // Matmul
      "Softmax",      "LogSoftmax",
      "LayerNorm",    "LayerNormBackward",
      "RmsNorm",  // SoftmaxAndNorms
      "Gather",       "IndexSelect",
      "ScatterAdd",   "OneHot",  // IndexOps
      "Tri",          "Cumsum",
      "Pad",          "Concat",
      "SliceScatter",                       // ShapeOps
      "Random",                             // Random
      "Attention",    "AttentionBackward",  // Attention
      "Unfold",       "Fold",               // Conv
      "CrossEntropy", "CrossEntropyBackward",  // FusedCrossEntropy
      "Conv2d",  // Conv: the CPU's conv2d (other devices compose unfold + matmul), compared with them
      "HostCall",  // no device math: a host function (src/dist's bucket hand-off) that the CPU and CUDA
                   // run and Vulkan declines (DeviceParity.HostCallRunsOnlyWhereItsFunctionCan); tests/dist runs it
      "KvCacheWrite", "DecodeAttention", "SampleTokens",  // Decode
      "UserKernel",                                       // UserKernels
  };
  std::vector<std::string> all;
#define ALK_X(name, differentiable, writes_over_input0) all.push_back(#name);
  ALK_TEMPLATE_OPS(ALK_X)
#undef ALK_X
  for (const std::string& op : all) EXPECT_TRUE(covered.count(op)) << op << " has no device parity case";
  EXPECT_EQ(covered.size(), all.size()) << "the covered list names an op the table no longer has";
}

// The same spec's bodies on each device against the C++ body on the CPU.
const UserKernel& parity_axpy() {
  static const UserKernel k = [] {
    KernelSpec s;
    s.name = "parity_axpy";
    s.inputs = {{"x", DType::F32}, {"y", DType::F32}};
    s.output = {"res", DType::F32};
    s.attrs = {{"a", DType::F32}};
    const char* body = "res[i] = a * x[i] + y[i];";
    s.body[int(KernelTarget::Cpp)] = s.body[int(KernelTarget::Cuda)] = s.body[int(KernelTarget::Glsl)] = body;
    s.body[int(KernelTarget::Wgsl)] = body;
    return UserKernel(std::move(s));
  }();
  return k;
}

// Rows of 32-bit mixing: row r of out gets, for each column c, rotl(x[r, c] ^ r, c % 32) + k.
const UserKernel& parity_rows() {
  static const UserKernel k = [] {
    KernelSpec s;
    s.name = "parity_rows";
    s.inputs = {{"x", DType::I32, 2}};
    s.output = {"res", DType::I32, 2};
    s.attrs = {{"k", DType::I32}};
    s.invocations = [](std::span<const Shape> in, std::span<const double>) { return in[0][0]; };
    s.workgroup_size = 32;
    s.body[int(KernelTarget::Cpp)] = s.body[int(KernelTarget::Cuda)] = R"(
for (int64_t c = 0; c < x_size1; ++c) {
  const uint32_t v = static_cast<uint32_t>(x[i * x_size1 + c]) ^ static_cast<uint32_t>(i);
  const int n = static_cast<int>(c % 32);
  res[i * res_size1 + c] = static_cast<int32_t>(((v << n) | (v >> ((32 - n) % 32))) + static_cast<uint32_t>(k));
})";
    s.body[int(KernelTarget::Glsl)] = R"(
for (uint c = 0u; c < x_size1; ++c) {
  uint v = uint(x[i * x_size1 + c]) ^ i;
  uint n = c % 32u;
  res[i * res_size1 + c] = int(((v << n) | (v >> ((32u - n) % 32u))) + uint(k));
})";
    return UserKernel(std::move(s));
  }();
  return k;
}

TEST(DeviceParity, UserKernels) {
  ALK_PARITY_DEVICES_OR_SKIP(devs);
  std::mt19937 rng(13);
  using V = std::vector<Tensor>;
  std::vector<int32_t> bits(37 * 70);
  for (int32_t& b : bits) b = static_cast<int32_t>(rng());
  const Tensor words = tensor(bits, {37, 70});
  words.realize();
  std::vector<Case> cases = {
      {"axpy over 3001 elements", {randt({3001}, rng), randt({3001}, rng)}, {},
       [](const V& v) { return parity_axpy()({v[0], v[1]}, {1.5}); }, {DType::F32}},
      {"axpy of a transposed view (copied contiguous)", {randt({5, 7}, rng), randt({7, 5}, rng)}, {},
       [](const V& v) { return parity_axpy()({v[0].t(), v[1]}, {-2.0}); }, {DType::F32}},
      {"32-bit rows, one invocation a row", {words}, {},
       [](const V& v) { return parity_rows()({v[0]}, {-7}); }, {DType::F32}},
  };
  // A remote device refuses user kernels (the peer would compile and run their source:
  // src/remote/wire.cpp; Remote.UserKernelsAreRefused checks the refusal).
  std::vector<Device*> local;
  for (Device* d : devs)
    if (d->info().kind != "remote") local.push_back(d);
  run_cases("user kernels", local, cases);
}

// HostCall runs a host function over the device's own pointers: the CPU and CUDA run it
// (tests/dist), Vulkan declines it (a clear scheduler error); a device that takes it calls the
// function once per launch, with the kernel's buffers.
TEST(DeviceParity, HostCallRunsOnlyWhereItsFunctionCan) {
  struct Count final : HostFunction {
    mutable int calls = 0;
    mutable const Buffer* output = nullptr;
    void run(const Kernel& k) const override {
      ++calls;
      output = k.output.buffer.get();
    }
  };
  for (Device* dev : devices_under_test()) {
    SCOPED_TRACE("device " + dev->name());
    auto count = std::make_shared<Count>();
    Kernel k;
    k.op = OpId::HostCall;
    k.node.op = OpId::HostCall;
    k.node.params = HostCallParams{count};
    k.node.shape = {4};
    k.output = KernelArg{dev->allocate(16), 0, DType::F32, {4}, {1}, 0};
    k.inputs = {KernelArg{dev->allocate(16), 0, DType::F32, {4}, {1}, 0}};
    if (dev->info().kind == "cuda") {
      EXPECT_TRUE(dev->supports(k));
    }
    if (dev->info().kind == "vulkan") {
      EXPECT_FALSE(dev->supports(k));
    }
    if (!dev->supports(k)) continue;
    dev->run(k);
    dev->synchronize();
    EXPECT_EQ(count->calls, 1);
    EXPECT_NE(count->output, nullptr);
  }
  Kernel k;
  k.op = k.node.op = OpId::HostCall;
  EXPECT_TRUE(cpu_device().supports(k));
}

}  // namespace
}  // namespace alk
