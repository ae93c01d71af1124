// bench_gemm.c — `tiertrain bench gemm`: GFLOP/s of the three matmul kernels (forward,
// backward-input, backward-weight) on the transformer's real shapes, each against a plain
// cblas_sgemm of the identical shape and transposes in the same run (the peer), threaded by
// OpenBLAS itself. The operands are BF16 values, as a bf16 run's are. The kernels are ours
// where the CPU has FMA (kernels/cpu/gemm.c: one FMA chain an element, bits fixed by the
// operands; on a CPU with AMX-BF16, its tiles: gemm_amx.c), else fixed output tiles as
// single-threaded sgemm calls under OpenMP; the ratio says what either costs against
// OpenBLAS's own threading.
// Both get the same number of threads: --threads, else OpenMP's default.
// Per shape and op: one untimed warm-up of each, which also checks that kernel and peer
// agree (max |difference| relative to max |peer|: ~1e-7 from the different summation
// splits; a wrong transpose would be O(1)), then REPS timed runs alternating kernel and
// peer, median of each. Prints a table, then as the last line one JSON object
// {"bench":"gemm", ...}. Does not touch the model, tiers or files. Called by main for
// `tiertrain bench gemm`. When the run resolves to the CUDA backend (a usable GPU in a build
// with CUDA: backend_resolve), it times the GPU instead: bench_gemm_cuda (bench/bench_gemm_cuda.c).
#include "bench.h"
#include "backend.h" // uses: backend_resolve, backend_blas_text
#include "util.h"      // uses: fail_with
#include "kernels.h"
#include <cblas.h> // uses: cblas_sgemm, openblas_set_num_threads
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> // uses: usleep

#define REPS 7
#define BLAS_SPIN_US 300000 // longer than OpenBLAS's threads spin after a call (2^28 cycles)
#define AGREE_MAX 1e-5 // kernel vs peer: max |diff| / max |peer| above this is a wrong result

typedef struct {
    const char *name;
    int N, IC, OC;
} gemm_shape_t;

// N = B·T rows. 125m attention/MLP and the `small` preset's MLP at N = 1024; the LM head
// (768 → 32000) at a smaller N so it fits the time budget (it is still the largest GEMM).
static const gemm_shape_t SHAPES[] = {
    {"attn proj 125m", 1024, 768, 768},
    {"mlp up 125m", 1024, 768, 2048},
    {"mlp down 125m", 1024, 2048, 768},
    {"mlp up small", 1024, 384, 1024},
    {"lm head 125m", 256, 768, 32000},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

enum { OP_FWD = 0, OP_BWD_IN, OP_BWD_W, NOPS };
static const char *OP_NAME[NOPS] = {"fwd", "bwd_in", "bwd_w"};

typedef struct {
    float *inp, *w, *dout;      // inputs: (N, IC), (OC, IC), (N, OC)
    float *out_k, *out_p;       // (N, OC)  forward outputs, kernel / peer
    float *dinp_k, *dinp_p;     // (N, IC)
    float *dw_k, *dw_p;         // (OC, IC)
} gemm_bufs_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_f(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float) > 0 ? n * sizeof(float) : 64) != 0) return NULL;
    return p;
}

static void fill_rand(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) - 0.5); // U(−0.5, 0.5)
    }
    bf16_round_n(x, n); // BF16 values, as a bf16 run's operands: the kernel its products run on
}

static void bufs_free(gemm_bufs_t *b) {
    free(b->inp); free(b->w); free(b->dout);
    free(b->out_k); free(b->out_p); free(b->dinp_k); free(b->dinp_p);
    free(b->dw_k); free(b->dw_p);
    memset(b, 0, sizeof *b);
}

