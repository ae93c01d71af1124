// test_kernels.c — every op of kernels/kernels.h against independent references.
// Forwards are checked against FP64 implementations written here; backwards against central
// finite differences of those FP64 forwards, with a random projection loss L = Σ r·out (so
// dout = r). "=" outputs are prefilled with NaN (an unwritten element fails, NaN never
// passes tu_close); "+=" outputs are prefilled with random values that the reference adds.
// Shapes are odd on purpose: T = 1, 7, 33 and > one 64-key attention block, kv-heads <
// heads, dims not a power of two. Also: exact BF16 cases, AdamW's exact IEEE sequence,
// aliasing, degenerate matmul shapes, and bitwise determinism for 1 vs 2 threads. The
// vocabulary-chunked embedding and the quantum cross-entropy are held to the whole-table and
// single-pass bits where kernels.h promises them, and to FP64 where it does not.
// Finite differences only recompute the rows an input element can reach (a row of out
// depends on one row of inp, a key on the later queries of its group, ...): identical to
// recomputing everything, since the other rows cancel exactly, and much cheaper.
// TK_VERBOSE=1 prints, per comparison, the worst |err| / (atol + rtol·|ref|) (1 = at limit).
#include <cblas.h> // uses: openblas_set_num_threads (the matmul determinism test)
#include <check.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h" // uses: backend_worker_threads
#include "kernels.h"
#include "testutil.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define REF_MAX 1024 // longest head row / sequence the FP64 references hold on the stack

// ---------------------------------------------------------------- tolerances
// Each is {atol, rtol} for tu_close: |out − ref| ≤ atol + rtol·|ref|. Inputs are U(−1, 1)
// unless a shape says otherwise, so outputs are O(1..10) and FP32's unit roundoff
// u = 2⁻²⁴ ≈ 6e-8 sets the scale. The finite-difference references are FP64 with step
// FD_H (scaled with the inputs): truncation ≈ h²·|f'''|/6 ≈ 1e-9 and cancellation
// ≈ 1e-16·|L|/h ≈ 1e-11, far below every tolerance, so each margin below is for FP32
// rounding in the kernel. "Seen" is the worst |err| / limit over all shapes (TK_VERBOSE):
// limits sit 3–20× above what the kernels do, and are as tight as the error analysis
// allows where it is exact (add, rope table; BF16 and AdamW's sequence are bitwise).
typedef struct { double atol, rtol; } tol_t;

#define FD_H 1e-4 // for O(1) inputs; shapes with tiny or huge inputs scale the step

// matmul: sgemm sums K ≤ 300 FP32 products of O(1) terms (K = IC, OC or N): rounding
// ~√K·u·|terms|·√K ≈ 1e-6 typical, K·u ≈ 2e-5 worst; the limit allows another BLAS
// kernel with a different blocking. Seen 0.12.
static const tol_t TOL_MM_OUT = {2e-5, 1e-5};
static const tol_t TOL_MM_DINP = {2e-5, 1e-5};
static const tol_t TOL_MM_DW = {2e-5, 1e-5};
// the same, rounded to BF16 values: a different FP32 sum can round one BF16 step (2⁻⁷ of the
// value at most) the other way
static const tol_t TOL_MM_BF16 = {2e-5, 0.0079};
// rmsnorm forward: a C-term FP32 sum of squares (relative ~√C·u), a sqrt, a divide and
// two products: a few 1e-7 relative for C ≤ 200. Seen 0.07 / 0.05.
static const tol_t TOL_RMS_OUT = {1e-6, 2e-6};
static const tol_t TOL_RMS_RSTD = {1e-6, 2e-6};
// rmsnorm dx = s·(g − x·s²·mean(g·x)): a C-term dot and a subtraction that can cancel,
// times s (≈ 300 for the amp 1e-3 shape, where |dx| ≈ 400: hence rtol on |ref|). Seen 0.12.
static const tol_t TOL_RMS_DX = {1e-6, 2e-6};
// dw sums N ≤ 66 rows of O(1) products in FP32 onto the prefill: ~√N·u·N. Seen 0.18.
static const tol_t TOL_RMS_DW = {5e-6, 1e-5};
// rope table: computed in double, rounded once to FP32: |err| ≤ u·|ref| exactly (rtol just
// above 2⁻²⁴), +1e-9 for two double evaluations of pow/cos differing at angles ≤ 200 rad.
// Seen 0.93 (the bound is attained: it is the rounding itself).
static const tol_t TOL_ROPE_TABLE = {1e-9, 6.0e-8};
// rope forward/backward: table rounding (u) plus two products and one add per element,
// on O(1) values: ≤ ~4u·(|x0| + |x1|) ≈ 5e-7. Seen 0.08.
static const tol_t TOL_ROPE_X = {1e-6, 1e-6};
static const tol_t TOL_ROPE_DX = {1e-6, 1e-6};
// attention forward: HS-term FP32 scores (|s| up to ~amp²·√HS), exp(s − max) with an
// absolute error ~|s|·u, a t-term sum and a weighted sum of v: ~5e-7 on O(1) outputs for
// amp 4; lse = max + log Σ carries the same absolute error. Seen 0.09 / 0.04.
static const tol_t TOL_ATT_OUT = {5e-6, 5e-6};
static const tol_t TOL_ATT_LSE = {5e-6, 5e-6};
// attention backward: probabilities recomputed as exp(s − lse) (error ~|s|·u), dS =
// P·(dP − D) can cancel, dk/dv sum over up to T·group = 130 query rows: ~1e-6 absolute on
// gradients of size O(1..10). Seen 0.11 / 0.21 / 0.29.
static const tol_t TOL_ATT_DQ = {5e-6, 5e-6};
static const tol_t TOL_ATT_DK = {5e-6, 5e-6};
static const tol_t TOL_ATT_DV = {5e-6, 5e-6};
// Scores up to ±1000 (test_attention_large_scores): the exponent's absolute error
// ~|s|·u ≈ 6e-5 becomes a relative error of the weights: 10× the O(1) limits.
static const tol_t TOL_ATT_OUT_LARGE = {5e-5, 5e-5};
static const tol_t TOL_ATT_LSE_LARGE = {5e-5, 5e-5};
// swiglu: one exp, a divide and a product per element: ≤ ~5u relative on forward. The
// backward's σ·(1 + g·(1 − σ)) cancels near g ≈ −1.28 (dsilu = 0), hence dgate's atol.
// Seen 0.13 / 0.23 / 0.15.
static const tol_t TOL_SWIGLU_OUT = {1e-7, 1e-6};
static const tol_t TOL_SWIGLU_DGATE = {1e-6, 1e-6};
static const tol_t TOL_SWIGLU_DUP = {1e-7, 1e-6};
// embedding forward is a copy: exact. Backward adds each token's rows (≤ 300 repeats of
// O(1) values) in order onto the prefill: ~√N·u·|Σ| ≈ 2e-6 typical. Seen 0.33.
static const tol_t TOL_EMB_OUT = {0.0, 0.0};
static const tol_t TOL_EMB_DWTE = {1e-5, 1e-6};
// cross-entropy loss = log Σ exp(x − max) − (x_t − max): a V-term FP32 sum (8 lanes,
// relative ~√(V/8)·u ≈ 4e-6 for V = 32000) and a log: ~1e-6 absolute. Seen 0.15.
static const tol_t TOL_CE_LOSS = {5e-6, 2e-6};
// dlogits = (softmax − onehot)·dscale: exp (relative error ~|x − max|·u) times 1/sum: a few
// 1e-7 relative of values ≤ dscale. Seen 0.12.
static const tol_t TOL_CE_DLOGITS = {1e-8, 1e-6};
// Σ_i dlogits[n, i] = 0 exactly; in FP32 it is off by the relative error of the row sum
// (~4e-6 for V = 32000) times dscale, plus V roundings of terms ≤ dscale.
#define CE_ROWSUM_RTOL 2e-5
// The quantum form over V > CE_QUANTUM (against FP64): each quantum's sum is the single
// pass's over ≤ 2048 columns (≤ 256 terms a lane), and each of the ⌈V/2048⌉ folds adds a
// rescale e^(M−m), a product and an add. e^(M−m) is off by ~|M−m|·u relative (its argument's
// rounding, plus < 1 ulp of expf) on a term weighted by e^−|M−m|: ≤ u/e + 2u of S per fold.
// Shorter lanes plus ≤ 4 such roundings stay inside the single pass's V = 32000 budget, so
// the same limits hold. Seen 0.03 / 0.11.
static const tol_t TOL_CEQ_LOSS = {5e-6, 2e-6};
static const tol_t TOL_CEQ_DLOGITS = {1e-8, 1e-6};
// add_inplace: one FP32 add, exactly rounded: |err| ≤ u·|ref| (rtol just above 2⁻²⁴).
// Seen 0.99 (the bound is attained).
static const tol_t TOL_ADD = {0.0, 6.0e-8};
// sumsq returns double: vs a long double reference the error is double rounding of
// ≤ 2.1M positive terms in fixed 8-lane chunks: random-walk ~√n·2⁻⁵³ ≈ 2e-13 relative
// (worst case n·2⁻⁵³ ≈ 2e-10, not reached by random data). Seen 4.5e-16 relative.
static const tol_t TOL_SUMSQ = {0.0, 1e-12};
// AdamW vs FP64 of the same formula: each output is ≤ 6 exactly rounded FP32 ops.
// Cancellation (m's fma with opposite signs, master − lr·…) makes a bound on |ref|
// meaningless, so the check is per element against the size of the terms:
// |err| ≤ ADAM_ULPS·ε·(Σ|terms|) + FLT_MIN (below FLT_MIN FP32 has no relative precision).
#define ADAM_ULPS 8.0

// ---------------------------------------------------------------- helpers
typedef struct { uint64_t s; } rng_t;

static uint64_t rng_next(rng_t *r) { // splitmix64
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } // [0, 1)
static float rng_sym(rng_t *r, double a) { return (float)((2.0 * rng_unif(r) - 1.0) * a); }
static rng_t rng_make(uint64_t seed) { rng_t r = {seed * 0x2545F4914F6CDD1Dull + 17}; return r; }

static float *fnew(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    ck_assert_ptr_nonnull(p);
    return p;
}
static double *dnew(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    ck_assert_ptr_nonnull(p);
    return p;
}
static void fill_sym(float *x, size_t n, double a, rng_t *r) {
    for (size_t i = 0; i < n; i++) x[i] = rng_sym(r, a);
}
static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
static double *to_d(const float *x, size_t n) {
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *fdup(const float *x, size_t n) {
    float *p = fnew(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

// tu_close with the tolerance pair, plus the TK_VERBOSE report.
static int close_t(const char *what, const float *out, const double *ref, size_t n, tol_t tol) {
    if (getenv("TK_VERBOSE")) {
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double e = fabs((double)out[i] - ref[i]), lim = tol.atol + tol.rtol * fabs(ref[i]);
            double q = lim > 0 ? e / lim : (e > 0 ? INFINITY : 0);
            if (q > worst || isnan(e)) worst = isnan(e) ? INFINITY : q;
        }
        fprintf(stderr, "  %-48s n=%-7zu worst/limit %.3f\n", what, n, worst);
    }
    return tu_close(what, out, ref, n, tol.atol, tol.rtol);
}
#define CHECK_CLOSE(what, out, ref, n, tol) \
    ck_assert_msg(close_t((what), (out), (ref), (n), (tol)), "%s: out of tolerance (see stderr)", (what))

// ck_assert_* reports every passing check to the Check parent (a pipe write each): in
// loops over many elements, assert only on failure.
#define CHECK_LOOP(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

#define CHECK_BITS(what, out, want, n) \
    ck_assert_msg(tu_same_bits((what), (out), (want), (n)), "%s: not bit-identical (see stderr)", (what))

// Central difference of f with respect to *x (an FP64 input element) with step h;
// restores *x. The denominator is (x + h) − (x − h) as actually represented, so a step
// that rounds (large |x|) stays consistent.
static double fd_h(double *x, double h, double (*f)(const void *), const void *ctx) {
    double x0 = *x, xp = x0 + h, xm = x0 - h;
    *x = xp;
    double lp = f(ctx);
    *x = xm;
    double lm = f(ctx);
    *x = x0;
    return (lp - lm) / (xp - xm);
}
// Step FD_H for inputs of size O(1).
static double fd(double *x, double (*f)(const void *), const void *ctx) { return fd_h(x, FD_H, f, ctx); }

static void set_threads(int n) { omp_set_num_threads(n); }

// ---------------------------------------------------------------- BF16
static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// Independent RNE reference for a finite float: pick the nearer of the two BF16 neighbours
// by comparing distances in double (a tie picks the even mantissa); the neighbour above
// the largest finite BF16 is 2¹²⁸, which becomes Inf.
static uint16_t ref_bf16(float x) {
    uint32_t u = u_of(x);
    if (isnan(x)) return 0xFFFF; // not used for NaN
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dx = fabs((double)x), dlo = fabs((double)f_of((uint32_t)lo << 16));
    double dhi = ((lo & 0x7FFF) == 0x7F7F) ? ldexp(1.0, 128) : fabs((double)f_of((uint32_t)hi << 16));
    if ((lo & 0x7FFF) == 0x7F80) return lo; // ±Inf itself
    double elo = dx - dlo, ehi = dhi - dx;
    if (elo < ehi) return lo;
    if (ehi < elo) return hi;
    return (lo & 1) ? hi : lo;
}

START_TEST(test_bf16_exact) {
    struct { uint32_t in; uint16_t out; const char *why; } cases[] = {
        {0x3F800000u, 0x3F80, "1.0"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x3F808000u, 0x3F80, "tie, lower even"},
        {0x3F818000u, 0x3F82, "tie, upper even"},
        {0xBF808000u, 0xBF80, "negative tie, lower even"},
        {0xBF818000u, 0xBF82, "negative tie, upper even"},
        {0x3F808001u, 0x3F81, "just above a tie"},
        {0x3F807FFFu, 0x3F80, "just below a tie"},
        {0x3FFFFFFFu, 0x4000, "carry into the exponent"},
        {0x7F800000u, 0x7F80, "+Inf"},
        {0xFF800000u, 0xFF80, "-Inf"},
        {0x7F7FFFFFu, 0x7F80, "FLT_MAX rounds to +Inf (RNE)"},
        {0xFF7FFFFFu, 0xFF80, "-FLT_MAX rounds to -Inf"},
        {0x7F7F8000u, 0x7F80, "tie above max finite BF16 goes to even = Inf"},
        {0x7F7F7FFFu, 0x7F7F, "just below that tie stays max finite"},
        {0x00000001u, 0x0000, "smallest denormal rounds to 0"},
        {0x00008000u, 0x0000, "denormal tie, lower even"},
        {0x00018000u, 0x0002, "denormal tie, upper even"},
        {0x00010000u, 0x0001, "BF16 denormal exact"},
        {0x807FFFFFu, 0x8080, "largest negative denormal rounds to -FLT_MIN"},
        {0x00800000u, 0x0080, "FLT_MIN exact"},
    };
    for (int i = 0; i < NELEMS(cases); i++) {
        uint16_t got = bf16_from_f32(f_of(cases[i].in));
        ck_assert_msg(got == cases[i].out, "bf16_from_f32(0x%08x) [%s] = 0x%04x, want 0x%04x",
                      cases[i].in, cases[i].why, got, cases[i].out);
    }
    // NaN stays NaN, quiet, sign kept — including payloads only in the low 16 bits, which
    // naive truncation or rounding would turn into Inf or the next exponent.
    uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7F80FFFFu, 0x7FA00000u};
    for (int i = 0; i < NELEMS(nans); i++) {
        uint16_t h = bf16_from_f32(f_of(nans[i]));
        ck_assert_msg((h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0 && (h & 0x0040),
                      "NaN 0x%08x -> 0x%04x is not a quiet NaN", nans[i], h);
        ck_assert_msg((h >> 15) == (nans[i] >> 31), "NaN 0x%08x lost its sign (0x%04x)", nans[i], h);
        ck_assert(isnan(bf16_to_f32(h)));
    }
    // bf16_to_f32 is exact; every non-NaN BF16 survives a round trip.
    ck_assert(bf16_to_f32(0x3F80) == 1.0f);
    ck_assert(bf16_to_f32(0x0001) == ldexpf(1.0f, -133));
    ck_assert(u_of(bf16_to_f32(0x8000)) == 0x80000000u);
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = bf16_to_f32((uint16_t)h);
        CHECK_LOOP(u_of(f) == h << 16, "bf16_to_f32(0x%04x) = 0x%08x", h, u_of(f));
        if (!isnan(f)) CHECK_LOOP(bf16_from_f32(f) == h, "round trip 0x%04x", h);
    }
}
END_TEST

START_TEST(test_bf16_random) {
    // 2M random bit patterns (all exponents, denormals, ties by construction) against the
    // independent reference; then the n-versions against the scalar ones.
    rng_t r = rng_make(7);
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)rng_next(&r);
        if (i % 4 == 1) u = (u & 0xFFFF0000u) | 0x8000u;        // exact tie
        if (i % 4 == 2) u &= 0x807FFFFFu;                       // denormal
        float x = f_of(u);
        if (isnan(x)) continue;
        uint16_t got = bf16_from_f32(x), want = ref_bf16(x);
        CHECK_LOOP(got == want, "bf16_from_f32(0x%08x) = 0x%04x, want 0x%04x", u, got, want);
    }
    size_t n = 100003; // above the parallel threshold, odd
    float *x = fnew(n), *y = fnew(n), *z = fnew(n);
    uint16_t *h = malloc(n * sizeof(uint16_t));
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++) x[i] = f_of((uint32_t)rng_next(&r));
    x[0] = NAN; x[1] = INFINITY; x[2] = -INFINITY; x[3] = FLT_MAX; x[4] = f_of(1);
    for (size_t i = 0; i < n; i++) h[i] = 0xDEAD;
    bf16_from_f32_n(h, x, n);
    fill_nan(y, n);
    bf16_to_f32_n(y, h, n);
    memcpy(z, x, n * sizeof(float));
    bf16_round_n(z, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t want = bf16_from_f32(x[i]);
        CHECK_LOOP(h[i] == want, "bf16_from_f32_n[%zu] = 0x%04x, want 0x%04x", i, h[i], want);
        CHECK_LOOP(u_of(y[i]) == (uint32_t)want << 16, "bf16_to_f32_n[%zu]", i);
        CHECK_LOOP(u_of(z[i]) == (uint32_t)want << 16, "bf16_round_n[%zu] = 0x%08x", i, u_of(z[i]));
    }
    free(x); free(y); free(z); free(h);
}
END_TEST

// ---------------------------------------------------------------- elementwise, sumsq
static int close_double(const char *what, double out, double ref, tol_t tol) {
    double err = fabs(out - ref);
    int ok = !isnan(out) && !isnan(ref) && err <= tol.atol + tol.rtol * fabs(ref);
    if (!ok || getenv("TK_VERBOSE"))
        fprintf(stderr, "  %s: got %.17g want %.17g (|err| %.3g, limit %.3g)\n", what, out, ref, err,
                tol.atol + tol.rtol * fabs(ref));
    return ok;
}

static const size_t SUMSQ_N[] = {0, 1, 7, 4095, 4096, 4097, 3 * 4096 + 5, 5 * 4096 + 3, 2 * 256 * 4096 + 77};

START_TEST(test_sumsq) {
    size_t n = SUMSQ_N[_i];
    rng_t r = rng_make(100 + (uint64_t)_i);
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) x[i] = rng_sym(&r, pow(10.0, -3 + 6 * rng_unif(&r))); // 6 decades
    long double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    char what[64];
    snprintf(what, sizeof what, "sumsq n=%zu", n);
    ck_assert_msg(close_double(what, sumsq(x, n), (double)ref, TOL_SUMSQ), "%s", what);
    free(x);
}
END_TEST

// sumsq's documented order (kernels/cpu/elementwise.c), written out plainly: chunks of 4096,
// each summed in double on 8 lanes (lane j takes i ≡ j mod 8, a ragged tail goes to lanes
// 0..), the lanes closed as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), the chunk sums added in
// chunk order. The vector path (two 4-double vectors per chunk, chunks side by side) must
// give these bits exactly, not just close ones: the gradient norm feeds the clipping scale.
static double sumsq_plain(const float *x, size_t n) {
    double total = 0.0;
    for (size_t c0 = 0; c0 < n; c0 += 4096) {
        size_t len = n - c0 < 4096 ? n - c0 : 4096, n8 = len & ~(size_t)7;
        double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t i = 0; i < len; i++) {
            double a = x[c0 + i];
            l[i < n8 ? i % 8 : i - n8] += a * a;
        }
        total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
    return total;
}

static int simd_have(int lim);

// Every vector path (AVX-512F's 8-double lanes, AVX2's two 4-double halves, the baseline)
// gives the plain order's bits.
START_TEST(test_sumsq_order) {
    size_t n = SUMSQ_N[_i];
    rng_t r = rng_make(200 + (uint64_t)_i);
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) x[i] = rng_sym(&r, pow(10.0, -3 + 6 * rng_unif(&r)));
    const size_t nb = (n + 4095) / 4096;
    double *s = dnew(nb + 1);
    for (int lim = 2; lim >= 0; lim--) {
        if (!simd_have(lim)) continue;
        kernels_limit_simd(lim);
        const char *path = lim == 2 ? "AVX-512F" : lim == 1 ? "AVX2" : "baseline";
        double got = sumsq(x, n), want = sumsq_plain(x, n);
        ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "sumsq n=%zu (%s): %.17g, the plain order gives %.17g", n, path,
                      got, want);
        // the chunk sums themselves (gradnorm.h's blocks): each one is the plain order's
        s[nb] = -1.0;
        sumsq_blocks(s, x, n);
        for (size_t b = 0; b < nb; b++) {
            const double w = sumsq_plain(x + b * 4096, n - b * 4096 < 4096 ? n - b * 4096 : 4096);
            ck_assert_msg(memcmp(&s[b], &w, sizeof w) == 0,
                          "sumsq_blocks n=%zu (%s) block %zu: %.17g, the plain order gives %.17g", n, path, b, s[b],
                          w);
        }
        ck_assert_msg(s[nb] == -1.0, "sumsq_blocks n=%zu wrote past its %zu blocks", n, nb);
    }
    kernels_limit_simd(3);
    free(s);
    free(x);
}
END_TEST

