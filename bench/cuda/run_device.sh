#!/bin/bash
# The CUDA backend's checks and benchmark, in one run on the GPU machine (the `device`
# tool's H200): no compiler toolchain for alk's dependencies is there (gtest, CLI11), so
# the binaries are built on the development machine and carried in .devcarry/ (a folder
# .git/info/exclude ignores; a run carries at most 64 MiB, so strip them):
#   bash bench/cuda/pack_carry.sh alk alk_tests bench_cuda_gpt2 bench_cuda_gemm   (-> .devcarry/gz)
#   mkdir -p .devcarry/lib
#   cp -L /usr/lib/x86_64-linux-gnu/{libonnx_proto.so.1,libprotobuf.so.32} .devcarry/lib/  (alk links them)
#   cp ../shared/anchors/torch_gpt2_cuda.py .devcarry/
#   device run, carry [.devcarry]:
#     . bench/cuda/unpack_carry.sh; BIN=b bash bench/cuda/run_device.sh [tests|bench|all|rows|memory|ab]
# Every mode leaves $OUT/cuda-cache.tgz, the compiled kernels: copy it into .devcarry/ and the
# next run's parity suite skips most NVRTC compiles (unpack_carry.sh restores it).
# `memory`: the GPT-2 step's peak (compiled, against PyTorch) and the eager step's arena at its peak.
# `ab`: an A/B of one switch inside one call, AB_VAR=ALK_CUDA_SPLIT_K AB_VALUES="unset slices" (default;
# the value `unset` runs with the variable unset), ROUNDS (2) times in alternation: the GPT-2
# step, and bench_cuda_gemm --gpt2 where carried. Each
# call lands on a fresh machine and machines differ by up to ~8%, so variants are compared only
# inside one call (bench/cuda/NOTES.md, ninth session).
# `compare`: a change that must not move the step (a refactor) in one call: the CUDA tests and
# the parity suite on cuda:0 in SHARDS (6) gtest shards at once (NVRTC compiles in parallel on
# the machine's cores: a cold kernel cache costs ~8 minutes serially), then the GPT-2 step of
# the session-start binary ($BIN/bench_cuda_gpt2_main, packed beside the new one) and the new
# one in alternation, ROUNDS (1) times, the new one last with the anchor (its RATIO lines).
# `rows`: the layer-norm and column-reduction kernels only (alk_tests, bench_cuda_rows,
# bench_cuda_gpt2 carried): their parity families, bench_cuda_rows (new, old and PyTorch),
# and the GPT-2 step with the new kernels and then the old ones (the ALK_CUDA_*=old switches).
# Prints the CUDA tests, the op-table parity suite on cuda:0, a short `alk train --device
# cuda`, and the GEMM and GPT-2 124M benchmarks with their RATIO lines against PyTorch.
# Benchmarks whose binary was not carried are skipped (bench_cuda_attention, bench_cuda_map,
# bench_cuda_rows fit when the others are left out).
set -uo pipefail
what=${1:-all}
BIN=${BIN:-.devcarry/bin}  # where the carried binaries are
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/.devcarry/lib
OUT=${OUT:-/tmp/alk-out}
mkdir -p "$OUT"
export ALK_CACHE_DIR=/tmp/alk-cache NCCL_NVLS_ENABLE=0
# The kernel cache goes back with the results, however the run ends.
trap 'tar cf - -C /tmp/alk-cache . 2>/dev/null | xz -T0 -6 > "$OUT/cuda-cache.tgz"' EXIT  # xz: it stays under the 16 MiB a returned file may have
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
./$BIN/alk devices
if [[ $what == tests || $what == all ]]; then
  # CudaCompile.* runs in CI (NVRTC needs no GPU): here only what needs the device. With a
  # cold kernel cache this takes ~8 minutes (NVRTC), with a carried one far less.
  echo "==== CUDA tests + parity on cuda:0"
  ALK_PARITY_DEVICES=cuda:0 timeout "${TESTS_TIMEOUT:-540}" stdbuf -oL ./$BIN/alk_tests \
    --gtest_filter='CudaDevice*:DeviceParity*:Devices*' > "$OUT/tests.log" 2>&1
  echo "alk_tests exit code $? (124: timed out)"
  grep -E '^\[parity|FAILED|^\[  PASSED|^\[==========' "$OUT/tests.log" | cut -c1-300 | tail -30
  grep -A8 -m4 'Failure$' "$OUT/tests.log" | cut -c1-300 | head -40
  echo "==== alk train --device cuda (short)"
  timeout 100 ./$BIN/alk train --device cuda --steps 50 --log-every 10 --eval-every 25 --sample-tokens 64 \
    --out /tmp/run-cuda 2>&1 | tail -15
  echo "==== alk train --device cuda --dtype bf16 (short)"
  timeout 100 ./$BIN/alk train --device cuda --dtype bf16 --steps 30 --log-every 10 --eval-every 30 --sample-tokens 0 \
    --out /tmp/run-cuda-bf16 2>&1 | tail -6
fi
if [[ $what == bench || $what == all ]]; then
  echo "==== GEMM 4096^3 vs cuBLAS"
  timeout 120 ./$BIN/bench_cuda_gemm 2>&1 | tee "$OUT/gemm.log" | tail -6
  for b in attention map rows; do
    [[ -x $BIN/bench_cuda_$b ]] || continue
    echo "==== $b vs PyTorch"
    timeout 120 ./$BIN/bench_cuda_$b 2>&1 | tee "$OUT/$b.log" | tail -24
  done
  echo "==== GPT-2 124M step"
  timeout ${BENCH_TIMEOUT:-200} ./$BIN/bench_cuda_gpt2 --batch "${BATCH:-16}" --steps "${STEPS:-5}" \
    --anchor "${ANCHOR:-.devcarry/torch_gpt2_cuda.py}" 2>&1 | tee "$OUT/bench.log" | tail -20
