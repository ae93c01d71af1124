// hf.c — see hf.h. config.json through json.c, the weights through the safetensors reader:
// every file the index names is opened (and validated) once, each tensor of the model is
// looked up by its Hugging Face name, and its elements go into the master a chunk at a time,
// converted to FP32 on the way. Also the folder's other files a checkpoint carries along
// (hf_extras_read: tokenizer, generation settings, token ids).
#include "hf.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "comm.h"
#include "hasher.h"
#include "json.h"
#include "model.h"
#include "progress.h"
#include "safetensors.h"
#include "util.h"

#define ERR(...) snprintf(err, errlen, __VA_ARGS__)
enum { HF_MAX_FILES = 256 };

// ---------------------------------------------------------------- config.json

// An optional member: 0 with *out untouched when absent (or null), else as json_get_*.
static int opt_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int *out, char *err, size_t errlen) {
    const json_t *v = json_get(o, key);
    if (!v || v->type == JSON_NULL) return 0;
    int64_t x;
    int rc = json_as_int64(v, key, lo, hi, &x, err, errlen);
    if (rc == 0) *out = (int)x;
    return rc;
}

static int opt_double(const json_t *o, const char *key, double *out, char *err, size_t errlen) {
    const json_t *v = json_get(o, key);
    return !v || v->type == JSON_NULL ? 0 : json_as_double(v, key, out, err, errlen);
}

static int opt_bool(const json_t *o, const char *key, int *out, char *err, size_t errlen) {
    const json_t *v = json_get(o, key);
    return !v || v->type == JSON_NULL ? 0 : json_as_bool(v, key, out, err, errlen);
}

// rope_scaling (hf.h). Files from before transformers 4.45 say "type" for "rope_type".
int hf_rope_scaling_read(const json_t *root, const char *path, rope_scaling_t *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    const json_t *v = json_get(root, "rope_scaling");
    if (!v || v->type == JSON_NULL) return 0;
    const json_t *t = v->type == JSON_OBJECT ? json_get(v, "rope_type") : NULL;
    if (v->type == JSON_OBJECT && !t) t = json_get(v, "type");
    const char *type = NULL;
    if (!t || json_as_string(t, "rope_scaling's rope_type", &type, err, errlen) != 0) {
        ERR("%.400s: rope_scaling without a rope_type (accepted: null, or an object with rope_type \"llama3\", "
            "\"linear\" or \"default\")", path);
        return -EINVAL;
    }
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "llama3") != 0 && strcmp(type, "linear") != 0) {
        ERR("%.400s: rope_scaling rope_type \"%.100s\" (accepted: \"llama3\", \"linear\" or \"default\"; that "
            "scaling is not implemented)", path, type);
        return -EINVAL;
    }
    s->type = strcmp(type, "llama3") == 0 ? ROPE_LLAMA3 : ROPE_LINEAR;
    int64_t orig = 0;
    char e2[256];
    if (json_get_double(v, "factor", &s->factor, e2, sizeof e2) != 0 ||
        (s->type == ROPE_LLAMA3 &&
         (json_get_double(v, "low_freq_factor", &s->low_freq, e2, sizeof e2) != 0 ||
          json_get_double(v, "high_freq_factor", &s->high_freq, e2, sizeof e2) != 0 ||
          json_get_int64(v, "original_max_position_embeddings", 1, 1 << 30, &orig, e2, sizeof e2) != 0))) {
        const size_t pl = strlen(path); // the JSON error starts with the file's name, said once here
        const char *why = strncmp(e2, path, pl) == 0 && e2[pl] == ':' ? e2 + pl + 1 + (e2[pl + 1] == ' ') : e2;
        ERR("%.400s: rope_scaling (rope_type %s): %s (accepted: %s)", path, type, why,
            s->type == ROPE_LLAMA3 ? "factor, low_freq_factor, high_freq_factor and original_max_position_embeddings"
                                   : "a factor");
        return -EINVAL;
    }
    s->orig_ctx = (int)orig;
    if (!(s->factor > 0 && isfinite(s->factor))) {
        ERR("%.400s: rope_scaling factor %g (accepted: a positive number)", path, s->factor);
        return -EINVAL;
    }
    if (s->type == ROPE_LLAMA3 && !(s->low_freq > 0 && s->high_freq > s->low_freq && isfinite(s->high_freq))) {
        ERR("%.400s: rope_scaling low_freq_factor %g, high_freq_factor %g (accepted: 0 < low < high)", path,
            s->low_freq, s->high_freq);
        return -EINVAL;
    }
    return 0;
}

