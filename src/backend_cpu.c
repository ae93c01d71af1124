// backend_cpu.c — the CPU backend: OpenBLAS + OpenMP kernels over a capped arena in RAM.
// Also backend_init's device choice (auto/cpu/cuda: backend_resolve), since it decides which backend runs,
// and what every backend shares: the arena accounting in backend_alloc (the budget check
// and its message, used/peak) and the entry points that hand device work to backend_t.vt
// (backend_cuda.c) when a device backend set it.
#include "backend.h"
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util.h"
#ifdef TT_HAVE_CUDA
#include "cuda_probe.h"
#endif

static const backend_ops_t cpu_ops = {
    .bf16_to_f32_n = bf16_to_f32_n,
    .bf16_from_f32_n = bf16_from_f32_n,
    .bf16_round_n = bf16_round_n,
    .add_inplace = add_inplace,
    .sumsq = sumsq,
    .sumsq_blocks = sumsq_blocks,
    .matmul_forward = matmul_forward,
    .matmul_backward_input = matmul_backward_input,
    .matmul_backward_weight = matmul_backward_weight,
    .matmul_forward_w16 = matmul_forward_w16,
    .matmul_backward_input_w16 = matmul_backward_input_w16,
    .matmul_forward_w16_n = matmul_forward_w16_n,
    .matmul_backward_weight_n = matmul_backward_weight_n,
    .matmul_backward_input_w16_k = matmul_backward_input_w16_k,
    .rmsnorm_forward = rmsnorm_forward,
    .rmsnorm_backward = rmsnorm_backward,
    .rope_forward = rope_forward,
    .rope_backward = rope_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .swiglu_forward = swiglu_forward,
    .swiglu_backward = swiglu_backward,
    .embedding_forward = embedding_forward,
    .embedding_forward_w16 = embedding_forward_w16,
    .embedding_backward = embedding_backward,
    .crossentropy_fold = crossentropy_fold,
    .crossentropy_loss = crossentropy_loss,
    .crossentropy_backward = crossentropy_backward,
    .adamw_update = adamw_update, // AVX-512/AVX2/scalar by CPU: the same bits
    .rmsnorm_forward16 = rmsnorm_forward16, // the BF16 activations (AMX tiles: tier.h act16)
    .matmul_forward_w16_n_x = matmul_forward_w16_n_x,
    .matmul_backward_input_x = matmul_backward_input_x,
    .matmul_backward_weight_n_x = matmul_backward_weight_n_x,
    .swiglu_forward16 = swiglu_forward16,
    .swiglu_backward16 = swiglu_backward16,
    .rope_forward16 = rope_forward16, // the attention half's (tier.h att16)
    .rope_backward16 = rope_backward16,
    .attention_forward16 = attention_forward16,
    .attention_backward16 = attention_backward16,
    .residual_rmsnorm_forward16 = residual_rmsnorm_forward16, // and the residual x2
    .add_inplace16 = add_inplace16,
    .rmsnorm_backward16 = rmsnorm_backward16,
};

int backend_resolve(const config_t *cfg, device_kind_t *kind, uint64_t *hbm_default, char *err, size_t errlen) {
    *kind = DEVICE_CPU;
    if (hbm_default) *hbm_default = 0;
    if (cfg->device == DEVICE_CPU) return 0;
#ifdef TT_HAVE_CUDA
    char why[256] = "";
    int ngpu = cuda_probe_devices(why, sizeof why);
    if (ngpu > 0) {
        size_t free_b = 0, total_b = 0;
        if (hbm_default && cuda_probe_memory(&free_b, &total_b, why, sizeof why) == 0)
            *hbm_default = cuda_default_budget(free_b, total_b);
        *kind = DEVICE_CUDA;
        return 0;
    }
    if (cfg->device == DEVICE_CUDA) {
        snprintf(err, errlen, "--device cuda: no usable GPU (%s); use --device cpu or auto", why);
        return -ENODEV;
    }
#else
    if (cfg->device == DEVICE_CUDA) {
        snprintf(err, errlen, "--device cuda: this build has no CUDA support (rebuild where nvcc is found, or with "
                              "-DTT_CUDA=ON); use --device cpu or auto");
        return -ENODEV;
    }
#endif
    return 0;
}

