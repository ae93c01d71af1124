// matmul.c — the three products of a linear layer (kernels.h "matmul"). Row-major, weights
// (OC, IC) as in nn.Linear.
// On a CPU with FMA they run on gemm_fma (gemm.c): every output element one FMA chain in k
// order, so the bits depend on the operands alone — not on the thread count, the blocking or
// the vector width — and the BF16 rounding is fused into the kernel's last store.
// Without FMA (or under kernels_limit_simd(0)) they run on OpenBLAS sgemm. Its own threading
// changes the bits with its thread count (measured with 0.3.21: 6–10% of elements differ in
// the last bit between 1, 2, 3 and 4 threads), so there each output is cut into tiles whose
// size depends on the output's shape alone (tile_shape), every tile is one single-threaded
// sgemm over the full inner dimension, and OpenMP runs the tiles in parallel. That needs
// OpenBLAS at one thread: each call sets it (openblas_set_num_threads(1), once, when it is
// not already 1); the threads are OpenMP's (--threads → omp_set_num_threads).
// Degenerate shapes (a zero dimension) are handled here: BLAS would reject a zero leading
// dimension, and a zero inner dimension must still write "=" outputs.
// Called by the CPU backend for every linear layer and the LM head.
#include "kernels.h"
#include "gemm.h"
#include "simd.h"
#include <limits.h> // uses: INT_MAX
#include <string.h> // uses: strcmp, memset
#include <cblas.h> // uses: cblas_sgemm, openblas_get_num_threads, openblas_set_num_threads, openblas_get_corename

// Output tiles from MM_TMAX × MM_TMAX down to MM_TMIN × MM_TMIN. Each tile's sgemm packs its
// panels of both operands, so a small tile repacks them often: on 2 threads at 125m's shapes,
// 128 × 256 tiles ran at 170 GF/s, 256 × 512 at 187 and 512 × 512 at 195 (OpenBLAS's own
// threaded sgemm: 200). Halving stops once the output makes MM_MIN_TILES tiles to share out:
// 4, not 8, because on small's (1024, 384..1024) outputs the halving to 8 tiles repacked the
// weights twice as often, and bench train --model small's GEMMs took 217–239 ms a step
// against 207–216 with 4 (three runs each, the same bits). More cores than 4 share a small
// output less well; a large one makes many tiles anyway.
#define MM_TMAX 512
#define MM_TMIN 128
#define MM_MIN_TILES 4

static int tiles_of(int n, int t) { return (n + t - 1) / t; }

// The tile of an M × N output: from the largest, the longer side halved first (rows on a tie),
// and a side only while that adds tiles, until there are MM_MIN_TILES or neither side can
// shrink. The output's shape alone decides: the bits never depend on the thread count.
static void tile_shape(int M, int N, int *tm, int *tn) {
    *tm = *tn = MM_TMAX;
    for (;;) {
        const int grow_m = *tm > MM_TMIN && M > *tm / 2, grow_n = *tn > MM_TMIN && N > *tn / 2;
        if (tiles_of(M, *tm) * tiles_of(N, *tn) >= MM_MIN_TILES || (!grow_m && !grow_n)) return;
        if (grow_n && (*tn > *tm || !grow_m)) *tn /= 2;
        else *tm /= 2;
    }
}

