// test_ranks.c — `mpirun -np 2 tiertrain train` (DESIGN §7): world-size invariance (2 ranks ×
// --accum A give the bits of 1 rank × --accum 2A, every placement and schedule), each rank
// holding half of every state (ZeRO-3), checkpoints that resume on another world size, one
// failure stopping every rank with its name, and mismatched flags refused. CTest label "mpi"; skips (77) without Open MPI's mpirun.
//
// Each rank runs one OpenMP thread (two ranks on two cores), and so does the one-rank run it
// is compared with.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"

static char mpirun[1024];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

// The launcher on $PATH, or 0.
static int find_mpirun(void) {
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(mpirun, sizeof mpirun, "%s/mpirun", d);
        if (access(mpirun, X_OK) == 0) return 1;
    }
    return 0;
}

static char *const env_common[] = {
    "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMP_NUM_THREADS=1", "TT_CALIBRATE=0",
    // Open MPI's own allocations outlive MPI_Finalize: under ASan, leaks are not this test's
    "ASAN_OPTIONS=detect_leaks=0:abort_on_error=0", "OMPI_MCA_btl_vader_single_copy_mechanism=none", NULL};

typedef struct { int rc; char *out, *err, *log; } run_t;

static void run_free(run_t *r) { free(r->out); free(r->err); free(r->log); }

// Value of "key" in the log's summary line (malloc'd), or NULL.
static char *summary_field(const char *log, const char *key) {
    const char *s = log ? strstr(log, "\"event\":\"summary\"") : NULL;
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = s ? strstr(s, k) : NULL;
    if (!p) return NULL;
    p += strlen(k);
    if (*p == '"') p++;
    size_t n = *p == '[' ? strcspn(p, "]") + 1 : strcspn(p, "\",}\n");
    char *out = malloc(n + 1);
    memcpy(out, p, n);
    out[n] = 0;
    return out;
}

// Every step line's loss and grad_norm, concatenated.
static char *losses_of(const char *log) {
    size_t cap = 8192, len = 0;
    char *out = calloc(cap, 1);
    for (const char *p = log; p && (p = strstr(p, "\"loss\":")); p++) {
        const char *q = strstr(p, "\"step_ms\"");
        size_t n = q ? (size_t)(q - p) : strcspn(p, "}");
        if (len + n + 2 >= cap) out = realloc(out, cap *= 2);
        memcpy(out + len, p, n);
        len += n;
        out[len++] = ';';
        out[len] = 0;
    }
    return out;
}

// Runs `tiertrain train --log DIR/run.jsonl ARGS` on np ranks (0: without a launcher), with
// extra environment for the last rank only when last_env is given (an MPMD command line).
static run_t train(int np, const char *tag, const char *args, const char *last_env, const char *last_args) {
    char *dir = tu_tmpdir(tag);
    char log[1200];
    snprintf(log, sizeof log, "%s/run.jsonl", dir);
    char *argv[256];
    int n = 0;
    char copy[4096], copy2[4096];
    snprintf(copy, sizeof copy, "%s", args);
    snprintf(copy2, sizeof copy2, "%s", last_args ? last_args : args);
    if (np > 0) {
        argv[n++] = mpirun;
        argv[n++] = "--oversubscribe";
        argv[n++] = "-np";
        argv[n++] = np > 1 && (last_env || last_args) ? (char *)"1" : (np == 1 ? "1" : "2");
        for (int i = 0; env_common[i]; i++) {
            argv[n++] = "-x";
            argv[n++] = env_common[i];
        }
    }
    argv[n++] = (char *)tu_binary();
    argv[n++] = "train";
    argv[n++] = "--log";
    argv[n++] = log;
    for (char *save = NULL, *a = strtok_r(copy, " ", &save); a; a = strtok_r(NULL, " ", &save)) argv[n++] = a;
    if (np > 1 && (last_env || last_args)) { // MPMD: the last rank with its own environment or flags
        argv[n++] = ":";
        argv[n++] = "-np";
        argv[n++] = "1";
        for (int i = 0; env_common[i]; i++) {
            argv[n++] = "-x";
            argv[n++] = env_common[i];
        }
        if (last_env) {
            argv[n++] = "-x";
            argv[n++] = (char *)last_env;
        }
        argv[n++] = (char *)tu_binary();
        argv[n++] = "train";
        argv[n++] = "--log";
        argv[n++] = log;
        for (char *save = NULL, *a = strtok_r(copy2, " ", &save); a; a = strtok_r(NULL, " ", &save)) argv[n++] = a;
    }
    argv[n] = NULL;
    run_t r = {0};
    r.rc = tu_run(argv, env_common, &r.out, &r.err);
    r.log = tu_slurp(log);
    unlink(log);
    tu_rm_rf(dir); // says what it could not remove
    free(dir);
    return r;
}

