// test_io.c — the io engine (io/io.h): byte-exact round trips over engines × queue
// depths × block sizes × paths, concurrent submitters, every injected fault, the space
// check, registration and engine fallbacks, O_DIRECT refusal, striping layout, CRC32C.
// Rings are created inside each test (Check forks per test; a ring does not survive it).
// Tests that need O_DIRECT skip (exit 77) when $TMPDIR's filesystem refuses it.
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "crc32c.h"
#include "io.h"
#include "testutil.h"
#include "util.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

// ---------------------------------------------------------------- helpers

static int direct_ok;        // $TMPDIR's filesystem takes O_DIRECT (set in main)
static char *tmp;            // this test's directory (each test runs in its own fork)
static char sub[2][4200];    // two subdirectories: the two-path stores

static void setup_dir(void) {
    tmp = tu_tmpdir("io");
    ck_assert_ptr_nonnull(tmp);
    for (int i = 0; i < 2; i++) {
        snprintf(sub[i], sizeof sub[i], "%s/p%d", tmp, i);
        ck_assert_int_eq(mkdir(sub[i], 0700), 0);
    }
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void teardown_dir(void) {
    if (!tmp) return;
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(count_entries(sub[i]) == 0, "files left behind in %s", sub[i]);
        rmdir(sub[i]);
    }
    ck_assert_msg(count_entries(tmp) == 0, "files left behind in %s", tmp);
    rmdir(tmp);
    free(tmp);
    tmp = NULL;
}

static char paths2[8500];
static const char *paths_for(int npaths) {
    if (npaths == 1) return sub[0];
    snprintf(paths2, sizeof paths2, "%s,%s", sub[0], sub[1]);
    return paths2;
}

static nvme_store_t *open_store(io_engine_kind_t eng, int npaths, uint64_t size, uint64_t block, int qd, const char *faults) {
    nvme_store_opts_t o = {0};
    o.paths = paths_for(npaths);
    o.size = size;
    o.block = block;
    o.qd = qd;
    o.engine = eng;
    o.faults = faults ? faults : "";
    o.quiet = 1;
    nvme_store_t *s = NULL;
    char err[1024];
    int rc = nvme_store_init(&s, &o, err, sizeof err);
    ck_assert_msg(rc == 0, "nvme_store_init: %d %s", rc, err);
    return s;
}

static void *abuf(uint64_t n) {
    void *p = NULL;
    ck_assert_int_eq(posix_memalign(&p, 4096, n ? n : 4096), 0);
    return p;
}

static void fill(void *p, uint64_t n, uint64_t seed) {
    uint64_t *w = p;
    for (uint64_t i = 0; i < n / 8; i++) w[i] = splitmix64(&seed);
}

static void assert_same(const char *what, const unsigned char *got, const unsigned char *want, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            ck_abort_msg("%s: first mismatch at byte %llu (4 KiB page %llu): got 0x%02x want 0x%02x", what,
                         (unsigned long long)i, (unsigned long long)(i / 4096), got[i], want[i]);
}

// Splits [0, size) into extents of random 4 KiB-multiple lengths (up to max_len).
static int partition(uint64_t size, uint64_t max_len, uint64_t *seed, uint64_t *off, uint64_t *len, int cap) {
    int n = 0;
    for (uint64_t at = 0; at < size && n < cap; n++) {
        uint64_t pages = 1 + splitmix64(seed) % (max_len / 4096);
        uint64_t l = pages * 4096;
        if (l > size - at || n == cap - 1) l = size - at;
        off[n] = at;
        len[n] = l;
        at += l;
    }
    return n;
}

static void shuffle(int *idx, int n, uint64_t *seed) {
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(splitmix64(seed) % (uint64_t)(i + 1));
        int t = idx[i]; idx[i] = idx[j]; idx[j] = t;
    }
}

static void wait_ok(io_ticket_t *t) {
    int rc = io_ticket_wait(t);
    char msg[1024];
    ck_assert_msg(rc == 0, "ticket failed: %s", io_ticket_message(t, msg, sizeof msg));
}

// n bytes of fill(seed) written at off and read back (into a zeroed buffer) through s, every
// ticket succeeding and the bytes the same (what names the case in a mismatch).
static void round_trip(nvme_store_t *s, uint64_t off, uint64_t n, uint64_t seed, const char *what) {
    unsigned char *b = abuf(n), *r = abuf(n);
    fill(b, n, seed);
    memset(r, 0, n);
    io_ticket_t t = {0};
    ck_assert_int_eq(nvme_store_write(s, &t, off, n, b), 0);
    wait_ok(&t);
    ck_assert_int_eq(nvme_store_read(s, &t, off, n, r, 0), 0);
    wait_ok(&t);
    assert_same(what, r, b, n);
    free(b);
    free(r);
}

