// tier.h — residency (DESIGN §4): where every shard's states live, what holds them, and how
// they move between the device arena, the host pool and the NVMe store.
//
// One table lists every shard's states — p16 (the compute copy: BF16, or FP32 in fp32 mode),
// g (FP32 gradients), o32 (FP32 master, Adam m and v) — with each one's home, its address
// there (device, host or NVMe extent), whether it holds anything (g) and the CRC of its last
// NVMe write. tier_layout() is the one place any buffer of a run is sized or counted: tier_init
// allocates exactly what it lists and the plan sums it, so the two agree by construction.
//
// What it does:
//   * owns the host pool and the NVMe store (and the config adapters for both);
//   * streams parameters that do not live on the device into the scheduler's slots (the fetch
//     callback: a host copy, or an NVMe read through --host-cache, kept by Belady's rule);
//   * visits gradients whose home is not the device through two device slots (visit.h); with
//     --grads nvme a shard's gradient goes to NVMe once final for the step, next to its o32;
//   * gives the optimizer its states a chunk at a time (host or device homes in place, NVMe
//     through a double buffer it drives) and takes each shard's new compute copy home.
// What it does not do: arithmetic (step.c, optim.c), choose what to fetch or when (scheduler.c),
// activation checkpoints (acts.c).
// Who calls it: trainer.c (init/free, states for checkpoints), step.c (parameters and gradients
// for compute, on the compute thread), optim.c (on the update worker, or the compute thread for
// --optimizer device), plan.c (tier_layout only). The fetch callback runs on the fetch worker.
// Errors: tier_init returns -errno with one line; the runtime path returns -errno with one line
// naming the shard, the state and, for NVMe, the file and offset. Nothing here exits.
#pragma once
#include <pthread.h>
#include <stdint.h>
#include "backend.h"
#include "config.h"
#include "gradnorm.h"
#include "hostmem.h"
#include "io.h"
#include "model.h"
#include "scheduler.h"
#include "visit.h"

// The host pool's options from the run configuration (budget, NUMA node, quiet) for a pool
// of size bytes, with pin and hugepages on.
void tier_hostmem_opts(hostmem_opts_t *o, const config_t *cfg, uint64_t size);
// The NVMe store's options from the run configuration (paths, block, qd, engine, sqpoll,
// verify, keep) for a store of size bytes; the other fields are zero.
void tier_nvme_opts(nvme_store_opts_t *o, const config_t *cfg, uint64_t size);

// ---------------------------------------------------------------- the layout

typedef enum { ST_P16 = 0, ST_G, ST_O32, ST_COUNT } tier_state_t;

// Every buffer a run allocates, by purpose (in allocation order).
typedef enum {
    TB_PARAMS = 0,     // per shard: p16 home (--params device|host)
    TB_GRADS,          // per shard: g home (--grads device|host)
    TB_OPTIM,          // per shard: master | m | v, one allocation (--optimizer device|host)
    TB_PARAM_SLOTS,    // device: slots the streamed parameters visit (nslots × the largest shard)
    TB_PARAM_STAGING,  // host: one per slot, NVMe → slot (--params nvme)
    TB_PARAM_BUILD,    // host: the optimizer's new compute copy of a shard bound for a device or NVMe home
    TB_HOST_CACHE,     // host: --host-cache entries (--params nvme)
    TB_GRAD_SLOTS,     // device: two slots where gradients not homed on the device visit
    TB_GRAD_FRESH,     // device: one micro-batch's gradients of a shard before they are folded into the sum
                       // (--accum > 1 or ranks)
    TB_GRAD_RECV,      // device: ranks: the pieces of every rank's micro-batch gradients this rank folds
    TB_GRAD_STAGING,   // host: device-resident gradients read back for the host update (GPU)
    TB_GRAD_NVME,      // host: --grads nvme on a GPU: each slot's gradient copied down on its way to NVMe
    TB_OPTIM_STAGING,  // host: the NVMe double buffer, or device states' staging for checkpoints
    TB_OPTIM_CACHE,    // host: master | m | v of the update's first nocache chunks (--optimizer-cache)
    TB_NEW_PARAMS,     // device: --optimizer device's new compute copy when its home is elsewhere
    TB_TIED_GRAD,      // device: the tied LM head's share of the embedding gradient (every chunk's)
    TB_WEIGHTS,        // device: FP32 weights of the largest shard (bf16 mode; w16: a block's two norms)
    TB_NORM_W,         // device: the final norm's FP32 weights (C), held through the head
    TB_CE_STATS,       // device: (nmb, 3, N) each held micro-batch's cross-entropy stats (kernels.h)
    TB_ACTS,           // device or host: activation checkpoints (nmb, L+1, N, C), BF16 in bf16 mode
    TB_ACT_BUFS,       // device: the two buffers host checkpoints visit
    TB_ACT_F32,        // device: bf16 mode's FP32 copy of a checkpoint, the ops read and write
    TB_ACT_GRADS,      // device: ∂L/∂residual of each held micro-batch (nmb, N, C)
    TB_SCRATCH,        // device: one block's intermediates and the head (acts_scratch_t)
    TB_KEPT,           // device: --recompute: kept blocks' intermediates, (nmb × kept blocks) of acts_kept_total
    TB_ROPE,           // device: RoPE cos and sin (T, HS/2) each
    TB_TOKENS,         // device: (nmb, N)
    TB_TARGETS,        // device: (nmb, N)
    TB_COUNT
} tier_buf_t;

