// simd.h — private to kernels/cpu: 8-float vector helpers (GCC vector extensions) and exp8,
// shared by attention.c, crossentropy.c and swiglu.c so every kernel takes e^x with the same
// fixed sequence of FP32 operations; and their 16-float twins (exp16 the same sequence) for
// the AVX-512F paths (TT_WIDE, attention.c). Only elementwise IEEE operations, no FMA
// (-ffp-contract=off): a function compiled for AVX-512F, AVX2 and the x86-64 baseline
// (target_clones), or its 16-lane twin, gives the same bits either way.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h> // uses: _mm256_fmadd_ps, _mm512_fmadd_ps

// The helpers are static and always inlined, so the note that passing 32-byte vectors by
// value depends on AVX being enabled (an ABI question) does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// Compiles a function for AVX-512F, AVX2 and the x86-64 baseline; the loader picks by CPU
// (an ifunc). The AVX-512F clone widens the loops the compiler vectorizes (the elementwise
// rows: RMSNorm, RoPE, the adds, conversions), whose operations are elementwise, so its bits
// are the others': bench train --model small, 6 alternated pairs, RMSNorm 4.8 → 4.1 ms, RoPE
// and the adds 3.1 → 2.9, the step 1.4–2.8 ms shorter. Not under ThreadSanitizer: it
// instruments the ifunc resolvers, which then run before its runtime is up and crash the
// program at load.
#if defined(__SANITIZE_THREAD__)
#define TT_CLONES
#else
#define TT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// A function compiled for AVX-512F alone (no clone, no ifunc), for 16-float vectors; call it
// only where tt_wide() says this CPU runs it.
#define TT_WIDE __attribute__((target("avx512f")))

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define INLINE static inline __attribute__((always_inline))

// The widest vector paths attention and SwiGLU may take: the CPU's, unless
// kernels_limit_simd (kernels.h, for tests) lowered it. 3: as 2, and the matrix products on
// AMX tiles where the CPU has them (gemm_amx.c), 2: AVX-512F, 1: AVX2 with FMA, 0: no FMA.
extern int tt_simd_limit;
INLINE int tt_wide(void) { return tt_simd_limit >= 2 && __builtin_cpu_supports("avx512f"); }
INLINE int tt_fma(void) {
    return tt_simd_limit >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// Explicit fused multiply-adds, a·b + c with one rounding (DESIGN §2: -ffp-contract=off, so
// these are the only fused operations): fma8 in TT_FMA functions, fma16 in TT_WIDE ones, and
// fma8_soft anywhere (fmaf per lane: correctly rounded, so the same bits, slowly, on a CPU
// without FMA).
#define TT_FMA __attribute__((target("avx2,fma")))
TT_FMA INLINE v8f fma8(v8f a, v8f b, v8f c) { return (v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
TT_WIDE INLINE v16f fma16(v16f a, v16f b, v16f c) {
    return (v16f)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
INLINE v8f fma8_soft(v8f a, v8f b, v8f c) {
    v8f r;
    for (int i = 0; i < 8; i++) r[i] = fmaf(a[i], b[i], c[i]);
    return r;
}

INLINE v8f ld8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }
INLINE void st8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
// a broadcast of lane 0: GCC 12 builds an 8-element initializer lane by lane (vinsertps ×7,
// vinsertf128), which bounded the attention tiles' FMA chains on a CPU without AVX-512
INLINE v8f splat8(float x) { return __builtin_shuffle((v8f){x}, (v8i){0}); }
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
// The same on 16 lanes (only inside TT_WIDE functions).
INLINE v16f ld16(const float *p) { v16f v; memcpy(&v, p, sizeof v); return v; }
INLINE void st16(float *p, v16f v) { memcpy(p, &v, sizeof v); }
// a broadcast of lane 0, as splat8 (GCC 12 builds the 16-element initializer one masked lane at a time)
INLINE v16f splat16(float x) { return __builtin_shuffle((v16f){x}, (v16i){0}); }
INLINE v16f sel16(v16i m, v16f a, v16f b) { return (v16f)(((v16i)a & m) | ((v16i)b & ~m)); }
INLINE v16f max16(v16f a, v16f b) { return sel16(a > b, a, b); }
// 16 BF16 halves widened to their FP32 words, and 16 BF16 values (FP32 words whose low halves
// are zero: rounded) narrowed to their halves (TT_WIDE functions only: AVX-512F)
TT_WIDE INLINE v16f ld16h(const uint16_t *p) {
    return (v16f)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
TT_WIDE INLINE void st16h(uint16_t *p, v16f v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512((__m512)v), 16)));
}
// 8 BF16 values narrowed (TT_FMA functions: AVX2; packus saturates nothing, every word ≤ 0xffff
// after the shift, and the permute gathers the two lanes' halves)
TT_FMA INLINE void st8h(uint16_t *p, v8f v) {
    const __m256i x = _mm256_srli_epi32(_mm256_castps_si256((__m256)v), 16);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08)));
}

