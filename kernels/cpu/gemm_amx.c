// gemm_amx.c — gemm.h's product on Intel AMX tiles (TDPBF16PS: BF16 operands, FP32
// accumulators), taken where the CPU has AMX-BF16 and both operands hold BF16 values.
//
// Why: the products were 80% of a CPU step (bench train --model small), and the FMA kernels
// (gemm.c) ran them at about 320 GFLOP/s on two AVX-512 cores. One tile product (16 rows ×
// 32 inner indices × 16 columns) does what takes the FMA kernel 32 vector FMAs a row: bench
// gemm's shapes run at 1.2–1.8 TFLOP/s here, and small's step went from 244 to about 97 ms
// (the Xeon VM, 2 threads).
//
// Which products: both operands must be BF16 values, FP32 words whose low 16 bits are zero
// (in bf16 mode the weights, the activations and their gradients the ops round: a product of
// two is exact in FP32). Packing narrows them to BF16 and checks every word; one word with
// low bits set declines the call (gemm_amx returns 1 before writing anything) and gemm.c runs
// it on the FMA kernels, so an FP32-mode run, or an operand that is not rounded, keeps the
// FMA chain's bits (the first 16 words of each operand are looked at before any packing, so
// an FP32 operand costs next to nothing). The _x entry points also take A or B as BF16 halves
// (a16, b16: bf16 mode's BF16 activations, kernels.h, and weights), packed as they stand and
// never checked, and write C as BF16 halves (c16) from a block's rounded outputs.
// The bits: each output element is C_in (0 or C) followed by one TDPBF16PS per 32 inner
// indices, in order (inner indices padded with zeros to a multiple of 32). The hardware sums
// each instruction's 32 exact products in its own fixed order (measured: not the FMA chain's,
// not pairwise, different in 60% of elements), so the bits differ from the FMA kernels', and
// follow the operands and the shape alone: not the thread count, not the blocking (a chunk of
// the inner dimension ends by storing FP32 accumulators, exactly, and the next reloads them).
// Placement invariance (DESIGN §3) holds: every placement runs the same products on the same
// machine, and the MLP's row chunks (model.h: multiples of 128 rows) cut the weight
// gradients' inner dimension where a tile product starts. kernels_limit_simd(2) (the tests)
// turns this path off. Denormal BF16 inputs count as zero and denormal results flush to zero
// (the instruction's rules).
//
// Layout (see the packing section): both operands packed tile by tile, BF16 rows for A, pairs
// of inner indices in 32-bit words for B (the layout the instruction reads). A block of 32 ×
// 32 outputs holds four accumulator tiles, and each step of 32 inner indices loads two tiles
// of A and two of B for four products. Chunks of AMX_MC rows, AMX_KC inner indices and AMX_NC
// columns bound the buffers (4 MiB in all); a call larger than one chunk checks its operands in
// a pass of their own first, so that a declined call has written nothing.
// Called by gemm.c (gemm_fma, gemm_fma_b16, gemm_fma_shared_b, gemm_fma_b16_shared_a) and by
// matmul.c's BF16-activation products (the _x entry points).
#include "gemm.h"
#include "amx.h"
#include "simd.h"
#include <cpuid.h>       // uses: __get_cpuid_count
#include <immintrin.h>   // uses: _tile_*, _mm512_*
#include <pthread.h>     // uses: pthread_once, pthread_mutex_lock
#include <sys/syscall.h> // uses: SYS_arch_prctl
#include <unistd.h>      // uses: syscall

#define AMX_MC 1024 // rows of op(A) packed at a time (multiple of 32)
#define AMX_KC 1024 // inner indices packed at a time (multiple of 32)
#define AMX_NC 1024 // columns of op(B) packed at a time (multiple of 32)
#define PARTS_AMX 8 // products gemm_amx_shared_b packs one B for, at most
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18


