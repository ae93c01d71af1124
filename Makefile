# Thin wrapper over CMake. `make run` and `make test` install missing Debian packages first.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
WERROR     := $(if $(CI),ON,OFF)
CMAKE_ARGS ?=

.PHONY: all build run test test-asan test-tsan bench deps clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/Makefile:
	cmake -S . -B $(BUILD) -DTT_WERROR=$(WERROR) $(CMAKE_ARGS)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# The default training run across every tier: a device budget below what the all-resident
# run needs (116 MiB), parameters and gradients homed on the host, optimizer states on NVMe
# (files under the build folder), falling loss, and the tier report at the end.
run: deps build
	$(BUILD)/tiertrain train --hbm-budget 96M --params host --grads host --optimizer nvme \
	  --nvme-path $(BUILD) --log $(BUILD)/run.jsonl

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# AddressSanitizer + UBSan in its own folder. OpenBLAS/OpenMP internals leak by design;
# the suppression file names them.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DTT_SANITIZE=ON -DTT_CUDA=OFF -DTT_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && TT_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -LE gpu

test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DTT_TSAN=ON -DTT_CUDA=OFF -DTT_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && TT_SANITIZED=1 TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) -R 'test_io|test_hostmem|test_sched|test_tiers'

bench: build
	$(BUILD)/tiertrain bench gemm
	$(BUILD)/tiertrain bench io --size 1G

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)

# libFuzzer targets in tests/fuzz (clang-14, installed when missing), built straight from the
# sources they need, not through CMake; each runs FUZZ_SECONDS on its seed corpus and the
# executions and findings per target are printed (tests/fuzz/run.sh).
FUZZ_SECONDS ?= 600
FUZZ_DIR     ?= build-fuzz

.PHONY: fuzz
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_DIR=$(CURDIR)/$(FUZZ_DIR) tests/fuzz/run.sh
