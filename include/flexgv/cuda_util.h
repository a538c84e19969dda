/* Small facts about driver objects that the shim and the simulated GPU both
 * need, kept in one place. */
#ifndef FLEXGV_CUDA_UTIL_H
#define FLEXGV_CUDA_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "cuda_types.h"

/* A device UUID in NVML's text form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. */
static inline void fg_uuid_text(const CUuuid *u, char *out, size_t n)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
             b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Bytes of one array element of this format, 0 if the format is unknown. */
static inline uint64_t fg_format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    case CU_AD_FORMAT_NV12: return 0; /* planar: no one element size */
    }
    return 0;
}

/* Texel bytes of an array with `levels` mip levels (each halving every
 * extent that is above 1; a 0 height or depth means a lower dimension) into
 * *out; 0 when the size does not fit in 64 bits. An NV12 array holds a byte
 * a texel, then its second plane half as many. */
static inline int fg_array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels, unsigned levels,
                                 uint64_t *out)
{
    int nv12 = f == CU_AD_FORMAT_NV12;
    uint64_t total = 0, eb = nv12 ? 1 : fg_format_bytes(f) * channels;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        uint64_t n;
        if (__builtin_mul_overflow((uint64_t)w, (uint64_t)(h ? h : 1), &n) ||
            __builtin_mul_overflow(n, (uint64_t)(d ? d : 1), &n) || __builtin_mul_overflow(n, eb, &n) ||
            (nv12 && __builtin_add_overflow(n, n / 2, &n)) || __builtin_add_overflow(total, n, &total))
            return 0;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    *out = total;
    return 1;
}

/* A 3D copy is a 2D copy per slice: whether its description holds
 * together, and slice z as a 2D copy whose rows count from the memory's
 * start (not for a CUDA array of more than one slice: its z is a layer).
 * The first reserved word is not looked at, as driver 580 does not. */
static inline int fg_memcpy3d_valid(const CUDA_MEMCPY3D *p)
{
    return p && !p->reserved1 &&
           (p->Depth <= 1 || ((p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->srcHeight >= p->Height) &&
                              (p->dstMemoryType == CU_MEMORYTYPE_ARRAY || p->dstHeight >= p->Height)));
}

static inline CUDA_MEMCPY2D fg_memcpy3d_slice(const CUDA_MEMCPY3D *p, size_t z)
{
    return (CUDA_MEMCPY2D){
        .srcXInBytes = p->srcXInBytes,
        .srcY = (p->srcZ + z) * p->srcHeight + p->srcY,
        .srcMemoryType = p->srcMemoryType,
        .srcHost = p->srcHost,
        .srcDevice = p->srcDevice,
        .srcArray = p->srcArray,
        .srcPitch = p->srcPitch,
        .dstXInBytes = p->dstXInBytes,
        .dstY = (p->dstZ + z) * p->dstHeight + p->dstY,
        .dstMemoryType = p->dstMemoryType,
        .dstHost = p->dstHost,
        .dstDevice = p->dstDevice,
        .dstArray = p->dstArray,
        .dstPitch = p->dstPitch,
        .WidthInBytes = p->WidthInBytes,
        .Height = p->Height,
    };
}

#endif
