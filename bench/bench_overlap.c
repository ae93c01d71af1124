// bench_overlap.c — `tiertrain bench overlap`: how well streaming hides behind compute. One
// model (the `small` preset at --batch × its sequence length unless flags say otherwise)
// trained three ways — every state resident; parameters streamed from the host; parameters
// and optimizer states on NVMe — a few steps each. For each: the median step time, its ratio
// to the resident run, the plan's predicted floor and achieved ÷ floor. All three must end
// with the same params_hash (placement invariance); the bench fails when they do not.
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "report.h"
#include "backend.h"
#include "model.h"
#include "plan.h"
#include "train.h"
#include "util.h"

enum { OVERLAP_STEPS = 5 }; // the first is warm-up

int bench_overlap(const config_t *cfg_in) {
    static const struct { const char *name; tier_kind_t params, grads, optim; } ways[3] = {
        {"resident", TIER_DEVICE, TIER_DEVICE, TIER_HOST},
        {"params host", TIER_HOST, TIER_DEVICE, TIER_HOST},
        {"params+optimizer nvme", TIER_NVME, TIER_DEVICE, TIER_NVME},
    };
    config_t cfg = *cfg_in;
    cfg.command = CMD_TRAIN;
    cfg.accum = 1;
    cfg.schedule = SCHEDULE_HORIZONTAL;
    cfg.acts_tier = ACTS_DEVICE;
    cfg.eval_every = 0;
    cfg.steps = OVERLAP_STEPS;
    cfg.offload_auto = 0;
    char err[768];
    if (backend_resolve_config(&cfg, err, sizeof err) != 0) usage_error("bench overlap: %s", err); // the floor's device
    profile_t prof;
    const profile_t *rates = train_load_profile(&cfg, &prof);
    model_t m;
    model_init(&m, &cfg);
    printf("model %s: %.2fM parameters, batch %d x seq %d, %d steps per placement (median of the last %d)\n",
           cfg.preset, m.num_params / 1e6, cfg.B, cfg.T, OVERLAP_STEPS, OVERLAP_STEPS - 1);
    printf("floor rates: %s\n\n", rates ? rates->source : "built-in defaults (run tiertrain bench calibrate)");
    printf("%-24s %10s %10s %10s %9s %-13s %12s %12s\n", "placement", "step ms", "x resident", "floor ms", "x floor",
           "bound", "fetch wait", "params_hash");
    double step_ms[3] = {0}, floor_ms[3] = {0};
    uint64_t hash[3] = {0};
    int failed = 0;
    for (int w = 0; w < 3; w++) {
        config_t c = cfg; // each placement from the flags: nothing the previous one's auto decided
        c.params_tier = ways[w].params;
        c.grads_tier = ways[w].grads;
        c.optim_tier = ways[w].optim;
        plan_t p;
        plan_compute(&c, &m, rates, &p);
        char why[512]; // --recompute auto decides as train would, per placement (the floor is for what runs)
        if (p.feasible && plan_recompute_auto(&c, &m, rates, &p, why, sizeof why) && w == 0) printf("%s\n\n", why);
        if (!p.feasible) {
            printf("%-24s infeasible: %s\n", ways[w].name, p.reason);
            failed = 1;
            continue;
        }
        bench_run_t r;
        if (bench_run_steps(&c, OVERLAP_STEPS, &r, err, sizeof err) != 0) {
            printf("%-24s failed: %s\n", ways[w].name, err);
            failed = 1;
            continue;
        }
        step_ms[w] = r.step_ms;
        floor_ms[w] = p.floor_ms;
        hash[w] = r.hash;
        printf("%-24s %10.1f %10.3f %10.1f %9.3f %-13s %9.1f ms %016llx\n", ways[w].name, r.step_ms,
               step_ms[0] > 0 ? r.step_ms / step_ms[0] : 0, p.floor_ms, r.step_ms / p.floor_ms,
               plan_resource_names[p.bound], report_wait_ms(&r.info), (unsigned long long)r.hash);
        fflush(stdout);
    }
    model_free(&m);
    int identical = !failed && hash[0] == hash[1] && hash[0] == hash[2];
    if (!failed && !identical) printf("\nparams_hash differs between placements: placement invariance is broken\n");
    printf("\ntargets: params host <= 1.10 x resident when compute bounds the step; every way <= 1.15 x its floor\n");
    printf("{\"bench\":\"overlap\",\"resident_ms\":%.3f,\"host_ms\":%.3f,\"nvme_ms\":%.3f,\"resident_floor_ms\":%.3f,"
           "\"host_floor_ms\":%.3f,\"nvme_floor_ms\":%.3f,\"host_ratio\":%.4f,\"nvme_ratio\":%.4f,\"identical\":%s}\n",
           step_ms[0], step_ms[1], step_ms[2], floor_ms[0], floor_ms[1], floor_ms[2],
           step_ms[0] > 0 ? step_ms[1] / step_ms[0] : 0, step_ms[0] > 0 ? step_ms[2] / step_ms[0] : 0,
           identical ? "true" : "false");
    return failed || !identical ? 1 : 0;
}
