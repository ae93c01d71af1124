// tier_grads.c — see tier.h, "gradients": the device buffer each backward visit accumulates
// into (the home itself on the device, else one of two visit slots), host homes' copies up
// and down, --grads nvme's writes and reads of each shard's extent, and Σ g² of each piece.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "tier_internal.h"
#include "kernels.h" // uses: sumsq_blocks (a GPU backend's host copies)
#include "trace.h"
#include "util.h"

// ---------------------------------------------------------------- gradients


// --grads nvme: the host copy of slot i's gradient: the slot itself, or its staging buffer.
static float *gnvme_host(const tier_t *t, int i) {
    return t->lay.device_is_host ? t->gvisit.buf[i] : t->buf[TB_GRAD_NVME][i];
}

// --trace: a gradient chunk's write as a span on the NVMe write track, named as its request,
// from its submission (run by the I/O thread before the ticket is done, so the slot's t0 is
// still this write's).
static void gnvme_traced(io_ticket_t *tk, void *arg) {
    const struct tier_gwrite *w = arg;
    trace_span(TRACK_NVME_WRITE, "write", tk->name, w->t0, trace_now_ms());
}

// a += Σ x² over n host floats (gradnorm_add_squares): on the CPU backend through its op
// table, so that a run's timing of its ops (bench train) sees the norm's pass; a GPU
// backend's op reads device memory, so its hosts' copies take the kernel itself.
static void squares(const tier_t *t, gradnorm_t *a, const float *x, size_t n) {
    gradnorm_add_squares_by(a, x, n, t->lay.device_is_host ? t->be->ops->sumsq_blocks : sumsq_blocks);
}

// Submits the write of slot i's gradient (its data is on the host) to its shard's chunks; a
// final one's Σ g² is taken on the way, from the very bytes written.
static int gnvme_submit(tier_t *t, int i, char *err, size_t errlen) {
    const int s = t->gw[i].shard;
    const float *h = gnvme_host(t, i);
    t->gw[i].queued = 0;
    if (t->gw[i].last) {
        gradnorm_zero(&t->gss[s]);
        squares(t, &t->gss[s], h, t->pn[s]);
    }
    t->gw[i].t0 = trace_now_ms();
    for (int c = 0; c < tier_nchunks(&t->lay, t->m, s); c++) {
        size_t lo, n;
        tier_chunk_range(&t->lay, t->m, s, c, &lo, &n);
        io_req_t r = {.op = IO_WRITE, .off = tier_chunk_off(t, s, c), .len = n * sizeof(float),
                      .buf = (void *)(h + (lo - t->plo[s])),
                      .name = t->label[s][ST_G]};
        if (trace_enabled()) {
            r.cb = gnvme_traced;
            r.cb_arg = &t->gw[i];
        }
        memset(&t->gw[i].tk[c], 0, sizeof t->gw[i].tk[c]);
        int rc = nvme_store_submit(t->nvme, &t->gw[i].tk[c], &r);
        if (rc != 0) {
            snprintf(err, errlen, "%s: %s", t->label[s][ST_G], strerror(-rc));
            return rc;
        }
        t->gw[i].ntk = c + 1;
    }
    return 0;
}

// Slot i's write is submitted: when its copy down is still queued (GPU), once it has landed.
static int gnvme_flush(tier_t *t, int i, char *err, size_t errlen) {
    if (!t->gw[i].queued) return 0;
    visit_wait_down(&t->gvisit, i);
    return gnvme_submit(t, i, err, errlen);
}

// Slot i's write is done (submitted first if need be): the slot and its staging are free
// again. Counts the bytes and keeps each chunk's CRC.
static int gnvme_wait(tier_t *t, int i, char *err, size_t errlen) {
    int rc = gnvme_flush(t, i, err, errlen);
    for (int k = 0; k < t->gw[i].ntk; k++) {
        io_ticket_t *tk = &t->gw[i].tk[k];
        int r = io_ticket_wait(tk);
        if (r != 0 && rc == 0) {
            io_ticket_message(tk, err, errlen);
            rc = r;
        }
        if (r == 0) {
            t->table[t->gw[i].shard][ST_G].crc[k] = tk->crc;
            stat_add(&t->stats.nvme_write_bytes, tk->len);
        }
    }
    t->gw[i].ntk = 0;
    t->gw[i].shard = -1;
    return rc;
}

// --update backward: whether shard's NVMe chunks lack a g extent (tier_layout: a shard visited
// once a step hands its final gradient to the update in its slot), saying so in err. Only a
// backward outside a training step, whose gradients no update takes, would want one.
static int no_extent(const tier_t *t, int shard, char *err, size_t errlen) {
    if (tier_o32_parts(&t->lay, shard) > 3) return 0;
    snprintf(err, errlen, "%s: no NVMe extent under --update backward, which hands a shard's final gradient to the "
             "update in the backward (a backward outside a training step needs --update after)", t->label[shard][ST_G]);
    return 1;
}

