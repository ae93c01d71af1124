// bench_adam.c — `tiertrain bench adam`: the CPU AdamW update (kernels.h "AdamW") against
// the machine's memory bandwidth. The update streams g, master, m, v in and master, m, v,
// p16 out: 16 + 12 + 2 = 30 bytes per parameter, so it cannot beat (copy bandwidth) / 30 B.
// The bandwidth is a STREAM-style triad a[i] = b[i] + s·c[i] measured in the same run, over
// arrays of comparable total size, with the same threads, twice: with plain stores (as
// STREAM is usually built) and with streaming stores (no write-allocate read of a[]); the
// faster of the two is the bandwidth the bound uses, so the bound is as high as this
// machine showed it can go. A third peer has the update's exact traffic with next to no
// arithmetic (reads g, master, m, v; writes master, m, v and a 16-bit copy): what memory
// allows for this access pattern. On small VMs a 3-stream triad is limited by how many
// misses two cores keep in flight, not by DRAM, and the update's 8 streams can beat it
// (bound_fraction > 1); peer_fraction is then the sharper measure of what is left.
//
// Method: --adam-params parameters (default 256M); g, master, m, v (FP32) and p16 (BF16)
// allocated once (2 MiB aligned, MADV_HUGEPAGE) and first-touched in parallel before any
// timing (first touch of fresh memory is slow on VMs and is not the update's cost), the
// triad's three arrays likewise. One untimed pass of each, then REPS rounds of both
// triads and adamw_update (the dispatched path), in turn so drift hits all alike, the
// first REPS_SCALAR of them also timing adamw_update_scalar (about 10x slower: fewer runs
// keep the bench short). Figures use the best round (STREAM's convention); the table also
// shows the median.
// GB/s are 10⁹ bytes/s counted as STREAM does: bytes the code reads and writes (triad 12 B
// per element, the update 30 B per parameter), not the write-allocate reads the caches add
// (plain-store triad +4 B, the update +2 B for p16's lines, which are written without
// being read); a second line gives the bound fraction with those counted too.
// Also checks, on a 1M-element slice, that the dispatched path gives the scalar's bits.
// Prints a table, then as the last line one JSON object {"bench":"adam",...}.
// Called by main for `tiertrain bench adam`; touches no model, tier or file.
#include <immintrin.h> // uses: _mm_stream_ps, _mm_sfence (SSE, in the x86-64 baseline)
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>    // uses: sysconf(_SC_LEVEL3_CACHE_SIZE)
#include "bench.h"
#include "hostmem.h" // uses: hostmem_mem_available
#include "kernels.h"
#include "util.h"    // uses: now_ms, alloc_huge

#define REPS 7
#define REPS_SCALAR 3
#define BYTES_PER_PARAM 30.0  // reads g, master, m, v (16 B); writes master, m, v (12 B), p16 (2 B)
#define BYTES_PER_TRIAD 12.0  // reads b, c (8 B); writes a (4 B)
#define WA_PARAM 2.0          // write-allocate reads: p16's lines
#define WA_TRIAD 4.0          // write-allocate reads: a's lines
#define CHECK_N (1u << 20)    // the slice the bit check runs on

static double minimum(const double *x, int n) {
    double m = x[0];
    for (int i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
    return m;
}

// Gradient-like values in (−1e-2, 1e-2) from the index (cheap, no shared RNG state).
static float grad_value(size_t i) {
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 32);
    h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12;
    return (float)((double)(h >> 8) / 16777216.0 - 0.5) * 0.02f;
}

// First touch, in parallel with the same static split the timed loops use.
static void touch_state(float *g, float *master, float *m, float *v, uint16_t *p16, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        g[i] = grad_value(i);
        master[i] = 0.02f * grad_value(i + 12345);
        m[i] = 0.0f;
        v[i] = 0.0f;
        p16[i] = 0;
    }
}
static void touch_triad(float *a, float *b, float *c, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
}

// a[i] = b[i] + s·c[i]: STREAM's triad, plain stores (as STREAM compiles by default).
static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

