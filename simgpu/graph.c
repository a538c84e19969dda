/* Graphs: nodes (captured from streams or added explicitly), executable
 * graphs, and graph memory.
 *
 * Graph memory as modelled here, after the driver's documented behaviour:
 *  - An allocation node (cuGraphAddMemAllocNode, or cuMemAllocAsync /
 *    cuMemAllocFromPoolAsync on a capturing stream) fixes its address when it
 *    is created, for as long as a graph or executable graph holds the node;
 *    no physical memory is taken then.
 *  - Each device has one graph memory pool per process. Physical memory is
 *    taken from the device, in 2 MiB pages, when an executable graph is
 *    uploaded (cuGraphUpload, or instantiation with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) or launched and the pool's reserved
 *    but unused memory cannot hold the peak of the graph's allocations (in
 *    node order): the pool reserves what is missing. It is real device
 *    memory, seen by cuMemGetInfo, NVML and every process; if the device
 *    cannot provide it the call fails with CUDA_ERROR_OUT_OF_MEMORY and
 *    nothing changes.
 *  - An allocation node makes its memory used when it runs; a free node, or
 *    cuMemFreeAsync / cuMemFree_v2 of the address, makes it unused.
 *    CU_GRAPH_MEM_ATTR_USED_MEM_* count used memory, RESERVED_MEM_* what the
 *    pool holds; cuDeviceSetGraphMemAttribute resets a high watermark to 0.
 *  - Launching an executable graph whose allocations are still in use fails
 *    with CUDA_ERROR_INVALID_VALUE, unless it was instantiated with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, which frees them first.
 *  - The pool keeps what it reserved, used or not, until cuDeviceGraphMemTrim
 *    returns the unused part to the device, or a context of the device is
 *    destroyed (allocations its launches left in use are freed with it).
 *    Destroying an executable graph frees nothing still in use.
 *  - A graph with memory nodes has one executable graph at a time and cannot
 *    become a child graph; an allocation freed in its own graph cannot be
 *    freed elsewhere, and a free node must follow its allocation node.
 * A launch, when it is issued, applies its memory nodes, then goes through
 * its nodes in order: copies and sets are done, kernels queued on the
 * stream, host functions run once the stream's earlier work is done.
 * Graph objects, like the driver's, are not thread-safe; the pools and
 * allocations are under sim_mem_lock. */
#include "sim.h"
#include "flexgv/graph_nodes.h"
#include "flexgv/graph_v1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GRAPH_MAGIC 0x47525048u
#define EXEC_MAGIC 0x47455843u
#define NODE_MAGIC 0x4e4f4445u

#define FLAG_DEVICE_LAUNCH 0x4ull
#define FLAG_USE_NODE_PRIORITY 0x8ull
#define FLAGS_WITH_FLAGS (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | FLAG_DEVICE_LAUNCH | FLAG_USE_NODE_PRIORITY)

struct sim_gmem {
    uintptr_t base;
    size_t size;
    uint64_t bytes; /* physical: whole pages */
    int dev;
    int refs;           /* nodes naming it */
    int live;           /* allocated by a launch, not freed since */
    int freed_in_graph; /* its own graph frees it: nothing else may */
    struct sim_ctx *ctx; /* of the launch that allocated it */
    struct sim_gmem *next;
};

struct sim_node {
    uint32_t magic;
    CUgraphNodeType type;
    struct sim_graph *graph;
    struct sim_node **deps;
    CUgraphEdgeData *edata; /* each dependency's edge data; NULL: all plain */
    size_t ndeps;
    unsigned mark;
    union {
        struct sim_knode kernel;
        struct {
            void *dst;
            const void *src;
            size_t n;
            int shaped;       /* an explicit node's copy: c says it */
            CUDA_MEMCPY3D c;
        } copy;
        struct {
            void *dst;
            unsigned v;
            size_t n, width;
            size_t pitch, rows; /* a 2D set: rows of n elements, pitch bytes apart */
        } set;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        struct {
            struct sim_gmem *m;
            CUDA_MEM_ALLOC_NODE_PARAMS params;
        } alloc;
        struct sim_gmem *freed;
        struct sim_graph *child;
        CUevent event; /* an event record or wait node's */
        struct {
            CUgraphConditionalHandle handle;
            CUgraphConditionalNodeType type;
            unsigned size;
            CUcontext ctx;
            CUgraph *bodies;         /* a graph's node: its body graphs, its own */
            struct sim_exec **flat;  /* an executable's copy: the bodies instantiated */
        } cond;
        struct {
            CUcontext ctx;
            unsigned count, flags;
            CUstreamBatchMemOpParams ops[SIM_MEMOP_NODE_OPS];
        } memop; /* a batch memory operation node's, in the node */
    } u;
    const struct sim_node *orig; /* an executable's copy: the graph's node */
    const struct sim_node *cloned; /* a clone's node: the original graph's */
    int disabled;                /* an executable's copy, turned off (cuGraphNodeSetEnabled) */
};

struct sim_graph {
    uint32_t magic;
    size_t n, cap;
    struct sim_node **nodes;
    unsigned stamp;
    int mem;               /* has memory nodes */
    int moved;             /* a child graph moved into its node: the node's */
    struct sim_exec *exec; /* its executable graph, when mem */
    struct sim_urefs urefs;
};

/* A graph's topology as it was instantiated, which cuGraphExecUpdate
 * compares: its nodes in order, each one's kind, its dependencies by their
 * place in the graph with each edge's data, a child graph's in its node. */
struct shape {
    size_t n;
    struct shape_node {
        CUgraphNodeType type;
        const struct sim_node *node; /* the graph's (only named, never read) */
        size_t ndeps;
        size_t *deps;
        CUgraphEdgeData *edata; /* NULL: all plain */
        struct shape *child;
    } *nodes;
};

struct sim_exec {
    uint32_t magic;
    size_t n;
    struct sim_node *nodes; /* copies, child graphs flattened */
    struct shape *shape;    /* its graph's topology */
    unsigned long long flags;
    struct sim_graph *graph; /* while both exist, when it has memory nodes */
    int mem;                 /* has memory nodes */
    uint64_t peak[SIM_MAX_DEVICES];
    struct sim_urefs urefs; /* its graph's, as it was instantiated */
};

/* Conditional handles: the value a kernel sets (the builtin setcond) and
 * a conditional node reads when it runs. A handle is its index, tagged. */
struct sim_cond {
    struct sim_graph *graph; /* NULL: free */
    unsigned def, value, flags;
};
static struct sim_cond *conds;
static size_t nconds;
#define COND_TAG 0x5c0d000000000000ull

static struct pool {
    uint64_t reserved, used, reserved_high, used_high;
} pools[SIM_MAX_DEVICES];
static struct sim_gmem *gmems;

/* ---- graph allocations (sim_mem_lock held) ---- */

/* An allocation no node names and nothing uses gives its address back. */
static void maybe_destroy(struct sim_gmem *m)
{
    if (m->refs > 0 || m->live)
        return;
    sim_registry_del(m->base);
    munmap((void *)m->base, m->size);
    for (struct sim_gmem **pp = &gmems; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    free(m);
}

static void gmem_put(struct sim_gmem *m)
{
    m->refs--;
    maybe_destroy(m);
}

static void unuse(struct sim_gmem *m)
{
    m->live = 0;
    m->ctx = NULL;
    pools[m->dev].used -= m->bytes;
    maybe_destroy(m);
}

int sim_gmem_unuse(struct sim_gmem *m)
{
    if (!m->live)
        return -1;
    unuse(m);
    return 0;
}

/* ---- nodes ---- */

static struct sim_node *node_new(CUgraphNodeType type)
{
    struct sim_node *n = calloc(1, sizeof *n);
    if (n) {
        n->magic = NODE_MAGIC;
        n->type = type;
    }
    return n;
}

struct sim_node *sim_node_kernel(const struct sim_knode *k)
{
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_KERNEL);
    if (n)
        n->u.kernel = *k;
    return n;
}

struct sim_node *sim_node_copy(void *dst, const void *src, size_t len)
{
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_MEMCPY);
    if (n) {
        n->u.copy.dst = dst;
        n->u.copy.src = src;
        n->u.copy.n = len;
    }
    return n;
}

struct sim_node *sim_node_set(void *dst, unsigned v, size_t len, size_t width)
{
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_MEMSET);
    if (n) {
        n->u.set.dst = dst;
        n->u.set.v = v;
        n->u.set.n = len;
        n->u.set.width = width;
        n->u.set.rows = 1;
    }
    return n;
}

struct sim_node *sim_node_host(CUhostFn fn, void *data)
{
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_HOST);
    if (n) {
        n->u.host.fn = fn;
        n->u.host.data = data;
    }
    return n;
}

/* An allocation node of size bytes on physical device dev: its address is
 * fixed (and backed by host memory for copies) but nothing is charged. */
struct sim_node *sim_node_alloc(int dev, size_t size, CUdeviceptr *dptr)
{
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    struct sim_gmem *m = calloc(1, sizeof *m);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!n || !m || p == MAP_FAILED)
        goto fail;
    *m = (struct sim_gmem){.base = (uintptr_t)p,
                           .size = size,
                           .bytes = (size + SIM_GRANULARITY - 1) / SIM_GRANULARITY * SIM_GRANULARITY,
                           .dev = dev,
                           .refs = 1};
    pthread_mutex_lock(&sim_mem_lock);
    int rc = sim_registry_add_graph(m->base, size, dev, m);
    if (rc == 0) {
        m->next = gmems;
        gmems = m;
    }
    pthread_mutex_unlock(&sim_mem_lock);
    if (rc != 0)
        goto fail;
    CUDA_MEM_ALLOC_NODE_PARAMS *pp = &n->u.alloc.params;
    pp->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp->poolProps.location.id = sim_ordinal(dev);
    pp->bytesize = size;
    pp->dptr = *dptr = (CUdeviceptr)m->base;
    n->u.alloc.m = m;
    return n;
