// test_data.c — the data sources: tokenize round trip, every bad-file class with its one-line
// error, the synthetic corpus (deterministic, independent of --seed, with structure), batches
// (consecutive, targets shifted by one, wrapping) and the held-out split (disjoint, last 5%).
// Fixture files are written inside the test into a fresh tu_tmpdir().
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include "data.h"
#include "testutil.h"

// ---------------------------------------------------------------- fixtures

static char *dir;

static void dir_setup(void) {
    dir = tu_tmpdir("data");
    ck_assert_ptr_nonnull(dir);
}

static void dir_teardown(void) {
    tu_rm_rf(dir);
    free(dir);
}

static char *path_in(const char *name) {
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static void config_for(config_t *c, const char *data, int V, int B, int T) {
    memset(c, 0, sizeof *c);
    snprintf(c->data, sizeof c->data, "%s", data);
    c->V = V;
    c->B = B;
    c->T = T;
    c->seed = 1337;
}

// An llm.c token file with a header we control: header_count may lie, extra bytes follow;
// ntok tokens of width bytes (2: GPT-2's uint16, 4: Llama 3's uint32).
static void write_tokens(const char *path, int32_t magic, int32_t version, int32_t header_count, const void *tok,
                         int width, size_t ntok, size_t extra) {
    int32_t h[256] = {magic, version, header_count};
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert(fwrite(h, sizeof h, 1, f) == 1);
    if (ntok) ck_assert(fwrite(tok, (size_t)width, ntok, f) == ntok);
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
}

static void write_bin(const char *path, int32_t magic, int32_t version, int32_t header_count, const uint16_t *tok,
                      size_t ntok, size_t extra) {
    write_tokens(path, magic, version, header_count, tok, 2, ntok, extra);
}

static void write_bin32(const char *path, int32_t magic, int32_t version, int32_t header_count, const uint32_t *tok,
                        size_t ntok, size_t extra) {
    write_tokens(path, magic, version, header_count, tok, 4, ntok, extra);
}

// Tokens 0, 1, 2, ... (mod 60000): every position's token says where it came from.
static uint16_t *counter_tokens(size_t n) {
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(i % 60000);
    return t;
}

static void write_text(const char *path, const char *s, int repeat) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < repeat; i++) fputs(s, f);
    fclose(f);
}

// ---------------------------------------------------------------- core

