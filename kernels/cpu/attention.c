// attention.c — causal grouped-query attention, FP32 (kernels.h "attention").
// Tiled like FlashAttention, on the CPU. A task owns a block of ATT_BQ query rows of one head
// (forward, dq) or a block of ATT_BK key rows of one kv head (dk, dv), walks the other side
// in fixed blocks, and forms every product with one small fixed-order GEMM micro-kernel
// (mm_tile) on tiles held on the stack. No (T, T) buffer, no allocation.
//   Forward, task (b, h, query block): Sᵀ = k·qᵀ for a (BK, BQ) tile, online softmax per
//   query (running max m and sum l; out rescaled when m grows), out += P·v. lse = m + log l
//   is kept so that backward recomputes P = exp(S·scale − lse) exactly.
//   Backward, with D_t = dout_t·out_t and dS = P ⊙ (dout·vᵀ − D):
//     dq_t = scale · Σ_s dS_ts k_s                           task (b, h, query block)
//     dk_s = scale · Σ_{t≥s, h∈group} dS_ts q_t,  dv_s = Σ P_ts dout_t
//                                                            task (b, kv head, key block)
// Tiles are kept with keys as rows and queries as columns, so the softmax statistics of a
// query are vertical (lane-wise) vector ops and nothing is transposed inside the key loop.
// Determinism: every output element is written by exactly one task, and what it adds and in
// which order is fixed by the block constants, never by the thread count (mm_tile adds its
// products in k order; tile sums run in row order). D is parked in element 0 of each dq row
// between the passes (dq is an "=" output written last), so backward needs no scratch.
// Vector code: GCC vector extensions (8 floats); each task is compiled twice, for AVX2 and
// for the x86-64 baseline, and the loader picks by CPU. Only elementwise IEEE operations,
// no FMA (-ffp-contract=off), so both clones give the same bits.
// Head sizes above ATT_HS_MAX (tiles would not fit on the stack) take a plain per-row path
// with the same semantics. Called by the CPU backend's attention op.
#include "kernels.h"
#include <math.h>
#include <string.h>
#include "simd.h"

#define ATT_BQ 32      // query rows per tile (a multiple of 8: one tile row is BQ/8 vectors)
#define ATT_BK 64      // key rows per tile
#define ATT_HS_MAX 256 // largest head size of the tiled path (a (HS, BQ) tile is 32 KiB)
// A key tile starts at a multiple of BK ≤ the first query of the block (BK a multiple of BQ),
// so every query of a tile sees at least one unmasked key and its running max is finite.
_Static_assert(ATT_BK % ATT_BQ == 0 && ATT_BQ % 8 == 0, "tile sizes");

// C (M, N) (+)= A (M, K) · B (K, N): C and B row-major with leading dimensions, A element
// (i, k) at A[i·sai + k·sak] (so A can be read transposed). acc = 0 starts from zero. Each
// element adds its K products in k order, one rounding per multiply and per add: the same
// bits whatever the tile path or vector width. 4×16 register tiles, then 4×8, then scalar.
INLINE void mm_tile(float *restrict C, int ldc, const float *restrict A, size_t sai, size_t sak,
                    const float *restrict B, int ldb, int M, int N, int K, int acc) {
    int i = 0;
    for (; i < M; i += 4) {
        const int mr = M - i < 4 ? M - i : 4; // rows in this strip (tail strips are narrower)
        const float *a0 = A + (size_t)i * sai, *a1 = a0 + (mr > 1 ? sai : 0);
        const float *a2 = a0 + (mr > 2 ? 2 * sai : 0), *a3 = a0 + (mr > 3 ? 3 * sai : 0);
        float *c0 = C + (size_t)i * ldc, *c1 = c0 + (mr > 1 ? ldc : 0);
        float *c2 = c0 + (mr > 2 ? 2 * ldc : 0), *c3 = c0 + (mr > 3 ? 3 * ldc : 0);
        int j = 0;
        if (mr == 4) {
            for (; j + 16 <= N; j += 16) {
                v8f z = splat8(0.0f);
                v8f r00 = acc ? ld8(c0 + j) : z, r01 = acc ? ld8(c0 + j + 8) : z;
                v8f r10 = acc ? ld8(c1 + j) : z, r11 = acc ? ld8(c1 + j + 8) : z;
                v8f r20 = acc ? ld8(c2 + j) : z, r21 = acc ? ld8(c2 + j + 8) : z;
                v8f r30 = acc ? ld8(c3 + j) : z, r31 = acc ? ld8(c3 + j + 8) : z;
                for (int k = 0; k < K; k++) {
                    const float *bk = B + (size_t)k * ldb + j;
                    v8f b0 = ld8(bk), b1 = ld8(bk + 8);
                    size_t ak = (size_t)k * sak;
                    float x0 = a0[ak], x1 = a1[ak], x2 = a2[ak], x3 = a3[ak];
                    r00 += x0 * b0; r01 += x0 * b1;
                    r10 += x1 * b0; r11 += x1 * b1;
                    r20 += x2 * b0; r21 += x2 * b1;
                    r30 += x3 * b0; r31 += x3 * b1;
                }
                st8(c0 + j, r00); st8(c0 + j + 8, r01);
                st8(c1 + j, r10); st8(c1 + j + 8, r11);
                st8(c2 + j, r20); st8(c2 + j + 8, r21);
                st8(c3 + j, r30); st8(c3 + j + 8, r31);
            }
        }
        for (; j + 8 <= N; j += 8) { // one row at a time: tails of N and of M
            for (int r = 0; r < mr; r++) {
                const float *ar = A + (size_t)(i + r) * sai;
                float *cr = C + (size_t)(i + r) * ldc;
                v8f c = acc ? ld8(cr + j) : splat8(0.0f);
                for (int k = 0; k < K; k++) c += ar[(size_t)k * sak] * ld8(B + (size_t)k * ldb + j);
                st8(cr + j, c);
            }
        }
        for (; j < N; j++)
            for (int r = 0; r < mr; r++) {
                const float *ar = A + (size_t)(i + r) * sai;
                float c = acc ? C[(size_t)(i + r) * ldc + j] : 0.0f;
                for (int k = 0; k < K; k++) c += ar[(size_t)k * sak] * B[(size_t)k * ldb + j];
                C[(size_t)(i + r) * ldc + j] = c;
            }
    }
}

