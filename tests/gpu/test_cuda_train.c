// test_cuda_train.c — the trainer on the CUDA backend (DESIGN §6; issue 5's GPU tests):
//  - a full training step on the GPU against the same step on the CPU backend, for `tiny`
//    and `small`: the losses and gradient norms of three steps agree within the BF16
//    tolerances named below (the GPU's matmuls and attention sum in other orders, and
//    BF16 rounding of activations turns those last-bit differences into BF16-ulp ones);
//  - placement invariance on the GPU: parameters on device/host/NVMe, gradients on
//    device/host, the optimizer on host/device/NVMe, both schedules, both checkpoint homes
//    and --recompute none / 1 (kept blocks) give the same losses and the same params_hash bits as the all-resident GPU run
//    (the same ops in the same order on the same device; AdamW on the GPU performs the
//    CPU's IEEE sequence, so --optimizer device matches --optimizer host bit for bit);
//  - bf16 mode's BF16 activations (tier.h act16) keep the bits of FP32 ones, kept, recomputed,
//    streamed, chunked;
//  - a cut vocabulary (3 chunks, a ragged last quantum): logits kept or computed again,
//    the head resident or streamed, the same bits, and the CPU's losses within tolerance;
//  - device memory: the arena's high-water mark stays within --hbm-budget, the device's
//    own free-memory count moves by no more than the budget plus the runtime's slack, and
//    a budget too small for the model fails at init naming --hbm-budget;
//  - --device auto picks the GPU.
// The trainer is driven through its API (step.h) with configurations parsed by cli_parse,
// as `tiertrain train` does. Skips (exit 77) without a GPU or without CUDA in the build.
// Every test builds its trainer (and so its CUDA context) in its own forked process; the
// parent never touches CUDA (gpu_probe.h). Without a GPU, tests/gpu/emu/run.sh runs this
// suite against the CPU emulation of the kernels (a check of the wiring's data flow only).
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backend.h"
#include "config.h"
#include "trainer.h"
#include "util.h"
#include "testutil.h"
#ifdef TT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "gpu_probe.h"
#endif

#ifndef TT_HAVE_CUDA
int main(void) {
    fprintf(stderr, "test_cuda_train: this build has no CUDA support: skipped\n");
    return 77;
}
#else

#define NSTEPS 3
#define MiB ((uint64_t)1 << 20)
// GPU against CPU, BF16 mode, relative. Step 1's loss is a forward over identical BF16
// weights: only the summation orders differ, so the per-row losses agree to ~1e-3 and
// their mean closer. Later losses and every norm also carry the update's response to
// gradients that differ in BF16-ulp places (2⁻⁸ relative per element): the norm is a sum
// over all of them, so its difference stays near 2⁻⁸/√(count) — far below 2e-2, which
// is still far below what a wrong index, missing term or unscaled gradient gives (O(1)).
static const double TOL_LOSS_REL = 5e-3;
static const double TOL_NORM_REL = 2e-2;
// Device memory the CUDA runtime may take after init beyond the budget (cuBLASLt's lazily
// loaded kernels, small internal allocations).
#define RUNTIME_SLACK (256 * MiB)

static char *nvme_dir;

typedef struct {
    double loss[NSTEPS], norm[NSTEPS];
    long norms16, att16; // calls of rmsnorm_forward16 and attention_forward16: the step took BF16
                         // activations (tier.h act16, att16)
    uint64_t hash, peak, budget;
    size_t dev_used; // device bytes in use before trainer_free, less those before init (cuda)
    char backend[16];
} run_t;

static uint64_t mix(uint64_t z) { // splitmix64
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t mem_free(void) {
    size_t f = 0, t = 0;
    ck_assert_int_eq(cudaMemGetInfo(&f, &t), cudaSuccess);
    return f;
}

// The backend's table with rmsnorm_forward16 and attention_forward16 counted (run installs it)
static const backend_ops_t *real_ops;
static long norms16, att16;
static void counted_rmsnorm_forward16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                                      float eps) {
    norms16++;
    real_ops->rmsnorm_forward16(out, rstd, x, w, N, C, eps);
}
static int counted_attention_forward16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                                       const uint16_t *v, int B, int T, int NH, int NKV, int HS) {
    att16++;
    return real_ops->attention_forward16(out, lse, q, k, v, B, T, NH, NKV, HS);
}

