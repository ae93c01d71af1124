// step.h — one training step of the Llama-style model on a backend: micro-batch forward
// keeping only each block's input (activation checkpoints), head + cross-entropy, backward
// recomputing each block, gradient accumulation, global-norm clipping and AdamW.
//
// Each state has a home tier (--params, --grads, --optimizer): the device arena, the host
// pool or the NVMe store. Parameters that do not live on the device stream into slots
// through the scheduler in the step's use order; host-resident gradients visit a device slot
// for their shard's backward; NVMe-resident optimizer states stream through a host double
// buffer a shard at a time. Copies are exact, so every placement gives the same bits.
// Every buffer is allocated in trainer_init; nothing allocates inside a step.
// Called by train.c and the model tests.
#pragma once
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "hostmem.h"
#include "io.h"
#include "scheduler.h"
#include "config.h"
#include "model.h"

typedef struct {
    // forward intermediates of one block (B·T rows), recomputed in backward
    float *ln1, *rstd1, *q, *k, *v, *att, *lse, *x2, *ln2, *rstd2, *gate, *up, *h, *tmp;
    // backward
    float *dres, *dln, *dq, *dk, *dv, *datt, *dgate, *dup, *dh;
    // head
    float *xf, *rstdf, *logits, *losses;
} acts_t;

typedef struct {
    uint64_t h2d_bytes, d2h_bytes;            // host ↔ device copies of parameters and gradients
    uint64_t nvme_read_bytes, nvme_write_bytes;
    uint64_t ckpt_h2d_bytes, ckpt_d2h_bytes;  // of which activation checkpoints (--checkpoints host)
    uint64_t cache_hits;                      // --host-cache: streamed fetches served from host
    double opt_ms;                            // time in the optimizer step
    double opt_nvme_wait_ms;                  // of which waiting for optimizer-state reads/writes
    double copy_ms;                           // compute thread copying gradients and checkpoints
} tier_stats_t;

