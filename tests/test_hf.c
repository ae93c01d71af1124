// test_hf.c — --init-from DIR through the binary (src/hf.h), on the fixture that
// tests/make_hf_fixture.py writes (tests/fixtures/hf_tiny: sharded, BF16, GQA, untied, no
// checksums, as transformers saves a folder):
//   loss      step 1 of a fine-tune from the folder has exactly the loss `eval --init-from`
//             gives the same weights on the same tokens (fp32), under every placement;
//   round     fine-tune, save, --init-from the saved folder: the weights arrive bit-exactly
//             (the params_hash the save recorded), with every checksum verified;
//   carry     a checkpoint takes the folder's tokenizer and generation files and token ids along;
//   rope      rope_scaling llama3 (Llama 3.1/3.2): applied, saved in both files, resumed, evaluated;
//   refusals  a dtype the loader does not take, a missing shard, a config.json that does not
//             fit the weights, a shape flag that contradicts config.json, unsupported
//             config fields, --init-from with --resume: exit 2 and one line each.
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "safetensors.h" // uses: st_writer_open (a shard of the test's own)
#include "testutil.h"

#define FIXTURE TT_TESTS_DIR "/fixtures/hf_tiny"

static char *tmp; // this test's folder

static void setup(void) { tmp = tu_tmpdir("hf"); }
static void teardown(void) {
    tu_rm_rf(tmp);
    free(tmp);
    tmp = NULL;
}

typedef struct {
    int rc;
    char *out, *err;
} run_t;

static void run_free(run_t *r) {
    free(r->out);
    free(r->err);
}

// tiertrain CMD with the fixture's common flags and the NULL-terminated extra ones.
static run_t run(const char *cmd, const char *const *extra) {
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)tu_binary();
    argv[n++] = (char *)cmd;
    static const char *const common[] = {"--device", "cpu", "--threads", "1", "--precision", "fp32", "--seq", "16", NULL};
    for (int i = 0; common[i]; i++) argv[n++] = (char *)common[i];
    for (int i = 0; extra[i]; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    run_t r;
    r.rc = tu_run(argv, NULL, &r.out, &r.err);
    return r;
}

// A text file of bytes (vocab 256) for the data: a few KiB of this very source.
static const char *data_file(void) {
    static char path[1200];
    snprintf(path, sizeof path, "%s/data.txt", tmp);
    char *src = tu_slurp(TT_TESTS_DIR "/test_hf.c");
    ck_assert_ptr_nonnull(src);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(src, f) >= 0 && fclose(f) == 0);
    free(src);
    return path;
}

// The number after `key` in s (e.g. "loss " in a step line), as text up to a space or '|'.
static int number_after(const char *s, const char *key, char *out, size_t cap) {
    const char *p = s ? strstr(s, key) : NULL;
    if (!p) return 0;
    p += strlen(key);
    size_t n = 0;
    while (p[n] && p[n] != ' ' && p[n] != '|' && p[n] != ',' && p[n] != '\n' && n + 1 < cap) n++;
    memcpy(out, p, n);
    out[n] = 0;
    return n > 0;
}

static void copy_file(const char *a, const char *b) {
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    ck_assert_msg(in && out, "copy %s -> %s", a, b);
    char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, in)) > 0) ck_assert(fwrite(buf, 1, k, out) == k);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

static void copy_folder(const char *from, const char *to) {
    ck_assert_int_eq(mkdir(to, 0755), 0);
    static const char *const files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors", NULL};
    for (int i = 0; files[i]; i++) {
        char a[1200], b[1200];
        snprintf(a, sizeof a, "%s/%s", from, files[i]);
        snprintf(b, sizeof b, "%s/%s", to, files[i]);
        copy_file(a, b);
    }
}

