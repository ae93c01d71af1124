// rmsnorm.c — RMSNorm forward and backward (kernels.h "RMSNorm"), FP32.
// Rows are independent: forward and dx are parallel over rows. dw sums over rows, so it is
// its own loop, parallel over columns, each thread adding rows in row order into its
// columns: no two threads write one element, and the bits do not depend on thread count.
// Row sums use 8 interleaved accumulators in a fixed order (see sum8); elementwise loops use
// restrict-qualified pointers so the compiler vectorizes them (which changes no bits).
// Vector code: the row functions are compiled for AVX2 and for the x86-64 baseline (picked
// at load time); sum8's eight accumulators are the lanes of one 8-float vector (GCC vector
// extensions), each adding its products in the same order as the scalar loop did, so the
// bits depend on neither the clone nor the thread count. (A NaN's sign or payload aside,
// where two different NaNs meet in one add: x86 returns the first operand's and which
// operand is first is the compiler's choice. Every non-NaN result is the same.)
// Called by the CPU backend (pre-attention, pre-MLP and final norms).
#include "kernels.h"
#include <math.h>
#include <omp.h>
#include "simd.h"

#define DW_ALIGN 16 // dw column ranges start on a cache line (16 floats)

// Σ a[i]·b[i]·c[i] (c may be NULL: Σ a[i]·b[i]) in FP32, fixed order: accumulator j takes
// the products i ≡ j (mod 8) in index order (a ragged tail goes to accumulators 0..), then
// ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)). Eight chains (one vector) hide the add latency.
INLINE float sum8(const float *a, const float *b, const float *c, int n) {
    v8f acc = splat8(0.0f);
    int n8 = n & ~7;
    if (c)
        for (int i = 0; i < n8; i += 8) acc += (ld8(a + i) * ld8(b + i)) * ld8(c + i);
    else
        for (int i = 0; i < n8; i += 8) acc += ld8(a + i) * ld8(b + i);
    float s[8];
    memcpy(s, &acc, sizeof s);
    for (int i = n8; i < n; i++) s[i - n8] += c ? (a[i] * b[i]) * c[i] : a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// ---------------------------------------------------------------- rows
TT_CLONES
static void fwd_row(float *restrict o, float *rstd, const float *restrict xr, const float *restrict wr,
                    int C, float eps, int round) {
    float s = 1.0f / sqrtf(sum8(xr, xr, NULL, C) / (float)C + eps);
    #pragma omp simd
    for (int i = 0; i < C; i++) o[i] = (xr[i] * s) * wr[i];
    if (round) tt_round_n(o, (size_t)C);
    *rstd = s;
}

// fwd_row's with round, written as BF16 halves (the upper halves of the rounded values): 16
// at a time in a register with AVX-512F (wide), else a segment of the row at a time through
// the stack (which, on the wide path too, made the step's norms 10% slower than FP32's).
TT_WIDE static void out16_wide(uint16_t *o, const float *xr, const float *wr, float s, int C) {
    int i = 0;
    for (; i + 16 <= C; i += 16) {
        st16h(o + i, rnd16((ld16(xr + i) * s) * ld16(wr + i)));
    }
    for (; i < C; i++) { // the tail, as fwd_row's elements
        float t = (xr[i] * s) * wr[i];
        tt_round_n(&t, 1);
        tt_narrow_n(o + i, &t, 1);
    }
}

TT_CLONES
static void fwd_row16(uint16_t *restrict o, float *rstd, const float *restrict xr, const float *restrict wr, int C,
                      float eps, int wide) {
    enum { SEG = 256 };
    float t[SEG];
    float s = 1.0f / sqrtf(sum8(xr, xr, NULL, C) / (float)C + eps);
    *rstd = s;
    if (wide) {
        out16_wide(o, xr, wr, s, C);
        return;
    }
    for (int i0 = 0; i0 < C; i0 += SEG) {
        const int n = C - i0 < SEG ? C - i0 : SEG;
        #pragma omp simd
        for (int i = 0; i < n; i++) t[i] = (xr[i0 + i] * s) * wr[i0 + i];
        tt_round_n(t, (size_t)n);
        tt_narrow_n(o + i0, t, (size_t)n);
    }
}

// dx: y_i = x_i·s·w_i with s = (mean(x²)+eps)^(-1/2), so with g = dout·w
//   ∂L/∂x_i = s·(g_i − x_i·s²·mean_j(g_j·x_j)).
TT_CLONES
static void dx_row(float *restrict dxr, const float *restrict dr, const float *restrict xr,
                   const float *restrict wr, float s, int C, int round) {
    float c = (sum8(dr, wr, xr, C) * s) * s / (float)C;
    #pragma omp simd
    for (int i = 0; i < C; i++) dxr[i] += s * ((dr[i] * wr[i]) - xr[i] * c);
    if (round) tt_round_n(dxr, (size_t)C);
}

// dw[0, n) += dr·(xr·s): one row's share of a thread's column range.
TT_CLONES
static void dw_row(float *restrict dwb, const float *restrict dr, const float *restrict xr, float s, int n) {
    #pragma omp simd
    for (int i = 0; i < n; i++) dwb[i] += dr[i] * (xr[i] * s);
}

// ---------------------------------------------------------------- entry points
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps, int round) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) fwd_row(out + (size_t)n * C, rstd + n, x + (size_t)n * C, w, C, eps, round);
}

void rmsnorm_forward16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    const int wide = tt_wide();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) fwd_row16(out + (size_t)n * C, rstd + n, x + (size_t)n * C, w, C, eps, wide);
}

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C, int round) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        dx_row(dx + (size_t)n * C, dout + (size_t)n * C, x + (size_t)n * C, w, rstd[n], C, round);
    // dw_i += Σ_n dout[n,i]·x[n,i]·s_n, rows in order. Each thread owns one contiguous
    // range of columns (whole cache lines) and walks the rows once; who owns a column never
    // changes what is added to it or in which order.
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int per = (C + nt - 1) / nt;
        per = (per + DW_ALIGN - 1) / DW_ALIGN * DW_ALIGN;
        int i0 = id * per < C ? id * per : C, i1 = i0 + per < C ? i0 + per : C;
        for (int n = 0; n < N && i0 < i1; n++)
            dw_row(dw + i0, dout + (size_t)n * C + i0, x + (size_t)n * C + i0, rstd[n], i1 - i0);
    }
}
