// gemm.h — private to kernels/cpu: the FP32 matrix product the linear layers run on
// (matmul.c), with its bits fixed by the operands alone.
//
// Every output element is one chain of fused multiply-adds over the inner dimension in
// order, acc = fma(op(A)[i][k], op(B)[k][j], acc) for k = 0, 1, ..., K − 1, starting from 0
// ("=") or from C ("+="), and is rounded to a BF16 value at the end when asked. The chain
// never depends on the blocking, the thread count or the vector width (partial sums pass
// through memory as FP32, which is exact), so the AVX-512F and the AVX2 paths give the same
// bits, and so does a plain fmaf loop (tests/test_kernels.c holds them to that with memcmp).
// One product runs at a time in a process (a mutex queues a second caller): its packed
// operands live in static buffers (2.75 MiB, and 4 MiB more for the pieces of a
// deep BF16 output), so no call allocates.
#pragma once
#include <stdint.h>

// Which path gemm_fma takes on this CPU (after kernels_limit_simd): 2 AVX-512F, 1 AVX2 with
// FMA, 0 none (the caller uses OpenBLAS instead).
int gemm_fma_path(void);

// C (M, N) = op(A) (M, K) · op(B) (K, N) (accumulate 0) or C += (accumulate 1), row-major;
// op(A) is A (lda its row stride) or, transa, Aᵀ of A (K, M); op(B) likewise. round: the
// result rounded to BF16 values. M, N, K ≥ 1; needs gemm_fma_path() ≥ 1.
void gemm_fma(int transa, int transb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
              int accumulate, float *C, int ldc, int round);

// Up to 4 products sharing B, C_i (M[i], N) (+)= op(A_i) · op(B), with B packed once for all:
// each C_i's bits are those of gemm_fma on its own operands. Returns 0, or -1 (n out of 1..4:
// nothing done). M[i], N, K ≥ 1; needs gemm_fma_path() ≥ 1.
int gemm_fma_shared_b(int n, int transa, const int *M, const float *const *A, const int *lda, float *const *C,
                      const int *ldc, int transb, int N, int K, const float *B, int ldb, int accumulate, int round);

// The same product with B given as BF16 values (B's element x as its upper 16 bits): the
// bits of gemm_fma on B widened to FP32, which is never stored (the packing widens it).
void gemm_fma_b16(int transa, int transb, int M, int N, int K, const float *A, int lda, const uint16_t *B, int ldb,
                  int accumulate, float *C, int ldc, int round);

// The BF16 activations' products on the FMA kernels (kernels.h "BF16 activations", on CPUs
// without AMX): a16, A given as BF16 halves (as b16 B; never checked); c16, C written as BF16
// halves, which needs accumulate 0 and round 1 (no partial sum may pass through C: over more
// than one block of the inner dimension, pieces of the product go through an FP32 buffer of
// 4 MiB first). Each output's bits are those of gemm_fma's FMA chain on the same values (a
// BF16 value and its FP32 word are the same number); never AMX tiles, whose bits differ.
// Returns 0 when done, 1 when declined (c16's terms not met, or no FMA: nothing written). M, N,
// K ≥ 1, as gemm_fma's.
int gemm_fma_x(int transa, int a16, int transb, int b16, int M, int N, int K, const void *A, int lda, const void *B,
               int ldb, int accumulate, void *C, int c16, int ldc, int round);
// gemm_fma_shared_b's products with A (a16) and B (b16) as BF16 halves, on the FMA kernels:
// 0, or -1 (n out of 1..4, or no FMA: nothing done).
int gemm_fma_shared_b_x(int n, int transa, int a16, const int *M, const void *const *A, const int *lda,
                        float *const *C, const int *ldc, int transb, int b16, int N, int K, const void *B, int ldb,
                        int accumulate, int round);

