// attention_mma.cu — the register-tiled attention kernels: attention.cu's first choice, for
// head sizes up to ATT_MMA_MAX_HS; it checks the shapes and calls the att_mma_* functions at
// the end of this file. On the H200 they took 1b's attention (T 2048, HS 64, 22 layers) from
// 594 ms a bench train step on the WMMA kernels to 279 ms.
//
// FlashAttention-2's structure: a block of 4 warps owns MMA_M = 64 rows of its own side
// (queries: forward, dq; keys: dk/dv), each warp 16 of them, and walks the other side in
// tiles of MMA_N = 32 rows through shared memory. Scores, probabilities and the outputs'
// accumulators stay in registers for the whole walk: the tile products are PTX mma.sync
// m16n8k8 TF32 instructions, whose fragment layouts PTX fixes (g = lane / 4, t = lane % 4):
//   A (16 × 8):  A(g, t), A(g + 8, t), A(g, t + 4), A(g + 8, t + 4)
//   B (8 × 8):   B(t, g), B(t + 4, g)
//   C (16 × 8):  C(g, 2t), C(g, 2t + 1), C(g + 8, 2t), C(g + 8, 2t + 1)
// so a row's softmax statistics are a reduction over the 4 lanes of a quad, and a score
// tile in C layout is the A operand of the next product as it stands, once the 8 keys of a
// k step are taken in the order 0, 2, 4, 6, 1, 3, 5, 7 (the B operand's rows likewise):
// A(g, t) = C(g, 2t), A(g, t + 4) = C(g, 2t + 1). Every product in 3xTF32 (x = hi + lo;
// lo·hi + hi·lo + hi·hi), as the WMMA kernels: FP32-level results. Tiles are HSP wide (head
// size rounded up to 32, 64 or 128, zeros beyond HS) with row stride HSP + 4: the fragment
// loads below hit 32 distinct banks. Each output element is accumulated by one thread in a
// fixed order: the same bits run to run. Every kernel reads and writes q, k, v, out and the
// gradients as FP32 words or as BF16 halves (E: the BF16 activations' attention_forward16 and
// attention_backward16, the same arithmetic on the widened halves, outputs rounded as stored).
#include "attention.cuh"
#include <mma.h>
using namespace nvcuda;

#define MMA_M 64                              // own rows per block (16 per warp)
#define MMA_N 32                              // rows per tile of the other side
static_assert(MMA_N == ATT_T, "load_row_stats loads ATT_T rows of statistics");

// D += A·B, one m16n8k8 TF32 product (the emulator has its own, tests/gpu/emu/include/mma.h)
__device__ __forceinline__ void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef TT_EMU
    emu_mma_m16n8k8_tf32(d, a, b);