fail:
    if (p != MAP_FAILED)
        munmap(p, size);
    free(m);
    free(n);
    return NULL;
}

struct sim_node *sim_node_free(CUdeviceptr p)
{
    pthread_mutex_lock(&sim_mem_lock);
    struct sim_gmem *m = sim_registry_gmem(p);
    struct sim_node *n = m ? node_new(CU_GRAPH_NODE_TYPE_MEM_FREE) : NULL;
    if (n) {
        n->u.freed = m;
        m->refs++;
    }
    pthread_mutex_unlock(&sim_mem_lock);
    return n;
}

static struct sim_gmem *node_gmem(const struct sim_node *n)
{
    return n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC  ? n->u.alloc.m
           : n->type == CU_GRAPH_NODE_TYPE_MEM_FREE ? n->u.freed
                                                    : NULL;
}

void sim_node_destroy(struct sim_node *n)
{
    struct sim_gmem *m = node_gmem(n);
    if (m) {
        pthread_mutex_lock(&sim_mem_lock);
        gmem_put(m);
        pthread_mutex_unlock(&sim_mem_lock);
    }
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->u.child)
        sim_graph_destroy(n->u.child);
    if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        for (unsigned i = 0; n->u.cond.bodies && i < n->u.cond.size; i++)
            if (n->u.cond.bodies[i])
                sim_graph_destroy((struct sim_graph *)n->u.cond.bodies[i]);
        free(n->u.cond.bodies);
    }
    n->magic = 0;
    free(n->deps);
    free(n->edata);
    free(n);
}

static struct sim_node *as_node(CUgraphNode h)
{
    struct sim_node *n = (struct sim_node *)h;
    return n && n->magic == NODE_MAGIC ? n : NULL;
}

/* ---- graphs ---- */

struct sim_graph *sim_graph_new(void)
{
    struct sim_graph *g = calloc(1, sizeof *g);
    if (g)
        g->magic = GRAPH_MAGIC;
    return g;
}

void sim_graph_destroy(struct sim_graph *g)
{
    for (size_t i = 0; i < g->n; i++)
        sim_node_destroy(g->nodes[i]);
    if (g->exec)
        g->exec->graph = NULL;
    for (size_t i = 0; i < nconds; i++)
        if (conds[i].graph == g)
            conds[i].graph = NULL;
    free(g->nodes);
    sim_urefs_free(&g->urefs);
    sim_bury(&g->magic, g);
}

static struct sim_graph *as_graph(CUgraph h)
{
    struct sim_graph *g = (struct sim_graph *)h;
    uint32_t magic = g ? g->magic : 0;
    return magic == GRAPH_MAGIC ? g : magic == SIM_DEAD_MAGIC ? sim_dead("graph", g) : NULL;
}

struct sim_graph *sim_graph_of(CUgraph h) { return as_graph(h); }

int sim_node_in(const struct sim_node *n, const struct sim_graph *g)
{
    return n && n->magic == NODE_MAGIC && n->graph == g;
}

/* Whether target is among deps or their ancestors (each node is pushed
 * once: marked when pushed). */
static int reaches(struct sim_graph *g, struct sim_node *const *deps, size_t ndeps, const struct sim_node *target)
{
    struct sim_node **stack = malloc((g->n + 1) * sizeof *stack);
    if (!stack)
        return 0;
    unsigned stamp = ++g->stamp;
    size_t top = 0;
    for (size_t i = 0; i < ndeps; i++)
        if (deps[i]->mark != stamp) {
            deps[i]->mark = stamp;
            stack[top++] = deps[i];
        }
    int found = 0;
    while (top && !found) {
        struct sim_node *n = stack[--top];
        found = n == target;
        for (size_t i = 0; i < n->ndeps; i++)
            if (n->deps[i]->mark != stamp) {
                n->deps[i]->mark = stamp;
                stack[top++] = n->deps[i];
            }
    }
    free(stack);
    return found;
}

/* A free node may free an allocation of another graph, or one of its own
 * graph's allocation nodes that it follows; an allocation is freed at most
 * once in a graph, and one its own graph frees cannot be freed elsewhere. */
static int free_allowed(struct sim_graph *g, const struct sim_node *n)
{
    struct sim_gmem *m = n->u.freed;
    const struct sim_node *own = NULL;
    for (size_t i = 0; i < g->n; i++) {
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_FREE && g->nodes[i]->u.freed == m)
            return 0;
        if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->u.alloc.m == m)
            own = g->nodes[i];
    }
    if (!own)
        return !m->freed_in_graph;
    return reaches(g, n->deps, n->ndeps, own);
}

CUresult sim_graph_append(struct sim_graph *g, struct sim_node *n, struct sim_node *const *deps, size_t ndeps)
{
    if (ndeps && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        if (!as_node((CUgraphNode)deps[i]) || deps[i]->graph != g)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct sim_node **nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = nodes;
        g->cap = cap;
    }
    if (ndeps && !(n->deps = malloc(ndeps * sizeof *n->deps)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ndeps)
        memcpy(n->deps, deps, ndeps * sizeof *deps);
    n->ndeps = ndeps;
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE && !free_allowed(g, n)) {
        free(n->deps);
        n->deps = NULL;
        n->ndeps = 0;
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
        for (size_t i = 0; i < g->n; i++)
            if (g->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && g->nodes[i]->u.alloc.m == n->u.freed)
                n->u.freed->freed_in_graph = 1;
    }
    if (node_gmem(n))
        g->mem = 1;
    n->graph = g;
    g->nodes[g->n++] = n;
    return CUDA_SUCCESS;
}

/* Adds a node built by the caller, or destroys it. */
CUresult sim_graph_add_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                            struct sim_node *n)
{
    struct sim_graph *g = as_graph(graph);
    CUresult r = !n ? CUDA_ERROR_OUT_OF_MEMORY
                 : !g ? CUDA_ERROR_INVALID_VALUE
                      : sim_graph_append(g, n, (struct sim_node *const *)deps, ndeps);
    if (r != CUDA_SUCCESS) {
        if (n)
            sim_node_destroy(n);
        return r;
    }
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph *g = sim_graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    struct sim_graph *g = as_graph(hGraph);
    if (!g || g->moved)
        return CUDA_ERROR_INVALID_VALUE;
    sim_graph_destroy(g);
    return CUDA_SUCCESS;
}

/* With nodes NULL, the count; otherwise up to *numNodes of them, the rest of
 * the array NULL, and *numNodes the number returned. */
SIM_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    struct sim_graph *g = as_graph(hGraph);
    if (!g || !numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!nodes) {
        *numNodes = g->n;
        return CUDA_SUCCESS;
    }
    size_t k = *numNodes < g->n ? *numNodes : g->n;
    for (size_t i = 0; i < *numNodes; i++)
        nodes[i] = i < k ? (CUgraphNode)g->nodes[i] : NULL;
    *numNodes = k;
    return CUDA_SUCCESS;
}

/* The graph in Graphviz's language, as the driver writes it for debugging:
 * a node per node, a kernel's labelled with its function's name (verbose
 * flags: with its launch's shape), an edge per dependency. */
SIM_EXPORT CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    static const char *const kinds[] = {"KERNEL", "MEMCPY", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT",
                                        "EVENT_RECORD", "EXT_SEMAS_SIGNAL", "EXT_SEMAS_WAIT", "MEM_ALLOC",
                                        "MEM_FREE", "BATCH_MEM_OP", "CONDITIONAL"};
    struct sim_graph *g = as_graph(hGraph);
    if (!g || !path)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "w");
    if (!f)
        return CUDA_ERROR_OPERATING_SYSTEM;
    fprintf(f, "digraph dot {\n");
    for (size_t i = 0; i < g->n; i++) {
        const struct sim_node *n = g->nodes[i];
        unsigned t = (unsigned)n->type;
        fprintf(f, "\"node_%zu\" [label=\"%s", i, t < sizeof kinds / sizeof kinds[0] ? kinds[t] : "NODE");
        const char *name;
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL && cuFuncGetName(&name, (CUfunction)n->u.kernel.f) == CUDA_SUCCESS) {
            fprintf(f, "\\n%s", name);
            const CUDA_KERNEL_NODE_PARAMS *k = &n->u.kernel.p;
            if (flags)
                fprintf(f, "\\ngrid (%u, %u, %u) block (%u, %u, %u) shared %u", k->gridDimX, k->gridDimY, k->gridDimZ,
                        k->blockDimX, k->blockDimY, k->blockDimZ, k->sharedMemBytes);
        }
        fprintf(f, "\"];\n");
    }
    for (size_t i = 0; i < g->n; i++)
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
            for (size_t j = 0; j < g->n; j++)
                if (g->nodes[j] == g->nodes[i]->deps[d])
                    fprintf(f, "\"node_%zu\" -> \"node_%zu\";\n", j, i);
    fprintf(f, "}\n");
    return fclose(f) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

SIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !type)
        return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}

/* The child graph itself, owned by the node. */
SIM_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !phGraph || n->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    *phGraph = (CUgraph)n->u.child;
    return CUDA_SUCCESS;
}

static struct sim_graph *clone_graph(const struct sim_graph *g);

