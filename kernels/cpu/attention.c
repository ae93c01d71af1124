// attention.c — causal grouped-query attention, FP32 (kernels.h "attention").
// Tiled like FlashAttention, on the CPU. A task owns a block of ATT_BQ query rows of one head
// (forward, dq) or a block of ATT_BK key rows of one kv head (dk, dv), walks the other side
// in fixed blocks, and forms every product with one small fixed-order GEMM micro-kernel
// (mm_tile) on tiles held on the stack. No (T, T) buffer, no allocation (but BF16's, below).
//   Forward, task (b, h, query block): Sᵀ = k·qᵀ for a (BK, BQ) tile, online softmax per
//   query (running max m and sum l; out rescaled when m grows), out += P·v. lse = m + log l
//   is kept so that backward recomputes P = exp(S·scale − lse) exactly.
//   Backward, with D_t = dout_t·out_t and dS = P ⊙ (dout·vᵀ − D):
//     dq_t = scale · Σ_s dS_ts k_s                           task (b, h, query block)
//     dk_s = scale · Σ_{t≥s, h∈group} dS_ts q_t,  dv_s = Σ P_ts dout_t
//                                                            task (b, kv head, key block)
// With at least ATT_FUSED_TASKS kv heads (B·NKV) per thread, one task per (b, kv head) does
// both sides in one pass instead (bwd_task): each tile's P and dS formed once, not twice, and
// the same products in the same order, so the same bits.
// The block a task owns is the one transposed, once per task, so nothing is transposed
// inside its loop over the other side: the forward and dq tasks hold qᵀ (and doutᵀ) and
// keep tiles with keys as rows and queries as columns (a query's softmax statistics are
// lane-wise vector ops); the dk/dv task holds kᵀ and vᵀ and keeps tiles with queries as rows
// (S = q·kᵀ reads q in place).
// Determinism: every output element is written by exactly one task, and what it adds and in
// which order is fixed by the block constants, never by the thread count (mm_tile adds its
// products in k order; tile sums run in row order). D is parked in element 0 of each dq row
// between the split passes (dq is an "=" output written last), so backward needs no scratch;
// the one-pass backward forms each query block's D itself, from the tiles it transposes.
// Vector code: GCC vector extensions. The kernels (mm_tile, the forward's softmax step, the
// backward's P and dS) exist twice: on 8 floats and on 16 floats (compiled for AVX-512F,
// which a task calls instead when the CPU has it). The tasks, and the 8-lane softmax and
// P/dS steps inlined into them, are compiled for AVX2 and for the x86-64 baseline (the
// loader picks by CPU). The tile products are chains of explicit fused multiply-adds: the
// 8-lane product is compiled twice more, for AVX2+FMA and on fmaf for a CPU without FMA
// (mm8, mm8_soft); nothing else fuses (-ffp-contract=off). Per element every path does the
// same IEEE operations in the same order, so all give the same bits (kernels_limit_simd
// lets the tests check it). The CUDA twin's FP32 kernels form the score products as FMA chains in
// the same order; its tensor-core kernels (the default on a GPU) add in the tensor cores' order.
// Head sizes above ATT_HS_MAX (tiles would not fit on the stack) take a plain per-row path
// with the same semantics. On a CPU with AMX-BF16, with BF16 values in q, k, v and dout (bf16
// mode) and head sizes 32 to 128 by 32, the tasks run on AMX tiles instead (attention_amx.c:
// the same steps on the same tiles, its own bits), each one it declines here. With BF16 halves
// for q, k, v, out and their gradients (attention_forward16, attention_backward16, at the end)
// the same tasks run on rows widened into each thread's buffers, the one allocation here
// (grown as needed, held by the op), or on the AMX tiles where the FP32 op's would. What the
// ops hold for a shape (this allocation or AMX's) is attention_workspace_bytes, which the plan
// counts in the RAM a run needs.
// Called by the CPU backend's attention ops.
#include "kernels.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "attention_amx.h"
#include "held.h"
#include "simd.h"

#define ATT_BQ 32      // query rows per tile (one tile row is four 8-float or two 16-float vectors)
#define ATT_BK 64      // key rows per tile
#define ATT_HS_MAX 256 // largest head size of the tiled path (a (HS, BK) tile is 64 KiB)
#define ATT_FUSED_TASKS 4 // the one-pass backward wants this many kv heads (B·NKV) per thread
// A key tile starts at a multiple of BK ≤ the first query of the block (BK a multiple of BQ),
// so every query of a tile sees at least one unmasked key and its running max is finite.
// softmax16 takes a tile row as its two 16-float vectors.
_Static_assert(ATT_BK % ATT_BQ == 0 && ATT_BQ == 32, "tile sizes");
_Static_assert(ATT_BQ == ATT_AMX_BQ && ATT_BK == ATT_AMX_BK, "attention_amx.c's tasks take attention.c's tiles");

// ---------------------------------------------------------------- 8-lane kernels
// The 4 × (2 vectors) register block mm8 and mm16 share: C rows c0..c3, columns [j, j + 2W)
// (+)= rows a0..a3 of A (element k at k·sak) · B; rs: the four rows' rescale, or NULL.
#define TT_MM_BLOCK_DEF(name, ATTR, V, W, ld, st, splat, fma)                                                     \
    ATTR INLINE void name(float *c0, float *c1, float *c2, float *c3, const float *a0, const float *a1, const float *a2, \
                     const float *a3, size_t sak, const float *restrict B, int ldb, int j, int K, int acc,          \
                     const float *rs) {                                                                             \
        V z = splat(0.0f);                                                                                          \
        V r00 = acc ? ld(c0 + j) : z, r01 = acc ? ld(c0 + j + W) : z;                                               \
        V r10 = acc ? ld(c1 + j) : z, r11 = acc ? ld(c1 + j + W) : z;                                               \
        V r20 = acc ? ld(c2 + j) : z, r21 = acc ? ld(c2 + j + W) : z;                                               \
        V r30 = acc ? ld(c3 + j) : z, r31 = acc ? ld(c3 + j + W) : z;                                               \
        if (acc && rs) {                                                                                            \
            r00 *= rs[0]; r01 *= rs[0];                                                                             \
            r10 *= rs[1]; r11 *= rs[1];                                                                             \
            r20 *= rs[2]; r21 *= rs[2];                                                                             \
            r30 *= rs[3]; r31 *= rs[3];                                                                             \
        }                                                                                                           \
        for (int k = 0; k < K; k++) {                                                                               \
            const float *bk = B + (size_t)k * ldb + j;                                                              \
            V b0 = ld(bk), b1 = ld(bk + W);                                                                         \
            size_t ak = (size_t)k * sak;                                                                            \
            V x0 = splat(a0[ak]), x1 = splat(a1[ak]), x2 = splat(a2[ak]), x3 = splat(a3[ak]);                       \
            r00 = fma(x0, b0, r00); r01 = fma(x0, b1, r01);                                                         \
            r10 = fma(x1, b0, r10); r11 = fma(x1, b1, r11);                                                         \
            r20 = fma(x2, b0, r20); r21 = fma(x2, b1, r21);                                                         \
            r30 = fma(x3, b0, r30); r31 = fma(x3, b1, r31);                                                         \
        }                                                                                                           \
        st(c0 + j, r00); st(c0 + j + W, r01);                                                                       \
        st(c1 + j, r10); st(c1 + j + W, r11);                                                                       \
        st(c2 + j, r20); st(c2 + j + W, r21);                                                                       \
        st(c3 + j, r30); st(c3 + j + W, r31);                                                                       \
    }
TT_MM_BLOCK_DEF(mm_block8, TT_FMA, v8f, 8, ld8, st8, splat8, fma8)
TT_MM_BLOCK_DEF(mm_block8_soft, , v8f, 8, ld8, st8, splat8, fma8_soft)
TT_MM_BLOCK_DEF(mm_block16, TT_WIDE, v16f, 16, ld16, st16, splat16, fma16)

