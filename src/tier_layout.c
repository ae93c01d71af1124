// tier_layout.c — tier_layout (see tier.h): the one place a run's buffers are sized and
// counted. tier_init allocates exactly these; plan.c sums them.
#include <stdlib.h>
#include <string.h>
#include "acts.h"
#include "comm.h"
#include "cuda_kernels.h" // uses: cuda_attention_act16 (pure: any build)
#include "kernels.h"
#include "tier.h"
#include "util.h"

#define PAGE ((uint64_t)4096)

static void spec(tier_layout_t *lay, tier_buf_t b, const char *what, const char *part, tier_kind_t tier, int count,
                 uint64_t bytes) {
    lay->spec[b] = (tier_spec_t){.what = what, .part = part, .tier = tier, .count = count, .bytes = bytes};
}

static void spec_shards(tier_layout_t *lay, tier_buf_t b, const char *what, const char *part, tier_kind_t tier,
                        uint64_t elem) {
    lay->spec[b] = (tier_spec_t){.what = what, .part = part, .tier = tier, .per_shard = 1, .count = 1, .elem = elem};
}

void tier_piece(const tier_layout_t *lay, const model_t *m, int s, size_t *lo, size_t *n) {
    comm_piece(m->shards[s].numel_padded, lay->ranks, lay->rank, lo, n);
}

uint64_t tier_spec_bytes(const tier_layout_t *lay, const model_t *m, tier_buf_t b, int s) {
    const tier_spec_t *sp = &lay->spec[b];
    size_t lo, n;
    tier_piece(lay, m, s, &lo, &n);
    return sp->per_shard ? (uint64_t)n * sp->elem : sp->bytes;
}

int tier_gchunks(const tier_layout_t *lay, const model_t *m, int s) {
    return (int)CEIL_DIV(m->shards[s].numel_padded, lay->chunk_elems);
}

void tier_gchunk_range(const tier_layout_t *lay, const model_t *m, int s, int c, size_t *lo, size_t *n) {
    size_t total = m->shards[s].numel_padded;
    *lo = (size_t)c * lay->chunk_elems;
    *n = total - *lo < lay->chunk_elems ? total - *lo : lay->chunk_elems;
}

int tier_first_gchunk(const tier_layout_t *lay, const model_t *m, int s) {
    size_t plo, pn;
    tier_piece(lay, m, s, &plo, &pn);
    return (int)(plo / lay->chunk_elems);
}

int tier_nchunks(const tier_layout_t *lay, const model_t *m, int s) {
    size_t plo, pn;
    tier_piece(lay, m, s, &plo, &pn);
    return pn ? (int)(CEIL_DIV(plo + pn, lay->chunk_elems) - plo / lay->chunk_elems) : 0;
}

uint64_t tier_cache_entry_bytes(const tier_layout_t *lay) {
    return ALIGN_UP(3 * lay->chunk_elems * sizeof(float), PAGE);
}

uint64_t tier_host_cache_entry_bytes(const tier_layout_t *lay, const model_t *m) {
    return ALIGN_UP((uint64_t)m->max_shard_numel * lay->pbytes, PAGE);
}

int tier_chunk_number(const tier_layout_t *lay, const model_t *m, int s, int c) {
    for (int j = 0; j < s; j++) c += tier_nchunks(lay, m, j);
    return c;
}

uint64_t tier_cached_elems(const tier_layout_t *lay, const model_t *m) {
    uint64_t total = 0;
    int k = 0;
    for (int s = 0; s < m->nshards && k < lay->nocache; s++)
        for (int c = 0; c < tier_nchunks(lay, m, s) && k < lay->nocache; c++, k++) {
            size_t lo, n;
            tier_chunk_range(lay, m, s, c, &lo, &n);
            total += n;
        }
    return total;
}

void tier_chunk_range(const tier_layout_t *lay, const model_t *m, int s, int c, size_t *lo, size_t *n) {
    size_t plo, pn, glo, gn;
    tier_piece(lay, m, s, &plo, &pn);
    tier_gchunk_range(lay, m, s, tier_first_gchunk(lay, m, s) + c, &glo, &gn);
    size_t a = glo > plo ? glo : plo, b = glo + gn < plo + pn ? glo + gn : plo + pn;
    *lo = a;
    *n = b - a;
}

