// plan.c — see plan.h. The byte counts are tier_layout's, the list trainer_init allocates;
// test_tiers (plan_matches_allocation) holds them equal to the byte.
#include "plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include "checkpoint.h"
#include "backend.h"
#include "hostmem.h"
#include "kernels.h" // CE_QUANTUM, attention_workspace_bytes
#include "scheduler.h" // sched_belady_next, sched_replay
#include "util.h"

const char *const plan_resource_names[PLAN_NRES] = {"compute", "host->device", "device->host", "nvme",
                                                     "optimizer", "ranks link"};

// ---------------------------------------------------------------- the step's phases

// What a step's work is, per phase (plan.h: PLAN_PHASE_UPDATE): FLOPs, bytes on each link,
// parameters AdamW updates, bytes a rank sends. Every piece of work is added once, to the
// phase it runs in; the step's totals (p->flops_per_step aside) are the phases' sums.
// (the compute: matmul FLOPs, attention FLOPs, bytes the elementwise ops read and write)
enum { W_FLOPS = 0, W_ATT, W_ELEM, W_H2D, W_D2H, W_NVME_READ, W_NVME_WRITE, W_ADAM, W_COMM, W_N };
enum { UPD_AFTER = 0, UPD_BACKWARD, UPD_DEVICE }; // where the update runs: see phase_of
typedef struct {
    int update;  // UPD_*
    int passes;  // passes of the step: one per micro-batch (horizontal), or one (vertical)
    double w[PLAN_NPHASES][W_N];
} work_t;

// The phase of a pass's forward (bwd 0) or backward (bwd 1). --update after: the update runs
// beside the first pass's forward (trainer.c: the next step's forward overlaps it, shard by
// shard), and no backward starts before that forward ends; --update backward: beside the last
// pass's backward, once each shard's gradient is final (the forwards and earlier backwards come
// before it); --optimizer device, and the CPU backend's host update after the backward
// (lay.upd_inline: its cores are the step's): between the backward and the next forward,
// beside nothing.
static int phase_of(const work_t *k, int pass, int bwd) {
    if (k->update == UPD_AFTER) return pass == 0 && !bwd ? PLAN_PHASE_UPDATE : PLAN_PHASE_REST;
    if (k->update == UPD_BACKWARD) return pass == k->passes - 1 && bwd ? PLAN_PHASE_UPDATE : PLAN_PHASE_REST;
    return PLAN_PHASE_REST;
}

// x of what resource res does in pass's forward (bwd 0) or backward (bwd 1).
static void work_at(work_t *k, int pass, int bwd, int res, double x) { k->w[phase_of(k, pass, bwd)][res] += x; }

// x done alike in every pass's forward (bwd 0) or backward (bwd 1).
static void work_spread(work_t *k, int bwd, int res, double x) {
    for (int i = 0; i < k->passes; i++) work_at(k, i, bwd, res, x / k->passes);
}

// x that the update does (it reads and writes its states, writes the new weights home).
static void work_update(work_t *k, int res, double x) { k->w[PLAN_PHASE_UPDATE][res] += x; }

static double work_total(const work_t *k, int res) { return k->w[PLAN_PHASE_UPDATE][res] + k->w[PLAN_PHASE_REST][res]; }

// ---------------------------------------------------------------- replaying the use order

// Belady's rule over cap buffers (sched_belady_next, as the scheduler and the host cache keep
// theirs): replays uses[0..n) and marks miss[k] for the uses that must be copied in. bypass:
// a shard needed again later than everything held is not kept (the host cache's rule);
// without it, a miss always takes a buffer (the device slots'). start: uses before it only
// warm the buffers (their misses are not counted). Returns the misses counted.
// Each buffer's next use is kept beside it rather than searched for (sched_belady_next):
// after[k], the next use of uses[k]'s shard, comes from one backward pass, and a held shard's
// next use is after[] of where it was last used (any use since would have been a hit). O(n ·
// cap): with a scan of the uses per buffer it was cubic, and a vocabulary of 1M in 1366 chunks
// took 8 s.
static int replay(const int *uses, int n, int cap, int bypass, int start, char *miss) {
    int ids = 0;
    for (int k = 0; k < n; k++) ids = uses[k] >= ids ? uses[k] + 1 : ids;
    const size_t nb = (size_t)(cap > 0 ? cap : 1);
    int *held = malloc(nb * sizeof *held), *next = malloc(nb * sizeof *next);
    int *after = malloc((size_t)(n > 0 ? n : 1) * sizeof *after);
    int *last = malloc((size_t)(ids > 0 ? ids : 1) * sizeof *last);
    int count = 0;
    if (!held || !next || !after || !last) {
        free(held); free(next); free(after); free(last);
        return n;
    }
    for (int s = 0; s < ids; s++) last[s] = INT32_MAX;
    for (int k = n - 1; k >= 0; k--) {
        after[k] = last[uses[k]];
        last[uses[k]] = k;
    }
    for (int i = 0; i < cap; i++) held[i] = SCHED_EMPTY;
    for (int k = 0; k < n; k++) {
        int at = -1;
        for (int i = 0; i < cap && at < 0; i++)
            if (held[i] == uses[k]) at = i;
        if (miss) miss[k] = at < 0;
        if (at >= 0) {
            next[at] = after[k];
            continue;
        }
        if (k >= start) count++;
        int victim = cap ? sched_belady_next(held, next, cap, bypass ? after[k] : -1) : -1;
        if (victim >= 0) {
            held[victim] = uses[k];
            next[victim] = after[k];
        }
    }
    free(held); free(next); free(after); free(last);
    return count;
}

// Streamed parameters: shard copies to the device per step (the slots start empty each
// step) and, of those, NVMe reads the host cache does not absorb (the cache keeps its
// contents across steps: the optimizer writes through it).
// Elements of shard s this rank holds (a fetch copies them; the gather brings the rest).
static double piece_numel(const tier_layout_t *lay, const model_t *m, int s) {
    size_t lo, n;
    tier_piece(lay, m, s, &lo, &n);
    return (double)n;
}

// The first use of shard in uses (which holds it).
static int first_use(const int *uses, int shard) {
    int u = 0;
    while (uses[u] != shard) u++;
    return u;
}

// A copy counts in the phase of the use it serves: the scheduler may start the first of a
// backward's copies while its forward ends (up to --prefetch ahead), which this ignores.
// --update after: the first forward's first use of each shard waits for the shard's update,
// which hands the fetch its new copy while writing it home (tier_params_store_publish): no
// NVMe read where the update paces the forward. Where the update runs ahead, the fetch reads
// it back, hidden behind the compute that bounds that phase: the floor counts neither.
// Those bytes are nvme_handed_bytes, outside nvme_read_bytes.

