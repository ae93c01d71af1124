// test_safetensors.c — the safetensors writer and reader: write → read round trips (F32 and
// BF16, odd sizes, a scalar, an empty tensor, data written in uneven pieces that span
// tensors, reads in pieces); the written header checked by a second, independent reader in
// this file that does not use json.c; byte-exact agreement with files the reference
// implementation writes; every bad-file class with its exact one-line message; and write
// failures (ENOSPC from /dev/full, EFBIG mid-stream from RLIMIT_FSIZE, short or long data);
// and util.h's first_bad_float, the check of every value a load reads, against isfinite.
// Fixture files go into a fresh tu_tmpdir().
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <float.h>
#include <math.h>
#include "safetensors.h"
#include "testutil.h"
#include "util.h" // uses: first_bad_float

// ---------------------------------------------------------------- fixtures

static char *dir;

static void dir_setup(void) {
    dir = tu_tmpdir("st");
    ck_assert_ptr_nonnull(dir);
}

static void dir_teardown(void) {
    tu_rm_rf(dir);
    free(dir);
}

static char *path_in(const char *name) {
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

// A raw file: declared header length, the header text, then data_len bytes of 0xAB.
static void write_raw(const char *path, uint64_t declared, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char le[8];
    put_le64(le, declared);
    ck_assert_uint_eq(fwrite(le, 1, 8, f), 8);
    ck_assert_uint_eq(fwrite(header, 1, strlen(header), f), strlen(header));
    for (size_t i = 0; i < data_len; i++) fputc(0xAB, f);
    ck_assert_int_eq(fclose(f), 0);
}

// Deterministic bytes for tensor i, byte j.
static unsigned char pattern(int i, uint64_t j) { return (unsigned char)(j * 131 + (uint64_t)i * 17 + (j >> 8)); }

// ---------------------------------------------------------------- the independent reader
// A hand-rolled scan of the header our writer produces (compact JSON, names without escapes):
// {"__metadata__":{"k":"v",...},"name":{"dtype":"F32","shape":[a,b],"data_offsets":[x,y]},...}
// followed by space padding. It shares no code with json.c or safetensors.c.

typedef struct {
    char name[128], dtype[8];
    int ndim;
    uint64_t shape[8], begin, end;
} mini_tensor_t;

typedef struct {
    uint64_t header_len, data_start, file_size;
    int ntensors, nmeta;
    mini_tensor_t t[32];
    char meta_key[8][64], meta_val[8][64];
} mini_file_t;

static const char *mini_lit(const char *p, const char *lit) {
    size_t n = strlen(lit);
    ck_assert_msg(strncmp(p, lit, n) == 0, "independent reader: want <%s> at <%.40s>", lit, p);
    return p + n;
}

static const char *mini_str(const char *p, char *out, size_t cap) {
    p = mini_lit(p, "\"");
    const char *q = strchr(p, '"');
    ck_assert_ptr_nonnull(q);
    ck_assert_uint_lt((size_t)(q - p), cap);
    ck_assert_msg(!memchr(p, '\\', (size_t)(q - p)), "independent reader: escapes are not expected here");
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = 0;
    return q + 1;
}

static const char *mini_u64(const char *p, uint64_t *v) {
    ck_assert_msg(*p >= '0' && *p <= '9', "independent reader: want a digit at <%.20s>", p);
    char *e;
    *v = strtoull(p, &e, 10);
    return e;
}

static void mini_read(const char *path, mini_file_t *m) {
    memset(m, 0, sizeof *m);
    size_t len;
    unsigned char *b = slurp(path, &len);
    ck_assert_uint_ge(len, 8);
    for (int i = 7; i >= 0; i--) m->header_len = m->header_len << 8 | b[i];
    m->data_start = 8 + m->header_len;
    m->file_size = len;
    ck_assert_uint_le(m->data_start, len);
    char *h = malloc(m->header_len + 1);
    memcpy(h, b + 8, m->header_len);
    h[m->header_len] = 0;
    // Padding: only spaces after the closing brace.
    size_t end = m->header_len;
    while (end > 0 && h[end - 1] == ' ') end--;
    ck_assert_msg(end > 0 && h[end - 1] == '}', "independent reader: the header does not end in '}' + spaces");
    ck_assert_uint_lt(m->header_len - end, 8);
    h[end] = 0;
    const char *p = mini_lit(h, "{");
    if (strncmp(p, "\"__metadata__\"", 14) == 0) {
        p = mini_lit(p + 14, ":{");
        while (*p != '}') {
            if (m->nmeta) p = mini_lit(p, ",");
            p = mini_str(p, m->meta_key[m->nmeta], sizeof m->meta_key[0]);
            p = mini_lit(p, ":");
            p = mini_str(p, m->meta_val[m->nmeta], sizeof m->meta_val[0]);
            m->nmeta++;
        }
        p++;
        if (*p == ',') p++;
    }
    while (*p != '}') {
        if (m->ntensors) p = mini_lit(p, ",");
        mini_tensor_t *t = &m->t[m->ntensors++];
        p = mini_str(p, t->name, sizeof t->name);
        p = mini_lit(p, ":{\"dtype\":");
        p = mini_str(p, t->dtype, sizeof t->dtype);
        p = mini_lit(p, ",\"shape\":[");
        while (*p != ']') {
            if (t->ndim) p = mini_lit(p, ",");
            p = mini_u64(p, &t->shape[t->ndim++]);
        }
        p = mini_lit(p, "],\"data_offsets\":[");
        p = mini_u64(p, &t->begin);
        p = mini_lit(p, ",");
        p = mini_u64(p, &t->end);
        p = mini_lit(p, "]}");
    }
    ck_assert_str_eq(p, "}");
    free(h);
    free(b);
}

// ---------------------------------------------------------------- core

// The declared tensors of the round trip: both dtypes, odd element counts (a BF16 tensor of
// 5 elements leaves the next one 2-aligned), a scalar, an empty tensor, four dimensions.
static const struct { const char *name; st_dtype_t dtype; int ndim; uint64_t shape[4]; } decl[] = {
    {"model.embed_tokens.weight", ST_F32, 2, {7, 3}},
    {"model.layers.0.self_attn.q_proj.weight", ST_F32, 2, {3, 3}},
    {"model.norm.weight", ST_BF16, 1, {5}},
    {"scalar", ST_F32, 0, {0}},
    {"empty", ST_BF16, 2, {0, 4}},
    {"x.4d", ST_BF16, 4, {3, 1, 2, 3}},
    {"lm_head.weight", ST_F32, 2, {11, 3}},
    {"big", ST_BF16, 1, {300007}},
    {"half", ST_F16, 2, {2, 2}},
};
enum { NDECL = sizeof decl / sizeof decl[0] };

static void declare(st_tensor_t *t) {
    memset(t, 0, NDECL * sizeof *t);
    for (int i = 0; i < NDECL; i++) {
        t[i].name = decl[i].name;
        t[i].dtype = decl[i].dtype;
        t[i].ndim = decl[i].ndim;
        for (int d = 0; d < decl[i].ndim; d++) t[i].shape[d] = decl[i].shape[d];
    }
}

static uint64_t decl_bytes(int i) {
    uint64_t n = decl[i].dtype == ST_F32 ? 4 : 2;
    for (int d = 0; d < decl[i].ndim; d++) n *= decl[i].shape[d];
    return n;
}

// Writes the declared tensors in pieces of sizes cycling through `pieces` (spanning tensor
// boundaries), as a caller streaming shards would.
static void write_declared(const char *path, const size_t *pieces, int npieces) {
    st_tensor_t t[NDECL];
    declare(t);
    st_meta_t meta[] = {{"format", "pt"}, {"step", "12"}, {"note", "tiertrain"}};
    st_writer_t *w = NULL;
    char err[1024] = "";
    ck_assert_msg(st_writer_open(&w, path, t, NDECL, meta, 3, err, sizeof err) == 0, "%s", err);
    uint64_t total = 0;
    for (int i = 0; i < NDECL; i++) total += decl_bytes(i);
    unsigned char *all = malloc(total), *p = all;
    for (int i = 0; i < NDECL; i++)
        for (uint64_t j = 0; j < decl_bytes(i); j++) *p++ = pattern(i, j);
    uint64_t off = 0;
    for (int k = 0; off < total; k++) {
        size_t n = pieces[k % npieces];
        if (n > total - off) n = (size_t)(total - off);
        ck_assert_msg(st_write(w, all + off, n) == 0, "%s", st_writer_error(w));
        off += n;
    }
    ck_assert_str_eq(st_writer_error(w), "");
    ck_assert_msg(st_writer_close(w, err, sizeof err) == 0, "%s", err);
    free(all);
}

START_TEST(test_round_trip) {
    const size_t pieces[3][5] = {{1, 7, 13, 4096, 3}, {1 << 20, 1, 1, 1, 1}, {5, 5, 5, 5, 5}};
    const char *path = path_in("model.safetensors");
    write_declared(path, pieces[_i], 5);

    st_reader_t *r = NULL;
    char err[1024] = "";
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r->ntensors, NDECL);
    ck_assert_int_eq(r->nmeta, 3);
    ck_assert_str_eq(r->meta[0].key, "format");
    ck_assert_str_eq(r->meta[2].value, "tiertrain");
    ck_assert_str_eq(st_meta_get(r, "step"), "12");
    ck_assert_ptr_null(st_meta_get(r, "missing"));
    ck_assert_uint_eq(r->data_start % 8, 0);
    uint64_t off = 0;
    for (int i = 0; i < NDECL; i++) {
        // Written in declared order, so file order is declared order.
        const st_tensor_t *t = &r->tensors[i];
        ck_assert_str_eq(t->name, decl[i].name);
        ck_assert_int_eq(st_find(r, decl[i].name), i);
        ck_assert_int_eq(t->dtype, decl[i].dtype);
        ck_assert_int_eq(t->ndim, decl[i].ndim);
        for (int d = 0; d < t->ndim; d++) ck_assert_uint_eq(t->shape[d], decl[i].shape[d]);
        ck_assert_uint_eq(t->begin, off);
        ck_assert_uint_eq(t->end, off + decl_bytes(i));
        off = t->end;
        // Whole, then in pieces at odd offsets.
        size_t n = (size_t)decl_bytes(i);
        unsigned char *buf = malloc(n + 1);
        ck_assert_msg(st_read(r, i, buf, 0, n, err, sizeof err) == 0, "%s", err);
        size_t bad = n;
        for (size_t j = 0; j < n && bad == n; j++)
            if (buf[j] != pattern(i, j)) bad = j;
        ck_assert_msg(bad == n, "tensor %s byte %zu: got %u want %u", t->name, bad, buf[bad], pattern(i, bad));
        memset(buf, 0, n + 1);
        for (size_t a = 0; a < n;) {
            size_t k = (a * 7 + 3) % 997 + 1;
            if (k > n - a) k = n - a;
            ck_assert_msg(st_read(r, i, buf + a, a, k, err, sizeof err) == 0, "%s", err);
            a += k;
        }
        for (size_t j = 0; j < n && bad == n; j++)
            if (buf[j] != pattern(i, j)) bad = j;
        ck_assert_msg(bad == n, "tensor %s (pieces) byte %zu", t->name, bad);
        ck_assert_int_eq(st_read(r, i, buf, n, 0, err, sizeof err), 0); // an empty read at the end
        free(buf);
    }
    ck_assert_uint_eq(r->data_start + off, r->file_size);
    ck_assert_int_eq(st_find(r, "nope"), -1);
    ck_assert_int_eq(st_find(r, ""), -1);
    st_close(r);
    st_close(NULL);
}
END_TEST

