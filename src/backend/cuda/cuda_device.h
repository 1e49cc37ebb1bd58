// The CUDA backend's Device is registered in cuda_device.cpp ("cuda:N"), its kernels in ops/
// (template_ops.h); this header is what tests reach of it without a GPU.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace alk::cuda {

// Every template kernel's source for each dtype family it serves, as (what, CUDA C), from
// every family's file (add_sample_sources): the tests compile them all with NVRTC, which
// needs no GPU, so CI checks every kernel.
std::vector<std::pair<std::string, std::string>> template_sources();

// Split-K on the bulk-copy GEMM: how many K slices (1-16, each whole 64-wide steps) a product
// of `tiles` output tiles of 128 x `bn`, `k` long in K and `mn` outputs, runs as on `sms` SMs
// at one block each: the count minimizing a model of its time (waves x (steps per slice x a
// step's time + a block's fill and store) + the f32 slices' round trip through memory).
int split_k_slices(int64_t tiles, int64_t k, int64_t bn, int64_t mn, int64_t sms);

// Weight gradients (few output tiles, a long K: split_k slices them) in K slices that fill
// one wave: every block then walks the same K region at once and both operands' bands stay
// in L2, where stream-K's blocks stand all over K (GPT-2's fc dW ran there at ~530 TFLOP/s;
// cuBLAS runs it this way). Of the tiles of 192 x 192 (three consumer warpgroups) and 128 x
// 256, and the slice counts filling >= 80% of `sms` with >= 8 steps a slice, the one with
// the least work a block (GPT-2's fc and fc2 dW: 64 tiles of 192 x 192 x 2 slices = 128
// blocks of 132; qkv dW 54 of 128 x 256 x 2; proj dW 16 of 192 x 192 x 8); slices 0: none.
// (Measured against stream-K and against 192 x 192 tiles alone: bench/cuda/NOTES.md, twelfth session.)
struct WaveSlices {
  int bm = 0, bn = 0, slices = 0;
};
WaveSlices wave_slices(int64_t m, int64_t n, int64_t k, int64_t sms);

}  // namespace alk::cuda