static double mono_now_ms(void) { // the clock the store's busy time reads
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int count_lines_with(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static uint64_t scaled(uint64_t n) { return tu_sanitized() ? n / 4 : n; }

// ---------------------------------------------------------------- crc32c

START_TEST(test_crc_known) {
    const char *s = "123456789";
    ck_assert_uint_eq(crc32c(0, s, 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c_sw(0, s, 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c(0, s, 0), 0);
    unsigned char zeros[32] = {0};
    ck_assert_uint_eq(crc32c(0, zeros, 32), 0x8A9136AAu); // RFC 3720 B.4: 32 bytes of zeros
}
END_TEST

START_TEST(test_crc_hw_matches_sw) {
    unsigned char *b = abuf(8192);
    fill(b, 8192, 7);
    for (size_t start = 0; start < 9; start++)
        for (size_t n = 0; n < 300; n++)
            ck_assert_uint_eq(crc32c(0, b + start, n), crc32c_sw(0, b + start, n));
    ck_assert_uint_eq(crc32c(0, b, 8192), crc32c_sw(0, b, 8192));
    // incremental == whole
    uint32_t c = crc32c(0, b, 1000);
    c = crc32c(c, b + 1000, 7192);
    ck_assert_uint_eq(c, crc32c(0, b, 8192));
    free(b);
    // the 3-way interleaved paths: around 3·256 and 3·8192 bytes, and a long odd run
    uint64_t n = 3 * MiB + 4099;
    b = abuf(n);
    fill(b, n / 8 * 8, 8);
    static const size_t lens[] = {767, 768, 769, 3 * 256 + 8, 24575, 24576, 24577, 24576 + 768 + 13, 49152 * 3 + 7};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (size_t start = 0; start < 3; start++)
            ck_assert_msg(crc32c(0x1234, b + start, lens[i]) == crc32c_sw(0x1234, b + start, lens[i]), "len %zu start %zu", lens[i], start);
    ck_assert_uint_eq(crc32c(0, b + 1, n - 1), crc32c_sw(0, b + 1, n - 1));
    free(b);
}
END_TEST

// ---------------------------------------------------------------- round trips

static const int qds[] = {1, 4, 32};
static const uint64_t blocks[] = {4 * KiB, 64 * KiB, MiB};
#define N_SWEEP (2 * 3 * 3 * 2)

START_TEST(test_roundtrip) {
    // _i → engine × qd × block × paths
    io_engine_kind_t eng = (_i % 2) ? IO_ENGINE_PSYNC : IO_ENGINE_URING;
    int qd = qds[(_i / 2) % 3];
    uint64_t block = blocks[(_i / 6) % 3];
    int npaths = 1 + (_i / 18) % 2;
    uint64_t size = scaled(8 * MiB) + (npaths == 2 ? block : 0) * 3 / 2 / 4096 * 4096; // odd stripe tail
    uint64_t seed = 1000 + (uint64_t)_i;
    setup_dir();
    nvme_store_t *s = open_store(eng, npaths, size, block, qd, NULL);
    io_info_t info;
    nvme_store_info(s, &info);
    ck_assert_str_eq(info.engine, eng == IO_ENGINE_PSYNC ? "psync" : "io_uring");
    ck_assert_int_eq(info.npaths, npaths);

    unsigned char *image = abuf(size), *rbuf = abuf(size);
    fill(image, size, seed);
    enum { CAP = 512 };
    uint64_t off[CAP], len[CAP];
    int idx[CAP];
    io_ticket_t *t = calloc(CAP, sizeof *t);

    // phase 1: write the whole store as random extents, submitted in random order
    int n = partition(size, 3 * block + 4096, &seed, off, len, CAP);
    shuffle(idx, n, &seed);
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        ck_assert_int_eq(nvme_store_write(s, &t[i], off[i], len[i], image + off[i]), 0);
    }
    for (int i = 0; i < n; i++) wait_ok(&t[i]);

    // phase 2: read it back through a different partition
    memset(rbuf, 0xEE, size);
    n = partition(size, 2 * block + 8192, &seed, off, len, CAP);
    shuffle(idx, n, &seed);
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        ck_assert_int_eq(nvme_store_read(s, &t[i], off[i], len[i], rbuf + off[i], 0), 0);
    }
    for (int i = 0; i < n; i++) wait_ok(&t[i]);
    assert_same("phase 2 read", rbuf, image, size);

    // phase 3: overwrite every other extent with new bytes, then read all as one extent
    for (int i = 0; i < n; i += 2) {
        fill(image + off[i], len[i], seed + 77 + (uint64_t)i);
        ck_assert_int_eq(nvme_store_write(s, &t[i], off[i], len[i], image + off[i]), 0);
    }
    for (int i = 0; i < n; i += 2) wait_ok(&t[i]);
    memset(rbuf, 0xEE, size);
    ck_assert_int_eq(nvme_store_read(s, &t[0], 0, size, rbuf, 0), 0);
    wait_ok(&t[0]);
    assert_same("phase 3 read", rbuf, image, size);

    io_stats_t st;
    nvme_store_stats(s, &st);
    ck_assert_uint_eq(st.errors, 0);
    ck_assert_uint_ge(st.bytes_read, 2 * size);
    ck_assert_uint_ge(st.pieces_read, CEIL_DIV(size, block));
    nvme_store_free(s);
    free(t);
    free(image);
    free(rbuf);
    teardown_dir();
}
END_TEST

// Stripe layout on disk: stripe k of the store is in file k % 2 at (k / 2)·block.
START_TEST(test_layout_striped) {
    setup_dir();
    uint64_t block = 64 * KiB, size = 20 * block + 8192;
    nvme_store_opts_t o = {.paths = paths_for(2), .size = size, .block = block, .qd = 8, .keep = 1, .quiet = 1, .faults = ""};
    nvme_store_t *s = NULL;
    char err[1024];
    ck_assert_msg(nvme_store_init(&s, &o, err, sizeof err) == 0, "%s", err);
    io_info_t info;
    nvme_store_info(s, &info);
    ck_assert_uint_eq(info.file_size, 11 * block); // ceil(21 stripes / 2) stripes each
    unsigned char *img = abuf(size);
    fill(img, size, 5);
    io_ticket_t t = {0};
    ck_assert_int_eq(nvme_store_write(s, &t, 0, size, img), 0);
    wait_ok(&t);
    char f0[4200], f1[4200];
    snprintf(f0, sizeof f0, "%s", nvme_store_file(s, 0));
    snprintf(f1, sizeof f1, "%s", nvme_store_file(s, 1));
    ck_assert_ptr_nonnull(strstr(f0, sub[0]));
    ck_assert_ptr_nonnull(strstr(f1, sub[1]));
    for (uint64_t k = 0; k * block < size; k++) {
        int file;
        uint64_t foff;
        nvme_store_locate(s, k * block + 4096, &file, &foff);
        ck_assert_int_eq(file, (int)(k % 2));
        ck_assert_uint_eq(foff, (k / 2) * block + 4096);
    }
    nvme_store_free(s);
    int fd[2] = {open(f0, O_RDONLY), open(f1, O_RDONLY)};
    ck_assert(fd[0] >= 0 && fd[1] >= 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd[0], &st), 0);
    ck_assert_int_eq(st.st_size, (off_t)(11 * block));
    unsigned char *chunk = abuf(block);
    for (uint64_t k = 0; k * block < size; k++) {
        uint64_t n = size - k * block < block ? size - k * block : block;
        ck_assert_int_eq(pread(fd[k % 2], chunk, n, (off_t)((k / 2) * block)), (ssize_t)n);
        assert_same("stripe", chunk, img + k * block, n);
    }
    close(fd[0]);
    close(fd[1]);
    unlink(f0);
    unlink(f1);
    free(chunk);
    free(img);
    teardown_dir();
}
END_TEST

// ---------------------------------------------------------------- concurrency

typedef struct {
    nvme_store_t *s;
    uint64_t base, span;
    int iters;
    uint64_t seed;
    int failed;
    char why[512];
} worker_arg_t;

static void *worker(void *arg) {
    worker_arg_t *a = arg;
    unsigned char *img = NULL, *rb = NULL;
    if (posix_memalign((void **)&img, 4096, a->span) || posix_memalign((void **)&rb, 4096, a->span)) { a->failed = 1; return NULL; }
    io_ticket_t t[16];
    memset(t, 0, sizeof t);
    uint64_t off[16], len[16];
    for (int it = 0; it < a->iters && !a->failed; it++) {
        fill(img, a->span, a->seed + (uint64_t)it);
        int n = partition(a->span, a->span / 4, &a->seed, off, len, 16);
        for (int i = 0; i < n; i++) nvme_store_write(a->s, &t[i], a->base + off[i], len[i], img + off[i]);
        for (int i = 0; i < n; i++) if (io_ticket_wait(&t[i])) { a->failed = 1; io_ticket_message(&t[i], a->why, sizeof a->why); }
        memset(rb, 0, a->span);
        n = partition(a->span, a->span / 3, &a->seed, off, len, 16);
        for (int i = 0; i < n; i++) nvme_store_read(a->s, &t[i], a->base + off[i], len[i], rb + off[i], 0);
        for (int i = 0; i < n; i++) if (io_ticket_wait(&t[i])) { a->failed = 1; io_ticket_message(&t[i], a->why, sizeof a->why); }
        if (!a->failed && memcmp(rb, img, a->span) != 0) { a->failed = 1; snprintf(a->why, sizeof a->why, "data mismatch in iteration %d", it); }
    }
    free(img);
    free(rb);
    return NULL;
}

START_TEST(test_threads_disjoint) {
    setup_dir();
    enum { NT = 4 };
    uint64_t span = scaled(4 * MiB);
    nvme_store_t *s = open_store(_i ? IO_ENGINE_PSYNC : IO_ENGINE_URING, 1 + _i % 2, NT * span, 64 * KiB, 8, NULL);
    pthread_t th[NT];
    worker_arg_t a[NT];
    for (int i = 0; i < NT; i++) {
        a[i] = (worker_arg_t){.s = s, .base = (uint64_t)i * span, .span = span, .iters = tu_sanitized() ? 2 : 4, .seed = 99 + (uint64_t)i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &a[i]), 0);
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < NT; i++) ck_assert_msg(!a[i].failed, "thread %d: %s", i, a[i].why);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

static _Atomic int cb_calls;
static _Atomic int cb_res = 12345;
static void count_cb(io_ticket_t *t, void *arg) {
    ck_assert_ptr_eq(arg, (void *)&cb_calls);
    atomic_store(&cb_res, t->res);
    atomic_fetch_add(&cb_calls, 1);
}

START_TEST(test_callback_and_free_drains) {
    setup_dir();
    nvme_store_t *s = open_store(_i ? IO_ENGINE_PSYNC : IO_ENGINE_URING, 1, 4 * MiB, 64 * KiB, 4, NULL);
    unsigned char *b = abuf(4 * MiB);
    fill(b, 4 * MiB, 3);
    atomic_store(&cb_calls, 0);
    io_ticket_t t = {0};
    io_req_t r = {.op = IO_WRITE, .off = 0, .len = MiB, .buf = b, .name = "cb", .cb = count_cb, .cb_arg = (void *)&cb_calls};
    ck_assert_int_eq(nvme_store_submit(s, &t, &r), 0);
    ck_assert_int_eq(io_ticket_wait(&t), 0);
    ck_assert_int_eq(atomic_load(&cb_calls), 1);
    ck_assert_int_eq(atomic_load(&cb_res), 0);
    ck_assert(io_ticket_poll(&t));
    // free with requests still queued: it waits for them
    io_ticket_t many[4];
    memset(many, 0, sizeof many);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(nvme_store_write(s, &many[i], (uint64_t)i * MiB, MiB, b + i * MiB), 0);
    nvme_store_free(s);
    for (int i = 0; i < 4; i++) {
        ck_assert(io_ticket_poll(&many[i]));
        ck_assert_int_eq(many[i].res, 0);
    }
    free(b);
    teardown_dir();
}
END_TEST

// ---------------------------------------------------------------- faults

#define ENG(i) ((i) ? IO_ENGINE_PSYNC : IO_ENGINE_URING)

START_TEST(test_fault_eio) {
    setup_dir();
    uint64_t block = 64 * KiB;
    nvme_store_t *s = open_store(ENG(_i), 1, 8 * MiB, block, 4, NULL);
    unsigned char *b = abuf(4 * MiB), *r = abuf(4 * MiB);
    fill(b, 4 * MiB, 11);
    char err[512], msg[1024];
    // the 3rd piece of a 1 MiB write at store offset 2 MiB fails: file offset 2 MiB + 128 KiB
    ck_assert_int_eq(nvme_store_inject(s, "eio@3", err, sizeof err), 0);
    io_ticket_t t = {0};
    io_req_t req = {.op = IO_WRITE, .off = 2 * MiB, .len = MiB, .buf = b, .name = "shard 7 p16"};
    ck_assert_int_eq(nvme_store_submit(s, &t, &req), 0);
    ck_assert_int_eq(io_ticket_wait(&t), -EIO);
    io_ticket_message(&t, msg, sizeof msg);
    ck_assert_msg(strstr(msg, nvme_store_file(s, 0)) != NULL, "message lacks the file: %s", msg);
    ck_assert_msg(strstr(msg, "offset 2228224") != NULL, "message lacks the file offset: %s", msg);
    ck_assert_msg(strstr(msg, "shard 7 p16") && strstr(msg, "write") && strstr(msg, "Input/output error"), "%s", msg);
    ck_assert_int_eq(t.err_file, 0);
    ck_assert_uint_eq(t.err_foff, 2 * MiB + 2 * block);

    // the store keeps working; a failing read among several good requests does not hang them
    ck_assert_int_eq(nvme_store_write(s, &t, 0, 4 * MiB, b), 0);
    wait_ok(&t);
    ck_assert_int_eq(nvme_store_inject(s, "read:eio@5", err, sizeof err), 0);
    io_ticket_t rt[4];
    memset(rt, 0, sizeof rt);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(nvme_store_read(s, &rt[i], (uint64_t)i * MiB, MiB, r + i * MiB, 0), 0);
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        int rc = io_ticket_wait(&rt[i]);
        if (rc) {
            failed++;
            ck_assert_int_eq(rc, -EIO);
            io_ticket_message(&rt[i], msg, sizeof msg);
            ck_assert_msg(strstr(msg, "nvme read") && strstr(msg, nvme_store_file(s, 0)), "%s", msg);
        } else {
            assert_same("good read", r + i * MiB, b + i * MiB, MiB);
        }
    }
    ck_assert_int_eq(failed, 1);
    io_stats_t st;
    nvme_store_stats(s, &st);
    ck_assert_uint_eq(st.errors, 2);
    nvme_store_free(s);
    free(b);
    free(r);
    teardown_dir();
}
END_TEST

