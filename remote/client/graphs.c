/* Graph nodes whose parameters travel as a call's would: a kernel node's
 * structure is taken apart into what a launch sends (its parameters laid
 * out by the function's, api/remote.api's kparams), and put together again
 * by the executor (remote/executor/graphs.c). */
#include "client.h"

FGR_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    const CUDA_KERNEL_NODE_PARAMS *p = nodeParams;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    /* The node's context is the calling thread's; another is not carried. */
    if (p->ctx && p->ctx != fgr_current())
        return fgr_unsupported(-1, "cuGraphAddKernelNode_v2", "a kernel node in a context not current");
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    return fgrGraphAddKernelNode(phGraphNode, hGraph, dependencies, numDependencies, f, p->gridDimX, p->gridDimY,
                                 p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ, p->sharedMemBytes,
                                 p->kernelParams, p->extra);
}

/* A host node runs the program's function here at each launch: over
 * shm:// the executor's gate hands it to the host-function thread
 * (hostfn.c); over a socket nothing can call back, so it is refused. */
FGR_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!nodeParams || !nodeParams->fn)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long id;
    CUresult r = fgr_hostfn_node(nodeParams->fn, nodeParams->userData, &id);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return fgr_unsupported(-1, "cuGraphAddHostNode", "a host node but over shm://");
    if (r != CUDA_SUCCESS)
        return r;
    return fgrGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, id);
}

/* A copy node reads or writes its host side at every launch, long after
 * the call: the executor can reach only the connection's memory, which
 * over shm:// includes pinned memory from cuMemAllocHost (the heap, mapped
 * there at the program's address). The program's other memory is refused
 * here, NOT_SUPPORTED, where a driver would take it. */
static int host_side_unreachable(CUmemorytype t, const void *host, CUdeviceptr dev)
{
    uint64_t p = t == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)host : t == CU_MEMORYTYPE_UNIFIED ? (uint64_t)dev : 0;
    return p && !fgr_range_has(p) && !fgr_heap_mapped((const void *)(uintptr_t)p);
}

FGR_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    const CUDA_MEMCPY3D *c = copyParams;
    if (c && (host_side_unreachable(c->srcMemoryType, c->srcHost, c->srcDevice) ||
              host_side_unreachable(c->dstMemoryType, c->dstHost, c->dstDevice)))
        return fgr_unsupported(-1, "cuGraphAddMemcpyNode",
                               "a copy node with the program's pageable memory (pinned memory from cuMemAllocHost "
                               "over shm:// is carried)");
    return fgr_fwd_cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx);
}
