// adamw.cu — the AdamW update on the GPU (kernels.h "AdamW"), bit-identical to the scalar
// reference kernels/cpu/adamw.c: the same IEEE operations in the same order, each one
// spelled as its correctly rounded intrinsic (__fmul_rn, __fmaf_rn where the reference calls
// fmaf, __fdiv_rn, __fsqrt_rn, __fadd_rn, __fsub_rn), so neither --fmad nor -prec-div /
// -prec-sqrt settings can change them (the file is built with --fmad=false regardless).
// Denormals are kept (no -ftz), as on the CPU. 1 − beta is formed once, in FP32, on the
// host, as the reference does. The BF16 copy uses the same integer rounding (common.cuh).
// One caveat, as on every path: a NaN input gives a NaN, but the GPU's NaN is canonical
// where x86 keeps the input's payload. Elementwise: same bits for any launch shape.
// Called through the CUDA backend's op table (the optimizer driver, once wired).
#include "common.cuh"

__global__ void adamw_kernel(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float gs, float bc1, float bc2,
                             float omb1, float omb2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gi = __fmul_rn(g[i], gs);
        const float mi = __fmaf_rn(beta1, m[i], __fmul_rn(omb1, gi));
        const float vi = __fmaf_rn(beta2, v[i], __fmul_rn(__fmul_rn(omb2, gi), gi));
        const float mh = __fdiv_rn(mi, bc1), vh = __fdiv_rn(vi, bc2);
        const float u = __fdiv_rn(mh, __fadd_rn(__fsqrt_rn(vh), eps));
        const float pm = master[i];
        const float p = __fsub_rn(pm, __fmul_rn(lr, __fmaf_rn(wd, pm, u)));
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        if (p16) p16[i] = bf16_rne(__float_as_uint(p));
        if (p32) p32[i] = p;
    }
}

cudaError_t tt_adamw_setup(void) {
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, adamw_kernel);
}

extern "C" void cuda_adamw_update(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g,
                                  size_t n, const adamw_params_t *hp) {
    NvtxRange range("adamw_update");
    if (n == 0) return;
    const float omb1 = 1.0f - hp->beta1, omb2 = 1.0f - hp->beta2; // as the reference, in FP32
    adamw_kernel<<<grid_1d(n, 256), 256, 0, g_tt_cuda.stream>>>(master, m, v, p16, p32, g, n, hp->lr, hp->beta1,
                                                                hp->beta2, hp->eps, hp->wd, hp->grad_scale, hp->bc1,
                                                                hp->bc2, omb1, omb2);
    launchCheck("adamw_kernel");
}
