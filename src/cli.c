// cli.c — the command line: one static flag table drives parsing, `--help` (global and
// per subcommand) and the README flag reference (`tiertrain --help-markdown`).
// Order of resolution: table defaults, then the --model preset, then every other flag in
// argv order (so `--dim 512 --model tiny` keeps dim 512). Every bad input is one line on
// stderr through usage_error() (exit 2) before any work; --help and --version exit 0.
// Checks files only as far as "exists and can be opened": data.c validates contents.
// Called by main.c (cli_parse) and by every run (config_print); tests walk the table.
#include "cli.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "model.h" // uses: model_preset, model_preset_names
#include "util.h"  // uses: usage_error, parse_size, format_bytes

#ifndef TT_VERSION
#define TT_VERSION "0.0.0"
#endif

// ---------------------------------------------------------------- the table

typedef enum {
    FK_INT,      // int, range [lo, hi]; optional word (e.g. "auto") standing for word_val
    FK_U64,      // uint64_t, any non-negative integer
    FK_SIZE,     // uint64_t bytes via parse_size; range, alignment, optional word ("none" = 0)
    FK_DOUBLE,   // double, range with open/closed ends
    FK_ENUM,     // int index into values "a|b|c" (the config enums follow that order)
    FK_PRESET,   // char[]: a model preset name
    FK_STRING,   // char[]: a path or list; contents checked after parsing
    FK_SWITCH,   // int set to 1; takes no value
    FK_HELP,     // actions, handled before parsing
    FK_VERSION,
    FK_MARKDOWN,
} flag_kind_t;

typedef enum { G_GENERAL = 0, G_MODEL, G_DATA, G_OPTIM, G_RUN, G_IO, G_OUTPUT, G_BENCH, G_TOKENIZE, G_COUNT } flag_group_t;

static const char *const group_name[G_COUNT] = {
    "general", "model", "data", "optimizer", "run", "io", "output", "bench", "tokenize",
};
static const char *const group_title[G_COUNT] = {
    "General", "Model", "Data", "Optimizer (AdamW, cosine schedule)", "Run (device, threads, memory budgets)",
    "I/O and host tier", "Output", "Bench", "Tokenize",
};

typedef struct {
    const char *name;      // long name without dashes
    char short_name;       // single-letter alias or 0
    const char *metavar;   // shown after the name; NULL for switches and actions
    flag_kind_t kind;
    size_t off, fsize;     // field in config_t
    const char *def;       // default, parsed like a user value; NULL = none (set elsewhere)
    const char *def_show;  // shown as the default instead of def, in words
    double lo, hi;         // FK_INT / FK_DOUBLE / FK_SIZE range
    int lo_open, hi_open;  // FK_DOUBLE: the end is excluded
    uint64_t align;        // FK_SIZE: must be a multiple of this
    const char *values;    // FK_ENUM "a|b|c"; FK_INT / FK_SIZE: a word accepted too
    int word_val;          // what that word stands for (FK_INT; FK_SIZE words mean 0)
    const char *accepts;   // FK_STRING: what is accepted, in words
    flag_group_t group;
    unsigned cmds;         // CLI_CMD_* bits; 0 = anywhere
    int hidden;            // not in help or the README
    const char *help;
} flag_t;

#define FIELD(f) .off = offsetof(config_t, f), .fsize = sizeof(((config_t *)0)->f)
#define TP (CLI_CMD_TRAIN | CLI_CMD_PLAN)
#define TPB (CLI_CMD_TRAIN | CLI_CMD_PLAN | CLI_CMD_BENCH)
#define TPE (CLI_CMD_TRAIN | CLI_CMD_PLAN | CLI_CMD_EVAL)
#define TPBE (CLI_CMD_TRAIN | CLI_CMD_PLAN | CLI_CMD_BENCH | CLI_CMD_EVAL)
#define DIM_MAX 1048576.0

