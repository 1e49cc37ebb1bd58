#!/bin/bash
# The Vulkan backend's checks and benchmarks in one run on the GPU machine (the `device` tool's
# H200, NVIDIA's Vulkan driver; issue 8 part 8). That machine has no compiler for alk's
# dependencies and no Vulkan loader, so both travel in .devcarry-vk/ (ignored by .gitignore;
# a run carries at most 64 MiB, so the stripped binaries travel gzipped, ~25 MB in all).
#
# Recipe, on the development machine from the repo root (what `run_device.sh prepare` does):
#   cmake --build build --target alk_tests alk_cli bench_vulkan_gemm bench_vulkan_tiny_gpt bench_vulkan_gpt2 bench_vulkan_coop_peak
#   mkdir -p .devcarry-vk/bin .devcarry-vk/lib .devcarry-vk/debs
#   for b in alk alk_tests bench_vulkan_gemm bench_vulkan_tiny_gpt bench_vulkan_gpt2 bench_vulkan_coop_peak; do
#     strip -o .devcarry-vk/bin/$b build/$b && gzip -9f .devcarry-vk/bin/$b; done
#   cp -L /usr/lib/x86_64-linux-gnu/{libonnx_proto.so.1,libprotobuf.so.32} .devcarry-vk/lib/  (alk links them)
#   (cd .devcarry-vk/debs && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
#   cp ../shared/anchors/torch_gpt2_cuda.py .devcarry-vk/   (the GPT-2 anchor; optional)
# Then: device run, carry [.devcarry-vk], timeout_s 600:   bash bench/vulkan/run_device.sh
#
# On the GPU machine the script unpacks the loader packages into / (only where ldconfig knows
# no libvulkan.so.1), points the loader at NVIDIA's ICD (VK_DRIVER_FILES, where that file
# exists and the variable is unset), and prints: `alk devices`; the Vulkan tests and the
# op-table parity suite on vulkan:0; GEMM 4096^3 f32/f16/bf16 with RATIO lines against cuBLAS
# through PyTorch (TF32 off); the tiny-GPT step (RATIO against alk's CPU backend) and the
# GPT-2 124M step (RATIO against PyTorch eager on CUDA) on vulkan:0. Full logs go to $OUT.
# Everything runs under `timeout`; the whole run stays under ~6 minutes.
#
# Here (lavapipe): `bash bench/vulkan/run_device.sh` runs the same on vulkan:0 = lavapipe
# with the carried binaries, or BIN=build to use the build tree; the sizes shrink for a CPU
# implementation (see below). `bash bench/vulkan/run_device.sh [prepare|tests|bench|gemm|all]`
# (gemm: the GEMM lines only; VK_TEST_FILTER=... runs a subset of the tests).
set -uo pipefail
what=${1:-all}
D=.devcarry-vk

