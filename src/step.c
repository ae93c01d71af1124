// step.c — see step.h. Where BF16 rounding happens: every activation and activation
// gradient written between ops is rounded to BF16 in bf16 mode (the GPU backend stores them
// as BF16), by the op that writes it (the ops' round flag, r = st->bf16) or, where the op has
// none (the cross-entropy backward, a copy), by bf16_round_n after it; norms, softmax, loss
// and parameter gradients stay FP32. With st->act16 the norms' outputs ln1 and ln2 and the
// MLP's intermediates (gate, up, h and their gradients), read by products and SwiGLU alone,
// are stored as the BF16 halves themselves, through the backend's BF16 ops: the same numbers,
// half the bytes (small's step with the MLP's alone: SwiGLU 7.9 → 6.3 ms, the products 46.7 →
// 45.1, 10 alternated pairs against FP32 intermediates). With st->att16 (a head size the
// attention tiles take) the attention half's q, k, v, att and their gradients datt, dq, dk and
// dv are too (attention 18.0 → 15.9 ms, RoPE 2.9 → 2.6, 12 pairs), and so is the residual x2,
// which the MLP's norm and residual add then read as halves; what stays FP32 is the residual
// stream between blocks (x, the checkpoints' copy) and the norms' input gradient dln.
#include "step.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "comm.h"
#include "trace.h"
#include "util.h"

// ---------------------------------------------------------------- helpers

static void rnd(const step_t *st, float *x, size_t n) {
    if (st->bf16) st->be->ops->bf16_round_n(x, n);
}

static void fault(step_t *st, const char *msg) {
    if (!st->fault[0]) snprintf(st->fault, sizeof st->fault, "%s", msg);
}

// st->act16's ln1, ln2, gate, up and h, and st->att16's q, k, v, att and datt, hold BF16
// halves (acts.h sizes the buffers that hold nothing else for halves)
#define H16(buf) ((uint16_t *)(void *)(buf))
// Which of the scratch's buffers a kept block's copies take as halves (acts.h)
static unsigned acts_h16(const step_t *st) { return acts_h16_of(st->act16, st->att16); }

// A BF16-activation product's result (backend.h): nonzero, it declined and wrote nothing, which
// act16 rules out (the CPU's FMA kernels or tiles, BF16 values in bf16 mode): a fault, not a retry.
static void declined(step_t *st, int rc) {
    if (rc) fault(st, "step: a product on BF16 activations was declined (a bug: act16 said the backend takes them)");
}
// Attention on BF16 halves declines where att16 rules it out, where the CPU's packed keys and
// values or its threads' widened rows found no memory, or on a GPU whose shared memory does
// not hold the kernels' tiles.
static void attention_declined(step_t *st, int rc) {
    if (rc)
        fault(st, "step: attention on BF16 activations was declined: no memory for its packed keys and values "
                  "or its threads' widened rows (CPU), or too little shared memory for its tiles (GPU)");
}
static float *grad_of(float *g, const step_t *st, int shard, int t) {
    return g + st->m->shards[shard].tensors[t].offset;
}


// The compute copy of a shard on the device, for one use in the phase's order. On a failed
// fetch the phase is void: records the fault and uses what it was given (stale or zeros), so
// that the phase finishes and reports it. Pair with params_release.
static const void *params_acquire(step_t *st, int shard) {
    const void *p;
    char err[512];
    if (tier_params_acquire(st->tier, shard, &p, err, sizeof err) != 0) fault(st, err);
    return p;
}

// FP32 weights of a shard for compute: the compute copy itself in fp32 mode, else the BF16
// copy converted into the scratch buffer (then the device copy is released at once: one
// shard's weights are in use at a time). Pair with weights_release.
static const float *weights_acquire(step_t *st, int shard) {
    const void *p = params_acquire(st, shard);
    if (!st->bf16) return p;
    st->be->ops->bf16_to_f32_n(st->wbuf, p, st->m->shards[shard].numel_padded);
    tier_params_release(st->tier, shard);
    return st->wbuf;
}

static void weights_release(step_t *st, int shard) {
    if (!st->bf16) tier_params_release(st->tier, shard);
}

// A shard's weights for compute: the BF16 compute copy itself (b16) where the backend's
// products and embedding read it (st->w16, tier.h lay.w16: the CPU's FMA path packs them
// straight from BF16, CUDA copies them into its GEMM's staging), held until wts_release as
// in fp32 mode; else FP32 (f32, weights_acquire's). The products read either form with the
// same bits (kernels.h matmul_forward_w16). A block's also has its two norms' FP32 weights
// (norm: BW_ATTN_NORM, BW_MLP_NORM), which with b16 are widened into wbuf, C each. Widening
// a vocabulary chunk for each use was 2.9% of 125m's step at B1 T128 (bench train).
typedef struct {
    const float *f32;
    const uint16_t *b16; // the BF16 compute copy, or NULL
    const float *norm[2];
    int shard;
} wts_t;

// Tensor t of W's BF16 compute copy (w16: W.b16)
static const uint16_t *w16_of(const step_t *st, const wts_t *W, int t) {
    return W->b16 + st->m->shards[W->shard].tensors[t].offset;
}

static wts_t wts_acquire(step_t *st, int shard) {
    wts_t W = {.shard = shard};
    if (st->w16) W.b16 = params_acquire(st, shard);
    else W.f32 = weights_acquire(st, shard);
    return W;
}

static void wts_release(step_t *st, const wts_t *W) {
    if (W->b16) tier_params_release(st->tier, W->shard);
    else weights_release(st, W->shard);
}

static wts_t block_weights_acquire(step_t *st, int shard) {
    static const int norms[2] = {BW_ATTN_NORM, BW_MLP_NORM};
    const tensor_t *t = st->m->shards[shard].tensors;
    wts_t W = wts_acquire(st, shard);
    for (int i = 0; i < 2; i++) {
        if (!W.b16) {
            W.norm[i] = W.f32 + t[norms[i]].offset;
            continue;
        }
        float *dst = st->wbuf + (size_t)i * st->m->C;
        st->be->ops->bf16_to_f32_n(dst, W.b16 + t[norms[i]].offset, t[norms[i]].numel);
        W.norm[i] = dst;
    }
    return W;
}

// Before a forward product (a linear layer's, a head quantum's): the update's AdamW of a chunk
// posted meanwhile (lay.upd_assist), on every core, so that the update keeps pace with the
// forward without taking a core from it.
static void assist_poll(const step_t *st) {
    if (st->assist) sched_assist_poll(st->assist);
}

