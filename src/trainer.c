// trainer.c — see trainer.h. Threads and their lock order: scheduler.h.
#include "trainer.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "comm.h"
#include "optim.h"
#include "progress.h"
#include "step.h"
#include "util.h"

struct trainer {
    const config_t *cfg;
    model_t model;
    backend_t be;
    int model_inited, be_inited, step_inited;
    tier_layout_t lay;
    tier_t *tier;
    step_t step;
    struct { int t; float lr, grad_scale; } req; // the update in flight (read by the update worker)
    double *loss_all;        // ranks: (ranks × accum) every rank's micro-batch losses
};

// ---------------------------------------------------------------- init / free

// The initial weights: each chunk's master from the seed (m and v zero), written home, and
// the shard's compute copy built from them.
static int init_weights(trainer_t *tr, char *err, size_t errlen) {
    const model_t *m = &tr->model;
    progress_t pg;
    progress_begin(&pg, "initializing the states (master, m, v)", (uint64_t)m->numel_padded * 12, 1);
    for (int s = 0; s < m->nshards; s++) {
        for (int c = 0; c < tier_nchunks(&tr->lay, m, s); c++) {
            float *master, *mm, *vv;
            int rc = trainer_states_get(tr, s, c, TIER_O32, 1, &master, &mm, &vv, err, errlen);
            if (rc != 0) return rc;
            size_t lo, n;
            tier_chunk_range(&tr->lay, m, s, c, &lo, &n);
            model_init_range(m, s, tr->cfg->seed, lo, n, master);
            if ((rc = trainer_states_put(tr, s, c, TIER_O32, err, errlen)) != 0) return rc;
            progress_add(&pg, (uint64_t)n * 12);
        }
    }
    progress_end(&pg);
    return 0;
}

struct backend *trainer_backend(trainer_t *tr) { return &tr->be; }

int trainer_init(trainer_t **out, const config_t *cfg, char *err, size_t errlen) {
    *out = NULL;
    trainer_t *tr = calloc(1, sizeof *tr);
    if (!tr) {
        snprintf(err, errlen, "out of memory for the trainer");
        return -ENOMEM;
    }
    tr->cfg = cfg;
    model_init(&tr->model, cfg);
    tr->model_inited = 1;
    int rc = backend_init(&tr->be, cfg, err, errlen);
    if (rc != 0) goto fail;
    tr->be_inited = 1;
    tier_layout(cfg, &tr->model, tr->be.kind, &tr->lay);
    if ((rc = tier_init(&tr->tier, cfg, &tr->model, &tr->be, &tr->lay, err, errlen)) != 0) goto fail;
    if ((rc = step_init(&tr->step, cfg, &tr->model, &tr->be, tr->tier, err, errlen)) != 0) goto fail;
    tr->step_inited = 1;
    if (tr->step.ranks > 1 && !(tr->loss_all = calloc((size_t)tr->step.ranks * (size_t)cfg->accum, sizeof(double)))) {
        snprintf(err, errlen, "out of memory for the ranks' losses");
        rc = -ENOMEM;
        goto fail;
    }
    // a resume or --init-from writes every chunk of every state itself: seeding them first
    // would only be overwritten (for NVMe-resident states, the whole store written twice)
    if (!cfg->resume[0] && !cfg->init_from[0] && (rc = init_weights(tr, err, errlen)) != 0) goto fail;
    memset(tier_stats(tr->tier), 0, sizeof(tier_stats_t)); // the run's figures start here
    *out = tr;
    return 0;
fail:
    trainer_free(tr);
    return rc;
}

void trainer_free(trainer_t *tr) {
    if (!tr) return;
    if (tr->tier) sched_update_wait(tier_sched(tr->tier), NULL, 0); // the update in flight uses everything
    if (tr->step_inited) step_free(&tr->step);
    tier_free(tr->tier);
    if (tr->be_inited) backend_free(&tr->be);
    if (tr->model_inited) model_free(&tr->model);
    free(tr->loss_all);
    free(tr);
}

const model_t *trainer_model(const trainer_t *tr) { return &tr->model; }
const config_t *trainer_config(const trainer_t *tr) { return tr->cfg; }
int trainer_rows(const trainer_t *tr) { return tr->step.N; }
const char *trainer_fault(const trainer_t *tr) { return tr->step.fault[0] ? tr->step.fault : NULL; }

