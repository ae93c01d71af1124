// trace.h — Chrome trace events (the JSON that Perfetto and chrome://tracing open) for
// --trace: one track per resource — compute, parameter copies, NVMe reads, NVMe writes,
// optimizer — and a span per shard movement or shard computation.
// Events go into a buffer sized at trace_open; recording is lock-free (an atomic index) and
// safe from any thread; when the buffer is full further events are dropped and counted.
// trace_close writes the file. With no trace open every call is a cheap no-op.
#pragma once
#include <stddef.h>

typedef enum { TRACK_COMPUTE = 1, TRACK_COPY, TRACK_NVME_READ, TRACK_NVME_WRITE, TRACK_OPTIM } trace_track_t;

// Returns 0, or -errno when the file cannot be created (checked now, written at close).
int trace_open(const char *path, size_t max_events);
int trace_enabled(void);
double trace_now_ms(void);
// A span on track from t0 to t1 (trace_now_ms), named "<what> <label>". what and label
// must outlive trace_close (string literals, shard names).
void trace_span(trace_track_t track, const char *what, const char *label, double t0, double t1);
// Writes the events and closes. Returns 0 or -errno. Prints nothing.
int trace_close(size_t *written, size_t *dropped);
