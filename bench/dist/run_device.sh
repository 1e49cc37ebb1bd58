#!/bin/bash
# Data parallel over NCCL on the 2-GPU machine (the `device` tool's nvidia-h200-x2), in one
# build-free run: the GPU machine has no gtest or CLI11, so the binaries are built here and
# carried:
#   cmake --build build --target alk_tests alk_cli bench_dist
#   device run, kind nvidia-h200-x2, carry [build/alk_tests, build/alk, build/bench_dist]:
#     bash bench/dist/run_device.sh [tests|bench|all|onegpu]   (onegpu: kind nvidia-h200 is enough)
# 1. NCCL collectives against computed values (tests/dist DistWorker.Collectives, 2 ranks,
#    CUDA tensors), 2. `alk train --device cuda --nproc 2` losses vs 1 GPU with the same
#    global batch, 3. GPT-2 124M tokens/s on 1 and 2 GPUs (bench_dist) beside PyTorch DDP
#    (torchrun) in the same call: scaling efficiency and RATIO lines.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): it is not available on that machine.
set -uo pipefail
what=${1:-all}
BIN=${BIN:-build}
OUT=${OUT:-/tmp/alk-out}
mkdir -p "$OUT"
export ALK_CACHE_DIR=/tmp/alk-cache NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ALK_LAUNCHER=env PYTHONUNBUFFERED=1
PY=${PY:-python3}
# libnccl.so.2 from PyTorch's pip packages (nvidia-nccl-cu*), unless given.
if [[ -z ${ALK_NCCL_PATH:-} ]]; then
  dir=$($PY -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
  [[ -n $dir && -f $dir/lib/libnccl.so.2 ]] && export ALK_NCCL_PATH=$dir/lib/libnccl.so.2
fi
if [[ -z ${ALK_NCCL_PATH:-} ]]; then
  site=$($PY -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  lib=$(find $site -name libnccl.so.2 2>/dev/null | head -1)
  [[ -n $lib ]] && export ALK_NCCL_PATH=$lib
fi
echo "ALK_NCCL_PATH=${ALK_NCCL_PATH:-unset, so the dynamic loader searches for libnccl.so.2}"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if (( gpus < 2 )); then
  echo "blocked: $gpus GPU(s) here; the NCCL checks and the 2-GPU bench need 2 (kind nvidia-h200-x2). 1-GPU parts only."
fi

# The ranks of one job, started as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*),
# each under a time limit.
ranks() {  # ranks N PORT CMD...
  local n=$1 port=$2; shift 2
  local pids=() st=0
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 180 "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || st=1; done
  return $st
}

if [[ $what == tests || $what == all || $what == onegpu ]] && (( gpus >= 1 )); then
  echo "==== 1 GPU: the overlapped gradient all-reduce through NCCL (a world of one) and HostCall on CUDA"
  timeout 300 "$BIN/alk_tests" --gtest_color=no --gtest_brief=1 \
    --gtest_filter='Dist.NcclOverlapOnOneGpuTrainsLikeThePlainStep:Dist.DataParallelStepOnOneRankTrainsLikeThePlainStep:DeviceParity.HostCall*' \
    > "$OUT/nccl_overlap_1gpu.log" 2>&1
  st=$?
  tail -20 "$OUT/nccl_overlap_1gpu.log"
  echo "dist-nccl-overlap-1gpu: exit=$st $([[ $st == 0 ]] && echo PASS || echo FAIL)"
fi

if [[ $what == tests || $what == all ]] && (( gpus >= 2 )); then
  echo "==== NCCL collectives, 2 ranks (DistWorker.Collectives on cuda:LOCAL_RANK)"
  ALK_DIST_WORKER=collectives ALK_DIST_WORKER_DEVICE=cuda ALK_DIST_TIMEOUT=120 \
    ranks 2 29611 "$BIN/alk_tests" --gtest_color=no --gtest_brief=1 --gtest_filter=DistWorker.Collectives \
    > "$OUT/nccl_collectives.log" 2>&1
  st=$?
  tail -20 "$OUT/nccl_collectives.log"
  passed=$(grep -c '\[  PASSED  \] 1 test' "$OUT/nccl_collectives.log")
  echo "dist-nccl-collectives: exit=$st ranks passed=$passed/2 $([[ $st == 0 && $passed == 2 ]] && echo PASS || echo FAIL)"

  echo "==== alk train --device cuda: 1 GPU vs --nproc 2 (NCCL), same global batch"
  $PY - <<'PY' > /tmp/dist-corpus.txt
import random
random.seed(3)
words = "the cat sat on a mat and dog ran to old tree by river in light of day".split()
print(" ".join(random.choice(words) + ("." if random.random() < 0.1 else "") for _ in range(60000)))
PY
  common=(train --device cuda --corpus /tmp/dist-corpus.txt --ctx 64 --dim 128 --layers 2 --heads 4 --vocab-size 512
          --batch 16 --steps 20 --lr 0.1 --eval-every 10 --sample-tokens 0 --log-every 1 --ckpt-every 0)
  rm -rf /tmp/dist-one /tmp/dist-two
  timeout 200 "$BIN/alk" "${common[@]}" --out /tmp/dist-one > "$OUT/train_1gpu.log" 2>&1 || tail -20 "$OUT/train_1gpu.log"
  ALK_DIST_TIMEOUT=120 timeout 200 "$BIN/alk" "${common[@]}" --nproc 2 --out /tmp/dist-two > "$OUT/train_2gpu.log" 2>&1 \
    || tail -20 "$OUT/train_2gpu.log"
  tail -3 "$OUT/train_2gpu.log"
  $PY - <<'PY'
import json
def losses(d):
    try: return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl")]
    except OSError: return []
a, b = losses("/tmp/dist-one"), losses("/tmp/dist-two")
if not a or len(a) != len(b):
    print(f"dist-nccl-equality: FAIL ({len(a)} vs {len(b)} steps)")
else:
    rel = max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b))
    print(f"dist-nccl-equality: {len(a)} steps, loss 1 GPU {a[0]:.4f} -> {a[-1]:.4f}, 2 GPUs {b[0]:.4f} -> {b[-1]:.4f}, "
          f"max relative difference {rel:.2e} {'PASS' if rel < 2e-3 else 'FAIL'} (tolerance 2e-3)")
