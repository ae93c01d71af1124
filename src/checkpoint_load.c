// checkpoint_load.c — checkpoint_load (checkpoint.h): the files read on the read-ahead's
// lanes, chunk by chunk into the tiers, every checksum and the params_hash checked.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ahead.h" // uses: ahead_take (the files' reads a chunk ahead)
#include "checkpoint.h"
#include "checkpoint_internal.h"
#include "comm.h"
#include "hasher.h" // uses: hasher_init, hasher_value (params_hash beside the I/O)
#include "progress.h"
#include "safetensors.h"
#include "util.h"

#define ERR(...) snprintf(err, errlen, __VA_ARGS__)

// ---------------------------------------------------------------- load

// Reads elements [lo, lo + n) of tensor `want` of r into dst (FP32), converting from BF16
// when the file holds BF16; checks the name and the shape first.
static int load_tensor(st_reader_t *r, const char *file, const st_tensor_t *want, size_t lo, size_t n,
                       float *dst, char *err, size_t errlen) {
    int idx = st_find(r, want->name);
    if (idx < 0) {
        ERR("%s: no tensor '%s' (a checkpoint of another model?)", file, want->name);
        return -EINVAL;
    }
    const st_tensor_t *t = &r->tensors[idx];
    int same = t->ndim == want->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want->shape[d];
    if (!same) {
        char got[160], need[160];
        st_shape_str(got, sizeof got, t->ndim, t->shape);
        st_shape_str(need, sizeof need, want->ndim, want->shape);
        ERR("%s: tensor '%s' has shape %s, this model's is %s (a checkpoint of another model?)", file, want->name, got,
            need);
        return -EINVAL;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16) {
        ERR("%s: tensor '%s' is %s (accepted: F32, BF16)", file, want->name, st_dtype_name(t->dtype));
        return -EINVAL;
    }
    return st_read_f32(r, idx, lo, n, dst, err, errlen);
}


// Lane `part`'s share of a chunk for one tensor, elements [a, b) of the shard: part 0 its
// master (from the model file, or the optimizer file's .master when the model file is BF16),
// 1 Adam's m, 2 its v; checked finite (v non-negative), naming the file and the tensor that
// holds a bad value.
static int load_part(const model_t *m, int s, int t, const ckpt_info_t *info, int part, st_reader_t *r,
                     const char *path, size_t a, size_t b, float *dst, char *err, size_t errlen) {
    const tensor_t *te = &m->shards[s].tensors[t];
    const size_t i0 = (size_t)te->row0 * (size_t)te->cols + (a - te->offset), n = b - a; // in the whole tensor
    const char *suffix = part == 1 ? ".exp_avg" : part == 2 ? ".exp_avg_sq" : info->model_bf16 ? ".master" : "";
    st_tensor_t want;
    tname_t nm;
    ckpt_tensor_decl(m, s, t, suffix, ST_F32, &want, nm);
    int rc = load_tensor(r, path, &want, i0, n, dst, err, errlen);
    if (rc != 0 || first_bad_float(dst, n, part == 2) == n) return rc;
    char hf[200];
    model_tensor_hf_name(m, s, t, hf, sizeof hf);
    ERR("%s: tensor '%s%s' holds a %s value (a corrupt checkpoint)", path, hf, suffix,
        part == 2 ? "negative or non-finite" : "non-finite");
    return -EINVAL;
}

// A version-2 file must carry a checksum for every tensor (a version-1 one carries none).
static int check_has_checksums(const st_reader_t *r, const ckpt_info_t *info, char *err, size_t errlen) {
    int i = info->version < 2 ? -1 : st_unchecked(r);
    if (i < 0) return 0;
    ERR("%s: tensor '%.200s' has no crc32c entry in __metadata__ (a version-2 checkpoint has one for every tensor): "
        "the file is corrupt", r->path, r->tensors[i].name);
    return -EINVAL;
}

// The load's read-ahead (ahead.h): item k is the k-th chunk in the load's order, its tensors'
// slices read from the files into the buffer while the caller writes the chunk before it into
// its tier. Lane p fills part p (the masters, then m and v unless weights_only), `chunk` floats
// each, through a reader of its own (r[p]: the files are read at three places at once).
// Reads only the files and the model's layout, which nothing changes meanwhile.
typedef struct {
    const trainer_t *tr;
    const model_t *m;
    const ckpt_info_t *info;
    st_reader_t *r[3];           // lane p's reader
    const char *path[3];         // and its file
    int (*sc)[2];  // (nitems) shard and chunk of item k
    size_t chunk;  // floats per part in the buffer: the largest chunk
    int lanes;     // 1 (weights_only) or 3
} load_ahead_t;

