// checkpoint.c — see checkpoint.h. Files are written with plain write() + fsync; tensors go
// through the streaming safetensors writer a shard at a time, so NVMe-resident states never
// need more host memory than one shard's staging buffer.
// The --save directory around the folders (one writer, pruning, space) is ckpt_dir.c; the
// load is checkpoint_load.c.
#include "checkpoint.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "checkpoint_internal.h"
#include "ckpt_dir.h"
#include "comm.h"
#include "crc32c.h"
#include "hasher.h" // uses: hasher_init, hasher_value (params_hash beside the I/O)
#include "hf.h" // uses: hf_rope_scaling_read, hf_rope_scaling_json
#include "json.h"
#include "progress.h"
#include "safetensors.h"
#include "util.h"

#define CKPT_FORMAT "tiertrain-checkpoint"
#define CKPT_VERSION 2 // 2: every tensor, config.json and state.json carry CRC-32C checksums
#define STATE_CRC_KEY "\"state_crc32c\""
#define ERR(...) snprintf(err, errlen, __VA_ARGS__)

// ---------------------------------------------------------------- small file helpers

// TT_CKPT_DELAY_MS=N (a testing hook): sleep N ms after each file of a save is written, so a
// test can kill the trainer in the middle of one.
static void test_delay(void) {
    const char *e = getenv("TT_CKPT_DELAY_MS");
    long ms = e ? strtol(e, NULL, 10) : 0;
    if (ms > 0 && ms < 60000) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

// Writes text to path (created or truncated) and fsyncs it.
// n bytes into a new file at path, fsynced
static int write_bytes(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        ERR("%s: %s", path, strerror(e));
        return -e;
    }
    int rc = write_all(fd, data, n);
    if (rc == 0 && fsync(fd) != 0) rc = -errno;
    if (close(fd) != 0 && rc == 0) rc = -errno;
    if (rc != 0) ERR("%s: %s", path, strerror(-rc));
    return rc;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen) {
    return write_bytes(path, text, strlen(text), err, errlen);
}

static int fsync_dir(const char *dir, char *err, size_t errlen) {
    int rc = dir_fsync(dir);
    if (rc != 0) ERR("%s: fsync: %s", dir, strerror(-rc));
    return rc;
}

// ---------------------------------------------------------------- names and shapes

void ckpt_tensor_decl(const model_t *m, int s, int t, const char *suffix, st_dtype_t dt, st_tensor_t *out,
                      char *name) {
    const tensor_t *te = &m->shards[s].tensors[t];
    memset(out, 0, sizeof *out);
    char hf[200];
    model_tensor_hf_name(m, s, t, hf, sizeof hf);
    snprintf(name, sizeof(tname_t), "%s%s", hf, suffix);
    out->name = name;
    out->dtype = dt;
    if (te->full_rows == 1) {
        out->ndim = 1;
        out->shape[0] = (uint64_t)te->cols;
    } else {
        out->ndim = 2;
        out->shape[0] = (uint64_t)te->full_rows;
        out->shape[1] = (uint64_t)te->cols;
    }
}

// The checkpoint's tensors: one per tensor, the first piece standing for a cut one (the
// others' bytes follow it: write_pass streams the pieces in shard order).
static int count_tensors(const model_t *m) {
    int n = 0;
    for (int s = 0; s < m->nshards; s++)
        for (int t = 0; t < m->shards[s].ntensors; t++) n += m->shards[s].tensors[t].row0 == 0;
    return n;
}

// ---------------------------------------------------------------- resolve / info

int checkpoint_resolve(const char *arg, char *out, size_t len, char *err, size_t errlen) {
    char p[TT_PATH_MAX + 64];
    struct stat st;
    snprintf(p, sizeof p, "%s/state.json", arg);
    if (stat(p, &st) == 0) {
        snprintf(out, len, "%s", arg);
        return 0;
    }
    // DIR (a --save directory) or DIR/latest
    char latest[TT_PATH_MAX + 64], base[TT_PATH_MAX];
    if (stat(arg, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(latest, sizeof latest, "%s", arg);
        snprintf(base, sizeof base, "%s", arg);
        char *slash = strrchr(base, '/');
        if (slash) *slash = 0;
        else snprintf(base, sizeof base, ".");
    } else if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(latest, sizeof latest, "%s/latest", arg);
        snprintf(base, sizeof base, "%s", arg);
    } else {
        ERR("--resume %s: %s (give a checkpoint folder, a --save directory, or DIR/latest)", arg,
            strerror(errno ? errno : ENOENT));
        return -ENOENT;
    }
    char *text = NULL;
    size_t n = 0;
    char e2[512];
    if (read_small_file(latest, &text, &n, e2, sizeof e2) != 0) {
        ERR("--resume %s: not a checkpoint (no state.json) and no readable latest file (give a checkpoint folder, a "
            "--save directory, or DIR/latest)", arg);
        return -ENOENT;
    }
    size_t k = 0;
    while (k < n && text[k] != '\n' && text[k] != '\r') k++;
    int ok = k > 0 && k < 200 && memchr(text, '/', k) == NULL && text[0] != '.';
    if (ok) {
        int w = snprintf(out, len, "%s/%.*s", base, (int)k, text);
        ok = w > 0 && (size_t)w < len;
    }
    free(text);
    if (!ok) {
        ERR("--resume %s: %s does not name a checkpoint folder (expected one line like step-00000100)", arg, latest);
        return -EINVAL;
    }
    snprintf(p, sizeof p, "%s/state.json", out);
    if (stat(p, &st) != 0) {
        ERR("--resume %s: %s names %s, which has no state.json (an incomplete or removed checkpoint)", arg, latest, out);
        return -ENOENT;
    }
    return 0;
}