// C (M, N) (+)= A (M, K) · B (K, N): C and B row-major with leading dimensions, A element
// (i, k) at A[i·sai + k·sak] (so A can be read transposed). acc = 0 starts from zero; with
// acc and rs non-NULL, row i of C is first multiplied by rs[i] (the online softmax's rescale,
// done as C is loaded instead of in a pass of its own). Each element adds its K products in
// k order, each one fused multiply-add (one rounding): the same bits whatever the tile path,
// the vector width or the FMA's source (mm8 on the CPU's FMA in a TT_FMA function; mm8_soft
// on fmaf, for a CPU without it). 4×16 register tiles, then 4×8, then scalar.
#define TT_MM8_DEF(name, ATTR, block, fma8v)                                                                           \
    ATTR static void name(float *restrict C, int ldc, const float *restrict A, size_t sai, size_t sak,                 \
                           const float *restrict B, int ldb, int M, int N, int K, int acc, const float *rs) {          \
        int i = 0;                                                                                                     \
        for (; i < M; i += 4) {                                                                                        \
            const int mr = M - i < 4 ? M - i : 4; /* rows in this strip (tail strips are narrower) */                  \
            const float *a0 = A + (size_t)i * sai, *a1 = a0 + (mr > 1 ? sai : 0);                                      \
            const float *a2 = a0 + (mr > 2 ? 2 * sai : 0), *a3 = a0 + (mr > 3 ? 3 * sai : 0);                          \
            float *c0 = C + (size_t)i * ldc, *c1 = c0 + (mr > 1 ? ldc : 0);                                            \
            float *c2 = c0 + (mr > 2 ? 2 * ldc : 0), *c3 = c0 + (mr > 3 ? 3 * ldc : 0);                                \
            int j = 0;                                                                                                 \
            if (mr == 4)                                                                                               \
                for (; j + 16 <= N; j += 16)                                                                           \
                    block(c0, c1, c2, c3, a0, a1, a2, a3, sak, B, ldb, j, K, acc, rs ? rs + i : NULL);                 \
            for (; j + 8 <= N; j += 8) { /* one row at a time: tails of N and of M */                                  \
                for (int r = 0; r < mr; r++) {                                                                         \
                    const float *ar = A + (size_t)(i + r) * sai;                                                       \
                    float *cr = C + (size_t)(i + r) * ldc;                                                             \
                    v8f c = acc ? ld8(cr + j) : splat8(0.0f);                                                          \
                    if (acc && rs) c *= rs[i + r];                                                                     \
                    for (int k = 0; k < K; k++)                                                                        \
                        c = fma8v(splat8(ar[(size_t)k * sak]), ld8(B + (size_t)k * ldb + j), c);                       \
                    st8(cr + j, c);                                                                                    \
                }                                                                                                      \
            }                                                                                                          \
            for (; j < N; j++)                                                                                         \
                for (int r = 0; r < mr; r++) {                                                                         \
                    const float *ar = A + (size_t)(i + r) * sai;                                                       \
                    float c = acc ? C[(size_t)(i + r) * ldc + j] : 0.0f;                                               \
                    if (acc && rs) c *= rs[i + r];                                                                     \
                    for (int k = 0; k < K; k++) c = __builtin_fmaf(ar[(size_t)k * sak], B[(size_t)k * ldb + j], c);    \
                    C[(size_t)(i + r) * ldc + j] = c;                                                                  \
                }                                                                                                      \
        }                                                                                                              \
    }
TT_MM8_DEF(mm8, TT_FMA, mm_block8, fma8)
TT_MM8_DEF(mm8_soft, , mm_block8_soft, fma8_soft)

// The online softmax step of one (nk, BQ) tile of raw scores Sᵀ (keys as rows, masked
// entries −inf), eight queries at a time: m' = max(m, the tile's max of S·scale), the tile
// becomes P = exp(S·scale − m'), l = l·corr + Σ P (keys in order), m = m', and corr =
// exp(m − m') is left for out's rescale (exp(−inf) = 0 on the first tile). S·scale is formed
// in each of the two passes, the same product both times (−inf·scale = −inf).
INLINE void softmax8(float *st, int nk, float *m, float *l, float *corr, float scale) {
    for (int iv = 0; iv < ATT_BQ; iv += 8) {
        v8f bm = ld8(st + iv) * scale;
        for (int j = 1; j < nk; j++) bm = max8(bm, ld8(st + j * ATT_BQ + iv) * scale);
        v8f mo = ld8(m + iv), mn = max8(mo, bm);
        v8f c = exp8(mo - mn);
        v8f sum = splat8(0.0f);
        for (int j = 0; j < nk; j++) {
            v8f p = exp8(ld8(st + j * ATT_BQ + iv) * scale - mn);
            st8(st + j * ATT_BQ + iv, p);
            sum += p;
        }
        st8(l + iv, ld8(l + iv) * c + sum);
        st8(m + iv, mn);
        st8(corr + iv, c);
    }
}

// P and dS·scale of a (nk, BQ) tile in place, keys as rows: st holds Sᵀ, dpt holds dPᵀ =
// v·doutᵀ; L and D per query (lane).
INLINE void grad_cols8(float *st, float *dpt, int nk, const float *L, const float *D, float scale) {
    for (int iv = 0; iv < ATT_BQ; iv += 8) {
        v8f lv = ld8(L + iv), dv = ld8(D + iv);
        for (int j = 0; j < nk; j++) {
            v8f p = exp8(ld8(st + j * ATT_BQ + iv) * scale - lv);
            st8(st + j * ATT_BQ + iv, p);
            st8(dpt + j * ATT_BQ + iv, (p * (ld8(dpt + j * ATT_BQ + iv) - dv)) * scale);
        }
    }
}

// The same for a (nq, BK) tile with queries as rows (S = q·kᵀ, dP = dout·vᵀ), columns
// [j0, nc) (multiples of 8); L and D per query (row).
INLINE void grad_rows8(float *st, float *dpt, int nq, int j0, int nc, const float *L, const float *D, float scale) {
    for (int i = 0; i < nq; i++) {
        v8f lv = splat8(L[i]), dv = splat8(D[i]);
        for (int j = j0; j < nc; j += 8) {
            v8f p = exp8(ld8(st + i * ATT_BK + j) * scale - lv);
            st8(st + i * ATT_BK + j, p);
            st8(dpt + i * ATT_BK + j, (p * (ld8(dpt + i * ATT_BK + j) - dv)) * scale);
        }
    }
}

// ---------------------------------------------------------------- 16-lane kernels (AVX-512F)
// The 8-lane kernels again, on 16-float vectors: per element the same operations in the same
// order (so the same bits), twice the lanes per instruction. Called only when tt_wide().

