// matmul.cu — the three products of a linear layer on cuBLASLt (kernels.h "matmul"),
// row-major with weights (OC, IC) as in nn.Linear.
//
// cuBLASLt is column-major, so each row-major product is issued as its transpose (a
// row-major (R, C) matrix is a column-major (C, R) one), as llm.c does:
//   forward   out (N, OC) = inp · wᵀ      ->  outᵀ (OC, N) = op_T(w) · inpᵀ
//   bwd input dinp (N, IC) (+)= dout · w  ->  dinpᵀ (IC, N) = w · doutᵀ
//   bwd weight dw (OC, IC) += doutᵀ · inp ->  dwᵀ (IC, OC) += inpᵀ · op_T(doutᵀ)
//
// BF16 mode: the FP32 inputs are converted to BF16 (round to nearest even, as bf16.c) into
// the scratch, then BF16 x BF16 -> FP32 with CUBLAS_COMPUTE_32F. The weight is converted
// whole (a BF16 one, the _w16 products', is copied there as it is: the step hands them the
// shard's BF16 compute copy, which no pass widens to FP32 first); activations go in chunks
// of rows so the scratch stays bounded (a few tens of MiB plus the largest weight) however
// large N is: forward and backward-input cut the output rows (each chunk its own GEMM,
// independent outputs), backward-weight cuts the inner dimension N (each chunk accumulates
// into dw with beta = 1, in chunk order). Chunk sizes depend only on the shape (and a
// constant), never on the budget or the scratch size, so the bits are a function of the
// shape and the device. FP32 mode: one GEMM on the FP32 inputs, CUBLAS_COMPUTE_32F (which
// never uses TF32; that needs COMPUTE_32F_FAST_TF32).
//
// Algorithm choice: cuBLASLt's heuristic, with a fixed workspace (CUDA_LT_WORKSPACE_BYTES)
// and the pointers' real alignments declared, so the same shape and alignment always get
// the same algorithm. cuBLAS documents bitwise-identical results run to run on GPUs of the
// same architecture and number of SMs, one stream at a time (its "Results
// Reproducibility"); tests/gpu checks it on our shapes. When cuBLASLt offers no algorithm
// for a shape, a plain FP32-accumulating kernel (one thread per output, products added in
// k order) takes over, with one notice.
//
// Degenerate shapes as the CPU twin: nothing for N or OC (forward) = 0; an inner dimension
// of 0 writes zeros to "=" outputs. Called through the CUDA backend's op table.
#include <cublasLt.h>
#include "common.cuh"

#define MM_CHUNK_ELEMS ((size_t)16 << 20) // BF16 activation elements per chunk (32 MiB)

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }
static size_t chunk_elems(void) { return g_tt_cuda.matmul_chunk_elems ? g_tt_cuda.matmul_chunk_elems : MM_CHUNK_ELEMS; }

size_t tt_matmul_scratch_bytes(size_t max_weight, int fp32_matmul) {
    if (fp32_matmul) return 0;
    // the weight, then one chunk: a forward or backward-input chunk's operand halves and, for
    // BF16 outputs, its FP32 product (stage_layout); backward-weight's two operands within the
    // same bound (matmul_backward_weight_any); plus the padding between them
    return align256(max_weight * 2) + MM_CHUNK_ELEMS * 2 + 256;
}

static void cublas_check(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "tiertrain: cuBLASLt error at %s:%d: %s: %s (%d)\n", file, line, what, cublasLtGetStatusString(s), (int)s);
    exit(1);
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------- kernels
// Column-major C (m, n) = op(A) (m, k) · op(B) (k, n) + beta·C (beta 0: C not read).
// One thread per element of C, products added in k order with FP32 FMAs.
template <typename T>
__global__ void gemm_fallback_kernel(int transa, int transb, int m, int n, int k, const T *A, int lda,
                                     const T *B, int ldb, float beta, float *C, int ldc) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    for (int j = blockIdx.y; j < n; j += gridDim.y) {
        float acc = 0.0f;
        for (int l = 0; l < k; l++) {
            float a = transa ? ld_elem(A, (size_t)i * lda + l) : ld_elem(A, (size_t)l * lda + i);
            float b = transb ? ld_elem(B, (size_t)l * ldb + j) : ld_elem(B, (size_t)j * ldb + l);
            acc = __fmaf_rn(a, b, acc);
        }
        float *c = C + (size_t)j * ldc + i;
        *c = beta == 0.0f ? acc : __fadd_rn(__fmul_rn(beta, *c), acc);
    }
}