// The header as a second reader sees it: names, dtypes, shapes, offsets, padding, alignment.
// CRC-32C bit by bit (reflected polynomial 0x82F63B78): shares no code with io/crc32c.c.
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

// ST_CRC32C: every tensor's checksum is in __metadata__ (equal to an independent CRC of its
// bytes, however the writes were cut); checked reads pass on the file as written, and a
// flipped byte fails whether it is found by a checked read or by st_verify_rest.
START_TEST(test_checksums) {
    const char *path = path_in("crc.safetensors");
    st_tensor_t t[NDECL];
    declare(t);
    st_meta_t meta[] = {{"format", "pt"}};
    st_writer_t *w = NULL;
    char err[1024] = "";
    ck_assert_msg(st_writer_open_flags(&w, path, t, NDECL, meta, 1, ST_CRC32C, err, sizeof err) == 0, "%s", err);
    uint64_t total = 0;
    for (int i = 0; i < NDECL; i++) total += decl_bytes(i);
    unsigned char *all = malloc(total), *p = all;
    for (int i = 0; i < NDECL; i++)
        for (uint64_t j = 0; j < decl_bytes(i); j++) *p++ = pattern(i, j);
    for (uint64_t off = 0, k = 0; off < total; k++) { // pieces of 1..7 bytes: every boundary case
        size_t n = (size_t)(k % 7 + 1) < total - off ? (size_t)(k % 7 + 1) : (size_t)(total - off);
        ck_assert_int_eq(st_write(w, all + off, n), 0);
        off += n;
    }
    ck_assert_msg(st_writer_close(w, err, sizeof err) == 0, "%s", err);
    st_reader_t *r = NULL;
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r->nchecked, NDECL);
    ck_assert_int_eq(st_unchecked(r), -1);
    ck_assert_str_eq(st_meta_get(r, "format"), "pt");
    uint64_t at = 0;
    for (int i = 0; i < NDECL; i++) {
        char key[128], hex[9];
        snprintf(key, sizeof key, "crc32c:%s", decl[i].name);
        snprintf(hex, sizeof hex, "%08x", crc_bitwise(all + at, decl_bytes(i)));
        ck_assert_msg(st_meta_get(r, key) && !strcmp(st_meta_get(r, key), hex), "%s: %s, want %s", key,
                      st_meta_get(r, key) ? st_meta_get(r, key) : "(none)", hex);
        unsigned char *buf = malloc(decl_bytes(i) + 1);
        uint64_t half = decl_bytes(i) / 2;
        ck_assert_msg(st_read_checked(r, st_find(r, decl[i].name), buf, 0, half, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(st_read_checked(r, st_find(r, decl[i].name), buf + half, half, decl_bytes(i) - half, err,
                                      sizeof err) == 0, "%s", err);
        ck_assert(!memcmp(buf, all + at, decl_bytes(i)));
        free(buf);
        at += decl_bytes(i);
    }
    ck_assert_msg(st_verify_rest(r, err, sizeof err) == 0, "%s", err);
    uint64_t flip_at = r->data_start + r->tensors[1].begin + 5;
    st_close(r);
    // one bit of tensor 1 flipped
    int fd = open(path, O_RDWR);
    unsigned char b;
    ck_assert(fd >= 0 && pread(fd, &b, 1, (off_t)flip_at) == 1);
    b ^= 1;
    ck_assert(pwrite(fd, &b, 1, (off_t)flip_at) == 1);
    close(fd);
    char want[512];
    snprintf(want, sizeof want, "%s: tensor '%s' fails its CRC-32C check (stored ", path, decl[1].name);
    for (int how = 0; how < 2; how++) {
        ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
        unsigned char buf[64];
        int rc = how ? st_verify_rest(r, err, sizeof err)
                     : st_read_checked(r, 1, buf, 0, (size_t)decl_bytes(1), err, sizeof err);
        ck_assert_int_eq(rc, -EINVAL);
        ck_assert_msg(!strncmp(err, want, strlen(want)) && strstr(err, "): the file is corrupt"), "%s", err);
        st_close(r);
    }
    // two readers of the file (the checkpoint load's lanes): a tensor one checked whole counts
    // as checked for the other, a part-read one does not, and the flipped bit is still found
    st_reader_t *one = NULL, *two = NULL;
    ck_assert_msg(st_open(path, &one, err, sizeof err) == 0 && st_open(path, &two, err, sizeof err) == 0, "%s", err);
    unsigned char buf[128];
    ck_assert_msg(st_read_checked(two, 0, buf, 0, (size_t)decl_bytes(0), err, sizeof err) == 0, "%s", err);
    ck_assert_msg(st_read_checked(two, 1, buf, 0, (size_t)decl_bytes(1) / 2, err, sizeof err) == 0, "%s", err);
    st_take_checked(one, two);
    ck_assert_uint_eq(one->crc_pos[0], decl_bytes(0));
    ck_assert_uint_eq(one->crc_pos[1], 0);
    ck_assert_int_eq(st_verify_rest(one, err, sizeof err), -EINVAL);
    ck_assert_msg(!strncmp(err, want, strlen(want)), "%s", err);
    st_close(one);
    st_close(two);
    // the writer's keys are its own; a reader refuses entries that name no tensor or no CRC
    st_meta_t mine[] = {{"crc32c:x", "00000000"}};
    ck_assert_int_eq(st_writer_open_flags(&w, path, t, NDECL, mine, 1, ST_CRC32C, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "keys starting 'crc32c:' are the writer's own"), "%s", err);
    static const struct { st_meta_t m; const char *says; } bad[] = {
        {{"crc32c:nothing", "00000000"}, "__metadata__ 'crc32c:nothing' names no tensor of the file"},
        {{"crc32c:model.norm.weight", "0000000G"}, "__metadata__ 'crc32c:model.norm.weight': expected 8 lowercase hex"},
    };
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(st_writer_open(&w, path, t, NDECL, &bad[k].m, 1, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(st_write(w, all, total), 0);
        ck_assert_msg(st_writer_close(w, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(st_open(path, &r, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, bad[k].says), "%s", err);
    }
    free(all);
}
END_TEST

// A file of several of the writer's buffers (ST_STREAM_BUF), its data starting mid-block and
// ending in an odd tail, written in pieces smaller and larger than a buffer: every byte and
// every checksum (the header's rewrite at close) read back as written (checked reads of more
// than a buffer, from offsets off the blocks), the file exactly as long as the header and the
// data; a BF16 tensor widened in place; and a file that shrinks under a large read.
START_TEST(test_stream_spans_buffers) {
    const char *path = path_in("long.safetensors");
    const uint64_t B = ST_STREAM_BUF;
    st_tensor_t t[3] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {B / 4 + 3}},
                        {.name = "b", .dtype = ST_BF16, .ndim = 2, .shape = {3, B / 2 + 1}},
                        {.name = "c", .dtype = ST_F32, .ndim = 1, .shape = {1001}}};
    const uint64_t size[3] = {B + 12, 3 * B + 6, 4004}, total = size[0] + size[1] + size[2];
    unsigned char *all = malloc(total);
    for (uint64_t j = 0; j < total; j++) all[j] = (unsigned char)(j * 2654435761u >> 13);
    st_writer_t *w = NULL;
    char err[1024] = "";
    ck_assert_msg(st_writer_open_flags(&w, path, t, 3, NULL, 0, ST_CRC32C, err, sizeof err) == 0, "%s", err);
    const size_t pieces[] = {1, B + 7, 4093, 2 * B, 5};
    uint64_t off = 0;
    for (int k = 0; off < total; k++) {
        size_t n = pieces[k % 5] < total - off ? pieces[k % 5] : (size_t)(total - off);
        ck_assert_msg(st_write(w, all + off, n) == 0, "%s", st_writer_error(w));
        off += n;
    }
    ck_assert_msg(st_writer_close(w, err, sizeof err) == 0, "%s", err);
    st_reader_t *r = NULL;
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_ne(r->data_start % 4096, 0); // the data starts mid-block
    ck_assert_uint_eq(r->file_size, r->data_start + total);
    unsigned char *back = malloc(size[1]);
    uint64_t at = 0;
    for (int i = 0; i < 3; i++) {
        char key[32], hex[9];
        snprintf(key, sizeof key, "crc32c:%s", t[i].name);
        snprintf(hex, sizeof hex, "%08x", crc_bitwise(all + at, size[i]));
        ck_assert_msg(!strcmp(st_meta_get(r, key), hex), "%s: %s, want %s", key, st_meta_get(r, key), hex);
        ck_assert_msg(st_read_checked(r, i, back, 0, size[i], err, sizeof err) == 0, "%s", err);
        uint64_t bad = size[i];
        for (uint64_t j = 0; j < size[i] && bad == size[i]; j++)
            if (back[j] != all[at + j]) bad = j;
        ck_assert_msg(bad == size[i], "tensor %s byte %" PRIu64 ": got %u, want %u", t[i].name, bad, back[bad],
                      all[at + bad]);
        at += size[i];
    }
    // b widened to FP32 from element 5 (an odd 2-byte offset into the file's blocks): each
    // float the BF16 bits of the file's pair of bytes, shifted up
    const size_t n = B / 2 + 11;
    float *wide = malloc(n * sizeof *wide);
    ck_assert_msg(st_read_f32(r, 1, 5, n, wide, err, sizeof err) == 0, "%s", err);
    for (size_t j = 0; j < n; j++) {
        const unsigned char *p = all + size[0] + 2 * (5 + j);
        uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16, got;
        memcpy(&got, &wide[j], 4);
        ck_assert_msg(got == bits, "b[%zu] widened: %08x, want %08x", 5 + j, got, bits);
    }
    free(wide);
    // the file shrinks under the reader: a large read (O_DIRECT where taken) ends in -EIO too
    ck_assert_int_eq(truncate(path, (off_t)(r->data_start + size[0] + 4096 * 3 + 100)), 0);
    ck_assert_int_eq(st_read_checked(r, 1, back, 4096, ST_DIRECT_MIN, err, sizeof err), -EIO);
    char want[1024];
    snprintf(want, sizeof want, "%s: tensor 'b': reading %zu bytes at file byte %" PRIu64 " failed: Input/output error "
             "(did the file shrink after it was opened?)", path, ST_DIRECT_MIN, r->data_start + size[0] + 4096);
    ck_assert_str_eq(err, want);
    st_close(r);
    free(back);
    free(all);
}
END_TEST

START_TEST(test_header_independent) {
    const size_t pieces[] = {4096};
    const char *path = path_in("m.safetensors");
    write_declared(path, pieces, 1);
    mini_file_t m;
    mini_read(path, &m);
    ck_assert_uint_eq(m.header_len % 8, 0);
    ck_assert_uint_eq(m.data_start % 8, 0);
    ck_assert_int_eq(m.nmeta, 3);
    ck_assert_str_eq(m.meta_key[0], "format");
    ck_assert_str_eq(m.meta_val[0], "pt");
    ck_assert_str_eq(m.meta_key[1], "step");
    ck_assert_str_eq(m.meta_val[1], "12");
    ck_assert_int_eq(m.ntensors, NDECL);
    uint64_t off = 0;
    for (int i = 0; i < NDECL; i++) {
        const mini_tensor_t *t = &m.t[i];
        ck_assert_str_eq(t->name, decl[i].name);
        ck_assert_str_eq(t->dtype, decl[i].dtype == ST_F32 ? "F32" : decl[i].dtype == ST_BF16 ? "BF16" : "F16");
        ck_assert_int_eq(t->ndim, decl[i].ndim);
        for (int d = 0; d < t->ndim; d++) ck_assert_uint_eq(t->shape[d], decl[i].shape[d]);
        ck_assert_uint_eq(t->begin, off);
        ck_assert_uint_eq(t->end - t->begin, decl_bytes(i));
        off = t->end;
    }
    ck_assert_uint_eq(m.data_start + off, m.file_size);
}
END_TEST

// Files the reference implementation writes (its own unit-test vectors), byte for byte: our
// writer must produce them, our reader must accept them.
START_TEST(test_reference_bytes) {
    struct { const char *name; int ndim; uint64_t shape[4]; const char *header; int nmeta; } cases[] = {
        {"attn.0", 3, {1, 2, 3}, "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}", 0},
        {"attn0", 4, {1, 1, 2, 3}, "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       ", 0},
        {NULL, 0, {0}, "{}      ", 0},
        {NULL, 0, {0}, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 1},
    };
    const float vals[6] = {0, 1, 2, 3, 4, 5};
    for (int c = 0; c < 4; c++) {
        // The expected file, from the reference's bytes.
        size_t hl = strlen(cases[c].header), data = cases[c].name ? sizeof vals : 0;
        ck_assert_uint_eq(hl % 8, 0);
        unsigned char *want = malloc(8 + hl + data);
        put_le64(want, hl);
        memcpy(want + 8, cases[c].header, hl);
        if (data) memcpy(want + 8 + hl, vals, data); // little-endian host (the format's order)

        const char *path = path_in("ref.safetensors");
        st_tensor_t t = {.name = cases[c].name, .dtype = ST_F32, .ndim = cases[c].ndim};
        memcpy(t.shape, cases[c].shape, sizeof cases[c].shape);
        st_meta_t meta = {"framework", "pt"};
        st_writer_t *w = NULL;
        char err[1024] = "";
        ck_assert_msg(st_writer_open(&w, path, &t, cases[c].name ? 1 : 0, &meta, cases[c].nmeta, err, sizeof err) == 0,
                      "%s", err);
        if (data) ck_assert_int_eq(st_write(w, vals, data), 0);
        ck_assert_msg(st_writer_close(w, err, sizeof err) == 0, "%s", err);
        size_t len;
        unsigned char *got = slurp(path, &len);
        ck_assert_uint_eq(len, 8 + hl + data);
        ck_assert_msg(memcmp(got, want, len) == 0, "case %d: bytes differ from the reference", c);

        st_reader_t *r = NULL;
        ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(r->ntensors, cases[c].name ? 1 : 0);
        ck_assert_int_eq(r->nmeta, cases[c].nmeta);
        if (cases[c].name) {
            float back[6];
            ck_assert_int_eq(st_read(r, 0, back, 0, sizeof back, err, sizeof err), 0);
            ck_assert(memcmp(back, vals, sizeof vals) == 0);
        }
        st_close(r);
        free(got);
        free(want);
    }
}
END_TEST

// Names and metadata with quotes, backslashes, newlines and non-ASCII survive; the reader also
// accepts any key order, tensors listed out of offset order and whitespace in the header.
START_TEST(test_odd_names_and_layouts) {
    const char *path = path_in("odd.safetensors");
    st_tensor_t t[2] = {{.name = "we\"ird\\name\n\xC3\xA9", .dtype = ST_BF16, .ndim = 1, .shape = {3}},
                        {.name = "/\t", .dtype = ST_F32, .ndim = 0}};
    st_meta_t meta = {"k\"ey", "va\\lue\x01"};
    st_writer_t *w = NULL;
    char err[1024] = "";
    ck_assert_msg(st_writer_open(&w, path, t, 2, &meta, 1, err, sizeof err) == 0, "%s", err);
    unsigned char data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    ck_assert_int_eq(st_write(w, data, 10), 0);
    ck_assert_int_eq(st_writer_close(w, err, sizeof err), 0);
    st_reader_t *r = NULL;
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st_find(r, t[0].name), 0);
    ck_assert_int_eq(st_find(r, t[1].name), 1);
    ck_assert_str_eq(st_meta_get(r, "k\"ey"), "va\\lue\x01");
    st_close(r);

    const char *hdr = " {\"b\" : {\"shape\":[2], \"data_offsets\":[8,16], \"dtype\":\"F32\"},\n"
                      "\"a\":{\"data_offsets\":[0,8],\"dtype\":\"BF16\",\"shape\":[2,2]}}";
    // The format wants '{' first: a leading space is refused ...
    write_raw(path, strlen(hdr), hdr, 16);
    ck_assert_int_eq(st_open(path, &r, err, sizeof err), -EINVAL);
    char want[1200];
    snprintf(want, sizeof want, "%s: the header does not start with '{' (it must be a JSON object)", path);
    ck_assert_str_eq(err, want);
    // ... the rest is fine, and tensors come back in file order.
    write_raw(path, strlen(hdr) - 1, hdr + 1, 16);
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(r->tensors[0].name, "a");
    ck_assert_str_eq(r->tensors[1].name, "b");
    ck_assert_int_eq(st_find(r, "b"), 1);
    ck_assert_int_eq(r->tensors[0].ndim, 2);
    st_close(r);
}
END_TEST

// ---------------------------------------------------------------- bad files

#define A10 "aaaaaaaaaa"
#define A90 A10 A10 A10 A10 A10 A10 A10 A10 A10
#define A100 A90 A10

typedef struct {
    const char *what;
    uint64_t declared;   // header length to declare; 0 → strlen(header)
    const char *header;  // NULL: the file is `raw_len` bytes of zeros
    size_t data_len;
    const char *msg;     // after "PATH: "
} bad_file_t;

static const bad_file_t bad_files[] = {
    {"truncated", 0, NULL, 5, "5 bytes, too small for a safetensors file (its header length alone is 8 bytes)"},
    {"empty", 0, NULL, 0, "0 bytes, too small for a safetensors file (its header length alone is 8 bytes)"},
    {"header past the end", 100, "{}", 10, "header length 100 runs past the end of the file (20 bytes leave at most "
                                          "12; truncated?)"},
    {"header too large", 200000000, "{}", 0, "header length 200000000 is over the limit of 100000000 bytes (not a "
                                             "safetensors file?)"},
    {"zero header", 0, "", 0, "the header does not start with '{' (it must be a JSON object)"},
    {"not an object", 0, "[]", 0, "the header does not start with '{' (it must be a JSON object)"},
    {"bad JSON", 0, "{\"a\":{\"dtype\":\"F32\",}}", 0, "header: byte 20: expected a string key, got '}'"},
    {"cut JSON", 6, "{\"a\":{\"dtype\":\"F32\"}}", 0, "header: byte 6: expected a string key, got end of input"},
    {"trailing JSON", 0, "{}{}", 0, "header: byte 2: unexpected data after the document ('{')"},
    {"bad UTF-8", 0, "{\"\xC3\":1}", 0, "header: byte 2: invalid UTF-8 in a string (byte 0xc3)"},
    {"duplicate tensor", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                            "\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}", 8,
     "header: byte 53: duplicate key \"x\" (first at byte 1)"},
    {"bad dtype", 0, "{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
     "tensor 'x': dtype 'I64' is not supported (accepted: F32, BF16, F16)"},
    {"dtype not a string", 0, "{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'x': dtype: expected a string, got a number"},
    {"shape/offset mismatch", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 12,
     "tensor 'x': data_offsets [0, 12] hold 12 bytes, shape [4] of F32 needs 16"},
    {"shape/offset mismatch 2d", 0, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16,
     "tensor 'w': data_offsets [0, 16] hold 16 bytes, shape [2, 3] of BF16 needs 12"},
    {"overlap", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24,
     "tensors 'a' [0, 16] and 'b' [8, 24] overlap"},
    {"same range", 0, "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8,
     "tensors 'a' [0, 8] and 'b' [0, 8] overlap"},
    {"empty inside another", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                                "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}", 16,
     "tensors 'a' [0, 16] and 'z' [8, 8] overlap"},
    {"out of range", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
     "tensor 'x': data_offsets [0, 16] run past the end of the data section (8 bytes)"},
    {"huge offsets", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[18446744073709551612,"
                        "18446744073709551615]}}", 8,
     "tensor 'x': data_offsets [18446744073709551612, 18446744073709551615] hold 3 bytes, shape [1] of F32 needs 4"},
    {"offsets past u64", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551616]}}", 4,
     "tensor 'x': data_offsets[1]: expected a non-negative integer, got 18446744073709551616"},
    {"end before begin", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
     "tensor 'x': data_offsets [8, 4] end before they begin"},
    {"hole", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}", 24,
     "data section bytes [8, 16) belong to no tensor (a hole before tensor 'b'; the tensors must cover the data "
     "section exactly)"},
    {"hole at start", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
     "data section bytes [0, 4) belong to no tensor (a hole before tensor 'a'; the tensors must cover the data "
     "section exactly)"},
    {"trailing data", 0, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
     "data section bytes [8, 12) belong to no tensor (after the last one; the tensors must cover the data section "
     "exactly)"},
    {"data without tensors", 0, "{}", 3,
     "data section bytes [0, 3) belong to no tensor (after the last one; the tensors must cover the data section "
     "exactly)"},
    {"negative dim", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,8]}}", 8,
     "tensor 'x': shape[1]: expected a non-negative integer, got -3"},
    {"fractional dim", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8,
     "tensor 'x': shape[0]: expected a non-negative integer, got 1.5"},
    {"string dim", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
     "tensor 'x': shape[0]: expected a non-negative integer, got a string"},
    {"nested dim", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8,
     "tensor 'x': shape[0]: expected a non-negative integer, got an array"},
    {"too many dims", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
     "tensor 'x': shape has 9 dimensions (at most 8)"},
    {"shape not an array", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", 4,
     "tensor 'x': shape: expected an array, got an object"},
    {"shape overflow", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
     "tensor 'x': shape [4294967296, 4294967296] of F32 has more bytes than 64 bits count"},
    {"offsets wrong length", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
     "tensor 'x': data_offsets: expected [begin, end], got 3 numbers"},
    {"offsets not an array", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}}", 4,
     "tensor 'x': data_offsets: expected [begin, end], got a string"},
    {"missing field", 0, "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'x': missing field 'shape'"},
    {"unknown field", 0, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"stride\":[1]}}", 4,
     "tensor 'x': unknown field 'stride' (accepted: dtype, shape, data_offsets)"},
    {"entry not an object", 0, "{\"x\":[1]}", 0, "tensor 'x': expected an object {dtype, shape, data_offsets}, got an array"},
    {"metadata not an object", 0, "{\"__metadata__\":\"pt\"}", 0,
     "__metadata__: expected an object of strings, got a string"},
    {"metadata value", 0, "{\"__metadata__\":{\"format\":\"pt\",\"step\":12}}", 0,
     "__metadata__ 'step': expected a string, got a number"},
    {"metadata NUL", 0, "{\"__metadata__\":{\"k\":\"a\\u0000\"}}", 0,
     "__metadata__ 'k': holds a NUL character (\\u0000)"},
    {"name with NUL", 0, "{\"x\\u0000y\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
     "tensor 'x\\u0000y': the name holds a NUL character (\\u0000)"},
    {"long name", 0, "{\"" A100 "\":{\"dtype\":\"Q8\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
     "tensor '" A90 "aaaa'...: dtype 'Q8' is not supported (accepted: F32, BF16, F16)"},
    {"name with newline", 0, "{\"x\\ny\":{\"dtype\":\"Q8\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
     "tensor 'x\\ny': dtype 'Q8' is not supported (accepted: F32, BF16, F16)"},
};
enum { NBADF = sizeof bad_files / sizeof bad_files[0] };