// mm_block16 on rows i..i+7 (sixteen accumulators: eight would leave the two FMA pipes
// waiting on their 4-cycle latency, and four broadcasts for two loads of B made the loads the
// bound): per element the same chain.
#define MM8R(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
TT_WIDE INLINE void mm_block16x8(float *C, int ldc, const float *A, size_t sai, size_t sak, int i,
                                 const float *restrict B, int ldb, int j, int K, int acc, const float *rs) {
#define MM8_INIT(r)                                                                                                \
    float *c##r = C + (size_t)(i + r) * ldc + j;                                                                   \
    const float *a##r = A + (size_t)(i + r) * sai;                                                                 \
    v16f q##r##0 = acc ? ld16(c##r) : splat16(0.0f), q##r##1 = acc ? ld16(c##r + 16) : splat16(0.0f);              \
    if (acc && rs) q##r##0 *= rs[r], q##r##1 *= rs[r];
#define MM8_FMA(r)                                                                                                 \
    {                                                                                                              \
        const v16f x = splat16(a##r[ak]);                                                                          \
        q##r##0 = fma16(x, b0, q##r##0), q##r##1 = fma16(x, b1, q##r##1);                                          \
    }
#define MM8_STORE(r) st16(c##r, q##r##0), st16(c##r + 16, q##r##1);
    MM8R(MM8_INIT)
    for (int k = 0; k < K; k++) {
        const float *bk = B + (size_t)k * ldb + j;
        const v16f b0 = ld16(bk), b1 = ld16(bk + 16);
        const size_t ak = (size_t)k * sak;
        MM8R(MM8_FMA)
    }
    MM8R(MM8_STORE)
}

// mm8 with 8×32 register tiles, then 4×32 and 4×16; the columns past the last 16 and the
// rows past the last 4 go to mm8 (every AVX-512F CPU has FMA).
TT_WIDE static void mm16(float *restrict C, int ldc, const float *restrict A, size_t sai, size_t sak,
                         const float *restrict B, int ldb, int M, int N, int K, int acc, const float *rs) {
    const int M4 = M / 4 * 4, N16 = N / 16 * 16, N32 = N / 32 * 32;
    int i8 = 0; // rows [0, i8) have their columns [0, N32) done by 8×32 tiles
    for (; i8 + 8 <= M4 && N32 > 0; i8 += 8)
        for (int j = 0; j < N32; j += 32) mm_block16x8(C, ldc, A, sai, sak, i8, B, ldb, j, K, acc, rs ? rs + i8 : NULL);
    for (int i = 0; i < M4; i += 4) {
        const float *a0 = A + (size_t)i * sai, *a1 = a0 + sai, *a2 = a1 + sai, *a3 = a2 + sai;
        float *c0 = C + (size_t)i * ldc, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
        int j = i < i8 ? N32 : 0;
        for (; j + 32 <= N; j += 32)
            mm_block16(c0, c1, c2, c3, a0, a1, a2, a3, sak, B, ldb, j, K, acc, rs ? rs + i : NULL);
        if (j < N16) {
            v16f z = splat16(0.0f);
            v16f r0 = acc ? ld16(c0 + j) : z, r1 = acc ? ld16(c1 + j) : z;
            v16f r2 = acc ? ld16(c2 + j) : z, r3 = acc ? ld16(c3 + j) : z;
            if (acc && rs) { r0 *= rs[i]; r1 *= rs[i + 1]; r2 *= rs[i + 2]; r3 *= rs[i + 3]; }
            for (int k = 0; k < K; k++) {
                v16f b0 = ld16(B + (size_t)k * ldb + j);
                size_t ak = (size_t)k * sak;
                r0 = fma16(splat16(a0[ak]), b0, r0); r1 = fma16(splat16(a1[ak]), b0, r1);
                r2 = fma16(splat16(a2[ak]), b0, r2); r3 = fma16(splat16(a3[ak]), b0, r3);
            }
            st16(c0 + j, r0); st16(c1 + j, r1); st16(c2 + j, r2); st16(c3 + j, r3);
        }
    }
    if (N16 < N && M4 > 0) mm8(C + N16, ldc, A, sai, sak, B + N16, ldb, M4, N - N16, K, acc, rs);
    if (M4 < M)
        mm8(C + (size_t)M4 * ldc, ldc, A + (size_t)M4 * sai, sai, sak, B, ldb, M - M4, N, K, acc, rs ? rs + M4 : NULL);
}

// softmax8, a whole tile row (BQ = two vectors) per step, so the two max chains interleave.
TT_WIDE static void softmax16(float *st, int nk, float *m, float *l, float *corr, float scale) {
    v16f bm0 = ld16(st) * scale, bm1 = ld16(st + 16) * scale;
    for (int j = 1; j < nk; j++) {
        bm0 = max16(bm0, ld16(st + j * ATT_BQ) * scale);
        bm1 = max16(bm1, ld16(st + j * ATT_BQ + 16) * scale);
    }
    v16f mo0 = ld16(m), mn0 = max16(mo0, bm0), mo1 = ld16(m + 16), mn1 = max16(mo1, bm1);
    v16f c0 = exp16(mo0 - mn0), c1 = exp16(mo1 - mn1);
    v16f sum0 = splat16(0.0f), sum1 = splat16(0.0f);
    for (int j = 0; j < nk; j++) {
        v16f p0 = exp16(ld16(st + j * ATT_BQ) * scale - mn0);
        v16f p1 = exp16(ld16(st + j * ATT_BQ + 16) * scale - mn1);
        st16(st + j * ATT_BQ, p0);
        st16(st + j * ATT_BQ + 16, p1);
        sum0 += p0;
        sum1 += p1;
    }
    st16(l, ld16(l) * c0 + sum0); st16(l + 16, ld16(l + 16) * c1 + sum1);
    st16(m, mn0); st16(m + 16, mn1);
    st16(corr, c0); st16(corr + 16, c1);
}

TT_WIDE static void grad_cols16(float *st, float *dpt, int nk, const float *L, const float *D, float scale) {
    for (int iv = 0; iv < ATT_BQ; iv += 16) {
        v16f lv = ld16(L + iv), dv = ld16(D + iv);
        for (int j = 0; j < nk; j++) {
            v16f p = exp16(ld16(st + j * ATT_BQ + iv) * scale - lv);
            st16(st + j * ATT_BQ + iv, p);
            st16(dpt + j * ATT_BQ + iv, (p * (ld16(dpt + j * ATT_BQ + iv) - dv)) * scale);
        }
    }
}

// grad_rows8 over [0, nc): 16 columns at a time, the last 8 (nc an odd multiple of 8) by it.
TT_WIDE static void grad_rows16(float *st, float *dpt, int nq, int nc, const float *L, const float *D, float scale) {
    const int n16 = nc / 16 * 16;
    for (int i = 0; i < nq; i++) {
        v16f lv = splat16(L[i]), dv = splat16(D[i]);
        for (int j = 0; j < n16; j += 16) {
            v16f p = exp16(ld16(st + i * ATT_BK + j) * scale - lv);
            st16(st + i * ATT_BK + j, p);
            st16(dpt + i * ATT_BK + j, (p * (ld16(dpt + i * ATT_BK + j) - dv)) * scale);
        }
    }
    if (n16 < nc) grad_rows8(st, dpt, nq, n16, nc, L, D, scale);
}

// ---------------------------------------------------------------- the kernels a task calls
// The 16-lane kernel where the CPU has AVX-512F (wide = tt_wide(), asked once per task),
// else the 8-lane one: softmax and P/dS inlined into the task's clones, the tile product
// on the CPU's FMA (mm8) or on fmaf where it has none (mm8_soft).
INLINE void mm_tile(int wide, float *restrict C, int ldc, const float *restrict A, size_t sai, size_t sak,
                    const float *restrict B, int ldb, int M, int N, int K, int acc, const float *rs) {
    if (wide) mm16(C, ldc, A, sai, sak, B, ldb, M, N, K, acc, rs);
    else if (tt_fma()) mm8(C, ldc, A, sai, sak, B, ldb, M, N, K, acc, rs);
    else mm8_soft(C, ldc, A, sai, sak, B, ldb, M, N, K, acc, rs);
}
INLINE void softmax_tile(int wide, float *st, int nk, float *m, float *l, float *corr, float scale) {
    if (wide) softmax16(st, nk, m, l, corr, scale);
    else softmax8(st, nk, m, l, corr, scale);
}
INLINE void grad_cols(int wide, float *st, float *dpt, int nk, const float *L, const float *D, float scale) {
    if (wide) grad_cols16(st, dpt, nk, L, D, scale);
    else grad_cols8(st, dpt, nk, L, D, scale);
}
INLINE void grad_rows(int wide, float *st, float *dpt, int nq, int nc, const float *L, const float *D, float scale) {
    if (wide) grad_rows16(st, dpt, nq, nc, L, D, scale);
    else grad_rows8(st, dpt, nq, 0, nc, L, D, scale);
}

// ---------------------------------------------------------------- transposes and masks
// The 8×8 block at src (row stride ss) stored transposed at dst (row stride ds). Moves only
// (unpack, shuffle, lane swap; written out in full so the block stays in registers), so no
// bit changes.
INLINE void tr8(float *restrict dst, size_t ds, const float *restrict src, size_t ss) {
    const v8i lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
    const v8i s0 = {0, 1, 8, 9, 4, 5, 12, 13}, s1 = {2, 3, 10, 11, 6, 7, 14, 15};
    const v8i p0 = {0, 1, 2, 3, 8, 9, 10, 11}, p1 = {4, 5, 6, 7, 12, 13, 14, 15};
    v8f r0 = ld8(src), r1 = ld8(src + ss), r2 = ld8(src + 2 * ss), r3 = ld8(src + 3 * ss);
    v8f r4 = ld8(src + 4 * ss), r5 = ld8(src + 5 * ss), r6 = ld8(src + 6 * ss), r7 = ld8(src + 7 * ss);
    // pairs of rows interleaved within each 128-bit half
    v8f t0 = __builtin_shuffle(r0, r1, lo), t1 = __builtin_shuffle(r0, r1, hi);
    v8f t2 = __builtin_shuffle(r2, r3, lo), t3 = __builtin_shuffle(r2, r3, hi);
    v8f t4 = __builtin_shuffle(r4, r5, lo), t5 = __builtin_shuffle(r4, r5, hi);
    v8f t6 = __builtin_shuffle(r6, r7, lo), t7 = __builtin_shuffle(r6, r7, hi);
    // quads: u_c holds columns c and c + 4 of rows 0-3 (u0-u3) or 4-7 (u4-u7)
    v8f u0 = __builtin_shuffle(t0, t2, s0), u1 = __builtin_shuffle(t0, t2, s1);
    v8f u2 = __builtin_shuffle(t1, t3, s0), u3 = __builtin_shuffle(t1, t3, s1);
    v8f u4 = __builtin_shuffle(t4, t6, s0), u5 = __builtin_shuffle(t4, t6, s1);
    v8f u6 = __builtin_shuffle(t5, t7, s0), u7 = __builtin_shuffle(t5, t7, s1);
    // the two halves meet: column c
    st8(dst, __builtin_shuffle(u0, u4, p0)); st8(dst + 4 * ds, __builtin_shuffle(u0, u4, p1));
    st8(dst + ds, __builtin_shuffle(u1, u5, p0)); st8(dst + 5 * ds, __builtin_shuffle(u1, u5, p1));
    st8(dst + 2 * ds, __builtin_shuffle(u2, u6, p0)); st8(dst + 6 * ds, __builtin_shuffle(u2, u6, p1));
    st8(dst + 3 * ds, __builtin_shuffle(u3, u7, p0)); st8(dst + 7 * ds, __builtin_shuffle(u3, u7, p1));
}

// dst (HS, w) = rows [0, n) of src (row stride sstride) transposed; columns n..w are zero
// (w = BQ or BK). 8×8 blocks through registers, the edges one element at a time.
INLINE void load_t(float *restrict dst, int w, const float *restrict src, size_t sstride, int n, int HS) {
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        const float *s = src + (size_t)j * sstride;
        int d = 0;
        for (; d + 8 <= HS; d += 8) tr8(dst + (size_t)d * w + j, (size_t)w, s + d, sstride);
        for (; d < HS; d++)
            for (int u = 0; u < 8; u++) dst[(size_t)d * w + j + u] = s[(size_t)u * sstride + d];
    }
    for (; j < n; j++) {
        const float *s = src + (size_t)j * sstride;
        for (int d = 0; d < HS; d++) dst[(size_t)d * w + j] = s[d];
    }
    for (int d = 0; d < HS && n < w; d++) memset(dst + (size_t)d * w + n, 0, (size_t)(w - n) * sizeof(float));
}

