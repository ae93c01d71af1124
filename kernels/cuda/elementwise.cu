// elementwise.cu — the CUDA twins of bf16.c, elementwise.c (add_inplace and add_inplace16: y
// as FP32 words or BF16 halves, one kernel; sumsq), swiglu.c and rope.c (FP32, and on BF16
// halves: the same kernels) and embedding.c (kernels.h). Grid-stride loops over size_t indices.
//
// Bit-identical to the CPU twins: the BF16 conversions (the same integer rounding),
// add_inplace (and add_inplace16) and rope (the same IEEE operations, written with
// __fmul_rn/__fadd_rn so no contraction can fuse them whatever the flags), embedding forward
// (a copy) and backward (one thread per column adds the N rows in order, exactly the CPU's
// per-column order: no float atomics), sumsq (below). swiglu uses CUDA's expf where the CPU
// uses exp8: FP32 rounding-level agreement.
//
// sumsq: the CPU's fixed order, reproduced. The input is cut into chunks of 4096; lane j
// (of 8) of a chunk adds x[i]² for i ≡ j (mod 8) in index order in double (a tail shorter
// than 8 goes to lanes 0..), the lanes combine as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) (a
// butterfly over 8 threads: lane 0 gets exactly that bracketing), and one thread adds the
// chunk sums in chunk order onto a running total. Rounds of chunks keep the partial sums
// in a fixed slice of the scratch. The result is copied to the host, which waits for it.
// sumsq_blocks copies the chunk sums themselves to the host instead (gradnorm.h).
// Called through the CUDA backend's op table.
#include "common.cuh"

#define SUMSQ_CHUNK 4096
#define SUMSQ_ROUND ((size_t)65536) // chunks per round: 256M elements, 512 KiB of partial sums

size_t tt_sumsq_scratch_bytes(void) { return (SUMSQ_ROUND + 1) * sizeof(double); }

static size_t sumsq_round(void) { return g_tt_cuda.sumsq_round_chunks ? g_tt_cuda.sumsq_round_chunks : SUMSQ_ROUND; }

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---------------------------------------------------------------- kernels
__global__ void bf16_to_f32_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

__global__ void bf16_from_f32_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = bf16_rne(__float_as_uint(src[i]));
}

__global__ void bf16_round_kernel(float *x, size_t n) {
    GRID_STRIDE(i, n) x[i] = __uint_as_float((uint32_t)bf16_rne(__float_as_uint(x[i])) << 16);
}

// y as FP32 words (Y float) or BF16 halves (Y uint16_t: add_inplace16), widened as read
template <typename Y>
__global__ void add_kernel(float *x, const Y *y, size_t n) {
    GRID_STRIDE(i, n) x[i] = __fadd_rn(x[i], ld_elem(y, i));
}

// Chunk sums of chunks [c0, c0 + nc): 8 threads per chunk (a warp holds 4 chunks).
__global__ void sumsq_chunks_kernel(double *part, const float *x, size_t n, size_t c0, size_t nc) {
    const size_t gt = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t c = gt / 8; // chunk within the round (uniform over each group of 8 lanes)
    const int j = (int)(gt % 8);
    double l = 0.0;
    if (c < nc) {
        const size_t start = (c0 + c) * SUMSQ_CHUNK;
        const size_t len = n - start < SUMSQ_CHUNK ? n - start : SUMSQ_CHUNK;
        const size_t n8 = len & ~(size_t)7;
        const float *xc = x + start;
        for (size_t i = (size_t)j; i < n8; i += 8) {
            double a = (double)xc[i];
            l = __dadd_rn(l, __dmul_rn(a, a));
        }
        if ((size_t)j < len - n8) {
            double a = (double)xc[n8 + j];
            l = __dadd_rn(l, __dmul_rn(a, a));
        }
    }
    // ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) at lane j = 0 of each group; every lane takes part
    // in the shuffles (groups past nc add zeros and write nothing).
    l = __dadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
    l = __dadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
    l = __dadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 4));
    if (c < nc && j == 0) part[c] = l;
}

