// bench_gemm_cuda.c — `tiertrain bench gemm` on the CUDA backend: GFLOP/s of the backend's three
// matmul ops (be->ops->matmul_forward / matmul_backward_input / matmul_backward_weight, i.e.
// kernels/cuda/matmul.cu in BF16 mode) on the `1b` preset's real GEMMs at N = B·T = 8192 rows,
// each against a bare cublasLtMatmul of the identical GEMM in the same run (the peer): the same
// m, n, k, transposes and leading dimensions as matmul.cu issues, BF16 A and B already in device
// memory, FP32 output, CUBLAS_COMPUTE_32F, its own heuristic pick (once per shape and op) with a
// CUDA_LT_WORKSPACE_BYTES workspace. The ratio is what our op costs over the library call:
// converting its FP32 inputs to BF16, its row chunks, its per-call descriptors and heuristic.
// Inputs are pseudo-random values already rounded to BF16 (as the trainer passes them), so op
// and peer multiply the same BF16 operands. Per shape and op: one untimed warm-up of each, which
// also checks that they agree (max |difference| relative to max |peer|: FP32 summation-order
// differences, around 1e-6; a wrong mapping would be O(1)) — a disagreement prints FAIL and exits 1
// without printing a speed. Then REPS timed runs alternating op and peer, each timed by
// cudaEvents on the compute stream around `iters` back-to-back calls (about 1 TFLOP, so launch
// latency does not dominate the small GEMMs), median of each. Every device buffer comes from the
// backend's arena (backend_alloc); an unset --hbm-budget becomes what the buffers and the
// backend need plus 1 GiB. Prints a table, then as the last line one JSON object
// {"bench":"gemm","device":"cuda",...} whose first "kernel_gflops" and "ratio" are the totals
// (bench/gpu_check.sh reads those). A third column times the same GEMM as one cuBLASLt call on
// the FP32 operands with CUBLAS_COMPUTE_32F_FAST_16BF (the library rounds them to BF16 inside
// its kernel, exact for BF16 values, and runs on tensor cores): what the op would cost with
// no conversion pass of its own ("-" where cuBLASLt offers no algorithm for it); it is checked
// against the peer like the op. Does not touch the model, tiers or files.
// Built only with CUDA (CMake drops this file otherwise); called by bench_gemm when the run
// resolves to the CUDA backend.
#include "bench.h"
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "cuda_kernels.h" // uses: cuda_kernels_stream, CUDA_LT_WORKSPACE_BYTES
#include "json.h"         // uses: json_fput_string
#include "kernels.h"      // uses: bf16_from_f32, bf16_to_f32
#include "model.h"        // uses: model_preset
#include "util.h"

#define REPS 7
#define AGREE_MAX 1e-2      // op vs peer: max |diff| / max |peer| above this is a wrong mapping
#define TARGET_FLOP 1e12    // FLOPs per timed run: iters = ceil(TARGET_FLOP / flops of one call)
#define MAX_ITERS 64
#define BATCH 4             // sequences: N = BATCH · T rows (8192 for 1b)
#define MAX_SHAPES 8

typedef struct {
    char name[24];
    int N, IC, OC;
    int iters; // back-to-back calls per timed run
} gemm_shape_t;

enum { OP_FWD = 0, OP_BWD_IN, OP_BWD_W, NOPS };
static const char *OP_NAME[NOPS] = {"fwd", "bwd_in", "bwd_w"};

// Device buffers, sized for the largest shape; each shape uses the leading part (the inputs
// are i.i.d., so any prefix is a random matrix of the smaller shape).
typedef struct {
    float *inp, *w, *dout;          // (N, IC), (OC, IC), (N, OC): FP32 holding BF16 values (the op's inputs)
    uint16_t *inp16, *w16, *dout16; // the same values as BF16 (the peer's inputs)
    float *out_k, *out_p;           // (N, OC)  forward outputs, op / peer
    float *dinp_k, *dinp_p;         // (N, IC)
    float *dw_k, *dw_p;             // (OC, IC)
    void *lt_ws;                    // the peer's cuBLASLt workspace (CUDA_LT_WORKSPACE_BYTES)
} gemm_dev_t;

