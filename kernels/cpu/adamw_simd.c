// adamw_simd.c — the vectorized AdamW paths (kernels.h "AdamW"): AVX2+FMA (8 lanes) and
// AVX-512F (16 lanes), and adamw_update, which picks the widest one this CPU runs.
//
// Numerics: each lane performs exactly the scalar reference's sequence (kernels/cpu/adamw.c):
// separate IEEE mul/add/sub where the reference has them, an explicit vfmadd where it calls
// fmaf, and vdivps/vsqrtps, which are correctly rounded like '/' and sqrtf. The file is built
// with -ffp-contract=off, so the compiler fuses nothing on its own (GCC's _mm*_mul_ps and
// _mm*_add_ps are plain vector '*' and '+', which contraction could otherwise fuse). The
// BF16 copy is the integer round-to-nearest-even of bf16.c (NaN kept quiet with its sign),
// done in lanes. So every path gives the same bits as the scalar one for every input,
// denormals, infinities and NaN included (a NaN's payload aside where two different NaNs
// meet in one FMA: x86 keeps the first NaN operand, and the FMA form is the compiler's
// choice); tests/test_adam.c holds the paths to that with memcmp.
//
// Stores are plain. Streaming p16 (written, never read) would save its write-allocate
// read, 2 of the 32 bytes the bus moves per parameter; measured here it was within the
// run-to-run noise, and it would push p16 out of cache just before the next forward
// reads it (the optimizer runs shard by shard, ahead of that forward).
//
// Threads: OpenMP over fixed tiles of ADAMW_TILE elements, schedule(static), each tile run
// by one vector loop. The update is elementwise, so the bits depend on neither the tile
// split nor the thread count. Calls of one tile or less stay on the calling thread (the
// optimizer calls this per tensor, many of them small).
//
// Compiled with the project's baseline flags: the vector code is enabled per function with
// target attributes, and only called after __builtin_cpu_supports says the CPU has it.
// Does not allocate, does not know about shards. Called by the optimizer driver (through
// the backend's op table), tests/test_adam.c and bench/bench_adam.c.
#include "kernels.h"
#include <immintrin.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// 16384 elements = 64 KiB of each FP32 array per tile: big enough that the OpenMP overhead
// (~1 µs per parallel region) is noise, small enough that 256M parameters make 16384 tiles
// and the static split is even to within one tile.
#define ADAMW_TILE 16384

// The hyper-parameters as the scalar reference uses them (1 − beta computed in FP32 once).
typedef struct {
    float lr, beta1, beta2, eps, wd, gs, bc1, bc2, omb1, omb2;
} adamw_consts_t;

static adamw_consts_t consts_of(const adamw_params_t *hp) {
    adamw_consts_t k = {hp->lr, hp->beta1, hp->beta2, hp->eps, hp->wd, hp->grad_scale, hp->bc1, hp->bc2,
                        1.0f - hp->beta1, 1.0f - hp->beta2};
    return k;
}

// gz: g itself when the caller consumes it (adamw_params_t.consume: zeros written over it
// once read), else NULL.
typedef void (*adamw_tile_fn)(float *master, float *m, float *v, uint16_t *p16, float *p32,
                              const float *g, float *gz, size_t n, const adamw_consts_t *k);

// Runs fn over [0, n) in tiles: on this thread for one tile, else OpenMP over tiles.
static void run_tiles(adamw_tile_fn fn, float *master, float *m, float *v, uint16_t *p16, float *p32,
                      const float *g, size_t n, const adamw_params_t *hp) {
    const adamw_consts_t k = consts_of(hp);
    float *gz = hp->consume ? (float *)g : NULL; // writable by the contract (kernels.h)
    if (n <= ADAMW_TILE) {
        fn(master, m, v, p16, p32, g, gz, n, &k);
        return;
    }
    const size_t nt = (n + ADAMW_TILE - 1) / ADAMW_TILE;
    #pragma omp parallel for schedule(static)
    for (size_t t = 0; t < nt; t++) {
        size_t i = t * ADAMW_TILE, len = n - i < ADAMW_TILE ? n - i : ADAMW_TILE;
        fn(master + i, m + i, v + i, p16 ? p16 + i : NULL, p32 ? p32 + i : NULL, g + i, gz ? gz + i : NULL, len, &k);
    }
}

// ---------------------------------------------------------------- AVX2 + FMA
#define AVX2_FN __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

typedef struct {
    __m256 lr, beta1, beta2, eps, wd, gs, bc1, bc2, omb1, omb2;
} avx2_consts_t;