if [[ $what == prepare ]]; then
  set -e
  BUILD=${BUILD:-build}
  cmake --build "$BUILD" -j "${JOBS:-2}" --target alk_tests alk_cli bench_vulkan_gemm bench_vulkan_tiny_gpt bench_vulkan_gpt2 bench_vulkan_coop_peak
  rm -rf $D/bin $D/lib
  mkdir -p $D/bin $D/lib $D/debs
  for b in alk alk_tests bench_vulkan_gemm bench_vulkan_tiny_gpt bench_vulkan_gpt2 bench_vulkan_coop_peak; do
    strip -o $D/bin/$b "$BUILD/$b" && gzip -9f $D/bin/$b
  done
  cp -L /usr/lib/x86_64-linux-gnu/{libonnx_proto.so.1,libprotobuf.so.32} $D/lib/
  if ! ls $D/debs/libvulkan1_*.deb >/dev/null 2>&1; then
    (cd $D/debs && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  fi
  [[ -f ../shared/anchors/torch_gpt2_cuda.py ]] && cp ../shared/anchors/torch_gpt2_cuda.py $D/
  du -sh $D
  exit 0
fi

OUT=${OUT:-/tmp/alk-vk-out}
mkdir -p "$OUT"
t_start=$SECONDS
stamp() { echo "[$((SECONDS - t_start)) s] $*"; }

# The binaries: BIN if given, else the carried ones, unpacked into /tmp.
if [[ -z ${BIN:-} ]]; then
  BIN=/tmp/alk-vk-bin
  mkdir -p $BIN
  for f in $D/bin/*.gz; do gunzip -c "$f" > "$BIN/$(basename "$f" .gz)" && chmod +x "$BIN/$(basename "$f" .gz)"; done
fi
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/$D/lib
# The Vulkan loader: the carried packages, unpacked where none is installed (the GPU machine).
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in $D/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[[ -f $NV_ICD ]] || NV_ICD=$(ls /usr/share/vulkan/icd.d/nvidia*.json /etc/vulkan/icd.d/nvidia*.json 2>/dev/null | head -1)
if [[ -z ${VK_DRIVER_FILES:-} && -n $NV_ICD && -f $NV_ICD ]]; then
  export VK_DRIVER_FILES=$NV_ICD __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
# A cold pipeline cache, as a first run on a new machine has (the compile time is reported).
export ALK_CACHE_DIR=${ALK_CACHE_DIR:-/tmp/alk-vk-cache-$$}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-<unset>}  BIN=$BIN  nproc=$(nproc)"
timeout 60 "$BIN/alk" devices 2>&1 | tee "$OUT/devices.log"
echo "alk devices exit code ${PIPESTATUS[0]}"
# A CPU implementation (lavapipe, here) gets the small sizes: the same code, minutes not hours.
cpu_impl=0
grep -A1 -m1 '^vulkan:0' "$OUT/devices.log" | grep -q 'type software\|type cpu' && cpu_impl=1
echo "vulkan:0 is a CPU implementation: $cpu_impl"

if [[ $what == tests || $what == all ]]; then
  stamp "==== Vulkan tests + op-table parity on vulkan:0 (cold pipeline cache)"
  filter=${VK_TEST_FILTER:-'Vulkan*:DeviceParity*'}  # VK_TEST_FILTER: a subset (a short device call)
  ALK_PARITY_DEVICES=vulkan:0 ALK_TEST_VULKAN_DEVICE=0 timeout "${TESTS_TIMEOUT:-210}" "$BIN/alk_tests" --gtest_brief=1 \
    --gtest_filter="$filter" > "$OUT/tests.log" 2>&1
  echo "alk_tests exit code $? (124: timed out; 139: segfault)"
  grep -E '^\[parity|^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]' "$OUT/tests.log" | cut -c1-400 | tail -45
  grep -A8 -m6 'Failure$' "$OUT/tests.log" | cut -c1-400 | head -60
  stamp "==== alk train --device vulkan:0 (the default GPT, 20 steps (4 on a CPU implementation) on README.md; exit code: a crash at exit shows here)"
  train_steps=20
  [[ $cpu_impl == 1 ]] && train_steps=4
  timeout 150 "$BIN/alk" train --device vulkan:0 --steps $train_steps --log-every $((train_steps / 2)) \
    --eval-every $train_steps --sample-tokens 16 \
    --corpus README.md --out /tmp/alk-vk-train > "$OUT/train.log" 2>&1
  echo "alk train exit code $? (124: timed out; 139: segfault)"
  grep -E '^device|^step|val loss' "$OUT/train.log" | cut -c1-160
  stamp "tests done"
fi

if [[ $what == bench || $what == all || $what == gemm ]]; then
  # Tile variants beside the automatic choice (auto): GPU shared-memory tiles (gpu:BMxBNxBK:TMxTN)
  # and cooperative-matrix tiles (coop:..., f16 only; refused for f32/bf16, which is printed).
  # f32/bf16: the shared-memory shader. f16: every cooperative-matrix variant (one RATIO line
  # each; "auto tiles" names what the automatic choice took, its RATIO line has no suffix;
  # variants that exceed the device's shared memory print "failed"; coopg: fragments loaded
  # straight from the operands, no shared-memory staging).
  tiles=auto,gpu:128x128x8:8x8
  coop_tiles=auto,coop:128x256x32:4x4,coop:256x128x32:4x4,coop:128x256x16:4x4,coop:256x128x16:4x4,coop:128x256x64:4x4,coop:128x128x32:2x4,coop:128x128x64:2x4,coop:128x128x32:4x4,coop:64x64x32:2x2,coop:128x256x32:2x4,coop:256x128x32:2x4,coopg:128x256x16:4x4,coopg:128x128x16:2x4
  if [[ $cpu_impl == 1 ]]; then tiles=auto,large; coop_tiles=auto; gemm_args="--size 256 --iters 3"; gpt2_args="--batch 1 --ctx 64 --layers 2 --dim 128 --heads 4 --vocab 512 --steps 2"; tiny_steps=2
  else gemm_args="--size 4096 --iters 20"; gpt2_args="--batch ${GPT2_BATCH:-4} --steps 5"; tiny_steps=10; fi
  stamp "==== GEMM vs cuBLAS (torch.matmul, TF32 off): f32, bf16"
  timeout 100 "$BIN/bench_vulkan_gemm" $gemm_args --dtypes f32,bf16 --tiles $tiles 2>&1 | tee "$OUT/gemm.log" | grep -v '^$' | cut -c1-200 | tail -40
  stamp "==== GEMM f16 vs cuBLAS: cooperative-matrix variants (device limits and NV matrix shapes first)"
  timeout 120 "$BIN/bench_vulkan_gemm" $gemm_args --dtypes f16 --tiles $coop_tiles 2>&1 | tee "$OUT/gemm_f16.log" | grep -v '^$' | \
    grep -E 'limits|cooperative|shapes|^auto|^coop|^GEMM|^ANCHOR|^RATIO' | cut -c1-240 | tail -45
  if [[ $cpu_impl == 0 ]]; then
    stamp "==== GEMM f16: the double-buffered variants with two register sets (ALK_VK_COOP_PREFETCH=2; RATIO names end _prefetch2)"
    ALK_VK_COOP_PREFETCH=2 timeout 60 "$BIN/bench_vulkan_gemm" $gemm_args --dtypes f16 --tag prefetch2 \
      --tiles coop:128x256x16:4x4,coop:256x128x16:4x4,coop:128x128x32:2x4 2>&1 | tee "$OUT/gemm_f16_prefetch2.log" | grep -E '^GEMM|^RATIO' | cut -c1-240
  fi
  [[ $what == gemm ]] && exit 0  # gemm: the GEMM lines only
  stamp "==== tiny-GPT step on vulkan:0 (anchor: alk's CPU backend)"
  timeout 90 "$BIN/bench_vulkan_tiny_gpt" --device vulkan:0 --steps $tiny_steps 2>&1 | tee "$OUT/tiny_gpt.log" | tail -6
  stamp "==== GPT-2 124M step on vulkan:0 (f32; anchor: PyTorch eager f32 on CUDA, TF32 off)"
  anchor=()
  [[ -f $D/torch_gpt2_cuda.py ]] && anchor=(--anchor "$D/torch_gpt2_cuda.py")
  timeout "${GPT2_TIMEOUT:-150}" "$BIN/bench_vulkan_gpt2" --device vulkan:0 $gpt2_args "${anchor[@]}" 2>&1 | tee "$OUT/gpt2.log" | tail -8
  echo "bench_vulkan_gpt2 exit code ${PIPESTATUS[0]} (124: timed out)"
  stamp "bench done"
fi