// `tiertrain train --model M --device D` with the common flags, NSTEPS steps on tokens
// drawn from a fixed seed (the same for every run), through trainer_train_step.
static void run(const char *model, const char *device, const char *const *extra, run_t *r) {
    char *argv[64];
    int n = 0;
    const char *base[] = {"tiertrain", "train", "--model", model, "--device", device, "--steps", "3", "--warmup", "1",
                          "--batch", "2", "--quiet", "--nvme-path", nvme_dir, NULL};
    for (int i = 0; base[i]; i++) argv[n++] = (char *)base[i];
    int seq_given = 0, budget_given = 0;
    for (int i = 0; extra && extra[i]; i++) {
        if (strcmp(extra[i], "--seq") == 0) seq_given = 1;
        if (strcmp(extra[i], "--hbm-budget") == 0) budget_given = 1;
        argv[n++] = (char *)extra[i];
    }
    if (!seq_given) {
        argv[n++] = "--seq";
        argv[n++] = strcmp(model, "tiny") == 0 ? "64" : "128";
    }
    if (!budget_given && strcmp(device, "cpu") != 0) { // not the whole GPU for a small model
        argv[n++] = "--hbm-budget";
        argv[n++] = "2G";
    }
    argv[n] = NULL;
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cli_parse(n, argv, &cfg);

    memset(r, 0, sizeof *r);
    size_t free0 = 0;
    if (strcmp(device, "cpu") != 0) {
        ck_assert_int_eq(cudaFree(NULL), cudaSuccess); // the context first, so it is not counted
        free0 = mem_free();
    }
    trainer_t *tr = NULL;
    char err[768] = "";
    int rc = trainer_init(&tr, &cfg, err, sizeof err);
    ck_assert_msg(rc == 0, "trainer_init (%s on %s): %s", model, device, err);
    trainer_info_t info;
    trainer_info(tr, &info);
    snprintf(r->backend, sizeof r->backend, "%s", info.backend);
    backend_t *be = trainer_backend(tr);
    static backend_ops_t counted;
    real_ops = be->ops;
    counted = *real_ops;
    if (counted.rmsnorm_forward16) counted.rmsnorm_forward16 = counted_rmsnorm_forward16;
    if (counted.attention_forward16) counted.attention_forward16 = counted_attention_forward16;
    be->ops = &counted;
    norms16 = att16 = 0;
    const size_t N = (size_t)cfg.B * (size_t)cfg.T * (size_t)cfg.accum;
    int *tokens = malloc(N * sizeof(int)), *targets = malloc(N * sizeof(int));
    ck_assert(tokens && targets);
    for (int t = 1; t <= NSTEPS; t++) {
        for (size_t i = 0; i < N; i++) {
            tokens[i] = (int)(mix(((uint64_t)t << 32) + 2 * i) % (uint64_t)cfg.V);
            targets[i] = (int)(mix(((uint64_t)t << 32) + 2 * i + 1) % (uint64_t)cfg.V);
        }
        double loss = 0, norm = 0;
        float lr = 0;
        rc = trainer_train_step(tr, t, tokens, targets, &loss, &norm, &lr, err, sizeof err);
        ck_assert_msg(rc == 0, "step %d: %s", t, err);
        ck_assert_msg(isfinite(loss) && isfinite(norm), "step %d: loss %g, norm %g", t, loss, norm);
        r->loss[t - 1] = loss;
        r->norm[t - 1] = norm;
    }
    r->norms16 = norms16;
    r->att16 = att16;
    be->ops = real_ops;
    ck_assert_msg(trainer_params_hash(tr, &r->hash, err, sizeof err) == 0, "%s", err);
    trainer_info(tr, &info);
    r->peak = info.device_peak;
    r->budget = info.device_budget;
    if (strcmp(info.backend, "cuda") == 0) {
        size_t f = mem_free();
        r->dev_used = free0 > f ? free0 - f : 0;
    }
    trainer_free(tr);
    free(tokens);
    free(targets);
}

