// tier.c — see tier.h. The residency table, the allocation of what tier_layout lists, and
// moving parameters between homes and the device. tier_layout.c sizes; tier_grads.c moves
// gradients; tier_o32.c the optimizer states; this file places everything and moves parameters.
#include "tier.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "comm.h"
#include "gradnorm.h"
#include "trace.h"
#include "tier_internal.h"
#include "util.h"



static uint64_t state_bytes(const tier_t *t, int s, tier_state_t st) {
    uint64_t n = t->pn[s];
    return st == ST_P16 ? n * t->lay.pbytes : st == ST_G ? n * sizeof(float) : 3 * n * sizeof(float);
}

// ---------------------------------------------------------------- adapters

void tier_hostmem_opts(hostmem_opts_t *o, const config_t *cfg, uint64_t size) {
    memset(o, 0, sizeof *o);
    o->size = size;
    o->budget = cfg->host_budget;
    o->numa_node = cfg->numa_node;
    o->pin = 1;
    o->hugepages = 1;
    o->quiet = cfg->quiet;
}

void tier_nvme_opts(nvme_store_opts_t *o, const config_t *cfg, uint64_t size) {
    memset(o, 0, sizeof *o);
    o->paths = cfg->nvme_path;
    o->size = size;
    o->block = cfg->io_block;
    o->qd = cfg->nvme_qd;
    o->engine = cfg->io_engine;
    o->sqpoll = cfg->io_sqpoll;
    o->verify = cfg->io_verify;
    o->keep = cfg->keep_nvme;
}

// ---------------------------------------------------------------- init / free

static void *gather_main(void *arg);

static int fetch_params(void *ctx, int shard, int pos, int slot, void *dst, char *err, size_t errlen);

// The host pool (pinned through the backend on a device that is not host memory, so copies
// are DMA) and, when a state lives there, the NVMe store with every extent placed.
static int init_stores(tier_t *t, char *err, size_t errlen) {
    hostmem_opts_t ho;
    tier_hostmem_opts(&ho, t->cfg, t->lay.host_bytes ? t->lay.host_bytes : 4096);
    ho.quiet = 1; // the tier report says what the pool is
    ho.cpu_only = t->lay.device_is_host;
    if (!t->lay.device_is_host) {
        ho.pin_fn = backend_host_pin;
        ho.unpin_fn = backend_host_unpin;
        ho.pin_arg = t->be;
    }
    int rc = hostmem_init(&t->host, &ho, err, errlen);
    if (rc != 0 || !t->lay.nvme_bytes) return rc;
    // per shard: the compute copy's extent, then the chunks of (g,) master, m, v
    uint64_t at = 0;
    const size_t ncrc = (size_t)t->m->nshards + 2 * (size_t)t->lay.nchunks; // p16: one per shard; g, o32: one per chunk
    t->crcs = calloc(ncrc, sizeof *t->crcs);
    if (!t->crcs) { snprintf(err, errlen, "out of memory for the NVMe extents"); return -ENOMEM; }
    uint32_t *next = t->crcs;
    for (int s = 0; s < t->m->nshards; s++) {
        int nc = tier_nchunks(&t->lay, t->m, s);
        for (int st = 0; st < ST_COUNT; st++) {
            tier_entry_t *e = &t->table[s][st];
            if (e->home != TIER_NVME) continue;
            e->crc = next;
            next += st == ST_P16 ? 1 : nc;
            if (st == ST_G) continue; // g lies first in each of the shard's optimizer chunks (placed next)
            e->off = at;
            at += st == ST_P16 ? e->bytes : (uint64_t)tier_o32_parts(&t->lay, s) * t->pn[s] * sizeof(float);
        }
        if (t->table[s][ST_G].home == TIER_NVME) t->table[s][ST_G].off = t->table[s][ST_O32].off;
    }
    nvme_store_opts_t no;
    tier_nvme_opts(&no, t->cfg, t->lay.nvme_bytes);
    struct iovec iov[IO_MAX_BUFS];
    no.nbufs = hostmem_regions(t->host, iov, IO_MAX_BUFS);
    no.bufs = iov;
    return nvme_store_init(&t->nvme, &no, err, errlen);
}