// Replaces the first `from` in a file with `to` (binary-safe; the file is small).
static void edit(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "rb");
    ck_assert(f);
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *at = memmem(buf, n, from, strlen(from));
    ck_assert_msg(at != NULL, "%s: no '%s'", path, from);
    f = fopen(path, "wb");
    ck_assert(f);
    ck_assert(fwrite(buf, 1, (size_t)(at - buf), f) == (size_t)(at - buf));
    ck_assert(fwrite(to, 1, strlen(to), f) == strlen(to));
    size_t rest = n - (size_t)(at - buf) - strlen(from);
    ck_assert(fwrite(at + strlen(from), 1, rest, f) == rest);
    ck_assert_int_eq(fclose(f), 0);
}

// Element elem of BF16 tensor `name` in a safetensors file becomes the 16 bits `bits`: the
// data's place from the header's "data_offsets" (8 bytes of length, the header, the data).
static void poke_bf16(const char *path, const char *name, long elem, unsigned bits) {
    FILE *f = fopen(path, "r+b");
    ck_assert(f);
    unsigned char len[8];
    ck_assert(fread(len, 1, 8, f) == 8);
    unsigned long long hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len[i];
    static char hdr[1 << 16];
    ck_assert(hlen < sizeof hdr && fread(hdr, 1, hlen, f) == hlen);
    hdr[hlen] = 0;
    char key[256];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *at = strstr(hdr, key), *off = at ? strstr(at, "\"data_offsets\":[") : NULL;
    ck_assert_msg(off, "%s: no tensor '%s'", path, name);
    const unsigned long long begin = strtoull(off + strlen("\"data_offsets\":["), NULL, 10);
    const unsigned char b[2] = {bits & 0xff, bits >> 8};
    ck_assert(fseek(f, (long)(8 + hlen + begin + 2 * (unsigned long long)elem), SEEK_SET) == 0);
    ck_assert(fwrite(b, 1, 2, f) == 2);
    ck_assert_int_eq(fclose(f), 0);
}

// The first `from` in DIR/config.json becomes `to`.
static void edit_config(const char *dir, const char *from, const char *to) {
    char file[1300];
    snprintf(file, sizeof file, "%s/config.json", dir);
    edit(file, from, to);
}

// ---------------------------------------------------------------- loss

static const char *const placements[][8] = {
    {NULL},
    {"--params", "host", "--grads", "host", "--optimizer", "nvme", NULL},
    {"--params", "nvme", "--grads", "nvme", "--optimizer", "nvme", NULL},
};

// Step 1's loss is the forward of the folder's weights on the first T+1 tokens: what eval
// computes over one window. And every placement trains the same bits from them.
START_TEST(step1_loss_is_eval) {
    const char *data = data_file();
    const char *ev[] = {"--init-from", FIXTURE, "--data", data, "--eval-tokens", "17", NULL};
    run_t e = run("eval", ev);
    ck_assert_msg(e.rc == 0, "eval exit %d:\n%s", e.rc, e.err);
    char eloss[64], want[64];
    ck_assert_msg(number_after(e.out, "eval: loss ", eloss, sizeof eloss), "%s", e.out);
    static char hash0[32];
    for (int p = 0; p < 3; p++) {
        const char *tr[24] = {"--init-from", FIXTURE, "--data", data, "--batch", "1", "--steps", "4", "--eval-every",
                              "0", "--nvme-path", tmp};
        int n = 12;
        for (int i = 0; placements[p][i]; i++) tr[n++] = placements[p][i];
        tr[n] = NULL;
        run_t t = run("train", tr);
        ck_assert_msg(t.rc == 0, "placement %d: train exit %d:\n%s", p, t.rc, t.err);
        char tloss[64], hash[32];
        const char *step1 = strstr(t.out, "step     1/4");
        ck_assert_msg(number_after(step1, "loss ", tloss, sizeof tloss), "%s", t.out);
        // the step line has 4 decimals, eval 6: the same value rounded
        snprintf(want, sizeof want, "%.4f", strtod(eloss, NULL));
        ck_assert_msg(!strcmp(tloss, want), "placement %d: step 1 loss %s, eval %s", p, tloss, eloss);
        ck_assert_msg(strstr(t.out, "initialized from " FIXTURE ": 2 files, 21 tensors, params_hash "), "%s", t.out);
        ck_assert_msg(strstr(t.err, "the weights carry no checksums (a folder not saved by tiertrain)"), "%s", t.err);
        ck_assert_msg(number_after(t.out, "params_hash ", hash, sizeof hash), "%s", t.out);
        const char *done = strstr(t.out, "done: ");
        ck_assert_msg(done && number_after(done, "params_hash ", hash, sizeof hash), "%s", t.out);
        if (p == 0) snprintf(hash0, sizeof hash0, "%s", hash);
        else ck_assert_msg(!strcmp(hash, hash0), "placement %d: params_hash %s, resident %s", p, hash, hash0);
        run_free(&t);
    }
    run_free(&e);
}
END_TEST

