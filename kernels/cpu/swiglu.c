// swiglu.c — the SwiGLU gate of the MLP (kernels.h "SwiGLU"), elementwise in FP32.
// out = silu(gate)·up with silu(x) = x/(1+e^−x). For very negative x, e^−x overflows to
// +Inf and silu gives −0, its limit; no NaN appears for any finite input.
// Vector code: GCC vector extensions (8 floats) in fixed chunks; the chunk functions are
// compiled for AVX2 and for the x86-64 baseline, picked at load time, and have 16-float twins
// compiled for AVX-512F, called instead where the CPU has it; elementwise IEEE ops only, so
// the bits depend on neither the path nor the thread count. exp is exp8 (exp16) from simd.h,
// the same fixed sequence attention.c uses.
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
TT_WIDE INLINE void swiglu_fwd16_body(float *out, const float *gate, const float *up, size_t n, int round) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f g = ld16(gate + i), u = ld16(up + i);
        v16f o = (g / (1.0f + exp16(-g))) * u;
        if (round) o = rnd16(o);
        st16(out + i, o);
    }
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
        v16f g = ld16(gate + i), u = ld16(up + i), d = ld16(dout + i);
        v16f sig = 1.0f / (1.0f + exp16(-g));
        v16f silu = g * sig;
        v16f dsilu = sig * (1.0f + g * (1.0f - sig));
        v16f dg = (d * u) * dsilu, du = d * silu;
        if (round) { dg = rnd16(dg); du = rnd16(du); }
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
