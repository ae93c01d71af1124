// hasher.c — see hasher.h. The ring: the caller fills buffer `put` and hands it over (full,
// with its length); the thread folds buffer `take` and gives it back. A buffer has one writer
// at a time: the caller until it is handed over, then the thread until it is given back, and
// mu orders each hand-over (the caller waits for a buffer to be given back before it fills it
// again). The hash itself is the thread's while it runs; it stores it under mu with each
// buffer given back, and hasher_value reads it under mu once nothing is left.
#include "hasher.h"
#include <stdlib.h>
#include <string.h>
#include "util.h" // uses: fnv1a64

static void *hasher_main(void *arg) {
    hasher_t *hs = arg;
    pthread_mutex_lock(&hs->wk.mu);
    uint64_t h = hs->h;
    for (;;) {
        while (!hs->full[hs->take] && !hs->wk.stop) pthread_cond_wait(&hs->wk.cv, &hs->wk.mu);
        if (!hs->full[hs->take]) break; // stopped with nothing left
        const int k = hs->take;
        const size_t n = hs->len[k];
        pthread_mutex_unlock(&hs->wk.mu);
        h = fnv1a64(h, hs->ring + (size_t)k * HASHER_BUF, n);
        pthread_mutex_lock(&hs->wk.mu);
        hs->h = h;
        hs->full[k] = 0;
        hs->take = (k + 1) % HASHER_BUFS;
        pthread_cond_broadcast(&hs->wk.cv);
    }
    pthread_mutex_unlock(&hs->wk.mu);
    return NULL;
}

void hasher_init(hasher_t *hs, uint64_t h) {
    memset(hs, 0, sizeof *hs);
    hs->h = h;
    if (!(hs->ring = malloc(HASHER_BUFS * HASHER_BUF))) return;
    if (!worker_start(&hs->wk, hasher_main, hs)) { // no thread: hashed in place
        free(hs->ring);
        hs->ring = NULL;
    }
}

// Hands the buffer being filled to the thread and waits for the next one to be free.
static void hand_over(hasher_t *hs) {
    pthread_mutex_lock(&hs->wk.mu);
    hs->len[hs->put] = hs->fill;
    hs->full[hs->put] = 1;
    pthread_cond_broadcast(&hs->wk.cv);
    hs->put = (hs->put + 1) % HASHER_BUFS;
    while (hs->full[hs->put]) pthread_cond_wait(&hs->wk.cv, &hs->wk.mu);
    pthread_mutex_unlock(&hs->wk.mu);
    hs->fill = 0;
}

void hasher_put(hasher_t *hs, const void *p, size_t n) {
    if (!hs->ring) {
        hs->h = fnv1a64(hs->h, p, n);
        return;
    }
    const unsigned char *b = p;
    while (n > 0) {
        size_t k = HASHER_BUF - hs->fill < n ? HASHER_BUF - hs->fill : n;
        memcpy(hs->ring + (size_t)hs->put * HASHER_BUF + hs->fill, b, k);
        hs->fill += k;
        b += k;
        n -= k;
        if (hs->fill == HASHER_BUF) hand_over(hs);
    }
}

uint64_t hasher_value(hasher_t *hs) {
    if (!hs->ring) return hs->h;
    if (hs->fill > 0) hand_over(hs);
    pthread_mutex_lock(&hs->wk.mu);
    for (int k = 0; k < HASHER_BUFS; k++)
        while (hs->full[k]) pthread_cond_wait(&hs->wk.cv, &hs->wk.mu);
    const uint64_t h = hs->h;
    pthread_mutex_unlock(&hs->wk.mu);
    return h;
}

void hasher_free(hasher_t *hs) {
    worker_stop(&hs->wk);
    free(hs->ring);
    hs->ring = NULL;
}
