/* Memory quotas: graph memory. Allocation nodes (captured cuMemAllocAsync,
 * cuGraphAddMemAllocNode) reserve physical memory in the device's graph
 * memory pool when an executable graph is uploaded or launched, not when it
 * is built; the pool keeps it until cuDeviceGraphMemTrim or the context
 * goes. The tenant is charged what that pool reserves
 * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), settled after every upload,
 * launch, trim, destroy and synchronization. Before a graph runs, the most
 * it can add — its allocation nodes (each rounded up to the pool's 2 MiB
 * granularity), less what the pool holds unused — must fit in the quota,
 * otherwise the launch fails with CUDA_ERROR_OUT_OF_MEMORY as on a full GPU.
 * Graphs without allocation nodes cost one table lookup per launch. */
#include "memquota.h"

#include <stdlib.h>
#include <string.h>

#define GRANULE (2ull << 20)
#define MAX_DEPTH 8
#define MAX_DEV 64

static uint64_t charged[MAX_DEV]; /* per device: what its graph pool is charged (table lock) */
static uint64_t devices_used;     /* bit d: device d has had graph memory */

static uint64_t graph_attr(int dev, CUgraphMem_attribute a)
{
    cuuint64_t v = 0;
    fg_real_cuDeviceGetGraphMemAttribute f = REAL(cuDeviceGetGraphMemAttribute);
    if (f)
        f(dev, a, &v);
    return v;
}

static void settle(int dev)
{
    if (dev < 0 || dev >= MAX_DEV)
        return;
    __atomic_fetch_or(&devices_used, 1ull << dev, __ATOMIC_RELAXED);
    uint64_t reserved = graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
    fg_rec_lock();
    if (reserved > charged[dev])
        fg_force_charge(dev, reserved - charged[dev]);
    else
        fg_uncharge(dev, charged[dev] - reserved);
    charged[dev] = reserved;
    fg_rec_unlock();
}

void fg_graph_settle_all(void)
{
    uint64_t m = __atomic_load_n(&devices_used, __ATOMIC_RELAXED);
    for (int d = 0; m; d++, m >>= 1)
        if (m & 1)
            settle(d);
}

/* The most graph g can reserve on each device when it first runs: the sum
 * of its allocation nodes there, child graphs included. 0 when that cannot
 * be told (overflow, a device out of range): the driver refuses such a
 * graph anyway. */
static int alloc_nodes(CUgraph g, int depth, uint64_t per[MAX_DEV])
{
    fg_real_cuGraphGetNodes getnodes = REAL(cuGraphGetNodes);
    fg_real_cuGraphNodeGetType gettype = REAL(cuGraphNodeGetType);
    fg_real_cuGraphMemAllocNodeGetParams getparams = REAL(cuGraphMemAllocNodeGetParams);
    fg_real_cuGraphChildGraphNodeGetGraph getchild = REAL(cuGraphChildGraphNodeGetGraph);
    size_t n = 0;
    if (!getnodes || !gettype || !getparams || !getchild || getnodes(g, NULL, &n) != CUDA_SUCCESS || !n)
        return 1;
    CUgraphNode *nodes = malloc(n * sizeof *nodes);
    if (!nodes)
        return 0;
    int ok = getnodes(g, nodes, &n) == CUDA_SUCCESS;
    for (size_t i = 0; ok && i < n; i++) {
        CUgraphNodeType t;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        CUgraph child;
        if (gettype(nodes[i], &t) != CUDA_SUCCESS)
            continue;
        if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC && getparams(nodes[i], &p) == CUDA_SUCCESS) {
            int d = p.poolProps.location.id;
            uint64_t rounded;
            ok = d >= 0 && d < MAX_DEV && !__builtin_add_overflow((uint64_t)p.bytesize, GRANULE - 1, &rounded) &&
                 !__builtin_add_overflow(per[d], rounded / GRANULE * GRANULE, &per[d]);
        } else if (t == CU_GRAPH_NODE_TYPE_GRAPH && depth < MAX_DEPTH &&
                   getchild(nodes[i], &child) == CUDA_SUCCESS) {
            ok = alloc_nodes(child, depth + 1, per);
        }
    }
    free(nodes);
    return ok;
}

/* Runs call (an upload or a launch of a graph needing up to per[d] on each
 * device d) if what it may add to each graph pool fits in the quota there. */
