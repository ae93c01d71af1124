// scheduler.c — see scheduler.h.
//
// Concurrency: one mutex guards every slot's state, the task queue and the stats; one
// condition variable `changed` is broadcast whenever a slot's state changes or a task is
// queued. The worker takes the oldest queued slot, copies without the lock (the slot is
// FETCHING: nobody else writes it, and the compute thread does not read it until READY),
// then publishes READY/FAILED under the lock. The compute thread only reads a slot once it
// is READY and pinned, and a pinned or FETCHING slot is never chosen for eviction, so a
// slot's memory has exactly one writer at a time.
#include "scheduler.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

typedef enum { SLOT_EMPTY = 0, SLOT_QUEUED, SLOT_FETCHING, SLOT_READY, SLOT_FAILED } slot_state_t;

typedef struct {
    void *buf;
    int shard;           // -1 when empty
    slot_state_t state;
    int pins;
    int pos;             // the use position its fetch serves
    char err[256];
} slot_t;

struct sched {
    int nshards, nslots, prefetch;
    slot_t *slots;
    int *where;          // (nshards) slot holding the shard, or -1
    int *uses, nuses, cursor;
    int *queue, qhead, qtail; // ring of slot indices waiting for the worker (capacity nslots)
    sched_fetch_fn fetch;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    pthread_t worker;
    int stop, worker_started;
    sched_stats_t stats;
};

// ---------------------------------------------------------------- worker

static void *worker_main(void *arg) {
    sched_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->qhead == s->qtail) pthread_cond_wait(&s->changed, &s->mu);
        if (s->qhead == s->qtail) break; // stop, and nothing left to do
        int i = s->queue[s->qhead % s->nslots];
        s->qhead++;
        slot_t *sl = &s->slots[i];
        sl->state = SLOT_FETCHING;
        int shard = sl->shard, pos = sl->pos;
        pthread_mutex_unlock(&s->mu);
        char err[256] = "";
        int rc = s->fetch(s->ctx, shard, pos, sl->buf, err, sizeof err);
        pthread_mutex_lock(&s->mu);
        if (rc == 0) {
            sl->state = SLOT_READY;
        } else {
            sl->state = SLOT_FAILED;
            snprintf(sl->err, sizeof sl->err, "%s", err[0] ? err : strerror(-rc));
        }
        s->stats.fetches++;
        pthread_cond_broadcast(&s->changed);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// ---------------------------------------------------------------- init / free

int sched_init(sched_t **out, int nshards, int nslots, void *const *slots, int prefetch,
               sched_fetch_fn fetch, void *ctx, char *err, size_t errlen) {
    *out = NULL;
    sched_t *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->nshards = nshards;
    s->nslots = nslots;
    s->prefetch = prefetch;
    s->fetch = fetch;
    s->ctx = ctx;
    s->slots = calloc((size_t)nslots, sizeof *s->slots);
    s->where = malloc((size_t)nshards * sizeof *s->where);
    s->queue = calloc((size_t)nslots, sizeof *s->queue);
    if (!s->slots || !s->where || !s->queue) goto oom;
    for (int i = 0; i < nslots; i++) { s->slots[i].buf = slots[i]; s->slots[i].shard = -1; }
    for (int i = 0; i < nshards; i++) s->where[i] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    int rc = pthread_create(&s->worker, NULL, worker_main, s);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the copy worker: %s", strerror(rc));
        sched_free(s);
        return -rc;
    }
    s->worker_started = 1;
    *out = s;
    return 0;
oom:
    snprintf(err, errlen, "out of memory for the scheduler");
    sched_free(s);
    return -ENOMEM;
}

void sched_free(sched_t *s) {
    if (!s) return;
    if (s->worker_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->worker, NULL);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->changed);
    }
    free(s->slots);
    free(s->where);
    free(s->queue);
    free(s->uses);
    free(s);
}

// ---------------------------------------------------------------- planning (lock held)

// Position of shard's first use at or after `from`, or INT32_MAX when it has none.
static int next_use(const sched_t *s, int shard, int from) {
    for (int k = from; k < s->nuses; k++)
        if (s->uses[k] == shard) return k;
    return INT32_MAX;
}

// A slot for a fetch needed at position `need`: an empty one, else the unpinned READY (or
// FAILED) slot whose shard is next used farthest away — but, unless `force`, only if that is
// later than `need` (Belady: never evict something needed sooner than what comes in).
// -1 when none qualifies (with force: every slot is pinned or in flight).
static int pick_slot(sched_t *s, int need, int from, int force) {
    int best = -1, best_next = -1;
    for (int i = 0; i < s->nslots; i++) {
        slot_t *sl = &s->slots[i];
        if (sl->state == SLOT_EMPTY) return i;
        if (sl->pins > 0 || (sl->state != SLOT_READY && sl->state != SLOT_FAILED)) continue;
        int nu = next_use(s, sl->shard, from);
        if (nu > best_next) { best_next = nu; best = i; }
    }
    if (best < 0 || (!force && best_next <= need)) return -1;
    return best;
}

