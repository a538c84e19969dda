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
 * Rows that are contiguous on both sides go as one copy. A copy with an
 * array side goes whole as a 3D copy (an array's z is a layer, not rows):
 * its host side's rows packed into pieces of at most ARRAY_PIECE bytes, each
 * piece's bytes in the request (an upload) or the answer (a download), the
 * server checking the extent against the array. A unified address is the
 * program's memory where it lies outside the server's ranges and is mapped
 * here (uva.c, as a GPU's driver tells them apart: what cudaMemcpy2D with
 * cudaMemcpyDefault gives), else the device's. */
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
#define ARRAY_PIECE ((size_t)1 << 20)  /* most bytes of a download's answer (the server's limit) */

CUresult fgrArrayCopy(const CUDA_MEMCPY3D *p, const void *src, size_t n, CUstream hStream);
CUresult fgrArrayCopyWait(const CUDA_MEMCPY3D *p, const void *src, size_t n, CUstream hStream);
CUresult fgrArrayRead(void *dst, size_t n, const CUDA_MEMCPY3D *p, CUstream hStream);

static CUresult array3d(const CUDA_MEMCPY3D *p, const struct copies *c, int async, CUstream s);

static CUresult side_of(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch,
                        const char *name, struct side *s)
{
    size_t off = y * pitch + x;
    (void)name;
    s->pitch = pitch;
    switch (t) {
    case CU_MEMORYTYPE_HOST:
        if (!host)
            return CUDA_ERROR_INVALID_VALUE;
        s->host = 1;
        s->h = (char *)host + off;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
        if (fgr_uva_host(dev + off, 1)) {
            s->host = 1;
            s->h = (char *)(uintptr_t)(dev + off);
            return CUDA_SUCCESS;
        }
        __attribute__((fallthrough)); /* device memory */
    case CU_MEMORYTYPE_DEVICE:
        s->host = 0;
        s->d = dev + off;
        return CUDA_SUCCESS;
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
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        CUDA_MEMCPY3D q = {
            .srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType,
            .srcHost = p->srcHost, .srcDevice = p->srcDevice, .srcArray = p->srcArray, .srcPitch = p->srcPitch,
            .srcHeight = p->Height, .dstXInBytes = p->dstXInBytes, .dstY = p->dstY,
            .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
            .dstArray = p->dstArray, .dstPitch = p->dstPitch, .dstHeight = p->Height,
            .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = 1};
        (void)name;
        return array3d(&q, m.c, m.async, m.s);
    }
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
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return array3d(p, m.c, m.async, m.s);
    for (size_t z = 0; z < p->Depth; z++) {
        CUDA_MEMCPY2D slice = fg_memcpy3d_slice(p, z);
        CUresult r = copy2d(&slice, m, name);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* A side of an array copy as the server takes it: a host side as the
 * packed rows the request (or the answer) carries, a unified address as
 * the program's memory or the device's (side_of). */
static int array_side(CUmemorytype *t, const void **host, CUdeviceptr dev)
{
    switch (*t) {
    case CU_MEMORYTYPE_UNIFIED:
        *t = fgr_uva_host(dev, 1) ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        if (*t == CU_MEMORYTYPE_HOST)
            *host = (const void *)(uintptr_t)dev;
        return 1;
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_ARRAY:
        return 1;
    default:
        return 0;
    }
}

static CUresult array3d(const CUDA_MEMCPY3D *p, const struct copies *c, int async, CUstream s)
{
    CUDA_MEMCPY3D q = *p;
    if (!array_side(&q.srcMemoryType, &q.srcHost, q.srcDevice) ||
        !array_side(&q.dstMemoryType, (const void **)&q.dstHost, q.dstDevice) || q.srcLOD || q.dstLOD ||
        (q.srcMemoryType == CU_MEMORYTYPE_HOST && !q.srcHost) || (q.dstMemoryType == CU_MEMORYTYPE_HOST && !q.dstHost))
        return CUDA_ERROR_INVALID_VALUE;
    if (!async)
        s = c == &per_thread ? CU_STREAM_PER_THREAD : NULL;
    size_t w = q.WidthInBytes, h = q.Height, d = q.Depth;
    if (!w || !h || !d)
        return CUDA_SUCCESS;
    /* The unused sides' fields say nothing: only the names the copy uses
     * travel, and no host pointer. */
    if (q.srcMemoryType != CU_MEMORYTYPE_ARRAY)
        q.srcArray = NULL;
    if (q.dstMemoryType != CU_MEMORYTYPE_ARRAY)
        q.dstArray = NULL;
    int up = q.srcMemoryType == CU_MEMORYTYPE_HOST, down = q.dstMemoryType == CU_MEMORYTYPE_HOST;
    if (!up && !down) {
        q.srcHost = NULL, q.dstHost = NULL;
        return async ? fgrArrayCopy(&q, NULL, 0, s) : fgrArrayCopyWait(&q, NULL, 0, s);
    }
    if (up && down)
        return CUDA_ERROR_INVALID_VALUE;
    /* The host side's rows, in pieces of whole rows (or of one row's bytes
     * when a row is larger than a piece). */
    const char *hs = up ? q.srcHost : q.dstHost;
    size_t hx = up ? q.srcXInBytes : q.dstXInBytes, hy = up ? q.srcY : q.dstY, hz = up ? q.srcZ : q.dstZ;
    size_t hpitch = up ? q.srcPitch : q.dstPitch, hheight = up ? q.srcHeight : q.dstHeight;
    if ((h > 1 && hpitch < w) || (d > 1 && hheight < h))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pw = w < ARRAY_PIECE ? w : ARRAY_PIECE;
    size_t prows = w < ARRAY_PIECE ? ARRAY_PIECE / w : 1;
    char *buf = malloc(pw * (prows < h ? prows : h));
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CUDA_SUCCESS;
    for (size_t z = 0; z < d && !r; z++)
        for (size_t y = 0; y < h && !r; y += prows)
            for (size_t x = 0; x < w && !r; x += pw) {
                size_t cw = w - x < pw ? w - x : pw, ch = h - y < prows ? h - y : prows;
                int last = z + 1 == d && y + ch == h && x + cw == w;
                CUDA_MEMCPY3D k = q;
                k.WidthInBytes = cw, k.Height = ch, k.Depth = 1;
                k.srcHost = NULL, k.dstHost = NULL;
                /* the array's (or device memory's) side moves with the piece */
                if (up)
                    k.dstXInBytes += x, k.dstY += y, k.dstZ += z, k.srcXInBytes = k.srcY = k.srcZ = 0;
                else
                    k.srcXInBytes += x, k.srcY += y, k.srcZ += z, k.dstXInBytes = k.dstY = k.dstZ = 0;
                const char *row0 = hs + ((hz + z) * hheight + hy + y) * hpitch + hx + x;
                if (up) {
                    for (size_t i = 0; i < ch; i++)
                        memcpy(buf + i * cw, row0 + i * hpitch, cw);
                    r = async || !last ? fgrArrayCopy(&k, buf, cw * ch, s) : fgrArrayCopyWait(&k, buf, cw * ch, s);
                } else if ((r = fgrArrayRead(buf, cw * ch, &k, s)) == CUDA_SUCCESS) {
                    for (size_t i = 0; i < ch; i++)
                        memcpy((char *)row0 + i * hpitch, buf + i * cw, cw);
                }
            }
    free(buf);
    return r;
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

/* A copy with a 1D array: one row, at the offset in bytes. */
static CUresult row1d(CUmemorytype st, const void *sh, CUdeviceptr sd, CUarray sa, size_t so, CUmemorytype dt, void *dh,
                      CUdeviceptr dd, CUarray da, size_t doff, size_t n, const struct copies *c, int async, CUstream s)
{
    CUDA_MEMCPY3D q = {.srcXInBytes = so, .srcMemoryType = st, .srcHost = sh, .srcDevice = sd, .srcArray = sa,
                       .srcPitch = n, .srcHeight = 1, .dstXInBytes = doff, .dstMemoryType = dt, .dstHost = dh,
                       .dstDevice = dd, .dstArray = da, .dstPitch = n, .dstHeight = 1, .WidthInBytes = n,
                       .Height = 1, .Depth = 1};
    if (st != CU_MEMORYTYPE_ARRAY)
        q.srcXInBytes = 0;
    if (dt != CU_MEMORYTYPE_ARRAY)
        q.dstXInBytes = 0;
    return array3d(&q, c, async, s);
}

#define HTOA(name, c, async)                                                                                   \
    FGR_EXPORT CUresult name(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)       \
    {                                                                                                          \
        return row1d(CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, \
                     ByteCount, c, async, NULL);                                                               \
    }
HTOA(cuMemcpyHtoA_v2, &legacy, 0)
HTOA(cuMemcpyHtoA_v2_ptds, &per_thread, 0)

#define ATOH(name, c)                                                                                          \
    FGR_EXPORT CUresult name(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)             \
    {                                                                                                          \
        return row1d(CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset, CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0, \
                     ByteCount, c, 0, NULL);                                                                   \
    }
ATOH(cuMemcpyAtoH_v2, &legacy)
ATOH(cuMemcpyAtoH_v2_ptds, &per_thread)

#define DTOA(name, c)                                                                                             \
    FGR_EXPORT CUresult name(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)        \
    {                                                                                                             \
        return row1d(CU_MEMORYTYPE_DEVICE, NULL, srcDevice, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray,       \
                     dstOffset, ByteCount, c, 0, NULL);                                                           \
    }
DTOA(cuMemcpyDtoA_v2, &legacy)
DTOA(cuMemcpyDtoA_v2_ptds, &per_thread)

#define ATOD(name, c)                                                                                              \
    FGR_EXPORT CUresult name(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)         \
    {                                                                                                              \
        return row1d(CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset, CU_MEMORYTYPE_DEVICE, NULL, dstDevice, NULL, \
                     0, ByteCount, c, 0, NULL);                                                                    \
    }
ATOD(cuMemcpyAtoD_v2, &legacy)
ATOD(cuMemcpyAtoD_v2_ptds, &per_thread)

#define ATOA(name, c)                                                                                           \
    FGR_EXPORT CUresult name(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,           \
                             size_t ByteCount)                                                                  \
    {                                                                                                           \
        return row1d(CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset, CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, \
                     dstOffset, ByteCount, c, 0, NULL);                                                         \
    }
ATOA(cuMemcpyAtoA_v2, &legacy)
ATOA(cuMemcpyAtoA_v2_ptds, &per_thread)

FGR_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
                                         CUstream hStream)
{
    return row1d(CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, ByteCount,
                 &legacy, 1, hStream);
}
FGR_EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                              size_t ByteCount, CUstream hStream)
{
    return row1d(CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, ByteCount,
                 &per_thread, 1, hStream);
}
FGR_EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                         CUstream hStream)
{
    return row1d(CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset, CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0, ByteCount,
                 &legacy, 1, hStream);
}
FGR_EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                              CUstream hStream)
{
    return row1d(CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset, CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0, ByteCount,
                 &per_thread, 1, hStream);
}