// out (N, OC) = inp · W's (OC, IC) weights from element o ᵀ, and dinp (+)= dout · them: on
// whichever form W has
static void mm_forward_at(const step_t *st, const wts_t *W, size_t o, float *out, const float *inp, int N, int IC,
                          int OC, int round) {
    assist_poll(st);
    if (W->b16) st->be->ops->matmul_forward_w16(out, inp, W->b16 + o, NULL, N, IC, OC, round);
    else st->be->ops->matmul_forward(out, inp, W->f32 + o, N, IC, OC, round);
}
static void mm_backward_input_at(const step_t *st, const wts_t *W, size_t o, float *dinp, const float *dout, int N,
                                 int IC, int OC, int accumulate, int round) {
    if (W->b16)
        st->be->ops->matmul_backward_input_w16(dinp, dout, W->b16 + o, NULL, N, IC, OC, accumulate, round);
    else st->be->ops->matmul_backward_input(dinp, dout, W->f32 + o, N, IC, OC, accumulate, round);
}
// The same for tensor t of a block's W
static void mm_forward(const step_t *st, const wts_t *W, int t, float *out, const float *inp, int N, int IC, int OC,
                       int round) {
    mm_forward_at(st, W, st->m->shards[W->shard].tensors[t].offset, out, inp, N, IC, OC, round);
}
static void mm_backward_input(const step_t *st, const wts_t *W, int t, float *dinp, const float *dout, int N, int IC,
                              int OC, int accumulate, int round) {
    mm_backward_input_at(st, W, st->m->shards[W->shard].tensors[t].offset, dinp, dout, N, IC, OC, accumulate, round);
}

// out[i] = inp · W's tensor t[i]ᵀ for n tensors of one input (q, k, v of ln1; gate, up of
// ln2): one call where the backend shares the input's packing among them (the same bits),
// else one product each
static void mm_forwards(const step_t *st, const wts_t *W, int n, const int t[], float *const out[], const float *inp,
                        int N, int IC, const int OC[], int round) {
    enum { MAX_N = 3 };
    const backend_ops_t *op = st->be->ops;
    const tensor_t *ts = st->m->shards[W->shard].tensors;
    if (W->b16 && op->matmul_forward_w16_n && n <= MAX_N) {
        const uint16_t *w[MAX_N];
        for (int i = 0; i < n; i++) w[i] = W->b16 + ts[t[i]].offset;
        assist_poll(st);
        op->matmul_forward_w16_n(n, out, w, OC, inp, NULL, N, IC, round);
        return;
    }
    for (int i = 0; i < n; i++) mm_forward(st, W, t[i], out[i], inp, N, IC, OC[i], round);
}

// dln = dq·Wq + dk·Wk + dv·Wv (rounded when round), the three products in that order: one
// call where the backend runs them as one over the three weights, which lie one after another
// in the shard (model.c lays a block's tensors end to end; the same bits), else one product
// each (CUDA, FP32 weights). d: FP32, or st->att16's halves.
static void mm_backward_inputs_qkv(step_t *st, const wts_t *W, float *dln, const void *const d[3], int round) {
    const backend_ops_t *op = st->be->ops;
    const model_t *m = st->m;
    const int N = st->N, C = m->C, KVD = m->NKV * m->HS, OC[3] = {C, KVD, KVD};
    if (W->b16 && op->matmul_backward_input_w16_k) {
        declined(st, op->matmul_backward_input_w16_k(dln, 3, d, st->att16, OC, w16_of(st, W, BW_Q), NULL, N, C, 0,
                                                     round));
        return;
    }
    const int w[3] = {BW_Q, BW_K, BW_V};
    for (int i = 0; i < 3; i++)
        if (st->att16)
            declined(st, op->matmul_backward_input_x(dln, 0, d[i], 1, w16_of(st, W, w[i]), N, C, OC[i], i > 0,
                                                     i == 2 ? round : 0));
        else
            mm_backward_input(st, W, w[i], dln, d[i], N, C, OC[i], i > 0, i == 2 ? round : 0);
}

// dw[i] += dout[i]ᵀ · inp for n tensors of one input (q, k, v; gate, up): one call where the
// backend shares the input's packing among them (the same bits), else one product each
static void mm_backward_weights(const step_t *st, int n, float *const dw[], const float *const dout[], const int OC[],
                                const float *inp, int N, int IC) {
    const backend_ops_t *op = st->be->ops;
    if (op->matmul_backward_weight_n) {
        op->matmul_backward_weight_n(n, dw, dout, OC, inp, N, IC);
        return;
    }
    for (int i = 0; i < n; i++) op->matmul_backward_weight(dw[i], dout[i], inp, N, IC, OC[i]);
}

// The device buffer a shard's gradients accumulate into for one visit (last: the shard's
// final one this step). Pair with grads_release.
static float *grads_acquire(step_t *st, int shard, int last) {
    char err[512];
    float *g = tier_grads_acquire(st->tier, shard, last, err, sizeof err);
    if (!g) {
        fault(st, err);
        g = tier_buf(st->tier, TB_GRAD_SLOTS, 0);
    }
    return g;
}

static void grads_release(step_t *st, int shard) {
    char err[512];
    if (tier_grads_release(st->tier, shard, err, sizeof err) != 0) fault(st, err);
}

// Where micro-batch mb's gradients of n elements go before they join the sum G (see the fold
// in step.h): G itself for the step's first micro-batch on one rank, else the fresh buffer
// zeroed (the layout has it whenever --accum > 1 or ranks, the only other cases).
static float *grads_target(step_t *st, float *G, int mb, size_t n) {
    if (st->ranks == 1 && mb == 0) return G;
    backend_memset(st->be, st->gfresh, 0, n * sizeof(float));
    return st->gfresh;
}

// Adds F (one micro-batch's gradients of a shard's n elements, from grads_target) into the
// sum: G holds this rank's piece of it (the whole shard on one rank). With ranks, every rank's
// F is added in rank order, piece by piece; gather (the tied head's share, which every rank
// keeps whole) then gives every rank the whole sum.
static void grads_fold(step_t *st, float *G, const float *F, size_t n, int gather) {
    if (F == G) return;
    const backend_ops_t *op = st->be->ops;
    if (st->ranks == 1) {
        op->add_inplace(G, F, n, 0);
        return;
    }
    char err[512];
    size_t lo, cnt;
    comm_piece(n, st->ranks, st->rank, &lo, &cnt);
    double t0 = trace_now_ms();
    // host memory through MPI; a GPU's through NCCL, queued on the compute stream with the ops
    void *stream = backend_native_stream(st->be, BACKEND_STREAM_COMPUTE);
    int rc = stream ? comm_dev_alltoall_pieces(st->comm, F, st->grecv, n, stream, err, sizeof err)
                    : comm_alltoall_pieces(st->comm, F, st->grecv, n, err, sizeof err);
    if (rc != 0) {
        fault(st, err);
        return;
    }
    float *mine = gather ? G + lo : G;
    for (int r = 0; r < st->ranks; r++) op->add_inplace(mine, st->grecv + (size_t)r * cnt, cnt, 0);
    if (gather) {
        rc = stream ? comm_dev_allgather_pieces(st->comm, G, n, sizeof(float), stream, err, sizeof err)
                    : comm_allgather_pieces(st->comm, G, n, sizeof(float), err, sizeof err);
        if (rc != 0) fault(st, err);
    }
    trace_span(TRACK_COMPUTE, "gradient fold", "ranks", t0, trace_now_ms());
}