// One GEMM as a bare cuBLASLt call: descriptors and algorithm fixed at init, run many times.
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    const void *A, *B;
    float *C;
    float beta;
} peer_t;

// ---------------------------------------------------------------- errors
// A failing CUDA or cuBLASLt call here is a device failure: one line naming it, exit 1.
static void cuda_rt_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess)
        runtime_error("bench gemm: CUDA error at %s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}
#define cudaCheck(call) cuda_rt_check((call), #call, __FILE__, __LINE__)

static void cublas_check(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        runtime_error("bench gemm: cuBLASLt error at %s:%d: %s: %s (%d)", file, line, what, cublasLtGetStatusString(s),
                      (int)s);
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------- inputs
// x[i] = U(−0.5, 0.5) from a hash of (seed, i), rounded to BF16: h32 gets the value as FP32
// (exactly representable), h16 its BF16 bits. Elementwise, so the values do not depend on the
// thread count.
static void fill_bf16(float *h32, uint16_t *h16, size_t n, uint64_t seed) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = (float)((double)(mix64(seed, i) >> 40) / (double)(1ull << 24) - 0.5);
        h16[i] = bf16_from_f32(x);
        h32[i] = bf16_to_f32(h16[i]);
    }
}

// Generates one input tensor of n elements on the host and uploads it twice (FP32, BF16).
static void upload_input(backend_t *be, float *d32, uint16_t *d16, float *h32, uint16_t *h16, size_t n, uint64_t seed) {
    fill_bf16(h32, h16, n, seed);
    backend_copy_h2d(be, d32, h32, n * sizeof(float));
    backend_copy_h2d(be, d16, h16, n * sizeof(uint16_t));
}

// ---------------------------------------------------------------- the peer
static void peer_free(peer_t *p);

// Column-major C (m, n) = op(A) (m, k) · op(B) (k, n) + beta·C with A, B BF16 (fast: FP32,
// computed as CUBLAS_COMPUTE_32F_FAST_16BF) and C FP32, laid out exactly as matmul.cu's
// lt_gemm lays out its operands. Picks the heuristic's first algorithm for a workspace of
// ws_bytes; none offered fails the run for the peer, and returns -1 for the fast variant.
static int peer_init(peer_t *p, cublasLtHandle_t lt, int transa, int transb, int m, int n, int k, const void *A,
                     int lda, const void *B, int ldb, float beta, float *C, int ldc, size_t ws_bytes, int fast,
                     const char *shape, const char *op) {
    memset(p, 0, sizeof *p);
    p->A = A;
    p->B = B;
    p->C = C;
    p->beta = beta;
    const cudaDataType_t ab = fast ? CUDA_R_32F : CUDA_R_16BF;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, fast ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, ab, transa ? k : m, transa ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, ab, transb ? n : k, transb ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, m, n, ldc));
    // Every pointer is a 4 KiB-aligned arena allocation: cuBLASLt's default assumption of
    // 256-byte alignment holds, so no alignment preferences are needed.
    cublasLtMatmulPreference_t pref = NULL;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = ws_bytes;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof heur);
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &heur, &found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (fast && (st != CUBLAS_STATUS_SUCCESS || found < 1 || heur.state != CUBLAS_STATUS_SUCCESS)) {
        peer_free(p); // any refusal: the variant is left out, the run goes on
        return -1;
    }
    if (st != CUBLAS_STATUS_SUCCESS || found < 1 || heur.state != CUBLAS_STATUS_SUCCESS)
        runtime_error("bench gemm: cublasLtMatmulAlgoGetHeuristic offers no algorithm for the %s %s GEMM "
                      "(m=%d n=%d k=%d, trans %c%c, BF16 x BF16 -> FP32): %s (%d)",
                      shape, op, m, n, k, transa ? 'T' : 'N', transb ? 'T' : 'N',
                      cublasLtGetStatusString(st != CUBLAS_STATUS_SUCCESS ? st : heur.state),
                      (int)(st != CUBLAS_STATUS_SUCCESS ? st : heur.state));
    p->algo = heur.algo;
    return 0;
}

