// test_cuda_kernels.c — the CUDA backend against its CPU twins (DESIGN §6: every CUDA
// kernel has a CPU twin and a test that compares them on random inputs).
// Each op of the CUDA backend's table runs on random inputs with awkward shapes (T = 1, 7,
// 33, > one 32-row tile; grouped heads NH/NKV = 6/3, 6/2, 4/1; widths that are not powers
// of two; head sizes past the tiled kernels' shared memory), and its output is compared
// with the CPU twin (kernels/cpu, itself checked against FP64 in tests/test_kernels.c).
// Device outputs are poisoned with 0xFF bytes (a NaN in every float) before each launch, so
// an element a kernel forgot to write fails; "+=" outputs start from random values. NaN
// never passes (tu_close). Ops that perform the CPU's exact IEEE sequence are compared
// bit for bit (BF16, add, rope, embedding, sumsq, AdamW); the others with tolerances named
// below; the ops on BF16 activations against the FP32 ops on the same values, bit for bit.
// Also: the arena never exceeds --hbm-budget, cudaMemGetInfo shows no device memory
// beyond the budget (plus the runtime's own), copies, pinning, and run-to-run determinism.
//
// Skips (exit 77) without a GPU or in a build without CUDA. Check forks each test and a
// CUDA context does not survive fork(): the parent never touches CUDA (the device probe
// runs in a child of its own), and every test builds its backend in its own process (a
// checked fixture). CK_FORK=no also works: backends are built and freed one after another.
// Without a GPU, tests/gpu/emu/run.sh runs this suite against the kernels executed on the
// CPU (fibers for threads, a host stand-in for the runtime): a check of their logic only.
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backend.h"
#include "kernels.h"
#include "testutil.h"
#ifdef TT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "cuda_kernels.h"
#include "cuda_probe.h"
#include "gpu_probe.h"
#endif

#ifndef TT_HAVE_CUDA
int main(void) {
    fprintf(stderr, "test_cuda_kernels: this build has no CUDA support: skipped\n");
    return 77;
}
#else

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

// ---------------------------------------------------------------- tolerances
// {atol, rtol} for tu_close: |gpu − cpu| ≤ atol + rtol·|cpu|. Inputs are U(−1, 1) unless a
// shape says otherwise. Both sides are FP32 with different summation orders (and CUDA's
// expf/logf against the CPU's exp8/logf, each within ~2 ulp): the limits sit well above
// that (~10×) and far below what a wrong index, mask or missing term gives (O(0.1..1)).
typedef struct { double atol, rtol; } tol_t;

// rmsnorm: a C-term sum of squares in another order (relative ~√C·u ≤ 2e-6 for C ≤ 1030),
// then a sqrt and a divide: out and rstd agree to a few 1e-7 relative.
static const tol_t TOL_RMS_OUT = {1e-6, 1e-5};
static const tol_t TOL_RMS_RSTD = {1e-6, 1e-5};
// residual_rmsnorm_forward16's out: TOL_RMS_OUT's FP32 values, each rounded to BF16 on both
// sides: where the two straddle a rounding midpoint the halves are one BF16 ulp apart (≤ 2⁻⁷
// of the value); a wrong index or term is still O(0.1..1) off.
static const tol_t TOL_RMS_OUT16 = {1e-6, 1.0 / 128};
// dx = s·(g − x·s²·mean(g·x)): the C-term dot and a subtraction that can cancel.
static const tol_t TOL_RMS_DX = {5e-6, 1e-5};
// dw: N ≤ 300 row terms of size ~0.5 summed in chunks of 64 vs in one row order, onto the
// prefill: ~√N·u·|partial sums| ≈ 1e-5 absolute at worst.
static const tol_t TOL_RMS_DW = {1e-4, 1e-5};
// attention: scores are HS-term dots (FMA vs not), exp(s − m) carries ~|s|·u absolute;
// the CPU is within ~5e-7 of FP64 on these shapes (test_kernels), the GPU alike.
static const tol_t TOL_ATT_OUT = {1e-5, 1e-5};
static const tol_t TOL_ATT_LSE = {1e-5, 1e-5};
// backward: P recomputed from lse, dS = P·(dP − D) can cancel, dk/dv sum up to T·group
// query rows: gradients of O(1..10).
static const tol_t TOL_ATT_DQ = {3e-5, 3e-5};
static const tol_t TOL_ATT_DK = {3e-5, 3e-5};
static const tol_t TOL_ATT_DV = {3e-5, 3e-5};
// The tensor-core kernels (3xTF32): each product keeps ~21 bits (the lo·lo term dropped),
// and a tensor core aligns and truncates as it adds 8 products at a time, ~2⁻²³ of the
// running sum per step, up to HS/8·3 steps a score: ~3e-6 of Σ|q·k| at HS 64, which the
// softmax turns into an absolute error of that size on scores of magnitude ~5 here. Ten
// times the FP32 kernels' bounds, still 40 times finer than a BF16 quantum (2⁻⁸ ≈ 4e-3),
// the precision the trainer stores activations at.
static const tol_t TOL_ATT_TC_OUT = {1e-4, 1e-4};
static const tol_t TOL_ATT_TC_LSE = {1e-4, 1e-4};
static const tol_t TOL_ATT_TC_GRAD = {3e-4, 3e-4};
// swiglu: one exp, a divide and a product: ≤ ~6 ulp apart; dgate's σ·(1 + g·(1 − σ))
// cancels near g ≈ −1.28 (hence its atol).
static const tol_t TOL_SWIGLU_OUT = {1e-7, 2e-6};
static const tol_t TOL_SWIGLU_DGATE = {1e-6, 4e-6};
static const tol_t TOL_SWIGLU_DUP = {1e-7, 2e-6};
// cross-entropy (the quantum form): each quantum's sum of exponentials in another order:
// the CPU's 8 lanes of ≤ 256 terms, the GPU's 256 lanes of ≤ 8, each within ~√256·u ≈ 1e-6
// relative; the folds take the same exact quantum maxima through the same IEEE steps, so
// only expf's last ulps and the sums' differences carry through, ≤ ⌈V/2048⌉ = 16 of them
// for V = 32000 at worst, ≈ 4e-6 relative. The loss is log(S) − (x_t − M), dlogits are
// p·dscale with p = e/S; S's relative difference is the loss's absolute one.
static const tol_t TOL_CE_LOSS = {2e-5, 2e-6};
static const tol_t TOL_CE_DLOGITS = {1e-8, 2e-5};
static const tol_t TOL_CE_SUM = {0.0, 2e-5};
// matmul: per element, |gpu − cpu| ≤ rel·Σ_k |a_k·b_k| + 1e-6·|cpu| + 1e-30 (the last two
// for the final add onto a "+=" prefill, and exact zeros).
//  - BF16 mode, inputs already BF16 (what the trainer passes): conversion exact, products
//    exact in FP32, only the accumulation differs (tensor cores align and truncate:
//    ~K·2⁻²⁴ of the partial sums at worst, ≲ 3e-6 of Σ|terms| for K ≤ 1000): 2⁻¹².
//  - BF16 mode, FP32 inputs: the GPU rounds both inputs to BF16 (unit roundoff 2⁻⁸ each:
//    8 significant bits), the CPU does not: each product is off by up to 2⁻⁷ of itself:
//    BF16 level, 2⁻⁶.
//  - FP32 mode: both FP32 with FP32 accumulation (~u of Σ|terms|): 2⁻¹⁶. TF32 inputs
//    (2⁻¹¹ each) would exceed it for most shapes: the test also catches TF32.
#define MM_REL_BF16_EXACT (1.0 / 4096)
#define MM_REL_BF16_ROUNDING (1.0 / 64)
#define MM_REL_FP32 (1.0 / 65536)
// Device memory the CUDA runtime itself may take after init beyond the budget: the
// cuBLASLt kernels it loads lazily at their first use, and small internal allocations.
#define RUNTIME_SLACK (256 * MiB)

// ---------------------------------------------------------------- helpers
typedef struct { uint64_t s; } rng_t;
static uint64_t rng_next(rng_t *r) { // splitmix64
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }
static float rng_sym(rng_t *r, double a) { return (float)((2.0 * rng_unif(r) - 1.0) * a); }
static rng_t rng_make(uint64_t seed) { rng_t r = {seed * 0x2545F4914F6CDD1Dull + 17}; return r; }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}
static float *fnew(size_t n) { return xmalloc(n * sizeof(float)); }
static float *fdup(const float *x, size_t n) {
    float *p = fnew(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}
static void fill_sym(float *x, size_t n, double a, rng_t *r) {
    for (size_t i = 0; i < n; i++) x[i] = rng_sym(r, a);
}
static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// The backend under test: built per test (checked fixture), in the test's own process.
static backend_t G;
static int G_up;

static config_t test_cfg(void) {
    config_t c;
    memset(&c, 0, sizeof c);
    c.precision = PREC_BF16;
    c.hbm_budget = GiB;
    c.quiet = 1;
    // the model shape sizes the kernels' scratch: big enough for every shape below
    c.B = 2; c.T = 1024; c.C = 1024; c.NH = 8; c.NKV = 4; c.F = 2048; c.V = 32000;
    return c;
}

static void gpu_up(void) {
    config_t cfg = test_cfg();
    char err[512] = "";
    int rc = backend_cuda_init(&G, &cfg, err, sizeof err);
    ck_assert_msg(rc == 0, "backend_cuda_init: %s (%d)", err, rc);
    G_up = 1;
}
static void gpu_down(void) {
    if (G_up) backend_free(&G);
    G_up = 0;
}

static void *dalloc(size_t bytes) {
    void *p = NULL;
    char err[512];
    int rc = backend_alloc(&G, bytes, "test buffer", &p, err, sizeof err);
    ck_assert_msg(rc == 0, "backend_alloc: %s", err);
    return p;
}
// A device copy of n floats (or bytes) of h.
static float *dput(const float *h, size_t n) {
    float *d = dalloc(n * sizeof(float));
    backend_copy_h2d(&G, d, h, n * sizeof(float));
    return d;
}
static void *dput_bytes(const void *h, size_t bytes) {
    void *d = dalloc(bytes);
    backend_copy_h2d(&G, d, h, bytes);
    return d;
}
// A device buffer of n floats full of 0xFF bytes (NaN): what a kernel leaves unwritten fails.
static float *dpoison(size_t n) {
    float *d = dalloc(n * sizeof(float));
    backend_memset(&G, d, 0xFF, n * sizeof(float));
    return d;
}
static void poison(void *d, size_t bytes) { backend_memset(&G, d, 0xFF, bytes); }
static void upload(void *d, const void *h, size_t bytes) { backend_copy_h2d(&G, d, h, bytes); }
// The device data back on the host (waits for every op queued before).
static float *dget(const float *d, size_t n) {
    float *h = fnew(n);
    backend_copy_d2h(&G, h, d, n * sizeof(float));
    return h;
}

static int close_t(const char *what, const float *gpu, const float *cpu, size_t n, tol_t t) {
    if (getenv("TK_VERBOSE")) {
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double e = fabs((double)gpu[i] - cpu[i]), lim = t.atol + t.rtol * fabs(cpu[i]);
            double q = lim > 0 ? e / lim : (e > 0 ? INFINITY : 0);
            if (q > worst || isnan(e)) worst = isnan(e) ? INFINITY : q;
        }
        fprintf(stderr, "  %-56s n=%-8zu worst/limit %.3f\n", what, n, worst);
    }
    return tu_close_f(what, gpu, cpu, n, t.atol, t.rtol);
}
#define CHECK_CLOSE(what, gpu, cpu, n, tol) \
    ck_assert_msg(close_t((what), (gpu), (cpu), (n), (tol)), "%s: GPU and CPU disagree (see stderr)", (what))

// Bit for bit; the first difference goes to stderr (GPU first, the CPU's wanted).
#define CHECK_BITS(what, gpu, cpu, n) \
    ck_assert_msg(tu_same_bits((what), (gpu), (cpu), (n)), "%s: not bit-identical to the CPU (see stderr)", (what))

// Bit for bit against another GPU op's result (the first difference goes to stderr).
#define CHECK_SAME_OP(what, gpu, ref, n) \
    ck_assert_msg(tu_same_bits((what), (gpu), (ref), (n)), "%s: not bit-identical to the FP32 op's (see stderr)", (what))

// ---------------------------------------------------------------- the backend itself
START_TEST(test_op_table) {
    ck_assert_str_eq(G.name, "cuda");
    ck_assert_int_eq(G.kind, DEVICE_CUDA);
    const backend_ops_t *o = G.ops;
    ck_assert(o->matmul_backward_weight == cuda_matmul_backward_weight);
    ck_assert(o->bf16_round_n == cuda_bf16_round_n); // the ops with a round flag wrap theirs (test_round_flags)
    ck_assert(o->adamw_update == cuda_adamw_update);
    ck_assert(o->embedding_backward == cuda_embedding_backward);
    ck_assert(o->crossentropy_fold == cuda_crossentropy_fold);
    ck_assert(o->crossentropy_loss == cuda_crossentropy_loss);
    ck_assert(o->crossentropy_backward == cuda_crossentropy_backward);
    ck_assert(o->embedding_forward_w16 == cuda_embedding_forward_w16);
    ck_assert(o->rmsnorm_forward16 == cuda_rmsnorm_forward16); // the BF16 activations (tier.h act16, att16)
    ck_assert(o->residual_rmsnorm_forward16 == cuda_residual_rmsnorm_forward16); // and the residual x2
    ck_assert(o->matmul_backward_input_x == cuda_matmul_backward_input_x);
    ck_assert(o->attention_backward16 == cuda_attention_backward16);
    // every entry filled but the optional ones CUDA leaves to the caller (backend.h): the
    // shared-input forward products and weight gradients and the stacked weights' input
    // gradient (step.c runs one product each)
    ck_assert(o->matmul_forward_w16_n == NULL);
    ck_assert(o->matmul_backward_weight_n == NULL);
    ck_assert(o->matmul_backward_input_w16_k == NULL);
    const void *const *p = (const void *const *)o;
    const size_t opt[3] = {offsetof(backend_ops_t, matmul_forward_w16_n) / sizeof(void *),
                           offsetof(backend_ops_t, matmul_backward_weight_n) / sizeof(void *),
                           offsetof(backend_ops_t, matmul_backward_input_w16_k) / sizeof(void *)};
    for (size_t i = 0; i < sizeof *o / sizeof(void *); i++)
        if (i != opt[0] && i != opt[1] && i != opt[2]) ck_assert_msg(p[i] != NULL, "op table entry %zu is NULL", i);
    ck_assert_ptr_nonnull(cuda_kernels_stream());
}
END_TEST

