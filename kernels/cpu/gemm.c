// gemm.c — gemm_fma (gemm.h): the linear layers' FP32 product on our own register kernels,
// with B packed once per call and shared by the threads, and A read in place.
//
// Why not OpenBLAS: bench train --model small spent 15% of its step in OpenBLAS's packing
// (perf: sgemm_itcopy/oncopy/otcopy/incopy), because each of matmul.c's fixed output tiles
// was its own single-threaded sgemm that packed its panels of both operands again (fixed
// tiles, so that the bits did not follow the thread count), plus 3% in sgemm_beta and the
// separate BF16 rounding pass. Here the bits follow neither the blocking nor the threads
// (gemm.h), so the blocking is free to be the fast one, and the register kernel itself loads,
// accumulates and stores C (rounded on the last block).
//
// Two drivers. gemm_rows (many rows) runs BLIS's loops: for each NC columns, for each KC of
// the inner dimension, all threads pack B's block together; then each thread takes blocks of
// rows and runs the kernel over every MR × NR tile, B's micro-panel (KC × NR) staying in L1
// and L2 while A's rows stream from L2 in place. gemm_cols (at most COL_M rows) keeps A's
// block in L2 and gives each thread whole column panels of B to pack and run. A is packed
// only where it is stored transposed (its mr floats a k are then contiguous) or for a ragged
// last micro-panel, which the kernels cannot read in place. Measured against alternatives (2
// threads): reading B in place lost 9–40% a shape in bench train small (its rows are ldb
// floats apart: L1, L2 and TLB misses); KC 128, 256 and 768 and COL_M 1024 were slower than
// 512 and 384 on cold operands. MC_MAX 96 rather than 192: twice the row blocks for the
// dynamic schedule to even out a thread that falls behind (the other spins at the barrier
// that ends each block of B); bench train small's GEMMs took 2.9 ms (1.5%) less a step,
// over 36 alternated pairs of runs (±1.0 ms standard error); bench gemm's shapes, run one
// product at a time outside a step, the same to within the noise; 144 and 48 were no better.
// gemm_fma_shared_b runs up to four products that share B in one gemm_rows, B packed once for
// all of them (the weight gradients of q, k and v, which share ln1; gate and up, ln2).
// B comes as FP32 or as BF16 values (gemm_fma_b16: bf16 mode's weights, widened as they are
// packed, so no pass widens a shard into FP32 first; the bits are those of the widened copy).
// gemm_fma_x takes bf16 mode's activations as BF16 halves (on CPUs without AMX): an A of
// halves is widened row by row into the thread's block buffer and read there in place, as an
// FP32 A is read where it lies (a_block); a C of halves takes its rounded tiles narrowed as
// the kernel stores them where the inner dimension is one block, and since a partial sum may
// not pass through halves, a deeper product runs in pieces into an FP32 buffer that are then
// narrowed (gemm_c16_pieces). The chain of each element is the one above, so the bits are
// gemm_fma's.
// Kernels: AVX-512F 12 × 32 (24 accumulators, two 16-float vectors a row), AVX2+FMA 6 × 16
// (12 accumulators), each reading A through two strides, so one kernel serves A in place and
// packed. Both take exactly the element's FMA chain, in k order. They prefetch B's micro-panel
// PF_B k ahead: at KC 512 it is 64 KiB, more than L1, and left to the hardware its loads waited
// on L2 (with it, bench gemm's shapes ran 3% faster and small's products on operands not in
// cache 8–10%, on a Xeon with 48 KiB of L1).
//
// Called by matmul.c (the linear layers and the LM head); CPUs without FMA stay on OpenBLAS.
#include "gemm.h"
#include "kernels.h" // uses: bf16_to_f32
#include "simd.h"
#include <omp.h>     // uses: omp_get_max_threads, omp_get_num_threads, omp_get_thread_num
#include <pthread.h> // uses: pthread_mutex_lock (the static packing buffers)

#define KC 512     // inner-dimension block: B's micro-panel is KC × 32 floats, 64 KiB, from L1 and L2
#define NC 1024    // columns of B packed at a time: KC × NC floats, 2 MiB, shared by the threads
#define MC_MAX 96  // rows of A a thread takes at a time (any split gives the same bits)
#define MR_MAX 12
#define PF_B 5     // the kernels prefetch B's micro-panel this many k ahead
#define PF_A 4     // pack_a prefetches a transposed A this many rows ahead
#define NR_MAX 32

#define COL_M 384   // products of at most this many rows run by column panels (gemm_cols)

static float bp_buf[(size_t)KC * NC] __attribute__((aligned(64)));   // gemm_rows: B's block
static float ap_buf[(size_t)COL_M * KC] __attribute__((aligned(64))); // gemm_cols: A's block
static pthread_mutex_t bp_lock = PTHREAD_MUTEX_INITIALIZER;          // both