/* A copied conditional node's bodies, copied in turn (the handle is the same). */
static CUresult clone_bodies(struct sim_node *n)
{
    CUgraph *from = n->u.cond.bodies;
    if (!(n->u.cond.bodies = calloc(n->u.cond.size, sizeof *from)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < n->u.cond.size; i++)
        if (!(n->u.cond.bodies[i] = (CUgraph)clone_graph((struct sim_graph *)from[i])))
            return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

/* Of a node's dependencies in g, the clone c's nodes at their places. */
static size_t clone_deps(const struct sim_graph *g, const struct sim_graph *c, const struct sim_node *n,
                         struct sim_node **out)
{
    size_t k = 0;
    for (size_t d = 0; d < n->ndeps; d++)
        for (size_t j = 0; j < g->n && j < c->n; j++)
            if (g->nodes[j] == n->deps[d])
                out[k++] = c->nodes[j];
    return k;
}

/* A copy of n's edge data (its dependencies' order is the clone's). */
static CUgraphEdgeData *clone_edata(const struct sim_node *n)
{
    CUgraphEdgeData *e = malloc(n->ndeps * sizeof *e);
    if (e)
        memcpy(e, n->edata, n->ndeps * sizeof *e);
    return e;
}

/* A copy of g, node for node and edge for edge. */
static struct sim_graph *clone_graph(const struct sim_graph *g)
{
    struct sim_graph *c = sim_graph_new();
    for (size_t i = 0; c && i < g->n; i++) {
        struct sim_node *n = node_new(g->nodes[i]->type), **deps = calloc(g->nodes[i]->ndeps + 1, sizeof *deps);
        size_t ndeps = deps ? clone_deps(g, c, g->nodes[i], deps) : 0;
        if (n && !deps) {
            free(n);
            n = NULL;
        }
        if (n) {
            n->u = g->nodes[i]->u;
            n->cloned = g->nodes[i];
            if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && !(n->u.child = clone_graph(g->nodes[i]->u.child))) {
                free(n);
                n = NULL;
            }
            if (n && n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && clone_bodies(n) != CUDA_SUCCESS) {
                sim_node_destroy(n);
                n = NULL;
            }
        }
        if (!n || sim_graph_append(c, n, deps, ndeps) != CUDA_SUCCESS ||
            (g->nodes[i]->edata && !(n->edata = clone_edata(g->nodes[i])))) {
            if (n && n->graph != c)
                sim_node_destroy(n);
            sim_graph_destroy(c);
            c = NULL;
        }
        free(deps);
    }
    if (c && sim_urefs_copy(&c->urefs, &g->urefs) != CUDA_SUCCESS) {
        sim_graph_destroy(c);
        c = NULL;
    }
    return c;
}

/* References a graph holds to user objects (userobj.c). */
SIM_EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags)
{
    struct sim_graph *g = as_graph(graph);
    return g ? sim_urefs_hold(&g->urefs, object, count, flags) : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
    struct sim_graph *g = as_graph(graph);
    return g ? sim_urefs_let_go(&g->urefs, object, count) : CUDA_ERROR_INVALID_VALUE;
}

/* A kernel node's launch attributes: those a kernel node takes (an access
 * policy window, cooperative, cluster shape and scheduling, priority,
 * memory synchronization domains), kept and read back. */
static int knode_attr(CUkernelNodeAttrID id)
{
    return id == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW || id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE || id == 4 ||
           id == 5 || id == CU_LAUNCH_ATTRIBUTE_PRIORITY || id == 9 || id == 10;
}

static struct sim_node *kernel_node(CUgraphNode h)
{
    struct sim_node *n = as_node(h);
    return n && n->type == CU_GRAPH_NODE_TYPE_KERNEL ? n : NULL;
}

SIM_EXPORT CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                  CUkernelNodeAttrValue *value_out)
{
    struct sim_node *n = kernel_node(hNode);
    if (!n || !value_out || !knode_attr(attr))
        return CUDA_ERROR_INVALID_VALUE;
    *value_out = n->u.kernel.attr[attr];
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                                  const CUkernelNodeAttrValue *value)
{
    struct sim_node *n = kernel_node(hNode);
    if (!n || !value || !knode_attr(attr))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.kernel.attr[attr] = *value;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
    struct sim_node *d = kernel_node(dst), *s = kernel_node(src);
    if (!d || !s)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(d->u.kernel.attr, s->u.kernel.attr, sizeof d->u.kernel.attr);
    return CUDA_SUCCESS;
}

/* The clone's node made from hOriginalNode. */
SIM_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph)
{
    struct sim_graph *c = as_graph(hClonedGraph);
    struct sim_node *o = as_node(hOriginalNode);
    if (!phNode || !c || !o)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < c->n; i++)
        if (c->nodes[i]->cloned == o) {
            *phNode = (CUgraphNode)c->nodes[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies, size_t numDependencies,
                                             CUgraph childGraph)
{
    struct sim_graph *child = as_graph(childGraph);
    if (!phGraphNode || !child || child->mem)
        return CUDA_ERROR_INVALID_VALUE;
    if (child->moved)
        return CUDA_ERROR_NOT_SUPPORTED; /* a moved graph is its node's: not cloned */
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_GRAPH);
    if (n && !(n->u.child = clone_graph(child))) {
        free(n);
        n = NULL;
    }
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

SIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !nodeParams || nodeParams->bytesize == 0 ||
        nodeParams->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = sim_phys(nodeParams->poolProps.location.id);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!as_graph(hGraph) || as_graph(hGraph)->moved)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    struct sim_node *n = sim_node_alloc(dev, nodeParams->bytesize, &p);
    if (n)
        n->u.alloc.params.poolProps = nodeParams->poolProps;
    CUresult r = sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
    if (r == CUDA_SUCCESS)
        nodeParams->dptr = p;
    return r;
}

/* A batch memory operation node's parameters checked as cuStreamBatchMemOp's
 * and kept in the node (more operations than it holds are not simulated). */
static CUresult memop_take(struct sim_node *n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_memops_check(p->count, p->paramArray, p->flags);
    if (r)
        return r;
    if (p->count > SIM_MEMOP_NODE_OPS)
        return CUDA_ERROR_NOT_SUPPORTED;
    n->u.memop.ctx = p->ctx;
    n->u.memop.count = p->count;
    n->u.memop.flags = p->flags;
    memcpy(n->u.memop.ops, p->paramArray, p->count * sizeof *p->paramArray);
    return CUDA_SUCCESS;
}

struct sim_node *sim_node_memops(CUcontext ctx, unsigned int count, const CUstreamBatchMemOpParams *ops)
{
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    CUDA_BATCH_MEM_OP_NODE_PARAMS p = {ctx, count, (CUstreamBatchMemOpParams *)ops, 0};
    if (n && memop_take(n, &p) != CUDA_SUCCESS) {
        sim_node_destroy(n);
        n = NULL;
    }
    return n;
}

SIM_EXPORT CUresult cuGraphAddBatchMemOpNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                             size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !as_graph(hGraph))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = memop_take(n, nodeParams);
    if (r) {
        sim_node_destroy(n);
        return r;
    }
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

/* The node's parameters; paramArray points at the node's own operations. */
SIM_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams_out)
{
    struct sim_node *n = as_node(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP || !nodeParams_out)
        return CUDA_ERROR_INVALID_VALUE;
    nodeParams_out->ctx = n->u.memop.ctx;
    nodeParams_out->count = n->u.memop.count;
    nodeParams_out->flags = n->u.memop.flags;
    nodeParams_out->paramArray = n->u.memop.ops;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)
        return CUDA_ERROR_INVALID_VALUE;
    return memop_take(n, nodeParams);
}

SIM_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUdeviceptr dptr)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !as_graph(hGraph) || as_graph(hGraph)->moved)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_node *n = sim_node_free(dptr);
    if (!n)
        return CUDA_ERROR_INVALID_VALUE; /* not an address an allocation node returned */
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

/* ---- graph structure: empty nodes, roots, edges, clones ---- */

SIM_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies)
{
    if (!phGraphNode || !as_graph(hGraph))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, node_new(CU_GRAPH_NODE_TYPE_EMPTY));
}

/* The nodes without dependencies, as cuGraphGetNodes gives nodes. */
SIM_EXPORT CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    struct sim_graph *g = as_graph(hGraph);
    if (!g || !numRootNodes)
        return CUDA_ERROR_INVALID_VALUE;
    size_t k = 0, cap = *numRootNodes;
    for (size_t i = 0; i < g->n; i++)
        if (!g->nodes[i]->ndeps) {
            if (rootNodes && k < cap)
                rootNodes[k] = (CUgraphNode)g->nodes[i];
            k++;
        }
    if (rootNodes) {
        for (size_t i = k; i < cap; i++)
            rootNodes[i] = NULL;
        *numRootNodes = k < cap ? k : cap;
    } else {
        *numRootNodes = k;
    }
    return CUDA_SUCCESS;
}

static const CUgraphEdgeData plain_edge;

/* Dependency d of n's edge data. */
static CUgraphEdgeData edge_of(const struct sim_node *n, size_t d) { return n->edata ? n->edata[d] : plain_edge; }

static int plain(const CUgraphEdgeData *e) { return !memcmp(e, &plain_edge, sizeof *e); }

/* Drops n's dependency d, its edge data with it. */
static void drop_dep(struct sim_node *n, size_t d)
{
    memmove(&n->deps[d], &n->deps[d + 1], (n->ndeps - d - 1) * sizeof *n->deps);
    if (n->edata)
        memmove(&n->edata[d], &n->edata[d + 1], (n->ndeps - d - 1) * sizeof *n->edata);
    n->ndeps--;
}

/* Every edge of the graph, from a dependency to the node needing it, in
 * the order of cuGraphGetNodes' nodes, with its data where asked: where
 * not, an edge with data makes the query lossy (the count alone is not). */