// state.json's own checksum: "state_crc32c" (8 hex digits) is the CRC-32C of every byte of
// text before that key; its "config_crc32c" into *config_crc.
static int check_state_crc(const json_t *root, const char *text, const char *path, uint32_t *config_crc, char *err,
                           size_t errlen) {
    const char *want = NULL, *cfg = NULL, *kind = NULL;
    int rc;
    if ((rc = json_get_string(root, "checksums", &kind, err, errlen)) != 0 ||
        (rc = json_get_string(root, "state_crc32c", &want, err, errlen)) != 0 ||
        (rc = json_get_string(root, "config_crc32c", &cfg, err, errlen)) != 0)
        return rc;
    const char *at = strstr(text, STATE_CRC_KEY);
    if (strcmp(kind, "crc32c") || strlen(want) != 8 || strspn(want, "0123456789abcdef") != 8 || strlen(cfg) != 8 ||
        strspn(cfg, "0123456789abcdef") != 8 || !at) {
        ERR("%s: checksums \"%s\", state_crc32c \"%s\", config_crc32c \"%s\" (expected crc32c and 8 lowercase hex "
            "digits each): the file is corrupt", path, kind, want, cfg);
        return -EINVAL;
    }
    uint32_t have = crc32c(0, text, (size_t)(at - text));
    if (have != (uint32_t)strtoul(want, NULL, 16)) {
        ERR("%s: fails its CRC-32C check (stored %s, read %08x): the file is corrupt or was edited", path, want, have);
        return -EINVAL;
    }
    *config_crc = (uint32_t)strtoul(cfg, NULL, 16);
    return 0;
}

