// test_ahead.c — ahead.h, with one lane and with three: items come in order, each whole in
// its buffer (every lane's part); while the caller holds item k no lane has started anything
// past k+1, and item k's buffer stays as it was (two buffers, one item beyond the held one);
// a fill's failure comes back with its line at that item, the lowest failing lane's when
// several fail, and nothing is started more than one item after it; a caller that stops
// early (mid-way, or holding an item) frees cleanly.
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "ahead.h"

enum { WORDS = 1 << 16, N = 12 };

typedef struct {
    atomic_int filled; // fills started (all lanes)
    atomic_int last;   // the highest item whose fill started
    int fail_at;       // the item whose fill fails in lanes 1 and 2 (-1: none)
} ctx_t;

static int fill(void *arg, int lane, int k, void *buf, char *err, size_t errlen) {
    ctx_t *c = arg;
    atomic_fetch_add(&c->filled, 1);
    for (int was = atomic_load(&c->last); k > was && !atomic_compare_exchange_weak(&c->last, &was, k);) {
    }
    if (k == c->fail_at && lane > 0) {
        snprintf(err, errlen, "item %d lane %d: the disk said no", k, lane);
        return lane == 1 ? -EIO : -ENOSPC;
    }
    int *w = (int *)buf + (size_t)lane * WORDS;
    for (int i = 0; i < WORDS; i++) w[i] = k * 7 + i + lane * 1000;
    usleep(2000 + 1000 * lane); // slower than the caller's copy: the caller waits in ahead_take
    return 0;
}

START_TEST(test_order) {
    const int lanes = _i ? 3 : 1;
    ctx_t c = {.fail_at = -1, .last = -1};
    ahead_t *a = NULL;
    char err[256] = "";
    ck_assert_int_eq(ahead_init(&a, (size_t)lanes * WORDS * sizeof(int), lanes, N, fill, &c, err, sizeof err), 0);
    static int copy[3 * WORDS];
    const size_t bytes = (size_t)lanes * WORDS * sizeof(int);
    for (int k = 0; k < N; k++) {
        void *buf = NULL;
        ck_assert_msg(ahead_take(a, k, &buf, err, sizeof err) == 0, "%s", err);
        memcpy(copy, buf, bytes);
        usleep(3000); // holding item k: no lane may start k+2 (into k's buffer)
        const int filled = atomic_load(&c.filled), last = atomic_load(&c.last);
        ck_assert_msg(filled >= (k + 1) * lanes && last <= k + 1, "holding item %d: %d fills started, the last of "
                      "item %d", k, filled, last);
        ck_assert_mem_eq(buf, copy, bytes);
        ahead_done(a);
        for (int l = 0; l < lanes; l++)
            for (int i = 0; i < WORDS; i++)
                ck_assert_msg(copy[l * WORDS + i] == k * 7 + i + l * 1000, "item %d lane %d word %d: %d", k, l, i,
                              copy[l * WORDS + i]);
    }
    ahead_free(a);
    const int filled = atomic_load(&c.filled);
    ck_assert_int_eq(filled, N * lanes);
}
END_TEST

START_TEST(test_failure) {
    const int lanes = _i ? 3 : 2;
    ctx_t c = {.fail_at = 3, .last = -1};
    ahead_t *a = NULL;
    char err[256] = "";
    ck_assert_int_eq(ahead_init(&a, (size_t)lanes * WORDS * sizeof(int), lanes, N, fill, &c, err, sizeof err), 0);
    void *buf = NULL;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ahead_take(a, k, &buf, err, sizeof err), 0);
        ahead_done(a);
    }
    // item 3 fails in lane 1 (and, with three lanes, in lane 2 too): lane 1's line, as filling
    // lane after lane would give
    ck_assert_int_eq(ahead_take(a, 3, &buf, err, sizeof err), -EIO);
    ck_assert_str_eq(err, "item 3 lane 1: the disk said no");
    ahead_done(a);
    usleep(10000);
    const int filled = atomic_load(&c.filled), last = atomic_load(&c.last);
    ck_assert_msg(filled >= 4 * lanes && last <= 4, "%d fills started, the last of item %d", filled, last);
    ahead_free(a);
}
END_TEST

START_TEST(test_stop_early) {
    for (int hold = 0; hold < 2; hold++) {
        ctx_t c = {.fail_at = -1, .last = -1};
        ahead_t *a = NULL;
        char err[256] = "";
        ck_assert_int_eq(ahead_init(&a, 3 * WORDS * sizeof(int), 3, N, fill, &c, err, sizeof err), 0);
        void *buf = NULL;
        ck_assert_int_eq(ahead_take(a, 0, &buf, err, sizeof err), 0);
        if (!hold) ahead_done(a); // the lanes may be filling item 2 as the caller stops
        ahead_free(a);
        const int last = atomic_load(&c.last);
        ck_assert_int_le(last, 1 + !hold);
    }
    ahead_free(NULL);
    ahead_t *a = NULL;
    char err[256] = "";
    ck_assert_int_eq(ahead_init(&a, 1, 5, N, fill, NULL, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "read-ahead: 5 lanes (accepted: 1..4)");
    ck_assert_ptr_null(a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ahead");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_order, 0, 2);
    tcase_add_loop_test(tc, test_failure, 0, 2);
    tcase_add_test(tc, test_stop_early);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
