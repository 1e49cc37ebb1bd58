// The CUDA backend's Device is registered in cuda_device.cpp ("cuda:N"); this header is
// what tests reach of it without a GPU.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace alk::cuda {

// Every template kernel's source for each dtype family it serves, as (what, CUDA C): the
// tests compile them all with NVRTC, which needs no GPU, so CI checks every kernel.
std::vector<std::pair<std::string, std::string>> template_sources();

}  // namespace alk::cuda
