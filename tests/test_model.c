// test_model.c — the whole model against an independent PyTorch reference.
// Fixtures (tests/ref/model_*.bin) come from tests/ref/make_ref.py: a float64 PyTorch Llama
// with the same weights and tokens. Checked: loss, logits and every parameter gradient, in
// fp32 mode (tight) and bf16 mode (BF16 tolerances).
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h" // uses: rope_table, rope_table_freq
#include "model.h"
#include "trainer.h"
#include "testutil.h"

typedef struct {
    int L, C, NH, NKV, F, V, B, T, tie;
    double theta, eps, loss;
    int *tokens, *targets;
    float *logits;
    float *raw;   // weight then gradient of each tensor, in shard order
    size_t nparam;
} fixture_t;

static void fixture_load(fixture_t *fx, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/ref/%s", TT_TESTS_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (regenerate with /usr/bin/python3 tests/ref/make_ref.py)", path);
    uint32_t hdr[2];
    int32_t dims[10];
    double d[3];
    ck_assert(fread(hdr, sizeof hdr, 1, f) == 1);
    ck_assert_msg(hdr[0] == 0x46525454u && hdr[1] == 1, "%s: bad magic/version", path);
    ck_assert(fread(dims, sizeof dims, 1, f) == 1);
    ck_assert(fread(d, sizeof d, 1, f) == 1);
    fx->L = dims[0]; fx->C = dims[1]; fx->NH = dims[2]; fx->NKV = dims[3]; fx->F = dims[4];
    fx->V = dims[5]; fx->B = dims[6]; fx->T = dims[7]; fx->tie = dims[8];
    fx->theta = d[0]; fx->eps = d[1]; fx->loss = d[2];
    size_t N = (size_t)fx->B * fx->T;
    fx->tokens = malloc(N * sizeof(int));
    fx->targets = malloc(N * sizeof(int));
    fx->logits = malloc(N * fx->V * sizeof(float));
    ck_assert(fread(fx->tokens, sizeof(int), N, f) == N);
    ck_assert(fread(fx->targets, sizeof(int), N, f) == N);
    ck_assert(fread(fx->logits, sizeof(float), N * fx->V, f) == N * fx->V);
    long pos = ftell(f);
    fseek(f, 0, SEEK_END);
    size_t rest = (size_t)(ftell(f) - pos);
    fseek(f, pos, SEEK_SET);
    fx->nparam = rest / (2 * sizeof(float));
    fx->raw = malloc(rest); // (weight, grad) per tensor in shard order
    ck_assert(fread(fx->raw, 1, rest, f) == rest);
    fclose(f);
}

static void fixture_free(fixture_t *fx) {
    free(fx->tokens); free(fx->targets); free(fx->logits); free(fx->raw);
}

static void config_for(config_t *cfg, const fixture_t *fx, precision_t prec) {
    memset(cfg, 0, sizeof *cfg);
    cfg->command = CMD_TRAIN;
    snprintf(cfg->preset, sizeof cfg->preset, "ref");
    cfg->L = fx->L; cfg->C = fx->C; cfg->NH = fx->NH; cfg->NKV = fx->NKV; cfg->F = fx->F;
    cfg->V = fx->V; cfg->T = fx->T; cfg->B = fx->B; cfg->tie = fx->tie;
    cfg->rope_theta = fx->theta; cfg->norm_eps = fx->eps;
    cfg->precision = prec; cfg->seed = 1; cfg->accum = 1; cfg->steps = 1;
    cfg->lr = 1e-3; cfg->beta1 = 0.9; cfg->beta2 = 0.95; cfg->eps = 1e-8;
    cfg->device = DEVICE_CPU;
}

