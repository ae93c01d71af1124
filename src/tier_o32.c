// tier_o32.c — see tier.h. The optimizer states' NVMe extents, their transfers through the
// staging buffers and the --optimizer-cache entries, their reads and writes while the optimizer
// is idle (tier_o32_get / tier_o32_put), and the compute copy rebuilt from the master.
// tier.c places and moves the parameters; tier_grads.c the gradients.
#include "tier.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gradnorm.h"
#include "trace.h"
#include "tier_internal.h"
#include "util.h"

// ---------------------------------------------------------------- NVMe extents

// The NVMe extent of chunk c of shard's (g,) master, m, v: every chunk before it is full.
uint64_t tier_chunk_off(const tier_t *t, int shard, int c) {
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    return t->table[shard][ST_O32].off +
           (uint64_t)(lo - t->plo[shard]) * (uint64_t)tier_o32_parts(&t->lay, shard) * sizeof(float);
}

// Bytes of g before the states in a chunk of n elements of shard: 0 where its NVMe chunks keep
// no gradient (tier_o32_parts).
static uint64_t gext_bytes(const tier_t *t, int shard, size_t n) {
    return (uint64_t)(tier_o32_parts(&t->lay, shard) - 3) * n * sizeof(float);
}

// ---------------------------------------------------------------- optimizer states

// Floats of the staging layout of chunk c: (g,) master, m, v, each n elements.
static float *stage_part(tier_t *t, int sb, size_t n, int part) {
    return (float *)t->buf[TB_OPTIM_STAGING][sb] + (size_t)(t->lay.o32_parts - 3 + part) * n;
}

void tier_o32_views(tier_t *t, int shard, int c, int sb, float **master, float **m, float **v) {
    tier_entry_t *e = &t->table[shard][ST_O32];
    size_t lo, n, total = t->pn[shard];
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    lo -= t->plo[shard]; // the home holds the piece
    if (e->home == TIER_NVME) {
        *master = stage_part(t, sb, n, 0);
        *m = stage_part(t, sb, n, 1);
        *v = stage_part(t, sb, n, 2);
        return;
    }
    float *base = e->addr;
    *master = base + lo;
    *m = base + total + lo;
    *v = base + 2 * total + lo;
}

static void xfer_done(io_ticket_t *tk, void *arg) {
    const tier_xfer_t *x = arg;
    (void)tk;
    trace_span(x->op == IO_READ ? TRACK_NVME_READ : TRACK_NVME_WRITE, x->op == IO_READ ? "read" : "write",
               x->label, x->t0, trace_now_ms());
}

// A read takes the chunk's gradients with its states when they live on NVMe: one request of
// g, master, m, v — or, with --io-verify, two, since g and the states were written apart and
// each write's CRC covers its own extent. A write puts back master, m, v only.
// Queues nreq requests of chunk c of shard as transfer x.
static int xfer_submit(tier_t *t, tier_xfer_t *x, io_op_t op, int shard, int c, io_req_t *r, int nreq, char *err,
                       size_t errlen) {
    memset(x, 0, sizeof *x);
    x->op = op;
    x->shard = shard;
    x->chunk = c;
    x->label = t->m->shards[shard].name;
    x->t0 = trace_now_ms();
    for (int k = 0; k < nreq; k++) {
        if (trace_enabled()) {
            r[k].cb = xfer_done;
            r[k].cb_arg = x;
        }
        int rc = nvme_store_submit(t->nvme, &x->tk[k], &r[k]);
        if (rc != 0) {
            snprintf(err, errlen, "%s: %s", r[k].name, strerror(-rc));
            return rc;
        }
        x->n = k + 1;
    }
    return 0;
}

