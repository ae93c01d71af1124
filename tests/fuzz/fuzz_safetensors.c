// fuzz_safetensors.c — libFuzzer target for the safetensors reader: the input is a whole
// file (kept in a memfd, opened through /proc/self/fd). A rejection must be one line naming
// the file; an accepted file must read every tensor in full and in two pieces, find every
// name, and come back the same through the writer: written again (same tensors, metadata,
// data) and reopened, it has the same tensors at the same offsets with the same bytes.
// Built by tests/fuzz/run.sh (`make fuzz`; CTest's test_fuzz_replay runs its corpus once), not by CMake.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "safetensors.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static int fd_in = -1, fd_out = -1;
static char path_in[64], path_out[64];

static int make_file(char *path, size_t len, const char *tag) {
    int fd = memfd_create(tag, 0);
    if (fd < 0) { // no memfd: a temporary file does the same
        char tmpl[] = "/tmp/fuzz_st_XXXXXX";
        fd = mkstemp(tmpl);
        CHECK(fd >= 0);
        unlink(tmpl);
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

static void set_contents(int fd, const uint8_t *data, size_t size) {
    CHECK(ftruncate(fd, 0) == 0);
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        CHECK(w > 0);
        done += (size_t)w;
    }
}

static int one_line(const char *err, const char *path) {
    return err[0] && !strchr(err, '\n') && strncmp(err, path, strlen(path)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fd_in < 0) {
        fd_in = make_file(path_in, sizeof path_in, "st_in");
        fd_out = make_file(path_out, sizeof path_out, "st_out");
    }
    set_contents(fd_in, data, size);
    st_reader_t *r = NULL;
    char err[2048] = "";
    int rc = st_open(path_in, &r, err, sizeof err);
    if (rc) {
        CHECK(r == NULL && rc < 0 && one_line(err, path_in));
        return 0;
    }
    CHECK(r->data_start <= r->file_size && r->file_size == size);
    uint64_t data_len = r->file_size - r->data_start, off = 0;
    uint8_t *buf = malloc(data_len + 1);
    CHECK(buf);
    int roundtrip = 1;
    for (int i = 0; i < r->ntensors; i++) {
        const st_tensor_t *t = &r->tensors[i];
        CHECK(t->begin == off && t->end >= t->begin && t->end <= data_len); // exact tiling
        off = t->end;
        CHECK(st_find(r, t->name) == i);
        if (!t->name[0]) roundtrip = 0; // the writer refuses empty names
        uint64_t n = t->end - t->begin;
        CHECK(st_read(r, i, buf + t->begin, 0, (size_t)n, err, sizeof err) == 0);
        CHECK(memcmp(buf + t->begin, data + r->data_start + t->begin, (size_t)n) == 0);
        if (n >= 2) {
            uint8_t two[2] = {0};
            CHECK(st_read(r, i, two, n / 2, 1, err, sizeof err) == 0);
            CHECK(st_read(r, i, two + 1, n - 1, 1, err, sizeof err) == 0);
            CHECK(two[0] == buf[t->begin + n / 2] && two[1] == buf[t->begin + n - 1]);
        }
        CHECK(st_read(r, i, buf, n, 1, err, sizeof err) == -EINVAL && one_line(err, path_in));
    }
    CHECK(off == data_len);
    CHECK(st_read(r, r->ntensors, buf, 0, 0, err, sizeof err) == -EINVAL);
    // stored checksums: a match, or one line naming the file
    rc = st_verify_rest(r, err, sizeof err);
    CHECK(rc == 0 || (rc == -EINVAL && one_line(err, path_in)));
    for (int i = 0; i < r->nmeta; i++) {
        const char *v = st_meta_get(r, r->meta[i].key);
        CHECK(v == r->meta[i].value); // keys are unique
    }

    if (roundtrip) {
        st_writer_t *w = NULL;
        rc = st_writer_open(&w, path_out, r->tensors, r->ntensors, r->meta, r->nmeta, err, sizeof err);
        CHECK(rc == 0);
        // In two uneven pieces, spanning tensors.
        size_t half = (size_t)(data_len / 3);
        CHECK(st_write(w, buf, half) == 0);
        CHECK(st_write(w, buf + half, (size_t)data_len - half) == 0);
        CHECK(st_writer_close(w, err, sizeof err) == 0);
        st_reader_t *r2 = NULL;
        CHECK(st_open(path_out, &r2, err, sizeof err) == 0);
        CHECK(r2->ntensors == r->ntensors && r2->nmeta == r->nmeta);
        CHECK(r2->data_start % 8 == 0 && r2->file_size - r2->data_start == data_len);
        for (int i = 0; i < r->ntensors; i++) {
            const st_tensor_t *a = &r->tensors[i], *b = &r2->tensors[i];
            CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim);
            CHECK(memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim) == 0);
            CHECK(a->begin == b->begin && a->end == b->end);
        }
        for (int i = 0; i < r->nmeta; i++)
            CHECK(strcmp(r->meta[i].key, r2->meta[i].key) == 0 && strcmp(r->meta[i].value, r2->meta[i].value) == 0);
        uint8_t *back = malloc(data_len + 1);
        CHECK(back);
        for (int i = 0; i < r2->ntensors; i++) {
            const st_tensor_t *t = &r2->tensors[i];
            CHECK(st_read(r2, i, back + t->begin, 0, (size_t)(t->end - t->begin), err, sizeof err) == 0);
        }
        CHECK(memcmp(back, buf, (size_t)data_len) == 0);
        free(back);
        st_close(r2);
    }
    free(buf);
    st_close(r);
    return 0;
}
