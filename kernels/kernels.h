// kernels.h — the numeric ops of one transformer step, CPU versions (kernels/cpu/*.c).
// Every op here gets a CUDA twin (kernels/cuda/*.cu) with the same contract.
//
// Conventions
//  - Tensors are row-major float32 arrays; the shape is in the comment next to each.
//  - Weights follow PyTorch nn.Linear: w (OC, IC), y = x · wᵀ.
//  - BF16 mode: activations are stored rounded to BF16 values and BF16 weights are converted
//    to float before the op; the ops compute in FP32. The ops that write activations take
//    `round`: nonzero rounds their activation outputs as bf16_round_n would, in the op's own
//    pass over them (the same bits as the op then bf16_round_n; 0: FP32 as computed).
//  - "=" outputs are overwritten; "+=" outputs accumulate (parameter gradients always
//    accumulate in FP32, so micro-batches and tied weights sum into one buffer).
//  - OpenMP only over independent outputs: no two threads write one element, and every
//    reduction has a fixed order, so results do not depend on the thread count.
//  - No op allocates memory.
// Does not know about shards, tiers or files.
#pragma once
#include <stddef.h>
#include <stdint.h>

// ---------------------------------------------------------------- vector paths
// The widest vector path attention, SwiGLU and matmul may take, for tests that check every
// path gives the same bits: 3 (the default: whatever the CPU has) as 2, plus matmul on AMX
// tiles where the CPU has AMX-BF16 and the operands are BF16 values (other bits: gemm.h),
// 2 AVX-512F, 1 AVX2 with FMA, 0 no FMA (attention's tile products on fmaf, matmul on
// OpenBLAS). The loader's pick of a
// function's AVX2 or baseline clone stays the CPU's; AdamW's paths are separate functions its
// tests call.
// Set it between calls, never while an op runs.
void kernels_limit_simd(int level);

// ---------------------------------------------------------------- BF16
// Round-to-nearest-even; NaN stays NaN (quiet), ±Inf stays ±Inf.
uint16_t bf16_from_f32(float x);
float bf16_to_f32(uint16_t h);
void bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);
void bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void bf16_round_n(float *x, size_t n); // x[i] = bf16_to_f32(bf16_from_f32(x[i]))

// ---------------------------------------------------------------- elementwise, reductions
void add_inplace(float *x, const float *y, size_t n, int round); // x += y
// Σ x[i]², in double, over fixed chunks of 4096 summed in chunk order: the same bits for
// any thread count.
double sumsq(const float *x, size_t n);
// out[b] = the sum of chunk b of x[0, n) as sumsq takes it (b < ⌈n / 4096⌉): what
// gradnorm.h adds up exactly, so a device can send 8 bytes for every 16 KiB of gradients.
void sumsq_blocks(double *out, const float *x, size_t n);

// ---------------------------------------------------------------- matmul
// On a CPU with FMA: our own kernels (kernels/cpu/gemm.h), every output element one fmaf chain
// over the inner dimension in order, so the bits follow the operands alone (not the threads,
// the vector width or how the rows are split into calls); else OpenBLAS sgemm in tiles sized
// by the output's shape.
// out (N, OC) = inp (N, IC) · w (OC, IC)ᵀ
void matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC, int round);
// dinp (N, IC) = dout (N, OC) · w (OC, IC)        when accumulate == 0
// dinp (N, IC) += dout · w                         when accumulate == 1
// (round: the sum, after the accumulation)
void matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IC, int OC, int accumulate,
                           int round);
// The two products of w with w given as BF16 values (bf16 mode's compute copy): the bits of
// matmul_forward / matmul_backward_input on w widened to FP32 (bf16_to_f32_n). With FMA the
// widening happens in the packing of w, so it is never stored and scratch is not touched (it
// may be NULL where matmul_kernel_name() is not: the step's case); without, w is widened into
// scratch (OC × IC floats, the caller's) and the FP32 product runs on it.
void matmul_forward_w16(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC, int OC,
                        int round);
void matmul_backward_input_w16(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N, int IC,
                               int OC, int accumulate, int round);
// n forward products of one input (q, k and v of ln1; gate and up of ln2): out[i] (N, OC[i]) =
// inp · w[i]ᵀ, each with the bits of its own matmul_forward_w16. On AMX tiles the n products
// share one packing of inp; else (and where inp is too large for one) they run one after
// another. scratch as matmul_forward_w16's, for the largest w[i].
void matmul_forward_w16_n(int n, float *const out[], const uint16_t *const w[], const int OC[], const float *inp,
                          float *scratch, int N, int IC, int round);