typedef struct {
    const config_t *cfg;
    model_t model;
    backend_t be;
    int B, T, N;              // N = B·T rows per micro-batch
    int bf16;                 // precision: compute copy in BF16, activations rounded to BF16
    size_t pbytes;            // bytes per element of the compute copy (2 or 4)
    hostmem_t *host;          // the host pool: every host-resident home and staging buffer
    nvme_store_t *nvme;       // NULL unless a state lives on NVMe
    // ---- parameters (compute copy), one home per --params
    void **p;                 // [device] resident copies (--params device), else NULL
    void **p_host;            // [host] homes (--params host), else NULL
    uint64_t *p_off;          // [nvme] home extents (--params nvme), else NULL
    uint32_t *p_crc;          // CRC32C of each params extent written (--io-verify)
    sched_t *sched;           // streams host/nvme params into the device slots
    int nslots;
    void **pslot;             // [device] (nslots) slots of the largest shard
    void **pstage;            // [host] (nslots) NVMe staging, one per slot
    void **slot_ev;           // (nslots) backend events: each slot's last reader queued (CUDA: the
                              // fetch into it waits for that alone); NULL on the CPU backend
    int *slot_of;             // (nshards) the slot a shard was acquired into (compute thread)
    // ---- gradients, one home per --grads
    float **g;                // (nshards) [device] resident or [host] homes
    float *gslot[2];          // [device] where host-resident shards' gradients visit, alternately:
                              // one shard's copy up overlaps the previous one's backward
    int gslot_next;           // the slot the next visit takes
    int *gslot_of;            // (nshards) the slot a shard's visit holds
    void *gup_ev[2];          // backend events: a slot's copy up has landed (compute waits)
    void *gfree_ev[2];        // a slot's copy down has read it (the next copy up waits)
    void *gops_ev;            // the visit's ops are queued (its copy down waits)
    void **gdone_ev;          // (nshards) a shard's host home is written back (its next visit waits)
    void *step_ev;            // the step's backward is queued: what the optimizer thread's copies wait for
    float *gstage;            // [host] device-resident gradients read back for the update, on a
                              // backend whose memory the CPU cannot address (else NULL)
    float *gtie;              // [device] tied head: the LM head's share of the embedding
                              // gradient, summed over micro-batches, added at the step's end
    float **gcur;             // (nshards) the device copy being accumulated, while acquired
    // ---- optimizer states, one home per --optimizer
    float **master, **m, **v; // [host] homes (--optimizer host), [device] (--optimizer device: one
                              // allocation per shard, m and v after master), else NULL
    uint64_t *o_off;          // [nvme] extent of (master, m, v) per shard
    char (*o_name)[64];       // "optimizer states of block.3": labels for NVMe messages
    uint32_t *o_crc;
    float *ostage[2];         // [host] NVMe double buffer, (3, max shard) each; [0] alone stages
                              // device states (--optimizer device) for checkpoints and the hash
    void *pnew;               // [device] --optimizer device with params off the device: the new
                              // compute copy, read back to its home
    struct { const char *label; double t0; int track; } ospan[4]; // --trace: in-flight o32 reads [0,1], writes [2,3]
    void *pstage_opt;         // [host] the new compute copy of a shard bound for NVMe
    float *wbuf[2];           // [device] FP32 weights of up to two shards (BF16 mode)
    // ---- activation checkpoints: block inputs of every micro-batch the schedule holds
    int nmb;                  // micro-batches held at once: --accum when vertical, else 1
    float *ckpt;              // [device] (nmb, L+1, N, C) block inputs; [L] is the final residual
                              // (--checkpoints device), else NULL
    float *ckpt_host;         // [host] the same (--checkpoints host), else NULL
    float *xbuf[2];           // [device] --checkpoints host: where a checkpoint is read and written
    int xtag[2], xcur;        // which (micro-batch, layer) each xbuf holds (-1: none); the last input
    void *xfree_ev[2];        // backend events: an xbuf's copy down has read it (its next writers wait)
    void *xops_ev;            // a block's output is queued (its copy down waits)
    void **xdone_ev;          // (nxdone = nmb·(L+1)) a checkpoint's host copy is written (its copy up waits)
    int nxdone;
    float *dres_all;          // [device] (nmb, N, C) ∂L/∂residual of each micro-batch in backward
    int *tokens_all;          // [device] (nmb, N)
    // ---- --host-cache: host copies of NVMe-resident parameters (worker thread; see fetch_params)
    int nhcache;
    void **hcache;            // [host] (nhcache) buffers of the largest shard
    int *hcache_shard;        // which shard each holds, -1 when empty
    pthread_mutex_t hc_mu;    // guards hcache_shard (the fetch worker and the optimizer thread)
    acts_t a;                 // [device]
    float *rope_cos, *rope_sin; // [device] (T, HS/2)
    int *tokens;              // [device] the current micro-batch's tokens (points into tokens_all)
    int *targets;             // [device] (N)
    float *losses_host;       // (N) per-row losses read back from the device
    int *uses;                // the use order of a training step's parameters
    int nuses, nuses_eval;
    // ---- the optimizer thread: a step's update runs shard 0..n-1 while the next step's
    // forward starts; compute (and the scheduler's fetches) wait only for the shard they need
    pthread_t opt_thread;
    int opt_started, sync_inited;
    pthread_mutex_t opt_mu;
    pthread_cond_t opt_cv;
    int opt_busy;             // an update is queued or running
    int opt_done;             // shards [0, opt_done) of the current update are final
    int opt_stop;
    int opt_rc;               // 0, or the update's -errno (message in opt_err)
    char opt_err[512];
    struct { int t; float lr, grad_scale; } opt_req;
    uint64_t host_bytes;      // host pool bytes in use
    tier_stats_t stats;
    char fault[512];          // set when a streamed fetch failed: the step's numbers are void
} trainer_t;

// Builds the model layout, initializes the backend and every buffer, and the weights from
// cfg->seed. Returns 0, or a negative errno with one line in err (e.g. over --hbm-budget).
int trainer_init(trainer_t *tr, const config_t *cfg, char *err, size_t errlen);
void trainer_free(trainer_t *tr); // NULL-safe

