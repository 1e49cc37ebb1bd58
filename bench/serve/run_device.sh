#!/bin/bash
# bench/serve on the GPU machine (the `device` tool): `alk serve` with GPT-2 124M shapes on
# vulkan:0 (CUDA has no decode kernels yet; NVIDIA's Vulkan driver runs them, f16 for its
# cooperative matrices) against transformers' generate behind a minimal HTTP loop on cuda, at
# 1, 8 and 32 concurrent streams, in one call (bench/serve/run.sh prints LOAD and RATIO lines).
# The load asks for no logprobs, so alk runs with --top-logprobs 0 (no alternatives computed).
#
# Here, from the repo root:   bash bench/serve/run_device.sh prepare
#   (builds the alk CLI, packs it stripped with the shared libraries the GPU machine may lack
#   (cpp-httplib, OpenSSL, brotli, ONNX's protobuf) and the Vulkan loader packages into
#   .devcarry-serve/, which .gitignore ignores)
# Then: device run, carry [.devcarry-serve], timeout_s 600:   bash bench/serve/run_device.sh
set -uo pipefail
D=.devcarry-serve
if [[ ${1:-} == prepare ]]; then
  set -e
  cmake --build build -j "${JOBS:-2}" --target alk_cli
  rm -rf $D/bin $D/lib
  mkdir -p $D/bin $D/lib $D/debs
  strip -o $D/bin/alk build/alk && gzip -9f $D/bin/alk
  for l in libcpp-httplib.so.0.11 libonnx_proto.so.1 libprotobuf.so.32 libssl.so.3 libcrypto.so.3 libbrotlidec.so.1 \
           libbrotlienc.so.1 libbrotlicommon.so.1; do cp -L /usr/lib/x86_64-linux-gnu/$l $D/lib/; done
  if ! ls $D/debs/libvulkan1_*.deb >/dev/null 2>&1; then
    (cd $D/debs && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  fi
  du -sh $D
  exit 0
fi
BIN=/tmp/alk-serve-bin
mkdir -p $BIN
gunzip -c $D/bin/alk.gz > $BIN/alk && chmod +x $BIN/alk
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/$D/lib
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in $D/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [[ -z ${VK_DRIVER_FILES:-} && -f $NV_ICD ]]; then
  export VK_DRIVER_FILES=$NV_ICD __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
export ALK_CACHE_DIR=/tmp/alk-serve-cache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
$BIN/alk devices
ALK_ARGS=${ALK_ARGS:---top-logprobs 0} ALK=$BIN/alk SHAPE=gpt2 DEVICE=${DEVICE:-vulkan:0} ANCHOR_DEVICE=cuda DTYPE=${DTYPE:-f16} PYTHON=python3 \
  REQUESTS=${REQUESTS:-2} TOKENS=${TOKENS:-128} PROMPT=${PROMPT:-128} timeout 540 bash bench/serve/run.sh 2>&1 | tee ${OUT:-/tmp}/serve_bench.log
