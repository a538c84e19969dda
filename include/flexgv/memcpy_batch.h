/* Batched copies (cuMemcpyBatchAsync) made as one copy each, in the batch's
 * stream and order, by copy: every source is then read in stream order,
 * which each access order a batch may ask for allows. The batch is checked
 * first, as the driver checks it: its attributes' ranges and access
 * orders, a stream other than the legacy one. Shared by the simulated GPU
 * and the remoting client. */
#ifndef FLEXGV_MEMCPY_BATCH_H
#define FLEXGV_MEMCPY_BATCH_H

#include <stdint.h>

#include "flexgv/cuda_types.h"

typedef CUresult (*fg_copy_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

/* The copies, or the first that failed (*fail: its index, SIZE_MAX for the
 * batch); pt: the per-thread default stream's variant, where NULL is that
 * stream. */
static inline CUresult fg_memcpy_batch(fg_copy_fn copy, int pt, const CUdeviceptr *dsts, const CUdeviceptr *srcs,
                                       const size_t *sizes, size_t count, const CUmemcpyAttributes *attrs,
                                       const size_t *attrsIdxs, size_t numAttrs, CUstream s, size_t *fail)
{
    *fail = SIZE_MAX;
    if (!count || !dsts || !srcs || !sizes || !attrs || !attrsIdxs || !numAttrs || numAttrs > count ||
        (s == NULL && !pt) || s == CU_STREAM_LEGACY)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < numAttrs; k++)
        if ((k ? attrsIdxs[k] <= attrsIdxs[k - 1] : attrsIdxs[k] != 0) || attrsIdxs[k] >= count ||
            attrs[k].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
            attrs[k].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult r = sizes[i] ? copy(dsts[i], srcs[i], sizes[i], s) : CUDA_SUCCESS;
        if (r != CUDA_SUCCESS) {
            *fail = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

/* The three ABIs, each an exported definition of prefix's (SIM_EXPORT,
 * FGR_EXPORT) over copy and copy_pt. */
#define FG_MEMCPY_BATCH_ENTRIES(prefix, copy, copy_pt)                                                                  \
    prefix CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,           \
                                          CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream s)   \
    {                                                                                                                  \
        size_t fail;                                                                                                   \
        return fg_memcpy_batch(copy, 0, dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, s, &fail);               \
    }                                                                                                                  \
    prefix CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,      \
                                               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,          \
                                               CUstream s)                                                             \
    {                                                                                                                  \
        size_t fail;                                                                                                   \
        return fg_memcpy_batch(copy_pt, 1, dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, s, &fail);            \
    }                                                                                                                  \
    /* CUDA 12.8's, which says which copy failed. */                                                                  \
    prefix CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,              \
                                       CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,                  \
                                       size_t *failIdx, CUstream s)                                                    \
    {                                                                                                                  \
        size_t fail;                                                                                                   \
        CUresult r = fg_memcpy_batch(copy, 0, dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, s, &fail);         \
        if (r != CUDA_SUCCESS && failIdx)                                                                              \
            *failIdx = fail;                                                                                           \
        return r;                                                                                                      \
    }

#endif