START_TEST(test_add_inplace) {
    size_t ns[] = {1, 33, 100001};
    rng_t r = rng_make(5);
    for (int k = 0; k < NELEMS(ns); k++) {
        size_t n = ns[k];
        float *x = fnew(n), *y = fnew(n);
        fill_sym(x, n, 1.0, &r);
        fill_sym(y, n, 1.0, &r);
        double *ref = dnew(n);
        for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + y[i];
        add_inplace(x, y, n, 0);
        CHECK_CLOSE("add_inplace", x, ref, n, TOL_ADD);
        free(x); free(y); free(ref);
    }
}
END_TEST

// ---------------------------------------------------------------- matmul
typedef struct { int N, IC, OC; } mm_shape_t;
static const mm_shape_t MM_SHAPES[] = {
    {1, 1, 1}, {1, 48, 72}, {7, 48, 72}, {33, 48, 10}, {33, 72, 48}, {8, 300, 20}, {64, 130, 96},
    {300, 24, 290}, // several tiles of each product, ragged at both edges (matmul.c, tile_shape)
};

typedef struct {
    double *inp, *w, *r; // (N, IC), (OC, IC), (N, OC)
    int N, IC, OC, row, col;
} mm_ctx_t;

static double mm_dot(const mm_ctx_t *c, int n, int o) {
    double s = 0;
    for (int i = 0; i < c->IC; i++) s += c->inp[(size_t)n * c->IC + i] * c->w[(size_t)o * c->IC + i];
    return s;
}
static double mm_loss_row(const void *p) { // the part of L that row `row` of inp reaches
    const mm_ctx_t *c = p;
    double L = 0;
    for (int o = 0; o < c->OC; o++) L += c->r[(size_t)c->row * c->OC + o] * mm_dot(c, c->row, o);
    return L;
}
static double mm_loss_col(const void *p) { // the part of L that row `col` of w reaches
    const mm_ctx_t *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++) L += c->r[(size_t)n * c->OC + c->col] * mm_dot(c, n, c->col);
    return L;
}

START_TEST(test_matmul) {
    const mm_shape_t s = MM_SHAPES[_i];
    const int N = s.N, IC = s.IC, OC = s.OC;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(200 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *r = fnew(no), *out = fnew(no);
    float *dinp = fnew(ni), *dinp_pre = fnew(ni), *dw = fnew(nw), *dw_pre = fnew(nw);
    fill_sym(inp, ni, 1.0, &rg);
    fill_sym(w, nw, 1.0, &rg);
    fill_sym(r, no, 1.0, &rg);
    fill_sym(dinp_pre, ni, 1.0, &rg);
    fill_sym(dw_pre, nw, 1.0, &rg);
    mm_ctx_t c = {to_d(inp, ni), to_d(w, nw), to_d(r, no), N, IC, OC, 0, 0};
    double *ref_out = dnew(no), *ref_dinp = dnew(ni), *ref_dw = dnew(nw);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) ref_out[(size_t)n * OC + o] = mm_dot(&c, n, o);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            c.row = n;
            ref_dinp[(size_t)n * IC + i] = fd(&c.inp[(size_t)n * IC + i], mm_loss_row, &c);
        }
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++) {
            c.col = o;
            ref_dw[(size_t)o * IC + i] = dw_pre[(size_t)o * IC + i] + fd(&c.w[(size_t)o * IC + i], mm_loss_col, &c);
        }
    char what[96];

    fill_nan(out, no);
    matmul_forward(out, inp, w, N, IC, OC, 0);
    snprintf(what, sizeof what, "matmul out N=%d IC=%d OC=%d", N, IC, OC);
    CHECK_CLOSE(what, out, ref_out, no, TOL_MM_OUT);

    fill_nan(dinp, ni); // accumulate = 0 overwrites
    matmul_backward_input(dinp, r, w, N, IC, OC, 0, 0);
    snprintf(what, sizeof what, "matmul dinp (=) N=%d IC=%d OC=%d", N, IC, OC);
    CHECK_CLOSE(what, dinp, ref_dinp, ni, TOL_MM_DINP);

    memcpy(dinp, dinp_pre, ni * sizeof(float)); // accumulate = 1 adds
    matmul_backward_input(dinp, r, w, N, IC, OC, 1, 0);
    for (size_t i = 0; i < ni; i++) ref_dinp[i] += dinp_pre[i];
    snprintf(what, sizeof what, "matmul dinp (+=) N=%d IC=%d OC=%d", N, IC, OC);
    CHECK_CLOSE(what, dinp, ref_dinp, ni, TOL_MM_DINP);

    memcpy(dw, dw_pre, nw * sizeof(float));
    matmul_backward_weight(dw, r, inp, N, IC, OC);
    snprintf(what, sizeof what, "matmul dw (+=) N=%d IC=%d OC=%d", N, IC, OC);
    CHECK_CLOSE(what, dw, ref_dw, nw, TOL_MM_DW);

    free(inp); free(w); free(r); free(out); free(dinp); free(dinp_pre); free(dw); free(dw_pre);
    free(c.inp); free(c.w); free(c.r);
    free(ref_out); free(ref_dinp); free(ref_dw);
}
END_TEST

// On a CPU with FMA, every matmul output element is one fmaf chain over the inner dimension
// in k order, from 0 ("=") or the prior value ("+="), then BF16-rounded when asked (gemm.h):
// the same bits as this plain loop, on the AVX-512F and the AVX2 paths, at 1 and 3 threads.
// The shapes cross the kernels' blocks: K past KC (512, partial sums through memory), N past
// NC (1024), ragged row and column tiles of both paths (12 × 32, 6 × 16), M below MR, and
// both drivers (gemm_cols at M ≤ 384 with enough column panels: 3 threads; gemm_rows above,
// or at 1 thread). A transposed B's packing moves 16 × 8 blocks (AVX-512F), 8 × 8 blocks and
// single elements: 59 columns leave a last panel of 27 (one of each), 45 inner indices 5 past
// the blocks of 8.
// Without FMA (kernels_limit_simd(0)) the products run on OpenBLAS: within TOL_MM_OUT.
static const mm_shape_t MMB_SHAPES[] = {{1, 1, 1},   {13, 600, 1100}, {300, 24, 290}, {7, 48, 72},
                                        {64, 1030, 40}, {400, 40, 70},  {37, 45, 59}};

// Does this CPU have kernels_limit_simd's level lim (2 AVX-512F, 1 AVX2 with FMA, 0 none)?
static int simd_have(int lim) {
    return lim == 0 || (lim == 1 ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                                 : __builtin_cpu_supports("avx512f"));
}
static const char *simd_path(int lim) {
    return lim == 3 ? "AMX tiles" : lim == 2 ? "AVX-512F" : lim == 1 ? "AVX2+FMA" : "OpenBLAS";
}

// C (M, N) (+)= op(A) · op(B) as fmaf chains, rounded when round; element (i, k) of op(A) at
// A[transa ? k·lda + i : i·lda + k], likewise op(B).
static void fma_chain_ref(int transa, int transb, int M, int N, int K, const float *A, int lda, const float *B,
                          int ldb, int accumulate, float *C, int ldc, int round) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = accumulate ? C[(size_t)i * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(transa ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k],
                           transb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j], acc);
            C[(size_t)i * ldc + j] = acc;
        }
    if (round)
        for (int i = 0; i < M; i++) bf16_round_n(C + (size_t)i * ldc, (size_t)N);
}

