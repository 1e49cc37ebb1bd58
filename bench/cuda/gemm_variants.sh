#!/bin/bash
# Every forced GEMM kernel on the GPT-2 step's products, in one device call, beside cuBLAS:
# which kernel each shape should take, and (NCU=1) Nsight Compute's speed-of-light and
# memory sections for the first product of each variant (where its time goes: tensor
# pipes, L2, DRAM).
#   . bench/cuda/unpack_carry.sh; OUT=$OUT SHAPES="fc qkv proj" VARIANTS="unset wgmmatmap" bash bench/cuda/gemm_variants.sh
# BIN: where the binaries are (b). A variant `unset` is the default selection (tc_shape).
set -uo pipefail
BIN=${BIN:-b}
OUT=${OUT:-/tmp/alk-out}
mkdir -p "$OUT"
export ALK_CACHE_DIR=${ALK_CACHE_DIR:-/tmp/alk-cache}
echo "==== cuBLAS (PyTorch) and the default selection"
timeout 200 ./$BIN/bench_cuda_gemm --gpt2 2>&1 | grep '^gpt2' | tee "$OUT/gemm-default.log"
for v in ${VARIANTS:-wgmmatmap wgmmatmapp wgmmatma wgmmatma128}; do
  for s in ${SHAPES:-fc qkv proj fc2}; do
    echo "==== ALK_CUDA_GEMM=$v $s"
    setting=("ALK_CUDA_GEMM=$v")
    [[ $v == unset ]] && setting=(-u ALK_CUDA_GEMM)
    env "${setting[@]}" timeout 100 ./$BIN/bench_cuda_gemm --gpt2 --no-anchor --only "$s" 2>&1 | grep '^gpt2'
  done
done
if [[ ${NCU:-0} == 1 ]]; then
  for v in ${NCU_VARIANTS:-unset wgmmatmap}; do
    setting=("ALK_CUDA_GEMM=$v")
    [[ $v == unset ]] && setting=(-u ALK_CUDA_GEMM)
    for k in ${NCU_KERNELS:-matmul_wgmma_tma matmul_wgmma_tma_persistent}; do
      env "${setting[@]}" timeout 200 /usr/local/cuda/bin/ncu --kernel-name "$k" --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section LaunchStats --section WarpStateStats \
        ./$BIN/bench_cuda_gemm --gpt2 --no-anchor --only "${NCU_SHAPE:-fc}" > "$OUT/ncu-$v-$k.txt" 2>&1
      echo "==== ncu $v $k: $(grep -E 'Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\)|Grid Size' "$OUT/ncu-$v-$k.txt" | tr -s ' ' | tr '\n' ';')"
    done
  done
fi
