// attention_amx.c — attention's tile products on AMX tiles (attention_amx.h), where the CPU
// has AMX-BF16, the head size is a multiple of 32 up to 128, and q, k, v and the output
// gradient hold BF16 values (bf16 mode's: RoPE and the projections round them).
//
// The tasks are attention.c's (a query block of one head forward; one kv head backward), its
// softmax, gradient and mask steps on the same (keys × 32 queries) tiles, and the products on
// tiles laid out so that no FP32 operand is ever transposed:
//   Sᵀ = K·Qᵀ and dPᵀ = V·doutᵀ: K, V rows as A tiles, Qᵀ, doutᵀ as B (one transposed pack
//      per query block);
//   outᵀ += Vᵀ·Pᵀ and dqᵀ += Kᵀ·dS: Vᵀ, Kᵀ as A, P and dS as B — pairs of the tile's key rows;
//   dv += Pᵀ·dout and dk += dSᵀ·Q: the tile's key rows as A, dout, Q as B — pairs of rows.
// K and V are packed once per op for every kv head (att_amx_prepare), the query block's
// operands once per block. P and dS are FP32: each goes in three BF16 planes, x = hi + mid +
// lo exactly (each the upper half of what the planes before it left), so that every product
// with a BF16 operand is exact and the tiles add them, the smallest plane first: FP32-level
// results, as the FMA tiles', in the tiles' order. Each output element is added by one task
// in a fixed order (the same key blocks, query blocks and planes whatever the thread count),
// so the bits follow the operands and the shapes, and differ from the FMA path's. The round
// flag rounds the finished outputs, as attention.c's tasks do. With BF16 halves for q, k, v,
// out and dout (attention_forward16's, kernels.h) the packs widen them to the same words and
// the forward writes out as the halves of its rounded words: the same tiles, the same bits.
#include "attention_amx.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "amx.h"
#include "gemm.h" // uses: gemm_amx_path
#include "held.h"
#include "simd.h" // uses: tt_round_n

#define AT_BQ ATT_AMX_BQ
#define AT_BK ATT_AMX_BK
#define AT_HS 128 // largest head size

struct att_amx {
    int B, T, Tp, NH, NKV, HS; // Tp: T rounded up to AT_BK (zero keys past T)
    int h16;                   // the op's q, k, v, out and dout are BF16 halves, and its outputs too
    float *acc;                // h16's backward: per thread, a task's dk and dv rows (2·Tp·HS FP32)
    // per (b, g), Tp·HS BF16 each: K and V rows as A tiles (tile (key tile, step of HS) at
    // (kt·HS/32 + s)·512), Kᵀ and Vᵀ as A tiles (tile (tile of HS, step of keys) at
    // (ht·Tp/32 + s)·512, rows = HS index, words = pairs of keys)
    uint16_t *ka, *va, *kt, *vt;
    unsigned char *bad; // per (b, g): a word of its K or V is not a BF16 value
};

// One buffer for the op's packed K and V, grown as needed and held from prepare to done.
static held_t at_held = HELD_INIT;
static struct att_amx at_x;

// v split into planes: p[0] hi, p[1] mid, p[2] lo, each a BF16 value, their sum v exactly.
TT_AMX static inline void planes3(__m512 v, __m512 p[3]) {
    const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
    p[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), top));
    const __m512 r = _mm512_sub_ps(v, p[0]); // exact: v's lower 16 significant bits
    p[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(r), top));
    p[2] = _mm512_sub_ps(r, p[1]); // exact, and a BF16 value: r's last 8 bits
}
TT_AMX static inline unsigned low16(__m512i acc) { return (unsigned)_mm512_reduce_or_epi32(acc) & 0xffffu; }

