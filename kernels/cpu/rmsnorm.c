// rmsnorm.c — RMSNorm forward and backward (kernels.h "RMSNorm"), FP32.
// Rows are independent: forward and dx are parallel over rows. dw sums over rows, so it is
// its own loop, parallel over columns, each thread adding rows in row order into its
// columns: no two threads write one element, and the bits do not depend on thread count.
// Row sums use 8 interleaved accumulators in a fixed order (see sum8); elementwise loops use
// restrict-qualified pointers so the compiler vectorizes them (which changes no bits).
// Called by the CPU backend (pre-attention, pre-MLP and final norms).
#include "kernels.h"
#include <math.h>
#include <omp.h>

#define DW_ALIGN 16 // dw column ranges start on a cache line (16 floats)

// Σ a[i]·b[i]·c[i] (c may be NULL: Σ a[i]·b[i]) in FP32, fixed order: accumulator j takes
// the products i ≡ j (mod 8) in index order (a ragged tail goes to accumulators 0..), then
// ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)). Eight chains hide the add latency.
static float sum8(const float *a, const float *b, const float *c, int n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int n8 = n & ~7;
    for (int i = 0; i < n8; i += 8)
        for (int j = 0; j < 8; j++) s[j] += c ? (a[i + j] * b[i + j]) * c[i + j] : a[i + j] * b[i + j];
    for (int i = n8; i < n; i++) s[i - n8] += c ? (a[i] * b[i]) * c[i] : a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict xr = x + (size_t)n * C;
        const float *restrict wr = w;
        float *restrict o = out + (size_t)n * C;
        float s = 1.0f / sqrtf(sum8(xr, xr, NULL, C) / (float)C + eps);
        #pragma omp simd
        for (int i = 0; i < C; i++) o[i] = (xr[i] * s) * wr[i];
        rstd[n] = s;
    }
}

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C) {
    // dx: y_i = x_i·s·w_i with s = (mean(x²)+eps)^(-1/2), so with g = dout·w
    //   ∂L/∂x_i = s·(g_i − x_i·s²·mean_j(g_j·x_j)).
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict xr = x + (size_t)n * C, *restrict dr = dout + (size_t)n * C;
        const float *restrict wr = w;
        float *restrict dxr = dx + (size_t)n * C;
        float s = rstd[n];
        float c = (sum8(dr, wr, xr, C) * s) * s / (float)C;
        #pragma omp simd
        for (int i = 0; i < C; i++) dxr[i] += s * ((dr[i] * wr[i]) - xr[i] * c);
    }
    // dw_i += Σ_n dout[n,i]·x[n,i]·s_n, rows in order. Each thread owns one contiguous
    // range of columns (whole cache lines) and walks the rows once; who owns a column never
    // changes what is added to it or in which order.
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int per = (C + nt - 1) / nt;
        per = (per + DW_ALIGN - 1) / DW_ALIGN * DW_ALIGN;
        int i0 = id * per < C ? id * per : C, i1 = i0 + per < C ? i0 + per : C;
        float *restrict dwb = dw + i0;
        for (int n = 0; n < N && i0 < i1; n++) {
            const float *restrict xr = x + (size_t)n * C + i0, *restrict dr = dout + (size_t)n * C + i0;
            float s = rstd[n];
            #pragma omp simd
            for (int i = 0; i < i1 - i0; i++) dwb[i] += dr[i] * (xr[i] * s);
        }
    }
}
