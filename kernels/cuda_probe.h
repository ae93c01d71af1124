// cuda_probe.h — asks the CUDA runtime whether a usable GPU exists (kernels/cuda/probe.cu).
// Built only when CMake finds nvcc (TT_HAVE_CUDA). The CUDA backend (issue: CUDA backend)
// grows next to it.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
// Returns the number of usable devices (>= 0). When the runtime reports an error (no
// driver: cudaErrorInsufficientDriver = 35, which leaves the count unwritten) returns 0
// and writes the runtime's name and text for the error into why.
int cuda_probe_devices(char *why, size_t why_len);
#ifdef __cplusplus
}
#endif
