// bench_train.c — `tiertrain bench train [train's flags]`: timed training steps of one shape
// (default shape M: L 12, C 768, 12 heads, F 2048, V 256, T 256, B 4, as issue 13 measured
// against PyTorch), after one untimed warm-up step. It reports tokens/s, the executed GFLOP/s
// (the plan's FLOPs per step over the median step) and their fraction of the calibrated GEMM
// rate, and where the mean timed step went: GEMMs, attention, the norms, SwiGLU, RoPE and the
// residual adds, BF16 conversions, the loss (embedding and cross-entropy), AdamW and the
// gradient norm's block sums, a device backend's copies and memsets, waiting for
// parameters, and the rest of the compute thread's time (the step's own work). The
// times come from the run itself: the trainer's op table is wrapped so that every op the
// compute thread calls is timed (on a GPU the backend is synchronized around each, which
// slows it a little: the split is for reading, the tokens/s for comparing); calls from other
// threads (the optimizer's) pass through untimed. On a device backend a line counts the
// compute thread's copies (by direction) and memsets, with their bytes: what the copies' time
// is made of. --recompute auto resolves as train does. Ends with {"bench":"train",...}. bench/torch_peer.py is the PyTorch peer.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "bench.h"
#include "model.h"
#include "plan.h"
#include "profile.h"
#include "train.h"
#include "util.h"

enum { OP_GEMM = 0, OP_ATTN, OP_NORM, OP_SWIGLU, OP_ROPE_ADD, OP_BF16, OP_LOSS, OP_UPDATE, OP_COPY, NOPS };

// The timing shim: only the compute thread's calls are counted, so plain statics do.
static const backend_ops_t *real;
static backend_ops_t timed;
static const backend_vt_t *real_vt; // device backends' copies and memsets; NULL on the CPU
static backend_vt_t timed_vt;
static backend_t *timed_be;
static pthread_t compute_thread;
static double op_ms[NOPS];
static int counting; // after the warm-up step

static double tick(void) {
    backend_sync(timed_be);
    return now_ms();
}

// counting, and on the compute thread: what the timers and counters take
static int counted(void) { return counting && pthread_equal(pthread_self(), compute_thread); }

#define TIMED(kind, call)                                                                                              \
    do {                                                                                                               \
        const int on_ = counted();                                                                                     \
        double t0_ = on_ ? tick() : 0;                                                                                \
        call;                                                                                                          \
        if (on_) op_ms[kind] += tick() - t0_;                                                                          \
    } while (0)

