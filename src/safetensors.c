// safetensors.c — the streaming safetensors writer and the validating reader behind
// safetensors.h. The writer builds the header in memory (keys in the caller's order), writes
// it with the length prefix, then gathers tensor bytes into two fixed buffers (ST_STREAM_BUF,
// 4096-aligned: memory use does not grow with the model), each of which goes out whole with
// O_DIRECT where the filesystem takes it, on a thread of the writer's while the caller fills
// the other. So a checkpoint of many GiB neither fills the page cache nor pays the kernel's
// copy into it (on a VM whose fresh pages are slow, that copy ran at 0.2 GB/s against the
// disk's 2), and the disk writes while the caller reads and hashes. The reader parses the
// header with json.c, checks every entry and the tiling of the data section, and reads with
// pread (large checked reads with O_DIRECT). Does not mmap or name tensors; the one dtype
// conversion is st_read_f32's widening of BF16 and F16 to FP32. Called by the checkpoint code
// and the Hugging Face loader (hf.c).
#include "safetensors.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "crc32c.h"
#include "json.h" // uses: json_parse, json_escape, json_num_uint64

#define ST_IO_CHUNK ((size_t)1 << 30) // bytes per read()/write() call (Linux caps one at ~2 GiB)
#define ST_ALIGN ((size_t)4096)        // O_DIRECT: buffers, offsets and lengths are multiples of it

const char *st_dtype_name(st_dtype_t t) {
    switch (t) {
    case ST_F32: return "F32";
    case ST_BF16: return "BF16";
    case ST_F16: return "F16";
    }
    return "?";
}

size_t st_dtype_size(st_dtype_t t) {
    switch (t) {
    case ST_F32: return 4;
    case ST_BF16: case ST_F16: return 2;
    }
    return 0;
}

static int dtype_valid(st_dtype_t t) { return t == ST_F32 || t == ST_BF16 || t == ST_F16; }

// A name as it appears in messages: JSON-escaped (so any name prints on one line), cut at
// about 80 bytes, in single quotes: 'model.layers.0.mlp.up_proj.weight'.
static const char *shown(char *buf, size_t len, const char *s, size_t n) {
    char tmp[96];
    ssize_t k = json_escape(tmp, sizeof tmp, s, n);
    if (k < 0) {
        snprintf(buf, len, "(invalid UTF-8)");
        return buf;
    }
    int cut = k >= (ssize_t)sizeof tmp; // json_escape kept whole units only, without the closing quote
    if (!cut) tmp[k - 1] = 0;
    snprintf(buf, len, "'%s'%s", tmp + 1, cut ? "..." : "");
    return buf;
}

const char *st_shape_str(char *buf, size_t len, int ndim, const uint64_t *shape) {
    size_t w = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && w < len; d++)
        w += (size_t)snprintf(buf + w, len - w, "%s%" PRIu64, d ? ", " : "", shape[d]);
    if (w < len) snprintf(buf + w, len - w, "]");
    return buf;
}

// numel · dtype size of t, or -1 when it overflows 64 bits.
static int tensor_bytes(int ndim, const uint64_t *shape, st_dtype_t dtype, uint64_t *out) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (__builtin_mul_overflow(n, shape[d], &n)) return -1;
    if (__builtin_mul_overflow(n, (uint64_t)st_dtype_size(dtype), &n)) return -1;
    *out = n;
    return 0;
}

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

// Reads exactly n bytes at off: 0, -errno, or -EIO at end of file.
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done < ST_IO_CHUNK ? n - done : ST_IO_CHUNK;
        ssize_t r = pread(fd, p + done, chunk, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -errno;
        if (r == 0) return -EIO;
        done += (size_t)r;
    }
    return 0;
}

// ---------------------------------------------------------------- writer

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
    // is never filled while it is written. mu guards job, stop and the job's outcome; the
    // wait for job == 0 (under mu) orders the thread's writes to direct and the outcome
    // before the caller reads them.
    pthread_t thread;
    int threaded;          // the thread runs (else st_write writes each full buffer itself)
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int job, stop;         // a buffer handed over and not yet written; the thread is to end
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

