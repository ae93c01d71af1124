// test_tiers.c — placement invariance and budgets through the binary: every placement of
// parameters, gradients and optimizer states (device / host / nvme), every prefetch depth,
// gives the same losses and the same params_hash as the all-device run (DESIGN §3), peak
// device bytes stay under --hbm-budget, NVMe makes feasible what RAM budgets alone are not,
// and an injected I/O error stops the run naming the shard, the file and the error.
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "acts.h" // uses: acts_scratch_total, acts_kept_total
#include "json.h"
#include "kernels.h" // uses: matmul_act16, attention_act16
#include "plan.h"
#include "trainer.h"
#include "testutil.h"
#include "util.h" // uses: format_bytes

typedef struct { int rc; char *out, *err, *log; } run_t;

static char *nvme_dir;

// `tiertrain train` with the common tiny setup plus extra flags; NVMe files under nvme_dir.
static run_t train(const char *const *base, const char *const *extra, char *const *env) {
    char log[1200];
    snprintf(log, sizeof log, "%s/run.jsonl", nvme_dir);
    char *argv[80];
    int n = 0;
    argv[n++] = (char *)tu_binary();
    argv[n++] = "train";
    argv[n++] = "--log";
    argv[n++] = log;
    argv[n++] = "--nvme-path";
    argv[n++] = nvme_dir;
    for (int i = 0; base[i]; i++) argv[n++] = (char *)base[i];
    for (int i = 0; extra && extra[i]; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    run_t r = {0};
    r.rc = tu_run(argv, env, &r.out, &r.err);
    r.log = tu_slurp(log);
    unlink(log);
    return r;
}

static void run_free(run_t *r) { free(r->out); free(r->err); free(r->log); }

// "hash|loss;loss;…" of a run: what must be identical across placements.
static char *fingerprint(const run_t *r) {
    ck_assert_msg(r->rc == 0, "train failed (%d): %s", r->rc, r->err);
    ck_assert_msg(r->log != NULL, "no log");
    const char *h = strstr(r->log, "\"params_hash\":\"");
    ck_assert_msg(h != NULL, "no params_hash in %s", r->log);
    size_t cap = 8192, len = 0;
    char *fp = calloc(cap, 1);
    len += (size_t)snprintf(fp, cap, "%.16s|", h + 15);
    for (const char *p = r->log; (p = strstr(p, "\"loss\":")); p++) {
        size_t k = strcspn(p, ",}");
        ck_assert(len + k + 2 < cap);
        memcpy(fp + len, p + 7, k - 7);
        len += k - 7;
        fp[len++] = ';';
    }
    for (const char *p = r->log; (p = strstr(p, "\"val_loss\":")); p++) {
        size_t k = strcspn(p, ",}");
        ck_assert(len + k + 2 < cap);
        memcpy(fp + len, p + 11, k - 11);
        len += k - 11;
        fp[len++] = 'v';
    }
    return fp;
}

// A number in the run's log: key in the line of event (NULL: the first line, the plan).
static unsigned long long log_u64(const run_t *r, const char *event, const char *key) {
    char k[64], e[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    snprintf(e, sizeof e, "\"event\":\"%s\"", event ? event : "");
    const char *line = event ? strstr(r->log, e) : r->log;
    ck_assert_msg(line != NULL, "no %s line in the log", event);
    const char *p = strstr(line, k), *end = strchr(line, '\n');
    ck_assert_msg(p != NULL && (!end || p < end), "the %s line lacks %s", event ? event : "plan", key);
    return strtoull(p + strlen(k), NULL, 10);
}

static unsigned long long summary_u64(const run_t *r, const char *key) { return log_u64(r, "summary", key); }

static void setup(void) { nvme_dir = tu_tmpdir("tiers"); }
static void teardown(void) { rmdir(nvme_dir); free(nvme_dir); }

// ---------------------------------------------------------------- placement invariance

// A covering subset of params {device, host, nvme} × grads {device, host} × optimizer
// {device, host, nvme} × prefetch {0, 1, 3} × schedule {horizontal, vertical} × checkpoints
// {device, host}: every pair of values of any two of the first four factors appears, and
// each schedule meets every params home, grads home and checkpoint home. --host-cache (a
// part of the parameters, or all of them) rides on NVMe-resident parameters, and
// --optimizer-cache (a part of the states, or all) on NVMe-resident states. The reference
// is all resident, horizontal, checkpoints on the device.
#define H "--schedule", "horizontal"
#define VT "--schedule", "vertical"
static const char *const placements[][16] = {
    {"--params", "host", "--grads", "device", "--optimizer", "host", "--prefetch", "0", VT, "--checkpoints", "host"},
    {"--params", "host", "--grads", "host", "--optimizer", "device", "--prefetch", "1", H, "--checkpoints", "host"},
    {"--params", "host", "--grads", "host", "--optimizer", "nvme", "--prefetch", "3", VT, "--checkpoints", "device",
     "--optimizer-cache", "1M"},
    {"--params", "nvme", "--grads", "device", "--optimizer", "nvme", "--prefetch", "0", H, "--checkpoints", "device",
     "--host-cache", "1M"},
    {"--params", "nvme", "--grads", "host", "--optimizer", "host", "--prefetch", "1", VT, "--checkpoints", "host",
     "--host-cache", "64M"},
    {"--params", "nvme", "--grads", "host", "--optimizer", "device", "--prefetch", "3", H, "--checkpoints", "host"},
    {"--params", "device", "--grads", "host", "--optimizer", "nvme", "--prefetch", "1", VT, "--checkpoints", "device"},
    {"--params", "device", "--grads", "device", "--optimizer", "nvme", "--prefetch", "0", H, "--checkpoints", "host"},
    {"--params", "nvme", "--grads", "device", "--optimizer", "host", "--prefetch", "8", VT, "--checkpoints",
     "device"}, // prefetch deeper than the slots
    {"--params", "device", "--grads", "host", "--optimizer", "device", "--prefetch", "3", H, "--checkpoints", "device"},
    // --grads nvme (with --optimizer nvme): horizontal --accum reads partial sums back, vertical
    // writes each shard's gradient once
    {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", "--prefetch", "1", H, "--checkpoints", "device"},
    {"--params", "host", "--grads", "nvme", "--optimizer", "nvme", "--prefetch", "2", VT, "--checkpoints", "host"},
    {"--params", "device", "--grads", "nvme", "--optimizer", "nvme", "--prefetch", "0", H, "--checkpoints", "host",
     "--io-verify", "--optimizer-cache", "64M"},
};
#undef H
#undef VT
enum { NPLACEMENTS = sizeof placements / sizeof placements[0] };

static const char *const reference[] = {"--schedule", "horizontal", "--checkpoints", "device", NULL};

static void check_invariance(const char *const *base, int i) {
    const char *const *extra = placements[i];
    run_t ref = train(base, reference, NULL);
    run_t r = train(base, extra, NULL);
    char *a = fingerprint(&ref), *b = fingerprint(&r);
    char what[512] = "";
    for (int k = 0; k < 16 && extra[k]; k++) {
        strcat(what, " ");
        strcat(what, extra[k]);
    }
    ck_assert_msg(strcmp(a, b) == 0, "placement%s changed the bits:\n  reference: %s\n  this:      %s", what, a, b);
    free(a); free(b);
    run_free(&ref); run_free(&r);
}

// bf16, untied, accumulation: 4 steps, evaluation on steps 2 and 4.
static const char *const base_bf16[] = {"--model", "tiny", "--steps", "4", "--accum", "2", "--batch", "2",
                                        "--seq", "32", "--eval-every", "2", "--eval-batches", "2", "--quiet", NULL};
// fp32, tied head (the embedding is used twice per pass), odd shapes.
static const char *const base_tied[] = {"--model", "tiny", "--tie", "--precision", "fp32", "--layers", "3",
                                        "--steps", "3", "--accum", "2", "--batch", "2", "--seq", "17",
                                        "--eval-every", "3", "--eval-batches", "1", "--quiet", NULL};

START_TEST(invariance_bf16) { check_invariance(base_bf16, _i); }
END_TEST
START_TEST(invariance_tied_fp32) { check_invariance(base_tied, _i); }
END_TEST

// --recompute: a block that keeps its forward intermediates gives the backward exactly what
// recomputing them would (the same kernels on the same inputs): none, some or all blocks
// kept, in both schedules and with host checkpoints, give the full recompute's bits, and the
// kept ones cost the device what the plan says.
START_TEST(recompute_keeps_bits) {
    static const char *const settings[][8] = {
        {"--recompute", "none", NULL},
        {"--recompute", "1", NULL},
        {"--recompute", "auto", NULL},
        {"--recompute", "none", "--schedule", "horizontal", NULL},
        {"--recompute", "1", "--checkpoints", "host", NULL},
    };
    const char *const *bases[] = {base_bf16, base_tied};
    const char *full[] = {"--recompute", "full", NULL};
    for (int b = 0; b < 2; b++) {
        run_t ref = train(bases[b], full, NULL);
        char *a = fingerprint(&ref);
        unsigned long long dev_full = summary_u64(&ref, "peak_device_bytes");
        for (int i = 0; i < 5; i++) {
            run_t r = train(bases[b], settings[i], NULL);
            char *c = fingerprint(&r);
            ck_assert_msg(!strcmp(a, c), "base %d, --recompute %s %s: the bits changed:\n  full: %s\n  this: %s", b,
                          settings[i][1], settings[i][2] ? settings[i][2] : "", a, c);
            if (i == 0) // every block kept costs device memory, for each held micro-batch
                ck_assert_msg(summary_u64(&r, "peak_device_bytes") > dev_full, "none kept nothing: %llu vs %llu",
                              summary_u64(&r, "peak_device_bytes"), dev_full);
            free(c);
            run_free(&r);
        }
        if (b == 0) { // bf16: a device budget too small for both blocks' FP32 intermediates makes auto keep
                      // them as BF16, in both schedules: the same bits again. Where the FP32 storage keeps
                      // BF16 halves already (acts.h h16: attention's too, on any CPU with FMA), the two
                      // forms are the same bytes and auto never takes BF16, so these runs keep FP32
                      // activations (TT_TEST_FP32_ACTS, whose bits bf16_acts_keep_bits holds to the
                      // halves'); the budgets sit in the middle of windows read off `tiertrain plan`
                      // (vertical 1964K–2440K, horizontal 1560K–1676K)
            static const char *const tight[][10] = {
                {"--recompute", "auto", "--hbm-budget", "2200K", NULL}, // vertical: 2 micro-batches' worth
                {"--recompute", "auto", "--hbm-budget", "1616K", "--schedule", "horizontal", NULL},
            };
            static const char *const says[] = {"2 of 2 blocks keep", "1 of 2 blocks keep"};
            char *fp32[] = {"TT_TEST_FP32_ACTS=1", NULL};
            for (int i = 0; i < 2; i++) {
                run_t r = train(bases[b], tight[i], fp32);
                char *c = fingerprint(&r);
                ck_assert_msg(strstr(r.out, says[i]) && strstr(r.out, ", as BF16)"), "no BF16 kept blocks under %s %s: %s",
                              tight[i][2], tight[i][3], r.out);
                ck_assert_msg(!strcmp(a, c), "BF16 kept blocks%s: the bits changed:\n  full: %s\n  this: %s",
                              i ? " (horizontal)" : "", a, c);
                free(c);
                run_free(&r);
            }
        }
        free(a);
        run_free(&ref);
    }
}
END_TEST

// The last "loss" of a run's log (the final step's).
static double last_loss(const run_t *r) {
    const char *p = NULL;
    for (const char *q = r->log; q && (q = strstr(q, "\"loss\":")); q++) p = q;
    ck_assert_msg(p != NULL, "no loss in the log");
    return strtod(p + 7, NULL);
}

// The MLP in chunks of rows (model_mlp_rows; TT_TEST_MLP_ROWS=32 cuts base_bf16's 64 rows
// into 2 chunks, base_tied's 34 into 32 + 2). Its three weight gradients sum over the
// chunks, and the bits are the same for every placement and --recompute setting: kept blocks
// keep the attention half (FP32 or BF16) and the backward computes each chunk's gate, up and h
// again. With FMA, and on AMX tiles where chunks are whole multiples of their 32 rows, they
// are also the whole-rows run's bits; the losses always agree within rounding, and the scratch
// holds one chunk's gate, up and h instead of every row's.
// bf16 mode's products read the BF16 compute copy straight (the CPU backend packs it,
// kernels.h matmul_forward_w16) and hold it through the block, and so do the LM head's and the
// embedding's (embedding_forward_w16) through each vocabulary chunk; widening every shard's
// weights first, as a device backend does (TT_TEST_WIDEN_WEIGHTS), gives the same bits,
// resident and streamed, with the head tied or not and the vocabulary in 3 chunks.
START_TEST(bf16_weights_keep_bits) {
    char *widen[] = {"TT_TEST_WIDEN_WEIGHTS=1", NULL};
    static const char *const settings[][16] = {
        {"--recompute", "none", NULL},
        {"--params", "nvme", "--grads", "host", "--optimizer", "nvme", "--prefetch", "1", "--recompute", "1", NULL},
        {"--params", "host", "--schedule", "vertical", "--checkpoints", "host", NULL},
        {"--vocab", "5000", "--params", "host", "--recompute", "full", NULL},
        {"--vocab", "5000", "--tie", "--params", "nvme", "--grads", "device", "--optimizer", "nvme", NULL},
    };
    for (int i = 0; i < 5; i++) {
        run_t a = train(base_bf16, settings[i], NULL), b = train(base_bf16, settings[i], widen);
        char *fa = fingerprint(&a), *fb = fingerprint(&b);
        ck_assert_msg(!strcmp(fa, fb), "setting %d (%s %s): BF16 weights packed straight changed the bits:\n  packed:  %s\n  widened: %s",
                      i, settings[i][0], settings[i][1], fa, fb);
        free(fa);
        free(fb);
        run_free(&a);
        run_free(&b);
    }
}
END_TEST

// tiny with two heads of 32 (one kv head): a head size AMX's attention tiles take too (tier.h att16)
static const char *const base_bf16_hs32[] = {"--model", "tiny", "--heads", "2", "--kv-heads", "1", "--steps", "4",
                                             "--accum", "2", "--batch", "2", "--seq", "32", "--eval-every", "2",
                                             "--eval-batches", "2", "--quiet", NULL};

// tiny 1280 wide (heads of 128), one block: a BF16 output's inner dimension over the FMA
// kernels' 512-deep blocks and over AMX's 1024
static const char *const base_bf16_wide[] = {"--model", "tiny", "--layers", "1", "--dim", "1280", "--heads", "10",
                                             "--kv-heads", "10", "--steps", "3", "--accum", "2", "--batch", "2",
                                             "--seq", "32", "--eval-every", "0", "--quiet", NULL};

// bf16 mode's activations that products and these ops alone read — ln1, ln2 and the MLP's
// intermediates, and q, k, v, att, x2 and datt — as BF16 halves (tier.h act16: on the FMA kernels
// or AMX tiles; att16: on the FMA tasks, or AMX tiles for heads of 32) give the bits of FP32
// words holding the same values (TT_TEST_FP32_ACTS): blocks kept (FP32 and BF16 storage) and
// recomputed, the MLP in chunks, host checkpoints and streamed tiers, both schedules, and a
// width of 1280 (halves on the FMA kernels; FP32 words both where AMX tiles run the products).
// On a CPU without FMA both runs keep FP32 activations (said on stderr); the kernels' own tests
// hold the BF16 ops to the FP32 ones everywhere they run.
START_TEST(bf16_acts_keep_bits) {
    char *fp32[] = {"TT_TEST_FP32_ACTS=1", NULL}, *fp32_chunked[] = {"TT_TEST_FP32_ACTS=1", "TT_TEST_MLP_ROWS=32", NULL},
         *chunked[] = {"TT_TEST_MLP_ROWS=32", NULL};
    static const char *const settings[][16] = {
        {"--recompute", "none", NULL},
        {"--recompute", "full", "--schedule", "horizontal", NULL},
        {"--recompute", "auto", "--hbm-budget", "2200K", NULL}, // both blocks kept; FP32 activations' as BF16
        {"--recompute", "1", "--checkpoints", "host", "--schedule", "vertical", NULL},
        {"--params", "nvme", "--grads", "host", "--optimizer", "nvme", "--prefetch", "1", "--recompute", "1", NULL},
    };
    if (!matmul_act16(64)) fprintf(stderr, "bf16_acts_keep_bits: no FMA here: both runs keep FP32 activations\n");
    for (int c = 0; c < 4; c++) // tiny (head size 16); its MLP in chunks; two heads of 32; 1280 wide
        for (int i = 0; i < 5; i++) {
            // (the budget is tiny's; under the sanitizers, 10–30× slower, the wide model kept and streamed alone)
            if (c == 3 && (i == 2 || (tu_sanitized() && i != 0 && i != 4))) continue;
            const char *const *base = c == 3 ? base_bf16_wide : c == 2 ? base_bf16_hs32 : base_bf16;
            run_t a = train(base, settings[i], c == 1 ? chunked : NULL), b = train(base, settings[i], c == 1 ? fp32_chunked : fp32);
            char *fa = fingerprint(&a), *fb = fingerprint(&b);
            ck_assert_msg(!strcmp(fa, fb), "setting %d (%s %s%s): BF16 activations changed the bits:\n  BF16: %s\n  FP32: %s",
                          i, settings[i][0], settings[i][1],
                          c == 1 ? ", the MLP in chunks" : c == 2 ? ", heads of 32" : c == 3 ? ", 1280 wide" : "", fa, fb);
            if (i == 2 && !c) { // halves in the FP32 storage (the same bytes: never as BF16), and words stored as BF16
                ck_assert_msg(strstr(a.out, "2 of 2 blocks keep") && (strstr(a.out, ", as BF16)") == NULL) == (matmul_act16(64) != 0),
                              "%s", a.out);
                ck_assert_msg(strstr(b.out, "2 of 2 blocks keep") && strstr(b.out, ", as BF16)"), "%s", b.out);
            }
            if (c == 3 && i == 0) { // the halves took less of the device, where the products take them
                const unsigned long long pa = summary_u64(&a, "peak_device_bytes"), pb = summary_u64(&b, "peak_device_bytes");
                ck_assert_msg((pa < pb) == (matmul_act16(1280) != 0),
                              "1280 wide: the device's peak %llu with BF16 activations, %llu with FP32", pa, pb);
            }
            free(fa);
            free(fb);
            run_free(&a);
            run_free(&b);
        }
}
END_TEST

START_TEST(mlp_chunks_keep_bits) {
    char *chunked[] = {"TT_TEST_MLP_ROWS=32", NULL}, *chunked_fp32[] = {"TT_TEST_MLP_ROWS=32", "TT_TEST_FP32_ACTS=1", NULL};
    static const char *const settings[][16] = {
        {"--recompute", "none", NULL},
        {"--recompute", "1", "--checkpoints", "host", "--schedule", "vertical", NULL},
        {"--params", "nvme", "--grads", "device", "--optimizer", "nvme", "--prefetch", "0", "--recompute", "1", NULL},
        {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", "--prefetch", "1", "--schedule", "vertical",
         NULL},
        // base_bf16 with FP32 activations (the halves' BF16 storage is their FP32 one: recompute_keeps_bits):
        // both kept, as BF16 (1604K–1792K)
        {"--recompute", "auto", "--hbm-budget", "1700K", NULL},
    };
    const char *const *bases[] = {base_bf16, base_tied};
    const int rows[] = {64, 34}; // B·T of each base
    const char *full[] = {"--recompute", "full", "--schedule", "horizontal", NULL};
    for (int b = 0; b < 2; b++) {
        run_t ref = train(bases[b], full, chunked);
        char *a = fingerprint(&ref);
        const char *says = "; the MLP in 2 chunks of 32 rows\n";
        ck_assert_msg(strstr(ref.out, says), "no '%s' in %s", says, ref.out);
        ck_assert_uint_eq(log_u64(&ref, NULL, "mlp_rows"), 32); // the plan's line in the log
        for (int i = 0; i < (b == 0 ? 5 : 4); i++) {
            run_t r = train(bases[b], settings[i], i == 4 ? chunked_fp32 : chunked);
            char *c = fingerprint(&r);
            ck_assert_msg(!strcmp(a, c), "base %d, chunked MLP, setting %d (%s %s): the bits changed:\n  full: %s\n  this: %s",
                          b, i, settings[i][0], settings[i][1], a, c);
            if (i == 4)
                ck_assert_msg(strstr(r.out, "2 of 2 blocks keep") && strstr(r.out, ", as BF16)"), "%s", r.out);
            free(c);
            run_free(&r);
        }
        run_t whole = train(bases[b], full, NULL);
        char *w = fingerprint(&whole);
        ck_assert_msg(!strstr(whole.out, "the MLP in"), "one chunk, yet: %s", whole.out);
        ck_assert_uint_eq(log_u64(&whole, NULL, "mlp_rows"), (unsigned long long)rows[b]);
        // With FMA, a product's bits follow its operands alone (kernels/cpu/gemm.h): dw summed
        // chunk by chunk is the same fmaf chain over the rows as in one product, so the chunked
        // MLP keeps every bit of the whole one (the log lines above show the chunks ran). On AMX
        // tiles dw adds one tile product per 32 rows in order, and 32-row chunks start each
        // chunk where the whole product starts a tile product: the same sequence, the same bits.
        // On OpenBLAS (no FMA) the split sums differ; the losses below stay close.
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            ck_assert_msg(!strcmp(a, w), "base %d: the MLP in chunks of 32 rows changed the bits:\n  chunks: %s\n  whole:  %s",
                          b, a, w);
        const double lw = last_loss(&whole), lc = last_loss(&ref);
        ck_assert_msg(fabs(lw - lc) <= 1e-4 * fabs(lw), "base %d: final loss %.9g whole, %.9g in chunks", b, lw, lc);
        // gate, up and h: (rows, F) floats each, or BF16 halves where the layout keeps them so
        // (bf16 mode's act16: acts.h sizes them for halves), every buffer whole pages (tiny: F = 192)
        const unsigned long long es = b == 0 && matmul_act16(64) ? 2 : 4, pg = 4096;
        const unsigned long long whole_b = (rows[b] * 192ull * es + pg - 1) / pg * pg,
                                 chunk_b = (32 * 192ull * es + pg - 1) / pg * pg;
        const unsigned long long dw = summary_u64(&whole, "peak_device_bytes"), dc = summary_u64(&ref, "peak_device_bytes");
        ck_assert_msg(dw - dc == 3 * (whole_b - chunk_b), "base %d: device peak %llu whole, %llu in chunks", b, dw, dc);
        free(a); free(w);
        run_free(&ref); run_free(&whole);
    }
}
END_TEST

// The optimizer streams NVMe states a chunk at a time (TT_OPT_CHUNK shrinks the chunk from
// the largest shard to 2048 elements): the same bits, in a host pool smaller by the staging
// it no longer needs.
START_TEST(chunks_change_memory_not_bits) {
    const char *extra[] = {"--params", "nvme", "--optimizer", "nvme", "--prefetch", "1", NULL};
    char *chunked[] = {"TT_OPT_CHUNK=2048", NULL};
    run_t whole = train(base_bf16, extra, NULL);
    run_t part = train(base_bf16, extra, chunked);
    run_t ref = train(base_bf16, reference, NULL);
    char *a = fingerprint(&ref), *b = fingerprint(&whole), *c = fingerprint(&part);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(a, c);
    // tiny's largest shard (a block) is 51200 elements: the staging buffers of (master, m, v),
    // TIER_OPT_STAGING of them but no more than the chunks (whole: its 5 shards), take 2.9 MiB
    // whole, 192 KiB chunked
    const unsigned long long bufs = TIER_OPT_STAGING < 5 ? TIER_OPT_STAGING : 5;
    unsigned long long hw = summary_u64(&whole, "peak_host_bytes"), hp = summary_u64(&part, "peak_host_bytes");
    ck_assert_msg(hw - hp == bufs * 3 * 51200 * 4ull - TIER_OPT_STAGING * 3 * 2048 * 4ull,
                  "host pool: %llu whole, %llu chunked", hw, hp);
    free(a); free(b); free(c);
    run_free(&whole); run_free(&part); run_free(&ref);
}
END_TEST

// --optimizer-cache keeps the update's first chunks of master, m, v in RAM, filled from NVMe by
// the first update and never written back: the same bits, every update after the first reads
// 12 bytes less per cached element and every update writes 12 bytes less (measured: the tier's
// counters; planned: the plan's traffic per step), with the gradients in a home or on NVMe
// (then read alone), and --io-verify checking the cached chunks' CRCs as they fill.
START_TEST(optimizer_cache_saves_reads) {
    static const char *const grads[][2] = {{"host", ""}, {"nvme", ""}, {"nvme", "--io-verify"}};
    char *chunked[] = {"TT_OPT_CHUNK=2048", NULL};
    run_t ref = train(base_bf16, reference, NULL);
    char *a = fingerprint(&ref);
    for (int i = 0; i < 3; i++) {
        // 4 entries of 2048 elements (24 KiB each) in 100K, and the whole model in 64M
        const char *sizes[] = {"none", "100K", "64M"};
        unsigned long long got[3], planned[3], wrote[3], planned_w[3];
        for (int k = 0; k < 3; k++) {
            const char *extra[] = {"--params", "nvme", "--grads", grads[i][0], "--optimizer", "nvme",
                                   "--optimizer-cache", sizes[k], grads[i][1][0] ? grads[i][1] : NULL, NULL};
            run_t r = train(base_bf16, extra, chunked);
            char *b = fingerprint(&r);
            ck_assert_msg(strcmp(a, b) == 0, "--grads %s %s --optimizer-cache %s changed the bits:\n  %s\n  %s",
                          grads[i][0], grads[i][1], sizes[k], a, b);
            got[k] = summary_u64(&r, "nvme_bytes_read") + summary_u64(&r, "nvme_bytes_fresh"); // every fetch's
            planned[k] = log_u64(&r, NULL, "nvme_read_bytes");
            wrote[k] = summary_u64(&r, "nvme_bytes_written");
            planned_w[k] = log_u64(&r, NULL, "nvme_write_bytes");
            free(b);
            run_free(&r);
        }
        for (int k = 1; k < 3; k++) {
            // base_bf16: 4 steps, 4 updates; the first fills the cache
            ck_assert_msg(planned[0] > planned[k] && (planned[0] - planned[k]) % 12 == 0,
                          "plan: reads %llu uncached, %llu with %s", planned[0], planned[k], sizes[k]);
            // and the params_hash at the end reads the cached chunks' master (4 of the 12 bytes;
            // all 12 with --io-verify, whose CRC covers the extent) from their entries: NVMe has
            // only the first update's
            const unsigned long long saved = planned[0] - planned[k], at_end = grads[i][1][0] ? saved : saved / 3;
            ck_assert_msg(got[0] - got[k] == 3 * saved + at_end,
                          "--grads %s %s --optimizer-cache %s: read %llu, %llu uncached; the plan saves %llu a step",
                          grads[i][0], grads[i][1], sizes[k], got[k], got[0], planned[0] - planned[k]);
            // every update, the first too, leaves the cached states where they are
            ck_assert_msg(planned_w[0] - planned_w[k] == planned[0] - planned[k] &&
                              wrote[0] - wrote[k] == 4 * (planned_w[0] - planned_w[k]),
                          "--grads %s %s --optimizer-cache %s: wrote %llu, %llu uncached; the plan saves %llu a step "
                          "(reads: %llu)", grads[i][0], grads[i][1], sizes[k], wrote[k], wrote[0],
                          planned_w[0] - planned_w[k], planned[0] - planned[k]);
        }
        ck_assert_msg(planned[0] - planned[1] == 4 * 2048 * 12ull, "100K: the plan saves %llu",
                      planned[0] - planned[1]);
        if (i == 0) { // auto: RAM to spare for the whole model, said so, the same bits and reads as 64M
            const char *autoc[] = {"--params", "nvme", "--grads", "host", "--optimizer", "nvme", "--optimizer-cache",
                                   "auto", NULL};
            run_t r = train(base_bf16, autoc, chunked);
            char *b = fingerprint(&r);
            ck_assert_msg(strcmp(a, b) == 0, "--optimizer-cache auto changed the bits:\n  %s\n  %s", a, b);
            ck_assert_msg(strstr(r.out, "--optimizer-cache auto: ") && strstr(r.out, "optimizer chunks keep their states "
                                                                                     "in RAM"), "%s", r.out);
            ck_assert_uint_eq(log_u64(&r, NULL, "nvme_read_bytes"), planned[2]);
            ck_assert_uint_eq(summary_u64(&r, "nvme_bytes_read") + summary_u64(&r, "nvme_bytes_fresh"), got[2]);
            free(b);
            run_free(&r);
        }
    }
    free(a);
    run_free(&ref);
    // no states on NVMe: nothing to cache, said so
    const char *bad[] = {"--optimizer", "host", "--optimizer-cache", "1M", NULL};
    run_t r = train(base_bf16, bad, NULL);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "--optimizer-cache 1.0 MiB: caches NVMe-resident optimizer states, but --optimizer is "
                                "not nvme (drop --optimizer-cache or add --optimizer nvme)"), "%s", r.err);
    run_free(&r);
}
END_TEST

// --update backward: without clipping, each shard's update runs beside the backward once its
// gradient is final, on the same inputs as after it: the same bits as the resident run that
// updates after the backward, under every home of the gradients and states, both schedules,
// chunked states with a partial --optimizer-cache, --io-verify and a tied head. An NVMe home's
// final gradient never goes to NVMe: a step writes and reads that much less, as the plan says.
// Where it cannot run, it says why; an I/O error in the update stops the run, named, no hang.
START_TEST(update_in_backward_keeps_bits) {
    static const char *const noclip[] = {"--clip", "0", NULL};
    static const char *const homes[][14] = {
        {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", "--optimizer-cache", "100K", "--schedule",
         "horizontal"},
        {"--params", "host", "--grads", "nvme", "--optimizer", "nvme", "--schedule", "vertical", "--io-verify"},
        {"--params", "nvme", "--grads", "host", "--optimizer", "host", "--prefetch", "0", "--host-cache", "1M"},
        {"--params", "device", "--grads", "device", "--optimizer", "nvme", "--schedule", "horizontal"},
    };
    static const char *const *const bases[] = {base_bf16, base_tied};
    char *chunked[] = {"TT_OPT_CHUNK=2048", NULL};
    for (int b = 0; b < 2; b++) {
        const char *ref_flags[] = {"--clip", "0", "--update", "after", "--schedule", "horizontal", NULL};
        run_t ref = train(bases[b], ref_flags, NULL);
        char *a = fingerprint(&ref);
        // the CPU backend's host update after the backward runs on the compute thread (lay.upd_inline)
        ck_assert_msg(strstr(ref.log, "\"update\":\"inline\""), "%s", ref.log);
        for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
            const char *extra[24];
            int n = 0;
            extra[n++] = "--update";
            extra[n++] = "backward";
            for (int k = 0; noclip[k]; k++) extra[n++] = noclip[k];
            for (int k = 0; k < 14 && homes[i][k]; k++) extra[n++] = homes[i][k];
            extra[n] = NULL;
            run_t r = train(bases[b], extra, chunked);
            char *f = fingerprint(&r);
            ck_assert_msg(strcmp(a, f) == 0, "base %d, homes %zu: --update backward changed the bits:\n  %s\n  %s", b,
                          i, a, f);
            ck_assert_msg(strstr(r.log, "\"update\":\"backward\""), "%s", r.log);
            ck_assert_msg(strstr(r.out, "AdamW, in the backward)") && strstr(r.out, "compute waited "), "%s", r.out);
            free(f);
            run_free(&r);
        }
        free(a);
        run_free(&ref);
    }
    // bytes: 4 steps of accum 2, vertical, --grads nvme: each final gradient (the only visit
    // of each shard) neither written nor read back
    unsigned long long rd[2], wr[2], prd[2], pwr[2];
    for (int k = 0; k < 2; k++) {
        const char *extra[] = {"--clip", "0", "--update", k ? "backward" : "after", "--params", "host", "--grads",
                               "nvme", "--optimizer", "nvme", "--schedule", "vertical", NULL};
        run_t r = train(base_bf16, extra, NULL);
        ck_assert_msg(r.rc == 0, "%s", r.err);
        rd[k] = summary_u64(&r, "nvme_bytes_read");
        wr[k] = summary_u64(&r, "nvme_bytes_written");
        prd[k] = log_u64(&r, NULL, "nvme_read_bytes");
        pwr[k] = log_u64(&r, NULL, "nvme_write_bytes");
        run_free(&r);
    }
    const unsigned long long G = prd[0] - prd[1]; // the FP32 gradients, padded shards
    ck_assert_msg(prd[0] > prd[1] && pwr[0] - pwr[1] == G && G % 4 == 0, "plan: read %llu/%llu, wrote %llu/%llu",
                  prd[0], prd[1], pwr[0], pwr[1]);
    ck_assert_msg(rd[0] - rd[1] == 4 * G && wr[0] - wr[1] == 4 * G, "read %llu/%llu, wrote %llu/%llu; G %llu", rd[0],
                  rd[1], wr[0], wr[1], G);
    // where it cannot run: one line, exit 2
    static const char *const refusals[][2][8] = {
        {{"--update", "backward", NULL}, {"--update backward: needs --clip 0: clipping scales every gradient by the "
                                          "global norm, known only once the backward ends (add --clip 0, or use "
                                          "--update after)"}},
        {{"--update", "backward", "--clip", "0", "--optimizer", "device", NULL},
         {"--update backward: --optimizer device updates on the device once the backward ends (use --optimizer host "
          "or nvme, or --update after)"}},
    };
    for (int i = 0; i < 2; i++) {
        run_t r = train(base_bf16, refusals[i][0], NULL);
        ck_assert_msg(r.rc == 2 && strstr(r.err, refusals[i][1][0]), "exit %d: %s", r.rc, r.err);
        run_free(&r);
    }
    // the update's first read fails (the head's states, the 6th read: after the forward's 5
    // parameter fetches) while the backward has 4 shards to go: named, exit 1, no hang (the
    // backward waits for no slot the update will not give back)
    const char *fextra[] = {"--clip", "0", "--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", NULL};
    char *fenv[] = {"TT_IO_FAULT=read:eio@6", NULL};
    run_t r = train(base_bf16, fextra, fenv);
    ck_assert_msg(r.rc == 1 && strstr(r.err, "step 1: optimizer: nvme read of 'optimizer states of lm_head'") &&
                      strstr(r.err, "Input/output error"),
                  "exit %d: %s", r.rc, r.err);
    run_free(&r);
}
END_TEST