static void peer_run(const peer_t *p, cublasLtHandle_t lt, void *ws, size_t ws_bytes, cudaStream_t stream) {
    const float alpha = 1.0f; // host scalars (the default pointer mode), read during the call
    cublasCheck(cublasLtMatmul(lt, p->desc, &alpha, p->A, p->la, p->B, p->lb, &p->beta, p->C, p->lc, p->C, p->lc,
                               &p->algo, ws, ws_bytes, stream));
}

static void peer_free(peer_t *p) {
    if (p->lc) cublasCheck(cublasLtMatrixLayoutDestroy(p->lc));
    if (p->lb) cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    if (p->la) cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    if (p->desc) cublasCheck(cublasLtMatmulDescDestroy(p->desc));
    memset(p, 0, sizeof *p);
}

// The peer of op on shape s: matmul.cu's BF16 GEMM for the whole problem (the op cuts it into
// row chunks; the product is the same). Row-major (R, C) is column-major (C, R):
//   fwd    gemm(T, N, m=OC, n=N,  k=IC, A=w    lda=IC, B=inp  ldb=IC, beta 0, C=out  ldc=OC)
//   bwd_in gemm(N, N, m=IC, n=N,  k=OC, A=w    lda=IC, B=dout ldb=OC, beta 0, C=dinp ldc=IC)
//   bwd_w  gemm(N, T, m=IC, n=OC, k=N,  A=inp  lda=IC, B=dout ldb=OC, beta 1, C=dw   ldc=IC)
// (bwd_in with accumulate = 0, as timed here; dw always accumulates.)
// fast: the FAST_16BF variant on the FP32 operands, into the op's output buffer.
static int peer_for(peer_t *p, cublasLtHandle_t lt, int op, const gemm_shape_t *s, const gemm_dev_t *d, int fast) {
    const int N = s->N, IC = s->IC, OC = s->OC;
    const void *w = fast ? (const void *)d->w : d->w16, *inp = fast ? (const void *)d->inp : d->inp16;
    const void *dout = fast ? (const void *)d->dout : d->dout16;
    if (op == OP_FWD)
        return peer_init(p, lt, 1, 0, OC, N, IC, w, IC, inp, IC, 0.0f, fast ? d->out_k : d->out_p, OC,
                         CUDA_LT_WORKSPACE_BYTES, fast, s->name, OP_NAME[op]);
    if (op == OP_BWD_IN)
        return peer_init(p, lt, 0, 0, IC, N, OC, w, IC, dout, OC, 0.0f, fast ? d->dinp_k : d->dinp_p, IC,
                         CUDA_LT_WORKSPACE_BYTES, fast, s->name, OP_NAME[op]);
    return peer_init(p, lt, 0, 1, IC, OC, N, inp, IC, dout, OC, 1.0f, fast ? d->dw_k : d->dw_p, IC,
                     CUDA_LT_WORKSPACE_BYTES, fast, s->name, OP_NAME[op]);
}

// One call of the backend's op on shape s (queued on the compute stream).
static void op_run(const backend_t *be, int op, const gemm_shape_t *s, const gemm_dev_t *d) {
    if (op == OP_FWD) be->ops->matmul_forward(d->out_k, d->inp, d->w, s->N, s->IC, s->OC, 0);
    else if (op == OP_BWD_IN) be->ops->matmul_backward_input(d->dinp_k, d->dout, d->w, s->N, s->IC, s->OC, 0, 0);
    else be->ops->matmul_backward_weight(d->dw_k, d->dout, d->inp, s->N, s->IC, s->OC);
}

// ---------------------------------------------------------------- checks and statistics
// max |k − p| / max |p| over n elements; NaN anywhere in the difference gives NaN.
static double rel_diff(const float *k, const float *p, size_t n) {
    double dmax = 0, pmax = 0;
    int nan = 0;
#pragma omp parallel for schedule(static) reduction(max : dmax, pmax) reduction(| : nan)
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)k[i] - (double)p[i]), a = fabs((double)p[i]);
        if (isnan(d)) nan = 1;
        else if (d > dmax) dmax = d;
        if (a > pmax) pmax = a;
    }
    if (nan) return NAN;
    return pmax > 0 ? dmax / pmax : dmax;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// ---------------------------------------------------------------- setup
