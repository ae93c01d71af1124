// test_adam.c — the AdamW paths of kernels.h: scalar reference, AVX2+FMA, AVX-512F and the
// run-time dispatcher adamw_update.
//  - "reference": every path against an FP64 evaluation of the same formula, written here,
//    within an FP32 tolerance derived below, on two kinds of data: "wide" (magnitudes
//    1e-30..1e30 with zeros, signed zeros, negatives and denormals: overflow and
//    underflow) and "typical" (training-sized values, where every rounding shows).
//  - "bitwise": every vector path and the dispatcher against the scalar reference, memcmp
//    on master, m, v, p16 and p32; p16 == bf16_from_f32(master) and p32 == master exactly;
//    NULL p16/p32 change nothing else; no write past n; aligned and misaligned pointers;
//    n = 1, 7, 8, 15, 16, 17, 1000, 16384, 16401, 65537 (lane tails, tile edges).
//  - "special": NaN (with payloads), ±Inf, ±FLT_MAX gradients and NaN state: a NaN
//    gradient makes master, m, v, p32 and p16 NaN (it must not pass silently); every path
//    agrees with the scalar bits, NaN payloads aside (see special_same). And the vector
//    BF16 conversion over every upper half-word with rounding-critical lower halves.
//  - "threads": 1 vs 2 OpenMP threads give identical bits, per path, over many tiles.
// A path this CPU cannot run (AVX-512F here) is skipped, and main says so on stderr: a skip
// is never reported as a pass.
#include <check.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "testutil.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define CHECK_LOOP(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

// ---------------------------------------------------------------- tolerance
// Each FP32 output of the update is a chain of ≤ 7 correctly rounded FP32 operations
// (g·gs, (1−b1)·g, fma for m; g·gs, (1−b2)·g, ·g, fma for v; /bc1, /bc2, sqrt, +eps, /,
// fma, ·lr, − for master). Each rounding adds at most u = 2⁻²⁴ = FLT_EPSILON/2 relative to
// its own result, and every intermediate is bounded by the sum of the absolute values of
// the terms (Σ|terms|), so |out − ref| ≤ ~7u·Σ|terms|. A bound relative to |ref| would be
// meaningless where terms cancel (m's fma with opposite signs, master − lr·…), hence the
// per-element scale. ADAM_ULPS·FLT_EPSILON = 16u leaves a 2× margin over that worst case.
// Below FLT_MIN FP32 has only absolute precision (2⁻¹⁴⁹ steps): ADAM_ATOL = FLT_MIN covers
// the denormal results and inputs (their rounding is ≤ 2⁻¹⁵⁰ per op, a few ops per output).
// One such error is amplified: a denormal m̂ = m/bc1 carries up to 2⁻¹⁵⁰ absolute, which
// u = m̂/(√v̂ + eps) divides by as little as eps = 1e-8, and master receives lr times that
// (≈ 2e-38 for lr = 0.25, above FLT_MIN): master's limit adds lr·ADAM_DENORM/(√v̂ + eps).
// Overflow is FP32's, not a tolerance matter: the reference maps every intermediate that
// FP32 would round to ±Inf to ±Inf (fp32_range), and an infinite reference needs the same
// infinity exactly. The master reference starts from the kernel's own m and v (each
// checked separately), so m's cancellation error is not charged to master.
// Seen (TK_VERBOSE=1): worst |err| / limit 0.30, every path, every size.
#define ADAM_ULPS 8.0
#define ADAM_ATOL FLT_MIN
#define ADAM_DENORM 0x1p-149 // the denormal step: 2× the worst rounding of m̂

// ---------------------------------------------------------------- paths
typedef void (*adamw_fn)(float *master, float *m, float *v, uint16_t *p16, float *p32,
                         const float *g, size_t n, const adamw_params_t *hp);