// The MR × NR tile at c (row stride ldc) += the kc products of A's micro-panel (element
// (i, k) at a[i·rs + k·cs]: rs = lda and cs = 1, or rs = 1 and cs = MR) and B's b (kc × NR,
// k-major); load 0: the tile starts from zero instead of c; round: stored rounded to BF16;
// c16: c is BF16 halves (uint16_t), the rounded tile narrowed as it is stored (load 0, round 1).
typedef void (*kern_fn)(int kc, const float *restrict a, size_t rs, size_t cs, const float *restrict b,
                        void *restrict c, size_t ldc, int load, int round, int c16);

// ---------------------------------------------------------------- register kernels
// A is read through strides: in place where it is stored row-major (rs = lda, cs = 1), from
// a packed micro-panel elsewhere (rs = 1, cs = MR). Its 12 KiB are reused from L2 across the
// columns; B's micro-panel is the operand the kernel keeps in L1, so B is the one always packed.
// One kernel definition for both widths, on simd.h's vector helpers (ld, st, splat, fma, rnd
// of 16 or 8 floats): rows i of the MR × NR tile in registers r<i>a, r<i>b (two W-float
// vectors a row). A comes in one of two forms: in place (cs = 1, rs = lda) or a packed
// micro-panel (rs = 1, cs = MR). The "_body" is always inlined, once for each form with its
// constant stride: packed, the MR rows are offsets of one pointer, not MR registers (3–10%
// faster on the weight gradients, whose A is always packed); in place, k is the index.
#define ROWS12(X, ...) ROWS6(X, __VA_ARGS__) X(6, __VA_ARGS__) X(7, __VA_ARGS__) X(8, __VA_ARGS__) \
    X(9, __VA_ARGS__) X(10, __VA_ARGS__) X(11, __VA_ARGS__)
#define ROWS6(X, ...) X(0, __VA_ARGS__) X(1, __VA_ARGS__) X(2, __VA_ARGS__) X(3, __VA_ARGS__) X(4, __VA_ARGS__) \
    X(5, __VA_ARGS__)
#define K_DECL(i, V) V r##i##a, r##i##b;
#define K_ROW(i, _) const float *a##i = a + (size_t)i * rs;
#define K_LOAD(i, ld, W) r##i##a = ld(c + i * ldc), r##i##b = ld(c + i * ldc + W);
#define K_ZERO(i, splat, NR)                                                                                       \
    __builtin_prefetch(c + i * ldc, 1, 3), __builtin_prefetch(c + i * ldc + NR - 1, 1, 3);                         \
    r##i##a = r##i##b = splat(0.0f);
#define K_FMA(i, V, splat, fma)                                                                                    \
    {                                                                                                              \
        const V x = splat(a##i[o]);                                                                                \
        r##i##a = fma(x, b0, r##i##a), r##i##b = fma(x, b1, r##i##b);                                              \
    }
#define K_ROUND(i, rnd) r##i##a = rnd(r##i##a), r##i##b = rnd(r##i##b);
#define K_STORE(i, st, W) st(c + i * ldc, r##i##a), st(c + i * ldc + W, r##i##b);
#define K_STORE_H(i, sth, W) sth(h + i * ldc, r##i##a), sth(h + i * ldc + W, r##i##b);

#define GEMM_KERN_DEF(name, ATTR, ROWS, MR, NR, V, W, ld, st, sth, splat, fma, rnd)                                  \
    ATTR INLINE void name##_body(int kc, const float *restrict a, size_t rs, size_t cs, const float *restrict b,      \
                                 void *restrict cv, size_t ldc, int load, int round, int c16) {                      \
        float *restrict c = cv;                                                                                      \
        uint16_t *restrict h = cv;                                                                                   \
        ROWS(K_DECL, V)                                                                                              \
        ROWS(K_ROW, )                                                                                                \
        if (load) { ROWS(K_LOAD, ld, W) } else { ROWS(K_ZERO, splat, NR) }                                           \
        size_t o = 0;                                                                                                \
        for (int k = 0; k < kc; k++, o += cs, b += NR) {                                                             \
            __builtin_prefetch(b + PF_B * NR, 0, 3);                                                                 \
            if (NR > 16) __builtin_prefetch(b + PF_B * NR + W, 0, 3); /* 12 × 32: a k's B is two lines */            \
            const V b0 = ld(b), b1 = ld(b + W);                                                                      \
            ROWS(K_FMA, V, splat, fma)                                                                               \
        }                                                                                                            \
        if (round) { ROWS(K_ROUND, rnd) }                                                                            \
        if (c16) { ROWS(K_STORE_H, sth, W) } else { ROWS(K_STORE, st, W) }                                           \
    }                                                                                                                \
    ATTR static void name(int kc, const float *restrict a, size_t rs, size_t cs, const float *restrict b,            \
                          void *restrict c, size_t ldc, int load, int round, int c16) {                              \
        if (cs == 1) name##_body(kc, a, rs, 1, b, c, ldc, load, round, c16);                                         \
        else name##_body(kc, a, 1, MR, b, c, ldc, load, round, c16);                                                 \
    }