static void blas_one_thread(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

static void fill_zero(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

// The m × n tile at c (row stride ldc) rounded to BF16 values, while it is in cache.
TT_CLONES
static void round_tile(float *c, int ldc, int m, int n) {
    for (int i = 0; i < m; i++) tt_round_n(c + (size_t)i * ldc, (size_t)n);
}

// C (M, N) = op(A) (M, K) · op(B) (K, N) + beta·C, row-major, by tile_shape's tiles of C,
// each one single-threaded sgemm over all of K (then rounded to BF16 values when round).
// For CPUs without FMA.
static void gemm_blas(int transa, int transb, int M, int N, int K, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc, int round) {
    int TM, TN;
    tile_shape(M, N, &TM, &TN);
    const int tm = tiles_of(M, TM), tn = tiles_of(N, TN);
    blas_one_thread();
    #pragma omp parallel for schedule(dynamic, 1) if (tm * tn > 1)
    for (int t = 0; t < tm * tn; t++) {
        const int r0 = (t / tn) * TM, c0 = (t % tn) * TN;
        const int m = M - r0 < TM ? M - r0 : TM, n = N - c0 < TN ? N - c0 : TN;
        // row r of op(A): A + r·lda (no transpose) or A + r (transposed); likewise B's columns
        const float *a = transa ? A + r0 : A + (size_t)r0 * lda;
        const float *b = transb ? B + (size_t)c0 * ldb : B + c0;
        cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
                    m, n, K, 1.0f, a, lda, b, ldb, beta, C + (size_t)r0 * ldc + c0, ldc);
        if (round) round_tile(C + (size_t)r0 * ldc + c0, ldc, m, n);
    }
}

// C = op(A) · op(B) (accumulate 0) or C += (1), then rounded when round: gemm_fma where the
// CPU has FMA, else OpenBLAS.
static void gemm(int transa, int transb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                 int accumulate, float *C, int ldc, int round) {
    if (gemm_fma_path() > 0) gemm_fma(transa, transb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, round);
    else gemm_blas(transa, transb, M, N, K, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc, round);
}

void matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC, int round) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) { fill_zero(out, (size_t)N * OC); return; } // zeros are BF16 values
    // out (N, OC) = inp (N, IC) · wᵀ
    gemm(0, 1, N, OC, IC, inp, IC, w, IC, 0, out, OC, round);
}

void matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IC, int OC, int accumulate,
                           int round) {
    if (N <= 0 || IC <= 0) return;
    if (OC <= 0) { // nothing to add: "=" writes zeros; "+=" leaves dinp, rounded when asked
        if (!accumulate) fill_zero(dinp, (size_t)N * IC);
        else if (round) bf16_round_n(dinp, (size_t)N * IC);
        return;
    }
    // dinp (N, IC) (+)= dout (N, OC) · w (OC, IC)
    gemm(0, 0, N, IC, OC, dout, OC, w, IC, accumulate, dinp, IC, round);
}

// The FP32 product's w: BF16 widened into scratch (none for a degenerate shape, which the
// FP32 product handles without reading w).
static const float *widened(float *scratch, const uint16_t *w, int IC, int OC) {
    if (IC > 0 && OC > 0) bf16_to_f32_n(scratch, w, (size_t)OC * IC);
    return scratch;
}

void matmul_forward_w16(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC, int OC,
                        int round) {
    if (N <= 0) return; // no rows: nothing to write (matmul_forward's), and no widening
    if (gemm_fma_path() > 0 && N > 0 && IC > 0 && OC > 0)
        gemm_fma_b16(0, 1, N, OC, IC, inp, IC, w, IC, 0, out, OC, round);
    else
        matmul_forward(out, inp, widened(scratch, w, IC, OC), N, IC, OC, round);
}

void matmul_forward_w16_n(int n, float *const out[], const uint16_t *const w[], const int OC[], const float *inp,
                          float *scratch, int N, int IC, int round) {
    enum { MAX_N = 8 };
    int shared = n <= MAX_N && N > 0 && IC > 0 && gemm_fma_path() > 0;
    for (int i = 0; i < n && shared; i++) shared = OC[i] > 0;
    if (shared) { // out[i] (N, OC[i]) = inp (N, IC) · w[i]ᵀ: B transposed, its row stride IC
        int ldb[MAX_N];
        for (int i = 0; i < n; i++) ldb[i] = IC;
        gemm_fma_b16_shared_a(n, 0, N, IC, inp, IC, 1, OC, w, ldb, out, OC, 0, round);
        return;
    }
    for (int i = 0; i < n; i++) matmul_forward_w16(out[i], inp, w[i], scratch, N, IC, OC[i], round);
}

void matmul_backward_input_w16(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N, int IC,
                               int OC, int accumulate, int round) {
    if (N <= 0) return;
    if (gemm_fma_path() > 0 && N > 0 && IC > 0 && OC > 0)
        gemm_fma_b16(0, 0, N, IC, OC, dout, OC, w, IC, accumulate, dinp, IC, round);
    else
        matmul_backward_input(dinp, dout, widened(scratch, w, IC, OC), N, IC, OC, accumulate, round);
}

