// optim.c — see optim.h.
#include "optim.h"
#include <math.h>
#include <string.h>
#include "trace.h"
#include "util.h"

float optim_lr(const config_t *cfg, int t) {
    if (cfg->warmup > 0 && t <= cfg->warmup) return (float)(cfg->lr * t / cfg->warmup);
    int decay_steps = cfg->steps - cfg->warmup;
    if (decay_steps <= 0) return (float)cfg->lr;
    double frac = (double)(t - cfg->warmup) / decay_steps;
    if (frac > 1) frac = 1;
    double coeff = 0.5 * (1.0 + cos(M_PI * frac));
    return (float)(cfg->min_lr + coeff * (cfg->lr - cfg->min_lr));
}

adamw_params_t optim_hparams(const config_t *cfg, int t, float lr, float grad_scale) {
    adamw_params_t hp = {
        .lr = lr, .beta1 = (float)cfg->beta1, .beta2 = (float)cfg->beta2, .eps = (float)cfg->eps,
        .grad_scale = grad_scale,
        .bc1 = (float)(1.0 - pow(cfg->beta1, t)), .bc2 = (float)(1.0 - pow(cfg->beta2, t)),
    };
    return hp;
}

// AdamW over the elements [lo, lo + n) of shard s, tensor by tensor (weight decay on matrices
// only): master, m, v and g point at element lo; the new compute copy goes into pc, which
// holds the shard's elements from plo on (this rank's piece). dev: device memory and the
// backend's update (queued), else the CPU's. Tensors that lie one after another with the
// same decay go in one call (a block's q, k, v and o; gate, up and down): AdamW is elementwise,
// so the bits are the same, and one call shares its tiles evenly among the threads where k's
// and v's three tiles each left one thread idle a third of the time.
static void adamw_chunk(const model_t *md, const config_t *cfg, const backend_t *be, int s, size_t lo, size_t n,
                        float *master, float *m, float *v, const float *g, void *pc, size_t plo, size_t pbytes,
                        adamw_params_t *hp) {
    const shard_t *sh = &md->shards[s];
    double t0 = trace_now_ms();
    for (int ti = 0; ti < sh->ntensors; ti++) {
        const tensor_t *te = &sh->tensors[ti];
        size_t end = te->offset + te->numel; // the run of tensors from ti: contiguous, one decay
        while (ti + 1 < sh->ntensors && sh->tensors[ti + 1].offset == end && sh->tensors[ti + 1].decay == te->decay)
            end += sh->tensors[++ti].numel;
        size_t a = te->offset > lo ? te->offset : lo, b = end < lo + n ? end : lo + n;
        if (a >= b) continue;
        hp->wd = te->decay ? (float)cfg->wd : 0.0f;
        size_t k = a - lo;
        uint16_t *p16 = pbytes == 2 ? (uint16_t *)pc + (a - plo) : NULL;
        float *p32 = pbytes == 2 ? NULL : (float *)pc + (a - plo);
        if (be) be->ops->adamw_update(master + k, m + k, v + k, p16, p32, g + k, b - a, hp);
        else adamw_update(master + k, m + k, v + k, p16, p32, g + k, b - a, hp);
    }
    trace_span(TRACK_OPTIM, "adamw", sh->name, t0, trace_now_ms());
}

// One chunk's AdamW (adamw_chunk's arguments), as a piece the compute thread may run
// (sched_assist): it writes only the chunk's states, its gradients (consumed) and pc.
typedef struct {
    const model_t *md;
    const config_t *cfg;
    int s;
    size_t lo, n, plo, pbytes;
    float *master, *m, *v;
    const float *g;
    void *pc;
    adamw_params_t *hp;
} chunk_job_t;

static void chunk_job(void *arg) {
    chunk_job_t *j = arg;
    adamw_chunk(j->md, j->cfg, NULL, j->s, j->lo, j->n, j->master, j->m, j->v, j->g, j->pc, j->plo, j->pbytes, j->hp);
}