static void stream_traffic(const config_t *cfg, const model_t *m, plan_t *p, work_t *k) {
    const int nslots = p->lay.nslots, nhcache = p->lay.nhcache, reps = p->lay.vertical ? 1 : cfg->accum;
    const double pbytes = (double)p->lay.pbytes;
    // a pass's uses: its forward's, then its backward's (model_use_order)
    const int per = model_use_order(m, 1, 1, NULL), nfwd = model_use_order(m, 1, 0, NULL);
    int n = model_use_order(m, reps, 1, NULL);
    int *uses = calloc((size_t)n, sizeof *uses), *fetch = calloc((size_t)n * 2, sizeof *fetch);
    int *at = calloc((size_t)n, sizeof *at); // the use each fetch serves
    char *miss = calloc((size_t)n, 1);
    if (!uses || !fetch || !at || !miss) { free(uses); free(fetch); free(at); free(miss); return; }
    model_use_order(m, reps, 1, uses);
    sched_replay(uses, n, nslots, cfg->prefetch, miss); // the scheduler's rule: the slot in use stays pinned
    int nf = 0;
    // NVMe reads land in the slots themselves where the device is host memory (CPU backend)
    const int copies = cfg->params_tier == TIER_HOST || !p->lay.device_is_host;
    for (int u = 0; u < n; u++) {
        if (!miss[u]) continue;
        at[nf] = u;
        fetch[nf++] = uses[u];
        if (copies) work_at(k, u / per, u % per >= nfwd, W_H2D, piece_numel(&p->lay, m, uses[u]) * pbytes);
    }
    p->param_fetches = (uint64_t)nf;
    if (cfg->params_tier == TIER_NVME) {
        memcpy(fetch + nf, fetch, (size_t)nf * sizeof *fetch); // two steps: count the second
        char *cmiss = malloc((size_t)nf * 2);
        if (cmiss) {
            replay(fetch, 2 * nf, nhcache, 1, nf, cmiss);
            for (int j = nf; j < 2 * nf; j++)
                if (cmiss[j]) {
                    const int u = at[j - nf];
                    const double bytes = piece_numel(&p->lay, m, fetch[j]) * pbytes;
                    if (k->update == UPD_AFTER && u < nfwd && first_use(uses, fetch[j]) == u) {
                        p->nvme_handed_bytes += (uint64_t)bytes; // by its update (above)
                        continue;
                    }
                    work_at(k, u / per, u % per >= nfwd, W_NVME_READ, bytes);
                }
            free(cmiss);
        }
    }
    free(uses); free(fetch); free(at); free(miss);
}

// ---------------------------------------------------------------- plan

// need and the budget it is over, as sizes; in bytes where the two would print alike ("5.0 MiB,
// over --host-budget 5.0 MiB" for 5246976 against 5242880).
static void need_over(char *a, char *b, size_t len, uint64_t need, uint64_t have) {
    format_bytes(a, len, need);
    format_bytes(b, len, have);
    if (strcmp(a, b) != 0) return;
    snprintf(a, len, "%llu bytes", (unsigned long long)need);
    snprintf(b, len, "%llu bytes", (unsigned long long)have);
}

// Free bytes over the --nvme-path directories, each filesystem counted once.
uint64_t plan_nvme_free(const config_t *cfg) {
    const char *fake = getenv("TT_NVME_FREE");
    uint64_t fake_free = 0;
    if (fake && *fake && parse_size(fake, &fake_free) == 0) return fake_free;
    char list[TT_PATH_MAX];
    const char *t = getenv("TMPDIR");
    snprintf(list, sizeof list, "%s", cfg->nvme_path[0] ? cfg->nvme_path : t && *t ? t : "/tmp");
    dev_t seen[64];
    int nseen = 0;
    uint64_t total = 0;
    for (char *save = NULL, *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        struct stat st;
        struct statvfs v;
        char *pr = strstr(d, "%r"); // a rank's folder (made by train): the folder above it says
        if (pr) {
            *pr = 0;
            char *slash = strrchr(d, '/');
            if (slash && slash != d) *slash = 0;
            else if (slash) slash[1] = 0;
            else d = ".";
        }
        if (stat(d, &st) != 0 || statvfs(d, &v) != 0) continue;
        int dup = 0;
        for (int i = 0; i < nseen; i++) dup |= seen[i] == st.st_dev;
        if (dup || nseen == 64) continue;
        seen[nseen++] = st.st_dev;
        total += (uint64_t)v.f_bavail * v.f_frsize;
    }
    return total;
}


// The filesystem of path, or of its nearest existing parent (--save may not exist yet):
// st_dev into *dev and free bytes into *free. 0, or -1 when none can be found.
static int fs_of(const char *path, dev_t *dev, uint64_t *free) {
    char p[TT_PATH_MAX];
    snprintf(p, sizeof p, "%s", path[0] ? path : ".");
    struct stat st;
    struct statvfs v;
    while (stat(p, &st) != 0 || statvfs(p, &v) != 0) { // up one level: "a/b" → "a" → "."; "/a" → "/"
        char *slash = strrchr(p, '/');
        if (!strcmp(p, ".") || !strcmp(p, "/")) return -1;
        if (!slash) snprintf(p, sizeof p, ".");
        else slash[slash == p] = 0;
    }
    *dev = st.st_dev;
    *free = (uint64_t)v.f_bavail * v.f_frsize;
    return 0;
}

// Whether one of the --nvme-path directories lives on filesystem dev.
static int nvme_shares(const config_t *cfg, dev_t dev) {
    char list[TT_PATH_MAX];
    const char *t = getenv("TMPDIR");
    snprintf(list, sizeof list, "%s", cfg->nvme_path[0] ? cfg->nvme_path : t && *t ? t : "/tmp");
    for (char *save = NULL, *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        struct stat st;
        if (stat(d, &st) == 0 && st.st_dev == dev) return 1;
    }
    return 0;
}

