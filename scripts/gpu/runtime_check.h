// For the GPU checks' CUDA runtime programs: CHECK(call), a failing call
// printed (on stdout, compared with the native run's) and main returning 1;
// checksum, of bytes a program prints instead of the bytes.
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

static inline unsigned long checksum(const unsigned char *p, size_t n)
{
    unsigned long s = 0;
    for (size_t i = 0; i < n; i++)
        s = s * 31 + p[i];
    return s;
}
