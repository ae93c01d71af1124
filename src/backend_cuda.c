// backend_cuda.c — the CUDA backend (DESIGN §6): device 0, one cudaMalloc of the whole
// --hbm-budget (plus 4 KiB to align it) carved by backend_alloc's shared accounting, three streams (compute, h2d,
// d2h) ordered by events, the cuBLASLt handle and workspace, and the op table of
// kernels/cuda (cuda_kernels.h). Built only with CUDA (CMake drops this file otherwise).
//
// What it does not do: allocate after init (nothing calls cudaMalloc again; never managed
// memory), or free single allocations.
//
// Streams and events. Ops run on the compute stream (cuda_kernels_set_stream). A copy
// between host and device runs on its copy stream after an event recorded on the compute
// stream: the ops queued so far (which may still read or write its device buffer) come
// first. A synchronous copy then waits for its stream, so ops queued after it returns see
// its data; an asynchronous one also makes the compute stream wait for it (ops queued later
// must neither read its destination early nor overwrite a buffer it still reads). The
// record-then-wait pairs of concurrent callers are serialized by one mutex, so an event is
// never re-recorded between its record and wait. The caller may order by its own events
// instead (backend_stream_record / _wait, backend_copy_enqueue): the trainer records one
// per parameter slot when its last reader is queued, so a streamed shard's copy waits only
// for the ops that read the slot's previous shard and overlaps the ops queued since; host-
// resident gradients visit two device slots the same way.
//
// Errors: init returns -errno with one line (budget, device, CUDA error) and releases
// everything. After init a failing CUDA call is a device failure the run cannot survive:
// one line naming the call, file and line, exit 1 (runtime_error).
// Called by backend_init (--device auto|cuda) and the GPU tests (tests/gpu).
#include "backend.h"
#include <cuda_runtime_api.h>
#include <errno.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_kernels.h"
#include "cuda_probe.h"
#include "util.h"


typedef struct {
    int device;
    char name[256];
    cudaStream_t compute, h2d, d2h;
    cudaEvent_t ev_compute, ev_h2d, ev_d2h; // see the file comment
    pthread_mutex_t lock;                   // one record-then-wait sequence at a time
    int lock_ok;
    void *arena_alloc;                      // the one cudaMalloc: budget + 4 KiB
    char *arena;                            // its first 4 KiB boundary: be->budget bytes
    uint64_t arena_bytes, off;              // bump offset (== be->used)
    int kernels;                            // cuda_kernels_init done
} cuda_dev_t;

