// crossentropy.c — fused softmax + cross-entropy over the vocabulary (kernels.h
// "fused softmax + cross-entropy"), FP32 with max subtraction, one task per row.
// dlogits may alias logits: a row's max, sum and target logit are read before any write,
// and each dlogits[i] depends only on logits[i] of the same row.
// Vector code: GCC vector extensions (8 floats); the row function is compiled for AVX2 and
// for the x86-64 baseline, picked at load time; elementwise IEEE ops only, so both give the
// same bits. exp is exp8 from simd.h, the same fixed sequence attention.c uses.
// The quantum form (crossentropy_fold/_loss/_backward) runs the same row arithmetic on one
// CE_QUANTUM-wide slice of the vocabulary at a time; the single-pass form is its reference.
// Called by the CPU backend after the LM head (training and evaluation), a quantum at a time.
#include "kernels.h"
#include <math.h>
#include <string.h>
#include "simd.h"

// ---------------------------------------------------------------- one row
// The max m of a row x (V) and, in *sum, Σ e^(x − m) in a fixed order: lane j takes
// i ≡ j (mod 8) in index order (the ragged tail adds into lanes 0..), then
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). park (may be x): the exponentials, when not NULL.
TT_CLONES
static float row_max_sum(const float *x, int V, float *sum, float *park) {
    const int n8 = V & ~7, rem = V - n8;
    v8f mv = splat8(-INFINITY);
    for (int i = 0; i < n8; i += 8) mv = max8(mv, ld8(x + i));
    if (rem) mv = max8(mv, ld8_part(x + n8, rem, -INFINITY));
    float m = mv[0];
    for (int j = 1; j < 8; j++) m = mv[j] > m ? mv[j] : m;
    const v8f ms = splat8(m);
    v8f acc = splat8(0.0f);
    for (int i = 0; i < n8; i += 8) {
        v8f e = exp8(ld8(x + i) - ms);
        if (park) st8(park + i, e);
        acc += e;
    }
    if (rem) { // padding lanes are e^−inf = 0: they add nothing
        v8f e = exp8(ld8_part(x + n8, rem, -INFINITY) - ms);
        if (park) for (int j = 0; j < rem; j++) park[n8 + j] = e[j];
        acc += e;
    }
    *sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    return m;
}

// Loss of one row; when dx is non-NULL also dx = (softmax − onehot)·dscale (dx may be x:
// every pass reads x[i] before it writes dx[i], and x[tgt] is read before any write). With
// dx, the exponentials are parked in dx between the passes instead of being recomputed.
TT_CLONES
static float ce_row(float *dx, const float *x, int V, int tgt, float dscale) {
    const int n8 = V & ~7;
    const float xt = x[tgt];
    float sum, m = row_max_sum(x, V, &sum, dx);
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

// ---------------------------------------------------------------- the quantum form

void crossentropy_fold(float *stats, const float *logits, const int *targets, int N, int Vq, int v0) {
    float *M = stats, *S = stats + N, *XT = stats + 2 * (size_t)N;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vq;
        float s, m = row_max_sum(x, Vq, &s, NULL);
        if (v0 == 0) {
            M[n] = -INFINITY;
            S[n] = 0.0f;
            XT[n] = NAN;
        }
        // the first quantum: 0·e^−inf + s = s exactly, so one quantum gives ce_row's bits
        if (m > M[n]) {
            S[n] = S[n] * expf(M[n] - m) + s;
            M[n] = m;
        } else {
            S[n] = S[n] + s * expf(m - M[n]);
        }
        const int t = targets[n] - v0;
        if (t >= 0 && t < Vq) XT[n] = x[t];
    }
}

void crossentropy_loss(float *losses, const float *stats, int N) {
    const float *M = stats, *S = stats + N, *XT = stats + 2 * (size_t)N;
    for (int n = 0; n < N; n++) losses[n] = logf(S[n]) - (XT[n] - M[n]);
}

// dx (Vq) = (e^(x − m)·inv − onehot)·dscale, ce_row's arithmetic element for element (dx may be x).
TT_CLONES
static void ce_row_backward(float *dx, const float *x, int Vq, int t, float m, float inv, float dscale) {
    const int n8 = Vq & ~7, rem = Vq - n8;
    const v8f ms = splat8(m), iv = splat8(inv), ds = splat8(dscale);
    float et = 0.0f;
    for (int i = 0; i < n8; i += 8) {
        v8f e = exp8(ld8(x + i) - ms);
        if (t >= i && t < i + 8) et = e[t - i];
        st8(dx + i, (e * iv) * ds);
    }
    if (rem) {
        v8f e = exp8(ld8_part(x + n8, rem, -INFINITY) - ms);
        if (t >= n8 && t < Vq) et = e[t - n8];
        for (int j = 0; j < rem; j++) dx[n8 + j] = (e[j] * inv) * dscale;
    }
    if (t >= 0 && t < Vq) dx[t] = (et * inv - 1.0f) * dscale;
}

void crossentropy_backward(float *dlogits, const float *logits, const float *stats, const int *targets, int N,
                           int Vq, int v0, float dscale) {
    const float *M = stats, *S = stats + N;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        ce_row_backward(dlogits + (size_t)n * Vq, logits + (size_t)n * Vq, Vq, targets[n] - v0, M[n], 1.0f / S[n],
                        dscale);
}