fi
if [[ $what == compare ]]; then
  echo "==== CUDA tests + parity on cuda:0, ${SHARDS:-6} shards"
  for ((i = 0; i < ${SHARDS:-6}; ++i)); do
    ALK_PARITY_DEVICES=cuda:0 GTEST_TOTAL_SHARDS=${SHARDS:-6} GTEST_SHARD_INDEX=$i timeout "${TESTS_TIMEOUT:-240}" \
      ./$BIN/alk_tests --gtest_filter='CudaDevice*:DeviceParity*:CudaCompile.EveryTemplateOp*' > "$OUT/shard$i.log" 2>&1 &
  done
  wait
  cat "$OUT"/shard*.log > "$OUT/tests.log" && rm -f "$OUT"/shard*.log
  grep -E '^\[parity|FAILED|^\[  PASSED|^\[==========\] [0-9]+ tests' "$OUT/tests.log" | cut -c1-300 | tail -40
  grep -A8 -m4 'Failure$' "$OUT/tests.log" | cut -c1-300 | head -40
  for round in $(seq "${ROUNDS:-1}"); do
    for b in bench_cuda_gpt2_main bench_cuda_gpt2; do
      anchor=()
      [[ $round == "${ROUNDS:-1}" && $b == bench_cuda_gpt2 ]] && anchor=(--anchor "${ANCHOR:-.devcarry/torch_gpt2_cuda.py}")
      echo "==== round $round: $b ${anchor[*]}"
      timeout "${BENCH_TIMEOUT:-200}" ./$BIN/$b --batch "${BATCH:-16}" --steps "${STEPS:-5}" "${anchor[@]}" 2>&1 |
        tee -a "$OUT/bench.log" | grep -E 'ms/step|RATIO|step 0'
    done
  done
fi
if [[ $what == rows ]]; then
  echo "==== norm and reduction parity on cuda:0"
  ALK_PARITY_DEVICES=cuda:0 timeout 330 ./$BIN/alk_tests --gtest_brief=1 \
    --gtest_filter='CudaCompile*:DeviceParity.SoftmaxAndNorms:DeviceParity.Reductions:DeviceParity.LargeShapes:DeviceParity.CompiledGptSteps' \
    2>&1 | tee "$OUT/rows-tests.log" | tail -30
  echo "==== layer norm (new and old kernels) and column sums against PyTorch"
  timeout 200 ./$BIN/bench_cuda_rows 2>&1 | tee "$OUT/rows.log" | tail -30
  for old in "" old; do
    echo "==== GPT-2 124M step${old:+ (old norm kernels)}"
    ALK_CUDA_LN_BACKWARD=$old ALK_CUDA_LN_FORWARD=$old timeout 200 \
      ./$BIN/bench_cuda_gpt2 --batch "${BATCH:-16}" --steps "${STEPS:-5}" 2>&1 | tail -4
  done
fi
if [[ $what == ab ]]; then
  var=${AB_VAR:-ALK_CUDA_SPLIT_K}
  for round in $(seq "${ROUNDS:-2}"); do
    for value in ${AB_VALUES:-unset slices}; do
      echo "==== round $round: $var=$value"
      setting=("$var=$value")
      [[ $value == unset ]] && setting=(-u "$var")
      if [[ -x $BIN/bench_cuda_gemm ]]; then
        env "${setting[@]}" timeout 120 ./$BIN/bench_cuda_gemm --gpt2 --no-anchor 2>&1 | grep '^gpt2'
      fi
      env "${setting[@]}" timeout 120 ./$BIN/bench_cuda_gpt2 --batch "${BATCH:-16}" --steps "${STEPS:-5}" 2>&1 |
        grep ms/step
    done
  done
fi
if [[ $what == memory ]]; then
  # What the GPT-2 step holds at its peak: the compiled step's peak (alk's buffers and the
  # allocator's blocks, against PyTorch's), then the eager step's arena at its peak, largest first.
  echo "==== GPT-2 124M step, peak memory"
  timeout ${BENCH_TIMEOUT:-200} ./$BIN/bench_cuda_gpt2 --batch "${BATCH:-16}" --steps 3 \
    --anchor "${ANCHOR:-.devcarry/torch_gpt2_cuda.py}" 2>&1 | grep -E 'alk buffers|alk-cuda|RATIO|peak_mem' | tail -8
  echo "==== the eager step's live intermediates at the arena's largest peak (ALK_DEBUG=memory; alike ones counted)"
  ALK_DEBUG=memory timeout 120 ./$BIN/bench_cuda_gpt2 --batch "${BATCH:-16}" --steps 1 --eager 2>&1 |
    grep 'alk memory' | sed 's/^\[alk memory\] *//' > "$OUT/memory.log"
  awk '/^arena peak/ { n++; bytes[n] = $3; head[n] = $0; next } { body[n] = body[n] $0 "\n" }
       END { m = 1; for (i = 1; i <= n; i++) if (bytes[i] + 0 > bytes[m] + 0) m = i; print head[m]; printf "%s", body[m] }' \
    "$OUT/memory.log" | { read -r head; echo "$head"; sort | uniq -c | sort -k2 -n -r | head -40; }
fi