// x as a JSON number that Python reads as a float: 8.0, not 8 (transformers warns when the
// factors are not floats)
static const char *float_text(char *buf, size_t len, double x) {
    snprintf(buf, len, "%.17g", x);
    if (!strpbrk(buf, ".eEn")) snprintf(buf + strlen(buf), len - strlen(buf), ".0");
    return buf;
}

void hf_rope_scaling_json(const rope_scaling_t *s, char *buf, size_t len) {
    char f[40], lo[40], hi[40];
    float_text(f, sizeof f, s->factor);
    if (s->type == ROPE_LINEAR) snprintf(buf, len, "{\"rope_type\": \"linear\", \"factor\": %s}", f);
    else if (s->type == ROPE_LLAMA3)
        snprintf(buf, len, "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
                 "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d}", f,
                 float_text(lo, sizeof lo, s->low_freq), float_text(hi, sizeof hi, s->high_freq), s->orig_ctx);
    else snprintf(buf, len, "null");
}

// The fields this model cannot be: one line naming the first.
static int check_unsupported(const json_t *root, const char *path, char *err, size_t errlen) {
    const char *s = NULL;
    const json_t *v = json_get(root, "model_type");
    if (v && (json_as_string(v, "model_type", &s, err, errlen) != 0 || strcmp(s, "llama") != 0)) {
        ERR("%.400s: model_type \"%s\" (accepted: \"llama\"; this is a Llama trainer)", path, s ? s : "?");
        return -EINVAL;
    }
    v = json_get(root, "hidden_act");
    if (v && (json_as_string(v, "hidden_act", &s, err, errlen) != 0 || strcmp(s, "silu") != 0)) {
        ERR("%.400s: hidden_act \"%s\" (accepted: \"silu\", the SwiGLU this model computes)", path, s ? s : "?");
        return -EINVAL;
    }
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        int b = 0, rc = opt_bool(root, biases[i], &b, err, errlen);
        if (rc != 0) return rc;
        if (b) {
            ERR("%.400s: %s is true (accepted: false; the model has no bias terms)", path, biases[i]);
            return -EINVAL;
        }
    }
    return 0;
}