static uint16_t a_pk[(size_t)AMX_MC * AMX_KC] __attribute__((aligned(64)));
static uint32_t b_pk[(size_t)AMX_KC / 2 * AMX_NC] __attribute__((aligned(64)));
static pthread_mutex_t amx_lock = PTHREAD_MUTEX_INITIALIZER;

static int amx_have; // the CPU has AMX-BF16 and AVX-512BW/VL, and the kernel granted the tile state
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    const int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16 || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl"))
        return;
    // Linux hands out the 8 KiB tile state only on request (5.16 and later); refused, no AMX
    amx_have = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int gemm_amx_path(void) {
    if (tt_simd_limit < 3) return 0;
    pthread_once(&amx_once, amx_probe);
    return amx_have;
}

static int round32(int x) { return (x + 31) & ~31; }
static int min_i(int a, int b) { return a < b ? a : b; }

// ---------------------------------------------------------------- the operands' check
// The OR of the low 16 bits of rows × cols FP32 words at p (row stride ld): 0 when every one
// is a BF16 value.
TT_AMX static unsigned low_bits(const float *p, int rows, int cols, int ld) {
    unsigned bad = 0;
    #pragma omp parallel for schedule(static) reduction(| : bad) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        __m512i acc = _mm512_setzero_si512();
        for (int c = 0; c < cols; c += 16)
            acc = _mm512_or_si512(acc, _mm512_castps_si512(_mm512_maskz_loadu_ps(lanes(cols - c), p + (size_t)r * ld + c)));
        bad |= (unsigned)_mm512_reduce_or_epi32(acc) & 0xffffu;
    }
    return bad;
}

// ---------------------------------------------------------------- packing
// Both operands are packed tile by tile, each tile's 1 KiB contiguous, so that a tile load
// reads 16 consecutive lines (in rows of the whole chunk they lay 2–4 KiB apart: bench train
// --model small's GEMMs took 81.9 ms a step against 77–79, single runs). With nks = kcp / 32
// steps of 32 inner indices:
//   A: tile (rows 16·ib.., step s) at a_pk + (ib·nks + s)·512: row r, 32 BF16 in k order;
//   B: tile (columns 16·jb.., step s) at b_pk + (jb·nks + s)·256 words: row kp (the pair
//      2kp, 2kp + 1 of the step), 16 words in column order.
// The packers run inside gemm_amx's parallel region (orphaned omp for: their loop is shared)
// and OR the low halves they read into *bad. pack_a's loop ends without a barrier: a pack_b
// always follows it, and the barrier at the end of pack_b's covers both.

// The low halves of an accumulated OR, into *bad.
static void flag(unsigned *bad, unsigned low) {
    if (low & 0xffffu) __atomic_fetch_or(bad, low & 0xffffu, __ATOMIC_RELAXED);
}


// The first n of 32 halves (none for n ≤ 0).
static inline __mmask32 halves(int n) { return n >= 32 ? ~(__mmask32)0 : n > 0 ? (__mmask32)((1u << n) - 1u) : 0; }

