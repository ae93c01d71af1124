// scheduler.h — the workers that move and update shards while compute runs (DESIGN §4; named
// scheduler.h, not sched.h, which would shadow the system <sched.h> that pthread.h includes,
// since src/ is on the include path).
//
// Fetches: streams shards into a fixed set of device slots in the order a phase will use
// them. The use order is static and given up front (sched_begin), so the scheduler
// prefetches up to --prefetch uses ahead and, when it must make room, evicts the resident
// shard whose next use is farthest away (Belady's rule, exact here because the future is
// known; sched_belady_next is the one implementation, also used by the host cache and the
// plan's replay). Fetches run on the fetch worker; compute waits only for the shard it needs now.
//
// Updates: one update job at a time (a step's optimizer over shards 0..n-1) runs on the
// update worker while compute goes on with the next step; the job publishes each shard as
// it becomes final, and a use of a shard waits only for that shard (sched_update_wait_shard).
//
// Assists: on the CPU backend the update job hands its arithmetic (AdamW of one optimizer
// chunk) to the compute thread, which runs it on every core in its next wait or acquire
// (sched_assist): beside the forward on a core of its own, the job's AdamW took that core from
// one of the forward's threads, and the other waited for it at every barrier.
//
// Nothing sleeps on a timer: every wait is on a condition variable for the state it needs,
// and only the job's wait for its assist to be taken is bounded (SCHED_ASSIST_WAIT_MS).
//
// What it does not do: know where a shard's home copy lives or how to copy it (the fetch
// callback does: host memcpy, NVMe read + copy), write anything back (slots are read-only
// copies; the optimizer writes homes and then calls sched_invalidate), or any arithmetic
// (the update callback does).
//
// Threads (every thread of a training process; the one list):
//   compute    the caller of trainer_*: queues the ops, acquires and releases slots, starts
//              updates, visits gradients and activation checkpoints (tier.c, acts.c).
//   fetch      this scheduler's fetch worker: runs the fetch callback (tier.c: host copy,
//              --host-cache, NVMe read), one fetch at a time; started when there are slots.
//   update     this scheduler's update worker: runs the update callback (optim.c over the
//              host or NVMe states), one job at a time; with an assist owner (the compute
//              thread, CPU backend) its AdamW runs there (sched_assist).
//   gather     tier.c's gather worker (ranks, MPI_THREAD_MULTIPLE): gathers the ranks' pieces
//              of each use's shard into its slot, in the use order, one use ahead of compute
//              (sched_pin_fetched); its collectives go on comm_second.
//   io         the NVMe store's engine (io/): the io_uring thread or the psync pool.
//   st writer  one per open safetensors writer (safetensors_write.c, a checkpoint's save):
//              writes each full buffer while the saving thread fills the other.
//   hasher     one per params_hash in progress (hasher.c: the save, the load,
//              trainer_params_hash): folds the bytes handed over, in order.
//   ahead      up to three per checkpoint load (ahead.c, its reader rank; one lane each for
//              the masters, m and v): read the files a chunk ahead of the chunk going into
//              its tier.
//   Each of these three has its own lock, a leaf, and its owner's thread alone talks to it.
//   OpenMP     the kernels' pool, used by whichever thread runs an op.
// Lock order (a thread holding one may take those after it, never before):
//   tier's host-cache lock  →  this scheduler's lock  →  the NVMe store's lock.
// The update state has its own lock; the only lock taken under it, or under the scheduler's
// by the owner's waits, is the assists' lock, a leaf.
// Who calls it: tier.c (fetches), trainer.c and optim.c (updates), the plan (sched_belady_next,
// sched_replay).
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct sched sched_t;

