// attention.cu — causal grouped-query attention, FP32 (kernels.h "attention"), the CUDA
// twin of attention.c. Same layouts: q (B, T, NH, HS), k/v (B, T, NKV, HS), lse (B, NH, T);
// query head h reads kv head h / (NH/NKV). No (T, T) buffer anywhere: FlashAttention's
// structure. Three sets of kernels, the first that fits a head size runs: the tile products
// on tensor cores (3xTF32, FP32-level accuracy; "tensor cores" below), the same tiles in
// plain FP32 arithmetic (described next), and a plain path for the largest head sizes.
// On the H200, 1b's attention (T 2048, HS 64) took 726 ms of a 1628 ms bench train step on
// the FP32 tiles, about 12 TFLOP/s.
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
// accumulated in place in global memory. Same semantics, slower. Both paths are tested.
// Called through the CUDA backend's op table.
#include "common.cuh"
#include <mma.h>
using namespace nvcuda;

#define ATT_T 32                              // rows per tile (= warp size: lane j is key j)
#define ATT_THREADS 128                       // 4 warps
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_RPW (ATT_T / ATT_WARPS)           // tile rows per warp (8)
#define ATT_PLD (ATT_T + 1)                   // row stride of the (32, 32) score tiles

static int g_att_smem_limit = 48 * 1024;      // dynamic shared memory the tiled kernels may use

__host__ __device__ static inline int att_ld(int HS) { return HS % 2 == 0 ? HS + 1 : HS; }
static size_t fwd_smem(int HS) { return sizeof(float) * ((size_t)4 * ATT_T * att_ld(HS) + ATT_T * ATT_PLD + ATT_T); }
static size_t dkdv_smem(int HS) { return sizeof(float) * ((size_t)6 * ATT_T * att_ld(HS) + 2 * ATT_T * ATT_PLD + 2 * ATT_T); }
static size_t dq_smem(int HS) { return sizeof(float) * ((size_t)5 * ATT_T * att_ld(HS) + ATT_T * ATT_PLD + 2 * ATT_T); }

// rows [0, n) of a (32, HS) tile from global rows of stride `stride`; rows n.. are zeros.
__device__ __forceinline__ void load_tile(float *dst, int ld, const float *src, size_t stride, int n, int HS) {
    for (int idx = threadIdx.x; idx < ATT_T * HS; idx += ATT_THREADS) {
        const int i = idx / HS, d = idx - i * HS;
        dst[i * ld + d] = i < n ? src[(size_t)i * stride + d] : 0.0f;
    }
}
__device__ __forceinline__ void zero_tile(float *dst, int ld, int HS) {
    for (int idx = threadIdx.x; idx < ATT_T * HS; idx += ATT_THREADS) {
        const int i = idx / HS, d = idx - i * HS;
        dst[i * ld + d] = 0.0f;
    }
}
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

// ---------------------------------------------------------------- forward (tiled)
__global__ void __launch_bounds__(ATT_THREADS)
att_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int T, int NH, int NKV,
               int HS, float scale) {
    extern __shared__ float sm[];
    const int ld = att_ld(HS);
    float *Qs = sm, *Ks = Qs + ATT_T * ld, *Vs = Ks + ATT_T * ld, *Os = Vs + ATT_T * ld;
    float *Ps = Os + ATT_T * ld, *cr = Ps + ATT_T * ATT_PLD;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest tiles start first
    const int h = blockIdx.y, b = blockIdx.z;
    const int t0 = qb * ATT_T, nq = min(ATT_T, T - t0), g = h / (NH / NKV);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const float *kb = k + (size_t)b * T * ks + (size_t)g * HS, *vb = v + (size_t)b * T * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile(Qs, ld, q + ((size_t)b * T + t0) * qs + (size_t)h * HS, qs, nq, HS);
    zero_tile(Os, ld, HS);
    float m_r[ATT_RPW], l_r[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) { m_r[r] = -INFINITY; l_r[r] = 0.0f; }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_T) {
        const int nk = min(ATT_T, T - s0);
        __syncthreads(); // the previous tile's readers are done (and Qs/Os are written)
        load_tile(Ks, ld, kb + (size_t)s0 * ks, ks, nk, HS);
        load_tile(Vs, ld, vb + (size_t)s0 * ks, ks, nk, HS);
        __syncthreads();
        float dots[ATT_RPW];
        dots_rows(dots, Qs + warp * ld, Ks + lane * ld, ld, HS);
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
            Ps[i * ATT_PLD + lane] = p;
            if (lane == 0) cr[i] = c;
        }
        __syncthreads();
        // out = out·c + P·v: lane d of warp w sums the warp's rows w + 4r at column d, keys in order
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
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
        const int i = warp + ATT_WARPS * r;
        if (i >= nq) continue;
        const float inv = __fdiv_rn(1.0f, l_r[r]);
        float *o = out + ((size_t)b * T + t0 + i) * qs + (size_t)h * HS;
        for (int d = lane; d < HS; d += 32) o[d] = __fmul_rn(Os[i * ld + d], inv);
        if (lane == 0) lse[((size_t)b * NH + h) * T + t0 + i] = __fadd_rn(m_r[r], logf(l_r[r]));
    }
}

