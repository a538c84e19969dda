/* The server's side of graph copy nodes with a side in the program's
 * pageable memory (remote/client/hostcopy.c): pinned buffers the nodes copy
 * from or into, filled at each launch with the bytes the launch carries,
 * read back once the launch's event is done. Every range the client names
 * must lie in one of its buffers, so it cannot make the executor touch
 * device memory or its own.
 *
 * A graph may still name a buffer the client frees (a hostile client can
 * free one and launch): unpinned, the GPU would reach memory the server
 * reuses. So a freed buffer is kept for the connection, pinned, and given
 * again to a later request it fits; all go with their context. At most
 * fgr_pinned_most() bytes in all (--pinned-max).
 *
 * A host node reads, natively, what the copy nodes before it wrote into
 * the program's memory. The bytes of the buffers those nodes write go with
 * the host node's turn (hostfn.c: on the host-function channel, or over
 * shm:// in the shared memory's data area): at each instantiation and
 * update the executor learns, from the graph's edges, which buffers each
 * host node's earlier copy nodes write (child graphs' included, and for a
 * host node in a child graph, those before its child graph node), by the
 * host node's id. */
#include "executor.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>


static CUresult (*host_alloc)(void **, size_t, unsigned int);
static CUresult (*graph_launch)(CUgraphExec, CUstream);

static struct buffer {
    uint64_t base, size, used; /* used: 0 once freed, else the bytes asked for */
    uint64_t ctx;
} *bufs;
static size_t nbufs, capbufs;
static uint64_t total;

static int holding(uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < nbufs; i++)
        if (bufs[i].used && p >= bufs[i].base && p - bufs[i].base <= bufs[i].used &&
            n <= bufs[i].used - (p - bufs[i].base))
            return 1;
    return 0;
}