// Every buffer's spec and the tiers' totals, for the counts and chunk size already in lay.
static void layout_specs(const config_t *cfg, const model_t *m, tier_layout_t *lay) {
    const tier_kind_t P = cfg->params_tier, G = cfg->grads_tier, O = cfg->optim_tier;
    const uint64_t big = m->max_shard_numel, emb = model_embed_numel(m), pb = lay->pbytes, f = sizeof(float);
    lay->device_bytes = lay->host_bytes = 0;
    const uint64_t N = (uint64_t)cfg->B * (uint64_t)cfg->T, NC = N * (uint64_t)m->C;
    const uint64_t ostage = (uint64_t)lay->o32_parts * lay->chunk_elems * f;
    const tier_kind_t D = TIER_DEVICE, H = TIER_HOST;
    if (P != TIER_NVME) spec_shards(lay, TB_PARAMS, "parameters of %s", "params", P, pb);
    if (G != TIER_NVME) spec_shards(lay, TB_GRADS, "gradients of %s", "grads", G, f);
    if (O != TIER_NVME) spec_shards(lay, TB_OPTIM, "optimizer states of %s", "optimizer", O, 3 * f);
    spec(lay, TB_PARAM_SLOTS, "parameter slots", "param_slots", D, lay->nslots, big * pb);
    // NVMe reads land in the slot itself when the device is host memory (the CPU backend)
    spec(lay, TB_PARAM_STAGING, "parameter staging", "param_staging", H,
         P == TIER_NVME && !lay->device_is_host ? lay->nslots : 0, big * pb);
    // the new compute copy is built in place in host memory: a host home, or the CPU backend's device
    spec(lay, TB_PARAM_BUILD, "parameter staging", "param_staging", H,
         P == TIER_NVME || (P == TIER_DEVICE && !lay->device_is_host), big * pb);
    spec(lay, TB_HOST_CACHE, "parameter host cache", "host_cache", H, lay->nhcache, big * pb);
    spec(lay, TB_GRAD_SLOTS, "gradient slots", "grad_slots", D, G != TIER_DEVICE ? 2 : 0, big * f);
    // the fold of each micro-batch's gradients into the sum, in micro-batch order (step.c)
    const int ranks = cfg->ranks > 1 ? cfg->ranks : 1, fold = cfg->accum > 1 || ranks > 1;
    spec(lay, TB_GRAD_FRESH, "micro-batch gradients", "grad_fold", D, fold, big * f);
    size_t lo0, piece0; // rank 0's piece is the largest: every rank's share of it arrives
    comm_piece(big, ranks, 0, &lo0, &piece0);
    spec(lay, TB_GRAD_RECV, "gradient pieces of every rank", "grad_fold", D, ranks > 1, (uint64_t)ranks * piece0 * f);
    spec(lay, TB_GRAD_STAGING, "gradient staging", "grad_staging", H, G == TIER_DEVICE && !lay->device_is_host,
         lay->chunk_elems * f);
    // --grads nvme writes a slot's gradient straight from the slot when the device is host memory
    spec(lay, TB_GRAD_NVME, "gradient staging", "grad_staging", H, G == TIER_NVME && !lay->device_is_host ? 2 : 0,
         big * f);
    lay->nchunks = 0;
    for (int s = 0; s < m->nshards; s++) lay->nchunks += tier_nchunks(lay, m, s);
    if (lay->nostage > lay->nchunks) lay->nostage = lay->nchunks > 2 ? lay->nchunks : 2; // no buffer left idle
    spec(lay, TB_OPTIM_STAGING, "optimizer staging", "optimizer_staging", H,
         O == TIER_NVME ? lay->nostage : O == TIER_DEVICE, ostage);
    // --optimizer-cache: whole chunks of master, m, v, at most the update's
    const uint64_t ncache = O == TIER_NVME ? cfg->optim_cache / tier_cache_entry_bytes(lay) : 0;
    lay->nocache = (int)(ncache < (uint64_t)lay->nchunks ? ncache : (uint64_t)lay->nchunks);
    spec(lay, TB_OPTIM_CACHE, "optimizer state cache", "optimizer_cache", H, lay->nocache,
         3 * lay->chunk_elems * f);
    spec(lay, TB_NEW_PARAMS, "new parameters", "scratch", D, O == TIER_DEVICE && P != TIER_DEVICE, big * pb);
    spec(lay, TB_TIED_GRAD, "tied head gradient", "scratch", D, m->tie, emb * f);
    spec(lay, TB_WEIGHTS, "FP32 weight scratch", "scratch", D, pb == 2, (lay->w16 ? 2 * (uint64_t)m->C : big) * f);
    spec(lay, TB_NORM_W, "final norm weights", "scratch", D, 1, (uint64_t)m->C * f);
    spec(lay, TB_CE_STATS, "cross-entropy stats", "activations", D, 1, (uint64_t)lay->nmb * 3 * N * f);
    // bf16 mode stores checkpoints as BF16 (the step rounds them: no bits lost) and gives the
    // ops an FP32 copy in one buffer
    const uint64_t ab = pb == 2 ? 2 : f;
    spec(lay, TB_ACTS, "activation checkpoints", "checkpoints", lay->acts_host ? H : D, 1,
         (uint64_t)lay->nmb * (uint64_t)(m->L + 1) * NC * ab);
    spec(lay, TB_ACT_BUFS, "checkpoint buffers", "checkpoints", D, lay->acts_host ? 2 : 0, NC * ab);
    spec(lay, TB_ACT_F32, "checkpoint FP32 copy", "checkpoints", D, pb == 2, NC * f);
    spec(lay, TB_ACT_GRADS, "activation gradients", "activations", D, 1, (uint64_t)lay->nmb * NC * f);
    const unsigned h16 = acts_h16_of(lay->act16, lay->att16); // the buffers sized for BF16 halves
    lay->scratch_fwd = cfg->kept_blocks < m->L || cfg->kept_bf16;
    spec(lay, TB_SCRATCH, "activations", "activations", D, 1,
         acts_scratch_total(m, N, cfg->logits_kept, pb == 2, h16, lay->scratch_fwd));
    spec(lay, TB_KEPT, "kept activations", "kept_activations", D, lay->nmb * (cfg->kept_blocks < m->L ? cfg->kept_blocks : m->L),
         acts_kept_total(m, N, cfg->kept_bf16, h16));
    spec(lay, TB_ROPE, "RoPE table", "scratch", D, 2, (uint64_t)cfg->T * (uint64_t)(m->HS / 2) * f);
    spec(lay, TB_TOKENS, "tokens", "scratch", D, 1, (uint64_t)lay->nmb * N * sizeof(int));
    spec(lay, TB_TARGETS, "targets", "scratch", D, 1, (uint64_t)lay->nmb * N * sizeof(int));

    for (int b = 0; b < TB_COUNT; b++) {
        tier_spec_t *sp = &lay->spec[b];
        if (!sp->what) continue;
        if (sp->per_shard)
            for (int s = 0; s < m->nshards; s++) {
                uint64_t bytes = tier_spec_bytes(lay, m, b, s);
                sp->total += ALIGN_UP(bytes ? bytes : 1, PAGE); // an empty piece (ranks) takes a page
            }
        else
            sp->total = (uint64_t)sp->count * ALIGN_UP(sp->bytes ? sp->bytes : 1, PAGE);
        if (sp->tier == TIER_DEVICE) lay->device_bytes += sp->total;
        else lay->host_bytes += sp->total;
    }
}

