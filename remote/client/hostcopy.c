/* Graph copy nodes with a side in the program's pageable memory. On a GPU
 * such a node (captured from cuMemcpyHtoDAsync and the like, or added by
 * cuGraphAddMemcpyNode) reads or writes the program's bytes at every
 * launch. Remotely the graph runs on the server, which cannot reach them:
 * the node is given a pinned buffer of the server's instead (a side), and
 * the client keeps, per graph and executable graph, which of the
 * program's bytes each side stands for.
 *   - A side the node reads: at each launch its bytes as they are now go
 *     with the launch, in the same request (fgrGraphLaunchHost).
 *   - A side the node writes: the executable's event is recorded after each
 *     launch; at the next syncpoint after which it is done (the mirrors'
 *     syncpoints, mirror.c), the side's bytes come back into the program's
 *     memory, the rows the copy writes and nothing between them.
 *   - Over a socket, a host node's turn brings the bytes of the sides its
 *     earlier copy nodes wrote (the executor knows the graph's edges):
 *     written into the program's memory before its function runs, and not
 *     again at the syncpoint after, so what the function changes there
 *     stays, as natively.
 * A side lives as long as a graph or executable names it: clones, child
 * graph nodes, instantiations and updates name their graph's sides. Its
 * buffer is the connection's on the server (bounded there, released with
 * the context); freed once nothing names it. */
#include "client.h"

#include <stdlib.h>
#include <string.h>

CUresult fgrGraphHostAlloc(CUdeviceptr *dptr, size_t bytes);
CUresult fgrGraphHostFree(CUdeviceptr dptr);
CUresult fgrGraphLaunchHost(CUgraphExec hGraphExec, CUstream hStream, CUevent done, const CUdeviceptr *dsts,
                            const size_t *sizes, unsigned int count, const void *src, size_t bytes);
CUresult fgrGraphHostRead(CUevent done, CUdeviceptr src, void *dst, size_t bytes);

int fgr_captures;

struct side {
    int refs;
    int d2h; /* the node writes it (else reads it) */
    /* The program's bytes: depth slices slice bytes apart, of rows rows
     * pitch bytes apart, of width bytes; n in all from host. */
    uintptr_t host;
    size_t width, pitch, rows, slice, depth, n;
    CUdeviceptr srv;
    CUgraphNode node; /* an added node's (a captured one's is not known) */
    uint64_t capture; /* the capture making it, while pending */
    CUDA_MEMCPY3D params; /* an added node's, as the program gave them */
    struct side *next;
    /* Written sides, under early_mu: all of them, and whether a host
     * node's turn brought its bytes since the last launch. */
    struct side *written_next;
    int early;
};