// After the last chunk of shard s (update_chunk's): its gradients are consumed (zeroed already
// where update_chunk's AdamW wrote the zeros; a slot handed over goes back to the backward
// first), its new compute copy goes home (a device home's copy after the step's readers of the
// shard only), and, with publish, it is published.
static int shard_done(tier_t *tier, int s, void *pc, int publish, char *err, size_t errlen) {
    tier_grads_consumed(tier, s, tier_grads_update_consumes(tier, s));
    tier_grads_done(tier, s);
    return publish ? tier_params_store_publish(tier, s, pc, tier_step_event(tier), err, errlen)
                   : tier_params_store(tier, s, pc, tier_step_event(tier), err, errlen);
}

// Chunk c of shard s, the update's k-th (in its --optimizer-cache entry when k < ncache, else
// in staging buffer b or its host home), once its reads have landed: AdamW into pc, writing
// zeros over the gradients as it reads them where they are their home (hp->consume), on the
// compute thread's cores where it takes the piece (lay.upd_assist: sched_assist), else here.
static int update_chunk(tier_t *tier, const model_t *md, const config_t *cfg, tier_xfer_t *rd, int s, int c, int k,
                        int b, int ncache, void *pc, adamw_params_t *hp, char *err, size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    int rc = lay->home[ST_O32] == TIER_NVME ? tier_o32_finish(tier, &rd[b], err, errlen) : 0;
    if (rc == 0 && k < ncache) rc = tier_o32_finish(tier, tier_o32_cache_xfer(tier, k), err, errlen);
    if (rc != 0) return rc;
    size_t lo, n, plo, pn;
    tier_chunk_range(lay, md, s, c, &lo, &n);
    tier_piece(lay, md, s, &plo, &pn);
    float *master, *m, *v;
    if (k < ncache) tier_o32_cache_views(tier, k, n, &master, &m, &v);
    else tier_o32_views(tier, s, c, b, &master, &m, &v);
    hp->consume = tier_grads_update_consumes(tier, s);
    chunk_job_t j = {md, cfg, s, lo, n, plo, lay->pbytes, master, m, v, tier_grads_for_update(tier, s, c, b), pc, hp};
    sched_assist(tier_sched(tier), chunk_job, &j);
    return 0;
}

// Every transfer of an update through its nst staging buffers ends before a buffer is reused
// or freed (an update stopped early leaves reads, writes and cache fills in flight); the first
// error wins.
static int finish_all(tier_t *tier, tier_xfer_t *rd, tier_xfer_t *wr, int nst, int ncache, int rc, char *err,
                      size_t errlen) {
    for (int i = 0; i < 2 * nst + ncache; i++) {
        tier_xfer_t *x = i < nst ? &rd[i] : i < 2 * nst ? &wr[i - nst] : tier_o32_cache_xfer(tier, i - 2 * nst);
        char e2[512];
        int r = tier_o32_finish(tier, x, e2, sizeof e2);
        if (r != 0 && rc == 0) {
            rc = r;
            snprintf(err, errlen, "%s", e2);
        }
    }
    return rc;
}

// The first shard from s on with a piece on this rank (ranks: a small shard may have none),
// or nshards.
static int with_piece(const tier_layout_t *lay, const model_t *md, int s) {
    while (s < md->nshards && tier_nchunks(lay, md, s) == 0) s++;
    return s;
}

// A chunk in the update's order: shard s's chunk c, the update's k-th (s == nshards: past the last).
typedef struct { int s, c, k; } chunk_at_t;

static chunk_at_t chunk_first(const tier_layout_t *lay, const model_t *md) {
    return (chunk_at_t){with_piece(lay, md, 0), 0, 0};
}

static chunk_at_t chunk_next(const tier_layout_t *lay, const model_t *md, chunk_at_t a) {
    if (a.c + 1 < tier_nchunks(lay, md, a.s)) return (chunk_at_t){a.s, a.c + 1, a.k + 1};
    return (chunk_at_t){with_piece(lay, md, a.s + 1), 0, a.k + 1};
}