// --update after with the parameters on NVMe: the update publishes a shard as its write home
// begins, and a fetch that comes meanwhile copies the new compute copy instead of reading the
// bytes back. Writes held 30 ms each (TT_IO_FAULT=write:slow=30) keep that window open for
// every shard: 4 updates, each followed by a use of every shard, forward at least 4 × the
// BF16 parameters (2 of the store's 14 bytes a parameter: the plan's nvme_handed_bytes). The
// bits are the resident run's, and the bytes every fetch took (read + forwarded) are those of
// the run without the delay, whose forwarding depends on timing.
START_TEST(update_hands_parameters_to_the_fetch) {
    run_t ref = train(base_bf16, reference, NULL);
    char *a = fingerprint(&ref);
    const char *extra[] = {"--params", "nvme", "--optimizer", "nvme", NULL};
    // writes held 100 ms: a fetch that comes while one is in flight copies the new copy; 30 ms
    // was too short a window under CI's load (one shard's fetch came after its write had landed)
    char *slow[] = {"TT_IO_FAULT=write:slow=100", NULL};
    run_t fast = train(base_bf16, extra, NULL), r = train(base_bf16, extra, slow);
    char *f = fingerprint(&fast), *g = fingerprint(&r);
    ck_assert_msg(strcmp(a, f) == 0 && strcmp(a, g) == 0, "forwarded parameters changed the bits:\n  %s\n  %s\n  %s",
                  a, f, g);
    const unsigned long long store = log_u64(&r, NULL, "nvme_bytes"), fresh = summary_u64(&r, "nvme_bytes_fresh");
    const unsigned long long handed = log_u64(&r, NULL, "nvme_handed_bytes"); // the plan's, per step
    ck_assert_msg(store % 14 == 0 && handed == store / 14 * 2, "the plan hands over %llu bytes; the store is %llu",
                  handed, store);
    ck_assert_msg(fresh >= 4 * handed, "forwarded %llu bytes; the plan hands over %llu a step", fresh,
                  handed); // and more where a shard is fetched again while its write is still held
    ck_assert_uint_eq(summary_u64(&r, "nvme_bytes_read") + fresh,
                      summary_u64(&fast, "nvme_bytes_read") + summary_u64(&fast, "nvme_bytes_fresh"));
    ck_assert_msg(strstr(r.out, " copied from the update's new copies, not read back from NVMe"), "%s", r.out);
    free(a); free(f); free(g);
    run_free(&ref); run_free(&fast); run_free(&r);
}
END_TEST

