// WebGPU export (src/webgpu): bundles written by alk::webgpu::export_bundle run in Node
// through npm `webgpu` (Dawn) on Chromium's SwiftShader Vulkan ICD (a software adapter, so
// no GPU is needed) and give the CPU backend's results. Tests that need shader-f16 (native
// f16 kernels) run on Mesa 25 lavapipe (`make mesa25`, build/mesa25/env), and skip saying so
// when it is missing.
//   WebgpuParity.Elementwise*   every entry of the op table, per dtype, one kernel each
//                               (transposed+offset and broadcast operands), in one bundle
//   WebgpuParity.TemplateOps    every template op family with a WGSL kernel, forward and
//                               gradients (fused prologues/epilogues included)
//   WebgpuGolden.*              the golden WGSL files (tests/golden) run as checked in, against
//                               the CPU's evaluator (tests/webgpu/run_kernel.mjs)
//   WebgpuExport.*              the micro GPT's step: 10 steps in Node = the CPU's losses;
//                               i64 narrowing is checked; unexportable ops are named
//   WebgpuTokenizer.*           the bundle's BPE tokenizer in JavaScript: ids = the C++ encode's
//   WebgpuPage.*                the bundle's page trains in headless Chromium (playwright-core),
//                               BPE tokens in, BPE-decoded sample out
// Tolerances (|webgpu - cpu| <= atol * max(1, max|cpu|) + rtol * |cpu|): integers and bools
// exact; f32 1e-6 (1e-4 with a transcendental: WGSL's exp/log/... are a few ulp, erf/log1p/
// expm1 are the IR's expansions, SwiftShader's pow/tanh are coarser); f64 runs as f32 in
// WGSL: 1e-5 / 1e-4; f16 2^-10 + 1e-3 (native or packed); bf16 2^-7 + 1e-2; template ops
// 2e-4 (f32 sums in another order; the CPU sums in f64). The micro GPT's losses, f32 or
// Autocast(f16): 2e-3 relative to the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <unistd.h>

#include "../../examples/sha256/sha256_kernel.h"
#include "alk/alk.h"
#include "alk/tokenizer.h"
#include "alk/train.h"
#include "alk/webgpu.h"
#include "backend/cpu/eval.h"
#include "expr/golden_kernels.h"
#include "io/json.h"
#include "ops/ops.h"
#include "required.h"
#include "testing.h"
#include "webgpu/gpt_bundle.h"

