/* Batches of stream memory operations (cuStreamBatchMemOp, and a graph's
 * batch memory operation nodes): each operation's address lies in the
 * parameters, beyond what the generated checks see, so each is checked
 * here against the connection's memory (at the program's address,
 * translated where a move placed it elsewhere) before the driver is given
 * the batch. */
#include "executor.h"

#include <dlfcn.h>
#include <string.h>

typedef CUresult (*batch_fn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
static batch_fn batch_v1, batch_v2;
static CUresult (*node_add)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_BATCH_MEM_OP_NODE_PARAMS *);
static CUresult (*node_get)(CUgraphNode, CUDA_BATCH_MEM_OP_NODE_PARAMS *);
static CUresult (*node_set)(CUgraphNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *);
static CUresult (*exec_node_set)(CUgraphExec, CUgraphNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *);

/* 0 when every operation is one of the driver's, on the connection's
 * memory; the addresses translated in place. */
static CUresult check(unsigned int count, CUstreamBatchMemOpParams *ops)
{
    if (!ops)
        return count ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    for (unsigned int i = 0; i < count; i++) {
        CUstreamBatchMemOpType t = ops[i].operation;
        uint64_t width = t == CU_STREAM_MEM_OP_WAIT_VALUE_32 || t == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4
                       : t == CU_STREAM_MEM_OP_WAIT_VALUE_64 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8
                                                                                                     : 0;
        if (!width) {
            if (t != CU_STREAM_MEM_OP_BARRIER && t != CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES)
                return CUDA_ERROR_INVALID_VALUE;
            continue;
        }
        /* the wait's and the write's address lie at the same place */
        uint64_t a = fgr_moved(ops[i].waitValue.address);
        if (!fgr_mem_in(a, width))
            return CUDA_ERROR_INVALID_VALUE;
        ops[i].waitValue.address = a;
    }
    return CUDA_SUCCESS;
}

static CUresult checked_v1(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    CUresult r = check(count, ops);
    return r ? r : batch_v1(s, count, ops, flags);
}

static CUresult checked_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    CUresult r = check(count, ops);
    return r ? r : batch_v2(s, count, ops, flags);
}

/* fgrGraphAddBatchMemOpNode: cuGraphAddBatchMemOpNode with its operations checked. */
static CUresult add_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                         size_t numDependencies, CUcontext ctx, unsigned int count, CUstreamBatchMemOpParams *ops,
                         unsigned int flags)
{
    CUresult r = check(count, ops);
    CUDA_BATCH_MEM_OP_NODE_PARAMS p = {ctx, count, ops, flags};
    return r ? r : node_add(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

/* fgrGraphBatchMemOpNodeGetParams: the node's operations, as many as cap
 * (count says how many it has); its context only when the connection's. */
static CUresult get_node(CUgraphNode hNode, CUcontext *ctx, unsigned int *count, unsigned int *flags,
                         CUstreamBatchMemOpParams *ops, unsigned int cap)
{
    CUDA_BATCH_MEM_OP_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    if (!ctx || !count || !flags || (cap && !ops))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = node_get(hNode, &p);
    if (r != CUDA_SUCCESS)
        return r;
    *ctx = fgr_has(FGR_H_CUcontext, (uint64_t)(uintptr_t)p.ctx) ? p.ctx : NULL;
    *count = p.count;
    *flags = p.flags;
    if (p.paramArray)
        memcpy(ops, p.paramArray, (p.count < cap ? p.count : cap) * sizeof *ops);
    return CUDA_SUCCESS;
}

/* fgrGraphBatchMemOpNodeSetParams: the graph's node (hGraphExec NULL) or
 * an executable's copy of it, its operations checked. */
static CUresult set_node(CUgraphExec hGraphExec, CUgraphNode hNode, CUcontext ctx, unsigned int count,
                         CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    CUresult r = check(count, ops);
    CUDA_BATCH_MEM_OP_NODE_PARAMS p = {ctx, count, ops, flags};
    if (r != CUDA_SUCCESS)
        return r;
    if (hGraphExec)
        return exec_node_set ? exec_node_set(hGraphExec, hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
    return node_set ? node_set(hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
}

void fgr_memops_init(void *driver)
{
    *(void **)&batch_v1 = dlsym(driver, "cuStreamBatchMemOp");
    *(void **)&batch_v2 = dlsym(driver, "cuStreamBatchMemOp_v2");
    fgr_real[FGR_OP_cuStreamBatchMemOp] = batch_v1 ? (void *)checked_v1 : NULL;
    fgr_real[FGR_OP_cuStreamBatchMemOp_v2] = batch_v2 ? (void *)checked_v2 : NULL;
    *(void **)&node_add = dlsym(driver, "cuGraphAddBatchMemOpNode");
    *(void **)&node_get = dlsym(driver, "cuGraphBatchMemOpNodeGetParams");
    *(void **)&node_set = dlsym(driver, "cuGraphBatchMemOpNodeSetParams");
    *(void **)&exec_node_set = dlsym(driver, "cuGraphExecBatchMemOpNodeSetParams");
    fgr_real[FGR_OP_fgrGraphAddBatchMemOpNode] = node_add ? (void *)add_node : NULL;
    fgr_real[FGR_OP_fgrGraphBatchMemOpNodeGetParams] = node_get ? (void *)get_node : NULL;
    fgr_real[FGR_OP_fgrGraphBatchMemOpNodeSetParams] = node_set || exec_node_set ? (void *)set_node : NULL;
}
