// safetensors.c — the validating safetensors reader behind safetensors.h, and what the
// writer (safetensors_write.c) shares with it (safetensors_internal.h). The reader parses the
// header with json.c, checks every entry and the tiling of the data section, and reads with
// pread; a large checked read goes around the page cache (O_DIRECT through a bounce buffer of
// the reader's), which on a VM whose fresh pages are slow ran 2 × the cached read. Does not
// mmap or name tensors; the one dtype conversion is st_read_f32's widening of BF16 and F16 to
// FP32. Called by the checkpoint code and the Hugging Face loader (hf.c).
#include "safetensors.h"
#include "safetensors_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "crc32c.h"
#include "json.h" // uses: json_parse, json_escape, json_num_uint64


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

int st_dtype_valid(st_dtype_t t) { return t == ST_F32 || t == ST_BF16 || t == ST_F16; }

// A name as it appears in messages: JSON-escaped (so any name prints on one line), cut at
// about 80 bytes, in single quotes: 'model.layers.0.mlp.up_proj.weight'.
const char *st_shown(char *buf, size_t len, const char *s, size_t n) {
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
int st_tensor_bytes(int ndim, const uint64_t *shape, st_dtype_t dtype, uint64_t *out) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (__builtin_mul_overflow(n, shape[d], &n)) return -1;
    if (__builtin_mul_overflow(n, (uint64_t)st_dtype_size(dtype), &n)) return -1;
    *out = n;
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

int st_werr(char *err, size_t errlen, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
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
    st_shown(nm, sizeof nm, e->key, e->key_len);
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
                        st_shown(buf, sizeof buf, f->key, f->key_len));
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
                    st_shown(buf, sizeof buf, dtype->s, dtype->n));

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
    if (st_tensor_bytes(t->ndim, t->shape, t->dtype, &need) < 0)
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
        st_shown(nm, sizeof nm, v->key, v->key_len);
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
    r->fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // (a FIFO must not wait for a writer)
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
                        st_shown(nm, sizeof nm, e->key, e->key_len));
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
                        "] overlap", st_shown(a, sizeof a, p->name, strlen(p->name)), p->begin, p->end,
                        st_shown(b, sizeof b, t->name, strlen(t->name)), t->begin, t->end);
        }
        if (t->begin > prev_end)
            return rerr(r, err, errlen, -EINVAL, "data section bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor (a "
                        "hole before tensor %s; the tensors must cover the data section exactly)", prev_end, t->begin,
                        st_shown(b, sizeof b, t->name, strlen(t->name)));
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
        st_shown(nm, sizeof nm, key, strlen(key));
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
    if (!path) return st_werr(err, errlen, -EINVAL, "safetensors: no path");
    st_reader_t *r = calloc(1, sizeof *r);
    char *hdr = NULL;
    int rc;
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return st_werr(err, errlen, -ENOMEM, "%s: out of memory", path);
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
    if (!r) return st_werr(err, errlen, -EINVAL, "safetensors: reading from NULL");
    if (idx < 0 || idx >= r->ntensors)
        return st_werr(err, errlen, -EINVAL, "%s: no tensor %d (the file has %d)", r->path, idx, r->ntensors);
    const st_tensor_t *t = &r->tensors[idx];
    uint64_t size = t->end - t->begin;
    st_shown(nm, 128, t->name, strlen(t->name));
    if (offset > size || nbytes > size - offset)
        return st_werr(err, errlen, -EINVAL, "%s: tensor %s: a read of %zu bytes at byte %" PRIu64 " runs past its %" PRIu64
                    " bytes", r->path, nm, nbytes, offset, size);
    if (nbytes && !dst) return st_werr(err, errlen, -EINVAL, "%s: tensor %s: a read into NULL", r->path, nm);
    *at = r->data_start + t->begin + offset;
    return 0;
}

static int read_failed(const st_reader_t *r, const char *nm, size_t nbytes, uint64_t at, int rc, char *err,
                       size_t errlen) {
    if (rc == -EIO)
        return st_werr(err, errlen, rc, "%s: tensor %s: reading %zu bytes at file byte %" PRIu64 " failed: %s (did the file "
                    "shrink after it was opened?)", r->path, nm, nbytes, at, strerror(-rc));
    return st_werr(err, errlen, rc, "%s: tensor %s: reading %zu bytes at file byte %" PRIu64 " failed: %s", r->path, nm,
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
    return st_werr(err, errlen, -EINVAL, "%s: tensor %s fails its CRC-32C check (stored %08x, read %08x): the file is "
                "corrupt", r->path, st_shown(nm, sizeof nm, t->name, strlen(t->name)), r->crc_want[idx], r->crc_run[idx]);
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
    if (!r) return st_werr(err, errlen, -EINVAL, "safetensors: verifying NULL");
    enum { PIECE = 1 << 20 };
    char *buf = NULL;
    for (int i = 0; i < r->ntensors; i++) {
        const uint64_t size = r->tensors[i].end - r->tensors[i].begin;
        if (!r->crc_has[i] || (r->crc_pos[i] == size && size)) continue;
        if (!buf && !(buf = malloc(PIECE))) return st_werr(err, errlen, -ENOMEM, "%s: out of memory", r->path);
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

void st_take_checked(st_reader_t *into, const st_reader_t *from) {
    for (int i = 0; i < into->ntensors && i < from->ntensors; i++) {
        const uint64_t size = from->tensors[i].end - from->tensors[i].begin;
        if (from->crc_has[i] && from->crc_pos[i] == size && into->crc_has[i]) {
            into->crc_pos[i] = size;
            into->crc_run[i] = from->crc_run[i];
        }
    }
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
    if (!r || idx < 0 || idx >= r->ntensors) return st_werr(err, errlen, -EINVAL, "safetensors: no tensor %d", idx);
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
