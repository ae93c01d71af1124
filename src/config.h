// config.h — the resolved run configuration: every flag lands in one field here.
// cli.c fills it from the flag table (defaults, preset, then explicit flags) and
// validates it; everything downstream only reads it. Nothing here allocates.
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include "io.h" // io_engine_kind_t

// RoPE's frequency scaling, Hugging Face's config.json rope_scaling (model.c model_rope_freqs
// applies it): ROPE_PLAIN none; ROPE_LINEAR divides every frequency by factor; ROPE_LLAMA3
// (Llama 3.1 and 3.2) divides those whose wavelength is above orig_ctx / low_freq by factor,
// keeps those below orig_ctx / high_freq, and blends the ones between.
typedef enum { ROPE_PLAIN = 0, ROPE_LINEAR, ROPE_LLAMA3 } rope_type_t;
typedef struct {
    rope_type_t type;
    double factor, low_freq, high_freq; // factor, low_freq_factor, high_freq_factor
    int orig_ctx;                       // original_max_position_embeddings
} rope_scaling_t;

#define TT_PATH_MAX 4096
#define TT_ACCUM_MAX 65536 // --accum's largest value (cli_table.c), which plan's suggestions keep to

typedef enum { CMD_NONE = 0, CMD_TRAIN, CMD_PLAN, CMD_BENCH, CMD_TOKENIZE, CMD_EVAL, CMD_REPORT } command_t;
typedef enum { PREC_BF16 = 0, PREC_FP32 } precision_t;
// --cpu-gemm: the CPU backend's matrix products (kernels/cpu/gemm.h)
typedef enum { CPU_GEMM_AUTO = 0, CPU_GEMM_FMA } cpu_gemm_t;
typedef enum { DEVICE_AUTO = 0, DEVICE_CPU, DEVICE_CUDA } device_kind_t;
typedef enum { TIER_DEVICE = 0, TIER_HOST, TIER_NVME } tier_kind_t;
// "device", "host" or "nvme": the flags' word for a tier (plans, reports, benches).
const char *tier_kind_name(tier_kind_t k);
typedef enum { SCHEDULE_AUTO = 0, SCHEDULE_HORIZONTAL, SCHEDULE_VERTICAL } schedule_t;
typedef enum { ACTS_AUTO = 0, ACTS_DEVICE, ACTS_HOST } acts_tier_t;
// --update: when a host or NVMe optimizer updates a shard (tier_layout resolves auto)
typedef enum { UPDATE_AUTO = 0, UPDATE_AFTER, UPDATE_BACKWARD } update_when_t;