START_TEST(test_fault_errno_named) {
    setup_dir();
    nvme_store_t *s = open_store(ENG(_i), 2, 4 * MiB, 64 * KiB, 8, "write:errno=ENOSPC@2,read:errno=5@1");
    unsigned char *b = abuf(MiB);
    fill(b, MiB, 1);
    io_ticket_t t = {0};
    char msg[1024];
    ck_assert_int_eq(nvme_store_write(s, &t, 0, MiB, b), 0);
    ck_assert_int_eq(io_ticket_wait(&t), -ENOSPC);
    // piece 2 is stripe 1: the second path's file, offset 0
    ck_assert_int_eq(t.err_file, 1);
    ck_assert_uint_eq(t.err_foff, 0);
    io_ticket_message(&t, msg, sizeof msg);
    ck_assert_msg(strstr(msg, nvme_store_file(s, 1)) && strstr(msg, "offset 0:") && strstr(msg, "No space left"), "%s", msg);
    ck_assert_int_eq(nvme_store_read(s, &t, 0, MiB, b, 0), 0);
    ck_assert_int_eq(io_ticket_wait(&t), -EIO);
    nvme_store_free(s);
    free(b);
    teardown_dir();
}
END_TEST

START_TEST(test_fault_short) {
    setup_dir();
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, 256 * KiB, 4, "short@2,short@5,read:short@1,read:short@3");
    round_trip(s, 0, 2 * MiB, 21, "after short transfers");
    io_stats_t st;
    nvme_store_stats(s, &st);
    ck_assert_uint_ge(st.shorts, 4);
    ck_assert_uint_eq(st.errors, 0);
    ck_assert_uint_eq(st.bytes_written, 2 * MiB);
    ck_assert_uint_eq(st.bytes_read, 2 * MiB);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

