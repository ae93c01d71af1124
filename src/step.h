// step.h — one training step of the Llama-style model on a backend: micro-batch forward
// keeping only each block's input (activation checkpoints), head + cross-entropy, backward
// recomputing each block, gradient accumulation, global-norm clipping and AdamW.
//
// All model states are resident here (compute copy and gradients in the device arena, FP32
// master/m/v on the host); the tiers issue moves them. Every buffer is allocated in
// trainer_init; nothing allocates inside a step. Called by train.c and the model tests.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
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
    const config_t *cfg;
    model_t model;
    backend_t be;
    int B, T, N;              // N = B·T rows per micro-batch
    int bf16;                 // precision: compute copy in BF16, activations rounded to BF16
    // per shard (model.nshards), each its own allocation: nothing assumes adjacency
    void **p;                 // [device] compute copy: uint16 BF16 or float (fp32 mode)
    float **g;                // [device] FP32 gradients (accumulated over micro-batches)
    float **master, **m, **v; // [host] FP32 master weights and Adam moments
    float *wbuf[2];           // [device] FP32 weights of up to two shards (BF16 mode)
    float *ckpt;              // [device] (L+1, N, C) block inputs; [L] is the final residual
    acts_t a;                 // [device]
    float *rope_cos, *rope_sin; // [device] (T, HS/2)
    int *tokens, *targets;    // [device] (N)
    uint64_t host_bytes;      // host-side bytes allocated (master/m/v)
} trainer_t;

// Builds the model layout, initializes the backend and every buffer, and the weights from
// cfg->seed. Returns 0, or a negative errno with one line in err (e.g. over --hbm-budget).
int trainer_init(trainer_t *tr, const config_t *cfg, char *err, size_t errlen);
void trainer_free(trainer_t *tr); // NULL-safe

// Copies the FP32 master weights into the compute copy (BF16-rounded in bf16 mode).
void trainer_sync_params(trainer_t *tr);
void trainer_zero_grads(trainer_t *tr);
// Forward only over (B, T) tokens; leaves the logits (N, V) in tr->a.logits. Returns the
// mean loss.
double trainer_forward(trainer_t *tr, const int *tokens, const int *targets);
// Forward + backward of one micro-batch; gradients accumulate, scaled by dscale
// (1 / (N · accum) for a mean over the step's tokens). Returns the micro-batch mean loss.
double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, float dscale);
// √(Σ g²) over every shard, in shard order: the same bits for any thread count.
double trainer_grad_norm(trainer_t *tr);
// AdamW over every shard (t = 1-based step), then the compute copy holds the new weights.
void trainer_optimizer_step(trainer_t *tr, int t, float lr, float grad_scale);
// 64-bit FNV-1a over the FP32 master weights of every tensor, in shard order.
uint64_t trainer_params_hash(const trainer_t *tr);

// Learning rate at 1-based step t: linear warmup to --lr over --warmup steps, then cosine
// decay to --min-lr at --steps.
float lr_schedule(const config_t *cfg, int t);