struct holder {
    void *h; /* a graph or an executable graph */
    struct side **sides;
    size_t n;
    CUevent done; /* an executable's: recorded after each launch */
    int due;      /* launched since its written sides last came back */
    int exec;     /* an executable graph's */
    struct holder *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct holder *holders;
static struct side *pending; /* made in captures not ended yet */
static int ndue;             /* holders due: read without the lock */
/* This thread holds the lock: the calls it makes meanwhile (a wait for a
 * launch is a syncpoint) do not take it again. */
static __thread int inside;

static void enter(void)
{
    pthread_mutex_lock(&lock);
    inside = 1;
}

static void leave(void)
{
    inside = 0;
    pthread_mutex_unlock(&lock);
}

/* The sides copy nodes write (the host-function thread takes no other lock:
 * the program's threads may hold the others while waiting for its function). */
static pthread_mutex_t early_mu = PTHREAD_MUTEX_INITIALIZER;
static struct side *written;

static void side_release(struct side *s)
{
    if (--s->refs)
        return;
    if (s->d2h) {
        pthread_mutex_lock(&early_mu);
        struct side **p = &written;
        while (*p && *p != s)
            p = &(*p)->written_next;
        if (*p)
            *p = s->written_next;
        pthread_mutex_unlock(&early_mu);
    }
    fgrGraphHostFree(s->srv);
    free(s);
}

/* The side's bytes (as its buffer holds them) into the program's memory,
 * the rows the copy writes. */
static void side_put(const struct side *d, const uint8_t *buf)
{
    for (size_t z = 0; z < d->depth; z++)
        for (size_t y = 0; y < d->rows; y++) {
            size_t at = z * d->slice + y * d->pitch;
            memcpy((void *)(d->host + at), buf + at, d->width);
        }
}

void fgr_hostcopy_early(uint64_t srv, const uint8_t *bytes, size_t n)
{
    pthread_mutex_lock(&early_mu);
    for (struct side *d = written; d; d = d->written_next)
        if (d->srv == srv && d->n == n) {
            side_put(d, bytes);
            d->early = 1;
            break;
        }
    pthread_mutex_unlock(&early_mu);
}

static struct holder *holder_find(void *h, int make)
{
    struct holder *o = holders;
    while (o && o->h != h)
        o = o->next;
    if (!o && make && (o = calloc(1, sizeof *o))) {
        o->h = h;
        o->next = holders;
        holders = o;
    }
    return o;
}

static int holder_add(struct holder *o, struct side *s)
{
    struct side **more = realloc(o->sides, (o->n + 1) * sizeof *more);
    if (!more)
        return 0;
    o->sides = more;
    o->sides[o->n++] = s;
    s->refs++;
    return 1;
}

/* Every side of from named by h too (lock held). */
static CUresult holder_share(void *h, void *from)
{
    struct holder *f = holder_find(from, 0);
    if (!f || !f->n)
        return CUDA_SUCCESS;
    struct holder *o = holder_find(h, 1);
    for (size_t i = 0; o && i < f->n; i++)
        if (!holder_add(o, f->sides[i]))
            return CUDA_ERROR_OUT_OF_MEMORY;
    return o ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static void holder_clear(struct holder *o)
{
    for (size_t i = 0; i < o->n; i++)
        side_release(o->sides[i]);
    free(o->sides);
    o->sides = NULL;
    o->n = 0;
}

static void holder_drop(void *h)
{
    struct holder **p = &holders;
    while (*p && (*p)->h != h)
        p = &(*p)->next;
    struct holder *o = *p;
    if (!o)
        return;
    *p = o->next;
    if (o->due)
        __atomic_sub_fetch(&ndue, 1, __ATOMIC_RELAXED);
    holder_clear(o);
    if (o->done)
        cuEventDestroy_v2(o->done);
    free(o);
}

/* A side of n bytes standing for the program's at host (lock not needed). */
static CUresult side_new(struct side **out, int d2h, uintptr_t host, size_t width, size_t pitch, size_t rows,
                         size_t slice, size_t depth, size_t n)
{
    struct side *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fgrGraphHostAlloc(&s->srv, n);
    if (r != CUDA_SUCCESS) {
        free(s);
        return r;
    }
    *s = (struct side){1, d2h, host, width, pitch, rows, slice, depth, n, s->srv, NULL, 0, {0}, NULL, NULL, 0};
    if (d2h) {
        pthread_mutex_lock(&early_mu);
        s->written_next = written;
        written = s;
        pthread_mutex_unlock(&early_mu);
    }
    *out = s;
    return CUDA_SUCCESS;
}

/* The program's own memory, which the server cannot reach. */
static int pageable(uint64_t p) { return p && !fgr_range_has(p) && !fgr_heap_mapped((const void *)(uintptr_t)p); }

/* ---- captured copies ---- */

static CUresult capture_id(CUstream s, int pt, uint64_t *id)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t got = 0;
    size_t ndeps = 0;
    CUresult r = pt ? cuStreamGetCaptureInfo_v2_ptsz(s, &st, &got, NULL, NULL, &ndeps)
                    : cuStreamGetCaptureInfo_v2(s, &st, &got, NULL, NULL, &ndeps);
    if (r == CUDA_ERROR_NOT_SUPPORTED) /* a server's driver of CUDA 13 on may have the third alone */
        r = pt ? cuStreamGetCaptureInfo_v3_ptsz(s, &st, &got, NULL, NULL, NULL, &ndeps)
               : cuStreamGetCaptureInfo_v3(s, &st, &got, NULL, NULL, NULL, &ndeps);
    *id = r == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? got : 0;
    return r;
}

int fgr_capture_copy(CUresult *r, CUdeviceptr dev, void *host, size_t n, CUstream s, int pt, int d2h)
{
    uint64_t id = 0;
    if (!n || !pageable((uintptr_t)host) || capture_id(s, pt, &id) != CUDA_SUCCESS || !id)
        return 0;
    struct side *side;
    if ((*r = side_new(&side, d2h, (uintptr_t)host, n, n, 1, n, 1, n)) != CUDA_SUCCESS)
        return 1;
    CUdeviceptr dst = d2h ? side->srv : dev, src = d2h ? dev : side->srv;
    *r = pt ? cuMemcpyAsync_ptsz(dst, src, n, s) : cuMemcpyAsync(dst, src, n, s);
    if (*r != CUDA_SUCCESS) {
        side_release(side);
        return 1;
    }
    side->capture = id;
    enter();
    side->next = pending;
    pending = side;
    leave();
    return 1;
}

uint64_t fgr_capture_ending(CUstream s, int pt)
{
    uint64_t id = 0;
    if (__atomic_load_n(&pending, __ATOMIC_RELAXED))
        capture_id(s, pt, &id);
    return id;
}

void fgr_capture_ended(uint64_t id, CUresult r, CUgraph *ph)
{
    if (r != CUDA_ERROR_ILLEGAL_STATE && __atomic_load_n(&fgr_captures, __ATOMIC_RELAXED) > 0)
        __atomic_sub_fetch(&fgr_captures, 1, __ATOMIC_RELAXED);
    if (!id)
        return;
    enter();
    struct holder *o = r == CUDA_SUCCESS && ph && *ph ? holder_find(*ph, 1) : NULL;
    for (struct side **p = &pending; *p;) {
        struct side *s = *p;
        if (s->capture != id) {
            p = &s->next;
            continue;
        }
        *p = s->next;
        s->capture = 0;
        s->next = NULL;
        if (o && !holder_add(o, s))
            fgr_say("cuStreamEndCapture: no memory to keep a copy node's host side: it is not carried");
        side_release(s); /* the capture's reference */
    }
    leave();
}

/* ---- explicit copy nodes ---- */

/* One side of c (src or dst): in the program's pageable memory, it is
 * given a side and pointed at its buffer in q. */
static CUresult node_side(CUDA_MEMCPY3D *q, int dst, struct side **out)
{
    CUmemorytype *t = dst ? &q->dstMemoryType : &q->srcMemoryType;
    const void **host = dst ? (const void **)&q->dstHost : &q->srcHost;
    CUdeviceptr *dev = dst ? &q->dstDevice : &q->srcDevice;
    size_t *x = dst ? &q->dstXInBytes : &q->srcXInBytes, *y = dst ? &q->dstY : &q->srcY,
           *z = dst ? &q->dstZ : &q->srcZ, pitch = dst ? q->dstPitch : q->srcPitch,
           height = dst ? q->dstHeight : q->srcHeight;
    uint64_t p = *t == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)*host : *t == CU_MEMORYTYPE_UNIFIED ? *dev : 0;
    *out = NULL;
    if (!pageable(p))
        return CUDA_SUCCESS;
    size_t rows = q->Height ? q->Height : 1, depth = q->Depth ? q->Depth : 1, w = q->WidthInBytes;
    if (rows > 1 || depth > 1) {
        if (pitch < w || (depth > 1 && height < rows))
            return CUDA_ERROR_INVALID_VALUE;
    } else {
        pitch = w;
    }
    uint64_t slice = fgr_mul(pitch, height), start, n;
    if (__builtin_add_overflow(p, *x, &start) || __builtin_add_overflow(start, fgr_mul(*y, pitch), &start) ||
        __builtin_add_overflow(start, fgr_mul(*z, slice), &start))
        return CUDA_ERROR_INVALID_VALUE;
    n = fgr_span(slice, fgr_span(pitch, w, rows), depth);
    if (!w || n == UINT64_MAX || n > FGR_MAX_BUF)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = side_new(out, dst, (uintptr_t)start, w, pitch, rows, slice, depth, n);
    if (r != CUDA_SUCCESS)
        return r;
    *t = CU_MEMORYTYPE_HOST;
    *host = (const void *)(uintptr_t)(*out)->srv;
    *dev = 0;
    *x = *y = *z = 0;
    return CUDA_SUCCESS;
}