// ---------------------------------------------------------------- backward (tiled)
// D_t = dout_t·out_t in d order (no FMA: the CPU's dot_seq bits), parked in dq[row][0].
__global__ void att_d_kernel(float *dq, const float *dout, const float *out, size_t rows, int HS) {
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
        const float *a = dout + r * HS, *o = out + r * HS;
        float s = 0.0f;
        for (int d = 0; d < HS; d++) s = __fadd_rn(s, __fmul_rn(a[d], o[d]));
        dq[r * HS] = s;
    }
}

// dk, dv rows [s0, s0 + 32) of kv head g: the group's heads in order, query tiles in order.
__global__ void __launch_bounds__(ATT_THREADS)
att_dkdv_kernel(float *dk, float *dv, const float *dq, const float *dout, const float *q, const float *k,
                const float *v, const float *lse, int T, int NH, int NKV, int HS, float scale) {
    extern __shared__ float sm[];
    const int ld = att_ld(HS);
    float *Ks = sm, *Vs = Ks + ATT_T * ld, *Qs = Vs + ATT_T * ld, *dOs = Qs + ATT_T * ld;
    float *dKs = dOs + ATT_T * ld, *dVs = dKs + ATT_T * ld;
    float *Ps = dVs + ATT_T * ld, *dSs = Ps + ATT_T * ATT_PLD, *Ls = dSs + ATT_T * ATT_PLD, *Ds = Ls + ATT_T;
    const int g = blockIdx.y, b = blockIdx.z, group = NH / NKV;
    const int s0 = blockIdx.x * ATT_T, nk = min(ATT_T, T - s0);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t ko = ((size_t)b * T + s0) * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile(Ks, ld, k + ko, ks, nk, HS);
    load_tile(Vs, ld, v + ko, ks, nk, HS);
    zero_tile(dKs, ld, HS);
    zero_tile(dVs, ld, HS);
    for (int h = g * group; h < (g + 1) * group; h++) {
        for (int t0 = s0; t0 < T; t0 += ATT_T) { // earlier query tiles see none of these keys
            const int nq = min(ATT_T, T - t0);
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            __syncthreads(); // the previous tile's readers are done
            load_tile(Qs, ld, q + qo, qs, nq, HS);
            load_tile(dOs, ld, dout + qo, qs, nq, HS);
            if (threadIdx.x < ATT_T) {
                const int i = threadIdx.x;
                Ls[i] = i < nq ? lse[((size_t)b * NH + h) * T + t0 + i] : 0.0f;
                Ds[i] = i < nq ? dq[qo + (size_t)i * qs] : 0.0f; // D parked in dq[row][0]
            }
            __syncthreads();
            float sd[ATT_RPW], pd[ATT_RPW];
            dots_rows(sd, Qs + warp * ld, Ks + lane * ld, ld, HS);
            dots_rows(pd, dOs + warp * ld, Vs + lane * ld, ld, HS);
#pragma unroll
            for (int r = 0; r < ATT_RPW; r++) {
                const int i = warp + ATT_WARPS * r;
                const bool valid = i < nq && lane < nk && s0 + lane <= t0 + i;
                const float p = expf(__fsub_rn(__fmul_rn(sd[r], scale), Ls[i]));
                const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(pd[r], Ds[i])), scale);
                Ps[i * ATT_PLD + lane] = valid ? p : 0.0f;
                dSs[i * ATT_PLD + lane] = valid ? ds : 0.0f;
            }
            __syncthreads();
            // dv[j] += Σ_i P[i][j]·dout[i];  dk[j] += Σ_i dS[i][j]·q[i]  (i in order): lane d
            // of warp w owns column d of key rows w + 4r
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
    __syncthreads();
    for (int idx = threadIdx.x; idx < nk * HS; idx += ATT_THREADS) {
        const int j = idx / HS, d = idx - j * HS;
        dk[ko + (size_t)j * ks + d] = dKs[j * ld + d];
        dv[ko + (size_t)j * ks + d] = dVs[j * ld + d];
    }
}