namespace alk {
namespace {

namespace fs = std::filesystem;
const std::string kSource = ALK_SOURCE_DIR;
const std::string kSwiftShader = "/usr/lib/chromium/vk_swiftshader_icd.json";

std::string missing_deps() {
  if (!fs::exists(kSource + "/node_modules/webgpu/package.json"))
    return "npm package `webgpu` is not installed in " + kSource +
           "/node_modules: run `make webgpu-deps` (npm install --no-save webgpu playwright-core; `make test` does)";
  if (!fs::exists(kSwiftShader)) return kSwiftShader + " is missing: apt-get install chromium (make deps)";
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not on PATH: apt-get install nodejs";
  return "";
}
#define WEBGPU_OR_SKIP()                                          \
  do {                                                            \
    if (std::string why = missing_deps(); !why.empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("webgpu", why); \
  } while (0)

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("alk_webgpu_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The adapter Node's Dawn runs on: environment variables for the Vulkan loader.
const std::string kSwiftShaderEnv = "VK_ICD_FILENAMES=" + kSwiftShader;

// Mesa 25's lavapipe (`make mesa25` unpacks it from bookworm-backports into build/mesa25,
// beside the system's Mesa 22, which Dawn refuses): the adapter here that offers shader-f16.
// Empty, with `why` set, when it is not there or not usable.
std::string mesa25_env(std::string& why) {
  fs::path env = fs::path(ALK_CLI_PATH).parent_path() / "mesa25" / "env";
  if (!fs::exists(env)) env = fs::path(kSource) / "build" / "mesa25" / "env";  // the ASan build: the Release build's
  if (!fs::exists(env)) {
    why = env.string() + " is missing: run `make mesa25` (Mesa 25 lavapipe from bookworm-backports, unpacked "
          "privately; SwiftShader, the other adapter here, has no shader-f16)";
    return "";
  }
  std::string line = read_text(env.string());
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// Runs `program` of the bundle in dir `runs` times in Node; the parsed result (null on failure).
json::Value run_node(const std::string& dir, const std::string& program, int runs, const std::string& captures = "",
                     const std::string& save = "", const std::string& adapter_env = kSwiftShaderEnv) {
  const std::string out = dir + "/result.json", log = dir + "/node.log";
  const std::string cmd = adapter_env + " node " + kSource + "/tests/webgpu/run_bundle.mjs '" + dir +
                          "' '" + out + "' " + program + " " + std::to_string(runs) + " '" + captures + "' '" + save +
                          "' > '" + log + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "node failed:\n" << read_text(log);
    return nullptr;
  }
  return json::parse(read_text(out));
}

double number(const json::Value& v) {
  if (v.is_string()) {
    const std::string& s = v.as_string();
    return s == "nan" ? NAN : s == "inf" ? INFINITY : -INFINITY;
  }
  return v.as_double();
}

struct Tol {
  double atol, rtol;
};

// Compares a captured value with the CPU's; returns whether it matched.
bool close(const std::string& what, const Tensor& want, const json::Value& got, Tol tol) {
  const std::vector<double> w = cast(want, DType::F64).contiguous().to_vector<double>();
  const json::Array& g = got.as_array();
  EXPECT_EQ(g.size(), w.size()) << what;
  if (g.size() != w.size()) return false;
  double scale = 1;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < w.size(); ++i) {
    const double a = number(g[i]), b = w[i];
    const bool ok = std::isnan(b) ? std::isnan(a) : std::isinf(b) ? a == b : std::fabs(a - b) <= tol.atol * scale + tol.rtol * std::fabs(b);
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " webgpu " << a << " cpu " << b;
      return false;
    }
  }
  return true;
}

// ---- elementwise: every op table entry ----

double draw(Domain d, DType t, std::mt19937& rng) {
  if (t == DType::Bool) return static_cast<double>(rng() % 2);
  if (is_floating(t)) return testing::sample(d, 1, rng)[0];
  if (d == Domain::Positive) return static_cast<double>(1 + rng() % 5);
  const int64_t lo = t == DType::U8 ? 0 : -6;
  int64_t v = lo + static_cast<int64_t>(rng() % 13);
  if (d == Domain::NonZero && v == 0) v = 3;
  return static_cast<double>(v);
}

bool transcendental(std::string_view forward) {
  for (const char* f : {"exp", "log", "sin", "cos", "tan", "erf", "pow", "sqrt", "rsqrt", "sigmoid", "gelu", "silu"})
    if (forward.find(f) != std::string_view::npos) return true;
  return false;
}

Tol elementwise_tol(DType out, bool trans) {
  switch (out) {
    case DType::F32: return trans ? Tol{1e-4, 1e-4} : Tol{1e-6, 1e-6};
    case DType::F64: return trans ? Tol{1e-4, 1e-4} : Tol{1e-5, 1e-5};
    case DType::F16: return {1e-3, 1.0 / 1024};
    case DType::BF16: return {1e-2, 1.0 / 128};
    default: return {0, 0};
  }
}

// Operand k of an entry: 0 a transposed, offset view; 1 a row broadcast; 2 a column broadcast.
Tensor operand(const Tensor& base, int k, int arity) {
  if (k == 0) return base.slice(0, 1, 6).t();
  return arity == 1 ? base.expand({3, 5}) : base;
}

void elementwise_parity(DType t, const std::string& adapter_env = kSwiftShaderEnv, const std::string& f16_mode = "") {
  WEBGPU_OR_SKIP();
  std::mt19937 rng(17);
  const Shape bases[3] = {{6, 3}, {5}, {3, 1}};
  struct Case {
    std::string name;
    OpId op;
    int arity;
    std::vector<Tensor> in;
    bool trans;
  };
  std::vector<Case> cases;
  for (const ElementwiseEntry& e : elementwise_table()) {
    Case c{std::string(e.name), e.op, e.arity, {}, transcendental(e.forward)};
    for (int k = 0; k < e.arity; ++k) {
      const DType dk = e.rule == DTypeRule::Select && k == 0 ? DType::Bool : t;
      const Shape& sh = bases[k];
      std::vector<double> v(static_cast<size_t>(sh[0] * (sh.size() > 1 ? sh[1] : 1)));
      for (double& x : v) x = draw(e.domain, dk, rng);
      Tensor x = cast(tensor(v, sh), dk);
      x.realize();
      c.in.push_back(x);
    }
    try {  // ops the CPU refuses for this dtype (neg of bool) are not cases
      std::vector<Operand> ops;
      for (int k = 0; k < c.arity; ++k) ops.emplace_back(operand(c.in[static_cast<size_t>(k)], k, c.arity));
      apply_elementwise(c.op, ops, Loc::current()).realize();
    } catch (const Error&) {
      continue;
    }
    cases.push_back(std::move(c));
  }
  ASSERT_GT(cases.size(), 10u);
  Program prog = compile([&](const std::vector<Tensor>&) {
    for (const Case& c : cases) {
      std::vector<Operand> ops;
      for (int k = 0; k < c.arity; ++k) ops.emplace_back(operand(c.in[static_cast<size_t>(k)], k, c.arity));
      capture(c.name, apply_elementwise(c.op, ops, Loc::current()));
    }
  });
  prog({});
  prog({});
  const std::string dir = fresh_dir(std::string("ew_") + std::string(dtype_name(t)));
  webgpu::ExportOptions o;
  o.programs = {{"step", &prog}};
  const webgpu::ExportSummary s = webgpu::export_bundle(dir, o);
  EXPECT_GE(s.dispatches, static_cast<int64_t>(cases.size()));
  const json::Value r = run_node(dir, "step", 1, "", "", adapter_env);
  ASSERT_FALSE(r.is_null());
  if (!f16_mode.empty()) {
    EXPECT_EQ(r.at("f16").at("mode").as_string(), f16_mode) << r.at("f16").at("note").as_string();
  }
  int matched = 0, known = 0;
  for (const Case& c : cases) {
    const Tensor want = prog.captured(c.name);
    // WGSL leaves log(0) undefined (SwiftShader gives -88.03, not -inf): log of a bool
    // operand reads 0 half the time. Noted, not compared.
    if (t == DType::Bool && (c.name == "log" || c.name == "log2" || c.name == "log10")) {
      ++known;
      continue;
    }
    // i64 runs as i32 in WGSL: a rotation's u32 value comes back as the i32 with its bits.
    Tensor want_here = want;
    if (t == DType::I64 && (c.name == "rotl" || c.name == "rotr")) {
      std::vector<int64_t> bits = want.to_vector<int64_t>();
      for (int64_t& v : bits) v = static_cast<int32_t>(static_cast<uint32_t>(v));
      want_here = tensor(bits, want.shape());
    }
    matched += close(c.name + " " + std::string(dtype_name(t)), want_here, r.at("runs").as_array()[0].at(c.name),
                     elementwise_tol(want.dtype(), c.trans));
  }
  std::cout << "[webgpu] " << dtype_name(t) << ": " << matched << "/" << cases.size() - known
            << " table entries match the CPU (" << r.at("adapter").as_string() << ")"
            << (known ? " (" + std::to_string(known) + " not compared: log(0) is undefined in WGSL)" : "") << "\n";
  fs::remove_all(dir);
}

TEST(WebgpuParity, ElementwiseF32) { elementwise_parity(DType::F32); }
TEST(WebgpuParity, ElementwiseF64) { elementwise_parity(DType::F64); }
TEST(WebgpuParity, ElementwiseF16) { elementwise_parity(DType::F16); }
TEST(WebgpuParity, ElementwiseBF16) { elementwise_parity(DType::BF16); }
// The shader-f16 variants (array<f16>) on the adapter that offers the feature.
TEST(WebgpuParity, ElementwiseF16Native) {
  std::string why;
  const std::string env = mesa25_env(why);
  if (env.empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("webgpu-f16", why);
  elementwise_parity(DType::F16, env, "native");
}
TEST(WebgpuParity, ElementwiseI64) { elementwise_parity(DType::I64); }
TEST(WebgpuParity, ElementwiseI32) { elementwise_parity(DType::I32); }
TEST(WebgpuParity, ElementwiseU8) { elementwise_parity(DType::U8); }
TEST(WebgpuParity, ElementwiseBool) { elementwise_parity(DType::Bool); }

// ---- the golden WGSL files run in Dawn ----

// Where WGSL keeps a dtype (src/webgpu/export.cpp narrows i64 and f64 the same way; 8- and
// 16-bit values stay packed in u32 words, as the alk dtype stores them).
DType wgsl_storage(DType t) { return t == DType::F64 ? DType::F32 : t == DType::I64 ? DType::I32 : t; }

// Each tests/golden/*.wgsl (ExprEmit.GoldenKernels keeps it equal to what the emitter
// writes) runs as checked in, through tests/webgpu/run_kernel.mjs, against the CPU's evaluator
// of the same expression over the same values: over 1027 contiguous elements, and over a
// [6, 7] output whose first input is read transposed from element 3 on (alk_offset's strided
// path). Two workgroups cover the elements (the grid-stride loop).
void run_golden_wgsl(const expr::testing::Golden& g, bool contiguous, std::mt19937& rng) {
  const Shape shape = contiguous ? Shape{1027} : Shape{6, 7};
  const int64_t n = contiguous ? 1027 : 42;
  const size_t k_in = g.sig.inputs.size();
  const std::string dir = fresh_dir("golden_" + g.name);
  std::vector<std::vector<uint8_t>> host;
  std::vector<cpu::View> views;
  std::vector<int32_t> strides(8 * std::max<size_t>(1, k_in), 0);
  std::vector<uint32_t> offsets;
  std::vector<std::string> bindings;
  for (size_t k = 0; k < k_in; ++k) {
    const DType t = g.sig.inputs[k];
    const bool uniform = k < g.uniform_inputs.size() && g.uniform_inputs[k];
    Shape st(shape.size(), uniform ? 0 : 1);
    int64_t offset = 0, stored = uniform ? 1 : n;
    if (!contiguous && !uniform) st = k == 0 ? Shape{1, 6} : Shape{7, 1};
    if (!contiguous && !uniform && k == 0) offset = 3, stored += 3;
    std::vector<uint8_t> bytes(static_cast<size_t>(stored) * dtype_size(t)),
        gpu(static_cast<size_t>(stored) * dtype_size(wgsl_storage(t)));
    for (int64_t e = 0; e < stored; ++e) {
      const double v = draw(Domain::Any, t, rng);
      cpu::store_double(bytes.data(), t, e, v);
      cpu::store_double(gpu.data(), wgsl_storage(t), e, cpu::load_as_double(bytes.data(), t, e));
    }
    host.push_back(std::move(bytes));
    views.push_back(cpu::View{host.back().data(), t, shape, st, offset});
    for (size_t d = 0; d < st.size(); ++d) strides[8 * k + d] = static_cast<int32_t>(st[d]);
    offsets.push_back(static_cast<uint32_t>(offset));
    bindings.push_back(dir + "/in" + std::to_string(k) + ".bin");
    std::ofstream(bindings.back(), std::ios::binary).write(reinterpret_cast<const char*>(gpu.data()), static_cast<std::streamsize>(gpu.size()));
  }
  const DType out = g.sig.output;
  std::vector<uint8_t> want(static_cast<size_t>(n) * dtype_size(out));
  cpu::eval_map(g.expr, views, cpu::View{want.data(), out, shape, contiguous_strides(shape), 0});
  // The output starts filled with 0xAB bytes (so an element left unwritten shows), then the
  // params block (src/expr/emit.h): n, rank, shape[8], strides[8 * max(1, K)], offset[K + 1].
  const size_t out_bytes = static_cast<size_t>(n) * dtype_size(wgsl_storage(out));
  bindings.push_back(dir + "/out.bin");
  std::ofstream(bindings.back(), std::ios::binary) << std::string(out_bytes, '\xAB');
  offsets.push_back(0);
  std::vector<uint32_t> params{static_cast<uint32_t>(n), static_cast<uint32_t>(shape.size())};
  for (size_t d = 0; d < 8; ++d) params.push_back(d < shape.size() ? static_cast<uint32_t>(shape[d]) : 1u);
  for (int32_t s : strides) params.push_back(static_cast<uint32_t>(s));
  params.insert(params.end(), offsets.begin(), offsets.end());
  ASSERT_EQ(params.size() * 4, expr::map_params_bytes(k_in));
  bindings.push_back(dir + "/params.bin");
  std::ofstream(bindings.back(), std::ios::binary).write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * 4));
  std::string job = "{\"wgsl\": \"" + expr::testing::golden_path(g.name, expr::Target::Wgsl).string() + "\", \"entry\": \"" +
                    g.sig.name + "\", \"output\": " + std::to_string(k_in) + ", \"groups\": 2, \"bindings\": [";
  for (size_t b = 0; b < bindings.size(); ++b) job += (b ? ", \"" : "\"") + bindings[b] + "\"";
  std::ofstream(dir + "/job.json") << job << "]}\n";
  const std::string cmd = kSwiftShaderEnv + " node " + kSource + "/tests/webgpu/run_kernel.mjs '" + dir + "/job.json' '" +
                          dir + "/result.bin' > '" + dir + "/node.log' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << read_text(dir + "/node.log");
  const std::string got = read_text(dir + "/result.bin");
  ASSERT_GE(got.size(), out_bytes);
  const Tol tol = elementwise_tol(out, transcendental(g.expr.str()));
  for (int64_t i = 0; i < n; ++i) {
    const double w = cpu::load_as_double(want.data(), out, i), v = cpu::load_as_double(got.data(), wgsl_storage(out), i);
    const bool ok = std::isnan(w) ? std::isnan(v) : std::isinf(w) ? v == w : std::fabs(v - w) <= tol.atol + tol.rtol * std::fabs(w);
    ASSERT_TRUE(ok) << "element " << i << ": webgpu " << v << ", cpu " << w << (contiguous ? " (contiguous)" : " (strided)");
  }
  fs::remove_all(dir);
}

TEST(WebgpuGolden, WgslFilesRunAndMatchTheCpu) {
  WEBGPU_OR_SKIP();
  std::mt19937 rng(31);
  for (const expr::testing::Golden& g : expr::testing::goldens()) {
    SCOPED_TRACE(g.name);
    run_golden_wgsl(g, true, rng);
    run_golden_wgsl(g, false, rng);
  }
}

// ---- template ops ----

Tensor rand_f32(Shape s, std::mt19937& rng, Domain d = Domain::Any) {
  Tensor t = cast(testing::f64_tensor(std::move(s), d, rng), DType::F32);
  t.realize();
  return t;
}

void template_parity(const std::string& adapter_env) {
  WEBGPU_OR_SKIP();
  std::mt19937 rng(5);
  const Tensor x = rand_f32({4, 6, 5}, rng), pos = rand_f32({4, 6, 5}, rng, Domain::Positive);
  const Tensor m = rand_f32({6, 7}, rng), m2 = rand_f32({3, 7}, rng);
  const Tensor a = rand_f32({5, 9}, rng), b = rand_f32({9, 4}, rng), bias = rand_f32({4}, rng);
  const Tensor ba = rand_f32({3, 5, 9}, rng), bb = rand_f32({3, 9, 4}, rng);
  const Tensor oa = rand_f32({11, 13}, rng), ob = rand_f32({13, 6}, rng);
  // N >= 64: the GEMM's lanes take two vec4 column blocks (vec4 and element-wise B/output).
  const Tensor wa = rand_f32({10, 21}, rng), wb = rand_f32({21, 100}, rng), wbt = rand_f32({100, 21}, rng);
  const Tensor wo = rand_f32({3, 17, 7}, rng), wob = rand_f32({7, 70}, rng);
  const Tensor w5 = rand_f32({5}, rng), b5 = rand_f32({5}, rng);
  const Tensor idx = tensor(std::vector<int64_t>{0, 5, 2, 2, 1, 4, 3, 0, 5, 5, 1, 2, 0, 3, 4, 4, 1, 2, 5, 0}, {4, 1, 5});
  const Tensor src = rand_f32({4, 1, 5}, rng);
  const Tensor ids1 = tensor(std::vector<int64_t>{3, 0, 4, 4, 1}, {5});
  const Tensor ids2 = tensor(std::vector<int64_t>{1, 6, 2, 0, 6, 3}, {2, 3});
  const Tensor emb = rand_f32({7, 8}, rng);
  const Tensor q = rand_f32({2, 3, 6, 8}, rng), k = rand_f32({2, 3, 6, 8}, rng), v = rand_f32({2, 3, 6, 8}, rng);
  const Tensor kx = rand_f32({2, 3, 9, 8}, rng), vx = rand_f32({2, 3, 9, 8}, rng);
  const Tensor targets = tensor(std::vector<int64_t>{1, 0, 6, 3, 3, 2}, {6});
  const Tensor img = rand_f32({2, 3, 7, 6}, rng), cw = rand_f32({4, 3, 3, 3}, rng), cb = rand_f32({4}, rng);
  const Conv2dGeometry geo{.kh = 3, .kw = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dilation_h = 1, .dilation_w = 2};
  std::vector<Tensor> leaves;
  for (const Tensor& t : {x, m, a, b, emb, q, k, v, w5, b5, img, cw}) {
    Tensor l = alias(t);
    l.requires_grad_();
    leaves.push_back(l);
  }
  const Tensor &xg = leaves[0], &mg = leaves[1], &ag = leaves[2], &bg = leaves[3], &eg = leaves[4], &qg = leaves[5],
               &kg = leaves[6], &vg = leaves[7], &wg = leaves[8], &bgn = leaves[9], &ig = leaves[10], &cwg = leaves[11];
  using Fn = std::function<Tensor()>;
  auto gsum = [&](const Tensor& y, const Tensor& wrt) {  // d sum(y * seed) / d wrt, seed fixed
    const Tensor seed = cast(tensor(std::vector<double>(static_cast<size_t>(y.numel()), 0.5), y.shape()), y.dtype()) +
                        cast(arange(0, static_cast<double>(y.numel()), 1, DType::F64).reshape(y.shape()), y.dtype()) * 0.01;
    return grad({y}, {wrt}, {seed})[0];
  };
  const sha256::Padded sha = sha256::pad({"abc", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"});
  const Tensor sha_words = tensor(sha.words, {2, sha.width}), sha_blocks = tensor(sha.blocks, {2});
  sha_words.realize(), sha_blocks.realize();
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"sum_axis1", [&] { return sum(x, {1}); }},
      {"sum_all", [&] { return sum(x); }},
      {"mean_keepdim", [&] { return mean(x, {0, 2}, true); }},
      {"max_axis2", [&] { return max(x, {2}); }},
      {"min_axis0", [&] { return min(x, {0}); }},
      {"prod_axis2", [&] { return prod(pos, {2}); }},
      {"sum_prologue_epilogue", [&] { return sum(exp(x) * 0.5, {2}) * 2.0 + 1.0; }},
      {"sum_transposed", [&] { return sum(m.t(), {1}); }},
      {"argmax", [&] { return argmax(x, 1); }},
      {"argmin", [&] { return argmin(x, 2); }},
      {"matmul", [&] { return matmul(a, b); }},
      {"matmul_batched", [&] { return matmul(ba, bb); }},
      {"matmul_odd_sizes", [&] { return matmul(oa, ob); }},
      {"matmul_odd_transposed", [&] { return matmul(ob.t(), oa.t()); }},
      {"matmul_wide", [&] { return matmul(wa, wb); }},
      {"matmul_wide_b_transposed", [&] { return matmul(wa, wbt.t()); }},
      {"matmul_wide_odd_batched", [&] { return matmul(wo, wob); }},
      {"matmul_broadcast", [&] { return matmul(ba, b); }},
      {"matmul_transposed", [&] { return matmul(b.t(), a.t()); }},
      {"matmul_bias_relu", [&] { return relu(matmul(a, b) + bias); }},
      {"softmax_last", [&] { return softmax(x, -1); }},
      {"softmax_axis0", [&] { return softmax(x, 0); }},
      {"log_softmax", [&] { return log_softmax(x, 1); }},
      {"layer_norm", [&] { return layer_norm(x, {5}, w5, b5); }},
      {"layer_norm_plain2", [&] { return layer_norm(x, {6, 5}); }},
      {"rms_norm", [&] { return rms_norm(x, {5}, w5); }},
      {"gather", [&] { return gather(x, 1, idx); }},
      {"index_select", [&] { return index_select(x, 1, ids1); }},
      {"embedding", [&] { return embedding(emb, ids2); }},
      {"scatter_add", [&] { return scatter_add(x, 1, idx, src); }},
      {"one_hot", [&] { return one_hot(ids1, 7); }},
      {"tril", [&] { return tril(m); }},
      {"triu_k1", [&] { return triu(m, 1); }},
      {"cumsum", [&] { return cumsum(x, 1); }},
      {"pad", [&] { return pad(m, {1, 2, 0, 1}, 0.5); }},
      {"cat", [&] { return cat({m, m2}, 0); }},
      {"attention", [&] { return scaled_dot_product_attention(q, k, v, false); }},
      {"attention_causal", [&] { return scaled_dot_product_attention(q, k, v, true); }},
      {"attention_cross_causal", [&] { return scaled_dot_product_attention(q, kx, vx, true); }},
      {"unfold", [&] { return unfold2d(img, geo, 0.25); }},
      {"fold", [&] { return fold2d(unfold2d(img, geo), 7, 6, geo); }},
      {"conv2d", [&] { return conv2d(img, cw, cb, 2, 1); }},
      {"max_pool2d", [&] { return max_pool2d(img, 2); }},
      {"grad_conv2d_x", [&] { return gsum(conv2d(ig, cwg, cb, 1, 1), ig); }},
      {"grad_conv2d_w", [&] { return gsum(conv2d(ig, cwg, cb, 1, 1), cwg); }},
      {"grad_matmul_a", [&] { return gsum(matmul(ag, bg), ag); }},
      {"grad_matmul_b", [&] { return gsum(matmul(ag, bg), bg); }},
      {"grad_softmax", [&] { return gsum(softmax(xg, -1), xg); }},
      {"grad_log_softmax", [&] { return gsum(log_softmax(xg, 1), xg); }},
      {"grad_layer_norm_x", [&] { return gsum(layer_norm(xg, {5}, wg, bgn), xg); }},
      {"grad_layer_norm_w", [&] { return gsum(layer_norm(xg, {5}, wg, bgn), wg); }},
      {"grad_layer_norm_b", [&] { return gsum(layer_norm(xg, {5}, wg, bgn), bgn); }},
      {"grad_embedding", [&] { return gsum(embedding(eg, ids2), eg); }},
      {"grad_strided_slice", [&] { return gsum(mg.slice(1, 1, 7, 2), mg); }},
      {"grad_cumsum", [&] { return gsum(cumsum(xg, 2), xg); }},
      {"grad_cross_entropy", [&] { return gsum(nn::cross_entropy(mg, targets), mg); }},
      {"grad_attention_q", [&] { return gsum(scaled_dot_product_attention(qg, kg, vg, true), qg); }},
      {"grad_attention_k", [&] { return gsum(scaled_dot_product_attention(qg, kg, vg, true), kg); }},
      {"grad_attention_v", [&] { return gsum(scaled_dot_product_attention(qg, kg, vg, true), vg); }},
      // A kernel from source text: examples/sha256's WGSL body, "abc" and the 448-bit message.
      {"user_kernel_sha256", [&] { return sha256::kernel()({sha_words, sha_blocks}); }},
  };
  Program prog = compile([&](const std::vector<Tensor>&) {
    PortableOps portable;  // conv2d as unfold + matmul: the kernels the WGSL side has
    for (const auto& [name, f] : cases) capture(name, f());
  });
  prog({});
  prog({});
  const std::string dir = fresh_dir("templates");
  webgpu::ExportOptions o;
  o.programs = {{"step", &prog}};
  webgpu::export_bundle(dir, o);
  const json::Value r = run_node(dir, "step", 1, "", "", adapter_env);
  ASSERT_FALSE(r.is_null());
  int matched = 0;
  for (const auto& [name, f] : cases) {
    const Tensor want = prog.captured(name);
    const bool exact = !is_floating(want.dtype());
    matched += close(name, want, r.at("runs").as_array()[0].at(name), exact ? Tol{0, 0} : Tol{2e-4, 2e-4});
  }
  std::cout << "[webgpu] template ops: " << matched << "/" << cases.size() << " cases match the CPU ("
            << r.at("adapter").as_string() << ")\n";
  fs::remove_all(dir);
}

TEST(WebgpuParity, TemplateOps) { template_parity(kSwiftShaderEnv); }

// The same kernels on Mesa 25 lavapipe, the adapter bench-webgpu tunes them for.
TEST(WebgpuParity, TemplateOpsOnMesa25) {
  std::string why;
  const std::string env = mesa25_env(why);
  if (env.empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("webgpu-f16", why);
  template_parity(env);
}

// ---- export ----

const char* kText =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
    "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided the "
    "light from the darkness. And God called the light Day, and the darkness he called Night.";

// A BPE trained on `text` as the bundle's tokenizer (what `alk export` does by default).
void use_bpe(webgpu::GptBundleConfig& c, int vocab_size) {
  c.tokenizer = Tokenizer::train(c.text, vocab_size);
  c.model.vocab = c.tokenizer->vocab_size();
}

void micro_gpt_ten_steps(double dropout, bool bpe = false, DType compute = DType::F32,
                         const std::string& adapter_env = kSwiftShaderEnv, const std::string& f16_mode = "none") {
  webgpu::GptBundleConfig c = webgpu::GptBundleConfig::micro();
  c.compute = compute;
  c.text = kText;
  if (bpe) {
    for (int i = 0; i < 4; ++i) c.text += kText;  // enough tokens for the windows
    use_bpe(c, 300);
  }
  c.model.dropout = dropout;
  webgpu::GptBundle bundle(c);
  const std::string dir = fresh_dir("gpt");
  const webgpu::ExportSummary s = bundle.write(dir);
  EXPECT_TRUE(fs::exists(dir + "/index.html") && fs::exists(dir + "/alk_webgpu.mjs") && fs::exists(dir + "/plan.json"));
  // The forward program on the exported weights: the CPU's logits.
  const json::Value f = run_node(dir, "forward", 1, "logits", "", adapter_env);
  ASSERT_FALSE(f.is_null());
  EXPECT_EQ(f.at("f16").at("mode").as_string(), f16_mode) << f.at("f16").at("note").as_string();
  if (compute == DType::F16) {
    EXPECT_GT(s.shaders_f16, 5);
  }
  std::cout << "[webgpu] " << f.at("adapter").as_string() << "; f16: " << f.at("f16").at("note").as_string() << "\n";
  close("forward logits", bundle.forward->captured("logits"), f.at("runs").as_array()[0].at("logits"), Tol{2e-4, 2e-4});
  std::vector<double> cpu;
  for (int i = 0; i < 10; ++i) cpu.push_back(bundle.cpu_step());
  const json::Value r = run_node(dir, "step", 10, "loss", dir + "/saved.safetensors", adapter_env);
  ASSERT_FALSE(r.is_null());
  // save(): the state after 10 steps, read back as safetensors, is the CPU's.
  const SafetensorsFile saved = load_safetensors(dir + "/saved.safetensors");
  std::map<std::string, Tensor> by_name(saved.tensors.begin(), saved.tensors.end());
  for (const auto& [name, p] : bundle.model->named_parameters()) {
    ASSERT_TRUE(by_name.count(name)) << name << " missing from save()";
    ASSERT_EQ(by_name[name].shape(), p.shape()) << name;
    const std::vector<double> want = cast(p, DType::F64).to_vector<double>(),
                              got = cast(by_name[name], DType::F64).to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - got[i]));
    EXPECT_LT(worst, 1e-3) << "saved " << name << " differs from the CPU's parameter after 10 steps";
  }
  std::string names;
  for (const auto& [name, t] : by_name) names += name + " ";
  EXPECT_TRUE(by_name.count("lr") && by_name.count("optim.wte.weight.exp_avg")) << "saved: " << names;
  const json::Array& runs = r.at("runs").as_array();
  ASSERT_EQ(runs.size(), 10u);
  std::cout << "[webgpu] micro GPT (" << s.dispatches << " dispatches, " << s.shaders << " shaders, " << s.buffers
            << " buffers): step, cpu loss, webgpu loss\n";
  for (size_t i = 0; i < 10; ++i) {
    const double got = number(runs[i].at("loss").as_array()[0]);
    std::cout << "  " << i + 1 << " " << cpu[i] << " " << got << "\n";
    EXPECT_NEAR(got, cpu[i], 2e-3 * std::max(1.0, cpu[i])) << "step " << i + 1;
  }
  EXPECT_LT(cpu.back(), cpu.front());  // it trains (one batch, repeated)
  fs::remove_all(dir);
}

