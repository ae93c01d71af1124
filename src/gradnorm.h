// gradnorm.h — Σ g² of the gradients, exactly the same however they are split: over shards,
// over ranks (each holding a piece of every shard), over threads.
//
// The sum is taken over blocks of GRADNORM_BLOCK elements at fixed places (a shard's
// elements [k·B, (k+1)·B)): each block's squares are summed in double in one fixed order
// (kernels.h sumsq_blocks: sumsq's chunks of 4096, which a GPU takes the same way), and
// the block sums are added into a fixed-point accumulator of GRADNORM_LIMBS 64-bit limbs
// (bit i weighs 2^(i − GRADNORM_FRAC)): integer adds, so the total does not depend on the
// order blocks arrive in, nor on which rank or thread took them. Block sums below 2^−GRADNORM_FRAC
// are dropped and a total from 2^(64·LIMBS − FRAC) up is infinite (gradients that large are
// no gradients). Pieces of shards (comm_piece) start on block boundaries.
// What it does not do: know where gradients live (tier.c reads them, or on a GPU their block
// sums, to the host for it).
// Who calls it: tier.c (each shard's piece), trainer.c (the total over shards and ranks).
#pragma once
#include <stddef.h>
#include <stdint.h>

#define GRADNORM_BLOCK 4096
#define GRADNORM_LIMBS 10
#define GRADNORM_FRAC 320

typedef struct {
    uint64_t limb[GRADNORM_LIMBS]; // little-endian
    uint64_t inf;                  // nonzero: a block sum was infinite, NaN or too large
} gradnorm_t;

void gradnorm_zero(gradnorm_t *a);
// a += Σ x² over x[0..n), x starting on a block boundary (its blocks: [k·B, (k+1)·B) ∩ [0, n)).
void gradnorm_add_squares(gradnorm_t *a, const float *x, size_t n);
// The same with the block sums taken by blocks (sumsq_blocks' contract and bits: a backend's
// op table entry for host memory, so that a run's timing of its ops sees the pass).
typedef void (*gradnorm_blocks_fn)(double *out, const float *x, size_t n);
void gradnorm_add_squares_by(gradnorm_t *a, const float *x, size_t n, gradnorm_blocks_fn blocks);
// a += the block sums s[0..nb) (sumsq_blocks' chunks are gradnorm's blocks, summed in its order).
void gradnorm_add_block_sums(gradnorm_t *a, const double *s, size_t nb);
// a += b (exact).
void gradnorm_add(gradnorm_t *a, const gradnorm_t *b);
// The total as a double (the same integer gives the same double), or INFINITY.
double gradnorm_value(const gradnorm_t *a);
