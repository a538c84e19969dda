// CHECK(call) for the GPU checks' CUDA runtime programs: a failing call is
// printed (on stdout, compared with the native run's) and main returns 1.
#pragma once
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(x)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                       \
            return 1;                                                                  \
        }                                                                              \
    } while (0)