static CUresult get_edges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                          size_t *numEdges)
{
    struct sim_graph *g = as_graph(hGraph);
    if (!g || !numEdges || (!from != !to) || (edgeData && !from))
        return CUDA_ERROR_INVALID_VALUE;
    size_t k = 0, cap = *numEdges;
    for (size_t i = 0; i < g->n; i++)
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++, k++) {
            CUgraphEdgeData e = edge_of(g->nodes[i], d);
            if (from && !edgeData && !plain(&e))
                return CUDA_ERROR_LOSSY_QUERY;
            if (from && k < cap) {
                from[k] = (CUgraphNode)g->nodes[i]->deps[d];
                to[k] = (CUgraphNode)g->nodes[i];
                if (edgeData)
                    edgeData[k] = e;
            }
        }
    if (from) {
        for (size_t i = k; i < cap; i++) {
            from[i] = to[i] = NULL;
            if (edgeData)
                edgeData[i] = plain_edge;
        }
        *numEdges = k < cap ? k : cap;
    } else {
        *numEdges = k;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
    return get_edges(hGraph, from, to, NULL, numEdges);
}

SIM_EXPORT CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                                       size_t *numEdges)
{
    return get_edges(hGraph, from, to, edgeData, numEdges);
}

SIM_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !nodeParams || n->type != CU_GRAPH_NODE_TYPE_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    nodeParams->fn = n->u.host.fn;
    nodeParams->userData = n->u.host.data;
    return CUDA_SUCCESS;
}

/* A captured copy, made of a pointer pair, is told as a 1D copy between
 * unified addresses. */
SIM_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !nodeParams || n->type != CU_GRAPH_NODE_TYPE_MEMCPY)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->u.copy.shaped) {
        *nodeParams = n->u.copy.c;
        return CUDA_SUCCESS;
    }
    memset(nodeParams, 0, sizeof *nodeParams);
    nodeParams->srcMemoryType = nodeParams->dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    nodeParams->srcDevice = (CUdeviceptr)(uintptr_t)n->u.copy.src;
    nodeParams->dstDevice = (CUdeviceptr)(uintptr_t)n->u.copy.dst;
    nodeParams->WidthInBytes = n->u.copy.n;
    nodeParams->Height = nodeParams->Depth = 1;
    return CUDA_SUCCESS;
}

/* Puts the nodes in an order their edges allow, keeping the order they
 * were added where it does (launches run nodes in this order). */
static void reorder(struct sim_graph *g)
{
    unsigned stamp = ++g->stamp;
    for (size_t placed = 0; placed < g->n; placed++)
        for (size_t i = placed; i < g->n; i++) {
            struct sim_node *n = g->nodes[i];
            size_t d = 0;
            while (d < n->ndeps && n->deps[d]->mark == stamp)
                d++;
            if (d == n->ndeps) {
                memmove(&g->nodes[placed + 1], &g->nodes[placed], (i - placed) * sizeof *g->nodes);
                g->nodes[placed] = n;
                n->mark = stamp;
                break;
            }
        }
}

/* Whether e may join a to b: ports leave kernels only, none arrives, and a
 * programmatic edge joins two kernels from a port that triggers early. */
static int edge_ok(const struct sim_node *a, const struct sim_node *b, const CUgraphEdgeData *e)
{
    for (size_t i = 0; i < sizeof e->reserved; i++)
        if (e->reserved[i])
            return 0;
    int kernels = a->type == CU_GRAPH_NODE_TYPE_KERNEL && b->type == CU_GRAPH_NODE_TYPE_KERNEL;
    if (e->to_port || e->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER ||
        (e->from_port && a->type != CU_GRAPH_NODE_TYPE_KERNEL))
        return 0;
    if (e->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
        return kernels && e->from_port != CU_GRAPH_KERNEL_NODE_PORT_DEFAULT;
    return e->type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && e->from_port != CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
}

/* Appends dependency a, with edge data e, to b. */
static CUresult append_dep(struct sim_node *b, struct sim_node *a, CUgraphEdgeData e)
{
    struct sim_node **deps = realloc(b->deps, (b->ndeps + 1) * sizeof *deps);
    if (!deps)
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->deps = deps;
    if (b->edata || !plain(&e)) {
        CUgraphEdgeData *ed = realloc(b->edata, (b->ndeps + 1) * sizeof *ed);
        if (!ed)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (!b->edata)
            memset(ed, 0, b->ndeps * sizeof *ed);
        ed[b->ndeps] = e;
        b->edata = ed;
    }
    deps[b->ndeps++] = a;
    return CUDA_SUCCESS;
}

/* Edges from[i] -> to[i], with their data, each checked against the graph
 * with the ones before it: an edge whose data is not allowed, one already
 * there (or given twice), between graphs, or closing a cycle is refused
 * and none is added. An edge that triggers early (a port, a programmatic
 * edge) runs here as a plain one: the next node starts once the first is
 * done, which such an edge allows too. */
static CUresult add_edges(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                          const CUgraphEdgeData *edgeData, size_t n)
{
    struct sim_graph *g = as_graph(hGraph);
    if (!g || (n && (!from || !to)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    size_t i = 0;
    for (; i < n; i++) {
        struct sim_node *a = as_node(from[i]), *b = as_node(to[i]);
        size_t d = 0;
        while (a && b && d < b->ndeps && b->deps[d] != a)
            d++;
        if (!a || !b || a == b || a->graph != g || b->graph != g || d < b->ndeps ||
            (edgeData && !edge_ok(a, b, &edgeData[i])) || reaches(g, &a, 1, b)) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if ((r = append_dep(b, a, edgeData ? edgeData[i] : plain_edge)) != CUDA_SUCCESS)
            break;
    }
    if (r != CUDA_SUCCESS) {
        while (i-- > 0) /* the call's edges, the last first */
            drop_dep(as_node(to[i]), as_node(to[i])->ndeps - 1);
        return r;
    }
    reorder(g);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                           size_t numDependencies)
{
    return add_edges(hGraph, from, to, NULL, numDependencies);
}

SIM_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                              const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    return add_edges(hGraph, from, to, edgeData, numDependencies);
}

/* Edges removed: each must be there (none is removed otherwise). */
static CUresult remove_edges(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                             const CUgraphEdgeData *edgeData, size_t n)
{
    struct sim_graph *g = as_graph(hGraph);
    if (!g || (n && (!from || !to)))
        return CUDA_ERROR_INVALID_VALUE;
    /* each as it was added: its data too (none given: a plain edge), and
     * once (an edge is there once) */
    for (size_t i = 0; i < n; i++) {
        struct sim_node *a = as_node(from[i]), *b = as_node(to[i]);
        size_t d = 0;
        while (a && b && b->graph == g && d < b->ndeps && b->deps[d] != a)
            d++;
        CUgraphEdgeData want = edgeData ? edgeData[i] : plain_edge, had = d < (b ? b->ndeps : 0) ? edge_of(b, d) : want;
        if (!a || !b || b->graph != g || d == b->ndeps || memcmp(&want, &had, sizeof want))
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (from[j] == from[i] && to[j] == to[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < n; i++) {
        struct sim_node *a = as_node(from[i]), *b = as_node(to[i]);
        for (size_t d = 0; d < b->ndeps; d++)
            if (b->deps[d] == a) {
                drop_dep(b, d);
                break;
            }
    }
    reorder(g);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                              size_t numDependencies)
{
    return remove_edges(hGraph, from, to, NULL, numDependencies);
}

SIM_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                                 const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    return remove_edges(hGraph, from, to, edgeData, numDependencies);
}

/* A node's dependencies (dependents: the nodes depending on it), as many
 * as fit, their count in *n; without nodes, the count. */
static CUresult node_edges(CUgraphNode hNode, int dependents, CUgraphNode *nodes, CUgraphEdgeData *edgeData, size_t *n)
{
    struct sim_node *a = as_node(hNode);
    if (!a || !n)
        return CUDA_ERROR_INVALID_VALUE;
    if (edgeData && !nodes)
        return CUDA_ERROR_INVALID_VALUE;
    size_t k = 0, cap = *n;
    struct sim_graph *g = a->graph;
    for (size_t i = 0; i < (dependents ? g->n : 1); i++) {
        struct sim_node *b = dependents ? g->nodes[i] : a;
        for (size_t d = 0; d < b->ndeps; d++) {
            if (dependents && b->deps[d] != a)
                continue;
            CUgraphEdgeData e = edge_of(b, d);
            if (nodes && !edgeData && !plain(&e))
                return CUDA_ERROR_LOSSY_QUERY;
            if (nodes && k < cap) {
                nodes[k] = (CUgraphNode)(dependents ? b : b->deps[d]);
                if (edgeData)
                    edgeData[k] = e;
            }
            k++;
        }
    }
    if (nodes) {
        for (size_t i = k; i < cap; i++) {
            nodes[i] = NULL;
            if (edgeData)
                edgeData[i] = plain_edge;
        }
        *n = k < cap ? k : cap;
    } else {
        *n = k;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies)
{
    return node_edges(hNode, 0, dependencies, NULL, numDependencies);
}

SIM_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
                                                  CUgraphEdgeData *edgeData, size_t *numDependencies)
{
    return node_edges(hNode, 0, dependencies, edgeData, numDependencies);
}

SIM_EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                                 size_t *numDependentNodes)
{
    return node_edges(hNode, 1, dependentNodes, NULL, numDependentNodes);
}

SIM_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                                    CUgraphEdgeData *edgeData, size_t *numDependentNodes)
{
    return node_edges(hNode, 1, dependentNodes, edgeData, numDependentNodes);
}

/* A copy of a graph without memory nodes (a clone of one with them is not
 * simulated). */
SIM_EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    struct sim_graph *g = as_graph(originalGraph);
    if (!phGraphClone || !g)
        return CUDA_ERROR_INVALID_VALUE;
    if (g->mem)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct sim_graph *c = clone_graph(g);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraphClone = (CUgraph)c;
    return CUDA_SUCCESS;
}

/* A copy node: the copy cuMemcpy3D would make, checked now, made at each
 * launch (host memory is read and written then). */
SIM_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    (void)ctx;
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !as_graph(hGraph))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_copy3d_check(copyParams);
    if (r)
        return r;
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_MEMCPY);
    if (n) {
        n->u.copy.shaped = 1;
        n->u.copy.c = *copyParams;
    }
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