GEMM_KERN_DEF(kern_12x32, TT_WIDE, ROWS12, 12, 32, v16f, 16, ld16, st16, st16h, splat16, fma16, rnd16)
GEMM_KERN_DEF(kern_6x16, TT_FMA, ROWS6, 6, 16, v8f, 8, ld8, st8, st8h, splat8, fma8, rnd8)

typedef struct {
    int mr, nr;
    kern_fn kern;
} path_t;

int gemm_fma_path(void) { return tt_wide() ? 2 : tt_fma() ? 1 : 0; }

// The kernel and its tile for this CPU (gemm_fma_path() ≥ 1).
static path_t path_now(void) {
    return gemm_fma_path() == 2 ? (path_t){12, 32, kern_12x32} : (path_t){6, 16, kern_6x16};
}

// ---------------------------------------------------------------- packing
static int min_i(int a, int b) { return a < b ? a : b; }

// An operand as the caller gave it: FP32, or BF16 values (b16: uint16_t, the upper half of
// their FP32 bits), which the packing widens, so the product is that of the widened copy. B
// comes either way; A as BF16 halves too (the BF16 activations, gemm_fma_x).
typedef struct {
    const void *p;
    int b16;
} opnd_t;

// The element at row r, column c of the array X (row stride ld).
INLINE float at(opnd_t X, size_t r, size_t c, int ld) {
    const size_t i = r * (size_t)ld + c;
    return X.b16 ? bf16_to_f32(((const uint16_t *)X.p)[i]) : ((const float *)X.p)[i];
}
// Rows [i0, i0 + m) and inner indices [k0, k0 + kc) of op(A) as k-major micro-panels of
// kc × mr floats, rows past m zero (BF16 halves widened): all of a block's rows where A is
// stored transposed (mr contiguous floats a row of A, each k another row: packed, the
// kernel's 12 KiB of A stay 48 lines apart, not 256), else only a block's last m < mr rows of
// an FP32 A, which the kernel cannot read in place (it reads mr rows, past the end of A).
// Transposed, A's rows are walked one at a time, each across every micro-panel of the block
// (its m floats are contiguous), the row PF_A ahead prefetched: a micro-panel at a time read
// A down its columns instead, one new page a k where the row stride is 4 KiB or more, which
// no hardware prefetcher follows (the weight gradients, whose A is dYᵀ: 248–256 → 260–277
// GFLOP/s for small's MLP product on operands not in cache).
TT_FMA static void pack_a(int mr, int transa, opnd_t A, int lda, int i0, int m, int k0, int kc, float *restrict dst) {
    const size_t es = A.b16 ? sizeof(uint16_t) : sizeof(float);
    if (transa) {
        const int np = (m + mr - 1) / mr;
        for (int k = 0; k < kc; k++) {
            const size_t row = (size_t)(k0 + k) * lda + i0;
            if (k + PF_A < kc)
                for (int c = 0; c < m; c += 16)
                    __builtin_prefetch((const char *)A.p + (row + (size_t)PF_A * lda + c) * es, 0, 3);
            for (int p = 0; p < np; p++) {
                float *d = dst + ((size_t)p * kc + k) * mr;
                const int rows = min_i(mr, m - p * mr);
                if (A.b16) {
                    tt_widen_n(d, (const uint16_t *)A.p + row + p * mr, (size_t)rows);
                    for (int r = rows; r < mr; r++) d[r] = 0.0f;
                    continue;
                }
                const float *sp = (const float *)A.p + row + p * mr;
                if (rows == 12) memcpy(d, sp, 12 * sizeof *d); // the kernels' MR: a constant size copies
                else if (rows == 6) memcpy(d, sp, 6 * sizeof *d); // in two vector moves
                else
                    for (int r = 0; r < mr; r++) d[r] = r < rows ? sp[r] : 0.0f;
            }
        }
        return;
    }
    for (int p = 0; p < m; p += mr, dst += (size_t)mr * kc) {
        const int rows = min_i(mr, m - p);
        for (int k = 0; k < kc; k++) {
            float *d = dst + (size_t)k * mr;
            for (int r = 0; r < mr; r++) d[r] = r < rows ? at(A, (size_t)(i0 + p + r), (size_t)(k0 + k), lda) : 0.0f;
        }
    }
}

// 8 BF16 values widened to FP32 (exact: the low 16 bits become zero).
TT_FMA INLINE __m256 ld8_b16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

// Rows [i0, i0 + m) and inner indices [k0, k0 + kc) of an A of BF16 halves stored row-major,
// widened to FP32 rows kc floats apart at dst, then rows m..mpad − 1 zero: whole micro-panels
// the kernels read in place (rs = kc). A row's halves are contiguous, so this is a plain
// widening, a third of the operations of packing them into micro-panels (a transpose), and
// the packed panels were no faster to read (gemm_fma's A, read in place, is the same form).
TT_FMA static void widen_rows(const uint16_t *A, int lda, int i0, int m, int mpad, int k0, int kc,
                              float *restrict dst) {
    for (int r = 0; r < mpad; r++, dst += kc)
        if (r < m) tt_widen_n(dst, A + (size_t)(i0 + r) * lda + k0, (size_t)kc);
        else memset(dst, 0, (size_t)kc * sizeof *dst);
}