// Each update after the backward finds its first TIER_OPT_STAGING chunks' states read
// (optimizer_reads_ahead): an update queues the next one's reads as it ends, so that they run
// in the backward, and the trainer queues them where no update did, as the step's backward
// begins: the first step's, and the first after a checkpoint, whose state reads drop the
// queued ones. So the first update, and the one after a save, too, start on read states
// instead of the forward waiting for them.
// base_bf16: 4 updates of 2048-element chunks (more than 4 of them), with --save-every 2 a
// save after the second. The same bits; with every chunk in the --optimizer-cache, no reads
// ahead.
START_TEST(updates_find_their_first_reads) {
    char *chunked[] = {"TT_OPT_CHUNK=2048", NULL};
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/ckpt-ahead", nvme_dir);
    run_t ref = train(base_bf16, reference, NULL);
    const char *extra[] = {"--params", "nvme", "--optimizer", "nvme", NULL};
    const char *saved[] = {"--params", "nvme", "--optimizer", "nvme", "--save", dir, "--save-every", "2", NULL};
    const char *cached[] = {"--params", "nvme", "--optimizer", "nvme", "--optimizer-cache", "64M", NULL};
    run_t r = train(base_bf16, extra, chunked), s = train(base_bf16, saved, chunked);
    run_t c = train(base_bf16, cached, chunked);
    char *a = fingerprint(&ref), *b = fingerprint(&r), *d = fingerprint(&c);
    ck_assert_msg(strcmp(a, b) == 0 && strcmp(a, d) == 0, "reads ahead changed the bits:\n  %s\n  %s\n  %s", a, b, d);
    // (the saving run's log has each checkpoint's hash first: its last line has the run's)
    char want[64];
    snprintf(want, sizeof want, "params_hash %.16s", a);
    ck_assert_msg(s.rc == 0 && strstr(s.out, want), "with saves, not %s: %s%s", want, s.out, s.err);
    ck_assert_uint_eq(summary_u64(&r, "optimizer_reads_ahead"), 4 * TIER_OPT_STAGING);
    ck_assert_uint_eq(summary_u64(&s, "optimizer_reads_ahead"), 4 * TIER_OPT_STAGING);
    ck_assert_uint_eq(summary_u64(&c, "optimizer_reads_ahead"), 0);
    free(a); free(b); free(d);
    run_free(&ref); run_free(&r); run_free(&s); run_free(&c);
    ck_assert_int_eq(tu_rm_rf(dir), 0);
}
END_TEST

// Host-resident gradients: a step's first visit of a shard starts from zeros on the device
// (the update consumed the home) and only the later ones copy the home up, so each step
// copies up what the plan counts and writes every visit back: base_bf16 horizontal, 2
// passes (one of the two visits reads), 4 steps; base_tied also visits the tied embedding
// once after its last pass. The bits are the resident run's.
START_TEST(grads_host_visits_start_from_zeros) {
    const char *const *bases[] = {base_bf16, base_tied};
    const unsigned long long steps[] = {4, 3};
    const char *extra[] = {"--schedule", "horizontal", "--checkpoints", "device", "--grads", "host", NULL};
    for (int b = 0; b < 2; b++) {
        run_t ref = train(bases[b], reference, NULL), r = train(bases[b], extra, NULL);
        char *x = fingerprint(&ref), *y = fingerprint(&r);
        ck_assert_msg(strcmp(x, y) == 0, "--grads host changed the bits:\n  %s\n  %s", x, y);
        const unsigned long long up = log_u64(&r, NULL, "h2d_bytes"), down = log_u64(&r, NULL, "d2h_bytes");
        ck_assert_uint_eq(summary_u64(&r, "h2d_bytes"), steps[b] * up); // the plan's line first, per step
        ck_assert_uint_eq(summary_u64(&r, "d2h_bytes"), steps[b] * down);
        if (b == 0) ck_assert_uint_eq(2 * up, down);
        else ck_assert_msg(up > 0 && 2 * up > down && up < down, "tied: %llu up, %llu down a step", up, down);
        free(x); free(y);
        run_free(&ref); run_free(&r);
    }
}
END_TEST

// The plan's parameter copies per step are the scheduler's: small (8 blocks, more shards than
// slots) streamed from the host at --prefetch 0, 1, 2 and 5, 3 steps without evaluations.
// The slot in use is pinned while the next --prefetch are fetched, so where the forward turns
// into the backward one shard fewer stays than plain Belady would keep (the plan once counted
// one copy a step too few at every --prefetch from 1 to 5).
START_TEST(plan_counts_the_schedulers_copies) {
    static const char *const base_small[] = {"--model", "small", "--seq", "32", "--batch", "1", "--steps", "3",
                                             "--eval-every", "0", "--params", "host", "--quiet", NULL};
    static const char *const prefetch[] = {"0", "1", "2", "5"};
    for (int i = 0; i < 4; i++) {
        const char *extra[] = {"--prefetch", prefetch[i], NULL};
        run_t r = train(base_small, extra, NULL);
        ck_assert_msg(r.rc == 0, "--prefetch %s: exit %d: %s", prefetch[i], r.rc, r.err);
        const unsigned long long plan = log_u64(&r, NULL, "h2d_bytes"), run = summary_u64(&r, "h2d_bytes");
        ck_assert_msg(plan > 0 && run == 3 * plan, "--prefetch %s: the run copied %llu bytes in 3 steps, the plan %llu a "
                      "step", prefetch[i], run, plan);
        run_free(&r);
    }
}
END_TEST

// The vocabulary cut into chunks (model.h): tiny with a vocabulary of 8192 is 4 chunks of
// 2048 rows by default; TT_TEST_VOCAB_CHUNK makes it 2 or 1. The cut changes what a shard
// holds, never a bit (the head works a CE_QUANTUM at a time whatever the chunks), under
// streaming, gradients on NVMe, accumulation in both schedules, both --recompute extremes and
// a tied head (test_ranks cuts it across ranks).
START_TEST(vocab_chunks_keep_bits) {
    static const char *const bases[][24] = {
        {"--model", "tiny", "--vocab", "8192", "--steps", "3", "--accum", "2", "--batch", "2", "--seq", "32",
         "--eval-every", "3", "--eval-batches", "1", "--quiet", NULL},
        {"--model", "tiny", "--vocab", "5000", "--tie", "--precision", "fp32", "--steps", "2", "--accum", "2",
         "--batch", "2", "--seq", "17", "--eval-every", "2", "--eval-batches", "1", "--quiet", NULL},
    };
    static const char *const extras[][16] = {
        {"--schedule", "horizontal", NULL},
        {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", "--prefetch", "1", "--schedule", "horizontal",
         NULL},
        {"--params", "host", "--grads", "host", "--schedule", "vertical", "--checkpoints", "host", NULL},
        // the head's logits computed again in the backward (auto keeps them all where they fit)
        {"--recompute", "full", "--schedule", "horizontal", NULL},
        {"--recompute", "none", "--schedule", "vertical", NULL},
    };
    char *one[] = {"TT_TEST_VOCAB_CHUNK=8192", NULL}, *two[] = {"TT_TEST_VOCAB_CHUNK=4096", NULL};
    char *const *cuts[] = {NULL, two};
    for (int b = 0; b < 2; b++) {
        run_t ref = train(bases[b], extras[0], one);
        ck_assert_msg(ref.rc == 0, "base %d, one chunk: exit %d: %s", b, ref.rc, ref.err);
        char *a = fingerprint(&ref);
        for (int c = 0; c < 2; c++)
            for (int e = 0; e < 5; e++) {
                run_t r = train(bases[b], extras[e], cuts[c]);
                char *f = fingerprint(&r);
                ck_assert_msg(!strcmp(a, f), "base %d, %s chunks, placement %d: the bits changed:\n  one chunk: %s\n"
                              "  this:      %s", b, c ? "2" : "the default", e, a, f);
                free(f);
                run_free(&r);
            }
        free(a);
        run_free(&ref);
    }
    // the default cut: 4 chunks of 2048 rows (the largest block holds fewer), so no shard scales
    // with the vocabulary: the largest is a chunk of 2048 × 64, and the slots hold no more
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    model_preset("tiny", &cfg);
    cfg.V = 8192;
    model_t m;
    model_init(&m, &cfg);
    ck_assert_int_eq(m.vchunks, 4);
    ck_assert_int_eq(m.nshards, 4 + 2 + 1 + 4);
    ck_assert_uint_eq(m.max_shard_numel, 2048 * 64);
    int v0, nv;
    model_vchunk(&m, 3, &v0, &nv);
    ck_assert(v0 == 6144 && nv == 2048);
    model_free(&m);
    cfg.V = 5000; // 2048, 2048, 904
    model_init(&m, &cfg);
    model_vchunk(&m, 2, &v0, &nv);
    ck_assert(m.vchunks == 3 && v0 == 4096 && nv == 904);
    ck_assert_int_eq(m.shards[model_lm_shard(&m, 2)].tensors[0].row0, 4096);
    model_free(&m);
}
END_TEST

// ---------------------------------------------------------------- budgets and capacity

// `small` at batch 1 × seq 32: its states (16 B/parameter ≈ 154 MB) exceed a 32 MiB device
// budget plus a 96 MiB host budget together, so only NVMe makes the run possible; it must
// stay under both budgets and give the all-resident run's bits.
START_TEST(nvme_makes_it_fit) {
    const char *base[] = {"--model", "small", "--batch", "1", "--seq", "32", "--steps", "2", "--eval-every", "0",
                          "--quiet", NULL};
    const char *budget[] = {"--hbm-budget", "40M", "--host-budget", "96M", NULL};
    run_t refused = train(base, budget, NULL);
    ck_assert_int_eq(refused.rc, 2);
    ck_assert_msg(strstr(refused.err, "--hbm-budget 40.0 MiB") && strstr(refused.err, "--params host|nvme"),
                  "message: %s", refused.err);
    const char *offload[] = {"--hbm-budget", "40M", "--host-budget", "96M", "--params", "nvme", "--grads", "host",
                             "--optimizer", "nvme", "--prefetch", "1", NULL};
    run_t r = train(base, offload, NULL);
    run_t ref = train(base, NULL, NULL);
    char *a = fingerprint(&ref), *b = fingerprint(&r);
    ck_assert_str_eq(a, b);
    ck_assert_uint_le(summary_u64(&r, "peak_device_bytes"), 40ull << 20);
    ck_assert_uint_le(summary_u64(&r, "peak_host_bytes"), 96ull << 20);
    ck_assert_uint_gt(summary_u64(&r, "nvme_bytes_read"), 0);
    ck_assert_uint_gt(summary_u64(&r, "nvme_bytes_written"), 0);
    ck_assert_uint_gt(summary_u64(&ref, "peak_device_bytes"), 40ull << 20); // the budget really bit
    // --offload auto finds a placement that fits by itself, says which, and keeps the bits.
    const char *autop[] = {"--hbm-budget", "40M", "--host-budget", "96M", "--offload", "auto", NULL};
    run_t au = train(base, autop, NULL);
    char *c = fingerprint(&au);
    ck_assert_str_eq(a, c);
    ck_assert_msg(strstr(au.out, "--offload auto: params host, grads host, optimizer nvme"), "%s", au.out);
    ck_assert_uint_le(summary_u64(&au, "peak_device_bytes"), 40ull << 20);
    ck_assert_uint_le(summary_u64(&au, "peak_host_bytes"), 96ull << 20);
    free(a); free(b); free(c);
    run_free(&refused); run_free(&r); run_free(&ref); run_free(&au);
}
END_TEST

// `small`'s FP32 gradients alone are 36.8 MiB: with --grads nvme a 32 MiB host budget holds
// the run (staging only; the optimizer's chunks shrink to fit), and it gives the resident bits.
START_TEST(grads_leave_ram) {
    const char *base[] = {"--model", "small", "--batch", "1", "--seq", "32", "--steps", "2", "--eval-every", "0",
                          "--quiet", NULL};
    const char *host[] = {"--host-budget", "32M", "--params", "nvme", "--grads", "host", "--optimizer", "nvme", NULL};
    run_t refused = train(base, host, NULL);
    ck_assert_int_eq(refused.rc, 2);
    ck_assert_msg(strstr(refused.err, "over --host-budget 32.0 MiB") && strstr(refused.err, "--grads nvme"), "%s",
                  refused.err);
    const char *nvme[] = {"--host-budget", "32M", "--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", NULL};
    run_t r = train(base, nvme, NULL);
    run_t ref = train(base, NULL, NULL);
    char *a = fingerprint(&ref), *b = fingerprint(&r);
    ck_assert_str_eq(a, b);
    ck_assert_uint_le(summary_u64(&r, "peak_host_bytes"), 32ull << 20);
    // each step writes every shard's final gradient once, beside its states and compute copy:
    // 4 + 12 + 2 bytes per (padded) parameter; with --grads host it would be 14
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    model_preset("small", &cfg);
    cfg.rope_theta = 10000; cfg.norm_eps = 1e-5;
    model_t m;
    model_init(&m, &cfg);
    ck_assert_uint_eq(summary_u64(&r, "nvme_bytes_written"), 2 * 18ull * m.numel_padded);
    model_free(&m);
    free(a); free(b);
    run_free(&refused); run_free(&r); run_free(&ref);
}
END_TEST

// `tiertrain plan` ends with one JSON object; --log writes the same. 7b at batch 1 × seq 1024
// with every state on NVMe needs under 8 GiB of RAM (staging and activations only).
START_TEST(plan_json_line) {
    char log[1200];
    snprintf(log, sizeof log, "%s/plan.json", nvme_dir);
    char *argv[] = {(char *)tu_binary(), "plan", "--model", "7b", "--batch", "1", "--seq", "1024", "--params", "nvme",
                    "--grads", "nvme", "--optimizer", "nvme", "--host-budget", "4G", "--device", "cpu", "--log", log,
                    NULL};
    run_t r = {0};
    r.rc = tu_run(argv, NULL, &r.out, &r.err);
    ck_assert_msg(r.rc == 0 || r.rc == 2, "plan: exit %d: %s", r.rc, r.err); // 2: this disk too small for 113 GiB
    const char *last = strrchr(r.out, '{');
    ck_assert_ptr_nonnull(last);
    while (last > r.out && last[-1] != '\n') last--; // the start of the last line
    char *file = tu_slurp(log);
    ck_assert_ptr_nonnull(file);
    ck_assert_str_eq(last, file);
    json_t *root = NULL;
    char err[512];
    ck_assert_msg(json_parse(file, strlen(file), log, NULL, &root, err, sizeof err) == 0, "%s", err);
    int64_t ram = 0, host = 0, params = 0, slots = 0;
    ck_assert(json_get_int64(root, "ram_bytes", 0, INT64_MAX, &ram, err, sizeof err) == 0);
    ck_assert(json_get_int64(root, "host_bytes", 0, INT64_MAX, &host, err, sizeof err) == 0);
    ck_assert(json_get_int64(root, "params", 0, INT64_MAX, &params, err, sizeof err) == 0);
    const json_t *parts = json_get(root, "device_parts");
    ck_assert_ptr_nonnull(parts);
    ck_assert(json_get_int64(parts, "param_slots", 0, INT64_MAX, &slots, err, sizeof err) == 0);
    ck_assert_msg(ram < (8ll << 30), "7b with every state on NVMe needs %lld bytes of RAM", (long long)ram);
    ck_assert_msg(host <= (4ll << 30), "host %lld over --host-budget 4G", (long long)host);
    ck_assert_int_eq(params, 6738415616ll);
    ck_assert_int_eq(slots, 4ll * 202383360 * 2); // --prefetch 2 + 2 slots of the largest block, BF16
    for (const char *k = "plan\0feasible\0reason\0nvme_bytes\0floor_ms\0bound\0"; *k; k += strlen(k) + 1)
        ck_assert_msg(json_get(root, k) != NULL, "no \"%s\" in %s", k, file);
    json_free(root);
    free(file);
    unlink(log);
    run_free(&r);
}
END_TEST