// total += part[0..nc) in order, one thread (first = 1: total starts at 0).
__global__ void sumsq_total_kernel(double *total, const double *part, size_t nc, int first) {
    double t = first ? 0.0 : *total;
    for (size_t c = 0; c < nc; c++) t = __dadd_rn(t, part[c]);
    *total = t;
}

// FP32 words (T float), or BF16 halves in and rounded halves out (T uint16_t: swiglu_forward16
// and swiglu_backward16, whose outputs may be their inputs, as the FP32 ones')
template <typename T>
__global__ void swiglu_fwd_kernel(T *out, const T *gate, const T *up, size_t n) {
    GRID_STRIDE(i, n) {
        const float g = ld_elem(gate, i);
        st_elem(out, i, __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), ld_elem(up, i)));
    }
}

// d silu/dx = σ(x)·(1 + x·(1 − σ(x))), σ(x) = 1/(1+e^−x)
template <typename T>
__global__ void swiglu_bwd_kernel(T *dgate, T *dup, const T *dout, const T *gate, const T *up, size_t n) {
    GRID_STRIDE(i, n) {
        const float g = ld_elem(gate, i), u = ld_elem(up, i), d = ld_elem(dout, i);
        const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
        const float silu = __fmul_rn(g, sig);
        const float dsilu = __fmul_rn(sig, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
        st_elem(dgate, i, __fmul_rn(__fmul_rn(d, u), dsilu));
        st_elem(dup, i, __fmul_rn(d, silu));
    }
}

// One thread per pair (i, i + HS/2) of one head row; inverse = rotation by −angle.
// (X: FP32 words, or BF16 halves rounded as stored: rope_forward16 and rope_backward16)
template <typename X>
__global__ void rope_kernel(X *x, const float *cos_t, const float *sin_t, size_t total, int T, int NX, int HS,
                            int inverse) {
    const int half = HS / 2;
    GRID_STRIDE(idx, total) {
        const int i = (int)(idx % half);
        const size_t row = idx / half; // (b·T + t)·NX + h
        const int t = (int)((row / NX) % T);
        X *lo = x + row * HS, *hi = lo + half;
        const float c = cos_t[(size_t)t * half + i], s = sin_t[(size_t)t * half + i];
        const float x0 = ld_elem(lo, i), x1 = ld_elem(hi, i);
        if (!inverse) {
            st_elem(lo, i, __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
            st_elem(hi, i, __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
        } else {
            st_elem(lo, i, __fadd_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
            st_elem(hi, i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
        }
    }
}

// A vocabulary chunk: wte (nv, C) holds rows [v0, v0 + nv), in FP32 or BF16 (widened, exact);
// rows of out whose token lies outside it are left as they are.
__device__ __forceinline__ float emb_elem(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float emb_elem(const uint16_t *p, size_t i) { return __uint_as_float((uint32_t)p[i] << 16); }
template <typename T>
__global__ void embedding_fwd_kernel(float *out, const int *tokens, const T *wte, int C, int v0, int nv, size_t total) {
    GRID_STRIDE(idx, total) {
        const size_t n = idx / C, c = idx % C;
        const int t = tokens[n] - v0;
        if (t >= 0 && t < nv) out[idx] = emb_elem(wte, (size_t)t * C + c);
    }
}

// One thread per column, rows in order (skipping the tokens outside the chunk): the CPU's
// order, no two threads write one element.
__global__ void embedding_bwd_kernel(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int nv) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        const int t = tokens[n] - v0;
        if (t < 0 || t >= nv) continue;
        float *dst = dwte + (size_t)t * C + c;
        *dst = __fadd_rn(*dst, dout[(size_t)n * C + c]);
    }
}

cudaError_t tt_elementwise_setup(void) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, bf16_to_f32_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, bf16_round_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, bf16_from_f32_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, add_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, add_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sumsq_chunks_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sumsq_total_kernel);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, swiglu_fwd_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, swiglu_bwd_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, swiglu_fwd_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, swiglu_bwd_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rope_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, rope_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, embedding_fwd_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, embedding_fwd_kernel<uint16_t>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, embedding_bwd_kernel);
    return e;
}

// ---------------------------------------------------------------- launchers
#define EW_THREADS 256

extern "C" void cuda_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    NvtxRange range("bf16_to_f32_n");
    if (n == 0) return;
    bf16_to_f32_kernel<<<grid_1d(n, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(dst, src, n);
    launchCheck("bf16_to_f32_kernel");
}

extern "C" void cuda_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n) {
    NvtxRange range("bf16_from_f32_n");
    if (n == 0) return;
    bf16_from_f32_kernel<<<grid_1d(n, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(dst, src, n);
    launchCheck("bf16_from_f32_kernel");
}

extern "C" void cuda_bf16_round_n(float *x, size_t n) {
    NvtxRange range("bf16_round_n");
    if (n == 0) return;
    bf16_round_kernel<<<grid_1d(n, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(x, n);
    launchCheck("bf16_round_kernel");
}

template <typename Y> static void add_launch(float *x, const Y *y, size_t n) {
    if (n == 0) return;
    add_kernel<Y><<<grid_1d(n, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(x, y, n);
    launchCheck("add_kernel");
}

extern "C" void cuda_add_inplace(float *x, const float *y, size_t n) {
    NvtxRange range("add_inplace");
    add_launch(x, y, n);
}

extern "C" void cuda_add_inplace16(float *x, const uint16_t *y, size_t n) {
    NvtxRange range("add_inplace16");
    add_launch(x, y, n);
}

// Rounds of chunk sums through the scratch (part[0, round)): each round's sums are added in
// order onto *total (sumsq) or copied to host_out (sumsq_blocks); stream order keeps a round's
// use of part ahead of the next round's kernel. n > 0.
static void sumsq_rounds(const char *op, const float *x, size_t n, double *total, double *host_out) {
    const size_t round = sumsq_round(), need = (round + (total ? 1 : 0)) * sizeof(double);
    TT_REQUIRE(need <= g_tt_cuda.scratch_bytes, "%s needs %zu bytes of scratch, the scratch has %zu", op, need,
               g_tt_cuda.scratch_bytes);
    double *part = (double *)g_tt_cuda.scratch;
    const size_t nchunks = CEIL_DIV(n, (size_t)SUMSQ_CHUNK);
    for (size_t c0 = 0; c0 < nchunks; c0 += round) {
        const size_t nc = nchunks - c0 < round ? nchunks - c0 : round;
        const size_t threads = nc * 8;
        sumsq_chunks_kernel<<<(unsigned)CEIL_DIV(threads, (size_t)256), 256, 0, g_tt_cuda.stream>>>(part, x, n, c0, nc);
        launchCheck("sumsq_chunks_kernel");
        if (total) {
            sumsq_total_kernel<<<1, 1, 0, g_tt_cuda.stream>>>(total, part, nc, c0 == 0);
            launchCheck("sumsq_total_kernel");
        } else {
            cudaCheck(cudaMemcpyAsync(host_out + c0, part, nc * sizeof(double), cudaMemcpyDeviceToHost, g_tt_cuda.stream));
        }
    }
}

extern "C" double cuda_sumsq(const float *x, size_t n) {
    NvtxRange range("sumsq");
    if (n == 0) return 0.0;
    double *total = (double *)g_tt_cuda.scratch + sumsq_round();
    sumsq_rounds("sumsq", x, n, total, NULL);
    // A pageable destination: the copy returns once the value is on the host; the sync
    // makes that explicit whatever the memory kind.
    double h = 0.0;
    cudaCheck(cudaMemcpyAsync(&h, total, sizeof h, cudaMemcpyDeviceToHost, g_tt_cuda.stream));
    cudaCheck(cudaStreamSynchronize(g_tt_cuda.stream));
    return h;
}

// The chunk sums themselves, copied into host memory; returns once they are there.
extern "C" void cuda_sumsq_blocks(double *h_out, const float *x, size_t n) {
    NvtxRange range("sumsq_blocks");
    if (n == 0) return;
    sumsq_rounds("sumsq_blocks", x, n, NULL, h_out);
    cudaCheck(cudaStreamSynchronize(g_tt_cuda.stream));
}

template <typename T> static void swiglu_fwd_launch(T *out, const T *gate, const T *up, size_t n) {
    if (n == 0) return;
    swiglu_fwd_kernel<T><<<grid_1d(n, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(out, gate, up, n);
    launchCheck("swiglu_fwd_kernel");
}

template <typename T>
static void swiglu_bwd_launch(T *dgate, T *dup, const T *dout, const T *gate, const T *up, size_t n) {
    if (n == 0) return;
    swiglu_bwd_kernel<T><<<grid_1d(n, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(dgate, dup, dout, gate, up, n);
    launchCheck("swiglu_bwd_kernel");
}

extern "C" void cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    NvtxRange range("swiglu_forward");
    swiglu_fwd_launch(out, gate, up, n);
}

extern "C" void cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                     size_t n) {
    NvtxRange range("swiglu_backward");
    swiglu_bwd_launch(dgate, dup, dout, gate, up, n);
}

extern "C" void cuda_swiglu_forward16(uint16_t *out, const uint16_t *gate, const uint16_t *up, size_t n) {
    NvtxRange range("swiglu_forward16");
    swiglu_fwd_launch(out, gate, up, n);
}

extern "C" void cuda_swiglu_backward16(uint16_t *dgate, uint16_t *dup, const uint16_t *dout, const uint16_t *gate,
                                       const uint16_t *up, size_t n) {
    NvtxRange range("swiglu_backward16");
    swiglu_bwd_launch(dgate, dup, dout, gate, up, n);
}

template <typename X>
static void rope_launch(X *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS, int inverse) {
    if (B <= 0 || T <= 0 || NX <= 0 || HS < 2) return; // HS/2 = 0 pairs: nothing to rotate (as the CPU)
    const size_t total = (size_t)B * T * NX * (size_t)(HS / 2);
    rope_kernel<X><<<grid_1d(total, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(x, cos_t, sin_t, total, T, NX, HS,
                                                                                 inverse);
    launchCheck("rope_kernel");
}

extern "C" void cuda_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS) {
    NvtxRange range("rope_forward");
    rope_launch(x, cos_t, sin_t, B, T, NX, HS, 0);
}

extern "C" void cuda_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS) {
    NvtxRange range("rope_backward");
    rope_launch(dx, cos_t, sin_t, B, T, NX, HS, 1);
}

extern "C" void cuda_rope_forward16(uint16_t *x, const float *cos_t, const float *sin_t, int B, int T, int NX, int HS) {
    NvtxRange range("rope_forward16");
    rope_launch(x, cos_t, sin_t, B, T, NX, HS, 0);
}

extern "C" void cuda_rope_backward16(uint16_t *dx, const float *cos_t, const float *sin_t, int B, int T, int NX,
                                     int HS) {
    NvtxRange range("rope_backward16");
    rope_launch(dx, cos_t, sin_t, B, T, NX, HS, 1);
}

template <typename T>
static void embedding_fwd_launch(float *out, const int *tokens, const T *wte, int N, int C, int v0, int nv) {
    if (N <= 0 || C <= 0 || nv <= 0) return;
    const size_t total = (size_t)N * C;
    embedding_fwd_kernel<T><<<grid_1d(total, EW_THREADS), EW_THREADS, 0, g_tt_cuda.stream>>>(out, tokens, wte, C, v0, nv, total);
    launchCheck("embedding_fwd_kernel");
}

extern "C" void cuda_embedding_forward(float *out, const int *tokens, const float *wte, int N, int C, int v0, int nv) {
    NvtxRange range("embedding_forward");
    embedding_fwd_launch(out, tokens, wte, N, C, v0, nv);
}

extern "C" void cuda_embedding_forward_w16(float *out, const int *tokens, const uint16_t *wte, int N, int C, int v0,
                                           int nv) {
    NvtxRange range("embedding_forward_w16");
    embedding_fwd_launch(out, tokens, wte, N, C, v0, nv);
}

extern "C" void cuda_embedding_backward(float *dwte, const float *dout, const int *tokens, int N, int C, int v0, int nv) {
    NvtxRange range("embedding_backward");
    if (N <= 0 || C <= 0 || nv <= 0) return;
    // 64 threads a block: a model's C columns spread over many SMs (each thread walks N rows).
    embedding_bwd_kernel<<<CEIL_DIV(C, 64), 64, 0, g_tt_cuda.stream>>>(dwte, dout, tokens, N, C, v0, nv);
    launchCheck("embedding_bwd_kernel");
}