// op(A) rows [m0, m0 + mc), inner indices [k0, k0 + kc) into the packed A at dst (mcp rows,
// kcp inner indices, zeros past mc and kc), whose rows of tiles are nks_row steps long (dst
// and nks_row: a_pk and kcp / 32, or a part of a longer inner dimension: gemm_amx_ksegs). A is
// FP32 (a16 = 0) or BF16 halves (never checked).
TT_AMX static void pack_a_at(int transa, const void *A, int a16, int lda, int m0, int mc, int k0, int kc, int mcp,
                             int kcp, uint16_t *dst, int nks_row, unsigned *bad) {
    const int nks = kcp / 32;
    if (!transa) {
        #pragma omp for schedule(static) nowait
        for (int r = 0; r < mcp; r++) {
            uint16_t *d = dst + (size_t)(r / 16) * nks_row * 512 + (r % 16) * 32;
            if (a16) { // a step's 32 halves are the tile row as they stand
                const uint16_t *row = (const uint16_t *)A + (size_t)(m0 + r) * lda + k0;
                for (int k = 0; k < kcp; k += 32)
                    _mm512_store_si512((__m512i *)(d + (size_t)(k / 32) * 512),
                                       _mm512_maskz_loadu_epi16(halves(r < mc ? kc - k : 0), row + k));
                continue;
            }
            __m512i acc = _mm512_setzero_si512();
            for (int k = 0; k < kcp; k += 16) {
                const __m512 v =
                    _mm512_maskz_loadu_ps(lanes(r < mc ? kc - k : 0), (const float *)A + (size_t)(m0 + r) * lda + k0 + k);
                acc = _mm512_or_si512(acc, _mm512_castps_si512(v));
                _mm256_store_si256((__m256i *)(d + (size_t)(k / 32) * 512 + k % 32), narrow16(v));
            }
            flag(bad, (unsigned)_mm512_reduce_or_epi32(acc));
        }
        return;
    }
    // A stored transposed (element (r, k) at A[k·lda + r]): A's rows k, k + 1 give the words
    // (BF16 of k low, of k + 1 high) of 16 rows r at a time, one step's 16 pairs of them
    // transposed into the tile's 16 rows. A task takes one step's 32 inner indices (a column
    // of tiles, whose lines no other task writes) and reads those 32 rows of A front to back,
    // side by side: walked 16 columns at a time down all K rows instead, each load was another
    // row's line, and these packs took a third of all packing.
    #pragma omp for schedule(static) nowait
    for (int st = 0; st < nks; st++) {
        uint32_t *d = (uint32_t *)dst + (size_t)st * 256;
        __m512i acc = _mm512_setzero_si512();
        for (int r = 0; r < mcp; r += 16) {
            const __mmask16 m = lanes(mc - r);
            __m512i w[16];
            for (int j = 0; j < 16; j++) { // the pair kp = 16·st + j: inner indices k, k + 1
                const int k = 32 * st + 2 * j;
                if (a16) {
                    const uint16_t *lo_row = (const uint16_t *)A + (size_t)(k0 + k) * lda + m0 + r;
                    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k < kc ? m : 0, lo_row));
                    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k + 1 < kc ? m : 0, lo_row + lda));
                    w[j] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
                    continue;
                }
                const float *lo_row = (const float *)A + (size_t)(k0 + k) * lda + m0 + r;
                const __m512i lo = _mm512_castps_si512(_mm512_maskz_loadu_ps(k < kc ? m : 0, lo_row));
                const __m512i hi = _mm512_castps_si512(_mm512_maskz_loadu_ps(k + 1 < kc ? m : 0, lo_row + lda));
                acc = _mm512_or_si512(acc, _mm512_or_si512(lo, hi));
                w[j] = pair_words(_mm512_castsi512_ps(lo), _mm512_castsi512_ps(hi));
            }
            transpose16(w);
            uint32_t *tile = d + (size_t)(r / 16) * nks_row * 256;
            for (int i = 0; i < 16; i++) _mm512_store_si512(tile + i * 16, w[i]);
        }
        flag(bad, (unsigned)_mm512_reduce_or_epi32(acc));
    }
}

// pack_a_at into a_pk as a whole.
TT_AMX static void pack_a(int transa, const void *A, int a16, int lda, int m0, int mc, int k0, int kc, int mcp, int kcp,
                          unsigned *bad) {
    pack_a_at(transa, A, a16, lda, m0, mc, k0, kc, mcp, kcp, a_pk, kcp / 32, bad);
}