typedef struct {
    const char *name;
    adamw_fn fn;
    int vector; // special values compared bit for bit with the scalar reference
} path_t;
static const path_t PATHS[] = {
    {"scalar", adamw_update_scalar, 0},
    {"avx2", adamw_update_avx2, 1},
    {"avx512", adamw_update_avx512, 1},
    {"dispatch", adamw_update, 1},
};
enum { P_SCALAR, P_AVX2, P_AVX512, P_DISPATCH, NPATHS };

static int path_supported(int p) {
    if (p == P_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (p == P_AVX512) return __builtin_cpu_supports("avx512f");
    return 1;
}

// Lane tails (n mod 8, n mod 16), the single-tile / OpenMP edge (16384 elements per tile)
// and a multi-tile size whose last tile has one element.
static const size_t NS[] = {1, 7, 8, 15, 16, 17, 1000, 16384, 16401, 65537};
#define NN NELEMS(NS)

// Hyper-parameter sets, cycled over the sizes: clipping scale, weight decay on and off,
// the first step (bc1 = 0.1, bc2 = 0.05: the largest m̂, v̂), a late one (bc → 1), and a
// large lr·wd, where lr·fma(wd, p, u) is not small next to p: there a missing or extra
// fusion in master's update changes many results, not one in 10⁵.
typedef struct { float lr, wd, grad_scale; int t; } hp_case_t;
static const hp_case_t HP_CASES[] = {
    {3e-4f, 0.1f, 0.37f, 3}, {1e-3f, 0.0f, 1.0f, 1}, {3e-4f, 0.1f, 1.0f, 1000}, {0.25f, 0.3f, 1.0f, 10}};

static adamw_params_t make_hp(int k) {
    const hp_case_t *c = &HP_CASES[k % NELEMS(HP_CASES)];
    adamw_params_t hp = {.lr = c->lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .wd = c->wd,
                         .grad_scale = c->grad_scale};
    hp.bc1 = (float)(1.0 - pow(0.9, c->t));
    hp.bc2 = (float)(1.0 - pow(0.95, c->t));
    return hp;
}

// ---------------------------------------------------------------- data
typedef struct { uint64_t s; } rng_t;
static uint64_t rng_next(rng_t *r) { // splitmix64
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } // [0, 1)
static rng_t rng_make(uint64_t seed) { rng_t r = {seed * 0x2545F4914F6CDD1Dull + 17}; return r; }

// A value of magnitude 10^U(lo, hi), with 4 % zeros and 4 % denormals (10^U(−45, −38));
// random sign when sign is set (a zero then may be −0).
static float rand_value(rng_t *r, double lo, double hi, int sign) {
    double k = rng_unif(r), mag;
    if (k < 0.04) mag = 0.0;
    else if (k < 0.08) mag = pow(10.0, -45.0 + 7.0 * rng_unif(r));
    else mag = pow(10.0, lo + (hi - lo) * rng_unif(r));
    float x = (float)mag;
    if (mag > 0 && x == 0.0f) x = FLT_TRUE_MIN; // 10^−45.x rounds to 0: keep it denormal
    return sign && rng_unif(r) < 0.5 ? -x : x;
}

// Two kinds of data. WIDE: every magnitude 1e-30..1e30 (v non-negative), plus zeros and
// denormals: overflow, underflow, huge and tiny steps. TYPICAL: what training holds —
// |p| ≤ 2, |g| and |m| 1e-4..1, v ≈ g² — where the terms of each fma are of similar size,
// so every rounding shows in the bits.
enum { DATA_WIDE, DATA_TYPICAL, NDATA };
static const char *DATA_NAME[NDATA] = {"wide", "typical"};

// One problem: inputs kept apart from the buffers a path writes. Buffers have GUARD
// elements past n filled with a pattern (no path may write them) and an element offset
// `off` from the allocation (misaligned loads and stores when off is not a multiple of 8).
#define GUARD 24
#define GUARD_F 0x5a5a5a5au
#define GUARD_H 0xa5a5u

typedef struct {
    size_t n, off;
    float *g0, *master0, *m0, *v0;       // (n) inputs
    float *g, *master, *m, *v, *p32;     // (n + GUARD) at off, what a path reads and writes
    uint16_t *p16;
    void *blk[6];                        // the allocations (g, master, m, v, p32, p16)
} prob_t;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static void prob_init(prob_t *pr, size_t n, size_t off, int data, uint64_t seed) {
    memset(pr, 0, sizeof *pr);
    pr->n = n;
    pr->off = off;
    rng_t r = rng_make(seed);
    pr->g0 = xmalloc(n * sizeof(float));
    pr->master0 = xmalloc(n * sizeof(float));
    pr->m0 = xmalloc(n * sizeof(float));
    pr->v0 = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        if (data == DATA_WIDE) {
            pr->g0[i] = rand_value(&r, -30, 30, 1);
            pr->m0[i] = rand_value(&r, -30, 30, 1);
            pr->v0[i] = rand_value(&r, -30, 30, 0);
            pr->master0[i] = rand_value(&r, -30, 30, 1);
        } else {
            double s = pow(10.0, -4.0 + 4.0 * rng_unif(&r));
            pr->g0[i] = (float)((2 * rng_unif(&r) - 1) * s);
            pr->m0[i] = (float)((2 * rng_unif(&r) - 1) * s);
            pr->v0[i] = (float)(s * s * (0.5 + rng_unif(&r)));
            pr->master0[i] = (float)(4 * rng_unif(&r) - 2);
        }
    }
    float **fb[5] = {&pr->g, &pr->master, &pr->m, &pr->v, &pr->p32};
    for (int k = 0; k < 5; k++) {
        pr->blk[k] = xmalloc((off + n + GUARD) * sizeof(float));
        *fb[k] = (float *)pr->blk[k] + off;
    }
    pr->blk[5] = xmalloc((off + n + GUARD) * sizeof(uint16_t));
    pr->p16 = (uint16_t *)pr->blk[5] + off;
}

