// trace.h — Chrome trace events (the JSON that Perfetto and chrome://tracing open) for
// --trace: one track per resource — compute, parameter copies, NVMe reads, NVMe writes,
// optimizer — and a span per shard movement or shard computation.
// Events go into a buffer sized at trace_open; recording is lock-free (an atomic index) and
// safe from any thread; when the buffer is full further events are dropped and counted.
// trace_close writes the file. With no trace open every call is a cheap no-op.
#pragma once
#include <stddef.h>

typedef enum { TRACK_COMPUTE = 1, TRACK_COPY, TRACK_NVME_READ, TRACK_NVME_WRITE, TRACK_OPTIM } trace_track_t;

// Returns 0, or -errno when the file cannot be created (checked now, written at close). A file
// already at path is opened, not truncated: trace_start replaces it, once the run has loaded
// what it starts from, and trace_drop leaves it as it was.
int trace_open(const char *path, size_t max_events);
// The run goes ahead: an earlier file at the path is truncated and the opening written.
// 0 or -errno (a full disk).
int trace_start(void);
// The run was refused: the file is closed and, if trace_open created it, removed; the
// events are dropped (trace_close then does nothing).
void trace_drop(void);
int trace_enabled(void);
double trace_now_ms(void);
// A span on track from t0 to t1 (trace_now_ms), named "<what> <label>". what and label
// must outlive trace_close (string literals, shard names).
void trace_span(trace_track_t track, const char *what, const char *label, double t0, double t1);
// Writes the events and closes. Returns 0 or -errno. Prints nothing.
int trace_close(size_t *written, size_t *dropped);