int tier_products_read_w16(device_kind_t device) { return device == DEVICE_CUDA || matmul_kernel_name() != NULL; }

int tier_attention_halves(device_kind_t device, int NH, int NKV, int HS) {
    return device == DEVICE_CUDA ? cuda_attention_act16(NH, NKV, HS) : attention_act16(NH, NKV, HS);
}

void tier_layout(const config_t *cfg, const model_t *m, device_kind_t device, tier_layout_t *lay) {
    memset(lay, 0, sizeof *lay);
    const tier_kind_t P = cfg->params_tier, G = cfg->grads_tier, O = cfg->optim_tier;
    lay->home[ST_P16] = P;
    lay->home[ST_G] = G;
    lay->home[ST_O32] = O;
    lay->acts_host = cfg->acts_tier == ACTS_HOST;
    lay->nshards = m->nshards;
    lay->device_is_host = device != DEVICE_CUDA;
    lay->pbytes = cfg->precision == PREC_BF16 ? 2 : 4;
    lay->w16 = lay->pbytes == 2 && tier_products_read_w16(device) && !getenv("TT_TEST_WIDEN_WEIGHTS");
    lay->act16 = lay->w16 && (device == DEVICE_CUDA || matmul_act16(m->C)) && !getenv("TT_TEST_FP32_ACTS");
    lay->att16 = lay->act16 && tier_attention_halves(device, m->NH, m->NKV, m->HS);
    lay->vertical = cfg->schedule == SCHEDULE_VERTICAL && cfg->accum > 1;
    lay->nmb = lay->vertical ? cfg->accum : 1;
    lay->ranks = cfg->ranks > 1 ? cfg->ranks : 1;
    lay->rank = lay->ranks > 1 ? comm_rank(comm_world()) : 0; // plan --ranks N: rank 0's, the largest pieces
    if (lay->rank >= lay->ranks) lay->rank = 0;
    // ranks: a device home holds this rank's piece only, so every use gathers into a slot
    lay->nslots = P == TIER_DEVICE && lay->ranks == 1 ? 0 : cfg->prefetch + 2;
    if (lay->nslots > m->nshards) lay->nslots = m->nshards;
    const uint64_t big = m->max_shard_numel, pb = lay->pbytes;
    if (P == TIER_NVME && cfg->host_cache) {
        uint64_t n = cfg->host_cache / tier_host_cache_entry_bytes(lay, m);
        lay->nhcache = (int)(n < (uint64_t)m->nshards ? n : (uint64_t)m->nshards);
    }
    lay->upd_bwd = cfg->update_when != UPDATE_AFTER && !tier_update_backward_refusal(cfg, device);
    lay->upd_inline = lay->device_is_host && O == TIER_HOST && !lay->upd_bwd;
    lay->upd_assist = lay->device_is_host && O == TIER_NVME && !lay->upd_bwd && lay->ranks == 1;
    lay->o32_parts = G == TIER_NVME ? 4 : 3; // --grads nvme: g first in each chunk, read with its states
    // the longest use order: a step's (vertical: one pass) or an evaluation's forwards
    int reps = lay->vertical ? 1 : cfg->accum > 0 ? cfg->accum : 1, eval = cfg->eval_batches > 0 ? cfg->eval_batches : 1;
    // --grads nvme: a chunk's g extent takes the partial sums between a shard's visits and the
    // final gradient the update reads. With the update in the backward the final gradient is
    // handed over in its slot, so a shard visited once a step (one pass) needs no extent: only
    // the tied embedding's chunks, which the head visits before the embedding does.
    if (G == TIER_NVME) lay->gext_shards = !lay->upd_bwd || reps > 1 ? m->nshards : m->tie ? m->vchunks : 0;
    lay->max_uses = model_use_order(m, reps > eval ? reps : eval, 1, NULL);

    // The optimizer's chunk: TIER_CHUNK_ELEMS, or the largest shard when smaller; while the host
    // tier is over --host-budget, first two staging buffers instead of TIER_OPT_STAGING, then the
    // chunk halved (down to TIER_CHUNK_MIN): they change memory and speed, never bits.
    // TT_OPT_CHUNK=N (a testing hook; a multiple of SHARD_ALIGN_ELEMS) sets the chunk.
    const char *hook = getenv("TT_OPT_CHUNK");
    long long want = hook ? atoll(hook) : 0;
    size_t chunk = want >= SHARD_ALIGN_ELEMS && want % SHARD_ALIGN_ELEMS == 0 ? (size_t)want : TIER_CHUNK_ELEMS;
    lay->nostage = lay->upd_bwd ? 2 : TIER_OPT_STAGING;
    for (;;) {
        lay->chunk_elems = chunk < big ? chunk : big;
        layout_specs(cfg, m, lay);
        if (want || !cfg->host_budget || lay->host_bytes <= cfg->host_budget) break;
        if (lay->nostage > 2) lay->nostage = 2;
        else if (chunk / 2 < TIER_CHUNK_MIN) break;
        else chunk /= 2;
    }
    // NVMe: per shard, the compute copy's extent, then its chunks of (g,) master, m, v
    for (int s = 0; s < m->nshards; s++) {
        size_t lo, n;
        tier_piece(lay, m, s, &lo, &n); // this rank's piece of every state
        if (P == TIER_NVME) lay->nvme_bytes += n * pb;
        if (cfg->optim_tier == TIER_NVME) lay->nvme_bytes += (uint64_t)tier_o32_parts(lay, s) * n * sizeof(float);
    }
}