static void prob_free(prob_t *pr) {
    free(pr->g0); free(pr->master0); free(pr->m0); free(pr->v0);
    for (int k = 0; k < 6; k++) free(pr->blk[k]);
}

// Inputs into the working buffers; p32 / p16 prefilled with NaN / 0x7fff (an unwritten
// element fails every check); guards set.
static void prob_load(prob_t *pr) {
    size_t n = pr->n;
    memcpy(pr->g, pr->g0, n * sizeof(float));
    memcpy(pr->master, pr->master0, n * sizeof(float));
    memcpy(pr->m, pr->m0, n * sizeof(float));
    memcpy(pr->v, pr->v0, n * sizeof(float));
    for (size_t i = 0; i < n; i++) pr->p32[i] = NAN, pr->p16[i] = 0x7fff;
    float *fb[5] = {pr->g, pr->master, pr->m, pr->v, pr->p32};
    uint32_t gf = GUARD_F;
    for (int k = 0; k < 5; k++)
        for (size_t i = n; i < n + GUARD; i++) memcpy(&fb[k][i], &gf, sizeof gf);
    for (size_t i = n; i < n + GUARD; i++) pr->p16[i] = GUARD_H;
}

static void prob_check_guards(const prob_t *pr, const char *what) {
    const float *fb[5] = {pr->g, pr->master, pr->m, pr->v, pr->p32};
    static const char *name[5] = {"g", "master", "m", "v", "p32"};
    for (int k = 0; k < 5; k++)
        for (size_t i = pr->n; i < pr->n + GUARD; i++) {
            uint32_t b;
            memcpy(&b, &fb[k][i], sizeof b);
            CHECK_LOOP(b == GUARD_F, "%s: %s[%zu] written past n = %zu", what, name[k], i, pr->n);
        }
    for (size_t i = pr->n; i < pr->n + GUARD; i++)
        CHECK_LOOP(pr->p16[i] == GUARD_H, "%s: p16[%zu] written past n = %zu", what, i, pr->n);
}

// The outputs of one run, copied out of the working buffers.
typedef struct { float *master, *m, *v, *p32; uint16_t *p16; } out_t;