START_TEST(test_matmul_fma_bits) {
    const mm_shape_t s = MMB_SHAPES[_i];
    const int N = s.N, IC = s.IC, OC = s.OC;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(1300 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *d = fnew(no), *dinp0 = fnew(ni), *dw0 = fnew(nw);
    float *ref[5] = {fnew(no), fnew(no), fnew(ni), fnew(ni), fnew(nw)}, *got[5] = {fnew(no), fnew(no), fnew(ni), fnew(ni), fnew(nw)};
    fill_sym(inp, ni, 1.0, &rg); fill_sym(w, nw, 1.0, &rg); fill_sym(d, no, 1.0, &rg);
    fill_sym(dinp0, ni, 1.0, &rg); fill_sym(dw0, nw, 1.0, &rg);
    // the five products: out =, out = rounded, dinp += rounded, dinp =, dw +=
    fma_chain_ref(0, 1, N, OC, IC, inp, IC, w, IC, 0, ref[0], OC, 0);
    fma_chain_ref(0, 1, N, OC, IC, inp, IC, w, IC, 0, ref[1], OC, 1);
    memcpy(ref[2], dinp0, ni * sizeof(float));
    fma_chain_ref(0, 0, N, IC, OC, d, OC, w, IC, 1, ref[2], IC, 1);
    fma_chain_ref(0, 0, N, IC, OC, d, OC, w, IC, 0, ref[3], IC, 0);
    memcpy(ref[4], dw0, nw * sizeof(float));
    fma_chain_ref(1, 0, OC, IC, N, d, OC, inp, IC, 1, ref[4], IC, 0);
    static const char *const name[] = {"out", "out rounded", "dinp += rounded", "dinp =", "dw +="};
    const size_t n[] = {no, no, ni, ni, nw};
    for (int lim = 2; lim >= 0; lim--) {
        if (!simd_have(lim)) continue;
        for (int th = 1; th <= 3; th += 2) {
            kernels_limit_simd(lim);
            set_threads(th);
            for (int o = 0; o < 5; o++) fill_nan(got[o], n[o]);
            matmul_forward(got[0], inp, w, N, IC, OC, 0);
            matmul_forward(got[1], inp, w, N, IC, OC, 1);
            memcpy(got[2], dinp0, ni * sizeof(float));
            matmul_backward_input(got[2], d, w, N, IC, OC, 1, 1);
            matmul_backward_input(got[3], d, w, N, IC, OC, 0, 0);
            memcpy(got[4], dw0, nw * sizeof(float));
            matmul_backward_weight(got[4], d, inp, N, IC, OC);
            kernels_limit_simd(2);
            for (int o = 0; o < 5; o++) {
                char what[128];
                snprintf(what, sizeof what, "matmul %s N=%d IC=%d OC=%d (%s, %d threads) against the fmaf chain",
                         name[o], N, IC, OC, simd_path(lim), th);
                if (lim > 0) {
                    CHECK_BITS(what, got[o], ref[o], n[o]);
                } else {
                    double *r = to_d(ref[o], n[o]);
                    CHECK_CLOSE(what, got[o], r, n[o], o == 1 || o == 2 ? TOL_MM_BF16 : TOL_MM_OUT);
                    free(r);
                }
            }
        }
    }
    for (int o = 0; o < 5; o++) { free(ref[o]); free(got[o]); }
    free(inp); free(w); free(d); free(dinp0); free(dw0);
}
END_TEST

// On AMX tiles (matmul_amx(): a CPU with AMX-BF16, at the default kernels_limit_simd), the
// five products of BF16 operands (every value a BF16 value: the weights, the activations and
// their gradients in bf16 mode) are within TOL_MM_OUT / TOL_MM_BF16 of the FP64 sums; they
// keep their bits at 1 and 3 threads; with kernels_limit_simd(2) they are the fmaf chain's;
// on the K ≥ 32 shapes some element differs from the fmaf chain (the tiles add in their own
// order: the path ran). One operand word that is not a BF16 value, in A or in B, and the call
// gives the fmaf chain's bits, "+=" included (nothing added twice). A CPU without AMX skips.
// The default kernels_limit_simd (AMX where the CPU has it): 1 when the tiles run here, else
// 0 with a line on stderr saying the test is skipped.
static int amx_here(const char *test) {
    kernels_limit_simd(3);
    if (matmul_amx()) return 1;
    fprintf(stderr, "%s: no AMX-BF16 on this CPU (or the kernel refused the tile state): skipped\n", test);
    return 0;
}

START_TEST(test_matmul_amx) {
    if (!amx_here("test_matmul_amx")) return;
    const mm_shape_t s = MMB_SHAPES[_i];
    const int N = s.N, IC = s.IC, OC = s.OC;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(1700 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *d = fnew(no), *dinp0 = fnew(ni), *dw0 = fnew(nw);
    fill_sym(inp, ni, 1.0, &rg); fill_sym(w, nw, 1.0, &rg); fill_sym(d, no, 1.0, &rg);
    fill_sym(dinp0, ni, 1.0, &rg); fill_sym(dw0, nw, 1.0, &rg);
    bf16_round_n(inp, ni); bf16_round_n(w, nw); bf16_round_n(d, no); // BF16 values, as in bf16 mode
    static const char *const name[] = {"out", "out rounded", "dinp += rounded", "dinp =", "dw +="};
    const size_t n[] = {no, no, ni, ni, nw};
    float *got[3][5], *ref[5];
    for (int o = 0; o < 5; o++) {
        ref[o] = fnew(n[o]);
        for (int v = 0; v < 3; v++) got[v][o] = fnew(n[o]);
    }
    // the five products into out[0..4], on this CPU's widest path (or limited to lim)
#define FIVE(out, lim, th)                                                                                        \
    do {                                                                                                          \
        kernels_limit_simd(lim);                                                                                  \
        set_threads(th);                                                                                          \
        for (int o = 0; o < 5; o++) fill_nan((out)[o], n[o]);                                                     \
        matmul_forward((out)[0], inp, w, N, IC, OC, 0);                                                           \
        matmul_forward((out)[1], inp, w, N, IC, OC, 1);                                                           \
        memcpy((out)[2], dinp0, ni * sizeof(float));                                                              \
        matmul_backward_input((out)[2], d, w, N, IC, OC, 1, 1);                                                   \
        matmul_backward_input((out)[3], d, w, N, IC, OC, 0, 0);                                                   \
        memcpy((out)[4], dw0, nw * sizeof(float));                                                                \
        matmul_backward_weight((out)[4], d, inp, N, IC, OC);                                                      \
        kernels_limit_simd(3);                                                                                    \
    } while (0)
    FIVE(ref, 2, 2); // the FMA kernels: the fmaf chain's bits (test_matmul_fma_bits)
    FIVE(got[0], 3, 1);
    FIVE(got[1], 3, 3);
    for (int o = 0; o < 5; o++) {
        const int K = o < 2 ? IC : o < 4 ? OC : N; // the product's inner dimension
        // FP64 sums of the same products
        double *r = dnew(n[o]);
        const int rows = o < 4 ? N : OC, cols = o < 2 ? OC : IC;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                double acc = o == 2 ? dinp0[(size_t)i * IC + j] : o == 4 ? dw0[(size_t)i * IC + j] : 0.0;
                for (int k = 0; k < K; k++)
                    acc += o < 2  ? (double)inp[(size_t)i * IC + k] * w[(size_t)j * IC + k]
                           : o < 4 ? (double)d[(size_t)i * OC + k] * w[(size_t)k * IC + j]
                                   : (double)d[(size_t)k * OC + i] * inp[(size_t)k * IC + j];
                r[(size_t)i * cols + j] = acc;
            }
        char what[160];
        snprintf(what, sizeof what, "AMX matmul %s N=%d IC=%d OC=%d against FP64", name[o], N, IC, OC);
        CHECK_CLOSE(what, got[0][o], r, n[o], o == 1 || o == 2 ? TOL_MM_BF16 : TOL_MM_OUT);
        free(r);
        snprintf(what, sizeof what, "AMX matmul %s N=%d IC=%d OC=%d, 3 threads against 1", name[o], N, IC, OC);
        CHECK_BITS(what, got[1][o], got[0][o], n[o]);
        if (K >= 32 && o != 1 && o != 2) // rounded outputs may all agree
            ck_assert_msg(memcmp(got[0][o], ref[o], n[o] * sizeof(float)),
                          "AMX matmul %s N=%d IC=%d OC=%d: the fmaf chain's bits everywhere (did the tiles run?)", name[o],
                          N, IC, OC);
    }
    // one word that is not a BF16 value: the fmaf chain's bits
    for (int which = 0; which < 2; which++) {
        // past the first words, which the tiles look at before packing: packing must find it
        float *x = which ? w : d;
        const size_t at = (which ? nw : no) / 2;
        const float keep = x[at];
        x[at] = nextafterf(x[at] == 0.0f ? 1.0f : x[at], INFINITY); // low bits set
        FIVE(ref, 2, 2);
        FIVE(got[2], 3, 2);
        for (int o = which ? 0 : 2; o < (which ? 4 : 5); o++) { // the products that read it: d dinp, dw; w out, dinp
            char what[160];
            snprintf(what, sizeof what, "matmul %s N=%d IC=%d OC=%d with a non-BF16 word in %s", name[o], N, IC, OC,
                     which ? "w" : "d");
            CHECK_BITS(what, got[2][o], ref[o], n[o]);
        }
        x[at] = keep;
    }
#undef FIVE
    for (int o = 0; o < 5; o++) {
        free(ref[o]);
        for (int v = 0; v < 3; v++) free(got[v][o]);
    }
    free(inp); free(w); free(d); free(dinp0); free(dw0);
}
END_TEST

// The products of BF16 weights (matmul_forward_w16, matmul_backward_input_w16) keep the bits
// of the FP32 products on the weights widened, on every path and thread count: with FMA the
// packing widens them (the scratch is left as it was), on OpenBLAS the scratch holds them.
START_TEST(test_matmul_w16_bits) {
    const mm_shape_t s = MMB_SHAPES[_i];
    const int N = s.N, IC = s.IC, OC = s.OC;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(1400 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *d = fnew(no), *dinp0 = fnew(ni), *scratch = fnew(nw);
    uint16_t *w16 = malloc(nw * sizeof *w16);
    ck_assert_ptr_nonnull(w16);
    float *ref[4] = {fnew(no), fnew(no), fnew(ni), fnew(ni)}, *got[4] = {fnew(no), fnew(no), fnew(ni), fnew(ni)};
    fill_sym(inp, ni, 1.0, &rg); fill_sym(w, nw, 1.0, &rg); fill_sym(d, no, 1.0, &rg); fill_sym(dinp0, ni, 1.0, &rg);
    bf16_from_f32_n(w16, w, nw);
    bf16_to_f32_n(w, w16, nw); // w: the weights widened
    static const char *const name[] = {"out", "out rounded", "dinp += rounded", "dinp ="};
    const size_t n[] = {no, no, ni, ni};
    for (int lim = 2; lim >= 0; lim--) {
        if (!simd_have(lim)) continue;
        for (int th = 1; th <= 3; th += 2) {
            kernels_limit_simd(lim);
            set_threads(th);
            for (int o = 0; o < 4; o++) { fill_nan(ref[o], n[o]); fill_nan(got[o], n[o]); }
            matmul_forward(ref[0], inp, w, N, IC, OC, 0);
            matmul_forward(ref[1], inp, w, N, IC, OC, 1);
            memcpy(ref[2], dinp0, ni * sizeof(float));
            matmul_backward_input(ref[2], d, w, N, IC, OC, 1, 1);
            matmul_backward_input(ref[3], d, w, N, IC, OC, 0, 0);
            fill_nan(scratch, nw);
            matmul_forward_w16(got[0], inp, w16, scratch, N, IC, OC, 0);
            matmul_forward_w16(got[1], inp, w16, scratch, N, IC, OC, 1);
            memcpy(got[2], dinp0, ni * sizeof(float));
            matmul_backward_input_w16(got[2], d, w16, scratch, N, IC, OC, 1, 1);
            matmul_backward_input_w16(got[3], d, w16, scratch, N, IC, OC, 0, 0);
            kernels_limit_simd(2);
            const char *path = simd_path(lim);
            for (int o = 0; o < 4; o++) {
                char what[128];
                snprintf(what, sizeof what, "matmul %s of BF16 weights N=%d IC=%d OC=%d (%s, %d threads)", name[o], N, IC,
                         OC, path, th);
                CHECK_BITS(what, got[o], ref[o], n[o]);
            }
            if (lim > 0)
                for (size_t i = 0; i < nw; i++)
                    CHECK_LOOP(isnan(scratch[i]), "%s: the FMA path wrote scratch[%zu]", path, i);
            else
                ck_assert_msg(!memcmp(scratch, w, nw * sizeof(float)), "OpenBLAS: the scratch does not hold w widened");
        }
    }
    for (int o = 0; o < 4; o++) { free(ref[o]); free(got[o]); }
    free(inp); free(w); free(w16); free(d); free(dinp0); free(scratch);
}
END_TEST

// matmul_backward_weight_n: up to 4 weight gradients of one input sharing its packing keep
// each one's bits (memcmp against one matmul_backward_weight each), on every path and thread
// count, AMX tiles included; 5 run one by one. Gradients of 7, 40 and 33 rows cross the
// kernels' MR (12, 6).
START_TEST(test_matmul_weight_n_bits) {
    const int N = 300, IC = 70, OCs[5] = {7, 40, 33, 12, 1};
    rng_t rg = rng_make(1500);
    float *inp = fnew((size_t)N * IC), *dout[5], *dw0[5], *ref[5], *got[5];
    fill_sym(inp, (size_t)N * IC, 1.0, &rg);
    for (int i = 0; i < 5; i++) {
        const size_t nw = (size_t)OCs[i] * IC;
        dout[i] = fnew((size_t)N * OCs[i]);
        dw0[i] = fnew(nw); ref[i] = fnew(nw); got[i] = fnew(nw);
        fill_sym(dout[i], (size_t)N * OCs[i], 1.0, &rg);
        fill_sym(dw0[i], nw, 1.0, &rg);
    }
    // The FMA paths (2, 1) and OpenBLAS (0) on FP32 operands, then AMX tiles (3, where the CPU
    // has them) on BF16 operands, one gradient's dout holding a word that is not a BF16 value:
    // that one on the FMA kernels while the others take the tiles.
    static const int lims[] = {2, 1, 0, 3};
    for (int p = 0; p < 4; p++) {
        const int lim = lims[p];
        kernels_limit_simd(lim);
        if (lim == 3 ? !matmul_amx() : !simd_have(lim)) continue;
        if (lim == 3) {
            bf16_round_n(inp, (size_t)N * IC);
            for (int i = 0; i < 5; i++) bf16_round_n(dout[i], (size_t)N * OCs[i]);
            const size_t at = (size_t)N * OCs[1] / 2; // past the words looked at before packing
            dout[1][at] = nextafterf(dout[1][at] == 0.0f ? 1.0f : dout[1][at], INFINITY);
        }
        for (int th = 1; th <= 3; th += 2)
            for (int n = 1; n <= 5; n++) {
                set_threads(th);
                for (int i = 0; i < n; i++) {
                    const size_t nw = (size_t)OCs[i] * IC;
                    memcpy(ref[i], dw0[i], nw * sizeof(float));
                    memcpy(got[i], dw0[i], nw * sizeof(float));
                    matmul_backward_weight(ref[i], dout[i], inp, N, IC, OCs[i]);
                }
                matmul_backward_weight_n(n, got, (const float *const *)dout, OCs, inp, N, IC);
                for (int i = 0; i < n; i++) {
                    char what[128];
                    snprintf(what, sizeof what, "dw %d of %d (OC %d, %s, %d threads) against its own product", i, n,
                             OCs[i], simd_path(lim), th);
                    CHECK_BITS(what, got[i], ref[i], (size_t)OCs[i] * IC);
                }
            }
    }
    kernels_limit_simd(3);
    for (int i = 0; i < 5; i++) { free(dout[i]); free(dw0[i]); free(ref[i]); free(got[i]); }
    free(inp);
}
END_TEST

// matmul_forward_w16_n: forward products of one input sharing its packing keep each one's bits
// (memcmp against one matmul_forward_w16 each), on every path and thread count, AMX tiles
// included: 1100 outputs take two of the tiles' column chunks, and 1100 rows (more than one
// chunk of A) and an input word that is not a BF16 value (past the words looked at before
// packing) both run one product at a time.
START_TEST(test_matmul_forward_n_bits) {
    const int IC = 70, OCs[3] = {7, 40, 1100}, Ns[2] = {300, 1100};
    rng_t rg = rng_make(1600);
    float *inp = fnew((size_t)Ns[1] * IC), *ref[3], *got[3];
    uint16_t *w[3];
    fill_sym(inp, (size_t)Ns[1] * IC, 1.0, &rg);
    for (int i = 0; i < 3; i++) {
        const size_t nw = (size_t)OCs[i] * IC;
        float *wf = fnew(nw);
        fill_sym(wf, nw, 1.0, &rg);
        w[i] = malloc(nw * sizeof *w[i]);
        ck_assert_ptr_nonnull(w[i]);
        bf16_from_f32_n(w[i], wf, nw);
        free(wf);
        ref[i] = fnew((size_t)Ns[1] * OCs[i]);
        got[i] = fnew((size_t)Ns[1] * OCs[i]);
    }
    // The FMA paths (2, 1) and OpenBLAS (0) on an FP32 input, then AMX tiles (3, where the CPU
    // has them) on BF16 values, then (4) AMX with one word of the input not a BF16 value
    static const int lims[] = {2, 1, 0, 3, 3};
    for (int p = 0; p < 5; p++) {
        const int lim = lims[p];
        kernels_limit_simd(lim);
        if (lim == 3 ? !matmul_amx() : !simd_have(lim)) continue;
        if (p == 3) bf16_round_n(inp, (size_t)Ns[1] * IC);
        if (p == 4) inp[(size_t)150 * IC + 3] = nextafterf(inp[(size_t)150 * IC + 3] == 0.0f ? 1.0f : inp[(size_t)150 * IC + 3], INFINITY);
        for (int th = 1; th <= 3; th += 2)
            for (int k = 0; k < 2; k++)
                for (int n = 1; n <= 3; n++) {
                    const int N = Ns[k], rnd = n != 2; // rounded to BF16 values, or not
                    set_threads(th);
                    float *scratch = fnew((size_t)OCs[2] * IC);
                    for (int i = 0; i < n; i++) {
                        fill_nan(got[i], (size_t)N * OCs[i]);
                        matmul_forward_w16(ref[i], inp, w[i], scratch, N, IC, OCs[i], rnd);
                    }
                    matmul_forward_w16_n(n, got, (const uint16_t *const *)w, OCs, inp, scratch, N, IC, rnd);
                    for (int i = 0; i < n; i++) {
                        char what[160];
                        snprintf(what, sizeof what, "out %d of %d (N %d, OC %d, %s%s, %d threads) against its own product",
                                 i, n, N, OCs[i], simd_path(lim), p == 4 ? ", an FP32 word" : "", th);
                        CHECK_BITS(what, got[i], ref[i], (size_t)N * OCs[i]);
                    }
                    free(scratch);
                }
    }
    kernels_limit_simd(3);
    for (int i = 0; i < 3; i++) { free(w[i]); free(ref[i]); free(got[i]); }
    free(inp);
}
END_TEST

// The BF16-activation products (kernels.h "BF16 activations") against the FP32 ops on the
// same values, bit for bit, on every path that takes them (AMX tiles where the CPU has them,
// the AVX-512F and AVX2 FMA kernels), at 1 and 3 threads: the block's shapes at 300 rows (not a
// multiple of the tiles' 32 or the kernels' 12 and 6) and 1100 (more than one chunk of rows),
// a width of 70 and an F of 100 (an inner dimension the tiles pad); then a width of 1000 and
// an F of 600 at 300 rows (a BF16 output over more than one of the FMA kernels' 512-deep
// blocks: through their FP32 buffer); a width of 600 and an F of 1100 at 1100 rows (that
// buffer's pieces across both rows and columns); widths of 2500 and 4096, which only the FMA
// kernels take (AMX tiles take a BF16 output over at most 1024: there matmul_act16 says 0);
// every mix of BF16 and FP32 input and output the forward products take, and of BF16 and FP32
// operands the shared weight gradients take; gradients with and without accumulation and
// rounding. Without FMA (kernels_limit_simd(0): OpenBLAS) each product declines and writes
// nothing, as it does on AMX tiles for a BF16 output over an inner dimension of 1025.
static uint16_t *h16_of(const float *x, size_t n) {
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    ck_assert_ptr_nonnull(h);
    bf16_from_f32_n(h, x, n);
    return h;
}
static void check_bits16(const char *what, const uint16_t *got, const float *want, size_t n) {
    uint16_t *w = h16_of(want, n);
    for (size_t i = 0; i < n; i++) // (want holds BF16 values: its narrowing is exact)
        CHECK_LOOP(got[i] == w[i], "%s: element %zu is 0x%04x, the FP32 op's 0x%04x", what, i, got[i], w[i]);
    free(w);
}

static const int ACT16_SHAPES[5][4] = {{70, 100, 300, 1100}, {1000, 600, 300, 0}, {600, 1100, 1100, 0},
                                       {2500, 70, 100, 0},   {4096, 40, 200, 0}}; // C, F, the Ns
START_TEST(test_matmul_act16_bits) {
    const int C = ACT16_SHAPES[_i][0], F = ACT16_SHAPES[_i][1], Ns[2] = {ACT16_SHAPES[_i][2], ACT16_SHAPES[_i][3]};
    const int NMAX = Ns[1] > Ns[0] ? Ns[1] : Ns[0];
    rng_t rg = rng_make(1700 + (uint64_t)_i);
    float *ln2 = fnew((size_t)NMAX * C), *h = fnew((size_t)NMAX * F), *dout = fnew((size_t)NMAX * C);
    float *dg = fnew((size_t)NMAX * F), *du = fnew((size_t)NMAX * F), *wf = fnew((size_t)F * C);
    const size_t NW = (size_t)NMAX * (C > F ? C : F); // (N, F) outputs, and (N, C) ones
    float *ref = fnew(NW), *ref2 = fnew(NW), *ref3 = fnew(NW), *got = fnew(NW);
    float *dw0 = fnew((size_t)F * C), *dwr[2] = {fnew((size_t)F * C), fnew((size_t)F * C)};
    float *dwg[2] = {fnew((size_t)F * C), fnew((size_t)F * C)};
    uint16_t *o16[2] = {malloc((size_t)NMAX * F * 2), malloc((size_t)NMAX * F * 2)};
    ck_assert(o16[0] && o16[1]);
    float *xs[5] = {ln2, h, dout, dg, du};
    const size_t ns[5] = {(size_t)NMAX * C, (size_t)NMAX * F, (size_t)NMAX * C, (size_t)NMAX * F, (size_t)NMAX * F};
    for (int i = 0; i < 5; i++) {
        fill_sym(xs[i], ns[i], 1.0, &rg);
        bf16_round_n(xs[i], ns[i]); // bf16 mode's activations and gradients
    }
    fill_sym(dw0, (size_t)F * C, 1.0, &rg);
    uint16_t *w[3]; // gate, up (F, C); down (C, F)
    for (int i = 0; i < 3; i++) {
        fill_sym(wf, (size_t)F * C, 1.0, &rg);
        w[i] = h16_of(wf, (size_t)F * C);
    }
    uint16_t *h16 = h16_of(h, ns[1]), *dg16 = h16_of(dg, ns[3]), *du16 = h16_of(du, ns[4]), *ln2_16 = h16_of(ln2, ns[0]);

    for (int lim = 3; lim >= 1; lim--)
    for (int th = 1; th <= 3; th += 2)
        for (int k = 0; k < 2 && Ns[k]; k++) {
            kernels_limit_simd(lim);
            if (lim == 3 ? !matmul_amx() : !simd_have(lim)) continue; // (3 without AMX: 2's path)
            const int N = Ns[k];
            char what[200];
            set_threads(th);
            if (lim == 3 && C > 1024) { // AMX runs the FP32 products: a BF16 output would not have their bits
                ck_assert_int_eq(matmul_act16(C), 0);
                continue;
            }
            ck_assert_int_eq(matmul_act16(C), 1);
            // gate, up (q, k, v) = ln2 · wᵀ: from FP32 or BF16 ln2 (a16), into FP32 or (rounded)
            // BF16 outputs (c16)
            for (int a16 = 0; a16 < 2; a16++)
                for (int c16 = 0; c16 < 2; c16++)
                    for (int rnd = c16; rnd < 2; rnd++) {
                        float *outs[2] = {got, ref2};
                        for (int i = 0; i < 2; i++) {
                            matmul_forward_w16(i ? ref3 : ref, ln2, w[i], NULL, N, C, F, rnd);
                            if (c16) memset(o16[i], 0xff, (size_t)N * F * 2);
                            else fill_nan(outs[i], (size_t)N * F);
                        }
                        void *const out[2] = {c16 ? (void *)o16[0] : (void *)got, c16 ? (void *)o16[1] : (void *)ref2};
                        ck_assert_int_eq(matmul_forward_w16_n_x(2, out, c16, (const uint16_t *const *)w, (const int[]){F, F},
                                                                a16 ? (const void *)ln2_16 : (const void *)ln2, a16, N, C,
                                                                rnd),
                                         0);
                        for (int i = 0; i < 2; i++) {
                            snprintf(what, sizeof what, "forward out %d of 2 (%s in, %s out, round %d, N %d, %d threads, %s)", i,
                                     a16 ? "BF16" : "FP32", c16 ? "BF16" : "FP32", rnd, N, th, simd_path(lim));
                            const float *want = i ? ref3 : ref;
                            if (c16) check_bits16(what, o16[i], want, (size_t)N * F);
                            else CHECK_BITS(what, outs[i], want, (size_t)N * F);
                        }
                    }
            // out = h · wdᵀ, from BF16 h
            for (int rnd = 0; rnd < 2; rnd++) {
                matmul_forward_w16(ref, h, w[2], NULL, N, F, C, rnd);
                fill_nan(got, (size_t)N * C);
                ck_assert_int_eq(matmul_forward_w16_n_x(1, (void *const[]){got}, 0, (const uint16_t *const[]){w[2]}, &C, h16, 1,
                                                        N, F, rnd),
                                 0);
                snprintf(what, sizeof what, "forward from BF16 h (N %d, round %d, %d threads, %s)", N, rnd, th, simd_path(lim));
                CHECK_BITS(what, got, ref, (size_t)N * C);
            }
            // dh = dout · wd, rounded, as BF16
            matmul_backward_input_w16(ref, dout, w[2], NULL, N, F, C, 0, 1);
            memset(o16[0], 0xff, (size_t)N * F * 2);
            ck_assert_int_eq(matmul_backward_input_x(o16[0], 1, dout, 0, w[2], N, F, C, 0, 1), 0);
            snprintf(what, sizeof what, "input gradient as BF16 (N %d, %d threads, %s)", N, th, simd_path(lim));
            check_bits16(what, o16[0], ref, (size_t)N * F);
            // dln (+)= dgate · wg, from BF16 dgate
            for (int acc = 0; acc < 2; acc++)
                for (int rnd = 0; rnd < 2; rnd++) {
                    for (size_t i = 0; i < (size_t)N * C; i++) ref[i] = got[i] = ln2[i]; // any C_in
                    matmul_backward_input_w16(ref, dg, w[0], NULL, N, C, F, acc, rnd);
                    ck_assert_int_eq(matmul_backward_input_x(got, 0, dg16, 1, w[0], N, C, F, acc, rnd), 0);
                    snprintf(what, sizeof what, "input gradient from BF16 (N %d, acc %d, round %d, %d threads, %s)", N, acc,
                             rnd, th, simd_path(lim));
                    CHECK_BITS(what, got, ref, (size_t)N * C);
                }
            // dwd += doutᵀ · h, from BF16 h
            memcpy(dwr[0], dw0, (size_t)F * C * sizeof(float));
            memcpy(dwg[0], dw0, (size_t)F * C * sizeof(float));
            matmul_backward_weight(dwr[0], dout, h, N, F, C);
            ck_assert_uint_eq(matmul_backward_weight_n_x(1, dwg, (const void *const[]){dout}, 0, &C, h16, 1, N, F), 0);
            snprintf(what, sizeof what, "weight gradient from BF16 input (N %d, %d threads, %s)", N, th, simd_path(lim));
            CHECK_BITS(what, dwg[0], dwr[0], (size_t)F * C);
            // dwg, dwu (dwq, dwk, dwv) += dgateᵀ · ln2, dupᵀ · ln2: gradients FP32 or BF16 (a16),
            // ln2 FP32 or BF16 (b16)
            for (int a16 = 0; a16 < 2; a16++)
                for (int b16 = 0; b16 < 2; b16++) {
                    for (int i = 0; i < 2; i++) {
                        memcpy(dwr[i], dw0, (size_t)F * C * sizeof(float));
                        memcpy(dwg[i], dw0, (size_t)F * C * sizeof(float));
                    }
                    matmul_backward_weight_n(2, dwr, (const float *const[]){dg, du}, (const int[]){F, F}, ln2, N, C);
                    const void *const douts[2] = {a16 ? (const void *)dg16 : (const void *)dg,
                                                  a16 ? (const void *)du16 : (const void *)du};
                    ck_assert_uint_eq(matmul_backward_weight_n_x(2, dwg, douts, a16, (const int[]){F, F},
                                                                 b16 ? (const void *)ln2_16 : (const void *)ln2, b16, N, C),
                                      0);
                    for (int i = 0; i < 2; i++) {
                        snprintf(what, sizeof what, "weight gradient %d of 2 (%s gradient, %s input, N %d, %d threads, %s)", i,
                                 a16 ? "BF16" : "FP32", b16 ? "BF16" : "FP32", N, th, simd_path(lim));
                        CHECK_BITS(what, dwg[i], dwr[i], (size_t)F * C);
                    }
                }
        }
    // Declined, nothing written: "+=" into halves; on AMX tiles a BF16 output over 1025 inner
    // indices (the FMA kernels take any number: the shapes above); every product without FMA
    const int Kbig = 1025;
    float *big = fnew((size_t)Ns[0] * Kbig), *wb = fnew((size_t)F * Kbig);
    fill_sym(big, (size_t)Ns[0] * Kbig, 1.0, &rg);
    bf16_round_n(big, (size_t)Ns[0] * Kbig);
    fill_sym(wb, (size_t)F * Kbig, 1.0, &rg);
    uint16_t *wb16 = h16_of(wb, (size_t)F * Kbig);
    memset(o16[0], 0xab, (size_t)Ns[0] * F * 2);
    kernels_limit_simd(3);
    if (matmul_amx()) {
        ck_assert_int_eq(matmul_act16(Kbig - 1), 1);
        ck_assert_int_eq(matmul_act16(Kbig), 0);
        ck_assert_int_eq(matmul_forward_w16_n_x(1, (void *const *)o16, 1, (const uint16_t *const *)&wb16, &F, big, 0,
                                                Ns[0], Kbig, 1),
                         1);
    }
    ck_assert_int_eq(matmul_backward_input_x(o16[0], 1, dout, 0, w[2], Ns[0], F, C, 1, 1), 1); // "+=" into halves
    for (size_t i = 0; i < (size_t)Ns[0] * F; i++) CHECK_LOOP(o16[0][i] == 0xabab, "a declined product wrote element %zu", i);
    { // without FMA
        kernels_limit_simd(0);
        const int N = Ns[0];
        memset(o16[0], 0xab, (size_t)N * F * 2);
        fill_nan(got, (size_t)N * F);
        memcpy(dwg[0], dw0, (size_t)F * C * sizeof(float));
        ck_assert_int_eq(matmul_act16(C), 0);
        ck_assert_int_eq(matmul_forward_w16_n_x(1, (void *const *)o16, 1, (const uint16_t *const *)w, &F, ln2, 0, N, C, 1),
                         1);
        ck_assert_int_eq(matmul_backward_input_x(o16[0], 1, dout, 0, w[2], N, F, C, 0, 1), 1);
        for (size_t i = 0; i < (size_t)N * F; i++) CHECK_LOOP(o16[0][i] == 0xabab, "declined: wrote element %zu", i);
        ck_assert_int_eq(matmul_forward_w16_n_x(1, (void *const[]){got}, 0, (const uint16_t *const[]){w[2]}, &C, h16, 1, N, F, 1),
                         1);
        ck_assert_int_eq(matmul_backward_input_x(got, 0, dg16, 1, w[0], N, C, F, 0, 1), 1);
        for (size_t i = 0; i < (size_t)N * F; i++) CHECK_LOOP(isnan(got[i]), "declined: wrote element %zu", i);
        ck_assert_uint_eq(matmul_backward_weight_n_x(1, dwg, (const void *const[]){dout}, 0, &C, h16, 1, N, F), 1);
        ck_assert_uint_eq(matmul_backward_weight_n_x(1, dwg, (const void *const *)&dg16, 1, &F, ln2_16, 1, N, C), 1);
        ck_assert(!memcmp(dwg[0], dw0, (size_t)F * C * sizeof(float)));
    }
    kernels_limit_simd(3);
    free(big); free(wb); free(wb16);
    for (int i = 0; i < 3; i++) free(w[i]);
    for (int i = 0; i < 2; i++) { free(o16[i]); free(dwr[i]); free(dwg[i]); }
    free(ln2); free(h); free(dout); free(dg); free(du); free(wf); free(ref); free(ref2); free(ref3); free(got); free(dw0);
    free(h16); free(dg16); free(du16); free(ln2_16);
}
END_TEST

// matmul_backward_input_w16_k: the input gradient of weights stacked in one array, against n
// matmul_backward_input_w16 calls, bit for bit, on every path and at 1 and 3 threads, with and
// without accumulation and rounding: parts of 64, 32 and 40 rows (whole tile steps but the
// last: one product on AMX tiles), of 40, 32 and 40 (not: one call each), small's 384, 128 and
// 128, 1100 rows (more than one chunk), and a word of a part that is not a BF16 value; and the
// parts as BF16 halves (a16), the same bits on AMX tiles and the FMA kernels, declined with
// nothing written without FMA (OpenBLAS).
START_TEST(test_matmul_input_k_bits) {
    const int IC = 70, NMAX = 1100;
    static const int parts[3][3] = {{64, 32, 40}, {40, 32, 40}, {384, 128, 128}};
    rng_t rg = rng_make(1800);
    float *dout[3], *ref = fnew((size_t)NMAX * IC), *got = fnew((size_t)NMAX * IC), *c0 = fnew((size_t)NMAX * IC);
    float *wf = fnew((size_t)640 * IC), *scratch = fnew((size_t)640 * IC);
    for (int i = 0; i < 3; i++) dout[i] = fnew((size_t)NMAX * 384);
    fill_sym(wf, (size_t)640 * IC, 1.0, &rg);
    uint16_t *w = h16_of(wf, (size_t)640 * IC);
    fill_sym(c0, (size_t)NMAX * IC, 1.0, &rg);
    bf16_round_n(c0, (size_t)NMAX * IC);
    static const int lims[] = {2, 1, 0, 3, 3};
    for (int p = 0; p < 5; p++) {
        const int lim = lims[p];
        kernels_limit_simd(lim);
        if (lim == 3 ? !matmul_amx() : !simd_have(lim)) continue;
        for (int i = 0; i < 3; i++) {
            fill_sym(dout[i], (size_t)NMAX * 384, 1.0, &rg);
            bf16_round_n(dout[i], (size_t)NMAX * 384); // (BF16 values: AMX's, and the halves below)
        }
        if (p == 4) dout[1][(size_t)50 * 32 + 7] = nextafterf(1.0f, INFINITY); // past the words looked at first
        for (int th = 1; th <= 3; th += 2)
            for (int s = 0; s < 3; s++)
                for (int k = 0; k < 2; k++)
                    for (int acc = 0; acc < 2; acc++)
                        for (int rnd = 0; rnd < 2; rnd++) {
                            const int N = k ? NMAX : 300, *OC = parts[s];
                            set_threads(th);
                            memcpy(ref, c0, (size_t)N * IC * sizeof(float));
                            memcpy(got, c0, (size_t)N * IC * sizeof(float));
                            for (int i = 0, off = 0; i < 3; off += OC[i], i++)
                                matmul_backward_input_w16(ref, dout[i], w + (size_t)off * IC, scratch, N, IC, OC[i],
                                                          i ? 1 : acc, i == 2 ? rnd : 0);
                            ck_assert_int_eq(matmul_backward_input_w16_k(got, 3, (const void *const *)dout, 0, OC, w,
                                                                         scratch, N, IC, acc, rnd),
                                             0);
                            char what[160];
                            snprintf(what, sizeof what, "parts %d %d %d (N %d, acc %d, round %d, %s%s, %d threads)", OC[0],
                                     OC[1], OC[2], N, acc, rnd, simd_path(lim), p == 4 ? ", an FP32 word" : "", th);
                            CHECK_BITS(what, got, ref, (size_t)N * IC);
                            if (p == 4 || (lim > 0 && (th > 1 || k))) continue;
                            uint16_t *d16[3];
                            for (int i = 0; i < 3; i++) d16[i] = h16_of(dout[i], (size_t)NMAX * 384);
                            memcpy(got, c0, (size_t)N * IC * sizeof(float));
                            const int rc = matmul_backward_input_w16_k(got, 3, (const void *const *)d16, 1, OC, w, scratch,
                                                                       N, IC, acc, rnd);
                            ck_assert_int_eq(rc, lim > 0 ? 0 : 1);
                            snprintf(what, sizeof what, "parts %d %d %d as halves (N %d, acc %d, round %d, %s)", OC[0],
                                     OC[1], OC[2], N, acc, rnd, simd_path(lim));
                            if (lim > 0) CHECK_BITS(what, got, ref, (size_t)N * IC);
                            else CHECK_BITS(what, got, c0, (size_t)N * IC);
                            for (int i = 0; i < 3; i++) free(d16[i]);
                        }
    }
    kernels_limit_simd(3);
    for (int i = 0; i < 3; i++) free(dout[i]);
    free(ref); free(got); free(c0); free(wf); free(scratch); free(w);
}
END_TEST

START_TEST(test_matmul_degenerate) {
    // A zero inner dimension: "=" outputs become zeros, "+=" outputs are left alone; a zero
    // outer dimension writes nothing.
    float out[12], dinp[12], keep[12], dw[12];
    const float one = 1.0f;
    fill_nan(out, 12);
    matmul_forward(out, &one, &one, 3, 0, 4, 0); // IC = 0
    for (int i = 0; i < 12; i++) CHECK_LOOP(out[i] == 0.0f, "matmul_forward IC=0: out[%d] = %g", i, out[i]);
    fill_nan(dinp, 12);
    matmul_backward_input(dinp, &one, &one, 3, 4, 0, 0, 0); // OC = 0, "="
    for (int i = 0; i < 12; i++) CHECK_LOOP(dinp[i] == 0.0f, "matmul_backward_input OC=0: dinp[%d] = %g", i, dinp[i]);
    for (int i = 0; i < 12; i++) keep[i] = dinp[i] = dw[i] = (float)i;
    matmul_backward_input(dinp, &one, &one, 3, 4, 0, 1, 0); // OC = 0, "+="
    matmul_backward_weight(dw, &one, &one, 0, 4, 3);     // N = 0
    ck_assert(memcmp(dinp, keep, sizeof keep) == 0 && memcmp(dw, keep, sizeof keep) == 0);
}
END_TEST

// ---------------------------------------------------------------- RMSNorm
typedef struct { int N, C; double amp; } rms_shape_t;
// amp 1e-3: mean(x²) ≈ 3e-7 is below eps = 1e-5, so eps really matters.
static const rms_shape_t RMS_SHAPES[] = {
    {1, 1, 1}, {1, 48, 1}, {7, 10, 1}, {33, 48, 1}, {66, 72, 3}, {5, 200, 1}, {9, 48, 1e-3},
};
#define RMS_EPS 1e-5f

typedef struct {
    double *x, *w, *r; // (N, C), (C), (N, C)
    int N, C, row;
    double eps;
} rms_ctx_t;

static double rms_loss_rows(const rms_ctx_t *c, int n0, int n1) {
    double L = 0;
    for (int n = n0; n < n1; n++) {
        const double *xr = c->x + (size_t)n * c->C;
        double ss = 0;
        for (int i = 0; i < c->C; i++) ss += xr[i] * xr[i];
        double s = 1.0 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) L += c->r[(size_t)n * c->C + i] * (xr[i] * s * c->w[i]);
    }
    return L;
}
static double rms_loss_row(const void *p) { const rms_ctx_t *c = p; return rms_loss_rows(c, c->row, c->row + 1); }
static double rms_loss_all(const void *p) { const rms_ctx_t *c = p; return rms_loss_rows(c, 0, c->N); }

START_TEST(test_rmsnorm) {
    const rms_shape_t s = RMS_SHAPES[_i];
    const int N = s.N, C = s.C;
    size_t nx = (size_t)N * C;
    rng_t rg = rng_make(300 + (uint64_t)_i);
    float *x = fnew(nx), *w = fnew(C), *r = fnew(nx), *out = fnew(nx), *rstd = fnew(N);
    float *dx = fnew(nx), *dw = fnew(C), *dx_pre = fnew(nx), *dw_pre = fnew(C);
    fill_sym(x, nx, s.amp, &rg);
    for (int i = 0; i < C; i++) w[i] = 0.5f + (float)rng_unif(&rg);
    fill_sym(r, nx, 1.0, &rg);
    fill_sym(dx_pre, nx, 1.0, &rg);
    fill_sym(dw_pre, C, 1.0, &rg);
    rms_ctx_t c = {to_d(x, nx), to_d(w, C), to_d(r, nx), N, C, 0, (double)RMS_EPS};
    double *ref_out = dnew(nx), *ref_rstd = dnew(N), *ref_dx = dnew(nx), *ref_dw = dnew(C);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < C; i++) ss += c.x[(size_t)n * C + i] * c.x[(size_t)n * C + i];
        ref_rstd[n] = 1.0 / sqrt(ss / C + c.eps);
        for (int i = 0; i < C; i++) ref_out[(size_t)n * C + i] = c.x[(size_t)n * C + i] * ref_rstd[n] * c.w[i];
    }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) {
            c.row = n;
            ref_dx[(size_t)n * C + i] = dx_pre[(size_t)n * C + i] + fd_h(&c.x[(size_t)n * C + i], FD_H * s.amp, rms_loss_row, &c);
        }
    for (int i = 0; i < C; i++) ref_dw[i] = dw_pre[i] + fd(&c.w[i], rms_loss_all, &c);
    char what[96];

    fill_nan(out, nx);
    fill_nan(rstd, N);
    rmsnorm_forward(out, rstd, x, w, N, C, RMS_EPS, 0);
    snprintf(what, sizeof what, "rmsnorm out N=%d C=%d amp=%g", N, C, s.amp);
    CHECK_CLOSE(what, out, ref_out, nx, TOL_RMS_OUT);
    // rstd reaches 1/sqrt(eps) ≈ 316 for the small amplitude: compare relative to it.
    snprintf(what, sizeof what, "rmsnorm rstd N=%d C=%d amp=%g", N, C, s.amp);
    CHECK_CLOSE(what, rstd, ref_rstd, N, TOL_RMS_RSTD);

    memcpy(dx, dx_pre, nx * sizeof(float));
    memcpy(dw, dw_pre, C * sizeof(float));
    rmsnorm_backward(dx, dw, r, x, w, rstd, N, C, 0);
    snprintf(what, sizeof what, "rmsnorm dx (+=) N=%d C=%d amp=%g", N, C, s.amp);
    CHECK_CLOSE(what, dx, ref_dx, nx, TOL_RMS_DX);
    snprintf(what, sizeof what, "rmsnorm dw (+=) N=%d C=%d amp=%g", N, C, s.amp);
    CHECK_CLOSE(what, dw, ref_dw, C, TOL_RMS_DW);

    free(x); free(w); free(r); free(out); free(rstd); free(dx); free(dw); free(dx_pre); free(dw_pre);
    free(c.x); free(c.w); free(c.r);
    free(ref_out); free(ref_rstd); free(ref_dx); free(ref_dw);
}
END_TEST