// dst (HS, BQ) = rows [0, n) of src (row stride sstride) transposed; columns n.. are zero.
INLINE void load_t(float *restrict dst, const float *restrict src, size_t sstride, int n, int HS) {
    for (int j = 0; j < n; j++) {
        const float *s = src + (size_t)j * sstride;
        for (int d = 0; d < HS; d++) dst[(size_t)d * ATT_BQ + j] = s[d];
    }
    for (int d = 0; d < HS && n < ATT_BQ; d++) memset(dst + (size_t)d * ATT_BQ + n, 0, (size_t)(ATT_BQ - n) * sizeof(float));
}

static void zero_rows(float *x, size_t stride, int n, int len) {
    for (int r = 0; r < n; r++) memset(x + (size_t)r * stride, 0, (size_t)len * sizeof(float));
}

// Causal mask of a (nk, BQ) tile, keys s0.., queries t0..: entries with key > query become
// `fill`. Only tiles that reach past the diagonal have any.
static void mask_tile(float *tile, int s0, int nk, int t0, float fill) {
    if (s0 + nk - 1 <= t0) return;
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < ATT_BQ && t0 + i < s0 + j; i++) tile[(size_t)j * ATT_BQ + i] = fill;
}

// ---------------------------------------------------------------- plain path (HS > ATT_HS_MAX)
// Σ a[i]·b[i] in i order.
static float dot_seq(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void attention_forward_plain(float *out, float *lse, const float *q, const float *k, const float *v,
                                    int B, int T, int NH, int NKV, int HS) {
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
                lse[((size_t)b * NH + h) * T + t] = m + logf(l);
            }
}

static void attention_backward_plain(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                     const float *k, const float *v, const float *lse,
                                     int B, int T, int NH, int NKV, int HS) {
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
            }
}