void plan_save_space(const config_t *cfg, const model_t *m, int first_step, plan_t *p) {
    p->save_bytes = p->save_need = p->save_free = 0;
    p->save_count = 0;
    if (!cfg->save_dir[0] || first_step > cfg->steps) return;
    // the saves still to come: every --save-every steps, and at the end
    const int every = cfg->save_every, K = cfg->keep_last;
    int S = 1;
    if (every > 0) S += cfg->steps / every - (first_step - 1) / every - (cfg->steps % every == 0);
    p->save_bytes = checkpoint_bytes(m, cfg->save_bf16);
    p->save_count = K > 0 && S > K + 1 ? K + 1 : S;
    uint64_t need = (uint64_t)p->save_count * p->save_bytes;
    // With --keep-last K, save j writes while this run's newest min(j - 1, K) and the newest
    // K - (j - 1) checkpoints already there are kept: the others were pruned by then. The
    // fullest of those moments counts (it stops changing once j passes K + 1 + E).
    if (K > 0) {
        static uint64_t sizes[4096]; // plan runs on one thread
        int E = checkpoint_existing(cfg->save_dir, sizes, 4096);
        need = 0;
        for (int j = 1; j <= S && j <= K + E + 2; j++) {
            int fresh = j - 1 < K ? j : K + 1, kept = K - (j - 1) < 0 ? 0 : K - (j - 1);
            uint64_t freed = 0;
            for (int i = 0; i < E - kept; i++) freed += sizes[i];
            uint64_t at = (uint64_t)fresh * p->save_bytes;
            at = at > freed ? at - freed : 0;
            if (at > need) need = at;
        }
    }
    p->save_need = need;
    dev_t dev = 0;
    uint64_t fs_free = 0;
    const char *fake = getenv("TT_SAVE_FREE");
    if (fake && *fake) {
        if (parse_size(fake, &fs_free) != 0) fs_free = 0;
    } else if (fs_of(cfg->save_dir, &dev, &fs_free) != 0) {
        return; // nothing to measure against: the save itself will say
    }
    if (!(fake && *fake) && p->nvme_bytes && nvme_shares(cfg, dev)) // the NVMe states are allocated first
        fs_free = fs_free > p->nvme_bytes ? fs_free - p->nvme_bytes : 0;
    p->save_free = fs_free;
    if (p->feasible && need > fs_free) {
        char a[32], b[32], c[32];
        p->feasible = 0;
        snprintf(p->reason, sizeof p->reason, "--save %.150s: the checkpoints need %s (%d of %s at the fullest), %s "
                 "free there (free space, give --save another filesystem, lower --keep-last, or --save-dtype bf16)",
                 cfg->save_dir, format_bytes(b, sizeof b, need), p->save_count, format_bytes(a, sizeof a, p->save_bytes),
                 format_bytes(c, sizeof c, fs_free));
    }
}

// Elements of every shard this rank's homes hold: its piece of each (the model on one rank).
static double local_numel(const tier_layout_t *lay, const model_t *m) {
    double total = 0;
    for (int s = 0; s < m->nshards; s++) {
        size_t lo, n;
        tier_piece(lay, m, s, &lo, &n);
        total += (double)n;
    }
    return total;
}

// Elements of this rank's first nostage optimizer chunks, whose reads optim_run_host queues
// ahead: what an --optimizer-cache of as many chunks would hold.
static double read_ahead(const tier_layout_t *lay, const model_t *m) {
    tier_layout_t first = *lay;
    first.nocache = lay->nostage;
    return (double)tier_cached_elems(&first, m);
}

// Bytes each link moves per step (what the tier's counters measure), each in its phase: with
// ranks, of this rank's pieces.
static void plan_traffic(const config_t *cfg, const model_t *m, plan_t *p, work_t *k) {
    const tier_layout_t *lay = &p->lay;
    const double P = local_numel(lay, m), N = (double)cfg->B * cfg->T, C = m->C;
    const double Pp = P * (double)lay->pbytes, G = P * 4, emb4 = (double)model_embed_numel(m) * 4;
    const double ck = N * C * (lay->pbytes == 2 ? 2 : 4); // one checkpoint's bytes (BF16 in bf16 mode)
    const int vertical = lay->vertical, last = k->passes - 1;
    if (cfg->params_tier != TIER_DEVICE || lay->ranks > 1) stream_traffic(cfg, m, p, k);
    // the optimizer's new weights travel to their home: built on the host for a device home,
    // on the device for a host or NVMe home when the optimizer runs there
    if (cfg->optim_tier == TIER_DEVICE) {
        if (cfg->params_tier != TIER_DEVICE) work_update(k, W_D2H, Pp);
        if (cfg->grads_tier == TIER_HOST) work_update(k, W_H2D, G); // gradients to the update
    } else if (cfg->params_tier == TIER_DEVICE && !lay->device_is_host) { // the CPU backend builds it in place
        work_update(k, W_H2D, Pp);
    }
    if (cfg->params_tier == TIER_NVME) work_update(k, W_NVME_WRITE, Pp);
    // Each shard's gradient visits the device once per pass, in its backward; the tied
    // embedding once more, after the last pass's (step.c), so in that backward here.
    if (cfg->grads_tier == TIER_HOST) { // every visit writes the home; a step's first starts from
        // zeros (the update consumed the home), every later one reads it: the passes after the
        // first, and the tied embedding's visit after the last
        work_spread(k, 1, W_D2H, k->passes * G);
        work_spread(k, 1, W_H2D, (k->passes - 1) * G);
        if (m->tie) {
            work_at(k, last, 1, W_D2H, emb4);
            work_at(k, last, 1, W_H2D, emb4);
        }
    }
    if (cfg->grads_tier == TIER_NVME) {
        // --update backward: a final visit hands its gradient to the update, so a pass's visit
        // writes its partial sum unless it is the last pass, and reads the earlier one back
        // unless it is the first; the tied embedding's last pass writes (its visit after is
        // final) and that visit reads. --update after: every visit writes (the final one for the
        // update, which reads it back) and every visit after a shard's first reads.
        const int hand = lay->upd_bwd;
        for (int i = 0; i < k->passes; i++) {
            if (!hand || i < last) work_at(k, i, 1, W_NVME_WRITE, G);
            if (i > 0) work_at(k, i, 1, W_NVME_READ, G);
            if (!hand && !lay->device_is_host) {
                work_at(k, i, 1, W_D2H, G);
                if (i > 0) work_at(k, i, 1, W_H2D, G);
            }
        }
        if (m->tie) {
            work_at(k, last, 1, W_NVME_WRITE, emb4);
            work_at(k, last, 1, W_NVME_READ, emb4);
            if (!hand && !lay->device_is_host) {
                work_at(k, last, 1, W_D2H, emb4);
                work_at(k, last, 1, W_H2D, emb4);
            }
        }
        if (!hand) work_update(k, W_NVME_READ, G); // the optimizer's read of each final gradient
    }
    // --checkpoints host: each checkpoint written once in its forward (BF16 in bf16 mode) and
    // read back about once in its backward; vertical reads each once more in the forward (a
    // block runs every micro-batch before the next block reads the first one's output back,
    // which the two visit buffers no longer hold)
    if (cfg->acts_tier == ACTS_HOST) {
        work_spread(k, 0, W_D2H, cfg->accum * (m->L + 1) * ck);
        work_spread(k, 1, W_H2D, cfg->accum * m->L * ck);
        if (vertical) work_spread(k, 0, W_H2D, cfg->accum * m->L * ck);
    }
    if (cfg->optim_tier == TIER_NVME) { // the --optimizer-cache's chunks live in RAM after the first update
        const double uncached = P - (double)tier_cached_elems(lay, m);
        // an update after the backward queues the next one's first reads as it ends
        // (optim_run_host: no cache, the gradients in a home): they run in the backward
        const double ahead = k->update == UPD_AFTER && !lay->nocache && lay->o32_parts == 3 ? read_ahead(lay, m) : 0;
        work_update(k, W_NVME_READ, (uncached - ahead) * 12);
        work_at(k, 0, 1, W_NVME_READ, ahead * 12);
        work_update(k, W_NVME_WRITE, uncached * 12);
    }
}

