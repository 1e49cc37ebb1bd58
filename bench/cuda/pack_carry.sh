#!/bin/bash
# Builds the named targets in build/ and packs them, stripped and gzipped, into .devcarry/gz
# for a device run (bench/cuda/unpack_carry.sh unpacks them there):
#   bash bench/cuda/pack_carry.sh [alk alk_tests bench_cuda_gpt2 ...]   (those three by default)
# The benchmarks are EXCLUDE_FROM_ALL: `make test` never rebuilds them, so a bench binary is
# current only when built here (a stale one once made a whole device call measure old code).
set -euo pipefail
build=${BUILD:-build}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(alk alk_tests bench_cuda_gpt2)
cmake_targets=()
for t in "${targets[@]}"; do
  if [[ $t == alk ]]; then cmake_targets+=(alk_cli); else cmake_targets+=("$t"); fi
done
cmake --build "$build" -j "${JOBS:-2}" --target "${cmake_targets[@]}"
mkdir -p .devcarry/gz
rm -f .devcarry/gz/*.gz
tmp=$(mktemp -d)
for t in "${targets[@]}"; do
  strip -o "$tmp/$t" "$build/$t"
  gzip -6c "$tmp/$t" > ".devcarry/gz/$t.gz"
done
rm -rf "$tmp"
du -sh .devcarry
