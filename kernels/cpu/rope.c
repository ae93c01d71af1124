// rope.c — rotary position embedding, Hugging Face rotate_half layout (kernels.h "RoPE").
// The table holds cos/sin of t·theta^(-2i/HS) for i < HS/2, computed in double and rounded
// once to FP32. Forward rotates pairs (i, i+HS/2) by +angle, backward by −angle (the
// transpose of a rotation). In place, parallel over (b, t) rows. HS must be even.
// The row function is compiled for AVX2 and for the x86-64 baseline (picked at load time);
// elementwise IEEE ops only, so the bits depend on neither the clone nor the thread count.
// rope_forward16 and rope_backward16 do the same on BF16 halves: each piece widened, rotated,
// rounded and narrowed, the same operations, the same bits.
// Called by the CPU backend on q and k before attention (and on their gradients after).
#include "kernels.h"
#include <math.h>
#include "simd.h"

// Column i of the table: positions 0..T-1 at inverse frequency inv_freq.
static void rope_column(float *cos_t, float *sin_t, int T, int half, int i, double inv_freq) {
    for (int t = 0; t < T; t++) {
        double a = (double)t * inv_freq;
        cos_t[(size_t)t * half + i] = (float)cos(a);
        sin_t[(size_t)t * half + i] = (float)sin(a);
    }
}

void rope_table(float *cos_t, float *sin_t, int T, int HS, double theta) {
    for (int i = 0; i < HS / 2; i++) rope_column(cos_t, sin_t, T, HS / 2, i, pow(theta, -(2.0 * i) / (double)HS));
}

void rope_table_freq(float *cos_t, float *sin_t, int T, int HS, const double *inv_freq) {
    for (int i = 0; i < HS / 2; i++) rope_column(cos_t, sin_t, T, HS / 2, i, inv_freq[i]);
}

// The pairs (lo[i], hi[i]), i < n, with their cos/sin cr, sr: inverse = 0 rotates by +angle
// (forward), inverse = 1 by −angle (the transpose). (The two halves of a head row never
// overlap: restrict lets the loops vectorize.)
INLINE void rope_pairs(float *restrict lo, float *restrict hi, const float *restrict cr, const float *restrict sr, int n,
                       int inverse) {
    if (!inverse) {
        #pragma omp simd
        for (int i = 0; i < n; i++) {
            float x0 = lo[i], x1 = hi[i];
            lo[i] = x0 * cr[i] - x1 * sr[i];
            hi[i] = x1 * cr[i] + x0 * sr[i];
        }
    } else {
        #pragma omp simd
        for (int i = 0; i < n; i++) {
            float x0 = lo[i], x1 = hi[i];
            lo[i] = x0 * cr[i] + x1 * sr[i];
            hi[i] = x1 * cr[i] - x0 * sr[i];
        }
    }
}

// The NX heads of one (b, t) row xr, with that position's cos/sin rows cr, sr, rotated
// (rope_pairs), then the whole row rounded to BF16 values when round.
TT_CLONES
static void rope_row(float *xr, const float *restrict cr, const float *restrict sr, int NX, int HS, int inverse,
                     int round) {
    int half = HS / 2;
    for (int h = 0; h < NX; h++) rope_pairs(xr + (size_t)h * HS, xr + (size_t)h * HS + half, cr, sr, half, inverse);
    if (round) tt_round_n(xr, (size_t)NX * HS);
}

// rope_row with round on a row of BF16 halves: each head's pairs widened a piece at a time,
// rotated, rounded and narrowed (the same operations on the same numbers).
TT_CLONES
static void rope_row16_staged(uint16_t *xr, const float *restrict cr, const float *restrict sr, int NX, int HS,
                              int inverse) {
    enum { PIECE = 64 };
    float lo[PIECE], hi[PIECE];
    const int half = HS / 2;
    for (int h = 0; h < NX; h++)
        for (int i0 = 0; i0 < half; i0 += PIECE) {
            const int n = half - i0 < PIECE ? half - i0 : PIECE;
            uint16_t *l16 = xr + (size_t)h * HS + i0, *h16 = l16 + half;
            tt_widen_n(lo, l16, (size_t)n);
            tt_widen_n(hi, h16, (size_t)n);
            rope_pairs(lo, hi, cr + i0, sr + i0, n, inverse);
            tt_round_n(lo, (size_t)n);
            tt_round_n(hi, (size_t)n);
            tt_narrow_n(l16, lo, (size_t)n);
            tt_narrow_n(h16, hi, (size_t)n);
        }
}

static void rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int inverse,
                       int round) {
    int half = HS / 2;
    #pragma omp parallel for schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        int t = (int)(bt % T);
        rope_row(x + (size_t)bt * NX * HS, cos_t + (size_t)t * half, sin_t + (size_t)t * half, NX, HS, inverse, round);
    }
}

void rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round) {
    rope_apply(x, cos_t, sin_t, B, T, NX, HS, 0, round);
}

void rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round) {
    rope_apply(dx, cos_t, sin_t, B, T, NX, HS, 1, round);
}

// The same with 16 pairs widened in registers (AVX-512F), where a half head is whole vectors:
// staged, the halves cost more than their bytes saved (small's step: RoPE and the adds 3.0 →
// 3.2 ms).
TT_WIDE static void rope_row16_wide(uint16_t *xr, const float *cr, const float *sr, int NX, int HS, int inverse) {
    const int half = HS / 2;
    for (int h = 0; h < NX; h++)
        for (int i = 0; i < half; i += 16) {
            uint16_t *l16 = xr + (size_t)h * HS + i, *h16 = l16 + half;
            const v16f x0 = ld16h(l16), x1 = ld16h(h16), c = ld16(cr + i), s = ld16(sr + i);
            if (!inverse) {
                st16h(l16, rnd16(x0 * c - x1 * s));
                st16h(h16, rnd16(x1 * c + x0 * s));
            } else {
                st16h(l16, rnd16(x0 * c + x1 * s));
                st16h(h16, rnd16(x1 * c - x0 * s));
            }
        }
}

static void rope_apply16(uint16_t *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int inverse) {
    const int half = HS / 2, wide = tt_wide() && half % 16 == 0;
    #pragma omp parallel for schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        const int t = (int)(bt % T);
        uint16_t *xr = x + (size_t)bt * NX * HS;
        if (wide) rope_row16_wide(xr, cos_t + (size_t)t * half, sin_t + (size_t)t * half, NX, HS, inverse);
        else rope_row16_staged(xr, cos_t + (size_t)t * half, sin_t + (size_t)t * half, NX, HS, inverse);
    }
}

void rope_forward16(uint16_t *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS) {
    rope_apply16(x, cos_t, sin_t, B, T, NX, HS, 0);
}

void rope_backward16(uint16_t *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS) {
    rope_apply16(dx, cos_t, sin_t, B, T, NX, HS, 1);
}
