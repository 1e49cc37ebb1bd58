#!/usr/bin/env bash
# ctest Remote.ParityOnRemoteCpu (and .ParityOnRemoteVulkan): the op-table parity suite
# (tests/backend/test_device_parity.cpp) on remote:127.0.0.1:PORT/PEER_DEVICE against the local CPU. The server is `alk serve --ops` as its own
# process on a free loopback port (it writes the port to a file), with a token made here; it is
# stopped by SIGTERM at the end, and must exit cleanly.
# Usage: parity_on_remote.sh ALK_CLI ALK_TESTS [PEER_DEVICE (default cpu)] [gtest filter]
set -euo pipefail
alk=$1
tests=$2
peer=${3:-cpu}
filter=${4:-DeviceParity.*}
dir=$(mktemp -d)
server=""
cleanup() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then kill -KILL "$server"; fi
  rm -rf "$dir"
}
trap cleanup EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
"$alk" serve --ops --host 127.0.0.1 --port 0 --port-file "$dir/port" --token-file "$dir/token" &
server=$!
for _ in $(seq 1 100); do
  [ -s "$dir/port" ] && break
  kill -0 "$server" || { echo "the server exited before listening"; exit 1; }
  sleep 0.1
done
[ -s "$dir/port" ] || { echo "the server wrote no port in 10 s"; exit 1; }
port=$(cat "$dir/port")
status=0
ALK_REMOTE_TOKEN_FILE="$dir/token" ALK_PARITY_DEVICES="remote:127.0.0.1:$port/$peer" \
  "$tests" --gtest_brief=1 "--gtest_filter=$filter" || status=$?
kill -TERM "$server"
wait "$server" || { echo "the server did not exit cleanly on SIGTERM"; exit 1; }
server=""
exit $status
