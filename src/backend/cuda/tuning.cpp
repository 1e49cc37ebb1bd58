#include "backend/cuda/tuning.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "alk/error.h"

namespace alk::cuda {

namespace {

// The variable's value, "" when unset.
std::string_view env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// `name`'s value among `choices` (value, result); unset or empty: `otherwise`.
template <class T>
T choose(const char* name, std::initializer_list<std::pair<std::string_view, T>> choices, T otherwise) {
  const std::string_view value = env(name);
  if (value.empty()) return otherwise;
  std::string known;
  for (const auto& [text, result] : choices) {
    if (value == text) return result;
    known += (known.empty() ? "" : ", ") + std::string(text);
  }
  fail(name, Loc::current(), "unknown value '", std::string(value), "' (docs/debug.md): expected one of ", known,
       ", or unset");
}

}  // namespace

Tuning Tuning::from_environment() {
  Tuning t;
  t.gemm = choose("ALK_CUDA_GEMM",
                  {{"wgmmatma", GemmKernel::WgmmaTma},
                   {"wgmmatma128", GemmKernel::WgmmaTmaPair},
                   {"wgmmatma192", GemmKernel::WgmmaTma192},
                   {"wgmmatmap", GemmKernel::WgmmaTmaPersistent},
                   {"wgmmatmapp", GemmKernel::WgmmaTmaPingpong},
                   {"wgmma256", GemmKernel::Wgmma256},
                   {"wgmma128", GemmKernel::Wgmma128},
                   {"wide", GemmKernel::Wide},
                   {"narrow", GemmKernel::Narrow}},
                  GemmKernel::Auto);
  t.split_k_slices = choose("ALK_CUDA_SPLIT_K", {{"slices", true}}, false);
  t.attention_forward_mma = choose("ALK_CUDA_ATTENTION_FORWARD", {{"mma", true}, {"wgmma", false}}, false);
  t.attention_backward_mma = choose("ALK_CUDA_ATTENTION_BACKWARD", {{"mma", true}, {"wgmma", false}}, false);
  t.layer_norm_forward_old = choose("ALK_CUDA_LN_FORWARD", {{"old", true}}, false);
  t.layer_norm_backward_old = choose("ALK_CUDA_LN_BACKWARD", {{"old", true}}, false);
  return t;
}

Tuning& tuning() {
  static Tuning t = Tuning::from_environment();
  return t;
}

}  // namespace alk::cuda