// The read into staging buffer `sb` of the update's k-th chunk, (s, c): when its states are
// cached, its gradients alone, and while the cache fills (fill) its states into entry k too,
// as far ahead as an uncached chunk's read is (all queued at once, a fill of GiBs would stall
// the next forward's parameter reads behind it); else its gradients (--grads nvme) and states.
static int chunk_read(tier_t *tier, tier_xfer_t *x, int s, int c, int k, int sb, int ncache, int fill,
                      char *err, size_t errlen) {
    if (k >= ncache) return tier_o32_submit(tier, x, IO_READ, s, c, sb, err, errlen);
    int rc = fill ? tier_o32_cache_fill(tier, tier_o32_cache_xfer(tier, k), s, c, k, err, errlen) : 0;
    return rc ? rc : tier_grads_submit(tier, x, s, c, sb, err, errlen);
}

// Whether an update after the backward reads the next one's first chunks ahead: NVMe states
// without a cache, the gradients in a home (with --grads nvme they are read with the states).
static int reads_go_ahead(tier_t *tier) {
    const tier_layout_t *lay = tier_layout_of(tier);
    return lay->home[ST_O32] == TIER_NVME && tier_o32_ncache(tier) == 0 && lay->o32_parts == 3;
}

// The next update's first nst chunks' reads (no cache, every buffer free), into the buffers
// they will take then, recorded with the tier. Lazy (tier_o32_read_ahead): queued all at once,
// qd of their pieces in flight held each of the backward's parameter reads behind them
// (small's NVMe case: 15-29 ms a read of 3 MiB, the compute waiting 22 ms a step).
static int queue_next_reads(tier_t *tier, const model_t *md, tier_xfer_t *rd, int nst, char *err, size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    int rc = 0;
    for (chunk_at_t a = chunk_first(lay, md); rc == 0 && a.s < md->nshards && a.k < nst; a = chunk_next(lay, md, a))
        if ((rc = tier_o32_read_ahead(tier, &rd[a.k], a.s, a.c, a.k, err, errlen)) == 0)
            tier_o32_set_read(tier, a.k, a.s, a.c);
    return rc;
}

// The reads of the update's chunks from *q on, up to chunk `upto` (by number): chunk k's goes
// into buffer k % nst once the write of that buffer's last chunk (k - nst) has landed. Through
// chunk `must` the caller waits for that write; after it the reads stop at the first buffer
// still being written. *q moves past every chunk whose read is queued.
static int reads_ahead(tier_t *tier, const model_t *md, tier_xfer_t *rd, tier_xfer_t *wr, int nst, chunk_at_t *q,
                       int must, int upto, int ncache, int fill, char *err, size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    for (; q->s < md->nshards && q->k <= upto; *q = chunk_next(lay, md, *q)) {
        const int b = q->k % nst;
        if (q->k > must && !tier_o32_landed(&wr[b])) return 0;
        int rc = tier_o32_finish(tier, &wr[b], err, errlen);
        if (rc == 0) rc = chunk_read(tier, &rd[b], q->s, q->c, q->k, b, ncache, fill, err, errlen);
        if (rc != 0) return rc;
    }
    return 0;
}