/* Both sides of a copy node's parameters (q pointed at server buffers
 * where a side is the program's pageable memory). */
static CUresult node_sides(CUDA_MEMCPY3D *q, struct side **src, struct side **dst)
{
    CUresult r = node_side(q, 0, src);
    return r == CUDA_SUCCESS ? node_side(q, 1, dst) : r;
}

CUresult fgr_copy_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                       size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    if (!copyParams)
        return fgr_fwd_cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx);
    CUDA_MEMCPY3D q = *copyParams;
    struct side *src = NULL, *dst = NULL;
    CUresult r = node_sides(&q, &src, &dst);
    if (r == CUDA_SUCCESS)
        r = fgr_fwd_cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies, &q, ctx);
    if (r == CUDA_SUCCESS && phGraphNode) {
        if (src)
            src->node = *phGraphNode, src->params = *copyParams;
        if (dst)
            dst->node = *phGraphNode, dst->params = *copyParams;
    }
    enter();
    struct holder *o = r == CUDA_SUCCESS && (src || dst) ? holder_find(hGraph, 1) : NULL;
    if (r == CUDA_SUCCESS && (src || dst) && (!o || (src && !holder_add(o, src)) || (dst && !holder_add(o, dst))))
        r = CUDA_ERROR_OUT_OF_MEMORY; /* the node stays, reaching the buffers a graph still names */
    if (src)
        side_release(src);
    if (dst)
        side_release(dst);
    leave();
    return r;
}