static CUresult buffer_alloc(CUdeviceptr *dptr, size_t bytes)
{
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* A freed one of this context that fits, not more than twice as large. */
    for (size_t i = 0; i < nbufs; i++)
        if (!bufs[i].used && bufs[i].ctx == fgr_ctx && bufs[i].size >= bytes && bufs[i].size / 2 <= bytes) {
            bufs[i].used = bytes;
            memset((void *)(uintptr_t)bufs[i].base, 0, bytes);
            *dptr = bufs[i].base;
            return CUDA_SUCCESS;
        }
    if (bytes > fgr_pinned_most() - total || total > fgr_pinned_most())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (nbufs == capbufs) {
        size_t n = capbufs ? 2 * capbufs : 16;
        struct buffer *b = realloc(bufs, n * sizeof *b);
        if (!b)
            return CUDA_ERROR_OUT_OF_MEMORY;
        bufs = b;
        capbufs = n;
    }
    void *p = NULL;
    /* Pinning is unsafe while a capture in GLOBAL mode is open: the
     * program's capture must not be invalidated by the server's own call. */
    CUstreamCaptureMode mode = fgr_relax();
    CUresult r = host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE);
    fgr_unrelax(mode);
    if (r != CUDA_SUCCESS)
        return r;
    memset(p, 0, bytes);
    bufs[nbufs++] = (struct buffer){(uintptr_t)p, bytes, bytes, fgr_ctx};
    total += bytes;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult buffer_free(CUdeviceptr dptr)
{
    for (size_t i = 0; i < nbufs; i++)
        if (bufs[i].base == dptr && bufs[i].used) {
            bufs[i].used = 0;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* The bytes go into the buffers once the stream's earlier work is done (a
 * launch before may still read them), then the graph runs and done, when
 * given, is recorded after it. */
static CUresult launch_host(CUgraphExec x, CUstream s, CUevent done, const CUdeviceptr *dsts, const size_t *sizes,
                            unsigned int count, const void *src, size_t bytes)
{
    uint64_t at = 0;
    if (count && (!dsts || !sizes || !src))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++)
        if (!holding(dsts[i], sizes[i]) || sizes[i] > bytes - at)
            return CUDA_ERROR_INVALID_VALUE;
        else
            at += sizes[i];
    if (at != bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = count ? fgr_drv.sync(s) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    at = 0;
    for (unsigned i = 0; i < count; i++) {
        memcpy((void *)(uintptr_t)dsts[i], (const uint8_t *)src + at, sizes[i]);
        at += sizes[i];
    }
    r = graph_launch(x, s);
    if (r == CUDA_SUCCESS && done)
        r = fgr_drv.ev_record(done, s);
    return r;
}

/* A buffer's bytes once done is (CUDA_ERROR_NOT_READY before). */
static CUresult host_read(CUevent done, CUdeviceptr src, void *dst, size_t bytes)
{
    if (!dst || bytes > FGR_MIRROR_BATCH || !holding(src, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = done ? fgr_drv.ev_query(done) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

/* ---- what a host node reads ---- */

/* By host node id, the buffers its earlier copy nodes write: read by the
 * gates (the driver's thread), made by the executor's loop. */
static pthread_mutex_t early_mu = PTHREAD_MUTEX_INITIALIZER;
static struct early {
    uint64_t id;
    size_t n;
    struct fgr_span *v;
} *earlies;
static size_t nearlies;

static CUresult (*get_nodes)(CUgraph, CUgraphNode *, size_t *);
static CUresult (*node_type)(CUgraphNode, CUgraphNodeType *);
static CUresult (*child_of)(CUgraphNode, CUgraph *);
static CUresult (*edges_v2)(CUgraph, CUgraphNode *, CUgraphNode *, CUgraphEdgeData *, size_t *);
static CUresult (*edges_v1)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *);
static CUresult (*host_params)(CUgraphNode, CUDA_HOST_NODE_PARAMS *);
static CUresult (*copy_params)(CUgraphNode, CUDA_MEMCPY3D *);
static CUresult (*inst_flags)(CUgraphExec *, CUgraph, unsigned long long);
static CUresult (*inst_params)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
static CUresult (*inst_params_pt)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
static CUresult (*exec_update)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
static void (*gate)(void *); /* the function host nodes run (hostfn.c) */

struct spans {
    struct fgr_span *v;
    size_t n, cap;
};

/* The buffer holding p, added to l once. */
static void add_buffer(struct spans *l, uint64_t p)
{
    for (size_t i = 0; i < nbufs; i++) {
        if (!bufs[i].used || p < bufs[i].base || p - bufs[i].base >= bufs[i].used)
            continue;
        for (size_t k = 0; k < l->n; k++)
            if (l->v[k].base == bufs[i].base)
                return;
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 4;
            struct fgr_span *v = realloc(l->v, cap * sizeof *v);
            if (!v)
                return;
            l->v = v;
            l->cap = cap;
        }
        l->v[l->n++] = (struct fgr_span){bufs[i].base, bufs[i].used};
        return;
    }
}

/* The buffers node writes: a copy node's destination, a child graph's
 * copy nodes'. */
static void add_written(struct spans *l, CUgraphNode node, int depth)
{
    CUgraphNodeType t;
    if (node_type(node, &t) != CUDA_SUCCESS)
        return;
    CUDA_MEMCPY3D c;
    CUgraph child;
    if (t == CU_GRAPH_NODE_TYPE_MEMCPY && copy_params(node, &c) == CUDA_SUCCESS) {
        if (c.dstMemoryType == CU_MEMORYTYPE_HOST)
            add_buffer(l, (uintptr_t)c.dstHost);
        else if (c.dstMemoryType == CU_MEMORYTYPE_UNIFIED || c.dstMemoryType == CU_MEMORYTYPE_DEVICE)
            add_buffer(l, c.dstDevice);
    } else if (t == CU_GRAPH_NODE_TYPE_GRAPH && depth < 8 && child_of(node, &child) == CUDA_SUCCESS) {
        size_t n = 0;
        if (get_nodes(child, NULL, &n) != CUDA_SUCCESS || !n)
            return;
        CUgraphNode *v = malloc(n * sizeof *v);
        if (v && get_nodes(child, v, &n) == CUDA_SUCCESS)
            for (size_t i = 0; i < n; i++)
                add_written(l, v[i], depth + 1);
        free(v);
    }
}

/* id's buffers from now on (none: forgotten); l's taken. */
static void early_set(uint64_t id, struct spans *l)
{
    pthread_mutex_lock(&early_mu);
    size_t i = 0;
    while (i < nearlies && earlies[i].id != id)
        i++;
    if (i < nearlies) {
        free(earlies[i].v);
        earlies[i] = earlies[--nearlies];
    }
    struct early *more = l->n ? realloc(earlies, (nearlies + 1) * sizeof *more) : NULL;
    if (more) {
        earlies = more;
        earlies[nearlies++] = (struct early){id, l->n, l->v};
        l->v = NULL;
    }
    pthread_mutex_unlock(&early_mu);
    free(l->v);
}

static int handle_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const CUgraphNode *)a, y = (uintptr_t) * (const CUgraphNode *)b;
    return x < y ? -1 : x > y;
}

static size_t index_of(CUgraphNode *sorted, size_t n, CUgraphNode h)
{
    CUgraphNode *p = bsearch(&h, sorted, n, sizeof *sorted, handle_cmp);
    return p ? (size_t)(p - sorted) : n;
}

/* l, then the spans of from not in it. */
static void add_spans(struct spans *l, const struct spans *from)
{
    for (size_t i = 0; i < from->n; i++)
        add_buffer(l, from->v[i].base);
}