int checkpoint_info(const char *dir, ckpt_info_t *info, char *err, size_t errlen) {
    memset(info, 0, sizeof *info);
    snprintf(info->dir, sizeof info->dir, "%s", dir);
    char path[TT_PATH_MAX + 64], name[TT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = NULL;
    size_t n = 0;
    int rc = read_small_file(path, &text, &n, err, errlen);
    if (rc != 0) return rc;
    snprintf(name, sizeof name, "%s", path);
    json_t *root = NULL;
    rc = json_parse(text, n, name, NULL, &root, err, errlen);
    if (rc != 0) {
        free(text);
        return -EINVAL;
    }
    const char *fmt = NULL, *hash = NULL, *prec = NULL, *mdt = NULL, *data = NULL;
    int64_t version = 0, step = 0, L, C, NH, NKV, F, V, T, tie;
    uint64_t tp = 0, vp = 0;
    const json_t *model = NULL;
    if ((rc = json_get_string(root, "format", &fmt, err, errlen)) != 0) goto bad;
    if (strcmp(fmt, CKPT_FORMAT) != 0) {
        ERR("%s: format '%s' is not a tiertrain checkpoint (expected '%s')", path, fmt, CKPT_FORMAT);
        rc = -EINVAL;
        goto bad;
    }
    if ((rc = json_get_int64(root, "version", 1, 1000000, &version, err, errlen)) != 0) goto bad;
    if (version < 1 || version > CKPT_VERSION) {
        ERR("%s: checkpoint version %lld, this tiertrain reads versions 1 to %d", path, (long long)version,
            CKPT_VERSION);
        rc = -EINVAL;
        goto bad;
    }
    info->version = (int)version;
    if (version >= 2 && (rc = check_state_crc(root, text, path, &info->config_crc, err, errlen)) != 0) goto bad;
    free(text);
    text = NULL;
    if ((rc = json_get_int64(root, "step", 1, INT32_MAX, &step, err, errlen)) != 0 ||
        (rc = json_get_uint64(root, "train_pos", UINT64_MAX, &tp, err, errlen)) != 0 ||
        (rc = json_get_uint64(root, "val_pos", UINT64_MAX, &vp, err, errlen)) != 0 ||
        (rc = json_get_string(root, "params_hash", &hash, err, errlen)) != 0 ||
        (rc = json_get_string(root, "data", &data, err, errlen)) != 0 ||
        (rc = json_get_string(root, "model_dtype", &mdt, err, errlen)) != 0 ||
        (rc = json_get_object(root, "model", &model, err, errlen)) != 0)
        goto bad;
    if ((rc = json_get_int64(model, "layers", 1, 4096, &L, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "dim", 2, 1 << 20, &C, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "heads", 1, 65536, &NH, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "kv_heads", 1, 65536, &NKV, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "ffn", 1, 4 << 20, &F, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "vocab", 2, 1 << 24, &V, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "seq", 1, 1 << 20, &T, err, errlen)) != 0 ||
        (rc = json_get_int64(model, "tie", 0, 1, &tie, err, errlen)) != 0 ||
        (rc = json_get_double(model, "rope_theta", &info->rope_theta, err, errlen)) != 0 ||
        (rc = json_get_double(model, "norm_eps", &info->norm_eps, err, errlen)) != 0 ||
        (rc = json_get_string(model, "precision", &prec, err, errlen)) != 0 ||
        (rc = hf_rope_scaling_read(model, path, &info->rope_scaling, err, errlen)) != 0) // absent before 2026-12
        goto bad;
    const json_t *sched = NULL;
    int64_t warm = 0, steps = 0;
    if ((rc = json_get_object(root, "schedule", &sched, err, errlen)) != 0 ||
        (rc = json_get_double(sched, "lr", &info->lr, err, errlen)) != 0 ||
        (rc = json_get_double(sched, "min_lr", &info->min_lr, err, errlen)) != 0 ||
        (rc = json_get_int64(sched, "warmup", 0, INT32_MAX, &warm, err, errlen)) != 0 ||
        (rc = json_get_int64(sched, "steps", 1, INT32_MAX, &steps, err, errlen)) != 0)
        goto bad;
    info->warmup = (int)warm;
    info->steps = (int)steps;
    int64_t batch = 0, accum = 0;
    const json_t *opt = NULL;
    if ((rc = json_get_int64(root, "batch", 1, 65536, &batch, err, errlen)) != 0 ||
        (rc = json_get_int64(root, "accum", 1, 65536, &accum, err, errlen)) != 0 ||
        (rc = json_get_object(root, "optimizer", &opt, err, errlen)) != 0 ||
        (rc = json_get_double(opt, "beta1", &info->beta1, err, errlen)) != 0 ||
        (rc = json_get_double(opt, "beta2", &info->beta2, err, errlen)) != 0 ||
        (rc = json_get_double(opt, "eps", &info->eps, err, errlen)) != 0 ||
        (rc = json_get_double(opt, "wd", &info->wd, err, errlen)) != 0 ||
        (rc = json_get_double(opt, "clip", &info->clip, err, errlen)) != 0)
        goto bad;
    info->B = (int)batch;
    info->accum = (int)accum;
    int64_t ranks = 0;
    if (json_get(root, "ranks") && (rc = json_get_int64(root, "ranks", 1, 65536, &ranks, err, errlen)) != 0) goto bad;
    info->ranks = (int)ranks;
    if (!(info->lr > 0) || !(info->min_lr >= 0) || !(info->beta1 >= 0 && info->beta1 < 1) ||
        !(info->beta2 >= 0 && info->beta2 < 1) || !(info->eps > 0) || !(info->wd >= 0) || !(info->clip >= 0)) {
        ERR("%s: the training settings are out of range (lr %g, min_lr %g, beta1 %g, beta2 %g, eps %g, wd %g, clip %g)",
            path, info->lr, info->min_lr, info->beta1, info->beta2, info->eps, info->wd, info->clip);
        rc = -EINVAL;
        goto bad;
    }
    if (C % NH || NH % NKV || (C / NH) % 2) {
        ERR("%s: the model's shape is inconsistent (dim %lld, heads %lld, kv_heads %lld)", path, (long long)C,
            (long long)NH, (long long)NKV);
        rc = -EINVAL;
        goto bad;
    }
    if (!(info->rope_theta > 0 && isfinite(info->rope_theta)) || !(info->norm_eps > 0 && info->norm_eps < 1)) {
        ERR("%s: the model's rope_theta %g or norm_eps %g is out of range (accepted: rope_theta > 0, 0 < norm_eps < 1, "
            "as the flags take them)", path, info->rope_theta, info->norm_eps);
        rc = -EINVAL;
        goto bad;
    }
    if (strcmp(prec, "bf16") && strcmp(prec, "fp32")) {
        ERR("%s: precision '%s' (accepted: bf16, fp32)", path, prec);
        rc = -EINVAL;
        goto bad;
    }
    if (strcmp(mdt, "F32") && strcmp(mdt, "BF16")) {
        ERR("%s: model_dtype '%s' (accepted: F32, BF16)", path, mdt);
        rc = -EINVAL;
        goto bad;
    }
    if (strlen(hash) != 16 || strspn(hash, "0123456789abcdef") != 16) {
        ERR("%s: params_hash '%s' is not 16 hex digits", path, hash);
        rc = -EINVAL;
        goto bad;
    }
    info->step = (int)step;
    info->train_pos = tp;
    info->val_pos = vp;
    snprintf(info->params_hash, sizeof info->params_hash, "%s", hash);
    snprintf(info->data, sizeof info->data, "%s", data);
    info->L = (int)L; info->C = (int)C; info->NH = (int)NH; info->NKV = (int)NKV;
    info->F = (int)F; info->V = (int)V; info->T = (int)T; info->tie = (int)tie;
    info->precision = strcmp(prec, "fp32") == 0 ? PREC_FP32 : PREC_BF16;
    info->model_bf16 = strcmp(mdt, "BF16") == 0;
    json_free(root);
    // config.json must be there and agree (it is what transformers reads)
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = read_small_file(path, &text, &n, err, errlen)) != 0) return rc;
    if (version >= 2 && crc32c(0, text, n) != info->config_crc) {
        ERR("%s: fails its CRC-32C check (state.json has %08x, the file %08x): the file is corrupt or was edited", path,
            info->config_crc, crc32c(0, text, n));
        free(text);
        return -EINVAL;
    }
    rc = json_parse(text, n, path, NULL, &root, err, errlen);
    free(text);
    text = NULL;
    if (rc != 0) return -EINVAL;
    int64_t hs = 0, layers = 0, max_pos = info->T;
    if ((rc = json_get_int64(root, "hidden_size", 1, 1 << 20, &hs, err, errlen)) != 0 ||
        (rc = json_get_int64(root, "num_hidden_layers", 1, 4096, &layers, err, errlen)) != 0 ||
        (json_get(root, "max_position_embeddings") &&
         (rc = json_get_int64(root, "max_position_embeddings", 1, 1 << 30, &max_pos, err, errlen)) != 0))
        goto bad;
    info->max_pos = (int)max_pos;
    if (hs != C || layers != L) {
        ERR("%s: hidden_size %lld / num_hidden_layers %lld disagree with state.json (%lld / %lld)", path,
            (long long)hs, (long long)layers, (long long)C, (long long)L);
        rc = -EINVAL;
        goto bad;
    }
    json_free(root);
    return 0;
