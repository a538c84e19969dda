/* Graph nodes whose parameters travel as a call's would: a kernel node's
 * structure is taken apart into what a launch sends (its parameters laid
 * out by the function's, api/remote.api's kparams), and put together again
 * by the executor (remote/executor/graphs.c). */
#include "client.h"
#include "flexgv/graph_nodes.h"
#include "flexgv/graph_v1.h"

#include <stdlib.h>
#include <string.h>

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

/* New parameters of a kernel node (hGraphExec NULL) or of its copy in
 * hGraphExec, sent as cuGraphAddKernelNode_v2's are. */
static CUresult kernel_node_set(const char *name, CUgraphExec hGraphExec, CUgraphNode hNode,
                                const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->ctx && p->ctx != fgr_current())
        return fgr_unsupported(-1, name, "a kernel node in a context not current");
    CUfunction f = p->func ? p->func : (CUfunction)p->kern;
    return fgrGraphKernelNodeSetParams(hGraphExec, hNode, f, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX,
                                       p->blockDimY, p->blockDimZ, p->sharedMemBytes, p->kernelParams, p->extra);
}

FGR_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return kernel_node_set("cuGraphKernelNodeSetParams_v2", NULL, hNode, nodeParams);
}

FGR_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                      const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (!hGraphExec)
        return CUDA_ERROR_INVALID_VALUE;
    return kernel_node_set("cuGraphExecKernelNodeSetParams_v2", hGraphExec, hNode, nodeParams);
}

/* A kernel node's parameters: the bytes come back one after another, and
 * kernelParams points at each in the calling thread's copy (the
 * function's layout tells where), valid until its next such call. */
static __thread unsigned char *kparam_bytes;
static __thread void **kparam_ptrs;
static __thread uint32_t kparam_nptrs;

FGR_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (!kparam_bytes && !(kparam_bytes = malloc(FGR_MAX_KPARAM_BYTES)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUfunction f = NULL;
    CUkernel kern = NULL;
    unsigned dims[6] = {0}, shm = 0, bytes = 0;
    CUresult r =
        fgrGraphKernelNodeGetParams(hNode, &f, &kern, dims, &shm, kparam_bytes, FGR_MAX_KPARAM_BYTES, &bytes);
    if (r != CUDA_SUCCESS)
        return r;
    struct fgr_kparams kp;
    if ((r = fgr_kparams_of(f ? f : (CUfunction)kern, &kp)) != CUDA_SUCCESS)
        return r;
    if (kp.n > kparam_nptrs) {
        void **more = realloc(kparam_ptrs, kp.n * sizeof *more);
        if (!more)
            return CUDA_ERROR_OUT_OF_MEMORY;
        kparam_ptrs = more;
        kparam_nptrs = kp.n;
    }
    uint64_t at = 0;
    for (uint32_t i = 0; i < kp.n; i++) {
        kparam_ptrs[i] = kparam_bytes + at;
        at += kp.size[i];
    }
    if (at != bytes) /* the server's layout and the client's disagree */
        return fgr_unsupported(-1, "cuGraphKernelNodeGetParams_v2", "parameters of another layout than the function's");
    memset(nodeParams, 0, sizeof *nodeParams);
    nodeParams->func = f;
    nodeParams->kern = kern;
    nodeParams->gridDimX = dims[0];
    nodeParams->gridDimY = dims[1];
    nodeParams->gridDimZ = dims[2];
    nodeParams->blockDimX = dims[3];
    nodeParams->blockDimY = dims[4];
    nodeParams->blockDimZ = dims[5];
    nodeParams->sharedMemBytes = shm;
    nodeParams->kernelParams = kparam_ptrs;
    return CUDA_SUCCESS;
}

/* A host node runs the program's function here at each launch: the
 * executor's gate hands it to the host-function thread (hostfn.c); without
 * the shared memory or a host-function channel, it is refused. */
FGR_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!nodeParams || !nodeParams->fn)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long id;
    CUresult r = fgr_hostfn_id(nodeParams->fn, nodeParams->userData, 1, &id);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return fgr_unsupported(-1, "cuGraphAddHostNode", "a host node without a host-function channel");
    if (r != CUDA_SUCCESS)
        return r;
    return fgrGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, id);
}

/* A user object's destructor runs here once the server's driver calls the
 * executor's gate in its place (hostfn.c); without the shared memory or a
 * host-function channel, the object is refused. */
