// cli_table.c — the flag table (one row per flag: name, kind, field, default, range, group,
// subcommands, help) and the subcommand table: the single source of parsing (cli.c), help and
// the README's flag reference (cli_help.c). Also the helpers that describe a row in words.
#include "cli_table.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model.h" // uses: model_preset_names

const char *const cli_group_name[G_COUNT] = {
    "general", "model", "data", "optimizer", "run", "io", "output", "bench", "tokenize",
};
const char *const cli_group_title[G_COUNT] = {
    "General", "Model", "Data", "Optimizer (AdamW, cosine schedule)", "Run (device, threads, memory budgets)",
    "I/O and host tier", "Output", "Bench", "Tokenize",
};

// ---------------------------------------------------------------- the table

#define FIELD(f) .off = offsetof(config_t, f), .fsize = sizeof(((config_t *)0)->f)
#define TP (CLI_CMD_TRAIN | CLI_CMD_PLAN)
#define TPB (CLI_CMD_TRAIN | CLI_CMD_PLAN | CLI_CMD_BENCH)
#define TPE (CLI_CMD_TRAIN | CLI_CMD_PLAN | CLI_CMD_EVAL)
#define TPBE (CLI_CMD_TRAIN | CLI_CMD_PLAN | CLI_CMD_BENCH | CLI_CMD_EVAL)
#define DIM_MAX 1048576.0

