// bench_calibrate.c — `tiertrain bench calibrate`: measures the rates the plan divides a
// step's work by (DESIGN §4, §10) and writes them as the profile (src/profile.h) to
// --profile or the default location, so `plan` and `train` can predict the step's floor.
// Each rate is measured through the code path a run uses, not a synthetic peer:
//   gemm        the backend's matmul_forward / backward_input / backward_weight ops on
//               device memory (their BF16 forms as a bf16 step calls them: the weights'
//               BF16 copy where the step reads it, tier.h w16, and the activations as
//               halves where it stores them so, act16), on the small and 125m presets'
//               shapes at N = 1024 rows
//               (on a GPU, whose small GEMMs would understate it: the 1b preset's at
//               N = 8192) (2·N·IC·OC FLOPs per call); every shape runs all three ops, so the rate is
//               total FLOPs / total median time, the three ops weighted equally as a
//               step weights them (each matmul runs each once).
//   gemm fp32   the same on operands with 24 random bits (--precision fp32's: a CPU with
//               AMX-BF16 runs them on its FMA kernels, not on the tiles).
//   attention   the backend's attention_forward + attention_backward at small's shape
//               (a GPU: 1b's at B·T = 8192), 3 · 2·N·T·C FLOPs (plan.c's count); on BF16
//               halves (attention_forward16, backward16) where the step runs them so
//               (tier.h att16: the CPU's attention takes the shape's heads so).
//   elementwise the rest of one block's forward and backward at that shape (RMSNorm ×2,
//               RoPE on q and k, the residual adds, SwiGLU, and their backwards), over
//               the bytes plan_block_elem_words counts.
//   h2d, d2h    backend_copy_h2d / d2h of 64 MiB between the pinned host pool (hostmem.h)
//               and backend_alloc'd device memory, both touched first.
//   nvme        sequential writes, then reads, of the whole store (4 GiB, or --size; at
//               most half the folder's free space) in --io-block requests through the io engine (io.h) with
//               --nvme-qd pieces in flight and the pool's buffers registered, as
//               bench/bench_io.c does (2·qd requests queued so qd are always in flight).
//   adam        adamw_update (kernels.h, the dispatched SIMD path the CPU optimizer runs)
//               over 32M parameters (fewer when --size is under 512 MiB: 32M·size/512M,
//               at least 4M, so small calibrations stay short), state touched first.
// Every figure is the median of several timed repeats (see the counts below): gemm,
// copies and Adam after one untimed warm-up each; NVMe over 3..7 write+read passes (--quick: 1; the
// first write lands on freshly preallocated extents, which some filesystems convert on
// first write: the median keeps that one slow pass out). The store is 4 GiB because a
// virtual disk's small files hit a cache (on the 2-core VM a 512 MiB file reads at 4 GB/s,
// 8 GiB at 1-2 GB/s): a rate from a small file would promise what a large model never gets.
// --quick, or a --size under 512 MiB, is a quick calibration: fewer repeats and one NVMe pass
// (the tests run one at 64M; a run without a profile runs one over its own working set, up
// to 4 GiB, in about 5 s); at full size it takes 30-60 s on a 2-core VM.
// Prints a table (what, measured, unit, how), writes the profile, says where, then as the
// last line one JSON object {"bench":"calibrate",...}. Returns the process exit code: 0,
// 1 a measurement or the write failed, 2 bad input (store options) found before work.
// Called by main for `tiertrain bench calibrate`.
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "bench.h"
#include "comm.h"
#include "hostmem.h"
#include "io.h"
#include "json.h"    // uses: json_escape (the path in the JSON line)
#include "kernels.h" // uses: adamw_update, adamw_update_path, matmul_blas_core, bf16_round_n, rope_table,
                     // matmul_amx
#include "model.h"   // uses: model_preset
#include "plan.h"    // uses: plan_nvme_free, plan_block_elem_words
#include "profile.h"
#include "util.h"
#include "tier.h"

#define MiB (1ull << 20)
#define NVME_FULL (4096 * MiB)     // store size unless --size says otherwise
#define NVME_QUICK (512 * MiB)     // a --size under it is a quick calibration
#define COPY_BYTES (64 * MiB)      // one h2d / d2h transfer
#define ADAM_MAX ((size_t)32 << 20) // parameters at full size
#define ADAM_MIN ((size_t)4 << 20)
// Timed repeats at full size; a --size under 512 MiB (a quick calibration, as the tests
// run) takes the QUICK counts.
#define GEMM_REPS 11
#define GEMM_REPS_QUICK 3
#define COPY_REPS 15
#define COPY_REPS_QUICK 5
#define NVME_PASSES_MIN 3          // write+read passes: at least this many,
#define NVME_PASSES_MAX 7          // at most this many,
#define NVME_BUDGET_S 15.0         // and no new pass once the passes took this long (slow disks);
#define NVME_PASSES_QUICK 1        // a quick calibration: one
#define ADAM_REPS 7
#define ADAM_REPS_QUICK 3
#define MAX_REPS 15                // the largest of the above (the timing arrays)

typedef struct {
    int N, IC, OC;
} gemm_shape_t;

// small: C 384, F 1024 (MLP up, MLP down); 125m: C 768 (attention projection).
static const gemm_shape_t CPU_SHAPES[] = {{1024, 384, 1024}, {1024, 1024, 384}, {1024, 768, 768}};
// 1b at B·T = 8192: C 2048, F 5632 (MLP up, MLP down), the attention projection.
static const gemm_shape_t GPU_SHAPES[] = {{8192, 2048, 5632}, {8192, 5632, 2048}, {8192, 2048, 2048}};
#define NSHAPES 3