static int load_chunk(void *arg, int part, int k, void *buf, char *err, size_t errlen) {
    const load_ahead_t *x = arg;
    const int s = x->sc[k][0], c = x->sc[k][1];
    const shard_t *sh = &x->m->shards[s];
    size_t lo, n, a, b;
    trainer_chunk_range(x->tr, s, c, &lo, &n);
    float *dst = (float *)buf + (size_t)part * x->chunk;
    int rc = 0;
    for (int t = 0; t < sh->ntensors && rc == 0; t++)
        if (model_tensor_in_range(&sh->tensors[t], lo, n, &a, &b))
            rc = load_part(x->m, s, t, x->info, part, x->r[part], x->path[part], a, b, dst + (a - lo), err, errlen);
    return rc;
}

// The load's chunks in order into x->sc, and the read-ahead over them. 0 or -ENOMEM.
static int load_ahead_init(load_ahead_t *x, ahead_t **ah, char *err, size_t errlen) {
    int n = 0;
    for (int s = 0; s < x->m->nshards; s++) n += trainer_nchunks(x->tr, s);
    if (!(x->sc = malloc((size_t)(n ? n : 1) * sizeof *x->sc))) {
        ERR("out of memory");
        return -ENOMEM;
    }
    x->chunk = 0;
    for (int s = 0, k = 0; s < x->m->nshards; s++)
        for (int c = 0; c < trainer_nchunks(x->tr, s); c++, k++) {
            size_t lo, len;
            trainer_chunk_range(x->tr, s, c, &lo, &len);
            if (len > x->chunk) x->chunk = len;
            x->sc[k][0] = s;
            x->sc[k][1] = c;
        }
    return ahead_init(ah, x->chunk * sizeof(float) * (size_t)x->lanes, x->lanes, n, load_chunk, x, err, errlen);
}

