// context.cu — the CUDA kernels' module state (cuda_kernels.h "context"): the compute
// stream, the cuBLASLt handle, the scratch and workspace handed in by the backend, and
// the test hooks. Init loads every kernel up front so that CUDA's lazy module loading does
// not allocate device memory later, inside the step. Allocates no device memory itself.
// Called by src/backend_cuda.c (and the GPU tests through it).
#include <cublasLt.h>
#include <string.h>
#include "common.cuh"

tt_cuda_state g_tt_cuda; // zero-initialized: no stream (legacy default), not ready

extern "C" size_t cuda_kernels_scratch_bytes(int max_rows, int max_dim, size_t max_weight, int fp32_matmul) {
    size_t a = tt_matmul_scratch_bytes(max_weight, fp32_matmul);
    size_t b = tt_rmsnorm_scratch_bytes(max_rows, max_dim);
    size_t c = tt_sumsq_scratch_bytes();
    size_t m = a > b ? a : b;
    m = m > c ? m : c;
    return (m + 255) & ~(size_t)255;
}

extern "C" int cuda_kernels_init(int fp32_matmul, char *err, size_t errlen) {
    if (g_tt_cuda.ready) {
        snprintf(err, errlen, "the CUDA kernels are already initialized in this process (one CUDA backend at a time)");
        return -1;
    }
    memset(&g_tt_cuda, 0, sizeof g_tt_cuda);
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&g_tt_cuda.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "CUDA device query failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return -1;
    }
    cublasLtHandle_t lt = NULL;
    cublasStatus_t st = cublasLtCreate(&lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasLtCreate failed: %s (%d)", cublasLtGetStatusString(st), (int)st);
        return -1;
    }
    g_tt_cuda.lt = lt;
    g_tt_cuda.fp32_matmul = fp32_matmul ? 1 : 0;
    const struct { const char *what; cudaError_t (*fn)(void); } setups[] = {
        {"matmul kernels", tt_matmul_setup},     {"elementwise kernels", tt_elementwise_setup},
        {"rmsnorm kernels", tt_rmsnorm_setup},   {"cross-entropy kernels", tt_crossentropy_setup},
        {"AdamW kernel", tt_adamw_setup},
    };
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) {
        if ((e = setups[i].fn()) != cudaSuccess) {
            snprintf(err, errlen, "loading the %s failed: %s (%s)", setups[i].what, cudaGetErrorString(e), cudaGetErrorName(e));
            cublasLtDestroy(lt);
            memset(&g_tt_cuda, 0, sizeof g_tt_cuda);
            return -1;
        }
    }
    if ((e = tt_attention_setup(g_tt_cuda.smem_optin)) != cudaSuccess) {
        snprintf(err, errlen, "loading the attention kernels failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        cublasLtDestroy(lt);
        memset(&g_tt_cuda, 0, sizeof g_tt_cuda);
        return -1;
    }
    g_tt_cuda.ready = 1;
    return 0;
}

extern "C" void cuda_kernels_set_workspace(void *d_scratch, size_t scratch_bytes, void *d_lt_ws, size_t lt_ws_bytes) {
    TT_REQUIRE(((uintptr_t)d_scratch & 255) == 0 && ((uintptr_t)d_lt_ws & 255) == 0,
               "cuda_kernels_set_workspace: scratch %p and workspace %p must be 256-byte aligned", d_scratch, d_lt_ws);
    g_tt_cuda.scratch = d_scratch;
    g_tt_cuda.scratch_bytes = d_scratch ? scratch_bytes : 0;
    g_tt_cuda.lt_ws = d_lt_ws;
    g_tt_cuda.lt_ws_bytes = d_lt_ws ? lt_ws_bytes : 0;
}

extern "C" void cuda_kernels_free(void) {
    if (!g_tt_cuda.ready) return;
    if (g_tt_cuda.lt) cublasLtDestroy((cublasLtHandle_t)g_tt_cuda.lt);
    memset(&g_tt_cuda, 0, sizeof g_tt_cuda);
}

extern "C" void cuda_kernels_set_stream(void *stream) { g_tt_cuda.stream = (cudaStream_t)stream; }
extern "C" void *cuda_kernels_stream(void) { return (void *)g_tt_cuda.stream; }
extern "C" void cuda_kernels_set_fp32_matmul(int on) { g_tt_cuda.fp32_matmul = on ? 1 : 0; }

extern "C" void cuda_kernels_set_test_limits(size_t matmul_chunk_elems, size_t sumsq_round_chunks,
                                             int force_gemm_fallback, int attention_path) {
    g_tt_cuda.matmul_chunk_elems = matmul_chunk_elems;
    g_tt_cuda.sumsq_round_chunks = sumsq_round_chunks;
    g_tt_cuda.force_gemm_fallback = force_gemm_fallback;
    g_tt_cuda.attention_path = attention_path;
}
