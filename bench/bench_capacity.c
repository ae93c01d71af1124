// bench_capacity.c — `tiertrain bench capacity`: the largest realistic model whose states this
// machine's tiers hold by the plan, then two real steps of it. The states go where they are
// cheapest to hold: parameters, gradients and optimizer states on NVMe (--nvme-path), so RAM
// holds only staging and activations; activations on the device. Limits: the device arena
// (--hbm-budget), the host (--host-budget, and 90% of MemAvailable), the NVMe paths' free
// space (95%). Widths come from the presets (70b down to small; sequence 64, batch 1); a
// width's depth runs from half its preset's layers to twice them (a model, not a stack of
// 3,000 thin layers), as high as the plan allows, and the largest model wins. The RAM its
// states leave free becomes --optimizer-cache auto (unless --optimizer-cache says). Then it
// trains 2 steps of it (3 with the cache: the first update fills it) and reports parameters,
// bytes per tier, the RAM it really took (the tiers' peak and the process's), states ÷ RAM,
// s/step against the floor from the calibration profile, the NVMe rates it achieved against
// the calibrated ones, and the loss. Last, it
// measures the disk over a file the store's size (the rates a store of tens of GiB really
// gets; the calibration's 4 GiB may come from a cache) and gives the floor at those rates too.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "bench.h"
#include "hostmem.h"
#include "model.h"
#include "plan.h"
#include "report.h" // uses: report_nvme_GBps
#include "train.h"  // uses: train_load_profile
#include "util.h"

enum { SPACE_WAIT_S = 120 }; // at most this long for the store's space to come back

static int fits(config_t *cfg, uint64_t host_limit, uint64_t nvme_limit, plan_t *p) {
    model_t m;
    model_init(&m, cfg);
    plan_compute(cfg, &m, NULL, p);
    model_free(&m);
    return p->feasible && p->ram_needed <= host_limit && p->nvme_bytes <= nvme_limit;
}

// The deepest L in [lo, hi] that fits (lo fits), by bisection.
static int deepest(config_t *c, int lo, int hi, uint64_t host_limit, uint64_t nvme_limit, plan_t *p) {
    while (lo < hi) {
        c->L = lo + (hi - lo + 1) / 2;
        if (fits(c, host_limit, nvme_limit, p)) lo = c->L;
        else hi = c->L - 1;
    }
    c->L = lo;
    fits(c, host_limit, nvme_limit, p);
    return lo;
}

