// test_sched.c — the scheduler against a fake copy engine: random latencies, injected
// errors, prefetch deeper than the free slots. Every acquire must hand out a slot holding
// exactly the shard asked for, evictions must follow Belady's rule, a failed fetch must
// fail only its acquire (with the message), and nothing may hang or leak a thread.
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "scheduler.h"
#include "testutil.h"
#include "util.h"

enum { SLOT_BYTES = 64 };

typedef struct {
    unsigned seed;
    int max_delay_us;     // random latency per fetch, 0..max
    int fail_shard;       // fetches of this shard fail with -EIO (-1: none)
    atomic_int fetches;
    atomic_int in_flight, max_in_flight;
    const int *order;     // the use order given to sched_begin, when checked
    atomic_int bad_pos;   // fetches whose pos did not name a use of their shard
    void *const *slots;   // the slots given to sched_init, when checked
    atomic_int bad_slot;  // fetches told a slot number that is not their buffer's
} fake_t;

// Fills the slot with the shard's pattern after a random delay (the fake copy engine may
// sleep: it stands in for a disk; the scheduler itself never does).
static int fake_fetch(void *ctx, int shard, int pos, int slot, void *dst, char *err, size_t errlen) {
    fake_t *f = ctx;
    if (f->slots && f->slots[slot] != dst) atomic_fetch_add(&f->bad_slot, 1);
    if (f->order && (pos < 0 || f->order[pos] != shard)) atomic_fetch_add(&f->bad_pos, 1);
    int now = atomic_fetch_add(&f->in_flight, 1) + 1;
    int prev = atomic_load(&f->max_in_flight);
    while (now > prev && !atomic_compare_exchange_weak(&f->max_in_flight, &prev, now)) {}
    if (f->max_delay_us > 0) {
        unsigned s = (unsigned)shard * 2654435761u ^ (unsigned)atomic_fetch_add(&f->fetches, 1);
        struct timespec ts = {0, (long)(s % (unsigned)f->max_delay_us) * 1000L};
        nanosleep(&ts, NULL);
    } else {
        atomic_fetch_add(&f->fetches, 1);
    }
    atomic_fetch_sub(&f->in_flight, 1);
    if (shard == f->fail_shard) {
        snprintf(err, errlen, "shard %d: injected EIO", shard);
        return -EIO;
    }
    memset(dst, shard + 1, SLOT_BYTES);
    return 0;
}

// A training-like order over n shards, reps micro-batches: forward 0..n-1, backward n-2..1.
static int make_order(int *uses, int n, int reps) {
    int k = 0;
    for (int r = 0; r < reps; r++) {
        for (int s = 0; s < n; s++) uses[k++] = s;
        for (int s = n - 2; s >= 1; s--) uses[k++] = s;
    }
    return k;
}

static void run_order(int nshards, int nslots, int prefetch, int delay_us, int reps) {
    void *slots[16];
    char mem[16][SLOT_BYTES];
    for (int i = 0; i < nslots; i++) slots[i] = mem[i];
    fake_t f = {.max_delay_us = delay_us, .fail_shard = -1, .slots = slots};
    sched_t *s = NULL;
    char err[256];
    ck_assert_int_eq(sched_init(&s, nshards, nslots, slots, prefetch, 1024, fake_fetch, &f, err, sizeof err), 0);
    int uses[1024];
    int n = make_order(uses, nshards, reps);
    f.order = uses; // the same order every step
    for (int step = 0; step < 3; step++) {
        sched_begin(s, uses, n);
        for (int k = 0; k < n; k++) {
            int slot = -1;
            const unsigned char *p = sched_acquire(s, uses[k], &slot, err, sizeof err);
            ck_assert_msg(p != NULL, "acquire %d: %s", uses[k], err);
            ck_assert_msg(slot >= 0 && slot < nslots && slots[slot] == p, "acquire %d: slot %d is not its buffer", uses[k],
                          slot);
            for (int b = 0; b < SLOT_BYTES; b++)
                ck_assert_msg(p[b] == uses[k] + 1, "use %d: slot holds shard %d's bytes, want shard %d", k, p[b] - 1,
                              uses[k]);
            sched_release(s, uses[k]);
        }
        sched_invalidate(s); // as after an optimizer step
    }
    sched_stats_t st;
    sched_stats(s, &st);
    // every use was served; with room for every shard nothing is ever evicted
    ck_assert_uint_eq(st.fetches + 0, (uint64_t)atomic_load(&f.fetches));
    if (nslots >= nshards) ck_assert_uint_eq(st.evictions, 0);
    ck_assert_msg(atomic_load(&f.bad_slot) == 0, "%d fetches were told another slot's number", atomic_load(&f.bad_slot));
    ck_assert_msg(atomic_load(&f.bad_pos) == 0, "%d fetches were told a position that is not their shard's use",
                  atomic_load(&f.bad_pos));
    sched_free(s);
}