// ---------------------------------------------------------------- RoPE
typedef struct { int B, T, NX, HS; } rope_shape_t;
static const rope_shape_t ROPE_SHAPES[] = {
    {1, 1, 1, 2}, {1, 7, 4, 6}, {2, 33, 2, 10}, {1, 33, 6, 64}, {2, 5, 3, 18}, {1, 200, 1, 8},
};
#define ROPE_THETA 10000.0

typedef struct {
    double *x, *r; // (B, T, NX, HS)
    int T, NX, HS;
    size_t row;          // (b·T + t)·NX + h
} rope_ctx_t;

static double rope_angle(int t, int i, int HS) { return (double)t * pow(ROPE_THETA, -(2.0 * i) / HS); }

// FP64 rotation of one head row at position t (angles in double, no table).
static void rope_ref_row(double *o, const double *x, int t, int HS) {
    int half = HS / 2;
    for (int i = 0; i < half; i++) {
        double a = rope_angle(t, i, HS), c = cos(a), sn = sin(a);
        o[i] = x[i] * c - x[i + half] * sn;
        o[i + half] = x[i + half] * c + x[i] * sn;
    }
}
static double rope_loss_row(const void *p) {
    const rope_ctx_t *c = p;
    double o[REF_MAX];
    int t = (int)((c->row / c->NX) % c->T);
    rope_ref_row(o, c->x + c->row * c->HS, t, c->HS);
    double L = 0;
    for (int i = 0; i < c->HS; i++) L += c->r[c->row * c->HS + i] * o[i];
    return L;
}

START_TEST(test_rope) {
    const rope_shape_t s = ROPE_SHAPES[_i];
    const int B = s.B, T = s.T, NX = s.NX, HS = s.HS, half = HS / 2;
    size_t n = (size_t)B * T * NX * HS, nt = (size_t)T * half;
    rng_t rg = rng_make(400 + (uint64_t)_i);
    float *cos_t = fnew(nt), *sin_t = fnew(nt), *x = fnew(n), *r = fnew(n), *y = fnew(n);
    fill_sym(x, n, 1.0, &rg);
    fill_sym(r, n, 1.0, &rg);
    double *ref_cos = dnew(nt), *ref_sin = dnew(nt), *ref_y = dnew(n), *ref_dx = dnew(n);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            ref_cos[(size_t)t * half + i] = cos(rope_angle(t, i, HS));
            ref_sin[(size_t)t * half + i] = sin(rope_angle(t, i, HS));
        }
    rope_ctx_t c = {to_d(x, n), to_d(r, n), T, NX, HS, 0};
    for (size_t row = 0; row < n / HS; row++) {
        rope_ref_row(ref_y + row * HS, c.x + row * HS, (int)((row / NX) % T), HS);
        c.row = row;
        for (int i = 0; i < HS; i++) ref_dx[row * HS + i] = fd(&c.x[row * HS + i], rope_loss_row, &c);
    }
    char what[96];

    fill_nan(cos_t, nt);
    fill_nan(sin_t, nt);
    rope_table(cos_t, sin_t, T, HS, ROPE_THETA);
    snprintf(what, sizeof what, "rope cos T=%d HS=%d", T, HS);
    CHECK_CLOSE(what, cos_t, ref_cos, nt, TOL_ROPE_TABLE);
    snprintf(what, sizeof what, "rope sin T=%d HS=%d", T, HS);
    CHECK_CLOSE(what, sin_t, ref_sin, nt, TOL_ROPE_TABLE);

    memcpy(y, x, n * sizeof(float));
    rope_forward(y, cos_t, sin_t, B, T, NX, HS, 0);
    snprintf(what, sizeof what, "rope forward B=%d T=%d NX=%d HS=%d", B, T, NX, HS);
    CHECK_CLOSE(what, y, ref_y, n, TOL_ROPE_X);

    memcpy(y, r, n * sizeof(float)); // dx = dout = r, in place
    rope_backward(y, cos_t, sin_t, B, T, NX, HS, 0);
    snprintf(what, sizeof what, "rope backward B=%d T=%d NX=%d HS=%d", B, T, NX, HS);
    CHECK_CLOSE(what, y, ref_dx, n, TOL_ROPE_DX);

    free(cos_t); free(sin_t); free(x); free(r); free(y);
    free(ref_cos); free(ref_sin); free(ref_y); free(ref_dx);
    free(c.x); free(c.r);
}
END_TEST

// ---------------------------------------------------------------- attention
typedef struct { int B, T, NH, NKV, HS; double amp; } att_shape_t;
// The kernel tiles queries by 32 and keys by 64: T = 33, 70 and 130 give ragged tiles and
// two or three key tiles of the online softmax. amp scales q and k so scores reach ±~30
// (softmax far from uniform: max subtraction and rescaling matter). HS = 260 is above the
// tiled path's limit (256) and takes the plain per-row path.
static const att_shape_t ATT_SHAPES[] = {
    {1, 1, 4, 2, 6, 1},  {2, 7, 4, 2, 10, 1}, {1, 33, 6, 2, 10, 1}, {2, 33, 4, 4, 6, 1},
    {1, 33, 4, 1, 8, 4}, {1, 70, 2, 1, 16, 1}, {1, 9, 2, 1, 260, 1}, {1, 130, 2, 2, 6, 2},
    {2, 130, 4, 2, 6, 1},
};

typedef struct {
    double *q, *k, *v, *r; // (B, T, NH, HS), (B, T, NKV, HS) ×2, (B, T, NH, HS)
    int B, T, NH, NKV, HS;
    int b, t, h, s, g;     // the element being perturbed
} att_ctx_t;

// FP64 attention of query row (b, t, h): out (HS) and its log-sum-exp.
static double att_ref_row(const att_ctx_t *c, int b, int t, int h, double *o) {
    const int HS = c->HS, g = h / (c->NH / c->NKV);
    const double *qr = c->q + (((size_t)b * c->T + t) * c->NH + h) * HS;
    double m = -INFINITY, sc[REF_MAX];
    for (int s = 0; s <= t; s++) {
        const double *kr = c->k + (((size_t)b * c->T + s) * c->NKV + g) * HS;
        double d = 0;
        for (int i = 0; i < HS; i++) d += qr[i] * kr[i];
        sc[s] = d / sqrt((double)HS);
        if (sc[s] > m) m = sc[s];
    }
    double z = 0;
    for (int i = 0; i < HS; i++) o[i] = 0;
    for (int s = 0; s <= t; s++) {
        double e = exp(sc[s] - m);
        z += e;
        const double *vr = c->v + (((size_t)b * c->T + s) * c->NKV + g) * HS;
        for (int i = 0; i < HS; i++) o[i] += e * vr[i];
    }
    for (int i = 0; i < HS; i++) o[i] /= z;
    return m + log(z);
}
static double att_row_loss(const att_ctx_t *c, int b, int t, int h) {
    double o[REF_MAX];
    att_ref_row(c, b, t, h, o);
    const double *rr = c->r + (((size_t)b * c->T + t) * c->NH + h) * c->HS;
    double L = 0;
    for (int i = 0; i < c->HS; i++) L += rr[i] * o[i];
    return L;
}
static double att_loss_q(const void *p) { // q[b, t, h, :] reaches only its own row
    const att_ctx_t *c = p;
    return att_row_loss(c, c->b, c->t, c->h);
}
static double att_loss_kv(const void *p) { // k/v[b, s, g, :] reach rows t ≥ s of group g
    const att_ctx_t *c = p;
    int group = c->NH / c->NKV;
    double L = 0;
    for (int h = c->g * group; h < (c->g + 1) * group; h++)
        for (int t = c->s; t < c->T; t++) L += att_row_loss(c, c->b, t, h);
    return L;
}

// Attention of shape sh against the FP64 reference (forward, and both backward paths, which
// must agree to the bit); bf16: q, k, v and the output gradient r rounded to BF16 values, as
// in bf16 mode (on a CPU with AMX-BF16 the tile products then run on AMX).
static void attention_vs_reference(const att_shape_t sh, uint64_t seed, int bf16) {
    const int B = sh.B, T = sh.T, NH = sh.NH, NKV = sh.NKV, HS = sh.HS;
    ck_assert(T <= REF_MAX && HS <= REF_MAX);
    size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
    rng_t rg = rng_make(seed);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *r = fnew(nq), *out = fnew(nq), *lse = fnew(nl);
    float *dq = fnew(nq), *dk = fnew(nk), *dv = fnew(nk);
    fill_sym(q, nq, sh.amp, &rg);
    fill_sym(k, nk, sh.amp, &rg);
    fill_sym(v, nk, 1.0, &rg);
    fill_sym(r, nq, 1.0, &rg);
    if (bf16) { bf16_round_n(q, nq); bf16_round_n(k, nk); bf16_round_n(v, nk); bf16_round_n(r, nq); }
    att_ctx_t c = {to_d(q, nq), to_d(k, nk), to_d(v, nk), to_d(r, nq), B, T, NH, NKV, HS, 0, 0, 0, 0, 0};
    double *ref_out = dnew(nq), *ref_lse = dnew(nl), *ref_dq = dnew(nq), *ref_dk = dnew(nk), *ref_dv = dnew(nk);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                size_t row = ((size_t)b * T + t) * NH + h;
                ref_lse[((size_t)b * NH + h) * T + t] = att_ref_row(&c, b, t, h, ref_out + row * HS);
                c.b = b; c.t = t; c.h = h;
                for (int i = 0; i < HS; i++) ref_dq[row * HS + i] = fd(&c.q[row * HS + i], att_loss_q, &c);
            }
    for (int b = 0; b < B; b++)
        for (int s = 0; s < T; s++)
            for (int g = 0; g < NKV; g++) {
                size_t row = ((size_t)b * T + s) * NKV + g;
                c.b = b; c.s = s; c.g = g;
                for (int i = 0; i < HS; i++) {
                    ref_dk[row * HS + i] = fd(&c.k[row * HS + i], att_loss_kv, &c);
                    ref_dv[row * HS + i] = fd(&c.v[row * HS + i], att_loss_kv, &c);
                }
            }
    char what[128];
#define ATT_WHAT(name) snprintf(what, sizeof what, "attention %s%s B=%d T=%d NH=%d NKV=%d HS=%d amp=%g", \
                                bf16 ? "(BF16 inputs) " : "", name, B, T, NH, NKV, HS, sh.amp)

    fill_nan(out, nq);
    fill_nan(lse, nl);
    attention_forward(out, lse, q, k, v, B, T, NH, NKV, HS, 0);
    ATT_WHAT("out");
    CHECK_CLOSE(what, out, ref_out, nq, TOL_ATT_OUT);
    ATT_WHAT("lse");
    CHECK_CLOSE(what, lse, ref_lse, nl, TOL_ATT_LSE);

    // the backward on 1 thread (one pass, a task per kv head, once B·NKV ≥ 4) and on 64 (the
    // split passes: too few kv heads per thread); each against the reference, and the same bits
    const int threads = omp_get_max_threads();
    float *dq1 = fnew(nq), *dk1 = fnew(nk), *dv1 = fnew(nk);
    for (int run = 0; run < 2; run++) {
        float *x = run ? dq1 : dq, *y = run ? dk1 : dk, *z = run ? dv1 : dv;
        fill_nan(x, nq);
        fill_nan(y, nk);
        fill_nan(z, nk);
        set_threads(run ? 64 : 1);
        attention_backward(x, y, z, r, q, k, v, out, lse, B, T, NH, NKV, HS, 0);
        ATT_WHAT(run ? "dq, split passes" : "dq");
        CHECK_CLOSE(what, x, ref_dq, nq, TOL_ATT_DQ);
        ATT_WHAT(run ? "dk, split passes" : "dk");
        CHECK_CLOSE(what, y, ref_dk, nk, TOL_ATT_DK);
        ATT_WHAT(run ? "dv, split passes" : "dv");
        CHECK_CLOSE(what, z, ref_dv, nk, TOL_ATT_DV);
    }
    set_threads(threads);
    ATT_WHAT("backward, 1 thread against 64");
    ck_assert_msg(!memcmp(dq, dq1, nq * sizeof *dq) && !memcmp(dk, dk1, nk * sizeof *dk) &&
                  !memcmp(dv, dv1, nk * sizeof *dv), "%s: bits differ", what);
    free(dq1); free(dk1); free(dv1);
#undef ATT_WHAT

    free(q); free(k); free(v); free(r); free(out); free(lse); free(dq); free(dk); free(dv);
    free(c.q); free(c.k); free(c.v); free(c.r);
    free(ref_out); free(ref_lse); free(ref_dq); free(ref_dk); free(ref_dv);
}

START_TEST(test_attention) { attention_vs_reference(ATT_SHAPES[_i], 500 + (uint64_t)_i, 0); }
END_TEST

