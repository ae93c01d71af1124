// step.c — see step.h. The block math (DESIGN §2) and where BF16 rounding happens:
// every activation and activation gradient written between ops is rounded to BF16 in bf16
// mode (the GPU backend stores them as BF16); norms, softmax, loss and parameter gradients
// stay FP32.
#include "step.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "trace.h"
#include "util.h"
#include "tier.h"

// ---------------------------------------------------------------- helpers

static void rnd(const trainer_t *tr, float *x, size_t n) {
    if (tr->bf16) tr->be.ops->bf16_round_n(x, n);
}

static size_t pbytes_of(const trainer_t *tr, int shard) {
    return tr->model.shards[shard].numel_padded * tr->pbytes;
}

static size_t obytes_of(const trainer_t *tr, int shard) { // master + m + v
    return 3 * tr->model.shards[shard].numel_padded * sizeof(float);
}

// Byte counters are bumped by the compute thread and the scheduler's worker alike.
static void stat_add(uint64_t *counter, uint64_t n) { __atomic_fetch_add(counter, n, __ATOMIC_RELAXED); }

static void fault(trainer_t *tr, const char *msg) {
    if (!tr->fault[0]) snprintf(tr->fault, sizeof tr->fault, "%s", msg);
}

// NVMe transfer of one extent, waited for. Returns 0 or -errno with the ticket's message.
static int nvme_io(trainer_t *tr, int write, uint64_t off, uint64_t len, void *buf, uint32_t *crc,
                   const char *what, int shard, char *err, size_t errlen) {
    double t0 = trace_now_ms();
    io_ticket_t t;
    memset(&t, 0, sizeof t);
    io_req_t r = {.op = write ? IO_WRITE : IO_READ, .off = off, .len = len, .buf = buf, .name = what,
                  .crc = write ? 0 : *crc};
    int rc = nvme_store_submit(tr->nvme, &t, &r);
    if (rc == 0) rc = io_ticket_wait(&t);
    if (rc != 0) {
        if (t.store) io_ticket_message(&t, err, errlen);
        else snprintf(err, errlen, "%s: %s", what, strerror(-rc));
        return rc;
    }
    trace_span(write ? TRACK_NVME_WRITE : TRACK_NVME_READ, write ? "write" : "read", tr->model.shards[shard].name,
               t0, trace_now_ms());
    if (write) {
        *crc = t.crc;
        stat_add(&tr->stats.nvme_write_bytes, len);
    } else {
        stat_add(&tr->stats.nvme_read_bytes, len);
    }
    return 0;
}

// ---------------------------------------------------------------- the optimizer thread

static void *opt_main(void *arg);
static void grads_zero(trainer_t *tr, int s);

// Waits until shard's update (if one is in flight) is final. Any thread. Returns 0, or the
// update's -errno (message in tr->opt_err) when it failed before reaching the shard.
static int opt_wait_shard(trainer_t *tr, int shard) {
    if (!tr->opt_started) return 0;
    pthread_mutex_lock(&tr->opt_mu);
    while (tr->opt_busy && tr->opt_done <= shard && tr->opt_rc == 0) pthread_cond_wait(&tr->opt_cv, &tr->opt_mu);
    int rc = tr->opt_done > shard ? 0 : tr->opt_rc;
    pthread_mutex_unlock(&tr->opt_mu);
    return rc;
}

// ---------------------------------------------------------------- parameters

// --host-cache: the cache entry holding shard, or -1.
static int hcache_find(const trainer_t *tr, int shard) {
    for (int i = 0; i < tr->nhcache; i++)
        if (tr->hcache_shard[i] == shard) return i;
    return -1;
}

// --host-cache: the entry to read shard into for its use at pos, or -1 to bypass the cache
// (every cached shard is needed again before this one): Belady's rule, as for device slots.
static int hcache_victim(trainer_t *tr, int shard, int pos) {
    return sched_cache_victim(tr->sched, tr->hcache_shard, tr->nhcache, shard, pos);
}

// Scheduler callback, on its worker thread: copy a shard's parameters from their home into
// a device slot (NVMe: from the host cache when it holds the shard, else read through a
// cache entry or the slot's staging buffer).
static int fetch_params(void *ctx, int shard, int pos, void *dst, char *err, size_t errlen) {
    trainer_t *tr = ctx;
    size_t bytes = pbytes_of(tr, shard);
    const void *src = NULL;
    int slot = 0;
    while (slot < tr->nslots && tr->pslot[slot] != dst) slot++;
    if (slot == tr->nslots) {
        snprintf(err, errlen, "parameters of %s: fetch into an unknown slot", tr->model.shards[shard].name);
        return -EINVAL;
    }
    if (opt_wait_shard(tr, shard) != 0) { // its home is not updated: the step is void
        snprintf(err, errlen, "%s", tr->opt_err);
        return tr->opt_rc;
    }
    if (tr->cfg->params_tier == TIER_HOST) {
        src = tr->p_host[shard];
    } else {
        // Only this thread changes which shard an entry holds; the optimizer thread writes
        // through to an entry holding a shard it is updating (never one fetched meanwhile:
        // a fetch of a shard waits for its update above).
        pthread_mutex_lock(&tr->hc_mu);
        int hit = tr->nhcache ? hcache_find(tr, shard) : -1, ci = -1;
        if (hit < 0) {
            ci = hcache_victim(tr, shard, pos < 0 ? 0 : pos);
            if (ci >= 0) tr->hcache_shard[ci] = -1; // not valid until the read lands
        }
        pthread_mutex_unlock(&tr->hc_mu);
        if (hit >= 0) {
            src = tr->hcache[hit];
            stat_add(&tr->stats.cache_hits, 1);
        } else {
            void *buf = ci >= 0 ? tr->hcache[ci] : tr->pstage[slot];
            char what[64];
            snprintf(what, sizeof what, "parameters of %s", tr->model.shards[shard].name);
            int rc = nvme_io(tr, 0, tr->p_off[shard], bytes, buf, &tr->p_crc[shard], what, shard, err, errlen);
            if (rc != 0) return rc;
            if (ci >= 0) {
                pthread_mutex_lock(&tr->hc_mu);
                tr->hcache_shard[ci] = shard;
                pthread_mutex_unlock(&tr->hc_mu);
            }
            src = buf;
        }
    }
    double t0 = trace_now_ms();
    // after the ops reading the slot's previous shard only: the copy overlaps the ops queued since
    backend_copy_after(&tr->be, dst, src, bytes, BACKEND_H2D, tr->slot_ev[slot]);
    trace_span(TRACK_COPY, "fetch", tr->model.shards[shard].name, t0, trace_now_ms());
    stat_add(&tr->stats.h2d_bytes, bytes);
    return 0;
}

// The compute copy of a shard on the device, for one use in the step's order. Pair with
// params_release. On a failed fetch the step is void: records the fault and hands out the
// slot anyway (zeros or stale values), so the step finishes and reports it.
static const void *params_acquire(trainer_t *tr, int shard) {
    if (tr->cfg->params_tier == TIER_DEVICE) {
        if (opt_wait_shard(tr, shard) != 0) fault(tr, tr->opt_err);
        return tr->p[shard];
    }
    char err[512];
    const void *p = sched_acquire(tr->sched, shard, err, sizeof err);
    if (!p) {
        fault(tr, err);
        p = tr->pslot[0];
    }
    int slot = 0;
    while (slot < tr->nslots - 1 && tr->pslot[slot] != p) slot++;
    tr->slot_of[shard] = slot;
    return p;
}

// The ops reading the shard's slot are queued: its event marks them, so that a later fetch
// into the slot waits for them (and nothing else) before overwriting it.
static void params_release(trainer_t *tr, int shard) {
    if (tr->cfg->params_tier == TIER_DEVICE) return;
    backend_event_record(&tr->be, tr->slot_ev[tr->slot_of[shard]]);
    sched_release(tr->sched, shard);
}

// FP32 weights of a shard for compute: the compute copy itself in fp32 mode, else the BF16
// copy converted into one of two scratch slots (then the device copy is released at once).
// Pair with weights_release.
static const float *weights_acquire(trainer_t *tr, int shard, int wslot) {
    const void *p = params_acquire(tr, shard);
    if (!tr->bf16) return p;
    tr->be.ops->bf16_to_f32_n(tr->wbuf[wslot], p, tr->model.shards[shard].numel_padded);
    params_release(tr, shard);
    return tr->wbuf[wslot];
}

static void weights_release(trainer_t *tr, int shard) {
    if (!tr->bf16) params_release(tr, shard);
}

