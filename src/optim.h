// optim.h — the AdamW driver over shards (DESIGN §3): one step's update of every shard in
// order 0..n-1, a chunk at a time, wherever the states live — host homes in place, NVMe
// homes through the tier's double buffer (chunk k+1 read while chunk k is updated and
// written back), device homes on the device — and the learning-rate schedule.
//
// Each shard's gradients are read once and zeroed (or, on NVMe, simply replaced by the next
// step's), its master, m and v updated, and its new compute copy taken home; then the shard
// is published so that the next step's first use of it may go. Clipping is decided before
// (grad_scale): every gradient is final when an update starts.
//
// What it does not do: own a thread (optim_run_host runs as the scheduler's update job;
// optim_run_device on the calling compute thread, queued on the compute stream), or decide
// where anything lives (tier.c).
// Who calls it: trainer.c. Errors: -errno with one line naming the shard (an NVMe failure
// also the file and offset); nothing here exits.
#pragma once
#include "config.h"
#include "kernels.h"
#include "model.h"
#include "tier.h"

// Learning rate at 1-based step t: linear warmup to --lr over --warmup steps, then cosine
// decay to --min-lr at --steps.
float optim_lr(const config_t *cfg, int t);
// AdamW's hyperparameters for step t (bias corrections included); wd is set per tensor.
adamw_params_t optim_hparams(const config_t *cfg, int t, float lr, float grad_scale);

// The update of step t on the host over host or NVMe states, publishing each shard to the
// tier's scheduler as it becomes final. Returns 0 or -errno with one line in err.
int optim_run_host(tier_t *tier, const model_t *m, const config_t *cfg, int t, float lr, float grad_scale,
                   char *err, size_t errlen);
// An update's first reads where no update before it queued them: each update queues
// the next one's as it ends, so that they run in the backward and the next forward finds its
// first shards' states read (optim_run_host). For NVMe states updated after the backward
// without a cache; a no-op elsewhere. The trainer calls it where no update queued them (its
// first step, the first after a checkpoint), as the step's backward begins, with no update
// running. Returns 0 or -errno with one line in err.
int optim_queue_first_reads(tier_t *tier, const model_t *m, char *err, size_t errlen);
// --update backward (lay.upd_bwd): the update of step t without clipping, beside the
// backward: each shard as the backward hands its final gradient over (tier_grads_next_final),
// in that order, with the gradient where the backward left it (an NVMe home's never goes
// there); the next shard's first chunk is read while a shard's last one is updated when it is
// already handed over. Publishes nothing (the job runs beside: sched_update_start_beside).
// The same arithmetic on the same inputs as optim_run_host with grad_scale 1. Returns 0 or
// -errno with one line in err.
int optim_run_backward(tier_t *tier, const model_t *m, const config_t *cfg, int t, float lr, char *err,
                       size_t errlen);
// --optimizer device: the update of every shard queued on the compute stream, where the
// states live; gradients homed on the host come up first, and the new compute copy goes down
// to a host or NVMe home. The ops queued after it (the next forward) follow in stream order.
int optim_run_device(tier_t *tier, const model_t *m, const config_t *cfg, const backend_t *be, int t, float lr,
                     float grad_scale, char *err, size_t errlen);
