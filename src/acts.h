// acts.h — activations: the checkpoint store (each block's input for the backward's recompute,
// "acts"; "ckpt" means saved checkpoints only) and the shape of the step's device scratch.
//
// The store: act(mb, l) is block l's input for micro-batch mb, act(mb, L) the final residual.
// --checkpoints device keeps them all in the arena. --checkpoints host keeps them in the host
// pool and moves them through two device buffers (visit.h): an act is copied up into the
// buffer not holding the current input (unless a buffer still holds it), and a block's output
// is written into the other buffer and copied down. Nothing waits on the host: the next
// writers of a buffer wait for its copy down, and so does the act's next copy up.
//
// In bf16 mode every act is stored as BF16 (the values are BF16 already: the step rounds them),
// half the bytes, and the ops see an FP32 copy in one device buffer: an act read is converted
// into it (unless it holds that act), and a block's output is written in FP32 over its input's
// copy (the block is done with its input by then) and converted into the store (or into a
// visit buffer, for --checkpoints host, whose copies then move 2 bytes an element). The bits
// are unchanged.
//
// The scratch: one block's forward intermediates (recomputed in the backward), its backward,
// and the head, for B·T rows, but the MLP's gate, up and h for one chunk of rows
// (model_mlp_rows); acts_scratch_sizes gives each buffer's size (tier_layout counts them),
// acts_scratch_carve points them into one device allocation. With act16 (tier.h: h16 below)
// ln1, ln2, gate, up and h hold BF16 halves, and with att16 q, k, v, att and x2 too; the
// buffers that never hold FP32 words are sized for halves (gate, up and h; with att16 q, k, v,
// att, x2 and ln2, whose dq and dk are then halves), the others hold them in their first half
// (ln1: bf16 mode's xf).
//
// What it does not do: allocate (the trainer allocates what tier_layout lists), or know which
// tier anything else lives in. Who calls it: step.c (compute thread), tier_layout.c (sizes).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "model.h"
#include "visit.h"

// ---------------------------------------------------------------- the scratch

// the first acts_nkept: what a kept block keeps; of which ACTS_NATTN from the attention half
enum { ACTS_NSCRATCH = 18, ACTS_NKEPT = 13, ACTS_NATTN = 10 };
typedef union {
    struct {
        // forward intermediates of one block (N = B·T rows), recomputed in the backward; gate,
        // up and h of one MLP chunk (model_mlp_rows)
        float *ln1, *rstd1, *q, *k, *v, *att, *lse, *x2, *ln2, *rstd2, *gate, *up, *h;
        // the block's backward: the one buffer no forward intermediate can stand in for (its
        // other gradients live in intermediates it has finished with: step.c's block_backward)
        float *dln;
        // the head: one micro-batch's normed x_L (in bf16 mode in ln1's buffer: see below), its
        // rstd, one vocabulary quantum's logits (N, ≤ CE_QUANTUM) (or every quantum's, one after
        // another)
        float *xf, *rstdf, *logits, *losses;
    };
    float *buf[ACTS_NSCRATCH];
} acts_scratch_t;

// The buffers a kept block keeps: all ACTS_NKEPT when one MLP chunk holds the N rows, else the
// attention half's ACTS_NATTN (the backward recomputes each MLP chunk: there is no room for more).
static inline int acts_nkept(const model_t *m, size_t N) {
    return model_mlp_chunks(m, (int)N) == 1 ? ACTS_NKEPT : ACTS_NATTN; // N = B·T, an int
}
// Bytes of each scratch buffer, in the order of acts_scratch_t, for N rows of model m; the
// logits hold one vocabulary quantum, or every one when logits_all (cfg->logits_kept). In bf16
// mode xf takes no bytes of its own: it is ln1's buffer, which no block holds while the head
// runs (a kept block's are in its own allocation), and the block backward's dv, which lives in
// xf with FP32 storage, lives in the checkpoints' FP32 copy instead (acts_lend). h16: the
// ACTS_H16_* flags of the step's BF16 activations (the halves-sized buffers above; 0: every
// buffer FP32-sized). fwd 0 (tier.h scratch_fwd: every block keeps its intermediates in FP32
// storage, so no forward writes them here): the buffers a kept block keeps (acts_nkept) take no
// bytes, but ln1 in bf16 mode (xf).
void acts_scratch_sizes(const model_t *m, size_t N, int logits_all, int bf16, unsigned h16, int fwd,
                        uint64_t bytes[ACTS_NSCRATCH]);
// Points a's buffers into base (one device allocation of acts_scratch_total bytes), each at
// a 4 KiB boundary; one of no bytes is NULL.
void acts_scratch_carve(acts_scratch_t *a, void *base, const model_t *m, size_t N, int logits_all, int bf16,
                        unsigned h16, int fwd);