// ---------------------------------------------------------------- init
// The CPU kernels' own buffers (kernels.h attention_workspace_bytes, outside the arena: the
// plan's kernels_bytes) allocated now, so that a shortage is a start-up error, not a step's
// fault; a GPU's workspace is in its arena.
static int reserve_kernels(const step_t *st, const config_t *cfg, char *err, size_t errlen) {
    if (!backend_host_addressable(st->be)) return 0;
    const model_t *m = st->m;
    const int tiles = cfg->cpu_gemm == CPU_GEMM_AUTO, threads = st->be->threads;
    if (!attention_reserve(st->B, st->T, m->NH, m->NKV, m->HS, st->att16, tiles, threads)) return 0;
    const size_t need = attention_workspace_bytes(st->B, st->T, m->NH, m->NKV, m->HS, st->att16, tiles, threads);
    char a[32];
    snprintf(err, errlen, "out of memory reserving the attention ops' buffers (%s at %d threads): lower --batch, --seq "
             "or --threads", format_bytes(a, sizeof a, need), threads);
    return -ENOMEM;
}


int step_init(step_t *st, const config_t *cfg, const model_t *m, backend_t *be, tier_t *tier, char *err,
              size_t errlen) {
    memset(st, 0, sizeof *st);
    const tier_layout_t *lay = tier_layout_of(tier);
    st->m = m;
    st->be = be;
    st->tier = tier;
    st->B = cfg->B;
    st->T = cfg->T;
    st->N = cfg->B * cfg->T;
    st->bf16 = cfg->precision == PREC_BF16;
    st->w16 = lay->w16; // the layout sized the weight scratch for the form
    st->act16 = lay->act16; // the layout's: the plan counts it, and the scratch is sized for it
    st->att16 = lay->att16;
    const backend_ops_t *op = be->ops;
    if ((st->act16 && !op->rmsnorm_forward16) ||
        (st->att16 && (!op->attention_forward16 || !op->residual_rmsnorm_forward16))) {
        snprintf(err, errlen, "step: the layout takes BF16 activations the %s backend has no ops for (a bug)",
                 be->name);
        return -EINVAL;
    }
    int rc = reserve_kernels(st, cfg, err, errlen);
    if (rc != 0) return rc;
    st->nmb = lay->nmb;
    st->vertical = lay->vertical;
    const size_t N = (size_t)st->N;
    st->logits_all = cfg->logits_kept;
    acts_scratch_carve(&st->a, tier_buf(tier, TB_SCRATCH, 0), m, N, st->logits_all, st->bf16, acts_h16(st),
                       lay->scratch_fwd);
    st->nq = CEIL_DIV(m->V, CE_QUANTUM);
    st->lg_tag = malloc((size_t)(st->logits_all ? st->nq : 1) * sizeof *st->lg_tag);
    if (!st->lg_tag) {
        snprintf(err, errlen, "out of memory for the step's tables");
        return -ENOMEM;
    }
    st->assist = lay->upd_assist ? tier_sched(tier) : NULL;
    st->kept = lay->spec[TB_KEPT].count / lay->nmb;
    st->kept_bf16 = cfg->kept_bf16;
    if (st->kept) {
        st->kept_base = calloc((size_t)lay->spec[TB_KEPT].count, sizeof *st->kept_base);
        if (!st->kept_base) {
            snprintf(err, errlen, "out of memory for the step's tables");
            return -ENOMEM;
        }
        for (int i = 0; i < lay->spec[TB_KEPT].count; i++) st->kept_base[i] = tier_buf(tier, TB_KEPT, i);
    }
    st->dres_all = st->dres = tier_buf(tier, TB_ACT_GRADS, 0);
    st->tokens_all = st->tokens = tier_buf(tier, TB_TOKENS, 0);
    st->targets_all = st->targets = tier_buf(tier, TB_TARGETS, 0);
    st->stats_all = tier_buf(tier, TB_CE_STATS, 0);
    st->wnorm = tier_buf(tier, TB_NORM_W, 0);
    st->xf_mb = -1;
    st->rope_cos = tier_buf(tier, TB_ROPE, 0);
    st->rope_sin = tier_buf(tier, TB_ROPE, 1);
    st->wbuf = tier_buf(tier, TB_WEIGHTS, 0);
    st->gtie = tier_buf(tier, TB_TIED_GRAD, 0);
    st->gfresh = tier_buf(tier, TB_GRAD_FRESH, 0);
    st->grecv = tier_buf(tier, TB_GRAD_RECV, 0);
    st->comm = comm_world();
    st->ranks = cfg->ranks > 1 ? cfg->ranks : 1;
    st->rank = st->ranks > 1 ? comm_rank(st->comm) : 0;
    tier_stats_t *ts = tier_stats(tier);
    acts_counters_t cnt = {.h2d_bytes = &ts->h2d_bytes, .d2h_bytes = &ts->d2h_bytes, .act_h2d = &ts->act_h2d_bytes,
                           .act_d2h = &ts->act_d2h_bytes, .copy_ms = &ts->copy_ms};
    float *store = tier_buf(tier, TB_ACTS, 0);
    float *f32 = tier_buf(tier, TB_ACT_F32, 0); // NULL: an FP32 store
    rc = acts_init(&st->acts, be, lay->nmb, m->L, N * (size_t)m->C, lay->acts_host ? NULL : store,
                       lay->acts_host ? store : NULL, tier_buf(tier, TB_ACT_BUFS, 0), tier_buf(tier, TB_ACT_BUFS, 1),
                       f32, &cnt, err, errlen);
    if (rc != 0) return rc;
    st->losses_host = calloc(N, sizeof *st->losses_host);
    st->uses = calloc((size_t)lay->max_uses, sizeof *st->uses);
    st->nmb_max = cfg->accum;
    st->mb_loss = calloc((size_t)cfg->accum, sizeof *st->mb_loss);
    size_t rn = (size_t)st->T * (size_t)(m->HS / 2);
    float *rc_h = malloc(rn * sizeof(float)), *rs_h = malloc(rn * sizeof(float));
    double *freq = malloc((size_t)(m->HS / 2) * sizeof(double));
    rc = 0;
    if (!st->losses_host || !st->uses || !st->mb_loss || !rc_h || !rs_h || !freq) {
        snprintf(err, errlen, "out of memory for the step's tables");
        rc = -ENOMEM;
    } else { // computed on the host, copied to the device
        model_rope_freqs(m, freq);
        rope_table_freq(rc_h, rs_h, st->T, m->HS, freq);
        backend_copy_h2d(be, st->rope_cos, rc_h, rn * sizeof(float));
        backend_copy_h2d(be, st->rope_sin, rs_h, rn * sizeof(float));
    }
    free(freq);
    free(rc_h);
    free(rs_h);
    return rc;
}