#else
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// x = hi + lo, both TF32 (hi rounded to nearest, lo the rest rounded)
__device__ __forceinline__ void tf32_hl(float x, uint32_t &hi, uint32_t &lo) {
    const float h = wmma::__float_to_tf32(x);
    hi = __float_as_uint(h);
    lo = __float_as_uint(wmma::__float_to_tf32(__fsub_rn(x, h)));
}
// An operand fragment of N values, split
template <int N> struct frag {
    uint32_t hi[N], lo[N];
    __device__ __forceinline__ void set(int i, float x) { tf32_hl(x, hi[i], lo[i]); }
};
// d += A·B in 3xTF32, the small terms first
__device__ __forceinline__ void mma3(float d[4], const frag<4> &a, const frag<2> &b) {
    mma_tf32(d, a.lo, b.hi);
    mma_tf32(d, a.hi, b.lo);
    mma_tf32(d, a.hi, b.hi);
}
// A = rows [0, 16) × columns [0, 8) of X (row-major, stride LD)
template <int LD> __device__ __forceinline__ void frag_a(frag<4> &a, const float *X, int g, int t) {
    a.set(0, X[g * LD + t]);
    a.set(1, X[(g + 8) * LD + t]);
    a.set(2, X[g * LD + t + 4]);
    a.set(3, X[(g + 8) * LD + t + 4]);
}
// A from a score tile in C layout, the k step's keys in the order 0, 2, 4, 6, 1, 3, 5, 7
__device__ __forceinline__ void frag_a_c(frag<4> &a, const float c[4]) {
    a.set(0, c[0]);
    a.set(1, c[2]);
    a.set(2, c[1]);
    a.set(3, c[3]);
}
// B = Yᵀ for rows [0, 8) × columns [0, 8) of Y (row-major, stride LD): B(k, n) = Y(n, k)
template <int LD> __device__ __forceinline__ void frag_b_t(frag<2> &b, const float *Y, int g, int t) {
    b.set(0, Y[g * LD + t]);
    b.set(1, Y[g * LD + t + 4]);
}
// B = rows [0, 8) × columns [0, 8) of Y, its rows in the order 0, 2, 4, 6, 1, 3, 5, 7
template <int LD> __device__ __forceinline__ void frag_b_p(frag<2> &b, const float *Y, int g, int t) {
    b.set(0, Y[2 * t * LD + g]);
    b.set(1, Y[(2 * t + 1) * LD + g]);
}
// s[n] = X·Yᵀ for the warp's 16 rows of X and the tile's 32 rows of Y (n: 8 of them), over HSP
template <int HSP>
__device__ __forceinline__ void mma_scores(float s[4][4], const float *X, const float *Y, int g, int t) {
    constexpr int LD = HSP + 4;
#pragma unroll
    for (int n = 0; n < 4; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HSP; kk += 8) {
        frag<4> a;
        frag_a<LD>(a, X + kk, g, t);
#pragma unroll
        for (int n = 0; n < 4; n++) {
            frag<2> b;
            frag_b_t<LD>(b, Y + n * 8 * LD + kk, g, t);
            mma3(s[n], a, b);
        }
    }
}
// acc[n] += P·Y: P the warp's (16, 32) score tile in C layout, Y the tile's (32, HSP) rows
template <int HSP>
__device__ __forceinline__ void mma_acc(float acc[HSP / 8][4], const float p[4][4], const float *Y, int g, int t) {
    constexpr int LD = HSP + 4;
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        frag<4> a;
        frag_a_c(a, p[kc]);
#pragma unroll
        for (int n = 0; n < HSP / 8; n++) {
            frag<2> b;
            frag_b_p<LD>(b, Y + kc * 8 * LD + n * 8, g, t);
            mma3(acc[n], a, b);
        }
    }
}
// A kernel's head size padding and element type (one template argument: launches take no comma)
template <int H, typename T> struct mma_of {
    static constexpr int HSP = H;
    typedef T E;
};
// the head size a shape's tiles are padded to; dynamic shared memory of own / other tiles and rows
static int mma_hsp(int HS) { return HS <= 32 ? 32 : HS <= 64 ? 64 : 128; }
static size_t mma_smem(int HS, int own_tiles, int other_tiles, int rows) {
    return sizeof(float) * (((size_t)own_tiles * MMA_M + (size_t)other_tiles * MMA_N) * (mma_hsp(HS) + 4) + rows);
}
static size_t fwd_mma_smem(int HS) { return mma_smem(HS, 1, 2, 0); }          // Q; K, V
static size_t dkdv_mma_smem(int HS) { return mma_smem(HS, 2, 2, 2 * MMA_N); } // K, V; Q, dout; lse, D
static size_t dq_mma_smem(int HS) { return mma_smem(HS, 2, 2, 0); }           // Q, dout; K, V
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Row j (0: g, 1: g + 8) of the warp's accumulators in C layout, times mul, into dst[0, HS)
// (FP32 words, or BF16 halves rounded: st_elem): the thread's columns 8n + 2t and 8n + 2t + 1
template <int NT, typename E>
__device__ __forceinline__ void store_row(E *dst, const float acc[NT][4], int j, int t, int HS, float mul) {
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int d = n * 8 + 2 * t + e;
            if (d < HS) st_elem(dst, d, __fmul_rn(acc[n][2 * j + e], mul));
        }
}

