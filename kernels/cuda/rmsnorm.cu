// rmsnorm.cu — RMSNorm forward and backward, FP32 (kernels.h "RMSNorm"), the CUDA twin
// of rmsnorm.c, and its forms on BF16 halves (kernels.h "BF16 activations"): the forward with
// halves out (rmsnorm_forward16: the same kernel, its results rounded and narrowed as they are
// stored), the residual's forward (residual_rmsnorm_forward16: x2 ← round(x2 + x) in halves,
// then the same row norm on them) and the backward with x as halves (rmsnorm_backward16: the
// same kernels, x widened as it is read). Each has the FP32 kernels' bits on the same values.
// One block per row for out/rstd and dx: a row's sums are block reductions in a fixed order
// (common.cuh). dw sums over rows, so it is two kernels without atomics: partial sums over
// fixed chunks of RMS_RB rows (one thread per column and chunk, rows in order) into the
// scratch, then one thread per column adds the chunk sums in chunk order onto dw. The
// chunking depends only on N, so dw is the same run to run.
// Called through the CUDA backend's op table.
#include "common.cuh"

#define RMS_THREADS 128
#define RMS_RB 64 // rows per dw partial sum

size_t tt_rmsnorm_scratch_bytes(int max_rows, int max_dim) {
    if (max_rows < 1) max_rows = 1;
    if (max_dim < 1) max_dim = 1;
    return (size_t)CEIL_DIV(max_rows, RMS_RB) * (size_t)max_dim * sizeof(float);
}

// A row's outputs from its sum of squares ss (block_sum'd): x as FP32 words or BF16 halves (X),
// out as FP32 words or, rounded, as halves (O). Thread j reads the elements i ≡ j (mod
// RMS_THREADS) of xr, the ones it summed.
template <typename X, typename O>
__device__ __forceinline__ void rms_fwd_row(O *o, float *rstd_n, const X *xr, const float *w, int C, float eps,
                                            float ss) {
    // the CPU's 1 / sqrt(mean + eps), each step correctly rounded
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)C), eps)));
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) st_elem(o, i, __fmul_rn(__fmul_rn(ld_elem(xr, i), s), w[i]));
    if (threadIdx.x == 0) *rstd_n = s;
}

// out as FP32 words (O float) or, rounded, as BF16 halves (O uint16_t: rmsnorm_forward16)
template <typename O>
__global__ void __launch_bounds__(RMS_THREADS)
rms_fwd_kernel(O *out, float *rstd, const float *x, const float *w, int C, float eps) {
    __shared__ float red[RMS_THREADS / 32 + 1];
    const size_t n = blockIdx.x;
    const float *xr = x + n * C;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) ss = __fmaf_rn(xr[i], xr[i], ss);
    ss = block_sum(ss, red);
    rms_fwd_row(out + n * C, rstd + n, xr, w, C, eps, ss);
}

// residual_rmsnorm_forward16: t = round(x2 + x) (add_kernel's add, bf16_round_kernel's
// rounding) stored into x2's halves, then rms_fwd_kernel<uint16_t>'s sum and outputs on t,
// read back from x2 (exact): the bits of add, round and rmsnorm_forward16 on an FP32 copy.
// Each thread reads back only the halves it wrote itself (rms_fwd_row's i are the sum's), so
// no thread reads another's write.
__global__ void __launch_bounds__(RMS_THREADS)
rms_res_fwd_kernel(uint16_t *x2, uint16_t *out, float *rstd, const float *x, const float *w, int C, float eps) {
    __shared__ float red[RMS_THREADS / 32 + 1];
    const size_t n = blockIdx.x;
    uint16_t *tr = x2 + n * C;
    const float *xr = x + n * C;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) {
        const uint16_t h = bf16_rne(__float_as_uint(__fadd_rn(ld_elem(tr, i), xr[i])));
        const float t = __uint_as_float((uint32_t)h << 16);
        tr[i] = h;
        ss = __fmaf_rn(t, t, ss);
    }
    ss = block_sum(ss, red);
    rms_fwd_row(out + n * C, rstd + n, (const uint16_t *)tr, w, C, eps, ss);
}

