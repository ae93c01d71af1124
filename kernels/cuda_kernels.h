// cuda_kernels.h — the CUDA twins of kernels/kernels.h (kernels/cuda/*.cu), callable from C.
//
// Every op has the exact signature and contract of its CPU twin (same name with a cuda_
// prefix), takes device pointers (FP32 tensors in device memory; tokens and targets as
// device int arrays; adamw_params_t in host memory), and is queued on the current compute
// stream (cuda_kernels_set_stream): ops return before the GPU has run them, in stream order.
// The exceptions are cuda_sumsq, which returns a double, and cuda_sumsq_blocks, which writes
// host memory: both wait for their results.
//
// Numerics, op by op, against the CPU twin (tests/gpu/test_cuda_kernels.c holds them to it):
//  - bit-identical: bf16 conversions, add_inplace (and add_inplace16), rope, embedding
//    forward (FP32 or BF16 table) and backward (one thread per column adds the rows in order,
//    as the CPU does), sumsq (the CPU's chunks and lanes in double, chunk sums added in order
//    by one thread) and AdamW (the documented IEEE sequence with __fmaf_rn/__fdiv_rn/
//    __fsqrt_rn spelled out; the .cu files are built with --fmad=false, so nothing else is
//    fused either);
//  - FP32 rounding level: rmsnorm (and residual_rmsnorm_forward16 and rmsnorm_backward16,
//    which have the CUDA FP32 kernels' bits on the same values), swiglu, attention,
//    cross-entropy in its quantum form (other summation orders and CUDA's expf/logf instead
//    of the CPU's exp8); every reduction has a fixed order (no float atomics), so results are
//    the same run to run;
//  - matmul on cuBLASLt: BF16 mode converts the FP32 inputs to BF16 (round to nearest
//    even; a BF16 weight is copied as it is) into the scratch and multiplies BF16 x BF16
//    with FP32 accumulation (CUBLAS_COMPUTE_32F) into FP32 outputs — exact conversion when
//    the caller has already rounded them, as the trainer does in bf16 mode. FP32 mode
//    (cuda_kernels_set_fp32_matmul) multiplies the FP32 inputs directly, CUBLAS_COMPUTE_32F
//    without TF32. In BF16 mode the rows (N) are cut into chunks whose size depends only on
//    the shape, so the bits depend on the shape and the device, never on the budget or the
//    scratch size.
//
// Errors: a failed launch or library call is a programmer/setup error: one line naming the
// call, file and line on stderr, then exit(1) (llm.c's cudaCheck). Only cuda_kernels_init
// reports errors by return value.
//
// State: one per process (a CUDA backend owns it): the stream, the cuBLASLt handle, the
// scratch and the workspace. Not thread-safe: one thread queues ops (the compute thread).
// Does not allocate device memory: the caller hands in the scratch and the cuBLASLt
// workspace (the CUDA backend carves them from its arena). Does not know about shards or tiers.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "kernels.h" // adamw_params_t

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------- context
// cuBLASLt workspace size the backend carves for the matmuls: fixed, so that cuBLASLt's
// heuristic picks the same algorithm whatever the budget (32 MiB: NVIDIA's recommendation
// for Hopper).
#define CUDA_LT_WORKSPACE_BYTES ((size_t)32 << 20)

// Bytes of device scratch the ops need when no op sees more than max_rows rows (N = B·T),
// no row is wider than max_dim (C, F, V, the fused qkv width, ...) and no matmul weight has
// more than max_weight elements (OC·IC). Covers the BF16 matmul staging, rmsnorm's dw
// partial sums and sumsq's chunk sums. fp32_matmul: no BF16 staging needed.
size_t cuda_kernels_scratch_bytes(int max_rows, int max_dim, size_t max_weight, int fp32_matmul);

// Creates the cuBLASLt handle and loads every kernel now (so CUDA's lazy module loading
// allocates nothing later), on the current device. fp32_matmul selects the FP32 GEMM path.
// Returns 0, or -1 with one line in err.
int cuda_kernels_init(int fp32_matmul, char *err, size_t errlen);
// The device scratch (cuda_kernels_scratch_bytes) and cuBLASLt workspace
// (CUDA_LT_WORKSPACE_BYTES), both 256-byte aligned; the ops check their needs against them.
void cuda_kernels_set_workspace(void *d_scratch, size_t scratch_bytes, void *d_lt_ws, size_t lt_ws_bytes);
void cuda_kernels_free(void); // NULL-safe in spirit: a second call does nothing

// The compute stream (a cudaStream_t; NULL = the legacy default stream) the ops queue on.
void cuda_kernels_set_stream(void *stream);
void *cuda_kernels_stream(void);
void cuda_kernels_set_fp32_matmul(int on);

// Test hooks (tests/gpu only; 0 = the default): the BF16 matmul row-chunk budget in
// elements (small values force many chunks), sumsq's chunks per round, forcing the
// fallback GEMM kernel, and which attention kernels run (CUDA_ATT_AUTO: the register-tiled
// tensor-core ones, else the WMMA ones, where their tiles fit; CUDA_ATT_WMMA: the WMMA
// tensor-core ones; CUDA_ATT_FP32: the FP32 tiled ones; CUDA_ATT_PLAIN: the untiled ones).
enum { CUDA_ATT_AUTO = 0, CUDA_ATT_PLAIN = 1, CUDA_ATT_FP32 = 2, CUDA_ATT_WMMA = 3 };
void cuda_kernels_set_test_limits(size_t matmul_chunk_elems, size_t sumsq_round_chunks,
                                  int force_gemm_fallback, int attention_path);

