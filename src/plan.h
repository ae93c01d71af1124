// plan.h — what a configuration needs: bytes of each state and of every buffer (tier_layout,
// the very list trainer_init allocates), where they must fit, compute per
// step, and whether this machine can run it. `tiertrain plan` prints it; `train` runs the
// same check before allocating anything and exits 2 when it fails.
// Placements follow --params/--grads/--optimizer/--schedule/--checkpoints/--host-cache (the
// same rules as trainer_init). Per-step traffic on each link comes from replaying the step's
// use order through the scheduler's rule (Belady over the device slots, then the host
// cache); the floor divides each resource's work in each of the step's two phases by the
// calibration profile's rate (see PLAN_PHASE_UPDATE).
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "config.h"
#include "model.h"
#include "profile.h"
#include "tier.h"

// The resources a step's work runs on. NVMe is one: a device shares its bandwidth between
// reads and writes (measured on this VM: reading and writing at once, each ran at half the
// rate of either alone), so its time is the reads' plus the writes'.
enum { PLAN_COMPUTE = 0, PLAN_H2D, PLAN_D2H, PLAN_NVME, PLAN_ADAM, PLAN_COMM, PLAN_NRES };
// The compute's parts, each at its own rate from the profile (profile.h).
enum { PLAN_CPART_MATMUL = 0, PLAN_CPART_ATTENTION, PLAN_CPART_ELEM, PLAN_NCPARTS };
// A step is two phases, the second starting when the first ends, and each lasts at least its
// busiest resource's time: the floor is the sum of the two. Phase 0 is the update and what runs
// beside it: under --update after, the first micro-batch's forward (it waits shard by shard for
// the update, and the backward waits for it); under --update backward, the last backward pass
// (the step ends with the update); with --optimizer device, nothing (the update runs on the
// device between the backward and the next forward). Phase 1 is the rest of the step.
enum { PLAN_PHASE_UPDATE = 0, PLAN_PHASE_REST, PLAN_NPHASES };
// The ranks' link when no profile measured it (bench calibrate under a launcher does): a
// modest shared-memory MPI rate, bytes a rank sends per second.
#define PLAN_COMM_DEFAULT_BPS 2e9
extern const char *const plan_resource_names[PLAN_NRES]; // "compute", "host->device", ...