static void pull_holder(struct holder *o, int wait);

/* The graph (not an executable) holding a side of hNode (lock held). */
static struct holder *graph_of_node(CUgraphNode hNode)
{
    for (struct holder *o = holders; o; o = o->next)
        for (size_t i = 0; !o->exec && i < o->n; i++)
            if (o->sides[i]->node == hNode)
                return o;
    return NULL;
}

/* hNode (of the graph, hGraphExec NULL, or of an executable's copy)
 * copies other memory from now on: its sides are those of the new
 * parameters (the bytes of a launch in flight come back first, into the
 * memory it was made to write). A graph's node is known by its sides: one
 * that had none cannot be given one. */
static CUresult node_set(const char *name, CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D *copyParams,
                         CUcontext ctx)
{
    CUDA_MEMCPY3D q = *copyParams;
    struct side *src = NULL, *dst = NULL;
    CUresult r = node_sides(&q, &src, &dst);
    enter();
    struct holder *o = hGraphExec ? holder_find(hGraphExec, src || dst) : graph_of_node(hNode);
    if (r == CUDA_SUCCESS && (src || dst) && !o)
        r = hGraphExec ? CUDA_ERROR_OUT_OF_MEMORY
                       : fgr_unsupported(-1, name, "a copy node given the program's pageable memory where it had none");
    if (r == CUDA_SUCCESS)
        r = hGraphExec ? fgr_fwd_cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &q, ctx)
                       : fgr_fwd_cuGraphMemcpyNodeSetParams(hNode, &q);
    if (r != CUDA_SUCCESS)
        o = NULL;
    if (o && hGraphExec)
        o->exec = 1;
    if (o && o->due)
        pull_holder(o, 1);
    size_t k = 0;
    for (size_t i = 0; o && i < o->n; i++)
        if (o->sides[i]->node == hNode)
            side_release(o->sides[i]);
        else
            o->sides[k++] = o->sides[i];
    if (o)
        o->n = k;
    if (src)
        src->node = hNode, src->params = *copyParams;
    if (dst)
        dst->node = hNode, dst->params = *copyParams;
    if (o && ((src && !holder_add(o, src)) || (dst && !holder_add(o, dst))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (src)
        side_release(src);
    if (dst)
        side_release(dst);
    leave();
    return r;
}

FGR_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    if (!copyParams || !hGraphExec)
        return fgr_fwd_cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, copyParams, ctx);
    return node_set("cuGraphExecMemcpyNodeSetParams", hGraphExec, hNode, copyParams, ctx);
}

FGR_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    if (!nodeParams)
        return fgr_fwd_cuGraphMemcpyNodeSetParams(hNode, nodeParams);
    return node_set("cuGraphMemcpyNodeSetParams", NULL, hNode, nodeParams, NULL);
}

/* A node with a side in the program's memory reads back as the program
 * gave it, not as the server's buffers stand in for it. */
FGR_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    CUresult r = fgr_fwd_cuGraphMemcpyNodeGetParams(hNode, nodeParams);
    if (r != CUDA_SUCCESS)
        return r;
    enter();
    struct holder *o = graph_of_node(hNode);
    for (size_t i = 0; o && i < o->n; i++)
        if (o->sides[i]->node == hNode) {
            *nodeParams = o->sides[i]->params;
            break;
        }
    leave();
    return r;
}