// Writes a shard's new compute copy, already built in host memory (BF16 or FP32, see
// params_build_buffer), to its home: a copy to the device, nothing for a host home (it was
// built in place), or an NVMe write. A device home's copy waits for the ops queued so far,
// or, from the optimizer thread, for those before the update (after = tr->step_ev: the
// step's readers of the shard). Returns 0 or -errno with one line in err.
static int params_store(trainer_t *tr, int shard, const void *compute, void *after, char *err, size_t errlen) {
    size_t bytes = pbytes_of(tr, shard);
    switch (tr->cfg->params_tier) {
    case TIER_DEVICE:
        if (after) backend_copy_after(&tr->be, tr->p[shard], compute, bytes, BACKEND_H2D, after);
        else backend_copy_h2d(&tr->be, tr->p[shard], compute, bytes);
        stat_add(&tr->stats.h2d_bytes, bytes);
        return 0;
    case TIER_HOST: if (tr->p_host[shard] != compute) memcpy(tr->p_host[shard], compute, bytes); return 0;
    case TIER_NVME: {
        char what[64];
        snprintf(what, sizeof what, "parameters of %s", tr->model.shards[shard].name);
        pthread_mutex_lock(&tr->hc_mu); // write-through: a cached copy stays current
        int ci = tr->nhcache ? hcache_find(tr, shard) : -1;
        if (ci >= 0) memcpy(tr->hcache[ci], compute, bytes);
        pthread_mutex_unlock(&tr->hc_mu);
        return nvme_io(tr, 1, tr->p_off[shard], bytes, (void *)compute, &tr->p_crc[shard], what, shard, err, errlen);
    }
    }
    return -EINVAL;
}

// Where the optimizer builds a shard's new compute copy: straight into its home when that
// is host memory the CPU can write (device homes are arena memory on the CPU backend, but a
// GPU's are not, so those go through the staging buffer and params_store).
static void *params_build_buffer(trainer_t *tr, int shard) {
    if (tr->cfg->params_tier == TIER_HOST) return tr->p_host[shard];
    return tr->pstage_opt;
}

// ---------------------------------------------------------------- gradients

// The device buffer a shard's gradients accumulate into during its backward. Host homes
// visit a device slot (read, accumulate, write back: the same operations as when resident,
// so the same bits). The copies are queued, not waited for: the copy up waits for the slot's
// last copy down and for this shard's own last write-back, the ops wait for the copy up, the
// copy down for the ops. On a GPU the next shard's copy up thus runs during this shard's
// backward, and its copy down during the next one's. The host reads a home only after
// grads_host_sync.
static float *grads_acquire(trainer_t *tr, int shard) {
    if (tr->cfg->grads_tier == TIER_DEVICE) return tr->g[shard];
    size_t bytes = tr->model.shards[shard].numel_padded * sizeof(float);
    int i = tr->gslot_next;
    tr->gslot_next ^= 1;
    double t0 = now_ms();
    backend_stream_wait(&tr->be, BACKEND_STREAM_H2D, tr->gfree_ev[i]);
    backend_stream_wait(&tr->be, BACKEND_STREAM_H2D, tr->gdone_ev[shard]);
    backend_copy_enqueue(&tr->be, tr->gslot[i], tr->g[shard], bytes, BACKEND_H2D);
    backend_stream_record(&tr->be, BACKEND_STREAM_H2D, tr->gup_ev[i]);
    backend_stream_wait(&tr->be, BACKEND_STREAM_COMPUTE, tr->gup_ev[i]);
    tr->stats.copy_ms += now_ms() - t0;
    stat_add(&tr->stats.h2d_bytes, bytes);
    tr->gslot_of[shard] = i;
    tr->gcur[shard] = tr->gslot[i];
    return tr->gslot[i];
}

static void grads_release(trainer_t *tr, int shard) {
    if (tr->cfg->grads_tier == TIER_DEVICE) return;
    size_t bytes = tr->model.shards[shard].numel_padded * sizeof(float);
    int i = tr->gslot_of[shard];
    double t0 = now_ms();
    backend_event_record(&tr->be, tr->gops_ev);
    backend_stream_wait(&tr->be, BACKEND_STREAM_D2H, tr->gops_ev);
    backend_copy_enqueue(&tr->be, tr->g[shard], tr->gslot[i], bytes, BACKEND_D2H);
    backend_stream_record(&tr->be, BACKEND_STREAM_D2H, tr->gfree_ev[i]);
    backend_stream_record(&tr->be, BACKEND_STREAM_D2H, tr->gdone_ev[shard]);
    tr->stats.copy_ms += now_ms() - t0;
    stat_add(&tr->stats.d2h_bytes, bytes);
    tr->gcur[shard] = NULL;
}

// Host-resident gradients: every queued write-back has landed (before the host reads them).
static void grads_host_sync(trainer_t *tr) {
    if (tr->cfg->grads_tier == TIER_HOST) backend_stream_sync(&tr->be, BACKEND_STREAM_D2H);
}

static const float *tensor_of(const trainer_t *tr, const float *w, int shard, int t) {
    return w + tr->model.shards[shard].tensors[t].offset;
}

static float *grad_of(float *g, const trainer_t *tr, int shard, int t) {
    return g + tr->model.shards[shard].tensors[t].offset;
}

// ---------------------------------------------------------------- init / free

// n backend events into ev[0..n) (NULL on the CPU backend); events_destroy is NULL-safe.
static int events_create(trainer_t *tr, void **ev, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        int rc = backend_event_create(&tr->be, &ev[i], err, errlen);
        if (rc != 0) return rc;
    }
    return 0;
}

static void events_destroy(trainer_t *tr, void **ev, int n) {
    for (int i = 0; ev && i < n; i++) backend_event_destroy(&tr->be, ev[i]);
}

// Host pool bytes for this placement (each allocation rounded to 4 KiB like the pool's).
static uint64_t host_pool_bytes(const trainer_t *tr) {
    const config_t *cfg = tr->cfg;
    const model_t *m = &tr->model;
    uint64_t total = 0;
    for (int s = 0; s < m->nshards; s++) {
        uint64_t n = m->shards[s].numel_padded;
        if (cfg->params_tier == TIER_HOST) total += ALIGN_UP(n * tr->pbytes, 4096);
        if (cfg->grads_tier == TIER_HOST) total += ALIGN_UP(n * 4, 4096);
        if (cfg->optim_tier == TIER_HOST) total += 3 * ALIGN_UP(n * 4, 4096);
    }
    uint64_t big = m->max_shard_numel;
    if (cfg->params_tier == TIER_NVME) total += (uint64_t)tr->nslots * ALIGN_UP(big * tr->pbytes, 4096);
    total += (uint64_t)tr->nhcache * ALIGN_UP(big * tr->pbytes, 4096);
    if (cfg->ckpt_tier == CKPT_HOST)
        total += ALIGN_UP((uint64_t)tr->nmb * (uint64_t)(m->L + 1) * (uint64_t)tr->N * (uint64_t)m->C * 4, 4096);
    if (cfg->optim_tier == TIER_NVME) total += 2 * ALIGN_UP(3 * big * 4, 4096);
    if (cfg->optim_tier == TIER_DEVICE) total += ALIGN_UP(3 * big * 4, 4096);
    if (cfg->grads_tier == TIER_DEVICE && tr->be.vt) total += ALIGN_UP(big * 4, 4096); // gstage
    if (cfg->params_tier != TIER_HOST) total += ALIGN_UP(big * tr->pbytes, 4096);
    return total;
}