typedef struct {
    uint64_t params_bytes;   // compute copy (BF16, or FP32 in fp32 mode), padded shards
    uint64_t grads_bytes;    // FP32 gradients
    uint64_t grads_nvme_bytes; // of them on NVMe (--grads nvme: less under --update backward, tier_layout)
    uint64_t optim_bytes;    // FP32 master + m + v
    uint64_t acts_bytes;     // on the device: checkpoints, one block's recompute, head, scratch
    uint64_t backend_bytes;  // the device backend's own (CUDA: cuBLASLt workspace, kernel scratch)
    uint64_t device_bytes;   // what the device arena must hold
    uint64_t host_bytes;     // what the host must hold (homes and staging)
    uint64_t nvme_bytes;     // what the NVMe store must hold
    uint64_t kernels_bytes;  // the CPU backend's kernels' own buffers, outside the arena: the attention
                             // ops' at the run's threads (kernels.h attention_workspace_bytes)
    int kernels_threads;     // those threads (backend_host_threads)
    uint64_t ram_needed;     // host bytes, plus on the CPU backend the device arena and kernels_bytes (the same RAM)
    uint64_t mem_available;  // /proc/meminfo MemAvailable
    uint64_t nvme_free;      // free bytes under --nvme-path (statvfs, each filesystem once); 0 when unused
    // --save: what its filesystem must hold at the run's fullest moment (plan_save_space)
    uint64_t save_bytes;     // one checkpoint (checkpoint_bytes)
    int save_count;          // checkpoints on disk from this run at the fullest moment
    uint64_t save_need;      // new bytes then, less the older checkpoints pruned by then
    uint64_t save_free;      // free bytes on its filesystem (less the NVMe states, when they share it)
    double flops_per_step;   // matmul FLOPs incl. the recompute, plus attention
    double elem_bytes;       // bytes the elementwise ops read and write per step (the compute's third part)
    // per optimizer step
    uint64_t param_fetches;  // streamed parameter shards copied to the device
    uint64_t h2d_bytes, d2h_bytes, nvme_read_bytes, nvme_write_bytes;
    uint64_t nvme_handed_bytes; // --update after: parameters the update hands the forward, not read (in no total)
    // predicted floor: each resource's time for one step (t_ms), and of that, its time in each
    // phase (phase_ms[φ][r]; the two sum to t_ms[r]); a phase lasts its largest (phase_floor_ms,
    // set by phase_bound), and the floor is the phases' sum
    double t_ms[PLAN_NRES];
    double compute_ms[PLAN_NCPARTS]; // t_ms[PLAN_COMPUTE]'s parts: matmuls, attention, elementwise ops
    double phase_ms[PLAN_NPHASES][PLAN_NRES];
    double phase_floor_ms[PLAN_NPHASES];
    int phase_bound[PLAN_NPHASES];     // index into plan_resource_names
    int phase_adam_shared[PLAN_NPHASES]; // the CPU backend's AdamW runs in the phase on the compute's cores (counted with it)
    const char *phase_names[PLAN_NPHASES]; // what each phase runs: "update+forward", "backward", ...
    double floor_ms;
    int bound;               // the resource bounding the longer phase (the update's on a tie)
    const profile_t *prof;   // the rates used
    int ranks, local_ranks;  // the world (cfg->ranks) and its ranks on this node, which share its RAM and NVMe
    uint64_t comm_bytes;     // bytes each rank sends per step in the gradient fold (and receives as many)
    int feasible;
    char reason[512];        // why not, and the flag that would fix it
    // plan_advise: the cheapest changes that make it fit (lowest predicted floor first), or
    // for one that fits, the largest --batch that still does
    struct { char change[96]; double floor_ms; } sugg[3];
    int nsugg;
    int max_batch;           // 0: not asked, or it does not fit
    char stuck[512];         // no change fits: why not even with every state on NVMe at --batch 1
    tier_layout_t lay;       // every buffer, as trainer_init allocates it (device and host parts)
} plan_t;

// --recompute auto (cfg->recompute_auto): sets cfg->kept_blocks to the most blocks that can
// keep their intermediates while the plan still fits with RAM to spare (15%), and fills p
// for it; writes one line saying so into why and returns 1. Else returns 0 (why empty).
int plan_recompute_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len);
// --host-cache auto (cfg->host_cache_auto) with NVMe parameters: sets cfg->host_cache to the
// most whole shards that fit in RAM with the plan still roomy (as --optimizer-cache auto does),
// fills p for it, writes one line saying so into why and returns 1. Else (not auto,
// parameters not on NVMe, no plan that fits) returns 0 with why empty and the cache at 0. Run
// after plan_optim_cache_auto: a byte of parameter cache saves two reads a step (the forward's
// and the backward's) and a byte of optimizer cache one, but when the update paces the next
// forward (every state on NVMe) the optimizer's reads are the ones that hold it up: in one
// run, the parameter cache first made bench capacity's step slower (65.6 s against 55-61 s).
int plan_host_cache_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len);
// --optimizer-cache auto (cfg->optim_cache_auto) with NVMe optimizer states: sets
// cfg->optim_cache to the most whole chunks whose states fit in RAM with the plan still roomy
// (15% of the available RAM spare, within --host-budget at the chunk size the run has without
// it), fills p for it, writes one line
// saying so into why and returns 1. Else (not auto, states not on NVMe, no plan that fits)
// returns 0 with why empty and the cache at 0. Run after plan_recompute_auto (the kept
// activations come first) and before plan_host_cache_auto.
int plan_optim_cache_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len);
// Both cache autos in their order, --optimizer-cache then --host-cache (see
// plan_host_cache_auto for why), each line that says what one took written to out (when p is
// feasible). Every caller resolves them through it.
void plan_cache_autos(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, FILE *out);
// The placements --offload auto tries, in its order (params, grads, optimizer homes).
typedef struct { tier_kind_t params, grads, optim; } plan_placement_t;
enum { PLAN_NPLACEMENTS = 11 };
extern const plan_placement_t plan_placements[PLAN_NPLACEMENTS];