void step_free(step_t *st) {
    if (!st) return;
    acts_free(&st->acts);
    free(st->kept_base);
    free(st->lg_tag);
    free(st->losses_host);
    free(st->uses);
    free(st->mb_loss);
    memset(st, 0, sizeof *st);
}

// ---------------------------------------------------------------- block forward / backward

// The attention half of a block on x (N, C) with its weights W (wts_t): ln1 … x2, and the
// MLP's norm (ln2, rstd2), into st->a (the first ACTS_NATTN buffers).
static void block_attention(step_t *st, const wts_t *W, const float *x) {
    const backend_ops_t *op = st->be->ops;
    const model_t *m = st->m;
    const int N = st->N, C = m->C, KVD = m->NKV * m->HS, r = st->bf16;
    const size_t NC = (size_t)N * C;
    acts_scratch_t *a = &st->a;

    if (st->act16) { // ln1 as BF16 halves, read by q, k and v's products as they are
        op->rmsnorm_forward16(H16(a->ln1), a->rstd1, x, W->norm[0], N, C, m->norm_eps);
        assist_poll(st);
        declined(st, op->matmul_forward_w16_n_x(3, (void *const[]){a->q, a->k, a->v}, st->att16,
                                                (const uint16_t *const[]){w16_of(st, W, BW_Q), w16_of(st, W, BW_K),
                                                                          w16_of(st, W, BW_V)},
                                                (const int[]){C, KVD, KVD}, H16(a->ln1), 1, N, C, r));
    } else {
        op->rmsnorm_forward(a->ln1, a->rstd1, x, W->norm[0], N, C, m->norm_eps, r);
        mm_forwards(st, W, 3, (const int[]){BW_Q, BW_K, BW_V}, (float *const[]){a->q, a->k, a->v}, a->ln1, N, C,
                    (const int[]){C, KVD, KVD}, r);
    }
    // each residual add writes the projection into the sum's own buffer (x2) and adds the
    // stream to it: att·Woᵀ + x, the same bits as x + att·Woᵀ (IEEE addition commutes), no buffer
    if (st->att16) { // q, k, v, att and x2 as BF16 halves: the ops below on them
        op->rope_forward16(H16(a->q), st->rope_cos, st->rope_sin, st->B, st->T, m->NH, m->HS);
        op->rope_forward16(H16(a->k), st->rope_cos, st->rope_sin, st->B, st->T, m->NKV, m->HS);
        attention_declined(st, op->attention_forward16(H16(a->att), a->lse, H16(a->q), H16(a->k), H16(a->v), st->B,
                                                       st->T, m->NH, m->NKV, m->HS));
        assist_poll(st);
        declined(st, op->matmul_forward_w16_n_x(1, (void *const[]){a->x2}, 1,
                                                (const uint16_t *const[]){w16_of(st, W, BW_O)}, &C, H16(a->att), 1, N, C,
                                                r));
        // x2 as halves too: the residual add and the MLP's norm in one pass
        op->residual_rmsnorm_forward16(H16(a->x2), H16(a->ln2), a->rstd2, x, W->norm[1], N, C, m->norm_eps);
        return;
    }
    op->rope_forward(a->q, st->rope_cos, st->rope_sin, st->B, st->T, m->NH, m->HS, r);
    op->rope_forward(a->k, st->rope_cos, st->rope_sin, st->B, st->T, m->NKV, m->HS, r);
    op->attention_forward(a->att, a->lse, a->q, a->k, a->v, st->B, st->T, m->NH, m->NKV, m->HS, r);
    mm_forward(st, W, BW_O, a->x2, a->att, N, C, C, r);
    op->add_inplace(a->x2, x, NC, r);
    if (st->act16) op->rmsnorm_forward16(H16(a->ln2), a->rstd2, a->x2, W->norm[1], N, C, m->norm_eps);
    else op->rmsnorm_forward(a->ln2, a->rstd2, a->x2, W->norm[1], N, C, m->norm_eps, r);
}

// The MLP's intermediates for rows [r0, r0 + n) of W's block (n ≤ its chunk): gate, up and
// h from ln2, into the chunk buffers.
static void mlp_chunk(step_t *st, const wts_t *W, int r0, int n) {
    const backend_ops_t *op = st->be->ops;
    const model_t *m = st->m;
    const int C = m->C, F = m->F;
    const size_t nF = (size_t)n * F;
    acts_scratch_t *a = &st->a;
    if (st->act16) { // as mm_forwards and swiglu_forward below, on BF16 halves
        assist_poll(st);
        declined(st, op->matmul_forward_w16_n_x(2, (void *const[]){a->gate, a->up}, 1,
                                                (const uint16_t *const[]){w16_of(st, W, BW_GATE), w16_of(st, W, BW_UP)},
                                                (const int[]){F, F}, H16(a->ln2) + (size_t)r0 * C, 1, n, C, 1));
        op->swiglu_forward16(H16(a->h), H16(a->gate), H16(a->up), nF);
        return;
    }
    const float *ln2 = a->ln2 + (size_t)r0 * C;
    mm_forwards(st, W, 2, (const int[]){BW_GATE, BW_UP}, (float *const[]){a->gate, a->up}, ln2, n, C,
                (const int[]){F, F}, st->bf16);
    op->swiglu_forward(a->h, a->gate, a->up, nF, st->bf16);
}

// x (N, C) → out (N, C) with the block's weights W; leaves the attention half's
// intermediates in st->a (the MLP's last chunk's too) for the backward. Each MLP chunk's rows
// of out are its own: per element, the ops and their order are those of one chunk of N rows.
// out may be x (bf16 mode's one FP32 copy, acts.h): the attention half is the last to read x.
static void block_forward(step_t *st, const wts_t *W, const float *x, float *out) {
    const backend_ops_t *op = st->be->ops;
    const model_t *m = st->m;
    const int N = st->N, C = m->C, F = m->F, R = model_mlp_rows(m, N);
    acts_scratch_t *a = &st->a;

    block_attention(st, W, x);
    st->xf_mb = -1; // bf16 mode's xf is ln1's buffer (acts.h)
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = N - r0 < R ? N - r0 : R;
        const size_t nC = (size_t)n * C, o = (size_t)r0 * C;
        mlp_chunk(st, W, r0, n);
        if (st->act16) { // mm_forward's, from BF16 h
            assist_poll(st);
            declined(st, op->matmul_forward_w16_n_x(1, (void *const[]){out + o}, 0,
                                                    (const uint16_t *const[]){w16_of(st, W, BW_DOWN)}, &C, H16(a->h), 1, n,
                                                    F, st->bf16));
        } else {
            mm_forward(st, W, BW_DOWN, out + o, a->h, n, F, C, st->bf16);
        }
        if (st->att16) op->add_inplace16(out + o, H16(a->x2) + o, nC, st->bf16);
        else op->add_inplace(out + o, a->x2 + o, nC, st->bf16);
    }
}

