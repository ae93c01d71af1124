// step.c — see step.h. The block math (DESIGN §2) and where BF16 rounding happens:
// every activation and activation gradient written between ops is rounded to BF16 in bf16
// mode (the GPU backend stores them as BF16); norms, softmax, loss and parameter gradients
// stay FP32.
#include "step.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

// ---------------------------------------------------------------- helpers

static void rnd(const trainer_t *tr, float *x, size_t n) {
    if (tr->bf16) tr->be.ops->bf16_round_n(x, n);
}

// FP32 weights of a shard for compute: the compute copy itself in fp32 mode, else the
// BF16 copy converted into one of two scratch slots.
static const float *shard_weights(trainer_t *tr, int shard, int slot) {
    if (!tr->bf16) return tr->p[shard];
    tr->be.ops->bf16_to_f32_n(tr->wbuf[slot], tr->p[shard], tr->model.shards[shard].numel_padded);
    return tr->wbuf[slot];
}

static const float *tensor_of(const trainer_t *tr, const float *w, int shard, int t) {
    return w + tr->model.shards[shard].tensors[t].offset;
}

static float *grad_of(const trainer_t *tr, int shard, int t) {
    return tr->g[shard] + tr->model.shards[shard].tensors[t].offset;
}

// ---------------------------------------------------------------- init / free

int trainer_init(trainer_t *tr, const config_t *cfg, char *err, size_t errlen) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    model_init(&tr->model, cfg);
    backend_init(&tr->be, cfg);
    const model_t *m = &tr->model;
    tr->B = cfg->B;
    tr->T = cfg->T;
    tr->N = cfg->B * cfg->T;
    tr->bf16 = cfg->precision == PREC_BF16;
    const size_t N = (size_t)tr->N, C = (size_t)m->C, F = (size_t)m->F, V = (size_t)m->V;
    const size_t KVD = (size_t)m->NKV * (size_t)m->HS;
    const size_t pbytes = tr->bf16 ? 2 : 4;
    int rc = 0;
    size_t ns = (size_t)m->nshards;
    tr->p = calloc(ns, sizeof *tr->p);
    tr->g = calloc(ns, sizeof *tr->g);
    tr->master = calloc(ns, sizeof *tr->master);
    tr->m = calloc(ns, sizeof *tr->m);
    tr->v = calloc(ns, sizeof *tr->v);
    if (!tr->p || !tr->g || !tr->master || !tr->m || !tr->v) {
        snprintf(err, errlen, "out of memory for the shard tables");
        return -ENOMEM;
    }