static CUresult run_charged(const uint64_t per[MAX_DEV], CUresult (*call)(void *), void *arg)
{
    uint64_t need[MAX_DEV] = {0};
    for (int d = 0; d < MAX_DEV; d++) {
        if (!per[d])
            continue;
        uint64_t reserved = graph_attr(d, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        uint64_t used = graph_attr(d, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
        uint64_t spare = reserved > used ? reserved - used : 0;
        need[d] = per[d] > spare ? per[d] - spare : 0;
        if (!fg_charge(d, need[d], "CUDA graph memory")) {
            while (--d >= 0)
                fg_uncharge(d, need[d]);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    CUresult r = call(arg);
    for (int d = 0; d < MAX_DEV; d++)
        if (per[d]) {
            settle(d);
            fg_uncharge(d, need[d]);
        }
    return r;
}

/* ---- instantiation: learn what each executable graph may allocate ---- */

struct inst {
    void *next;
    CUgraphExec *exec;
    CUgraph graph;
    unsigned long long flags;
    CUDA_GRAPH_INSTANTIATE_PARAMS *params;
};

static CUresult call_with_flags(void *a)
{
    struct inst *c = a;
    return ((fg_real_cuGraphInstantiateWithFlags)c->next)(c->exec, c->graph, c->flags);
}

static CUresult call_with_params(void *a)
{
    struct inst *c = a;
    return ((fg_real_cuGraphInstantiateWithParams)c->next)(c->exec, c->graph, c->params);
}

/* An executable graph with allocation nodes is recorded with what it may
 * reserve per device (owner: a heap array of MAX_DEV sizes). */
static CUresult instantiate(struct inst *c, CUresult (*call)(void *), int uploads)
{
    uint64_t *per = c->graph ? calloc(MAX_DEV, sizeof *per) : NULL;
    uint64_t total = 0;
    if (per && alloc_nodes(c->graph, 0, per))
        for (int d = 0; d < MAX_DEV; d++)
            total |= per[d];
    if (!total) {
        free(per);
        return call(c); /* nothing to charge, or a graph the driver will refuse */
    }
    if (!fg_rec_reserve()) {
        free(per);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = uploads ? run_charged(per, call, c) : call(c);
    if (r != CUDA_SUCCESS) {
        fg_rec_unreserve();
        free(per);
        return r;
    }
    fg_rec_lock();
    fg_rec_put((uintptr_t)*c->exec, R_EXEC, -1, 0, (uintptr_t)per);
    fg_rec_unlock();
    return r;
}

CUresult fg_mem_cuGraphInstantiateWithFlags(fg_real_cuGraphInstantiateWithFlags next, CUgraphExec *exec,
                                               CUgraph graph, unsigned long long flags)
{
    struct inst c = {(void *)next, exec, graph, flags, NULL};
    return instantiate(&c, call_with_flags, 0);
}

CUresult fg_mem_cuGraphInstantiateWithParams(fg_real_cuGraphInstantiateWithParams next, CUgraphExec *exec,
                                                CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    struct inst c = {(void *)next, exec, graph, 0, params};
    return instantiate(&c, call_with_params, params && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
}

CUresult fg_mem_cuGraphInstantiateWithParams_ptsz(fg_real_cuGraphInstantiateWithParams_ptsz next,
                                                     CUgraphExec *exec, CUgraph graph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    struct inst c = {(void *)next, exec, graph, 0, params};
    return instantiate(&c, call_with_params, params && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
}

/* ---- uploads and launches ---- */

struct run {
    CUresult (*next)(CUgraphExec, CUstream);
    CUgraphExec exec;
    CUstream stream;
};

static CUresult call_run(void *a)
{
    struct run *c = a;
    return c->next(c->exec, c->stream);
}

static CUresult run(CUresult (*next)(CUgraphExec, CUstream), CUgraphExec exec, CUstream s)
{
    if (!fg_rec_count(R_EXEC))
        return next(exec, s);
    uint64_t per[MAX_DEV];
    fg_rec_lock();
    struct rec *r = fg_rec_find((uintptr_t)exec, R_EXEC);
    if (r)
        memcpy(per, (const uint64_t *)r->owner, sizeof per);
    fg_rec_unlock();
    if (!r)
        return next(exec, s);
    struct run c = {next, exec, s};
    return run_charged(per, call_run, &c);
}

CUresult fg_mem_cuGraphLaunch(fg_real_cuGraphLaunch next, CUgraphExec exec, CUstream s)
{
    return run(next, exec, s);
}

CUresult fg_mem_cuGraphLaunch_ptsz(fg_real_cuGraphLaunch_ptsz next, CUgraphExec exec, CUstream s)
{
    return run(next, exec, s);
}

CUresult fg_mem_cuGraphUpload(fg_real_cuGraphUpload next, CUgraphExec exec, CUstream s)
{
    return run(next, exec, s);
}

CUresult fg_mem_cuGraphUpload_ptsz(fg_real_cuGraphUpload_ptsz next, CUgraphExec exec, CUstream s)
{
    return run(next, exec, s);
}

CUresult fg_mem_cuGraphExecDestroy(fg_real_cuGraphExecDestroy next, CUgraphExec exec)
{
    CUresult r = next(exec);
    if (r != CUDA_SUCCESS || !fg_rec_count(R_EXEC))
        return r;
    fg_rec_lock();
    struct rec *e = fg_rec_find((uintptr_t)exec, R_EXEC);
    uint64_t *per = e ? (uint64_t *)e->owner : NULL;
    if (e)
        fg_rec_drop(e);
    fg_rec_unlock();
    if (per) {
        for (int d = 0; d < MAX_DEV; d++)
            if (per[d])
                settle(d);
        free(per);
    }
    return r;
}

CUresult fg_mem_cuDeviceGraphMemTrim(fg_real_cuDeviceGraphMemTrim next, CUdevice dev)
{
    CUresult r = next(dev);
    if (r == CUDA_SUCCESS)
        settle(dev);
    return r;
}

/* Async-signal-safe: a forked child holds no graph memory. */
void fg_graph_after_fork(void)
{
    for (int d = 0; d < MAX_DEV; d++)
        charged[d] = 0;
    devices_used = 0;
}
