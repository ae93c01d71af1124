// test_cli.c — the command line: every bad-input class exits 2 with exactly one stderr line
// naming the flag and the value; --help lists every flag of the table (globally and per
// subcommand); the README flag reference equals `tiertrain --help-markdown`; --version;
// and, in process, how valid command lines resolve (defaults, preset order, --flag=value,
// size units). Runs the binary only for cases that stop in parsing, never for training.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h> // uses: mkfifo
#include <unistd.h>
#include "cli.h"
#include "cli_table.h" // uses: COMMANDS_ACCEPTED, BENCH_ACCEPTED, cli_commands, cli_bench_names
#include "config.h"
#include "backend.h" // uses: backend_blas_replaced, BACKEND_BLAS_PICKED_ENV
#include "kernels.h" // uses: matmul_blas_core, matmul_kernel_name
#include "testutil.h"

// ---------------------------------------------------------------- helpers

// Scratch directory shared by the cases of one run: made in the parent (unchecked fixture)
// before Check forks each test, removed after.
static char *tmp;
static char in_txt[1024], fifo[1024];

static void tmp_setup(void) {
    tmp = tu_tmpdir("cli");
    if (!tmp) { perror("test_cli: tu_tmpdir"); abort(); }
    snprintf(in_txt, sizeof in_txt, "%s/in.txt", tmp);
    FILE *f = fopen(in_txt, "w");
    if (!f) { perror(in_txt); abort(); }
    for (int i = 0; i < 200; i++) fprintf(f, "line %d of a small text file.\n", i);
    fclose(f);
    // a FIFO with no writer: opening it would wait for one, so every input refuses it first
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp);
    if (mkfifo(fifo, 0600) != 0) { perror(fifo); abort(); }
}

static void tmp_teardown(void) {
    unlink(in_txt);
    unlink(fifo);
    rmdir(tmp);
    free(tmp);
}