// dx += s·(g − x·s²·mean(g·x)), g = dout·w; x as FP32 words or BF16 halves (X uint16_t:
// rmsnorm_backward16), widened as read
template <typename X>
__global__ void __launch_bounds__(RMS_THREADS)
rms_bwd_dx_kernel(float *dx, const float *dout, const X *x, const float *w, const float *rstd, int C) {
    __shared__ float red[RMS_THREADS / 32 + 1];
    const size_t n = blockIdx.x;
    const X *xr = x + n * C;
    const float *dr = dout + n * C;
    float *dxr = dx + n * C;
    const float s = rstd[n];
    float dot = 0.0f;
    for (int i = threadIdx.x; i < C; i += RMS_THREADS) dot = __fmaf_rn(__fmul_rn(dr[i], w[i]), ld_elem(xr, i), dot);
    dot = block_sum(dot, red);
    const float c = __fdiv_rn(__fmul_rn(__fmul_rn(dot, s), s), (float)C);
    for (int i = threadIdx.x; i < C; i += RMS_THREADS)
        dxr[i] = __fadd_rn(dxr[i], __fmul_rn(s, __fsub_rn(__fmul_rn(dr[i], w[i]), __fmul_rn(ld_elem(xr, i), c))));
}

// part[chunk][c] = Σ_{rows of chunk, in order} dout·(x·s) (x as rms_bwd_dx_kernel's)
template <typename X>
__global__ void rms_dw_partial_kernel(float *part, const float *dout, const X *x, const float *rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int n0 = blockIdx.y * RMS_RB, n1 = min(N, n0 + RMS_RB);
    float acc = 0.0f;
    for (int n = n0; n < n1; n++) {
        const size_t o = (size_t)n * C + c;
        acc = __fadd_rn(acc, __fmul_rn(dout[o], __fmul_rn(ld_elem(x, o), rstd[n])));
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
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_res_fwd_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_bwd_dx_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_bwd_dx_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_dw_partial_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rms_dw_partial_kernel<uint16_t>);
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

extern "C" void cuda_residual_rmsnorm_forward16(uint16_t *x2, uint16_t *out, float *rstd, const float *x,
                                                const float *w, int N, int C, float eps) {
    NvtxRange range("residual_rmsnorm_forward16");
    if (N <= 0 || C <= 0) return;
    rms_res_fwd_kernel<<<N, RMS_THREADS, 0, g_tt_cuda.stream>>>(x2, out, rstd, x, w, C, eps);
    launchCheck("rms_res_fwd_kernel");
}

// dx, then dw through the scratch's chunk sums (the file comment); x as X (float or halves).
template <typename X>
static void rms_bwd_launch(const char *op, float *dx, float *dw, const float *dout, const X *x, const float *w,
                           const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    rms_bwd_dx_kernel<X><<<N, RMS_THREADS, 0, g_tt_cuda.stream>>>(dx, dout, x, w, rstd, C);
    launchCheck("rms_bwd_dx_kernel");
    const int nchunks = CEIL_DIV(N, RMS_RB);
    TT_REQUIRE(nchunks <= 65535, "%s: N=%d rows is more than %d (grid y)", op, N, 65535 * RMS_RB);
    const size_t need = (size_t)nchunks * C * sizeof(float);
    TT_REQUIRE(need <= g_tt_cuda.scratch_bytes, "%s N=%d C=%d needs %zu bytes of scratch, the scratch has %zu", op, N,
               C, need, g_tt_cuda.scratch_bytes);
    float *part = (float *)g_tt_cuda.scratch;
    dim3 grid(CEIL_DIV(C, 128), nchunks);
    rms_dw_partial_kernel<X><<<grid, 128, 0, g_tt_cuda.stream>>>(part, dout, x, rstd, N, C);
    launchCheck("rms_dw_partial_kernel");
    rms_dw_reduce_kernel<<<CEIL_DIV(C, 128), 128, 0, g_tt_cuda.stream>>>(dw, part, nchunks, C);
    launchCheck("rms_dw_reduce_kernel");
}

extern "C" void cuda_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                                      const float *rstd, int N, int C) {
    NvtxRange range("rmsnorm_backward");
    rms_bwd_launch("rmsnorm_backward", dx, dw, dout, x, w, rstd, N, C);
}

extern "C" void cuda_rmsnorm_backward16(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w,
                                        const float *rstd, int N, int C) {
    NvtxRange range("rmsnorm_backward16");
    rms_bwd_launch("rmsnorm_backward16", dx, dw, dout, x, w, rstd, N, C);
}