static int o32_submit(tier_t *t, tier_xfer_t *x, io_op_t op, int shard, int c, int sb, int lazy, char *err,
                      size_t errlen) {
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    const uint64_t base = tier_chunk_off(t, shard, c), o32 = 3 * n * sizeof(float);
    const uint64_t gext = gext_bytes(t, shard, n);
    const uint64_t g = t->lay.upd_bwd ? 0 : gext; // --update backward: the job has it in a slot
    float *stage = t->buf[TB_OPTIM_STAGING][sb];
    io_req_t r[2] = {{.op = op, .off = base + gext, .len = o32, .buf = stage_part(t, sb, n, 0),
                      .name = t->label[shard][ST_O32], .crc = op == IO_READ ? t->table[shard][ST_O32].crc[c] : 0}};
    int nreq = 1;
    if (op == IO_READ && g && !t->cfg->io_verify) { // g and the states in one extent
        r[0].off = base;
        r[0].len = g + o32;
        r[0].buf = stage;
    } else if (op == IO_READ && g) { // g first, with its own CRC
        r[1] = r[0];
        r[0] = (io_req_t){.op = op, .off = base, .len = g, .buf = stage, .name = t->label[shard][ST_G],
                          .crc = t->table[shard][ST_G].crc[c]};
        nreq = 2;
    }
    for (int k = 0; k < nreq; k++) r[k].lazy = lazy;
    return xfer_submit(t, x, op, shard, c, r, nreq, err, errlen);
}

int tier_o32_submit(tier_t *t, tier_xfer_t *x, io_op_t op, int shard, int c, int sb, char *err, size_t errlen) {
    return o32_submit(t, x, op, shard, c, sb, 0, err, errlen);
}

int tier_o32_read_ahead(tier_t *t, tier_xfer_t *x, int shard, int c, int sb, char *err, size_t errlen) {
    return o32_submit(t, x, IO_READ, shard, c, sb, 1, err, errlen);
}

int tier_o32_ncache(const tier_t *t) { return t->lay.nocache; }

void tier_o32_cache_views(tier_t *t, int k, size_t n, float **master, float **m, float **v) {
    float *base = t->buf[TB_OPTIM_CACHE][k];
    *master = base;
    *m = base + n;
    *v = base + 2 * n;
}

tier_xfer_t *tier_o32_reads(tier_t *t) { return t->o32_rd; }

int tier_o32_take_read(tier_t *t, int sb, int shard, int c) {
    const int mine = shard >= 0 && t->o32_rd_shard[sb] == shard && t->o32_rd_chunk[sb] == c;
    if (!mine && t->o32_rd[sb].n) { // another chunk's (not how updates run): its buffer is the caller's now
        char e[256];
        (void)tier_o32_finish(t, &t->o32_rd[sb], e, sizeof e); // unused: a failure shows where it is read again
    }
    t->o32_rd_shard[sb] = -1;
    return mine;
}

void tier_o32_set_read(tier_t *t, int sb, int shard, int c) {
    t->o32_rd_shard[sb] = shard;
    t->o32_rd_chunk[sb] = c;
}

// Waits for transfer x, whatever rc says, and returns rc or, where rc is 0, x's result: the
// first failure's line stays in err.
static int finish_keeping(tier_t *t, tier_xfer_t *x, int rc, char *err, size_t errlen) {
    char e[512];
    int r = tier_o32_finish(t, x, e, sizeof e);
    if (r == 0 || rc != 0) return rc;
    snprintf(err, errlen, "%s", e);
    return r;
}

int tier_o32_drop_reads(tier_t *t, char *err, size_t errlen) {
    int rc = 0;
    for (int sb = 0; sb < TIER_OPT_STAGING; sb++) {
        if (t->o32_rd_shard[sb] >= 0) rc = finish_keeping(t, &t->o32_rd[sb], rc, err, errlen);
        t->o32_rd_shard[sb] = -1;
    }
    return rc;
}

tier_xfer_t *tier_o32_cache_xfer(tier_t *t, int k) { return &t->ocache_x[k]; }
int tier_o32_cache_valid(const tier_t *t) { return t->ocache_valid; }
void tier_o32_cache_set_valid(tier_t *t, int valid) { t->ocache_valid = valid; }

// master, m, v are one extent after the chunk's g, written (and CRC'd) together
int tier_o32_cache_fill(tier_t *t, tier_xfer_t *x, int shard, int c, int k, char *err, size_t errlen) {
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    io_req_t r = {.op = IO_READ, .off = tier_chunk_off(t, shard, c) + gext_bytes(t, shard, n),
                  .len = 3 * n * sizeof(float), .buf = t->buf[TB_OPTIM_CACHE][k], .name = t->label[shard][ST_O32],
                  .crc = t->table[shard][ST_O32].crc[c]};
    return xfer_submit(t, x, IO_READ, shard, c, &r, 1, err, errlen);
}

