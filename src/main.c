// main.c — entry point: join the launcher's world (comm.h), parse the command line, dispatch
// the subcommand. Under a launcher, rank 0 alone prints to stdout.
#include <stdio.h>
#include <string.h>
#include "backend.h"
#include "bench.h"
#include "comm.h"
#include "cli_table.h" // COMMANDS_ACCEPTED, BENCH_ACCEPTED
#include "config.h"
#include "data.h"
#include "eval.h"
#include "progress.h"
#include "report.h"
#include "train.h"
#include "util.h"

static int dispatch(config_t *cfg);

int main(int argc, char **argv) {
    backend_blas_reexec(argv); // before anything else: it may run this binary again
    char err[512];
    int rc = comm_init(&argc, &argv, err, sizeof err);
    if (rc != 0) fail_with(rc, "%s", err);
    comm_t *world = comm_world();
    if (comm_rank(world) != 0 && !freopen("/dev/null", "w", stdout))
        runtime_error("rank %d: /dev/null: cannot open for stdout", comm_rank(world));
    notice_silence(comm_rank(world) != 0);
    config_t cfg;
    cli_parse(argc, argv, &cfg); // exits on bad input, --help and --version
    if (cfg.command != CMD_PLAN) { // plan says what --ranks N would hold
        cfg.ranks = comm_size(world);
        cfg.local_ranks = comm_local_size(world);
        cfg.local_rank = comm_local_rank(world);
    }
    progress_quiet(cfg.quiet || comm_rank(world) != 0);
    rc = dispatch(&cfg);
    if (rc == 0) comm_finalize();
    return rc;
}

static int dispatch(config_t *cfg_in) {
    config_t cfg = *cfg_in;
    switch (cfg.command) {
    case CMD_TRAIN: return train_run(&cfg);
    case CMD_PLAN: return plan_run(&cfg);
    case CMD_TOKENIZE: return data_tokenize(cfg.tok_in, cfg.tok_out);
    case CMD_BENCH:
        if (strcmp(cfg.bench_name, "gemm") == 0) return bench_gemm(&cfg);
        if (strcmp(cfg.bench_name, "io") == 0) return bench_io(&cfg);
        if (strcmp(cfg.bench_name, "adam") == 0) return bench_adam(&cfg);
        if (strcmp(cfg.bench_name, "overlap") == 0) return bench_overlap(&cfg);
        if (strcmp(cfg.bench_name, "capacity") == 0) return bench_capacity(&cfg);
        if (strcmp(cfg.bench_name, "train") == 0) return bench_train(&cfg);
        if (strcmp(cfg.bench_name, "calibrate") == 0) return bench_calibrate(&cfg);
        if (strcmp(cfg.bench_name, "comm") == 0) return bench_comm(&cfg);
        if (strcmp(cfg.bench_name, "checkpoint") == 0) return bench_checkpoint(&cfg);
        usage_error("bench %s: unknown benchmark (accepted: %s)", cfg.bench_name, BENCH_ACCEPTED);
    case CMD_EVAL: return eval_run(&cfg);
    case CMD_REPORT: return report_html_run(&cfg);
    case CMD_NONE: break;
    }
    usage_error("no subcommand (accepted: " COMMANDS_ACCEPTED "; see tiertrain --help)");
}
