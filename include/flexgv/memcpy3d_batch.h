/* Batches of 3D copies (cuMemcpy3DBatchAsync) made as one cuMemcpy3DAsync
 * each, in the batch's stream and order: every source is then read in
 * stream order, which each access order a batch may ask for allows. The
 * batch is checked whole first, as the driver checks it: a stream other
 * than the legacy one (NULL too in the per-thread variant: driver 580
 * refuses it there), no flags, each copy's extent (in elements: bytes
 * between pointers, the array's elements otherwise, of one size between
 * two arrays), sides, rows and layers (none shorter than the copy's; 0 for
 * the copy's own), access order and flags. Shared by the simulated GPU and
 * the remoting client. */
#ifndef FLEXGV_MEMCPY3D_BATCH_H
#define FLEXGV_MEMCPY3D_BATCH_H

#include <stdint.h>
#include <string.h>

#include "flexgv/cuda_api_gen.h"
#include "flexgv/cuda_util.h"

typedef CUresult (*fg_copy3d_fn)(const CUDA_MEMCPY3D *, CUstream);

/* The bytes of an element of an array side (0: not an array). */
static inline uint64_t fg_batch3d_elem(const CUmemcpy3DOperand *o)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (o->type != CU_MEMCPY_OPERAND_TYPE_ARRAY || cuArray3DGetDescriptor_v2(&d, o->op.array.array) != CUDA_SUCCESS)
        return 0;
    return fg_format_bytes(d.Format) * d.NumChannels;
}

/* One side of op as cuMemcpy3D's (dst: the destination's), elements of eb
 * bytes: -1 when it is not one. */
static inline int fg_batch3d_side(const CUmemcpy3DOperand *o, const CUextent3D *e, uint64_t eb, CUDA_MEMCPY3D *c,
                                  int dst)
{
    size_t x = 0, y = 0, z = 0, pitch = 0, height = 0;
    CUmemorytype t;
    CUdeviceptr p = 0;
    CUarray a = NULL;
    if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
        size_t row = o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width;
        size_t layer = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
        if (row < e->width || layer < e->height || row > SIZE_MAX / eb)
            return -1;
        t = CU_MEMORYTYPE_UNIFIED, p = o->op.ptr.ptr, pitch = row * eb, height = layer;
    } else if (o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
        if (o->op.array.offset.x > SIZE_MAX / eb)
            return -1;
        t = CU_MEMORYTYPE_ARRAY, a = o->op.array.array;
        x = o->op.array.offset.x * eb, y = o->op.array.offset.y, z = o->op.array.offset.z;
    } else {
        return -1;
    }
    if (dst) {
        c->dstMemoryType = t, c->dstDevice = p, c->dstArray = a;
        c->dstXInBytes = x, c->dstY = y, c->dstZ = z, c->dstPitch = pitch, c->dstHeight = height;
    } else {
        c->srcMemoryType = t, c->srcDevice = p, c->srcArray = a;
        c->srcXInBytes = x, c->srcY = y, c->srcZ = z, c->srcPitch = pitch, c->srcHeight = height;
    }
    return 0;
}

/* op as cuMemcpy3D's: -1 when it is not a copy the batch may hold. */
static inline int fg_batch3d_op(const CUDA_MEMCPY3D_BATCH_OP *op, CUDA_MEMCPY3D *c)
{
    const CUextent3D *e = &op->extent;
    if (!e->width || !e->height || !e->depth || op->flags > 1 ||
        op->srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || op->srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
        return -1;
    int sa = op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY, da = op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
    uint64_t se = sa ? fg_batch3d_elem(&op->src) : 1, de = da ? fg_batch3d_elem(&op->dst) : 1;
    if (!se || !de || (sa && da && se != de))
        return -1;
    uint64_t eb = sa ? se : de;
    memset(c, 0, sizeof *c);
    if (fg_batch3d_side(&op->src, e, eb, c, 0) || fg_batch3d_side(&op->dst, e, eb, c, 1) || e->width > SIZE_MAX / eb)
        return -1;
    c->WidthInBytes = e->width * eb, c->Height = e->height, c->Depth = e->depth;
    return 0;
}

/* The copies, or the first that is not one or failed (*fail: its index,
 * SIZE_MAX for the batch's own arguments). */
static inline CUresult fg_memcpy3d_batch(fg_copy3d_fn copy, size_t n, const CUDA_MEMCPY3D_BATCH_OP *ops,
                                         unsigned long long flags, CUstream s, size_t *fail)
{
    *fail = SIZE_MAX;
    if (!n || !ops || flags || s == NULL || s == CU_STREAM_LEGACY)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D c;
    for (size_t i = 0; i < n; i++)
        if (fg_batch3d_op(&ops[i], &c)) {
            *fail = i;
            return CUDA_ERROR_INVALID_VALUE;
        }
    for (size_t i = 0; i < n; i++) {
        fg_batch3d_op(&ops[i], &c);
        CUresult r = copy(&c, s);
        if (r != CUDA_SUCCESS) {
            *fail = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

/* The same, the copy at fault told where failIdx is given (12.8's ABI). */
static inline CUresult fg_memcpy3d_batch_at(fg_copy3d_fn copy, size_t n, const CUDA_MEMCPY3D_BATCH_OP *ops,
                                            size_t *failIdx, unsigned long long flags, CUstream s)
{
    size_t fail;
    CUresult r = fg_memcpy3d_batch(copy, n, ops, flags, s, &fail);
    if (r != CUDA_SUCCESS && failIdx)
        *failIdx = fail;
    return r;
}

/* The four ABIs, each an exported definition of prefix's (SIM_EXPORT,
 * FGR_EXPORT) over copy and copy_pt. */
#define FG_MEMCPY3D_BATCH_ENTRIES(prefix, copy, copy_pt)                                                               \
    prefix CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,          \
                                            CUstream s)                                                               \
    {                                                                                                                 \
        return fg_memcpy3d_batch_at(copy, n, ops, NULL, flags, s);                                                 \
    }                                                                                                                 \
    prefix CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,     \
                                                 CUstream s)                                                          \
    {                                                                                                                 \
        return fg_memcpy3d_batch_at(copy_pt, n, ops, NULL, flags, s);                                              \
    }                                                                                                                 \
    prefix CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *failIdx,                      \
                                         unsigned long long flags, CUstream s)                                        \
    {                                                                                                                 \
        return fg_memcpy3d_batch_at(copy, n, ops, failIdx, flags, s);                                              \
    }                                                                                                                 \
    prefix CUresult cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *failIdx,                 \
                                              unsigned long long flags, CUstream s)                                   \
    {                                                                                                                 \
        return fg_memcpy3d_batch_at(copy_pt, n, ops, failIdx, flags, s);                                           \
    }

#endif
