// gradnorm.c — see gradnorm.h.
#include "gradnorm.h"
#include "kernels.h" // uses: sumsq_blocks (a block's sum: sumsq's chunk, its order and threads)
#include <math.h>
#include <string.h>

void gradnorm_zero(gradnorm_t *a) { memset(a, 0, sizeof *a); }

// a += x (x ≥ 0), truncated to the accumulator's grid.
static void add_double(gradnorm_t *a, double x) {
    if (!(x >= 0) || isinf(x)) { // NaN or infinite
        a->inf = 1;
        return;
    }
    if (x == 0) return;
    int e;
    double f = frexp(x, &e);                        // x = f·2^e, f in [0.5, 1)
    uint64_t mant = (uint64_t)ldexp(f, 53);          // x = mant·2^(e−53), exactly
    long bit = (long)e - 53 + GRADNORM_FRAC;         // the grid position of mant's lowest bit
    if (bit < 0) {
        if (bit <= -53) return;                      // below the grid
        mant >>= -bit;
        bit = 0;
    }
    if (bit + 53 > 64L * GRADNORM_LIMBS) {
        a->inf = 1;
        return;
    }
    int li = (int)(bit / 64), sh = (int)(bit % 64);
    uint64_t lo = mant << sh, hi = sh ? mant >> (64 - sh) : 0;
    uint64_t old = a->limb[li];
    a->limb[li] += lo;
    uint64_t carry = a->limb[li] < old;
    for (int i = li + 1; i < GRADNORM_LIMBS && (hi || carry); i++) {
        old = a->limb[i];
        a->limb[i] += hi + carry;
        carry = a->limb[i] < old || (carry && hi == UINT64_MAX);
        hi = 0;
    }
    if (carry) a->inf = 1;
}

void gradnorm_add(gradnorm_t *a, const gradnorm_t *b) {
    uint64_t carry = 0;
    for (int i = 0; i < GRADNORM_LIMBS; i++) {
        uint64_t s = a->limb[i] + b->limb[i];
        uint64_t c1 = s < a->limb[i];
        uint64_t t = s + carry;
        uint64_t c2 = t < s;
        a->limb[i] = t;
        carry = c1 | c2;
    }
    a->inf |= b->inf | carry;
}

void gradnorm_add_squares(gradnorm_t *a, const float *x, size_t n) { gradnorm_add_squares_by(a, x, n, sumsq_blocks); }

void gradnorm_add_squares_by(gradnorm_t *a, const float *x, size_t n, gradnorm_blocks_fn blocks) {
    enum { ROUND = 256 }; // blocks per call of sumsq_blocks (1 Mi elements: enough to share out)
    double s[ROUND];
    for (size_t at = 0; at < n; at += (size_t)ROUND * GRADNORM_BLOCK) {
        size_t k = n - at < (size_t)ROUND * GRADNORM_BLOCK ? n - at : (size_t)ROUND * GRADNORM_BLOCK;
        blocks(s, x + at, k);
        gradnorm_add_block_sums(a, s, (k + GRADNORM_BLOCK - 1) / GRADNORM_BLOCK);
    }
}

void gradnorm_add_block_sums(gradnorm_t *a, const double *s, size_t nb) {
    for (size_t b = 0; b < nb; b++) add_double(a, s[b]);
}

double gradnorm_value(const gradnorm_t *a) {
    if (a->inf) return INFINITY;
    int top = GRADNORM_LIMBS - 1;
    while (top > 0 && a->limb[top] == 0) top--;
    // the top two limbs carry every bit a double can hold (truncated below them)
    double v = ldexp((double)a->limb[top], 64 * top - GRADNORM_FRAC);
    if (top > 0) v += ldexp((double)a->limb[top - 1], 64 * (top - 1) - GRADNORM_FRAC);
    return v;
}