/* A host node: fn runs at each launch once the stream's earlier work is
 * done, as a host function enqueued there. */
SIM_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !nodeParams || !nodeParams->fn || !as_graph(hGraph))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies,
                              sim_node_host(nodeParams->fn, nodeParams->userData));
}

/* A set of height rows of width elements of elementSize (1, 2 or 4)
 * bytes, pitch bytes apart, in device memory of the context's device (the
 * driver checks the range when the node is added). */
/* Event nodes: the event recorded, or waited for, where the launch's
 * stream gets to the node. */
static CUresult add_event_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                               size_t numDependencies, CUevent event, CUgraphNodeType type)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !as_graph(hGraph))
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    struct sim_node *n = node_new(type);
    if (n)
        n->u.event = event;
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

SIM_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                              size_t numDependencies, CUevent event)
{
    return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

SIM_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, CUevent event)
{
    return add_event_node(phGraphNode, hGraph, dependencies, numDependencies, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

static CUresult event_get(CUgraphNode hNode, CUgraphNodeType type, CUevent *out)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !out || n->type != type)
        return CUDA_ERROR_INVALID_VALUE;
    *out = n->u.event;
    return CUDA_SUCCESS;
}

static CUresult event_set(struct sim_node *n, CUgraphNodeType type, CUevent event)
{
    if (!n || n->type != type)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_event_valid(event))
        return CUDA_ERROR_INVALID_HANDLE;
    n->u.event = event;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return event_get(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_out);
}

SIM_EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return event_get(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_out);
}

SIM_EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return event_set(as_node(hNode), CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

SIM_EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return event_set(as_node(hNode), CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

/* A set of height rows of width elements of elementSize (1, 2 or 4) bytes
 * in memory of the device's. */
static int memset_ok(const CUDA_MEMSET_NODE_PARAMS *m)
{
    size_t row;
    return m && (m->elementSize == 1 || m->elementSize == 2 || m->elementSize == 4) && m->width && m->height &&
           (row = m->width * m->elementSize) && (m->height == 1 || m->pitch >= row) &&
           sim_valid_range(m->dst, (m->height - 1) * (m->height > 1 ? m->pitch : 0) + row);
}

static void memset_take(struct sim_node *n, const CUDA_MEMSET_NODE_PARAMS *m)
{
    n->u.set.dst = (void *)(uintptr_t)m->dst;
    n->u.set.v = m->value;
    n->u.set.n = m->width;
    n->u.set.width = m->elementSize;
    n->u.set.pitch = m->pitch;
    n->u.set.rows = m->height;
}

SIM_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                         CUcontext ctx)
{
    (void)ctx;
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !as_graph(hGraph) || !memsetParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (!memset_ok(memsetParams))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_MEMSET);
    if (n)
        memset_take(n, memsetParams);
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, n);
}

SIM_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !nodeParams || n->type != CU_GRAPH_NODE_TYPE_MEMSET)
        return CUDA_ERROR_INVALID_VALUE;
    *nodeParams = (CUDA_MEMSET_NODE_PARAMS){(CUdeviceptr)(uintptr_t)n->u.set.dst, n->u.set.pitch, n->u.set.v,
                                            (unsigned)n->u.set.width, n->u.set.n, n->u.set.rows};
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_MEMSET || !memset_ok(nodeParams))
        return CUDA_ERROR_INVALID_VALUE;
    memset_take(n, nodeParams);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !dptr_out || n->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr_out = (CUdeviceptr)n->u.freed->base;
    return CUDA_SUCCESS;
}

/* Access descriptors are not kept: the node reports none. */
SIM_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !params_out || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    *params_out = n->u.alloc.params;
    return CUDA_SUCCESS;
}

/* ---- executable graphs ---- */

static size_t flat_count(const struct sim_graph *g)
{
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++)
        k += g->nodes[i]->type == CU_GRAPH_NODE_TYPE_GRAPH ? flat_count(g->nodes[i]->u.child) : 1;
    return k;
}

static void shape_free(struct shape *s)
{
    for (size_t i = 0; s && i < s->n; i++) {
        free(s->nodes[i].deps);
        free(s->nodes[i].edata);
        shape_free(s->nodes[i].child);
    }
    if (s)
        free(s->nodes);
    free(s);
}

/* g's topology; NULL if out of memory. */
static struct shape *shape_of(const struct sim_graph *g)
{
    struct shape *s = calloc(1, sizeof *s);
    if (!s || (g->n && !(s->nodes = calloc(g->n, sizeof *s->nodes)))) {
        free(s);
        return NULL;
    }
    s->n = g->n;
    for (size_t i = 0; i < g->n; i++) {
        const struct sim_node *n = g->nodes[i];
        struct shape_node *c = &s->nodes[i];
        *c = (struct shape_node){.type = n->type, .node = n, .ndeps = n->ndeps};
        if ((n->ndeps && !(c->deps = calloc(n->ndeps, sizeof *c->deps))) ||
            (n->edata && !(c->edata = malloc(n->ndeps * sizeof *c->edata))) ||
            (n->type == CU_GRAPH_NODE_TYPE_GRAPH && !(c->child = shape_of(n->u.child)))) {
            shape_free(s);
            return NULL;
        }
        if (n->edata)
            memcpy(c->edata, n->edata, n->ndeps * sizeof *c->edata);
        /* a dependency is a node of the same graph, most often just before */
        for (size_t d = 0; d < n->ndeps; d++)
            for (size_t k = g->n; k-- > 0;)
                if (g->nodes[(i + k) % g->n] == n->deps[d]) {
                    c->deps[d] = (i + k) % g->n;
                    break;
                }
    }
    return s;
}

/* Where topology b (hGraph's) differs from a (the executable's): the node
 * counts of a graph, then how many of its nodes depend on none (its first
 * such node named: an H100's driver names a child graph's first node when
 * its second no longer depends on it), then a node's dependencies (paired
 * in the order they were added) or their edges' data, a node's kind. The
 * node named is hGraph's; none where a graph's node count differs, unless
 * a child graph's (its node then); an edge's other end where a dependency
 * differs. */
static CUgraphExecUpdateResult shape_diff(const struct shape *a, const struct shape *b, const struct sim_node *in,
                                          CUgraphExecUpdateResultInfo *info)
{
    if (a->n != b->n) {
        info->errorNode = (CUgraphNode)in;
        return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    size_t roots = 0, first = b->n;
    for (size_t i = 0; i < b->n; i++) {
        roots += !a->nodes[i].ndeps;
        roots -= !b->nodes[i].ndeps;
        if (!b->nodes[i].ndeps && first == b->n)
            first = i;
    }
    if (roots) {
        info->errorNode = (CUgraphNode)b->nodes[first].node;
        return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    for (size_t i = 0; i < b->n; i++) {
        const struct shape_node *x = &a->nodes[i], *y = &b->nodes[i];
        info->errorNode = (CUgraphNode)y->node;
        if (x->ndeps != y->ndeps)
            return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        for (size_t d = 0; d < y->ndeps; d++) {
            CUgraphEdgeData ex = x->edata ? x->edata[d] : plain_edge, ey = y->edata ? y->edata[d] : plain_edge;
            if (x->deps[d] != y->deps[d] || memcmp(&ex, &ey, sizeof ex)) {
                info->errorFromNode = (CUgraphNode)b->nodes[y->deps[d]].node;
                return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
            }
        }
        if (x->type != y->type)
            return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        CUgraphExecUpdateResult r;
        if (y->child && (r = shape_diff(x->child, y->child, y->node, info)) != CU_GRAPH_EXEC_UPDATE_SUCCESS)
            return r;
    }
    info->errorNode = NULL;
    return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

static struct sim_exec *flat_of(const struct sim_graph *g);

/* g's nodes in order, child graphs' in their place; a conditional node's
 * bodies each instantiated apart (they run or not as it says). */
static void flatten(const struct sim_graph *g, struct sim_node *out, size_t *k)
{
    for (size_t i = 0; i < g->n; i++) {
        const struct sim_node *n = g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            flatten(n->u.child, out, k);
            continue;
        }
        struct sim_node *c = &out[(*k)++];
        *c = (struct sim_node){.type = n->type, .u = n->u, .orig = n};
        if (node_gmem(c))
            node_gmem(c)->refs++;
        if (c->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            c->u.cond.bodies = NULL;
            c->u.cond.flat = calloc(c->u.cond.size, sizeof *c->u.cond.flat);
            for (unsigned b = 0; c->u.cond.flat && b < c->u.cond.size; b++)
                c->u.cond.flat[b] = flat_of((const struct sim_graph *)n->u.cond.bodies[b]);
        }
    }
}

/* A body's nodes, instantiated (no memory nodes: refused in bodies). */
static struct sim_exec *flat_of(const struct sim_graph *g)
{
    struct sim_exec *x = calloc(1, sizeof *x);
    size_t n = flat_count(g);
    if (x && ((n && !(x->nodes = calloc(n, sizeof *x->nodes))) || !(x->shape = shape_of(g)))) {
        free(x->nodes);
        free(x);
        return NULL;
    }
    if (x)
        flatten(g, x->nodes, &x->n);
    return x;
}

/* The bodies of the conditional nodes among nodes. */
static void conds_free(struct sim_node *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].type != CU_GRAPH_NODE_TYPE_CONDITIONAL || !nodes[i].u.cond.flat)
            continue;
        for (unsigned b = 0; b < nodes[i].u.cond.size; b++) {
            struct sim_exec *x = nodes[i].u.cond.flat[b];
            if (x) {
                conds_free(x->nodes, x->n);
                free(x->nodes);
                shape_free(x->shape);
                free(x);
            }
        }
        free(nodes[i].u.cond.flat);
    }
}

