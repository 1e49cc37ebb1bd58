// GEMM throughput of alk's Vulkan matmul (src/backend/vulkan/kernels/matmul.cpp) against
// cuBLAS through PyTorch, measured in the same run, or against alk's CPU GEMM where this
// machine has no CUDA PyTorch.
//
//   bench_vulkan_gemm [--size N | --mnk M N K] [--dtypes f32,bf16,f16] [--device vulkan:I]
//                     [--iters R] [--tiles large|small|gpu:BMxBNxBK:TMxTN|coop|coop-large|coop[g]:BMxBNxBK:TMxTN|cpu|cpu:BMxBN:TMxTN|auto[,...]] [--no-anchor]
//                     [--tag NAME]   (appended to RATIO names)
//
// Defaults: 4096^3 (512^3 and 3 runs on a CPU implementation such as lavapipe), f32 then bf16
// then f16 (those the device stores), vulkan:0 (discrete GPUs come first; lavapipe is the last
// device, `alk devices` lists them), 20 timed runs.
// For each dtype it prints
//   GEMM <dtype> <M>x<N>x<K> on <device>: <ms> ms, <TFLOP/s> TFLOP/s (tiles ...), max rel err <e>
//   ANCHOR <what>: <ms> ms, <TFLOP/s> TFLOP/s
//   RATIO vk_gemm_<dtype>_<M>x<N>x<K> alk=<ms>ms anchor=<ms>ms ratio=<alk/anchor>
// ratio < 1: alk is faster. The anchor is torch.matmul on CUDA timed with CUDA events
// (f32 with TF32 off: the same arithmetic as alk's f32 path) when
// `python3 -c "import torch; torch.cuda.is_available()"` says so, else alk's CPU
// cpu::matmul on the same operands (f16/bf16 converted while packing, as the CPU does).
// Times are the median of R runs, each one GEMM recorded into the stream and waited for
// (wall clock, so a few microseconds of submission are included). Results are checked on
// 64 sampled elements against float64 dot products of the same (rounded) operands.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "alk/error.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/view.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/matmul.h"
#include "backend/vulkan/stream.h"

namespace {

using namespace alk;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t m = 4096, n = 4096, k = 4096;
  std::vector<DType> dtypes;
  int device = 0, iters = 20;
  std::string tiles = "auto";
  std::string tag;  // appended to RATIO names (runs of the same tiles under other settings)
  bool anchor = true;
  bool sized = false, counted = false;  // --size/--mnk, --iters given
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "bench_vulkan_gemm: %s\nusage: bench_vulkan_gemm [--size N | --mnk M N K] [--dtypes f32,bf16,f16] "
                       "[--device vulkan:I] [--iters R] [--tiles large|small|gpu:BMxBNxBK:TMxTN|coop|coop-large|coop[g]:BMxBNxBK:TMxTN|cpu|cpu:BMxBN:TMxTN|auto[,...]] [--no-anchor]\n", why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--size") {
      o.m = o.n = o.k = std::stoll(next());
      o.sized = true;
    } else if (a == "--mnk") {
      o.m = std::stoll(next()), o.n = std::stoll(next()), o.k = std::stoll(next());
      o.sized = true;
    } else if (a == "--dtypes") {
      std::string s = next();
      for (size_t at = 0; at <= s.size();) {
        size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        const std::string t = s.substr(at, end - at);
        if (t == "f32") o.dtypes.push_back(DType::F32);
        else if (t == "bf16") o.dtypes.push_back(DType::BF16);
        else if (t == "f16") o.dtypes.push_back(DType::F16);
        else if (t == "f64") o.dtypes.push_back(DType::F64);
        else usage(("unknown dtype " + t).c_str());
        at = end + 1;
      }
    } else if (a == "--device") {
      o.device = vk::parse_device_name(next());
      if (o.device < 0) usage("--device takes vulkan or vulkan:I");
    } else if (a == "--iters") {
      o.iters = std::max(1, std::stoi(next()));
      o.counted = true;
    } else if (a == "--tiles") {
      o.tiles = next();
    } else if (a == "--tag") {
      o.tag = next();
    } else if (a == "--no-anchor") {
      o.anchor = false;
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.m <= 0 || o.n <= 0 || o.k <= 0) usage("sizes must be positive");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double tflops(const Options& o, double ms) { return 2.0 * o.m * o.n * o.k / (ms * 1e-3) / 1e12; }