int trainer_init(trainer_t *tr, const config_t *cfg, char *err, size_t errlen) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    pthread_mutex_init(&tr->opt_mu, NULL);
    pthread_cond_init(&tr->opt_cv, NULL);
    pthread_mutex_init(&tr->hc_mu, NULL);
    tr->sync_inited = 1;
    model_init(&tr->model, cfg);
    backend_init(&tr->be, cfg);
    const model_t *m = &tr->model;
    tr->B = cfg->B;
    tr->T = cfg->T;
    tr->N = cfg->B * cfg->T;
    tr->bf16 = cfg->precision == PREC_BF16;
    tr->pbytes = tr->bf16 ? 2 : 4;
    const size_t N = (size_t)tr->N, C = (size_t)m->C, F = (size_t)m->F, V = (size_t)m->V;
    const size_t KVD = (size_t)m->NKV * (size_t)m->HS;
    const size_t big = m->max_shard_numel;
    int rc = 0;
    size_t ns = (size_t)m->nshards;
    tr->nslots = cfg->prefetch + 2 + (m->tie ? 1 : 0);
    if (tr->nslots > m->nshards) tr->nslots = m->nshards;
    tr->nmb = cfg->schedule == SCHEDULE_VERTICAL && cfg->accum > 1 ? cfg->accum : 1;
    if (cfg->params_tier == TIER_NVME && cfg->host_cache) {
        uint64_t entry = ALIGN_UP((uint64_t)big * tr->pbytes, 4096);
        uint64_t n = cfg->host_cache / entry;
        tr->nhcache = (int)(n < (uint64_t)m->nshards ? n : (uint64_t)m->nshards);
    }
    tr->hcache = calloc((size_t)tr->nhcache + 1, sizeof *tr->hcache);
    tr->losses_host = calloc((size_t)tr->N, sizeof *tr->losses_host);
    tr->hcache_shard = calloc((size_t)tr->nhcache + 1, sizeof *tr->hcache_shard);
    tr->p = calloc(ns, sizeof *tr->p);
    tr->p_host = calloc(ns, sizeof *tr->p_host);
    tr->p_off = calloc(ns, sizeof *tr->p_off);
    tr->p_crc = calloc(ns, sizeof *tr->p_crc);
    tr->g = calloc(ns, sizeof *tr->g);
    tr->gcur = calloc(ns, sizeof *tr->gcur);
    tr->gslot_of = calloc(ns, sizeof *tr->gslot_of);
    tr->gdone_ev = calloc(ns, sizeof *tr->gdone_ev);
    tr->master = calloc(ns, sizeof *tr->master);
    tr->m = calloc(ns, sizeof *tr->m);
    tr->v = calloc(ns, sizeof *tr->v);
    tr->o_off = calloc(ns, sizeof *tr->o_off);
    tr->o_crc = calloc(ns, sizeof *tr->o_crc);
    tr->o_name = calloc(ns, sizeof *tr->o_name);
    tr->pslot = calloc((size_t)tr->nslots, sizeof *tr->pslot);
    tr->pstage = calloc((size_t)tr->nslots, sizeof *tr->pstage);
    tr->slot_ev = calloc((size_t)tr->nslots + 1, sizeof *tr->slot_ev);
    tr->slot_of = calloc(ns, sizeof *tr->slot_of);
    if (!tr->p || !tr->p_host || !tr->p_off || !tr->p_crc || !tr->g || !tr->gcur || !tr->master || !tr->m ||
        !tr->v || !tr->o_off || !tr->o_crc || !tr->o_name || !tr->pslot || !tr->pstage ||
        !tr->hcache || !tr->hcache_shard || !tr->losses_host || !tr->slot_ev || !tr->slot_of || !tr->gslot_of ||
        !tr->gdone_ev) {
        snprintf(err, errlen, "out of memory for the shard tables");
        return -ENOMEM;
    }

    for (int s = 0; s < m->nshards; s++)
        snprintf(tr->o_name[s], sizeof tr->o_name[s], "optimizer states of %s", m->shards[s].name);

    // ---- host pool and NVMe store, sized for this placement
    hostmem_opts_t ho;
    uint64_t pool = host_pool_bytes(tr);
    tier_hostmem_opts(&ho, cfg, pool ? pool : 4096);
    ho.quiet = 1; // the tier report says what the pool is
    if (tr->be.vt) { // a device backend pins the pool its own way (CUDA: cudaHostRegister), so copies are DMA
        ho.pin_fn = backend_host_pin;
        ho.unpin_fn = backend_host_unpin;
        ho.pin_arg = &tr->be;
    }
    if ((rc = hostmem_init(&tr->host, &ho, err, errlen)) != 0) return rc;
    uint64_t nvme_bytes = 0;
    for (int s = 0; s < m->nshards; s++) {
        if (cfg->params_tier == TIER_NVME) { tr->p_off[s] = nvme_bytes; nvme_bytes += pbytes_of(tr, s); }
        if (cfg->optim_tier == TIER_NVME) { tr->o_off[s] = nvme_bytes; nvme_bytes += obytes_of(tr, s); }
    }
    if (nvme_bytes) {
        nvme_store_opts_t no;
        tier_nvme_opts(&no, cfg, nvme_bytes);
        struct iovec iov[IO_MAX_BUFS];
        no.nbufs = hostmem_regions(tr->host, iov, IO_MAX_BUFS);
        no.bufs = iov;
        if ((rc = nvme_store_init(&tr->nvme, &no, err, errlen)) != 0) return rc;
    }

#define DEV(ptr, bytes, what) do { void *p_ = NULL; \
        if ((rc = backend_alloc(&tr->be, (bytes), (what), &p_, err, errlen)) != 0) return rc; \
        (ptr) = p_; } while (0)
#define HOST(ptr, bytes, what) do { void *p_ = hostmem_alloc(tr->host, (bytes), (what), err, errlen); \
        if (!p_) return -ENOMEM; \
        (ptr) = p_; } while (0)

    for (int s = 0; s < m->nshards; s++) {
        const shard_t *sh = &m->shards[s];
        char what[64];
        snprintf(what, sizeof what, "parameters of %s", sh->name);
        if (cfg->params_tier == TIER_DEVICE) DEV(tr->p[s], pbytes_of(tr, s), what);
        if (cfg->params_tier == TIER_HOST) HOST(tr->p_host[s], pbytes_of(tr, s), what);
        snprintf(what, sizeof what, "gradients of %s", sh->name);
        if (cfg->grads_tier == TIER_DEVICE) DEV(tr->g[s], sh->numel_padded * sizeof(float), what);
        else HOST(tr->g[s], sh->numel_padded * sizeof(float), what);
        snprintf(what, sizeof what, "optimizer states of %s", sh->name);
        if (cfg->optim_tier == TIER_HOST) {
            HOST(tr->master[s], sh->numel_padded * sizeof(float), what);
            HOST(tr->m[s], sh->numel_padded * sizeof(float), what);
            HOST(tr->v[s], sh->numel_padded * sizeof(float), what);
        } else if (cfg->optim_tier == TIER_DEVICE) {
            DEV(tr->master[s], 3 * sh->numel_padded * sizeof(float), what);
            tr->m[s] = tr->master[s] + sh->numel_padded;
            tr->v[s] = tr->m[s] + sh->numel_padded;
        }
    }
    // Room for the longest use order: a step's (vertical: one pass) or an evaluation's.
    int accum = tr->nmb > 1 ? 1 : cfg->accum > 0 ? cfg->accum : 1;
    int eval = cfg->eval_batches > 0 ? cfg->eval_batches : 1;
    int maxn = model_use_order(m, accum > eval ? accum : eval, 1, NULL);
    tr->uses = malloc((size_t)maxn * sizeof *tr->uses);
    if (!tr->uses) { snprintf(err, errlen, "out of memory for the use order"); return -ENOMEM; }
    if (cfg->params_tier != TIER_DEVICE) {
        for (int i = 0; i < tr->nslots; i++) {
            DEV(tr->pslot[i], big * tr->pbytes, "parameter slots");
            if (cfg->params_tier == TIER_NVME) HOST(tr->pstage[i], big * tr->pbytes, "parameter staging");
        }
        if ((rc = events_create(tr, tr->slot_ev, tr->nslots, err, errlen)) != 0) return rc;
        if ((rc = sched_init(&tr->sched, m->nshards, tr->nslots, tr->pslot, cfg->prefetch, maxn, fetch_params, tr,
                             err, errlen)) != 0)
            return rc;
    }
    if (cfg->params_tier != TIER_HOST) HOST(tr->pstage_opt, big * tr->pbytes, "parameter staging");
    for (int i = 0; i < tr->nhcache; i++) {
        HOST(tr->hcache[i], big * tr->pbytes, "parameter host cache");
        tr->hcache_shard[i] = -1;
    }
    if (cfg->grads_tier == TIER_HOST) {
        DEV(tr->gslot[0], big * sizeof(float), "gradient slots");
        DEV(tr->gslot[1], big * sizeof(float), "gradient slots");
        if ((rc = events_create(tr, tr->gup_ev, 2, err, errlen)) != 0 ||
            (rc = events_create(tr, tr->gfree_ev, 2, err, errlen)) != 0 ||
            (rc = events_create(tr, &tr->gops_ev, 1, err, errlen)) != 0 ||
            (rc = events_create(tr, tr->gdone_ev, m->nshards, err, errlen)) != 0)
            return rc;
    } else if (tr->be.vt) {
        HOST(tr->gstage, big * sizeof(float), "gradient staging"); // device memory the CPU cannot read
    }
    if ((rc = events_create(tr, &tr->step_ev, 1, err, errlen)) != 0) return rc;
    if (m->tie) DEV(tr->gtie, m->shards[0].numel_padded * sizeof(float), "tied head gradient");
    if (cfg->optim_tier == TIER_NVME) {
        HOST(tr->ostage[0], 3 * big * sizeof(float), "optimizer staging");
        HOST(tr->ostage[1], 3 * big * sizeof(float), "optimizer staging");
    }
    if (cfg->optim_tier == TIER_DEVICE) {
        HOST(tr->ostage[0], 3 * big * sizeof(float), "optimizer staging");
        if (cfg->params_tier != TIER_DEVICE) DEV(tr->pnew, big * tr->pbytes, "new parameters");
    }
    if (tr->bf16) {
        DEV(tr->wbuf[0], big * sizeof(float), "FP32 weight scratch");
        DEV(tr->wbuf[1], m->shards[0].numel_padded * sizeof(float), "FP32 weight scratch");
    }
    const size_t nck = (size_t)tr->nmb * (size_t)(m->L + 1) * N * C * sizeof(float);
    if (cfg->ckpt_tier == CKPT_HOST) {
        HOST(tr->ckpt_host, nck, "activation checkpoints");
        DEV(tr->xbuf[0], N * C * sizeof(float), "checkpoint buffers");
        DEV(tr->xbuf[1], N * C * sizeof(float), "checkpoint buffers");
        int ntags = tr->nmb * (m->L + 1);
        tr->xdone_ev = calloc((size_t)ntags, sizeof *tr->xdone_ev);
        if (!tr->xdone_ev) { snprintf(err, errlen, "out of memory for the checkpoint events"); return -ENOMEM; }
        tr->nxdone = ntags;
        if ((rc = events_create(tr, tr->xfree_ev, 2, err, errlen)) != 0 ||
            (rc = events_create(tr, &tr->xops_ev, 1, err, errlen)) != 0 ||
            (rc = events_create(tr, tr->xdone_ev, ntags, err, errlen)) != 0)
            return rc;
    } else {
        DEV(tr->ckpt, nck, "activation checkpoints");
    }
    tr->xtag[0] = tr->xtag[1] = -1;
    DEV(tr->dres_all, (size_t)tr->nmb * N * C * sizeof(float), "activation gradients");
    acts_t *a = &tr->a;
    const size_t f = sizeof(float);
    DEV(a->ln1, N * C * f, "activations"); DEV(a->rstd1, N * f, "activations");
    DEV(a->q, N * C * f, "activations"); DEV(a->k, N * KVD * f, "activations"); DEV(a->v, N * KVD * f, "activations");
    DEV(a->att, N * C * f, "activations"); DEV(a->lse, N * (size_t)m->NH * f, "activations");
    DEV(a->x2, N * C * f, "activations"); DEV(a->ln2, N * C * f, "activations"); DEV(a->rstd2, N * f, "activations");
    DEV(a->gate, N * F * f, "activations"); DEV(a->up, N * F * f, "activations"); DEV(a->h, N * F * f, "activations");
    DEV(a->tmp, N * C * f, "activations");
    a->dres = tr->dres_all;
    DEV(a->dln, N * C * f, "activation gradients");
    DEV(a->dq, N * C * f, "activation gradients"); DEV(a->dk, N * KVD * f, "activation gradients");
    DEV(a->dv, N * KVD * f, "activation gradients"); DEV(a->datt, N * C * f, "activation gradients");
    DEV(a->dgate, N * F * f, "activation gradients"); DEV(a->dup, N * F * f, "activation gradients");
    DEV(a->dh, N * F * f, "activation gradients");
    DEV(a->xf, N * C * f, "head activations"); DEV(a->rstdf, N * f, "head activations");
    DEV(a->logits, N * V * f, "logits"); DEV(a->losses, N * f, "losses");
    DEV(tr->rope_cos, (size_t)tr->T * (size_t)(m->HS / 2) * f, "RoPE table");
    DEV(tr->rope_sin, (size_t)tr->T * (size_t)(m->HS / 2) * f, "RoPE table");
    DEV(tr->tokens_all, (size_t)tr->nmb * N * sizeof(int), "tokens");
    tr->tokens = tr->tokens_all;
    DEV(tr->targets, N * sizeof(int), "targets");