const flag_t cli_flags[] = {
    // ---- general
    {.name = "help", .short_name = 'h', .kind = FK_HELP, .group = G_GENERAL,
     .help = "show help and exit (tiertrain COMMAND --help: the flags COMMAND accepts)"},
    {.name = "version", .kind = FK_VERSION, .group = G_GENERAL, .help = "print the version and exit"},
    {.name = "help-markdown", .kind = FK_MARKDOWN, .group = G_GENERAL, .hidden = 1,
     .help = "print the flag reference as Markdown (the README section)"},
    // ---- model
    {.name = "model", .metavar = "PRESET", .kind = FK_PRESET, FIELD(preset), .def = "small",
     .group = G_MODEL, .cmds = TPB,
     .help = "shape preset; the shape flags below override it, in any order"},
    {.name = "layers", .metavar = "N", .kind = FK_INT, FIELD(L), .def_show = "from --model", .lo = 1, .hi = 4096,
     .group = G_MODEL, .cmds = TPB, .help = "transformer blocks (L)"},
    {.name = "dim", .metavar = "N", .kind = FK_INT, FIELD(C), .def_show = "from --model", .lo = 2, .hi = DIM_MAX,
     .group = G_MODEL, .cmds = TPB, .help = "model width (C); a multiple of --heads with an even head size"},
    {.name = "heads", .metavar = "N", .kind = FK_INT, FIELD(NH), .def_show = "from --model", .lo = 1, .hi = 65536,
     .group = G_MODEL, .cmds = TPB, .help = "query heads (NH); a multiple of --kv-heads"},
    {.name = "kv-heads", .metavar = "N", .kind = FK_INT, FIELD(NKV), .def_show = "from --model", .lo = 1, .hi = 65536,
     .group = G_MODEL, .cmds = TPB, .help = "key/value heads (NKV, grouped-query attention)"},
    {.name = "ffn", .metavar = "N", .kind = FK_INT, FIELD(F), .def_show = "from --model", .lo = 1, .hi = 4 * DIM_MAX,
     .group = G_MODEL, .cmds = TPB, .help = "SwiGLU hidden size (F)"},
    {.name = "vocab", .metavar = "N", .kind = FK_INT, FIELD(V), .def_show = "from --model", .lo = 2, .hi = 16777216,
     .group = G_MODEL, .cmds = TPB,
     .help = "vocabulary size (V); >= 128 for synthetic data, >= 256 for text files"},
    {.name = "seq", .metavar = "N", .kind = FK_INT, FIELD(T), .def_show = "from --model", .lo = 1, .hi = DIM_MAX,
     .group = G_MODEL, .cmds = TPBE, .help = "sequence length (T)"},
    {.name = "tie", .kind = FK_SWITCH, FIELD(tie), .group = G_MODEL, .cmds = TPB,
     .help = "tie the LM head to the token embedding"},
    {.name = "rope-theta", .metavar = "X", .kind = FK_DOUBLE, FIELD(rope_theta), .def = "10000",
     .lo = 0, .lo_open = 1, .hi = HUGE_VAL, .group = G_MODEL, .cmds = TPB, .help = "RoPE base"},
    {.name = "norm-eps", .metavar = "X", .kind = FK_DOUBLE, FIELD(norm_eps), .def = "1e-5",
     .lo = 0, .lo_open = 1, .hi = 1, .hi_open = 1, .group = G_MODEL, .cmds = TPB, .help = "RMSNorm epsilon"},
    {.name = "precision", .metavar = "bf16|fp32", .kind = FK_ENUM, FIELD(precision), .def = "bf16",
     .values = "bf16|fp32", .group = G_MODEL, .cmds = TPBE,
     .help = "compute precision; fp32 is the exact mode for reference checks"},
    {.name = "seed", .metavar = "N", .kind = FK_U64, FIELD(seed), .def = "1337", .group = G_MODEL, .cmds = TPB,
     .help = "seed of the weight init (the synthetic corpus has its own fixed seed)"},
    // ---- data
    {.name = "data", .metavar = "SOURCE", .kind = FK_STRING, FIELD(data), .def = "synthetic",
     .accepts = "synthetic, a text file, or an llm.c .bin token file", .group = G_DATA, .cmds = TPBE,
     .help = "training data: synthetic (built in), a text file (bytes are tokens) or an llm.c .bin token file"},
    {.name = "batch", .metavar = "N", .kind = FK_INT, FIELD(B), .def = "4", .lo = 1, .hi = 65536,
     .group = G_DATA, .cmds = TPB, .help = "sequences per micro-batch (B)"},
    {.name = "accum", .metavar = "N", .kind = FK_INT, FIELD(accum), .def = "1", .lo = 1, .hi = TT_ACCUM_MAX,
     .group = G_DATA, .cmds = TPB, .help = "micro-batches per optimizer step (gradient accumulation)"},
    {.name = "steps", .metavar = "N", .kind = FK_INT, FIELD(steps), .def = "60", .lo = 1, .hi = INT_MAX,
     .group = G_DATA, .cmds = TPB, .help = "optimizer steps"},
    {.name = "eval-every", .metavar = "N", .kind = FK_INT, FIELD(eval_every), .def = "20", .lo = 0, .hi = INT_MAX,
     .group = G_DATA, .cmds = TP, .help = "validation loss every N steps and at the last, on the held-out 5% (0 = never)"},
    {.name = "eval-batches", .metavar = "N", .kind = FK_INT, FIELD(eval_batches), .def = "4", .lo = 1, .hi = 65536,
     .group = G_DATA, .cmds = TP, .help = "micro-batches per validation"},
    // ---- optimizer
    {.name = "lr", .metavar = "X", .kind = FK_DOUBLE, FIELD(lr), .def = "1e-3", .lo = 0, .lo_open = 1, .hi = 10,
     .group = G_OPTIM, .cmds = TPB, .help = "peak learning rate, reached after --warmup steps"},
    {.name = "min-lr", .metavar = "X", .kind = FK_DOUBLE, FIELD(min_lr), .def = "1e-4", .lo = 0, .hi = 10,
     .group = G_OPTIM, .cmds = TPB,
     .help = "learning rate at the end of the cosine decay; at most --lr (the default is lowered to --lr)"},
    {.name = "warmup", .metavar = "N", .kind = FK_INT, FIELD(warmup), .def = "10", .lo = 0, .hi = INT_MAX,
     .group = G_OPTIM, .cmds = TPB, .help = "linear warm-up steps"},
    {.name = "wd", .metavar = "X", .kind = FK_DOUBLE, FIELD(wd), .def = "0.1", .lo = 0, .hi = 10,
     .group = G_OPTIM, .cmds = TPB, .help = "weight decay (matrices only; not norms)"},
    {.name = "clip", .metavar = "X", .kind = FK_DOUBLE, FIELD(clip), .def = "1.0", .lo = 0, .hi = HUGE_VAL,
     .group = G_OPTIM, .cmds = TPB, .help = "clip the global gradient norm to X (0 = no clipping)"},
    {.name = "beta1", .metavar = "X", .kind = FK_DOUBLE, FIELD(beta1), .def = "0.9", .lo = 0, .hi = 1, .hi_open = 1,
     .group = G_OPTIM, .cmds = TPB, .help = "Adam first-moment decay"},
    {.name = "beta2", .metavar = "X", .kind = FK_DOUBLE, FIELD(beta2), .def = "0.95", .lo = 0, .hi = 1, .hi_open = 1,
     .group = G_OPTIM, .cmds = TPB, .help = "Adam second-moment decay"},
    {.name = "eps", .metavar = "X", .kind = FK_DOUBLE, FIELD(eps), .def = "1e-8", .lo = 0, .lo_open = 1, .hi = 1,
     .group = G_OPTIM, .cmds = TPB, .help = "Adam epsilon"},
    // ---- run
    {.name = "device", .metavar = "auto|cpu|cuda", .kind = FK_ENUM, FIELD(device), .def = "auto",
     .values = "auto|cpu|cuda", .group = G_RUN, .cmds = TPBE,
     .help = "where compute runs; auto = cuda when a GPU is usable, else cpu"},
    {.name = "params", .metavar = "device|host|nvme", .kind = FK_ENUM, FIELD(params_tier), .def = "device",
     .values = "device|host|nvme", .group = G_RUN, .cmds = TPB,
     .help = "home of the BF16 parameters; host/nvme stream each shard to the device before its use"},
    {.name = "grads", .metavar = "device|host|nvme", .kind = FK_ENUM, FIELD(grads_tier), .def = "device",
     .values = "device|host|nvme", .group = G_RUN, .cmds = TPB,
     .help = "home of the FP32 gradients; host: each shard's gradients visit the device for its backward; nvme: "
             "as host, and each shard's final gradient goes to NVMe next to its optimizer states, so they need no "
             "RAM (needs --optimizer nvme)"},
    {.name = "optimizer", .metavar = "device|host|nvme", .kind = FK_ENUM, FIELD(optim_tier), .def = "host",
     .values = "device|host|nvme", .group = G_RUN, .cmds = TPB,
     .help = "home of the FP32 master weights and Adam moments (12 bytes/parameter), where AdamW runs: device "
             "on the device after the backward, host on the CPU overlapping the next forward (with the CPU "
             "backend: before it, on every core), nvme streams them through the host a shard at a time"},
    {.name = "offload", .metavar = "manual|auto", .kind = FK_ENUM, FIELD(offload_auto), .def = "manual",
     .values = "manual|auto", .group = G_RUN, .cmds = TP,
     .help = "auto: the first placement that fits the budgets and RAM, in order of the traffic it adds "
             "(overrides --params, --grads, --optimizer)"},
    {.name = "ranks", .metavar = "N", .kind = FK_INT, FIELD(ranks), .def = "1", .lo = 1, .hi = 65536,
     .group = G_RUN, .cmds = CLI_CMD_PLAN, .help = "what each of N ranks (mpirun -np N on one node) would hold and "
     "move; train takes the launcher's"},
    {.name = "update", .metavar = "auto|after|backward", .kind = FK_ENUM, FIELD(update_when), .def = "auto",
     .values = "auto|after|backward", .group = G_RUN, .cmds = TPB,
     .help = "when the host or NVMe optimizer updates a shard: after = once the backward ends, beside the next "
             "forward; backward = as soon as the shard's gradient is final, beside the rest of the backward (with "
             "--grads nvme the gradient then never goes to NVMe; needs --clip 0, one rank, the cpu backend; the same "
             "bits); auto = backward where it may run, else after"},
    {.name = "prefetch", .metavar = "N", .kind = FK_INT, FIELD(prefetch), .def = "2", .lo = 0, .hi = 64,
     .group = G_RUN, .cmds = TPB, .help = "streamed parameter shards fetched ahead of their use"},
    {.name = "schedule", .metavar = "auto|horizontal|vertical", .kind = FK_ENUM, FIELD(schedule), .def = "auto",
     .values = "auto|horizontal|vertical", .group = G_RUN, .cmds = TPB,
     .help = "micro-batch order: horizontal runs each micro-batch through the whole model; vertical runs every "
             "micro-batch through block l before block l+1, so each streamed shard crosses each link once per "
             "step; auto = vertical when --accum > 1"},
    {.name = "checkpoints", .metavar = "auto|device|host", .kind = FK_ENUM, FIELD(acts_tier), .def = "auto",
     .values = "auto|device|host", .group = G_RUN, .cmds = TPB,
     .help = "where the block-input activation checkpoints live; auto = host for the vertical schedule, else device"},
    {.name = "recompute", .metavar = "auto|full|none|N", .kind = FK_STRING, FIELD(recompute_arg), .def = "auto",
     .accepts = "auto, full, none, or a number of blocks 0..layers", .group = G_RUN, .cmds = TPB,
     .help = "blocks whose forward the backward recomputes from their checkpoint; the others keep their "
             "intermediates (faster, more device memory; the same bits either way): full = every block, none = "
             "no block (and the head keeps every logit), auto = as few as the budgets and memory allow"},
    {.name = "host-cache", .metavar = "none|auto|SIZE", .kind = FK_STRING, FIELD(host_cache_arg), .def = "none",
     .accepts = "none, auto, or a size such as 8G", .group = G_RUN, .cmds = TPB,
     .help = "host memory for copies of NVMe-resident parameters, kept by next use and written through "
             "(--params nvme); auto = as many shards as RAM holds once the run fits (15% kept free), after "
             "--optimizer-cache auto has taken its share; none = 0"},
    {.name = "optimizer-cache", .metavar = "none|auto|SIZE", .kind = FK_STRING, FIELD(optim_cache_arg),
     .def = "none", .accepts = "none, auto, or a size such as 8G", .group = G_RUN, .cmds = TPB,
     .help = "host memory for the first NVMe-resident optimizer states the update takes, kept there after the "
             "first update (never written back), so that each step reads and writes 12 bytes less per cached "
             "parameter (--optimizer nvme); auto = "
             "what RAM has to spare once the run fits (15% kept free), none = 0"},
    {.name = "profile", .metavar = "FILE", .kind = FK_STRING, FIELD(profile_path), .def = "",
     .def_show = "~/.cache/tiertrain/profile.json", .accepts = "a file path", .group = G_RUN, .cmds = TPB,
     .help = "calibration profile (measured rates) for the plan's predicted floor; bench calibrate writes it"},
    {.name = "threads", .metavar = "N", .kind = FK_INT, FIELD(threads), .def = "0",
     .lo = 0, .hi = 4096, .group = G_RUN, .cmds = TPB | CLI_CMD_EVAL, .help = "CPU threads (0 = $OMP_NUM_THREADS when set, else all cores)"},
    {.name = "cpu-gemm", .metavar = "auto|fma", .kind = FK_ENUM, FIELD(cpu_gemm), .def = "auto", .values = "auto|fma",
     .group = G_RUN, .cmds = TPBE,
     .help = "the CPU's matrix products (the layers' and attention's): auto = AMX tiles where the CPU has "
             "AMX-BF16 and the operands are BF16 values (bf16 mode), else the FMA kernels; fma = the FMA kernels "
             "always, whose bits are the same on every AVX2 and AVX-512 CPU"},
    {.name = "hbm-budget", .metavar = "SIZE", .kind = FK_SIZE, FIELD(hbm_budget), .def = "none", .lo = 0,
     .hi = HUGE_VAL, .align = 1, .values = "none", .group = G_RUN, .cmds = TPB,
     .help = "device memory cap (also enforced on the cpu backend); none or 0 = no cap"},
    {.name = "host-budget", .metavar = "SIZE", .kind = FK_SIZE, FIELD(host_budget), .def = "none", .lo = 0,
     .hi = HUGE_VAL, .align = 1, .values = "none", .group = G_RUN, .cmds = TPB,
     .help = "pinned host memory cap; none or 0 = no cap"},
    // ---- io
    {.name = "nvme-path", .metavar = "DIR[,DIR...]", .kind = FK_STRING, FIELD(nvme_path), .def = "",
     .def_show = "$TMPDIR or /tmp", .accepts = "existing writable directories, comma-separated",
     .group = G_IO, .cmds = TPB, .help = "directories for the NVMe tier's files; %r in one is the rank (made when "
     "missing), and without %r each rank of several uses DIR/rank-R"},
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
     .accepts = "a file path in an existing directory", .group = G_OUTPUT, .cmds = TP | CLI_CMD_REPORT,
     .help = "write Chrome trace events to FILE.json (open in Perfetto or chrome://tracing): compute, "
             "parameter copies, NVMe reads and writes, optimizer; report: the trace to add"},
    {.name = "save", .metavar = "DIR", .kind = FK_STRING, FIELD(save_dir), .def = "", .def_show = "none",
     .accepts = "a directory (created if missing) in an existing parent", .group = G_OUTPUT, .cmds = TPB,
     .help = "save checkpoints under DIR (DIR/step-NNNNNNNN/, DIR/latest names the newest): every --save-every "
             "steps, at the end, and on SIGINT/SIGTERM; bench checkpoint: the folder to time (default the first "
             "--nvme-path)"},
    {.name = "save-every", .metavar = "N", .kind = FK_INT, FIELD(save_every), .def = "0", .lo = 0, .hi = INT_MAX,
     .group = G_OUTPUT, .cmds = TP, .help = "checkpoint every N steps (0 = only at the end)"},
    {.name = "keep-last", .metavar = "K", .kind = FK_INT, FIELD(keep_last), .def = "3", .lo = 0, .hi = INT_MAX,
     .group = G_OUTPUT, .cmds = TP, .help = "keep the newest K checkpoints under --save, remove older ones (0 = keep all)"},
    {.name = "save-dtype", .metavar = "fp32|bf16", .kind = FK_ENUM, FIELD(save_bf16), .def = "fp32",
     .values = "fp32|bf16", .group = G_OUTPUT, .cmds = TPB,
     .help = "dtype of model.safetensors (bf16 halves it; resume stays exact: the FP32 master then goes with the "
             "optimizer state)"},
    {.name = "resume", .metavar = "DIR", .kind = FK_STRING, FIELD(resume), .def = "", .def_show = "none",
     .accepts = "a checkpoint folder, a --save directory, or DIR/latest", .group = G_OUTPUT, .cmds = TPE,
     .help = "continue from a checkpoint, with its model and, where no flag says otherwise, its data, --batch, "
             "--accum, schedule and AdamW settings (no flags needed; bit-exact: same losses and params_hash as an "
             "uninterrupted run); eval: the checkpoint to evaluate"},
    {.name = "init-from", .metavar = "DIR", .kind = FK_STRING, FIELD(init_from), .def = "", .def_show = "none",
     .accepts = "a Hugging Face Llama folder: config.json and model.safetensors, or shards with "
                "model.safetensors.index.json", .group = G_OUTPUT, .cmds = TPE,
     .help = "start from published weights (F32, BF16 or F16; the shape comes from its config.json, the optimizer "
             "state starts fresh); eval: the weights to evaluate"},
    {.name = "eval-tokens", .metavar = "N", .kind = FK_U64, FIELD(eval_tokens), .def = "0", .group = G_OUTPUT,
     .cmds = CLI_CMD_EVAL, .help = "tiertrain eval: use the data file's first N tokens (0 = all)"},
    {.name = "quiet", .kind = FK_SWITCH, FIELD(quiet), .group = G_OUTPUT, .cmds = TPE,
     .help = "no per-step lines and no progress lines; the configuration, evaluations and the summary still "
             "print"},
    // ---- bench
    {.name = "size", .metavar = "SIZE", .kind = FK_SIZE, FIELD(bench_size), .def = "4G", .lo = 4096,
     .hi = HUGE_VAL, .align = 4096, .group = G_BENCH, .cmds = CLI_CMD_BENCH,
     .help = "bytes of the bench io and bench calibrate NVMe file (small files hit a virtual disk's cache; calibrate "
             "takes at most half the free space, and is quick under 512M)"},
    {.name = "quick", .kind = FK_SWITCH, FIELD(bench_quick), .group = G_BENCH, .cmds = CLI_CMD_BENCH,
     .help = "bench calibrate: fewer repeats and one NVMe pass over --size (a few seconds; what train and plan run "
             "once when there is no profile)"},
    {.name = "adam-params", .metavar = "N", .kind = FK_SIZE, FIELD(bench_params), .def = "256M", .lo = 4096,
     .hi = 4294967296.0, .group = G_BENCH, .cmds = CLI_CMD_BENCH,
     .help = "parameters the bench adam update runs over (units allowed: 256M = 256·2^20)"},
    // ---- tokenize
    {.name = "out", .short_name = 'o', .metavar = "OUT", .kind = FK_STRING, FIELD(tok_out), .def = "",
     .def_show = "required", .accepts = "a path in an existing directory (tokenize: ending in .bin)",
     .group = G_TOKENIZE, .cmds = CLI_CMD_TOKENIZE | CLI_CMD_REPORT,
     .help = "the file to write: tokenize's token file, report's HTML page"},
};
_Static_assert(sizeof cli_flags / sizeof cli_flags[0] == CLI_NFLAGS, "CLI_NFLAGS (cli_table.h) is the table's length");

