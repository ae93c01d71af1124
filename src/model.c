// model.c — presets, the shard layout, deterministic init, export names. See model.h.
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static void add_tensor(shard_t *s, const char *name, int rows, int cols, int decay, float init_std) {
    tensor_t *t = &s->tensors[s->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->offset = s->numel;
    t->numel = (size_t)rows * (size_t)cols;
    t->decay = decay;
    t->init_std = init_std;
    s->numel += t->numel;
}

void model_init(model_t *m, const config_t *cfg) {
    memset(m, 0, sizeof *m);
    m->L = cfg->L; m->C = cfg->C; m->NH = cfg->NH; m->NKV = cfg->NKV; m->HS = cfg->C / cfg->NH;
    m->F = cfg->F; m->V = cfg->V; m->T = cfg->T; m->tie = cfg->tie;
    m->norm_eps = (float)cfg->norm_eps;
    m->rope_theta = cfg->rope_theta;
    m->nshards = m->L + 2;
    m->shards = calloc((size_t)m->nshards, sizeof *m->shards);
    if (!m->shards) runtime_error("out of memory for the shard table (%d shards)", m->nshards);

    const int C = m->C, KV = m->NKV * m->HS, F = m->F, V = m->V;
    const float std = 0.02f, std_resid = 0.02f / sqrtf(2.0f * (float)m->L);
    shard_t *s = &m->shards[0];
    snprintf(s->name, sizeof s->name, "embed");
    s->kind = SHARD_EMBED; s->layer = -1;
    add_tensor(s, "embed", V, C, 1, std);
    for (int l = 0; l < m->L; l++) {
        s = &m->shards[model_block_shard(l)];
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
    }
    s = &m->shards[model_head_shard(m)];
    snprintf(s->name, sizeof s->name, "head");
    s->kind = SHARD_HEAD; s->layer = -1;
    add_tensor(s, "norm", 1, C, 0, 0);
    if (!m->tie) add_tensor(s, "lm_head", V, C, 1, std);

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
        // per draw, so a range starts where the whole tensor's run would be.
        uint64_t state = mix64(mix64(seed, (uint64_t)shard), (uint64_t)ti);
        size_t first = i0 & ~(size_t)1;
        state += (uint64_t)first * 0x9e3779b97f4a7c15ULL;
        for (size_t i = first; i < i1; i += 2) {
            double u1 = ((splitmix64(&state) >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
            double u2 = (splitmix64(&state) >> 11) * 0x1.0p-53;
            double r = sqrt(-2.0 * log(u1));
            if (i >= i0) w[i - i0] = (float)(r * cos(2.0 * M_PI * u2) * t->init_std);
            if (i + 1 >= i0 && i + 1 < i1) w[i + 1 - i0] = (float)(r * sin(2.0 * M_PI * u2) * t->init_std);
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
    case SHARD_HEAD: snprintf(buf, len, tensor == HW_NORM ? "model.norm.weight" : "lm_head.weight"); break;
    }
}

int model_use_order(const model_t *m, int reps, int backward, int *uses) {
    int n = 0;
    for (int r = 0; r < reps; r++) {
        for (int s = 0; s <= m->L; s++, n++) // embed, blocks
            if (uses) uses[n] = s;
        if (uses) uses[n] = model_head_shard(m);
        n++;
        if (m->tie) {
            if (uses) uses[n] = 0;
            n++;
        }
        if (backward)
            for (int l = m->L - 1; l >= 0; l--, n++)
                if (uses) uses[n] = model_block_shard(l);
    }
    return n;
}