FGR_EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                       unsigned int initialRefcount, unsigned int flags)
{
    if (!object_out || !destroy)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long id;
    CUresult r = fgr_hostfn_id(destroy, ptr, 0, &id);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return fgr_unsupported(-1, "cuUserObjectCreate", "a user object without a host-function channel");
    if (r != CUDA_SUCCESS)
        return r;
    r = fgrUserObjectCreate(object_out, id, initialRefcount, flags);
    if (r != CUDA_SUCCESS)
        fgr_hostfn_forget(id);
    return r;
}

CUresult fgrGraphHostNodeGetId(CUgraphNode hNode, unsigned long long *id);
CUresult fgrGraphHostNodeSetId(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned long long id);

FGR_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    unsigned long long id = 0;
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgrGraphHostNodeGetId(hNode, &id);
    if (r == CUDA_SUCCESS && !fgr_hostfn_of(id, &nodeParams->fn, &nodeParams->userData))
        r = CUDA_ERROR_INVALID_VALUE;
    return r;
}

/* New parameters: a new id for the function (the old one may still be an
 * executable's). */
static CUresult host_node_set(const char *name, CUgraphExec hGraphExec, CUgraphNode hNode,
                              const CUDA_HOST_NODE_PARAMS *p)
{
    if (!p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long id;
    CUresult r = fgr_hostfn_id(p->fn, p->userData, 1, &id);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return fgr_unsupported(-1, name, "a host node without a host-function channel");
    return r == CUDA_SUCCESS ? fgrGraphHostNodeSetId(hGraphExec, hNode, id & ~FGR_HOSTFN_KEEP) : r;
}

FGR_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return host_node_set("cuGraphHostNodeSetParams", NULL, hNode, nodeParams);
}

FGR_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!hGraphExec)
        return CUDA_ERROR_INVALID_VALUE;
    return host_node_set("cuGraphExecHostNodeSetParams", hGraphExec, hNode, nodeParams);
}

/* A copy node reads or writes its host side at every launch, long after
 * the call: the executor reaches the connection's memory (over shm://
 * pinned memory from cuMemAllocHost too, the heap mapped there at the
 * program's address); a side in the program's other memory goes through a
 * buffer of the server's (hostcopy.c). */
FGR_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    return fgr_copy_node(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx);
}

/* A stream's capture. Its dependencies are named in an array of the
 * calling thread's, valid until the thread's next such call, as the
 * driver's is until the stream's next captured work. */
static __thread CUgraphNode *capture_deps;
static __thread size_t capture_deps_cap;

static CUresult capture_info(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    if (fgr_none_capturing(s)) { /* as the driver answers of a stream not capturing */
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        if (graph)
            *graph = NULL;
        if (deps)
            *deps = NULL;
        if (edges)
            *edges = NULL;
        if (ndeps)
            *ndeps = 0;
        return CUDA_SUCCESS;
    }
    unsigned st = 0;
    unsigned long long got_id = 0;
    CUgraph g = NULL;
    size_t n = 0;
    unsigned cap = deps ? (unsigned)capture_deps_cap : 0;
    CUresult r = fgrStreamCaptureInfo(s, &st, &got_id, &g, cap ? capture_deps : NULL, &n, cap);
    if (r == CUDA_SUCCESS && deps && n > capture_deps_cap) {
        if (n > FGR_MAX_CAPTURE_DEPS)
            return fgr_unsupported(-1, "cuStreamGetCaptureInfo", "over 4096 dependencies");
        CUgraphNode *more = realloc(capture_deps, n * sizeof *more);
        if (!more)
            return CUDA_ERROR_OUT_OF_MEMORY;
        capture_deps = more;
        capture_deps_cap = n;
        r = fgrStreamCaptureInfo(s, &st, &got_id, &g, capture_deps, &n, (unsigned)n);
    }
    if (r == CUDA_ERROR_NOT_SUPPORTED && edges)
        return fgr_unsupported(-1, "cuStreamGetCaptureInfo_v3", "dependencies whose edges carry data");
    if (r != CUDA_SUCCESS)
        return r;
    *status = (CUstreamCaptureStatus)st;
    if (id)
        *id = got_id;
    if (graph)
        *graph = g;
    if (deps)
        *deps = n ? capture_deps : NULL;
    if (edges)
        *edges = NULL; /* every edge plain */
    if (ndeps)
        *ndeps = n < capture_deps_cap || !deps ? n : capture_deps_cap;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL, numDependencies_out);
}