cudaError_t tt_matmul_setup(void) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, gemm_fallback_kernel<float>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, gemm_fallback_kernel<uint16_t>);
    return e;
}


// ---------------------------------------------------------------- one GEMM
// Largest power of two ≤ 256 dividing the address: what the pointer guarantees.
static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t r = 256;
    while (r > 1 && (a % r) != 0) r >>= 1;
    return r;
}

// cuBLASLt for column-major C (m, n) = op(A) · op(B) + beta·C; false when it offers no
// algorithm for this problem (the caller falls back). c_as: the address whose alignment
// cuBLASLt is told for C (NULL: C's own; a staged output declares the one it stands for, no
// larger than its own, so that it gets the algorithm, and so the order of the additions, of
// the product written there).
static bool lt_gemm(int transa, int transb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                    float beta, float *C, int ldc, cudaDataType_t ab, const void *c_as) {
    cublasLtHandle_t lt = (cublasLtHandle_t)g_tt_cuda.lt;
    TT_REQUIRE(lt != NULL, "matmul: cuda_kernels_init was not called");
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, ab, transa ? k : m, transa ? m : k, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, ab, transb ? n : k, transb ? k : n, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc));
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = g_tt_cuda.lt_ws_bytes;
    uint32_t al_a = align_of(A), al_b = align_of(B), al_c = align_of(c_as ? c_as : C);
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof heur);
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(st);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && heur.state == CUBLAS_STATUS_SUCCESS;
    if (ok) {
        const float alpha = 1.0f; // host scalars (the default pointer mode), read during the call
        cublasCheck(cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, g_tt_cuda.lt_ws,
                                   g_tt_cuda.lt_ws_bytes, g_tt_cuda.stream));
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatmulDescDestroy(op));
    return ok;
}

static void gemm(int transa, int transb, int m, int n, int k, const void *A, int lda, const void *B, int ldb,
                 float beta, float *C, int ldc, cudaDataType_t ab, const void *c_as = NULL) {
    if (!g_tt_cuda.force_gemm_fallback && lt_gemm(transa, transb, m, n, k, A, lda, B, ldb, beta, C, ldc, ab, c_as))
        return;
    static int told = 0; // one notice per process (the compute thread is the only caller)
    if (!g_tt_cuda.force_gemm_fallback && !told) {
        told = 1;
        fprintf(stderr, "tiertrain: cuBLASLt offers no algorithm for a %d x %d x %d GEMM; using the plain (slow) kernel\n",
                m, n, k);
    }
    dim3 grid(CEIL_DIV(m, 128), n < 65535 ? n : 65535);
    if (ab == CUDA_R_32F)
        gemm_fallback_kernel<float><<<grid, 128, 0, g_tt_cuda.stream>>>(transa, transb, m, n, k, (const float *)A, lda,
                                                                      (const float *)B, ldb, beta, C, ldc);
    else
        gemm_fallback_kernel<uint16_t><<<grid, 128, 0, g_tt_cuda.stream>>>(
            transa, transb, m, n, k, (const uint16_t *)A, lda, (const uint16_t *)B, ldb, beta, C, ldc);
    launchCheck("gemm_fallback_kernel");
}

// ---------------------------------------------------------------- BF16 staging
// Rows per chunk: budget / per_row (bytes), at least 1, at most N.
static int rows_per_chunk(size_t budget, size_t per_row, int N) {
    size_t r = budget / per_row;
    if (r < 1) r = 1;
    return r < (size_t)N ? (int)r : N;
}

static void require_scratch(size_t need, const char *op, int N, int IC, int OC) {
    TT_REQUIRE(need <= g_tt_cuda.scratch_bytes,
               "%s N=%d IC=%d OC=%d needs %zu bytes of BF16 staging, the scratch has %zu "
               "(size it with cuda_kernels_scratch_bytes for this model)", op, N, IC, OC, need, g_tt_cuda.scratch_bytes);
}