const command_info_t cli_commands[] = {
    {"train", CMD_TRAIN, CLI_CMD_TRAIN, "tiertrain train [flags]",
     "train a model (default: the small preset on the built-in synthetic corpus)"},
    {"plan", CMD_PLAN, CLI_CMD_PLAN, "tiertrain plan [flags]",
     "print the resolved configuration and what fits where, without training"},
    {"bench", CMD_BENCH, CLI_CMD_BENCH,
     "tiertrain bench gemm|io|adam|calibrate|overlap|capacity|train|comm|checkpoint [flags]",
     "gemm: matmul kernel GFLOP/s against plain cblas_sgemm (on a GPU: against bare cuBLASLt, 1b's shapes); io: NVMe tier throughput; adam: AdamW update rate against "
     "memory bandwidth; calibrate: measure the rates the plan uses and write the profile; overlap: one model resident, "
     "streamed from host and from NVMe against the plan's floor; capacity: the largest model this machine's tiers hold, "
     "and two real steps of it; train: timed steps of one shape (train's flags; default L 12, C 768, F 2048, V 256, "
     "T 256, B 4): tokens/s, GFLOP/s against the calibrated GEMM rate, and where the step went; comm (under mpirun "
     "-np N): the ranks' all-gather, ordered reduce-scatter and all-reduce over message sizes, algorithm and bus "
     "bandwidth; checkpoint: one step of train's model, then a save and a load of it (into a folder under --save, "
     "removed after) against the disk's rates at that size and the params_hash's"},
    {"eval", CMD_EVAL, CLI_CMD_EVAL, "tiertrain eval --resume DIR|--init-from DIR --data FILE [--seq T] [--eval-tokens N] [--precision fp32|bf16]",
     "mean next-token loss of a checkpoint over a file's tokens, in consecutive non-overlapping windows of T+1"},
    {"tokenize", CMD_TOKENIZE, CLI_CMD_TOKENIZE, "tiertrain tokenize IN.txt -o OUT.bin",
     "write a text file's bytes as llm.c uint16 tokens (vocab 256)"},
    {"report", CMD_REPORT, CLI_CMD_REPORT, "tiertrain report RUN.jsonl [--trace T.json] -o report.html",
     "one self-contained HTML page of a run's --log (or a partial one, or plan's JSON line): loss, step time "
     "against the floor, the tiers, where the time went"},
};
_Static_assert(sizeof cli_commands / sizeof cli_commands[0] == CLI_NCOMMANDS, "CLI_NCOMMANDS (cli_table.h)");

