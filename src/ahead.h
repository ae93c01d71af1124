// ahead.h — items ahead on threads: the caller takes items 0, 1, ..., n-1 in order, and while
// it works on what it copied out of item k the lanes are already filling items k+1 and k+2.
// Two buffers, item k in buffer k % 2: the caller copies item k out and calls ahead_done, and
// the fills of k+2 into its buffer may start then. An item is filled by `lanes` threads at
// once, each writing its own part of the buffer: the checkpoint load has one lane each for
// the masters, m and v, so that the files' reads are in flight together rather than one
// after the other, and the second buffer lets a lane that finished its part go on to the
// next item while the others finish theirs (with one, the lanes idled a fifth of the load).
// The checkpoint load uses it so that the files' reads of the next chunks run beside the
// writes of this one into its tier (NVMe states: both disk-bound, and one after the other
// they cost the sum).
//
// What it does not do: fill in any order but 0..n-1, or more than two items ahead.
//
// Who calls it: checkpoint_load. One caller thread per ahead_t. Without threads
// (pthread_create failed), ahead_take fills the item in place, lane after lane: the same
// items, and the same first failure.
#pragma once
#include <stddef.h>

#define AHEAD_BUFS 2 // items filled or held at once

// Fills lane `lane`'s part of item k into buf (the ahead_t's whole buffer); 0 or -errno with
// one line in err. Runs on the lane's thread, beside the other lanes: it must write only its
// own part of buf and touch only what the caller and the other lanes leave alone meanwhile.
typedef int (*ahead_fill_fn)(void *ctx, int lane, int k, void *buf, char *err, size_t errlen);

typedef struct ahead ahead_t;

// Two buffers of `bytes` each and `lanes` (1..4) threads that start filling items 0 and 1.
// 0, or -ENOMEM (-EINVAL: lanes out of range) with one line.
int ahead_init(ahead_t **out, size_t bytes, int lanes, int n, ahead_fill_fn fill, void *ctx, char *err,
               size_t errlen);
// Waits for item k (the next in order) and gives its buffer: 0, or the failure of the
// lowest lane whose fill failed, -errno with its line in err (then nothing more is filled).
int ahead_take(ahead_t *a, int k, void **buf, char *err, size_t errlen);
// The caller is done with the buffer ahead_take gave: the item two on may be filled into it.
void ahead_done(ahead_t *a);
// Stops the threads (after the fills in progress) and frees. NULL-safe.
void ahead_free(ahead_t *a);
