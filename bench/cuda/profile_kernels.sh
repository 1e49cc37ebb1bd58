#!/bin/bash
# Where a CUDA kernel's time goes, on the GPU machine: Nsight Compute's sections for one launch
# of each named kernel, and the SASS of the cubins in alk's kernel cache that define it.
#   . bench/cuda/unpack_carry.sh; OUT=$OUT bash bench/cuda/profile_kernels.sh "CMD" KERNEL [KERNEL ...]
# CMD runs the kernels (e.g. "b/bench_cuda_attention --no-anchor"); for each KERNEL,
# $OUT/ncu-KERNEL.txt (one launch: speed of light, warp states, instruction mix, source hot
# spots), with SOURCE=1 $OUT/source-KERNEL.csv (per SASS instruction: its sampled stalls), and $OUT/sass-KERNEL-N.txt (cuobjdump of each cached cubin whose source defines it;
# SASS_MATCH="define HD 64;define KWARPS 8" keeps those whose defines include each line).
set -uo pipefail
cmd=$1
shift
OUT=${OUT:-/tmp/alk-out}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT"
$cmd > /dev/null 2>&1  # fills the kernel cache
for kernel in "$@"; do
  timeout 240 "$NCU" --kernel-name "$kernel" --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --section SchedulerStats --section SourceCounters $cmd > "$OUT/ncu-$kernel.txt" 2>&1
  echo "ncu $kernel: exit $? ($(grep -c . "$OUT/ncu-$kernel.txt") lines)"
  # SOURCE=1: a second collection kept as a report, then every SASS instruction with its sampled
  # warp stalls (CSV): which wait or dependency a latency-bound kernel spends its cycles in.
  # (Written in the eleventh session with no device time left to run it: check its output first.)
  if [[ ${SOURCE:-0} == 1 ]]; then
    timeout 240 "$NCU" --kernel-name "$kernel" --launch-count 1 --section WarpStateStats --section SourceCounters \
      -f -o "/tmp/ncu-$kernel" $cmd > /dev/null 2>&1
    "$NCU" --import "/tmp/ncu-$kernel.ncu-rep" --page source --print-source sass --csv > "$OUT/source-$kernel.csv" 2>&1
    echo "source page $kernel: exit $? ($(grep -c . "$OUT/source-$kernel.csv") lines)"
  fi
  n=0
  # Newest first; SASS_LIMIT of them (default 1: the one this run compiled last).
  for f in $(ls -t $(grep -la " $kernel(" -r "${ALK_CACHE_DIR:-/tmp/alk-cache}/cuda" 2>/dev/null) 2>/dev/null); do
    [[ $n -ge ${SASS_LIMIT:-1} ]] && break
    # SASS_MATCH="define HD 64;define KWARPS 8": only the cubins whose source has every one of these lines.
    skip=0
    IFS=';' read -ra want <<< "${SASS_MATCH:-}"
    for w in "${want[@]}"; do head -c 600 "$f" | grep -aq "^#$w\$" || skip=1; done
    [[ $skip == 1 ]] && continue
    # A cache entry: a header and the kernel's source, then the cubin (an ELF image).
    python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); open('/tmp/k.cubin', 'wb').write(d[d.find(b'\x7fELF'):])" "$f"
    { head -c 400 "$f" | grep -a '^#define'; /usr/local/cuda/bin/cuobjdump -sass -fun "$kernel" /tmp/k.cubin; } > "$OUT/sass-$kernel-$n.txt" 2>&1
    n=$((n + 1))
  done
  echo "sass $kernel: $n cubins"
done
