// held.h — private to kernels/cpu: a buffer an op grows to what it needs and then keeps, for
// the attention ops' (attention.c's BF16 ops' rows, attention_amx.c's packed K and V). One op
// holds it at a time, under its lock, from held_take to held_give; what it holds between ops
// is what kernels.h attention_held_bytes reports and attention_release frees; a run reserves
// it at its start (attention_reserve).
#pragma once
#include <pthread.h>
#include <stdlib.h>

typedef struct {
    pthread_mutex_t lock;
    void *buf;
    size_t cap; // bytes
} held_t;
#define HELD_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, 0}

// Locks h and returns its buffer, grown to `bytes` (a multiple of 64) when smaller; NULL: no
// memory (h unlocked, holding nothing).
static inline void *held_take(held_t *h, size_t bytes) {
    pthread_mutex_lock(&h->lock); // a default mutex: fails only on a corrupt one
    if (bytes > h->cap) {
        free(h->buf);
        h->cap = 0;
        h->buf = aligned_alloc(64, bytes);
        if (!h->buf) {
            pthread_mutex_unlock(&h->lock);
            return NULL;
        }
        h->cap = bytes;
    }
    return h->buf;
}
static inline void held_give(held_t *h) { pthread_mutex_unlock(&h->lock); }
// h grown to `bytes` now, not at an op's first call; 1: no memory (h holding nothing).
static inline int held_reserve(held_t *h, size_t bytes) {
    if (!held_take(h, bytes)) return 1;
    held_give(h);
    return 0;
}
static inline size_t held_bytes(held_t *h) {
    pthread_mutex_lock(&h->lock);
    const size_t n = h->cap;
    pthread_mutex_unlock(&h->lock);
    return n;
}
static inline void held_free(held_t *h) {
    pthread_mutex_lock(&h->lock);
    free(h->buf);
    h->buf = NULL;
    h->cap = 0;
    pthread_mutex_unlock(&h->lock);
}