void trainer_info(const trainer_t *tr, trainer_info_t *out) {
    memset(out, 0, sizeof *out);
    out->backend = tr->be.name;
    out->threads = tr->be.threads;
    out->device_peak = tr->be.peak;
    out->device_budget = tr->be.budget;
    out->host_bytes = tier_host_used(tr->tier);
    out->nslots = tr->lay.nslots;
    out->nhcache = tr->lay.nhcache;
    out->tier = *tier_stats(tr->tier);
    sched_stats(tier_sched(tr->tier), &out->sched);
    out->has_nvme = tier_nvme_info(tr->tier, &out->nvme) == 0;
    tier_nvme_stats(tr->tier, &out->nvme_stats);
}

// ---------------------------------------------------------------- compute

void trainer_begin_eval(trainer_t *tr, int nbatches) { step_begin_eval(&tr->step, nbatches); }

double trainer_forward(trainer_t *tr, const int *tokens, const int *targets) {
    return step_forward(&tr->step, tokens, targets);
}

void trainer_logits(trainer_t *tr, float *dst) {
    backend_copy_d2h(&tr->be, dst, tr->step.a.logits, (size_t)tr->step.N * (size_t)tr->model.V * sizeof(float));
}

double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, int nmb, float dscale) {
    return step_forward_backward(&tr->step, tokens, targets, nmb, dscale);
}

int trainer_grad_norm(trainer_t *tr, double *norm, char *err, size_t errlen) {
    int rc = tier_grads_finish(tr->tier, err, errlen); // every gradient is where its sum of squares is taken
    double ss = 0; // shard order, whatever the placement
    for (int s = 0; s < tr->model.nshards && rc == 0; s++) ss += tier_grads_sumsq(tr->tier, s);
    *norm = rc == 0 ? sqrt(ss) : NAN;
    return rc;
}

int trainer_grads_get(trainer_t *tr, int s, const float **g, char *err, size_t errlen) {
    int rc = tier_grads_finish(tr->tier, err, errlen);
    return rc ? rc : tier_grads_get(tr->tier, s, g, err, errlen);
}

int trainer_zero_grads(trainer_t *tr, char *err, size_t errlen) {
    int rc = trainer_optimizer_wait(tr, err, errlen);
    return rc ? rc : tier_grads_zero_all(tr->tier, err, errlen);
}

// ---------------------------------------------------------------- the step

// The scheduler's update job: one step's AdamW over the host or NVMe states.
static int update_job(void *ctx, char *err, size_t errlen) {
    trainer_t *tr = ctx;
    char e[512] = "";
    int rc = optim_run_host(tr->tier, &tr->model, tr->cfg, tr->req.t, tr->req.lr, tr->req.grad_scale, e, sizeof e);
    if (rc != 0) snprintf(err, errlen, "optimizer: %s", e);
    return rc;
}

int trainer_optimizer_wait(trainer_t *tr, char *err, size_t errlen) {
    return sched_update_wait(tier_sched(tr->tier), err, errlen);
}

int trainer_optimizer_step(trainer_t *tr, int t, float lr, float grad_scale, char *err, size_t errlen) {
    int rc = trainer_optimizer_wait(tr, err, errlen); // every shard of the last update was used already
    if (rc != 0) return rc;
    tier_params_invalidate(tr->tier); // the homes change from here: every slot's copy goes stale
    if ((rc = tier_grads_finish(tr->tier, err, errlen)) != 0) return rc;
    if (tr->lay.home[ST_O32] == TIER_DEVICE)
        return optim_run_device(tr->tier, &tr->model, tr->cfg, &tr->be, t, lr, grad_scale, err, errlen);
    tr->req.t = t;
    tr->req.lr = lr;
    tr->req.grad_scale = grad_scale;
    sched_update_start(tier_sched(tr->tier), update_job, tr);
    return 0;
}

