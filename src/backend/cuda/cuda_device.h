// The CUDA backend's Device is registered in cuda_device.cpp ("cuda:N"); this header is
// what tests reach of it without a GPU.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace alk::cuda {

// Every template kernel's source for each dtype family it serves, as (what, CUDA C): the
// tests compile them all with NVRTC, which needs no GPU, so CI checks every kernel.
std::vector<std::pair<std::string, std::string>> template_sources();

// Split-K on the bulk-copy GEMM: how many K slices (1-16, each whole 64-wide steps) a product
// of `tiles` output tiles of 128 x `bn`, `k` long in K and `mn` outputs, runs as on `sms` SMs
// at one block each: the count minimizing a model of its time (waves x (steps per slice x a
// step's time + a block's fill and store) + the f32 slices' round trip through memory).
int split_k_slices(int64_t tiles, int64_t k, int64_t bn, int64_t mn, int64_t sms);

}  // namespace alk::cuda
