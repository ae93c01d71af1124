// cuda_probe.h — asks the CUDA runtime whether a usable GPU exists (kernels/cuda/probe.cu).
// Built only when CMake finds nvcc (TT_HAVE_CUDA). backend_resolve (src/backend_cpu.c) and
// the CUDA backend use it.
#pragma once
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
// Returns the number of usable devices (>= 0). When the runtime reports an error (no
// driver: cudaErrorInsufficientDriver = 35, which leaves the count unwritten) returns 0
// and writes the runtime's name and text for the error into why.
int cuda_probe_devices(char *why, size_t why_len);
// Free and total memory of device 0 (creates its context). Returns 0, or -1 with why.
int cuda_probe_memory(size_t *free_b, size_t *total_b, char *why, size_t why_len);

// Device memory left to the CUDA runtime and libraries when --hbm-budget is unset:
// max(1 GiB, 5% of the device).
static inline uint64_t cuda_reserve_bytes(uint64_t total_b) {
    return total_b / 20 > ((uint64_t)1 << 30) ? total_b / 20 : (uint64_t)1 << 30;
}
// The default --hbm-budget: free memory minus the reserve, in whole 2 MiB pages; 0 when
// under 64 MiB would be left.
static inline uint64_t cuda_default_budget(uint64_t free_b, uint64_t total_b) {
    uint64_t r = cuda_reserve_bytes(total_b);
    if (free_b <= r + ((uint64_t)64 << 20)) return 0;
    return (free_b - r) & ~(((uint64_t)2 << 20) - 1);
}
#ifdef __cplusplus
}
#endif
