// scheduler.c — see scheduler.h.
//
// Fetches: one mutex guards every slot's state, the task queue and the stats; one condition
// variable `changed` is broadcast whenever a slot's state changes or a task is queued. The
// fetch worker takes the oldest queued slot, copies without the lock (the slot is FETCHING:
// nobody else writes it, and the compute thread does not read it until READY), then
// publishes READY/FAILED under the lock. The compute thread only reads a slot once it is
// READY and pinned, and a pinned or FETCHING slot is never chosen for eviction, so a slot's
// memory has exactly one writer at a time.
//
// Updates: their own mutex and condition variable (the job runs without it; only the assist
// lock is taken under it). `busy` says a job is queued or running, `done` how many shards of it
// are final, `rc` its error, which stays once set.
//
// Assists: their own mutex `amu`, a leaf, taken under the fetch lock or the update lock by the
// owner's waits and alone by the job. A posted piece is taken at most once: by the owner (then
// `arunning` until it ends) or, once its wait has run out, by the job itself.
#include "scheduler.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
    int *held, *next;    // (nslots) scratch for pick_slot: what each slot holds, its next use
    int *uses, nuses, max_uses, cursor; // uses: (max_uses), allocated once
    // the use order by shard (sched_begin): shard j's positions, ascending, are
    // use_at[use_off[j] .. use_off[j + 1]), so a next use is a binary search, not a scan
    int *use_off, *use_at;
    int *cnext, ncnext;  // scratch for sched_cache_victim: each cache buffer's next use (grown)
    int *queue, qhead, qtail; // ring of slot indices waiting for the worker (capacity nslots)
    sched_fetch_fn fetch;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    pthread_t worker;
    int stop, worker_started, sync_inited;
    int keep_failed;     // a failed fetch keeps its slot (sched_keep_failed)
    sched_stats_t stats;
    // ---- the update worker
    pthread_mutex_t umu;
    pthread_cond_t ucv;
    pthread_t updater;
    int updater_started;
    int ubusy, udone, urc, ustop;
    int upending;        // a job was started and the worker has not taken it yet
    int ubeside;         // the job in flight was started beside (sched_update_start_beside)
    char uerr[512];
    sched_update_fn ufn;
    void *uctx;
    // ---- assists (sched_assist)
    pthread_mutex_t amu;
    pthread_cond_t acv;  // a posted piece ended or was taken (the job waits on it, timed)
    pthread_t aowner;
    int aowner_set;
    int aposted;         // a piece waits for the owner (atomic: sched_assist_poll reads it unlocked)
    int arunning;        // the owner runs it
    sched_assist_fn afn;
    void *aarg;
    uint64_t assists, assists_self; // pieces the owner ran; pieces the job ran itself after posting
    double assist_ms;               // the owner's time in them
    double assist_wait_ms;          // the job's time from posting a piece to its taking (or its wait's end)
    double ataken_at;               // when the owner took the last piece (now_ms)
};

// ---------------------------------------------------------------- Belady's rule

int sched_belady_next(const int *held, const int *next, int n, int need) {
    int best = -1, best_next = -1;
    for (int i = 0; i < n; i++) {
        if (held[i] == SCHED_EMPTY) return i;
        if (held[i] == SCHED_BUSY) continue;
        if (next[i] > best_next) { best_next = next[i]; best = i; }
    }
    if (best < 0 || (need >= 0 && best_next <= need)) return -1;
    return best;
}

// Indexes uses[0..n) by shard: a counting sort, O(uses + shards), into off's nshards + 2
// entries (counted two ahead, filled one ahead: off[j] ends as shard j's start) and at[]
// (shard j's positions, in order, at[off[j] .. off[j + 1])).
static void index_build(const int *uses, int n, int nshards, int *off, int *at) {
    memset(off, 0, ((size_t)nshards + 2) * sizeof *off);
    for (int k = 0; k < n; k++)
        if (uses[k] >= 0 && uses[k] < nshards) off[uses[k] + 2]++;
    for (int j = 2; j < nshards + 2; j++) off[j] += off[j - 1];
    for (int k = 0; k < n; k++)
        if (uses[k] >= 0 && uses[k] < nshards) at[off[uses[k] + 1]++] = k;
}

