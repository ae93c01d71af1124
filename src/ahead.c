// ahead.c — see ahead.h. Item k lives in buffer k % AHEAD_BUFS, which has one set of writers
// at a time: the lanes from the start of item k's fills until the last of them is done, then
// the caller until ahead_done; mu orders both hand-overs (the caller reads the buffer only
// after it saw every lane done with k under mu, and a lane fills item k + AHEAD_BUFS into it
// only after it saw `released` pass k under mu).
#include "ahead.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "worker.h"

typedef struct {
    ahead_t *a;
    int id;
    int rc, rc_at;  // its failed fill's -errno and item (mu)
    char msg[1024]; // and line
} lane_t;

struct ahead {
    void *buf[AHEAD_BUFS];
    int n, lanes;
    ahead_fill_fn fill;
    void *ctx;
    worker_t wk;    // not running: ahead_take fills in place; stop: the caller is done
    lane_t lane[WORKER_MAX];
    int released;   // items the caller is done with (mu): the lanes fill items below released + AHEAD_BUFS
    int filled[AHEAD_BUFS]; // lanes done with the item in each buffer (mu)
    int failed_at;  // the item a fill failed at, -1 none (mu): no later item is filled
};

static void *lane_main(void *arg) {
    lane_t *l = arg;
    ahead_t *a = l->a;
    pthread_mutex_lock(&a->wk.mu);
    for (int k = 0;; k++) { // the item this lane fills next
        while (!a->wk.stop && k >= a->released + AHEAD_BUFS) pthread_cond_wait(&a->wk.cv, &a->wk.mu);
        if (a->wk.stop || k >= a->n || (a->failed_at >= 0 && k > a->failed_at)) break;
        pthread_mutex_unlock(&a->wk.mu);
        char msg[sizeof l->msg] = "";
        int rc = a->fill(a->ctx, l->id, k, a->buf[k % AHEAD_BUFS], msg, sizeof msg);
        pthread_mutex_lock(&a->wk.mu);
        if (rc && !l->rc) {
            l->rc = rc;
            l->rc_at = k;
            snprintf(l->msg, sizeof l->msg, "%s", msg);
            if (a->failed_at < 0 || k < a->failed_at) a->failed_at = k;
        }
        a->filled[k % AHEAD_BUFS]++;
        pthread_cond_broadcast(&a->wk.cv);
    }
    pthread_mutex_unlock(&a->wk.mu);
    return NULL;
}

int ahead_init(ahead_t **out, size_t bytes, int lanes, int n, ahead_fill_fn fill, void *ctx, char *err,
               size_t errlen) {
    *out = NULL;
    if (lanes < 1 || lanes > WORKER_MAX) {
        snprintf(err, errlen, "read-ahead: %d lanes (accepted: 1..%d)", lanes, WORKER_MAX);
        return -EINVAL;
    }
    ahead_t *a = calloc(1, sizeof *a);
    for (int b = 0; a && b < AHEAD_BUFS; b++)
        if (!(a->buf[b] = malloc(bytes ? bytes : 1))) {
            ahead_free(a);
            a = NULL;
        }
    if (!a) {
        snprintf(err, errlen, "out of memory for %d read-ahead buffers of %zu bytes", AHEAD_BUFS, bytes);
        return -ENOMEM;
    }
    a->n = n;
    a->lanes = lanes;
    a->fill = fill;
    a->ctx = ctx;
    a->failed_at = -1;
    void *args[WORKER_MAX];
    for (int i = 0; i < lanes; i++) {
        a->lane[i] = (lane_t){.a = a, .id = i};
        args[i] = &a->lane[i];
    }
    worker_start_n(&a->wk, lanes, lane_main, args);
    *out = a;
    return 0;
}

int ahead_take(ahead_t *a, int k, void **buf, char *err, size_t errlen) {
    *buf = a->buf[k % AHEAD_BUFS];
    if (!a->wk.running) { // in place, lane after lane
        for (int i = 0; i < a->lanes; i++) {
            int rc = a->fill(a->ctx, i, k, *buf, err, errlen);
            if (rc) return rc;
        }
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&a->wk.mu);
    while (a->filled[k % AHEAD_BUFS] < a->lanes) pthread_cond_wait(&a->wk.cv, &a->wk.mu);
    if (k == a->failed_at) // the first lane's failure: as filled in place
        for (int i = 0; i < a->lanes && !rc; i++)
            if (a->lane[i].rc_at == k && (rc = a->lane[i].rc)) snprintf(err, errlen, "%s", a->lane[i].msg);
    pthread_mutex_unlock(&a->wk.mu);
    return rc;
}

void ahead_done(ahead_t *a) {
    if (!a->wk.running) return;
    pthread_mutex_lock(&a->wk.mu);
    a->filled[a->released % AHEAD_BUFS] = 0;
    a->released++;
    pthread_cond_broadcast(&a->wk.cv);
    pthread_mutex_unlock(&a->wk.mu);
}

void ahead_free(ahead_t *a) {
    if (!a) return;
    worker_stop(&a->wk);
    for (int b = 0; b < AHEAD_BUFS; b++) free(a->buf[b]);
    free(a);
}