static int rel_close(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

// ---------------------------------------------------------------- GPU against CPU

static void gpu_vs_cpu(const char *model) {
    run_t cpu, gpu;
    run(model, "cpu", NULL, &cpu);
    run(model, "cuda", NULL, &gpu);
    ck_assert_str_eq(cpu.backend, "cpu");
    ck_assert_str_eq(gpu.backend, "cuda");
    for (int t = 0; t < NSTEPS; t++) {
        fprintf(stderr, "test_cuda_train: %s step %d: loss gpu %.7f cpu %.7f, norm gpu %.6f cpu %.6f\n", model, t + 1,
                gpu.loss[t], cpu.loss[t], gpu.norm[t], cpu.norm[t]);
        ck_assert_msg(rel_close(gpu.loss[t], cpu.loss[t], TOL_LOSS_REL), "%s step %d: loss %.7f on the GPU, %.7f on the CPU",
                      model, t + 1, gpu.loss[t], cpu.loss[t]);
        ck_assert_msg(rel_close(gpu.norm[t], cpu.norm[t], TOL_NORM_REL), "%s step %d: grad norm %.6f on the GPU, %.6f on the CPU",
                      model, t + 1, gpu.norm[t], cpu.norm[t]);
    }
    // the weights moved: a step that skipped the update would leave the hash of the init
    ck_assert(gpu.loss[NSTEPS - 1] != gpu.loss[0]);
}

START_TEST(test_step_tiny) { gpu_vs_cpu("tiny"); }
END_TEST

START_TEST(test_step_small) {
    if (getenv("TT_GPU_EMU")) { // the emulation runs each GPU thread as a fiber: small takes too long there
        fprintf(stderr, "test_cuda_train: small skipped under emulation\n");
        return;
    }
    gpu_vs_cpu("small");
}
END_TEST

// tiny on the GPU with kept (whatever the backward can keep) and again (computed again and
// streamed): the same bits; and the CPU's run of kept within the tolerances (losses, norms).
static void kept_vs_again(const char *const *kept, const char *const *again, const char *what) {
    run_t a, b, c;
    run("tiny", "cuda", kept, &a);
    run("tiny", "cuda", again, &b);
    run("tiny", "cpu", kept, &c);
    ck_assert_msg(a.hash == b.hash, "%s: kept %016llx, computed again and streamed %016llx", what,
                  (unsigned long long)a.hash, (unsigned long long)b.hash);
    for (int t = 0; t < NSTEPS; t++) {
        ck_assert_msg(a.loss[t] == b.loss[t], "%s, step %d: loss %.9g kept, %.9g computed again", what, t + 1, a.loss[t],
                      b.loss[t]);
        ck_assert_msg(rel_close(a.loss[t], c.loss[t], TOL_LOSS_REL), "%s, step %d: loss %.7f on the GPU, %.7f on the CPU",
                      what, t + 1, a.loss[t], c.loss[t]);
        ck_assert_msg(rel_close(a.norm[t], c.norm[t], TOL_NORM_REL),
                      "%s, step %d: grad norm %.6f on the GPU, %.6f on the CPU", what, t + 1, a.norm[t], c.norm[t]);
    }
}

// A cut vocabulary on the GPU (model.h): tiny's 4100 rows are 3 chunks, the last one ragged
// (a quantum 4 columns wide). The logits kept or computed again, the head's chunks resident or
// streamed from the host.
START_TEST(test_cut_vocab) {
    static const char *const kept[] = {"--vocab", "4100", "--accum", "2", "--recompute", "none", NULL};
    static const char *const again[] = {"--vocab", "4100", "--accum", "2", "--recompute", "full", "--params", "host",
                                        "--grads", "host", NULL};
    kept_vs_again(kept, again, "cut vocabulary");
}
END_TEST

// The MLP in chunks of rows on the GPU (model.h; TT_TEST_MLP_ROWS=48 cuts tiny's 128 rows into
// 48 + 48 + 32): kept attention halves or recomputed blocks, resident or streamed parameters.
START_TEST(test_mlp_chunks) {
    static const char *const kept[] = {"--recompute", "none", NULL};
    static const char *const again[] = {"--recompute", "full", "--params", "host", "--grads", "host", NULL};
    setenv("TT_TEST_MLP_ROWS", "48", 1);
    kept_vs_again(kept, again, "MLP chunks");
    unsetenv("TT_TEST_MLP_ROWS");
}
END_TEST

// bf16 mode's activations as BF16 halves on the GPU (tier.h act16, att16: the norms' outputs,
// the MLP's intermediates, and tiny's head size 16 puts the attention half's on the register-
// tiled kernels) against FP32 words holding the same values (TT_TEST_FP32_ACTS): the same
// losses and bits, with blocks kept or recomputed, streamed tiers,
// both schedules, host checkpoints, and the MLP in chunks.
static const char *const acts_settings[][16] = {
    {"--recompute", "none", NULL},
    {"--recompute", "full", "--schedule", "horizontal", "--accum", "2", NULL},
    {"--recompute", "1", "--checkpoints", "host", "--schedule", "vertical", "--accum", "2", "--params", "host", NULL},
    {"--params", "nvme", "--grads", "host", "--optimizer", "nvme", "--prefetch", "1", NULL},
    {"--recompute", "1", "--accum", "2", "--schedule", "horizontal", "--params", "host", "--grads", "host", NULL},
};

// each setting with the MLP whole, and the two that compute it again in chunks (emulation is slow)
static const int acts_cases[][2] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {1, 1}, {2, 1}};
enum { NACTS_CASES = sizeof acts_cases / sizeof acts_cases[0] };