// ---------------------------------------------------------------- round trip

// Fine-tune, save (our own folder is an HF folder too), --init-from it: the weights are the
// saved ones bit for bit, and their checksums are checked.
START_TEST(round_trip) {
    const char *data = data_file();
    char save[1200], folder[1300], state[1400];
    snprintf(save, sizeof save, "%s/save", tmp);
    const char *tr[] = {"--init-from", FIXTURE, "--data", data, "--batch", "2", "--steps", "6", "--eval-every", "0",
                        "--save", save, NULL};
    run_t t = run("train", tr);
    ck_assert_msg(t.rc == 0, "train exit %d:\n%s", t.rc, t.err);
    snprintf(folder, sizeof folder, "%s/step-00000006", save);
    snprintf(state, sizeof state, "%s/state.json", folder);
    char *st = tu_slurp(state), hash[32], said[1600];
    ck_assert_msg(st && number_after(st, "\"params_hash\": \"", hash, sizeof hash), "%s", st ? st : state);
    hash[16] = 0;
    const char *again[] = {"--init-from", folder, "--data", data, "--batch", "2", "--steps", "1", "--eval-every", "0",
                           NULL};
    run_t r = run("train", again);
    ck_assert_msg(r.rc == 0, "train exit %d:\n%s", r.rc, r.err);
    snprintf(said, sizeof said, "initialized from %s: 1 file, 21 tensors, every checksum verified, params_hash %s (",
             folder, hash);
    ck_assert_msg(strstr(r.out, said), "want \"%s\" in:\n%s", said, r.out);
    ck_assert_msg(!strstr(r.err, "checksums"), "%s", r.err);
    ck_assert_msg(strstr(r.out, "seq 16,"), "%s", r.out);
    // a folder with both forms (the fixture's shards and index, and the checkpoint's
    // model.safetensors) reads model.safetensors, as transformers does, and says so
    char both[1200], from[1400], to[1400];
    snprintf(both, sizeof both, "%s/both", tmp);
    copy_folder(FIXTURE, both);
    snprintf(from, sizeof from, "%s/model.safetensors", folder);
    snprintf(to, sizeof to, "%s/model.safetensors", both);
    copy_file(from, to);
    const char *mixed[] = {"--init-from", both, "--data", data, "--batch", "2", "--steps", "1", "--eval-every", "0",
                           NULL};
    run_t rb = run("train", mixed);
    ck_assert_msg(rb.rc == 0, "train exit %d:\n%s", rb.rc, rb.err);
    snprintf(said, sizeof said, "initialized from %s: 1 file, 21 tensors, every checksum verified, params_hash %s (",
             both, hash);
    ck_assert_msg(strstr(rb.out, said), "want \"%s\" in:\n%s", said, rb.out);
    snprintf(said, sizeof said, "tiertrain: --init-from %s: has model.safetensors and model.safetensors.index.json: "
             "reading model.safetensors, as transformers does\n", both);
    ck_assert_msg(strstr(rb.err, said), "want \"%s\" in:\n%s", said, rb.err);
    run_free(&rb);
    // trained at --seq 16, the checkpoint keeps the fixture's context (max_position_embeddings
    // 64), and so does a checkpoint of a run resumed from it
    char config[1400], save2[1200];
    snprintf(config, sizeof config, "%s/config.json", folder);
    char *cj = tu_slurp(config);
    ck_assert_msg(cj && strstr(cj, "\"max_position_embeddings\": 64,"), "%s: %s", config, cj ? cj : "unreadable");
    ck_assert_msg(strstr(cj, "\"rms_norm_eps\": 1e-05,"), "%s: the fixture's rms_norm_eps 1e-05 became:\n%s", config, cj);
    free(cj);
    snprintf(save2, sizeof save2, "%s/save2", tmp);
    const char *resumed[] = {"--resume", folder, "--steps", "7", "--save", save2, NULL};
    run_t r2 = run("train", resumed);
    ck_assert_msg(r2.rc == 0, "train exit %d:\n%s", r2.rc, r2.err);
    snprintf(config, sizeof config, "%s/step-00000007/config.json", save2);
    cj = tu_slurp(config);
    ck_assert_msg(cj && strstr(cj, "\"max_position_embeddings\": 64,"), "%s: %s", config, cj ? cj : "unreadable");
    free(cj);
    free(st);
    run_free(&t);
    run_free(&r);
    run_free(&r2);
}
END_TEST