/* Whether a conditional node's body, at any depth, has memory nodes. */
static int cond_mem(const struct sim_graph *g, int in_body)
{
    if (in_body && g->mem)
        return 1;
    for (size_t i = 0; i < g->n; i++) {
        const struct sim_node *n = g->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && cond_mem(n->u.child, in_body))
            return 1;
        for (unsigned b = 0; n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && b < n->u.cond.size; b++)
            if (cond_mem((const struct sim_graph *)n->u.cond.bodies[b], 1))
                return 1;
    }
    return 0;
}

static void exec_free(struct sim_exec *x)
{
    pthread_mutex_lock(&sim_mem_lock);
    for (size_t i = 0; i < x->n; i++)
        if (node_gmem(&x->nodes[i]))
            gmem_put(node_gmem(&x->nodes[i]));
    pthread_mutex_unlock(&sim_mem_lock);
    if (x->graph)
        x->graph->exec = NULL;
    conds_free(x->nodes, x->n);
    free(x->nodes);
    shape_free(x->shape);
    sim_urefs_free(&x->urefs);
    sim_bury(&x->magic, x);
}

/* Physical memory the graph needs at once on each device: the peak of its
 * allocations in node order, its own allocations freed on the way. */
static void compute_peak(struct sim_exec *x)
{
    uint64_t cur[SIM_MAX_DEVICES] = {0};
    for (size_t i = 0; i < x->n; i++) {
        const struct sim_node *n = &x->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            int d = n->u.alloc.m->dev;
            cur[d] += n->u.alloc.m->bytes;
            if (cur[d] > x->peak[d])
                x->peak[d] = cur[d];
        } else if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            for (size_t j = 0; j < i; j++)
                if (x->nodes[j].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && x->nodes[j].u.alloc.m == n->u.freed)
                    cur[n->u.freed->dev] -= n->u.freed->bytes;
        }
    }
}

/* Reserves what the pools lack to run x (sim_mem_lock held); with
 * auto_free, x's allocations still in use count as free. */
static CUresult reserve(const struct sim_exec *x, int auto_free)
{
    uint64_t grow[SIM_MAX_DEVICES] = {0};
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        if (!x->peak[d])
            continue;
        uint64_t spare = pools[d].reserved - pools[d].used;
        for (size_t i = 0; auto_free && i < x->n; i++) {
            const struct sim_node *n = &x->nodes[i];
            if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->u.alloc.m->dev == d && n->u.alloc.m->live)
                spare += n->u.alloc.m->bytes;
        }
        grow[d] = x->peak[d] > spare ? x->peak[d] - spare : 0;
    }
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (grow[d] && sim_mem_reserve(d, grow[d]) != 0) {
            while (d-- > 0)
                if (grow[d])
                    sim_mem_release(d, grow[d]);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        pools[d].reserved += grow[d];
        if (pools[d].reserved > pools[d].reserved_high)
            pools[d].reserved_high = pools[d].reserved;
    }
    return CUDA_SUCCESS;
}

static struct sim_exec *as_exec(CUgraphExec h)
{
    struct sim_exec *x = (struct sim_exec *)h;
    uint32_t magic = x ? x->magic : 0;
    return magic == EXEC_MAGIC ? x : magic == SIM_DEAD_MAGIC ? sim_dead("graph executable", x) : NULL;
}

/* The arguments of an upload or a launch: a stream that may take work now
 * (uploading or launching into a capture is refused) and an executable. */
static CUresult run_args(CUgraphExec exec, CUstream h, int pt, struct sim_stream **s, struct sim_exec **x)
{
    CUresult r = sim_stream_arg(h, pt, s);
    if (r)
        return r;
    if (!(*x = as_exec(exec)))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_capture_refuse(*s);
}

static CUresult upload(CUgraphExec exec, CUstream h, int pt)
{
    struct sim_stream *s;
    struct sim_exec *x;
    CUresult r = run_args(exec, h, pt, &s, &x);
    if (r)
        return r;
    pthread_mutex_lock(&sim_mem_lock);
    r = reserve(x, 0);
    pthread_mutex_unlock(&sim_mem_lock);
    return r;
}
SIM_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream h) { SIM_GATE(); return upload(exec, h, 0); }
SIM_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream h) { SIM_GATE(); return upload(exec, h, 1); }

static CUresult instantiate(CUgraphExec *out, CUgraph graph, unsigned long long flags, CUstream upload_stream,
                            int pt)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    struct sim_graph *g = as_graph(graph);
    if (g && g->moved)
        return CUDA_ERROR_NOT_SUPPORTED; /* a moved graph runs only within its node's */
    if (!out || !g ||
        (flags & (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | FLAG_DEVICE_LAUNCH)) ==
            (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | FLAG_DEVICE_LAUNCH) ||
        (g->mem && (g->exec || (flags & FLAG_DEVICE_LAUNCH))) || cond_mem(g, 0))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_exec *x = calloc(1, sizeof *x);
    size_t n = flat_count(g);
    if (!x || (n && !(x->nodes = calloc(n, sizeof *x->nodes))) || !(x->shape = shape_of(g))) {
        if (x)
            free(x->nodes);
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->magic = EXEC_MAGIC;
    x->flags = flags;
    pthread_mutex_lock(&sim_mem_lock);
    flatten(g, x->nodes, &x->n);
    pthread_mutex_unlock(&sim_mem_lock);
    compute_peak(x);
    if (sim_urefs_copy(&x->urefs, &g->urefs) != CUDA_SUCCESS) {
        exec_free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->mem = g->mem;
    if (g->mem) {
        g->exec = x;
        x->graph = g;
    }
    if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) &&
        (r = upload((CUgraphExec)x, upload_stream, pt)) != CUDA_SUCCESS) {
        exec_free(x);
        return r;
    }
    *out = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    SIM_GATE();
    if (flags & ~(unsigned long long)FLAGS_WITH_FLAGS)
        return CUDA_ERROR_INVALID_VALUE;
    return instantiate(exec, graph, flags, NULL, 0);
}

static CUresult instantiate_params(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p, int pt)
{
    if (!p || (p->flags & ~(cuuint64_t)(FLAGS_WITH_FLAGS | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = instantiate(exec, graph, p->flags, p->hUploadStream, pt);
    p->hErrNode_out = NULL;
    p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}
SIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    SIM_GATE();
    return instantiate_params(exec, graph, p, 0);
}
SIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph graph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    SIM_GATE();
    return instantiate_params(exec, graph, p, 1);
}

/* Memory nodes, in order (sim_mem_lock held). */
static CUresult run_memory(struct sim_exec *x, struct sim_ctx *ctx)
{
    int auto_free = (x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
    for (size_t i = 0; i < x->n; i++)
        if (x->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && x->nodes[i].u.alloc.m->live && !auto_free)
            return CUDA_ERROR_INVALID_VALUE; /* the previous launch's allocation is still in use */
    CUresult r = reserve(x, auto_free);
    if (r)
        return r;
    for (size_t i = 0; i < x->n; i++)
        if (x->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && x->nodes[i].u.alloc.m->live)
            unuse(x->nodes[i].u.alloc.m);
    for (size_t i = 0; i < x->n; i++) {
        const struct sim_node *n = &x->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            struct sim_gmem *m = n->u.alloc.m;
            struct pool *p = &pools[m->dev];
            m->live = 1;
            m->ctx = ctx;
            p->used += m->bytes;
            if (p->used > p->used_high)
                p->used_high = p->used;
        } else if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE && n->u.freed->live) {
            unuse(n->u.freed);
        }
    }
    return CUDA_SUCCESS;
}

static void cond_defaults(const struct sim_exec *x);
static void run_nodes(struct sim_stream *s, const struct sim_exec *x);

static CUresult launch(CUgraphExec exec, CUstream h, int pt)
{
    struct sim_stream *s;
    struct sim_exec *x;
    CUresult r = run_args(exec, h, pt, &s, &x);
    if (r)
        return r;
    if (x->mem) {
        pthread_mutex_lock(&sim_mem_lock);
        r = run_memory(x, s->ctx);
        pthread_mutex_unlock(&sim_mem_lock);
        if (r)
            return r;
    }
    cond_defaults(x);
    run_nodes(s, x);
    return CUDA_SUCCESS;
}

static struct sim_cond *cond_of(CUgraphConditionalHandle h)
{
    uint64_t i = (h & ~COND_TAG) - 1;
    return (h & COND_TAG) == COND_TAG && i < nconds && conds[i].graph ? &conds[i] : NULL;
}

/* What a kernel sets (the builtin setcond); a handle of no live graph is ignored. */
void sim_cond_set(CUgraphConditionalHandle h, unsigned value)
{
    struct sim_cond *c = cond_of(h);
    if (c)
        c->value = value;
}