// BF16 rounding of an FP32 value's bits, kept in the upper 16 bits of the word (the lower 16
// become zero): round to nearest even, by adding 0x7fff plus the lowest kept bit (the carry
// may ripple into the exponent, which is exactly rounding up, max finite to Inf included; Inf
// has zero low bits); a NaN keeps its sign and top payload and is forced quiet (rounding
// could carry it into Inf). bf16.c's conversions and every op's fused output rounding (the
// `round` flags of kernels.h) use this one function, so fused and separate rounding agree.
INLINE uint32_t tt_rne_hi(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    uint32_t q = (u & 0xffff0000u) | 0x00400000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? q : r;
}
// BF16 halves to their FP32 words, and BF16 values (FP32 words whose low halves are zero:
// rounded) to their halves, n of them (vectorized in the caller's clone).
INLINE void tt_widen_n(float *restrict dst, const uint16_t *restrict src, size_t n) {
    #pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(dst + i, &u, sizeof u);
    }
}
INLINE void tt_narrow_n(uint16_t *restrict dst, const float *restrict src, size_t n) {
    #pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = (uint16_t)(u >> 16);
    }
}
// x[0, n) rounded to BF16 values in place (vectorized in the caller's clone).
INLINE void tt_round_n(float *restrict x, size_t n) {
    #pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        u = tt_rne_hi(u);
        memcpy(x + i, &u, sizeof u);
    }
}
// The same on one 8-float vector, and on 16 (only inside TT_WIDE functions).
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint32_t v16u __attribute__((vector_size(64)));
#define TT_RND_DEF(name, V, VU)                                                                \
    INLINE V name(V x) {                                                                   \
        VU u = (VU)x;                                                                      \
        VU r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;                             \
        VU q = (u & 0xffff0000u) | 0x00400000u;                                            \
        VU nan = (VU)((u & 0x7fffffffu) > 0x7f800000u);                                    \
        return (V)((q & nan) | (r & ~nan));                                                \
    }
TT_RND_DEF(rnd8, v8f, v8u)
TT_RND_DEF(rnd16, v16f, v16u)

// e^x, lane-wise, as one fixed sequence of FP32 operations (Cephes expf: Cody–Waite
// reduction by ln 2, degree-7 polynomial, scale by 2^n built in the exponent bits): within
// 1 ulp of e^x (0.98 measured) for −87.3 ≤ x ≤ 88.3; 0 below (where e^x < FLT_MIN), +Inf
// above, NaN stays NaN, e^0 = 1 exactly. One body for exp8 and exp16 (V the vector, VI its
// lanes as integers): round(x·log2 e) lands in the low bits of t (magic = 1.5·2²³); ln 2 is
// split in two so that the first product is exact; e = 2^n, n ∈ [−126, 127].
#define TT_EXP_DEF(name, V, VI, splat, sel)                                                     \
    INLINE V name(V x) {                                                                    \
        const float lo = -87.33654f, hi = 88.37626f, magic = 12582912.0f;                   \
        VI under = x < splat(lo), over = x > splat(hi);                                     \
        x = sel(under, splat(lo), sel(over, splat(hi), x));                                 \
        V t = x * 1.44269504088896341f + magic;                                             \
        V n = t - magic;                                                                    \
        V r = x - n * 0.693359375f;                                                         \
        r = r - n * -2.12194440e-4f;                                                        \
        V y = 1.9875691500e-4f * r + 1.3981999507e-3f;                                      \
        y = y * r + 8.3334519073e-3f;                                                       \
        y = y * r + 4.1665795894e-2f;                                                       \
        y = y * r + 1.6666665459e-1f;                                                       \
        y = y * r + 5.0000001201e-1f;                                                       \
        y = y * (r * r) + r + 1.0f;                                                         \
        VI e = ((VI)t - (VI)splat(magic) + 127) << 23;                                      \
        y = y * (V)e;                                                                       \
        return sel(under, splat(0.0f), sel(over, splat(INFINITY), y));                     \
    }
TT_EXP_DEF(exp8, v8f, v8i, splat8, sel8)
TT_EXP_DEF(exp16, v16f, v16i, splat16, sel16) // only inside TT_WIDE functions
