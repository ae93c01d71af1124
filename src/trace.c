// trace.c — see trace.h.
#include "trace.h"
#include <errno.h>
#include <fcntl.h> // uses: open
#include <sys/stat.h> // uses: fstat
#include <unistd.h>   // uses: unlink, ftruncate, close
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
static char trace_path[4096]; // for trace_drop
static int trace_made;        // trace_open created the file (a refused run removes it)
static int trace_kept;        // a regular file was there: trace_start truncates it (a refused run keeps it)
static event_t *events;
static size_t cap;
static atomic_size_t next;
static double origin;

// The file's opening, written and flushed now: a path that cannot be written (a full disk,
// /dev/full) is refused before the run, not found after it. 0 or -errno.
static int write_opening(void) {
    errno = 0;
    if (fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", trace_file) < 0 || fflush(trace_file) != 0)
        return -(errno ? errno : EIO);
    return 0;
}

// Closes the file and frees the events; removes the file when this run created it.
static void drop(int remove) {
    if (trace_file) fclose(trace_file);
    trace_file = NULL;
    if (remove && trace_made) unlink(trace_path); // created by trace_open (O_EXCL): a regular file, never /dev/full
    free(events);
    events = NULL;
}

int trace_open(const char *path, size_t max_events) {
    if (snprintf(trace_path, sizeof trace_path, "%s", path) >= (int)sizeof trace_path) return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    trace_made = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = open(path, O_WRONLY | O_CLOEXEC); // truncated by trace_start
    if (fd < 0) return -errno;
    if (!(trace_file = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct stat st;
    trace_kept = !trace_made && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    int rc = trace_kept ? 0 : write_opening(); // (a device, /dev/full, at once)
    if (rc == 0 && !(events = calloc(max_events, sizeof *events))) rc = -ENOMEM;
    if (rc != 0) {
        drop(1);
        return rc;
    }
    cap = max_events;
    atomic_store(&next, 0);
    origin = now_ms();
    return 0;
}

int trace_start(void) {
    if (!trace_file || !trace_kept) return 0;
    trace_kept = 0;
    if (ftruncate(fileno(trace_file), 0) != 0) return -errno;
    return write_opening();
}

void trace_drop(void) {
    if (trace_file) drop(1); // (after trace_close: nothing)
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
    drop(0);
    if (written) *written = kept;
    if (dropped) *dropped = n - kept;
    return rc;
}
