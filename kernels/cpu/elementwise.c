// elementwise.c — add_inplace and sumsq (kernels.h "elementwise, reductions").
// sumsq is the global-norm reduction behind gradient clipping, so its bits must not depend
// on the thread count: the input is cut into fixed chunks of SUMSQ_CHUNK elements, each
// chunk is summed in double in a fixed order (below), and the chunk sums are added in chunk
// order by one thread. Threads only decide who computes a chunk, never the order of adds.
// Called by the optimizer driver (grad norm) and the backend (residual adds).
#include "kernels.h"

#define SUMSQ_CHUNK 4096
// Chunks whose partial sums are held at once (on the stack: no op allocates). 256 chunks =
// 1 Mi elements per round, enough work to split over threads.
#define SUMSQ_ROUND 256
#define ADD_PAR_MIN 32768

void add_inplace(float *x, const float *y, size_t n) {
    #pragma omp parallel for schedule(static) if (n >= ADD_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

// Σ x[i]² of one chunk in double. Fixed order: 8 interleaved lanes (lane j takes the
// elements i ≡ j mod 8 of the chunk, in index order; a tail shorter than 8 goes to lanes
// 0..), then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). The lanes break the add latency chain.
static double chunk_sumsq(const float *x, size_t n) {
    double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t n8 = n & ~(size_t)7;
    for (size_t i = 0; i < n8; i += 8)
        for (int j = 0; j < 8; j++) {
            double a = x[i + j];
            l[j] += a * a;
        }
    for (size_t i = n8; i < n; i++) {
        double a = x[i];
        l[i - n8] += a * a;
    }
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

double sumsq(const float *x, size_t n) {
    size_t nchunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double total = 0.0;
    double part[SUMSQ_ROUND];
    for (size_t c0 = 0; c0 < nchunks; c0 += SUMSQ_ROUND) {
        size_t nc = nchunks - c0 < SUMSQ_ROUND ? nchunks - c0 : SUMSQ_ROUND;
        #pragma omp parallel for schedule(static) if (nc > 1)
        for (size_t c = 0; c < nc; c++) {
            size_t start = (c0 + c) * SUMSQ_CHUNK;
            size_t len = n - start < SUMSQ_CHUNK ? n - start : SUMSQ_CHUNK;
            part[c] = chunk_sumsq(x + start, len);
        }
        for (size_t c = 0; c < nc; c++) total += part[c]; // chunk order, one thread
    }
    return total;
}