bad:
    free(text);
    json_free(root);
    return rc < 0 ? rc : -EINVAL;
}

#define RECIPE_INT(flag, field) {flag, offsetof(config_t, field), offsetof(ckpt_info_t, field), 1}
#define RECIPE_DBL(flag, field) {flag, offsetof(config_t, field), offsetof(ckpt_info_t, field), 0}
const ckpt_recipe_t ckpt_recipe[] = {
    RECIPE_INT("batch", B),       RECIPE_DBL("lr", lr),       RECIPE_DBL("min-lr", min_lr), RECIPE_INT("warmup", warmup),
    RECIPE_INT("steps", steps),   RECIPE_DBL("beta1", beta1), RECIPE_DBL("beta2", beta2),   RECIPE_DBL("eps", eps),
    RECIPE_DBL("wd", wd),         RECIPE_DBL("clip", clip),
};
#undef RECIPE_INT
#undef RECIPE_DBL
const int ckpt_nrecipe = (int)(sizeof ckpt_recipe / sizeof ckpt_recipe[0]);

double ckpt_recipe_get(const ckpt_recipe_t *r, const void *base, size_t off) {
    const char *p = (const char *)base + off;
    return r->is_int ? (double)*(const int *)p : *(const double *)p;
}

int checkpoint_check_config(const ckpt_info_t *in, const config_t *c, char *err, size_t errlen) {
    const struct { const char *flag; long long ck, run; } f[] = {
        {"--layers", in->L, c->L}, {"--dim", in->C, c->C}, {"--heads", in->NH, c->NH},
        {"--kv-heads", in->NKV, c->NKV}, {"--ffn", in->F, c->F}, {"--vocab", in->V, c->V},
        {"--seq", in->T, c->T},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].ck != f[i].run) {
            ERR("--resume %s: the checkpoint has %s %lld, this run %s %lld (without %s and --model, --resume takes "
                "the checkpoint's)", in->dir, f[i].flag, f[i].ck, f[i].flag, f[i].run, f[i].flag);
            return -EINVAL;
        }
    if (in->tie != c->tie) {
        ERR("--resume %s: the checkpoint's LM head is %s, this run's is %s (%s --tie)", in->dir,
            in->tie ? "tied to the embedding" : "untied", c->tie ? "tied" : "untied", in->tie ? "add" : "drop");
        return -EINVAL;
    }
    if (in->precision != c->precision) {
        const char *ck = in->precision == PREC_FP32 ? "fp32" : "bf16";
        ERR("--resume %s: the checkpoint was trained with --precision %s, this run --precision %s (drop --precision: "
            "--resume takes the checkpoint's)", in->dir, ck, c->precision == PREC_FP32 ? "fp32" : "bf16");
        return -EINVAL;
    }
    if (in->rope_theta != c->rope_theta || (float)in->norm_eps != (float)c->norm_eps) {
        ERR("--resume %s: the checkpoint has --rope-theta %g --norm-eps %g, this run %g %g (drop them: --resume "
            "takes the checkpoint's)", in->dir, in->rope_theta, in->norm_eps, c->rope_theta, c->norm_eps);
        return -EINVAL;
    }
    return 0;
}