/* Learns g's host nodes (the executor's gate with the client's id): the
 * buffers written by the nodes each depends on, however far back, and
 * those inherited (written before g's child graph node, in the graphs it
 * lies in); a child graph's host nodes inherit what its node's own earlier
 * nodes wrote. */
static void learn_in(CUgraph g, const struct spans *inherited, int depth)
{
    size_t n = 0, ne = 0;
    if (get_nodes(g, NULL, &n) != CUDA_SUCCESS || !n)
        return;
    CUgraphNode *nodes = malloc(n * sizeof *nodes), *from = NULL, *to = NULL;
    size_t *stack = NULL;
    unsigned char *seen = NULL;
    if (!nodes || get_nodes(g, nodes, &n) != CUDA_SUCCESS)
        goto out;
    qsort(nodes, n, sizeof *nodes, handle_cmp);
    int hosts = 0;
    for (size_t i = 0; i < n && !hosts; i++) {
        CUgraphNodeType t;
        hosts = node_type(nodes[i], &t) == CUDA_SUCCESS &&
                (t == CU_GRAPH_NODE_TYPE_HOST || (t == CU_GRAPH_NODE_TYPE_GRAPH && depth < 8));
    }
    if (!hosts || (edges_v2 ? edges_v2(g, NULL, NULL, NULL, &ne) : edges_v1(g, NULL, NULL, &ne)) != CUDA_SUCCESS)
        goto out;
    from = malloc((ne + 1) * sizeof *from);
    to = malloc((ne + 1) * sizeof *to);
    stack = malloc((3 * n + ne + 1) * sizeof *stack);
    seen = malloc(n);
    if (!from || !to || !stack || !seen ||
        (edges_v2 ? edges_v2(g, from, to, NULL, &ne) : edges_v1(g, from, to, &ne)) != CUDA_SUCCESS)
        goto out;
    /* Each node's dependencies by index: first[k] to first[k+1] in deps. */
    size_t *first = stack + n, *deps = first + n + 1, *placed = deps + ne;
    memset(first, 0, (n + 1) * sizeof *first);
    for (size_t e = 0; e < ne; e++) {
        size_t k = index_of(nodes, n, to[e]);
        if (k < n)
            first[k + 1]++;
    }
    for (size_t k = 0; k < n; k++)
        first[k + 1] += first[k];
    memset(placed, 0, n * sizeof *placed);
    for (size_t e = 0; e < ne; e++) {
        size_t k = index_of(nodes, n, to[e]), f = index_of(nodes, n, from[e]);
        if (k < n)
            deps[first[k] + placed[k]++] = f < n ? f : k; /* one not of g's: k itself, seen */
    }
    for (size_t h = 0; h < n; h++) {
        CUgraphNodeType t;
        CUDA_HOST_NODE_PARAMS hp;
        CUgraph child;
        if (node_type(nodes[h], &t) != CUDA_SUCCESS)
            continue;
        int host = t == CU_GRAPH_NODE_TYPE_HOST && host_params(nodes[h], &hp) == CUDA_SUCCESS && hp.fn == gate;
        int graph = !host && t == CU_GRAPH_NODE_TYPE_GRAPH && depth < 8 && child_of(nodes[h], &child) == CUDA_SUCCESS;
        if (!host && !graph)
            continue;
        struct spans l = {0};
        add_spans(&l, inherited);
        size_t top = 0;
        memset(seen, 0, n);
        seen[h] = 1;
        stack[top++] = h;
        while (top) {
            size_t at = stack[--top];
            for (size_t d = first[at]; d < first[at + 1]; d++)
                if (!seen[deps[d]]) {
                    seen[deps[d]] = 1;
                    stack[top++] = deps[d];
                    add_written(&l, nodes[deps[d]], 0);
                }
        }
        if (host) {
            early_set((uint64_t)(uintptr_t)hp.userData, &l);
        } else {
            learn_in(child, &l, depth + 1);
            free(l.v);
        }
    }
out:
    free(nodes);
    free(from);
    free(to);
    free(stack);
    free(seen);
}

static void learn(CUgraph g)
{
    size_t live = 0;
    for (size_t i = 0; i < nbufs; i++)
        live += bufs[i].used != 0;
    if (live) {
        struct spans none = {0};
        learn_in(g, &none, 0);
    }
}

size_t fgr_hostcopy_early(uint64_t id, struct fgr_span **out)
{
    size_t n = 0;
    *out = NULL;
    pthread_mutex_lock(&early_mu);
    for (size_t i = 0; i < nearlies; i++)
        if (earlies[i].id == id && (*out = malloc(earlies[i].n * sizeof **out))) {
            n = earlies[i].n;
            memcpy(*out, earlies[i].v, n * sizeof **out);
        }
    pthread_mutex_unlock(&early_mu);
    return n;
}