typedef struct {
    const char *what;   // names the allocation in budget errors; per shard: a format taking its name
    const char *part;   // the plan's name for what it holds ("param_slots"), shared by related buffers
    tier_kind_t tier;   // TIER_DEVICE or TIER_HOST
    int per_shard;      // one allocation per shard of numel_padded × elem bytes, else count of bytes each
    int count;
    uint64_t bytes;
    uint64_t elem;
    uint64_t total;     // Σ allocations, each rounded up to 4 KiB as the backend and the pool round
} tier_spec_t;

// The optimizer updates a shard a chunk at a time: NVMe staging holds a few chunks, not
// shards (4M elements: 16 MiB per state; halved down to 64K while over --host-budget).
#define TIER_CHUNK_ELEMS ((size_t)1 << 22)
#define TIER_CHUNK_MIN ((size_t)1 << 16)
// NVMe states: the update after the backward reads up to this many chunks ahead through as
// many staging buffers (two while over --host-budget, and for --update backward, whose next
// chunk is known only when the backward hands it over). 8, not 4: once the products ran on
// AMX tiles the NVMe cases became bound by the disk, and the chunks read beside the backward
// are the update's that it need not wait for (make run's placement 154 -> 128 ms a step).
#define TIER_OPT_STAGING 8

typedef struct {
    tier_kind_t home[ST_COUNT]; // from --params, --grads, --optimizer
    int acts_host;              // --checkpoints host
    int nshards, nslots, nhcache;
    int nmb;                    // micro-batches whose activations are held at once (vertical: --accum)
    int vertical;               // the step runs every micro-batch through a block before the next
    int device_is_host;         // the CPU backend: device memory is host memory
    size_t pbytes;              // bytes per element of the compute copy
    int w16;                    // bf16 mode's products and embedding read the BF16 compute copy itself
                                // (the CUDA backend, and the CPU's where its FMA kernels run the products:
                                // step.c), so only the norms' weights are widened; else every use
                                // widens its shard to FP32 (TT_TEST_WIDEN_WEIGHTS, a testing hook, asks
                                // for that, so that the tests can hold the two forms to the same bits)
    int act16;                  // w16 whose products take the norms' outputs and the MLP's
                                // intermediates as BF16 halves: the CUDA backend's, and the CPU's
                                // where its AMX tiles or FMA kernels run them (kernels.h
                                // matmul_act16: any width, on AMX tiles ≤ 1024):
                                // half their bytes, the same bits (step.c); TT_TEST_FP32_ACTS, a
                                // testing hook, keeps them FP32 for the tests that compare the two
    int att16;                  // act16, and the attention half's q, k, v, att and datt as BF16 halves
                                // too, for the head sizes the CPU's attention takes so (kernels.h
                                // attention_act16: up to 256, on its tiles or FMA tasks) or a GPU's
                                // register-tiled kernels (cuda_kernels.h cuda_attention_act16)
    int scratch_fwd;            // the scratch holds a block's forward intermediates: some block recomputes
                                // them, or kept blocks store theirs as BF16 from there (--recompute); 0:
                                // every block writes them into its own FP32 allocation (acts.h fwd)
    size_t chunk_elems;         // elements of an optimizer chunk (all chunks of a shard but its last)
    int o32_parts;              // floats per element of an optimizer chunk's staging: master, m, v, and g
                                // first with --grads nvme (an NVMe chunk's: tier_o32_parts)
    int gext_shards;            // --grads nvme: shards 0..gext_shards-1 keep g first in their NVMe chunks
    int nchunks;                // this rank's optimizer chunks, every shard's (tier_nchunks summed)
    int nocache;                // the update's first chunks (this rank's, in order) whose states stay in RAM
    int nostage;                // NVMe states: staging buffers (2..TIER_OPT_STAGING), chunk k in buffer k % nostage
    int max_uses;               // the longest use order (a step's or an evaluation's)
    int rank, ranks;            // ZeRO-3: the homes hold this rank's piece of every shard (tier_piece)
    int upd_bwd;                // --update backward (or auto, where it may run): each shard's update runs
                                // beside the backward once its gradient is final (tier_grads_next_final)
    int upd_inline;             // the CPU backend's --optimizer host update after the backward: on the
                                // compute thread with every core, before the next forward (trainer.c)
    int upd_assist;             // the CPU backend's --optimizer nvme update after the backward, one rank:
                                // beside the next forward, its AdamW on the compute thread's cores
                                // (sched_assist; trainer.c makes that thread the owner)
    tier_spec_t spec[TB_COUNT];
    uint64_t device_bytes, host_bytes, nvme_bytes;
} tier_layout_t;

