// The Mandelbrot set as a kernel from source text: one invocation per pixel counts the
// iterations of z <- z^2 + c before |z| > 2. One body serves C++, CUDA and GLSL (the C-like
// subset they share: float math with f-suffixed literals, int counters); WGSL spells its
// variables its own way. Prints the set as text:
//
//   build/example_mandelbrot [--device D] [WIDTH HEIGHT MAX_ITER]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "alk/alk.h"
#include "alk/user_kernel.h"

// Pixel i of a width x height grid whose top-left pixel is c = (x0, y0), dx and dy apart.
const char* kBody = R"(
const int px = int(i % width), py = int(i / width);
const float cr = x0 + dx * float(px), ci = y0 + dy * float(py);
float zr = 0.0f, zi = 0.0f;
int n = 0;
while (n < max_iter && zr * zr + zi * zi <= 4.0f) {
  const float t = zr * zr - zi * zi + cr;
  zi = 2.0f * zr * zi + ci;
  zr = t;
  n = n + 1;
}
iterations[i] = n;
)";

const char* kWgslBody = R"(
let px = i32(i % u32(width));
let py = i32(i / u32(width));
let cr = x0 + dx * f32(px);
let ci = y0 + dy * f32(py);
var zr = 0.0f;
var zi = 0.0f;
var n = 0i;
while (n < max_iter && zr * zr + zi * zi <= 4.0f) {
  let t = zr * zr - zi * zi + cr;
  zi = 2.0f * zr * zi + ci;
  zr = t;
  n = n + 1i;
}
iterations[i] = n;
)";

alk::UserKernel mandelbrot_kernel() {
  alk::KernelSpec s;
  s.name = "mandelbrot";
  // No input tensors: the grid comes from the attributes.
  s.output = {"iterations", alk::DType::I32, 2};
  s.attrs = {{"width", alk::DType::I32}, {"height", alk::DType::I32}, {"max_iter", alk::DType::I32},
             {"x0", alk::DType::F32},    {"y0", alk::DType::F32},     {"dx", alk::DType::F32},
             {"dy", alk::DType::F32}};
  s.output_shape = [](std::span<const alk::Shape>, std::span<const double> a) {
    return alk::Shape{static_cast<int64_t>(a[1]), static_cast<int64_t>(a[0])};
  };
  using T = alk::KernelTarget;
  s.body[int(T::Cpp)] = s.body[int(T::Cuda)] = s.body[int(T::Glsl)] = kBody;
  s.body[int(T::Wgsl)] = kWgslBody;
  return alk::UserKernel(std::move(s));
}

int main(int argc, char** argv) {
  std::string device = "cpu";
  std::vector<int> sizes;
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--device") && a + 1 < argc) device = argv[++a];
    else sizes.push_back(std::atoi(argv[a]));
  }
  const int width = sizes.size() > 0 ? sizes[0] : 78, height = sizes.size() > 1 ? sizes[1] : 32;
  const int max_iter = sizes.size() > 2 ? sizes[2] : 200;
  try {
    alk::DeviceGuard on(alk::get_device(device));
    // The view [-2.2, 0.8] x [-1.2, 1.2].
    const alk::Tensor counts =
        mandelbrot_kernel()({}, {double(width), double(height), double(max_iter), -2.2, -1.2, 3.0 / width, 2.4 / height});
    const std::vector<int32_t> n = counts.to_vector<int32_t>();
    const char* shades = " .:-=+*#%@";
    for (int y = 0; y < height; ++y) {
      std::string row;
      for (int x = 0; x < width; ++x) {
        const int v = n[static_cast<size_t>(y * width + x)];
        row += v >= max_iter ? '@' : shades[std::min(8, v / 3)];
      }
      std::printf("%s\n", row.c_str());
    }
  } catch (const alk::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