// Shapes: (shards, slots, prefetch) including prefetch deeper than the free slots.
static const int shapes[][3] = {{4, 2, 0}, {4, 2, 1}, {6, 3, 2}, {8, 2, 8}, {8, 4, 3}, {5, 5, 2}, {10, 3, 16}};

START_TEST(orders_with_random_latency) { run_order(shapes[_i][0], shapes[_i][1], shapes[_i][2], 300, 2); }
END_TEST

START_TEST(orders_without_latency) { run_order(shapes[_i][0], shapes[_i][1], shapes[_i][2], 0, 3); }
END_TEST

// Belady: with 2 slots and order A B C A, the slot to give up for C is B's (never used
// again), not A's (used next) — LRU or FIFO would drop A and fetch it twice.
START_TEST(belady_keeps_the_sooner_shard) {
    char mem[2][SLOT_BYTES];
    void *slots[2] = {mem[0], mem[1]};
    fake_t f = {.fail_shard = -1};
    sched_t *s = NULL;
    char err[256];
    ck_assert_int_eq(sched_init(&s, 3, 2, slots, 0, 4, fake_fetch, &f, err, sizeof err), 0);
    int uses[] = {0, 1, 2, 0};
    sched_begin(s, uses, 4);
    for (int k = 0; k < 4; k++) {
        ck_assert_ptr_nonnull(sched_acquire(s, uses[k], NULL, err, sizeof err));
        sched_release(s, uses[k]);
    }
    sched_stats_t st;
    sched_stats(s, &st);
    ck_assert_uint_eq(st.fetches, 3); // 0, 1, 2 once each
    ck_assert_uint_eq(st.evictions, 1);
    sched_free(s);
}
END_TEST

// The host cache's choice (sched_cache_victim, from the scheduler's index of the use order)
// against Belady's rule written out here by scanning the uses: random orders (a shard used
// many times, or never), random caches with free and busy buffers, every position.
static int scan_next(const int *uses, int n, int shard, int from) {
    for (int k = from < 0 ? 0 : from; k < n; k++)
        if (uses[k] == shard) return k;
    return INT32_MAX;
}
START_TEST(cache_victim_is_belady) {
    unsigned seed = 7;
    int uses[300], held[8], mismatches = 0, bypasses = 0;
    char err[256];
    for (int trial = 0; trial < 200; trial++) {
        const int nshards = 1 + rand_r(&seed) % 40, nuses = rand_r(&seed) % 300;
        for (int k = 0; k < nuses; k++) uses[k] = rand_r(&seed) % nshards;
        fake_t f = {.fail_shard = -1};
        sched_t *s = NULL;
        ck_assert_int_eq(sched_init(&s, nshards, 0, NULL, 0, 300, fake_fetch, &f, err, sizeof err), 0);
        ck_assert_int_eq(sched_begin(s, uses, nuses), 0);
        for (int q = 0; q < 20; q++) {
            const int n = 1 + rand_r(&seed) % 8, shard = rand_r(&seed) % nshards, pos = rand_r(&seed) % (nuses + 2) - 1;
            for (int i = 0; i < n; i++) {
                const int r = rand_r(&seed) % 10;
                held[i] = r == 0 ? SCHED_EMPTY : r == 1 ? SCHED_BUSY : rand_r(&seed) % nshards;
            }
            // the rule: a free buffer first; else the latest next use (the first of equals), if later than need
            const int need = scan_next(uses, nuses, shard, pos + 1);
            int want = -1, best = -1, best_i = -1;
            for (int i = 0; i < n && want < 0; i++)
                if (held[i] == SCHED_EMPTY) want = i;
            for (int i = 0; i < n && want < 0; i++) {
                const int nu = held[i] >= 0 ? scan_next(uses, nuses, held[i], pos + 1) : -1;
                if (nu > best) {
                    best = nu;
                    best_i = i;
                }
            }
            if (want < 0 && best > need) want = best_i;
            const int got = sched_cache_victim(s, held, n, shard, pos);
            mismatches += got != want;
            bypasses += want < 0;
        }
        sched_free(s);
    }
    ck_assert_int_eq(mismatches, 0);
    ck_assert_msg(bypasses > 100 && bypasses < 3000, "%d bypasses of 4000: the cases do not cover both outcomes",
                  bypasses);
}
END_TEST