START_TEST(test_copies) {
    // odd sizes, pageable and registered host memory, sync and async, d2d and memset
    const size_t n = 3 * MiB + 5;
    rng_t r = rng_make(1);
    unsigned char *a = xmalloc(n), *b = xmalloc(n);
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)rng_next(&r);
    unsigned char *d1 = dalloc(n), *d2 = dalloc(n);
    backend_copy_h2d(&G, d1, a, n);
    backend_copy_d2d(&G, d2, d1, n);
    memset(b, 0, n);
    backend_copy_d2h(&G, b, d2, n);
    ck_assert_msg(memcmp(a, b, n) == 0, "h2d -> d2d -> d2h changed the bytes");
    backend_memset(&G, d2 + 1000, 0xAB, 77);
    backend_copy_d2h(&G, b, d2, n);
    for (size_t i = 0; i < n; i++) {
        unsigned char want = i >= 1000 && i < 1077 ? 0xAB : a[i];
        if (b[i] != want) ck_abort_msg("memset: byte %zu is 0x%02x, want 0x%02x", i, b[i], want);
    }
    // registered (pinned) memory and the async copies, joined by backend_sync
    void *pa = NULL, *pb = NULL;
    ck_assert_int_eq(posix_memalign(&pa, 4096, n), 0);
    ck_assert_int_eq(posix_memalign(&pb, 4096, n), 0);
    memcpy(pa, a, n);
    memset(pb, 0, n);
    ck_assert_int_eq(backend_register_host(&G, pa, n), 0);
    ck_assert_int_eq(backend_host_pin(pb, n, &G), 0);
    backend_copy_h2d_async(&G, d1, pa, n);
    cuda_add_inplace((float *)d2, (const float *)d2, 0); // an op in between: a no-op
    backend_copy_d2h_async(&G, pb, d1, n);
    backend_sync(&G);
    ck_assert_msg(memcmp(pb, a, n) == 0, "async h2d -> d2h changed the bytes");
    backend_unregister_host(&G, pa);
    ck_assert_int_eq(backend_host_unpin(pb, n, &G), 0);
    free(pa); free(pb); free(a); free(b);
}
END_TEST

START_TEST(test_copy_order) {
    // A copy queued after an op sees its result; an op queued after a copy sees its data.
    const size_t n = 1 << 20;
    float *h = fnew(n), *ones = fnew(n);
    for (size_t i = 0; i < n; i++) { h[i] = (float)i; ones[i] = 1.0f; }
    float *dx = dput(h, n), *dy = dput(ones, n);
    for (int rep = 0; rep < 20; rep++) G.ops->add_inplace(dx, dy, n, 0); // queued, not waited for
    float *back = dget(dx, n);
    for (size_t i = 0; i < n; i++)
        if (back[i] != (float)i + 20.0f) ck_abort_msg("d2h after 20 adds: [%zu] = %g, want %g", i, back[i], (float)i + 20.0f);
    for (size_t i = 0; i < n; i++) h[i] = -(float)i;
    backend_copy_h2d(&G, dx, h, n * sizeof(float));
    G.ops->add_inplace(dx, dy, n, 0);
    free(back);
    back = dget(dx, n);
    for (size_t i = 0; i < n; i++)
        if (back[i] != 1.0f - (float)i) ck_abort_msg("add after h2d: [%zu] = %g, want %g", i, back[i], 1.0f - (float)i);
    free(h); free(ones); free(back);
}
END_TEST

// ---------------------------------------------------------------- BF16, add, sumsq
START_TEST(test_bf16) {
    // bf16 -> f32 over every pattern; rounding over random bit patterns (NaN, Inf, ties,
    // denormals included): the CPU's integer code, bit for bit.
    const size_t nh = 65536;
    uint16_t *h16 = xmalloc(nh * sizeof(uint16_t));
    for (size_t i = 0; i < nh; i++) h16[i] = (uint16_t)i;
    float *want = fnew(nh);
    bf16_to_f32_n(want, h16, nh);
    uint16_t *d16 = dput_bytes(h16, nh * sizeof(uint16_t));
    float *dout = dpoison(nh);
    G.ops->bf16_to_f32_n(dout, d16, nh);
    float *got = dget(dout, nh);
    CHECK_BITS("bf16_to_f32_n (all 65536)", got, want, nh);
    free(got); free(want); free(h16);

    const size_t n = 100003;
    rng_t r = rng_make(7);
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rng_next(&r);
        if (i % 4 == 1) u = (u & 0xFFFF0000u) | 0x8000u; // exact tie
        if (i % 4 == 2) u &= 0x807FFFFFu;                // denormal
        x[i] = f_of(u);
    }
    x[0] = NAN; x[1] = INFINITY; x[2] = -INFINITY; x[3] = FLT_MAX; x[4] = f_of(0x7F800001u); x[5] = f_of(0xFFC00001u);
    float *dx = dput(x, n), *xs = fdup(x, n); // xs: the patterns for the f32 -> bf16 check below
    bf16_round_n(x, n);
    G.ops->bf16_round_n(dx, n);
    got = dget(dx, n);
    CHECK_BITS("bf16_round_n (random patterns)", got, x, n);
    // f32 -> bf16 over the same patterns (the checkpoints' store): the CPU's, bit for bit
    uint16_t *w16 = xmalloc(n * sizeof(uint16_t)), *g16 = xmalloc(n * sizeof(uint16_t));
    bf16_from_f32_n(w16, xs, n);
    float *dxs = dput(xs, n);
    uint16_t *dw16 = dalloc(n * sizeof(uint16_t));
    poison(dw16, n * sizeof(uint16_t));
    G.ops->bf16_from_f32_n(dw16, dxs, n);
    backend_copy_d2h(&G, g16, dw16, n * sizeof(uint16_t));
    ck_assert_msg(memcmp(g16, w16, n * sizeof(uint16_t)) == 0, "bf16_from_f32_n: the CUDA bits differ from the CPU's");
    free(got); free(x); free(xs); free(w16); free(g16);
}
END_TEST

START_TEST(test_add_inplace) {
    const size_t ns[] = {1, 33, 100001};
    rng_t r = rng_make(5);
    for (int k = 0; k < NELEMS(ns); k++) {
        size_t n = ns[k];
        float *x = fnew(n), *y = fnew(n);
        fill_sym(x, n, 1.0, &r);
        fill_sym(y, n, 1.0, &r);
        float *dx = dput(x, n), *dy = dput(y, n);
        add_inplace(x, y, n, 0);
        G.ops->add_inplace(dx, dy, n, 0);
        float *got = dget(dx, n);
        CHECK_BITS("add_inplace", got, x, n);
        free(x); free(y); free(got);
    }
}
END_TEST

// sumsq: the CPU's chunks, lanes and chunk order, in double: the same bits. Rounds of
// chunks (65536 by default) are shrunk to 3 chunks for the last cases to cross rounds.
typedef struct { size_t n, round; } sumsq_case_t;
static const sumsq_case_t SUMSQ_CASES[] = {
    {0, 0}, {1, 0}, {7, 0}, {4095, 0}, {4096, 0}, {4097, 0}, {3 * 4096 + 5, 0}, {1000 * 4096 + 77, 0},
    {10 * 4096 + 33, 3}, {9 * 4096, 3},
};

START_TEST(test_sumsq) {
    const sumsq_case_t c = SUMSQ_CASES[_i];
    cuda_kernels_set_test_limits(0, c.round, 0, 0);
    rng_t r = rng_make(100 + (uint64_t)_i);
    float *x = fnew(c.n);
    for (size_t i = 0; i < c.n; i++) x[i] = rng_sym(&r, pow(10.0, -3 + 6 * rng_unif(&r))); // 6 decades
    float *dx = c.n ? dput(x, c.n) : NULL;
    double want = sumsq(x, c.n), got = G.ops->sumsq(dx, c.n);
    ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "sumsq n=%zu round=%zu: GPU %.17g, CPU %.17g", c.n, c.round,
                  got, want);
    // the chunk sums themselves, into host memory (the grad norm's blocks)
    const size_t nb = (c.n + 4095) / 4096;
    double *bw = calloc(nb + 1, sizeof *bw), *bg = calloc(nb + 1, sizeof *bg);
    ck_assert(bw && bg);
    sumsq_blocks(bw, x, c.n);
    G.ops->sumsq_blocks(bg, dx, c.n);
    for (size_t b = 0; b < nb; b++)
        ck_assert_msg(memcmp(&bg[b], &bw[b], sizeof *bw) == 0, "sumsq_blocks n=%zu round=%zu block %zu: GPU %.17g, CPU %.17g",
                      c.n, c.round, b, bg[b], bw[b]);
    ck_assert_msg(bg[nb] == 0.0, "sumsq_blocks n=%zu wrote past its %zu blocks", c.n, nb);
    free(bw);
    free(bg);
    free(x);
}
END_TEST

// ---------------------------------------------------------------- matmul
typedef struct { int N, IC, OC; } mm_shape_t;
static const mm_shape_t MM_SHAPES[] = {
    {1, 1, 1}, {1, 48, 72}, {7, 48, 72}, {33, 48, 10}, {33, 72, 48}, {8, 300, 20}, {64, 130, 96}, {130, 1000, 36},
    {257, 64, 384},
};
enum { MMV_DEFAULT = 0, MMV_CHUNKED, MMV_FALLBACK, MMV_COUNT };
static const char *MMV_NAME[MMV_COUNT] = {"cuBLASLt", "cuBLASLt, 97-element chunks", "fallback kernel"};
enum { MM_BF16_EXACT = 0, MM_BF16_ROUNDING, MM_FP32, MM_MODES };
static const char *MM_MODE_NAME[MM_MODES] = {"bf16 (inputs in BF16)", "bf16 (FP32 inputs)", "fp32"};
static const double MM_REL[MM_MODES] = {MM_REL_BF16_EXACT, MM_REL_BF16_ROUNDING, MM_REL_FP32};

// |gpu − cpu| ≤ rel·scale + 1e-6·|cpu| + 1e-30, element by element.
static void mm_close(const char *what, const float *gpu, const float *cpu, const double *scale, size_t n, double rel) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = rel * scale[i] + 1e-6 * fabs(cpu[i]) + 1e-30;
        double e = fabs((double)gpu[i] - cpu[i]);
        if (!(e <= lim)) { // NaN fails here
            fprintf(stderr, "%s: [%zu] GPU %.9g CPU %.9g |err| %.3g > %.3g (rel %.3g of sum |terms| %.6g)\n", what, i,
                    gpu[i], cpu[i], e, lim, rel, scale[i]);
            ck_abort_msg("%s: out of tolerance at [%zu] (see stderr)", what, i);
        }
        worst = fmax(worst, e / lim);
    }
    if (getenv("TK_VERBOSE")) fprintf(stderr, "  %-72s worst/limit %.3f\n", what, worst);
}

// Case i of a loop over MM_SHAPES × MMV_COUNT: its shape, and its variant (returned), set up.
static int mm_case(int i, mm_shape_t *s) {
    *s = MM_SHAPES[i / MMV_COUNT];
    const int var = i % MMV_COUNT;
    if (var == MMV_CHUNKED) cuda_kernels_set_test_limits(97, 0, 0, 0);
    if (var == MMV_FALLBACK) cuda_kernels_set_test_limits(0, 0, 1, 0);
    return var;
}

