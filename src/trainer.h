// trainer.h — the trainer: a model, its backend, its states on their tiers, and the training
// step over them (DESIGN §3). Opaque: callers go through these functions.
//
// A training step is the forward and backward of --accum micro-batches (step.h), the global
// gradient norm and the clip factor, and AdamW started over every shard (optim.h): on the
// scheduler's update worker for host or NVMe states, overlapping the next step's forward
// (whose use of a shard waits only for that shard's update), or queued on the compute stream
// for --optimizer device. Every buffer is allocated in trainer_init (tier_layout lists them);
// nothing allocates inside a step. Every placement gives the same bits (DESIGN §3).
//
// What it does not do: parse flags, print, or exit (train.c, eval.c and the benches do).
// Who calls it: train.c, eval.c, checkpoint.c, bench/, the tests; all on one thread (the
// compute thread of scheduler.h's list).
// Errors: -errno with one line in err: -EDQUOT over --hbm-budget, -ENODEV no usable device,
// -EINVAL a configuration the backend refuses (the user's to fix), others at run time.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "hasher.h"
#include "io.h"
#include "model.h"
#include "scheduler.h"
#include "tier.h"

typedef struct trainer trainer_t;

// Builds the model layout, the backend, every buffer of every tier and the initial weights
// from cfg->seed. Returns 0 and *out, or -errno with one line in err (everything released).
int trainer_init(trainer_t **out, const config_t *cfg, char *err, size_t errlen);
void trainer_free(trainer_t *tr); // NULL-safe; waits for the update in flight

const model_t *trainer_model(const trainer_t *tr);
// The backend the trainer computes on (bench train wraps its op table to time the ops).
struct backend *trainer_backend(trainer_t *tr);
const config_t *trainer_config(const trainer_t *tr);
int trainer_rows(const trainer_t *tr); // N = B·T rows per micro-batch
int trainer_ranks(const trainer_t *tr); // the world's ranks (comm.h)
int trainer_rank(const trainer_t *tr);  // this one

// What the run held and moved, for reports.
typedef struct {
    const char *backend;      // "cpu", "cuda"
    int threads;
    uint64_t device_peak;     // the arena's high-water mark
    uint64_t device_budget;   // its cap (0 = none)
    uint64_t host_bytes;      // the host pool's bytes in use
    int nslots, nhcache;      // parameter slots, host-cache entries
    int upd_bwd;              // the update ran in the backward (--update, tier_layout)
    int upd_inline;           // the CPU backend's host update ran before the next forward (tier_layout)
    tier_stats_t tier;
    sched_stats_t sched;
    int has_nvme;
    io_info_t nvme;           // when has_nvme
    io_stats_t nvme_stats;    // the engine's counters, busy time included (zeros without a store)
} trainer_info_t;
void trainer_info(const trainer_t *tr, trainer_info_t *out);
// The failure that voided the last phase (a fetch or a visit), or NULL.
const char *trainer_fault(const trainer_t *tr);

// ---------------------------------------------------------------- compute

// Starts an evaluation of nbatches forwards (the scheduler learns their use order).
void trainer_begin_eval(trainer_t *tr, int nbatches);
// Forward only over (B, T) tokens. Returns the mean loss, or NaN (trainer_fault says why).
double trainer_forward(trainer_t *tr, const int *tokens, const int *targets);
// The last forward's logits (N, V) into dst (host memory), for a vocabulary of one quantum
// (V ≤ CE_QUANTUM: the forward holds one quantum's logits at a time). Returns 0 or -EINVAL.
int trainer_logits(trainer_t *tr, float *dst, char *err, size_t errlen);
// Forward + backward of nmb micro-batches (tokens, targets: nmb × N; nmb ≤ --accum when
// vertical), gradients scaled by dscale (1 / (N · accum) for a mean over the step's tokens).
// Returns the mean of the micro-batch losses, or NaN (trainer_fault says why).
double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, int nmb, float dscale);
// √(Σ g²) over every shard into *norm, in shard order: the same bits for any thread count or
// placement. Returns 0, or -errno with one line when a gradient's write-back failed.
int trainer_grad_norm(trainer_t *tr, double *norm, char *err, size_t errlen);
// Shard s's gradients in host memory (after a backward): the home or a staging copy, valid
// until the next call. Returns 0 or -errno with one line.
int trainer_grads_get(trainer_t *tr, int s, const float **g, char *err, size_t errlen);
// Zeroes every gradient (after waiting for an update in flight). A training loop need not:
// the optimizer consumes each shard's gradients. Returns 0 or -errno with one line.
int trainer_zero_grads(trainer_t *tr, char *err, size_t errlen);

// ---------------------------------------------------------------- the step

