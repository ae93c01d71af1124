// attention.cu — causal grouped-query attention, FP32 (kernels.h "attention"), the CUDA
// twin of attention.c. Same layouts: q (B, T, NH, HS), k/v (B, T, NKV, HS), lse (B, NH, T);
// query head h reads kv head h / (NH/NKV). No (T, T) buffer anywhere: FlashAttention's
// structure. The first that fits a head size runs:
//   1. the register-tiled kernels (head sizes up to 128; attention_mma.cu):
//      scores, probabilities and accumulators in registers, tile products as PTX mma.sync
//      TF32 instructions in 3xTF32 (FP32-level accuracy);
//   2. the tiled kernels with their tile products on tensor cores through WMMA (template
//      argument TC true; see "tensor-core tile products"), scores through shared memory;
//   3. the same kernels with the products in plain FP32 arithmetic (TC false; described
//      next);
//   4. a plain path for the largest head sizes.
// 2 and 3 share everything but the products: tiles, blocks, softmax, P and dS, masks, order.
// On the H200, 1b's attention (T 2048, HS 64, 22 layers) took 726 ms of a bench train step
// with 3, 590 ms with 2 and 279 ms with 1.
//
// Tiles: a block of 128 threads (4 warps) owns a tile of ATT_T = 32 query rows (forward,
// dq) or key rows (dk, dv) of one head and walks the other side in tiles of 32 rows, all
// tiles in shared memory (row stride odd, so the lane-strided reads below hit 32 banks).
// Score tiles are computed warp by warp: warp w owns tile rows w, w+4, ..., w+28 and lane j
// owns key j of the tile, so a row's max and sum are warp reductions (fixed butterflies).
//   forward, block (query tile, h, b): online softmax per row — running max m and sum l
//     in registers (every lane holds the same bits), out rescaled by exp(m_old − m_new)
//     when m grows; lse = m + log l.
//   backward: D_t = dout_t·out_t first (one thread per row, in d order, parked in
//     dq[row][0] as the CPU does), then dk/dv per key tile of one kv head (its group's
//     heads in order, query tiles in order), then dq per query tile (key tiles in order),
//     with P = exp(s·scale − lse) recomputed and dS = P·(dP − D)·scale.
// Every output element is written by one thread, which adds its terms in a fixed order:
// results are the same run to run. Query tiles start at multiples of 32 and so do key
// tiles, so every query row (real or padding) sees key s0 of every tile it visits
// unmasked: running maxima are finite from the first tile on.
// Head sizes whose tiles do not fit in the shared memory a block may have (above ~280
// floats on an H100/H200 for the backward) take plain kernels: one warp per row, the row
// accumulated in place in global memory. Same semantics, slower. Every path is tested.
// The BF16 activations' attention_forward16 / attention_backward16 (at the end) run the
// register-tiled kernels on halves. Called through the CUDA backend's op table.
#include "attention.cuh"
#include <mma.h>
using namespace nvcuda;

#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_RPW (ATT_T / ATT_WARPS)           // tile rows per warp (8)
#define ATT_PLD (ATT_T + 1)                   // row stride of the (32, 32) score tiles, FP32
#define TC_LDS (ATT_T + 4)                    // the same on tensor cores (a multiple of 4 floats)

static int g_att_smem_limit = 48 * 1024;      // dynamic shared memory the tiled kernels may use

// ---------------------------------------------------------------- tile geometry
// TC: the tensor-core kernels' tiles (false: the FP32 ones'). Columns loaded per row: HS, or
// HS rounded up to 16 (the padding zeros); row stride: odd (FP32: lane-strided reads hit 32
// banks), or the padded width + 4 (a multiple of 4 floats, as WMMA wants).
__host__ __device__ static inline int tc_hsp(int HS) { return (HS + 15) / 16 * 16; }
template <bool TC> __host__ __device__ static inline int tile_w(int HS) { return TC ? tc_hsp(HS) : HS; }
template <bool TC> __host__ __device__ static inline int tile_ld(int HS) {
    return TC ? tc_hsp(HS) + 4 : HS % 2 == 0 ? HS + 1 : HS;
}
template <bool TC> __host__ __device__ static inline int score_ld() { return TC ? TC_LDS : ATT_PLD; }
// Dynamic shared memory of `tiles` (32, tile_ld) tiles, `scores` (32, 32) score tiles and
// `rows` per-row vectors of 32 floats.
template <bool TC> static size_t tiled_smem(int HS, int tiles, int scores, int rows) {
    return sizeof(float) * ((size_t)tiles * ATT_T * tile_ld<TC>(HS) + (size_t)scores * ATT_T * score_ld<TC>() + rows * ATT_T);
}
template <bool TC> static size_t fwd_smem(int HS) { return tiled_smem<TC>(HS, 4, 1, 1); }
template <bool TC> static size_t dkdv_smem(int HS) { return tiled_smem<TC>(HS, 6, 2, 2); }
// dq keeps S and dP on tensor cores; the FP32 kernel has both in registers and stores dS only
template <bool TC> static size_t dq_smem(int HS) { return tiled_smem<TC>(HS, 5, TC ? 2 : 1, 2); }

