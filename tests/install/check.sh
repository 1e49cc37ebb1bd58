#!/bin/sh
# Installs the build tree into a temporary prefix, builds tests/install against it with
# find_package(alk), and runs the result. Usage: check.sh SOURCE_DIR BUILD_DIR
set -eu
src="$1"; build="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/use_alk"