// One step of `train --init-from dir` on the test's text, which must succeed.
static run_t train_one_step(const char *dir) {
    const char *data = data_file();
    const char *args[] = {"--init-from", dir, "--data", data, "--steps", "1", "--eval-every", "0", NULL};
    run_t r = run("train", args);
    ck_assert_msg(r.rc == 0, "exit %d:\n%s", r.rc, r.err);
    return r;
}

// The same folder declared tied: the model has no lm_head of its own, so the folder's
// lm_head.weight is the one tensor skipped, said once, and the run goes on.
START_TEST(tied_skips_lm_head) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    copy_folder(FIXTURE, dir);
    edit_config(dir, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    run_t r = train_one_step(dir);
    char want[1400];
    snprintf(want, sizeof want, "tiertrain: --init-from %s: 1 tensor of the folder is not part of this model and was "
             "skipped (the first: 'lm_head.weight')\n", dir);
    ck_assert_msg(strstr(r.err, want), "want \"%s\" in:\n%s", want, r.err);
    ck_assert_msg(strstr(r.out, "2 files, 21 tensors"), "%s", r.out);
    run_free(&r);
}
END_TEST

// A tensor in two files — model.norm.weight in the fixture's second shard, and a copy in a
// third file the index names for it — is read from the index's file; the other copy is said
// to be one (not "not part of this model").
START_TEST(shard_copies_named) {
    char dir[1200], extra[1300], index[1300];
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    copy_folder(FIXTURE, dir);
    snprintf(extra, sizeof extra, "%s/model-extra.safetensors", dir);
    st_tensor_t t = {.name = "model.norm.weight", .dtype = ST_BF16, .ndim = 1, .shape = {32}};
    st_writer_t *w = NULL;
    char err[512];
    ck_assert_msg(st_writer_open(&w, extra, &t, 1, NULL, 0, err, sizeof err) == 0, "%s", err);
    uint16_t ones[32];
    for (int i = 0; i < 32; i++) ones[i] = 0x3f80; // 1.0
    ck_assert_msg(st_write(w, ones, sizeof ones) == 0 && st_writer_close(w, err, sizeof err) == 0, "%s", err);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    edit(index, "\"model.norm.weight\": \"model-00002-of-00002.safetensors\"",
         "\"model.norm.weight\": \"model-extra.safetensors\"");
    run_t r = train_one_step(dir);
    char want[1400];
    snprintf(want, sizeof want, "tiertrain: --init-from %s: 1 tensor of the folder is also in another file than the one "
             "the index names, and was read from that one (the first: 'model.norm.weight')\n", dir);
    ck_assert_msg(strstr(r.err, want), "want \"%s\" in:\n%s", want, r.err);
    ck_assert_msg(!strstr(r.err, "not part of this model"), "%s", r.err);
    run_free(&r);
}
END_TEST

