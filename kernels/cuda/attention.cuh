// attention.cuh — what attention.cu (the WMMA, FP32 tiled and plain kernels, the path choice
// and the entry points) and attention_mma.cu (the register-tiled kernels) share: the block
// size, the tile loads, the backward's row statistics, and the register-tiled kernels' host
// side. Device helpers only inline; nothing here owns state.
#pragma once
#include "common.cuh"

#define ATT_T 32        // rows per tile of the side a block walks (= warp size in the tiled kernels)
#define ATT_THREADS 128 // 4 warps, every attention kernel's block

// Rows [0, n) × columns [0, HS) of NT (rows, W) tiles (NT 1 or 2: dst0/src0, dst1/src1)
// from global rows of stride `stride`; the other rows and columns [HS, W) are zeros.
// Batched: each thread issues ATT_LB loads per tile before its first store to shared memory,
// so it waits for global memory once per batch, not once per element.
#define ATT_LB 16
// The sources are FP32 words or BF16 halves (S, common.cuh ld_elem: widened, exact).
template <int NT, typename S>
__device__ __forceinline__ void load_tiles(float *dst0, const S *src0, float *dst1, const S *src1, int ld, int W,
                                           int rows, size_t stride, int n, int HS) {
    const int E = rows * W;
    for (int base = threadIdx.x; base < E; base += ATT_THREADS * ATT_LB) {
        float r0[ATT_LB], r1[ATT_LB];
#pragma unroll
        for (int u = 0; u < ATT_LB; u++) {
            const int idx = base + u * ATT_THREADS, i = idx / W, d = idx - i * W;
            const bool in = idx < E && i < n && d < HS;
            const size_t o = (size_t)i * stride + d;
            r0[u] = in ? ld_elem(src0, o) : 0.0f;
            if (NT > 1) r1[u] = in ? ld_elem(src1, o) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < ATT_LB; u++) {
            const int idx = base + u * ATT_THREADS, i = idx / W, d = idx - i * W;
            if (idx < E) {
                dst0[i * ld + d] = r0[u];
                if (NT > 1) dst1[i * ld + d] = r1[u];
            }
        }
    }
}
// The query rows a block of the forward or dq pass owns, and where its operands start: grid x
// counts tiles of `rows` query rows (the longest tiles, at the end, start first), y the head,
// z the sequence. qs: the row stride of q, out, dout and dq; ks: of k and v; qo: the block's
// first row of q (and out, dout, dq) for head h; lo: its first lse entry; kb, vb: its kv
// head's first rows of k and v (E: FP32 words or BF16 halves).
template <typename E> struct att_qrows {
    int h, b, t0, nq;
    size_t qs, ks, qo, lo;
    const E *kb, *vb;
    __device__ att_qrows(const E *k, const E *v, int rows, int T, int NH, int NKV, int HS) {
        h = blockIdx.y;
        b = blockIdx.z;
        t0 = (gridDim.x - 1 - blockIdx.x) * rows;
        nq = min(rows, T - t0);
        qs = (size_t)NH * HS;
        ks = (size_t)NKV * HS;
        qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
        lo = ((size_t)b * NH + h) * T + t0;
        const size_t kvo = (size_t)b * T * ks + (size_t)(h / (NH / NKV)) * HS;
        kb = k + kvo;
        vb = v + kvo;
    }
};

// Where the backward's D_t = dout_t·out_t is: parked in an FP32 dq's dq[row][0] (D = dq, div
// 1), or one float per row in rows' order (B, T, NH) (div HS: the BF16 halves' form, whose dq
// cannot hold it) — row i of a block whose first row starts at element qo, stride qs, at
// D[(qo + i·qs) / div].
__device__ __forceinline__ float att_d_of(const float *D, int div, size_t qo, size_t qs, int i) {
    return D[(qo + (size_t)i * qs) / (size_t)div];
}

// The query rows' lse and D (rows [t0, t0 + nq) of head h, zeros past nq): Ls, Ds.
__device__ __forceinline__ void load_row_stats(float *Ls, float *Ds, const float *lse, const float *D, int div, int b,
                                               int h, int T, int NH, int t0, int nq, size_t qo, size_t qs) {
    if (threadIdx.x < ATT_T) {
        const int i = threadIdx.x;
        Ls[i] = i < nq ? lse[((size_t)b * NH + h) * T + t0 + i] : 0.0f;
        Ds[i] = i < nq ? att_d_of(D, div, qo, qs, i) : 0.0f;
    }
}

// Dynamic shared memory of every kernel in k[0, n): up to `limit` bytes (less its static use).
static inline cudaError_t att_set_smem(const void *const *k, int n, int limit) {
    for (int i = 0; i < n; i++) {
        cudaFuncAttributes a;
        cudaError_t e = cudaFuncGetAttributes(&a, k[i]);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, limit - (int)a.sharedSizeBytes);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

// ---------------------------------------------------------------- attention_mma.cu
#define ATT_MMA_MAX_HS CUDA_ATT16_MAX_HS // the register-tiled kernels' largest head size
size_t att_mma_fwd_smem(int HS); // dynamic shared memory a pass needs, bytes
size_t att_mma_bwd_smem(int HS);
cudaError_t att_mma_set_smem(int limit); // the kernels may use up to limit bytes
// The passes (after attention.cu's checks; the backward after att_d_kernel wrote D: see
// att_d_of), on FP32 words or BF16 halves (E; outputs rounded, then narrowed)
template <typename E>
void att_mma_forward(E *out, float *lse, const E *q, const E *k, const E *v, int B, int T, int NH, int NKV, int HS,
                     float scale);
template <typename E>
void att_mma_backward(E *dq, E *dk, E *dv, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                      const float *D, int div, int B, int T, int NH, int NKV, int HS, float scale);