// dinp (N, IC) (+)= Σ_i dout[i] (N, OC[i]) · w_i for n weights stacked in w (the rows of w_0,
// then of w_1, ...: Σ OC[i] rows of IC), with the bits of n matmul_backward_input_w16 calls in
// order (the first with accumulate, the others adding, round at the last), which it runs
// where the AMX tiles do not take them as one product (every OC[i] but the last a multiple of
// 32, Σ OC[i] and IC up to 1024, N up to 1024): q, k and v's input gradient, whose weights
// lie one after another in the block's shard. scratch as matmul_backward_input_w16's. The
// douts may be BF16 halves (a16: att16's dq, dk and dv; where the BF16 activations' products
// below run): returns 0 when done, 1 when declined (a16 without FMA; nothing written).
int matmul_backward_input_w16_k(float *dinp, int n, const void *const dout[], int a16, const int OC[], const uint16_t *w,
                                float *scratch, int N, int IC, int accumulate, int round);
// dw (OC, IC) += dout (N, OC)ᵀ · inp (N, IC)
void matmul_backward_weight(float *dw, const float *dout, const float *inp, int N, int IC, int OC);
// n weight gradients of one input (q, k and v of ln1; gate and up of ln2): dw[i] (OC[i], IC) +=
// dout[i] (N, OC[i])ᵀ · inp, each with the bits of its own matmul_backward_weight. With FMA the
// n products share one packing of inp; without (or n > 4), they run one after another.
void matmul_backward_weight_n(int n, float *const dw[], const float *const dout[], const int OC[], const float *inp,
                              int N, int IC);
// "AVX-512F FMA kernels" or "AVX2 FMA kernels" where ours run the products (after
// kernels_limit_simd), "AMX BF16 tiles, else AVX-512F FMA kernels" where products of BF16
// operands run on AMX (matmul_amx), NULL where OpenBLAS does.
const char *matmul_kernel_name(void);
// 1 where products of BF16 operands run on AMX tiles (kernels_limit_simd(3), the default, on
// a CPU with AMX-BF16 whose kernel grants the tile state), else 0.
int matmul_amx(void);
// The kernel family OpenBLAS runs the products with ("Haswell", "Cooperlake", ...): its own
// pick for this CPU as it loads, or the one OPENBLAS_CORETYPE names.
const char *matmul_blas_core(void);
// The family to name in OPENBLAS_CORETYPE when OpenBLAS's own pick lacks the vector units this
// CPU has ("SkylakeX" with AVX-512, "Haswell" with AVX2+FMA), or NULL when its pick is fine.
// OpenBLAS picks by CPU model: 0.3.21 takes a model newer than it knows (seen: an AVX-512 Xeon,
// family 6 model 207) for "Prescott", SSE3 kernels at a third of the speed.
const char *matmul_blas_core_better(void);