// The weight (OC, IC) as the BF16 operand, at the scratch's head (256-aligned): narrowed from
// FP32 (w32), or copied as it is (w16: the BF16 compute copy, whose tensor may start anywhere
// in its shard; at the scratch's alignment cuBLASLt picks the algorithm, and so adds in the
// order, that the widened copy of the same weight gets).
static uint16_t *stage_weight(const float *w32, const uint16_t *w16, size_t n) {
    uint16_t *wb = (uint16_t *)g_tt_cuda.scratch;
    if (w16) cudaCheck(cudaMemcpyAsync(wb, w16, n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, g_tt_cuda.stream));
    else cuda_bf16_from_f32_n(wb, w32, n);
    return wb;
}

// n elements of an activation from element off as the BF16 operand: FP32 (h16 0) narrowed into
// dst (256-aligned scratch); BF16 halves (h16 1) read where they are when 256-aligned, else
// copied to dst — either way cuBLASLt sees the operand, and the alignment, that the FP32
// form's narrowing gives: the same algorithm and bits.
static const uint16_t *stage_rows(uint16_t *dst, const void *src, int h16, size_t off, size_t n) {
    if (!h16) {
        cuda_bf16_from_f32_n(dst, (const float *)src + off, n);
        return dst;
    }
    const uint16_t *p = (const uint16_t *)src + off;
    if (align_of(p) == 256) return p;
    cudaCheck(cudaMemcpyAsync(dst, p, n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, g_tt_cuda.stream));
    return dst;
}

// FP32 mode with BF16 weights: the weight widened into the caller's FP32 scratch (exact).
static const float *widen_weight(const float *w32, const uint16_t *w16, float *scratch, size_t n) {
    if (!w16) return w32;
    cuda_bf16_to_f32_n(scratch, w16, n);
    return scratch;
}

// ---------------------------------------------------------------- the three products
// Forward and backward-input in BF16 mode run chunk by chunk of output rows: the weight at the
// scratch's head, then the chunk's BF16 operand, then (o16: BF16 outputs) the chunk's FP32
// product, narrowed from there into the output's halves. A chunk's rows are sized for all
// three in both forms (per row: the operand's halves and the output's words), so a product
// takes the same GEMMs whether its activations are FP32 or halves. All of it fits in the
// weight plus 2·chunk_elems bytes (tt_matmul_scratch_bytes' padding covers the alignment).
typedef struct {
    uint16_t *w, *a; // staged weight and operand chunk
    float *o;        // o16's FP32 chunk
    int rn;          // rows per chunk
} mm_stage_t;

static mm_stage_t stage_layout(const char *what, int N, int IC, int OC, int ain, int oout) {
    mm_stage_t s;
    s.rn = rows_per_chunk(2 * chunk_elems(), (size_t)ain * 2 + (size_t)oout * 4, N);
    const size_t wbytes = align256((size_t)OC * IC * 2), abytes = align256((size_t)s.rn * ain * 2);
    require_scratch(wbytes + abytes + (size_t)s.rn * oout * 4, what, N, IC, OC);
    s.w = (uint16_t *)g_tt_cuda.scratch;
    s.a = (uint16_t *)((char *)g_tt_cuda.scratch + wbytes);
    s.o = (float *)((char *)g_tt_cuda.scratch + wbytes + abytes);
    return s;
}

