#!/usr/bin/env bash
# alk's quantized ops against onnxruntime-node on random uint8 models: each model (gen.py, text
# protobufs with their inputs as initializers, encoded by protoc) runs in onnxruntime (ort.js)
# and in `alk onnx run` (whose .npy outputs npy.py reads); cmp.py prints EQUAL or the differing
# elements per model.
#   bench/onnx/quant_check/run.sh ALK_BINARY NPM_DIR [DEVICE [SEEDS]]   (NPM_DIR: where `make onnx-npm` installed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
alk=$(realpath "$1")
npm_dir=$(realpath "$2")
device=${3:-cpu}
seeds=${4:-1 2 3 4 5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
for seed in $seeds; do
  models=$(python3 "$here/gen.py" "$seed")
  for m in $models; do
    protoc --proto_path=/usr/include --encode=onnx.ModelProto onnx/onnx.proto < "$m.txt" > "$m.onnx"
    NODE_PATH=$npm_dir/node_modules node "$here/ort.js" "$m.onnx" > "$m.ort.json"
    rm -rf "alk_$m"
    "$alk" onnx run "$m.onnx" --device "$device" --out "alk_$m" > /dev/null
  done
  echo "seed $seed: $(python3 "$here/cmp.py" $models | tr '\n' ' ')"
done