// ---------------------------------------------------------------- ops (contracts: kernels.h)
void cuda_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void cuda_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);
void cuda_bf16_round_n(float *x, size_t n);
void cuda_add_inplace(float *x, const float *y, size_t n);
double cuda_sumsq(const float *x, size_t n); // waits for the compute stream
void cuda_sumsq_blocks(double *h_out, const float *x, size_t n); // h_out: host memory; waits
void cuda_matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC);
void cuda_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IC, int OC, int accumulate);
// The same two on BF16 weights (kernels.h matmul_forward_w16): BF16 mode copies the weight
// into the kernels' scratch instead of narrowing an FP32 one, and leaves scratch alone (NULL
// is fine: the step's case); FP32 mode widens it into scratch (OC·IC floats) first. The bits
// of the FP32 ops on the widened weight.
void cuda_matmul_forward_w16(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC, int OC);
void cuda_matmul_backward_input_w16(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N, int IC,
                                    int OC, int accumulate);
void cuda_matmul_backward_weight(float *dw, const float *dout, const float *inp, int N, int IC, int OC);
void cuda_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
void cuda_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                           const float *rstd, int N, int C);
void cuda_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
void cuda_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
void cuda_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                            int B, int T, int NH, int NKV, int HS);
void cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                             const float *k, const float *v, const float *out, const float *lse,
                             int B, int T, int NH, int NKV, int HS);
void cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n);
void cuda_embedding_forward(float *out, const int *tokens, const float *wte, int N, int C, int v0, int nv);
void cuda_embedding_forward_w16(float *out, const int *tokens, const uint16_t *wte, int N, int C, int v0, int nv);
void cuda_embedding_backward(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int nv);
void cuda_crossentropy_fold(float *stats, const float *logits, const int *targets, int N, int Vq, int v0);
void cuda_crossentropy_loss(float *losses, const float *stats, int N);
void cuda_crossentropy_backward(float *dlogits, const float *logits, const float *stats, const int *targets, int N,
                                int Vq, int v0, float dscale);
void cuda_adamw_update(float *master, float *m, float *v, uint16_t *p16, float *p32,
                       const float *g, size_t n, const adamw_params_t *hp);

// ---------------------------------------------------------------- BF16 activations
// kernels.h's "BF16 activations", the norms' outputs and the MLP's intermediates (the CUDA
// backend's act16: tier.h), with kernels.h's signatures, round flags included. Each is the
// FP32 op above on the widened halves, its results rounded and narrowed: the same bits as the
// FP32 ops on the same values, rounded. The products stage the halves where they stage
// narrowed FP32 operands (or read them in place at the same alignment) and write a BF16
// output's chunk as FP32 into the scratch before narrowing it, so their GEMMs, and so the
// algorithms cuBLASLt picks, are the FP32 form's. They decline (1, nothing written) in FP32
// mode, and for a BF16 output without round or accumulating. The attention half's q, k, v,
// att and their gradients as halves (the backend's att16) where the register-tiled attention
// kernels run them: an even head size up to CUDA_ATT16_MAX_HS and NH a multiple of NKV
// (cuda_attention_act16: pure, for the plan); attention declines (1, nothing written) elsewhere
// and where the device's shared memory does not hold those kernels' tiles.
#define CUDA_ATT16_MAX_HS 128
static inline int cuda_attention_act16(int NH, int NKV, int HS) {
    return HS >= 2 && HS % 2 == 0 && HS <= CUDA_ATT16_MAX_HS && NH > 0 && NKV > 0 && NH % NKV == 0;
}
void cuda_rmsnorm_forward16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
// The residual x2 as halves (kernels.h residual_rmsnorm_forward16): x2 ← round(x2 + x) with
// add_inplace's add, then rmsnorm_forward16's out and rstd of it, one kernel; the bits of
// add_inplace, bf16_round_n and rmsnorm_forward16 on an FP32 copy. add_inplace16 and
// rmsnorm_backward16 are add_inplace's and rmsnorm_backward's kernels with y or x widened as
// read: their bits on the widened halves. No round flag: the backend rounds after them.
void cuda_residual_rmsnorm_forward16(uint16_t *x2, uint16_t *out, float *rstd, const float *x, const float *w, int N,
                                     int C, float eps);
void cuda_add_inplace16(float *x, const uint16_t *y, size_t n);
void cuda_rmsnorm_backward16(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w,
                             const float *rstd, int N, int C);
int cuda_matmul_forward_w16_n_x(int n, void *const out[], int o16, const uint16_t *const w[], const int OC[],
                                const void *inp, int a16, int N, int IC, int round);
int cuda_matmul_backward_input_x(void *dinp, int o16, const void *dout, int a16, const uint16_t *w, int N, int IC,
                                 int OC, int accumulate, int round);
unsigned cuda_matmul_backward_weight_n_x(int n, float *const dw[], const void *const dout[], int a16, const int OC[],
                                         const void *inp, int b16, int N, int IC);
void cuda_swiglu_forward16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n);
void cuda_swiglu_backward16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                            const uint16_t *up, size_t n);
void cuda_rope_forward16(uint16_t *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
void cuda_rope_backward16(uint16_t *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
int cuda_attention_forward16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B,
                             int T, int NH, int NKV, int HS);
int cuda_attention_backward16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                              const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B, int T,
                              int NH, int NKV, int HS);

#ifdef __cplusplus
}
#endif