int tier_grads_submit(tier_t *t, tier_xfer_t *x, int shard, int c, int sb, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    if (t->lay.o32_parts == 3 || t->lay.upd_bwd) return 0; // the gradients are in a home, or handed over
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    io_req_t r = {.op = IO_READ, .off = tier_chunk_off(t, shard, c), .len = n * sizeof(float),
                  .buf = t->buf[TB_OPTIM_STAGING][sb], .name = t->label[shard][ST_G],
                  .crc = t->table[shard][ST_G].crc[c]};
    return xfer_submit(t, x, IO_READ, shard, c, &r, 1, err, errlen);
}

int tier_o32_landed(const tier_xfer_t *x) {
    for (int k = 0; k < x->n; k++)
        if (!io_ticket_poll(&x->tk[k])) return 0;
    return 1;
}

int tier_o32_finish(tier_t *t, tier_xfer_t *x, char *err, size_t errlen) {
    int rc = 0;
    for (int k = 0; k < x->n; k++) {
        double t0 = now_ms();
        int r = io_ticket_wait(&x->tk[k]);
        t->stats.opt_nvme_wait_ms += now_ms() - t0;
        if (r != 0) {
            if (rc == 0) io_ticket_message(&x->tk[k], err, errlen);
            if (rc == 0) rc = r;
            continue;
        }
        if (x->op == IO_WRITE) {
            t->table[x->shard][ST_O32].crc[x->chunk] = x->tk[k].crc;
            stat_add(&t->stats.nvme_write_bytes, x->tk[k].len);
        } else {
            stat_add(&t->stats.nvme_read_bytes, x->tk[k].len);
        }
    }
    x->n = 0;
    return rc;
}

// The --optimizer-cache entry that holds chunk c of shard's states while the entries are valid
// (the update's k-th chunk, counted as the update counts them), or -1: NVMe holds them.
static int cache_entry(const tier_t *t, int shard, int c) {
    if (!t->ocache_valid) return -1;
    const int k = tier_chunk_number(&t->lay, t->m, shard, c);
    return k < t->lay.nocache ? k : -1;
}

// Where chunk c of shard's master, m, v are read into: the host home, or staging buffer sb (a
// device home has only buffer 0).
static void got_views(tier_t *t, int shard, int c, int sb, float *dst[3]) {
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    const int home = t->table[shard][ST_O32].home;
    if (home == TIER_HOST) tier_o32_views(t, shard, c, 0, &dst[0], &dst[1], &dst[2]);
    else
        for (int k = 0; k < 3; k++) dst[k] = stage_part(t, home == TIER_NVME ? sb : 0, n, k);
}

// The read of `parts` of chunk c of shard from NVMe into staging buffer sb: the states from the
// first to the last of them (0 master, 1 m, 2 v) as one request; all three with --io-verify,
// whose CRC covers the chunk's whole extent.
static io_req_t span_read(tier_t *t, int shard, int c, int parts, int sb) {
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    int k0 = 0, k1 = 2;
    if (!t->cfg->io_verify) {
        while (!(parts & (1 << k0))) k0++;
        while (!(parts & (1 << k1))) k1--;
    }
    return (io_req_t){.op = IO_READ,
                      .off = tier_chunk_off(t, shard, c) + gext_bytes(t, shard, n) + (uint64_t)k0 * n * sizeof(float),
                      .len = (uint64_t)(k1 - k0 + 1) * n * sizeof(float), .buf = stage_part(t, sb, n, k0),
                      .name = t->label[shard][ST_O32], .crc = t->table[shard][ST_O32].crc[c]};
}

