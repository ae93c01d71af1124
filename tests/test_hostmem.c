// test_hostmem.c — the host pool (src/hostmem.h): allocation and alignment, budget and
// MemAvailable errors, NUMA placement checked page by page with get_mempolicy and
// move_pages, pinning and its fallback notice, huge-page advice, concurrent allocation; and
// alloc_huge, the big buffers outside the pool.
#include <check.h>
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "hostmem.h"
#include "testutil.h"
#include "util.h" // uses: alloc_huge

#define MiB (1024ull * 1024ull)

static uint64_t pool_size(void) { return tu_sanitized() ? 16 * MiB : 64 * MiB; }

static hostmem_t *open_pool(uint64_t size, uint64_t budget, int node, const char *faults) {
    hostmem_opts_t o = {.size = size, .budget = budget, .numa_node = node, .pin = 1, .hugepages = 1, .quiet = 1,
                        .faults = faults ? faults : ""};
    hostmem_t *h = NULL;
    char err[1024];
    int rc = hostmem_init(&h, &o, err, sizeof err);
    ck_assert_msg(rc == 0, "hostmem_init: %d %s", rc, err);
    return h;
}

// A field ("Locked:", "THPeligible:") of the /proc/self/smaps mapping that holds addr.
static long smaps_field(const void *addr, const char *field) {
    FILE *sm = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(sm);
    char line[512];
    int in = 0;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, sm)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = lo <= (uintptr_t)addr && (uintptr_t)addr < hi;
        else if (in && strncmp(line, field, fl) == 0) { v = strtol(line + fl, NULL, 10); break; }
    }
    fclose(sm);
    return v;
}

// Transparent huge pages are on for advised ranges (madvise or always).
static int thp_enabled(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char thp[128] = "";
    if (f) { if (!fgets(thp, sizeof thp, f)) thp[0] = 0; fclose(f); }
    return strstr(thp, "[madvise]") || strstr(thp, "[always]");
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// ---------------------------------------------------------------- core

START_TEST(test_alloc_alignment) {
    uint64_t size = pool_size();
    hostmem_t *h = open_pool(size, 0, -1, NULL);
    hostmem_info_t info;
    hostmem_info(h, &info);
    ck_assert_uint_eq(info.size, size);
    ck_assert_uint_eq((uintptr_t)info.base % (2 * MiB), 0);
    char err[512];
    static const uint64_t sizes[] = {1, 4095, 4096, 4097, 12345, MiB + 1, 3 * MiB};
    char *prev_end = info.base;
    uint64_t used = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = hostmem_alloc(h, sizes[i], "t", err, sizeof err);
        ck_assert_msg(p != NULL, "%s", err);
        ck_assert_uint_eq((uintptr_t)p % 4096, 0);
        ck_assert_msg(p >= prev_end, "allocation %zu overlaps the previous one", i);
        ck_assert(p + sizes[i] <= (char *)info.base + size);
        for (uint64_t k = 0; k < sizes[i]; k += 997) ck_assert_int_eq(p[k], 0); // zero on first use
        memset(p, 0xA5, sizes[i]);
        prev_end = p + sizes[i];
        used += (sizes[i] + 4095) / 4096 * 4096;
    }
    hostmem_info(h, &info);
    ck_assert_uint_eq(info.used, used);
    ck_assert_uint_eq(info.peak, used);
    // the whole rest of the pool fits exactly; one page more does not
    char *rest = hostmem_alloc(h, size - used, "rest", err, sizeof err);
    ck_assert_msg(rest != NULL, "%s", err);
    ck_assert_ptr_null(hostmem_alloc(h, 1, "one more", err, sizeof err));
    ck_assert_msg(strstr(err, "'one more'") && strstr(err, "needs 1 B") && strstr(err, "0 B left"), "%s", err);
    hostmem_reset(h);
    hostmem_info(h, &info);
    ck_assert_uint_eq(info.used, 0);
    ck_assert_uint_eq(info.peak, size);
    ck_assert_ptr_eq(hostmem_alloc(h, 4096, "again", err, sizeof err), info.base);
    struct iovec iov[4];
    ck_assert_int_eq(hostmem_regions(h, iov, 4), 1);
    ck_assert_ptr_eq(iov[0].iov_base, info.base);
    ck_assert_uint_eq(iov[0].iov_len, size);
    hostmem_free(h);
    hostmem_free(NULL);
}
END_TEST