static void out_take(out_t *o, const prob_t *pr) {
    size_t n = pr->n;
    o->master = xmalloc(n * sizeof(float)); memcpy(o->master, pr->master, n * sizeof(float));
    o->m = xmalloc(n * sizeof(float)); memcpy(o->m, pr->m, n * sizeof(float));
    o->v = xmalloc(n * sizeof(float)); memcpy(o->v, pr->v, n * sizeof(float));
    o->p32 = xmalloc(n * sizeof(float)); memcpy(o->p32, pr->p32, n * sizeof(float));
    o->p16 = xmalloc(n * sizeof(uint16_t)); memcpy(o->p16, pr->p16, n * sizeof(uint16_t));
}
static void out_free(out_t *o) { free(o->master); free(o->m); free(o->v); free(o->p32); free(o->p16); }

// Runs a path on the loaded inputs (p16/p32 as given: the buffers or NULL), checks guards.
static void run_path(int p, prob_t *pr, const adamw_params_t *hp, int with_p16, int with_p32) {
    prob_load(pr);
    PATHS[p].fn(pr->master, pr->m, pr->v, with_p16 ? pr->p16 : NULL, with_p32 ? pr->p32 : NULL, pr->g, pr->n, hp);
    char what[64];
    snprintf(what, sizeof what, "%s n=%zu", PATHS[p].name, pr->n);
    prob_check_guards(pr, what);
}

// First differing index of two arrays of `size`-byte elements, or n.
static size_t first_diff(const void *a, const void *b, size_t n, size_t size) {
    if (memcmp(a, b, n * size) == 0) return n;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * size, (const char *)b + i * size, size) != 0) return i;
    return n;
}

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }

// Bit-for-bit equality of two runs on master, m, v (and p16 / p32 when compared).
static void check_same_bits(const char *what, const out_t *a, const out_t *b, size_t n, int p16, int p32) {
    const float *fa[4] = {a->master, a->m, a->v, a->p32}, *fb[4] = {b->master, b->m, b->v, b->p32};
    static const char *name[4] = {"master", "m", "v", "p32"};
    for (int k = 0; k < 4; k++) {
        if (k == 3 && !p32) continue;
        size_t i = first_diff(fa[k], fb[k], n, sizeof(float));
        ck_assert_msg(i == n, "%s: %s[%zu] differs: 0x%08x (%.9g) vs 0x%08x (%.9g)", what, name[k], i,
                      i < n ? bits_of(fa[k][i]) : 0, i < n ? fa[k][i] : 0.0, i < n ? bits_of(fb[k][i]) : 0,
                      i < n ? fb[k][i] : 0.0);
    }
    if (p16) {
        size_t i = first_diff(a->p16, b->p16, n, sizeof(uint16_t));
        ck_assert_msg(i == n, "%s: p16[%zu] differs: 0x%04x vs 0x%04x", what, i, i < n ? a->p16[i] : 0,
                      i < n ? b->p16[i] : 0);
    }
}

// p16 == bf16_from_f32(master) and p32 == master, bit for bit.
static void check_copies(const char *what, const out_t *o, size_t n) {
    for (size_t i = 0; i < n; i++) {
        CHECK_LOOP(bits_of(o->p32[i]) == bits_of(o->master[i]), "%s: p32[%zu] 0x%08x != master 0x%08x", what, i,
                   bits_of(o->p32[i]), bits_of(o->master[i]));
        CHECK_LOOP(o->p16[i] == bf16_from_f32(o->master[i]), "%s: p16[%zu] 0x%04x != bf16_from_f32(master 0x%08x) 0x%04x",
                   what, i, o->p16[i], bits_of(o->master[i]), bf16_from_f32(o->master[i]));
    }
}

// ---------------------------------------------------------------- FP64 reference
// FP32's overflow threshold: values at or past it round to ±Inf (the largest finite float
// plus half an ulp, 2¹²⁸·(1 − 2⁻²⁵)).
#define FP32_OVERFLOW 0x1.ffffffp127
static double fp32_range(double x) {
    if (x >= FP32_OVERFLOW) return INFINITY;
    if (x <= -FP32_OVERFLOW) return -INFINITY;
    return x;
}