static const char *base = "--model tiny --steps 4 --eval-every 0 --seed 7";

// ---------------------------------------------------------------- invariance

static const struct { const char *two, *one; } cases[] = {
    {"", "--accum 2"},                                                        // all resident
    {"--params nvme --optimizer nvme", "--accum 2 --params nvme --optimizer nvme"},
    {"--grads host", "--accum 2 --grads host"},
    {"--grads nvme --optimizer nvme", "--accum 2 --grads nvme --optimizer nvme"},
    {"--accum 2 --schedule vertical", "--accum 4 --schedule vertical"},
    {"--accum 2 --schedule horizontal --params host", "--accum 4 --schedule horizontal --params host"},
    {"--tie --clip 0.05", "--accum 2 --tie --clip 0.05"},                     // the tied head's share, clipping
    // a cut vocabulary (4 chunks; tied: 3, the last ragged): pieces of every chunk, folds per chunk
    {"--vocab 8192 --params host", "--accum 2 --vocab 8192 --params host"},
    {"--vocab 5000 --tie --grads host", "--accum 2 --vocab 5000 --tie --grads host"},
};

START_TEST(test_invariance) {
    char a2[1024], a1[1024], nv[256];
    char *dir = tu_tmpdir("ranks-nvme");
    snprintf(nv, sizeof nv, "--nvme-path %s", dir);
    snprintf(a2, sizeof a2, "%s %s %s", base, cases[_i].two, nv);
    snprintf(a1, sizeof a1, "%s %s %s", base, cases[_i].one, nv);
    run_t two = train(2, "ranks-two", a2, NULL, NULL), one = train(0, "ranks-one", a1, NULL, NULL);
    ck_assert_msg(two.rc == 0, "2 ranks (%s) failed (%d): %s", a2, two.rc, two.err);
    ck_assert_msg(one.rc == 0, "1 rank (%s) failed (%d): %s", a1, one.rc, one.err);
    char *h2 = summary_field(two.log, "params_hash"), *h1 = summary_field(one.log, "params_hash");
    ck_assert_msg(h2 && h1, "no params_hash: %s", two.log);
    ck_assert_msg(!strcmp(h2, h1), "%s: 2 ranks give %s, 1 rank with twice the accumulation %s", cases[_i].two, h2, h1);
    char *l2 = losses_of(two.log), *l1 = losses_of(one.log);
    ck_assert_msg(!strcmp(l2, l1), "losses differ:\n%s\n%s", l2, l1);
    char *ranks = summary_field(two.log, "ranks"), *peaks = summary_field(two.log, "rank_peak_device_bytes");
    ck_assert_msg(ranks && !strcmp(ranks, "2"), "summary ranks: %s", ranks ? ranks : "(none)");
    ck_assert_msg(peaks && strchr(peaks, ','), "summary rank_peak_device_bytes: %s", peaks ? peaks : "(none)");
    ck_assert_msg(strstr(two.out, "ranks: 2"), "no ranks line in: %s", two.out);
    // rank 0 alone prints: one configuration, one done line
    const char *d = strstr(two.out, "done:");
    ck_assert_msg(d && !strstr(d + 1, "done:"), "more than one rank printed: %s", two.out);
    free(ranks); free(peaks);
    free(l2); free(l1); free(h2); free(h1);
    run_free(&two); run_free(&one);
    ck_assert_int_eq(tu_rm_rf(dir), 0);
    free(dir);
}
END_TEST

