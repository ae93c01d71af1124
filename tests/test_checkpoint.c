// test_checkpoint.c — checkpoints through the binary (DESIGN §8, src/checkpoint.h):
//   resume   N steps in one run and K steps + resume give the same bits, whatever the
//            placement on either side, the schedule, the saved dtype or a tied head;
//   refusals a checkpoint of another model, a folder that is not one, a dangling `latest`,
//            nothing left to do, --save-every without --save: exit 2, one line;
//   bad files a truncated or lying safetensors file, a wrong state.json, a NaN, a missing
//            config.json: exit 2, one line naming the file, never a crash;
//   crash    kill -9 at seeded random moments while saves are slowed down: every visible
//            step-* folder is complete and resumes to the reference's bits; SIGTERM saves
//            and says where; a second SIGINT mid-save leaves no half checkpoint; an NVMe
//            error leaves the last checkpoint usable;
//   export   model.safetensors has the Hugging Face Llama names, shapes and dtypes, read by
//            a scan of the raw header that shares no code with src/safetensors.c or
//            src/json.c; --keep-last keeps the newest folders;
//   user entries  step-* names that are not complete checkpoints (a folder without
//            state.json, a file, step-abcdefgh, a link) are never listed, pruned or replaced.
// What must be identical is compared as the run printed it in the --log JSONL: each step's
// loss and the params_hash (an FNV-1a hash of every FP32 master weight).
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "crc32c.h"
#include "testutil.h"

// ---------------------------------------------------------------- folders and cleanup

// A failed ck_assert ends a forked test with _exit, skipping its teardown: so each TCase's
// folder is made and removed by an unchecked fixture, in the Check parent process, and each
// test's folder lies inside it. A trainer started in the background dies with the test
// (PR_SET_PDEATHSIG); tu_run's children are waited for.
static char *fixdir;     // the TCase's folder (unchecked fixture)
static char *tmp;        // this test's folder, inside fixdir (checked fixture)
static pid_t live_pid;   // a trainer started by spawn() and not reaped yet

static const char *workdir(void) { return tmp ? tmp : fixdir; }

static void fix_setup(void) { fixdir = tu_tmpdir("ckpt"); }

static void fix_teardown(void) {
    if (fixdir) tu_rm_rf(fixdir);
    free(fixdir);
    fixdir = NULL;
}

static void setup(void) {
    ck_assert_msg(fixdir != NULL, "no TCase folder");
    ck_assert(asprintf(&tmp, "%s/test_XXXXXX", fixdir) > 0);
    ck_assert_msg(mkdtemp(tmp) != NULL, "%s: %s", tmp, strerror(errno));
}

static void teardown(void) {
    tu_rm_rf(tmp);
    free(tmp);
    tmp = NULL;
    if (live_pid > 0) { // a test that returned without reaping (not one of these)
        kill(live_pid, SIGKILL);
        waitpid(live_pid, NULL, 0);
        live_pid = 0;
    }
}

// snprintf that must not truncate (paths and expected messages).
static void spf(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    ck_assert_msg(n >= 0 && (size_t)n < cap, "%zu bytes are too few for \"%s\"", cap, fmt);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static void copy_file(const char *from, const char *to) {
    char *buf = NULL;
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_msg(in >= 0 && out >= 0, "copy %s -> %s: %s", from, to, strerror(errno));
    buf = malloc(1 << 16);
    ssize_t n;
    while ((n = read(in, buf, 1 << 16)) > 0) ck_assert(write(out, buf, (size_t)n) == n);
    ck_assert(n == 0);
    free(buf);
    close(in);
    ck_assert_int_eq(close(out), 0);
}

static const char *const ckpt_files[] = {"model.safetensors", "optimizer.safetensors", "config.json", "state.json"};

// A checkpoint folder's four files, copied into a fresh folder `to`.
static void copy_folder(const char *from, const char *to) {
    tu_rm_rf(to);
    ck_assert_int_eq(mkdir(to, 0755), 0);
    for (int i = 0; i < 4; i++) {
        char a[1200], b[1200];
        spf(a, sizeof a, "%s/%s", from, ckpt_files[i]);
        spf(b, sizeof b, "%s/%s", to, ckpt_files[i]);
        copy_file(a, b);
    }
}

// 1 when dir/latest exists, its first line in name (without the newline).
static int read_latest(const char *dir, char *name, size_t cap) {
    char p[1200];
    snprintf(p, sizeof p, "%s/latest", dir);
    char *s = tu_slurp(p);
    if (!s) return 0;
    snprintf(name, cap, "%.*s", (int)strcspn(s, "\n"), s);
    free(s);
    return 1;
}

// The step of a checkpoint folder name "step-NNNNNNNN", or -1 for any other name.
static int step_of(const char *name) {
    if (strncmp(name, "step-", 5) != 0 || strlen(name) != 13 || strspn(name + 5, "0123456789") != 8) return -1;
    return atoi(name + 5);
}

// The names under dir: step-* folders (sorted) into steps, and how many .tmp-* entries.
static int list_dir(const char *dir, int *steps, int cap, int *ntmp) {
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    int n = 0;
    *ntmp = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strncmp(e->d_name, ".tmp-", 5)) (*ntmp)++;
        int k = step_of(e->d_name);
        if (k >= 0) {
            ck_assert(n < cap);
            steps[n++] = k;
        } else {
            ck_assert_msg(!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "latest") ||
                              !strcmp(e->d_name, ".lock") || !strncmp(e->d_name, ".tmp-", 5),
                          "%s: unexpected entry '%s'", dir, e->d_name);
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) // insertion sort: a handful of names
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            int t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t;
        }
    return n;
}

