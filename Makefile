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
# (files under the build folder), falling loss, a checkpoint at the end (build/checkpoints)
# and the tier report.
run: deps build
	rm -rf $(BUILD)/checkpoints # the last run's: a --save directory takes one run's checkpoints
	$(BUILD)/tiertrain train --hbm-budget 96M --params host --grads host --optimizer nvme \
	  --nvme-path $(BUILD) --log $(BUILD)/run.jsonl --save $(BUILD)/checkpoints

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

# the suites whose code starts threads
TSAN_TESTS := test_io|test_hostmem|test_sched|test_tiers|test_safetensors|test_hasher|test_ahead
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DTT_TSAN=ON -DTT_CUDA=OFF -DTT_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	cd $(TSAN_BUILD) && TT_SANITIZED=1 TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

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

.PHONY: fuzz fuzz-ckpt
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_DIR=$(CURDIR)/$(FUZZ_DIR) tests/fuzz/run.sh

# Damaged checkpoint folders (a flip, a cut or a duplicated run of bytes anywhere in one of
# their files), loaded by the ASan build for FUZZ_SECONDS: each must load to the pristine
# folder's result or be refused with exit 2 and one line (tests/fuzz/ckpt_fuzz.py).
fuzz-ckpt: deps
	cmake -S . -B $(ASAN_BUILD) -DTT_SANITIZE=ON -DTT_CUDA=OFF -DTT_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target tiertrain
	python3 tests/fuzz/ckpt_fuzz.py --binary $(ASAN_BUILD)/tiertrain --seconds $(FUZZ_SECONDS) \
	  --work $(CURDIR)/$(FUZZ_DIR)/ckpt

# A checkpoint against an independent float64 PyTorch Llama (tests/ref/check_export.py):
# trains `tiny` untied (F32 model file) and tied (--save-dtype bf16) on a copy of this README,
# then checks each folder's tensor names and shapes against HF Llama and its loss against
# `tiertrain eval --precision fp32` over the same windows (the tied one through the llm.c
# .bin form of the same text). Needs Debian's python3-torch; not part of `make test`. When
# CHECK_EXPORT_PYTHON imports transformers (e.g. a venv made with --system-site-packages), each
# folder is also loaded with LlamaForCausalLM.from_pretrained and compared.
CHECK_EXPORT_DIR    ?= $(BUILD)/check-export
CHECK_EXPORT_PYTHON ?= /usr/bin/python3

.PHONY: check-export
check-export: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS) --target tiertrain
	@$(CHECK_EXPORT_PYTHON) -c 'import torch' 2>/dev/null || { \
	  echo "check-export: $(CHECK_EXPORT_PYTHON) cannot import torch; install it with: sudo apt-get install python3-torch" >&2; \
	  exit 1; }
	rm -rf $(CHECK_EXPORT_DIR) && mkdir -p $(CHECK_EXPORT_DIR)
	cp README.md $(CHECK_EXPORT_DIR)/text.txt
	$(BUILD)/tiertrain tokenize $(CHECK_EXPORT_DIR)/text.txt -o $(CHECK_EXPORT_DIR)/text.bin
	$(BUILD)/tiertrain train --model tiny --steps 100 --data $(CHECK_EXPORT_DIR)/text.txt --eval-every 0 --quiet \
	  --save $(CHECK_EXPORT_DIR)/untied
	$(BUILD)/tiertrain train --model tiny --tie --steps 100 --data $(CHECK_EXPORT_DIR)/text.txt --eval-every 0 --quiet \
	  --save-dtype bf16 --save $(CHECK_EXPORT_DIR)/tied
	$(CHECK_EXPORT_PYTHON) tests/ref/check_export.py $(BUILD)/tiertrain --resume $(CHECK_EXPORT_DIR)/untied \
	  --data $(CHECK_EXPORT_DIR)/text.txt --precision fp32
	$(CHECK_EXPORT_PYTHON) tests/ref/check_export.py $(BUILD)/tiertrain --resume $(CHECK_EXPORT_DIR)/tied/latest \
	  --data $(CHECK_EXPORT_DIR)/text.bin --precision fp32
	# Llama 3.1/3.2's RoPE scaling: the fixture folder with rope_scaling llama3 over its 64 positions
	cp -r tests/fixtures/hf_tiny $(CHECK_EXPORT_DIR)/llama3
	sed -i 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, \
	  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}/' $(CHECK_EXPORT_DIR)/llama3/config.json
	$(BUILD)/tiertrain train --init-from $(CHECK_EXPORT_DIR)/llama3 --steps 100 --data $(CHECK_EXPORT_DIR)/text.txt \
	  --eval-every 0 --quiet --save $(CHECK_EXPORT_DIR)/scaled
	$(CHECK_EXPORT_PYTHON) tests/ref/check_export.py $(BUILD)/tiertrain --resume $(CHECK_EXPORT_DIR)/scaled \
	  --data $(CHECK_EXPORT_DIR)/text.txt --precision fp32