static int bufs_init(gemm_bufs_t *b, const gemm_shape_t *s) {
    size_t ni = (size_t)s->N * s->IC, nw = (size_t)s->OC * s->IC, no = (size_t)s->N * s->OC;
    memset(b, 0, sizeof *b);
    b->inp = alloc_f(ni); b->w = alloc_f(nw); b->dout = alloc_f(no);
    b->out_k = alloc_f(no); b->out_p = alloc_f(no);
    b->dinp_k = alloc_f(ni); b->dinp_p = alloc_f(ni);
    b->dw_k = alloc_f(nw); b->dw_p = alloc_f(nw);
    if (!b->inp || !b->w || !b->dout || !b->out_k || !b->out_p || !b->dinp_k || !b->dinp_p ||
        !b->dw_k || !b->dw_p) {
        fprintf(stderr, "tiertrain: bench gemm: cannot allocate %.1f MiB for shape %s (free some memory and rerun)\n",
                (double)(2 * ni + 3 * nw + 3 * no) * 4.0 / 1048576.0, s->name);
        bufs_free(b);
        return -1;
    }
    fill_rand(b->inp, ni, 1);
    fill_rand(b->w, nw, 2);
    fill_rand(b->dout, no, 3);
    memset(b->dw_k, 0, nw * sizeof(float));
    memset(b->dw_p, 0, nw * sizeof(float));
    return 0;
}

// One run of op on shape s; peer = 1 runs the plain sgemm of the identical shape, with
// OpenBLAS threaded (the kernels leave it at one thread).
static void run_op(int op, int peer, const gemm_shape_t *s, gemm_bufs_t *b, int threads) {
    int N = s->N, IC = s->IC, OC = s->OC;
    if (peer) openblas_set_num_threads(threads);
    switch (op) {
    case OP_FWD:
        if (!peer) matmul_forward(b->out_k, b->inp, b->w, N, IC, OC, 0);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, b->inp, IC,
                         b->w, IC, 0.0f, b->out_p, OC);
        break;
    case OP_BWD_IN:
        if (!peer) matmul_backward_input(b->dinp_k, b->dout, b->w, N, IC, OC, 0, 0);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, b->dout, OC,
                         b->w, IC, 0.0f, b->dinp_p, IC);
        break;
    default:
        if (!peer) matmul_backward_weight(b->dw_k, b->dout, b->inp, N, IC, OC);
        else cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, b->dout, OC,
                         b->inp, IC, 1.0f, b->dw_p, IC);
        break;
    }
}

// max |kernel − peer| / max |peer| over op's output (both computed from zeroed outputs).
static double rel_diff(int op, const gemm_shape_t *s, const gemm_bufs_t *b) {
    size_t n;
    const float *k, *p;
    if (op == OP_FWD) { n = (size_t)s->N * s->OC; k = b->out_k; p = b->out_p; }
    else if (op == OP_BWD_IN) { n = (size_t)s->N * s->IC; k = b->dinp_k; p = b->dinp_p; }
    else { n = (size_t)s->OC * s->IC; k = b->dw_k; p = b->dw_p; }
    double dmax = 0, pmax = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)k[i] - p[i]);
        dmax = d > dmax || isnan(d) ? d : dmax;
        pmax = fabs(p[i]) > pmax ? fabs(p[i]) : pmax;
    }
    return pmax > 0 ? dmax / pmax : dmax;
}