int bench_capacity(const config_t *cfg_in) {
    static const char *widths[] = {"70b", "30b", "13b", "7b", "3b", "1b", "350m", "125m", "small"};
    config_t cfg = *cfg_in;
    cfg.command = CMD_TRAIN;
    cfg.params_tier = TIER_NVME;
    cfg.grads_tier = TIER_NVME;
    cfg.optim_tier = TIER_NVME;
    cfg.acts_tier = ACTS_DEVICE;
    cfg.schedule = SCHEDULE_HORIZONTAL;
    cfg.offload_auto = 0;
    cfg.prefetch = 1;
    cfg.host_cache = 0;
    cfg.accum = 1;
    cfg.B = 1;
    cfg.eval_every = 0;
    cfg.steps = 2;
    uint64_t avail = hostmem_mem_available(), ram = avail;
    uint64_t host_limit = avail / 10 * 9;
    if (cfg.host_budget && cfg.host_budget < host_limit) host_limit = cfg.host_budget;
    uint64_t nvme_limit = plan_nvme_free(&cfg) / 20 * 19;
    char a[32], b[32], c[32], d[32]; // (one buffer each: the arguments are all formatted before printf runs)
    printf("limits: device %s, host %s (MemAvailable %s), nvme %s free\n",
           cfg.hbm_budget ? format_bytes(a, sizeof a, cfg.hbm_budget) : "none (the host limit)",
           format_bytes(b, sizeof b, host_limit), format_bytes(c, sizeof c, avail),
           format_bytes(d, sizeof d, nvme_limit));
    printf("placement: params, grads and optimizer nvme, checkpoints device; batch 1 x seq 64; depth from half to "
           "twice the preset's\n\n");
    printf("%-8s %8s %14s %12s %12s %12s\n", "width", "layers", "params", "states", "RAM", "nvme");
    config_t best;
    size_t best_params = 0;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        config_t c1 = cfg;
        model_preset(widths[w], &c1);
        c1.T = 64;
        const int lmin = (c1.L + 1) / 2, lmax = 2 * c1.L;
        plan_t p;
        c1.L = lmin;
        if (!fits(&c1, host_limit, nvme_limit, &p)) {
            printf("%-8s %8s  %d layers do not fit: %s\n", widths[w], "-", lmin,
                   p.feasible ? "over the host or nvme limit" : p.reason);
            continue;
        }
        int L = deepest(&c1, lmin, lmax, host_limit, nvme_limit, &p);
        model_t m;
        model_init(&m, &c1);
        size_t np = m.num_params;
        model_free(&m);
        printf("%-8s %8d %13.2fB %12s %12s %12s\n", widths[w], L, np / 1e9,
               format_bytes(a, sizeof a, p.params_bytes + p.grads_bytes + p.optim_bytes),
               format_bytes(b, sizeof b, p.ram_needed), format_bytes(c, sizeof c, p.nvme_bytes));
        if (np > best_params) { best_params = np; best = c1; }
    }
    if (!best_params) { // the limits are the flags' (or the machine's): bad input, before any work
        printf("no model fits these limits\n");
        printf("{\"bench\":\"capacity\",\"params\":0}\n");
        fflush(stdout);
        notice("bench capacity: no model fits these limits (raise --hbm-budget or --host-budget, or give --nvme-path "
               "a folder with more room)");
        return 2;
    }
    profile_t prof; // the floor from this machine's calibration (the quick one, first, when there is none)
    const profile_t *rates = train_load_profile(&best, &prof);
    model_t m;
    model_init(&m, &best);
    plan_t p;
    plan_compute(&best, &m, rates, &p);
    // the RAM the states leave free holds the first optimizer chunks (written through, never read
    // again), unless the flags said otherwise; --host-cache auto, when given, takes what they
    // leave (plan_cache_autos: why in that order)
    if (!cfg_in->optim_cache_given) best.optim_cache_auto = 1;
    printf("\n");
    plan_cache_autos(&best, &m, rates, &p, stdout);
    uint64_t states = p.params_bytes + p.grads_bytes + p.optim_bytes;
    printf("\nlargest: %s width, %d layers: %.3fB parameters, states %s = %.2f x RAM (%s available), the plan's RAM %s\n",
           best.preset, best.L, m.num_params / 1e9, format_bytes(a, sizeof a, states), (double)states / (double)ram,
           format_bytes(b, sizeof b, ram), format_bytes(c, sizeof c, p.ram_needed));
    model_free(&m);
    // the first update fills the optimizer cache and the second is the first to gain from it
    // (the first step's reads fill the parameter cache): the third step is the one timed then
    // (each step's time includes the update before it)
    const int steps = best.optim_cache || best.host_cache ? 3 : 2;
    printf("training %d steps of it (init writes the NVMe states first) ...\n", steps);
    fflush(stdout);
    bench_run_t r;
    char err[768];
    if (bench_run_steps(&best, steps, &r, err, sizeof err) != 0) {
        printf("failed: %s\n", err);
        printf("{\"bench\":\"capacity\",\"params\":%zu,\"state_bytes\":%llu,\"ram_bytes\":%llu,\"error\":\"run failed\"}\n",
               best_params, (unsigned long long)states, (unsigned long long)ram);
        return 1;
    }
    struct rusage ru;
    uint64_t rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024 : 0;
    const uint64_t tiers = r.info.device_peak + r.info.host_bytes; // the CPU backend's arena is RAM too
    printf("\n%-26s %s\n", "parameters", format_bytes(a, sizeof a, p.params_bytes));
    printf("%-26s %.3fB\n", "count", r.num_params / 1e9);
    printf("%-26s %s (peak)\n", "device arena", format_bytes(a, sizeof a, r.info.device_peak));
    printf("%-26s %s\n", "host pool", format_bytes(a, sizeof a, r.info.host_bytes));
    printf("%-26s %s (arena + pool), %s max RSS of the process\n", "RAM peak", format_bytes(a, sizeof a, tiers),
           format_bytes(b, sizeof b, rss));
    printf("%-26s %s, %.2f x RAM\n", "states", format_bytes(a, sizeof a, states), (double)states / (double)ram);
    printf("%-26s %s\n", "nvme store", format_bytes(a, sizeof a, p.nvme_bytes));
    printf("%-26s %.1f s\n", "init (first touch + writes)", r.init_ms / 1e3);
    const double step_ms = r.last_ms; // the cache's third step, else the second
    printf("%-26s %.1f s (the last step)\n", "step", step_ms / 1e3);
    printf("%-26s %s read, %s written\n", "nvme traffic", format_bytes(a, sizeof a, r.info.tier.nvme_read_bytes),
           format_bytes(b, sizeof b, r.info.tier.nvme_write_bytes));
    const double rd = report_nvme_GBps(&r.info, IO_READ), wr = report_nvme_GBps(&r.info, IO_WRITE);
    char phases[256];
    printf("%-26s %.1f s, bound by %s (rates: %s): step / floor %.2f\n", "floor", p.floor_ms / 1e3,
           plan_resource_names[p.bound], rates ? rates->source : "built-in defaults", step_ms / p.floor_ms);
    plan_phases_text(&p, 1, phases, sizeof phases);
    printf("%-26s %s\n", "  phases (their sum)", phases);
    if (rates)
        printf("%-26s %.2f GB/s reading, %.2f GB/s writing over the run (calibrated %.2f and %.2f over %s: %.2f x, "
               "%.2f x)\n", "nvme achieved", rd, wr, rates->nvme_read_Bps / 1e9, rates->nvme_write_Bps / 1e9,
               rates->nvme_bytes ? format_bytes(a, sizeof a, rates->nvme_bytes) : "a file of unrecorded size",
               rd / (rates->nvme_read_Bps / 1e9), wr / (rates->nvme_write_Bps / 1e9));
    // The disk at the run's own scale: a virtual disk reads a few GiB from its cache, which a
    // store of tens of GiB never sees. One write and one read pass over a file the store's size,
    // through the same engine, in the space the store just gave back; then the floor at those rates.
    printf("measuring the disk over %s, the store's size (one write pass, one read pass, one pass of both) ...\n",
           format_bytes(a, sizeof a, p.nvme_bytes));
    fflush(stdout);
    // The store's file was unlinked and closed, but a filesystem may take a while to return
    // tens of GiB (ext4 frees a large file's extents after the close returns): wait for it.
    for (int i = 0; i < SPACE_WAIT_S * 10 && plan_nvme_free(&best) < p.nvme_bytes + p.nvme_bytes / 50; i++)
        usleep(100 * 1000);
    double srd = 0, swr = 0, sfloor = 0, mixed[2] = {0, 0}, share = 0, busy = 0;
    if (bench_nvme_rates(&best, p.nvme_bytes, &srd, &swr, mixed, err, sizeof err) != 0) {
        printf("%-26s not measured: %s\n", "disk at this scale", err);
    } else {
        profile_t at_scale = rates ? *rates : prof; // prof holds the defaults when there is no profile
        at_scale.nvme_read_Bps = srd;
        at_scale.nvme_write_Bps = swr;
        at_scale.nvme_bytes = p.nvme_bytes;
        plan_t ps;
        model_init(&m, &best);
        plan_compute(&best, &m, &at_scale, &ps);
        model_free(&m);
        sfloor = ps.floor_ms;
        printf("%-26s %.2f GB/s reading, %.2f GB/s writing over %s (the run achieved %.2f x, %.2f x)\n",
               "disk at this scale", srd / 1e9, swr / 1e9, format_bytes(a, sizeof a, p.nvme_bytes), rd / (srd / 1e9),
               wr / (swr / 1e9));
        printf("%-26s %.1f s, bound by %s: step / floor %.2f (reads and writes share the disk: a phase's NVMe time "
               "adds their times)\n", "floor at this scale", sfloor / 1e3, plan_resource_names[ps.bound], step_ms / sfloor);
        plan_phases_text(&ps, 1, phases, sizeof phases);
        printf("%-26s %s\n", "  phases (their sum)", phases);
        // How much the disk gives when a step reads and writes at once, in seconds of the
        // passes apart per second (1: they take turns; 2: each at its own rate), and how much
        // of it the run took: the step's NVMe time at the rates apart, per second of the step.
        share = mixed[0] / srd + mixed[1] / swr;
        busy = ps.t_ms[PLAN_NVME] / step_ms;
        printf("%-26s %.2f GB/s reading and %.2f GB/s writing: %.2f x what taking turns gives (2: neither slows "
               "the other)\n", "disk, both at once", mixed[0] / 1e9, mixed[1] / 1e9, share);
        printf("%-26s %.2f of the step at the rates apart (its NVMe time / step): %.2f x what the disk gives at "
               "once\n", "disk busy", busy, busy / share);
    }
    printf("%-26s %.4f -> %.4f\n", "loss", r.first_loss, r.last_loss);
    printf("{\"bench\":\"capacity\",\"width\":\"%s\",\"layers\":%d,\"params\":%zu,\"state_bytes\":%llu,\"ram_bytes\":%llu,"
           "\"states_over_ram\":%.3f,\"ram_peak_bytes\":%llu,\"max_rss_bytes\":%llu,\"s_per_step\":%.3f,\"init_s\":%.3f,"
           "\"loss\":%.6f,\"host_bytes\":%llu,\"nvme_bytes\":%llu,\"peak_device_bytes\":%llu,\"floor_s\":%.3f,"
           "\"nvme_read_GBps\":%.3f,\"nvme_write_GBps\":%.3f,\"scale_read_GBps\":%.3f,\"scale_write_GBps\":%.3f,"
           "\"floor_at_scale_s\":%.3f,\"mixed_read_GBps\":%.3f,\"mixed_write_GBps\":%.3f,\"disk_share\":%.3f,"
           "\"disk_busy\":%.3f}\n",
           best.preset, best.L, r.num_params, (unsigned long long)states, (unsigned long long)ram,
           (double)states / (double)ram, (unsigned long long)tiers, (unsigned long long)rss, step_ms / 1e3,
           r.init_ms / 1e3, r.last_loss, (unsigned long long)r.info.host_bytes, (unsigned long long)p.nvme_bytes,
           (unsigned long long)r.info.device_peak, p.floor_ms / 1e3, rd, wr, srd / 1e9, swr / 1e9, sfloor / 1e3,
           mixed[0] / 1e9, mixed[1] / 1e9, share, busy);
    return 0;
}