static const flag_t flags[] = {
    // ---- general
    {.name = "help", .short_name = 'h', .kind = FK_HELP, .group = G_GENERAL,
     .help = "show help and exit (tiertrain COMMAND --help: the flags COMMAND accepts)"},
    {.name = "version", .kind = FK_VERSION, .group = G_GENERAL, .help = "print the version and exit"},
    {.name = "help-markdown", .kind = FK_MARKDOWN, .group = G_GENERAL, .hidden = 1,
     .help = "print the flag reference as Markdown (the README section)"},
    // ---- model
    {.name = "model", .metavar = "PRESET", .kind = FK_PRESET, FIELD(preset), .def = "small",
     .group = G_MODEL, .cmds = TP,
     .help = "shape preset; the shape flags below override it, in any order"},
    {.name = "layers", .metavar = "N", .kind = FK_INT, FIELD(L), .def_show = "from --model", .lo = 1, .hi = 4096,
     .group = G_MODEL, .cmds = TP, .help = "transformer blocks (L)"},
    {.name = "dim", .metavar = "N", .kind = FK_INT, FIELD(C), .def_show = "from --model", .lo = 2, .hi = DIM_MAX,
     .group = G_MODEL, .cmds = TP, .help = "model width (C); a multiple of --heads with an even head size"},
    {.name = "heads", .metavar = "N", .kind = FK_INT, FIELD(NH), .def_show = "from --model", .lo = 1, .hi = 65536,
     .group = G_MODEL, .cmds = TP, .help = "query heads (NH); a multiple of --kv-heads"},
    {.name = "kv-heads", .metavar = "N", .kind = FK_INT, FIELD(NKV), .def_show = "from --model", .lo = 1, .hi = 65536,
     .group = G_MODEL, .cmds = TP, .help = "key/value heads (NKV, grouped-query attention)"},
    {.name = "ffn", .metavar = "N", .kind = FK_INT, FIELD(F), .def_show = "from --model", .lo = 1, .hi = 4 * DIM_MAX,
     .group = G_MODEL, .cmds = TP, .help = "SwiGLU hidden size (F)"},
    {.name = "vocab", .metavar = "N", .kind = FK_INT, FIELD(V), .def_show = "from --model", .lo = 2, .hi = 16777216,
     .group = G_MODEL, .cmds = TP,
     .help = "vocabulary size (V); >= 128 for synthetic data, >= 256 for text files"},
    {.name = "seq", .metavar = "N", .kind = FK_INT, FIELD(T), .def_show = "from --model", .lo = 1, .hi = DIM_MAX,
     .group = G_MODEL, .cmds = TPE, .help = "sequence length (T)"},
    {.name = "tie", .kind = FK_SWITCH, FIELD(tie), .group = G_MODEL, .cmds = TP,
     .help = "tie the LM head to the token embedding"},
    {.name = "rope-theta", .metavar = "X", .kind = FK_DOUBLE, FIELD(rope_theta), .def = "10000",
     .lo = 0, .lo_open = 1, .hi = HUGE_VAL, .group = G_MODEL, .cmds = TP, .help = "RoPE base"},
    {.name = "norm-eps", .metavar = "X", .kind = FK_DOUBLE, FIELD(norm_eps), .def = "1e-5",
     .lo = 0, .lo_open = 1, .hi = 1, .hi_open = 1, .group = G_MODEL, .cmds = TP, .help = "RMSNorm epsilon"},
    {.name = "precision", .metavar = "bf16|fp32", .kind = FK_ENUM, FIELD(precision), .def = "bf16",
     .values = "bf16|fp32", .group = G_MODEL, .cmds = TPE,
     .help = "compute precision; fp32 is the exact mode for reference checks"},
    {.name = "seed", .metavar = "N", .kind = FK_U64, FIELD(seed), .def = "1337", .group = G_MODEL, .cmds = TP,
     .help = "seed of the weight init (the synthetic corpus has its own fixed seed)"},
    // ---- data
    {.name = "data", .metavar = "SOURCE", .kind = FK_STRING, FIELD(data), .def = "synthetic",
     .accepts = "synthetic, a text file, or an llm.c .bin token file", .group = G_DATA, .cmds = TPE,
     .help = "training data: synthetic (built in), a text file (bytes are tokens) or an llm.c .bin token file"},
    {.name = "batch", .metavar = "N", .kind = FK_INT, FIELD(B), .def = "4", .lo = 1, .hi = 65536,
     .group = G_DATA, .cmds = TP, .help = "sequences per micro-batch (B)"},
    {.name = "accum", .metavar = "N", .kind = FK_INT, FIELD(accum), .def = "1", .lo = 1, .hi = 65536,
     .group = G_DATA, .cmds = TP, .help = "micro-batches per optimizer step (gradient accumulation)"},
    {.name = "steps", .metavar = "N", .kind = FK_INT, FIELD(steps), .def = "60", .lo = 1, .hi = INT_MAX,
     .group = G_DATA, .cmds = TP, .help = "optimizer steps"},
    {.name = "eval-every", .metavar = "N", .kind = FK_INT, FIELD(eval_every), .def = "20", .lo = 0, .hi = INT_MAX,
     .group = G_DATA, .cmds = TP, .help = "validation loss every N steps, on the held-out 5% (0 = never)"},
    {.name = "eval-batches", .metavar = "N", .kind = FK_INT, FIELD(eval_batches), .def = "4", .lo = 1, .hi = 65536,
     .group = G_DATA, .cmds = TP, .help = "micro-batches per validation"},
    // ---- optimizer
    {.name = "lr", .metavar = "X", .kind = FK_DOUBLE, FIELD(lr), .def = "1e-3", .lo = 0, .lo_open = 1, .hi = 10,
     .group = G_OPTIM, .cmds = TP, .help = "peak learning rate, reached after --warmup steps"},
    {.name = "min-lr", .metavar = "X", .kind = FK_DOUBLE, FIELD(min_lr), .def = "1e-4", .lo = 0, .hi = 10,
     .group = G_OPTIM, .cmds = TP,
     .help = "learning rate at the end of the cosine decay; at most --lr (the default is lowered to --lr)"},
    {.name = "warmup", .metavar = "N", .kind = FK_INT, FIELD(warmup), .def = "10", .lo = 0, .hi = INT_MAX,
     .group = G_OPTIM, .cmds = TP, .help = "linear warm-up steps"},
    {.name = "wd", .metavar = "X", .kind = FK_DOUBLE, FIELD(wd), .def = "0.1", .lo = 0, .hi = 10,
     .group = G_OPTIM, .cmds = TP, .help = "weight decay (matrices only; not norms)"},
    {.name = "clip", .metavar = "X", .kind = FK_DOUBLE, FIELD(clip), .def = "1.0", .lo = 0, .hi = HUGE_VAL,
     .group = G_OPTIM, .cmds = TP, .help = "clip the global gradient norm to X (0 = no clipping)"},
    {.name = "beta1", .metavar = "X", .kind = FK_DOUBLE, FIELD(beta1), .def = "0.9", .lo = 0, .hi = 1, .hi_open = 1,
     .group = G_OPTIM, .cmds = TP, .help = "Adam first-moment decay"},
    {.name = "beta2", .metavar = "X", .kind = FK_DOUBLE, FIELD(beta2), .def = "0.95", .lo = 0, .hi = 1, .hi_open = 1,
     .group = G_OPTIM, .cmds = TP, .help = "Adam second-moment decay"},
    {.name = "eps", .metavar = "X", .kind = FK_DOUBLE, FIELD(eps), .def = "1e-8", .lo = 0, .lo_open = 1, .hi = 1,
     .group = G_OPTIM, .cmds = TP, .help = "Adam epsilon"},
    // ---- run
    {.name = "device", .metavar = "auto|cpu|cuda", .kind = FK_ENUM, FIELD(device), .def = "auto",
     .values = "auto|cpu|cuda", .group = G_RUN, .cmds = TPBE,
     .help = "where compute runs; auto = cuda when a GPU is usable, else cpu"},
    {.name = "params", .metavar = "device|host|nvme", .kind = FK_ENUM, FIELD(params_tier), .def = "device",
     .values = "device|host|nvme", .group = G_RUN, .cmds = TP,
     .help = "home of the BF16 parameters; host/nvme stream each shard to the device before its use"},
    {.name = "grads", .metavar = "device|host|nvme", .kind = FK_ENUM, FIELD(grads_tier), .def = "device",
     .values = "device|host|nvme", .group = G_RUN, .cmds = TP,
     .help = "home of the FP32 gradients; host: each shard's gradients visit the device for its backward; nvme: "
             "as host, and each shard's final gradient goes to NVMe next to its optimizer states, so they need no "
             "RAM (needs --optimizer nvme)"},
    {.name = "optimizer", .metavar = "device|host|nvme", .kind = FK_ENUM, FIELD(optim_tier), .def = "host",
     .values = "device|host|nvme", .group = G_RUN, .cmds = TP,
     .help = "home of the FP32 master weights and Adam moments (12 bytes/parameter), where AdamW runs: device "
             "on the device after the backward, host on the CPU overlapping the next forward, nvme streams them "
             "through the host a shard at a time"},
    {.name = "offload", .metavar = "manual|auto", .kind = FK_ENUM, FIELD(offload_auto), .def = "manual",
     .values = "manual|auto", .group = G_RUN, .cmds = TP,
     .help = "auto: the first placement that fits the budgets and RAM, in order of the traffic it adds "
             "(overrides --params, --grads, --optimizer)"},
    {.name = "prefetch", .metavar = "N", .kind = FK_INT, FIELD(prefetch), .def = "2", .lo = 0, .hi = 64,
     .group = G_RUN, .cmds = TP, .help = "streamed parameter shards fetched ahead of their use"},
    {.name = "schedule", .metavar = "auto|horizontal|vertical", .kind = FK_ENUM, FIELD(schedule), .def = "auto",
     .values = "auto|horizontal|vertical", .group = G_RUN, .cmds = TP,
     .help = "micro-batch order: horizontal runs each micro-batch through the whole model; vertical runs every "
             "micro-batch through block l before block l+1, so each streamed shard crosses each link once per "
             "step; auto = vertical when --accum > 1"},
    {.name = "checkpoints", .metavar = "auto|device|host", .kind = FK_ENUM, FIELD(ckpt_tier), .def = "auto",
     .values = "auto|device|host", .group = G_RUN, .cmds = TP,
     .help = "where the block-input activation checkpoints live; auto = host for the vertical schedule, else device"},
    {.name = "host-cache", .metavar = "SIZE", .kind = FK_SIZE, FIELD(host_cache), .def = "none", .lo = 0,
     .hi = HUGE_VAL, .align = 1, .values = "none", .group = G_RUN, .cmds = TP,
     .help = "host memory for copies of NVMe-resident parameters, kept by next use (--params nvme); none = 0"},
    {.name = "profile", .metavar = "FILE", .kind = FK_STRING, FIELD(profile_path), .def = "",
     .def_show = "~/.cache/tiertrain/profile.json", .accepts = "a file path", .group = G_RUN, .cmds = TPB,
     .help = "calibration profile (measured rates) for the plan's predicted floor; bench calibrate writes it"},
    {.name = "threads", .metavar = "N", .kind = FK_INT, FIELD(threads), .def = "0",
     .lo = 0, .hi = 4096, .group = G_RUN, .cmds = TPB | CLI_CMD_EVAL, .help = "CPU threads (0 = $OMP_NUM_THREADS when set, else all cores)"},
    {.name = "hbm-budget", .metavar = "SIZE", .kind = FK_SIZE, FIELD(hbm_budget), .def = "none", .lo = 0,
     .hi = HUGE_VAL, .align = 1, .values = "none", .group = G_RUN, .cmds = TPB,
     .help = "device memory cap (also enforced on the cpu backend); none or 0 = no cap"},
    {.name = "host-budget", .metavar = "SIZE", .kind = FK_SIZE, FIELD(host_budget), .def = "none", .lo = 0,
     .hi = HUGE_VAL, .align = 1, .values = "none", .group = G_RUN, .cmds = TPB,
     .help = "pinned host memory cap; none or 0 = no cap"},
    // ---- io
    {.name = "nvme-path", .metavar = "DIR[,DIR...]", .kind = FK_STRING, FIELD(nvme_path), .def = "",
     .def_show = "$TMPDIR or /tmp", .accepts = "existing writable directories, comma-separated",
     .group = G_IO, .cmds = TPB, .help = "directories for the NVMe tier's files"},
    {.name = "nvme-qd", .metavar = "N", .kind = FK_INT, FIELD(nvme_qd), .def = "32", .lo = 1, .hi = 4096,
     .group = G_IO, .cmds = TPB, .help = "I/O queue depth (requests in flight)"},
    {.name = "io-block", .metavar = "SIZE", .kind = FK_SIZE, FIELD(io_block), .def = "1M", .lo = 4096,
     .hi = 64.0 * 1048576, .align = 4096, .group = G_IO, .cmds = TPB, .help = "bytes per I/O request"},
    {.name = "io-engine", .metavar = "auto|uring|psync", .kind = FK_ENUM, FIELD(io_engine), .def = "auto",
     .values = "auto|uring|psync", .group = G_IO, .cmds = TPB,
     .help = "auto = io_uring when the kernel allows it, else a pread/pwrite thread pool"},
    {.name = "io-sqpoll", .kind = FK_SWITCH, FIELD(io_sqpoll), .group = G_IO, .cmds = TPB,
     .help = "ask for a kernel submission-polling ring (dropped if refused)"},
    {.name = "io-verify", .kind = FK_SWITCH, FIELD(io_verify), .group = G_IO, .cmds = TPB,
     .help = "checksum every block written and check it when read back"},
    {.name = "keep-nvme", .kind = FK_SWITCH, FIELD(keep_nvme), .group = G_IO, .cmds = TPB,
     .help = "keep the NVMe tier's files after the run"},
    {.name = "numa-node", .metavar = "auto|N", .kind = FK_INT, FIELD(numa_node), .def = "auto", .lo = 0,
     .hi = 1023, .values = "auto", .word_val = -1, .group = G_IO, .cmds = TPB,
     .help = "NUMA node of the host buffers; auto = the GPU's node, else the current CPU's"},
    // ---- output
    {.name = "log", .metavar = "FILE", .kind = FK_STRING, FIELD(log_path), .def = "", .def_show = "none",
     .accepts = "a file path in an existing directory", .group = G_OUTPUT, .cmds = TP,
     .help = "write metrics as JSON Lines to FILE (see Metrics)"},
    {.name = "trace", .metavar = "FILE.json", .kind = FK_STRING, FIELD(trace_path), .def = "", .def_show = "none",
     .accepts = "a file path in an existing directory", .group = G_OUTPUT, .cmds = TP,
     .help = "write Chrome trace events to FILE.json (open in Perfetto or chrome://tracing): compute, "
             "parameter copies, NVMe reads and writes, optimizer"},
    {.name = "save", .metavar = "DIR", .kind = FK_STRING, FIELD(save_dir), .def = "", .def_show = "none",
     .accepts = "a directory (created if missing) in an existing parent", .group = G_OUTPUT, .cmds = TP,
     .help = "save checkpoints under DIR (DIR/step-NNNNNNNN/, DIR/latest names the newest): every --save-every "
             "steps, at the end, and on SIGINT/SIGTERM"},
    {.name = "save-every", .metavar = "N", .kind = FK_INT, FIELD(save_every), .def = "0", .lo = 0, .hi = INT_MAX,
     .group = G_OUTPUT, .cmds = TP, .help = "checkpoint every N steps (0 = only at the end)"},
    {.name = "keep-last", .metavar = "K", .kind = FK_INT, FIELD(keep_last), .def = "3", .lo = 0, .hi = INT_MAX,
     .group = G_OUTPUT, .cmds = TP, .help = "keep the newest K checkpoints under --save, remove older ones (0 = keep all)"},
    {.name = "save-dtype", .metavar = "fp32|bf16", .kind = FK_ENUM, FIELD(save_bf16), .def = "fp32",
     .values = "fp32|bf16", .group = G_OUTPUT, .cmds = TP,
     .help = "dtype of model.safetensors (bf16 halves it; resume stays exact: the FP32 master then goes with the "
             "optimizer state)"},
    {.name = "resume", .metavar = "DIR", .kind = FK_STRING, FIELD(resume), .def = "", .def_show = "none",
     .accepts = "a checkpoint folder, a --save directory, or DIR/latest", .group = G_OUTPUT, .cmds = TPE,
     .help = "continue from a checkpoint (bit-exact: same losses and params_hash as an uninterrupted run); eval: "
             "the checkpoint to evaluate"},
    {.name = "eval-tokens", .metavar = "N", .kind = FK_U64, FIELD(eval_tokens), .def = "0", .group = G_OUTPUT,
     .cmds = CLI_CMD_EVAL, .help = "tiertrain eval: use the data file's first N tokens (0 = all)"},
    {.name = "quiet", .kind = FK_SWITCH, FIELD(quiet), .group = G_OUTPUT, .cmds = TP,
     .help = "no per-step lines; the configuration, evaluations and the summary still print"},
    // ---- bench
    {.name = "size", .metavar = "SIZE", .kind = FK_SIZE, FIELD(bench_size), .def = "1G", .lo = 4096,
     .hi = HUGE_VAL, .align = 4096, .group = G_BENCH, .cmds = CLI_CMD_BENCH,
     .help = "bytes of the bench io test file"},
    {.name = "adam-params", .metavar = "N", .kind = FK_SIZE, FIELD(bench_params), .def = "256M", .lo = 4096,
     .hi = 4294967296.0, .group = G_BENCH, .cmds = CLI_CMD_BENCH,
     .help = "parameters the bench adam update runs over (units allowed: 256M = 256·2^20)"},
    // ---- tokenize
    {.name = "out", .short_name = 'o', .metavar = "OUT.bin", .kind = FK_STRING, FIELD(tok_out), .def = "",
     .def_show = "required", .accepts = "a path ending in .bin in an existing directory",
     .group = G_TOKENIZE, .cmds = CLI_CMD_TOKENIZE, .help = "the token file to write"},
};
enum { NFLAGS = sizeof flags / sizeof flags[0] };