// Operands are FP32 words, or (h16: attention_forward16's) BF16 halves; element i of one, and
// 16 of its words from element i (lanes past m zero): the halves widened to theirs, whose low
// halves are zero, so that a pack's check finds nothing in them.
static inline const void *elem(const void *p, int h16, size_t i) { return (const char *)p + i * (h16 ? 2 : 4); }
TT_AMX static inline __m512 ldw(const void *p, int h16, size_t i, __mmask16 m) {
    if (h16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

// ---------------------------------------------------------------- packing

// Rows [0, Tp) of src (row stride ld, HS wide; zeros past T) as A tiles at dst; the OR of
// their words' low halves.
TT_AMX static unsigned pack_rows(uint16_t *dst, const void *src, int h16, size_t ld, int T, int Tp, int HS) {
    const int nh = HS / 32;
    __m512i acc = _mm512_setzero_si512();
    for (int r = 0; r < Tp; r++) {
        uint16_t *d = dst + (size_t)(r / 16) * nh * 512 + (r % 16) * 32;
        for (int h = 0; h < HS; h += 16) {
            const __m512 w = ldw(src, h16, (size_t)r * ld + h, r < T ? 0xffff : 0);
            acc = _mm512_or_si512(acc, _mm512_castps_si512(w));
            _mm256_store_si256((__m256i *)(d + (size_t)(h / 32) * 512 + h % 32), narrow16(w));
        }
    }
    return low16(acc);
}

// src (Tp rows of HS; zeros past T) transposed as A tiles at dst: rows = HS index, 32 rows of
// src a step, in pairs; the OR of the words' low halves.
TT_AMX static unsigned pack_trans(uint16_t *dst, const void *src, int h16, size_t ld, int T, int Tp, int HS) {
    const int nsk = Tp / 32;
    __m512i acc = _mm512_setzero_si512();
    for (int ht = 0; ht < HS / 16; ht++)
        for (int s = 0; s < nsk; s++) {
            __m512i w[16];
            for (int j = 0; j < 16; j++) {
                const int r = 32 * s + 2 * j;
                const __m512 lo = ldw(src, h16, (size_t)r * ld + ht * 16, r < T ? 0xffff : 0);
                const __m512 hi = ldw(src, h16, (size_t)(r + 1) * ld + ht * 16, r + 1 < T ? 0xffff : 0);
                acc = _mm512_or_si512(acc, _mm512_or_si512(_mm512_castps_si512(lo), _mm512_castps_si512(hi)));
                w[j] = pair_words(lo, hi);
            }
            transpose16(w);
            uint32_t *tile = (uint32_t *)(dst + ((size_t)ht * nsk + s) * 512);
            for (int i = 0; i < 16; i++) _mm512_store_si512(tile + i * 16, w[i]);
        }
    return low16(acc);
}

// A query block's rows (nq of 32; zeros past them), HS wide, transposed as B tiles at dst:
// tile (query tile c, step s of HS) at (c·HS/32 + s)·256 words, row = pair of HS indices.
TT_AMX static unsigned pack_block_t(uint32_t *dst, const void *src, int h16, size_t ld, int nq, int HS) {
    const int nh = HS / 32;
    __m512i acc = _mm512_setzero_si512();
    for (int c = 0; c < 2; c++)
        for (int s = 0; s < nh; s++) {
            __m512i w[16];
            for (int i = 0; i < 16; i++) {
                const int t = c * 16 + i;
                const size_t r = (size_t)t * ld + 32 * s;
                const __m512 a = ldw(src, h16, r, t < nq ? 0xffff : 0), b = ldw(src, h16, r + 16, t < nq ? 0xffff : 0);
                acc = _mm512_or_si512(acc, _mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
                w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(narrow16(a)), narrow16(b), 1);
            }
            transpose16(w);
            for (int p = 0; p < 16; p++) _mm512_store_si512(dst + ((size_t)c * nh + s) * 256 + p * 16, w[p]);
        }
    return low16(acc);
}

// A query block's rows as B tiles in pairs of rows (one step of 32): tile (HS tile c) at
// c·256 words, row kp = the words of rows 2kp and 2kp + 1 (zeros past nq).
TT_AMX static unsigned pack_block_pairs(uint32_t *dst, const void *src, int h16, size_t ld, int nq, int HS) {
    __m512i acc = _mm512_setzero_si512();
    for (int kp = 0; kp < 16; kp++)
        for (int c = 0; c < HS / 16; c++) {
            const __m512 lo = ldw(src, h16, (size_t)(2 * kp) * ld + 16 * c, 2 * kp < nq ? 0xffff : 0);
            const __m512 hi = ldw(src, h16, (size_t)(2 * kp + 1) * ld + 16 * c, 2 * kp + 1 < nq ? 0xffff : 0);
            acc = _mm512_or_si512(acc, _mm512_or_si512(_mm512_castps_si512(lo), _mm512_castps_si512(hi)));
            _mm512_store_si512(dst + (size_t)c * 256 + kp * 16, pair_words(lo, hi));
        }
    return low16(acc);
}

// An FP32 tile (keys × 32 queries, rows < nk; zeros past them) as B planes in pairs of key
// rows: plane p (0 the smallest), query tile c, key step s at dst + ((p·2 + c)·2 + s)·256.
TT_AMX static void planes_b(uint32_t *dst, const float *st, int nk, int nks) {
    for (int kp = 0; kp < 16 * nks; kp++) {
        const float *r0 = st + (size_t)2 * kp * AT_BQ, *r1 = r0 + AT_BQ;
        for (int c = 0; c < 2; c++) {
            __m512 pl[3], ph[3];
            planes3(_mm512_maskz_loadu_ps(2 * kp < nk ? 0xffff : 0, r0 + 16 * c), pl);
            planes3(_mm512_maskz_loadu_ps(2 * kp + 1 < nk ? 0xffff : 0, r1 + 16 * c), ph);
            for (int p = 0; p < 3; p++)
                _mm512_store_si512(dst + (((size_t)p * 2 + c) * 2 + kp / 16) * 256 + (kp % 16) * 16,
                                   pair_words(pl[2 - p], ph[2 - p]));
        }
    }
}

// The same tile's rows as A planes (the 32 queries one step): plane p, key tile j at
// dst + (p·4 + j)·512 (zeros past nk).
TT_AMX static void planes_a(uint16_t *dst, const float *st, int nk, int nks) {
    for (int r = 0; r < 32 * nks; r++)
        for (int c = 0; c < 2; c++) {
            __m512 p3[3];
            planes3(_mm512_maskz_loadu_ps(r < nk ? 0xffff : 0, st + (size_t)r * AT_BQ + 16 * c), p3);
            for (int p = 0; p < 3; p++)
                _mm256_store_si256((__m256i *)(dst + ((size_t)p * 4 + r / 16) * 512 + (r % 16) * 32 + 16 * c),
                                   narrow16(p3[2 - p]));
        }
}

// ---------------------------------------------------------------- the op's K and V

int att_amx_ok(int NH, int NKV, int HS) {
    return gemm_amx_path() && HS > 0 && HS % 32 == 0 && HS <= AT_HS && NKV > 0 && NH % NKV == 0;
}

// The buffer's layout for B·NKV kv heads of T keys: the packed K and V (three arrays of Tp·HS
// halves a head, then a byte a head), then from *acc_at, h16's backward's scratch (two Tp·HS
// float arrays a thread). Returns its bytes, whole cache lines.
static size_t at_bytes(int B, int T, int NKV, int HS, int h16, int bwd, size_t threads, size_t *acc_at) {
    const size_t per = (size_t)((T + AT_BK - 1) / AT_BK * AT_BK) * HS, heads = (size_t)B * NKV;
    const size_t at = (3 * heads * per * sizeof(uint16_t) + heads + 63) / 64 * 64;
    if (acc_at) *acc_at = at;
    return (at + (h16 && bwd ? threads * 2 * per * sizeof(float) : 0) + 63) / 64 * 64;
}

size_t att_amx_bytes(int B, int T, int NKV, int HS, int h16, int bwd, int threads) {
    return at_bytes(B, T, NKV, HS, h16, bwd, (size_t)threads, NULL);
}

size_t att_amx_held(void) { return held_bytes(&at_held); }
int att_amx_reserve(size_t bytes) { return held_reserve(&at_held, bytes); }
void att_amx_release(void) { held_free(&at_held); }

att_amx_t *att_amx_prepare(const void *k, const void *v, int h16, int B, int T, int NH, int NKV, int HS, int bwd) {
    if (!att_amx_ok(NH, NKV, HS)) return NULL;
    size_t acc_at;
    uint16_t *base = held_take(&at_held, at_bytes(B, T, NKV, HS, h16, bwd, (size_t)omp_get_max_threads(), &acc_at));
    if (!base) return NULL;
    struct att_amx *x = &at_x; // the holder's, as the buffer is
    *x = (struct att_amx){.B = B, .T = T, .Tp = (T + AT_BK - 1) / AT_BK * AT_BK, .NH = NH, .NKV = NKV, .HS = HS,
                          .h16 = h16};
    const size_t per = (size_t)x->Tp * HS, heads = (size_t)B * NKV;
    x->ka = base;
    x->vt = bwd ? NULL : base + heads * per;
    x->va = bwd ? base + heads * per : NULL;
    x->kt = bwd ? base + 2 * heads * per : NULL;
    x->bad = (unsigned char *)(base + 3 * heads * per);
    x->acc = h16 && bwd ? (float *)((char *)base + acc_at) : NULL;
    const size_t ks = (size_t)NKV * HS;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++) {
            const size_t o = (size_t)b * T * ks + (size_t)g * HS, at = ((size_t)b * NKV + g) * per;
            const void *ko = elem(k, h16, o), *vo = elem(v, h16, o);
            unsigned bad = pack_rows(x->ka + at, ko, h16, ks, T, x->Tp, HS);
            if (bwd) {
                bad |= pack_rows(x->va + at, vo, h16, ks, T, x->Tp, HS);
                bad |= pack_trans(x->kt + at, ko, h16, ks, T, x->Tp, HS);
            } else {
                bad |= pack_trans(x->vt + at, vo, h16, ks, T, x->Tp, HS);
            }
            x->bad[(size_t)b * NKV + g] = bad != 0;
        }
    return x;
}

void att_amx_done(att_amx_t *x) {
    if (x) held_give(&at_held);
}

// ---------------------------------------------------------------- tile products

// st (the key block's rows 32·half.., × 32 queries; row stride 32) = rows of A tiles ap
// (key tiles kt, kt + 1) · B tiles bp (the block's two query tiles), over nh steps of HS.
TT_AMX static void scores(float *st, const uint16_t *ap, int kt, const uint32_t *bp, int nh) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int s = 0; s < nh; s++) {
        _tile_loadd(4, ap + ((size_t)kt * nh + s) * 512, 64);
        _tile_loadd(5, ap + ((size_t)(kt + 1) * nh + s) * 512, 64);
        _tile_loadd(6, bp + (size_t)s * 256, 64);
        _tile_loadd(7, bp + ((size_t)nh + s) * 256, 64);
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, st, 128); _tile_stored(1, st + 16, 128);
    _tile_stored(2, st + 16 * AT_BQ, 128); _tile_stored(3, st + 16 * AT_BQ + 16, 128);
}