// Causal mask of a (nk, BQ) tile, keys s0.., queries t0..: entries with key > query become
// `fill`. Only tiles that reach past the diagonal have any.
static void mask_tile(float *tile, int s0, int nk, int t0, float fill) {
    if (s0 + nk - 1 <= t0) return;
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < ATT_BQ && t0 + i < s0 + j; i++) tile[(size_t)j * ATT_BQ + i] = fill;
}

// The same for a (nq, BK) tile, queries t0.. as rows, keys s0..: entries with key > query
// become 0 (the caller checks that the tile reaches past the diagonal).
static void mask_tile_rows(float *tile, int t0, int nq, int s0, int nk) {
    for (int i = 0; i < nq; i++)
        for (int j = t0 + i + 1 - s0 > 0 ? t0 + i + 1 - s0 : 0; j < nk; j++) tile[(size_t)i * ATT_BK + j] = 0.0f;
}

// n rows of HS at x (row stride stride) rounded to BF16 values: a task's outputs, once they
// are complete (inlined into the task's clones).
INLINE void round_rows(float *x, size_t stride, int n, int HS) {
    for (int i = 0; i < n; i++) tt_round_n(x + (size_t)i * stride, (size_t)HS);
}

// n rows of HS BF16 halves at src (row stride ss) widened to their words at dst (row stride
// HS), and n rounded rows of HS words at src (row stride HS) narrowed to their halves at dst
// (row stride ds): the BF16 activations' operands and outputs (attention_forward16's, ...).
INLINE void widen_rows(float *restrict dst, const uint16_t *restrict src, size_t ss, int n, int HS) {
    for (int i = 0; i < n; i++) tt_widen_n(dst + (size_t)i * HS, src + (size_t)i * ss, (size_t)HS);
}
INLINE void narrow_rows(uint16_t *restrict dst, size_t ds, const float *restrict src, int n, int HS) {
    for (int i = 0; i < n; i++) tt_narrow_n(dst + (size_t)i * ds, src + (size_t)i * HS, (size_t)HS);
}

// A thread's keys and values of one kv head, widened in its buffers (k at ws, v T rows on)
// between its tasks: batch b, kv head g, rows [0, rows) (a thread's forward and dq tasks
// mostly follow one head's query blocks, last first, so each kv head's rows are widened about
// once a thread). A cache line each, so that the threads' do not share one.
typedef struct {
    int b, g, rows;
    char pad[64 - 3 * sizeof(int)];
} att16_kv_t;
_Static_assert(sizeof(att16_kv_t) == 64, "a kv cache a cache line");

// The BF16 ops' buffers (attention_forward16, attention_backward16), one allocation grown as
// needed and held from att16_hold to att16_done: each thread's kv cache (emptied by the hold:
// the rows are the op's), the backward's D (nd floats: the split passes' D of every query row,
// which the halves of dq cannot hold), and per thread `per` floats — k, v, dk and dv of one kv
// head (max(T, BK) rows of HS; the forward and the dq task use the first two, the dk/dv task
// a key block's four), then a query block's q, dout, out and dq (att16_blk).
typedef struct {
    att16_kv_t *kv;
    float *d, *ws;
    size_t per;
} att16_t;
static held_t a16_held = HELD_INIT;

// A thread's share of the allocation, in floats (a multiple of 16: whole cache lines).
static size_t att16_per(int T, int HS) {
    const size_t rows = (size_t)(T > ATT_BK ? T : ATT_BK);
    return (4 * rows * (size_t)HS + (size_t)4 * ATT_BQ * HS + 15) / 16 * 16;
}
// The allocation's bytes for `threads` threads and nd floats of D (whole cache lines).
static size_t att16_bytes(int T, int HS, size_t nd, size_t threads) {
    return threads * sizeof(att16_kv_t) + ((nd + 15) / 16 * 16 + threads * att16_per(T, HS)) * sizeof(float);
}

// 1: no memory (nothing held).
static int att16_hold(att16_t *a, int T, int HS, size_t nd) {
    const size_t threads = (size_t)omp_get_max_threads();
    a->kv = held_take(&a16_held, att16_bytes(T, HS, nd, threads));
    if (!a->kv) return 1;
    a->per = att16_per(T, HS);
    a->d = (float *)(a->kv + threads);
    a->ws = a->d + (nd + 15) / 16 * 16;
    for (size_t t = 0; t < threads; t++) a->kv[t] = (att16_kv_t){.b = -1};
    return 0;
}
static void att16_done(void) { held_give(&a16_held); }
// The calling thread's buffers and kv cache (inside the op's parallel regions).
static inline float *att16_ws(const att16_t *a) { return a->ws + (size_t)omp_get_thread_num() * a->per; }
static inline att16_kv_t *att16_kv(const att16_t *a) { return a->kv + omp_get_thread_num(); }

// Rows [0, n) of kv head g, batch b, widened into the thread's buffers unless kv says they are.
INLINE void kv_widen(float *ws, att16_kv_t *kv, const uint16_t *k, const uint16_t *v, int b, int g, int n, int T,
                     int NKV, int HS) {
    const size_t ks = (size_t)NKV * HS, kbo = (size_t)b * T * ks + (size_t)g * HS;
    if (kv->b != b || kv->g != g) *kv = (att16_kv_t){.b = b, .g = g, .rows = 0};
    if (kv->rows >= n) return;
    const size_t r = (size_t)kv->rows;
    widen_rows(ws + r * HS, k + kbo + r * ks, ks, n - kv->rows, HS);
    widen_rows(ws + (size_t)T * HS + r * HS, v + kbo + r * ks, ks, n - kv->rows, HS);
    kv->rows = n;
}
// A thread's query-block buffers (q, dout, out, dq: BQ rows of HS each), past its kv head's.
static inline float *att16_blk(float *ws, int T, int HS) { return ws + 4 * (size_t)(T > ATT_BK ? T : ATT_BK) * HS; }

// ---------------------------------------------------------------- plain path (HS > ATT_HS_MAX)
// Σ a[i]·b[i] in i order.
static float dot_seq(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void attention_forward_plain(float *out, float *lse, const float *q, const float *k, const float *v,
                                    int B, int T, int NH, int NKV, int HS, int round) {
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    #pragma omp parallel for collapse(3) schedule(dynamic, 4)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *qr = q + ((size_t)b * T + t) * qs + (size_t)h * HS;
                const float *kb = k + (size_t)b * T * ks + (size_t)(h / group) * HS;
                const float *vb = v + (size_t)b * T * ks + (size_t)(h / group) * HS;
                float *o = out + ((size_t)b * T + t) * qs + (size_t)h * HS;
                memset(o, 0, (size_t)HS * sizeof(float));
                float m = -INFINITY, l = 0.0f;
                for (int s = 0; s <= t; s++) {
                    float x = dot_seq(qr, kb + (size_t)s * ks, HS) * scale;
                    if (x > m) {
                        float corr = expf(m - x);
                        l *= corr;
                        for (int d = 0; d < HS; d++) o[d] *= corr;
                        m = x;
                    }
                    float p = expf(x - m);
                    l += p;
                    for (int d = 0; d < HS; d++) o[d] += p * vb[(size_t)s * ks + d];
                }
                float inv = 1.0f / l;
                for (int d = 0; d < HS; d++) o[d] *= inv;
                if (round) bf16_round_n(o, (size_t)HS);
                lse[((size_t)b * NH + h) * T + t] = m + logf(l);
            }
}

