// acts.c — see acts.h.
#include "acts.h"
#include "kernels.h" // CE_QUANTUM
#include <string.h>
#include "util.h"

// ---------------------------------------------------------------- the scratch

// Whether buffer i holds BF16 halves (acts.h h16): ln1, ln2, gate, up and h; q, k, v, att and x2.
static int half_buf(int i, unsigned h16) {
    return ((h16 & ACTS_H16_NORMS_MLP) && (i == 0 || i == 8 || (i >= 10 && i <= 12))) ||
           ((h16 & ACTS_H16_ATTN) && ((i >= 2 && i <= 5) || i == 7));
}

// Whether buffer i takes half the bytes: it holds halves and never FP32 words — ln2 only with
// att16 (it holds dk, FP32 otherwise: step.c's block_backward), and in the scratch not ln1
// (bf16 mode's xf; a kept block's ln1 is its own).
static int half_sized(int i, unsigned h16, int scratch) {
    return half_buf(i, h16) && !(scratch && i == 0) && (i != 8 || (h16 & ACTS_H16_ATTN));
}

// acts_scratch_sizes, or (scratch 0) the sizes of a kept block's buffers in FP32 storage.
static void sizes(const model_t *m, size_t N, int logits_all, int bf16, unsigned h16, int scratch, int fwd,
                  uint64_t bytes[ACTS_NSCRATCH]) {
    const uint64_t f = sizeof(float), C = (uint64_t)m->C, F = (uint64_t)m->F;
    // the logits of one quantum, or of every quantum (one after another, each (N, its width))
    const uint64_t V = (uint64_t)(logits_all || m->V < CE_QUANTUM ? m->V : CE_QUANTUM);
    const uint64_t KVD = (uint64_t)m->NKV * (uint64_t)m->HS, NH = (uint64_t)m->NH;
    const uint64_t R = (uint64_t)model_mlp_rows(m, (int)N); // one MLP chunk (N = B·T, an int)
    const uint64_t elems[ACTS_NSCRATCH] = {
        N * C, N, N * C, N * KVD, N * KVD, N * C, N * NH, N * C, N * C, N, R * F, R * F, R * F,        // forward
        N * C,                                                                                         // backward
        bf16 ? 0 : N * C, N, N * V, N,                                                                 // head
    };
    for (int i = 0; i < ACTS_NSCRATCH; i++) bytes[i] = elems[i] * (half_sized(i, h16, scratch) ? sizeof(uint16_t) : f);
    // no forward in the scratch: what a kept block keeps takes nothing here, but bf16 mode's xf
    if (scratch && !fwd)
        for (int i = 0; i < acts_nkept(m, N); i++)
            if (i != 0 || !bf16) bytes[i] = 0;
}

void acts_scratch_sizes(const model_t *m, size_t N, int logits_all, int bf16, unsigned h16, int fwd,
                        uint64_t bytes[ACTS_NSCRATCH]) {
    sizes(m, N, logits_all, bf16, h16, 1, fwd, bytes);
}

// The kept buffers that hold statistics (FP32 in every mode): rstd1, lse, rstd2.
static int kept_stat(int i) { return i == 1 || i == 6 || i == 9; }

// The first n scratch buffers (scratch 0: a kept block's, FP32 storage) carved from base (when
// a is not NULL), each at a 4 KiB boundary, one of no bytes NULL: their total bytes.
static uint64_t carve(acts_scratch_t *a, void *base, const model_t *m, size_t N, int n, int logits_all, int bf16,
                      unsigned h16, int scratch, int fwd) {
    _Static_assert(sizeof(acts_scratch_t) == ACTS_NSCRATCH * sizeof(float *), "acts_scratch_t: one pointer per size");
    uint64_t bytes[ACTS_NSCRATCH], off = 0;
    sizes(m, N, logits_all, bf16, h16, scratch, fwd, bytes);
    for (int i = 0; i < n; i++) {
        if (a) a->buf[i] = bytes[i] ? (float *)((char *)base + off) : NULL;
        off += ALIGN_UP(bytes[i], (uint64_t)4096);
    }
    if (a && bf16 && n == ACTS_NSCRATCH) a->xf = a->ln1; // acts_scratch_sizes
    return off;
}