int checkpoint_load(trainer_t *tr, data_t *d, const ckpt_info_t *info, int weights_only, char *err, size_t errlen) {
    const model_t *m = trainer_model(tr);
    // with ranks rank 0 alone reads the files (no shared filesystem needed) and broadcasts each
    // chunk; every rank keeps its piece of it
    const int ranks = trainer_ranks(tr), reader = trainer_rank(tr) == 0;
    char mpath[TT_PATH_MAX + 64], opath[TT_PATH_MAX + 64];
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", info->dir);
    snprintf(opath, sizeof opath, "%s/optimizer.safetensors", info->dir);
    // the optimizer file is read at up to three places at once, each lane through a reader of
    // its own (ahead.h): orr its m (and what the load did not read), ov its v, om its masters
    // when the model file is BF16
    st_reader_t *mr = NULL, *orr = NULL, *ov = NULL, *om = NULL;
    if (info->version < 2)
        notice("%s: saved without checksums (checkpoint version %d): loading it unverified", info->dir, info->version);
    int rc = 0;
    if (reader) {
        rc = st_open(mpath, &mr, err, errlen);
        if (rc == 0) rc = check_has_checksums(mr, info, err, errlen);
        if (rc == 0 && (!weights_only || info->model_bf16)) rc = st_open(opath, &orr, err, errlen);
        if (rc == 0 && orr) rc = check_has_checksums(orr, info, err, errlen);
        if (rc == 0 && orr && !weights_only) rc = st_open(opath, &ov, err, errlen);
        if (rc == 0 && orr && !weights_only && info->model_bf16) rc = st_open(opath, &om, err, errlen);
    }
    rc = comm_bcast_rc(comm_world(), rc, "the checkpoint", err, errlen); // ranks: what rank 0 found
    hasher_t hs; // of the masters, in the order the save hashed them, beside the reads
    hasher_init(&hs, FNV64_INIT);
    char what[TT_PATH_MAX + 16];
    snprintf(what, sizeof what, "loading %s", info->dir);
    progress_t pg;
    progress_begin(&pg, what, (uint64_t)m->numel_padded * (weights_only ? 4 : 12), 1);
    // the lanes read chunks k+1 and k+2 from the files while chunk k goes into its tier
    load_ahead_t lx = {.tr = tr, .m = m, .info = info, .r = {info->model_bf16 ? (om ? om : orr) : mr, orr, ov},
                       .path = {info->model_bf16 ? opath : mpath, opath, opath}, .lanes = weights_only ? 1 : 3};
    ahead_t *ah = NULL;
    if (reader && rc == 0) rc = load_ahead_init(&lx, &ah, err, errlen);
    for (int s = 0, k = 0; s < m->nshards && rc == 0; s++) {
        const shard_t *sh = &m->shards[s];
        for (int c = 0; c < trainer_nchunks(tr, s) && rc == 0; c++, k++) {
            float *master, *mm, *vv;
            // two staging buffers: chunk k's write home is in flight while chunk k+1 is filled
            if ((rc = trainer_states_stage(tr, s, c, k & 1, &master, &mm, &vv, err, errlen)) != 0) break;
            size_t lo, n, a, b;
            trainer_chunk_range(tr, s, c, &lo, &n);
            void *got = NULL;
            if (reader) rc = ahead_take(ah, k, &got, err, errlen);
            for (int t = 0; t < sh->ntensors && rc == 0 && reader; t++) // the tensors' slices (the rest stays 0)
                if (model_tensor_in_range(&sh->tensors[t], lo, n, &a, &b)) {
                    const float *from = (const float *)got + (a - lo);
                    memcpy(master + (a - lo), from, (b - a) * sizeof(float));
                    if (weights_only) continue;
                    memcpy(mm + (a - lo), from + lx.chunk, (b - a) * sizeof(float));
                    memcpy(vv + (a - lo), from + 2 * lx.chunk, (b - a) * sizeof(float));
                }
            if (reader && rc == 0) ahead_done(ah);
            if (ranks > 1) {
                rc = comm_bcast_rc(comm_world(), rc, "the checkpoint", err, errlen);
                float *part[3] = {master, mm, vv};
                for (int k = 0; k < 3 && rc == 0; k++)
                    rc = comm_bcast(comm_world(), part[k], n * sizeof(float), 0, err, errlen);
            }
            if (rc == 0) trainer_hash_chunk(tr, &hs, s, c, master);
            if (rc == 0) rc = trainer_states_store(tr, s, c, k & 1, err, errlen);
            progress_add(&pg, (uint64_t)n * (weights_only ? 4 : 12));
        }
    }
    ahead_free(ah);
    free(lx.sc);
    rc = trainer_states_flush(tr, rc, err, errlen); // the writes in flight, whatever happened
    if (rc == 0) progress_end(&pg);
    // what the load did not read (the BF16 model beside its FP32 master; tensors of no shard)
    // is checked all the same: a corrupt file is never passed on as a good one
    // (by the reader alone: its verdict goes to every rank, which all reach here unless the
    // loop failed, and said so, everywhere)
    int vrc = 0;
    if (rc == 0 && reader) vrc = st_verify_rest(mr, err, errlen);
    if (rc == 0 && orr && ov) st_take_checked(orr, ov);
    if (rc == 0 && orr && om) st_take_checked(orr, om);
    if (vrc == 0 && rc == 0 && reader && orr && !weights_only) vrc = st_verify_rest(orr, err, errlen);
    if (rc == 0) rc = comm_bcast_rc(comm_world(), vrc, "the checkpoint", err, errlen);
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)hasher_value(&hs));
    hasher_free(&hs);
    if (rc == 0 && strcmp(got, info->params_hash) != 0) {
        ERR("%s/state.json: params_hash %s, but the weights loaded hash to %s (files from different checkpoints, or a "
            "corrupt one)", info->dir, info->params_hash, got);
        rc = -EINVAL;
    }
    st_close(mr);
    st_close(orr);
    st_close(ov);
    st_close(om);
    if (rc == 0 && d && !weights_only) {
        const int val = data_seek(d, DATA_TRAIN, info->train_pos) == 0; // the split that does not fit
        if (!val || data_seek(d, DATA_VAL, info->val_pos) != 0) {
            ERR("%s/state.json: its %s position %llu leaves no room for a batch in this run's %s tokens (%zu): resume "
                "with the --data and --batch it was saved with (%s, --batch %d)", info->dir,
                val ? "held-out" : "training", (unsigned long long)(val ? info->val_pos : info->train_pos),
                val ? "held-out" : "training", data_tokens(d, val ? DATA_VAL : DATA_TRAIN), info->data, info->B);
            rc = -EINVAL;
        }
    }
    return rc;
}