START_TEST(test_fault_eagain) {
    setup_dir();
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, 64 * KiB, 8, "eagain@1,eagain@4,read:eagain@2");
    round_trip(s, MiB, MiB, 31, "after EAGAIN");
    io_stats_t st;
    nvme_store_stats(s, &st);
    ck_assert_uint_eq(st.retries, 3);
    ck_assert_uint_eq(st.errors, 0);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

// slow=MS holds each piece of the op, from arming on, at least MS ms: the store's own busy time
// for the writes counts each (usleep never sleeps less), and the bytes are the same; a bad
// value is an explained setup error.
START_TEST(test_fault_slow) {
    setup_dir();
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, 64 * KiB, 1, "write:slow=20");
    round_trip(s, 0, 256 * KiB, 7, "after slow writes"); // 4 pieces, one in flight at a time
    io_stats_t st;
    nvme_store_stats(s, &st);
    ck_assert_msg(st.busy_ms[IO_WRITE] >= 4 * 20, "4 pieces held 20 ms each: busy %.1f ms", st.busy_ms[IO_WRITE]);
    ck_assert_uint_eq(st.errors, 0);
    char err[512];
    ck_assert_int_eq(nvme_store_inject(s, "read:slow=x", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "io fault 'read:slow=x': not understood") && strstr(err, "slow=MS"), "%s", err);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

// Turns: a read submitted behind a long write gets the device after one turn of the write
// (2 x qd x block), not after the whole write; and the two ops' busy spells never overlap,
// so their sum fits in the wall time. Each write piece is held 20 ms (slow=20), so the read
// would wait ~300 ms behind the write in one queue.
START_TEST(test_turns) {
    setup_dir();
    const uint64_t block = 64 * KiB, wlen = 32 * block, turn = 2 * 2 * block;
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, block, 2, "write:slow=20");
    unsigned char *w = abuf(wlen), *r = abuf(block), *back = abuf(block);
    fill(w, wlen, 11);
    fill(back, block, 12);
    io_ticket_t tw = {0}, tr = {0};
    ck_assert_int_eq(nvme_store_write(s, &tw, wlen, block, back), 0); // the read's extent, written first
    wait_ok(&tw);
    io_stats_t before, at_submit, at_read, after;
    nvme_store_stats(s, &before);
    const double t0 = mono_now_ms();
    ck_assert_int_eq(nvme_store_write(s, &tw, 0, wlen, w), 0);
    ck_assert_int_eq(nvme_store_read(s, &tr, wlen, block, r, 0), 0);
    nvme_store_stats(s, &at_submit); // a loaded machine may stall this thread past the first turn
    wait_ok(&tr);
    nvme_store_stats(s, &at_read);
    wait_ok(&tw);
    const double wall = mono_now_ms() - t0;
    nvme_store_stats(s, &after);
    assert_same("the read behind the write", r, back, block);
    // the read waits for one turn, or (when this thread was late) for the pieces in flight
    // when it came: 2 at a time
    const uint64_t written = at_read.bytes_written - before.bytes_written;
    const uint64_t late = at_submit.bytes_written - before.bytes_written + 2 * block;
    ck_assert_msg(written <= (turn > late ? turn : late), "the read waited for %llu written bytes; one turn is %llu",
                  (unsigned long long)written, (unsigned long long)turn);
    const double busy = after.busy_ms[IO_READ] - before.busy_ms[IO_READ] + after.busy_ms[IO_WRITE] -
                        before.busy_ms[IO_WRITE];
    ck_assert_msg(busy <= wall + 0.5, "busy spells overlap: %.1f ms read + write in %.1f ms", busy, wall);
    ck_assert_msg(busy >= 32 * 20 / 2, "32 pieces of 20 ms, 2 at a time: busy %.1f ms", busy);
    round_trip(s, 0, wlen, 13, "after turns");
    free(w);
    free(r);
    free(back);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