// ---------------------------------------------------------------- forward
TT_CLONES
static void fwd_task(float *out, float *lse, const float *q, const float *k, const float *v,
                     int b, int h, int qb, int T, int NH, int NKV, int HS) {
    const int group = NH / NKV, t0 = qb * ATT_BQ, nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *kb = k + (size_t)b * T * ks + (size_t)(h / group) * HS;
    const float *vb = v + (size_t)b * T * ks + (size_t)(h / group) * HS;
    float *oblk = out + ((size_t)b * T + t0) * qs + (size_t)h * HS;
    float qt[ATT_HS_MAX * ATT_BQ]; // (HS, BQ): the query block transposed, once per task
    float st[ATT_BK * ATT_BQ];     // (BK, BQ): scores, then probabilities
    float m[ATT_BQ], l[ATT_BQ], corr[ATT_BQ];
    load_t(qt, q + ((size_t)b * T + t0) * qs + (size_t)h * HS, qs, nq, HS);
    zero_rows(oblk, qs, nq, HS);
    for (int i = 0; i < ATT_BQ; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_BK) {
        const int nk = t0 + nq - s0 < ATT_BK ? t0 + nq - s0 : ATT_BK;
        mm_tile(st, ATT_BQ, kb + (size_t)s0 * ks, ks, 1, qt, ATT_BQ, nk, ATT_BQ, HS, 0); // Sᵀ = k·qᵀ
        for (int j = 0; j < nk; j++)
            for (int iv = 0; iv < ATT_BQ; iv += 8) st8(st + j * ATT_BQ + iv, ld8(st + j * ATT_BQ + iv) * scale);
        mask_tile(st, s0, nk, t0, -INFINITY);
        for (int iv = 0; iv < ATT_BQ; iv += 8) {
            v8f bm = ld8(st + iv);
            for (int j = 1; j < nk; j++) bm = max8(bm, ld8(st + j * ATT_BQ + iv));
            v8f mo = ld8(m + iv), mn = max8(mo, bm);
            v8f c = exp8(mo - mn); // exp(−inf) = 0 on the first tile
            v8f sum = splat8(0.0f);
            for (int j = 0; j < nk; j++) { // probabilities, summed in key order
                v8f p = exp8(ld8(st + j * ATT_BQ + iv) - mn);
                st8(st + j * ATT_BQ + iv, p);
                sum += p;
            }
            st8(l + iv, ld8(l + iv) * c + sum);
            st8(m + iv, mn);
            st8(corr + iv, c);
        }
        for (int i = 0; i < nq; i++) { // rescale what was accumulated under the old max
            float *restrict o = oblk + (size_t)i * qs;
            #pragma omp simd
            for (int d = 0; d < HS; d++) o[d] *= corr[i];
        }
        mm_tile(oblk, (int)qs, st, 1, ATT_BQ, vb + (size_t)s0 * ks, (int)ks, nq, HS, nk, 1); // out += P·v
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i], *restrict o = oblk + (size_t)i * qs;
        #pragma omp simd
        for (int d = 0; d < HS; d++) o[d] *= inv;
        lse[((size_t)b * NH + h) * T + t0 + i] = m[i] + logf(l[i]);
    }
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int NH, int NKV, int HS) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    if (HS > ATT_HS_MAX) { attention_forward_plain(out, lse, q, k, v, B, T, NH, NKV, HS); return; }
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ;
    // Later query blocks see more keys: dynamic scheduling balances them (results unaffected).
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qb = nqb - 1; qb >= 0; qb--) // longest first
                fwd_task(out, lse, q, k, v, b, h, qb, T, NH, NKV, HS);
}

// ---------------------------------------------------------------- backward
// P and dS·scale of a (nk, BQ) tile in place: st holds Sᵀ, dpt holds dPᵀ = v·doutᵀ.
INLINE void grad_tile(float *st, float *dpt, int nk, const float *L, const float *D, float scale) {
    for (int iv = 0; iv < ATT_BQ; iv += 8) {
        v8f lv = ld8(L + iv), dv = ld8(D + iv);
        for (int j = 0; j < nk; j++) {
            v8f p = exp8(ld8(st + j * ATT_BQ + iv) * scale - lv);
            st8(st + j * ATT_BQ + iv, p);
            st8(dpt + j * ATT_BQ + iv, (p * (ld8(dpt + j * ATT_BQ + iv) - dv)) * scale);
        }
    }
}

// dk, dv rows [s0, s0+nk) of kv head g: every query t ≥ s of the group's heads, heads in
// order, then query blocks in order (each row adds in t order per head).
TT_CLONES
static void dkdv_task(float *dk, float *dv, const float *dq, const float *dout, const float *q,
                      const float *k, const float *v, const float *lse,
                      int b, int g, int kbi, int T, int NH, int NKV, int HS) {
    const int group = NH / NKV, s0 = kbi * ATT_BK, nk = T - s0 < ATT_BK ? T - s0 : ATT_BK;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t ko = ((size_t)b * T + s0) * ks + (size_t)g * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    float qt[ATT_HS_MAX * ATT_BQ], dot_t[ATT_HS_MAX * ATT_BQ]; // (HS, BQ)
    float st[ATT_BK * ATT_BQ], dpt[ATT_BK * ATT_BQ];          // (BK, BQ)
    float L[ATT_BQ], D[ATT_BQ];
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *lr = lse + ((size_t)b * NH + h) * T;
        for (int t0 = (s0 / ATT_BQ) * ATT_BQ; t0 < T; t0 += ATT_BQ) {
            const int nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            load_t(qt, q + qo, qs, nq, HS);
            load_t(dot_t, dout + qo, qs, nq, HS);
            for (int i = 0; i < ATT_BQ; i++) {
                L[i] = i < nq ? lr[t0 + i] : 0.0f;
                D[i] = i < nq ? dq[qo + (size_t)i * qs] : 0.0f; // D parked in dq[row][0]
            }
            mm_tile(st, ATT_BQ, k + ko, ks, 1, qt, ATT_BQ, nk, ATT_BQ, HS, 0);     // Sᵀ = k·qᵀ
            mm_tile(dpt, ATT_BQ, v + ko, ks, 1, dot_t, ATT_BQ, nk, ATT_BQ, HS, 0); // dPᵀ = v·doutᵀ
            grad_tile(st, dpt, nk, L, D, scale);
            mask_tile(st, s0, nk, t0, 0.0f);
            mask_tile(dpt, s0, nk, t0, 0.0f);
            int first = h == g * group && t0 == (s0 / ATT_BQ) * ATT_BQ; // first product: "="
            mm_tile(dv + ko, (int)ks, st, ATT_BQ, 1, dout + qo, (int)qs, nk, HS, nq, !first);
            mm_tile(dk + ko, (int)ks, dpt, ATT_BQ, 1, q + qo, (int)qs, nk, HS, nq, !first);
        }
    }
}