// Copies the FP32 master weights into the compute copy (BF16-rounded in bf16 mode), wherever
// the optimizer states live (the tests load master weights directly into host homes).
void trainer_sync_params(trainer_t *tr);
// Zeroes every gradient (after waiting for an update in flight). A training loop need not
// call it: the optimizer zeroes each shard's gradients once it has read them.
void trainer_zero_grads(trainer_t *tr);
// Starts an evaluation (n forwards): tells the scheduler the order in which parameter
// shards will be used.
void trainer_begin_eval(trainer_t *tr, int nbatches);
// Forward only over (B, T) tokens; leaves the logits (N, V) in tr->a.logits. Returns the
// mean loss.
double trainer_forward(trainer_t *tr, const int *tokens, const int *targets);
// Forward + backward of a step's nmb micro-batches (tokens, targets: nmb × N, one micro-batch
// after another; nmb ≤ --accum) in the --schedule order: horizontal runs each micro-batch
// through the whole model, vertical runs every micro-batch through block l before block l+1.
// Gradients accumulate in micro-batch order for every shard, so both give the same bits.
// Scaled by dscale (1 / (N · accum) for a mean over the step's tokens). Tells the scheduler
// the step's use order itself. Returns the mean of the micro-batch losses, or NaN with
// tr->fault set when a parameter fetch failed.
double trainer_step_fb(trainer_t *tr, const int *tokens, const int *targets, int nmb, float dscale);
// One micro-batch: trainer_step_fb with nmb = 1.
double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, float dscale);
// √(Σ g²) over every shard, in shard order: the same bits for any thread count.
double trainer_grad_norm(trainer_t *tr);
// Starts AdamW over every shard (t = 1-based step) on the optimizer thread and returns: the
// update runs shard 0..n-1 (each shard's gradients are zeroed once read) while the caller
// goes on with the next step, whose uses of a shard wait for that shard's update. Returns 0,
// or the previous update's -errno with one line in err (an NVMe failure names shard, file
// and offset). Clipping must be decided before (grad_scale): every gradient is final here.
// --optimizer device: the whole update is queued on the compute stream here, by the caller.
int trainer_optimizer_step(trainer_t *tr, int t, float lr, float grad_scale, char *err, size_t errlen);
// One optimizer step t over its accum micro-batches (tokens, targets: accum × N): forward
// and backward, the global norm and the clip factor, the learning rate of step t, and the
// update started on the optimizer thread. Returns 0 with the mean loss, the norm (before
// clipping) and the rate; or -errno with one line in err (a failed fetch or update).
int trainer_train_step(trainer_t *tr, int t, const int *tokens, const int *targets, double *loss, double *norm,
                       float *lr, char *err, size_t errlen);
// Waits for the update in flight to end. Returns 0 or its -errno with one line in err.
int trainer_optimizer_wait(trainer_t *tr, char *err, size_t errlen);
// The FP32 master, m and v of shard s in host memory (numel_padded each): the host homes,
// or, for NVMe- or device-resident states, the staging buffer — read from home, or zero-filled
// when fill_zero (the caller will overwrite them). Waits for the optimizer. Valid until the
// next call. Returns 0 or -errno with one line in err.
int trainer_states_get(trainer_t *tr, int s, int fill_zero, float **master, float **m, float **v, char *err,
                       size_t errlen);
// After the caller changed what trainer_states_get gave: writes NVMe- or device-resident states back
// and rebuilds the shard's compute copy from the master. Returns 0 or -errno with one line.
int trainer_states_put(trainer_t *tr, int s, char *err, size_t errlen);
// 64-bit FNV-1a over the FP32 master weights of every tensor, in shard order.
uint64_t trainer_params_hash(trainer_t *tr);


// Learning rate at 1-based step t: linear warmup to --lr over --warmup steps, then cosine
// decay to --min-lr at --steps.
float lr_schedule(const config_t *cfg, int t);