// A partial sum of an earlier micro-batch (horizontal --accum with --grads nvme), read back
// into slot i's host copy after every write in flight.
static int gnvme_read(tier_t *t, int shard, int i, char *err, size_t errlen) {
    if (no_extent(t, shard, err, errlen)) return -EINVAL;
    int rc = gnvme_wait(t, i ^ 1, err, errlen);
    float *h = gnvme_host(t, i);
    tier_entry_t *e = &t->table[shard][ST_G];
    for (int c = 0; rc == 0 && c < tier_nchunks(&t->lay, t->m, shard); c++) {
        size_t lo, n;
        tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
        rc = tier_nvme_io(t, IO_READ, tier_chunk_off(t, shard, c), n * sizeof(float), h + (lo - t->plo[shard]),
                          &e->crc[c], t->label[shard][ST_G], err, errlen);
    }
    return rc;
}

// --update backward: waits until the update job has finished with slot i's gradient (or the
// handover is closed).
static void slot_wait(tier_t *t, int i) {
    pthread_mutex_lock(&t->ho.mu);
    double t0 = now_ms();
    while (t->ho.held[i] && !t->ho.closed) pthread_cond_wait(&t->ho.cv, &t->ho.mu);
    t->stats.grad_slot_wait_ms += now_ms() - t0;
    pthread_mutex_unlock(&t->ho.mu);
}

// --update backward: shard's final gradient g (host memory: the CPU backend) goes to the
// update job, its Σ g² taken first; slot >= 0 stays the job's until tier_grads_done. Returns
// 1 when taken; 0 when no job takes it (a backward outside a training step): the visit ends as
// any other; -1 when the job stopped on a failure, which the step reports.
static int handover(tier_t *t, int shard, int slot, const float *g) {
    pthread_mutex_lock(&t->ho.mu);
    const int taken = !t->ho.closed && t->ho.tail < t->m->nshards ? 1 : t->ho.rc ? -1 : 0;
    if (taken > 0) {
        gradnorm_zero(&t->gss[shard]);
        squares(t, &t->gss[shard], g, t->pn[shard]);
        t->ghanded[shard] = 1;
        if (slot >= 0) t->ho.held[slot] = 1;
        t->ho.q[t->ho.tail++] = shard;
        pthread_cond_broadcast(&t->ho.cv);
    }
    pthread_mutex_unlock(&t->ho.mu);
    return taken;
}

void tier_grads_open(tier_t *t) {
    pthread_mutex_lock(&t->ho.mu);
    t->ho.head = t->ho.tail = 0;
    t->ho.held[0] = t->ho.held[1] = 0;
    t->ho.closed = t->ho.rc = 0;
    t->ho.err[0] = 0;
    pthread_mutex_unlock(&t->ho.mu);
    memset(t->ghanded, 0, (size_t)t->m->nshards * sizeof *t->ghanded);
}

int tier_grads_next_final(tier_t *t, char *err, size_t errlen) {
    pthread_mutex_lock(&t->ho.mu);
    while (t->ho.head == t->ho.tail && !t->ho.closed) pthread_cond_wait(&t->ho.cv, &t->ho.mu);
    int rc = t->ho.head < t->ho.tail ? t->ho.q[t->ho.head++] : t->ho.rc ? t->ho.rc : -ECANCELED;
    if (rc < 0) snprintf(err, errlen, "%s", t->ho.err[0] ? t->ho.err : "the backward handed over no more gradients");
    pthread_mutex_unlock(&t->ho.mu);
    return rc;
}

int tier_grads_peek_final(tier_t *t) {
    pthread_mutex_lock(&t->ho.mu);
    int s = t->ho.head < t->ho.tail ? t->ho.q[t->ho.head] : -1;
    pthread_mutex_unlock(&t->ho.mu);
    return s;
}

void tier_grads_done(tier_t *t, int shard) {
    if (!t->ghanded[shard] || t->table[shard][ST_G].home != TIER_NVME) return; // it holds no slot
    pthread_mutex_lock(&t->ho.mu);
    t->ho.held[t->gslot_of[shard]] = 0;
    pthread_cond_broadcast(&t->ho.cv);
    pthread_mutex_unlock(&t->ho.mu);
}

void tier_grads_close(tier_t *t, int rc, const char *why) {
    pthread_mutex_lock(&t->ho.mu);
    if (!t->ho.closed) {
        t->ho.closed = 1;
        t->ho.rc = rc;
        snprintf(t->ho.err, sizeof t->ho.err, "%s", why ? why : "");
    }
    t->ho.held[0] = t->ho.held[1] = 0;
    pthread_cond_broadcast(&t->ho.cv);
    pthread_mutex_unlock(&t->ho.mu);
}

