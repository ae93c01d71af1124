// train.c — `tiertrain train` and `tiertrain plan`: print the resolved configuration,
// build the trainer, run the steps (one line each, optional JSONL), evaluate on the
// held-out split, and end with the summary and the tier report.
#include "train.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdarg.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "data.h"
#include "hf.h"
#include "json.h"
#include "model.h"
#include "plan.h"
#include "report.h"
#include "trainer.h"
#include "trace.h"
#include "util.h"

// ---------------------------------------------------------------- shared

// A failure every rank agreed on (comm_agree): rank 0 says it, naming the rank; every rank
// exits with its code (1 at run time, 2 for bad input).
static void agreed_error(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void agreed_error(int rc, const char *fmt, ...) {
    if (comm_rank(comm_world()) != 0) exit(exit_code_of(rc));
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fail_with(rc, "%s", line);
}

// No profile yet: the quick calibration, once, in a child (`tiertrain bench calibrate` on this
// run's device, threads and --nvme-path), which writes the profile where the run looks for
// it. The NVMe rate is measured on the run's own NVMe working set (at least 256 MiB, at most
// 4 GiB: small files read from the page cache). TT_CALIBRATE=0 (the test suites) skips it.
// Returns 0 once the profile is there.
static int calibrate_once(const config_t *cfg, const char *path) {
    const char *env = getenv("TT_CALIBRATE");
    if (env && !strcmp(env, "0")) return -1;
    model_t m;
    model_init(&m, cfg);
    tier_layout_t *lay = malloc(sizeof *lay); // what this run will hold on NVMe: the layout says
    if (lay) tier_layout(cfg, &m, cfg->device == DEVICE_CUDA ? DEVICE_CUDA : DEVICE_CPU, lay);
    uint64_t size = lay ? lay->nvme_bytes : 0;
    free(lay);
    model_free(&m);
    size = size < (256ull << 20) ? 256ull << 20 : size > (4ull << 30) ? 4ull << 30 : size;
    char sz[32], thr[16];
    snprintf(sz, sizeof sz, "%lluM", (unsigned long long)(size >> 20));
    snprintf(thr, sizeof thr, "%d", cfg->threads);
    notice("no calibration profile at %s: measuring this machine's rates once (about 5 s, NVMe over %s), so the "
           "floor is this machine's (tiertrain bench calibrate measures them at length)", path, sz);
    double t0 = now_ms();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        // a rank's child is no rank: it must not join the launcher's world (comm.c's test)
        unsetenv("OMPI_COMM_WORLD_SIZE");
        unsetenv("PMI_SIZE");
        unsetenv("PMIX_RANK");
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDOUT_FILENO); // its table is for bench calibrate's own user
        char *argv[] = {"tiertrain", "bench", "calibrate", "--quick", "--size", sz, "--device",
                        cfg->device == DEVICE_CUDA ? "cuda" : "cpu", "--threads", thr, "--profile", (char *)path,
                        cfg->nvme_path[0] ? "--nvme-path" : NULL, (char *)cfg->nvme_path, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        notice("the calibration failed (status %#x): the plan uses built-in rates", status);
        return -1;
    }
    notice("calibrated in %.1f s; profile written to %s", (now_ms() - t0) / 1e3, path);
    return 0;
}

const profile_t *train_load_profile(const config_t *cfg, profile_t *prof) {
    char path[TT_PATH_MAX + 64], err[768];
    profile_path(cfg, path, sizeof path);
    int rc = profile_load(prof, path, err, sizeof err);
    comm_t *w = comm_world();
    if (comm_size(w) > 1 && !cfg->profile_path[0]) {
        // ranks: one calibration per node, by its first rank, while the others wait for it
        int any = 0;
        char e2[512];
        if (comm_max_int(w, rc == -ENOENT, &any, e2, sizeof e2) != 0) runtime_error("%s", e2);
        if (any) {
            if (comm_local_rank(w) == 0 && rc == -ENOENT && path[0]) calibrate_once(cfg, path);
            if (comm_barrier(w, e2, sizeof e2) != 0) runtime_error("%s", e2);
            rc = profile_load(prof, path, err, sizeof err);
        }
    } else if (rc == -ENOENT && !cfg->profile_path[0] && path[0] && calibrate_once(cfg, path) == 0) {
        rc = profile_load(prof, path, err, sizeof err);
    }
    if (rc == 0) {
        // rates of another device (a CPU profile for a GPU run, or back) would misplace the floor
        const char *dev = cfg->device == DEVICE_CUDA ? "cuda" : "cpu";
        if (strcmp(prof->backend, dev) != 0 && !cfg->quiet)
            notice("profile %s was measured on the %s backend and this run uses %s: the floor's rates may not apply "
                   "(run tiertrain bench calibrate here%s)",
                   path, prof->backend, dev, cfg->profile_path[0] ? " with another --profile" : "");
        return prof;
    }
    if (rc == -ENOENT && !cfg->profile_path[0]) return NULL;
    if (rc == -ENOENT) usage_error("--profile %s: no such file (tiertrain bench calibrate --profile %s writes it)", path, path);
    if (cfg->profile_path[0]) usage_error("--%s", err); // err: "profile PATH: ..."
    notice("%s; the plan uses built-in rates", err);
    return NULL;
}

static void print_model(const model_t *m, const config_t *cfg, FILE *f) {
    char a[32], mlp[96] = "";
    const int N = cfg->B * cfg->T, chunks = model_mlp_chunks(m, N);
    if (chunks > 1) snprintf(mlp, sizeof mlp, "; the MLP in %d chunks of %d rows", chunks, model_mlp_rows(m, N));
    fprintf(f, "model: %s%s — %.2fM parameters in %d shards (largest %s as BF16), L=%d C=%d NH=%d NKV=%d HS=%d F=%d V=%d T=%d%s%s\n",
            config_model_source(cfg) ? config_model_source(cfg) : cfg->preset,
            config_model_source(cfg) ? "'s" : cfg->preset[0] ? "" : "custom",
            m->num_params / 1e6, m->nshards,
            format_bytes(a, sizeof a, m->max_shard_numel * 2), m->L, m->C, m->NH, m->NKV, m->HS, m->F, m->V, m->T,
            m->tie ? " tied" : "", mlp);
}

