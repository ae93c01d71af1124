// model.c — presets, the shard layout, deterministic init, export names. See model.h.
#include "model.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h" // CE_QUANTUM
#include "util.h"

// ---------------------------------------------------------------- presets
typedef struct { const char *name; int L, C, NH, NKV, F, V, T; } preset_t;
static const preset_t presets[] = {
    {"tiny", 2, 64, 4, 2, 192, 256, 64},
    {"small", 6, 384, 6, 2, 1024, 256, 256},
    {"125m", 12, 768, 12, 12, 2048, 32000, 1024},
    {"350m", 24, 1024, 16, 16, 2816, 32000, 1024},
    {"1b", 22, 2048, 32, 4, 5632, 32000, 2048},
    {"3b", 26, 3200, 32, 32, 8640, 32000, 2048},
    {"7b", 32, 4096, 32, 32, 11008, 32000, 4096},
    {"13b", 40, 5120, 40, 40, 13824, 32000, 4096},
    {"30b", 60, 6656, 52, 52, 17920, 32000, 2048},
    {"70b", 80, 8192, 64, 8, 28672, 32000, 4096},
};

int model_preset(const char *name, config_t *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const preset_t *p = &presets[i];
        if (strcmp(p->name, name) != 0) continue;
        snprintf(cfg->preset, sizeof cfg->preset, "%s", p->name);
        cfg->L = p->L; cfg->C = p->C; cfg->NH = p->NH; cfg->NKV = p->NKV;
        cfg->F = p->F; cfg->V = p->V; cfg->T = p->T;
        return 0;
    }
    return -1;
}

const char *model_preset_names(void) {
    return "tiny, small, 125m, 350m, 1b, 3b, 7b, 13b, 30b, 70b";
}

// ---------------------------------------------------------------- layout
static tensor_t *add_tensor(shard_t *s, const char *name, int rows, int cols, int decay, float init_std) {
    tensor_t *t = &s->tensors[s->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = t->full_rows = rows;
    t->cols = cols;
    t->init_tensor = s->ntensors - 1;
    t->offset = s->numel;
    t->numel = (size_t)rows * (size_t)cols;
    t->decay = decay;
    t->init_std = init_std;
    s->numel += t->numel;
    return t;
}

// Block l's tensors into shard s (its init stream is the layout's numbering before the
// vocabulary was cut: 1 + l).
static void add_block(const model_t *m, shard_t *s, int l) {
    const int C = m->C, KV = m->NKV * m->HS, F = m->F;
    const float std = 0.02f, std_resid = 0.02f / sqrtf(2.0f * (float)m->L);
    snprintf(s->name, sizeof s->name, "block.%d", l);
    s->kind = SHARD_BLOCK; s->layer = l;
    add_tensor(s, "attn_norm", 1, C, 0, 0);
    add_tensor(s, "wq", C, C, 1, std);
    add_tensor(s, "wk", KV, C, 1, std);
    add_tensor(s, "wv", KV, C, 1, std);
    add_tensor(s, "wo", C, C, 1, std_resid);
    add_tensor(s, "mlp_norm", 1, C, 0, 0);
    add_tensor(s, "w_gate", F, C, 1, std);
    add_tensor(s, "w_up", F, C, 1, std);
    add_tensor(s, "w_down", C, F, 1, std_resid);
    for (int t = 0; t < s->ntensors; t++) s->tensors[t].init_shard = 1 + l;
}

// Rows per vocabulary chunk: whole quanta, as many as fit in a block shard (at least one).
// TT_TEST_VOCAB_CHUNK=R (a testing hook; a multiple of CE_QUANTUM) sets it.
static int vocab_rows(int V, int C, size_t block_numel) {
    const char *hook = getenv("TT_TEST_VOCAB_CHUNK");
    long long want = hook ? atoll(hook) : 0;
    long long q = (long long)(block_numel / (size_t)C) / CE_QUANTUM;
    long long rows = want > 0 && want % CE_QUANTUM == 0 ? want : (q > 1 ? q : 1) * CE_QUANTUM;
    return rows < V ? (int)rows : V;
}

// Rows per MLP chunk (model.h): as many multiples of 128 as MODEL_MLP_BYTES holds (at least one).
static int mlp_rows(int F) {
    const char *hook = getenv("TT_TEST_MLP_ROWS");
    long long want = hook ? atoll(hook) : 0;
    if (want > 0) return want < INT_MAX ? (int)want : INT_MAX;
    size_t rows = MODEL_MLP_BYTES / ((size_t)F * sizeof(float)) / 128 * 128;
    return rows > 128 ? (rows < INT_MAX ? (int)rows : INT_MAX / 128 * 128) : 128;
}

// Piece k of a vocabulary-cut tensor (V, C) into shard s; its init stream is the whole
// tensor's (init_shard, tensor 0 or 1), so that the values never depend on the cut.
static void add_vocab_piece(model_t *m, shard_t *s, const char *name, int k, int init_shard, int init_tensor,
                            float std) {
    int v0, nv;
    model_vchunk(m, k, &v0, &nv);
    tensor_t *t = add_tensor(s, name, nv, m->C, 1, std);
    t->row0 = v0;
    t->full_rows = m->V;
    t->init_shard = init_shard;
    t->init_tensor = init_tensor;
}

int model_quantum_cols(const model_t *m, int q) {
    const int v0 = q * CE_QUANTUM;
    return m->V - v0 < CE_QUANTUM ? m->V - v0 : CE_QUANTUM;
}

void model_vchunk(const model_t *m, int k, int *v0, int *nv) {
    *v0 = k * m->vrows;
    *nv = m->V - *v0 < m->vrows ? m->V - *v0 : m->vrows;
}

size_t model_embed_numel(const model_t *m) {
    size_t n = 0;
    for (int k = 0; k < m->vchunks; k++) n += m->shards[model_embed_shard(m, k)].numel_padded;
    return n;
}

void model_rope_freqs(const model_t *m, double *inv_freq) {
    const rope_scaling_t *s = &m->rope_scaling;
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < m->HS / 2; i++) {
        double f = pow(m->rope_theta, -(2.0 * i) / (double)m->HS); // rope_table's, to the bit
        if (s->type == ROPE_LINEAR) f /= s->factor;
        if (s->type == ROPE_LLAMA3) {
            // transformers' _compute_llama3_parameters: by wavelength against the original context
            const double wavelen = 2 * pi / f, low = s->orig_ctx / s->low_freq, high = s->orig_ctx / s->high_freq;
            if (wavelen > low) f /= s->factor; // the slow rotations: stretched to the new context
            else if (wavelen >= high) {        // between: blended, from all stretched (low) to none (high)
                const double smooth = (s->orig_ctx / wavelen - s->low_freq) / (s->high_freq - s->low_freq);
                f = (1 - smooth) * f / s->factor + smooth * f;
            } // the fast rotations: kept
        }
        inv_freq[i] = f;
    }
}

