#!/bin/bash
# `alk serve` under load against the anchor (anchor_transformers.py: transformers' generate behind
# a minimal HTTP loop; a plain PyTorch KV-cache loop where transformers is missing), both on
# loopback, the same model shapes (random weights), the same load (load.py), in one run:
#   LOAD lines per server and concurrency, then per concurrency
#   RATIO serve_c<C> alk_tok_s=.. anchor_tok_s=.. ratio=<alk/anchor> (> 1: alk serves more tokens/s)
#
#   bash bench/serve/run.sh                  # CPU, a small GPT (dim 256, 4 layers, ctx 256, vocab 4096)
#   SHAPE=gpt2 DEVICE=vulkan:0 ANCHOR_DEVICE=cuda DTYPE=bf16 bash bench/serve/run.sh   # the GPU machine
# Env: ALK (the binary, default build/alk), LEVELS (1,8,32), REQUESTS (per client, 2), TOKENS (32),
#      PROMPT (prompt tokens, 32), SLOTS (32), THREADS (the anchor's torch threads on the CPU),
#      PYTHON (default /usr/bin/python3 where it exists), ALK_ARGS (more `alk serve` flags).
set -euo pipefail
ALK=${ALK:-build/alk}
HERE=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter (numpy, torch) where there is one, as the Makefile's PYTHON.
PY=${PYTHON:-$([[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3)}
SHAPE=${SHAPE:-small}
DEVICE=${DEVICE:-cpu}
ANCHOR_DEVICE=${ANCHOR_DEVICE:-cpu}
DTYPE=${DTYPE:-f32}
LEVELS=${LEVELS:-1,8,32}
REQUESTS=${REQUESTS:-2}
TOKENS=${TOKENS:-32}
PROMPT=${PROMPT:-32}
SLOTS=${SLOTS:-32}
if [[ $SHAPE == gpt2 ]]; then dims=(--dim 768 --layers 12 --heads 12 --ctx 1024 --vocab 50257); V=50257
else dims=(--dim 256 --layers 4 --heads 4 --ctx 256 --vocab 4096); V=4096; fi
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
printf 'the cat sees the moon. a dog finds the road. %.0s' {1..200} > "$work/corpus.txt"
"$ALK" train --task gpt --corpus "$work/corpus.txt" --out "$work/tiny" --device cpu --steps 1 --ctx 128 --dim 16 \
  --heads 2 --layers 1 --vocab-size 280 --batch 2 --eval-every 1 --ckpt-every 1 --sample-tokens 0 >/dev/null
"$PY" "$HERE/make_run.py" "$work/tiny" "$work/model" "${dims[@]}"

# A server's URL from its log (bounded wait), then its /health.
wait_url() {
  local log=$1 pattern=$2 url=""
  for _ in $(seq 600); do
    url=$(grep -o "$pattern" "$log" | head -1 || true)
    [[ -n $url ]] && break
    sleep 0.2
  done
  [[ -n $url ]] || { echo "no URL in $log:" >&2; cat "$log" >&2; exit 1; }
  for _ in $(seq 600); do
    "$PY" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=5)" "$url" 2>/dev/null \
      && { echo "$url"; return; }
    sleep 0.2
  done
  echo "$url never became healthy" >&2; cat "$log" >&2; exit 1
}

"$ALK" serve --from "$work/model" --port 0 --device "$DEVICE" --dtype "$DTYPE" --slots "$SLOTS" --max-queue 256 \
  --name bench ${ALK_ARGS:-} 2>"$work/alk.log" &
pids+=($!)
alk_url=$(wait_url "$work/alk.log" 'http://127.0.0.1:[0-9]*')
port=$(( 20000 + RANDOM % 20000 ))
"$PY" "$HERE/anchor_transformers.py" --port $port --device "$ANCHOR_DEVICE" --dtype "$DTYPE" \
  ${THREADS:+--threads $THREADS} "${dims[@]}" >"$work/anchor.log" 2>&1 &
pids+=($!)
anchor_url=$(wait_url "$work/anchor.log" 'http://127.0.0.1:[0-9]*')
head -1 "$work/anchor.log"
grep "ready" "$work/alk.log" || true
common=(--levels "$LEVELS" --requests "$REQUESTS" --tokens "$TOKENS" --prompt-tokens "$PROMPT" --vocab "$V")
"$PY" "$HERE/load.py" "$alk_url" --name alk "${common[@]}" | tee "$work/alk.load"
"$PY" "$HERE/load.py" "$anchor_url" --name anchor "${common[@]}" | tee "$work/anchor.load"
for c in ${LEVELS//,/ }; do
  a=$(grep " c=$c " "$work/alk.load" | sed 's/.*tok_s=\([0-9.]*\).*/\1/')
  b=$(grep " c=$c " "$work/anchor.load" | sed 's/.*tok_s=\([0-9.]*\).*/\1/')
  "$PY" -c "print('RATIO serve_c$c alk_tok_s=$a anchor_tok_s=$b ratio=%.2f' % ($a / $b))"
done
