/* 3D copies between contexts (cuMemcpy3DPeer) made as cuMemcpy3D: under
 * unified addressing each side's memory says which device it is on, and
 * the parameters are the same but for the contexts. Shared by the
 * simulated GPU and the remoting client. */
#ifndef FLEXGV_MEMCPY3D_PEER_H
#define FLEXGV_MEMCPY3D_PEER_H

#include "flexgv/cuda_types.h"

static inline CUDA_MEMCPY3D fg_memcpy3d_of_peer(const CUDA_MEMCPY3D_PEER *p)
{
    CUDA_MEMCPY3D c = {
        .srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcZ = p->srcZ, .srcLOD = p->srcLOD,
        .srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost, .srcDevice = p->srcDevice,
        .srcArray = p->srcArray, .srcPitch = p->srcPitch, .srcHeight = p->srcHeight,
        .dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstZ = p->dstZ, .dstLOD = p->dstLOD,
        .dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
        .dstArray = p->dstArray, .dstPitch = p->dstPitch, .dstHeight = p->dstHeight,
        .WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = p->Depth,
    };
    return c;
}

/* The four ABIs, each an exported definition of prefix's over the
 * cuMemcpy3D of the same form. */
#define FG_MEMCPY3D_PEER_ENTRIES(prefix, copy, copy_ptds, copy_async, copy_async_ptsz)                              \
    prefix CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)                                                     \
    {                                                                                                                \
        CUDA_MEMCPY3D c;                                                                                             \
        return p ? (c = fg_memcpy3d_of_peer(p), copy(&c)) : CUDA_ERROR_INVALID_VALUE;                                \
    }                                                                                                                \
    prefix CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p)                                                \
    {                                                                                                                \
        CUDA_MEMCPY3D c;                                                                                             \
        return p ? (c = fg_memcpy3d_of_peer(p), copy_ptds(&c)) : CUDA_ERROR_INVALID_VALUE;                           \
    }                                                                                                                \
    prefix CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)                                    \
    {                                                                                                                \
        CUDA_MEMCPY3D c;                                                                                             \
        return p ? (c = fg_memcpy3d_of_peer(p), copy_async(&c, s)) : CUDA_ERROR_INVALID_VALUE;                       \
    }                                                                                                                \
    prefix CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s)                               \
    {                                                                                                                \
        CUDA_MEMCPY3D c;                                                                                             \
        return p ? (c = fg_memcpy3d_of_peer(p), copy_async_ptsz(&c, s)) : CUDA_ERROR_INVALID_VALUE;                  \
    }

#endif