// |out − ref| ≤ ADAM_ULPS·ε·scale + ADAM_ATOL + extra (when given) per element; an infinite
// reference needs the same infinity; NaN never passes (neither side).
static void adam_close(const char *what, const float *out, const double *ref, const double *scale,
                       const double *extra, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(ref[i])) {
            CHECK_LOOP((double)out[i] == ref[i], "%s: [%zu] = %.9g, want %g (FP32 overflow)", what, i, out[i], ref[i]);
            continue;
        }
        double atol = ADAM_ULPS * FLT_EPSILON * scale[i] + ADAM_ATOL + (extra ? extra[i] : 0.0);
        double q = fabs((double)out[i] - ref[i]) / atol;
        if (q > worst || isnan(q)) worst = isnan(q) ? INFINITY : q;
        if (!tu_close(what, out + i, ref + i, 1, atol, 0.0))
            ck_abort_msg("%s: element %zu out of tolerance (see stderr)", what, i);
    }
    if (getenv("TK_VERBOSE")) fprintf(stderr, "  %-36s worst/limit %.3f\n", what, worst);
}

// Reference of m and v from the inputs; of master from the inputs and the kernel's m and v.
static void check_reference(const char *what, const prob_t *pr, const out_t *o, const adamw_params_t *hp) {
    const size_t n = pr->n;
    double *rm = xmalloc(n * sizeof(double)), *sm = xmalloc(n * sizeof(double));
    double *rv = xmalloc(n * sizeof(double)), *sv = xmalloc(n * sizeof(double));
    double *rp = xmalloc(n * sizeof(double)), *sp = xmalloc(n * sizeof(double)), *xp = xmalloc(n * sizeof(double));
    const double b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, wd = hp->wd, eps = hp->eps;
    const double bc1 = hp->bc1, bc2 = hp->bc2, gs = hp->grad_scale;
    for (size_t i = 0; i < n; i++) {
        double g = (double)pr->g0[i] * gs, m = pr->m0[i], v = pr->v0[i], p = pr->master0[i];
        rm[i] = fp32_range(b1 * m + (1 - b1) * g);
        sm[i] = fabs(b1 * m) + fabs((1 - b1) * g);
        rv[i] = fp32_range(b2 * v + (1 - b2) * g * g);
        sv[i] = fabs(b2 * v) + (1 - b2) * g * g;
        double mh = fp32_range((double)o->m[i] / bc1), vh = fp32_range((double)o->v[i] / bc2);
        double u = fp32_range(mh / (sqrt(vh) + eps));
        double f = fp32_range(wd * p + u), d = fp32_range(lr * f);
        rp[i] = fp32_range(p - d);
        sp[i] = fabs(p) + lr * (fabs(wd * p) + fabs(u));
        xp[i] = lr * ADAM_DENORM / (sqrt(vh) + eps);
    }
    char w[96];
    snprintf(w, sizeof w, "%s m", what);
    adam_close(w, o->m, rm, sm, NULL, n);
    snprintf(w, sizeof w, "%s v", what);
    adam_close(w, o->v, rv, sv, NULL, n);
    snprintf(w, sizeof w, "%s master", what);
    adam_close(w, o->master, rp, sp, xp, n);
    free(rm); free(sm); free(rv); free(sv); free(rp); free(sp); free(xp);
}

// ---------------------------------------------------------------- tests
// _i = path · NN + size index.
START_TEST(test_reference) {
    const int p = _i / NN, k = _i % NN;
    const size_t n = NS[k];
    for (int data = 0; data < NDATA; data++) {
        prob_t pr;
        prob_init(&pr, n, 0, data, 100 + (uint64_t)k);
        adamw_params_t hp = make_hp(k + data);
        run_path(p, &pr, &hp, 1, 1);
        out_t o;
        out_take(&o, &pr);
        char what[64];
        snprintf(what, sizeof what, "%s n=%zu %s", PATHS[p].name, n, DATA_NAME[data]);
        check_reference(what, &pr, &o, &hp);
        check_copies(what, &o, n);
        out_free(&o);
        prob_free(&pr);
    }
}
END_TEST

