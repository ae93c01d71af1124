// swiglu.c — the SwiGLU gate of the MLP (kernels.h "SwiGLU"), elementwise in FP32.
// out = silu(gate)·up with silu(x) = x/(1+e^−x). For very negative x, e^−x overflows to
// +Inf and silu gives −0, its limit; no NaN appears for any finite input.
// Vector code: GCC vector extensions (8 floats) in fixed chunks; the chunk functions are
// compiled for AVX2 and for the x86-64 baseline, picked at load time, and have 16-float twins
// compiled for AVX-512F, called instead where the CPU has it; elementwise IEEE ops only, so
// the bits depend on neither the path nor the thread count. exp is exp8 (exp16) from simd.h,
// the same fixed sequence attention.c uses.
// The BF16 versions (swiglu_forward16, swiglu_backward16) widen their operands, run the same
// steps with round, and narrow the results: the same operations on the same numbers, so the
// same bits, while memory sees half the bytes.
// Called by the CPU backend between the MLP's up/gate and down projections.
#include "kernels.h"
#include <math.h>
#include <string.h>
#include "simd.h"

#define SWIGLU_CHUNK 4096 // elements per parallel task

// ---------------------------------------------------------------- chunks
// Whole vectors, then the ragged tail (masked loads and stores); each body is inlined twice,
// with round a constant, so that no branch is left inside the loop (see the 16-lane twins).
INLINE v8f swiglu_fwd8_step(v8f g, v8f u, int round) {
    v8f o = (g / (1.0f + exp8(-g))) * u;
    return round ? rnd8(o) : o;
}

INLINE void swiglu_fwd8_body(float *out, const float *gate, const float *up, size_t n, int round) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) st8(out + i, swiglu_fwd8_step(ld8(gate + i), ld8(up + i), round));
    if (i < n) {
        const size_t nv = n - i;
        st8_part(out + i, swiglu_fwd8_step(ld8_part(gate + i, nv, 0.0f), ld8_part(up + i, nv, 0.0f), round), nv);
    }
}

TT_CLONES
static void swiglu_fwd_chunk(float *out, const float *gate, const float *up, size_t n, int round) {
    if (round) swiglu_fwd8_body(out, gate, up, n, 1);
    else swiglu_fwd8_body(out, gate, up, n, 0);
}

// d silu/dx = σ(x)·(1 + x·(1 − σ(x))), σ(x) = 1/(1+e^−x)
INLINE void swiglu_bwd8_step(v8f g, v8f u, v8f d, int round, v8f *dg, v8f *du) {
    v8f sig = 1.0f / (1.0f + exp8(-g));
    v8f silu = g * sig;
    v8f dsilu = sig * (1.0f + g * (1.0f - sig));
    *dg = (d * u) * dsilu;
    *du = d * silu;
    if (round) { *dg = rnd8(*dg); *du = rnd8(*du); }
}

INLINE void swiglu_bwd8_body(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                             int round) {
    size_t i = 0;
    v8f dg, du;
    for (; i + 8 <= n; i += 8) {
        swiglu_bwd8_step(ld8(gate + i), ld8(up + i), ld8(dout + i), round, &dg, &du);
        st8(dgate + i, dg);
        st8(dup + i, du);
    }
    if (i < n) {
        const size_t nv = n - i;
        swiglu_bwd8_step(ld8_part(gate + i, nv, 0.0f), ld8_part(up + i, nv, 0.0f), ld8_part(dout + i, nv, 0.0f), round,
                         &dg, &du);
        st8_part(dgate + i, dg, nv);
        st8_part(dup + i, du, nv);
    }
}

TT_CLONES
static void swiglu_bwd_chunk(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                             int round) {
    if (round) swiglu_bwd8_body(dgate, dup, dout, gate, up, n, 1);
    else swiglu_bwd8_body(dgate, dup, dout, gate, up, n, 0);
}

// ---------------------------------------------------------------- 16-lane twins (AVX-512F)
// The chunks above on 16 floats, the same operations per element; a tail shorter than 16
// goes to the 8-lane chunk. Called only when tt_wide().
// Each body is inlined twice, with round a constant 0 or 1, so that no branch is left inside
// the loop. With the branch there, the loop's speed followed where the linker happened to put
// it: bench train --model small's SwiGLU took 7.1–8.4 ms of the step in one build and
// 11.2–12.5 in others whose only differences were in unrelated files (the same instructions,
// the loop starting 16 bytes further along a cache line). Without it, 7.4–8.2 ms at each of the
// four 16-byte placements tried.
TT_WIDE INLINE v16f swiglu_fwd16_step(v16f g, v16f u, int round) {
    v16f o = (g / (1.0f + exp16(-g))) * u;
    return round ? rnd16(o) : o;
}

TT_WIDE INLINE void swiglu_bwd16_step(v16f g, v16f u, v16f d, int round, v16f *dg, v16f *du) {
    v16f sig = 1.0f / (1.0f + exp16(-g));
    v16f silu = g * sig;
    v16f dsilu = sig * (1.0f + g * (1.0f - sig));
    *dg = (d * u) * dsilu;
    *du = d * silu;
    if (round) { *dg = rnd16(*dg); *du = rnd16(*du); }
}