// dq rows [t0, t0 + 32) of head h: reads the rows' parked D first, overwrites them last.
__global__ void __launch_bounds__(ATT_THREADS)
att_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse, int T,
              int NH, int NKV, int HS, float scale) {
    extern __shared__ float sm[];
    const int ld = att_ld(HS);
    float *Qs = sm, *dOs = Qs + ATT_T * ld, *Ks = dOs + ATT_T * ld, *Vs = Ks + ATT_T * ld, *dQs = Vs + ATT_T * ld;
    float *dSs = dQs + ATT_T * ld, *Ls = dSs + ATT_T * ATT_PLD, *Ds = Ls + ATT_T;
    const int qb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int t0 = qb * ATT_T, nq = min(ATT_T, T - t0), g = h / (NH / NKV);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
    const float *kb = k + (size_t)b * T * ks + (size_t)g * HS, *vb = v + (size_t)b * T * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile(Qs, ld, q + qo, qs, nq, HS);
    load_tile(dOs, ld, dout + qo, qs, nq, HS);
    zero_tile(dQs, ld, HS);
    if (threadIdx.x < ATT_T) {
        const int i = threadIdx.x;
        Ls[i] = i < nq ? lse[((size_t)b * NH + h) * T + t0 + i] : 0.0f;
        Ds[i] = i < nq ? dq[qo + (size_t)i * qs] : 0.0f;
    }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_T) {
        const int nk = min(ATT_T, T - s0);
        __syncthreads();
        load_tile(Ks, ld, kb + (size_t)s0 * ks, ks, nk, HS);
        load_tile(Vs, ld, vb + (size_t)s0 * ks, ks, nk, HS);
        __syncthreads();
        float sd[ATT_RPW], pd[ATT_RPW];
        dots_rows(sd, Qs + warp * ld, Ks + lane * ld, ld, HS);
        dots_rows(pd, dOs + warp * ld, Vs + lane * ld, ld, HS);
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
            const int i = warp + ATT_WARPS * r;
            const bool valid = i < nq && lane < nk && s0 + lane <= t0 + i;
            const float p = expf(__fsub_rn(__fmul_rn(sd[r], scale), Ls[i]));
            const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(pd[r], Ds[i])), scale);
            dSs[i * ATT_PLD + lane] = valid ? ds : 0.0f;
        }
        __syncthreads();
        // dq[i] += Σ_j dS[i][j]·k[j]  (j in order): lane d of warp w, the warp's rows w + 4r
        for (int d = lane; d < HS; d += 32) {
            float acc[ATT_RPW];
#pragma unroll
            for (int r = 0; r < ATT_RPW; r++) acc[r] = dQs[(warp + ATT_WARPS * r) * ld + d];
            rows_times_tile_acc(acc, dSs + warp * ATT_PLD, Ks + d, ld, nk);
#pragma unroll
            for (int r = 0; r < ATT_RPW; r++) dQs[(warp + ATT_WARPS * r) * ld + d] = acc[r];
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nq * HS; idx += ATT_THREADS) {
        const int i = idx / HS, d = idx - i * HS;
        dq[qo + (size_t)i * qs + d] = dQs[i * ld + d];
    }
}

