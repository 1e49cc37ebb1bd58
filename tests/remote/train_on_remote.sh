#!/usr/bin/env bash
# ctest Remote.TrainOnRemoteCpu: `alk train --device remote:127.0.0.1:PORT/cpu` against a server
# process (`alk serve --ops`) gives the local CPU's losses and weights bit for bit; then a
# server killed with SIGKILL mid-run makes the client exit with an error naming the peer within
# its timeout, not hang; then the server of a second run stops cleanly on SIGTERM.
# Usage: train_on_remote.sh ALK_CLI SOURCE_DIR
set -euo pipefail
alk=$1
src=$2
dir=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then kill -KILL "$server"; fi
  rm -rf "$dir"
}
trap cleanup EXIT
start_server() {
  rm -f "$dir/port"
  "$alk" serve --ops --host 127.0.0.1 --port 0 --port-file "$dir/port" --token-file "$dir/token" 2>>"$dir/server.log" &
  server=$!
  for _ in $(seq 1 100); do
    [ -s "$dir/port" ] && return 0
    kill -0 "$server" || { echo "the server exited before listening"; cat "$dir/server.log"; exit 1; }
    sleep 0.1
  done
  echo "the server wrote no port in 10 s"
  exit 1
}
cat "$src/README.md" "$src"/docs/*.md > "$dir/corpus.txt"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
export ALK_REMOTE_TOKEN_FILE="$dir/token"
common=(--corpus "$dir/corpus.txt" --batch 4 --ctx 32 --dim 32 --layers 2 --heads 2 --vocab-size 300
        --log-every 4 --eval-every 1000 --ckpt-every 1000 --sample-tokens 0)

start_server
port=$(cat "$dir/port")
"$alk" train "${common[@]}" --steps 12 --device cpu --out "$dir/local" > "$dir/local.log"
"$alk" train "${common[@]}" --steps 12 --device "remote:127.0.0.1:$port/cpu" --out "$dir/remote" > "$dir/remote.log" 2>&1
losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl"; }
if ! diff <(losses "$dir/local") <(losses "$dir/remote"); then echo "FAIL: the remote run's losses differ"; exit 1; fi
[ "$(losses "$dir/local" | wc -l)" -ge 3 ] || { echo "FAIL: no losses logged"; exit 1; }
# The weights: the same tensor bytes after the header (the header names the run's directory and device).
size=$(stat -c %s "$dir/local/model.safetensors")
if ! cmp <(tail -c $((size - 4096)) "$dir/local/model.safetensors") <(tail -c $((size - 4096)) "$dir/remote/model.safetensors"); then
  echo "FAIL: the remote run's weights differ"; exit 1
fi
echo "remote run: losses and weights equal to the local CPU's"

# SIGKILL of the server mid-run: the client fails within ALK_REMOTE_TIMEOUT, naming the peer.
start=$(date +%s)
ALK_REMOTE_TIMEOUT=5 "$alk" train "${common[@]}" --steps 100000 --device "remote:127.0.0.1:$port/cpu" \
  --out "$dir/killed" > "$dir/killed.log" 2>&1 &
client=$!
sleep 3
kill -KILL "$server"
wait "$server" || true
server=""
status=0
wait "$client" || status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -ne 0 ] || { echo "FAIL: the client did not notice its server was killed"; exit 1; }
grep -q "127.0.0.1:$port" "$dir/killed.log" || { echo "FAIL: the error does not name the peer:"; tail -5 "$dir/killed.log"; exit 1; }
[ "$elapsed" -lt 60 ] || { echo "FAIL: the client took ${elapsed}s to give up"; exit 1; }
echo "server killed mid-run: the client exited $status after ${elapsed}s: $(tail -1 "$dir/killed.log")"

# SIGTERM: a clean stop.
start_server
kill -TERM "$server"
wait "$server" || { echo "FAIL: the server did not exit cleanly on SIGTERM"; exit 1; }
server=""
echo "ok"
