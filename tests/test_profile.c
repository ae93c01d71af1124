// test_profile.c — the calibration profile (src/profile.h) and `tiertrain bench calibrate`:
// the defaults; save → load gives back every rate bit for bit; a missing file is -ENOENT
// with the defaults; every malformed-file class (not JSON, missing key, a rate ≤ 0, not
// finite or outside the range of any real machine, wrong version, wrong type) is -EINVAL
// with its exact one-line message and the defaults, and plan --profile stops on one in one
// line; the default path's precedence (--profile, $XDG_CACHE_HOME, $HOME, ./); and one
// end-to-end calibration through the binary at --size 64M whose profile loads back (and
// records that size); bench capacity's one-pass measurement at a given size.
// The end-to-end case needs O_DIRECT in $TMPDIR: without it that case is left out and,
// if everything else passed, the suite exits 77 (skip) rather than pretend.
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backend.h" // uses: backend_blas_replaced
#include "bench.h"   // uses: bench_nvme_rates
#include "io.h"      // uses: nvme_dir_direct_ok
#include "json.h"    // uses: json_parse (the calibrate JSON line)
#include "kernels.h" // uses: matmul_blas_core, matmul_kernel_name
#include "profile.h"
#include "testutil.h"

#define REMAKE " (run tiertrain bench calibrate to remake it)"

// Per-run scratch directory: made in the parent before Check forks each test, removed after.
static char *tmp;
static config_t cfg0; // zeroed: --profile unset

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

static void assert_defaults(const profile_t *p) {
    ck_assert(p->gemm_flops == 40e9);
    ck_assert(p->h2d_Bps == 4e9);
    ck_assert(p->d2h_Bps == 4e9);
    ck_assert(p->nvme_read_Bps == 0.5e9);
    ck_assert(p->nvme_write_Bps == 0.5e9);
    ck_assert(p->adam_params_per_s == 2e8);
    ck_assert(p->attn_flops == 20e9 && p->elem_Bps == 4e9 && p->gemm_fp32_flops == 40e9);
    ck_assert_str_eq(p->backend, "cpu");
    ck_assert_int_eq(p->threads, 0);
    ck_assert_str_eq(p->source, "defaults");
    ck_assert_int_eq(p->measured, 0);
}

// Lists dir (names, one a line, sorted by ls) into a malloc'd string.
static char *list_dir(const char *dir) {
    char *argv[] = {"/bin/ls", "-A", (char *)dir, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 0);
    free(err);
    return out;
}

// ---------------------------------------------------------------- core

START_TEST(test_defaults) {
    profile_t p;
    memset(&p, 0x5a, sizeof p);
    profile_defaults(&p);
    assert_defaults(&p);
}
END_TEST