// Tolerances. fp32 mode: the C model computes in float32 against a float64 reference;
// errors are accumulated rounding of O(1e-7) relative per op over two blocks, so 1e-4
// relative plus a small absolute floor (gradients near zero) is tight enough to catch any
// wrong term (a missing term is O(1) relative) and loose enough for sgemm's summation order.
static const double FP32_LOGITS_ATOL = 1e-5, FP32_LOGITS_RTOL = 1e-4;
static const double FP32_GRAD_ATOL = 1e-6, FP32_GRAD_RTOL = 1e-3;
static const double FP32_LOSS_TOL = 1e-5;
// bf16 mode: weights and every stored activation are rounded to 8 mantissa bits (relative
// step 2^-8 ≈ 0.4%); through ~25 rounded ops the error grows to a few percent of a
// tensor's scale. The absolute floor is a fraction of the tensor's largest magnitude.
static const double BF16_LOGITS_ATOL_FRAC = 0.03, BF16_RTOL = 0.05;
static const double BF16_GRAD_ATOL_FRAC = 0.08;
static const double BF16_LOSS_TOL = 0.02;

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

// mlp_rows > 0: the MLP in chunks of that many rows (TT_TEST_MLP_ROWS); kept: blocks that keep
// their intermediates (--recompute), the others recompute them.
static void run_reference(const char *fixture, precision_t prec, int mlp_rows, int kept) {
    fixture_t fx;
    fixture_load(&fx, fixture);
    config_t cfg;
    config_for(&cfg, &fx, prec);
    cfg.kept_blocks = kept;
    char rows[32];
    snprintf(rows, sizeof rows, "%d", mlp_rows);
    if (mlp_rows > 0) setenv("TT_TEST_MLP_ROWS", rows, 1);
    trainer_t *tr = NULL;
    char err[256];
    ck_assert_msg(trainer_init(&tr, &cfg, err, sizeof err) == 0, "%s", err);
    const model_t *m = trainer_model(tr);
    ck_assert_uint_eq(m->num_params, fx.nparam);
    if (mlp_rows > 0) // the chunks really cut the rows
        ck_assert_msg(model_mlp_rows(m, fx.B * fx.T) == mlp_rows && mlp_rows < fx.B * fx.T, "%d rows in chunks of %d",
                      fx.B * fx.T, model_mlp_rows(m, fx.B * fx.T));

    // the reference weights, loaded through the trainer's state API (a shard per chunk here)
    const float *raw = fx.raw;
    size_t off = 0;
    for (int s = 0; s < m->nshards; s++) {
        const shard_t *sh = &m->shards[s];
        ck_assert_int_eq(trainer_nchunks(tr, s), 1);
        float *master, *mm, *vv;
        ck_assert_msg(trainer_states_get(tr, s, 0, TIER_O32, 0, &master, &mm, &vv, err, sizeof err) == 0, "%s", err);
        for (int t = 0; t < sh->ntensors; t++) {
            memcpy(master + sh->tensors[t].offset, raw + off, sh->tensors[t].numel * sizeof(float));
            off += 2 * sh->tensors[t].numel;
        }
        ck_assert_msg(trainer_states_put(tr, s, 0, TIER_O32, err, sizeof err) == 0, "%s", err);
    }
    ck_assert_uint_eq(off, 2 * fx.nparam);

    const size_t N = (size_t)fx.B * fx.T;
    double loss = trainer_forward(tr, fx.tokens, fx.targets);
    int bf = prec == PREC_BF16;
    double lt = bf ? BF16_LOSS_TOL : FP32_LOSS_TOL;
    ck_assert_msg(fabs(loss - fx.loss) <= lt * fabs(fx.loss), "loss %.8f vs reference %.8f", loss, fx.loss);
    double la = bf ? BF16_LOGITS_ATOL_FRAC * max_abs(fx.logits, N * fx.V) : FP32_LOGITS_ATOL;
    float *logits = malloc(N * fx.V * sizeof(float));
    ck_assert_ptr_nonnull(logits);
    ck_assert_msg(trainer_logits(tr, logits, err, sizeof err) == 0, "%s", err);
    ck_assert(tu_close_f("logits", logits, fx.logits, N * fx.V, la, bf ? BF16_RTOL : FP32_LOGITS_RTOL));
    free(logits);

    ck_assert_msg(trainer_zero_grads(tr, err, sizeof err) == 0, "%s", err);
    double loss2 = trainer_forward_backward(tr, fx.tokens, fx.targets, 1, 1.0f / (float)N);
    ck_assert_msg(loss2 == loss, "forward_backward loss %.9g != forward loss %.9g", loss2, loss);
    off = 0;
    int ok = 1;
    for (int s = 0; s < m->nshards; s++) {
        const shard_t *sh = &m->shards[s];
        const float *g;
        ck_assert_msg(trainer_grads_get(tr, s, &g, err, sizeof err) == 0, "%s", err);
        for (int t = 0; t < sh->ntensors; t++) {
            const tensor_t *te = &sh->tensors[t];
            const float *ref = raw + off + te->numel;
            char what[96];
            snprintf(what, sizeof what, "%s %s grad (%s)", sh->name, te->name, bf ? "bf16" : "fp32");
            double ga = bf ? BF16_GRAD_ATOL_FRAC * max_abs(ref, te->numel) : FP32_GRAD_ATOL;
            ok &= tu_close_f(what, g + te->offset, ref, te->numel, ga, bf ? BF16_RTOL : FP32_GRAD_RTOL);
            off += 2 * te->numel;
        }
    }
    ck_assert_msg(ok, "gradients differ from the PyTorch reference (see above)");
    trainer_free(tr);
    fixture_free(&fx);
    unsetenv("TT_TEST_MLP_ROWS");
}