// c (32 × 32 of HS rows × queries, row stride 32) += A tiles at a0, a1 (this block's two tiles
// of HS rows; step s at + s·512) · the three B planes pb (planes_b's), over nks key steps.
TT_AMX static void rows_by_planes(float *c, const uint16_t *a0, const uint16_t *a1, const uint32_t *pb, int nks) {
    _tile_loadd(0, c, 128); _tile_loadd(1, c + 16, 128);
    _tile_loadd(2, c + 16 * AT_BQ, 128); _tile_loadd(3, c + 16 * AT_BQ + 16, 128);
    for (int s = 0; s < nks; s++) {
        _tile_loadd(4, a0 + (size_t)s * 512, 64);
        _tile_loadd(5, a1 + (size_t)s * 512, 64);
        for (int p = 0; p < 3; p++) { // the smallest plane first
            _tile_loadd(6, pb + (((size_t)p * 2 + 0) * 2 + s) * 256, 64);
            _tile_loadd(7, pb + (((size_t)p * 2 + 1) * 2 + s) * 256, 64);
            _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, 128); _tile_stored(1, c + 16, 128);
    _tile_stored(2, c + 16 * AT_BQ, 128); _tile_stored(3, c + 16 * AT_BQ + 16, 128);
}

// The rows r0.. (32 of them, those under `rows` real) × columns h0.. (32) of C (row stride
// ld: dk or dv) (+)= the three A planes pa (planes_a's, key tiles r0/16..) · B tiles bp (HS
// tiles h0/16.., one step): from zero when first. Rows past `rows` (the op's end) go through
// tmp and are not written.
TT_AMX static void keys_by_block(float *C, size_t ld, int rows, int r0, int h0, const uint16_t *pa, const uint32_t *bp,
                                 int first) {
    float tmp[32 * 32] __attribute__((aligned(64)));
    const int whole = rows - r0 >= 32;
    float *c = whole ? C + (size_t)r0 * ld + h0 : tmp;
    const size_t cl = whole ? ld : 32, cs = cl * 4;
    if (first) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    } else {
        if (!whole)
            for (int r = 0; r < 32; r++)
                for (int q = 0; q < 32; q += 16)
                    _mm512_store_ps(tmp + r * 32 + q,
                                    _mm512_maskz_loadu_ps(r0 + r < rows ? 0xffff : 0, C + (size_t)(r0 + r) * ld + h0 + q));
        _tile_loadd(0, c, cs); _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, c + 16 * cl, cs); _tile_loadd(3, c + 16 * cl + 16, cs);
    }
    _tile_loadd(6, bp + (size_t)(h0 / 16) * 256, 64);
    _tile_loadd(7, bp + (size_t)(h0 / 16 + 1) * 256, 64);
    for (int p = 0; p < 3; p++) { // the smallest plane first
        _tile_loadd(4, pa + ((size_t)p * 4 + r0 % AT_BK / 16) * 512, 64);
        _tile_loadd(5, pa + ((size_t)p * 4 + r0 % AT_BK / 16 + 1) * 512, 64);
        _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, cs); _tile_stored(1, c + 16, cs);
    _tile_stored(2, c + 16 * cl, cs); _tile_stored(3, c + 16 * cl + 16, cs);
    if (!whole)
        for (int r = 0; r < 32 && r0 + r < rows; r++) memcpy(C + (size_t)(r0 + r) * ld + h0, tmp + r * 32, 32 * sizeof(float));
}