START_TEST(test_bitwise) {
    // Against the scalar reference, both kinds of data, at element offsets 0 (aligned as
    // malloc gives) and 3 (every vector load and store misaligned); p16/p32 all four ways; and
    // adamw_params_t.consume: the same bits, every g element then +0.0f, nothing past n. (The
    // scalar path runs it too: against itself, its p16/p32 ways and consume.)
    const int p = _i / NN, k = _i % NN;
    const size_t n = NS[k];
    static const size_t OFFS[] = {0, 3};
    for (int run = 0; run < 2 * NDATA; run++) {
        const int data = run / 2, oi = run % 2;
        prob_t pr;
        prob_init(&pr, n, OFFS[oi], data, 200 + (uint64_t)k);
        adamw_params_t hp = make_hp(k + oi);
        out_t ref, got;
        run_path(P_SCALAR, &pr, &hp, 1, 1);
        out_take(&ref, &pr);
        run_path(p, &pr, &hp, 1, 1);
        out_take(&got, &pr);
        char what[96];
        snprintf(what, sizeof what, "%s vs scalar n=%zu off=%zu %s", PATHS[p].name, n, OFFS[oi], DATA_NAME[data]);
        check_same_bits(what, &got, &ref, n, 1, 1);
        check_copies(what, &got, n);
        out_free(&got);
        for (int mode = 0; mode < 3; mode++) { // p16 only, p32 only, neither
            int w16 = mode == 0, w32 = mode == 1;
            run_path(p, &pr, &hp, w16, w32);
            out_take(&got, &pr);
            snprintf(what, sizeof what, "%s n=%zu off=%zu p16 %s p32 %s", PATHS[p].name, n, OFFS[oi],
                     w16 ? "set" : "NULL", w32 ? "set" : "NULL");
            check_same_bits(what, &got, &ref, n, w16, w32);
            for (size_t i = 0; i < n; i++) {
                if (!w16) CHECK_LOOP(got.p16[i] == 0x7fff, "%s: p16[%zu] written", what, i);
                if (!w32) CHECK_LOOP(isnan(got.p32[i]), "%s: p32[%zu] written", what, i);
            }
            out_free(&got);
        }
        CHECK_LOOP(memcmp(pr.g, pr.g0, n * sizeof(float)) == 0, "%s n=%zu: g changed without consume", PATHS[p].name, n);
        hp.consume = 1;
        run_path(p, &pr, &hp, 1, 1); // checks the guards past n
        out_take(&got, &pr);
        snprintf(what, sizeof what, "%s consuming n=%zu off=%zu %s", PATHS[p].name, n, OFFS[oi], DATA_NAME[data]);
        check_same_bits(what, &got, &ref, n, 1, 1);
        for (size_t i = 0; i < n; i++) CHECK_LOOP(bits_of(pr.g[i]) == 0, "%s: g[%zu] left %a", what, i, pr.g[i]);
        out_free(&got);
        out_free(&ref);
        prob_free(&pr);
    }
}
END_TEST