// The 1b preset's GEMMs as step.c issues them (q, k, v, o separately; gate and up share a
// shape), at N = BATCH · T rows.
static int shapes_1b(gemm_shape_t *sh, int max) {
    config_t m;
    memset(&m, 0, sizeof m);
    if (model_preset("1b", &m) != 0) runtime_error("bench gemm: the 1b preset is missing (model.c)");
    const int N = BATCH * m.T, C = m.C, KVD = m.NKV * (m.C / m.NH), F = m.F, V = m.V;
    const struct { const char *name; int IC, OC; } g[] = {
        {"attn q,o 1b", C, C}, {"attn k,v 1b", C, KVD}, {"mlp gate,up 1b", C, F}, {"mlp down 1b", F, C},
        {"lm head 1b", C, V},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof g / sizeof g[0] && n < max; i++, n++) {
        snprintf(sh[n].name, sizeof sh[n].name, "%s", g[i].name);
        sh[n].N = N;
        sh[n].IC = g[i].IC;
        sh[n].OC = g[i].OC;
        const double iters = ceil(TARGET_FLOP / (2.0 * N * (double)g[i].IC * g[i].OC));
        sh[n].iters = iters > MAX_ITERS ? MAX_ITERS : iters < 1 ? 1 : (int)iters;
    }
    return n;
}

// One buffer from the arena; an allocation over the budget is the user's to fix (exit 2).
static void *dev_get(backend_t *be, size_t bytes, const char *what) {
    char err[512];
    void *p = NULL;
    if (backend_alloc(be, bytes, what, &p, err, sizeof err) != 0) usage_error("bench gemm: %s", err);
    return p;
}

static void dev_alloc(backend_t *be, gemm_dev_t *d, size_t ni, size_t nw, size_t no) {
    d->inp = dev_get(be, ni * sizeof(float), "bench gemm inp");
    d->w = dev_get(be, nw * sizeof(float), "bench gemm w");
    d->dout = dev_get(be, no * sizeof(float), "bench gemm dout");
    d->inp16 = dev_get(be, ni * sizeof(uint16_t), "bench gemm inp (BF16)");
    d->w16 = dev_get(be, nw * sizeof(uint16_t), "bench gemm w (BF16)");
    d->dout16 = dev_get(be, no * sizeof(uint16_t), "bench gemm dout (BF16)");
    d->out_k = dev_get(be, no * sizeof(float), "bench gemm out");
    d->out_p = dev_get(be, no * sizeof(float), "bench gemm out (peer)");
    d->dinp_k = dev_get(be, ni * sizeof(float), "bench gemm dinp");
    d->dinp_p = dev_get(be, ni * sizeof(float), "bench gemm dinp (peer)");
    d->dw_k = dev_get(be, nw * sizeof(float), "bench gemm dw");
    d->dw_p = dev_get(be, nw * sizeof(float), "bench gemm dw (peer)");
    d->lt_ws = dev_get(be, CUDA_LT_WORKSPACE_BYTES, "bench gemm cuBLASLt workspace (peer)");
}

// Bytes dev_alloc takes from the arena (each allocation rounded to 4 KiB).
static uint64_t dev_bytes(size_t ni, size_t nw, size_t no) {
    uint64_t b = 0;
    const uint64_t sz[] = {ni * 4, nw * 4, no * 4, ni * 2, nw * 2, no * 2, no * 4, no * 4,
                           ni * 4, ni * 4, nw * 4, nw * 4, CUDA_LT_WORKSPACE_BYTES};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) b += ALIGN_UP(sz[i], (uint64_t)4096);
    return b;
}