typedef struct {
    command_t command;
    // ---- model (preset first, then explicit flags override any dimension)
    char preset[16];         // --model
    int L;                   // --layers
    int C;                   // --dim
    int NH;                  // --heads
    int NKV;                 // --kv-heads
    int F;                   // --ffn
    int V;                   // --vocab
    int T;                   // --seq
    int max_pos;             // no flag: the context a saved config.json states (max_position_embeddings) where
                             // over --seq: --init-from's folder's or --resume's checkpoint's (0: --seq)
    int tie;                 // --tie: LM head shares the embedding
    double rope_theta;       // --rope-theta (10000)
    rope_scaling_t rope_scaling; // no flag: --init-from's config.json rope_scaling, or --resume's checkpoint's
    double norm_eps;         // --norm-eps (1e-5)
    precision_t precision;   // --precision bf16|fp32
    uint64_t seed;           // --seed
    // ---- data
    char data[TT_PATH_MAX];  // --data synthetic|FILE.txt|FILE.bin
    int B;                   // --batch (sequences per micro-batch)
    int accum;               // --accum (micro-batches per step, on each rank)
    int ranks;               // ranks of the world (train: the launcher's; plan: --ranks N); 0 or 1: one
    int local_ranks;         // of which on this node (train: the launcher's; plan: all of them); 0: ranks
    int local_rank;          // this process among them (the GPU it takes: --device cuda)
    int steps;               // --steps
    int eval_every;          // --eval-every (0 = never)
    int eval_batches;        // --eval-batches
    // ---- optimizer
    double lr, min_lr, wd, clip, beta1, beta2, eps;
    int warmup;
    // ---- run
    device_kind_t device;    // --device
    int threads;             // --threads (0 = all cores)
    cpu_gemm_t cpu_gemm;     // --cpu-gemm
    uint64_t hbm_budget;     // --hbm-budget bytes (0 = no cap)
    uint64_t host_budget;    // --host-budget bytes (0 = no cap)
    // ---- tiers: where each state's home copy lives
    tier_kind_t params_tier; // --params device|host|nvme (BF16 compute copy)
    tier_kind_t grads_tier;  // --grads device|host (FP32 gradients)
    tier_kind_t optim_tier;  // --optimizer device|host|nvme (FP32 master, m, v)
    int prefetch;            // --prefetch: shards fetched ahead of their use
    update_when_t update_when; // --update auto|after|backward
    int offload_auto;        // --offload auto: plan picks the placement (overrides the three above)
    schedule_t schedule;     // --schedule; resolved by cli_parse (auto: vertical when accum > 1)
    acts_tier_t acts_tier;   // --checkpoints; resolved by cli_parse (auto: host when vertical)
    int schedule_auto, acts_auto; // --schedule / --checkpoints were auto (as resolved above)
    char recompute_arg[16];  // --recompute as given: auto|full|none|N (N: blocks recomputed)
    int kept_blocks;         // blocks 0..kept_blocks-1 keep their forward intermediates for the backward
                             // instead of recomputing them (0: every block recomputes, the zero default)
    int recompute_auto;      // --recompute auto: plan_recompute_auto sets kept_blocks
    int kept_bf16;           // kept intermediates stored as BF16 (plan_recompute_auto, in bf16 mode only, when that
                             // keeps more); every reader takes it as it is
    int logits_kept;         // the head keeps every vocabulary quantum's logits for its backward (plan_recompute_auto,
                             // --recompute none; only for a vocabulary of several quanta, V > CE_QUANTUM)
    uint64_t host_cache;     // --host-cache bytes: host copies of NVMe-resident parameters (0 = none)
    char host_cache_arg[32]; // --host-cache as given: none|auto|SIZE (cli_parse resolves host_cache)
    int host_cache_auto;     // --host-cache auto: plan_host_cache_auto sets host_cache
    uint64_t optim_cache;    // --optimizer-cache bytes: host copies of NVMe optimizer states (0 = none)
    char optim_cache_arg[32]; // --optimizer-cache as given: none|auto|SIZE (cli_parse resolves optim_cache)
    int optim_cache_auto;    // --optimizer-cache auto: plan_optim_cache_auto sets optim_cache
    char profile_path[TT_PATH_MAX]; // --profile ("" = $XDG_CACHE_HOME or ~/.cache /tiertrain/profile.json)
    // ---- io / host tier
    char nvme_path[TT_PATH_MAX]; // --nvme-path DIR[,DIR...]
    int nvme_qd;             // --nvme-qd (32)
    uint64_t io_block;       // --io-block bytes (1 MiB)
    io_engine_kind_t io_engine; // --io-engine
    int io_sqpoll;           // --io-sqpoll
    int io_verify;           // --io-verify
    int keep_nvme;           // --keep-nvme
    int numa_node;           // --numa-node (-1 = auto)
    // ---- output
    char log_path[TT_PATH_MAX]; // --log FILE.jsonl ("" = none)
    char trace_path[TT_PATH_MAX]; // --trace FILE.json ("" = none)
    int quiet;               // --quiet
    // ---- checkpoints
    char save_dir[TT_PATH_MAX];   // --save DIR ("" = none)
    int save_every;          // --save-every N steps (0 = only at the end)
    int keep_last;           // --keep-last K checkpoints (0 = all)
    int save_bf16;           // --save-dtype bf16 (model.safetensors in BF16; the FP32 master goes with the optimizer state)
    char resume[TT_PATH_MAX];     // --resume DIR ("" = none): a checkpoint folder, or a --save DIR (its latest)
    char init_from[TT_PATH_MAX];  // --init-from DIR ("" = none): a Hugging Face Llama folder (hf.h)
    uint64_t eval_tokens;    // --eval-tokens N (tiertrain eval; 0 = all)
    int seq_given, precision_given; // tiertrain eval: --seq / --precision given (else the checkpoint's)
    int model_resumed;        // train, plan: the model is --resume's checkpoint's (no --model; cli.c apply_resume)
    int shape_given, batch_given, steps_given; // bench train: a shape flag, --batch, --steps given
    int optim_cache_given;   // bench capacity: --optimizer-cache given (else it takes auto)
    // ---- bench
    char bench_name[32];     // tiertrain bench NAME
    uint64_t bench_size;     // --size (bench io, bench calibrate)
    int bench_quick;         // --quick (bench calibrate)
    uint64_t bench_params;   // --adam-params (bench adam)
    // ---- tokenize
    char tok_in[TT_PATH_MAX];  // tiertrain tokenize IN.txt / tiertrain report RUN.jsonl
    char tok_out[TT_PATH_MAX]; // -o OUT.bin (tokenize) / OUT.html (report)
} config_t;

// Parses argv into cfg (defaults, preset, flags), validates every value and the shape.
// On bad input prints one line "tiertrain: ..." to stderr and exits 2; --help/--version
// print and exit 0. Returns only with a valid configuration.
void cli_parse(int argc, char **argv, config_t *cfg);
// Prints the resolved configuration (the first thing every run prints).
void config_print(const config_t *cfg, FILE *f);
// Where the model's shape came from: "--init-from" (its folder's config.json), "--resume"
// (the checkpoint's, cli.c apply_resume), or NULL (the preset and the shape flags).
const char *config_model_source(const config_t *cfg);
// What --schedule auto and --checkpoints auto stand for at cfg's --accum (where
// schedule_auto / acts_auto say they were auto): vertical when --accum > 1, and then host
// checkpoints. cli_parse resolves with it, and plan advice after changing --accum.
void config_resolve_schedule(config_t *cfg);
// Nothing kept for the backward: every block recomputes, the head computes its logits again
// (kept_blocks, kept_bf16, logits_kept 0: what --recompute full runs and auto starts from).
void config_keep_nothing(config_t *cfg);
// `bench train`'s own defaults where the flags left them (shape_given, seq_given, batch_given):
// shape M (L 12, C 768, 12 heads, F 2048, V 256), T 256, B 4. cli_parse applies them before it
// checks the shape and resolves --recompute, so that `--recompute none` or N counts M's blocks.
void config_bench_train_defaults(config_t *cfg);