// Why --update backward cannot run for cfg on device (DEVICE_AUTO: either), as a phrase with
// the fix, or NULL when it can: it needs no clipping (the update would need the global norm,
// known only once the backward ends), an optimizer on the host or NVMe, one rank and the CPU
// backend (a GPU's gradients would need an event per shard).
const char *tier_update_backward_refusal(const config_t *cfg, device_kind_t device);
// Floats per element of shard's NVMe chunks: master, m, v, and g first where the shard's
// gradient goes to NVMe (--grads nvme, and not handed to the update in the backward once a step).
static inline int tier_o32_parts(const tier_layout_t *lay, int shard) { return 3 + (shard < lay->gext_shards); }
// The machine's half of two layout rules, for what measures the step's code paths outside a
// run (bench calibrate): bf16 mode's products read the BF16 compute copy on device (lay.w16:
// a GPU, or the CPU's own FMA kernels or tiles), and attention runs on BF16 halves for these
// heads (lay.att16: a GPU's register-tiled kernels, cuda_kernels.h, or the CPU's tiles or
// FMA tasks, kernels.h attention_act16). The layout adds the run's own terms (precision, hooks, act16).
int tier_products_read_w16(device_kind_t device);
int tier_attention_halves(device_kind_t device, int NH, int NKV, int HS);
// Sizes and counts every buffer of a run of cfg on device (DEVICE_CPU or DEVICE_CUDA). Pure,
// but for the CPU's vector path (w16, act16: kernels_limit_simd) and three testing hooks
// (TT_TEST_WIDEN_WEIGHTS, TT_TEST_FP32_ACTS, TT_OPT_CHUNK).
void tier_layout(const config_t *cfg, const model_t *m, device_kind_t device, tier_layout_t *lay);
// Bytes of buffer b for shard s (per-shard buffers) or of each of its allocations.
uint64_t tier_spec_bytes(const tier_layout_t *lay, const model_t *m, tier_buf_t b, int s);
// Bytes of part name on tier (TIER_DEVICE or TIER_HOST) in lay; names in order with tier_part_names.
uint64_t tier_part_bytes(const tier_layout_t *lay, tier_kind_t tier, const char *part);
// The part names of tier, NULL-terminated, in the order they first appear.
int tier_part_names(const tier_layout_t *lay, tier_kind_t tier, const char **names, int max);
// Ranks (ZeRO-3, comm.h): this rank's piece [*lo, *lo + *n) of shard s's elements, which its
// homes of p16, g and o32 hold (the whole shard on one rank). Offsets in a home are element −
// *lo; element ranges below are the shard's own.
void tier_piece(const tier_layout_t *lay, const model_t *m, int s, size_t *lo, size_t *n);
// The chunks: the shard cut every chunk_elems elements (global chunk g: [g·E, (g+1)·E)), and
// this rank's chunk c the piece's share of global chunk first_gchunk + c (every one of the
// piece's chunks but the first and last whole). tier_nchunks counts this rank's (0 for an
// empty piece), tier_gchunks the shard's.
int tier_nchunks(const tier_layout_t *lay, const model_t *m, int s);
void tier_chunk_range(const tier_layout_t *lay, const model_t *m, int s, int c, size_t *lo, size_t *n);
int tier_gchunks(const tier_layout_t *lay, const model_t *m, int s);
void tier_gchunk_range(const tier_layout_t *lay, const model_t *m, int s, int c, size_t *lo, size_t *n);
int tier_first_gchunk(const tier_layout_t *lay, const model_t *m, int s);
// The update's number of chunk c of shard s: every shard's chunks (this rank's) in shard
// order, as --optimizer-cache numbers its entries.
int tier_chunk_number(const tier_layout_t *lay, const model_t *m, int s, int c);
// Elements of the update's first nocache chunks (--optimizer-cache).
uint64_t tier_cached_elems(const tier_layout_t *lay, const model_t *m);
// Bytes of --optimizer-cache one chunk's entry takes (its master, m and v; the cache holds
// whole entries).
uint64_t tier_cache_entry_bytes(const tier_layout_t *lay);
// Bytes of --host-cache one parameter shard's entry takes (the largest shard's compute copy;
// the cache holds whole entries).
uint64_t tier_host_cache_entry_bytes(const tier_layout_t *lay, const model_t *m);