// A failing fetch fails its acquire with the engine's message; other shards still work and
// the failed shard is fetched again (not served stale) on its next use.
START_TEST(failed_fetch_fails_its_acquire) {
    char mem[3][SLOT_BYTES];
    void *slots[3] = {mem[0], mem[1], mem[2]};
    fake_t f = {.max_delay_us = 200, .fail_shard = 2};
    sched_t *s = NULL;
    char err[256];
    ck_assert_int_eq(sched_init(&s, 5, 3, slots, 2, 64, fake_fetch, &f, err, sizeof err), 0);
    int uses[64];
    int n = make_order(uses, 5, 2);
    sched_begin(s, uses, n);
    int failures = 0;
    for (int k = 0; k < n; k++) {
        err[0] = 0;
        const unsigned char *p = sched_acquire(s, uses[k], NULL, err, sizeof err);
        if (uses[k] == 2) {
            ck_assert_ptr_null(p);
            ck_assert_str_eq(err, "shard 2: injected EIO");
            failures++;
            continue;
        }
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(p[0], uses[k] + 1);
        sched_release(s, uses[k]);
    }
    ck_assert_int_eq(failures, 4); // shard 2 appears twice per micro-batch, two micro-batches
    sched_free(s);                 // joins the worker: no thread left behind
}
END_TEST

// sched_update_run: the job on the calling thread. A waiter for shard 3 on another thread (a
// prefetch), started by the job once the run has marked it busy, returns only once the job
// has published shard 3; the run returns the job's rc; after a failed job, a later run does
// not run its job and returns the error, as every wait does.
typedef struct {
    sched_t *s;
    int n, fail, runs, spawn;
    pthread_t th;
    atomic_int published; // shards the job has published
    int seen;             // what the job had published when the waiter's wait returned (-1: it failed)
} job_t;

static void *wait_for_three(void *arg) {
    job_t *j = arg;
    char err[256];
    j->seen = sched_update_wait_shard(j->s, 3, err, sizeof err) == 0 ? atomic_load(&j->published) : -1;
    return NULL;
}

static int publishing_job(void *ctx, char *err, size_t errlen) {
    job_t *j = ctx;
    j->runs++;
    if (j->spawn && pthread_create(&j->th, NULL, wait_for_three, j) != 0) {
        snprintf(err, errlen, "pthread_create failed");
        return -EAGAIN;
    }
    for (int k = 0; k < j->n; k++) {
        struct timespec ts = {0, 2000000L}; // 2 ms a shard: the waiter is waiting by shard 3
        nanosleep(&ts, NULL);
        if (j->fail && k == 2) {
            snprintf(err, errlen, "shard 2: injected EIO");
            return -EIO;
        }
        atomic_store(&j->published, k + 1);
        sched_update_publish(j->s, k);
    }
    return 0;
}

START_TEST(update_runs_here) {
    char mem[2][SLOT_BYTES];
    void *slots[2] = {mem[0], mem[1]};
    fake_t f = {.fail_shard = -1};
    sched_t *s = NULL;
    char err[256] = "";
    ck_assert_int_eq(sched_init(&s, 6, 2, slots, 1, 64, fake_fetch, &f, err, sizeof err), 0);
    job_t j = {.s = s, .n = 6, .spawn = 1};
    ck_assert_int_eq(sched_update_run(s, publishing_job, &j, err, sizeof err), 0);
    ck_assert_int_eq(pthread_join(j.th, NULL), 0);
    ck_assert_int_eq(j.runs, 1);
    ck_assert_int_eq(atomic_load(&j.published), 6);
    ck_assert_msg(j.seen >= 4, "the wait for shard 3 returned with %d shards published", j.seen);
    ck_assert_int_eq(sched_update_wait(s, err, sizeof err), 0);
    // a failing job: its rc and line; the next run does not run and gives the same
    job_t bad = {.s = s, .n = 6, .fail = 1};
    ck_assert_int_eq(sched_update_run(s, publishing_job, &bad, err, sizeof err), -EIO);
    ck_assert_str_eq(err, "shard 2: injected EIO");
    err[0] = 0;
    ck_assert_int_eq(sched_update_run(s, publishing_job, &bad, err, sizeof err), -EIO);
    ck_assert_str_eq(err, "shard 2: injected EIO");
    ck_assert_int_eq(bad.runs, 1);
    ck_assert_int_eq(sched_update_wait(s, err, sizeof err), -EIO);
    sched_free(s);
}
END_TEST