static CUresult instantiate_flags(CUgraphExec *x, CUgraph g, unsigned long long flags)
{
    CUresult r = inst_flags(x, g, flags);
    if (r == CUDA_SUCCESS)
        learn(g);
    return r;
}

static CUresult instantiate_params(CUgraphExec *x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    CUresult r = inst_params(x, g, p);
    if (r == CUDA_SUCCESS)
        learn(g);
    return r;
}

static CUresult instantiate_params_pt(CUgraphExec *x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    CUresult r = inst_params_pt(x, g, p);
    if (r == CUDA_SUCCESS)
        learn(g);
    return r;
}

static CUresult update(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
    CUresult r = exec_update(x, g, info);
    if (r == CUDA_SUCCESS)
        learn(g);
    return r;
}

/* Over a socket, with every call it needs: the instantiations learn. */
void fgr_hostcopy_learning(void *driver, void (*host_gate)(void *))
{
    gate = host_gate;
    *(void **)&get_nodes = dlsym(driver, "cuGraphGetNodes");
    *(void **)&node_type = dlsym(driver, "cuGraphNodeGetType");
    *(void **)&child_of = dlsym(driver, "cuGraphChildGraphNodeGetGraph");
    *(void **)&edges_v2 = dlsym(driver, "cuGraphGetEdges_v2");
    *(void **)&edges_v1 = dlsym(driver, "cuGraphGetEdges");
    *(void **)&host_params = dlsym(driver, "cuGraphHostNodeGetParams");
    *(void **)&copy_params = dlsym(driver, "cuGraphMemcpyNodeGetParams");
    if (!get_nodes || !node_type || !child_of || (!edges_v2 && !edges_v1) || !host_params || !copy_params)
        return;
    *(void **)&inst_flags = fgr_real[FGR_OP_cuGraphInstantiateWithFlags];
    *(void **)&inst_params = fgr_real[FGR_OP_cuGraphInstantiateWithParams];
    *(void **)&inst_params_pt = fgr_real[FGR_OP_cuGraphInstantiateWithParams_ptsz];
    *(void **)&exec_update = fgr_real[FGR_OP_cuGraphExecUpdate_v2];
    if (inst_flags)
        fgr_real[FGR_OP_cuGraphInstantiateWithFlags] = (void *)instantiate_flags;
    if (inst_params)
        fgr_real[FGR_OP_cuGraphInstantiateWithParams] = (void *)instantiate_params;
    if (inst_params_pt)
        fgr_real[FGR_OP_cuGraphInstantiateWithParams_ptsz] = (void *)instantiate_params_pt;
    if (exec_update)
        fgr_real[FGR_OP_cuGraphExecUpdate_v2] = (void *)update;
}

void fgr_hostcopy_forget(uint64_t ctx)
{
    for (size_t i = 0; i < nbufs;)
        if (bufs[i].ctx == ctx) {
            total -= bufs[i].size;
            bufs[i] = bufs[--nbufs];
        } else {
            i++;
        }
    /* What names a buffer gone with it is forgotten: its memory is the driver's again. */
    pthread_mutex_lock(&early_mu);
    for (size_t i = 0; i < nearlies;) {
        int all = 1;
        for (size_t k = 0; k < earlies[i].n && all; k++) {
            all = 0;
            for (size_t b = 0; b < nbufs && !all; b++)
                all = bufs[b].base == earlies[i].v[k].base;
        }
        if (all) {
            i++;
            continue;
        }
        free(earlies[i].v);
        earlies[i] = earlies[--nearlies];
    }
    pthread_mutex_unlock(&early_mu);
}

void fgr_hostcopy_use(CUresult (*alloc)(void **, size_t, unsigned int), CUresult (*launch)(CUgraphExec, CUstream))
{
    host_alloc = alloc;
    graph_launch = launch;
    if (!host_alloc || !graph_launch || !fgr_drv.sync || !fgr_drv.ev_record || !fgr_drv.ev_query)
        return; /* the operations stay unsupported */
    fgr_real[FGR_OP_fgrGraphHostAlloc] = (void *)buffer_alloc;
    fgr_real[FGR_OP_fgrGraphHostFree] = (void *)buffer_free;
    fgr_real[FGR_OP_fgrGraphLaunchHost] = (void *)launch_host;
    fgr_real[FGR_OP_fgrGraphHostRead] = (void *)host_read;
}

void fgr_hostcopy_init(void *driver)
{
    CUresult (*alloc)(void **, size_t, unsigned int), (*launch)(CUgraphExec, CUstream);
    *(void **)&alloc = dlsym(driver, "cuMemHostAlloc");
    *(void **)&launch = dlsym(driver, "cuGraphLaunch");
    fgr_hostcopy_use(alloc, launch);
}