START_TEST(test_bf16_acts) {
    const char *const *set = acts_settings[acts_cases[_i][0]];
    const int chunked = acts_cases[_i][1];
    if (chunked) setenv("TT_TEST_MLP_ROWS", "48", 1);
    run_t h, f;
    run("tiny", "cuda", set, &h);
    setenv("TT_TEST_FP32_ACTS", "1", 1);
    run("tiny", "cuda", set, &f);
    unsetenv("TT_TEST_FP32_ACTS");
    unsetenv("TT_TEST_MLP_ROWS");
    char flags[256] = "";
    for (int k = 0; set[k]; k++) {
        strcat(flags, " ");
        strcat(flags, set[k]);
    }
    ck_assert_msg(h.norms16 > 0 && f.norms16 == 0 && h.att16 > 0 && f.att16 == 0,
                  "%s: rmsnorm_forward16 and attention_forward16 ran %ld and %ld times with BF16 activations, %ld and "
                  "%ld without", flags, h.norms16, h.att16, f.norms16, f.att16);
    for (int t = 0; t < NSTEPS; t++)
        ck_assert_msg(h.loss[t] == f.loss[t], "%s%s: step %d loss %.9g with BF16 activations, %.9g with FP32", flags,
                      chunked ? ", the MLP in chunks" : "", t + 1, h.loss[t], f.loss[t]);
    ck_assert_msg(h.hash == f.hash, "%s%s: params_hash %016llx with BF16 activations, %016llx with FP32", flags,
                  chunked ? ", the MLP in chunks" : "", (unsigned long long)h.hash, (unsigned long long)f.hash);
}
END_TEST

// ---------------------------------------------------------------- placement invariance

#define BASE "--accum", "2", "--schedule", "horizontal", "--checkpoints", "device"
static const char *const reference[] = {BASE, NULL};
static const char *const placements[][20] = {
    {BASE, "--params", "host", NULL},
    {BASE, "--params", "host", "--grads", "host", "--prefetch", "0", NULL},
    {BASE, "--params", "nvme", "--optimizer", "nvme", "--prefetch", "1", NULL},
    {BASE, "--optimizer", "device", NULL},
    {BASE, "--optimizer", "device", "--params", "host", "--grads", "host", NULL},
    {"--accum", "2", "--schedule", "vertical", "--checkpoints", "host", "--params", "nvme", "--host-cache", "1M",
     "--grads", "host", NULL},
    // gradients on NVMe: copied down through staging and written a visit later; horizontal
    // --accum reads each partial sum back up
    {"--accum", "2", "--schedule", "horizontal", "--params", "host", "--grads", "nvme", "--optimizer", "nvme", NULL},
    {"--accum", "2", "--schedule", "vertical", "--checkpoints", "host", "--params", "nvme", "--grads", "nvme",
     "--optimizer", "nvme", NULL},
    // --recompute: kept blocks' intermediates in device buffers of their own, both schedules
    {BASE, "--recompute", "none", NULL},
    {"--accum", "2", "--schedule", "vertical", "--checkpoints", "host", "--recompute", "1", "--params", "host", NULL},
};
#undef BASE
enum { NPLACEMENTS = sizeof placements / sizeof placements[0] };

