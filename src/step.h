// step.h — the model's math on a backend (DESIGN §2, §3) and the one loop of a step: each
// micro-batch's forward keeping only each block's input (acts.h), head + cross-entropy, and
// the backward recomputing each block, gradients accumulating in micro-batch order.
//
// The loop runs passes × phases: horizontal has one pass per micro-batch, each running it
// through the whole model; vertical has one pass in which every phase (embedding, each block,
// the head, each block's backward) runs every micro-batch before the next phase's shard is
// needed, so each streamed shard is acquired once per step. Every shard's gradients see the
// micro-batches in the same order either way, so both give the same bits.
//
// The fold: a micro-batch's gradients of a shard are computed alone (into zeros) and then
// added to the shard's sum, so the sum is ((g_0 + g_1) + g_2) + … in the step's micro-batch
// order whatever computed each g (the first micro-batch on one rank goes straight into the
// zeroed sum: the same bits). Over ranks (comm.h, ZeRO-3), rank r computes micro-batch
// k·ranks + r; after each micro-batch the ranks swap pieces (all-to-all) and each adds every
// rank's share of its own piece, in rank order, to the sum it holds (its piece of the shard's
// gradients, tier.h). So N ranks × --accum A give the bits of one rank × --accum N·A. The
// tied head's share of the embedding gradient is folded the same way and then gathered whole.
//
// What it does not do: decide or know where states live (tier.h hands it device pointers),
// update anything (optim.c), own memory (every buffer is the tier's, sized by tier_layout).
// Who calls it: trainer.c, on the compute thread.
#pragma once
#include <stddef.h>
#include "acts.h"
#include "backend.h"
#include "config.h"
#include "model.h"
#include "tier.h"

typedef struct {
    const model_t *m;
    backend_t *be;
    tier_t *tier;
    int B, T, N;              // N = B·T rows per micro-batch
    int bf16;                 // compute copy in BF16, activations rounded to BF16
    int w16;                  // bf16 mode, and the backend reads BF16 weights itself (step.c wts_t)
    int act16;                // w16, and ln1, ln2 and the MLP's intermediates are BF16 halves (tier.h; step.c)
    int att16;                // act16, and q, k, v, att and datt are BF16 halves too (tier.h; step.c)
    int nmb, vertical;        // micro-batches held at once; the schedule
    acts_t acts;              // activation checkpoints
    acts_scratch_t a;         // [device] one block's intermediates and the head
    int kept;                 // --recompute: blocks 0..kept-1 keep their intermediates (no recompute)
    int kept_bf16;            // ... stored as BF16 (acts.h)
    void **kept_base;         // [device] (nmb × kept) their allocations, micro-batch-major (the tier's)
    float *dres_all, *dres;   // [device] (nmb, N, C) ∂L/∂residual of each held micro-batch; the current one's
    int *tokens_all, *tokens; // [device] (nmb, N); the current micro-batch's
    int *targets_all, *targets; // [device] (nmb, N); the current micro-batch's
    float *stats_all, *stats; // [device] (nmb, 3, N) cross-entropy stats (kernels.h); the current micro-batch's
    float *wnorm;             // [device] (C) the final norm's FP32 weights, through the head
    int xf_mb;                // the micro-batch whose xf the scratch holds (-1: none)
    int logits_all, nq;       // every quantum's logits kept (cfg->logits_kept); quanta of the vocabulary
    int *lg_tag;              // (logits_all ? nq : 1) what each logits place holds: mb·nq + q, or -1
    float *rope_cos, *rope_sin; // [device] (T, HS/2)
    float *wbuf;              // [device] FP32 weights of the largest shard (bf16 mode)
    float *gtie;              // [device] tied head: the LM head's share of the embedding gradient, chunk after chunk
    float *gfresh;            // [device] one micro-batch's gradients of a shard before they are folded into the
                              // sum; NULL with one micro-batch on one rank
    float *grecv;             // [device] ranks: this rank's piece of every rank's micro-batch gradients
    struct comm *comm;        // the world (comm.h): rank r's micro-batch k is the step's k·ranks + r
    int rank, ranks;
    int nmb_max;              // --accum: the most micro-batches a step may have
    double *mb_loss;          // (--accum) each micro-batch's mean loss, for the ranks' sum in order
    float *losses_host;       // (N) per-row losses read back
    int *uses;                // (max_uses) the current phase's use order
    sched_t *assist;          // the scheduler whose posted update pieces the forward's products run
                              // first (lay.upd_assist: sched_assist_poll), or NULL
    // step_forward_backward calls it (when set) once, as the step's first backward begins:
    // the first pass's forward has fetched its parameters by then (the trainer queues the
    // first reads of the step's update there when no update in flight does)
    void (*backward_begins)(void *arg);
    void *backward_arg;
    char fault[512];          // the first failure of the phase (a fetch, a visit): its numbers are void
} step_t;

// Points st at the tier's buffers and fills the RoPE table. Returns 0 or -errno with one line.
int step_init(step_t *st, const config_t *cfg, const model_t *m, backend_t *be, tier_t *tier, char *err,
              size_t errlen);
void step_free(step_t *st); // NULL-safe

// Starts an evaluation of nbatches forwards: the scheduler learns their use order.
void step_begin_eval(step_t *st, int nbatches);
// Forward only over (B, T) tokens; leaves the last vocabulary quantum's logits in st->a.logits
// (N, V when V ≤ CE_QUANTUM). Returns the mean loss, or NaN with st->fault set.
double step_forward(step_t *st, const int *tokens, const int *targets);
// Forward + backward of nmb micro-batches (tokens, targets: nmb × N, one after another) in the
// schedule's order, gradients scaled by dscale. Returns the mean of the micro-batch losses,
// or NaN with st->fault set. With ranks: this rank's micro-batches, gradients summed over
// every rank's; the losses in st->mb_loss (the return value is this rank's mean).
double step_forward_backward(step_t *st, const int *tokens, const int *targets, int nmb, float dscale);