static double eval_loss(trainer_t *tr, data_t *d, int *inputs, int *targets) {
    const config_t *cfg = trainer_config(tr);
    data_rewind(d, DATA_VAL);
    trainer_begin_eval(tr, cfg->eval_batches);
    double sum = 0;
    for (int i = 0; i < cfg->eval_batches; i++) {
        data_next(d, DATA_VAL, inputs, targets);
        sum += trainer_forward(tr, inputs, targets);
    }
    char msg[768] = "";
    if (trainer_fault(tr)) snprintf(msg, sizeof msg, "%s", trainer_fault(tr));
    int rc = comm_agree(comm_world(), msg[0] ? -EIO : 0, msg, sizeof msg); // every rank evaluates
    if (rc != 0) agreed_error(rc, "evaluation: %s", msg);
    return sum / cfg->eval_batches;
}

// ---------------------------------------------------------------- train

// SIGINT/SIGTERM: the first finishes the current step (and saves, with --save); a second
// stops at once — a half-written checkpoint is a .tmp-* folder nobody takes for one, and the
// NVMe store's files were unlinked when opened. The second prints one line first, saying
// what was abandoned and which checkpoint is the newest complete one: written outside the
// handler into the buffer not in use, then published with one store (a handler may only
// write()).
static volatile sig_atomic_t stop_signal;
static volatile sig_atomic_t signal_quiet; // a rank other than 0
static char stop_lines[2][TT_PATH_MAX + 256];
static size_t stop_lens[2];
static volatile sig_atomic_t stop_line = -1; // the buffer the handler prints, -1 none

static void set_stop_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_stop_line(const char *fmt, ...) {
    int k = stop_line == 0 ? 1 : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(stop_lines[k], sizeof stop_lines[k], fmt, ap);
    va_end(ap);
    stop_lens[k] = n < 0 ? 0 : (size_t)n < sizeof stop_lines[k] ? (size_t)n : sizeof stop_lines[k] - 1;
    stop_line = k;
}

static void on_signal(int sig) {
    if (stop_signal) {
        int k = stop_line;
        if (k >= 0) {
            ssize_t w = write(STDERR_FILENO, stop_lines[k], stop_lens[k]);
            (void)w;
        }
        _exit(128 + sig);
    }
    stop_signal = sig;
    if (signal_quiet) return; // ranks other than 0: rank 0 says it
    static const char msg[] = "tiertrain: stopping after this step (and saving, with --save); signal again to stop at once\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1); // async-signal-safe; nothing to do if it fails
    (void)w;
}

static void catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// "the newest complete checkpoint is DIR/step-N" or "there is no complete checkpoint in DIR".
static const char *newest_said(const config_t *cfg, char *out, size_t len) {
    char dir[TT_PATH_MAX];
    if (!cfg->save_dir[0]) snprintf(out, len, "no checkpoint was asked for (no --save)");
    else if (checkpoint_newest(cfg->save_dir, dir, sizeof dir) >= 0)
        snprintf(out, len, "the newest complete checkpoint is %s", dir);
    else snprintf(out, len, "there is no complete checkpoint in %s", cfg->save_dir);
    return out;
}

// What a second signal will say while steps run (the save sets its own).
static void stop_line_steps(const config_t *cfg) {
    char said[TT_PATH_MAX + 64];
    set_stop_line("tiertrain: second signal: stopped at once, in the middle of a step; %s\n",
                  newest_said(cfg, said, sizeof said));
}

// Returns the params_hash of the states saved (every rank's: the save hashes what it gathers).
static uint64_t save_checkpoint(trainer_t *tr, const data_t *data, const hf_extras_t *carry, int step, FILE *log,
                                char *where, size_t wlen) {
    char err[768], said[TT_PATH_MAX + 64], what[TT_PATH_MAX + 128];
    const config_t *cfg = trainer_config(tr);
    const int saver = comm_rank(comm_world()) == 0; // the states are every rank's: rank 0 writes them
    newest_said(cfg, said, sizeof said);
    set_stop_line("tiertrain: second signal: the save of step %d was abandoned; %s\n", step, said);
    // the update in flight must have landed before the hash: its error belongs to this step
    int rc = trainer_optimizer_wait(tr, err, sizeof err);
    if ((rc = comm_agree(comm_world(), rc, err, sizeof err)) != 0) agreed_error(rc, "step %d: %s (%s)", step, err, said);
    uint64_t hash = 0;
    double t0 = now_ms();
    // ranks: rank 0 writes, all gather
    rc = checkpoint_save(tr, data, carry, step, &hash, where, wlen, err, sizeof err);
    if ((rc = comm_agree(comm_world(), rc, err, sizeof err)) != 0) {
        snprintf(what, sizeof what, "%s", newest_said(cfg, said, sizeof said));
        agreed_error(rc, "step %d: checkpoint: %s (%s)", step, err, what);
    }
    if (!saver) return hash;
    stop_line_steps(cfg);
    fprintf(stdout, "checkpoint: step %d saved to %s (%.1f s)\n", step, where, (now_ms() - t0) / 1e3);
    if (log) {
        char esc[TT_PATH_MAX * 2];
        if (json_escape(esc, sizeof esc, where, strlen(where)) < 0) snprintf(esc, sizeof esc, "\"?\"");
        fprintf(log, "{\"event\":\"checkpoint\",\"step\":%d,\"path\":%s,\"params_hash\":\"%016llx\"}\n", step, esc,
                (unsigned long long)hash);
        fflush(log);
    }
    return hash;
}