template <bool TC>
__device__ __forceinline__ void load_tile(float *dst, int ld, const float *src, size_t stride, int n, int HS) {
    load_tiles<1, float>(dst, src, NULL, NULL, ld, tile_w<TC>(HS), ATT_T, stride, n, HS);
}
template <bool TC>
__device__ __forceinline__ void load_tile2(float *dst0, float *dst1, int ld, const float *src0, const float *src1,
                                           size_t stride, int n, int HS) {
    load_tiles<2>(dst0, src0, dst1, src1, ld, tile_w<TC>(HS), ATT_T, stride, n, HS);
}
template <bool TC> __device__ __forceinline__ void zero_tile(float *dst, int ld, int HS) {
    const int W = tile_w<TC>(HS);
    for (int idx = threadIdx.x; idx < ATT_T * W; idx += ATT_THREADS) {
        const int i = idx / W, d = idx - i * W;
        dst[i * ld + d] = 0.0f;
    }
}

// ---------------------------------------------------------------- FP32 tile products
// The warp's ATT_RPW rows at once (register blocking: one load of the lane's own row per d
// serves every row, the rows' loads are broadcasts), each sum in the same order as a single
// dot would take it, so the bits do not depend on the blocking.
// out[r] = Σ_d a[r·4·ld + d]·b[d] in d order (FMAs): a = the warp's first row of a tile, b
// = the lane's row of another.
__device__ __forceinline__ void dots_rows(float out[ATT_RPW], const float *a, const float *b, int ld, int HS) {
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) out[r] = 0.0f;
    for (int d = 0; d < HS; d++) {
        const float y = b[d];
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) out[r] = __fmaf_rn(a[r * ATT_WARPS * ld + d], y, out[r]);
    }
}
// acc[r] += Σ_{j < n} p[r·4·ATT_PLD + j]·x[j·ld] in j order (FMAs): p = the warp's first row
// of a (32, 32) score tile, x = column d of a (32, HS) tile.
__device__ __forceinline__ void rows_times_tile_acc(float acc[ATT_RPW], const float *p, const float *x, int ld, int n) {
    for (int j = 0; j < n; j++) {
        const float y = x[j * ld];
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) acc[r] = __fmaf_rn(p[r * ATT_WARPS * ATT_PLD + j], y, acc[r]);
    }
}
__device__ __forceinline__ void rows_times_tile(float acc[ATT_RPW], const float *p, const float *x, int ld, int n) {
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) acc[r] = 0.0f;
    rows_times_tile_acc(acc, p, x, ld, n);
}

// ---------------------------------------------------------------- tensor-core tile products
// WMMA m16n16k8 TF32 fragments with FP32 accumulators, each product in three (3xTF32: x =
// hi + lo, each a TF32 value; a·b ≈ lo_a·hi_b + hi_a·lo_b + hi_a·hi_b, the lo·lo term
// dropped), which keeps about 21 bits of each product: FP32-level results in --precision fp32
// as in bf16 (BF16 values are TF32 values: their lo parts are zero). Each warp computes whole
// 16 × 16 output tiles: a (32, 32) score tile is four (warp w: rows 16·(w / 2), keys
// 16·(w % 2)), a (32, HS) accumulator tile 2·tc_hsp/16, dealt to the warps in turn. Scores go
// to shared memory, where each thread reads its own (row, key) for the softmax and dS steps;
// accumulators live in shared memory between key tiles (the forward's per-row rescale is a
// plain loop over the warp's own output tile before it loads it). A tensor core adds in its
// own order, so these results differ from the FP32 kernels' in the last bits; each is the
// same run to run (a fixed sequence of instructions per output tile).
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> tc_acc;

// hi holds x; on return hi = tf32(x), lo = tf32(x − hi)
template <class F> __device__ __forceinline__ void tf32_split(F &hi, F &lo) {
#pragma unroll
    for (int i = 0; i < hi.num_elements; i++) {
        const float x = hi.x[i], h = wmma::__float_to_tf32(x);
        hi.x[i] = h;
        lo.x[i] = wmma::__float_to_tf32(__fsub_rn(x, h));
    }
}
// c += A (16 × K) · B (K × 16), K a multiple of 8, in 3xTF32, k in order. a and b point at
// the operands' first element; ask and bsk: how far the next 8 columns of A / rows of B are
// (8 or 8·ld, by layout).
template <class LA, class LB>
__device__ __forceinline__ void tc_mma(tc_acc &c, const float *a, int lda, int ask, const float *b, int ldb, int bsk,
                                       int K) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> ah, al;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> bh, bl;
    for (int k = 0; k < K; k += 8, a += ask, b += bsk) {
        wmma::load_matrix_sync(ah, a, lda);
        wmma::load_matrix_sync(bh, b, ldb);
        tf32_split(ah, al);
        tf32_split(bh, bl);
        wmma::mma_sync(c, al, bh, c);
        wmma::mma_sync(c, ah, bl, c);
        wmma::mma_sync(c, ah, bh, c);
    }
}
// The warp's 16 × 16 tile of a (32, 32) score tile: out = X · Yᵀ over HS (rows of X and Y
// are rows of (32, tc_hsp) tiles), stored at out (stride TC_LDS).
__device__ __forceinline__ void tc_scores(float *out, const float *X, const float *Y, int ld, int HS, int warp) {
    const int r0 = (warp >> 1) * 16, c0 = (warp & 1) * 16;
    tc_acc c;
    wmma::fill_fragment(c, 0.0f);
    tc_mma<wmma::row_major, wmma::col_major>(c, X + r0 * ld, ld, 8, Y + c0 * ld, ld, 8, tc_hsp(HS));
    wmma::store_matrix_sync(out + r0 * TC_LDS + c0, c, TC_LDS, wmma::mem_row_major);
}
// The thread's scores after tc_scores (and a barrier): rows w + 4r, key `lane`.
__device__ __forceinline__ void tc_rows(float out[ATT_RPW], const float *S, int warp, int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) out[r] = S[(warp + ATT_WARPS * r) * TC_LDS + lane];
}
// acc (16 × 16 at c, stride ldc) += A · B over K, in shared memory
template <class LA>
__device__ __forceinline__ void tc_acc_tile(float *c, int ldc, const float *a, int lda, int ask, const float *b, int ldb,
                                            int K) {
    tc_acc f;
    wmma::load_matrix_sync(f, c, ldc, wmma::mem_row_major);
    tc_mma<LA, wmma::row_major>(f, a, lda, ask, b, ldb, 8 * ldb, K);
    wmma::store_matrix_sync(c, f, ldc, wmma::mem_row_major);
}