static void mm_fwd(float *out, const float *inp, const float *w, int N, int IC, int OC, int round) {
    TIMED(OP_GEMM, real->matmul_forward(out, inp, w, N, IC, OC, round));
}
static void mm_bwd_in(float *dinp, const float *dout, const float *w, int N, int IC, int OC, int acc, int round) {
    TIMED(OP_GEMM, real->matmul_backward_input(dinp, dout, w, N, IC, OC, acc, round));
}
static void mm_fwd16(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC, int OC, int round) {
    TIMED(OP_GEMM, real->matmul_forward_w16(out, inp, w, scratch, N, IC, OC, round));
}
static void mm_bwd_in16(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N, int IC, int OC,
                        int acc, int round) {
    TIMED(OP_GEMM, real->matmul_backward_input_w16(dinp, dout, w, scratch, N, IC, OC, acc, round));
}
static void mm_fwd16n(int n, float *const out[], const uint16_t *const w[], const int OC[], const float *inp,
                      float *scratch, int N, int IC, int round) {
    TIMED(OP_GEMM, real->matmul_forward_w16_n(n, out, w, OC, inp, scratch, N, IC, round));
}
static void mm_bwd_wn(int n, float *const dw[], const float *const dout[], const int OC[], const float *inp, int N,
                      int IC) {
    TIMED(OP_GEMM, real->matmul_backward_weight_n(n, dw, dout, OC, inp, N, IC));
}
static int mm_bwd_in16k(float *dinp, int n, const void *const dout[], int a16, const int OC[], const uint16_t *w,
                        float *scratch, int N, int IC, int acc, int round) {
    int rc;
    TIMED(OP_GEMM, rc = real->matmul_backward_input_w16_k(dinp, n, dout, a16, OC, w, scratch, N, IC, acc, round));
    return rc;
}
static void mm_bwd_w(float *dw, const float *dout, const float *inp, int N, int IC, int OC) {
    TIMED(OP_GEMM, real->matmul_backward_weight(dw, dout, inp, N, IC, OC));
}
// the BF16 activations' (backend.h)
static void norm_fwd16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    TIMED(OP_NORM, real->rmsnorm_forward16(out, rstd, x, w, N, C, eps));
}
static int mm_fwd_x(int n, void *const out[], int o16, const uint16_t *const w[], const int OC[], const void *inp,
                    int a16, int N, int IC, int round) {
    int rc;
    TIMED(OP_GEMM, rc = real->matmul_forward_w16_n_x(n, out, o16, w, OC, inp, a16, N, IC, round));
    return rc;
}
static int mm_bwd_in_x(void *dinp, int o16, const void *dout, int a16, const uint16_t *w, int N, int IC, int OC, int acc,
                       int round) {
    int rc;
    TIMED(OP_GEMM, rc = real->matmul_backward_input_x(dinp, o16, dout, a16, w, N, IC, OC, acc, round));
    return rc;
}
static unsigned mm_bwd_wn_x(int n, float *const dw[], const void *const dout[], int a16, const int OC[],
                            const void *inp, int b16, int N, int IC) {
    unsigned rc;
    TIMED(OP_GEMM, rc = real->matmul_backward_weight_n_x(n, dw, dout, a16, OC, inp, b16, N, IC));
    return rc;
}
static void swiglu_fwd16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n) {
    TIMED(OP_SWIGLU, real->swiglu_forward16(out, gate, up, n));
}
static void swiglu_bwd16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                         const uint16_t *up, size_t n) {
    TIMED(OP_SWIGLU, real->swiglu_backward16(dgate, dup, dout, gate, up, n));
}
static void rope_fwd16(uint16_t *x, const float *c, const float *s, int B, int T, int NX, int HS) {
    TIMED(OP_ROPE_ADD, real->rope_forward16(x, c, s, B, T, NX, HS));
}
static void rope_bwd16(uint16_t *x, const float *c, const float *s, int B, int T, int NX, int HS) {
    TIMED(OP_ROPE_ADD, real->rope_backward16(x, c, s, B, T, NX, HS));
}
static int att_fwd16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B, int T,
                     int NH, int NKV, int HS) {
    int rc;
    TIMED(OP_ATTN, rc = real->attention_forward16(out, lse, q, k, v, B, T, NH, NKV, HS));
    return rc;
}
static int att_bwd16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                     const uint16_t *v, const uint16_t *out, const float *lse, int B, int T, int NH, int NKV, int HS) {
    int rc;
    TIMED(OP_ATTN, rc = real->attention_backward16(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, NKV, HS));
    return rc;
}
static void att_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int NH,
                    int NKV, int HS, int round) {
    TIMED(OP_ATTN, real->attention_forward(out, lse, q, k, v, B, T, NH, NKV, HS, round));
}
static void att_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                    const float *out, const float *lse, int B, int T, int NH, int NKV, int HS, int round) {
    TIMED(OP_ATTN, real->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, NKV, HS, round));
}