// Runs tiertrain with args (NULL-terminated; "@" at the start of an arg stands for the
// scratch directory). Returns the exit code; out/err are malloc'd.
static int run(const char *const *args, char **out, char **err) {
    char *argv[32];
    char *owned[32];
    int n = 0;
    argv[n++] = (char *)tu_binary();
    for (int i = 0; args[i]; i++) {
        if (args[i][0] == '@') {
            size_t len = strlen(tmp) + strlen(args[i]) + 1;
            owned[n] = malloc(len);
            snprintf(owned[n], len, "%s%s", tmp, args[i] + 1);
        } else {
            owned[n] = NULL;
        }
        argv[n] = owned[n] ? owned[n] : (char *)args[i];
        n++;
    }
    argv[n] = NULL;
    int rc = tu_run(argv, NULL, out, err);
    for (int i = 1; i < n; i++) free(owned[i]);
    return rc;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

// In-process parse of a valid command line ("tiertrain" is prepended).
static void parse(config_t *cfg, const char *const *args) {
    char *argv[32];
    int n = 0;
    argv[n++] = "tiertrain";
    for (int i = 0; args[i]; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    cli_parse(n, argv, cfg);
}

// Whether help text has a line "  TEXT" followed by spaces or the line's end.
static int help_has_line_starting(const char *help, const char *text) {
    size_t n = strlen(text);
    for (const char *p = strstr(help, text); p; p = strstr(p + 1, text))
        if (p - help >= 3 && p[-1] == ' ' && p[-2] == ' ' && p[-3] == '\n' && (p[n] == ' ' || p[n] == '\n')) return 1;
    return 0;
}

// Whether help text has a line that documents flag (long) — "  --name" or "  -x, --name".
static int help_has_flag(const char *help, const char *name, char short_name) {
    char want[64];
    if (short_name) snprintf(want, sizeof want, "\n  -%c, %s", short_name, name);
    else snprintf(want, sizeof want, "\n  %s", name);
    size_t n = strlen(want);
    for (const char *p = strstr(help, want); p; p = strstr(p + 1, want)) {
        char after = p[n];
        if (after == ' ' || after == '\n') return 1;
    }
    return 0;
}

// ---------------------------------------------------------------- bad input

typedef struct {
    const char *args[10];
    const char *needle[3]; // substrings the one stderr line must contain
} bad_case_t;

static const bad_case_t bad[] = {
    // subcommands
    {{NULL}, {"no subcommand", "train, plan, eval, bench, tokenize, report"}},
    {{"frobnicate", NULL}, {"frobnicate", "unknown subcommand", "train, plan, eval, bench, tokenize, report"}},
    {{"trian", NULL}, {"trian", "did you mean train"}},
    {{"--steps", "5", NULL}, {"--steps", "after the subcommand"}},
    {{"train", "extra", NULL}, {"'extra'", "unexpected argument"}},
    // unknown flags, with and without a suggestion
    {{"train", "--stpes", "5", NULL}, {"--stpes", "unknown flag", "did you mean --steps"}},
    {{"train", "--frobnicate-widely", NULL}, {"--frobnicate-widely", "unknown flag", "train --help"}},
    {{"train", "-steps", "5", NULL}, {"-steps", "did you mean --steps"}},
    // missing values
    {{"train", "--steps", NULL}, {"--steps", "missing value", "integer 1..2147483647"}},
    {{"train", "--steps", "2147483648", NULL}, {"--steps 2147483648: out of range (accepted: an integer 1..2147483647)"}},
    {{"train", "--lr", "1e999", NULL}, {"--lr 1e999: out of range (accepted: a number in (0, 10])"}},
    {{"train", "--lr", "inf", NULL}, {"--lr inf: not a number (accepted: a number in (0, 10])"}},
    {{"train", "--steps", "--lr", "1", NULL}, {"--steps", "missing value", "--lr"}},
    // bad numbers
    {{"train", "--steps", "ten", NULL}, {"--steps ten", "not an integer", "an integer 1..2147483647"}},
    {{"train", "--batch=4x", NULL}, {"--batch 4x", "not an integer"}},
    {{"train", "--lr", "abc", NULL}, {"--lr abc", "not a number"}},
    {{"train", "--lr", "inf", NULL}, {"--lr inf", "not a number"}},
    {{"train", "--seed", "-5", NULL}, {"--seed -5", "non-negative integer"}},
    {{"train", "--hbm-budget", "lots", NULL}, {"--hbm-budget lots", "not a size", "512M"}},
    {{"train", "--hbm-budget", "1.5B", NULL}, {"--hbm-budget 1.5B", "not a size", "512M"}},
    // no sign, no hex (strtod's), and no size under one byte passing as 0, which means none
    {{"train", "--hbm-budget", "-0", NULL}, {"--hbm-budget -0", "not a size", "512M"}},
    {{"train", "--hbm-budget", "0x10M", NULL}, {"--hbm-budget 0x10M", "not a size"}},
    {{"train", "--hbm-budget", "0x1p20", NULL}, {"--hbm-budget 0x1p20", "not a size"}},
    {{"train", "--hbm-budget", " 1G", NULL}, {"--hbm-budget  1G", "not a size"}},
    {{"train", "--hbm-budget", "1.5.5G", NULL}, {"--hbm-budget 1.5.5G", "not a size"}},
    {{"train", "--hbm-budget", "0.0001K", NULL}, {"--hbm-budget 0.0001K", "rounds to 0 bytes", "512M"}},
    {{"train", "--host-cache", "0.0001K", NULL}, {"--host-cache 0.0001K", "rounds to 0 bytes", "none, auto"}},
    // an output over an input (or over the other output): refused before anything is opened
    {{"train", "--data", "@/in.txt", "--log", "@/in.txt", NULL},
     {"--log", "is the --data file too", "choose another path for --log"}},
    {{"plan", "--data", "@/in.txt", "--trace", "@//in.txt", NULL}, {"--trace", "is the --data file too"}},
    {{"train", "--log", "@/r.jsonl", "--trace", "@/./r.jsonl", NULL}, {"--trace", "is the --log file too"}},
    {{"report", "@/in.txt", "-o", "@/in.txt", NULL}, {"-o", "is the input file too", "choose another path for -o"}},
    // out of range
    {{"train", "--steps", "0", NULL}, {"--steps 0", "out of range", "an integer 1..2147483647"}},
    {{"train", "--steps", "99999999999", NULL}, {"--steps 99999999999", "out of range"}},
    {{"train", "--nvme-qd", "5000", NULL}, {"--nvme-qd 5000", "out of range", "1..4096"}},
    {{"train", "--beta2", "1", NULL}, {"--beta2 1", "out of range", "[0, 1)"}},
    {{"train", "--lr", "0", NULL}, {"--lr 0", "out of range", "(0, 10]"}},
    {{"train", "--io-block", "5K", NULL}, {"--io-block 5K", "out of range", "multiple of 4K"}},
    {{"train", "--io-block", "128M", NULL}, {"--io-block 128M", "4K..64M"}},
    {{"bench", "io", "--size", "1000", NULL}, {"--size 1000", "multiple of 4K"}},
    {{"bench", "io", "--size", "1024T", NULL}, {"--size 1.0 PiB: the NVMe folder ", "free (free space there, give a smaller --size"}},
    {{"train", "--numa-node", "-1", NULL}, {"--numa-node -1", "auto or an integer 0..1023"}},
    {{"train", "--vocab", "1", NULL}, {"--vocab 1", "out of range", "2.."}},
    {{"train", "--seq", "0", NULL}, {"--seq 0", "out of range"}},
    // bad enum values and presets
    {{"train", "--precision", "fp16", NULL}, {"--precision fp16", "bf16, fp32"}},
    {{"train", "--device", "tpu", NULL}, {"--device tpu", "auto, cpu, cuda"}},
    {{"train", "--io-engine=aio", NULL}, {"--io-engine aio", "auto, uring, psync"}},
    {{"train", "--model", "huge", NULL}, {"--model huge", "unknown preset", "tiny, small, 125m"}},
    // inconsistent shapes
    {{"train", "--dim", "100", NULL}, {"--dim 100", "--heads 6", "multiple"}},
    {{"train", "--model", "tiny", "--kv-heads", "3", NULL}, {"--kv-heads 3", "--heads 4", "1, 2, 4"}},
    {{"train", "--dim", "390", NULL}, {"--dim 390", "head size 65", "e.g. --dim 384 or --dim 396)"}},
    {{"train", "--dim", "64", "--heads", "64", "--kv-heads", "64", NULL}, {"head size 1", "e.g. --dim 128)"}},
    {{"train", "--vocab", "100", NULL}, {"--vocab 100", "synthetic", ">= 128"}},
    {{"train", "--min-lr", "0.1", NULL}, {"--min-lr 0.1", "--lr 0.001"}},
    // files
    {{"train", "--data", "@/missing.bin", NULL}, {"--data", "missing.bin", "No such file"}},
    {{"train", "--init-from", "@", NULL}, {"--init-from", "config.json: No such file",
                                           "(give a Hugging Face Llama folder: config.json and its model.safetensors)"}},
    {{"train", "--data", "@", NULL}, {"--data", "is a directory"}},
    {{"train", "--init-from", "@/in.txt", NULL}, {"in.txt/config.json: Not a directory",
                                                  "(give a Hugging Face Llama folder: config.json and its model"}},
    {{"train", "--data", "@/fifo", NULL}, {"--data", "/fifo: not a regular file (accepted: synthetic, a text file"}},
    {{"plan", "--data", "@/fifo", NULL}, {"--data", "/fifo: not a regular file"}},
    {{"tokenize", "@/fifo", "-o", "@/out.bin", NULL}, {"tokenize: input", "/fifo: not a regular file"}},
    {{"report", "@/fifo", "-o", "@/r.html", NULL}, {"report: input", "/fifo: not a regular file"}},
    {{"eval", "--resume", "@", "--data", "@/fifo", NULL}, {"--data", "/fifo: not a regular file"}},
    {{"train", "--data=", NULL}, {"--data", "empty value"}},
    {{"plan", "--data", "@/in.txt", "--vocab", "200", NULL}, {"in.txt", "--vocab 200", ">= 256"}},
    {{"train", "--log", "@/nodir/run.jsonl", NULL}, {"--log", "nodir/run.jsonl", "does not exist"}},
    {{"plan", "--nvme-path", "@,@/nodir", NULL}, {"--nvme-path", "nodir", "No such file"}},
    {{"plan", "--nvme-path", "/tmp,/tmp/.", NULL},
     {"--nvme-path", "/tmp/. is the same directory as /tmp", "name each directory once"}},
    // switches, and flags of another subcommand
    {{"train", "--tie=yes", NULL}, {"--tie=yes", "takes no value"}},
    {{"bench", "io", "--save-every", "2", NULL}, {"--save-every", "not accepted by 'tiertrain bench'", "train, plan"}},
    {{"bench", "io", "--save", "@", NULL}, {"--save: bench io does not save", "only bench checkpoint takes it"}},
    {{"bench", "adam", "--save-dtype", "bf16", NULL}, {"--save-dtype: bench adam does not save"}},
    {{"train", "--size", "1G", NULL}, {"--size", "not accepted by 'tiertrain train'", "bench"}},
    // tiers and checkpoints
    {{"train", "--schedule", "diagonal", NULL}, {"--schedule diagonal", "auto, horizontal, vertical"}},
    {{"train", "--checkpoints", "nvme", NULL}, {"--checkpoints nvme", "auto, device, host"}},
    {{"train", "--host-cache", "1G", NULL}, {"--host-cache 1.0 GiB", "--params is not nvme", "--params nvme"}},
    {{"train", "--optimizer-cache", "lots", NULL}, {"--optimizer-cache lots", "not a size", "none, auto, or a size"}},
    {{"train", "--host-cache", "lots", NULL}, {"--host-cache lots", "not a size", "none, auto, or a size"}},
    {{"plan", "--device", "cpu", "--profile", "/nonexistent/p.json", NULL},
     {"--profile /nonexistent/p.json: no such file", "tiertrain bench calibrate --profile /nonexistent/p.json"}},
    {{"train", "--grads", "nvme", NULL}, {"--grads nvme", "needs --optimizer nvme", "add --optimizer nvme"}},
    {{"plan", "--grads", "nvme", "--optimizer", "device", NULL}, {"--grads nvme", "needs --optimizer nvme"}},
    {{"plan", "--model", "tiny", "--recompute", "3", NULL}, {"--recompute 3", "0..2 (the model has 2)"}},
    {{"plan", "--recompute", "most", NULL}, {"--recompute most", "auto, full, none"}},
    {{"train", "--grads", "disk", NULL}, {"--grads disk", "device, host, nvme"}},
    {{"train", "--update", "soon", NULL}, {"--update soon", "auto, after, backward"}},
    {{"bench", "train", "--update", "backward", NULL}, {"--update backward: needs --clip 0", "or use --update after"}},
    {{"plan", "--update", "backward", "--clip", "0", "--device", "cuda", NULL},
     {"--update backward: the cpu backend only", "--device cpu"}},
    {{"train", "--save-every", "5", NULL}, {"--save-every 5", "needs --save DIR"}},
    {{"train", "--save", "@/in.txt", NULL}, {"--save", "in.txt", "not a directory"}},
    {{"train", "--save-dtype", "fp16", NULL}, {"--save-dtype fp16", "fp32, bf16"}},
    {{"eval", "--data", "@/in.txt", NULL}, {"eval", "missing --resume DIR"}},
    {{"eval", "--resume", "@", "--batch", "2", NULL}, {"--batch", "not accepted by 'tiertrain eval'"}},
    // bench and tokenize
    {{"bench", NULL}, {"bench", "missing benchmark name", "gemm, io, adam"}},
    {{"bench", "fft", NULL}, {"bench fft", "unknown benchmark", "gemm, io, adam"}},
    // a budget no placement of the bench fits: refused before any work, as train refuses it
    {{"bench", "overlap", "--model", "tiny", "--hbm-budget", "1M", NULL},
     {"bench overlap: resident does not fit: device states need ", "over --hbm-budget 1.0 MiB", "raise --hbm-budget"}},
    {{"bench", "checkpoint", "--model", "tiny", "--hbm-budget", "1M", "--save", "@", NULL},
     {"bench checkpoint: device states need ", "over --hbm-budget 1.0 MiB", "raise --hbm-budget"}},
    {{"bench", "io", "--size", "16M", "--host-budget", "1M", "--nvme-path", "@", NULL},
     {"bench io: its buffers need 64.0 MiB (2 x --nvme-qd 32 x --io-block 1.0 MiB), over --host-budget 1.0 MiB",
      "(raise it, or lower --nvme-qd or --io-block)"}},
    {{"bench", "calibrate", "--quick", "--device", "cpu", "--host-budget", "1M", "--profile", "@/p.json", NULL},
     {"bench calibrate: its buffers need 128.0 MiB", "over --host-budget 1.0 MiB (raise it to 128.0 MiB, or drop it)"}},
    {{"bench", "gemm", "io", NULL}, {"'io'", "second argument"}},
    {{"tokenize", NULL}, {"tokenize", "missing input"}},
    {{"tokenize", "@/in.txt", NULL}, {"in.txt", "missing -o OUT.bin"}},
    {{"tokenize", "@/missing.txt", "-o", "@/out.bin", NULL}, {"missing.txt", "No such file"}},
    {{"tokenize", "@/in.txt", "-o", "@/out.txt", NULL}, {"-o", "out.txt", ".bin"}},
    {{"tokenize", "@/in.txt", "-o", "@/nodir/out.bin", NULL}, {"-o", "nodir/out.bin", "does not exist"}},
};
enum { NBAD = sizeof bad / sizeof bad[0] };

START_TEST(test_bad_input) {
    const bad_case_t *c = &bad[_i];
    char *out = NULL, *err = NULL;
    int rc = run(c->args, &out, &err);
    char cmdline[256] = "";
    for (int i = 0; c->args[i]; i++) {
        strncat(cmdline, " ", sizeof cmdline - strlen(cmdline) - 1);
        strncat(cmdline, c->args[i], sizeof cmdline - strlen(cmdline) - 1);
    }
    ck_assert_msg(rc == 2, "tiertrain%s: exit %d, want 2 (stderr: %s)", cmdline, rc, err);
    ck_assert_msg(count_lines(err) == 1 && err[strlen(err) - 1] == '\n',
                  "tiertrain%s: want exactly one stderr line, got:\n%s", cmdline, err);
    ck_assert_msg(strncmp(err, "tiertrain: ", 11) == 0, "tiertrain%s: no prefix: %s", cmdline, err);
    ck_assert_msg(out[0] == 0, "tiertrain%s: printed to stdout before failing: %s", cmdline, out);
    for (int k = 0; k < 3 && c->needle[k]; k++)
        ck_assert_msg(strstr(err, c->needle[k]), "tiertrain%s: message lacks \"%s\": %s", cmdline, c->needle[k], err);
    free(out);
    free(err);
}
END_TEST

// A plan that does not fit: exit 2, its JSON line still last on stdout, and one stderr line
// whose reason is the JSON's, word for word.
START_TEST(test_plan_does_not_fit) {
    char *out = NULL, *err = NULL;
    int rc = run((const char *[]){"plan", "--model", "tiny", "--batch", "1", "--seq", "32", "--hbm-budget", "1K",
                                  "--device", "cpu", NULL},
                 &out, &err);
    ck_assert_msg(rc == 2, "exit %d (want 2): %s", rc, err);
    ck_assert_msg(count_lines(err) == 1, "want one stderr line, got:\n%s", err);
    const char *pre = "tiertrain: plan: does not fit: device states need ";
    ck_assert_msg(!strncmp(err, pre, strlen(pre)) && strstr(err, " over --hbm-budget 1.0 KiB (raise --hbm-budget"),
                  "stderr: %s", err);
    const char *json = strstr(out, "{\"plan\":"), *r = json ? strstr(json, "\"reason\":\"") : NULL;
    ck_assert_msg(r, "no plan JSON with a reason on stdout:\n%s", out);
    r += strlen("\"reason\":\"");
    const char *said = err + strlen("tiertrain: plan: does not fit: ");
    const size_t n = strlen(said) - 1; // without the newline
    ck_assert_msg(!strncmp(r, said, n) && r[n] == '"', "stderr's reason is not the JSON's:\n%s\n%s", said, r);
    ck_assert_msg(strstr(said, "(raise --hbm-budget, --params host|nvme, --grads host|nvme, --checkpoints host, "
                               "or lower --batch or --seq)"), "fixes: %s", said);
    // train refuses the same flags with the same reason and the changes plan judged to fit
    char want[2048];
    int w = snprintf(want, sizeof want, "tiertrain: %.*s", (int)n, said);
    int k = 0;
    for (const char *c = strstr(json, "{\"change\":\""); c; c = strstr(c + 1, "{\"change\":\""), k++) {
        c += strlen("{\"change\":\"");
        w += snprintf(want + w, sizeof want - (size_t)w, "%s%.*s", k ? "; " : "; changes that fit: ",
                      (int)strcspn(c, "\""), c);
    }
    snprintf(want + w, sizeof want - (size_t)w, "\n");
    ck_assert_msg(k >= 1, "plan suggested nothing:\n%s", out);
    free(out);
    free(err);
    rc = run((const char *[]){"train", "--model", "tiny", "--batch", "1", "--seq", "32", "--hbm-budget", "1K",
                              "--device", "cpu", NULL},
             &out, &err);
    ck_assert_msg(rc == 2, "train: exit %d (want 2): %s", rc, err);
    ck_assert_str_eq(err, want);
    free(out);
    free(err);
    // the fixes offered are the moves not made yet: none, with the states and checkpoints off the device
    rc = run((const char *[]){"plan", "--model", "tiny", "--batch", "1", "--seq", "32", "--hbm-budget", "1K",
                              "--device", "cpu", "--params", "nvme", "--grads", "host", "--checkpoints", "host", NULL},
             &out, &err);
    ck_assert_msg(rc == 2 && strstr(err, " over --hbm-budget 1.0 KiB (raise --hbm-budget, or lower --batch or --seq)\n"),
                  "exit %d: %s", rc, err);
    free(out);
    free(err);
    // a budget a few bytes short, which would print as the same size: said in bytes
    rc = run((const char *[]){"plan", "--model", "tiny", "--batch", "1", "--seq", "32", "--device", "cpu", "--recompute",
                              "full", NULL}, &out, &err);
    const char *db = strstr(out, "\"device_bytes\":");
    ck_assert_msg(rc == 0 && db, "exit %d: %s", rc, out);
    const long long need = atoll(db + strlen("\"device_bytes\":"));
    free(out);
    free(err);
    char budget[32];
    snprintf(budget, sizeof budget, "%lld", need - 10);
    rc = run((const char *[]){"plan", "--model", "tiny", "--batch", "1", "--seq", "32", "--device", "cpu", "--recompute",
                              "full", "--hbm-budget", budget, NULL}, &out, &err);
    char bytes[256];
    snprintf(bytes, sizeof bytes, "device states need %lld bytes, over --hbm-budget %lld bytes (raise", need, need - 10);
    ck_assert_msg(rc == 2 && strstr(err, bytes), "exit %d: want \"%s\" in: %s", rc, bytes, err);
    free(out);
    free(err);
}
END_TEST

// ---------------------------------------------------------------- help, version, README

static char *run_ok(const char *const *args) {
    char *out = NULL, *err = NULL;
    int rc = run(args, &out, &err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_msg(err[0] == 0, "stderr not empty: %s", err);
    free(err);
    return out;
}

// OpenBLAS's kernel family: where its own pick is narrower than this CPU (kernels.h,
// matmul_blas_core_better), the binary runs itself again with the wider family, and the tier
// report's backend line says which ran and which it replaced; where the pick is fine, that
// family runs, unremarked, and an OPENBLAS_CORETYPE of the user's own is kept and named. On a
// CPU with FMA the line first names our kernels, which run the products there.
START_TEST(test_blas_family) {
    const char *const args[] = {"train", "--model", "tiny", "--steps", "1", "--eval-every", "0", "--device", "cpu", NULL};
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)tu_binary();
    for (int i = 0; args[i]; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    // OpenBLAS's own pick on this CPU: this suite ran itself again too (testutil.c), so its
    // library runs the wider family, and the pick it replaced is in the environment; NULL when
    // the user's OPENBLAS_CORETYPE chose
    const char *replaced = backend_blas_replaced(), *now = matmul_blas_core();
    const char *own = replaced ? replaced : getenv("OPENBLAS_CORETYPE") ? NULL : now;
    char own_copy[64] = "", want[192];
    snprintf(own_copy, sizeof own_copy, "%s", own ? own : now); // the user's family, when theirs chose
    ck_assert_int_eq(unsetenv("OPENBLAS_CORETYPE"), 0); // the child starts from OpenBLAS's own pick
    ck_assert_int_eq(unsetenv(BACKEND_BLAS_PICKED_ENV), 0);
    char env_own[96];
    snprintf(env_own, sizeof env_own, "OPENBLAS_CORETYPE=%s", own_copy);
    char *const env[] = {env_own, NULL};
    // on a CPU with FMA the products run on our kernels, and the line says so first
    char ours[64] = "";
    if (matmul_kernel_name()) snprintf(ours, sizeof ours, "GEMMs on %s; ", matmul_kernel_name());
    for (int user = !own; user < 2; user++) { // user: OPENBLAS_CORETYPE names own_copy
        char *out = NULL, *err = NULL;
        ck_assert_int_eq(tu_run(argv, user ? env : NULL, &out, &err), 0);
        if (user)
            snprintf(want, sizeof want, " threads, %sOpenBLAS %s, as OPENBLAS_CORETYPE says): ", ours, own_copy);
        else if (replaced)
            snprintf(want, sizeof want, " threads, %sOpenBLAS %s, not its own pick %s): ", ours, now, own_copy);
        else
            snprintf(want, sizeof want, " threads, %sOpenBLAS %s): ", ours, own_copy);
        ck_assert_msg(strstr(out, want), "%s: no '%s' in:\n%s", user ? env_own : "no OPENBLAS_CORETYPE", want, out);
        ck_assert_msg(!strstr(err, "OpenBLAS"), "stderr: %s", err);
        free(out);
        free(err);
    }
}
END_TEST

START_TEST(test_version) {
    char *out = run_ok((const char *[]){"--version", NULL});
    ck_assert_str_eq(out, "tiertrain " TT_VERSION "\n");
    free(out);
    out = run_ok((const char *[]){"train", "--steps", "5", "--version", NULL});
    ck_assert_str_eq(out, "tiertrain " TT_VERSION "\n");
    free(out);
}
END_TEST

START_TEST(test_help_lists_every_flag) {
    char *help = run_ok((const char *[]){"--help", NULL});
    char *help_h = run_ok((const char *[]){"-h", NULL});
    ck_assert_str_eq(help, help_h);
    size_t n = cli_flag_count();
    ck_assert_uint_gt(n, 40);
    for (size_t i = 0; i < n; i++) {
        const char *name = cli_flag_name(i);
        if (cli_flag_hidden(i)) {
            ck_assert_msg(!strstr(help, name), "hidden %s shows in --help", name);
            continue;
        }
        ck_assert_msg(help_has_flag(help, name, cli_flag_short(i)), "%s missing from tiertrain --help", name);
    }
    ck_assert(strstr(help, "tiertrain train") && strstr(help, "tiertrain tokenize IN.txt -o OUT.bin"));
    for (int i = 0; i < CLI_NCOMMANDS; i++) // each usage whole, on a line of its own
        ck_assert_msg(help_has_line_starting(help, cli_commands[i].usage), "--help lacks the whole usage \"%s\"",
                      cli_commands[i].usage);
    free(help);
    free(help_h);
}
END_TEST

// `tiertrain CMD --help` documents exactly the flags CMD accepts.
START_TEST(test_help_per_command) {
    static const struct { const char *name; unsigned bit; } cmds[] = {
        {"train", CLI_CMD_TRAIN}, {"plan", CLI_CMD_PLAN}, {"bench", CLI_CMD_BENCH}, {"tokenize", CLI_CMD_TOKENIZE},
    };
    char *help = run_ok((const char *[]){cmds[_i].name, "--help", NULL});
    ck_assert_msg(strstr(help, "usage: tiertrain"), "%s --help: no usage line", cmds[_i].name);
    for (size_t i = 0; i < cli_flag_count(); i++) {
        if (cli_flag_hidden(i)) continue;
        unsigned c = cli_flag_commands(i);
        int accepted = c == 0 || (c & cmds[_i].bit);
        int listed = help_has_flag(help, cli_flag_name(i), cli_flag_short(i));
        ck_assert_msg(accepted == listed, "tiertrain %s --help: %s is %s but %s", cmds[_i].name, cli_flag_name(i),
                      accepted ? "accepted" : "not accepted", listed ? "listed" : "not listed");
    }
    free(help);
    // --help wins over anything else on the line, even bad flags.
    char *again = run_ok((const char *[]){cmds[_i].name, "--no-such-flag", "-h", NULL});
    free(again);
}
END_TEST

START_TEST(test_readme_matches_table) {
    char *md = run_ok((const char *[]){"--help-markdown", NULL});
    char *readme = tu_slurp(TT_SOURCE_DIR "/README.md");
    ck_assert_msg(readme, "cannot read %s", TT_SOURCE_DIR "/README.md");
    static const char begin[] = "<!-- flags:begin -->\n", end[] = "<!-- flags:end -->";
    char *b = strstr(readme, begin);
    ck_assert_msg(b, "README.md has no line %s", "<!-- flags:begin -->");
    b += strlen(begin);
    char *e = strstr(b, end);
    ck_assert_msg(e && e[-1] == '\n', "README.md has no line %s after the begin marker", end);
    *e = 0;
    if (strcmp(b, md) != 0) {
        // Point at the first line that differs.
        int line = 1;
        const char *p = b, *q = md;
        while (*p && *p == *q) { line += *p == '\n'; p++; q++; }
        const char *pl = p, *ql = q;
        while (pl > b && pl[-1] != '\n') { pl--; ql--; }
        ck_abort_msg("README.md flag reference differs from `tiertrain --help-markdown` at line %d of the section:\n"
                     "  README: %.*s\n  binary: %.*s\nReplace the lines between the markers with the output of "
                     "`build/tiertrain --help-markdown`.", line, (int)strcspn(pl, "\n"), pl, (int)strcspn(ql, "\n"), ql);
    }
    // The reference documents every visible flag.
    for (size_t i = 0; i < cli_flag_count(); i++) {
        char want[64];
        snprintf(want, sizeof want, "`%s", cli_flag_name(i));
        ck_assert_msg(cli_flag_hidden(i) == !strstr(md, want), "%s: hidden=%d but %s the Markdown", cli_flag_name(i),
                      cli_flag_hidden(i), strstr(md, want) ? "in" : "not in");
    }
    free(md);
    free(readme);
}
END_TEST

START_TEST(test_table_check) {
    char err[512] = "";
    ck_assert_msg(cli_table_check(err, sizeof err) == 0, "%s", err);
    // the lists the messages print name every command and benchmark, and nothing else
    const char *lists[2] = {COMMANDS_ACCEPTED, BENCH_ACCEPTED};
    for (int l = 0; l < 2; l++) {
        const int n = l ? CLI_NBENCH : CLI_NCOMMANDS;
        int commas = 0;
        for (const char *c = lists[l]; *c; c++) commas += *c == ',';
        ck_assert_msg(commas + 1 == n, "\"%s\" names %d, the table %d", lists[l], commas + 1, n);
        for (int i = 0; i < n; i++) {
            const char *name = l ? cli_bench_names[i] : cli_commands[i].name;
            char item[64];
            snprintf(item, sizeof item, ", %s,", name);
            char padded[256];
            snprintf(padded, sizeof padded, ", %s,", lists[l]);
            ck_assert_msg(strstr(padded, item), "\"%s\" lacks %s", lists[l], name);
        }
    }
}
END_TEST

// ---------------------------------------------------------------- resolution (in process)

START_TEST(test_defaults) {
    config_t c;
    parse(&c, (const char *[]){"train", NULL});
    ck_assert_int_eq(c.command, CMD_TRAIN);
    ck_assert_str_eq(c.preset, "small");
    ck_assert(c.L == 6 && c.C == 384 && c.NH == 6 && c.NKV == 2 && c.F == 1024 && c.V == 256 && c.T == 256);
    ck_assert_int_eq(c.tie, 0);
    ck_assert(c.rope_theta == 10000 && c.norm_eps == 1e-5 && c.precision == PREC_BF16 && c.seed == 1337);
    ck_assert_str_eq(c.data, "synthetic");
    ck_assert(c.B == 4 && c.accum == 1 && c.steps == 60 && c.eval_every == 20 && c.eval_batches == 4);
    ck_assert(c.lr == 1e-3 && c.min_lr == 1e-4 && c.warmup == 10 && c.wd == 0.1 && c.clip == 1.0);
    ck_assert(c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8);
    ck_assert(c.device == DEVICE_AUTO && c.threads == 0 && c.hbm_budget == 0 && c.host_budget == 0);
    ck_assert_str_eq(c.nvme_path, "");
    ck_assert(c.nvme_qd == 32 && c.io_block == 1048576 && c.io_engine == IO_ENGINE_AUTO);
    ck_assert(!c.io_sqpoll && !c.io_verify && !c.keep_nvme && c.numa_node == -1);
    ck_assert(c.log_path[0] == 0 && !c.quiet && c.bench_size == 4294967296ULL);
}
END_TEST

// The preset applies first; explicit shape flags win wherever they stand.
START_TEST(test_preset_order) {
    config_t c;
    parse(&c, (const char *[]){"train", "--dim", "128", "--model", "tiny", NULL});
    ck_assert(c.L == 2 && c.C == 128 && c.NH == 4 && c.NKV == 2 && c.V == 256 && c.T == 64);
    parse(&c, (const char *[]){"plan", "--model", "tiny", "--dim", "128", "--layers", "3", NULL});
    ck_assert(c.command == CMD_PLAN && c.L == 3 && c.C == 128 && c.F == 192);
    parse(&c, (const char *[]){"plan", "--model", "7b", "--vocab", "256", NULL});
    ck_assert(c.L == 32 && c.C == 4096 && c.V == 256 && c.T == 4096);
    parse(&c, (const char *[]){"plan", "--model", "tiny", "--model", "70b", NULL});
    ck_assert(c.L == 80 && c.NKV == 8);
    ck_assert_str_eq(c.preset, "70b");
}
END_TEST

// bench train's shape M (L 12) is its default before --recompute counts blocks: none keeps all
// 12 and N recomputes N of M's, not of the small preset's 6; a shape flag takes M's place.
START_TEST(test_bench_train_shape) {
    config_t c;
    parse(&c, (const char *[]){"bench", "train", "--recompute", "none", NULL});
    ck_assert(c.L == 12 && c.C == 768 && c.F == 2048 && c.T == 256 && c.B == 4 && c.kept_blocks == 12);
    ck_assert_str_eq(c.preset, "M");
    parse(&c, (const char *[]){"bench", "train", "--recompute", "8", "--batch", "2", NULL});
    ck_assert(c.kept_blocks == 4 && c.B == 2);
    parse(&c, (const char *[]){"bench", "train", "--model", "tiny", "--recompute", "none", NULL});
    ck_assert(c.L == 2 && c.kept_blocks == 2 && c.T == 64);
    parse(&c, (const char *[]){"bench", "overlap", NULL});
    ck_assert(c.L != 12 || c.C != 768); // only bench train has shape M
}
END_TEST

START_TEST(test_equals_form) {
    config_t c;
    parse(&c, (const char *[]){"train", "--steps=7", "--lr=0.01", "--model=tiny", "--precision=fp32", "--device=cpu",
                               "--tie", "--numa-node=1", "--seed=18446744073709551615", "--eval-every", "0", NULL});
    ck_assert(c.steps == 7 && c.lr == 0.01 && c.L == 2 && c.precision == PREC_FP32 && c.device == DEVICE_CPU);
    ck_assert(c.tie == 1 && c.numa_node == 1 && c.seed == UINT64_MAX && c.eval_every == 0);
    // --min-lr left at its default follows a lower --lr; an explicit one is kept.
    parse(&c, (const char *[]){"train", "--lr", "5e-5", NULL});
    ck_assert(c.min_lr == 5e-5);
    parse(&c, (const char *[]){"train", "--lr", "5e-5", "--min-lr", "0", NULL});
    ck_assert(c.min_lr == 0);
    parse(&c, (const char *[]){"train", "--device", "cuda", "--io-engine", "psync", NULL});
    ck_assert(c.device == DEVICE_CUDA && c.io_engine == IO_ENGINE_PSYNC);
}
END_TEST

START_TEST(test_sizes) {
    config_t c;
    parse(&c, (const char *[]){"train", "--hbm-budget", "4G", "--host-budget=512M", "--io-block", "64k", NULL});
    ck_assert_uint_eq(c.hbm_budget, 4ULL << 30);
    ck_assert_uint_eq(c.host_budget, 512ULL << 20);
    ck_assert_uint_eq(c.io_block, 64ULL << 10);
    parse(&c, (const char *[]){"train", "--hbm-budget", "1.5GiB", "--host-budget", "2GB", "--io-block", "64M", NULL});
    ck_assert_uint_eq(c.hbm_budget, 3ULL << 29);
    ck_assert_uint_eq(c.host_budget, 2000000000ULL);
    ck_assert_uint_eq(c.io_block, 64ULL << 20);
    // lower-case units are the upper-case ones
    parse(&c, (const char *[]){"train", "--hbm-budget", "3g", "--host-budget", "512m", "--io-block", "1m", NULL});
    ck_assert(c.hbm_budget == 3ULL << 30 && c.host_budget == 512ULL << 20 && c.io_block == 1ULL << 20);
    parse(&c, (const char *[]){"bench", "io", "--size", "0.5t", NULL});
    ck_assert_uint_eq(c.bench_size, 1ULL << 39);
    parse(&c, (const char *[]){"train", "--hbm-budget", "none", "--host-budget", "0", "--io-block", "4096", NULL});
    ck_assert(c.hbm_budget == 0 && c.host_budget == 0 && c.io_block == 4096);
    // a fraction of a unit rounds to the nearest byte, as the tool prints sizes ("16.4 GiB")
    parse(&c, (const char *[]){"train", "--hbm-budget", "16.4G", "--host-budget", "0.1K", NULL});
    ck_assert_uint_eq(c.hbm_budget, 17609365914ULL); // 16.4 x 2^30 = 17609365913.6
    ck_assert_uint_eq(c.host_budget, 102);
    // an exponent is a plain decimal number too
    parse(&c, (const char *[]){"train", "--hbm-budget", "2e9", "--host-budget", "1.5e3M", NULL});
    ck_assert(c.hbm_budget == 2000000000ULL && c.host_budget == 1500ULL << 20);
    parse(&c, (const char *[]){"bench", "io", "--size", "1.5G", "--threads", "2", "--io-sqpoll", NULL});
    ck_assert(c.command == CMD_BENCH && c.bench_size == 3ULL << 29 && c.threads == 2 && c.io_sqpoll);
    ck_assert_str_eq(c.bench_name, "io");
    parse(&c, (const char *[]){"bench", "--size=8K", "gemm", NULL});
    ck_assert(c.bench_size == 8192);
    ck_assert_str_eq(c.bench_name, "gemm");
}
END_TEST

START_TEST(test_files) {
    config_t c;
    char log[1100], out[1100];
    snprintf(log, sizeof log, "%s/run.jsonl", tmp);
    snprintf(out, sizeof out, "%s/out.bin", tmp);
    parse(&c, (const char *[]){"train", "--data", in_txt, "--log", log, "--nvme-path", tmp, NULL});
    ck_assert_str_eq(c.data, in_txt);
    ck_assert_str_eq(c.log_path, log);
    ck_assert_str_eq(c.nvme_path, tmp);
    parse(&c, (const char *[]){"tokenize", in_txt, "-o", out, NULL});
    ck_assert(c.command == CMD_TOKENIZE);
    ck_assert_str_eq(c.tok_in, in_txt);
    ck_assert_str_eq(c.tok_out, out);
    parse(&c, (const char *[]){"tokenize", "--out", out, "--", in_txt, NULL});
    ck_assert_str_eq(c.tok_in, in_txt);
}
END_TEST

// --save and --nvme-path on a filesystem that stores nothing (/proc), where it is writable
// (as root): refused naming it, not found to have "0 B free" later. Elsewhere /proc is not
// writable, which test_bad_input's cases cover.
START_TEST(test_no_storage) {
    if (access("/proc", W_OK | X_OK) != 0) return;
    static const char *const cases[][6] = {
        {"train", "--save", "/proc/foo", NULL},
        {"plan", "--nvme-path", "/proc", NULL},
    };
    static const char *const want[] = {
        "tiertrain: --save /proc/foo: lies on a filesystem that stores no files (such as /proc or /sys; give a "
        "directory on a disk)\n",
        "tiertrain: --nvme-path /proc: /proc lies on a filesystem that stores no files (such as /proc or /sys; give a "
        "directory on a disk)\n",
    };
    for (int i = 0; i < 2; i++) {
        char *out = NULL, *err = NULL;
        int rc = run(cases[i], &out, &err);
        ck_assert_msg(rc == 2, "%s %s: exit %d: %s", cases[i][1], cases[i][2], rc, err);
        ck_assert_str_eq(err, want[i]);
        free(out);
        free(err);
    }
}
END_TEST

START_TEST(test_config_print) {
    config_t c;
    parse(&c, (const char *[]){"train", "--model", "tiny", "--dim", "128", "--hbm-budget", "2G", NULL});
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print(&c, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "model tiny (changed by flags)") && strstr(buf, "C 128"), "%s", buf);
    ck_assert_msg(strstr(buf, "data: synthetic") && strstr(buf, "lr 0.001") && strstr(buf, "hbm-budget 2.0 GiB"), "%s",
                  buf);
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    ck_assert_msg(lines >= 3 && lines <= 6, "config_print: %d lines, want a compact few:\n%s", lines, buf);
    free(buf);
}
END_TEST

// ---------------------------------------------------------------- suite

static Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    TCase *core = tcase_create("core");
    tcase_add_unchecked_fixture(core, tmp_setup, tmp_teardown);
    tcase_add_test(core, test_table_check);
    tcase_add_test(core, test_version);
    tcase_add_test(core, test_blas_family);
    tcase_add_test(core, test_help_lists_every_flag);
    tcase_add_loop_test(core, test_help_per_command, 0, 4);
    tcase_add_test(core, test_readme_matches_table);
    tcase_add_test(core, test_defaults);
    tcase_add_test(core, test_preset_order);
    tcase_add_test(core, test_equals_form);
    tcase_add_test(core, test_bench_train_shape);
    tcase_add_test(core, test_sizes);
    tcase_add_test(core, test_files);
    tcase_add_test(core, test_no_storage);
    tcase_add_test(core, test_plan_does_not_fit);
    tcase_add_test(core, test_config_print);
    suite_add_tcase(s, core);
    TCase *faults = tcase_create("faults");
    tcase_add_unchecked_fixture(faults, tmp_setup, tmp_teardown);
    tcase_add_loop_test(faults, test_bad_input, 0, NBAD);
    tcase_set_timeout(faults, 120);
    suite_add_tcase(s, faults);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(cli_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