// ---------------------------------------------------------------- forward (tiled)
template <bool TC>
__global__ void __launch_bounds__(ATT_THREADS)
att_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int T, int NH, int NKV,
               int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    const int ld = tile_ld<TC>(HS), SLD = score_ld<TC>();
    float *Qs = sm, *Ks = Qs + ATT_T * ld, *Vs = Ks + ATT_T * ld, *Os = Vs + ATT_T * ld;
    float *Ps = Os + ATT_T * ld, *cr = Ps + ATT_T * SLD;
    const att_qrows<float> Q(k, v, ATT_T, T, NH, NKV, HS);
    const int t0 = Q.t0, nq = Q.nq;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile<TC>(Qs, ld, q + Q.qo, Q.qs, nq, HS);
    zero_tile<TC>(Os, ld, HS);
    float m_r[ATT_RPW], l_r[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) { m_r[r] = -INFINITY; l_r[r] = 0.0f; }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_T) {
        const int nk = min(ATT_T, T - s0);
        __syncthreads(); // the previous tile's readers are done (and Qs/Os are written)
        load_tile2<TC>(Ks, Vs, ld, Q.kb + (size_t)s0 * Q.ks, Q.vb + (size_t)s0 * Q.ks, Q.ks, nk, HS);
        __syncthreads();
        float dots[ATT_RPW];
        if constexpr (TC) {
            tc_scores(Ps, Qs, Ks, ld, HS, warp);
            __syncthreads();
            tc_rows(dots, Ps, warp, lane);
        } else {
            dots_rows(dots, Qs + warp * ld, Ks + lane * ld, ld, HS);
        }
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
            const int i = warp + ATT_WARPS * r;
            const bool valid = lane < nk && s0 + lane <= t0 + i;
            float s = __fmul_rn(dots[r], scale);
            s = valid ? s : -INFINITY;
            const float mnew = fmaxf(m_r[r], warp_max(s)); // finite: key s0 is always valid
            const float p = valid ? expf(__fsub_rn(s, mnew)) : 0.0f;
            const float c = expf(__fsub_rn(m_r[r], mnew)); // exp(−inf) = 0 on the first tile
            l_r[r] = __fadd_rn(__fmul_rn(l_r[r], c), warp_sum(p));
            m_r[r] = mnew;
            Ps[i * SLD + lane] = p;
            if (lane == 0) cr[i] = c;
        }
        __syncthreads();
        // out = out·c + P·v
        if constexpr (TC) { // one (16, 16) output tile at a time
            for (int f = warp; f < 2 * (tc_hsp(HS) / 16); f += ATT_WARPS) {
                const int r0 = (f & 1) * 16, d0 = (f >> 1) * 16;
                float *o = Os + r0 * ld + d0;
                for (int e = lane; e < 256; e += 32)
                    o[(e >> 4) * ld + (e & 15)] = __fmul_rn(o[(e >> 4) * ld + (e & 15)], cr[r0 + (e >> 4)]);
                __syncwarp();
                tc_acc_tile<wmma::row_major>(o, ld, Ps + r0 * TC_LDS, TC_LDS, 8, Vs + d0, ld, ATT_T);
            }
        } else { // lane d of warp w sums the warp's rows w + 4r at column d, keys in order
            for (int d = lane; d < HS; d += 32) {
                float acc[ATT_RPW];
                rows_times_tile(acc, Ps + warp * ATT_PLD, Vs + d, ld, nk);
#pragma unroll
                for (int r = 0; r < ATT_RPW; r++) {
                    const int i = warp + ATT_WARPS * r;
                    Os[i * ld + d] = __fadd_rn(__fmul_rn(Os[i * ld + d], cr[i]), acc[r]);
                }
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
        const int i = warp + ATT_WARPS * r;
        if (i >= nq) continue;
        const float inv = __fdiv_rn(1.0f, l_r[r]);
        float *o = out + Q.qo + (size_t)i * Q.qs;
        for (int d = lane; d < HS; d += 32) o[d] = __fmul_rn(Os[i * ld + d], inv);
        if (lane == 0) lse[Q.lo + i] = __fadd_rn(m_r[r], logf(l_r[r]));
    }
}