START_TEST(test_tokenize_round_trip) {
    const char *txt = path_in("in.txt"), *bin = path_in("out.bin");
    const char *line = "The quick brown fox jumps over the lazy dog.\n\t~ and {bytes} 0123456789\n";
    write_text(txt, line, 50);
    ck_assert_int_eq(data_tokenize(txt, bin), 0);
    char tmpname[1100];
    snprintf(tmpname, sizeof tmpname, "%s.tmp", bin);
    ck_assert_msg(access(tmpname, F_OK) != 0, "%s left behind", tmpname);

    // The file: header, then the bytes as uint16.
    size_t n = strlen(line) * 50;
    FILE *f = fopen(bin, "rb");
    int32_t h[256];
    ck_assert(fread(h, sizeof h, 1, f) == 1);
    ck_assert_int_eq(h[0], 20240520);
    ck_assert_int_eq(h[1], 1);
    ck_assert_int_eq(h[2], (int32_t)n);
    uint16_t *tok = malloc(n * 2 + 2);
    ck_assert_uint_eq(fread(tok, 2, n + 1, f), n); // and nothing after
    fclose(f);
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (tok[i] != (unsigned char)line[i % strlen(line)]) bad = i;
    ck_assert_msg(bad == n, "token %zu is %u, want byte %u", bad, tok[bad], (unsigned char)line[bad % strlen(line)]);
    free(tok);

    // The .bin and the text read back as the same token stream.
    config_t cb, ct;
    config_for(&cb, bin, 256, 2, 16);
    config_for(&ct, txt, 256, 2, 16);
    data_t *db = NULL, *dt = NULL;
    char err[1024];
    ck_assert_msg(data_open(&db, &cb, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(data_open(&dt, &ct, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(data_tokens(db, DATA_TRAIN) + data_tokens(db, DATA_VAL), n);
    ck_assert_uint_eq(data_tokens(db, DATA_TRAIN), data_tokens(dt, DATA_TRAIN));
    ck_assert_msg(strstr(data_describe(db), "out.bin") && strstr(data_describe(db), "llm.c"), "%s", data_describe(db));
    ck_assert_msg(strstr(data_describe(dt), "in.txt") && strstr(data_describe(dt), "text"), "%s", data_describe(dt));
    int xb[32], yb[32], xt[32], yt[32];
    int differ = 0;
    for (int s = 0; s < 200; s++) {
        int split = s % 2;
        data_next(db, split, xb, yb);
        data_next(dt, split, xt, yt);
        differ += memcmp(xb, xt, sizeof xb) != 0 || memcmp(yb, yt, sizeof yb) != 0;
    }
    ck_assert_int_eq(differ, 0);
    data_free(db);
    data_free(dt);
    data_free(NULL);
}
END_TEST

// The binary: tokenize prints one line on success and exits 0; bad input exits 2 with one line.
START_TEST(test_tokenize_binary) {
    const char *txt = path_in("b.txt"), *bin = path_in("b.bin");
    write_text(txt, "hello\n", 10);
    char *out = NULL, *err = NULL;
    int rc = tu_run((char *[]){(char *)tu_binary(), "tokenize", (char *)txt, "-o", (char *)bin, NULL}, NULL, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_msg(strstr(out, "60 tokens"), "%s", out);
    struct stat st;
    ck_assert(stat(bin, &st) == 0 && st.st_size == 1024 + 120);
    free(out);
    free(err);

    const char *empty = path_in("empty.txt");
    write_text(empty, "", 1);
    rc = tu_run((char *[]){(char *)tu_binary(), "tokenize", (char *)empty, "-o", (char *)path_in("e.bin"), NULL}, NULL,
                &out, &err);
    ck_assert_msg(rc == 2, "exit %d", rc);
    ck_assert_msg(strstr(err, "empty.txt") && strstr(err, "empty") && strchr(err, '\n') == err + strlen(err) - 1,
                  "want one line naming the empty input: %s", err);
    ck_assert_msg(access(path_in("e.bin"), F_OK) != 0 && access(path_in("e.bin.tmp"), F_OK) != 0,
                  "failed tokenize left files");
    free(out);
    free(err);
}
END_TEST

// An output the disk has no room for (two bytes a character): refused before a byte is read or
// written, exit 2, one line. The input is a sparse file a little over half the free space.
START_TEST(test_tokenize_no_room) {
    struct statvfs vfs;
    ck_assert_int_eq(statvfs(dir, &vfs), 0);
    const uint64_t room = (uint64_t)vfs.f_bavail * vfs.f_frsize, size = room / 2 + (1ull << 30);
    if (size > (8ull << 40)) return; // beyond what a sparse file may hold everywhere: nothing to check
    const char *txt = path_in("huge.txt"), *bin = path_in("huge.bin");
    int fd = open(txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_msg(fd >= 0 && ftruncate(fd, (off_t)size) == 0 && close(fd) == 0, "sparse input: %s", strerror(errno));
    char *out = NULL, *err = NULL;
    int rc = tu_run((char *[]){(char *)tu_binary(), "tokenize", (char *)txt, "-o", (char *)bin, NULL}, NULL, &out, &err);
    unlink(txt);
    char want[1400];
    snprintf(want, sizeof want, "tiertrain: tokenize: -o %s: needs ", bin);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, err);
    ck_assert_msg(!strncmp(err, want, strlen(want)) && strstr(err, " free there (free space, or choose another place)\n") &&
                      strchr(err, '\n') == err + strlen(err) - 1, "want one line: %s...; got %s", want, err);
    ck_assert_msg(access(bin, F_OK) != 0 && access(path_in("huge.bin.tmp"), F_OK) != 0, "a refused tokenize left files");
    free(out);
    free(err);
}
END_TEST

// More bytes than an llm.c file's int32 count can hold: refused before anything is written
// (once only after writing 4 GiB of tokens), exit 2, nothing left behind. A sparse input.
START_TEST(test_tokenize_too_many) {
    struct statvfs vfs;
    ck_assert_int_eq(statvfs(dir, &vfs), 0);
    if ((uint64_t)vfs.f_bavail * vfs.f_frsize < (5ull << 30)) return; // the room check comes first there
    const char *txt = path_in("big.txt"), *bin = path_in("big.bin");
    int fd = open(txt, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_msg(fd >= 0 && ftruncate(fd, (off_t)1 << 31) == 0 && close(fd) == 0, "sparse input: %s", strerror(errno));
    char *out = NULL, *err = NULL;
    int rc = tu_run((char *[]){(char *)tu_binary(), "tokenize", (char *)txt, "-o", (char *)bin, NULL}, NULL, &out, &err);
    unlink(txt);
    char want[1400];
    snprintf(want, sizeof want, "tiertrain: tokenize: input %s: 2147483648 bytes, more than 2147483647 (accepted: at "
             "most 2^31-1 tokens per file; split it)\n", txt);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, err);
    ck_assert_str_eq(err, want);
    ck_assert_msg(access(bin, F_OK) != 0 && access(path_in("big.bin.tmp"), F_OK) != 0, "a refused tokenize left files");
    free(out);
    free(err);
}
END_TEST

// A write the system refuses (EFBIG, here from a file-size limit of 25 KiB with SIGXFSZ ignored)
// is named as the output's write error, exit 1 — not taken for an input too large (exit 2).
START_TEST(test_tokenize_write_fails) {
    const char *txt = path_in("mid.txt"), *bin = path_in("mid.bin");
    FILE *f = fopen(txt, "w");
    ck_assert(f);
    for (int i = 0; i < 4000; i++) fprintf(f, "line %d of text\n", i); // about 70 KB: 140 KB of tokens
    ck_assert_int_eq(fclose(f), 0);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 50; exec '%s' tokenize '%s' -o '%s'", tu_binary(), txt, bin);
    char *out = NULL, *err = NULL;
    int rc = tu_run((char *[]){"/bin/sh", "-c", cmd, NULL}, NULL, &out, &err);
    char want[1400];
    snprintf(want, sizeof want, "tiertrain: tokenize: write %s.tmp: File too large\n", bin);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, err);
    ck_assert_str_eq(err, want);
    ck_assert_msg(access(bin, F_OK) != 0 && access(path_in("mid.bin.tmp"), F_OK) != 0, "a failed tokenize left files");
    unlink(txt);
    free(out);
    free(err);
}
END_TEST

START_TEST(test_tokenize_faults) {
    // Missing input, empty input, output directory that does not exist: 2, nothing written.
    ck_assert_int_eq(data_tokenize(path_in("nope.txt"), path_in("x.bin")), 2);
    write_text(path_in("empty.txt"), "", 1);
    ck_assert_int_eq(data_tokenize(path_in("empty.txt"), path_in("x.bin")), 2);
    write_text(path_in("ok.txt"), "abc", 1);
    ck_assert_int_eq(data_tokenize(path_in("ok.txt"), path_in("nodir/x.bin")), 2);
    ck_assert_int_eq(data_tokenize(path_in("ok.txt"), path_in("ok.txt")), 2); // output = input
    ck_assert(access(path_in("x.bin"), F_OK) != 0 && access(path_in("x.bin.tmp"), F_OK) != 0);
    ck_assert_int_eq(data_tokenize(dir, path_in("x.bin")), 2); // a directory as input
}
END_TEST

// Consecutive windows: inputs are B·T tokens from the position, targets the next B·T, the
// position advances by B·T and wraps when the next window would pass the split's end.
START_TEST(test_batches_consecutive) {
    const size_t n = 10000;
    uint16_t *tok = counter_tokens(n);
    write_bin(path_in("c.bin"), 20240520, 1, (int32_t)n, tok, n, 0);
    free(tok);
    config_t c;
    const int B = 3, T = 17, BT = 3 * 17;
    config_for(&c, path_in("c.bin"), 65536, B, T);
    data_t *d = NULL;
    char err[1024];
    ck_assert_msg(data_open(&d, &c, err, sizeof err) == 0, "%s", err);
    size_t ntrain = data_tokens(d, DATA_TRAIN);
    ck_assert_uint_eq(ntrain, n - n / 20);
    int x[51], y[51];
    size_t pos = 0;
    // (Check records every assertion through a pipe: inner loops count, then assert once.)
    for (int s = 0; s < 1000; s++) {
        data_next(d, DATA_TRAIN, x, y);
        int bad = -1;
        for (int i = 0; i < BT && bad < 0; i++)
            if (x[i] != (int)(pos + (size_t)i) || y[i] != x[i] + 1) bad = i;
        ck_assert_msg(bad < 0, "batch %d [%d]: got (%d, %d), want (%zu, %zu)", s, bad, x[bad], y[bad],
                      pos + (size_t)bad, pos + (size_t)bad + 1);
        pos += BT;
        if (pos + BT + 1 > ntrain) pos = 0;
    }
    data_rewind(d, DATA_TRAIN);
    data_next(d, DATA_TRAIN, x, y);
    ck_assert_int_eq(x[0], 0);
    data_free(d);
}
END_TEST

// A uint32 token file: every token comes back whole, above 65535 too, in the same windows
// as the uint16 file's (token i is 100000 + 7i, so a byte or half read wrong shows).
START_TEST(test_uint32_tokens) {
    const size_t n = 5000;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = 100000u + 7u * (uint32_t)i;
    write_bin32(path_in("w.bin"), 20240801, 7, (int32_t)n, tok, n, 0);
    free(tok);
    config_t c;
    const int B = 2, T = 9, BT = 2 * 9;
    config_for(&c, path_in("w.bin"), 100000 + 7 * 5000, B, T);
    data_t *d = NULL;
    char err[1024];
    ck_assert_msg(data_open(&d, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(data_count(d), n);
    ck_assert_str_eq(data_kind(d), "llm.c uint32 tokens");
    ck_assert_uint_eq(data_tokens(d, DATA_TRAIN) + data_tokens(d, DATA_VAL), n);
    int x[18], y[18];
    size_t pos = 0, ntrain = data_tokens(d, DATA_TRAIN);
    int bad = -1, s = 0;
    for (; s < 600 && bad < 0; s++) {
        data_next(d, DATA_TRAIN, x, y);
        for (int i = 0; i < BT && bad < 0; i++)
            if (x[i] != 100000 + 7 * (int)(pos + (size_t)i) || y[i] != x[i] + 7) bad = i;
        if (bad < 0) pos = pos + BT + BT + 1 > ntrain ? 0 : pos + BT;
    }
    ck_assert_msg(bad < 0, "batch %d [%d]: got (%d, %d) at position %zu", s - 1, bad, bad >= 0 ? x[bad] : 0,
                  bad >= 0 ? y[bad] : 0, pos);
    data_window(d, n - 11, 10, x, y); // the file's last tokens, from the source's start
    ck_assert_int_eq(x[0], 100000 + 7 * (int)(n - 11));
    ck_assert_int_eq(y[9], 100000 + 7 * (int)(n - 1));
    data_free(d);
}
END_TEST

// The held-out split is the last 5% (at least one window), and no window of either split
// reads a token of the other.
START_TEST(test_val_split_disjoint) {
    static const size_t sizes[] = {10000, 2 * 65 + 5}; // 5% is plenty / 5% is less than a window
    const size_t n = sizes[_i];
    uint16_t *tok = counter_tokens(n);
    write_bin(path_in("v.bin"), 20240520, 1, (int32_t)n, tok, n, 0);
    free(tok);
    config_t c;
    config_for(&c, path_in("v.bin"), 65536, 4, 16);
    data_t *d = NULL;
    char err[1024];
    ck_assert_msg(data_open(&d, &c, err, sizeof err) == 0, "%s", err);
    size_t nval = data_tokens(d, DATA_VAL), ntrain = data_tokens(d, DATA_TRAIN);
    size_t want = n / 20 > 65 ? n / 20 : 65;
    ck_assert_uint_eq(nval, want);
    ck_assert_uint_eq(ntrain + nval, n);
    int x[64], y[64];
    int crossed = 0;
    for (int s = 0; s < 500; s++) {
        data_next(d, DATA_TRAIN, x, y);
        for (int i = 0; i < 64; i++) crossed += x[i] >= (int)ntrain || y[i] >= (int)ntrain;
        data_next(d, DATA_VAL, x, y);
        for (int i = 0; i < 64; i++) crossed += x[i] < (int)ntrain || y[i] >= (int)n;
    }
    ck_assert_msg(crossed == 0, "%d tokens read across the split boundary at %zu", crossed, ntrain);
    data_free(d);
}
END_TEST

// Same corpus for any --seed, every token ASCII, and real structure: the bigram conditional
// entropy is far below ln(128) = 4.85 nats. (Measured 2.09 nats; English text is about 2.3
// at the character level. 2.6 leaves room for changes to the grammar.)
START_TEST(test_synthetic) {
    config_t a, b;
    config_for(&a, "synthetic", 256, 4, 64);
    config_for(&b, "synthetic", 128, 4, 64);
    b.seed = 42;
    data_t *da = NULL, *db = NULL;
    char err[1024];
    ck_assert_msg(data_open(&da, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(data_open(&db, &b, err, sizeof err) == 0, "%s", err);
    size_t n = data_tokens(da, DATA_TRAIN) + data_tokens(da, DATA_VAL);
    ck_assert_msg(n >= 1000000 && n <= 2100000, "synthetic corpus of %zu tokens, want 1-2 M", n);
    ck_assert_uint_eq(data_tokens(da, DATA_TRAIN), data_tokens(db, DATA_TRAIN));
    ck_assert_msg(strstr(data_describe(da), "synthetic"), "%s", data_describe(da));
    enum { BT = 256 };
    int xa[BT], ya[BT], xb[BT], yb[BT];
    static double pair[128][128];
    memset(pair, 0, sizeof pair);
    size_t windows = data_tokens(da, DATA_TRAIN) / BT;
    size_t differ = 0, non_ascii = 0;
    for (size_t s = 0; s < windows; s++) {
        data_next(da, DATA_TRAIN, xa, ya);
        data_next(db, DATA_TRAIN, xb, yb);
        differ += memcmp(xa, xb, sizeof xa) != 0 || memcmp(ya, yb, sizeof ya) != 0;
        for (int i = 0; i < BT; i++) {
            if (xa[i] < 0 || xa[i] >= 128 || ya[i] < 0 || ya[i] >= 128) { non_ascii++; continue; }
            pair[xa[i]][ya[i]] += 1;
        }
    }
    ck_assert_msg(differ == 0, "%zu of %zu windows differ between --seed 1337 and --seed 42", differ, windows);
    ck_assert_msg(non_ascii == 0, "%zu tokens are not ASCII", non_ascii);
    double h = 0, total = 0;
    for (int p = 0; p < 128; p++) {
        double row = 0;
        for (int q = 0; q < 128; q++) row += pair[p][q];
        for (int q = 0; q < 128; q++)
            if (pair[p][q] > 0) h -= pair[p][q] * log(pair[p][q] / row);
        total += row;
    }
    h /= total;
    ck_assert_msg(h < 2.6, "synthetic bigram entropy %.3f nats: too little structure", h);
    // The held-out part is different text.
    data_rewind(da, DATA_TRAIN);
    data_next(da, DATA_TRAIN, xa, ya);
    data_next(da, DATA_VAL, xb, yb);
    ck_assert(memcmp(xa, xb, sizeof xa) != 0);
    data_free(da);
    data_free(db);
}
END_TEST

// A batch bigger than the default corpus's 5%: the corpus grows so one window is held out.
START_TEST(test_synthetic_large_batch) {
    config_t c;
    config_for(&c, "synthetic", 256, 64, 2048);
    data_t *d = NULL;
    char err[1024];
    ck_assert_msg(data_open(&d, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_ge(data_tokens(d, DATA_VAL), 64 * 2048 + 1);
    data_free(d);
}
END_TEST

// ---------------------------------------------------------------- faults

typedef enum { F_MAGIC, F_VERSION, F_TRUNCATED, F_TOO_LARGE, F_TOKEN, F_SHORT, F_TINY_FILE, F_NEG_COUNT,
               F_TEXT_VOCAB, F_TEXT_EMPTY, F_MISSING, F_DIR, F_SYNTH_VOCAB, F_WIDE_VERSION, F_WIDE_HALVES,
               F_WIDE_TOKEN, F_WIDE_HUGE, F_COUNT } fault_t;

typedef struct { const char *name; const char *needle[3]; } fault_case_t;

static const fault_case_t faults[F_COUNT] = {
    [F_MAGIC] = {"magic.bin", {"bad magic 12345", "20240520 for uint16 tokens, 20240801 for uint32"}},
    [F_VERSION] = {"version.bin", {"version 2 for magic 20240520", "accepted: 1; remake it with tiertrain tokenize"}},
    [F_TRUNCATED] = {"trunc.bin", {"truncated", "1000 uint16 tokens", "3023 bytes (a cut-short copy? remake it"}},
    [F_TOO_LARGE] = {"large.bin", {"3025 bytes", "3024", "trailing data: a damaged file; remake it"}},
    [F_TOKEN] = {"token.bin", {"token 300", "index 437", "--vocab 256"}},
    [F_SHORT] = {"short.bin", {"100 tokens", "too few", "at least 130"}},
    [F_TINY_FILE] = {"tiny.bin", {"12 bytes", "1024"}},
    [F_NEG_COUNT] = {"neg.bin", {"negative token count", "-5", "remake it with tiertrain tokenize"}},
    [F_TEXT_VOCAB] = {"text.txt", {"--vocab 200", ">= 256"}},
    [F_TEXT_EMPTY] = {"empty.txt", {"0 tokens", "too few"}},
    [F_MISSING] = {"missing.bin", {"No such file"}},
    [F_DIR] = {"adir", {"not a regular file"}},
    [F_SYNTH_VOCAB] = {"synthetic", {"--vocab 100", ">= 128"}},
    [F_WIDE_VERSION] = {"wversion.bin", {"version 1 for magic 20240801", "(accepted: 7; remake it with the tokenizer"}},
    // uint16 tokens under the uint32 magic: half the bytes the header's count needs
    [F_WIDE_HALVES] = {"whalves.bin", {"truncated", "1000 uint32 tokens (5024 bytes)", "the file has 3024 bytes"}},
    [F_WIDE_TOKEN] = {"wtoken.bin", {"token 70000 at index 3 is >= --vocab 65536", "use --vocab >= 70001"}},
    [F_WIDE_HUGE] = {"whuge.bin", {"token 4294967295 at index 8", "beyond any vocabulary (--vocab is at most 16777216"}},
};

START_TEST(test_bad_file) {
    const fault_case_t *fc = &faults[_i];
    const char *path = _i == F_SYNTH_VOCAB ? "synthetic" : path_in(fc->name);
    uint16_t *tok = counter_tokens(1000);
    int V = 65536;
    switch ((fault_t)_i) {
    case F_MAGIC: write_bin(path, 12345, 1, 1000, tok, 1000, 0); break;
    case F_VERSION: write_bin(path, 20240520, 2, 1000, tok, 1000, 0); break;
    case F_TRUNCATED: write_bin(path, 20240520, 1, 1000, tok, 999, 1); break; // one byte short
    case F_TOO_LARGE: write_bin(path, 20240520, 1, 1000, tok, 1000, 1); break;
    case F_TOKEN: tok[437] = 300; tok[900] = 999; V = 256;
        for (int i = 0; i < 1000; i++) if (i != 437 && i != 900) tok[i] = (uint16_t)(i % 256);
        write_bin(path, 20240520, 1, 1000, tok, 1000, 0); break;
    case F_SHORT: write_bin(path, 20240520, 1, 100, tok, 100, 0); break; // B·T+1 = 65: needs 130
    case F_TINY_FILE: { FILE *f = fopen(path, "wb"); fwrite("0123456789ab", 1, 12, f); fclose(f); break; }
    case F_NEG_COUNT: write_bin(path, 20240520, 1, -5, tok, 0, 0); break;
    case F_TEXT_VOCAB: write_text(path, "some text\n", 100); V = 200; break;
    case F_TEXT_EMPTY: write_text(path, "", 1); V = 256; break;
    case F_MISSING: break;
    case F_DIR: mkdir(path, 0755); break;
    case F_SYNTH_VOCAB: V = 100; break;
    case F_WIDE_VERSION: case F_WIDE_HALVES: case F_WIDE_TOKEN: case F_WIDE_HUGE: {
        uint32_t wide[1000];
        for (int i = 0; i < 1000; i++) wide[i] = (uint32_t)i;
        if (_i == F_WIDE_TOKEN) wide[3] = 70000;
        if (_i == F_WIDE_HUGE) wide[8] = 0xffffffffu;
        if (_i == F_WIDE_HALVES) write_bin(path, 20240801, 7, 1000, tok, 1000, 0);
        else write_bin32(path, 20240801, _i == F_WIDE_VERSION ? 1 : 7, 1000, wide, 1000, 0);
        break;
    }
    case F_COUNT: break;
    }
    free(tok);
    config_t c;
    config_for(&c, path, V, 4, 16);
    data_t *d = (data_t *)1;
    char err[1024] = "";
    int rc = data_open(&d, &c, err, sizeof err);
    ck_assert_msg(rc < 0, "%s: data_open accepted a bad file", fc->name);
    ck_assert_ptr_null(d);
    ck_assert_msg(err[0] && !strchr(err, '\n'), "%s: want one line, got: %s", fc->name, err);
    ck_assert_msg(strstr(err, fc->name), "%s: message does not name the file: %s", fc->name, err);
    for (int k = 0; k < 3 && fc->needle[k]; k++)
        ck_assert_msg(strstr(err, fc->needle[k]), "%s: message lacks \"%s\": %s", fc->name, fc->needle[k], err);
}
END_TEST

// A mapped file cut short under a reader (text and .bin): the next window past its new end
// ends the process with exit 1 and the one line naming the file, not a bare SIGBUS. In a
// child, whose stderr comes back through a pipe.
START_TEST(test_file_shrinks) {
    const char *path = path_in(_i ? "shrinks.bin" : "shrinks.txt");
    uint16_t *tok = counter_tokens(20000);
    for (int i = 0; i < 20000; i++) tok[i] %= 256;
    if (_i) write_bin(path, 20240520, 1, 20000, tok, 20000, 0);
    else write_text(path, "a line of text that repeats.\n", 2000);
    free(tok);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        config_t c;
        config_for(&c, path, 256, 4, 64);
        data_t *d = NULL;
        char err[1024];
        if (data_open(&d, &c, err, sizeof err) != 0) _exit(3);
        int in[4 * 64], tg[4 * 64];
        data_next(d, 0, in, tg); // read while whole
        if (truncate(path, 0) != 0) _exit(4);
        for (int k = 0; k < 100; k++) data_next(d, 0, in, tg);
        _exit(5); // read past the end and lived
    }
    close(fds[1]);
    char got[2048] = "";
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], got + n, sizeof got - 1 - n)) > 0) n += (size_t)r;
    got[n] = 0;
    close(fds[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    char want[1400];
    snprintf(want, sizeof want, "tiertrain: --data %s: the file shrank while the run read it (keep a data file "
             "unchanged while a run uses it)\n", path);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: status %#x (want exit 1), stderr: %s", path,
                  status, got);
    ck_assert_str_eq(got, want);
}
END_TEST

// ---------------------------------------------------------------- suite

static Suite *data_suite(void) {
    Suite *s = suite_create("data");
    TCase *core = tcase_create("core");
    tcase_add_checked_fixture(core, dir_setup, dir_teardown);
    tcase_add_test(core, test_tokenize_round_trip);
    tcase_add_test(core, test_tokenize_binary);
    tcase_add_test(core, test_batches_consecutive);
    tcase_add_test(core, test_uint32_tokens);
    tcase_add_loop_test(core, test_val_split_disjoint, 0, 2);
    tcase_add_test(core, test_synthetic);
    tcase_add_test(core, test_synthetic_large_batch);
    tcase_set_timeout(core, 120);
    suite_add_tcase(s, core);
    TCase *fl = tcase_create("faults");
    tcase_add_checked_fixture(fl, dir_setup, dir_teardown);
    tcase_add_test(fl, test_tokenize_faults);
    tcase_add_test(fl, test_tokenize_no_room);
    tcase_add_test(fl, test_tokenize_too_many);
    tcase_add_test(fl, test_tokenize_write_fails);
    tcase_add_loop_test(fl, test_bad_file, 0, F_COUNT);
    tcase_add_loop_test(fl, test_file_shrinks, 0, 2);
    suite_add_tcase(s, fl);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(data_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
