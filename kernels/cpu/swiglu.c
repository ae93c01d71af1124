// swiglu.c — the SwiGLU gate of the MLP (kernels.h "SwiGLU"), elementwise in FP32.
// out = silu(gate)·up with silu(x) = x/(1+e^−x). For very negative x, e^−x overflows to
// +Inf and silu gives −0, its limit; no NaN appears for any finite input.
// Vector code: GCC vector extensions (8 floats) in fixed chunks; the chunk functions are
// compiled for AVX2 and for the x86-64 baseline, picked at load time; elementwise IEEE ops
// only, so the bits do not depend on the clone or on the thread count. exp is exp8 below:
// the same fixed sequence as attention.c's (kernels/cpu has no private header; keep in sync).
// Called by the CPU backend between the MLP's up/gate and down projections.
#include "kernels.h"
#include <math.h>
#include <string.h>

// Static, always-inlined 8-float helpers: the AVX argument-passing ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#define SWIGLU_CHUNK 4096 // elements per parallel task

// ---------------------------------------------------------------- vector helpers
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define INLINE static inline __attribute__((always_inline))

INLINE v8f ld8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
INLINE void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
INLINE v8f splat8(float x) { return (v8f){x, x, x, x, x, x, x, x}; }
INLINE v8f sel8(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); } // m ? a : b
// Lanes [0, n) from p, the rest zero (n < 8); and the store of those lanes.
INLINE v8f ld8_part(const float *p, size_t n) {
    float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) t[i] = p[i];
    return ld8(t);
}
INLINE void st8_part(float *p, v8f v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = v[i];
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

// ---------------------------------------------------------------- chunks
__attribute__((target_clones("avx2", "default")))
static void swiglu_fwd_chunk(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        size_t nv = n - i < 8 ? n - i : 8;
        v8f g = nv == 8 ? ld8(gate + i) : ld8_part(gate + i, nv);
        v8f u = nv == 8 ? ld8(up + i) : ld8_part(up + i, nv);
        v8f o = (g / (1.0f + exp8(-g))) * u;
        if (nv == 8) st8(out + i, o);
        else st8_part(out + i, o, nv);
    }
}

// d silu/dx = σ(x)·(1 + x·(1 − σ(x))), σ(x) = 1/(1+e^−x)
__attribute__((target_clones("avx2", "default")))
static void swiglu_bwd_chunk(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        size_t nv = n - i < 8 ? n - i : 8;
        v8f g = nv == 8 ? ld8(gate + i) : ld8_part(gate + i, nv);
        v8f u = nv == 8 ? ld8(up + i) : ld8_part(up + i, nv);
        v8f d = nv == 8 ? ld8(dout + i) : ld8_part(dout + i, nv);
        v8f sig = 1.0f / (1.0f + exp8(-g));
        v8f silu = g * sig;
        v8f dsilu = sig * (1.0f + g * (1.0f - sig));
        v8f dg = (d * u) * dsilu, du = d * silu;
        if (nv == 8) { st8(dgate + i, dg); st8(dup + i, du); }
        else { st8_part(dgate + i, dg, nv); st8_part(dup + i, du, nv); }
    }
}

void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    size_t nc = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    #pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * SWIGLU_CHUNK, len = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        swiglu_fwd_chunk(out + i, gate + i, up + i, len);
    }
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
    size_t nc = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    #pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * SWIGLU_CHUNK, len = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        swiglu_bwd_chunk(dgate + i, dup + i, dout + i, gate + i, up + i, len);
    }
}