// A complete checkpoint folder: its four files, none empty, and state.json says step k
// with the given params_hash (when not NULL).
static void check_complete(const char *folder, int k, const char *hash) {
    for (int i = 0; i < 4; i++) {
        char p[1200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", folder, ckpt_files[i]);
        ck_assert_msg(stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0, "%s: missing or empty", p);
    }
    char p[1200], want[64];
    snprintf(p, sizeof p, "%s/state.json", folder);
    char *s = tu_slurp(p);
    snprintf(want, sizeof want, "\"step\": %d,", k);
    ck_assert_msg(s && strstr(s, want), "%s: no %s in\n%s", p, want, s ? s : "");
    if (hash) {
        snprintf(want, sizeof want, "\"params_hash\": \"%s\"", hash);
        ck_assert_msg(strstr(s, want), "%s: want %s in\n%s", p, want, s);
    }
    free(s);
}

static void msleep(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// ---------------------------------------------------------------- running the trainer

enum { MAXSTEP = 64 };

typedef struct {
    int rc;
    char *out, *err, *log;
    char loss[MAXSTEP + 1][64]; // each step's loss as logged; "" where the run did not log it
    char val[MAXSTEP + 1][64];  // val_loss of each eval event
    char ck[MAXSTEP + 1][17];   // params_hash of each checkpoint event
    char hash[17];              // the summary's params_hash ("" without a summary)
} run_t;

// argv under construction; every string is copied into the pool.
typedef struct {
    char *v[128];
    int n;
    char pool[16384];
    size_t used;
} args_t;

static void arg(args_t *a, const char *s) {
    size_t len = strlen(s) + 1;
    ck_assert(a->n < 120 && a->used + len <= sizeof a->pool);
    a->v[a->n++] = memcpy(a->pool + a->used, s, len);
    a->used += len;
}

static void argf(args_t *a, const char *fmt, ...) {
    char s[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    arg(a, s);
}

static void args(args_t *a, const char *const *list) {
    for (; list && *list; list++) arg(a, *list);
}

// `tiertrain train` with NVMe files under the work folder, then list's flags.
static void train_args(args_t *a, const char *const *list) {
    a->n = 0;
    a->used = 0;
    arg(a, tu_binary());
    arg(a, "train");
    argf(a, "--nvme-path=%s", workdir());
    args(a, list);
}

// Value of "key": in one JSONL line (quotes stripped) into out; 0 when absent.
static int field_n(const char *line, const char *key, char *out, size_t cap) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    if (!p) return 0;
    p += strlen(k);
    if (*p == '"') p++;
    snprintf(out, cap, "%.*s", (int)strcspn(p, "\",}"), p);
    return 1;
}

#define field(line, key, out) field_n(line, key, out, sizeof(out))

static int in_range(const char *s) {
    int k = atoi(s);
    return k >= 1 && k <= MAXSTEP ? k : 0;
}

static void parse_log(run_t *r) {
    for (const char *p = r->log; p && *p;) {
        size_t len = strcspn(p, "\n");
        char line[2048], s[32] = "", v[64];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        p += len + (p[len] == '\n');
        if (!field(line, "step", s) && !strstr(line, "\"event\":\"summary\"")) continue;
        int k = in_range(s);
        if (strstr(line, "\"event\":\"step\"") && k && field(line, "loss", v))
            snprintf(r->loss[k], sizeof r->loss[k], "%s", v);
        else if (strstr(line, "\"event\":\"eval\"") && k && field(line, "val_loss", v))
            snprintf(r->val[k], sizeof r->val[k], "%s", v);
        else if (strstr(line, "\"event\":\"checkpoint\"") && k && field(line, "params_hash", v))
            snprintf(r->ck[k], sizeof r->ck[k], "%.16s", v);
        else if (strstr(line, "\"event\":\"summary\"") && field(line, "params_hash", v))
            snprintf(r->hash, sizeof r->hash, "%.16s", v);
    }
}

// Runs a (plus --log) to the end; the log is parsed and removed.
static run_t run(args_t *a, char *const *env) {
    static int seq;
    char log[1200];
    snprintf(log, sizeof log, "%s/log-%d.jsonl", workdir(), seq++);
    arg(a, "--log");
    arg(a, log);
    a->v[a->n] = NULL;
    run_t *r = calloc(1, sizeof *r); // large: not on the stack of a Check test
    run_t out;
    r->rc = tu_run(a->v, env, &r->out, &r->err);
    r->log = tu_slurp(log);
    unlink(log);
    parse_log(r);
    out = *r;
    free(r);
    return out;
}

static void run_free(run_t *r) {
    free(r->out);
    free(r->err);
    free(r->log);
    memset(r, 0, sizeof *r);
}

// Runs that must have succeeded.
#define ck_ok(r) ck_assert_msg((r).rc == 0, "train exited %d:\n%s", (r).rc, (r).err)

// stderr is exactly one line starting "tiertrain: ", and the run exited 2; when early, a
// refusal before any work, so the --log file was never created.
static void ck_refused(const run_t *r, const char *what, int early) {
    ck_assert_msg(r->rc == 2, "%s: exit %d (want 2), stderr:\n%s", what, r->rc, r->err);
    size_t len = strlen(r->err);
    ck_assert_msg(len > 0 && r->err[len - 1] == '\n' && strchr(r->err, '\n') == r->err + len - 1 &&
                      !strncmp(r->err, "tiertrain: ", 11),
                  "%s: want one line \"tiertrain: ...\", got:\n%s", what, r->err);
    ck_assert_msg(!early || r->log == NULL, "%s: a refused run left its --log behind", what);
}

// Losses of steps from..to and (when final) the final params_hash and val_loss at `to`
// of run r equal the reference's.
static void ck_same_steps(const run_t *ref, const run_t *r, int from, int to, int final, const char *what) {
    for (int k = from; k <= to; k++) {
        ck_assert_msg(ref->loss[k][0], "%s: the reference has no step %d", what, k);
        ck_assert_msg(!strcmp(ref->loss[k], r->loss[k]), "%s: step %d loss %s, reference %s", what, k,
                      r->loss[k][0] ? r->loss[k] : "(none)", ref->loss[k]);
    }
    if (!final) return;
    ck_assert_msg(!strcmp(ref->val[to], r->val[to]), "%s: val_loss at %d: %s, reference %s", what, to, r->val[to],
                  ref->val[to]);
    ck_assert_msg(ref->hash[0] && !strcmp(ref->hash, r->hash), "%s: params_hash %s, reference %s", what,
                  r->hash[0] ? r->hash : "(none)", ref->hash);
}

// Starts a (no --log) in the background, stdout and stderr into the work folder's
// spawn.out / spawn.err; it dies with this process.
static pid_t spawn(args_t *a, char *const *env) {
    a->v[a->n] = NULL;
    char o[1200], e[1200];
    snprintf(o, sizeof o, "%s/spawn.out", workdir());
    snprintf(e, sizeof e, "%s/spawn.err", workdir());
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int in = open("/dev/null", O_RDONLY);
        int fo = open(o, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(e, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || fo < 0 || fe < 0) _exit(127);
        dup2(in, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        for (int i = 0; env && env[i]; i++) putenv(env[i]);
        execv(a->v[0], a->v);
        _exit(127);
    }
    live_pid = pid;
    return pid;
}

// Waits up to ms for the spawned trainer: 1 with its wait status when it ended, else 0.
static int reap(pid_t pid, int ms, int *status) {
    for (int waited = 0;; waited += 2) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid) {
            live_pid = 0;
            return 1;
        }
        if (waited >= ms) return 0;
        msleep(2);
    }
}

static void kill_reap(pid_t pid) {
    int st;
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    live_pid = 0;
}

static char *spawn_output(const char *which) {
    char p[1200];
    snprintf(p, sizeof p, "%s/spawn.%s", workdir(), which);
    char *s = tu_slurp(p);
    return s ? s : strdup("");
}

// ---------------------------------------------------------------- resume is bit-exact

// --device cpu --threads 1 everywhere: no notice about a GPU on stderr (the refusals count
// its lines), and the bits do not depend on the thread count (test_train checks it) while
// on a loaded two-core box one thread per run is twice as fast.
// N = 5 steps in one run; the checkpoint after K = 2. Steps 1..K are warmup, so the K-step
// run's learning rates do not depend on its --steps; K+1..N decay over --steps N in the
// reference and in the resumed run alike. The eval at step N covers the data positions.
enum { N_STEPS = 5, K_STEP = 2 };
static const char *const base_std[] = {"--model", "tiny", "--batch", "2", "--seq", "16", "--device", "cpu",
                                       "--threads", "1", "--warmup", "2", "--eval-every", "5", "--eval-batches", "1",
                                       "--quiet", NULL};

// base_std without the model's flags (--model, --seq): what a resume needs no more
static const char *const base_bare[] = {"--batch", "2", "--device", "cpu", "--threads", "1", "--warmup", "2",
                                        "--eval-every", "5", "--eval-batches", "1", "--quiet", NULL};

typedef struct {
    const char *what;
    const char *base[8];   // every run of the case, the reference too
    const char *save[8];   // the run that saves at step K
    const char *resume[8]; // the run that resumes from it
    int bare;              // and once more from base_bare, without base: the model is the checkpoint's
} resume_case_t;

#define ALL_NVME "--params", "nvme", "--grads", "host", "--optimizer", "nvme"
static const resume_case_t resume_cases[] = {
    {"all resident", {NULL}, {NULL}, {NULL}, 0},
    {"params host, optimizer nvme", {NULL}, {"--params", "host", "--optimizer", "nvme", NULL},
     {"--params", "host", "--optimizer", "nvme", NULL}, 0},
    {"vertical schedule, accum 2", {"--schedule", "vertical", "--accum", "2", NULL}, {NULL}, {NULL}, 0},
    {"saved resident, resumed params nvme grads host optimizer nvme", {NULL}, {NULL}, {ALL_NVME, NULL}, 0},
    {"saved params nvme grads host optimizer nvme, resumed resident", {NULL}, {ALL_NVME, NULL}, {NULL}, 0},
    {"--save-dtype bf16 (the FP32 master travels in optimizer.safetensors)", {NULL}, {"--save-dtype", "bf16", NULL},
     {NULL}, 0},
    {"tied head, fp32", {"--tie", "--precision", "fp32", NULL}, {NULL}, {NULL}, 1},
    // the save reads a device home through its one staging buffer, not the two NVMe's take turns in
    {"saved --optimizer device --save-dtype bf16", {NULL}, {"--optimizer", "device", "--save-dtype", "bf16", NULL},
     {NULL}, 0},
    {"saved --optimizer nvme --io-verify --save-dtype bf16", {NULL},
     {"--params", "host", "--optimizer", "nvme", "--io-verify", "--save-dtype", "bf16", NULL}, {NULL}, 0},
    // the saved states of the cached chunks come from their entries (NVMe's are the first
    // update's: never written back); the resumed run's cache is filled from what the checkpoint
    // put on NVMe
    {"--optimizer-cache on both sides", {NULL},
     {"--params", "host", "--optimizer", "nvme", "--optimizer-cache", "1M", NULL},
     {"--params", "host", "--optimizer", "nvme", "--optimizer-cache", "1M", NULL}, 0},
};
#undef ALL_NVME
enum { NRESUME = sizeof resume_cases / sizeof resume_cases[0] };

START_TEST(resume_bit_exact) {
    const resume_case_t *c = &resume_cases[_i];
    char dir[1200], folder[1300], latest[1300];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    snprintf(folder, sizeof folder, "%s/step-%08d", dir, K_STEP);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    args_t *a = malloc(sizeof *a);

    train_args(a, base_std);
    args(a, c->base);
    argf(a, "--steps=%d", N_STEPS);
    run_t ref = run(a, NULL);
    ck_ok(ref);

    train_args(a, base_std);
    args(a, c->base);
    args(a, c->save);
    argf(a, "--steps=%d", K_STEP);
    argf(a, "--save=%s", dir);
    run_t sv = run(a, NULL);
    ck_ok(sv);
    ck_same_steps(&ref, &sv, 1, K_STEP, 0, c->what); // the first K steps did not depend on --steps
    ck_assert_msg(sv.ck[K_STEP][0], "%s: no checkpoint event at step %d:\n%s", c->what, K_STEP, sv.log);
    check_complete(folder, K_STEP, sv.ck[K_STEP]);
    char name[64];
    ck_assert(read_latest(dir, name, sizeof name));
    ck_assert_str_eq(name, "step-00000002");

    // the folder itself; for the first case also the --save directory and DIR/latest
    // and for a bare case, the folder once more without the model's flags (tiny's shape,
    // --seq, --tie, --precision): they come from the checkpoint, with the same bits
    const char *forms[] = {folder, dir, latest};
    const int nforms = _i == 0 ? 3 : 1;
    for (int f = 0; f < nforms + c->bare; f++) {
        const int bare = f == nforms;
        train_args(a, bare ? base_bare : base_std);
        if (!bare) args(a, c->base);
        args(a, c->resume);
        argf(a, "--steps=%d", N_STEPS);
        argf(a, "--resume=%s", bare ? folder : forms[f]);
        run_t r = run(a, NULL);
        char what[1800], said[1500];
        snprintf(what, sizeof what, "%s, --resume %s%s", c->what, bare ? folder : forms[f],
                 bare ? " without the model's flags" : "");
        ck_assert_msg(r.rc == 0, "%s: exit %d:\n%s", what, r.rc, r.err);
        if (bare)
            ck_assert_msg(strstr(r.out, "tiertrain train: model from --resume's checkpoint: L 2, C 64,") &&
                              strstr(r.out, "seq 16, tied,") && strstr(r.out, "fp32, seed"),
                          "%s: the configuration is not the checkpoint's:\n%s", what, r.out);
        snprintf(said, sizeof said, "resumed: %s at step %d (params_hash %s,", folder, K_STEP, sv.ck[K_STEP]);
        ck_assert_msg(strstr(r.out, said), "%s: want \"%s\" in stdout:\n%s", what, said, r.out);
        for (int k = 1; k <= K_STEP; k++) ck_assert_msg(!r.loss[k][0], "%s: step %d ran again", what, k);
        ck_same_steps(&ref, &r, K_STEP + 1, N_STEPS, 1, what);
        run_free(&r);
    }
    run_free(&ref);
    run_free(&sv);
    free(a);
}
END_TEST

// A save between steps with the optimizer on NVMe, while the last update has queued the next
// one's first reads into the staging the save reads through: the run keeps the reference's
// bits, and resuming from that save gives them too.
START_TEST(save_between_updates) {
    static const char *const nvme[] = {"--params", "host", "--optimizer", "nvme", NULL};
    char dir[1200], folder[1300];
    snprintf(dir, sizeof dir, "%s/mid", tmp);
    snprintf(folder, sizeof folder, "%s/step-%08d", dir, K_STEP);
    args_t *a = malloc(sizeof *a);
    train_args(a, base_std);
    args(a, nvme);
    argf(a, "--steps=%d", N_STEPS);
    run_t ref = run(a, NULL);
    ck_ok(ref);
    train_args(a, base_std);
    args(a, nvme);
    argf(a, "--steps=%d", N_STEPS);
    argf(a, "--save=%s", dir);
    argf(a, "--save-every=%d", K_STEP);
    run_t sv = run(a, NULL);
    ck_ok(sv);
    ck_same_steps(&ref, &sv, 1, N_STEPS, 1, "saving every 2 steps");
    train_args(a, base_std);
    args(a, nvme);
    argf(a, "--steps=%d", N_STEPS);
    argf(a, "--resume=%s", folder);
    run_t r = run(a, NULL);
    ck_ok(r);
    ck_same_steps(&ref, &r, K_STEP + 1, N_STEPS, 1, "resumed from the save at step 2 of 5");
    run_free(&r);
    run_free(&sv);
    run_free(&ref);
    free(a);
}
END_TEST

// A resumed run takes the checkpoint's training recipe where no flag gives it — the data, the
// batch, the schedule to its --steps and AdamW's settings, none of them the defaults here — so
// `--resume FOLDER` alone continues the saved run bit for bit. A flag given with another value
// is said in one notice; data that moved is refused, naming it.
START_TEST(resume_takes_recipe) {
    static const char *const recipe[] = {"--batch", "3", "--accum", "2", "--lr", "3e-3", "--min-lr", "2e-4",
                                         "--warmup", "2", "--beta1", "0.8", "--beta2", "0.99", "--eps", "1e-6",
                                         "--wd", "0.02", "--clip", "0.5", "--steps", "5", NULL};
    static const char *const run_only[] = {"--device", "cpu", "--threads", "1", "--eval-every", "5",
                                           "--eval-batches", "1", "--quiet", NULL};
    char data[1200], moved[1200], dir[1200], folder[1300], want[4096];
    snprintf(data, sizeof data, "%s/text.txt", tmp);
    snprintf(moved, sizeof moved, "%s/moved.txt", tmp);
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    snprintf(folder, sizeof folder, "%s/step-%08d", dir, K_STEP);
    FILE *f = fopen(data, "w");
    ck_assert(f);
    for (int i = 0; i < 400; i++) fprintf(f, "line %d of the data a resumed run must find again.\n", i * 7919 % 1000);
    ck_assert_int_eq(fclose(f), 0);
    args_t *a = malloc(sizeof *a);

    train_args(a, run_only);
    arg(a, "--model=tiny");
    argf(a, "--data=%s", data);
    args(a, recipe);
    run_t ref = run(a, NULL);
    ck_ok(ref);
    train_args(a, run_only);
    arg(a, "--model=tiny");
    argf(a, "--data=%s", data);
    args(a, recipe);
    argf(a, "--save=%s", dir);
    argf(a, "--save-every=%d", K_STEP);
    run_t sv = run(a, NULL);
    ck_ok(sv);
    ck_same_steps(&ref, &sv, 1, N_STEPS, 1, "saving every 2 steps");

    train_args(a, run_only);
    argf(a, "--resume=%s", folder);
    run_t r = run(a, NULL);
    ck_ok(r);
    ck_same_steps(&ref, &r, K_STEP + 1, N_STEPS, 1, "--resume alone");
    ck_assert_msg(strstr(r.out, "done: steps 3-5 of 5, "), "--resume alone: no done line of its steps:\n%s", r.out);
    ck_assert_msg(!strstr(r.err, "not the settings"), "--resume alone: a notice of other settings:\n%s", r.err);
    run_free(&r);

    // two flags with other values: one notice naming both, in the flag table's order
    static const char *const other[] = {"--wd", "0.05", "--steps", "6", NULL};
    train_args(a, run_only);
    args(a, other);
    argf(a, "--resume=%s", folder);
    r = run(a, NULL);
    ck_ok(r);
    snprintf(want, sizeof want, "tiertrain: --resume %s: this run's --steps 6 (the checkpoint's 5), --wd 0.05 (the "
             "checkpoint's 0.02): not the settings of the run that saved it (without these flags the run takes the "
             "checkpoint's)\n", folder);
    ck_assert_msg(strstr(r.err, want), "want the line\n%sin stderr:\n%s", want, r.err);
    ck_assert_msg(strcmp(r.hash, ref.hash) != 0, "--wd 0.05: the saved run's params_hash %s all the same", r.hash);
    run_free(&r);

    // the data moved: refused, naming it; given where it is now, the same bits (and a notice:
    // the path is not the one the checkpoint names)
    ck_assert_int_eq(rename(data, moved), 0);
    train_args(a, run_only);
    argf(a, "--resume=%s", folder);
    r = run(a, NULL);
    ck_refused(&r, "the data moved", 1);
    snprintf(want, sizeof want, "tiertrain: --resume %s: the data it was trained on, %s: No such file or directory "
             "(give --data FILE: that file where it is now, or other data to go on with)\n", folder, data);
    ck_assert_str_eq(r.err, want);
    run_free(&r);
    train_args(a, run_only);
    argf(a, "--data=%s", moved);
    argf(a, "--resume=%s", folder);
    r = run(a, NULL);
    ck_ok(r);
    ck_same_steps(&ref, &r, K_STEP + 1, N_STEPS, 1, "--resume with the moved data");
    snprintf(want, sizeof want, "this run's --data %s (the checkpoint's %s): not the settings", moved, data);
    ck_assert_msg(strstr(r.err, want), "want \"%s\" in stderr:\n%s", want, r.err);
    run_free(&r);

    // data too short for the saved position (768 tokens into the training split): the line
    // names the split, the position and what to resume with
    char shortd[1200];
    snprintf(shortd, sizeof shortd, "%s/short.txt", tmp);
    f = fopen(shortd, "w");
    ck_assert(f);
    for (int i = 0; i < 900; i++) fputc('a' + i % 26, f);
    ck_assert_int_eq(fclose(f), 0);
    train_args(a, run_only);
    argf(a, "--data=%s", shortd);
    argf(a, "--resume=%s", folder);
    r = run(a, NULL);
    ck_assert_msg(r.rc == 2, "exit %d (want 2):\n%s", r.rc, r.err);
    snprintf(want, sizeof want, "tiertrain: --resume %s: %s/state.json: its training position 768 leaves no room for a "
             "batch in this run's training tokens (", folder, folder);
    char tail[1500];
    snprintf(tail, sizeof tail, "): resume with the --data and --batch it was saved with (%s, --batch 3)\n", data);
    ck_assert_msg(!strncmp(r.err, want, strlen(want)) && strstr(r.err, tail), "want \"%s...%s\", got:\n%s", want,
                  tail, r.err);
    run_free(&r);
    run_free(&sv);
    run_free(&ref);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- refusals

// The checkpoint the refusals and bad files resume from: tiny at --seq 16, bf16, step 2.
// Every step is warmup (--warmup 64 > any --steps in this file), so the learning rates, and
// the params_hash at step k, do not depend on --steps: one reference serves every run.
static const char *const base_crash[] = {"--model", "tiny", "--batch", "2", "--seq", "16", "--device", "cpu",
                                         "--threads", "1", "--warmup", "64", "--eval-every", "0", "--quiet", NULL};

static run_t try_resume(args_t *a, const char *resume, const char *const *extra, int steps) {
    train_args(a, base_crash);
    args(a, extra);
    argf(a, "--steps=%d", steps);
    argf(a, "--resume=%s", resume);
    return run(a, NULL);
}

// One refusal: exit 2, one line, and exactly the line want.
static void ck_refusal(args_t *a, const char *resume, const char *const *extra, int steps, const char *want) {
    run_t r = try_resume(a, resume, extra, steps);
    ck_refused(&r, want, 1);
    ck_assert_str_eq(r.err, want);
    run_free(&r);
}

// ck_refusal's run as `tiertrain plan`, which reads --resume as train does: the same line.
static void ck_plan_refusal(args_t *a, const char *resume, const char *const *extra, int steps, const char *want) {
    train_args(a, base_crash);
    a->v[1] = "plan";
    args(a, extra);
    argf(a, "--steps=%d", steps);
    argf(a, "--resume=%s", resume);
    run_t r = run(a, NULL);
    ck_refused(&r, want, 1);
    ck_assert_str_eq(r.err, want);
    run_free(&r);
}

// A fresh run (no --resume) saving into dir, which holds checkpoints up to newest: refused
// before any work with the one line that says which --resume continues them.
static void fresh_save_refused(args_t *a, const char *dir, const char *newest, const char *resume) {
    char want[4096];
    train_args(a, base_crash);
    arg(a, "--steps=3");
    argf(a, "--save=%s", dir);
    run_t r = run(a, NULL);
    ck_refused(&r, "--save over another run's checkpoints", 1);
    snprintf(want, sizeof want, "tiertrain: --save %s: holds another run's checkpoints (newest %s): continue them "
             "(--resume %s), or give a new --save directory\n", dir, newest, resume);
    ck_assert_str_eq(r.err, want);
    run_free(&r);
}

START_TEST(refusals) {
    args_t *a = malloc(sizeof *a);
    char dir[1200], folder[1300], want[4096];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    snprintf(folder, sizeof folder, "%s/step-00000002", dir);
    train_args(a, base_crash);
    argf(a, "--save=%s", dir);
    arg(a, "--steps=2");
    run_t sv = run(a, NULL);
    ck_ok(sv);
    run_free(&sv);

    // another model (tiny is L 2, C 64, NH 4, NKV 2): the first field that differs, both values
    static const struct { const char *flags[3]; const char *field; int ck, run; } shape[] = {
        {{"--dim", "32", NULL}, "--dim", 64, 32},
        {{"--layers", "3", NULL}, "--layers", 2, 3},
        {{"--seq", "32", NULL}, "--seq", 16, 32},
        {{"--kv-heads", "4", NULL}, "--kv-heads", 2, 4},
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        snprintf(want, sizeof want,
                 "tiertrain: --resume %s: the checkpoint has %s %d, this run %s %d (without %s and --model, --resume "
                 "takes the checkpoint's)\n",
                 folder, shape[i].field, shape[i].ck, shape[i].field, shape[i].run, shape[i].field);
        ck_refusal(a, dir, shape[i].flags, 3, want);
        ck_plan_refusal(a, dir, shape[i].flags, 3, want);
    }
    const char *tie[] = {"--tie", NULL};
    snprintf(want, sizeof want,
             "tiertrain: --resume %s: the checkpoint's LM head is untied, this run's is tied (drop --tie)\n", folder);
    ck_refusal(a, folder, tie, 3, want);
    const char *fp32[] = {"--precision", "fp32", NULL};
    run_t r = try_resume(a, folder, fp32, 3);
    ck_refused(&r, "--precision fp32", 1);
    snprintf(want, sizeof want, "tiertrain: --resume %s: the checkpoint was trained with --precision bf16, this run "
             "--precision fp32", folder);
    ck_assert_msg(!strncmp(r.err, want, strlen(want)), "want %s, got %s", want, r.err);
    run_free(&r);

    // not a checkpoint: an empty folder; a path that does not exist
    char empty[1200], missing[1200];
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    snprintf(missing, sizeof missing, "%s/missing", tmp);
    ck_assert_int_eq(mkdir(empty, 0755), 0);
    snprintf(want, sizeof want, "tiertrain: --resume %s: not a checkpoint (no state.json) and no readable latest "
             "file (give a checkpoint folder, a --save directory, or DIR/latest)\n", empty);
    ck_refusal(a, empty, NULL, 3, want);
    snprintf(want, sizeof want, "tiertrain: --resume %s: No such file or directory (give a checkpoint folder, a "
             "--save directory, or DIR/latest)\n", missing);
    ck_refusal(a, missing, NULL, 3, want);

    // latest names a folder that is not there (given as DIR and as DIR/latest); latest
    // naming something outside DIR
    char latest[1300];
    snprintf(latest, sizeof latest, "%s/latest", empty);
    write_file(latest, "step-00000099\n");
    snprintf(want, sizeof want, "tiertrain: --resume %s: %s names %s/step-00000099, which has no state.json (an "
             "incomplete or removed checkpoint)\n", empty, latest, empty);
    ck_refusal(a, empty, NULL, 3, want);
    snprintf(want, sizeof want, "tiertrain: --resume %s: %s names %s/step-00000099, which has no state.json (an "
             "incomplete or removed checkpoint)\n", latest, latest, empty);
    ck_refusal(a, latest, NULL, 3, want);
    write_file(latest, "../ck/step-00000002\n");
    snprintf(want, sizeof want, "tiertrain: --resume %s: %s does not name a checkpoint folder (expected one line "
             "like step-00000100)\n", empty, latest);
    ck_refusal(a, empty, NULL, 3, want);

    // nothing left to do
    for (int steps = 1; steps <= 2; steps++) {
        snprintf(want, sizeof want, "tiertrain: --resume %s: the checkpoint is at step 2 and --steps is %d: nothing "
                 "left to do (raise --steps)\n", dir, steps);
        ck_refusal(a, dir, NULL, steps, want);
        ck_plan_refusal(a, dir, NULL, steps, want);
    }
    // a folder that does not exist, as plan reads it too
    snprintf(want, sizeof want, "tiertrain: --resume %s: No such file or directory (give a checkpoint folder, a --save "
             "directory, or DIR/latest)\n", missing);
    ck_plan_refusal(a, missing, NULL, 3, want);

    // a fresh run saving where another run's checkpoints are: refused before any work
    fresh_save_refused(a, dir, folder, dir);

    // --save-every without --save
    train_args(a, base_crash);
    arg(a, "--save-every=1");
    r = run(a, NULL);
    ck_refused(&r, "--save-every without --save", 1);
    ck_assert_str_eq(r.err, "tiertrain: --save-every 1: needs --save DIR (where to put the checkpoints)\n");
    run_free(&r);

    // after all that, the checkpoint still resumes
    r = try_resume(a, dir, NULL, 3);
    ck_ok(r);
    run_free(&r);

    // killed between a folder's rename and latest's write: no latest, so --resume DIR would be
    // refused; the refusal of a fresh run names the folder itself, and following it works
    char latest_file[1300];
    snprintf(latest_file, sizeof latest_file, "%s/latest", dir);
    ck_assert_int_eq(unlink(latest_file), 0);
    fresh_save_refused(a, dir, folder, folder);
    train_args(a, base_crash);
    arg(a, "--steps=3");
    argf(a, "--save=%s", dir);
    argf(a, "--resume=%s", folder);
    r = run(a, NULL);
    ck_ok(r);
    run_free(&r);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- a scan of safetensors headers

// Independent of src/safetensors.c and src/json.c: the 8-byte little-endian header length,
// then a JSON object of "name": {"dtype", "shape", "data_offsets"} and an optional
// "__metadata__" of strings, padded with spaces.
typedef struct {
    char name[160], dtype[8];
    int ndim;
    long long shape[4], begin, end;
} hdr_tensor_t;

typedef struct {
    hdr_tensor_t t[256];
    int n;
    unsigned long long hlen;
    long long fsize;
} hdr_t;

typedef struct { const char *p, *end; } cur_t;

static void ws(cur_t *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\t' || *c->p == '\r')) c->p++;
}

static int lit(cur_t *c, char ch) {
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int str(cur_t *c, char *out, size_t cap) {
    if (!lit(c, '"')) return 0;
    size_t n = 0;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p == '\\' || n + 1 >= cap) return 0; // no escapes in these names
        out[n++] = *c->p++;
    }
    if (c->p == c->end) return 0;
    c->p++;
    out[n] = 0;
    return 1;
}

static int num(cur_t *c, long long *v) {
    ws(c);
    if (c->p == c->end || *c->p < '0' || *c->p > '9') return 0;
    *v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') *v = *v * 10 + (*c->p++ - '0');
    return 1;
}

static int tensor_obj(cur_t *c, hdr_tensor_t *t) {
    int have = 0;
    if (!lit(c, '{')) return 0;
    do {
        char k[32];
        if (!str(c, k, sizeof k) || !lit(c, ':')) return 0;
        if (!strcmp(k, "dtype")) {
            if (!str(c, t->dtype, sizeof t->dtype)) return 0;
            have |= 1;
        } else if (!strcmp(k, "shape")) {
            if (!lit(c, '[')) return 0;
            t->ndim = 0;
            if (!lit(c, ']')) {
                do {
                    if (t->ndim == 4 || !num(c, &t->shape[t->ndim++])) return 0;
                } while (lit(c, ','));
                if (!lit(c, ']')) return 0;
            }
            have |= 2;
        } else if (!strcmp(k, "data_offsets")) {
            if (!lit(c, '[') || !num(c, &t->begin) || !lit(c, ',') || !num(c, &t->end) || !lit(c, ']')) return 0;
            have |= 4;
        } else {
            return 0;
        }
    } while (lit(c, ','));
    return lit(c, '}') && have == 7;
}

// Fills h from path's header; NULL, or what is wrong.
static const char *hdr_scan(const char *path, hdr_t *h) {
    memset(h, 0, sizeof *h);
    FILE *f = fopen(path, "rb");
    if (!f) return "cannot open";
    unsigned char b[8];
    const char *why = NULL;
    char *text = NULL;
    fseek(f, 0, SEEK_END);
    h->fsize = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (fread(b, 1, 8, f) != 8) { why = "shorter than 8 bytes"; goto out; }
    for (int i = 7; i >= 0; i--) h->hlen = h->hlen << 8 | b[i];
    if (h->hlen > (unsigned long long)h->fsize - 8) { why = "header length past the end"; goto out; }
    text = malloc(h->hlen + 1);
    if (fread(text, 1, h->hlen, f) != h->hlen) { why = "short read"; goto out; }
    cur_t c = {text, text + h->hlen};
    why = "header is not an object of tensors";
    if (!lit(&c, '{')) goto out;
    if (!lit(&c, '}')) {
        do {
            char key[160];
            if (!str(&c, key, sizeof key) || !lit(&c, ':')) goto out;
            if (!strcmp(key, "__metadata__")) {
                if (!lit(&c, '{')) goto out;
                if (!lit(&c, '}')) {
                    do {
                        char k[256], v[256];
                        if (!str(&c, k, sizeof k) || !lit(&c, ':') || !str(&c, v, sizeof v)) goto out;
                    } while (lit(&c, ','));
                    if (!lit(&c, '}')) goto out;
                }
                continue;
            }
            if (h->n == 256) goto out;
            hdr_tensor_t *t = &h->t[h->n++];
            snprintf(t->name, sizeof t->name, "%s", key);
            if (!tensor_obj(&c, t)) goto out;
        } while (lit(&c, ','));
        if (!lit(&c, '}')) goto out;
    }
    ws(&c);
    why = c.p == c.end ? NULL : "bytes after the header object";
out:
    free(text);
    fclose(f);
    return why;
}

static const hdr_tensor_t *hdr_find(const hdr_t *h, const char *name) {
    const hdr_tensor_t *found = NULL;
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->t[i].name, name)) {
            ck_assert_msg(!found, "tensor '%s' declared twice", name);
            found = &h->t[i];
        }
    return found;
}