// mpirun -np 1 is the run without a launcher.
START_TEST(test_one_rank_launched) {
    char a[512];
    snprintf(a, sizeof a, "%s --accum 2", base);
    run_t l = train(1, "ranks-np1", a, NULL, NULL), p = train(0, "ranks-plain", a, NULL, NULL);
    ck_assert_msg(l.rc == 0 && p.rc == 0, "failed: %s %s", l.err, p.err);
    char *hl = summary_field(l.log, "params_hash"), *hp = summary_field(p.log, "params_hash");
    ck_assert_str_eq(hl, hp);
    free(hl); free(hp);
    run_free(&l); run_free(&p);
}
END_TEST

// ZeRO-3: each of 2 ranks holds half of every state. With every state on the host, each
// rank's host peak is about half of the one-rank run's (the staging is not split).
START_TEST(test_states_halved) {
    const char *a = "--model small --steps 1 --eval-every 0 --params host --grads host --optimizer host";
    char a1[512];
    snprintf(a1, sizeof a1, "%s --accum 2", a);
    run_t two = train(2, "ranks-mem2", a, NULL, NULL), one = train(0, "ranks-mem1", a1, NULL, NULL);
    ck_assert_msg(two.rc == 0 && one.rc == 0, "failed: %s %s", two.err, one.err);
    char *peaks = summary_field(two.log, "rank_peak_host_bytes"), *p1 = summary_field(one.log, "peak_host_bytes");
    ck_assert_msg(peaks && p1, "no host peaks: %s", two.log);
    double r0 = 0, r1 = 0, whole = atof(p1);
    ck_assert_int_eq(sscanf(peaks, "[%lf,%lf]", &r0, &r1), 2);
    // 9.6M parameters: 19 MiB BF16 + 38 MiB gradients + 115 MiB master, m, v on one rank
    ck_assert_msg(whole > 150e6, "one rank's host peak %.0f: the states are not all on the host", whole);
    ck_assert_msg(r0 < 0.6 * whole && r1 < 0.6 * whole && r0 > 0.4 * whole && r1 > 0.4 * whole,
                  "host peaks per rank %.0f and %.0f against %.0f on one rank: not halved", r0, r1, whole);
    ck_assert_msg(strstr(two.out, "\nranks: 2, each holding its 1/2 piece of every state; peaks per rank: 0: device "),
                  "the run does not say each rank holds half: %s", two.out);
    char *h2 = summary_field(two.log, "params_hash"), *h1 = summary_field(one.log, "params_hash");
    ck_assert_str_eq(h2, h1);
    free(h2); free(h1); free(peaks); free(p1);
    run_free(&two); run_free(&one);
}
END_TEST

// plan --ranks 2 (no launcher): rank 0's pieces, the node's two ranks together, the bytes each
// rank sends, and a %r NVMe folder that train would make, judged by the folder above it.
static long long plan_field(const char *out, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(out, k);
    return p ? atoll(p + strlen(k)) : -1;
}

START_TEST(test_plan_ranks) {
    char *dir = tu_tmpdir("ranks-plan");
    char nv[1200];
    snprintf(nv, sizeof nv, "%.1100s/r%%r", dir);
    char *argv2[] = {(char *)tu_binary(), "plan", "--model", "small", "--optimizer", "nvme", "--nvme-path", nv,
                     "--ranks", "2", NULL};
    char *argv1[] = {(char *)tu_binary(), "plan", "--model", "small", "--optimizer", "nvme", "--nvme-path", nv, NULL};
    char *o2, *e2, *o1, *e1;
    int r2 = tu_run(argv2, env_common, &o2, &e2), r1 = tu_run(argv1, env_common, &o1, &e1);
    ck_assert_msg(r2 == 0 && r1 == 0, "plan failed: %s %s", e2, e1);
    ck_assert_msg(strstr(o2, "ranks: 2 (2 on this node") && strstr(o2, "each holding its 1/2 piece of every state"),
                  "no ranks line: %s", o2);
    ck_assert_int_eq(plan_field(o2, "ranks"), 2);
    ck_assert_msg(plan_field(o2, "comm_bytes") > 0 && plan_field(o1, "comm_bytes") == 0, "comm_bytes: %s", o2);
    // master, m, v of 9.6M parameters on NVMe: rank 0's pieces are about half
    long long n2 = plan_field(o2, "nvme_bytes"), n1 = plan_field(o1, "nvme_bytes");
    ck_assert_msg(n2 > 0.45 * n1 && n2 < 0.55 * n1, "nvme_bytes per rank %lld, one rank %lld", n2, n1);
    ck_assert_msg(plan_field(o2, "nvme_free") > 0, "the %%r folder's free space was not found: %s", o2);
    ck_assert_msg(strstr(o2, "\"ranks link\":"), "no ranks link in the floor: %s", o2);
    free(o2); free(e2); free(o1); free(e1);
    rmdir(dir);
    free(dir);
}
END_TEST

