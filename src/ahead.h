// ahead.h — one item ahead on a thread: the caller takes items 0, 1, ..., n-1 in order, and
// while it works on what it copied out of item k the thread is already filling item k+1. One
// buffer: the caller copies item k out and calls ahead_done, and the fill of k+1 starts then.
// The checkpoint load uses it so that the files' reads of the next chunk run beside the
// writes of this one into its tier (NVMe states: both disk-bound, and one after the other
// they cost the sum).
//
// What it does not do: fill in any order but 0..n-1, or more than one item ahead.
//
// Who calls it: checkpoint_load. One caller thread per ahead_t. Without a thread
// (pthread_create failed), ahead_take fills the item in place: the same items, one after the
// other.
#pragma once
#include <stddef.h>

// Fills item k into buf (the ahead_t's buffer); 0 or -errno with one line in err. Runs on the
// thread: it must touch only what the caller leaves alone meanwhile.
typedef int (*ahead_fill_fn)(void *ctx, int k, void *buf, char *err, size_t errlen);

typedef struct ahead ahead_t;

// A buffer of `bytes` and a thread that starts filling item 0. 0, or -ENOMEM with one line.
int ahead_init(ahead_t **out, size_t bytes, int n, ahead_fill_fn fill, void *ctx, char *err, size_t errlen);
// Waits for item k (the next in order) and gives its buffer: 0, or the fill's -errno with its
// line in err (then nothing more is filled).
int ahead_take(ahead_t *a, int k, void **buf, char *err, size_t errlen);
// The caller is done with the buffer ahead_take gave: the next item may be filled into it.
void ahead_done(ahead_t *a);
// Stops the thread (after the fill in progress) and frees. NULL-safe.
void ahead_free(ahead_t *a);