// out (N, OC) = inp · wᵀ: inp FP32 or BF16 halves (a16), out FP32 or BF16 halves (o16); the
// weight FP32 (w32) or BF16 (w16; scratch: OC·IC floats for FP32 mode, which takes FP32 alone)
static void matmul_forward_any(void *out, int o16, const void *inp, int a16, const float *w32, const uint16_t *w16,
                               float *scratch, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) {
        cudaCheck(cudaMemsetAsync(out, 0, (size_t)N * OC * (o16 ? 2 : 4), g_tt_cuda.stream));
        return;
    }
    if (g_tt_cuda.fp32_matmul) {
        gemm(1, 0, OC, N, IC, widen_weight(w32, w16, scratch, (size_t)OC * IC), IC, inp, IC, 0.0f, (float *)out, OC,
             CUDA_R_32F);
        return;
    }
    const mm_stage_t s = stage_layout("matmul_forward", N, IC, OC, IC, OC);
    const uint16_t *wb = stage_weight(w32, w16, (size_t)OC * IC);
    for (int r0 = 0; r0 < N; r0 += s.rn) { // stream order: a chunk's staging waits for the previous GEMM
        const int rows = N - r0 < s.rn ? N - r0 : s.rn;
        const size_t o = (size_t)r0 * OC, nout = (size_t)rows * OC;
        const uint16_t *ab = stage_rows(s.a, inp, a16, (size_t)r0 * IC, (size_t)rows * IC);
        float *o32 = (float *)out + o;
        gemm(1, 0, OC, rows, IC, wb, IC, ab, IC, 0.0f, o16 ? s.o : o32, OC, CUDA_R_16BF, o32);
        if (o16) cuda_bf16_from_f32_n((uint16_t *)out + o, s.o, nout);
    }
}

// dinp (N, IC) (+)= dout · w: dout FP32 or BF16 halves (a16), dinp FP32 or BF16 halves (o16:
// "="), the weight in either form (as matmul_forward_any)
static void matmul_backward_input_any(void *dinp, int o16, const void *dout, int a16, const float *w32,
                                      const uint16_t *w16, float *scratch, int N, int IC, int OC, int accumulate) {
    if (N <= 0 || IC <= 0) return;
    if (OC <= 0) {
        if (!accumulate) cudaCheck(cudaMemsetAsync(dinp, 0, (size_t)N * IC * (o16 ? 2 : 4), g_tt_cuda.stream));
        return;
    }
    const float beta = accumulate ? 1.0f : 0.0f;
    if (g_tt_cuda.fp32_matmul) {
        gemm(0, 0, IC, N, OC, widen_weight(w32, w16, scratch, (size_t)OC * IC), IC, dout, OC, beta, (float *)dinp, IC,
             CUDA_R_32F);
        return;
    }
    const mm_stage_t s = stage_layout("matmul_backward_input", N, IC, OC, OC, IC);
    const uint16_t *wb = stage_weight(w32, w16, (size_t)OC * IC);
    for (int r0 = 0; r0 < N; r0 += s.rn) {
        const int rows = N - r0 < s.rn ? N - r0 : s.rn;
        const size_t o = (size_t)r0 * IC;
        const uint16_t *db = stage_rows(s.a, dout, a16, (size_t)r0 * OC, (size_t)rows * OC);
        float *o32 = (float *)dinp + o;
        gemm(0, 0, IC, rows, OC, wb, IC, db, OC, beta, o16 ? s.o : o32, IC, CUDA_R_16BF, o32);
        if (o16) cuda_bf16_from_f32_n((uint16_t *)dinp + o, s.o, (size_t)rows * IC);
    }
}

// dw (OC, IC) += doutᵀ · inp, dout and inp FP32 or BF16 halves (a16, b16)
static void matmul_backward_weight_any(float *dw, const void *dout, int a16, const void *inp, int b16, int N, int IC,
                                       int OC) {
    if (N <= 0 || IC <= 0 || OC <= 0) return;
    if (g_tt_cuda.fp32_matmul) {
        gemm(0, 1, IC, OC, N, inp, IC, dout, OC, 1.0f, dw, IC, CUDA_R_32F);
        return;
    }
    // Both operands are activations: chunks of rows of inp and dout together, sized so they
    // fit where the forward's weight and chunk would (OC·IC + chunk elements): few chunks
    // for wide layers, since each one reads and writes all of dw.
    const int rn = rows_per_chunk(chunk_elems() + (size_t)OC * IC, (size_t)IC + OC, N);
    const size_t ibytes = align256((size_t)rn * IC * 2);
    require_scratch(ibytes + (size_t)rn * OC * 2, "matmul_backward_weight", N, IC, OC);
    uint16_t *is = (uint16_t *)g_tt_cuda.scratch, *ds = (uint16_t *)((char *)g_tt_cuda.scratch + ibytes);
    for (int r0 = 0; r0 < N; r0 += rn) { // dw += each chunk's product, in chunk order
        const int rows = N - r0 < rn ? N - r0 : rn;
        const uint16_t *ib = stage_rows(is, inp, b16, (size_t)r0 * IC, (size_t)rows * IC);
        const uint16_t *db = stage_rows(ds, dout, a16, (size_t)r0 * OC, (size_t)rows * OC);
        gemm(0, 1, IC, OC, rows, ib, IC, db, OC, 1.0f, dw, IC, CUDA_R_16BF);
    }
}