int optim_run_host(tier_t *tier, const model_t *md, const config_t *cfg, int t, float lr, float grad_scale,
                   char *err, size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    const int nvme = lay->home[ST_O32] == TIER_NVME, ncache = nvme ? tier_o32_ncache(tier) : 0;
    const int nst = nvme ? lay->nostage : 1;
    double t0 = now_ms();
    adamw_params_t hp = optim_hparams(cfg, t, lr, grad_scale);
    // NVMe: the update's k-th chunk goes through staging buffer k % nst, read once that
    // buffer's last write (chunk k - nst's) has landed. Chunk k+1's read is queued before chunk
    // k is updated (waiting for its buffer's write if need be), and the reads after it as far
    // as their buffers are free, up to nst - 1 chunks ahead: the disk reads ahead while the
    // update works and writes back, and the forward waiting for the next shard finds its
    // states read. Each in-flight transfer remembers its chunk. The first ncache chunks work in
    // their --optimizer-cache entries, filled from NVMe by the first update and never written
    // back (only their gradients use a buffer). The reads are the tier's: the last update may
    // have queued this one's first nst (see the end).
    tier_xfer_t *rd = tier_o32_reads(tier), wr[TIER_OPT_STAGING];
    memset(wr, 0, sizeof wr);
    int rc = 0;
    const int fill = ncache && !tier_o32_cache_valid(tier); // the first update: NVMe has the states
    if (fill) tier_o32_cache_set_valid(tier, 0); // until every entry is filled and updated
    chunk_at_t q = chunk_first(lay, md); // the first chunk whose read is not queued
    if (nvme) { // the reads the last update queued for this one: each buffer's, while they are its chunks'
        int mine = 1; // while it holds, q is chunk b
        for (int b = 0; b < nst; b++) {
            const int want = mine && q.s < md->nshards;
            mine = tier_o32_take_read(tier, b, want ? q.s : -1, q.c) && want;
            if (mine) {
                q = chunk_next(lay, md, q);
                tier_stats(tier)->opt_reads_ahead++;
            }
        }
    }
    for (int s = 0, k = 0; s < md->nshards && rc == 0; s++) {
        const int nc = tier_nchunks(lay, md, s);
        void *pc = tier_params_build(tier, s);
        if (nc == 0) { // no piece of it here: nothing to update, published all the same
            sched_update_publish(tier_sched(tier), s);
            continue;
        }
        for (int c = 0; c < nc && rc == 0; c++, k++) {
            const int b = k % nst;
            if (nvme) rc = reads_ahead(tier, md, rd, wr, nst, &q, k + 1, k + nst - 1, ncache, fill, err, errlen);
            if (rc == 0) rc = update_chunk(tier, md, cfg, rd, s, c, k, b, ncache, pc, &hp, err, errlen);
            // the compute copy's write, which the update waits for, before the states' write:
            // queued behind that one it waited for both, and so did the forward waiting for the
            // update (optim_run_backward writes in this order too)
            if (rc == 0 && c == nc - 1) rc = shard_done(tier, s, pc, 1, err, errlen);
            if (rc == 0 && nvme && k >= ncache) rc = tier_o32_submit(tier, &wr[b], IO_WRITE, s, c, b, err, errlen);
        }
    }
    rc = finish_all(tier, rd, wr, nst, ncache, rc, err, errlen);
    if (rc == 0 && fill) tier_o32_cache_set_valid(tier, 1); // the entries hold the newest states from now on
    // The next update's first reads, now: at its start the forward waits for its first shards,
    // and their states need no gradient (the gradients are in a home; on NVMe they are read
    // with the states). Not after the last step's update, and not for cached chunks.
    if (rc == 0 && reads_go_ahead(tier) && t < cfg->steps) rc = queue_next_reads(tier, md, rd, nst, err, errlen);
    tier_stats(tier)->opt_ms += now_ms() - t0;
    return rc;
}

int optim_queue_first_reads(tier_t *tier, const model_t *md, char *err, size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    if (lay->upd_bwd || !reads_go_ahead(tier)) return 0;
    // reads still queued (a rank that read none of a checkpoint's chunks kept them) end first:
    // their buffers are the new reads'
    int rc = tier_o32_drop_reads(tier, err, errlen);
    return rc ? rc : queue_next_reads(tier, md, tier_o32_reads(tier), lay->nostage, err, errlen);
}