int hf_read_config(const char *dir, hf_config_t *hc, char *err, size_t errlen) {
    char path[TT_PATH_MAX + 32], e2[768];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    size_t n = 0;
    json_t *root = NULL;
    int rc = read_small_file(path, &text, &n, e2, sizeof e2);
    if (rc == -ENOENT || rc == -ENOTDIR) // a folder that is not a model's, or a file
        snprintf(e2 + strlen(e2), sizeof e2 - strlen(e2), " (give a Hugging Face Llama folder: config.json and its "
                 "model.safetensors)");
    if (rc == 0) rc = json_parse(text, n, path, NULL, &root, e2, sizeof e2) != 0 ? -EINVAL : 0;
    free(text);
    if (rc == 0 && root->type != JSON_OBJECT) {
        snprintf(e2, sizeof e2, "%.400s: not a JSON object", path);
        rc = -EINVAL;
    }
    memset(hc, 0, sizeof *hc);
    int64_t L = 0, C = 0, NH = 0, F = 0, V = 0;
    if (rc == 0 && ((rc = json_get_int64(root, "num_hidden_layers", 1, 4096, &L, e2, sizeof e2)) != 0 ||
                    (rc = json_get_int64(root, "hidden_size", 2, 1 << 20, &C, e2, sizeof e2)) != 0 ||
                    (rc = json_get_int64(root, "num_attention_heads", 1, 65536, &NH, e2, sizeof e2)) != 0 ||
                    (rc = json_get_int64(root, "intermediate_size", 1, 4 << 20, &F, e2, sizeof e2)) != 0 ||
                    (rc = json_get_int64(root, "vocab_size", 2, 1 << 24, &V, e2, sizeof e2)) != 0))
        rc = -EINVAL;
    hc->L = (int)L; hc->C = (int)C; hc->NH = (int)NH; hc->F = (int)F; hc->V = (int)V;
    hc->NKV = hc->NH;
    hc->rope_theta = 10000;
    hc->norm_eps = 1e-6;
    hc->max_pos = 2048;
    int head_dim = NH ? (int)(C / NH) : 0;
    if (rc == 0 && ((rc = opt_int(root, "num_key_value_heads", 1, 65536, &hc->NKV, e2, sizeof e2)) != 0 ||
                    (rc = opt_int(root, "head_dim", 1, 1 << 20, &head_dim, e2, sizeof e2)) != 0 ||
                    (rc = opt_int(root, "max_position_embeddings", 1, 1 << 30, &hc->max_pos, e2, sizeof e2)) != 0 ||
                    (rc = opt_double(root, "rope_theta", &hc->rope_theta, e2, sizeof e2)) != 0 ||
                    (rc = opt_double(root, "rms_norm_eps", &hc->norm_eps, e2, sizeof e2)) != 0 ||
                    (rc = opt_bool(root, "tie_word_embeddings", &hc->tie, e2, sizeof e2)) != 0 ||
                    (rc = hf_rope_scaling_read(root, path, &hc->rope_scaling, e2, sizeof e2)) != 0 ||
                    (rc = check_unsupported(root, path, e2, sizeof e2)) != 0))
        rc = -EINVAL;
    if (rc == 0 && (C % NH != 0 || head_dim != C / NH)) {
        snprintf(e2, sizeof e2, "%.400s: head_dim %d with hidden_size %lld and num_attention_heads %lld (accepted: "
                 "head_dim = hidden_size / num_attention_heads)", path, head_dim, (long long)C, (long long)NH);
        rc = -EINVAL;
    }
    if (rc == 0 && hc->NH % hc->NKV != 0) {
        snprintf(e2, sizeof e2, "%.400s: num_key_value_heads %d does not divide num_attention_heads %d", path, hc->NKV,
                 hc->NH);
        rc = -EINVAL;
    }
    if (rc == 0 && (!(hc->rope_theta > 0) || !(hc->norm_eps > 0))) {
        snprintf(e2, sizeof e2, "%.400s: rope_theta %g and rms_norm_eps %g must be positive", path, hc->rope_theta,
                 hc->norm_eps);
        rc = -EINVAL;
    }
    json_free(root);
    if (rc != 0) ERR("--init-from %.1000s: %s", dir, e2);
    return rc;
}

// ---------------------------------------------------------------- the files

typedef struct {
    int nfiles;
    st_reader_t *r[HF_MAX_FILES];
    char name[HF_MAX_FILES][128];
    unsigned char *used[HF_MAX_FILES]; // (r[i]->ntensors) 1 once the model took the tensor
    int nchecked, ntensors;        // over all files
} hf_files_t;

static void files_close(hf_files_t *f) {
    for (int i = 0; i < f->nfiles; i++) {
        st_close(f->r[i]);
        free(f->used[i]);
    }
    f->nfiles = 0;
}

