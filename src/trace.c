// trace.c — see trace.h.
#include "trace.h"
#include <errno.h>
#include <sys/stat.h> // uses: stat
#include <unistd.h>   // uses: unlink
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include "util.h"

typedef struct {
    double t0, t1;
    const char *what, *label;
    int track;
} event_t;

static FILE *trace_file;
static event_t *events;
static size_t cap;
static atomic_size_t next;
static double origin;

int trace_open(const char *path, size_t max_events) {
    trace_file = fopen(path, "w");
    if (!trace_file) return -errno;
    // the opening goes out now: a path that cannot be written (a full disk, /dev/full) is
    // refused before the run, not found after it, and leaves no empty file behind
    if (fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", trace_file) < 0 || fflush(trace_file) != 0) {
        int e = errno ? errno : EIO;
        fclose(trace_file);
        trace_file = NULL;
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path); // not /dev/full
        return -e;
    }
    events = calloc(max_events, sizeof *events);
    if (!events) { fclose(trace_file); trace_file = NULL; return -ENOMEM; }
    cap = max_events;
    atomic_store(&next, 0);
    origin = now_ms();
    return 0;
}

int trace_enabled(void) { return events != NULL; }

double trace_now_ms(void) { return events ? now_ms() : 0; }

void trace_span(trace_track_t track, const char *what, const char *label, double t0, double t1) {
    if (!events) return;
    size_t i = atomic_fetch_add(&next, 1);
    if (i >= cap) return;
    events[i] = (event_t){t0, t1, what, label, (int)track};
}

int trace_close(size_t *written, size_t *dropped) {
    if (!trace_file) return 0;
    static const char *tracks[] = {"", "compute", "parameter copies", "nvme reads", "nvme writes", "optimizer"};
    size_t n = atomic_load(&next);
    size_t kept = n < cap ? n : cap;
    for (int t = TRACK_COMPUTE; t <= TRACK_OPTIM; t++)
        fprintf(trace_file, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n", t,
                tracks[t]);
    for (size_t i = 0; i < kept; i++) {
        const event_t *e = &events[i];
        fprintf(trace_file, "{\"name\":\"%s%s%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f},\n", e->what,
                e->label ? " " : "", e->label ? e->label : "", e->track, (e->t0 - origin) * 1e3, (e->t1 - e->t0) * 1e3);
    }
    fprintf(trace_file, "{\"name\":\"end\",\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"s\":\"g\"}\n]}\n",
            (now_ms() - origin) * 1e3);
    errno = 0;
    int rc = fflush(trace_file) != 0 || ferror(trace_file) ? -(errno ? errno : EIO) : 0;
    if (fclose(trace_file) != 0 && rc == 0) rc = -errno;
    trace_file = NULL;
    free(events);
    events = NULL;
    if (written) *written = kept;
    if (dropped) *dropped = n - kept;
    return rc;
}