typedef struct {
    const char *name;
    command_t cmd;
    unsigned bit;
    const char *usage;
    const char *about;
} command_info_t;

static const command_info_t commands[] = {
    {"train", CMD_TRAIN, CLI_CMD_TRAIN, "tiertrain train [flags]",
     "train a model (default: the small preset on the built-in synthetic corpus)"},
    {"plan", CMD_PLAN, CLI_CMD_PLAN, "tiertrain plan [flags]",
     "print the resolved configuration and what fits where, without training"},
    {"bench", CMD_BENCH, CLI_CMD_BENCH, "tiertrain bench gemm|io|adam|calibrate|overlap|capacity [flags]",
     "gemm: matmul kernel GFLOP/s against plain cblas_sgemm (on a GPU: against bare cuBLASLt, 1b's shapes); io: NVMe tier throughput; adam: AdamW update rate against "
     "memory bandwidth; calibrate: measure the rates the plan uses and write the profile; overlap: one model resident, "
     "streamed from host and from NVMe against the plan's floor; capacity: the largest model this machine's tiers hold, "
     "and two real steps of it"},
    {"eval", CMD_EVAL, CLI_CMD_EVAL, "tiertrain eval --resume DIR --data FILE [--seq T] [--eval-tokens N] [--precision fp32|bf16]",
     "mean next-token loss of a checkpoint over a file's tokens, in consecutive non-overlapping windows of T+1"},
    {"tokenize", CMD_TOKENIZE, CLI_CMD_TOKENIZE, "tiertrain tokenize IN.txt -o OUT.bin",
     "write a text file's bytes as llm.c uint16 tokens (vocab 256)"},
};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static const char *const bench_names[] = {"gemm", "io", "adam", "calibrate", "overlap", "capacity"};
#define BENCH_ACCEPTED "gemm, io, adam, calibrate, overlap, capacity"

// ---------------------------------------------------------------- small helpers

static void *field(config_t *cfg, const flag_t *f) { return (char *)cfg + f->off; }

static const command_info_t *command_of(command_t cmd) {
    for (int i = 0; i < NCOMMANDS; i++)
        if (commands[i].cmd == cmd) return &commands[i];
    return NULL;
}

// "4096" -> "4K", 67108864 -> "64M": the shortest exact spelling with a binary unit.
static void size_short(char *buf, size_t len, uint64_t b) {
    static const char units[] = "KMGTP";
    int u = -1;
    while (b && b % 1024 == 0 && u < 4) { b /= 1024; u++; }
    if (u < 0) snprintf(buf, len, "%llu", (unsigned long long)b);
    else snprintf(buf, len, "%llu%c", (unsigned long long)b, units[u]);
}

