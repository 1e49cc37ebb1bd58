#!/bin/bash
# A/B timing on a noisy machine: runs command A, then command B, N times alternating, and
# prints each pair and the medians of the first "ms/step=" (or "alk=<x>ms") number each
# prints. Compare two builds of the same benchmark, e.g. a worktree of the last commit:
#   git worktree add /tmp/base HEAD && cmake -S /tmp/base -B /tmp/bo -G Ninja -DCMAKE_BUILD_TYPE=Release \
#     && ninja -C /tmp/bo bench_tiny_gpt
#   bench/ab.sh 7 /tmp/bo/bench_tiny_gpt --steps 20 -- build/bench_tiny_gpt --steps 20
set -eu
n=$1
shift
a=()
while [ "$1" != "--" ]; do a+=("$1"); shift; done
shift
b=("$@")
number() { grep -oE 'ms/step=[0-9.]+|alk=[0-9.]+ms' | head -1 | grep -oE '[0-9.]+' | head -1; }
out=$(mktemp)
for _ in $(seq "$n"); do
  echo "$("${a[@]}" 2>&1 | number) $("${b[@]}" 2>&1 | number)"
done | tee "$out"
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "median A $(cut -d' ' -f1 "$out" | median)  B $(cut -d' ' -f2 "$out" | median)"
rm -f "$out"