static void attention_backward_plain(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                     const float *k, const float *v, const float *lse,
                                     int B, int T, int NH, int NKV, int HS, int round) {
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    #pragma omp parallel for collapse(3) schedule(dynamic, 4)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++)
            for (int s = 0; s < T; s++) {
                size_t kro = ((size_t)b * T + s) * ks + (size_t)g * HS;
                const float *kr = k + kro, *vr = v + kro;
                float *dkr = dk + kro, *dvr = dv + kro;
                memset(dkr, 0, (size_t)HS * sizeof(float));
                memset(dvr, 0, (size_t)HS * sizeof(float));
                for (int h = g * group; h < (g + 1) * group; h++)
                    for (int t = s; t < T; t++) {
                        size_t row = ((size_t)b * T + t) * qs + (size_t)h * HS;
                        float p = expf(dot_seq(q + row, kr, HS) * scale - lse[((size_t)b * NH + h) * T + t]);
                        float ds = p * (dot_seq(dout + row, vr, HS) - dq[row]); // dq[row] holds D_t
                        for (int d = 0; d < HS; d++) dvr[d] += p * dout[row + d];
                        for (int d = 0; d < HS; d++) dkr[d] += (ds * scale) * q[row + d];
                    }
                if (round) { bf16_round_n(dkr, (size_t)HS); bf16_round_n(dvr, (size_t)HS); }
            }
    #pragma omp parallel for collapse(3) schedule(dynamic, 4)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t row = ((size_t)b * T + t) * qs + (size_t)h * HS;
                const float *kb = k + (size_t)b * T * ks + (size_t)(h / group) * HS;
                const float *vb = v + (size_t)b * T * ks + (size_t)(h / group) * HS;
                float lt = lse[((size_t)b * NH + h) * T + t], D = dq[row];
                float *dqr = dq + row;
                memset(dqr, 0, (size_t)HS * sizeof(float));
                for (int s = 0; s <= t; s++) {
                    float p = expf(dot_seq(q + row, kb + (size_t)s * ks, HS) * scale - lt);
                    float ds = p * (dot_seq(dout + row, vb + (size_t)s * ks, HS) - D);
                    for (int d = 0; d < HS; d++) dqr[d] += (ds * scale) * kb[(size_t)s * ks + d];
                }
                if (round) bf16_round_n(dqr, (size_t)HS);
            }
}

// ---------------------------------------------------------------- forward
// Query rows [t0, t0 + nq) of one head: the block qblk (row stride qs), the keys and values of
// its kv head kb and vb (row stride ks, rows from 0); out's block oblk (row stride os) and lse's
// row lrow (from t0). The operands are the op's own or (attention_forward16) a thread's widened
// rows: the same words, so the same bits.
TT_CLONES
static void fwd_block(float *oblk, size_t os, float *lrow, const float *qblk, size_t qs, const float *kb,
                      const float *vb, size_t ks, int t0, int nq, int HS, int round) {
    const float scale = 1.0f / sqrtf((float)HS);
    float qt[ATT_HS_MAX * ATT_BQ]; // (HS, BQ): the query block transposed, once per task
    float st[ATT_BK * ATT_BQ];     // (BK, BQ): scores, then probabilities
    float m[ATT_BQ], l[ATT_BQ], corr[ATT_BQ];
    const int wide = tt_wide();
    load_t(qt, ATT_BQ, qblk, qs, nq, HS);
    for (int i = 0; i < ATT_BQ; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_BK) {
        const int nk = t0 + nq - s0 < ATT_BK ? t0 + nq - s0 : ATT_BK;
        mm_tile(wide, st, ATT_BQ, kb + (size_t)s0 * ks, ks, 1, qt, ATT_BQ, nk, ATT_BQ, HS, 0, NULL); // Sᵀ = k·qᵀ
        mask_tile(st, s0, nk, t0, -INFINITY); // before the scale, which keeps −inf
        softmax_tile(wide, st, nk, m, l, corr, scale);
        // out = out·corr (rescaled from the old max) + P·v; the first tile starts from zero,
        // which is what zero·corr would give
        mm_tile(wide, oblk, (int)os, st, 1, ATT_BQ, vb + (size_t)s0 * ks, (int)ks, nq, HS, nk, s0 > 0, corr);
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i], *restrict o = oblk + (size_t)i * os;
        #pragma omp simd
        for (int d = 0; d < HS; d++) o[d] *= inv;
        if (round) tt_round_n(o, (size_t)HS);
        lrow[i] = m[i] + logf(l[i]);
    }
}

// Query block qb of head h, batch b, on the op's FP32 operands.
static void fwd_task(float *out, float *lse, const float *q, const float *k, const float *v,
                     int b, int h, int qb, int T, int NH, int NKV, int HS, int round) {
    const int group = NH / NKV, t0 = qb * ATT_BQ, nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS, qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
    const size_t kbo = (size_t)b * T * ks + (size_t)(h / group) * HS;
    fwd_block(out + qo, qs, lse + ((size_t)b * NH + h) * T + t0, q + qo, qs, k + kbo, v + kbo, ks, t0, nq, HS, round);
}

// attention_amx.c's views of the 16-lane steps (a CPU with AMX has AVX-512F).
static void softmax_wide(float *st, int nk, float *m, float *l, float *corr, float scale) {
    softmax16(st, nk, m, l, corr, scale);
}
static void grad_wide(float *st, float *dpt, int nk, const float *L, const float *D, float scale) {
    grad_cols16(st, dpt, nk, L, D, scale);
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int NH, int NKV, int HS, int round) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    if (HS > ATT_HS_MAX) { attention_forward_plain(out, lse, q, k, v, B, T, NH, NKV, HS, round); return; }
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ;
    // On AMX (attention_amx.h) where it can, each task it declines on the FMA tiles here.
    att_amx_t *x = att_amx_prepare(k, v, 0, B, T, NH, NKV, HS, 0);
    // Later query blocks see more keys: dynamic scheduling balances them (results unaffected).
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qb = nqb - 1; qb >= 0; qb--) // longest first
                if (!x || att_amx_fwd_task(x, out, lse, q, b, h, qb, round, softmax_wide, mask_tile))
                    fwd_task(out, lse, q, k, v, b, h, qb, T, NH, NKV, HS, round);
    att_amx_done(x);
}

