// mma.h — EMULATION ONLY (tests/gpu/emu): the part of CUDA's nvcuda::wmma the kernels use —
// m16n16k8 TF32 fragments, FP32 accumulators — for kernels run as fibers (emu_device.h).
// A real fragment is spread over the warp's lanes in a layout the API keeps opaque; here
// every lane holds the whole tile, which gives the same results for code that only loads,
// stores, multiplies and applies one operation to every element (what the API allows).
// Loads and stores check what the hardware requires: a 256-bit aligned pointer and a
// leading dimension that is a multiple of 16 bytes. A load is a warp collective: every lane
// has read before any goes on (so one lane's store cannot reach another lane's load of the
// same tile, as on the hardware, where the warp loads the tile at once). It is no barrier
// before the reads: a lane reads shared memory as it is when that lane runs, so a kernel
// that forgets a __syncwarp (or __syncthreads) between writing a tile and loading it may
// read the 0xFF poison (the emulator runs lanes in shuffled order) and fail.
// The products of mma_sync use the TF32 bits of their inputs (the hardware ignores the low
// 13 bits of the significand) and add in k order: a tensor core's order and truncation
// differ, which the tests' tolerances allow.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <type_traits>

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
} // namespace precision
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <class L> struct fragment<matrix_a, 16, 16, 8, precision::tf32, L> {
    enum { rows = 16, cols = 8, num_elements = 128 };
    float x[128]; // row-major, 16 × 8
};
template <class L> struct fragment<matrix_b, 16, 16, 8, precision::tf32, L> {
    enum { rows = 8, cols = 16, num_elements = 128 };
    float x[128]; // row-major, 8 × 16
};
template <> struct fragment<accumulator, 16, 16, 8, float, void> {
    enum { rows = 16, cols = 16, num_elements = 256 };
    float x[256]; // row-major, 16 × 16
};

inline void emu_wmma_check(const void *p, unsigned ldm) {
    if ((uintptr_t)p % 32 != 0 || ldm % 4 != 0) {
        fprintf(stderr, "emu: wmma load/store at %p with ldm %u: the pointer must be 32-byte aligned and ldm a "
                        "multiple of 4 floats\n", p, ldm);
        abort();
    }
}
inline float emu_tf32_bits(float f) { // the bits a tensor core multiplies: the low 13 dropped
    uint32_t u;
    memcpy(&u, &f, 4);
    u &= 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
}
// cvt.rna.tf32.f32: to nearest, ties away from zero, on the upper 19 bits
inline float __float_to_tf32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&f, &u, 4);
    return f;
}

// element (r, c) of an R × C operand at p: row-major p[r·ldm + c], column-major p[c·ldm + r]
template <class F> inline void emu_load(F &f, const float *p, unsigned ldm, bool col) {
    emu_wmma_check(p, ldm);
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
    emu::warp_barrier();
}
template <class L> inline void load_matrix_sync(fragment<matrix_a, 16, 16, 8, precision::tf32, L> &f, const float *p,
                                                unsigned ldm) {
    emu_load(f, p, ldm, std::is_same<L, col_major>::value);
}
template <class L> inline void load_matrix_sync(fragment<matrix_b, 16, 16, 8, precision::tf32, L> &f, const float *p,
                                                unsigned ldm) {
    emu_load(f, p, ldm, std::is_same<L, col_major>::value);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 8, float> &f, const float *p, unsigned ldm, layout_t l) {
    emu_load(f, p, ldm, l == mem_col_major);
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 8, float> &f, unsigned ldm, layout_t l) {
    emu_wmma_check(p, ldm);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float *d = l == mem_col_major ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c;
            *d = f.x[r * 16 + c];
        }
}
inline void fill_fragment(fragment<accumulator, 16, 16, 8, float> &f, float v) {
    for (int i = 0; i < 256; i++) f.x[i] = v;
}
// A warp's mma: lane l computes elements l, l + 32, ... of the 16 × 16 result into the
// warp's scratch, then every lane takes the whole tile (32 times less work than each lane
// computing all of it, which made the emulated trainer suites several times slower). Blocks
// run one at a time, so one scratch per warp of a block does.
inline float *emu_wmma_scratch(int warp) {
    static float s[32][256];
    return s[warp];
}
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 8, float> &d, const fragment<matrix_a, 16, 16, 8, precision::tf32, LA> &a,
                     const fragment<matrix_b, 16, 16, 8, precision::tf32, LB> &b,
                     const fragment<accumulator, 16, 16, 8, float> &c) {
    float *out = emu_wmma_scratch(emu::g_cur->warp);
    for (int e = emu::g_cur->lane; e < 256; e += 32) {
        const int m = e / 16, n = e % 16;
        float s = c.x[e];
        for (int k = 0; k < 8; k++) s = fmaf(emu_tf32_bits(a.x[m * 8 + k]), emu_tf32_bits(b.x[k * 16 + n]), s);
        out[e] = s;
    }
    emu::warp_barrier(); // every lane's share is in
    memcpy(d.x, out, sizeof d.x);
    emu::warp_barrier(); // every lane has its copy before the next mma of the warp reuses the scratch
}
} // namespace wmma
} // namespace nvcuda

// PTX mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (the kernels' inline PTX, which
// they replace by this under TT_EMU), with PTX's fragment layouts (g = lane / 4, t = lane % 4):
// a = A(g, t), A(g + 8, t), A(g, t + 4), A(g + 8, t + 4); b = B(t, g), B(t + 4, g);
// d = D(g, 2t), D(g, 2t + 1), D(g + 8, 2t), D(g + 8, 2t + 1). A warp collective: every lane
// posts its fragments, then computes its own four results from the whole warp's, products of
// the operands' TF32 bits added in k order.
inline void emu_mma_m16n8k8_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    struct post { uint32_t a[4], b[2]; float c[4]; };
    static post s[32][32]; // [warp][lane]; blocks run one at a time
    post *w = s[emu::g_cur->warp];
    const int lane = emu::g_cur->lane, g = lane >> 2, t = lane & 3;
    memcpy(w[lane].a, a, sizeof w[lane].a);
    memcpy(w[lane].b, b, sizeof w[lane].b);
    memcpy(w[lane].c, d, sizeof w[lane].c);
    emu::warp_barrier(); // every lane has posted
    auto A = [&](int r, int k) { return nvcuda::wmma::emu_tf32_bits(__uint_as_float(w[(r & 7) * 4 + (k & 3)].a[(r >> 3) + 2 * (k >> 2)])); };
    auto B = [&](int k, int n) { return nvcuda::wmma::emu_tf32_bits(__uint_as_float(w[n * 4 + (k & 3)].b[k >> 2])); };
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e >> 1), n = 2 * t + (e & 1);
        float acc = w[lane].c[e];
        for (int k = 0; k < 8; k++) acc = fmaf(A(r, k), B(k, n), acc);
        out[e] = acc;
    }
    emu::warp_barrier(); // every lane has read the posts before any lane posts again
    memcpy(d, out, sizeof out);
}
