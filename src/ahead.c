// ahead.c — see ahead.h. The buffer has one writer at a time: the thread from the start of a
// fill until it marks the item ready, then the caller until ahead_done; mu orders both hand-
// overs (the caller reads the buffer only after it saw `ready` under mu, and the thread
// fills again only after it saw `ready` cleared under mu).
#include "ahead.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct ahead {
    void *buf;
    int n;
    ahead_fill_fn fill;
    void *ctx;
    int threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int next;         // the item the thread fills next (mu)
    int ready;        // the buffer holds item next - 1, for the caller (mu)
    int stop;         // the caller is done: fill nothing more (mu)
    int rc;           // the failed fill's -errno (mu); then nothing more is filled
    char msg[1024];   // its line
};

static void *ahead_main(void *arg) {
    ahead_t *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->ready && !a->stop) pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop || a->rc || a->next >= a->n) break;
        const int k = a->next;
        pthread_mutex_unlock(&a->mu);
        char msg[sizeof a->msg] = "";
        int rc = a->fill(a->ctx, k, a->buf, msg, sizeof msg);
        pthread_mutex_lock(&a->mu);
        if (rc) {
            a->rc = rc;
            snprintf(a->msg, sizeof a->msg, "%s", msg);
        }
        a->next = k + 1;
        a->ready = 1;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
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
    if (pthread_mutex_init(&a->mu, NULL) == 0) {
        if (pthread_cond_init(&a->cv, NULL) == 0) {
            a->threaded = pthread_create(&a->thread, NULL, ahead_main, a) == 0;
            if (!a->threaded) pthread_cond_destroy(&a->cv);
        }
        if (!a->threaded) pthread_mutex_destroy(&a->mu);
    }
    *out = a;
    return 0;
}

int ahead_take(ahead_t *a, int k, void **buf, char *err, size_t errlen) {
    *buf = a->buf;
    if (!a->threaded) return a->fill(a->ctx, k, a->buf, err, errlen);
    pthread_mutex_lock(&a->mu);
    while (!a->ready) pthread_cond_wait(&a->cv, &a->mu);
    const int rc = a->rc;
    if (rc) snprintf(err, errlen, "%s", a->msg);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void ahead_done(ahead_t *a) {
    if (!a->threaded) return;
    pthread_mutex_lock(&a->mu);
    a->ready = 0;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void ahead_free(ahead_t *a) {
    if (!a) return;
    if (a->threaded) {
        pthread_mutex_lock(&a->mu);
        a->stop = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->thread, NULL);
        pthread_cond_destroy(&a->cv);
        pthread_mutex_destroy(&a->mu);
    }
    free(a->buf);
    free(a);
}