// ---------------------------------------------------------------- backward
// dk, dv rows [s0, s0+nk) of kv head g: every query t ≥ s of the group's heads, heads in
// order, then query blocks in order (each row adds in t order per head). The key block is
// the fixed side, so it is the one transposed (once per task), and the tiles hold queries
// as rows: S = q·kᵀ reads q in place. Query row r's D (r = (b·T + t)·NH + h) is at Dp[r·ds]:
// parked in dq's rows (ds = HS), or attention_backward16's own (ds = 1). ws NULL: the operands
// and outputs are FP32 words, read and written where they lie; else BF16 halves and the
// thread's buffers, as bwd_task's: the key block's k and v and each query block's q and dout
// widened there, its dk and dv formed there and narrowed once complete and rounded.
TT_CLONES
static void dkdv_task(void *dk, void *dv, const float *Dp, size_t ds, const void *dout, const void *q, const void *k,
                      const void *v, const float *lse, int b, int g, int kbi, int T, int NH, int NKV, int HS, int round,
                      float *ws) {
    const int group = NH / NKV, s0 = kbi * ATT_BK, nk = T - s0 < ATT_BK ? T - s0 : ATT_BK;
    const int nkv = (nk + 7) / 8 * 8; // tile columns computed: whole vectors (kt is zero past nk)
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS, bk = (size_t)ATT_BK * HS;
    const size_t ko = ((size_t)b * T + s0) * ks + (size_t)g * HS;
    const size_t kst = ws ? (size_t)HS : ks, qst = ws ? (size_t)HS : qs; // row strides of the key and query rows
    const float scale = 1.0f / sqrtf((float)HS);
    float kt[ATT_HS_MAX * ATT_BK], vt[ATT_HS_MAX * ATT_BK]; // (HS, BK)
    float st[ATT_BQ * ATT_BK], dpt[ATT_BQ * ATT_BK];       // (BQ, BK)
    float L[ATT_BQ], D[ATT_BQ];
    const int wide = tt_wide();
    float *dkb, *dvb;
    if (ws) {
        widen_rows(ws, (const uint16_t *)k + ko, ks, nk, HS);
        widen_rows(ws + bk, (const uint16_t *)v + ko, ks, nk, HS);
        load_t(kt, ATT_BK, ws, kst, nk, HS);
        load_t(vt, ATT_BK, ws + bk, kst, nk, HS);
        dkb = ws + 2 * bk, dvb = ws + 3 * bk;
    } else {
        load_t(kt, ATT_BK, (const float *)k + ko, ks, nk, HS);
        load_t(vt, ATT_BK, (const float *)v + ko, ks, nk, HS);
        dkb = (float *)dk + ko, dvb = (float *)dv + ko;
    }
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *lr = lse + ((size_t)b * NH + h) * T;
        for (int t0 = (s0 / ATT_BQ) * ATT_BQ; t0 < T; t0 += ATT_BQ) {
            const int nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            const float *qb, *dob; // the block's q and dout (row stride qst)
            if (ws) {
                float *w = ws + 4 * bk;
                widen_rows(w, (const uint16_t *)q + qo, qs, nq, HS);
                widen_rows(w + ATT_BQ * HS, (const uint16_t *)dout + qo, qs, nq, HS);
                qb = w, dob = w + ATT_BQ * HS;
            } else {
                qb = (const float *)q + qo, dob = (const float *)dout + qo;
            }
            for (int i = 0; i < nq; i++) {
                L[i] = lr[t0 + i];
                D[i] = Dp[(((size_t)b * T + t0 + i) * NH + h) * ds];
            }
            // S = q·kᵀ, dP = dout·vᵀ for the keys ≤ the block's last query; the columns
            // past them are all masked (set below), so they are not computed
            const int nc = t0 + nq - s0 < nkv ? (t0 + nq - s0 + 7) / 8 * 8 : nkv;
            mm_tile(wide, st, ATT_BK, qb, qst, 1, kt, ATT_BK, nq, nc, HS, 0, NULL);
            mm_tile(wide, dpt, ATT_BK, dob, qst, 1, vt, ATT_BK, nq, nc, HS, 0, NULL);
            grad_rows(wide, st, dpt, nq, nc, L, D, scale);
            if (s0 + nk - 1 > t0) { // the tile reaches past the diagonal
                mask_tile_rows(st, t0, nq, s0, nk);
                mask_tile_rows(dpt, t0, nq, s0, nk);
            }
            int first = h == g * group && t0 == (s0 / ATT_BQ) * ATT_BQ; // first product: "="
            // dv (nk, HS) (+)= Pᵀ (nk, nq) · dout, dk (+)= dSᵀ · q: the tiles read transposed
            mm_tile(wide, dvb, (int)kst, st, 1, ATT_BK, dob, (int)qst, nk, HS, nq, !first, NULL);
            mm_tile(wide, dkb, (int)kst, dpt, 1, ATT_BK, qb, (int)qst, nk, HS, nq, !first, NULL);
        }
    }
    if (round) { round_rows(dkb, kst, nk, HS); round_rows(dvb, kst, nk, HS); }
    if (ws) {
        narrow_rows((uint16_t *)dk + ko, ks, dkb, nk, HS);
        narrow_rows((uint16_t *)dv + ko, ks, dvb, nk, HS);
    }
}

// dq rows [t0, t0+nq) of head h; reads the rows' D first (Dp, ds: dkdv_task's), then (FP32,
// ws NULL) overwrites the rows it was parked in. ws: BF16 halves and the thread's buffers, its
// kv head's keys and values widened there as far as the block reads (kv_widen), the block's
// q and dout widened, its dq formed there and narrowed.
TT_CLONES
static void dq_task(void *dq, const float *Dp, size_t ds, const void *dout, const void *q, const void *k,
                    const void *v, const float *lse, int b, int h, int qb, int T, int NH, int NKV, int HS, int round,
                    float *ws, att16_kv_t *kv) {
    const int group = NH / NKV, t0 = qb * ATT_BQ, nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS, kbo = (size_t)b * T * ks + (size_t)(h / group) * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *lr = lse + ((size_t)b * NH + h) * T + t0;
    float qt[ATT_HS_MAX * ATT_BQ], dot_t[ATT_HS_MAX * ATT_BQ]; // (HS, BQ)
    float st[ATT_BK * ATT_BQ], dpt[ATT_BK * ATT_BQ];          // (BK, BQ)
    float L[ATT_BQ], D[ATT_BQ];
    for (int i = 0; i < ATT_BQ; i++) {
        L[i] = i < nq ? lr[i] : 0.0f;
        D[i] = i < nq ? Dp[(((size_t)b * T + t0 + i) * NH + h) * ds] : 0.0f;
    }
    // the kv head's rows (row stride kst), the block's dq (qst)
    const float *kb, *vb;
    float *dqb;
    size_t kst = ks, qst = qs;
    const int wide = tt_wide();
    if (ws) {
        kv_widen(ws, kv, k, v, b, h / group, t0 + nq, T, NKV, HS);
        float *w = att16_blk(ws, T, HS);
        widen_rows(w, (const uint16_t *)q + qo, qs, nq, HS);
        widen_rows(w + ATT_BQ * HS, (const uint16_t *)dout + qo, qs, nq, HS);
        load_t(qt, ATT_BQ, w, HS, nq, HS);
        load_t(dot_t, ATT_BQ, w + ATT_BQ * HS, HS, nq, HS);
        kb = ws, vb = ws + (size_t)T * HS, dqb = w + 2 * ATT_BQ * HS, kst = qst = (size_t)HS;
    } else {
        load_t(qt, ATT_BQ, (const float *)q + qo, qs, nq, HS);
        load_t(dot_t, ATT_BQ, (const float *)dout + qo, qs, nq, HS);
        kb = (const float *)k + kbo, vb = (const float *)v + kbo, dqb = (float *)dq + qo;
    }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_BK) {
        const int nk = t0 + nq - s0 < ATT_BK ? t0 + nq - s0 : ATT_BK;
        mm_tile(wide, st, ATT_BQ, kb + (size_t)s0 * kst, kst, 1, qt, ATT_BQ, nk, ATT_BQ, HS, 0, NULL);
        mm_tile(wide, dpt, ATT_BQ, vb + (size_t)s0 * kst, kst, 1, dot_t, ATT_BQ, nk, ATT_BQ, HS, 0, NULL);
        grad_cols(wide, st, dpt, nk, L, D, scale);
        mask_tile(dpt, s0, nk, t0, 0.0f);
        // dq (nq, HS) (+)= dS (nq, nk) · k: dS read transposed from the (nk, BQ) tile
        mm_tile(wide, dqb, (int)qst, dpt, 1, ATT_BQ, kb + (size_t)s0 * kst, (int)kst, nq, HS, nk, s0 > 0, NULL);
    }
    if (round) round_rows(dqb, qst, nq, HS);
    if (ws) narrow_rows((uint16_t *)dq + qo, qs, dqb, nq, HS);
}