// Rows [0, nq) of a block (row stride ld) = the columns of tT (HS × 32, row stride 32) times
// scale[i] (NULL: 1), 16 × 16 blocks transposed in registers: FP32 words, or (h16) BF16 halves
// of the words rounded (the FP32 words' bits, rounded after: tt_round_n's rounding).
TT_AMX static void store_rows(void *dst, int h16, size_t ld, const float *tT, int nq, int HS, const float *scale) {
    for (int c = 0; c < nq; c += 16)
        for (int d0 = 0; d0 < HS; d0 += 16) {
            __m512i w[16];
            for (int j = 0; j < 16; j++) w[j] = _mm512_load_si512(tT + (size_t)(d0 + j) * AT_BQ + c);
            transpose16(w);
            for (int i = 0; i < 16 && c + i < nq; i++) {
                __m512 r = _mm512_castsi512_ps(w[i]);
                if (scale) r = _mm512_mul_ps(r, _mm512_set1_ps(scale[c + i]));
                const size_t at = (size_t)(c + i) * ld + d0;
                if (h16) _mm256_storeu_si256((__m256i *)((uint16_t *)dst + at), narrow16((__m512)rnd16((v16f)r)));
                else _mm512_storeu_ps((float *)dst + at, r);
            }
        }
}

// ---------------------------------------------------------------- forward

