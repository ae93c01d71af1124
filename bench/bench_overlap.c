// bench_overlap.c — `tiertrain bench overlap`: how well streaming hides behind compute. One
// model (the `small` preset at --batch × its sequence length unless flags say otherwise)
// trained three ways — every state resident; parameters streamed from the host; parameters
// and optimizer states on NVMe — a few steps each, in OVERLAP_ROUNDS rounds of the three (a
// noisy machine's slow spell then hits one round of each, not all of one placement). For each:
// the median over the rounds of the median step time, its ratio to the resident run, the
// plan's predicted floor and achieved ÷ floor: at the profile's rates, and at the compute
// rates calibrate's quick measurements give before each round — the GEMMs', and attention's
// and the elementwise ops' where the profile has them (a shared machine's rates drift by a
// quarter between minutes: the floor of the minutes the steps ran in). Every run must end with
// the same params_hash (placement invariance); the bench fails when they do not. The NVMe
// case's achieved disk rates (as the tier report gives them) against the profile's, and the
// parameters its update handed the forward instead of NVMe.
#include <stdio.h>
#include <stdlib.h> // uses: free
#include <string.h>
#include "bench.h"
#include "report.h"
#include "backend.h"
#include "model.h"
#include "plan.h"
#include "train.h"
#include "util.h"