// One `train` run: what its phases share.
typedef struct {
    config_t cfg;             // resolved: --offload auto may choose the homes, a GPU the budget
    data_t *data;
    ckpt_info_t ck;           // --resume's checkpoint
    hf_extras_t carry;        // what every checkpoint carries over from --init-from's or --resume's folder
    int start;                // the first step to run
    plan_t plan;
    profile_t prof;
    FILE *log;                // --log, or NULL
    int log_made;             // this run created the --log file (else it was there, and is kept until log_start)
    trainer_t *tr;
    int N;                    // rows per micro-batch
    int *inputs, *targets;    // (accum, N) the step's micro-batches
    double first_loss, last_loss, total_ms, last_val;
    int timed_steps, last_step;
    char saved[TT_PATH_MAX + 64]; // the newest checkpoint this run saved
    int lock_fd;              // --save DIR/.lock, held for the run (0: none)
    int saved_step;           // the step of this run's newest checkpoint (every rank's; 0: none)
    uint64_t saved_hash;      // its params_hash
    int rank, ranks;          // this rank and the world's (comm.h)
    int *skip_in, *skip_tg;   // (N) the other ranks' micro-batches, read past
    int kill_at;              // TT_TEST_KILL_AT_STEP: the step after which this process kills itself (0: never)
    int log_full_at;          // TT_TEST_LOG_FULL_AT_STEP: the step whose --log line fails as on a full disk (0: never)
    int log_errno, log_step;  // --log's write failed at log_step (rank 0; -1 on the others: rank 0's did)
} run_t;

// --nvme-path for this rank: each DIR's "%r" becomes the rank, or, without one and with
// several ranks, DIR/rank-R (made when missing).
static void rank_nvme_path(config_t *cfg, int rank, int ranks) {
    if (!cfg->nvme_path[0] || (ranks == 1 && !strstr(cfg->nvme_path, "%r"))) return;
    char out[TT_PATH_MAX] = "", in[TT_PATH_MAX], *save = NULL;
    snprintf(in, sizeof in, "%s", cfg->nvme_path);
    size_t len = 0;
    for (char *dir = strtok_r(in, ",", &save); dir; dir = strtok_r(NULL, ",", &save)) {
        char one[TT_PATH_MAX];
        char *pr = strstr(dir, "%r");
        if (pr) snprintf(one, sizeof one, "%.*s%d%.400s", (int)(pr - dir), dir, rank, pr + 2);
        else if (ranks > 1) snprintf(one, sizeof one, "%.400s/rank-%d", dir, rank);
        else snprintf(one, sizeof one, "%.400s", dir);
        if (mkdir(one, 0755) != 0 && errno != EEXIST)
            usage_error("--nvme-path %s: rank %d's folder %s: %s (give --nvme-path a writable folder)", cfg->nvme_path,
                        rank, one, strerror(errno));
        int n = snprintf(out + len, sizeof out - len, "%s%s", len ? "," : "", one);
        if (n < 0 || (size_t)n >= sizeof out - len)
            usage_error("--nvme-path %s: too long once per rank (use shorter folders)", cfg->nvme_path);
        len += (size_t)n;
    }
    snprintf(cfg->nvme_path, sizeof cfg->nvme_path, "%s", out);
}

// Under a launcher: every rank must have been given the same flags (rank 0's resolved
// configuration against each rank's, flag by flag: exit 2 naming the first that differs);
// each rank gets its own NVMe folders; only rank 0 writes --log, --trace and checkpoints.
static void ranks_setup(run_t *r) {
    comm_t *w = comm_world();
    r->rank = comm_rank(w);
    r->ranks = comm_size(w);
    if (r->ranks == 1) {
        rank_nvme_path(&r->cfg, 0, 1);
        return;
    }
    config_t *cfg = &r->cfg, *c0 = mallocCheck(sizeof *c0);
    *c0 = *cfg;
    char err[768] = "";
    int rc = comm_bcast(w, c0, sizeof *c0, 0, err, sizeof err);
    const char *flag = rc == 0 ? cli_first_difference(c0, cfg) : NULL;
    free(c0);
    if (flag) {
        snprintf(err, sizeof err, "--%s differs from rank 0's (every rank must be given the same flags and "
                 "environment: check the launcher's command line)", flag);
        rc = -EINVAL;
    }
    // the environment that shapes the states' pieces or the bits (README "Testing hooks"): a
    // rank with another optimizer chunk would gather pieces of other sizes
    // (every rank takes part in every broadcast, whatever it found before)
    static const char *const shaping[] = {"TT_OPT_CHUNK", "TT_TEST_VOCAB_CHUNK", "TT_TEST_MLP_ROWS", "TT_TEST_FP32_ACTS"};
    for (size_t i = 0; i < sizeof shaping / sizeof shaping[0]; i++) {
        char mine[128], first[128], e2[256];
        const char *v = getenv(shaping[i]);
        snprintf(mine, sizeof mine, "%s%.100s", v ? "=" : " unset", v ? v : "");
        memcpy(first, mine, sizeof first);
        if (comm_bcast(w, first, sizeof first, 0, e2, sizeof e2) != 0) {
            if (rc == 0) { rc = -EIO; snprintf(err, sizeof err, "%s", e2); }
        } else if (rc == 0 && strcmp(first, mine) != 0) {
            snprintf(err, sizeof err, "%s%s differs from rank 0's %s%s (every rank must be given the same flags and "
                     "environment: check the launcher's command line)", shaping[i], mine, shaping[i], first);
            rc = -EINVAL;
        }
    }
    if ((rc = comm_agree(w, rc, err, sizeof err)) != 0) agreed_error(rc, "%s", err);
    rank_nvme_path(cfg, r->rank, r->ranks);
    if (r->rank != 0) cfg->log_path[0] = cfg->trace_path[0] = 0;
}