#undef DEV
#undef HOST
    { // computed on the host, copied to the device
        size_t rn = (size_t)tr->T * (size_t)(m->HS / 2);
        float *rc = malloc(rn * sizeof(float)), *rs = malloc(rn * sizeof(float));
        if (!rc || !rs) {
            free(rc);
            free(rs);
            snprintf(err, errlen, "out of memory for the RoPE table");
            return -ENOMEM;
        }
        rope_table(rc, rs, tr->T, m->HS, m->rope_theta);
        backend_copy_h2d(&tr->be, tr->rope_cos, rc, rn * sizeof(float));
        backend_copy_h2d(&tr->be, tr->rope_sin, rs, rn * sizeof(float));
        free(rc);
        free(rs);
    }

    // ---- initial weights: master from the seed, shard by shard; the compute copy from it
    for (int s = 0; s < m->nshards; s++) {
        float *master = tr->master[s], *mm = tr->m[s], *vv = tr->v[s];
        if (cfg->optim_tier != TIER_HOST) { // built in the staging shard, then written home
            size_t n = m->shards[s].numel_padded;
            master = tr->ostage[0];
            mm = master + n;
            vv = mm + n;
        }
        model_init_shard(m, s, cfg->seed, master);
        memset(mm, 0, m->shards[s].numel_padded * sizeof(float));
        memset(vv, 0, m->shards[s].numel_padded * sizeof(float));
        if (cfg->optim_tier == TIER_NVME &&
            (rc = nvme_io(tr, 1, tr->o_off[s], obytes_of(tr, s), master, &tr->o_crc[s], tr->o_name[s], s, err, errlen)) != 0)
            return rc;
        if (cfg->optim_tier == TIER_DEVICE) backend_copy_h2d(&tr->be, tr->master[s], master, obytes_of(tr, s));
        void *pc = params_build_buffer(tr, s);
        if (tr->bf16) bf16_from_f32_n(pc, master, m->shards[s].numel_padded);
        else memcpy(pc, master, m->shards[s].numel_padded * sizeof(float));
        if ((rc = params_store(tr, s, pc, NULL, err, errlen)) != 0) return rc;
    }
    hostmem_info_t hi;
    hostmem_info(tr->host, &hi);
    tr->host_bytes = hi.used;
    memset(&tr->stats, 0, sizeof tr->stats);
    if ((rc = pthread_create(&tr->opt_thread, NULL, opt_main, tr)) != 0) {
        snprintf(err, errlen, "cannot start the optimizer thread: %s", strerror(rc));
        return -rc;
    }
    tr->opt_started = 1;
    return 0;
}

void trainer_free(trainer_t *tr) {
    if (!tr) return;
    if (tr->opt_started) { // after the update in flight, if any
        pthread_mutex_lock(&tr->opt_mu);
        while (tr->opt_busy) pthread_cond_wait(&tr->opt_cv, &tr->opt_mu);
        tr->opt_stop = 1;
        pthread_cond_broadcast(&tr->opt_cv);
        pthread_mutex_unlock(&tr->opt_mu);
        pthread_join(tr->opt_thread, NULL);
    }
    sched_free(tr->sched); // first: its worker may be copying from the homes
    events_destroy(tr, tr->slot_ev, tr->nslots);
    events_destroy(tr, tr->gdone_ev, tr->model.nshards);
    events_destroy(tr, tr->xdone_ev, tr->nxdone);
    events_destroy(tr, tr->gup_ev, 2);
    events_destroy(tr, tr->gfree_ev, 2);
    events_destroy(tr, tr->xfree_ev, 2);
    void *single[] = {tr->gops_ev, tr->step_ev, tr->xops_ev};
    events_destroy(tr, single, 3);
    nvme_store_free(tr->nvme);
    hostmem_free(tr->host);
    free(tr->p); free(tr->p_host); free(tr->p_off); free(tr->p_crc); free(tr->g); free(tr->gcur);
    free(tr->master); free(tr->m); free(tr->v); free(tr->o_off); free(tr->o_crc); free(tr->o_name);
    free(tr->pslot); free(tr->pstage); free(tr->uses); free(tr->hcache); free(tr->hcache_shard);
    free(tr->losses_host); free(tr->slot_ev); free(tr->slot_of); free(tr->gslot_of); free(tr->gdone_ev); free(tr->xdone_ev);
    backend_free(&tr->be);
    model_free(&tr->model);
    if (tr->sync_inited) {
        pthread_mutex_destroy(&tr->opt_mu);
        pthread_cond_destroy(&tr->opt_cv);
        pthread_mutex_destroy(&tr->hc_mu);
    }
    memset(tr, 0, sizeof *tr);
}

void trainer_sync_params(trainer_t *tr) {
    char err[512];
    if (trainer_optimizer_wait(tr, err, sizeof err) != 0) runtime_error("%s", err);
    if (tr->sched) sched_invalidate(tr->sched); // the worker is idle from here on
    for (int s = 0; s < tr->model.nshards; s++) {
        size_t n = tr->model.shards[s].numel_padded;
        float *master, *mm, *vv; // wherever the states live (host, device or NVMe)
        if (trainer_states_get(tr, s, 0, &master, &mm, &vv, err, sizeof err) != 0) runtime_error("%s", err);
        void *pc = params_build_buffer(tr, s);
        if (tr->bf16) bf16_from_f32_n(pc, master, n);
        else memcpy(pc, master, n * sizeof(float));
        if (params_store(tr, s, pc, NULL, err, sizeof err) != 0) runtime_error("%s", err);
    }
}

void trainer_zero_grads(trainer_t *tr) {
    char err[512];
    if (trainer_optimizer_wait(tr, err, sizeof err) != 0) runtime_error("%s", err);
    grads_host_sync(tr);
    for (int s = 0; s < tr->model.nshards; s++) grads_zero(tr, s);
}

// A step's use order: horizontal repeats one micro-batch's order nmb times; vertical uses
// each shard once per pass (the acquires in trainer_step_fb follow the same order).
static void begin_step(trainer_t *tr, int nmb) {
    if (!tr->sched) return;
    int n = model_use_order(&tr->model, tr->nmb > 1 ? 1 : nmb, 1, tr->uses);
    if (sched_begin(tr->sched, tr->uses, n) != 0) fault(tr, "step: a use order longer than the scheduler's room");
}

void trainer_begin_eval(trainer_t *tr, int nbatches) {
    if (!tr->sched) return;
    int n = model_use_order(&tr->model, nbatches, 0, tr->uses);
    if (sched_begin(tr->sched, tr->uses, n) != 0) fault(tr, "evaluation: a use order longer than the scheduler's room");
}

// ---------------------------------------------------------------- block forward / backward