const char *const cli_bench_names[CLI_NBENCH] = {"gemm", "io", "adam", "calibrate", "overlap", "capacity", "train",
                                                  "comm", "checkpoint"};


// ---------------------------------------------------------------- describing a row

void cli_commands_text(unsigned cmds, char *buf, size_t len) {
    if (cmds == 0) { snprintf(buf, len, "all"); return; }
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < CLI_NCOMMANDS; i++)
        if (cmds & cli_commands[i].bit) n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", cli_commands[i].name);
}

const command_info_t *cli_command_of(command_t cmd) {
    for (int i = 0; i < CLI_NCOMMANDS; i++)
        if (cli_commands[i].cmd == cmd) return &cli_commands[i];
    return NULL;
}

// "4096" -> "4K", 67108864 -> "64M": the shortest exact spelling with a binary unit.
void cli_size_short(char *buf, size_t len, uint64_t b) {
    static const char units[] = "KMGTP";
    int u = -1;
    while (b && b % 1024 == 0 && u < 4) { b /= 1024; u++; }
    if (u < 0) snprintf(buf, len, "%llu", (unsigned long long)b);
    else snprintf(buf, len, "%llu%c", (unsigned long long)b, units[u]);
}

// What a flag accepts, in words. long_form: "an integer 1..4096" (errors) vs "1..4096" (help).
void cli_accepted(const flag_t *f, char *buf, size_t len, int long_form) {
    char lo[32], hi[32];
    switch (f->kind) {
    case FK_INT:
        if (f->hi >= INT_MAX && !long_form) snprintf(hi, sizeof hi, ">= %.0f", f->lo); // (errors: the bound)
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
        cli_size_short(lo, sizeof lo, (uint64_t)f->lo);
        if (isinf(f->hi)) {
            if (f->lo > 0) snprintf(range, sizeof range, ">= %s", lo);
            else range[0] = 0;
        } else {
            cli_size_short(hi, sizeof hi, (uint64_t)f->hi);
            snprintf(range, sizeof range, "%s..%s", lo, hi);
        }
        if (f->align > 1) {
            char al[32];
            cli_size_short(al, sizeof al, f->align);
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
void cli_display_name(const flag_t *f, int used_short, char *buf, size_t len) {
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
const char *cli_closest(const char *s, const char *const *names, size_t n) {
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


// ---------------------------------------------------------------- table views

size_t cli_flag_count(void) { return CLI_NFLAGS; }

const char *cli_flag_name(size_t i) {
    static char names[CLI_NFLAGS][40];
    if (i >= CLI_NFLAGS) return NULL;
    if (!names[i][0]) snprintf(names[i], sizeof names[i], "--%s", cli_flags[i].name);
    return names[i];
}

char cli_flag_short(size_t i) { return i < CLI_NFLAGS ? cli_flags[i].short_name : 0; }
int cli_flag_hidden(size_t i) { return i < CLI_NFLAGS ? cli_flags[i].hidden : 0; }
unsigned cli_flag_commands(size_t i) { return i < CLI_NFLAGS ? cli_flags[i].cmds : 0; }

