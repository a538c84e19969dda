// For the GPU checks' programs that call the driver: name(r), a result's
// name as the program prints it, and DRV(call), a failing call said on
// stderr and the program ended.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda.h>

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