// Starts AdamW over every shard for 1-based step t and returns: host/NVMe states update on the
// update worker while the caller goes on (each shard's gradients consumed once read); --optimizer
// device queues the whole update here. Returns 0, or the previous update's -errno with one line
// (an NVMe failure names the shard, file and offset). Clipping is decided before (grad_scale).
int trainer_optimizer_step(trainer_t *tr, int t, float lr, float grad_scale, char *err, size_t errlen);
// One optimizer step t over its accum micro-batches (tokens, targets: accum × N): forward and
// backward, the global norm and the clip factor, the learning rate of step t, and the update
// started. Returns 0 with the mean loss, the norm (before clipping) and the rate; or -errno
// with one line (a failed fetch or update). With ranks (comm.h): tokens and targets are this
// rank's --accum micro-batches, the loss is the mean over every rank's, and a failure on any
// rank is every rank's, named "rank R: …".
int trainer_train_step(trainer_t *tr, int t, const int *tokens, const int *targets, double *loss, double *norm,
                       float *lr, char *err, size_t errlen);
// Waits for the update in flight to end. Returns 0 or its -errno with one line.
int trainer_optimizer_wait(trainer_t *tr, char *err, size_t errlen);

// ---------------------------------------------------------------- states

// A shard's FP32 states go by chunks (tier.h's global chunks, whatever the ranks): chunk c
// covers elements [*lo, *lo + *n). With ranks each chunk is made of the ranks' pieces:
// trainer_states_get without fill_zero gathers them (a collective: every rank makes the same
// calls in the same order), and trainer_states_put keeps this rank's piece of what it is given.
int trainer_nchunks(const trainer_t *tr, int s);
void trainer_chunk_range(const trainer_t *tr, int s, int c, size_t *lo, size_t *n);
// Chunk c of shard s's master, m and v in host memory (pointers at element lo): the host
// homes, or a staging buffer read from home (only `parts`, TIER_MASTER|TIER_M|TIER_V), or
// zeros with fill_zero (the caller overwrites them). Waits for the optimizer. Valid until the
// next call. Returns 0 or -errno with one line.
int trainer_states_get(trainer_t *tr, int s, int c, int parts, int fill_zero, float **master, float **m, float **v,
                       char *err, size_t errlen);
// After the caller changed what trainer_states_get gave: writes those parts home; put a
// shard's chunks in order: after its last, the shard's compute copy is rebuilt from the
// master. Returns 0 or -errno with one line.
int trainer_states_put(trainer_t *tr, int s, int c, int parts, char *err, size_t errlen);
// Whole chunks of new states without waiting for the disk (the checkpoint load, --init-from):
// trainer_states_stage gives zeros for chunk c of shard s in staging buffer sb (0 or 1) to be
// filled, trainer_states_store sends them home (NVMe: queued, the compute copy rebuilt from
// the master as trainer_states_put does) and trainer_states_flush waits for what is queued
// whatever rc (the caller's result so far) says, keeping the first failure: rc where it is not 0.
// Chunk k of a load in buffer k % 2 keeps one write in flight while the next chunk is filled.
// With ranks they are trainer_states_get with fill_zero and trainer_states_put. 0 or -errno
// with one line (a queued write's failure shows at the call that waits for it).
int trainer_states_stage(trainer_t *tr, int s, int c, int sb, float **master, float **m, float **v, char *err,
                         size_t errlen);
int trainer_states_store(trainer_t *tr, int s, int c, int sb, char *err, size_t errlen);
int trainer_states_flush(trainer_t *tr, int rc, char *err, size_t errlen);
// A pass over the states with each chunk's read queued ahead (the checkpoint save): as
// tier_o32_fetch and tier_o32_fetched (chunk k in staging buffer k % 2, chunk k+1 fetched once
// chunk k is; trainer_states_flush waits for a fetch never taken). With ranks, fetch does
// nothing and fetched is trainer_states_get (a collective). 0 or -errno with one line.
int trainer_states_fetch(trainer_t *tr, int s, int c, int parts, int sb, char *err, size_t errlen);
int trainer_states_fetched(trainer_t *tr, int s, int c, int parts, int sb, float **master, float **m, float **v,
                           char *err, size_t errlen);
// Hands hs the tensors' slices of chunk c of shard s, from master (the chunk's FP32 masters),
// in tensor order: the one definition of params_hash's order, which every stored hash (and
// each load's check of it) depends on. trainer_params_hash is this over every chunk in order.
void trainer_hash_chunk(const trainer_t *tr, hasher_t *hs, int s, int c, const float *master);
// 64-bit FNV-1a over the FP32 master weights of every tensor, in shard order (waits for the
// optimizer; with ranks a collective, the same on every rank). Returns 0 or -errno with one line.
int trainer_params_hash(trainer_t *tr, uint64_t *hash, char *err, size_t errlen);