FGR_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return capture_info(hStream ? hStream : CU_STREAM_PER_THREAD, captureStatus_out, id_out, graph_out,
                        dependencies_out, NULL, numDependencies_out);
}

FGR_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out,
                                              const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                        numDependencies_out);
}

FGR_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out,
                                                   const CUgraphEdgeData **edgeData_out,
                                                   size_t *numDependencies_out)
{
    return capture_info(hStream ? hStream : CU_STREAM_PER_THREAD, captureStatus_out, id_out, graph_out,
                        dependencies_out, edgeData_out, numDependencies_out);
}

/* Arrays a node's parameters point at, which the driver keeps as long as
 * the node: a conditional node's body graphs (the driver creates them; their
 * names are owned by the node in the executor), a batch memory operation
 * node's operations. Here an array the client keeps per node, found again
 * when the node's parameters are read. Kept for the process's life: a few
 * words per such node. */
struct node_array {
    CUgraphNode node;
    size_t bytes;
    void *at;
    struct node_array *next;
};
static struct node_array *node_arrays;
static pthread_mutex_t node_arrays_lock = PTHREAD_MUTEX_INITIALIZER;

/* node's array of at least bytes (an existing one when it is as large), or
 * NULL when out of memory. */
static void *node_array(CUgraphNode node, size_t bytes)
{
    pthread_mutex_lock(&node_arrays_lock);
    struct node_array *b = node_arrays;
    while (b && b->node != node)
        b = b->next;
    if (!b && (b = calloc(1, sizeof *b))) {
        b->node = node;
        b->next = node_arrays;
        node_arrays = b;
    }
    void *a = NULL;
    if (b && b->at && b->bytes >= bytes) {
        a = b->at;
    } else if (b && (a = calloc(1, bytes ? bytes : 1))) {
        /* The smaller one stays allocated: a caller may still hold it. */
        b->at = a;
        b->bytes = bytes;
    }
    pthread_mutex_unlock(&node_arrays_lock);
    return a;
}

static CUgraph *cond_array(CUgraphNode node, unsigned size) { return node_array(node, size * sizeof(CUgraph)); }

static CUresult add_conditional(const char *name, CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies, size_t numDependencies,
                                CUDA_CONDITIONAL_NODE_PARAMS *c)
{
    /* The bodies come back first into a buffer of the call's, then into
     * the node's array once the node is known. */
    if ((uint64_t)c->size * sizeof(CUgraph) > FGR_MAX_BUF)
        return fgr_refused_here(name, CUDA_ERROR_INVALID_VALUE);
    CUgraph *got = c->size ? calloc(c->size, sizeof *got) : NULL;
    if (c->size && !got)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUgraphNode node = NULL;
    CUresult r = fgrGraphAddConditionalNode(&node, hGraph, dependencies, NULL, numDependencies, c->handle,
                                            c->type, c->size, c->ctx, got);
    CUgraph *kept = r == CUDA_SUCCESS ? cond_array(node, c->size) : NULL;
    if (r == CUDA_SUCCESS && !kept)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        if (c->size)
            memcpy(kept, got, c->size * sizeof *got);
        c->phGraph_out = kept;
        if (phGraphNode)
            *phGraphNode = node;
    }
    free(got);
    return r;
}

/* Batch memory operation nodes: the operations travel in the request (the
 * executor checks their addresses); read back, they land in the node's
 * array here. */
FGR_EXPORT CUresult cuGraphAddBatchMemOpNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                             size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    return fgrGraphAddBatchMemOpNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->ctx,
                                     nodeParams->count, nodeParams->paramArray, nodeParams->flags);
}

FGR_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams_out)
{
    enum { FIRST = 16 };
    if (!nodeParams_out)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = NULL;
    unsigned count = 0, flags = 0, cap = FIRST;
    CUstreamBatchMemOpParams first[FIRST], *got = first;
    CUresult r = fgrGraphBatchMemOpNodeGetParams(hNode, &ctx, &count, &flags, got, cap);
    if (r == CUDA_SUCCESS && count > cap) {
        if ((uint64_t)count * sizeof *got > FGR_MAX_BUF || !(got = calloc(count, sizeof *got)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        cap = count;
        r = fgrGraphBatchMemOpNodeGetParams(hNode, &ctx, &count, &flags, got, cap);
    }
    unsigned n = count < cap ? count : cap;
    CUstreamBatchMemOpParams *kept = r == CUDA_SUCCESS ? node_array(hNode, n * sizeof *got) : NULL;
    if (r == CUDA_SUCCESS && !kept)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        memcpy(kept, got, n * sizeof *got);
        nodeParams_out->ctx = ctx;
        nodeParams_out->count = n;
        nodeParams_out->flags = flags;
        nodeParams_out->paramArray = kept;
    }
    if (got != first)
        free(got);
    return r;
}

FGR_EXPORT CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    return nodeParams ? fgrGraphBatchMemOpNodeSetParams(NULL, hNode, nodeParams->ctx, nodeParams->count,
                                                        nodeParams->paramArray, nodeParams->flags)
                      : CUDA_ERROR_INVALID_VALUE;
}