// The MLP's backward for the chunk of n rows from row r0 with BF16 activations (st->act16):
// the FP32 path's ops and order in block_backward, on the BF16 ops (the same bits).
static void mlp_backward16(step_t *st, const wts_t *W, float *G, int r0, int n) {
    const backend_ops_t *op = st->be->ops;
    const model_t *m = st->m;
    const int C = m->C, F = m->F, s = W->shard, r = st->bf16;
    acts_scratch_t *a = &st->a;
    const float *dout = st->dres + (size_t)r0 * C;
    const uint16_t *ln2 = H16(a->ln2) + (size_t)r0 * C;
    float *dln = a->dln + (size_t)r0 * C;
    uint16_t *dh = H16(a->h), *dgate = H16(a->gate), *dup = H16(a->up); // (block_backward's homes)
    declined(st, (int)op->matmul_backward_weight_n_x(1, (float *const[]){grad_of(G, st, s, BW_DOWN)},
                                                     (const void *const[]){dout}, 0, &C, H16(a->h), 1, n, F));
    declined(st, op->matmul_backward_input_x(dh, 1, dout, 0, w16_of(st, W, BW_DOWN), n, F, C, 0, 1));
    op->swiglu_backward16(dgate, dup, dh, H16(a->gate), H16(a->up), (size_t)n * F);
    declined(st, op->matmul_backward_input_x(dln, 0, dgate, 1, w16_of(st, W, BW_GATE), n, C, F, 0, 0));
    declined(st, op->matmul_backward_input_x(dln, 0, dup, 1, w16_of(st, W, BW_UP), n, C, F, 1, r));
    declined(st, (int)op->matmul_backward_weight_n_x(
                     2, (float *const[]){grad_of(G, st, s, BW_GATE), grad_of(G, st, s, BW_UP)},
                     (const void *const[]){dgate, dup}, 1, (const int[]){F, F}, ln2, 1, n, C));
}

// Recomputes block `layer`'s attention half from its checkpoint, act (mb, layer) (unless its
// intermediates were kept), then turns st->dres from ∂L/∂out into ∂L/∂x and accumulates the
// block's parameter gradients into G. The MLP runs chunk by chunk (model_mlp_rows), computing
// each chunk's intermediates again unless a kept block holds all N rows of them.
static void block_backward(step_t *st, int mb, int layer, const wts_t *W, float *G, int recompute) {
    const backend_ops_t *op = st->be->ops;
    const model_t *m = st->m;
    const int s = model_block_shard(m, layer);
    const int N = st->N, C = m->C, F = m->F, KVD = m->NKV * m->HS, R = model_mlp_rows(m, N), r = st->bf16;
    acts_scratch_t *a = &st->a;

    // the checkpoint: for the recompute now; a kept block's input norm reads it last (its copy
    // up, with --checkpoints host, starts now)
    const float *x = NULL;
    if (recompute) {
        x = acts_in(&st->acts, mb, layer);
        block_attention(st, W, x); // the block's output is not needed
    } else {
        acts_prefetch(&st->acts, mb, layer);
    }
    // Each gradient goes where an intermediate is dead by the time it is written, so the
    // scratch needs only dln of its own: dh in h (once ∂Wd has read h), dgate and dup in gate
    // and up (the SwiGLU backward works in place), datt in dln (dead until the input gradient
    // after the attention backward), dq in x2 and dk in ln2 (both dead once the MLP's norm
    // backward has run; KVD ≤ C), dv in the checkpoints' FP32 copy in bf16 mode (acts_lend:
    // the input norm's backward converts the checkpoint again), else in the head's xf (N·C;
    // head_forward normalizes it again). The ops and their order are the same as with buffers
    // of their own: the bits do not change.
    float *dh = a->h, *dgate = a->gate, *dup = a->up, *datt = a->dln, *dq = a->x2, *dk = a->ln2;
    float *dv = acts_lend(&st->acts);
    if (!dv) dv = a->xf;
    st->xf_mb = -1;

    // MLP: out = x2 + h·Wdᵀ, chunk by chunk; the weight gradients sum over the chunks in order
    const int have = R == N && !recompute; // a kept block's gate, up and h (all N rows)
    for (int r0 = 0; r0 < N; r0 += R) {
        const int n = N - r0 < R ? N - r0 : R;
        const size_t nF = (size_t)n * F, o = (size_t)r0 * C;
        const float *dout = st->dres + o, *ln2 = a->ln2 + o;
        float *dln = a->dln + o;
        if (!have) mlp_chunk(st, W, r0, n);
        if (st->act16) {
            mlp_backward16(st, W, G, r0, n);
            continue;
        }
        op->matmul_backward_weight(grad_of(G, st, s, BW_DOWN), dout, a->h, n, F, C);
        mm_backward_input(st, W, BW_DOWN, dh, dout, n, F, C, 0, r);
        op->swiglu_backward(dgate, dup, dh, a->gate, a->up, nF, r);
        mm_backward_input(st, W, BW_GATE, dln, dgate, n, C, F, 0, 0);
        mm_backward_input(st, W, BW_UP, dln, dup, n, C, F, 1, r); // dln's rows complete
        mm_backward_weights(st, 2, (float *const[]){grad_of(G, st, s, BW_GATE), grad_of(G, st, s, BW_UP)},
                            (const float *const[]){dgate, dup}, (const int[]){F, F}, ln2, n, C);
    }
    if (st->att16)
        op->rmsnorm_backward16(st->dres, grad_of(G, st, s, BW_MLP_NORM), a->dln, H16(a->x2), W->norm[1], a->rstd2, N,
                               C, r); // now ∂L/∂x2
    else
        op->rmsnorm_backward(st->dres, grad_of(G, st, s, BW_MLP_NORM), a->dln, a->x2, W->norm[1], a->rstd2, N, C,
                             r); // now ∂L/∂x2
    // x2 and ln2 are dead from here

    // attention: x2 = x + att·Woᵀ
    if (st->att16) { // datt, dq, dk and dv as BF16 halves; att, q, k and v are
        declined(st, op->matmul_backward_input_x(H16(datt), 1, st->dres, 0, w16_of(st, W, BW_O), N, C, C, 0, r));
        declined(st, (int)op->matmul_backward_weight_n_x(1, (float *const[]){grad_of(G, st, s, BW_O)},
                                                         (const void *const[]){st->dres}, 0, &C, H16(a->att), 1, N, C));
        attention_declined(st, op->attention_backward16(H16(dq), H16(dk), H16(dv), H16(datt), H16(a->q), H16(a->k),
                                                        H16(a->v), H16(a->att), a->lse, st->B, st->T, m->NH, m->NKV,
                                                        m->HS));
        op->rope_backward16(H16(dq), st->rope_cos, st->rope_sin, st->B, st->T, m->NH, m->HS);
        op->rope_backward16(H16(dk), st->rope_cos, st->rope_sin, st->B, st->T, m->NKV, m->HS);
    } else {
        mm_backward_input(st, W, BW_O, datt, st->dres, N, C, C, 0, r);
        op->matmul_backward_weight(grad_of(G, st, s, BW_O), st->dres, a->att, N, C, C);
        op->attention_backward(dq, dk, dv, datt, a->q, a->k, a->v, a->att, a->lse,
                               st->B, st->T, m->NH, m->NKV, m->HS, r);
        op->rope_backward(dq, st->rope_cos, st->rope_sin, st->B, st->T, m->NH, m->HS, r);
        op->rope_backward(dk, st->rope_cos, st->rope_sin, st->B, st->T, m->NKV, m->HS, r);
    }
    mm_backward_inputs_qkv(st, W, a->dln, (const void *const[]){dq, dk, dv}, r); // dln complete
    float *const dwqkv[3] = {grad_of(G, st, s, BW_Q), grad_of(G, st, s, BW_K), grad_of(G, st, s, BW_V)};
    if (st->act16) // from BF16 ln1 (and att16's dq, dk and dv)
        declined(st, (int)op->matmul_backward_weight_n_x(3, dwqkv, (const void *const[]){dq, dk, dv}, st->att16,
                                                         (const int[]){C, KVD, KVD}, H16(a->ln1), 1, N, C));
    else
        mm_backward_weights(st, 3, dwqkv, (const float *const[]){dq, dk, dv}, (const int[]){C, KVD, KVD}, a->ln1, N, C);
    if (!x || dv != a->xf) x = acts_in(&st->acts, mb, layer); // (again when dv had its FP32 copy)
    op->rmsnorm_backward(st->dres, grad_of(G, st, s, BW_ATTN_NORM), a->dln, x,
                         W->norm[0], a->rstd1, N, C, r); // now ∂L/∂x
}