// Copies shard's parameters from their home into dst (device slot number slot), for its use
// at position pos of the current use order. Runs on the fetch worker. Returns 0, or -errno
// with a one-line message in err.
typedef int (*sched_fetch_fn)(void *ctx, int shard, int pos, int slot, void *dst, char *err, size_t errlen);
// One update job, on the update worker: publishes shards 0..n-1 in that order as each becomes
// final (sched_update_publish). Returns 0, or -errno with one line in err.
typedef int (*sched_update_fn)(void *ctx, char *err, size_t errlen);

typedef struct {
    uint64_t fetches;       // shards copied into slots
    uint64_t hits;          // acquires that found their shard already resident or in flight
    uint64_t evictions;     // resident shards dropped to make room
    double wait_ms;         // time acquire spent waiting for a fetch (not running assists)
    uint64_t assists;       // pieces of the update job the owner ran in its waits (sched_assist)
    uint64_t assists_self;  // pieces the job ran itself, the owner busy elsewhere past the wait
    double assist_ms;       // the owner's time in assists
    double assist_wait_ms;  // the job's time waiting for its pieces to be taken
} sched_stats_t;

// nslots device buffers (each large enough for any shard; 0: no fetches, no fetch worker);
// prefetch = uses looked ahead; max_uses = the longest use order sched_begin will be given.
// Starts the workers. Returns 0 or -errno (err filled).
int sched_init(sched_t **out, int nshards, int nslots, void *const *slots, int prefetch, int max_uses,
               sched_fetch_fn fetch, void *ctx, char *err, size_t errlen);
void sched_free(sched_t *s); // NULL-safe; waits for the update job and in-flight fetches, stops the workers

// ---------------------------------------------------------------- fetches (compute thread)

// The use order of the next phase (a step's forward and backward over every micro-batch,
// or an evaluation's forwards). Copies uses. Starts prefetching its first uses. Returns 0,
// or -EINVAL when nuses exceeds max_uses (nothing changes).
int sched_begin(sched_t *s, const int *uses, int nuses);
// The slot holding shard for its next use in the order (its number in *slot, when not NULL);
// waits for its fetch and issues the prefetches that follow. Returns NULL on a failed fetch
// (message in err; *slot untouched): the step stops. Pins the slot until sched_release.
const void *sched_acquire(sched_t *s, int shard, int *slot, char *err, size_t errlen);
void sched_release(sched_t *s, int shard);
// Every slot's copy is stale (the homes changed): waits for in-flight fetches, empties all.
void sched_invalidate(sched_t *s);
void sched_stats(const sched_t *s, sched_stats_t *out);
// For a cache of n buffers kept by the current use order (the fetch callback's --host-cache):
// the buffer to read shard into for its use at pos (Belady's rule with need = the shard's
// next use after pos), or -1 to bypass the cache. Any thread; takes the scheduler's lock.
int sched_cache_victim(sched_t *s, const int *held, int n, int shard, int pos);

// A failed fetch keeps its slot (the shard stays there, failed, and every later acquire of it
// fails too) instead of emptying it: the slots' assignments then never depend on which rank's
// fetch failed, so the ranks' gathers keep pairing up until the step stops.
void sched_keep_failed(sched_t *s);
// Waits until shard is in a slot whose fetch has ended (ready or failed), pins it and returns
// the slot; -1 once *cancel is set (then sched_kick wakes it). Any thread.
int sched_pin_fetched(sched_t *s, int shard, const int *cancel);
void sched_kick(sched_t *s);
void *sched_slot_buf(const sched_t *s, int slot);

// ---------------------------------------------------------------- Belady's rule