/* A launch sets the handles that say so to their default value. */
static void cond_defaults(const struct sim_exec *x)
{
    for (size_t i = 0; i < x->n; i++) {
        const struct sim_node *n = &x->nodes[i];
        if (n->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
            continue;
        struct sim_cond *c = cond_of(n->u.cond.handle);
        if (c && (c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT))
            c->value = c->def;
        for (unsigned b = 0; n->u.cond.flat && b < n->u.cond.size; b++)
            if (n->u.cond.flat[b])
                cond_defaults(n->u.cond.flat[b]);
    }
}

/* A WHILE body runs at most this often in one launch: a body that never
 * clears its handle would hang a GPU; the simulation goes on. */
#define SIM_WHILE_MAX 1000000u

static void run_nodes(struct sim_stream *s, const struct sim_exec *x)
{
    for (size_t i = 0; x && i < x->n; i++) {
        const struct sim_node *n = &x->nodes[i];
        if (n->disabled)
            continue; /* an empty node, as the driver makes it */
        switch (n->type) {
        case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
            struct sim_cond *c = cond_of(n->u.cond.handle);
            struct sim_exec *const *body = n->u.cond.flat;
            unsigned v = c ? c->value : 0;
            if (!body)
                break;
            if (n->u.cond.type == CU_GRAPH_COND_TYPE_IF && (v || n->u.cond.size > 1))
                run_nodes(s, body[v ? 0 : 1]);
            else if (n->u.cond.type == CU_GRAPH_COND_TYPE_SWITCH && v < n->u.cond.size)
                run_nodes(s, body[v]);
            for (unsigned k = 0; n->u.cond.type == CU_GRAPH_COND_TYPE_WHILE && c && c->value && k < SIM_WHILE_MAX; k++)
                run_nodes(s, body[0]);
            break;
        }
        case CU_GRAPH_NODE_TYPE_KERNEL: sim_kernel_run(s, n->u.kernel.f, &n->u.kernel.args); break;
        case CU_GRAPH_NODE_TYPE_MEMCPY:
            if (n->u.copy.shaped)
                sim_copy3d_run(&n->u.copy.c);
            else
                memmove(n->u.copy.dst, n->u.copy.src, n->u.copy.n);
            break;
        case CU_GRAPH_NODE_TYPE_MEMSET:
            for (size_t y = 0; y < n->u.set.rows; y++)
                sim_fill((char *)n->u.set.dst + y * n->u.set.pitch, n->u.set.v, n->u.set.n, n->u.set.width);
            break;
        case CU_GRAPH_NODE_TYPE_HOST: sim_host_enqueue(s, n->u.host.fn, NULL, NULL, n->u.host.data); break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD: sim_event_record_on(n->u.event, s); break;
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT: sim_event_wait_on(n->u.event, s); break;
        case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: sim_memops_apply(n->u.memop.count, n->u.memop.ops); break;
        default: break;
        }
    }
}
SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream h) { SIM_GATE(); return launch(exec, h, 0); }
SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream h) { SIM_GATE(); return launch(exec, h, 1); }

/* Potentially unsafe during capture, as in the driver. Allocations the graph
 * left in use stay allocated. */
SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    SIM_GATE();
    struct sim_exec *x = as_exec(exec);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_capture_check(NULL);
    if (r)
        return r;
    exec_free(x);
    return CUDA_SUCCESS;
}

/* ---- the graph memory pools ---- */

static CUresult pool_of(CUdevice ordinal, int *dev)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *dev = sim_phys(ordinal);
    return *dev < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    int d;
    CUresult r = pool_of(device, &d);
    if (r)
        return r;
    if (!value || (unsigned)attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    const struct pool *p = &pools[d];
    cuuint64_t v = attr == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT       ? p->used
                   : attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH        ? p->used_high
                   : attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ? p->reserved
                                                                    : p->reserved_high;
    pthread_mutex_unlock(&sim_mem_lock);
    *(cuuint64_t *)value = v;
    return CUDA_SUCCESS;
}

/* Only a high watermark can be set, and only to 0. */
SIM_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    int d;
    CUresult r = pool_of(device, &d);
    if (r)
        return r;
    if (!value || *(cuuint64_t *)value != 0 ||
        (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        pools[d].used_high = 0;
    else
        pools[d].reserved_high = 0;
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

static void trim(int d)
{
    struct pool *p = &pools[d];
    if (p->reserved > p->used) {
        sim_mem_release(d, p->reserved - p->used);
        p->reserved = p->used;
    }
}

SIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    SIM_GATE();
    int d;
    CUresult r = pool_of(device, &d);
    if (r)
        return r;
    pthread_mutex_lock(&sim_mem_lock);
    trim(d);
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

/* A context that goes frees what its launches left in use, and its device's
 * pool returns every unused page. */
void sim_graph_ctx_release(struct sim_ctx *ctx)
{
    pthread_mutex_lock(&sim_mem_lock);
    for (struct sim_gmem *m = gmems, *next; m; m = next) {
        next = m->next;
        if (m->live && m->ctx == ctx)
            unuse(m);
    }
    trim(ctx->dev);
    pthread_mutex_unlock(&sim_mem_lock);
}

/* hGraphExec takes hGraph's nodes' parameters when hGraph has the
 * topology it was made from (shape_diff), conditional nodes of the same
 * kind and number of bodies, each body of that topology too. Graphs with
 * memory nodes are not updated. */
SIM_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                         CUgraphExecUpdateResultInfo *resultInfo)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_graph *g = as_graph(hGraph);
    if (!x || !g || !resultInfo)
        return CUDA_ERROR_INVALID_VALUE;
    memset(resultInfo, 0, sizeof *resultInfo);
    if (x->mem || g->mem || cond_mem(g, 0)) {
        resultInfo->result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    struct sim_exec *y = flat_of(g);
    if (!y)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUgraphExecUpdateResult res = shape_diff(x->shape, y->shape, NULL, resultInfo);
    for (size_t i = 0; res == CU_GRAPH_EXEC_UPDATE_SUCCESS && i < y->n; i++) {
        const struct sim_node *a = &x->nodes[i], *b = &y->nodes[i];
        if (b->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
            continue;
        resultInfo->errorNode = (CUgraphNode)b->orig;
        if (a->u.cond.type != b->u.cond.type || a->u.cond.size != b->u.cond.size)
            res = CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        for (unsigned k = 0; res == CU_GRAPH_EXEC_UPDATE_SUCCESS && k < b->u.cond.size; k++)
            res = !a->u.cond.flat || !b->u.cond.flat || !a->u.cond.flat[k] || !b->u.cond.flat[k]
                      ? CU_GRAPH_EXEC_UPDATE_ERROR /* a body not instantiated: out of memory */
                      : shape_diff(a->u.cond.flat[k]->shape, b->u.cond.flat[k]->shape, b->orig, resultInfo);
        if (res == CU_GRAPH_EXEC_UPDATE_SUCCESS)
            resultInfo->errorNode = NULL;
    }
    resultInfo->result = res;
    struct sim_exec *drop = res == CU_GRAPH_EXEC_UPDATE_SUCCESS ? x : y;
    conds_free(drop->nodes, drop->n);
    free(drop->nodes);
    if (res == CU_GRAPH_EXEC_UPDATE_SUCCESS)
        x->nodes = y->nodes;
    shape_free(y->shape);
    free(y);
    return res == CU_GRAPH_EXEC_UPDATE_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

/* A node leaves its graph, and the edges to it with it. */
SIM_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !n->graph)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph *g = n->graph;
    size_t k = 0;
    for (size_t i = 0; i < g->n; i++) {
        struct sim_node *m = g->nodes[i];
        if (m == n)
            continue;
        for (size_t j = m->ndeps; j-- > 0;)
            if (m->deps[j] == n)
                drop_dep(m, j);
        g->nodes[k++] = m;
    }
    g->n = k;
    sim_node_destroy(n);
    return CUDA_SUCCESS;
}

/* ---- conditional nodes ---- */

/* A handle of hGraph; with CU_GRAPH_COND_ASSIGN_DEFAULT each launch sets
 * it to defaultLaunchValue, which it also holds from the start. */
SIM_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph,
                                                   CUcontext ctx, unsigned int defaultLaunchValue,
                                                   unsigned int flags)
{
    (void)ctx;
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_graph *g = as_graph(hGraph);
    if (!pHandle_out || !g || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_cond *c = realloc(conds, (nconds + 1) * sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    conds = c;
    conds[nconds] = (struct sim_cond){g, defaultLaunchValue, defaultLaunchValue, flags};
    *pHandle_out = COND_TAG | ++nconds;
    return CUDA_SUCCESS;
}

/* An IF node has one body (run when the value is not 0) or two (the
 * second run when it is), a WHILE node one, a SWITCH node at least one. */
static int cond_size_ok(CUgraphConditionalNodeType type, unsigned size)
{
    return type == CU_GRAPH_COND_TYPE_IF      ? size == 1 || size == 2
           : type == CU_GRAPH_COND_TYPE_WHILE ? size == 1
           : type == CU_GRAPH_COND_TYPE_SWITCH ? size >= 1
                                               : 0;
}

static CUresult add_conditional(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *deps, size_t ndeps,
                                CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    if (!as_graph(hGraph) || !cond_of(p->handle) || !cond_size_ok(p->type, p->size))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_CONDITIONAL);
    if (n) {
        n->u.cond.handle = p->handle;
        n->u.cond.type = p->type;
        n->u.cond.size = p->size;
        n->u.cond.ctx = p->ctx;
        n->u.cond.bodies = calloc(p->size, sizeof *n->u.cond.bodies);
        for (unsigned i = 0; n->u.cond.bodies && i < p->size; i++)
            n->u.cond.bodies[i] = (CUgraph)sim_graph_new();
        for (unsigned i = 0; n->u.cond.bodies && i < p->size; i++)
            if (!n->u.cond.bodies[i]) {
                sim_node_destroy(n);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
    }
    CUresult r = sim_graph_add_node(phGraphNode, hGraph, deps, ndeps, n);
    if (r == CUDA_SUCCESS)
        p->phGraph_out = n->u.cond.bodies;
    return r;
}

/* A child graph moved into its node (CUDA 12.9): not copied, the node's
 * from then on, so the nodes the program holds of it are the node's (an
 * executable's are set through them); it may not be destroyed, instantiated
 * or made a child again. One with memory nodes is not simulated. */
/* Whether g is one of outer's child graphs or conditional bodies, at any depth. */
static int holds(const struct sim_graph *outer, const struct sim_graph *g)
{
    for (size_t i = 0; i < outer->n; i++) {
        const struct sim_node *n = outer->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && (n->u.child == g || holds(n->u.child, g)))
            return 1;
        for (unsigned b = 0; n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && n->u.cond.bodies && b < n->u.cond.size; b++)
            if ((struct sim_graph *)n->u.cond.bodies[b] == g || holds((struct sim_graph *)n->u.cond.bodies[b], g))
                return 1;
    }
    return 0;
}

static CUresult add_moved_child(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *deps, size_t ndeps,
                                CUgraph childGraph)
{
    struct sim_graph *g = as_graph(hGraph), *child = as_graph(childGraph);
    if (child && child->moved)
        return CUDA_ERROR_NOT_SUPPORTED; /* as a driver 580 answers a graph moved already */
    if (!g || !child || child == g || holds(child, g))
        return CUDA_ERROR_INVALID_VALUE; /* a graph cannot hold itself (a driver takes it, and then instantiates none of them) */
    if (child->mem)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct sim_node *n = node_new(CU_GRAPH_NODE_TYPE_GRAPH);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = sim_graph_append(g, n, (struct sim_node *const *)deps, ndeps);
    if (r != CUDA_SUCCESS) {
        sim_node_destroy(n); /* without the child, still the program's */
        return r;
    }
    n->u.child = child;
    child->moved = 1;
    *phGraphNode = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

/* Conditional nodes and moved child graphs here, the other kinds through
 * their own entry points. */
static CUresult add_one(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *deps, size_t ndeps,
                        CUgraphNodeParams *p)
{
    if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return add_conditional(phGraphNode, hGraph, deps, ndeps, &p->conditional);
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH && p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
        return add_moved_child(phGraphNode, hGraph, deps, ndeps, p->graph.graph);
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH && p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
        return CUDA_ERROR_INVALID_VALUE;
    return fg_node_add_by_kind(phGraphNode, hGraph, deps, ndeps, p);
}

SIM_EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return fg_node_add_with_edges(add_one, phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

SIM_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                      const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                      CUgraphNodeParams *nodeParams)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return fg_node_add_with_edges(add_one, phGraphNode, hGraph, dependencies, dependencyData, numDependencies,
                                  nodeParams);
}

/* A node's parameters: a conditional node's bodies are the node's, the
 * other kinds' are their own entry points' answers. */
SIM_EXPORT CUresult cuGraphNodeGetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return fg_node_get_by_kind(hNode, n->type, nodeParams);
    memset(nodeParams, 0, sizeof *nodeParams);
    nodeParams->type = n->type;
    nodeParams->conditional.handle = n->u.cond.handle;
    nodeParams->conditional.type = n->u.cond.type;
    nodeParams->conditional.size = n->u.cond.size;
    nodeParams->conditional.ctx = n->u.cond.ctx;
    nodeParams->conditional.phGraph_out = n->u.cond.bodies;
    return CUDA_SUCCESS;
}