void model_rope_text(double theta, const rope_scaling_t *s, char *buf, size_t len) {
    int n = snprintf(buf, len, "rope %g", theta);
    if (n < 0 || (size_t)n >= len) return;
    if (s->type == ROPE_LINEAR) snprintf(buf + n, len - (size_t)n, ", linear x%g", s->factor);
    if (s->type == ROPE_LLAMA3)
        snprintf(buf + n, len - (size_t)n, ", llama3 x%g from %d (low %g, high %g)", s->factor, s->orig_ctx,
                 s->low_freq, s->high_freq);
}

void model_init(model_t *m, const config_t *cfg) {
    memset(m, 0, sizeof *m);
    m->L = cfg->L; m->C = cfg->C; m->NH = cfg->NH; m->NKV = cfg->NKV; m->HS = cfg->C / cfg->NH;
    m->F = cfg->F; m->V = cfg->V; m->T = cfg->T; m->tie = cfg->tie;
    m->norm_eps = (float)cfg->norm_eps;
    m->rope_theta = cfg->rope_theta;
    m->rope_scaling = cfg->rope_scaling;
    const int C = m->C, V = m->V;
    shard_t block; // the vocabulary's chunks are sized by a block's parameters
    memset(&block, 0, sizeof block);
    add_block(m, &block, 0);
    m->vrows = vocab_rows(V, C, block.numel);
    m->vchunks = (V + m->vrows - 1) / m->vrows;
    m->mrows = mlp_rows(m->F);
    const int E = m->vchunks;
    m->nshards = E + m->L + 1 + (m->tie ? 0 : E);
    m->shards = calloc((size_t)m->nshards, sizeof *m->shards);
    if (!m->shards) runtime_error("out of memory for the shard table (%d shards)", m->nshards);

    // init streams: (embed 0), (block l: 1 + l), (the final norm, tensor 0, and the LM head,
    // tensor 1, of L + 1): the layout's numbering before the vocabulary was cut
    const float std = 0.02f;
    shard_t *s;
    for (int k = 0; k < E; k++) {
        s = &m->shards[model_embed_shard(m, k)];
        snprintf(s->name, sizeof s->name, E == 1 ? "embed" : "embed.%d", k);
        s->kind = SHARD_EMBED; s->layer = k;
        add_vocab_piece(m, s, "embed", k, 0, 0, std);
    }
    for (int l = 0; l < m->L; l++) add_block(m, &m->shards[model_block_shard(m, l)], l);
    s = &m->shards[model_head_shard(m)];
    snprintf(s->name, sizeof s->name, "head");
    s->kind = SHARD_HEAD; s->layer = -1;
    add_tensor(s, "norm", 1, C, 0, 0)->init_shard = m->L + 1;
    for (int k = 0; k < E && !m->tie; k++) {
        s = &m->shards[model_lm_shard(m, k)];
        snprintf(s->name, sizeof s->name, E == 1 ? "lm_head" : "lm_head.%d", k);
        s->kind = SHARD_HEAD; s->layer = k;
        add_vocab_piece(m, s, "lm_head", k, m->L + 1, 1, std);
    }

    for (int i = 0; i < m->nshards; i++) {
        s = &m->shards[i];
        s->numel_padded = ALIGN_UP(s->numel, (size_t)SHARD_ALIGN_ELEMS);
        m->num_params += s->numel;
        m->numel_padded += s->numel_padded;
        if (s->numel_padded > m->max_shard_numel) m->max_shard_numel = s->numel_padded;
    }
}