// ---------------------------------------------------------------- bad files

static run_t good_ckpt, good_bf16; // the unchecked fixture's save runs (only their rc matters)

static void good_setup(void) {
    fix_setup();
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    argf(a, "--save=%s/ck", fixdir);
    arg(a, "--steps=2");
    good_ckpt = run(a, NULL);
    train_args(a, base_crash);
    argf(a, "--save=%s/ckb", fixdir);
    arg(a, "--steps=2");
    arg(a, "--save-dtype=bf16");
    good_bf16 = run(a, NULL);
    free(a);
}

static void good_teardown(void) {
    run_free(&good_ckpt);
    run_free(&good_bf16);
    fix_teardown();
}

// Rewrites the 8 hex digits of "crc32c:<name>" in a safetensors header to the CRC-32C of
// the tensor's bytes as they are now (so a test's edit passes the checksum and reaches the
// check behind it).
static void fix_tensor_crc(const char *path, const char *name) {
    hdr_t *h = malloc(sizeof *h);
    const char *why = hdr_scan(path, h);
    ck_assert_msg(!why, "%s: %s", path, why);
    const hdr_tensor_t *t = hdr_find(h, name);
    ck_assert_msg(t != NULL, "%s: no tensor '%s'", path, name);
    FILE *f = fopen(path, "r+b");
    ck_assert(f);
    char *hdr = malloc(h->hlen + 1), *data = malloc((size_t)(t->end - t->begin) + 1);
    ck_assert(fseek(f, 8, SEEK_SET) == 0 && fread(hdr, 1, h->hlen, f) == h->hlen);
    hdr[h->hlen] = 0;
    ck_assert(fseek(f, (long)(8 + h->hlen + (unsigned long long)t->begin), SEEK_SET) == 0);
    ck_assert(fread(data, 1, (size_t)(t->end - t->begin), f) == (size_t)(t->end - t->begin));
    char key[256], hex[9];
    snprintf(key, sizeof key, "\"crc32c:%s\":\"", name);
    char *at = strstr(hdr, key);
    ck_assert_msg(at != NULL, "%s: no %s in the header", path, key);
    snprintf(hex, sizeof hex, "%08x", crc32c(0, data, (size_t)(t->end - t->begin)));
    ck_assert(fseek(f, (long)(8 + (at - hdr) + strlen(key)), SEEK_SET) == 0 && fwrite(hex, 1, 8, f) == 8);
    ck_assert_int_eq(fclose(f), 0);
    free(hdr);
    free(data);
    free(h);
}

// state.json's "state_crc32c", recomputed over the bytes before it (after a test's edit).
static void fix_state_crc(const char *path) {
    char *s = tu_slurp(path);
    ck_assert_ptr_nonnull(s);
    char *at = strstr(s, "\"state_crc32c\": \"");
    ck_assert_msg(at != NULL, "%s: no state_crc32c in\n%s", path, s);
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", crc32c(0, s, (size_t)(at - s)));
    memcpy(at + strlen("\"state_crc32c\": \""), hex, 8);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(s, f) >= 0 && fclose(f) == 0);
    free(s);
}