enum { SCHED_EMPTY = -1, SCHED_BUSY = -2 };
// Belady's choice among n buffers, buffer i holding shard held[i] (SCHED_EMPTY: free, taken
// at once; SCHED_BUSY: not a candidate, e.g. pinned or in flight) whose next use is next[i]
// (read where held[i] is a shard; INT32_MAX: none): the one next used farthest away (the
// first of equals). With need >= 0 only a shard next used later than position need qualifies
// (never give up what is needed sooner than what comes in). Returns the index, or -1 when
// none qualifies. The one implementation of the rule: the slots and the host cache look their
// buffers' next uses up in the scheduler's index of the use order (a binary search each), and
// the plan's replay keeps them beside its buffers; a scan of the uses for every buffer at
// every miss was cubic in the uses (a vocabulary of 1M in chunks).
int sched_belady_next(const int *held, const int *next, int n, int need);
// The slots as the scheduler fills them for uses[0..n) from empty (sched_begin, sched_acquire,
// prefetch_after), every copy landing at once and each use released before the next is
// acquired: the step begins by fetching its first `prefetch` uses; a use whose shard is not
// held takes the slot whose shard is next used farthest away (an empty one first); then, with
// that slot pinned, the next `prefetch` uses are fetched ahead, each only into a slot whose
// shard is next used after it (else the fetching ahead stops). Marks miss[k] for each use
// whose copy is fetched (at its use or ahead of it) and returns how many: the plan's count of
// a step's parameter copies, by the scheduler's own rule and index.
int sched_replay(const int *uses, int n, int nslots, int prefetch, char *miss);

// ---------------------------------------------------------------- updates

// Starts fn(ctx) on the update worker and returns at once; the previous job must have ended
// (sched_update_wait). Shards count as not final until published.
void sched_update_start(sched_t *s, sched_update_fn fn, void *ctx);
// A job beside the phase that reads the shards it updates (--update backward: each shard's
// update starts after its last use in the backward): every shard counts as final throughout,
// so nothing waits for it but sched_update_wait, which the next phase's caller must call.
void sched_update_start_beside(sched_t *s, sched_update_fn fn, void *ctx);
// From the job: shards 0..shard are final.
// The same job run here, on the calling thread, to its end (after a job in flight has ended):
// a fetch meanwhile (the prefetch worker's) waits for its shard's publish as for a job on the
// worker. After a failed job it does not run. Returns its rc (err: its line, or the earlier
// job's).
int sched_update_run(sched_t *s, sched_update_fn fn, void *ctx, char *err, size_t errlen);
void sched_update_publish(sched_t *s, int shard);
// Waits until shard is final when a job is in flight. Any thread. Returns 0, or the job's
// -errno with its message in err when it failed before publishing the shard.
int sched_update_wait_shard(sched_t *s, int shard, char *err, size_t errlen);
// Waits for the job in flight to end. Returns 0, or its -errno with its message in err (the
// error stays: every later wait returns it).
int sched_update_wait(sched_t *s, char *err, size_t errlen);

// ---------------------------------------------------------------- assists
// A piece of the update job's work (AdamW over a chunk) for the owner to run on its cores.
typedef void (*sched_assist_fn)(void *arg);

// How long the job waits for the owner to take a piece before running it itself (ms): more
// than a forward block takes at the shapes where the owner is compute-bound, so the owner's
// next acquire comes first; the bound only keeps a wait the owner never reaches (a path
// without assists) from stalling the job.
#define SCHED_ASSIST_WAIT_MS 50

// The calling thread becomes the owner of assists: from now on its waits in sched_acquire,
// sched_update_wait(_shard), sched_update_run, sched_invalidate and sched_free, and each
// sched_acquire as it starts, run a piece the job posted. Call before the first job starts.
void sched_assist_owner(sched_t *s);

// From the owner between its ops (the forward's linear layers): runs a posted piece now, and
// returns 1; else 0 at the cost of one atomic load. The owner's acquires and waits come once
// a block at most; at a large block (a 7b-wide layer) that left the job waiting for most of
// its bounded wait a chunk, and the disk idle meanwhile.
int sched_assist_poll(sched_t *s);

// On the update job: fn(arg), run by the owner (the job waits for it to end), or here when
// there is no owner, the owner is the caller, or it has not taken the piece within
// SCHED_ASSIST_WAIT_MS. Returns 1 when the owner ran it, else 0. Either way fn has returned.
int sched_assist(sched_t *s, sched_assist_fn fn, void *arg);
