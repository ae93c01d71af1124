// test_ahead.c — ahead.h: items come in order, each whole in the buffer; while the caller
// holds item k the thread has filled nothing past it (one buffer, one item ahead); a fill's
// failure comes back with its line at that item, and nothing after it is filled; a caller
// that stops early (mid-way, or holding an item) frees cleanly.
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "ahead.h"

enum { WORDS = 1 << 16, N = 12 };

typedef struct {
    atomic_int filled; // fills started
    int fail_at;       // the item whose fill fails (-1: none)
} ctx_t;

static int fill(void *arg, int k, void *buf, char *err, size_t errlen) {
    ctx_t *c = arg;
    atomic_fetch_add(&c->filled, 1);
    if (k == c->fail_at) {
        snprintf(err, errlen, "item %d: the disk said no", k);
        return -EIO;
    }
    int *w = buf;
    for (int i = 0; i < WORDS; i++) w[i] = k * 7 + i;
    usleep(2000); // slower than the caller's copy: the caller waits in ahead_take
    return 0;
}

START_TEST(test_order) {
    ctx_t c = {.fail_at = -1};
    ahead_t *a = NULL;
    char err[256] = "";
    ck_assert_int_eq(ahead_init(&a, WORDS * sizeof(int), N, fill, &c, err, sizeof err), 0);
    static int copy[WORDS];
    for (int k = 0; k < N; k++) {
        void *buf = NULL;
        ck_assert_msg(ahead_take(a, k, &buf, err, sizeof err) == 0, "%s", err);
        memcpy(copy, buf, sizeof copy);
        usleep(3000); // holding item k: the thread must not fill k+1 into the buffer
        const int filled = atomic_load(&c.filled);
        ck_assert_msg(filled == k + 1, "holding item %d: %d fills started", k, filled);
        ck_assert_mem_eq(buf, copy, sizeof copy);
        ahead_done(a);
        for (int i = 0; i < WORDS; i++) ck_assert_msg(copy[i] == k * 7 + i, "item %d word %d: %d", k, i, copy[i]);
    }
    ahead_free(a);
    const int filled = atomic_load(&c.filled);
    ck_assert_int_eq(filled, N);
}
END_TEST

START_TEST(test_failure) {
    ctx_t c = {.fail_at = 3};
    ahead_t *a = NULL;
    char err[256] = "";
    ck_assert_int_eq(ahead_init(&a, WORDS * sizeof(int), N, fill, &c, err, sizeof err), 0);
    void *buf = NULL;
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ahead_take(a, k, &buf, err, sizeof err), 0);
        ahead_done(a);
    }
    ck_assert_int_eq(ahead_take(a, 3, &buf, err, sizeof err), -EIO);
    ck_assert_str_eq(err, "item 3: the disk said no");
    ahead_done(a);
    usleep(10000);
    const int filled = atomic_load(&c.filled);
    ck_assert_int_eq(filled, 4); // nothing after the failure
    ahead_free(a);
}
END_TEST

START_TEST(test_stop_early) {
    for (int hold = 0; hold < 2; hold++) {
        ctx_t c = {.fail_at = -1};
        ahead_t *a = NULL;
        char err[256] = "";
        ck_assert_int_eq(ahead_init(&a, WORDS * sizeof(int), N, fill, &c, err, sizeof err), 0);
        void *buf = NULL;
        ck_assert_int_eq(ahead_take(a, 0, &buf, err, sizeof err), 0);
        if (!hold) ahead_done(a); // the thread may be filling item 1 as the caller stops
        ahead_free(a);
        const int filled = atomic_load(&c.filled);
        ck_assert_int_le(filled, 2);
    }
    ahead_free(NULL);
}
END_TEST

int main(void) {
    Suite *s = suite_create("ahead");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_order);
    tcase_add_test(tc, test_failure);
    tcase_add_test(tc, test_stop_early);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
