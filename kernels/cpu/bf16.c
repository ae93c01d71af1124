// bf16.c — FP32 <-> BF16 conversion (kernels.h "BF16").
// Round-to-nearest-even on the upper 16 bits; NaN stays NaN (quiet bit set, sign kept),
// ±Inf stays ±Inf, values that round past the largest finite BF16 become ±Inf (as RNE
// says). Denormals are kept (no flush). The rounding is branch-free integer code, so the
// n-versions vectorize; they run in fixed chunks (compiled for AVX2 and for the x86-64
// baseline, picked at load time), parallel over chunks: elementwise, so the bits depend on
// neither the clone nor the thread count.
// Called by the CPU backend (activation rounding, weight conversion) and the optimizer
// (p16 write-back).
#include "kernels.h"
#include "simd.h"
#include <string.h>

#define BF16_CHUNK 16384 // elements per parallel task

// The rounded value is kept in the upper 16 bits of a 32-bit word (simd.h's tt_rne_hi), so
// the chunk loops stay in 32-bit lanes until the last step (a uint16_t result mid-way makes
// the vectorizer narrow early and carry twice the instructions).
static inline uint16_t rne(uint32_t u) { return (uint16_t)(tt_rne_hi(u) >> 16); }

uint16_t bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return rne(u);
}

float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// ---------------------------------------------------------------- chunks
// Bits move through memcpy (no aliasing games); the compiler turns it into plain loads.
TT_CLONES
static void from_chunk(uint16_t *restrict dst, const float *restrict src, size_t n) {
    #pragma omp simd
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, sizeof u);
        dst[i] = rne(u);
    }
}

TT_CLONES
static void to_chunk(float *restrict dst, const uint16_t *restrict src, size_t n) { tt_widen_n(dst, src, n); }

TT_CLONES
static void round_chunk(float *restrict x, size_t n) { tt_round_n(x, n); }

void bf16_from_f32_n(uint16_t *dst, const float *src, size_t n) {
    size_t nc = (n + BF16_CHUNK - 1) / BF16_CHUNK;
    #pragma omp parallel for schedule(static) if (nc > 2)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * BF16_CHUNK, len = n - i < BF16_CHUNK ? n - i : BF16_CHUNK;
        from_chunk(dst + i, src + i, len);
    }
}

void bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    size_t nc = (n + BF16_CHUNK - 1) / BF16_CHUNK;
    #pragma omp parallel for schedule(static) if (nc > 2)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * BF16_CHUNK, len = n - i < BF16_CHUNK ? n - i : BF16_CHUNK;
        to_chunk(dst + i, src + i, len);
    }
}

void bf16_round_n(float *x, size_t n) {
    size_t nc = (n + BF16_CHUNK - 1) / BF16_CHUNK;
    #pragma omp parallel for schedule(static) if (nc > 2)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * BF16_CHUNK, len = n - i < BF16_CHUNK ? n - i : BF16_CHUNK;
        round_chunk(x + i, len);
    }
}