// dq rows [t0, t0+nq) of head h; reads the rows' parked D first, then overwrites them.
TT_CLONES
static void dq_task(float *dq, const float *dout, const float *q, const float *k, const float *v,
                    const float *lse, int b, int h, int qb, int T, int NH, int NKV, int HS) {
    const int group = NH / NKV, t0 = qb * ATT_BQ, nq = T - t0 < ATT_BQ ? T - t0 : ATT_BQ;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *kb = k + (size_t)b * T * ks + (size_t)(h / group) * HS;
    const float *vb = v + (size_t)b * T * ks + (size_t)(h / group) * HS;
    const float *lr = lse + ((size_t)b * NH + h) * T + t0;
    float qt[ATT_HS_MAX * ATT_BQ], dot_t[ATT_HS_MAX * ATT_BQ]; // (HS, BQ)
    float st[ATT_BK * ATT_BQ], dpt[ATT_BK * ATT_BQ];          // (BK, BQ)
    float L[ATT_BQ], D[ATT_BQ];
    for (int i = 0; i < ATT_BQ; i++) {
        L[i] = i < nq ? lr[i] : 0.0f;
        D[i] = i < nq ? dq[qo + (size_t)i * qs] : 0.0f;
    }
    load_t(qt, q + qo, qs, nq, HS);
    load_t(dot_t, dout + qo, qs, nq, HS);
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_BK) {
        const int nk = t0 + nq - s0 < ATT_BK ? t0 + nq - s0 : ATT_BK;
        mm_tile(st, ATT_BQ, kb + (size_t)s0 * ks, ks, 1, qt, ATT_BQ, nk, ATT_BQ, HS, 0);
        mm_tile(dpt, ATT_BQ, vb + (size_t)s0 * ks, ks, 1, dot_t, ATT_BQ, nk, ATT_BQ, HS, 0);
        grad_tile(st, dpt, nk, L, D, scale);
        mask_tile(dpt, s0, nk, t0, 0.0f);
        // dq (nq, HS) (+)= dS (nq, nk) · k: dS read transposed from the (nk, BQ) tile
        mm_tile(dq + qo, (int)qs, dpt, 1, ATT_BQ, kb + (size_t)s0 * ks, (int)ks, nq, HS, nk, s0 > 0);
    }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        int B, int T, int NH, int NKV, int HS) {
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;

    // ---- pass 1: D = dout·out per query row (in order over d), parked in dq[row][0]
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)B * T * NH; r++)
        dq[(size_t)r * HS] = dot_seq(dout + (size_t)r * HS, out + (size_t)r * HS, HS);

    if (HS > ATT_HS_MAX) {
        attention_backward_plain(dq, dk, dv, dout, q, k, v, lse, B, T, NH, NKV, HS);
        return;
    }
    const int nqb = (T + ATT_BQ - 1) / ATT_BQ, nkb = (T + ATT_BK - 1) / ATT_BK;

    // ---- pass 2: dk, dv per key block of one kv head (early key blocks have the most work)
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++)
            for (int kbi = 0; kbi < nkb; kbi++)
                dkdv_task(dk, dv, dq, dout, q, k, v, lse, b, g, kbi, T, NH, NKV, HS);

    // ---- pass 3: dq per query block of one head (late query blocks have the most work)
    #pragma omp parallel for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qb = nqb - 1; qb >= 0; qb--)
                dq_task(dq, dout, q, k, v, lse, b, h, qb, T, NH, NKV, HS);
}