// x (N, C) → out (N, C) with the block's FP32 weights W; leaves every intermediate in tr->a
// for the backward.
static void block_forward(trainer_t *tr, int layer, const float *W, const float *x, float *out) {
    const backend_ops_t *op = tr->be.ops;
    const model_t *m = &tr->model;
    const int s = model_block_shard(layer);
    const int N = tr->N, C = m->C, F = m->F, KVD = m->NKV * m->HS;
    const size_t NC = (size_t)N * C, NF = (size_t)N * F, NK = (size_t)N * KVD;
    acts_t *a = &tr->a;

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
    backend_copy_d2d(&tr->be, a->x2, x, NC * sizeof(float));
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
    backend_copy_d2d(&tr->be, out, a->x2, NC * sizeof(float));
    op->add_inplace(out, a->tmp, NC);
    rnd(tr, out, NC);
}

// Recomputes block `layer` from its checkpoint x, then turns a->dres from ∂L/∂out into
// ∂L/∂x and accumulates the block's parameter gradients into G.
static void block_backward(trainer_t *tr, int layer, const float *W, float *G, const float *x) {
    const backend_ops_t *op = tr->be.ops;
    const model_t *m = &tr->model;
    const int s = model_block_shard(layer);
    const int N = tr->N, C = m->C, F = m->F, KVD = m->NKV * m->HS;
    const size_t NC = (size_t)N * C, NF = (size_t)N * F, NK = (size_t)N * KVD;
    acts_t *a = &tr->a;

    block_forward(tr, layer, W, x, a->xf); // recompute; the output itself is not needed (xf is scratch here)

    // MLP: out = x2 + h·Wdᵀ
    op->matmul_backward_input(a->dh, a->dres, tensor_of(tr, W, s, BW_DOWN), N, F, C, 0);
    op->matmul_backward_weight(grad_of(G, tr, s, BW_DOWN), a->dres, a->h, N, F, C);
    rnd(tr, a->dh, NF);
    op->swiglu_backward(a->dgate, a->dup, a->dh, a->gate, a->up, NF);
    rnd(tr, a->dgate, NF); rnd(tr, a->dup, NF);
    op->matmul_backward_input(a->dln, a->dgate, tensor_of(tr, W, s, BW_GATE), N, C, F, 0);
    op->matmul_backward_input(a->dln, a->dup, tensor_of(tr, W, s, BW_UP), N, C, F, 1);
    op->matmul_backward_weight(grad_of(G, tr, s, BW_GATE), a->dgate, a->ln2, N, C, F);
    op->matmul_backward_weight(grad_of(G, tr, s, BW_UP), a->dup, a->ln2, N, C, F);
    rnd(tr, a->dln, NC);
    op->rmsnorm_backward(a->dres, grad_of(G, tr, s, BW_MLP_NORM), a->dln, a->x2,
                         tensor_of(tr, W, s, BW_MLP_NORM), a->rstd2, N, C);
    rnd(tr, a->dres, NC); // now ∂L/∂x2

    // attention: x2 = x + att·Woᵀ
    op->matmul_backward_input(a->datt, a->dres, tensor_of(tr, W, s, BW_O), N, C, C, 0);
    op->matmul_backward_weight(grad_of(G, tr, s, BW_O), a->dres, a->att, N, C, C);
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
    op->matmul_backward_weight(grad_of(G, tr, s, BW_Q), a->dq, a->ln1, N, C, C);
    op->matmul_backward_weight(grad_of(G, tr, s, BW_K), a->dk, a->ln1, N, C, KVD);
    op->matmul_backward_weight(grad_of(G, tr, s, BW_V), a->dv, a->ln1, N, C, KVD);
    rnd(tr, a->dln, NC);
    op->rmsnorm_backward(a->dres, grad_of(G, tr, s, BW_ATTN_NORM), a->dln, x,
                         tensor_of(tr, W, s, BW_ATTN_NORM), a->rstd1, N, C);
    rnd(tr, a->dres, NC); // now ∂L/∂x
}

// ---------------------------------------------------------------- model forward / backward

// Activation checkpoints: ckpt(mb, l) is block l's input for micro-batch mb, (mb, L) the
// final residual. --checkpoints device keeps them all in the arena. --checkpoints host keeps
// them in the host pool and moves them through two device buffers: a checkpoint is read
// into the buffer not holding the current input (unless a buffer still holds it), and a
// block's output is written into the other buffer and copied out. The copy out is queued,
// not waited for: the next writers of that buffer wait for it (on a GPU the next block runs
// meanwhile), and so does the checkpoint's copy back in.
static int ckpt_tag(const trainer_t *tr, int mb, int l) {
    return (tr->nmb > 1 ? mb : 0) * (tr->model.L + 1) + l;
}

static size_t ckpt_elems(const trainer_t *tr) { return (size_t)tr->N * (size_t)tr->model.C; }

// Device copy of checkpoint (mb, l), for reading.
static float *ckpt_in(trainer_t *tr, int mb, int l) {
    int tag = ckpt_tag(tr, mb, l);
    if (tr->ckpt) return tr->ckpt + (size_t)tag * ckpt_elems(tr);
    for (int i = 0; i < 2; i++)
        if (tr->xtag[i] == tag) { tr->xcur = i; return tr->xbuf[i]; }
    int i = tr->xcur ^ 1;
    size_t bytes = ckpt_elems(tr) * sizeof(float);
    double t0 = now_ms();
    backend_stream_wait(&tr->be, BACKEND_STREAM_H2D, tr->xfree_ev[i]); // the buffer's copy out has read it
    backend_stream_wait(&tr->be, BACKEND_STREAM_H2D, tr->xdone_ev[tag]); // the host copy is written
    backend_copy_h2d(&tr->be, tr->xbuf[i], tr->ckpt_host + (size_t)tag * ckpt_elems(tr), bytes);
    tr->stats.copy_ms += now_ms() - t0;
    stat_add(&tr->stats.h2d_bytes, bytes);
    stat_add(&tr->stats.ckpt_h2d_bytes, bytes);
    tr->xtag[i] = tag;
    tr->xcur = i;
    return tr->xbuf[i];
}

// Where to write checkpoint (mb, l) on the device; ckpt_commit then keeps it.
static float *ckpt_out(trainer_t *tr, int mb, int l) {
    if (tr->ckpt) return tr->ckpt + (size_t)ckpt_tag(tr, mb, l) * ckpt_elems(tr);
    int i = tr->xcur ^ 1;
    backend_stream_wait(&tr->be, BACKEND_STREAM_COMPUTE, tr->xfree_ev[i]); // its last copy out has read it
    return tr->xbuf[i];
}

static void ckpt_commit(trainer_t *tr, int mb, int l) {
    if (tr->ckpt) return;
    int tag = ckpt_tag(tr, mb, l), i = tr->xcur ^ 1;
    size_t bytes = ckpt_elems(tr) * sizeof(float);
    double t0 = now_ms();
    backend_event_record(&tr->be, tr->xops_ev); // the ops writing it are queued
    backend_stream_wait(&tr->be, BACKEND_STREAM_D2H, tr->xops_ev);
    backend_copy_enqueue(&tr->be, tr->ckpt_host + (size_t)tag * ckpt_elems(tr), tr->xbuf[i], bytes, BACKEND_D2H);
    backend_stream_record(&tr->be, BACKEND_STREAM_D2H, tr->xfree_ev[i]);
    backend_stream_record(&tr->be, BACKEND_STREAM_D2H, tr->xdone_ev[tag]);
    tr->stats.copy_ms += now_ms() - t0;
    stat_add(&tr->stats.d2h_bytes, bytes);
    stat_add(&tr->stats.ckpt_d2h_bytes, bytes);
    tr->xtag[i] = tag;
    if (tr->xtag[i ^ 1] == tag) tr->xtag[i ^ 1] = -1; // an older copy of it
    tr->xcur = i;
}

static void ckpt_forget(trainer_t *tr) { tr->xtag[0] = tr->xtag[1] = -1; }

// Micro-batch mb's device tokens and ∂L/∂residual.
static void use_microbatch(trainer_t *tr, int mb) {
    int k = tr->nmb > 1 ? mb : 0;
    tr->tokens = tr->tokens_all + (size_t)k * (size_t)tr->N;
    tr->a.dres = tr->dres_all + (size_t)k * ckpt_elems(tr);
}

static void embed_forward(trainer_t *tr, int mb, const float *wte) {
    use_microbatch(tr, mb);
    float *out = ckpt_out(tr, mb, 0);
    tr->be.ops->embedding_forward(out, tr->tokens, wte, tr->N, tr->model.C);
    ckpt_commit(tr, mb, 0);
}

static void block_forward_mb(trainer_t *tr, int mb, int l, const float *W) {
    double t0 = trace_now_ms();
    const float *x = ckpt_in(tr, mb, l);
    block_forward(tr, l, W, x, ckpt_out(tr, mb, l + 1));
    ckpt_commit(tr, mb, l + 1);
    trace_span(TRACK_COMPUTE, "forward", tr->model.shards[model_block_shard(l)].name, t0, trace_now_ms());
}

// The head's weights: Wh (final norm [+ LM head]) and Wout (the LM head, or the embedding
// when tied). Release with head_release.
static const float *head_acquire(trainer_t *tr, const float **Wh) {
    const model_t *m = &tr->model;
    const int hs = model_head_shard(m);
    *Wh = weights_acquire(tr, hs, 0);
    return m->tie ? weights_acquire(tr, 0, 1) : tensor_of(tr, *Wh, hs, HW_LM_HEAD);
}