// Position of shard's first use at or after `from` in index_build's index, or INT32_MAX.
static int index_next(const int *off, const int *at, int nshards, int shard, int from) {
    if (shard < 0 || shard >= nshards) return INT32_MAX;
    int lo = off[shard], hi = off[shard + 1]; // the first at[i] >= from in [lo, hi)
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (at[mid] < from) lo = mid + 1;
        else hi = mid;
    }
    return lo < off[shard + 1] ? at[lo] : INT32_MAX;
}

// The scheduler's use order by shard. Lock held.
static void index_uses(sched_t *s) { index_build(s->uses, s->nuses, s->nshards, s->use_off, s->use_at); }

// Position of shard's first use at or after `from`, or INT32_MAX when it has none. Lock held.
static int next_use(const sched_t *s, int shard, int from) {
    return index_next(s->use_off, s->use_at, s->nshards, shard, from);
}

// Belady's choice (sched_belady_next) among n buffers holding held[] for a use from `from`,
// each one's next use looked up into next[]. Lock held.
static int belady(const sched_t *s, const int *held, int *next, int n, int from, int need) {
    for (int i = 0; i < n; i++) next[i] = held[i] >= 0 ? next_use(s, held[i], from) : 0;
    return sched_belady_next(held, next, n, need);
}

// ---------------------------------------------------------------- workers