// dst[k·ld + c] = src[c·ls + k] for the 8 × 8 block at element off of B (k, c < 8): rows of
// B (FP32, or BF16 widened) become columns.
TT_FMA static void transpose8(float *restrict dst, size_t ld, opnd_t B, size_t off, size_t ls) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++)
        r[i] = B.b16 ? ld8_b16((const uint16_t *)B.p + off + i * ls) : _mm256_loadu_ps((const float *)B.p + off + i * ls);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}

// Two rows of B, r and r + 8 (8 elements each from p, row stride ls), in the halves of one
// 16-float vector; BF16 values widened (exact).
TT_WIDE INLINE __m512 ld_rows2_f32(const float *p, size_t ls) {
    const __m256d lo = _mm256_castps_pd(_mm256_loadu_ps(p)), hi = _mm256_castps_pd(_mm256_loadu_ps(p + 8 * ls));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(lo), hi, 1));
}
TT_WIDE INLINE __m512 ld_rows2_b16(const uint16_t *p, size_t ls) {
    const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
                                              _mm_loadu_si128((const __m128i *)(p + 8 * ls)), 1);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

// dst[k·ld + c] = row c's element k for the 16 × 8 block r (c < 16, k < 8; rows c and c + 8
// in the halves of r[c mod 8], as ld_rows2 loads them): the two 8 × 8 transposes run at once
// (unpack, shuffle: moves only), and a two-source permute joins the halves, each result one
// whole 64-byte row of dst.
TT_WIDE INLINE void t16x8_store(float *restrict dst, size_t ld, __m512 r[8]) {
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    __m512 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        _mm512_storeu_ps(dst + (size_t)i * ld, _mm512_permutex2var_ps(r[i], lo, r[i + 4]));
        _mm512_storeu_ps(dst + (size_t)(i + 4) * ld, _mm512_permutex2var_ps(r[i], hi, r[i + 4]));
    }
}

// A transposed B's whole 16 × 8 blocks of a micro-panel (columns [0, n16), inner indices
// [0, k8)), element (k, c) from B's row r0 + c, column k0 + k: an inner block of 8 at a time
// across the columns, so each row of dst is written whole before the next (column blocks
// first wrote each 128-byte row in four visits a panel apart; the panel, 48–64 KiB, did not
// stay in L1 between them). 30–40% less time than transpose8 for small's BF16 weights.
TT_WIDE static void pack_bt16(float *restrict dst, int nr, opnd_t B, int ldb, size_t r0, int k0, int k8, int n16) {
    const size_t ls = (size_t)ldb;
    for (int k = 0; k < k8; k += 8)
        for (int c = 0; c < n16; c += 16) {
            const size_t off = (r0 + c) * ls + k0 + k;
            __m512 r[8];
            if (B.b16)
                for (int i = 0; i < 8; i++) r[i] = ld_rows2_b16((const uint16_t *)B.p + off + i * ls, ls);
            else
                for (int i = 0; i < 8; i++) r[i] = ld_rows2_f32((const float *)B.p + off + i * ls, ls);
            t16x8_store(dst + (size_t)k * nr + c, (size_t)nr, r);
        }
}

// Micro-panel q of op(B)'s inner indices [k0, k0 + kc) and columns [j0, j0 + nc): columns
// j0 + q·nr ... as kc × nr floats (k-major) at dst, columns past nc zero; BF16 values widened
// as they are copied. Both CPUs that reach here have AVX2: whole blocks of a transposed B go
// through pack_bt16 (AVX-512F) or transpose8, an inner block of 8 at a time (pack_bt16's why).
TT_FMA static void pack_b(int nr, int transb, opnd_t B, int ldb, int k0, int kc, int j0, int nc, int q,
                          float *restrict dst) {
    const int j = q * nr, n = min_i(nr, nc - j);
    if (!transb) {
        for (int k = 0; k < kc; k++) {
            const size_t off = (size_t)(k0 + k) * ldb + j0 + j;
            float *d = dst + (size_t)k * nr;
            if (n == nr && B.b16) { // nr is 16 or 32
                const uint16_t *src = (const uint16_t *)B.p + off;
                for (int c = 0; c < nr; c += 8) _mm256_storeu_ps(d + c, ld8_b16(src + c));
            } else if (n == nr && nr == 32) { // written out: GCC turns the loop into a call of memcpy
                const float *src = (const float *)B.p + off;
                const __m256 x0 = _mm256_loadu_ps(src), x1 = _mm256_loadu_ps(src + 8);
                const __m256 x2 = _mm256_loadu_ps(src + 16), x3 = _mm256_loadu_ps(src + 24);
                _mm256_storeu_ps(d, x0), _mm256_storeu_ps(d + 8, x1);
                _mm256_storeu_ps(d + 16, x2), _mm256_storeu_ps(d + 24, x3);
            } else if (n == nr && nr == 16) {
                const float *src = (const float *)B.p + off;
                const __m256 x0 = _mm256_loadu_ps(src), x1 = _mm256_loadu_ps(src + 8);
                _mm256_storeu_ps(d, x0), _mm256_storeu_ps(d + 8, x1);
            } else
                for (int c = 0; c < nr; c++) d[c] = c < n ? at(B, (size_t)(k0 + k), (size_t)(j0 + j + c), ldb) : 0.0f;
        }
        return;
    }
    // element (k, c) at B's row j0 + j + c, column k0 + k
    const size_t r0 = (size_t)(j0 + j);
    const int n16 = tt_wide() ? n / 16 * 16 : 0, n8 = n / 8 * 8, k8 = kc / 8 * 8;
    if (n16 > 0) pack_bt16(dst, nr, B, ldb, r0, k0, k8, n16);
    for (int k = 0; k < k8; k += 8)
        for (int c = n16; c < n8; c += 8)
            transpose8(dst + (size_t)k * nr + c, (size_t)nr, B, (r0 + c) * ldb + k0 + k, (size_t)ldb);
    for (int k = 0; k < kc; k++) { // the rest: columns past the 8 × 8 blocks, then their last rows
        for (int c = n8; c < nr; c++) dst[(size_t)k * nr + c] = c < n ? at(B, r0 + c, (size_t)(k0 + k), ldb) : 0.0f;
        if (k >= k8)
            for (int c = 0; c < n8; c++) dst[(size_t)k * nr + c] = at(B, r0 + c, (size_t)(k0 + k), ldb);
    }
}