// forward, block (64 query rows, h, b): online softmax per row in registers (the quad's four
// lanes hold the same m, l), out rescaled by exp(m_old − m_new)
template <class P>
__global__ void __launch_bounds__(ATT_THREADS)
att_fwd_mma(typename P::E *out, float *lse, const typename P::E *q, const typename P::E *k, const typename P::E *v,
            int T, int NH, int NKV, int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    constexpr int HSP = P::HSP;
    typedef typename P::E E;
    constexpr int LD = HSP + 4, NT = HSP / 8;
    float *Qs = sm, *Ks = Qs + MMA_M * LD, *Vs = Ks + MMA_N * LD;
    const att_qrows<E> Q(k, v, MMA_M, T, NH, NKV, HS);
    const int t0 = Q.t0, nq = Q.nq;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int r0 = 16 * warp; // the warp's rows: t0 + r0 + g + 8j, j = 0, 1
    load_tiles<1, E>(Qs, q + Q.qo, NULL, NULL, LD, HSP, MMA_M, Q.qs, nq, HS);
    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int s0 = 0; s0 < t0 + nq; s0 += MMA_N) {
        const int nk = min(MMA_N, T - s0);
        __syncthreads(); // the previous tile's readers are done
        load_tiles<2>(Ks, Q.kb + (size_t)s0 * Q.ks, Vs, Q.vb + (size_t)s0 * Q.ks, LD, HSP, MMA_N, Q.ks, nk, HS);
        __syncthreads();
        if (s0 > t0 + r0 + 15) continue; // every key after the warp's queries
        float s[4][4];
        mma_scores<HSP>(s, Qs + r0 * LD, Ks, g, t);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = n * 8 + 2 * t + (e & 1), row = t0 + r0 + g + 8 * (e >> 1);
                const bool valid = key < nk && s0 + key <= row;
                s[n][e] = valid ? __fmul_rn(s[n][e], scale) : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
            }
        float c[2], ls[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const float mnew = fmaxf(m[j], quad_max(mx[j])); // finite: key 0 is in every row's first tile
            c[j] = expf(__fsub_rn(m[j], mnew));              // exp(−inf) = 0 on the first tile
            m[j] = mnew;
        }
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[n][e] = expf(__fsub_rn(s[n][e], m[e >> 1])); // masked: exp(−inf) = 0
                ls[e >> 1] = __fadd_rn(ls[e >> 1], s[n][e]);
            }
#pragma unroll
        for (int j = 0; j < 2; j++) l[j] = __fadd_rn(__fmul_rn(l[j], c[j]), quad_sum(ls[j]));
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[n][e] = __fmul_rn(o[n][e], c[e >> 1]);
        mma_acc<HSP>(o, s, Vs, g, t);
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = r0 + g + 8 * j;
        if (i >= nq) continue;
        store_row<NT>(out + Q.qo + (size_t)i * Q.qs, o, j, t, HS, __fdiv_rn(1.0f, l[j]));
        if (t == 0) lse[Q.lo + i] = __fadd_rn(m[j], logf(l[j]));
    }
}

// P = exp(S·scale − L) and dS = P·(dP − D)·scale for a (16, 32) tile in C layout, in place
// (s becomes P, dp becomes dS), masked entries zero. Row r, column c of element (n, e):
// r = g + 8(e / 2), c = 8n + 2t + e % 2; L, D and validity come from the callers' maps.
template <class LF, class DF, class Valid>
__device__ __forceinline__ void mma_p_ds(float s[4][4], float dp[4][4], float scale, int g, int t, LF L, DF D,
                                         Valid valid) {
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = g + 8 * (e >> 1), c = n * 8 + 2 * t + (e & 1);
            const bool ok = valid(r, c);
            const float p = expf(__fsub_rn(__fmul_rn(s[n][e], scale), L(r, c)));
            const float ds = __fmul_rn(__fmul_rn(p, __fsub_rn(dp[n][e], D(r, c))), scale);
            s[n][e] = ok ? p : 0.0f;
            dp[n][e] = ok ? ds : 0.0f;
        }
}

// dk, dv rows [s0, s0 + 64) of kv head g: the group's heads in order, query tiles in order.
// Each warp computes its 16 keys' transposed tiles Sᵀ = k·qᵀ and dPᵀ = v·doutᵀ, so that
// dv += Pᵀ·dout and dk += dSᵀ·q take them as A operands in place.
template <class P>
__global__ void __launch_bounds__(ATT_THREADS)
att_dkdv_mma(typename P::E *dk, typename P::E *dv, const float *D, int div, const typename P::E *dout,
             const typename P::E *q, const typename P::E *k, const typename P::E *v, const float *lse, int T, int NH,
             int NKV, int HS, float scale) {
    extern __shared__ __align__(128) float sm[];
    constexpr int HSP = P::HSP;
    constexpr int LD = HSP + 4, NT = HSP / 8;
    float *Ks = sm, *Vs = Ks + MMA_M * LD, *Qs = Vs + MMA_M * LD, *dOs = Qs + MMA_N * LD;
    float *Ls = dOs + MMA_N * LD, *Ds = Ls + MMA_N;
    const int kvh = blockIdx.y, b = blockIdx.z, group = NH / NKV;
    const int s0 = blockIdx.x * MMA_M, nk = min(MMA_M, T - s0);
    const size_t qs = (size_t)NH * HS, ks = (size_t)NKV * HS;
    const size_t ko = ((size_t)b * T + s0) * ks + (size_t)kvh * HS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int r0 = 16 * warp; // the warp's keys: s0 + r0 + g + 8j
    load_tiles<2>(Ks, k + ko, Vs, v + ko, LD, HSP, MMA_M, ks, nk, HS);
    float dK[NT][4], dV[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dK[n][e] = dV[n][e] = 0.0f;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        for (int t0 = s0; t0 < T; t0 += MMA_N) { // earlier query tiles see none of these keys
            const int nq = min(MMA_N, T - t0);
            const size_t qo = ((size_t)b * T + t0) * qs + (size_t)h * HS;
            __syncthreads(); // the previous tile's readers are done
            load_tiles<2>(Qs, q + qo, dOs, dout + qo, LD, HSP, MMA_N, qs, nq, HS);
            load_row_stats(Ls, Ds, lse, D, div, b, h, T, NH, t0, nq, qo, qs);
            __syncthreads();
            if (t0 + MMA_N - 1 < s0 + r0) continue; // every query before the warp's keys
            float st[4][4], dpt[4][4];
            mma_scores<HSP>(st, Ks + r0 * LD, Qs, g, t);
            mma_scores<HSP>(dpt, Vs + r0 * LD, dOs, g, t);
            mma_p_ds(st, dpt, scale, g, t, [&](int, int c) { return Ls[c]; }, [&](int, int c) { return Ds[c]; },
                     [&](int r, int c) { return c < nq && s0 + r0 + r <= t0 + c; });
            mma_acc<HSP>(dV, st, dOs, g, t);
            mma_acc<HSP>(dK, dpt, Qs, g, t);
        }
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int r = r0 + g + 8 * j;
        if (r >= nk) continue;
        store_row<NT>(dk + ko + (size_t)r * ks, dK, j, t, HS, 1.0f);
        store_row<NT>(dv + ko + (size_t)r * ks, dV, j, t, HS, 1.0f);
    }
}