// Eight lanes of the reference sequence; *mp, *vp, *pp are updated in place.
AVX2_INLINE __m256 avx2_lanes(__m256 gr, __m256 *mp, __m256 *vp, __m256 pr, const avx2_consts_t *c) {
    __m256 gi = _mm256_mul_ps(gr, c->gs);                                        // g·gs
    __m256 mi = _mm256_fmadd_ps(c->beta1, *mp, _mm256_mul_ps(c->omb1, gi));       // fmaf(b1, m, (1−b1)·g)
    __m256 vi = _mm256_fmadd_ps(c->beta2, *vp, _mm256_mul_ps(_mm256_mul_ps(c->omb2, gi), gi));
    __m256 mh = _mm256_div_ps(mi, c->bc1), vh = _mm256_div_ps(vi, c->bc2);
    __m256 u = _mm256_div_ps(mh, _mm256_add_ps(_mm256_sqrt_ps(vh), c->eps));
    *mp = mi;
    *vp = vi;
    return _mm256_sub_ps(pr, _mm256_mul_ps(c->lr, _mm256_fmadd_ps(c->wd, pr, u))); // p − lr·fmaf(wd, p, u)
}

// bf16.c's rne() on eight lanes, packed to eight uint16. Every 32-bit lane ends ≤ 0xffff,
// so the unsigned-saturating pack is exact.
AVX2_INLINE __m128i avx2_bf16(__m256 p) {
    const __m256i u = _mm256_castps_si256(p);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    // NaN: |u| > 0x7f800000; both sides are non-negative as int32, so the signed compare is right.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
    const __m256i h = _mm256_blendv_epi8(r, q, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// One block of eight at element 0 of each pointer (unaligned loads and stores).
AVX2_INLINE void avx2_block(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g,
                            float *gz, const avx2_consts_t *c) {
    __m256 mi = _mm256_loadu_ps(m), vi = _mm256_loadu_ps(v);
    __m256 p = avx2_lanes(_mm256_loadu_ps(g), &mi, &vi, _mm256_loadu_ps(master), c);
    if (gz) _mm256_storeu_ps(gz, _mm256_setzero_ps());
    _mm256_storeu_ps(m, mi);
    _mm256_storeu_ps(v, vi);
    _mm256_storeu_ps(master, p);
    if (p16) _mm_storeu_si128((__m128i *)p16, avx2_bf16(p));
    if (p32) _mm256_storeu_ps(p32, p);
}

AVX2_FN static void avx2_tile(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g,
                              float *gz, size_t n, const adamw_consts_t *k) {
    const avx2_consts_t c = {
        _mm256_set1_ps(k->lr), _mm256_set1_ps(k->beta1), _mm256_set1_ps(k->beta2), _mm256_set1_ps(k->eps),
        _mm256_set1_ps(k->wd), _mm256_set1_ps(k->gs), _mm256_set1_ps(k->bc1), _mm256_set1_ps(k->bc2),
        _mm256_set1_ps(k->omb1), _mm256_set1_ps(k->omb2),
    };
    size_t i = 0;
    // The p16/p32/gz tests are loop-invariant and always predicted; one loop serves every
    // combination (it is memory-bound, not branch-bound).
    for (; i + 8 <= n; i += 8)
        avx2_block(master + i, m + i, v + i, p16 ? p16 + i : NULL, p32 ? p32 + i : NULL, g + i, gz ? gz + i : NULL,
                   &c);
    if (i == n) return;
    // Tail (< 8): the same lanes over zero-padded copies (zeros compute harmlessly:
    // 0 / (0 + eps) = 0), then only the live elements are copied back.
    const size_t r = n - i;
    float tg[8] = {0}, tm[8] = {0}, tv[8] = {0}, tp[8] = {0}, t32[8];
    uint16_t t16[8];
    memcpy(tg, g + i, r * sizeof(float));
    memcpy(tm, m + i, r * sizeof(float));
    memcpy(tv, v + i, r * sizeof(float));
    memcpy(tp, master + i, r * sizeof(float));
    avx2_block(tp, tm, tv, t16, t32, tg, NULL, &c);
    if (gz) memset(gz + i, 0, r * sizeof(float));
    memcpy(m + i, tm, r * sizeof(float));
    memcpy(v + i, tv, r * sizeof(float));
    memcpy(master + i, tp, r * sizeof(float));
    if (p16) memcpy(p16 + i, t16, r * sizeof(uint16_t));
    if (p32) memcpy(p32 + i, t32, r * sizeof(float));
}

// ---------------------------------------------------------------- AVX-512F
// Only AVX-512F instructions (masked loads/stores and vpmovdw are F, not BW), so any
// AVX-512 CPU runs it. Tails use lane masks; masked-off lanes load zeros and store nothing.
#define AVX512_FN __attribute__((target("avx512f")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f")))

typedef struct {
    __m512 lr, beta1, beta2, eps, wd, gs, bc1, bc2, omb1, omb2;
} avx512_consts_t;

AVX512_INLINE void avx512_block(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g,
                                float *gz, __mmask16 k, const avx512_consts_t *c) {
    const __m512 gr = _mm512_maskz_loadu_ps(k, g), mr = _mm512_maskz_loadu_ps(k, m);
    if (gz) _mm512_mask_storeu_ps(gz, k, _mm512_setzero_ps());
    const __m512 vr = _mm512_maskz_loadu_ps(k, v), pr = _mm512_maskz_loadu_ps(k, master);
    const __m512 gi = _mm512_mul_ps(gr, c->gs);
    const __m512 mi = _mm512_fmadd_ps(c->beta1, mr, _mm512_mul_ps(c->omb1, gi));
    const __m512 vi = _mm512_fmadd_ps(c->beta2, vr, _mm512_mul_ps(_mm512_mul_ps(c->omb2, gi), gi));
    const __m512 mh = _mm512_div_ps(mi, c->bc1), vh = _mm512_div_ps(vi, c->bc2);
    const __m512 u = _mm512_div_ps(mh, _mm512_add_ps(_mm512_sqrt_ps(vh), c->eps));
    const __m512 p = _mm512_sub_ps(pr, _mm512_mul_ps(c->lr, _mm512_fmadd_ps(c->wd, pr, u)));
    _mm512_mask_storeu_ps(m, k, mi);
    _mm512_mask_storeu_ps(v, k, vi);
    _mm512_mask_storeu_ps(master, k, p);
    if (p32) _mm512_mask_storeu_ps(p32, k, p);
    if (p16) { // bf16.c's rne() in lanes, narrowed with vpmovdw (every lane ≤ 0xffff)
        const __m512i ub = _mm512_castps_si512(p);
        const __m512i hi = _mm512_srli_epi32(ub, 16);
        const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        const __m512i rb = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(ub, _mm512_set1_epi32(0x7fff)), lsb), 16);
        const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(ub, _mm512_set1_epi32(0x7fffffff)),
                                                      _mm512_set1_epi32(0x7f800000));
        const __m512i h = _mm512_mask_or_epi32(rb, nan, hi, _mm512_set1_epi32(0x0040)); // NaN: quiet, sign kept
        _mm512_mask_cvtepi32_storeu_epi16(p16, k, h);
    }
}