START_TEST(untied_fp32) { run_reference("model_untied.bin", PREC_FP32, 0, 0); }
END_TEST
START_TEST(tied_fp32) { run_reference("model_tied.bin", PREC_FP32, 0, 0); }
END_TEST
START_TEST(untied_bf16) { run_reference("model_untied.bin", PREC_BF16, 0, 0); }
END_TEST
START_TEST(tied_bf16) { run_reference("model_tied.bin", PREC_BF16, 0, 0); }
END_TEST
// The MLP in chunks of 5 rows (the last one short), its weight gradients summed over them:
// recomputed (every block) and kept (the first block keeps its attention half).
START_TEST(untied_fp32_mlp_chunks) { run_reference("model_untied.bin", PREC_FP32, 5, _i); }
END_TEST
START_TEST(tied_bf16_mlp_chunks) { run_reference("model_tied.bin", PREC_BF16, 5, _i); }
END_TEST

// ---------------------------------------------------------------- init

// The init draws each tensor's stream in parallel blocks (model.c): the same bits on 1 and 2
// threads, for a whole shard and for a range starting mid-pair and mid-block; a piece of a cut
// vocabulary holds the uncut tensor's values for its rows; and the values are N(0, 0.02²).
START_TEST(init_is_one_stream) {
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    ck_assert_int_eq(model_preset("small", &cfg), 0);
    cfg.V = 8192; // cut in 2 (small's block holds 4096 rows)
    model_t cut, whole;
    model_init(&cut, &cfg);
    setenv("TT_TEST_VOCAB_CHUNK", "8192", 1);
    model_init(&whole, &cfg);
    unsetenv("TT_TEST_VOCAB_CHUNK");
    ck_assert(cut.vchunks == 2 && whole.vchunks == 1);
    const int shards[] = {model_embed_shard(&cut, 1), model_block_shard(&cut, 0), model_lm_shard(&cut, 1)};
    for (int k = 0; k < 3; k++) {
        const int sh = shards[k];
        const size_t n = cut.shards[sh].numel_padded;
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
        omp_set_num_threads(1);
        model_init_shard(&cut, sh, 42, a);
        omp_set_num_threads(2);
        model_init_shard(&cut, sh, 42, b);
        ck_assert_msg(!memcmp(a, b, n * sizeof(float)), "shard %s: 1 and 2 threads differ", cut.shards[sh].name);
        const size_t lo = 65535, len = n - lo < 140001 ? n - lo : 140001;
        model_init_range(&cut, sh, 42, lo, len, r);
        ck_assert_msg(!memcmp(a + lo, r, len * sizeof(float)), "shard %s: a range differs from the shard", cut.shards[sh].name);
        free(a); free(b); free(r);
    }
    // the cut embedding's second piece is rows 4096.. of the whole one
    const size_t C = (size_t)cfg.C, rows = 4096;
    float *piece = malloc(rows * C * sizeof(float)), *ref = malloc(rows * C * sizeof(float));
    model_init_range(&cut, model_embed_shard(&cut, 1), 7, 0, rows * C, piece);
    model_init_range(&whole, model_embed_shard(&whole, 0), 7, rows * C, rows * C, ref);
    ck_assert_msg(!memcmp(piece, ref, rows * C * sizeof(float)), "the cut embedding's piece differs from the whole's rows");
    double sum = 0, sq = 0;
    for (size_t i = 0; i < rows * C; i++) {
        sum += piece[i];
        sq += (double)piece[i] * piece[i];
    }
    const double mean = sum / (double)(rows * C), sd = sqrt(sq / (double)(rows * C) - mean * mean);
    ck_assert_msg(fabs(mean) < 1e-4 && fabs(sd - 0.02) < 2e-4, "embedding init: mean %g, sd %g (want 0, 0.02)", mean, sd);
    free(piece); free(ref);
    model_free(&cut);
    model_free(&whole);
}
END_TEST