// tier_o32_get into staging buffer sb.
static int o32_get(tier_t *t, int shard, int c, int parts, int fill_zero, int sb, float **master, float **m,
                   float **v, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_O32];
    int rc = tier_o32_drop_reads(t, err, errlen); // staging buffer sb is this call's (a failed read: the disk's error)
    if (rc != 0) return rc;
    size_t lo, n, total = t->pn[shard];
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    lo -= t->plo[shard];
    float *dst[3];
    got_views(t, shard, c, sb, dst);
    *master = dst[0];
    *m = dst[1];
    *v = dst[2];
    if (fill_zero) {
        for (int k = 0; k < 3; k++)
            if (parts & (1 << k)) memset(dst[k], 0, n * sizeof(float));
        return 0;
    }
    if (e->home == TIER_DEVICE) {
        for (int k = 0; k < 3; k++)
            if (parts & (1 << k)) backend_copy_d2h(t->be, dst[k], (float *)e->addr + k * total + lo, n * sizeof(float));
    } else if (e->home == TIER_NVME) {
        const int ce = cache_entry(t, shard, c); // a cached chunk's states are newer than NVMe's
        if (ce >= 0) {
            float *src[3];
            tier_o32_cache_views(t, ce, n, &src[0], &src[1], &src[2]);
            for (int k = 0; k < 3; k++)
                if (parts & (1 << k)) memcpy(dst[k], src[k], n * sizeof(float));
            return 0;
        }
        if (!(parts & TIER_O32)) return 0;
        const io_req_t r = span_read(t, shard, c, parts, sb);
        return tier_nvme_io(t, IO_READ, r.off, r.len, r.buf, &e->crc[c], r.name, err, errlen);
    }
    return 0;
}

int tier_o32_get(tier_t *t, int shard, int c, int parts, int fill_zero, float **master, float **m, float **v,
                 char *err, size_t errlen) {
    return o32_get(t, shard, c, parts, fill_zero, 0, master, m, v, err, errlen);
}

int tier_o32_put(tier_t *t, int shard, int c, int parts, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_O32];
    int rc = tier_o32_drop_reads(t, err, errlen); // a read queued for the next update has the old states
    if (rc != 0) return rc;
    size_t lo, n, total = t->pn[shard];
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    lo -= t->plo[shard];
    const int ce = e->home == TIER_NVME ? cache_entry(t, shard, c) : -1;
    if (ce >= 0) { // the entry, the chunk's home, takes the new states (NVMe's copy below too); the
                   // other entries stay valid: they are newer than NVMe
        float *dst[3];
        tier_o32_cache_views(t, ce, n, &dst[0], &dst[1], &dst[2]);
        for (int k = 0; k < 3; k++) memcpy(dst[k], stage_part(t, 0, n, k), n * sizeof(float));
    }
    if (e->home == TIER_DEVICE) {
        for (int k = 0; k < 3; k++)
            if (parts & (1 << k))
                backend_copy_h2d(t->be, (float *)e->addr + k * total + lo, stage_part(t, 0, n, k), n * sizeof(float));
    } else if (e->home == TIER_NVME) {
        uint64_t off = tier_chunk_off(t, shard, c) + gext_bytes(t, shard, n);
        return tier_nvme_io(t, IO_WRITE, off, 3 * n * sizeof(float), stage_part(t, 0, n, 0), &e->crc[c],
                            t->label[shard][ST_O32], err, errlen);
    }
    return 0;
}

static int params_from(tier_t *t, int shard, int c, const float *master, char *err, size_t errlen);

int tier_params_from_master(tier_t *t, int shard, int c, char *err, size_t errlen) {
    float *got[3];
    got_views(t, shard, c, 0, got);
    return params_from(t, shard, c, got[0], err, errlen);
}

// The compute copy's chunk c of shard from the given master.
static int params_from(tier_t *t, int shard, int c, const float *master, char *err, size_t errlen) {
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    tier_params_invalidate(t); // slots may hold the old weights
    void *pc = tier_params_build(t, shard);
    lo -= t->plo[shard]; // the build buffer holds the piece
    if (t->lay.pbytes == 2) bf16_from_f32_n((uint16_t *)pc + lo, master, n);
    else memcpy((float *)pc + lo, master, n * sizeof(float));
    if (c + 1 < tier_nchunks(&t->lay, t->m, shard)) return 0;
    return tier_params_store(t, shard, pc, NULL, err, errlen);
}

// ---------------------------------------------------------------- queued: the loads' writes, the save's reads