// What a flag accepts, in words. long_form: "an integer 1..4096" (errors) vs "1..4096" (help).
static void accepted(const flag_t *f, char *buf, size_t len, int long_form) {
    char lo[32], hi[32];
    switch (f->kind) {
    case FK_INT:
        if (f->hi >= INT_MAX) snprintf(hi, sizeof hi, ">= %.0f", f->lo);
        else snprintf(hi, sizeof hi, "%.0f..%.0f", f->lo, f->hi);
        snprintf(buf, len, "%s%s%s%s", f->values ? f->values : "", f->values ? " or " : "",
                 long_form ? "an integer " : "", hi);
        break;
    case FK_U64: snprintf(buf, len, "%s", long_form ? "an integer 0..2^64-1" : "0..2^64-1"); break;
    case FK_DOUBLE:
        snprintf(lo, sizeof lo, "%g", f->lo);
        snprintf(hi, sizeof hi, "%g", f->hi);
        if (isinf(f->hi)) snprintf(buf, len, "%s%s %s", long_form ? "a number " : "", f->lo_open ? ">" : ">=", lo);
        else if (!f->lo_open && !f->hi_open) snprintf(buf, len, "%s%s..%s", long_form ? "a number " : "", lo, hi);
        else snprintf(buf, len, "%s%c%s, %s%c", long_form ? "a number in " : "", f->lo_open ? '(' : '[', lo, hi,
                      f->hi_open ? ')' : ']');
        break;
    case FK_SIZE: {
        char range[96];
        size_short(lo, sizeof lo, (uint64_t)f->lo);
        if (isinf(f->hi)) {
            if (f->lo > 0) snprintf(range, sizeof range, ">= %s", lo);
            else range[0] = 0;
        } else {
            size_short(hi, sizeof hi, (uint64_t)f->hi);
            snprintf(range, sizeof range, "%s..%s", lo, hi);
        }
        if (f->align > 1) {
            char al[32];
            size_short(al, sizeof al, f->align);
            size_t n = strlen(range);
            snprintf(range + n, sizeof range - n, "%sa multiple of %s", n ? ", " : "", al);
        }
        // help: "4K..64M, a multiple of 4K"; errors: "a size like 512M, 4G, 1.5GiB (4K..64M, ...)"
        const char *word = f->values ? f->values : "", *or = f->values ? " or " : "";
        if (!range[0]) snprintf(buf, len, "%s%sa size like 512M, 4G, 1.5GiB", word, or);
        else if (long_form) snprintf(buf, len, "%s%sa size like 512M, 4G, 1.5GiB (%s)", word, or, range);
        else snprintf(buf, len, "%s%s%s", word, or, range);
        break;
    }
    case FK_ENUM: {
        size_t n = 0;
        buf[0] = 0;
        for (const char *p = f->values; *p && n + 3 < len; p++) {
            if (*p == '|') { buf[n++] = ','; buf[n++] = ' '; }
            else buf[n++] = *p;
        }
        buf[n] = 0;
        break;
    }
    case FK_PRESET: snprintf(buf, len, "%s", model_preset_names()); break;
    case FK_STRING: snprintf(buf, len, "%s", f->accepts ? f->accepts : "a path"); break;
    default: buf[0] = 0; break;
    }
}

// The flag as people type it: "--steps", or "-o" when given short.
static void display_name(const flag_t *f, int used_short, char *buf, size_t len) {
    if (used_short) snprintf(buf, len, "-%c", f->short_name);
    else snprintf(buf, len, "--%s", f->name);
}

// Optimal string alignment distance (edits and adjacent swaps), for "did you mean".
static int edit_distance(const char *a, const char *b) {
    enum { MAXL = 48 };
    int la = (int)strnlen(a, MAXL), lb = (int)strnlen(b, MAXL);
    int d[MAXL + 1][MAXL + 1];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

// Closest candidate to s among names[], or NULL when nothing is close enough.
static const char *closest(const char *s, const char *const *names, size_t n) {
    const char *best = NULL;
    int best_d = INT_MAX;
    size_t ls = strlen(s);
    for (size_t i = 0; i < n; i++) {
        if (ls >= 3 && strncmp(names[i], s, ls) == 0) return names[i]; // a prefix: --eval -> --eval-every
        int d = edit_distance(s, names[i]);
        if (d < best_d) { best_d = d; best = names[i]; }
    }
    int limit = ls < 5 ? 1 : 2;
    return best_d <= limit ? best : NULL;
}

// ---------------------------------------------------------------- values

// Parses val into f's field. Returns 0, or -1 with one line (no prefix) in err.
static int set_value(const flag_t *f, const char *disp, const char *val, config_t *cfg, int is_default,
                     char *err, size_t errlen) {
    char acc[256];
    accepted(f, acc, sizeof acc, 1);
    char *end = NULL;
    switch (f->kind) {
    case FK_INT: {
        int v;
        if (f->values && strcmp(val, f->values) == 0) {
            v = f->word_val;
        } else {
            errno = 0;
            long long x = strtoll(val, &end, 10);
            if (end == val || *end || !*val) {
                snprintf(err, errlen, "%s %s: not an integer (accepted: %s)", disp, val, acc);
                return -1;
            }
            if (errno == ERANGE || (double)x < f->lo || (double)x > f->hi) {
                snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
                return -1;
            }
            v = (int)x;
        }
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_U64: {
        const char *p = val;
        while (*p == ' ') p++;
        errno = 0;
        unsigned long long x = strtoull(p, &end, 10);
        if (*p < '0' || *p > '9' || end == p || *end) {
            snprintf(err, errlen, "%s %s: not a non-negative integer (accepted: %s)", disp, val, acc);
            return -1;
        }
        if (errno == ERANGE) {
            snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
            return -1;
        }
        uint64_t v = x;
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_SIZE: {
        uint64_t v = 0;
        if (!(f->values && strcmp(val, f->values) == 0)) {
            int rc = parse_size(val, &v);
            if (rc == -ERANGE) {
                snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
                return -1;
            }
            if (rc < 0) {
                snprintf(err, errlen, "%s %s: not a size (accepted: %s)", disp, val, acc);
                return -1;
            }
            if ((double)v < f->lo || (double)v > f->hi || (f->align > 1 && v % f->align)) {
                snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
                return -1;
            }
        }
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || !*val || !isfinite(v)) {
            snprintf(err, errlen, "%s %s: not a number (accepted: %s)", disp, val, acc);
            return -1;
        }
        if (v < f->lo || v > f->hi || (f->lo_open && v == f->lo) || (f->hi_open && v == f->hi)) {
            snprintf(err, errlen, "%s %s: out of range (accepted: %s)", disp, val, acc);
            return -1;
        }
        memcpy(field(cfg, f), &v, sizeof v);
        return 0;
    }
    case FK_ENUM: {
        int idx = 0;
        size_t lv = strlen(val);
        for (const char *p = f->values; *p; idx++) {
            size_t n = strcspn(p, "|");
            if (n == lv && n > 0 && strncmp(p, val, n) == 0) {
                memcpy(field(cfg, f), &idx, sizeof idx);
                return 0;
            }
            p += n;
            if (*p == '|') p++;
        }
        snprintf(err, errlen, "%s %s: not accepted (accepted: %s)", disp, val, acc);
        return -1;
    }
    case FK_PRESET:
        if (model_preset(val, cfg) != 0) {
            snprintf(err, errlen, "%s %s: unknown preset (accepted: %s)", disp, val, acc);
            return -1;
        }
        return 0;
    case FK_STRING: {
        size_t n = strlen(val);
        if (n == 0 && !is_default) {
            snprintf(err, errlen, "%s: empty value (accepted: %s)", disp, acc);
            return -1;
        }
        if (n >= f->fsize) {
            snprintf(err, errlen, "%s %.60s...: too long (%zu bytes; accepted: at most %zu)", disp, val, n,
                     f->fsize - 1);
            return -1;
        }
        memcpy(field(cfg, f), val, n + 1);
        return 0;
    }
    case FK_SWITCH: {
        int one = 1;
        memcpy(field(cfg, f), &one, sizeof one);
        return 0;
    }
    default: return 0;
    }
}

// Table defaults (everything but the model shape, which the preset sets).
static void apply_defaults(config_t *cfg) {
    char err[512];
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NFLAGS; i++) {
        const flag_t *f = &flags[i];
        if (!f->def) continue;
        char disp[64];
        display_name(f, 0, disp, sizeof disp);
        if (set_value(f, disp, f->def, cfg, 1, err, sizeof err) != 0) {
            fprintf(stderr, "tiertrain: %s:%d: bad default in the flag table: %s\n", __FILE__, __LINE__, err);
            abort();
        }
    }
}

int cli_table_check(char *err, size_t errlen) {
    for (int i = 0; i < NFLAGS; i++) {
        const flag_t *f = &flags[i];
        size_t want = 0;
        switch (f->kind) {
        case FK_INT: case FK_ENUM: case FK_SWITCH: want = sizeof(int); break;
        case FK_U64: case FK_SIZE: want = sizeof(uint64_t); break;
        case FK_DOUBLE: want = sizeof(double); break;
        case FK_PRESET: case FK_STRING: want = f->fsize > 1 ? f->fsize : 2; break;
        default: want = f->fsize; break; // actions have no field
        }
        if (f->fsize != want) {
            snprintf(err, errlen, "--%s: field of %zu bytes does not match its kind (%zu)", f->name, f->fsize, want);
            return -1;
        }
        int has_value = f->kind != FK_SWITCH && f->kind != FK_HELP && f->kind != FK_VERSION && f->kind != FK_MARKDOWN;
        if (has_value != (f->metavar != NULL)) {
            snprintf(err, errlen, "--%s: metavar %s but the kind %s a value", f->name, f->metavar ? "set" : "missing",
                     has_value ? "takes" : "takes no");
            return -1;
        }
        if (!f->help || !*f->help || f->group >= G_COUNT) {
            snprintf(err, errlen, "--%s: no help text or group", f->name);
            return -1;
        }
        if ((f->kind == FK_INT || f->kind == FK_DOUBLE || f->kind == FK_SIZE) && !(f->lo <= f->hi)) {
            snprintf(err, errlen, "--%s: empty range", f->name);
            return -1;
        }
        if (f->kind == FK_ENUM && !f->values) {
            snprintf(err, errlen, "--%s: enum without values", f->name);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(flags[j].name, f->name) == 0 || (f->short_name && flags[j].short_name == f->short_name)) {
                snprintf(err, errlen, "--%s: defined twice", f->name);
                return -1;
            }
        }
        if (f->def) {
            config_t tmp;
            memset(&tmp, 0, sizeof tmp);
            char e[512];
            if (set_value(f, f->name, f->def, &tmp, 1, e, sizeof e) != 0) {
                snprintf(err, errlen, "--%s: default does not parse: %s", f->name, e);
                return -1;
            }
        }
    }
    return 0;
}