// ---------------------------------------------------------------- embedding and head

// Micro-batch mb's device tokens, targets, cross-entropy stats and ∂L/∂residual.
static void use_microbatch(step_t *st, int mb) {
    const size_t k = st->nmb > 1 ? (size_t)mb : 0, N = (size_t)st->N;
    st->tokens = st->tokens_all + k * N;
    st->targets = st->targets_all + k * N;
    st->stats = st->stats_all + k * 3 * N;
    st->dres = st->dres_all + k * N * (size_t)st->m->C;
}

// The embedding's chunk k (weights W) into micro-batch mb's dres, which stages act (mb, 0)
// until every chunk has written its tokens' rows (embed_commit).
static void embed_forward(step_t *st, int mb, int k, const wts_t *W) {
    int v0, nv;
    model_vchunk(st->m, k, &v0, &nv);
    use_microbatch(st, mb);
    if (W->b16) st->be->ops->embedding_forward_w16(st->dres, st->tokens, W->b16, st->N, st->m->C, v0, nv);
    else st->be->ops->embedding_forward(st->dres, st->tokens, W->f32, st->N, st->m->C, v0, nv);
}

static void embed_commit(step_t *st, int mb) {
    use_microbatch(st, mb);
    float *out = acts_out(&st->acts, mb, 0);
    backend_copy_d2d(st->be, out, st->dres, (size_t)st->N * (size_t)st->m->C * sizeof(float));
    acts_commit(&st->acts, mb, 0);
}

// The embedding: every chunk, each for micro-batches mb0..mb1-1.
static void embed_all(step_t *st, int mb0, int mb1) {
    for (int k = 0; k < st->m->vchunks; k++) {
        const int s = model_embed_shard(st->m, k);
        const wts_t W = wts_acquire(st, s);
        for (int mb = mb0; mb < mb1; mb++) embed_forward(st, mb, k, &W);
        wts_release(st, &W);
    }
    for (int mb = mb0; mb < mb1; mb++) embed_commit(st, mb);
}

// --recompute: block l of micro-batch mb keeps its intermediates (its allocation), or NULL.
static void *kept_of(const step_t *st, int mb, int l) {
    if (l >= st->kept) return NULL;
    const int k = st->nmb > 1 ? mb : 0;
    return st->kept_base[(size_t)k * (size_t)st->kept + (size_t)l];
}

// A kept block's forward (kb: its allocation, kept_of) writes its intermediates where they
// stay: FP32 storage is st->a's
// forward buffers pointed into the allocation (the previous pointers into *saved; returns 1);
// BF16 storage is the scratch, converted by acts_kept_store afterwards (returns 0).
static int use_kept(step_t *st, void *kb, acts_scratch_t *saved) {
    if (!kb || st->kept_bf16) return 0;
    *saved = st->a;
    acts_kept_carve(&st->a, kb, st->m, (size_t)st->N, acts_h16(st));
    return 1;
}

static void block_forward_mb(step_t *st, int mb, int l, const wts_t *W) {
    double t0 = trace_now_ms();
    const float *x = acts_in(&st->acts, mb, l);
    acts_scratch_t saved;
    void *kb = kept_of(st, mb, l);
    int kept = use_kept(st, kb, &saved);
    block_forward(st, W, x, acts_out(&st->acts, mb, l + 1));
    if (kept) st->a = saved;
    else if (kb) acts_kept_store(st->be, kb, &st->a, st->m, (size_t)st->N, acts_h16(st)); // BF16: from the scratch
    acts_commit(&st->acts, mb, l + 1);
    trace_span(TRACK_COMPUTE, "forward", st->m->shards[model_block_shard(st->m, l)].name, t0, trace_now_ms());
}

// The head works a vocabulary quantum (CE_QUANTUM columns, kernels.h) at a time: the
// forward folds each quantum's logits into the micro-batch's stats (the loss), the backward
// computes them again (the last quantum's are still in the buffer; with cfg->logits_kept
// every quantum's of the first micro-batch of the pass are), and turns them into
// ∂logits, the LM head's gradient rows and ∂xf, summed over the quanta in descending order.
// The bits depend on CE_QUANTUM, never on the chunks: per element, the same ops on the
// same values in the same order, whatever the cut.

// Where quantum q's logits live: a place of their own when every quantum's are kept
// (cfg->logits_kept, when the memory allows: the backward then computes none again), else
// the one buffer; and the tag of what it holds (mb·nq + q, -1: nothing).
static float *logits_at(const step_t *st, int q) {
    return st->a.logits + (st->logits_all ? (size_t)q * CE_QUANTUM * (size_t)st->N : 0);
}
static int *logits_tag(const step_t *st, int q) { return &st->lg_tag[st->logits_all ? q : 0]; }

// The final norm's weights into st->wnorm (held through the head), from the compute copy:
// widened in bf16 mode, copied in fp32 mode (no pass over the rest of the padded shard).
static void head_norm_weights(step_t *st) {
    const int hs = model_head_shard(st->m);
    const size_t o = st->m->shards[hs].tensors[HW_NORM].offset, C = (size_t)st->m->C;
    const void *p = params_acquire(st, hs);
    if (st->bf16) st->be->ops->bf16_to_f32_n(st->wnorm, (const uint16_t *)p + o, C);
    else backend_copy_d2d(st->be, st->wnorm, (const float *)p + o, C * sizeof(float));
    tier_params_release(st->tier, hs);
    st->xf_mb = -1; // the scratch's xf and logits are stale from here
    for (int i = 0; i < (st->logits_all ? st->nq : 1); i++) st->lg_tag[i] = -1;
}