// ---------------------------------------------------------------- assists
// The update job's pieces run on the owner's cores while it waits for what the job gives it.
typedef struct {
    sched_t *s;
    int n;                 // pieces, one a shard, each published after it ran
    pthread_t owner;
    atomic_int ran[8];     // times each piece ran
    int on_owner[8];       // the piece ran on the owner's thread
    int taken[8];          // sched_assist's answer
} assist_t;

typedef struct {
    assist_t *a;
    int k;
} piece_t;

static void piece(void *arg) {
    piece_t *p = arg;
    atomic_fetch_add(&p->a->ran[p->k], 1);
    p->a->on_owner[p->k] = pthread_equal(pthread_self(), p->a->owner);
}

static int assist_job(void *ctx, char *err, size_t errlen) {
    (void)err, (void)errlen;
    assist_t *a = ctx;
    for (int k = 0; k < a->n; k++) {
        piece_t p = {a, k};
        a->taken[k] = sched_assist(a->s, piece, &p);
        sched_update_publish(a->s, k);
    }
    return 0;
}

// The scheduler's counts of pieces the owner ran and the job ran itself.
static void assert_assists(sched_t *s, int owner, int self) {
    sched_stats_t st;
    sched_stats(s, &st);
    ck_assert_int_eq((int)st.assists, owner);
    ck_assert_int_eq((int)st.assists_self, self);
}

// The fetch of a shard waits for its publish, as the tier's does (on the fetch worker, which
// never runs a piece).
static int gated_fetch(void *ctx, int shard, int pos, int slot, void *dst, char *err, size_t errlen) {
    (void)pos, (void)slot;
    assist_t *a = ctx;
    int rc = sched_update_wait_shard(a->s, shard, err, errlen);
    if (rc == 0) memset(dst, shard + 1, SLOT_BYTES);
    return rc;
}

// Every piece runs once, on the owner, in the owner's acquires (the fetch waiting for the job)
// and in sched_update_wait_shard; the stats count them.
START_TEST(assists_run_in_the_owners_waits) {
    char mem[2][SLOT_BYTES];
    void *slots[2] = {mem[0], mem[1]};
    assist_t a = {.n = 8, .owner = pthread_self()};
    sched_t *s = NULL;
    char err[256] = "";
    ck_assert_int_eq(sched_init(&s, 8, 2, slots, 1, 64, gated_fetch, &a, err, sizeof err), 0);
    a.s = s;
    sched_assist_owner(s);
    int uses[4] = {0, 1, 2, 3};
    ck_assert_int_eq(sched_begin(s, uses, 4), 0);
    sched_update_start(s, assist_job, &a);
    for (int k = 0; k < 4; k++) { // the first four through acquires
        const char *buf = sched_acquire(s, k, NULL, err, sizeof err);
        ck_assert_msg(buf != NULL, "acquire %d: %s", k, err);
        ck_assert_int_eq(buf[0], k + 1);
        sched_release(s, k);
    }
    ck_assert_int_eq(sched_update_wait_shard(s, 6, err, sizeof err), 0); // the next three in the wait for 6
    ck_assert_int_eq(sched_update_wait(s, err, sizeof err), 0);          // and the last
    for (int k = 0; k < a.n; k++) {
        ck_assert_int_eq(atomic_load(&a.ran[k]), 1);
        ck_assert_msg(a.on_owner[k] && a.taken[k] == 1, "piece %d ran on the %s", k, a.on_owner[k] ? "owner" : "job");
    }
    assert_assists(s, 8, 0);
    sched_free(s);
}
END_TEST