// ---------------------------------------------------------------- save

// The chunk after chunk c of shard s, in the order a pass takes them; 0 after the last.
static int next_chunk(trainer_t *tr, int *s, int *c) {
    if (++*c < trainer_nchunks(tr, *s)) return 1;
    *c = 0;
    return ++*s < trainer_model(tr)->nshards;
}

// What a save pass writes into one file: its writer (NULL: none — a rank that does not write,
// or after a failure, when only the gathers go on), the state (part 0 the master, 1 Adam's
// m, 2 its v) and whether it goes in as BF16.
typedef struct {
    st_writer_t *w;
    int part, bf16;
} save_out_t;

// Writes the states outs[0..nouts) name, of every tensor, each into its file, shard after
// shard, in tensor order; hs, when given, takes the masters' params_hash on the way. A chunk
// at a time, read from its tier once for all of them (NVMe-resident states need one chunk of
// staging). With ranks every chunk is gathered from the ranks' pieces (a collective); after a
// failure the gathers go on to the end without writing, so that every rank's gathers pair
// up; the first failure is returned.
static int write_pass(trainer_t *tr, const save_out_t *outs, int nouts, hasher_t *hs, progress_t *pg, char *err,
                      size_t errlen) {
    const model_t *m = trainer_model(tr);
    const int ranks = trainer_ranks(tr);
    int parts = hs ? TIER_MASTER : 0;
    for (int o = 0; o < nouts; o++) parts |= 1 << outs[o].part;
    uint16_t buf[8192];
    char e2[768];
    int first = trainer_states_fetch(tr, 0, 0, parts, 0, e2, sizeof e2); // (ranks: nothing, cannot fail)
    if (first != 0) {
        ERR("%s", e2);
        return first;
    }
    for (int s = 0, k = 0; s < m->nshards; s++) {
        const shard_t *sh = &m->shards[s];
        for (int c = 0; c < trainer_nchunks(tr, s); c++, k++) {
            float *st[3];
            int rc = trainer_states_fetched(tr, s, c, parts, k & 1, &st[0], &st[1], &st[2], e2, sizeof e2);
            int s1 = s, c1 = c; // the next chunk's read goes on while this one is hashed and written
            if (rc == 0 && !first && next_chunk(tr, &s1, &c1))
                rc = trainer_states_fetch(tr, s1, c1, parts, (k + 1) & 1, e2, sizeof e2);
            if (rc != 0 && !first) {
                first = rc;
                ERR("%s", e2);
            }
            if (first && ranks == 1) return first;
            if (first) continue; // the gathers only, from here
            size_t lo, n, a, b;
            trainer_chunk_range(tr, s, c, &lo, &n);
            if (hs) trainer_hash_chunk(tr, hs, s, c, st[0]);
            for (int o = 0; o < nouts && rc == 0; o++) {
                st_writer_t *w = outs[o].w;
                for (int t = 0; t < sh->ntensors && rc == 0 && w; t++) {
                    if (!model_tensor_in_range(&sh->tensors[t], lo, n, &a, &b)) continue;
                    const float *src = st[outs[o].part] + (a - lo);
                    if (!outs[o].bf16) {
                        rc = st_write(w, src, (b - a) * 4);
                        continue;
                    }
                    for (size_t i = 0; i < b - a && rc == 0; i += 8192) {
                        size_t k = b - a - i < 8192 ? b - a - i : 8192;
                        bf16_from_f32_n(buf, src + i, k);
                        rc = st_write(w, buf, k * 2);
                    }
                }
                if (rc != 0) ERR("%s", st_writer_error(w)[0] ? st_writer_error(w) : strerror(-rc));
                else progress_add(pg, (uint64_t)n * (outs[o].bf16 ? 2 : 4));
            }
            if (rc != 0) {
                first = rc;
                if (ranks == 1) return rc;
            }
        }
    }
    return first;
}

