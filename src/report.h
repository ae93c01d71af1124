// report.h — what a run says of its tiers at the end: the tier report (each tier's peak
// against its budget, the bytes each link moved, how long compute waited on each, the
// achieved step against the plan's floor) and the JSONL summary line with the same figures.
// What it does not do: measure anything (the trainer's counters, trainer_info) or decide the
// floor (plan.c). Who calls it: train.c (both), bench/ (the figures through trainer_info).
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "config.h"
#include "plan.h"
#include "trainer.h"

typedef struct {
    size_t params;            // the model's parameters
    int steps;
    double first_loss, final_loss;
    double val_loss;          // NaN when never evaluated
    double step_ms, tok_per_s; // means over steps 2..N
    uint64_t hash;            // params_hash
    int ranks;                // the world's ranks (0 or 1: one)
    const uint64_t *rank_device, *rank_host; // ranks > 1: (ranks) each rank's device and host peaks
} report_run_t;

// The tier report, for people (the last thing `train` prints).
void report_tiers(FILE *out, const config_t *cfg, const trainer_info_t *info, const plan_t *plan, double step_ms);
// The {"event":"summary",...} line of --log.
void report_summary(FILE *log, const trainer_info_t *info, const plan_t *plan, const report_run_t *r);
// `tiertrain report RUN.jsonl [--trace T.json] -o OUT.html` (report_html.c): the input in
// cfg->tok_in, the page to cfg->tok_out (written to OUT.tmp, then renamed). Exits 2 on input
// that is no log; returns 0.
int report_html_run(const config_t *cfg);
// The NVMe engine's achieved rate for op (IO_READ / IO_WRITE) in GB/s: its bytes over the
// time it had such requests in flight; 0 without a store.
double report_nvme_GBps(const trainer_info_t *info, int op);