static void norm_fwd(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps, int round) {
    TIMED(OP_NORM, real->rmsnorm_forward(out, rstd, x, w, N, C, eps, round));
}
static void norm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd, int N,
                     int C, int round) {
    TIMED(OP_NORM, real->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, round));
}
static void swiglu_fwd(float *out, const float *gate, const float *up, size_t n, int round) {
    TIMED(OP_SWIGLU, real->swiglu_forward(out, gate, up, n, round));
}
static void swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                       int round) {
    TIMED(OP_SWIGLU, real->swiglu_backward(dgate, dup, dout, gate, up, n, round));
}
static void rope_fwd(float *x, const float *c, const float *s, int B, int T, int NX, int HS, int round) {
    TIMED(OP_ROPE_ADD, real->rope_forward(x, c, s, B, T, NX, HS, round));
}
static void rope_bwd(float *x, const float *c, const float *s, int B, int T, int NX, int HS, int round) {
    TIMED(OP_ROPE_ADD, real->rope_backward(x, c, s, B, T, NX, HS, round));
}
static void add(float *x, const float *y, size_t n, int round) { TIMED(OP_ROPE_ADD, real->add_inplace(x, y, n, round)); }
// x2 as halves (backend.h): the first residual add runs inside the MLP's norm, and counts as it
static void res_norm16(uint16_t *x2, uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                       float eps) {
    TIMED(OP_NORM, real->residual_rmsnorm_forward16(x2, out, rstd, x, w, N, C, eps));
}
static void add16(float *x, const uint16_t *y, size_t n, int round) {
    TIMED(OP_ROPE_ADD, real->add_inplace16(x, y, n, round));
}
static void norm_bwd16(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w, const float *rstd,
                       int N, int C, int round) {
    TIMED(OP_NORM, real->rmsnorm_backward16(dx, dw, dout, x, w, rstd, N, C, round));
}
static void to_f32(float *dst, const uint16_t *src, size_t n) { TIMED(OP_BF16, real->bf16_to_f32_n(dst, src, n)); }
static void from_f32(uint16_t *dst, const float *src, size_t n) { TIMED(OP_BF16, real->bf16_from_f32_n(dst, src, n)); }
static void round_n(float *x, size_t n) { TIMED(OP_BF16, real->bf16_round_n(x, n)); }
static void emb_fwd(float *out, const int *tok, const float *wte, int N, int C, int v0, int nv) {
    TIMED(OP_LOSS, real->embedding_forward(out, tok, wte, N, C, v0, nv));
}
static void emb_bwd(float *dwte, const float *dout, const int *tok, int N, int C, int v0, int nv) {
    TIMED(OP_LOSS, real->embedding_backward(dwte, dout, tok, N, C, v0, nv));
}
static void ce_fold(float *stats, const float *logits, const int *targets, int N, int Vq, int v0) {
    TIMED(OP_LOSS, real->crossentropy_fold(stats, logits, targets, N, Vq, v0));
}
static void ce_loss(float *losses, const float *stats, int N) { TIMED(OP_LOSS, real->crossentropy_loss(losses, stats, N)); }
static void ce_bwd(float *dlogits, const float *logits, const float *stats, const int *targets, int N, int Vq, int v0,
                   float dscale) {
    TIMED(OP_LOSS, real->crossentropy_backward(dlogits, logits, stats, targets, N, Vq, v0, dscale));
}

static void sum_sq_blocks(double *h_out, const float *x, size_t n) {
    TIMED(OP_UPDATE, real->sumsq_blocks(h_out, x, n));
}
static void adamw(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g, size_t n,
                  const adamw_params_t *hp) {
    TIMED(OP_UPDATE, real->adamw_update(master, m, v, p16, p32, g, n, hp));
}
// The compute thread's copies by direction (backend_copy_dir_t) and its memsets: calls and
// bytes, to say what makes up "copies and memsets" on a device backend
enum { CP_MEMSET = BACKEND_D2D + 1, NCP };
static double cp_calls[NCP], cp_bytes[NCP];
static void count_copy(int kind, size_t n) {
    if (!counted()) return;
    cp_calls[kind] += 1;
    cp_bytes[kind] += (double)n;
}
static void vt_copy(struct backend *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir, int async) {
    count_copy((int)dir, n);
    TIMED(OP_COPY, real_vt->copy(be, dst, src, n, dir, async));
}
static void vt_memset(struct backend *be, void *d_dst, int byte, size_t n) {
    count_copy(CP_MEMSET, n);
    TIMED(OP_COPY, real_vt->memset(be, d_dst, byte, n));
}