// Σ bytes, each rounded up to 4 KiB
uint64_t acts_scratch_total(const model_t *m, size_t N, int logits_all, int bf16, unsigned h16, int fwd);
// --recompute: a kept block's forward intermediates (ln1 … h, what the backward reads, or ln1
// … rstd2: acts_nkept) live in an allocation of their own, acts_kept_total bytes, instead of the
// scratch. FP32: the forward writes them there (acts_kept_carve points a's first acts_nkept
// buffers into it and leaves the rest — the backward's, the head's — as they are), the buffers
// that hold BF16 halves alone (h16, as in the scratch, ln1 too) sized for them. BF16 (bf16
// mode, cfg->kept_bf16): half the bytes; the BF16-valued buffers are stored as BF16 and the
// three statistics (rstd1, lse, rstd2) as FP32: the forward runs in the scratch and
// acts_kept_store converts them into the allocation, acts_kept_load back before the backward
// (the values are BF16 already: the bits do not change); the buffers h16 names are BF16
// halves in the scratch already (step.h act16, att16) and are copied. With att16 every
// BF16-valued buffer is halves already, and the two forms hold the same bytes.
enum {
    ACTS_H16_NORMS_MLP = 1, // act16: ln1, ln2, gate, up and h
    ACTS_H16_ATTN = 2,      // att16: q, k, v, att and x2
};
// The flags of a layout's (and so its step's) BF16 activations, tier.h act16 and att16.
static inline unsigned acts_h16_of(int act16, int att16) {
    return (act16 ? ACTS_H16_NORMS_MLP : 0u) | (att16 ? ACTS_H16_ATTN : 0u);
}
uint64_t acts_kept_total(const model_t *m, size_t N, int bf16, unsigned h16);
void acts_kept_carve(acts_scratch_t *a, void *base, const model_t *m, size_t N, unsigned h16);
void acts_kept_store(backend_t *be, void *kept, const acts_scratch_t *a, const model_t *m, size_t N, unsigned h16);
void acts_kept_load(backend_t *be, acts_scratch_t *a, const void *kept, const model_t *m, size_t N, unsigned h16);

// ---------------------------------------------------------------- the checkpoint store

typedef struct {
    uint64_t *h2d_bytes, *d2h_bytes;   // all copies between host and device (or NULL)
    uint64_t *act_h2d, *act_d2h;       // of which activation checkpoints (or NULL)
    double *copy_ms;                   // the compute thread queuing them (or NULL)
} acts_counters_t;

typedef struct {
    backend_t *be;
    int nmb, L;               // micro-batches held (vertical: --accum, else 1), blocks
    size_t elems;             // N·C elements per act
    int bf16;                 // the store holds BF16 (uint16_t elements), the ops an FP32 copy in f32
    float *dev;               // [device] (nmb, L+1, N, C) with --checkpoints device, else NULL (bf16: uint16_t)
    float *host;              // [host] the same with --checkpoints host, else NULL (bf16: uint16_t)
    visit_t visit;            // --checkpoints host: the two device buffers (bf16: of uint16_t)
    float *f32;               // [device] bf16: the FP32 copy the ops read and write (N, C)
    int ftag;                 // bf16: the act f32 holds (-1: none)
    int tag[2], cur;          // --checkpoints host: the act each buffer holds (-1: none), the current input's
    uint64_t *act_h2d, *act_d2h;
} acts_t;

// dev: the device store, or host + buf0/buf1 (two device buffers of N·C elements) for
// --checkpoints host; f32: bf16 mode's FP32 device buffer of N·C floats (NULL: FP32 storage).
// Returns 0 or -errno with one line in err.
int acts_init(acts_t *a, backend_t *be, int nmb, int L, size_t elems, float *dev, float *host, float *buf0,
              float *buf1, float *f32, const acts_counters_t *cnt, char *err, size_t errlen);
void acts_free(acts_t *a); // NULL-safe
// The device copy of act (mb, l), for reading.
float *acts_in(acts_t *a, int mb, int l);
// For an acts_in of act (mb, l) to come: with --checkpoints host its copy up starts now (into
// the buffer acts_in will find it in); nothing else (bf16 mode converts at acts_in).
void acts_prefetch(acts_t *a, int mb, int l);
// Where to write act (mb, l) on the device; acts_commit then keeps it. In bf16 mode this is the
// FP32 copy acts_in returned last: the writer is done reading its input when it starts writing.
float *acts_out(acts_t *a, int mb, int l);
void acts_commit(acts_t *a, int mb, int l);
// A new phase: no buffer holds a current act.
void acts_forget(acts_t *a);
// bf16 mode: the FP32 copy (N·C floats) as scratch for its caller; the act it held is
// converted again at its next acts_in (from the store, or from the visit buffer that holds it).
// NULL with FP32 storage, whose acts are the store itself.
float *acts_lend(acts_t *a);