// ---------------------------------------------------------------- help

static void commands_text(unsigned cmds, char *buf, size_t len) {
    if (cmds == 0) { snprintf(buf, len, "all"); return; }
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < NCOMMANDS; i++)
        if (cmds & commands[i].bit) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", commands[i].name);
}

static void default_text(const flag_t *f, char *buf, size_t len) {
    if (f->def_show) snprintf(buf, len, "%s", f->def_show);
    else if (f->kind == FK_SWITCH) snprintf(buf, len, "off");
    else if (f->def) snprintf(buf, len, "%s", f->def);
    else buf[0] = 0;
}

// Prints "left  right" with right wrapped at 100 columns, continuation under right.
static void help_line(FILE *out, const char *left, const char *right) {
    enum { COL = 30, WIDTH = 100 };
    int col = fprintf(out, "%s", left);
    if (col >= COL - 1) { fputc('\n', out); col = 0; }
    fprintf(out, "%*s", COL - col, "");
    col = COL;
    const char *p = right;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (col > COL && col + 1 + (int)w > WIDTH) { fprintf(out, "\n%*s", COL, ""); col = COL; }
        else if (col > COL) { fputc(' ', out); col++; }
        fprintf(out, "%.*s", (int)w, p);
        col += (int)w;
        p += w;
        while (*p == ' ') p++;
    }
    fputc('\n', out);
}

static void help_flag(FILE *out, const flag_t *f, int show_cmds) {
    char left[96], right[768], acc[256], def[64];
    int k = snprintf(left, sizeof left, "  ");
    if (f->short_name) k += snprintf(left + k, sizeof left - (size_t)k, "-%c, ", f->short_name);
    k += snprintf(left + k, sizeof left - (size_t)k, "--%s", f->name);
    if (f->metavar) snprintf(left + k, sizeof left - (size_t)k, " %s", f->metavar);
    accepted(f, acc, sizeof acc, 0);
    default_text(f, def, sizeof def);
    size_t n = (size_t)snprintf(right, sizeof right, "%s", f->help);
    // Enums list their values in the metavar; strings and seeds say it in the help text.
    int show_acc = acc[0] && (f->kind == FK_INT || f->kind == FK_DOUBLE || f->kind == FK_SIZE || f->kind == FK_PRESET);
    if (f->kind == FK_SWITCH) def[0] = 0; // "default off" goes without saying
    if (show_acc || def[0]) {
        n += (size_t)snprintf(right + n, sizeof right - n, " (");
        if (show_acc) n += (size_t)snprintf(right + n, sizeof right - n, "%s%s", acc, def[0] ? "; " : "");
        if (def[0]) n += (size_t)snprintf(right + n, sizeof right - n, "%s%s",
                                          strcmp(def, "required") == 0 ? "" : "default ", def);
        n += (size_t)snprintf(right + n, sizeof right - n, ")");
    }
    if (show_cmds && f->cmds) {
        char c[64];
        commands_text(f->cmds, c, sizeof c);
        snprintf(right + n, sizeof right - n, " [%s]", c);
    }
    help_line(out, left, right);
}

static const char *const help_footer =
    "Flags take --flag value or --flag=value. Sizes take units: 512M, 4G, 1.5GiB (K M G T and KiB MiB GiB TiB\n"
    "are powers of 1024; KB MB GB TB powers of 1000).\n"
    "Exit codes: 0 done; 1 runtime failure (cause named); 2 bad usage or input, before any work;\n"
    "130/143 stopped by SIGINT/SIGTERM.\n";

void cli_help(FILE *out, command_t cmd) {
    const command_info_t *ci = command_of(cmd);
    if (ci) {
        fprintf(out, "usage: %s\n  %s\n", ci->usage, ci->about);
        if (cmd == CMD_BENCH) fprintf(out, "  Every bench prints a table, then one JSON line {\"bench\": NAME, ...}.\n");
    } else {
        fprintf(out, "tiertrain %s: trains Llama-style transformers whose parameters, gradients and optimizer\n"
                     "states are spread over device memory, pinned host memory and NVMe.\n\nusage:\n", TT_VERSION);
        for (int i = 0; i < NCOMMANDS; i++) {
            char left[96];
            snprintf(left, sizeof left, "  %s", commands[i].usage);
            help_line(out, left, commands[i].about);
        }
        help_line(out, "  tiertrain COMMAND --help", "the flags COMMAND accepts");
    }
    for (int g = 0; g < G_COUNT; g++) {
        // The global help names the subcommands of a group in its header when its flags
        // agree, and of each flag otherwise.
        unsigned common = 0;
        int uniform = 1, any = 0;
        for (int i = 0; i < NFLAGS; i++) {
            const flag_t *f = &flags[i];
            if (f->group != (flag_group_t)g || f->hidden) continue;
            if (any && f->cmds != common) uniform = 0;
            common = f->cmds;
            any = 1;
        }
        int header = 0;
        for (int i = 0; i < NFLAGS; i++) {
            const flag_t *f = &flags[i];
            if (f->group != (flag_group_t)g || f->hidden) continue;
            if (ci && f->cmds && !(f->cmds & ci->bit)) continue;
            if (!header) {
                char c[64] = "";
                if (!ci && uniform && common && common != (CLI_CMD_BENCH) && common != CLI_CMD_TOKENIZE) {
                    c[0] = ' ';
                    c[1] = '(';
                    commands_text(common, c + 2, sizeof c - 3);
                    strcat(c, ")");
                }
                fprintf(out, "\n%s%s:\n", group_name[g], c);
                header = 1;
            }
            help_flag(out, f, ci == NULL && !uniform);
        }
    }
    fprintf(out, "\n%s", help_footer);
}

// Markdown cell text: '|' must be escaped inside tables, even within code spans.
static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", out);
        else fputc(*s, out);
    }
}