// One allocation of spec b on its tier; what names it in errors.
static int alloc_one(tier_t *t, const tier_spec_t *sp, uint64_t bytes, const char *what, void **out, char *err,
                     size_t errlen) {
    if (sp->tier == TIER_DEVICE) {
        return backend_alloc(t->be, bytes, what, out, err, errlen);
    }
    *out = hostmem_alloc(t->host, bytes, what, err, errlen);
    return *out ? 0 : -ENOMEM;
}

// Everything the layout lists, in its order: the homes into the table, the rest into buf[].
static int alloc_all(tier_t *t, char *err, size_t errlen) {
    static const tier_state_t home_of[] = {[TB_PARAMS] = ST_P16, [TB_GRADS] = ST_G, [TB_OPTIM] = ST_O32};
    for (int b = 0; b < TB_COUNT; b++) {
        const tier_spec_t *sp = &t->lay.spec[b];
        if (!sp->what) continue;
        if (sp->per_shard) {
            for (int s = 0; s < t->m->nshards; s++) {
                char what[96];
                snprintf(what, sizeof what, sp->what, t->m->shards[s].name);
                uint64_t bytes = tier_spec_bytes(&t->lay, t->m, b, s); // 0: an empty piece (ranks) takes a page
                int rc = alloc_one(t, sp, bytes ? bytes : 1, what, &t->table[s][home_of[b]].addr, err, errlen);
                if (rc != 0) return rc;
            }
            continue;
        }
        t->buf[b] = calloc((size_t)sp->count + 1, sizeof *t->buf[b]);
        if (!t->buf[b]) { snprintf(err, errlen, "out of memory for the buffer table"); return -ENOMEM; }
        for (int i = 0; i < sp->count; i++) {
            int rc = alloc_one(t, sp, sp->bytes, sp->what, &t->buf[b][i], err, errlen);
            if (rc != 0) return rc;
        }
    }
    return 0;
}

