/* Graph nodes whose structures the client took apart to send
 * (remote/client/graphs.c): put together again here around what the
 * request carried, after the generated checks. */
#include "executor.h"

#include "flexgv/cuda_util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static CUresult (*add_kernel_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   const CUDA_KERNEL_NODE_PARAMS *);

/* A kernel node's parameters as the driver takes them: f is a library's
 * kernel (the structure's kern) or a function (its func). */
static CUDA_KERNEL_NODE_PARAMS node_params(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, void **kernelParams,
                                           void **extra)
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
    return p;
}

/* fgrGraphAddKernelNode: f is a function or a library's kernel (the
 * structure's func or kern), its parameters laid out in the request. */
static CUresult kernel_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                            size_t numDependencies, CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                            unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                            unsigned int blockDimZ, unsigned int sharedMemBytes, void **kernelParams, void **extra)
{
    CUDA_KERNEL_NODE_PARAMS p = node_params(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                            sharedMemBytes, kernelParams, extra);
    return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

static CUresult (*kernel_get)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
static CUresult (*kernel_set)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
static CUresult (*exec_kernel_set)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);

/* fgrGraphKernelNodeSetParams: the node's (hGraphExec NULL) or its copy's
 * in hGraphExec, put together as kernel_node's. */
static CUresult kernel_node_set(CUgraphExec hGraphExec, CUgraphNode hNode, CUfunction f, unsigned int gridDimX,
                                unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
                                void **kernelParams, void **extra)
{
    CUDA_KERNEL_NODE_PARAMS p = node_params(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                            sharedMemBytes, kernelParams, extra);
    if (hGraphExec)
        return exec_kernel_set ? exec_kernel_set(hGraphExec, hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
    return kernel_set ? kernel_set(hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
}

/* fgrGraphKernelNodeGetParams: the node's function and library kernel
 * as the driver gives them, its launch shape, and its parameters one
 * after another as the function (else the kernel) lays them out (at most
 * cap bytes; *bytes of them). */
static CUresult kernel_node_get(CUgraphNode hNode, CUfunction *f, CUkernel *kern, unsigned int *dims,
                                unsigned int *sharedMemBytes, void *params, unsigned int cap, unsigned int *bytes)
{
    if (!f || !kern || !dims || !sharedMemBytes || !bytes || (cap && !params))
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    CUresult r = kernel_get(hNode, &p);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned n = 0;
    unsigned sizes[FGR_MAX_KPARAMS];
    if ((r = fgr_func_sizes(p.func ? p.func : (CUfunction)p.kern, FGR_MAX_KPARAMS, &n, sizes, NULL)) != CUDA_SUCCESS)
        return r;
    if (n && !p.kernelParams) /* given in extra: not laid out by the driver */
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        if (sizes[i] > cap - at)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy((char *)params + at, p.kernelParams[i], sizes[i]);
        at += sizes[i];
    }
    *f = p.func;
    *kern = p.kern;
    dims[0] = p.gridDimX;
    dims[1] = p.gridDimY;
    dims[2] = p.gridDimZ;
    dims[3] = p.blockDimX;
    dims[4] = p.blockDimY;
    dims[5] = p.blockDimZ;
    *sharedMemBytes = p.sharedMemBytes;
    *bytes = (unsigned)at;
    return CUDA_SUCCESS;
}

static CUresult (*add_node_v2)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                               CUgraphNodeParams *);
static CUresult (*add_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
static CUresult (*node_get_params)(CUgraphNode, CUgraphNodeParams *);
static CUresult (*node_set_params)(CUgraphNode, CUgraphNodeParams *);
static CUresult (*exec_node_set_params)(CUgraphExec, CUgraphNode, CUgraphNodeParams *);

/* fgrGraphAddConditionalNode: the driver creates size body graphs and
 * points phGraph_out at its own array of them; they are copied to bodies
 * (size of them: the request's buffer) and owned by the new node, so that
 * destroying it or its graph forgets them. */
static CUresult conditional_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                 const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                 CUgraphConditionalHandle handle, unsigned int type, unsigned int size, CUcontext ctx,
                                 CUgraph *bodies)
{
    if (!phGraphNode || (size && !bodies))
        return fgr_refuse("fgrGraphAddConditionalNode", "bodies", size, CUDA_ERROR_INVALID_VALUE);
    if (dependencyData && !add_node_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = handle;
    p.conditional.type = (CUgraphConditionalNodeType)type;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    CUresult r = add_node_v2 ? add_node_v2(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, &p)
                             : add_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
    if (r != CUDA_SUCCESS)
        return r;
    for (unsigned i = 0; i < size; i++) {
        bodies[i] = p.conditional.phGraph_out ? p.conditional.phGraph_out[i] : NULL;
        fgr_add(FGR_H_CUgraph, (uint64_t)(uintptr_t)bodies[i], FGR_H_CUgraphNode, (uint64_t)(uintptr_t)*phGraphNode);
    }
    return CUDA_SUCCESS;
}

/* fgrGraphAddMovedChild: a child graph moved into its node (CUDA 12.9); a
 * node's graph is not moved again (a driver 580 answers NOT_SUPPORTED).
 * The connection's graph, its nodes and names as they were, is the node's
 * from then on: forgotten with it, and not to be destroyed by itself. */
static CUresult moved_child(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                            size_t numDependencies, CUgraph childGraph)
{
    if (!phGraphNode)
        return fgr_refuse("fgrGraphAddMovedChild", "phGraphNode", 0, CUDA_ERROR_INVALID_VALUE);
    if (fgr_owned_by(FGR_H_CUgraph, (uint64_t)(uintptr_t)childGraph, FGR_H_CUgraphNode))
        return fgr_refuse("fgrGraphAddMovedChild", "childGraph (a node's)", 0, CUDA_ERROR_NOT_SUPPORTED);
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_GRAPH;
    p.graph.graph = childGraph;
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    CUresult r = add_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
    if (r == CUDA_SUCCESS)
        fgr_own_by(FGR_H_CUgraph, (uint64_t)(uintptr_t)childGraph, FGR_H_CUgraphNode,
                   (uint64_t)(uintptr_t)*phGraphNode);
    return r;
}

/* hNode's parameters, a conditional node's only. */
static CUresult conditional_params(CUgraphNode hNode, CUgraphNodeParams *p)
{
    memset(p, 0, sizeof *p);
    CUresult r = node_get_params(hNode, p);
    if (r == CUDA_SUCCESS && p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return CUDA_ERROR_NOT_SUPPORTED;
    return r;
}

/* A conditional node's parameters: other kinds' are not carried. The
 * context is given back only when it is the connection's. */
static CUresult conditional_get(CUgraphNode hNode, CUgraphConditionalHandle *handle, unsigned int *type,
                                unsigned int *size, CUcontext *ctx, CUgraph *bodies, unsigned int cap)
{
    if (!handle || !type || !size || !ctx || (cap && !bodies))
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphNodeParams p;
    CUresult r = conditional_params(hNode, &p);
    if (r != CUDA_SUCCESS)
        return r;
    *handle = p.conditional.handle;
    *type = p.conditional.type;
    *size = p.conditional.size;
    *ctx = fgr_has(FGR_H_CUcontext, (uint64_t)(uintptr_t)p.conditional.ctx) ? p.conditional.ctx : NULL;
    for (unsigned i = 0; i < cap; i++)
        bodies[i] = i < p.conditional.size && p.conditional.phGraph_out ? p.conditional.phGraph_out[i] : NULL;
    return CUDA_SUCCESS;
}

/* A conditional node's new parameters (of the graph's node, or of its
 * copy in hGraphExec): its body graphs stay the driver's, as the node has
 * them. */
static CUresult conditional_set(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphConditionalHandle handle,
                                unsigned int type, unsigned int size, CUcontext ctx)
{
    CUgraphNodeParams p;
    CUresult r = conditional_params(hNode, &p);
    if (r != CUDA_SUCCESS)
        return r;
    p.conditional.handle = handle;
    p.conditional.type = (CUgraphConditionalNodeType)type;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    if (hGraphExec)
        return exec_node_set_params ? exec_node_set_params(hGraphExec, hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
    return node_set_params ? node_set_params(hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
}

/* fgrStreamCaptureInfo: a stream's capture, its dependencies (at most
 * cap of them copied; ndeps says how many there are). Of the third
 * version, dependencies whose edges carry data are not carried. */
static CUresult (*capture_info_v2)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **,
                                   size_t *);
static CUresult (*capture_info_v3)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **,
                                   const CUgraphEdgeData **, size_t *);

/* The driver's answer, by whichever version it has (e: NULL by the second). */
struct capture {
    CUstreamCaptureStatus st;
    cuuint64_t id;
    CUgraph g;
    const CUgraphNode *d;
    const CUgraphEdgeData *e;
    size_t n;
};

static CUresult capture_of(CUstream s, struct capture *c)
{
    *c = (struct capture){CU_STREAM_CAPTURE_STATUS_NONE, 0, NULL, NULL, NULL, 0};
    return capture_info_v2   ? capture_info_v2(s, &c->st, &c->id, &c->g, &c->d, &c->n)
           : capture_info_v3 ? capture_info_v3(s, &c->st, &c->id, &c->g, &c->d, &c->e, &c->n)
                             : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult capture_info(CUstream s, unsigned int *status, unsigned long long *id, CUgraph *graph,
                             CUgraphNode *deps, size_t *ndeps, unsigned int cap)
{
    if (!status || !id || !graph || !ndeps || (cap && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    struct capture c;
    CUresult r = capture_of(s, &c);
    if (r != CUDA_SUCCESS)
        return r;
    static const CUgraphEdgeData plain;
    for (size_t k = 0; c.e && k < c.n; k++)
        if (memcmp(&c.e[k], &plain, sizeof plain))
            return CUDA_ERROR_NOT_SUPPORTED;
    *status = c.st;
    *id = c.id;
    *graph = c.st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? c.g : NULL;
    *ndeps = c.st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? c.n : 0;
    for (size_t k = 0; k < cap && k < *ndeps && c.d; k++)
        deps[k] = c.d[k];
    return CUDA_SUCCESS;
}

int fgr_capture_of(uint64_t s, uint64_t *id)
{
    struct capture c;
    CUresult r = capture_of((CUstream)(uintptr_t)s, &c);
    *id = c.id;
    return r == CUDA_SUCCESS ? (int)c.st : CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A graph a node owns (a conditional node's body, a child graph node's
 * graph) goes with its node: destroyed alone, the node would hold a freed
 * graph. */
static CUresult (*graph_destroy)(CUgraph);

static CUresult destroy_graph(CUgraph hGraph)
{
    if (fgr_owned_by(FGR_H_CUgraph, (uint64_t)(uintptr_t)hGraph, FGR_H_CUgraphNode))
        return fgr_refuse("cuGraphDestroy", "hGraph (a node's)", 0, CUDA_ERROR_INVALID_VALUE);
    return graph_destroy(hGraph);
}

static CUresult (*dot_print)(CUgraph, const char *, unsigned int);

/* The driver's print of a graph, into a file of this process's own (a
 * memfd: nothing lands on the server's disk), read back for the client: at
 * most cap bytes of its *n. */
static CUresult graph_dot(CUgraph hGraph, unsigned int flags, char *text, size_t cap, size_t *n)
{
    if (!text || !n)
        return CUDA_ERROR_INVALID_VALUE;
    if (cap > FGR_DOT_MAX)
        cap = FGR_DOT_MAX; /* the room api/remote.api gives it, whatever the client says */
    int fd = memfd_create("graph.dot", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    CUresult r = dot_print(hGraph, path, flags);
    struct stat st;
    if (r == CUDA_SUCCESS && fstat(fd, &st) != 0)
        r = CUDA_ERROR_OPERATING_SYSTEM;
    if (r == CUDA_SUCCESS) {
        *n = (size_t)st.st_size;
        size_t k = *n < cap ? *n : cap;
        if (pread(fd, text, k, 0) != (ssize_t)k)
            r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    close(fd);
    return r;
}

void fgr_graphs_init(void *driver)
{
    *(void **)&dot_print = dlsym(driver, "cuGraphDebugDotPrint");
    fgr_real[FGR_OP_fgrGraphDot] = dot_print ? (void *)graph_dot : NULL;
    *(void **)&add_kernel_node = dlsym(driver, "cuGraphAddKernelNode_v2");
    if (add_kernel_node)
        fgr_real[FGR_OP_fgrGraphAddKernelNode] = (void *)kernel_node;
    *(void **)&kernel_get = dlsym(driver, "cuGraphKernelNodeGetParams_v2");
    *(void **)&kernel_set = dlsym(driver, "cuGraphKernelNodeSetParams_v2");
    *(void **)&exec_kernel_set = dlsym(driver, "cuGraphExecKernelNodeSetParams_v2");
    fgr_real[FGR_OP_fgrGraphKernelNodeGetParams] = kernel_get ? (void *)kernel_node_get : NULL;
    fgr_real[FGR_OP_fgrGraphKernelNodeSetParams] = kernel_set || exec_kernel_set ? (void *)kernel_node_set : NULL;
    *(void **)&add_node_v2 = dlsym(driver, "cuGraphAddNode_v2");
    *(void **)&add_node = dlsym(driver, "cuGraphAddNode");
    *(void **)&node_get_params = dlsym(driver, "cuGraphNodeGetParams");
    *(void **)&node_set_params = dlsym(driver, "cuGraphNodeSetParams");
    *(void **)&exec_node_set_params = dlsym(driver, "cuGraphExecNodeSetParams");
    fgr_real[FGR_OP_fgrGraphAddConditionalNode] = add_node_v2 || add_node ? (void *)conditional_node : NULL;
    fgr_real[FGR_OP_fgrGraphAddMovedChild] = add_node ? (void *)moved_child : NULL;
    fgr_real[FGR_OP_fgrGraphConditionalNodeGetParams] = node_get_params ? (void *)conditional_get : NULL;
    fgr_real[FGR_OP_fgrGraphConditionalNodeSetParams] = node_get_params ? (void *)conditional_set : NULL;
    *(void **)&capture_info_v2 = dlsym(driver, "cuStreamGetCaptureInfo_v2");
    *(void **)&capture_info_v3 = dlsym(driver, "cuStreamGetCaptureInfo_v3");
    fgr_real[FGR_OP_fgrStreamCaptureInfo] = capture_info_v2 || capture_info_v3 ? (void *)capture_info : NULL;
    *(void **)&graph_destroy = fgr_real[FGR_OP_cuGraphDestroy];
    if (graph_destroy)
        fgr_real[FGR_OP_cuGraphDestroy] = (void *)destroy_graph;
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