// ---------------------------------------------------------------- RoPE scaling

#define LLAMA3_SCALING "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, " \
                       "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}"

// The first step line's loss and the done line's params_hash of a train run
static void loss_and_hash(const run_t *t, char *loss, char *hash) {
    ck_assert_msg(t->rc == 0, "train exit %d:\n%s", t->rc, t->err);
    ck_assert_msg(number_after(strstr(t->out, "step     1/"), "loss ", loss, 64), "%s", t->out);
    const char *done = strstr(t->out, "done: ");
    ck_assert_msg(done && number_after(done, "params_hash ", hash, 32), "%s", t->out);
}

// Llama 3.1/3.2's rope_scaling (rope_type llama3; here over the fixture's head size 8 one
// frequency is kept, one blended and two stretched): the run says so, computes another loss
// than the unscaled folder's, and its checkpoint carries the scaling in config.json and
// state.json: a resume without flags continues to the uninterrupted run's bits, and eval reads
// the same model through --resume (state.json) and --init-from (config.json).
START_TEST(rope_scaling_llama3) {
    char dir[1200], file[1600], save[1200], folder[1300];
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    copy_folder(FIXTURE, dir);
    edit_config(dir, "\"rope_scaling\": null", "\"rope_scaling\": " LLAMA3_SCALING);
    snprintf(save, sizeof save, "%s/save", tmp);
    snprintf(folder, sizeof folder, "%s/step-00000002", save);
    const char *data = data_file();
    char l_plain[64], h_plain[32], l_full[64], h_full[32], l_part[64], h_part[32], h_res[32];
    const char *plain[] = {"--init-from", FIXTURE, "--data", data, "--steps", "3", "--eval-every", "0", NULL};
    run_t p = run("train", plain);
    loss_and_hash(&p, l_plain, h_plain);
    const char *full[] = {"--init-from", dir, "--data", data, "--steps", "3", "--eval-every", "0", NULL};
    run_t f = run("train", full);
    loss_and_hash(&f, l_full, h_full);
    ck_assert_msg(strstr(f.out, "rope 10000, llama3 x8 from 64 (low 1, high 4),"), "%s", f.out);
    ck_assert_msg(strcmp(l_full, l_plain) != 0, "the scaled folder's loss %s is the unscaled one's", l_full);
    const char *pl[] = {"--init-from", dir, "--data", data, NULL}; // plan's JSON names where the model came from
    run_t pj = run("plan", pl);
    ck_assert_msg(pj.rc == 0 && strstr(pj.out, "\n{\"plan\":\"--init-from\",\"params\":31904,"), "%s%s", pj.out,
                  pj.err);
    run_free(&pj);
    const char *part[] = {"--init-from", dir, "--data", data, "--steps", "2", "--eval-every", "0", "--save", save,
                          NULL};
    run_t t = run("train", part);
    loss_and_hash(&t, l_part, h_part);
    ck_assert_str_eq(l_part, l_full);
    for (int k = 0; k < 2; k++) { // what the checkpoint says, in both files
        snprintf(file, sizeof file, "%s/%s", folder, k ? "state.json" : "config.json");
        char *text = tu_slurp(file);
        // the factors as floats (8.0, not 8), as transformers wants them
        const char *want = k ? "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": "
                               "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}"
                             : "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": "
                               "1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64},";
        ck_assert_msg(text && strstr(text, want), "%s lacks %s:\n%s", file, want, text ? text : "(unreadable)");
        free(text);
    }
    // the resume (the common flags only: fp32 and --seq 16 agree with the checkpoint)
    const char *res[] = {"--resume", save, "--data", data, "--steps", "3", "--eval-every", "0", NULL};
    run_t r = run("train", res);
    ck_assert_msg(r.rc == 0, "resume exit %d:\n%s", r.rc, r.err);
    ck_assert_msg(strstr(r.out, "model from --resume's checkpoint:") && strstr(r.out, "llama3 x8 from 64"), "%s",
                  r.out);
    const char *done = strstr(r.out, "done: ");
    ck_assert_msg(done && number_after(done, "params_hash ", h_res, sizeof h_res), "%s", r.out);
    ck_assert_str_eq(h_res, h_full);
    // eval through state.json and through config.json: one line
    const char *e1[] = {"--resume", folder, "--data", data, NULL};
    const char *e2[] = {"--init-from", folder, "--data", data, NULL};
    run_t a = run("eval", e1), b = run("eval", e2);
    ck_assert_msg(a.rc == 0 && b.rc == 0, "eval exit %d / %d:\n%s%s", a.rc, b.rc, a.err, b.err);
    const char *la = strstr(a.out, "{\"event\":\"eval\""), *lb = strstr(b.out, "{\"event\":\"eval\"");
    ck_assert_msg(la && lb && !strcmp(la, lb), "eval --resume: %s\neval --init-from: %s", a.out, b.out);
    ck_assert_msg(strstr(a.out, "llama3 x8 from 64") && strstr(b.out, "llama3 x8 from 64"), "%s%s", a.out, b.out);
    run_free(&p);
    run_free(&f);
    run_free(&t);
    run_free(&r);
    run_free(&a);
    run_free(&b);
}
END_TEST