static void head_release(trainer_t *tr) {
    weights_release(tr, model_head_shard(&tr->model));
    if (tr->model.tie) weights_release(tr, 0);
}

// Final norm and LM head of micro-batch mb into a->logits (N, V).
static void head_forward(trainer_t *tr, int mb, const float *Wh, const float *Wout) {
    const model_t *m = &tr->model;
    const float *wnorm = tensor_of(tr, Wh, model_head_shard(m), HW_NORM);
    tr->be.ops->rmsnorm_forward(tr->a.xf, tr->a.rstdf, ckpt_in(tr, mb, m->L), wnorm, tr->N, m->C, m->norm_eps);
    rnd(tr, tr->a.xf, (size_t)tr->N * m->C);
    tr->be.ops->matmul_forward(tr->a.logits, tr->a.xf, Wout, tr->N, m->C, m->V);
    rnd(tr, tr->a.logits, (size_t)tr->N * m->V);
}

static double mean_loss(trainer_t *tr) {
    backend_copy_d2h(&tr->be, tr->losses_host, tr->a.losses, (size_t)tr->N * sizeof(float));
    double sum = 0; // fixed order: row 0..N-1
    for (int i = 0; i < tr->N; i++) sum += tr->losses_host[i];
    return sum / tr->N;
}

// Head forward, loss and head backward of micro-batch mb: leaves ∂L/∂x_L in its dres and
// accumulates the head's gradients into Gh (the LM head's into tr->gtie when tied).
static double head_forward_backward(trainer_t *tr, int mb, const float *Wh, const float *Wout, float *Gh,
                                    const int *targets, float dscale) {
    const backend_ops_t *op = tr->be.ops;
    const model_t *m = &tr->model;
    const int N = tr->N, C = m->C, V = m->V, hs = model_head_shard(m);
    const size_t NC = (size_t)N * C;
    acts_t *a = &tr->a;
    double th = trace_now_ms();
    use_microbatch(tr, mb);
    head_forward(tr, mb, Wh, Wout);
    backend_copy_h2d(&tr->be, tr->targets, targets, (size_t)N * sizeof(int));
    op->crossentropy_forward_backward(a->logits, a->losses, a->logits, tr->targets, N, V, dscale);
    double loss = mean_loss(tr);
    float *dlogits = a->logits; // (N, V), in place
    rnd(tr, dlogits, (size_t)N * V);
    // logits = xf·Woutᵀ, xf = rmsnorm(x_L)
    float *dWout = m->tie ? tr->gtie : grad_of(Gh, tr, hs, HW_LM_HEAD);
    op->matmul_backward_input(a->dln, dlogits, Wout, N, C, V, 0);
    op->matmul_backward_weight(dWout, dlogits, a->xf, N, C, V);
    rnd(tr, a->dln, NC);
    backend_memset(&tr->be, a->dres, 0, NC * sizeof(float));
    op->rmsnorm_backward(a->dres, grad_of(Gh, tr, hs, HW_NORM), a->dln, ckpt_in(tr, mb, m->L),
                         tensor_of(tr, Wh, hs, HW_NORM), a->rstdf, N, C);
    rnd(tr, a->dres, NC);
    trace_span(TRACK_COMPUTE, "head + loss", m->shards[hs].name, th, trace_now_ms());
    return loss;
}

static void block_backward_mb(trainer_t *tr, int mb, int l, const float *W, float *G) {
    double t0 = trace_now_ms();
    use_microbatch(tr, mb);
    block_backward(tr, l, W, G, ckpt_in(tr, mb, l));
    trace_span(TRACK_COMPUTE, "backward", tr->model.shards[model_block_shard(l)].name, t0, trace_now_ms());
}

static void embed_backward(trainer_t *tr, int mb, float *G0) {
    use_microbatch(tr, mb);
    tr->be.ops->embedding_backward(G0, tr->a.dres, tr->tokens, tr->N, tr->model.C);
}

double trainer_forward(trainer_t *tr, const int *tokens, const int *targets) {
    const model_t *m = &tr->model;
    ckpt_forget(tr);
    use_microbatch(tr, 0);
    backend_copy_h2d(&tr->be, tr->tokens, tokens, (size_t)tr->N * sizeof(int));
    const float *wte = weights_acquire(tr, 0, 1);
    embed_forward(tr, 0, wte);
    weights_release(tr, 0);
    for (int l = 0; l < m->L; l++) {
        int s = model_block_shard(l);
        const float *W = weights_acquire(tr, s, 0);
        block_forward_mb(tr, 0, l, W);
        weights_release(tr, s);
    }
    const float *Wh;
    const float *Wout = head_acquire(tr, &Wh);
    head_forward(tr, 0, Wh, Wout);
    head_release(tr);
    backend_copy_h2d(&tr->be, tr->targets, targets, (size_t)tr->N * sizeof(int));
    tr->be.ops->crossentropy_forward(tr->a.losses, tr->a.logits, tr->targets, tr->N, tr->model.V);
    return tr->fault[0] ? NAN : mean_loss(tr);
}

// Horizontal: each micro-batch runs embed, blocks, head, backward, embedding backward.
// Vertical: each phase runs every micro-batch before the next shard is needed, so each shard
// is acquired once per step. Either way every shard's gradients see the micro-batches in
// order, and the tied head's share of the embedding gradient is added last.
double trainer_step_fb(trainer_t *tr, const int *tokens, const int *targets, int nmb, float dscale) {
    const model_t *m = &tr->model;
    const int hs = model_head_shard(m);
    const size_t N = (size_t)tr->N;
    const int vertical = tr->nmb > 1;
    if (vertical && nmb > tr->nmb) runtime_error("step: %d micro-batches, room for %d", nmb, tr->nmb);
    begin_step(tr, nmb);
    ckpt_forget(tr);
    if (m->tie) backend_memset(&tr->be, tr->gtie, 0, m->shards[0].numel_padded * sizeof(float));
    double loss = 0;
    const float *Wh, *Wout;
    if (vertical) {
        for (int mb = 0; mb < nmb; mb++) {
            use_microbatch(tr, mb);
            backend_copy_h2d(&tr->be, tr->tokens, tokens + (size_t)mb * N, N * sizeof(int));
        }
        const float *wte = weights_acquire(tr, 0, 1);
        for (int mb = 0; mb < nmb; mb++) embed_forward(tr, mb, wte);
        weights_release(tr, 0);
        for (int l = 0; l < m->L; l++) {
            int s = model_block_shard(l);
            const float *W = weights_acquire(tr, s, 0);
            for (int mb = 0; mb < nmb; mb++) block_forward_mb(tr, mb, l, W);
            weights_release(tr, s);
        }
        Wout = head_acquire(tr, &Wh);
        float *Gh = grads_acquire(tr, hs);
        for (int mb = 0; mb < nmb; mb++)
            loss += head_forward_backward(tr, mb, Wh, Wout, Gh, targets + (size_t)mb * N, dscale);
        grads_release(tr, hs);
        head_release(tr);
        for (int l = m->L - 1; l >= 0; l--) {
            int s = model_block_shard(l);
            const float *W = weights_acquire(tr, s, 0);
            float *G = grads_acquire(tr, s);
            for (int mb = 0; mb < nmb; mb++) block_backward_mb(tr, mb, l, W, G);
            grads_release(tr, s);
            weights_release(tr, s);
        }
        float *G0 = grads_acquire(tr, 0);
        for (int mb = 0; mb < nmb; mb++) embed_backward(tr, mb, G0);
        if (m->tie) tr->be.ops->add_inplace(G0, tr->gtie, m->shards[0].numel_padded);
        grads_release(tr, 0);
    } else {
        for (int mb = 0; mb < nmb; mb++) {
            use_microbatch(tr, mb);
            backend_copy_h2d(&tr->be, tr->tokens, tokens + (size_t)mb * N, N * sizeof(int));
            const float *wte = weights_acquire(tr, 0, 1);
            embed_forward(tr, mb, wte);
            weights_release(tr, 0);
            for (int l = 0; l < m->L; l++) {
                int s = model_block_shard(l);
                const float *W = weights_acquire(tr, s, 0);
                block_forward_mb(tr, mb, l, W);
                weights_release(tr, s);
            }
            Wout = head_acquire(tr, &Wh);
            float *Gh = grads_acquire(tr, hs);
            loss += head_forward_backward(tr, mb, Wh, Wout, Gh, targets + (size_t)mb * N, dscale);
            grads_release(tr, hs);
            head_release(tr);
            for (int l = m->L - 1; l >= 0; l--) {
                int s = model_block_shard(l);
                const float *W = weights_acquire(tr, s, 0);
                float *G = grads_acquire(tr, s);
                block_backward_mb(tr, mb, l, W, G);
                grads_release(tr, s);
                weights_release(tr, s);
            }
            float *G0 = grads_acquire(tr, 0);
            embed_backward(tr, mb, G0);
            grads_release(tr, 0);
        }
        if (m->tie) {
            float *G0 = grads_acquire(tr, 0);
            tr->be.ops->add_inplace(G0, tr->gtie, m->shards[0].numel_padded);
            grads_release(tr, 0);
        }
    }
    return tr->fault[0] ? NAN : loss / nmb;
}

