/* The CUDA 10 and 11 ABIs of kernel nodes, executable updates and capture
 * information, which CUDA 11 runtimes look up at their own version, made
 * as the current ones: the old kernel node layout is the new one without
 * a kernel handle and context. Shared by the simulated GPU and the
 * remoting client. */
#ifndef FLEXGV_GRAPH_V1_H
#define FLEXGV_GRAPH_V1_H

#include "flexgv/cuda_types.h"

#include <string.h>

static inline CUDA_KERNEL_NODE_PARAMS fg_kernel_node_of_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS n = {0};
    memcpy(&n, p, sizeof *p);
    return n;
}

/* The old entry's result, as driver 580's answers it (its result is
 * optional there): another topology is not supported by it. */
static inline CUgraphExecUpdateResult fg_update_result_v1(CUgraphExecUpdateResult r)
{
    return r == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED ? CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED : r;
}

/* Each exported definition of prefix's over the current entry points. */
#define FG_GRAPH_V1_ENTRIES(prefix)                                                                                  \
    prefix CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies, \
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)      \
    {                                                                                                                \
        CUDA_KERNEL_NODE_PARAMS n;                                                                                   \
        return nodeParams ? (n = fg_kernel_node_of_v1(nodeParams),                                                   \
                             cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &n))        \
                          : CUDA_ERROR_INVALID_VALUE;                                                                \
    }                                                                                                                \
    prefix CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)      \
    {                                                                                                                \
        CUDA_KERNEL_NODE_PARAMS n;                                                                                   \
        return nodeParams ? (n = fg_kernel_node_of_v1(nodeParams), cuGraphKernelNodeSetParams_v2(hNode, &n))         \
                          : CUDA_ERROR_INVALID_VALUE;                                                                \
    }                                                                                                                \
    prefix CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,                        \
                                                   const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)                     \
    {                                                                                                                \
        CUDA_KERNEL_NODE_PARAMS n;                                                                                   \
        return nodeParams ? (n = fg_kernel_node_of_v1(nodeParams),                                                   \
                             cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &n))                               \
                          : CUDA_ERROR_INVALID_VALUE;                                                                \
    }                                                                                                                \
    prefix CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)            \
    {                                                                                                                \
        CUDA_KERNEL_NODE_PARAMS n;                                                                                   \
        CUresult r = nodeParams ? cuGraphKernelNodeGetParams_v2(hNode, &n) : CUDA_ERROR_INVALID_VALUE;               \
        if (r == CUDA_SUCCESS)                                                                                       \
            memcpy(nodeParams, &n, sizeof *nodeParams);                                                              \
        return r;                                                                                                    \
    }                                                                                                                \
    prefix CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,           \
                                      CUgraphExecUpdateResult *updateResult_out)                                     \
    {                                                                                                                \
        if (!hErrorNode_out)                                                                                         \
            return CUDA_ERROR_INVALID_VALUE;                                                                         \
        CUgraphExecUpdateResultInfo info = {0};                                                                      \
        CUresult r = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);                                                \
        *hErrorNode_out = info.errorNode;                                                                            \
        if (updateResult_out)                                                                                        \
            *updateResult_out = fg_update_result_v1(info.result);                                                    \
        return r;                                                                                                    \
    }                                                                                                                \
    prefix CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,               \
                                           cuuint64_t *id_out)                                                       \
    {                                                                                                                \
        return cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, NULL, NULL, NULL);                      \
    }                                                                                                                \
    prefix CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,          \
                                                cuuint64_t *id_out)                                                  \
    {                                                                                                                \
        return cuStreamGetCaptureInfo_v2_ptsz(hStream, captureStatus_out, id_out, NULL, NULL, NULL);                 \
    }

#endif