int backend_resolve_config(config_t *cfg, char *err, size_t errlen) {
    uint64_t hbm = 0;
    device_kind_t kind;
    int rc = backend_resolve(cfg, &kind, &hbm, err, errlen);
    if (rc != 0 || kind != DEVICE_CUDA) return rc;
    cfg->device = DEVICE_CUDA;
    if (cfg->hbm_budget == 0 && hbm) {
        cfg->hbm_budget = hbm;
        char a[32];
        if (!cfg->quiet)
            notice("--hbm-budget not set: using %s of GPU 0 (its free memory less max(1 GiB, 5%%) for the CUDA runtime)",
                   format_bytes(a, sizeof a, hbm));
    }
    return 0;
}

// --device auto found no GPU: one notice saying why (unless --quiet), once per process (a
// bench builds several backends).
static void say_cpu(const config_t *cfg) {
    static int said;
    if (cfg->device != DEVICE_AUTO || cfg->quiet || said++) return;
#ifdef TT_HAVE_CUDA
    char why[256] = "";
    cuda_probe_devices(why, sizeof why);
    notice("--device auto: no usable GPU (%s); running on the CPU", why);
#else
    notice("--device auto: this build has no CUDA support; running on the CPU");
#endif
}

void backend_blas_reexec(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *want = matmul_blas_core_better();
    if (!want || setenv(BACKEND_BLAS_PICKED_ENV, matmul_blas_core(), 1) != 0) return;
    if (setenv("OPENBLAS_CORETYPE", want, 1) == 0) execv("/proc/self/exe", argv);
    // no second run: OpenBLAS's own pick stays, and backend_blas_text says what would be wider
    unsetenv("OPENBLAS_CORETYPE");
    setenv(BACKEND_BLAS_PICKED_ENV, "", 1);
}

const char *backend_blas_replaced(void) {
    const char *picked = getenv(BACKEND_BLAS_PICKED_ENV);
    return picked && *picked && strcmp(picked, matmul_blas_core()) != 0 ? picked : NULL;
}

char *backend_blas_text(char *buf, size_t len) {
    const char *now = matmul_blas_core(), *picked = backend_blas_replaced(), *want = matmul_blas_core_better();
    const char *user = getenv("OPENBLAS_CORETYPE"), *ours = getenv(BACKEND_BLAS_PICKED_ENV);
    char blas[160];
    if (picked)
        snprintf(blas, sizeof blas, "OpenBLAS %s, not its own pick %s", now, picked);
    else if (user && ours && *ours) // the second run, whose OpenBLAS kept its pick
        snprintf(blas, sizeof blas, "OpenBLAS %s, narrower than this CPU (this OpenBLAS ignores OPENBLAS_CORETYPE)", now);
    else if (user)
        snprintf(blas, sizeof blas, "OpenBLAS %s, as OPENBLAS_CORETYPE says", now);
    else if (want)
        snprintf(blas, sizeof blas, "OpenBLAS %s, narrower than this CPU (OPENBLAS_CORETYPE=%s runs wider kernels)",
                 now, want);
    else
        snprintf(blas, sizeof blas, "OpenBLAS %s", now);
    // where our kernels run the products, OpenBLAS is what bench gemm compares them with
    const char *kern = matmul_kernel_name();
    if (kern) snprintf(buf, len, "GEMMs on %s; %s", kern, blas);
    else snprintf(buf, len, "%s", blas);
    return buf;
}