// Whether chunk c of shard goes through the queued transfers (tier_o32_store's writes,
// tier_o32_fetch's reads): an NVMe home that no cache entry stands in for.
static int store_queued(const tier_t *t, int shard, int c) {
    return t->table[shard][ST_O32].home == TIER_NVME && cache_entry(t, shard, c) < 0;
}

// Whether sb names a staging buffer the queued transfers take turns in; else the line, for who.
static int queue_buffer(int sb, const char *who, char *err, size_t errlen) {
    if (sb == 0 || sb == 1) return 1;
    snprintf(err, errlen, "%s: staging buffer %d (accepted: 0, 1)", who, sb);
    return 0;
}

// Staging buffer sb for the caller: the next update's reads ahead (in the staging buffers)
// dropped, and the transfer sb had queued finished.
static int take_buffer(tier_t *t, int sb, char *err, size_t errlen) {
    int rc = tier_o32_drop_reads(t, err, errlen);
    return rc ? rc : tier_o32_finish(t, &t->o32_q[sb], err, errlen);
}

int tier_o32_flush(tier_t *t, int rc, char *err, size_t errlen) {
    for (int sb = 0; sb < 2; sb++) rc = finish_keeping(t, &t->o32_q[sb], rc, err, errlen);
    return rc;
}

int tier_o32_stage(tier_t *t, int shard, int c, int sb, float **master, float **m, float **v, char *err,
                   size_t errlen) {
    if (!queue_buffer(sb, "tier_o32_stage", err, errlen)) return -EINVAL;
    if (!store_queued(t, shard, c)) {
        int rc = tier_o32_flush(t, 0, err, errlen); // staging buffer 0 may be a queued write's
        return rc ? rc : tier_o32_get(t, shard, c, TIER_O32, 1, master, m, v, err, errlen);
    }
    int rc = take_buffer(t, sb, err, errlen);
    if (rc != 0) return rc;
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    float *dst[3];
    for (int k = 0; k < 3; k++) memset(dst[k] = stage_part(t, sb, n, k), 0, n * sizeof(float));
    *master = dst[0];
    *m = dst[1];
    *v = dst[2];
    return 0;
}

int tier_o32_store(tier_t *t, int shard, int c, int sb, char *err, size_t errlen) {
    if (!queue_buffer(sb, "tier_o32_store", err, errlen)) return -EINVAL;
    if (!store_queued(t, shard, c)) {
        int rc = tier_o32_put(t, shard, c, TIER_O32, err, errlen);
        return rc ? rc : tier_params_from_master(t, shard, c, err, errlen);
    }
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    int rc = params_from(t, shard, c, stage_part(t, sb, n, 0), err, errlen); // reads the buffer only
    return rc ? rc : tier_o32_submit(t, &t->o32_q[sb], IO_WRITE, shard, c, sb, err, errlen);
}

int tier_o32_fetch(tier_t *t, int shard, int c, int parts, int sb, char *err, size_t errlen) {
    if (!queue_buffer(sb, "tier_o32_fetch", err, errlen)) return -EINVAL;
    int rc = take_buffer(t, sb, err, errlen);
    if (rc != 0 || !store_queued(t, shard, c) || !(parts & TIER_O32)) return rc; // else: read at tier_o32_fetched
    io_req_t r = span_read(t, shard, c, parts, sb);
    return xfer_submit(t, &t->o32_q[sb], IO_READ, shard, c, &r, 1, err, errlen);
}

int tier_o32_fetched(tier_t *t, int shard, int c, int parts, int sb, float **master, float **m, float **v, char *err,
                     size_t errlen) {
    if (!queue_buffer(sb, "tier_o32_fetched", err, errlen)) return -EINVAL;
    tier_xfer_t *x = &t->o32_q[sb];
    const int mine = x->n && x->op == IO_READ && x->shard == shard && x->chunk == c;
    int rc = tier_o32_finish(t, x, err, errlen);
    if (rc != 0 || !mine) // a chunk not queued (not an NVMe home, a cache entry's, or not fetched) is read here
        return rc ? rc : o32_get(t, shard, c, parts, 0, sb, master, m, v, err, errlen);
    float *dst[3];
    got_views(t, shard, c, sb, dst);
    *master = dst[0];
    *m = dst[1];
    *v = dst[2];
    return 0;
}
