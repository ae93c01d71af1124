// test_eval.c — `tiertrain eval` through the binary: a `tiny` checkpoint saved by
// `tiertrain train --save`, evaluated over a generated text file. Checked: the JSON line and
// its counts (windows = floor(N / (T+1)), tokens = windows·T); the same number through the
// folder, the --save directory and DIR/latest; the loss against an in-test forward of the
// same windows on a trainer loaded through the C API (one window, two windows with a dropped
// partial one, all of them: equal to the last bit); --seq and the checkpoint's precision; the
// text's tokens as llm.c files of both widths (eval and train give the text's bits); and the
// bad-input messages, exactly. Needs no python or torch (tests/ref/check_export.py is the
// check against an independent PyTorch model: `make check-export`).
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checkpoint.h"
#include "trainer.h"
#include "testutil.h"

enum { T_TINY = 64 }; // the tiny preset's sequence length, the checkpoint's T

// ---------------------------------------------------------------- fixture: one checkpoint

static char *g_dir;        // temporary folder holding everything below
static char g_text[1200];  // the generated text file (bytes are tokens)
static char g_save[1200];  // the --save directory
static size_t g_ntext;     // its size: N tokens

// Lines of text with some structure, so the trained model is not uniform; deterministic.
static size_t write_text(const char *path, int lines) {
    static const char *const words[] = {"the", "cat", "sees", "a", "dog", "near", "river", "and", "sings", "slowly"};
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    uint64_t s = 12345;
    size_t n = 0;
    for (int i = 0; i < lines; i++) {
        int k = 3 + i % 5;
        for (int j = 0; j < k; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            n += (size_t)fprintf(f, "%s%s", j ? " " : "", words[(s >> 33) % 10]);
        }
        n += (size_t)fprintf(f, " %d.\n", i % 17);
    }
    ck_assert(fclose(f) == 0);
    return n;
}

typedef struct { int rc; char *out, *err; } run_t;

static run_t run(const char *const *args) {
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)tu_binary();
    for (int i = 0; args[i]; i++) argv[n++] = (char *)args[i];
    // the CPU backend everywhere: the in-test reference forward runs there, and the bits of
    // a CUDA forward differ from it (BF16 tolerance, not equality)
    argv[n++] = "--device";
    argv[n++] = "cpu";
    argv[n] = NULL;
    run_t r = {0};
    r.rc = tu_run(argv, NULL, &r.out, &r.err);
    return r;
}

static void run_free(run_t *r) { free(r->out); free(r->err); }

static void setup(void) {
    g_dir = tu_tmpdir("eval");
    ck_assert(g_dir != NULL);
    snprintf(g_text, sizeof g_text, "%s/text.txt", g_dir);
    snprintf(g_save, sizeof g_save, "%s/ckpt", g_dir);
    g_ntext = write_text(g_text, 200);
    const char *args[] = {"train", "--model", "tiny", "--steps", "3", "--data", g_text, "--save", g_save,
                          "--eval-every", "0", "--quiet", NULL};
    run_t r = run(args);
    ck_assert_msg(r.rc == 0, "train --save failed (%d): %s", r.rc, r.err);
    run_free(&r);
}

static void teardown(void) {
    tu_rm_rf(g_dir); // says what it could not remove
    free(g_dir);
}

// ---------------------------------------------------------------- the eval line

typedef struct { double loss; long long tokens, windows; char line[256]; } evline_t;

// The last line of out must be {"event":"eval","loss":L,"tokens":N,"windows":W}.
static evline_t parse_eval(const run_t *r) {
    ck_assert_msg(r->rc == 0, "eval failed (%d): %s", r->rc, r->err);
    size_t len = strlen(r->out);
    ck_assert_msg(len > 0 && r->out[len - 1] == '\n', "output does not end with a line: %s", r->out);
    const char *last = r->out + len - 1;
    while (last > r->out && last[-1] != '\n') last--;
    evline_t e = {0};
    snprintf(e.line, sizeof e.line, "%.*s", (int)(r->out + len - 1 - last), last);
    char tail[8];
    int n = sscanf(e.line, "{\"event\":\"eval\",\"loss\":%lf,\"tokens\":%lld,\"windows\":%lld%7s", &e.loss, &e.tokens,
                   &e.windows, tail);
    ck_assert_msg(n == 4 && strcmp(tail, "}") == 0, "last line is not the eval JSON line: %s", e.line);
    ck_assert_msg(isfinite(e.loss) && e.loss > 0, "loss %g", e.loss);
    return e;
}