int optim_run_backward(tier_t *tier, const model_t *md, const config_t *cfg, int t, float lr, char *err,
                       size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    const int nvme = lay->home[ST_O32] == TIER_NVME, ncache = nvme ? tier_o32_ncache(tier) : 0;
    double t0 = now_ms();
    adamw_params_t hp = optim_hparams(cfg, t, lr, 1.0f);
    // as optim_run_host with two staging buffers (lay.nostage): the i-th chunk the job updates is
    // read into buffer i & 1 (after that buffer's write has completed); (as, ac): the chunk
    // already read ahead into the other one
    tier_xfer_t *rd = tier_o32_reads(tier), wr[2];
    memset(wr, 0, sizeof wr);
    const int fill = ncache && !tier_o32_cache_valid(tier);
    if (fill) tier_o32_cache_set_valid(tier, 0);
    int rc = 0, i = 0, as = -1, ac = -1;
    for (int done = 0; done < md->nshards && rc == 0; done++) {
        const int s = tier_grads_next_final(tier, err, errlen);
        if (s < 0) {
            rc = s;
            break;
        }
        const int nc = tier_nchunks(lay, md, s), k0 = tier_chunk_number(lay, md, s, 0);
        void *pc = tier_params_build(tier, s);
        for (int c = 0; c < nc && rc == 0; c++, i++) {
            const int b = i & 1, nb = b ^ 1, k = k0 + c;
            if (nvme) {
                if (!(as == s && ac == c) && (rc = tier_o32_finish(tier, &wr[b], err, errlen)) == 0)
                    rc = chunk_read(tier, &rd[b], s, c, k, b, ncache, fill, err, errlen);
                // the next chunk: this shard's, else the next shard's first when it is handed over
                const int ns = c + 1 < nc ? s : tier_grads_peek_final(tier), ncx = c + 1 < nc ? c + 1 : 0;
                as = ac = -1;
                if (rc == 0 && ns >= 0 && (rc = tier_o32_finish(tier, &wr[nb], err, errlen)) == 0) {
                    rc = chunk_read(tier, &rd[nb], ns, ncx, tier_chunk_number(lay, md, ns, ncx), nb, ncache, fill,
                                    err, errlen);
                    as = ns;
                    ac = ncx;
                }
            }
            if (rc == 0) rc = update_chunk(tier, md, cfg, rd, s, c, k, b, ncache, pc, &hp, err, errlen);
            if (rc == 0 && c == nc - 1) rc = shard_done(tier, s, pc, 0, err, errlen); // published by the step's end
            if (rc == 0 && nvme && k >= ncache) rc = tier_o32_submit(tier, &wr[b], IO_WRITE, s, c, b, err, errlen);
        }
    }
    rc = finish_all(tier, rd, wr, 2, ncache, rc, err, errlen);
    if (rc == 0 && fill) tier_o32_cache_set_valid(tier, 1);
    tier_stats(tier)->opt_ms += now_ms() - t0;
    return rc;
}

int optim_run_device(tier_t *tier, const model_t *md, const config_t *cfg, const backend_t *be, int t, float lr,
                     float grad_scale, char *err, size_t errlen) {
    const tier_layout_t *lay = tier_layout_of(tier);
    double t0 = now_ms();
    adamw_params_t hp = optim_hparams(cfg, t, lr, grad_scale);
    for (int s = 0; s < md->nshards; s++) {
        const float *g = tier_grads_device(tier, s);
        tier_entry_t *p16 = tier_entry(tier, s, ST_P16);
        void *pd = p16->home == TIER_DEVICE ? p16->addr : tier_buf(tier, TB_NEW_PARAMS, 0);
        float *master, *m, *v;
        tier_o32_views(tier, s, 0, 0, &master, &m, &v);
        size_t plo, pn;
        tier_piece(lay, md, s, &plo, &pn);
        // where AdamW reads the home itself and may consume it (the CPU backend's device home, one
        // rank), it writes the zeros as it reads: no memset pass after
        hp.consume = g == tier_entry(tier, s, ST_G)->addr && tier_grads_update_consumes(tier, s);
        if (pn) adamw_chunk(md, cfg, be, s, plo, pn, master, m, v, g, pd, plo, lay->pbytes, &hp);
        tier_grads_consumed(tier, s, hp.consume);
        if (p16->home != TIER_DEVICE) {
            void *pc = tier_params_build(tier, s);
            backend_copy_d2h((backend_t *)be, pc, pd, p16->bytes);
            __atomic_fetch_add(&tier_stats(tier)->d2h_bytes, p16->bytes, __ATOMIC_RELAXED);
            int rc = tier_params_store(tier, s, pc, NULL, err, errlen);
            if (rc != 0) return rc;
        }
    }
    tier_stats(tier)->opt_ms += now_ms() - t0;
    return 0;
}