// ---------------------------------------------------------------- tensor cores (TF32)
// The same tiles, blocks and softmax steps as the kernels above, with the tile products on
// tensor cores: WMMA m16n16k8 TF32 fragments with FP32 accumulators, each product in three
// (3xTF32: x = hi + lo, each a TF32 value; a·b ≈ lo_a·hi_b + hi_a·lo_b + hi_a·hi_b, the lo·lo
// term dropped), which keeps about 21 bits of each product: FP32-level results in --precision
// fp32 as in bf16 (BF16 values are TF32 values: their lo parts are zero). Each warp computes
// whole 16 × 16 output tiles: a (32, 32) score tile is four (warp w: rows 16·(w / 2), keys
// 16·(w % 2)), a (32, HS) accumulator tile 2·HS/16, dealt to the warps in turn. Scores go to
// shared memory (row stride TC_LDS), where the softmax and dS steps read them as above;
// accumulators live in shared memory between key tiles (the forward's per-row rescale is a
// plain loop over the warp's own output tile before it loads it). Tiles are HS rounded up to
// 16 columns wide, the padding zeros. A tensor core adds in its own order, so these results
// differ from the FP32 kernels' in the last bits; each is the same run to run (a fixed
// sequence of instructions per output tile).
#define TC_LDS (ATT_T + 4) // row stride of the (32, 32) score tiles (a multiple of 4 floats)
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> tc_acc;

__host__ __device__ static inline int tc_hsp(int HS) { return (HS + 15) / 16 * 16; }
__host__ __device__ static inline int tc_ld(int HS) { return tc_hsp(HS) + 4; }
static size_t fwd_tc_smem(int HS) { return sizeof(float) * ((size_t)4 * ATT_T * tc_ld(HS) + ATT_T * TC_LDS + ATT_T); }
static size_t dkdv_tc_smem(int HS) {
    return sizeof(float) * ((size_t)6 * ATT_T * tc_ld(HS) + 2 * ATT_T * TC_LDS + 2 * ATT_T);
}
static size_t dq_tc_smem(int HS) { return sizeof(float) * ((size_t)5 * ATT_T * tc_ld(HS) + 2 * ATT_T * TC_LDS + 2 * ATT_T); }

// rows [0, n) × columns [0, HS) of a (32, tc_hsp(HS)) tile from global rows of stride
// `stride`; the other rows and the padding columns are zeros.
__device__ __forceinline__ void load_tile_tc(float *dst, int ld, const float *src, size_t stride, int n, int HS) {
    const int HSp = tc_hsp(HS);
    for (int idx = threadIdx.x; idx < ATT_T * HSp; idx += ATT_THREADS) {
        const int i = idx / HSp, d = idx - i * HSp;
        dst[i * ld + d] = i < n && d < HS ? src[(size_t)i * stride + d] : 0.0f;
    }
}
__device__ __forceinline__ void zero_tile_tc(float *dst, int ld, int HS) {
    const int HSp = tc_hsp(HS);
    for (int idx = threadIdx.x; idx < ATT_T * HSp; idx += ATT_THREADS) {
        const int i = idx / HSp, d = idx - i * HSp;
        dst[i * ld + d] = 0.0f;
    }
}
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

