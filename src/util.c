// util.c — see util.h. No state.
#include "util.h"
#include "io.h" // io_parse_size, io_format_bytes
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>   // uses: PATH_MAX
#include <sys/mman.h> // uses: madvise
#include <fcntl.h>    // uses: open (dir_fsync)
#include <sys/stat.h> // uses: stat
#include <unistd.h>   // uses: fsync, close
#include <time.h>

void *malloc_check(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (!p) {
        fprintf(stderr, "tiertrain: out of memory allocating %zu bytes at %s:%d\n", size, file, line);
        exit(1);
    }
    return p;
}

void *aligned_alloc_check(size_t align, size_t size, const char *file, int line) {
    void *p = NULL;
    int rc = posix_memalign(&p, align, size ? ALIGN_UP(size, align) : align);
    if (rc != 0) {
        fprintf(stderr, "tiertrain: out of memory allocating %zu bytes (align %zu) at %s:%d\n", size, align, file, line);
        exit(1);
    }
    return p;
}

void *alloc_huge(size_t bytes) {
    const size_t huge = (size_t)2 << 20, align = bytes >= huge ? huge : 4096, len = ALIGN_UP(bytes ? bytes : 1, align);
    void *p = NULL;
    if (posix_memalign(&p, align, len) != 0) return NULL;
    if (align == huge) (void)madvise(p, len, MADV_HUGEPAGE); // advisory: a refusal changes nothing
    return p;
}

// One line "tiertrain: <msg>" on stderr: io/'s (the leaf both use), so every line looks alike.
static void vline(const char *fmt, va_list ap) { io_vnotice(fmt, ap); }

void usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
    exit(2);
}

void runtime_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
    exit(1);
}

int load_rc(int rc) { return rc == -ENOTDIR || rc == -EISDIR ? -EINVAL : rc; }

int exit_code_of(int rc) { return rc == -EINVAL || rc == -ENOENT || rc == -ENODEV || rc == -EDQUOT ? 2 : 1; }

void fail_with(int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
    exit(exit_code_of(rc));
}

static int notices_off; // ranks other than 0: their notices are rank 0's

void notice_silence(int off) { notices_off = off; }

void vnotice(const char *fmt, va_list ap) {
    if (!notices_off) vline(fmt, ap);
}

void notice(const char *fmt, ...) {
    if (notices_off) return;
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
}

// One implementation of the size syntax, in the leaf that needs it first (io/size.c).
int parse_size(const char *s, uint64_t *out) { return io_parse_size(s, out); }

char *format_bytes(char *buf, size_t len, uint64_t bytes) { return io_format_bytes(buf, len, bytes); }

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void path_dir(const char *path, char *buf, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, len, ".");
    else if (slash == path) snprintf(buf, len, "/");
    else snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

int dir_fsync(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 || fsync(fd) != 0 ? -errno : 0;
    if (fd >= 0) close(fd);
    return rc;
}

// path resolved: realpath where it exists, else its directory's realpath and its last name.
// 0 when neither resolves (no such directory).
static int resolved(const char *path, char out[PATH_MAX]) {
    if (realpath(path, out)) return 1;
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    path_dir(path, dir, sizeof dir);
    if (!realpath(dir, out)) return 0;
    const char *name = slash ? slash + 1 : path;
    const size_t n = strlen(out);
    return snprintf(out + n, PATH_MAX - n, "%s%s", out[n - 1] == '/' ? "" : "/", name) < (int)(PATH_MAX - n);
}

int path_same_file(const char *a, const char *b) {
    if (!a[0] || !b[0]) return 0;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX], rb[PATH_MAX];
    return resolved(a, ra) && resolved(b, rb) && strcmp(ra, rb) == 0;
}

int path_inside(const char *path, const char *dir) {
    if (!path[0] || !dir[0]) return 0;
    char rp[PATH_MAX], rd[PATH_MAX];
    if (!resolved(path, rp) || !realpath(dir, rd)) return 0;
    const size_t n = strlen(rd);
    return strncmp(rp, rd, n) == 0 && (rp[n] == '/' || (n == 1 && rd[0] == '/'));
}

int path_first_below(const char *path, const char *dir, char *out, size_t len) {
    if (!path[0] || !dir[0]) return 0;
    char rp[PATH_MAX], rd[PATH_MAX];
    if (!resolved(path, rp) || !realpath(dir, rd)) return 0;
    const size_t n = strlen(rd);
    if (strncmp(rp, rd, n) != 0 || !(rp[n] == '/' || (n == 1 && rd[0] == '/'))) return 0;
    const char *name = rp + (n == 1 ? 1 : n + 1);
    snprintf(out, len, "%.*s", (int)strcspn(name, "/"), name);
    return 1;
}

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}

// Whether any of x[0..n) is bad, as signed 32-bit words w: an exponent of all ones (NaN,
// ±inf: w & 0x7fffffff above 0x7f7fffff), or, with neg all ones, a sign bit set on anything
// but -0.0 (w < 0, w != INT32_MIN). Four lanes at a time (SSE2's own compares), no branch:
// the compiler vectorizes neither the plain loop at -O2 nor wider vectors well without AVX.
typedef int32_t i32x4 __attribute__((vector_size(16)));
static int any_bad(const float *x, size_t n, int32_t neg) {
    i32x4 bad = {0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        i32x4 w;
        memcpy(&w, &x[i], sizeof w);
        bad |= ((w & INT32_MAX) > 0x7f7fffff) | ((w < 0) & (w != INT32_MIN) & neg); // all ones where bad
    }
    int32_t any = bad[0] | bad[1] | bad[2] | bad[3];
    for (; i < n; i++) {
        int32_t w;
        memcpy(&w, &x[i], sizeof w);
        any |= ((w & INT32_MAX) > 0x7f7fffff) | ((w < 0) & (w != INT32_MIN) & (neg != 0));
    }
    return any != 0;
}

size_t first_bad_float(const float *x, size_t n, int nonneg) {
    enum { BLOCK = 4096 };
    const int32_t neg = nonneg ? -1 : 0;
    for (size_t i = 0; i < n; i += BLOCK) {
        const size_t k = n - i < BLOCK ? n - i : BLOCK;
        if (!any_bad(x + i, k, neg)) continue;
        for (size_t j = i; j < i + k; j++)
            if (any_bad(x + j, 1, neg)) return j;
    }
    return n;
}

uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t mix64(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0x9e3779b97f4a7c15ULL);
    splitmix64(&s);
    return splitmix64(&s);
}

int read_small_file(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); // (a FIFO must not wait for a writer)
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        snprintf(err, errlen, "%s: not a regular file", path);
        return -EINVAL;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        if (cap >= (16u << 20)) { free(buf); buf = NULL; break; }
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: unreadable or larger than 16 MiB", path);
        return -EIO;
    }
    buf[n] = 0; // n < cap: text functions may treat it as a string
    *out = buf;
    *len = n;
    return 0;
}