#define CHECK_LOOP(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

// The optimizer decays the matrices alone: from zero gradients and fresh moments, one AdamW
// step scales every matrix element by 1 − lr·wd and leaves the norms' weights as they were, bit
// for bit. optim.c hands tensors that lie one after another with one decay to AdamW in one
// call (a block's q, k, v and o; gate, up and down): a run that crossed a norm would show here.
// RoPE's inverse frequencies under scaling (model_rope_freqs) against transformers' rules,
// written here by the ratio r = original context / wavelength = orig · f / 2π: r < low is
// divided by factor, r > high kept, and between, s = (r − low) / (high − low) blends the two,
// f · ((1 − s) / factor + s). Llama 3.2's (theta 500000, HS 64, factor 32, low 1, high 4,
// 8192), the fixture's own (theta 10000, HS 8, 8, 1, 4, 64), linear x4; and none, whose table
// is rope_table's to the bit.
START_TEST(rope_scaling_freqs) {
    static const struct { double theta; int HS; rope_scaling_t s; int kept, blended, divided; } cases[] = {
        {500000, 64, {ROPE_LLAMA3, 32, 1, 4, 8192}, -1, -1, -1},
        {10000, 8, {ROPE_LLAMA3, 8, 1, 4, 64}, 1, 1, 2}, // wavelengths 6.3, 63, 628, 6283 against 16 and 64
        {10000, 16, {ROPE_LINEAR, 4, 0, 0, 0}, -1, -1, -1},
    };
    const double pi = 3.14159265358979323846;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        model_t m;
        memset(&m, 0, sizeof m);
        m.HS = cases[k].HS;
        m.rope_theta = cases[k].theta;
        m.rope_scaling = cases[k].s;
        const rope_scaling_t *s = &cases[k].s;
        double got[32];
        model_rope_freqs(&m, got);
        int kept = 0, blended = 0, divided = 0;
        for (int i = 0; i < m.HS / 2; i++) {
            const double f = 1.0 / pow(cases[k].theta, 2.0 * i / m.HS);
            double want = f / s->factor;
            if (s->type == ROPE_LLAMA3) {
                const double r = s->orig_ctx * f / (2 * pi);
                if (r > s->high_freq) want = f, kept++;
                else if (r >= s->low_freq) {
                    const double b = (r - s->low_freq) / (s->high_freq - s->low_freq);
                    want = f * ((1 - b) / s->factor + b);
                    blended++;
                } else divided++;
            }
            ck_assert_msg(fabs(got[i] - want) <= 1e-14 * want, "case %zu, i %d: %.17g, want %.17g", k, i, got[i], want);
        }
        if (s->type == ROPE_LLAMA3) // Llama 3.2's has all three kinds
            ck_assert_msg(kept && blended && divided, "case %zu: %d kept, %d blended, %d divided", k, kept, blended,
                          divided);
        if (cases[k].kept >= 0)
            ck_assert_msg(kept == cases[k].kept && blended == cases[k].blended && divided == cases[k].divided,
                          "case %zu: %d kept, %d blended, %d divided", k, kept, blended, divided);
    }
    // no scaling: the table from model_rope_freqs is rope_table's, bit for bit
    model_t m;
    memset(&m, 0, sizeof m);
    m.HS = 64;
    m.rope_theta = 500000;
    double freq[32];
    model_rope_freqs(&m, freq);
    enum { T = 37 };
    float c1[T * 32], s1[T * 32], c2[T * 32], s2[T * 32];
    rope_table(c1, s1, T, 64, 500000);
    rope_table_freq(c2, s2, T, 64, freq);
    ck_assert(memcmp(c1, c2, sizeof c1) == 0 && memcmp(s1, s2, sizeof s1) == 0);
}
END_TEST

