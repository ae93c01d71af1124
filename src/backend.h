// backend.h — the device interface (DESIGN §6): device memory, copies, events, and the op
// table of kernels. backend_cpu.c implements it over host RAM with OpenBLAS/OpenMP;
// backend_cuda.c implements the same with cuBLASLt, kernels/cuda/*.cu and streams.
//
// Device memory is one arena capped by --hbm-budget: everything is sized and allocated at
// init, nothing in the step loop. Going over the budget is an error naming the bytes
// wanted, the budget and what is already in use. On the CPU backend the arena is ordinary
// memory with the same cap, so every budget decision also runs on machines without a GPU;
// on the CUDA backend it is one cudaMalloc of the whole budget at init, carved by the same
// accounting (backend_alloc). Pointers given to ops are device pointers.
//
// Threads: ops are queued by one thread (the trainer's compute thread). Copies, memsets and
// events may come from any thread (the scheduler's worker fetches parameters, the optimizer
// thread reads gradients back and zeroes them); each orders itself against the ops as said
// below.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "kernels.h"

// The device is host memory (the CPU backend): the host may read and write device buffers
// directly, and NVMe transfers may use them.
#define backend_host_addressable(be) ((be)->vt == NULL)

// The op table: one entry per kernel, same contract as kernels/kernels.h (the `round` flags
// included: the CUDA backend rounds in a pass after its kernel, the CPU one in the kernel).
typedef struct {
    void (*bf16_to_f32_n)(float *dst, const uint16_t *src, size_t n);
    void (*bf16_from_f32_n)(uint16_t *dst, const float *src, size_t n);
    void (*bf16_round_n)(float *x, size_t n);
    void (*add_inplace)(float *x, const float *y, size_t n, int round);
    double (*sumsq)(const float *x, size_t n);
    void (*sumsq_blocks)(double *h_out, const float *x, size_t n); // h_out in host memory; returns when written
    void (*matmul_forward)(float *out, const float *inp, const float *w, int N, int IC, int OC, int round);
    void (*matmul_backward_input)(float *dinp, const float *dout, const float *w, int N, int IC, int OC, int accumulate,
                                  int round);
    void (*matmul_backward_weight)(float *dw, const float *dout, const float *inp, int N, int IC, int OC);
    // The products of BF16 weights (kernels.h matmul_forward_w16), which every backend has: the
    // step reads the compute copy with them where the layout says so (tier.h lay.w16).
    void (*matmul_forward_w16)(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC, int OC,
                               int round);
    void (*matmul_backward_input_w16)(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N, int IC,
                                      int OC, int accumulate, int round);
    // Forward products of one input (kernels.h matmul_forward_w16_n): NULL where the backend
    // has none (CUDA), and the caller runs matmul_forward_w16 for each.
    void (*matmul_forward_w16_n)(int n, float *const out[], const uint16_t *const w[], const int OC[],
                                 const float *inp, float *scratch, int N, int IC, int round);
    // Weight gradients of one input (kernels.h matmul_backward_weight_n): NULL where the
    // backend has none (CUDA), and the caller runs matmul_backward_weight for each.
    void (*matmul_backward_weight_n)(int n, float *const dw[], const float *const dout[], const int OC[],
                                     const float *inp, int N, int IC);
    // The input gradient of n weights stacked in one array (kernels.h matmul_backward_input_w16_k:
    // q, k and v's): NULL where the backend has none (CUDA), and the caller runs
    // matmul_backward_input_w16 for each.
    int (*matmul_backward_input_w16_k)(float *dinp, int n, const void *const dout[], int a16, const int OC[],
                                       const uint16_t *w, float *scratch, int N, int IC, int accumulate, int round);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps, int round);
    void (*rmsnorm_backward)(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd, int N, int C,
                             int round);
    void (*rope_forward)(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round);
    void (*rope_backward)(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round);
    void (*attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int NH, int NKV, int HS,
                              int round);
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int HS,
                               int round);
    void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n, int round);
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n, int round);
    void (*embedding_forward)(float *out, const int *tokens, const float *wte, int N, int C, int v0, int nv);
    // From BF16 weights (kernels.h embedding_forward_w16), as the two above.
    void (*embedding_forward_w16)(float *out, const int *tokens, const uint16_t *wte, int N, int C, int v0, int nv);
    void (*embedding_backward)(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int nv);
    void (*crossentropy_fold)(float *stats, const float *logits, const int *targets, int N, int Vq, int v0);
    void (*crossentropy_loss)(float *losses, const float *stats, int N);
    void (*crossentropy_backward)(float *dlogits, const float *logits, const float *stats, const int *targets, int N,
                                  int Vq, int v0, float dscale);
    void (*adamw_update)(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g, size_t n, const adamw_params_t *hp);
    // BF16 activations (kernels.h): the norms' outputs and the MLP's intermediates as BF16
    // halves, the same bits with half the bytes. Optional, all or none: NULL where the backend
    // has none, and the step keeps FP32 activations; the layout says where they run (tier.h
    // act16: the CPU's tiles, and the CUDA backend's, cuda_kernels.h). The products return
    // nonzero when declined (what they declined is not written).
    void (*rmsnorm_forward16)(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
    int (*matmul_forward_w16_n_x)(int n, void *const out[], int o16, const uint16_t *const w[], const int OC[],
                                  const void *inp, int a16, int N, int IC, int round);
    int (*matmul_backward_input_x)(void *dinp, int o16, const void *dout, int a16, const uint16_t *w, int N, int IC,
                                   int OC, int accumulate, int round);
    unsigned (*matmul_backward_weight_n_x)(int n, float *const dw[], const void *const dout[], int a16, const int OC[],
                                           const void *inp, int b16, int N, int IC);
    void (*swiglu_forward16)(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n);
    void (*swiglu_backward16)(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                              const uint16_t *up, size_t n);
    // and the attention half's q, k, v, att and their gradients (tier.h att16: where attention
    // runs on the CPU's tiles or a GPU's register-tiled kernels); attention returns nonzero
    // when declined, as the products
    void (*rope_forward16)(uint16_t *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
    void (*rope_backward16)(uint16_t *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
    int (*attention_forward16)(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                               int B, int T, int NH, int NKV, int HS);
    int (*attention_backward16)(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                                const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B,
                                int T, int NH, int NKV, int HS);
    // and the residual x2 (kernels.h residual_rmsnorm_forward16): with the attention half's
    void (*residual_rmsnorm_forward16)(uint16_t *x2, uint16_t *out, float *rstd, const float *x, const float *w, int N,
                                       int C, float eps);
    void (*add_inplace16)(float *x, const uint16_t *y, size_t n, int round);
    void (*rmsnorm_backward16)(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w,
                               const float *rstd, int N, int C, int round);
} backend_ops_t;

struct backend;

typedef enum { BACKEND_H2D = 0, BACKEND_D2H, BACKEND_D2D } backend_copy_dir_t;
// The CUDA backend's three streams (the CPU backend has none: everything runs at once).
typedef enum { BACKEND_STREAM_COMPUTE = 0, BACKEND_STREAM_H2D, BACKEND_STREAM_D2H } backend_stream_t;

// What a device backend does its own way; the CPU backend leaves backend_t.vt NULL and the
// functions below run their host versions. alloc gets the size already checked against
// the budget and rounded to 4 KiB (backend_alloc does the accounting for every backend).
typedef struct {
    void (*free)(struct backend *be);
    int (*alloc)(struct backend *be, size_t sz, const char *what, void **out, char *err, size_t errlen);
    void (*copy)(struct backend *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir, int async);
    void (*memset)(struct backend *be, void *d_dst, int byte, size_t n);
    void (*sync)(struct backend *be);
    int (*register_host)(struct backend *be, void *h, size_t n);
    void (*unregister_host)(struct backend *be, void *h);
    int (*event_create)(struct backend *be, void **ev, char *err, size_t errlen);
    void (*event_destroy)(struct backend *be, void *ev);
    void (*stream_record)(struct backend *be, backend_stream_t s, void *ev);
    void (*stream_wait)(struct backend *be, backend_stream_t s, void *ev);
    void (*stream_sync)(struct backend *be, backend_stream_t s);
    void (*event_sync)(struct backend *be, void *ev);
    void (*copy_enqueue)(struct backend *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir);
    void *(*native_stream)(struct backend *be, backend_stream_t s);
    int (*device_index)(const struct backend *be);
} backend_vt_t;

typedef struct backend {
    const char *name;          // "cpu", "cuda"
    device_kind_t kind;
    const backend_ops_t *ops;
    uint64_t budget;           // arena cap in bytes, 0 = none (CUDA: always set)
    uint64_t used, peak;       // arena bytes in use / high-water mark
    int nallocs, cap_allocs;
    void **allocs;             // CPU backend: the arena's allocations, freed by backend_free
    int threads;               // compute threads (host: OpenMP)
    const backend_vt_t *vt;    // device backends' memory and copies; NULL on the CPU backend
    void *dev;                 // device backends' private state (CUDA: streams, events, arena)
} backend_t;

// Chooses and initializes the backend for cfg->device (auto: a GPU when one is usable and
// the build has the CUDA backend, else the CPU with one notice unless --quiet). Returns 0, or
// with one line in err: -ENODEV (--device cuda without a usable GPU), -EDQUOT (--hbm-budget
// over the GPU's free memory) — the user's to fix — or another -errno (a GPU that fails to
// start). Nothing is left to free on failure.
int backend_init(backend_t *be, const config_t *cfg, char *err, size_t errlen);
void backend_free(backend_t *be); // NULL-safe; releases the whole arena

// What backend_init will choose, without building it (the plan runs first): *kind is
// DEVICE_CPU or DEVICE_CUDA; for CUDA, *hbm_default (may be NULL) gets the budget backend_init
// would take when --hbm-budget is unset (free memory minus the reserve), else 0. Returns 0,
// or -ENODEV with one line like backend_init. Quiet: backend_init says what it chose.
int backend_resolve(const config_t *cfg, device_kind_t *kind, uint64_t *hbm_default, char *err, size_t errlen);
// For the plan before backend_init: when a GPU will run, cfg->device becomes DEVICE_CUDA and
// an unset --hbm-budget its default, said in one notice unless --quiet (backend_init then
// takes that budget). Otherwise cfg is unchanged. Returns 0 or -ENODEV with one line.
int backend_resolve_config(config_t *cfg, char *err, size_t errlen);

// Device memory from the arena, 4 KiB-aligned, zero-filled. Returns 0, or with one line in
// err: -EDQUOT over the budget ("<what>: needs X on the device, --hbm-budget Y with Z in use
// (raise --hbm-budget)"), -ENOMEM when the memory itself runs out.
int backend_alloc(backend_t *be, size_t bytes, const char *what, void **out, char *err, size_t errlen);

// Copies between host and device memory; both complete before returning (the host buffer
// may be reused, the device data is in place, so ops queued later see it). On the CUDA
// backend they run on the h2d / d2h copy stream, ordered by an event after every op queued
// so far (whose inputs or outputs they may overwrite or read).
void backend_copy_h2d(backend_t *be, void *d_dst, const void *h_src, size_t n);
void backend_copy_d2h(backend_t *be, void *h_dst, const void *d_src, size_t n);
// The same, returning at once on the CUDA backend: same stream order, and ops queued later
// wait for the copy, but the host buffer must stay untouched (h2d) / unread (d2h) until
// backend_sync. The CPU backend copies now.
void backend_copy_h2d_async(backend_t *be, void *d_dst, const void *h_src, size_t n);
void backend_copy_d2h_async(backend_t *be, void *h_dst, const void *d_src, size_t n);
// Device to device, and a byte fill of device memory: queued in order with the ops (the
// CUDA compute stream); the CPU backend does them now.
void backend_copy_d2d(backend_t *be, void *d_dst, const void *d_src, size_t n);
void backend_memset(backend_t *be, void *d_dst, int byte, size_t n);
void backend_sync(backend_t *be); // waits for all queued work

// Per-buffer ordering, so that a copy waits only for the work touching its buffers instead
// of every op queued so far (the trainer's parameter slots, gradient slots and the
// optimizer's reads). An event marks the work queued on a stream up to its record; a wait
// makes the work queued on a stream from then on start after it. The CPU backend runs
// everything at once: its events are NULL and these do nothing but the copies.
int backend_event_create(backend_t *be, void **ev, char *err, size_t errlen); // 0 or -errno with one line
void backend_event_destroy(backend_t *be, void *ev);                          // NULL-safe
void backend_event_record(backend_t *be, void *ev); // on the compute stream: the ops queued so far
void backend_stream_record(backend_t *be, backend_stream_t s, void *ev);
void backend_stream_wait(backend_t *be, backend_stream_t s, void *ev); // NULL: nothing to wait for
void backend_stream_sync(backend_t *be, backend_stream_t s);           // the host waits for s
void backend_event_sync(backend_t *be, void *ev); // the host waits for ev's last record (never recorded, NULL: none)
// The device backend's own stream handle (CUDA: the cudaStream_t), for collectives queued in
// order with the ops (comm.h's device engine); NULL on the CPU backend.
void *backend_native_stream(backend_t *be, backend_stream_t s);
// The device the backend runs on (CUDA: its ordinal); -1 on the CPU backend.
int backend_device_index(const backend_t *be);
// A copy queued on the h2d / d2h stream (dir), ordered only by that stream's own order and
// waits: returns at once; the host buffer stays untouched (h2d) / unread (d2h) until the
// stream is synced, and ops that use the device side must wait for an event recorded after
// it. The CPU backend copies now.
void backend_copy_enqueue(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir);
// A copy (h2d or d2h) ordered after ev only (NULL: after nothing) instead of after every op
// queued so far; complete on return.
void backend_copy_after(backend_t *be, void *dst, const void *src, size_t n, backend_copy_dir_t dir, void *ev);

// Page-locks host memory for fast, truly asynchronous copies (cudaHostRegister); a no-op
// returning 0 on the CPU backend. Returns 0 or -errno (with one notice naming the CUDA
// error). Unregister before the memory is freed.
int backend_register_host(backend_t *be, void *h, size_t n);
void backend_unregister_host(backend_t *be, void *h);
// The same shaped as hostmem_pin_fn (arg = the backend_t *): hostmem's pin hook.
int backend_host_pin(void *addr, size_t len, void *be);
int backend_host_unpin(void *addr, size_t len, void *be);

// Builds the CUDA backend on device 0: one cudaMalloc of --hbm-budget (default: free
// memory minus a reserve of max(1 GiB, 5% of the device), said in one notice unless
// --quiet) carved by backend_alloc, three streams (compute, h2d, d2h), the cuBLASLt
// handle and its workspace, the kernels' scratch sized for cfg's model shape
// (cuda_kernels_scratch_bytes), and the op table of kernels/cuda. cfg->precision fp32
// selects the FP32 GEMMs. Returns 0, or -errno with one line in err (no GPU, budget larger
// than the free memory, a CUDA error), everything released. One CUDA backend per process.
// Builds without CUDA answer -ENODEV ("this build has no CUDA support").
int backend_cuda_init(backend_t *be, const config_t *cfg, char *err, size_t errlen);

// Device bytes the CUDA backend takes for itself on top of the trainer's allocations (the
// cuBLASLt workspace and the kernels' scratch for cfg's shapes): what the plan adds on a
// GPU. 0 in builds without CUDA.
uint64_t backend_cuda_overhead(const config_t *cfg);

// ---------------------------------------------------------------- shared by the backends
// OpenBLAS picks its kernel family as it loads, before main. When its pick lacks the vector
// units this CPU has (kernels.h, matmul_blas_core_better), run this binary again with
// OPENBLAS_CORETYPE naming the right family (backend_blas_text says so). Call first thing in
// main, with main's argv; returns (doing nothing) when OPENBLAS_CORETYPE is already set (the
// user's choice, or the second run), when the pick is fine, or when the exec fails.
void backend_blas_reexec(char **argv);
// The variable the first run leaves for the second: OpenBLAS's own pick ("" when the exec failed).
#define BACKEND_BLAS_PICKED_ENV "TT_OPENBLAS_PICKED"
// OpenBLAS's own pick when backend_blas_reexec replaced it, else NULL.
const char *backend_blas_replaced(void);
// What runs the products: on a CPU with FMA our kernels ("GEMMs on AVX-512F FMA kernels; "),
// then which OpenBLAS family is loaded (the products' on a CPU without FMA, bench gemm's peer
// everywhere) and why: "OpenBLAS SkylakeX, not its own pick Prescott", "OpenBLAS Haswell, as
// OPENBLAS_CORETYPE says", "OpenBLAS Haswell", or, when the pick is narrower than the CPU and
// stayed, what would be wider; for the tier report, bench calibrate and bench gemm. Returns buf.
char *backend_blas_text(char *buf, size_t len);
// The host threads a run of cfg takes: --threads, else $OMP_NUM_THREADS, else every core.
int backend_host_threads(const config_t *cfg);
// be->threads from cfg (backend_host_threads), OpenMP set to it and OpenBLAS to one thread
// (kernels/cpu/matmul.c's determinism).
void backend_setup_host_threads(backend_t *be, const config_t *cfg);
// On a worker thread beside the compute thread (the update worker), how many threads its
// OpenMP regions take: on the CPU backend it alone, since the compute thread's team has the
// cores, and a team of its own would put more threads than cores into libgomp's pools, which
// then sleep in the kernel at every barrier instead of spinning, the compute thread's too; on a
// device backend, whose compute thread mostly queues work, be->threads. For elementwise work
// (AdamW) the bits do not depend on the thread count.
void backend_worker_threads(const backend_t *be);