static void on_init(trainer_t *tr, void *arg) {
    (void)arg;
    compute_thread = pthread_self();
    timed_be = trainer_backend(tr);
    real = timed_be->ops;
    timed = *real;
    timed.matmul_forward = mm_fwd;
    timed.matmul_backward_input = mm_bwd_in;
    timed.matmul_backward_weight = mm_bwd_w;
    if (real->matmul_forward_w16) timed.matmul_forward_w16 = mm_fwd16; // NULL stays NULL (the caller widens)
    if (real->matmul_backward_input_w16) timed.matmul_backward_input_w16 = mm_bwd_in16;
    if (real->matmul_forward_w16_n) timed.matmul_forward_w16_n = mm_fwd16n;
    if (real->matmul_backward_weight_n) timed.matmul_backward_weight_n = mm_bwd_wn;
    if (real->matmul_backward_input_w16_k) timed.matmul_backward_input_w16_k = mm_bwd_in16k;
    if (real->rmsnorm_forward16) { // the BF16 activations: all or none (backend.h)
        timed.rmsnorm_forward16 = norm_fwd16;
        timed.matmul_forward_w16_n_x = mm_fwd_x;
        timed.matmul_backward_input_x = mm_bwd_in_x;
        timed.matmul_backward_weight_n_x = mm_bwd_wn_x;
        timed.swiglu_forward16 = swiglu_fwd16;
        timed.swiglu_backward16 = swiglu_bwd16;
        timed.rope_forward16 = rope_fwd16;
        timed.rope_backward16 = rope_bwd16;
        timed.attention_forward16 = att_fwd16;
        timed.attention_backward16 = att_bwd16;
    }
    if (real->residual_rmsnorm_forward16) {
        timed.residual_rmsnorm_forward16 = res_norm16;
        timed.add_inplace16 = add16;
        timed.rmsnorm_backward16 = norm_bwd16;
    }
    timed.attention_forward = att_fwd;
    timed.attention_backward = att_bwd;
    timed.rmsnorm_forward = norm_fwd;
    timed.rmsnorm_backward = norm_bwd;
    timed.swiglu_forward = swiglu_fwd;
    timed.swiglu_backward = swiglu_bwd;
    timed.rope_forward = rope_fwd;
    timed.rope_backward = rope_bwd;
    timed.add_inplace = add;
    timed.bf16_to_f32_n = to_f32;
    timed.bf16_from_f32_n = from_f32;
    timed.bf16_round_n = round_n;
    timed.embedding_forward = emb_fwd;
    timed.embedding_backward = emb_bwd;
    timed.crossentropy_fold = ce_fold;
    timed.crossentropy_loss = ce_loss;
    timed.crossentropy_backward = ce_bwd;
    timed.sumsq_blocks = sum_sq_blocks;
    timed.adamw_update = adamw;
    timed_be->ops = &timed;
    real_vt = timed_be->vt;
    if (real_vt) {
        timed_vt = *real_vt;
        timed_vt.copy = vt_copy;
        timed_vt.memset = vt_memset;
        timed_be->vt = &timed_vt;
    }
}

static double opt_ms_warm; // the tier's optimizer time after the warm-up step

static void on_step(trainer_t *tr, int step, void *arg) {
    (void)arg;
    if (step != 1) return;
    counting = 1; // the warm-up's ops are not counted
    trainer_info_t info;
    trainer_info(tr, &info);
    opt_ms_warm = info.tier.opt_ms;
}