// dq, dk and dv of kv head g of batch b, every tile's P and dS formed once (the split passes
// above form them twice, once per side). Heads of the group in order, then query blocks in
// order, then key blocks in order: each dq block adds its key blocks in order (as dq_task),
// and each dk/dv block its (head, query block) products in dkdv_task's order. Tiles hold keys
// as rows, as dq_task's do (S = k·qᵀ reads k in place; the query block is transposed once per
// block); dk and dv read them as they lie, dq transposed. The products, their operands'
// values and their order are those of the split passes, so the bits are the same: D is
// formed here as pass 1 forms it (the same products, added in d order), and the rows of a
// key block past the block's last query, which dkdv_task's mask leaves zero and adds (+0),
// are left out (the diagonal tiles' dk and dv products, half of them zero rows before).
// ws NULL: the operands and outputs are FP32 words, read and written where they lie. Else
// they are BF16 halves (attention_backward16) and ws the thread's buffers (att16_t's):
// the kv head's k and v are widened there once, each query block's q, dout and out as the block
// starts, and dk, dv and the block's dq are formed there and narrowed once complete and rounded.
// The same words in the same products: the same bits.
TT_CLONES
static void bwd_task(void *dq, void *dk, void *dv, const void *dout, const void *q, const void *k, const void *v,
                     const void *out, const float *lse, int b, int g, int T, int NH, int NKV, int HS, int round,
                     float *ws) {
    const int group = NH / NKV;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS, kbo = (size_t)b * T * ks + (size_t)g * HS;
    const size_t kst = ws ? (size_t)HS : ks, th = (size_t)T * HS; // the row stride of kb, vb, dk0 and dv0
    const float scale = 1.0f / sqrtf((float)HS);
    const float *kb, *vb;
    float *dk0, *dv0;
    if (ws) {
        widen_rows(ws, (const uint16_t *)k + kbo, ks, T, HS);
        widen_rows(ws + th, (const uint16_t *)v + kbo, ks, T, HS);
        kb = ws, vb = ws + th, dk0 = ws + 2 * th, dv0 = ws + 3 * th;
    } else {
        kb = (const float *)k + kbo, vb = (const float *)v + kbo, dk0 = (float *)dk + kbo, dv0 = (float *)dv + kbo;
    }
    float qt[ATT_HS_MAX * ATT_BQ], dot_t[ATT_HS_MAX * ATT_BQ]; // (HS, BQ); qt holds out's tile first, for D
    float st[ATT_BK * ATT_BQ], dpt[ATT_BK * ATT_BQ];          // (BK, BQ)
    float L[ATT_BQ], D[ATT_BQ];
    const int wide = tt_wide();
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *lr = lse + ((size_t)b * NH + h) * T;
        for (int t0 = 0; t0 < T; t0 += ATT_BQ) {
            const int nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            // the block's q, dout, out and dq (row stride qst)
            const float *qb, *dob, *ob;
            float *dqb;
            size_t qst = qs;
            if (ws) {
                float *w = att16_blk(ws, T, HS);
                widen_rows(w, (const uint16_t *)q + qo, qs, nq, HS);
                widen_rows(w + ATT_BQ * HS, (const uint16_t *)dout + qo, qs, nq, HS);
                widen_rows(w + 2 * ATT_BQ * HS, (const uint16_t *)out + qo, qs, nq, HS);
                qb = w, dob = w + ATT_BQ * HS, ob = w + 2 * ATT_BQ * HS, dqb = w + 3 * ATT_BQ * HS, qst = (size_t)HS;
            } else {
                qb = (const float *)q + qo, dob = (const float *)dout + qo, ob = (const float *)out + qo;
                dqb = (float *)dq + qo;
            }
            for (int i = 0; i < ATT_BQ; i++) L[i] = i < nq ? lr[t0 + i] : 0.0f;
            load_t(dot_t, ATT_BQ, dob, qst, nq, HS);
            load_t(qt, ATT_BQ, ob, qst, nq, HS);
            // D = dout·out of each query row: lane i adds its products in d order, as d_rows
            // does (the rows past nq are zero in both tiles, so their D is 0)
            for (int iv = 0; iv < ATT_BQ; iv += 8) {
                v8f sum = splat8(0.0f);
                for (int d = 0; d < HS; d++)
                    sum += ld8(dot_t + (size_t)d * ATT_BQ + iv) * ld8(qt + (size_t)d * ATT_BQ + iv);
                st8(D + iv, sum);
            }
            load_t(qt, ATT_BQ, qb, qst, nq, HS);
            for (int s0 = 0; s0 < t0 + nq; s0 += ATT_BK) {
                const int nk = t0 + nq - s0 < ATT_BK ? t0 + nq - s0 : ATT_BK; // keys ≤ the block's last query
                const int nkf = T - s0 < ATT_BK ? T - s0 : ATT_BK;             // the key block's rows
                mm_tile(wide, st, ATT_BQ, kb + (size_t)s0 * kst, kst, 1, qt, ATT_BQ, nk, ATT_BQ, HS, 0, NULL);
                mm_tile(wide, dpt, ATT_BQ, vb + (size_t)s0 * kst, kst, 1, dot_t, ATT_BQ, nk, ATT_BQ, HS, 0, NULL);
                grad_cols(wide, st, dpt, nk, L, D, scale);
                mask_tile(st, s0, nk, t0, 0.0f);
                mask_tile(dpt, s0, nk, t0, 0.0f);
                // dq (nq, HS) (+)= dS (nq, nk) · k; dv (nk, HS) (+)= Pᵀ · dout, dk (+)= dSᵀ · q
                mm_tile(wide, dqb, (int)qst, dpt, 1, ATT_BQ, kb + (size_t)s0 * kst, (int)kst, nq, HS, nk, s0 > 0, NULL);
                const int first = h == g * group && t0 == s0; // the key block's first product: "="
                float *dvb = dv0 + (size_t)s0 * kst, *dkb = dk0 + (size_t)s0 * kst;
                mm_tile(wide, dvb, (int)kst, st, ATT_BQ, 1, dob, (int)qst, nk, HS, nq, !first, NULL);
                mm_tile(wide, dkb, (int)kst, dpt, ATT_BQ, 1, qb, (int)qst, nk, HS, nq, !first, NULL);
                // the key block's rows past the block's last query: no product of this query
                // block reaches them (dkdv_task adds its tile's zero rows, +0, to a sum that is
                // never −0: the same values); on the first visit they start at +0, as a zero
                // row's product would
                if (first)
                    for (int r = nk; r < nkf; r++) {
                        memset(dvb + (size_t)r * kst, 0, (size_t)HS * sizeof(float));
                        memset(dkb + (size_t)r * kst, 0, (size_t)HS * sizeof(float));
                    }
            }
            if (round) round_rows(dqb, qst, nq, HS); // the block's dq is complete
            if (ws) narrow_rows((uint16_t *)dq + qo, qs, dqb, nq, HS);
        }
    }
    if (round) { round_rows(dk0, kst, T, HS); round_rows(dv0, kst, T, HS); }
    if (ws) {
        narrow_rows((uint16_t *)dk + kbo, ks, dk0, T, HS);
        narrow_rows((uint16_t *)dv + kbo, ks, dv0, T, HS);
    }
}

// D = dout·out of eight consecutive rows (rows of HS), at D[u·ds] for row u (parked in
// dq[row][0]: ds = HS): lane u is row u's sum, taken in d order as dot_seq does; the rows are
// read in 8×8 blocks turned so that one vector holds element d of all eight.
TT_CLONES
static void d_rows(float *D, size_t ds, const float *dout, const float *out, int HS) {
    float a[64], b[64];
    v8f sum = splat8(0.0f);
    int d = 0;
    for (; d + 8 <= HS; d += 8) {
        tr8(a, 8, dout + d, (size_t)HS);
        tr8(b, 8, out + d, (size_t)HS);
        for (int e = 0; e < 8; e++) sum += ld8(a + 8 * e) * ld8(b + 8 * e);
    }
    for (; d < HS; d++) {
        for (int u = 0; u < 8; u++) { a[u] = dout[(size_t)u * HS + d]; b[u] = out[(size_t)u * HS + d]; }
        sum += ld8(a) * ld8(b);
    }
    for (int u = 0; u < 8; u++) D[(size_t)u * ds] = sum[u];
}

// D of n ≤ 8 consecutive rows (rows of HS from dout and out) at D[u·ds]: d_rows for eight,
// dot_seq row by row for fewer (the same sums).
static void d_block(float *D, size_t ds, const float *dout, const float *out, int n, int HS) {
    if (n == 8) {
        d_rows(D, ds, dout, out, HS);
        return;
    }
    for (int u = 0; u < n; u++) D[(size_t)u * ds] = dot_seq(dout + (size_t)u * HS, out + (size_t)u * HS, HS);
}