AVX512_FN static void avx512_tile(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g,
                                  float *gz, size_t n, const adamw_consts_t *k) {
    const avx512_consts_t c = {
        _mm512_set1_ps(k->lr), _mm512_set1_ps(k->beta1), _mm512_set1_ps(k->beta2), _mm512_set1_ps(k->eps),
        _mm512_set1_ps(k->wd), _mm512_set1_ps(k->gs), _mm512_set1_ps(k->bc1), _mm512_set1_ps(k->bc2),
        _mm512_set1_ps(k->omb1), _mm512_set1_ps(k->omb2),
    };
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        avx512_block(master + i, m + i, v + i, p16 ? p16 + i : NULL, p32 ? p32 + i : NULL, g + i, gz ? gz + i : NULL,
                     0xffff, &c);
    if (i < n)
        avx512_block(master + i, m + i, v + i, p16 ? p16 + i : NULL, p32 ? p32 + i : NULL, g + i, gz ? gz + i : NULL,
                     (__mmask16)((1u << (n - i)) - 1u), &c);
}

// ---------------------------------------------------------------- entry points and dispatch
enum { PATH_UNSET = 0, PATH_SCALAR, PATH_AVX2, PATH_AVX512 };

// The CPU's answer never changes, so racing first callers store the same value; relaxed
// atomics keep that race defined (and quiet under TSan).
static _Atomic int g_path = PATH_UNSET;

static int path_pick(void) {
    int p = atomic_load_explicit(&g_path, memory_order_relaxed);
    if (p != PATH_UNSET) return p;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) p = PATH_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) p = PATH_AVX2;
    else p = PATH_SCALAR;
    atomic_store_explicit(&g_path, p, memory_order_relaxed);
    return p;
}

// Calling a path this CPU lacks is a programmer error (it would die of SIGILL somewhere
// less clear): stop here and say so.
static void require(int ok, const char *fn, const char *feature) {
    if (ok) return;
    fprintf(stderr, "tiertrain: %s called on a CPU without %s (call adamw_update, which picks a supported path)\n",
            fn, feature);
    abort();
}

void adamw_update_avx2(float *master, float *m, float *v, uint16_t *p16, float *p32,
                       const float *g, size_t n, const adamw_params_t *hp) {
    require(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "adamw_update_avx2", "AVX2+FMA");
    run_tiles(avx2_tile, master, m, v, p16, p32, g, n, hp);
}

void adamw_update_avx512(float *master, float *m, float *v, uint16_t *p16, float *p32,
                         const float *g, size_t n, const adamw_params_t *hp) {
    require(__builtin_cpu_supports("avx512f"), "adamw_update_avx512", "AVX-512F");
    run_tiles(avx512_tile, master, m, v, p16, p32, g, n, hp);
}

void adamw_update(float *master, float *m, float *v, uint16_t *p16, float *p32,
                  const float *g, size_t n, const adamw_params_t *hp) {
    switch (path_pick()) {
    case PATH_AVX512: run_tiles(avx512_tile, master, m, v, p16, p32, g, n, hp); break;
    case PATH_AVX2: run_tiles(avx2_tile, master, m, v, p16, p32, g, n, hp); break;
    default: adamw_update_scalar(master, m, v, p16, p32, g, n, hp); break;
    }
}

const char *adamw_update_path(void) {
    switch (path_pick()) {
    case PATH_AVX512: return "avx512";
    case PATH_AVX2: return "avx2";
    default: return "scalar";
    }
}