int bench_train(const config_t *cfg_in) {
    config_t cfg = *cfg_in; // shape M, T and B where the flags left them: cli_parse (config_bench_train_defaults)
    cfg.command = CMD_TRAIN;
    const int steps = cfg.steps_given ? cfg.steps : 5; // 1 warm-up + 4 timed
    if (steps < 2) usage_error("bench train: --steps %d: at least 2 (one warm-up step is not timed)", steps);
    cfg.steps = steps;
    cfg.eval_every = 0;
    char err[768];
    if (backend_resolve_config(&cfg, err, sizeof err) != 0) usage_error("bench train: %s", err);
    profile_t prof;
    const profile_t *rates = train_load_profile(&cfg, &prof);
    model_t m;
    model_init(&m, &cfg);
    char why[512];
    plan_t *p = bench_plan(&cfg, &m, rates, why, sizeof why, "bench train");
    printf("bench train: model %s (L %d, C %d, heads %d/%d, F %d, V %d), %.2fM parameters, batch %d x seq %d x accum "
           "%d, %d steps (1 warm-up), recompute %d of %d blocks, device %s\n",
           cfg.preset[0] ? cfg.preset : "custom", m.L, m.C, m.NH, m.NKV, m.F, m.V, m.num_params / 1e6, cfg.B, cfg.T,
           cfg.accum, steps, m.L - (cfg.kept_blocks < m.L ? cfg.kept_blocks : m.L), m.L,
           cfg.device == DEVICE_CUDA ? "cuda" : "cpu");
    if (why[0]) printf("%s\n", why);
    fflush(stdout);
    bench_run_t r;
    bench_hook_t hook = {on_init, on_step, NULL};
    memset(op_ms, 0, sizeof op_ms);
    opt_ms_warm = 0;
    memset(cp_calls, 0, sizeof cp_calls);
    memset(cp_bytes, 0, sizeof cp_bytes);
    counting = 0;
    int rc = bench_run_steps_hooked(&cfg, steps, &hook, &r, err, sizeof err);
    if (rc != 0) fail_with(rc, "bench train: %s", err);
    const int timed_steps = steps - 1;
    const double tokens = (double)cfg.B * cfg.T * cfg.accum, tok_s = tokens / (r.step_ms / 1e3);
    const double gflops = p->flops_per_step / (r.step_ms / 1e3) / 1e9;
    // the matmuls' rate on the run's operands (fp32 mode: FP32, not the BF16 values' tiles)
    const int fp32 = cfg.precision == PREC_FP32 && rates && rates->gemm_fp32_flops > 0;
    const double peak = rates ? (fp32 ? rates->gemm_fp32_flops : rates->gemm_flops) / 1e9 : 0;
    double ms[NOPS], other = r.step_ms;
    for (int k = 0; k < NOPS; k++) ms[k] = op_ms[k] / timed_steps;
    // the CPU backend's host update runs on the compute thread (lay.upd_inline) on AdamW's
    // kernel, not through the op table: its time is the tier's optimizer counter's, after the warm-up
    if (r.info.upd_inline) ms[OP_UPDATE] += (r.info.tier.opt_ms - opt_ms_warm) / timed_steps;
    for (int k = 0; k < NOPS; k++) other -= ms[k];
    const double wait = r.info.sched.wait_ms / steps; // over every step: the counter is the run's
    other -= wait;
    if (other < 0) other = 0;
    static const char *const what[NOPS] = {"GEMMs (matmul fwd, bwd input, weight)", "attention (fwd, bwd)",
                                           "RMSNorm (fwd, bwd)", "SwiGLU (fwd, bwd)", "RoPE and residual adds",
                                           "BF16 conversions and rounding", "embedding and cross-entropy",
                                           "AdamW and the gradient norm", "copies and memsets (device)"};
    printf("%-40s %12s\n", "what", "per step");
    printf("%-40s %9.1f ms  (median of %d)\n", "step", r.step_ms, timed_steps);
    for (int k = 0; k < NOPS; k++) printf("%-40s %9.1f ms  %5.1f%%\n", what[k], ms[k], 100 * ms[k] / r.step_ms);
    printf("%-40s %9.1f ms  %5.1f%%\n", "waiting for parameters", wait, 100 * wait / r.step_ms);
    printf("%-40s %9.1f ms  %5.1f%%\n", "the rest (the step's own work)", other, 100 * other / r.step_ms);
    double ncp = 0, bcp = 0;
    for (int k = 0; k < NCP; k++) {
        cp_calls[k] /= timed_steps;
        cp_bytes[k] /= timed_steps;
        ncp += cp_calls[k];
        bcp += cp_bytes[k];
    }
    if (ncp > 0) {
        static const char *const cpw[NCP] = {"host to device", "device to host", "device to device", "memsets"};
        printf("copies and memsets per step:");
        for (int k = 0; k < NCP; k++) {
            char b[32];
            printf("%s %s %.0f (%s)", k ? "," : "", cpw[k], cp_calls[k], format_bytes(b, sizeof b, (uint64_t)cp_bytes[k]));
        }
        printf("\n");
    }
    printf("tokens/s %.1f; executed %.1f GFLOP/s (the plan's %.3g TFLOP per step)%s", tok_s, gflops,
           p->flops_per_step / 1e12, peak > 0 ? "" : "\n");
    if (peak > 0) printf(", %.2f of the calibrated GEMM rate %.1f GFLOP/s\n", gflops / peak, peak);
    printf("params_hash %016llx\n", (unsigned long long)r.hash);
    printf("{\"bench\":\"train\",\"tok_per_s\":%.1f,\"gflops\":%.1f,\"gemm_fraction\":%.3f,\"step_ms\":%.1f,"
           "\"gemm_ms\":%.1f,\"attention_ms\":%.1f,\"norm_ms\":%.1f,\"swiglu_ms\":%.1f,\"rope_add_ms\":%.1f,"
           "\"bf16_ms\":%.1f,\"loss_ms\":%.1f,\"update_ms\":%.1f,\"copy_ms\":%.1f,\"copy_calls\":%.0f,\"copy_bytes\":%.0f,"
           "\"wait_ms\":%.1f,\"other_ms\":%.1f,\"kept_blocks\":%d,"
           "\"params_hash\":\"%016llx\"}\n",
           tok_s, gflops, peak > 0 ? gflops / peak : 0, r.step_ms, ms[OP_GEMM], ms[OP_ATTN], ms[OP_NORM], ms[OP_SWIGLU],
           ms[OP_ROPE_ADD], ms[OP_BF16], ms[OP_LOSS], ms[OP_UPDATE], ms[OP_COPY], ncp, bcp, wait, other, cfg.kept_blocks, (unsigned long long)r.hash);
    free(p);
    model_free(&m);
    return 0;
}
