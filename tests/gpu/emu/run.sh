#!/usr/bin/env bash
# run.sh — EMULATION ONLY: builds tests/gpu/test_cuda_kernels against kernels/cuda/*.cu run
# on the CPU (emu_device.h: every CUDA thread a fiber, barriers and shuffles emulated) and
# a host stand-in for the CUDA runtime and cuBLASLt (emu_runtime.cpp), then runs it.
# Checks the kernels' logic — indexing, masking, tiling, barriers, reductions, chunking,
# the GEMM operand mapping through the fallback kernel, the backend's arena — where no GPU
# is at hand. It is not a GPU: cuBLASLt, streams, memory ordering and the GPU's libm are
# not exercised; the real test on a GPU is `ctest -L gpu`.
# Usage: tests/gpu/emu/run.sh [OUT_DIR]   (default /tmp/tt-emu); extra env passed to the test
# (CK_RUN_CASE=matmul, TK_VERBOSE=1, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-/tmp/tt-emu}
mkdir -p "$out/src" "$out/obj"
jobs=$(nproc 2>/dev/null || echo 2)

cxxflags=(-std=c++17 -O2 -g -ffp-contract=off -Wall -Wextra -Wno-unused-parameter -include "$here/emu_device.h"
          -I "$here/include" -I "$root/kernels" -I "$root/src")
cflags=(-std=c11 -O2 -g -ffp-contract=off -Wall -Wextra -D_GNU_SOURCE -fopenmp -DTT_HAVE_CUDA=1
        -DTT_VERSION='"emu"' -DTT_SOURCE_DIR="\"$root\"" -DTT_BINARY='"/bin/false"' -DTT_TESTS_DIR="\"$root/tests\""
        -I "$here/include" -I "$root/src" -I "$root/kernels" -I "$root/io" -I "$root/tests")

pids=()
for f in "$root"/kernels/cuda/*.cu; do
  name=$(basename "$f" .cu)
  # launches and dynamic shared memory in emulator form; one launch per line in these files
  sed -e 's/extern __shared__ float sm\[\];/float *sm = (float *)emu::dyn_smem();/' \
      -e 's/\([A-Za-z_][A-Za-z0-9_<>]*\)<<<\(.*\)>>>(/EMU_LAUNCH(\1, \2)(/' "$f" > "$out/src/$name.cpp"
  if grep -q '<<<' "$out/src/$name.cpp"; then echo "run.sh: a launch in $f was not rewritten" >&2; exit 1; fi
  g++ "${cxxflags[@]}" -I "$root/kernels/cuda" -c "$out/src/$name.cpp" -o "$out/obj/cu_$name.o" &
  pids+=($!)
done
g++ -std=c++17 -O2 -g -Wall -Wextra -I "$here/include" -c "$here/emu_runtime.cpp" -o "$out/obj/emu_runtime.o" &
pids+=($!)
csrc=("$root"/src/backend_cpu.c "$root"/src/backend_cuda.c "$root"/src/util.c "$root"/kernels/cpu/*.c
      "$root"/tests/testutil.c "$root"/tests/gpu/test_cuda_kernels.c)
for f in "${csrc[@]}"; do
  gcc "${cflags[@]}" -c "$f" -o "$out/obj/c_$(basename "$f" .c).o" &
  pids+=($!)
  while (( $(jobs -rp | wc -l) >= jobs )); do sleep 0.2; done
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
(( fail == 0 )) || { echo "run.sh: build failed" >&2; exit 1; }
g++ -fopenmp -o "$out/test_cuda_kernels_emu" "$out"/obj/*.o $(pkg-config --libs check openblas) -lm -lpthread
echo "run.sh: built $out/test_cuda_kernels_emu; running" >&2
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$out/test_cuda_kernels_emu"
