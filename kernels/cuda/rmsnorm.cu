// rmsnorm.cu — RMSNorm forward and backward, FP32 (kernels.h "RMSNorm"), the CUDA twin
// of rmsnorm.c, and the forward with BF16 halves out (rmsnorm_forward16: the same kernel, its
// results rounded and narrowed as they are stored). One block per row for out/rstd and dx: a
// row's sums are block reductions in a fixed order (common.cuh). dw sums over rows, so it is
// two kernels without atomics:
// partial sums over fixed chunks of RMS_RB rows (one thread per column and chunk, rows in
// order) into the scratch, then one thread per column adds the chunk sums in chunk order
// onto dw. The chunking depends only on N, so dw is the same run to run.
// Called through the CUDA backend's op table.
#include "common.cuh"

#define RMS_THREADS 128
#define RMS_RB 64 // rows per dw partial sum

size_t tt_rmsnorm_scratch_bytes(int max_rows, int max_dim) {
    if (max_rows < 1) max_rows = 1;
    if (max_dim < 1) max_dim = 1;
    return (size_t)CEIL_DIV(max_rows, RMS_RB) * (size_t)max_dim * sizeof(float);
}

// out as FP32 words (O float) or, rounded, as BF16 halves (O uint16_t: rmsnorm_forward16)
template <typename O>
__global__ void __launch_bounds__(RMS_THREADS)
rms_fwd_kernel(O *out, float *rstd, const float *x, const float *w, int C, float eps) {
    __shared__ float red[RMS_THREADS / 32 + 1];
    const size_t n = blockIdx.x;
    const float *xr = x + n * C;
    O *o = out + n * C;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) ss = __fmaf_rn(xr[i], xr[i], ss);
    ss = block_sum(ss, red);
    // the CPU's 1 / sqrt(mean + eps), each step correctly rounded
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)C), eps)));
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) st_elem(o, i, __fmul_rn(__fmul_rn(xr[i], s), w[i]));
    if (threadIdx.x == 0) rstd[n] = s;
}

// dx += s·(g − x·s²·mean(g·x)), g = dout·w
__global__ void __launch_bounds__(RMS_THREADS)
rms_bwd_dx_kernel(float *dx, const float *dout, const float *x, const float *w, const float *rstd, int C) {
    __shared__ float red[RMS_THREADS / 32 + 1];
    const size_t n = blockIdx.x;
    const float *xr = x + n * C, *dr = dout + n * C;
    float *dxr = dx + n * C;
    const float s = rstd[n];
    float dot = 0.0f;
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) dot = __fmaf_rn(__fmul_rn(dr[i], w[i]), xr[i], dot);
    dot = block_sum(dot, red);
    const float c = __fdiv_rn(__fmul_rn(__fmul_rn(dot, s), s), (float)C);
    for (int i = threadIdx.x; i < C; i += RMS_THREADS)
        dxr[i] = __fadd_rn(dxr[i], __fmul_rn(s, __fsub_rn(__fmul_rn(dr[i], w[i]), __fmul_rn(xr[i], c))));
}

// part[chunk][c] = Σ_{rows of chunk, in order} dout·(x·s)
__global__ void rms_dw_partial_kernel(float *part, const float *dout, const float *x, const float *rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int n0 = blockIdx.y * RMS_RB, n1 = min(N, n0 + RMS_RB);
    float acc = 0.0f;
    for (int n = n0; n < n1; n++) {
        const size_t o = (size_t)n * C + c;
        acc = __fadd_rn(acc, __fmul_rn(dout[o], __fmul_rn(x[o], rstd[n])));
    }
    part[(size_t)blockIdx.y * C + c] = acc;
}

// dw[c] += Σ_k part[k][c], chunks in order
__global__ void rms_dw_reduce_kernel(float *dw, const float *part, int nchunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = 0; k < nchunks; k++) acc = __fadd_rn(acc, part[(size_t)k * C + c]);
    dw[c] = __fadd_rn(dw[c], acc);
}

cudaError_t tt_rmsnorm_setup(void) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, rms_fwd_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_fwd_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_bwd_dx_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_dw_partial_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_dw_reduce_kernel);
    return e;
}

extern "C" void cuda_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    NvtxRange range("rmsnorm_forward");
    if (N <= 0 || C <= 0) return;
    rms_fwd_kernel<float><<<N, RMS_THREADS, 0, g_tt_cuda.stream>>>(out, rstd, x, w, C, eps);
    launchCheck("rms_fwd_kernel");
}

extern "C" void cuda_rmsnorm_forward16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                                       float eps) {
    NvtxRange range("rmsnorm_forward16");
    if (N <= 0 || C <= 0) return;
    rms_fwd_kernel<uint16_t><<<N, RMS_THREADS, 0, g_tt_cuda.stream>>>(out, rstd, x, w, C, eps);
    launchCheck("rms_fwd_kernel");
}

extern "C" void cuda_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                                      const float *rstd, int N, int C) {
    NvtxRange range("rmsnorm_backward");
    if (N <= 0 || C <= 0) return;
    rms_bwd_dx_kernel<<<N, RMS_THREADS, 0, g_tt_cuda.stream>>>(dx, dout, x, w, rstd, C);
    launchCheck("rms_bwd_dx_kernel");
    const int nchunks = CEIL_DIV(N, RMS_RB);
    TT_REQUIRE(nchunks <= 65535, "rmsnorm_backward: N=%d rows is more than %d (grid y)", N, 65535 * RMS_RB);
    const size_t need = (size_t)nchunks * C * sizeof(float);
    TT_REQUIRE(need <= g_tt_cuda.scratch_bytes, "rmsnorm_backward N=%d C=%d needs %zu bytes of scratch, the scratch has %zu",
               N, C, need, g_tt_cuda.scratch_bytes);
    float *part = (float *)g_tt_cuda.scratch;
    dim3 grid(CEIL_DIV(C, 128), nchunks);
    rms_dw_partial_kernel<<<grid, 128, 0, g_tt_cuda.stream>>>(part, dout, x, rstd, N, C);
    launchCheck("rms_dw_partial_kernel");
    rms_dw_reduce_kernel<<<CEIL_DIV(C, 128), 128, 0, g_tt_cuda.stream>>>(dw, part, nchunks, C);
    launchCheck("rms_dw_reduce_kernel");
}