int tier_init(tier_t **out, const config_t *cfg, const model_t *m, backend_t *be, const tier_layout_t *lay,
              char *err, size_t errlen) {
    *out = NULL;
    int rc = -ENOMEM;
    tier_t *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->cfg = cfg;
    t->m = m;
    t->be = be;
    t->lay = *lay;
    size_t ns = (size_t)m->nshards;
    t->table = calloc(ns, sizeof *t->table);
    t->label = calloc(ns, sizeof *t->label);
    t->slot_of = calloc(ns, sizeof *t->slot_of);
    t->gslot_of = calloc(ns, sizeof *t->gslot_of);
    t->slot_ev = calloc((size_t)lay->nslots + 1, sizeof *t->slot_ev);
    t->hcache_shard = calloc((size_t)lay->nhcache + 1, sizeof *t->hcache_shard);
    t->plo = calloc(ns, sizeof *t->plo);
    t->pn = calloc(ns, sizeof *t->pn);
    t->ocache_x = calloc((size_t)lay->nocache + 1, sizeof *t->ocache_x);
    t->glast = calloc(ns, sizeof *t->glast);
    t->ghanded = calloc(ns, sizeof *t->ghanded);
    for (int b = 0; b < TIER_OPT_STAGING; b++) t->o32_rd_shard[b] = -1;
    if (!t->table || !t->label || !t->slot_of || !t->gslot_of || !t->slot_ev || !t->hcache_shard || !t->plo || !t->pn ||
        !t->ocache_x || !t->glast || !t->ghanded)
        goto oom;
    if (lay->upd_bwd) {
        t->ho.q = calloc(ns, sizeof *t->ho.q);
        if (!t->ho.q) goto oom;
        pthread_mutex_init(&t->ho.mu, NULL);
        pthread_cond_init(&t->ho.cv, NULL);
        t->ho.inited = 1;
        t->ho.closed = 1; // until a step opens it
    }
    for (int s = 0; s < m->nshards; s++) tier_piece(lay, m, s, &t->plo[s], &t->pn[s]);
    t->gather = lay->ranks > 1;
    pthread_mutex_init(&t->hc_mu, NULL);
    pthread_cond_init(&t->hc_cv, NULL);
    t->hc_inited = 1;
    t->fresh.shard = -1;
    static const char *const state_names[ST_COUNT] = {"parameters", "gradients", "optimizer states"};
    for (int s = 0; s < m->nshards; s++)
        for (int st = 0; st < ST_COUNT; st++) {
            t->table[s][st].home = lay->home[st];
            t->table[s][st].bytes = state_bytes(t, s, (tier_state_t)st);
            snprintf(t->label[s][st], sizeof t->label[s][st], "%s of %s", state_names[st], m->shards[s].name);
        }
    for (int i = 0; i < lay->nhcache; i++) t->hcache_shard[i] = -1;
    if ((rc = init_stores(t, err, errlen)) != 0) goto fail;
    if ((rc = alloc_all(t, err, errlen)) != 0) goto fail;
    for (int i = 0; i < lay->nslots; i++)
        if ((rc = backend_event_create(be, &t->slot_ev[i], err, errlen)) != 0) goto fail;
    if ((rc = backend_event_create(be, &t->step_ev, err, errlen)) != 0) goto fail;
    if (lay->home[ST_G] == TIER_NVME || lay->upd_bwd || lay->device_is_host) {
        t->gss = calloc(ns, sizeof *t->gss);
        if (!t->gss) goto oom;
    }
    if (lay->device_is_host && !(t->gnormed = calloc(ns, sizeof *t->gnormed))) goto oom;
    if (lay->home[ST_G] == TIER_NVME) {
        int maxc = 0;
        for (int s = 0; s < m->nshards; s++) maxc = tier_nchunks(lay, m, s) > maxc ? tier_nchunks(lay, m, s) : maxc;
        for (int i = 0; i < 2; i++) {
            t->gw[i].shard = -1;
            t->gw[i].tk = calloc((size_t)maxc, sizeof *t->gw[i].tk);
            if (!t->gw[i].tk) goto oom;
        }
    }
    if (lay->home[ST_G] != TIER_DEVICE) {
        if ((rc = visit_init(&t->gvisit, be, t->buf[TB_GRAD_SLOTS][0], t->buf[TB_GRAD_SLOTS][1], m->nshards, err,
                             errlen)) != 0)
            goto fail;
        t->gvisit.h2d_bytes = &t->stats.h2d_bytes;
        t->gvisit.d2h_bytes = &t->stats.d2h_bytes;
        t->gvisit.copy_ms = &t->stats.copy_ms;
    }
    if ((rc = sched_init(&t->sched, m->nshards, lay->nslots, t->buf[TB_PARAM_SLOTS], cfg->prefetch, lay->max_uses,
                         fetch_params, t, err, errlen)) != 0)
        goto fail;
    if (t->gather) {
        sched_keep_failed(t->sched); // the slots' assignments stay the same on every rank
        if (comm_second() && lay->device_is_host) {
            t->gat.uses = calloc((size_t)lay->max_uses + 1, sizeof *t->gat.uses);
            if (!t->gat.uses) goto oom;
            pthread_mutex_init(&t->gat.mu, NULL);
            pthread_cond_init(&t->gat.cv, NULL);
            t->gat.inited = 1;
            t->gat.fail_k = -1;
            if ((rc = pthread_create(&t->gat.thr, NULL, gather_main, t)) != 0) {
                snprintf(err, errlen, "cannot start the gather worker: %s", strerror(rc));
                rc = -rc;
                goto fail;
            }
            t->gat.started = 1;
        }
    }
    *out = t;
    return 0;
oom:
    snprintf(err, errlen, "out of memory for the residency table");
    rc = -ENOMEM;
fail:
    tier_free(t);
    return rc;
}

