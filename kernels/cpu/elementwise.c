// elementwise.c — add_inplace (and add_inplace16, y as BF16 halves) and sumsq (kernels.h
// "elementwise, reductions"), and the vector-path limit the kernels read (kernels.h "vector paths").
// sumsq is the global-norm reduction behind gradient clipping, so its bits must not depend
// on the thread count: the input is cut into fixed chunks of SUMSQ_CHUNK elements, each
// chunk is summed in double in a fixed order (below), and the chunk sums are added in chunk
// order by one thread. Threads only decide who computes a chunk, never the order of adds.
// Vector code: both ops run in chunk functions compiled for AVX2 and for the x86-64
// baseline (picked at load time), and sumsq's also for AVX-512F (tt_wide). sumsq holds a
// chunk's 8 lanes as two 4-double vectors (one 8-double vector on AVX-512F; GCC vector
// extensions) in registers and sums SUMSQ_ILV chunks side by side: each lane is
// one chain of dependent adds, so one chunk alone waits on the add latency and several keep
// the adders busy. Each lane still adds its squares in index order: the bits are those of
// the plain loop, for either clone and any thread count.
// sumsq_blocks gives the chunk sums themselves (gradnorm.h adds them exactly).
// Called by the optimizer driver (grad norm) and the backend (residual adds).
#include "kernels.h"
#include "simd.h"

int tt_simd_limit = 3; // simd.h: the CPU's widest path unless a test lowers it

void kernels_limit_simd(int level) { tt_simd_limit = level; }

#define SUMSQ_CHUNK 4096
// Chunks whose partial sums are held at once (on the stack: no op allocates). 256 chunks =
// 1 Mi elements per round, enough work to split over threads.
#define SUMSQ_ROUND 256
#define SUMSQ_ILV 4 // chunks summed side by side (4 chunks · 2 vectors = 8 add chains)
#define ADD_PAR_MIN 32768
#define ADD_CHUNK 8192 // elements per parallel task of add_inplace

typedef double v4d __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));
typedef float v4f __attribute__((vector_size(16)));

// x[0, n) += y[0, n), then rounded to BF16 values when round. No restrict: the vectorizer
// checks for overlap at run time.
TT_CLONES
static void add_chunk(float *x, const float *y, size_t n, int round) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
    if (round) tt_round_n(x, n);
}

// add_chunk's with y as BF16 halves, widened a piece at a time (the MLP's residual add from
// x2's halves: kernels.h add_inplace16).
TT_CLONES
static void add_chunk16(float *restrict x, const uint16_t *restrict y, size_t n, int round) {
    float t[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        const size_t k = n - i0 < 256 ? n - i0 : 256;
        tt_widen_n(t, y + i0, k);
        float *restrict d = x + i0;
        for (size_t i = 0; i < k; i++) d[i] += t[i];
        if (round) tt_round_n(d, k);
    }
}

// x += y, y FP32 or (y16) BF16 halves, in chunks of ADD_CHUNK across the threads.
static void add_any(float *x, const void *y, int y16, size_t n, int round) {
    size_t nc = (n + ADD_CHUNK - 1) / ADD_CHUNK;
    #pragma omp parallel for schedule(static) if (n >= ADD_PAR_MIN)
    for (size_t c = 0; c < nc; c++) {
        size_t i = c * ADD_CHUNK, len = n - i < ADD_CHUNK ? n - i : ADD_CHUNK;
        if (y16) add_chunk16(x + i, (const uint16_t *)y + i, len, round);
        else add_chunk(x + i, (const float *)y + i, len, round);
    }
}

void add_inplace(float *x, const float *y, size_t n, int round) { add_any(x, y, 0, n, round); }
void add_inplace16(float *x, const uint16_t *y, size_t n, int round) { add_any(x, y, 1, n, round); }

// A chunk's 8 lane sums l (its whole groups of 8) finished: the tail x[n8, n) (shorter than 8)
// added into lanes 0.., then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
INLINE double lanes_total(double l[8], const float *x, size_t n8, size_t n) {
    for (size_t i = n8; i < n; i++) {
        double a = x[i];
        l[i - n8] += a * a;
    }
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// Σ x[i]² of k chunks of n elements each, chunk c at x + c·SUMSQ_CHUNK, into out[c], in
// double. Fixed order per chunk: 8 interleaved lanes (lane j takes the elements i ≡ j mod 8
// of the chunk, in index order; a tail shorter than 8 goes to lanes 0..), then
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). Lanes 0..3 live in lo[c], 4..7 in hi[c]; the
// float → double conversion is exact and each lane does a·a then one add, as a scalar would.
INLINE void chunks_sumsq(double *out, const float *x, size_t n, const int k) {
    v4d lo[SUMSQ_ILV], hi[SUMSQ_ILV];
    for (int c = 0; c < k; c++) lo[c] = hi[c] = (v4d){0, 0, 0, 0};
    size_t n8 = n & ~(size_t)7;
    for (size_t i = 0; i < n8; i += 8)
        for (int c = 0; c < k; c++) {
            v4f a, b;
            memcpy(&a, x + (size_t)c * SUMSQ_CHUNK + i, sizeof a);
            memcpy(&b, x + (size_t)c * SUMSQ_CHUNK + i + 4, sizeof b);
            v4d da = __builtin_convertvector(a, v4d), db = __builtin_convertvector(b, v4d);
            lo[c] += da * da;
            hi[c] += db * db;
        }
    for (int c = 0; c < k; c++) {
        double l[8];
        memcpy(l, &lo[c], sizeof lo[c]);
        memcpy(l + 4, &hi[c], sizeof hi[c]);
        out[c] = lanes_total(l, x + (size_t)c * SUMSQ_CHUNK, n8, n);
    }
}