#define DEV(ptr, bytes, what) do { void *p_ = NULL; \
        if ((rc = backend_alloc(&tr->be, (bytes), (what), &p_, err, errlen)) != 0) return rc; \
        (ptr) = p_; } while (0)

    for (int s = 0; s < m->nshards; s++) {
        const shard_t *sh = &m->shards[s];
        char what[64];
        snprintf(what, sizeof what, "parameters of %s", sh->name);
        DEV(tr->p[s], sh->numel_padded * pbytes, what);
        snprintf(what, sizeof what, "gradients of %s", sh->name);
        DEV(tr->g[s], sh->numel_padded * sizeof(float), what);
        size_t hb = sh->numel_padded * sizeof(float);
        float **host[3] = {&tr->master[s], &tr->m[s], &tr->v[s]};
        for (int i = 0; i < 3; i++) {
            if (posix_memalign((void **)host[i], 4096, hb) != 0) {
                char a[32];
                snprintf(err, errlen, "out of host memory for the optimizer state of %s (%s)", sh->name,
                         format_bytes(a, sizeof a, hb));
                return -ENOMEM;
            }
            memset(*host[i], 0, hb);
            tr->host_bytes += hb;
        }
        model_init_shard(m, s, cfg->seed, tr->master[s]);
    }
    if (tr->bf16) {
        DEV(tr->wbuf[0], m->max_shard_numel * sizeof(float), "FP32 weight scratch");
        DEV(tr->wbuf[1], m->max_shard_numel * sizeof(float), "FP32 weight scratch");
    }
    DEV(tr->ckpt, (size_t)(m->L + 1) * N * C * sizeof(float), "activation checkpoints");
    acts_t *a = &tr->a;
    const size_t f = sizeof(float);
    DEV(a->ln1, N * C * f, "activations"); DEV(a->rstd1, N * f, "activations");
    DEV(a->q, N * C * f, "activations"); DEV(a->k, N * KVD * f, "activations"); DEV(a->v, N * KVD * f, "activations");
    DEV(a->att, N * C * f, "activations"); DEV(a->lse, N * (size_t)m->NH * f, "activations");
    DEV(a->x2, N * C * f, "activations"); DEV(a->ln2, N * C * f, "activations"); DEV(a->rstd2, N * f, "activations");
    DEV(a->gate, N * F * f, "activations"); DEV(a->up, N * F * f, "activations"); DEV(a->h, N * F * f, "activations");
    DEV(a->tmp, N * C * f, "activations");
    DEV(a->dres, N * C * f, "activation gradients"); DEV(a->dln, N * C * f, "activation gradients");
    DEV(a->dq, N * C * f, "activation gradients"); DEV(a->dk, N * KVD * f, "activation gradients");
    DEV(a->dv, N * KVD * f, "activation gradients"); DEV(a->datt, N * C * f, "activation gradients");
    DEV(a->dgate, N * F * f, "activation gradients"); DEV(a->dup, N * F * f, "activation gradients");
    DEV(a->dh, N * F * f, "activation gradients");
    DEV(a->xf, N * C * f, "head activations"); DEV(a->rstdf, N * f, "head activations");
    DEV(a->logits, N * V * f, "logits"); DEV(a->losses, N * f, "losses");
    DEV(tr->rope_cos, (size_t)tr->T * (size_t)(m->HS / 2) * f, "RoPE table");
    DEV(tr->rope_sin, (size_t)tr->T * (size_t)(m->HS / 2) * f, "RoPE table");
    DEV(tr->tokens, N * sizeof(int), "tokens");
    DEV(tr->targets, N * sizeof(int), "targets");
#undef DEV
    rope_table(tr->rope_cos, tr->rope_sin, tr->T, m->HS, m->rope_theta);
    trainer_sync_params(tr);
    return 0;
}

void trainer_free(trainer_t *tr) {
    if (!tr) return;
    for (int s = 0; tr->master && s < tr->model.nshards; s++) {
        free(tr->master[s]);
        free(tr->m[s]);
        free(tr->v[s]);
    }
    free(tr->p); free(tr->g); free(tr->master); free(tr->m); free(tr->v);
    backend_free(&tr->be);
    model_free(&tr->model);
    memset(tr, 0, sizeof *tr);
}

void trainer_sync_params(trainer_t *tr) {
    for (int s = 0; s < tr->model.nshards; s++) {
        size_t n = tr->model.shards[s].numel_padded;
        if (tr->bf16) bf16_from_f32_n(tr->p[s], tr->master[s], n);
        else backend_copy_h2d(&tr->be, tr->p[s], tr->master[s], n * sizeof(float));
    }
}

void trainer_zero_grads(trainer_t *tr) {
    for (int s = 0; s < tr->model.nshards; s++)
        memset(tr->g[s], 0, tr->model.shards[s].numel_padded * sizeof(float));
}

// ---------------------------------------------------------------- block forward / backward