void tier_free(tier_t *t) {
    if (!t) return;
    if (t->gat.started) { // before the scheduler: it may wait in sched_pin_fetched
        pthread_mutex_lock(&t->gat.mu);
        __atomic_store_n(&t->gat.stop, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&t->gat.cv);
        pthread_mutex_unlock(&t->gat.mu);
        sched_kick(t->sched);
        pthread_join(t->gat.thr, NULL);
    }
    if (t->gat.inited) {
        pthread_mutex_destroy(&t->gat.mu);
        pthread_cond_destroy(&t->gat.cv);
    }
    free(t->gat.uses);
    sched_free(t->sched); // first of the rest: its workers may be copying from the homes
    char e[512];
    if (t->nvme) (void)tier_o32_drop_reads(t, e, sizeof e); // the next update's reads, into the staging
    if (t->nvme) (void)tier_o32_flush(t, 0, e, sizeof e); // a failed load's writes, a save's reads, queued
    for (int i = 0; t->slot_ev && i < t->lay.nslots; i++) backend_event_destroy(t->be, t->slot_ev[i]);
    backend_event_destroy(t->be, t->step_ev);
    visit_free(&t->gvisit);
    nvme_store_free(t->nvme);
    hostmem_free(t->host);
    for (int b = 0; b < TB_COUNT; b++) free(t->buf[b]);
    if (t->hc_inited) {
        pthread_mutex_destroy(&t->hc_mu);
        pthread_cond_destroy(&t->hc_cv);
    }
    free(t->table);
    free(t->label);
    free(t->crcs);
    free(t->slot_of);
    free(t->gslot_of);
    free(t->slot_ev);
    free(t->hcache_shard);
    free(t->gss);
    free(t->glast);
    free(t->ghanded);
    free(t->gnormed);
    if (t->ho.inited) {
        pthread_mutex_destroy(&t->ho.mu);
        pthread_cond_destroy(&t->ho.cv);
    }
    free(t->ho.q);
    free(t->plo);
    free(t->pn);
    free(t->ocache_x);
    free(t->gw[0].tk);
    free(t->gw[1].tk);
    free(t);
}

const tier_layout_t *tier_layout_of(const tier_t *t) { return &t->lay; }
tier_entry_t *tier_entry(tier_t *t, int shard, tier_state_t st) { return &t->table[shard][st]; }
void *tier_buf(const tier_t *t, tier_buf_t b, int i) {
    return t->buf[b] && i < t->lay.spec[b].count ? t->buf[b][i] : NULL;
}
sched_t *tier_sched(tier_t *t) { return t->sched; }
void *tier_step_event(tier_t *t) { return t->step_ev; }
tier_stats_t *tier_stats(tier_t *t) { return &t->stats; }

uint64_t tier_host_used(const tier_t *t) {
    hostmem_info_t hi;
    hostmem_info(t->host, &hi);
    return hi.used;
}

int tier_nvme_info(const tier_t *t, io_info_t *out) {
    if (!t->nvme) return -ENOENT;
    nvme_store_info(t->nvme, out);
    return 0;
}

int tier_nvme_stats(const tier_t *t, io_stats_t *out) {
    memset(out, 0, sizeof *out);
    if (!t->nvme) return -ENOENT;
    nvme_store_stats(t->nvme, out);
    return 0;
}

int tier_nvme_io(tier_t *t, io_op_t op, uint64_t off, uint64_t len, void *buf, uint32_t *crc, const char *what,
                 char *err, size_t errlen) {
    double t0 = trace_now_ms();
    io_ticket_t tk;
    memset(&tk, 0, sizeof tk);
    // A read this thread waits for goes ahead of the read-ahead and write-back queued for later.
    // Writes stay in line: an urgent compute-copy write home (hundreds of MiB a shard at scale)
    // cut the update's reads short, and bench capacity's 4.3B model took 53.0 and 60.7 s a step
    // against 49.1 and 50.5 with reads alone urgent.
    io_req_t r = {.op = op, .off = off, .len = len, .buf = buf, .name = what, .crc = op == IO_WRITE ? 0 : *crc,
                  .urgent = op == IO_READ};
    int rc = nvme_store_submit(t->nvme, &tk, &r);
    if (rc == 0) rc = io_ticket_wait(&tk);
    if (rc != 0) {
        if (tk.store) io_ticket_message(&tk, err, errlen);
        else snprintf(err, errlen, "%s: %s", what, strerror(-rc));
        return rc;
    }
    trace_span(op == IO_WRITE ? TRACK_NVME_WRITE : TRACK_NVME_READ, op == IO_WRITE ? "write" : "read", what, t0,
               trace_now_ms());
    if (op == IO_WRITE) {
        *crc = tk.crc;
        stat_add(&t->stats.nvme_write_bytes, len);
    } else {
        stat_add(&t->stats.nvme_read_bytes, len);
    }
    return 0;
}

// ---------------------------------------------------------------- parameters