// With ranks: every rank's micro-batch losses, summed in the step's micro-batch order (rank r's
// k-th is the step's k·ranks + r), as one rank summing them all would.
static int ranks_loss(trainer_t *tr, double *loss, char *err, size_t errlen) {
    const int A = tr->cfg->accum, R = tr->step.ranks;
    double *all = tr->loss_all;
    int rc = comm_allgather(tr->step.comm, tr->step.mb_loss, all, (size_t)A * sizeof(double), err, errlen);
    if (rc != 0) return rc;
    double sum = 0;
    for (int k = 0; k < A; k++)
        for (int r = 0; r < R; r++) sum += all[(size_t)r * (size_t)A + (size_t)k];
    *loss = sum / ((double)A * R);
    return 0;
}

int trainer_train_step(trainer_t *tr, int t, const int *tokens, const int *targets, double *loss, double *norm,
                       float *lr, char *err, size_t errlen) {
    const config_t *cfg = tr->cfg;
    const int ranks = tr->step.ranks;
    // a mean over the step's tokens, on every rank
    const float dscale = 1.0f / ((float)tr->step.N * (float)cfg->accum * (float)ranks);
    *loss = step_forward_backward(&tr->step, tokens, targets, cfg->accum, dscale);
    *norm = NAN;
    *lr = optim_lr(cfg, t);
    int rc = 0;
    if (tr->step.fault[0]) {
        snprintf(err, errlen, "%s", tr->step.fault);
        rc = -EIO;
    }
    if (rc == 0) rc = trainer_grad_norm(tr, norm, err, errlen); // a gradient's write failed: the step is void
    if (rc == 0) {
        float scale = cfg->clip > 0 && *norm > cfg->clip ? (float)(cfg->clip / (*norm + 1e-6)) : 1.0f;
        // starts the update; the next step's forward overlaps it, shard by shard
        rc = trainer_optimizer_step(tr, t, *lr, scale, err, errlen);
    }
    if (ranks == 1) return rc;
    // every rank reaches here once a step, so a failure on one stops them all, named
    if ((rc = comm_agree(tr->step.comm, rc, err, errlen)) != 0) return rc;
    return ranks_loss(tr, loss, err, errlen);
}

// ---------------------------------------------------------------- states

int trainer_nchunks(const trainer_t *tr, int s) { return tier_nchunks(&tr->lay, &tr->model, s); }

void trainer_chunk_range(const trainer_t *tr, int s, int c, size_t *lo, size_t *n) {
    tier_chunk_range(&tr->lay, &tr->model, s, c, lo, n);
}

int trainer_states_get(trainer_t *tr, int s, int c, int parts, int fill_zero, float **master, float **m, float **v,
                       char *err, size_t errlen) {
    int rc = trainer_optimizer_wait(tr, err, errlen);
    return rc ? rc : tier_o32_get(tr->tier, s, c, parts, fill_zero, master, m, v, err, errlen);
}

int trainer_states_put(trainer_t *tr, int s, int c, int parts, char *err, size_t errlen) {
    int rc = tier_o32_put(tr->tier, s, c, parts, err, errlen);
    return rc || !(parts & TIER_MASTER) ? rc : tier_params_from_master(tr->tier, s, c, err, errlen);
}

int trainer_params_hash(trainer_t *tr, uint64_t *hash, char *err, size_t errlen) {
    uint64_t h = FNV64_INIT;
    for (int s = 0; s < tr->model.nshards; s++) {
        const shard_t *sh = &tr->model.shards[s];
        for (int c = 0; c < trainer_nchunks(tr, s); c++) {
            float *master, *mm, *vv;
            int rc = trainer_states_get(tr, s, c, TIER_MASTER, 0, &master, &mm, &vv, err, errlen);
            if (rc != 0) return rc;
            size_t lo, n;
            trainer_chunk_range(tr, s, c, &lo, &n);
            for (int ti = 0; ti < sh->ntensors; ti++) { // the tensors' bytes in order, a chunk's share at a time
                const tensor_t *te = &sh->tensors[ti];
                size_t a = te->offset > lo ? te->offset : lo;
                size_t b = te->offset + te->numel < lo + n ? te->offset + te->numel : lo + n;
                if (a < b) h = fnv1a64(h, master + (a - lo), (b - a) * sizeof(float));
            }
        }
    }
    *hash = h;
    return 0;
}