// Micro-batch mb's normed x_L into a->xf (its rstd into a->rstdf), unless a->xf holds it.
static void head_xf(step_t *st, int mb) {
    if (st->xf_mb == mb) return;
    const model_t *m = st->m;
    st->be->ops->rmsnorm_forward(st->a.xf, st->a.rstdf, acts_in(&st->acts, mb, m->L), st->wnorm, st->N, m->C,
                                 m->norm_eps, st->bf16);
    st->xf_mb = mb;
}

// Quantum q's logits (N, *Vq) of micro-batch mb (unless they are there already), from W, the
// weights of the chunk holding it (rows from v0k); a->xf holds mb's normed x_L afterwards.
static float *head_logits(step_t *st, int mb, int q, const wts_t *W, int v0k, int *Vq) {
    const model_t *m = st->m;
    float *lg = logits_at(st, q);
    *Vq = model_quantum_cols(m, q);
    head_xf(st, mb);
    if (*logits_tag(st, q) == mb * st->nq + q) return lg;
    mm_forward_at(st, W, (size_t)(q * CE_QUANTUM - v0k) * m->C, lg, st->a.xf, st->N, m->C, *Vq, st->bf16);
    *logits_tag(st, q) = mb * st->nq + q;
    return lg;
}

// The quanta of chunk k: [*q0, *q1).
static void chunk_quanta(const model_t *m, int k, int *q0, int *q1, int *v0) {
    int nv;
    model_vchunk(m, k, v0, &nv);
    *q0 = *v0 / CE_QUANTUM;
    *q1 = CEIL_DIV(*v0 + nv, CE_QUANTUM);
}

static double mean_loss(step_t *st) {
    backend_copy_d2h(st->be, st->losses_host, st->a.losses, (size_t)st->N * sizeof(float));
    double sum = 0; // fixed order: row 0..N-1
    for (int i = 0; i < st->N; i++) sum += st->losses_host[i];
    return sum / st->N;
}

// The head's forward of micro-batches mb0..mb1-1: the norm, then each chunk's quanta folded
// into each micro-batch's stats (micro-batches last to first, so that the buffer ends with
// mb0's last quantum, the backward's first); each micro-batch's mean loss into st->mb_loss.
// hold: the last chunk's weights stay acquired for head_backward (in *held).
static void head_forward(step_t *st, int mb0, int mb1, int hold, wts_t *held) {
    const model_t *m = st->m;
    const backend_ops_t *op = st->be->ops;
    double th = trace_now_ms();
    head_norm_weights(st);
    for (int k = 0; k < m->vchunks; k++) {
        const int s = model_lm_shard(m, k);
        int q0, q1, v0;
        chunk_quanta(m, k, &q0, &q1, &v0);
        const wts_t W = wts_acquire(st, s);
        for (int mb = mb1 - 1; mb >= mb0; mb--) {
            use_microbatch(st, mb);
            for (int q = q0; q < q1; q++) {
                int Vq;
                const float *lg = head_logits(st, mb, q, &W, v0, &Vq);
                op->crossentropy_fold(st->stats, lg, st->targets, st->N, Vq, q * CE_QUANTUM);
            }
        }
        if (hold && k == m->vchunks - 1) *held = W;
        else wts_release(st, &W);
    }
    for (int mb = mb0; mb < mb1; mb++) {
        use_microbatch(st, mb);
        op->crossentropy_loss(st->a.losses, st->stats, st->N);
        st->mb_loss[mb] = mean_loss(st);
    }
    trace_span(TRACK_COMPUTE, "head + loss", m->shards[model_head_shard(m)].name, th, trace_now_ms());
}

// Embedding chunk k's share of the tied head's gradient in gtie (every chunk's, in order).
static float *tied_share(const step_t *st, int k) {
    size_t off = 0;
    for (int j = 0; j < k; j++) off += st->m->shards[model_embed_shard(st->m, j)].numel_padded;
    return st->gtie + off;
}

// Where chunk k's LM head gradient sums: its shard's gradient (acquired; last: its final
// visit), or the tied head's share. *n: its size.
static float *lm_grads(step_t *st, int k, int last, size_t *n) {
    const model_t *m = st->m;
    *n = m->shards[model_lm_shard(m, k)].numel_padded;
    return m->tie ? tied_share(st, k) : grads_acquire(st, model_lm_shard(m, k), last);
}

// The head's backward of micro-batches mb0..mb1-1 after head_forward (Wlast: the last chunk's
// weights it held): each chunk's LM head gradient, then the final norm's; leaves ∂L/∂x_L in
// each micro-batch's dres.
static void head_backward(step_t *st, int mb0, int mb1, const wts_t *Wlast, int last, float dscale) {
    const model_t *m = st->m;
    const backend_ops_t *op = st->be->ops;
    const int N = st->N, C = m->C, E = m->vchunks, qlast = st->nq - 1;
    const size_t NC = (size_t)N * C;
    acts_scratch_t *a = &st->a;
    double th = trace_now_ms();
    for (int k = E - 1; k >= 0; k--) {
        const int s = model_lm_shard(m, k);
        int q0, q1, v0;
        chunk_quanta(m, k, &q0, &q1, &v0);
        const wts_t W = k == E - 1 ? *Wlast : wts_acquire(st, s);
        size_t n;
        float *G = lm_grads(st, k, last, &n);
        for (int mb = mb0; mb < mb1; mb++) {
            use_microbatch(st, mb);
            float *F = grads_target(st, G, mb, n);
            for (int q = q1 - 1; q >= q0; q--) {
                int Vq;
                float *dl = head_logits(st, mb, q, &W, v0, &Vq); // ∂logits in place
                const size_t wq = (size_t)(q * CE_QUANTUM - v0) * C;
                op->crossentropy_backward(dl, dl, st->stats, st->targets, N, Vq, q * CE_QUANTUM, dscale);
                *logits_tag(st, q) = -1;
                rnd(st, dl, (size_t)N * Vq);
                // logits = xf·Wᵀ: ∂xf sums in dres over the quanta, last to first
                mm_backward_input_at(st, &W, wq, st->dres, dl, N, C, Vq, q != qlast, 0);
                op->matmul_backward_weight(F + (size_t)(q * CE_QUANTUM - v0) * C, dl, a->xf, N, C, Vq);
            }
            grads_fold(st, G, F, n, m->tie);
        }
        if (!m->tie) grads_release(st, s);
        wts_release(st, &W);
    }
    // xf = rmsnorm(x_L)
    const int hs = model_head_shard(m);
    const size_t nh = m->shards[hs].numel_padded;
    float *Gh = grads_acquire(st, hs, last);
    for (int mb = mb0; mb < mb1; mb++) {
        use_microbatch(st, mb);
        float *Fh = grads_target(st, Gh, mb, nh);
        head_xf(st, mb); // its rstd
        backend_copy_d2d(st->be, a->dln, st->dres, NC * sizeof(float));
        rnd(st, a->dln, NC);
        backend_memset(st->be, st->dres, 0, NC * sizeof(float));
        op->rmsnorm_backward(st->dres, grad_of(Fh, st, hs, HW_NORM), a->dln, acts_in(&st->acts, mb, m->L),
                             st->wnorm, a->rstdf, N, C, st->bf16);
        grads_fold(st, Gh, Fh, nh, 0);
    }
    grads_release(st, hs);
    trace_span(TRACK_COMPUTE, "head backward", m->shards[hs].name, th, trace_now_ms());
}

