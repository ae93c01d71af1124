// util.c — see util.h. No state.
#include "util.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

static void vline(const char *fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fprintf(stderr, "tiertrain: %s\n", buf);
    fflush(stderr);
}

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

void vnotice(const char *fmt, va_list ap) { vline(fmt, ap); }

void notice(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(fmt, ap);
    va_end(ap);
}

int parse_size(const char *s, uint64_t *out) {
    if (!s || !*s) return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -EINVAL;
    while (*end == ' ') end++;
    double mult = 1;
    if (*end) {
        static const struct { const char *suffix; double mult; } units[] = {
            {"B", 1},
            {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3}, {"k", 1024.0},
            {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},
            {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
            {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12},
        };
        int found = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            if (strcmp(end, units[i].suffix) == 0) { mult = units[i].mult; found = 1; break; }
        }
        if (!found) return -EINVAL;
    }
    double bytes = v * mult;
    if (bytes >= 18446744073709551615.0) return -ERANGE;
    if (bytes != floor(bytes)) return -EINVAL; // "1.3B" or "0.1K": not a whole number of bytes
    *out = (uint64_t)bytes;
    return 0;
}

char *format_bytes(char *buf, size_t len, uint64_t bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
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