TEST(WebgpuExport, MicroGptTenStepsMatchTheCpu) {
  WEBGPU_OR_SKIP();
  micro_gpt_ten_steps(0);
}

// setLr(0): steps leave every parameter as exported (AdamW's update and decay scale with lr).
TEST(WebgpuExport, SetLrZeroFreezesTheWeights) {
  WEBGPU_OR_SKIP();
  webgpu::GptBundleConfig c = webgpu::GptBundleConfig::micro();
  c.text = kText;
  webgpu::GptBundle bundle(c);
  const std::string dir = fresh_dir("lr");
  bundle.write(dir);
  setenv("ALK_TEST_LR", "0", 1);
  const json::Value r = run_node(dir, "step", 3, "loss", dir + "/saved.safetensors");
  unsetenv("ALK_TEST_LR");
  ASSERT_FALSE(r.is_null());
  const SafetensorsFile before = load_safetensors(dir + "/weights.safetensors");
  const SafetensorsFile after = load_safetensors(dir + "/saved.safetensors");
  std::map<std::string, Tensor> saved(after.tensors.begin(), after.tensors.end());
  int compared = 0;
  for (const auto& [name, t] : before.tensors) {
    if (name.rfind("optim.", 0) == 0 || name == "lr" || name.find("input") != std::string::npos) continue;
    ASSERT_TRUE(saved.count(name)) << name;
    EXPECT_EQ(cast(t, DType::F64).to_vector<double>(), cast(saved[name], DType::F64).to_vector<double>()) << name;
    ++compared;
  }
  EXPECT_GT(compared, 5);
  EXPECT_EQ(cast(saved["lr"], DType::F64).to_vector<double>(), std::vector<double>{0.0});
  const json::Array& runs = r.at("runs").as_array();
  EXPECT_EQ(number(runs[0].at("loss").as_array()[0]), number(runs[2].at("loss").as_array()[0]));  // same batch, same weights
  fs::remove_all(dir);
}

