// crossentropy.cu — fused softmax + cross-entropy over the vocabulary, FP32 with max
// subtraction (kernels.h "fused softmax + cross-entropy"), the CUDA twin of
// crossentropy.c. One block per row; the row's max and sum of exponentials are block
// reductions in a fixed order (common.cuh), so results are the same run to run.
// dlogits may alias logits: every element is read and written by the one thread that owns
// it (i ≡ tid mod blockDim in all three passes), the target logit is read by thread 0
// before the first barrier, and no thread writes before every thread has finished reading
// (the barriers inside the sum). Token ids are trusted to lie in [0, V).
// Called through the CUDA backend's op table.
#include "common.cuh"

#define CE_THREADS 256

__global__ void __launch_bounds__(CE_THREADS)
ce_kernel(float *dlogits, float *losses, const float *logits, const int *targets, int V, float dscale) {
    __shared__ float red[CE_THREADS / 32 + 1];
    __shared__ float xt_s;
    const size_t n = blockIdx.x;
    const float *x = logits + n * V;
    float *dx = dlogits ? dlogits + n * V : NULL;
    const int tgt = targets[n];
    if (threadIdx.x == 0) xt_s = x[tgt];
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += CE_THREADS) m = fmaxf(m, x[i]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += CE_THREADS) s = __fadd_rn(s, expf(__fsub_rn(x[i], m)));
    s = block_sum(s, red); // its barriers: every read above is done before any write below
    const float xt = xt_s;
    if (dx) {
        const float inv = __fdiv_rn(1.0f, s);
        for (int i = threadIdx.x; i < V; i += CE_THREADS) {
            const float p = __fmul_rn(expf(__fsub_rn(x[i], m)), inv);
            dx[i] = __fmul_rn(i == tgt ? __fsub_rn(p, 1.0f) : p, dscale); // (p − onehot)·dscale
        }
    }
    if (threadIdx.x == 0) losses[n] = __fsub_rn(logf(s), __fsub_rn(xt, m));
}

cudaError_t tt_crossentropy_setup(void) {
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, ce_kernel);
}

extern "C" void cuda_crossentropy_forward_backward(float *dlogits, float *losses, const float *logits,
                                                   const int *targets, int N, int V, float dscale) {
    NvtxRange range("crossentropy_forward_backward");
    if (N <= 0 || V <= 0) return;
    TT_REQUIRE(dlogits != NULL, "crossentropy_forward_backward: dlogits is NULL");
    ce_kernel<<<N, CE_THREADS, 0, g_tt_cuda.stream>>>(dlogits, losses, logits, targets, V, dscale);
    launchCheck("ce_kernel");
}

extern "C" void cuda_crossentropy_forward(float *losses, const float *logits, const int *targets, int N, int V) {
    NvtxRange range("crossentropy_forward");
    if (N <= 0 || V <= 0) return;
    ce_kernel<<<N, CE_THREADS, 0, g_tt_cuda.stream>>>(NULL, losses, logits, targets, V, 0.0f);
    launchCheck("ce_kernel");
}