// ---------------------------------------------------------------- carried files

// A checkpoint of a fine-tune is a whole Hugging Face model: the folder's tokenizer and
// generation files come along byte for byte, and config.json keeps its token ids (an
// instruct model's eos list too); a resume carries them on from its checkpoint, even after
// --keep-last removed the one it started from.
START_TEST(checkpoint_carries_tokenizer) {
    char dir[1200], file[1600], save[1200];
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    copy_folder(FIXTURE, dir);
    edit_config(dir, "\"eos_token_id\": 2", "\"eos_token_id\": [2, 5]");
    static const char tok[] = "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}\n";
    static const char gen[] = "{\"bos_token_id\": 1, \"eos_token_id\": [2, 5], \"temperature\": 0.6}\n";
    static const char sp[] = "\x0a\x08\x00\xff binary sentencepiece bytes";
    const char *const names[] = {"tokenizer.json", "generation_config.json", "tokenizer.model"};
    const char *const bytes[] = {tok, gen, sp};
    const size_t lens[] = {sizeof tok - 1, sizeof gen - 1, sizeof sp - 1};
    for (int i = 0; i < 3; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        FILE *f = fopen(file, "wb");
        ck_assert(f && fwrite(bytes[i], 1, lens[i], f) == lens[i] && fclose(f) == 0);
    }
    snprintf(save, sizeof save, "%s/save", tmp);
    const char *data = data_file();
    const char *first[] = {"--init-from", dir, "--data", data, "--steps", "2", "--eval-every", "0", "--save", save,
                           "--keep-last", "1", NULL};
    const char *again[] = {"--resume", save, "--data", data, "--steps", "4", "--eval-every", "0", "--save", save,
                           "--save-every", "1", "--keep-last", "1", NULL};
    for (int run_k = 0; run_k < 2; run_k++) {
        run_t r = run("train", run_k ? again : first);
        ck_assert_msg(r.rc == 0, "run %d: exit %d:\n%s", run_k, r.rc, r.err);
        run_free(&r);
        for (int i = 0; i < 3; i++) {
            snprintf(file, sizeof file, "%s/step-%08d/%s", save, run_k ? 4 : 2, names[i]);
            FILE *f = fopen(file, "rb");
            char got[256];
            size_t n = f ? fread(got, 1, sizeof got, f) : 0;
            if (f) fclose(f);
            ck_assert_msg(n == lens[i] && !memcmp(got, bytes[i], n), "run %d: %s is not the folder's (%zu bytes)",
                          run_k, file, n);
        }
        snprintf(file, sizeof file, "%s/step-%08d/config.json", save, run_k ? 4 : 2);
        char *cj = tu_slurp(file);
        ck_assert_msg(cj && strstr(cj, "  \"bos_token_id\": 1,\n  \"eos_token_id\": [2, 5],\n"), "run %d: %s",
                      run_k, cj ? cj : file);
        free(cj);
    }
}
END_TEST

