// The CUDA backend's kernel choices that benchmarks and tests compare, read from the
// environment once, here and nowhere else (docs/debug.md lists the variables). Each field's
// default is what runs; the others are the comparisons bench/cuda/NOTES.md still uses: a
// forced GEMM kernel, the equal split-K slices stream-K replaced, the mma.sync attention
// kernels that are the path before Hopper, and the layer-norm kernels that are the path for
// rows too wide for registers.
#pragma once

namespace alk::cuda {

// ALK_CUDA_GEMM: the tensor-core GEMM kernel every product that fits it takes (Auto: chosen
// by shape, matmul.cpp's tc_shape). The wgmma kernels only on sm_90a (elsewhere Auto); the
// bulk-copy (TMA) ones only where a product fits their boxes, else the cp.async one of the
// same width.
enum class GemmKernel {
  Auto,
  WgmmaTma,            // wgmmatma: TMA-fed, warp-specialized, 128 x 256 tiles
  WgmmaTmaPair,        // wgmmatma128: 128 x 128 tiles, two blocks per SM
  WgmmaTma192,         // wgmmatma192: 192 x 192 tiles of three consumer warpgroups
  WgmmaTmaPersistent,  // wgmmatmap: persistent, 128 x 256 tiles
  WgmmaTmaPingpong,    // wgmmatmapp: persistent, each consumer warpgroup owning whole 128 x 128 tiles
  Wgmma256,            // wgmma256: cp.async-fed wgmma, 128 x 256 tiles
  Wgmma128,            // wgmma128: cp.async-fed wgmma, 128 x 128 tiles
  Wide,                // wide: mma.sync, 128 x 256 blocks
  Narrow,              // narrow: mma.sync, 128 x 128 blocks
};

struct Tuning {
  GemmKernel gemm = GemmKernel::Auto;
  // ALK_CUDA_SPLIT_K=slices: weight-gradient-like products on the bulk-copy kernel cut K into
  // equal slices per tile instead of stream-K's equal ranges of all tiles' K steps.
  bool split_k_slices = false;
  // ALK_CUDA_ATTENTION_FORWARD=mma, ALK_CUDA_ATTENTION_BACKWARD=mma: the tensor-core attention
  // on mma.sync where the warpgroup kernels would run (sm_90a, bf16, head dim 64).
  bool attention_forward_mma = false;
  bool attention_backward_mma = false;
  // ALK_CUDA_LN_FORWARD=old, ALK_CUDA_LN_BACKWARD=old: the layer-norm kernels the
  // row-in-registers ones replaced (kept for rows too wide for registers).
  bool layer_norm_forward_old = false;
  bool layer_norm_backward_old = false;

  // From the environment; an unknown value of a variable above is an alk::Error naming it.
  static Tuning from_environment();
};

// The process's choices: from_environment() on first use. Tests and benchmarks assign fields
// to compare kernels inside one process (kernels are chosen at each launch).
Tuning& tuning();

}  // namespace alk::cuda