// Rates chosen to need all 17 significant digits (a third, a seventh, one ulp above a round
// number), the largest and the smallest rate accepted (the range's ends), and a round one.
START_TEST(test_roundtrip_exact) {
    profile_t p, q;
    profile_defaults(&p);
    p.gemm_flops = 1e11 / 3.0;
    p.h2d_Bps = nextafter(25e9, INFINITY);
    p.d2h_Bps = 24.999999999e9 / 7.0;
    p.nvme_read_Bps = 1e14;
    p.nvme_write_Bps = 1e6;
    p.adam_params_per_s = 6e8;
    p.comm_Bps = 1e10 / 3.0; // the ranks' link: optional, kept exactly when measured
    p.attn_flops = 1e11 / 7.0; // fp32 mode's matmuls, attention and the elementwise ops: optional too
    p.gemm_fp32_flops = 3e11 / 11.0;
    p.elem_Bps = nextafter(3e10, 0);
    p.nvme_bytes = (5ull << 40) + 4096; // the file NVMe was measured over: optional, an integer
    snprintf(p.backend, sizeof p.backend, "cuda");
    p.threads = 17;
    char path[4200], dir[4000], err[1024];
    // Three folders that do not exist yet: save makes them.
    snprintf(dir, sizeof dir, "%s/rt/a/b", tmp);
    snprintf(path, sizeof path, "%s/profile.json", dir);
    ck_assert_msg(profile_save(&p, path, err, sizeof err) == 0, "%s", err);
    int rc = profile_load(&q, path, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    const double *a[] = {&p.gemm_flops, &p.h2d_Bps, &p.d2h_Bps, &p.nvme_read_Bps, &p.nvme_write_Bps, &p.adam_params_per_s};
    const double *b[] = {&q.gemm_flops, &q.h2d_Bps, &q.d2h_Bps, &q.nvme_read_Bps, &q.nvme_write_Bps, &q.adam_params_per_s};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(memcmp(a[i], b[i], sizeof(double)) == 0, "rate %d: saved %.17g, loaded %.17g", i, *a[i], *b[i]);
    ck_assert_msg(memcmp(&p.comm_Bps, &q.comm_Bps, sizeof(double)) == 0, "comm_Bps: saved %.17g, loaded %.17g",
                  p.comm_Bps, q.comm_Bps);
    ck_assert_msg(memcmp(&p.gemm_fp32_flops, &q.gemm_fp32_flops, sizeof(double)) == 0,
                  "gemm_fp32_flops: saved %.17g, loaded %.17g", p.gemm_fp32_flops, q.gemm_fp32_flops);
    ck_assert_msg(memcmp(&p.attn_flops, &q.attn_flops, sizeof(double)) == 0, "attn_flops: saved %.17g, loaded %.17g",
                  p.attn_flops, q.attn_flops);
    ck_assert_msg(memcmp(&p.elem_Bps, &q.elem_Bps, sizeof(double)) == 0, "elem_Bps: saved %.17g, loaded %.17g",
                  p.elem_Bps, q.elem_Bps);
    ck_assert_uint_eq(q.nvme_bytes, (5ull << 40) + 4096);
    ck_assert_str_eq(q.backend, "cuda");
    ck_assert_int_eq(q.threads, 17);
    ck_assert_str_eq(q.source, path);
    ck_assert_int_eq(q.measured, 1);

    // The file names every key, with an ISO date.
    char *text = tu_slurp(path);
    ck_assert_ptr_nonnull(text);
    static const char *const keys[] = {"\"version\": 1,", "\"gemm_flops\": ", "\"h2d_Bps\": ", "\"d2h_Bps\": ",
                                       "\"nvme_read_Bps\": ", "\"nvme_write_Bps\": ", "\"adam_params_per_s\": ",
                                       "\"gemm_fp32_flops\": ", "\"attn_flops\": ", "\"elem_Bps\": ", "\"comm_Bps\": ", "\"backend\": \"cuda\"", "\"threads\": 17", "\"nvme_bytes\": 5497558142976,",
                                       "\"measured_at\": \"20"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) ck_assert_msg(strstr(text, keys[i]), "no %s in\n%s", keys[i], text);
    const char *date = strstr(text, "\"measured_at\": \"") + strlen("\"measured_at\": \"");
    ck_assert_msg(strlen(date) >= 21 && date[4] == '-' && date[7] == '-' && date[10] == 'T' && date[13] == ':' && date[19] == 'Z',
                  "measured_at is not an ISO date: %s", date);
    free(text);
    // Overwriting an existing profile works the same way, and no temporary file stays.
    p.threads = 3;
    ck_assert_msg(profile_save(&p, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(profile_load(&q, path, err, sizeof err), 0);
    ck_assert_int_eq(q.threads, 3);
    char *names = list_dir(dir);
    ck_assert_str_eq(names, "profile.json\n");
    free(names);
}
END_TEST

START_TEST(test_missing_file) {
    profile_t p;
    char path[4200], err[256] = "x";
    snprintf(path, sizeof path, "%s/nothing/here.json", tmp);
    ck_assert_int_eq(profile_load(&p, path, err, sizeof err), -ENOENT);
    ck_assert_str_eq(err, ""); // no message: callers say "defaults" themselves
    assert_defaults(&p);
}
END_TEST

START_TEST(test_unreadable) {
    profile_t p;
    char err[1024], want[9000];
    // A folder where the file should be.
    ck_assert_int_eq(profile_load(&p, tmp, err, sizeof err), -EISDIR);
    snprintf(want, sizeof want, "profile %s: is a folder, not a file (pass --profile FILE)", tmp);
    ck_assert_str_eq(err, want);
    assert_defaults(&p);
    // ... and where it would be written: refused before any measuring (bench calibrate, exit 2,
    // one line; its rename failed with exit 1 after a minute of work), and by a save
    ck_assert_int_eq(profile_writable(tmp, err, sizeof err), -EISDIR);
    ck_assert_str_eq(err, want);
    profile_defaults(&p);
    ck_assert_int_eq(profile_save(&p, tmp, err, sizeof err), -EISDIR);
    ck_assert_str_eq(err, want);
    char below[4200], *out = NULL, *serr = NULL;
    snprintf(below, sizeof below, "%s/file.json", tmp);
    write_file(below, "{}");
    snprintf(below, sizeof below, "%s/file.json/p.json", tmp);
    const char *dirs[] = {tmp, below};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {(char *)tu_binary(), "bench", "calibrate", "--quick", "--device", "cpu", "--profile",
                        (char *)dirs[i], NULL};
        int rc = tu_run(argv, NULL, &out, &serr);
        snprintf(want, sizeof want, "tiertrain: bench calibrate: profile %s: %s (pass --profile FILE)\n", dirs[i],
                 i ? "a folder in the path is a file" : "is a folder, not a file");
        ck_assert_msg(rc == 2, "exit %d: %s", rc, serr);
        ck_assert_str_eq(serr, want);
        ck_assert_msg(!strstr(out, "GFLOP/s"), "it measured first: %s", out);
        free(out);
        free(serr);
    }
    // An empty path (profile_path's answer when the default one does not fit).
    ck_assert_int_eq(profile_load(&p, "", err, sizeof err), -ENAMETOOLONG);
    ck_assert_str_eq(err, "profile path is empty or too long ($XDG_CACHE_HOME or $HOME is too long): pass --profile FILE");
    assert_defaults(&p);
}
END_TEST

// Save refuses what it could not read back, and leaves nothing.
START_TEST(test_save_refuses_bad_rates) {
    profile_t p;
    char path[4200], err[1024], want[9000];
    snprintf(path, sizeof path, "%s/refused.json", tmp);
    profile_defaults(&p);
    p.nvme_write_Bps = NAN;
    ck_assert_int_eq(profile_save(&p, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "profile %s: nvme_write_Bps = nan is not a rate in B/s (accepted: 1e+06 to 1e+14; a "
             "measurement failed: rerun tiertrain bench calibrate)", path);
    ck_assert_str_eq(err, want);
    profile_defaults(&p);
    p.gemm_flops = 0;
    ck_assert_int_eq(profile_save(&p, path, err, sizeof err), -EINVAL);
    ck_assert_int_eq(access(path, F_OK), -1);
    // what load would refuse: a measured optional rate outside its range too (0: never measured)
    profile_defaults(&p);
    p.gemm_flops = 1e-300;
    ck_assert_int_eq(profile_save(&p, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "profile %s: gemm_flops = 1e-300 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17; "
             "a measurement failed: rerun tiertrain bench calibrate)", path);
    ck_assert_str_eq(err, want);
    profile_defaults(&p);
    p.comm_Bps = 1e15;
    ck_assert_int_eq(profile_save(&p, path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "profile %s: comm_Bps = 1e+15 is not a rate in B/s (accepted: 1e+06 to 1e+14; "
             "a measurement failed: rerun tiertrain bench calibrate)", path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(access(path, F_OK), -1);
    // A parent that is a file, not a folder.
    char blocker[4200], under[4400];
    snprintf(blocker, sizeof blocker, "%s/blocker", tmp);
    write_file(blocker, "x");
    snprintf(under, sizeof under, "%s/sub/p.json", blocker);
    profile_defaults(&p);
    ck_assert_int_eq(profile_save(&p, under, err, sizeof err), -ENOTDIR);
    snprintf(want, sizeof want, "profile %s: a folder in the path is a file (pass --profile FILE)", under);
    ck_assert_str_eq(err, want);
}
END_TEST

// ---------------------------------------------------------------- malformed files

// A valid profile on one line with one key's value replaced (value NULL: the key left out).
static const char *const KEYS[] = {"version", "gemm_flops", "h2d_Bps", "d2h_Bps", "nvme_read_Bps", "nvme_write_Bps",
                                   "adam_params_per_s", "gemm_fp32_flops", "attn_flops", "elem_Bps", "comm_Bps", "backend",
                                   "threads", "nvme_bytes", "measured_at"};
static const char *const VALUES[] = {"1", "4.5e10", "4e9", "4e9", "2e9", "2e9", "6e8", "3.2e11", "1.5e11", "3.5e10", "3e9",
                                     "\"cpu\"", "2", "4294967296", "\"2025-01-01T00:00:00Z\""};
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static void doc_with(char *buf, size_t len, const char *key, const char *value) {
    size_t n = (size_t)snprintf(buf, len, "{");
    int first = 1;
    for (int i = 0; i < NKEYS; i++) {
        const char *v = VALUES[i];
        if (key && strcmp(key, KEYS[i]) == 0) {
            if (!value) continue;
            v = value;
        }
        n += (size_t)snprintf(buf + n, len - n, "%s\"%s\": %s", first ? "" : ", ", KEYS[i], v);
        first = 0;
    }
    snprintf(buf + n, len - n, "}\n");
}

// Byte offset of key's value in doc (where json.h's messages point).
static size_t value_at(const char *doc, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *s = strstr(doc, pat);
    ck_assert_ptr_nonnull(s);
    return (size_t)(s - doc) + strlen(pat);
}

typedef struct {
    const char *what;
    const char *text;   // whole file, or NULL: doc_with(key, value)
    const char *key, *value;
    const char *want;   // the message after "profile PATH: "; "%zu" = the value's byte offset
} bad_case_t;

static const bad_case_t BAD[] = {
    {"not JSON", "hello\n", NULL, NULL, "byte 0: expected a value, got 'h'"},
    {"empty file", "", NULL, NULL, "byte 0: expected a value, got end of input"},
    {"cut short", "{\"version\": 1, \"gemm_flops\": 4", NULL, NULL, "byte 30: expected ',' or '}', got end of input"},
    {"not an object", "[1, 2]", NULL, NULL, "the value at byte 0: expected an object holding key 'version', got an array"},
    {"duplicate key", "{\"version\": 1, \"version\": 1}", NULL, NULL, "byte 15: duplicate key \"version\" (first at byte 1)"},
    {"missing rate", NULL, "adam_params_per_s", NULL, "missing key 'adam_params_per_s' in the object at byte 0"},
    {"missing version", NULL, "version", NULL, "missing key 'version' in the object at byte 0"},
    {"negative rate", NULL, "gemm_flops", "-4.5e10",
     "key 'gemm_flops' at byte %zu: -4.5e10 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17)"},
    {"zero rate", NULL, "h2d_Bps", "0", "key 'h2d_Bps' at byte %zu: 0 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    {"negative zero", NULL, "d2h_Bps", "-0.0",
     "key 'd2h_Bps' at byte %zu: -0.0 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    // Non-finite numbers cannot be written in JSON: the reader refuses them where they stand.
    {"overflowing rate", NULL, "nvme_read_Bps", "1e999", "byte %zu: number 1e999 is too large for a double"},
    {"NaN rate", NULL, "nvme_write_Bps", "NaN", "byte %zu: expected a value, got 'N'"},
    // Finite but no machine's: a tiny rate made the plan's floor inf ("floor_ms":inf, not JSON)
    // and a huge one a floor of 0. Each bound's own edge is accepted (test_roundtrip_exact).
    {"tiny GEMM rate", NULL, "gemm_flops", "1e-300",
     "key 'gemm_flops' at byte %zu: 1e-300 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17)"},
    {"GEMM rate under 1 MFLOP/s", NULL, "gemm_flops", "999999",
     "key 'gemm_flops' at byte %zu: 999999 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17)"},
    {"GEMM rate over 1e17", NULL, "gemm_flops", "1.1e17",
     "key 'gemm_flops' at byte %zu: 1.1e17 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17)"},
    {"huge link", NULL, "h2d_Bps", "1e308",
     "key 'h2d_Bps' at byte %zu: 1e308 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    {"tiny disk", NULL, "nvme_read_Bps", "5e-324",
     "key 'nvme_read_Bps' at byte %zu: 5e-324 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    {"tiny AdamW rate", NULL, "adam_params_per_s", "1e-3",
     "key 'adam_params_per_s' at byte %zu: 1e-3 is not a rate in params/s (accepted: 10000 to 1e+17)"},
    {"tiny attention rate", NULL, "attn_flops", "1e-9",
     "key 'attn_flops' at byte %zu: 1e-9 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17)"},
    {"tiny elementwise rate", NULL, "elem_Bps", "1",
     "key 'elem_Bps' at byte %zu: 1 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    {"huge ranks link", NULL, "comm_Bps", "1e20",
     "key 'comm_Bps' at byte %zu: 1e20 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    {"Infinity rate", NULL, "nvme_write_Bps", "Infinity", "byte %zu: expected a value, got 'I'"},
    {"wrong version", NULL, "version", "2", "key 'version' at byte %zu: version 2 is not one this tiertrain reads (accepted: 1)"},
    {"version 0", NULL, "version", "0", "key 'version' at byte %zu: version 0 is not one this tiertrain reads (accepted: 1)"},
    {"version as text", NULL, "version", "\"1\"", "key 'version' at byte %zu: expected an integer, got a string"},
    {"fractional version", NULL, "version", "1.5", "key 'version' at byte %zu: expected an integer, got 1.5"},
    {"rate as text", NULL, "d2h_Bps", "\"4e9\"", "key 'd2h_Bps' at byte %zu: expected a number, got a string"},
    {"rate null", NULL, "adam_params_per_s", "null", "key 'adam_params_per_s' at byte %zu: expected a number, got null"},
    {"rate as array", NULL, "gemm_flops", "[4e10]", "key 'gemm_flops' at byte %zu: expected a number, got an array"},
    {"zero ranks link", NULL, "comm_Bps", "0",
     "key 'comm_Bps' at byte %zu: 0 is not a rate in B/s (accepted: 1e+06 to 1e+14)"},
    {"ranks link as text", NULL, "comm_Bps", "\"3e9\"", "key 'comm_Bps' at byte %zu: expected a number, got a string"},
    {"negative attention rate", NULL, "attn_flops", "-1e11",
     "key 'attn_flops' at byte %zu: -1e11 is not a rate in FLOP/s (accepted: 1e+06 to 1e+17)"},
    {"elementwise rate null", NULL, "elem_Bps", "null", "key 'elem_Bps' at byte %zu: expected a number, got null"},
    {"backend as number", NULL, "backend", "5", "key 'backend' at byte %zu: expected a string, got a number"},
    {"backend too long", NULL, "backend", "\"a-very-long-backend\"",
     "key 'backend' at byte %zu: \"a-very-long-backend\" is not a backend name (accepted: cpu, cuda)"},
    {"threads fractional", NULL, "threads", "2.5", "key 'threads' at byte %zu: expected an integer, got 2.5"},
    {"threads negative", NULL, "threads", "-1", "key 'threads' at byte %zu: -1 is out of range (accepted: 0..1048576)"},
    {"nvme size negative", NULL, "nvme_bytes", "-1",
     "key 'nvme_bytes' at byte %zu: -1 is out of range (accepted: 0..9223372036854775807)"},
    {"nvme size fractional", NULL, "nvme_bytes", "1.5", "key 'nvme_bytes' at byte %zu: expected an integer, got 1.5"},
    {"date as number", NULL, "measured_at", "20250101", "key 'measured_at' at byte %zu: expected a string, got a number"},
};
#define NBAD ((int)(sizeof BAD / sizeof BAD[0]))

START_TEST(test_malformed) {
    const bad_case_t *c = &BAD[_i];
    char doc[1024], path[4200], tail[512], want[6000], err[1024];
    if (c->text) snprintf(doc, sizeof doc, "%s", c->text);
    else doc_with(doc, sizeof doc, c->key, c->value);
    snprintf(path, sizeof path, "%s/bad-%d.json", tmp, _i);
    write_file(path, doc);
    // "%zu" in want stands for the byte offset of the changed value, found in the text.
    if (strstr(c->want, "%zu")) snprintf(tail, sizeof tail, c->want, value_at(doc, c->key));
    else snprintf(tail, sizeof tail, "%s", c->want);
    snprintf(want, sizeof want, "profile %s: %s" REMAKE, path, tail);
    profile_t p;
    memset(&p, 0x5a, sizeof p);
    int rc = profile_load(&p, path, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "%s: rc %d (%s)", c->what, rc, err);
    ck_assert_msg(strcmp(err, want) == 0, "%s:\n got  %s\n want %s", c->what, err, want);
    ck_assert_msg(strchr(err, '\n') == NULL, "%s: more than one line", c->what);
    assert_defaults(&p);
}
END_TEST

// The baseline the malformed cases start from loads (so each failure above is its one
// change); the optional keys may be left out and unknown keys are ignored.
START_TEST(test_baseline_loads) {
    char doc[1024], path[4200], err[1024];
    doc_with(doc, sizeof doc, NULL, NULL);
    snprintf(path, sizeof path, "%s/good.json", tmp);
    write_file(path, doc);
    profile_t p;
    ck_assert_msg(profile_load(&p, path, err, sizeof err) == 0, "%s", err);
    ck_assert(p.gemm_flops == 4.5e10 && p.h2d_Bps == 4e9 && p.d2h_Bps == 4e9 && p.nvme_read_Bps == 2e9 &&
              p.nvme_write_Bps == 2e9 && p.adam_params_per_s == 6e8 && p.comm_Bps == 3e9 && p.attn_flops == 1.5e11 &&
              p.elem_Bps == 3.5e10 && p.gemm_fp32_flops == 3.2e11);
    ck_assert_int_eq(p.threads, 2);
    ck_assert_uint_eq(p.nvme_bytes, 4ull << 30);
    ck_assert_int_eq(p.measured, 1);
    write_file(path, "{\"version\": 1, \"gemm_flops\": 1e9, \"h2d_Bps\": 2e9, \"d2h_Bps\": 3e9, "
                     "\"nvme_read_Bps\": 4e9, \"nvme_write_Bps\": 5e9, \"adam_params_per_s\": 6e9, "
                     "\"future\": [1, {\"x\": null}]}");
    ck_assert_msg(profile_load(&p, path, err, sizeof err) == 0, "%s", err);
    ck_assert(p.gemm_flops == 1e9 && p.adam_params_per_s == 6e9);
    ck_assert(p.comm_Bps == 0); // never measured: the plan takes PLAN_COMM_DEFAULT_BPS
    // never measured either (not the defaults' guesses): the plan counts attention at the
    // matmuls' rate and no elementwise time, as it did before they were measured
    ck_assert(p.attn_flops == 0 && p.elem_Bps == 0 && p.gemm_fp32_flops == 0);
    ck_assert_str_eq(p.backend, "cpu");
    ck_assert_int_eq(p.threads, 0);
    ck_assert_uint_eq(p.nvme_bytes, 0); // a profile from before the key: its size is not known
}
END_TEST

// Through the binary: plan --profile with a GEMM rate of 1e-300 printed "floor inf ms" and
// "floor_ms":inf (not JSON) and exited 0; now it stops before planning, exit 2, one line.
START_TEST(test_plan_refuses_tiny_rate) {
    char doc[1024], path[4200], want[9000];
    doc_with(doc, sizeof doc, "gemm_flops", "1e-300");
    snprintf(path, sizeof path, "%s/tiny-rate.json", tmp);
    write_file(path, doc);
    char *argv[] = {(char *)tu_binary(), "plan", "--model", "tiny", "--batch", "1", "--seq", "32", "--device", "cpu",
                    "--profile", path, NULL};
    char *out = NULL, *err = NULL;
    int rc = tu_run(argv, NULL, &out, &err);
    snprintf(want, sizeof want, "tiertrain: --profile %s: key 'gemm_flops' at byte %zu: 1e-300 is not a rate "
             "in FLOP/s (accepted: 1e+06 to 1e+17)" REMAKE "\n", path, value_at(doc, "gemm_flops"));
    // at most the stdout's end: Check refuses a message over a few KiB, and plan's is longer
    const char *tail = out + (strlen(out) > 600 ? strlen(out) - 600 : 0);
    ck_assert_msg(rc == 2, "exit %d, stderr:\n%.1000s\nstdout's end:\n%s", rc, err, tail);
    ck_assert_str_eq(err, want);
    ck_assert_msg(!strstr(out, "inf") && !strstr(out, "floor_ms"), "plan went on; its end:\n%s", tail);
    free(out);
    free(err);
}
END_TEST

// ---------------------------------------------------------------- the default path

START_TEST(test_path_precedence) {
    char buf[4200];
    static config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    setenv("HOME", "/home/u", 1);
    snprintf(cfg.profile_path, sizeof cfg.profile_path, "/my/p.json");
    ck_assert_str_eq(profile_path(&cfg, buf, sizeof buf), "/my/p.json"); // --profile wins
    ck_assert_str_eq(profile_path(&cfg0, buf, sizeof buf), "/x/cache/tiertrain/profile.json");
    setenv("XDG_CACHE_HOME", "relative/cache", 1); // invalid per the XDG spec: ignored
    ck_assert_str_eq(profile_path(&cfg0, buf, sizeof buf), "/home/u/.cache/tiertrain/profile.json");
    setenv("XDG_CACHE_HOME", "", 1);
    ck_assert_str_eq(profile_path(&cfg0, buf, sizeof buf), "/home/u/.cache/tiertrain/profile.json");
    unsetenv("XDG_CACHE_HOME");
    ck_assert_str_eq(profile_path(&cfg0, buf, sizeof buf), "/home/u/.cache/tiertrain/profile.json");
    unsetenv("HOME");
    ck_assert_str_eq(profile_path(&cfg0, buf, sizeof buf), "./tiertrain-profile.json");
    ck_assert_str_eq(profile_path(&cfg, buf, sizeof buf), "/my/p.json");
    // Too long for the buffer: "" (load and save then say so), never a cut path.
    setenv("HOME", "/a/very/long/home", 1);
    char small[16];
    ck_assert_str_eq(profile_path(&cfg0, small, sizeof small), "");
}
END_TEST

// ---------------------------------------------------------------- end to end

START_TEST(test_calibrate_e2e) {
    char path[4200], nvme[4200], size[] = "64M";
    snprintf(path, sizeof path, "%s/e2e/p.json", tmp);
    snprintf(nvme, sizeof nvme, "%s/nvme", tmp);
    ck_assert_int_eq(mkdir(nvme, 0700), 0);
    char *argv[] = {(char *)tu_binary(), "bench", "calibrate", "--profile", path, "--size", size, "--nvme-path", nvme, NULL};
    char *out = NULL, *err = NULL;
    int rc = tu_run(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, out, err);
    // The last line is the JSON object.
    size_t n = strlen(out);
    ck_assert_msg(n > 1 && out[n - 1] == '\n', "stdout does not end in a line:\n%s", out);
    out[n - 1] = 0;
    const char *last = strrchr(out, '\n');
    last = last ? last + 1 : out;
    json_t *root = NULL;
    char jerr[512];
    ck_assert_msg(json_parse(last, strlen(last), "last line", NULL, &root, jerr, sizeof jerr) == 0, "%s\n%s", jerr, last);
    const char *s = NULL;
    ck_assert_int_eq(json_get_string(root, "bench", &s, jerr, sizeof jerr), 0);
    ck_assert_str_eq(s, "calibrate");
    ck_assert_int_eq(json_get_string(root, "profile", &s, jerr, sizeof jerr), 0);
    ck_assert_str_eq(s, path);
    static const char *const rates[] = {"gemm_flops", "gemm_fp32_flops", "attn_flops", "elem_Bps", "h2d_Bps", "d2h_Bps",
                                        "nvme_read_Bps", "nvme_write_Bps", "adam_params_per_s"};
    for (int i = 0; i < 9; i++) {
        double x = 0;
        ck_assert_msg(json_get_double(root, rates[i], &x, jerr, sizeof jerr) == 0, "%s", jerr);
        ck_assert_msg(x > 0 && isfinite(x), "%s = %g", rates[i], x);
    }
    json_free(root);
    // The table has its rows; stdout says where the profile went.
    static const char *const rows[] = {"\ngemm ", "\ngemm fp32 ", "\nattention ", "\nelementwise ", "\nh2d ", "\nd2h ",
                                       "\nnvme read ", "\nnvme write ", "\nadam "};
    for (int i = 0; i < 9; i++) ck_assert_msg(strstr(out, rows[i]), "no row '%s' in\n%s", rows[i] + 1, out);
    // the gemm row names OpenBLAS's kernel family, the one this process's library runs too
    // (testutil.c: a suite runs itself again with a wider family where the binary does), and the
    // pick it replaced, after our kernels where they run the products (a CPU with FMA)
    char fam[160], ours[64] = "";
    if (matmul_kernel_name()) snprintf(ours, sizeof ours, "GEMMs on %s; ", matmul_kernel_name());
    if (backend_blas_replaced())
        snprintf(fam, sizeof fam, "cpu matmul (%sOpenBLAS %s, not its own pick %s)", ours, matmul_blas_core(),
                 backend_blas_replaced());
    else
        snprintf(fam, sizeof fam, "cpu matmul (%sOpenBLAS %s", ours, matmul_blas_core());
    ck_assert_msg(strstr(out, fam), "no '%s' in\n%s", fam, out);
    ck_assert_ptr_nonnull(strstr(out, "profile written to "));

    // The written profile loads, every rate > 0, and says how it was measured.
    profile_t p;
    char perr[1024];
    ck_assert_msg(profile_load(&p, path, perr, sizeof perr) == 0, "%s", perr);
    ck_assert(p.gemm_flops > 0 && p.h2d_Bps > 0 && p.d2h_Bps > 0 && p.nvme_read_Bps > 0 && p.nvme_write_Bps > 0 &&
              p.adam_params_per_s > 0 && p.attn_flops > 0 && p.elem_Bps > 0 && p.gemm_fp32_flops > 0);
    ck_assert_str_eq(p.backend, "cpu");
    ck_assert_int_ge(p.threads, 1);
    ck_assert_uint_eq(p.nvme_bytes, 64ull << 20); // --size: the file the NVMe rates come from
    ck_assert_int_eq(p.measured, 1);
    // The store's files are gone (unlinked at init).
    char *names = list_dir(nvme);
    ck_assert_str_eq(names, "");
    free(names);
    free(out);
    free(err);
}
END_TEST

// bench capacity's measurement of the disk at a run's scale: one write and one read pass
// over a file of the given size, the rates > 0, the file gone after; a size under one
// request is refused in one line.
START_TEST(test_nvme_rates_at_scale) {
    static config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.nvme_path, sizeof cfg.nvme_path, "%s/scale", tmp);
    ck_assert_int_eq(mkdir(cfg.nvme_path, 0700), 0);
    cfg.io_block = 1 << 20;
    cfg.nvme_qd = 4;
    cfg.numa_node = -1;
    cfg.quiet = 1;
    cfg.io_verify = 1; // every read checks its block's CRC from the write before it
    double rd = 0, wr = 0, mixed[2] = {0, 0};
    char err[512] = "";
    ck_assert_msg(bench_nvme_rates(&cfg, 16u << 20, &rd, &wr, mixed, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(rd > 0 && isfinite(rd) && wr > 0 && isfinite(wr), "read %g, write %g B/s", rd, wr);
    // the mixed pass read the blocks the write pass wrote (a wrong block fails its CRC)
    ck_assert_msg(mixed[0] > 0 && isfinite(mixed[0]) && mixed[1] > 0 && isfinite(mixed[1]), "mixed %g + %g B/s",
                  mixed[0], mixed[1]);
    char *names = list_dir(cfg.nvme_path);
    ck_assert_str_eq(names, "");
    free(names);
    ck_assert_int_eq(bench_nvme_rates(&cfg, 4096, &rd, &wr, NULL, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "nvme measurement: 4096 bytes is under one --io-block");
}
END_TEST

// ---------------------------------------------------------------- main

int main(void) {
    tmp = tu_tmpdir("profile");
    if (!tmp) { perror("test_profile: tu_tmpdir"); return 1; }
    int direct = nvme_dir_direct_ok(tmp) == 0;
    Suite *su = suite_create("profile");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_roundtrip_exact);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_unreadable);
    tcase_add_test(tc, test_save_refuses_bad_rates);
    tcase_add_test(tc, test_path_precedence);
    suite_add_tcase(su, tc);
    tc = tcase_create("faults");
    tcase_add_test(tc, test_baseline_loads);
    tcase_add_loop_test(tc, test_malformed, 0, NBAD);
    tcase_add_test(tc, test_plan_refuses_tiny_rate);
    suite_add_tcase(su, tc);
    if (direct) {
        tc = tcase_create("calibrate");
        tcase_set_timeout(tc, tu_sanitized() ? 300 : 120);
        tcase_add_test(tc, test_calibrate_e2e);
        tcase_add_test(tc, test_nvme_rates_at_scale);
        suite_add_tcase(su, tc);
    }
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    tu_rm_rf(tmp);
    free(tmp);
    if (failed) return EXIT_FAILURE;
    if (!direct) {
        fprintf(stderr, "test_profile: the calibrate run was skipped: %s refuses O_DIRECT (set TMPDIR to a disk folder)\n",
                getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        return 77;
    }
    return EXIT_SUCCESS;
}