static int werr(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int werr(char *err, size_t errlen, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

static void start_thread(st_writer_t *w);
static void stop_thread(st_writer_t *w);

void st_writer_free(st_writer_t *w) {
    if (!w) return;
    stop_thread(w);
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
                return werr(err, errlen, -EINVAL, "%s: __metadata__ entry %d: NULL key or value", path, i);
            if (i) sb_str(b, ",");
            if (sb_json(b, meta[i].key) < 0)
                return werr(err, errlen, -EINVAL, "%s: __metadata__ entry %d: the key is not valid UTF-8", path, i);
            sb_str(b, ":");
            if (sb_json(b, meta[i].value) < 0)
                return werr(err, errlen, -EINVAL, "%s: __metadata__ %s: the value is not valid UTF-8", path,
                            shown(nm, sizeof nm, meta[i].key, strlen(meta[i].key)));
            if (crc_at && !strncmp(meta[i].key, ST_CRC_KEY, strlen(ST_CRC_KEY)))
                return werr(err, errlen, -EINVAL, "%s: __metadata__ %s: keys starting '" ST_CRC_KEY "' are the "
                            "writer's own", path, shown(nm, sizeof nm, meta[i].key, strlen(meta[i].key)));
        }
        for (int i = 0; crc_at && i < n; i++) {
            if (!t[i].name) return werr(err, errlen, -EINVAL, "%s: tensor %d has no name", path, i);
            if (i || nmeta > 0) sb_str(b, ",");
            char *key = malloc(strlen(ST_CRC_KEY) + strlen(t[i].name) + 1);
            if (!key) { b->oom = 1; break; }
            strcpy(key, ST_CRC_KEY);
            strcat(key, t[i].name);
            int bad = sb_json(b, key);
            free(key);
            if (bad < 0) return werr(err, errlen, -EINVAL, "%s: tensor %d: the name is not valid UTF-8", path, i);
            sb_str(b, ":\"");
            crc_at[i] = b->len;
            sb_str(b, "00000000\"");
        }
        sb_str(b, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor_t *x = &t[i];
        if (!x->name || !x->name[0]) return werr(err, errlen, -EINVAL, "%s: tensor %d has no name", path, i);
        shown(nm, sizeof nm, x->name, strlen(x->name));
        if (strcmp(x->name, "__metadata__") == 0)
            return werr(err, errlen, -EINVAL, "%s: tensor %d: the name '__metadata__' is reserved", path, i);
        if (!dtype_valid(x->dtype))
            return werr(err, errlen, -EINVAL, "%s: tensor %s: unknown dtype %d (accepted: F32, BF16, F16)", path, nm,
                        (int)x->dtype);
        if (x->ndim < 0 || x->ndim > ST_MAX_DIMS)
            return werr(err, errlen, -EINVAL, "%s: tensor %s: %d dimensions (accepted: 0..%d)", path, nm, x->ndim,
                        ST_MAX_DIMS);
        uint64_t bytes;
        if (tensor_bytes(x->ndim, x->shape, x->dtype, &bytes) < 0 || __builtin_add_overflow(off, bytes, &ends[i]))
            return werr(err, errlen, -EINVAL, "%s: tensor %s: sizes overflow 64 bits", path, nm);
        if (i || has_meta) sb_str(b, ",");
        if (sb_json(b, x->name) < 0)
            return werr(err, errlen, -EINVAL, "%s: tensor %d: the name is not valid UTF-8", path, i);
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
    if (b->oom) return werr(err, errlen, -ENOMEM, "%s: out of memory building the header", path);
    uint64_t hlen = b->len - 8;
    if (hlen > ST_MAX_HEADER)
        return werr(err, errlen, -EINVAL, "%s: the header would be %" PRIu64 " bytes (at most %llu: fewer or shorter "
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
    if (!path) return werr(err, errlen, -EINVAL, "safetensors writer: no path");
    if (n < 0 || (n > 0 && !tensors) || nmeta < 0 || (nmeta > 0 && !meta))
        return werr(err, errlen, -EINVAL, "%s: bad tensor list (%d tensors, %d metadata entries)", path, n, nmeta);
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
        rc = werr(err, errlen, -EINVAL, "%s: tensor %s is declared twice", path, shown(nm, sizeof nm, dup, strlen(dup)));
        goto fail;
    }
    for (int i = 0; i < nmeta; i++) names[i] = meta[i].key;
    if (find_duplicate(names, nmeta, &dup) < 0) goto oom;
    if (dup) {
        rc = werr(err, errlen, -EINVAL, "%s: __metadata__ key %s is given twice", path,
                  shown(nm, sizeof nm, dup, strlen(dup)));
        goto fail;
    }
    w->total = n ? w->ends[n - 1] : 0;
    w->data_start = b.len;

    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = werr(err, errlen, -errno, "%s: cannot create: %s", path, strerror(errno));
        goto fail;
    }
    size_t done;
    if ((rc = write_all(w->fd, b.p, b.len, &done)) < 0) {
        werr(err, errlen, rc, "%s: write of the %zu-byte header failed at byte %zu: %s", path, b.len, done, strerror(-rc));
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
    start_thread(w); // without it, st_write writes each buffer itself
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
    rc = werr(err, errlen, -ENOMEM, "%s: out of memory", path);
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
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->job && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->job) break; // stopped, nothing left
        const unsigned char *p = w->job_buf;
        const uint64_t at = w->job_at;
        const int failed = w->job_rc != 0;
        pthread_mutex_unlock(&w->mu);
        uint64_t bad = 0;
        int rc = failed ? 0 : out_at(w, p, ST_STREAM_BUF, at, &bad); // after a failure: nothing more
        pthread_mutex_lock(&w->mu);
        if (rc) {
            w->job_rc = rc;
            w->job_failed_at = bad;
        }
        w->job = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void start_thread(st_writer_t *w) {
    if (pthread_mutex_init(&w->mu, NULL) != 0) return;
    if (pthread_cond_init(&w->cv, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        return;
    }
    w->threaded = pthread_create(&w->thread, NULL, writer_main, w) == 0;
    if (!w->threaded) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
}

// Waits for the job in hand; its failure becomes the writer's sticky error. 0 or that error.
static int wait_job(st_writer_t *w) {
    if (!w->threaded) return 0;
    pthread_mutex_lock(&w->mu);
    while (w->job) pthread_cond_wait(&w->cv, &w->mu);
    const int rc = w->job_rc;
    const uint64_t at = w->job_failed_at;
    pthread_mutex_unlock(&w->mu);
    return rc && !w->err ? write_failed(w, rc, at) : w->err;
}

static void stop_thread(st_writer_t *w) {
    if (!w->threaded) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->threaded = 0;
}

// The full buffer goes out: handed to the thread (after the job before it is done), or
// written here. Then the other buffer is the stream's.
static int buffer_full(st_writer_t *w) {
    if (!w->threaded) {
        int rc = stream_out(w, 0, ST_STREAM_BUF);
        if (rc) return rc;
    } else {
        int rc = wait_job(w);
        if (rc) return rc;
        pthread_mutex_lock(&w->mu);
        w->job = 1;
        w->job_buf = w->buf;
        w->job_at = w->base;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
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
    if (!w) return werr(err, errlen, -EINVAL, "safetensors writer: closing NULL");
    int rc = wait_job(w);
    stop_thread(w);
    if (rc) snprintf(err, errlen, "%s", w->msg);
    if (!rc && w->written < w->total) {
        int i = 0;
        while (i < w->ntensors && w->ends[i] <= w->written) i++;
        uint64_t begin = i ? w->ends[i - 1] : 0;
        char nm[128];
        rc = werr(err, errlen, -EINVAL, "%s: closed after %" PRIu64 " of %" PRIu64 " bytes of tensor data: tensor %s has "
                  "%" PRIu64 " of its %" PRIu64 " bytes", w->path, w->written, w->total,
                  shown(nm, sizeof nm, w->names[i], strlen(w->names[i])), w->written - begin, w->ends[i] - begin);
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
        werr(err, errlen, rc, "%s: rewriting the header with the checksums: %s", w->path, strerror(-rc));
    if (!rc && fsync(w->fd) != 0) rc = werr(err, errlen, -errno, "%s: fsync: %s", w->path, strerror(errno));
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0 && !rc) rc = werr(err, errlen, -errno, "%s: close: %s", w->path, strerror(errno));
    st_writer_free(w);
    return rc;
}

// ---------------------------------------------------------------- reader

void st_close(st_reader_t *r) {
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    if (r->dfd >= 0) close(r->dfd);
    free(r->bounce);
    json_free(r->json);
    free((void *)r->tensors);
    free((void *)r->meta);
    free(r->by_name);
    free(r->crc_want);
    free(r->crc_run);
    free(r->crc_pos);
    free(r->crc_has);
    free(r->header_name);
    free((void *)r->path);
    free(r);
}

static int rerr(st_reader_t *r, char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int rerr(st_reader_t *r, char *err, size_t errlen, int rc, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s: %s", r->path, msg);
    return rc;
}

// A non-negative integer from v into *out; else the message "<nm>: <what>: expected a
// non-negative integer, got <...>".
static int get_u64(st_reader_t *r, const char *nm, const char *what, const json_t *v, uint64_t *out, char *err,
                   size_t errlen) {
    if (v->type != JSON_NUMBER)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: %s: expected a non-negative integer, got %s %s", nm, what,
                    v->type == JSON_ARRAY || v->type == JSON_OBJECT ? "an" : "a", json_type_name(v->type));
    if (json_num_uint64(v, out) != 0)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: %s: expected a non-negative integer, got %.40s%s", nm, what,
                    v->s, v->n > 40 ? "..." : "");
    return 0;
}

// Fills t from the header entry e (a member of the root object). data_len bounds the offsets.
static int parse_tensor(st_reader_t *r, const json_t *e, uint64_t data_len, st_tensor_t *t, char *err, size_t errlen) {
    char nm[128], buf[256];
    shown(nm, sizeof nm, e->key, e->key_len);
    if (e->type != JSON_OBJECT)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: expected an object {dtype, shape, data_offsets}, got %s %s", nm,
                    e->type == JSON_ARRAY ? "an" : "a", json_type_name(e->type));
    const json_t *dtype = NULL, *shape = NULL, *offs = NULL;
    for (size_t i = 0; i < e->n; i++) {
        const json_t *f = &e->kids[i];
        if (f->key_len == 5 && memcmp(f->key, "dtype", 5) == 0) dtype = f;
        else if (f->key_len == 5 && memcmp(f->key, "shape", 5) == 0) shape = f;
        else if (f->key_len == 12 && memcmp(f->key, "data_offsets", 12) == 0) offs = f;
        else
            return rerr(r, err, errlen, -EINVAL, "tensor %s: unknown field %s (accepted: dtype, shape, data_offsets)", nm,
                        shown(buf, sizeof buf, f->key, f->key_len));
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing) return rerr(r, err, errlen, -EINVAL, "tensor %s: missing field '%s'", nm, missing);

    if (dtype->type != JSON_STRING)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: dtype: expected a string, got %s %s", nm,
                    dtype->type == JSON_ARRAY || dtype->type == JSON_OBJECT ? "an" : "a", json_type_name(dtype->type));
    if (strcmp(dtype->s, "F32") == 0 && dtype->n == 3) t->dtype = ST_F32;
    else if (strcmp(dtype->s, "BF16") == 0 && dtype->n == 4) t->dtype = ST_BF16;
    else if (strcmp(dtype->s, "F16") == 0 && dtype->n == 3) t->dtype = ST_F16;
    else
        return rerr(r, err, errlen, -EINVAL, "tensor %s: dtype %s is not supported (accepted: F32, BF16, F16)", nm,
                    shown(buf, sizeof buf, dtype->s, dtype->n));

    if (shape->type != JSON_ARRAY)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: shape: expected an array, got %s %s", nm,
                    shape->type == JSON_OBJECT ? "an" : "a", json_type_name(shape->type));
    if (shape->n > ST_MAX_DIMS)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: shape has %zu dimensions (at most %d)", nm, shape->n, ST_MAX_DIMS);
    t->ndim = (int)shape->n;
    for (int d = 0; d < t->ndim; d++) {
        char what[24];
        snprintf(what, sizeof what, "shape[%d]", d);
        int rc = get_u64(r, nm, what, &shape->kids[d], &t->shape[d], err, errlen);
        if (rc) return rc;
    }
    char sh[256];
    st_shape_str(sh, sizeof sh, t->ndim, t->shape);
    uint64_t need;
    if (tensor_bytes(t->ndim, t->shape, t->dtype, &need) < 0)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: shape %s of %s has more bytes than 64 bits count", nm, sh,
                    st_dtype_name(t->dtype));

    if (offs->type != JSON_ARRAY || offs->n != 2) {
        if (offs->type == JSON_ARRAY)
            return rerr(r, err, errlen, -EINVAL, "tensor %s: data_offsets: expected [begin, end], got %zu numbers", nm,
                        offs->n);
        return rerr(r, err, errlen, -EINVAL, "tensor %s: data_offsets: expected [begin, end], got %s %s", nm,
                    offs->type == JSON_OBJECT ? "an" : "a", json_type_name(offs->type));
    }
    int rc;
    if ((rc = get_u64(r, nm, "data_offsets[0]", &offs->kids[0], &t->begin, err, errlen))) return rc;
    if ((rc = get_u64(r, nm, "data_offsets[1]", &offs->kids[1], &t->end, err, errlen))) return rc;
    if (t->end < t->begin)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                    nm, t->begin, t->end);
    if (t->end - t->begin != need)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                    " bytes, shape %s of %s needs %" PRIu64, nm, t->begin, t->end, t->end - t->begin, sh,
                    st_dtype_name(t->dtype), need);
    if (t->end > data_len)
        return rerr(r, err, errlen, -EINVAL, "tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] run past the end of "
                    "the data section (%" PRIu64 " bytes)", nm, t->begin, t->end, data_len);
    t->name = e->key;
    return 0;
}

