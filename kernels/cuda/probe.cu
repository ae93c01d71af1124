// probe.cu — see cuda_probe.h.
#include <cuda_runtime.h>
#include <stdio.h>
#include "cuda_probe.h"

extern "C" int cuda_probe_devices(char *why, size_t why_len) {
    int count = 0; // cudaGetDeviceCount leaves it unwritten on error (e.g. 35, no driver)
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        if (why && why_len) snprintf(why, why_len, "%s (%d): %s", cudaGetErrorName(rc), (int)rc, cudaGetErrorString(rc));
        return 0;
    }
    if (count <= 0 && why && why_len) snprintf(why, why_len, "cudaGetDeviceCount found no device");
    return count > 0 ? count : 0;
}

extern "C" int cuda_probe_memory(size_t *free_b, size_t *total_b, char *why, size_t why_len) {
    cudaError_t rc = cudaSetDevice(0);
    if (rc == cudaSuccess) rc = cudaMemGetInfo(free_b, total_b);
    if (rc != cudaSuccess) {
        if (why && why_len) snprintf(why, why_len, "%s (%d): %s", cudaGetErrorName(rc), (int)rc, cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}