/* ---- graphs and executables ---- */

static CUresult instantiated(CUresult r, CUgraphExec *phGraphExec, CUgraph hGraph)
{
    if (r == CUDA_SUCCESS && phGraphExec) {
        enter();
        r = holder_share(*phGraphExec, hGraph);
        struct holder *o = holder_find(*phGraphExec, 0);
        if (o)
            o->exec = 1;
        leave();
    }
    return r;
}

FGR_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    return instantiated(fgr_fwd_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags), phGraphExec, hGraph);
}

FGR_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return instantiated(fgr_fwd_cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams), phGraphExec,
                        hGraph);
}

FGR_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return instantiated(fgr_fwd_cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, instantiateParams),
                        phGraphExec, hGraph);
}

FGR_EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUresult r = fgr_fwd_cuGraphClone(phGraphClone, originalGraph);
    if (r == CUDA_SUCCESS && phGraphClone) {
        enter();
        r = holder_share(*phGraphClone, originalGraph);
        leave();
    }
    return r;
}

/* The child's nodes are copied into the parent: they name its sides. */
FGR_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies, size_t numDependencies,
                                             CUgraph childGraph)
{
    CUresult r = fgr_fwd_cuGraphAddChildGraphNode(phGraphNode, hGraph, dependencies, numDependencies, childGraph);
    if (r == CUDA_SUCCESS) {
        enter();
        r = holder_share(hGraph, childGraph);
        leave();
    }
    return r;
}

/* An executable's child graph node takes another graph's parameters. The
 * client cannot tell which of the executable's sides the old child gave
 * it: where it has any, or the new child has, the call is refused. */
FGR_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
    enter();
    struct holder *x = holder_find(hGraphExec, 0), *c = holder_find(childGraph, 0);
    int sides = (x && x->n) || (c && c->n);
    leave();
    if (sides)
        return fgr_unsupported(-1, "cuGraphExecChildGraphNodeSetParams",
                               "an executable or child graph with copies of the program's pageable memory");
    return fgr_fwd_cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, childGraph);
}

/* An updated executable's nodes are its new graph's. */
FGR_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                         CUgraphExecUpdateResultInfo *resultInfo)
{
    CUresult r = fgr_fwd_cuGraphExecUpdate_v2(hGraphExec, hGraph, resultInfo);
    if (r != CUDA_SUCCESS)
        return r;
    enter();
    struct holder *o = holder_find(hGraphExec, 0);
    if (o) {
        struct side **old = o->sides;
        size_t n = o->n;
        o->sides = NULL;
        o->n = 0;
        r = holder_share(hGraphExec, hGraph);
        for (size_t i = 0; i < n; i++)
            side_release(old[i]);
        free(old);
    } else {
        r = holder_share(hGraphExec, hGraph);
    }
    leave();
    return r;
}

/* What a graph or executable destroyed (r) held goes with it. */
static CUresult gone(CUresult r, void *h)
{
    if (r == CUDA_SUCCESS) {
        enter();
        holder_drop(h);
        leave();
    }
    return r;
}

FGR_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    /* A launch made before still writes the program's memory. */
    enter();
    struct holder *o = holder_find(hGraphExec, 0);
    if (o && o->due)
        pull_holder(o, 1);
    leave();
    return gone(fgr_fwd_cuGraphExecDestroy(hGraphExec), hGraphExec);
}

FGR_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    return gone(fgr_fwd_cuGraphDestroy(hGraph), hGraph);
}

/* ---- launches ---- */