void cli_help_markdown(FILE *out) {
    fprintf(out, "Flags take `--flag value` or `--flag=value`. Sizes take units: `512M`, `4G`, `1.5GiB` (K, M, G, T and\n"
                 "KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB, TB powers of 1000). `tiertrain COMMAND --help`\n"
                 "lists the flags one command accepts. This section is the output of `tiertrain --help-markdown`.\n");
    for (int g = 0; g < G_COUNT; g++) {
        int header = 0;
        for (int i = 0; i < NFLAGS; i++) {
            const flag_t *f = &flags[i];
            if (f->group != (flag_group_t)g || f->hidden) continue;
            if (!header) {
                fprintf(out, "\n### %s\n\n| Flag | Default | Accepted | Commands | Description |\n"
                             "| --- | --- | --- | --- | --- |\n", group_title[g]);
                header = 1;
            }
            char acc[256], def[64], cmds[64];
            accepted(f, acc, sizeof acc, 0);
            default_text(f, def, sizeof def);
            commands_text(f->cmds, cmds, sizeof cmds);
            fputs("| ", out);
            if (f->short_name) fprintf(out, "`-%c`, ", f->short_name);
            fprintf(out, "`--%s", f->name);
            if (f->metavar) { fputc(' ', out); md_cell(out, f->metavar); }
            fputs("` | ", out);
            if (def[0] && f->def && !f->def_show) { fputc('`', out); md_cell(out, def); fputc('`', out); }
            else md_cell(out, def);
            fputs(" | ", out);
            md_cell(out, acc);
            fprintf(out, " | %s | ", cmds);
            md_cell(out, f->help);
            fputs(" |\n", out);
        }
    }
}

// ---------------------------------------------------------------- table views

size_t cli_flag_count(void) { return NFLAGS; }

const char *cli_flag_name(size_t i) {
    static char names[NFLAGS][40];
    if (i >= NFLAGS) return NULL;
    if (!names[i][0]) snprintf(names[i], sizeof names[i], "--%s", flags[i].name);
    return names[i];
}

char cli_flag_short(size_t i) { return i < NFLAGS ? flags[i].short_name : 0; }
int cli_flag_hidden(size_t i) { return i < NFLAGS ? flags[i].hidden : 0; }
unsigned cli_flag_commands(size_t i) { return i < NFLAGS ? flags[i].cmds : 0; }

// ---------------------------------------------------------------- parsing

typedef struct {
    const char *positional[1]; // bench NAME / tokenize IN
    int npositional;
    const char *preset;        // the last --model value
    unsigned char seen[NFLAGS];
} parsed_t;

static int flag_index(const flag_t *f) { return (int)(f - flags); }

static const flag_t *find_long(const char *name, size_t n) {
    for (int i = 0; i < NFLAGS; i++)
        if (strlen(flags[i].name) == n && strncmp(flags[i].name, name, n) == 0) return &flags[i];
    return NULL;
}

static const flag_t *find_short(char c) {
    for (int i = 0; i < NFLAGS; i++)
        if (c && flags[i].short_name == c) return &flags[i];
    return NULL;
}

static int takes_value(const flag_t *f) { return f->metavar != NULL; }

static void unknown_flag(const char *arg, size_t n, const command_info_t *ci) __attribute__((noreturn));
static void unknown_flag(const char *arg, size_t n, const command_info_t *ci) {
    const char *names[NFLAGS];
    size_t count = 0;
    for (int i = 0; i < NFLAGS; i++)
        if (!flags[i].hidden && (!ci || !flags[i].cmds || (flags[i].cmds & ci->bit))) names[count++] = flags[i].name;
    char given[64];
    const char *p = arg;
    while (*p == '-' && (size_t)(p - arg) < n) p++;
    snprintf(given, sizeof given, "%.*s", (int)(n - (size_t)(p - arg)), p);
    const char *s = closest(given, names, count);
    const char *cmd = ci ? ci->name : "";
    if (s)
        usage_error("%.*s: unknown flag for 'tiertrain%s%s' (did you mean --%s? see tiertrain%s%s --help)", (int)n, arg,
                    ci ? " " : "", cmd, s, ci ? " " : "", cmd);
    usage_error("%.*s: unknown flag for 'tiertrain%s%s' (see tiertrain%s%s --help for the accepted flags)", (int)n, arg,
                ci ? " " : "", cmd, ci ? " " : "", cmd);
}

static void positional(const char *arg, const command_info_t *ci, parsed_t *ps) {
    if (ci->cmd == CMD_TRAIN || ci->cmd == CMD_PLAN)
        usage_error("unexpected argument '%s' for 'tiertrain %s' (it takes flags only; see tiertrain %s --help)", arg,
                    ci->name, ci->name);
    if (ps->npositional >= 1) {
        if (ci->cmd == CMD_BENCH)
            usage_error("bench %s: unexpected second argument '%s' (one benchmark per run; accepted: %s)",
                        ps->positional[0], arg, BENCH_ACCEPTED);
        usage_error("tokenize %s: unexpected second argument '%s' (usage: %s)", ps->positional[0], arg, ci->usage);
    }
    if (ci->cmd == CMD_BENCH) {
        size_t nb = sizeof bench_names / sizeof bench_names[0];
        int ok = 0;
        for (size_t i = 0; i < nb; i++) ok |= strcmp(arg, bench_names[i]) == 0;
        if (!ok) {
            const char *s = closest(arg, bench_names, nb);
            if (s) usage_error("bench %s: unknown benchmark (did you mean %s? accepted: %s)", arg, s, BENCH_ACCEPTED);
            usage_error("bench %s: unknown benchmark (accepted: %s)", arg, BENCH_ACCEPTED);
        }
    }
    ps->positional[ps->npositional++] = arg;
}

// One pass over argv[2..]. The first pass validates every flag in argv order (applying
// --model where it appears); the final pass runs on a config that already holds the
// preset and skips --model, so explicit shape flags win wherever they are.
static void walk(int argc, char **argv, const command_info_t *ci, config_t *cfg, parsed_t *ps, int final_pass) {
    char err[1024];
    int flags_done = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (flags_done || arg[0] != '-' || arg[1] == 0) {
            if (!final_pass) positional(arg, ci, ps);
            continue;
        }
        if (strcmp(arg, "--") == 0) { flags_done = 1; continue; }
        const flag_t *f = NULL;
        const char *val = NULL;
        int used_short = 0;
        size_t n; // length of the flag part of arg, without "=value"
        if (arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            n = eq ? (size_t)(eq - arg) : strlen(arg);
            f = find_long(arg + 2, n - 2);
            if (eq) val = eq + 1;
        } else {
            const char *eq = strchr(arg + 1, '=');
            n = eq ? (size_t)(eq - arg) : strlen(arg);
            if (n == 2) { f = find_short(arg[1]); used_short = 1; }
            if (eq) val = eq + 1;
        }
        if (!f || f->hidden) unknown_flag(arg, n, ci);
        char disp[64];
        display_name(f, used_short, disp, sizeof disp);
        if (f->cmds && !(f->cmds & ci->bit)) {
            char c[64];
            commands_text(f->cmds, c, sizeof c);
            usage_error("%s: not accepted by 'tiertrain %s' (it is a flag of: %s; see tiertrain %s --help)", disp,
                        ci->name, c, ci->name);
        }
        if (!takes_value(f)) {
            if (val) usage_error("%s=%s: %s takes no value (accepted: %s alone)", disp, val, disp, disp);
            if (f->kind == FK_SWITCH) set_value(f, disp, "", cfg, 0, err, sizeof err);
            ps->seen[flag_index(f)] = 1;
            continue; // actions were handled before parsing
        }
        if (!val) {
            char acc[256];
            accepted(f, acc, sizeof acc, 1);
            if (i + 1 >= argc) usage_error("%s: missing value (accepted: %s)", disp, acc);
            if (strncmp(argv[i + 1], "--", 2) == 0)
                usage_error("%s: missing value before %s (accepted: %s)", disp, argv[i + 1], acc);
            val = argv[++i];
        }
        ps->seen[flag_index(f)] = 1;
        if (f->kind == FK_PRESET) {
            if (final_pass) continue;
            ps->preset = val;
        }
        if (set_value(f, disp, val, cfg, 0, err, sizeof err) != 0) usage_error("%s", err);
    }
}

static int seen(const parsed_t *ps, const char *name) {
    const flag_t *f = find_long(name, strlen(name));
    return f && ps->seen[flag_index(f)];
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// The directory part of path ("." when there is none) into buf.
static void dir_of(const char *path, char *buf, size_t len) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, len, ".");
    else if (slash == path) snprintf(buf, len, "/");
    else snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

// An output file: its directory exists and is writable, and it is not a directory itself.
static void check_output_path(const char *disp, const char *path) {
    char dir[TT_PATH_MAX];
    struct stat st;
    dir_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0)
        usage_error("%s %s: directory %s does not exist (create it or choose another path)", disp, path, dir);
    if (!S_ISDIR(st.st_mode)) usage_error("%s %s: %s is not a directory (choose another path)", disp, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        usage_error("%s %s: directory %s is not writable (choose another path)", disp, path, dir);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        usage_error("%s %s: is a directory (accepted: a file path)", disp, path);
}