// The compute's three parts' times for work w at prof's rates (PLAN_CPART_*): a profile
// written before attention and the elementwise ops were measured counts attention at the
// matmuls' rate and the elementwise ops as nothing, as the plan used to.
static void compute_parts_ms(const double w[W_N], const profile_t *prof, double part[PLAN_NCPARTS]) {
    part[PLAN_CPART_MATMUL] = 1e3 * w[W_FLOPS] / prof->gemm_flops;
    part[PLAN_CPART_ATTENTION] = 1e3 * w[W_ATT] / (prof->attn_flops > 0 ? prof->attn_flops : prof->gemm_flops);
    part[PLAN_CPART_ELEM] = prof->elem_Bps > 0 ? 1e3 * w[W_ELEM] / prof->elem_Bps : 0;
}

// Each resource's time for work w (W_*) at prof's rates.
static void work_ms(const double w[W_N], const profile_t *prof, double ms[PLAN_NRES]) {
    double part[PLAN_NCPARTS];
    compute_parts_ms(w, prof, part);
    ms[PLAN_COMPUTE] = part[PLAN_CPART_MATMUL] + part[PLAN_CPART_ATTENTION] + part[PLAN_CPART_ELEM];
    ms[PLAN_H2D] = 1e3 * w[W_H2D] / prof->h2d_Bps;
    ms[PLAN_D2H] = 1e3 * w[W_D2H] / prof->d2h_Bps;
    ms[PLAN_NVME] = 1e3 * (w[W_NVME_READ] / prof->nvme_read_Bps + w[W_NVME_WRITE] / prof->nvme_write_Bps); // one device
    ms[PLAN_ADAM] = 1e3 * w[W_ADAM] / prof->adam_params_per_s;
    // ranks: what each rank sends in the folds and gathers, over the link bench calibrate measured
    ms[PLAN_COMM] = 1e3 * w[W_COMM] / (prof->comm_Bps > 0 ? prof->comm_Bps : PLAN_COMM_DEFAULT_BPS);
}

// The MLP's residual add, in words a token's row of C reads and writes: the down projection's
// output and x2 read, the block's output written; x2 as halves with att16 (tier.h).
static double mlp_add_words(int att16) { return att16 ? 2.5 : 3.0; }

double plan_block_elem_words(int C, int KVD, int F, int bwd, int act16, int att16) {
    // forward: RMSNorm ×2 (read x, write the norm: 2C each), RoPE on q and k (2C + 2KVD),
    // the residual adds (read both, write the sum: 3C ×2), SwiGLU (read gate and up, write h:
    // 3F); backward: RMSNorm ×2 (read the gradient and x, write the input gradient and add
    // to it: 4C each), RoPE on dq and dk (2C + 2KVD), SwiGLU (read dh, gate and up, write
    // dgate and dup: 5F). With act16's BF16 halves (tier.h) the forward norms write half words
    // (1.5C each) and SwiGLU's are all half words; with att16's, RoPE's too, and x2 is halves:
    // the first add and the MLP's norm are one pass (read the projection's halves and x, write
    // x2 and ln2 as halves: 2.5C instead of 3C + 1.5C), the second add reads x2's halves and so
    // does the MLP's norm backward (3.5C instead of 4C).
    const double sw = act16 ? 0.5 : 1.0, rope = att16 ? 0.5 : 1.0;
    const double norms_adds = att16 ? 1.5 + 2.5 : act16 ? 3.0 + 3.0 : 4.0 + 3.0;
    return bwd ? (att16 ? 7.5 : 8.0) * C + 2.0 * rope * (C + KVD) + 5.0 * sw * F
               : (norms_adds + mlp_add_words(att16)) * C + 2.0 * rope * (C + KVD) + 3.0 * sw * F;
}

// Each resource's time over the step and in each phase; a phase lasts its largest, and the
// floor is the two phases' sum. A resource's whole-step time alone would be the floor only if
// all of a step's work could overlap: the backward cannot start before the forward the update
// paces ends, so the update's NVMe time and the backward's compute add up, not overlap. On the
// CPU backend AdamW beside a forward or backward takes the compute's cores.
static void plan_floor(const profile_t *prof, int fp32, const work_t *k, plan_t *p) {
    profile_t rates; // the profile's, with fp32 mode's matmul rate where it was measured
    if (prof) rates = *prof;
    else { profile_defaults(&rates); p->prof = NULL; }
    if (fp32 && rates.gemm_fp32_flops > 0) rates.gemm_flops = rates.gemm_fp32_flops;
    prof = &rates;
    const double total[W_N] = {
        [W_FLOPS] = work_total(k, W_FLOPS), [W_ATT] = work_total(k, W_ATT), [W_ELEM] = work_total(k, W_ELEM),
        [W_H2D] = (double)p->h2d_bytes, [W_D2H] = (double)p->d2h_bytes, [W_NVME_READ] = (double)p->nvme_read_bytes,
        [W_NVME_WRITE] = (double)p->nvme_write_bytes, [W_ADAM] = work_total(k, W_ADAM), [W_COMM] = (double)p->comm_bytes};
    work_ms(total, prof, p->t_ms);
    compute_parts_ms(total, prof, p->compute_ms);
    p->floor_ms = 0;
    // the CPU backend's AdamW beside a forward or backward runs on the step's cores: in its
    // phase it adds to the compute
    const int shared = p->lay.device_is_host && k->update != UPD_DEVICE;
    for (int ph = 0; ph < PLAN_NPHASES; ph++) {
        work_ms(k->w[ph], prof, p->phase_ms[ph]);
        p->phase_floor_ms[ph] = 0;
        p->phase_bound[ph] = PLAN_COMPUTE;
        p->phase_adam_shared[ph] = shared && p->phase_ms[ph][PLAN_ADAM] > 0;
        for (int r = 0; r < PLAN_NRES; r++) {
            const double ms = p->phase_ms[ph][r] + (shared && r == PLAN_COMPUTE ? p->phase_ms[ph][PLAN_ADAM] : 0);
            if (ms > p->phase_floor_ms[ph]) {
                p->phase_floor_ms[ph] = ms;
                p->phase_bound[ph] = r;
            }
        }
        p->floor_ms += p->phase_floor_ms[ph];
    }
    const int longer = p->phase_floor_ms[PLAN_PHASE_REST] > p->phase_floor_ms[PLAN_PHASE_UPDATE];
    p->bound = p->phase_bound[longer ? PLAN_PHASE_REST : PLAN_PHASE_UPDATE];
}

