// crossentropy.c — fused softmax + cross-entropy over the vocabulary (kernels.h
// "fused softmax + cross-entropy"), FP32 with max subtraction, one task per row.
// dlogits may alias logits: a row's max, sum and target logit are read before any write,
// and each dlogits[i] depends only on logits[i] of the same row.
// Vector code: GCC vector extensions (8 floats); the row function is compiled for AVX2 and
// for the x86-64 baseline, picked at load time; elementwise IEEE ops only, so both give the
// same bits. exp is exp8 below: the same fixed sequence as attention.c's (kernels/cpu has no
// private header, so the few lines are repeated; keep them in sync).
// Called by the CPU backend after the LM head (training and evaluation).
#include "kernels.h"
#include <math.h>
#include <string.h>

// Static, always-inlined 8-float helpers: the AVX argument-passing ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// ---------------------------------------------------------------- vector helpers
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define INLINE static inline __attribute__((always_inline))

INLINE v8f ld8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
INLINE void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
INLINE v8f splat8(float x) { return (v8f){x, x, x, x, x, x, x, x}; }
INLINE v8f sel8(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); } // m ? a : b
INLINE v8f max8(v8f a, v8f b) { return sel8(a > b, a, b); }
// Lanes [0, n) from p, the rest `fill` (n < 8).
INLINE v8f ld8_part(const float *p, int n, float fill) {
    float t[8];
    for (int i = 0; i < 8; i++) t[i] = i < n ? p[i] : fill;
    return ld8(t);
}

// e^x lane-wise (Cephes expf: Cody–Waite reduction, degree-7 polynomial, 2^n in the exponent
// bits): within 1 ulp for −87.3 ≤ x ≤ 88.3, 0 below, +Inf above, NaN stays NaN, e^0 = 1.
INLINE v8f exp8(v8f x) {
    const float lo = -87.33654f, hi = 88.37626f, magic = 12582912.0f; // magic = 1.5·2²³
    v8i under = x < splat8(lo), over = x > splat8(hi);
    x = sel8(under, splat8(lo), sel8(over, splat8(hi), x));
    v8f t = x * 1.44269504088896341f + magic;
    v8f n = t - magic;
    v8f r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v8f y = 1.9875691500e-4f * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    v8i e = ((v8i)t - (v8i)splat8(magic) + 127) << 23;
    y = y * (v8f)e;
    return sel8(under, splat8(0.0f), sel8(over, splat8(INFINITY), y));
}

// ---------------------------------------------------------------- one row
// Loss of one row; when dx is non-NULL also dx = (softmax − onehot)·dscale (dx may be x:
// every pass reads x[i] before it writes dx[i], and x[tgt] is read before any write).
// The sum of exponentials has a fixed order: lane j takes i ≡ j (mod 8) in index order (the
// ragged tail adds into lanes 0..), then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). With dx,
// the exponentials are parked in dx between the passes instead of being recomputed.
__attribute__((target_clones("avx2", "default")))
static float ce_row(float *dx, const float *x, int V, int tgt, float dscale) {
    const int n8 = V & ~7, rem = V - n8;
    v8f mv = splat8(-INFINITY);
    for (int i = 0; i < n8; i += 8) mv = max8(mv, ld8(x + i));
    if (rem) mv = max8(mv, ld8_part(x + n8, rem, -INFINITY));
    float m = mv[0];
    for (int j = 1; j < 8; j++) m = mv[j] > m ? mv[j] : m;
    const float xt = x[tgt];
    const v8f ms = splat8(m);
    v8f acc = splat8(0.0f);
    for (int i = 0; i < n8; i += 8) {
        v8f e = exp8(ld8(x + i) - ms);
        if (dx) st8(dx + i, e);
        acc += e;
    }
    if (rem) { // padding lanes are e^−inf = 0: they add nothing
        v8f e = exp8(ld8_part(x + n8, rem, -INFINITY) - ms);
        if (dx) for (int j = 0; j < rem; j++) dx[n8 + j] = e[j];
        acc += e;
    }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    if (dx) {
        const float inv = 1.0f / sum, et = dx[tgt];
        const v8f iv = splat8(inv), ds = splat8(dscale);
        for (int i = 0; i < n8; i += 8) st8(dx + i, (ld8(dx + i) * iv) * ds); // (p − 0)·dscale
        for (int i = n8; i < V; i++) dx[i] = (dx[i] * inv) * dscale;
        dx[tgt] = (et * inv - 1.0f) * dscale; // the target: (p − 1)·dscale
    }
    return logf(sum) - (xt - m);
}

void crossentropy_forward_backward(float *dlogits, float *losses, const float *logits,
                                   const int *targets, int N, int V, float dscale) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        losses[n] = ce_row(dlogits + (size_t)n * V, logits + (size_t)n * V, V, targets[n], dscale);
}

void crossentropy_forward(float *losses, const float *logits, const int *targets, int N, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) losses[n] = ce_row(NULL, logits + (size_t)n * V, V, targets[n], 0.0f);
}