START_TEST(decay_on_matrices_only) {
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.command = CMD_TRAIN;
    snprintf(cfg.preset, sizeof cfg.preset, "decay");
    cfg.L = 2; cfg.C = 64; cfg.NH = 4; cfg.NKV = 2; cfg.F = 192; cfg.V = 256; cfg.T = 16; cfg.B = 2;
    cfg.rope_theta = 10000.0; cfg.norm_eps = 1e-5;
    cfg.precision = PREC_FP32; cfg.seed = 1; cfg.accum = 1; cfg.steps = 1;
    cfg.lr = 0.1; cfg.wd = 0.5; cfg.beta1 = 0.9; cfg.beta2 = 0.95; cfg.eps = 1e-8;
    cfg.device = DEVICE_CPU;
    trainer_t *tr = NULL;
    char err[256];
    ck_assert_msg(trainer_init(&tr, &cfg, err, sizeof err) == 0, "%s", err);
    const model_t *m = trainer_model(tr);
    float *before[64];
    ck_assert_int_le(m->nshards, 64);
    for (int s = 0; s < m->nshards; s++) {
        ck_assert_int_eq(trainer_nchunks(tr, s), 1);
        float *master, *mm, *vv;
        ck_assert_msg(trainer_states_get(tr, s, 0, TIER_O32, 0, &master, &mm, &vv, err, sizeof err) == 0, "%s", err);
        before[s] = malloc(m->shards[s].numel_padded * sizeof(float));
        ck_assert_ptr_nonnull(before[s]);
        memcpy(before[s], master, m->shards[s].numel_padded * sizeof(float));
    }
    ck_assert_msg(trainer_zero_grads(tr, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(trainer_optimizer_step(tr, 1, 0.1f, 1.0f, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(trainer_optimizer_wait(tr, err, sizeof err) == 0, "%s", err);
    int decayed = 0, kept = 0;
    for (int s = 0; s < m->nshards; s++) {
        const shard_t *sh = &m->shards[s];
        float *master, *mm, *vv;
        ck_assert_msg(trainer_states_get(tr, s, 0, TIER_O32, 0, &master, &mm, &vv, err, sizeof err) == 0, "%s", err);
        for (int t = 0; t < sh->ntensors; t++) {
            const tensor_t *te = &sh->tensors[t];
            for (size_t i = te->offset; i < te->offset + te->numel; i++) {
                const float x = before[s][i], p = master[i];
                if (!te->decay) {
                    CHECK_LOOP(memcmp(&x, &p, sizeof x) == 0, "%s %s[%zu]: %a became %a with no decay", sh->name,
                               te->name, i - te->offset, x, p);
                    continue;
                }
                CHECK_LOOP(fabs(p - 0.95 * x) <= 1e-6 * fabs(x) && (x == 0 || p != x),
                           "%s %s[%zu]: %a became %a, not 0.95 of it", sh->name, te->name, i - te->offset, x, p);
            }
            if (te->decay) decayed++;
            else kept++;
        }
        free(before[s]);
    }
    ck_assert_msg(decayed > 0 && kept > 0, "%d tensors decayed, %d not", decayed, kept);
    trainer_free(tr);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model");
    TCase *ti = tcase_create("init");
    tcase_add_test(ti, init_is_one_stream);
    tcase_add_test(ti, decay_on_matrices_only);
    tcase_add_test(ti, rope_scaling_freqs);
    suite_add_tcase(s, ti);
    TCase *tc = tcase_create("pytorch_reference");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, untied_fp32);
    tcase_add_test(tc, tied_fp32);
    tcase_add_test(tc, untied_bf16);
    tcase_add_test(tc, tied_bf16);
    tcase_add_loop_test(tc, untied_fp32_mlp_chunks, 0, 2);
    tcase_add_loop_test(tc, tied_bf16_mlp_chunks, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