int plan_nvme_scale_note(const plan_t *p, char *buf, size_t len) {
    buf[0] = 0;
    const uint64_t cal = p->prof ? p->prof->nvme_bytes : 0;
    if (!cal || !p->nvme_bytes || p->nvme_bytes <= (uint64_t)PLAN_NVME_SCALE * cal) return 0;
    char a[32], b[32];
    snprintf(buf, len, "the profile measured NVMe over %s and this run keeps %s there; a disk can be slower at that "
             "size (a virtual disk's cache holds a few GiB), so the floor's NVMe time may be short: tiertrain bench calibrate "
             "--size %lluG measures it there", format_bytes(a, sizeof a, cal), format_bytes(b, sizeof b, p->nvme_bytes),
             (unsigned long long)((p->nvme_bytes + (1ull << 30) - 1) >> 30));
    return 1;
}

// What would still move states out of RAM in this placement, as "--flag, " items.
static void ram_fixes(const config_t *cfg, const plan_t *p, char *fix, size_t len) {
    fix[0] = 0;
    if (cfg->optim_tier != TIER_NVME) strcat(fix, "--optimizer nvme, ");
    if (cfg->params_tier != TIER_NVME) strcat(fix, "--params nvme, ");
    if (cfg->grads_tier == TIER_HOST) {
        char g[32];
        snprintf(fix + strlen(fix), len - strlen(fix), "--grads nvme (the FP32 gradients: %s), ",
                 format_bytes(g, sizeof g, p->grads_bytes));
    }
    if (cfg->acts_tier == ACTS_HOST && p->lay.vertical) strcat(fix, "--schedule horizontal, ");
    if (p->lay.nhcache) strcat(fix, "a smaller --host-cache, ");
    if (p->lay.nocache) strcat(fix, "a smaller --optimizer-cache, ");
}

// The moves that would take device bytes off the device, of those not made already.
static void device_fixes(const config_t *cfg, char *fix, size_t len) {
    snprintf(fix, len, "%s%s%s%s", cfg->params_tier == TIER_DEVICE ? "--params host|nvme, " : "",
             cfg->grads_tier == TIER_DEVICE ? "--grads host|nvme, " : "",
             cfg->acts_tier != ACTS_HOST ? "--checkpoints host, " : "", cfg->kept_blocks > 0 ? "--recompute full, " : "");
}

// Does it fit the budgets, RAM and NVMe free space? Else the reason and what would fix it.
// RAM and NVMe are the node's: its ranks (local_ranks, 1 alone) count together.
static void plan_check(const config_t *cfg, plan_t *p) {
    char a[32], b[32], c[32], d[32], e[32], fix[320], node_ram[96] = "", node_nvme[96] = "", kern[64] = "";
    p->feasible = 1;
    if (p->kernels_bytes)
        snprintf(kern, sizeof kern, " + kernels %s", format_bytes(e, sizeof e, p->kernels_bytes));
    ram_fixes(cfg, p, fix, sizeof fix);
    const uint64_t nodes = p->local_ranks > 1 ? (uint64_t)p->local_ranks : 1;
    const char *more = nodes > 1 ? "fewer ranks per node, " : "";
    if (nodes > 1) {
        char t[32];
        snprintf(node_ram, sizeof node_ram, " on each of this node's %d ranks, %s in all", p->local_ranks,
                 format_bytes(t, sizeof t, p->ram_needed * nodes));
        snprintf(node_nvme, sizeof node_nvme, " on each of this node's %d ranks, %s in all", p->local_ranks,
                 format_bytes(t, sizeof t, p->nvme_bytes * nodes));
    }
    if (cfg->hbm_budget && p->device_bytes > cfg->hbm_budget) {
        p->feasible = 0;
        char moves[96];
        device_fixes(cfg, moves, sizeof moves);
        need_over(a, b, sizeof a, p->device_bytes, cfg->hbm_budget);
        snprintf(p->reason, sizeof p->reason, "device states need %s, over --hbm-budget %s (raise --hbm-budget, %s"
                 "or lower --batch or --seq)", a, b, moves);
    } else if (cfg->host_budget && p->host_bytes > cfg->host_budget) {
        p->feasible = 0;
        need_over(a, b, sizeof a, p->host_bytes, cfg->host_budget);
        snprintf(p->reason, sizeof p->reason, "host states need %s, over --host-budget %s (raise --host-budget, %s"
                 "or a smaller --model, --batch or --seq)", a, b, fix);
    } else if (p->mem_available && p->ram_needed * nodes > p->mem_available) {
        p->feasible = 0;
        if (cfg->device == DEVICE_CUDA)
            snprintf(p->reason, sizeof p->reason, "needs %s of RAM (host states and staging)%s, %s available (%s%sa "
                     "smaller --model, --batch or --seq)",
                     format_bytes(a, sizeof a, p->ram_needed), node_ram, format_bytes(d, sizeof d, p->mem_available),
                     more, fix);
        else
            snprintf(p->reason, sizeof p->reason, "needs %s of RAM (device arena %s + host %s%s)%s, %s available (%s%sa "
                     "smaller --model, --batch or --seq)",
                     format_bytes(a, sizeof a, p->ram_needed), format_bytes(b, sizeof b, p->device_bytes),
                     format_bytes(c, sizeof c, p->host_bytes), kern, node_ram,
                     format_bytes(d, sizeof d, p->mem_available), more, fix);
    } else if (p->nvme_bytes && p->nvme_bytes * nodes > p->nvme_free) {
        p->feasible = 0;
        snprintf(p->reason, sizeof p->reason, "NVMe states need %s%s, %s free under --nvme-path %.200s (%sfree space, or "
                 "add directories on other disks to --nvme-path, or keep more states in RAM)",
                 format_bytes(a, sizeof a, p->nvme_bytes), node_nvme, format_bytes(b, sizeof b, p->nvme_free),
                 cfg->nvme_path[0] ? cfg->nvme_path : "(default: $TMPDIR or /tmp)", more);
    }
}