// Dropout masks are the CPU's (the same Philox draws each step), so the losses still match.
TEST(WebgpuExport, MicroGptWithDropoutMatchesTheCpu) {
  WEBGPU_OR_SKIP();
  micro_gpt_ten_steps(0.1);
}

TEST(WebgpuExport, MicroGptOnBpeTokensMatchesTheCpu) {
  WEBGPU_OR_SKIP();
  micro_gpt_ten_steps(0, true);
}

// The step traced under Autocast(F16): f16 activations and matmul inputs, f32 accumulation
// and master weights. SwiftShader has no shader-f16: the packed kernels run (and say so).
TEST(WebgpuExport, MicroGptF16PackedMatchesTheCpu) {
  WEBGPU_OR_SKIP();
  micro_gpt_ten_steps(0, false, DType::F16, kSwiftShaderEnv, "packed");
}

// The same on an adapter with shader-f16 (Mesa 25 lavapipe): the array<f16> kernels.
TEST(WebgpuExport, MicroGptF16NativeMatchesTheCpu) {
  WEBGPU_OR_SKIP();
  std::string why;
  const std::string env = mesa25_env(why);
  if (env.empty()) ALK_SKIP_OR_FAIL_IF_REQUIRED("webgpu-f16", why);
  micro_gpt_ten_steps(0, false, DType::F16, env, "native");
}