// Flips one bit of byte `byte` of tensor `name`'s data.
static void flip_tensor_byte(const char *path, const char *name, long long byte) {
    hdr_t *h = malloc(sizeof *h);
    const char *why = hdr_scan(path, h);
    ck_assert_msg(!why, "%s: %s", path, why);
    const hdr_tensor_t *t = hdr_find(h, name);
    ck_assert_msg(t && t->begin + byte < t->end, "%s: no tensor '%s' with byte %lld", path, name, byte);
    int fd = open(path, O_RDWR);
    unsigned char b;
    off_t at = (off_t)(8 + h->hlen + (unsigned long long)(t->begin + byte));
    ck_assert(fd >= 0 && pread(fd, &b, 1, at) == 1);
    b ^= 0x40; // an exponent bit of a little-endian F32 or BF16 value at an odd byte
    ck_assert(pwrite(fd, &b, 1, at) == 1);
    close(fd);
    free(h);
}

// Overwrites element `elem` of F32 tensor `name` in a safetensors file with value.
static void poke_float(const char *path, const char *name, long long elem, float value) {
    hdr_t *h = malloc(sizeof *h);
    const char *why = hdr_scan(path, h);
    ck_assert_msg(!why, "%s: %s", path, why);
    const hdr_tensor_t *t = hdr_find(h, name);
    ck_assert_msg(t && !strcmp(t->dtype, "F32") && t->begin + 4 * (elem + 1) <= t->end, "%s: no F32 '%s'", path, name);
    int fd = open(path, O_WRONLY);
    ck_assert(fd >= 0);
    ck_assert(pwrite(fd, &value, 4, (off_t)(8 + h->hlen + (unsigned long long)(t->begin + 4 * elem))) == 4);
    close(fd);
    free(h);
}

static void set_u64_le(const char *path, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    int fd = open(path, O_WRONLY);
    ck_assert(fd >= 0 && pwrite(fd, b, 8, 0) == 8);
    close(fd);
}

// Replaces the first `from` in a text file with `to`.
static void edit_text(const char *path, const char *from, const char *to) {
    char *s = tu_slurp(path);
    ck_assert_ptr_nonnull(s);
    char *p = strstr(s, from);
    ck_assert_msg(p != NULL, "%s: no '%s' in\n%s", path, from, s);
    FILE *f = fopen(path, "w");
    ck_assert(f);
    fprintf(f, "%.*s%s%s", (int)(p - s), s, to, p + strlen(from));
    ck_assert_int_eq(fclose(f), 0);
    free(s);
}

// Replaces the first `from` in a (binary) file with `to`, of the same length, in place.
static void edit_bytes(const char *path, const char *from, const char *to) {
    ck_assert(strlen(from) == strlen(to));
    FILE *f = fopen(path, "r+b");
    ck_assert(f);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    char *at = memmem(buf, n, from, strlen(from));
    ck_assert_msg(at != NULL, "%s: no '%s' in its first %zu bytes", path, from, n);
    ck_assert(fseek(f, (long)(at - buf), SEEK_SET) == 0 && fwrite(to, 1, strlen(to), f) == strlen(to));
    ck_assert_int_eq(fclose(f), 0);
}

enum { BAD_TRUNCATED, BAD_STUB, BAD_HLEN, BAD_FORMAT, BAD_VERSION, BAD_NO_STEP, BAD_NAN_MODEL, BAD_NAN_OPTIMIZER,
       BAD_NO_CONFIG, BAD_STATE_EDIT, BAD_CONFIG_EDIT, BAD_HASH, BAD_FLIP_MODEL, BAD_FLIP_OPTIMIZER,
       BAD_FLIP_BF16_MODEL, BAD_FLIP_BF16_MASTER, BAD_NO_CRC, BAD_MODEL_DIR, BAD_SHAPE_SWAP, BAD_BETA1, BAD_NORM_EPS,
       NBAD };

// Each corruption of a copy of the step-2 checkpoint (the --save-dtype bf16 one for the
// BF16 cases): resume exits 2 with one line that starts "tiertrain: --resume B: B/<file>: "
// and says what is wrong. Edits that a checksum would catch first get their checksum
// recomputed where the case is about the check behind it (the NaN, the missing key).
START_TEST(bad_file) {
    ck_assert_msg(good_ckpt.rc == 0, "the fixture's save failed (%d):\n%s", good_ckpt.rc, good_ckpt.err);
    ck_assert_msg(good_bf16.rc == 0, "the fixture's bf16 save failed (%d):\n%s", good_bf16.rc, good_bf16.err);
    char good[1200], bad[1200], file[1300], want[2048];
    const int bf16 = _i == BAD_FLIP_BF16_MODEL || _i == BAD_FLIP_BF16_MASTER;
    snprintf(good, sizeof good, "%s/%s/step-00000002", fixdir, bf16 ? "ckb" : "ck");
    snprintf(bad, sizeof bad, "%s/bad", tmp);
    copy_folder(good, bad);
    const char *name = NULL, *says = NULL;
    struct stat st;
    switch (_i) {
    case BAD_TRUNCATED: // the last tensor's data is cut short
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert_int_eq(truncate(file, st.st_size - 1000), 0);
        says = "run past the end of the data section";
        break;
    case BAD_STUB: // less than the 8-byte length
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        ck_assert_int_eq(truncate(file, 5), 0);
        says = "5 bytes, too small for a safetensors file";
        break;
    case BAD_HLEN: // the header length says more bytes than the file has
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        ck_assert_int_eq(stat(file, &st), 0);
        set_u64_le(file, (uint64_t)st.st_size + 4096);
        says = "runs past the end of the file";
        break;
    case BAD_FORMAT:
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"tiertrain-checkpoint\"", "\"some-other-checkpoint\"");
        says = "format 'some-other-checkpoint' is not a tiertrain checkpoint (expected 'tiertrain-checkpoint')\n";
        break;
    case BAD_VERSION:
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"version\": 2,", "\"version\": 3,");
        says = "checkpoint version 3, this tiertrain reads versions 1 to 2\n";
        break;
    case BAD_NO_STEP:
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"step\": 2,", "");
        fix_state_crc(file);
        says = "missing key 'step'";
        break;
    case BAD_BETA1: // values no flag takes, with the checksum made to match: refused as the flags would
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"beta1\": 0.90000000000000002", "\"beta1\": 2");
        fix_state_crc(file);
        says = "the training settings are out of range (lr 0.001, min_lr 0.0001, beta1 2, beta2 0.95, eps 1e-08, wd "
               "0.1, clip 1)\n";
        break;
    case BAD_NORM_EPS:
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"norm_eps\": 1.0000000000000001e-05", "\"norm_eps\": 5");
        fix_state_crc(file);
        says = "the model's rope_theta 10000 or norm_eps 5 is out of range (accepted: rope_theta > 0, 0 < norm_eps < 1, "
               "as the flags take them)\n";
        break;
    case BAD_NAN_MODEL:
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        poke_float(file, "model.layers.1.mlp.up_proj.weight", 7, NAN);
        fix_tensor_crc(file, "model.layers.1.mlp.up_proj.weight");
        says = "'model.layers.1.mlp.up_proj.weight'";
        break;
    case BAD_NAN_OPTIMIZER:
        name = "optimizer.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        poke_float(file, "model.layers.0.self_attn.k_proj.weight.exp_avg", 3, NAN);
        fix_tensor_crc(file, "model.layers.0.self_attn.k_proj.weight.exp_avg");
        says = "'model.layers.0.self_attn.k_proj.weight";
        break;
    case BAD_STATE_EDIT: // a digit changed: the step, silently, without the checksum
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"step\": 2,", "\"step\": 1,");
        says = "state.json: fails its CRC-32C check (stored ";
        break;
    case BAD_CONFIG_EDIT:
        name = "config.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_text(file, "\"silu\"", "\"gelu\"");
        says = "config.json: fails its CRC-32C check (state.json has ";
        break;
    case BAD_HASH: // every file intact, but state.json vouches for other weights
        name = "state.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        char *st_text = tu_slurp(file), *ph = strstr(st_text, "\"params_hash\": \"");
        ck_assert_ptr_nonnull(ph);
        char other[64];
        snprintf(other, sizeof other, "%.34s", ph);
        other[31] = other[31] == '0' ? '1' : '0'; // the last hex digit
        edit_text(file, (snprintf(want, sizeof want, "%.34s", ph), want), other);
        free(st_text);
        fix_state_crc(file);
        says = "but the weights loaded hash to ";
        break;
    case BAD_FLIP_MODEL:
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        flip_tensor_byte(file, "model.layers.1.self_attn.v_proj.weight", 4 * 100 + 3);
        says = "tensor 'model.layers.1.self_attn.v_proj.weight' fails its CRC-32C check (stored ";
        break;
    case BAD_FLIP_OPTIMIZER:
        name = "optimizer.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        flip_tensor_byte(file, "model.layers.0.mlp.down_proj.weight.exp_avg_sq", 4 * 17 + 3);
        says = "tensor 'model.layers.0.mlp.down_proj.weight.exp_avg_sq' fails its CRC-32C check (stored ";
        break;
    case BAD_FLIP_BF16_MODEL: // the BF16 weights a resume does not load (it takes the FP32 master)
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        flip_tensor_byte(file, "model.norm.weight", 2 * 5 + 1);
        says = "tensor 'model.norm.weight' fails its CRC-32C check (stored ";
        break;
    case BAD_FLIP_BF16_MASTER:
        name = "optimizer.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        flip_tensor_byte(file, "model.layers.1.input_layernorm.weight.master", 4 * 2 + 3);
        says = "tensor 'model.layers.1.input_layernorm.weight.master' fails its CRC-32C check (stored ";
        break;
    case BAD_NO_CRC: // the checksum's key renamed (same length): the tensor is left without one
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_bytes(file, "\"crc32c:model.norm.weight\"", "\"crc32x:model.norm.weight\"");
        says = "tensor 'model.norm.weight' has no crc32c entry in __metadata__";
        break;
    case BAD_MODEL_DIR: // a folder where the file should be: bad input (exit 2), not a failure at run time
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        ck_assert_int_eq(unlink(file), 0);
        ck_assert_int_eq(mkdir(file, 0755), 0);
        says = "not a regular file";
        break;
    case BAD_SHAPE_SWAP: // the first k_proj's dimensions swapped: the same bytes, another shape; both are named
        name = "model.safetensors";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        edit_bytes(file, "\"shape\":[32,64]", "\"shape\":[64,32]");
        says = "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [64, 32], this model's is [32, 64] (a "
               "checkpoint of another model?)\n";
        break;
    case BAD_NO_CONFIG:
        name = "config.json";
        snprintf(file, sizeof file, "%s/%s", bad, name);
        ck_assert_int_eq(unlink(file), 0);
        says = "No such file or directory\n";
        break;
    }
    args_t *a = malloc(sizeof *a);
    run_t r = try_resume(a, bad, NULL, 3);
    ck_refused(&r, name, 1); // found while loading: the --log file this run created is gone again
    spf(want, sizeof want, "tiertrain: --resume %s: %s/%s: ", bad, bad, name);
    ck_assert_msg(!strncmp(r.err, want, strlen(want)), "want the line to start \"%s\", got:\n%s", want, r.err);
    ck_assert_msg(strstr(r.err, says), "want \"%s\" in:\n%s", says, r.err);
    if (_i == BAD_NAN_MODEL || _i == BAD_NAN_OPTIMIZER)
        ck_assert_msg(strstr(r.err, "non-finite"), "want \"non-finite\" in:\n%s", r.err);
    run_free(&r);
    free(a);
}
END_TEST

// A version-1 checkpoint (saved before checksums) still resumes, with one notice saying it
// is loaded unverified; the same folder as version 2 resumes without one, to the same bits.
// Bytes of a whole file (malloc'd, *n its length), NULL when it cannot be read.
static char *file_bytes(const char *path, size_t *n) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    char *b = malloc((size_t)st.st_size + 1);
    FILE *f = fopen(path, "rb");
    ck_assert(b && f);
    *n = fread(b, 1, (size_t)st.st_size, f);
    fclose(f);
    return b;
}