__global__ void __launch_bounds__(ATT_THREADS)
att_fwd_tc_kernel(float *out, float *lse, const float *q, const float *k, const float *v, int T, int NH, int NKV,
                  int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    const int ld = tc_ld(HS), ntiles = 2 * (tc_hsp(HS) / 16);
    float *Qs = sm, *Ks = Qs + ATT_T * ld, *Vs = Ks + ATT_T * ld, *Os = Vs + ATT_T * ld;
    float *Ss = Os + ATT_T * ld, *cr = Ss + ATT_T * TC_LDS;
    const int qb = gridDim.x - 1 - blockIdx.x; // the longest tiles start first
    const int h = blockIdx.y, b = blockIdx.z;
    const int t0 = qb * ATT_T, nq = min(ATT_T, T - t0), g = h / (NH / NKV);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const float *kb = k + (size_t)b * T * ks + (size_t)g * HS, *vb = v + (size_t)b * T * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile_tc(Qs, ld, q + ((size_t)b * T + t0) * qs + (size_t)h * HS, qs, nq, HS);
    zero_tile_tc(Os, ld, HS);
    float m_r[ATT_RPW], l_r[ATT_RPW];
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) { m_r[r] = -INFINITY; l_r[r] = 0.0f; }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_T) {
        const int nk = min(ATT_T, T - s0);
        __syncthreads(); // the previous tile's readers are done (and Qs/Os are written)
        load_tile_tc(Ks, ld, kb + (size_t)s0 * ks, ks, nk, HS);
        load_tile_tc(Vs, ld, vb + (size_t)s0 * ks, ks, nk, HS);
        __syncthreads();
        tc_scores(Ss, Qs, Ks, ld, HS, warp);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < ATT_RPW; r++) {
            const int i = warp + ATT_WARPS * r;
            const bool valid = lane < nk && s0 + lane <= t0 + i;
            float s = __fmul_rn(Ss[i * TC_LDS + lane], scale);
            s = valid ? s : -INFINITY;
            const float mnew = fmaxf(m_r[r], warp_max(s)); // finite: key s0 is always valid
            const float p = valid ? expf(__fsub_rn(s, mnew)) : 0.0f;
            const float c = expf(__fsub_rn(m_r[r], mnew)); // exp(−inf) = 0 on the first tile
            l_r[r] = __fadd_rn(__fmul_rn(l_r[r], c), warp_sum(p));
            m_r[r] = mnew;
            Ss[i * TC_LDS + lane] = p;
            if (lane == 0) cr[i] = c;
        }
        __syncthreads();
        // out = out·c + P·v, one (16, 16) output tile at a time
        for (int f = warp; f < ntiles; f += ATT_WARPS) {
            const int r0 = (f & 1) * 16, d0 = (f >> 1) * 16;
            float *o = Os + r0 * ld + d0;
            for (int e = lane; e < 256; e += 32) o[(e >> 4) * ld + (e & 15)] = __fmul_rn(o[(e >> 4) * ld + (e & 15)], cr[r0 + (e >> 4)]);
            __syncwarp();
            tc_acc c;
            wmma::load_matrix_sync(c, o, ld, wmma::mem_row_major);
            tc_mma<wmma::row_major, wmma::row_major>(c, Ss + r0 * TC_LDS, TC_LDS, 8, Vs + d0, ld, 8 * ld, ATT_T);
            wmma::store_matrix_sync(o, c, ld, wmma::mem_row_major);
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
        const int i = warp + ATT_WARPS * r;
        if (i >= nq) continue;
        const float inv = __fdiv_rn(1.0f, l_r[r]);
        float *o = out + ((size_t)b * T + t0 + i) * qs + (size_t)h * HS;
        for (int d = lane; d < HS; d += 32) o[d] = __fmul_rn(Os[i * ld + d], inv);
        if (lane == 0) lse[((size_t)b * NH + h) * T + t0 + i] = __fadd_rn(m_r[r], logf(l_r[r]));
    }
}

// P and dS of a (32, 32) tile in place: S and dP from the scores' tiles (rows: queries
// t0 + i, columns: keys s0 + j), lse and D per query row; masked entries zero.
__device__ __forceinline__ void tc_p_ds(float *Ss, float *dPs, const float *Ls, const float *Ds, int t0, int nq,
                                        int s0, int nk, float scale, int warp, int lane) {
#pragma unroll
    for (int r = 0; r < ATT_RPW; r++) {
        const int i = warp + ATT_WARPS * r;
        const bool valid = i < nq && lane < nk && s0 + lane <= t0 + i;
        const float p = expf(__fsub_rn(__fmul_rn(Ss[i * TC_LDS + lane], scale), Ls[i]));
        const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(dPs[i * TC_LDS + lane], Ds[i])), scale);
        Ss[i * TC_LDS + lane] = valid ? p : 0.0f;
        dPs[i * TC_LDS + lane] = valid ? ds : 0.0f;
    }
}