// A shader the device rejects fails load() with a JavaScript error naming the kernel file
// and the op (with the caller's file:line) that uses it.
TEST(WebgpuExport, DeviceErrorsNameTheKernel) {
  WEBGPU_OR_SKIP();
  const Tensor a = tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Program prog = compile([&](const std::vector<Tensor>&) { capture("y", exp(a) + 1.0); });
  prog({});
  prog({});
  const std::string dir = fresh_dir("broken");
  webgpu::ExportOptions o;
  o.programs = {{"step", &prog}};
  webgpu::export_bundle(dir, o);
  ASSERT_TRUE(fs::exists(dir + "/kernels/k0.wgsl"));
  {
    std::ofstream f(dir + "/kernels/k0.wgsl", std::ios::app);
    f << "\nfn broken() -> f32 { return undefined_name; }\n";
  }
  const std::string cmd = "VK_ICD_FILENAMES=" + kSwiftShader + " node " + kSource + "/tests/webgpu/run_bundle.mjs '" + dir +
                          "' '" + dir + "/r.json' step 1 > '" + dir + "/node.log' 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  const std::string log = read_text(dir + "/node.log");
  EXPECT_NE(log.find("kernels/k0.wgsl"), std::string::npos) << log;
  EXPECT_NE(log.find("test_webgpu.cpp"), std::string::npos) << log;  // the op's call site
  EXPECT_NE(log.find("undefined_name"), std::string::npos) << log;
  fs::remove_all(dir);
}