uint64_t acts_scratch_total(const model_t *m, size_t N, int logits_all, int bf16, unsigned h16, int fwd) {
    return carve(NULL, NULL, m, N, ACTS_NSCRATCH, logits_all, bf16, h16, 1, fwd);
}
uint64_t acts_kept_total(const model_t *m, size_t N, int bf16, unsigned h16) {
    if (!bf16) return carve(NULL, NULL, m, N, acts_nkept(m, N), 0, 0, h16, 0, 1);
    uint64_t bytes[ACTS_NSCRATCH], off = 0;
    acts_scratch_sizes(m, N, 0, 0, 0, 1, bytes);
    for (int i = 0; i < acts_nkept(m, N); i++) off += ALIGN_UP(kept_stat(i) ? bytes[i] : bytes[i] / 2, (uint64_t)4096);
    return off;
}
void acts_scratch_carve(acts_scratch_t *a, void *base, const model_t *m, size_t N, int logits_all, int bf16,
                        unsigned h16, int fwd) {
    carve(a, base, m, N, ACTS_NSCRATCH, logits_all, bf16, h16, 1, fwd);
}
void acts_kept_carve(acts_scratch_t *a, void *base, const model_t *m, size_t N, unsigned h16) {
    carve(a, base, m, N, acts_nkept(m, N), 0, 0, h16, 0, 1);
}

// BF16 kept storage: buffer i's place in the allocation (4 KiB-aligned, in order), its
// elements to or from the scratch: converted, or copied where they are FP32 statistics or
// (h16) BF16 halves already.
static void kept_each(backend_t *be, acts_scratch_t *a, char *kept, const model_t *m, size_t N, int store, unsigned h16) {
    uint64_t bytes[ACTS_NSCRATCH], off = 0;
    acts_scratch_sizes(m, N, 0, 0, 0, 1, bytes);
    for (int i = 0; i < acts_nkept(m, N); i++) {
        void *k = kept + off;
        const size_t n = bytes[i] / sizeof(float);
        if (kept_stat(i) || half_buf(i, h16)) {
            const uint64_t nb = kept_stat(i) ? bytes[i] : bytes[i] / 2;
            backend_copy_d2d(be, store ? k : a->buf[i], store ? a->buf[i] : k, nb);
        } else if (store)
            be->ops->bf16_from_f32_n(k, a->buf[i], n);
        else
            be->ops->bf16_to_f32_n(a->buf[i], k, n);
        off += ALIGN_UP(kept_stat(i) ? bytes[i] : bytes[i] / 2, (uint64_t)4096);
    }
}

void acts_kept_store(backend_t *be, void *kept, const acts_scratch_t *a, const model_t *m, size_t N, unsigned h16) {
    kept_each(be, (acts_scratch_t *)a, kept, m, N, 1, h16);
}

void acts_kept_load(backend_t *be, acts_scratch_t *a, const void *kept, const model_t *m, size_t N, unsigned h16) {
    kept_each(be, a, (char *)kept, m, N, 0, h16);
}

// ---------------------------------------------------------------- the checkpoint store

int acts_init(acts_t *a, backend_t *be, int nmb, int L, size_t elems, float *dev, float *host, float *buf0,
              float *buf1, float *f32, const acts_counters_t *cnt, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->be = be;
    a->bf16 = f32 != NULL;
    a->f32 = f32;
    a->ftag = -1;
    a->nmb = nmb;
    a->L = L;
    a->elems = elems;
    a->dev = dev;
    a->host = host;
    a->tag[0] = a->tag[1] = -1;
    a->act_h2d = cnt->act_h2d;
    a->act_d2h = cnt->act_d2h;
    if (dev) return 0;
    int rc = visit_init(&a->visit, be, buf0, buf1, nmb * (L + 1), err, errlen);
    a->visit.h2d_bytes = cnt->h2d_bytes;
    a->visit.d2h_bytes = cnt->d2h_bytes;
    a->visit.copy_ms = cnt->copy_ms;
    return rc;
}