// ---------------------------------------------------------------- checkpoints

// A checkpoint of 2 ranks resumes on 1 (with twice the accumulation) to the bits of the
// uninterrupted 1-rank run, and a checkpoint of 1 rank resumes on 2; --resume keeps the step's
// micro-batches (--accum × ranks) without an --accum flag on either side.
START_TEST(test_checkpoint_world_sizes) {
    char *dir = tu_tmpdir("ranks-ckpt");
    char a[1024], ck[1200];
    snprintf(a, sizeof a, "%s --accum 2", base);
    run_t ref = train(0, "ranks-ref", a, NULL, NULL);
    ck_assert_msg(ref.rc == 0, "%s", ref.err);
    char *href = summary_field(ref.log, "params_hash");
    for (int from = 2; from >= 1; from--) {
        snprintf(ck, sizeof ck, "%s/from%d", dir, from);
        // steps 1..2 on `from` ranks, saved; then 3..4 on the other world size
        snprintf(a, sizeof a, "--model tiny --steps 2 --eval-every 0 --seed 7 --save %.400s %s", ck,
                 from == 2 ? "" : "--accum 2");
        run_t s = train(from == 2 ? 2 : 0, "ranks-save", a, NULL, NULL);
        ck_assert_msg(s.rc == 0, "save on %d: %s", from, s.err);
        snprintf(a, sizeof a, "--model tiny --steps 4 --eval-every 0 --seed 7 --resume %.400s", ck);
        run_t r = train(from == 2 ? 0 : 2, "ranks-resume", a, NULL, NULL);
        ck_assert_msg(r.rc == 0, "resume of %d ranks' checkpoint: %s", from, r.err);
        ck_assert_msg(!strstr(r.err, "--accum"), "resume of %d ranks' checkpoint: %s", from, r.err);
        char *h = summary_field(r.log, "params_hash");
        ck_assert_msg(h && !strcmp(h, href), "saved on %d rank(s), resumed on %d: %s, uninterrupted %s", from,
                      from == 2 ? 1 : 2, h ? h : "(none)", href);
        free(h);
        run_free(&s); run_free(&r);
    }
    free(href);
    run_free(&ref);
    // one micro-batch a step cannot be shared by 2 ranks: refused, naming the count and the fix
    snprintf(ck, sizeof ck, "%s/one", dir);
    snprintf(a, sizeof a, "--model tiny --steps 2 --eval-every 0 --seed 7 --save %.400s", ck);
    run_t s = train(0, "ranks-save1", a, NULL, NULL);
    ck_assert_msg(s.rc == 0, "%s", s.err);
    snprintf(a, sizeof a, "--model tiny --steps 4 --eval-every 0 --seed 7 --resume %.400s", ck);
    run_t r = train(2, "ranks-resume1", a, NULL, NULL);
    char want[1600];
    snprintf(want, sizeof want, "tiertrain: --resume %s: its steps take 1 micro-batch (--accum 1 on 1 rank), which 2 "
             "ranks cannot share evenly (run on a number of ranks that divides 1, or give --accum to train with another "
             "batch)\n", ck);
    ck_assert_msg(r.rc == 2 && strstr(r.err, want), "exit %d, want 2 and \"%s\":\n%s", r.rc, want, r.err);
    run_free(&s); run_free(&r);
    ck_assert_int_eq(tu_rm_rf(dir), 0);
    free(dir);
}
END_TEST