// Opens file `name` of dir (once): its index in f, or -errno with one line.
static int files_open(hf_files_t *f, const char *dir, const char *name, char *err, size_t errlen) {
    for (int i = 0; i < f->nfiles; i++)
        if (strcmp(f->name[i], name) == 0) return i;
    if (strchr(name, '/') || name[0] == '.' || strlen(name) >= sizeof f->name[0]) {
        ERR("--init-from %s: model.safetensors.index.json names the file '%.100s' (accepted: a file name in the "
            "folder)", dir, name);
        return -EINVAL;
    }
    if (f->nfiles == HF_MAX_FILES) {
        ERR("--init-from %s: more than %d weight files", dir, HF_MAX_FILES);
        return -EINVAL;
    }
    char path[TT_PATH_MAX + 160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int i = f->nfiles, rc = st_open(path, &f->r[i], err, errlen);
    if (rc == -ENOENT) {
        ERR("--init-from %s: %s is missing (%s; the folder is incomplete: download every shard)", dir, name,
            strcmp(name, "model.safetensors") ? "model.safetensors.index.json names it" : "no index either");
        return -EINVAL;
    }
    if (rc != 0) return rc;
    if (!(f->used[i] = calloc((size_t)f->r[i]->ntensors + 1, 1))) {
        st_close(f->r[i]);
        ERR("--init-from %s: out of memory", dir);
        return -ENOMEM;
    }
    snprintf(f->name[i], sizeof f->name[i], "%s", name);
    f->nfiles++;
    f->nchecked += f->r[i]->nchecked;
    f->ntensors += f->r[i]->ntensors;
    return i;
}

// The weight files: model.safetensors alone where the folder has it (transformers reads it
// first, so a folder with both reads the same weights there as here), else the index's
// shards, each opened. PyTorch's pickled weights are refused by name.
static int files_init(hf_files_t *f, const char *dir, json_t **index, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    *index = NULL;
    char path[TT_PATH_MAX + 64], single[TT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    struct stat st;
    const int has_index = stat(path, &st) == 0, has_single = stat(single, &st) == 0;
    static const char *const pickled[] = {"pytorch_model.bin", "pytorch_model.bin.index.json"};
    for (int k = 0; k < 2 && !has_index && !has_single; k++) {
        char bin[TT_PATH_MAX + 64];
        snprintf(bin, sizeof bin, "%s/%s", dir, pickled[k]);
        if (stat(bin, &st) != 0) continue;
        ERR("--init-from %s: holds PyTorch's pickled weights (%s), not safetensors (convert the folder: in "
            "transformers, model.save_pretrained(DIR, safe_serialization=True))", dir, pickled[k]);
        return -EINVAL;
    }
    if (has_index && has_single)
        notice("--init-from %s: has model.safetensors and model.safetensors.index.json: reading model.safetensors, "
               "as transformers does", dir);
    if (!has_index || has_single) {
        int i = files_open(f, dir, "model.safetensors", err, errlen);
        return i < 0 ? i : 0;
    }
    char *text = NULL, e2[768];
    size_t n = 0;
    const json_t *map = NULL;
    int rc = read_small_file(path, &text, &n, e2, sizeof e2);
    if (rc == 0 && json_parse(text, n, path, NULL, index, e2, sizeof e2) != 0) rc = -EINVAL;
    free(text);
    if (rc == 0 && json_get_object(*index, "weight_map", &map, e2, sizeof e2) != 0) rc = -EINVAL;
    for (size_t i = 0; rc == 0 && i < map->n; i++) {
        const char *file = NULL;
        if (json_as_string(&map->kids[i], "a weight_map entry", &file, e2, sizeof e2) != 0) rc = -EINVAL;
        else if ((rc = files_open(f, dir, file, err, errlen)) >= 0) rc = 0;
        else return rc;
    }
    if (rc != 0) ERR("--init-from %.1000s: %s", dir, e2);
    return rc;
}

// The reader holding tensor `name` (the index's file for it, else any file that has it):
// its index in f->r and the tensor's index in it, or -1.
static int files_find(const hf_files_t *f, const json_t *index, const char *name, int *tix) {
    const json_t *file = index ? json_get(json_get(index, "weight_map"), name) : NULL;
    for (int i = 0; i < f->nfiles; i++) {
        if (file && file->type == JSON_STRING && strcmp(f->name[i], file->s) != 0) continue;
        if ((*tix = st_find(f->r[i], name)) >= 0) return i;
    }
    return -1;
}

// ---------------------------------------------------------------- the folder's other files

// The JSON text of an id member: a number, or an array of numbers (eos_token_id of an
// instruct model); "" for anything else (null, absent).
static void id_text(const json_t *v, char *buf, size_t len) {
    buf[0] = 0;
    if (v && v->type == JSON_NUMBER) snprintf(buf, len, "%s", v->s);
    if (!v || v->type != JSON_ARRAY || !v->n) return;
    size_t w = (size_t)snprintf(buf, len, "[");
    for (size_t k = 0; k < v->n && w < len; k++) {
        if (v->kids[k].type != JSON_NUMBER) { buf[0] = 0; return; }
        w += (size_t)snprintf(buf + w, len - w, "%s%s", k ? ", " : "", v->kids[k].s);
    }
    if (w < len) snprintf(buf + w, len - w, "]");
    if (w + 1 >= len) buf[0] = 0; // cut: none rather than a broken one
}

int hf_extras_read(hf_extras_t *c, const char *dir, char *err, size_t errlen) {
    static const char *const names[HF_EXTRA_FILES] = HF_EXTRA_NAMES;
    memset(c, 0, sizeof *c);
    char path[TT_PATH_MAX + 64];
    for (int i = 0; i < HF_EXTRA_FILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) != 0 && errno == ENOENT) continue;
        int rc = read_small_file(path, &c->data[c->n], &c->len[c->n], err, errlen);
        if (rc != 0) return rc;
        c->name[c->n++] = names[i];
    }
    // config.json's token ids: absent ones (and an unreadable file, which the load refuses) give none
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL, e2[512];
    size_t n = 0;
    json_t *root = NULL;
    if (read_small_file(path, &text, &n, e2, sizeof e2) == 0 &&
        json_parse(text, n, path, NULL, &root, e2, sizeof e2) == 0 && root->type == JSON_OBJECT) {
        static const char *const keys[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
        size_t w = 0;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            char v[160];
            id_text(json_get(root, keys[k]), v, sizeof v);
            if (v[0] && w < sizeof c->ids)
                w += (size_t)snprintf(c->ids + w, sizeof c->ids - w, "  \"%s\": %s,\n", keys[k], v);
        }
        if (w >= sizeof c->ids) c->ids[0] = 0;
    }
    json_free(root);
    free(text);
    return 0;
}

