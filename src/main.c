// main.c — entry point: parse the command line, dispatch the subcommand.
#include <stdio.h>
#include <string.h>
#include "bench.h"
#include "config.h"
#include "data.h"
#include "eval.h"
#include "progress.h"
#include "report.h"
#include "train.h"
#include "util.h"

int main(int argc, char **argv) {
    config_t cfg;
    cli_parse(argc, argv, &cfg); // exits on bad input, --help and --version
    progress_quiet(cfg.quiet);
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
        usage_error("bench %s: unknown benchmark (accepted: gemm, io, adam, calibrate, overlap, capacity, train)", cfg.bench_name);
    case CMD_EVAL: return eval_run(&cfg);
    case CMD_REPORT: return report_html_run(&cfg);
    case CMD_NONE: break;
    }
    usage_error("no subcommand (accepted: train, plan, eval, bench, tokenize; see tiertrain --help)");
}