// The ops with a `round` flag (backend.h): the kernel, then the rounding pass over what it
// wrote (the same bits as the CPU kernels' fused rounding: both round the op's FP32 results).
static void rnd_if(int round, float *x, long long n) {
    if (round && n > 0) cuda_bf16_round_n(x, (size_t)n);
}
static void op_add_inplace(float *x, const float *y, size_t n, int round) {
    cuda_add_inplace(x, y, n);
    rnd_if(round, x, (long long)n);
}
static void op_add_inplace16(float *x, const uint16_t *y, size_t n, int round) {
    cuda_add_inplace16(x, y, n);
    rnd_if(round, x, (long long)n);
}
static void op_matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC, int round) {
    cuda_matmul_forward(out, inp, w, N, IC, OC);
    rnd_if(round, out, (long long)N * OC);
}
static void op_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IC, int OC,
                                     int accumulate, int round) {
    cuda_matmul_backward_input(dinp, dout, w, N, IC, OC, accumulate);
    rnd_if(round, dinp, (long long)N * IC);
}
static void op_matmul_forward_w16(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC, int OC,
                                  int round) {
    cuda_matmul_forward_w16(out, inp, w, scratch, N, IC, OC);
    rnd_if(round, out, (long long)N * OC);
}
static void op_matmul_backward_input_w16(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N,
                                         int IC, int OC, int accumulate, int round) {
    cuda_matmul_backward_input_w16(dinp, dout, w, scratch, N, IC, OC, accumulate);
    rnd_if(round, dinp, (long long)N * IC);
}
static void op_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps,
                               int round) {
    cuda_rmsnorm_forward(out, rstd, x, w, N, C, eps);
    rnd_if(round, out, (long long)N * C);
}
static void op_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                                const float *rstd, int N, int C, int round) {
    cuda_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
    rnd_if(round, dx, (long long)N * C);
}
static void op_rmsnorm_backward16(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w,
                                  const float *rstd, int N, int C, int round) {
    cuda_rmsnorm_backward16(dx, dw, dout, x, w, rstd, N, C);
    rnd_if(round, dx, (long long)N * C);
}
static void op_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round) {
    cuda_rope_forward(x, cos_t, sin_t, B, T, NX, HS);
    rnd_if(round, x, (long long)B * T * NX * HS);
}
static void op_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS,
                             int round) {
    cuda_rope_backward(dx, cos_t, sin_t, B, T, NX, HS);
    rnd_if(round, dx, (long long)B * T * NX * HS);
}
static void op_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                                 int NH, int NKV, int HS, int round) {
    cuda_attention_forward(out, lse, q, k, v, B, T, NH, NKV, HS);
    rnd_if(round, out, (long long)B * T * NH * HS);
}
static void op_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                  const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV,
                                  int HS, int round) {
    cuda_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, NKV, HS);
    rnd_if(round, dq, (long long)B * T * NH * HS);
    rnd_if(round, dk, (long long)B * T * NKV * HS);
    rnd_if(round, dv, (long long)B * T * NKV * HS);
}
static void op_swiglu_forward(float *out, const float *gate, const float *up, size_t n, int round) {
    cuda_swiglu_forward(out, gate, up, n);
    rnd_if(round, out, (long long)n);
}
static void op_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               size_t n, int round) {
    cuda_swiglu_backward(dgate, dup, dout, gate, up, n);
    rnd_if(round, dgate, (long long)n);
    rnd_if(round, dup, (long long)n);
}

static const backend_ops_t cuda_ops = {
    .bf16_to_f32_n = cuda_bf16_to_f32_n,
    .bf16_from_f32_n = cuda_bf16_from_f32_n,
    .bf16_round_n = cuda_bf16_round_n,
    .add_inplace = op_add_inplace,
    .sumsq = cuda_sumsq,
    .sumsq_blocks = cuda_sumsq_blocks,
    .matmul_forward = op_matmul_forward,
    .matmul_backward_input = op_matmul_backward_input,
    .matmul_backward_weight = cuda_matmul_backward_weight,
    .matmul_forward_w16 = op_matmul_forward_w16,
    .matmul_backward_input_w16 = op_matmul_backward_input_w16,
    .rmsnorm_forward = op_rmsnorm_forward,
    .rmsnorm_backward = op_rmsnorm_backward,
    .rope_forward = op_rope_forward,
    .rope_backward = op_rope_backward,
    .attention_forward = op_attention_forward,
    .attention_backward = op_attention_backward,
    .swiglu_forward = op_swiglu_forward,
    .swiglu_backward = op_swiglu_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_forward_w16 = cuda_embedding_forward_w16,
    .embedding_backward = cuda_embedding_backward,
    .crossentropy_fold = cuda_crossentropy_fold,
    .crossentropy_loss = cuda_crossentropy_loss,
    .crossentropy_backward = cuda_crossentropy_backward,
    .adamw_update = cuda_adamw_update,
    .rmsnorm_forward16 = cuda_rmsnorm_forward16, // the BF16 activations (tier.h act16)
    .matmul_forward_w16_n_x = cuda_matmul_forward_w16_n_x,
    .matmul_backward_input_x = cuda_matmul_backward_input_x,
    .matmul_backward_weight_n_x = cuda_matmul_backward_weight_n_x,
    .swiglu_forward16 = cuda_swiglu_forward16,
    .swiglu_backward16 = cuda_swiglu_backward16,
    .rope_forward16 = cuda_rope_forward16, // and the attention half's (tier.h att16)
    .rope_backward16 = cuda_rope_backward16,
    .attention_forward16 = cuda_attention_forward16,
    .attention_backward16 = cuda_attention_backward16,
    .residual_rmsnorm_forward16 = cuda_residual_rmsnorm_forward16, // and the residual x2
    .add_inplace16 = op_add_inplace16,
    .rmsnorm_backward16 = op_rmsnorm_backward16,
};