PY
fi

if [[ $what == bench || $what == all ]]; then
  B=${BATCH:-16}
  STEPS=${STEPS:-10}
  echo "==== GPT-2 124M data parallel, B=$B per GPU: alk (bench_dist) and PyTorch DDP (torchrun)"
  for n in 1 2; do
    (( n > gpus )) && continue
    ALK_DIST_TIMEOUT=300 timeout ${BENCH_TIMEOUT:-240} "$BIN/bench_dist" --nproc $n --batch "$B" --steps "$STEPS" \
      2>&1 | tee "$OUT/alk_$n.log" | tail -3
    timeout ${BENCH_TIMEOUT:-240} $PY -m torch.distributed.run --standalone --nproc_per_node $n \
      bench/dist/torch_ddp_gpt2.py "$B" "$STEPS" 2>&1 | tee "$OUT/torch_$n.log" | grep -E 'torch-ddp|Error' | tail -3
  done
  $PY - "$OUT" <<'PY'
import re, sys
out = sys.argv[1]
def tok(path, prefix):
    try:
        for line in open(path):
            if line.startswith(prefix):
                return float(re.search(r"tok/s=([0-9.]+)", line).group(1))
    except OSError: pass
    return 0.0
a1, a2 = tok(f"{out}/alk_1.log", "alk-dist"), tok(f"{out}/alk_2.log", "alk-dist")
t1, t2 = tok(f"{out}/torch_1.log", "torch-ddp"), tok(f"{out}/torch_2.log", "torch-ddp")
if a1 and t1:
    print(f"RATIO dist-gpt2-124m-1gpu-tok/s alk={a1:.0f} anchor={t1:.0f} ratio={a1 / t1:.3f} (torch eager bf16, DDP)")
if a2 and t2:
    print(f"RATIO dist-gpt2-124m-2gpu-tok/s alk={a2:.0f} anchor={t2:.0f} ratio={a2 / t2:.3f} (torch eager bf16, DDP)")
if a1 and a2 and t1 and t2:
    ea, et = a2 / (2 * a1), t2 / (2 * t1)
    print(f"scaling efficiency on 2 GPUs: alk {ea * 100:.1f}% (target >= 90%), PyTorch DDP {et * 100:.1f}%")
    print(f"RATIO dist-gpt2-124m-scaling-efficiency alk={ea:.3f} anchor={et:.3f} ratio={ea / et:.3f}")
elif not (a2 and t2):
    print("blocked: no 2-GPU numbers (see above)")
PY
fi