TEST(WebgpuExport, TokenIdsBeyondI32AreRefused) {
  const Tensor big = tensor(std::vector<int64_t>{1, int64_t{1} << 40}, {2});
  const Tensor w = tensor(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Program prog = compile([&](const std::vector<Tensor>&) { capture("y", sum(w) + cast(sum(big), DType::F32)); });
  prog({});
  prog({});
  webgpu::ExportOptions o;
  o.programs = {{"step", &prog}};
  try {
    webgpu::export_bundle(fresh_dir("narrow"), o);
    FAIL() << "an i64 beyond i32 was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit in i32"), std::string::npos) << e.what();
  }
}

// Random ops draw the CPU's numbers (Philox keyed by seed, counter = offset + i), fresh ones
// each step: run k of the bundle = the CPU's k-th replay.
TEST(WebgpuExport, RandomOpsDrawTheCpusNumbersEachStep) {
  WEBGPU_OR_SKIP();
  manual_seed(7);
  std::mt19937 rng(3);
  const Tensor w = rand_f32({40, 30}, rng);
  Program prog = compile([&](const std::vector<Tensor>&) {
    capture("uniform", rand({1000}));
    capture("scaled", rand({40, 30}) * 4.0 - 2.0);
    capture("normal", randn({777}));
    capture("integer", randint(-5, 300, {500}));
    capture("dropout", dropout(w, 0.25, true));
  });
  prog({});
  prog({});
  const std::string dir = fresh_dir("random");
  webgpu::ExportOptions o;
  o.programs = {{"step", &prog}};
  webgpu::export_bundle(dir, o);
  std::vector<std::map<std::string, Tensor>> cpu(3);
  for (auto& run : cpu) {
    prog({});
    for (const char* n : {"uniform", "scaled", "normal", "integer", "dropout"}) run[n] = prog.captured(n);
  }
  const json::Value r = run_node(dir, "step", 3);
  ASSERT_FALSE(r.is_null());
  for (size_t k = 0; k < 3; ++k) {
    const json::Value& got = r.at("runs").as_array()[k];
    const std::string run = " run " + std::to_string(k + 1);
    close("uniform" + run, cpu[k]["uniform"], got.at("uniform"), Tol{0, 0});
    close("scaled" + run, cpu[k]["scaled"], got.at("scaled"), Tol{1e-6, 0});
    // f32 log/cos in WGSL (the CPU: double); SwiftShader's are ~2e-4 off near the extremes.
    close("normal" + run, cpu[k]["normal"], got.at("normal"), Tol{1e-3, 1e-3});
    close("integer" + run, cpu[k]["integer"], got.at("integer"), Tol{0, 0});
    close("dropout" + run, cpu[k]["dropout"], got.at("dropout"), Tol{1e-6, 1e-6});
  }
  const json::Array& runs = r.at("runs").as_array();
  EXPECT_NE(number(runs[0].at("uniform").as_array()[0]), number(runs[1].at("uniform").as_array()[0])) << "steps draw anew";
  fs::remove_all(dir);
}