// U(−0.5, 0.5) floats, incompressible and deterministic, rounded to BF16 values (bf16): the
// operands a bf16 run's products take (its weights, activations and their gradients are BF16
// values), so the rate is the path those run on (on a CPU with AMX-BF16, its tiles:
// kernels/cpu/gemm.h); else with 24 random bits, an fp32 run's (the FMA kernels there).
static void fill_rand_as(float *x, size_t n, uint64_t seed, int bf16) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(splitmix64(&seed) >> 40) / 16777216.0 - 0.5);
    if (bf16) bf16_round_n(x, n);
}

// Fills n floats of device memory at d with fill_rand_as's values through h_stage (stage floats).
static void fill_device(backend_t *be, float *d, size_t n, float *h_stage, size_t stage, uint64_t seed, int bf16) {
    for (size_t off = 0; off < n; off += stage) {
        const size_t k = n - off < stage ? n - off : stage;
        fill_rand_as(h_stage, k, seed + off, bf16);
        backend_copy_h2d(be, d + off, h_stage, k * sizeof(float));
    }
}

// n BF16 halves of device memory at *dst, holding from's n FP32 words (BF16 values: exact)
// where from is not NULL.
static int halves_of(backend_t *be, const float *from, size_t n, uint16_t **dst, char *err, size_t errlen) {
    int rc = backend_alloc(be, n * sizeof(uint16_t), "calibrate halves", (void **)dst, err, errlen);
    if (rc == 0 && from) be->ops->bf16_from_f32_n(*dst, from, n);
    return rc;
}

// ---------------------------------------------------------------- gemm

// Device buffers for the largest shape; inputs filled through h_stage (stage floats).
typedef struct {
    float *inp, *w, *dout; // (N, IC), (OC, IC), (N, OC)
    float *out, *dinp, *dw; // (N, OC), (N, IC), (OC, IC)
} gemm_bufs_t;

// One call of product o (0 the forward, 1 the input gradient, 2 the weight gradient, which
// accumulates: fine for timing) on b, in form 2 (the weights' BF16 copy w16 and the halves in16
// and dout16), 1 (w16, FP32 activations) or 0 (FP32 words). Nonzero: declined.
static int gemm_call(const backend_ops_t *op, const gemm_bufs_t *b, const uint16_t *in16, const uint16_t *w16,
                     const uint16_t *dout16, int form, int o, int N, int IC, int OC) {
    if (form == 2 && o == 0)
        return op->matmul_forward_w16_n_x(1, (void *const[]){b->out}, 0, (const uint16_t *const[]){w16}, &OC, in16, 1, N,
                                          IC, 0);
    if (form == 2 && o == 1) return op->matmul_backward_input_x(b->dinp, 0, dout16, 1, w16, N, IC, OC, 0, 0);
    if (form == 2)
        return (int)op->matmul_backward_weight_n_x(1, (float *const[]){b->dw}, (const void *const[]){dout16}, 1, &OC,
                                                   in16, 1, N, IC);
    if (o == 0 && form) op->matmul_forward_w16(b->out, b->inp, w16, NULL, N, IC, OC, 0);
    else if (o == 1 && form) op->matmul_backward_input_w16(b->dinp, b->dout, w16, NULL, N, IC, OC, 0, 0);
    else if (o == 0) op->matmul_forward(b->out, b->inp, b->w, N, IC, OC, 0);
    else if (o == 1) op->matmul_backward_input(b->dinp, b->dout, b->w, N, IC, OC, 0, 0);
    else op->matmul_backward_weight(b->dw, b->dout, b->inp, N, IC, OC);
    return 0;
}