// --resume's checkpoint (found and read) against this run: its model, and a step left to do.
// Exits 2 when it does not fit.
static void resume_fits(const config_t *cfg, const ckpt_info_t *ck) {
    char err[768];
    if (checkpoint_check_config(ck, cfg, err, sizeof err) != 0) usage_error("%s", err);
    if (ck->step >= cfg->steps)
        usage_error("--resume %s: the checkpoint is at step %d and --steps is %d: nothing left to do (raise --steps)",
                    cfg->resume, ck->step, cfg->steps);
}

// Everything that can be refused is, before any allocation: the data, --resume's checkpoint
// against this model, and whether the placement fits (the check `tiertrain plan` prints, for
// the device that will run: a GPU's memory is not RAM). Exits 2 on bad input.
static void run_check(run_t *r) {
    config_t *cfg = &r->cfg;
    char err[768] = "";
    if (data_open(&r->data, cfg, err, sizeof err) != 0) usage_error("%s", err);
    r->start = 1;
    if (cfg->resume[0]) {
        // with ranks rank 0 alone reads the folder (no shared filesystem needed) and says what it found
        char dir[TT_PATH_MAX];
        int rc = 0, info_rc = 0; // info_rc: the folder was found, its files are bad
        if (r->rank == 0 && (rc = checkpoint_resolve(cfg->resume, dir, sizeof dir, err, sizeof err)) == 0)
            rc = info_rc = checkpoint_info(dir, &r->ck, err, sizeof err);
        // an output inside the folder the run reads would truncate one of its files first (said
        // through the broadcast below, as every other refusal here: the ranks leave together)
        for (int o = 0; o < 2 && rc == 0; o++) {
            const char *flag = o ? "--trace" : "--log", *out = o ? cfg->trace_path : cfg->log_path;
            if (path_inside(out, dir)) {
                snprintf(err, sizeof err, "%s %.300s: lies inside --resume's checkpoint %.300s, which the run reads "
                         "(choose a path outside it)", flag, out, dir);
                rc = -EINVAL;
            }
        }
        // a --save directory inside a checkpoint folder would nest checkpoints that the pruning
        // of the folder's own --save directory takes away with it
        const int same = cfg->save_dir[0] && path_same_file(cfg->save_dir, dir);
        if (rc == 0 && (same || (cfg->save_dir[0] && path_inside(cfg->save_dir, dir)))) {
            snprintf(err, sizeof err, "--save %.300s: %s --resume's checkpoint %.300s, a folder of one step's files "
                     "(give the --save directory it came from, or a new one)", cfg->save_dir, same ? "is" : "lies inside",
                     dir);
            rc = -EINVAL;
        }
        if (comm_bcast_rc(comm_world(), rc, "--resume's folder", err, sizeof err) != 0) { // rank 0 says why
            if (info_rc) agreed_error(-EINVAL, "--resume %s: %s", cfg->resume, err);
            agreed_error(-EINVAL, "%s", err);
        }
        char e2[512];
        if (comm_bcast(comm_world(), &r->ck, sizeof r->ck, 0, e2, sizeof e2) != 0) runtime_error("%s", e2);
        resume_fits(cfg, &r->ck);
        r->start = r->ck.step + 1;
    }
    if (backend_resolve_config(cfg, err, sizeof err) != 0) usage_error("%s", err);
#ifndef TT_HAVE_NCCL
    if (r->ranks > 1 && cfg->device == DEVICE_CUDA)
        usage_error("--device cuda with %d ranks: this build has no NCCL, which the CUDA backend's collectives need "
                    "(rebuild where the CUDA toolkit has nccl.h and libnccl, or run the ranks with --device cpu)",
                    r->ranks);
#endif
    model_t shape;
    model_init(&shape, cfg);
    const profile_t *rates = train_load_profile(cfg, &r->prof);
    if (cfg->offload_auto) {
        char why[1024];
        if (!plan_auto(cfg, &shape, rates, &r->plan, why, sizeof why)) usage_error("%s", why);
        printf("%s\n", why);
    } else {
        plan_compute(cfg, &shape, rates, &r->plan);
    }
    char rwhy[512];
    if (r->plan.feasible && plan_recompute_auto(cfg, &shape, rates, &r->plan, rwhy, sizeof rwhy)) printf("%s\n", rwhy);
    plan_cache_autos(cfg, &shape, rates, &r->plan, stdout);
    if (plan_nvme_scale_note(&r->plan, rwhy, sizeof rwhy) && !cfg->quiet) notice("%s", rwhy);
    if (r->start > 1) plan_save_space(cfg, &shape, r->start, &r->plan); // the saves still to come
    if (!r->plan.feasible) { // with the changes plan would list, each judged to fit (not every flag named above does alone)
        plan_advise(cfg, &shape, rates, &r->plan);
        char fits[400] = "";
        for (int i = 0, n = 0; i < r->plan.nsugg; i++)
            n += snprintf(fits + n, sizeof fits - (size_t)n, "%s%s", i ? "; " : "; changes that fit: ",
                          r->plan.sugg[i].change);
        usage_error("%s%s", r->plan.reason, fits);
    }
    model_free(&shape);
    if (cfg->save_dir[0] && r->rank == 0) { // one writer per --save directory, for the whole run
        int fd = checkpoint_lock(cfg->save_dir, err, sizeof err);
        if (fd == -EBUSY) usage_error("%s", err);
        if (fd < 0) fail_with(fd, "%s", err);
        r->lock_fd = fd;
        // Another run's checkpoints: this run's saves would replace those of its steps, and
        // --keep-last prune the rest. Only a run that continues them (--resume from one of them)
        // saves there; under the lock, so no other run adds one after the look.
        uint64_t size;
        const int continues = cfg->resume[0] && path_inside(r->ck.dir, cfg->save_dir);
        if (!continues && checkpoint_existing(cfg->save_dir, &size, 1) > 0) {
            char newest[TT_PATH_MAX], said[TT_PATH_MAX + 16] = "";
            const int found = checkpoint_newest(cfg->save_dir, newest, sizeof newest);
            if (found >= 0) snprintf(said, sizeof said, " (newest %s)", newest);
            // without a latest that names one, --resume takes the folder itself
            usage_error("--save %s: holds another run's checkpoints%s: continue them (--resume %s), or give a new "
                        "--save directory", cfg->save_dir, said, found == 1 ? newest : cfg->save_dir);
        }
    }
}