extern "C" void cuda_matmul_forward(float *out, const float *inp, const float *w, int N, int IC, int OC) {
    NvtxRange range("matmul_forward");
    matmul_forward_any(out, 0, inp, 0, w, NULL, NULL, N, IC, OC);
}

extern "C" void cuda_matmul_forward_w16(float *out, const float *inp, const uint16_t *w, float *scratch, int N, int IC,
                                        int OC) {
    NvtxRange range("matmul_forward_w16");
    matmul_forward_any(out, 0, inp, 0, NULL, w, scratch, N, IC, OC);
}

extern "C" void cuda_matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IC, int OC,
                                           int accumulate) {
    NvtxRange range("matmul_backward_input");
    matmul_backward_input_any(dinp, 0, dout, 0, w, NULL, NULL, N, IC, OC, accumulate);
}

extern "C" void cuda_matmul_backward_input_w16(float *dinp, const float *dout, const uint16_t *w, float *scratch, int N,
                                               int IC, int OC, int accumulate) {
    NvtxRange range("matmul_backward_input_w16");
    matmul_backward_input_any(dinp, 0, dout, 0, NULL, w, scratch, N, IC, OC, accumulate);
}

extern "C" void cuda_matmul_backward_weight(float *dw, const float *dout, const float *inp, int N, int IC, int OC) {
    NvtxRange range("matmul_backward_weight");
    matmul_backward_weight_any(dw, dout, 0, inp, 0, N, IC, OC);
}

// ---------------------------------------------------------------- on BF16 activations
// kernels.h's contracts, round included (an FP32 output is rounded in a pass after its
// product, as the backend does for the ops above; a BF16 one is narrowed, which rounds). They
// decline (1, nothing written) in FP32 mode and where the contract asks for what a BF16 output
// cannot hold (o16 without round, or accumulating).
static void round_out(int round, float *x, size_t n) {
    if (round && n > 0) cuda_bf16_round_n(x, n);
}

extern "C" int cuda_matmul_forward_w16_n_x(int n, void *const out[], int o16, const uint16_t *const w[],
                                           const int OC[], const void *inp, int a16, int N, int IC, int round) {
    NvtxRange range("matmul_forward_w16_n_x");
    if (g_tt_cuda.fp32_matmul || (o16 && !round)) return 1;
    for (int i = 0; i < n; i++) {
        matmul_forward_any(out[i], o16, inp, a16, NULL, w[i], NULL, N, IC, OC[i]);
        if (!o16 && N > 0 && OC[i] > 0) round_out(round, (float *)out[i], (size_t)N * OC[i]);
    }
    return 0;
}

extern "C" int cuda_matmul_backward_input_x(void *dinp, int o16, const void *dout, int a16, const uint16_t *w, int N,
                                            int IC, int OC, int accumulate, int round) {
    NvtxRange range("matmul_backward_input_x");
    if (g_tt_cuda.fp32_matmul || (o16 && (accumulate || !round))) return 1;
    matmul_backward_input_any(dinp, o16, dout, a16, NULL, w, NULL, N, IC, OC, accumulate);
    if (!o16 && N > 0 && IC > 0) round_out(round, (float *)dinp, (size_t)N * IC);
    return 0;
}

extern "C" unsigned cuda_matmul_backward_weight_n_x(int n, float *const dw[], const void *const dout[], int a16,
                                                    const int OC[], const void *inp, int b16, int N, int IC) {
    NvtxRange range("matmul_backward_weight_n_x");
    if (g_tt_cuda.fp32_matmul) return n >= 1 && n < 32 ? (1u << n) - 1u : ~0u;
    for (int i = 0; i < n; i++) matmul_backward_weight_any(dw[i], dout[i], a16, inp, b16, N, IC, OC[i]);
    return 0;
}