// The rate on BF16 values into *flops_per_s and on FP32 operands (an fp32 run's) into
// *fp32_flops, each measured only where its pointer is not NULL. The BF16 values are taken
// as a bf16 step holds them: the weights' BF16 compute copy where the step's products read it
// (tier.h w16: a GPU in bf16 mode, the CPU's own FMA kernels or tiles; on the FMA kernels the
// packing then reads half the bytes, and small's step ran below a floor taken from FP32
// weights: 0.94–0.96 × it, 2026-12-06), and the activations as BF16 halves where the backend
// has the BF16-activation products (a GPU, the CPU's tiles: tier.h act16; packing halves
// instead of narrowing FP32 words, the CPU's products ran 9–11% faster, small's three shapes,
// hot). *h16 says which: 2 halves, 1 BF16 weights, 0 FP32 words. bf16: the backend runs bf16
// mode (a GPU's products take BF16 operands only then).
static int gemm_measure(backend_t *be, int bf16, float *h_stage, size_t stage, int reps, double *flops_per_s,
                        double *fp32_flops, int *h16, char *err, size_t errlen) {
    const gemm_shape_t *SHAPES = be->vt ? GPU_SHAPES : CPU_SHAPES;
    size_t max_ni = 0, max_nw = 0, max_no = 0;
    for (int s = 0; s < NSHAPES; s++) {
        size_t ni = (size_t)SHAPES[s].N * SHAPES[s].IC, nw = (size_t)SHAPES[s].OC * SHAPES[s].IC, no = (size_t)SHAPES[s].N * SHAPES[s].OC;
        max_ni = ni > max_ni ? ni : max_ni;
        max_nw = nw > max_nw ? nw : max_nw;
        max_no = no > max_no ? no : max_no;
    }
    gemm_bufs_t b;
    int rc = 0;
    struct { void **p; size_t n; const char *what; } want[] = {
        {(void **)&b.inp, max_ni, "calibrate gemm inp"}, {(void **)&b.w, max_nw, "calibrate gemm w"},
        {(void **)&b.dout, max_no, "calibrate gemm dout"}, {(void **)&b.out, max_no, "calibrate gemm out"},
        {(void **)&b.dinp, max_ni, "calibrate gemm dinp"}, {(void **)&b.dw, max_nw, "calibrate gemm dw"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if ((rc = backend_alloc(be, want[i].n * sizeof(float), want[i].what, want[i].p, err, errlen)) != 0) return rc;
    // Inputs through the backend's copy (device pointers need not be host-addressable).
    float *const ins[3] = {b.inp, b.w, b.dout};
    const size_t nins[3] = {max_ni, max_nw, max_no};
    const backend_ops_t *op = be->ops;
    uint16_t *in16 = NULL, *w16 = NULL, *dout16 = NULL; // the halves of inp, w and dout
    uint16_t **const h[3] = {&in16, &w16, &dout16};
    const int wb16 = flops_per_s && (be->vt ? bf16 : tier_products_read_w16(DEVICE_CPU));
    // (the CPU's products take halves wherever its kernels run, AMX or FMA: any width they take)
    const int halves = wb16 && op->matmul_forward_w16_n_x && (be->vt || matmul_act16(1024));
    const int form16 = halves ? 2 : wb16; // the BF16 values' form (gemm_call)
    if (h16) *h16 = form16;
    for (int kind = 0; kind < 2; kind++) { // BF16 values, then FP32
        double *rate = kind ? fp32_flops : flops_per_s;
        if (!rate) continue;
        for (int i = 0; i < 3; i++) fill_device(be, ins[i], nins[i], h_stage, stage, 0xca11b + (uint64_t)i, kind == 0);
        for (int i = 0; i < 3 && kind == 0 && wb16; i++) // the weight's, and with halves every operand's
            if ((i == 1 || halves) && (rc = halves_of(be, ins[i], nins[i], h[i], err, errlen)) != 0) return rc;
        const int form = kind ? 0 : form16;
        double flops_total = 0, time_total = 0;
        for (int s = 0; s < NSHAPES; s++) {
            const int N = SHAPES[s].N, IC = SHAPES[s].IC, OC = SHAPES[s].OC;
            const double flops = 2.0 * N * (double)IC * OC;
            for (int o = 0; o < 3; o++) {
                double t[MAX_REPS];
                for (int r = -1; r < reps; r++) { // r = −1: the untimed warm-up
                    double t0 = now_ms();
                    if (gemm_call(op, &b, in16, w16, dout16, form, o, N, IC, OC)) {
                        snprintf(err, errlen, "calibrate gemm: a product on BF16 halves was declined (the tiles said yes)");
                        return -EINVAL;
                    }
                    backend_sync(be);
                    if (r >= 0) t[r] = (now_ms() - t0) / 1e3;
                }
                flops_total += flops;
                time_total += bench_median(t, reps);
            }
        }
        *rate = time_total > 0 ? flops_total / time_total : 0;
    }
    return 0;
}

// The backend's config for the measurement: the run's device and budget with 1b's shape at
// B·T = 8192, so a GPU backend's kernel scratch (sized by the shape: cuda_kernels_scratch_bytes)
// holds GPU_SHAPES' BF16 staging whatever model the run names. The CPU backend ignores it.
static config_t gemm_config(const config_t *cfg) {
    config_t c = *cfg;
    if (model_preset("1b", &c) != 0) runtime_error("bench calibrate: the 1b preset is missing (model.c)");
    c.B = GPU_SHAPES[0].N / c.T;
    return c;
}

// ---------------------------------------------------------------- attention and the elementwise ops

// One block's shape for the ops: small's on the CPU, 1b's at B·T = 8192 on a GPU (as the
// GEMM shapes above).
typedef struct {
    int B, T, NH, NKV, HS, F;
} ops_shape_t;
static const ops_shape_t CPU_OPS = {4, 256, 6, 2, 64, 1024}, GPU_OPS = {4, 2048, 32, 4, 64, 5632};

// The attention op's rate (its forward and backward: the plan's 3 · 2·N·T·C FLOPs, half the
// T×T products being masked) and the elementwise ops' (one block's forward and backward
// sequence, in bf16 mode: the bytes plan_block_elem_words counts over the median time), on
// the backend's own ops and device memory. SwiGLU runs on FP32 words here, even where the
// step's takes BF16 halves (tier.h act16), whose bytes the plan then counts at this rate:
// with its operands in cache (as here, one block's buffers again and again) the halves'
// widening costs more than their bytes save (SwiGLU 0.95 -> 1.03 ms, 27 GB/s for the
// sequence instead of 40), while in the step, operands cold, they save (7.9 -> 6.3 ms).
// The rate is the bytes the elementwise ops move, the limit the floor takes.
static int ops_measure(backend_t *be, float *h_stage, size_t stage, int reps, double *attn_flops, int *attn_h16,
                       double *elem_Bps, char *err, size_t errlen) {
    const ops_shape_t sh = be->vt ? GPU_OPS : CPU_OPS;
    const int N = sh.B * sh.T, C = sh.NH * sh.HS, KVD = sh.NKV * sh.HS, F = sh.F;
    const size_t NC = (size_t)N * C, NK = (size_t)N * KVD, NF = (size_t)N * F, rn = (size_t)sh.T * (sh.HS / 2);
    float *q, *k, *v, *out, *dout, *dq, *dk, *dv, *lse, *x, *x2, *ln, *dx, *rstd, *w, *dw, *gate, *up, *h, *dg, *du, *cs, *sn;
    struct { float **p; size_t n; uint64_t seed; } want[] = {
        {&q, NC, 1}, {&k, NK, 2}, {&v, NK, 3}, {&out, NC, 0}, {&dout, NC, 4}, {&dq, NC, 0}, {&dk, NK, 0}, {&dv, NK, 0},
        {&lse, (size_t)sh.B * sh.NH * sh.T, 0}, {&x, NC, 5}, {&x2, NC, 6}, {&ln, NC, 0}, {&dx, NC, 0},
        {&rstd, (size_t)N, 0}, {&w, (size_t)C, 7}, {&dw, (size_t)C, 0}, {&gate, NF, 8}, {&up, NF, 9}, {&h, NF, 10},
        {&dg, NF, 0}, {&du, NF, 0}, {&cs, rn, 0}, {&sn, rn, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int rc = backend_alloc(be, want[i].n * sizeof(float), "calibrate ops", (void **)want[i].p, err, errlen);
        if (rc != 0) return rc;
        if (want[i].seed) fill_device(be, *want[i].p, want[i].n, h_stage, stage, 0x0b5 * want[i].seed, 1);
    }
    if (stage < 2 * rn) {
        snprintf(err, errlen, "calibrate ops: the staging buffer is smaller than the RoPE tables");
        return -EINVAL;
    }
    // attention as a bf16 step runs it: on BF16 halves where the CPU's attention (its tiles or
    // FMA tasks) or a GPU's register-tiled kernels take the heads (tier.h att16; on AMX 10%
    // faster than on FP32 words here, and the step's attention then ran below a floor taken
    // from FP32 words)
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *o16 = NULL, *d16 = NULL, *dq16 = NULL, *dk16 = NULL, *dv16 = NULL;
    const int h16 = be->ops->attention_forward16 &&
                    tier_attention_halves(be->vt ? DEVICE_CUDA : DEVICE_CPU, sh.NH, sh.NKV, sh.HS);
    if (h16) {
        struct { uint16_t **p; const float *from; size_t n; } half[] = {
            {&q16, q, NC}, {&k16, k, NK}, {&v16, v, NK}, {&o16, NULL, NC}, {&d16, dout, NC},
            {&dq16, NULL, NC}, {&dk16, NULL, NK}, {&dv16, NULL, NK},
        };
        for (size_t i = 0; i < sizeof half / sizeof half[0]; i++) {
            int rc = halves_of(be, half[i].from, half[i].n, half[i].p, err, errlen);
            if (rc != 0) return rc;
        }
    }
    if (attn_h16) *attn_h16 = h16;
    rope_table(h_stage, h_stage + rn, sh.T, sh.HS, 10000.0);
    backend_copy_h2d(be, cs, h_stage, rn * sizeof(float));
    backend_copy_h2d(be, sn, h_stage + rn, rn * sizeof(float));
    const backend_ops_t *op = be->ops;
    double ta[MAX_REPS], te[MAX_REPS];
    for (int r = -1; r < reps; r++) { // r = −1: the untimed warm-up
        double t0 = now_ms();
        if (!h16) {
            op->attention_forward(out, lse, q, k, v, sh.B, sh.T, sh.NH, sh.NKV, sh.HS, 1);
            op->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, sh.B, sh.T, sh.NH, sh.NKV, sh.HS, 1);
        } else if (op->attention_forward16(o16, lse, q16, k16, v16, sh.B, sh.T, sh.NH, sh.NKV, sh.HS) ||
                   op->attention_backward16(dq16, dk16, dv16, d16, q16, k16, v16, o16, lse, sh.B, sh.T, sh.NH, sh.NKV,
                                            sh.HS)) {
            snprintf(err, errlen, "calibrate ops: attention on BF16 halves was declined (no memory for its packed keys or widened rows?)");
            return -ENOMEM;
        }
        backend_sync(be);
        double t1 = now_ms();
        // the block's forward (step.c block_forward) and backward, elementwise ops only: the
        // sums (x2, dx, dw) grow a little each repeat, the rotations keep their norms
        op->rmsnorm_forward(ln, rstd, x, w, N, C, 1e-5f, 1);
        op->rope_forward(q, cs, sn, sh.B, sh.T, sh.NH, sh.HS, 1);
        op->rope_forward(k, cs, sn, sh.B, sh.T, sh.NKV, sh.HS, 1);
        op->add_inplace(x2, x, NC, 1);
        op->rmsnorm_forward(ln, rstd, x2, w, N, C, 1e-5f, 1);
        op->swiglu_forward(h, gate, up, NF, 1);
        op->add_inplace(out, x2, NC, 1);
        op->swiglu_backward(dg, du, h, gate, up, NF, 1);
        op->rmsnorm_backward(dx, dw, ln, x2, w, rstd, N, C, 1);
        op->rope_backward(dq, cs, sn, sh.B, sh.T, sh.NH, sh.HS, 1);
        op->rope_backward(dk, cs, sn, sh.B, sh.T, sh.NKV, sh.HS, 1);
        op->rmsnorm_backward(dx, dw, ln, x, w, rstd, N, C, 1);
        backend_sync(be);
        if (r >= 0) {
            ta[r] = (t1 - t0) / 1e3;
            te[r] = (now_ms() - t1) / 1e3;
        }
    }
    const double att = 3.0 * 2.0 * N * (double)sh.T * C, ma = bench_median(ta, reps), me = bench_median(te, reps);
    const double bytes = 4.0 * N * (plan_block_elem_words(C, KVD, F, 0, 0, 0) + plan_block_elem_words(C, KVD, F, 1, 0, 0));
    *attn_flops = ma > 0 ? att / ma : 0;
    *elem_Bps = me > 0 ? bytes / me : 0;
    return 0;
}

int bench_compute_rates(const config_t *cfg, bench_rates_t *now, char *err, size_t errlen) {
    enum { STAGE = 1 << 20 }; // floats: the operands' staging and the RoPE tables
    backend_t be;
    const config_t gc = gemm_config(cfg);
    int rc = backend_init(&be, &gc, err, errlen);
    if (rc != 0) return rc;
    float *stage = malloc(STAGE * sizeof(float));
    if (!stage) {
        snprintf(err, errlen, "out of memory for the rates' staging buffer");
        rc = -ENOMEM;
    }
    const int fp32 = cfg->precision == PREC_FP32; // the one kind of operands the run's matmuls take
    if (rc == 0)
        rc = gemm_measure(&be, !fp32, stage, STAGE, GEMM_REPS_QUICK, fp32 ? NULL : &now->gemm_flops,
                          fp32 ? &now->gemm_flops : NULL, NULL,
                          err, errlen);
    if (rc == 0)
        rc = ops_measure(&be, stage, STAGE, GEMM_REPS_QUICK, &now->attn_flops, NULL, &now->elem_Bps, err, errlen);
    free(stage);
    backend_free(&be);
    return rc;
}

// ---------------------------------------------------------------- host <-> device copies

static void copy_measure(backend_t *be, void *h_buf, void *d_buf, int reps, double *h2d, double *d2h) {
    double th[MAX_REPS], td[MAX_REPS];
    for (int r = -1; r < reps; r++) { // alternate so drift hits both alike
        double t0 = now_ms();
        backend_copy_h2d(be, d_buf, h_buf, COPY_BYTES);
        backend_sync(be);
        double t1 = now_ms();
        backend_copy_d2h(be, h_buf, d_buf, COPY_BYTES);
        backend_sync(be);
        double t2 = now_ms();
        if (r >= 0) th[r] = (t1 - t0) / 1e3, td[r] = (t2 - t1) / 1e3;
    }
    double mh = bench_median(th, reps), md = bench_median(td, reps);
    *h2d = mh > 0 ? COPY_BYTES / mh : 0;
    *d2h = md > 0 ? COPY_BYTES / md : 0;
}

// ---------------------------------------------------------------- NVMe

// NVME_MIXED: nvme_pass reads the even blocks and writes the odd ones, in one queue.
enum { NVME_MIXED = -1 };

// One sequential pass of op (IO_READ, IO_WRITE or NVME_MIXED) over the whole store in block
// requests, nt tickets (2·qd) queued; the time in *sec. Returns 0 or the first failure's
// -errno with its message.
static int nvme_pass(nvme_store_t *s, io_ticket_t *t, int64_t *blk, int nt, char *buf, uint64_t block, uint64_t nblocks,
                     uint32_t *crcs, int pass_op, double *sec, char *msg, size_t msglen) {
    int rc = 0;
    for (int i = 0; i < nt; i++) blk[i] = -1;
    double t0 = now_ms();
    for (uint64_t k = 0; k < nblocks + (uint64_t)nt && rc == 0; k++) {
        int slot = (int)(k % (uint64_t)nt);
        if (blk[slot] >= 0) {
            // Tickets complete out of order; waiting on the oldest keeps 2·qd queued.
            if ((rc = io_ticket_wait(&t[slot])) != 0) { io_ticket_message(&t[slot], msg, msglen); break; }
            if (t[slot].op == IO_WRITE) crcs[blk[slot]] = t[slot].crc;
            blk[slot] = -1;
        }
        if (k >= nblocks) continue;
        const io_op_t op = pass_op == NVME_MIXED ? (k & 1 ? IO_WRITE : IO_READ) : (io_op_t)pass_op;
        char *mem = buf + (uint64_t)slot * block;
        rc = op == IO_WRITE ? nvme_store_write(s, &t[slot], k * block, block, mem)
                            : nvme_store_read(s, &t[slot], k * block, block, mem, crcs[k]);
        if (rc) { io_ticket_message(&t[slot], msg, msglen); break; }
        blk[slot] = (int64_t)k;
    }
    for (int i = 0; i < nt; i++) if (blk[i] >= 0) io_ticket_wait(&t[i]); // drain after a failure
    *sec = (now_ms() - t0) / 1e3;
    return rc;
}

// Alternating write and read passes (NVME_PASSES_MIN..MAX, see NVME_BUDGET_S; quick: one);
// medians into *wr, *rd (bytes/s), the number of passes into *passes. With mixed (NULL: none),
// then one NVME_MIXED pass: mixed[0] its reads' and mixed[1] its writes' bytes/s.
static int nvme_measure(nvme_store_t *s, char *buf, int nt, uint64_t block, uint64_t nblocks, int quick, double *wr,
                        double *rd, double mixed[2], int *passes, char *msg, size_t msglen) {
    io_ticket_t *t = calloc((size_t)nt, sizeof *t);
    int64_t *blk = calloc((size_t)nt, sizeof *blk);
    uint32_t *crcs = calloc(nblocks, sizeof *crcs);
    int rc = 0;
    if (!t || !blk || !crcs) {
        snprintf(msg, msglen, "out of memory for %" PRIu64 " blocks", nblocks);
        rc = -ENOMEM;
    }
    double tw[NVME_PASSES_MAX], tr[NVME_PASSES_MAX], spent = 0;
    int np = 0;
    const int pmin = quick ? NVME_PASSES_QUICK : NVME_PASSES_MIN, pmax = quick ? NVME_PASSES_QUICK : NVME_PASSES_MAX;
    while (rc == 0 && np < pmax && (np < pmin || spent < NVME_BUDGET_S)) {
        rc = nvme_pass(s, t, blk, nt, buf, block, nblocks, crcs, IO_WRITE, &tw[np], msg, msglen);
        if (rc == 0) rc = nvme_pass(s, t, blk, nt, buf, block, nblocks, crcs, IO_READ, &tr[np], msg, msglen);
        if (rc == 0) spent += tw[np] + tr[np], np++;
    }
    *passes = np;
    if (rc == 0) {
        double mw = bench_median(tw, np), mr = bench_median(tr, np), bytes = (double)(nblocks * block);
        *wr = mw > 0 ? bytes / mw : 0;
        *rd = mr > 0 ? bytes / mr : 0;
    }
    double tm = 0;
    if (rc == 0 && mixed) rc = nvme_pass(s, t, blk, nt, buf, block, nblocks, crcs, NVME_MIXED, &tm, msg, msglen);
    if (rc == 0 && mixed) {
        const double reads = (double)((nblocks + 1) / 2 * block), writes = (double)(nblocks / 2 * block);
        mixed[0] = tm > 0 ? reads / tm : 0;
        mixed[1] = tm > 0 ? writes / tm : 0;
    }
    free(t);
    free(blk);
    free(crcs);
    return rc;
}

int bench_nvme_rates(const config_t *cfg, uint64_t size, double *rd, double *wr, double mixed[2], char *err,
                     size_t errlen) {
    const uint64_t block = cfg->io_block ? cfg->io_block : MiB, nblocks = size / block;
    const int qd = cfg->nvme_qd > 0 ? cfg->nvme_qd : 32, nt = 2 * qd;
    hostmem_opts_t ho;
    tier_hostmem_opts(&ho, cfg, (uint64_t)nt * block);
    ho.budget = 0;
    ho.quiet = 1; // the run before it said how its pool went
    hostmem_t *hm = NULL;
    nvme_store_t *s = NULL;
    int rc = hostmem_init(&hm, &ho, err, errlen), passes = 0;
    char *buf = rc == 0 ? hostmem_alloc(hm, (uint64_t)nt * block, "nvme measurement buffers", err, errlen) : NULL;
    if (rc == 0 && !buf) rc = -ENOMEM;
    if (rc == 0 && nblocks == 0) {
        snprintf(err, errlen, "nvme measurement: %" PRIu64 " bytes is under one --io-block", size);
        rc = -EINVAL;
    }
    if (rc == 0) {
        bench_fill_random(buf, (uint64_t)nt * block);
        rc = bench_nvme_open(cfg, hm, nblocks * block, block, qd, &s, err, errlen);
    }
    if (rc == 0) rc = nvme_measure(s, buf, nt, block, nblocks, 1, wr, rd, mixed, &passes, err, errlen);
    nvme_store_free(s);
    hostmem_free(hm);
    return rc;
}

// ---------------------------------------------------------------- Adam

static int adam_measure(size_t n, int reps, double *params_per_s, char *err, size_t errlen) {
    float *g = alloc_huge(n * sizeof(float)), *master = alloc_huge(n * sizeof(float));
    float *m = alloc_huge(n * sizeof(float)), *v = alloc_huge(n * sizeof(float));
    uint16_t *p16 = alloc_huge(n * sizeof(uint16_t));
    int rc = 0;
    if (!g || !master || !m || !v || !p16) {
        char a[32];
        snprintf(err, errlen, "adam: cannot allocate %s for %zu parameters (free some memory and rerun)",
                 format_bytes(a, sizeof a, n * 18), n);
        rc = -ENOMEM;
        goto out;
    }
    // First touch in parallel, with the update's static split (first touch is slow on VMs
    // and not the update's cost). Gradient-like values keep the state far from denormals.
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u);
        h ^= h >> 15;
        g[i] = (float)((double)(h >> 8) / 16777216.0 - 0.5) * 0.02f;
        master[i] = 0.01f * g[i];
        m[i] = v[i] = 0.0f;
        p16[i] = 0;
    }
    const adamw_params_t hp = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .wd = 0.1f,
                               .grad_scale = 1.0f, .bc1 = 1.0f - powf(0.9f, 300), .bc2 = 1.0f - powf(0.95f, 300)};
    double t[MAX_REPS];
    for (int r = -1; r < reps; r++) {
        double t0 = now_ms();
        adamw_update(master, m, v, p16, NULL, g, n, &hp);
        if (r >= 0) t[r] = (now_ms() - t0) / 1e3;
    }
    double md = bench_median(t, reps);
    *params_per_s = md > 0 ? (double)n / md : 0;
