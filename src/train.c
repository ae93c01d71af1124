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
#include <unistd.h>
#include "checkpoint.h"
#include "data.h"
#include "json.h"
#include "model.h"
#include "plan.h"
#include "step.h"
#include "trace.h"
#include "util.h"

// ---------------------------------------------------------------- shared

const profile_t *train_load_profile(const config_t *cfg, profile_t *prof) {
    char path[TT_PATH_MAX + 64], err[768];
    profile_path(cfg, path, sizeof path);
    int rc = profile_load(prof, path, err, sizeof err);
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
    if (cfg->profile_path[0]) usage_error("--profile %s", err);
    notice("%s; the plan uses built-in rates", err);
    return NULL;
}

static void print_model(const model_t *m, const config_t *cfg, FILE *f) {
    char a[32];
    fprintf(f, "model: %s%s — %.2fM parameters in %d shards (largest %s as BF16), L=%d C=%d NH=%d NKV=%d HS=%d F=%d V=%d T=%d%s\n",
            cfg->preset, cfg->preset[0] ? "" : "custom", m->num_params / 1e6, m->nshards,
            format_bytes(a, sizeof a, m->max_shard_numel * 2), m->L, m->C, m->NH, m->NKV, m->HS, m->F, m->V, m->T,
            m->tie ? " tied" : "");
}

static double eval_loss(trainer_t *tr, data_t *d, int *inputs, int *targets) {
    data_rewind(d, DATA_VAL);
    trainer_begin_eval(tr, tr->cfg->eval_batches);
    double sum = 0;
    for (int i = 0; i < tr->cfg->eval_batches; i++) {
        data_next(d, DATA_VAL, inputs, targets);
        sum += trainer_forward(tr, inputs, targets);
    }
    if (tr->fault[0]) runtime_error("evaluation: %s", tr->fault);
    return sum / tr->cfg->eval_batches;
}

static double fetch_wait_ms(const trainer_t *tr) {
    if (!tr->sched) return 0;
    sched_stats_t st;
    sched_stats(tr->sched, &st);
    return st.wait_ms;
}

static const char *tier_name(tier_kind_t t) {
    return t == TIER_DEVICE ? "device" : t == TIER_HOST ? "host" : "nvme";
}

// Where each state lived, what each tier held at peak, what moved between them and how long
// compute waited on each; then the achieved step time against the plan's floor.
static void print_tier_report(const trainer_t *tr, const config_t *cfg, const plan_t *plan, double step_ms, FILE *out) {
    char a[32], b[32], c[32], d[32];
    static const char *sched_name[] = {"auto", "horizontal", "vertical"};
    fprintf(out, "tiers (backend %s, %d threads): params %s, grads %s, optimizer %s, checkpoints %s, prefetch %d, "
                 "schedule %s\n",
            tr->be.name, tr->be.threads, tier_name(cfg->params_tier), tier_name(cfg->grads_tier),
            tier_name(cfg->optim_tier), cfg->ckpt_tier == CKPT_HOST ? "host" : "device", cfg->prefetch,
            sched_name[cfg->schedule]);
    fprintf(out, "  tier     peak        budget      moved                               compute waited\n");
    fprintf(out, "  device   %-10s  %-10s  in %-10s out %-10s          %.1f ms for parameter fetches\n",
            format_bytes(a, sizeof a, tr->be.peak), cfg->hbm_budget ? format_bytes(b, sizeof b, cfg->hbm_budget) : "none",
            format_bytes(c, sizeof c, tr->stats.h2d_bytes), format_bytes(d, sizeof d, tr->stats.d2h_bytes),
            fetch_wait_ms(tr));
    fprintf(out, "  host     %-10s  %-10s  checkpoints in %s, out %s      %.1f ms copying gradients and checkpoints\n",
            format_bytes(a, sizeof a, tr->host_bytes), cfg->host_budget ? format_bytes(b, sizeof b, cfg->host_budget) : "none",
            format_bytes(c, sizeof c, tr->stats.ckpt_h2d_bytes), format_bytes(d, sizeof d, tr->stats.ckpt_d2h_bytes),
            tr->stats.copy_ms);
    if (tr->nvme) {
        io_info_t ii;
        nvme_store_info(tr->nvme, &ii);
        fprintf(out, "  nvme     %-10s  (%s, %d path%s)  read %-10s written %-10s  %.1f ms for optimizer states\n",
                format_bytes(a, sizeof a, ii.size), ii.engine, ii.npaths, ii.npaths == 1 ? "" : "s",
                format_bytes(b, sizeof b, tr->stats.nvme_read_bytes), format_bytes(c, sizeof c, tr->stats.nvme_write_bytes),
                tr->stats.opt_nvme_wait_ms);
    }
    if (tr->sched) {
        sched_stats_t st;
        sched_stats(tr->sched, &st);
        fprintf(out, "  sched    %d slots, %llu fetches, %llu hits, %llu evictions", tr->nslots,
                (unsigned long long)st.fetches, (unsigned long long)st.hits, (unsigned long long)st.evictions);
        if (tr->nhcache) fprintf(out, "; host cache %d shards, %llu hits", tr->nhcache, (unsigned long long)tr->stats.cache_hits);
        fputc('\n', out);
    }
    fprintf(out, "  optimizer %.1f ms in all (%s AdamW)\n", tr->stats.opt_ms, adamw_update_path());
    fprintf(out, "  step     %.1f ms achieved, floor %.1f ms (bound by %s; rates: %s): efficiency %.2f\n", step_ms,
            plan->floor_ms, plan_resource_names[plan->bound], plan->prof ? plan->prof->source : "built-in defaults",
            step_ms > 0 ? plan->floor_ms / step_ms : 0.0);
}

