// size.c — the size syntax (see io.h): parsing "512M" / "1.5GiB" and printing bytes; and the
// one printer of "tiertrain: <msg>" lines. The leaf that src/util.c's parse_size, format_bytes
// and errors stand on, with no state and nothing else of io/ (so data.c's fuzz target links it).
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "io.h"

// Whether [s, end) is a plain decimal number: digits with at most one point, then an optional
// exponent ("1.5", "2e9"). strtod also takes a sign, hex ("0x10", "0x1p20"), "inf" and
// leading spaces, none of which a size is.
static int plain_number(const char *s, const char *end) {
    int digits = 0, points = 0;
    const char *p = s;
    for (; p < end && (isdigit((unsigned char)*p) || *p == '.'); p++) *p == '.' ? points++ : digits++;
    if (!digits || points > 1) return 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-')) p++;
        const char *e = p;
        while (p < end && isdigit((unsigned char)*p)) p++;
        if (p == e) return 0;
    }
    return p == end;
}

int io_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s) return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0 || !plain_number(s, end)) return -EINVAL;
    while (*end == ' ') end++;
    double mult = 1;
    if (*end) {
        static const struct { const char *suffix; double mult; } units[] = {
            {"B", 1},
            {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3}, {"k", 1024.0},
            {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6}, {"m", 1048576.0},
            {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}, {"g", 1073741824.0},
            {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12}, {"t", 1099511627776.0},
        };
        int found = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            if (strcmp(end, units[i].suffix) == 0) { mult = units[i].mult; found = 1; break; }
        }
        if (!found) return -EINVAL;
    }
    double bytes = v * mult;
    // A unit of K or more rounds to the nearest byte ("16.4G", as format_bytes prints sizes);
    // a fraction of one byte ("1.3", "1.3B") is not a size.
    if (mult > 1) bytes = floor(bytes + 0.5);
    if (bytes >= 18446744073709551615.0) return -ERANGE;
    if (bytes != floor(bytes)) return -EINVAL;
    if (bytes == 0 && v > 0) return -EDOM; // "0.0001K": not the 0 that means none
    *out = (uint64_t)bytes;
    return 0;
}

char *io_format_bytes(char *buf, size_t len, uint64_t bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

void io_vnotice(const char *fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    fprintf(stderr, "tiertrain: %s\n", buf);
    fflush(stderr);
}