// On AMX tiles (attention_amx.c: a CPU with AMX-BF16, at the default kernels_limit_simd, head
// sizes 32 to 128 by 32), with q, k, v and the output gradient BF16 values (bf16 mode's): the
// tile products (P and dS in three BF16 planes) within the FMA path's tolerances of the FP64
// reference, on 1 and on 64 threads to the bit; ragged query and key blocks (T 7, 33, 40,
// 67, 70), one and several kv heads per group. At small's head size (64) some output
// differs from kernels_limit_simd(2)'s FMA chains (the tiles ran), and the round flag is the
// op then bf16_round_n (the products' path never depends on it). A CPU without AMX skips.
static const att_shape_t ATT_AMX_SHAPES[] = {
    {2, 7, 4, 2, 32, 1}, {1, 33, 6, 2, 32, 1}, {1, 33, 4, 1, 64, 4}, {1, 70, 2, 1, 32, 1},
    {1, 40, 6, 2, 64, 1}, {1, 40, 2, 2, 128, 1}, {1, 67, 2, 1, 96, 2},
};
START_TEST(test_attention_amx) {
    if (!amx_here("test_attention_amx")) return;
    const att_shape_t sh = ATT_AMX_SHAPES[_i];
    attention_vs_reference(sh, 900 + (uint64_t)_i, 1);
    if (sh.HS != 64) return;
    const int B = sh.B, T = sh.T, NH = sh.NH, NKV = sh.NKV, HS = sh.HS;
    const size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
    rng_t rg = rng_make(77);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *d = fnew(nq);
    fill_sym(q, nq, 2.0, &rg); fill_sym(k, nk, 2.0, &rg); fill_sym(v, nk, 1.0, &rg); fill_sym(d, nq, 1.0, &rg);
    bf16_round_n(q, nq); bf16_round_n(k, nk); bf16_round_n(v, nk); bf16_round_n(d, nq);
    float *o[3], *l[3], *g[3][3]; // [0] level 2, FMA; [1] AMX; [2] AMX with the round flag
    const size_t len[3] = {nq, nk, nk};
    for (int x = 0; x < 3; x++) {
        o[x] = fnew(nq); l[x] = fnew(nl);
        kernels_limit_simd(x ? 3 : 2);
        attention_forward(o[x], l[x], q, k, v, B, T, NH, NKV, HS, x == 2);
    }
    for (int x = 0; x < 3; x++) { // from the AMX forward's output, unrounded
        for (int i = 0; i < 3; i++) g[x][i] = fnew(len[i]);
        kernels_limit_simd(x ? 3 : 2);
        attention_backward(g[x][0], g[x][1], g[x][2], d, q, k, v, o[1], l[1], B, T, NH, NKV, HS, x == 2);
    }
    kernels_limit_simd(3);
    ck_assert_msg(memcmp(o[0], o[1], nq * sizeof(float)) != 0 && memcmp(g[0][1], g[1][1], nk * sizeof(float)) != 0,
                  "attention out or dk: the AMX path gave the FMA chains' bits");
    bf16_round_n(o[1], nq);
    ck_assert_msg(memcmp(o[1], o[2], nq * sizeof(float)) == 0 && memcmp(l[1], l[2], nl * sizeof(float)) == 0,
                  "attention_forward on AMX: round flag and bf16_round_n differ");
    for (int i = 0; i < 3; i++) {
        bf16_round_n(g[1][i], len[i]);
        ck_assert_msg(memcmp(g[1][i], g[2][i], len[i] * sizeof(float)) == 0,
                      "attention_backward on AMX, gradient %d: round flag and bf16_round_n differ", i);
    }
    for (int x = 0; x < 3; x++) {
        free(o[x]); free(l[x]);
        for (int i = 0; i < 3; i++) free(g[x][i]);
    }
    free(q); free(k); free(v); free(d);
}
END_TEST

// attention_forward16 / attention_backward16 against attention_forward / attention_backward
// with round on the same values, bit for bit (out, dq, dk and dv as the halves of the FP32
// ops' rounded outputs; lse as it is), on every vector path (AMX's tiles where the CPU has them,
// AVX-512F, AVX2, no FMA) at 1 and 3 threads, on odd T and groups of 1 to 3 heads: at the
// shape's head size (the tiles'), at 16 (the FMA tasks' alone, widened from the halves), and
// at 260, past the tiled path's limit, where both decline and write nothing.
// attention_workspace_bytes (what the plan counts) against what the ops then hold: released,
// each op pair run at 1 and 3 threads on each vector path (the tiles where this CPU has them,
// and not), the backward16 as one task per kv head (B·NKV ≥ 4 a thread) and as the split
// passes with D; FP32 words hold nothing without the tiles.
START_TEST(test_attention_workspace) {
    static const att_shape_t shapes[] = {{2, 70, 4, 2, 16, 0}, {1, 200, 4, 1, 64, 0}, {8, 33, 2, 2, 32, 0}};
    rng_t rg = rng_make(1950);
    for (int c = 0; c < 3; c++) {
        const int B = shapes[c].B, T = shapes[c].T, NH = shapes[c].NH, NKV = shapes[c].NKV, HS = shapes[c].HS;
        const size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
        float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *d = fnew(nq), *o = fnew(nq), *l = fnew(nl), *gq = fnew(nq),
              *gk = fnew(nk), *gv = fnew(nk);
        fill_sym(q, nq, 2.0, &rg); fill_sym(k, nk, 2.0, &rg); fill_sym(v, nk, 1.0, &rg); fill_sym(d, nq, 1.0, &rg);
        bf16_round_n(q, nq); bf16_round_n(k, nk); bf16_round_n(v, nk); bf16_round_n(d, nq);
        uint16_t *q16 = h16_of(q, nq), *k16 = h16_of(k, nk), *v16 = h16_of(v, nk), *d16 = h16_of(d, nq),
                 *o16 = malloc(nq * 2), *g16[3] = {malloc(nq * 2), malloc(nk * 2), malloc(nk * 2)};
        ck_assert(o16 && g16[0] && g16[1] && g16[2]);
        for (int lim = 3; lim >= 2; lim--)
            for (int th = 1; th <= 3; th += 2) {
                kernels_limit_simd(lim);
                set_threads(th);
                const size_t want = attention_workspace_bytes(B, T, NH, NKV, HS, 1, lim >= 3, th);
                // grown at the ops' first call, then reserved before it (a run's start): the
                // ops must find what they need and grow nothing
                for (int reserved = 0; reserved <= 1; reserved++) {
                    attention_release();
                    ck_assert_uint_eq(attention_held_bytes(), 0);
                    if (reserved) {
                        ck_assert_int_eq(attention_reserve(B, T, NH, NKV, HS, 1, lim >= 3, th), 0);
                        ck_assert_uint_eq(attention_held_bytes(), want);
                    }
                    ck_assert_int_eq(attention_forward16(o16, l, q16, k16, v16, B, T, NH, NKV, HS), 0);
                    ck_assert_int_eq(
                        attention_backward16(g16[0], g16[1], g16[2], d16, q16, k16, v16, o16, l, B, T, NH, NKV, HS), 0);
                    ck_assert_msg(want > 0 && attention_held_bytes() == want,
                                  "shape %d, path %d, %d threads, reserved %d: the BF16 ops hold %zu bytes, counted "
                                  "%zu", c, lim, th, reserved, attention_held_bytes(), want);
                }
                attention_release();
                attention_forward(o, l, q, k, v, B, T, NH, NKV, HS, 1);
                attention_backward(gq, gk, gv, d, q, k, v, o, l, B, T, NH, NKV, HS, 1);
                ck_assert_msg(attention_held_bytes() == attention_workspace_bytes(B, T, NH, NKV, HS, 0, lim >= 3, th),
                              "shape %d, path %d, %d threads: the FP32 ops hold %zu bytes, counted %zu", c, lim, th,
                              attention_held_bytes(), attention_workspace_bytes(B, T, NH, NKV, HS, 0, lim >= 3, th));
            }
        kernels_limit_simd(3);
        attention_release();
        free(q); free(k); free(v); free(d); free(o); free(l); free(gq); free(gk); free(gv);
        free(q16); free(k16); free(v16); free(d16); free(o16); free(g16[0]); free(g16[1]); free(g16[2]);
    }
}
END_TEST

START_TEST(test_attention16_bits) {
    const att_shape_t sh = ATT_AMX_SHAPES[_i];
    const int B = sh.B, T = sh.T, NH = sh.NH, NKV = sh.NKV, threads = omp_get_max_threads();
    rng_t rg = rng_make(1900 + (uint64_t)_i);
    for (int c = 0; c < 3; c++) {
        const int HS = c == 0 ? sh.HS : c == 1 ? 16 : 260;
        const size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
        float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *d = fnew(nq), *o = fnew(nq), *l = fnew(nl), *l16 = fnew(nl);
        float *g[3] = {fnew(nq), fnew(nk), fnew(nk)};
        uint16_t *g16[3] = {malloc(nq * 2), malloc(nk * 2), malloc(nk * 2)};
        ck_assert(g16[0] && g16[1] && g16[2]);
        fill_sym(q, nq, 2.0, &rg); fill_sym(k, nk, 2.0, &rg); fill_sym(v, nk, 1.0, &rg); fill_sym(d, nq, 1.0, &rg);
        bf16_round_n(q, nq); bf16_round_n(k, nk); bf16_round_n(v, nk); bf16_round_n(d, nq);
        uint16_t *q16 = h16_of(q, nq), *k16 = h16_of(k, nk), *v16 = h16_of(v, nk), *d16 = h16_of(d, nq), *o16 = malloc(nq * 2);
        ck_assert_ptr_nonnull(o16);
        const size_t len[3] = {nq, nk, nk};
        ck_assert_int_eq(attention_act16(NH, NKV, HS), c < 2);
        if (c == 2) { // declined: nothing written
            memset(o16, 0xab, nq * 2);
            fill_nan(l16, nl);
            memset(g16[0], 0xab, nq * 2);
            ck_assert_int_eq(attention_forward16(o16, l16, q16, k16, v16, B, T, NH, NKV, HS), 1);
            ck_assert_int_eq(attention_backward16(g16[0], g16[1], g16[2], d16, q16, k16, v16, q16, l16, B, T, NH, NKV, HS), 1);
            for (size_t i = 0; i < nq; i++) CHECK_LOOP(o16[i] == 0xabab && g16[0][i] == 0xabab, "a declined op wrote %zu", i);
            for (size_t i = 0; i < nl; i++) CHECK_LOOP(isnan(l16[i]), "a declined op wrote lse %zu", i);
        } else {
            for (int lim = 3; lim >= 0; lim--)
                for (int th = 1; th <= 3; th += 2) {
                    char what[128];
                    kernels_limit_simd(lim);
                    set_threads(th);
                    attention_forward(o, l, q, k, v, B, T, NH, NKV, HS, 1);
                    fill_nan(l16, nl);
                    memset(o16, 0xab, nq * 2);
                    ck_assert_int_eq(attention_forward16(o16, l16, q16, k16, v16, B, T, NH, NKV, HS), 0);
                    snprintf(what, sizeof what, "attention_forward16 out (shape %d, HS %d, path %d, %d threads)", _i, HS,
                             lim, th);
                    check_bits16(what, o16, o, nq);
                    snprintf(what, sizeof what, "attention_forward16 lse (shape %d, HS %d, path %d, %d threads)", _i, HS,
                             lim, th);
                    CHECK_BITS(what, l16, l, nl);
                    attention_backward(g[0], g[1], g[2], d, q, k, v, o, l, B, T, NH, NKV, HS, 1);
                    for (int i = 0; i < 3; i++) memset(g16[i], 0xab, len[i] * 2);
                    ck_assert_int_eq(attention_backward16(g16[0], g16[1], g16[2], d16, q16, k16, v16, o16, l16, B, T, NH,
                                                          NKV, HS), 0);
                    for (int i = 0; i < 3; i++) {
                        snprintf(what, sizeof what, "attention_backward16 %s (shape %d, HS %d, path %d, %d threads)",
                                 i == 0 ? "dq" : i == 1 ? "dk" : "dv", _i, HS, lim, th);
                        check_bits16(what, g16[i], g[i], len[i]);
                    }
                }
            kernels_limit_simd(3);
            set_threads(threads);
        }
        free(q); free(k); free(v); free(d); free(o); free(l); free(l16);
        free(q16); free(k16); free(v16); free(d16); free(o16);
        for (int i = 0; i < 3; i++) { free(g[i]); free(g16[i]); }
    }
}
END_TEST

// rope_forward16 and rope_backward16 against rope_forward and rope_backward with round, bit
// for bit, on every vector path and at 1 and 3 threads: head sizes with a ragged half (10),
// whole vectors (64) and more than one widened piece (260), odd row counts.
START_TEST(test_rope16_bits) {
    static const int SH[][4] = {{2, 9, 3, 10}, {1, 33, 4, 64}, {2, 5, 2, 260}}; // B, T, NX, HS
    const int threads = omp_get_max_threads();
    rng_t rg = rng_make(1950);
    for (size_t c = 0; c < NELEMS(SH); c++) {
        const int B = SH[c][0], T = SH[c][1], NX = SH[c][2], HS = SH[c][3];
        const size_t n = (size_t)B * T * NX * HS;
        float *x = fnew(n), *r = fnew(n), *ct = fnew((size_t)T * HS / 2), *st = fnew((size_t)T * HS / 2);
        rope_table(ct, st, T, HS, ROPE_THETA);
        fill_sym(x, n, 3.0, &rg);
        bf16_round_n(x, n);
        for (int lim = 2; lim >= 0; lim--) {
            if (!simd_have(lim)) continue;
            kernels_limit_simd(lim);
            for (int th = 1; th <= 3; th += 2)
                for (int inv = 0; inv < 2; inv++) {
                    char what[128];
                    set_threads(th);
                    memcpy(r, x, n * sizeof(float));
                    uint16_t *x16 = h16_of(x, n);
                    if (inv) {
                        rope_backward(r, ct, st, B, T, NX, HS, 1);
                        rope_backward16(x16, ct, st, B, T, NX, HS);
                    } else {
                        rope_forward(r, ct, st, B, T, NX, HS, 1);
                        rope_forward16(x16, ct, st, B, T, NX, HS);
                    }
                    snprintf(what, sizeof what, "rope_%s16 (HS %d, %s, %d threads)", inv ? "backward" : "forward", HS,
                             simd_path(lim), th);
                    check_bits16(what, x16, r, n);
                    free(x16);
                }
        }
        kernels_limit_simd(3);
        set_threads(threads);
        free(x); free(r); free(ct); free(st);
    }
}
END_TEST

START_TEST(test_attention_large_scores) {
    // Scores up to ±1000: exp without max subtraction overflows FP32. Forward only (the
    // gradients of a near one-hot softmax are ~0 and say little); outputs must be finite
    // and match FP64 (TOL_ATT_*_LARGE).
    const int B = 1, T = 40, NH = 4, NKV = 2, HS = 10;
    size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
    rng_t rg = rng_make(550);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *out = fnew(nq), *lse = fnew(nl);
    fill_sym(q, nq, 30.0, &rg);
    fill_sym(k, nk, 30.0, &rg);
    fill_sym(v, nk, 1.0, &rg);
    att_ctx_t c = {to_d(q, nq), to_d(k, nk), to_d(v, nk), NULL, B, T, NH, NKV, HS, 0, 0, 0, 0, 0};
    double *ref_out = dnew(nq), *ref_lse = dnew(nl);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++)
            ref_lse[(size_t)h * T + t] = att_ref_row(&c, 0, t, h, ref_out + ((size_t)t * NH + h) * HS);
    fill_nan(out, nq);
    fill_nan(lse, nl);
    attention_forward(out, lse, q, k, v, B, T, NH, NKV, HS, 0);
    CHECK_CLOSE("attention out, scores ±1000", out, ref_out, nq, TOL_ATT_OUT_LARGE);
    CHECK_CLOSE("attention lse, scores ±1000", lse, ref_lse, nl, TOL_ATT_LSE_LARGE);
    free(q); free(k); free(v); free(out); free(lse);
    free(c.q); free(c.k); free(c.v); free(ref_out); free(ref_lse);
}
END_TEST

// ---------------------------------------------------------------- SwiGLU
typedef struct { size_t n; double amp; } swiglu_shape_t;
static const swiglu_shape_t SWIGLU_SHAPES[] = {{1, 1}, {7, 1}, {33 * 72, 4}, {40001, 1}, {64, 30}};

typedef struct { double g, u; } swiglu_ctx_t;
static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double swiglu_loss(const void *p) { const swiglu_ctx_t *c = p; return silu_d(c->g) * c->u; }

static void swiglu_check(const float *gate, const float *up, const float *r, size_t n, const char *tag) {
    float *out = fnew(n), *dgate = fnew(n), *dup = fnew(n);
    double *ref_out = dnew(n), *ref_dgate = dnew(n), *ref_dup = dnew(n);
    for (size_t i = 0; i < n; i++) {
        swiglu_ctx_t c = {gate[i], up[i]};
        ref_out[i] = swiglu_loss(&c);
        // out_i depends on gate_i and up_i only, so dL/dgate_i = r_i · ∂out_i/∂gate_i
        ref_dgate[i] = r[i] * fd_h(&c.g, FD_H * fmax(1.0, fabs(c.g)), swiglu_loss, &c);
        ref_dup[i] = r[i] * fd(&c.u, swiglu_loss, &c);
    }
    char what[96];
    fill_nan(out, n);
    swiglu_forward(out, gate, up, n, 0);
    snprintf(what, sizeof what, "swiglu out %s", tag);
    CHECK_CLOSE(what, out, ref_out, n, TOL_SWIGLU_OUT);
    fill_nan(dgate, n);
    fill_nan(dup, n);
    swiglu_backward(dgate, dup, r, gate, up, n, 0);
    snprintf(what, sizeof what, "swiglu dgate %s", tag);
    CHECK_CLOSE(what, dgate, ref_dgate, n, TOL_SWIGLU_DGATE);
    snprintf(what, sizeof what, "swiglu dup %s", tag);
    CHECK_CLOSE(what, dup, ref_dup, n, TOL_SWIGLU_DUP);
    free(out); free(dgate); free(dup); free(ref_out); free(ref_dgate); free(ref_dup);
}

START_TEST(test_swiglu) {
    const swiglu_shape_t s = SWIGLU_SHAPES[_i];
    rng_t rg = rng_make(600 + (uint64_t)_i);
    float *gate = fnew(s.n), *up = fnew(s.n), *r = fnew(s.n);
    fill_sym(gate, s.n, s.amp, &rg);
    fill_sym(up, s.n, 1.0, &rg);
    fill_sym(r, s.n, 1.0, &rg);
    char tag[64];
    snprintf(tag, sizeof tag, "n=%zu amp=%g", s.n, s.amp);
    swiglu_check(gate, up, r, s.n, tag);
    free(gate); free(up); free(r);
}
END_TEST

// Where the CPU has AVX-512F, runs of 16 take the 16-lane chunks and a tail shorter than 16 the
// 8-lane ones: every element alone (a tail of one) must get the bits it got in the long run,
// rounded or not (on other CPUs both sides are the 8-lane path).
START_TEST(test_swiglu_paths) {
    const size_t n = 4099;
    rng_t rg = rng_make(610);
    float *g = fnew(n), *u = fnew(n), *d = fnew(n), *o = fnew(n), *dg = fnew(n), *du = fnew(n);
    fill_sym(g, n, 6.0, &rg);
    fill_sym(u, n, 1.0, &rg);
    fill_sym(d, n, 1.0, &rg);
    for (int round = 0; round < 2; round++) {
        swiglu_forward(o, g, u, n, round);
        swiglu_backward(dg, du, d, g, u, n, round);
        for (size_t i = 0; i < n; i++) {
            float o1, dg1, du1;
            swiglu_forward(&o1, g + i, u + i, 1, round);
            swiglu_backward(&dg1, &du1, d + i, g + i, u + i, 1, round);
            CHECK_LOOP(u_of(o1) == u_of(o[i]) && u_of(dg1) == u_of(dg[i]) && u_of(du1) == u_of(du[i]),
                       "swiglu element %zu (round %d): alone %a %a %a, in the run %a %a %a", i, round, o1, dg1, du1,
                       o[i], dg[i], du[i]);
        }
    }
    free(g); free(u); free(d); free(o); free(dg); free(du);
}
END_TEST

// swiglu_forward16 / swiglu_backward16 against the FP32 ops with round on the same values,
// bit for bit, on every vector path and at 1 and 3 threads: lengths with ragged tails (1, 7,
// 4099, more than one slice and one parallel chunk), gates wide enough to reach both ends of
// silu, and the backward in place (dgate over gate, dup over up) as the step runs it.
// rmsnorm_forward16 against rmsnorm_forward with round, bit for bit (the halves its rounded
// outputs, the same rstd), on every vector path and at 1 and 3 threads, rows wider than its
// 256-column segments and ragged (C 70, 300, 1000).
START_TEST(test_rmsnorm16_bits) {
    const int N = 37, Cs[3] = {70, 300, 1000};
    rng_t rg = rng_make(630);
    for (int k = 0; k < 3; k++) {
        const int C = Cs[k];
        float *x = fnew((size_t)N * C), *w = fnew((size_t)C), *out = fnew((size_t)N * C), *rs = fnew((size_t)N),
              *rs16 = fnew((size_t)N);
        uint16_t *o16 = malloc((size_t)N * C * 2);
        ck_assert_ptr_nonnull(o16);
        fill_sym(x, (size_t)N * C, 3.0, &rg);
        fill_sym(w, (size_t)C, 1.0, &rg);
        for (int lim = 2; lim >= 0; lim--) {
            if (!simd_have(lim)) continue;
            kernels_limit_simd(lim);
            for (int th = 1; th <= 3; th += 2) {
                char what[128];
                set_threads(th);
                rmsnorm_forward(out, rs, x, w, N, C, 1e-5f, 1);
                fill_nan(rs16, (size_t)N);
                rmsnorm_forward16(o16, rs16, x, w, N, C, 1e-5f);
                snprintf(what, sizeof what, "rmsnorm_forward16 (C %d, %s, %d threads)", C, simd_path(lim), th);
                check_bits16(what, o16, out, (size_t)N * C);
                CHECK_BITS(what, rs16, rs, (size_t)N);
            }
        }
        kernels_limit_simd(3);
        free(x); free(w); free(out); free(rs); free(rs16); free(o16);
    }
}
END_TEST