// ---------------------------------------------------------------- the residency table

typedef struct {
    tier_kind_t home;   // where the state lives
    void *addr;         // its memory when its home is the device or the host pool
    uint64_t off;       // its NVMe extent (p16: the shard; g/o32: its first chunk, chunks in order)
    uint64_t bytes;     // its size
    uint32_t *crc;      // NVMe: the CRC32C of each chunk's (p16: the extent's) last write (--io-verify)
    int dirty;          // g: holds a sum the optimizer has not consumed (else zero: a visit starts
                        // from zeros instead of reading it); p16, o32: 0
} tier_entry_t;

typedef struct {
    uint64_t h2d_bytes, d2h_bytes;            // host ↔ device copies of parameters, gradients, activations
    uint64_t nvme_read_bytes, nvme_write_bytes;
    uint64_t act_h2d_bytes, act_d2h_bytes;    // of which activation checkpoints (--checkpoints host)
    uint64_t cache_hits;                      // --host-cache: streamed fetches served from host
    uint64_t fresh_bytes;                     // NVMe parameters a fetch copied from the update's new copy,
                                              // not read back (nvme_read_bytes + these: every fetch read)
    double opt_ms;                            // time in the optimizer step
    double opt_nvme_wait_ms;                  // of which waiting for optimizer-state reads/writes
    uint64_t opt_reads_ahead;                 // NVMe optimizer chunks an update found read (queued before it)
    double copy_ms;                           // compute thread queuing gradient and checkpoint copies
    double gather_wait_ms;                    // ranks: compute waiting for the gather worker's gathers
    double grad_slot_wait_ms;                 // --update backward: compute waiting for a gradient slot the update holds
} tier_stats_t;

typedef struct tier tier_t;

// Allocates everything lay lists (device buffers through be, host buffers from a pool it
// creates, an NVMe store when a state lives there), starts the scheduler. Returns 0, or
// -EDQUOT (over --hbm-budget), -ENOMEM, or another -errno, with one line in err; everything
// made is released.
int tier_init(tier_t **out, const config_t *cfg, const model_t *m, backend_t *be, const tier_layout_t *lay,
              char *err, size_t errlen);
void tier_free(tier_t *t); // NULL-safe; stops the scheduler's workers first

const tier_layout_t *tier_layout_of(const tier_t *t);
tier_entry_t *tier_entry(tier_t *t, int shard, tier_state_t st);
void *tier_buf(const tier_t *t, tier_buf_t b, int i); // the i-th allocation of a non-per-shard buffer
sched_t *tier_sched(tier_t *t);
void *tier_step_event(tier_t *t); // recorded by tier_grads_finish: the step's backward is queued
tier_stats_t *tier_stats(tier_t *t);
uint64_t tier_host_used(const tier_t *t);                  // host pool bytes in use
int tier_nvme_info(const tier_t *t, io_info_t *out);       // 0, or -ENOENT when there is no store
int tier_nvme_stats(const tier_t *t, io_stats_t *out);     // the engine's counters (zeros, -ENOENT: no store)