// ---------------------------------------------------------------- BF16 activations
// bf16 mode's activations that only products and these ops read — the norms' outputs ln1
// and ln2, the MLP's gate, up and h, and their gradients dgate, dup and dh — stored as BF16
// halves instead of FP32 words holding BF16 values: half the bytes each op writes and reads,
// the same numbers, and the bits of the FP32 ops above on them (each output is the FP32 op's,
// rounded, then narrowed: exact). The products run where the FP32 ones do, on AMX tiles or
// else the FMA kernels (gemm.h gemm_fma_x; never OpenBLAS): each returns 0, or 1 when
// declined with nothing written (no FMA, kernels_limit_simd(0); on AMX tiles, an FP32 operand
// that is not BF16 values); the caller asks matmul_act16 first, and where it says 0 keeps FP32
// activations and the ops above.
// 1 where the products below run for a model of width C (a BF16 output's inner dimension is
// C, and no partial sum may pass through a BF16 output: any C on the FMA kernels, which take a
// deep one in pieces through an FP32 buffer; C ≤ 1024, one chunk, where AMX tiles run them).
int matmul_act16(int C);
// rmsnorm_forward's with round, out (N, C) as BF16 (ln1, ln2; on any CPU)
void rmsnorm_forward16(uint16_t *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
// out[i] (N, OC[i]) = inp · w[i]ᵀ: matmul_forward_w16_n's, inp as BF16 halves (a16), out as
// BF16 (o16: then round) (q, k, v of ln1; gate, up of ln2; the down projection of h, n = 1)
int matmul_forward_w16_n_x(int n, void *const out[], int o16, const uint16_t *const w[], const int OC[],
                           const void *inp, int a16, int N, int IC, int round);
// dinp (N, IC) (+)= dout (N, OC) · w: matmul_backward_input_w16's, dout as BF16 halves (a16),
// dinp as BF16 (o16: then "=" and round) (dh; ln2's gradient from dgate and dup)
int matmul_backward_input_x(void *dinp, int o16, const void *dout, int a16, const uint16_t *w, int N, int IC, int OC,
                            int accumulate, int round);
// dw[i] (OC[i], IC) += dout[i] (N, OC[i])ᵀ · inp: matmul_backward_weight_n's, dout as BF16
// halves (a16), inp as BF16 halves (b16) (q, k, v of ln1; gate, up of ln2; the down
// projection's of h, n = 1). Returns the mask of the products declined (bit i: dw[i] not
// written; FP32 douts decline one by one), 0 when all are done.
unsigned matmul_backward_weight_n_x(int n, float *const dw[], const void *const dout[], int a16, const int OC[],
                                    const void *inp, int b16, int N, int IC);
// swiglu_forward / swiglu_backward with round on BF16 operands and outputs (on any CPU);
// dgate may be gate and dup may be up, as there.
void swiglu_forward16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n);
void swiglu_backward16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate, const uint16_t *up,
                       size_t n);
// The attention half's activations q, k, v and att, and their gradients datt, dq, dk and dv,
// as BF16 halves: 1 for a model of NH query heads, NKV kv heads, head size HS where the two ops
// below run (HS up to 256, the tiled path's; NH a multiple of NKV; on any CPU: AMX tiles
// where attention_forward would take them, else the FMA tasks on widened rows).
int attention_act16(int NH, int NKV, int HS);
// attention_forward's with round, q, k, v and out as BF16 halves, the same bits; 1 when
// declined (nothing written: attention_act16 says 0, or no memory for the packed keys or the
// threads' widened rows).
int attention_forward16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v, int B, int T,
                        int NH, int NKV, int HS);
// attention_backward's with round, every operand and output as BF16 halves, the same bits; 1
// when declined, as above.
int attention_backward16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout, const uint16_t *q,
                         const uint16_t *k, const uint16_t *v, const uint16_t *out, const float *lse, int B, int T, int NH,
                         int NKV, int HS);
// The bytes the attention ops allocate for a shape at `threads` threads and hold from then on
// (their buffers are the process's, grown as needed, never shrunk: one op runs at a time): AMX's
// packed K and V where the tiles take the head size (tiles: the CPU's products may take them,
// --cpu-gemm auto), else the threads' widened rows of the BF16 ops (h16); 0 where neither runs.
// attention_reserve allocates them now, as the ops would at their first call at `threads`
// threads (a run's start: a shortage is then its start-up error, not a step's); 1: no memory.
// attention_held_bytes: what the ops hold now; attention_release frees it.
size_t attention_workspace_bytes(int B, int T, int NH, int NKV, int HS, int h16, int tiles, int threads);
int attention_reserve(int B, int T, int NH, int NKV, int HS, int h16, int tiles, int threads);
size_t attention_held_bytes(void);
void attention_release(void);
// rope_forward's and rope_backward's with round on BF16 halves, in place (q and k, dq and dk;
// on any CPU).
void rope_forward16(uint16_t *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
void rope_backward16(uint16_t *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS);
// The residual x2 = x + att·Woᵀ as BF16 halves too (with the attention half's: its values are
// rounded, and with q, k, v and att as halves nothing holds FP32 words in its buffer), read by
// the three ops below in place of add_inplace, rmsnorm_forward16 and rmsnorm_backward, with
// their bits. residual_rmsnorm_forward16: x2 (N, C) holds the projection's rounded halves and
// becomes x2 + x, rounded (add_inplace's with round), then out and rstd are rmsnorm_forward16's
// of it: the MLP's norm in the same pass. add_inplace16: add_inplace's, y as halves (the MLP's
// residual add). rmsnorm_backward16: rmsnorm_backward's, x as halves (the MLP's norm).
void residual_rmsnorm_forward16(uint16_t *x2, uint16_t *out, float *rstd, const float *x, const float *w, int N, int C,
                                float eps);
void add_inplace16(float *x, const uint16_t *y, size_t n, int round);
void rmsnorm_backward16(float *dx, float *dw, const float *dout, const uint16_t *x, const float *w, const float *rstd,
                        int N, int C, int round);

// ---------------------------------------------------------------- RMSNorm
// out (N, C) = x / sqrt(mean(x²) + eps) * w (C);  rstd (N) = 1 / sqrt(mean(x²) + eps)
// (round: out; rstd stays FP32)
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps, int round);
// dx (N, C) += ∂L/∂x;  dw (C) += ∂L/∂w  (dw summed over rows in row order; round: dx, after
// the accumulation; dw stays FP32)
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C, int round);