void hf_extras_free(hf_extras_t *c) {
    for (int i = 0; i < c->n; i++) free(c->data[i]);
    memset(c, 0, sizeof *c);
}

// ---------------------------------------------------------------- the weights

// One tensor's share [a, b) of a chunk into master: found, its shape checked against the
// model's, converted, every value finite.
static int load_piece(const model_t *m, int s, int t, hf_files_t *f, const json_t *index, const char *dir,
                      size_t a, size_t b, float *master, char *err, size_t errlen) {
    const tensor_t *te = &m->shards[s].tensors[t];
    char hf[200];
    model_tensor_hf_name(m, s, t, hf, sizeof hf);
    int tix = -1, fi = files_find(f, index, hf, &tix);
    if (fi < 0) {
        ERR("--init-from %s: no tensor '%s' in %s (a checkpoint of another architecture, or an incomplete folder)",
            dir, hf, index ? "the files model.safetensors.index.json names" : "model.safetensors");
        return -EINVAL;
    }
    st_reader_t *r = f->r[fi];
    const st_tensor_t *st = &r->tensors[tix];
    f->used[fi][tix] = 1;
    const int ndim = te->full_rows == 1 ? 1 : 2;
    const uint64_t want[2] = {ndim == 1 ? (uint64_t)te->cols : (uint64_t)te->full_rows, (uint64_t)te->cols};
    if (st->ndim != ndim || st->shape[0] != want[0] || (ndim == 2 && st->shape[1] != want[1])) {
        char got[96], need[64];
        st_shape_str(got, sizeof got, st->ndim, st->shape);
        st_shape_str(need, sizeof need, ndim, want);
        ERR("%s: tensor '%s' has shape %s, config.json makes it %s (a config.json that does not belong with these "
            "weights?)", r->path, hf, got, need);
        return -EINVAL;
    }
    const size_t i0 = (size_t)te->row0 * (size_t)te->cols + (a - te->offset); // in the whole tensor (a piece's)
    int rc = st_read_f32(r, tix, i0, b - a, master, err, errlen);
    const size_t bad = rc == 0 ? first_bad_float(master, b - a, 0) : b - a;
    if (bad < b - a) {
        ERR("%s: tensor '%s' holds a non-finite value at element %zu", r->path, hf, i0 + bad);
        rc = -EINVAL;
    }
    return rc;
}

// Whether tensor `name` was read from another file than file i (a shard holding a copy of a
// tensor the index places elsewhere).
static int read_elsewhere(const hf_files_t *f, int i, const char *name) {
    for (int j = 0; j < f->nfiles; j++) {
        const int k = j == i ? -1 : st_find(f->r[j], name);
        if (k >= 0 && f->used[j][k]) return 1;
    }
    return 0;
}

// Tensors of the files that were not read: those not the model's, counted and the first named,
// and copies of tensors read from the file the index names (a notice each).
static void say_skipped(const hf_files_t *f, const char *dir) {
    int skipped = 0, copies = 0;
    const char *first = NULL, *first_copy = NULL;
    for (int i = 0; i < f->nfiles; i++)
        for (int k = 0; k < f->r[i]->ntensors; k++) {
            if (f->used[i][k]) continue;
            const char *name = f->r[i]->tensors[k].name;
            if (read_elsewhere(f, i, name)) { if (!copies++) first_copy = name; }
            else if (!skipped++) first = name;
        }
    if (skipped)
        notice("--init-from %s: %d tensor%s of the folder %s not part of this model and %s skipped (the first: '%.120s')",
               dir, skipped, skipped == 1 ? "" : "s", skipped == 1 ? "is" : "are", skipped == 1 ? "was" : "were", first);
    if (copies)
        notice("--init-from %s: %d tensor%s of the folder %s also in another file than the one the index names, and %s "
               "read from that one (the first: '%.120s')", dir, copies, copies == 1 ? "" : "s",
               copies == 1 ? "is" : "are", copies == 1 ? "was" : "were", first_copy);
}