// The same with streaming stores: a's lines go to memory without being read first. a is
// 2 MiB aligned, so every 4-float store is 16-byte aligned; the < 4 tail is plain. The
// sfence drains each thread's write-combining buffers before the region's barrier.
static void triad_nt(float *restrict a, const float *restrict b, const float *restrict c, float s, size_t n) {
    const size_t n4 = n / 4 * 4;
    #pragma omp parallel
    {
        const __m128 sv = _mm_set1_ps(s);
        #pragma omp for schedule(static)
        for (size_t i = 0; i < n4; i += 4)
            _mm_stream_ps(a + i, _mm_add_ps(_mm_loadu_ps(b + i), _mm_mul_ps(sv, _mm_loadu_ps(c + i))));
        _mm_sfence();
    }
    for (size_t i = n4; i < n; i++) a[i] = b[i] + s * c[i];
}

// The update's traffic without its arithmetic: reads g, master, m, v; writes master, m, v
// (each + g) and p16 (master's upper half). SSE2 only (x86-64 baseline), 4 lanes; still
// ~3x faster than memory here, so it measures memory, not itself.
static void traffic_peer(float *restrict master, float *restrict m, float *restrict v, uint16_t *restrict p16,
                         const float *restrict g, size_t n) {
    const size_t n4 = n / 4 * 4;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n4; i += 4) {
        const __m128 gi = _mm_loadu_ps(g + i);
        const __m128 p = _mm_add_ps(_mm_loadu_ps(master + i), gi);
        _mm_storeu_ps(master + i, p);
        _mm_storeu_ps(m + i, _mm_add_ps(_mm_loadu_ps(m + i), gi));
        _mm_storeu_ps(v + i, _mm_add_ps(_mm_loadu_ps(v + i), gi));
        const __m128i h = _mm_srai_epi32(_mm_castps_si128(p), 16); // sign-extended: packs is exact
        _mm_storel_epi64((__m128i *)(p16 + i), _mm_packs_epi32(h, h));
    }
    for (size_t i = n4; i < n; i++) {
        master[i] += g[i], m[i] += g[i], v[i] += g[i];
        uint32_t u;
        memcpy(&u, &master[i], sizeof u);
        p16[i] = (uint16_t)(u >> 16);
    }
}

// The dispatched path and the scalar reference on copies of one slice: same bits?
static int bits_agree(const float *g, const float *master, const float *m, const float *v, size_t n,
                      const adamw_params_t *hp) {
    size_t k = n < CHECK_N ? n : CHECK_N;
    float *f = malloc(k * 6 * sizeof(float));
    uint16_t *h = malloc(k * 2 * sizeof(uint16_t));
    if (!f || !h) { free(f); free(h); return -1; }
    float *a[3] = {f, f + k, f + 2 * k}, *b[3] = {f + 3 * k, f + 4 * k, f + 5 * k};
    const float *src[3] = {master, m, v};
    for (int j = 0; j < 3; j++) memcpy(a[j], src[j], k * sizeof(float)), memcpy(b[j], src[j], k * sizeof(float));
    adamw_update(a[0], a[1], a[2], h, NULL, g, k, hp);
    adamw_update_scalar(b[0], b[1], b[2], h + k, NULL, g, k, hp);
    int same = memcmp(f, f + 3 * k, 3 * k * sizeof(float)) == 0 && memcmp(h, h + k, k * sizeof(uint16_t)) == 0;
    free(f);
    free(h);
    return same;
}