void plan_compute(const config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p) {
    memset(p, 0, sizeof *p);
    p->prof = prof;
    // What each tier holds: the very buffers trainer_init allocates (tier_layout).
    tier_layout(cfg, m, cfg->device == DEVICE_CUDA ? DEVICE_CUDA : DEVICE_CPU, &p->lay);
    const tier_layout_t *lay = &p->lay;
    const double P = local_numel(lay, m), N = (double)cfg->B * cfg->T, C = m->C; // ranks: this rank's pieces
    p->params_bytes = (uint64_t)(P * (double)lay->pbytes);
    p->grads_bytes = (uint64_t)(P * 4);
    p->grads_nvme_bytes = 0; // --update backward with --grads nvme: only the extents tier_layout gives
    for (int s = 0; s < lay->gext_shards; s++) p->grads_nvme_bytes += (uint64_t)piece_numel(lay, m, s) * sizeof(float);
    p->optim_bytes = (uint64_t)(P * 12);
    p->acts_bytes = tier_part_bytes(lay, TIER_DEVICE, "activations") + tier_part_bytes(lay, TIER_DEVICE, "checkpoints") +
                    tier_part_bytes(lay, TIER_DEVICE, "scratch");
    p->backend_bytes = cfg->device == DEVICE_CUDA ? backend_cuda_overhead(cfg) : 0; // cuBLASLt workspace, kernel scratch
    p->device_bytes = lay->device_bytes + p->backend_bytes;
    p->host_bytes = lay->host_bytes;
    p->nvme_bytes = lay->nvme_bytes;
    // the CPU backend's arena is RAM too, and so are its kernels' own buffers; a GPU's are not
    if (cfg->device != DEVICE_CUDA) {
        p->kernels_threads = backend_host_threads(cfg);
        p->kernels_bytes = attention_workspace_bytes(cfg->B, cfg->T, m->NH, m->NKV, m->HS, lay->att16,
                                                     cfg->cpu_gemm == CPU_GEMM_AUTO, p->kernels_threads);
    }
    p->ram_needed = cfg->device == DEVICE_CUDA ? p->host_bytes : p->device_bytes + p->host_bytes + p->kernels_bytes;
    p->mem_available = hostmem_mem_available();
    p->nvme_free = p->nvme_bytes ? plan_nvme_free(cfg) : 0;
    // 2 FLOPs per multiply-add: forward 2·P·N, backward 4·P·N, and the recompute: a block that
    // does not keep its intermediates computes its attention half and its MLP's gate and up
    // again (not the down projection: the block's output is not needed), and when the MLP is
    // chunked (model_mlp_rows) a kept block computes gate and up again too. Attention (causal:
    // half the T×T products) 4·N·T·C per pass: forward, recompute (the share r of blocks that
    // recompute), backward ×2. The head's backward computes the logits again, but for each
    // pass's last vocabulary quantum of its first micro-batch (step.c), or every quantum of it
    // when the logits are kept.
    const int kept = cfg->kept_blocks < m->L ? cfg->kept_blocks : m->L;
    const double r = (double)(m->L - kept) / m->L;
    const int passes = lay->vertical ? 1 : cfg->accum;
    work_t k = {.update = cfg->optim_tier == TIER_DEVICE || lay->upd_inline ? UPD_DEVICE
                          : lay->upd_bwd                                 ? UPD_BACKWARD
                                                                         : UPD_AFTER,
                .passes = passes};
    const int vlast = cfg->logits_kept ? m->V : model_quantum_cols(m, CEIL_DIV(m->V, CE_QUANTUM) - 1);
    const double KVD = (double)m->NKV * m->HS, Pattn = 2.0 * C * C + 2.0 * C * KVD, Pgu = 2.0 * C * m->F;
    const double redo = (m->L - kept) * (Pattn + Pgu) + (model_mlp_chunks(m, (int)N) > 1 ? kept * Pgu : 0.0);
    double mm = 6.0 * (double)m->num_params * N * cfg->accum + 2.0 * redo * N * cfg->accum +
                2.0 * N * C * ((double)cfg->accum * m->V - (double)passes * vlast);
    double att = 4.0 * (3.0 + r) * N * cfg->T * C / 2.0 * m->L * cfg->accum;
    p->flops_per_step = mm + att;
    // the forward's share: 2·P·N and attention's first pass, the rest the backward's; every pass
    // does alike (each pass's backward computes the head's logits again but for the same quantum)
    const double fwd = 2.0 * (double)m->num_params * N * cfg->accum + 4.0 * N * cfg->T * C / 2.0 * m->L * cfg->accum;
    const double att_fwd = 4.0 * N * cfg->T * C / 2.0 * m->L * cfg->accum;
    work_spread(&k, 0, W_FLOPS, fwd - att_fwd);
    work_spread(&k, 1, W_FLOPS, mm - (fwd - att_fwd));
    work_spread(&k, 0, W_ATT, att_fwd);
    work_spread(&k, 1, W_ATT, att - att_fwd);
    // the elementwise ops, in FP32 words a token reads and writes: each block's
    // (plan_block_elem_words), the recompute's forward ops again (the attention half's, and
    // SwiGLU where gate and up are computed again), and the head's: the final RMSNorm (2C
    // forward, 4C backward), the embedding's gather and scatter (2C each), cross-entropy's
    // fold over the logits (V) and its backward (2V)
    const double wf = plan_block_elem_words(m->C, (int)KVD, m->F, 0, lay->act16, lay->att16),
                 wb = plan_block_elem_words(m->C, (int)KVD, m->F, 1, lay->act16, lay->att16),
                 wsw = (lay->act16 ? 1.5 : 3.0) * m->F;
    const int swiglu_again = m->L - kept + (model_mlp_chunks(m, (int)N) > 1 ? kept : 0); // as `redo` above
    const double wredo = (m->L - kept) * (wf - wsw - mlp_add_words(lay->att16) * C) + swiglu_again * wsw;
    const double tokens = N * cfg->accum;
    work_spread(&k, 0, W_ELEM, 4.0 * tokens * (m->L * wf + 4.0 * C + m->V));
    work_spread(&k, 1, W_ELEM, 4.0 * tokens * (m->L * wb + wredo + 6.0 * C + 2.0 * m->V));
    // and the passes outside the blocks' ops that every step makes (bytes): with BF16
    // checkpoints (acts.h), each act converted into the store as it is committed (L + 1 a
    // micro-batch: FP32 read, BF16 written, 6 bytes an element) and back in the backward, where
    // each block's input norm reads it (a block that recomputes reads it once more, first); and
    // Σ g² of every final gradient for the norm the clip and the log take (4 bytes a parameter
    // of this rank's, once a step). The forward's own reads of an act it just wrote convert
    // nothing (the FP32 copy holds it); other schedules may convert more: not counted.
    const double conv = lay->pbytes == 2 ? 6.0 * tokens * C : 0.0;
    work_spread(&k, 0, W_ELEM, conv * (m->L + 1));
    work_spread(&k, 1, W_ELEM, conv * (2.0 * m->L - kept) + 4.0 * P);
    p->elem_bytes = work_total(&k, W_ELEM);
    // ranks: each micro-batch's fold sends (N−1)/N of every shard's gradients in the all-to-all
    // (the tied head's share once more, and gathered) in its backward, and every use of a shard
    // gathers the (N−1)/N of its compute copy held elsewhere (a forward and a backward per pass)
    p->ranks = cfg->ranks > 1 ? cfg->ranks : 1;
    p->local_ranks = cfg->local_ranks > 0 ? cfg->local_ranks : p->ranks;
    if (p->ranks > 1) {
        const double whole = (double)m->numel_padded, share = (double)(p->ranks - 1) / p->ranks;
        const double fold = whole + (m->tie ? 2.0 * (double)model_embed_numel(m) : 0.0);
        const double gather = share * passes * whole * (double)lay->pbytes;
        work_spread(&k, 1, W_COMM, share * fold * 4.0 * cfg->accum);
        work_spread(&k, 0, W_COMM, gather);
        work_spread(&k, 1, W_COMM, gather);
    }
    // AdamW on a GPU (--optimizer device) streams 28 bytes per parameter through HBM: a
    // fraction of a step, not modeled; on the CPU backend it runs at the measured host rate.
    work_update(&k, W_ADAM, cfg->optim_tier == TIER_DEVICE && cfg->device == DEVICE_CUDA ? 0 : P);
    plan_traffic(cfg, m, p, &k);
    p->h2d_bytes = (uint64_t)work_total(&k, W_H2D);
    p->d2h_bytes = (uint64_t)work_total(&k, W_D2H);
    p->nvme_read_bytes = (uint64_t)work_total(&k, W_NVME_READ);
    p->nvme_write_bytes = (uint64_t)work_total(&k, W_NVME_WRITE);
    p->comm_bytes = (uint64_t)work_total(&k, W_COMM);
    // what each phase runs, for plan_print and plan_json (several passes: horizontal --accum)
    static const char *const names[3][2][PLAN_NPHASES] = {
        [UPD_AFTER] = {{"update+forward", "backward"}, {"update+first forward", "backwards+other forwards"}},
        [UPD_BACKWARD] = {{"update+backward", "forward"}, {"update+last backward", "forwards+other backwards"}},
        [UPD_DEVICE] = {{"update", "forward+backward"}, {"update", "forwards+backwards"}},
    };
    for (int ph = 0; ph < PLAN_NPHASES; ph++) p->phase_names[ph] = names[k.update][passes > 1][ph];
    plan_floor(prof, cfg->precision == PREC_FP32, &k, p);
    plan_check(cfg, p);
    plan_save_space(cfg, m, 1, p);
}