const char *tier_update_backward_refusal(const config_t *cfg, device_kind_t device) {
    if (cfg->clip > 0)
        return "needs --clip 0: clipping scales every gradient by the global norm, known only once the backward "
               "ends (add --clip 0, or use --update after)";
    if (cfg->optim_tier == TIER_DEVICE)
        return "--optimizer device updates on the device once the backward ends (use --optimizer host or nvme, or "
               "--update after)";
    if (cfg->ranks > 1)
        return "one rank only: the ranks' gradient folds end with the backward (use --update after)";
    if (device == DEVICE_CUDA)
        return "the cpu backend only: a GPU's gradients would need an event per shard (use --device cpu, or "
               "--update after)";
    return NULL;
}

uint64_t tier_part_bytes(const tier_layout_t *lay, tier_kind_t tier, const char *part) {
    uint64_t total = 0;
    for (int b = 0; b < TB_COUNT; b++)
        if (lay->spec[b].what && lay->spec[b].tier == tier && !strcmp(lay->spec[b].part, part))
            total += lay->spec[b].total;
    return total;
}

int tier_part_names(const tier_layout_t *lay, tier_kind_t tier, const char **names, int max) {
    int n = 0;
    for (int b = 0; b < TB_COUNT; b++) {
        const tier_spec_t *sp = &lay->spec[b];
        if (!sp->what || sp->tier != tier || sp->total == 0) continue;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= !strcmp(names[i], sp->part);
        if (!seen && n < max - 1) names[n++] = sp->part;
    }
    names[n] = NULL;
    return n;
}