void model_free(model_t *m) {
    if (!m) return;
    free(m->shards);
    m->shards = NULL;
}

// ---------------------------------------------------------------- init

#define INIT_BLOCK ((size_t)65536) // elements per parallel block of the init (even: whole pairs)
void model_init_range(const model_t *m, int shard, uint64_t seed, size_t lo, size_t n, float *dst) {
    const shard_t *s = &m->shards[shard];
    memset(dst, 0, n * sizeof(float));
    for (int ti = 0; ti < s->ntensors; ti++) {
        const tensor_t *t = &s->tensors[ti];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < lo + n ? t->offset + t->numel : lo + n;
        if (a >= b) continue;
        float *w = dst + (a - lo); // w[i - i0] is the tensor's element i
        size_t i0 = a - t->offset, i1 = b - t->offset;
        if (t->init_std == 0) {
            for (size_t i = i0; i < i1; i++) w[i - i0] = 1.0f;
            continue;
        }
        // Box-Muller in double, two normals per pair of uniforms: element i's pair starts at
        // draw i & ~1 of the tensor's splitmix64 stream, whose state advances by a constant
        // per draw, so a range starts where the whole tensor's run would be. A piece of a cut
        // tensor is the range of the whole one from its first row.
        // The pairs are drawn in blocks of INIT_BLOCK elements on OpenMP's threads, each block
        // from its own place in the stream: the values do not depend on the thread count.
        const uint64_t base = mix64(mix64(seed, (uint64_t)t->init_shard), (uint64_t)t->init_tensor);
        const size_t e0 = (size_t)t->row0 * (size_t)t->cols;
        i0 += e0;
        i1 += e0;
        const size_t first = i0 & ~(size_t)1, nblocks = (i1 - first + INIT_BLOCK - 1) / INIT_BLOCK;
        const float sd = t->init_std;
        #pragma omp parallel for schedule(static) if (nblocks > 1)
        for (size_t k = 0; k < nblocks; k++) {
            const size_t j0 = first + k * INIT_BLOCK, j1 = j0 + INIT_BLOCK < i1 ? j0 + INIT_BLOCK : i1;
            uint64_t state = base + (uint64_t)j0 * 0x9e3779b97f4a7c15ULL;
            for (size_t i = j0; i < j1; i += 2) {
                double u1 = ((splitmix64(&state) >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
                double u2 = (splitmix64(&state) >> 11) * 0x1.0p-53;
                double r = sqrt(-2.0 * log(u1));
                if (i >= i0) w[i - i0] = (float)(r * cos(2.0 * M_PI * u2) * sd);
                if (i + 1 >= i0 && i + 1 < i1) w[i + 1 - i0] = (float)(r * sin(2.0 * M_PI * u2) * sd);
            }
        }
    }
}

void model_init_shard(const model_t *m, int shard, uint64_t seed, float *master) {
    model_init_range(m, shard, seed, 0, m->shards[shard].numel_padded, master);
}

// ---------------------------------------------------------------- export names
int model_tensor_in_range(const tensor_t *te, size_t lo, size_t n, size_t *a, size_t *b) {
    *a = te->offset > lo ? te->offset : lo;
    *b = te->offset + te->numel < lo + n ? te->offset + te->numel : lo + n;
    return *a < *b;
}

void model_tensor_hf_name(const model_t *m, int shard, int tensor, char *buf, size_t len) {
    const shard_t *s = &m->shards[shard];
    static const char *block_names[BW_COUNT] = {
        "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    switch (s->kind) {
    case SHARD_EMBED: snprintf(buf, len, "model.embed_tokens.weight"); break;
    case SHARD_BLOCK: snprintf(buf, len, "model.layers.%d.%s.weight", s->layer, block_names[tensor]); break;
    case SHARD_HEAD: snprintf(buf, len, s->layer < 0 ? "model.norm.weight" : "lm_head.weight"); break;
    }
}

int model_use_order(const model_t *m, int reps, int backward, int *uses) {
    int n = 0;
    const int E = m->vchunks;
#define USE(x) do { if (uses) uses[n] = (x); n++; } while (0)
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < E; k++) USE(model_embed_shard(m, k));
        for (int l = 0; l < m->L; l++) USE(model_block_shard(m, l));
        USE(model_head_shard(m));
        for (int k = 0; k < E; k++) USE(model_lm_shard(m, k));
        if (!backward) continue;
        for (int k = E - 2; k >= 0; k--) USE(model_lm_shard(m, k));
        for (int l = m->L - 1; l >= 0; l--) USE(model_block_shard(m, l));
    }
#undef USE
    return n;
}