// ---------------------------------------------------------------- the product
// C as the caller gave it: FP32, or BF16 halves (c16: gemm_fma_x), element i at p + i.
typedef struct {
    void *p;
    int c16;
} outp_t;

// One m × n (≤ MR × NR) tile at element off of C: the kernel in place when the tile is whole,
// else through a full-size FP32 scratch tile whose valid part is copied in and out (a BF16
// C's tile narrowed as it goes out: its values are rounded, so exactly).
static void run_tile(const path_t *P, int kc, const float *a, size_t rs, size_t cs, const float *b, outp_t C,
                     size_t off, int ldc, int m, int n, int load, int round) {
    if (m == P->mr && n == P->nr) {
        void *c = C.c16 ? (void *)((uint16_t *)C.p + off) : (void *)((float *)C.p + off);
        P->kern(kc, a, rs, cs, b, c, (size_t)ldc, load, round, C.c16);
        return;
    }
    float *c = C.c16 ? NULL : (float *)C.p + off;
    float t[MR_MAX * NR_MAX] __attribute__((aligned(64))) = {0};
    if (load) // (never a BF16 C: gemm_fma_x)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) t[i * P->nr + j] = c[(size_t)i * ldc + j];
    P->kern(kc, a, rs, cs, b, t, (size_t)P->nr, load, round, 0);
    if (!c) { // (tt_narrow_n, not bf16_from_f32_n: that opens a parallel region, one a tile row inside this one)
        for (int i = 0; i < m; i++) tt_narrow_n((uint16_t *)C.p + off + (size_t)i * ldc, t + i * P->nr, (size_t)n);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = t[i * P->nr + j];
}

// Rows [i0, i0 + m) of op(A), inner indices [pc, pc + kc), against B's micro-panel b (n valid
// columns), into C's tiles at row i0, column j: rows [0, whole) of the block read in place (ar
// its first row at inner index pc, lda floats a row: A itself, or its halves widened), the
// rest from their packed micro-panels at ap (pack_a). A tile that starts
// from C (load) has the next tile's rows of C prefetched into L2 while it runs: the kernel
// loads its tile first thing, and a tile of the weight gradients (128 or 256 inner indices) is
// short enough for that wait to show (bench-like products of 125m's shapes at 128 tokens:
// 8–10% faster). Into L1 instead, a burst of three prefetches a row waited on the line fill
// buffers (2.6% of a 125m run's perf samples in the loop issuing them) and cost 2% on 384
// inner indices.
static void run_rows(const path_t *P, int kc, const float *ar, int lda, int i0, int m, int whole,
                     const float *ap, const float *b, int n, outp_t C, int ldc, int j, int load, int round) {
    for (int i = 0; i < m; i += P->mr) {
        if (load && i + P->mr < m) {
            const float *cn = (const float *)C.p + (size_t)(i0 + i + P->mr) * ldc + j;
            for (int r = 0; r < min_i(P->mr, m - i - P->mr); r++) {
                const float *row = cn + (size_t)r * ldc;
                for (int w = 0; w < n; w += 16) __builtin_prefetch(row + w, 1, 2);
            }
        }
        const int in_place = i < whole;
        const float *a = in_place ? ar + (size_t)i * lda : ap + (size_t)(i - whole) * kc;
        run_tile(P, kc, a, in_place ? (size_t)lda : 1, in_place ? 1 : (size_t)P->mr, b, C,
                 (size_t)(i0 + i) * ldc + j, ldc, min_i(P->mr, m - i), n, load, round);
    }
}

// The rows of a block of m rows of op(A) the kernels read in place: whole micro-panels of an
// FP32 A stored row-major; every row, padded to whole micro-panels, of halves stored row-major
// (widened first: widen_rows); none of a transposed A (packed: pack_a).
static int in_place_rows(const path_t *P, int transa, opnd_t A, int m) {
    return transa ? 0 : A.b16 ? (m + P->mr - 1) / P->mr * P->mr : m / P->mr * P->mr;
}

// A block of op(A)'s rows [i0, i0 + m), inner indices [pc, pc + kc), made ready for run_rows:
// its rows read in place (*ar, *lda_r; the count returned), the rest packed into ap. FP32 A
// stored row-major: read where it is, but a last ragged micro-panel; transposed: all packed;
// BF16 halves stored row-major: widened into ap as rows, padded to whole micro-panels, all
// read there in place (ap holds MC_MAX · KC floats: m, padded, times kc must fit).
static int a_block(const path_t *P, int transa, opnd_t A, int lda, int i0, int m, int pc, int kc, float *ap,
                   const float **ar, int *lda_r) {
    const int whole = in_place_rows(P, transa, A, m);
    if (A.b16 && !transa) {
        widen_rows(A.p, lda, i0, m, whole, pc, kc, ap);
        *ar = ap, *lda_r = kc;
        return whole;
    }
    if (whole < m) pack_a(P->mr, transa, A, lda, i0 + whole, m - whole, pc, kc, ap);
    *ar = transa ? NULL : (const float *)A.p + (size_t)i0 * lda + pc, *lda_r = lda;
    return whole;
}

// One product's own operands where several share B (gemm_fma_shared_b): op(A) (M, K) and C.
typedef struct {
    opnd_t A;
    int lda, M;
    outp_t C;
    int ldc;
} part_t;

#define PARTS_MAX 4

// The first micro-panel of block blk when n panels go into nb blocks: the blocks that take one
// panel more come first, so that the dynamic schedule hands them out in its first round, one
// to each thread (spread evenly instead, as floor(blk·n/nb) spreads them, both extra panels of
// 86 in 12 blocks, the step's 1024 rows, fell to the same thread, which ran two panels longer
// than the other waited at the barrier).
static int block_start(int blk, int n, int nb) {
    return blk * (n / nb) + min_i(blk, n % nb);
}

// Many rows: BLIS's loops (the file's head). B's block packed by all threads together into
// bp_buf, then each thread takes blocks of rows (of every part) and runs them against all of it.
// A BF16 C only where K ≤ KC: one block of the inner dimension, so no partial sum passes
// through it (gemm_c16_pieces takes the deeper ones).
static void gemm_rows(const path_t *P, int transa, int transb, const part_t *parts, int nparts, int N, int K,
                      opnd_t B, int ldb, int accumulate, int round) {
    // Row blocks of each part: a whole number of rounds of one a thread, each at most MC_MAX
    // rows, as equal as whole micro-panels of MR rows allow (a barrier ends every block of B, so
    // the threads should finish together). Any split gives the same bits. first[p]: part p's
    // first block; the parts' blocks share each packed block of B.
    const int threads = omp_get_max_threads(), per = MC_MAX / P->mr;
    int first[PARTS_MAX + 1] = {0};
    for (int p = 0; p < nparts; p++) {
        const int panels_m = (parts[p].M + P->mr - 1) / P->mr;
        first[p + 1] = first[p] + (panels_m + per * threads - 1) / (per * threads) * threads;
    }
    const int blocks = first[nparts];
    #pragma omp parallel
    {
        float ap[MC_MAX * KC] __attribute__((aligned(64))); // this thread's packed rows of A
        for (int jc = 0; jc < N; jc += NC) {
            const int nc = min_i(NC, N - jc), panels = (nc + P->nr - 1) / P->nr;
            for (int pc = 0; pc < K; pc += KC) {
                const int kc = min_i(KC, K - pc);
                const int load = accumulate || pc > 0, rnd = round && pc + kc == K;
                #pragma omp for schedule(static)
                for (int q = 0; q < panels; q++)
                    pack_b(P->nr, transb, B, ldb, pc, kc, jc, nc, q, bp_buf + (size_t)q * P->nr * kc);
                #pragma omp for schedule(dynamic, 1)
                for (int b = 0; b < blocks; b++) {
                    int p = 0;
                    while (b >= first[p + 1]) p++;
                    const part_t *pt = &parts[p];
                    const int panels_m = (pt->M + P->mr - 1) / P->mr, nb = first[p + 1] - first[p], blk = b - first[p];
                    const int i0 = block_start(blk, panels_m, nb) * P->mr;
                    const int m = min_i(block_start(blk + 1, panels_m, nb) * P->mr, pt->M) - i0;
                    const float *ar;
                    int lda_r;
                    const int whole = a_block(P, transa, pt->A, pt->lda, i0, m, pc, kc, ap, &ar, &lda_r);
                    for (int j = 0; j < nc; j += P->nr)
                        run_rows(P, kc, ar, lda_r, i0, m, whole, ap, bp_buf + (size_t)j * kc, min_i(P->nr, nc - j),
                                 pt->C, pt->ldc, jc + j, load, rnd);
                }
            }
        }
    }
}

// Few rows (M ≤ COL_M), many column panels: all of A's KC-block stays in L2 (packed once into
// ap_buf where it cannot be read in place), and each thread takes whole column panels, packs
// each into its own buffer and runs it against every row: no shared B, so no barrier between
// packing B and using it (the LM head's forward at B·T 256 against 32000 columns, the weight
// gradients of k and v). C is FP32.
static void gemm_cols(const path_t *P, int transa, int transb, int M, int N, int K, opnd_t A, int lda,
                      opnd_t B, int ldb, int accumulate, float *C, int ldc, int round) {
    const int widen = A.b16 && !transa; // a_block's halves: all of A widened into ap_buf, read in place
    const int panels = (N + P->nr - 1) / P->nr;
    const int whole = in_place_rows(P, transa, A, M);
    const int packed = widen ? whole / P->mr : (M - whole + P->mr - 1) / P->mr; // micro-panels in ap_buf
    #pragma omp parallel
    {
        float bq[KC * NR_MAX] __attribute__((aligned(64))); // this thread's panel of B
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = min_i(KC, K - pc);
            const int load = accumulate || pc > 0, rnd = round && pc + kc == K;
            { // each thread packs (or widens) one run of micro-panels in one call, row by row where A is transposed
                const int nt = omp_get_num_threads(), id = omp_get_thread_num();
                const int p0 = packed * id / nt, p1 = packed * (id + 1) / nt;
                const int r0 = (widen ? 0 : whole) + p0 * P->mr, rows = min_i((p1 - p0) * P->mr, M - r0);
                if (p0 < p1 && widen) widen_rows(A.p, lda, r0, rows, (p1 - p0) * P->mr, pc, kc, ap_buf + (size_t)r0 * kc);
                else if (p0 < p1) pack_a(P->mr, transa, A, lda, r0, rows, pc, kc, ap_buf + (size_t)p0 * P->mr * kc);
                #pragma omp barrier
            }
            const float *ar = widen ? ap_buf : transa ? NULL : (const float *)A.p + pc;
            #pragma omp for schedule(dynamic, 1)
            for (int q = 0; q < panels; q++) {
                const int j = q * P->nr;
                pack_b(P->nr, transb, B, ldb, pc, kc, 0, N, q, bq);
                run_rows(P, kc, ar, widen ? kc : lda, 0, M, whole, ap_buf, bq, min_i(P->nr, N - j), (outp_t){C, 0}, ldc,
                         j, load, rnd);
            }
        }
    }
}