// A host or NVMe home visits a slot (visit.h): the copy up waits for the slot's last copy down
// and for this shard's own last write-back, the ops wait for the copy up, the copy down for the
// ops; on a GPU the next shard's copy up thus runs during this shard's backward. A gradient the
// optimizer consumed is all zeros, on either home: its visit starts from a zeroed slot instead
// of a read (a copy up of a host home was a step's whole gradients over the link, for zeros).
float *tier_grads_acquire(tier_t *t, int shard, int last, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_G];
    t->glast[shard] = last;
    if (e->home == TIER_DEVICE) return e->addr;
    int i = t->gnext;
    t->gnext ^= 1;
    if (t->lay.upd_bwd) slot_wait(t, i);
    t->gslot_of[shard] = i;
    if (e->home == TIER_NVME) {
        if (gnvme_wait(t, i, err, errlen) != 0) return NULL; // the slot's (and its staging's) last write
        t->gw[i].last = last;
    }
    if (!e->dirty) { // consumed: zeros, whatever the home
        visit_open(&t->gvisit, i);
        backend_memset(t->be, t->gvisit.buf[i], 0, e->bytes);
    } else if (e->home == TIER_HOST) {
        visit_up(&t->gvisit, i, shard, e->addr, e->bytes);
    } else {
        if (gnvme_read(t, shard, i, err, errlen) != 0) return NULL;
        if (!t->lay.device_is_host) visit_up(&t->gvisit, i, shard, gnvme_host(t, i), e->bytes);
    }
    return t->gvisit.buf[i];
}

int tier_grads_release(tier_t *t, int shard, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_G];
    e->dirty = 1;
    const int i = e->home == TIER_DEVICE ? -1 : t->gslot_of[shard];
    if (e->home == TIER_HOST) visit_down(&t->gvisit, i, shard, e->addr, e->bytes); // the CPU's: at once
    // the update job reads the home, or (NVMe) the slot itself
    if (t->lay.upd_bwd && t->glast[shard]) {
        const int nv = e->home == TIER_NVME, h = handover(t, shard, nv ? i : -1, nv ? t->gvisit.buf[i] : e->addr);
        // once the job has failed (the step reports why), a gradient with no extent is dropped
        if (h > 0 || (h < 0 && nv && tier_o32_parts(&t->lay, shard) == 3)) return 0;
    }
    // The CPU backend takes a final gradient's Σ g² here, from the bytes the backward's last
    // products left in cache, not from memory after the backward (tier_grads_norm)
    if (t->gnormed && t->glast[shard] && e->home != TIER_NVME) {
        gradnorm_zero(&t->gss[shard]);
        squares(t, &t->gss[shard], e->home == TIER_DEVICE ? e->addr : t->gvisit.buf[i], t->pn[shard]);
        t->gnormed[shard] = 1;
    }
    if (e->home != TIER_NVME) return 0;
    if (no_extent(t, shard, err, errlen)) return -EINVAL; // a backward outside a training step
    t->gw[i].shard = shard;
    if (t->lay.device_is_host) return gnvme_submit(t, i, err, errlen); // the ops are done: write from the slot
    visit_down(&t->gvisit, i, shard, gnvme_host(t, i), e->bytes);
    t->gw[i].queued = 1;
    return gnvme_flush(t, i ^ 1, err, errlen); // the other slot's copy down, queued one visit ago
}

int tier_grads_finish(tier_t *t, char *err, size_t errlen) {
    int rc = 0;
    if (t->lay.home[ST_G] == TIER_HOST) visit_sync(&t->gvisit); // the host reads the homes ...
    if (t->lay.home[ST_G] == TIER_NVME)                          // ... or NVMe holds every gradient ...
        for (int i = 0; i < 2; i++) {
            char e2[512];
            int r = gnvme_wait(t, i, e2, sizeof e2);
            if (r != 0 && rc == 0) { rc = r; snprintf(err, errlen, "%s", e2); }
        }
    backend_event_record(t->be, t->step_ev); // ... and the update's device reads come after
    return rc;
}