// ---------------------------------------------------------------- backward (tiled)
// D_t = dout_t·out_t in d order (no FMA: the CPU's dot_seq bits), parked in dq's row as an
// FP32 word: D[r · dstep] with D = dq (FP32 words: dstep HS; BF16 halves: dstep HS / 2, HS
// even, the row's first two halves; attention.cuh att_d_of reads it).
template <typename E>
__global__ void att_d_kernel(float *D, size_t dstep, const E *dout, const E *out, size_t rows, int HS) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        const E *a = dout + r * HS, *o = out + r * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s = __fadd_rn(s, __fmul_rn(ld_elem(a, d), ld_elem(o, d)));
        D[r * dstep] = s;
    }
}

// The scores S = q·kᵀ and dP = dout·vᵀ of the thread's (query row w + 4r, key lane) pairs.
// Tensor cores go through the score tiles St, dPt (then a barrier); FP32 stays in registers.
template <bool TC>
__device__ __forceinline__ void scores_s_dp(float sd[ATT_RPW], float pd[ATT_RPW], float *St, float *dPt, const float *Qs,
                                            const float *dOs, const float *Ks, const float *Vs, int ld, int HS, int warp,
                                            int lane) {
    if constexpr (TC) {
        tc_scores(St, Qs, Ks, ld, HS, warp);
        tc_scores(dPt, dOs, Vs, ld, HS, warp);
        __syncthreads();
        tc_rows(sd, St, warp, lane);
        tc_rows(pd, dPt, warp, lane);
    } else {
        dots_rows(sd, Qs + warp * ld, Ks + lane * ld, ld, HS);
        dots_rows(pd, dOs + warp * ld, Vs + lane * ld, ld, HS);
    }
}

// P = exp(S·scale − lse) and dS = P·(dP − D)·scale of the thread's pairs (queries t0 + i,
// keys s0 + lane), masked entries zero, into the score tiles Pt (NULL: not kept) and dSt.
__device__ __forceinline__ void p_ds(float *Pt, float *dSt, int sld, const float sd[ATT_RPW], const float pd[ATT_RPW],
                                     const float *Ls, const float *Ds, int t0, int nq, int s0, int nk, float scale,
                                     int warp, int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
        const int i = warp + ATT_WARPS * r;
        const bool valid = i < nq && lane < nk && s0 + lane <= t0 + i;
        const float p = expf(__fsub_rn(__fmul_rn(sd[r], scale), Ls[i]));
        const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(pd[r], Ds[i])), scale);
        if (Pt) Pt[i * sld + lane] = valid ? p : 0.0f;
        dSt[i * sld + lane] = valid ? ds : 0.0f;
    }
}