static int parse_meta(st_reader_t *r, const json_t *e, st_meta_t *meta, int *nmeta, char *err, size_t errlen) {
    char nm[128];
    if (e->type != JSON_OBJECT)
        return rerr(r, err, errlen, -EINVAL, "__metadata__: expected an object of strings, got %s %s",
                    e->type == JSON_ARRAY ? "an" : "a", json_type_name(e->type));
    for (size_t i = 0; i < e->n; i++) {
        const json_t *v = &e->kids[i];
        shown(nm, sizeof nm, v->key, v->key_len);
        if (v->type != JSON_STRING)
            return rerr(r, err, errlen, -EINVAL, "__metadata__ %s: expected a string, got %s %s", nm,
                        v->type == JSON_ARRAY || v->type == JSON_OBJECT ? "an" : "a", json_type_name(v->type));
        if (memchr(v->key, 0, v->key_len) || memchr(v->s, 0, v->n))
            return rerr(r, err, errlen, -EINVAL, "__metadata__ %s: holds a NUL character (\\u0000)", nm);
        meta[*nmeta].key = v->key;
        meta[*nmeta].value = v->s;
        (*nmeta)++;
    }
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const st_tensor_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_by_name(const void *a, const void *b, void *base) {
    const st_tensor_t *t = base;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

// Opens r->path and reads its 8-byte header length and the JSON header into *hdr (the
// caller frees it), checking both against the file's size. Returns 0 or -errno with a line.
static int read_header(st_reader_t *r, char **hdr, char *err, size_t errlen) {
    r->fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) return rerr(r, err, errlen, -errno, "%s", strerror(errno));
    struct stat st;
    if (fstat(r->fd, &st) != 0) return rerr(r, err, errlen, -errno, "fstat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return rerr(r, err, errlen, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "not a regular file");
    r->file_size = (uint64_t)st.st_size;
    if (r->file_size < 8)
        return rerr(r, err, errlen, -EINVAL, "%" PRIu64 " bytes, too small for a safetensors file (its header length "
                    "alone is 8 bytes)", r->file_size);
    unsigned char le[8];
    int rc = pread_all(r->fd, le, 8, 0);
    if (rc < 0) {
        rerr(r, err, errlen, rc, "reading the header length: %s", strerror(-rc));
        return rc;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | le[i];
    if (n > ST_MAX_HEADER)
        return rerr(r, err, errlen, -EINVAL, "header length %" PRIu64 " is over the limit of %llu bytes (not a "
                    "safetensors file?)", n, ST_MAX_HEADER);
    if (n > r->file_size - 8)
        return rerr(r, err, errlen, -EINVAL, "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes "
                    "leave at most %" PRIu64 "; truncated?)", n, r->file_size, r->file_size - 8);
    r->header_len = n;
    r->data_start = 8 + n;
    *hdr = malloc(n ? n : 1);
    if (!*hdr) return rerr(r, err, errlen, -ENOMEM, "out of memory for the %" PRIu64 "-byte header", n);
    if ((rc = pread_all(r->fd, *hdr, n, 8)) < 0) {
        rerr(r, err, errlen, rc, "reading the header: %s", strerror(-rc));
        return rc;
    }
    if (n == 0 || (*hdr)[0] != '{')
        return rerr(r, err, errlen, -EINVAL, "the header does not start with '{' (it must be a JSON object)");
    return 0;
}

// The header's entries: __metadata__, and a tensor for every other key.
static int parse_entries(st_reader_t *r, uint64_t data_len, char *err, size_t errlen) {
    const json_t *root = r->json; // an object: the header starts with '{' and parsed whole
    st_tensor_t *tensors = calloc(root->n ? root->n : 1, sizeof *tensors); // r's, read-only once open
    r->tensors = tensors;
    r->by_name = malloc((root->n ? root->n : 1) * sizeof *r->by_name);
    if (!tensors || !r->by_name) return rerr(r, err, errlen, -ENOMEM, "out of memory for %zu tensors", root->n);
    for (size_t i = 0; i < root->n; i++) {
        const json_t *e = &root->kids[i];
        int rc;
        if (e->key_len == 12 && memcmp(e->key, "__metadata__", 12) == 0) {
            st_meta_t *meta = calloc(e->type == JSON_OBJECT && e->n ? e->n : 1, sizeof *meta);
            r->meta = meta;
            if (!meta) return rerr(r, err, errlen, -ENOMEM, "out of memory");
            if ((rc = parse_meta(r, e, meta, &r->nmeta, err, errlen))) return rc;
            continue;
        }
        if (memchr(e->key, 0, e->key_len)) {
            char nm[128];
            return rerr(r, err, errlen, -EINVAL, "tensor %s: the name holds a NUL character (\\u0000)",
                        shown(nm, sizeof nm, e->key, e->key_len));
        }
        if ((rc = parse_tensor(r, e, data_len, &tensors[r->ntensors], err, errlen))) return rc;
        r->ntensors++;
    }
    return 0;
}

// The tensors must tile the data section: sorted by offset, each starts where the last ended.
static int check_tiling(st_reader_t *r, uint64_t data_len, char *err, size_t errlen) {
    st_tensor_t *tensors = (st_tensor_t *)r->tensors; // allocated by parse_entries, still being built
    qsort(tensors, (size_t)r->ntensors, sizeof *tensors, cmp_by_offset);
    uint64_t prev_end = 0;
    for (int i = 0; i < r->ntensors; i++) {
        const st_tensor_t *t = &tensors[i];
        char a[128], b[128];
        if (t->begin < prev_end) {
            const st_tensor_t *p = &tensors[i - 1];
            return rerr(r, err, errlen, -EINVAL, "tensors %s [%" PRIu64 ", %" PRIu64 "] and %s [%" PRIu64 ", %" PRIu64
                        "] overlap", shown(a, sizeof a, p->name, strlen(p->name)), p->begin, p->end,
                        shown(b, sizeof b, t->name, strlen(t->name)), t->begin, t->end);
        }
        if (t->begin > prev_end)
            return rerr(r, err, errlen, -EINVAL, "data section bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor (a "
                        "hole before tensor %s; the tensors must cover the data section exactly)", prev_end, t->begin,
                        shown(b, sizeof b, t->name, strlen(t->name)));
        prev_end = t->end;
    }
    if (prev_end != data_len)
        return rerr(r, err, errlen, -EINVAL, "data section bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor (after "
                    "the last one; the tensors must cover the data section exactly)", prev_end, data_len);
    return 0;
}

// The "crc32c:<name>" entries of __metadata__ into crc_want / crc_has.
static int parse_checksums(st_reader_t *r, char *err, size_t errlen) {
    size_t n = r->ntensors ? (size_t)r->ntensors : 1, klen = strlen(ST_CRC_KEY);
    r->crc_want = calloc(n, sizeof *r->crc_want);
    r->crc_run = calloc(n, sizeof *r->crc_run);
    r->crc_pos = calloc(n, sizeof *r->crc_pos);
    r->crc_has = calloc(n, 1);
    if (!r->crc_want || !r->crc_run || !r->crc_pos || !r->crc_has) return rerr(r, err, errlen, -ENOMEM, "out of memory");
    for (int i = 0; i < r->nmeta; i++) {
        const char *key = r->meta[i].key, *v = r->meta[i].value;
        if (strncmp(key, ST_CRC_KEY, klen) != 0) continue;
        char nm[128];
        shown(nm, sizeof nm, key, strlen(key));
        int idx = st_find(r, key + klen);
        if (idx < 0) return rerr(r, err, errlen, -EINVAL, "__metadata__ %s names no tensor of the file", nm);
        if (strlen(v) != 8 || strspn(v, "0123456789abcdef") != 8)
            return rerr(r, err, errlen, -EINVAL, "__metadata__ %s: expected 8 lowercase hex digits", nm);
        r->crc_want[idx] = (uint32_t)strtoul(v, NULL, 16);
        r->crc_has[idx] = 1;
        r->nchecked++;
    }
    return 0;
}

int st_open(const char *path, st_reader_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!path) return werr(err, errlen, -EINVAL, "safetensors: no path");
    st_reader_t *r = calloc(1, sizeof *r);
    char *hdr = NULL;
    int rc;
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return werr(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    r->fd = r->dfd = -1;
    if ((rc = read_header(r, &hdr, err, errlen)) < 0) goto fail;
    if (asprintf(&r->header_name, "%s: header", path) < 0) {
        r->header_name = NULL;
        rc = rerr(r, err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }
    // Depth 8: the format needs 3; deeper values fail with a message about the field.
    json_limits_t lim = {.max_depth = 8, .max_bytes = ST_MAX_HEADER, .max_values = 0};
    if ((rc = json_parse(hdr, r->header_len, r->header_name, &lim, &r->json, err, errlen)) < 0) goto fail;
    free(hdr);
    hdr = NULL;
    const uint64_t data_len = r->file_size - r->data_start;
    if ((rc = parse_entries(r, data_len, err, errlen)) != 0 || (rc = check_tiling(r, data_len, err, errlen)) != 0)
        goto fail;
    for (int i = 0; i < r->ntensors; i++) r->by_name[i] = i;
    qsort_r(r->by_name, (size_t)r->ntensors, sizeof *r->by_name, cmp_by_name, (void *)r->tensors);
    // json.c rejects duplicate keys, so names are unique; r->json owns the name strings.
    if ((rc = parse_checksums(r, err, errlen)) != 0) goto fail;
    r->dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT); // -1 where O_DIRECT is not taken: the page cache then
    *out = r;
    return 0;

fail:
    free(hdr);
    st_close(r);
    return rc;
}

int st_find(const st_reader_t *r, const char *name) {
    if (!r || !name) return -1;
    int lo = 0, hi = r->ntensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(r->tensors[r->by_name[mid]].name, name);
        if (c == 0) return r->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

const char *st_meta_get(const st_reader_t *r, const char *key) {
    if (!r || !key) return NULL;
    for (int i = 0; i < r->nmeta; i++)
        if (strcmp(r->meta[i].key, key) == 0) return r->meta[i].value;
    return NULL;
}

// The checks every read makes; *at gets the read's file offset, nm the tensor's name shown.
static int read_check(const st_reader_t *r, int idx, const void *dst, uint64_t offset, size_t nbytes, uint64_t *at,
                      char nm[128], char *err, size_t errlen) {
    if (!r) return werr(err, errlen, -EINVAL, "safetensors: reading from NULL");
    if (idx < 0 || idx >= r->ntensors)
        return werr(err, errlen, -EINVAL, "%s: no tensor %d (the file has %d)", r->path, idx, r->ntensors);
    const st_tensor_t *t = &r->tensors[idx];
    uint64_t size = t->end - t->begin;
    shown(nm, 128, t->name, strlen(t->name));
    if (offset > size || nbytes > size - offset)
        return werr(err, errlen, -EINVAL, "%s: tensor %s: a read of %zu bytes at byte %" PRIu64 " runs past its %" PRIu64
                    " bytes", r->path, nm, nbytes, offset, size);
    if (nbytes && !dst) return werr(err, errlen, -EINVAL, "%s: tensor %s: a read into NULL", r->path, nm);
    *at = r->data_start + t->begin + offset;
    return 0;
}

static int read_failed(const st_reader_t *r, const char *nm, size_t nbytes, uint64_t at, int rc, char *err,
                       size_t errlen) {
    if (rc == -EIO)
        return werr(err, errlen, rc, "%s: tensor %s: reading %zu bytes at file byte %" PRIu64 " failed: %s (did the file "
                    "shrink after it was opened?)", r->path, nm, nbytes, at, strerror(-rc));
    return werr(err, errlen, rc, "%s: tensor %s: reading %zu bytes at file byte %" PRIu64 " failed: %s", r->path, nm,
                nbytes, at, strerror(-rc));
}

int st_read(const st_reader_t *r, int idx, void *dst, uint64_t offset, size_t nbytes, char *err, size_t errlen) {
    uint64_t at;
    char nm[128];
    int rc = read_check(r, idx, dst, offset, nbytes, &at, nm, err, errlen);
    if (rc == 0 && (rc = pread_all(r->fd, dst, nbytes, at)) < 0) return read_failed(r, nm, nbytes, at, rc, err, errlen);
    return rc;
}

// n bytes at file byte at into dst through r's O_DIRECT descriptor: aligned reads of up to
// ST_STREAM_BUF into the bounce buffer, each copied out. 0, -errno (-EIO: the file ends
// early), or 1 when O_DIRECT is not to be had after all (no buffer, or the filesystem
// refused the read): then the descriptor is dropped and the caller reads through the cache.
static int pread_direct(st_reader_t *r, void *dst, size_t n, uint64_t at) {
    if (!r->bounce && posix_memalign((void **)&r->bounce, ST_ALIGN, ST_STREAM_BUF) != 0) r->bounce = NULL;
    for (unsigned char *d = dst; n > 0 && r->bounce;) {
        const uint64_t a0 = at & ~(uint64_t)(ST_ALIGN - 1);
        const size_t head = (size_t)(at - a0), want = head + n < ST_STREAM_BUF ? head + n : ST_STREAM_BUF;
        const size_t len = (want + ST_ALIGN - 1) & ~(ST_ALIGN - 1);
        size_t got = 0;
        while (got < want) {
            ssize_t k = pread(r->dfd, r->bounce + got, len - got, (off_t)(a0 + got));
            if (k < 0 && errno == EINTR) continue;
            if (k < 0 && errno == EINVAL) goto refused;
            if (k < 0) return -errno;
            if (k == 0) return -EIO;
            got += (size_t)k;
            if (got < want && got % ST_ALIGN) return -EIO; // the file ends short of what is wanted
        }
        memcpy(d, r->bounce + head, want - head);
        d += want - head;
        at += want - head;
        n -= want - head;
    }
    if (r->bounce) return 0;
refused:
    close(r->dfd);
    r->dfd = -1;
    return 1;
}

// Folds n bytes of tensor idx read at its byte offset into the running CRC when they continue
// it; compares at the tensor's end.
static int crc_fold(st_reader_t *r, int idx, const void *p, uint64_t offset, size_t n, char *err, size_t errlen) {
    const st_tensor_t *t = &r->tensors[idx];
    if (!r->crc_has[idx] || offset != r->crc_pos[idx]) return 0;
    r->crc_run[idx] = crc32c(r->crc_run[idx], p, n);
    r->crc_pos[idx] += n;
    if (r->crc_pos[idx] < t->end - t->begin || r->crc_run[idx] == r->crc_want[idx]) return 0;
    char nm[128];
    r->crc_has[idx] = 0; // reported once
    return werr(err, errlen, -EINVAL, "%s: tensor %s fails its CRC-32C check (stored %08x, read %08x): the file is "
                "corrupt", r->path, shown(nm, sizeof nm, t->name, strlen(t->name)), r->crc_want[idx], r->crc_run[idx]);
}

int st_read_checked(st_reader_t *r, int idx, void *dst, uint64_t offset, size_t nbytes, char *err, size_t errlen) {
    uint64_t at;
    char nm[128];
    int rc = read_check(r, idx, dst, offset, nbytes, &at, nm, err, errlen);
    if (rc != 0) return rc;
    rc = nbytes >= ST_DIRECT_MIN && r->dfd >= 0 ? pread_direct(r, dst, nbytes, at) : 1;
    if (rc == 1) rc = pread_all(r->fd, dst, nbytes, at);
    if (rc < 0) return read_failed(r, nm, nbytes, at, rc, err, errlen);
    return crc_fold(r, idx, dst, offset, nbytes, err, errlen);
}

int st_verify_rest(st_reader_t *r, char *err, size_t errlen) {
    if (!r) return werr(err, errlen, -EINVAL, "safetensors: verifying NULL");
    enum { PIECE = 1 << 20 };
    char *buf = NULL;
    for (int i = 0; i < r->ntensors; i++) {
        const uint64_t size = r->tensors[i].end - r->tensors[i].begin;
        if (!r->crc_has[i] || (r->crc_pos[i] == size && size)) continue;
        if (!buf && !(buf = malloc(PIECE))) return werr(err, errlen, -ENOMEM, "%s: out of memory", r->path);
        int rc = size ? 0 : crc_fold(r, i, buf, 0, 0, err, errlen);
        while (rc == 0 && r->crc_has[i] && r->crc_pos[i] < size) {
            size_t k = size - r->crc_pos[i] < PIECE ? (size_t)(size - r->crc_pos[i]) : PIECE;
            rc = st_read_checked(r, i, buf, r->crc_pos[i], k, err, errlen);
        }
        if (rc != 0) {
            free(buf);
            return rc;
        }
    }
    free(buf);
    return 0;
}

int st_unchecked(const st_reader_t *r) {
    for (int i = 0; r && i < r->ntensors; i++)
        if (!r->crc_has[i]) return i;
    return -1;
}

static float half_to_f32(uint16_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const float sign = h & 0x8000 ? -1.0f : 1.0f;
    if (e == 0) return sign * ldexpf((float)m, -24); // zero and subnormals
    if (e == 31) return m ? NAN : sign * INFINITY;
    return sign * ldexpf((float)(m | 0x400), e - 25);
}

int st_read_f32(st_reader_t *r, int idx, uint64_t first, size_t n, float *dst, char *err, size_t errlen) {
    if (!r || idx < 0 || idx >= r->ntensors) return werr(err, errlen, -EINVAL, "safetensors: no tensor %d", idx);
    const st_dtype_t dt = r->tensors[idx].dtype;
    if (dt == ST_F32) return st_read_checked(r, idx, dst, first * 4, n * 4, err, errlen);
    // the 16-bit values into dst's second half, widened in place from the front: element j's
    // 4 bytes end before element j + 1's 2 bytes begin (4j + 4 <= 2n + 2j + 2 for j < n), and
    // each value is read before its float is written
    unsigned char *half = (unsigned char *)dst + 2 * n;
    int rc = st_read_checked(r, idx, half, first * 2, n * 2, err, errlen);
    for (size_t j = 0; j < n && rc == 0; j++) {
        uint16_t h;
        memcpy(&h, half + 2 * j, 2);
        float f;
        if (dt == ST_BF16) {
            uint32_t bits = (uint32_t)h << 16; // BF16: the top half of an FP32
            memcpy(&f, &bits, 4);
        } else {
            f = half_to_f32(h);
        }
        memcpy(&dst[j], &f, 4);
    }
    return rc;
}