// After init: a failed CUDA call is fatal for the run (file:line, exit 1).
static void cuda_rt_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess)
        runtime_error("CUDA error at %s:%d: %s: %s (%s)", file, line, what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define cudaCheck(call) cuda_rt_check((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------- memory
static int cuda_alloc(backend_t *be, size_t sz, const char *what, void **out, char *err, size_t errlen) {
    cuda_dev_t *d = be->dev;
    // backend_alloc checked used + sz against the budget, and the arena is the budget
    if (d->off + sz > d->arena_bytes) {
        snprintf(err, errlen, "%s: the device arena (%llu bytes) is exhausted", what, (unsigned long long)d->arena_bytes);
        return -ENOMEM;
    }
    void *p = d->arena + d->off;
    // zero-filled, as the contract says; allocation happens at init only, so waiting is fine
    cudaError_t e = cudaMemsetAsync(p, 0, sz, d->compute);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->compute);
    if (e != cudaSuccess) {
        char a[32];
        snprintf(err, errlen, "%s: zero-filling %s of device memory failed: %s (%s)", what, format_bytes(a, sizeof a, sz),
                 cudaGetErrorString(e), cudaGetErrorName(e));
        return -EIO;
    }
    d->off += sz;
    *out = p;
    return 0;
}

static void cuda_free_all(backend_t *be) {
    cuda_dev_t *d = be->dev;
    if (!d) return;
    // Everything queued finishes before its memory goes; errors here are reported, not fatal.
    cudaStream_t streams[3] = {d->compute, d->h2d, d->d2h};
    for (int i = 0; i < 3; i++)
        if (streams[i]) {
            cudaError_t e = cudaStreamSynchronize(streams[i]);
            if (e != cudaSuccess) notice("CUDA backend: finishing queued work failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        }
    if (d->kernels) cuda_kernels_free();
    if (d->arena_alloc) cudaFree(d->arena_alloc);
    cudaEvent_t evs[3] = {d->ev_compute, d->ev_h2d, d->ev_d2h};
    for (int i = 0; i < 3; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
    for (int i = 0; i < 3; i++)
        if (streams[i]) cudaStreamDestroy(streams[i]);
    if (d->lock_ok) pthread_mutex_destroy(&d->lock);
    free(d);
    be->dev = NULL;
}

// ---------------------------------------------------------------- copies
static void cuda_copy(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir, int async) {
    cuda_dev_t *d = be->dev;
    if (n == 0) return;
    if (dir == BACKEND_D2D) { // in order with the ops
        nvtxRangePushA("copy_d2d");
        cudaCheck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, d->compute));
        nvtxRangePop();
        return;
    }
    const int h2d = dir == BACKEND_H2D;
    cudaStream_t s = h2d ? d->h2d : d->d2h;
    cudaEvent_t done = h2d ? d->ev_h2d : d->ev_d2h;
    nvtxRangePushA(h2d ? "copy_h2d" : "copy_d2h");
    pthread_mutex_lock(&d->lock);
    cudaCheck(cudaEventRecord(d->ev_compute, d->compute)); // the ops queued so far ...
    cudaCheck(cudaStreamWaitEvent(s, d->ev_compute, 0));   // ... come before the copy
    cudaCheck(cudaMemcpyAsync(dst, src, n, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s));
    if (async) {
        cudaCheck(cudaEventRecord(done, s));                 // the copy comes before ...
        cudaCheck(cudaStreamWaitEvent(d->compute, done, 0)); // ... the ops queued later
    }
    pthread_mutex_unlock(&d->lock);
    if (!async) cudaCheck(cudaStreamSynchronize(s)); // our copy and anything before it on s
    nvtxRangePop();
}

static cudaStream_t stream_of(cuda_dev_t *d, backend_stream_t s) {
    return s == BACKEND_STREAM_H2D ? d->h2d : s == BACKEND_STREAM_D2H ? d->d2h : d->compute;
}

static void cuda_copy_enqueue(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir) {
    cuda_dev_t *d = be->dev;
    if (n == 0) return;
    const int h2d = dir == BACKEND_H2D;
    nvtxRangePushA(h2d ? "copy_h2d_enqueue" : "copy_d2h_enqueue");
    cudaCheck(cudaMemcpyAsync(dst, src, n, h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, h2d ? d->h2d : d->d2h));
    nvtxRangePop();
}

static void cuda_stream_record(backend_t *be, backend_stream_t s, void *ev) {
    cudaCheck(cudaEventRecord((cudaEvent_t)ev, stream_of(be->dev, s)));
}

static void cuda_stream_wait(backend_t *be, backend_stream_t s, void *ev) {
    cudaCheck(cudaStreamWaitEvent(stream_of(be->dev, s), (cudaEvent_t)ev, 0));
}

static void cuda_stream_sync(backend_t *be, backend_stream_t s) {
    cudaCheck(cudaStreamSynchronize(stream_of(be->dev, s)));
}

static void cuda_event_sync(backend_t *be, void *ev) {
    (void)be;
    cudaCheck(cudaEventSynchronize((cudaEvent_t)ev));
}

static int cuda_event_create(backend_t *be, void **ev, char *err, size_t errlen) {
    (void)be;
    cudaEvent_t e = NULL;
    cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (rc != cudaSuccess) {
        snprintf(err, errlen, "cudaEventCreateWithFlags failed: %s (%s)", cudaGetErrorString(rc), cudaGetErrorName(rc));
        return -EIO;
    }
    *ev = e;
    return 0;
}

static void cuda_event_destroy(backend_t *be, void *ev) {
    (void)be;
    if (ev) cudaEventDestroy((cudaEvent_t)ev); // at teardown: nothing to do if it fails
}

static void cuda_memset(backend_t *be, void *d_dst, int byte, size_t n) {
    cuda_dev_t *d = be->dev;
    if (n) cudaCheck(cudaMemsetAsync(d_dst, byte, n, d->compute));
}

static void cuda_sync(backend_t *be) {
    cuda_dev_t *d = be->dev;
    nvtxRangePushA("sync");
    cudaCheck(cudaStreamSynchronize(d->h2d));
    cudaCheck(cudaStreamSynchronize(d->compute));
    cudaCheck(cudaStreamSynchronize(d->d2h));
    nvtxRangePop();
}

static int cuda_register_host(backend_t *be, void *h, size_t n) {
    (void)be;
    if (n == 0) return 0;
    cudaError_t e = cudaHostRegister(h, n, cudaHostRegisterDefault);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError(); // not sticky; clear it so later checks do not see it
    char a[32];
    notice("cudaHostRegister of %s at %p failed: %s (%s)", format_bytes(a, sizeof a, n), h, cudaGetErrorString(e),
           cudaGetErrorName(e));
    return e == cudaErrorHostMemoryAlreadyRegistered ? -EEXIST : e == cudaErrorMemoryAllocation ? -ENOMEM : -EINVAL;
}

static void cuda_unregister_host(backend_t *be, void *h) {
    (void)be;
    cudaError_t e = cudaHostUnregister(h);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        notice("cudaHostUnregister(%p) failed: %s (%s)", h, cudaGetErrorString(e), cudaGetErrorName(e));
    }
}

static void *cuda_native_stream(backend_t *be, backend_stream_t s) {
    return (void *)stream_of((cuda_dev_t *)be->dev, s);
}

static int cuda_device_index(const backend_t *be) { return ((const cuda_dev_t *)be->dev)->device; }

static const backend_vt_t cuda_vt = {
    .free = cuda_free_all,
    .alloc = cuda_alloc,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .sync = cuda_sync,
    .register_host = cuda_register_host,
    .unregister_host = cuda_unregister_host,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .stream_record = cuda_stream_record,
    .stream_wait = cuda_stream_wait,
    .stream_sync = cuda_stream_sync,
    .event_sync = cuda_event_sync,
    .copy_enqueue = cuda_copy_enqueue,
    .native_stream = cuda_native_stream,
    .device_index = cuda_device_index,
};

// ---------------------------------------------------------------- init
// The widest row, largest weight and row count the model's ops see (see
// cuda_kernels_scratch_bytes): every Llama weight has C on one side.
static void model_limits(const config_t *cfg, int *rows, int *dim, size_t *weight) {
    long C = cfg->C > 0 ? cfg->C : 1;
    long HS = cfg->NH > 0 ? C / cfg->NH : C;
    long qkv = (long)(cfg->NH + 2 * cfg->NKV) * HS;
    long dmax = C;
    if (cfg->F > dmax) dmax = cfg->F;
    if (cfg->V > dmax) dmax = cfg->V;
    if (qkv > dmax) dmax = qkv;
    long n = (long)(cfg->B > 0 ? cfg->B : 1) * (cfg->T > 0 ? cfg->T : 1);
    *rows = n > 0x7fffffffL ? 0x7fffffff : (int)n;
    *dim = dmax > 0x7fffffffL ? 0x7fffffff : (int)dmax;
    *weight = (size_t)dmax * (size_t)C;
}

uint64_t backend_cuda_overhead(const config_t *cfg) {
    int rows = 0, dim = 0;
    size_t weight = 0;
    model_limits(cfg, &rows, &dim, &weight);
    size_t sb = cuda_kernels_scratch_bytes(rows, dim, weight, cfg->precision == PREC_FP32);
    return ALIGN_UP((uint64_t)CUDA_LT_WORKSPACE_BYTES, 4096) + ALIGN_UP((uint64_t)sb, 4096);
}

#define INIT_CHECK(call)                                                                                 \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                         \
            snprintf(err, errlen, "CUDA backend: %s failed: %s (%s)", #call, cudaGetErrorString(e_),    \
                     cudaGetErrorName(e_));                                                              \
            rc = -EIO;                                                                                   \
            goto fail;                                                                                   \
        }                                                                                                \
    } while (0)