// x (N, C) → out (N, C); leaves every intermediate in tr->a for the backward.
static void block_forward(trainer_t *tr, int layer, const float *x, float *out) {
    const backend_ops_t *op = tr->be.ops;
    const model_t *m = &tr->model;
    const int s = model_block_shard(layer);
    const int N = tr->N, C = m->C, F = m->F, KVD = m->NKV * m->HS;
    const size_t NC = (size_t)N * C, NF = (size_t)N * F, NK = (size_t)N * KVD;
    acts_t *a = &tr->a;
    const float *W = shard_weights(tr, s, 0);

    op->rmsnorm_forward(a->ln1, a->rstd1, x, tensor_of(tr, W, s, BW_ATTN_NORM), N, C, m->norm_eps);
    rnd(tr, a->ln1, NC);
    op->matmul_forward(a->q, a->ln1, tensor_of(tr, W, s, BW_Q), N, C, C);
    op->matmul_forward(a->k, a->ln1, tensor_of(tr, W, s, BW_K), N, C, KVD);
    op->matmul_forward(a->v, a->ln1, tensor_of(tr, W, s, BW_V), N, C, KVD);
    rnd(tr, a->q, NC); rnd(tr, a->k, NK); rnd(tr, a->v, NK);
    op->rope_forward(a->q, tr->rope_cos, tr->rope_sin, tr->B, tr->T, m->NH, m->HS);
    op->rope_forward(a->k, tr->rope_cos, tr->rope_sin, tr->B, tr->T, m->NKV, m->HS);
    rnd(tr, a->q, NC); rnd(tr, a->k, NK);
    op->attention_forward(a->att, a->lse, a->q, a->k, a->v, tr->B, tr->T, m->NH, m->NKV, m->HS);
    rnd(tr, a->att, NC);
    op->matmul_forward(a->tmp, a->att, tensor_of(tr, W, s, BW_O), N, C, C);
    rnd(tr, a->tmp, NC);
    memcpy(a->x2, x, NC * sizeof(float));
    op->add_inplace(a->x2, a->tmp, NC);
    rnd(tr, a->x2, NC);

    op->rmsnorm_forward(a->ln2, a->rstd2, a->x2, tensor_of(tr, W, s, BW_MLP_NORM), N, C, m->norm_eps);
    rnd(tr, a->ln2, NC);
    op->matmul_forward(a->gate, a->ln2, tensor_of(tr, W, s, BW_GATE), N, C, F);
    op->matmul_forward(a->up, a->ln2, tensor_of(tr, W, s, BW_UP), N, C, F);
    rnd(tr, a->gate, NF); rnd(tr, a->up, NF);
    op->swiglu_forward(a->h, a->gate, a->up, NF);
    rnd(tr, a->h, NF);
    op->matmul_forward(a->tmp, a->h, tensor_of(tr, W, s, BW_DOWN), N, F, C);
    rnd(tr, a->tmp, NC);
    memcpy(out, a->x2, NC * sizeof(float));
    op->add_inplace(out, a->tmp, NC);
    rnd(tr, out, NC);
}

// Recomputes block `layer` from its checkpoint x, then turns a->dres from ∂L/∂out into
// ∂L/∂x and accumulates the block's parameter gradients.
static void block_backward(trainer_t *tr, int layer, const float *x) {
    const backend_ops_t *op = tr->be.ops;
    const model_t *m = &tr->model;
    const int s = model_block_shard(layer);
    const int N = tr->N, C = m->C, F = m->F, KVD = m->NKV * m->HS;
    const size_t NC = (size_t)N * C, NF = (size_t)N * F, NK = (size_t)N * KVD;
    acts_t *a = &tr->a;

    block_forward(tr, layer, x, a->xf); // recompute; the output itself is not needed (xf is scratch here)
    const float *W = tr->bf16 ? tr->wbuf[0] : tr->p[s]; // converted by block_forward

    // MLP: out = x2 + h·Wdᵀ
    op->matmul_backward_input(a->dh, a->dres, tensor_of(tr, W, s, BW_DOWN), N, F, C, 0);
    op->matmul_backward_weight(grad_of(tr, s, BW_DOWN), a->dres, a->h, N, F, C);
    rnd(tr, a->dh, NF);
    op->swiglu_backward(a->dgate, a->dup, a->dh, a->gate, a->up, NF);
    rnd(tr, a->dgate, NF); rnd(tr, a->dup, NF);
    op->matmul_backward_input(a->dln, a->dgate, tensor_of(tr, W, s, BW_GATE), N, C, F, 0);
    op->matmul_backward_input(a->dln, a->dup, tensor_of(tr, W, s, BW_UP), N, C, F, 1);
    op->matmul_backward_weight(grad_of(tr, s, BW_GATE), a->dgate, a->ln2, N, C, F);
    op->matmul_backward_weight(grad_of(tr, s, BW_UP), a->dup, a->ln2, N, C, F);
    rnd(tr, a->dln, NC);
    op->rmsnorm_backward(a->dres, grad_of(tr, s, BW_MLP_NORM), a->dln, a->x2,
                         tensor_of(tr, W, s, BW_MLP_NORM), a->rstd2, N, C);
    rnd(tr, a->dres, NC); // now ∂L/∂x2

    // attention: x2 = x + att·Woᵀ
    op->matmul_backward_input(a->datt, a->dres, tensor_of(tr, W, s, BW_O), N, C, C, 0);
    op->matmul_backward_weight(grad_of(tr, s, BW_O), a->dres, a->att, N, C, C);
    rnd(tr, a->datt, NC);
    op->attention_backward(a->dq, a->dk, a->dv, a->datt, a->q, a->k, a->v, a->att, a->lse,
                           tr->B, tr->T, m->NH, m->NKV, m->HS);
    rnd(tr, a->dq, NC); rnd(tr, a->dk, NK); rnd(tr, a->dv, NK);
    op->rope_backward(a->dq, tr->rope_cos, tr->rope_sin, tr->B, tr->T, m->NH, m->HS);
    op->rope_backward(a->dk, tr->rope_cos, tr->rope_sin, tr->B, tr->T, m->NKV, m->HS);
    rnd(tr, a->dq, NC); rnd(tr, a->dk, NK);
    op->matmul_backward_input(a->dln, a->dq, tensor_of(tr, W, s, BW_Q), N, C, C, 0);
    op->matmul_backward_input(a->dln, a->dk, tensor_of(tr, W, s, BW_K), N, C, KVD, 1);
    op->matmul_backward_input(a->dln, a->dv, tensor_of(tr, W, s, BW_V), N, C, KVD, 1);
    op->matmul_backward_weight(grad_of(tr, s, BW_Q), a->dq, a->ln1, N, C, C);
    op->matmul_backward_weight(grad_of(tr, s, BW_K), a->dk, a->ln1, N, C, KVD);
    op->matmul_backward_weight(grad_of(tr, s, BW_V), a->dv, a->ln1, N, C, KVD);
    rnd(tr, a->dln, NC);
    op->rmsnorm_backward(a->dres, grad_of(tr, s, BW_ATTN_NORM), a->dln, x,
                         tensor_of(tr, W, s, BW_ATTN_NORM), a->rstd1, N, C);
    rnd(tr, a->dres, NC); // now ∂L/∂x
}