static void *fetch_main(void *arg) {
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
        int rc = s->fetch(s->ctx, shard, pos, i, sl->buf, err, sizeof err);
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

// ---------------------------------------------------------------- assists
// In a wait of the calling thread's, holding `outer` (the fetch or the update lock; NULL:
// none, sched_assist_poll): when it is the owner and a piece is posted, runs it with `outer`
// released, adds its time to *ms (when not NULL) and returns 1 (the caller looks at its state
// again); else 0.
static int assist_here(sched_t *s, pthread_mutex_t *outer, double *ms) {
    pthread_mutex_lock(&s->amu);
    const int owner = s->aowner_set && pthread_equal(s->aowner, pthread_self());
    if (!owner || !__atomic_load_n(&s->aposted, __ATOMIC_RELAXED)) {
        pthread_mutex_unlock(&s->amu);
        return 0;
    }
    __atomic_store_n(&s->aposted, 0, __ATOMIC_RELAXED);
    s->arunning = 1;
    s->ataken_at = now_ms();
    sched_assist_fn fn = s->afn;
    void *arg = s->aarg;
    pthread_mutex_unlock(&s->amu);
    if (outer) pthread_mutex_unlock(outer);
    double t0 = now_ms();
    fn(arg);
    pthread_mutex_lock(&s->amu);
    const double t = now_ms() - t0;
    if (ms) *ms += t;
    s->arunning = 0;
    s->assists++;
    s->assist_ms += t;
    pthread_cond_broadcast(&s->acv);
    pthread_mutex_unlock(&s->amu);
    if (outer) pthread_mutex_lock(outer);
    return 1;
}

// One wait on cv (its lock mu held) in a loop that looks at its state again after: a posted
// piece instead, when the caller is the owner (its time added to *ms when not NULL).
static void wait_or_assist(sched_t *s, pthread_cond_t *cv, pthread_mutex_t *mu, double *ms) {
    if (!assist_here(s, mu, ms)) pthread_cond_wait(cv, mu);
}

// A job's end (under umu): its error kept, or every shard final; waiters woken.
static void update_end(sched_t *s, int rc, const char *err) {
    if (rc != 0) {
        s->urc = rc;
        if (s->ubeside) s->udone = 0; // which shards it updated is unknown: none counts as final
        snprintf(s->uerr, sizeof s->uerr, "%s", err[0] ? err : strerror(-rc));
    } else {
        s->udone = s->nshards;
    }
    s->ubusy = 0;
    pthread_cond_broadcast(&s->ucv);
}

static void *update_main(void *arg) {
    sched_t *s = arg;
    pthread_mutex_lock(&s->umu);
    for (;;) {
        while (!s->ustop && !s->upending) pthread_cond_wait(&s->ucv, &s->umu);
        if (s->ustop) break;
        s->upending = 0;
        sched_update_fn fn = s->ufn;
        void *ctx = s->uctx;
        pthread_mutex_unlock(&s->umu);
        char err[512] = "";
        int rc = fn(ctx, err, sizeof err);
        pthread_mutex_lock(&s->umu);
        update_end(s, rc, err);
    }
    pthread_mutex_unlock(&s->umu);
    return NULL;
}

// ---------------------------------------------------------------- init / free

int sched_init(sched_t **out, int nshards, int nslots, void *const *slots, int prefetch, int max_uses,
               sched_fetch_fn fetch, void *ctx, char *err, size_t errlen) {
    *out = NULL;
    int rc = -ENOMEM;
    sched_t *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->nshards = nshards;
    s->nslots = nslots;
    s->prefetch = prefetch;
    s->max_uses = max_uses;
    s->fetch = fetch;
    s->ctx = ctx;
    s->slots = calloc((size_t)nslots + 1, sizeof *s->slots);
    s->held = calloc((size_t)nslots + 1, sizeof *s->held);
    s->where = malloc((size_t)nshards * sizeof *s->where);
    s->queue = calloc((size_t)nslots + 1, sizeof *s->queue);
    s->next = calloc((size_t)nslots + 1, sizeof *s->next);
    s->uses = malloc((size_t)(max_uses > 0 ? max_uses : 1) * sizeof *s->uses);
    s->use_at = malloc((size_t)(max_uses > 0 ? max_uses : 1) * sizeof *s->use_at);
    s->use_off = calloc((size_t)nshards + 2, sizeof *s->use_off);
    if (!s->slots || !s->held || !s->next || !s->where || !s->queue || !s->uses || !s->use_at || !s->use_off) goto oom;
    for (int i = 0; i < nslots; i++) { s->slots[i].buf = slots[i]; s->slots[i].shard = -1; }
    for (int i = 0; i < nshards; i++) s->where[i] = -1;
    pthread_condattr_t ca; // first (the one that can fail): the job's bounded wait, on the monotonic clock
    if ((rc = pthread_condattr_init(&ca)) == 0) {
        if ((rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)) == 0) rc = pthread_cond_init(&s->acv, &ca);
        pthread_condattr_destroy(&ca);
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot set up the update's assists: %s", strerror(rc));
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    pthread_mutex_init(&s->umu, NULL);
    pthread_cond_init(&s->ucv, NULL);
    pthread_mutex_init(&s->amu, NULL);
    s->sync_inited = 1;
    if (nslots > 0) {
        if ((rc = pthread_create(&s->worker, NULL, fetch_main, s)) != 0) {
            snprintf(err, errlen, "cannot start the fetch worker: %s", strerror(rc));
            goto fail;
        }
        s->worker_started = 1;
    }
    if ((rc = pthread_create(&s->updater, NULL, update_main, s)) != 0) {
        snprintf(err, errlen, "cannot start the update worker: %s", strerror(rc));
        goto fail;
    }
    s->updater_started = 1;
    *out = s;
    return 0;
oom:
    snprintf(err, errlen, "out of memory for the scheduler");
    rc = ENOMEM;
fail:
    sched_free(s);
    return -rc;
}

void sched_free(sched_t *s) {
    if (!s) return;
    if (s->updater_started) { // after the job in flight, if any
        pthread_mutex_lock(&s->umu);
        while (s->ubusy) wait_or_assist(s, &s->ucv, &s->umu, NULL);
        s->ustop = 1;
        pthread_cond_broadcast(&s->ucv);
        pthread_mutex_unlock(&s->umu);
        pthread_join(s->updater, NULL);
    }
    if (s->worker_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->worker, NULL);
    }
    if (s->sync_inited) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->changed);
        pthread_mutex_destroy(&s->umu);
        pthread_cond_destroy(&s->ucv);
        pthread_mutex_destroy(&s->amu);
        pthread_cond_destroy(&s->acv);
    }
    free(s->slots);
    free(s->held);
    free(s->next);
    free(s->where);
    free(s->queue);
    free(s->uses);
    free(s->use_at);
    free(s->use_off);
    free(s->cnext);
    free(s);
}

// ---------------------------------------------------------------- planning (lock held)