int bench_adam(const config_t *cfg) {
    const int threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    omp_set_num_threads(threads);
    const size_t n = (size_t)cfg->bench_params;
    const double t_start = now_ms();

    // ---- memory: the update's state plus the triad's arrays, checked against MemAvailable
    const size_t state_bytes = n * (4 * sizeof(float) + sizeof(uint16_t));
    const size_t triad_n = n; // 3 arrays of n floats: 12 B per element vs the update's 18 B resident
    const size_t triad_bytes = 3 * triad_n * sizeof(float);
    const uint64_t avail = hostmem_mem_available();
    char b1[32], b2[32];
    if (avail && state_bytes + triad_bytes > avail / 10 * 9) {
        fprintf(stderr, "tiertrain: bench adam --adam-params %zu: needs %s of memory, MemAvailable is %s (lower --adam-params)\n",
                n, format_bytes(b1, sizeof b1, state_bytes + triad_bytes), format_bytes(b2, sizeof b2, avail));
        return 2; // bad input for this machine, found before any work (DESIGN §9)
    }
    float *g = alloc_huge(n * sizeof(float)), *master = alloc_huge(n * sizeof(float));
    float *m = alloc_huge(n * sizeof(float)), *v = alloc_huge(n * sizeof(float));
    uint16_t *p16 = alloc_huge(n * sizeof(uint16_t));
    float *ta = alloc_huge(triad_n * sizeof(float)), *tb = alloc_huge(triad_n * sizeof(float));
    float *tc = alloc_huge(triad_n * sizeof(float));
    int rc = 0;
    if (!g || !master || !m || !v || !p16 || !ta || !tb || !tc) {
        fprintf(stderr, "tiertrain: bench adam --adam-params %zu: cannot allocate %s (lower --adam-params)\n", n,
                format_bytes(b1, sizeof b1, state_bytes + triad_bytes));
        rc = 1;
        goto out;
    }
    double t0 = now_ms();
    touch_state(g, master, m, v, p16, n);
    touch_triad(ta, tb, tc, triad_n);
    const double touch_ms = now_ms() - t0;

    // Typical hyper-parameters a few hundred steps in; the values stay normal, far from
    // denormals or overflow, however many passes run.
    const adamw_params_t hp = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .wd = 0.1f,
                               .grad_scale = 1.0f, .bc1 = 1.0f - powf(0.9f, 300), .bc2 = 1.0f - powf(0.95f, 300)};
    const char *path = adamw_update_path();
    // Arrays that the last-level cache holds a good part of give cache rates, not memory's.
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const size_t cache_bytes = l3 > 0 ? (size_t)l3 : (size_t)64 << 20;
    const int agree = bits_agree(g, master, m, v, n, &hp);

    printf("bench adam: %zu parameters (%s of state + %s of triad arrays), %d threads, path %s, best of %d "
           "(first touch %.0f ms, untimed)\n",
           n, format_bytes(b1, sizeof b1, state_bytes), format_bytes(b2, sizeof b2, triad_bytes), threads, path,
           REPS, touch_ms);

    // ---- warm-up, then REPS rounds in turn
    triad(ta, tb, tc, 3.0f, triad_n);
    triad_nt(ta, tb, tc, 3.0f, triad_n);
    adamw_update(master, m, v, p16, NULL, g, n, &hp);
    adamw_update_scalar(master, m, v, p16, NULL, g, n, &hp);
    // The traffic peer runs on the triad's arrays in place of master, m, v (it adds g to
    // them), with the update's g and p16, so the update's state keeps its values.
    traffic_peer(ta, tb, tc, p16, g, n);
    double t_tri[REPS], t_trint[REPS], t_vec[REPS], t_peer[REPS], t_sca[REPS_SCALAR];
    for (int r = 0; r < REPS; r++) {
        t0 = now_ms();
        triad(ta, tb, tc, 3.0f, triad_n);
        double t1 = now_ms();
        triad_nt(ta, tb, tc, 3.0f, triad_n);
        double t2 = now_ms();
        adamw_update(master, m, v, p16, NULL, g, n, &hp);
        double t3 = now_ms();
        traffic_peer(ta, tb, tc, p16, g, n);
        double t4 = now_ms();
        t_tri[r] = t1 - t0;
        t_trint[r] = t2 - t1;
        t_vec[r] = t3 - t2;
        t_peer[r] = t4 - t3;
        if (r < REPS_SCALAR) {
            adamw_update_scalar(master, m, v, p16, NULL, g, n, &hp);
            t_sca[r] = now_ms() - t4;
        }
    }

    const double tri_best = minimum(t_tri, REPS), trint_best = minimum(t_trint, REPS);
    const double vec_best = minimum(t_vec, REPS), sca_best = minimum(t_sca, REPS_SCALAR);
    const double peer_best = minimum(t_peer, REPS);
    const double plain_gbps = BYTES_PER_TRIAD * (double)triad_n / tri_best / 1e6;
    const double nt_gbps = BYTES_PER_TRIAD * (double)triad_n / trint_best / 1e6;
    const double triad_gbps = plain_gbps > nt_gbps ? plain_gbps : nt_gbps;
    const double bound = triad_gbps * 1e9 / BYTES_PER_PARAM; // params/s
    const double vec_pps = (double)n / vec_best * 1e3, sca_pps = (double)n / sca_best * 1e3;
    const double vec_gbps = vec_pps * BYTES_PER_PARAM / 1e9, sca_gbps = sca_pps * BYTES_PER_PARAM / 1e9;
    const double peer_pps = (double)n / peer_best * 1e3, peer_gbps = peer_pps * BYTES_PER_PARAM / 1e9;
    // With write-allocate reads counted (what the memory bus actually moves): the triad's
    // bus rate is the better of plain (+4 B per element) and streaming (none).
    const double wa_plain_gbps = plain_gbps * (BYTES_PER_TRIAD + WA_TRIAD) / BYTES_PER_TRIAD;
    const double wa_triad_gbps = wa_plain_gbps > nt_gbps ? wa_plain_gbps : nt_gbps;
    const double wa_fraction = vec_pps * (BYTES_PER_PARAM + WA_PARAM) / (wa_triad_gbps * 1e9);

    printf("%-14s %14s %9s %11s %11s %15s\n", "", "params/s", "GB/s", "ms best", "ms median", "fraction bound");
    printf("%-14s %14s %9.2f %11.2f %11.2f %15s\n", "triad", "-", plain_gbps, tri_best, bench_median(t_tri, REPS), "-");
    printf("%-14s %14s %9.2f %11.2f %11.2f %15s\n", "triad stream", "-", nt_gbps, trint_best, bench_median(t_trint, REPS), "-");
    printf("%-14s %14.4g %9.2f %11.2f %11.2f %15.3f\n", "traffic peer", peer_pps, peer_gbps, peer_best,
           bench_median(t_peer, REPS), peer_pps / bound);
    printf("%-14s %14.4g %9.2f %11.2f %11.2f %15.3f\n", path, vec_pps, vec_gbps, vec_best, bench_median(t_vec, REPS),
           vec_pps / bound);
    printf("%-14s %14.4g %9.2f %11.2f %11.2f %15.3f\n", "scalar", sca_pps, sca_gbps, sca_best, bench_median(t_sca, REPS_SCALAR),
           sca_pps / bound);
    printf("bound = best triad %.2f GB/s / %.0f B per parameter = %.4g params/s; %s is %.2fx the scalar path "
           "(scalar: best of %d)\n", triad_gbps, BYTES_PER_PARAM, bound, path, vec_pps / sca_pps, REPS_SCALAR);
    printf("%s reaches %.3f of the traffic peer (same bytes, no arithmetic)\n", path, vec_pps / peer_pps);
    printf("with write-allocate reads counted (plain triad %.0f B, update %.0f B): bus %.2f GB/s, fraction %.3f\n",
           BYTES_PER_TRIAD + WA_TRIAD, BYTES_PER_PARAM + WA_PARAM, wa_triad_gbps, wa_fraction);
    if (state_bytes < 8 * cache_bytes)
        printf("note: %s of state is under 8x the %s last-level cache: these are partly cache rates, not memory's\n",
               format_bytes(b1, sizeof b1, state_bytes), format_bytes(b2, sizeof b2, cache_bytes));
    printf("%s vs scalar bits on a %zu-element slice: %s; %.1f s\n", path, n < CHECK_N ? n : (size_t)CHECK_N,
           agree < 0 ? "not checked (out of memory)" : agree ? "identical" : "DIFFER", (now_ms() - t_start) / 1e3);
    if (agree == 0) {
        fprintf(stderr, "tiertrain: bench adam: the %s path and the scalar reference give different bits (a bug in kernels/cpu/adamw_simd.c)\n",
                path);
        rc = 1;
    }
    printf("{\"bench\":\"adam\",\"path\":\"%s\",\"params\":%zu,\"threads\":%d,\"reps\":%d,\"bytes_per_param\":%.0f,"
           "\"params_per_s\":%.6g,\"GBps\":%.4g,\"ms_per_pass\":%.4g,\"triad_GBps\":%.4g,\"triad_plain_GBps\":%.4g,"
           "\"triad_stream_GBps\":%.4g,\"bound_params_per_s\":%.6g,"
           "\"bound_fraction\":%.4f,\"wa_bound_fraction\":%.4f,\"peer_GBps\":%.4g,\"peer_fraction\":%.4f,\"scalar_params_per_s\":%.6g,\"scalar_GBps\":%.4g,"
           "\"bits_agree\":%s}\n",
           path, n, threads, REPS, BYTES_PER_PARAM, vec_pps, vec_gbps, vec_best, triad_gbps, plain_gbps, nt_gbps, bound, vec_pps / bound,
           wa_fraction, peer_gbps, vec_pps / peer_pps, sca_pps, sca_gbps, agree > 0 ? "true" : "false");
    fflush(stdout);
out:
    free(g); free(master); free(m); free(v); free(p16);
    free(ta); free(tb); free(tc);
    return rc;
}