// A run's outputs never cost its inputs or an earlier run's files: --log inside the folder
// --resume reads is refused before anything is opened, the checkpoint left byte for byte; and
// a refusal found while loading leaves an earlier run's log at the --log path as it was.
START_TEST(outputs_spare_inputs) {
    ck_assert_msg(good_ckpt.rc == 0, "the fixture's save failed (%d):\n%s", good_ckpt.rc, good_ckpt.err);
    char good[1200], ck[1200], file[1300], log[1300], want[4096];
    snprintf(good, sizeof good, "%s/ck/step-00000002", fixdir);
    snprintf(ck, sizeof ck, "%s/spare", tmp);
    copy_folder(good, ck);
    spf(file, sizeof file, "%s/model.safetensors", ck);
    size_t n0, n1;
    char *before = file_bytes(file, &n0);
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    args(a, (const char *[]){"--steps=3", "--resume", ck, "--log", file, NULL});
    a->v[a->n] = NULL;
    run_t r = {0};
    r.rc = tu_run(a->v, NULL, &r.out, &r.err);
    spf(want, sizeof want, "tiertrain: --log %s: lies inside --resume's checkpoint %s, which the run reads (choose a "
        "path outside it)\n", file, ck);
    ck_refused(&r, "--log in the checkpoint", 0);
    ck_assert_str_eq(r.err, want);
    char *after = file_bytes(file, &n1);
    ck_assert_msg(after && n1 == n0 && memcmp(before, after, n0) == 0, "%s changed under a refused run", file);
    free(before);
    free(after);
    run_free(&r);

    // --save as the checkpoint folder itself, or inside it: refused, the folder left as it was
    char nested[1300];
    spf(nested, sizeof nested, "%s/more", ck);
    for (int in = 0; in < 2; in++) {
        const char *save = in ? nested : ck;
        train_args(a, base_crash);
        args(a, (const char *[]){"--steps=3", "--resume", ck, "--save", save, NULL});
        a->v[a->n] = NULL;
        r.rc = tu_run(a->v, NULL, &r.out, &r.err);
        spf(want, sizeof want, "tiertrain: --save %s: %s --resume's checkpoint %s, a folder of one step's files (give "
            "the --save directory it came from, or a new one)\n", save, in ? "lies inside" : "is", ck);
        ck_refused(&r, "--save in the checkpoint", 0);
        ck_assert_str_eq(r.err, want);
        run_free(&r);
    }
    spf(file, sizeof file, "%s/latest", ck);
    ck_assert_msg(!exists(nested) && !exists(file), "a refused --save wrote into the checkpoint folder");

    // --log or --trace on --save's own files (latest, the lock, a step folder): refused
    char save[1300], out[1400];
    spf(save, sizeof save, "%s/saves", tmp);
    ck_assert_int_eq(mkdir(save, 0755), 0);
    static const char *const own[] = {"latest", ".lock", "step-00000003/run.jsonl"};
    for (int i = 0; i < 3; i++) {
        spf(out, sizeof out, "%s/%s", save, own[i]);
        if (i == 2) {
            spf(file, sizeof file, "%s/step-00000003", save);
            ck_assert_int_eq(mkdir(file, 0755), 0);
        }
        train_args(a, base_crash);
        args(a, (const char *[]){"--steps=3", "--save", save, i ? "--trace" : "--log", out, NULL});
        a->v[a->n] = NULL;
        r.rc = tu_run(a->v, NULL, &r.out, &r.err);
        spf(want, sizeof want, "tiertrain: %s %s: is --save %s's %.13s, which the run's saves rewrite or remove (choose "
            "another path; beside the step folders is fine)\n", i ? "--trace" : "--log", out, save, own[i]);
        ck_refused(&r, "--log on --save's files", 0);
        ck_assert_str_eq(r.err, want);
        run_free(&r);
    }

    // a checkpoint found bad while loading (a flipped bit in its optimizer states, which only
    // the load reads): an earlier log at --log and an earlier trace at --trace stay as they were
    // (a trace this run made, like a log, goes)
    spf(file, sizeof file, "%s/optimizer.safetensors", ck);
    flip_tensor_byte(file, "model.layers.0.mlp.down_proj.weight.exp_avg_sq", 4 * 17 + 3);
    char trace[1300];
    spf(log, sizeof log, "%s/earlier.jsonl", tmp);
    spf(trace, sizeof trace, "%s/earlier-trace.json", tmp);
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(i ? trace : log, "w");
        ck_assert(f && fputs("{\"an earlier run\":1}\n", f) >= 0 && fclose(f) == 0);
    }
    for (int made = 0; made < 2; made++) { // the earlier trace; then a new trace path (the log stays earlier)
        if (made) spf(trace, sizeof trace, "%s/new-trace.json", tmp);
        train_args(a, base_crash);
        args(a, (const char *[]){"--steps=3", "--resume", ck, "--log", log, "--trace", trace, NULL});
        a->v[a->n] = NULL;
        r.rc = tu_run(a->v, NULL, &r.out, &r.err);
        ck_refused(&r, "a bad checkpoint", 0);
        spf(want, sizeof want, "tiertrain: --resume %s: ", ck);
        ck_assert_msg(!strncmp(r.err, want, strlen(want)) && strstr(r.err, "fails its CRC-32C check"),
                      "want the line to start \"%s\" and name the CRC, got:\n%s", want, r.err);
        for (int i = 0; i < 2; i++) {
            char *kept = tu_slurp(i ? trace : log);
            if (i && made)
                ck_assert_msg(!kept, "a refused run left its new trace: %s", kept);
            else
                ck_assert_msg(kept && !strcmp(kept, "{\"an earlier run\":1}\n"), "the earlier %s became: %s",
                              i ? "trace" : "log", kept ? kept : "(gone)");
            free(kept);
        }
        run_free(&r);
    }
    spf(trace, sizeof trace, "%s/earlier-trace.json", tmp);
    unlink(trace);
    unlink(log);
    free(a);
}
END_TEST

START_TEST(version1_unverified) {
    ck_assert_msg(good_ckpt.rc == 0, "the fixture's save failed (%d):\n%s", good_ckpt.rc, good_ckpt.err);
    char good[1200], old[1200], file[1300], want[1500];
    snprintf(good, sizeof good, "%s/ck/step-00000002", fixdir);
    snprintf(old, sizeof old, "%s/v1", tmp);
    copy_folder(good, old);
    snprintf(file, sizeof file, "%s/state.json", old);
    edit_text(file, "\"version\": 2,", "\"version\": 1,");
    args_t *a = malloc(sizeof *a);
    run_t r1 = try_resume(a, old, NULL, 3), r2 = try_resume(a, good, NULL, 3);
    ck_assert_msg(r1.rc == 0 && r2.rc == 0, "exits %d %d:\n%s\n%s", r1.rc, r2.rc, r1.err, r2.err);
    snprintf(want, sizeof want, "tiertrain: %s: saved without checksums (checkpoint version 1): loading it unverified\n",
             old);
    ck_assert_msg(strstr(r1.err, want) && !strstr(r2.err, "unverified"), "want \"%s\" once:\n%s\n--\n%s", want, r1.err,
                  r2.err);
    ck_assert_str_eq(r1.hash, r2.hash);
    run_free(&r1);
    run_free(&r2);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- crash safety

// The reference for the crash, signal and fault runs: 41 steps with a checkpoint after
// each, so its JSONL holds the params_hash after every step.
enum { REF_STEPS = 41, CRASH_STEPS = 40 };
static run_t REF;

static void ref_setup(void) {
    fix_setup();
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    argf(a, "--save=%s/ref", fixdir);
    argf(a, "--steps=%d", REF_STEPS);
    arg(a, "--save-every=1");
    arg(a, "--keep-last=1");
    REF = run(a, NULL);
    free(a);
}

static void ref_teardown(void) {
    run_free(&REF);
    fix_teardown();
}

static void ck_ref(void) {
    ck_assert_msg(REF.rc == 0, "the reference run failed (%d):\n%s", REF.rc, REF.err);
    for (int k = 1; k <= REF_STEPS; k++) ck_assert_msg(REF.ck[k][0], "the reference logged no checkpoint at %d", k);
    // the summary reports the hash the last save took (no step came after it); that a save's
    // hash is trainer_params_hash's, save_between_updates holds against a run without --save
    ck_assert_msg(!strcmp(REF.hash, REF.ck[REF_STEPS]), "summary params_hash %s, last checkpoint's %s", REF.hash,
                  REF.ck[REF_STEPS]);
}

// Resumes `from` (a folder or a --save directory) for one more step: it must load, print
// which folder it resumed, and reach the reference's params_hash after step k+1.
static int nresumed; // for crash_safety's summary line

static void ck_resumes(args_t *a, const char *from, const char *folder, int k, const char *const *extra) {
    nresumed++;
    run_t r = try_resume(a, from, extra, k + 1);
    ck_assert_msg(r.rc == 0, "--resume %s (step %d): exit %d:\n%s", from, k, r.rc, r.err);
    char said[1500];
    snprintf(said, sizeof said, "resumed: %s at step %d (params_hash %s,", folder, k, REF.ck[k]);
    ck_assert_msg(strstr(r.out, said), "--resume %s: want \"%s\" in stdout:\n%s", from, said, r.out);
    ck_assert_msg(!strcmp(r.loss[k + 1], REF.loss[k + 1]) && !strcmp(r.hash, REF.ck[k + 1]),
                  "--resume %s: step %d: loss %s params_hash %s, reference %s %s", from, k + 1, r.loss[k + 1], r.hash,
                  REF.loss[k + 1], REF.ck[k + 1]);
    run_free(&r);
}

// xorshift64*: the kill times, reproducible from the seed the test prints on failure.
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

// Folders already resumed once: (step, inode of state.json); a folder saved again is new.
typedef struct { int step; ino_t ino; } seen_t;

// After a kill: every visible step-* folder is complete and resumes to the reference's
// bits; latest (when present) names one of them, and resuming the --save directory
// resolves to it, never to a .tmp-* folder. Returns how many .tmp-* entries it saw.
static int ck_after_kill(args_t *a, const char *dir, seen_t *seen, int *nseen, ino_t *latest_checked) {
    int steps[64], ntmp, n = list_dir(dir, steps, 64, &ntmp);
    char latest[64] = "", folder[1300];
    int has_latest = read_latest(dir, latest, sizeof latest), lk = -1;
    if (has_latest) {
        lk = step_of(latest);
        ck_assert_msg(lk >= 1, "%s/latest holds '%s', not a step-* name", dir, latest);
    }
    int latest_seen = 0;
    for (int i = 0; i < n; i++) {
        int k = steps[i];
        ck_assert_msg(k >= 1 && k <= CRASH_STEPS, "%s: step-%08d", dir, k);
        snprintf(folder, sizeof folder, "%s/step-%08d", dir, k);
        check_complete(folder, k, REF.ck[k]);
        char state[1400];
        struct stat st;
        snprintf(state, sizeof state, "%s/state.json", folder);
        ck_assert_int_eq(stat(state, &st), 0);
        if (k == lk) {
            latest_seen = 1;
            if (st.st_ino != *latest_checked) { // through the directory: resolve + load
                ck_resumes(a, dir, folder, k, NULL);
                *latest_checked = st.st_ino;
                ck_assert(*nseen < 4096);
                seen[(*nseen)++] = (seen_t){k, st.st_ino};
            }
            continue;
        }
        int done = 0;
        for (int j = 0; j < *nseen && !done; j++) done = seen[j].step == k && seen[j].ino == st.st_ino;
        if (done) continue;
        ck_resumes(a, folder, folder, k, NULL);
        ck_assert(*nseen < 4096);
        seen[(*nseen)++] = (seen_t){k, st.st_ino};
    }
    ck_assert_msg(!has_latest || latest_seen, "%s/latest names %s, which is not a visible checkpoint", dir, latest);
    if (!has_latest && n > 0) { // a kill between the first folder's rename and latest's
        run_t r = try_resume(a, dir, NULL, CRASH_STEPS);
        ck_refused(&r, "--resume DIR without latest", 1);
        run_free(&r);
    }
    return ntmp;
}

// kill -9 at a seeded random moment, ≥ 20 times (6 under sanitizers), saves slowed to
// ~120 ms each by TT_CKPT_DELAY_MS=30 so that most kills land inside one. Every run
// continues the same --save directory (--resume DIR when it has a latest), as a user
// restarting after a crash would; a run that reaches step 40 ends the cycle and the next
// starts a fresh directory.
START_TEST(crash_safety) {
    ck_ref();
    const char *seed_env = getenv("TT_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 0x5eedc0ffee1234ull, s = seed;
    const int want_kills = tu_sanitized() ? 6 : 20, slow = tu_sanitized() ? 4 : 1;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    char delay[] = "TT_CKPT_DELAY_MS=30";
    char *env[] = {delay, NULL};
    args_t *a = malloc(sizeof *a);
    seen_t *seen = calloc(4096, sizeof *seen);
    int nseen = 0, kills = 0, mid_save = 0, cycles = 0, no_latest = 0;
    ino_t latest_checked = 0;
    for (int iter = 0; kills < want_kills; iter++) {
        ck_assert_msg(iter < want_kills * 4, "seed %#llx: %d runs, only %d killed", (unsigned long long)seed, iter,
                      kills);
        // what the restart continues: the directory (its latest), else, killed between a folder's
        // rename and latest's write, the newest folder itself (as the refusal of a fresh run there says)
        char latest[64], from[1300] = "";
        int k = -1;
        if (read_latest(dir, latest, sizeof latest)) {
            k = step_of(latest);
            snprintf(from, sizeof from, "%s", dir);
        } else if (exists(dir)) {
            int steps[64], ntmp, n = list_dir(dir, steps, 64, &ntmp);
            if (n > 0) snprintf(from, sizeof from, "%s/step-%08d", dir, k = steps[n - 1]);
            no_latest += n > 0;
        }
        if (k == CRASH_STEPS) { // killed after the last save: a new cycle
            tu_rm_rf(dir);
            latest_checked = 0;
            nseen = 0; // inode numbers may come back
            from[0] = 0;
        }
        train_args(a, base_crash);
        argf(a, "--steps=%d", CRASH_STEPS);
        argf(a, "--save=%s", dir);
        arg(a, "--save-every=1");
        arg(a, "--keep-last=2");
        if (from[0]) argf(a, "--resume=%s", from);
        int ms = (int)(150 + rng_next(&s) % 900) * slow, status = 0;
        pid_t pid = spawn(a, env);
        if (reap(pid, ms, &status)) { // it finished first: a complete run
            char *err = spawn_output("err");
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "seed %#llx: run %d ended %#x:\n%s",
                          (unsigned long long)seed, iter, status, err);
            free(err);
            ck_after_kill(a, dir, seen, &nseen, &latest_checked);
            tu_rm_rf(dir);
            latest_checked = 0;
            nseen = 0;
            cycles++;
            continue;
        }
        kill_reap(pid);
        kills++;
        // a continuing run that got as far as loading said which folder it resumed
        char *out = spawn_output("out");
        char said[1300];
        snprintf(said, sizeof said, "resumed: %s/step-", dir);
        const char *p = strstr(out, "resumed: ");
        ck_assert_msg(!p || !strncmp(p, said, strlen(said)), "seed %#llx: resolved a non-step folder: %s",
                      (unsigned long long)seed, p);
        free(out);
        if (exists(dir)) mid_save += ck_after_kill(a, dir, seen, &nseen, &latest_checked) > 0;
    }
    fprintf(stderr, "crash_safety: seed %#llx, %d kills (%d left a .tmp-* behind, %d a folder without latest), %d "
                    "complete runs, %d resumes checked\n", (unsigned long long)seed, kills, mid_save, no_latest, cycles,
            nresumed);
    // the kills did land inside saves: otherwise this test would prove nothing
    ck_assert_msg(mid_save > 0, "seed %#llx: no kill landed inside a save", (unsigned long long)seed);
    free(seen);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- signals

// Polls until cond(dir) holds; fails when the trainer ends first or 60 s pass.
static void wait_for(pid_t pid, const char *dir, int (*cond)(const char *), const char *what) {
    for (int waited = 0; !cond(dir); waited += 1) {
        int status;
        if (reap(pid, 0, &status)) {
            char *err = spawn_output("err");
            ck_abort_msg("the trainer ended (%#x) before %s:\n%s", status, what, err);
        }
        ck_assert_msg(waited < 60000, "no %s after 60 s", what);
        msleep(1);
    }
}

static int has_latest(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/latest", dir);
    return exists(p);
}

static int saving_step_2_or_later(const char *dir) { // a save after the first is under way
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) && !found) found = !strncmp(e->d_name, ".tmp-step-", 10) && has_latest(dir);
    closedir(d);
    return found;
}

