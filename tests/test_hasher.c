// test_hasher.c — hasher.h: FNV-1a 64 on a thread of its own gives the published test
// vectors and, for bytes put in any pieces (smaller and larger than its buffers, wrapping
// its ring several times), the value of a plain byte loop written here; its value midway is
// the prefix's, and it goes on from there; it continues from a given hash.
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "hasher.h"

// FNV-1a 64, byte by byte: offset basis 14695981039346656037, prime 2^40 + 2^8 + 0xb3.
static uint64_t fnv_ref(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

START_TEST(test_vectors) {
    // from the FNV authors' table (isthe.com/chongo/tech/comp/fnv): "", "a", "foobar"
    static const struct { const char *s; uint64_t h; } v[] = {
        {"", 0xcbf29ce484222325ULL}, {"a", 0xaf63dc4c8601ec8cULL}, {"foobar", 0x85944171f73967e8ULL}};
    for (int i = 0; i < 3; i++) {
        hasher_t hs;
        hasher_init(&hs, 0xcbf29ce484222325ULL);
        hasher_put(&hs, v[i].s, strlen(v[i].s));
        uint64_t got = hasher_value(&hs);
        hasher_free(&hs);
        ck_assert_msg(got == v[i].h, "\"%s\": %016" PRIx64 ", want %016" PRIx64, v[i].s, got, v[i].h);
    }
}
END_TEST

START_TEST(test_pieces) {
    const size_t total = 3 * HASHER_BUFS * HASHER_BUF + 12345; // the ring wraps three times
    unsigned char *all = malloc(total);
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < total; i++) { // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        all[i] = (unsigned char)x;
    }
    const size_t pieces[] = {1, 4093, HASHER_BUF + 5, 3 * HASHER_BUF, 7, HASHER_BUF - 1};
    hasher_t hs;
    hasher_init(&hs, 0xcbf29ce484222325ULL);
    size_t off = 0;
    for (int k = 0; off < total; k++) {
        size_t n = pieces[k % 6] < total - off ? pieces[k % 6] : total - off;
        hasher_put(&hs, all + off, n);
        off += n;
        if (k == 4) { // midway, part of a buffer filled: the prefix's hash, and on from there
            uint64_t want = fnv_ref(0xcbf29ce484222325ULL, all, off), got = hasher_value(&hs);
            ck_assert_msg(got == want, "after %zu bytes: %016" PRIx64 ", want %016" PRIx64, off, got, want);
        }
    }
    uint64_t want = fnv_ref(0xcbf29ce484222325ULL, all, total), got = hasher_value(&hs);
    hasher_free(&hs);
    ck_assert_msg(got == want, "%zu bytes: %016" PRIx64 ", want %016" PRIx64, total, got, want);
    // continuing from a hash: the second half's hasher ends where the whole does
    hasher_init(&hs, fnv_ref(0xcbf29ce484222325ULL, all, total / 2));
    hasher_put(&hs, all + total / 2, total - total / 2);
    got = hasher_value(&hs);
    hasher_free(&hs);
    ck_assert_msg(got == want, "continued: %016" PRIx64 ", want %016" PRIx64, got, want);
    free(all);
}
END_TEST

int main(void) {
    Suite *s = suite_create("hasher");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_vectors);
    tcase_add_test(tc, test_pieces);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
