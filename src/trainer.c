// trainer.c — see trainer.h. Threads and their lock order: scheduler.h.
#include "trainer.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "comm.h"
#include "gradnorm.h"
#include "hasher.h"
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
    // the next update's first reads are queued, or the update in flight will queue them; 0 in
    // a fresh trainer and once a checkpoint's state reads or writes (tier_o32_get, _put) dropped
    // them: then the next step queues them (optim_queue_first_reads)
    int reads_ahead;
    int qrc;                 // queue_reads' result, and its message
    char qerr[512];
    double *loss_all;        // ranks: (ranks × accum) every rank's micro-batch losses
    gradnorm_t *norm_all;    // ranks: (ranks) every rank's Σ g²
    // ranks: a global chunk of master, m, v gathered from every rank's piece (trainer_states_get)
    float *gview;            // (3 × chunk_elems)
    size_t *gcounts, *gdispls; // (ranks) the gather's bytes and offsets per rank
};

// ---------------------------------------------------------------- init / free

// The initial weights: each chunk's master from the seed (m and v zero), written home, and
// the shard's compute copy built from them.
static int init_weights(trainer_t *tr, char *err, size_t errlen) {
    const model_t *m = &tr->model;
    progress_t pg;
    progress_begin(&pg, "initializing the states (master, m, v)", (uint64_t)m->numel_padded * 12, 1);
    for (int s = 0; s < m->nshards; s++) {
        for (int c = 0; c < trainer_nchunks(tr, s); c++) {
            float *master, *mm, *vv;
            int rc = trainer_states_get(tr, s, c, TIER_O32, 1, &master, &mm, &vv, err, errlen);
            if (rc != 0) return rc;
            size_t lo, n;
            trainer_chunk_range(tr, s, c, &lo, &n);
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
    // ranks on a GPU: NCCL over the world, on this rank's device
    if (cfg->ranks > 1 && tr->be.vt &&
        (rc = comm_dev_init(comm_world(), backend_device_index(&tr->be), err, errlen)) != 0)
        goto fail;
    tier_layout(cfg, &tr->model, tr->be.kind, &tr->lay);
    const char *why = cfg->update_when == UPDATE_BACKWARD ? tier_update_backward_refusal(cfg, tr->be.kind) : NULL;
    if (why) {
        snprintf(err, errlen, "--update backward: %s", why);
        rc = -EINVAL;
        goto fail;
    }
    if ((rc = tier_init(&tr->tier, cfg, &tr->model, &tr->be, &tr->lay, err, errlen)) != 0) goto fail;
    // the CPU backend's NVMe update beside the forward: its AdamW on this thread's cores (the
    // update worker on a core of its own took it from one of the forward's threads)
    if (tr->lay.upd_assist) sched_assist_owner(tier_sched(tr->tier));
    if ((rc = step_init(&tr->step, cfg, &tr->model, &tr->be, tr->tier, err, errlen)) != 0) goto fail;
    tr->step_inited = 1;
    if (tr->step.ranks > 1) {
        const size_t R = (size_t)tr->step.ranks;
        tr->loss_all = calloc(R * (size_t)cfg->accum, sizeof(double));
        tr->norm_all = calloc(R, sizeof *tr->norm_all);
        tr->gview = calloc(3 * tr->lay.chunk_elems, sizeof(float));
        tr->gcounts = calloc(2 * R, sizeof(size_t));
        if (!tr->loss_all || !tr->norm_all || !tr->gview || !tr->gcounts) {
            snprintf(err, errlen, "out of memory for the ranks' tables");
            rc = -ENOMEM;
            goto fail;
        }
        tr->gdispls = tr->gcounts + R;
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
    free(tr->norm_all);
    free(tr->gview);
    free(tr->gcounts);
    free(tr);
}

const model_t *trainer_model(const trainer_t *tr) { return &tr->model; }
const config_t *trainer_config(const trainer_t *tr) { return tr->cfg; }
int trainer_rows(const trainer_t *tr) { return tr->step.N; }
int trainer_ranks(const trainer_t *tr) { return tr->step.ranks; }
int trainer_rank(const trainer_t *tr) { return tr->step.rank; }
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
    out->upd_bwd = tr->lay.upd_bwd;
    out->upd_inline = tr->lay.upd_inline;
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

int trainer_logits(trainer_t *tr, float *dst, char *err, size_t errlen) {
    if (tr->model.V > CE_QUANTUM) {
        snprintf(err, errlen, "logits of a vocabulary of %d: the forward holds %d columns at a time", tr->model.V,
                 CE_QUANTUM);
        return -EINVAL;
    }
    backend_copy_d2h(&tr->be, dst, tr->step.a.logits, (size_t)tr->step.N * (size_t)tr->model.V * sizeof(float));
    return 0;
}

double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, int nmb, float dscale) {
    return step_forward_backward(&tr->step, tokens, targets, nmb, dscale);
}

// Σ g² exactly (gradnorm.h): the same bits over any placement and any number of ranks, each
// of which adds its pieces. With ranks this is a collective: every rank calls it, even one
// whose gradients failed (its figure is then void, and the step's agreement stops the run).
int trainer_grad_norm(trainer_t *tr, double *norm, char *err, size_t errlen) {
    int rc = tier_grads_finish(tr->tier, err, errlen); // every gradient is where its sum of squares is taken
    gradnorm_t acc;
    gradnorm_zero(&acc);
    for (int s = 0; s < tr->model.nshards && rc == 0; s++) rc = tier_grads_norm(tr->tier, s, &acc, err, errlen);
    if (tr->step.ranks > 1) {
        char e2[512];
        int r2 = comm_allgather(tr->step.comm, &acc, tr->norm_all, sizeof acc, e2, sizeof e2);
        if (r2 != 0 && rc == 0) {
            snprintf(err, errlen, "%s", e2);
            rc = r2;
        }
        gradnorm_zero(&acc);
        for (int r = 0; r < tr->step.ranks && rc == 0; r++) gradnorm_add(&acc, &tr->norm_all[r]);
    }
    *norm = rc == 0 ? sqrt(gradnorm_value(&acc)) : NAN;
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

// One step's AdamW over the host or NVMe states, on the calling thread's cores: the CPU
// backend's host update (lay.upd_inline) runs it on the compute thread before the next forward
// (on the update worker beside the forward it took a core from the forward's threads: bench
// overlap --model small, resident, two Xeon cores: 271-282 ms a step beside, 263-267 here).
static int update_here(void *ctx, char *err, size_t errlen) {
    trainer_t *tr = ctx;
    char e[512] = "";
    int rc = optim_run_host(tr->tier, &tr->model, tr->cfg, tr->req.t, tr->req.lr, tr->req.grad_scale, e, sizeof e);
    if (rc != 0) snprintf(err, errlen, "optimizer: %s", e);
    return rc;
}

// The scheduler's update job: the same on the update worker, beside the next forward.
static int update_job(void *ctx, char *err, size_t errlen) {
    backend_worker_threads(&((trainer_t *)ctx)->be); // on the CPU, AdamW on this thread alone
    return update_here(ctx, err, errlen);
}

// --update backward's job: the update beside the backward; whatever ends it closes the
// handover, so that no visit waits for a slot the job will not give back.
static int update_beside_job(void *ctx, char *err, size_t errlen) {
    trainer_t *tr = ctx;
    char e[512] = "";
    backend_worker_threads(&tr->be);
    int rc = optim_run_backward(tr->tier, &tr->model, tr->cfg, tr->req.t, tr->req.lr, e, sizeof e);
    if (rc != 0) snprintf(err, errlen, "optimizer: %s", e);
    tier_grads_close(tr->tier, rc, rc ? err : NULL);
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
    if (tr->lay.upd_inline) return sched_update_run(tier_sched(tr->tier), update_here, tr, err, errlen);
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

// --update backward (one rank, no clipping): the update job starts before the forward and
// updates each shard once the backward hands its final gradient over; the step ends with it
// (the next forward reads every shard's new weights), and every streamed copy is stale then.
static int train_step_beside(trainer_t *tr, int t, const int *tokens, const int *targets, float dscale,
                             double *loss, double *norm, float *lr, char *err, size_t errlen) {
    const config_t *cfg = tr->cfg;
    int rc = trainer_optimizer_wait(tr, err, errlen);
    if (rc != 0) return rc;
    *lr = optim_lr(cfg, t);
    *norm = NAN;
    tr->req.t = t;
    tr->req.lr = *lr;
    tr->req.grad_scale = 1.0f;
    tier_grads_open(tr->tier);
    sched_update_start_beside(tier_sched(tr->tier), update_beside_job, tr);
    *loss = step_forward_backward(&tr->step, tokens, targets, cfg->accum, dscale);
    if (tr->step.fault[0]) {
        tier_grads_close(tr->tier, -EIO, tr->step.fault); // the job stops at the first shard not handed over
        snprintf(err, errlen, "%s", tr->step.fault);
        rc = -EIO;
    }
    char e2[512];
    int r2 = trainer_grad_norm(tr, norm, e2, sizeof e2); // Σ g² of each gradient, taken at its handover
    if (r2 == 0) r2 = trainer_optimizer_wait(tr, e2, sizeof e2);
    if (r2 != 0 && rc == 0) {
        snprintf(err, errlen, "%s", e2);
        rc = r2;
    }
    tier_params_invalidate(tr->tier);
    return rc;
}

// The step's hook as its first backward begins (step.h backward_begins): the first reads of
// its update, which no update in flight queues. There, not before the forward, so that they
// do not hold up that forward's parameter reads (train --model small, params and optimizer on
// NVMe: its step took 22 ms longer with them queued before it).
static void queue_reads(void *arg) {
    trainer_t *tr = arg;
    tr->qrc = optim_queue_first_reads(tr->tier, &tr->model, tr->qerr, sizeof tr->qerr);
}

int trainer_train_step(trainer_t *tr, int t, const int *tokens, const int *targets, double *loss, double *norm,
                       float *lr, char *err, size_t errlen) {
    const config_t *cfg = tr->cfg;
    const int ranks = tr->step.ranks;
    // a mean over the step's tokens, on every rank
    const float dscale = 1.0f / ((float)tr->step.N * (float)cfg->accum * (float)ranks);
    if (tr->lay.upd_bwd) return train_step_beside(tr, t, tokens, targets, dscale, loss, norm, lr, err, errlen);
    tr->qrc = 0; // no update in flight queues the first reads of this step's update: the step does
    tr->step.backward_begins = tr->reads_ahead ? NULL : queue_reads;
    tr->step.backward_arg = tr;
    tr->reads_ahead = 1;
    *loss = step_forward_backward(&tr->step, tokens, targets, cfg->accum, dscale);
    tr->step.backward_begins = NULL;
    *norm = NAN;
    *lr = optim_lr(cfg, t);
    int rc = 0;
    if (tr->step.fault[0]) {
        snprintf(err, errlen, "%s", tr->step.fault);
        rc = -EIO;
    } else if (tr->qrc != 0) { // as a fault: with ranks, every rank still reaches the collectives below
        snprintf(err, errlen, "optimizer: %s", tr->qerr);
        rc = tr->qrc;
    }
    if (rc == 0 || ranks > 1) { // a collective with ranks: every rank takes part
        char e2[512];
        int r2 = trainer_grad_norm(tr, norm, e2, sizeof e2); // a gradient's write failed: the step is void
        if (r2 != 0 && rc == 0) {
            snprintf(err, errlen, "%s", e2);
            rc = r2;
        }
    }
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

int trainer_nchunks(const trainer_t *tr, int s) { return tier_gchunks(&tr->lay, &tr->model, s); }

void trainer_chunk_range(const trainer_t *tr, int s, int c, size_t *lo, size_t *n) {
    tier_gchunk_range(&tr->lay, &tr->model, s, c, lo, n);
}

// Global chunk c of shard s on this rank: its local chunk (tier.h), or -1 when this rank's
// piece has none of it.
static int local_chunk(const trainer_t *tr, int s, int c) {
    int lc = c - tier_first_gchunk(&tr->lay, &tr->model, s);
    return lc >= 0 && lc < tier_nchunks(&tr->lay, &tr->model, s) ? lc : -1;
}

// Ranks: part k of global chunk c gathered from every rank's piece into the view. A collective;
// a rank whose read failed (rc) still takes part.
static int gather_chunk(trainer_t *tr, int s, int c, int parts, float *const mine[3], int rc, char *err,
                        size_t errlen) {
    size_t glo, gn;
    trainer_chunk_range(tr, s, c, &glo, &gn);
    const int R = tr->step.ranks;
    for (int r = 0; r < R; r++) { // rank r's share of the chunk: its piece ∩ the chunk
        size_t plo, pn;
        comm_piece(tr->model.shards[s].numel_padded, R, r, &plo, &pn);
        size_t a = glo > plo ? glo : plo, b = glo + gn < plo + pn ? glo + gn : plo + pn;
        if (b < a) b = a;
        tr->gcounts[r] = (b - a) * sizeof(float);
        tr->gdispls[r] = (a - glo) * sizeof(float); // a ≥ glo
    }
    for (int k = 0; k < 3; k++) {
        if (!(parts & (1 << k))) continue;
        char e2[512];
        float *view = tr->gview + (size_t)k * tr->lay.chunk_elems;
        int r2 = comm_allgatherv(tr->step.comm, mine[k], view, tr->gcounts, tr->gdispls, e2, sizeof e2);
        if (r2 != 0 && rc == 0) {
            snprintf(err, errlen, "%s", e2);
            rc = r2;
        }
    }
    return rc;
}

int trainer_states_get(trainer_t *tr, int s, int c, int parts, int fill_zero, float **master, float **m, float **v,
                       char *err, size_t errlen) {
    int rc = trainer_optimizer_wait(tr, err, errlen);
    tr->reads_ahead = 0; // (tier_o32_get drops them)
    if (tr->step.ranks == 1) return rc ? rc : tier_o32_get(tr->tier, s, c, parts, fill_zero, master, m, v, err, errlen);
    // ranks: a view of the whole global chunk, each rank's piece of it gathered (or zeros)
    float *view[3];
    for (int k = 0; k < 3; k++) view[k] = tr->gview + (size_t)k * tr->lay.chunk_elems;
    *master = view[0];
    *m = view[1];
    *v = view[2];
    size_t glo, gn;
    trainer_chunk_range(tr, s, c, &glo, &gn);
    if (fill_zero) {
        for (int k = 0; k < 3; k++)
            if (parts & (1 << k)) memset(view[k], 0, gn * sizeof(float));
        return rc;
    }
    float *mine[3] = {NULL, NULL, NULL};
    const int lc = local_chunk(tr, s, c);
    if (rc == 0 && lc >= 0) rc = tier_o32_get(tr->tier, s, lc, parts, 0, &mine[0], &mine[1], &mine[2], err, errlen);
    static float none; // an empty share: nothing is read from it
    for (int k = 0; k < 3; k++)
        if (!mine[k]) mine[k] = &none;
    return gather_chunk(tr, s, c, parts, mine, rc, err, errlen);
}

int trainer_states_put(trainer_t *tr, int s, int c, int parts, char *err, size_t errlen) {
    tr->reads_ahead = 0; // (tier_o32_put drops them)
    if (tr->step.ranks == 1) {
        int rc = tier_o32_put(tr->tier, s, c, parts, err, errlen);
        return rc || !(parts & TIER_MASTER) ? rc : tier_params_from_master(tr->tier, s, c, err, errlen);
    }
    // ranks: this rank's share of the view goes home (a chunk is written whole: the parts not
    // given are read first)
    const int lc = local_chunk(tr, s, c);
    if (lc < 0) return 0;
    size_t glo, gn, lo, n;
    trainer_chunk_range(tr, s, c, &glo, &gn);
    tier_chunk_range(&tr->lay, &tr->model, s, lc, &lo, &n);
    float *home[3];
    int rc = tier_o32_get(tr->tier, s, lc, TIER_O32 & ~parts, parts == TIER_O32, &home[0], &home[1], &home[2], err,
                          errlen);
    for (int k = 0; k < 3 && rc == 0; k++)
        if (parts & (1 << k)) memcpy(home[k], tr->gview + (size_t)k * tr->lay.chunk_elems + (lo - glo), n * sizeof(float));
    if (rc == 0) rc = tier_o32_put(tr->tier, s, lc, TIER_O32, err, errlen);
    return rc || !(parts & TIER_MASTER) ? rc : tier_params_from_master(tr->tier, s, lc, err, errlen);
}

int trainer_states_stage(trainer_t *tr, int s, int c, int sb, float **master, float **m, float **v, char *err,
                         size_t errlen) {
    if (tr->step.ranks > 1) return trainer_states_get(tr, s, c, TIER_O32, 1, master, m, v, err, errlen);
    int rc = trainer_optimizer_wait(tr, err, errlen);
    tr->reads_ahead = 0; // (tier_o32_stage drops them)
    return rc ? rc : tier_o32_stage(tr->tier, s, c, sb, master, m, v, err, errlen);
}

int trainer_states_store(trainer_t *tr, int s, int c, int sb, char *err, size_t errlen) {
    if (tr->step.ranks > 1) return trainer_states_put(tr, s, c, TIER_O32, err, errlen);
    return tier_o32_store(tr->tier, s, c, sb, err, errlen);
}

int trainer_states_flush(trainer_t *tr, int rc, char *err, size_t errlen) {
    return tr->step.ranks > 1 ? rc : tier_o32_flush(tr->tier, rc, err, errlen);
}

int trainer_states_fetch(trainer_t *tr, int s, int c, int parts, int sb, char *err, size_t errlen) {
    if (tr->step.ranks > 1) return 0;
    int rc = trainer_optimizer_wait(tr, err, errlen);
    tr->reads_ahead = 0; // (tier_o32_fetch drops them)
    return rc ? rc : tier_o32_fetch(tr->tier, s, c, parts, sb, err, errlen);
}

int trainer_states_fetched(trainer_t *tr, int s, int c, int parts, int sb, float **master, float **m, float **v,
                           char *err, size_t errlen) {
    if (tr->step.ranks > 1) return trainer_states_get(tr, s, c, parts, 0, master, m, v, err, errlen);
    return tier_o32_fetched(tr->tier, s, c, parts, sb, master, m, v, err, errlen);
}

void trainer_hash_chunk(const trainer_t *tr, hasher_t *hs, int s, int c, const float *master) {
    const shard_t *sh = &tr->model.shards[s];
    size_t lo, n, a, b;
    trainer_chunk_range(tr, s, c, &lo, &n);
    for (int t = 0; t < sh->ntensors; t++) // the tensors' bytes in order; the padding is not hashed
        if (model_tensor_in_range(&sh->tensors[t], lo, n, &a, &b))
            hasher_put(hs, master + (a - lo), (b - a) * sizeof(float));
}

int trainer_params_hash(trainer_t *tr, uint64_t *hash, char *err, size_t errlen) {
    hasher_t hs; // beside the reads of the next chunks
    hasher_init(&hs, FNV64_INIT);
    for (int s = 0; s < tr->model.nshards; s++) {
        for (int c = 0; c < trainer_nchunks(tr, s); c++) {
            float *master, *mm, *vv;
            int rc = trainer_states_get(tr, s, c, TIER_MASTER, 0, &master, &mm, &vv, err, errlen);
            if (rc != 0) {
                hasher_free(&hs);
                return rc;
            }
            trainer_hash_chunk(tr, &hs, s, c, master);
        }
    }
    *hash = hasher_value(&hs);
    hasher_free(&hs);
    return 0;
}
