// visit.c — see visit.h.
#include "visit.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

static void count(uint64_t *counter, uint64_t n) {
    if (counter) __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

int visit_init(visit_t *v, backend_t *be, void *buf0, void *buf1, int nitems, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    v->be = be;
    v->buf[0] = buf0;
    v->buf[1] = buf1;
    v->done_ev = calloc((size_t)(nitems > 0 ? nitems : 1), sizeof *v->done_ev);
    if (!v->done_ev) {
        snprintf(err, errlen, "out of memory for the visit events");
        return -ENOMEM;
    }
    v->nitems = nitems;
    void **single[] = {&v->up_ev[0], &v->up_ev[1], &v->free_ev[0], &v->free_ev[1], &v->used_ev[0], &v->used_ev[1],
                       &v->ops_ev};
    for (size_t k = 0; k < sizeof single / sizeof single[0]; k++) {
        int rc = backend_event_create(be, single[k], err, errlen);
        if (rc != 0) return rc;
    }
    for (int k = 0; k < nitems; k++) {
        int rc = backend_event_create(be, &v->done_ev[k], err, errlen);
        if (rc != 0) return rc;
    }
    return 0;
}

void visit_free(visit_t *v) {
    if (!v || !v->be) return;
    void *single[] = {v->up_ev[0], v->up_ev[1], v->free_ev[0], v->free_ev[1], v->used_ev[0], v->used_ev[1], v->ops_ev};
    for (size_t k = 0; k < sizeof single / sizeof single[0]; k++) backend_event_destroy(v->be, single[k]);
    for (int k = 0; v->done_ev && k < v->nitems; k++) backend_event_destroy(v->be, v->done_ev[k]);
    free(v->done_ev);
    memset(v, 0, sizeof *v);
}

void visit_up(visit_t *v, int i, int item, const void *h_src, size_t bytes) {
    double t0 = now_ms();
    backend_t *be = v->be;
    backend_stream_wait(be, BACKEND_STREAM_H2D, v->free_ev[i]);       // its last copy down has read it
    if (v->used_marked[i]) backend_stream_wait(be, BACKEND_STREAM_H2D, v->used_ev[i]); // the ops using it
    backend_stream_wait(be, BACKEND_STREAM_H2D, v->done_ev[item]);    // the item's host copy is written
    backend_copy_enqueue(be, v->buf[i], h_src, bytes, BACKEND_H2D);
    backend_stream_record(be, BACKEND_STREAM_H2D, v->up_ev[i]);
    backend_stream_wait(be, BACKEND_STREAM_COMPUTE, v->up_ev[i]);     // the ops after it see the data
    v->used_marked[i] = 0;
    if (v->copy_ms) *v->copy_ms += now_ms() - t0;
    count(v->h2d_bytes, bytes);
}

void visit_open(visit_t *v, int i) { backend_stream_wait(v->be, BACKEND_STREAM_COMPUTE, v->free_ev[i]); }

void visit_used(visit_t *v, int i) {
    backend_event_record(v->be, v->used_ev[i]);
    v->used_marked[i] = 1;
}

void visit_down(visit_t *v, int i, int item, void *h_dst, size_t bytes) {
    double t0 = now_ms();
    backend_t *be = v->be;
    backend_event_record(be, v->ops_ev); // the ops writing it are queued
    backend_stream_wait(be, BACKEND_STREAM_D2H, v->ops_ev);
    backend_copy_enqueue(be, h_dst, v->buf[i], bytes, BACKEND_D2H);
    backend_stream_record(be, BACKEND_STREAM_D2H, v->free_ev[i]);
    backend_stream_record(be, BACKEND_STREAM_D2H, v->done_ev[item]);
    if (v->copy_ms) *v->copy_ms += now_ms() - t0;
    count(v->d2h_bytes, bytes);
}

void visit_wait_down(visit_t *v, int i) { backend_event_sync(v->be, v->free_ev[i]); }

void visit_sync(visit_t *v) { backend_stream_sync(v->be, BACKEND_STREAM_D2H); }