// A slot for a fetch needed at position `need`: an empty one, else the unpinned READY (or
// FAILED) slot whose shard is next used farthest away — but, unless `force`, only if that is
// later than `need` (Belady: never evict something needed sooner than what comes in).
// -1 when none qualifies (with force: every slot is pinned or in flight).
static int pick_slot(sched_t *s, int need, int from, int force) {
    for (int i = 0; i < s->nslots; i++) {
        const slot_t *sl = &s->slots[i];
        s->held[i] = sl->state == SLOT_EMPTY                                          ? SCHED_EMPTY
                     : sl->pins > 0 || (sl->state != SLOT_READY && sl->state != SLOT_FAILED) ? SCHED_BUSY
                                                                                      : sl->shard;
    }
    return belady(s, s->held, s->next, s->nslots, from, force ? -1 : need);
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

// ---------------------------------------------------------------- the rule replayed (the plan)

// pick_slot's choice for sched_replay: held[] as they stand, slot `pinned` busy.
static int replay_pick(const int *off, const int *at, int ids, const int *held, int *view, int *next, int cap,
                       int pinned, int from, int need) {
    for (int i = 0; i < cap; i++) {
        view[i] = i == pinned ? SCHED_BUSY : held[i];
        next[i] = view[i] >= 0 ? index_next(off, at, ids, view[i], from) : 0;
    }
    return sched_belady_next(view, next, cap, need);
}

int sched_replay(const int *uses, int n, int nslots, int prefetch, char *miss) {
    int ids = 0;
    for (int k = 0; k < n; k++) ids = uses[k] >= ids ? uses[k] + 1 : ids;
    const int cap = nslots;
    int *off = calloc((size_t)ids + 2, sizeof *off), *at = malloc((size_t)(n > 0 ? n : 1) * sizeof *at);
    int *held = malloc((size_t)(cap > 0 ? cap : 1) * 3 * sizeof *held), *slot_of = malloc((size_t)(ids + 1) * sizeof *slot_of);
    memset(miss, 0, (size_t)n);
    if (!off || !at || !held || !slot_of || cap < 1) { // (no slots: every use is a copy)
        free(off); free(at); free(held); free(slot_of);
        memset(miss, 1, (size_t)n);
        return n;
    }
    int *view = held + cap, *next = held + 2 * cap, count = 0;
    index_build(uses, n, ids, off, at);
    for (int s = 0; s < ids; s++) slot_of[s] = -1;
    for (int i = 0; i < cap; i++) held[i] = SCHED_EMPTY;
    for (int pos = -1; pos < n; pos++) { // -1: sched_begin's fetches ahead
        int pinned = -1;
        if (pos >= 0) { // sched_acquire: fetched now if not held, taking a slot even from a later need
            const int sh = uses[pos];
            if (slot_of[sh] < 0) {
                const int i = replay_pick(off, at, ids, held, view, next, cap, -1, pos + 1, -1);
                if (held[i] >= 0) slot_of[held[i]] = -1;
                held[i] = sh;
                slot_of[sh] = i;
                miss[pos] = 1;
                count++;
            }
            pinned = slot_of[sh];
        }
        for (int k = pos + 1; k < n && k <= pos + prefetch; k++) { // prefetch_after
            const int sh = uses[k];
            if (slot_of[sh] >= 0) continue;
            const int i = replay_pick(off, at, ids, held, view, next, cap, pinned, pos + 1, k);
            if (i < 0) break;
            if (held[i] >= 0) slot_of[held[i]] = -1;
            held[i] = sh;
            slot_of[sh] = i;
            miss[k] = 1;
            count++;
        }
    }
    free(off); free(at); free(held); free(slot_of);
    return count;
}

// ---------------------------------------------------------------- compute-thread API

int sched_begin(sched_t *s, const int *uses, int nuses) {
    if (nuses < 0 || nuses > s->max_uses) return -EINVAL;
    pthread_mutex_lock(&s->mu);
    memcpy(s->uses, uses, (size_t)nuses * sizeof *uses);
    s->nuses = nuses;
    index_uses(s);
    s->cursor = 0;
    if (s->nslots > 0) prefetch_after(s, -1);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

const void *sched_acquire(sched_t *s, int shard, int *slot_out, char *err, size_t errlen) {
    if (s->nslots == 0) {
        snprintf(err, errlen, "shard %d: no slots to fetch into", shard);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    double helped = 0; // ms of the update's assists run here (not waiting)
    assist_here(s, &s->mu, &helped); // a posted piece first: its shard's use is next or nearly
    int pos = next_use(s, shard, s->cursor);
    if (pos == INT32_MAX) pos = s->cursor - 1; // a use outside the order: fetch on demand
    else s->cursor = pos + 1;
    if (s->where[shard] >= 0) s->stats.hits++;
    // Not resident: it is needed now, so it takes a slot even from a shard needed later
    // than its own next use; when every slot is pinned or in flight, wait for one to land.
    while (s->where[shard] < 0) {
        int free_slot = pick_slot(s, pos, pos + 1, 1);
        if (free_slot >= 0) enqueue_fetch(s, free_slot, shard, pos);
        else wait_or_assist(s, &s->changed, &s->mu, &helped);
    }
    int slot = s->where[shard];
    slot_t *sl = &s->slots[slot];
    sl->pins++; // pinned before waiting: nothing can evict it now
    prefetch_after(s, pos);
    if (sl->state != SLOT_READY && sl->state != SLOT_FAILED) {
        double t0 = now_ms(), h0 = helped;
        while (sl->state != SLOT_READY && sl->state != SLOT_FAILED)
            wait_or_assist(s, &s->changed, &s->mu, &helped);
        s->stats.wait_ms += now_ms() - t0 - (helped - h0);
    }
    const void *buf = NULL;
    if (sl->state == SLOT_READY) {
        buf = sl->buf;
        if (slot_out) *slot_out = slot;
    } else {
        snprintf(err, errlen, "%s", sl->err);
        sl->pins--;
        if (!s->keep_failed) { // a failed copy is never handed out again
            s->where[shard] = -1;
            sl->shard = -1;
            sl->state = SLOT_EMPTY;
        }
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
        while (sl->state == SLOT_QUEUED || sl->state == SLOT_FETCHING) wait_or_assist(s, &s->changed, &s->mu, NULL);
        if (sl->shard >= 0) s->where[sl->shard] = -1;
        sl->shard = -1;
        sl->state = SLOT_EMPTY;
        sl->pins = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

void sched_keep_failed(sched_t *s) {
    pthread_mutex_lock(&s->mu);
    s->keep_failed = 1;
    pthread_mutex_unlock(&s->mu);
}

int sched_pin_fetched(sched_t *s, int shard, const int *cancel) {
    pthread_mutex_lock(&s->mu);
    int slot = -1;
    for (;;) {
        if (__atomic_load_n(cancel, __ATOMIC_ACQUIRE)) break;
        int i = s->where[shard];
        if (i >= 0 && (s->slots[i].state == SLOT_READY || s->slots[i].state == SLOT_FAILED)) {
            s->slots[i].pins++;
            slot = i;
            break;
        }
        pthread_cond_wait(&s->changed, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return slot;
}

void *sched_slot_buf(const sched_t *s, int slot) { return s->slots[slot].buf; }

void sched_kick(sched_t *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
}

void sched_stats(const sched_t *s, sched_stats_t *out) {
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    *out = s->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    pthread_mutex_lock((pthread_mutex_t *)&s->amu);
    out->assists = s->assists;
    out->assists_self = s->assists_self;
    out->assist_ms = s->assist_ms;
    out->assist_wait_ms = s->assist_wait_ms;
    pthread_mutex_unlock((pthread_mutex_t *)&s->amu);
}

int sched_cache_victim(sched_t *s, const int *held, int n, int shard, int pos) {
    if (n == 0) return -1;
    pthread_mutex_lock(&s->mu);
    if (n > s->ncnext) { // grown once to the cache's size
        int *g = realloc(s->cnext, (size_t)n * sizeof *g);
        if (!g) { // no room to choose: the read bypasses the cache (as when no buffer qualifies)
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        s->cnext = g;
        s->ncnext = n;
    }
    int i = belady(s, held, s->cnext, n, pos + 1, next_use(s, shard, pos + 1));
    pthread_mutex_unlock(&s->mu);
    return i;
}

// ---------------------------------------------------------------- updates

// A job after a failed one does not run: its error stays, and every wait returns it.
static void update_start(sched_t *s, sched_update_fn fn, void *ctx, int published) {
    pthread_mutex_lock(&s->umu);
    if (s->urc == 0) {
        s->ufn = fn;
        s->uctx = ctx;
        s->udone = published;
        s->ubeside = published > 0;
        s->ubusy = s->upending = 1;
        pthread_cond_broadcast(&s->ucv);
    }
    pthread_mutex_unlock(&s->umu);
}

void sched_update_start(sched_t *s, sched_update_fn fn, void *ctx) { update_start(s, fn, ctx, 0); }

void sched_update_start_beside(sched_t *s, sched_update_fn fn, void *ctx) { update_start(s, fn, ctx, s->nshards); }

int sched_update_run(sched_t *s, sched_update_fn fn, void *ctx, char *err, size_t errlen) {
    pthread_mutex_lock(&s->umu);
    while (s->ubusy) wait_or_assist(s, &s->ucv, &s->umu, NULL); // a job in flight ends first
    int rc = s->urc;
    if (rc == 0) {
        s->udone = 0; // as update_start: a fetch of a shard not yet published waits for it
        s->ubeside = 0;
        s->ubusy = 1;
    }
    pthread_mutex_unlock(&s->umu);
    char e[512] = "";
    if (rc == 0) {
        rc = fn(ctx, e, sizeof e);
        pthread_mutex_lock(&s->umu);
        update_end(s, rc, e);
        pthread_mutex_unlock(&s->umu);
    }
    if (rc != 0 && err) {
        pthread_mutex_lock(&s->umu);
        snprintf(err, errlen, "%s", s->uerr);
        pthread_mutex_unlock(&s->umu);
    }
    return rc;
}

void sched_update_publish(sched_t *s, int shard) {
    pthread_mutex_lock(&s->umu);
    s->udone = shard + 1;
    pthread_cond_broadcast(&s->ucv);
    pthread_mutex_unlock(&s->umu);
}

int sched_update_wait_shard(sched_t *s, int shard, char *err, size_t errlen) {
    pthread_mutex_lock(&s->umu);
    while (s->ubusy && s->udone <= shard && s->urc == 0) wait_or_assist(s, &s->ucv, &s->umu, NULL);
    int rc = s->udone > shard ? 0 : s->urc;
    if (rc != 0 && err) snprintf(err, errlen, "%s", s->uerr);
    pthread_mutex_unlock(&s->umu);
    return rc;
}

int sched_update_wait(sched_t *s, char *err, size_t errlen) {
    pthread_mutex_lock(&s->umu);
    while (s->ubusy) wait_or_assist(s, &s->ucv, &s->umu, NULL);
    int rc = s->urc;
    if (rc != 0 && err) snprintf(err, errlen, "%s", s->uerr);
    pthread_mutex_unlock(&s->umu);
    return rc;
}

// ---------------------------------------------------------------- assists

int sched_assist_poll(sched_t *s) {
    if (!__atomic_load_n(&s->aposted, __ATOMIC_ACQUIRE)) return 0; // nothing posted: no lock taken
    return assist_here(s, NULL, NULL);
}

void sched_assist_owner(sched_t *s) {
    pthread_mutex_lock(&s->amu);
    s->aowner = pthread_self();
    s->aowner_set = 1;
    pthread_mutex_unlock(&s->amu);
}

int sched_assist(sched_t *s, sched_assist_fn fn, void *arg) {
    pthread_mutex_lock(&s->amu);
    if (!s->aowner_set || pthread_equal(s->aowner, pthread_self())) { // no owner, or the owner runs the job
        pthread_mutex_unlock(&s->amu);
        fn(arg);
        return 0;
    }
    const double t0 = now_ms();
    s->afn = fn;
    s->aarg = arg;
    __atomic_store_n(&s->aposted, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->amu);
    // wake the owner wherever it waits (it looks at aposted under the lock it waits with)
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->umu);
    pthread_cond_broadcast(&s->ucv);
    pthread_mutex_unlock(&s->umu);
    struct timespec until;
    int rc = clock_gettime(CLOCK_MONOTONIC, &until); // (fails only on a bad clock id: then no wait)
    until.tv_nsec += (long)SCHED_ASSIST_WAIT_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&s->amu);
    while (__atomic_load_n(&s->aposted, __ATOMIC_RELAXED) && rc == 0) // ETIMEDOUT ends it
        rc = pthread_cond_timedwait(&s->acv, &s->amu, &until);
    const int mine = __atomic_load_n(&s->aposted, __ATOMIC_RELAXED); // not taken in time: the owner is elsewhere
    s->assist_wait_ms += (mine ? now_ms() : s->ataken_at) - t0; // (the owner wakes this wait only as it ends)
    if (mine) {
        __atomic_store_n(&s->aposted, 0, __ATOMIC_RELAXED);
        s->assists_self++;
    }
    while (s->arunning) pthread_cond_wait(&s->acv, &s->amu);
    pthread_mutex_unlock(&s->amu);
    if (mine) fn(arg);
    return !mine;
}
