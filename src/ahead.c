// ahead.c — see ahead.h. The buffer has one writer at a time: the thread from the start of a
// fill until it marks the item ready, then the caller until ahead_done; mu orders both hand-
// overs (the caller reads the buffer only after it saw `ready` under mu, and the thread
// fills again only after it saw `ready` cleared under mu).
#include "ahead.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "worker.h"

struct ahead {
    void *buf;
    int n;
    ahead_fill_fn fill;
    void *ctx;
    worker_t wk;      // not running: ahead_take fills in place; stop: the caller is done
    int next;         // the item the thread fills next (mu)
    int ready;        // the buffer holds item next - 1, for the caller (mu)
    int rc;           // the failed fill's -errno (mu); then nothing more is filled
    char msg[1024];   // its line
};

static void *ahead_main(void *arg) {
    ahead_t *a = arg;
    pthread_mutex_lock(&a->wk.mu);
    for (;;) {
        while (a->ready && !a->wk.stop) pthread_cond_wait(&a->wk.cv, &a->wk.mu);
        if (a->wk.stop || a->rc || a->next >= a->n) break;
        const int k = a->next;
        pthread_mutex_unlock(&a->wk.mu);
        char msg[sizeof a->msg] = "";
        int rc = a->fill(a->ctx, k, a->buf, msg, sizeof msg);
        pthread_mutex_lock(&a->wk.mu);
        if (rc) {
            a->rc = rc;
            snprintf(a->msg, sizeof a->msg, "%s", msg);
        }
        a->next = k + 1;
        a->ready = 1;
        pthread_cond_broadcast(&a->wk.cv);
    }
    pthread_mutex_unlock(&a->wk.mu);
    return NULL;
}

int ahead_init(ahead_t **out, size_t bytes, int n, ahead_fill_fn fill, void *ctx, char *err, size_t errlen) {
    *out = NULL;
    ahead_t *a = calloc(1, sizeof *a);
    if (!a || !(a->buf = malloc(bytes ? bytes : 1))) {
        free(a);
        snprintf(err, errlen, "out of memory for a read-ahead buffer of %zu bytes", bytes);
        return -ENOMEM;
    }
    a->n = n;
    a->fill = fill;
    a->ctx = ctx;
    worker_start(&a->wk, ahead_main, a);
    *out = a;
    return 0;
}

int ahead_take(ahead_t *a, int k, void **buf, char *err, size_t errlen) {
    *buf = a->buf;
    if (!a->wk.running) return a->fill(a->ctx, k, a->buf, err, errlen);
    pthread_mutex_lock(&a->wk.mu);
    while (!a->ready) pthread_cond_wait(&a->wk.cv, &a->wk.mu);
    const int rc = a->rc;
    if (rc) snprintf(err, errlen, "%s", a->msg);
    pthread_mutex_unlock(&a->wk.mu);
    return rc;
}

void ahead_done(ahead_t *a) {
    if (!a->wk.running) return;
    pthread_mutex_lock(&a->wk.mu);
    a->ready = 0;
    pthread_cond_broadcast(&a->wk.cv);
    pthread_mutex_unlock(&a->wk.mu);
}

void ahead_free(ahead_t *a) {
    if (!a) return;
    worker_stop(&a->wk);
    free(a->buf);
    free(a);
}
