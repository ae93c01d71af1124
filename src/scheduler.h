// scheduler.h — streams shards into a fixed set of device slots in the order a step will use
// them (DESIGN §4; named scheduler.h, not sched.h, which would shadow the system <sched.h>
// that pthread.h includes, since src/ is on the include path). The step's use order is static and given up front (sched_begin), so the
// scheduler prefetches up to --prefetch uses ahead and, when it must make room, evicts the
// resident shard whose next use is farthest away (Belady's rule, exact here because the
// future is known). Fetches run on one worker thread (the copy stream's stand-in on the CPU
// backend; the CUDA backend's copy stream implements the same); compute waits only for the
// shard it needs now, on a condition variable — nothing sleeps on a timer.
//
// What it does not do: know where a shard's home copy lives or how to copy it (the fetch
// callback does: host memcpy, NVMe read + copy), or write anything back (slots are
// read-only copies; the optimizer writes homes and then calls sched_invalidate).
// Who calls it: step.c, on the compute thread only (acquire/release/begin/invalidate); the
// callback runs on the worker thread.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct sched sched_t;

// Copies shard's parameters from their home into dst (a device slot), for its use at
// position pos of the current use order. Runs on the worker thread. Returns 0, or -errno
// with a one-line message in err.
typedef int (*sched_fetch_fn)(void *ctx, int shard, int pos, void *dst, char *err, size_t errlen);

typedef struct {
    uint64_t fetches;       // shards copied into slots
    uint64_t hits;          // acquires that found their shard already resident or in flight
    uint64_t evictions;     // resident shards dropped to make room
    double wait_ms;         // time acquire spent waiting for a fetch
} sched_stats_t;

// nslots device buffers (each large enough for any shard); prefetch = uses looked ahead.
// Starts the worker. Returns 0 or -errno (err filled).
int sched_init(sched_t **out, int nshards, int nslots, void *const *slots, int prefetch,
               sched_fetch_fn fetch, void *ctx, char *err, size_t errlen);
void sched_free(sched_t *s); // NULL-safe; stops the worker after in-flight fetches end

// The use order of the next phase (a step's forward and backward over every micro-batch,
// or an evaluation's forwards). Copies uses. Starts prefetching its first uses.
void sched_begin(sched_t *s, const int *uses, int nuses);
// The slot holding shard for its next use in the order; waits for its fetch and issues
// the prefetches that follow. Returns NULL on a failed fetch (message in err): the step
// stops. Pins the slot until sched_release.
const void *sched_acquire(sched_t *s, int shard, char *err, size_t errlen);
void sched_release(sched_t *s, int shard);
// Every slot's copy is stale (the homes changed): waits for in-flight fetches, empties all.
void sched_invalidate(sched_t *s);
void sched_stats(const sched_t *s, sched_stats_t *out);
// Position of shard's first use at or after `from` in the current order, or INT32_MAX when
// it has none. Any thread (the fetch callback uses it to keep a host cache by next use).
int sched_next_use(sched_t *s, int shard, int from);