// dk, dv rows [s0, s0 + 32) of kv head g: the group's heads in order, query tiles in order.
template <bool TC>
__global__ void __launch_bounds__(ATT_THREADS)
att_dkdv_kernel(float *dk, float *dv, const float *dq, const float *dout, const float *q, const float *k,
                const float *v, const float *lse, int T, int NH, int NKV, int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    const int ld = tile_ld<TC>(HS), SLD = score_ld<TC>();
    float *Ks = sm, *Vs = Ks + ATT_T * ld, *Qs = Vs + ATT_T * ld, *dOs = Qs + ATT_T * ld;
    float *dKs = dOs + ATT_T * ld, *dVs = dKs + ATT_T * ld;
    float *Ps = dVs + ATT_T * ld, *dSs = Ps + ATT_T * SLD, *Ls = dSs + ATT_T * SLD, *Ds = Ls + ATT_T;
    const int g = blockIdx.y, b = blockIdx.z, group = NH / NKV;
    const int s0 = blockIdx.x * ATT_T, nk = min(ATT_T, T - s0);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t ko = ((size_t)b * T + s0) * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile2<TC>(Ks, Vs, ld, k + ko, v + ko, ks, nk, HS);
    zero_tile<TC>(dKs, ld, HS);
    zero_tile<TC>(dVs, ld, HS);
    for (int h = g * group; h < (g + 1) * group; h++) {
        for (int t0 = s0; t0 < T; t0 += ATT_T) { // earlier query tiles see none of these keys
            const int nq = min(ATT_T, T - t0);
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            __syncthreads(); // the previous tile's readers are done
            load_tile2<TC>(Qs, dOs, ld, q + qo, dout + qo, qs, nq, HS);
            load_row_stats(Ls, Ds, lse, dq, 1, b, h, T, NH, t0, nq, qo, qs);
            __syncthreads();
            float sd[ATT_RPW], pd[ATT_RPW];
            scores_s_dp<TC>(sd, pd, Ps, dSs, Qs, dOs, Ks, Vs, ld, HS, warp, lane);
            p_ds(Ps, dSs, SLD, sd, pd, Ls, Ds, t0, nq, s0, nk, scale, warp, lane);
            __syncthreads();
            // dv[j] += Σ_i P[i][j]·dout[i];  dk[j] += Σ_i dS[i][j]·q[i]  (i in order)
            if constexpr (TC) { // Pᵀ's element (j, i) is P[i][j]: a column-major operand in place
                for (int f = warp; f < 2 * (tc_hsp(HS) / 16); f += ATT_WARPS) {
                    const int j0 = (f & 1) * 16, d0 = (f >> 1) * 16;
                    tc_acc_tile<wmma::col_major>(dVs + j0 * ld + d0, ld, Ps + j0, TC_LDS, 8 * TC_LDS, dOs + d0, ld, ATT_T);
                    tc_acc_tile<wmma::col_major>(dKs + j0 * ld + d0, ld, dSs + j0, TC_LDS, 8 * TC_LDS, Qs + d0, ld, ATT_T);
                }
            } else { // lane d of warp w owns column d of key rows w + 4r
                for (int d = lane; d < HS; d += 32) {
                    float av[ATT_RPW], ak[ATT_RPW];
#pragma unroll
                    for (int r = 0; r < ATT_RPW; r++) {
                        const int j = warp + ATT_WARPS * r;
                        av[r] = dVs[j * ld + d];
                        ak[r] = dKs[j * ld + d];
                    }
                    for (int i = 0; i < nq; i++) {
                        const float o = dOs[i * ld + d], x = Qs[i * ld + d];
                        const float *pr = Ps + i * ATT_PLD + warp, *sr = dSs + i * ATT_PLD + warp;
#pragma unroll
                        for (int r = 0; r < ATT_RPW; r++) {
                            av[r] = __fmaf_rn(pr[ATT_WARPS * r], o, av[r]);
                            ak[r] = __fmaf_rn(sr[ATT_WARPS * r], x, ak[r]);
                        }
                    }
#pragma unroll
                    for (int r = 0; r < ATT_RPW; r++) {
                        const int j = warp + ATT_WARPS * r;
                        dVs[j * ld + d] = av[r];
                        dKs[j * ld + d] = ak[r];
                    }
                }
            }
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nk * HS; idx += ATT_THREADS) {
        const int j = idx / HS, d = idx - j * HS;
        dk[ko + (size_t)j * ks + d] = dKs[j * ld + d];
        dv[ko + (size_t)j * ks + d] = dVs[j * ld + d];
    }
}

// dq rows [t0, t0 + 32) of head h: reads the rows' parked D first, overwrites them last.
template <bool TC>
__global__ void __launch_bounds__(ATT_THREADS)
att_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse, int T,
              int NH, int NKV, int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    const int ld = tile_ld<TC>(HS), SLD = score_ld<TC>();
    float *Qs = sm, *dOs = Qs + ATT_T * ld, *Ks = dOs + ATT_T * ld, *Vs = Ks + ATT_T * ld, *dQs = Vs + ATT_T * ld;
    // dS (dP first, on tensor cores), then S on tensor cores only (dq_smem)
    float *dSs = dQs + ATT_T * ld, *Ss = dSs + ATT_T * SLD, *Ls = Ss + (TC ? ATT_T * SLD : 0), *Ds = Ls + ATT_T;
    const att_qrows<float> Q(k, v, ATT_T, T, NH, NKV, HS);
    const int t0 = Q.t0, nq = Q.nq;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile2<TC>(Qs, dOs, ld, q + Q.qo, dout + Q.qo, Q.qs, nq, HS);
    zero_tile<TC>(dQs, ld, HS);
    load_row_stats(Ls, Ds, lse, dq, 1, Q.b, Q.h, T, NH, t0, nq, Q.qo, Q.qs);
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_T) {
        const int nk = min(ATT_T, T - s0);
        __syncthreads();
        load_tile2<TC>(Ks, Vs, ld, Q.kb + (size_t)s0 * Q.ks, Q.vb + (size_t)s0 * Q.ks, Q.ks, nk, HS);
        __syncthreads();
        float sd[ATT_RPW], pd[ATT_RPW];
        scores_s_dp<TC>(sd, pd, Ss, dSs, Qs, dOs, Ks, Vs, ld, HS, warp, lane);
        p_ds(NULL, dSs, SLD, sd, pd, Ls, Ds, t0, nq, s0, nk, scale, warp, lane);
        __syncthreads();
        // dq[i] += Σ_j dS[i][j]·k[j]  (j in order)
        if constexpr (TC) {
            for (int f = warp; f < 2 * (tc_hsp(HS) / 16); f += ATT_WARPS) {
                const int i0 = (f & 1) * 16, d0 = (f >> 1) * 16;
                tc_acc_tile<wmma::row_major>(dQs + i0 * ld + d0, ld, dSs + i0 * TC_LDS, TC_LDS, 8, Ks + d0, ld, ATT_T);
            }
        } else { // lane d of warp w, the warp's rows w + 4r
            for (int d = lane; d < HS; d += 32) {
                float acc[ATT_RPW];
#pragma unroll
                for (int r = 0; r < ATT_RPW; r++) acc[r] = dQs[(warp + ATT_WARPS * r) * ld + d];
                rows_times_tile_acc(acc, dSs + warp * ATT_PLD, Ks + d, ld, nk);
#pragma unroll
                for (int r = 0; r < ATT_RPW; r++) dQs[(warp + ATT_WARPS * r) * ld + d] = acc[r];
            }
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nq * HS; idx += ATT_THREADS) {
        const int i = idx / HS, d = idx - i * HS;
        dq[Q.qo + (size_t)i * Q.qs + d] = dQs[i * ld + d];
    }
}

