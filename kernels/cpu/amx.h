// amx.h — private to kernels/cpu: what the AMX code (gemm_amx.c, attention_amx.c) shares:
// the target attribute, masks, BF16 narrowing, a 16 × 16 word transpose in registers and the
// tile configuration (every tile 16 rows of 64 bytes).
#pragma once
#include <immintrin.h> // uses: _mm512_*, _tile_loadconfig
#include <stdint.h>

#define TT_AMX __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))

// The first n of 16 lanes (none for n ≤ 0).
static inline __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u); }

// 16 FP32 words to their BF16 halves (the upper 16 bits), in order.
TT_AMX static inline __m256i narrow16(__m512 v) { return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)); }

// The words of two rows' BF16 values (the upper halves of lo and hi): lo's in the low half,
// hi's in the high — a pair of inner indices, as a B tile row holds them.
TT_AMX static inline __m512i pair_words(__m512 lo, __m512 hi) {
    return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                           _mm512_and_si512(_mm512_castps_si512(hi), _mm512_set1_epi32((int)0xffff0000u)));
}

// The 16 × 16 words in r[0..15] (row i in r[i]) transposed in place: 32-bit, then 64-bit
// interleaves within 128-bit lanes (each lane then holds a 4 × 4 block transposed), then the
// lanes gathered across the four row groups. The transposed packs store whole tile rows
// where they scattered words (a scatter stores its 16 words one at a time: the packs that
// used them took half of all packing's time).
TT_AMX static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);     // per lane: a0 b0 a1 b1
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]); //           a2 b2 a3 b3
    }
    for (int g = 0; g < 16; g += 4) { // rows g..g + 3: their columns c, c + 4, c + 8, c + 12 in r[g + c]
        r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int c = 0; c < 4; c++) { // column c + 4l is lane l of r[c], r[4 + c], r[8 + c], r[12 + c]
        const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
        const __m512i w0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44), w1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
        t[c] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        t[c + 4] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        t[c + 8] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        t[c + 12] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;

// This thread's tiles configured: 0–3 the four accumulators, 4–5 A, 6–7 B, each 16 rows of
// 64 bytes; released with _tile_release.
TT_AMX static inline void tiles_on(void) {
    tilecfg_t cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
}
