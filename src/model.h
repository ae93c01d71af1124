// model.h — the Llama-style model's shapes and its parameter layout.
// The layout is a table of shards (the embedding's vocabulary chunks, one per block, the
// final norm, the LM head's vocabulary chunks), each a list of named tensors at element
// offsets, each shard padded to 4 KiB in every dtype it is stored in. A shard is the unit
// the tiers move; nothing here assumes shards share a buffer — callers hold one pointer per
// shard and per state.
// Vocabulary chunks: the embedding and the LM head are cut by rows into chunks of a whole
// number of CE_QUANTUM rows, the most that fit in the largest block (at least one quantum),
// so that slots and staging never scale with the vocabulary. The cut depends on the shape
// alone (never on budgets or placement). A cut tensor is one tensor of the checkpoint: its
// pieces (tensor_t.row0 > 0 for all but the first) follow each other in shard order.
// Does not allocate parameter memory (the backend and the tiers do) or know where it lives.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"

#define SHARD_ALIGN_BYTES 4096
// Elements per padding unit: 2048 BF16 = 4 KiB, so a shard is 4 KiB-aligned as BF16 and FP32.
#define SHARD_ALIGN_ELEMS 2048

enum { TENSOR_MAX = 10, SHARD_NAME_MAX = 32 };

typedef enum { SHARD_EMBED = 0, SHARD_BLOCK, SHARD_HEAD } shard_kind_t;

// Block tensor indices (in storage order inside a block shard).
enum { BW_ATTN_NORM = 0, BW_Q, BW_K, BW_V, BW_O, BW_MLP_NORM, BW_GATE, BW_UP, BW_DOWN, BW_COUNT };
enum { HW_NORM = 0 }; // the head shard's one tensor: the final norm's weights

typedef struct {
    char name[48];     // e.g. "attn.wq"; export names are derived from kind/layer + this
    int rows, cols;    // (rows, cols); a vector has rows = 1
    int row0, full_rows; // a piece of a cut tensor: its rows [row0, row0 + rows) of full_rows
    int init_shard, init_tensor; // the init stream: the same for every piece of a tensor
    size_t offset;     // element offset inside the shard
    size_t numel;
    int decay;         // weight decay applies (matrices only)
    float init_std;    // 0 → ones (norm weights)
} tensor_t;

typedef struct {
    char name[SHARD_NAME_MAX]; // "embed" ("embed.1"), "block.3", "head" (the final norm), "lm_head" ("lm_head.1")
    shard_kind_t kind;         // SHARD_HEAD: the final norm and the LM head's chunks
    int layer;                 // block index; the vocabulary chunk of an embed or LM head shard; -1 for the norm
    int ntensors;
    tensor_t tensors[TENSOR_MAX];
    size_t numel;              // sum of tensor sizes
    size_t numel_padded;       // rounded up to SHARD_ALIGN_ELEMS
} shard_t;

typedef struct {
    int L, C, NH, NKV, HS, F, V, T, tie;
    float norm_eps;
    double rope_theta;
    rope_scaling_t rope_scaling;
    int nshards;               // E + L + 1 (+ E untied): embed chunks, blocks 0..L-1, norm, LM head chunks
    int vchunks, vrows;        // E vocabulary chunks of vrows rows each (the last: the rest)
    int mrows;                 // rows per MLP chunk (model_mlp_rows)
    shard_t *shards;           // (nshards)
    size_t num_params;         // real parameters (tied head not counted twice)
    size_t numel_padded;       // Σ shard numel_padded
    size_t max_shard_numel;    // largest numel_padded
} model_t;

// Sets the model dimensions of cfg from a preset name (tiny, small, 125m, ... 70b).
// Returns 0, or -1 when the name is unknown.
int model_preset(const char *name, config_t *cfg);
// Comma-separated preset names, for messages and --help.
const char *model_preset_names(void);

// Builds the layout from a validated configuration. Never fails on a valid config.
void model_init(model_t *m, const config_t *cfg);
void model_free(model_t *m); // NULL-safe