// Urgent requests (io_req_t.urgent): one queued behind a long read and a short one gets the
// device once the long read's pieces in flight have drained, ahead of both, and one read
// submitted during a long write ends the write's turn the same way (a plain read waits a
// whole turn: test_turns). Each piece is held 20 ms (slow=20), 2 in flight.
START_TEST(test_urgent) {
    setup_dir();
    const uint64_t block = 64 * KiB, len = 32 * block, qd = 2;
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, block, (int)qd, "read:slow=20");
    unsigned char *w = abuf(len + 2 * block), *a = abuf(len), *b = abuf(block), *u = abuf(block);
    fill(w, len + 2 * block, 21);
    io_ticket_t ta = {0}, tb = {0}, tu = {0};
    ck_assert_int_eq(nvme_store_write(s, &ta, 0, len + 2 * block, w), 0);
    wait_ok(&ta);
    io_stats_t before, at_submit, at_u;
    nvme_store_stats(s, &before);
    ck_assert_int_eq(nvme_store_read(s, &ta, 0, len, a, 0), 0);
    ck_assert_int_eq(nvme_store_read(s, &tb, len, block, b, 0), 0);
    io_req_t r = {.op = IO_READ, .off = len + block, .len = block, .buf = u, .urgent = 1};
    ck_assert_int_eq(nvme_store_submit(s, &tu, &r), 0);
    nvme_store_stats(s, &at_submit); // after: a stall between the two only raises the bound
    wait_ok(&tu);
    nvme_store_stats(s, &at_u);
    ck_assert_msg(!io_ticket_poll(&tb), "the plain read queued before the urgent one finished first");
    // read before it was seen done: what was done or in flight when it came (this thread may
    // be late), and the qd - 1 pieces that may run beside it (a psync worker that was free)
    const uint64_t ahead = at_u.bytes_read - before.bytes_read - block;
    const uint64_t late = at_submit.bytes_read - before.bytes_read + (2 * qd - 1) * block;
    ck_assert_msg(ahead <= late, "the urgent read waited for %llu bytes; %llu were read, in flight or beside it",
                  (unsigned long long)ahead, (unsigned long long)late);
    wait_ok(&ta);
    wait_ok(&tb);
    assert_same("the long read", a, w, len);
    assert_same("the short read", b, w + len, block);
    assert_same("the urgent read", u, w + len + block, block);
    // an urgent read during a long write: the write's turn ends for it
    nvme_store_free(s);
    s = open_store(ENG(_i), 1, 4 * MiB, block, (int)qd, "write:slow=20");
    ck_assert_int_eq(nvme_store_write(s, &tb, len, block, w + len), 0);
    wait_ok(&tb);
    io_stats_t wb, wsub, wu;
    nvme_store_stats(s, &wb);
    ck_assert_int_eq(nvme_store_write(s, &ta, 0, len, w), 0);
    r = (io_req_t){.op = IO_READ, .off = len, .len = block, .buf = u, .urgent = 1};
    ck_assert_int_eq(nvme_store_submit(s, &tu, &r), 0);
    nvme_store_stats(s, &wsub);
    wait_ok(&tu);
    nvme_store_stats(s, &wu);
    const uint64_t written = wu.bytes_written - wb.bytes_written, wlate = wsub.bytes_written - wb.bytes_written + qd * block;
    ck_assert_msg(written <= wlate, "the urgent read waited for %llu written bytes; %llu were written or in flight at its "
                  "submit", (unsigned long long)written, (unsigned long long)wlate);
    wait_ok(&ta);
    assert_same("the urgent read during the write", u, w + len, block);
    round_trip(s, 0, len, 22, "after urgent");
    free(w);
    free(a);
    free(b);
    free(u);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

// Lazy requests (io_req_t.lazy): a plain read queued behind a long lazy one gets the device
// once a free slot comes, ahead of the lazy one's queued pieces, and the lazy read has at most
// qd / IO_LAZY_SHARE pieces in flight, so it takes at least that many pieces' time per round
// (the injected 20 ms a piece: a lower bound, whatever the machine's speed). qd 4, 2 lazy.
START_TEST(test_lazy) {
    setup_dir();
    const uint64_t block = 64 * KiB, len = 32 * block, qd = 4, cap = qd / IO_LAZY_SHARE;
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, block, (int)qd, "read:slow=20");
    unsigned char *w = abuf(len + block), *a = abuf(len), *b = abuf(block);
    fill(w, len + block, 31);
    io_ticket_t ta = {0}, tb = {0};
    ck_assert_int_eq(nvme_store_write(s, &ta, 0, len + block, w), 0);
    wait_ok(&ta);
    io_stats_t before, at_submit, at_b;
    nvme_store_stats(s, &before);
    const double t0 = mono_now_ms();
    io_req_t r = {.op = IO_READ, .off = 0, .len = len, .buf = a, .lazy = 1};
    ck_assert_int_eq(nvme_store_submit(s, &ta, &r), 0);
    ck_assert_int_eq(nvme_store_read(s, &tb, len, block, b, 0), 0);
    nvme_store_stats(s, &at_submit);
    wait_ok(&tb);
    nvme_store_stats(s, &at_b);
    ck_assert_msg(!io_ticket_poll(&ta), "the lazy read finished before the plain one queued after it");
    // read before it was seen done: what was done or in flight when it came, and the lazy
    // pieces that may run beside it and after it until this thread looks (2 rounds' worth)
    const uint64_t ahead = at_b.bytes_read - before.bytes_read - block;
    const uint64_t late = at_submit.bytes_read - before.bytes_read + (cap + 2 * cap) * block;
    ck_assert_msg(ahead <= late, "the plain read waited for %llu lazy bytes; %llu were read, in flight or beside it",
                  (unsigned long long)ahead, (unsigned long long)late);
    wait_ok(&ta);
    const double wall = mono_now_ms() - t0;
    // 32 pieces, at most cap at a time, 20 ms each (qd at a time would take 32 / qd rounds)
    ck_assert_msg(wall >= (double)(len / block / cap) * 20 * 0.95, "32 lazy pieces of 20 ms, %llu at a time, in %.1f ms",
                  (unsigned long long)cap, wall);
    assert_same("the lazy read", a, w, len);
    assert_same("the plain read", b, w + len, block);
    round_trip(s, 0, len, 32, "after lazy");
    free(w);
    free(a);
    free(b);
    nvme_store_free(s);
    teardown_dir();
}
END_TEST

