#!/bin/sh
# Installs the build tree into a temporary prefix, builds a project against it with
# find_package(alk), and runs one of its programs: a user's project (tests/install, the
# default) or the example backend (examples/backend).
# Usage: check.sh SOURCE_DIR BUILD_DIR [PROJECT_DIR PROGRAM [ARGS...]]   (PROJECT_DIR: under SOURCE_DIR)
set -eu
src="$1"; build="$2"
project="${3:-tests/install}"; program="${4:-use_alk}"
[ $# -ge 4 ] && shift 4 || shift $#
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/$project" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/build/$program" "$@"