int bench_gemm(const config_t *cfg) {
    // exits 2 on an impossible --device (cuda without a GPU, or in a build without CUDA)
    device_kind_t kind = DEVICE_CPU;
    char err[512];
    if (cfg && backend_resolve(cfg, &kind, NULL, err, sizeof err) != 0) fail_with(-ENODEV, "bench gemm: %s", err);
    if (kind == DEVICE_CUDA) {
#ifdef TT_HAVE_CUDA
        return bench_gemm_cuda(cfg);
#endif
    }
    int threads = cfg && cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    omp_set_num_threads(threads);
    kernels_limit_simd(cfg && cfg->cpu_gemm == CPU_GEMM_FMA ? 2 : 3); // --cpu-gemm
    double t_start = now_s();
    double gf_k[NSHAPES][NOPS], gf_p[NSHAPES][NOPS], diff[NSHAPES][NOPS];
    double flops_total = 0, time_k = 0, time_p = 0, diff_max = 0;

    char bt[192];
    printf("bench gemm: matmul kernels vs cblas_sgemm (OpenBLAS threads), %s, %d threads, median of "
           "%d\n", backend_blas_text(bt, sizeof bt), threads, REPS);
    printf("%-16s %6s %6s %6s  %-6s  %11s  %10s  %6s  %9s\n", "shape", "N", "IC", "OC", "op",
           "kernel GF/s", "sgemm GF/s", "ratio", "rel diff");
    for (int si = 0; si < NSHAPES; si++) {
        const gemm_shape_t *s = &SHAPES[si];
        gemm_bufs_t b;
        if (bufs_init(&b, s) != 0) return 1;
        double flops = 2.0 * s->N * (double)s->IC * s->OC;
        for (int op = 0; op < NOPS; op++) {
            run_op(op, 0, s, &b, threads); // warm-up; dw starts from zero in both
            run_op(op, 1, s, &b, threads);
            diff[si][op] = rel_diff(op, s, &b);
            diff_max = diff[si][op] > diff_max || isnan(diff[si][op]) ? diff[si][op] : diff_max;
            // The kernels' reps, then the peer's, each a block of a few ms. Not alternated: after a
            // threaded sgemm, OpenBLAS's own threads spin for a while (up to 2^28 cycles) before
            // they sleep, and on a machine with as many cores as threads they took half the CPU
            // from the kernel call that followed (seen: 55 against 160 GF/s at mlp up small's
            // bwd_in). So the kernels' block starts after a pause that outlasts the spin.
            double tk[REPS], tp[REPS];
            usleep(BLAS_SPIN_US);
            for (int r = 0; r < REPS; r++) {
                double t0 = now_s();
                run_op(op, 0, s, &b, threads);
                tk[r] = now_s() - t0;
            }
            for (int r = 0; r < REPS; r++) {
                double t0 = now_s();
                run_op(op, 1, s, &b, threads);
                tp[r] = now_s() - t0;
            }
            double mk = bench_median(tk, REPS), mp = bench_median(tp, REPS);
            gf_k[si][op] = flops / mk * 1e-9;
            gf_p[si][op] = flops / mp * 1e-9;
            flops_total += flops;
            time_k += mk;
            time_p += mp;
            printf("%-16s %6d %6d %6d  %-6s  %11.1f  %10.1f  %6.3f  %9.2e\n", s->name, s->N, s->IC, s->OC,
                   OP_NAME[op], gf_k[si][op], gf_p[si][op], gf_k[si][op] / gf_p[si][op], diff[si][op]);
        }
        bufs_free(&b);
    }
    double agg_k = flops_total / time_k * 1e-9, agg_p = flops_total / time_p * 1e-9;
    int agree = !(diff_max > AGREE_MAX) && !isnan(diff_max);
    printf("all shapes (total FLOPs / total median time): kernel %.1f GF/s, sgemm %.1f GF/s, ratio %.3f; "
           "results agree: %s (max rel diff %.2e); %.1f s\n",
           agg_k, agg_p, agg_k / agg_p, agree ? "yes" : "NO", diff_max, now_s() - t_start);
    if (!agree)
        fprintf(stderr, "tiertrain: bench gemm: kernel and sgemm results differ by %.3g (relative): a matmul kernel is wrong\n",
                diff_max);

    printf("{\"bench\":\"gemm\",\"kernel_gflops\":%.2f,\"sgemm_gflops\":%.2f,\"ratio\":%.4f,\"threads\":%d,\"reps\":%d,"
           "\"max_rel_diff\":%.3g,\"shapes\":[",
           agg_k, agg_p, agg_k / agg_p, threads, REPS, diff_max);
    for (int si = 0; si < NSHAPES; si++)
        for (int op = 0; op < NOPS; op++)
            printf("%s{\"name\":\"%s\",\"N\":%d,\"IC\":%d,\"OC\":%d,\"op\":\"%s\",\"kernel_gflops\":%.2f,"
                   "\"sgemm_gflops\":%.2f,\"ratio\":%.4f,\"rel_diff\":%.3g}",
                   si || op ? "," : "", SHAPES[si].name, SHAPES[si].N, SHAPES[si].IC, SHAPES[si].OC,
                   OP_NAME[op], gf_k[si][op], gf_p[si][op], gf_k[si][op] / gf_p[si][op], diff[si][op]);
    printf("]}\n");
    fflush(stdout);
    return agree ? 0 : 1;
}