// The product on the loops its shape suits: by column panels where it has few rows and C is
// FP32, else by rows.
static void gemm_loops(const path_t *P, int transa, int transb, int M, int N, int K, opnd_t A, int lda, opnd_t B,
                       int ldb, int accumulate, outp_t C, int ldc, int round) {
    const int threads = omp_get_max_threads(), panels = (N + P->nr - 1) / P->nr;
    if (!C.c16 && M <= COL_M && threads > 1 && panels >= 2 * threads) {
        gemm_cols(P, transa, transb, M, N, K, A, lda, B, ldb, accumulate, C.p, ldc, round);
    } else {
        const part_t one = {A, lda, M, C, ldc};
        gemm_rows(P, transa, transb, &one, 1, N, K, B, ldb, accumulate, round);
    }
}

// X shifted by off elements (FP32 words or BF16 halves).
static opnd_t shifted(opnd_t X, size_t off) {
    return (opnd_t){X.b16 ? (const void *)((const uint16_t *)X.p + off) : (const void *)((const float *)X.p + off), X.b16};
}

// A BF16 C over more than one block of the inner dimension (K > KC): no partial sum may pass
// through it, so the product runs in pieces of at most CS_ROWS × NC outputs into cs_buf, FP32,
// on the loops and blocks an FP32 C takes (the same chains: the same bits), and each piece,
// rounded, is narrowed into C (exactly). Where C has more than CS_ROWS rows, B's blocks are
// packed once for every CS_ROWS of them instead of once for all (B·T up to 1024 tokens: no
// difference; above, B's packing is 1/2048 of a product's FLOPs).
#define CS_ROWS 1024
static float cs_buf[(size_t)CS_ROWS * NC] __attribute__((aligned(64))); // 4 MiB, under bp_lock