START_TEST(test_matmul) {
    mm_shape_t s;
    const int var = mm_case(_i, &s), N = s.N, IC = s.IC, OC = s.OC;
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(200 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *dout = fnew(no), *dinp_pre = fnew(ni), *dw_pre = fnew(nw);
    fill_sym(inp, ni, 1.0, &rg);
    fill_sym(w, nw, 1.0, &rg);
    fill_sym(dout, no, 1.0, &rg);
    fill_sym(dinp_pre, ni, 1.0, &rg);
    fill_sym(dw_pre, nw, 1.0, &rg);
    float *d_inp = dalloc(ni * 4), *d_w = dalloc(nw * 4), *d_dout = dalloc(no * 4);
    float *d_out = dalloc(no * 4), *d_dinp = dalloc(ni * 4), *d_dw = dalloc(nw * 4);
    double *sc_out = xmalloc(no * sizeof(double)), *sc_dinp = xmalloc(ni * sizeof(double));
    double *sc_dw = xmalloc(nw * sizeof(double));
    for (int mode = 0; mode < MM_MODES; mode++) {
        float *a = fdup(inp, ni), *b = fdup(w, nw), *d = fdup(dout, no);
        if (mode == MM_BF16_EXACT) { bf16_round_n(a, ni); bf16_round_n(b, nw); bf16_round_n(d, no); }
        cuda_kernels_set_fp32_matmul(mode == MM_FP32);
        // Σ|terms| of every output, in double
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double t = 0;
                for (int i = 0; i < IC; i++) t += fabs((double)a[(size_t)n * IC + i] * b[(size_t)o * IC + i]);
                sc_out[(size_t)n * OC + o] = t;
            }
        for (size_t x = 0; x < ni; x++) sc_dinp[x] = 0;
        for (size_t x = 0; x < nw; x++) sc_dw[x] = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double dv = fabs((double)d[(size_t)n * OC + o]);
                for (int i = 0; i < IC; i++) {
                    sc_dinp[(size_t)n * IC + i] += dv * fabs((double)b[(size_t)o * IC + i]);
                    sc_dw[(size_t)o * IC + i] += dv * fabs((double)a[(size_t)n * IC + i]);
                }
            }
        upload(d_inp, a, ni * 4);
        upload(d_w, b, nw * 4);
        upload(d_dout, d, no * 4);
        char what[160];

        float *c_out = fnew(no);
        matmul_forward(c_out, a, b, N, IC, OC, 0);
        poison(d_out, no * 4);
        G.ops->matmul_forward(d_out, d_inp, d_w, N, IC, OC, 0);
        float *g_out = dget(d_out, no);
        snprintf(what, sizeof what, "matmul out N=%d IC=%d OC=%d %s, %s", N, IC, OC, MM_MODE_NAME[mode], MMV_NAME[var]);
        mm_close(what, g_out, c_out, sc_out, no, MM_REL[mode]);

        float *c_dinp = fnew(ni);
        matmul_backward_input(c_dinp, d, b, N, IC, OC, 0, 0);
        poison(d_dinp, ni * 4); // accumulate = 0 overwrites
        G.ops->matmul_backward_input(d_dinp, d_dout, d_w, N, IC, OC, 0, 0);
        float *g_dinp = dget(d_dinp, ni);
        snprintf(what, sizeof what, "matmul dinp (=) N=%d IC=%d OC=%d %s, %s", N, IC, OC, MM_MODE_NAME[mode], MMV_NAME[var]);
        mm_close(what, g_dinp, c_dinp, sc_dinp, ni, MM_REL[mode]);
        free(g_dinp);

        memcpy(c_dinp, dinp_pre, ni * 4); // accumulate = 1 adds
        matmul_backward_input(c_dinp, d, b, N, IC, OC, 1, 0);
        upload(d_dinp, dinp_pre, ni * 4);
        G.ops->matmul_backward_input(d_dinp, d_dout, d_w, N, IC, OC, 1, 0);
        g_dinp = dget(d_dinp, ni);
        snprintf(what, sizeof what, "matmul dinp (+=) N=%d IC=%d OC=%d %s, %s", N, IC, OC, MM_MODE_NAME[mode], MMV_NAME[var]);
        mm_close(what, g_dinp, c_dinp, sc_dinp, ni, MM_REL[mode]);

        float *c_dw = fdup(dw_pre, nw);
        matmul_backward_weight(c_dw, d, a, N, IC, OC);
        upload(d_dw, dw_pre, nw * 4);
        G.ops->matmul_backward_weight(d_dw, d_dout, d_inp, N, IC, OC);
        float *g_dw = dget(d_dw, nw);
        snprintf(what, sizeof what, "matmul dw (+=) N=%d IC=%d OC=%d %s, %s", N, IC, OC, MM_MODE_NAME[mode], MMV_NAME[var]);
        mm_close(what, g_dw, c_dw, sc_dw, nw, MM_REL[mode]);

        // run to run: the same call twice gives the same bits
        upload(d_dw, dw_pre, nw * 4);
        G.ops->matmul_backward_weight(d_dw, d_dout, d_inp, N, IC, OC);
        float *g_dw2 = dget(d_dw, nw);
        snprintf(what, sizeof what, "matmul dw run to run, %s, %s", MM_MODE_NAME[mode], MMV_NAME[var]);
        ck_assert_msg(memcmp(g_dw, g_dw2, nw * 4) == 0, "%s: two runs differ", what);

        free(a); free(b); free(d); free(c_out); free(g_out); free(c_dinp); free(g_dinp); free(c_dw); free(g_dw); free(g_dw2);
    }
    free(inp); free(w); free(dout); free(dinp_pre); free(dw_pre); free(sc_out); free(sc_dinp); free(sc_dw);
}
END_TEST

// The products of BF16 weights keep the bits of the FP32 ones on the widened weights, in both
// modes and on both GEMM paths, rounded or not, "=" and "+=": BF16 mode copies the weight
// where it narrowed the widened one, FP32 mode widens it into the scratch. The weight starts
// 6 bytes past an allocation, as a tensor inside a shard's compute copy may. Before each BF16
// product a product of another weight leaves that one in the scratch, so a weight staged
// short or not at all shows.
START_TEST(test_matmul_w16) {
    mm_shape_t s;
    const int var = mm_case(_i, &s), N = s.N, IC = s.IC, OC = s.OC;
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    rng_t rg = rng_make(260 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *dout = fnew(no), *dinp_pre = fnew(ni);
    fill_sym(inp, ni, 1.0, &rg);
    fill_sym(w, nw, 1.0, &rg);
    fill_sym(dout, no, 1.0, &rg);
    fill_sym(dinp_pre, ni, 1.0, &rg);
    uint16_t *w16 = xmalloc(nw * sizeof(uint16_t));
    bf16_from_f32_n(w16, w, nw);
    bf16_to_f32_n(w, w16, nw); // w: the weight widened
    uint16_t *d_w16 = (uint16_t *)dalloc((nw + 3) * sizeof(uint16_t)) + 3;
    upload(d_w16, w16, nw * sizeof(uint16_t));
    float *d_w = dput(w, nw), *d_inp = dput(inp, ni), *d_dout = dput(dout, no), *d_scratch = dalloc(nw * 4);
    float *d_ref = dalloc((no > ni ? no : ni) * 4), *d_got = dalloc((no > ni ? no : ni) * 4), *d_junk = dalloc(no * 4);
    for (size_t i = 0; i < nw; i++) w[i] = -w[i];
    float *d_other = dput(w, nw); // another weight (negated)
    for (size_t i = 0; i < nw; i++) w[i] = -w[i];
    char what[160];
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cuda_kernels_set_fp32_matmul(fp32);
        for (int round = 0; round < 2; round++) {
            const char *mode = fp32 ? "fp32" : "bf16";
            poison(d_ref, no * 4);
            poison(d_got, no * 4);
            G.ops->matmul_forward(d_ref, d_inp, d_w, N, IC, OC, round);
            G.ops->matmul_forward(d_junk, d_inp, d_other, N, IC, OC, 0);
            G.ops->matmul_forward_w16(d_got, d_inp, d_w16, d_scratch, N, IC, OC, round);
            float *ref = dget(d_ref, no), *got = dget(d_got, no);
            snprintf(what, sizeof what, "matmul_forward_w16 N=%d IC=%d OC=%d %s round %d, %s", N, IC, OC, mode, round,
                     MMV_NAME[var]);
            CHECK_SAME_OP(what, got, ref, no);
            free(ref); free(got);
            for (int acc = 0; acc < 2; acc++) {
                if (acc) { upload(d_ref, dinp_pre, ni * 4); upload(d_got, dinp_pre, ni * 4); }
                else { poison(d_ref, ni * 4); poison(d_got, ni * 4); }
                G.ops->matmul_backward_input(d_ref, d_dout, d_w, N, IC, OC, acc, round);
                G.ops->matmul_forward(d_junk, d_inp, d_other, N, IC, OC, 0);
                G.ops->matmul_backward_input_w16(d_got, d_dout, d_w16, d_scratch, N, IC, OC, acc, round);
                ref = dget(d_ref, ni);
                got = dget(d_got, ni);
                snprintf(what, sizeof what, "matmul_backward_input_w16 (%s) N=%d IC=%d OC=%d %s round %d, %s",
                         acc ? "+=" : "=", N, IC, OC, mode, round, MMV_NAME[var]);
                CHECK_SAME_OP(what, got, ref, ni);
                free(ref); free(got);
            }
        }
    }
    uint16_t *back = xmalloc(nw * sizeof(uint16_t));
    backend_copy_d2h(&G, back, d_w16, nw * sizeof(uint16_t));
    ck_assert_msg(memcmp(back, w16, nw * sizeof(uint16_t)) == 0, "the products changed their BF16 weight");
    free(back); free(inp); free(w); free(dout); free(dinp_pre); free(w16);
}
END_TEST

START_TEST(test_matmul_degenerate) {
    // As the CPU twin: an inner dimension of 0 writes zeros to "=" outputs and leaves "+="
    // outputs alone; N = 0 or OC = 0 (forward) touches nothing.
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cuda_kernels_set_fp32_matmul(fp32);
        const int N = 5, C = 7;
        float *d_out = dpoison((size_t)N * C), *d_x = dpoison((size_t)N * C);
        G.ops->matmul_forward(d_out, d_x, d_x, N, 0, C, 0); // IC = 0: out = 0
        float *h = dget(d_out, (size_t)N * C);
        for (int i = 0; i < N * C; i++) ck_assert_msg(h[i] == 0.0f, "forward IC=0: out[%d] = %g", i, h[i]);
        free(h);
        G.ops->matmul_backward_input(d_out, d_x, d_x, N, C, 0, 0, 0); // OC = 0, "=": dinp = 0
        poison(d_out, (size_t)N * C * 4);
        G.ops->matmul_backward_input(d_out, d_x, d_x, N, C, 0, 0, 0);
        h = dget(d_out, (size_t)N * C);
        for (int i = 0; i < N * C; i++) ck_assert_msg(h[i] == 0.0f, "backward_input OC=0 (=): dinp[%d] = %g", i, h[i]);
        free(h);
        G.ops->matmul_backward_input(d_out, d_x, d_x, N, C, 0, 1, 0); // "+=": unchanged (zeros)
        G.ops->matmul_backward_weight(d_out, d_x, d_x, 0, C, N);   // N = 0: unchanged
        G.ops->matmul_forward(d_x, d_out, d_out, 0, C, C, 0);         // N = 0: d_x stays poisoned
        h = dget(d_out, (size_t)N * C);
        for (int i = 0; i < N * C; i++) ck_assert_msg(h[i] == 0.0f, "degenerate calls changed [%d] = %g", i, h[i]);
        free(h);
        h = dget(d_x, (size_t)N * C);
        for (int i = 0; i < N * C; i++) ck_assert_msg(isnan(h[i]), "forward N=0 wrote [%d] = %g", i, h[i]);
        free(h);
    }
}
END_TEST

// ---------------------------------------------------------------- RMSNorm
typedef struct { int N, C; } rms_shape_t;
static const rms_shape_t RMS_SHAPES[] = {{1, 1}, {1, 48}, {7, 10}, {33, 48}, {66, 72}, {5, 200}, {300, 130}, {2, 1030}};

START_TEST(test_rmsnorm) {
    const rms_shape_t s = RMS_SHAPES[_i];
    const int N = s.N, C = s.C;
    const size_t nx = (size_t)N * C;
    const float eps = 1e-5f;
    rng_t rg = rng_make(300 + (uint64_t)_i);
    float *x = fnew(nx), *w = fnew(C), *dout = fnew(nx), *dx_pre = fnew(nx), *dw_pre = fnew(C);
    fill_sym(x, nx, 1.0, &rg);
    fill_sym(w, C, 1.0, &rg);
    fill_sym(dout, nx, 1.0, &rg);
    fill_sym(dx_pre, nx, 1.0, &rg);
    fill_sym(dw_pre, C, 1.0, &rg);
    float *c_out = fnew(nx), *c_rstd = fnew(N);
    rmsnorm_forward(c_out, c_rstd, x, w, N, C, eps, 0);
    float *d_x = dput(x, nx), *d_w = dput(w, C), *d_out = dpoison(nx), *d_rstd = dpoison(N);
    G.ops->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, eps, 0);
    float *g_out = dget(d_out, nx), *g_rstd = dget(d_rstd, N);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm out N=%d C=%d", N, C);
    CHECK_CLOSE(what, g_out, c_out, nx, TOL_RMS_OUT);
    snprintf(what, sizeof what, "rmsnorm rstd N=%d C=%d", N, C);
    CHECK_CLOSE(what, g_rstd, c_rstd, N, TOL_RMS_RSTD);
    // backward from the CPU's rstd on both sides, onto random prefills ("+=")
    float *c_dx = fdup(dx_pre, nx), *c_dw = fdup(dw_pre, C);
    rmsnorm_backward(c_dx, c_dw, dout, x, w, c_rstd, N, C, 0);
    float *d_dx = dput(dx_pre, nx), *d_dw = dput(dw_pre, C), *d_dout = dput(dout, nx);
    upload(d_rstd, c_rstd, (size_t)N * 4);
    G.ops->rmsnorm_backward(d_dx, d_dw, d_dout, d_x, d_w, d_rstd, N, C, 0);
    float *g_dx = dget(d_dx, nx), *g_dw = dget(d_dw, C);
    snprintf(what, sizeof what, "rmsnorm dx (+=) N=%d C=%d", N, C);
    CHECK_CLOSE(what, g_dx, c_dx, nx, TOL_RMS_DX);
    snprintf(what, sizeof what, "rmsnorm dw (+=) N=%d C=%d", N, C);
    CHECK_CLOSE(what, g_dw, c_dw, C, TOL_RMS_DW);
    // run to run
    upload(d_dw, dw_pre, (size_t)C * 4);
    upload(d_dx, dx_pre, nx * 4);
    G.ops->rmsnorm_backward(d_dx, d_dw, d_dout, d_x, d_w, d_rstd, N, C, 0);
    float *g_dw2 = dget(d_dw, C);
    ck_assert_msg(memcmp(g_dw, g_dw2, (size_t)C * 4) == 0, "rmsnorm dw: two runs differ (N=%d C=%d)", N, C);
    free(x); free(w); free(dout); free(dx_pre); free(dw_pre); free(c_out); free(c_rstd); free(g_out); free(g_rstd);
    free(c_dx); free(c_dw); free(g_dx); free(g_dw); free(g_dw2);
}
END_TEST

// ---------------------------------------------------------------- RoPE
typedef struct { int B, T, NX, HS; } rope_shape_t;
static const rope_shape_t ROPE_SHAPES[] = {
    {1, 1, 1, 2}, {1, 7, 4, 6}, {2, 33, 2, 10}, {1, 33, 6, 64}, {2, 5, 3, 18}, {1, 200, 1, 8}, {2, 33, 3, 128},
};