// SIGTERM with the states on NVMe (the I/O engine's threads see the signal too): the step
// finishes, the checkpoint is saved, one line says where, exit 143; it resumes (resident)
// to the reference's bits.
START_TEST(sigterm_saves) {
    ck_ref();
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    const char *nvme[] = {"--params", "nvme", "--grads", "host", "--optimizer", "nvme", NULL};
    args(a, nvme);
    argf(a, "--steps=%d", CRASH_STEPS);
    argf(a, "--save=%s", dir);
    arg(a, "--save-every=3");
    pid_t pid = spawn(a, NULL);
    wait_for(pid, dir, has_latest, "a first checkpoint"); // the handler is installed by then
    kill(pid, SIGTERM);
    int status = 0;
    ck_assert_msg(reap(pid, 60000, &status), "no exit 60 s after SIGTERM");
    char *err = spawn_output("err");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 143, "status %#x (want exit 143), stderr:\n%s", status,
                  err);
    // the last line (a notice about an I/O fallback may come before it on another machine)
    const char *line = strstr(err, "tiertrain: stopped by ");
    int k = 0;
    ck_assert_msg(line && sscanf(line, "tiertrain: stopped by SIGTERM after step %d;", &k) == 1 && k >= 3 &&
                      k < CRASH_STEPS, "stderr:\n%s", err);
    char want[1500], folder[1300], latest[64];
    snprintf(folder, sizeof folder, "%s/step-%08d", dir, k);
    snprintf(want, sizeof want, "tiertrain: stopped by SIGTERM after step %d; checkpoint: %s\n", k, folder);
    ck_assert_str_eq(line, want);
    free(err);
    // the steps it ran are reported as a finished run's: the done line, then the tier report last
    char *out = spawn_output("out"), done[64];
    snprintf(done, sizeof done, "done: steps 1-%d of %d, ", k, CRASH_STEPS);
    const char *d = strstr(out, done), *tiers = d ? strstr(d, "\ntiers (") : NULL;
    ck_assert_msg(d && tiers && strstr(tiers, "  step "), "want \"%s\" and the tier report after it:\n%s", done, out);
    free(out);
    check_complete(folder, k, REF.ck[k]);
    ck_assert(read_latest(dir, latest, sizeof latest) && step_of(latest) == k);
    ck_resumes(a, folder, folder, k, NULL);
    free(a);
}
END_TEST

// --log failing mid-run (a full disk, TT_TEST_LOG_FULL_AT_STEP) stops the run after that step
// as a signal does: the checkpoint of that step is saved, complete, and resumes to the
// reference's bits; exit 1 with one line naming the log, the cause and the checkpoint; the log
// keeps the lines before the failure.
START_TEST(log_full_saves) {
    ck_ref();
    char dir[1200], folder[1300], want[4096], latest[64];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    snprintf(folder, sizeof folder, "%s/step-%08d", dir, 3);
    char full[] = "TT_TEST_LOG_FULL_AT_STEP=3";
    char *env[] = {full, NULL};
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    argf(a, "--steps=%d", CRASH_STEPS);
    argf(a, "--save=%s", dir);
    arg(a, "--save-every=2");
    run_t r = run(a, env);
    ck_assert_msg(r.rc == 1, "exit %d (want 1):\n%s", r.rc, r.err);
    const char *log = a->v[a->n - 1]; // run() put --log and its path last
    snprintf(want, sizeof want, "tiertrain: step 3: --log %s: write failed: No space left on device (free space there, "
             "or give another --log); stopped after step 3; checkpoint: %s\n", log, folder);
    ck_assert_str_eq(r.err, want);
    ck_assert_msg(r.loss[2][0] && r.ck[2][0], "the log lost the lines before the failure:\n%s", r.log);
    ck_assert_msg(strstr(r.out, "done: steps 1-3 of 40, ") && strstr(r.out, "\ntiers ("),
                  "no done line or tier report for the steps run:\n%s", r.out);
    check_complete(folder, 3, REF.ck[3]);
    ck_assert(read_latest(dir, latest, sizeof latest) && step_of(latest) == 3);
    ck_resumes(a, folder, folder, 3, NULL);
    run_free(&r);
    free(a);
}
END_TEST

// Two SIGINTs in quick succession while a slow save is under way: the second stops at once
// (exit 130); the half-written save stays a .tmp-* folder nobody takes for a checkpoint.
START_TEST(double_sigint) {
    ck_ref();
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    char delay[] = "TT_CKPT_DELAY_MS=150";
    char *env[] = {delay, NULL};
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    argf(a, "--steps=%d", CRASH_STEPS);
    argf(a, "--save=%s", dir);
    arg(a, "--save-every=1");
    arg(a, "--keep-last=0");
    pid_t pid = spawn(a, env);
    wait_for(pid, dir, saving_step_2_or_later, "a second save");
    kill(pid, SIGINT);
    // a second signal sent before the first was handled would merge with it (signals do not
    // queue): wait for the handler's line, then send it
    for (int waited = 0;; waited += 5) {
        char *e = spawn_output("err");
        int seen = strstr(e, "signal again to stop at once") != NULL;
        free(e);
        if (seen) break;
        ck_assert_msg(waited < 30000, "the first SIGINT was not acknowledged in 30 s");
        msleep(5);
    }
    kill(pid, SIGINT);
    int status = 0;
    ck_assert_msg(reap(pid, 60000, &status), "no exit 60 s after two SIGINTs");
    char *err = spawn_output("err");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130, "status %#x (want exit 130), stderr:\n%s", status,
                  err);
    ck_assert_msg(!strstr(err, "stopped by"), "the second SIGINT did not stop at once:\n%s", err);
    int steps[64], ntmp, n = list_dir(dir, steps, 64, &ntmp);
    ck_assert_msg(ntmp >= 1, "no .tmp-* left: the signals did not land inside a save");
    char latest[64], folder[1300];
    ck_assert(read_latest(dir, latest, sizeof latest));
    // its one line: which save was abandoned, and the newest complete checkpoint (latest's)
    const char *line = strstr(err, "tiertrain: second signal: ");
    int abandoned = 0;
    ck_assert_msg(line && sscanf(line, "tiertrain: second signal: the save of step %d was abandoned;", &abandoned) == 1,
                  "stderr:\n%s", err);
    char want[1500];
    snprintf(want, sizeof want, "tiertrain: second signal: the save of step %d was abandoned; the newest complete "
             "checkpoint is %s/%s\n", abandoned, dir, latest);
    ck_assert_str_eq(line, want);
    ck_assert_msg(abandoned > step_of(latest), "abandoned step %d, latest %s", abandoned, latest);
    free(err);
    int lk = step_of(latest), found = 0;
    for (int i = 0; i < n; i++) {
        snprintf(folder, sizeof folder, "%s/step-%08d", dir, steps[i]);
        check_complete(folder, steps[i], REF.ck[steps[i]]);
        found |= steps[i] == lk;
    }
    ck_assert_msg(found, "latest names %s, which is not a visible checkpoint", latest);
    snprintf(folder, sizeof folder, "%s/%s", dir, latest);
    ck_resumes(a, dir, folder, lk, NULL); // through latest, never the .tmp-* folder
    free(a);
}
END_TEST

// ---------------------------------------------------------------- I/O faults

// An NVMe error stops the run (exit 1) naming the error and the optimizer's shard; the
// last checkpoint stays complete, nothing half-written is left, and it resumes (on NVMe
// again) to the reference's bits.
//   write:eio@16 — tiny has 5 shards, each under one 1 MiB piece: the store writes 5 pieces
//     at init (the zeroed states) and 5 per update, so pieces 16–20 are step 3's update;
//     its failure surfaces when step 4 waits for the optimizer, after step 2's save.
//   read:eio@48 — reads are 5 per update, the first two of which the update before queues as
//     it ends (a save waits for those and drops them; a failed one fails the save), and a save
//     reads 15: the 5 masters for model.safetensors (the params_hash is taken as they stream
//     by), then 10 for optimizer.safetensors. In the order queued: step 1's update 1–5 (and
//     6–7), step 2's 8–10 (11–12, dropped), step 2's save 13–27, step 3's update 28–32 (33–34),
//     step 4's 35–37 (38–39, dropped), step 4's save 40–54, so 48 falls in its
//     optimizer.safetensors: the save fails half-written.
// 8 steps of base_crash (+ extra) saving to dir every 2, with fault ("TT_IO_FAULT=...") armed.
static run_t faulted_run(args_t *a, char *fault, const char *dir, const char *const *extra) {
    char *env[] = {fault, NULL};
    train_args(a, base_crash);
    args(a, extra);
    arg(a, "--steps=8");
    argf(a, "--save=%s", dir);
    arg(a, "--save-every=2");
    return run(a, env);
}