TT_WIDE INLINE void swiglu_fwd16_body(float *out, const float *gate, const float *up, size_t n, int round) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) st16(out + i, swiglu_fwd16_step(ld16(gate + i), ld16(up + i), round));
    if (i < n) swiglu_fwd_chunk(out + i, gate + i, up + i, n - i, round);
}

TT_WIDE static void swiglu_fwd16(float *out, const float *gate, const float *up, size_t n, int round) {
    if (round) swiglu_fwd16_body(out, gate, up, n, 1);
    else swiglu_fwd16_body(out, gate, up, n, 0);
}

TT_WIDE INLINE void swiglu_bwd16_body(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                      size_t n, int round) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f dg, du;
        swiglu_bwd16_step(ld16(gate + i), ld16(up + i), ld16(dout + i), round, &dg, &du);
        st16(dgate + i, dg);
        st16(dup + i, du);
    }
    if (i < n) swiglu_bwd_chunk(dgate + i, dup + i, dout + i, gate + i, up + i, n - i, round);
}

TT_WIDE static void swiglu_bwd16(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                 size_t n, int round) {
    if (round) swiglu_bwd16_body(dgate, dup, dout, gate, up, n, 1);
    else swiglu_bwd16_body(dgate, dup, dout, gate, up, n, 0);
}

// ---------------------------------------------------------------- entry points
void swiglu_forward(float *out, const float *gate, const float *up, size_t n, int round) {
    size_t nc = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    const int wide = tt_wide();
    #pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * SWIGLU_CHUNK, len = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        if (wide) swiglu_fwd16(out + i, gate + i, up + i, len, round);
        else swiglu_fwd_chunk(out + i, gate + i, up + i, len, round);
    }
}

void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                     int round) {
    size_t nc = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    const int wide = tt_wide();
    #pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * SWIGLU_CHUNK, len = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        if (wide) swiglu_bwd16(dgate + i, dup + i, dout + i, gate + i, up + i, len, round);
        else swiglu_bwd_chunk(dgate + i, dup + i, dout + i, gate + i, up + i, len, round);
    }
}

// ---------------------------------------------------------------- BF16 operands
// With AVX-512F, 16 BF16 halves are widened in a register and the results narrowed from one
// (their low halves are zero: rounded); the steps are the FP32 bodies'. Else (and for a tail
// under 16) a slice is widened into FP32 on the stack for the FP32 chunk: staged that way on
// the wide path too, the forward took twice the FP32 op's time.
#define SLICE 512 // elements widened at a time on the narrow path (6 KiB of FP32 on the stack)

// n elements (any n) through the FP32 chunks, a slice at a time.
TT_CLONES
static void fwd16_staged(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n) {
    float g[SLICE], u[SLICE], o[SLICE];
    for (size_t i = 0; i < n; i += SLICE) {
        const size_t len = n - i < SLICE ? n - i : SLICE;
        tt_widen_n(g, gate + i, len);
        tt_widen_n(u, up + i, len);
        swiglu_fwd_chunk(o, g, u, len, 1);
        tt_narrow_n(out + i, o, len);
    }
}
TT_CLONES
static void bwd16_staged(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                         const uint16_t *up, size_t n) {
    float g[SLICE], u[SLICE], d[SLICE];
    for (size_t i = 0; i < n; i += SLICE) {
        const size_t len = n - i < SLICE ? n - i : SLICE;
        tt_widen_n(g, gate + i, len);
        tt_widen_n(u, up + i, len);
        tt_widen_n(d, dout + i, len);
        swiglu_bwd_chunk(g, u, d, g, u, len, 1); // in place: each element read before it is written
        tt_narrow_n(dgate + i, g, len);
        tt_narrow_n(dup + i, u, len);
    }
}

TT_WIDE static void fwd16_wide(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) st16h(out + i, swiglu_fwd16_step(ld16h(gate + i), ld16h(up + i), 1));
    if (i < n) fwd16_staged(out + i, gate + i, up + i, n - i);
}
TT_WIDE static void bwd16_wide(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                               const uint16_t *up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f dg, du;
        swiglu_bwd16_step(ld16h(gate + i), ld16h(up + i), ld16h(dout + i), 1, &dg, &du);
        st16h(dgate + i, dg);
        st16h(dup + i, du);
    }
    if (i < n) bwd16_staged(dgate + i, dup + i, dout + i, gate + i, up + i, n - i);
}

void swiglu_forward16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n) {
    size_t nc = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    const int wide = tt_wide();
    #pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * SWIGLU_CHUNK, len = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        if (wide) fwd16_wide(out + i, gate + i, up + i, len);
        else fwd16_staged(out + i, gate + i, up + i, len);
    }
}

void swiglu_backward16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate, const uint16_t *up,
                       size_t n) {
    size_t nc = (n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK;
    const int wide = tt_wide();
    #pragma omp parallel for schedule(static) if (nc > 1)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * SWIGLU_CHUNK, len = n - i < SWIGLU_CHUNK ? n - i : SWIGLU_CHUNK;
        if (wide) bwd16_wide(dgate + i, dup + i, dout + i, gate + i, up + i, len);
        else bwd16_staged(dgate + i, dup + i, dout + i, gate + i, up + i, len);
    }
}