const plan_placement_t plan_placements[PLAN_NPLACEMENTS] = {
    {TIER_DEVICE, TIER_DEVICE, TIER_HOST}, {TIER_HOST, TIER_DEVICE, TIER_HOST},
    {TIER_HOST, TIER_HOST, TIER_HOST},     {TIER_DEVICE, TIER_DEVICE, TIER_NVME},
    {TIER_HOST, TIER_DEVICE, TIER_NVME},   {TIER_HOST, TIER_HOST, TIER_NVME},
    {TIER_NVME, TIER_DEVICE, TIER_NVME},   {TIER_NVME, TIER_HOST, TIER_NVME},
    // gradients off RAM too: NVMe then holds everything but staging and activations
    {TIER_DEVICE, TIER_NVME, TIER_NVME},   {TIER_HOST, TIER_NVME, TIER_NVME},
    {TIER_NVME, TIER_NVME, TIER_NVME},
};

// Fits, with room: RAM (the CPU backend's arena is RAM too) is not filled to the last 15%,
// by this node's ranks together (each plans its own share).
static int roomy(const plan_t *q) {
    const uint64_t nodes = q->local_ranks > 1 ? (uint64_t)q->local_ranks : 1;
    return q->feasible && (!q->mem_available || q->ram_needed * nodes <= q->mem_available / 20 * 17);
}

// The most blocks that keep their intermediates in [0, L] with the plan still roomy (fitting
// only gets harder with more); cfg->kept_blocks and p are left at it.
static int most_kept(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p) {
    int lo = 0, hi = m->L; // the answer lies in [lo, hi]
    cfg->kept_blocks = hi;
    plan_compute(cfg, m, prof, p);
    if (!roomy(p)) {
        while (lo < hi) {
            cfg->kept_blocks = lo + (hi - lo + 1) / 2;
            plan_compute(cfg, m, prof, p);
            if (roomy(p)) lo = cfg->kept_blocks;
            else hi = cfg->kept_blocks - 1;
        }
        cfg->kept_blocks = lo;
        plan_compute(cfg, m, prof, p);
    }
    return cfg->kept_blocks;
}