// Rank 0 and rank 1 of one job (an MPMD command line) in folders dir0 and dir1, each running
// `tiertrain` with args (relative paths in them resolve in each rank's own folder).
static run_t train_in_folders(char *dir0, char *dir1, char *const args[]) {
    char *argv[96];
    int n = 0;
    argv[n++] = mpirun;
    argv[n++] = "--oversubscribe";
    for (int r = 0; r < 2; r++) {
        if (r) argv[n++] = ":";
        argv[n++] = "-np";
        argv[n++] = "1";
        argv[n++] = "-wdir";
        argv[n++] = r ? dir1 : dir0;
        for (int i = 0; env_common[i]; i++) {
            argv[n++] = "-x";
            argv[n++] = env_common[i];
        }
        argv[n++] = (char *)tu_binary();
        for (int i = 0; args[i]; i++) argv[n++] = args[i];
    }
    argv[n] = NULL;
    run_t r = {0};
    r.rc = tu_run(argv, env_common, &r.out, &r.err);
    return r;
}

// r's final params_hash (its done line: it ran without --log) is ref's summary's.
static void assert_done_hash(const run_t *r, const run_t *ref) {
    char *href = summary_field(ref->log, "params_hash");
    const char *done = strstr(r->out, "done: ");
    done = done ? strstr(done, "params_hash ") : NULL;
    ck_assert_msg(done && href && !strncmp(done + 12, href, 16), "2 ranks: %s; one rank %s", r->out, href);
    free(href);
}

// Rank 0 alone reads the checkpoint: rank 1 runs in a folder where the (relative) --resume
// path does not exist, as on a node without the shared filesystem, and the run still
// resumes to the uninterrupted run's bits.
START_TEST(test_resume_rank0_reads) {
    char *a = tu_tmpdir("ranks-nfs-a"), *b = tu_tmpdir("ranks-nfs-b");
    char ck[1200], args[1200];
    snprintf(ck, sizeof ck, "--model tiny --steps 2 --eval-every 0 --seed 7 --accum 2 --save %.900s/ck", a);
    run_t s = train(0, "ranks-nfs-save", ck, NULL, NULL);
    ck_assert_msg(s.rc == 0, "%s", s.err);
    snprintf(args, sizeof args, "%s --accum 2", base);
    run_t ref = train(0, "ranks-nfs-ref", args, NULL, NULL);
    ck_assert_msg(ref.rc == 0, "%s", ref.err);
    static char *const rest[] = {"train", "--model", "tiny", "--steps", "4", "--eval-every", "0", "--seed", "7",
                                 "--resume", "ck", NULL};
    run_t r = train_in_folders(a, b, rest);
    ck_assert_msg(r.rc == 0, "resume with rank 1 away from the files failed (%d): %s", r.rc, r.err);
    assert_done_hash(&r, &ref);
    run_free(&s); run_free(&ref); run_free(&r);
    ck_assert_int_eq(tu_rm_rf(a), 0);
    ck_assert_int_eq(tu_rm_rf(b), 0);
    free(a);
    free(b);
}
END_TEST

// The same for --init-from: rank 1 runs where the relative folder does not exist; the run
// starts from rank 0's read of it and gives the bits of one rank with twice the accumulation.
START_TEST(test_init_from_rank0_reads) {
    char *away = tu_tmpdir("ranks-hf-away"), fixtures[1200], abs_dir[1300];
    snprintf(fixtures, sizeof fixtures, "%s/fixtures", TT_TESTS_DIR);
    snprintf(abs_dir, sizeof abs_dir, "%s/hf_tiny", fixtures);
    char one[1500];
    snprintf(one, sizeof one, "--init-from %s --steps 3 --eval-every 0 --accum 2", abs_dir);
    run_t ref = train(0, "ranks-hf-ref", one, NULL, NULL);
    ck_assert_msg(ref.rc == 0, "%s", ref.err);
    static char *const rest[] = {"train", "--init-from", "hf_tiny", "--steps", "3", "--eval-every", "0", NULL};
    run_t r = train_in_folders(fixtures, away, rest);
    ck_assert_msg(r.rc == 0, "--init-from with rank 1 away from the folder failed (%d): %s", r.rc, r.err);
    assert_done_hash(&r, &ref);
    run_free(&ref); run_free(&r);
    rmdir(away);
    free(away);
}
END_TEST

// ---------------------------------------------------------------- failures