enum { OVERLAP_STEPS = 5, OVERLAP_ROUNDS = 3 }; // steps per placement unless --steps (at least 2: the first warms up)


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
    const int steps = cfg_in->steps_given ? (cfg_in->steps > 2 ? cfg_in->steps : 2) : OVERLAP_STEPS;
    cfg.steps = steps;
    cfg.offload_auto = 0;
    char err[768];
    if (backend_resolve_config(&cfg, err, sizeof err) != 0) usage_error("bench overlap: %s", err); // the floor's device
    profile_t prof;
    const profile_t *rates = train_load_profile(&cfg, &prof);
    model_t m;
    model_init(&m, &cfg);
    double step_ms[3] = {0}, floor_ms[3] = {0}, ms[3][OVERLAP_ROUNDS] = {{0}}, wait_ms[3] = {0};
    double nvme_rd[OVERLAP_ROUNDS] = {0}, nvme_wr[OVERLAP_ROUNDS] = {0}, handed = 0; // the NVMe case's
    uint64_t hash[3] = {0}, first = 0; // first: the first run's hash, which every run must end with
    int failed = 0, ok[3] = {0}, identical = 1, runs = 0;
    config_t c[3];
    plan_t p[3];
    char why[512] = ""; // --recompute auto decides as train would, per placement (the floor is for what runs)
    for (int w = 0; w < 3; w++) {
        c[w] = cfg; // each placement from the flags: nothing the previous one's auto decided
        c[w].params_tier = ways[w].params;
        c[w].grads_tier = ways[w].grads;
        c[w].optim_tier = ways[w].optim;
        // each placement is the comparison's: one that does not fit is bad input, before any work
        char who[64], w_why[512];
        snprintf(who, sizeof who, "bench overlap: %s does not fit", ways[w].name);
        plan_t *q = bench_plan(&c[w], &m, rates, w_why, sizeof w_why, who);
        p[w] = *q;
        free(q);
        if (w == 0) snprintf(why, sizeof why, "%s", w_why);
        ok[w] = 1;
        floor_ms[w] = p[w].floor_ms;
    }
    printf("model %s: %.2fM parameters, batch %d x seq %d, %d steps per placement (median of the last %d), %d rounds\n",
           cfg.preset, m.num_params / 1e6, cfg.B, cfg.T, steps, steps - 1, OVERLAP_ROUNDS);
    printf("floor rates: %s\n\n", rates ? rates->source : "built-in defaults (run tiertrain bench calibrate)");
    if (why[0]) printf("%s\n", why);
    double gemm[OVERLAP_ROUNDS] = {0}, attn[OVERLAP_ROUNDS] = {0}, elem[OVERLAP_ROUNDS] = {0};
    int rates_ok = 1;
    for (int r = 0; r < OVERLAP_ROUNDS; r++) {
        printf("round %d of %d:", r + 1, OVERLAP_ROUNDS);
        bench_rates_t now;
        if (rates_ok && bench_compute_rates(&cfg, &now, err, sizeof err) != 0) {
            printf(" (the compute rates not measured: %s)", err);
            rates_ok = 0;
        }
        if (rates_ok) {
            gemm[r] = now.gemm_flops, attn[r] = now.attn_flops, elem[r] = now.elem_Bps;
            printf(" gemm %.1f, attention %.1f GFLOP/s, elementwise %.1f GB/s;", gemm[r] / 1e9, attn[r] / 1e9,
                   elem[r] / 1e9);
        }
        for (int w = 0; w < 3; w++) {
            bench_run_t run;
            if (!ok[w]) continue;
            if (bench_run_steps(&c[w], steps, &run, err, sizeof err) != 0) {
                printf("\n%-24s failed: %s\n", ways[w].name, err);
                ok[w] = 0;
                failed = 1;
                continue;
            }
            ms[w][r] = run.step_ms;
            if (w == 2) { // achieved: bytes / time with requests in flight (report_nvme_GBps)
                nvme_rd[r] = report_nvme_GBps(&run.info, IO_READ);
                nvme_wr[r] = report_nvme_GBps(&run.info, IO_WRITE);
                handed += (double)run.info.tier.fresh_bytes / (OVERLAP_ROUNDS * steps);
            }
            // the compute thread's, for parameters: per step, over every step of every round
            wait_ms[w] += run.info.sched.wait_ms / (OVERLAP_ROUNDS * steps);
            if (runs++ == 0) first = run.hash;
            hash[w] = run.hash;
            identical &= run.hash == first;
            printf(" %s %.1f ms;", ways[w].name, run.step_ms);
            fflush(stdout);
        }
        printf("\n");
    }
    // the floor at the compute rates of the rounds (their medians): the GEMMs' where the plan
    // reads them (fp32 mode: the FP32 operands' rate, where the profile has one), attention's
    // and the elementwise ops' where the profile has them (without, attention counts at the
    // GEMM rate and the elementwise ops not at all, as in the profile's floor); every other
    // rate the profile's
    profile_t now = rates ? *rates : prof; // prof holds the defaults when there is no profile
    const int fp32 = cfg.precision == PREC_FP32 && now.gemm_fp32_flops > 0;
    const double gemm_profile = fp32 ? now.gemm_fp32_flops : now.gemm_flops, attn_profile = now.attn_flops,
                 elem_profile = now.elem_Bps;
    double gemm_now = 0, attn_now = 0, elem_now = 0, now_ms[3] = {0};
    if (rates_ok) {
        gemm_now = bench_median(gemm, OVERLAP_ROUNDS); // sorts: the range is first to last
        if (attn_profile > 0) attn_now = bench_median(attn, OVERLAP_ROUNDS);
        if (elem_profile > 0) elem_now = bench_median(elem, OVERLAP_ROUNDS);
        *(fp32 ? &now.gemm_fp32_flops : &now.gemm_flops) = gemm_now;
        now.attn_flops = attn_now;
        now.elem_Bps = elem_now;
        for (int w = 0; w < 3; w++) {
            plan_t pn;
            if (!ok[w]) continue;
            plan_compute(&c[w], &m, &now, &pn);
            now_ms[w] = pn.floor_ms;
        }
        printf("\nrates before the rounds (medians): gemm %.1f GFLOP/s (%.1f-%.1f), the profile's %.1f", gemm_now / 1e9,
               gemm[0] / 1e9, gemm[OVERLAP_ROUNDS - 1] / 1e9, gemm_profile / 1e9);
        if (attn_now > 0) printf("; attention %.1f GFLOP/s, the profile's %.1f", attn_now / 1e9, attn_profile / 1e9);
        if (elem_now > 0) printf("; elementwise %.1f GB/s, the profile's %.1f", elem_now / 1e9, elem_profile / 1e9);
        printf("\n");
    }
    printf("\n%-24s %9s %10s %9s %8s %9s %8s %-8s %13s %12s %16s\n", "placement", "step ms", "x resident", "floor ms",
           "x floor", "now ms", "x now", "bound", "rounds (ms)", "wait/step", "params_hash");
    for (int w = 0; w < 3; w++) {
        if (!ok[w]) continue;
        step_ms[w] = bench_median(ms[w], OVERLAP_ROUNDS); // sorts them: the range is first to last
        char range[32];
        snprintf(range, sizeof range, "%.0f-%.0f", ms[w][0], ms[w][OVERLAP_ROUNDS - 1]);
        printf("%-24s %9.1f %10.3f %9.1f %8.3f %9.1f %8.3f %-8s %13s %9.1f ms %016llx\n", ways[w].name, step_ms[w],
               step_ms[0] > 0 ? step_ms[w] / step_ms[0] : 0, floor_ms[w], step_ms[w] / floor_ms[w], now_ms[w],
               now_ms[w] > 0 ? step_ms[w] / now_ms[w] : 0, plan_resource_names[p[w].bound], range, wait_ms[w],
               (unsigned long long)hash[w]);
    }
    double rd = 0, wr = 0;
    if (ok[2]) {
        char a[32], b[32];
        rd = bench_median(nvme_rd, OVERLAP_ROUNDS);
        wr = bench_median(nvme_wr, OVERLAP_ROUNDS);
        printf("\n%s: NVMe achieved %.2f GB/s reading, %.2f GB/s writing (bytes / time with requests in flight, "
               "medians of the rounds)", ways[2].name, rd, wr);
        if (rates)
            printf("; calibrated %.2f and %.2f over %s: %.2f x, %.2f x", rates->nvme_read_Bps / 1e9,
                   rates->nvme_write_Bps / 1e9, format_bytes(a, sizeof a, rates->nvme_bytes), rd * 1e9 / rates->nvme_read_Bps,
                   wr * 1e9 / rates->nvme_write_Bps);
        printf("; %s a step handed from the update to the forward, not read back\n",
               format_bytes(b, sizeof b, (uint64_t)handed));
    }
    model_free(&m);
    identical = identical && !failed;
    if (!failed && !identical) printf("\nparams_hash differs between placements: placement invariance is broken\n");
    printf("\ntargets: params host <= 1.10 x resident when compute bounds the step; every way <= 1.15 x its floor\n");
    printf("{\"bench\":\"overlap\",\"resident_ms\":%.3f,\"host_ms\":%.3f,\"nvme_ms\":%.3f,\"resident_floor_ms\":%.3f,"
           "\"host_floor_ms\":%.3f,\"nvme_floor_ms\":%.3f,\"host_ratio\":%.4f,\"nvme_ratio\":%.4f,\"identical\":%s,"
           "\"rounds\":%d,\"gemm_profile_flops\":%.6g,\"gemm_now_flops\":%.6g,\"resident_floor_now_ms\":%.3f,"
           "\"host_floor_now_ms\":%.3f,\"nvme_floor_now_ms\":%.3f,\"nvme_read_GBps\":%.3f,\"nvme_write_GBps\":%.3f,"
           "\"nvme_handed_bytes\":%.0f,\"attn_profile_flops\":%.6g,\"attn_now_flops\":%.6g,\"elem_profile_Bps\":%.6g,"
           "\"elem_now_Bps\":%.6g}\n",
           step_ms[0], step_ms[1], step_ms[2], floor_ms[0], floor_ms[1], floor_ms[2],
           step_ms[0] > 0 ? step_ms[1] / step_ms[0] : 0, step_ms[0] > 0 ? step_ms[2] / step_ms[0] : 0,
           identical ? "true" : "false", OVERLAP_ROUNDS, gemm_profile, gemm_now,
           now_ms[0], now_ms[1], now_ms[2], rd, wr, handed, attn_profile, attn_now, elem_profile, elem_now);
    return failed || !identical ? 1 : 0;
}
