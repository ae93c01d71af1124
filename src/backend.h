// backend.h — the device interface (DESIGN §6): device memory, copies, events, and the op
// table of kernels. backend_cpu.c implements it over host RAM with OpenBLAS/OpenMP; the
// CUDA backend implements the same with cuBLASLt and streams.
//
// Device memory is one arena capped by --hbm-budget: everything is sized and allocated at
// init, nothing in the step loop. Going over the budget is an error naming the bytes
// wanted, the budget and what is already in use. On the CPU backend the arena is ordinary
// memory with the same cap, so every budget decision also runs on machines without a GPU.
// Pointers given to ops are device pointers.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "kernels.h"

// The op table: one entry per kernel, same contract as kernels/kernels.h.
typedef struct {
    void (*bf16_to_f32_n)(float *dst, const uint16_t *src, size_t n);
    void (*bf16_round_n)(float *x, size_t n);
    void (*add_inplace)(float *x, const float *y, size_t n);
    double (*sumsq)(const float *x, size_t n);
    void (*matmul_forward)(float *out, const float *inp, const float *w, int N, int IC, int OC);
    void (*matmul_backward_input)(float *dinp, const float *dout, const float *w, int N, int IC, int OC, int accumulate);
    void (*matmul_backward_weight)(float *dw, const float *dout, const float *inp, int N, int IC, int OC);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
    void (*rmsnorm_backward)(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd, int N, int C);
    void (*rope_forward)(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
    void (*rope_backward)(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
    void (*attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int NH, int NKV, int HS);
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, const float *out, const float *lse, int B, int T, int NH, int NKV, int HS);
    void (*swiglu_forward)(float *out, const float *gate, const float *up, size_t n);
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
    void (*embedding_forward)(float *out, const int *tokens, const float *wte, int N, int C);
    void (*embedding_backward)(float *dwte, const float *dout, const int *tokens, int N, int C);
    void (*crossentropy_forward_backward)(float *dlogits, float *losses, const float *logits, const int *targets, int N, int V, float dscale);
    void (*crossentropy_forward)(float *losses, const float *logits, const int *targets, int N, int V);
    void (*adamw_update)(float *master, float *m, float *v, uint16_t *p16, float *p32, const float *g, size_t n, const adamw_params_t *hp);
} backend_ops_t;

typedef struct backend {
    const char *name;          // "cpu"
    device_kind_t kind;
    const backend_ops_t *ops;
    uint64_t budget;           // arena cap in bytes, 0 = none
    uint64_t used, peak;       // arena bytes in use / high-water mark
    int nallocs, cap_allocs;
    void **allocs;             // CPU backend: the arena's allocations, freed by backend_free
    int threads;               // compute threads
} backend_t;

// Chooses and initializes the backend for cfg->device (auto: a GPU when one is usable and
// the build has the CUDA backend, else the CPU with one notice). Bad choices (--device cuda
// without a usable GPU) print one line and exit 2: this runs before any work.
void backend_init(backend_t *be, const config_t *cfg);
void backend_free(backend_t *be); // NULL-safe; releases the whole arena

// Device memory from the arena, 4 KiB-aligned, zero-filled. Returns 0, or -ENOMEM with
// one line in err: "<what>: needs X, --hbm-budget Y with Z in use (raise --hbm-budget ...)".
int backend_alloc(backend_t *be, size_t bytes, const char *what, void **out, char *err, size_t errlen);

// Copies between host and device memory. On the CPU backend they complete before returning;
// the CUDA backend queues them on its copy streams and returns an event to wait on.
void backend_copy_h2d(backend_t *be, void *d_dst, const void *h_src, size_t n);
void backend_copy_d2h(backend_t *be, void *h_dst, const void *d_src, size_t n);
void backend_sync(backend_t *be); // waits for all queued work