// alloc_huge (util.h, the CPU arena's and the benches' big buffers): 4 KiB-aligned below 2 MiB,
// 2 MiB-aligned and THP-eligible from 2 MiB on, every byte writable.
START_TEST(test_alloc_huge) {
    static const size_t sizes[] = {0, 1, 4097, 2 * MiB - 1, 2 * MiB, 3 * MiB + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = alloc_huge(sizes[i]);
        ck_assert_ptr_nonnull(p);
        const int big = sizes[i] >= 2 * MiB;
        ck_assert_msg((uintptr_t)p % (big ? 2 * MiB : 4096) == 0, "%zu bytes at %p", sizes[i], (void *)p);
        memset(p, 0x5A, sizes[i]);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) // their allocators place it themselves
        if (big && thp_enabled()) ck_assert_int_eq(smaps_field(p, "THPeligible:"), 1);
#endif
        free(p);
    }
}
END_TEST

START_TEST(test_budget_errors) {
    hostmem_opts_t o = {.size = 64 * MiB, .budget = 32 * MiB, .numa_node = -1, .quiet = 1, .faults = ""};
    hostmem_t *h = NULL;
    char err[1024];
    ck_assert_int_eq(hostmem_init(&h, &o, err, sizeof err), -ENOMEM);
    ck_assert_ptr_null(h);
    ck_assert_msg(strstr(err, "--host-budget 32.0 MiB") && strstr(err, "needs 64.0 MiB"), "%s", err);

    // allocations within a budgeted pool: the error names the budget and the request
    o.size = 8 * MiB;
    o.budget = 8 * MiB;
    ck_assert_msg(hostmem_init(&h, &o, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(hostmem_alloc(h, 6 * MiB, "shard 0 o32", err, sizeof err));
    ck_assert_ptr_null(hostmem_alloc(h, 3 * MiB, "shard 1 o32", err, sizeof err));
    ck_assert_msg(strstr(err, "--host-budget 8.0 MiB") && strstr(err, "'shard 1 o32' needs 3.0 MiB") &&
                  strstr(err, "6.0 MiB"), "%s", err);
    hostmem_free(h);

    // size 0 = sized from the budget (and MemAvailable)
    o.size = 0;
    o.budget = 4 * MiB;
    ck_assert_msg(hostmem_init(&h, &o, err, sizeof err) == 0, "%s", err);
    hostmem_info_t info;
    hostmem_info(h, &info);
    ck_assert_uint_eq(info.size, 4 * MiB);
    hostmem_free(h);
}
END_TEST

START_TEST(test_memavailable) {
    uint64_t avail = hostmem_mem_available();
    ck_assert_uint_gt(avail, 0);
    FILE *f = fopen("/proc/meminfo", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f)) if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    // MemAvailable moves while we read it: within 256 MiB
    ck_assert_uint_lt(llabs((long long)(avail - kb * 1024)), 256 * MiB);
    hostmem_opts_t o = {.size = avail + (1ull << 40), .numa_node = -1, .quiet = 1, .faults = ""};
    hostmem_t *h = NULL;
    char err[1024];
    ck_assert_int_eq(hostmem_init(&h, &o, err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "MemAvailable") && strstr(err, "needs"), "%s", err);
}
END_TEST

// ---------------------------------------------------------------- numa

START_TEST(test_numa_placement) {
    if (numa_available() < 0) {
        fprintf(stderr, "test_numa_placement: no NUMA support, placement unchecked\n");
        return;
    }
    int auto_node = hostmem_pick_node(NULL, 0, NULL);
    const char *why = NULL;
    const int cpu_node = hostmem_pick_node(NULL, 1, &why); // no GPU in use: one node, or the CPU's
    ck_assert_int_ge(cpu_node, 0);
    ck_assert_int_le(cpu_node, numa_max_node());
    if (numa_max_node() == 0) ck_assert_msg(auto_node == 0 && strcmp(why, "the only node") == 0, "%d, %s", auto_node, why);
    ck_assert_int_ge(auto_node, 0);
    ck_assert_int_le(auto_node, numa_max_node());
    for (int pass = 0; pass < 2; pass++) {
        int want = pass == 0 ? 0 : -1; // explicit node 0, then auto
        hostmem_t *h = open_pool(pool_size(), 0, want, NULL);
        hostmem_info_t info;
        hostmem_info(h, &info);
        int expect = want >= 0 ? want : auto_node;
        ck_assert_int_eq(info.node, expect);
        char *base = info.base;
        // policy: MPOL_BIND to exactly that node
        int mode = -1;
        unsigned long mask[16] = {0};
        ck_assert_int_eq(get_mempolicy(&mode, mask, sizeof mask * 8, base, MPOL_F_ADDR), 0);
        ck_assert_int_eq(mode, MPOL_BIND);
        ck_assert(mask[expect / 64] & (1ul << (expect % 64)));
        // placement: every sampled page is resident on it (move_pages with nodes=NULL queries)
        enum { NP = 64 };
        void *pages[NP];
        int status[NP];
        for (int i = 0; i < NP; i++) pages[i] = base + (info.size / NP) * (uint64_t)i / 4096 * 4096;
        ck_assert_int_eq(move_pages(0, NP, pages, NULL, status, 0), 0);
        for (int i = 0; i < NP; i++) ck_assert_msg(status[i] == expect, "page %d on node %d, want %d", i, status[i], expect);
        int node = -1;
        ck_assert_int_eq(get_mempolicy(&node, NULL, 0, base + info.size - 4096, MPOL_F_NODE | MPOL_F_ADDR), 0);
        ck_assert_int_eq(node, expect);
        hostmem_free(h);
    }
    // a node that does not exist is an explained error
    hostmem_opts_t o = {.size = 4 * MiB, .numa_node = numa_max_node() + 7, .quiet = 1, .faults = ""};
    hostmem_t *h = NULL;
    char err[512], want[64];
    ck_assert_int_eq(hostmem_init(&h, &o, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "--numa-node %d", numa_max_node() + 7);
    ck_assert_msg(strstr(err, want) && strstr(err, "NUMA nodes 0-"), "%s", err);
}
END_TEST

// ---------------------------------------------------------------- pinning, huge pages, report

START_TEST(test_pin_and_report) {
    hostmem_opts_t o = {.size = pool_size(), .numa_node = -1, .pin = 1, .hugepages = 1, .faults = ""};
    hostmem_t *h = NULL;
    char err[1024];
    tu_stderr_begin();
    int rc = hostmem_init(&h, &o, err, sizeof err);
    char *text = tu_stderr_end();
    ck_assert_msg(rc == 0, "%s", err);
    hostmem_info_t info;
    hostmem_info(h, &info);
    // the init report: one line with the size and how long the touch took
    ck_assert_msg(count(text, "tiertrain: host pool: ") >= 1 && strstr(text, "touched in") && strstr(text, " ms ("), "%s", text);
    ck_assert(info.touch_ms >= 0);
    if (info.pinned) {
        // every page locked: the mapping's Locked (kB) covers the pool (AddressSanitizer
        // and ThreadSanitizer intercept mlock and ignore it, so only without them)
        ck_assert_int_eq(info.notices, 0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        ck_assert_int_ge(smaps_field(info.base, "Locked:") * 1024, (long)info.size);
#endif
        ck_assert_ptr_nonnull(strstr(text, "pinned"));
    } else {
        ck_assert_int_eq(info.notices, 1);
        ck_assert_ptr_nonnull(strstr(text, "ulimit -l"));
    }
    // huge-page advice took: the range is THP-eligible where THP is enabled at all
    if (thp_enabled()) {
        ck_assert_int_eq(info.hugepages, 1);
        ck_assert_int_eq(smaps_field(info.base, "THPeligible:"), 1);
    }
    free(text);
    hostmem_free(h);
}
END_TEST

START_TEST(test_pin_fallback_notice_once) {
    hostmem_opts_t o = {.size = pool_size(), .numa_node = -1, .pin = 1, .hugepages = 1, .faults = "nomlock"};
    hostmem_t *h = NULL;
    char err[1024];
    tu_stderr_begin();
    int rc = hostmem_init(&h, &o, err, sizeof err);
    char *text = tu_stderr_end();
    ck_assert_msg(rc == 0, "%s", err);
    hostmem_info_t info;
    hostmem_info(h, &info);
    ck_assert_int_eq(info.pinned, 0);
    ck_assert_int_eq(info.notices, 1);
    ck_assert_msg(count(text, "not pinned: locking") == 1 && count(text, "ulimit -l") == 1 && strstr(text, "RLIMIT_MEMLOCK"), "%s", text);
    // still a working pool
    char *p = hostmem_alloc(h, MiB, "x", err, sizeof err);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, MiB);
    free(text);
    hostmem_free(h);
}
END_TEST

static int fake_pin_calls, fake_unpin_calls;
static int fake_pin(void *addr, size_t len, void *arg) {
    (void)addr; (void)len;
    ck_assert_ptr_eq(arg, &fake_pin_calls);
    fake_pin_calls++;
    return 0;
}
static int fake_unpin(void *addr, size_t len, void *arg) {
    (void)addr; (void)len; (void)arg;
    fake_unpin_calls++;
    return 0;
}

START_TEST(test_pin_hook) {
    // the CUDA backend pins with cudaHostRegister through this hook
    hostmem_opts_t o = {.size = 4 * MiB, .numa_node = -1, .pin = 1, .quiet = 1, .faults = "",
                        .pin_fn = fake_pin, .unpin_fn = fake_unpin, .pin_arg = &fake_pin_calls};
    hostmem_t *h = NULL;
    char err[512];
    ck_assert_msg(hostmem_init(&h, &o, err, sizeof err) == 0, "%s", err);
    hostmem_info_t info;
    hostmem_info(h, &info);
    ck_assert_int_eq(info.pinned, 1);
    ck_assert_int_eq(fake_pin_calls, 1);
    hostmem_free(h);
    ck_assert_int_eq(fake_unpin_calls, 1);
}
END_TEST

// ---------------------------------------------------------------- concurrency

typedef struct { hostmem_t *h; char *got[64]; } alloc_arg_t;
static void *allocator(void *arg) {
    alloc_arg_t *a = arg;
    char err[256];
    for (int i = 0; i < 64; i++) {
        a->got[i] = hostmem_alloc(a->h, 8192, "thread", err, sizeof err);
        if (a->got[i]) memset(a->got[i], 0x11, 8192);
    }
    return NULL;
}

static int cmp_ptr(const void *x, const void *y) {
    char *a = *(char *const *)x, *b = *(char *const *)y;
    return a < b ? -1 : a > b;
}

START_TEST(test_concurrent_alloc) {
    enum { NT = 4 };
    hostmem_t *h = open_pool(4 * MiB, 0, -1, NULL);
    pthread_t th[NT];
    alloc_arg_t a[NT];
    for (int i = 0; i < NT; i++) {
        a[i].h = h;
        ck_assert_int_eq(pthread_create(&th[i], NULL, allocator, &a[i]), 0);
    }
    char *all[NT * 64];
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        for (int k = 0; k < 64; k++) {
            ck_assert_ptr_nonnull(a[i].got[k]);
            all[i * 64 + k] = a[i].got[k];
        }
    }
    qsort(all, NT * 64, sizeof all[0], cmp_ptr);
    for (int i = 1; i < NT * 64; i++) ck_assert_msg(all[i] - all[i - 1] >= 8192, "allocations overlap");
    hostmem_info_t info;
    hostmem_info(h, &info);
    ck_assert_uint_eq(info.used, NT * 64 * 8192);
    hostmem_free(h);
}
END_TEST

int main(void) {
    Suite *su = suite_create("hostmem");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, tu_sanitized() ? 300 : 60);
    tcase_add_test(tc, test_alloc_alignment);
    tcase_add_test(tc, test_alloc_huge);
    tcase_add_test(tc, test_budget_errors);
    tcase_add_test(tc, test_memavailable);
    tcase_add_test(tc, test_concurrent_alloc);
    suite_add_tcase(su, tc);
    tc = tcase_create("numa");
    tcase_set_timeout(tc, tu_sanitized() ? 300 : 60);
    tcase_add_test(tc, test_numa_placement);
    suite_add_tcase(su, tc);
    tc = tcase_create("pinning");
    tcase_set_timeout(tc, tu_sanitized() ? 300 : 60);
    tcase_add_test(tc, test_pin_and_report);
    tcase_add_test(tc, test_pin_fallback_notice_once);
    tcase_add_test(tc, test_pin_hook);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
