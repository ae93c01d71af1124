// embedding.c — token embedding lookup and its gradient scatter (kernels.h "embedding").
// Backward may see one token many times, so it is parallel over columns: each thread owns
// some columns of every dwte row and adds the N rows in order. No two threads write one
// element and the sum order is fixed: the same bits for any thread count. Token ids are
// trusted to lie in [0, V): the data loader checks them.
// The row add is compiled for AVX2 and for the x86-64 baseline (picked at load time); one
// IEEE add per element either way.
// A vocabulary chunk (rows [v0, v0 + nv)) touches only the tokens inside it, in the same order.
// Called by the CPU backend for the input embedding (and nothing else: the tied head is a
// matmul).
#include "kernels.h"
#include <omp.h>
#include <string.h>
#include "simd.h"

#define EMB_ALIGN 16 // column ranges start on a cache line (16 floats)

void embedding_forward(float *out, const int *tokens, const float *wte, int N, int C, int v0, int nv) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int t = tokens[n] - v0;
        if (t >= 0 && t < nv) memcpy(out + (size_t)n * C, wte + (size_t)t * C, (size_t)C * sizeof(float));
    }
}

void embedding_forward_w16(float *out, const int *tokens, const uint16_t *wte, int N, int C, int v0, int nv) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int t = tokens[n] - v0;
        if (t >= 0 && t < nv) bf16_to_f32_n(out + (size_t)n * C, wte + (size_t)t * C, (size_t)C);
    }
}

TT_CLONES
static void add_row(float *restrict dst, const float *restrict src, int n) {
    #pragma omp simd
    for (int c = 0; c < n; c++) dst[c] += src[c];
}

void embedding_backward(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int nv) {
    // Each thread owns one contiguous range of columns (whole cache lines) and walks the N
    // rows once, in order. Which thread owns a column never changes what is added to it or
    // in which order, so the bits do not depend on the thread count.
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int per = (C + nt - 1) / nt;
        per = (per + EMB_ALIGN - 1) / EMB_ALIGN * EMB_ALIGN;
        int c0 = id * per < C ? id * per : C, c1 = c0 + per < C ? c0 + per : C;
        for (int n = 0; n < N && c0 < c1; n++) {
            const int t = tokens[n] - v0;
            if (t >= 0 && t < nv) add_row(dwte + (size_t)t * C + c0, dout + (size_t)n * C + c0, c1 - c0);
        }
    }
}