// x2 as BF16 halves (kernels.h residual_rmsnorm_forward16, add_inplace16, rmsnorm_backward16)
// against the FP32 ops they stand for, on the widened halves, bit for bit: add_inplace with
// round then rmsnorm_forward16; add_inplace; rmsnorm_backward. Every vector path, 1 and 3
// threads; rows ragged and not (C 8, 70, 256, 300, 1000: one 256-column piece, several, a tail
// shorter than 8), and add lengths past one parallel chunk with a ragged end.
START_TEST(test_residual16_bits) {
    const int N = 37, Cs[5] = {8, 70, 256, 300, 1000};
    rng_t rg = rng_make(640);
    for (int k = 0; k < 5; k++) {
        const int C = Cs[k];
        const size_t NC = (size_t)N * C;
        float *x = fnew(NC), *p = fnew(NC), *w = fnew((size_t)C), *t = fnew(NC), *ln = fnew(NC), *rs = fnew((size_t)N),
              *rs16 = fnew((size_t)N), *dout = fnew(NC), *dx0 = fnew(NC), *dx = fnew(NC), *dx16 = fnew(NC),
              *dw = fnew((size_t)C), *dw16 = fnew((size_t)C);
        uint16_t *x2 = malloc(NC * 2), *o16 = malloc(NC * 2), *ln16 = malloc(NC * 2);
        ck_assert(x2 && o16 && ln16);
        fill_sym(x, NC, 3.0, &rg);
        fill_sym(p, NC, 2.0, &rg);
        bf16_round_n(p, NC); // the projection's rounded outputs
        fill_sym(w, (size_t)C, 1.0, &rg);
        fill_sym(dout, NC, 1.0, &rg);
        fill_sym(dx0, NC, 1.0, &rg);
        for (int lim = 2; lim >= 0; lim--) {
            if (!simd_have(lim)) continue;
            kernels_limit_simd(lim);
            for (int th = 1; th <= 3; th += 2) {
                char what[128];
                set_threads(th);
                memcpy(t, p, NC * sizeof *t); // the FP32 ops: x2 = p + x rounded, then its norm
                add_inplace(t, x, NC, 1);
                rmsnorm_forward16(ln16, rs, t, w, N, C, 1e-5f);
                bf16_from_f32_n(x2, p, NC);
                fill_nan(rs16, (size_t)N);
                residual_rmsnorm_forward16(x2, o16, rs16, x, w, N, C, 1e-5f);
                snprintf(what, sizeof what, "residual_rmsnorm_forward16 x2 (C %d, %s, %d threads)", C, simd_path(lim), th);
                check_bits16(what, x2, t, NC);
                bf16_to_f32_n(ln, ln16, NC);
                snprintf(what, sizeof what, "residual_rmsnorm_forward16 out (C %d, %s, %d threads)", C, simd_path(lim), th);
                check_bits16(what, o16, ln, NC);
                CHECK_BITS(what, rs16, rs, (size_t)N);

                for (int rnd = 0; rnd <= 1; rnd++) { // the MLP's add: the block's output += x2
                    memcpy(dx, dx0, NC * sizeof *dx);
                    memcpy(dx16, dx0, NC * sizeof *dx);
                    add_inplace(dx, t, NC, rnd);
                    add_inplace16(dx16, x2, NC, rnd);
                    snprintf(what, sizeof what, "add_inplace16 (C %d, round %d, %s, %d threads)", C, rnd, simd_path(lim), th);
                    CHECK_BITS(what, dx16, dx, NC);
                }
                for (int rnd = 0; rnd <= 1; rnd++) { // the MLP's norm backward: dx and dw accumulate
                    memcpy(dx, dx0, NC * sizeof *dx);
                    memcpy(dx16, dx0, NC * sizeof *dx);
                    for (int i = 0; i < C; i++) dw[i] = dw16[i] = 0.25f * (float)i;
                    rmsnorm_backward(dx, dw, dout, t, w, rs, N, C, rnd);
                    rmsnorm_backward16(dx16, dw16, dout, x2, w, rs, N, C, rnd);
                    snprintf(what, sizeof what, "rmsnorm_backward16 dx (C %d, round %d, %s, %d threads)", C, rnd,
                             simd_path(lim), th);
                    CHECK_BITS(what, dx16, dx, NC);
                    snprintf(what, sizeof what, "rmsnorm_backward16 dw (C %d, round %d, %s, %d threads)", C, rnd,
                             simd_path(lim), th);
                    CHECK_BITS(what, dw16, dw, (size_t)C);
                }
            }
        }
        kernels_limit_simd(3);
        free(x); free(p); free(w); free(t); free(ln); free(rs); free(rs16); free(dout); free(dx0); free(dx); free(dx16);
        free(dw); free(dw16); free(x2); free(o16); free(ln16);
    }
    { // add_inplace16 past one parallel chunk (ADD_PAR_MIN, ADD_CHUNK), a ragged end
        const size_t n = 8192 * 5 + 3;
        float *a = fnew(n), *b = fnew(n), *y = fnew(n);
        fill_sym(a, n, 1.0, &rg);
        fill_sym(y, n, 1.0, &rg);
        bf16_round_n(y, n);
        uint16_t *y16 = h16_of(y, n);
        memcpy(b, a, n * sizeof *a);
        set_threads(3);
        add_inplace(a, y, n, 1);
        add_inplace16(b, y16, n, 1);
        CHECK_BITS("add_inplace16 (n 40963, 3 threads)", b, a, n);
        free(a); free(b); free(y); free(y16);
    }
}
END_TEST

START_TEST(test_swiglu16_bits) {
    const size_t ns[3] = {1, 7, 4099 * 3};
    const size_t n = ns[2];
    rng_t rg = rng_make(620);
    float *g = fnew(n), *u = fnew(n), *d = fnew(n), *o = fnew(n), *dg = fnew(n), *du = fnew(n);
    fill_sym(g, n, 12.0, &rg);
    fill_sym(u, n, 1.0, &rg);
    fill_sym(d, n, 1.0, &rg);
    bf16_round_n(g, n);
    bf16_round_n(u, n);
    bf16_round_n(d, n);
    uint16_t *g16 = h16_of(g, n), *u16 = h16_of(u, n), *d16 = h16_of(d, n), *o16 = malloc(n * 2), *a16 = malloc(n * 2),
             *b16 = malloc(n * 2);
    ck_assert(o16 && a16 && b16);
    for (int lim = 2; lim >= 0; lim--) {
        if (!simd_have(lim)) continue;
        kernels_limit_simd(lim);
        for (int th = 1; th <= 3; th += 2)
            for (int k = 0; k < 3; k++) {
                char what[128];
                set_threads(th);
                swiglu_forward(o, g, u, ns[k], 1);
                swiglu_backward(dg, du, d, g, u, ns[k], 1);
                swiglu_forward16(o16, g16, u16, ns[k]);
                memcpy(a16, g16, ns[k] * 2);
                memcpy(b16, u16, ns[k] * 2);
                swiglu_backward16(a16, b16, d16, a16, b16, ns[k]);
                snprintf(what, sizeof what, "swiglu_forward16 (n %zu, %s, %d threads)", ns[k], simd_path(lim), th);
                check_bits16(what, o16, o, ns[k]);
                snprintf(what, sizeof what, "swiglu_backward16 dgate (n %zu, %s, %d threads)", ns[k], simd_path(lim), th);
                check_bits16(what, a16, dg, ns[k]);
                snprintf(what, sizeof what, "swiglu_backward16 dup (n %zu, %s, %d threads)", ns[k], simd_path(lim), th);
                check_bits16(what, b16, du, ns[k]);
            }
    }
    kernels_limit_simd(3);
    free(g); free(u); free(d); free(o); free(dg); free(du);
    free(g16); free(u16); free(d16); free(o16); free(a16); free(b16);
}
END_TEST

START_TEST(test_swiglu_extremes) {
    // exp(−g) overflows for g < −88.7: silu must go to −0, never NaN; large g is ~identity.
    const float gate[] = {-1e30f, -1e4f, -100.f, -88.f, -20.f, -1.2785f, -0.0f, 0.0f, 1e-30f, 20.f, 88.f, 100.f, 1e4f, 1e30f};
    size_t n = (size_t)NELEMS(gate);
    float up[NELEMS(gate)], r[NELEMS(gate)];
    for (size_t i = 0; i < n; i++) { up[i] = 0.75f; r[i] = -1.25f; }
    swiglu_check(gate, up, r, n, "extremes");
}
END_TEST

// ---------------------------------------------------------------- embedding
typedef struct { int N, C, V; } emb_shape_t;
// V < N forces repeated tokens; C = 130 and 200 span several 64-column backward blocks.
static const emb_shape_t EMB_SHAPES[] = {{1, 1, 1}, {1, 48, 5}, {33, 10, 7}, {66, 72, 11}, {300, 130, 3}, {64, 200, 1000}};

typedef struct { double *wte, *r; const int *tok; int N, C, v, col; } emb_ctx_t;
static double emb_loss_elem(const void *p) { // the part of L that wte[v, col] reaches
    const emb_ctx_t *c = p;
    double L = 0;
    for (int n = 0; n < c->N; n++)
        if (c->tok[n] == c->v) L += c->r[(size_t)n * c->C + c->col] * c->wte[(size_t)c->v * c->C + c->col];
    return L;
}

START_TEST(test_embedding) {
    const emb_shape_t s = EMB_SHAPES[_i];
    const int N = s.N, C = s.C, V = s.V;
    size_t nw = (size_t)V * C, no = (size_t)N * C;
    rng_t rg = rng_make(700 + (uint64_t)_i);
    int *tok = malloc((size_t)N * sizeof(int));
    ck_assert_ptr_nonnull(tok);
    for (int n = 0; n < N; n++) tok[n] = (int)(rng_next(&rg) % (uint64_t)V);
    float *wte = fnew(nw), *r = fnew(no), *out = fnew(no), *dwte = fnew(nw), *dwte_pre = fnew(nw);
    fill_sym(wte, nw, 1.0, &rg);
    fill_sym(r, no, 1.0, &rg);
    fill_sym(dwte_pre, nw, 1.0, &rg);
    emb_ctx_t c = {to_d(wte, nw), to_d(r, no), tok, N, C, 0, 0};
    double *ref_out = dnew(no), *ref_dwte = dnew(nw);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) ref_out[(size_t)n * C + i] = c.wte[(size_t)tok[n] * C + i];
    for (int v = 0; v < V; v++)
        for (int i = 0; i < C; i++) {
            c.v = v; c.col = i;
            ref_dwte[(size_t)v * C + i] = dwte_pre[(size_t)v * C + i] + fd(&c.wte[(size_t)v * C + i], emb_loss_elem, &c);
        }
    char what[96];
    fill_nan(out, no);
    embedding_forward(out, tok, wte, N, C, 0, V);
    snprintf(what, sizeof what, "embedding out N=%d C=%d V=%d", N, C, V);
    CHECK_CLOSE(what, out, ref_out, no, TOL_EMB_OUT);
    memcpy(dwte, dwte_pre, nw * sizeof(float));
    embedding_backward(dwte, r, tok, N, C, 0, V);
    snprintf(what, sizeof what, "embedding dwte (+=) N=%d C=%d V=%d", N, C, V);
    CHECK_CLOSE(what, dwte, ref_dwte, nw, TOL_EMB_DWTE);
    free(tok); free(wte); free(r); free(out); free(dwte); free(dwte_pre);
    free(c.wte); free(c.r); free(ref_out); free(ref_dwte);
}
END_TEST

// Vocabulary chunks (kernels.h: wte holds rows [v0, v0 + nv)): doing every chunk of a cut
// of [0, V) gives the whole table's bits, forward and backward, and a chunk touches nothing
// outside it. nv: the chunks' rows (the last one ragged where nv does not divide V); 0: cuts
// drawn at random (chunks of 1..V/2+1 rows). The whole table runs on 1 thread, the chunks
// on 2: the bits hold across thread counts too.
typedef struct { int N, C, V, nv; } emb_chunk_t;
static const emb_chunk_t EMB_CHUNKS[] = {{1, 1, 1, 1},      {33, 10, 7, 1},     {33, 10, 7, 3},    {66, 72, 11, 4},
                                         {300, 130, 3, 2},  {64, 200, 1000, 333}, {64, 200, 1000, 0}, {129, 17, 50, 0},
                                         {20, 33, 40, 40}};
#define EMB_GUARD 2 // random rows on each side of a chunk's buffer: a read or write outside it shows

// cut[0] = 0 < cut[1] < … < cut[k] = V; returns k.
static int emb_cuts(int *cut, int V, int nv, rng_t *r) {
    int k = 0;
    cut[0] = 0;
    while (cut[k] < V) {
        const int w = nv > 0 ? nv : 1 + (int)(rng_next(r) % (uint64_t)(V / 2 + 1));
        cut[k + 1] = cut[k] + w < V ? cut[k] + w : V;
        k++;
    }
    return k;
}

// After the embedding of chunk [v0, v0 + nv) of a (V, C) table wrote into out: the row of each
// token inside the chunk is that token's row of want (the table, widened when the chunk was
// BF16), and every other row is as it was (prev).
static void check_chunk_rows(const char *form, const float *out, const float *prev, const float *want, const int *tok,
                             int N, int C, int V, int v0, int nv) {
    for (int n = 0; n < N; n++) {
        const int in = tok[n] >= v0 && tok[n] < v0 + nv;
        const float *row = in ? want + (size_t)tok[n] * C : prev + (size_t)n * C;
        CHECK_LOOP(memcmp(out + (size_t)n * C, row, (size_t)C * sizeof(float)) == 0,
                   "embedding chunk [%d, %d) of %s N=%d C=%d V=%d: out row %d (token %d) %s", v0, v0 + nv, form, N, C,
                   V, n, tok[n], in ? "is not its table row" : "was touched");
    }
}

START_TEST(test_embedding_chunks) {
    const emb_chunk_t s = EMB_CHUNKS[_i];
    const int N = s.N, C = s.C, V = s.V;
    const size_t nw = (size_t)V * C, no = (size_t)N * C, g = (size_t)EMB_GUARD * C;
    rng_t rg = rng_make(720 + (uint64_t)_i);
    int *tok = malloc((size_t)N * sizeof(int)), *cut = malloc((size_t)(V + 1) * sizeof(int));
    ck_assert_ptr_nonnull(tok);
    ck_assert_ptr_nonnull(cut);
    for (int n = 0; n < N; n++) tok[n] = (int)(rng_next(&rg) % (uint64_t)V);
    float *wte = fnew(nw), *dout = fnew(no), *dw_pre = fnew(nw);
    fill_sym(wte, nw, 1.0, &rg);
    fill_sym(dout, no, 1.0, &rg);
    fill_sym(dw_pre, nw, 1.0, &rg);
    // the whole table: what the chunks must give
    float *out_all = fnew(no), *dw_all = fdup(dw_pre, nw);
    fill_nan(out_all, no);
    set_threads(1);
    embedding_forward(out_all, tok, wte, N, C, 0, V);
    embedding_backward(dw_all, dout, tok, N, C, 0, V);
    set_threads(2);
    // from BF16 values: the whole table widened is what each chunk's BF16 rows must give
    uint16_t *w16 = malloc((nw + 2 * g) * sizeof *w16);
    ck_assert_ptr_nonnull(w16);
    float *wide = fnew(nw), *out16_all = fnew(no), *out16 = fnew(no);
    bf16_from_f32_n(w16, wte, nw);
    bf16_to_f32_n(wide, w16, nw);
    fill_nan(out16_all, no);
    set_threads(1);
    embedding_forward(out16_all, tok, wide, N, C, 0, V);
    set_threads(2);
    fill_nan(out16, no);
    const int k = emb_cuts(cut, V, s.nv, &rg);
    float *out = fnew(no), *prev = fnew(no), *buf = fnew(nw + 2 * g), *buf0 = fnew(nw + 2 * g);
    fill_nan(out, no);
    for (int j = 0; j < k; j++) {
        const int v0 = cut[j], nv = cut[j + 1] - v0;
        const size_t nc = (size_t)nv * C;
        // forward: the chunk's wte rows between guards; rows of other tokens stay as they were
        fill_sym(buf, nc + 2 * g, 1.0, &rg);
        memcpy(buf + g, wte + (size_t)v0 * C, nc * sizeof(float));
        memcpy(prev, out, no * sizeof(float));
        embedding_forward(out, tok, buf + g, N, C, v0, nv);
        check_chunk_rows("FP32 values", out, prev, wte, tok, N, C, V, v0, nv);
        // the same chunk as BF16 values between guards of arbitrary bits
        for (size_t i = 0; i < nc + 2 * g; i++) w16[i] = (uint16_t)rng_next(&rg);
        bf16_from_f32_n(w16 + g, wte + (size_t)v0 * C, nc);
        memcpy(prev, out16, no * sizeof(float));
        embedding_forward_w16(out16, tok, w16 + g, N, C, v0, nv);
        check_chunk_rows("BF16 values", out16, prev, wide, tok, N, C, V, v0, nv);
        // backward: the chunk's rows of the prefill between guards, onto which its tokens add
        fill_sym(buf, nc + 2 * g, 1.0, &rg);
        memcpy(buf + g, dw_pre + (size_t)v0 * C, nc * sizeof(float));
        memcpy(buf0, buf, (nc + 2 * g) * sizeof(float));
        embedding_backward(buf + g, dout, tok, N, C, v0, nv);
        CHECK_LOOP(memcmp(buf + g, dw_all + (size_t)v0 * C, nc * sizeof(float)) == 0,
                   "embedding chunk [%d, %d) N=%d C=%d V=%d: dwte rows differ from the whole table's", v0, v0 + nv, N,
                   C, V);
        CHECK_LOOP(memcmp(buf, buf0, g * sizeof(float)) == 0 &&
                       memcmp(buf + g + nc, buf0 + g + nc, g * sizeof(float)) == 0,
                   "embedding chunk [%d, %d) N=%d C=%d V=%d: dwte written outside the chunk", v0, v0 + nv, N, C, V);
    }
    char what[96];
    snprintf(what, sizeof what, "embedding out, %d chunks, N=%d C=%d V=%d", k, N, C, V);
    CHECK_BITS(what, out, out_all, no);
    snprintf(what, sizeof what, "embedding out of BF16 values, %d chunks, N=%d C=%d V=%d", k, N, C, V);
    CHECK_BITS(what, out16, out16_all, no);
    free(tok); free(cut); free(wte); free(dout); free(dw_pre); free(out_all); free(dw_all); free(out); free(prev);
    free(buf); free(buf0); free(w16); free(wide); free(out16_all); free(out16);
}
END_TEST

// ---------------------------------------------------------------- cross-entropy
typedef struct { int N, V; double amp; } ce_shape_t;
// amp 100: logits ±100 overflow exp() in FP32 without max subtraction. V = 32000 is the
// LM-head size; there finite differences are taken at 97 sampled columns per row (the
// target included), the loss everywhere.
static const ce_shape_t CE_SHAPES[] = {{1, 1, 1}, {1, 5, 1}, {7, 48, 1}, {33, 256, 4}, {4, 1000, 100}, {3, 32000, 10}};
#define CE_FULL_FD_MAX 2048
#define CE_SAMPLES 97

typedef struct { double *x; int V, tgt; double dscale; } ce_ctx_t;
static double ce_ref_loss(const double *x, int V, int tgt) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < V; i++) z += exp(x[i] - m);
    return log(z) - (x[tgt] - m);
}
// dscale · ∂loss/∂x of one row: (softmax − onehot) · dscale.
static void ce_ref_dlogits(double *d, const double *x, int V, int tgt, double dscale) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < V; i++) z += exp(x[i] - m);
    for (int i = 0; i < V; i++) d[i] = (exp(x[i] - m) / z - (i == tgt)) * dscale;
}
static double ce_loss_row(const void *p) { // L = dscale · Σ_n loss_n; logits[n] reach loss_n
    const ce_ctx_t *c = p;
    return c->dscale * ce_ref_loss(c->x, c->V, c->tgt);
}

START_TEST(test_crossentropy) {
    const ce_shape_t s = CE_SHAPES[_i];
    const int N = s.N, V = s.V;
    size_t nl = (size_t)N * V;
    const float dscale = 0.37f;
    rng_t rg = rng_make(800 + (uint64_t)_i);
    int *tgt = malloc((size_t)N * sizeof(int));
    ck_assert_ptr_nonnull(tgt);
    for (int n = 0; n < N; n++) tgt[n] = (int)(rng_next(&rg) % (uint64_t)V);
    float *logits = fnew(nl), *dlogits = fnew(nl), *losses = fnew(N), *losses2 = fnew(N);
    fill_sym(logits, nl, s.amp, &rg);
    double *xd = to_d(logits, nl), *ref_loss = dnew(N);
    // columns checked against finite differences: all, or a sample with the target
    int ncol = V <= CE_FULL_FD_MAX ? V : CE_SAMPLES;
    int *cols = malloc((size_t)N * ncol * sizeof(int));
    ck_assert_ptr_nonnull(cols);
    double *ref_d = dnew((size_t)N * ncol);
    for (int n = 0; n < N; n++) {
        ce_ctx_t c = {xd + (size_t)n * V, V, tgt[n], (double)dscale};
        ref_loss[n] = ce_ref_loss(c.x, V, tgt[n]);
        for (int j = 0; j < ncol; j++) {
            int col = ncol == V ? j : (j == 0 ? tgt[n] : (int)(rng_next(&rg) % (uint64_t)V));
            cols[(size_t)n * ncol + j] = col;
            ref_d[(size_t)n * ncol + j] = fd(&c.x[col], ce_loss_row, &c);
        }
    }
    float *got_d = fnew((size_t)N * ncol);
    char what[96];

    for (int alias = 0; alias < 2; alias++) {
        float *buf = alias ? fdup(logits, nl) : dlogits;
        if (!alias) fill_nan(dlogits, nl);
        fill_nan(losses, N);
        crossentropy_forward_backward(buf, losses, alias ? buf : logits, tgt, N, V, dscale);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < ncol; j++) got_d[(size_t)n * ncol + j] = buf[(size_t)n * V + cols[(size_t)n * ncol + j]];
        snprintf(what, sizeof what, "crossentropy loss%s N=%d V=%d amp=%g", alias ? " (aliased)" : "", N, V, s.amp);
        CHECK_CLOSE(what, losses, ref_loss, N, TOL_CE_LOSS);
        snprintf(what, sizeof what, "crossentropy dlogits%s N=%d V=%d amp=%g", alias ? " (aliased)" : "", N, V, s.amp);
        CHECK_CLOSE(what, got_d, ref_d, (size_t)N * ncol, TOL_CE_DLOGITS);
        if (alias) free(buf);
    }
    // Σ_i dlogits[n, i] = 0 for every row (softmax sums to one) — checks unsampled columns.
    for (int n = 0; n < N; n++) {
        double sum = 0, mag = 0;
        for (int i = 0; i < V; i++) { sum += dlogits[(size_t)n * V + i]; mag += fabs(dlogits[(size_t)n * V + i]); }
        ck_assert_msg(fabs(sum) <= CE_ROWSUM_RTOL * (mag + dscale), "crossentropy row %d: Σ dlogits = %g", n, sum);
    }
    fill_nan(losses2, N);
    crossentropy_forward(losses2, logits, tgt, N, V);
    snprintf(what, sizeof what, "crossentropy_forward loss N=%d V=%d amp=%g", N, V, s.amp);
    CHECK_CLOSE(what, losses2, ref_loss, N, TOL_CE_LOSS);

    free(tgt); free(logits); free(dlogits); free(losses); free(losses2); free(xd); free(ref_loss);
    free(cols); free(ref_d); free(got_d);
}
END_TEST