// Opens a safetensors file of the given parts of every tensor (suffixes[k] names part
// parts[k]), part after part, each in shard and tensor order: how write_pass streams them.
static int open_file(trainer_t *tr, const char *path, const char *format, int nparts, const int *parts,
                     const char *const *suffixes, int bf16_master, st_writer_t **w, char *err, size_t errlen) {
    const model_t *m = trainer_model(tr);
    int n = count_tensors(m) * nparts, k = 0;
    st_tensor_t *decl = calloc((size_t)n, sizeof *decl);
    tname_t *names = calloc((size_t)n, sizeof *names);
    if (!decl || !names) { free(decl); free(names); ERR("out of memory"); return -ENOMEM; }
    for (int p = 0; p < nparts; p++)
        for (int s = 0; s < m->nshards; s++)
            for (int t = 0; t < m->shards[s].ntensors; t++) {
                if (m->shards[s].tensors[t].row0 != 0) continue; // a piece: the first stands for it
                ckpt_tensor_decl(m, s, t, suffixes[p], parts[p] == 0 && bf16_master ? ST_BF16 : ST_F32, &decl[k],
                                 names[k]);
                k++;
            }
    st_meta_t meta[] = {{"format", format}};
    int rc = st_writer_open_flags(w, path, decl, n, meta, 1, ST_CRC32C, err, errlen);
    free(decl);
    free(names);
    return rc;
}

// model.safetensors (the masters, BF16 when bf16) and optimizer.safetensors (the FP32 masters
// when the model file is BF16, then Adam's m and v), both open at once. The first pass reads
// the masters and the optimizer file's first state together: the model file, the params_hash
// (*hash) and the optimizer file's first third go on beside one another (the hash, slower than
// the disk, hides under the writes). Then a pass for each state left. Paths NULL: no files,
// the gathers only (a rank that does not write, or rank 0 after a failure).
static int write_files(trainer_t *tr, const char *model_path, const char *opt_path, int bf16, uint64_t *hash,
                       progress_t *pg, char *err, size_t errlen) {
    static const int parts[] = {0, 1, 2};
    static const char *const model_suffix[] = {""}, *const opt_suffixes[] = {".master", ".exp_avg", ".exp_avg_sq"};
    const int ranks = trainer_ranks(tr), p0 = bf16 ? 0 : 1; // the optimizer file's first state
    st_writer_t *mw = NULL, *ow = NULL;
    int rc = model_path ? open_file(tr, model_path, "pt", 1, parts, model_suffix, bf16, &mw, err, errlen) : 0;
    if (rc == 0 && opt_path)
        rc = open_file(tr, opt_path, "tiertrain-adamw", 3 - p0, parts + p0, opt_suffixes + p0, 0, &ow, err, errlen);
    hasher_t hs; // beside the reads and writes
    hasher_init(&hs, FNV64_INIT);
    for (int p = p0; p < 3 && (rc == 0 || ranks > 1); p++) { // ranks: the gathers all the same
        if (rc != 0) { // nothing more is written
            st_writer_free(mw);
            st_writer_free(ow);
            mw = ow = NULL;
        }
        const save_out_t outs[2] = {{ow, p, 0}, {mw, 0, bf16}}; // the model file in the first pass only
        char e2[768];
        int r = write_pass(tr, outs, p == p0 ? 2 : 1, p == p0 ? &hs : NULL, pg, e2, sizeof e2);
        if (r != 0 && rc == 0) {
            rc = r;
            snprintf(err, errlen, "%s", e2);
        }
        test_delay();
    }
    rc = trainer_states_flush(tr, rc, err, errlen); // a read queued ahead of a failure
    *hash = hasher_value(&hs);
    hasher_free(&hs);
    if (rc == 0 && mw) {
        rc = st_writer_close(mw, err, errlen); // frees it either way
        mw = NULL;
    }
    if (rc == 0 && ow) return st_writer_close(ow, err, errlen);
    st_writer_free(mw);
    st_writer_free(ow);
    return rc;
}

// config.json; *crc gets the CRC-32C of its text (state.json records it). ids: the token ids
// the run's source folder had ("" for none).
// x in the fewest digits that read back as x ("1e-05", where %.17g writes 1.0000000000000001e-05)
static const char *shortest(char *buf, size_t len, double x) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