// Same bits, or both NaN. A NaN's payload can legitimately differ between paths: where two
// different NaNs meet in one operation (a NaN m and a NaN g), x86 returns the first NaN
// operand, and which operand comes first in an FMA is the compiler's choice of form. Every
// other bit must match.
static int special_same(float a, float b) { return bits_of(a) == bits_of(b) || (isnan(a) && isnan(b)); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

START_TEST(test_special) {
    const int p = _i;
    static const float GS[] = {NAN, -NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0.0f, -0.0f,
                               FLT_TRUE_MIN, -FLT_MIN, 1e30f, -1e-30f};
    const size_t n = 1001; // odd: the specials land in every lane and in the tail
    prob_t pr;
    prob_init(&pr, n, 1, DATA_TYPICAL, 300);
    for (size_t i = 0; i < n; i++) {
        if (i % 5 == 0) pr.g0[i] = GS[(i / 5) % NELEMS(GS)];
        if (i % 97 == 3) pr.m0[i] = NAN; // NaN state from an earlier bad step
        if (i % 89 == 4) pr.v0[i] = INFINITY;
    }
    // NaNs with payloads, both signs; those with low bits set carry into the exponent
    // under plain rounding (0x7fffffff would become 0x8000 = −0): the BF16 conversion's
    // NaN rule must catch them, and they reach master unchanged (x86 keeps a NaN operand's
    // payload, quieted).
    static const uint32_t PAYLOADS[] = {0x7fc12345u, 0xffc12345u, 0x7fffffffu, 0xffffffffu, 0x7fc0ffffu,
                                        0xffc18000u, 0x7f800001u, 0xff80ffffu};
    for (int j = 0; j < NELEMS(PAYLOADS); j++) memcpy(&pr.g0[1 + 5 * j], &PAYLOADS[j], sizeof(uint32_t));
    for (int k = 0; k < NELEMS(HP_CASES); k++) {
        adamw_params_t hp = make_hp(k);
        out_t ref, got;
        run_path(P_SCALAR, &pr, &hp, 1, 1);
        out_take(&ref, &pr);
        run_path(p, &pr, &hp, 1, 1);
        out_take(&got, &pr);
        char what[64];
        snprintf(what, sizeof what, "%s special hp=%d", PATHS[p].name, k);
        check_copies(what, &got, n);
        size_t payload_diffs = 0;
        for (size_t i = 0; i < n; i++) {
            CHECK_LOOP(special_same(got.master[i], ref.master[i]) && special_same(got.m[i], ref.m[i]) &&
                           special_same(got.v[i], ref.v[i]),
                       "%s: [%zu] (g %g m %g v %g) gives master/m/v 0x%08x/0x%08x/0x%08x, scalar 0x%08x/0x%08x/0x%08x",
                       what, i, pr.g0[i], pr.m0[i], pr.v0[i], bits_of(got.master[i]), bits_of(got.m[i]),
                       bits_of(got.v[i]), bits_of(ref.master[i]), bits_of(ref.m[i]), bits_of(ref.v[i]));
            payload_diffs += bits_of(got.master[i]) != bits_of(ref.master[i]);
            if (isnan(pr.g0[i])) { // a NaN gradient must poison everything it touches
                CHECK_LOOP(isnan(got.m[i]) && isnan(got.v[i]) && isnan(got.master[i]) && isnan(got.p32[i]),
                           "%s: [%zu] NaN gradient gave m %g v %g master %g p32 %g", what, i, got.m[i], got.v[i],
                           got.master[i], got.p32[i]);
                CHECK_LOOP(bf16_is_nan(got.p16[i]), "%s: [%zu] NaN gradient gave p16 0x%04x", what, i, got.p16[i]);
            }
            if (isinf(pr.g0[i])) // m̂/√v̂ = ±Inf/Inf: NaN, never a finite step
                CHECK_LOOP(isnan(got.master[i]), "%s: [%zu] Inf gradient gave master %g", what, i, got.master[i]);
        }
        if (getenv("TK_VERBOSE")) fprintf(stderr, "  %s: %zu NaN payload differences\n", what, payload_diffs);
        out_free(&ref);
        out_free(&got);
    }
    prob_free(&pr);
}
END_TEST

START_TEST(test_bf16) {
    // The vector BF16 rounding on chosen bits: lr = 0, g = m = v = 0 make master = p − 0·0
    // = p exactly for finite p, so the conversion sees every upper half 0x0000..0xffff with
    // lower halves 0x0000, 0x7fff, 0x8000 (ties to even and odd), 0x8001, 0xffff and a
    // random one: every exponent, denormals, the carry to Inf, ±Inf and NaNs (which become
    // p − NaN, quiet NaN with the payload kept; Inf becomes NaN via 0·Inf).
    const int p = _i;
    static const uint32_t LO[] = {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u};
    const size_t n = 65536u * NELEMS(LO);
    prob_t pr;
    prob_init(&pr, n, 0, DATA_TYPICAL, 500);
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)(i / NELEMS(LO)) << 16 | LO[i % NELEMS(LO)];
        memcpy(&pr.master0[i], &b, sizeof b);
        pr.g0[i] = pr.m0[i] = pr.v0[i] = 0.0f;
    }
    adamw_params_t hp = make_hp(0);
    hp.lr = 0.0f;
    hp.wd = 0.0f;
    run_path(p, &pr, &hp, 1, 1);
    out_t o;
    out_take(&o, &pr);
    char what[64];
    snprintf(what, sizeof what, "%s bf16 patterns", PATHS[p].name);
    check_copies(what, &o, n);
    for (size_t i = 0; i < n; i++)
        if (isfinite(pr.master0[i]))
            CHECK_LOOP(bits_of(o.master[i]) == bits_of(pr.master0[i]), "%s: master 0x%08x changed to 0x%08x with lr = 0",
                       what, bits_of(pr.master0[i]), bits_of(o.master[i]));
    out_free(&o);
    prob_free(&pr);
}
END_TEST