// ---------------------------------------------------------------- refusals

enum { R_DTYPE, R_MISSING, R_SHAPE, R_FLAG, R_ROPE_SCALING, R_ROPE_BANDS, R_ROPE_FIELD, R_BIAS, R_RESUME, R_MODEL,
       R_TYPE, R_NAN, R_INF, R_VOCAB, R_PICKLED, NREFUSE };

START_TEST(refusals) {
    char dir[1200], file[1300], want[2048], bin[1300] = "";
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    copy_folder(FIXTURE, dir);
    const char *extra[8] = {NULL};
    const char *says = NULL;
    switch (_i) {
    case R_DTYPE: // the same header length: "BF16" becomes "F64" and a space
        snprintf(file, sizeof file, "%s/model-00002-of-00002.safetensors", dir);
        edit(file, "\"dtype\":\"BF16\"", "\"dtype\":\"F64\" ");
        says = "model-00002-of-00002.safetensors: tensor 'model.layers.1.input_layernorm.weight': dtype 'F64' is not "
               "supported (accepted: F32, BF16, F16)\n";
        break;
    case R_MISSING:
        snprintf(file, sizeof file, "%s/model-00002-of-00002.safetensors", dir);
        ck_assert_int_eq(unlink(file), 0);
        snprintf(want, sizeof want, "--init-from %s: model-00002-of-00002.safetensors is missing "
                 "(model.safetensors.index.json names it; the folder is incomplete: download every shard)\n", dir);
        says = want;
        break;
    case R_SHAPE:
        edit_config(dir, "\"intermediate_size\": 48", "\"intermediate_size\": 64");
        says = "model-00001-of-00002.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [48, 32], "
               "config.json makes it [64, 32] (a config.json that does not belong with these weights?)\n";
        break;
    case R_FLAG:
        extra[0] = "--layers";
        extra[1] = "3";
        snprintf(want, sizeof want, "--layers 3: %s/config.json has num_hidden_layers 2 (drop --layers: the shape is "
                 "the folder's)\n", dir);
        says = want;
        break;
    case R_ROPE_SCALING:
        edit_config(dir, "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2.0}");
        says = "/config.json: rope_scaling rope_type \"yarn\" (accepted: \"llama3\", \"linear\" or \"default\"; that "
               "scaling is not implemented)\n";
        break;
    case R_ROPE_BANDS:
        edit_config(dir, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
             "\"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 64}");
        says = "/config.json: rope_scaling low_freq_factor 4, high_freq_factor 1 (accepted: 0 < low < high)\n";
        break;
    case R_ROPE_FIELD:
        edit_config(dir, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}");
        says = "/config.json: rope_scaling (rope_type llama3): missing key 'low_freq_factor' in the object at byte 369 "
               "(accepted: factor, low_freq_factor, high_freq_factor and original_max_position_embeddings)\n";
        break;
    case R_BIAS:
        edit_config(dir, "\"attention_bias\": false", "\"attention_bias\": true");
        says = "/config.json: attention_bias is true (accepted: false; the model has no bias terms)\n";
        break;
    case R_RESUME:
        extra[0] = "--resume";
        extra[1] = tmp;
        snprintf(want, sizeof want, "--init-from %s and --resume %s: give one", dir, tmp);
        says = want;
        break;
    case R_MODEL:
        extra[0] = "--model";
        extra[1] = "tiny";
        snprintf(want, sizeof want, "--model tiny: with --init-from the shape is %s/config.json's (drop --model)\n", dir);
        says = want;
        break;
    case R_TYPE:
        edit_config(dir, "\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"");
        says = "/config.json: model_type \"gpt2\" (accepted: \"llama\"; this is a Llama trainer)\n";
        break;
    case R_VOCAB: { // tokens beyond the folder's vocabulary: no --vocab can help, so none is advised
        snprintf(bin, sizeof bin, "%s/tokens.bin", tmp);
        int32_t hdr[256] = {20240520, 1, 4096};
        uint16_t tok[4096];
        for (int i = 0; i < 4096; i++) tok[i] = (uint16_t)(i == 1 ? 300 : i % 256);
        FILE *f = fopen(bin, "wb");
        ck_assert(f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1 && fclose(f) == 0);
        snprintf(want, sizeof want, "--data %s: token 300 at index 1 is outside the model's vocabulary of 256 (the "
                 "file's largest token is 300: give data tokenized for this model)\n", bin);
        says = want;
        break;
    }
    case R_PICKLED: { // PyTorch's .bin weights instead of safetensors: named, with the conversion
        static const char *const gone[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"};
        for (int k = 0; k < 3; k++) {
            snprintf(file, sizeof file, "%s/%s", dir, gone[k]);
            ck_assert_int_eq(unlink(file), 0);
        }
        snprintf(file, sizeof file, "%s/pytorch_model.bin", dir);
        FILE *f = fopen(file, "w");
        ck_assert(f && fputs("not read", f) >= 0 && fclose(f) == 0);
        snprintf(want, sizeof want, "--init-from %s: holds PyTorch's pickled weights (pytorch_model.bin), not "
                 "safetensors (convert the folder: in transformers, model.save_pretrained(DIR, "
                 "safe_serialization=True))\n", dir);
        says = want;
        break;
    }
    case R_NAN: // a NaN mid-tensor: the element named, in the whole tensor
    case R_INF: // -inf in the last element
        snprintf(file, sizeof file, "%s/model-00002-of-00002.safetensors", dir);
        poke_bf16(file, "model.layers.1.self_attn.k_proj.weight", _i == R_NAN ? 37 : 511,
                  _i == R_NAN ? 0x7fc0 : 0xff80);
        snprintf(want, sizeof want, "model-00002-of-00002.safetensors: tensor "
                 "'model.layers.1.self_attn.k_proj.weight' holds a non-finite value at element %d\n",
                 _i == R_NAN ? 37 : 511);
        says = want;
        break;
    }
    const char *data = bin[0] ? bin : data_file();
    const char *args[16] = {"--init-from", dir, "--data", data, "--steps", "1", "--eval-every", "0"};
    int n = 8;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    run_t r = run("train", args);
    ck_assert_msg(r.rc == 2, "case %d: exit %d (want 2):\n%s", _i, r.rc, r.err);
    size_t len = strlen(r.err);
    ck_assert_msg(len > 0 && strchr(r.err, '\n') == r.err + len - 1 && !strncmp(r.err, "tiertrain: ", 11),
                  "case %d: want one line, got:\n%s", _i, r.err);
    ck_assert_msg(strstr(r.err, says), "case %d: want \"%s\" in:\n%s", _i, says, r.err);
    ck_assert_msg(!strstr(r.out, "step "), "case %d: a step ran:\n%s", _i, r.out);
    run_free(&r);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hf");
    const int slow = tu_sanitized() ? 4 : 1;
    TCase *loss = tcase_create("loss");
    tcase_add_checked_fixture(loss, setup, teardown);
    tcase_set_timeout(loss, 60 * slow);
    tcase_add_test(loss, step1_loss_is_eval);
    suite_add_tcase(s, loss);
    TCase *round = tcase_create("round");
    tcase_add_checked_fixture(round, setup, teardown);
    tcase_set_timeout(round, 60 * slow);
    tcase_add_test(round, round_trip);
    tcase_add_test(round, tied_skips_lm_head);
    tcase_add_test(round, shard_copies_named);
    tcase_add_test(round, rope_scaling_llama3);
    tcase_add_test(round, checkpoint_carries_tokenizer);
    suite_add_tcase(s, round);
    TCase *ref = tcase_create("refusals");
    tcase_add_checked_fixture(ref, setup, teardown);
    tcase_set_timeout(ref, 60 * slow);
    tcase_add_loop_test(ref, refusals, 0, NREFUSE);
    suite_add_tcase(s, ref);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
