/* Graph nodes whose structures the client took apart to send
 * (remote/client/graphs.c): put together again here around what the
 * request carried, after the generated checks. */
#include "executor.h"

#include "flexgv/cuda_util.h"

#include <dlfcn.h>

static CUresult (*add_kernel_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   const CUDA_KERNEL_NODE_PARAMS *);

/* fgrGraphAddKernelNode: f is a function or a library's kernel (the
 * structure's func or kern), its parameters laid out in the request. */
static CUresult kernel_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                            size_t numDependencies, CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                            unsigned int blockDimZ, unsigned int sharedMemBytes, void **kernelParams, void **extra)
{
    CUDA_KERNEL_NODE_PARAMS p = {
        .gridDimX = gridDimX,
        .gridDimY = gridDimY,
        .gridDimZ = gridDimZ,
        .blockDimX = blockDimX,
        .blockDimY = blockDimY,
        .blockDimZ = blockDimZ,
        .sharedMemBytes = sharedMemBytes,
        .kernelParams = kernelParams,
        .extra = extra,
    };
    if (fgr_has(FGR_H_CUkernel, (uint64_t)(uintptr_t)f) && f)
        p.kern = (CUkernel)f;
    else
        p.func = f;
    return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

void fgr_graphs_init(void *driver)
{
    *(void **)&add_kernel_node = dlsym(driver, "cuGraphAddKernelNode_v2");
    if (add_kernel_node)
        fgr_real[FGR_OP_fgrGraphAddKernelNode] = (void *)kernel_node;
}

/* One side of a copy node: its bytes lie in one of the connection's ranges,
 * device memory or the pinned heap where the executor mapped it at the
 * program's address (a host pointer is then the same here). */
static int side_in(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch,
                   size_t height, const CUDA_MEMCPY3D *c)
{
    if (t != CU_MEMORYTYPE_HOST && t != CU_MEMORYTYPE_DEVICE && t != CU_MEMORYTYPE_UNIFIED)
        return 0;
    uint64_t p = t == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)host : (uint64_t)dev;
    uint64_t slice = fgr_mul(pitch, height), off;
    if (__builtin_add_overflow((uint64_t)x, fgr_mul(y, pitch), &off) ||
        __builtin_add_overflow(off, fgr_mul(z, slice), &off) || __builtin_add_overflow(p, off, &p))
        return 0;
    uint64_t n = c->Height > 1 || c->Depth > 1 ? fgr_span(slice, fgr_span(pitch, c->WidthInBytes, c->Height), c->Depth)
                                               : (c->Depth ? c->WidthInBytes : 0);
    return fgr_mem_in(p, n);
}

int fgr_copy3d_in(const CUDA_MEMCPY3D *c)
{
    return fg_memcpy3d_valid(c) &&
           side_in(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
                   c->srcHeight, c) &&
           side_in(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
                   c->dstHeight, c);
}

int fgr_copy3d_arrays(const CUDA_MEMCPY3D *c)
{
    return c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY;
}