// ---------------------------------------------------------------- RoPE (Hugging Face rotate_half)
// Table for positions 0..T-1: cos/sin (T, HS/2), angle = t · theta^(-2i/HS), computed in double.
void rope_table(float *cos_t, float *sin_t, int T, int HS, double theta);
// The same from given inverse frequencies (HS/2): angle = t · inv_freq[i] (a scaled RoPE's,
// model.h model_rope_freqs; theta^(-2i/HS) gives rope_table's bits).
void rope_table_freq(float *cos_t, float *sin_t, int T, int HS, const double *inv_freq);
// In place on x (B, T, NX, HS), NX heads, position of row t is t. For i < HS/2:
//   x'[i] = x[i]·cos − x[i+HS/2]·sin;  x'[i+HS/2] = x[i+HS/2]·cos + x[i]·sin
void rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round);
// In place on dx (B, T, NX, HS): the transpose (inverse) rotation.
void rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int round);

// ---------------------------------------------------------------- attention (causal, GQA)
// q (B, T, NH, HS); k, v (B, T, NKV, HS); query head h reads kv head h / (NH/NKV).
// out (B, T, NH, HS) = softmax(q·kᵀ/sqrt(HS), causal) · v;  lse (B, NH, T) = log-sum-exp of
// each row's scaled scores. Online softmax per query row: no (T, T) buffer anywhere.
// (round: out; lse stays FP32)
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       int B, int T, int NH, int NKV, int HS, int round);
// dq (B, T, NH, HS) =, dk and dv (B, T, NKV, HS) =; probabilities recomputed from lse.
// dq is computed per query row, dk/dv per key row (each loops over its queries and the
// query heads of its group), so no two threads write one element; with enough kv heads per
// thread, one task per kv head writes its dk/dv and its query heads' dq (the same bits).
// (round: dq, dk and dv)
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                        const float *k, const float *v, const float *out, const float *lse,
                        int B, int T, int NH, int NKV, int HS, int round);

// ---------------------------------------------------------------- SwiGLU
// out (n) = silu(gate) · up,  silu(x) = x / (1 + exp(−x))
void swiglu_forward(float *out, const float *gate, const float *up, size_t n, int round);
// dgate (n) =, dup (n) =; dgate may be gate and dup may be up (in place: each element is read
// before it is written)
void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n,
                     int round);

// ---------------------------------------------------------------- embedding
// A vocabulary chunk: wte (nv, C) holds rows [v0, v0 + nv) of the (V, C) table.
// out (N, C): row n = wte[tokens[n] − v0] where tokens[n] lies in the chunk; other rows untouched.
void embedding_forward(float *out, const int *tokens, const float *wte, int N, int C, int v0, int nv);
// The same from BF16 values (wte's elements as the upper halves of FP32 ones): each row read
// is widened (exact), so no pass widens the chunk, and out holds what embedding_forward gives
// on the widened table.
void embedding_forward_w16(float *out, const int *tokens, const uint16_t *wte, int N, int C, int v0, int nv);
// dwte (nv, C) += scatter of dout (N, C) by the tokens in the chunk; parallel over columns,
// rows in order (so a chunk's rows get the bits the whole table's would).
void embedding_backward(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int nv);

