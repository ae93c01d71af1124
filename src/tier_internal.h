// tier_internal.h — the tier's private parts, shared by tier.c (the table, parameters,
// optimizer states) and tier_grads.c (gradients). Nothing outside tier*.c includes it.
#pragma once
#include <pthread.h>
#include <stdint.h>
#include "gradnorm.h"
#include "tier.h"

struct tier {
    const config_t *cfg;
    const model_t *m;
    backend_t *be;
    tier_layout_t lay;
    hostmem_t *host;              // every host-resident home and staging buffer
    nvme_store_t *nvme;           // NULL unless a state lives on NVMe
    tier_entry_t (*table)[ST_COUNT]; // (nshards): the residency table
    uint32_t *crcs;               // the table's NVMe CRCs, one per extent chunk
    char (*label)[ST_COUNT][64];  // (nshards) "parameters of block.3", for messages
    void **buf[TB_COUNT];         // (count) each non-per-shard buffer's allocations
    sched_t *sched;
    // ---- streamed parameters
    void **slot_ev;               // (nslots) backend events: each slot's last reader is queued (a GPU
                                  // fetch into it waits for that alone); NULL on the CPU backend
    int *slot_of;                 // (nshards) the slot a shard was acquired into (compute thread)
    // ---- --host-cache: host copies of NVMe-resident parameters. The fetch worker alone
    // changes which shard an entry holds; the update writes through to an entry holding a
    // shard it is updating (never one fetched meanwhile: a fetch of a shard waits for its
    // update). hc_mu guards hcache_shard; sched_cache_victim takes the scheduler's lock
    // under it (the lock order in scheduler.h).
    int *hcache_shard;            // (nhcache) which shard each entry holds, -1 when empty
    pthread_mutex_t hc_mu;
    pthread_cond_t hc_cv;         // fresh.readers fell to zero
    int hc_inited;
    // ---- an NVMe home's new compute copy, offered to the fetch worker from its publication
    // (tier_params_store_publish) until the build buffer is taken again (tier_params_build, by
    // the next shard's update or the next update): a fetch of the shard copies it from the
    // build buffer instead of reading back the bytes being written or just written. hc_mu
    // guards it; the offer is taken back once no fetch is copying (readers 0).
    struct {
        int shard;                // -1: nothing offered
        const void *buf;
        int readers;              // fetches copying from buf now
    } fresh;
    // ---- gradients not homed on the device visit two slots, alternately
    visit_t gvisit;
    int gnext;                    // the slot the next visit takes
    int *gslot_of;                // (nshards) the slot a shard's visit holds
    void *step_ev;                // the step's backward is queued: what the update's device reads wait for
    // ---- --grads nvme: a visit's gradient goes to its shard's chunks on NVMe, from the slot
    // itself where the device is host memory, else from the slot's staging copy once its copy
    // down has landed (submitted at the next visit's release, so the host waits at most one
    // shard behind the device). Compute thread only.
    struct tier_gwrite {
        int shard;                // whose gradient the slot's write carries, -1: none in flight
        int queued;               // its copy down is queued, its write not yet submitted (GPU)
        int last;                 // the shard's last visit this step: Σ g² is taken from the host copy
        io_ticket_t *tk;          // (max chunks) one write per chunk
        int ntk;
        double t0;                // submitted at (--trace: each chunk's write is a span from here)
    } gw[2];
    gradnorm_t *gss;              // (nshards) Σ g² of each shard's final gradient (--grads nvme, --update backward,
                                  // the CPU backend)
    int *glast;                   // (nshards) the shard's visit in progress is its last this step
    int *ghanded;                 // (nshards) its final gradient went to the update job this step (compute thread)
    int *gnormed;                 // (nshards; the CPU backend) gss holds its final gradient's Σ g², taken at its
                                  // last release, until consumed (compute thread)
    // ---- --update backward (lay.upd_bwd): the final gradients handed to the update job, in
    // the order the backward releases them; a slot holding one (a host or NVMe home's visit)
    // is the job's until tier_grads_done. ho.mu guards ho, a leaf lock: the compute thread
    // hands over and waits for slots, the update worker takes and gives back.
    struct {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int inited;
        int *q, head, tail;       // (nshards) shards handed over; q[head..tail) not yet taken
        int held[2];              // slot i holds a gradient the job has not finished with
        int closed, rc;           // no job takes them (none opened yet, the job ended, or the backward stopped: rc)
        char err[256];
    } ho;
    size_t *plo, *pn;             // (nshards) this rank's piece of each shard (tier_piece)
    int gather;                   // ranks: every use of a shard gathers its pieces into a slot
    // ---- ranks on a host-memory device with MPI_THREAD_MULTIPLE: the gather worker gathers
    // use k's pieces (comm_second) while compute works on use k−1, in the use order on every
    // rank; the compute thread waits for use k's gather at its acquire. gat.mu guards gat.
    struct {
        pthread_t thr;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int inited, started;
        int stop;                 // set atomically: sched_pin_fetched reads it under another lock
        int *uses, nuses;         // the phase's use order (a copy)
        int done;                 // uses gathered
        int begun;                // uses whose acquire compute has begun
        int fail_k;               // the first use whose gather failed, -1: none
        char err[256];
    } gat;
    // ---- --optimizer-cache: entry k holds the states of the update's k-th chunk while
    // ocache_valid, newer than NVMe's (the update does not write them back). The update job uses
    // the entries; tier_o32_get and tier_o32_put (the optimizer idle) read and write them in
    // place of NVMe.
    tier_xfer_t *ocache_x;        // (nocache) each entry's fill in flight
    int ocache_valid;
    // ---- the update's reads (tier_o32_reads): one per staging buffer, and what each one queued
    // for the next update is (shard, chunk; shard −1: none)
    tier_xfer_t o32_rd[TIER_OPT_STAGING];
    tier_xfer_t o32_q[2];           // staging buffer sb's queued transfer: a load's write, a save's read
    int o32_rd_shard[TIER_OPT_STAGING], o32_rd_chunk[TIER_OPT_STAGING];
    tier_stats_t stats;
};

static inline void stat_add(uint64_t *counter, uint64_t n) { __atomic_fetch_add(counter, n, __ATOMIC_RELAXED); }

// The NVMe extent of chunk c of shard's (g,) master, m, v: every chunk before it is full.
uint64_t tier_chunk_off(const tier_t *t, int shard, int c);