START_TEST(test_threads) {
    // Elementwise, so the tile split over threads cannot change bits: 1 vs 2 threads over
    // a size of many tiles with a ragged last one.
    const int p = _i;
    const size_t n = tu_sanitized() ? 100003 : 300007;
    prob_t pr;
    prob_init(&pr, n, 0, DATA_WIDE, 400);
    adamw_params_t hp = make_hp(0);
    out_t o1, o2;
    omp_set_num_threads(1);
    run_path(p, &pr, &hp, 1, 1);
    out_take(&o1, &pr);
    omp_set_num_threads(2);
    run_path(p, &pr, &hp, 1, 1);
    out_take(&o2, &pr);
    char what[64];
    snprintf(what, sizeof what, "%s 1 vs 2 threads n=%zu", PATHS[p].name, n);
    check_same_bits(what, &o1, &o2, n, 1, 1);
    out_free(&o1);
    out_free(&o2);
    prob_free(&pr);
}
END_TEST

START_TEST(test_dispatch_path) {
    const char *want = __builtin_cpu_supports("avx512f") ? "avx512"
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "avx2"
                                                                                          : "scalar";
    ck_assert_str_eq(adamw_update_path(), want);
}
END_TEST

// ---------------------------------------------------------------- suite
static Suite *adam_suite(void) {
    Suite *s = suite_create("adam");
    TCase *tc_ref = tcase_create("reference"), *tc_bit = tcase_create("bitwise");
    TCase *tc_sp = tcase_create("special"), *tc_thr = tcase_create("threads");
    TCase *tcs[] = {tc_ref, tc_bit, tc_sp, tc_thr};
    for (int k = 0; k < NELEMS(tcs); k++) {
        tcase_set_timeout(tcs[k], tu_sanitized() ? 300 : 60); // each test takes < 1 s here
        suite_add_tcase(s, tcs[k]);
    }
    tcase_add_test(tc_ref, test_dispatch_path);
    for (int p = 0; p < NPATHS; p++) {
        if (!path_supported(p)) {
            fprintf(stderr, "test_adam: SKIPPED path %s: this CPU lacks %s, so its reference, bitwise, special "
                            "and threads cases were not run (not counted as passed)\n",
                    PATHS[p].name, p == P_AVX512 ? "AVX-512F" : "AVX2+FMA");
            continue;
        }
        tcase_add_loop_test(tc_ref, test_reference, p * NN, (p + 1) * NN);
        tcase_add_loop_test(tc_bit, test_bitwise, p * NN, (p + 1) * NN);
        if (PATHS[p].vector) {
            tcase_add_loop_test(tc_sp, test_special, p, p + 1);
            tcase_add_loop_test(tc_sp, test_bf16, p, p + 1);
        }
        tcase_add_loop_test(tc_thr, test_threads, p, p + 1);
    }
    return s;
}

int main(void) {
    // Nothing here touches OpenMP: Check forks each test, and a thread pool created in the
    // parent would not survive fork() in the child.
    SRunner *sr = srunner_create(adam_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