/* What may change of a conditional node: its handle (its kind and number
 * of bodies are fixed). */
static CUresult cond_update(struct sim_node *n, const CUgraphNodeParams *p)
{
    if (!p || p->type != n->type || p->conditional.type != n->u.cond.type || p->conditional.size != n->u.cond.size ||
        !cond_of(p->conditional.handle))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.cond.handle = p->conditional.handle;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return fg_node_set_by_kind(NULL, hNode, n->type, nodeParams);
    return cond_update(n, nodeParams);
}

/* The executable's copy of hNode, at any depth. */
static struct sim_node *exec_copy(const struct sim_exec *x, const struct sim_node *orig)
{
    for (size_t i = 0; x && i < x->n; i++) {
        struct sim_node *c = &x->nodes[i];
        if (c->orig == orig)
            return c;
        for (unsigned b = 0; c->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && c->u.cond.flat && b < c->u.cond.size; b++) {
            struct sim_node *in = exec_copy(c->u.cond.flat[b], orig);
            if (in)
                return in;
        }
    }
    return NULL;
}

/* The index of n among g's nodes (g->n when none). */
static size_t index_in(const struct sim_graph *g, const struct sim_node *n)
{
    size_t i = 0;
    while (i < g->n && g->nodes[i] != n)
        i++;
    return i;
}

/* Whether to, an executable's child graph as it was instantiated (was),
 * may take by's nodes' parameters: the same nodes, of the same kinds, with
 * the same edges, none that allocates, frees or branches; with apply, they
 * are taken. */
static int child_takes(struct sim_exec *x, const struct sim_graph *was, const struct sim_graph *by, int apply)
{
    if (was->n != by->n)
        return 0;
    for (size_t i = 0; i < was->n; i++) {
        const struct sim_node *o = was->nodes[i], *n = by->nodes[i];
        if (o->type != n->type || o->ndeps != n->ndeps || o->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
            o->type == CU_GRAPH_NODE_TYPE_MEM_FREE || o->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
            return 0;
        for (size_t d = 0; d < o->ndeps; d++) {
            CUgraphEdgeData eo = edge_of(o, d), en = edge_of(n, d);
            if (index_in(was, o->deps[d]) != index_in(by, n->deps[d]) || memcmp(&eo, &en, sizeof eo))
                return 0;
        }
        if (o->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            if (!child_takes(x, o->u.child, n->u.child, apply))
                return 0;
        } else if (apply) {
            struct sim_node *c = exec_copy(x, o);
            if (c)
                c->u = n->u;
        }
    }
    return 1;
}

/* An executable's child graph node runs childGraph's parameters from now
 * on, which must have the child's topology (its graph node stays). */
SIM_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
    SIM_GATE();
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode);
    struct sim_graph *by = as_graph(childGraph);
    if (!x || !n || !by || n->type != CU_GRAPH_NODE_TYPE_GRAPH || !child_takes(x, n->u.child, by, 0))
        return CUDA_ERROR_INVALID_VALUE;
    child_takes(x, n->u.child, by, 1);
    return CUDA_SUCCESS;
}

CUresult sim_knode_of(CUgraphExec hGraphExec, CUgraphNode hNode, struct sim_knode **k)
{
    struct sim_node *n = as_node(hNode);
    if (hGraphExec) {
        struct sim_exec *x = as_exec(hGraphExec);
        n = x && n ? exec_copy(x, n) : NULL;
    }
    if (!n || n->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return CUDA_ERROR_INVALID_VALUE;
    *k = &n->u.kernel;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode), *c = x && n ? exec_copy(x, n) : NULL;
    if (!c && n && n->type == CU_GRAPH_NODE_TYPE_GRAPH && x)
        return fg_node_set_by_kind(hGraphExec, hNode, n->type, nodeParams); /* flattened away, itself */
    if (!c || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return fg_node_set_by_kind(hGraphExec, hNode, c->type, nodeParams);
    return cond_update(c, nodeParams);
}

/* An executable's batch memory operation node makes nodeParams' operations
 * from now on; the graph's node stays as it was. */
SIM_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_BATCH_MEM_OP_NODE_PARAMS *nodeParams)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode), *c = x && n ? exec_copy(x, n) : NULL;
    if (!c || c->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)
        return CUDA_ERROR_INVALID_VALUE;
    return memop_take(c, nodeParams);
}

/* An executable's copy node copies per copyParams from now on; the
 * graph's node stays as it was. A node of the same kind only: an explicit
 * copy node's (a captured one keeps its plain copy). */
SIM_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    (void)ctx;
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode), *c = x && n ? exec_copy(x, n) : NULL;
    if (!c || c->type != CU_GRAPH_NODE_TYPE_MEMCPY || !c->u.copy.shaped)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_copy3d_check(copyParams);
    if (r)
        return r;
    c->u.copy.c = *copyParams;
    return CUDA_SUCCESS;
}

/* A captured copy becomes an explicit one. */
SIM_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_MEMCPY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_copy3d_check(nodeParams);
    if (r)
        return r;
    n->u.copy.shaped = 1;
    n->u.copy.c = *nodeParams;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    (void)ctx;
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode), *c = x && n ? exec_copy(x, n) : NULL;
    if (!c || c->type != CU_GRAPH_NODE_TYPE_MEMSET || !memset_ok(memsetParams))
        return CUDA_ERROR_INVALID_VALUE;
    memset_take(c, memsetParams);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct sim_node *n = as_node(hNode);
    if (!n || n->type != CU_GRAPH_NODE_TYPE_HOST || !nodeParams || !nodeParams->fn)
        return CUDA_ERROR_INVALID_VALUE;
    n->u.host.fn = nodeParams->fn;
    n->u.host.data = nodeParams->userData;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode), *c = x && n ? exec_copy(x, n) : NULL;
    if (!c || c->type != CU_GRAPH_NODE_TYPE_HOST || !nodeParams || !nodeParams->fn)
        return CUDA_ERROR_INVALID_VALUE;
    c->u.host.fn = nodeParams->fn;
    c->u.host.data = nodeParams->userData;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode);
    return event_set(x && n ? exec_copy(x, n) : NULL, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

SIM_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode);
    return event_set(x && n ? exec_copy(x, n) : NULL, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

/* Kernel, copy and memset nodes of an executable may be turned off. */
static struct sim_node *switchable(CUgraphExec hGraphExec, CUgraphNode hNode)
{
    struct sim_exec *x = as_exec(hGraphExec);
    struct sim_node *n = as_node(hNode), *c = x && n ? exec_copy(x, n) : NULL;
    return c && (c->type == CU_GRAPH_NODE_TYPE_KERNEL || c->type == CU_GRAPH_NODE_TYPE_MEMCPY ||
                 c->type == CU_GRAPH_NODE_TYPE_MEMSET)
               ? c
               : NULL;
}

SIM_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
    struct sim_node *c = switchable(hGraphExec, hNode);
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    c->disabled = !isEnabled;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
    struct sim_node *c = switchable(hGraphExec, hNode);
    if (!c || !isEnabled)
        return CUDA_ERROR_INVALID_VALUE;
    *isEnabled = !c->disabled;
    return CUDA_SUCCESS;
}

/* The CUDA 10 and 11 ABIs, made as the current ones. */
FG_GRAPH_V1_ENTRIES(SIM_EXPORT)