// dk, dv rows [s0, s0 + 32) of kv head g: the group's heads in order, query tiles in order.
__global__ void __launch_bounds__(ATT_THREADS)
att_dkdv_tc_kernel(float *dk, float *dv, const float *dq, const float *dout, const float *q, const float *k,
                   const float *v, const float *lse, int T, int NH, int NKV, int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    const int ld = tc_ld(HS), ntiles = 2 * (tc_hsp(HS) / 16);
    float *Ks = sm, *Vs = Ks + ATT_T * ld, *Qs = Vs + ATT_T * ld, *dOs = Qs + ATT_T * ld;
    float *dKs = dOs + ATT_T * ld, *dVs = dKs + ATT_T * ld;
    float *Ss = dVs + ATT_T * ld, *dPs = Ss + ATT_T * TC_LDS, *Ls = dPs + ATT_T * TC_LDS, *Ds = Ls + ATT_T;
    const int g = blockIdx.y, b = blockIdx.z, group = NH / NKV;
    const int s0 = blockIdx.x * ATT_T, nk = min(ATT_T, T - s0);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t ko = ((size_t)b * T + s0) * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile_tc(Ks, ld, k + ko, ks, nk, HS);
    load_tile_tc(Vs, ld, v + ko, ks, nk, HS);
    zero_tile_tc(dKs, ld, HS);
    zero_tile_tc(dVs, ld, HS);
    for (int h = g * group; h < (g + 1) * group; h++) {
        for (int t0 = s0; t0 < T; t0 += ATT_T) { // earlier query tiles see none of these keys
            const int nq = min(ATT_T, T - t0);
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            __syncthreads(); // the previous tile's readers are done
            load_tile_tc(Qs, ld, q + qo, qs, nq, HS);
            load_tile_tc(dOs, ld, dout + qo, qs, nq, HS);
            if (threadIdx.x < ATT_T) {
                const int i = threadIdx.x;
                Ls[i] = i < nq ? lse[((size_t)b * NH + h) * T + t0 + i] : 0.0f;
                Ds[i] = i < nq ? dq[qo + (size_t)i * qs] : 0.0f; // D parked in dq[row][0]
            }
            __syncthreads();
            tc_scores(Ss, Qs, Ks, ld, HS, warp);
            tc_scores(dPs, dOs, Vs, ld, HS, warp);
            __syncthreads();
            tc_p_ds(Ss, dPs, Ls, Ds, t0, nq, s0, nk, scale, warp, lane);
            __syncthreads();
            // dv += Pᵀ·dout, dk += dSᵀ·q (queries in order): Pᵀ's element (j, i) is P[i][j],
            // a column-major operand in place
            for (int f = warp; f < ntiles; f += ATT_WARPS) {
                const int j0 = (f & 1) * 16, d0 = (f >> 1) * 16;
                tc_acc c;
                wmma::load_matrix_sync(c, dVs + j0 * ld + d0, ld, wmma::mem_row_major);
                tc_mma<wmma::col_major, wmma::row_major>(c, Ss + j0, TC_LDS, 8 * TC_LDS, dOs + d0, ld, 8 * ld, ATT_T);
                wmma::store_matrix_sync(dVs + j0 * ld + d0, c, ld, wmma::mem_row_major);
                wmma::load_matrix_sync(c, dKs + j0 * ld + d0, ld, wmma::mem_row_major);
                tc_mma<wmma::col_major, wmma::row_major>(c, dPs + j0, TC_LDS, 8 * TC_LDS, Qs + d0, ld, 8 * ld, ATT_T);
                wmma::store_matrix_sync(dKs + j0 * ld + d0, c, ld, wmma::mem_row_major);
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
__global__ void __launch_bounds__(ATT_THREADS)
att_dq_tc_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse, int T,
                 int NH, int NKV, int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    const int ld = tc_ld(HS), ntiles = 2 * (tc_hsp(HS) / 16);
    float *Qs = sm, *dOs = Qs + ATT_T * ld, *Ks = dOs + ATT_T * ld, *Vs = Ks + ATT_T * ld, *dQs = Vs + ATT_T * ld;
    float *Ss = dQs + ATT_T * ld, *dPs = Ss + ATT_T * TC_LDS, *Ls = dPs + ATT_T * TC_LDS, *Ds = Ls + ATT_T;
    const int qb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int t0 = qb * ATT_T, nq = min(ATT_T, T - t0), g = h / (NH / NKV);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
    const float *kb = k + (size_t)b * T * ks + (size_t)g * HS, *vb = v + (size_t)b * T * ks + (size_t)g * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    load_tile_tc(Qs, ld, q + qo, qs, nq, HS);
    load_tile_tc(dOs, ld, dout + qo, qs, nq, HS);
    zero_tile_tc(dQs, ld, HS);
    if (threadIdx.x < ATT_T) {
        const int i = threadIdx.x;
        Ls[i] = i < nq ? lse[((size_t)b * NH + h) * T + t0 + i] : 0.0f;
        Ds[i] = i < nq ? dq[qo + (size_t)i * qs] : 0.0f;
    }
    for (int s0 = 0; s0 < t0 + nq; s0 += ATT_T) {
        const int nk = min(ATT_T, T - s0);
        __syncthreads();
        load_tile_tc(Ks, ld, kb + (size_t)s0 * ks, ks, nk, HS);
        load_tile_tc(Vs, ld, vb + (size_t)s0 * ks, ks, nk, HS);
        __syncthreads();
        tc_scores(Ss, Qs, Ks, ld, HS, warp);
        tc_scores(dPs, dOs, Vs, ld, HS, warp);
        __syncthreads();
        tc_p_ds(Ss, dPs, Ls, Ds, t0, nq, s0, nk, scale, warp, lane);
        __syncthreads();
        // dq += dS·k (keys in order)
        for (int f = warp; f < ntiles; f += ATT_WARPS) {
            const int i0 = (f & 1) * 16, d0 = (f >> 1) * 16;
            tc_acc c;
            wmma::load_matrix_sync(c, dQs + i0 * ld + d0, ld, wmma::mem_row_major);
            tc_mma<wmma::row_major, wmma::row_major>(c, dPs + i0 * TC_LDS, TC_LDS, 8, Ks + d0, ld, 8 * ld, ATT_T);
            wmma::store_matrix_sync(dQs + i0 * ld + d0, c, ld, wmma::mem_row_major);
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nq * HS; idx += ATT_THREADS) {
        const int i = idx / HS, d = idx - i * HS;
        dq[qo + (size_t)i * qs + d] = dQs[i * ld + d];
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
    const void *plain[] = {(const void *)att_d_kernel, (const void *)att_fwd_plain_kernel,
                           (const void *)att_dkdv_plain_kernel, (const void *)att_dq_plain_kernel};
    for (int i = 0; i < 4 && e == cudaSuccess; i++) e = cudaFuncGetAttributes(&a, plain[i]);
    if (e != cudaSuccess) return e;
    // The tiled kernels may use up to the opt-in limit of dynamic shared memory; should the
    // driver refuse, they keep the default 48 KiB (larger head sizes take the plain path).
    const void *tiled[] = {(const void *)att_fwd_kernel,    (const void *)att_dkdv_kernel,    (const void *)att_dq_kernel,
                           (const void *)att_fwd_tc_kernel, (const void *)att_dkdv_tc_kernel, (const void *)att_dq_tc_kernel};
    const int ntiled = (int)(sizeof tiled / sizeof tiled[0]);
    int limit = smem_optin > 48 * 1024 ? smem_optin : 48 * 1024;
    for (int i = 0; i < ntiled; i++) {
        if ((e = cudaFuncGetAttributes(&a, tiled[i])) != cudaSuccess) return e;
        int avail = limit - (int)a.sharedSizeBytes;
        if (limit > 48 * 1024 && cudaFuncSetAttribute(tiled[i], cudaFuncAttributeMaxDynamicSharedMemorySize, avail) != cudaSuccess) {
            (void)cudaGetLastError(); // clear the refused attribute; fall back to the default
            limit = 48 * 1024;
            for (int j = 0; j < i; j++)
                if ((e = cudaFuncSetAttribute(tiled[j], cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024)) != cudaSuccess)
                    return e;
        }
    }
    g_att_smem_limit = limit;
    return cudaSuccess;
}

static void att_check(const char *op, int B, int T, int NH, int NKV) {
    TT_REQUIRE(NKV > 0 && NH % NKV == 0, "%s: NH=%d must be a multiple of NKV=%d", op, NH, NKV);
    TT_REQUIRE(B <= 65535 && NH <= 65535, "%s: B=%d and NH=%d must be at most 65535 (grid y/z)", op, B, NH);
}

// The kernels a shape takes: the tensor-core ones where their tiles fit in shared memory,
// else the FP32 tiled ones where theirs do, else the plain ones (g_tt_cuda.attention_path
// forces the plain or FP32 tiled ones for tests).
enum { ATT_TC, ATT_TILED, ATT_PLAIN };
static int att_path(size_t tc_smem, size_t tiled_smem) {
    const int force = g_tt_cuda.attention_path;
    if (force == CUDA_ATT_AUTO && tc_smem <= (size_t)g_att_smem_limit) return ATT_TC;
    if (force != CUDA_ATT_PLAIN && tiled_smem <= (size_t)g_att_smem_limit) return ATT_TILED;
    return ATT_PLAIN;
}

extern "C" void cuda_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B,
                                       int T, int NH, int NKV, int HS) {
    NvtxRange range("attention_forward");
    if (B <= 0 || T <= 0 || NH <= 0 || HS <= 0) return;
    att_check("attention_forward", B, T, NH, NKV);
    const float scale = 1.0f / sqrtf((float)HS); // the CPU's expression, on the host
    const int path = att_path(fwd_tc_smem(HS), fwd_smem(HS));
    dim3 grid(CEIL_DIV(T, ATT_T), NH, B);
    if (path == ATT_TC) {
        att_fwd_tc_kernel<<<grid, ATT_THREADS, fwd_tc_smem(HS), g_tt_cuda.stream>>>(out, lse, q, k, v, T, NH, NKV, HS, scale);
        launchCheck("att_fwd_tc_kernel");
    } else if (path == ATT_TILED) {
        att_fwd_kernel<<<grid, ATT_THREADS, fwd_smem(HS), g_tt_cuda.stream>>>(out, lse, q, k, v, T, NH, NKV, HS, scale);
        launchCheck("att_fwd_kernel");
    } else {
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
    att_d_kernel<<<grid_1d(rows, 256), 256, 0, g_tt_cuda.stream>>>(dq, dout, out, rows, HS);
    launchCheck("att_d_kernel");
    const size_t smem_kv = dkdv_smem(HS), smem_q = dq_smem(HS), tc_kv = dkdv_tc_smem(HS), tc_q = dq_tc_smem(HS);
    const int path = att_path(tc_kv > tc_q ? tc_kv : tc_q, smem_kv > smem_q ? smem_kv : smem_q);
    dim3 grid_kv(CEIL_DIV(T, ATT_T), NKV, B), grid_q(CEIL_DIV(T, ATT_T), NH, B);
    if (path == ATT_TC) {
        att_dkdv_tc_kernel<<<grid_kv, ATT_THREADS, tc_kv, g_tt_cuda.stream>>>(dk, dv, dq, dout, q, k, v, lse, T, NH, NKV,
                                                                             HS, scale);
        launchCheck("att_dkdv_tc_kernel");
        att_dq_tc_kernel<<<grid_q, ATT_THREADS, tc_q, g_tt_cuda.stream>>>(dq, dout, q, k, v, lse, T, NH, NKV, HS, scale);
        launchCheck("att_dq_tc_kernel");
    } else if (path == ATT_TILED) {
        att_dkdv_kernel<<<grid_kv, ATT_THREADS, smem_kv, g_tt_cuda.stream>>>(dk, dv, dq, dout, q, k, v, lse, T, NH,
                                                                            NKV, HS, scale);
        launchCheck("att_dkdv_kernel");
        att_dq_kernel<<<grid_q, ATT_THREADS, smem_q, g_tt_cuda.stream>>>(dq, dout, q, k, v, lse, T, NH, NKV, HS, scale);
        launchCheck("att_dq_kernel");
    } else {
        const size_t wkv = (size_t)B * NKV * T, wq = (size_t)B * NH * T;
        att_dkdv_plain_kernel<<<(unsigned)CEIL_DIV(wkv, (size_t)ATT_WARPS), ATT_THREADS, 0, g_tt_cuda.stream>>>(
            dk, dv, dq, dout, q, k, v, lse, B, T, NH, NKV, HS, scale);
        launchCheck("att_dkdv_plain_kernel");
        att_dq_plain_kernel<<<(unsigned)CEIL_DIV(wq, (size_t)ATT_WARPS), ATT_THREADS, 0, g_tt_cuda.stream>>>(
            dq, dout, q, k, v, lse, B, T, NH, NKV, HS, scale);
        launchCheck("att_dq_plain_kernel");
    }
}