// The anchor through PyTorch on CUDA: median ms of `iters` torch.matmul calls timed with
// CUDA events, or a negative value when there is no CUDA PyTorch here.
double torch_cuda_ms(const Options& o, DType t, std::string& what) {
  const char* tname = t == DType::F32 ? "float32" : t == DType::BF16 ? "bfloat16" : t == DType::F16 ? "float16" : "float64";
  const std::string script =
      "import sys, torch\n"
      "if not torch.cuda.is_available(): print('NOCUDA'); sys.exit(0)\n"
      "torch.backends.cuda.matmul.allow_tf32 = False\n"
      "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False\n"
      "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False\n"
      "m, n, k, it = " + std::to_string(o.m) + ", " + std::to_string(o.n) + ", " + std::to_string(o.k) + ", " +
      std::to_string(o.iters) + "\n"
      "a = torch.rand(m, k, device='cuda', dtype=torch." + tname + ") - 0.5\n"
      "b = torch.rand(k, n, device='cuda', dtype=torch." + tname + ") - 0.5\n"
      "for _ in range(3): c = a @ b\n"
      "torch.cuda.synchronize()\n"
      "ts = []\n"
      "for _ in range(it):\n"
      "  s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)\n"
      "  s.record(); c = a @ b; e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))\n"
      "ts.sort()\n"
      "print('MS', ts[len(ts) // 2], torch.__version__, torch.cuda.get_device_name(0))\n";
  const std::string path = "/tmp/alk_bench_vulkan_gemm_" + std::to_string(::getpid()) + ".py";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs(script.c_str(), f);
    std::fclose(f);
  } else {
    return -1;
  }
  const std::string cmd = "python3 " + path + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  double ms = -1;
  if (p) {
    char line[512];
    while (std::fgets(line, sizeof line, p)) {
      std::string s(line);
      if (s.rfind("MS ", 0) == 0) {
        char* end = nullptr;
        ms = std::strtod(s.c_str() + 3, &end);
        std::string rest = end ? std::string(end) : "";
        while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.pop_back();
        while (!rest.empty() && rest.front() == ' ') rest.erase(rest.begin());
        what = "cuBLAS via torch.matmul (torch " + rest + ")";
      }
    }
    ::pclose(p);
  }
  std::remove(path.c_str());
  return ms;
}