// prof: the rates for the floor (kept by pointer in p; it must outlive p).
void plan_compute(const config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p);
// FP32 words a token's elementwise ops (RMSNorm, RoPE, residual adds, SwiGLU) read and write
// in one block's forward (bwd 0) or backward (bwd 1: its own ops, not the recompute's), for
// dim C, KVD = kv heads × head size and ffn F, the BF16 halves act16 and att16 store (tier.h)
// as such: the plan's count, and (both 0) what bench calibrate divides the ops' time by for the
// profile's elem_Bps.
double plan_block_elem_words(int C, int KVD, int F, int bwd, int act16, int att16);
// --offload auto: sets cfg's three homes to the feasible placement with the lowest predicted
// floor (ties: the one adding less traffic, in the order all resident; params streamed from
// host; + gradients on host; optimizer on NVMe; …; then gradients on NVMe too, down to every
// state on NVMe), and fills p for it. Writes one line saying what it chose and why into why.
// Returns 1 when one fits, else 0 (cfg then holds the most offloaded candidate and p its
// reason).
int plan_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len);
// What to change (plan_advice.c). For p infeasible: up to 3 changes — each a few flags to
// paste after the command line, none already in effect — that make the same plan feasible,
// cheapest predicted floor first: other homes for the states (as --offload auto tries them),
// --checkpoints host, a smaller --batch with a larger --accum (the same tokens per step), the
// budget that would suffice, --save-dtype bf16 or --keep-last 1; then pairs of a placement
// with one of the others, while fewer than 3 fit alone. Floors within 1% tie, and a tie goes
// to a change that leaves the budgets alone, then to the shorter one. For p feasible: the largest --batch
// that still fits (up to 65536). Fills p->sugg / nsugg / max_batch.
void plan_advise(const config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p);
void plan_print(const plan_t *p, const config_t *cfg, FILE *f);
// The floor's two phases as text, "update+forward 33.4 s (nvme) + backward 6.3 s (compute)":
// each one's time (ms, or s when seconds) and the resource it is bound by, into buf. plan,
// the tier report and bench capacity say it beside the floor.
void plan_phases_text(const plan_t *p, int seconds, char *buf, size_t len);
// When the NVMe store is over PLAN_NVME_SCALE × the file p's profile measured NVMe over, one
// line saying the floor's NVMe rates may not hold at the store's size, and how to measure
// them there, into buf; returns 1. Else 0 (buf empty): no store, no profile, a profile that
// did not record its size, or a store the measurement covered. plan and train print it.
enum { PLAN_NVME_SCALE = 4 };
int plan_nvme_scale_note(const plan_t *p, char *buf, size_t len);
// The plan as one JSON line (`tiertrain plan`'s last line, and its --log): the model, whether
// it fits and why not, each tier's bytes and named parts, RAM, traffic, the floor and its bound,
// each resource's time, and the phases ("phases": each one's name, ms, bound and t_ms).
void plan_json(const plan_t *p, const config_t *cfg, const model_t *m, FILE *f);
// The --save facts of p (save_*) for a run whose first step is first_step, and p->feasible /
// p->reason when the checkpoints cannot fit. plan_compute calls it with first_step 1; a
// resumed run calls it again with its own. The fullest moment is the last save: the newest
// --keep-last checkpoints (every one with --keep-last 0) plus the one being written, before
// the oldest is pruned. TT_SAVE_FREE=SIZE (a testing hook) stands in for statvfs.
void plan_save_space(const config_t *cfg, const model_t *m, int first_step, plan_t *p);
// Free bytes over the --nvme-path directories (default $TMPDIR or /tmp), each filesystem once.
// TT_NVME_FREE=SIZE (a testing hook) stands in for statvfs, so bench capacity can be run on a
// small budget of disk.
uint64_t plan_nvme_free(const config_t *cfg);