// dq rows [t0, t0 + 64) of head h: reads the rows' D first (parked in dq: overwritten last)
template <class P>
__global__ void __launch_bounds__(ATT_THREADS)
att_dq_mma(typename P::E *dq, const float *D, int div, const typename P::E *dout, const typename P::E *q,
           const typename P::E *k, const typename P::E *v, const float *lse, int T, int NH, int NKV, int HS,
           float scale) {
    extern __shared__ __align__(128) float sm[];
    constexpr int HSP = P::HSP;
    typedef typename P::E E;
    constexpr int LD = HSP + 4, NT = HSP / 8;
    float *Qs = sm, *dOs = Qs + MMA_M * LD, *Ks = dOs + MMA_M * LD, *Vs = Ks + MMA_N * LD;
    const att_qrows<E> Q(k, v, MMA_M, T, NH, NKV, HS);
    const int t0 = Q.t0, nq = Q.nq;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int r0 = 16 * warp;
    float Lr[2], Dr[2];
#pragma unroll
    for (int j = 0; j < 2; j++) { // the warp's rows' lse and D (zeros past nq)
        const int i = r0 + g + 8 * j;
        Lr[j] = i < nq ? lse[Q.lo + i] : 0.0f;
        Dr[j] = i < nq ? att_d_of(D, div, Q.qo, Q.qs, i) : 0.0f;
    }
    load_tiles<2>(Qs, q + Q.qo, dOs, dout + Q.qo, LD, HSP, MMA_M, Q.qs, nq, HS);
    float dQ[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) dQ[n][0] = dQ[n][1] = dQ[n][2] = dQ[n][3] = 0.0f;
    for (int s0 = 0; s0 < t0 + nq; s0 += MMA_N) {
        const int nk = min(MMA_N, T - s0);
        __syncthreads();
        load_tiles<2>(Ks, Q.kb + (size_t)s0 * Q.ks, Vs, Q.vb + (size_t)s0 * Q.ks, LD, HSP, MMA_N, Q.ks, nk, HS);
        __syncthreads();
        if (s0 > t0 + r0 + 15) continue;
        float s[4][4], dp[4][4];
        mma_scores<HSP>(s, Qs + r0 * LD, Ks, g, t);
        mma_scores<HSP>(dp, dOs + r0 * LD, Vs, g, t);
        mma_p_ds(s, dp, scale, g, t, [&](int r, int) { return Lr[r >> 3]; }, [&](int r, int) { return Dr[r >> 3]; },
                 [&](int r, int c) { return r0 + r < nq && c < nk && s0 + c <= t0 + r0 + r; });
        mma_acc<HSP>(dQ, dp, Ks, g, t);
    }
    // every lane has read its rows' D (above, before the first barrier of the loop: T ≥ 1)
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = r0 + g + 8 * j;
        if (i >= nq) continue;
        store_row<NT>(dq + Q.qo + (size_t)i * Q.qs, dQ, j, t, HS, 1.0f);
    }
}

