// crossentropy.c — fused softmax + cross-entropy over the vocabulary (kernels.h
// "fused softmax + cross-entropy"), FP32 with max subtraction, one task per row.
// dlogits may alias logits: a row's max, sum and target logit are read before any write,
// and each dlogits[i] depends only on logits[i] of the same row.
// Vector code: GCC vector extensions (8 floats); the row function is compiled for AVX2 and
// for the x86-64 baseline, picked at load time; elementwise IEEE ops only, so both give the
// same bits. exp is exp8 from simd.h, the same fixed sequence attention.c uses.
// Called by the CPU backend after the LM head (training and evaluation).
#include "kernels.h"
#include <math.h>
#include <string.h>
#include "simd.h"

// ---------------------------------------------------------------- one row
// Loss of one row; when dx is non-NULL also dx = (softmax − onehot)·dscale (dx may be x:
// every pass reads x[i] before it writes dx[i], and x[tgt] is read before any write).
// The sum of exponentials has a fixed order: lane j takes i ≡ j (mod 8) in index order (the
// ragged tail adds into lanes 0..), then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). With dx,
// the exponentials are parked in dx between the passes instead of being recomputed.
TT_CLONES
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