// ---------------------------------------------------------------- plain path (large HS)
// One warp per row; lane-strided over d; the row accumulates in place in global memory
// (each element is only ever touched by one lane).
__device__ __forceinline__ float dot_warp(const float *a, const float *b, int HS) {
    float s = 0.0f;
    for (int d = threadIdx.x & 31; d < HS; d += 32) s = __fmaf_rn(a[d], b[d], s);
    return warp_sum(s);
}

__global__ void att_fwd_plain_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int B,
                                     int T, int NH, int NKV, int HS, float scale) {
    const size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; // (b·NH + h)·T + t
    if (w >= (size_t)B * NH * T) return; // whole warps leave together (blockDim is a multiple of 32)
    const int lane = threadIdx.x & 31;
    const int t = (int)(w % T), h = (int)((w / T) % NH), b = (int)(w / ((size_t)T * NH));
    const int g = h / (NH / NKV);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const float *qr = q + ((size_t)b * T + t) * qs + (size_t)h * HS;
    const float *kb = k + (size_t)b * T * ks + (size_t)g * HS, *vb = v + (size_t)b * T * ks + (size_t)g * HS;
    float *o = out + ((size_t)b * T + t) * qs + (size_t)h * HS;
    for (int d = lane; d < HS; d += 32) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int s = 0; s <= t; s++) {
        const float x = __fmul_rn(dot_warp(qr, kb + (size_t)s * ks, HS), scale);
        const float mnew = fmaxf(m, x);
        const float c = expf(__fsub_rn(m, mnew)), p = expf(__fsub_rn(x, mnew));
        l = __fadd_rn(__fmul_rn(l, c), p);
        m = mnew;
        for (int d = lane; d < HS; d += 32) o[d] = __fmaf_rn(p, vb[(size_t)s * ks + d], __fmul_rn(o[d], c));
    }
    const float inv = __fdiv_rn(1.0f, l);
    for (int d = lane; d < HS; d += 32) o[d] = __fmul_rn(o[d], inv);
    if (lane == 0) lse[((size_t)b * NH + h) * T + t] = __fadd_rn(m, logf(l));
}

__global__ void att_dkdv_plain_kernel(float *dk, float *dv, const float *dq, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse, int B, int T, int NH, int NKV,
                                      int HS, float scale) {
    const size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; // (b·NKV + g)·T + s
    if (w >= (size_t)B * NKV * T) return;
    const int lane = threadIdx.x & 31;
    const int s = (int)(w % T), g = (int)((w / T) % NKV), b = (int)(w / ((size_t)T * NKV));
    const int group = NH / NKV;
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t kro = ((size_t)b * T + s) * ks + (size_t)g * HS;
    const float *kr = k + kro, *vr = v + kro;
    float *dkr = dk + kro, *dvr = dv + kro;
    for (int d = lane; d < HS; d += 32) { dkr[d] = 0.0f; dvr[d] = 0.0f; }
    for (int h = g * group; h < (g + 1) * group; h++)
        for (int t = s; t < T; t++) {
            const size_t row = ((size_t)b * T + t) * qs + (size_t)h * HS;
            const float p = expf(__fsub_rn(__fmul_rn(dot_warp(q + row, kr, HS), scale), lse[((size_t)b * NH + h) * T + t]));
            const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(dot_warp(dout + row, vr, HS), dq[row])), scale);
            for (int d = lane; d < HS; d += 32) {
                dvr[d] = __fmaf_rn(p, dout[row + d], dvr[d]);
                dkr[d] = __fmaf_rn(ds, q[row + d], dkr[d]);
            }
        }
}

__global__ void att_dq_plain_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v,
                                    const float *lse, int B, int T, int NH, int NKV, int HS, float scale) {
    const size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; // (b·NH + h)·T + t
    if (w >= (size_t)B * NH * T) return;
    const int lane = threadIdx.x & 31;
    const int t = (int)(w % T), h = (int)((w / T) % NH), b = (int)(w / ((size_t)T * NH));
    const int g = h / (NH / NKV);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t row = ((size_t)b * T + t) * qs + (size_t)h * HS;
    const float *kb = k + (size_t)b * T * ks + (size_t)g * HS, *vb = v + (size_t)b * T * ks + (size_t)g * HS;
    const float lt = lse[((size_t)b * NH + h) * T + t];
    const float D = dq[row];
    __syncwarp(); // every lane has read D before lane 0 zeroes it
    float *dqr = dq + row;
    for (int d = lane; d < HS; d += 32) dqr[d] = 0.0f;
    for (int s = 0; s <= t; s++) {
        const float p = expf(__fsub_rn(__fmul_rn(dot_warp(q + row, kb + (size_t)s * ks, HS), scale), lt));
        const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(dot_warp(dout + row, vb + (size_t)s * ks, HS), D)), scale);
        for (int d = lane; d < HS; d += 32) dqr[d] = __fmaf_rn(ds, kb[(size_t)s * ks + d], dqr[d]);
    }
}