void acts_free(acts_t *a) {
    if (!a) return;
    visit_free(&a->visit);
    memset(a, 0, sizeof *a);
}

static int act_tag(const acts_t *a, int mb, int l) { return (a->nmb > 1 ? mb : 0) * (a->L + 1) + l; }

static void count(uint64_t *counter, uint64_t n) {
    if (counter) __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

// bf16 mode's store: act tag's BF16 elements.
static uint16_t *store16(const acts_t *a, int tag) {
    return (uint16_t *)(a->dev ? (void *)a->dev : (void *)a->host) + (size_t)tag * a->elems;
}

// --checkpoints host: the visit buffer holding act tag, which becomes the current input's; when
// neither holds it, it is copied up into the one not holding the current input (2 bytes an
// element in bf16 mode).
static int visit_of(acts_t *a, int tag) {
    int i = a->tag[0] == tag ? 0 : a->tag[1] == tag ? 1 : -1;
    if (i < 0) {
        i = a->cur ^ 1;
        const size_t esize = a->bf16 ? sizeof(uint16_t) : sizeof(float), bytes = a->elems * esize;
        visit_used(&a->visit, i); // whatever read it before is queued: the copy up comes after
        visit_up(&a->visit, i, tag, (char *)a->host + (size_t)tag * bytes, bytes);
        count(a->act_h2d, bytes);
        a->tag[i] = tag;
    }
    a->cur = i;
    return i;
}

// bf16 mode: act tag in FP32 in the one FP32 buffer (see acts.h), from the store or from the
// visit buffer holding it.
static float *in16(acts_t *a, int tag) {
    if (a->ftag == tag) return a->f32;
    a->be->ops->bf16_to_f32_n(a->f32, a->dev ? store16(a, tag) : (uint16_t *)a->visit.buf[visit_of(a, tag)], a->elems);
    a->ftag = tag;
    return a->f32;
}

float *acts_in(acts_t *a, int mb, int l) {
    int tag = act_tag(a, mb, l);
    if (a->bf16) return in16(a, tag);
    if (a->dev) return a->dev + (size_t)tag * a->elems;
    return a->visit.buf[visit_of(a, tag)];
}

void acts_prefetch(acts_t *a, int mb, int l) {
    if (!a->dev) visit_of(a, act_tag(a, mb, l));
}

float *acts_out(acts_t *a, int mb, int l) {
    if (a->bf16) return a->f32;
    if (a->dev) return a->dev + (size_t)act_tag(a, mb, l) * a->elems;
    int i = a->cur ^ 1;
    visit_open(&a->visit, i); // its last copy down has read it
    return a->visit.buf[i];
}

void acts_commit(acts_t *a, int mb, int l) {
    if (a->bf16) {
        int tag = act_tag(a, mb, l);
        if (a->dev) {
            a->be->ops->bf16_from_f32_n(store16(a, tag), a->f32, a->elems);
        } else {
            int i = a->cur ^ 1;
            size_t bytes = a->elems * sizeof(uint16_t);
            visit_open(&a->visit, i); // its last copy down has read it: the conversion may overwrite it
            a->be->ops->bf16_from_f32_n(a->visit.buf[i], a->f32, a->elems);
            visit_down(&a->visit, i, tag, store16(a, tag), bytes);
            count(a->act_d2h, bytes);
            a->tag[i] = tag;
            if (a->tag[i ^ 1] == tag) a->tag[i ^ 1] = -1;
            a->cur = i;
        }
        a->ftag = tag;
        return;
    }
    if (a->dev) return;
    int tag = act_tag(a, mb, l), i = a->cur ^ 1;
    size_t bytes = a->elems * sizeof(float);
    visit_down(&a->visit, i, tag, a->host + (size_t)tag * a->elems, bytes);
    count(a->act_d2h, bytes);
    a->tag[i] = tag;
    if (a->tag[i ^ 1] == tag) a->tag[i ^ 1] = -1; // an older copy of it
    a->cur = i;
}

void acts_forget(acts_t *a) { a->tag[0] = a->tag[1] = a->ftag = -1; }

float *acts_lend(acts_t *a) {
    if (!a->bf16) return NULL;
    a->ftag = -1;
    return a->f32;
}