static CUresult launch(CUgraphExec x, CUstream s)
{
    enter();
    struct holder *o = holder_find(x, 0);
    size_t count = 0, total = 0, writes = 0;
    if (o && o->n) { /* a graph without sides (the usual one) takes no lock more */
        pthread_mutex_lock(&early_mu);
        for (size_t i = 0; i < o->n; i++)
            o->sides[i]->early = 0; /* this launch writes them anew */
        pthread_mutex_unlock(&early_mu);
    }
    for (size_t i = 0; o && i < o->n; i++) {
        if (o->sides[i]->d2h) {
            writes++;
            continue;
        }
        count++;
        total += o->sides[i]->n;
    }
    CUresult r = CUDA_SUCCESS;
    if (total > FGR_MAX_BUF)
        r = fgr_unsupported(-1, "cuGraphLaunch", "copy nodes reading over 1 GiB of pageable memory");
    CUdeviceptr *dsts = count ? calloc(count, sizeof *dsts) : NULL;
    size_t *sizes = count ? calloc(count, sizeof *sizes) : NULL;
    uint8_t *bytes = total ? malloc(total) : NULL;
    if (r == CUDA_SUCCESS && ((count && (!dsts || !sizes)) || (total && !bytes)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && writes && !o->done)
        r = cuEventCreate(&o->done, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) {
        size_t k = 0, at = 0;
        for (size_t i = 0; o && i < o->n; i++) {
            struct side *d = o->sides[i];
            if (d->d2h)
                continue;
            dsts[k] = d->srv;
            sizes[k++] = d->n;
            memcpy(bytes + at, (const void *)d->host, d->n);
            at += d->n;
        }
        r = fgrGraphLaunchHost(x, s, writes ? o->done : NULL, dsts, sizes, (unsigned)count, bytes, total);
    }
    if (r == CUDA_SUCCESS && writes && !o->due) {
        o->due = 1;
        __atomic_add_fetch(&ndue, 1, __ATOMIC_RELAXED);
    }
    leave();
    free(dsts);
    free(sizes);
    free(bytes);
    return r;
}

FGR_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) { return launch(hGraphExec, hStream); }

FGR_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return launch(hGraphExec, hStream ? hStream : CU_STREAM_PER_THREAD);
}

/* ---- bytes coming back ---- */

/* The written sides of o into the program's memory, once its last launch
 * is done (with wait: waiting for it); lock held. */
static void pull_holder(struct holder *o, int wait)
{
    if (wait && cuEventSynchronize(o->done) != CUDA_SUCCESS)
        wait = 0; /* its error was the launch's, said by that wait */
    uint8_t *buf = NULL;
    for (size_t i = 0; i < o->n; i++) {
        struct side *d = o->sides[i];
        pthread_mutex_lock(&early_mu);
        int early = d->early;
        pthread_mutex_unlock(&early_mu);
        if (!d->d2h || early)
            continue; /* a host node's turn brought them */
        uint8_t *more = realloc(buf, d->n);
        if (!more)
            break;
        buf = more;
        CUresult r = CUDA_SUCCESS;
        for (size_t off = 0; off < d->n && r == CUDA_SUCCESS; off += FGR_MIRROR_BATCH) {
            size_t k = d->n - off < FGR_MIRROR_BATCH ? d->n - off : FGR_MIRROR_BATCH;
            r = fgrGraphHostRead(o->done, d->srv + off, buf + off, k);
        }
        if (r == CUDA_ERROR_NOT_READY) {
            free(buf);
            return; /* still due */
        }
        if (r != CUDA_SUCCESS)
            continue;
        side_put(d, buf);
    }
    free(buf);
    o->due = 0;
    __atomic_sub_fetch(&ndue, 1, __ATOMIC_RELAXED);
}

static int begins_capture(int op)
{
    switch (op) {
    case FGR_OP_cuStreamBeginCapture:
    case FGR_OP_cuStreamBeginCapture_ptsz:
    case FGR_OP_cuStreamBeginCapture_v2:
    case FGR_OP_cuStreamBeginCapture_v2_ptsz:
    case FGR_OP_cuStreamBeginCaptureToGraph:
    case FGR_OP_cuStreamBeginCaptureToGraph_ptsz: return 1;
    }
    return 0;
}

void fgr_hostcopy_after(int op, CUresult r)
{
    if (r != CUDA_SUCCESS)
        return;
    if (begins_capture(op))
        __atomic_add_fetch(&fgr_captures, 1, __ATOMIC_RELAXED);
    if (inside || !fgr_op_syncs[op] || !__atomic_load_n(&ndue, __ATOMIC_RELAXED))
        return;
    enter();
    for (struct holder *o = holders; o; o = o->next)
        if (o->due)
            pull_holder(o, 0);
    leave();
}

void fgr_hostcopy_forked(void)
{
    /* The parent's buffers are its connection's: a child's graphs are its own. */
    pthread_mutex_init(&lock, NULL);
    inside = 0;
    holders = NULL;
    pending = NULL;
    ndue = fgr_captures = 0;
    pthread_mutex_init(&early_mu, NULL);
    written = NULL;
}