int hf_load(trainer_t *tr, const char *dir, FILE *out, char *err, size_t errlen) {
    const model_t *m = trainer_model(tr);
    double t0 = now_ms();
    hf_files_t *f = calloc(1, sizeof *f);
    if (!f) { ERR("out of memory"); return -ENOMEM; }
    json_t *index = NULL;
    // with ranks rank 0 alone reads the folder and broadcasts each chunk's weights; every
    // rank keeps its piece
    comm_t *w = comm_world();
    const int ranks = trainer_ranks(tr), reader = trainer_rank(tr) == 0;
    int rc = reader ? files_init(f, dir, &index, err, errlen) : 0;
    rc = comm_bcast_rc(w, rc, "the folder", err, errlen); // ranks: what rank 0 found
    char what[TT_PATH_MAX + 16];
    snprintf(what, sizeof what, "loading %s", dir);
    progress_t pg;
    progress_begin(&pg, what, (uint64_t)m->numel_padded * 4, 1);
    hasher_t hs; // of the masters as trainer_params_hash takes it, beside the reads
    hasher_init(&hs, FNV64_INIT);
    for (int s = 0, k = 0; s < m->nshards && rc == 0; s++) {
        const shard_t *sh = &m->shards[s];
        for (int c = 0; c < trainer_nchunks(tr, s) && rc == 0; c++, k++) {
            float *master, *mm, *vv;
            // two staging buffers: chunk k's write home is in flight while chunk k+1 is read
            if ((rc = trainer_states_stage(tr, s, c, k & 1, &master, &mm, &vv, err, errlen)) != 0) break;
            size_t lo, n;
            trainer_chunk_range(tr, s, c, &lo, &n);
            for (int t = 0; t < sh->ntensors && rc == 0 && reader; t++) {
                size_t a, b;
                if (model_tensor_in_range(&sh->tensors[t], lo, n, &a, &b))
                    rc = load_piece(m, s, t, f, index, dir, a, b, master + (a - lo), err, errlen);
            }
            if (ranks > 1) {
                rc = comm_bcast_rc(w, rc, "the folder", err, errlen);
                if (rc == 0) rc = comm_bcast(w, master, n * sizeof(float), 0, err, errlen);
            }
            if (rc == 0) trainer_hash_chunk(tr, &hs, s, c, master);
            if (rc == 0) rc = trainer_states_store(tr, s, c, k & 1, err, errlen); // m, v: the zeros given
            progress_add(&pg, (uint64_t)n * 4);
        }
    }
    rc = trainer_states_flush(tr, rc, err, errlen); // the writes in flight, whatever happened
    const uint64_t hash = hasher_value(&hs);
    hasher_free(&hs);
    if (rc == 0) progress_end(&pg);
    int vrc = 0; // rank 0 reads for all (the others hold no files): its verdict goes to every rank
    for (int i = 0; i < f->nfiles && rc == 0 && vrc == 0; i++) vrc = st_verify_rest(f->r[i], err, errlen);
    if (rc == 0) rc = comm_bcast_rc(w, vrc, "the folder", err, errlen);
    if (rc == 0) { // notices once it loaded: a refusal stays one line
        if (f->nchecked == 0)
            notice("--init-from %s: the weights carry no checksums (a folder not saved by tiertrain): they loaded "
                   "unverified", dir);
        say_skipped(f, dir);
        if (out)
            fprintf(out, "initialized from %s: %d file%s, %d tensors%s, params_hash %016llx (%.1f s)\n", dir,
                    f->nfiles, f->nfiles == 1 ? "" : "s", f->ntensors,
                    f->nchecked == f->ntensors ? ", every checksum verified"
                    : f->nchecked ? ", the checksums present verified" : "",
                    (unsigned long long)hash, (now_ms() - t0) / 1e3);
    }
    json_free(index);
    files_close(f);
    free(f);
    return rc;
}
