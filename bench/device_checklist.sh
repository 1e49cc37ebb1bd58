#!/bin/bash
# One device call for what only the GPU machine can check, in parallel where the work allows:
#   - on its CPU (transformers + tokenizers are installed there, not here): the Hugging Face
#     fixtures made by transformers itself (scripts/make_hf_fixtures.py, returned as
#     $OUT/hf_transformers.tgz for tests/fixtures/hf) and alk's `export --target hf` of the local
#     fixtures loaded back by transformers (scripts/check_hf_export.py);
#   - on the GPU: the CUDA tests and the op-table parity suite on cuda:0 (decode, grouped-query,
#     rotary included) in SHARDS gtest shards, writing the device's expected-refusal lists
#     ($OUT/parity_expected.tgz for tests/backend/parity_expected/); then the GPT-2 124M step of
#     the session-start binary against the new one with the PyTorch anchor (run_device.sh compare).
#
# Here, from the repo root:
#   bash bench/cuda/pack_carry.sh alk alk_tests bench_cuda_gpt2   (keep bench_cuda_gpt2_main.gz)
#   the exported directories of scripts/check_hf_export.py's steps 1-2 in .devcarry/hfexport/
#   bash bench/generate/run_device.sh prepare   (bench_generate in .devcarry-vk/, for GEN=1)
# Then: device run, carry [.devcarry, .devcarry-vk]:
#   . bench/cuda/unpack_carry.sh; bash bench/device_checklist.sh
# GEN=1 (default) ends with bench_generate at GPT-2 124M shapes on cuda:0 (bf16, batch 1 and 32)
# against the compiled PyTorch decoder (issue 44's RATIO lines).
set -uo pipefail
OUT=${OUT:-/tmp/alk-out}
mkdir -p "$OUT"
(
  set -x
  python3 -c "import transformers, tokenizers, torch; print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__)"
  CUDA_VISIBLE_DEVICES= timeout 300 python3 scripts/make_hf_fixtures.py /tmp/hf-tf && tar czf "$OUT/hf_transformers.tgz" -C /tmp/hf-tf .
  for m in gpt2 llama qwen2; do
    CUDA_VISIBLE_DEVICES= python3 scripts/check_hf_export.py .devcarry/hfexport/$m tests/fixtures/hf/reference/$m.safetensors
  done
  for m in gpt2 llama; do
    CUDA_VISIBLE_DEVICES= python3 scripts/check_hf_export.py .devcarry/hfexport/$m-tuned .devcarry/hfexport/$m-tuned.logits.safetensors
    CUDA_VISIBLE_DEVICES= python3 scripts/check_hf_export.py .devcarry/hfexport/$m-tuned --same-as tests/fixtures/hf/$m --expect-different
  done
) > "$OUT/hf.log" 2>&1 &
hf=$!
# The parity suite writes its lists under the source directory compiled into alk_tests.
export ALK_PARITY_WRITE_EXPECTED=1
SHARDS=${SHARDS:-8} BIN=${BIN:-b} bash bench/cuda/run_device.sh compare
# (ALK_SOURCE_DIR, this machine's checkout path: /work/main here).
src=${ALK_SOURCE_DIR:-/work/main}/tests/backend/parity_expected
[[ -d $src ]] && tar czf "$OUT/parity_expected.tgz" -C "$src" .
wait $hf
echo "==== Hugging Face checks (transformers on the CPU)"
grep -vE '^\+ |Warning|warn' "$OUT/hf.log" | tail -30
if [[ ${GEN:-1} == 1 && -f .devcarry-vk/bin/bench_generate.gz ]]; then
  gunzip -c .devcarry-vk/bin/bench_generate.gz > /tmp/bench_generate && chmod +x /tmp/bench_generate
  echo "==== bench_generate: GPT-2 124M shapes on cuda:0 (bf16) vs torch_decode.py --compile"
  timeout "${GEN_TIMEOUT:-240}" /tmp/bench_generate --device cuda:0 --gpt2 --dtype bf16 --threads 16 --repeats 2 \
    --anchor bench/generate/torch_decode.py 2>&1 | tee "$OUT/generate.log" | grep -vE "^(W|I)[0-9]{4}|Warning" | tail -12
fi