static void gemm_c16_pieces(const path_t *P, int transa, int transb, int M, int N, int K, opnd_t A, int lda,
                            opnd_t B, int ldb, outp_t C, int ldc, int round) {
    for (int c0 = 0; c0 < N; c0 += NC)
        for (int r0 = 0; r0 < M; r0 += CS_ROWS) {
            const int nc = min_i(NC, N - c0), rc = min_i(CS_ROWS, M - r0);
            gemm_loops(P, transa, transb, rc, nc, K, shifted(A, transa ? (size_t)r0 : (size_t)r0 * lda), lda,
                       shifted(B, transb ? (size_t)c0 * ldb : (size_t)c0), ldb, 0, (outp_t){cs_buf, 0}, nc, round);
            #pragma omp parallel for schedule(static)
            for (int i = 0; i < rc; i++)
                tt_narrow_n((uint16_t *)C.p + (size_t)(r0 + i) * ldc + c0, cs_buf + (size_t)i * nc, (size_t)nc);
        }
}

static void gemm_any(int transa, int transb, int M, int N, int K, opnd_t A, int lda, opnd_t B, int ldb,
                     int accumulate, outp_t C, int ldc, int round) {
    const path_t P = path_now();
    pthread_mutex_lock(&bp_lock); // a default mutex: fails only on a corrupt one
    if (C.c16 && K > KC) gemm_c16_pieces(&P, transa, transb, M, N, K, A, lda, B, ldb, C, ldc, round);
    else gemm_loops(&P, transa, transb, M, N, K, A, lda, B, ldb, accumulate, C, ldc, round);
    pthread_mutex_unlock(&bp_lock);
}