static void enqueue_fetch(sched_t *s, int slot, int shard, int pos) {
    slot_t *sl = &s->slots[slot];
    if (sl->shard >= 0) { s->where[sl->shard] = -1; s->stats.evictions++; }
    sl->shard = shard;
    sl->pos = pos;
    sl->state = SLOT_QUEUED;
    sl->err[0] = 0;
    s->where[shard] = slot;
    s->queue[s->qtail % s->nslots] = slot;
    s->qtail++;
    pthread_cond_broadcast(&s->changed);
}

// Prefetch the uses after position `pos` (exclusive), up to --prefetch of them.
static void prefetch_after(sched_t *s, int pos) {
    int end = pos + 1 + s->prefetch;
    if (end > s->nuses) end = s->nuses;
    for (int k = pos + 1; k < end; k++) {
        int sh = s->uses[k];
        if (s->where[sh] >= 0) continue;
        int slot = pick_slot(s, k, pos + 1, 0);
        if (slot < 0) return; // no room without evicting something needed sooner
        enqueue_fetch(s, slot, sh, k);
    }
}

// ---------------------------------------------------------------- compute-thread API

void sched_begin(sched_t *s, const int *uses, int nuses) {
    pthread_mutex_lock(&s->mu);
    free(s->uses);
    s->uses = malloc((size_t)(nuses ? nuses : 1) * sizeof *s->uses);
    if (!s->uses) runtime_error("out of memory for the use order (%d uses)", nuses);
    memcpy(s->uses, uses, (size_t)nuses * sizeof *uses);
    s->nuses = nuses;
    s->cursor = 0;
    prefetch_after(s, -1);
    pthread_mutex_unlock(&s->mu);
}

const void *sched_acquire(sched_t *s, int shard, char *err, size_t errlen) {
    pthread_mutex_lock(&s->mu);
    int pos = next_use(s, shard, s->cursor);
    if (pos == INT32_MAX) pos = s->cursor - 1; // a use outside the order: fetch on demand
    else s->cursor = pos + 1;
    if (s->where[shard] >= 0) s->stats.hits++;
    // Not resident: it is needed now, so it takes a slot even from a shard needed later
    // than its own next use; when every slot is pinned or in flight, wait for one to land.
    while (s->where[shard] < 0) {
        int free_slot = pick_slot(s, pos, pos + 1, 1);
        if (free_slot >= 0) enqueue_fetch(s, free_slot, shard, pos);
        else pthread_cond_wait(&s->changed, &s->mu);
    }
    int slot = s->where[shard];
    slot_t *sl = &s->slots[slot];
    sl->pins++; // pinned before waiting: nothing can evict it now
    prefetch_after(s, pos);
    if (sl->state != SLOT_READY && sl->state != SLOT_FAILED) {
        double t0 = now_ms();
        while (sl->state != SLOT_READY && sl->state != SLOT_FAILED) pthread_cond_wait(&s->changed, &s->mu);
        s->stats.wait_ms += now_ms() - t0;
    }
    const void *buf = NULL;
    if (sl->state == SLOT_READY) {
        buf = sl->buf;
    } else {
        snprintf(err, errlen, "%s", sl->err);
        sl->pins--;
        s->where[shard] = -1; // a failed copy is never handed out again
        sl->shard = -1;
        sl->state = SLOT_EMPTY;
    }
    pthread_mutex_unlock(&s->mu);
    return buf;
}

void sched_release(sched_t *s, int shard) {
    pthread_mutex_lock(&s->mu);
    int slot = s->where[shard];
    if (slot >= 0 && s->slots[slot].pins > 0) s->slots[slot].pins--;
    pthread_mutex_unlock(&s->mu);
}

void sched_invalidate(sched_t *s) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nslots; i++) {
        slot_t *sl = &s->slots[i];
        while (sl->state == SLOT_QUEUED || sl->state == SLOT_FETCHING) pthread_cond_wait(&s->changed, &s->mu);
        if (sl->shard >= 0) s->where[sl->shard] = -1;
        sl->shard = -1;
        sl->state = SLOT_EMPTY;
        sl->pins = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

void sched_stats(const sched_t *s, sched_stats_t *out) {
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    *out = s->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
}

int sched_next_use(sched_t *s, int shard, int from) {
    pthread_mutex_lock(&s->mu);
    int k = next_use(s, shard, from);
    pthread_mutex_unlock(&s->mu);
    return k;
}
