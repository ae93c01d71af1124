// progress.c — see progress.h.
#include "progress.h"
#include <stdio.h>
#include <unistd.h>
#include "util.h" // uses: now_ms, format_bytes

static int quiet;
static int tty = -1; // stderr is a terminal: decided once

void progress_quiet(int q) { quiet = q; }

void progress_begin(progress_t *p, const char *what, uint64_t total, int bytes) {
    if (tty < 0) tty = isatty(STDERR_FILENO);
    *p = (progress_t){.what = what, .total = total, .bytes = bytes, .t0 = now_ms()};
    p->last = p->t0;
}

static void amount(char *buf, size_t len, const progress_t *p, uint64_t n) {
    if (p->bytes) format_bytes(buf, len, n);
    else snprintf(buf, len, "%llu", (unsigned long long)n);
}

static void say(progress_t *p, double now, int final) {
    char a[32], b[32];
    amount(a, sizeof a, p, p->done);
    amount(b, sizeof b, p, p->total);
    const double s = (now - p->t0) / 1e3, rate = s > 0 ? (double)p->done / s : 0;
    const double left = rate > 0 && p->total > p->done ? (double)(p->total - p->done) / rate : 0;
    char r[48];
    if (p->bytes) snprintf(r, sizeof r, "%.0f MB/s", rate / 1e6);
    else snprintf(r, sizeof r, "%.1f/s", rate);
    fprintf(stderr, "%stiertrain: %s: %s of %s (%.0f%%), %s, %s%.0f s%s", tty ? "\r" : "", p->what, a, b,
            p->total ? 100.0 * (double)p->done / (double)p->total : 100.0, r, final ? "took " : "", final ? s : left,
            final ? "" : " left");
    if (tty) {
        fputs(final ? "\n" : "\033[K", stderr); // clear what a longer line left behind
        p->shown = !final;
    } else {
        fputc('\n', stderr);
    }
    fflush(stderr);
    p->last = now;
}

void progress_add(progress_t *p, uint64_t n) {
    p->done += n;
    if (quiet) return;
    const double now = now_ms();
    if (tty ? now - p->t0 >= 500 && now - p->last >= 200 : now - p->last >= 5000) say(p, now, 0);
}

void progress_end(progress_t *p) {
    if (quiet) return;
    const double now = now_ms();
    if (p->shown || (!tty && p->last > p->t0)) say(p, now, 1); // a line was out: close it with the total
}