// The owner between its ops (no wait): sched_assist_poll runs the posted piece, and is a
// no-op when nothing is posted.
typedef struct {
    assist_t *a;
    atomic_int posting; // the job is about to post its piece
} poll_job_t;

static int posting_job(void *ctx, char *err, size_t errlen) {
    (void)err, (void)errlen;
    poll_job_t *p = ctx;
    piece_t pc = {p->a, 0};
    atomic_store(&p->posting, 1);
    p->a->taken[0] = sched_assist(p->a->s, piece, &pc);
    sched_update_publish(p->a->s, 0);
    return 0;
}

START_TEST(assists_run_in_the_owners_polls) {
    sched_t *s = NULL;
    char err[256] = "";
    ck_assert_int_eq(sched_init(&s, 1, 0, NULL, 0, 8, fake_fetch, NULL, err, sizeof err), 0);
    assist_t a = {.s = s, .n = 1, .owner = pthread_self()};
    poll_job_t p = {.a = &a};
    sched_assist_owner(s);
    ck_assert_int_eq(sched_assist_poll(s), 0); // nothing posted
    sched_update_start(s, posting_job, &p);
    while (!atomic_load(&p.posting)) sched_yield();
    int polled = 0; // until the owner's poll runs it (or, the owner late past the wait, the job does)
    while (!polled && !atomic_load(&a.ran[0])) polled = sched_assist_poll(s);
    ck_assert_int_eq(sched_update_wait(s, err, sizeof err), 0);
    ck_assert_int_eq(atomic_load(&a.ran[0]), 1);
    ck_assert_msg(polled && a.on_owner[0] && a.taken[0] == 1, "the piece ran on the %s",
                  a.on_owner[0] ? "owner" : "job");
    ck_assert_int_eq(sched_assist_poll(s), 0);
    sched_free(s);
}
END_TEST

// An owner busy elsewhere past SCHED_ASSIST_WAIT_MS: the job runs the piece itself (once).
// No owner, or the owner running the job itself (sched_update_run): the piece runs at once,
// on the job's thread.
START_TEST(assists_fall_back_to_the_job) {
    sched_t *s = NULL;
    char err[256] = "";
    ck_assert_int_eq(sched_init(&s, 2, 0, NULL, 0, 8, fake_fetch, NULL, err, sizeof err), 0);
    assist_t a = {.s = s, .n = 2, .owner = pthread_self()};
    sched_update_start(s, assist_job, &a); // no owner yet
    ck_assert_int_eq(sched_update_wait(s, err, sizeof err), 0);
    sched_assist_owner(s);
    ck_assert_int_eq(sched_update_run(s, assist_job, &a, err, sizeof err), 0); // the owner's own job
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(atomic_load(&a.ran[k]), 2);
        ck_assert_int_eq(a.taken[k], 0);
        ck_assert(a.on_owner[k]); // the last run was here
    }
    assist_t b = {.s = s, .n = 1, .owner = pthread_self()};
    poll_job_t p = {.a = &b};
    sched_update_start(s, posting_job, &p);
    while (!atomic_load(&p.posting)) sched_yield(); // posted (or about to be): then busy, in no wait
    struct timespec ts = {0, (SCHED_ASSIST_WAIT_MS * 4) * 1000000L};
    nanosleep(&ts, NULL);
    ck_assert_int_eq(sched_update_wait(s, err, sizeof err), 0);
    ck_assert_int_eq(atomic_load(&b.ran[0]), 1);
    ck_assert_msg(!b.on_owner[0] && b.taken[0] == 0, "the piece waited for an owner that was not waiting");
    assert_assists(s, 0, 1);
    sched_free(s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    tcase_add_loop_test(tc, orders_with_random_latency, 0, nshapes);
    tcase_add_loop_test(tc, orders_without_latency, 0, nshapes);
    tcase_add_test(tc, belady_keeps_the_sooner_shard);
    tcase_add_test(tc, cache_victim_is_belady);
    suite_add_tcase(s, tc);
    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 60);
    tcase_add_test(faults, failed_fetch_fails_its_acquire);
    tcase_add_test(faults, update_runs_here);
    tcase_add_test(faults, assists_run_in_the_owners_waits);
    tcase_add_test(faults, assists_run_in_the_owners_polls);
    tcase_add_test(faults, assists_fall_back_to_the_job);
    suite_add_tcase(s, faults);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