// An NVMe transfer of one extent, waited for; a read is urgent (io_req_t), so that it goes
// ahead of the queued read-ahead and write-back. Returns 0 or -errno with the ticket's message.
int tier_nvme_io(tier_t *t, io_op_t op, uint64_t off, uint64_t len, void *buf, uint32_t *crc, const char *what,
                 char *err, size_t errlen);

// ---------------------------------------------------------------- parameters

// The use order of the next phase (model_use_order). Returns 0 or -EINVAL with one line.
int tier_begin(tier_t *t, const int *uses, int n, char *err, size_t errlen);
// The compute copy of shard on the device for one use in the phase's order, in *p (waits for
// the shard's update in flight). Returns 0, or -errno with one line in err when it cannot be
// had: *p is then device memory of the shard's size all the same (stale or zeros), so that
// the phase can finish and report the fault.
int tier_params_acquire(tier_t *t, int shard, const void **p, char *err, size_t errlen);
// Every op reading it is queued.
void tier_params_release(tier_t *t, int shard);
// The homes change (an update, a load): no streamed copy may be used again.
void tier_params_invalidate(tier_t *t);
// Where the optimizer builds shard's new compute copy: the home itself when host memory,
// else the build buffer (tier_params_store then takes it home).
void *tier_params_build(tier_t *t, int shard);
// Takes shard's new compute copy (built where tier_params_build said) to its home. A device
// home's copy waits for the ops queued so far, or, with after (an event), for those before it
// only. Returns 0 or -errno with one line.
int tier_params_store(tier_t *t, int shard, const void *compute, void *after, char *err, size_t errlen);
// tier_params_store, then the shard published to the scheduler (sched_update_publish); an
// NVMe home is published first, and until its write lands a fetch of the shard copies it from
// compute rather than reading it back. Returns as tier_params_store (published either way
// for an NVMe home: its failure fails the update job, so the step).
int tier_params_store_publish(tier_t *t, int shard, const void *compute, void *after, char *err, size_t errlen);

// ---------------------------------------------------------------- gradients

// The device buffer shard's gradients accumulate into for one backward visit; last: no
// later visit this step. Host and NVMe homes visit a slot (read, accumulate, write back: the
// same operations as when resident, so the same bits). Pair with tier_grads_release.
float *tier_grads_acquire(tier_t *t, int shard, int last, char *err, size_t errlen);
// The visit's ops are queued: its copy down (and, final on NVMe, the write) is queued.
// Returns 0 or -errno with one line.
int tier_grads_release(tier_t *t, int shard, char *err, size_t errlen);
// The step's backward is queued: every write-back lands (host homes readable by the host,
// NVMe writes complete), and the optimizer's device reads are ordered after it.
int tier_grads_finish(tier_t *t, char *err, size_t errlen);
// Adds Σ g² of this rank's piece of shard (after tier_grads_finish) into acc: the same
// wherever it lives (gradnorm.h). Returns 0 or -errno with one line.
int tier_grads_norm(tier_t *t, int shard, gradnorm_t *acc, char *err, size_t errlen);
// Zeroes every gradient (homes and the dirty marks). Returns 0 or -errno.
int tier_grads_zero_all(tier_t *t, char *err, size_t errlen);
// The host view of shard's gradients (after tier_grads_finish): the home, or a staging copy
// (valid until the next call). Returns 0 or -errno with one line.
int tier_grads_get(tier_t *t, int shard, const float **g, char *err, size_t errlen);

// --update backward (lay.upd_bwd): while a step's handover is open, a final visit's release
// hands the shard's gradient to the update job (taking its Σ g²); an NVMe home's gradient is
// not written there, and its slot stays the job's until tier_grads_done (nothing for a shard
// not handed over), while the visit that next wants the slot waits. The job takes
// the shards in the order handed over: tier_grads_next_final waits for the next one (its
// index), or returns -errno with one line once the handover is closed and empty;
// tier_grads_peek_final gives the next one only when already handed over (else -1). Each step
// opens the handover before its backward; tier_grads_close ends it (the job's end, or the
// backward's fault, with rc and why): every wait returns at once, and held slots are free.
void tier_grads_open(tier_t *t);
int tier_grads_next_final(tier_t *t, char *err, size_t errlen);
int tier_grads_peek_final(tier_t *t);
void tier_grads_done(tier_t *t, int shard);
void tier_grads_close(tier_t *t, int rc, const char *why);