// An input file: exists, is a regular file, and opens for reading.
static void check_input_path(const char *what, const char *path, const char *accepts) {
    struct stat st;
    if (stat(path, &st) != 0) usage_error("%s %s: %s (accepted: %s)", what, path, strerror(errno), accepts);
    if (S_ISDIR(st.st_mode)) usage_error("%s %s: is a directory (accepted: %s)", what, path, accepts);
    int fd = open(path, O_RDONLY);
    if (fd < 0) usage_error("%s %s: cannot read: %s (accepted: %s)", what, path, strerror(errno), accepts);
    close(fd);
}

static void check_shape(const config_t *c) {
    if (c->C % c->NH != 0) {
        int hs = c->C / c->NH;
        hs -= hs % 2;
        if (hs < 2) hs = 2;
        usage_error("--dim %d is not a multiple of --heads %d (accepted: --dim = heads x an even head size, e.g. %d or %d)",
                    c->C, c->NH, c->NH * hs, c->NH * (hs + 2));
    }
    int hs = c->C / c->NH;
    if (hs % 2 != 0)
        usage_error("--dim %d / --heads %d = head size %d, which is odd (RoPE rotates channel pairs; accepted: an even "
                    "head size, e.g. --dim %d or --dim %d)",
                    c->C, c->NH, hs, c->NH * (hs - 1 > 0 ? hs - 1 : hs + 1), c->NH * (hs + 1));
    if (c->NH % c->NKV != 0) {
        char divs[256];
        size_t n = 0;
        divs[0] = 0;
        for (int d = 1; d <= c->NH && n + 16 < sizeof divs; d++)
            if (c->NH % d == 0) n += (size_t)snprintf(divs + n, sizeof divs - n, "%s%d", n ? ", " : "", d);
        usage_error("--kv-heads %d does not divide --heads %d (accepted: a divisor of %d: %s)", c->NKV, c->NH, c->NH, divs);
    }
    if ((int64_t)c->B * c->T > (int64_t)1 << 30)
        usage_error("--batch %d x --seq %d = %lld tokens per micro-batch (accepted: at most 2^30; lower --batch and "
                    "raise --accum)", c->B, c->T, (long long)c->B * c->T);
}

static void check_data(const config_t *c) {
    if (strcmp(c->data, "synthetic") == 0) {
        if (c->V < 128)
            usage_error("--data synthetic: the corpus is ASCII text and needs --vocab >= 128 (got --vocab %d)", c->V);
        return;
    }
    check_input_path("--data", c->data, "synthetic, a text file, or an llm.c .bin token file");
    if (!ends_with(c->data, ".bin") && c->V < 256)
        usage_error("--data %s: a text file's bytes are tokens 0..255, which needs --vocab >= 256 (got --vocab %d; "
                    "or give an llm.c .bin token file)", c->data, c->V);
}

// --save DIR: an existing directory, or a new one whose parent exists (made at the first save).
static void check_save_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) usage_error("--save %s: exists and is not a directory (give a directory)", dir);
        if (access(dir, W_OK | X_OK) != 0) usage_error("--save %s: not writable (give a writable directory)", dir);
        return;
    }
    check_output_path("--save", dir);
}

static void check_nvme_paths(const char *list) {
    if (!*list) return;
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ",");
        char dir[TT_PATH_MAX];
        if (n == 0) usage_error("--nvme-path %s: empty directory in the list (accepted: DIR[,DIR...])", list);
        snprintf(dir, sizeof dir, "%.*s", (int)n, p);
        struct stat st;
        if (stat(dir, &st) != 0)
            usage_error("--nvme-path %s: %s: %s (accepted: existing writable directories, comma-separated)", list, dir,
                        strerror(errno));
        if (!S_ISDIR(st.st_mode))
            usage_error("--nvme-path %s: %s is not a directory (accepted: existing writable directories)", list, dir);
        if (access(dir, W_OK | X_OK) != 0)
            usage_error("--nvme-path %s: %s is not writable (accepted: existing writable directories)", list, dir);
        p += n;
        if (!*p) break;
        p++;
    }
}

static void table_check_or_die(void) {
    char err[512];
    if (cli_table_check(err, sizeof err) != 0) {
        fprintf(stderr, "tiertrain: %s:%d: flag table: %s\n", __FILE__, __LINE__, err);
        abort();
    }
}

void cli_parse(int argc, char **argv, config_t *cfg) {
    table_check_or_die();
    apply_defaults(cfg);
    model_preset("small", cfg);
    if (argc < 2) usage_error("no subcommand (accepted: train, plan, eval, bench, tokenize; see tiertrain --help)");

    // Global actions first: `tiertrain --help`, `tiertrain --version`, `tiertrain --help-markdown`.
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { cli_help(stdout, CMD_NONE); exit(0); }
    if (strcmp(a, "--version") == 0) { printf("tiertrain %s\n", TT_VERSION); exit(0); }
    if (strcmp(a, "--help-markdown") == 0) { cli_help_markdown(stdout); exit(0); }
    const command_info_t *ci = NULL;
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(a, commands[i].name) == 0) ci = &commands[i];
    if (!ci) {
        if (a[0] == '-') {
            size_t n = strcspn(a, "=");
            const char *p = a;
            while (*p == '-') p++;
            const flag_t *f = find_long(p, n - (size_t)(p - a));
            if (f && !f->hidden)
                usage_error("%.*s: flags go after the subcommand (e.g. tiertrain train %.*s ...; see tiertrain --help)",
                            (int)n, a, (int)n, a);
            unknown_flag(a, n, NULL);
        }
        const char *names[NCOMMANDS];
        for (int i = 0; i < NCOMMANDS; i++) names[i] = commands[i].name;
        const char *s = closest(a, names, NCOMMANDS);
        if (s) usage_error("%s: unknown subcommand (did you mean %s? accepted: train, plan, eval, bench, tokenize)", a, s);
        usage_error("%s: unknown subcommand (accepted: train, plan, eval, bench, tokenize; see tiertrain --help)", a);
    }
    cfg->command = ci->cmd;
    // --help / --version anywhere among the flags win over everything else.
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { cli_help(stdout, ci->cmd); exit(0); }
        if (strcmp(argv[i], "--version") == 0) { printf("tiertrain %s\n", TT_VERSION); exit(0); }
    }

    parsed_t ps;
    memset(&ps, 0, sizeof ps);
    walk(argc, argv, ci, cfg, &ps, 0);
    // Resolve in order: defaults, the preset, then the flags (the walk above validated them).
    apply_defaults(cfg);
    cfg->command = ci->cmd;
    model_preset(ps.preset ? ps.preset : "small", cfg);
    walk(argc, argv, ci, cfg, &ps, 1);

    switch (ci->cmd) {
    case CMD_TRAIN:
    case CMD_PLAN:
        check_shape(cfg);
        if (cfg->min_lr > cfg->lr) {
            if (seen(&ps, "min-lr"))
                usage_error("--min-lr %g: above --lr %g (accepted: 0..%g; the cosine decay goes from --lr down to "
                            "--min-lr)", cfg->min_lr, cfg->lr, cfg->lr);
            cfg->min_lr = cfg->lr;
        }
        check_data(cfg);
        if (cfg->log_path[0]) check_output_path("--log", cfg->log_path);
        if (cfg->save_dir[0]) check_save_dir(cfg->save_dir);
        if (cfg->save_every && !cfg->save_dir[0])
            usage_error("--save-every %d: needs --save DIR (where to put the checkpoints)", cfg->save_every);
        if (cfg->trace_path[0]) check_output_path("--trace", cfg->trace_path);
        check_nvme_paths(cfg->nvme_path);
        // --schedule auto / --checkpoints auto resolve here, so every run prints what it does
        if (cfg->schedule == SCHEDULE_AUTO) cfg->schedule = cfg->accum > 1 ? SCHEDULE_VERTICAL : SCHEDULE_HORIZONTAL;
        if (cfg->ckpt_tier == CKPT_AUTO) cfg->ckpt_tier = cfg->schedule == SCHEDULE_VERTICAL ? CKPT_HOST : CKPT_DEVICE;
        if (cfg->grads_tier == TIER_NVME && cfg->optim_tier != TIER_NVME && !cfg->offload_auto)
            usage_error("--grads nvme: needs --optimizer nvme (the optimizer reads each shard's gradient with its "
                        "states, in one extent; add --optimizer nvme, or keep --grads host)");
        if (cfg->host_cache && cfg->params_tier != TIER_NVME && !cfg->offload_auto)
            usage_error("--host-cache %s: caches NVMe-resident parameters, but --params is not nvme (drop --host-cache "
                        "or add --params nvme)", format_bytes((char[32]){0}, 32, cfg->host_cache));
        break;
    case CMD_BENCH:
        if (ps.npositional == 0) usage_error("bench: missing benchmark name (accepted: %s)", BENCH_ACCEPTED);
        snprintf(cfg->bench_name, sizeof cfg->bench_name, "%s", ps.positional[0]);
        check_nvme_paths(cfg->nvme_path);
        break;
    case CMD_EVAL:
        if (!cfg->resume[0]) usage_error("eval: missing --resume DIR (usage: %s)", ci->usage);
        if (strcmp(cfg->data, "synthetic") != 0) check_input_path("--data", cfg->data, "a text file or an llm.c .bin token file");
        cfg->seq_given = seen(&ps, "seq");
        cfg->precision_given = seen(&ps, "precision");
        break;
    case CMD_TOKENIZE:
        if (ps.npositional == 0) usage_error("tokenize: missing input file (usage: %s)", ci->usage);
        if (strlen(ps.positional[0]) >= sizeof cfg->tok_in)
            usage_error("tokenize: input path too long (accepted: at most %zu bytes)", sizeof cfg->tok_in - 1);
        snprintf(cfg->tok_in, sizeof cfg->tok_in, "%s", ps.positional[0]);
        if (!cfg->tok_out[0]) usage_error("tokenize %s: missing -o OUT.bin (usage: %s)", cfg->tok_in, ci->usage);
        check_input_path("tokenize: input", cfg->tok_in, "a readable text file");
        if (!ends_with(cfg->tok_out, ".bin"))
            usage_error("-o %s: token files must end in .bin (that is how --data tells them from text)", cfg->tok_out);
        check_output_path("-o", cfg->tok_out);
        break;
    case CMD_NONE: break;
    }
}