int matmul_backward_input_w16_k(float *dinp, int n, const void *const dout[], int a16, const int OC[], const uint16_t *w,
                                float *scratch, int N, int IC, int accumulate, int round) {
    enum { MAX_N = 8 };
    int lda[MAX_N];
    for (int i = 0; i < n && i < MAX_N; i++) lda[i] = OC[i];
    // dinp (N, IC) (+)= [dout_0 dout_1 ...] (N, Σ OC) · w (Σ OC, IC): A in parts, B w itself
    if (n <= MAX_N && matmul_amx() && N > 0 && IC > 0 &&
        gemm_amx_ksegs(n, N, IC, dout, a16, lda, OC, w, IC, accumulate, dinp, IC, round) == 0)
        return 0;
    if (a16 && gemm_fma_path() < 1) return 1; // (each call below would decline: nothing written)
    for (int i = 0, off = 0; i < n; off += OC[i], i++) {
        const int acc = i ? 1 : accumulate, rnd = i == n - 1 ? round : 0;
        if (a16) matmul_backward_input_x(dinp, 0, dout[i], 1, w + (size_t)off * IC, N, IC, OC[i], acc, rnd);
        else matmul_backward_input_w16(dinp, dout[i], w + (size_t)off * IC, scratch, N, IC, OC[i], acc, rnd);
    }
    return 0;
}

void matmul_backward_weight(float *dw, const float *dout, const float *inp, int N, int IC, int OC) {
    if (N <= 0 || IC <= 0 || OC <= 0) return;
    // dw (OC, IC) += dout (N, OC)ᵀ · inp (N, IC)
    gemm(1, 0, OC, IC, N, dout, OC, inp, IC, 1, dw, IC, 0);
}

void matmul_backward_weight_n(int n, float *const dw[], const float *const dout[], const int OC[], const float *inp,
                              int N, int IC) {
    int shared = N > 0 && IC > 0 && gemm_fma_path() > 0;
    for (int i = 0; i < n && shared; i++) shared = OC[i] > 0;
    // dw[i] (OC[i], IC) += dout[i]ᵀ · inp: A transposed, its row stride OC[i]; C's IC (more
    // than four: gemm_fma_shared_b declines, and they run one by one)
    const int ldc[4] = {IC, IC, IC, IC};
    if (shared && gemm_fma_shared_b(n, 1, OC, dout, OC, dw, ldc, 0, IC, N, inp, IC, 1, 0) == 0) return;
    for (int i = 0; i < n; i++) matmul_backward_weight(dw[i], dout[i], inp, N, IC, OC[i]);
}

int matmul_amx(void) { return gemm_fma_path() == 2 && gemm_amx_path(); }

// ---------------------------------------------------------------- BF16 activations
// gemm_amx_x's products where the CPU has AMX tiles, else gemm_fma_x's (gemm.h): the bits of
// the FP32 functions above on the same machine, which run on the same kernels. a16 and c16
// mark the BF16 activations. A shape with no rows, columns or inner indices is done as the
// FP32 functions do it: nothing, or zeros.

// The inner indices a BF16 output takes on the kernels this CPU runs: one chunk of AMX's, any
// number on the FMA kernels. Where AMX runs the FP32 products, a wider BF16 output stays FP32:
// on the FMA kernels its bits would not be the FP32 products' (AMX's).
static int act16_k_max(void) { return matmul_amx() ? GEMM_AMX_C16_K_MAX : INT_MAX; }

int matmul_act16(int C) { return gemm_fma_path() > 0 && C >= 1 && C <= act16_k_max(); }