int tier_begin(tier_t *t, const int *uses, int n, char *err, size_t errlen) {
    if (t->lay.nslots == 0) return 0;
    int rc = sched_begin(t->sched, uses, n);
    if (rc != 0) {
        snprintf(err, errlen, "a use order of %d shards, room for %d", n, t->lay.max_uses);
        return rc;
    }
    if (t->gat.started) { // the gather worker follows the new order from its first use
        pthread_mutex_lock(&t->gat.mu);
        if (t->gat.done < t->gat.nuses) rc = -EINVAL; // every use of a phase is acquired: the gathers pair up
        memcpy(t->gat.uses, uses, (size_t)n * sizeof *uses);
        t->gat.nuses = n;
        t->gat.done = t->gat.begun = 0;
        t->gat.fail_k = -1;
        pthread_cond_broadcast(&t->gat.cv);
        pthread_mutex_unlock(&t->gat.mu);
        if (rc != 0) snprintf(err, errlen, "ranks: the last phase left uses without their acquire (a bug)");
    }
    return rc;
}

// The gather worker (see tier_internal.h): use k's gather once compute has begun use k−1's
// acquire, into the slot the scheduler fetched its piece into (pinned meanwhile; compute
// drops the pin at use k's acquire). A failed fetch is gathered all the same, so that every
// rank makes the same collectives.
static void *gather_main(void *arg) {
    tier_t *t = arg;
    pthread_mutex_lock(&t->gat.mu);
    for (;;) {
        while (!t->gat.stop && !(t->gat.done < t->gat.nuses && t->gat.done <= t->gat.begun))
            pthread_cond_wait(&t->gat.cv, &t->gat.mu);
        if (t->gat.stop) break;
        const int k = t->gat.done, shard = t->gat.uses[k];
        pthread_mutex_unlock(&t->gat.mu);
        const int slot = sched_pin_fetched(t->sched, shard, &t->gat.stop);
        char e2[256] = "";
        int rc = 0;
        if (slot >= 0) {
            double t0 = trace_now_ms();
            rc = comm_allgather_pieces(comm_second(), sched_slot_buf(t->sched, slot), t->m->shards[shard].numel_padded,
                                       t->lay.pbytes, e2, sizeof e2);
            trace_span(TRACK_COPY, "gather", t->m->shards[shard].name, t0, trace_now_ms());
        }
        pthread_mutex_lock(&t->gat.mu);
        if (slot < 0) break; // stopped
        if (rc != 0 && t->gat.fail_k < 0) {
            t->gat.fail_k = k;
            snprintf(t->gat.err, sizeof t->gat.err, "%s: %s", t->label[shard][ST_P16], e2);
        }
        t->gat.done = k + 1;
        pthread_cond_broadcast(&t->gat.cv);
    }
    pthread_mutex_unlock(&t->gat.mu);
    return NULL;
}

static int hcache_find(const tier_t *t, int shard) {
    for (int i = 0; i < t->lay.nhcache; i++)
        if (t->hcache_shard[i] == shard) return i;
    return -1;
}