START_TEST(test_bad_file) {
    const bad_file_t *b = &bad_files[_i];
    const char *path = path_in("bad.safetensors");
    if (b->header) {
        write_raw(path, b->declared ? b->declared : strlen(b->header), b->header, b->data_len);
    } else {
        FILE *f = fopen(path, "wb");
        for (size_t i = 0; i < b->data_len; i++) fputc(0, f);
        fclose(f);
    }
    st_reader_t *r = (st_reader_t *)&r;
    char err[1024] = "", want[2048];
    int rc = st_open(path, &r, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "%s: rc %d (%s)", b->what, rc, err);
    ck_assert_ptr_null(r);
    snprintf(want, sizeof want, "%s: %s", path, b->msg);
    ck_assert_msg(strcmp(err, want) == 0, "%s:\n got: %s\nwant: %s", b->what, err, want);
}
END_TEST

START_TEST(test_open_errors) {
    st_reader_t *r = NULL;
    char err[1024] = "", want[2048];
    const char *missing = path_in("missing.safetensors");
    ck_assert_int_eq(st_open(missing, &r, err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s: No such file or directory", missing);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(st_open(dir, &r, err, sizeof err), -EISDIR);
    snprintf(want, sizeof want, "%s: not a regular file", dir);
    ck_assert_str_eq(err, want);
    ck_assert_ptr_null(r);
}
END_TEST

START_TEST(test_read_errors) {
    const char *path = path_in("r.safetensors");
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    write_raw(path, strlen(hdr), hdr, 16);
    st_reader_t *r = NULL;
    char err[1024] = "", want[2048];
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    unsigned char buf[32];
    ck_assert_int_eq(st_read(r, 0, buf, 4, 12, err, sizeof err), 0);
    ck_assert_int_eq(buf[0], 0xAB);
    ck_assert_int_eq(st_read(r, 1, buf, 0, 4, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: no tensor 1 (the file has 1)", path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(st_read(r, -1, buf, 0, 4, err, sizeof err), -EINVAL);
    ck_assert_int_eq(st_read(r, 0, buf, 8, 12, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: tensor 'a': a read of 12 bytes at byte 8 runs past its 16 bytes", path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(st_read(r, 0, buf, UINT64_MAX, 1, err, sizeof err), -EINVAL);
    // The file shrinks under an open reader: a clean -EIO, not a short buffer.
    ck_assert_int_eq(truncate(path, (off_t)(r->data_start + 6)), 0);
    ck_assert_int_eq(st_read(r, 0, buf, 0, 16, err, sizeof err), -EIO);
    snprintf(want, sizeof want, "%s: tensor 'a': reading 16 bytes at file byte %" PRIu64 " failed: Input/output error "
             "(did the file shrink after it was opened?)", path, r->data_start);
    ck_assert_str_eq(err, want);
    st_close(r);
}
END_TEST

// ---------------------------------------------------------------- write failures

static void open_two(const char *path, st_writer_t **w) {
    st_tensor_t t[2] = {{.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}},
                        {.name = "b", .dtype = ST_F32, .ndim = 2, .shape = {2, 2}}};
    char err[1024] = "";
    ck_assert_msg(st_writer_open(w, path, t, 2, NULL, 0, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_write_counts) {
    const char *path = path_in("w.safetensors");
    char err[1024] = "", want[2048];
    unsigned char zero[64] = {0};
    st_writer_t *w = NULL;
    // Too few bytes: close names the first incomplete tensor.
    open_two(path, &w);
    ck_assert_int_eq(st_write(w, zero, 10), 0);
    ck_assert_int_eq(st_writer_close(w, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: closed after 10 of 24 bytes of tensor data: tensor 'b' has 2 of its 16 bytes", path);
    ck_assert_str_eq(err, want);
    open_two(path, &w);
    ck_assert_int_eq(st_writer_close(w, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: closed after 0 of 24 bytes of tensor data: tensor 'a' has 0 of its 8 bytes", path);
    ck_assert_str_eq(err, want);
    // Too many: refused before anything is written, and the error sticks.
    open_two(path, &w);
    ck_assert_int_eq(st_write(w, zero, 20), 0);
    ck_assert_int_eq(st_write(w, zero, 5), -EINVAL);
    snprintf(want, sizeof want, "%s: a write of 5 bytes runs past the declared tensor data (4 of 24 bytes were left)", path);
    ck_assert_str_eq(st_writer_error(w), want);
    ck_assert_int_eq(st_write(w, zero, 4), -EINVAL);
    ck_assert_int_eq(st_writer_close(w, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, want);
    // Abandoning is allowed at any point.
    open_two(path, &w);
    ck_assert_int_eq(st_write(w, zero, 3), 0);
    st_writer_free(w);
    st_writer_free(NULL);
    // Zero-byte writes are fine; exact size closes.
    open_two(path, &w);
    ck_assert_int_eq(st_write(w, NULL, 0), 0);
    ck_assert_int_eq(st_write(w, zero, 24), 0);
    ck_assert_int_eq(st_writer_close(w, err, sizeof err), 0);
    st_reader_t *r = NULL;
    ck_assert_msg(st_open(path, &r, err, sizeof err) == 0, "%s", err);
    st_close(r);
}
END_TEST

START_TEST(test_declaration_errors) {
    const char *path = path_in("d.safetensors");
    char err[1024] = "", want[2048];
    st_writer_t *w = NULL;
    struct { st_tensor_t t[2]; int n; st_meta_t meta[2]; int nmeta; const char *msg; } cases[] = {
        {{{.name = "a", .dtype = ST_F32}, {.name = "a", .dtype = ST_F32}}, 2, {{0}}, 0, "tensor 'a' is declared twice"},
        {{{.name = "", .dtype = ST_F32}}, 1, {{0}}, 0, "tensor 0 has no name"},
        {{{.name = "__metadata__", .dtype = ST_F32}}, 1, {{0}}, 0, "tensor 0: the name '__metadata__' is reserved"},
        {{{.name = "x", .dtype = (st_dtype_t)7}}, 1, {{0}}, 0, "tensor 'x': unknown dtype 7 (accepted: F32, BF16, F16)"},
        {{{.name = "x", .dtype = ST_F32, .ndim = 9}}, 1, {{0}}, 0, "tensor 'x': 9 dimensions (accepted: 0..8)"},
        {{{.name = "x", .dtype = ST_F32, .ndim = -1}}, 1, {{0}}, 0, "tensor 'x': -1 dimensions (accepted: 0..8)"},
        {{{.name = "x", .dtype = ST_F32, .ndim = 2, .shape = {1ULL << 32, 1ULL << 31}}}, 1, {{0}}, 0,
         "tensor 'x': sizes overflow 64 bits"},
        {{{.name = "x", .dtype = ST_BF16, .ndim = 1, .shape = {1ULL << 62}}, {.name = "y", .dtype = ST_BF16, .ndim = 1, .shape = {1ULL << 62}}},
         2, {{0}}, 0, "tensor 'y': sizes overflow 64 bits"},
        {{{.name = "bad\xFF", .dtype = ST_F32}}, 1, {{0}}, 0, "tensor 0: the name is not valid UTF-8"},
        {{{.name = "x", .dtype = ST_F32}}, 1, {{"k", "v"}, {"k", "w"}}, 2, "__metadata__ key 'k' is given twice"},
        {{{.name = "x", .dtype = ST_F32}}, 1, {{"k", NULL}}, 1, "__metadata__ entry 0: NULL key or value"},
        {{{.name = "x", .dtype = ST_F32}}, 1, {{"k", "\xC0\x80"}}, 1, "__metadata__ 'k': the value is not valid UTF-8"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rc = st_writer_open(&w, path, cases[c].t, cases[c].n, cases[c].meta, cases[c].nmeta, err, sizeof err);
        ck_assert_msg(rc == -EINVAL, "case %zu: rc %d", c, rc);
        ck_assert_ptr_null(w);
        snprintf(want, sizeof want, "%s: %s", path, cases[c].msg);
        ck_assert_msg(strcmp(err, want) == 0, "case %zu:\n got: %s\nwant: %s", c, err, want);
    }
    // A path that cannot be created.
    const char *nodir = path_in("no/such/dir.safetensors");
    st_tensor_t t = {.name = "x", .dtype = ST_F32};
    ck_assert_int_eq(st_writer_open(&w, nodir, &t, 1, NULL, 0, err, sizeof err), -ENOENT);
    snprintf(want, sizeof want, "%s: cannot create: No such file or directory", nodir);
    ck_assert_str_eq(err, want);
}
END_TEST

// /dev/full: every write fails with ENOSPC; the header goes out at open.
START_TEST(test_enospc) {
    if (access("/dev/full", W_OK) != 0) return; // not on this system: nothing to check
    st_tensor_t t = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {4}};
    st_writer_t *w = NULL;
    char err[1024] = "";
    ck_assert_int_eq(st_writer_open(&w, "/dev/full", &t, 1, NULL, 0, err, sizeof err), -ENOSPC);
    ck_assert_ptr_null(w);
    ck_assert_str_eq(err, "/dev/full: write of the 64-byte header failed at byte 0: No space left on device");
}
END_TEST

// A file-size limit inside the data: the first buffer goes out whole, the second is cut short
// (a short write, then EFBIG). A full buffer is written while the next one fills, so the
// failure shows at the st_write that fills the buffer after it (or at close); then it sticks
// through close. In a child, so the limit and the ignored SIGXFSZ do not leak into other tests.
START_TEST(test_efbig_mid_stream) {
    const char *path = path_in("big.safetensors");
    const size_t B = ST_STREAM_BUF, limit = B + 100000;
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {.rlim_cur = limit, .rlim_max = RLIM_INFINITY};
        getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = limit;
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
        st_tensor_t t = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {B}}; // 4 buffers of data
        st_writer_t *w = NULL;
        char err[1024] = "";
        if (st_writer_open(&w, path, &t, 1, NULL, 0, err, sizeof err) != 0) _exit(4);
        unsigned char *data = calloc(B, 1);
        if (!data) _exit(6);
        int rc1 = st_write(w, data, B / 2); // buffered
        int rc2 = st_write(w, data, B);     // the first buffer goes out: below the limit
        int rc3 = st_write(w, data, B);     // the second: cut at the limit
        int rc4 = st_write(w, data, B);     // the third is full: the second's failure shows
        int rc5 = st_write(w, data, 1);     // sticky
        char msg[1100];
        snprintf(msg, sizeof msg, "%d %d %d %d %d|%s|", rc1, rc2, rc3, rc4, rc5, st_writer_error(w));
        int rc6 = st_writer_close(w, err, sizeof err);
        size_t n = strlen(msg);
        snprintf(msg + n, sizeof msg - n, "%d|%s", rc6, err);
        ssize_t wr = write(fds[1], msg, strlen(msg));
        _exit(wr > 0 ? 0 : 5);
    }
    close(fds[1]);
    char buf[4096] = "";
    size_t got = 0;
    ssize_t k;
    while ((k = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)k;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    char want[4096];
    snprintf(want, sizeof want, "0 0 0 %d %d|%s: write at byte %zu failed: File too large|%d|%s: write at byte %zu "
             "failed: File too large", -EFBIG, -EFBIG, path, limit, -EFBIG, path, limit);
    ck_assert_msg(strcmp(buf, want) == 0, "\n got: %s\nwant: %s", buf, want);
}
END_TEST

// ---------------------------------------------------------------- values

// first_bad_float against the plain reference (isfinite, and x < 0 where negatives are bad):
// one value of each class at every place in arrays of 0..40 elements (the vector loop's lanes
// and its tail), then in arrays that span its blocks, where the first of two bad values wins.
static size_t first_bad_ref(const float *x, size_t n, int nonneg) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (nonneg && x[i] < 0)) return i;
    return n;
}

START_TEST(test_first_bad_float) {
    const float odd[] = {NAN, -NAN, INFINITY, -INFINITY, -1.0f, -FLT_MIN / 4, -FLT_MAX, -0.0f, FLT_MIN / 4,
                         FLT_MAX, 0.0f, 1.0f};
    float x[40];
    for (size_t n = 0; n <= 40; n++)
        for (size_t at = 0; at < (n ? n : 1); at++)
            for (size_t v = 0; v < sizeof odd / sizeof odd[0]; v++)
                for (int nonneg = 0; nonneg < 2; nonneg++) {
                    for (size_t i = 0; i < n; i++) x[i] = 0.5f + (float)i;
                    if (n) x[at] = odd[v];
                    ck_assert_msg(first_bad_float(x, n, nonneg) == first_bad_ref(x, n, nonneg),
                                  "n %zu, %g at %zu, nonneg %d: got %zu, want %zu", n, (double)odd[v], at, nonneg,
                                  first_bad_float(x, n, nonneg), first_bad_ref(x, n, nonneg));
                }
    enum { BIG = 3 * 4096 + 5 };
    float *y = malloc(BIG * sizeof *y);
    ck_assert_ptr_nonnull(y);
    for (size_t i = 0; i < BIG; i++) y[i] = (float)i;
    ck_assert_uint_eq(first_bad_float(y, BIG, 1), BIG);
    y[BIG - 1] = -2.0f;
    ck_assert_uint_eq(first_bad_float(y, BIG, 0), BIG);
    ck_assert_uint_eq(first_bad_float(y, BIG, 1), BIG - 1);
    y[8193] = NAN;
    ck_assert_uint_eq(first_bad_float(y, BIG, 0), 8193);
    y[4095] = INFINITY;
    ck_assert_uint_eq(first_bad_float(y, BIG, 1), 4095);
    free(y);
}
END_TEST

// ---------------------------------------------------------------- suite

static Suite *st_suite(void) {
    Suite *s = suite_create("safetensors");
    TCase *core = tcase_create("core");
    tcase_add_checked_fixture(core, dir_setup, dir_teardown);
    tcase_add_loop_test(core, test_round_trip, 0, 3);
    tcase_add_test(core, test_header_independent);
    tcase_add_test(core, test_checksums);
    tcase_add_test(core, test_stream_spans_buffers);
    tcase_add_test(core, test_reference_bytes);
    tcase_add_test(core, test_odd_names_and_layouts);
    tcase_set_timeout(core, 60);
    suite_add_tcase(s, core);
    TCase *bad = tcase_create("bad_files");
    tcase_add_checked_fixture(bad, dir_setup, dir_teardown);
    tcase_add_loop_test(bad, test_bad_file, 0, NBADF);
    tcase_add_test(bad, test_open_errors);
    tcase_add_test(bad, test_read_errors);
    suite_add_tcase(s, bad);
    TCase *faults = tcase_create("faults");
    tcase_add_checked_fixture(faults, dir_setup, dir_teardown);
    tcase_add_test(faults, test_write_counts);
    tcase_add_test(faults, test_declaration_errors);
    tcase_add_test(faults, test_enospc);
    tcase_add_test(faults, test_efbig_mid_stream);
    suite_add_tcase(s, faults);
    TCase *values = tcase_create("values");
    tcase_add_test(values, test_first_bad_float);
    suite_add_tcase(s, values);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(st_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