int matmul_forward_w16_n_x(int n, void *const out[], int o16, const uint16_t *const w[], const int OC[],
                           const void *inp, int a16, int N, int IC, int round) {
    enum { MAX_N = 8 };
    if (n > MAX_N || gemm_fma_path() < 1 || (o16 && (IC > act16_k_max() || !round))) return 1;
    if (N <= 0) return 0;
    if (IC <= 0) { // zeros: "=" of an empty sum
        for (int i = 0; i < n; i++)
            if (OC[i] > 0) memset(out[i], 0, (size_t)N * OC[i] * (o16 ? sizeof(uint16_t) : sizeof(float)));
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (OC[i] <= 0) return 1; // (the step never asks)
    if (!matmul_amx()) { // one product each, as matmul_forward_w16_n's FMA path (c16's terms met above)
        for (int i = 0; i < n; i++) gemm_fma_x(0, a16, 1, 1, N, OC[i], IC, inp, IC, w[i], IC, 0, out[i], o16, OC[i], round);
        return 0;
    }
    int ldb[MAX_N];
    for (int i = 0; i < n; i++) ldb[i] = IC;
    if (gemm_amx_shared_a_x(n, 0, a16, N, IC, inp, IC, 1, OC, w, ldb, out, o16, OC, 0, round) == 0) return 0;
    // more than one chunk of rows, or inp declined (then every product declines, before writing)
    for (int i = 0; i < n; i++)
        if (gemm_amx_x(0, a16, 1, 1, N, OC[i], IC, inp, IC, w[i], IC, 0, out[i], o16, OC[i], round)) return 1;
    return 0;
}

int matmul_backward_input_x(void *dinp, int o16, const void *dout, int a16, const uint16_t *w, int N, int IC, int OC,
                            int accumulate, int round) {
    if (gemm_fma_path() < 1 || (o16 && (accumulate || !round || OC > act16_k_max()))) return 1;
    if (N <= 0 || IC <= 0) return 0;
    if (OC <= 0) { // nothing to add, as matmul_backward_input
        if (o16) memset(dinp, 0, (size_t)N * IC * sizeof(uint16_t));
        else if (!accumulate) fill_zero(dinp, (size_t)N * IC);
        else if (round) bf16_round_n(dinp, (size_t)N * IC);
        return 0;
    }
    if (!matmul_amx()) return gemm_fma_x(0, a16, 0, 1, N, IC, OC, dout, OC, w, IC, accumulate, dinp, o16, IC, round);
    return gemm_amx_x(0, a16, 0, 1, N, IC, OC, dout, OC, w, IC, accumulate, dinp, o16, IC, round);
}

unsigned matmul_backward_weight_n_x(int n, float *const dw[], const void *const dout[], int a16, const int OC[],
                                    const void *inp, int b16, int N, int IC) {
    enum { MAX_N = 8 };
    const unsigned all = n >= 1 && n <= MAX_N ? (1u << n) - 1u : ~0u;
    if (n < 1 || n > MAX_N || gemm_fma_path() < 1) return all;
    if (N <= 0 || IC <= 0) return 0;
    for (int i = 0; i < n; i++)
        if (OC[i] <= 0) return all; // (the step never asks)
    int ldc[MAX_N];
    for (int i = 0; i < n; i++) ldc[i] = IC;
    if (matmul_amx()) return gemm_amx_shared_b_x(n, 1, a16, OC, dout, OC, dw, ldc, 0, b16, IC, N, inp, IC, 1, 0);
    // as matmul_backward_weight_n's FMA path: inp packed once for up to four, else one by one
    if (gemm_fma_shared_b_x(n, 1, a16, OC, dout, OC, dw, ldc, 0, b16, IC, N, inp, IC, 1, 0) != 0)
        for (int i = 0; i < n; i++) gemm_fma_x(1, a16, 0, b16, OC[i], IC, N, dout[i], OC[i], inp, IC, 1, dw[i], 0, IC, 0);
    return 0;
}

const char *matmul_kernel_name(void) {
    const int path = gemm_fma_path();
    if (matmul_amx()) return "AMX BF16 tiles, else AVX-512F FMA kernels";
    return path == 2 ? "AVX-512F FMA kernels" : path == 1 ? "AVX2 FMA kernels" : NULL;
}

const char *matmul_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

const char *matmul_blas_core_better(void) {
    // the families without AVX2, as openblas_get_corename spells them (0.3.21's dynamic.c)
    static const char *const narrow[] = {"Unknown", "Katmai",      "Coppermine", "Northwood",  "Prescott",
                                         "Banias",  "Atom",        "Core2",      "Penryn",     "Dunnington",
                                         "Nehalem", "Athlon",      "Opteron",    "Opteron_SSE3", "Barcelona",
                                         "Nano",    "Sandybridge", "Bobcat",     "Bulldozer",  "Piledriver",
                                         "Steamroller"};
    const char *pick = matmul_blas_core();
    int is_narrow = !strcmp(pick, "unknown");
    for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++) is_narrow |= !strcmp(pick, narrow[i]);
    if (!is_narrow) return NULL;
    __builtin_cpu_init(); // tests/testutil.c calls this from a constructor, maybe before libgcc's own
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}