// The same on AVX-512F: a chunk's 8 lanes in one 8-double vector, the same adds in the same
// order (the same bits), half the instructions (the gradient norm's pass over every gradient:
// 1.03 → 0.84 ms for small's 9.6M with the gradients in cache, 1.44 → 0.89 from memory).
INLINE void chunks_sumsq8(double *out, const float *x, size_t n, const int k) {
    v8d acc[SUMSQ_ILV];
    for (int c = 0; c < k; c++) acc[c] = (v8d){0, 0, 0, 0, 0, 0, 0, 0};
    size_t n8 = n & ~(size_t)7;
    for (size_t i = 0; i < n8; i += 8)
        for (int c = 0; c < k; c++) {
            v8f a;
            memcpy(&a, x + (size_t)c * SUMSQ_CHUNK + i, sizeof a);
            v8d d = __builtin_convertvector(a, v8d);
            acc[c] += d * d;
        }
    for (int c = 0; c < k; c++) {
        double l[8];
        memcpy(l, &acc[c], sizeof l);
        out[c] = lanes_total(l, x + (size_t)c * SUMSQ_CHUNK, n8, n);
    }
}

// Chunks [c0, c1) of x[0, n) (at most SUMSQ_ILV of them) into part[0 ..]: side by side when
// they are SUMSQ_ILV whole chunks, else one at a time (the round's ragged end).
#define GROUP_SUMSQ_BODY(chunks)                                                                                       \
    if (c1 - c0 == SUMSQ_ILV && c1 * SUMSQ_CHUNK <= n) {                                                               \
        chunks(part, x + c0 * SUMSQ_CHUNK, SUMSQ_CHUNK, SUMSQ_ILV);                                                    \
        return;                                                                                                        \
    }                                                                                                                  \
    for (size_t c = c0; c < c1; c++) {                                                                                 \
        size_t start = c * SUMSQ_CHUNK, len = n - start < SUMSQ_CHUNK ? n - start : SUMSQ_CHUNK;                       \
        chunks(part + (c - c0), x + start, len, 1);                                                                    \
    }
TT_CLONES
static void group_sumsq_narrow(double *part, const float *x, size_t n, size_t c0, size_t c1) {
    GROUP_SUMSQ_BODY(chunks_sumsq)
}
TT_WIDE static void group_sumsq_wide(double *part, const float *x, size_t n, size_t c0, size_t c1) {
    GROUP_SUMSQ_BODY(chunks_sumsq8)
}
static void group_sumsq(double *part, const float *x, size_t n, size_t c0, size_t c1) {
    if (tt_wide()) group_sumsq_wide(part, x, n, c0, c1);
    else group_sumsq_narrow(part, x, n, c0, c1);
}

void sumsq_blocks(double *out, const float *x, size_t n) {
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK, ng = (nchunks + SUMSQ_ILV - 1) / SUMSQ_ILV;
    #pragma omp parallel for schedule(static) if (ng > 1)
    for (size_t g = 0; g < ng; g++) {
        size_t a = g * SUMSQ_ILV, b = a + SUMSQ_ILV < nchunks ? a + SUMSQ_ILV : nchunks;
        group_sumsq(out + a, x, n, a, b);
    }
}

double sumsq(const float *x, size_t n) {
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double total = 0.0;
    double part[SUMSQ_ROUND];
    for (size_t c0 = 0; c0 < nchunks; c0 += SUMSQ_ROUND) {
        size_t nc = nchunks - c0 < SUMSQ_ROUND ? nchunks - c0 : SUMSQ_ROUND;
        size_t ng = (nc + SUMSQ_ILV - 1) / SUMSQ_ILV;
        #pragma omp parallel for schedule(static) if (ng > 1)
        for (size_t g = 0; g < ng; g++) {
            size_t a = c0 + g * SUMSQ_ILV, b = a + SUMSQ_ILV < c0 + nc ? a + SUMSQ_ILV : c0 + nc;
            group_sumsq(part + g * SUMSQ_ILV, x, n, a, b);
        }
        for (size_t c = 0; c < nc; c++) total += part[c]; // chunk order, one thread
    }
    return total;
}