static evline_t eval(const char *resume, const char *const *extra) {
    const char *args[24] = {"eval", "--resume", resume, "--data", g_text};
    int n = 5;
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    run_t r = run(args);
    evline_t e = parse_eval(&r);
    run_free(&r);
    return e;
}

// ---------------------------------------------------------------- the in-test reference

// Losses of windows [0, nwin) of the text file (T+1 tokens each, consecutive), each by one
// trainer_forward of a trainer loaded from the checkpoint through the C API. Returns their
// mean, summed in window order as eval does.
static double forward_windows(size_t nwin, precision_t prec) {
    char dir[TT_PATH_MAX], err[1024];
    ck_assert_msg(checkpoint_resolve(g_save, dir, sizeof dir, err, sizeof err) == 0, "%s", err);
    ckpt_info_t info;
    ck_assert_msg(checkpoint_info(dir, &info, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(info.step, 3);
    ck_assert_int_eq(info.T, T_TINY);
    config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.command = CMD_EVAL;
    cfg.L = info.L; cfg.C = info.C; cfg.NH = info.NH; cfg.NKV = info.NKV; cfg.F = info.F; cfg.V = info.V;
    cfg.T = info.T; cfg.tie = info.tie; cfg.rope_theta = info.rope_theta; cfg.norm_eps = info.norm_eps;
    cfg.precision = prec;
    cfg.B = 1; cfg.accum = 1; cfg.steps = 1; cfg.eval_batches = 1; cfg.seed = 1;
    cfg.device = DEVICE_CPU; cfg.params_tier = TIER_DEVICE; cfg.grads_tier = TIER_DEVICE; cfg.optim_tier = TIER_HOST;
    cfg.schedule = SCHEDULE_HORIZONTAL; cfg.acts_tier = ACTS_DEVICE; cfg.prefetch = 2;
    cfg.lr = 1e-3; cfg.beta1 = 0.9; cfg.beta2 = 0.95; cfg.eps = 1e-8;
    trainer_t *tr = NULL;
    ck_assert_msg(trainer_init(&tr, &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(checkpoint_load(tr, NULL, &info, 1, err, sizeof err) == 0, "%s", err);

    char *text = tu_slurp(g_text);
    ck_assert(text != NULL);
    int inputs[T_TINY], targets[T_TINY];
    double sum = 0;
    for (size_t w = 0; w < nwin; w++) {
        const unsigned char *t = (const unsigned char *)text + w * (T_TINY + 1);
        ck_assert((w + 1) * (T_TINY + 1) <= g_ntext);
        for (int i = 0; i < T_TINY; i++) { inputs[i] = t[i]; targets[i] = t[i + 1]; }
        sum += trainer_forward(tr, inputs, targets);
    }
    free(text);
    trainer_free(tr);
    return sum / (double)nwin;
}

// ---------------------------------------------------------------- core

START_TEST(counts_and_json_line) {
    const char *args[] = {"eval", "--resume", g_save, "--data", g_text, "--precision", "fp32", NULL};
    run_t r = run(args);
    evline_t e = parse_eval(&r);
    long long W = (long long)(g_ntext / (T_TINY + 1));
    ck_assert_int_eq(e.windows, W);
    ck_assert_int_eq(e.tokens, W * T_TINY);
    // the resolved setup comes first: folder and step, data, T, precision, windows
    char want[1400];
    snprintf(want, sizeof want, "tiertrain eval: checkpoint %s/step-00000003 (step 3,", g_save);
    ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "first line: %s", r.out);
    snprintf(want, sizeof want, "%zu windows of T+1 = 65", (size_t)W);
    ck_assert_msg(strstr(r.out, want) != NULL, "no '%s' in: %s", want, r.out);
    ck_assert_msg(strstr(r.out, "seq 64 (the checkpoint's), precision fp32 (--precision)") != NULL, "%s", r.out);
    // stderr: nothing but the progress line, which a slow run prints (a loaded machine: CI
    // runs two tests at once)
    for (const char *l = r.err; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        ck_assert_msg(!strncmp(l, "tiertrain: evaluating (windows): ", 33), "stderr: %s", r.err);
    run_free(&r);
}
END_TEST

// The folder, the --save directory and DIR/latest name the same checkpoint: the same line.
START_TEST(resume_forms_agree) {
    const char *fp32[] = {"--precision", "fp32", NULL};
    char folder[1300], latest[1300];
    snprintf(folder, sizeof folder, "%s/step-00000003", g_save);
    snprintf(latest, sizeof latest, "%s/latest", g_save);
    evline_t a = eval(g_save, fp32), b = eval(folder, fp32), c = eval(latest, fp32);
    ck_assert_str_eq(a.line, b.line);
    ck_assert_str_eq(a.line, c.line);
}
END_TEST

// --eval-tokens T+1: one window, its loss exactly that of the in-test forward.
START_TEST(one_window_equals_forward) {
    const char *args[] = {"--precision", "fp32", "--eval-tokens", "65", NULL};
    evline_t e = eval(g_save, args);
    ck_assert_int_eq(e.windows, 1);
    ck_assert_int_eq(e.tokens, T_TINY);
    double ref = forward_windows(1, PREC_FP32);
    ck_assert_msg(e.loss == ref, "eval loss %.17g, in-test forward %.17g", e.loss, ref);
}
END_TEST

// --eval-tokens 2(T+1)+30: two windows, the 30-token tail dropped; the mean of the two.
START_TEST(two_windows_tail_dropped) {
    const char *args[] = {"--precision", "fp32", "--eval-tokens", "160", NULL};
    evline_t e = eval(g_save, args);
    ck_assert_int_eq(e.windows, 2);
    ck_assert_int_eq(e.tokens, 2 * T_TINY);
    double ref = forward_windows(2, PREC_FP32);
    ck_assert_msg(e.loss == ref, "eval loss %.17g, in-test forward %.17g", e.loss, ref);
}
END_TEST

// The whole file, in the checkpoint's own precision (bf16: training's default) and in fp32.
START_TEST(all_windows_both_precisions) {
    size_t W = g_ntext / (T_TINY + 1);
    const char *fp32[] = {"--precision", "fp32", NULL};
    evline_t f = eval(g_save, fp32);
    ck_assert_msg(f.loss == forward_windows(W, PREC_FP32), "fp32: eval loss %.17g", f.loss);
    const char *args[] = {"eval", "--resume", g_save, "--data", g_text, NULL};
    run_t r = run(args);
    evline_t b = parse_eval(&r);
    ck_assert_msg(strstr(r.out, "precision bf16 (the checkpoint's)") != NULL, "%s", r.out);
    run_free(&r);
    ck_assert_msg(b.loss == forward_windows(W, PREC_BF16), "bf16: eval loss %.17g", b.loss);
    // BF16 activations (8 mantissa bits): within test_model.c's bf16 loss tolerance of fp32
    ck_assert_msg(fabs(b.loss - f.loss) <= 0.02 * f.loss, "bf16 %.6f vs fp32 %.6f", b.loss, f.loss);
}
END_TEST

// --seq other than the checkpoint's: windows of that length (RoPE positions 0..T-1).
START_TEST(seq_flag) {
    const char *args[] = {"eval", "--resume", g_save, "--data", g_text, "--precision", "fp32", "--seq", "32", NULL};
    run_t r = run(args);
    evline_t e = parse_eval(&r);
    ck_assert_int_eq(e.windows, (long long)(g_ntext / 33));
    ck_assert_int_eq(e.tokens, e.windows * 32);
    ck_assert_msg(strstr(r.out, "seq 32 (--seq)") != NULL, "%s", r.out);
    run_free(&r);
    // past the context the checkpoint was trained for (64): evaluated, with one notice, through
    // state.json and through config.json alike
    char folder[1300], want[2048];
    snprintf(folder, sizeof folder, "%s/step-00000003", g_save);
    for (int hf = 0; hf < 2; hf++) {
        const char *longer[] = {"eval", hf ? "--init-from" : "--resume", folder, "--data", g_text, "--seq", "128", NULL};
        r = run(longer);
        ck_assert_msg(r.rc == 0, "--seq 128 (%s): exit %d: %s", longer[1], r.rc, r.err);
        snprintf(want, sizeof want, "tiertrain: --seq 128: over max_position_embeddings 64 of %s/config.json: the model "
                 "was not trained for sequences this long, so the loss measures how it extrapolates\n", folder);
        ck_assert_msg(strstr(r.err, want), "%s: want \"%s\" in:\n%s", longer[1], want, r.err);
        run_free(&r);
    }
}
END_TEST

// ---------------------------------------------------------------- llm.c token files

// The text file's bytes, each plus add, as an llm.c token file of width-byte tokens.
static void write_llmc(const char *path, int32_t magic, int32_t version, int width, uint32_t add) {
    char *text = tu_slurp(g_text);
    ck_assert(text != NULL);
    int32_t h[256] = {magic, version, (int32_t)g_ntext};
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert(fwrite(h, sizeof h, 1, f) == 1);
    size_t put = 0; // (Check records every assertion: count, then assert once)
    for (size_t i = 0; i < g_ntext; i++) {
        uint32_t t = (unsigned char)text[i] + add;
        uint16_t t16 = (uint16_t)t;
        put += width == 4 ? fwrite(&t, 4, 1, f) : fwrite(&t16, 2, 1, f);
    }
    ck_assert(put == g_ntext && fclose(f) == 0);
    free(text);
}

// The hash on train's "done:" line
static void params_hash_of(const run_t *r, char *hash, size_t len) {
    ck_assert_msg(r->rc == 0, "train failed (%d): %s", r->rc, r->err);
    const char *done = strstr(r->out, "done: "), *p = done ? strstr(done, "params_hash ") : NULL;
    ck_assert_msg(p != NULL, "no params_hash in: %s", r->out);
    snprintf(hash, len, "%.16s", p + 12);
}

// The text's tokens in GPT-2's format (uint16, magic 20240520) and in Llama 3's (uint32,
// 20240801 version 7): eval's line over either is the text's, to the bit, and a run trained
// on either has the same params_hash.
START_TEST(token_files_agree) {
    char b16[1300], b32[1300], h_text[17], h16[17], h32[17];
    snprintf(b16, sizeof b16, "%s/text16.bin", g_dir);
    snprintf(b32, sizeof b32, "%s/text32.bin", g_dir);
    write_llmc(b16, 20240520, 1, 2, 0);
    write_llmc(b32, 20240801, 7, 4, 0);
    const char *fp32[] = {"--precision", "fp32", NULL};
    evline_t e = eval(g_save, fp32);
    for (int k = 0; k < 2; k++) {
        const char *args[] = {"eval", "--resume", g_save, "--data", k ? b32 : b16, "--precision", "fp32", NULL};
        run_t r = run(args);
        evline_t b = parse_eval(&r);
        ck_assert_str_eq(b.line, e.line);
        ck_assert_msg(strstr(r.out, k ? "(llm.c uint32 tokens, " : "(llm.c uint16 tokens, "), "%s", r.out);
        run_free(&r);
    }
    const char *data[3] = {g_text, b16, b32};
    char *hash[3] = {h_text, h16, h32};
    for (int k = 0; k < 3; k++) {
        const char *args[] = {"train", "--model", "tiny", "--steps", "2", "--data", data[k], "--eval-every", "0",
                              "--quiet", NULL};
        run_t r = run(args);
        params_hash_of(&r, hash[k], 17);
        run_free(&r);
    }
    ck_assert_str_eq(h16, h_text);
    ck_assert_str_eq(h32, h_text);
}
END_TEST

// Tokens above 65535, which only the uint32 format holds: a vocabulary of 65792 trains on
// them, and --vocab 65536 is refused with the size that fits.
START_TEST(wide_tokens_train) {
    char path[1300], want[2048];
    snprintf(path, sizeof path, "%s/wide.bin", g_dir);
    write_llmc(path, 20240801, 7, 4, 65536);
    const char *args[] = {"train", "--model", "tiny", "--vocab", "65792", "--steps", "2", "--data", path,
                          "--eval-every", "0", "--quiet", NULL};
    run_t r = run(args);
    ck_assert_msg(r.rc == 0, "train failed (%d): %s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "(llm.c uint32 tokens, "), "%s", r.out);
    run_free(&r);
    char *text = tu_slurp(g_text);
    unsigned first = (unsigned char)text[0] + 65536u, top = 0;
    for (size_t i = 0; i < g_ntext; i++)
        if ((unsigned char)text[i] > top) top = (unsigned char)text[i];
    free(text);
    const char *narrow[] = {"train", "--model", "tiny", "--vocab", "65536", "--steps", "2", "--data", path, NULL};
    snprintf(want, sizeof want, "tiertrain: --data %s: token %u at index 0 is >= --vocab 65536 (the file's largest "
             "token is %u: use --vocab >= %u)\n", path, first, top + 65536u, top + 65537u);
    run_t n = run(narrow);
    ck_assert_msg(n.rc == 2, "exit %d (want 2); stderr: %s", n.rc, n.err);
    ck_assert_str_eq(n.err, want);
    run_free(&n);
}
END_TEST

// ---------------------------------------------------------------- bad input

static void expect_error(const char *const *args, int rc, const char *msg) {
    run_t r = run(args);
    ck_assert_msg(r.rc == rc, "exit %d (want %d); stderr: %s", r.rc, rc, r.err);
    ck_assert_str_eq(r.err, msg);
    run_free(&r);
}

START_TEST(missing_resume) {
    const char *args[] = {"eval", "--data", g_text, NULL};
    expect_error(args, 2, "tiertrain: eval: missing --resume DIR or --init-from DIR (usage: tiertrain eval --resume "
                          "DIR|--init-from DIR --data FILE [--seq T] [--eval-tokens N] [--precision fp32|bf16])\n");
}
END_TEST

// without --data: refused (the built-in corpus only when asked for: --data synthetic)
START_TEST(missing_data) {
    const char *args[] = {"eval", "--resume", g_save, NULL};
    expect_error(args, 2, "tiertrain: eval: missing --data FILE (the tokens to score: a text file or an llm.c .bin token "
                          "file, or synthetic for the built-in corpus; usage: tiertrain eval --resume DIR|--init-from DIR "
                          "--data FILE [--seq T] [--eval-tokens N] [--precision fp32|bf16])\n");
}
END_TEST

START_TEST(resume_not_a_checkpoint) {
    const char *args[] = {"eval", "--resume", g_dir, "--data", g_text, NULL};
    char want[2048];
    snprintf(want, sizeof want, "tiertrain: --resume %s: not a checkpoint (no state.json) and no readable latest file "
             "(give a checkpoint folder, a --save directory, or DIR/latest)\n", g_dir);
    expect_error(args, 2, want);
}
END_TEST

START_TEST(too_few_tokens) {
    char path[1300], want[2048];
    snprintf(path, sizeof path, "%s/short.txt", g_dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs("forty bytes of text, short of a window.\n", f); // 40 bytes
    fclose(f);
    const char *args[] = {"eval", "--resume", g_save, "--data", path, NULL};
    snprintf(want, sizeof want, "tiertrain: --data %s: 40 tokens, fewer than one window of T+1 = 65 tokens "
             "(--seq 64; give a longer file or a lower --seq)\n", path);
    expect_error(args, 2, want);
    // an empty file: too few for eval's own smallest window (not a training split's message)
    snprintf(path, sizeof path, "%s/empty.txt", g_dir);
    f = fopen(path, "w");
    ck_assert(f != NULL && fclose(f) == 0);
    snprintf(want, sizeof want, "tiertrain: --data %s: 0 tokens, too few to evaluate (give a longer file)\n", path);
    expect_error(args, 2, want);
    const char *cut[] = {"eval", "--resume", g_save, "--data", g_text, "--eval-tokens", "64", NULL};
    expect_error(cut, 2, "tiertrain: --eval-tokens 64: fewer than one window of T+1 = 65 tokens (--seq 64; raise "
                         "--eval-tokens or lower --seq)\n");
}
END_TEST

// An llm.c token file holding token 300 at index 5: the checkpoint's vocab is 256.
START_TEST(token_over_vocab) {
    char path[1300], want[2048];
    snprintf(path, sizeof path, "%s/big.bin", g_dir);
    int32_t h[256] = {20240520, 1, 200};
    uint16_t tok[200];
    for (int i = 0; i < 200; i++) tok[i] = (uint16_t)(i % 97);
    tok[5] = 300;
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    ck_assert(fwrite(h, sizeof h, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1);
    fclose(f);
    const char *args[] = {"eval", "--resume", g_save, "--data", path, NULL};
    // not --vocab, which eval does not take: the vocabulary is the checkpoint's
    snprintf(want, sizeof want, "tiertrain: --data %s: token 300 at index 5 is outside the model's vocabulary of 256 "
             "(the file's largest token is 300: give data tokenized for this model)\n", path);
    expect_error(args, 2, want);
}
END_TEST

int main(void) {
    Suite *s = suite_create("eval");
    TCase *core = tcase_create("core");
    tcase_add_unchecked_fixture(core, setup, teardown);
    tcase_set_timeout(core, 300);
    tcase_add_test(core, counts_and_json_line);
    tcase_add_test(core, resume_forms_agree);
    tcase_add_test(core, one_window_equals_forward);
    tcase_add_test(core, two_windows_tail_dropped);
    tcase_add_test(core, all_windows_both_precisions);
    tcase_add_test(core, seq_flag);
    tcase_add_test(core, missing_data);
    tcase_add_test(core, token_files_agree);
    tcase_add_test(core, wide_tokens_train);
    suite_add_tcase(s, core);
    TCase *bad = tcase_create("bad_input");
    tcase_add_unchecked_fixture(bad, setup, teardown);
    tcase_set_timeout(bad, 120);
    tcase_add_test(bad, missing_resume);
    tcase_add_test(bad, resume_not_a_checkpoint);
    tcase_add_test(bad, too_few_tokens);
    tcase_add_test(bad, token_over_vocab);
    suite_add_tcase(s, bad);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