// The CLI writes the bundle and says how to open its page; an unbuilt target is an error.
TEST(WebgpuExport, CliWritesTheBundle) {
  const std::string dir = fresh_dir("cli");
  {
    std::ofstream f(dir + "/text.in");
    for (int i = 0; i < 5; ++i) f << kText;
  }
  const std::string out = dir + "/bundle", log = dir + "/cli.log";
  const std::string cmd = std::string(ALK_CLI_PATH) + " export --target webgpu --size micro --text '" + dir +
                          "/text.in' --out '" + out + "' > '" + log + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(log);
  for (const char* f : {"plan.json", "index.html", "alk_webgpu.mjs", "weights.safetensors", "text.txt", "tokenizer.json",
                        "tokenizer/vocab.json", "tokenizer/merges.txt", "tokenizer/special_tokens.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  // alk train's tokenizer by default: a BPE trained on the text, and the model's vocab is its size.
  const json::Value desc = json::parse(read_text(out + "/tokenizer.json"));
  EXPECT_EQ(desc.at("type").as_string(), "bpe");
  const Tokenizer tok = Tokenizer::load(out + "/tokenizer");
  EXPECT_GT(tok.vocab_size(), 256);
  EXPECT_EQ(desc.at("vocab_size").as_int(), tok.vocab_size());
  EXPECT_EQ(json::parse(read_text(out + "/plan.json")).at("meta").at("vocab").as_int(), tok.vocab_size());
  // --tokenizer DIR loads one (a run's tokenizer/); --tokenizer bytes keeps the bytes.
  const std::string again = std::string(ALK_CLI_PATH) + " export --target webgpu --size micro --text '" + dir +
                            "/text.in' --tokenizer '" + out + "/tokenizer' --out '" + dir + "/b2' > '" + dir + "/b2.log' 2>&1";
  ASSERT_EQ(std::system(again.c_str()), 0) << read_text(dir + "/b2.log");
  EXPECT_EQ(read_text(dir + "/b2/tokenizer/merges.txt"), read_text(out + "/tokenizer/merges.txt"));
  const std::string bytes = std::string(ALK_CLI_PATH) + " export --target webgpu --size micro --text '" + dir +
                            "/text.in' --tokenizer bytes --dtype f16 --out '" + dir + "/b3' > '" + dir + "/b3.log' 2>&1";
  ASSERT_EQ(std::system(bytes.c_str()), 0) << read_text(dir + "/b3.log");
  EXPECT_EQ(json::parse(read_text(dir + "/b3/tokenizer.json")).at("type").as_string(), "bytes");
  EXPECT_FALSE(fs::exists(dir + "/b3/tokenizer/vocab.json"));
  // --dtype f16: shader-f16 variants beside the kernels (none without it).
  const json::Value half = json::parse(read_text(dir + "/b3/plan.json"));
  EXPECT_EQ(half.at("meta").at("compute").as_string(), "f16");
  ASSERT_GT(half.at("shaders_f16").as_object().size(), 5u);
  const std::string variant = read_text(dir + "/b3/" + half.at("shaders_f16").as_object()[0].second.as_string());
  EXPECT_EQ(variant.rfind("enable f16;", 0), 0u) << variant.substr(0, 200);
  EXPECT_NE(variant.find("array<f16>"), std::string::npos);
  EXPECT_NE(read_text(dir + "/b3.log").find("shader-f16 variant"), std::string::npos) << read_text(dir + "/b3.log");
  EXPECT_TRUE(json::parse(read_text(out + "/plan.json")).at("shaders_f16").as_object().empty());
  EXPECT_NE(read_text(log).find("python3 -m http.server -d " + out), std::string::npos) << read_text(log);
  const json::Value plan = json::parse(read_text(out + "/plan.json"));
  EXPECT_TRUE(plan.at("programs").find("step") && plan.at("programs").find("forward"));
  const std::string onnx = std::string(ALK_CLI_PATH) + " export --target onnx --out '" + dir + "/x' > '" + log + "' 2>&1";
  EXPECT_NE(std::system(onnx.c_str()), 0);
  EXPECT_NE(read_text(log).find("not built"), std::string::npos) << read_text(log);
  fs::remove_all(dir);
}

TEST(WebgpuExport, UntracedProgramIsAnError) {
  Program prog = compile([&](const std::vector<Tensor>&) {});
  webgpu::ExportOptions o;
  o.programs = {{"step", &prog}};
  EXPECT_THROW(webgpu::export_bundle(fresh_dir("untraced"), o), Error);
}

// ---- the tokenizer ----

// The bundle's tokenizer in JavaScript (tests/webgpu/tokenize.mjs, no GPU) encodes a text to
// the C++ Tokenizer's ids and decodes them back to the text: the KJV (alk train's corpus; a
// BPE of alk train's default 1024 tokens, as `alk export` makes) with a special token, plus
// what stresses the pre-tokenizer: contractions, digit runs, runs of spaces before words and
// at the end, Unicode letters and numbers, emoji, and White_Space that is not ASCII (NBSP,
// U+0085, U+2028, U+3000).
TEST(WebgpuTokenizer, JavaScriptEncodesAsTheCpp) {
  if (std::system("node --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "node is not on PATH: apt-get install nodejs";
  const std::string kjv = kSource + "/data/kjv.txt";
  std::string corpus;
  if (fs::exists(kjv)) corpus = read_text(kjv).substr(0, 400000);
  else for (int i = 0; i < 100; ++i) corpus += kText;  // data/kjv.txt: make deps / alk train make it
  const std::string tricky =
      "It's I'LL they're we've you'd he'll 'tis don't'  '  x  \n\n\t  indented\r\n"
      "digits 1234567 3.14159 \xd9\xa3\xd9\xa4 \xe2\x85\xab ca\xc3\xa7" "a \xc3\xa9t\xc3\xa9 "
      "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!!! "
      "a\xc2\xa0" "b c\xc2\x85" "d e\xe2\x80\xa8" "f g\xe3\x80\x80h <|endoftext|>after<|endoftext|><|endoftext|>x  "
      "tabs\t\tend   ";
  webgpu::GptBundleConfig c = webgpu::GptBundleConfig::micro();
  c.text = corpus;
  c.tokenizer = Tokenizer::train(corpus, static_cast<int>(train::Config{}.vocab_size), {"<|endoftext|>"});
  c.model.vocab = c.tokenizer->vocab_size();
  const std::string dir = fresh_dir("tokenizer");
  webgpu::GptBundle(c).write(dir);
  const std::string text = corpus.substr(0, 200000) + tricky + corpus.substr(corpus.size() - 3000);
  {
    std::ofstream f(dir + "/in.txt", std::ios::binary);
    f << text;
  }
  const std::string cmd = "node " + kSource + "/tests/webgpu/tokenize.mjs '" + dir + "' '" + dir + "/in.txt' '" + dir +
                          "/out.json' > '" + dir + "/node.log' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(dir + "/node.log");
  const json::Value r = json::parse(read_text(dir + "/out.json"));
  EXPECT_EQ(r.at("type").as_string(), "bpe");
  EXPECT_EQ(r.at("vocab_size").as_int(), c.tokenizer->vocab_size());
  const std::vector<int32_t> want = c.tokenizer->encode(text);
  std::vector<int32_t> got;
  for (const json::Value& v : r.at("ids").as_array()) got.push_back(static_cast<int32_t>(v.as_int()));
  size_t first_diff = 0;
  while (first_diff < std::min(want.size(), got.size()) && want[first_diff] == got[first_diff]) ++first_diff;
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(first_diff, want.size()) << "JS and C++ ids differ at token " << first_diff << " (C++ "
                                     << (first_diff < want.size() ? c.tokenizer->token(want[first_diff]) : "end") << ", JS "
                                     << (first_diff < got.size() ? c.tokenizer->token(got[first_diff]) : "end") << ")";
  EXPECT_EQ(r.at("decoded").as_string(), text);
  EXPECT_LT(want.size(), text.size() / 2) << "the BPE should compress the text";
  std::cout << "[webgpu] tokenizer: " << text.size() << " bytes -> " << want.size() << " BPE tokens (vocab "
            << c.tokenizer->vocab_size() << "), JS = C++; JS encode " << number(r.at("ms")) << " ms\n";
  fs::remove_all(dir);
}

// ---- the page ----

TEST(WebgpuPage, TrainsInHeadlessChromium) {
  WEBGPU_OR_SKIP();
  if (!fs::exists(kSource + "/node_modules/playwright-core/package.json"))
    GTEST_SKIP() << "npm package `playwright-core` is not installed: run `make webgpu-deps`";
  if (!fs::exists("/usr/bin/chromium")) GTEST_SKIP() << "/usr/bin/chromium is missing: apt-get install chromium (make deps)";
  webgpu::GptBundleConfig c = webgpu::GptBundleConfig::micro();
  std::string text;
  for (int i = 0; i < 20; ++i) text += kText;
  c.text = text;
  use_bpe(c, 320);
  webgpu::GptBundle bundle(c);
  const std::string dir = fresh_dir("page");
  bundle.write(dir);
  const std::string out = dir + "/page.json", log = dir + "/page.log";
  // Beside the build's binaries (build/webgpu_page.png), wherever the test runs from.
  const std::string shot = (fs::path(ALK_CLI_PATH).parent_path() / "webgpu_page.png").string();
  const int steps = 12;
  const std::string cmd = "node " + kSource + "/tests/webgpu/page_test.mjs '" + dir + "' '" + out + "' '" + shot + "' " +
                          std::to_string(steps) + " > '" + log + "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(log);
  const json::Value r = json::parse(read_text(out));
  ASSERT_EQ(r.at("error").as_string(), "") << json::dump(r.at("console"));
  const json::Array& losses = r.at("losses").as_array();
  ASSERT_EQ(losses.size(), static_cast<size_t>(steps));
  std::vector<double> l;
  for (const json::Value& v : losses) l.push_back(number(v));
  for (double v : l) EXPECT_TRUE(std::isfinite(v));
  const double first = (l[0] + l[1] + l[2]) / 3, last = (l[steps - 1] + l[steps - 2] + l[steps - 3]) / 3;
  EXPECT_LT(last, first - 0.3) << "the loss did not fall";
  // The export is made after the CPU's warm-up and traced steps: a little below ln(vocab).
  EXPECT_LT(l[0], std::log(static_cast<double>(c.model.vocab)) + 0.1);
  EXPECT_NE(r.at("about").as_string().find("byte-level BPE"), std::string::npos) << r.at("about").as_string();
  // The sample: BPE ids (the prompt as the C++ tokenizer encodes it, then 40 sampled), decoded
  // by the page's tokenizer as the C++ one decodes them.
  std::vector<int32_t> sample_ids;
  for (const json::Value& v : r.at("sample_ids").as_array()) sample_ids.push_back(static_cast<int32_t>(v.as_int()));
  const std::vector<int32_t> prompt = c.tokenizer->encode("And God said");
  ASSERT_EQ(sample_ids.size(), prompt.size() + 40);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), sample_ids.begin()));
  EXPECT_EQ(r.at("sample").as_string(), c.tokenizer->decode(sample_ids));
  EXPECT_GT(r.at("sample").as_string().size(), 40u);
  EXPECT_TRUE(fs::exists(shot) && fs::file_size(shot) > 1000);
  std::cout << "[webgpu] page: losses " << l.front() << " -> " << l.back() << " over " << steps << " steps; screenshot " << shot
            << "\n[webgpu] page: " << r.at("about").as_string() << "\n[webgpu] page sample: " << r.at("sample").as_string()
            << "\n";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace alk