START_TEST(io_fault_keeps_last_checkpoint) {
    ck_ref();
    static const struct { const char *fault, *says; } f[] = {
        {"TT_IO_FAULT=write:eio@16", "optimizer: nvme write of 'optimizer states of "},
        {"TT_IO_FAULT=read:eio@48", "step 4: checkpoint: nvme read of 'optimizer states of "},
        {"TT_IO_FAULT=write:errno=ENOSPC@16", "optimizer: nvme write of 'optimizer states of "}, // a full disk
    };
    const char *nvme[] = {"--optimizer", "nvme", NULL};
    args_t *a = malloc(sizeof *a);
    for (int i = 0; i < 3; i++) {
        char dir[1200], folder[1300], latest[64];
        snprintf(dir, sizeof dir, "%s/ck%d", tmp, i);
        snprintf(folder, sizeof folder, "%s/step-00000002", dir);
        char fault[64];
        snprintf(fault, sizeof fault, "%s", f[i].fault);
        run_t r = faulted_run(a, fault, dir, nvme);
        ck_assert_msg(r.rc == 1, "%s: exit %d (want 1):\n%s", fault, r.rc, r.err);
        ck_assert_msg(strstr(r.err, f[i].says) && strstr(r.err, i == 2 ? "No space left on device" : "Input/output error"),
                      "%s: want \"%s\" in:\n%s", fault, f[i].says, r.err);
        if (i == 1) {
            char said[1400];
            snprintf(said, sizeof said, "(the newest complete checkpoint is %s)\n", folder);
            ck_assert_msg(strstr(r.err, said), "want \"%s\" in:\n%s", said, r.err);
        }
        ck_assert_msg(!strcmp(r.ck[2], REF.ck[2]) && !r.ck[4][0], "%s: checkpoints logged: 2 %s, 4 %s", fault,
                      r.ck[2], r.ck[4]);
        run_free(&r);
        int steps[64], ntmp, n = list_dir(dir, steps, 64, &ntmp);
        ck_assert_msg(n == 1 && steps[0] == 2 && ntmp == 0, "%s: %d step folders (first %d), %d .tmp-*", fault, n,
                      n ? steps[0] : -1, ntmp);
        ck_assert(read_latest(dir, latest, sizeof latest));
        ck_assert_str_eq(latest, "step-00000002");
        check_complete(folder, 2, REF.ck[2]);
        ck_resumes(a, dir, folder, 2, nvme);
    }
    // a resume whose writes into the NVMe tier fail: the load queues them two deep, and the
    // first write's failure shows as it waits for that buffer again, the last's at the end
    for (int at = 1; at <= 5; at += 4) {
        char fault[64], dir[1200], folder[1300];
        snprintf(fault, sizeof fault, "TT_IO_FAULT=write:eio@%d", at);
        snprintf(dir, sizeof dir, "%s/ck0", tmp);
        snprintf(folder, sizeof folder, "%s/step-00000002", dir);
        char *env[] = {fault, NULL};
        train_args(a, base_crash);
        args(a, nvme);
        argf(a, "--resume=%s", dir);
        arg(a, "--steps=4");
        run_t r = run(a, env);
        char want[1400];
        snprintf(want, sizeof want, "tiertrain: --resume %s: nvme write of 'optimizer states of ", dir);
        ck_assert_msg(r.rc == 1 && strstr(r.err, want) && strstr(r.err, "Input/output error"),
                      "%s: exit %d, want \"%s\" in:\n%s", fault, r.rc, want, r.err);
        run_free(&r);
        check_complete(folder, 2, REF.ck[2]); // the checkpoint is only read
    }
    // the first save fails (read 12 is in step 2's model.safetensors): there is none to name
    char dir[1200], fault[] = "TT_IO_FAULT=read:eio@12", want[1400];
    snprintf(dir, sizeof dir, "%s/ck-first", tmp);
    run_t r = faulted_run(a, fault, dir, nvme);
    snprintf(want, sizeof want, "(there is no complete checkpoint in %s)\n", dir);
    ck_assert_msg(r.rc == 1 && strstr(r.err, "step 2: checkpoint: nvme read of ") && strstr(r.err, want),
                  "exit %d, want \"%s\" in:\n%s", r.rc, want, r.err);
    run_free(&r);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- one writer, space

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

// Two trainers on one --save: the second is refused before any work, naming the first's
// pid; pruning leaves another live process's .tmp-* alone and removes a dead one's; every
// checkpoint of the first run is complete, with the reference's bits, and resumes.
START_TEST(one_writer) {
    ck_ref();
    char dir[1200], live[1300], dead[1300];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    pid_t gone = fork(); // a pid that is certainly dead: a child that exited and was reaped
    ck_assert(gone >= 0);
    if (gone == 0) _exit(0);
    int st;
    ck_assert(waitpid(gone, &st, 0) == gone);
    snprintf(live, sizeof live, "%s/.tmp-step-00000099-%d", dir, (int)getpid()); // this test process: alive
    snprintf(dead, sizeof dead, "%s/.tmp-step-00000098-%d", dir, (int)gone);
    ck_assert(mkdir(live, 0755) == 0 && mkdir(dead, 0755) == 0);
    char delay[] = "TT_CKPT_DELAY_MS=20";
    char *env[] = {delay, NULL};
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    argf(a, "--steps=%d", CRASH_STEPS);
    argf(a, "--save=%s", dir);
    arg(a, "--save-every=1");
    arg(a, "--keep-last=0");
    pid_t pid = spawn(a, env);
    wait_for(pid, dir, has_latest, "a first checkpoint");
    for (int k = 0; k < 2; k++) { // a fresh run, and one resuming from the very directory
        train_args(a, base_crash);
        argf(a, "--steps=%d", CRASH_STEPS);
        argf(a, "--save=%s", dir);
        if (k) argf(a, "--resume=%s", dir);
        run_t r = run(a, NULL);
        ck_refused(&r, "a second writer", 1);
        char want[1500];
        snprintf(want, sizeof want, "tiertrain: --save %s is in use by pid %d (another run saves there: give this run "
                 "another --save, or wait for that one to finish)\n", dir, (int)pid);
        ck_assert_str_eq(r.err, want);
        run_free(&r);
    }
    int status = 0;
    ck_assert_msg(reap(pid, 120000, &status), "the first trainer did not finish in 120 s");
    char *err = spawn_output("err");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x, stderr:\n%s", status, err);
    free(err);
    ck_assert_msg(is_dir(live), "a live process's %s was pruned", live);
    ck_assert_msg(!is_dir(dead), "a dead process's %s was left", dead);
    rmdir(live);
    int steps[64], ntmp, n = list_dir(dir, steps, 64, &ntmp);
    ck_assert_msg(n == CRASH_STEPS && ntmp == 0, "%d step folders, %d .tmp-*", n, ntmp);
    char folder[1300];
    for (int i = 0; i < n; i++) {
        snprintf(folder, sizeof folder, "%s/step-%08d", dir, steps[i]);
        check_complete(folder, steps[i], REF.ck[steps[i]]);
    }
    snprintf(folder, sizeof folder, "%s/step-%08d", dir, CRASH_STEPS / 2);
    ck_resumes(a, folder, folder, CRASH_STEPS / 2, NULL);
    free(a);
}
END_TEST

// The "save_*" numbers of plan's JSON line.
static void plan_save(const char *const *extra, const char *free_env, unsigned long long *bytes,
                      unsigned long long *need, int *rc) {
    args_t *a = malloc(sizeof *a);
    a->n = 0;
    arg(a, TT_BINARY);
    arg(a, "plan");
    args(a, base_crash);
    args(a, extra);
    a->v[a->n] = NULL;
    char env_s[64];
    snprintf(env_s, sizeof env_s, "TT_SAVE_FREE=%s", free_env);
    char *env[] = {env_s, NULL};
    char *out = NULL, *err = NULL;
    *rc = tu_run(a->v, env, &out, &err);
    const char *j = strstr(out, "\"save_bytes\":");
    ck_assert_msg(j && sscanf(j, "\"save_bytes\":%llu,\"save_need\":%llu", bytes, need) == 2, "plan printed:\n%s%s",
                  out, err);
    free(out);
    free(err);
    free(a);
}

// The checkpoints must fit on the --save filesystem at the run's fullest moment: plan
// counts them (the newest --keep-last plus the one being written; every save with
// --keep-last 0), train refuses before step 1 when they do not fit, on a statvfs answer
// faked by TT_SAVE_FREE and on a real 1 MiB tmpfs where this machine lets us mount one.
START_TEST(save_space) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    const char *k1[] = {"--steps=5", "--save-every=1", "--keep-last=1", "--save", dir, NULL};
    const char *k3[] = {"--steps=5", "--save-every=1", "--keep-last=3", "--save", dir, NULL};
    const char *k0[] = {"--steps=5", "--save-every=2", "--keep-last=0", "--save", dir, NULL};
    unsigned long long bytes, need, b2, n2;
    int rc;
    plan_save(k1, "1G", &bytes, &need, &rc);
    ck_assert_msg(rc == 0 && bytes > 400000 && need == 2 * bytes, "keep 1: rc %d, %llu of %llu", rc, need, bytes);
    plan_save(k3, "1G", &b2, &n2, &rc);
    ck_assert_msg(rc == 0 && b2 == bytes && n2 == 4 * bytes, "keep 3: rc %d, %llu of %llu", rc, n2, b2);
    plan_save(k0, "1G", &b2, &n2, &rc); // saves at 2, 4 and the end
    ck_assert_msg(rc == 0 && n2 == 3 * bytes, "keep all: rc %d, %llu of %llu", rc, n2, bytes);
    char just[32];
    snprintf(just, sizeof just, "%llu", 2 * bytes - 1); // one byte short
    plan_save(k1, just, &b2, &n2, &rc);
    ck_assert_int_eq(rc, 2);
    // train: refused before any work, the directory not even created
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    args(a, k1);
    char env_s[64];
    snprintf(env_s, sizeof env_s, "TT_SAVE_FREE=%s", just);
    char *env[] = {env_s, NULL};
    run_t r = run(a, env);
    ck_refused(&r, "a --save without room", 1);
    char a_s[64];
    ck_assert_msg(strstr(r.err, "tiertrain: --save ") && strstr(r.err, ": the checkpoints need ") &&
                      strstr(r.err, "(2 of ") && strstr(r.err, " free there (free space, give --save another filesystem"),
                  "%s", r.err);
    ck_assert_msg(!exists(dir), "the refused run created %s", dir);
    run_free(&r);
    // a real small filesystem
    char mnt[1200];
    snprintf(mnt, sizeof mnt, "%s/mnt", tmp);
    ck_assert_int_eq(mkdir(mnt, 0755), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1M") != 0) {
        fprintf(stderr, "save_space: cannot mount a tmpfs here (%s): the real-filesystem case is skipped\n",
                strerror(errno));
    } else {
        char sub[1300];
        snprintf(sub, sizeof sub, "%s/ck", mnt);
        train_args(a, base_crash);
        arg(a, "--steps=3");
        argf(a, "--save=%s", sub);
        r = run(a, NULL);
        int mounted_exists = exists(sub);
        umount2(mnt, MNT_DETACH);
        ck_refused(&r, "a --save on a 1 MiB filesystem", 1);
        snprintf(a_s, sizeof a_s, "%s", "1.0 MiB free there");
        ck_assert_msg(strstr(r.err, ": the checkpoints need ") && strstr(r.err, a_s), "%s", r.err);
        ck_assert(!mounted_exists);
        run_free(&r);
    }
    free(a);
}
END_TEST

// ---------------------------------------------------------------- export

// The model of the export runs, every dimension distinct so a transposed or swapped shape
// cannot pass: V 256, C 48, F 80, NKV·HS 2·8 = 16, L 3.
enum { EL = 3, EC = 48, ENH = 6, ENKV = 2, EF = 80, EV = 256, EHS = EC / ENH };
static const char *const base_export[] = {"--model", "tiny", "--layers", "3", "--dim", "48", "--heads", "6",
                                          "--kv-heads", "2", "--ffn", "80", "--vocab", "256", "--batch", "2",
                                          "--seq", "16", "--device", "cpu", "--threads", "1", "--eval-every", "0",
                                          "--quiet", NULL};

typedef struct { char name[128]; int ndim; long long shape[2]; } want_t;