// Output files only once the run is known to be possible: bad input leaves none behind. The
// --log file is opened here (a path it cannot write is refused before the trainer's init) but
// an existing one is truncated only by log_start, once --resume's checkpoint or --init-from's
// weights have loaded: a run refused there leaves an earlier run's log as it was.
static void log_drop(run_t *r);

// A --trace path that cannot be written: bad input, and a --log file the run made goes too.
static void trace_refused(run_t *r, int trc) __attribute__((noreturn));
static void trace_refused(run_t *r, int trc) {
    log_drop(r);
    usage_error("--trace %s: %s (give a writable path)", r->cfg.trace_path, strerror(-trc));
}

static void run_open_outputs(run_t *r) {
    const config_t *cfg = &r->cfg;
    if (cfg->log_path[0]) {
        int fd = open(cfg->log_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        r->log_made = fd >= 0;
        if (fd < 0 && errno == EEXIST) fd = open(cfg->log_path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || !(r->log = fdopen(fd, "w")))
            usage_error("--log %s: %s (give a writable path)", cfg->log_path, strerror(errno));
    }
    // --trace: room for every span of the run, capped: a few per shard per micro-batch, and
    // the optimizer's three per chunk (read, update, write) each step and two at init.
    if (cfg->trace_path[0]) {
        const size_t chunks = (size_t)r->plan.lay.nchunks;
        size_t per_step = (size_t)(r->plan.lay.nshards * 8) * (size_t)(cfg->accum + 1) + 3 * chunks + 64;
        size_t max_events = per_step * (size_t)(cfg->steps + 1) + 2 * chunks;
        if (max_events > (size_t)4 << 20) max_events = (size_t)4 << 20;
        int trc = trace_open(cfg->trace_path, max_events);
        if (trc != 0) trace_refused(r, trc);
    }
}

static void log_drop(run_t *r);

// The --log file's first line, once the run has loaded what it starts from: the plan it runs
// under, as `tiertrain plan` ends (tiertrain report draws the memory picture and the floor
// from it). An earlier run's log or trace at the path is replaced only now.
static void log_start(run_t *r) {
    const config_t *cfg = &r->cfg;
    int trc = trace_start();
    if (trc != 0) trace_refused(r, trc);
    if (!r->log) return;
    if (!r->log_made && ftruncate(fileno(r->log), 0) != 0)
        usage_error("--log %s: %s (give a writable path)", cfg->log_path, strerror(errno));
    model_t shape;
    model_init(&shape, cfg);
    plan_json(&r->plan, cfg, &shape, r->log);
    model_free(&shape);
    errno = 0;
    if (fflush(r->log) != 0 || ferror(r->log)) {
        const int e = errno ? errno : EIO;
        log_drop(r); // a log this run created is not left behind empty
        usage_error("--log %s: write failed: %s (give a writable path with room)", cfg->log_path, strerror(e));
    }
}

// A load refused as bad input leaves no output behind: a --log or --trace file this run
// created is removed, one that was there is left untouched (log_start has not run).
static void log_drop(run_t *r) {
    trace_drop();
    if (!r->log) return;
    fclose(r->log);
    r->log = NULL;
    if (r->log_made) unlink(r->cfg.log_path);
}

// The training settings a resumed run gives with values other than the checkpoint's (cli.c
// takes the checkpoint's where no flag is given), as "--lr 0.002 (the checkpoint's 0.001),
// ..." in out. Returns how many.
static int recipe_diff(const ckpt_info_t *ck, const config_t *c, char *out, size_t len) {
    size_t n = 0;
    int count = 0;
    out[0] = 0;
    const int synth_run = strcmp(c->data, "synthetic") == 0, synth_ck = strcmp(ck->data, "synthetic") == 0;
    if (synth_run != synth_ck || (!synth_run && !path_same_file(c->data, ck->data))) {
        n += (size_t)snprintf(out, len, "--data %.300s (the checkpoint's %.300s)", c->data, ck->data);
        count++;
    }
    // --accum is each rank's: what counts is the step's micro-batches, accum × ranks
    const int world = c->ranks > 1 ? c->ranks : 1, ck_world = ck->ranks > 0 ? ck->ranks : world;
    if ((long long)c->accum * world != (long long)ck->accum * ck_world) {
        if (world == ck_world)
            n += (size_t)snprintf(out + n, len - n, "%s--accum %d (the checkpoint's %d)", count ? ", " : "", c->accum,
                                  ck->accum);
        else
            n += (size_t)snprintf(out + n, len - n, "%s--accum %d on %d ranks (the checkpoint's %d on %d)",
                                  count ? ", " : "", c->accum, world, ck->accum, ck_world);
        count++;
    }
    for (int i = 0; i < ckpt_nrecipe && n < len; i++) { // the rest of the recipe, as cli.c took it
        const ckpt_recipe_t *rc = &ckpt_recipe[i];
        const double run = ckpt_recipe_get(rc, c, rc->cfg_off), saved = ckpt_recipe_get(rc, ck, rc->info_off);
        if (run != saved) {
            n += (size_t)snprintf(out + n, len - n, "%s--%s %g (the checkpoint's %g)", count ? ", " : "", rc->flag,
                                  run, saved);
            count++;
        }
    }
    return count;
}

// --resume: the checkpoint's states into the trainer, its data positions into the data.
static void run_resume(run_t *r) {
    const config_t *cfg = &r->cfg;
    char err[768];
    double t0 = now_ms();
    int rc = checkpoint_load(r->tr, r->data, &r->ck, 0, err, sizeof err);
    rc = comm_agree(comm_world(), rc, err, sizeof err); // with ranks: rank 0 read it for all
    if (rc != 0) log_drop(r); // a bad checkpoint is bad input
    // a corrupt file (EINVAL) or a file missing from the folder (ENOENT) is bad input
    if (rc != 0) agreed_error(load_rc(rc), "--resume %s: %s", cfg->resume, err);
    printf("resumed: %s at step %d (params_hash %s, %.1f s)\n", r->ck.dir, r->ck.step, r->ck.params_hash,
           (now_ms() - t0) / 1e3);
    char diff[2048];
    if (recipe_diff(&r->ck, cfg, diff, sizeof diff)) // allowed, but then say so
        notice("--resume %s: this run's %s: not the settings of the run that saved it (without these flags the run "
               "takes the checkpoint's)", cfg->resume, diff);
}

// --init-from: the folder's weights into the trainer (the optimizer state stays zero).
static void run_init_from(run_t *r) {
    const config_t *cfg = &r->cfg;
    char err[1024];
    int rc = hf_load(r->tr, cfg->init_from, stdout, err, sizeof err);
    rc = comm_agree(comm_world(), rc, err, sizeof err); // with ranks: rank 0 read it for all
    if (rc != 0) log_drop(r); // bad weights are bad input
    if (rc != 0) agreed_error(load_rc(rc), "%s", err);
}

// With --save, the files and token ids every checkpoint carries over from the folder the run
// started from (rank 0 writes the checkpoints; it read the folder). The folder loaded, so a
// failure here is the disk's, at the start of the run.
static void run_carry(run_t *r) {
    const config_t *cfg = &r->cfg;
    const char *from = cfg->init_from[0] ? cfg->init_from : cfg->resume[0] ? r->ck.dir : NULL;
    char err[768];
    int rc = cfg->save_dir[0] && from && r->rank == 0 ? hf_extras_read(&r->carry, from, err, sizeof err) : 0;
    if ((rc = comm_agree(comm_world(), rc, err, sizeof err)) != 0) {
        log_drop(r);
        agreed_error(load_rc(rc), "%s", err);
    }
}

// Each step's --log line reaches the file as it is written. A write error (a full disk) stops
// the run after this step, as a signal does: the checkpoint is saved (with --save), then the
// run exits 1 naming the cause; the log keeps the lines written before it.
static void log_flush(run_t *r, int step) {
    errno = 0;
    int failed = fflush(r->log) != 0 || ferror(r->log);
    if (step == r->log_full_at) { failed = 1; errno = ENOSPC; }
    if (!failed) return;
    r->log_errno = errno ? errno : EIO;
    r->log_step = step;
    fclose(r->log); // (its error is the one above)
    r->log = NULL;
}

// The steps, each printed and logged; evaluations and checkpoints on their schedule. Stops
// early, after a whole step, on SIGINT/SIGTERM.
static void run_steps(run_t *r) {
    const config_t *cfg = &r->cfg;
    char err[768];
    const int N = r->N;
    r->first_loss = r->last_loss = r->last_val = NAN;
    r->last_step = r->start - 1;
    for (int step = r->start; step <= cfg->steps && !stop_signal && !r->log_errno; step++) {
        double t0 = now_ms();
        for (int j = 0; j < cfg->accum * r->ranks; j++) { // the step's micro-batches: rank r's k-th is k·ranks + r
            const int mine = j % r->ranks == r->rank;
            const size_t at = (size_t)(j / r->ranks) * (size_t)N;
            data_next(r->data, DATA_TRAIN, mine ? r->inputs + at : r->skip_in, mine ? r->targets + at : r->skip_tg);
        }
        double loss, norm;
        float lr;
        int rc = trainer_train_step(r->tr, step, r->inputs, r->targets, &loss, &norm, &lr, err, sizeof err);
        if (rc != 0) agreed_error(rc, "step %d: %s", step, err);
        if (step == r->start && step == cfg->steps) {
            // the run's one step is its one timed step: it includes its update, which a longer
            // run's next step overlaps (left out, a 1-step run of NVMe states showed 3.4x its floor)
            rc = trainer_optimizer_wait(r->tr, err, sizeof err);
            if ((rc = comm_agree(comm_world(), rc, err, sizeof err)) != 0) agreed_error(rc, "step %d: %s", step, err);
        }
        double ms = now_ms() - t0;
        if (step == r->kill_at) raise(SIGKILL); // TT_TEST_KILL_AT_STEP: a rank dying mid-run (the ranks' tests)
        if (!isfinite(loss)) runtime_error("step %d: loss is %g (lower --lr or check the data)", step, loss);
        if (step == r->start) r->first_loss = loss;
        r->last_loss = loss;
        r->last_step = step;
        if (step > r->start || cfg->steps == r->start) { r->total_ms += ms; r->timed_steps++; }
        double tok_s = (double)N * cfg->accum * r->ranks / (ms / 1e3);
        if (!cfg->quiet)
            printf("step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %8.1f ms | %8.0f tok/s\n", step, cfg->steps, loss,
                   lr, norm, ms, tok_s);
        if (r->log) {
            fprintf(r->log, "{\"event\":\"step\",\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"step_ms\":%.3f,"
                            "\"tok_per_s\":%.1f}\n", step, loss, lr, norm, ms, tok_s);
            log_flush(r, step);
        }
        if (cfg->eval_every > 0 && (step % cfg->eval_every == 0 || step == cfg->steps)) {
            r->last_val = eval_loss(r->tr, r->data, r->inputs, r->targets);
            printf("eval  %5d | val loss %.4f\n", step, r->last_val);
            if (r->log) fprintf(r->log, "{\"event\":\"eval\",\"step\":%d,\"val_loss\":%.6f}\n", step, r->last_val);
        }
        if (cfg->save_dir[0] && cfg->save_every > 0 && step % cfg->save_every == 0 && step < cfg->steps) {
            r->saved_hash = save_checkpoint(r->tr, r->data, &r->carry, step, r->log, r->saved, sizeof r->saved);
            r->saved_step = step;
        }
        fflush(stdout);
        if (r->ranks > 1) { // a signal, or rank 0's --log failing, stops every rank after the same step
            enum { LOG_STOP = 1024 };
            int sig = r->log_errno ? LOG_STOP : stop_signal, any = 0;
            if (comm_max_int(comm_world(), sig, &any, err, sizeof err) != 0) runtime_error("step %d: %s", step, err);
            if (any == LOG_STOP && !r->log_errno) r->log_errno = -1;
            else if (any && any != LOG_STOP && !stop_signal) stop_signal = any;
        }
    }
    if (cfg->save_dir[0] && r->last_step >= r->start && r->saved_step != r->last_step) {
        r->saved_hash = save_checkpoint(r->tr, r->data, &r->carry, r->last_step, r->log, r->saved, sizeof r->saved);
        r->saved_step = r->last_step;
    }
}

static void run_free(run_t *r) {
    if (r->lock_fd > 0) close(r->lock_fd);
    free(r->inputs);
    free(r->targets);
    free(r->skip_in);
    free(r->skip_tg);
    trainer_free(r->tr);
    data_free(r->data);
    hf_extras_free(&r->carry);
}

// The summary (and its JSONL line), the trace file, and the tier report last.
static void run_finish(run_t *r) {
    const config_t *cfg = &r->cfg;
    char err[768];
    int rc = trainer_optimizer_wait(r->tr, err, sizeof err);
    if ((rc = comm_agree(comm_world(), rc, err, sizeof err)) != 0) agreed_error(rc, "step %d: %s", cfg->steps, err);
    double step_ms = r->timed_steps ? r->total_ms / r->timed_steps : 0;
    double tok_s = step_ms > 0 ? (double)r->N * cfg->accum * r->ranks / (step_ms / 1e3) : 0;
    // the states the last save hashed, when no step came after it (saved_step: every rank's,
    // so that every rank skips the collective trainer_params_hash or none does)
    uint64_t hash = r->saved_hash;
    if ((r->saved_step < 1 || r->saved_step != r->last_step) && trainer_params_hash(r->tr, &hash, err, sizeof err) != 0)
        runtime_error("params_hash: %s", err);
    char ran[64]; // a resumed or stopped run: the steps it ran, of the run's
    if (r->start > 1 || r->last_step < cfg->steps)
        snprintf(ran, sizeof ran, "steps %d-%d of %d", r->start, r->last_step, cfg->steps);
    else snprintf(ran, sizeof ran, "%d steps", cfg->steps);
    printf("done: %s, loss %.4f -> %.4f, %.1f ms/step, %.0f tok/s, params_hash %016llx\n", ran, r->first_loss,
           r->last_loss, step_ms, tok_s, (unsigned long long)hash);
    trainer_info_t info;
    trainer_info(r->tr, &info);
    // each rank's peaks, for rank 0's summary and report
    uint64_t mine[2] = {info.device_peak, info.host_bytes}, *peaks = mallocCheck(2 * sizeof(uint64_t) * (size_t)r->ranks);
    if (comm_allgather(comm_world(), mine, peaks, sizeof mine, err, sizeof err) != 0) runtime_error("%s", err);
    uint64_t *rank_device = mallocCheck(2 * sizeof(uint64_t) * (size_t)r->ranks), *rank_host = rank_device + r->ranks;
    for (int i = 0; i < r->ranks; i++) {
        rank_device[i] = peaks[2 * i];
        rank_host[i] = peaks[2 * i + 1];
    }
    free(peaks);
    if (r->ranks > 1) {
        char a[32], b[32];
        printf("ranks: %d, each holding its 1/%d piece of every state; peaks per rank:", r->ranks, r->ranks);
        for (int i = 0; i < r->ranks; i++)
            printf(" %d: device %s, host %s%s", i, format_bytes(a, sizeof a, rank_device[i]),
                   format_bytes(b, sizeof b, rank_host[i]), i + 1 < r->ranks ? ";" : "\n");
    }
    if (r->log) {
        report_run_t run = {.params = trainer_model(r->tr)->num_params, .steps = r->last_step - r->start + 1,
                            .first_loss = r->first_loss, .final_loss = r->last_loss, .val_loss = r->last_val,
                            .step_ms = step_ms, .tok_per_s = tok_s, .hash = hash, .ranks = r->ranks,
                            .rank_device = rank_device, .rank_host = rank_host};
        report_summary(r->log, &info, &r->plan, &run);
        if (fclose(r->log) != 0) runtime_error("--log %s: %s", cfg->log_path, strerror(errno));
    }
    if (cfg->trace_path[0]) {
        size_t written = 0, dropped = 0;
        int trc = trace_close(&written, &dropped);
        if (trc != 0) runtime_error("--trace %s: write failed: %s", cfg->trace_path, strerror(-trc));
        printf("trace: %zu spans written to %s%s\n", written, cfg->trace_path,
               dropped ? " (buffer full: later spans dropped)" : "");
    }
    free(rank_device);
    report_tiers(stdout, cfg, &info, &r->plan, step_ms);
}

int train_run(const config_t *cfg_in) {
    run_t *r = calloc(1, sizeof *r);
    if (!r) runtime_error("out of memory for the run");
    r->cfg = *cfg_in;
    const config_t *cfg = &r->cfg;
    config_print(cfg, stdout);
    ranks_setup(r);
    run_check(r);
    run_open_outputs(r);
    char err[768];
    int rc = trainer_init(&r->tr, cfg, err, sizeof err);
    if ((rc = comm_agree(comm_world(), rc, err, sizeof err)) != 0) {
        log_drop(r);
        agreed_error(rc, "%s", err);
    }
    print_model(trainer_model(r->tr), cfg, stdout);
    printf("data: %s\n", data_describe(r->data));
    if (cfg->resume[0]) run_resume(r);
    if (cfg->init_from[0]) run_init_from(r);
    run_carry(r);
    log_start(r);
    fflush(stdout);
    stop_line_steps(cfg);
    signal_quiet = r->rank != 0;
    catch_signals();
    r->N = trainer_rows(r->tr);
    r->inputs = mallocCheck((size_t)r->N * (size_t)cfg->accum * sizeof(int));
    r->targets = mallocCheck((size_t)r->N * (size_t)cfg->accum * sizeof(int));
    const char *kill_at = getenv("TT_TEST_KILL_AT_STEP"), *log_full = getenv("TT_TEST_LOG_FULL_AT_STEP");
    r->kill_at = kill_at ? atoi(kill_at) : 0;
    r->log_full_at = log_full ? atoi(log_full) : 0;
    r->skip_in = mallocCheck((size_t)r->N * sizeof(int));
    r->skip_tg = mallocCheck((size_t)r->N * sizeof(int));
    run_steps(r);
    // Stopped after a whole step — by a signal, or by --log failing (after the step whose line
    // failed) — with its checkpoint (if any) complete: the steps it ran get their summary and
    // tier report as a finished run's do, then one line says why it stopped.
    if (stop_signal || r->log_errno) {
        const int sig = stop_signal;
        if (r->last_step >= r->start) {
            set_stop_line("tiertrain: second signal: stopped at once, while reporting the steps run; %s%s\n",
                          r->saved[0] ? "checkpoint: " : "no checkpoint (no --save)", r->saved);
            run_finish(r);
        } else { // no step ran: nothing to report
            if (r->log) fclose(r->log);
            size_t tw, td;
            if (cfg->trace_path[0]) trace_close(&tw, &td);
        }
        fflush(stdout); // the report first, then the line
        if (r->rank == 0 && r->log_errno) // (the other ranks' stop is rank 0's)
            fprintf(stderr, "tiertrain: step %d: --log %s: write failed: %s (free space there, or give another --log); "
                    "stopped after step %d; %s%s\n", r->log_step, cfg->log_path, strerror(r->log_errno), r->last_step,
                    r->saved[0] ? "checkpoint: " : "no checkpoint (no --save)", r->saved);
        else if (r->rank == 0)
            fprintf(stderr, "tiertrain: stopped by %s after step %d; %s%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                    r->last_step, r->saved[0] ? "checkpoint: " : "no checkpoint (no --save)", r->saved);
        const int code = r->log_errno ? 1 : 128 + sig;
        run_free(r);
        free(r);
        return code;
    }
    run_finish(r);
    run_free(r);
    free(r);
    return 0;
}

// ---------------------------------------------------------------- plan

int plan_run(const config_t *cfg_in) {
    config_t resolved = *cfg_in;
    const config_t *cfg = &resolved;
    config_print(cfg, stdout);
    model_t m;
    model_init(&m, cfg);
    print_model(&m, cfg, stdout);
    char err[512];
    if (backend_resolve_config(&resolved, err, sizeof err) != 0) usage_error("%s", err);
    // --device auto found a GPU, where an explicit --update backward cannot run (train refuses it
    // at trainer_init): say so, as the parser did for the other reasons, not plan the update after
    const char *uwhy = cfg->update_when == UPDATE_BACKWARD && !cfg->offload_auto
                           ? tier_update_backward_refusal(cfg, cfg->device) : NULL;
    if (uwhy) usage_error("--update backward: %s", uwhy);
    if (cfg->resume[0]) { // as train reads it: a plan for a run train would refuse is no plan
        char dir[TT_PATH_MAX], e[768];
        ckpt_info_t ck;
        if (checkpoint_resolve(cfg->resume, dir, sizeof dir, e, sizeof e) != 0) usage_error("%s", e);
        if (checkpoint_info(dir, &ck, e, sizeof e) != 0) usage_error("--resume %s: %s", cfg->resume, e);
        resume_fits(cfg, &ck);
    }
    plan_t p;
    profile_t prof;
    const profile_t *rates = train_load_profile(cfg, &prof);
    if (cfg->offload_auto) {
        char why[1024];
        plan_auto(&resolved, &m, rates, &p, why, sizeof why);
        printf("%s\n", why);
    } else {
        plan_compute(cfg, &m, rates, &p);
    }
    char rwhy[512];
    if (p.feasible && plan_recompute_auto(&resolved, &m, rates, &p, rwhy, sizeof rwhy)) printf("%s\n", rwhy);
    plan_cache_autos(&resolved, &m, rates, &p, stdout);
    plan_advise(cfg, &m, rates, &p);
    plan_print(&p, cfg, stdout);
    plan_json(&p, cfg, &m, stdout);
    if (cfg->log_path[0]) { // the same object, for scripts
        FILE *log = fopen(cfg->log_path, "w");
        if (!log) usage_error("--log %s: %s (give a writable path)", cfg->log_path, strerror(errno));
        plan_json(&p, cfg, &m, log);
        if (fclose(log) != 0) runtime_error("--log %s: %s", cfg->log_path, strerror(errno));
    }
    model_free(&m);
    // exit 2, and the reason on stderr as well: a script that checks the status alone, or
    // reads stderr, learns why without parsing the table
    if (!p.feasible) fprintf(stderr, "tiertrain: plan: does not fit: %s\n", p.reason);
    return p.feasible ? 0 : 2;
}