TT_AMX int att_amx_fwd_task(const att_amx_t *x, void *out, float *lse, const void *q, int b, int h, int qb, int round,
                            att_softmax_fn softmax, att_mask_fn mask) {
    const int T = x->T, HS = x->HS, NH = x->NH, NKV = x->NKV, g = h / (NH / NKV), nh = HS / 32, nsk = x->Tp / 32;
    if (x->bad[(size_t)b * NKV + g]) return 1;
    const int t0 = qb * AT_BQ, nq = T - t0 < AT_BQ ? T - t0 : AT_BQ;
    const size_t qs = (size_t)NH * HS, per = (size_t)x->Tp * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const uint16_t *ka = x->ka + ((size_t)b * NKV + g) * per, *vt = x->vt + ((size_t)b * NKV + g) * per;
    uint32_t qB[AT_HS / 32 * 2 * 256] __attribute__((aligned(64))); // Qᵀ as B
    uint32_t pB[3 * 2 * 2 * 256] __attribute__((aligned(64)));      // P as B planes
    float st[AT_BK * AT_BQ] __attribute__((aligned(64)));           // Sᵀ, then P
    float ot[AT_HS * AT_BQ] __attribute__((aligned(64)));           // outᵀ
    float m[AT_BQ], l[AT_BQ], corr[AT_BQ], inv[AT_BQ];
    const int h16 = x->h16;
    if (pack_block_t(qB, elem(q, h16, ((size_t)b * T + t0) * qs + (size_t)h * HS), h16, qs, nq, HS)) return 1;
    for (int i = 0; i < AT_BQ; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
    memset(ot, 0, (size_t)HS * AT_BQ * sizeof(float));
    tiles_on();
    for (int s0 = 0; s0 < t0 + nq; s0 += AT_BK) {
        const int nk = t0 + nq - s0 < AT_BK ? t0 + nq - s0 : AT_BK, nks = (nk + 31) / 32;
        for (int half = 0; half < nks; half++) scores(st + (size_t)32 * half * AT_BQ, ka, (s0 + 32 * half) / 16, qB, nh);
        mask(st, s0, nk, t0, -INFINITY);
        softmax(st, nk, m, l, corr, scale);
        // outᵀ = outᵀ·corr (per query: its column; 0 on the first tile, where outᵀ is 0) + Vᵀ·P
        const __m512 c0 = _mm512_loadu_ps(corr), c1 = _mm512_loadu_ps(corr + 16);
        for (int d = 0; d < HS; d++) {
            _mm512_store_ps(ot + d * AT_BQ, _mm512_mul_ps(_mm512_load_ps(ot + d * AT_BQ), c0));
            _mm512_store_ps(ot + d * AT_BQ + 16, _mm512_mul_ps(_mm512_load_ps(ot + d * AT_BQ + 16), c1));
        }
        planes_b(pB, st, nk, nks);
        for (int hb = 0; hb < HS; hb += 32)
            rows_by_planes(ot + (size_t)hb * AT_BQ, vt + ((size_t)(hb / 16) * nsk + s0 / 32) * 512,
                           vt + ((size_t)(hb / 16 + 1) * nsk + s0 / 32) * 512, pB, nks);
    }
    _tile_release();
    const size_t ob = ((size_t)b * T + t0) * qs + (size_t)h * HS;
    for (int i = 0; i < AT_BQ; i++) inv[i] = i < nq ? 1.0f / l[i] : 0.0f;
    store_rows((void *)elem(out, h16, ob), h16, qs, ot, nq, HS, inv); // (h16: rounded)
    for (int i = 0; i < nq; i++) {
        if (round && !h16) tt_round_n((float *)out + ob + (size_t)i * qs, (size_t)HS);
        lse[((size_t)b * NH + h) * T + t0 + i] = m[i] + logf(l[i]);
    }
    return 0;
}

// ---------------------------------------------------------------- backward

// The OR of the low halves of rows [0, T) of the group's heads in x (row stride qs).
TT_AMX static unsigned group_low(const float *x, size_t qs, int T, int h0, int group, int HS) {
    __m512i acc = _mm512_setzero_si512();
    for (int t = 0; t < T; t++)
        for (int d = 0; d < group * HS; d += 16)
            acc = _mm512_or_si512(acc, _mm512_castps_si512(_mm512_loadu_ps(x + (size_t)t * qs + (size_t)h0 * HS + d)));
    return low16(acc);
}

// Rows [0, T) of src (row stride ls, n wide) rounded, as the halves at dst (row stride ld).
TT_AMX static void put_rows16(uint16_t *dst, size_t ld, const float *src, size_t ls, int T, int n) {
    for (int t = 0; t < T; t++)
        for (int d = 0; d < n; d += 16)
            _mm256_storeu_si256((__m256i *)(dst + (size_t)t * ld + d),
                                narrow16((__m512)rnd16((v16f)_mm512_loadu_ps(src + (size_t)t * ls + d))));
}

TT_AMX int att_amx_bwd_task(const att_amx_t *x, void *dq, void *dk, void *dv, const void *dout, const void *q,
                            const void *out, const float *lse, int b, int g, int round, att_grad_fn grad, att_mask_fn mask) {
    const int T = x->T, HS = x->HS, NH = x->NH, NKV = x->NKV, group = NH / NKV, nh = HS / 32, nsk = x->Tp / 32;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS, per = (size_t)x->Tp * HS;
    const size_t qo0 = (size_t)b * T * qs, kbo = (size_t)b * T * ks + (size_t)g * HS;
    const int h16 = x->h16; // (halves are BF16 values: nothing to check)
    // dk and dv add up in FP32 over the group's heads: in place, or (h16) in this thread's rows
    // of acc (row stride HS), narrowed at the end
    float *const dkb = h16 ? x->acc + (size_t)omp_get_thread_num() * 2 * per : (float *)dk + kbo,
                 *const dvb = h16 ? dkb + per : (float *)dv + kbo;
    const size_t kl = h16 ? (size_t)HS : ks;
    if (x->bad[(size_t)b * NKV + g] ||
        (!h16 && (group_low((const float *)q + qo0, qs, T, g * group, group, HS) ||
                  group_low((const float *)dout + qo0, qs, T, g * group, group, HS))))
        return 1;
    const float scale = 1.0f / sqrtf((float)HS);
    const uint16_t *ka = x->ka + ((size_t)b * NKV + g) * per, *va = x->va + ((size_t)b * NKV + g) * per;
    const uint16_t *kt = x->kt + ((size_t)b * NKV + g) * per;
    uint32_t qB[AT_HS / 32 * 2 * 256] __attribute__((aligned(64))), dB[AT_HS / 32 * 2 * 256] __attribute__((aligned(64)));
    uint32_t qP[AT_HS / 16 * 256] __attribute__((aligned(64))), dP[AT_HS / 16 * 256] __attribute__((aligned(64)));
    uint32_t sB[3 * 2 * 2 * 256] __attribute__((aligned(64)));                  // dS as B planes
    uint16_t pA[3 * 4 * 512] __attribute__((aligned(64))), sA[3 * 4 * 512] __attribute__((aligned(64))); // P, dS as A planes
    float st[AT_BK * AT_BQ] __attribute__((aligned(64))), dpt[AT_BK * AT_BQ] __attribute__((aligned(64)));
    float dqt[AT_HS * AT_BQ] __attribute__((aligned(64)));
    float L[AT_BQ], D[AT_BQ];
    tiles_on();
    for (int h = g * group; h < (g + 1) * group; h++) {
        const float *lr = lse + ((size_t)b * NH + h) * T;
        for (int t0 = 0; t0 < T; t0 += AT_BQ) {
            const int nq = T - t0 < AT_BQ ? T - t0 : AT_BQ;
            const size_t qo = qo0 + (size_t)t0 * qs + (size_t)h * HS;
            for (int i = 0; i < AT_BQ; i++) { // D = dout·out of the row: 16 lanes over d, then their sum
                L[i] = i < nq ? lr[t0 + i] : 0.0f;
                __m512 s = _mm512_setzero_ps();
                for (int d = 0; i < nq && d < HS; d += 16)
                    s = _mm512_add_ps(s, _mm512_mul_ps(ldw(dout, h16, qo + (size_t)i * qs + d, 0xffff),
                                                       ldw(out, h16, qo + (size_t)i * qs + d, 0xffff)));
                D[i] = _mm512_reduce_add_ps(s);
            }
            const void *qb = elem(q, h16, qo), *db = elem(dout, h16, qo);
            pack_block_t(qB, qb, h16, qs, nq, HS);
            pack_block_t(dB, db, h16, qs, nq, HS);
            pack_block_pairs(qP, qb, h16, qs, nq, HS);
            pack_block_pairs(dP, db, h16, qs, nq, HS);
            memset(dqt, 0, (size_t)HS * AT_BQ * sizeof(float));
            for (int s0 = 0; s0 < t0 + nq; s0 += AT_BK) {
                const int nk = t0 + nq - s0 < AT_BK ? t0 + nq - s0 : AT_BK, nks = (nk + 31) / 32;
                const int nkf = T - s0 < AT_BK ? T - s0 : AT_BK; // the key block's rows
                for (int half = 0; half < nks; half++) {
                    scores(st + (size_t)32 * half * AT_BQ, ka, (s0 + 32 * half) / 16, qB, nh);
                    scores(dpt + (size_t)32 * half * AT_BQ, va, (s0 + 32 * half) / 16, dB, nh);
                }
                grad(st, dpt, nk, L, D, scale); // P in st, dS·scale in dpt
                mask(st, s0, nk, t0, 0.0f);
                mask(dpt, s0, nk, t0, 0.0f);
                // dqᵀ += Kᵀ · dS
                planes_b(sB, dpt, nk, nks);
                for (int hb = 0; hb < HS; hb += 32)
                    rows_by_planes(dqt + (size_t)hb * AT_BQ, kt + ((size_t)(hb / 16) * nsk + s0 / 32) * 512,
                                   kt + ((size_t)(hb / 16 + 1) * nsk + s0 / 32) * 512, sB, nks);
                // dv (+)= Pᵀ · dout, dk (+)= dSᵀ · q: the key block's rows below 32·nks (zero rows
                // of P and dS past nk); on the first visit the rows past them start at zero
                planes_a(pA, st, nk, nks);
                planes_a(sA, dpt, nk, nks);
                const int first = h == g * group && t0 == s0;
                for (int r0 = s0; r0 < s0 + 32 * nks && r0 < T; r0 += 32)
                    for (int hb = 0; hb < HS; hb += 32) {
                        keys_by_block(dvb, kl, T, r0, hb, pA, dP, first);
                        keys_by_block(dkb, kl, T, r0, hb, sA, qP, first);
                    }
                if (first)
                    for (int r = 32 * nks; r < nkf; r++) {
                        memset(dvb + (size_t)(s0 + r) * kl, 0, (size_t)HS * sizeof(float));
                        memset(dkb + (size_t)(s0 + r) * kl, 0, (size_t)HS * sizeof(float));
                    }
            }
            store_rows((void *)elem(dq, h16, qo), h16, qs, dqt, nq, HS, NULL); // (h16: rounded)
            if (round && !h16)
                for (int i = 0; i < nq; i++) tt_round_n((float *)dq + qo + (size_t)i * qs, (size_t)HS);
        }
    }
    _tile_release();
    if (h16) { // the finished rows, rounded, as halves
        put_rows16((uint16_t *)dk + kbo, ks, dkb, HS, T, HS);
        put_rows16((uint16_t *)dv + kbo, ks, dvb, HS, T, HS);
    } else if (round)
        for (int t = 0; t < T; t++) {
            tt_round_n(dkb + (size_t)t * ks, (size_t)HS);
            tt_round_n(dvb + (size_t)t * ks, (size_t)HS);
        }
    return 0;
}