int backend_cuda_init(backend_t *be, const config_t *cfg, char *err, size_t errlen) {
    int rc = 0;
    memset(be, 0, sizeof *be);
    char why[256] = "";
    if (cuda_probe_devices(why, sizeof why) <= 0) {
        snprintf(err, errlen, "no usable GPU (%s)", why);
        return -ENODEV;
    }
    cuda_dev_t *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "CUDA backend: out of host memory");
        return -ENOMEM;
    }
    be->name = "cuda";
    be->kind = DEVICE_CUDA;
    be->ops = &cuda_ops;
    be->vt = &cuda_vt;
    be->dev = d;
    backend_setup_host_threads(be, cfg);
    if (pthread_mutex_init(&d->lock, NULL) != 0) {
        snprintf(err, errlen, "CUDA backend: pthread_mutex_init failed");
        rc = -ENOMEM;
        goto fail;
    }
    d->lock_ok = 1;

    // ---- device, context, streams, events, the kernels (cuBLASLt handle, loaded modules):
    // all before measuring free memory, so what they take is not counted twice
    // ranks: the node's rank k takes GPU k (of those visible; k modulo their number)
    int ndev = 0;
    INIT_CHECK(cudaGetDeviceCount(&ndev));
    d->device = ndev > 0 && cfg->local_rank > 0 ? cfg->local_rank % ndev : 0;
    INIT_CHECK(cudaSetDevice(d->device));
    INIT_CHECK(cudaFree(NULL)); // creates the context now
    struct cudaDeviceProp prop;
    INIT_CHECK(cudaGetDeviceProperties(&prop, d->device));
    snprintf(d->name, sizeof d->name, "%s", prop.name);
    INIT_CHECK(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking));
    INIT_CHECK(cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking));
    INIT_CHECK(cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking));
    INIT_CHECK(cudaEventCreateWithFlags(&d->ev_compute, cudaEventDisableTiming));
    INIT_CHECK(cudaEventCreateWithFlags(&d->ev_h2d, cudaEventDisableTiming));
    INIT_CHECK(cudaEventCreateWithFlags(&d->ev_d2h, cudaEventDisableTiming));
    const int fp32 = cfg->precision == PREC_FP32;
    if (cuda_kernels_init(fp32, err, errlen) != 0) {
        rc = -EIO;
        goto fail;
    }
    d->kernels = 1;
    cuda_kernels_set_stream(d->compute);

    // ---- the budget and the arena
    size_t free_b = 0, total_b = 0;
    INIT_CHECK(cudaMemGetInfo(&free_b, &total_b));
    uint64_t reserve = cuda_reserve_bytes(total_b);
    uint64_t budget = cfg->hbm_budget;
    char a[32], b[32], c[32], r[32];
    if (budget == 0) {
        budget = cuda_default_budget(free_b, total_b);
        if (budget == 0) {
            snprintf(err, errlen, "GPU %d (%s): %s free of %s, less than the %s kept for the CUDA runtime (free the GPU, or set --hbm-budget)",
                     d->device, d->name, format_bytes(a, sizeof a, free_b), format_bytes(b, sizeof b, total_b),
                     format_bytes(r, sizeof r, reserve));
            rc = -ENOMEM;
            goto fail;
        }
        if (!cfg->quiet)
            notice("--hbm-budget not set: using %s on GPU %d (%s): %s free of %s, %s kept for the CUDA runtime",
                   format_bytes(a, sizeof a, budget), d->device, d->name, format_bytes(b, sizeof b, free_b),
                   format_bytes(c, sizeof c, total_b), format_bytes(r, sizeof r, reserve));
    } else if (budget + 4096 > free_b) {
        snprintf(err, errlen, "--hbm-budget %s: GPU %d (%s) has %s free of %s (lower --hbm-budget, or leave it unset: free minus max(1 GiB, 5%%))",
                 format_bytes(a, sizeof a, budget), d->device, d->name, format_bytes(b, sizeof b, free_b),
                 format_bytes(c, sizeof c, total_b));
        rc = -ENOMEM;
        goto fail;
    }
    // cudaMalloc promises 256-byte alignment; backend_alloc promises 4 KiB: 4 KiB more, and
    // the arena starts at the first 4 KiB boundary.
    cudaError_t e = cudaMalloc(&d->arena_alloc, budget + 4096);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        d->arena_alloc = NULL;
        snprintf(err, errlen, "--hbm-budget %s: cudaMalloc on GPU %d (%s) failed: %s (%s free of %s; lower --hbm-budget)",
                 format_bytes(a, sizeof a, budget), d->device, d->name, cudaGetErrorString(e),
                 format_bytes(b, sizeof b, free_b), format_bytes(c, sizeof c, total_b));
        rc = -ENOMEM;
        goto fail;
    }
    d->arena = (char *)ALIGN_UP((uintptr_t)d->arena_alloc, (uintptr_t)4096);
    d->arena_bytes = budget;
    be->budget = budget;

    // ---- the kernels' own memory, from the arena like everything else
    void *lt_ws = NULL, *scratch = NULL;
    if ((rc = backend_alloc(be, CUDA_LT_WORKSPACE_BYTES, "cuBLASLt workspace", &lt_ws, err, errlen)) != 0) goto fail;
    int rows = 0, dim = 0;
    size_t weight = 0;
    model_limits(cfg, &rows, &dim, &weight);
    size_t sb = cuda_kernels_scratch_bytes(rows, dim, weight, fp32);
    if ((rc = backend_alloc(be, sb, "kernel scratch (BF16 matmul staging, reductions)", &scratch, err, errlen)) != 0) goto fail;
    cuda_kernels_set_workspace(scratch, sb, lt_ws, CUDA_LT_WORKSPACE_BYTES);
    return 0;

fail:
    backend_free(be); // releases whatever exists (cuda_free_all is NULL-safe field by field)
    memset(be, 0, sizeof *be);
    return rc ? rc : -EIO;
}