// The backward's one pass (a task per kv head) when there are enough kv heads to share out
// evenly, else the split passes: attention_backward's rule and attention_backward16's, and
// so what attention_workspace_bytes counts D for.
static int bwd_fused(int B, int NKV, int threads) { return (long)B * NKV >= (long)ATT_FUSED_TASKS * threads; }

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        int B, int T, int NH, int NKV, int HS, int round) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;

    // On AMX (attention_amx.h): a task per kv head, whatever the thread count; the kv heads it
    // declines take the one pass below (bwd_task), which computes its own D.
    att_amx_t *x = att_amx_prepare(k, v, 0, B, T, NH, NKV, HS, 1);
    if (x) {
        #pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int g = 0; g < NKV; g++)
            for (int b = 0; b < B; b++)
                if (att_amx_bwd_task(x, dq, dk, dv, dout, q, out, lse, b, g, round, grad_wide, mask_tile))
                    bwd_task(dq, dk, dv, dout, q, k, v, out, lse, b, g, T, NH, NKV, HS, round, NULL);
        att_amx_done(x);
        return;
    }

    const int fused = HS <= ATT_HS_MAX && bwd_fused(B, NKV, omp_get_max_threads()); // the one pass, below

    // ---- pass 1: D = dout·out per query row (in order over d), parked in dq[row][0]
    //      eight rows at a time (d_rows), the last few one by one (the one pass takes its own)
    const long nr = fused ? 0 : (long)B * T * NH;
    if (nr > 0) {
        #pragma omp parallel for schedule(static)
        for (long r0 = 0; r0 < nr; r0 += 8)
            d_block(dq + (size_t)r0 * HS, (size_t)HS, dout + (size_t)r0 * HS, out + (size_t)r0 * HS,
                    nr - r0 < 8 ? (int)(nr - r0) : 8, HS);
    }

    if (HS > ATT_HS_MAX) {
        attention_backward_plain(dq, dk, dv, dout, q, k, v, lse, B, T, NH, NKV, HS, round);
        return;
    }
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ, nkb = (T + ATT_BK - 1) / ATT_BK;

    // ---- one pass, a task per kv head, when there are enough of them to share out evenly
    //      (equal tasks; the same bits as the split passes, which have finer tasks)
    //      kv heads outermost: threads that start together take the same kv head of different
    //      batch rows, whose rows of dq, dk and dv lie apart (the group beside the one a thread
    //      writes, in the same rows, is where its prefetches land: batch rows innermost made
    //      the backward 1.3× slower on two cores, measured on a Xeon)
    if (fused) {
        #pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int g = 0; g < NKV; g++)
            for (int b = 0; b < B; b++) bwd_task(dq, dk, dv, dout, q, k, v, out, lse, b, g, T, NH, NKV, HS, round, NULL);
        return;
    }

    // ---- pass 2: dk, dv per key block of one kv head (early key blocks have the most work)
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++)
            for (int kbi = 0; kbi < nkb; kbi++)
                dkdv_task(dk, dv, dq, (size_t)HS, dout, q, k, v, lse, b, g, kbi, T, NH, NKV, HS, round, NULL);

    // ---- pass 3: dq per query block of one head (late query blocks have the most work)
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qb = nqb - 1; qb >= 0; qb--)
                dq_task(dq, dq, (size_t)HS, dout, q, k, v, lse, b, h, qb, T, NH, NKV, HS, round, NULL, NULL);
}

// ---------------------------------------------------------------- BF16 activations
// attention_forward16 and attention_backward16 (kernels.h): on AMX tiles where attention_forward
// would run there (attention_amx.c: the same packed tiles from the same values, and the same
// FP32 outputs rounded then narrowed; the tasks decline nothing, halves being BF16 values),
// else the FMA tasks above on FP32 words widened from the halves into each thread's buffers,
// their outputs formed there, rounded and narrowed: attention_forward's and
// attention_backward's bits either way (the backward's one pass or split passes chosen as
// there; the split passes keep D in an array of their own, which dq's halves cannot hold).

int attention_act16(int NH, int NKV, int HS) { return HS > 0 && HS <= ATT_HS_MAX && NKV > 0 && NH % NKV == 0; }

size_t attention_workspace_bytes(int B, int T, int NH, int NKV, int HS, int h16, int tiles, int threads) {
    if (B <= 0 || T <= 0 || NH <= 0 || threads < 1) return 0;
    if (tiles && att_amx_ok(NH, NKV, HS)) return att_amx_bytes(B, T, NKV, HS, h16, 1, threads); // the backward's: the larger
    if (!h16 || !attention_act16(NH, NKV, HS)) return 0; // the FMA tasks on FP32 words: their stacks alone
    return att16_bytes(T, HS, bwd_fused(B, NKV, threads) ? 0 : (size_t)B * T * NH, (size_t)threads);
}

int attention_reserve(int B, int T, int NH, int NKV, int HS, int h16, int tiles, int threads) {
    const size_t bytes = attention_workspace_bytes(B, T, NH, NKV, HS, h16, tiles, threads);
    if (!bytes) return 0;
    return tiles && att_amx_ok(NH, NKV, HS) ? att_amx_reserve(bytes) : held_reserve(&a16_held, bytes);
}

size_t attention_held_bytes(void) { return held_bytes(&a16_held) + att_amx_held(); }

void attention_release(void) {
    held_free(&a16_held);
    att_amx_release();
}

// Query block qb of head h, batch b, from the halves: the thread's kv head's rows widened as
// far as the block reads (kv_widen), its queries widened, its out formed in the buffers and
// narrowed.
TT_CLONES
static void fwd_task16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int b,
                       int h, int qb, int T, int NH, int NKV, int HS, float *ws, att16_kv_t *kv) {
    const int t0 = qb * ATT_BQ, nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
    const size_t qs = (size_t)NH * HS, qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
    float *wq = att16_blk(ws, T, HS), *wo = wq + ATT_BQ * HS;
    kv_widen(ws, kv, k, v, b, h / (NH / NKV), t0 + nq, T, NKV, HS);
    widen_rows(wq, q + qo, qs, nq, HS);
    fwd_block(wo, (size_t)HS, lse + ((size_t)b * NH + h) * T + t0, wq, (size_t)HS, ws, ws + (size_t)T * HS, (size_t)HS,
              t0, nq, HS, 1);
    narrow_rows(out + qo, qs, wo, nq, HS);
}

int attention_forward16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B, int T,
                        int NH, int NKV, int HS) {
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    if (!attention_act16(NH, NKV, HS)) return 1;
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ;
    att_amx_t *x = att_amx_prepare(k, v, 1, B, T, NH, NKV, HS, 0);
    if (x) {
        #pragma omp parallel for collapse(3) schedule(dynamic, 1)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int qb = nqb - 1; qb >= 0; qb--) // longest first, as attention_forward's
                    att_amx_fwd_task(x, out, lse, q, b, h, qb, 1, softmax_wide, mask_tile);
        att_amx_done(x);
        return 0;
    }
    att16_t a;
    if (att16_hold(&a, T, HS, 0)) return 1;
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qb = nqb - 1; qb >= 0; qb--)
                fwd_task16(out, lse, q, k, v, b, h, qb, T, NH, NKV, HS, att16_ws(&a), att16_kv(&a));
    att16_done();
    return 0;
}

int attention_backward16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B, int T, int NH,
                         int NKV, int HS) {
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    if (!attention_act16(NH, NKV, HS)) return 1;
    att_amx_t *x = att_amx_prepare(k, v, 1, B, T, NH, NKV, HS, 1);
    if (x) {
        #pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int g = 0; g < NKV; g++)
            for (int b = 0; b < B; b++) att_amx_bwd_task(x, dq, dk, dv, dout, q, out, lse, b, g, 1, grad_wide, mask_tile);
        att_amx_done(x);
        return 0;
    }
    const int fused = bwd_fused(B, NKV, omp_get_max_threads());
    att16_t a;
    if (att16_hold(&a, T, HS, fused ? 0 : (size_t)B * T * NH)) return 1;
    if (fused) {
        // kv heads outermost, as attention_backward's one pass
        #pragma omp parallel for collapse(2) schedule(dynamic, 1)
        for (int g = 0; g < NKV; g++)
            for (int b = 0; b < B; b++) bwd_task(dq, dk, dv, dout, q, k, v, out, lse, b, g, T, NH, NKV, HS, 1, att16_ws(&a));
        att16_done();
        return 0;
    }
    // pass 1: D of every query row (its own array: dq's halves cannot hold it), from the rows'
    // widened words, eight rows at a time as attention_backward's pass 1
    const long nr = (long)B * T * NH;
    #pragma omp parallel for schedule(static)
    for (long r0 = 0; r0 < nr; r0 += 8) {
        float *w = att16_ws(&a);
        const int n = nr - r0 < 8 ? (int)(nr - r0) : 8;
        widen_rows(w, dout + (size_t)r0 * HS, (size_t)HS, n, HS);
        widen_rows(w + 8 * (size_t)HS, out + (size_t)r0 * HS, (size_t)HS, n, HS);
        d_block(a.d + r0, 1, w, w + 8 * (size_t)HS, n, HS);
    }
    // passes 2 and 3 as attention_backward's
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ, nkb = (T + ATT_BK - 1) / ATT_BK;
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++)
            for (int kbi = 0; kbi < nkb; kbi++)
                dkdv_task(dk, dv, a.d, 1, dout, q, k, v, lse, b, g, kbi, T, NH, NKV, HS, 1, att16_ws(&a));
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qb = nqb - 1; qb >= 0; qb--)
                dq_task(dq, a.d, 1, dout, q, k, v, lse, b, h, qb, T, NH, NKV, HS, 1, att16_ws(&a), att16_kv(&a));
    att16_done();
    return 0;
}