// The all-resident run that every placement is held to, run once per process: the first
// iteration (each runs in a process of its own) writes it to ref_path, the later ones read it.
// Under the emulation that halves the placement case (run.sh runs it three times).
static char *ref_path;
static void reference_run(run_t *ref) {
    FILE *f = fopen(ref_path, "rb");
    if (f) {
        size_t got = fread(ref, sizeof *ref, 1, f);
        ck_assert_int_eq(fclose(f), 0);
        if (got == 1) return;
    }
    run("tiny", "cuda", reference, ref);
    f = fopen(ref_path, "wb"); // (a short file, from an iteration killed while writing it, is read as none)
    ck_assert_msg(f != NULL, "%s: %s", ref_path, strerror(errno));
    ck_assert(fwrite(ref, sizeof *ref, 1, f) == 1);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_placement_invariance) {
    run_t ref, r;
    reference_run(&ref);
    run("tiny", "cuda", placements[_i], &r);
    char flags[512] = "";
    for (int k = 0; placements[_i][k]; k++) {
        strcat(flags, " ");
        strcat(flags, placements[_i][k]);
    }
    for (int t = 0; t < NSTEPS; t++)
        ck_assert_msg(r.loss[t] == ref.loss[t], "%s: step %d loss %.9g, all resident %.9g", flags, t + 1, r.loss[t],
                      ref.loss[t]);
    ck_assert_msg(r.hash == ref.hash, "%s: params_hash %016llx, all resident %016llx", flags,
                  (unsigned long long)r.hash, (unsigned long long)ref.hash);
}
END_TEST

// ---------------------------------------------------------------- memory

START_TEST(test_peak_memory) {
    // small streams its parameters from the host under a budget; the emulation runs tiny
    const char *budget[] = {"--hbm-budget", "256M", "--params", "host", NULL};
    run_t r;
    run(getenv("TT_GPU_EMU") ? "tiny" : "small", "cuda", budget, &r);
    ck_assert_uint_eq(r.budget, 256 * MiB);
    ck_assert_msg(r.peak <= r.budget, "arena peak %llu over the budget %llu", (unsigned long long)r.peak,
                  (unsigned long long)r.budget);
    ck_assert_msg(r.dev_used <= r.budget + 4096 + RUNTIME_SLACK, "the device lost %zu bytes for a budget of %llu",
                  r.dev_used, (unsigned long long)r.budget);
    ck_assert_msg(r.dev_used >= r.budget, "the arena (%llu bytes) is not one allocation made at init: %zu in use",
                  (unsigned long long)r.budget, r.dev_used);
}
END_TEST

START_TEST(test_budget_too_small) {
    const char *argv[] = {"tiertrain", "train", "--model", "small", "--device", "cuda", "--quiet", NULL};
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cli_parse(7, (char **)argv, &cfg);
    // room for the backend's own workspace and scratch and 4 MiB more, not for the model
    cfg.hbm_budget = backend_cuda_overhead(&cfg) + 4 * MiB;
    char want[64], a[32];
    snprintf(want, sizeof want, "--hbm-budget %s with", format_bytes(a, sizeof a, cfg.hbm_budget));
    trainer_t *tr = NULL;
    char err[768] = "";
    int rc = trainer_init(&tr, &cfg, err, sizeof err);
    ck_assert_int_eq(rc, -EDQUOT);
    ck_assert_ptr_null(tr);
    ck_assert_msg(strstr(err, want) && strstr(err, "(raise --hbm-budget)"), "message: %s", err);
}
END_TEST

START_TEST(test_auto_picks_gpu) {
    run_t r;
    run("tiny", "auto", NULL, &r);
    ck_assert_str_eq(r.backend, "cuda");
}
END_TEST

static Suite *train_suite(void) {
    Suite *s = suite_create("cuda_train");
    TCase *tc = tcase_create("step");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_step_tiny);
    tcase_add_test(tc, test_cut_vocab);
    tcase_add_test(tc, test_mlp_chunks);
    tcase_add_test(tc, test_step_small);
    tcase_add_test(tc, test_auto_picks_gpu);
    tcase_add_loop_test(tc, test_bf16_acts, 0, NACTS_CASES);
    suite_add_tcase(s, tc);
    tc = tcase_create("placement");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_placement_invariance, 0, NPLACEMENTS);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_peak_memory);
    tcase_add_test(tc, test_budget_too_small);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    char why[256] = "";
    if (probe_in_child(why, sizeof why) <= 0) {
        fprintf(stderr, "test_cuda_train: no usable GPU (%s): skipped\n", why);
        return 77;
    }
    nvme_dir = tu_tmpdir("cuda_train");
    if (asprintf(&ref_path, "%s/reference.run", nvme_dir) < 0) return EXIT_FAILURE;
    SRunner *sr = srunner_create(train_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    unlink(ref_path);
    free(ref_path);
    rmdir(nvme_dir);
    free(nvme_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
#endif // TT_HAVE_CUDA