void gemm_fma(int transa, int transb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
              int accumulate, float *C, int ldc, int round) {
    if (gemm_amx(transa, transb, M, N, K, A, lda, B, 0, ldb, accumulate, C, ldc, round) == 0) return;
    gemm_any(transa, transb, M, N, K, (opnd_t){A, 0}, lda, (opnd_t){B, 0}, ldb, accumulate, (outp_t){C, 0}, ldc, round);
}

void gemm_fma_b16(int transa, int transb, int M, int N, int K, const float *A, int lda, const uint16_t *B, int ldb,
                  int accumulate, float *C, int ldc, int round) {
    if (gemm_amx(transa, transb, M, N, K, A, lda, B, 1, ldb, accumulate, C, ldc, round) == 0) return;
    gemm_any(transa, transb, M, N, K, (opnd_t){A, 0}, lda, (opnd_t){B, 1}, ldb, accumulate, (outp_t){C, 0}, ldc, round);
}

int gemm_fma_x(int transa, int a16, int transb, int b16, int M, int N, int K, const void *A, int lda, const void *B,
               int ldb, int accumulate, void *C, int c16, int ldc, int round) {
    if (gemm_fma_path() < 1 || (c16 && (accumulate || !round))) return 1;
    gemm_any(transa, transb, M, N, K, (opnd_t){A, a16}, lda, (opnd_t){B, b16}, ldb, accumulate, (outp_t){C, c16}, ldc,
             round);
    return 0;
}

void gemm_fma_b16_shared_a(int n, int transa, int M, int K, const float *A, int lda, int transb, const int *N,
                           const uint16_t *const *B, const int *ldb, float *const *C, const int *ldc, int accumulate,
                           int round) {
    if (gemm_amx_shared_a(n, transa, M, K, A, lda, transb, N, B, ldb, C, ldc, accumulate, round) == 0) return;
    for (int i = 0; i < n; i++) gemm_fma_b16(transa, transb, M, N[i], K, A, lda, B[i], ldb[i], accumulate, C[i], ldc[i], round);
}

// The products gemm_fma_shared_b and gemm_fma_shared_b_x run on the FMA kernels (parts), in
// one gemm_rows.
static void shared_b_rows(int n, const part_t *parts, int transa, int transb, int N, int K, opnd_t B, int ldb,
                          int accumulate, int round) {
    const path_t P = path_now();
    pthread_mutex_lock(&bp_lock);
    gemm_rows(&P, transa, transb, parts, n, N, K, B, ldb, accumulate, round);
    pthread_mutex_unlock(&bp_lock);
}

int gemm_fma_shared_b(int n, int transa, const int *M, const float *const *A, const int *lda, float *const *C,
                      const int *ldc, int transb, int N, int K, const float *B, int ldb, int accumulate, int round) {
    if (n < 1 || n > PARTS_MAX) return -1;
    part_t parts[PARTS_MAX];
    int left = 0; // the products AMX declined, for the FMA kernels (each keeps its own bits)
    const unsigned declined = gemm_amx_shared_b(n, transa, M, A, lda, C, ldc, transb, N, K, B, ldb, accumulate, round);
    for (int i = 0; i < n; i++)
        if (declined >> i & 1) parts[left++] = (part_t){{A[i], 0}, lda[i], M[i], {C[i], 0}, ldc[i]};
    if (left) shared_b_rows(left, parts, transa, transb, N, K, (opnd_t){B, 0}, ldb, accumulate, round);
    return 0;
}

int gemm_fma_shared_b_x(int n, int transa, int a16, const int *M, const void *const *A, const int *lda,
                        float *const *C, const int *ldc, int transb, int b16, int N, int K, const void *B, int ldb,
                        int accumulate, int round) {
    if (n < 1 || n > PARTS_MAX || gemm_fma_path() < 1) return -1;
    part_t parts[PARTS_MAX];
    for (int i = 0; i < n; i++) parts[i] = (part_t){{A[i], a16}, lda[i], M[i], {C[i], 0}, ldc[i]};
    shared_b_rows(n, parts, transa, transb, N, K, (opnd_t){B, b16}, ldb, accumulate, round);
    return 0;
}