// ---------------------------------------------------------------- the benchmark
int bench_gemm_cuda(const config_t *cfg) {
    double t_start = now_ms();
    gemm_shape_t SHAPES[MAX_SHAPES];
    const int NSHAPES = shapes_1b(SHAPES, MAX_SHAPES);
    size_t ni = 0, nw = 0, no = 0; // largest (N, IC), (OC, IC), (N, OC) element counts
    for (int si = 0; si < NSHAPES; si++) {
        const gemm_shape_t *s = &SHAPES[si];
        size_t a = (size_t)s->N * s->IC, b = (size_t)s->OC * s->IC, c = (size_t)s->N * s->OC;
        ni = a > ni ? a : ni;
        nw = b > nw ? b : nw;
        no = c > no ? c : no;
    }

    // The backend for the 1b shapes (its kernel scratch is sized by them), BF16 matmuls, and
    // a budget of what we allocate plus 1 GiB unless --hbm-budget says otherwise.
    config_t c = *cfg;
    if (model_preset("1b", &c) != 0) runtime_error("bench gemm: the 1b preset is missing (model.c)");
    c.B = BATCH;
    c.precision = PREC_BF16;
    if (c.hbm_budget == 0) c.hbm_budget = dev_bytes(ni, nw, no) + backend_cuda_overhead(&c) + ((uint64_t)1 << 30);
    backend_t be;
    char err[768];
    int rc = backend_cuda_init(&be, &c, err, sizeof err);
    if (rc == -ENOMEM || rc == -ENODEV) usage_error("bench gemm: CUDA backend: %s", err); // the budget, or no GPU after all
    if (rc != 0) runtime_error("bench gemm: CUDA backend: %s", err);
    gemm_dev_t d;
    memset(&d, 0, sizeof d);
    dev_alloc(&be, &d, ni, nw, no);
    cudaStream_t stream = (cudaStream_t)cuda_kernels_stream();
    cublasLtHandle_t lt = NULL;
    cublasCheck(cublasLtCreate(&lt));
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) cudaCheck(cudaEventCreate(&ev[i]));
    int dev = 0;
    struct cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));

    // Inputs: generated on the host once, at the largest sizes. The host buffers then hold the
    // outputs read back for the agreement checks.
    size_t nmax = ni > nw ? ni : nw;
    nmax = no > nmax ? no : nmax;
    float *h_k = mallocCheck(nmax * sizeof(float)), *h_p = mallocCheck(nmax * sizeof(float));
    uint16_t *h16 = mallocCheck(nmax * sizeof(uint16_t));
    upload_input(&be, d.inp, d.inp16, h_k, h16, ni, 1);
    upload_input(&be, d.w, d.w16, h_k, h16, nw, 2);
    upload_input(&be, d.dout, d.dout16, h_k, h16, no, 3);
    free(h16);

    int failed = 0;
    double gf_k[MAX_SHAPES][NOPS], gf_p[MAX_SHAPES][NOPS], gf_f[MAX_SHAPES][NOPS], diff[MAX_SHAPES][NOPS];
    double flops_total = 0, time_k = 0, time_p = 0, time_f = 0, diff_max = 0;
    int fast_all = 1; // every GEMM had a FAST_16BF algorithm that agreed with the peer
    char a[32];
    printf("bench gemm: CUDA backend matmul ops (BF16 mode) vs bare cublasLtMatmul (BF16 x BF16 -> FP32), %s, "
           "arena %s, median of %d\n", prop.name, format_bytes(a, sizeof a, be.budget), REPS);
    printf("%-16s %6s %6s %6s  %-6s  %5s  %11s  %11s  %6s  %9s  %12s\n", "shape", "N", "IC", "OC", "op", "iters",
           "kernel GF/s", "cuBLAS GF/s", "ratio", "rel diff", "FAST_16BF GF/s");
    for (int si = 0; si < NSHAPES && !failed; si++) {
        const gemm_shape_t *s = &SHAPES[si];
        const double flops = 2.0 * s->N * (double)s->IC * s->OC;
        for (int op = 0; op < NOPS && !failed; op++) {
            peer_t peer;
            peer_for(&peer, lt, op, s, &d, 0);
            // warm-up and agreement: dw starts from zero in both
            size_t n = op == OP_FWD ? (size_t)s->N * s->OC : op == OP_BWD_IN ? (size_t)s->N * s->IC
                                                                                 : (size_t)s->OC * s->IC;
            const float *out_k = op == OP_FWD ? d.out_k : op == OP_BWD_IN ? d.dinp_k : d.dw_k;
            const float *out_p = op == OP_FWD ? d.out_p : op == OP_BWD_IN ? d.dinp_p : d.dw_p;
            if (op == OP_BWD_W) {
                backend_memset(&be, d.dw_k, 0, n * sizeof(float));
                backend_memset(&be, d.dw_p, 0, n * sizeof(float));
            }
            op_run(&be, op, s, &d);
            peer_run(&peer, lt, d.lt_ws, CUDA_LT_WORKSPACE_BYTES, stream);
            // d2h copies wait for every op queued on the compute stream, the peer's included
            backend_copy_d2h(&be, h_k, out_k, n * sizeof(float));
            backend_copy_d2h(&be, h_p, out_p, n * sizeof(float));
            diff[si][op] = rel_diff(h_k, h_p, n);
            diff_max = diff[si][op] > diff_max || isnan(diff[si][op]) ? diff[si][op] : diff_max;
            if (!(diff[si][op] <= AGREE_MAX)) { // NaN included
                printf("%-16s %6d %6d %6d  %-6s  %5s  %11s  %11s  %6s  %9.2e  FAIL\n", s->name, s->N, s->IC, s->OC,
                       OP_NAME[op], "-", "-", "-", "-", diff[si][op]);
                fprintf(stderr, "tiertrain: bench gemm: %s %s: the backend op and cublasLtMatmul differ by %.3g "
                        "(relative, limit %.0e): the op or the peer's operand mapping is wrong; no speed reported\n",
                        s->name, OP_NAME[op], diff[si][op], AGREE_MAX);
                printf("{\"bench\":\"gemm\",\"device\":\"cuda\",\"status\":\"fail\",\"name\":\"%s\",\"op\":\"%s\","
                       "\"rel_diff\":%.3g}\n", s->name, OP_NAME[op], diff[si][op]);
                fflush(stdout);
                peer_free(&peer);
                failed = 1;
                break;
            }
            // the FAST_16BF variant: into the op's buffer, checked against the peer's result
            peer_t fpeer;
            int hf = peer_for(&fpeer, lt, op, s, &d, 1) == 0;
            double fdiff = 0;
            if (hf) {
                if (op == OP_BWD_W) backend_memset(&be, d.dw_k, 0, n * sizeof(float));
                peer_run(&fpeer, lt, d.lt_ws, CUDA_LT_WORKSPACE_BYTES, stream);
                backend_copy_d2h(&be, h_k, out_k, n * sizeof(float));
                fdiff = rel_diff(h_k, h_p, n);
                if (!(fdiff <= AGREE_MAX)) {
                    fprintf(stderr, "tiertrain: bench gemm: %s %s: the FAST_16BF call differs from the peer by %.3g; "
                            "its speed is left out\n", s->name, OP_NAME[op], fdiff);
                    peer_free(&fpeer);
                    hf = 0;
                }
            }
            fast_all &= hf;
            double tk[REPS], tp[REPS], tf[REPS];
            // Alternate so drift hits both alike. Each run syncs at its end, so the op's calls
            // start on an idle stream (its first launch latency counts against it, over iters
            // calls) and the peer's queue behind them. Where the op's host-side set-up per call
            // (descriptors, heuristic) outlasts its GPU work, the op's time is that host time:
            // a real cost of the op, which the trainer pays too.
            for (int r = 0; r < REPS; r++) {
                cudaCheck(cudaEventRecord(ev[0], stream));
                for (int it = 0; it < s->iters; it++) op_run(&be, op, s, &d);
                cudaCheck(cudaEventRecord(ev[1], stream));
                for (int it = 0; it < s->iters; it++) peer_run(&peer, lt, d.lt_ws, CUDA_LT_WORKSPACE_BYTES, stream);
                cudaCheck(cudaEventRecord(ev[2], stream));
                if (hf)
                    for (int it = 0; it < s->iters; it++) peer_run(&fpeer, lt, d.lt_ws, CUDA_LT_WORKSPACE_BYTES, stream);
                cudaCheck(cudaEventRecord(ev[3], stream));
                cudaCheck(cudaEventSynchronize(ev[3]));
                float mk = 0, mp = 0, mf = 0;
                cudaCheck(cudaEventElapsedTime(&mk, ev[0], ev[1]));
                cudaCheck(cudaEventElapsedTime(&mp, ev[1], ev[2]));
                cudaCheck(cudaEventElapsedTime(&mf, ev[2], ev[3]));
                tk[r] = 1e-3 * mk / s->iters; // seconds per call
                tp[r] = 1e-3 * mp / s->iters;
                tf[r] = 1e-3 * mf / s->iters;
            }
            peer_free(&peer);
            if (hf) peer_free(&fpeer);
            double mk = median(tk, REPS), mp = median(tp, REPS), mf = hf ? median(tf, REPS) : 0;
            gf_k[si][op] = flops / mk * 1e-9;
            gf_p[si][op] = flops / mp * 1e-9;
            gf_f[si][op] = hf ? flops / mf * 1e-9 : 0;
            flops_total += flops;
            time_k += mk;
            time_p += mp;
            time_f += mf;
            char fcol[24] = "-";
            if (hf) snprintf(fcol, sizeof fcol, "%.1f", gf_f[si][op]);
            printf("%-16s %6d %6d %6d  %-6s  %5d  %11.1f  %11.1f  %6.3f  %9.2e  %12s\n", s->name, s->N, s->IC, s->OC,
                   OP_NAME[op], s->iters, gf_k[si][op], gf_p[si][op], gf_k[si][op] / gf_p[si][op], diff[si][op], fcol);
            fflush(stdout);
        }
    }
    if (!failed) {
        double agg_k = flops_total / time_k * 1e-9, agg_p = flops_total / time_p * 1e-9;
        const double agg_f = fast_all && time_f > 0 ? flops_total / time_f * 1e-9 : 0;
        printf("all shapes (total FLOPs / total median time): kernel %.1f GF/s, cuBLASLt %.1f GF/s, ratio %.3f; "
               "results agree (max rel diff %.2e); %.1f s\n",
               agg_k, agg_p, agg_k / agg_p, diff_max, (now_ms() - t_start) * 1e-3);
        if (fast_all)
            printf("FAST_16BF on the FP32 operands (no conversion pass): %.1f GF/s, %.3f of the peer\n", agg_f, agg_f / agg_p);
        else
            printf("FAST_16BF on the FP32 operands: not offered (or not agreeing) for every GEMM here\n");

        printf("{\"bench\":\"gemm\",\"device\":\"cuda\",\"gpu\":");
        if (json_fput_string(stdout, prop.name) != 0) printf("\"?\"");
        printf(",\"kernel_gflops\":%.2f,\"peer_gflops\":%.2f,\"ratio\":%.4f,\"reps\":%d,\"max_rel_diff\":%.3g,",
               agg_k, agg_p, agg_k / agg_p, REPS, diff_max);
        if (fast_all) printf("\"fast16bf_gflops\":%.2f,", agg_f);
        else printf("\"fast16bf_gflops\":null,");
        printf("\"shapes\":[");
        for (int si = 0; si < NSHAPES; si++)
            for (int op = 0; op < NOPS; op++)
                printf("%s{\"name\":\"%s\",\"N\":%d,\"IC\":%d,\"OC\":%d,\"op\":\"%s\",\"iters\":%d,\"kernel_gflops\":%.2f,"
                       "\"peer_gflops\":%.2f,\"ratio\":%.4f,\"rel_diff\":%.3g,\"fast16bf_gflops\":%.2f}",
                       si || op ? "," : "", SHAPES[si].name, SHAPES[si].N, SHAPES[si].IC, SHAPES[si].OC, OP_NAME[op],
                       SHAPES[si].iters, gf_k[si][op], gf_p[si][op], gf_k[si][op] / gf_p[si][op], diff[si][op],
                       gf_f[si][op]);
        printf("]}\n");
        fflush(stdout);
    }

    for (int i = 0; i < 4; i++) cudaCheck(cudaEventDestroy(ev[i]));
    cublasCheck(cublasLtDestroy(lt));
    free(h_k);
    free(h_p);
    backend_free(&be);
    return failed ? 1 : 0;
}