static int write_config_json(const trainer_t *tr, const char *path, int bf16, const char *ids, uint32_t *crc,
                             char *err, size_t errlen) {
    const model_t *m = trainer_model(tr);
    char eps[32]; // the run's --norm-eps as given (the model computes with its float, the same number to HF)
    shortest(eps, sizeof eps, trainer_config(tr)->norm_eps);
    // the context the model was made for: a fine-tune at a shorter --seq keeps its folder's
    const int max_pos = trainer_config(tr)->max_pos > m->T ? trainer_config(tr)->max_pos : m->T;
    char text[4096], rs[512]; // at most about 1.5 KiB: the fields, rope_scaling and the token ids
    hf_rope_scaling_json(&m->rope_scaling, rs, sizeof rs);
    snprintf(text, sizeof text,
             "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
             "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
             "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
             "  \"vocab_size\": %d,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %.17g,\n  \"rope_scaling\": %s,\n"
             "  \"tie_word_embeddings\": %s,\n  \"max_position_embeddings\": %d,\n  \"hidden_act\": \"silu\",\n"
             "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n%s  \"torch_dtype\": \"%s\"\n}\n",
             m->C, m->F, m->L, m->NH, m->NKV, m->HS, m->V, eps, m->rope_theta, rs,
             m->tie ? "true" : "false", max_pos, ids, bf16 ? "bfloat16" : "float32");
    *crc = crc32c(0, text, strlen(text));
    return write_text(path, text, err, errlen);
}

// state.json. Its last member, "state_crc32c", is the CRC-32C of every byte before that key;
// "config_crc32c" that of config.json.
static int write_state_json(const trainer_t *tr, const data_t *d, int step, uint64_t hash, uint32_t config_crc,
                            const char *path, char *err, size_t errlen) {
    const config_t *c = trainer_config(tr);
    const model_t *m = trainer_model(tr);
    char data[TT_PATH_MAX * 2];
    if (json_escape(data, sizeof data, c->data, strlen(c->data)) < 0) snprintf(data, sizeof data, "\"?\"");
    char text[TT_PATH_MAX * 2 + 2560], rs[512];
    hf_rope_scaling_json(&m->rope_scaling, rs, sizeof rs);
    snprintf(text, sizeof text,
             "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"step\": %d,\n  \"params_hash\": \"%016llx\",\n"
             "  \"train_pos\": %llu,\n  \"val_pos\": %llu,\n  \"data\": %s,\n  \"batch\": %d,\n  \"accum\": %d,\n"
             "  \"ranks\": %d,\n"
             "  \"seed\": %llu,\n  \"rng\": \"none: training draws no random numbers after init\",\n"
             "  \"model_dtype\": \"%s\",\n"
             "  \"schedule\": {\"lr\": %.17g, \"min_lr\": %.17g, \"warmup\": %d, \"steps\": %d},\n"
             "  \"optimizer\": {\"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, \"wd\": %.17g, \"clip\": %.17g},\n"
             "  \"model\": {\"layers\": %d, \"dim\": %d, \"heads\": %d, \"kv_heads\": %d, \"ffn\": %d, \"vocab\": %d,"
             " \"seq\": %d, \"tie\": %d, \"rope_theta\": %.17g, \"rope_scaling\": %s, \"norm_eps\": %.17g,"
             " \"precision\": \"%s\"},\n"
             "  \"checksums\": \"crc32c\",\n  \"config_crc32c\": \"%08x\",\n  ",
             CKPT_FORMAT, CKPT_VERSION, step, (unsigned long long)hash,
             (unsigned long long)(d ? data_position(d, DATA_TRAIN) : 0),
             (unsigned long long)(d ? data_position(d, DATA_VAL) : 0), data, c->B, c->accum, trainer_ranks(tr),
             (unsigned long long)c->seed, c->save_bf16 ? "BF16" : "F32", c->lr, c->min_lr, c->warmup, c->steps,
             c->beta1, c->beta2, c->eps, c->wd, c->clip, m->L, m->C, m->NH, m->NKV, m->F, m->V, m->T, m->tie,
             m->rope_theta, rs, c->norm_eps, c->precision == PREC_FP32 ? "fp32" : "bf16", config_crc);
    size_t n = strlen(text);
    snprintf(text + n, sizeof text - n, STATE_CRC_KEY ": \"%08x\"\n}\n", crc32c(0, text, n));
    return write_text(path, text, err, errlen);
}

// Ranks: a save's gathers without its files, so that every rank's pair up — on the ranks that
// do not write, and on rank 0 when it fails before writing. Returns rc, or the gathers' error.
static int serve_gathers(trainer_t *tr, uint64_t *hash, int rc, char *err, size_t errlen) {
    if (trainer_ranks(tr) == 1) return rc;
    const config_t *c = trainer_config(tr);
    progress_t pg;
    progress_begin(&pg, "", 0, 0);
    char e2[768];
    uint64_t h = 0;
    int r = write_files(tr, NULL, NULL, c->save_bf16, hash ? hash : &h, &pg, e2, sizeof e2);
    if (r != 0 && rc == 0) { rc = r; snprintf(err, errlen, "%s", e2); }
    return rc;
}

