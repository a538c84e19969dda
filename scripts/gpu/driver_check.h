// For the GPU checks' programs that call the driver: name(r), a result's
// name as the program prints it, and DRV(call), a failing call said on
// stderr and the program ended; RT(call), the same of a runtime call.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

static inline const char *name(CUresult r)
{
    const char *s = NULL;
    cuGetErrorName(r, &s);
    return s ? s : "?";
}

#define DRV(call)                                                                        \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) {                                                        \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, name(r_)); \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

#define RT(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
            std::exit(1);                                                                          \
        }                                                                                          \
    } while (0)