// ---------------------------------------------------------------- model forward / backward

static float *ckpt_of(trainer_t *tr, int l) {
    return tr->ckpt + (size_t)l * (size_t)tr->N * (size_t)tr->model.C;
}

// Embedding and blocks; ckpt[l] is block l's input, ckpt[L] the final residual stream.
static void forward_blocks(trainer_t *tr, const int *tokens) {
    const model_t *m = &tr->model;
    memcpy(tr->tokens, tokens, (size_t)tr->N * sizeof(int)); // host → device (CPU: a copy)
    const float *wte = shard_weights(tr, 0, 1);
    tr->be.ops->embedding_forward(ckpt_of(tr, 0), tr->tokens, wte, tr->N, m->C);
    for (int l = 0; l < m->L; l++) block_forward(tr, l, ckpt_of(tr, l), ckpt_of(tr, l + 1));
}

// Final norm and LM head into a->logits (N, V). Returns the head weights (FP32) used.
static const float *head_forward(trainer_t *tr, const float **wnorm) {
    const model_t *m = &tr->model;
    const int hs = model_head_shard(m);
    const float *Wh = shard_weights(tr, hs, 0);
    const float *Wout = m->tie ? shard_weights(tr, 0, 1) : tensor_of(tr, Wh, hs, HW_LM_HEAD);
    *wnorm = tensor_of(tr, Wh, hs, HW_NORM);
    tr->be.ops->rmsnorm_forward(tr->a.xf, tr->a.rstdf, ckpt_of(tr, m->L), *wnorm, tr->N, m->C, m->norm_eps);
    rnd(tr, tr->a.xf, (size_t)tr->N * m->C);
    tr->be.ops->matmul_forward(tr->a.logits, tr->a.xf, Wout, tr->N, m->C, m->V);
    rnd(tr, tr->a.logits, (size_t)tr->N * m->V);
    return Wout;
}

static double mean_loss(const trainer_t *tr) {
    double sum = 0; // fixed order: row 0..N-1
    for (int i = 0; i < tr->N; i++) sum += tr->a.losses[i];
    return sum / tr->N;
}

double trainer_forward(trainer_t *tr, const int *tokens, const int *targets) {
    const float *wnorm;
    forward_blocks(tr, tokens);
    head_forward(tr, &wnorm);
    memcpy(tr->targets, targets, (size_t)tr->N * sizeof(int));
    tr->be.ops->crossentropy_forward(tr->a.losses, tr->a.logits, tr->targets, tr->N, tr->model.V);
    return mean_loss(tr);
}