static inline int model_embed_shard(const model_t *m, int k) { (void)m; return k; }
static inline int model_block_shard(const model_t *m, int layer) { return m->vchunks + layer; }
// The parameter shards a phase acquires, in order: reps passes, each the forward (embed
// chunks, blocks 0..L-1, the norm, the LM head's chunks 0..E-1 — the embedding's when tied)
// and, with backward, the LM head's chunks again, E-2..0 (the last is held over), then
// blocks L-1..0. Writes uses (NULL: only counts) and returns the count. The trainer's step
// acquires in exactly this order; the scheduler and the plan's replay take it from here.
int model_use_order(const model_t *m, int reps, int backward, int *uses);
// The final norm's shard; the shard holding the LM head's chunk k (the embedding's when tied).
static inline int model_head_shard(const model_t *m) { return m->vchunks + m->L; }
static inline int model_lm_shard(const model_t *m, int k) { return m->tie ? k : m->vchunks + m->L + 1 + k; }
// Rows [*v0, *v0 + *nv) of the vocabulary in chunk k.
void model_vchunk(const model_t *m, int k, int *v0, int *nv);
// Columns of the head's vocabulary quantum q: CE_QUANTUM, fewer for the last.
int model_quantum_cols(const model_t *m, int q);
// The MLP works MODEL_MLP_BYTES of FP32 per (rows, F) intermediate at a time: a block's
// gate, up and h exist for model_mlp_rows(m, N) of its N rows at once (the backward computes
// them again chunk by chunk, and its three weight gradients sum over the chunks in order).
// m->mrows depends on F alone, a multiple of 128 rows (OpenBLAS's output tile on a CPU without
// FMA, so that every other product keeps its bits there): the shape, never a budget, decides
// the bits. With FMA the chunking changes no bit at all (kernels/cpu/gemm.h), and on AMX tiles
// none where the chunks are multiples of 32 rows, as these are (a tile product per 32 rows).
// TT_TEST_MLP_ROWS=R (a testing hook, R > 0) sets it.
#define MODEL_MLP_BYTES ((size_t)64 << 20)
static inline int model_mlp_rows(const model_t *m, int N) { return N < m->mrows ? N : m->mrows; }
// The chunks N rows make (1: the MLP runs on all of them at once).
static inline int model_mlp_chunks(const model_t *m, int N) {
    return N > m->mrows ? (N + m->mrows - 1) / m->mrows : 1;
}
// Σ numel_padded of the embedding's chunks.
size_t model_embed_numel(const model_t *m);

// Deterministic init of one shard's FP32 master weights from seed: each tensor has its own
// splitmix64 stream seeded from (seed, shard, tensor), so a shard can be initialized alone,
// in any order, on any tier. Writes numel_padded floats (padding zeroed).
void model_init_shard(const model_t *m, int shard, uint64_t seed, float *master);
// The same for elements [lo, lo + n) of the shard only, into dst[0..n): the very values
// model_init_shard writes there, so that a shard can be initialized a chunk at a time.
void model_init_range(const model_t *m, int shard, uint64_t seed, size_t lo, size_t n, float *dst);

// RoPE's inverse frequencies (HS/2): theta^(-2i/HS), in double, then m->rope_scaling as
// Hugging Face's rope_type "linear" and "llama3" apply it (kernels.h rope_table_freq).
void model_rope_freqs(const model_t *m, double *inv_freq);
// "rope 500000" or "rope 500000, llama3 x32 from 8192 (low 1, high 4)": the configuration's words.
void model_rope_text(double theta, const rope_scaling_t *s, char *buf, size_t len);

// Hugging Face Llama name of a tensor, e.g. "model.layers.3.self_attn.q_proj.weight".
void model_tensor_hf_name(const model_t *m, int shard, int tensor, char *buf, size_t len);
// The part of tensor te inside a shard's elements [lo, lo + n) (a chunk): [*a, *b) and 1, or 0.
int model_tensor_in_range(const tensor_t *te, size_t lo, size_t n, size_t *a, size_t *b);