double trainer_forward_backward(trainer_t *tr, const int *tokens, const int *targets, float dscale) {
    return trainer_step_fb(tr, tokens, targets, 1, dscale);
}

// ---------------------------------------------------------------- optimizer

double trainer_grad_norm(trainer_t *tr) {
    grads_host_sync(tr);
    double ss = 0;
    for (int s = 0; s < tr->model.nshards; s++) { // host homes on the host; the same fixed order either way
        size_t n = tr->model.shards[s].numel_padded;
        ss += tr->cfg->grads_tier == TIER_HOST ? sumsq(tr->g[s], n) : tr->be.ops->sumsq(tr->g[s], n);
    }
    return sqrt(ss);
}

// One shard's AdamW over its tensors (wd on matrices only); writes master/m/v in place and
// the new compute copy into pc. dev: everything is device memory and the backend's update
// runs (queued on the compute stream); else the CPU's, on host memory.
static void adamw_shard(trainer_t *tr, int s, float *master, float *mm, float *vv, const float *g, void *pc,
                        adamw_params_t *hp, int dev) {
    const shard_t *sh = &tr->model.shards[s];
    double t0 = trace_now_ms();
    for (int ti = 0; ti < sh->ntensors; ti++) {
        const tensor_t *te = &sh->tensors[ti];
        hp->wd = te->decay ? (float)tr->cfg->wd : 0.0f;
        size_t o = te->offset;
        uint16_t *p16 = tr->bf16 ? (uint16_t *)pc + o : NULL;
        float *p32 = tr->bf16 ? NULL : (float *)pc + o;
        if (dev) tr->be.ops->adamw_update(master + o, mm + o, vv + o, p16, p32, g + o, te->numel, hp);
        else adamw_update(master + o, mm + o, vv + o, p16, p32, g + o, te->numel, hp);
    }
    trace_span(TRACK_OPTIM, "adamw", sh->name, t0, trace_now_ms());
}

// --trace: an optimizer-state transfer's span ends when the engine completes it.
static void o32_done(io_ticket_t *t, void *arg) {
    (void)t;
    __typeof__(((trainer_t *)0)->ospan[0]) *sp = arg;
    trace_span(sp->track, sp->track == TRACK_NVME_READ ? "read" : "write", sp->label, sp->t0, trace_now_ms());
}

// Queues the transfer of shard s's (master, m, v) extent through double-buffer half b and
// records the shard in *inflight. Returns 0 or -errno with the message.
static int o32_submit(trainer_t *tr, io_ticket_t *t, io_op_t op, int s, int b, int *inflight, char *err,
                      size_t errlen) {
    io_req_t r = {.op = op, .off = tr->o_off[s], .len = obytes_of(tr, s), .buf = tr->ostage[b],
                  .name = tr->o_name[s], .crc = op == IO_READ ? tr->o_crc[s] : 0};
    if (trace_enabled()) {
        int k = (op == IO_READ ? 0 : 2) + b;
        tr->ospan[k].label = tr->model.shards[s].name;
        tr->ospan[k].t0 = trace_now_ms();
        tr->ospan[k].track = op == IO_READ ? TRACK_NVME_READ : TRACK_NVME_WRITE;
        r.cb = o32_done;
        r.cb_arg = &tr->ospan[k];
    }
    memset(t, 0, sizeof *t);
    int rc = nvme_store_submit(tr->nvme, t, &r);
    if (rc != 0) snprintf(err, errlen, "%s: %s", tr->o_name[s], strerror(-rc));
    else *inflight = s;
    return rc;
}

// Waits for the transfer in flight on t (if any): counts its bytes and, for a write, keeps
// the extent's CRC for the next read. Returns 0 or -errno with the ticket's message.
static int o32_finish(trainer_t *tr, io_ticket_t *t, int *inflight, char *err, size_t errlen) {
    int s = *inflight;
    if (s < 0) return 0;
    *inflight = -1;
    double t0 = now_ms();
    int rc = io_ticket_wait(t);
    tr->stats.opt_nvme_wait_ms += now_ms() - t0;
    if (rc != 0) {
        io_ticket_message(t, err, errlen);
        return rc;
    }
    if (t->op == IO_WRITE) {
        tr->o_crc[s] = t->crc;
        stat_add(&tr->stats.nvme_write_bytes, t->len);
    } else {
        stat_add(&tr->stats.nvme_read_bytes, t->len);
    }
    return 0;
}

// Shard s's gradients where the host-side update can read them: the home itself when the
// CPU can address it, else (device-resident gradients on a GPU) a host copy.
static const float *grads_for_update(trainer_t *tr, int s) {
    if (!tr->gstage) return tr->g[s];
    // after the step's backward only, not the next step's forward queued meanwhile
    backend_copy_after(&tr->be, tr->gstage, tr->g[s], tr->model.shards[s].numel_padded * sizeof(float), BACKEND_D2H,
                       tr->step_ev);
    return tr->gstage;
}

static void grads_zero(trainer_t *tr, int s) {
    size_t bytes = tr->model.shards[s].numel_padded * sizeof(float);
    if (tr->cfg->grads_tier == TIER_DEVICE) backend_memset(&tr->be, tr->g[s], 0, bytes);
    else memset(tr->g[s], 0, bytes);
}

// Shard s is final: the next step may use it.
static void opt_publish(trainer_t *tr, int s) {
    pthread_mutex_lock(&tr->opt_mu);
    tr->opt_done = s + 1;
    pthread_cond_broadcast(&tr->opt_cv);
    pthread_mutex_unlock(&tr->opt_mu);
}

// One step's AdamW over every shard in order 0..n-1, on the optimizer thread: reads each
// shard's gradients, zeroes them, writes master/m/v and the new compute copy to its home,
// then publishes the shard. Returns 0 or -errno with one line in err.
static adamw_params_t adamw_hp(const config_t *cfg, int t, float lr, float grad_scale) {
    adamw_params_t hp = {
        .lr = lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2, .eps = (float)cfg->eps,
        .grad_scale = grad_scale,
        .bc1 = (float)(1.0 - pow(cfg->beta1, t)), .bc2 = (float)(1.0 - pow(cfg->beta2, t)),
    };
    return hp;
}

// --optimizer device: the update of every shard queued on the compute stream by the calling
// (compute) thread, where the states live; the gradients come up first when their home is
// the host, and the new compute copy goes down to a host or NVMe home. The ops that follow
// (the next forward) come after it in stream order, so nothing waits for it on the host.
static int optimizer_run_device(trainer_t *tr, int t, float lr, float grad_scale, char *err, size_t errlen) {
    const config_t *cfg = tr->cfg;
    const model_t *m = &tr->model;
    double t0 = now_ms();
    adamw_params_t hp = adamw_hp(cfg, t, lr, grad_scale);
    for (int s = 0; s < m->nshards; s++) {
        size_t n = m->shards[s].numel_padded;
        const float *g = tr->g[s];
        if (cfg->grads_tier == TIER_HOST) { // the write-backs have landed (trainer_optimizer_step)
            backend_copy_h2d(&tr->be, tr->gslot[0], tr->g[s], n * sizeof(float));
            stat_add(&tr->stats.h2d_bytes, n * sizeof(float));
            g = tr->gslot[0];
        }
        void *pd = cfg->params_tier == TIER_DEVICE ? tr->p[s] : tr->pnew;
        adamw_shard(tr, s, tr->master[s], tr->m[s], tr->v[s], g, pd, &hp, 1);
        grads_zero(tr, s);
        if (cfg->params_tier != TIER_DEVICE) {
            void *pc = params_build_buffer(tr, s);
            backend_copy_d2h(&tr->be, pc, tr->pnew, pbytes_of(tr, s));
            stat_add(&tr->stats.d2h_bytes, pbytes_of(tr, s));
            int rc = params_store(tr, s, pc, NULL, err, errlen);
            if (rc != 0) return rc;
        }
    }
    tr->stats.opt_ms += now_ms() - t0;
    return 0;
}