// ---------------------------------------------------------------- train

// SIGINT/SIGTERM: the first finishes the current step (and saves, with --save); a second
// stops at once — a half-written checkpoint is a .tmp-* folder nobody takes for one, and the
// NVMe store's files were unlinked when opened.
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    if (stop_signal) _exit(128 + sig);
    stop_signal = sig;
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

static void save_checkpoint(trainer_t *tr, const data_t *data, int step, FILE *log, char *where, size_t wlen) {
    char err[768];
    // the update in flight must have landed before the hash: its error belongs to this step
    if (trainer_optimizer_wait(tr, err, sizeof err) != 0)
        runtime_error("step %d: %s (the previous checkpoint is intact)", step, err);
    uint64_t hash = 0;
    double t0 = now_ms();
    if (checkpoint_save(tr, data, step, &hash, where, wlen, err, sizeof err) != 0)
        runtime_error("step %d: checkpoint: %s (the previous checkpoint is intact)", step, err);
    fprintf(stdout, "checkpoint: step %d saved to %s (%.1f s)\n", step, where, (now_ms() - t0) / 1e3);
    if (log) {
        char esc[TT_PATH_MAX * 2];
        if (json_escape(esc, sizeof esc, where, strlen(where)) < 0) snprintf(esc, sizeof esc, "\"?\"");
        fprintf(log, "{\"event\":\"checkpoint\",\"step\":%d,\"path\":%s,\"params_hash\":\"%016llx\"}\n", step, esc,
                (unsigned long long)hash);
        fflush(log);
    }
}