// `tiertrain plan` with args (plus --device cpu and --nvme-path nvme_dir): its JSON line,
// parsed (the caller frees it), and its exit code.
static json_t *plan_line(const char *const *args, int *rc) {
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)tu_binary();
    argv[n++] = "plan";
    argv[n++] = "--device";
    argv[n++] = "cpu";
    argv[n++] = "--nvme-path";
    argv[n++] = nvme_dir;
    for (int i = 0; args[i]; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    run_t r = {0};
    *rc = tu_run(argv, NULL, &r.out, &r.err);
    const char *last = strrchr(r.out, '{');
    while (last && last > r.out && last[-1] != '\n') last--;
    json_t *root = NULL;
    char err[512];
    ck_assert_msg(last && json_parse(last, strlen(last), "plan", NULL, &root, err, sizeof err) == 0, "%s\n%s", err,
                  r.out);
    run_free(&r);
    return root;
}

// A plan that does not fit names changes that do — each pasted onto the same command line
// is feasible by the same plan, and none is already in effect; a plan that fits names the
// largest --batch that still does, and one more does not.
START_TEST(plan_suggests_what_fits) {
    static const char *const misfits[][16] = {
        {"--model", "small", "--batch", "4", "--seq", "32", "--hbm-budget", "40M", "--host-budget", "96M", NULL},
        {"--model", "small", "--batch", "1", "--seq", "32", "--host-budget", "32M", "--params", "nvme", "--grads",
         "host", "--optimizer", "nvme", NULL},
        {"--model", "small", "--batch", "16", "--seq", "128", "--hbm-budget", "96M", NULL},
        // vertical (the auto schedule of --accum > 1) holds 512 micro-batches' checkpoints on the
        // host: --schedule horizontal fits, alone or with smaller micro-batches
        {"--model", "tiny", "--batch", "64", "--accum", "512", "--host-budget", "64M", NULL},
        // --offload auto: each change is judged on the placement auto picks with it (their floors
        // were once the all-NVMe placement's, which auto no longer picks once the change fits)
        {"--model", "small", "--offload", "auto", "--hbm-budget", "40M", NULL},
        // smaller micro-batches would need an --accum over 65536: none offered (nothing fits)
        {"--model", "tiny", "--batch", "65536", "--accum", "32768", NULL},
    };
    enum { NMISFITS = sizeof misfits / sizeof misfits[0] };
    for (int k = 0; k < NMISFITS; k++) {
        int rc;
        json_t *root = plan_line(misfits[k], &rc);
        ck_assert_int_eq(rc, 2);
        const json_t *sugg = json_get(root, "suggestions");
        ck_assert_msg(sugg && sugg->type == JSON_ARRAY && (sugg->n >= 1 || k == NMISFITS - 1), "case %d: no suggestions",
                      k);
        if (k == 3) {
            const char *first = NULL;
            char e0[256];
            ck_assert(json_get_string(&sugg->kids[0], "change", &first, e0, sizeof e0) == 0);
            ck_assert_str_eq(first, "--schedule horizontal");
        }
        double prev = 0;
        for (size_t i = 0; i < sugg->n; i++) {
            const char *change = NULL;
            double floor_ms = 0;
            char err[256];
            ck_assert(json_get_string(&sugg->kids[i], "change", &change, err, sizeof err) == 0);
            ck_assert(json_get_double(&sugg->kids[i], "floor_ms", &floor_ms, err, sizeof err) == 0);
            ck_assert_msg(floor_ms >= prev, "case %d: not cheapest first", k);
            prev = floor_ms;
            const char *args[40];
            int n = 0;
            for (int j = 0; misfits[k][j]; j++) args[n++] = misfits[k][j];
            char words[128], *save = NULL;
            snprintf(words, sizeof words, "%s", change);
            int nchange = 0;
            for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                args[n++] = w;
                nchange++;
            }
            args[n] = NULL;
            // not in effect: some flag of the change gives a value the command line does not
            int differs = 0;
            for (int a = n - nchange; a + 1 < n; a += 2) {
                int same = 0;
                for (int j = 0; misfits[k][j] && misfits[k][j + 1]; j++)
                    same |= !strcmp(misfits[k][j], args[a]) && !strcmp(misfits[k][j + 1], args[a + 1]);
                differs |= !same;
            }
            ck_assert_msg(differs, "case %d: '%s' is already in effect", k, change);
            int rc2;
            json_t *fixed = plan_line(args, &rc2);
            const json_t *f = json_get(fixed, "feasible");
            ck_assert_msg(rc2 == 0 && f && f->type == JSON_TRUE, "case %d: '%s' does not make it fit (exit %d)", k,
                          change, rc2);
            double floor2 = 0;
            char err2[256];
            ck_assert(json_get_double(fixed, "floor_ms", &floor2, err2, sizeof err2) == 0);
            ck_assert_msg(fabs(floor2 - floor_ms) <= 1e-3 * floor_ms + 1e-3, "case %d: '%s': floor %g, said %g", k,
                          change, floor2, floor_ms);
            json_free(fixed);
        }
        json_free(root);
    }
    // the largest batch: N fits, N + 1 does not
    const char *fit[] = {"--model", "small", "--batch", "4", "--seq", "32", "--hbm-budget", "64M", "--params", "host",
                         NULL};
    int rc;
    json_t *root = plan_line(fit, &rc);
    int64_t maxb = 0;
    char err[256];
    ck_assert_int_eq(rc, 0);
    ck_assert(json_get_int64(root, "max_batch", 1, 65536, &maxb, err, sizeof err) == 0);
    json_free(root);
    for (int d = 0; d < 2; d++) {
        char b[16];
        snprintf(b, sizeof b, "%lld", (long long)maxb + d);
        const char *args[] = {"--model", "small", "--batch", b, "--seq", "32", "--hbm-budget", "64M", "--params",
                              "host", NULL};
        json_free(plan_line(args, &rc));
        ck_assert_msg(rc == (d ? 2 : 0), "--batch %s: exit %d", b, rc);
    }
}
END_TEST

// ---------------------------------------------------------------- faults