// One GEMM of dtype t with tiles `spec` (see usage): median ms, after checking the result.
// Cooperative-matrix variants print how many shared buffers they got on this device.
double run(vk::Context& ctx, const Options& o, DType t, const std::string& spec) {
  const size_t esz = dtype_size(t);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<uint8_t> ha(static_cast<size_t>(o.m * o.k) * esz), hb(static_cast<size_t>(o.k * o.n) * esz);
  for (int64_t i = 0; i < o.m * o.k; ++i) cpu::store_double(ha.data(), t, i, u(rng));
  for (int64_t i = 0; i < o.k * o.n; ++i) cpu::store_double(hb.data(), t, i, u(rng));
  auto upload = [&](const std::vector<uint8_t>& h) {
    auto a = ctx.pool().allocate(h.size());
    ctx.stream().upload(a, 0, h.data(), h.size());
    return a;
  };
  vk::ViewArg a{upload(ha), 0, t, {o.m, o.k}, {o.k, 1}, 0};
  vk::ViewArg b{upload(hb), 0, t, {o.k, o.n}, {o.n, 1}, 0};
  vk::ViewArg c{ctx.pool().allocate(static_cast<size_t>(o.m * o.n) * esz), 0, t, {o.m, o.n}, {o.n, 1}, 0};

  vk::MatmulKernel kernel(ctx, vk::MatmulSignature{t, t, t, std::nullopt, {}});
  if (spec == "large") kernel.force_tiles(vk::kMatmulLarge);
  if (spec == "small") kernel.force_tiles(vk::kMatmulSmall);
  if (spec == "coop") kernel.force_tiles(vk::kMatmulCoop);
  if (spec == "coop-large") kernel.force_tiles(vk::kMatmulCoopLarge);
  // gpu:BMxBNxBK:TMxTN, e.g. gpu:128x64x16:8x4 (the shared-memory tiles GPUs run: matmul.h)
  if (spec.rfind("gpu:", 0) == 0) {
    unsigned bm = 0, bn = 0, bk = 0, tm = 0, tn = 0;
    if (std::sscanf(spec.c_str(), "gpu:%ux%ux%u:%ux%u", &bm, &bn, &bk, &tm, &tn) != 5) usage("--tiles gpu:BMxBNxBK:TMxTN");
    kernel.force_tiles(vk::MatmulTiles{bm, bn, bk, tm, tn});
  }
  // coop:BMxBNxBK:TMxTN, e.g. coop:128x128x32:4x4 (tile, and 16x16 accumulators per subgroup)
  // coopg:...: the same, fragments loaded straight from the operands (MatmulTiles::direct)
  if (spec.rfind("coop:", 0) == 0 || spec.rfind("coopg:", 0) == 0) {
    const bool direct = spec.rfind("coopg:", 0) == 0;
    unsigned bm = 0, bn = 0, bk = 0, tm = 0, tn = 0;
    if (std::sscanf(spec.c_str() + (direct ? 6 : 5), "%ux%ux%u:%ux%u", &bm, &bn, &bk, &tm, &tn) != 5)
      usage("--tiles coop:BMxBNxBK:TMxTN or coopg:BMxBNxBK:TMxTN");
    const vk::MatmulTiles ct{bm, bn, bk, tm, tn, true, false, direct};
    kernel.force_tiles(ct);
    std::printf("coop %s: %u invocations, shared memory %u bytes with 2 buffers, %u with 1 (device: %u)\n", spec.c_str(),
                ct.threads(), vk::coop_shared_bytes(ct, 2), vk::coop_shared_bytes(ct, 1), ctx.info().max_shared_memory);
  }
  // cpu:BMxBN:TMxTN, e.g. cpu:64x64:8x8 (register blocks for CPU implementations: matmul.h)
  if (spec == "cpu") kernel.force_tiles(vk::kMatmulCpu);
  if (spec.rfind("cpu:", 0) == 0) {
    unsigned bm = 0, bn = 0, tm = 0, tn = 0;
    if (std::sscanf(spec.c_str(), "cpu:%ux%u:%ux%u", &bm, &bn, &tm, &tn) != 4) usage("--tiles cpu:BMxBN:TMxTN");
    kernel.force_tiles(vk::MatmulTiles{bm, bn, 4, tm, tn, false, true});
  }
  // Compile, then keep the device busy for a quarter second first: a GPU lowers its clocks
  // while the host prepares operands (the H200 was at 465-690 MHz instead of 1980 after a
  // few variants' setup, and the same tiles then timed 3-5x slower: NOTES.md).
  kernel.launch(ctx.stream(), a, b, c);
  ctx.stream().synchronize();
  for (const auto warm = Clock::now(); Clock::now() - warm < std::chrono::milliseconds(250);) {
    kernel.launch(ctx.stream(), a, b, c);
    ctx.stream().synchronize();
  }
  std::vector<double> ms;
  for (int i = 0; i < o.iters; ++i) {
    const auto t0 = Clock::now();
    kernel.launch(ctx.stream(), a, b, c);
    ctx.stream().synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double alk_ms = median(ms);

  // Check sampled elements against float64 dot products of the stored operands.
  std::vector<uint8_t> hc(static_cast<size_t>(o.m * o.n) * esz);
  ctx.stream().download(c.alloc, 0, hc.data(), hc.size());
  double worst = 0;
  for (int s = 0; s < 64; ++s) {
    const int64_t i = static_cast<int64_t>(rng() % static_cast<uint64_t>(o.m)), j = static_cast<int64_t>(rng() % static_cast<uint64_t>(o.n));
    double want = 0, mag = 0;
    for (int64_t p = 0; p < o.k; ++p) {
      const double x = cpu::load_as_double(ha.data(), t, i * o.k + p) * cpu::load_as_double(hb.data(), t, p * o.n + j);
      want += x, mag += std::fabs(x);
    }
    worst = std::max(worst, std::fabs(cpu::load_as_double(hc.data(), t, i * o.n + j) - want) / std::max(mag, 1e-30));
  }
  std::printf("GEMM %s %lldx%lldx%lld on %s: %.3f ms, %.3f TFLOP/s (%.1f GFLOP/s; tiles %s), max error / sum|a*b| %.2e%s\n",
              dtype_name(t).data(), static_cast<long long>(o.m), static_cast<long long>(o.n), static_cast<long long>(o.k),
              ctx.info().name.c_str(), alk_ms, tflops(o, alk_ms), 1e3 * tflops(o, alk_ms), spec.c_str(), worst,
              worst > 1e-2 ? "  WRONG RESULTS" : "");
  std::fflush(stdout);
  return alk_ms;
}

// The anchor's median ms for dtype t: cuBLAS through PyTorch, else alk's CPU GEMM.
double anchor(const Options& o, DType t) {
  std::string what;
  double anchor_ms = torch_cuda_ms(o, t, what);
  if (anchor_ms <= 0) {
    // alk's CPU GEMM on the same operands: a few runs (it is slow at 4096^3).
    what = "alk CPU cpu::matmul";
    const size_t esz = dtype_size(t);
    std::vector<uint8_t> ha(static_cast<size_t>(o.m * o.k) * esz), hb(static_cast<size_t>(o.k * o.n) * esz),
        out(static_cast<size_t>(o.m * o.n) * esz);
    for (int64_t i = 0; i < o.m * o.k; ++i) cpu::store_double(ha.data(), t, i, 0.5 - static_cast<double>(i % 7) / 7);
    for (int64_t i = 0; i < o.k * o.n; ++i) cpu::store_double(hb.data(), t, i, 0.5 - static_cast<double>(i % 5) / 5);
    cpu::View va{ha.data(), t, {o.m, o.k}, {o.k, 1}, 0}, vb{hb.data(), t, {o.k, o.n}, {o.n, 1}, 0},
        vc{out.data(), t, {o.m, o.n}, {o.n, 1}, 0};
    cpu::matmul(va, vb, vc);
    std::vector<double> cms;
    const double flop = 2.0 * o.m * o.n * o.k;
    const int runs = std::clamp(static_cast<int>(2e10 / flop), 1, o.iters);
    for (int i = 0; i < runs; ++i) {
      const auto t0 = Clock::now();
      cpu::matmul(va, vb, vc);
      cms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    anchor_ms = median(cms);
  }
  std::printf("ANCHOR %s: %.3f ms, %.3f TFLOP/s (%.1f GFLOP/s)\n", what.c_str(), anchor_ms, tflops(o, anchor_ms),
              1e3 * tflops(o, anchor_ms));
  std::fflush(stdout);
  return anchor_ms;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    if (vk::devices().empty()) {
      std::printf("no Vulkan device: %s\n", vk::unavailable_reason().c_str());
      return 1;
    }
    for (const vk::DeviceInfo& d : vk::devices()) std::printf("vulkan:%d  %s\n", d.index, d.name.c_str());
    auto ctx = vk::Context::get(o.device);
    const vk::DeviceInfo& info = ctx->info();
    std::printf("device: %s (%s, %s %s), cooperative_matrix %s\n", info.name.c_str(), info.kind_name().c_str(),
                info.driver_name.c_str(), info.driver_info.c_str(), info.cooperative_matrix ? "offered" : "not offered");
    std::printf("VK_NV_cooperative_matrix 16x16x16 f16 (the f16 tensor-core path): %s\n",
                info.cooperative_matrix_nv ? "enabled" : "not offered");
    std::printf("%s", info.describe().c_str());  // limits (shared memory) and the NV matrix shapes
    // A CPU implementation (lavapipe) needs minutes for one 4096^3 product: a smaller default.
    if (info.kind == vk::DeviceInfo::Kind::Cpu && !o.sized) {
      o.m = o.n = o.k = 512;
      if (!o.counted) o.iters = 3;
      std::printf("(a CPU Vulkan implementation: default size 512, %d runs; --size overrides)\n", o.iters);
    }
    if (o.dtypes.empty()) {
      o.dtypes.push_back(DType::F32);
      if (info.storage16) o.dtypes.push_back(DType::BF16), o.dtypes.push_back(DType::F16);
    }
    for (DType t : o.dtypes) {
      if (std::string why = vk::matmul_unsupported_reason(*ctx, vk::MatmulSignature{t, t, t, std::nullopt, {}}); !why.empty()) {
        std::printf("GEMM %s: skipped (%s)\n", dtype_name(t).data(), why.c_str());
        continue;
      }
      // --tiles a,b,...: each variant timed; the anchor once per dtype, a RATIO line per variant
      // (named with its tiles unless auto).
      {
        const vk::MatmulTiles a = vk::choose_matmul_tiles(info, t, o.m, o.n, o.k, 1);
        std::printf("auto tiles for %s %lldx%lldx%lld: %s%ux%ux%u:%ux%u (%u invocations%s)\n", dtype_name(t).data(),
                    static_cast<long long>(o.m), static_cast<long long>(o.n), static_cast<long long>(o.k),
                    a.coop ? "coop:" : a.cpu ? "cpu:" : "gpu:", a.bm, a.bn, a.bk, a.tm, a.tn, a.threads(),
                    a.coop ? (vk::coop_shared_bytes(a, 2) <= info.max_shared_memory ? ", 2 shared buffers" : ", 1 shared buffer") : "");
      }
      std::vector<std::pair<std::string, double>> timed;
      for (size_t at = 0; at <= o.tiles.size();) {
        size_t end = o.tiles.find(',', at);
        if (end == std::string::npos) end = o.tiles.size();
        const std::string spec = o.tiles.substr(at, end - at);
        at = end + 1;
        try {
          timed.emplace_back(spec, run(*ctx, o, t, spec));
        } catch (const std::exception& e) {
          std::printf("GEMM %s tiles %s: failed: %s\n", dtype_name(t).data(), spec.c_str(), e.what());
        }
      }
      if (!o.anchor || timed.empty()) continue;
      const double anchor_ms = anchor(o, t);
      for (auto [spec, alk_ms] : timed) {
        std::replace(spec.begin(), spec.end(), ':', '-');  // RATIO names are one word of [A-Za-z0-9_x-]
        const std::string suffix = (spec == "auto" ? "" : "_" + spec) + (o.tag.empty() ? "" : "_" + o.tag);
        std::printf("RATIO vk_gemm_%s_%lldx%lldx%lld%s alk=%.3fms anchor=%.3fms ratio=%.3f\n", dtype_name(t).data(),
                    static_cast<long long>(o.m), static_cast<long long>(o.n), static_cast<long long>(o.k),
                    suffix.c_str(), alk_ms, anchor_ms, alk_ms / anchor_ms);
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_vulkan_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