START_TEST(test_fault_env) {
    setup_dir();
    setenv("TT_IO_FAULT", "eio@2", 1);
    nvme_store_opts_t o = {.paths = sub[0], .size = MiB, .block = 64 * KiB, .engine = ENG(_i), .quiet = 1};
    nvme_store_t *s = NULL;
    char err[1024];
    ck_assert_msg(nvme_store_init(&s, &o, err, sizeof err) == 0, "%s", err);
    unsetenv("TT_IO_FAULT");
    unsigned char *b = abuf(MiB);
    io_ticket_t t = {0};
    ck_assert_int_eq(nvme_store_write(s, &t, 0, MiB, b), 0);
    ck_assert_int_eq(io_ticket_wait(&t), -EIO);
    ck_assert_uint_eq(t.err_foff, 64 * KiB);
    nvme_store_free(s);
    // a malformed spec is an explained setup error
    o.faults = "eio@0";
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "eio@0") && strstr(err, "not understood"), "%s", err);
    ck_assert_ptr_null(s);
    free(b);
    teardown_dir();
}
END_TEST

START_TEST(test_misaligned_refused) {
    setup_dir();
    nvme_store_t *s = open_store(ENG(_i), 1, 4 * MiB, 64 * KiB, 4, NULL);
    unsigned char *b = abuf(2 * MiB);
    io_stats_t before, after;
    nvme_store_stats(s, &before);
    struct { uint64_t off, len; void *buf; const char *why; } bad[] = {
        {100, 4096, b, "offset is not a multiple of 4096"},
        {4096, 5000, b, "length is not a multiple of 4096"},
        {0, 0, b, "length is 0"},
        {0, 4096, b + 512, "buffer is not 4096-byte aligned"},
        {4 * MiB - 4096, 8192, b, "past the end"},
        {UINT64_MAX - 4095, 8192, b, "past the end"},
    };
    char msg[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int op = 0; op < 2; op++) {
            io_ticket_t t = {0};
            int rc = op ? nvme_store_write(s, &t, bad[i].off, bad[i].len, bad[i].buf)
                        : nvme_store_read(s, &t, bad[i].off, bad[i].len, bad[i].buf, 0);
            ck_assert_int_eq(rc, -EINVAL);
            ck_assert(io_ticket_poll(&t));
            ck_assert_int_eq(io_ticket_wait(&t), -EINVAL);
            io_ticket_message(&t, msg, sizeof msg);
            ck_assert_msg(strstr(msg, "refused before submission") && strstr(msg, bad[i].why), "case %zu: %s", i, msg);
        }
    }
    nvme_store_stats(s, &after);
    ck_assert_uint_eq(after.requests, before.requests);
    ck_assert_uint_eq(after.pieces_read + after.pieces_written, 0);
    nvme_store_free(s);
    free(b);
    teardown_dir();
}
END_TEST

START_TEST(test_verify_crc) {
    setup_dir();
    nvme_store_opts_t o = {.paths = paths_for(1 + _i % 2), .size = 4 * MiB, .block = 64 * KiB, .qd = 8,
                           .engine = ENG(_i / 2), .verify = 1, .quiet = 1, .faults = ""};
    nvme_store_t *s = NULL;
    char err[1024], msg[1024];
    ck_assert_msg(nvme_store_init(&s, &o, err, sizeof err) == 0, "%s", err);
    unsigned char *b = abuf(MiB), *r = abuf(MiB);
    fill(b, MiB, 41);
    io_ticket_t w = {0}, t = {0};
    ck_assert_int_eq(nvme_store_write(s, &w, 3 * MiB, MiB, b), 0);
    wait_ok(&w);
    ck_assert_uint_eq(w.crc, crc32c(0, b, MiB));
    io_req_t rq = {.op = IO_READ, .off = 3 * MiB, .len = MiB, .buf = r, .crc = w.crc, .name = "shard 2 o32"};
    ck_assert_int_eq(nvme_store_submit(s, &t, &rq), 0);
    wait_ok(&t);
    assert_same("verified read", r, b, MiB);
    // the bytes on disk change behind the extent's back (a write whose CRC is dropped)
    b[12345] ^= 1;
    io_ticket_t w2 = {0};
    ck_assert_int_eq(nvme_store_write(s, &w2, 3 * MiB, MiB, b), 0);
    wait_ok(&w2);
    ck_assert_int_eq(nvme_store_submit(s, &t, &rq), 0);
    ck_assert_int_eq(io_ticket_wait(&t), -EBADMSG);
    io_ticket_message(&t, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "shard 2 o32") && strstr(msg, "CRC32C mismatch") && strstr(msg, "store offset 3145728"), "%s", msg);
    nvme_store_free(s);
    free(b);
    free(r);
    teardown_dir();
}
END_TEST

// ---------------------------------------------------------------- setup paths

static int fake_free(const char *dir, uint64_t *free_bytes, void *arg) {
    (void)dir;
    *free_bytes = *(uint64_t *)arg;
    return 0;
}

START_TEST(test_space_check) {
    setup_dir();
    uint64_t avail = MiB;
    nvme_store_opts_t o = {.paths = sub[0], .size = 64 * MiB, .quiet = 1, .faults = "", .free_bytes = fake_free, .free_arg = &avail};
    nvme_store_t *s = NULL;
    char err[1024];
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -ENOSPC);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, "--nvme-path") && strstr(err, sub[0]) && strstr(err, "needs 64.0 MiB") && strstr(err, "1.0 MiB free"), "%s", err);
    ck_assert_int_eq(count_entries(sub[0]), 0); // failed before creating anything

    // two paths on one filesystem: 32 MiB each, summed against 48 MiB free
    avail = 48 * MiB;
    o.paths = paths_for(2);
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -ENOSPC);
    ck_assert_msg(strstr(err, sub[0]) && strstr(err, sub[1]) && strstr(err, "needs 64.0 MiB") && strstr(err, "48.0 MiB free"), "%s", err);
    avail = 80 * MiB;
    if (direct_ok) { // fits now (creating it needs O_DIRECT)
        ck_assert_msg(nvme_store_init(&s, &o, err, sizeof err) == 0, "%s", err);
        nvme_store_free(s);
    }

    // the same through the fault spec (what a CLI-level test would use)
    nvme_store_opts_t o2 = {.paths = sub[1], .size = 8 * MiB, .quiet = 1, .faults = "free=2M"};
    ck_assert_int_eq(nvme_store_init(&s, &o2, err, sizeof err), -ENOSPC);
    ck_assert_msg(strstr(err, "needs 8.0 MiB, 2.0 MiB free"), "%s", err);
    teardown_dir();
}
END_TEST