static void block_backward_mb(step_t *st, int mb, int l, const wts_t *W, float *G) {
    double t0 = trace_now_ms();
    use_microbatch(st, mb);
    acts_scratch_t saved;
    void *kb = kept_of(st, mb, l);
    int kept = use_kept(st, kb, &saved);
    if (kb && !kept) acts_kept_load(st->be, &st->a, kb, st->m, (size_t)st->N, acts_h16(st)); // BF16: into the scratch
    block_backward(st, mb, l, W, G, !kb);
    if (kept) st->a = saved;
    trace_span(TRACK_COMPUTE, "backward", st->m->shards[model_block_shard(st->m, l)].name, t0, trace_now_ms());
}

// The embedding's gradients of micro-batches mb0..mb1-1, chunk by chunk (last: the chunks'
// final visit, unless the tied head's share comes after).
static void embed_backward(step_t *st, int mb0, int mb1, int last) {
    const model_t *m = st->m;
    for (int k = m->vchunks - 1; k >= 0; k--) {
        const int s = model_embed_shard(m, k);
        const size_t n = m->shards[s].numel_padded;
        int v0, nv;
        model_vchunk(m, k, &v0, &nv);
        float *G = grads_acquire(st, s, last && !m->tie);
        for (int mb = mb0; mb < mb1; mb++) {
            use_microbatch(st, mb);
            float *F = grads_target(st, G, mb, n);
            st->be->ops->embedding_backward(F, st->dres, st->tokens, st->N, m->C, v0, nv);
            grads_fold(st, G, F, n, 0);
        }
        grads_release(st, s);
    }
}

// ---------------------------------------------------------------- phases

static void begin_phase(step_t *st, int reps, int backward) {
    char err[512];
    int n = model_use_order(st->m, reps, backward, st->uses);
    if (tier_begin(st->tier, st->uses, n, err, sizeof err) != 0) fault(st, err);
}

void step_begin_eval(step_t *st, int nbatches) { begin_phase(st, nbatches, 0); }

// Micro-batches mb0..mb1-1's tokens and targets to the device.
static void copy_inputs(step_t *st, const int *tokens, const int *targets, int mb0, int mb1) {
    const size_t N = (size_t)st->N;
    for (int mb = mb0; mb < mb1; mb++) {
        use_microbatch(st, mb);
        backend_copy_h2d(st->be, st->tokens, tokens + (size_t)(mb - mb0) * N, N * sizeof(int));
        backend_copy_h2d(st->be, st->targets, targets + (size_t)(mb - mb0) * N, N * sizeof(int));
    }
}

double step_forward(step_t *st, const int *tokens, const int *targets) {
    const model_t *m = st->m;
    acts_forget(&st->acts);
    copy_inputs(st, tokens, targets, 0, 1);
    embed_all(st, 0, 1);
    for (int l = 0; l < m->L; l++) {
        const wts_t W = block_weights_acquire(st, model_block_shard(m, l));
        block_forward_mb(st, 0, l, &W);
        wts_release(st, &W);
    }
    head_forward(st, 0, 1, 0, NULL);
    return st->fault[0] ? NAN : st->mb_loss[0];
}

// One loop over passes × phases: horizontal runs one pass per micro-batch, vertical one pass
// in which each phase runs every micro-batch. The tied head's share of the embedding
// gradient is added in a visit of its own after the last pass.
double step_forward_backward(step_t *st, const int *tokens, const int *targets, int nmb, float dscale) {
    const model_t *m = st->m;
    const size_t N = (size_t)st->N;
    if (nmb > st->nmb_max) { // vertical: the layout holds --accum micro-batches
        fault(st, "step: more micro-batches than --accum (the layout holds and folds no more)");
        return NAN;
    }
    const int passes = st->vertical ? 1 : nmb, per = st->vertical ? nmb : 1;
    begin_phase(st, passes, 1);
    acts_forget(&st->acts);
    const size_t nemb = model_embed_numel(m);
    if (m->tie) backend_memset(st->be, st->gtie, 0, nemb * sizeof(float));
    double loss = 0;
    for (int p = 0; p < passes; p++) {
        const int mb0 = p * per, mb1 = mb0 + per, last = p == passes - 1;
        copy_inputs(st, tokens + (size_t)mb0 * N, targets + (size_t)mb0 * N, mb0, mb1);
        embed_all(st, mb0, mb1);
        for (int l = 0; l < m->L; l++) {
            const wts_t W = block_weights_acquire(st, model_block_shard(m, l));
            for (int mb = mb0; mb < mb1; mb++) block_forward_mb(st, mb, l, &W);
            wts_release(st, &W);
        }
        wts_t Wlast;
        head_forward(st, mb0, mb1, 1, &Wlast);
        for (int mb = mb0; mb < mb1; mb++) loss += st->mb_loss[mb];
        if (p == 0 && st->backward_begins) st->backward_begins(st->backward_arg);
        head_backward(st, mb0, mb1, &Wlast, last, dscale);
        for (int l = m->L - 1; l >= 0; l--) {
            int s = model_block_shard(m, l);
            const size_t ns = m->shards[s].numel_padded;
            const wts_t W = block_weights_acquire(st, s);
            float *G = grads_acquire(st, s, last);
            for (int mb = mb0; mb < mb1; mb++) {
                float *F = grads_target(st, G, mb, ns);
                block_backward_mb(st, mb, l, &W, F);
                grads_fold(st, G, F, ns, 0);
            }
            grads_release(st, s);
            wts_release(st, &W);
        }
        embed_backward(st, mb0, mb1, last);
    }
    if (m->tie) // this rank's piece of each embedding chunk takes the same piece of the head's share
        for (int k = 0; k < m->vchunks; k++) {
            const int s = model_embed_shard(m, k);
            size_t lo, cnt;
            comm_piece(m->shards[s].numel_padded, st->ranks, st->rank, &lo, &cnt);
            float *G0 = grads_acquire(st, s, 1);
            st->be->ops->add_inplace(G0, tied_share(st, k) + lo, cnt, 0);
            grads_release(st, s);
        }
    return st->fault[0] ? NAN : loss / nmb;
}