int backend_host_threads(const config_t *cfg) {
    // --threads 0: $OMP_NUM_THREADS when set (the usual OpenMP convention), else every core.
    const char *env = getenv("OMP_NUM_THREADS");
    const int n = cfg->threads > 0 ? cfg->threads : env && atoi(env) > 0 ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

void backend_setup_host_threads(backend_t *be, const config_t *cfg) {
    be->threads = backend_host_threads(cfg);
    // OpenMP is the only thread pool. OpenBLAS's own threading gives different bits for
    // different thread counts, so where it runs the products (a CPU without FMA) the matmul
    // kernels split their output into tiles sized by its shape alone, each one single-threaded
    // sgemm, run by OpenMP (kernels/cpu/matmul.c).
    omp_set_num_threads(be->threads);
    openblas_set_num_threads(1);
    // --cpu-gemm fma keeps the products off AMX tiles (their bits differ from the FMA chain's)
    kernels_limit_simd(cfg->cpu_gemm == CPU_GEMM_FMA ? 2 : 3);
}

// this thread's nthreads-var only (a thread's own ICV)
void backend_worker_threads(const backend_t *be) { omp_set_num_threads(be->vt ? be->threads : 1); }

int backend_init(backend_t *be, const config_t *cfg, char *err, size_t errlen) {
    memset(be, 0, sizeof *be);
    device_kind_t kind;
    int rc = backend_resolve(cfg, &kind, NULL, err, errlen);
    if (rc != 0) return rc;
    if (kind == DEVICE_CUDA) {
        char e[768];
        const char *dev = cfg->device == DEVICE_CUDA ? "cuda" : "auto";
        rc = backend_cuda_init(be, cfg, e, sizeof e);
        if (rc != 0) snprintf(err, errlen, "--device %s: %s (or --device cpu)", dev, e);
        // a budget the GPU cannot hold, or no GPU after all: the user's to fix
        return rc == -ENOMEM ? -EDQUOT : rc;
    }
    say_cpu(cfg);
    be->name = "cpu";
    be->kind = DEVICE_CPU;
    be->ops = &cpu_ops;
    be->budget = cfg->hbm_budget;
    backend_setup_host_threads(be, cfg);
    return 0;
}

#ifndef TT_HAVE_CUDA
uint64_t backend_cuda_overhead(const config_t *cfg) {
    (void)cfg;
    return 0;
}

int backend_cuda_init(backend_t *be, const config_t *cfg, char *err, size_t errlen) {
    (void)cfg;
    memset(be, 0, sizeof *be);
    snprintf(err, errlen, "this build has no CUDA support (rebuild where nvcc is found, or with -DTT_CUDA=ON)");
    return -ENODEV;
}
#endif

void backend_free(backend_t *be) {
    if (!be) return;
    if (be->vt) { // a device backend releases its own arena and state
        be->vt->free(be);
        be->vt = NULL;
        be->dev = NULL;
        be->used = 0;
        return;
    }
    for (int i = 0; i < be->nallocs; i++) free(be->allocs[i]);
    free(be->allocs);
    be->allocs = NULL;
    be->nallocs = be->cap_allocs = 0;
    be->used = 0;
}

// The CPU arena's placement: one zero-filled allocation per request (alloc_huge: with THP
// defrag at "madvise", plain allocations gave the step's buffers 4 KiB pages and every pass TLB
// misses), remembered for backend_free.
static int cpu_alloc(backend_t *be, size_t sz, const char *what, void **out, char *err, size_t errlen) {
    void *p = alloc_huge(sz);
    if (!p) {
        char a[32];
        snprintf(err, errlen, "%s: out of memory allocating %s", what, format_bytes(a, sizeof a, sz));
        return -ENOMEM;
    }
    memset(p, 0, sz);
    if (be->nallocs == be->cap_allocs) {
        int cap = be->cap_allocs ? 2 * be->cap_allocs : 64;
        void **na = realloc(be->allocs, (size_t)cap * sizeof *na);
        if (!na) { free(p); snprintf(err, errlen, "%s: out of memory", what); return -ENOMEM; }
        be->allocs = na;
        be->cap_allocs = cap;
    }
    be->allocs[be->nallocs++] = p;
    *out = p;
    return 0;
}

// The accounting every backend shares: round to 4 KiB, check against the budget (the one
// message), let the backend place it, then count it.
int backend_alloc(backend_t *be, size_t bytes, const char *what, void **out, char *err, size_t errlen) {
    size_t sz = ALIGN_UP(bytes ? bytes : 1, (size_t)4096);
    if (be->budget && be->used + sz > be->budget) {
        char a[32], b[32], c[32];
        snprintf(err, errlen, "%s: needs %s on the device, --hbm-budget %s with %s in use (raise --hbm-budget)",
                 what, format_bytes(a, sizeof a, sz), format_bytes(b, sizeof b, be->budget),
                 format_bytes(c, sizeof c, be->used));
        return -EDQUOT;
    }
    int rc = be->vt ? be->vt->alloc(be, sz, what, out, err, errlen) : cpu_alloc(be, sz, what, out, err, errlen);
    if (rc != 0) return rc;
    be->used += sz;
    if (be->used > be->peak) be->peak = be->used;
    return 0;
}

// ---------------------------------------------------------------- copies, sync, pinning
// The CPU backend: device memory is host memory, so everything happens now.
static void copy_any(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir, int async) {
    if (be->vt) be->vt->copy(be, dst, src, n, dir, async);
    else if (n) memcpy(dst, src, n);
}

void backend_copy_h2d(backend_t *be, void *d_dst, const void *h_src, size_t n) { copy_any(be, d_dst, h_src, n, BACKEND_H2D, 0); }
void backend_copy_d2h(backend_t *be, void *h_dst, const void *d_src, size_t n) { copy_any(be, h_dst, d_src, n, BACKEND_D2H, 0); }
void backend_copy_h2d_async(backend_t *be, void *d_dst, const void *h_src, size_t n) { copy_any(be, d_dst, h_src, n, BACKEND_H2D, 1); }
void backend_copy_d2h_async(backend_t *be, void *h_dst, const void *d_src, size_t n) { copy_any(be, h_dst, d_src, n, BACKEND_D2H, 1); }
void backend_copy_d2d(backend_t *be, void *d_dst, const void *d_src, size_t n) { copy_any(be, d_dst, d_src, n, BACKEND_D2D, 1); }

void backend_memset(backend_t *be, void *d_dst, int byte, size_t n) {
    if (be->vt) be->vt->memset(be, d_dst, byte, n);
    else if (n) memset(d_dst, byte, n);
}

void backend_sync(backend_t *be) {
    if (be->vt) be->vt->sync(be);
}

int backend_register_host(backend_t *be, void *h, size_t n) {
    return be->vt ? be->vt->register_host(be, h, n) : 0;
}

void backend_unregister_host(backend_t *be, void *h) {
    if (be->vt) be->vt->unregister_host(be, h);
}

int backend_event_create(backend_t *be, void **ev, char *err, size_t errlen) {
    *ev = NULL;
    return be->vt ? be->vt->event_create(be, ev, err, errlen) : 0;
}

void backend_event_destroy(backend_t *be, void *ev) {
    if (be->vt && ev) be->vt->event_destroy(be, ev);
}

void backend_event_record(backend_t *be, void *ev) { backend_stream_record(be, BACKEND_STREAM_COMPUTE, ev); }

void backend_stream_record(backend_t *be, backend_stream_t s, void *ev) {
    if (be->vt && ev) be->vt->stream_record(be, s, ev);
}

void backend_stream_wait(backend_t *be, backend_stream_t s, void *ev) {
    if (be->vt && ev) be->vt->stream_wait(be, s, ev);
}

void backend_stream_sync(backend_t *be, backend_stream_t s) {
    if (be->vt) be->vt->stream_sync(be, s);
}

void backend_event_sync(backend_t *be, void *ev) {
    if (be->vt && ev) be->vt->event_sync(be, ev);
}

void *backend_native_stream(backend_t *be, backend_stream_t s) {
    return be->vt && be->vt->native_stream ? be->vt->native_stream(be, s) : NULL;
}

int backend_device_index(const backend_t *be) {
    return be->vt && be->vt->device_index ? be->vt->device_index(be) : -1;
}

void backend_copy_enqueue(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir) {
    if (be->vt) be->vt->copy_enqueue(be, dst, src, n, dir);
    else if (n) memcpy(dst, src, n);
}

void backend_copy_after(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir, void *ev) {
    backend_stream_t s = dir == BACKEND_D2H ? BACKEND_STREAM_D2H : BACKEND_STREAM_H2D;
    backend_stream_wait(be, s, ev);
    backend_copy_enqueue(be, dst, src, n, dir);
    backend_stream_sync(be, s);
}

int backend_host_pin(void *addr, size_t len, void *be) { return backend_register_host(be, addr, len); }
int backend_host_unpin(void *addr, size_t len, void *be) {
    (void)len;
    backend_unregister_host(be, addr);
    return 0;
}