out:
    free(g); free(master); free(m); free(v); free(p16);
    return rc;
}

// ---------------------------------------------------------------- the bench

int bench_calibrate(const config_t *cfg) {
    const double t_start = now_ms();
    const uint64_t block = cfg->io_block ? cfg->io_block : MiB;
    const int qd = cfg->nvme_qd > 0 ? cfg->nvme_qd : 32;
    char a[32], b[32], c[32], err[1024], path_buf[TT_PATH_MAX];
    if (block % IO_ALIGN) usage_error("--io-block %" PRIu64 ": must be a multiple of 4 KiB (e.g. 1M)", block);
    uint64_t size = cfg->bench_size ? cfg->bench_size : NVME_FULL;
    const uint64_t room = plan_nvme_free(cfg) / 2;
    if (room && size > room && room >= NVME_QUICK) {
        notice("bench calibrate: the NVMe folder has %s free: measuring over %s instead of %s",
               format_bytes(a, sizeof a, 2 * room), format_bytes(b, sizeof b, room), format_bytes(c, sizeof c, size));
        size = room;
    } else if (room && size > room) { // under 512 MiB to spare: a cached file's rate, not the disk's
        usage_error("--size %s: the NVMe folder %s has %s free, and calibrate takes at most half (free space, or give "
                    "--nvme-path another disk)", format_bytes(a, sizeof a, size),
                    cfg->nvme_path[0] ? cfg->nvme_path : "(default: $TMPDIR or /tmp)", format_bytes(b, sizeof b, 2 * room));
    }
    const uint64_t nblocks = size / block;
    if (nblocks == 0)
        usage_error("--size %s: smaller than one --io-block (%s)", format_bytes(a, sizeof a, size), format_bytes(b, sizeof b, block));
    size = nblocks * block;
    size_t adam_n = (size_t)((double)ADAM_MAX * (double)size / (double)NVME_QUICK);
    adam_n = adam_n < ADAM_MIN ? ADAM_MIN : adam_n > ADAM_MAX ? ADAM_MAX : adam_n;
    const int quick = cfg->bench_quick || size < NVME_QUICK;
    const int gemm_reps = quick ? GEMM_REPS_QUICK : GEMM_REPS, copy_reps = quick ? COPY_REPS_QUICK : COPY_REPS;
    const int adam_reps = quick ? ADAM_REPS_QUICK : ADAM_REPS;
    const char *path = profile_path(cfg, path_buf, sizeof path_buf);
    if (!path[0]) usage_error("bench calibrate: the default profile path is too long ($XDG_CACHE_HOME or $HOME): pass --profile FILE");
    if (profile_writable(path, err, sizeof err) != 0) usage_error("bench calibrate: %s", err);

    profile_t prof;
    profile_defaults(&prof);
    backend_t be;
    const config_t gc = gemm_config(cfg);
    int rc0 = backend_init(&be, &gc, err, sizeof err);
    if (rc0 != 0) fail_with(rc0, "bench calibrate: %s", err);
    snprintf(prof.backend, sizeof prof.backend, "%s", be.name);
    prof.threads = be.threads;

    // Host side: one pinned pool for the copy buffer and the io requests' buffers.
    const int nt = 2 * qd;
    const uint64_t pool = COPY_BYTES + (uint64_t)nt * block;
    if (cfg->host_budget && pool > cfg->host_budget) { // the cap holds for calibrate's buffers too
        char a[32], b[32];
        usage_error("bench calibrate: its buffers need %s (the copies' %s and 2 x --nvme-qd %d x --io-block), over "
                    "--host-budget %s (raise it to %s, or drop it)", format_bytes(a, sizeof a, pool),
                    format_bytes(b, sizeof b, COPY_BYTES), qd, format_bytes((char[32]){0}, 32, cfg->host_budget),
                    format_bytes((char[32]){0}, 32, pool));
    }
    hostmem_opts_t ho;
    tier_hostmem_opts(&ho, cfg, pool);
    ho.budget = 0; // the bench's buffers, checked against --host-budget above, are not a run's host tier
    if (!backend_host_addressable(&be)) { // pinned the way a run pins its pool (CUDA: cudaHostRegister), so the copies are DMA
        ho.pin_fn = backend_host_pin;
        ho.unpin_fn = backend_host_unpin;
        ho.pin_arg = &be;
    }
    hostmem_t *hm = NULL;
    nvme_store_t *s = NULL;
    int rc = hostmem_init(&hm, &ho, err, sizeof err), exit_code = 1;
    if (rc) {
        notice("bench calibrate: %s", err);
        exit_code = rc == -EINVAL ? 2 : 1;
        goto out;
    }
    char *h_copy = hostmem_alloc(hm, COPY_BYTES, "calibrate copy buffer", err, sizeof err);
    char *h_io = h_copy ? hostmem_alloc(hm, (uint64_t)nt * block, "calibrate io buffers", err, sizeof err) : NULL;
    if (!h_io) {
        notice("bench calibrate: %s", err);
        goto out;
    }
    bench_fill_random(h_io, (uint64_t)nt * block);
    hostmem_info_t hinfo;
    hostmem_info(hm, &hinfo);
    if ((rc = bench_nvme_open(cfg, hm, size, block, qd, &s, err, sizeof err)) != 0) {
        notice("bench calibrate: %s", err);
        exit_code = rc == -EINVAL ? 2 : 1;
        goto out;
    }
    io_info_t info;
    nvme_store_info(s, &info);

    printf("bench calibrate: backend %s, %d threads; host pool %s (%s); nvme %s (%s, %s registered buffers), size %s, "
           "block %s, qd %d; profile %s\n",
           be.name, be.threads, format_bytes(a, sizeof a, COPY_BYTES + (uint64_t)nt * block), hinfo.pinned ? "pinned" : "not pinned",
           cfg->nvme_path[0] ? cfg->nvme_path : "(default)", info.engine, info.registered_bufs ? "with" : "without",
           format_bytes(b, sizeof b, size), format_bytes(c, sizeof c, block), qd, path);
    fflush(stdout);

    // ---- device memory for the copies, touched (zero-filled by backend_alloc, then a
    // warm-up copy inside copy_measure)
    void *d_copy = NULL;
    if ((rc = backend_alloc(&be, COPY_BYTES, "calibrate copy buffer", &d_copy, err, sizeof err)) != 0) {
        notice("bench calibrate: %s", err);
        goto out;
    }
    int gemm_h16 = 0;
    if ((rc = gemm_measure(&be, cfg->precision == PREC_BF16, (float *)h_copy, COPY_BYTES / sizeof(float), gemm_reps,
                           &prof.gemm_flops, &prof.gemm_fp32_flops, &gemm_h16, err, sizeof err)) != 0) {
        notice("bench calibrate: %s", err);
        goto out;
    }
    int attn_h16 = 0;
    if ((rc = ops_measure(&be, (float *)h_copy, COPY_BYTES / sizeof(float), gemm_reps, &prof.attn_flops, &attn_h16,
                          &prof.elem_Bps, err, sizeof err)) != 0) {
        notice("bench calibrate: %s", err);
        goto out;
    }
    copy_measure(&be, h_copy, d_copy, copy_reps, &prof.h2d_Bps, &prof.d2h_Bps);
    char msg[1024] = "";
    int passes = 0;
    if ((rc = nvme_measure(s, h_io, nt, block, nblocks, cfg->bench_quick, &prof.nvme_write_Bps, &prof.nvme_read_Bps,
                           NULL, &passes, msg, sizeof msg)) != 0) {
        notice("bench calibrate: nvme: %s", msg);
        goto out;
    }
    prof.nvme_bytes = size;
    nvme_store_free(s);
    s = NULL;
    if ((rc = adam_measure(adam_n, adam_reps, &prof.adam_params_per_s, err, sizeof err)) != 0) {
        notice("bench calibrate: %s", err);
        goto out;
    }
    // under a launcher: the ranks' link, as the gradient fold uses it
    if ((rc = bench_comm_fold_rate(&prof.comm_Bps, err, sizeof err)) != 0) {
        notice("bench calibrate: %s", err);
        goto out;
    }

    // ---- the table
    char how[6][320];
    char blas[224] = "", bt[192];
    if (!be.vt) snprintf(blas, sizeof blas, " (%s)", backend_blas_text(bt, sizeof bt));
    snprintf(how[0], sizeof how[0], "%s matmul%s fwd+bwd_in+bwd_w%s, %s; median of %d", be.name, blas,
             gemm_h16 == 2 ? " on BF16 halves" : gemm_h16 ? " on BF16 weights" : "",
             be.vt ? "N 8192: 2048x5632, 5632x2048, 2048x2048" : "N 1024: 384x1024, 1024x384, 768x768", gemm_reps);
    snprintf(how[1], sizeof how[1], "backend copy of %s, %s host pool; median of %d", format_bytes(a, sizeof a, COPY_BYTES),
             hinfo.pinned ? "pinned" : "unpinned", copy_reps);
    snprintf(how[2], sizeof how[2], "%s, sequential %s in %s requests, qd %d; median of %d", info.engine,
             format_bytes(a, sizeof a, size), format_bytes(b, sizeof b, block), qd, passes);
    snprintf(how[3], sizeof how[3], "adamw_update (%s) over %zuM parameters; median of %d", adamw_update_path(), adam_n >> 20,
             adam_reps);
    const ops_shape_t sh = be.vt ? GPU_OPS : CPU_OPS;
    snprintf(how[4], sizeof how[4], "%s attention fwd+bwd%s, B %d T %d heads %d kv %d hs %d (3x 2NTC FLOPs); median of %d",
             be.name, attn_h16 ? " on BF16 halves" : "", sh.B, sh.T, sh.NH, sh.NKV, sh.HS, gemm_reps);
    snprintf(how[5], sizeof how[5], "%s rmsnorm, rope, residual adds, swiglu of one block fwd+bwd, N %d C %d F %d; median of %d",
             be.name, sh.B * sh.T, sh.NH * sh.HS, sh.F, gemm_reps);
    printf("%-11s %10s %-9s %s\n", "what", "measured", "unit", "how");
    printf("%-11s %10.1f %-9s %s\n", "gemm", prof.gemm_flops / 1e9, "GFLOP/s", how[0]);
    printf("%-11s %10.1f %-9s %s\n", "gemm fp32", prof.gemm_fp32_flops / 1e9, "GFLOP/s",
           "the same on FP32 operands (--precision fp32)");
    printf("%-11s %10.1f %-9s %s\n", "attention", prof.attn_flops / 1e9, "GFLOP/s", how[4]);
    printf("%-11s %10.2f %-9s %s\n", "elementwise", prof.elem_Bps / 1e9, "GB/s", how[5]);
    printf("%-11s %10.2f %-9s %s\n", "h2d", prof.h2d_Bps / 1e9, "GB/s", how[1]);
    printf("%-11s %10.2f %-9s %s\n", "d2h", prof.d2h_Bps / 1e9, "GB/s", how[1]);
    printf("%-11s %10.3f %-9s %s\n", "nvme read", prof.nvme_read_Bps / 1e9, "GB/s", how[2]);
    printf("%-11s %10.3f %-9s %s\n", "nvme write", prof.nvme_write_Bps / 1e9, "GB/s", how[2]);
    printf("%-11s %10.1f %-9s %s\n", "adam", prof.adam_params_per_s / 1e6, "Mparam/s", how[3]);
    if (prof.comm_Bps > 0)
        printf("%-11s %10.2f %-9s %s\n", "ranks link", prof.comm_Bps / 1e9, "GB/s",
               "bytes a rank sends per second in the gradient fold of 16 MiB (all-to-all + all-gather), the slowest rank");

    if (comm_rank(comm_world()) == 0 && (rc = profile_save(&prof, path, err, sizeof err)) != 0) { // rank 0 writes it
        notice("bench calibrate: %s", err);
        goto out;
    }
    printf("profile written to %s; %.1f s\n", path, (now_ms() - t_start) / 1e3);
    char jpath[2 * TT_PATH_MAX + 8];
    ssize_t jn = json_escape(jpath, sizeof jpath, path, strlen(path));
    if (jn < 0 || (size_t)jn >= sizeof jpath) snprintf(jpath, sizeof jpath, "null"); // not UTF-8: scripts get null
    printf("{\"bench\":\"calibrate\",\"gemm_flops\":%.6g,\"gemm_fp32_flops\":%.6g,\"attn_flops\":%.6g,\"elem_Bps\":%.6g,\"h2d_Bps\":%.6g,\"d2h_Bps\":%.6g,\"nvme_read_Bps\":%.6g,"
           "\"nvme_write_Bps\":%.6g,\"adam_params_per_s\":%.6g,\"comm_Bps\":%.6g,\"ranks\":%d,\"backend\":\"%s\","
           "\"threads\":%d,\"profile\":%s}\n",
           prof.gemm_flops, prof.gemm_fp32_flops, prof.attn_flops, prof.elem_Bps, prof.h2d_Bps, prof.d2h_Bps, prof.nvme_read_Bps, prof.nvme_write_Bps, prof.adam_params_per_s,
           prof.comm_Bps, comm_size(comm_world()), prof.backend, prof.threads, jpath);
    fflush(stdout);
    exit_code = 0;
out:
    nvme_store_free(s);
    hostmem_free(hm);
    backend_free(&be);
    return exit_code;
}