// ---------------------------------------------------------------- config_print

static const char *enum_word(const char *values, int idx, char *buf, size_t len) {
    const char *p = values;
    for (int i = 0; i < idx && *p; i++) {
        p += strcspn(p, "|");
        if (*p == '|') p++;
    }
    snprintf(buf, len, "%.*s", (int)strcspn(p, "|"), p);
    return buf;
}

static const char *budget_text(char *buf, size_t len, uint64_t b) {
    if (b == 0) snprintf(buf, len, "none");
    else format_bytes(buf, len, b);
    return buf;
}

static void print_io(const config_t *c, FILE *f) {
    char blk[32], e[16];
    const char *tmp = getenv("TMPDIR");
    fprintf(f, "  io: nvme-path %s%s, qd %d, block %s, engine %s, numa ",
            c->nvme_path[0] ? c->nvme_path : (tmp && *tmp ? tmp : "/tmp"), c->nvme_path[0] ? "" : " (default)",
            c->nvme_qd, format_bytes(blk, sizeof blk, c->io_block), enum_word("auto|uring|psync", c->io_engine, e, sizeof e));
    if (c->numa_node < 0) fprintf(f, "auto");
    else fprintf(f, "%d", c->numa_node);
    fprintf(f, "%s%s%s\n", c->io_sqpoll ? ", sqpoll" : "", c->io_verify ? ", verify" : "", c->keep_nvme ? ", keep-nvme" : "");
}

void config_print(const config_t *c, FILE *f) {
    char b1[32], b2[32], w[16];
    const command_info_t *ci = command_of(c->command);
    const char *cmd = ci ? ci->name : "config";
    if (c->command == CMD_TOKENIZE) {
        fprintf(f, "tiertrain tokenize: %s -> %s\n", c->tok_in, c->tok_out);
        return;
    }
    if (c->command == CMD_BENCH) {
        fprintf(f, "tiertrain bench %s: threads ", c->bench_name);
        if (c->threads) fprintf(f, "%d", c->threads);
        else fprintf(f, "all cores");
        if (strcmp(c->bench_name, "io") == 0) fprintf(f, ", size %s", format_bytes(b1, sizeof b1, c->bench_size));
        fputc('\n', f);
        if (strcmp(c->bench_name, "io") == 0) print_io(c, f);
        return;
    }
    // Model: say whether the shape is the preset's or was changed by flags.
    config_t p;
    memcpy(&p, c, sizeof p);
    int custom = model_preset(c->preset, &p) != 0 || p.L != c->L || p.C != c->C || p.NH != c->NH || p.NKV != c->NKV ||
                 p.F != c->F || p.V != c->V || p.T != c->T;
    fprintf(f, "tiertrain %s: model %s%s: L %d, C %d, heads %d (kv %d, size %d), ffn %d, vocab %d, seq %d, %s, "
               "rope %g, norm-eps %g, %s, seed %llu\n",
            cmd, c->preset, custom ? " (changed by flags)" : "", c->L, c->C, c->NH, c->NKV, c->NH ? c->C / c->NH : 0,
            c->F, c->V, c->T, c->tie ? "tied" : "untied", c->rope_theta, c->norm_eps,
            enum_word("bf16|fp32", c->precision, w, sizeof w), (unsigned long long)c->seed);
    fprintf(f, "  data: %s; batch %d x seq %d x accum %d = %lld tokens/step; %d steps; eval ", c->data, c->B, c->T,
            c->accum, (long long)c->B * c->T * c->accum, c->steps);
    if (c->eval_every) fprintf(f, "every %d steps x %d batches\n", c->eval_every, c->eval_batches);
    else fprintf(f, "never\n");
    fprintf(f, "  optimizer: adamw, lr %g -> %g (warmup %d, cosine), wd %g, clip ", c->lr, c->min_lr, c->warmup, c->wd);
    if (c->clip > 0) fprintf(f, "%g", c->clip);
    else fprintf(f, "off");
    fprintf(f, ", betas %g %g, eps %g\n", c->beta1, c->beta2, c->eps);
    fprintf(f, "  run: device %s, threads ", enum_word("auto|cpu|cuda", c->device, w, sizeof w));
    if (c->threads) fprintf(f, "%d", c->threads);
    else fprintf(f, "all cores");
    fprintf(f, ", hbm-budget %s, host-budget %s, log %s%s\n", budget_text(b1, sizeof b1, c->hbm_budget),
            budget_text(b2, sizeof b2, c->host_budget), c->log_path[0] ? c->log_path : "none", c->quiet ? ", quiet" : "");
    if (c->offload_auto) {
        fprintf(f, "  tiers: --offload auto (chosen below), prefetch %d", c->prefetch);
    } else {
        char w2[32], w3[32];
        fprintf(f, "  tiers: params %s, grads %s, optimizer %s, prefetch %d",
                enum_word("device|host|nvme", (int)c->params_tier, w, sizeof w),
                enum_word("device|host|nvme", (int)c->grads_tier, w2, sizeof w2),
                enum_word("device|host|nvme", (int)c->optim_tier, w3, sizeof w3), c->prefetch);
    }
    fprintf(f, ", schedule %s, checkpoints %s", enum_word("auto|horizontal|vertical", (int)c->schedule, w, sizeof w),
            enum_word("auto|device|host", (int)c->ckpt_tier, b2, sizeof b2));
    if (c->host_cache) fprintf(f, ", host-cache %s", format_bytes(b1, sizeof b1, c->host_cache));
    fputc('\n', f);
    if (c->save_dir[0] || c->resume[0]) {
        fprintf(f, "  save/resume:");
        if (c->save_dir[0]) {
            fprintf(f, " save %s ", c->save_dir);
            if (c->save_every) fprintf(f, "every %d steps and at the end", c->save_every);
            else fprintf(f, "at the end");
            if (c->keep_last) fprintf(f, " (keep the newest %d, %s)", c->keep_last, c->save_bf16 ? "bf16" : "fp32");
            else fprintf(f, " (keep all, %s)", c->save_bf16 ? "bf16" : "fp32");
        }
        if (c->resume[0]) fprintf(f, "%s resume %s", c->save_dir[0] ? ";" : "", c->resume);
        fputc('\n', f);
    }
    print_io(c, f);
}