// The same products on AMX tiles (gemm_amx.c), where the CPU has AMX-BF16 (and
// kernels_limit_simd has not lowered the path below 3) and both operands hold BF16 values:
// each element is C_in followed by one tile product per 32 inner indices, in order, so its
// bits follow the operands and the shape alone, and differ from the FMA chain's. B is FP32 or
// (b16) BF16 halves. Returns 0 when done, 1 when declined (no AMX, or an operand word that is
// not a BF16 value: nothing written; run gemm_fma's path instead).
int gemm_amx_path(void);
int gemm_amx(int transa, int transb, int M, int N, int K, const float *A, int lda, const void *B, int b16, int ldb,
             int accumulate, float *C, int ldc, int round);
// gemm_fma_shared_b's products (1 ≤ n ≤ 8) on AMX tiles, B (FP32) packed once where every
// product is one chunk: each C_i's bits are gemm_amx's on its own operands. Returns the mask of
// the products declined (bit i: C_i untouched, for the FMA kernels), all n of them without AMX.
unsigned gemm_amx_shared_b(int n, int transa, const int *M, const float *const *A, const int *lda, float *const *C,
                           const int *ldc, int transb, int N, int K, const float *B, int ldb, int accumulate, int round);
// Products sharing A (1 ≤ n), C_i (M, N[i]) (+)= op(A) · op(B_i) with B_i BF16 halves, on AMX
// tiles with A packed once, where A is one chunk (M ≤ 1024, K ≤ 1024): each C_i's bits are
// gemm_amx's on its own operands. Returns 0 when done, 1 when declined (nothing written).
int gemm_amx_shared_a(int n, int transa, int M, int K, const float *A, int lda, int transb, const int *N,
                      const uint16_t *const *B, const int *ldb, float *const *C, const int *ldc, int accumulate,
                      int round);
// The three above with BF16 activations (bf16 mode's, kernels.h "BF16 activations"): a16,
// A given as BF16 halves (as b16 B; never checked); c16, C written as BF16 halves, which
// needs accumulate 0, round 1 and K ≤ GEMM_AMX_C16_K_MAX (one chunk of the inner dimension:
// no partial sums pass through C). The bits of each output are those of the FP32 call on the same
// values (a BF16 value and its FP32 word are the same number). Declined as the FP32 calls
// are, and where c16's terms are not met.
#define GEMM_AMX_C16_K_MAX 1024
int gemm_amx_x(int transa, int a16, int transb, int b16, int M, int N, int K, const void *A, int lda, const void *B,
               int ldb, int accumulate, void *C, int c16, int ldc, int round);
unsigned gemm_amx_shared_b_x(int n, int transa, int a16, const int *M, const void *const *A, const int *lda,
                             float *const *C, const int *ldc, int transb, int b16, int N, int K, const void *B, int ldb,
                             int accumulate, int round);
int gemm_amx_shared_a_x(int n, int transa, int a16, int M, int K, const void *A, int lda, int transb, const int *N,
                        const uint16_t *const *B, const int *ldb, void *const *C, int c16, const int *ldc,
                        int accumulate, int round);
// C (M, N) (+)= Σ_s A_s (M, K[s]) · B_s over n parts, B_s the next K[s] rows of B (BF16
// halves, (Σ K[s], N), row stride ldb) and A_s FP32, or BF16 halves (a16) (lda[s]): the n
// products gemm_amx_x would run one after another (the first with accumulate, each later one adding, round at the
// last), in one, where every part but the last is whole tile steps (K[s] a multiple of 32:
// then the same tile products in the same order, so the same bits), M ≤ 1024, N ≤ 1024 and
// Σ K[s] ≤ 1024. Returns 0 when done, 1 when declined (nothing written).
int gemm_amx_ksegs(int n, int M, int N, const void *const *A, int a16, const int *lda, const int *K, const uint16_t *B,
                   int ldb, int accumulate, float *C, int ldc, int round);
// The same products on gemm_fma_b16's path: gemm_amx_shared_a, else each on its own.
void gemm_fma_b16_shared_a(int n, int transa, int M, int K, const float *A, int lda, int transb, const int *N,
                           const uint16_t *const *B, const int *ldb, float *const *C, const int *ldc, int accumulate,
                           int round);
