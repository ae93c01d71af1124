// emu_device.h — EMULATION ONLY: runs kernels/cuda/*.cu on the CPU to check their logic
// where no GPU is at hand (tests/gpu/emu/run.sh force-includes it into the .cu files after
// rewriting `k<<<g, b, s, st>>>(...)` to EMU_LAUNCH(k, g, b, s, st)(...) and `extern
// __shared__` to emu::dyn_smem()).
// A launch is queued on its stream like every copy and memset (emu_runtime.cpp runs queued
// work only when the host waits for it, streams interleaved at random where their events
// allow: what a real GPU may do). Every CUDA thread is a fiber; blocks run one after another, in a shuffled
// order; inside a block the runnable fibers run in a shuffled order between barriers.
// __syncthreads waits for every live thread of the block, __syncwarp and the shuffles for
// every live lane of the warp; a barrier that cannot complete (lanes of one warp waiting
// at different barriers, or a thread waiting while the rest have exited) aborts with a
// message. Shared memory is fresh per launch and filled with 0xFF (NaN) per block.
// What it does not check: real memory ordering, timing, cuBLASLt (always the fallback),
// the IEEE details of the GPU's expf/logf, launch limits.
#pragma once
#define TT_EMU 1 // kernels that use inline PTX call the emulator's stand-ins instead
#include <math.h>
#include <stdint.h>
#include <functional>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_runtime.h"

namespace emu {
struct Thread {
    dim3 tid;
    int lane, warp;
};
extern Thread *g_cur;
extern dim3 g_block, g_grid, g_bdim;
void block_barrier();
void warp_barrier();
uint64_t *warp_slots();
void *dyn_smem();
void run_grid(dim3 g, dim3 b, size_t smem, void (*body)(void *), void *ctx);
void enqueue_kernel(cudaStream_t s, std::function<void()> launch); // runs later, in stream order

template <class F> struct Launcher;
template <class... P> struct Launcher<void (*)(P...)> {
    void (*f)(P...);
    dim3 g, b;
    size_t smem;
    cudaStream_t st;
    void operator()(P... p) const {
        void (*fn)(P...) = f;
        const dim3 gg = g, bb = b;
        const size_t sm = smem;
        enqueue_kernel(st, [=]() { // the arguments by value, as a real launch copies them
            auto body = [&]() { fn(p...); };
            using B = decltype(body);
            run_grid(gg, bb, sm, [](void *c) { (*(B *)c)(); }, &body);
        });
    }
};
} // namespace emu

#define EMU_LAUNCH(k, g, b, s, st) (emu::Launcher<decltype(&k)>{&k, dim3(g), dim3(b), (size_t)(s), (st)})
#define threadIdx (emu::g_cur->tid)
#define blockIdx (emu::g_block)
#define blockDim (emu::g_bdim)
#define gridDim (emu::g_grid)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
#define __restrict__ __restrict

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_barrier(); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, int k) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t *s = emu::warp_slots(), bits = 0;
    memcpy(&bits, &v, sizeof v);
    s[emu::g_cur->lane] = bits;
    emu::warp_barrier();
    uint64_t r = s[emu::g_cur->lane ^ k];
    emu::warp_barrier();
    T out;
    memcpy(&out, &r, sizeof out);
    return out;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