// ---------------------------------------------------------------- setup and launchers
cudaError_t tt_attention_setup(int smem_optin) {
    cudaFuncAttributes a;
    cudaError_t e = cudaSuccess;
    const void *plain[] = {(const void *)att_d_kernel<float>, (const void *)att_d_kernel<uint16_t>,
                           (const void *)att_fwd_plain_kernel, (const void *)att_dkdv_plain_kernel,
                           (const void *)att_dq_plain_kernel};
    for (int i = 0; i < 5 && e == cudaSuccess; i++) e = cudaFuncGetAttributes(&a, plain[i]);
    if (e != cudaSuccess) return e;
    // The tiled kernels may use up to the opt-in limit of dynamic shared memory; should the
    // driver refuse, they keep the default 48 KiB (larger head sizes take the plain path).
    const void *tiled[] = {(const void *)att_fwd_kernel<false>, (const void *)att_dkdv_kernel<false>,
                           (const void *)att_dq_kernel<false>,  (const void *)att_fwd_kernel<true>,
                           (const void *)att_dkdv_kernel<true>, (const void *)att_dq_kernel<true>};
    const int ntiled = (int)(sizeof tiled / sizeof tiled[0]);
    int limit = smem_optin > 48 * 1024 ? smem_optin : 48 * 1024;
    if (limit > 48 * 1024 && (att_set_smem(tiled, ntiled, limit) != cudaSuccess || att_mma_set_smem(limit) != cudaSuccess)) {
        (void)cudaGetLastError(); // clear the refused attribute; fall back to the default
        limit = 48 * 1024;
        if ((e = att_set_smem(tiled, ntiled, limit)) != cudaSuccess || (e = att_mma_set_smem(limit)) != cudaSuccess) return e;
    }
    g_att_smem_limit = limit;
    return cudaSuccess;
}

static void att_check(const char *op, int B, int T, int NH, int NKV) {
    TT_REQUIRE(NKV > 0 && NH % NKV == 0, "%s: NH=%d must be a multiple of NKV=%d", op, NH, NKV);
    TT_REQUIRE(B <= 65535 && NH <= 65535, "%s: B=%d and NH=%d must be at most 65535 (grid y/z)", op, B, NH);
}

// The kernels a shape takes: the register-tiled ones (mma.sync) for head sizes up to 128,
// else the WMMA tensor-core ones where their tiles fit in shared memory, else the FP32 tiled
// ones where theirs do, else the plain ones (g_tt_cuda.attention_path forces the WMMA, FP32
// tiled or plain ones for tests). smem: a pass's need, FP32 and WMMA; mma: the mma one's.
enum { ATT_MMA, ATT_TC, ATT_TILED, ATT_PLAIN };
static int att_path(size_t (*smem)(int, bool), size_t (*mma)(int), int HS) {
    const int force = g_tt_cuda.attention_path;
    if (force == CUDA_ATT_AUTO && HS <= ATT_MMA_MAX_HS && mma(HS) <= (size_t)g_att_smem_limit) return ATT_MMA;
    if ((force == CUDA_ATT_AUTO || force == CUDA_ATT_WMMA) && smem(HS, true) <= (size_t)g_att_smem_limit) return ATT_TC;
    if (force != CUDA_ATT_PLAIN && smem(HS, false) <= (size_t)g_att_smem_limit) return ATT_TILED;
    return ATT_PLAIN;
}
static size_t fwd_need(int HS, bool tc) { return tc ? fwd_smem<true>(HS) : fwd_smem<false>(HS); }
static size_t bwd_need(int HS, bool tc) { // the dk/dv and the dq kernels' larger
    const size_t kv = tc ? dkdv_smem<true>(HS) : dkdv_smem<false>(HS), q = tc ? dq_smem<true>(HS) : dq_smem<false>(HS);
    return kv > q ? kv : q;
}

template <bool TC>
static void fwd_tiled(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int NH,
                      int NKV, int HS, float scale) {
    dim3 grid(CEIL_DIV(T, ATT_T), NH, B);
    att_fwd_kernel<TC><<<grid, ATT_THREADS, fwd_smem<TC>(HS), g_tt_cuda.stream>>>(out, lse, q, k, v, T, NH, NKV, HS, scale);
    launchCheck(TC ? "att_fwd_kernel (tensor cores)" : "att_fwd_kernel");
}

template <bool TC>
static void bwd_tiled(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *lse, int B, int T, int NH, int NKV, int HS, float scale) {
    dim3 grid_kv(CEIL_DIV(T, ATT_T), NKV, B), grid_q(CEIL_DIV(T, ATT_T), NH, B);
    att_dkdv_kernel<TC><<<grid_kv, ATT_THREADS, dkdv_smem<TC>(HS), g_tt_cuda.stream>>>(dk, dv, dq, dout, q, k, v, lse, T, NH, NKV, HS, scale);
    launchCheck(TC ? "att_dkdv_kernel (tensor cores)" : "att_dkdv_kernel");
    att_dq_kernel<TC><<<grid_q, ATT_THREADS, dq_smem<TC>(HS), g_tt_cuda.stream>>>(dq, dout, q, k, v, lse, T, NH, NKV, HS, scale);
    launchCheck(TC ? "att_dq_kernel (tensor cores)" : "att_dq_kernel");
}