// ---------------------------------------------------------------- cross-entropy, the quantum form
// As the step runs it (kernels.h): quantum q holds columns [v0, v0 + Vq) of every row, (N, Vq)
// row-major; the quanta lie one after another, so quantum q starts at N·v0 ("packed").
// V ≤ CE_QUANTUM: one quantum, which must give the single pass's bits. V > CE_QUANTUM:
// against FP64. ramp adds ramp·8·i/V to column i: +1 makes every quantum's max the
// largest yet (each fold rescales S), −1 the smallest (each fold rescales s).
typedef struct { int N, V; double amp; int ramp; } ceq_shape_t;
// V not a multiple of 8 (the ragged lanes), V = CE_QUANTUM exactly, N = 1.
static const ceq_shape_t CEQ_ONE[] = {{1, 1, 1, 0},    {1, 5, 1, 0},     {7, 48, 1, 0},   {2, 13, 1, 0},
                                      {33, 256, 4, 0}, {4, 1000, 100, 0}, {3, 2047, 10, 0}, {5, 2048, 2, 0}};
// ragged last quanta (37; 1 with N = 1 and with amp 100), V a multiple of CE_QUANTUM, ramps.
static const ceq_shape_t CEQ_MANY[] = {{3, 2 * CE_QUANTUM + 37, 4, 0}, {4, 5000, 10, 0}, {2, 8192, 1, 0},
                                       {1, 2 * CE_QUANTUM + 1, 2, 0},  {2, 2 * CE_QUANTUM + 1, 100, 0},
                                       {3, 6000, 4, 1},                {3, 6000, 4, -1}};

static int ceq_width(int V, int v0) { return V - v0 < CE_QUANTUM ? V - v0 : CE_QUANTUM; }
static size_t ceq_index(int n, int i, int N, int V) { // packed index of row n, column i
    const int v0 = i / CE_QUANTUM * CE_QUANTUM;
    return (size_t)N * v0 + (size_t)n * ceq_width(V, v0) + (size_t)(i - v0);
}
static void ceq_pack(float *xq, const float *x, int N, int V) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++) xq[ceq_index(n, i, N, V)] = x[(size_t)n * V + i];
}
static void ceq_unpack(float *x, const float *xq, int N, int V) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++) x[(size_t)n * V + i] = xq[ceq_index(n, i, N, V)];
}
// Stats a first fold must not read: any of them, read, changes the result.
static void ceq_stats_garbage(float *stats, int N) {
    for (int n = 0; n < N; n++) { stats[n] = 1e30f; stats[N + n] = 3.0f; stats[2 * N + n] = 5.0f; }
}
// Every quantum folded in ascending order, the losses, then every quantum's backward in
// descending order (any order is allowed). dq == xq runs the backward in place.
static void ceq_run(float *dq, float *losses, float *stats, const float *xq, const int *tgt, int N, int V,
                    float dscale) {
    ceq_stats_garbage(stats, N);
    for (int v0 = 0; v0 < V; v0 += CE_QUANTUM)
        crossentropy_fold(stats, xq + (size_t)N * v0, tgt, N, ceq_width(V, v0), v0);
    crossentropy_loss(losses, stats, N);
    for (int v0 = (V - 1) / CE_QUANTUM * CE_QUANTUM; v0 >= 0; v0 -= CE_QUANTUM)
        crossentropy_backward(dq + (size_t)N * v0, xq + (size_t)N * v0, stats, tgt, N, ceq_width(V, v0), v0, dscale);
}
// Logits (N, V) with the shape's amplitude and ramp; targets: row 0 the last column (in the
// last, possibly one-wide, quantum), row 1 the first column of the second quantum, the rest
// at random.
// Allocates both: *x (N, V) and the targets it returns.
static int *ceq_inputs(float **xp, const ceq_shape_t *s, uint64_t seed) {
    rng_t rg = rng_make(seed), *r = &rg;
    int *tgt = malloc((size_t)s->N * sizeof(int));
    ck_assert_ptr_nonnull(tgt);
    float *x = *xp = fnew((size_t)s->N * s->V);
    for (int n = 0; n < s->N; n++)
        for (int i = 0; i < s->V; i++)
            x[(size_t)n * s->V + i] = (float)(rng_sym(r, s->amp) + s->ramp * 8.0 * i / s->V);
    for (int n = 0; n < s->N; n++) tgt[n] = (int)(rng_next(r) % (uint64_t)s->V);
    tgt[0] = s->V - 1;
    if (s->N > 1 && s->V > CE_QUANTUM) tgt[1] = CE_QUANTUM;
    return tgt;
}

START_TEST(test_ce_quantum_one) {
    const ceq_shape_t s = CEQ_ONE[_i];
    const int N = s.N, V = s.V;
    const size_t nl = (size_t)N * V;
    const float dscale = 0.37f;
    float *x;
    int *tgt = ceq_inputs(&x, &s, 820 + (uint64_t)_i);
    float *d_ref = fnew(nl), *l_ref = fnew(N), *l_fwd = fnew(N);
    crossentropy_forward_backward(d_ref, l_ref, x, tgt, N, V, dscale);
    crossentropy_forward(l_fwd, x, tgt, N, V);
    float *dq = fnew(nl), *losses = fnew(N), *stats = fnew(3 * (size_t)N);
    char what[96];
    for (int alias = 0; alias < 2; alias++) { // one quantum: packed is the (N, V) layout itself
        float *xq = alias ? fdup(x, nl) : x, *out = alias ? xq : dq;
        if (!alias) fill_nan(dq, nl);
        fill_nan(losses, N);
        set_threads(alias + 1);
        ceq_run(out, losses, stats, xq, tgt, N, V, dscale);
        snprintf(what, sizeof what, "quantum ce loss%s N=%d V=%d", alias ? " (aliased)" : "", N, V);
        CHECK_BITS(what, losses, l_ref, (size_t)N);
        CHECK_BITS(what, losses, l_fwd, (size_t)N);
        snprintf(what, sizeof what, "quantum ce dlogits%s N=%d V=%d", alias ? " (aliased)" : "", N, V);
        CHECK_BITS(what, out, d_ref, nl);
        if (alias) free(xq);
    }
    free(tgt); free(x); free(d_ref); free(l_ref); free(l_fwd); free(dq); free(losses); free(stats);
}
END_TEST

START_TEST(test_ce_quantum_many) {
    const ceq_shape_t s = CEQ_MANY[_i];
    const int N = s.N, V = s.V;
    const size_t nl = (size_t)N * V;
    const float dscale = 0.37f;
    float *x, *xq = fnew(nl);
    int *tgt = ceq_inputs(&x, &s, 840 + (uint64_t)_i);
    ceq_pack(xq, x, N, V);
    // FP64 reference
    double *ref_loss = dnew(N), *ref_d = dnew(nl), *xd = to_d(x, nl);
    for (int n = 0; n < N; n++) {
        ref_loss[n] = ce_ref_loss(xd + (size_t)n * V, V, tgt[n]);
        ce_ref_dlogits(ref_d + (size_t)n * V, xd + (size_t)n * V, V, tgt[n], dscale);
    }
    float *dq[2], *losses[2], *stats[2];
    for (int run = 0; run < 2; run++) { // 1 thread, then 2
        dq[run] = fnew(nl); losses[run] = fnew(N); stats[run] = fnew(3 * (size_t)N);
        fill_nan(dq[run], nl);
        fill_nan(losses[run], N);
        set_threads(run + 1);
        ceq_run(dq[run], losses[run], stats[run], xq, tgt, N, V, dscale);
    }
    char what[96];
    snprintf(what, sizeof what, "quantum ce loss N=%d V=%d amp=%g ramp=%d", N, V, s.amp, s.ramp);
    CHECK_CLOSE(what, losses[0], ref_loss, N, TOL_CEQ_LOSS);
    float *d = fnew(nl);
    ceq_unpack(d, dq[0], N, V);
    snprintf(what, sizeof what, "quantum ce dlogits N=%d V=%d amp=%g ramp=%d", N, V, s.amp, s.ramp);
    CHECK_CLOSE(what, d, ref_d, nl, TOL_CEQ_DLOGITS);
    // the stats hold the row's exact max and target logit
    for (int n = 0; n < N; n++) {
        float m = -INFINITY;
        for (int i = 0; i < V; i++) m = x[(size_t)n * V + i] > m ? x[(size_t)n * V + i] : m;
        ck_assert_msg(stats[0][n] == m && stats[0][2 * N + n] == x[(size_t)n * V + tgt[n]],
                      "quantum ce N=%d V=%d row %d: stats M %.9g XT %.9g, want %.9g %.9g", N, V, n, stats[0][n],
                      stats[0][2 * N + n], m, x[(size_t)n * V + tgt[n]]);
    }
    snprintf(what, sizeof what, "quantum ce N=%d V=%d, 1 vs 2 threads: loss", N, V);
    CHECK_BITS(what, losses[1], losses[0], (size_t)N);
    snprintf(what, sizeof what, "quantum ce N=%d V=%d, 1 vs 2 threads: stats", N, V);
    CHECK_BITS(what, stats[1], stats[0], 3 * (size_t)N);
    snprintf(what, sizeof what, "quantum ce N=%d V=%d, 1 vs 2 threads: dlogits", N, V);
    CHECK_BITS(what, dq[1], dq[0], nl);
    // in place: the same bits
    float *aq = fdup(xq, nl);
    ceq_run(aq, losses[1], stats[1], aq, tgt, N, V, dscale);
    snprintf(what, sizeof what, "quantum ce dlogits in place N=%d V=%d", N, V);
    CHECK_BITS(what, aq, dq[0], nl);
    for (int run = 0; run < 2; run++) { free(dq[run]); free(losses[run]); free(stats[run]); }
    free(tgt); free(x); free(xq); free(ref_loss); free(ref_d); free(xd); free(d); free(aq);
}
END_TEST

// ---------------------------------------------------------------- AdamW
typedef struct { size_t n; float wd, grad_scale; int t; } adam_case_t;
static const adam_case_t ADAM_CASES[] = {{4099, 0.1f, 0.37f, 3}, {70001, 0.0f, 1.0f, 1}, {513, 0.1f, 1.0f, 1000}};

typedef struct { float *master, *m, *v, *g; } adam_state_t;

// Magnitudes spread over many decades (10^−12..10^6 for g and m, 10^−24..10^12 for v,
// 10^−6..10^3 for master), random signs; a few exact zeros.
static void adam_fill(adam_state_t *st, size_t n, rng_t *r) {
    st->master = fnew(n); st->m = fnew(n); st->v = fnew(n); st->g = fnew(n);
    for (size_t i = 0; i < n; i++) {
        double sg = rng_unif(r) < 0.5 ? -1 : 1, sm = rng_unif(r) < 0.5 ? -1 : 1, sp = rng_unif(r) < 0.5 ? -1 : 1;
        st->g[i] = (float)(sg * pow(10.0, -12 + 18 * rng_unif(r)));
        st->m[i] = (float)(sm * pow(10.0, -12 + 18 * rng_unif(r)));
        st->v[i] = (float)pow(10.0, -24 + 36 * rng_unif(r));
        st->master[i] = (float)(sp * pow(10.0, -6 + 9 * rng_unif(r)));
        if (i % 97 == 5) st->g[i] = 0.0f;
        if (i % 89 == 7) st->m[i] = 0.0f, st->v[i] = 0.0f;
    }
}
static void adam_free(adam_state_t *st) { free(st->master); free(st->m); free(st->v); free(st->g); }
static adamw_params_t adam_hp(const adam_case_t *ac) {
    adamw_params_t hp = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .wd = ac->wd,
                         .grad_scale = ac->grad_scale};
    hp.bc1 = (float)(1.0 - pow(0.9, ac->t));
    hp.bc2 = (float)(1.0 - pow(0.95, ac->t));
    return hp;
}

// |out − ref| ≤ ADAM_ULPS·ε·scale + FLT_MIN, element by element (tu_close per element so
// the bound can follow the size of the terms).
static void adam_close(const char *what, const float *out, const double *ref, const double *scale, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double atol = ADAM_ULPS * FLT_EPSILON * scale[i] + FLT_MIN;
        worst = fmax(worst, fabs((double)out[i] - ref[i]) / atol);
        if (!tu_close(what, out + i, ref + i, 1, atol, 0.0))
            ck_abort_msg("%s: element %zu out of tolerance (see stderr)", what, i);
    }
    if (getenv("TK_VERBOSE")) fprintf(stderr, "  %-48s n=%-7zu worst/limit %.3f\n", what, n, worst);
}

START_TEST(test_adamw_fp64) {
    // Against FP64 of the same formula. m and v from the FP32 inputs; master from the
    // kernel's own m and v (so m's cancellation does not propagate into master's check).
    const adam_case_t ac = ADAM_CASES[_i];
    const size_t n = ac.n;
    rng_t rg = rng_make(900 + (uint64_t)_i);
    adam_state_t st;
    adam_fill(&st, n, &rg);
    adamw_params_t hp = adam_hp(&ac);
    double *m_in = to_d(st.m, n), *v_in = to_d(st.v, n), *p_in = to_d(st.master, n);
    float *p32 = fnew(n);
    uint16_t *p16 = malloc(n * sizeof(uint16_t));
    ck_assert_ptr_nonnull(p16);
    fill_nan(p32, n);
    for (size_t i = 0; i < n; i++) p16[i] = 0x7FFF;
    adamw_update_scalar(st.master, st.m, st.v, p16, p32, st.g, n, &hp);

    double *ref_m = dnew(n), *ref_v = dnew(n), *ref_p = dnew(n), *sc_m = dnew(n), *sc_v = dnew(n), *sc_p = dnew(n);
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.wd, eps = hp.eps;
    for (size_t i = 0; i < n; i++) {
        double g = (double)st.g[i] * hp.grad_scale;
        ref_m[i] = b1 * m_in[i] + (1 - b1) * g;
        sc_m[i] = fabs(b1 * m_in[i]) + fabs((1 - b1) * g);
        ref_v[i] = b2 * v_in[i] + (1 - b2) * g * g;
        sc_v[i] = fabs(ref_v[i]);
        double mh = (double)st.m[i] / hp.bc1, vh = (double)st.v[i] / hp.bc2; // kernel's m, v
        double u = mh / (sqrt(vh) + eps);
        ref_p[i] = p_in[i] - lr * (wd * p_in[i] + u);
        sc_p[i] = fabs(p_in[i]) + lr * (fabs(wd * p_in[i]) + fabs(u));
    }
    char what[64];
    snprintf(what, sizeof what, "adamw m n=%zu", n);
    adam_close(what, st.m, ref_m, sc_m, n);
    snprintf(what, sizeof what, "adamw v n=%zu", n);
    adam_close(what, st.v, ref_v, sc_v, n);
    snprintf(what, sizeof what, "adamw master n=%zu", n);
    adam_close(what, st.master, ref_p, sc_p, n);
    for (size_t i = 0; i < n; i++) {
        CHECK_LOOP(u_of(p32[i]) == u_of(st.master[i]), "adamw p32[%zu] != master", i);
        CHECK_LOOP(p16[i] == bf16_from_f32(st.master[i]), "adamw p16[%zu] != bf16(master)", i);
    }
    adam_free(&st);
    free(m_in); free(v_in); free(p_in); free(p32); free(p16);
    free(ref_m); free(ref_v); free(ref_p); free(sc_m); free(sc_v); free(sc_p);
}
END_TEST

START_TEST(test_adamw_bits) {
    // The header's exact sequence, written out here in FP32 (this file is also built with
    // -ffp-contract=off): the kernel must match it bit for bit — this is what makes every
    // other AdamW path (AVX2, AVX-512, CUDA) comparable to it. Also: NULL p16/p32 is allowed
    // and changes nothing else.
    const adam_case_t ac = ADAM_CASES[_i];
    const size_t n = ac.n;
    rng_t rg = rng_make(950 + (uint64_t)_i);
    adam_state_t st, st2;
    adam_fill(&st, n, &rg);
    st2.master = fdup(st.master, n); st2.m = fdup(st.m, n); st2.v = fdup(st.v, n); st2.g = fdup(st.g, n);
    adamw_params_t hp = adam_hp(&ac);
    float *em = fnew(n), *ev = fnew(n), *ep = fnew(n);
    for (size_t i = 0; i < n; i++) {
        float g = st.g[i] * hp.grad_scale;
        float m = fmaf(hp.beta1, st.m[i], (1.0f - hp.beta1) * g);
        float v = fmaf(hp.beta2, st.v[i], ((1.0f - hp.beta2) * g) * g);
        float mh = m / hp.bc1, vh = v / hp.bc2;
        float u = mh / (sqrtf(vh) + hp.eps);
        em[i] = m;
        ev[i] = v;
        ep[i] = st.master[i] - hp.lr * fmaf(hp.wd, st.master[i], u);
    }
    float *p32 = fnew(n);
    uint16_t *p16 = malloc(n * sizeof(uint16_t));
    ck_assert_ptr_nonnull(p16);
    adamw_update_scalar(st.master, st.m, st.v, p16, p32, st.g, n, &hp);
    adamw_update_scalar(st2.master, st2.m, st2.v, NULL, NULL, st2.g, n, &hp);
    for (size_t i = 0; i < n; i++) {
        CHECK_LOOP(u_of(st.m[i]) == u_of(em[i]), "adamw m[%zu] = %a, sequence gives %a", i, st.m[i], em[i]);
        CHECK_LOOP(u_of(st.v[i]) == u_of(ev[i]), "adamw v[%zu] = %a, sequence gives %a", i, st.v[i], ev[i]);
        CHECK_LOOP(u_of(st.master[i]) == u_of(ep[i]), "adamw master[%zu] = %a, sequence gives %a", i, st.master[i], ep[i]);
        CHECK_LOOP(u_of(p32[i]) == u_of(ep[i]) && p16[i] == bf16_from_f32(ep[i]), "adamw p32/p16[%zu]", i);
    }
    ck_assert(memcmp(st.master, st2.master, n * sizeof(float)) == 0);
    ck_assert(memcmp(st.m, st2.m, n * sizeof(float)) == 0);
    ck_assert(memcmp(st.v, st2.v, n * sizeof(float)) == 0);
    adam_free(&st);
    adam_free(&st2);
    free(em); free(ev); free(ep); free(p32); free(p16);
}
END_TEST

// ---------------------------------------------------------------- fused BF16 rounding
// Every op's round flag against the op with round = 0 followed by bf16_round_n on each of its
// activation outputs: the same bits. Odd shapes (ragged matmul tiles, tails of the vector
// loops), a few specials (±Inf, NaN, halfway and max-finite values) in the elementwise inputs,
// attention on both backward paths (1 thread: one pass; 64: the split passes) and the plain
// path (HS > 256).
#define SAME_BITS(what, a, b, n) \
    ck_assert_msg(memcmp((a), (b), (n) * sizeof(float)) == 0, "%s: round flag and bf16_round_n differ", (what))