// The scheduler's fetch callback, on its fetch worker: copies a shard's parameters from
// their home into a device slot (NVMe: from the host cache when it holds the shard, else
// read through a cache entry, taken by Belady's rule, or the slot's staging buffer).
static int fetch_params(void *ctx, int shard, int pos, int slot, void *dst, char *err, size_t errlen) {
    tier_t *t = ctx;
    const tier_entry_t *e = &t->table[shard][ST_P16];
    const char *name = t->m->shards[shard].name;
    int rc = sched_update_wait_shard(t->sched, shard, err, errlen); // its home is not updated: the step is void
    if (rc != 0) return rc;
    dst = (char *)dst + t->plo[shard] * t->lay.pbytes; // this rank's piece (the whole shard on one rank)
    if (t->pn[shard] == 0) return 0;                     // none: the gather brings every byte
    double t0 = trace_now_ms(); // the fetch's span: its NVMe read (when any) and its copy
    const void *src = e->addr;
    if (e->home == TIER_NVME) {
        pthread_mutex_lock(&t->hc_mu);
        int hit = hcache_find(t, shard), ci = -1;
        const void *fresh = NULL; // its update's new copy, still in the build buffer: copied from there
        if (hit < 0) {
            ci = sched_cache_victim(t->sched, t->hcache_shard, t->lay.nhcache, shard, pos < 0 ? 0 : pos);
            if (ci >= 0) t->hcache_shard[ci] = -1; // not valid until the read lands
            if (t->fresh.shard == shard) {
                fresh = t->fresh.buf;
                t->fresh.readers++;
            }
        }
        pthread_mutex_unlock(&t->hc_mu);
        if (hit >= 0) {
            src = t->buf[TB_HOST_CACHE][hit];
            stat_add(&t->stats.cache_hits, 1);
        } else {
            // through a cache entry, else straight into the slot when it is host memory
            void *buf = ci >= 0 ? t->buf[TB_HOST_CACHE][ci] : t->lay.device_is_host ? dst : t->buf[TB_PARAM_STAGING][slot];
            if (fresh) {
                memcpy(buf, fresh, e->bytes);
                stat_add(&t->stats.fresh_bytes, e->bytes);
                pthread_mutex_lock(&t->hc_mu);
                if (--t->fresh.readers == 0) pthread_cond_broadcast(&t->hc_cv);
                pthread_mutex_unlock(&t->hc_mu);
            } else {
                rc = tier_nvme_io(t, IO_READ, e->off, e->bytes, buf, &e->crc[0], t->label[shard][ST_P16], err, errlen);
            }
            if (rc != 0) return rc;
            if (ci >= 0) {
                pthread_mutex_lock(&t->hc_mu);
                t->hcache_shard[ci] = shard;
                pthread_mutex_unlock(&t->hc_mu);
            }
            src = buf;
        }
    }
    if (src != dst) { // not read in place
        // after the ops reading the slot's previous shard only: the copy overlaps the ops queued since
        backend_copy_after(t->be, dst, src, e->bytes, BACKEND_H2D, t->slot_ev[slot]);
        stat_add(&t->stats.h2d_bytes, e->bytes);
    }
    trace_span(TRACK_COPY, "fetch", name, t0, trace_now_ms());
    return 0;
}

// Ranks: every use of a shard gathers every rank's piece into its slot, on the compute thread
// in the use order (the same on every rank, whatever the fetches' timing), so that the ranks'
// collectives pair up; a failed fetch still takes part, with what its slot holds.
int tier_params_acquire(tier_t *t, int shard, const void **p, char *err, size_t errlen) {
    const tier_entry_t *e = &t->table[shard][ST_P16];
    if (e->home == TIER_DEVICE && !t->gather) {
        *p = e->addr;
        return sched_update_wait_shard(t->sched, shard, err, errlen);
    }
    int k = 0, worker = 0;
    if (t->gat.started) { // this use's number in the order: the gather worker may start the next one
        pthread_mutex_lock(&t->gat.mu);
        worker = t->gat.begun < t->gat.nuses; // a use outside the order: gathered here, below
        if (worker) k = t->gat.begun++;
        pthread_cond_broadcast(&t->gat.cv);
        pthread_mutex_unlock(&t->gat.mu);
    }
    int slot = 0; // a failed fetch hands out slot 0 (see tier.h)
    const void *got = sched_acquire(t->sched, shard, &slot, err, errlen);
    *p = got ? got : t->buf[TB_PARAM_SLOTS][0];
    t->slot_of[shard] = slot;
    if (worker) { // its gather, by the worker (whose pin on the slot goes now)
        pthread_mutex_lock(&t->gat.mu);
        double t0 = now_ms();
        while (t->gat.done <= k && !t->gat.stop) pthread_cond_wait(&t->gat.cv, &t->gat.mu);
        t->stats.gather_wait_ms += now_ms() - t0;
        int failed = t->gat.fail_k == k;
        if (failed && got) snprintf(err, errlen, "%s", t->gat.err);
        pthread_mutex_unlock(&t->gat.mu);
        sched_release(t->sched, shard);
        return !got ? -EIO : failed ? -EIO : 0;
    }
    if (t->gather) {
        char e2[512];
        double t0 = trace_now_ms();
        const size_t n = t->m->shards[shard].numel_padded;
        void *stream = backend_native_stream(t->be, BACKEND_STREAM_COMPUTE); // a GPU: NCCL, in order with the ops
        int rc = stream ? comm_dev_allgather_pieces(comm_world(), (void *)*p, n, t->lay.pbytes, stream, e2, sizeof e2)
                        : comm_allgather_pieces(comm_world(), (void *)*p, n, t->lay.pbytes, e2, sizeof e2);
        trace_span(TRACK_COPY, "gather", t->m->shards[shard].name, t0, trace_now_ms());
        if (rc != 0 && got) {
            snprintf(err, errlen, "%s: %s", t->label[shard][ST_P16], e2);
            return rc;
        }
    }
    return got ? 0 : -EIO;
}

