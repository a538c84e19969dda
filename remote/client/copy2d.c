/* 2D and 3D copies (cuMemcpy2D, cuMemcpy3D and their variants; a 3D copy is
 * a 2D copy per slice), answered on the client through
 * the forwarded 1D copies, so that no new request needs to carry host
 * pointers inside a structure:
 *   host to device   one queued copy per row (the last one of a synchronous
 *                    copy waits, so that its errors surface there);
 *   device to host   the rows' span read in one piece, then scattered into
 *                    the caller's rows (one round trip); row by row when the
 *                    span is too large to stage;
 *   device to device one queued copy per row;
 *   host to host     memcpy, after the stream's earlier work.
 * Rows that are contiguous on both sides go as one copy. CUDA arrays are not
 * carried (no array is ever created remotely). A unified address is taken as
 * a device address, as cuMemcpy takes it: the server refuses a host one. */
#include "client.h"
#include "flexgv/cuda_util.h"

#include <stdlib.h>
#include <string.h>

/* The 1D copies a 2D copy goes by: the legacy default stream's, or the
 * per-thread one's; each synchronous, and queued on a stream. */
struct copies {
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*htod_q)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*dtoh_q)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*dtod_q)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*sync)(CUstream);
};
static const struct copies legacy = {cuMemcpyHtoD_v2, cuMemcpyHtoDAsync_v2, cuMemcpyDtoH_v2, cuMemcpyDtoHAsync_v2,
                                     cuMemcpyDtoD_v2, cuMemcpyDtoDAsync_v2, cuStreamSynchronize};
static const struct copies per_thread = {cuMemcpyHtoD_v2_ptds, cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyDtoH_v2_ptds,
                                         cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoD_v2_ptds,
                                         cuMemcpyDtoDAsync_v2_ptsz, cuStreamSynchronize_ptsz};

/* How a 2D copy runs: its 1D copies, and the stream when it is queued
 * (async), else the default stream's. */
struct how {
    const struct copies *c;
    int async;
    CUstream s;
};

struct side {
    int host;
    char *h;
    CUdeviceptr d;
    size_t pitch;
};

#define STAGE_MAX ((size_t)256 << 20) /* most bytes staged for a device-to-host copy */

static CUresult side_of(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch,
                        const char *name, struct side *s)
{
    size_t off = y * pitch + x;
    s->pitch = pitch;
    switch (t) {
    case CU_MEMORYTYPE_HOST:
        if (!host)
            return CUDA_ERROR_INVALID_VALUE;
        s->host = 1;
        s->h = (char *)host + off;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        s->host = 0;
        s->d = dev + off;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
        return fgr_unsupported(-1, name, "a CUDA array");
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* A synchronous copy's rows but the last are queued: one round trip. */
static CUresult htod(const struct how *m, CUdeviceptr d, const void *h, size_t n, int last)
{
    return m->async || !last ? m->c->htod_q(d, h, n, m->s) : m->c->htod(d, h, n);
}

static CUresult dtoh(const struct how *m, void *h, CUdeviceptr d, size_t n)
{
    return m->async ? m->c->dtoh_q(h, d, n, m->s) : m->c->dtoh(h, d, n);
}

static CUresult dtod(const struct how *m, CUdeviceptr dst, CUdeviceptr src, size_t n, int last)
{
    return m->async || !last ? m->c->dtod_q(dst, src, n, m->s) : m->c->dtod(dst, src, n);
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, struct how m, const char *name)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    size_t w = p->WidthInBytes, rows = p->Height;
    if (rows > 1 && (p->srcPitch < w || p->dstPitch < w))
        return CUDA_ERROR_INVALID_VALUE;
    struct side src = {0}, dst = {0};
    CUresult r;
    if ((r = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch, name, &src)) ||
        (r = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch, name, &dst)))
        return r;
    if (!w || !rows)
        return CUDA_SUCCESS;
    if (rows > 1 && src.pitch == w && dst.pitch == w) {
        /* contiguous on both sides: one copy */
        w *= rows;
        rows = 1;
    }
    if (src.host && dst.host) {
        /* in stream order: after what the stream (or the default one) holds */
        if ((r = m.c->sync(m.s)))
            return r;
        for (size_t i = 0; i < rows; i++)
            memmove(dst.h + i * dst.pitch, src.h + i * src.pitch, w);
        return CUDA_SUCCESS;
    }
    if (src.host) {
        for (size_t i = 0; i < rows; i++)
            if ((r = htod(&m, dst.d + i * dst.pitch, src.h + i * src.pitch, w, i + 1 == rows)))
                return r;
        return CUDA_SUCCESS;
    }
    if (!dst.host) {
        for (size_t i = 0; i < rows; i++)
            if ((r = dtod(&m, dst.d + i * dst.pitch, src.d + i * src.pitch, w, i + 1 == rows)))
                return r;
        return CUDA_SUCCESS;
    }
    if (rows == 1)
        return dtoh(&m, dst.h, src.d, w);
    /* device to host: the span from the first row's start to the last
     * row's end, staged, then each row put where the caller wants it */
    size_t span = (rows - 1) * src.pitch + w;
    char *stage = span <= STAGE_MAX ? malloc(span) : NULL;
    if (!stage) {
        for (size_t i = 0; i < rows; i++)
            if ((r = dtoh(&m, dst.h + i * dst.pitch, src.d + i * src.pitch, w)))
                return r;
        return CUDA_SUCCESS;
    }
    if ((r = dtoh(&m, stage, src.d, span)) == CUDA_SUCCESS)
        for (size_t i = 0; i < rows; i++)
            memcpy(dst.h + i * dst.pitch, stage + i * src.pitch, w);
    free(stage);
    return r;
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, struct how m, const char *name)
{
    if (!fg_memcpy3d_valid(p))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < p->Depth; z++) {
        CUDA_MEMCPY2D slice = fg_memcpy3d_slice(p, z);
        CUresult r = copy2d(&slice, m, name);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, (struct how){&legacy, 0, NULL}, "cuMemcpy2D");
}
FGR_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, (struct how){&per_thread, 0, NULL}, "cuMemcpy2D");
}
FGR_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, (struct how){&legacy, 0, NULL}, "cuMemcpy2DUnaligned");
}
FGR_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return copy2d(pCopy, (struct how){&per_thread, 0, NULL}, "cuMemcpy2DUnaligned");
}
FGR_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d(pCopy, (struct how){&legacy, 1, hStream}, "cuMemcpy2DAsync");
}
FGR_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return copy2d(pCopy, (struct how){&per_thread, 1, hStream}, "cuMemcpy2DAsync");
}
FGR_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
    return copy3d(pCopy, (struct how){&legacy, 0, NULL}, "cuMemcpy3D");
}
FGR_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{
    return copy3d(pCopy, (struct how){&per_thread, 0, NULL}, "cuMemcpy3D");
}
FGR_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return copy3d(pCopy, (struct how){&legacy, 1, hStream}, "cuMemcpy3DAsync");
}
FGR_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return copy3d(pCopy, (struct how){&per_thread, 1, hStream}, "cuMemcpy3DAsync");
}