// op(B) inner indices [k0, k0 + kc), columns [n0, n0 + nc) into b_pk (zeros past kc and nc);
// B is FP32 (b16 = 0) or BF16 halves (never checked: always BF16 values).
TT_AMX static void pack_b(int transb, const void *B, int b16, int ldb, int k0, int kc, int n0, int nc, int kcp,
                          int ncp, unsigned *bad) {
    const int nks = kcp / 32;
    if (!transb) { // rows k, k + 1 of B give 16 columns' words at a time: one tile row
        #pragma omp for schedule(static)
        for (int kp = 0; kp < kcp / 2; kp++) {
            const int k = 2 * kp;
            uint32_t *d = b_pk + (size_t)(kp / 16) * 256 + (kp % 16) * 16;
            __m512i acc = _mm512_setzero_si512();
            for (int n = 0; n < ncp; n += 16) {
                const __mmask16 m = lanes(nc - n);
                __m512i lo, hi;
                if (b16) {
                    const uint16_t *s = (const uint16_t *)B + (size_t)(k0 + k) * ldb + n0 + n;
                    lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k < kc ? m : 0, s));
                    hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k + 1 < kc ? m : 0, s + ldb)), 16);
                } else {
                    const float *s = (const float *)B + (size_t)(k0 + k) * ldb + n0 + n;
                    const __m512i l = _mm512_castps_si512(_mm512_maskz_loadu_ps(k < kc ? m : 0, s));
                    const __m512i h = _mm512_castps_si512(_mm512_maskz_loadu_ps(k + 1 < kc ? m : 0, s + ldb));
                    acc = _mm512_or_si512(acc, _mm512_or_si512(l, h));
                    lo = _mm512_srli_epi32(l, 16);
                    hi = _mm512_and_si512(h, _mm512_set1_epi32((int)0xffff0000u));
                }
                _mm512_store_si512(d + (size_t)(n / 16) * nks * 256, _mm512_or_si512(lo, hi));
            }
            flag(bad, (unsigned)_mm512_reduce_or_epi32(acc));
        }
        return;
    }
    // B stored transposed (element (k, n) at B[n·ldb + k]): row n's inner indices, in order,
    // are already the pairs; a task takes 16 columns (a row of tiles) and reads their rows of
    // B side by side, 16 words of each at a time, transposed into a tile's 16 rows
    #pragma omp for schedule(static)
    for (int n = 0; n < ncp; n += 16) {
        uint32_t *d = b_pk + (size_t)(n / 16) * nks * 256;
        __m512i acc = _mm512_setzero_si512();
        for (int kp = 0; kp < kcp / 2; kp += 16) { // a tile's 16 rows
            __m512i w[16];
            for (int i = 0; i < 16; i++) { // column n + i
                const int k = 2 * kp, left = n + i < nc ? kc - k : 0; // inner indices left in its row
                if (b16) {
                    w[i] = _mm512_maskz_loadu_epi16(halves(left), (const uint16_t *)B + (size_t)(n0 + n + i) * ldb + k0 + k);
                } else {
                    const float *s = (const float *)B + (size_t)(n0 + n + i) * ldb + k0 + k;
                    const __m512 v0 = _mm512_maskz_loadu_ps(lanes(left), s);
                    const __m512 v1 = _mm512_maskz_loadu_ps(lanes(left - 16), s + 16);
                    acc = _mm512_or_si512(acc, _mm512_or_si512(_mm512_castps_si512(v0), _mm512_castps_si512(v1)));
                    w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(narrow16(v0)), narrow16(v1), 1);
                }
            }
            transpose16(w);
            for (int j = 0; j < 16; j++) _mm512_store_si512(d + (size_t)(kp / 16) * 256 + j * 16, w[j]);
        }
        flag(bad, (unsigned)_mm512_reduce_or_epi32(acc));
    }
}