START_TEST(test_rope) {
    const rope_shape_t s = ROPE_SHAPES[_i];
    const size_t n = (size_t)s.B * s.T * s.NX * s.HS, nt = (size_t)s.T * (s.HS / 2);
    rng_t rg = rng_make(400 + (uint64_t)_i);
    float *x = fnew(n), *ct = fnew(nt), *st = fnew(nt);
    fill_sym(x, n, 1.0, &rg);
    rope_table(ct, st, s.T, s.HS, 10000.0);
    float *d_x = dput(x, n), *d_c = dput(ct, nt), *d_s = dput(st, nt);
    float *cx = fdup(x, n);
    rope_forward(cx, ct, st, s.B, s.T, s.NX, s.HS, 0);
    G.ops->rope_forward(d_x, d_c, d_s, s.B, s.T, s.NX, s.HS, 0);
    float *g = dget(d_x, n);
    char what[96];
    snprintf(what, sizeof what, "rope forward B=%d T=%d NX=%d HS=%d", s.B, s.T, s.NX, s.HS);
    CHECK_BITS(what, g, cx, n);
    free(g);
    rope_backward(cx, ct, st, s.B, s.T, s.NX, s.HS, 0);
    G.ops->rope_backward(d_x, d_c, d_s, s.B, s.T, s.NX, s.HS, 0);
    g = dget(d_x, n);
    snprintf(what, sizeof what, "rope backward B=%d T=%d NX=%d HS=%d", s.B, s.T, s.NX, s.HS);
    CHECK_BITS(what, g, cx, n);
    free(g); free(x); free(ct); free(st); free(cx);
}
END_TEST

// ---------------------------------------------------------------- attention
typedef struct { int B, T, NH, NKV, HS; } att_shape_t;
static const att_shape_t ATT_SHAPES[] = {
    {1, 1, 4, 2, 6},   {2, 7, 4, 2, 10},  {1, 33, 6, 2, 10}, {1, 33, 6, 3, 16}, {2, 33, 4, 4, 6},  {1, 33, 4, 1, 8},
    {1, 70, 2, 1, 16}, {1, 9, 2, 1, 260}, {1, 130, 2, 2, 6}, {2, 100, 6, 2, 64}, {1, 65, 2, 1, 128}, {1, 40, 2, 1, 300},
    {1, 3, 1, 1, 1},   {1, 64, 6, 3, 7},
};
// ATTV_AUTO: the register-tiled tensor-core kernels for head sizes up to 128 (WMMA, FP32
// tiled or plain beyond); ATTV_WMMA: the WMMA tensor-core kernels where their tiles fit;
// ATTV_FP32: the FP32 tiled kernels where they fit; ATTV_PLAIN: the untiled ones
enum { ATTV_AUTO = 0, ATTV_WMMA, ATTV_FP32, ATTV_PLAIN, ATTV_COUNT };
static const int ATTV_PATH[ATTV_COUNT] = {CUDA_ATT_AUTO, CUDA_ATT_WMMA, CUDA_ATT_FP32, CUDA_ATT_PLAIN};
static const char *const ATTV_NAME[ATTV_COUNT] = {"auto", "wmma", "fp32 tiled", "plain"};