int tier_grads_norm(tier_t *t, int shard, gradnorm_t *acc, char *err, size_t errlen) {
    const tier_entry_t *e = &t->table[shard][ST_G];
    // taken as the final gradient was written, handed over or released (the CPU backend)
    if (e->home == TIER_NVME || t->ghanded[shard] || (t->gnormed && t->gnormed[shard])) {
        gradnorm_add(acc, &t->gss[shard]);
        return 0;
    }
    if (e->home == TIER_HOST || t->lay.device_is_host) {
        squares(t, acc, e->addr, t->pn[shard]);
        return 0;
    }
    // a GPU's home: the device sums each norm block and sends the sums down through the
    // staging buffer (8 bytes for a block's 16 KiB), as many blocks at a time as it holds
    const size_t nb = t->lay.chunk_elems * sizeof(float) / sizeof(double);
    if (nb == 0) {
        snprintf(err, errlen, "gradients of %s: the staging buffer is below one block sum", t->m->shards[shard].name);
        return -E2BIG;
    }
    double *sums = (double *)t->buf[TB_GRAD_STAGING][0];
    const size_t step = nb * GRADNORM_BLOCK;
    for (size_t at = 0; at < t->pn[shard]; at += step) {
        size_t k = t->pn[shard] - at < step ? t->pn[shard] - at : step;
        t->be->ops->sumsq_blocks(sums, (const float *)e->addr + at, k);
        gradnorm_add_block_sums(acc, sums, (k + GRADNORM_BLOCK - 1) / GRADNORM_BLOCK);
    }
    return 0;
}

int tier_grads_zero_all(tier_t *t, char *err, size_t errlen) {
    int rc = tier_grads_finish(t, err, errlen);
    for (int s = 0; s < t->m->nshards && rc == 0; s++) tier_grads_consumed(t, s, 0);
    return rc;
}

int tier_grads_get(tier_t *t, int shard, const float **g, char *err, size_t errlen) {
    tier_entry_t *e = &t->table[shard][ST_G];
    if (e->home == TIER_NVME) { // read back whole into a slot's host copy (both are idle after the step)
        float *h = gnvme_host(t, 0);
        if (!e->dirty) memset(h, 0, e->bytes);
        else if (gnvme_read(t, shard, 0, err, errlen) != 0) return -EIO;
        *g = h;
        return 0;
    }
    if (e->home == TIER_DEVICE && !t->lay.device_is_host) {
        float *stage = t->buf[TB_GRAD_STAGING][0];
        size_t lo, n;
        tier_chunk_range(&t->lay, t->m, shard, 0, &lo, &n);
        if (n < t->pn[shard]) {
            snprintf(err, errlen, "gradients of %s: larger than the staging buffer", t->m->shards[shard].name);
            return -E2BIG;
        }
        backend_copy_d2h(t->be, stage, e->addr, e->bytes);
        *g = stage;
        return 0;
    }
    *g = e->addr;
    return 0;
}

const float *tier_grads_for_update(tier_t *t, int shard, int c, int sb) {
    tier_entry_t *e = &t->table[shard][ST_G];
    size_t lo, n;
    tier_chunk_range(&t->lay, t->m, shard, c, &lo, &n);
    if (e->home == TIER_NVME && t->ghanded[shard]) // in the slot the backward handed over
        return (const float *)gnvme_host(t, t->gslot_of[shard]) + (lo - t->plo[shard]);
    if (e->home == TIER_NVME) return t->buf[TB_OPTIM_STAGING][sb]; // read with the states, first in the chunk
    const float *g = (const float *)e->addr + (lo - t->plo[shard]);
    if (e->home == TIER_DEVICE && !t->lay.device_is_host) {
        // after the step's backward only, not the next step's forward queued meanwhile
        float *stage = t->buf[TB_GRAD_STAGING][0];
        backend_copy_after(t->be, stage, g, n * sizeof(float), BACKEND_D2H, t->step_ev);
        return stage;
    }
    return g;
}

int tier_grads_update_consumes(const tier_t *t, int shard) {
    const tier_kind_t home = t->table[shard][ST_G].home;
    return t->lay.ranks == 1 && (home == TIER_HOST || (home == TIER_DEVICE && t->lay.device_is_host));
}

void tier_grads_consumed(tier_t *t, int shard, int zeroed) {
    tier_entry_t *e = &t->table[shard][ST_G];
    if (!zeroed && e->home == TIER_DEVICE) backend_memset(t->be, e->addr, 0, e->bytes);
    else if (!zeroed && e->home == TIER_HOST) memset(e->addr, 0, e->bytes);
    e->dirty = 0; // NVMe: the next visit starts from zeros and overwrites the extent
    if (t->gss && !t->ghanded[shard]) gradnorm_zero(&t->gss[shard]); // (handed over: the step reads it after)
    if (t->gnormed) t->gnormed[shard] = 0;
}

const float *tier_grads_device(tier_t *t, int shard) {
    tier_entry_t *e = &t->table[shard][ST_G];
    if (e->home == TIER_DEVICE) return e->addr;
    float *slot = t->gvisit.buf[0]; // the host home's write-backs have landed (tier_grads_finish)
    backend_copy_h2d(t->be, slot, e->addr, e->bytes);
    stat_add(&t->stats.h2d_bytes, e->bytes);
    return slot;
}