// An EIO on the k-th NVMe request fails the step naming what was being moved, the file and
// the error; exit 1, no hang.
START_TEST(io_error_names_shard_and_file) {
    const char *extra[] = {"--params", "nvme", "--optimizer", "nvme", NULL};
    const char *const fault_specs[] = {"TT_IO_FAULT=read:eio@3", "TT_IO_FAULT=write:eio@9"};
    for (int i = 0; i < 2; i++) {
        char *env[] = {(char *)fault_specs[i], NULL};
        run_t r = train(base_bf16, extra, env);
        ck_assert_msg(r.rc == 1, "%s: exit %d, stderr: %s", fault_specs[i], r.rc, r.err);
        ck_assert_msg(strstr(r.err, "Input/output error") && strstr(r.err, ".nvme offset") &&
                          (strstr(r.err, "parameters of ") || strstr(r.err, "optimizer states of ")),
                      "%s: message: %s", fault_specs[i], r.err);
        run_free(&r);
    }
    // --grads nvme: init writes 5 shards' states and compute copies (10 writes); the 11th is the
    // first gradient a backward finishes, the LM head's (found when its slot is visited again),
    // the 15th the last, the embedding's (found when the step gathers the norm)
    const char *gextra[] = {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", NULL};
    const char *const gspecs[][2] = {{"TT_IO_FAULT=write:eio@11", "gradients of lm_head"},
                                     {"TT_IO_FAULT=write:eio@15", "gradients of embed"}};
    for (int i = 0; i < 2; i++) {
        char *genv[] = {(char *)gspecs[i][0], NULL};
        run_t g = train(base_bf16, gextra, genv);
        ck_assert_msg(g.rc == 1, "%s: exit %d, stderr: %s", gspecs[i][0], g.rc, g.err);
        ck_assert_msg(strstr(g.err, "step 1: ") && strstr(g.err, gspecs[i][1]) && strstr(g.err, "Input/output error"),
                      "%s: message: %s", gspecs[i][0], g.err);
        run_free(&g);
    }
    // --optimizer-cache of the whole model: the first update's fill fails named, as step 2's
    // (the entries are never written back, so the cache has no write to fail)
    const char *cextra[] = {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", "--optimizer-cache", "64M",
                            NULL};
    const char *const cspecs[][2] = {{"TT_IO_FAULT=read:eio@8", "step 2: optimizer: nvme read of 'optimizer states of "}};
    for (size_t i = 0; i < sizeof cspecs / sizeof cspecs[0]; i++) {
        char *cenv[] = {(char *)cspecs[i][0], NULL};
        run_t c = train(base_bf16, cextra, cenv);
        ck_assert_msg(c.rc == 1, "%s: exit %d, stderr: %s", cspecs[i][0], c.rc, c.err);
        ck_assert_msg(strstr(c.err, cspecs[i][1]) && strstr(c.err, "Input/output error"), "%s: message: %s",
                      cspecs[i][0], c.err);
        run_free(&c);
    }
}
END_TEST

// --trace writes Chrome trace JSON with a span on each of the five tracks; a path in a
// missing directory is refused before any work.
START_TEST(trace_has_every_track) {
    char path[1200];
    snprintf(path, sizeof path, "%s/trace.json", nvme_dir);
    const char *extra[] = {"--params", "nvme", "--optimizer", "nvme", "--trace", path, NULL};
    run_t r = train(base_bf16, extra, NULL);
    ck_assert_msg(r.rc == 0, "%s", r.err);
    char *json = tu_slurp(path);
    ck_assert_ptr_nonnull(json);
    ck_assert_msg(strncmp(json, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 38) == 0, "head: %.60s", json);
    size_t len = strlen(json);
    ck_assert_msg(len > 4 && strcmp(json + len - 3, "]}\n") == 0, "tail: %s", json + (len > 20 ? len - 20 : 0));
    const char *names[] = {"compute", "parameter copies", "nvme reads", "nvme writes", "optimizer"};
    for (int t = 1; t <= 5; t++) {
        char key[64];
        snprintf(key, sizeof key, "\"ph\":\"X\",\"pid\":1,\"tid\":%d,", t);
        ck_assert_msg(strstr(json, key) != NULL, "no span on the %s track", names[t - 1]);
    }
    ck_assert_msg(strstr(json, "\"name\":\"backward block.0\"") && strstr(json, "\"name\":\"adamw head\"") &&
                      strstr(json, "\"name\":\"fetch block.1\""),
                  "spans lack shard names");
    free(json);
    unlink(path);
    run_free(&r);
    // --grads nvme: each shard's gradient write in the backward is on the write track too
    const char *gextra[] = {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", "--trace", path, NULL};
    run_t g = train(base_bf16, gextra, NULL);
    ck_assert_msg(g.rc == 0, "%s", g.err);
    json = tu_slurp(path);
    ck_assert_ptr_nonnull(json);
    ck_assert_msg(strstr(json, "\"name\":\"write gradients of block.0\",\"ph\":\"X\",\"pid\":1,\"tid\":4,") &&
                      strstr(json, "\"name\":\"write gradients of lm_head"),
                  "no gradient write spans on the nvme writes track");
    free(json);
    unlink(path);
    run_free(&g);
    const char *bad[] = {"--trace", "/nonexistent-dir/t.json", NULL};
    run_t b = train(base_bf16, bad, NULL);
    ck_assert_int_eq(b.rc, 2);
    ck_assert_msg(strstr(b.err, "--trace") && strstr(b.err, "/nonexistent-dir"), "%s", b.err);
    run_free(&b);
}
END_TEST

// The plan's byte counts are what trainer_init really allocates (within the 4 KiB rounding
// of each allocation), for every placement: train's feasibility check and
// `tiertrain plan` are only as good as this.
START_TEST(plan_matches_allocation) {
    static const tier_kind_t pl[][3] = {{TIER_DEVICE, TIER_DEVICE, TIER_HOST}, {TIER_HOST, TIER_HOST, TIER_NVME},
                                        {TIER_NVME, TIER_DEVICE, TIER_NVME}, {TIER_NVME, TIER_HOST, TIER_HOST}};
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    model_preset("small", &cfg);
    cfg.B = 1; cfg.T = 32; cfg.accum = 2; cfg.steps = 1; cfg.eval_batches = 1; cfg.prefetch = 1;
    cfg.precision = _i % 8 < 4 ? PREC_BF16 : PREC_FP32;
    cfg.tie = _i % 2;
    cfg.rope_theta = 10000; cfg.norm_eps = 1e-5; cfg.seed = 1; cfg.device = DEVICE_CPU;
    cfg.threads = 1; cfg.nvme_qd = 8; cfg.io_block = 1 << 20; cfg.numa_node = -1; cfg.quiet = 1;
    snprintf(cfg.nvme_path, sizeof cfg.nvme_path, "%s", nvme_dir);
    // --recompute: 0, 1 or all 6 blocks keep their intermediates (per held micro-batch); with all 6
    // in FP32 storage the scratch holds no forward intermediates (acts.h fwd)
    cfg.kept_blocks = (int[]){0, 1, 6}[_i % 3];
    cfg.kept_bf16 = _i % 5 == 1 && cfg.precision == PREC_BF16; // ... as BF16 (bf16 mode only: config.h)
    cfg.params_tier = pl[_i % 4][0]; cfg.grads_tier = pl[_i % 4][1]; cfg.optim_tier = pl[_i % 4][2];
    if (_i >= 16) { cfg.grads_tier = TIER_NVME; cfg.optim_tier = TIER_NVME; } // with the gradients' staging
    if (cfg.optim_tier == TIER_NVME && _i % 2) cfg.optim_cache = 1u << 20; // an --optimizer-cache of whole chunks
    // a cut vocabulary: 2 chunks, then 3 with a ragged last (small's block holds 4096 rows)
    if (_i >= 20) cfg.V = 8192 + 100 * (_i - 20);
    cfg.logits_kept = _i >= 20 && _i % 2; // every quantum's logits in the scratch
    if (_i % 4 == 3) setenv("TT_TEST_MLP_ROWS", "16", 1); // the MLP in 2 chunks of rows: kept blocks keep less
    if (_i >= 8) { // vertical: both micro-batches' checkpoints, on the host; a host cache of 3 MiB
        cfg.schedule = SCHEDULE_VERTICAL;
        cfg.acts_tier = _i % 3 ? ACTS_HOST : ACTS_DEVICE;
        cfg.host_cache = cfg.params_tier == TIER_NVME ? 3u << 20 : 0;
    }
    model_t m;
    model_init(&m, &cfg);
    plan_t p;
    plan_compute(&cfg, &m, NULL, &p);
    trainer_t *tr = NULL;
    char err[512];
    ck_assert_msg(trainer_init(&tr, &cfg, err, sizeof err) == 0, "%s", err);
    // The plan sums the buffers tier_layout lists and trainer_init allocates exactly those,
    // each rounded to 4 KiB as the arena and the pool round it: equal to the byte.
    trainer_info_t info;
    trainer_info(tr, &info);
    ck_assert_msg(p.device_bytes == info.device_peak, "device: plan %llu, allocated %llu",
                  (unsigned long long)p.device_bytes, (unsigned long long)info.device_peak);
    ck_assert_msg(p.host_bytes == info.host_bytes, "host: plan %llu, allocated %llu",
                  (unsigned long long)p.host_bytes, (unsigned long long)info.host_bytes);
    trainer_free(tr);
    model_free(&m);
    unsetenv("TT_TEST_MLP_ROWS");
}
END_TEST

// BF16 activations (act16, att16) halve the bytes of FP32 words: small at B4 T256 with every
// block keeping its intermediates (--recompute none, what auto takes there), the activations
// and the kept intermediates together are at most half what FP32 words everywhere would take
// (a kept block's statistics stay FP32; the scratch then holds no forward intermediates).
START_TEST(activations_half_of_fp32) {
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    model_preset("small", &cfg);
    cfg.B = 4; cfg.T = 256; cfg.accum = 1; cfg.steps = 1; cfg.prefetch = 1; cfg.precision = PREC_BF16;
    cfg.rope_theta = 10000; cfg.norm_eps = 1e-5; cfg.seed = 1; cfg.device = DEVICE_CPU; cfg.threads = 1;
    cfg.params_tier = TIER_DEVICE; cfg.grads_tier = TIER_DEVICE; cfg.optim_tier = TIER_HOST;
    cfg.kept_blocks = cfg.L;
    model_t m;
    model_init(&m, &cfg);
    plan_t p;
    plan_compute(&cfg, &m, NULL, &p);
    ck_assert_msg(p.lay.act16 && p.lay.att16, "small's activations are not BF16 halves on this CPU");
    ck_assert_int_eq(p.lay.scratch_fwd, 0);
    const size_t N = (size_t)cfg.B * (size_t)cfg.T;
    const uint64_t now = tier_part_bytes(&p.lay, TIER_DEVICE, "activations") +
                         tier_part_bytes(&p.lay, TIER_DEVICE, "kept_activations");
    // the same parts with the scratch and every kept block in FP32 words
    const uint64_t words = now - p.lay.spec[TB_SCRATCH].total - p.lay.spec[TB_KEPT].total +
                           acts_scratch_total(&m, N, 0, 1, 0, 1) + (uint64_t)m.L * acts_kept_total(&m, N, 0, 0);
    char a[32], b[32];
    ck_assert_msg(2 * now <= words, "activations %s, FP32 words %s: more than half", format_bytes(a, sizeof a, now),
                  format_bytes(b, sizeof b, words));
    model_free(&m);
}
END_TEST

// The CPU kernels' own buffers, outside the arena (the attention ops', held from their first
// call): what the plan counts in RAM (kernels_bytes) is what the run's ops then hold, the
// summary says, at 1 thread (the BF16 backward's one pass: B·NKV 4 kv heads a thread) and 2
// (its split passes, with D), which differ; a run with BF16 attention (att16: tiny's heads of 16
// on any CPU with FMA) holds some. Where the suite runs OpenMP on one thread (TSan's build:
// libgomp is not instrumented, and its threads there run for minutes) the 1-thread run alone.
START_TEST(plan_counts_the_kernels_buffers) {
    static const char *const threads[][4] = {{"--threads", "1", NULL}, {"--threads", "2", NULL}};
    const char *omp = getenv("OMP_NUM_THREADS");
    const int runs = omp && atoi(omp) == 1 ? 1 : 2;
    unsigned long long held[2];
    for (int i = 0; i < runs; i++) {
        run_t r = train(base_bf16, threads[i], NULL);
        held[i] = summary_u64(&r, "kernels_bytes");
        ck_assert_msg(held[i] == log_u64(&r, NULL, "kernels_bytes"), "--threads %s: the ops held %llu bytes, the plan said %llu",
                      threads[i][1], held[i], log_u64(&r, NULL, "kernels_bytes"));
        if (matmul_act16(64)) ck_assert_msg(held[i] > 0, "--threads %s: no attention buffers held", threads[i][1]);
        run_free(&r);
    }
    if (runs == 2 && matmul_act16(64))
        ck_assert_msg(held[1] > held[0], "2 threads hold %llu bytes, 1 thread %llu", held[1], held[0]);
}
END_TEST

// The plan's tests' configuration: small at B1 T32 on the CPU, every state on NVMe.
static void small_on_nvme(config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    model_preset("small", cfg);
    cfg->B = 1; cfg->T = 32; cfg->accum = 1; cfg->steps = 1; cfg->prefetch = 1; cfg->precision = PREC_BF16;
    cfg->rope_theta = 10000; cfg->norm_eps = 1e-5; cfg->seed = 1; cfg->device = DEVICE_CPU; cfg->threads = 1;
    cfg->nvme_qd = 8; cfg->io_block = 1 << 20; cfg->numa_node = -1; cfg->quiet = 1;
    snprintf(cfg->nvme_path, sizeof cfg->nvme_path, "%s", nvme_dir);
    cfg->params_tier = cfg->grads_tier = cfg->optim_tier = TIER_NVME;
}

// Where the products read the BF16 compute copy (tier.h lay.w16: the CUDA backend, and the
// CPU's FMA kernels), the FP32 weight scratch holds a block's two norms (2·C floats), not the
// largest shard widened: the device total shrinks by the difference. Widening (the testing
// hook, or a CPU whose products run on OpenBLAS: kernels_limit_simd(0)) keeps the whole
// shard; fp32 mode has no scratch. small: C 384. A GPU's layout then takes BF16 activations
// (act16, and att16 for attention's) too.
START_TEST(bf16_weights_need_no_fp32_copy) {
    config_t cfg;
    small_on_nvme(&cfg);
    cfg.params_tier = cfg.grads_tier = TIER_DEVICE;
    cfg.optim_tier = TIER_HOST;
    model_t m;
    model_init(&m, &cfg);
    const uint64_t norms = ALIGN_UP(2 * 384 * sizeof(float), (uint64_t)4096);
    const uint64_t shard = ALIGN_UP(m.max_shard_numel * sizeof(float), (uint64_t)4096);
    const int fma = matmul_kernel_name() != NULL; // this CPU's products on our kernels
    for (int dev = 0; dev < 2; dev++) {
        const device_kind_t d = dev ? DEVICE_CUDA : DEVICE_CPU;
        tier_layout_t w16, wide, nofma, fp32;
        tier_layout(&cfg, &m, d, &w16);
        setenv("TT_TEST_WIDEN_WEIGHTS", "1", 1);
        tier_layout(&cfg, &m, d, &wide);
        unsetenv("TT_TEST_WIDEN_WEIGHTS");
        kernels_limit_simd(0);
        tier_layout(&cfg, &m, d, &nofma);
        kernels_limit_simd(2);
        cfg.precision = PREC_FP32;
        tier_layout(&cfg, &m, d, &fp32);
        cfg.precision = PREC_BF16;
        ck_assert(w16.w16 == (dev || fma) && !wide.w16 && nofma.w16 == dev && !fp32.w16);
        ck_assert_uint_eq(w16.spec[TB_WEIGHTS].total, dev || fma ? norms : shard);
        ck_assert_uint_eq(wide.spec[TB_WEIGHTS].total, shard);
        ck_assert_uint_eq(nofma.spec[TB_WEIGHTS].total, dev ? norms : shard); // a GPU runs cuBLASLt either way
        ck_assert_uint_eq(fp32.spec[TB_WEIGHTS].count, 0);
        // (and the activations' scratch: the BF16 copy's products take halves, act16, whose
        // buffers are sized for them)
        ck_assert_uint_eq(wide.device_bytes - w16.device_bytes - (wide.spec[TB_SCRATCH].total - w16.spec[TB_SCRATCH].total),
                          dev || fma ? shard - norms : 0);
        ck_assert(w16.act16 ? w16.spec[TB_SCRATCH].total < wide.spec[TB_SCRATCH].total
                            : w16.spec[TB_SCRATCH].total == wide.spec[TB_SCRATCH].total);
        if (dev) { // a GPU's step takes BF16 activations wherever its products read the BF16 weights
            setenv("TT_TEST_FP32_ACTS", "1", 1);
            tier_layout_t f32a;
            tier_layout(&cfg, &m, d, &f32a);
            unsetenv("TT_TEST_FP32_ACTS");
            ck_assert(w16.act16 && nofma.act16 && !wide.act16 && !fp32.act16 && !f32a.act16);
            ck_assert(w16.att16 && !f32a.att16); // head size 64: the register-tiled kernels' (cuda_attention_act16)
        }
    }
    model_free(&m);
}
END_TEST

// The plan says which activations its elementwise bytes count as BF16 halves (tier.h act16,
// att16), in its text and its JSON line: a GPU's layout takes them all (small's head size 64),
// TT_TEST_FP32_ACTS none, fp32 mode has nothing to say; this CPU's as its layout says.
static char *plan_text(const config_t *cfg, const model_t *m, int json) {
    plan_t p;
    plan_compute(cfg, m, NULL, &p);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ck_assert_ptr_nonnull(f);
    if (json) plan_json(&p, cfg, m, f);
    else plan_print(&p, cfg, f);
    fclose(f);
    return out;
}

START_TEST(plan_names_bf16_activations) {
    config_t cfg;
    small_on_nvme(&cfg);
    model_t m;
    model_init(&m, &cfg);
    static const char *const said[3] = {" (activations as BF16 halves)",
                                        " (the norms' outputs and the MLP's as BF16 halves; attention's as FP32 words: "
                                        "its halves need a head size up to 256, on a GPU an even one up to 128)",
                                        " (activations as FP32 words: BF16 halves need FMA (with AMX tiles a width up to 1024) "
                                        "or a GPU)"};
    for (int c = 0; c < 4; c++) { // a GPU; a GPU with TT_TEST_FP32_ACTS; this CPU; fp32 mode
        cfg.device = c < 2 ? DEVICE_CUDA : DEVICE_CPU;
        cfg.precision = c == 3 ? PREC_FP32 : PREC_BF16;
        if (c == 1) setenv("TT_TEST_FP32_ACTS", "1", 1);
        tier_layout_t lay;
        tier_layout(&cfg, &m, cfg.device, &lay);
        char *text = plan_text(&cfg, &m, 0), *json = plan_text(&cfg, &m, 1);
        unsetenv("TT_TEST_FP32_ACTS");
        const int want = c == 3 ? -1 : lay.att16 ? 0 : lay.act16 ? 1 : 2;
        if (c < 2) ck_assert_int_eq(want, c == 0 ? 0 : 2); // a GPU's: all halves, or none with the hook
        for (int k = 0; k < 3; k++)
            ck_assert_msg(!strstr(text, said[k]) == (k != want), "case %d: '%s' %s in:\n%s", c, said[k],
                          k == want ? "missing" : "not expected", text);
        char flags[64];
        snprintf(flags, sizeof flags, "\"act16\":%s,\"att16\":%s", lay.act16 ? "true" : "false",
                 lay.att16 ? "true" : "false");
        ck_assert_msg(strstr(json, flags), "case %d: no %s in %s", c, flags, json);
        free(text);
        free(json);
    }
    model_free(&m);
}
END_TEST

// The recompute's FLOPs in the plan, counted here from the block's shapes: a block that
// recomputes runs its attention half and the MLP's gate and up again (2 FLOPs per
// multiply-add, N rows), never the down projection; with the MLP in chunks a kept block runs
// gate and up again too. small: C 384, KVD 128, F 1024, 6 blocks, at B1 T32 (N 32).
START_TEST(plan_counts_the_recompute) {
    config_t cfg;
    small_on_nvme(&cfg);
    const double N = 32, C = 384, KVD = 128, F = 1024, L = 6;
    const double attn = 2 * N * (2 * C * C + 2 * C * KVD), gate_up = 2 * N * 2 * C * F;
    for (int chunked = 0; chunked < 2; chunked++) {
        if (chunked) setenv("TT_TEST_MLP_ROWS", "16", 1);
        model_t m;
        model_init(&m, &cfg);
        plan_t none, two, full;
        cfg.kept_blocks = 6;
        plan_compute(&cfg, &m, NULL, &none);
        cfg.kept_blocks = 2;
        plan_compute(&cfg, &m, NULL, &two);
        cfg.kept_blocks = 0;
        plan_compute(&cfg, &m, NULL, &full);
        // attention's T×T products: 4·N·T·C/2 per recomputed block
        const double att = 4.0 * N * 32 * C / 2;
        const double per = attn + gate_up + att, kept = chunked ? gate_up : 0;
        ck_assert_msg(fabs(full.flops_per_step - none.flops_per_step - L * (per - kept)) <= 1e-9 * full.flops_per_step,
                      "chunked %d: full - none = %.6g, counted %.6g", chunked, full.flops_per_step - none.flops_per_step,
                      L * (per - kept));
        ck_assert_msg(fabs(full.flops_per_step - two.flops_per_step - 2 * (per - kept)) <= 1e-9 * full.flops_per_step,
                      "chunked %d: full - 2 kept = %.6g, counted %.6g", chunked, full.flops_per_step - two.flops_per_step,
                      2 * (per - kept));
        // and the elementwise ops again, in bytes: the attention half's RMSNorm, RoPE, residual
        // add and the MLP's norm (9C + 2KVD words a token), SwiGLU's forward (3F); where the
        // layout keeps ln1, ln2 and the MLP's intermediates as BF16 (tier.h act16: FMA or AMX)
        // the norms write half words (8C) and SwiGLU's are half words, and where it keeps q and
        // k so (att16: small's head size 64 takes them) RoPE's are (C + KVD less), and x2 too:
        // the residual add and the MLP's norm one pass, reading the projection's halves and x
        // and writing x2's and ln2's (2.5C, for 3C + 1.5C: 6C in all);
        // and the BF16 checkpoint converted once more for the recompute (6 bytes an element)
        const double sw = full.lay.act16 ? 0.5 : 1.0, attn = full.lay.att16 ? 6 : full.lay.act16 ? 8 : 9,
                     rope = full.lay.att16 ? 0.5 : 1.0;
        ck_assert_int_eq(full.lay.act16, matmul_act16((int)C));
        ck_assert_int_eq(full.lay.att16, matmul_act16((int)C) && attention_act16(6, 2, 64));
        const double eper = 4 * N * ((attn - 2 * (1 - rope)) * C + 2 * rope * KVD + 3 * sw * F) + 6 * N * C,
                     ekept = chunked ? 4 * N * 3 * sw * F : 0;
        ck_assert_msg(fabs(full.elem_bytes - none.elem_bytes - L * (eper - ekept)) <= 1e-9 * full.elem_bytes,
                      "chunked %d: elementwise full - none = %.6g, counted %.6g", chunked, full.elem_bytes - none.elem_bytes,
                      L * (eper - ekept));
        model_free(&m);
        unsetenv("TT_TEST_MLP_ROWS");
    }
}
END_TEST

// --update backward with --grads nvme: a final gradient is handed to the update in its slot,
// so a shard visited once a step (one pass: --accum 1 or vertical) keeps no g extent on NVMe.
// The tied embedding's chunks, which the head visits before the embedding, keep theirs, and
// horizontal accumulation keeps every one (the partial sums go there between visits). Counted
// here from the shards' pieces, against the layout the plan and the store are sized from.
START_TEST(update_in_backward_drops_gradient_extents) {
    static const struct { int tie, accum; schedule_t sched; } cases[] = {
        {0, 1, SCHEDULE_HORIZONTAL}, {1, 1, SCHEDULE_HORIZONTAL}, {0, 2, SCHEDULE_VERTICAL},
        {1, 2, SCHEDULE_VERTICAL},   {0, 2, SCHEDULE_HORIZONTAL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        config_t cfg;
        small_on_nvme(&cfg);
        cfg.tie = cases[k].tie;
        cfg.accum = cases[k].accum;
        cfg.schedule = cases[k].sched;
        cfg.clip = 0;
        model_t m;
        model_init(&m, &cfg);
        tier_layout_t after, bwd;
        cfg.update_when = UPDATE_AFTER;
        tier_layout(&cfg, &m, DEVICE_CPU, &after);
        cfg.update_when = UPDATE_BACKWARD;
        tier_layout(&cfg, &m, DEVICE_CPU, &bwd);
        ck_assert(!after.upd_bwd && bwd.upd_bwd);
        uint64_t dropped = 0;
        const int one_pass = cases[k].accum == 1 || cases[k].sched == SCHEDULE_VERTICAL;
        for (int s = 0; s < m.nshards; s++) {
            size_t lo, n;
            tier_piece(&bwd, &m, s, &lo, &n);
            const int tied = cases[k].tie && s < m.vchunks; // the embedding's chunks, the head's too
            const int keeps = !one_pass || tied;
            ck_assert_msg(tier_o32_parts(&after, s) == 4 && tier_o32_parts(&bwd, s) == 3 + keeps,
                          "case %zu, shard %d: parts %d after, %d in the backward", k, s, tier_o32_parts(&after, s),
                          tier_o32_parts(&bwd, s));
            if (!keeps) dropped += (uint64_t)n * sizeof(float);
        }
        ck_assert_msg(after.nvme_bytes - bwd.nvme_bytes == dropped && (one_pass ? dropped > 0 : dropped == 0),
                      "case %zu: %llu - %llu bytes, dropped %llu", k, (unsigned long long)after.nvme_bytes,
                      (unsigned long long)bwd.nvme_bytes, (unsigned long long)dropped);
        // the plan is sized from the same layout, and says what of the gradients is on disk
        plan_t p;
        plan_compute(&cfg, &m, NULL, &p);
        ck_assert_uint_eq(p.nvme_bytes, bwd.nvme_bytes);
        ck_assert_uint_eq(p.grads_nvme_bytes, (uint64_t)p.grads_bytes - dropped);
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        ck_assert_ptr_nonnull(f);
        plan_print(&p, &cfg, f);
        fclose(f);
        const char *want = !one_pass ? NULL : cases[k].tie ? "on disk, the tied embedding's partial sums"
                                                             : "(none on disk: each final gradient passes to the update";
        ck_assert_msg(want ? strstr(out, want) != NULL : strstr(out, "on disk") == NULL, "case %zu: %s", k, out);
        free(out);
        if (k == 0) { // a backward outside a training step: no update takes its gradients, and
                      // there is nowhere to write them: refused in one line, no state overwritten
            cfg.lr = 1e-3; cfg.beta1 = 0.9; cfg.beta2 = 0.95; cfg.eps = 1e-8;
            trainer_t *tr = NULL;
            char err[512];
            ck_assert_msg(trainer_init(&tr, &cfg, err, sizeof err) == 0, "%s", err);
            int tokens[32], targets[32];
            for (int i = 0; i < 32; i++) tokens[i] = targets[i] = (7 * i) % cfg.V;
            const double loss = trainer_forward_backward(tr, tokens, targets, 1, 1.0f / 32);
            ck_assert_msg(isnan(loss) && strstr(trainer_fault(tr), "gradients of lm_head: no NVMe extent under --update "
                                                                   "backward") &&
                              strstr(trainer_fault(tr), "(a backward outside a training step needs --update after)"),
                          "loss %g: %s", loss, trainer_fault(tr));
            trainer_free(tr);
        }
        model_free(&m);
    }
}
END_TEST

// The plan says when the NVMe store is over PLAN_NVME_SCALE × the file the profile measured
// NVMe over (a disk's rate at a few GiB can come from a cache), and only then.
START_TEST(plan_notes_nvme_scale) {
    config_t cfg;
    small_on_nvme(&cfg);
    model_t m;
    model_init(&m, &cfg);
    profile_t prof;
    profile_defaults(&prof);
    plan_t p;
    plan_compute(&cfg, &m, &prof, &p);
    const uint64_t store = p.nvme_bytes;
    ck_assert_uint_gt(store, 8 * PLAN_NVME_SCALE);
    char note[512], want[512], a[32], b[32];
    ck_assert_int_eq(plan_nvme_scale_note(&p, note, sizeof note), 0); // the size was not recorded
    ck_assert_str_eq(note, "");
    prof.nvme_bytes = store / PLAN_NVME_SCALE + 1; // the store is under 4 x: measured at its scale
    ck_assert_int_eq(plan_nvme_scale_note(&p, note, sizeof note), 0);
    prof.nvme_bytes = (store - 1) / PLAN_NVME_SCALE; // over 4 x
    ck_assert_int_eq(plan_nvme_scale_note(&p, note, sizeof note), 1);
    snprintf(want, sizeof want, "the profile measured NVMe over %s and this run keeps %s there; a disk can be slower at "
             "that size (a virtual disk's cache holds a few GiB), so the floor's NVMe time may be short: tiertrain bench "
             "calibrate --size 1G measures it there", format_bytes(a, sizeof a, prof.nvme_bytes),
             format_bytes(b, sizeof b, store));
    ck_assert_str_eq(note, want);
    cfg.params_tier = cfg.grads_tier = TIER_DEVICE; // no store at all: nothing to say
    cfg.optim_tier = TIER_HOST;
    plan_compute(&cfg, &m, &prof, &p);
    ck_assert_uint_eq(p.nvme_bytes, 0);
    ck_assert_int_eq(plan_nvme_scale_note(&p, note, sizeof note), 0);
    model_free(&m);
}
END_TEST

// --optimizer-cache auto takes the most whole entries the host budget leaves room for, and
// nothing when the optimizer states are not on NVMe.
START_TEST(optimizer_cache_auto_fits_budget) {
    config_t cfg;
    small_on_nvme(&cfg);
    model_t m;
    model_init(&m, &cfg);
    plan_t p;
    plan_compute(&cfg, &m, NULL, &p);
    const uint64_t entry = tier_cache_entry_bytes(&p.lay), host0 = p.host_bytes;
    const int nchunks = p.lay.nchunks;
    ck_assert_int_ge(nchunks, 3);
    char why[512], want[512], a[32], b[32];
    cfg.optim_cache_auto = 1;
    cfg.host_budget = host0 + 2 * entry + entry / 2; // room for two entries and a half
    ck_assert_int_eq(plan_optim_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
    ck_assert_uint_eq(cfg.optim_cache, 2 * entry);
    ck_assert_int_eq(p.lay.nocache, 2);
    ck_assert_uint_eq(p.host_bytes, host0 + 2 * entry);
    snprintf(want, sizeof want, "--optimizer-cache auto: 2 of %d optimizer chunks keep their states in RAM (%s), %s "
             "less NVMe reading and writing a step (predicted floor %.1f ms/step; ", nchunks, format_bytes(a, sizeof a, 2 * entry),
             format_bytes(b, sizeof b, tier_cached_elems(&p.lay, &m) * 12), p.floor_ms);
    ck_assert_msg(!strncmp(why, want, strlen(want)), "got  %s\nwant %s...", why, want);
    cfg.host_budget = 0; // no budget: every chunk (this machine has the RAM for small's states)
    ck_assert_int_eq(plan_optim_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
    ck_assert_int_eq(p.lay.nocache, nchunks);
    cfg.optim_tier = TIER_HOST; // nothing on NVMe to cache
    cfg.grads_tier = TIER_HOST;
    ck_assert_int_eq(plan_optim_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 0);
    ck_assert_str_eq(why, "");
    ck_assert_uint_eq(cfg.optim_cache, 0);
    model_free(&m);
    // two ranks on this node share its RAM: together they leave 15% of it free, as one rank
    // alone does (a 3b-width model whose states are more than this machine's RAM, so the
    // bound falls inside the chunks)
    model_preset("3b", &cfg);
    cfg.L = 20; cfg.T = 64; cfg.B = 1;
    cfg.params_tier = cfg.grads_tier = cfg.optim_tier = TIER_NVME;
    cfg.optim_cache_auto = 1;
    for (int r = 1; r <= 2; r++) {
        cfg.ranks = cfg.local_ranks = r;
        model_init(&m, &cfg);
        ck_assert_int_eq(plan_optim_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
        ck_assert_int_lt(p.lay.nocache, p.lay.nchunks);
        ck_assert_uint_gt(cfg.optim_cache, 0);
        // 86%: what MemAvailable does between the plan's samples is noise next to the 15%
        ck_assert_msg(p.ram_needed * (uint64_t)r <= p.mem_available / 100 * 86,
                      "%d ranks: %llu of RAM each, %llu available", r, (unsigned long long)p.ram_needed,
                      (unsigned long long)p.mem_available);
        model_free(&m);
    }
}
END_TEST

// --host-cache auto takes the most whole parameter shards that fit: exactly 2 in a host budget
// with room for two and a half, every shard without a budget, none when the parameters are not
// on NVMe; after --optimizer-cache auto, what it leaves: with room for every optimizer chunk
// and one shard and a half, every chunk and one shard.
START_TEST(host_cache_auto_fits_budget) {
    config_t cfg;
    small_on_nvme(&cfg);
    model_t m;
    model_init(&m, &cfg);
    plan_t p;
    plan_compute(&cfg, &m, NULL, &p);
    const uint64_t entry = tier_host_cache_entry_bytes(&p.lay, &m), host0 = p.host_bytes, read0 = p.nvme_read_bytes;
    const uint64_t oentry = tier_cache_entry_bytes(&p.lay);
    ck_assert_int_ge(m.nshards, 3);
    char why[512], want[512], a[32], b[32];
    cfg.host_cache_auto = cfg.optim_cache_auto = 1;
    cfg.host_budget = host0 + 2 * entry + entry / 2; // room for two entries and a half
    ck_assert_int_eq(plan_host_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
    ck_assert_uint_eq(cfg.host_cache, 2 * entry);
    ck_assert_int_eq(p.lay.nhcache, 2);
    ck_assert_uint_eq(p.host_bytes, host0 + 2 * entry);
    ck_assert_uint_lt(p.nvme_read_bytes, read0);
    snprintf(want, sizeof want, "--host-cache auto: 2 of %d parameter shards stay in RAM (%s), %s less NVMe reading a "
             "step (predicted floor %.1f ms/step; ", m.nshards, format_bytes(a, sizeof a, 2 * entry),
             format_bytes(b, sizeof b, read0 - p.nvme_read_bytes), p.floor_ms);
    ck_assert_msg(!strncmp(why, want, strlen(want)), "got  %s\nwant %s...", why, want);
    // room for every optimizer chunk and one shard and a half: the chunks first, then one shard
    const int nchunks = p.lay.nchunks;
    cfg.host_budget = host0 + (uint64_t)nchunks * oentry + entry + entry / 2;
    cfg.host_cache = 0; // as cli_parse leaves it for auto
    ck_assert_int_eq(plan_optim_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
    ck_assert_int_eq(p.lay.nocache, nchunks);
    ck_assert_int_eq(plan_host_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
    ck_assert_int_eq(p.lay.nocache, nchunks);
    ck_assert_int_eq(p.lay.nhcache, 1);
    ck_assert_uint_le(p.host_bytes, cfg.host_budget);
    cfg.host_budget = 0; // no budget: every shard (this machine has the RAM for small's)
    ck_assert_int_eq(plan_host_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 1);
    ck_assert_int_eq(p.lay.nhcache, m.nshards);
    cfg.params_tier = TIER_HOST; // no parameters on NVMe to cache
    ck_assert_int_eq(plan_host_cache_auto(&cfg, &m, NULL, &p, why, sizeof why), 0);
    ck_assert_str_eq(why, "");
    ck_assert_uint_eq(cfg.host_cache, 0);
    model_free(&m);
}
END_TEST

// ---------------------------------------------------------------- the floor's phases

// A CPU profile with the given rates ("key": value, ...) at path (the test's NVMe folder's
// profile.json, its name into path), for runs whose floor must not depend on this machine.
static void write_profile(char *path, size_t len, const char *rates) {
    snprintf(path, len, "%s/profile.json", nvme_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"version\": 1, %s, \"backend\": \"cpu\", \"threads\": 2, \"measured_at\": \"2026-12-02T00:00:00Z\"}\n",
            rates);
    ck_assert_int_eq(fclose(f), 0);
}


// Time tolerances: the plan's own doubles agree to rounding (rel 1e-12: a handful of sums);
// its JSON prints milliseconds to 3 decimals, so each figure read back is within 5e-4 ms and a
// sum of a few within 2e-3.
#define PHASE_RTOL 1e-12
#define JSON_MS_ATOL 2e-3

static int close_to(double out, double ref, double atol, double rtol) {
    return !isnan(out) && !isnan(ref) && fabs(out - ref) <= atol + rtol * fabs(ref);
}

// The floor's shape, whatever the configuration: each phase lasts its largest resource's time,
// the floor is their sum, bound by the longer's bound; each resource's phases sum to its step
// time; and the floor lies between the largest step time (the old floor: everything overlapped)
// and their sum (nothing overlapped).
static void check_phases(const plan_t *p, const char *what) {
    double most = 0, all = 0;
    for (int r = 0; r < PLAN_NRES; r++) {
        const double u = p->phase_ms[PLAN_PHASE_UPDATE][r], rest = p->phase_ms[PLAN_PHASE_REST][r];
        ck_assert_msg(u >= 0 && rest >= 0, "%s: %s: phases %g and %g", what, plan_resource_names[r], u, rest);
        ck_assert_msg(close_to(u + rest, p->t_ms[r], 1e-9, PHASE_RTOL), "%s: %s: phases %.17g + %.17g, step %.17g", what,
                      plan_resource_names[r], u, rest, p->t_ms[r]);
        most = fmax(most, p->t_ms[r]);
        all += p->t_ms[r];
    }
    double sum = 0, ms[PLAN_NPHASES];
    for (int ph = 0; ph < PLAN_NPHASES; ph++) {
        // the CPU backend's AdamW beside a forward or backward counts with the compute (its cores)
        double own[PLAN_NRES];
        ck_assert_msg(p->phase_adam_shared[ph] == (p->lay.device_is_host && !p->lay.upd_inline &&
                                                   p->lay.home[ST_O32] != TIER_DEVICE && p->phase_ms[ph][PLAN_ADAM] > 0),
                      "%s: phase %d: AdamW shares the cores: %d", what, ph, p->phase_adam_shared[ph]);
        ms[ph] = 0;
        for (int r = 0; r < PLAN_NRES; r++) {
            own[r] = p->phase_ms[ph][r] + (r == PLAN_COMPUTE && p->phase_adam_shared[ph] ? p->phase_ms[ph][PLAN_ADAM] : 0);
            ms[ph] = fmax(ms[ph], own[r]);
        }
        ck_assert_msg(ms[ph] == p->phase_floor_ms[ph] && own[p->phase_bound[ph]] == ms[ph],
                      "%s: phase %d lasts %g, its largest is %g (%s's %g)", what, ph, p->phase_floor_ms[ph], ms[ph],
                      plan_resource_names[p->phase_bound[ph]], own[p->phase_bound[ph]]);
        sum += ms[ph];
    }
    ck_assert_msg(close_to(p->floor_ms, sum, 1e-9, PHASE_RTOL), "%s: floor %.17g, phases %.17g", what, p->floor_ms, sum);
    const int longer = ms[PLAN_PHASE_REST] > ms[PLAN_PHASE_UPDATE] ? PLAN_PHASE_REST : PLAN_PHASE_UPDATE;
    ck_assert_msg(p->bound == p->phase_bound[longer], "%s: bound %d, the longer phase's %d", what, p->bound,
                  p->phase_bound[longer]);
    ck_assert_msg(p->floor_ms >= most * (1 - PHASE_RTOL) && p->floor_ms <= all * (1 + PHASE_RTOL),
                  "%s: floor %g, the largest step time %g, their sum %g", what, p->floor_ms, most, all);
}

// The compute's three parts, each at its rate: small at B1 T32 keeping every block's
// intermediates, its byte count of the elementwise ops counted here from the ops step.c runs
// (FP32 words a token reads and writes: a block's forward RMSNorm ×2, RoPE on q and k,
// residual adds ×2, SwiGLU; its backward RMSNorm ×2 reading and adding into the gradient,
// RoPE on dq and dk, SwiGLU's; the head's norm forward and backward, the embedding's gather
// and scatter, cross-entropy over the logits V, and V read and written in its backward).
// fp32 mode's matmuls go at the profile's FP32 rate. A profile from before those were measured
// counts attention at the matmuls' rate and the elementwise ops as nothing.
START_TEST(plan_times_the_compute_parts) {
    config_t cfg;
    small_on_nvme(&cfg);
    cfg.kept_blocks = 6;
    model_t m;
    model_init(&m, &cfg);
    const double N = 32, T = 32, C = 384, KVD = 128, F = 1024, V = 256, L = 6;
    // BF16 halves where the layout keeps ln1, ln2 and the MLP's intermediates so (tier.h act16:
    // bf16 mode on the FMA kernels or AMX tiles): the forward norms write half words, SwiGLU's
    // are half words
    tier_layout_t lay16;
    tier_layout(&cfg, &m, DEVICE_CPU, &lay16);
    ck_assert_int_eq(lay16.act16, matmul_act16((int)C));
    // and q and k, dq and dk (att16: head size 64 takes them): RoPE reads and writes halves
    ck_assert_int_eq(lay16.att16, lay16.act16 && attention_act16(6, 2, 64));
    double words[2]; // FP32 activations (fp32 mode), and bf16 mode's
    for (int b = 0; b < 2; b++) {
        const int a16 = b && lay16.act16, t16 = b && lay16.att16;
        const double sw = a16 ? 0.5 : 1.0, norm = a16 ? 1.5 : 2, rope = t16 ? 0.5 : 1.0;
        // the norms and the residual adds, forward and backward: with x2 as halves (att16) the
        // first add and the MLP's norm one pass (read the projection's halves and x, write x2's
        // and ln2's: 2.5C), the second add reads x2's halves (2.5C), and so does the norm's
        // backward (3.5C)
        const double fwd = t16 ? norm + 2.5 + 2.5 : norm + norm + 3 + 3, bwd = t16 ? 4 + 3.5 : 4 + 4;
        words[b] = L * ((fwd + 2 * rope) * C + 2 * rope * KVD + 3 * sw * F + (bwd + 2 * rope) * C + 2 * rope * KVD +
                        5 * sw * F) +
                   (2 + 4 + 2 + 2) * C + 3 * V;
    }
    // and the passes besides the ops (bytes): the BF16 checkpoints' conversions, into the store
    // as each of the L + 1 acts is committed, back as each block's input norm reads it in the
    // backward (FP32 read or written, BF16 the other way: 6 bytes an element; step.c, acts.c),
    // and Σ g² of every gradient once (its padded shards, as the tier holds them)
    const double passes = 6 * N * C * (L + 1) + 6 * N * C * L + 4.0 * (double)m.numel_padded;
    const double bytes = 4 * N * words[1] + passes;
    const double att = 3 * 4.0 * N * T * C / 2 * L; // forward, backward ×2
    profile_t prof;
    profile_defaults(&prof);
    prof.gemm_flops = 1e12;
    prof.attn_flops = 1e11;
    prof.elem_Bps = 2e10;
    plan_t p, old;
    plan_compute(&cfg, &m, &prof, &p);
    ck_assert_msg(close_to(p.elem_bytes, bytes, 0, 1e-12), "elementwise bytes %.17g, counted %.17g", p.elem_bytes, bytes);
    const double want[PLAN_NCPARTS] = {1e3 * (p.flops_per_step - att) / 1e12, 1e3 * att / 1e11, 1e3 * bytes / 2e10};
    for (int i = 0; i < PLAN_NCPARTS; i++)
        ck_assert_msg(close_to(p.compute_ms[i], want[i], 0, 1e-12), "part %d: %.17g ms, want %.17g", i, p.compute_ms[i], want[i]);
    ck_assert_msg(close_to(p.t_ms[PLAN_COMPUTE], want[0] + want[1] + want[2], 0, 1e-12), "compute %.17g ms",
                  p.t_ms[PLAN_COMPUTE]);
    check_phases(&p, "three rates");
    // --cpu-gemm fma: no tiles (the backend turns them off as it starts); the products and
    // attention take the same halves on the FMA kernels and tasks
    cfg.cpu_gemm = CPU_GEMM_FMA;
    plan_compute(&cfg, &m, &prof, &old);
    ck_assert_int_eq(old.lay.act16, lay16.act16);
    ck_assert_int_eq(old.lay.att16, lay16.att16);
    ck_assert_msg(close_to(old.elem_bytes, bytes, 0, 1e-12), "--cpu-gemm fma: elementwise bytes %.17g", old.elem_bytes);
    cfg.cpu_gemm = CPU_GEMM_AUTO;
    // fp32 mode: its matmuls at the FP32 operands' rate (on AMX-BF16, the FMA kernels')
    prof.gemm_fp32_flops = 2e11;
    cfg.precision = PREC_FP32;
    plan_compute(&cfg, &m, &prof, &old);
    ck_assert_msg(close_to(old.compute_ms[PLAN_CPART_MATMUL], 1e3 * (p.flops_per_step - att) / 2e11, 0, 1e-12),
                  "fp32 mode: matmuls %.17g ms", old.compute_ms[PLAN_CPART_MATMUL]);
    // FP32 checkpoints: the ops write and read the store itself, no conversions
    ck_assert_msg(close_to(old.elem_bytes, 4 * N * words[0] + passes - 6 * N * C * (2 * L + 1), 0, 1e-12),
                  "fp32 mode: elementwise bytes %.17g", old.elem_bytes);
    cfg.precision = PREC_BF16;
    prof.attn_flops = prof.elem_Bps = prof.gemm_fp32_flops = 0; // an older profile
    plan_compute(&cfg, &m, &prof, &old);
    ck_assert_msg(close_to(old.t_ms[PLAN_COMPUTE], 1e3 * p.flops_per_step / 1e12, 0, 1e-12) &&
                      old.compute_ms[PLAN_CPART_ELEM] == 0,
                  "without the op rates: compute %.17g ms, elementwise %g", old.t_ms[PLAN_COMPUTE], old.compute_ms[PLAN_CPART_ELEM]);
    model_free(&m);
}
END_TEST

// What goes where, from plan_compute: the configurations of small below (B4 T64, every state on
// NVMe, each block keeping its intermediates, the head its logits: the backward's FLOPs are then
// twice the forward's) at the built-in rates (the elementwise ops uncounted), against the
// plan's own byte counts (P the parameters: optim_bytes 12·P, params_bytes P·2, grads_bytes 4·P).
//  - after the backward, the update's phase holds the first forward: a third of the FLOPs;
//    under --update backward, the last backward: two thirds;
//  - between the two, the update's phase trades the forward's work for the backward's, and adds
//    the optimizer's NVMe work: its states read and written, the new weights written, and (only
//    after the backward) each final gradient read back, less the forward's parameter reads (the
//    update hands it the new weights); the backward's phase writes those gradients (--update
//    backward hands them over instead);
//  - an --optimizer-cache takes its states' reads and writes off the update's phase only;
//  - with the gradients in a home, an update after the backward reads the next one's first
//    chunks ahead as it ends, one per staging buffer: in the backward (not with a cache).
START_TEST(plan_phases_hold_their_work) {
    config_t cfg;
    small_on_nvme(&cfg);
    cfg.B = 4; cfg.T = 64;
    model_t m;
    model_init(&m, &cfg);
    cfg.kept_blocks = m.L;
    cfg.logits_kept = 1;
    profile_t rate;
    profile_defaults(&rate);
    rate.elem_Bps = 0; // the elementwise ops uncounted: the compute is FLOPs, the backward's twice the forward's
    plan_t after, bwd, cached;
    cfg.update_when = UPDATE_AFTER;
    plan_compute(&cfg, &m, &rate, &after);
    cfg.update_when = UPDATE_BACKWARD; // --clip 0 (small_on_nvme): it runs
    plan_compute(&cfg, &m, &rate, &bwd);
    ck_assert_int_eq(after.lay.upd_bwd, 0);
    ck_assert_int_eq(bwd.lay.upd_bwd, 1);
    check_phases(&after, "after");
    check_phases(&bwd, "backward");
    const double *ua = after.phase_ms[PLAN_PHASE_UPDATE], *ra = after.phase_ms[PLAN_PHASE_REST];
    const double *ub = bwd.phase_ms[PLAN_PHASE_UPDATE], *rb = bwd.phase_ms[PLAN_PHASE_REST];
    ck_assert_msg(close_to(ra[PLAN_COMPUTE], 2 * ua[PLAN_COMPUTE], 0, PHASE_RTOL) &&
                      close_to(ub[PLAN_COMPUTE], 2 * rb[PLAN_COMPUTE], 0, PHASE_RTOL),
                  "compute: after %g + %g, backward %g + %g", ua[PLAN_COMPUTE], ra[PLAN_COMPUTE], ub[PLAN_COMPUTE],
                  rb[PLAN_COMPUTE]);
    ck_assert_msg(ua[PLAN_ADAM] == after.t_ms[PLAN_ADAM] && ub[PLAN_ADAM] == bwd.t_ms[PLAN_ADAM] && ua[PLAN_ADAM] > 0,
                  "AdamW: %g of %g, %g of %g", ua[PLAN_ADAM], after.t_ms[PLAN_ADAM], ub[PLAN_ADAM], bwd.t_ms[PLAN_ADAM]);
    const double rd = rate.nvme_read_Bps / 1e3, wr = rate.nvme_write_Bps / 1e3; // bytes per ms
    const double O = (double)after.optim_bytes, Pp = (double)after.params_bytes, G = (double)after.grads_bytes;
    const double update = O / rd + O / wr + Pp / wr; // the update's own NVMe time, either way
    // after the backward, the update hands the forward each shard's new copy: the forward alone
    // (the other way) reads what this one does not
    ck_assert_msg(close_to(ua[PLAN_NVME] - rb[PLAN_NVME], update + G / rd - Pp / rd, 1e-9, 1e-9),
                  "the update's phase after the backward: %.17g more than the forward alone, want %.17g",
                  ua[PLAN_NVME] - rb[PLAN_NVME], update + G / rd - Pp / rd);
    ck_assert_msg(close_to(ra[PLAN_NVME] - ub[PLAN_NVME], G / wr - update, 1e-9, 1e-9),
                  "the backward: %.17g more after than beside the update, want %.17g", ra[PLAN_NVME] - ub[PLAN_NVME],
                  G / wr - update);
    // the same plan with an optimizer cache: only the update's phase reads and writes less
    cfg.update_when = UPDATE_AFTER;
    cfg.optim_cache = 2 * tier_cache_entry_bytes(&after.lay);
    plan_compute(&cfg, &m, &rate, &cached);
    check_phases(&cached, "cached");
    const double saved = 12.0 * (double)tier_cached_elems(&cached.lay, &m);
    ck_assert_msg(saved > 0, "no chunk cached");
    ck_assert_msg(close_to(ua[PLAN_NVME] - cached.phase_ms[PLAN_PHASE_UPDATE][PLAN_NVME], saved / rd + saved / wr, 1e-9,
                           1e-9) && cached.phase_ms[PLAN_PHASE_REST][PLAN_NVME] == ra[PLAN_NVME],
                  "cache: the update's phase %g -> %g, the rest %g -> %g", ua[PLAN_NVME],
                  cached.phase_ms[PLAN_PHASE_UPDATE][PLAN_NVME], ra[PLAN_NVME],
                  cached.phase_ms[PLAN_PHASE_REST][PLAN_NVME]);
    // the rest resident, the gradients too: the backward reads only what the update read ahead
    // for the next one as it ended (two chunks' states, optim_run_host), and none with a cache
    cfg.params_tier = cfg.grads_tier = TIER_DEVICE;
    cfg.optim_cache = 0;
    plan_compute(&cfg, &m, &rate, &cached);
    check_phases(&cached, "states alone on NVMe");
    ck_assert_int_eq(cached.lay.nostage, TIER_OPT_STAGING);
    const double ahead = cached.lay.nostage * 12.0 * (double)cached.lay.chunk_elems / rd;
    const double back = cached.phase_ms[PLAN_PHASE_REST][PLAN_NVME];
    ck_assert_msg(back > 0 && back <= ahead * (1 + PHASE_RTOL), "the backward reads %g ms ahead, %d chunks %g", back,
                  cached.lay.nostage, ahead);
    // a --host-budget one byte short of the four staging buffers: two, the chunk as it was
    const size_t chunk = cached.lay.chunk_elems;
    cfg.host_budget = cached.lay.host_bytes - 1;
    plan_compute(&cfg, &m, &rate, &cached);
    ck_assert_msg(cached.lay.nostage == 2 && cached.lay.chunk_elems == chunk, "over --host-budget: %d buffers of %zu",
                  cached.lay.nostage, cached.lay.chunk_elems);
    ck_assert_int_eq(bwd.lay.nostage, 2); // --update backward: its next chunk comes with the backward
    cfg.host_budget = 0;
    cfg.optim_cache = tier_cache_entry_bytes(&cached.lay);
    plan_compute(&cfg, &m, &rate, &cached);
    ck_assert_msg(cached.phase_ms[PLAN_PHASE_REST][PLAN_NVME] == 0, "a cache, and the backward reads %g ms",
                  cached.phase_ms[PLAN_PHASE_REST][PLAN_NVME]);
    model_free(&m);
}
END_TEST

// Every phase's work adds up to the step's, over homes, schedules, --accum, checkpoints on the
// host, ranks and the three updates (check_phases), and the names say what runs in each.
START_TEST(plan_phases_sum_to_the_step) {
    static const tier_kind_t homes[][3] = {
        {TIER_DEVICE, TIER_DEVICE, TIER_HOST}, {TIER_HOST, TIER_HOST, TIER_HOST}, {TIER_NVME, TIER_NVME, TIER_NVME},
        {TIER_HOST, TIER_NVME, TIER_NVME},     {TIER_NVME, TIER_HOST, TIER_DEVICE}, {TIER_DEVICE, TIER_HOST, TIER_NVME},
    };
    for (int i = 0; i < 6 * 2 * 2 * 2; i++) {
        config_t cfg;
        small_on_nvme(&cfg);
        cfg.params_tier = homes[i % 6][0]; cfg.grads_tier = homes[i % 6][1]; cfg.optim_tier = homes[i % 6][2];
        cfg.accum = 1 + (i / 6) % 2;
        cfg.schedule = (i / 12) % 2 ? SCHEDULE_VERTICAL : SCHEDULE_HORIZONTAL;
        cfg.acts_tier = (i / 12) % 2 ? ACTS_HOST : ACTS_DEVICE;
        cfg.update_when = (i / 24) % 2 ? UPDATE_BACKWARD : UPDATE_AFTER;
        cfg.tie = i % 3 == 0;
        cfg.kept_blocks = i % 4;
        if (i % 7 == 3) cfg.ranks = cfg.local_ranks = 2; // --update backward refuses them: after
        model_t m;
        model_init(&m, &cfg);
        plan_t p;
        plan_compute(&cfg, &m, NULL, &p);
        char what[128];
        snprintf(what, sizeof what, "case %d (homes %d, accum %d, %s, update %s, ranks %d)", i, i % 6, cfg.accum,
                 cfg.schedule == SCHEDULE_VERTICAL ? "vertical" : "horizontal",
                 p.lay.upd_bwd ? "backward" : p.lay.upd_inline ? "inline" : "after",
                 p.ranks);
        check_phases(&p, what);
        ck_assert_msg((p.t_ms[PLAN_COMM] > 0) == (p.ranks > 1), "%s: ranks link %g", what, p.t_ms[PLAN_COMM]);
        // the update's phase: the update alone (--optimizer device, or the CPU backend's host
        // update after the backward, on the compute thread), beside the last backward, or beside
        // the first forward (NVMe states)
        const char *name = p.phase_names[PLAN_PHASE_UPDATE];
        const int alone = cfg.optim_tier == TIER_DEVICE || p.lay.upd_inline;
        ck_assert_int_eq(p.lay.upd_inline, cfg.optim_tier == TIER_HOST && !p.lay.upd_bwd); // the CPU backend
        if (alone) ck_assert_msg(!strcmp(name, "update"), "%s: %s", what, name);
        else ck_assert_msg(!strncmp(name, "update+", 7) && strstr(name, p.lay.upd_bwd ? "backward" : "forward"),
                           "%s: %s", what, name);
        if (alone) // beside nothing: the update's phase computes nothing
            ck_assert_msg(p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE] == 0, "%s: %g", what,
                          p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE]);
        else
            ck_assert_msg(p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE] > 0, "%s: the update's phase computes nothing", what);
        model_free(&m);
    }
}
END_TEST

// All resident (the optimizer on the host, as --offload auto's first placement) at a batch whose
// forward outlasts AdamW, on the CPU backend. The update in the backward runs beside it, on
// its cores: compute and AdamW are the only resources, and add up in that phase, so the floor
// is their sum, bound by compute. The update after the backward runs on the step's own cores
// before the forward (lay.upd_inline): its phase is AdamW alone, and the floor is AdamW's time
// plus the compute's all the same.
START_TEST(plan_floor_resident_is_compute) {
    config_t cfg;
    small_on_nvme(&cfg);
    cfg.params_tier = cfg.grads_tier = TIER_DEVICE;
    cfg.optim_tier = TIER_HOST;
    cfg.B = 4; cfg.T = 64;
    model_t m;
    model_init(&m, &cfg);
    for (int upd = 0; upd < 2; upd++) {
        cfg.update_when = upd ? UPDATE_BACKWARD : UPDATE_AFTER;
        plan_t p;
        plan_compute(&cfg, &m, NULL, &p);
        check_phases(&p, upd ? "resident, update in the backward" : "resident");
        for (int r = 0; r < PLAN_NRES; r++)
            if (r != PLAN_COMPUTE && r != PLAN_ADAM) ck_assert_msg(p.t_ms[r] == 0, "%s %g", plan_resource_names[r], p.t_ms[r]);
        ck_assert_int_eq(p.lay.upd_inline, !upd);
        ck_assert_int_eq(p.lay.upd_bwd, upd);
        ck_assert(p.t_ms[PLAN_ADAM] > 0);
        if (upd) {
            ck_assert_msg(p.t_ms[PLAN_ADAM] < p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE], "AdamW %g, beside %g of compute",
                          p.t_ms[PLAN_ADAM], p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE]);
            ck_assert_msg(close_to(p.floor_ms, p.t_ms[PLAN_COMPUTE] + p.t_ms[PLAN_ADAM], 0, PHASE_RTOL) &&
                              p.phase_adam_shared[PLAN_PHASE_UPDATE] && p.bound == PLAN_COMPUTE,
                          "floor %.17g, compute %.17g + AdamW %.17g", p.floor_ms, p.t_ms[PLAN_COMPUTE], p.t_ms[PLAN_ADAM]);
        } else {
            ck_assert_msg(p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE] == 0 &&
                              p.phase_ms[PLAN_PHASE_UPDATE][PLAN_ADAM] == p.t_ms[PLAN_ADAM],
                          "the update's phase: compute %g, AdamW %g of %g", p.phase_ms[PLAN_PHASE_UPDATE][PLAN_COMPUTE],
                          p.phase_ms[PLAN_PHASE_UPDATE][PLAN_ADAM], p.t_ms[PLAN_ADAM]);
            ck_assert_msg(close_to(p.floor_ms, p.t_ms[PLAN_COMPUTE] + p.t_ms[PLAN_ADAM], 0, PHASE_RTOL),
                          "floor %.17g, compute %.17g + AdamW %.17g", p.floor_ms, p.t_ms[PLAN_COMPUTE], p.t_ms[PLAN_ADAM]);
        }
        ck_assert_int_eq(p.bound, PLAN_COMPUTE);
    }
    model_free(&m);
}
END_TEST

// `tiertrain plan` with every state on NVMe and --update after at fixed rates (B4 T64: the
// update's phase is the disk's, the backward the CPU's): its JSON "phases" give the floor again
// (the largest of each phase's times, summed) and its bound; each resource's phases sum to its
// t_ms; the floor is over the largest t_ms (what it was before the phases: here the phases'
// bounds differ, so strictly) and at most their sum; the printed plan says the same phases. Then
// with --accum 2 (the update beside the first micro-batch's forward) and --update backward.
START_TEST(plan_json_floor_from_phases) {
    char prof[4096];
    write_profile(prof, sizeof prof, "\"gemm_flops\": 4e10, \"h2d_Bps\": 4e9, \"d2h_Bps\": 4e9, \"nvme_read_Bps\": 5e8, "
                                     "\"nvme_write_Bps\": 5e8, \"adam_params_per_s\": 2e8");
    static const char *const extra[3][8] = {
        {"--update", "after", NULL}, {"--update", "after", "--accum", "2", "--schedule", "horizontal", NULL}, {"--update", "backward", NULL}};
    static const char *const names[3][2] = {
        {"update+forward", "backward"}, {"update+first forward", "backwards+other forwards"}, {"update+backward", "forward"}};
    for (int c = 0; c < 3; c++) {
        char *argv[40];
        int n = 0;
        const char *base[] = {tu_binary(), "plan", "--device", "cpu", "--nvme-path", nvme_dir, "--profile", prof,
                              "--model", "small", "--batch", "4", "--seq", "64", "--params", "nvme", "--grads", "nvme",
                              "--optimizer", "nvme", "--clip", "0", NULL};
        for (int i = 0; base[i]; i++) argv[n++] = (char *)base[i];
        for (int i = 0; extra[c][i]; i++) argv[n++] = (char *)extra[c][i];
        argv[n] = NULL;
        run_t r = {0};
        r.rc = tu_run(argv, NULL, &r.out, &r.err);
        ck_assert_msg(r.rc == 0 || r.rc == 2, "case %d: exit %d: %s", c, r.rc, r.err); // 2: a disk too small for it
        const char *last = strrchr(r.out, '{');
        while (last && last > r.out && last[-1] != '\n') last--;
        json_t *root = NULL;
        char err[512];
        ck_assert_msg(last && json_parse(last, strlen(last), "plan", NULL, &root, err, sizeof err) == 0, "%s", err);
        double floor_ms = 0, most = 0, all = 0;
        const char *bound = NULL;
        ck_assert(json_get_double(root, "floor_ms", &floor_ms, err, sizeof err) == 0);
        ck_assert(json_get_string(root, "bound", &bound, err, sizeof err) == 0);
        const json_t *t = json_get(root, "t_ms"), *ph = json_get(root, "phases");
        ck_assert_msg(t && t->type == JSON_OBJECT && t->n == PLAN_NRES, "case %d: t_ms", c);
        ck_assert_msg(ph && ph->type == JSON_ARRAY && ph->n == PLAN_NPHASES, "case %d: phases", c);
        double ms[PLAN_NPHASES] = {0};
        const char *pbound[PLAN_NPHASES] = {NULL};
        for (int k = 0; k < PLAN_NPHASES; k++) {
            const json_t *one = &ph->kids[k], *pt = json_get(one, "t_ms");
            const char *name = NULL;
            double said = 0;
            ck_assert(json_get_string(one, "name", &name, err, sizeof err) == 0);
            ck_assert_str_eq(name, names[c][k]);
            ck_assert(json_get_double(one, "ms", &said, err, sizeof err) == 0);
            ck_assert(json_get_string(one, "bound", &pbound[k], err, sizeof err) == 0);
            ck_assert_msg(pt && pt->type == JSON_OBJECT && pt->n == PLAN_NRES, "case %d: phase %d's t_ms", c, k);
            double at_bound = -1;
            for (size_t i = 0; i < pt->n; i++) {
                ms[k] = fmax(ms[k], pt->kids[i].num);
                if (!strcmp(pt->kids[i].key, pbound[k])) at_bound = pt->kids[i].num;
            }
            ck_assert_msg(close_to(said, ms[k], JSON_MS_ATOL, 0) && at_bound == ms[k],
                          "case %d: phase %s lasts %g, bound by %s (%g), its largest %g", c, name, said, pbound[k],
                          at_bound, ms[k]);
        }
        for (size_t i = 0; i < t->n; i++) { // each resource: its phases sum to its step time
            double u = 0, rest = 0;
            ck_assert(json_get_double(json_get(&ph->kids[0], "t_ms"), t->kids[i].key, &u, err, sizeof err) == 0);
            ck_assert(json_get_double(json_get(&ph->kids[1], "t_ms"), t->kids[i].key, &rest, err, sizeof err) == 0);
            ck_assert_msg(close_to(u + rest, t->kids[i].num, JSON_MS_ATOL, 0), "case %d: %s: %g + %g, step %g", c,
                          t->kids[i].key, u, rest, t->kids[i].num);
            most = fmax(most, t->kids[i].num);
            all += t->kids[i].num;
        }
        ck_assert_msg(close_to(floor_ms, ms[0] + ms[1], JSON_MS_ATOL, 0), "case %d: floor %g, phases %g + %g", c,
                      floor_ms, ms[0], ms[1]);
        ck_assert_str_eq(bound, pbound[ms[1] > ms[0]]);
        ck_assert_msg(floor_ms <= all + JSON_MS_ATOL, "case %d: floor %g over the sum %g", c, floor_ms, all);
        if (strcmp(pbound[0], pbound[1]))
            ck_assert_msg(floor_ms > most + JSON_MS_ATOL, "case %d: floor %g, largest %g", c, floor_ms, most);
        else
            ck_assert_msg(close_to(floor_ms, most, JSON_MS_ATOL, 0), "case %d: floor %g, largest %g", c, floor_ms, most);
        if (c == 0) // the disk bounds the update's phase, the CPU the backward
            ck_assert_msg(!strcmp(pbound[0], "nvme") && !strcmp(pbound[1], "compute"), "bounds %s, %s", pbound[0],
                          pbound[1]);
        char line[256];
        snprintf(line, sizeof line, "  phases        %s %.1f ms (%s) + %s %.1f ms (%s)\n", names[c][0], ms[0], pbound[0],
                 names[c][1], ms[1], pbound[1]);
        ck_assert_msg(strstr(r.out, line), "case %d: no line\n%swithin\n%s", c, line, r.out);
        json_free(root);
        run_free(&r);
    }
    unlink(prof);
}
END_TEST

// bench capacity on a disk budget of 600M (TT_NVME_FREE stands in for statvfs): the largest
// model that fits is small's width at 12 layers; the RAM left over becomes the optimizer cache
// (so 3 steps, the third timed), the disk is measured at the store's size, and the JSON line
// carries those rates and the floor at them; with --optimizer-cache none, 2 steps, no cache.
// The parameter cache only when asked for.
START_TEST(bench_capacity_small_disk) {
    for (int k = 0; k < 2; k++) {
        char *argv[] = {(char *)tu_binary(), "bench", "capacity", "--nvme-path", nvme_dir, "--optimizer-cache",
                        k ? "none" : "auto", NULL};
        char *env[] = {"TT_NVME_FREE=600M", NULL};
        run_t r = {0};
        r.rc = tu_run(argv, env, &r.out, &r.err);
        ck_assert_msg(r.rc == 0, "exit %d\n%s\n%s", r.rc, r.out, r.err);
        ck_assert_msg(strstr(r.out, "largest: small width, 12 layers"), "%s", r.out);
        ck_assert_msg((strstr(r.out, "--optimizer-cache auto: ") != NULL) == !k, "%s", r.out);
        ck_assert_msg(!strstr(r.out, "--host-cache auto: "), "%s", r.out);
        ck_assert_msg(strstr(r.out, k ? "training 2 steps" : "training 3 steps"), "%s", r.out);
        ck_assert_msg(strstr(r.out, "disk at this scale ") && strstr(r.out, "floor at this scale "), "%s", r.out);
        const char *last = strrchr(r.out, '{');
        ck_assert_ptr_nonnull(last);
        json_t *root = NULL;
        char err[512];
        ck_assert_msg(json_parse(last, strlen(last), "capacity", NULL, &root, err, sizeof err) == 0, "%s", err);
        const char *w = NULL;
        ck_assert_int_eq(json_get_string(root, "width", &w, err, sizeof err), 0);
        ck_assert_str_eq(w, "small");
        static const char *const pos[] = {"s_per_step", "scale_read_GBps", "scale_write_GBps", "floor_at_scale_s",
                                          "mixed_read_GBps", "mixed_write_GBps", "disk_share", "disk_busy"};
        double x[8] = {0};
        for (int i = 0; i < 8; i++) {
            ck_assert_msg(json_get_double(root, pos[i], &x[i], err, sizeof err) == 0, "%s", err);
            ck_assert_msg(x[i] > 0 && isfinite(x[i]), "%s = %g", pos[i], x[i]);
        }
        // the share is the mixed pass's rates over the rates apart; the disk's busy time is
        // within the floor at those rates (no resource's time is over it), both to the JSON's 3
        // decimals: disk_busy's rounding (±0.0005 of the step) is 2% of it in a 4 s step of 0.09
        // s of disk time (seen under TSan: 0.023 × 3.953 s against a floor of 0.089 s)
        const double share = x[4] / x[1] + x[5] / x[2];
        ck_assert_msg(fabs(x[6] - share) <= 2e-3 * share + 1e-3, "disk_share %g, from the rates %g", x[6], share);
        ck_assert_msg(x[7] * x[0] <= x[3] * 1.01 + 5e-4 * x[0] + 1e-3, "disk busy %g of %g s, floor %g s", x[7], x[0],
                      x[3]);
        ck_assert_msg(strstr(r.out, "disk, both at once ") && strstr(r.out, "disk busy "), "%s", r.out);
        json_free(root);
        run_free(&r);
        char *ls[] = {"/bin/ls", "-A", nvme_dir, NULL}, *out = NULL, *e2 = NULL;
        ck_assert_int_eq(tu_run(ls, NULL, &out, &e2), 0);
        ck_assert_msg(!strstr(out, ".nvme") && !strstr(out, "tiertrain"), "left behind:\n%s", out);
        free(out);
        free(e2);
    }
    // limits no model fits: exit 2 with the JSON line still last, and the limits line gives
    // each its own figure (the device budget was once printed as the free disk too)
    char *argv[] = {(char *)tu_binary(), "bench", "capacity", "--nvme-path", nvme_dir, "--hbm-budget", "3K", NULL};
    char *env[] = {"TT_NVME_FREE=600M", NULL};
    run_t r = {0};
    r.rc = tu_run(argv, env, &r.out, &r.err);
    ck_assert_msg(r.rc == 2, "exit %d\n%s\n%s", r.rc, r.out, r.err);
    ck_assert_msg(strstr(r.out, "limits: device 3.0 KiB, host ") && strstr(r.out, "), nvme 570.0 MiB free\n"), "%s",
                  r.out);
    ck_assert_msg(strstr(r.out, "{\"bench\":\"capacity\",\"params\":0}\n") && strstr(r.err, "raise --hbm-budget"),
                  "%s\n%s", r.out, r.err);
    run_free(&r);
}
END_TEST

// bench overlap on tiny: three rounds, each with its GEMM rate; every placement's bits the
// same; the floor "now" is the plan's at the rounds' median GEMM rate, so for the resident run
// (compute-bound at this profile's rates) it scales by profile ÷ now.
START_TEST(bench_overlap_floor_now) {
    char prof[4096];
    // AdamW at 1e15 parameters/s: the resident floor's update phase (the CPU backend's update on
    // the step's cores, before the forward) takes nothing, so the floor is compute alone and
    // scales with the GEMM rate
    write_profile(prof, sizeof prof, "\"gemm_flops\": 1e11, \"h2d_Bps\": 1e10, \"d2h_Bps\": 1e10, \"nvme_read_Bps\": 2e9, "
                                     "\"nvme_write_Bps\": 2e9, \"adam_params_per_s\": 1e15, \"nvme_bytes\": 4294967296");
    char *argv[] = {(char *)tu_binary(), "bench", "overlap", "--model", "tiny", "--nvme-path", nvme_dir, "--profile",
                    prof, NULL};
    run_t r = {0};
    r.rc = tu_run(argv, NULL, &r.out, &r.err);
    unlink(prof);
    ck_assert_msg(r.rc == 0, "exit %d\n%s\n%s", r.rc, r.out, r.err);
    int rounds = 0;
    for (const char *p = r.out; (p = strstr(p, " GB/s; resident ")) != NULL; p++) rounds++;
    ck_assert_msg(rounds == 3, "%d rounds' rates in\n%s", rounds, r.out);
    const char *last = strrchr(r.out, '{');
    ck_assert_ptr_nonnull(last);
    json_t *root = NULL;
    char err[512];
    ck_assert_msg(json_parse(last, strlen(last), "overlap", NULL, &root, err, sizeof err) == 0, "%s", err);
    static const char *const keys[] = {"resident_floor_ms", "gemm_profile_flops", "gemm_now_flops",
                                       "resident_floor_now_ms", "host_floor_now_ms", "nvme_floor_now_ms"};
    double x[6] = {0};
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(json_get_double(root, keys[i], &x[i], err, sizeof err) == 0, "%s", err);
        ck_assert_msg(x[i] > 0 && isfinite(x[i]), "%s = %g", keys[i], x[i]);
    }
    ck_assert_msg(x[1] == 1e11, "the profile's GEMM rate %g", x[1]);
    // a profile without attention's and the elementwise ops' rates: none taken now either
    double an = -1, en = -1;
    ck_assert_msg(json_get_double(root, "attn_now_flops", &an, err, sizeof err) == 0 &&
                      json_get_double(root, "elem_now_Bps", &en, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(an == 0 && en == 0, "attention %g, elementwise %g now", an, en);
    const double want = x[0] * x[1] / x[2];
    ck_assert_msg(fabs(x[3] - want) <= 2e-3 * want + 2e-3, "floor now %g ms, %g x %g / %g = %g", x[3], x[0], x[1],
                  x[2], want);
    int same = 0;
    ck_assert_int_eq(json_get_bool(root, "identical", &same, err, sizeof err), 0);
    ck_assert(same);
    // the NVMe case's disk, as its tier report gives it, against the profile's 2 GB/s each way
    double rd = 0, wr = 0, handed = -1;
    ck_assert_msg(json_get_double(root, "nvme_read_GBps", &rd, err, sizeof err) == 0 &&
                      json_get_double(root, "nvme_write_GBps", &wr, err, sizeof err) == 0 &&
                      json_get_double(root, "nvme_handed_bytes", &handed, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(rd > 0 && wr > 0 && handed >= 0, "read %g, write %g GB/s, handed %g bytes", rd, wr, handed);
    ck_assert_msg(strstr(r.out, "params+optimizer nvme: NVMe achieved ") &&
                      strstr(r.out, "calibrated 2.00 and 2.00 over 4.0 GiB: "), "%s", r.out);
    json_free(root);
    run_free(&r);
}
END_TEST

// With attention's and the elementwise ops' rates in the profile, the floor "now" takes each
// of the three compute rates measured before the rounds: the plan's matmul, attention and
// elementwise times at the profile's rates (`plan`'s compute_ms for the same run), each scaled
// by profile ÷ now.
START_TEST(bench_overlap_floor_now_all_rates) {
    char prof[4096];
    write_profile(prof, sizeof prof, "\"gemm_flops\": 1e11, \"attn_flops\": 2e10, \"elem_Bps\": 5e9, \"h2d_Bps\": 1e10, "
                                     "\"d2h_Bps\": 1e10, \"nvme_read_Bps\": 2e9, \"nvme_write_Bps\": 2e9, "
                                     "\"adam_params_per_s\": 1e15, \"nvme_bytes\": 4294967296");
    char *bargv[] = {(char *)tu_binary(), "bench", "overlap", "--model", "tiny", "--nvme-path", nvme_dir, "--profile",
                     prof, "--steps", "3", NULL}; // (--steps: per placement, instead of 5)
    char *pargv[] = {(char *)tu_binary(), "plan", "--model", "tiny", "--profile", prof, NULL};
    run_t r = {0}, pl = {0};
    r.rc = tu_run(bargv, NULL, &r.out, &r.err);
    pl.rc = tu_run(pargv, NULL, &pl.out, &pl.err);
    unlink(prof);
    ck_assert_msg(strstr(r.out, ", 3 steps per placement (median of the last 2), 3 rounds\n"), "--steps 3:\n%s", r.out);
    ck_assert_msg(r.rc == 0, "exit %d\n%s\n%s", r.rc, r.out, r.err);
    ck_assert_msg(pl.rc == 0, "plan: exit %d\n%s\n%s", pl.rc, pl.out, pl.err);
    json_t *root = NULL, *plan = NULL;
    char err[512];
    const char *last = strrchr(r.out, '{'), *plast = strrchr(pl.out, '\n');
    ck_assert_ptr_nonnull(last);
    while (plast > pl.out && plast[-1] != '\n') plast--; // the plan's JSON: its last line
    ck_assert_msg(json_parse(last, strlen(last), "overlap", NULL, &root, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(json_parse(plast, strlen(plast), "plan", NULL, &plan, err, sizeof err) == 0, "%s", err);
    static const char *const keys[] = {"resident_floor_ms", "resident_floor_now_ms", "gemm_now_flops", "attn_now_flops",
                                       "elem_now_Bps", "attn_profile_flops", "elem_profile_Bps"};
    double x[7] = {0};
    for (int i = 0; i < 7; i++) {
        ck_assert_msg(json_get_double(root, keys[i], &x[i], err, sizeof err) == 0, "%s", err);
        ck_assert_msg(x[i] > 0 && isfinite(x[i]), "%s = %g", keys[i], x[i]);
    }
    ck_assert_msg(x[5] == 2e10 && x[6] == 5e9, "the profile's attention %g, elementwise %g", x[5], x[6]);
    const json_t *parts = NULL;
    double mm = 0, att = 0, el = 0, floor_ms = 0;
    ck_assert_msg(json_get_object(plan, "compute_ms", &parts, err, sizeof err) == 0 &&
                      json_get_double(parts, "matmuls", &mm, err, sizeof err) == 0 &&
                      json_get_double(parts, "attention", &att, err, sizeof err) == 0 &&
                      json_get_double(parts, "elementwise", &el, err, sizeof err) == 0 &&
                      json_get_double(plan, "floor_ms", &floor_ms, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(att > 0 && el > 0, "attention %g ms, elementwise %g ms", att, el);
    // the same run: the plan's floor is the bench's at the profile's rates
    ck_assert_msg(fabs(floor_ms - x[0]) <= JSON_MS_ATOL, "plan's floor %g ms, the bench's %g", floor_ms, x[0]);
    const double want = mm * 1e11 / x[2] + att * x[5] / x[3] + el * x[6] / x[4];
    ck_assert_msg(fabs(x[1] - want) <= 2e-3 * want + 4 * JSON_MS_ATOL,
                  "floor now %g ms; %g x 1e11/%g + %g x 2e10/%g + %g x 5e9/%g = %g", x[1], mm, x[2], att, x[3], el,
                  x[4], want);
    json_free(root);
    json_free(plan);
    run_free(&r);
    run_free(&pl);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tiers");
    TCase *inv = tcase_create("invariance");
    tcase_add_checked_fixture(inv, setup, teardown);
    tcase_set_timeout(inv, 300);
    tcase_add_loop_test(inv, invariance_bf16, 0, NPLACEMENTS);
    tcase_add_loop_test(inv, invariance_tied_fp32, 0, NPLACEMENTS);
    tcase_add_test(inv, chunks_change_memory_not_bits);
    tcase_add_test(inv, recompute_keeps_bits);
    tcase_add_test(inv, mlp_chunks_keep_bits);
    tcase_add_test(inv, bf16_weights_keep_bits);
    tcase_add_test(inv, bf16_acts_keep_bits);
    tcase_add_test(inv, vocab_chunks_keep_bits);
    tcase_add_test(inv, optimizer_cache_saves_reads);
    tcase_add_test(inv, update_in_backward_keeps_bits);
    tcase_add_test(inv, update_hands_parameters_to_the_fetch);
    tcase_add_test(inv, updates_find_their_first_reads);
    tcase_add_test(inv, grads_host_visits_start_from_zeros);
    tcase_add_test(inv, plan_counts_the_schedulers_copies);
    suite_add_tcase(s, inv);
    TCase *cap = tcase_create("capacity");
    tcase_add_checked_fixture(cap, setup, teardown);
    tcase_set_timeout(cap, 300);
    tcase_add_test(cap, nvme_makes_it_fit);
    tcase_add_loop_test(cap, plan_matches_allocation, 0, 24);
    tcase_add_test(cap, activations_half_of_fp32);
    tcase_add_test(cap, bf16_weights_need_no_fp32_copy);
    tcase_add_test(cap, plan_names_bf16_activations);
    tcase_add_test(cap, plan_counts_the_recompute);
    tcase_add_test(cap, plan_times_the_compute_parts);
    tcase_add_test(cap, grads_leave_ram);
    tcase_add_test(cap, plan_json_line);
    tcase_add_test(cap, update_in_backward_drops_gradient_extents);
    tcase_add_test(cap, plan_notes_nvme_scale);
    tcase_add_test(cap, optimizer_cache_auto_fits_budget);
    tcase_add_test(cap, host_cache_auto_fits_budget);
    tcase_add_test(cap, bench_capacity_small_disk);
    tcase_add_test(cap, bench_overlap_floor_now);
    tcase_add_test(cap, bench_overlap_floor_now_all_rates);
    tcase_add_test(cap, plan_suggests_what_fits);
    tcase_add_test(cap, plan_phases_hold_their_work);
    tcase_add_test(cap, plan_phases_sum_to_the_step);
    tcase_add_test(cap, plan_floor_resident_is_compute);
    tcase_add_test(cap, plan_json_floor_from_phases);
    tcase_add_test(cap, plan_counts_the_kernels_buffers);
    suite_add_tcase(s, cap);
    TCase *flt = tcase_create("faults");
    tcase_add_checked_fixture(flt, setup, teardown);
    tcase_set_timeout(flt, 120);
    tcase_add_test(flt, io_error_names_shard_and_file);
    tcase_add_test(flt, trace_has_every_track);
    suite_add_tcase(s, flt);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