int checkpoint_save(trainer_t *tr, const data_t *d, const hf_extras_t *carry, int step, uint64_t *params_hash,
                    char *where, size_t wlen, char *err, size_t errlen) {
    const config_t *c = trainer_config(tr);
    const char *dir = c->save_dir;
    int rc = trainer_optimizer_wait(tr, err, errlen);
    if (rc != 0) return rc;
    if (trainer_rank(tr) != 0) { // ranks: rank 0 writes; the others serve their pieces to its gathers
        where[0] = 0;
        return serve_gathers(tr, params_hash, 0, err, errlen);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        int e = errno;
        ERR("--save %s: %s", dir, strerror(e));
        return serve_gathers(tr, NULL, -e, err, errlen);
    }
    ckpt_prune(dir, 0, ""); // leftovers of an interrupted save are never taken for a checkpoint
    char name[32], tmp[TT_PATH_MAX + 64], final[TT_PATH_MAX + 64], path[TT_PATH_MAX + 128];
    snprintf(name, sizeof name, "step-%08d", step);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%d", dir, name, (int)getpid());
    snprintf(final, sizeof final, "%s/%s", dir, name);
    // the swap below replaces a checkpoint of the same step; anything else by that name is
    // the user's, and a save never deletes what it did not write
    struct stat st;
    if (lstat(final, &st) == 0 && !ckpt_is_checkpoint(dir, name)) {
        ERR("--save %s: %s exists and is not a checkpoint (no state.json): move it out of the way or give another "
            "--save", dir, final);
        return serve_gathers(tr, NULL, -EEXIST, err, errlen);
    }
    if (mkdir(tmp, 0755) != 0) {
        int e = errno;
        ERR("--save %s: cannot create %s: %s", dir, tmp, strerror(e));
        return serve_gathers(tr, NULL, -e, err, errlen);
    }
    char opath[TT_PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    snprintf(opath, sizeof opath, "%s/optimizer.safetensors", tmp);
    char what[64];
    snprintf(what, sizeof what, "saving %s", name);
    progress_t pg;
    progress_begin(&pg, what, checkpoint_bytes(trainer_model(tr), c->save_bf16), 1);
    rc = write_files(tr, path, opath, c->save_bf16, params_hash, &pg, err, errlen);
    if (rc == 0) progress_end(&pg);
    uint32_t config_crc = 0;
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/config.json", tmp);
        rc = write_config_json(tr, path, c->save_bf16, carry ? carry->ids : "", &config_crc, err, errlen);
        test_delay();
    }
    for (int i = 0; rc == 0 && carry && i < carry->n; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, carry->name[i]);
        rc = write_bytes(path, carry->data[i], carry->len[i], err, errlen);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/state.json", tmp);
        rc = write_state_json(tr, d, step, *params_hash, config_crc, path, err, errlen);
        test_delay();
    }
    if (rc == 0) rc = fsync_dir(tmp, err, errlen);
    if (rc == 0) {
        // the same step saved again (a run restarted into the same DIR): swap the folders in
        // one atomic step, so `latest` never names a missing folder; tmp then holds the old
        // one. ENOENT (nothing to swap with) or EINVAL (no RENAME_EXCHANGE): plain rename.
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            ckpt_remove_folder(tmp);
        } else if (rename(tmp, final) != 0) {
            int e = errno;
            ERR("--save %s: rename %s -> %s: %s", dir, tmp, final, strerror(e));
            rc = -e;
        }
    }
    if (rc == 0) rc = fsync_dir(dir, err, errlen);
    if (rc != 0) {
        ckpt_remove_folder(tmp);
        return rc;
    }
    test_delay(); // between the folder's rename and latest's
    // latest, replaced atomically
    char ltmp[TT_PATH_MAX + 64], latest[TT_PATH_MAX + 64], line[48];
    snprintf(ltmp, sizeof ltmp, "%s/.tmp-latest-%d", dir, (int)getpid());
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(line, sizeof line, "%s\n", name);
    if ((rc = write_text(ltmp, line, err, errlen)) == 0 && rename(ltmp, latest) != 0) {
        rc = -errno;
        ERR("--save %s: rename %s -> %s: %s", dir, ltmp, latest, strerror(-rc));
    }
    if (rc == 0) rc = fsync_dir(dir, err, errlen);
    if (rc != 0) {
        unlink(ltmp);
        return rc;
    }
    ckpt_prune(dir, c->keep_last, name);
    snprintf(where, wlen, "%s", final);
    return 0;
}
