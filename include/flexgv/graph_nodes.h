/* cuGraphAddNode (CUDA 12.2) and the entry points that read and change a
 * node by its kind's parameters, made through each kind's own entry
 * points: a node so added is the one its own entry point adds, and edges
 * that say more than the order (a programmatic launch's ports) are added
 * after it by cuGraphAddDependencies_v2, as the driver takes them.
 * Shared by the simulated GPU and the remoting client, which each answer
 * conditional nodes and a moved child graph themselves first; external
 * semaphore nodes are neither's. */
#ifndef FLEXGV_GRAPH_NODES_H
#define FLEXGV_GRAPH_NODES_H

#include "flexgv/cuda_api_gen.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline CUDA_MEMSET_NODE_PARAMS fg_memset_of_v2(const CUDA_MEMSET_NODE_PARAMS_v2 *m)
{
    CUDA_MEMSET_NODE_PARAMS o = {m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
    return o;
}

/* Edges that say nothing but the order: what the entry points by kind add. */
static inline int fg_plain_edges(const CUgraphEdgeData *e, size_t n)
{
    static const CUgraphEdgeData zero;
    for (size_t i = 0; e && i < n; i++)
        if (memcmp(&e[i], &zero, sizeof zero))
            return 0;
    return 1;
}

/* A node of p's kind (not a conditional one, nor a moved child graph)
 * after deps, by its kind's entry point. */
static inline CUresult fg_node_add_by_kind(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
                                           CUgraphNodeParams *p)
{
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return cuGraphAddKernelNode_v2(ph, g, deps, n, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphAddMemcpyNode(ph, g, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m = fg_memset_of_v2(&p->memset);
        return cuGraphAddMemsetNode(ph, g, deps, n, &m, p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: return cuGraphAddHostNode(ph, g, deps, n, &p->host);
    case CU_GRAPH_NODE_TYPE_GRAPH: return cuGraphAddChildGraphNode(ph, g, deps, n, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY: return cuGraphAddEmptyNode(ph, g, deps, n);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphAddEventWaitNode(ph, g, deps, n, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return cuGraphAddEventRecordNode(ph, g, deps, n, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return cuGraphAddMemAllocNode(ph, g, deps, n, &p->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return cuGraphAddMemFreeNode(ph, g, deps, n, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return cuGraphAddBatchMemOpNode(ph, g, deps, n, &p->memOp);
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE; /* no such kind */
    }
}

/* add (fg_node_add_by_kind, or a side's own for the kinds it answers
 * first) with edges: plain ones its own, others added after the node. A
 * node whose edges are refused is destroyed again. */
static inline CUresult fg_node_add_with_edges(CUresult (*add)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                                              CUgraphNodeParams *),
                                              CUgraphNode *ph, CUgraph g, const CUgraphNode *deps,
                                              const CUgraphEdgeData *edges, size_t n, CUgraphNodeParams *p)
{
    if (!ph || !p || (n && !deps) || n > SIZE_MAX / sizeof(CUgraphNode))
        return CUDA_ERROR_INVALID_VALUE;
    if (fg_plain_edges(edges, n))
        return add(ph, g, deps, n, p);
    CUgraphNode *to = malloc(n * sizeof *to), node = NULL;
    if (!to)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = add(&node, g, NULL, 0, p);
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
        to[i] = node;
    if (r == CUDA_SUCCESS && (r = cuGraphAddDependencies_v2(g, deps, to, edges, n)) != CUDA_SUCCESS)
        cuGraphDestroyNode(node);
    free(to);
    if (r == CUDA_SUCCESS)
        *ph = node;
    return r;
}

/* hNode's parameters, of kind t (a copy or memset node's context is the
 * current one: their own entry points keep none). */
static inline CUresult fg_node_get_by_kind(CUgraphNode hNode, CUgraphNodeType t, CUgraphNodeParams *p)
{
    memset(p, 0, sizeof *p);
    p->type = t;
    CUresult r;
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return cuGraphKernelNodeGetParams_v2(hNode, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        r = cuGraphMemcpyNodeGetParams(hNode, &p->memcpy.copyParams);
        return r == CUDA_SUCCESS ? cuCtxGetCurrent(&p->memcpy.copyCtx) : r;
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m;
        if ((r = cuGraphMemsetNodeGetParams(hNode, &m)) != CUDA_SUCCESS)
            return r;
        memcpy(&p->memset, &m, sizeof m);
        return cuCtxGetCurrent(&p->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: return cuGraphHostNodeGetParams(hNode, &p->host);
    case CU_GRAPH_NODE_TYPE_GRAPH: return cuGraphChildGraphNodeGetGraph(hNode, &p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return cuGraphEventWaitNodeGetEvent(hNode, &p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return cuGraphEventRecordNodeGetEvent(hNode, &p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return cuGraphMemAllocNodeGetParams(hNode, &p->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return cuGraphMemFreeNodeGetParams(hNode, &p->free.dptr);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return cuGraphBatchMemOpNodeGetParams(hNode, &p->memOp);
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* hNode (of kind t) takes p's parameters: in its graph (exec NULL), or in
 * the executable exec only. A kind whose parameters cannot change (a
 * graph's child graph, memory nodes, an empty node) is not supported. */
static inline CUresult fg_node_set_by_kind(CUgraphExec exec, CUgraphNode hNode, CUgraphNodeType t,
                                           const CUgraphNodeParams *p)
{
    if (p->type != t)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMSET_NODE_PARAMS m;
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        return exec ? cuGraphExecKernelNodeSetParams_v2(exec, hNode, &p->kernel)
                    : cuGraphKernelNodeSetParams_v2(hNode, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return exec ? cuGraphExecMemcpyNodeSetParams(exec, hNode, &p->memcpy.copyParams, p->memcpy.copyCtx)
                    : cuGraphMemcpyNodeSetParams(hNode, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        m = fg_memset_of_v2(&p->memset);
        return exec ? cuGraphExecMemsetNodeSetParams(exec, hNode, &m, p->memset.ctx)
                    : cuGraphMemsetNodeSetParams(hNode, &m);
    case CU_GRAPH_NODE_TYPE_HOST:
        return exec ? cuGraphExecHostNodeSetParams(exec, hNode, &p->host) : cuGraphHostNodeSetParams(hNode, &p->host);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return exec ? cuGraphExecChildGraphNodeSetParams(exec, hNode, p->graph.graph) : CUDA_ERROR_NOT_SUPPORTED;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return exec ? cuGraphExecEventWaitNodeSetEvent(exec, hNode, p->eventWait.event)
                    : cuGraphEventWaitNodeSetEvent(hNode, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return exec ? cuGraphExecEventRecordNodeSetEvent(exec, hNode, p->eventRecord.event)
                    : cuGraphEventRecordNodeSetEvent(hNode, p->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        return exec ? cuGraphExecBatchMemOpNodeSetParams(exec, hNode, &p->memOp)
                    : cuGraphBatchMemOpNodeSetParams(hNode, &p->memOp);
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

#endif
