// common.cuh — what the kernels/cuda/*.cu files share (internal; C callers use
// cuda_kernels.h): error checks, the module state (stream, scratch, cuBLASLt handle, test
// hooks), NVTX ranges, launch sizing and fixed-order warp reductions.
// The state lives in context.cu; nothing here allocates.
#pragma once
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "cuda_kernels.h"

// ---------------------------------------------------------------- errors
// Setup/programmer errors stop at the call site with file:line (llm.c's cudaCheck).
static inline void cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "tiertrain: CUDA error at %s:%d: %s: %s (%s)\n", file, line, what, cudaGetErrorString(e),
            cudaGetErrorName(e));
    exit(1);
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
// After every launch: the launch itself (bad configuration, too much shared memory).
#define launchCheck(name) cuda_check(cudaGetLastError(), name, __FILE__, __LINE__)

// A size assumption of a launcher that does not hold: a programmer error, said plainly.
#define TT_REQUIRE(cond, ...)                                                       \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "tiertrain: %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// ---------------------------------------------------------------- module state (context.cu)
struct tt_cuda_state {
    cudaStream_t stream;        // compute stream of every op
    void *scratch;              // device scratch (cuda_kernels_scratch_bytes), 256-aligned
    size_t scratch_bytes;
    void *lt_ws;                // cuBLASLt workspace
    size_t lt_ws_bytes;
    void *lt;                   // cublasLtHandle_t (void * keeps cublasLt.h out of here)
    int fp32_matmul;            // 1: FP32 GEMMs; 0: BF16 inputs, FP32 accumulation
    int smem_optin;             // largest dynamic shared memory per block (bytes)
    int ready;                  // cuda_kernels_init done
    // test hooks (0 = default)
    size_t matmul_chunk_elems;
    size_t sumsq_round_chunks;
    int force_gemm_fallback;
    int attention_path; // CUDA_ATT_*
};
extern tt_cuda_state g_tt_cuda;

// Per-file setup, called by cuda_kernels_init: load the file's kernels now (and set their
// shared-memory limits) so lazy module loading allocates nothing after init.
cudaError_t tt_matmul_setup(void);
cudaError_t tt_attention_setup(int smem_optin);
cudaError_t tt_elementwise_setup(void);
cudaError_t tt_rmsnorm_setup(void);
cudaError_t tt_crossentropy_setup(void);
cudaError_t tt_adamw_setup(void);

// Scratch sizes of the files that use it (bytes).
size_t tt_matmul_scratch_bytes(size_t max_weight, int fp32_matmul);
size_t tt_rmsnorm_scratch_bytes(int max_rows, int max_dim);
size_t tt_sumsq_scratch_bytes(void);

// ---------------------------------------------------------------- NVTX
// One range per op (and per copy in the backend): host-side marks of what was queued.
struct NvtxRange {
    explicit NvtxRange(const char *name) { nvtxRangePushA(name); }
    ~NvtxRange() { nvtxRangePop(); }
    NvtxRange(const NvtxRange &) = delete;
    NvtxRange &operator=(const NvtxRange &) = delete;
};

// ---------------------------------------------------------------- launch sizing
// Blocks for a grid-stride loop over n elements: enough to fill the GPU many times over,
// never more than the x-dimension allows.
static inline unsigned grid_1d(size_t n, int threads) {
    size_t b = CEIL_DIV(n, (size_t)threads);
    const size_t cap = (size_t)1 << 20;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

// ---------------------------------------------------------------- warp reductions
// Butterfly (xor) reductions over a full warp. Fixed order, and every lane ends with the
// same bits: at each level lane x adds v_x + v_(x^k) and lane x^k adds v_(x^k) + v_x,
// equal since IEEE addition is commutative. So results do not depend on scheduling.
__device__ __forceinline__ float warp_sum(float v) {
    for (int k = 16; k > 0; k >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, k));
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int k = 16; k > 0; k >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, k));
    return v;
}

// Block-wide sum of one value per thread in a fixed order: each warp reduces (butterfly),
// then thread 0 adds the warp sums in warp order. All threads get the result. red holds
// one float per warp plus one; blockDim.x is a multiple of 32, at most 1024.
__device__ __forceinline__ float block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = red[0];
        for (int w = 1; w < nw; w++) s = __fadd_rn(s, red[w]);
        red[nw] = s;
    }
    __syncthreads();
    float r = red[nw];
    __syncthreads(); // red may be reused right after
    return r;
}
__device__ __forceinline__ float block_max(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = red[0];
        for (int w = 1; w < nw; w++) s = fmaxf(s, red[w]);
        red[nw] = s;
    }
    __syncthreads();
    float r = red[nw];
    __syncthreads();
    return r;
}

// ---------------------------------------------------------------- BF16 bits
// kernels/cpu/bf16.c's rne(): round to nearest even on the upper 16 bits; NaN kept quiet
// with its sign; the carry of a rounding may ripple into the exponent (max finite -> Inf).
__device__ __forceinline__ uint16_t bf16_rne(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((r & ~nan) | (((u >> 16) | 0x0040u) & nan));
}

// An element of an FP32 array or of BF16 halves (widened: exact), and a store of an op's FP32
// result into either (halves: rounded to nearest even, so the bits of the FP32 op's rounded
// word, narrowed) — the kernels that take activations in both forms (kernels.h "BF16
// activations") are templates over the element type.
__device__ __forceinline__ float ld_elem(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld_elem(const uint16_t *p, size_t i) { return __uint_as_float((uint32_t)p[i] << 16); }
__device__ __forceinline__ void st_elem(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st_elem(uint16_t *p, size_t i, float v) { p[i] = bf16_rne(__float_as_uint(v)); }
