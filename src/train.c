// train.c — `tiertrain train` and `tiertrain plan`: print the resolved configuration,
// build the trainer, run the steps (one line each, optional JSONL), evaluate on the
// held-out split, and end with the summary and the tier report.
#include "train.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data.h"
#include "model.h"
#include "plan.h"
#include "step.h"
#include "trace.h"
#include "util.h"

// ---------------------------------------------------------------- shared

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

// Where each state lived, what each tier held at peak, and what moved between them.
static void print_tier_report(const trainer_t *tr, const config_t *cfg, FILE *out) {
    char a[32], b[32], c[32];
    fprintf(out, "tiers (backend %s, %d threads): params %s, grads %s, optimizer %s, prefetch %d\n", tr->be.name,
            tr->be.threads, tier_name(cfg->params_tier), tier_name(cfg->grads_tier), tier_name(cfg->optim_tier),
            cfg->prefetch);
    fprintf(out, "  device  peak %10s  budget %s\n", format_bytes(a, sizeof a, tr->be.peak),
            cfg->hbm_budget ? format_bytes(b, sizeof b, cfg->hbm_budget) : "none");
    fprintf(out, "  host    pool %10s  budget %s\n", format_bytes(c, sizeof c, tr->host_bytes),
            cfg->host_budget ? format_bytes(b, sizeof b, cfg->host_budget) : "none");
    if (tr->nvme) {
        io_info_t ii;
        nvme_store_info(tr->nvme, &ii);
        fprintf(out, "  nvme    store %9s  engine %s, %d path(s), read %s, written %s\n", format_bytes(a, sizeof a, ii.size),
                ii.engine, ii.npaths, format_bytes(b, sizeof b, tr->stats.nvme_read_bytes),
                format_bytes(c, sizeof c, tr->stats.nvme_write_bytes));
    }
    fprintf(out, "  moved   host->device %s, device->host %s; compute waited %.1f ms for parameter fetches\n",
            format_bytes(a, sizeof a, tr->stats.h2d_bytes), format_bytes(b, sizeof b, tr->stats.d2h_bytes),
            fetch_wait_ms(tr));
    if (tr->sched) {
        sched_stats_t st;
        sched_stats(tr->sched, &st);
        fprintf(out, "  sched   %d slots, %llu fetches, %llu hits, %llu evictions\n", tr->nslots,
                (unsigned long long)st.fetches, (unsigned long long)st.hits, (unsigned long long)st.evictions);
    }
}

// ---------------------------------------------------------------- train

int train_run(const config_t *cfg_in) {
    FILE *out = stdout;
    config_t resolved = *cfg_in; // --offload auto may choose the homes
    const config_t *cfg = &resolved;
    config_print(cfg, out);

    char err[512] = "";
    data_t *data = NULL;
    if (data_open(&data, cfg, err, sizeof err) != 0) usage_error("%s", err);

    // Before any allocation: does it fit? (The same check `tiertrain plan` prints.)
    model_t shape;
    model_init(&shape, cfg);
    plan_t plan;
    if (cfg->offload_auto) {
        char why[768];
        int ok = plan_auto(&resolved, &shape, &plan, why, sizeof why);
        if (!ok) usage_error("%s", why);
        fprintf(out, "%s\n", why);
    } else {
        plan_compute(cfg, &shape, &plan);
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
    fflush(out);

    const int N = tr.N;
    int *inputs = mallocCheck((size_t)N * sizeof(int));
    int *targets = mallocCheck((size_t)N * sizeof(int));
    const float dscale = 1.0f / ((float)N * (float)cfg->accum);
    double first_loss = NAN, last_loss = NAN, total_ms = 0, last_val = NAN;
    int timed_steps = 0;

    for (int step = 1; step <= cfg->steps; step++) {
        double t0 = now_ms();
        trainer_zero_grads(&tr);
        trainer_begin_step(&tr);
        double loss = 0;
        for (int mb = 0; mb < cfg->accum; mb++) {
            data_next(data, DATA_TRAIN, inputs, targets);
            loss += trainer_forward_backward(&tr, inputs, targets, dscale);
        }
        if (tr.fault[0]) runtime_error("step %d: %s", step, tr.fault);
        loss /= cfg->accum;
        double norm = trainer_grad_norm(&tr);
        float scale = 1.0f;
        if (cfg->clip > 0 && norm > cfg->clip) scale = (float)(cfg->clip / (norm + 1e-6));
        float lr = lr_schedule(cfg, step);
        if (trainer_optimizer_step(&tr, step, lr, scale, err, sizeof err) != 0)
            runtime_error("step %d: optimizer: %s", step, err);
        double ms = now_ms() - t0;
        if (!isfinite(loss)) runtime_error("step %d: loss is %g (lower --lr or check the data)", step, loss);
        if (step == 1) first_loss = loss;
        last_loss = loss;
        if (step > 1 || cfg->steps == 1) { total_ms += ms; timed_steps++; }
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
        fflush(out);
    }

    double step_ms = timed_steps ? total_ms / timed_steps : 0;
    double tok_s = step_ms > 0 ? (double)N * cfg->accum / (step_ms / 1e3) : 0;
    uint64_t hash = trainer_params_hash(&tr);
    fprintf(out, "done: %d steps, loss %.4f -> %.4f, %.1f ms/step, %.0f tok/s, params_hash %016llx\n",
            cfg->steps, first_loss, last_loss, step_ms, tok_s, (unsigned long long)hash);
    if (log) {
        fprintf(log, "{\"event\":\"summary\",\"params\":%zu,\"steps\":%d,\"first_loss\":%.6f,\"final_loss\":%.6f,"
                     "\"val_loss\":%.6f,\"tok_per_s\":%.1f,\"step_ms\":%.3f,\"peak_device_bytes\":%llu,"
                     "\"peak_host_bytes\":%llu,\"nvme_bytes_read\":%llu,\"nvme_bytes_written\":%llu,"
                     "\"h2d_bytes\":%llu,\"d2h_bytes\":%llu,\"fetch_wait_ms\":%.3f,\"params_hash\":\"%016llx\"}\n",
                tr.model.num_params, cfg->steps, first_loss, last_loss, isfinite(last_val) ? last_val : -1.0, tok_s,
                step_ms, (unsigned long long)tr.be.peak, (unsigned long long)tr.host_bytes,
                (unsigned long long)tr.stats.nvme_read_bytes, (unsigned long long)tr.stats.nvme_write_bytes,
                (unsigned long long)tr.stats.h2d_bytes, (unsigned long long)tr.stats.d2h_bytes, fetch_wait_ms(&tr),
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
    print_tier_report(&tr, cfg, out);
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
    plan_t p;
    if (cfg->offload_auto) {
        char why[768];
        plan_auto(&resolved, &m, &p, why, sizeof why);
        printf("%s\n", why);
    } else {
        plan_compute(cfg, &m, &p);
    }
    plan_print(&p, cfg, stdout);
    model_free(&m);
    return p.feasible ? 0 : 2;
}
