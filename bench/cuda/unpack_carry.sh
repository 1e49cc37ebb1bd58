#!/bin/bash
# Unpacks what a device run carried in .devcarry/ (see run_device.sh's header): gzipped
# stripped binaries into b/, gzipped libraries into lib/, MNIST's IDX files into /tmp/data,
# a kernel cache into /tmp/alk-cache.
# Source it: `. bench/cuda/unpack_carry.sh` (it exports LD_LIBRARY_PATH and ALK_MNIST_DIR).
mkdir -p b lib
for f in .devcarry/gz/*.gz; do [[ -e $f ]] && gunzip -c "$f" > "b/$(basename "$f" .gz)"; done
chmod +x b/* 2>/dev/null
for f in .devcarry/lib/*.gz; do [[ -e $f ]] && gunzip -c "$f" > "lib/$(basename "$f" .gz)"; done
[[ -e .devcarry/mnist.tgz ]] && tar xzf .devcarry/mnist.tgz -C /tmp
# Compiled kernels from an earlier device run (run_device.sh leaves $OUT/cuda-cache.tgz;
# copy it to .devcarry/): NVRTC compiles most of the parity suite's time on a cold cache
# (DeviceParity.ElementwiseTable 107 s, SoftmaxAndNorms 125 s). Entries are checked against
# their full source, so a stale cache only misses.
mkdir -p /tmp/alk-cache
[[ -e .devcarry/cuda-cache.tgz ]] && tar xf .devcarry/cuda-cache.tgz -C /tmp/alk-cache  # gzip or xz
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:$PWD/lib ALK_MNIST_DIR=/tmp/data ALK_CACHE_DIR=/tmp/alk-cache NCCL_NVLS_ENABLE=0
