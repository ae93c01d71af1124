// attention_amx.h — private to kernels/cpu: attention's tile products on AMX
// (attention_amx.c), called by attention.c's attention_forward and attention_backward.
//
// att_amx_prepare packs K and V of every (batch, kv head) once for the op (into a buffer
// the op holds until att_amx_done) and says which kv heads hold a word that is not a BF16
// value; a task then declines (returns 1, nothing written) where its kv head, its queries or
// its output gradient do, and attention.c runs its FMA task instead. NULL: no AMX here, a
// head size that is not 32, 64, 96 or 128, or no memory (the FMA tasks run everything).
#pragma once
#include <stddef.h>

// The tiles' shape it shares with attention.c (ATT_BQ, ATT_BK; checked there).
#define ATT_AMX_BQ 32 // queries per block: the softmax and gradient steps' lanes
#define ATT_AMX_BK 64 // keys per tile

typedef struct att_amx att_amx_t;
// attention.c's online softmax step and its gradient step on a (keys × 32 queries) tile, and
// its causal mask (the same functions its FMA tasks call).
typedef void (*att_softmax_fn)(float *st, int nk, float *m, float *l, float *corr, float scale);
typedef void (*att_grad_fn)(float *st, float *dpt, int nk, const float *L, const float *D, float scale);
typedef void (*att_mask_fn)(float *tile, int s0, int nk, int t0, float fill);

// 1 where the tasks run (AMX tiles; HS 32, 64, 96 or 128; NH a multiple of NKV).
int att_amx_ok(int NH, int NKV, int HS);
// bwd 0: for the forward (K rows, Vᵀ), 1: for the backward (K rows, V rows, Kᵀ). h16: the op's
// q, k, v, out and dout are BF16 halves, and the tasks write out, dq, dk and dv so, rounded
// (attention_forward16, attention_backward16): they decline nothing but where prepare returns
// NULL. Call prepare outside a parallel region: h16's backward holds scratch for each of
// omp_get_max_threads() threads.
att_amx_t *att_amx_prepare(const void *k, const void *v, int h16, int B, int T, int NH, int NKV, int HS, int bwd);
void att_amx_done(att_amx_t *x);
// The bytes prepare holds for this shape (with `threads` threads), the buffer it holds now (its
// largest prepare's: it grows, never shrinks), and freeing it (attention.c's workspace calls).
size_t att_amx_bytes(int B, int T, int NKV, int HS, int h16, int bwd, int threads);
size_t att_amx_held(void);
int att_amx_reserve(size_t bytes);
void att_amx_release(void);
// The forward of query block qb of head h, batch b (attention.c fwd_task's outputs).
int att_amx_fwd_task(const att_amx_t *x, void *out, float *lse, const void *q, int b, int h, int qb, int round,
                     att_softmax_fn softmax, att_mask_fn mask);
// The backward of kv head g, batch b (attention.c bwd_task's outputs).
int att_amx_bwd_task(const att_amx_t *x, void *dq, void *dk, void *dv, const void *dout, const void *q,
                     const void *out, const float *lse, int b, int g, int round, att_grad_fn grad, att_mask_fn mask);
