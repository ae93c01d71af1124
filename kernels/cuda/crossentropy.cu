// crossentropy.cu — fused softmax + cross-entropy over the vocabulary, FP32 with max
// subtraction, in the quantum form (kernels.h "fused softmax + cross-entropy"), the CUDA
// twin of crossentropy.c's crossentropy_fold / _loss / _backward. The single-pass form
// stays a CPU kernel (the reference); the backend's table has only the quantum form.
// fold: one block per row; the quantum's max and sum of exponentials are block reductions
// in a fixed order (common.cuh), then thread 0 folds them into the row's stats, so results
// are the same run to run. loss: one thread per row. backward: one block per row, no
// reduction: every element is read and written by the one thread that owns it
// (i ≡ tid mod blockDim), so dlogits may alias logits. Token ids are trusted to lie in
// [0, V); the launchers check the quantum's bounds.
// Called through the CUDA backend's op table.
#include "common.cuh"

#define CE_THREADS 256

// stats (3, N): M, S, XT (kernels.h). x (Vq): this block's row of the quantum.
__global__ void __launch_bounds__(CE_THREADS)
ce_fold_kernel(float *stats, const float *logits, const int *targets, int N, int Vq, int v0) {
    __shared__ float red[CE_THREADS / 32 + 1];
    const size_t n = blockIdx.x;
    const float *x = logits + n * Vq;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < Vq; i += CE_THREADS) m = fmaxf(m, x[i]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < Vq; i += CE_THREADS) s = __fadd_rn(s, expf(__fsub_rn(x[i], m)));
    s = block_sum(s, red);
    if (threadIdx.x != 0) return;
    float *pM = stats + n, *pS = stats + N + n, *pXT = stats + 2 * (size_t)N + n;
    // the first quantum starts the row (what stats held before is never read)
    float M = v0 == 0 ? -INFINITY : *pM, S = v0 == 0 ? 0.0f : *pS;
    if (v0 == 0) *pXT = NAN;
    if (m > M) { // the first quantum: 0·e^−inf + s = s exactly
        S = __fadd_rn(__fmul_rn(S, expf(__fsub_rn(M, m))), s);
        M = m;
    } else {
        S = __fadd_rn(S, __fmul_rn(s, expf(__fsub_rn(m, M))));
    }
    *pM = M;
    *pS = S;
    const int t = targets[n] - v0;
    if (t >= 0 && t < Vq) *pXT = x[t];
}

__global__ void ce_loss_kernel(float *losses, const float *stats, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float M = stats[n], S = stats[N + n], XT = stats[2 * (size_t)N + n];
    losses[n] = __fsub_rn(logf(S), __fsub_rn(XT, M));
}

__global__ void __launch_bounds__(CE_THREADS)
ce_backward_kernel(float *dlogits, const float *logits, const float *stats, const int *targets, int N, int Vq,
                   int v0, float dscale) {
    const size_t n = blockIdx.x;
    const float *x = logits + n * Vq;
    float *dx = dlogits + n * Vq;
    const int t = targets[n] - v0; // outside [0, Vq): no onehot in this quantum
    const float m = stats[n], inv = __fdiv_rn(1.0f, stats[N + n]);
    for (int i = threadIdx.x; i < Vq; i += CE_THREADS) {
        const float p = __fmul_rn(expf(__fsub_rn(x[i], m)), inv);
        dx[i] = __fmul_rn(i == t ? __fsub_rn(p, 1.0f) : p, dscale); // (p − onehot)·dscale
    }
}

cudaError_t tt_crossentropy_setup(void) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, ce_fold_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, ce_loss_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, ce_backward_kernel);
    return e;
}

// ---------------------------------------------------------------- launchers
// A quantum: columns [v0, v0 + Vq) with v0 a multiple of CE_QUANTUM and Vq ≤ CE_QUANTUM.
static void ce_check_quantum(const char *op, int Vq, int v0) {
    TT_REQUIRE(Vq <= CE_QUANTUM, "%s: Vq %d is wider than CE_QUANTUM %d", op, Vq, CE_QUANTUM);
    TT_REQUIRE(v0 >= 0 && v0 % CE_QUANTUM == 0, "%s: v0 %d is not a multiple of CE_QUANTUM %d", op, v0, CE_QUANTUM);
}

extern "C" void cuda_crossentropy_fold(float *stats, const float *logits, const int *targets, int N, int Vq, int v0) {
    NvtxRange range("crossentropy_fold");
    if (N <= 0 || Vq <= 0) return;
    ce_check_quantum("crossentropy_fold", Vq, v0);
    ce_fold_kernel<<<N, CE_THREADS, 0, g_tt_cuda.stream>>>(stats, logits, targets, N, Vq, v0);
    launchCheck("ce_fold_kernel");
}

extern "C" void cuda_crossentropy_loss(float *losses, const float *stats, int N) {
    NvtxRange range("crossentropy_loss");
    if (N <= 0) return;
    ce_loss_kernel<<<CEIL_DIV(N, CE_THREADS), CE_THREADS, 0, g_tt_cuda.stream>>>(losses, stats, N);
    launchCheck("ce_loss_kernel");
}

extern "C" void cuda_crossentropy_backward(float *dlogits, const float *logits, const float *stats, const int *targets,
                                           int N, int Vq, int v0, float dscale) {
    NvtxRange range("crossentropy_backward");
    if (N <= 0 || Vq <= 0) return;
    ce_check_quantum("crossentropy_backward", Vq, v0);
    ce_backward_kernel<<<N, CE_THREADS, 0, g_tt_cuda.stream>>>(dlogits, logits, stats, targets, N, Vq, v0, dscale);
    launchCheck("ce_backward_kernel");
}
