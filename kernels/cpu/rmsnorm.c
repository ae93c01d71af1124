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
// lanes8 adds n (a multiple of 8) products into the lanes, lanes_end the tail (n < 8) and the
// final sums, so a row can be summed a segment at a time (the halves' rows, widened in pieces).
INLINE v8f lanes8(v8f acc, const float *a, const float *b, const float *c, int n) {
    if (c)
        for (int i = 0; i < n; i += 8) acc += (ld8(a + i) * ld8(b + i)) * ld8(c + i);
    else
        for (int i = 0; i < n; i += 8) acc += ld8(a + i) * ld8(b + i);
    return acc;
}
INLINE float lanes_end(v8f acc, const float *a, const float *b, const float *c, int n) {
    float s[8];
    memcpy(s, &acc, sizeof s);
    for (int i = 0; i < n; i++) s[i] += c ? (a[i] * b[i]) * c[i] : a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
INLINE float sum8(const float *a, const float *b, const float *c, int n) {
    const int n8 = n & ~7;
    return lanes_end(lanes8(splat8(0.0f), a, b, c, n8), a + n8, b + n8, c ? c + n8 : NULL, n - n8);
}

// The halves' rows (x2 as BF16: kernels.h residual_rmsnorm_forward16) are widened SEG elements
// at a time into the stack, whole lanes' worth, so sum8's order holds across the pieces.
#define SEG 256

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

// residual_rmsnorm_forward16's row: x2 ← round(x2 + x) (add_inplace's order and rounding),
// the sum of squares of its values as sum8 takes them, then fwd_row16's output from x2's
// halves (the same values: t is rounded, so its halves are exact).
TT_CLONES
static void res_row16(uint16_t *restrict x2, uint16_t *restrict o, float *rstd, const float *restrict xr,
                      const float *restrict wr, int C, float eps) {
    float t[SEG];
    v8f acc = splat8(0.0f);
    int n = 0, n8 = 0;
    for (int i0 = 0; i0 < C; i0 += n) {
        n = C - i0 < SEG ? C - i0 : SEG, n8 = n & ~7;
        tt_widen_n(t, x2 + i0, (size_t)n);
        #pragma omp simd
        for (int i = 0; i < n; i++) t[i] += xr[i0 + i];
        tt_round_n(t, (size_t)n);
        tt_narrow_n(x2 + i0, t, (size_t)n);
        acc = lanes8(acc, t, t, NULL, n8);
    }
    // C's ragged tail, in the last piece (SEG is whole lanes), and the lanes' sum
    const float ss = lanes_end(acc, t + n8, t + n8, NULL, n - n8);
    const float s = 1.0f / sqrtf(ss / (float)C + eps);
    *rstd = s;
    for (int i0 = 0; i0 < C; i0 += SEG) {
        const int n = C - i0 < SEG ? C - i0 : SEG;
        tt_widen_n(t, x2 + i0, (size_t)n);
        #pragma omp simd
        for (int i = 0; i < n; i++) t[i] = (t[i] * s) * wr[i0 + i];
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

// dx_row's with x as BF16 halves: the row's sum a widened piece at a time (sum8's order),
// then dx_row's update on each piece widened again.
TT_CLONES
static void dx_row16(float *restrict dxr, const float *restrict dr, const uint16_t *restrict xh,
                     const float *restrict wr, float s, int C, int round) {
    float t[SEG];
    v8f acc = splat8(0.0f);
    int n = 0, n8 = 0, i0 = 0;
    for (; i0 < C; i0 += n) {
        n = C - i0 < SEG ? C - i0 : SEG, n8 = n & ~7;
        tt_widen_n(t, xh + i0, (size_t)n);
        acc = lanes8(acc, dr + i0, wr + i0, t, n8);
    }
    const int tail = C - (n - n8); // the ragged tail's first index, in the last piece (as res_row16's)
    const float dot = lanes_end(acc, dr + tail, wr + tail, t + n8, n - n8);
    const float c = (dot * s) * s / (float)C;
    for (i0 = 0; i0 < C; i0 += SEG) {
        n = C - i0 < SEG ? C - i0 : SEG;
        tt_widen_n(t, xh + i0, (size_t)n);
        float *restrict d = dxr + i0;
        const float *restrict g = dr + i0, *restrict w = wr + i0;
        #pragma omp simd
        for (int i = 0; i < n; i++) d[i] += s * ((g[i] * w[i]) - t[i] * c);
        if (round) tt_round_n(d, (size_t)n);
    }
}

// dw[0, n) += dr·(xr·s): one row's share of a thread's column range.
TT_CLONES
static void dw_row(float *restrict dwb, const float *restrict dr, const float *restrict xr, float s, int n) {
    #pragma omp simd
    for (int i = 0; i < n; i++) dwb[i] += dr[i] * (xr[i] * s);
}

// dw_row's with x as BF16 halves, widened a piece at a time.
TT_CLONES
static void dw_row16(float *restrict dwb, const float *restrict dr, const uint16_t *restrict xh, float s, int n) {
    float t[SEG];
    for (int i0 = 0; i0 < n; i0 += SEG) {
        const int k = n - i0 < SEG ? n - i0 : SEG;
        tt_widen_n(t, xh + i0, (size_t)k);
        float *restrict d = dwb + i0;
        const float *restrict g = dr + i0;
        #pragma omp simd
        for (int i = 0; i < k; i++) d[i] += g[i] * (t[i] * s);
    }
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

// The rows' dx, then dw_i += Σ_n dout[n,i]·x[n,i]·s_n, rows in order: x FP32 or (x16) BF16
// halves. Each thread owns one contiguous range of columns (whole cache lines) and walks the
// rows once; who owns a column never changes what is added to it or in which order.
static void backward(float *dx, float *dw, const float *dout, const void *x, int x16, const float *w,
                     const float *rstd, int N, int C, int round) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        if (x16) dx_row16(dx + o, dout + o, (const uint16_t *)x + o, w, rstd[n], C, round);
        else dx_row(dx + o, dout + o, (const float *)x + o, w, rstd[n], C, round);
    }
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int per = (C + nt - 1) / nt;
        per = (per + DW_ALIGN - 1) / DW_ALIGN * DW_ALIGN;
        int i0 = id * per < C ? id * per : C, i1 = i0 + per < C ? i0 + per : C;
        for (int n = 0; n < N && i0 < i1; n++) {
            const size_t o = (size_t)n * C + i0;
            if (x16) dw_row16(dw + i0, dout + o, (const uint16_t *)x + o, rstd[n], i1 - i0);
            else dw_row(dw + i0, dout + o, (const float *)x + o, rstd[n], i1 - i0);
        }
    }
}

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C, int round) {
    backward(dx, dw, dout, x, 0, w, rstd, N, C, round);
}

void rmsnorm_backward16(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w, const float *rstd,
                        int N, int C, int round) {
    backward(dx, dw, dout, x, 1, w, rstd, N, C, round);
}

void residual_rmsnorm_forward16(uint16_t *x2, uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                                float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        res_row16(x2 + o, out + o, rstd + n, x + o, w, C, eps);
    }
}
