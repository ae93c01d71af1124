// visit.h — the two-buffer device visit (DESIGN §4): a state whose home is not the device
// (host-resident gradients, --grads nvme, --checkpoints host) is copied up into one of two
// device buffers, the ops use it there, and it is copied back down. On a GPU one item's copy
// up runs during the previous item's ops, and its copy down during the next one's. The host
// never waits for these copies; events order them:
//   a copy up into buffer i   waits for i's last copy down (free[i]), the ops that last used i
//                             (used[i], when visit_used marked them) and the item's own last
//                             copy down (done[item]); the ops after it wait for it (up[i]);
//   ops writing buffer i whole without a copy up (visit_open) wait for free[i] only;
//   a copy down               waits for every op queued so far.
// The CPU backend copies at once and its events are NULL: the same calls, in the same order.
//
// What it does not do: choose buffers (the caller alternates them, or keeps one that still
// holds what it needs), know what the bytes are, or touch NVMe.
// Who calls it: tier.c (gradients), acts.c (activation checkpoints); compute thread only.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "backend.h"

typedef struct {
    backend_t *be;
    void *buf[2];           // [device] the two buffers (the caller's allocations)
    void *up_ev[2];         // buffer i's copy up has landed (the ops using it wait)
    void *free_ev[2];       // buffer i's last copy down has read it
    void *used_ev[2];       // the ops last using buffer i are queued (visit_used)
    int used_marked[2];     // used_ev[i] was recorded since i's last copy up
    void *ops_ev;           // the ops queued before a copy down
    void **done_ev;         // (nitems) an item's host copy is written (its next copy up waits)
    int nitems;
    uint64_t *h2d_bytes, *d2h_bytes; // counters to bump (atomically), or NULL
    double *copy_ms;        // time the calling thread spent queuing copies, or NULL
} visit_t;

// Two buffers of the caller's, for nitems distinct items (shards, checkpoint tags). Creates
// the events. Returns 0 or -errno with one line in err; visit_free releases what was made.
int visit_init(visit_t *v, backend_t *be, void *buf0, void *buf1, int nitems, char *err, size_t errlen);
void visit_free(visit_t *v); // NULL-safe, idempotent

// Copies bytes of item's host copy h_src up into buffer i (queued); the ops queued after it
// see the data. h_src stays untouched until the copy is known done (visit_sync or an event).
void visit_up(visit_t *v, int i, int item, const void *h_src, size_t bytes);
// Buffer i for ops that write it whole without reading it: they wait for its last copy down.
void visit_open(visit_t *v, int i);
// Every op using buffer i is queued: the next copy up into i waits for them (and no more).
void visit_used(visit_t *v, int i);
// Copies buffer i down to item's host copy h_dst (queued after every op queued so far).
void visit_down(visit_t *v, int i, int item, void *h_dst, size_t bytes);
// The host waits until buffer i's last copy down has landed (its host copy may be read).
void visit_wait_down(visit_t *v, int i);
// The host waits until every queued copy down has landed.
void visit_sync(visit_t *v);