// The Hugging Face LlamaForCausalLM state dict of the export model.
static int hf_tensors(want_t *w, int tie) {
    int n = 0;
#define W1(a) (w[n].ndim = 1, w[n].shape[0] = (a), n++)
#define W2(a, b) (w[n].ndim = 2, w[n].shape[0] = (a), w[n].shape[1] = (b), n++)
    snprintf(w[n].name, sizeof w[n].name, "model.embed_tokens.weight");
    W2(EV, EC);
    for (int i = 0; i < EL; i++) {
        static const char *const proj[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                           "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        const long long rows[] = {ENH * EHS, ENKV * EHS, ENKV * EHS, EC, EF, EF, EC};
        const long long cols[] = {EC, EC, EC, ENH * EHS, EC, EC, EF};
        for (int p = 0; p < 7; p++) {
            snprintf(w[n].name, sizeof w[n].name, "model.layers.%d.%s.weight", i, proj[p]);
            W2(rows[p], cols[p]);
        }
        snprintf(w[n].name, sizeof w[n].name, "model.layers.%d.input_layernorm.weight", i);
        W1(EC);
        snprintf(w[n].name, sizeof w[n].name, "model.layers.%d.post_attention_layernorm.weight", i);
        W1(EC);
    }
    snprintf(w[n].name, sizeof w[n].name, "model.norm.weight");
    W1(EC);
    if (!tie) {
        snprintf(w[n].name, sizeof w[n].name, "lm_head.weight");
        W2(EV, EC);
    }
#undef W1
#undef W2
    return n;
}

// path holds exactly the tensors w (each name + each suffix) with dtype, their data packed
// from offset 0 in some order without gaps or overlap up to the end of the file, and the
// data section starts at an 8-byte-aligned offset.
static void ck_safetensors(const char *path, const want_t *w, int nw, const char *const *suffixes, const char *dtype) {
    hdr_t *h = malloc(sizeof *h);
    const char *why = hdr_scan(path, h);
    ck_assert_msg(!why, "%s: %s", path, why);
    ck_assert_msg((8 + h->hlen) % 8 == 0, "%s: data starts at %llu, not 8-byte aligned", path, 8 + h->hlen);
    int nsuf = 0;
    while (suffixes[nsuf]) nsuf++;
    ck_assert_msg(h->n == nw * nsuf, "%s: %d tensors, want %d", path, h->n, nw * nsuf);
    long long elem = !strcmp(dtype, "BF16") ? 2 : 4, total = 0;
    for (int i = 0; i < nw; i++)
        for (int s = 0; s < nsuf; s++) {
            char name[200];
            snprintf(name, sizeof name, "%s%s", w[i].name, suffixes[s]);
            const hdr_tensor_t *t = hdr_find(h, name);
            ck_assert_msg(t != NULL, "%s: no tensor '%s'", path, name);
            ck_assert_msg(!strcmp(t->dtype, dtype), "%s: '%s' is %s, want %s", path, name, t->dtype, dtype);
            ck_assert_msg(t->ndim == w[i].ndim && t->shape[0] == w[i].shape[0] &&
                              (w[i].ndim == 1 || t->shape[1] == w[i].shape[1]),
                          "%s: '%s' has shape [%lld, %lld] (%d dims), want [%lld, %lld] (%d dims)", path, name,
                          t->shape[0], t->ndim > 1 ? t->shape[1] : 0, t->ndim, w[i].shape[0],
                          w[i].ndim > 1 ? w[i].shape[1] : 0, w[i].ndim);
            long long numel = w[i].shape[0] * (w[i].ndim > 1 ? w[i].shape[1] : 1);
            ck_assert_msg(t->end - t->begin == numel * elem, "%s: '%s' spans [%lld, %lld), want %lld bytes", path,
                          name, t->begin, t->end, numel * elem);
            total += numel * elem;
        }
    // contiguous: walking from 0, exactly one tensor starts where the previous ended
    for (long long at = 0; at < total;) {
        int next = -1;
        for (int i = 0; i < h->n; i++)
            if (h->t[i].begin == at && h->t[i].end > at) {
                ck_assert_msg(next < 0, "%s: two tensors start at %lld", path, at);
                next = i;
            }
        ck_assert_msg(next >= 0, "%s: a gap or overlap at data offset %lld", path, at);
        at = h->t[next].end;
    }
    ck_assert_msg((long long)(8 + h->hlen) + total == h->fsize, "%s: %lld bytes, the header accounts for %lld", path,
                  h->fsize, (long long)(8 + h->hlen) + total);
    free(h);
}

// _i = 0: untied, F32; 1: tied, --save-dtype bf16. --keep-last 2 after 4 saves leaves
// exactly step-3 and step-4.
START_TEST(export_hf_llama) {
    const int tie = _i == 1;
    char dir[1200], folder[1300], path[1400], latest[64];
    snprintf(dir, sizeof dir, "%s/ck", tmp);
    snprintf(folder, sizeof folder, "%s/step-00000004", dir);
    args_t *a = malloc(sizeof *a);
    train_args(a, base_export);
    if (tie) {
        arg(a, "--tie");
        arg(a, "--save-dtype=bf16");
    }
    arg(a, "--steps=4");
    argf(a, "--save=%s", dir);
    arg(a, "--save-every=1");
    arg(a, "--keep-last=2");
    run_t r = run(a, NULL);
    ck_ok(r);
    int steps[64], ntmp, n = list_dir(dir, steps, 64, &ntmp);
    ck_assert_msg(n == 2 && steps[0] == 3 && steps[1] == 4 && ntmp == 0, "--keep-last 2: %d folders (%d, %d), %d .tmp",
                  n, n > 0 ? steps[0] : -1, n > 1 ? steps[1] : -1, ntmp);
    ck_assert(read_latest(dir, latest, sizeof latest));
    ck_assert_str_eq(latest, "step-00000004");
    check_complete(folder, 4, r.ck[4]);

    want_t w[64];
    int nw = hf_tensors(w, tie);
    const char *none[] = {"", NULL};
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    ck_safetensors(path, w, nw, none, tie ? "BF16" : "F32");
    // Adam's m and v per tensor, and the FP32 master when the model file is BF16
    const char *adam[] = {".exp_avg", ".exp_avg_sq", NULL};
    const char *adam_master[] = {".master", ".exp_avg", ".exp_avg_sq", NULL};
    snprintf(path, sizeof path, "%s/optimizer.safetensors", folder);
    ck_safetensors(path, w, nw, tie ? adam_master : adam, "F32");
    snprintf(path, sizeof path, "%s/config.json", folder);
    char *cfg = tu_slurp(path);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_msg(strstr(cfg, "\"model_type\": \"llama\"") && strstr(cfg, "\"num_key_value_heads\": 2,") &&
                      strstr(cfg, tie ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false") &&
                      strstr(cfg, tie ? "\"torch_dtype\": \"bfloat16\"" : "\"torch_dtype\": \"float32\""),
                  "%s:\n%s", path, cfg);
    free(cfg);
    run_free(&r);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- the user's entries

// What a user keeps in a --save directory under a step-* name: a folder without state.json, a
// file, a name that is not 8 digits, a link to a folder that looks complete (pruning through
// it would delete the target's files). Each is checked for being exactly as made.
static const struct { const char *name, *file, *text; } user_entries[] = {
    {"step-00000001", "my.txt", "mine\n"},          // a folder with the right name, no state.json
    {"step-12345678", NULL, "a file, not a folder\n"}, // a plain file
    {"step-abcdefgh", "note.txt", "sorts after any step-NNNNNNNN\n"},
};

static void make_user_entries(const char *dir, const char *elsewhere) {
    char p[1300], q[1400];
    for (size_t i = 0; i < sizeof user_entries / sizeof user_entries[0]; i++) {
        spf(p, sizeof p, "%s/%s", dir, user_entries[i].name);
        if (!user_entries[i].file) {
            write_file(p, user_entries[i].text);
            continue;
        }
        ck_assert_int_eq(mkdir(p, 0755), 0);
        spf(q, sizeof q, "%s/%s", p, user_entries[i].file);
        write_file(q, user_entries[i].text);
    }
    spf(p, sizeof p, "%s/step-00000002", dir); // a real checkpoint's files, outside dir, reached by a link
    copy_folder(p, elsewhere);
    spf(p, sizeof p, "%s/step-00000000", dir);
    ck_assert_int_eq(symlink(elsewhere, p), 0);
}

static void ck_user_entries(const char *dir, const char *elsewhere, const char *what) {
    char p[1300], q[1400];
    struct stat st;
    for (size_t i = 0; i < sizeof user_entries / sizeof user_entries[0]; i++) {
        spf(p, sizeof p, "%s/%s", dir, user_entries[i].name);
        ck_assert_msg(lstat(p, &st) == 0, "%s: the user's %s is gone", what, p);
        ck_assert_msg(user_entries[i].file ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode), "%s: %s changed type", what, p);
        if (user_entries[i].file) {
            int n = 0;
            DIR *d = opendir(p);
            ck_assert_msg(d != NULL, "%s: %s: %s", what, p, strerror(errno));
            for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
            closedir(d);
            ck_assert_msg(n == 1, "%s: %s holds %d entries, the user left 1", what, p, n);
            spf(q, sizeof q, "%s/%s", p, user_entries[i].file);
        } else {
            spf(q, sizeof q, "%s", p);
        }
        char *s = tu_slurp(q);
        ck_assert_msg(s && !strcmp(s, user_entries[i].text), "%s: %s holds \"%s\", the user wrote \"%s\"", what, q,
                      s ? s : "(unreadable)", user_entries[i].text);
        free(s);
    }
    spf(p, sizeof p, "%s/step-00000000", dir);
    ck_assert_msg(lstat(p, &st) == 0 && S_ISLNK(st.st_mode), "%s: the user's link %s is gone", what, p);
    for (int i = 0; i < 4; i++) {
        spf(q, sizeof q, "%s/%s", elsewhere, ckpt_files[i]);
        ck_assert_msg(stat(q, &st) == 0 && st.st_size > 0, "%s: %s, behind the link %s, is gone", what, q, p);
    }
}

// Only complete checkpoints (a step-NNNNNNNN folder with state.json) are listed and pruned:
// checkpoints at steps 2 and 4, the user's entries added, a resume to step 6 saving every
// step with --keep-last 1 leaves step-00000006 alone of the checkpoints and every user entry
// as it was. A save whose folder name is taken by a user's entry stops the run and deletes
// nothing.
START_TEST(user_entries_left_alone) {
    args_t *a = malloc(sizeof *a);
    char dir[1200], elsewhere[1200], p[1300], want[4096];
    spf(dir, sizeof dir, "%s/ck", tmp);
    spf(elsewhere, sizeof elsewhere, "%s/elsewhere", tmp);
    train_args(a, base_crash);
    argf(a, "--save=%s", dir);
    arg(a, "--steps=4");
    arg(a, "--save-every=2");
    arg(a, "--keep-last=0");
    run_t r = run(a, NULL);
    ck_ok(r);
    run_free(&r);
    make_user_entries(dir, elsewhere);

    train_args(a, base_crash);
    argf(a, "--save=%s", dir);
    argf(a, "--resume=%s", dir);
    arg(a, "--steps=6");
    arg(a, "--save-every=1");
    arg(a, "--keep-last=1");
    r = run(a, NULL);
    ck_ok(r);
    run_free(&r);
    ck_user_entries(dir, elsewhere, "--keep-last 1");
    for (int k = 2; k <= 5; k++) {
        spf(p, sizeof p, "%s/step-%08d", dir, k);
        ck_assert_msg(!exists(p), "--keep-last 1: %s was kept", p);
    }
    spf(p, sizeof p, "%s/step-00000006", dir);
    check_complete(p, 6, NULL);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(strncmp(e->d_name, ".tmp-", 5) != 0, "%s: %s left behind", dir, e->d_name);
    closedir(d);

    // a fresh run does not save beside another run's checkpoints at all (train.c run_check)
    train_args(a, base_crash);
    argf(a, "--save=%s", dir);
    arg(a, "--steps=2");
    arg(a, "--save-every=1");
    r = run(a, NULL);
    ck_refused(&r, "a fresh run into another's --save", 1);
    run_free(&r);
    ck_user_entries(dir, elsewhere, "a fresh run into another's --save");

    // and where there are none, its first save is step-00000001, the user's folder: it stops there
    char fresh[1300];
    spf(fresh, sizeof fresh, "%s/fresh", tmp);
    ck_assert_int_eq(mkdir(fresh, 0755), 0);
    spf(p, sizeof p, "%s/step-00000001", fresh);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    spf(p, sizeof p, "%s/step-00000001/my.txt", fresh);
    write_file(p, "mine\n");
    train_args(a, base_crash);
    argf(a, "--save=%s", fresh);
    arg(a, "--steps=2");
    arg(a, "--save-every=1");
    r = run(a, NULL);
    spf(want, sizeof want, "tiertrain: step 1: checkpoint: --save %s: %s/step-00000001 exists and is not a checkpoint "
        "(no state.json): move it out of the way or give another --save (there is no complete checkpoint in %s)\n",
        fresh, fresh, fresh);
    ck_assert_msg(r.rc == 1, "a taken step-00000001: exit %d (want 1), stderr:\n%s", r.rc, r.err);
    ck_assert_str_eq(r.err, want);
    run_free(&r);
    char *mine = tu_slurp(p);
    ck_assert_msg(mine && !strcmp(mine, "mine\n"), "a taken step-00000001: %s holds \"%s\"", p, mine ? mine : "(gone)");
    free(mine);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- bench

// `tiertrain bench` with list's flags and --save=save (no --log: bench takes none).
static void bench_args(args_t *a, const char *const *list, const char *save) {
    a->n = 0;
    a->used = 0;
    arg(a, tu_binary());
    arg(a, "bench");
    args(a, list);
    argf(a, "--save=%s", save);
}

// bench checkpoint times one save and one load of train's model after step 1, in a folder
// of its own under --save that it removes (what was there stays): its JSON line has the
// times, the disk's rates and the params_hash, which is the one train's checkpoint of step 1
// holds with the same flags; with the optimizer on NVMe as well. A --save that is a file is
// refused with train's line.
START_TEST(bench_checkpoint_round_trip) {
    static const char *const flags[] = {"checkpoint", "--model", "tiny", "--batch", "2", "--seq", "16", "--device",
                                        "cpu", "--threads", "1", "--warmup", "64", NULL};
    args_t *a = malloc(sizeof *a);
    train_args(a, base_crash);
    arg(a, "--steps=1");
    argf(a, "--save=%s/ref", tmp);
    run_t ref = run(a, NULL);
    ck_ok(ref);
    ck_assert(ref.ck[1][0]);
    for (int nvme = 0; nvme < 2; nvme++) {
        char dir[1200], mine[1300];
        snprintf(dir, sizeof dir, "%s/b%d", tmp, nvme);
        ck_assert_int_eq(mkdir(dir, 0755), 0);
        snprintf(mine, sizeof mine, "%s/mine.txt", dir);
        FILE *f = fopen(mine, "w");
        ck_assert(f && fputs("the user's\n", f) >= 0 && fclose(f) == 0);
        bench_args(a, flags, dir);
        if (nvme) {
            arg(a, "--optimizer=nvme");
            argf(a, "--nvme-path=%s", tmp);
        }
        a->v[a->n] = NULL;
        char *out = NULL, *err = NULL;
        int rc = tu_run(a->v, NULL, &out, &err);
        ck_assert_msg(rc == 0, "bench checkpoint%s: exit %d:\n%s", nvme ? " (nvme)" : "", rc, err);
        const char *json = strstr(out, "{\"bench\":\"checkpoint\"");
        ck_assert_msg(json && strchr(json, '\n') && !strchr(json, '\n')[1], "no JSON line last:\n%s", out);
        static const char *const keys[] = {"\"save_s\":", "\"load_s\":", "\"save_floor_s\":", "\"load_floor_s\":",
                                           "\"disk_read_GBps\":", "\"disk_write_GBps\":", "\"hash_GBps\":", NULL};
        for (int i = 0; keys[i]; i++)
            ck_assert_msg(strstr(json, keys[i]) && atof(strstr(json, keys[i]) + strlen(keys[i])) > 0,
                          "%s missing or not positive: %s", keys[i], json);
        ck_assert_msg(strstr(json, nvme ? "\"optimizer\":\"nvme\"" : "\"optimizer\":\"host\""), "%s", json);
        char want[64];
        snprintf(want, sizeof want, "\"params_hash\":\"%s\"", ref.ck[1]);
        ck_assert_msg(strstr(json, want), "want %s (train's step 1) in %s", want, json);
        DIR *d = opendir(dir); // the user's file, and nothing else
        ck_assert_ptr_nonnull(d);
        int entries = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                ck_assert_msg(!strcmp(e->d_name, "mine.txt"), "%s: left behind: %s", dir, e->d_name);
                entries++;
            }
        closedir(d);
        ck_assert_int_eq(entries, 1);
        free(out);
        free(err);
    }
    // a file for --save: train's refusal
    char file[1300], want[1500];
    snprintf(file, sizeof file, "%s/b0/mine.txt", tmp);
    bench_args(a, flags, file);
    a->v[a->n] = NULL;
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(tu_run(a->v, NULL, &out, &err), 2);
    snprintf(want, sizeof want, "tiertrain: --save %s: exists and is not a directory (give a directory)\n", file);
    ck_assert_str_eq(err, want);
    free(out);
    free(err);
    run_free(&ref);
    free(a);
}
END_TEST

// ---------------------------------------------------------------- main

int main(void) {
    const int slow = tu_sanitized() ? 4 : 1;
    Suite *s = suite_create("checkpoint");
    TCase *res = tcase_create("resume");
    tcase_add_unchecked_fixture(res, fix_setup, fix_teardown);
    tcase_add_checked_fixture(res, setup, teardown);
    tcase_set_timeout(res, 60 * slow);
    tcase_add_loop_test(res, resume_bit_exact, 0, NRESUME);
    tcase_add_test(res, save_between_updates);
    tcase_add_test(res, resume_takes_recipe);
    suite_add_tcase(s, res);

    TCase *ref = tcase_create("refusals");
    tcase_add_unchecked_fixture(ref, fix_setup, fix_teardown);
    tcase_add_checked_fixture(ref, setup, teardown);
    tcase_set_timeout(ref, 60 * slow);
    tcase_add_test(ref, refusals);
    suite_add_tcase(s, ref);

    TCase *bad = tcase_create("bad files");
    tcase_add_unchecked_fixture(bad, good_setup, good_teardown);
    tcase_add_checked_fixture(bad, setup, teardown);
    tcase_set_timeout(bad, 60 * slow);
    tcase_add_loop_test(bad, bad_file, 0, NBAD);
    tcase_add_test(bad, version1_unverified);
    tcase_add_test(bad, outputs_spare_inputs);
    suite_add_tcase(s, bad);

    TCase *crash = tcase_create("crash");
    tcase_add_unchecked_fixture(crash, ref_setup, ref_teardown);
    tcase_add_checked_fixture(crash, setup, teardown);
    tcase_set_timeout(crash, 120 * slow);
    tcase_add_test(crash, crash_safety);
    tcase_add_test(crash, sigterm_saves);
    tcase_add_test(crash, log_full_saves);
    tcase_add_test(crash, double_sigint);
    tcase_add_test(crash, io_fault_keeps_last_checkpoint);
    tcase_add_test(crash, one_writer);
    tcase_add_test(crash, save_space);
    suite_add_tcase(s, crash);

    TCase *exp = tcase_create("export");
    tcase_add_unchecked_fixture(exp, fix_setup, fix_teardown);
    tcase_add_checked_fixture(exp, setup, teardown);
    tcase_set_timeout(exp, 60 * slow);
    tcase_add_loop_test(exp, export_hf_llama, 0, 2);
    suite_add_tcase(s, exp);

    TCase *user = tcase_create("user entries");
    tcase_add_unchecked_fixture(user, fix_setup, fix_teardown);
    tcase_add_checked_fixture(user, setup, teardown);
    tcase_set_timeout(user, 60 * slow);
    tcase_add_test(user, user_entries_left_alone);
    suite_add_tcase(s, user);

    TCase *bench = tcase_create("bench");
    tcase_add_unchecked_fixture(bench, fix_setup, fix_teardown);
    tcase_add_checked_fixture(bench, setup, teardown);
    tcase_set_timeout(bench, 60 * slow);
    tcase_add_test(bench, bench_checkpoint_round_trip);
    suite_add_tcase(s, bench);

    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
