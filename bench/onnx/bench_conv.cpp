// The convolution layers of the PaddleOCR models (bench/onnx/run.sh) one at a time: the CPU's
// Conv2d op (conv2d: a direct depthwise loop, or blocked im2col + GEMM) against the composition
// it replaced, unfold2d + one batched matmul, in the same process (alternating rounds, medians
// of 15). Also prints each layer's GFLOP/s.
//   bench_conv [LAYER]: with a layer name, runs only that layer's Conv2d 200 times (for perf).
//   RATIO conv_<layer> alk=<ms>ms anchor=<ms>ms ratio=<Conv2d/unfold+matmul>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "backend/cpu/jit.h"

namespace {

struct Layer {
  const char* name;
  int64_t c, h, w, o, k, stride, pad, groups;
};

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace alk;
  const std::string only = argc > 1 ? argv[1] : "";  // a layer name: time only its Conv2d (for a profiler)
  const Layer layers[] = {
      {"rec_dw5x5_240x12x80", 240, 12, 80, 240, 5, 1, 2, 240},
      {"rec_dw5x5_480x6x80", 480, 6, 80, 480, 5, 1, 2, 480},
      {"det_dw5x5_192x20x20", 192, 20, 20, 192, 5, 1, 2, 192},
      {"det_dw3x3_s2_32x160x160", 32, 160, 160, 32, 3, 2, 1, 32},
      {"cls_dw3x3_8x24x96", 8, 24, 96, 8, 3, 1, 1, 8},
      {"cls_dw5x5_200x2x96", 200, 2, 96, 200, 5, 1, 2, 200},
      {"cls_dw5x5_88x3x96", 88, 3, 96, 88, 5, 1, 2, 88},
      {"det_3x3_96to24x80x80", 96, 80, 80, 24, 3, 1, 1, 1},
      {"det_3x3_96to24x20x20", 96, 20, 20, 24, 3, 1, 1, 1},
      {"3x3_64to48x40x40", 64, 40, 40, 48, 3, 1, 1, 1},
      {"3x3_64to64x40x40", 64, 40, 40, 64, 3, 1, 1, 1},
      {"det_stem_3to16_s2_320", 3, 320, 320, 16, 3, 2, 1, 1},
      {"cls_1x1_32to200x2x96", 32, 2, 96, 200, 1, 1, 0, 1},
      {"cls_1x1_200to32x2x96", 200, 2, 96, 32, 1, 1, 0, 1},
      {"cls_1x1_16to88x3x96", 16, 3, 96, 88, 1, 1, 0, 1},
      {"det_1x1_16to32x160x160", 16, 160, 160, 32, 1, 1, 0, 1},
      {"det_1x1_48to48x80x80", 48, 80, 80, 48, 1, 1, 0, 1},
      {"det_1x1_192to192x20x20", 192, 20, 20, 192, 1, 1, 0, 1},
      {"det_1x1_384to384x10x10", 384, 10, 10, 384, 1, 1, 0, 1},
      {"rec_1x1_480to480x6x80", 480, 6, 80, 480, 1, 1, 0, 1},
  };
  manual_seed(0);
  for (const Layer& l : layers) {
    Tensor x = randn({1, l.c, l.h, l.w}), wt = randn({l.o, l.c / l.groups, l.k, l.k});
    realize({x, wt});
    Conv2dGeometry g{l.k, l.k, l.stride, l.stride, l.pad, l.pad, 1, 1};
    const int64_t oh = (l.h + 2 * l.pad - l.k) / l.stride + 1, ow = (l.w + 2 * l.pad - l.k) / l.stride + 1;
    const int64_t kg = (l.c / l.groups) * l.k * l.k;
    auto direct = [&] { conv2d(x, wt, Tensor(), l.stride, l.pad, 1, l.groups).realize(); };
    auto composed = [&] {
      if (l.k == 1) {  // 1x1: a plain matmul over the channels (what the importer ran before)
        matmul(wt.reshape({l.o, l.c}), x.reshape({1, l.c, l.h * l.w})).realize();
        return;
      }
      Tensor cols = unfold2d(x, g).reshape({1, l.groups, kg, oh * ow});
      matmul(wt.reshape({l.groups, l.o / l.groups, kg}), cols).realize();
    };
    if (!only.empty()) {
      if (only != l.name) continue;
      for (int i = 0; i < 2000; ++i) direct();
      return 0;
    }
    direct();
    composed();
    cpu::jit::wait_idle();
    std::vector<double> a, b;
    auto time = [](auto&& fn, std::vector<double>& t) {
      fn();
      for (int i = 0; i < 3; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    };
    for (int round = 0; round < 5; ++round) {
      time(direct, a);
      time(composed, b);
    }
    const double am = median(a), bm = median(b);
    const double gflop = 2.0 * static_cast<double>(l.o * kg * oh * ow) / 1e9;
    std::printf("%-26s %7.3f GFLOP  Conv2d %.3f ms (%.1f GFLOP/s)  unfold+matmul %.3f ms (%.1f GFLOP/s)\n", l.name,
                gflop, am, gflop / am * 1e3, bm, gflop / bm * 1e3);
    std::printf("RATIO conv_%s alk=%.3fms anchor=%.3fms ratio=%.2f\n", l.name, am, bm, am / bm);
  }
  return 0;
}