extern "C" void cuda_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B,
                                       int T, int NH, int NKV, int HS) {
    NvtxRange range("attention_forward");
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    att_check("attention_forward", B, T, NH, NKV);
    const float scale = 1.0f / sqrtf((float)HS); // the CPU's expression, on the host
    const int path = att_path(fwd_need, att_mma_fwd_smem, HS);
    if (path == ATT_MMA) att_mma_forward(out, lse, q, k, v, B, T, NH, NKV, HS, scale);
    else if (path == ATT_TC) fwd_tiled<true>(out, lse, q, k, v, B, T, NH, NKV, HS, scale);
    else if (path == ATT_TILED) fwd_tiled<false>(out, lse, q, k, v, B, T, NH, NKV, HS, scale);
    else {
        const size_t warps = (size_t)B * NH * T;
        att_fwd_plain_kernel<<<(unsigned)CEIL_DIV(warps, (size_t)ATT_WARPS), ATT_THREADS, 0, g_tt_cuda.stream>>>(
            out, lse, q, k, v, B, T, NH, NKV, HS, scale);
        launchCheck("att_fwd_plain_kernel");
    }
}

extern "C" void cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *out, const float *lse, int B,
                                        int T, int NH, int NKV, int HS) {
    NvtxRange range("attention_backward");
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    att_check("attention_backward", B, T, NH, NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    // pass 1: D parked in dq[row][0]; passes 2 and 3 follow in stream order
    const size_t rows = (size_t)B * T * NH;
    att_d_kernel<float><<<grid_1d(rows, 256), 256, 0, g_tt_cuda.stream>>>(dq, (size_t)HS, dout, out, rows, HS);
    launchCheck("att_d_kernel");
    const int path = att_path(bwd_need, att_mma_bwd_smem, HS);
    if (path == ATT_MMA) att_mma_backward(dq, dk, dv, dout, q, k, v, lse, dq, 1, B, T, NH, NKV, HS, scale);
    else if (path == ATT_TC) bwd_tiled<true>(dq, dk, dv, dout, q, k, v, lse, B, T, NH, NKV, HS, scale);
    else if (path == ATT_TILED) bwd_tiled<false>(dq, dk, dv, dout, q, k, v, lse, B, T, NH, NKV, HS, scale);
    else {
        const size_t wkv = (size_t)B * NKV * T, wq = (size_t)B * NH * T;
        att_dkdv_plain_kernel<<<(unsigned)CEIL_DIV(wkv, (size_t)ATT_WARPS), ATT_THREADS, 0, g_tt_cuda.stream>>>(
            dk, dv, dq, dout, q, k, v, lse, B, T, NH, NKV, HS, scale);
        launchCheck("att_dkdv_plain_kernel");
        att_dq_plain_kernel<<<(unsigned)CEIL_DIV(wq, (size_t)ATT_WARPS), ATT_THREADS, 0, g_tt_cuda.stream>>>(
            dq, dout, q, k, v, lse, B, T, NH, NKV, HS, scale);
        launchCheck("att_dq_plain_kernel");
    }
}

// ---------------------------------------------------------------- on BF16 halves
// The BF16 activations' attention (cuda_kernels.h cuda_attention_act16): the register-tiled
// kernels on halves — the FP32 pass's arithmetic on the widened values, each output rounded
// as stored, D parked as an FP32 word in the first two halves of its dq row — so the bits of
// attention_forward / attention_backward with round on the same values. 1 (declined, nothing
// written) where the shape is not one they take or the device's shared memory does not hold
// their tiles.
static int att16_declines(int NH, int NKV, int HS, size_t need) {
    return !cuda_attention_act16(NH, NKV, HS) || need > (size_t)g_att_smem_limit;
}

extern "C" int cuda_attention_forward16(uint16_t *out, float *lse, const uint16_t *q, const uint16_t *k,
                                        const uint16_t *v, int B, int T, int NH, int NKV, int HS) {
    NvtxRange range("attention_forward16");
    if (att16_declines(NH, NKV, HS, att_mma_fwd_smem(HS))) return 1;
    if (B <= 0 || T <= 0) return 0;
    att_check("attention_forward16", B, T, NH, NKV);
    att_mma_forward(out, lse, q, k, v, B, T, NH, NKV, HS, 1.0f / sqrtf((float)HS));
    return 0;
}

extern "C" int cuda_attention_backward16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                                         const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *out,
                                         const float *lse, int B, int T, int NH, int NKV, int HS) {
    NvtxRange range("attention_backward16");
    if (att16_declines(NH, NKV, HS, att_mma_bwd_smem(HS))) return 1;
    if (B <= 0 || T <= 0) return 0;
    att_check("attention_backward16", B, T, NH, NKV);
    const size_t rows = (size_t)B * T * NH;
    float *D = (float *)(void *)dq; // HS even: each row's first two halves, 4-byte aligned
    att_d_kernel<uint16_t><<<grid_1d(rows, 256), 256, 0, g_tt_cuda.stream>>>(D, (size_t)HS / 2, dout, out, rows, HS);
    launchCheck("att_d_kernel");
    att_mma_backward(dq, dk, dv, dout, q, k, v, lse, D, 2, B, T, NH, NKV, HS, 1.0f / sqrtf((float)HS));
    return 0;
}