// ---------------------------------------------------------------- fused softmax + cross-entropy
// losses (N) = −log softmax(logits[n])[targets[n]], in FP32 with max subtraction.
// dlogits (N, V) = (softmax(logits[n]) − onehot(targets[n])) · dscale. dlogits may alias logits.
// The single-pass form: the reference the quantum form below equals when V ≤ CE_QUANTUM.
void crossentropy_forward_backward(float *dlogits, float *losses, const float *logits,
                                   const int *targets, int N, int V, float dscale);
// Forward only: losses (N).
void crossentropy_forward(float *losses, const float *logits, const int *targets, int N, int V);

// The quantum form, for a vocabulary too large for one (N, V) buffer: the step computes the
// logits a quantum of CE_QUANTUM vocabulary columns at a time (the last may be narrower), so
// its bits depend on CE_QUANTUM alone, never on how the vocabulary is cut into shards.
// stats (3, N): per row the running max M, Σ exp(x − M) S, and the target's logit.
//  - crossentropy_fold: logits (N, Vq) are columns [v0, v0 + Vq) (v0 a multiple of
//    CE_QUANTUM, Vq ≤ CE_QUANTUM); v0 == 0 starts the rows' stats. The quantum's max m and
//    sum s (ce_row's lane order) fold in: m > M: S = S·e^(M−m) + s, M = m; else S += s·e^(m−M).
//    Quanta must come in ascending order.
//  - crossentropy_loss: losses (N) = log S − (x_target − M), after the last quantum (a target
//    no quantum held leaves the target's logit NaN, and so the loss).
//  - crossentropy_backward: dlogits (N, Vq) = (e^(x − M) / S − onehot)·dscale for one
//    quantum, any order; dlogits may alias logits.
// With V ≤ CE_QUANTUM (one quantum) the bits are crossentropy_forward_backward's.
#define CE_QUANTUM 2048
void crossentropy_fold(float *stats, const float *logits, const int *targets, int N, int Vq, int v0);
void crossentropy_loss(float *losses, const float *stats, int N);
void crossentropy_backward(float *dlogits, const float *logits, const float *stats, const int *targets, int N,
                           int Vq, int v0, float dscale);

// ---------------------------------------------------------------- AdamW
typedef struct {
    float lr;           // learning rate of this step
    float beta1, beta2; // moment decays
    float eps;
    float wd;           // decoupled weight decay for this tensor (0 for norms)
    float grad_scale;   // gradient multiplier (global-norm clip factor, 1 when not clipping)
    float bc1, bc2;     // bias corrections 1 − beta1^t, 1 − beta2^t (computed by the caller)
    int consume;        // CPU paths: write 0 over each g element once it is read (g must then be
                        // writable memory: the optimizer's gradient home, which the next backward
                        // adds to from zero); the CUDA op never gets it
} adamw_params_t;

// One fused pass over n elements. Reads g, master, m, v; writes master, m, v and the compute
// copy of the parameters: p16 (BF16) when non-NULL, p32 (FP32) when non-NULL. Exact sequence
// (every path — scalar, AVX2, AVX-512, CUDA — performs these IEEE ops, fmaf where written):
//   g  = g_raw · grad_scale
//   m  = fmaf(beta1, m, (1 − beta1) · g)
//   v  = fmaf(beta2, v, ((1 − beta2) · g) · g)
//   mh = m / bc1;  vh = v / bc2
//   u  = mh / (sqrtf(vh) + eps)
//   master = master − lr · fmaf(wd, master, u)
void adamw_update_scalar(float *master, float *m, float *v, uint16_t *p16, float *p32,
                         const float *g, size_t n, const adamw_params_t *hp);
// Vectorized paths: the same IEEE operation sequence, so the same bits as the scalar
// reference (divisions, sqrt and explicit FMAs round identically in every lane).
// Each is NULL-safe in p16/p32 like the scalar one; callers normally use adamw_update,
// which picks the widest path this CPU supports at run time (AVX-512F, AVX2+FMA, scalar).
void adamw_update_avx2(float *master, float *m, float *v, uint16_t *p16, float *p32,
                       const float *g, size_t n, const adamw_params_t *hp);
void adamw_update_avx512(float *master, float *m, float *v, uint16_t *p16, float *p32,
                         const float *g, size_t n, const adamw_params_t *hp);
void adamw_update(float *master, float *m, float *v, uint16_t *p16, float *p32,
                  const float *g, size_t n, const adamw_params_t *hp);
// "avx512", "avx2" or "scalar": the path adamw_update takes on this CPU.
const char *adamw_update_path(void);