double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, float dscale) {
    const backend_ops_t *op = tr->be.ops;
    const model_t *m = &tr->model;
    const int N = tr->N, C = m->C, V = m->V, hs = model_head_shard(m);
    const size_t NC = (size_t)N * C;
    acts_t *a = &tr->a;
    const float *wnorm;

    forward_blocks(tr, tokens);
    const float *Wout = head_forward(tr, &wnorm);
    memcpy(tr->targets, targets, (size_t)N * sizeof(int));
    op->crossentropy_forward_backward(a->logits, a->losses, a->logits, tr->targets, N, V, dscale);
    double loss = mean_loss(tr);
    float *dlogits = a->logits; // (N, V), in place
    rnd(tr, dlogits, (size_t)N * V);

    // head backward: logits = xf·Woutᵀ, xf = rmsnorm(x_L)
    float *dWout = m->tie ? tr->g[0] : grad_of(tr, hs, HW_LM_HEAD);
    op->matmul_backward_input(a->dln, dlogits, Wout, N, C, V, 0);
    op->matmul_backward_weight(dWout, dlogits, a->xf, N, C, V);
    rnd(tr, a->dln, NC);
    memset(a->dres, 0, NC * sizeof(float));
    op->rmsnorm_backward(a->dres, grad_of(tr, hs, HW_NORM), a->dln, ckpt_of(tr, m->L), wnorm, a->rstdf, N, C);
    rnd(tr, a->dres, NC);

    for (int l = m->L - 1; l >= 0; l--) block_backward(tr, l, ckpt_of(tr, l));
    op->embedding_backward(tr->g[0], a->dres, tr->tokens, N, C);
    return loss;
}

// ---------------------------------------------------------------- optimizer

double trainer_grad_norm(trainer_t *tr) {
    double ss = 0;
    for (int s = 0; s < tr->model.nshards; s++)
        ss += tr->be.ops->sumsq(tr->g[s], tr->model.shards[s].numel_padded);
    return sqrt(ss);
}

void trainer_optimizer_step(trainer_t *tr, int t, float lr, float grad_scale) {
    const config_t *cfg = tr->cfg;
    adamw_params_t hp = {
        .lr = lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2, .eps = (float)cfg->eps,
        .grad_scale = grad_scale,
        .bc1 = (float)(1.0 - pow(cfg->beta1, t)), .bc2 = (float)(1.0 - pow(cfg->beta2, t)),
    };
    for (int s = 0; s < tr->model.nshards; s++) {
        const shard_t *sh = &tr->model.shards[s];
        for (int ti = 0; ti < sh->ntensors; ti++) {
            const tensor_t *te = &sh->tensors[ti];
            hp.wd = te->decay ? (float)cfg->wd : 0.0f;
            size_t o = te->offset;
            uint16_t *p16 = tr->bf16 ? (uint16_t *)tr->p[s] + o : NULL;
            float *p32 = tr->bf16 ? NULL : (float *)tr->p[s] + o;
            tr->be.ops->adamw_update(tr->master[s] + o, tr->m[s] + o, tr->v[s] + o, p16, p32,
                                     tr->g[s] + o, te->numel, &hp);
        }
    }
}

uint64_t trainer_params_hash(const trainer_t *tr) {
    uint64_t h = FNV64_INIT;
    for (int s = 0; s < tr->model.nshards; s++) {
        const shard_t *sh = &tr->model.shards[s];
        for (int ti = 0; ti < sh->ntensors; ti++)
            h = fnv1a64(h, tr->master[s] + sh->tensors[ti].offset, sh->tensors[ti].numel * sizeof(float));
    }
    return h;
}

float lr_schedule(const config_t *cfg, int t) {
    if (cfg->warmup > 0 && t <= cfg->warmup) return (float)(cfg->lr * t / cfg->warmup);
    int decay_steps = cfg->steps - cfg->warmup;
    if (decay_steps <= 0) return (float)cfg->lr;
    double frac = (double)(t - cfg->warmup) / decay_steps;
    if (frac > 1) frac = 1;
    double coeff = 0.5 * (1.0 + cos(M_PI * frac));
    return (float)(cfg->min_lr + coeff * (cfg->lr - cfg->min_lr));
}