// An I/O error on rank 1 stops both, each with exit 1; rank 0 names rank 1 and the error.
START_TEST(test_io_error_on_rank_1) {
    char *dir = tu_tmpdir("ranks-eio");
    char a[1024];
    snprintf(a, sizeof a, "%s --params nvme --optimizer nvme --nvme-path %s", base, dir);
    run_t r = train(2, "ranks-eio-log", a, "TT_IO_FAULT=read:eio@20", NULL);
    ck_assert_msg(r.rc == 1, "exit %d, want 1: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.err, "tiertrain: step ") && strstr(r.err, ": rank 1: ") &&
                  strstr(r.err, "Input/output error"), "rank 0 does not name rank 1's error: %s", r.err);
    run_free(&r);
    ck_assert_int_eq(tu_rm_rf(dir), 0);
    free(dir);
}
END_TEST

// A rank killed mid-run brings the job down through the launcher: mpirun ends non-zero, and
// no rank is left waiting in a collective (the run ends well within its timeout).
START_TEST(test_rank_killed) {
    char a[512];
    snprintf(a, sizeof a, "%s --steps 40", base);
    double t0 = now_s();
    run_t r = train(2, "ranks-kill", a, "TT_TEST_KILL_AT_STEP=2", NULL);
    double secs = now_s() - t0;
    ck_assert_msg(r.rc != 0, "the job ended well with a rank killed: %s", r.out);
    ck_assert_msg(secs < 60, "the job took %.0f s to end after a rank died", secs);
    ck_assert_msg(!strstr(r.out, "done:"), "rank 0 finished the run: %s", r.out);
    ck_assert_msg(strstr(r.err, "signal 9"), "mpirun does not say a rank died of SIGKILL: %s", r.err);
    run_free(&r);
}
END_TEST

// Different flags on the two ranks: exit 2 before any step, naming the first that differs.
START_TEST(test_flags_differ) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s --lr 1e-3", base);
    snprintf(b, sizeof b, "%s --lr 2e-3", base);
    run_t r = train(2, "ranks-flags", a, NULL, b);
    ck_assert_msg(r.rc == 2, "exit %d, want 2: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.err, "tiertrain: rank 1: --lr differs from rank 0's (every rank must be given the same "
                                "flags and environment: check the launcher's command line)\n"),
                  "no line naming --lr: %s", r.err);
    ck_assert_msg(!strstr(r.out, "step "), "a step ran: %s", r.out);
    run_free(&r);
    // and the environment that shapes the pieces: another optimizer chunk on rank 1 (it once
    // truncated the gathers and corrupted the heap)
    r = train(2, "ranks-env", base, "TT_OPT_CHUNK=2048", NULL);
    ck_assert_msg(r.rc == 2, "exit %d, want 2: %s", r.rc, r.err);
    ck_assert_msg(strstr(r.err, "tiertrain: rank 1: TT_OPT_CHUNK=2048 differs from rank 0's TT_OPT_CHUNK unset (every "
                                "rank must be given the same flags and environment: check the launcher's command "
                                "line)\n"), "no line naming TT_OPT_CHUNK: %s", r.err);
    ck_assert_msg(!strstr(r.out, "step "), "a step ran: %s", r.out);
    run_free(&r);
}
END_TEST

int main(void) {
#ifndef TT_HAVE_MPI
    fprintf(stderr, "test_ranks: this build has no MPI (libopenmpi-dev): skipped\n");
    return 77;
#endif
    if (!find_mpirun()) {
        fprintf(stderr, "test_ranks: no mpirun on PATH (Debian's openmpi-bin): skipped\n");
        return 77;
    }
    Suite *s = suite_create("ranks");
    TCase *tc = tcase_create("invariance");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, test_invariance, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_one_rank_launched);
    tcase_add_test(tc, test_states_halved);
    tcase_add_test(tc, test_plan_ranks);
    suite_add_tcase(s, tc);
    TCase *tk = tcase_create("checkpoints");
    tcase_set_timeout(tk, 900);
    tcase_add_test(tk, test_checkpoint_world_sizes);
    tcase_add_test(tk, test_resume_rank0_reads);
    tcase_add_test(tk, test_init_from_rank0_reads);
    suite_add_tcase(s, tk);
    TCase *tf = tcase_create("faults");
    tcase_set_timeout(tf, 900);
    tcase_add_test(tf, test_io_error_on_rank_1);
    tcase_add_test(tf, test_rank_killed);
    tcase_add_test(tf, test_flags_differ);
    suite_add_tcase(s, tf);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