START_TEST(test_bad_paths_and_options) {
    setup_dir();
    nvme_store_t *s = NULL;
    char err[1024], missing[4300];
    snprintf(missing, sizeof missing, "%s/nope", tmp);
    nvme_store_opts_t o = {.paths = missing, .size = MiB, .quiet = 1, .faults = ""};
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, missing) && strstr(err, "No such file"), "%s", err);
    o.paths = "a,,b";
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "empty entry"), "%s", err);
    o.paths = sub[0];
    o.block = 1000;
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "--io-block"), "%s", err);
    o.block = 0;
    o.qd = 5000;
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "--nvme-qd 5000"), "%s", err);
    o.qd = 0;
    o.size = 0;
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -EINVAL);
    ck_assert_ptr_null(s);
    teardown_dir();
}
END_TEST

// O_DIRECT refused: tmpfs refused it before Linux 6.6; where /dev/shm accepts it, the
// 'nodirect' fault makes open(O_DIRECT) fail the same way (EINVAL).
START_TEST(test_odirect_refused) {
    setup_dir();
    int shm = access("/dev/shm", W_OK) == 0 ? nvme_dir_direct_ok("/dev/shm") : 0;
    nvme_store_opts_t o = {.size = MiB, .quiet = 1};
    if (shm == -EINVAL) {
        o.paths = "/dev/shm";
        o.faults = "";
    } else {
        o.paths = sub[0];
        o.faults = "nodirect";
    }
    nvme_store_t *s = NULL;
    char err[1024];
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, o.paths) && strstr(err, "refuses O_DIRECT") && strstr(err, "local disk"), "%s", err);
    teardown_dir();
}
END_TEST

START_TEST(test_register_fallback) {
    setup_dir();
    uint64_t size = 4 * MiB;
    unsigned char *pool = abuf(size), *img = abuf(size);
    fill(img, size, 51);
    struct iovec iov = {pool, size};
    for (int forced = 0; forced < 2; forced++) {
        nvme_store_opts_t o = {.paths = sub[0], .size = size, .block = 256 * KiB, .qd = 8, .engine = IO_ENGINE_URING,
                               .bufs = &iov, .nbufs = 1, .faults = forced ? "noregister" : ""};
        nvme_store_t *s = NULL;
        char err[1024];
        tu_stderr_begin();
        int rc = nvme_store_init(&s, &o, err, sizeof err);
        io_ticket_t t[4];
        memset(t, 0, sizeof t);
        memcpy(pool, img, size);
        for (int i = 0; rc == 0 && i < 4; i++) nvme_store_write(s, &t[i], (uint64_t)i * MiB, MiB, pool + i * MiB);
        for (int i = 0; rc == 0 && i < 4; i++) io_ticket_wait(&t[i]);
        memset(pool, 0, size);
        for (int i = 0; rc == 0 && i < 4; i++) nvme_store_read(s, &t[i], (uint64_t)i * MiB, MiB, pool + i * MiB, 0);
        for (int i = 0; rc == 0 && i < 4; i++) io_ticket_wait(&t[i]);
        char *text = tu_stderr_end();
        ck_assert_msg(rc == 0, "%s", err);
        for (int i = 0; i < 4; i++) wait_ok(&t[i]);
        assert_same("registered pool round trip", pool, img, size);
        io_info_t info;
        io_stats_t st;
        nvme_store_info(s, &info);
        nvme_store_stats(s, &st);
        if (forced) {
            ck_assert_int_eq(info.registered_bufs, 0);
            ck_assert_int_eq(info.registered_files, 0);
            ck_assert_uint_eq(st.fixed, 0);
            ck_assert_int_eq(info.notices, 1);
            ck_assert_msg(count_lines_with(text, "tiertrain: ") == 1 && count_lines_with(text, "registering buffers and files failed") == 1 &&
                          strstr(text, "ulimit -l"), "stderr: %s", text);
        } else if (info.notices == 0) { // root, or a memlock limit that allows 4 MiB
            ck_assert_int_eq(info.registered_bufs, 1);
            ck_assert_uint_eq(st.fixed, st.pieces_read + st.pieces_written);
            ck_assert_str_eq(text, "");
        }
        free(text);
        nvme_store_free(s);
    }
    free(pool);
    free(img);
    teardown_dir();
}
END_TEST

START_TEST(test_engine_fallback) {
    setup_dir();
    nvme_store_opts_t o = {.paths = sub[0], .size = MiB, .engine = IO_ENGINE_AUTO, .faults = "nouring"};
    nvme_store_t *s = NULL;
    char err[1024];
    tu_stderr_begin();
    int rc = nvme_store_init(&s, &o, err, sizeof err);
    char *text = tu_stderr_end();
    ck_assert_msg(rc == 0, "%s", err);
    io_info_t info;
    nvme_store_info(s, &info);
    ck_assert_str_eq(info.engine, "psync");
    ck_assert_int_eq(info.notices, 1);
    ck_assert_msg(count_lines_with(text, "tiertrain: ") == 1 && strstr(text, "io_uring unavailable") && strstr(text, "psync"), "%s", text);
    free(text);
    unsigned char *b = abuf(MiB), *r = abuf(MiB);
    fill(b, MiB, 61);
    io_ticket_t t = {0};
    ck_assert_int_eq(nvme_store_write(s, &t, 0, MiB, b), 0);
    wait_ok(&t);
    ck_assert_int_eq(nvme_store_read(s, &t, 0, MiB, r, 0), 0);
    wait_ok(&t);
    assert_same("psync fallback", r, b, MiB);
    nvme_store_free(s);
    // asking for uring explicitly is an error, not a silent fallback
    o.engine = IO_ENGINE_URING;
    ck_assert_int_eq(nvme_store_init(&s, &o, err, sizeof err), -ENODEV); // exit 2: the machine cannot grant it
    ck_assert_msg(strstr(err, "--io-engine uring") && strstr(err, "io_uring_setup"), "%s", err);
    ck_assert_ptr_null(s);
    free(b);
    free(r);
    teardown_dir();
}
END_TEST