// ---------------------------------------------------------------- optimizer states

// What of a chunk an access wants: the master, m, v (and for the update, g).
enum { TIER_MASTER = 1, TIER_M = 2, TIER_V = 4, TIER_MV = 6, TIER_O32 = 7 };

// An NVMe transfer of one chunk's states through a staging buffer: one request, or two when
// --io-verify checks g and o32 apart (each extent carries its own CRC).
typedef struct {
    io_ticket_t tk[2];
    int n;                  // requests in flight (0: none)
    io_op_t op;
    int shard, chunk;
    const char *label;      // --trace: the shard's name
    double t0;              // --trace: when it was queued
} tier_xfer_t;

// Views of chunk c of shard's states for the update: the home when it is host or device
// memory, else staging buffer `sb` (after its read).
void tier_o32_views(tier_t *t, int shard, int c, int sb, float **master, float **m, float **v);
// Queues the NVMe read (with the chunk's gradients when they live on NVMe) or the write back
// of chunk c through staging buffer `sb`. Returns 0 or -errno with one line.
int tier_o32_submit(tier_t *t, tier_xfer_t *x, io_op_t op, int shard, int c, int sb, char *err, size_t errlen);
// The read as tier_o32_submit's, for the next update (a read ahead): lazy (io_req_t), so that
// the backward's parameter reads queued behind it wait for a few of its pieces, not qd.
int tier_o32_read_ahead(tier_t *t, tier_xfer_t *x, int shard, int c, int sb, char *err, size_t errlen);
// Waits for x (nothing when idle), counts its bytes and keeps the CRCs of a write. Returns 0
// or -errno with the ticket's message.
int tier_o32_finish(tier_t *t, tier_xfer_t *x, char *err, size_t errlen);
// Whether every request of x has completed (idle: yes), so that finishing it will not wait.
int tier_o32_landed(const tier_xfer_t *x);
// The update's reads in flight, one per staging buffer: the tier's, so that an update can
// queue the next update's first reads as it ends (its states went home, and nothing changes
// them before the next update). tier_o32_take_read says whether buffer sb's read in flight is
// chunk c of shard's (then the caller finishes it as its own), else finishes and forgets any;
// tier_o32_set_read records what buffer sb's read is. tier_o32_drop_reads waits for and
// forgets them all: tier_o32_get, tier_o32_put and tier_free call it before they use the
// staging or change the states (the optimizer idle); it returns 0 or the first read's -errno
// with its message (the disk failed a read, used or not).
tier_xfer_t *tier_o32_reads(tier_t *t);
int tier_o32_take_read(tier_t *t, int sb, int shard, int c);
void tier_o32_set_read(tier_t *t, int sb, int shard, int c);
int tier_o32_drop_reads(tier_t *t, char *err, size_t errlen);
// --optimizer-cache (NVMe states): the update's first ncache chunks (this rank's, in order)
// work in cache entries of their own, and NVMe sees them only at the first update, which fills
// the entries from it: after that the entries are their home (never written back: NVMe is
// scratch), and tier_o32_get and tier_o32_put read and write a cached chunk there. Entry k's
// views for a chunk of n elements; its transfer; whether the entries hold the newest states
// (the update that filled and updated them sets it).
int tier_o32_ncache(const tier_t *t);
void tier_o32_cache_views(tier_t *t, int k, size_t n, float **master, float **m, float **v);
tier_xfer_t *tier_o32_cache_xfer(tier_t *t, int k);
int tier_o32_cache_valid(const tier_t *t);
void tier_o32_cache_set_valid(tier_t *t, int valid);
// Queues the read of chunk c of shard's master, m, v into entry k (the first update's fill).
int tier_o32_cache_fill(tier_t *t, tier_xfer_t *x, int shard, int c, int k, char *err, size_t errlen);
// Queues the read of chunk c of shard's gradients alone (--grads nvme) into staging buffer
// `sb`, where tier_grads_for_update finds them; nothing otherwise.
int tier_grads_submit(tier_t *t, tier_xfer_t *x, int shard, int c, int sb, char *err, size_t errlen);
// The gradients of chunk c of shard where the host update reads them: the home, the NVMe
// staging buffer (read with the states), or a copy from the device (queued after the step's
// backward only).
const float *tier_grads_for_update(tier_t *t, int shard, int c, int sb);
// Whether the gradients tier_grads_for_update gives for shard are its home itself, whole (a
// host home, or the CPU backend's device home, one rank), so that the update may write zeros
// over them as it reads them (adamw_params_t.consume).
int tier_grads_update_consumes(const tier_t *t, int shard);
// After the update read them: a device or host home is zeroed (the next backward adds to it),
// unless the update wrote the zeros (zeroed: tier_grads_update_consumes said so).
void tier_grads_consumed(tier_t *t, int shard, int zeroed);
// The device copy of shard's gradients for --optimizer device: the home, or (host) a slot it
// is copied into. Returns the device pointer.
const float *tier_grads_device(tier_t *t, int shard);

