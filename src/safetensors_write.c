// safetensors_write.c — the streaming safetensors writer behind safetensors.h. It builds the
// header in memory (keys in the caller's order), writes it with the length prefix, then
// gathers tensor bytes into two fixed buffers (ST_STREAM_BUF, 4096-aligned: memory use does
// not grow with the model), each of which goes out whole with O_DIRECT where the filesystem
// takes it, on a thread of the writer's while the caller fills the other. So a checkpoint of
// many GiB neither fills the page cache nor pays the kernel's copy into it (on a VM whose
// fresh pages are slow, that copy ran at 0.2 GB/s against the disk's 2), and the disk writes
// while the caller reads and hashes. Called by the checkpoint code (and tests, the fuzz
// target's round trip).
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "crc32c.h"
#include "json.h" // uses: json_escape
#include "safetensors.h"
#include "safetensors_internal.h"
#include "worker.h"

static int write_all(int fd, const void *buf, size_t n, size_t *done) {
    const char *p = buf;
    *done = 0;
    while (*done < n) {
        size_t chunk = n - *done < ST_IO_CHUNK ? n - *done : ST_IO_CHUNK;
        ssize_t w = write(fd, p + *done, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        if (w == 0) return -EIO;
        *done += (size_t)w;
    }
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
    const char *p = buf;
    for (size_t done = 0; done < n;) {
        ssize_t k = pwrite(fd, p + done, n - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        done += (size_t)k;
    }
    return 0;
}

// A growing string for the header.
typedef struct { char *p; size_t len, cap; int oom; } sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(sbuf_t *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf_t *b, uint64_t v) {
    char t[24];
    int k = snprintf(t, sizeof t, "%" PRIu64, v);
    sb_put(b, t, (size_t)k);
}

// Appends s as a JSON string; -EILSEQ when s is not UTF-8.
static int sb_json(sbuf_t *b, const char *s) {
    size_t n = strlen(s);
    ssize_t k = json_escape(NULL, 0, s, n);
    if (k < 0) return (int)k;
    char stackbuf[256];
    char *t = (size_t)k < sizeof stackbuf ? stackbuf : malloc((size_t)k + 1);
    if (!t) { b->oom = 1; return 0; }
    json_escape(t, (size_t)k + 1, s, n);
    sb_put(b, t, (size_t)k);
    if (t != stackbuf) free(t);
    return 0;
}

struct st_writer {
    int fd;
    char *path;
    uint64_t data_start;   // 8 + N
    uint64_t total;        // declared tensor bytes
    uint64_t written;      // tensor bytes written so far
    int ntensors;
    uint64_t *ends;        // (ntensors) data_offsets end of each tensor
    char **names;          // (ntensors) copies, for messages
    // ST_CRC32C: the header stays in memory with 8 placeholder hex digits per tensor at
    // crc_at[i]; st_write folds the bytes into crc[cur]; close writes the header again
    char *header;          // (header_len) the whole header, length prefix included
    size_t header_len;
    size_t *crc_at;        // (ntensors) offset of tensor i's digits in header
    uint32_t *crc;         // (ntensors)
    int cur;               // the tensor st_write is in
    // the stream: buf (one of bufs, ST_STREAM_BUF bytes each, ST_ALIGN-aligned) holds file
    // bytes [base, base + fill); it starts at the data's first aligned block, the header's
    // last bytes copied in front, and goes out whole whenever it fills (direct: with
    // O_DIRECT, which close drops for the unaligned tail and the header's rewrite)
    unsigned char *bufs[2], *buf;
    size_t fill;
    uint64_t base;
    int direct;            // the thread's while it holds a job; the caller's otherwise
    // The writer thread (when it could be started) writes a full buffer while the caller
    // fills the other one: st_write hands bufs[k] over as a job and goes on in bufs[1 - k];
    // before its next hand-off, and at close, it waits for the job to be done, so a buffer
    // is never filled while it is written. wk.mu guards job and the job's outcome; the
    // wait for job == 0 (under mu) orders the thread's writes to direct and the outcome
    // before the caller reads them.
    worker_t wk;           // not running: st_write writes each full buffer itself
    int job;               // a buffer handed over and not yet written
    const unsigned char *job_buf;
    uint64_t job_at;
    int job_rc;            // the first job that failed: -errno, and the file byte it failed at
    uint64_t job_failed_at;
    int err;               // first error (sticky), 0 while none
    char msg[4352];        // its message
};

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// The first name (in sorted order) that occurs twice in names[0..n) into *dup (NULL when
// none). 0 or -ENOMEM.
static int find_duplicate(const char **names, int n, const char **dup) {
    *dup = NULL;
    if (n < 2) return 0;
    const char **s = malloc((size_t)n * sizeof *s);
    if (!s) return -ENOMEM;
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_str_ptr);
    for (int i = 1; i < n && !*dup; i++)
        if (strcmp(s[i - 1], s[i]) == 0) *dup = s[i];
    free(s);
    return 0;
}

static void *writer_main(void *arg);

void st_writer_free(st_writer_t *w) {
    if (!w) return;
    worker_stop(&w->wk);
    if (w->fd >= 0) close(w->fd);
    free(w->bufs[0]);
    free(w->bufs[1]);
    free(w->path);
    free(w->ends);
    free(w->header);
    free(w->crc_at);
    free(w->crc);
    if (w->names)
        for (int i = 0; i < w->ntensors; i++) free(w->names[i]);
    free(w->names);
    free(w);
}

// Builds the whole header (8-byte length + padded JSON) into b. 0 or -errno with err.
// With crc_at, __metadata__ also gets "crc32c:<name>": "00000000" for every tensor, and
// crc_at[i] the offset of tensor i's digits in b.
static int build_header(sbuf_t *b, const char *path, const st_tensor_t *t, int n, const st_meta_t *meta, int nmeta,
                        uint64_t *ends, size_t *crc_at, char *err, size_t errlen) {
    char nm[128];
    sb_put(b, "\0\0\0\0\0\0\0\0{", 9);
    const int has_meta = nmeta > 0 || (crc_at && n > 0);
    if (has_meta) {
        sb_str(b, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (!meta[i].key || !meta[i].value)
                return st_werr(err, errlen, -EINVAL, "%s: __metadata__ entry %d: NULL key or value", path, i);
            if (i) sb_str(b, ",");
            if (sb_json(b, meta[i].key) < 0)
                return st_werr(err, errlen, -EINVAL, "%s: __metadata__ entry %d: the key is not valid UTF-8", path, i);
            sb_str(b, ":");
            if (sb_json(b, meta[i].value) < 0)
                return st_werr(err, errlen, -EINVAL, "%s: __metadata__ %s: the value is not valid UTF-8", path,
                            st_shown(nm, sizeof nm, meta[i].key, strlen(meta[i].key)));
            if (crc_at && !strncmp(meta[i].key, ST_CRC_KEY, strlen(ST_CRC_KEY)))
                return st_werr(err, errlen, -EINVAL, "%s: __metadata__ %s: keys starting '" ST_CRC_KEY "' are the "
                            "writer's own", path, st_shown(nm, sizeof nm, meta[i].key, strlen(meta[i].key)));
        }
        for (int i = 0; crc_at && i < n; i++) {
            if (!t[i].name) return st_werr(err, errlen, -EINVAL, "%s: tensor %d has no name", path, i);
            if (i || nmeta > 0) sb_str(b, ",");
            char *key = malloc(strlen(ST_CRC_KEY) + strlen(t[i].name) + 1);
            if (!key) { b->oom = 1; break; }
            strcpy(key, ST_CRC_KEY);
            strcat(key, t[i].name);
            int bad = sb_json(b, key);
            free(key);
            if (bad < 0) return st_werr(err, errlen, -EINVAL, "%s: tensor %d: the name is not valid UTF-8", path, i);
            sb_str(b, ":\"");
            crc_at[i] = b->len;
            sb_str(b, "00000000\"");
        }
        sb_str(b, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor_t *x = &t[i];
        if (!x->name || !x->name[0]) return st_werr(err, errlen, -EINVAL, "%s: tensor %d has no name", path, i);
        st_shown(nm, sizeof nm, x->name, strlen(x->name));
        if (strcmp(x->name, "__metadata__") == 0)
            return st_werr(err, errlen, -EINVAL, "%s: tensor %d: the name '__metadata__' is reserved", path, i);
        if (!st_dtype_valid(x->dtype))
            return st_werr(err, errlen, -EINVAL, "%s: tensor %s: unknown dtype %d (accepted: F32, BF16, F16)", path, nm,
                        (int)x->dtype);
        if (x->ndim < 0 || x->ndim > ST_MAX_DIMS)
            return st_werr(err, errlen, -EINVAL, "%s: tensor %s: %d dimensions (accepted: 0..%d)", path, nm, x->ndim,
                        ST_MAX_DIMS);
        uint64_t bytes;
        if (st_tensor_bytes(x->ndim, x->shape, x->dtype, &bytes) < 0 || __builtin_add_overflow(off, bytes, &ends[i]))
            return st_werr(err, errlen, -EINVAL, "%s: tensor %s: sizes overflow 64 bits", path, nm);
        if (i || has_meta) sb_str(b, ",");
        if (sb_json(b, x->name) < 0)
            return st_werr(err, errlen, -EINVAL, "%s: tensor %d: the name is not valid UTF-8", path, i);
        sb_str(b, ":{\"dtype\":\"");
        sb_str(b, st_dtype_name(x->dtype));
        sb_str(b, "\",\"shape\":[");
        for (int d = 0; d < x->ndim; d++) {
            if (d) sb_str(b, ",");
            sb_u64(b, x->shape[d]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, off);
        sb_str(b, ",");
        sb_u64(b, ends[i]);
        sb_str(b, "]}");
        off = ends[i];
    }
    sb_str(b, "}");
    while ((b->len - 8) % 8) sb_str(b, " ");
    if (b->oom) return st_werr(err, errlen, -ENOMEM, "%s: out of memory building the header", path);
    uint64_t hlen = b->len - 8;
    if (hlen > ST_MAX_HEADER)
        return st_werr(err, errlen, -EINVAL, "%s: the header would be %" PRIu64 " bytes (at most %llu: fewer or shorter "
                    "names)", path, hlen, ST_MAX_HEADER);
    for (int i = 0; i < 8; i++) b->p[i] = (char)(hlen >> (8 * i) & 0xFF);
    return 0;
}

int st_writer_open(st_writer_t **out, const char *path, const st_tensor_t *tensors, int n, const st_meta_t *meta,
                   int nmeta, char *err, size_t errlen) {
    return st_writer_open_flags(out, path, tensors, n, meta, nmeta, 0, err, errlen);
}

int st_writer_open_flags(st_writer_t **out, const char *path, const st_tensor_t *tensors, int n, const st_meta_t *meta,
                         int nmeta, unsigned flags, char *err, size_t errlen) {
    *out = NULL;
    if (!path) return st_werr(err, errlen, -EINVAL, "safetensors writer: no path");
    if (n < 0 || (n > 0 && !tensors) || nmeta < 0 || (nmeta > 0 && !meta))
        return st_werr(err, errlen, -EINVAL, "%s: bad tensor list (%d tensors, %d metadata entries)", path, n, nmeta);
    st_writer_t *w = calloc(1, sizeof *w);
    sbuf_t b = {0};
    const char **names = NULL;
    int rc = -ENOMEM;
    if (!w) goto oom;
    w->fd = -1;
    w->path = strdup(path);
    w->ends = malloc((size_t)(n ? n : 1) * sizeof *w->ends);
    w->names = calloc((size_t)(n ? n : 1), sizeof *w->names);
    names = malloc(((size_t)n + (size_t)nmeta + 1) * sizeof *names);
    if (!w->path || !w->ends || !w->names || !names) goto oom;
    if (flags & ST_CRC32C) {
        w->crc_at = calloc((size_t)(n ? n : 1), sizeof *w->crc_at);
        w->crc = calloc((size_t)(n ? n : 1), sizeof *w->crc);
        if (!w->crc_at || !w->crc) goto oom;
    }
    w->ntensors = n;
    for (int i = 0; i < n; i++) {
        if (tensors[i].name && !(w->names[i] = strdup(tensors[i].name))) goto oom;
        names[i] = tensors[i].name ? tensors[i].name : "";
    }

    rc = build_header(&b, path, tensors, n, meta, nmeta, w->ends, w->crc_at, err, errlen);
    if (rc) goto fail;
    const char *dup;
    char nm[128];
    if (find_duplicate(names, n, &dup) < 0) goto oom;
    if (dup) {
        rc = st_werr(err, errlen, -EINVAL, "%s: tensor %s is declared twice", path, st_shown(nm, sizeof nm, dup, strlen(dup)));
        goto fail;
    }
    for (int i = 0; i < nmeta; i++) names[i] = meta[i].key;
    if (find_duplicate(names, nmeta, &dup) < 0) goto oom;
    if (dup) {
        rc = st_werr(err, errlen, -EINVAL, "%s: __metadata__ key %s is given twice", path,
                  st_shown(nm, sizeof nm, dup, strlen(dup)));
        goto fail;
    }
    w->total = n ? w->ends[n - 1] : 0;
    w->data_start = b.len;

    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = st_werr(err, errlen, -errno, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    size_t done;
    if ((rc = write_all(w->fd, b.p, b.len, &done)) < 0) {
        st_werr(err, errlen, rc, "%s: write of the %zu-byte header failed at byte %zu: %s", path, b.len, done, strerror(-rc));
        goto fail;
    }
    // the stream from the data's first aligned block, the header's bytes in it copied in front;
    // O_DIRECT from here where the filesystem takes it (not tmpfs: then the page cache)
    for (int k = 0; k < 2; k++)
        if (posix_memalign((void **)&w->bufs[k], ST_ALIGN, ST_STREAM_BUF) != 0) {
            w->bufs[k] = NULL;
            goto oom;
        }
    w->buf = w->bufs[0];
    w->base = w->data_start & ~(uint64_t)(ST_ALIGN - 1);
    w->fill = (size_t)(w->data_start - w->base);
    memcpy(w->buf, b.p + w->base, w->fill);
    int fl = fcntl(w->fd, F_GETFL);
    w->direct = fl >= 0 && fcntl(w->fd, F_SETFL, fl | O_DIRECT) == 0;
    worker_start(&w->wk, writer_main, w); // without it, st_write writes each buffer itself
    if (w->crc) { // kept, to be written again with the checksums at close
        w->header = b.p;
        w->header_len = b.len;
        b.p = NULL;
    }
    free(b.p);
    free(names);
    *out = w;
    return 0;

oom:
    rc = st_werr(err, errlen, -ENOMEM, "%s: out of memory", path);
fail:
    free(b.p);
    free(names);
    st_writer_free(w);
    return rc;
}

static int sticky(st_writer_t *w, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int sticky(st_writer_t *w, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    w->err = rc;
    return rc;
}

// Ends O_DIRECT for the rest of the file. 0 or -errno.
static int drop_direct(st_writer_t *w) {
    if (!w->direct) return 0;
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) != 0) return -errno;
    w->direct = 0;
    return 0;
}

// Writes p[0..n) at file byte at: with O_DIRECT while the writer has it (p, n and at
// aligned), else through the page cache. A direct write the filesystem turns down (-EINVAL)
// is made again without O_DIRECT, which the writer then drops. 0, or -errno and *failed_at.
static int out_at(st_writer_t *w, const unsigned char *p, size_t n, uint64_t at, uint64_t *failed_at) {
    size_t done = 0;
    int rc = 0;
    while (done < n && rc == 0) {
        ssize_t k = pwrite(w->fd, p + done, n - done, (off_t)(at + done));
        if (k > 0) done += (size_t)k;
        else if (k == 0) rc = -EIO;
        else if (errno == EINTR) continue;
        else if (errno == EINVAL && w->direct) rc = drop_direct(w);
        else rc = -errno;
    }
    *failed_at = at + done;
    return rc;
}

static int write_failed(st_writer_t *w, int rc, uint64_t at) {
    return sticky(w, rc, "%s: write at byte %" PRIu64 " failed: %s", w->path, at, strerror(-rc));
}

// Writes n bytes of the buffer from off, at file byte base + off, on the caller's thread (the
// thread idle). The error sticks.
static int stream_out(st_writer_t *w, size_t off, size_t n) {
    uint64_t at;
    int rc = out_at(w, w->buf + off, n, w->base + off, &at);
    return rc ? write_failed(w, rc, at) : 0;
}

static void *writer_main(void *arg) {
    st_writer_t *w = arg;
    pthread_mutex_lock(&w->wk.mu);
    for (;;) {
        while (!w->job && !w->wk.stop) pthread_cond_wait(&w->wk.cv, &w->wk.mu);
        if (!w->job) break; // stopped, nothing left
        const unsigned char *p = w->job_buf;
        const uint64_t at = w->job_at;
        const int failed = w->job_rc != 0;
        pthread_mutex_unlock(&w->wk.mu);
        uint64_t bad = 0;
        int rc = failed ? 0 : out_at(w, p, ST_STREAM_BUF, at, &bad); // after a failure: nothing more
        pthread_mutex_lock(&w->wk.mu);
        if (rc) {
            w->job_rc = rc;
            w->job_failed_at = bad;
        }
        w->job = 0;
        pthread_cond_broadcast(&w->wk.cv);
    }
    pthread_mutex_unlock(&w->wk.mu);
    return NULL;
}

// Waits for the job in hand; its failure becomes the writer's sticky error. 0 or that error.
static int wait_job(st_writer_t *w) {
    if (!w->wk.running) return 0;
    pthread_mutex_lock(&w->wk.mu);
    while (w->job) pthread_cond_wait(&w->wk.cv, &w->wk.mu);
    const int rc = w->job_rc;
    const uint64_t at = w->job_failed_at;
    pthread_mutex_unlock(&w->wk.mu);
    return rc && !w->err ? write_failed(w, rc, at) : w->err;
}

// The full buffer goes out: handed to the thread (after the job before it is done), or
// written here. Then the other buffer is the stream's.
static int buffer_full(st_writer_t *w) {
    if (!w->wk.running) {
        int rc = stream_out(w, 0, ST_STREAM_BUF);
        if (rc) return rc;
    } else {
        int rc = wait_job(w);
        if (rc) return rc;
        pthread_mutex_lock(&w->wk.mu);
        w->job = 1;
        w->job_buf = w->buf;
        w->job_at = w->base;
        pthread_cond_broadcast(&w->wk.cv);
        pthread_mutex_unlock(&w->wk.mu);
        w->buf = w->buf == w->bufs[0] ? w->bufs[1] : w->bufs[0];
    }
    w->base += ST_STREAM_BUF;
    w->fill = 0;
    return 0;
}

int st_write(st_writer_t *w, const void *buf, size_t n) {
    if (!w) return -EINVAL;
    if (w->err) return w->err;
    if (n > w->total - w->written)
        return sticky(w, -EINVAL, "%s: a write of %zu bytes runs past the declared tensor data (%" PRIu64 " of %" PRIu64
                      " bytes were left)", w->path, n, w->total - w->written, w->total);
    if (n && !buf) return sticky(w, -EINVAL, "%s: a write of %zu bytes from NULL", w->path, n);
    const unsigned char *p = buf;
    while (n) {
        size_t k = ST_STREAM_BUF - w->fill < n ? ST_STREAM_BUF - w->fill : n;
        memcpy(w->buf + w->fill, p, k);
        for (size_t j = 0; w->crc && j < k;) { // fold the bytes into the tensors they belong to
            while (w->ends[w->cur] <= w->written) w->cur++;
            const size_t left = (size_t)(w->ends[w->cur] - w->written), take = left < k - j ? left : k - j;
            w->crc[w->cur] = crc32c(w->crc[w->cur], p + j, take);
            j += take;
            w->written += take;
        }
        if (!w->crc) w->written += k;
        w->fill += k;
        p += k;
        n -= k;
        if (w->fill == ST_STREAM_BUF) {
            int rc = buffer_full(w);
            if (rc != 0) return rc;
        }
    }
    return 0;
}

const char *st_writer_error(const st_writer_t *w) { return w && w->err ? w->msg : ""; }

int st_writer_close(st_writer_t *w, char *err, size_t errlen) {
    if (!w) return st_werr(err, errlen, -EINVAL, "safetensors writer: closing NULL");
    int rc = wait_job(w);
    worker_stop(&w->wk);
    if (rc) snprintf(err, errlen, "%s", w->msg);
    if (!rc && w->written < w->total) {
        int i = 0;
        while (i < w->ntensors && w->ends[i] <= w->written) i++;
        uint64_t begin = i ? w->ends[i - 1] : 0;
        char nm[128];
        rc = st_werr(err, errlen, -EINVAL, "%s: closed after %" PRIu64 " of %" PRIu64 " bytes of tensor data: tensor %s has "
                  "%" PRIu64 " of its %" PRIu64 " bytes", w->path, w->written, w->total,
                  st_shown(nm, sizeof nm, w->names[i], strlen(w->names[i])), w->written - begin, w->ends[i] - begin);
    }
    if (!rc) { // what the buffer holds: its aligned part as before, the rest through the page cache
        size_t aligned = w->direct ? w->fill & ~(ST_ALIGN - 1) : 0;
        rc = stream_out(w, 0, aligned);
        if (!rc && (rc = drop_direct(w)) != 0)
            sticky(w, rc, "%s: fcntl (ending O_DIRECT): %s", w->path, strerror(-rc));
        if (!rc) rc = stream_out(w, aligned, w->fill - aligned);
        if (rc) snprintf(err, errlen, "%s", w->msg);
    }
    for (int i = 0; !rc && w->crc && i < w->ntensors; i++) {
        char hex[9];
        snprintf(hex, sizeof hex, "%08x", w->crc[i]);
        memcpy(w->header + w->crc_at[i], hex, 8);
    }
    if (!rc && w->crc && (rc = pwrite_all(w->fd, w->header, w->header_len, 0)) < 0)
        st_werr(err, errlen, rc, "%s: rewriting the header with the checksums: %s", w->path, strerror(-rc));
    if (!rc && fsync(w->fd) != 0) rc = st_werr(err, errlen, -errno, "%s: fsync: %s", w->path, strerror(errno));
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0 && !rc) rc = st_werr(err, errlen, -errno, "%s: close: %s", w->path, strerror(errno));
    st_writer_free(w);
    return rc;
}