// ---------------------------------------------------------------- launchers
template <int HSP, typename E>
static void fwd_mma(E *out, float *lse, const E *q, const E *k, const E *v, int B, int T, int NH, int NKV, int HS,
                    float scale) {
    dim3 grid(CEIL_DIV(T, MMA_M), NH, B);
    typedef mma_of<HSP, E> P;
    att_fwd_mma<P><<<grid, ATT_THREADS, fwd_mma_smem(HS), g_tt_cuda.stream>>>(out, lse, q, k, v, T, NH, NKV, HS, scale);
    launchCheck("att_fwd_mma");
}
template <int HSP, typename E>
static void bwd_mma(E *dq, E *dk, E *dv, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                    const float *D, int div, int B, int T, int NH, int NKV, int HS, float scale) {
    dim3 grid_kv(CEIL_DIV(T, MMA_M), NKV, B), grid_q(CEIL_DIV(T, MMA_M), NH, B);
    typedef mma_of<HSP, E> P;
    att_dkdv_mma<P><<<grid_kv, ATT_THREADS, dkdv_mma_smem(HS), g_tt_cuda.stream>>>(dk, dv, D, div, dout, q, k, v, lse, T, NH, NKV, HS, scale);
    launchCheck("att_dkdv_mma");
    att_dq_mma<P><<<grid_q, ATT_THREADS, dq_mma_smem(HS), g_tt_cuda.stream>>>(dq, D, div, dout, q, k, v, lse, T, NH, NKV, HS, scale);
    launchCheck("att_dq_mma");
}

size_t att_mma_fwd_smem(int HS) { return fwd_mma_smem(HS); }
size_t att_mma_bwd_smem(int HS) {
    const size_t kv = dkdv_mma_smem(HS), q = dq_mma_smem(HS);
    return kv > q ? kv : q;
}
template <int HSP, typename E> static void mma_kernels(const void **k) {
    k[0] = (const void *)att_fwd_mma<mma_of<HSP, E> >;
    k[1] = (const void *)att_dkdv_mma<mma_of<HSP, E> >;
    k[2] = (const void *)att_dq_mma<mma_of<HSP, E> >;
}
cudaError_t att_mma_set_smem(int limit) {
    const void *k[18];
    mma_kernels<32, float>(k), mma_kernels<64, float>(k + 3), mma_kernels<128, float>(k + 6);
    mma_kernels<32, uint16_t>(k + 9), mma_kernels<64, uint16_t>(k + 12), mma_kernels<128, uint16_t>(k + 15);
    return att_set_smem(k, 18, limit);
}
template <typename E>
void att_mma_forward(E *out, float *lse, const E *q, const E *k, const E *v, int B, int T, int NH, int NKV, int HS,
                     float scale) {
    const int hsp = mma_hsp(HS);
    if (hsp == 32) fwd_mma<32>(out, lse, q, k, v, B, T, NH, NKV, HS, scale);
    else if (hsp == 64) fwd_mma<64>(out, lse, q, k, v, B, T, NH, NKV, HS, scale);
    else fwd_mma<128>(out, lse, q, k, v, B, T, NH, NKV, HS, scale);
}
template <typename E>
void att_mma_backward(E *dq, E *dk, E *dv, const E *dout, const E *q, const E *k, const E *v, const float *lse,
                      const float *D, int div, int B, int T, int NH, int NKV, int HS, float scale) {
    const int hsp = mma_hsp(HS);
    if (hsp == 32) bwd_mma<32>(dq, dk, dv, dout, q, k, v, lse, D, div, B, T, NH, NKV, HS, scale);
    else if (hsp == 64) bwd_mma<64>(dq, dk, dv, dout, q, k, v, lse, D, div, B, T, NH, NKV, HS, scale);
    else bwd_mma<128>(dq, dk, dv, dout, q, k, v, lse, D, div, B, T, NH, NKV, HS, scale);
}
template void att_mma_forward<float>(float *, float *, const float *, const float *, const float *, int, int, int, int,
                                     int, float);
template void att_mma_forward<uint16_t>(uint16_t *, float *, const uint16_t *, const uint16_t *, const uint16_t *, int,
                                        int, int, int, int, float);
template void att_mma_backward<float>(float *, float *, float *, const float *, const float *, const float *,
                                      const float *, const float *, const float *, int, int, int, int, int, int, float);
template void att_mma_backward<uint16_t>(uint16_t *, uint16_t *, uint16_t *, const uint16_t *, const uint16_t *,
                                         const uint16_t *, const uint16_t *, const float *, const float *, int, int,
                                         int, int, int, int, float);