START_TEST(test_attention) {
    const att_shape_t s = ATT_SHAPES[_i / ATTV_COUNT];
    const int var = _i % ATTV_COUNT;
    cuda_kernels_set_test_limits(0, 0, 0, ATTV_PATH[var]);
    const int tc = var == ATTV_AUTO || var == ATTV_WMMA; // where no tensor-core tiles fit, within the tighter bounds anyway
    const size_t nq = (size_t)s.B * s.T * s.NH * s.HS, nk = (size_t)s.B * s.T * s.NKV * s.HS;
    const size_t nl = (size_t)s.B * s.NH * s.T;
    rng_t rg = rng_make(500 + (uint64_t)_i);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *dout = fnew(nq);
    fill_sym(q, nq, 1.5, &rg);
    fill_sym(k, nk, 1.5, &rg);
    fill_sym(v, nk, 1.0, &rg);
    fill_sym(dout, nq, 1.0, &rg);
    float *c_out = fnew(nq), *c_lse = fnew(nl);
    attention_forward(c_out, c_lse, q, k, v, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    float *d_q = dput(q, nq), *d_k = dput(k, nk), *d_v = dput(v, nk), *d_dout = dput(dout, nq);
    float *d_out = dpoison(nq), *d_lse = dpoison(nl);
    G.ops->attention_forward(d_out, d_lse, d_q, d_k, d_v, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    float *g_out = dget(d_out, nq), *g_lse = dget(d_lse, nl);
    char what[128], tag[96];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d NKV=%d HS=%d %s", s.B, s.T, s.NH, s.NKV, s.HS, ATTV_NAME[var]);
    snprintf(what, sizeof what, "attention out %s", tag);
    CHECK_CLOSE(what, g_out, c_out, nq, tc ? TOL_ATT_TC_OUT : TOL_ATT_OUT);
    snprintf(what, sizeof what, "attention lse %s", tag);
    CHECK_CLOSE(what, g_lse, c_lse, nl, tc ? TOL_ATT_TC_LSE : TOL_ATT_LSE);
    G.ops->attention_forward(d_out, d_lse, d_q, d_k, d_v, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    float *g_out2 = dget(d_out, nq);
    ck_assert_msg(memcmp(g_out, g_out2, nq * 4) == 0, "attention out: two runs differ (%s)", tag);

    // backward from the CPU's out and lse on both sides
    float *c_dq = fnew(nq), *c_dk = fnew(nk), *c_dv = fnew(nk);
    attention_backward(c_dq, c_dk, c_dv, dout, q, k, v, c_out, c_lse, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    upload(d_out, c_out, nq * 4);
    upload(d_lse, c_lse, nl * 4);
    float *d_dq = dpoison(nq), *d_dk = dpoison(nk), *d_dv = dpoison(nk);
    G.ops->attention_backward(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_out, d_lse, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    float *g_dq = dget(d_dq, nq), *g_dk = dget(d_dk, nk), *g_dv = dget(d_dv, nk);
    snprintf(what, sizeof what, "attention dq %s", tag);
    CHECK_CLOSE(what, g_dq, c_dq, nq, tc ? TOL_ATT_TC_GRAD : TOL_ATT_DQ);
    snprintf(what, sizeof what, "attention dk %s", tag);
    CHECK_CLOSE(what, g_dk, c_dk, nk, tc ? TOL_ATT_TC_GRAD : TOL_ATT_DK);
    snprintf(what, sizeof what, "attention dv %s", tag);
    CHECK_CLOSE(what, g_dv, c_dv, nk, tc ? TOL_ATT_TC_GRAD : TOL_ATT_DV);
    poison(d_dq, nq * 4);
    poison(d_dk, nk * 4);
    G.ops->attention_backward(d_dq, d_dk, d_dv, d_dout, d_q, d_k, d_v, d_out, d_lse, s.B, s.T, s.NH, s.NKV, s.HS, 0);
    float *g_dq2 = dget(d_dq, nq), *g_dk2 = dget(d_dk, nk);
    ck_assert_msg(memcmp(g_dq, g_dq2, nq * 4) == 0 && memcmp(g_dk, g_dk2, nk * 4) == 0,
                  "attention backward: two runs differ (%s)", tag);
    free(q); free(k); free(v); free(dout); free(c_out); free(c_lse); free(g_out); free(g_lse); free(g_out2);
    free(c_dq); free(c_dk); free(c_dv); free(g_dq); free(g_dk); free(g_dv); free(g_dq2); free(g_dk2);
}
END_TEST

// ---------------------------------------------------------------- SwiGLU
static const size_t SWIGLU_N[] = {1, 7, 33 * 72 * 4, 40001, 64 * 30};

static void swiglu_check(const float *gate, const float *up, const float *dout, size_t n, const char *tag) {
    float *c_out = fnew(n), *c_dg = fnew(n), *c_du = fnew(n);
    swiglu_forward(c_out, gate, up, n, 0);
    swiglu_backward(c_dg, c_du, dout, gate, up, n, 0);
    float *d_g = dput(gate, n), *d_u = dput(up, n), *d_d = dput(dout, n);
    float *d_out = dpoison(n), *d_dg = dpoison(n), *d_du = dpoison(n);
    G.ops->swiglu_forward(d_out, d_g, d_u, n, 0);
    G.ops->swiglu_backward(d_dg, d_du, d_d, d_g, d_u, n, 0);
    float *g_out = dget(d_out, n), *g_dg = dget(d_dg, n), *g_du = dget(d_du, n);
    char what[96];
    snprintf(what, sizeof what, "swiglu out %s n=%zu", tag, n);
    CHECK_CLOSE(what, g_out, c_out, n, TOL_SWIGLU_OUT);
    snprintf(what, sizeof what, "swiglu dgate %s n=%zu", tag, n);
    CHECK_CLOSE(what, g_dg, c_dg, n, TOL_SWIGLU_DGATE);
    snprintf(what, sizeof what, "swiglu dup %s n=%zu", tag, n);
    CHECK_CLOSE(what, g_du, c_du, n, TOL_SWIGLU_DUP);
    free(c_out); free(c_dg); free(c_du); free(g_out); free(g_dg); free(g_du);
}

START_TEST(test_swiglu) {
    const size_t n = SWIGLU_N[_i];
    rng_t rg = rng_make(600 + (uint64_t)_i);
    float *g = fnew(n), *u = fnew(n), *d = fnew(n);
    fill_sym(g, n, 6.0, &rg);
    fill_sym(u, n, 1.0, &rg);
    fill_sym(d, n, 1.0, &rg);
    swiglu_check(g, u, d, n, "random");
    free(g); free(u); free(d);
}
END_TEST

// ---------------------------------------------------------------- BF16 activations
// The ops on BF16 halves (cuda_kernels.h "BF16 activations"; the backend's act16) against the
// FP32 ops on the same BF16 values, rounded: bit for bit, the halves as the narrowed words.
// Halves are read where 256-aligned and staged where not: both are run (an aligned buffer and
// one 2 bytes in), and chunked and fallback GEMMs too.
static uint16_t *hnew(size_t n) { return xmalloc(n * sizeof(uint16_t) + 2); }
static uint16_t *dget16(const uint16_t *d, size_t n) {
    uint16_t *h = hnew(n);
    backend_copy_d2h(&G, h, d, n * sizeof(uint16_t));
    return h;
}
// Device halves of BF16 values x: at an allocation's start (4 KiB-aligned) or 2 bytes in.
static uint16_t *dput16(const float *x, size_t n, int skew) {
    uint16_t *h = hnew(n), *d = (uint16_t *)dalloc((n + 1) * sizeof(uint16_t)) + skew;
    bf16_from_f32_n(h, x, n);
    upload(d, h, n * sizeof(uint16_t));
    free(h);
    return d;
}
// BF16 values: x rounded (what a bf16 step's activations hold)
static void round_bf16(float *x, size_t n) { bf16_round_n(x, n); }
static int same_halves(const char *what, const uint16_t *got, const float *want_rounded, size_t n) {
    uint16_t *w = hnew(n);
    bf16_from_f32_n(w, want_rounded, n);
    for (size_t i = 0; i < n; i++)
        if (got[i] != w[i]) {
            fprintf(stderr, "%s: [%zu] 0x%04x, the FP32 op's rounded word narrowed 0x%04x (%.9g)\n", what, i,
                    got[i], w[i], want_rounded[i]);
            free(w);
            return 0;
        }
    free(w);
    return 1;
}
#define CHECK_HALVES(what, got, want, n) \
    ck_assert_msg(same_halves((what), (got), (want), (n)), "%s: not the FP32 op's bits (see stderr)", (what))
// Every byte of d still 0xFF (a declined op wrote nothing)
static int untouched(const void *d, size_t bytes) {
    unsigned char *h = xmalloc(bytes);
    backend_copy_d2h(&G, h, d, bytes);
    size_t i = 0;
    while (i < bytes && h[i] == 0xFF) i++;
    free(h);
    return i == bytes;
}

START_TEST(test_matmul_x) {
    mm_shape_t s;
    const int var = mm_case(_i, &s), N = s.N, IC = s.IC, OC = s.OC;
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC, nmax = ni > no ? ni : no;
    rng_t rg = rng_make(280 + (uint64_t)_i);
    float *inp = fnew(ni), *w = fnew(nw), *dout = fnew(no), *dinp_pre = fnew(ni), *dw_pre = fnew(nw);
    fill_sym(inp, ni, 1.0, &rg); round_bf16(inp, ni);
    fill_sym(w, nw, 1.0, &rg); round_bf16(w, nw);
    fill_sym(dout, no, 1.0, &rg); round_bf16(dout, no);
    fill_sym(dinp_pre, ni, 1.0, &rg);
    fill_sym(dw_pre, nw, 1.0, &rg);
    cuda_kernels_set_fp32_matmul(0);
    uint16_t *d_w16 = dput16(w, nw, 1);
    for (size_t i = 0; i < nw; i++) w[i] = -w[i];
    uint16_t *d_o16 = dput16(w, nw, 0); // another weight (negated)
    float *d_inp = dput(inp, ni), *d_dout = dput(dout, no);
    const void *in_as[3] = {d_inp, dput16(inp, ni, 0), dput16(inp, ni, 1)}; // FP32, aligned halves, halves 2 bytes in
    const void *d_as[3] = {d_dout, dput16(dout, no, 0), dput16(dout, no, 1)};
    static const char *const form[3] = {"FP32", "halves", "halves +2 bytes"};
    float *d_ref = dalloc(nmax * 4), *d_ref2 = dalloc(nmax * 4), *d_got = dalloc(nmax * 4), *d_got2 = dalloc(nmax * 4);
    char what[200];
    // forward: two weights of one input (q, k, v's call), FP32 or BF16 out
    for (int round = 0; round < 2; round++) {
        G.ops->matmul_forward_w16(d_ref, d_inp, d_w16, NULL, N, IC, OC, round);
        G.ops->matmul_forward_w16(d_ref2, d_inp, d_o16, NULL, N, IC, OC, round);
        float *ref = dget(d_ref, no), *ref2 = dget(d_ref2, no);
        for (int a = 0; a < 3; a++)
            for (int o16 = 0; o16 <= round; o16++) {
                poison(d_got, no * 4);
                poison(d_got2, no * 4);
                const uint16_t *const ws[2] = {d_w16, d_o16};
                const int ocs[2] = {OC, OC};
                ck_assert_int_eq(G.ops->matmul_forward_w16_n_x(2, (void *const[]){d_got, d_got2}, o16, ws, ocs,
                                                               in_as[a], a > 0, N, IC, round), 0);
                for (int k = 0; k < 2; k++) {
                    snprintf(what, sizeof what, "matmul_forward_w16_n_x [%d] N=%d IC=%d OC=%d in %s, out %s, round %d, %s", k,
                             N, IC, OC, form[a], o16 ? "BF16" : "FP32", round, MMV_NAME[var]);
                    if (o16) {
                        uint16_t *got = dget16((uint16_t *)(k ? d_got2 : d_got), no);
                        CHECK_HALVES(what, got, k ? ref2 : ref, no);
                        free(got);
                    } else {
                        float *got = dget(k ? d_got2 : d_got, no);
                        CHECK_SAME_OP(what, got, k ? ref2 : ref, no);
                        free(got);
                    }
                }
            }
        free(ref); free(ref2);
    }
    // backward input: dinp (+)= dout · w, FP32 or BF16 ("=", rounded) out
    for (int round = 0; round < 2; round++)
        for (int acc = 0; acc < 2; acc++) {
            if (acc) upload(d_ref, dinp_pre, ni * 4);
            else poison(d_ref, ni * 4);
            G.ops->matmul_backward_input_w16(d_ref, d_dout, d_w16, NULL, N, IC, OC, acc, round);
            float *ref = dget(d_ref, ni);
            for (int a = 0; a < 3; a++)
                for (int o16 = 0; o16 <= (round && !acc); o16++) {
                    if (acc) upload(d_got, dinp_pre, ni * 4);
                    else poison(d_got, ni * 4);
                    ck_assert_int_eq(
                        G.ops->matmul_backward_input_x(d_got, o16, d_as[a], a > 0, d_w16, N, IC, OC, acc, round), 0);
                    snprintf(what, sizeof what, "matmul_backward_input_x (%s) N=%d IC=%d OC=%d dout %s, out %s, %s %d, %s",
                             acc ? "+=" : "=", N, IC, OC, form[a], o16 ? "BF16" : "FP32", "round", round,
                             MMV_NAME[var]);
                    if (o16) {
                        uint16_t *got = dget16((uint16_t *)d_got, ni);
                        CHECK_HALVES(what, got, ref, ni);
                        free(got);
                    } else {
                        float *got = dget(d_got, ni);
                        CHECK_SAME_OP(what, got, ref, ni);
                        free(got);
                    }
                }
            free(ref);
        }
    // backward weight: dw += doutᵀ · inp, either operand in either form
    upload(d_ref, dw_pre, nw * 4);
    G.ops->matmul_backward_weight(d_ref, d_dout, d_inp, N, IC, OC);
    float *ref = dget(d_ref, nw);
    static const int pairs[5][2] = {{0, 0}, {1, 1}, {2, 2}, {1, 0}, {0, 2}};
    for (int p = 0; p < 5; p++) {
        const int a = pairs[p][0], b = pairs[p][1];
        upload(d_got, dw_pre, nw * 4);
        ck_assert_uint_eq(G.ops->matmul_backward_weight_n_x(1, (float *const[]){d_got}, (const void *const[]){d_as[a]}, a > 0,
                                                            &OC, in_as[b], b > 0, N, IC),
                          0);
        float *got = dget(d_got, nw);
        snprintf(what, sizeof what, "matmul_backward_weight_n_x N=%d IC=%d OC=%d dout %s, inp %s, %s", N, IC, OC, form[a],
                 form[b], MMV_NAME[var]);
        CHECK_SAME_OP(what, got, ref, nw);
        free(got);
    }
    free(ref);
    // declined, nothing written: a BF16 output unrounded or accumulated, and every one in FP32 mode
    poison(d_got, nmax * 4);
    ck_assert_int_eq(G.ops->matmul_forward_w16_n_x(1, (void *const[]){d_got}, 1, (const uint16_t *const[]){d_w16}, &OC,
                                                   in_as[1], 1, N, IC, 0), 1);
    ck_assert_int_eq(G.ops->matmul_backward_input_x(d_got, 1, d_as[1], 1, d_w16, N, IC, OC, 1, 1), 1);
    ck_assert_int_eq(G.ops->matmul_backward_input_x(d_got, 1, d_as[1], 1, d_w16, N, IC, OC, 0, 0), 1);
    cuda_kernels_set_fp32_matmul(1);
    ck_assert_int_eq(G.ops->matmul_forward_w16_n_x(1, (void *const[]){d_got}, 0, (const uint16_t *const[]){d_w16}, &OC,
                                                   in_as[1], 1, N, IC, 1), 1);
    ck_assert_int_eq(G.ops->matmul_backward_input_x(d_got, 0, d_as[1], 1, d_w16, N, IC, OC, 0, 1), 1);
    ck_assert_uint_eq(G.ops->matmul_backward_weight_n_x(1, (float *const[]){d_got}, (const void *const[]){d_as[1]}, 1, &OC,
                                                        in_as[1], 1, N, IC),
                      1);
    cuda_kernels_set_fp32_matmul(0);
    ck_assert_msg(untouched(d_got, nmax * 4), "a declined product on BF16 activations wrote its output");
    free(inp); free(w); free(dout); free(dinp_pre); free(dw_pre);
}
END_TEST

START_TEST(test_rmsnorm16) {
    const rms_shape_t s = RMS_SHAPES[_i];
    const int N = s.N, C = s.C;
    const size_t nx = (size_t)N * C;
    rng_t rg = rng_make(330 + (uint64_t)_i);
    float *x = fnew(nx), *w = fnew(C);
    fill_sym(x, nx, 1.0, &rg);
    fill_sym(w, C, 1.0, &rg);
    float *d_x = dput(x, nx), *d_w = dput(w, C), *d_out = dpoison(nx), *d_rstd = dpoison(N), *d_rstd16 = dpoison(N);
    uint16_t *d_out16 = (uint16_t *)dpoison(nx);
    G.ops->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, 1e-5f, 1);
    G.ops->rmsnorm_forward16(d_out16, d_rstd16, d_x, d_w, N, C, 1e-5f);
    float *ref = dget(d_out, nx), *rstd = dget(d_rstd, N), *rstd16 = dget(d_rstd16, N);
    uint16_t *got = dget16(d_out16, nx);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm_forward16 out N=%d C=%d", N, C);
    CHECK_HALVES(what, got, ref, nx);
    snprintf(what, sizeof what, "rmsnorm_forward16 rstd N=%d C=%d", N, C);
    CHECK_SAME_OP(what, rstd16, rstd, N);
    ck_assert_msg(untouched((uint16_t *)d_out16 + nx, nx * 2), "rmsnorm_forward16 wrote past its halves");
    free(x); free(w); free(ref); free(rstd); free(rstd16); free(got);
}
END_TEST

// x2 ← round(x2 + x) in halves, then the norm of it: against the CPU twin (x2 bit for bit,
// out and rstd at rmsnorm's level) and against add_inplace with round then rmsnorm_forward16 on
// an FP32 copy of x2 (bit for bit). Halves past x2's and out's ends and the word past rstd's
// stay as poisoned.
START_TEST(test_residual_rmsnorm16) {
    const rms_shape_t s = RMS_SHAPES[_i];
    const int N = s.N, C = s.C;
    const size_t nx = (size_t)N * C;
    const float eps = 1e-5f;
    rng_t rg = rng_make(360 + (uint64_t)_i);
    float *x2 = fnew(nx), *x = fnew(nx), *w = fnew(C);
    fill_sym(x2, nx, 1.0, &rg); round_bf16(x2, nx); // the projection's rounded values
    fill_sym(x, nx, 1.0, &rg);
    fill_sym(w, C, 1.0, &rg);
    // the CPU twin
    uint16_t *c_x2 = hnew(nx), *c_out = hnew(nx);
    float *c_rstd = fnew(N);
    bf16_from_f32_n(c_x2, x2, nx);
    residual_rmsnorm_forward16(c_x2, c_out, c_rstd, x, w, N, C, eps);
    // the op: x2's halves and out (each 2·nx halves, the second half poisoned), rstd (N + 1)
    uint16_t *h16 = hnew(nx), *d_x2 = (uint16_t *)dpoison(nx), *d_out = (uint16_t *)dpoison(nx);
    bf16_from_f32_n(h16, x2, nx);
    upload(d_x2, h16, nx * 2);
    float *d_x = dput(x, nx), *d_w = dput(w, C), *d_rstd = dpoison((size_t)N + 1);
    G.ops->residual_rmsnorm_forward16(d_x2, d_out, d_rstd, d_x, d_w, N, C, eps);
    // the composition on an FP32 copy
    float *d_t = dput(x2, nx), *d_rrstd = dpoison(N);
    uint16_t *d_rout = (uint16_t *)dpoison(nx);
    G.ops->add_inplace(d_t, d_x, nx, 1);
    G.ops->rmsnorm_forward16(d_rout, d_rrstd, d_t, d_w, N, C, eps);
    uint16_t *g_x2 = dget16(d_x2, nx), *g_out = dget16(d_out, nx), *r_out = dget16(d_rout, nx);
    float *g_rstd = dget(d_rstd, N), *r_rstd = dget(d_rrstd, N), *t = dget(d_t, nx);
    float *gw = fnew(nx), *cw = fnew(nx), *rw = fnew(nx); // the halves widened (exact)
    char what[112];
    snprintf(what, sizeof what, "residual_rmsnorm_forward16 x2 N=%d C=%d", N, C);
    bf16_to_f32_n(gw, g_x2, nx);
    bf16_to_f32_n(cw, c_x2, nx);
    CHECK_BITS(what, gw, cw, nx);
    snprintf(what, sizeof what, "residual_rmsnorm_forward16 x2 N=%d C=%d vs add, round", N, C);
    CHECK_HALVES(what, g_x2, t, nx);
    bf16_to_f32_n(gw, g_out, nx);
    bf16_to_f32_n(cw, c_out, nx);
    bf16_to_f32_n(rw, r_out, nx);
    snprintf(what, sizeof what, "residual_rmsnorm_forward16 out N=%d C=%d", N, C);
    CHECK_CLOSE(what, gw, cw, nx, TOL_RMS_OUT16);
    snprintf(what, sizeof what, "residual_rmsnorm_forward16 out N=%d C=%d vs rmsnorm_forward16", N, C);
    CHECK_SAME_OP(what, gw, rw, nx);
    snprintf(what, sizeof what, "residual_rmsnorm_forward16 rstd N=%d C=%d", N, C);
    CHECK_CLOSE(what, g_rstd, c_rstd, N, TOL_RMS_RSTD);
    snprintf(what, sizeof what, "residual_rmsnorm_forward16 rstd N=%d C=%d vs rmsnorm_forward16", N, C);
    CHECK_SAME_OP(what, g_rstd, r_rstd, N);
    ck_assert_msg(untouched(d_x2 + nx, nx * 2) && untouched(d_out + nx, nx * 2) && untouched(d_rstd + N, 4),
                  "residual_rmsnorm_forward16 N=%d C=%d wrote past x2, out or rstd", N, C);
    free(x2); free(x); free(w); free(c_x2); free(c_out); free(c_rstd); free(h16); free(g_x2); free(g_out);
    free(r_out); free(g_rstd); free(r_rstd); free(t); free(gw); free(cw); free(rw);
}
END_TEST

// The backward with x as halves (the same BF16 values an FP32 x holds), onto random prefills
// ("+="), round 0 and 1: bit for bit the FP32 op's (the same kernels), and at rmsnorm's level
// the CPU twin's (unrounded: a rounded dx may land one BF16 ulp away). Nothing past dx or dw.
START_TEST(test_rmsnorm_backward16) {
    const rms_shape_t s = RMS_SHAPES[_i];
    const int N = s.N, C = s.C;
    const size_t nx = (size_t)N * C;
    rng_t rg = rng_make(390 + (uint64_t)_i);
    float *x = fnew(nx), *w = fnew(C), *dout = fnew(nx), *dx_pre = fnew(nx), *dw_pre = fnew(C), *rstd = fnew(N);
    float *out = fnew(nx);
    fill_sym(x, nx, 1.0, &rg); round_bf16(x, nx);
    fill_sym(w, C, 1.0, &rg);
    fill_sym(dout, nx, 1.0, &rg);
    fill_sym(dx_pre, nx, 1.0, &rg);
    fill_sym(dw_pre, C, 1.0, &rg);
    rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f, 0); // rstd of x, both sides
    uint16_t *h_x16 = hnew(nx);
    bf16_from_f32_n(h_x16, x, nx);
    float *d_x = dput(x, nx), *d_w = dput(w, C), *d_dout = dput(dout, nx), *d_rstd = dput(rstd, N);
    const uint16_t *d_x16 = dput16(x, nx, _i & 1);
    float *d_rdx = dalloc(nx * 4), *d_rdw = dalloc((size_t)C * 4);
    float *d_dx = dpoison(2 * nx), *d_dw = dpoison(2 * (size_t)C); // second halves: guards
    char what[112];
    for (int round = 0; round < 2; round++) {
        upload(d_rdx, dx_pre, nx * 4);
        upload(d_rdw, dw_pre, (size_t)C * 4);
        upload(d_dx, dx_pre, nx * 4);
        upload(d_dw, dw_pre, (size_t)C * 4);
        G.ops->rmsnorm_backward(d_rdx, d_rdw, d_dout, d_x, d_w, d_rstd, N, C, round);
        G.ops->rmsnorm_backward16(d_dx, d_dw, d_dout, d_x16, d_w, d_rstd, N, C, round);
        float *g_dx = dget(d_dx, nx), *g_dw = dget(d_dw, C), *r_dx = dget(d_rdx, nx), *r_dw = dget(d_rdw, C);
        snprintf(what, sizeof what, "rmsnorm_backward16 dx (+=) N=%d C=%d round %d", N, C, round);
        CHECK_SAME_OP(what, g_dx, r_dx, nx);
        snprintf(what, sizeof what, "rmsnorm_backward16 dw (+=) N=%d C=%d round %d", N, C, round);
        CHECK_SAME_OP(what, g_dw, r_dw, C);
        if (!round) {
            float *c_dx = fdup(dx_pre, nx), *c_dw = fdup(dw_pre, C);
            rmsnorm_backward16(c_dx, c_dw, dout, h_x16, w, rstd, N, C, 0);
            snprintf(what, sizeof what, "rmsnorm_backward16 dx (+=) N=%d C=%d vs the CPU", N, C);
            CHECK_CLOSE(what, g_dx, c_dx, nx, TOL_RMS_DX);
            snprintf(what, sizeof what, "rmsnorm_backward16 dw (+=) N=%d C=%d vs the CPU", N, C);
            CHECK_CLOSE(what, g_dw, c_dw, C, TOL_RMS_DW);
            free(c_dx); free(c_dw);
        }
        free(g_dx); free(g_dw); free(r_dx); free(r_dw);
    }
    ck_assert_msg(untouched(d_dx + nx, nx * 4) && untouched(d_dw + C, (size_t)C * 4),
                  "rmsnorm_backward16 N=%d C=%d wrote past dx or dw", N, C);
    free(x); free(w); free(dout); free(dx_pre); free(dw_pre); free(rstd); free(out); free(h_x16);
}
END_TEST

// y as halves (x2's BF16 values), round 0 and 1: the CPU twin's bits and the FP32 op's on the
// widened y; nothing past x.
START_TEST(test_add_inplace16) {
    const size_t ns[] = {1, 33, 100001};
    rng_t r = rng_make(6);
    for (int k = 0; k < NELEMS(ns); k++)
        for (int round = 0; round < 2; round++) {
            const size_t n = ns[k];
            float *x = fnew(n), *y = fnew(n);
            fill_sym(x, n, 1.0, &r);
            fill_sym(y, n, 1.0, &r); round_bf16(y, n);
            uint16_t *h_y16 = hnew(n);
            bf16_from_f32_n(h_y16, y, n);
            float *d_x = dpoison(2 * n), *d_ref = dput(x, n), *d_y = dput(y, n); // d_x's second half: a guard
            const uint16_t *d_y16 = dput16(y, n, k & 1);
            upload(d_x, x, n * 4);
            G.ops->add_inplace16(d_x, d_y16, n, round);
            G.ops->add_inplace(d_ref, d_y, n, round);
            add_inplace16(x, h_y16, n, round);
            float *got = dget(d_x, n), *ref = dget(d_ref, n);
            char what[80];
            snprintf(what, sizeof what, "add_inplace16 n=%zu round %d", n, round);
            CHECK_BITS(what, got, x, n);
            snprintf(what, sizeof what, "add_inplace16 n=%zu round %d vs add_inplace", n, round);
            CHECK_SAME_OP(what, got, ref, n);
            ck_assert_msg(untouched(d_x + n, n * 4), "add_inplace16 n=%zu wrote past x", n);
            free(x); free(y); free(h_y16); free(got); free(ref);
        }
}
END_TEST

START_TEST(test_swiglu16) {
    const size_t n = SWIGLU_N[_i];
    rng_t rg = rng_make(640 + (uint64_t)_i);
    float *g = fnew(n), *u = fnew(n), *d = fnew(n);
    fill_sym(g, n, 6.0, &rg); round_bf16(g, n);
    fill_sym(u, n, 1.0, &rg); round_bf16(u, n);
    fill_sym(d, n, 1.0, &rg); round_bf16(d, n);
    float *d_g = dput(g, n), *d_u = dput(u, n), *d_d = dput(d, n), *d_out = dpoison(n), *d_dg = dpoison(n),
          *d_du = dpoison(n);
    G.ops->swiglu_forward(d_out, d_g, d_u, n, 1);
    G.ops->swiglu_backward(d_dg, d_du, d_d, d_g, d_u, n, 1);
    float *out = dget(d_out, n), *dg = dget(d_dg, n), *du = dget(d_du, n);
    uint16_t *g16 = dput16(g, n, 0), *u16 = dput16(u, n, 1), *d16 = dput16(d, n, 0), *o16 = (uint16_t *)dpoison(n);
    G.ops->swiglu_forward16(o16, g16, u16, n);
    G.ops->swiglu_backward16(g16, u16, d16, g16, u16, n); // in place, as the step runs it
    uint16_t *h_out = dget16(o16, n), *h_dg = dget16(g16, n), *h_du = dget16(u16, n);
    char what[96];
    snprintf(what, sizeof what, "swiglu_forward16 n=%zu", n);
    CHECK_HALVES(what, h_out, out, n);
    snprintf(what, sizeof what, "swiglu_backward16 dgate (in place) n=%zu", n);
    CHECK_HALVES(what, h_dg, dg, n);
    snprintf(what, sizeof what, "swiglu_backward16 dup (in place) n=%zu", n);
    CHECK_HALVES(what, h_du, du, n);
    ck_assert_msg(untouched(o16 + n, n * 2), "swiglu_forward16 wrote past its halves");
    free(g); free(u); free(d); free(out); free(dg); free(du); free(h_out); free(h_dg); free(h_du);
}
END_TEST

START_TEST(test_rope16) {
    const rope_shape_t s = ROPE_SHAPES[_i];
    const size_t n = (size_t)s.B * s.T * s.NX * s.HS, nt = (size_t)s.T * (s.HS / 2);
    rng_t rg = rng_make(430 + (uint64_t)_i);
    float *x = fnew(n), *ct = fnew(nt), *st = fnew(nt);
    fill_sym(x, n, 1.0, &rg); round_bf16(x, n);
    rope_table(ct, st, s.T, s.HS, 10000.0);
    float *d_x = dput(x, n), *d_c = dput(ct, nt), *d_s = dput(st, nt);
    uint16_t *d_x16 = dput16(x, n, 1);
    char what[96];
    for (int bwd = 0; bwd < 2; bwd++) { // forward, then backward on its results
        if (bwd) G.ops->rope_backward(d_x, d_c, d_s, s.B, s.T, s.NX, s.HS, 1);
        else G.ops->rope_forward(d_x, d_c, d_s, s.B, s.T, s.NX, s.HS, 1);
        if (bwd) G.ops->rope_backward16(d_x16, d_c, d_s, s.B, s.T, s.NX, s.HS);
        else G.ops->rope_forward16(d_x16, d_c, d_s, s.B, s.T, s.NX, s.HS);
        float *ref = dget(d_x, n);
        uint16_t *got = dget16(d_x16, n);
        snprintf(what, sizeof what, "rope_%s16 B=%d T=%d NX=%d HS=%d", bwd ? "backward" : "forward", s.B, s.T, s.NX, s.HS);
        CHECK_HALVES(what, got, ref, n);
        free(ref); free(got);
    }
    free(x); free(ct); free(st);
}
END_TEST

// Attention on halves where the register-tiled kernels take the shape (cuda_attention_act16),
// against the FP32 op with round on the same BF16 values (which runs those kernels there);
// elsewhere (odd or large head sizes) declined, nothing written.
START_TEST(test_attention16) {
    const att_shape_t s = ATT_SHAPES[_i];
    cuda_kernels_set_test_limits(0, 0, 0, CUDA_ATT_AUTO);
    const size_t nq = (size_t)s.B * s.T * s.NH * s.HS, nk = (size_t)s.B * s.T * s.NKV * s.HS;
    const size_t nl = (size_t)s.B * s.NH * s.T;
    rng_t rg = rng_make(530 + (uint64_t)_i);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *dout = fnew(nq);
    fill_sym(q, nq, 1.5, &rg); round_bf16(q, nq);
    fill_sym(k, nk, 1.5, &rg); round_bf16(k, nk);
    fill_sym(v, nk, 1.0, &rg); round_bf16(v, nk);
    fill_sym(dout, nq, 1.0, &rg); round_bf16(dout, nq);
    uint16_t *q16 = dput16(q, nq, 0), *k16 = dput16(k, nk, 1), *v16 = dput16(v, nk, 0), *d16 = dput16(dout, nq, 0);
    uint16_t *o16 = (uint16_t *)dpoison(nq), *dq16 = (uint16_t *)dpoison(nq), *dk16 = (uint16_t *)dpoison(nk),
             *dv16 = (uint16_t *)dpoison(nk);
    float *lse16 = dpoison(nl);
    char tag[96], what[160];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d NKV=%d HS=%d", s.B, s.T, s.NH, s.NKV, s.HS);
    const int takes = cuda_attention_act16(s.NH, s.NKV, s.HS);
    const int f = G.ops->attention_forward16(o16, lse16, q16, k16, v16, s.B, s.T, s.NH, s.NKV, s.HS);
    const int b = G.ops->attention_backward16(dq16, dk16, dv16, d16, q16, k16, v16, o16, lse16, s.B, s.T, s.NH, s.NKV,
                                              s.HS);
    ck_assert_msg(f == !takes && b == !takes, "attention16 %s: forward %d, backward %d, where the shape says %d", tag, f,
                  b, takes);
    if (!takes) {
        ck_assert_msg(untouched(o16, nq * 4) && untouched(lse16, nl * 4) && untouched(dq16, nq * 4) &&
                      untouched(dk16, nk * 4) && untouched(dv16, nk * 4), "attention16 %s: declined, yet wrote", tag);
    } else {
        float *d_q = dput(q, nq), *d_k = dput(k, nk), *d_v = dput(v, nk), *d_d = dput(dout, nq), *d_out = dpoison(nq);
        float *d_lse = dpoison(nl), *d_dq = dpoison(nq), *d_dk = dpoison(nk), *d_dv = dpoison(nk);
        G.ops->attention_forward(d_out, d_lse, d_q, d_k, d_v, s.B, s.T, s.NH, s.NKV, s.HS, 1);
        G.ops->attention_backward(d_dq, d_dk, d_dv, d_d, d_q, d_k, d_v, d_out, d_lse, s.B, s.T, s.NH, s.NKV, s.HS, 1);
        float *const ref[5] = {dget(d_out, nq), dget(d_lse, nl), dget(d_dq, nq), dget(d_dk, nk), dget(d_dv, nk)};
        uint16_t *const got[4] = {dget16(o16, nq), dget16(dq16, nq), dget16(dk16, nk), dget16(dv16, nk)};
        float *g_lse = dget(lse16, nl);
        snprintf(what, sizeof what, "attention_forward16 out %s", tag);
        CHECK_HALVES(what, got[0], ref[0], nq);
        snprintf(what, sizeof what, "attention_forward16 lse %s", tag);
        CHECK_SAME_OP(what, g_lse, ref[1], nl);
        static const char *const name[3] = {"dq", "dk", "dv"};
        const size_t len[3] = {nq, nk, nk};
        for (int i = 0; i < 3; i++) {
            snprintf(what, sizeof what, "attention_backward16 %s %s", name[i], tag);
            CHECK_HALVES(what, got[i + 1], ref[i + 2], len[i]);
        }
        ck_assert_msg(untouched(o16 + nq, nq * 2) && untouched(dq16 + nq, nq * 2) && untouched(dk16 + nk, nk * 2),
                      "attention16 %s wrote past its halves", tag);
        for (int i = 0; i < 5; i++) free(ref[i]);
        for (int i = 0; i < 4; i++) free(got[i]);
        free(g_lse);
    }
    free(q); free(k); free(v); free(dout);
}
END_TEST

// The ops' round flags on the device: each wrapped op with round = 1 against the same op with
// round = 0 and then bf16_round_n over each of its outputs (whose sizes the wrappers compute).
START_TEST(test_round_flags) {
    const int B = 2, T = 33, NH = 4, NKV = 2, HS = 16, N = B * T, C = NH * HS, KVD = NKV * HS;
    const size_t nq = (size_t)N * C, nk = (size_t)N * KVD, nl = (size_t)B * NH * T;
    rng_t rg = rng_make(4242);
    float *q = fnew(nq), *k = fnew(nk), *v = fnew(nk), *d = fnew(nq), *w = fnew((size_t)C * KVD);
    fill_sym(q, nq, 2.0, &rg); fill_sym(k, nk, 2.0, &rg); fill_sym(v, nk, 1.0, &rg);
    fill_sym(d, nq, 1.0, &rg); fill_sym(w, (size_t)C * KVD, 1.0, &rg);
    float *dq_ = dput(q, nq), *dk_ = dput(k, nk), *dv_ = dput(v, nk), *dd = dput(d, nq), *dw = dput(w, (size_t)C * KVD);
    float *out = dpoison(nq), *lse = dpoison(nl), *g[2][3];
    G.ops->attention_forward(out, lse, dq_, dk_, dv_, B, T, NH, NKV, HS, 0);
    for (int r = 0; r < 2; r++) {
        g[r][0] = dpoison(nq); g[r][1] = dpoison(nk); g[r][2] = dpoison(nk);
        G.ops->attention_backward(g[r][0], g[r][1], g[r][2], dd, dq_, dk_, dv_, out, lse, B, T, NH, NKV, HS, r);
        if (!r) { G.ops->bf16_round_n(g[r][0], nq); G.ops->bf16_round_n(g[r][1], nk); G.ops->bf16_round_n(g[r][2], nk); }
    }
    const size_t len[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++) {
        float *a = dget(g[0][i], len[i]), *b = dget(g[1][i], len[i]);
        CHECK_BITS(i == 0 ? "attention_backward dq, round" : i == 1 ? "attention_backward dk, round" : "attention_backward dv, round",
                   b, a, len[i]);
        free(a); free(b);
    }
    // dinp (N, C) += dout (N, KVD) · w (KVD, C), rounded after the sum
    float *m[2];
    for (int r = 0; r < 2; r++) {
        m[r] = dput(q, nq);
        G.ops->matmul_backward_input(m[r], dk_, dw, N, C, KVD, 1, r);
        if (!r) G.ops->bf16_round_n(m[r], nq);
    }
    float *a = dget(m[0], nq), *b = dget(m[1], nq);
    CHECK_BITS("matmul_backward_input +=, round", b, a, nq);
    free(a); free(b);
    free(q); free(k); free(v); free(d); free(w);
}
END_TEST

START_TEST(test_swiglu_extremes) {
    // e^−g overflows for g < −88.7 (silu → −0), underflows to denormals near g = 87..103
    float g[] = {-1e30f, -1000.0f, -100.0f, -88.8f, -88.0f, -50.0f, -1.2785f, -1e-30f, 0.0f, -0.0f, 1e-30f,
                 1.0f,   50.0f,    87.5f,   90.0f,  100.0f, 104.0f, 1000.0f,  1e30f};
    const size_t n = sizeof g / sizeof g[0];
    float u[sizeof g / sizeof g[0]], d[sizeof g / sizeof g[0]];
    for (size_t i = 0; i < n; i++) { u[i] = 0.75f; d[i] = -1.25f; }
    swiglu_check(g, u, d, n, "extremes");
}
END_TEST

// ---------------------------------------------------------------- embedding
// A cut of the vocabulary into chunks of nv rows (the last one ragged where nv does not
// divide V; nv = V: the whole table): after every chunk, the whole output and the whole
// gradient (the chunk's rows reached through an offset pointer) equal the CPU's bit for
// bit, so rows outside the chunk are checked untouched too.
typedef struct { int N, C, V, nv; } emb_shape_t;
static const emb_shape_t EMB_SHAPES[] = {{1, 1, 1, 1},      {1, 48, 5, 5},         {33, 10, 7, 3},       {66, 72, 11, 4},
                                         {300, 130, 3, 2},  {64, 200, 1000, 1000}, {64, 200, 1000, 333}, {129, 17, 50, 7}};

START_TEST(test_embedding) {
    const emb_shape_t s = EMB_SHAPES[_i];
    const size_t nw = (size_t)s.V * s.C, no = (size_t)s.N * s.C;
    rng_t rg = rng_make(700 + (uint64_t)_i);
    int *tok = xmalloc((size_t)s.N * sizeof(int));
    for (int n = 0; n < s.N; n++) tok[n] = (int)(rng_next(&rg) % (uint64_t)s.V); // repeats when N > V
    float *wte = fnew(nw), *dout = fnew(no), *dw_pre = fnew(nw);
    fill_sym(wte, nw, 1.0, &rg);
    fill_sym(dout, no, 1.0, &rg);
    fill_sym(dw_pre, nw, 1.0, &rg);
    int *d_tok = dput_bytes(tok, (size_t)s.N * sizeof(int));
    float *d_wte = dput(wte, nw), *d_out = dpoison(no), *d_dw = dput(dw_pre, nw), *d_dout = dput(dout, no);
    float *c_out = fnew(no), *c_dw = fdup(dw_pre, nw), *c16_out = fnew(no), *d16_out = dpoison(no);
    memset(c_out, 0xFF, no * sizeof(float)); // as d_out: rows not yet written compare equal
    memset(c16_out, 0xFF, no * sizeof(float));
    uint16_t *wte16 = xmalloc(nw * sizeof(uint16_t));
    for (size_t i = 0; i < nw; i++) wte16[i] = (uint16_t)(rng_next(&rg) >> 48); // any bits, NaNs and all
    uint16_t *d_wte16 = dput_bytes(wte16, nw * sizeof(uint16_t));
    char what[128];
    for (int v0 = 0; v0 < s.V; v0 += s.nv) {
        const int nv = s.V - v0 < s.nv ? s.V - v0 : s.nv;
        const size_t off = (size_t)v0 * s.C;
        embedding_forward(c_out, tok, wte + off, s.N, s.C, v0, nv);
        G.ops->embedding_forward(d_out, d_tok, d_wte + off, s.N, s.C, v0, nv);
        float *g_out = dget(d_out, no);
        snprintf(what, sizeof what, "embedding out N=%d C=%d V=%d, chunk [%d, %d)", s.N, s.C, s.V, v0, v0 + nv);
        CHECK_BITS(what, g_out, c_out, no);
        // the BF16 table: the CPU twin's rows (its own rows of the FP32 table widened)
        embedding_forward_w16(c16_out, tok, wte16 + off, s.N, s.C, v0, nv);
        G.ops->embedding_forward_w16(d16_out, d_tok, d_wte16 + off, s.N, s.C, v0, nv);
        float *g16_out = dget(d16_out, no);
        snprintf(what, sizeof what, "embedding out, BF16 table, N=%d C=%d V=%d, chunk [%d, %d)", s.N, s.C, s.V, v0,
                 v0 + nv);
        CHECK_BITS(what, g16_out, c16_out, no);
        free(g16_out);
        embedding_backward(c_dw + off, dout, tok, s.N, s.C, v0, nv);
        G.ops->embedding_backward(d_dw + off, d_dout, d_tok, s.N, s.C, v0, nv);
        float *g_dw = dget(d_dw, nw);
        snprintf(what, sizeof what, "embedding dwte (+=) N=%d C=%d V=%d, chunk [%d, %d)", s.N, s.C, s.V, v0, v0 + nv);
        CHECK_BITS(what, g_dw, c_dw, nw);
        free(g_out); free(g_dw);
    }
    free(tok); free(wte); free(dout); free(dw_pre); free(c_out); free(c_dw); free(c16_out); free(wte16);
}
END_TEST

// ---------------------------------------------------------------- cross-entropy
// The quantum form as the step runs it: quantum q holds columns [v0, v0 + Vq) of every row,
// (N, Vq) row-major, the quanta one after another (quantum q starts at N·v0); every quantum
// folded in ascending order, the losses, then every quantum's backward in descending order
// (any order is allowed). The logits are i.i.d., so the packed buffer is drawn directly.
// Shapes: one quantum (V ≤ CE_QUANTUM, ragged lanes), ragged last quanta (37, and 1 with
// N = 1), V a multiple of CE_QUANTUM, and the LM-head sizes 32000 / 32003.
typedef struct { int N, V; double amp; } ce_shape_t;
static const ce_shape_t CE_SHAPES[] = {{1, 1, 1},    {1, 5, 1},       {7, 48, 1},        {33, 256, 4},
                                       {4, 1000, 100}, {3, 2048, 2},  {3, 2 * 2048 + 37, 4}, {1, 2 * 2048 + 1, 2},
                                       {2, 8192, 10}, {3, 32000, 10}, {5, 32003, 4}};
static int ce_width(int V, int v0) { return V - v0 < CE_QUANTUM ? V - v0 : CE_QUANTUM; }

// The CUDA quantum form on device buffers; dq == xq runs the backward in place.
static void ce_gpu(float *dq, float *loss, float *stats, const float *xq, const int *tgt, int N, int V, float dscale) {
    for (int v0 = 0; v0 < V; v0 += CE_QUANTUM)
        G.ops->crossentropy_fold(stats, xq + (size_t)N * v0, tgt, N, ce_width(V, v0), v0);
    G.ops->crossentropy_loss(loss, stats, N);
    for (int v0 = (V - 1) / CE_QUANTUM * CE_QUANTUM; v0 >= 0; v0 -= CE_QUANTUM)
        G.ops->crossentropy_backward(dq + (size_t)N * v0, xq + (size_t)N * v0, stats, tgt, N, ce_width(V, v0), v0,
                                     dscale);
}

START_TEST(test_crossentropy) {
    const ce_shape_t s = CE_SHAPES[_i];
    const int N = s.N, V = s.V;
    const size_t nl = (size_t)N * V, ns = 3 * (size_t)N;
    const float dscale = 1.0f / (float)N;
    rng_t rg = rng_make(800 + (uint64_t)_i);
    float *xq = fnew(nl);
    fill_sym(xq, nl, s.amp, &rg);
    int *tgt = xmalloc((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) tgt[n] = (int)(rng_next(&rg) % (uint64_t)V);
    tgt[0] = V - 1; // in the last (possibly one-wide) quantum
    // the CPU twin (stats start as garbage: the first fold must not read them)
    float *c_dq = fnew(nl), *c_loss = fnew(N), *c_stats = fnew(ns);
    for (size_t i = 0; i < ns; i++) c_stats[i] = 1e30f;
    for (int v0 = 0; v0 < V; v0 += CE_QUANTUM) crossentropy_fold(c_stats, xq + (size_t)N * v0, tgt, N, ce_width(V, v0), v0);
    crossentropy_loss(c_loss, c_stats, N);
    for (int v0 = 0; v0 < V; v0 += CE_QUANTUM)
        crossentropy_backward(c_dq + (size_t)N * v0, xq + (size_t)N * v0, c_stats, tgt, N, ce_width(V, v0), v0, dscale);
    float *d_xq = dput(xq, nl), *d_dq = dpoison(nl), *d_loss = dpoison(N), *d_stats = dpoison(ns);
    int *d_tgt = dput_bytes(tgt, (size_t)N * sizeof(int));
    ce_gpu(d_dq, d_loss, d_stats, d_xq, d_tgt, N, V, dscale);
    float *g_dq = dget(d_dq, nl), *g_loss = dget(d_loss, N), *g_stats = dget(d_stats, ns);
    char what[96];
    // the max and the target logit are exact on both sides; S, the loss and dlogits FP32-close
    snprintf(what, sizeof what, "crossentropy stats M N=%d V=%d", N, V);
    CHECK_BITS(what, g_stats, c_stats, (size_t)N);
    snprintf(what, sizeof what, "crossentropy stats S N=%d V=%d", N, V);
    CHECK_CLOSE(what, g_stats + N, c_stats + N, (size_t)N, TOL_CE_SUM);
    snprintf(what, sizeof what, "crossentropy stats XT N=%d V=%d", N, V);
    CHECK_BITS(what, g_stats + 2 * N, c_stats + 2 * N, (size_t)N);
    snprintf(what, sizeof what, "crossentropy loss N=%d V=%d", N, V);
    CHECK_CLOSE(what, g_loss, c_loss, N, TOL_CE_LOSS);
    snprintf(what, sizeof what, "crossentropy dlogits N=%d V=%d", N, V);
    CHECK_CLOSE(what, g_dq, c_dq, nl, TOL_CE_DLOGITS);
    // run to run, and dlogits aliasing logits: the same bits
    poison(d_dq, nl * sizeof(float));
    poison(d_loss, (size_t)N * sizeof(float));
    poison(d_stats, ns * sizeof(float));
    ce_gpu(d_dq, d_loss, d_stats, d_xq, d_tgt, N, V, dscale);
    float *r_dq = dget(d_dq, nl), *r_loss = dget(d_loss, N), *r_stats = dget(d_stats, ns);
    snprintf(what, sizeof what, "crossentropy run to run N=%d V=%d: stats", N, V);
    CHECK_BITS(what, r_stats, g_stats, ns);
    snprintf(what, sizeof what, "crossentropy run to run N=%d V=%d: loss", N, V);
    CHECK_BITS(what, r_loss, g_loss, (size_t)N);
    snprintf(what, sizeof what, "crossentropy run to run N=%d V=%d: dlogits", N, V);
    CHECK_BITS(what, r_dq, g_dq, nl);
    ce_gpu(d_xq, d_loss, d_stats, d_xq, d_tgt, N, V, dscale);
    float *a_dq = dget(d_xq, nl);
    snprintf(what, sizeof what, "crossentropy dlogits in place N=%d V=%d", N, V);
    CHECK_BITS(what, a_dq, g_dq, nl);
    free(xq); free(tgt); free(c_dq); free(c_loss); free(c_stats); free(g_dq); free(g_loss); free(g_stats);
    free(r_dq); free(r_loss); free(r_stats); free(a_dq);
}
END_TEST

// ---------------------------------------------------------------- AdamW
// Bit-identical to the scalar reference (kernels/cpu/adamw.c) on finite inputs spread over
// many decades (the NaN payload is the one documented difference: not tested).
typedef struct { size_t n; float wd, grad_scale; int t; } adam_case_t;
static const adam_case_t ADAM_CASES[] = {{4099, 0.1f, 0.37f, 3}, {70001, 0.0f, 1.0f, 1}, {513, 0.1f, 1.0f, 1000}, {1, 0.1f, 2.0f, 7}};

START_TEST(test_adamw) {
    const adam_case_t ac = ADAM_CASES[_i];
    const size_t n = ac.n;
    rng_t r = rng_make(900 + (uint64_t)_i);
    float *master = fnew(n), *m = fnew(n), *v = fnew(n), *g = fnew(n);
    for (size_t i = 0; i < n; i++) {
        double sg = rng_unif(&r) < 0.5 ? -1 : 1, sm = rng_unif(&r) < 0.5 ? -1 : 1, sp = rng_unif(&r) < 0.5 ? -1 : 1;
        g[i] = (float)(sg * pow(10.0, -12 + 18 * rng_unif(&r)));
        m[i] = (float)(sm * pow(10.0, -12 + 18 * rng_unif(&r)));
        v[i] = (float)pow(10.0, -24 + 36 * rng_unif(&r));
        master[i] = (float)(sp * pow(10.0, -6 + 9 * rng_unif(&r)));
        if (i % 97 == 5) g[i] = 0.0f;
        if (i % 89 == 7) m[i] = 0.0f, v[i] = 0.0f;
        if (i % 83 == 11) master[i] = f_of(0x00000123u); // a denormal
    }
    adamw_params_t hp = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .wd = ac.wd, .grad_scale = ac.grad_scale};
    hp.bc1 = (float)(1.0 - pow(0.9, ac.t));
    hp.bc2 = (float)(1.0 - pow(0.95, ac.t));
    float *d_master = dalloc(n * 4), *d_m = dalloc(n * 4), *d_v = dalloc(n * 4), *d_g = dput(g, n);
    float *d_p32 = dalloc(n * 4);
    uint16_t *d_p16 = dalloc(n * 2);
    for (int outs = 0; outs < 4; outs++) { // p16 and p32 each present or NULL
        const int w16 = outs & 1, w32 = outs & 2;
        float *cm = fdup(master, n), *cmm = fdup(m, n), *cv = fdup(v, n), *c32 = fnew(n);
        uint16_t *c16 = xmalloc(n * 2);
        memset(c32, 0xFF, n * 4);
        memset(c16, 0xFF, n * 2);
        adamw_update_scalar(cm, cmm, cv, w16 ? c16 : NULL, w32 ? c32 : NULL, g, n, &hp);
        upload(d_master, master, n * 4);
        upload(d_m, m, n * 4);
        upload(d_v, v, n * 4);
        poison(d_p32, n * 4);
        poison(d_p16, n * 2);
        G.ops->adamw_update(d_master, d_m, d_v, w16 ? d_p16 : NULL, w32 ? d_p32 : NULL, d_g, n, &hp);
        float *gm = dget(d_master, n), *gmm = dget(d_m, n), *gv = dget(d_v, n), *g32 = dget(d_p32, n);
        uint16_t *g16 = xmalloc(n * 2);
        backend_copy_d2h(&G, g16, d_p16, n * 2);
        char what[96];
        snprintf(what, sizeof what, "adamw master n=%zu (p16 %d, p32 %d)", n, !!w16, !!w32);
        CHECK_BITS(what, gm, cm, n);
        snprintf(what, sizeof what, "adamw m n=%zu", n);
        CHECK_BITS(what, gmm, cmm, n);
        snprintf(what, sizeof what, "adamw v n=%zu", n);
        CHECK_BITS(what, gv, cv, n);
        snprintf(what, sizeof what, "adamw p32 n=%zu (written %d)", n, !!w32);
        CHECK_BITS(what, g32, c32, n); // NULL: both stay all-ones
        ck_assert_msg(memcmp(g16, c16, n * 2) == 0, "adamw p16 n=%zu (written %d): not bit-identical", n, !!w16);
        free(cm); free(cmm); free(cv); free(c32); free(c16); free(gm); free(gmm); free(gv); free(g32); free(g16);
    }
    free(master); free(m); free(v); free(g);
}
END_TEST

// ---------------------------------------------------------------- arena and device memory
// These build their own backends (no fixture).
static size_t mem_free(void) {
    size_t f = 0, t = 0;
    ck_assert_int_eq(cudaMemGetInfo(&f, &t), cudaSuccess);
    return f;
}

START_TEST(test_arena_budget) {
    ck_assert_int_eq(cudaFree(NULL), cudaSuccess); // this process's context, before measuring
    const size_t free0 = mem_free();
    config_t cfg = test_cfg();
    cfg.hbm_budget = 256 * MiB;
    backend_t be;
    char err[512] = "";
    int rc = backend_cuda_init(&be, &cfg, err, sizeof err);
    ck_assert_msg(rc == 0, "backend_cuda_init: %s", err);
    ck_assert_uint_eq(be.budget, 256 * MiB);
    const uint64_t used0 = be.used; // the cuBLASLt workspace and the kernel scratch
    ck_assert_msg(used0 >= CUDA_LT_WORKSPACE_BYTES && used0 <= be.budget, "init used %llu of %llu",
                  (unsigned long long)used0, (unsigned long long)be.budget);
    // fill the arena with odd-sized pieces: contiguous, inside one budget-sized range, then
    // the next one fails with backend_alloc's message and changes nothing
    const size_t piece = 3 * MiB + 1, sz = 3 * MiB + 4096;
    char *first = NULL, *prev = NULL;
    int count = 0;
    for (;;) {
        void *p = NULL;
        uint64_t used = be.used;
        rc = backend_alloc(&be, piece, "probe", &p, err, sizeof err);
        if (rc != 0) {
            ck_assert_int_eq(rc, -EDQUOT);
            ck_assert_uint_eq(be.used, used);
            break;
        }
        ck_assert_uint_eq(((uintptr_t)p) % 4096, 0);
        if (!first) first = p;
        else ck_assert_ptr_eq(p, prev + sz);
        prev = p;
        count++;
        backend_memset(&be, p, 0x5A, piece); // touch it
    }
    backend_sync(&be);
    ck_assert_msg(strstr(err, "probe: needs 3.0 MiB on the device, --hbm-budget 256.0 MiB with ") &&
                      strstr(err, "(raise --hbm-budget)"), "message: %s", err);
    ck_assert_int_eq(count, (int)((256 * MiB - used0) / sz));
    ck_assert_msg(be.used <= be.budget && be.peak <= be.budget && be.budget - be.used < sz, "used %llu peak %llu budget %llu",
                  (unsigned long long)be.used, (unsigned long long)be.peak, (unsigned long long)be.budget);
    ck_assert_msg((uint64_t)(prev + sz - first) <= be.budget - used0, "pieces span more than the arena");
    // device memory in use: the arena (allocated once, at init) plus the runtime's own
    const size_t free1 = mem_free();
    ck_assert_msg(free0 - free1 >= be.budget, "the arena is not allocated up front: %zu bytes in use", free0 - free1);
    ck_assert_msg(free0 - free1 <= be.budget + RUNTIME_SLACK, "device memory in use %zu > budget %llu + %llu", free0 - free1,
                  (unsigned long long)be.budget, (unsigned long long)RUNTIME_SLACK);
    backend_free(&be);
    backend_free(&be); // twice: NULL-safe
    const size_t free2 = mem_free();
    ck_assert_msg(free2 + RUNTIME_SLACK >= free0, "after backend_free %zu bytes free, %zu before init", free2, free0);
}
END_TEST

START_TEST(test_memory_no_growth) {
    // Every op once (both matmul modes, the four attention paths, a sumsq round): device memory
    // grows by no more than the arena plus the runtime's lazily loaded kernels.
    ck_assert_int_eq(cudaFree(NULL), cudaSuccess);
    const size_t free0 = mem_free();
    config_t cfg = test_cfg();
    cfg.hbm_budget = 512 * MiB;
    char err[512] = "";
    int rc = backend_cuda_init(&G, &cfg, err, sizeof err);
    ck_assert_msg(rc == 0, "backend_cuda_init: %s", err);
    G_up = 1;
    const size_t free_init = mem_free();
    const int B = 2, T = 64, NH = 4, NKV = 2, HS = 64, C = NH * HS, F = 3 * C, V = 1000, N = B * T;
    float *x = dalloc((size_t)N * F * 4), *y = dalloc((size_t)N * F * 4), *z = dalloc((size_t)N * F * 4);
    float *w = dalloc((size_t)V * C * 4), *dw = dalloc((size_t)V * C * 4), *big = dalloc((size_t)N * V * 4);
    float *lse = dalloc((size_t)B * NH * T * 4), *rs = dalloc((size_t)N * 4), *ls = dalloc((size_t)N * 4);
    float *st = dalloc((size_t)3 * N * 4);
    int *tok = dalloc((size_t)N * sizeof(int));
    uint16_t *p16 = dalloc((size_t)V * C * 2);
    const adamw_params_t hp = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .wd = 0.1f, .grad_scale = 1, .bc1 = 0.1f, .bc2 = 0.05f};
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cuda_kernels_set_fp32_matmul(fp32);
        G.ops->matmul_forward(big, x, w, N, C, V, 0);
        G.ops->matmul_backward_input(x, big, w, N, C, V, 0, 0);
        G.ops->matmul_backward_weight(dw, big, x, N, C, V);
        G.ops->matmul_forward(y, x, w, N, C, F, 0);
    }
    for (int path = 0; path < ATTV_COUNT; path++) {
        cuda_kernels_set_test_limits(0, 0, 0, ATTV_PATH[path]);
        G.ops->attention_forward(y, lse, x, z, z, B, T, NH, NKV, HS, 0);
        G.ops->attention_backward(x, z, w, y, x, z, z, y, lse, B, T, NH, NKV, HS, 0);
    }
    G.ops->rmsnorm_forward(y, rs, x, w, N, C, 1e-5f, 0);
    G.ops->rmsnorm_backward(x, dw, y, x, w, rs, N, C, 0);
    G.ops->rope_forward(x, w, w, B, T, NH, HS, 0);
    G.ops->rope_backward(x, w, w, B, T, NH, HS, 0);
    G.ops->swiglu_forward(x, y, z, (size_t)N * C, 0);
    G.ops->swiglu_backward(x, y, z, x, y, (size_t)N * C, 0);
    G.ops->embedding_forward(x, tok, w, N, C, 0, V);
    G.ops->embedding_backward(dw, x, tok, N, C, 0, V);
    G.ops->crossentropy_fold(st, big, tok, N, V, 0);
    G.ops->crossentropy_loss(ls, st, N);
    G.ops->crossentropy_backward(big, big, st, tok, N, V, 0, 1.0f / N);
    G.ops->bf16_round_n(x, (size_t)N * C);
    G.ops->bf16_to_f32_n(y, p16, (size_t)N * C);
    G.ops->add_inplace(x, y, (size_t)N * C, 0);
    G.ops->adamw_update(w, dw, z, p16, y, x, (size_t)N * C, &hp);
    (void)G.ops->sumsq(x, (size_t)N * C);
    backend_sync(&G);
    const size_t free1 = mem_free();
    ck_assert_msg(free_init >= free1 && free_init - free1 <= RUNTIME_SLACK,
                  "the ops took %zd bytes of device memory beyond the arena", (ssize_t)(free_init - free1));
    ck_assert_msg(free0 - free1 <= G.budget + RUNTIME_SLACK, "device memory in use %zu > budget %llu + %llu",
                  free0 - free1, (unsigned long long)G.budget, (unsigned long long)RUNTIME_SLACK);
    gpu_down();
}
END_TEST

START_TEST(test_budget_default_and_limits) {
    ck_assert_int_eq(cudaFree(NULL), cudaSuccess);
    size_t free0 = 0, total = 0;
    ck_assert_int_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
    config_t cfg = test_cfg();
    backend_t be;
    char err[512] = "";
    // larger than the device: refused with a line naming the budget and the free memory
    cfg.hbm_budget = (uint64_t)total + GiB;
    int rc = backend_cuda_init(&be, &cfg, err, sizeof err);
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_msg(strstr(err, "--hbm-budget") && strstr(err, "free of"), "message: %s", err);
    // too small for the kernels' own memory: backend_alloc's message for the workspace
    cfg.hbm_budget = 16 * MiB;
    rc = backend_cuda_init(&be, &cfg, err, sizeof err);
    ck_assert_int_eq(rc, -EDQUOT);
    ck_assert_msg(strstr(err, "cuBLASLt workspace: needs 32.0 MiB on the device, --hbm-budget 16.0 MiB"), "message: %s", err);
    // unset: free memory minus max(1 GiB, 5%), measured after the backend's own setup
    cfg.hbm_budget = 0;
    rc = backend_cuda_init(&be, &cfg, err, sizeof err);
    ck_assert_msg(rc == 0, "backend_cuda_init (default budget): %s", err);
    const uint64_t reserve = total / 20 > GiB ? total / 20 : GiB;
    ck_assert_msg(be.budget <= free0 - reserve && be.budget + reserve + 512 * MiB >= free0,
                  "default budget %llu: free %zu, reserve %llu", (unsigned long long)be.budget, free0,
                  (unsigned long long)reserve);
    backend_free(&be);
}
END_TEST

// ---------------------------------------------------------------- suite
static TCase *tcase(Suite *s, const char *name, int fixture) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 300);
    if (fixture) tcase_add_checked_fixture(tc, gpu_up, gpu_down);
    suite_add_tcase(s, tc);
    return tc;
}