// The ops reading the shard's slot are queued: its event marks them, so that a later fetch
// into the slot waits for them (and nothing else) before overwriting it.
void tier_params_release(tier_t *t, int shard) {
    if (t->table[shard][ST_P16].home == TIER_DEVICE && !t->gather) return;
    backend_event_record(t->be, t->slot_ev[t->slot_of[shard]]);
    sched_release(t->sched, shard);
}

void tier_params_invalidate(tier_t *t) {
    if (t->lay.nslots) sched_invalidate(t->sched);
}

// The build buffer's offer to the fetches (fresh) is taken back once no fetch copies from it.
static void fresh_drop(tier_t *t) {
    pthread_mutex_lock(&t->hc_mu);
    while (t->fresh.readers > 0) pthread_cond_wait(&t->hc_cv, &t->hc_mu);
    t->fresh.shard = -1;
    t->fresh.buf = NULL;
    pthread_mutex_unlock(&t->hc_mu);
}

// A host home is built in place, and so is a device home the CPU can address (the CPU
// backend: its next readers wait for the shard's publication); a GPU's home and an NVMe
// home take the build buffer, no longer offered to the fetches.
void *tier_params_build(tier_t *t, int shard) {
    tier_entry_t *e = &t->table[shard][ST_P16];
    int in_place = e->home == TIER_HOST || (e->home == TIER_DEVICE && t->lay.device_is_host);
    if (in_place) return e->addr;
    fresh_drop(t);
    return t->buf[TB_PARAM_BUILD][0];
}

// A --host-cache entry holding shard stays current (under hc_mu).
static void write_through(tier_t *t, int shard, const void *compute) {
    int ci = hcache_find(t, shard);
    if (ci >= 0) memcpy(t->buf[TB_HOST_CACHE][ci], compute, t->table[shard][ST_P16].bytes);
}

// shard's new compute copy to its NVMe extent (waits for the write).
static int write_home(tier_t *t, int shard, const void *compute, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_P16];
    return tier_nvme_io(t, IO_WRITE, e->off, e->bytes, (void *)compute, &e->crc[0], t->label[shard][ST_P16], err,
                        errlen);
}

int tier_params_store(tier_t *t, int shard, const void *compute, void *after, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_P16];
    switch (e->home) {
    case TIER_DEVICE:
        if (e->addr == compute) return 0; // built in place
        if (after) backend_copy_after(t->be, e->addr, compute, e->bytes, BACKEND_H2D, after);
        else backend_copy_h2d(t->be, e->addr, compute, e->bytes);
        stat_add(&t->stats.h2d_bytes, e->bytes);
        return 0;
    case TIER_HOST:
        if (e->addr != compute) memcpy(e->addr, compute, e->bytes);
        return 0;
    case TIER_NVME:
        fresh_drop(t); // no fetch may take an offered copy older than this one
        pthread_mutex_lock(&t->hc_mu);
        write_through(t, shard, compute);
        pthread_mutex_unlock(&t->hc_mu);
        return write_home(t, shard, compute, err, errlen);
    }
    return -EINVAL;
}

// An NVMe home: offered to the fetch worker from the moment it is published until the build
// buffer is taken again (the forward waiting for the shard needs the bytes, not their trip
// through the disk, and the last shards updated are fetched after their writes have landed);
// a write that fails withdraws the offer and fails the update, and so the step, as before.
int tier_params_store_publish(tier_t *t, int shard, const void *compute, void *after, char *err, size_t errlen) {
    if (t->table[shard][ST_P16].home != TIER_NVME) {
        int rc = tier_params_store(t, shard, compute, after, err, errlen);
        if (rc == 0) sched_update_publish(t->sched, shard);
        return rc;
    }
    pthread_mutex_lock(&t->hc_mu); // a cached copy is current before a fetch may use it
    write_through(t, shard, compute);
    t->fresh.shard = shard;
    t->fresh.buf = compute;
    pthread_mutex_unlock(&t->hc_mu);
    sched_update_publish(t->sched, shard);
    int rc = write_home(t, shard, compute, err, errlen);
    if (rc != 0) fresh_drop(t);
    return rc;
}
