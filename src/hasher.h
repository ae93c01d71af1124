// hasher.h — params_hash's FNV-1a 64 (util.h's fnv1a64) on a thread of its own, so that the
// hash of a model's masters runs beside the reads and writes that bring them: FNV-1a is one
// multiply per byte in a chain (about 0.7 GB/s here), slower than the disk, and cannot be
// split. The caller hands bytes over with hasher_put, which copies them into one of a ring
// of fixed buffers and returns; the thread folds the buffers in the order they were put.
// hasher_value waits for the last one and gives the hash: the same value fnv1a64 gives for
// the same bytes in the same order.
//
// What it does not do: hash anything but FNV-1a 64; allocate per call (the ring is made at
// init, HASHER_BUFS × HASHER_BUF bytes).
//
// Who calls it: the checkpoint save and load (params_hash of what they stream) and
// trainer_params_hash. One caller thread per hasher. Without a thread (no memory for the
// ring, or pthread_create failed), hasher_put hashes in place: the same value, only not
// beside anything.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "worker.h"

#define HASHER_BUFS 4
#define HASHER_BUF ((size_t)4 << 20)

// Caller-owned (on the stack is fine); the fields are hasher.c's.
typedef struct {
    unsigned char *ring;       // (HASHER_BUFS, HASHER_BUF); NULL: no thread, hashed in place
    size_t len[HASHER_BUFS];   // bytes in a handed-over buffer
    int full[HASHER_BUFS];     // handed over, not yet folded (mu)
    int put;                   // the buffer the caller fills (the caller's)
    size_t fill;               // bytes in it (the caller's)
    int take;                  // the next buffer to fold (the thread's)
    uint64_t h;                // the hash of every buffer given back (mu); in place: of all put
    worker_t wk;               // mu guards len, full, h (and the worker's stop)
} hasher_t;

// Starts a hasher continuing from h (FNV64_INIT for a new hash). Cannot fail: without
// memory for the ring or a thread it hashes in place.
void hasher_init(hasher_t *hs, uint64_t h);
// Folds p[0..n) in next (copied: p may change once this returns).
void hasher_put(hasher_t *hs, const void *p, size_t n);
// Waits for everything put so far and returns the hash of it. The hasher may go on after.
uint64_t hasher_value(hasher_t *hs);
// Stops the thread and frees the ring.
void hasher_free(hasher_t *hs);