START_TEST(test_sqpoll) {
    setup_dir();
    nvme_store_opts_t o = {.paths = sub[0], .size = 2 * MiB, .engine = IO_ENGINE_URING, .sqpoll = 1, .quiet = 1, .faults = ""};
    nvme_store_t *s = NULL;
    char err[1024];
    ck_assert_msg(nvme_store_init(&s, &o, err, sizeof err) == 0, "%s", err);
    io_info_t info;
    nvme_store_info(s, &info);
    ck_assert(info.sqpoll == 1 || info.notices == 1); // on, or dropped with one notice
    unsigned char *b = abuf(2 * MiB), *r = abuf(2 * MiB);
    fill(b, 2 * MiB, 71);
    io_ticket_t t = {0};
    ck_assert_int_eq(nvme_store_write(s, &t, 0, 2 * MiB, b), 0);
    wait_ok(&t);
    ck_assert_int_eq(nvme_store_read(s, &t, 0, 2 * MiB, r, 0), 0);
    wait_ok(&t);
    assert_same("sqpoll", r, b, 2 * MiB);
    nvme_store_free(s);
    free(b);
    free(r);
    teardown_dir();
}
END_TEST

START_TEST(test_keep_files) {
    setup_dir();
    for (int keep = 0; keep < 2; keep++) {
        nvme_store_opts_t o = {.paths = paths_for(2), .size = MiB, .block = 64 * KiB, .keep = keep, .quiet = 1, .faults = ""};
        nvme_store_t *s = NULL;
        char err[1024], f0[4200], f1[4200];
        ck_assert_msg(nvme_store_init(&s, &o, err, sizeof err) == 0, "%s", err);
        snprintf(f0, sizeof f0, "%s", nvme_store_file(s, 0));
        snprintf(f1, sizeof f1, "%s", nvme_store_file(s, 1));
        // unlinked at once unless keep: nothing left behind even if the process dies
        ck_assert_int_eq(count_entries(sub[0]), keep);
        ck_assert_int_eq(count_entries(sub[1]), keep);
        nvme_store_free(s);
        ck_assert_int_eq(access(f0, F_OK) == 0, keep);
        if (keep) {
            struct stat st;
            ck_assert_int_eq(stat(f0, &st), 0);
            ck_assert_int_eq(st.st_size, 512 * 1024);
            ck_assert_int_eq(unlink(f0), 0);
            ck_assert_msg(unlink(f1) == 0, "second file %s", f1);
        }
    }
    teardown_dir();
}
END_TEST

// ---------------------------------------------------------------- main

int main(void) {
    char base[4096];
    snprintf(base, sizeof base, "%s", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int direct = nvme_dir_direct_ok(base);
    // Every test's directory lives under one per-run directory, removed at the end even
    // when a failed test never reached its own cleanup.
    char *run = tu_tmpdir("io_run");
    if (!run) { perror("test_io: temporary directory"); return 1; }
    setenv("TMPDIR", run, 1);
    direct_ok = direct == 0;
    int timeout = tu_sanitized() ? 600 : 120;
    Suite *su = suite_create("io");

    TCase *tc = tcase_create("crc");
    tcase_add_test(tc, test_crc_known);
    tcase_add_test(tc, test_crc_hw_matches_sw);
    suite_add_tcase(su, tc);

    tc = tcase_create("setup"); // needs no working O_DIRECT
    tcase_set_timeout(tc, timeout);
    tcase_add_test(tc, test_space_check);
    tcase_add_test(tc, test_bad_paths_and_options);
    tcase_add_test(tc, test_odirect_refused);
    suite_add_tcase(su, tc);

    if (direct == 0) {
        tc = tcase_create("core");
        tcase_set_timeout(tc, timeout);
        tcase_add_loop_test(tc, test_roundtrip, 0, N_SWEEP);
        tcase_add_test(tc, test_layout_striped);
        tcase_add_loop_test(tc, test_callback_and_free_drains, 0, 2);
        suite_add_tcase(su, tc);

        tc = tcase_create("threads");
        tcase_set_timeout(tc, timeout);
        tcase_add_loop_test(tc, test_threads_disjoint, 0, 2);
        suite_add_tcase(su, tc);

        tc = tcase_create("faults");
        tcase_set_timeout(tc, timeout);
        tcase_add_loop_test(tc, test_fault_eio, 0, 2);
        tcase_add_loop_test(tc, test_fault_errno_named, 0, 2);
        tcase_add_loop_test(tc, test_fault_short, 0, 2);
        tcase_add_loop_test(tc, test_fault_eagain, 0, 2);
        tcase_add_loop_test(tc, test_fault_env, 0, 2);
        tcase_add_loop_test(tc, test_fault_slow, 0, 2);
        tcase_add_loop_test(tc, test_turns, 0, 2);
        tcase_add_loop_test(tc, test_urgent, 0, 2);
        tcase_add_loop_test(tc, test_lazy, 0, 2);
        tcase_add_loop_test(tc, test_misaligned_refused, 0, 2);
        tcase_add_loop_test(tc, test_verify_crc, 0, 4);
        suite_add_tcase(su, tc);

        tc = tcase_create("fallback");
        tcase_set_timeout(tc, timeout);
        tcase_add_test(tc, test_register_fallback);
        tcase_add_test(tc, test_engine_fallback);
        tcase_add_test(tc, test_sqpoll);
        tcase_add_test(tc, test_keep_files);
        suite_add_tcase(su, tc);
    } else {
        fprintf(stderr, "test_io: %s refuses O_DIRECT (%s): I/O tests skipped\n", base, strerror(-direct));
    }

    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    tu_rm_rf(run);
    free(run);
    if (failed) return 1;
    return direct == 0 ? 0 : 77;
}