static Suite *cuda_suite(void) {
    Suite *s = suite_create("cuda_kernels");
    TCase *tc = tcase(s, "backend", 1);
    tcase_add_test(tc, test_op_table);
    tcase_add_test(tc, test_copies);
    tcase_add_test(tc, test_copy_order);
    tc = tcase(s, "elementwise", 1);
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_add_inplace);
    tcase_add_test(tc, test_add_inplace16);
    tcase_add_loop_test(tc, test_sumsq, 0, NELEMS(SUMSQ_CASES));
    tc = tcase(s, "matmul", 1);
    tcase_add_loop_test(tc, test_matmul, 0, NELEMS(MM_SHAPES) * MMV_COUNT);
    tcase_add_loop_test(tc, test_matmul_w16, 0, NELEMS(MM_SHAPES) * MMV_COUNT);
    tcase_add_test(tc, test_matmul_degenerate);
    tcase_add_loop_test(tc, test_matmul_x, 0, NELEMS(MM_SHAPES) * MMV_COUNT);
    tc = tcase(s, "rmsnorm", 1);
    tcase_add_loop_test(tc, test_rmsnorm, 0, NELEMS(RMS_SHAPES));
    tcase_add_loop_test(tc, test_rmsnorm16, 0, NELEMS(RMS_SHAPES));
    tcase_add_loop_test(tc, test_residual_rmsnorm16, 0, NELEMS(RMS_SHAPES));
    tcase_add_loop_test(tc, test_rmsnorm_backward16, 0, NELEMS(RMS_SHAPES));
    tc = tcase(s, "rope", 1);
    tcase_add_loop_test(tc, test_rope, 0, NELEMS(ROPE_SHAPES));
    tcase_add_loop_test(tc, test_rope16, 0, NELEMS(ROPE_SHAPES));
    tc = tcase(s, "attention", 1);
    tcase_add_loop_test(tc, test_attention, 0, NELEMS(ATT_SHAPES) * ATTV_COUNT);
    tcase_add_loop_test(tc, test_attention16, 0, NELEMS(ATT_SHAPES));
    tc = tcase(s, "swiglu", 1);
    tcase_add_loop_test(tc, test_swiglu, 0, NELEMS(SWIGLU_N));
    tcase_add_test(tc, test_swiglu_extremes);
    tcase_add_loop_test(tc, test_swiglu16, 0, NELEMS(SWIGLU_N));
    tcase_add_test(tc, test_round_flags);
    tc = tcase(s, "embedding", 1);
    tcase_add_loop_test(tc, test_embedding, 0, NELEMS(EMB_SHAPES));
    tc = tcase(s, "crossentropy", 1);
    tcase_add_loop_test(tc, test_crossentropy, 0, NELEMS(CE_SHAPES));
    tc = tcase(s, "adamw", 1);
    tcase_add_loop_test(tc, test_adamw, 0, NELEMS(ADAM_CASES));
    tc = tcase(s, "memory", 0);
    tcase_add_test(tc, test_arena_budget);
    tcase_add_test(tc, test_memory_no_growth);
    tcase_add_test(tc, test_budget_default_and_limits);
    return s;
}

int main(void) {
    char why[256] = "";
    int ngpu = probe_in_child(why, sizeof why);
    if (ngpu <= 0) {
        fprintf(stderr, "test_cuda_kernels: no usable GPU (%s): skipped\n", why);
        return 77;
    }
    SRunner *sr = srunner_create(cuda_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
#endif // TT_HAVE_CUDA