static float *fcopy(const float *x, size_t n) {
    float *y = fnew(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static void add_specials(float *x, size_t n) {
    const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x80000001u};
    for (size_t i = 0; i < NELEMS(sp) && i * 37 < n; i++) x[i * 37] = f_of(sp[i]);
}

START_TEST(test_round_flags) {
    rng_t rg = rng_make(2024);
    const int N = 300, IC = 24, OC = 290;
    float *inp = fnew((size_t)N * IC), *w = fnew((size_t)OC * IC), *dout = fnew((size_t)N * OC);
    fill_sym(inp, (size_t)N * IC, 1.0, &rg); fill_sym(w, (size_t)OC * IC, 1.0, &rg); fill_sym(dout, (size_t)N * OC, 1.0, &rg);
    float *a = fnew((size_t)N * OC), *b = fnew((size_t)N * OC);
    matmul_forward(a, inp, w, N, IC, OC, 0);
    bf16_round_n(a, (size_t)N * OC);
    matmul_forward(b, inp, w, N, IC, OC, 1);
    SAME_BITS("matmul_forward", a, b, (size_t)N * OC);
    for (int acc = 0; acc < 2; acc++) {
        float *x = fnew((size_t)N * IC), *y;
        fill_sym(x, (size_t)N * IC, 1.0, &rg);
        y = fcopy(x, (size_t)N * IC);
        matmul_backward_input(x, dout, w, N, IC, OC, acc, 0);
        bf16_round_n(x, (size_t)N * IC);
        matmul_backward_input(y, dout, w, N, IC, OC, acc, 1);
        SAME_BITS(acc ? "matmul_backward_input +=" : "matmul_backward_input =", x, y, (size_t)N * IC);
        fill_sym(x, (size_t)N * IC, 1.0, &rg); // OC = 0 and "+=": nothing added, the input rounded
        memcpy(y, x, (size_t)N * IC * sizeof(float));
        matmul_backward_input(x, dout, w, N, IC, 0, acc, 0);
        bf16_round_n(x, (size_t)N * IC);
        matmul_backward_input(y, dout, w, N, IC, 0, acc, 1);
        SAME_BITS("matmul_backward_input, OC = 0", x, y, (size_t)N * IC);
        free(x); free(y);
    }
    free(inp); free(w); free(dout); free(a); free(b);

    const size_t n = 70001; // past add_inplace's parallel threshold, with a ragged tail
    float *x = fnew(n), *y = fnew(n), *z = fnew(n), *p[4], *q2[4];
    fill_sym(x, n, 8.0, &rg); fill_sym(y, n, 8.0, &rg); fill_sym(z, n, 1.0, &rg);
    add_specials(x, n);
    p[0] = fcopy(x, n); q2[0] = fcopy(x, n);
    add_inplace(p[0], y, n, 0);
    bf16_round_n(p[0], n);
    add_inplace(q2[0], y, n, 1);
    SAME_BITS("add_inplace", p[0], q2[0], n);
    p[1] = fnew(n); q2[1] = fnew(n);
    swiglu_forward(p[1], x, y, n, 0);
    bf16_round_n(p[1], n);
    swiglu_forward(q2[1], x, y, n, 1);
    SAME_BITS("swiglu_forward", p[1], q2[1], n);
    p[2] = fnew(n); p[3] = fnew(n); q2[2] = fnew(n); q2[3] = fnew(n);
    swiglu_backward(p[2], p[3], z, x, y, n, 0);
    bf16_round_n(p[2], n);
    bf16_round_n(p[3], n);
    swiglu_backward(q2[2], q2[3], z, x, y, n, 1);
    SAME_BITS("swiglu_backward dgate", p[2], q2[2], n);
    SAME_BITS("swiglu_backward dup", p[3], q2[3], n);
    for (int i = 0; i < 4; i++) { free(p[i]); free(q2[i]); }

    const int R = 37, C = 203; // rmsnorm: odd rows and columns
    float *rw = fnew(C), *rs0 = fnew(R), *rs1 = fnew(R), *dw0 = fnew(C), *dw1 = fnew(C);
    fill_sym(rw, C, 1.0, &rg);
    float *o0 = fnew((size_t)R * C), *o1 = fnew((size_t)R * C);
    rmsnorm_forward(o0, rs0, x, rw, R, C, 1e-5f, 0);
    bf16_round_n(o0, (size_t)R * C);
    rmsnorm_forward(o1, rs1, x, rw, R, C, 1e-5f, 1);
    SAME_BITS("rmsnorm_forward out", o0, o1, (size_t)R * C);
    SAME_BITS("rmsnorm_forward rstd", rs0, rs1, (size_t)R);
    memcpy(o0, z, (size_t)R * C * sizeof(float)); // dx accumulates: start both from z
    memcpy(o1, z, (size_t)R * C * sizeof(float));
    memset(dw0, 0, C * sizeof(float)); memset(dw1, 0, C * sizeof(float));
    rmsnorm_backward(o0, dw0, y, z, rw, rs0, R, C, 0);
    bf16_round_n(o0, (size_t)R * C);
    rmsnorm_backward(o1, dw1, y, z, rw, rs0, R, C, 1);
    SAME_BITS("rmsnorm_backward dx", o0, o1, (size_t)R * C);
    SAME_BITS("rmsnorm_backward dw (FP32)", dw0, dw1, (size_t)C);
    free(rw); free(rs0); free(rs1); free(dw0); free(dw1); free(o0); free(o1);

    const int RB = 2, RT = 9, NX = 3, RHS = 10; // rope
    const size_t nr = (size_t)RB * RT * NX * RHS;
    float *ct = fnew((size_t)RT * RHS / 2), *stb = fnew((size_t)RT * RHS / 2);
    rope_table(ct, stb, RT, RHS, ROPE_THETA);
    for (int inv = 0; inv < 2; inv++) {
        float *r0 = fcopy(z, nr), *r1 = fcopy(z, nr);
        if (inv) { rope_backward(r0, ct, stb, RB, RT, NX, RHS, 0); rope_backward(r1, ct, stb, RB, RT, NX, RHS, 1); }
        else { rope_forward(r0, ct, stb, RB, RT, NX, RHS, 0); rope_forward(r1, ct, stb, RB, RT, NX, RHS, 1); }
        bf16_round_n(r0, nr);
        SAME_BITS(inv ? "rope_backward" : "rope_forward", r0, r1, nr);
        free(r0); free(r1);
    }
    free(ct); free(stb);
    free(x); free(y); free(z);

    // attention: tiled (HS 10) on both backward paths, and the plain path (HS 260)
    static const int AS[][5] = {{2, 80, 4, 2, 10}, {1, 9, 2, 1, 260}};
    const int threads = omp_get_max_threads();
    for (size_t c = 0; c < NELEMS(AS); c++) {
        const int B = AS[c][0], T = AS[c][1], NH = AS[c][2], NKV = AS[c][3], HS = AS[c][4];
        const size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
        float *aq = fnew(nq), *ak = fnew(nk), *av = fnew(nk), *ad = fnew(nq), *out0 = fnew(nq), *out1 = fnew(nq);
        float *lse0 = fnew(nl), *lse1 = fnew(nl);
        fill_sym(aq, nq, 2.0, &rg); fill_sym(ak, nk, 2.0, &rg); fill_sym(av, nk, 1.0, &rg); fill_sym(ad, nq, 1.0, &rg);
        attention_forward(out0, lse0, aq, ak, av, B, T, NH, NKV, HS, 0);
        attention_forward(out1, lse1, aq, ak, av, B, T, NH, NKV, HS, 1);
        SAME_BITS("attention_forward lse", lse0, lse1, nl);
        bf16_round_n(out0, nq);
        SAME_BITS("attention_forward out", out0, out1, nq);
        for (int path = 0; path < 2; path++) {
            float *g0[3] = {fnew(nq), fnew(nk), fnew(nk)}, *g1[3] = {fnew(nq), fnew(nk), fnew(nk)};
            set_threads(path ? 64 : 1);
            attention_backward(g0[0], g0[1], g0[2], ad, aq, ak, av, out1, lse1, B, T, NH, NKV, HS, 0);
            attention_backward(g1[0], g1[1], g1[2], ad, aq, ak, av, out1, lse1, B, T, NH, NKV, HS, 1);
            set_threads(threads);
            const size_t len[3] = {nq, nk, nk};
            for (int i = 0; i < 3; i++) {
                bf16_round_n(g0[i], len[i]);
                SAME_BITS(i == 0 ? "attention_backward dq" : i == 1 ? "attention_backward dk" : "attention_backward dv",
                          g0[i], g1[i], len[i]);
                free(g0[i]); free(g1[i]);
            }
        }
        free(aq); free(ak); free(av); free(ad); free(out0); free(out1); free(lse0); free(lse1);
    }
}
END_TEST

// ---------------------------------------------------------------- determinism
// The same call with 1 and with 2 OpenMP threads must give identical bits. Shapes are
// large enough that every parallel loop really splits (several 64-column blocks, dynamic
// attention scheduling, sumsq over two 256-chunk rounds).
#define BITS_EQ(what, a, b, n) \
    ck_assert_msg(memcmp((a), (b), (n) * sizeof(*(a))) == 0, "%s: bits differ between 1 and 2 threads", (what))

// Every vector path gives the same bits: AVX-512F (where the CPU has it), AVX2 with the
// CPU's FMA, and attention's tile products on fmaf (a CPU without FMA), through
// kernels_limit_simd. Attention at head sizes whose tiles leave 16-, 8-lane and scalar
// tails, on both backward paths (1 thread: one pass, 64: split); SwiGLU (16 or 8 lanes)
// over a ragged length.
START_TEST(test_simd_paths) {
    static const int AS[][5] = {{2, 80, 4, 2, 10}, {2, 130, 4, 2, 6}, {1, 67, 3, 1, 36}, {1, 40, 2, 2, 64}};
    rng_t rg = rng_make(1200);
    for (size_t c = 0; c < NELEMS(AS); c++) {
        const int B = AS[c][0], T = AS[c][1], NH = AS[c][2], NKV = AS[c][3], HS = AS[c][4];
        const size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
        float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *d = fnew(nq);
        fill_sym(q, nq, 2.0, &rg); fill_sym(k, nk, 2.0, &rg); fill_sym(v, nk, 1.0, &rg); fill_sym(d, nq, 1.0, &rg);
        float *out[3], *lse[3], *dq[3], *dk[3], *dv[3];
        for (int th = 0; th < 2; th++) {
            set_threads(th ? 64 : 1);
            for (int lim = 2; lim >= 0; lim--) {
                out[lim] = fnew(nq); lse[lim] = fnew(nl); dq[lim] = fnew(nq); dk[lim] = fnew(nk); dv[lim] = fnew(nk);
                kernels_limit_simd(lim);
                attention_forward(out[lim], lse[lim], q, k, v, B, T, NH, NKV, HS, 0);
                attention_backward(dq[lim], dk[lim], dv[lim], d, q, k, v, out[lim], lse[lim], B, T, NH, NKV, HS, 0);
            }
            kernels_limit_simd(2);
            for (int lim = 1; lim >= 0; lim--) {
                const float *const got[] = {out[lim], lse[lim], dq[lim], dk[lim], dv[lim]};
                const float *const want[] = {out[2], lse[2], dq[2], dk[2], dv[2]};
                static const char *const name[] = {"out", "lse", "dq", "dk", "dv"};
                const size_t n[] = {nq, nl, nq, nk, nk};
                for (int o = 0; o < 5; o++)
                    ck_assert_msg(memcmp(got[o], want[o], n[o] * sizeof(float)) == 0,
                                  "attention %s (B %d T %d NH %d NKV %d HS %d, %d threads): the %s path's bits differ "
                                  "from AVX-512F's", name[o], B, T, NH, NKV, HS, th ? 64 : 1,
                                  lim ? "AVX2+FMA" : "fmaf");
            }
            for (int lim = 0; lim < 3; lim++) { free(out[lim]); free(lse[lim]); free(dq[lim]); free(dk[lim]); free(dv[lim]); }
        }
        free(q); free(k); free(v); free(d);
    }
    const size_t n = 4099;
    float *g = fnew(n), *u = fnew(n), *dd = fnew(n), *o[2], *dg[2], *du[2];
    fill_sym(g, n, 6.0, &rg); fill_sym(u, n, 1.0, &rg); fill_sym(dd, n, 1.0, &rg);
    for (int w = 0; w < 2; w++) { // w 1: 16 lanes where the CPU has them; 0: 8 lanes
        o[w] = fnew(n); dg[w] = fnew(n); du[w] = fnew(n);
        kernels_limit_simd(w ? 2 : 1);
        swiglu_forward(o[w], g, u, n, 1);
        swiglu_backward(dg[w], du[w], dd, g, u, n, 1);
    }
    kernels_limit_simd(2);
    ck_assert_msg(memcmp(o[0], o[1], n * sizeof(float)) == 0, "swiglu_forward: 8 and 16 lanes differ");
    ck_assert_msg(memcmp(dg[0], dg[1], n * sizeof(float)) == 0 && memcmp(du[0], du[1], n * sizeof(float)) == 0,
                  "swiglu_backward: 8 and 16 lanes differ");
    for (int w = 0; w < 2; w++) { free(o[w]); free(dg[w]); free(du[w]); }
    free(g); free(u); free(dd);
}
END_TEST

START_TEST(test_det_attention) {
    const int B = 2, T = 80, NH = 6, NKV = 2, HS = 10;
    size_t nq = (size_t)B * T * NH * HS, nk = (size_t)B * T * NKV * HS, nl = (size_t)B * NH * T;
    rng_t rg = rng_make(1000);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *d = fnew(nq);
    fill_sym(q, nq, 2.0, &rg); fill_sym(k, nk, 2.0, &rg); fill_sym(v, nk, 1.0, &rg); fill_sym(d, nq, 1.0, &rg);
    float *out[2], *lse[2], *dq[2], *dk[2], *dv[2];
    for (int run = 0; run < 2; run++) {
        out[run] = fnew(nq); lse[run] = fnew(nl); dq[run] = fnew(nq); dk[run] = fnew(nk); dv[run] = fnew(nk);
        set_threads(run + 1);
        attention_forward(out[run], lse[run], q, k, v, B, T, NH, NKV, HS, 0);
        attention_backward(dq[run], dk[run], dv[run], d, q, k, v, out[run], lse[run], B, T, NH, NKV, HS, 0);
    }
    BITS_EQ("attention out", out[0], out[1], nq);
    BITS_EQ("attention lse", lse[0], lse[1], nl);
    BITS_EQ("attention dq", dq[0], dq[1], nq);
    BITS_EQ("attention dk", dk[0], dk[1], nk);
    BITS_EQ("attention dv", dv[0], dv[1], nk);
    for (int run = 0; run < 2; run++) { free(out[run]); free(lse[run]); free(dq[run]); free(dk[run]); free(dv[run]); }
    free(q); free(k); free(v); free(d);
}
END_TEST

START_TEST(test_det_embedding) {
    const int N = 2048, C = 300, V = 13; // ~160 repeats of each token
    rng_t rg = rng_make(1001);
    int *tok = malloc(N * sizeof(int));
    ck_assert_ptr_nonnull(tok);
    for (int n = 0; n < N; n++) tok[n] = (int)(rng_next(&rg) % V);
    float *dout = fnew((size_t)N * C), *dw[2];
    fill_sym(dout, (size_t)N * C, 1.0, &rg);
    for (int run = 0; run < 2; run++) {
        dw[run] = fnew((size_t)V * C);
        rng_t r2 = rng_make(1002);
        fill_sym(dw[run], (size_t)V * C, 1.0, &r2);
        set_threads(run + 1);
        embedding_backward(dw[run], dout, tok, N, C, 0, V);
    }
    BITS_EQ("embedding dwte", dw[0], dw[1], (size_t)V * C);
    free(tok); free(dout); free(dw[0]); free(dw[1]);
}
END_TEST

START_TEST(test_det_rmsnorm) {
    const int N = 512, C = 330;
    size_t nx = (size_t)N * C;
    rng_t rg = rng_make(1003);
    float *x = fnew(nx), *w = fnew(C), *d = fnew(nx), *out = fnew(nx), *rstd = fnew(N);
    fill_sym(x, nx, 1.0, &rg); fill_sym(w, C, 1.0, &rg); fill_sym(d, nx, 1.0, &rg);
    float *dx[2], *dw[2];
    for (int run = 0; run < 2; run++) {
        dx[run] = fnew(nx); dw[run] = fnew(C);
        rng_t r2 = rng_make(1004);
        fill_sym(dx[run], nx, 1.0, &r2); fill_sym(dw[run], C, 1.0, &r2);
        set_threads(run + 1);
        rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f, 0);
        rmsnorm_backward(dx[run], dw[run], d, x, w, rstd, N, C, 0);
    }
    BITS_EQ("rmsnorm dx", dx[0], dx[1], nx);
    BITS_EQ("rmsnorm dw", dw[0], dw[1], (size_t)C);
    free(x); free(w); free(d); free(out); free(rstd); free(dx[0]); free(dx[1]); free(dw[0]); free(dw[1]);
}
END_TEST

START_TEST(test_det_matmul) {
    // 1 vs 2 threads, on every path this CPU has: the FMA kernels (their bits follow the
    // operands alone) and OpenBLAS's (kernels_limit_simd(0): output tiles sized by the shape
    // alone, each one single-threaded sgemm; OpenBLAS's own threading would change the bits).
    // 300 × 520 and 520 × 200 outputs span several tiles and blocks, with ragged edges.
    const int N = 300, IC = 200, OC = 520;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(1006);
    float *inp = fnew(ni), *w = fnew(nw), *d = fnew(no), *out[2], *dinp[2], *dw[2];
    fill_sym(inp, ni, 1.0, &rg); fill_sym(w, nw, 1.0, &rg); fill_sym(d, no, 1.0, &rg);
    for (int lim = 2; lim >= 0; lim--) {
        for (int run = 0; run < 2; run++) {
            out[run] = fnew(no); dinp[run] = fnew(ni); dw[run] = fnew(nw);
            memset(dw[run], 0, nw * sizeof(float));
            kernels_limit_simd(lim);
            set_threads(run + 1);
            openblas_set_num_threads(run + 1); // whatever the caller left OpenBLAS at
            matmul_forward(out[run], inp, w, N, IC, OC, 0);
            matmul_backward_input(dinp[run], d, w, N, IC, OC, 0, 0);
            matmul_backward_weight(dw[run], d, inp, N, IC, OC);
            kernels_limit_simd(2);
        }
        BITS_EQ("matmul out", out[0], out[1], no);
        BITS_EQ("matmul dinp", dinp[0], dinp[1], ni);
        BITS_EQ("matmul dw", dw[0], dw[1], nw);
        for (int run = 0; run < 2; run++) { free(out[run]); free(dinp[run]); free(dw[run]); }
    }
    free(inp); free(w); free(d);
}
END_TEST

START_TEST(test_det_sumsq) {
    const size_t n = 3 * 256 * 4096 + 1234; // three rounds of 256 chunks, a ragged last chunk
    rng_t rg = rng_make(1005);
    float *x = fnew(n);
    fill_sym(x, n, 1.0, &rg);
    set_threads(1);
    double a = sumsq(x, n);
    set_threads(2);
    double b = sumsq(x, n);
    ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "sumsq: %.17g (1 thread) vs %.17g (2 threads)", a, b);
    free(x);
}
END_TEST

// ---------------------------------------------------------------- suite
static TCase *tcase(Suite *s, const char *name) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300); // generous: a test takes ≤ 2 s here, ~3× that under ASan
    suite_add_tcase(s, tc);
    return tc;
}

// ---------------------------------------------------------------- the update worker's threads

// backend_worker_threads sets the calling thread's OpenMP thread count only: a worker beside
// the CPU backend's compute thread gets one thread, beside a device backend be->threads, and
// the compute thread keeps its own.
static void *worker_threads(void *arg) {
    backend_worker_threads(arg);
    return (void *)(intptr_t)omp_get_max_threads();
}

static int threads_on_a_worker(backend_t *be) {
    pthread_t th;
    void *got = NULL;
    ck_assert_int_eq(pthread_create(&th, NULL, worker_threads, be), 0);
    ck_assert_int_eq(pthread_join(th, &got), 0);
    return (int)(intptr_t)got;
}

START_TEST(test_worker_threads) {
    set_threads(2);
    backend_t be;
    memset(&be, 0, sizeof be);
    be.threads = 3;
    ck_assert_int_eq(threads_on_a_worker(&be), 1);
    ck_assert_int_eq(omp_get_max_threads(), 2);
    static const backend_vt_t *const device = (const backend_vt_t *)&device; // any table: only its presence is read
    be.vt = device;
    ck_assert_int_eq(threads_on_a_worker(&be), 3);
    ck_assert_int_eq(omp_get_max_threads(), 2);
}
END_TEST

static Suite *kernels_suite(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase(s, "bf16");
    tcase_add_test(tc, test_bf16_exact);
    tcase_add_test(tc, test_bf16_random);
    tc = tcase(s, "elementwise");
    tcase_add_loop_test(tc, test_sumsq, 0, NELEMS(SUMSQ_N));
    tcase_add_loop_test(tc, test_sumsq_order, 0, NELEMS(SUMSQ_N));
    tcase_add_test(tc, test_add_inplace);
    tc = tcase(s, "matmul");
    tcase_add_loop_test(tc, test_matmul, 0, NELEMS(MM_SHAPES));
    tcase_add_test(tc, test_matmul_degenerate);
    tcase_add_loop_test(tc, test_matmul_fma_bits, 0, NELEMS(MMB_SHAPES));
    tcase_add_loop_test(tc, test_matmul_w16_bits, 0, NELEMS(MMB_SHAPES));
    tcase_add_loop_test(tc, test_matmul_amx, 0, NELEMS(MMB_SHAPES));
    tcase_add_test(tc, test_matmul_weight_n_bits);
    tcase_add_test(tc, test_matmul_forward_n_bits);
    tcase_add_loop_test(tc, test_matmul_act16_bits, 0, NELEMS(ACT16_SHAPES));
    tcase_add_test(tc, test_matmul_input_k_bits);
    tc = tcase(s, "rmsnorm");
    tcase_add_loop_test(tc, test_rmsnorm, 0, NELEMS(RMS_SHAPES));
    tc = tcase(s, "rope");
    tcase_add_loop_test(tc, test_rope, 0, NELEMS(ROPE_SHAPES));
    tcase_add_test(tc, test_rope16_bits);
    tc = tcase(s, "attention");
    tcase_add_loop_test(tc, test_attention, 0, NELEMS(ATT_SHAPES));
    tcase_add_loop_test(tc, test_attention_amx, 0, NELEMS(ATT_AMX_SHAPES));
    tcase_add_test(tc, test_attention_large_scores);
    tcase_add_loop_test(tc, test_attention16_bits, 0, NELEMS(ATT_AMX_SHAPES));
    tcase_add_test(tc, test_attention_workspace);
    tc = tcase(s, "round flags");
    tcase_add_test(tc, test_round_flags);
    tc = tcase(s, "threads");
    tcase_add_test(tc, test_worker_threads);
    tc = tcase(s, "swiglu");
    tcase_add_loop_test(tc, test_swiglu, 0, NELEMS(SWIGLU_SHAPES));
    tcase_add_test(tc, test_swiglu_extremes);
    tcase_add_test(tc, test_swiglu_paths);
    tcase_add_test(tc, test_swiglu16_bits);
    tcase_add_test(tc, test_rmsnorm16_bits);
    tcase_add_test(tc, test_residual16_bits);
    tc = tcase(s, "embedding");
    tcase_add_loop_test(tc, test_embedding, 0, NELEMS(EMB_SHAPES));
    tcase_add_loop_test(tc, test_embedding_chunks, 0, NELEMS(EMB_CHUNKS));
    tc = tcase(s, "crossentropy");
    tcase_add_loop_test(tc, test_crossentropy, 0, NELEMS(CE_SHAPES));
    tcase_add_loop_test(tc, test_ce_quantum_one, 0, NELEMS(CEQ_ONE));
    tcase_add_loop_test(tc, test_ce_quantum_many, 0, NELEMS(CEQ_MANY));
    tc = tcase(s, "adamw");
    tcase_add_loop_test(tc, test_adamw_fp64, 0, NELEMS(ADAM_CASES));
    tcase_add_loop_test(tc, test_adamw_bits, 0, NELEMS(ADAM_CASES));
    tc = tcase(s, "determinism");
    tcase_add_test(tc, test_det_attention);
    tcase_add_test(tc, test_simd_paths);
    tcase_add_test(tc, test_det_embedding);
    tcase_add_test(tc, test_det_rmsnorm);
    tcase_add_test(tc, test_det_sumsq);
    tcase_add_test(tc, test_det_matmul);
    return s;
}

int main(void) {
    // Nothing here touches OpenMP or OpenBLAS: Check forks each test, and a thread pool
    // created in the parent would not survive fork() in the child.
    SRunner *sr = srunner_create(kernels_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