static int optimizer_run(trainer_t *tr, int t, float lr, float grad_scale, char *err, size_t errlen) {
    const config_t *cfg = tr->cfg;
    const model_t *m = &tr->model;
    double t0 = now_ms();
    adamw_params_t hp = adamw_hp(cfg, t, lr, grad_scale);
    // Gradients live in arena memory or the host pool; both are host-addressable on the CPU
    // backend (the CUDA backend copies device-resident gradients back first).
    int rc = 0;
    if (cfg->optim_tier == TIER_HOST) {
        for (int s = 0; s < m->nshards && rc == 0; s++) {
            void *pc = params_build_buffer(tr, s);
            adamw_shard(tr, s, tr->master[s], tr->m[s], tr->v[s], grads_for_update(tr, s), pc, &hp, 0);
            grads_zero(tr, s);
            rc = params_store(tr, s, pc, tr->step_ev, err, errlen);
            if (rc == 0) opt_publish(tr, s);
        }
    } else {
        // NVMe: shard s+1's (master, m, v) is read into one half of the double buffer while
        // shard s is updated in the other and written back; a half is read into again only
        // after its write has completed. Each in-flight transfer remembers its shard.
        io_ticket_t rd[2], wr[2];
        int rd_shard[2] = {-1, -1}, wr_shard[2] = {-1, -1};
        rc = o32_submit(tr, &rd[0], IO_READ, 0, 0, &rd_shard[0], err, errlen);
        for (int s = 0; s < m->nshards && rc == 0; s++) {
            int b = s & 1, nb = b ^ 1;
            if (s + 1 < m->nshards && (rc = o32_finish(tr, &wr[nb], &wr_shard[nb], err, errlen)) == 0)
                rc = o32_submit(tr, &rd[nb], IO_READ, s + 1, nb, &rd_shard[nb], err, errlen);
            if (rc == 0) rc = o32_finish(tr, &rd[b], &rd_shard[b], err, errlen);
            if (rc != 0) break;
            size_t n = m->shards[s].numel_padded;
            float *master = tr->ostage[b], *mm = master + n, *vv = mm + n;
            void *pc = params_build_buffer(tr, s);
            adamw_shard(tr, s, master, mm, vv, grads_for_update(tr, s), pc, &hp, 0);
            grads_zero(tr, s);
            if ((rc = params_store(tr, s, pc, tr->step_ev, err, errlen)) == 0) {
                opt_publish(tr, s); // the new parameters are home; the states' write may still run
                rc = o32_submit(tr, &wr[b], IO_WRITE, s, b, &wr_shard[b], err, errlen);
            }
        }
        // every submitted transfer ends before its buffer is reused or freed; the first
        // error wins the message
        for (int b = 0; b < 2; b++) {
            char e2[512];
            int r1 = o32_finish(tr, &rd[b], &rd_shard[b], e2, sizeof e2);
            if (r1 != 0 && rc == 0) { rc = r1; snprintf(err, errlen, "%s", e2); }
            int r2 = o32_finish(tr, &wr[b], &wr_shard[b], e2, sizeof e2);
            if (r2 != 0 && rc == 0) { rc = r2; snprintf(err, errlen, "%s", e2); }
        }
    }
    tr->stats.opt_ms += now_ms() - t0;
    return rc;
}

static void *opt_main(void *arg) {
    trainer_t *tr = arg;
    pthread_mutex_lock(&tr->opt_mu);
    for (;;) {
        while (!tr->opt_stop && !(tr->opt_busy && tr->opt_done == 0 && tr->opt_rc == 0))
            pthread_cond_wait(&tr->opt_cv, &tr->opt_mu);
        if (tr->opt_stop) break;
        int t = tr->opt_req.t;
        float lr = tr->opt_req.lr, gs = tr->opt_req.grad_scale;
        pthread_mutex_unlock(&tr->opt_mu);
        char err[512] = "";
        int rc = optimizer_run(tr, t, lr, gs, err, sizeof err);
        pthread_mutex_lock(&tr->opt_mu);
        if (rc != 0) {
            tr->opt_rc = rc;
            snprintf(tr->opt_err, sizeof tr->opt_err, "optimizer: %s", err);
        } else {
            tr->opt_done = tr->model.nshards;
        }
        tr->opt_busy = 0;
        pthread_cond_broadcast(&tr->opt_cv);
    }
    pthread_mutex_unlock(&tr->opt_mu);
    return NULL;
}

int trainer_optimizer_wait(trainer_t *tr, char *err, size_t errlen) {
    if (!tr->opt_started) return 0;
    pthread_mutex_lock(&tr->opt_mu);
    while (tr->opt_busy) pthread_cond_wait(&tr->opt_cv, &tr->opt_mu);
    int rc = tr->opt_rc;
    if (rc != 0 && err) snprintf(err, errlen, "%s", tr->opt_err);
    pthread_mutex_unlock(&tr->opt_mu);
    return rc;
}

int trainer_optimizer_step(trainer_t *tr, int t, float lr, float grad_scale, char *err, size_t errlen) {
    int rc = trainer_optimizer_wait(tr, err, errlen); // every shard of the last update was used already
    if (rc != 0) return rc;
    // The homes change from here: no fetch may be in flight, and every slot's copy goes stale.
    if (tr->sched) sched_invalidate(tr->sched);
    grads_host_sync(tr);                        // the update reads host homes ...
    backend_event_record(&tr->be, tr->step_ev); // ... and device ones after the backward
    if (tr->cfg->optim_tier == TIER_DEVICE) return optimizer_run_device(tr, t, lr, grad_scale, err, errlen);
    pthread_mutex_lock(&tr->opt_mu);
    tr->opt_req.t = t;
    tr->opt_req.lr = lr;
    tr->opt_req.grad_scale = grad_scale;
    tr->opt_done = 0;
    tr->opt_busy = 1;
    pthread_cond_broadcast(&tr->opt_cv);
    pthread_mutex_unlock(&tr->opt_mu);
    return 0;
}

int trainer_states_get(trainer_t *tr, int s, int fill_zero, float **master, float **m, float **v, char *err,
                       size_t errlen) {
    int rc = trainer_optimizer_wait(tr, err, errlen);
    if (rc != 0) return rc;
    if (tr->cfg->optim_tier == TIER_HOST) {
        *master = tr->master[s];
        *m = tr->m[s];
        *v = tr->v[s];
        return 0;
    }
    size_t n = tr->model.shards[s].numel_padded;
    if (fill_zero) memset(tr->ostage[0], 0, obytes_of(tr, s));
    else if (tr->cfg->optim_tier == TIER_DEVICE) backend_copy_d2h(&tr->be, tr->ostage[0], tr->master[s], obytes_of(tr, s));
    else if ((rc = nvme_io(tr, 0, tr->o_off[s], obytes_of(tr, s), tr->ostage[0], &tr->o_crc[s], tr->o_name[s], s, err,
                           errlen)) != 0)
        return rc;
    *master = tr->ostage[0];
    *m = *master + n;
    *v = *m + n;
    return 0;
}

int trainer_states_put(trainer_t *tr, int s, char *err, size_t errlen) {
    int rc = 0;
    const float *master = tr->master[s];
    if (tr->cfg->optim_tier == TIER_NVME) {
        if ((rc = nvme_io(tr, 1, tr->o_off[s], obytes_of(tr, s), tr->ostage[0], &tr->o_crc[s], tr->o_name[s], s, err,
                          errlen)) != 0)
            return rc;
        master = tr->ostage[0];
    } else if (tr->cfg->optim_tier == TIER_DEVICE) {
        backend_copy_h2d(&tr->be, tr->master[s], tr->ostage[0], obytes_of(tr, s));
        master = tr->ostage[0];
    }
    if (tr->sched) sched_invalidate(tr->sched); // slots may hold the old weights
    void *pc = params_build_buffer(tr, s);
    if (tr->bf16) bf16_from_f32_n(pc, master, tr->model.shards[s].numel_padded);
    else memcpy(pc, master, tr->model.shards[s].numel_padded * sizeof(float));
    return params_store(tr, s, pc, NULL, err, errlen);
}

int trainer_train_step(trainer_t *tr, int t, const int *tokens, const int *targets, double *loss, double *norm,
                       float *lr, char *err, size_t errlen) {
    const config_t *cfg = tr->cfg;
    const float dscale = 1.0f / ((float)tr->N * (float)cfg->accum); // a mean over the step's tokens
    *loss = trainer_step_fb(tr, tokens, targets, cfg->accum, dscale);
    if (tr->fault[0]) {
        snprintf(err, errlen, "%s", tr->fault);
        return -EIO;
    }
    *norm = trainer_grad_norm(tr);
    float scale = cfg->clip > 0 && *norm > cfg->clip ? (float)(cfg->clip / (*norm + 1e-6)) : 1.0f;
    *lr = lr_schedule(cfg, t);
    // starts the update; the next step's forward overlaps it, shard by shard
    return trainer_optimizer_step(tr, t, *lr, scale, err, errlen);
}

uint64_t trainer_params_hash(trainer_t *tr) {
    uint64_t h = FNV64_INIT;
    char err[512];
    if (trainer_optimizer_wait(tr, err, sizeof err) != 0) runtime_error("%s", err);
    for (int s = 0; s < tr->model.nshards; s++) {
        const shard_t *sh = &tr->model.shards[s];
        const float *master = tr->master[s];
        if (tr->cfg->optim_tier == TIER_NVME) {
            if (nvme_io(tr, 0, tr->o_off[s], obytes_of(tr, s), tr->ostage[0], &tr->o_crc[s], tr->o_name[s], s, err,
                        sizeof err) != 0)
                runtime_error("%s", err);
            master = tr->ostage[0];
        } else if (tr->cfg->optim_tier == TIER_DEVICE) {
            backend_copy_d2h(&tr->be, tr->ostage[0], tr->master[s], tr->model.shards[s].numel_padded * sizeof(float));
            master = tr->ostage[0];
        }
        for (int ti = 0; ti < sh->ntensors; ti++)
            h = fnv1a64(h, master + sh->tensors[ti].offset, sh->tensors[ti].numel * sizeof(float));
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