// Chunk c of shard's states in host memory for a checkpoint or the hash: the home, or the
// staging buffer 0 read from its home (only the parts asked for), or zeros with fill_zero (the
// caller overwrites them). Pointers at the chunk's first element; valid until the next call;
// the optimizer must be idle. Returns 0 or -errno with one line.
int tier_o32_get(tier_t *t, int shard, int c, int parts, int fill_zero, float **master, float **m, float **v,
                 char *err, size_t errlen);
// After the caller changed what tier_o32_get gave: writes those parts home (an NVMe chunk is
// written whole: get it with every part first). Returns 0 or -errno with one line.
int tier_o32_put(tier_t *t, int shard, int c, int parts, char *err, size_t errlen);
// Rebuilds chunk c of shard's compute copy from the master tier_o32_get gave (its chunks in
// order); after the shard's last chunk the copy goes home. Returns 0 or -errno with one line.
int tier_params_from_master(tier_t *t, int shard, int c, char *err, size_t errlen);
// A whole chunk's new states without waiting for the disk (the loads): tier_o32_stage
// gives zeros for chunk c of shard in staging buffer sb (0 or 1; first it waits for the write
// that buffer had in flight), the caller fills them, and tier_o32_store rebuilds the chunk's
// compute copy from the master (as tier_params_from_master), queues their write home and
// returns; tier_o32_flush waits for every transfer queued, whatever rc, the caller's result so
// far, says, and returns rc or, where rc is 0, the writes' (the first failure's line stays in
// err). Where the chunk's home is not NVMe,
// or an --optimizer-cache entry holds it, they are tier_o32_get with fill_zero, and
// tier_o32_put then tier_params_from_master (after a flush: those use staging buffer 0
// whatever sb). The optimizer must be idle. Each returns 0 or -errno with one line (a queued
// write's failure shows at the call that waits for it; an sb other than 0 or 1: -EINVAL).
int tier_o32_stage(tier_t *t, int shard, int c, int sb, float **master, float **m, float **v, char *err,
                   size_t errlen);
int tier_o32_store(tier_t *t, int shard, int c, int sb, char *err, size_t errlen);
int tier_o32_flush(tier_t *t, int rc, char *err, size_t errlen);
// A pass over the chunks' states with each read queued ahead (the checkpoint save):
// tier_o32_fetch queues the read of `parts` of chunk c of shard into staging buffer sb (0 or
// 1; first it waits for what that buffer had in flight) and returns; tier_o32_fetched waits
// for it and gives the views, valid until sb's next fetch. Chunk k of a pass in buffer k % 2,
// chunk k+1 fetched once chunk k is, keeps one read in flight while a chunk is used. Where the
// chunk's home is not NVMe, or an --optimizer-cache entry holds it, fetch only waits and
// fetched is tier_o32_get into buffer sb (so is a fetched chunk that buffer's last fetch did
// not queue: the views are always the chunk's). tier_o32_flush waits for a fetch never taken. The
// optimizer must be idle. Each returns 0 or -errno with one line (an sb other than 0 or 1: -EINVAL).
int tier_o32_fetch(tier_t *t, int shard, int c, int parts, int sb, char *err, size_t errlen);
int tier_o32_fetched(tier_t *t, int shard, int c, int parts, int sb, float **master, float **m, float **v, char *err,
                     size_t errlen);
