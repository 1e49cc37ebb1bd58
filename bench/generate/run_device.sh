#!/bin/bash
# Generation on the GPU machine (the `device` tool): the decode tests on its Vulkan device and
# bench_generate at GPT-2 124M shapes on vulkan:0 against the compiled PyTorch decoder
# (torch_decode.py --compile, CUDA graphs) and Hugging Face's generate (../shared/anchors/
# hf_gpt2_decode.py), all in one call: alk on cuda:0 (bf16; the CUDA decode kernels, written in the
# nineteenth session without a GPU, are checked by the decode parity tests first) and on vulkan:0
# (f16 on NVIDIA's Vulkan driver).
#
# Here, from the repo root:   bash bench/generate/run_device.sh prepare
#   (builds bench_generate and alk_tests, packs them stripped and gzipped with the
#   Vulkan loader packages into .devcarry-vk/, which .gitignore ignores)
# Then: device run, carry [.devcarry-vk], timeout_s 600:   bash bench/generate/run_device.sh
set -uo pipefail
D=.devcarry-vk
if [[ ${1:-} == prepare ]]; then
  set -e
  cmake --build build -j "${JOBS:-2}" --target bench_generate alk_tests
  rm -rf $D/bin $D/lib
  mkdir -p $D/bin $D/lib $D/debs
  for b in bench_generate alk_tests; do strip -o $D/bin/$b build/$b && gzip -9f $D/bin/$b; done
  cp -L /usr/lib/x86_64-linux-gnu/{libonnx_proto.so.1,libprotobuf.so.32} $D/lib/
  if ! ls $D/debs/libvulkan1_*.deb >/dev/null 2>&1; then
    (cd $D/debs && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  fi
  cp bench/generate/torch_decode.py $D/
  [[ -f ../shared/anchors/hf_gpt2_decode.py ]] && cp ../shared/anchors/hf_gpt2_decode.py $D/
  du -sh $D
  exit 0
fi

OUT=${OUT:-/tmp/alk-gen-out}
mkdir -p "$OUT"
BIN=/tmp/alk-gen-bin
mkdir -p $BIN
for f in $D/bin/*.gz; do gunzip -c "$f" > "$BIN/$(basename "$f" .gz)" && chmod +x "$BIN/$(basename "$f" .gz)"; done
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/$D/lib
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in $D/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [[ -z ${VK_DRIVER_FILES:-} && -f $NV_ICD ]]; then
  export VK_DRIVER_FILES=$NV_ICD __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
export ALK_CACHE_DIR=/tmp/alk-gen-cache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, torch.cuda.get_device_name())"
echo "== decode tests on vulkan:0 and cuda:0"
# alk_tests, or where only the decode suites were linked for the trip (decode_tests), those.
TESTS=$BIN/alk_tests
[[ -x $TESTS ]] || TESTS=$BIN/decode_tests
ALK_PARITY_DEVICES=cuda:0,vulkan:0 timeout 240 "$TESTS" --gtest_brief=1 \
  --gtest_filter='VulkanDecode.*:DecodeOps.*:DeviceParity.Decode*:Generator*' 2>&1 | tee "$OUT/tests.log" | tail -15
echo "== bench_generate: GPT-2 124M shapes on cuda:0 (bf16) vs torch_decode.py --compile"
timeout 300 "$BIN/bench_generate" --device cuda:0 --gpt2 --dtype bf16 --threads 16 --repeats 2 \
  --anchor $D/torch_decode.py 2>&1 | tee "$OUT/bench_cuda.log" | grep -vE "^(W|I)[0-9]{4}|Warning" | tail -12
echo "== bench_generate: GPT-2 124M shapes on vulkan:0 (f16: NVIDIA's cooperative matrices) vs torch_decode.py --compile"
timeout 420 "$BIN/bench_generate" --device vulkan:0 --gpt2 --dtype f16 --threads 16 --repeats 2 \
  --anchor $D/torch_decode.py 2>&1 | tee "$OUT/bench.log" | grep -vE "^(W|I)[0-9]{4}|Warning" | tail -12
if [[ ${HF:-1} == 1 && -f $D/hf_gpt2_decode.py ]]; then
  echo "== hf_gpt2_decode.py"
  timeout 300 python3 $D/hf_gpt2_decode.py 2>&1 | tee "$OUT/hf.log" | grep -E "tok/s|failed|transformers" | tail -6
fi