int plan_recompute_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len) {
    why[0] = 0;
    if (!cfg->recompute_auto) return 0;
    config_keep_nothing(cfg);
    plan_compute(cfg, m, prof, p);
    const double full_ms = p->floor_ms;
    // the head's logits first (a vocabulary of several quanta: the backward then computes none again)
    if (m->V > CE_QUANTUM) {
        cfg->logits_kept = 1;
        plan_compute(cfg, m, prof, p);
        if (!roomy(p)) cfg->logits_kept = 0;
    }
    int kept = most_kept(cfg, m, prof, p);
    // bf16 mode: BF16 storage (half the bytes, a conversion each way) when FP32 leaves blocks out
    // and BF16 keeps more of them; the bits are the same either way
    if (kept < m->L && cfg->precision == PREC_BF16) {
        cfg->kept_bf16 = 1;
        if (most_kept(cfg, m, prof, p) <= kept) {
            cfg->kept_bf16 = 0;
            cfg->kept_blocks = kept;
            plan_compute(cfg, m, prof, p);
        }
    }
    char a[32], b[32], lg[96] = "";
    if (cfg->logits_kept)
        snprintf(lg, sizeof lg, "; the head keeps every logit (%s)",
                 format_bytes(b, sizeof b, (uint64_t)cfg->B * cfg->T * (uint64_t)m->V * sizeof(float)));
    snprintf(why, len, "--recompute auto: %d of %d blocks keep their intermediates (%s on the device%s), %d "
             "recompute%s (predicted floor %.1f ms/step; %.1f with every block recomputing)", cfg->kept_blocks, m->L,
             format_bytes(a, sizeof a, tier_part_bytes(&p->lay, TIER_DEVICE, "kept_activations")),
             cfg->kept_bf16 ? ", as BF16" : "", m->L - cfg->kept_blocks, lg, p->floor_ms, full_ms);
    return 1;
}

// The most entries n in [0, max] of `entry` bytes each in *cache with the plan still roomy and
// the optimizer's chunk what it is without them (a cache that makes a --host-budget cut the
// chunks is too big); p is left at n's plan. More entries only take more RAM: a bisection.
static int most_cached(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, uint64_t *cache,
                       uint64_t entry, int max) {
    const size_t chunk = p->lay.chunk_elems;
    int lo = 0, hi = max; // the answer lies in [lo, hi]
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        *cache = (uint64_t)mid * entry;
        plan_compute(cfg, m, prof, p);
        if (roomy(p) && p->lay.chunk_elems == chunk) lo = mid;
        else hi = mid - 1;
    }
    *cache = (uint64_t)lo * entry;
    plan_compute(cfg, m, prof, p);
    return lo;
}

// A cache auto's start: p is the plan without the cache (*cache 0); whether there is one to
// size (its states on NVMe, and a plan with room to spare).
static int cache_auto_starts(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, uint64_t *cache,
                             tier_kind_t home) {
    *cache = 0;
    plan_compute(cfg, m, prof, p);
    return home == TIER_NVME && roomy(p);
}

int plan_host_cache_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len) {
    why[0] = 0;
    if (!cfg->host_cache_auto || !cache_auto_starts(cfg, m, prof, p, &cfg->host_cache, cfg->params_tier)) return 0;
    const double none_ms = p->floor_ms;
    const uint64_t read0 = p->nvme_read_bytes;
    const int n = most_cached(cfg, m, prof, p, &cfg->host_cache, tier_host_cache_entry_bytes(&p->lay, m), m->nshards);
    char a[32], b[32];
    snprintf(why, len, "--host-cache auto: %d of %d parameter shards stay in RAM (%s), %s less NVMe reading a step "
             "(predicted floor %.1f ms/step; %.1f without)", n, m->nshards, format_bytes(a, sizeof a, cfg->host_cache),
             format_bytes(b, sizeof b, read0 > p->nvme_read_bytes ? read0 - p->nvme_read_bytes : 0), p->floor_ms, none_ms);
    return 1;
}

int plan_optim_cache_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len) {
    why[0] = 0;
    if (!cfg->optim_cache_auto || !cache_auto_starts(cfg, m, prof, p, &cfg->optim_cache, cfg->optim_tier)) return 0;
    const double none_ms = p->floor_ms;
    const int lo = most_cached(cfg, m, prof, p, &cfg->optim_cache, tier_cache_entry_bytes(&p->lay), p->lay.nchunks);
    char a[32], b[32];
    snprintf(why, len, "--optimizer-cache auto: %d of %d optimizer chunks keep their states in RAM (%s), %s less "
             "NVMe reading and writing a step (predicted floor %.1f ms/step; %.1f without)", lo, p->lay.nchunks,
             format_bytes(a, sizeof a, cfg->optim_cache), format_bytes(b, sizeof b, tier_cached_elems(&p->lay, m) * 12),
             p->floor_ms, none_ms);
    return 1;
}

void plan_cache_autos(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, FILE *out) {
    char why[512];
    if (p->feasible && plan_optim_cache_auto(cfg, m, prof, p, why, sizeof why)) fprintf(out, "%s\n", why);
    if (p->feasible && plan_host_cache_auto(cfg, m, prof, p, why, sizeof why)) fprintf(out, "%s\n", why);
}

int plan_auto(config_t *cfg, const model_t *m, const profile_t *prof, plan_t *p, char *why, size_t len) {
    const plan_placement_t *order = plan_placements;
    const int n = PLAN_NPLACEMENTS;
    char first_reason[512] = "";
    int best = -1, nfeasible = 0;
    double best_floor = 0;
    for (int i = 0; i < n; i++) {
        cfg->params_tier = order[i].params;
        cfg->grads_tier = order[i].grads;
        cfg->optim_tier = order[i].optim;
        plan_compute(cfg, m, prof, p);
        if (i == 0) snprintf(first_reason, sizeof first_reason, "%s", p->reason);
        if (p->feasible) {
            nfeasible++;
            if (best < 0 || p->floor_ms < best_floor) { best = i; best_floor = p->floor_ms; }
        }
    }
    if (best < 0) {
        snprintf(why, len, "--offload auto: no placement fits; the most offloaded one: %s", p->reason);
        return 0;
    }
    cfg->params_tier = order[best].params;
    cfg->grads_tier = order[best].grads;
    cfg->optim_tier = order[best].optim;
    plan_compute(cfg, m, prof, p);
    int o = snprintf(why, len, "--offload auto: params %s, grads %s, optimizer %s: the lowest predicted floor "
                     "(%.1f ms/step, bound by %s) of %d placements that fit",
                     tier_kind_name(cfg->params_tier), tier_kind_name(cfg->grads_tier),
                     tier_kind_name(cfg->optim_tier), p->floor_ms,
                     plan_resource_names[p->bound], nfeasible);
    if (best > 0 && first_reason[0] && o > 0 && (size_t)o < len)
        snprintf(why + o, len - (size_t)o, "; all resident: %s", first_reason);
    return 1;
}
