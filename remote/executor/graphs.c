/* Graph nodes whose structures the client took apart to send
 * (remote/client/graphs.c): put together again here around what the
 * request carried, after the generated checks. */
#include "executor.h"

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
