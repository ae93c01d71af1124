// simd.h — private to kernels/cpu: 8-float vector helpers (GCC vector extensions) and exp8,
// shared by attention.c, crossentropy.c and swiglu.c so every kernel takes e^x with the same
// fixed sequence of FP32 operations. Only elementwise IEEE operations, no FMA
// (-ffp-contract=off): a function compiled for AVX2 and for the x86-64 baseline
// (target_clones) gives the same bits either way.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The helpers are static and always inlined, so the note that passing 32-byte vectors by
// value depends on AVX being enabled (an ABI question) does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// Compiles a function for AVX2 and for the x86-64 baseline; the loader picks by CPU (an
// ifunc). Not under ThreadSanitizer: it instruments the ifunc resolvers, which then run
// before its runtime is up and crash the program at load.
#if defined(__SANITIZE_THREAD__)
#define TT_CLONES
#else
#define TT_CLONES __attribute__((target_clones("avx2", "default")))
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define INLINE static inline __attribute__((always_inline))

INLINE v8f ld8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
INLINE void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
INLINE v8f splat8(float x) { return (v8f){x, x, x, x, x, x, x, x}; }
INLINE v8f sel8(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); } // m ? a : b
INLINE v8f max8(v8f a, v8f b) { return sel8(a > b, a, b); }
// Lanes [0, n) from p, the rest `fill` (n < 8); and the store of lanes [0, n).
INLINE v8f ld8_part(const float *p, size_t n, float fill) {
    float t[8];
    for (size_t i = 0; i < 8; i++) t[i] = i < n ? p[i] : fill;
    return ld8(t);
}
INLINE void st8_part(float *p, v8f v, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = v[i];
}

// e^x, lane-wise, as one fixed sequence of FP32 operations (Cephes expf: Cody–Waite
// reduction by ln 2, degree-7 polynomial, scale by 2^n built in the exponent bits): within
// 1 ulp of e^x (0.98 measured) for −87.3 ≤ x ≤ 88.3; 0 below (where e^x < FLT_MIN), +Inf
// above, NaN stays NaN, e^0 = 1 exactly.
INLINE v8f exp8(v8f x) {
    const float lo = -87.33654f, hi = 88.37626f, magic = 12582912.0f; // magic = 1.5·2²³
    v8i under = x < splat8(lo), over = x > splat8(hi);
    x = sel8(under, splat8(lo), sel8(over, splat8(hi), x));
    v8f t = x * 1.44269504088896341f + magic; // round(x·log2 e) lands in the low bits
    v8f n = t - magic;
    v8f r = x - n * 0.693359375f; // ln 2 split in two: the first product is exact
    r = r - n * -2.12194440e-4f;
    v8f y = 1.9875691500e-4f * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    v8i e = ((v8i)t - (v8i)splat8(magic) + 127) << 23; // 2^n, n ∈ [−126, 127]
    y = y * (v8f)e;
    return sel8(under, splat8(0.0f), sel8(over, splat8(INFINITY), y));
}