FGR_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    return nodeParams ? fgrGraphBatchMemOpNodeSetParams(hGraphExec, hNode, nodeParams->ctx, nodeParams->count,
                                                        nodeParams->paramArray, nodeParams->flags)
                      : CUDA_ERROR_INVALID_VALUE;
}

/* Conditional nodes and moved child graphs by their own requests, kinds
 * not carried refused, the others through their own entry points. */
static CUresult add_one(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return add_conditional("cuGraphAddNode", phGraphNode, hGraph, dependencies, numDependencies,
                               &p->conditional);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
            return fgrGraphAddMovedChild(phGraphNode, hGraph, dependencies, numDependencies, p->graph.graph);
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        return fgr_unsupported(-1, "cuGraphAddNode", "an external semaphore node (none is imported)");
    default: break;
    }
    return fg_node_add_by_kind(phGraphNode, hGraph, dependencies, numDependencies, p);
}

FGR_EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    return fg_node_add_with_edges(add_one, phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

FGR_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                      CUgraphNodeParams *nodeParams)
{
    return fg_node_add_with_edges(add_one, phGraphNode, hGraph, dependencies, dependencyData, numDependencies,
                                  nodeParams);
}

/* A conditional node's parameters, its bodies in the node's array (a
 * clone's nodes, first seen here, get theirs now). */
FGR_EXPORT CUresult cuGraphNodeGetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    CUgraphConditionalHandle handle = 0;
    unsigned type = 0, size = 0, cap = 4;
    CUcontext ctx = NULL;
    CUgraph first[4], *got = first;
    CUresult r = fgrGraphConditionalNodeGetParams(hNode, &handle, &type, &size, &ctx, got, cap);
    if (r == CUDA_SUCCESS && size > cap) {
        if ((uint64_t)size * sizeof(CUgraph) > FGR_MAX_BUF || !(got = calloc(size, sizeof *got)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        cap = size;
        r = fgrGraphConditionalNodeGetParams(hNode, &handle, &type, &size, &ctx, got, cap);
    }
    CUgraph *kept = r == CUDA_SUCCESS ? cond_array(hNode, size) : NULL;
    if (r == CUDA_SUCCESS && !kept)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        memcpy(kept, got, (size < cap ? size : cap) * sizeof *got);
        memset(nodeParams, 0, sizeof *nodeParams);
        nodeParams->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        nodeParams->conditional.handle = handle;
        nodeParams->conditional.type = (CUgraphConditionalNodeType)type;
        nodeParams->conditional.size = size;
        nodeParams->conditional.ctx = ctx;
        nodeParams->conditional.phGraph_out = kept;
    }
    if (got != first)
        free(got);
    CUgraphNodeType t;
    if (r == CUDA_ERROR_NOT_SUPPORTED && (r = cuGraphNodeGetType(hNode, &t)) == CUDA_SUCCESS)
        return fg_node_get_by_kind(hNode, t, nodeParams);
    return r;
}

/* A conditional node's parameters by their own request, the other kinds'
 * through their own entry points. */
static CUresult set_params(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *p)
{
    CUgraphNodeType t;
    CUresult r = p ? cuGraphNodeGetType(hNode, &t) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (t != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return fg_node_set_by_kind(hGraphExec, hNode, t, p);
    if (p->type != t)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_CONDITIONAL_NODE_PARAMS *c = &p->conditional;
    return fgrGraphConditionalNodeSetParams(hGraphExec, hNode, c->handle, c->type, c->size, c->ctx);
}

FGR_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    return set_params(NULL, hNode, nodeParams);
}

FGR_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    return set_params(hGraphExec, hNode, nodeParams);
}

/* The CUDA 10 and 11 ABIs, made as the current ones. */
FG_GRAPH_V1_ENTRIES(FGR_EXPORT)