// The 32 × 32 block of outputs whose A tiles start at ap (rows 16.. at ap + nks·512) and B
// tiles at bp (columns 16.. at bp + nks·256), c its first element in C: starts from zero
// (first_zero), else from C; adds the nks steps; rounds to BF16 values when round. C is FP32,
// or (c16: first_zero and round) BF16 halves. Blocks that reach past mr rows or nr columns
// (the edges of C) go through tmp.
TT_AMX static void block(const uint16_t *ap, const uint32_t *bp, int nks, void *cv, int c16, int ldc, int mr, int nr,
                         int first_zero, int round) {
    float tmp[32 * 32] __attribute__((aligned(64)));
    float *c = cv; // (FP32 C: c16's is written through tmp alone)
    const int whole = mr >= 32 && nr >= 32;
    const size_t cs = (size_t)ldc * 4;
    if (first_zero) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    } else if (whole) {
        _tile_loadd(0, c, cs); _tile_loadd(1, c + 16, cs);
        _tile_loadd(2, c + (size_t)16 * ldc, cs); _tile_loadd(3, c + (size_t)16 * ldc + 16, cs);
    } else {
        for (int r = 0; r < 32; r++)
            for (int q = 0; q < 32; q += 16)
                _mm512_store_ps(tmp + r * 32 + q, _mm512_maskz_loadu_ps(r < mr ? lanes(nr - q) : 0, c + (size_t)r * ldc + q));
        _tile_loadd(0, tmp, 128); _tile_loadd(1, tmp + 16, 128);
        _tile_loadd(2, tmp + 16 * 32, 128); _tile_loadd(3, tmp + 16 * 32 + 16, 128);
    }
    const uint16_t *a1 = ap + (size_t)nks * 512;
    const uint32_t *b1 = bp + (size_t)nks * 256;
    for (int s = 0; s < nks; s++) {
        _tile_loadd(4, ap + (size_t)s * 512, 64);
        _tile_loadd(6, bp + (size_t)s * 256, 64);
        _tile_loadd(7, b1 + (size_t)s * 256, 64);
        _tile_loadd(5, a1 + (size_t)s * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    if (whole && !round) { // straight into C
        _tile_stored(0, c, cs); _tile_stored(1, c + 16, cs);
        _tile_stored(2, c + (size_t)16 * ldc, cs); _tile_stored(3, c + (size_t)16 * ldc + 16, cs);
        return;
    }
    _tile_stored(0, tmp, 128); _tile_stored(1, tmp + 16, 128);
    _tile_stored(2, tmp + 16 * 32, 128); _tile_stored(3, tmp + 16 * 32 + 16, 128);
    for (int r = 0; r < min_i(mr, 32); r++)
        for (int q = 0; q < 32; q += 16) {
            v16f v = (v16f)_mm512_load_ps(tmp + r * 32 + q);
            if (round) v = rnd16(v);
            if (c16) _mm256_mask_storeu_epi16((uint16_t *)cv + (size_t)r * ldc + q, lanes(nr - q), narrow16((__m512)v));
            else _mm512_mask_storeu_ps(c + (size_t)r * ldc + q, lanes(nr - q), (__m512)v);
        }
}

// Element (i, j) of C (row stride ldc): FP32, or BF16 halves (c16).
static void *c_at(void *C, int c16, int ldc, int i, int j) {
    const size_t at = (size_t)i * ldc + j;
    return c16 ? (void *)((uint16_t *)C + at) : (void *)((float *)C + at);
}

// The chunk's blocks (mcp × ncp outputs from a_pk, b_pk; mr × nr of them in C at c), shared
// by the threads: a worksharing loop inside the caller's parallel region, ending in a barrier.
// static: with schedule(dynamic, 1) the blocks of 1024 × 1024 over 384 took 1.04 ms a call on
// two threads, against 0.37.
TT_AMX static void blocks(int mcp, int ncp, int nks, void *c, int c16, int ldc, int mr, int nr, int first_zero,
                          int round) {
    #pragma omp for collapse(2) schedule(static)
    for (int i = 0; i < mcp; i += 32)
        for (int j = 0; j < ncp; j += 32)
            block(a_pk + (size_t)(i / 16) * nks * 512, b_pk + (size_t)(j / 16) * nks * 256, nks, c_at(c, c16, ldc, i, j),
                  c16, ldc, mr - i, nr - j, first_zero, round);
}

// Whether the first words of a stored matrix (its first row: cols words) show an FP32
// operand: such an operand is declined before any packing, at next to no cost.
TT_AMX static int first_words_fp32(const float *p, int cols, int ld) { return low_bits(p, 1, min_i(16, cols), ld) != 0; }

// n products of one chunk each (M[i] ≤ AMX_MC, N ≤ AMX_NC, K ≤ AMX_KC) sharing B: B packed
// once, then each product's A and blocks. Every flag is read after the barrier that ends its
// pack, never before (a thread that looked while another was still packing would skip the
// barrier the other waits at): all threads leave a product, or the call, together, and a
// declined product is not written. Returns the mask of the products declined (those in skip
// among them); the caller holds amx_lock.
TT_AMX static unsigned one_chunk(int n, unsigned skip, int transa, int a16, const int *M, const void *const *A,
                                 const int *lda, void *const *C, int c16, const int *ldc, int transb, int N, int K,
                                 const void *B, int b16, int ldb, int accumulate, int round) {
    const int kcp = round32(K), nks = kcp / 32, ncp = round32(N);
    unsigned bad_b = 0, bad_a[PARTS_AMX] = {0};
    #pragma omp parallel
    {
        tiles_on();
        int packed_b = 0;
        for (int i = 0; i < n; i++) {
            if (skip >> i & 1) continue;
            const int mcp = round32(M[i]);
            pack_a(transa, A[i], a16, lda[i], 0, M[i], 0, K, mcp, kcp, &bad_a[i]); // no barrier of its own
            if (!packed_b) { // the first product's A and B packed side by side, one barrier
                pack_b(transb, B, b16, ldb, 0, K, 0, N, kcp, ncp, &bad_b);
                packed_b = 1;
            } else {
                #pragma omp barrier
            }
            if (__atomic_load_n(&bad_b, __ATOMIC_RELAXED)) break;
            if (__atomic_load_n(&bad_a[i], __ATOMIC_RELAXED)) continue;
            blocks(mcp, ncp, nks, C[i], c16, ldc[i], M[i], N, !accumulate, round);
        }
        _tile_release();
    }
    unsigned declined = skip;
    for (int i = 0; i < n; i++)
        if (bad_b || bad_a[i]) declined |= 1u << i;
    return declined;
}

// A BF16 C holds finished, rounded outputs only: no C_in, and no partial sums between chunks
// of the inner dimension.
_Static_assert(GEMM_AMX_C16_K_MAX == AMX_KC, "a BF16 C takes one chunk of the inner dimension");
static int c16_ok(int c16, int K, int accumulate, int round) { return !c16 || (K <= AMX_KC && !accumulate && round); }

TT_AMX int gemm_amx_x(int transa, int a16, int transb, int b16, int M, int N, int K, const void *A, int lda,
                      const void *B, int ldb, int accumulate, void *C, int c16, int ldc, int round) {
    if (!gemm_amx_path() || M < 1 || N < 1 || K < 1 || !c16_ok(c16, K, accumulate, round) ||
        (!a16 && first_words_fp32(A, transa ? M : K, lda)) || (!b16 && first_words_fp32(B, transb ? K : N, ldb)))
        return 1;
    pthread_mutex_lock(&amx_lock); // a default mutex: fails only on a corrupt one
    int declined = 0;
    if (M <= AMX_MC && N <= AMX_NC && K <= AMX_KC) {
        declined = one_chunk(1, 0, transa, a16, &M, &A, &lda, &C, c16, &ldc, transb, N, K, B, b16, ldb, accumulate,
                             round) != 0;
    } else { // several chunks: the operands checked whole first, so no chunk's pack finds a bad word
        declined = (!a16 && (transa ? low_bits(A, K, M, lda) : low_bits(A, M, K, lda))) ||
                   (!b16 && (transb ? low_bits(B, N, K, ldb) : low_bits(B, K, N, ldb)));
        if (!declined) {
            unsigned unused = 0; // the packs' flags: all clear
            #pragma omp parallel
            {
                tiles_on();
                for (int m0 = 0; m0 < M; m0 += AMX_MC) {
                    const int mc = min_i(AMX_MC, M - m0), mcp = round32(mc);
                    for (int k0 = 0; k0 < K; k0 += AMX_KC) {
                        const int kc = min_i(AMX_KC, K - k0), kcp = round32(kc);
                        pack_a(transa, A, a16, lda, m0, mc, k0, kc, mcp, kcp, &unused); // no barrier: pack_b's
                        for (int n0 = 0; n0 < N; n0 += AMX_NC) {
                            const int nc = min_i(AMX_NC, N - n0), ncp = round32(nc);
                            pack_b(transb, B, b16, ldb, k0, kc, n0, nc, kcp, ncp, &unused);
                            blocks(mcp, ncp, kcp / 32, c_at(C, c16, ldc, m0, n0), c16, ldc, mc, nc,
                                   k0 == 0 && !accumulate, round && k0 + kc == K);
                        }
                    }
                }
                _tile_release();
            }
        }
    }
    pthread_mutex_unlock(&amx_lock);
    return declined;
}

int gemm_amx(int transa, int transb, int M, int N, int K, const float *A, int lda, const void *B, int b16, int ldb,
             int accumulate, float *C, int ldc, int round) {
    return gemm_amx_x(transa, 0, transb, b16, M, N, K, A, lda, B, ldb, accumulate, C, 0, ldc, round);
}

TT_AMX unsigned gemm_amx_shared_b_x(int n, int transa, int a16, const int *M, const void *const *A, const int *lda,
                                    float *const *C, const int *ldc, int transb, int b16, int N, int K, const void *B,
                                    int ldb, int accumulate, int round) {
    const unsigned all = (1u << n) - 1u; // 1 ≤ n ≤ PARTS_AMX (gemm.h)
    int one = gemm_amx_path() && N >= 1 && N <= AMX_NC && K >= 1 && K <= AMX_KC &&
              (b16 || !first_words_fp32(B, transb ? K : N, ldb));
    for (int i = 0; i < n && one; i++) one = M[i] >= 1 && M[i] <= AMX_MC;
    unsigned declined = 0;
    if (!one) { // larger than one chunk (or no tiles): each on its own
        for (int i = 0; i < n; i++)
            if (gemm_amx_x(transa, a16, transb, b16, M[i], N, K, A[i], lda[i], B, ldb, accumulate, C[i], 0, ldc[i], round))
                declined |= 1u << i;
        return declined;
    }
    for (int i = 0; i < n && !a16; i++)
        if (first_words_fp32(A[i], transa ? M[i] : K, lda[i])) declined |= 1u << i;
    if (declined == all) return all;
    pthread_mutex_lock(&amx_lock);
    declined = one_chunk(n, declined, transa, a16, M, A, lda, (void *const *)C, 0, ldc, transb, N, K, B, b16, ldb,
                         accumulate, round);
    pthread_mutex_unlock(&amx_lock);
    return declined;
}

unsigned gemm_amx_shared_b(int n, int transa, const int *M, const float *const *A, const int *lda, float *const *C,
                           const int *ldc, int transb, int N, int K, const float *B, int ldb, int accumulate, int round) {
    return gemm_amx_shared_b_x(n, transa, 0, M, (const void *const *)A, lda, C, ldc, transb, 0, N, K, B, ldb,
                               accumulate, round);
}

TT_AMX int gemm_amx_shared_a_x(int n, int transa, int a16, int M, int K, const void *A, int lda, int transb,
                               const int *N, const uint16_t *const *B, const int *ldb, void *const *C, int c16,
                               const int *ldc, int accumulate, int round) {
    if (!gemm_amx_path() || M < 1 || M > AMX_MC || K < 1 || K > AMX_KC || !c16_ok(c16, K, accumulate, round) ||
        (!a16 && first_words_fp32(A, transa ? M : K, lda)))
        return 1;
    for (int i = 0; i < n; i++)
        if (N[i] < 1) return 1;
    const int mcp = round32(M), kcp = round32(K), nks = kcp / 32;
    unsigned bad = 0, unused = 0; // A's flag; B's (BF16 halves, never checked)
    pthread_mutex_lock(&amx_lock);
    #pragma omp parallel
    {
        tiles_on();
        pack_a(transa, A, a16, lda, 0, M, 0, K, mcp, kcp, &bad); // no barrier: the first pack_b's
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            for (int n0 = 0; n0 < N[i] && ok; n0 += AMX_NC) { // chunks of B's columns, as gemm_amx's
                const int nc = min_i(AMX_NC, N[i] - n0), ncp = round32(nc);
                pack_b(transb, B[i], 1, ldb[i], 0, K, n0, nc, kcp, ncp, &unused);
                // read after the barrier that ends the first pack_b, by every thread alike
                if (__atomic_load_n(&bad, __ATOMIC_RELAXED)) ok = 0;
                else blocks(mcp, ncp, nks, c_at(C[i], c16, ldc[i], 0, n0), c16, ldc[i], M, nc, !accumulate, round);
            }
        _tile_release();
    }
    pthread_mutex_unlock(&amx_lock);
    return bad != 0;
}

int gemm_amx_shared_a(int n, int transa, int M, int K, const float *A, int lda, int transb, const int *N,
                      const uint16_t *const *B, const int *ldb, float *const *C, const int *ldc, int accumulate,
                      int round) {
    return gemm_amx_shared_a_x(n, transa, 0, M, K, A, lda, transb, N, B, ldb, (void *const *)C, 0, ldc, accumulate,
                               round);
}

TT_AMX int gemm_amx_ksegs(int n, int M, int N, const void *const *A, int a16, const int *lda, const int *K,
                          const uint16_t *B, int ldb, int accumulate, float *C, int ldc, int round) {
    int kt = 0, ok = gemm_amx_path() && n >= 1 && M >= 1 && M <= AMX_MC && N >= 1 && N <= AMX_NC;
    for (int s = 0; s < n && ok; s++) {
        ok = K[s] >= 1 && (s == n - 1 || K[s] % 32 == 0) && (a16 || !first_words_fp32(A[s], K[s], lda[s]));
        kt += K[s];
    }
    if (!ok || kt > AMX_KC) return 1;
    const int mcp = round32(M), kcp = round32(kt), nks = kcp / 32, ncp = round32(N);
    unsigned bad = 0, unused = 0; // the parts' flag; B's (BF16 halves, never checked)
    pthread_mutex_lock(&amx_lock);
    #pragma omp parallel
    {
        tiles_on();
        for (int s = 0, k0 = 0; s < n; k0 += K[s], s++) // each part's steps where its inner indices start
            pack_a_at(0, A[s], a16, lda[s], 0, M, 0, K[s], mcp, round32(K[s]), a_pk + (size_t)(k0 / 32) * 512, nks, &bad);
        pack_b(0, B, 1, ldb, 0, kt, 0, N, kcp, ncp, &unused); // its barrier ends the parts' packs too
        if (!__atomic_load_n(&bad, __ATOMIC_RELAXED)) blocks(mcp, ncp, nks, C, 0, ldc, M, N, !accumulate, round);
        _tile_release();
    }
    pthread_mutex_unlock(&amx_lock);
    return bad != 0;
}
