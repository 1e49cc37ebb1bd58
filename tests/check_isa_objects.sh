#!/bin/sh
# Checks the objects compiled with -mavx2 / -mavx512* (src/backend/cpu/*_avx2.cpp,
# *_avx512.cpp): none may define a weak (shared, COMDAT) function that contains vector
# instructions. The linker keeps one copy of a weak function for the whole program, and
# it may be this one: every caller, generic code on a CPU without the ISA included, would
# then run AVX-512 instructions. Helpers used by those files must be inlined, static, or in
# an anonymous (or per-ISA) namespace.
#   usage: check_isa_objects.sh <directory holding the object files>
set -eu
dir=$1
found=0
checked=0
for obj in $(find "$dir" -name '*_avx2.cpp.o' -o -name '*_avx512*.cpp.o'); do
  checked=$((checked + 1))
  for sym in $(nm "$obj" | awk '$2 == "W" { print $3 }'); do
    if objdump -d --no-show-raw-insn --disassemble="$sym" "$obj" | grep -qE '%[yz]mm|%k[0-7]|^ +[0-9a-f]+:[[:space:]]+v'; then
      echo "$obj: weak function with vector instructions: $(echo "$sym" | c++filt)"
      found=1
    fi
  done
done
if [ "$checked" -eq 0 ]; then
  echo "no per-ISA objects under $dir"
  exit 1
fi
echo "checked $checked per-ISA objects"
exit $found