int train_run(const config_t *cfg_in) {
    FILE *out = stdout;
    config_t resolved = *cfg_in; // --offload auto may choose the homes
    const config_t *cfg = &resolved;
    config_print(cfg, out);

    char err[768] = "";
    data_t *data = NULL;
    if (data_open(&data, cfg, err, sizeof err) != 0) usage_error("%s", err);
    // --resume: the checkpoint must exist, parse and match this model before anything else
    ckpt_info_t ck;
    int start = 1;
    if (cfg->resume[0]) {
        char dir[TT_PATH_MAX];
        if (checkpoint_resolve(cfg->resume, dir, sizeof dir, err, sizeof err) != 0) usage_error("%s", err);
        if (checkpoint_info(dir, &ck, err, sizeof err) != 0) usage_error("--resume %s: %s", cfg->resume, err);
        if (checkpoint_check_config(&ck, cfg, err, sizeof err) != 0) usage_error("%s", err);
        if (ck.step >= cfg->steps)
            usage_error("--resume %s: the checkpoint is at step %d and --steps is %d: nothing left to do (raise --steps)",
                        cfg->resume, ck.step, cfg->steps);
        start = ck.step + 1;
    }

    // Before any allocation: does it fit? (The same check `tiertrain plan` prints, for the
    // device that will run: a GPU's memory is not RAM.)
    backend_resolve_config(&resolved);
    model_t shape;
    model_init(&shape, cfg);
    plan_t plan;
    profile_t prof;
    const profile_t *rates = train_load_profile(cfg, &prof);
    if (cfg->offload_auto) {
        char why[1024];
        int ok = plan_auto(&resolved, &shape, rates, &plan, why, sizeof why);
        if (!ok) usage_error("%s", why);
        fprintf(out, "%s\n", why);
    } else {
        plan_compute(cfg, &shape, rates, &plan);
    }
    int nshards = shape.nshards;
    model_free(&shape);
    if (!plan.feasible) usage_error("%s", plan.reason);

    // Output files only once the run is known to be possible: bad input leaves none behind.
    FILE *log = NULL;
    if (cfg->log_path[0]) {
        log = fopen(cfg->log_path, "w");
        if (!log) usage_error("--log %s: %s (give a writable path)", cfg->log_path, strerror(errno));
    }
    // --trace: room for every span of the run (a few per shard per micro-batch), capped.
    if (cfg->trace_path[0]) {
        size_t per_step = (size_t)(nshards * 8) * (size_t)(cfg->accum + 1) + 64;
        size_t max_events = per_step * (size_t)(cfg->steps + 1);
        if (max_events > (size_t)4 << 20) max_events = (size_t)4 << 20;
        int trc = trace_open(cfg->trace_path, max_events);
        if (trc != 0) usage_error("--trace %s: %s (give a writable path)", cfg->trace_path, strerror(-trc));
    }

    trainer_t tr;
    int rc = trainer_init(&tr, cfg, err, sizeof err);
    if (rc == -ENOMEM && strstr(err, "--hbm-budget")) usage_error("%s", err);
    if (rc != 0) runtime_error("%s", err);
    print_model(&tr.model, cfg, out);
    fprintf(out, "data: %s\n", data_describe(data));
    if (cfg->resume[0]) {
        double t0 = now_ms();
        rc = checkpoint_load(&tr, data, &ck, 0, err, sizeof err);
        if (rc != 0 && log) { // a bad checkpoint is bad input: it leaves no output behind
            fclose(log);
            unlink(cfg->log_path);
        }
        // a corrupt file (EINVAL) or a file missing from the folder (ENOENT) is bad input
        if (rc == -EINVAL || rc == -ENOENT) usage_error("--resume %s: %s", cfg->resume, err);
        if (rc != 0) runtime_error("--resume %s: %s", cfg->resume, err);
        fprintf(out, "resumed: %s at step %d (params_hash %s, %.1f s)\n", ck.dir, ck.step, ck.params_hash,
                (now_ms() - t0) / 1e3);
        // allowed, but then the run is not the one the checkpoint came from: say so
        if (ck.lr != cfg->lr || ck.min_lr != cfg->min_lr || ck.warmup != cfg->warmup || ck.steps != cfg->steps)
            notice("--resume %s: the checkpoint was trained with --lr %g --min-lr %g --warmup %d --steps %d; this run's "
                   "schedule differs, so its learning rates differ from the run that saved it",
                   cfg->resume, ck.lr, ck.min_lr, ck.warmup, ck.steps);
    }
    fflush(out);
    catch_signals();
    char saved[TT_PATH_MAX + 64] = "";
    int saved_step = 0;

    const int N = tr.N;
    int *inputs = mallocCheck((size_t)N * (size_t)cfg->accum * sizeof(int)); // the step's micro-batches
    int *targets = mallocCheck((size_t)N * (size_t)cfg->accum * sizeof(int));
    double first_loss = NAN, last_loss = NAN, total_ms = 0, last_val = NAN;
    int timed_steps = 0;

    int last_step = start - 1;
    for (int step = start; step <= cfg->steps && !stop_signal; step++) {
        double t0 = now_ms();
        for (int mb = 0; mb < cfg->accum; mb++)
            data_next(data, DATA_TRAIN, inputs + (size_t)mb * N, targets + (size_t)mb * N);
        double loss, norm;
        float lr;
        if (trainer_train_step(&tr, step, inputs, targets, &loss, &norm, &lr, err, sizeof err) != 0)
            runtime_error("step %d: %s", step, err);
        double ms = now_ms() - t0;
        if (!isfinite(loss)) runtime_error("step %d: loss is %g (lower --lr or check the data)", step, loss);
        if (step == start) first_loss = loss;
        last_loss = loss;
        last_step = step;
        if (step > start || cfg->steps == start) { total_ms += ms; timed_steps++; }
        double tok_s = (double)N * cfg->accum / (ms / 1e3);
        if (!cfg->quiet)
            fprintf(out, "step %5d/%d | loss %.4f | lr %.2e | norm %.4f | %8.1f ms | %8.0f tok/s\n",
                    step, cfg->steps, loss, lr, norm, ms, tok_s);
        if (log)
            fprintf(log, "{\"event\":\"step\",\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6f,\"step_ms\":%.3f,\"tok_per_s\":%.1f}\n",
                    step, loss, lr, norm, ms, tok_s);
        if (cfg->eval_every > 0 && (step % cfg->eval_every == 0 || step == cfg->steps)) {
            last_val = eval_loss(&tr, data, inputs, targets);
            fprintf(out, "eval  %5d | val loss %.4f\n", step, last_val);
            if (log) fprintf(log, "{\"event\":\"eval\",\"step\":%d,\"val_loss\":%.6f}\n", step, last_val);
        }
        if (cfg->save_dir[0] && cfg->save_every > 0 && step % cfg->save_every == 0 && step < cfg->steps) {
            save_checkpoint(&tr, data, step, log, saved, sizeof saved);
            saved_step = step;
        }
        fflush(out);
    }
    if (cfg->save_dir[0] && last_step >= start && saved_step != last_step) {
        save_checkpoint(&tr, data, last_step, log, saved, sizeof saved);
        saved_step = last_step;
    }
    if (stop_signal) { // a clean stop: the step finished, the checkpoint (if any) is complete
        int sig = stop_signal;
        if (log) fclose(log);
        size_t tw, td;
        if (cfg->trace_path[0]) trace_close(&tw, &td);
        trainer_free(&tr);
        data_free(data);
        free(inputs);
        free(targets);
        fprintf(stderr, "tiertrain: stopped by %s after step %d; %s%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                last_step, saved[0] ? "checkpoint: " : "no checkpoint (no --save)", saved);
        return 128 + sig;
    }

    if (trainer_optimizer_wait(&tr, err, sizeof err) != 0) runtime_error("step %d: %s", cfg->steps, err);
    double step_ms = timed_steps ? total_ms / timed_steps : 0;
    double tok_s = step_ms > 0 ? (double)N * cfg->accum / (step_ms / 1e3) : 0;
    uint64_t hash = trainer_params_hash(&tr);
    fprintf(out, "done: %d steps, loss %.4f -> %.4f, %.1f ms/step, %.0f tok/s, params_hash %016llx\n",
            cfg->steps, first_loss, last_loss, step_ms, tok_s, (unsigned long long)hash);
    if (log) {
        fprintf(log, "{\"event\":\"summary\",\"params\":%zu,\"steps\":%d,\"first_loss\":%.6f,\"final_loss\":%.6f,"
                     "\"val_loss\":%.6f,\"tok_per_s\":%.1f,\"step_ms\":%.3f,\"peak_device_bytes\":%llu,"
                     "\"peak_host_bytes\":%llu,\"nvme_bytes_read\":%llu,\"nvme_bytes_written\":%llu,"
                     "\"h2d_bytes\":%llu,\"d2h_bytes\":%llu,\"fetch_wait_ms\":%.3f,\"optimizer_nvme_wait_ms\":%.3f,"
                     "\"copy_ms\":%.3f,\"optimizer_ms\":%.3f,\"host_cache_hits\":%llu,\"floor_ms\":%.3f,"
                     "\"efficiency\":%.4f,\"bound\":\"%s\",\"params_hash\":\"%016llx\"}\n",
                tr.model.num_params, cfg->steps, first_loss, last_loss, isfinite(last_val) ? last_val : -1.0, tok_s,
                step_ms, (unsigned long long)tr.be.peak, (unsigned long long)tr.host_bytes,
                (unsigned long long)tr.stats.nvme_read_bytes, (unsigned long long)tr.stats.nvme_write_bytes,
                (unsigned long long)tr.stats.h2d_bytes, (unsigned long long)tr.stats.d2h_bytes, fetch_wait_ms(&tr),
                tr.stats.opt_nvme_wait_ms, tr.stats.copy_ms, tr.stats.opt_ms, (unsigned long long)tr.stats.cache_hits,
                plan.floor_ms, step_ms > 0 ? plan.floor_ms / step_ms : 0.0, plan_resource_names[plan.bound],
                (unsigned long long)hash);
        if (fclose(log) != 0) runtime_error("--log %s: %s", cfg->log_path, strerror(errno));
    }
    if (cfg->trace_path[0]) {
        size_t written = 0, dropped = 0;
        if (trace_close(&written, &dropped) != 0) runtime_error("--trace %s: write failed", cfg->trace_path);
        fprintf(out, "trace: %zu spans written to %s%s\n", written, cfg->trace_path,
                dropped ? " (buffer full: later spans dropped)" : "");
    }
    // The tier report, last.
    print_tier_report(&tr, cfg, &plan, step_ms, out);
    free(inputs);
    free(targets);
    trainer_free(&tr);
    data_free(data);
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
    backend_resolve_config(&resolved);
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
    plan_print(&p, cfg, stdout);
    model_free(&m);
    return p.feasible ? 0 : 2;
}
