// cuda_runtime.h — EMULATION ONLY (tests/gpu/emu): the runtime API plus the C++ pieces the
// .cu files use on the host side (dim3, function-pointer overloads).
#pragma once
#include "cuda_runtime_api.h"
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
template <class T> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, T *f) { return cudaFuncGetAttributes(a, (const void *)f); }
template <class T> cudaError_t cudaFuncSetAttribute(T *f, cudaFuncAttribute at, int v) { return cudaFuncSetAttribute((const void *)f, at, v); }
