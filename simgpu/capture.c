/* Stream capture, with the rules the driver enforces.
 *
 * A capture sequence starts on an origin stream (cuStreamBeginCapture*, the
 * legacy entry point in GLOBAL mode) and may spread to other streams that
 * wait on an event recorded in it; it ends on the origin, in the thread that
 * began it unless its mode is RELAXED, and every other stream of it must
 * have been waited for by then (otherwise CUDA_ERROR_STREAM_CAPTURE_UNJOINED).
 * Work for its streams becomes graph nodes instead of running.
 *
 * Each thread has an interaction mode (cuThreadExchangeStreamCaptureMode,
 * GLOBAL by default). A thread is prohibited from potentially unsafe calls
 * (synchronous allocation, release, copies and sets, context, stream and
 * event synchronization or query, ...) when
 *     GLOBAL:       it began a non-RELAXED sequence still open, or any thread
 *                   began a GLOBAL one;
 *     THREAD_LOCAL: it began a non-RELAXED sequence still open;
 *     RELAXED:      never.
 * A prohibited call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
 * invalidates the sequences that prohibit it. Some calls conflict with
 * capture in any mode and also fail and invalidate: synchronizing or
 * querying a capturing stream, or a context one of whose streams captures
 * (UNSUPPORTED), using an event last recorded in a sequence
 * (CUDA_ERROR_CAPTURED_EVENT), and any use of the legacy stream while a
 * stream of its context that synchronizes with it captures
 * (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; cuStreamIsCapturing only reports it).
 * An invalidated sequence refuses further work with
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and ending it returns that error and
 * a NULL graph. Dependencies given with edge data (a capture into a
 * graph, its dependencies updated) are refused: CUDA_ERROR_NOT_SUPPORTED.
 *
 * Everything here is under cap_lock; the fast paths read only ncaps, a
 * stream's cap and a context's blocking_captures. */
#include "sim.h"
#include "flexgv/graph_nodes.h"

#include <stdlib.h>
#include <string.h>

struct sim_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    pthread_t owner;
    int invalidated;
    struct sim_stream *origin;
    struct sim_graph *graph;
    int to_graph; /* the program's graph (cuStreamBeginCaptureToGraph): not destroyed here */
    struct sim_stream **streams; /* origin first */
    int nstreams, capstreams;
    struct sim_capture *next;
};

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_capture *caps;
static int ncaps;
static uint64_t last_id;
static __thread CUstreamCaptureMode thread_mode; /* 0: GLOBAL */

/* Streams that synchronize with their context's legacy stream. */
static int blocking(const struct sim_stream *s) { return !(s->flags & CU_STREAM_NON_BLOCKING); }

static int join(struct sim_capture *c, struct sim_stream *s)
{
    if (c->nstreams == c->capstreams) {
        int cap = c->capstreams ? c->capstreams * 2 : 4;
        struct sim_stream **n = realloc(c->streams, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        c->streams = n;
        c->capstreams = cap;
    }
    c->streams[c->nstreams++] = s;
    s->ndeps = 0;
    s->ops = s->joined_ops = 0;
    __atomic_store_n(&s->cap, c, __ATOMIC_RELEASE);
    if (blocking(s))
        __atomic_fetch_add(&s->ctx->blocking_captures, 1, __ATOMIC_ACQ_REL);
    return 0;
}

static void leave(struct sim_stream *s)
{
    if (blocking(s))
        __atomic_fetch_sub(&s->ctx->blocking_captures, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&s->cap, NULL, __ATOMIC_RELEASE);
    s->ndeps = 0;
}

/* Takes every stream out of c and forgets c; returns its graph. */
static struct sim_graph *terminate(struct sim_capture *c)
{
    for (int i = 0; i < c->nstreams; i++)
        leave(c->streams[i]);
    for (struct sim_capture **pp = &caps; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    __atomic_fetch_sub(&ncaps, 1, __ATOMIC_ACQ_REL);
    struct sim_graph *g = c->graph;
    free(c->streams);
    free(c);
    return g;
}

static int prohibits(const struct sim_capture *c)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && pthread_equal(c->owner, pthread_self()))
        return 1;
    return thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
}

/* Sequences with a stream of ctx, optionally only those blocking its legacy stream. */
static int in_ctx(const struct sim_capture *c, const struct sim_ctx *ctx, int only_blocking)
{
    for (int i = 0; i < c->nstreams; i++)
        if (c->streams[i]->ctx == ctx && (!only_blocking || blocking(c->streams[i])))
            return 1;
    return 0;
}

static int is_legacy(const struct sim_stream *s) { return s == s->ctx->legacy; }

/* The legacy stream while a blocking stream of its context captures:
 * invalidates those sequences (cap_lock held). */
static int implicit_conflict(struct sim_stream *s)
{
    if (!is_legacy(s) || !__atomic_load_n(&s->ctx->blocking_captures, __ATOMIC_ACQUIRE))
        return 0;
    for (struct sim_capture *c = caps; c; c = c->next)
        if (in_ctx(c, s->ctx, 1))
            c->invalidated = 1;
    return 1;
}

int sim_capture_route(struct sim_stream *s, struct sim_node *n, CUresult *r)
{
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = s->cap;
    if (implicit_conflict(s))
        *r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (!c) {
        pthread_mutex_unlock(&cap_lock);
        return 0;
    } else if (c->invalidated)
        *r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if ((*r = sim_graph_append(c->graph, n, s->deps, (size_t)s->ndeps)) == CUDA_SUCCESS) {
        s->deps[0] = n;
        s->ndeps = 1;
        s->ops++;
        n = NULL;
    }
    pthread_mutex_unlock(&cap_lock);
    if (n)
        sim_node_destroy(n);
    return 1;
}

/* Work for stream s that cannot be captured (launching or uploading an
 * executable graph). */
CUresult sim_capture_refuse(struct sim_stream *s)
{
    if (!sim_stream_captured(s))
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    if (implicit_conflict(s)) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (s->cap) {
        r = s->cap->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        s->cap->invalidated = 1;
    }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_check(struct sim_stream *s)
{
    if (!__atomic_load_n(&ncaps, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    if (s && s->cap) {
        s->cap->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s && implicit_conflict(s) && !r)
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    for (struct sim_capture *c = caps; c; c = c->next)
        if (prohibits(c)) {
            c->invalidated = 1;
            if (!r)
                r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

/* Synchronizing a context waits for its capturing streams too: a conflict. */
CUresult sim_capture_check_ctx(struct sim_ctx *ctx)
{
    if (!__atomic_load_n(&ncaps, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    for (struct sim_capture *c = caps; c; c = c->next)
        if (in_ctx(c, ctx, 0) || prohibits(c)) {
            c->invalidated = 1;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

static struct sim_capture *find(uint64_t id)
{
    struct sim_capture *c = caps;
    while (c && c->id != id)
        c = c->next;
    return c;
}

static int member(const struct sim_capture *c, const struct sim_stream *s)
{
    for (int i = 0; i < c->nstreams; i++)
        if (c->streams[i] == s)
            return 1;
    return 0;
}

/* Recording in a capturing stream marks the event with the point it
 * captured (a fork or join point for streams that wait on it). */
CUresult sim_capture_record(struct sim_event *e, struct sim_stream *s, int *captured)
{
    *captured = 0;
    if (!sim_stream_captured(s)) {
        e->cap_id = 0;
        return CUDA_SUCCESS;
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = s->cap;
    if (implicit_conflict(s))
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (c && c->invalidated)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (c) {
        e->cap_id = c->id;
        e->cap_stream = s;
        e->cap_ops = s->ops;
        memcpy(e->deps, s->deps, sizeof e->deps);
        e->ndeps = s->ndeps;
    } else {
        e->cap_id = 0;
    }
    *captured = r != CUDA_SUCCESS || c;
    pthread_mutex_unlock(&cap_lock);
    return r;
}

/* Waiting on an event of a sequence: a stream outside it joins it (a fork);
 * a stream in it takes the event's dependencies (a join). A capturing
 * stream may not wait on work recorded outside its sequence. */
CUresult sim_capture_wait(struct sim_stream *s, struct sim_event *e, int *captured)
{
    *captured = 0;
    if (!e->cap_id && !sim_stream_captured(s))
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *ec = e->cap_id ? find(e->cap_id) : NULL, *c = s->cap;
    int implicit = implicit_conflict(s);
    if (!implicit && !ec && (!c || !e->recorded)) {
        pthread_mutex_unlock(&cap_lock);
        return CUDA_SUCCESS; /* nothing recorded, or in a sequence that has ended */
    }
    *captured = 1;
    if (implicit) {
        if (ec)
            ec->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if ((c && c->invalidated) || (ec && ec->invalidated)) {
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (!ec) {
        c->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    } else if (c && c != ec) {
        c->invalidated = ec->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    } else {
        if (!c && join(ec, s) != 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            for (int i = 0; i < e->ndeps; i++) {
                int dup = 0;
                for (int j = 0; j < s->ndeps; j++)
                    dup |= s->deps[j] == e->deps[i];
                if (!dup && s->ndeps < SIM_CAP_DEPS)
                    s->deps[s->ndeps++] = e->deps[i];
            }
            struct sim_stream *from = e->cap_stream;
            if (from != s && member(ec, from) && e->cap_ops == from->ops)
                from->joined_ops = from->ops;
        }
    }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_event_use(struct sim_event *e)
{
    if (!__atomic_load_n(&ncaps, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *ec = e->cap_id ? find(e->cap_id) : NULL;
    if (ec) {
        ec->invalidated = 1;
        r = CUDA_ERROR_CAPTURED_EVENT;
    }
    pthread_mutex_unlock(&cap_lock);
    CUresult u = sim_capture_check(NULL);
    return r ? r : u;
}

/* A destroyed stream leaves its sequence (CUDA's graph memory nodes sample
 * destroys one that joined back); one whose work has not joined back
 * invalidates it, as that work can join no more. Destroying the origin
 * ends it. */
void sim_capture_stream_gone(struct sim_stream *s)
{
    if (!__atomic_load_n(&s->cap, __ATOMIC_ACQUIRE))
        return;
    struct sim_graph *g = NULL;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = s->cap;
    if (c && c->origin == s) {
        int own = !c->to_graph;
        g = terminate(c);
        if (!own)
            g = NULL;
    } else if (c) {
        if (s->ops && s->joined_ops != s->ops)
            c->invalidated = 1;
        for (int i = 0; i < c->nstreams; i++)
            if (c->streams[i] == s)
                c->streams[i] = c->streams[--c->nstreams];
        leave(s);
    }
    pthread_mutex_unlock(&cap_lock);
    if (g)
        sim_graph_destroy(g);
}

/* ---- entry points ---- */

/* Whether each of n nodes is one of g's (and fits a stream's dependencies). */
static int deps_of(const struct sim_graph *g, const CUgraphNode *deps, size_t n)
{
    if (n > SIM_CAP_DEPS || (n && !deps))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!sim_node_in((struct sim_node *)deps[i], g))
            return 0;
    return 1;
}

/* into: the program's graph to capture into, after deps; NULL: a new one. */
static CUresult begin_capture_into(CUstream h, CUstreamCaptureMode mode, int pt, struct sim_graph *into,
                                   const CUgraphNode *deps, size_t ndeps)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_legacy(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (into && !deps_of(into, deps, ndeps))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_capture *c = calloc(1, sizeof *c);
    struct sim_graph *g = into ? into : sim_graph_new();
    pthread_mutex_lock(&cap_lock);
    if (s->cap)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (!c || !g || join(c, s) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
        pthread_mutex_unlock(&cap_lock);
        if (c)
            free(c->streams);
        free(c);
        if (g && !into)
            sim_graph_destroy(g);
        return r;
    }
    c->to_graph = into != NULL;
    for (size_t i = 0; i < ndeps; i++)
        s->deps[i] = (struct sim_node *)deps[i];
    s->ndeps = (int)ndeps;
    c->id = ++last_id;
    c->mode = mode;
    c->owner = pthread_self();
    c->origin = s;
    c->graph = g;
    c->next = caps;
    caps = c;
    __atomic_fetch_add(&ncaps, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&cap_lock);
    return CUDA_SUCCESS;
}
static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, int pt)
{
    return begin_capture_into(h, mode, pt, NULL, NULL, 0);
}

/* A capture into the program's graph, after its nodes deps (edge data is
 * not modelled); ending it gives that graph back. */
static CUresult begin_to_graph(CUstream h, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                               CUstreamCaptureMode mode, int pt)
{
    struct sim_graph *into = sim_graph_of(g);
    return into ? begin_capture_into(h, mode, pt, into, deps, ndeps) : CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode *deps,
                                                const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode)
{
    return fg_plain_edges(edges, ndeps) ? begin_to_graph(h, g, deps, ndeps, mode, 0) : CUDA_ERROR_NOT_SUPPORTED;
}
SIM_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode *deps,
                                                     const CUgraphEdgeData *edges, size_t ndeps,
                                                     CUstreamCaptureMode mode)
{
    return fg_plain_edges(edges, ndeps) ? begin_to_graph(h, g, deps, ndeps, mode, 1) : CUDA_ERROR_NOT_SUPPORTED;
}

/* What a capturing stream's next node follows: set to deps, or deps added
 * (nodes of the capture's graph). */
static CUresult update_deps(CUstream h, const CUgraphNode *deps, size_t n, unsigned flags, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = s->cap;
    size_t base = flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES || !c ? 0 : (size_t)s->ndeps;
    if (!c)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (c->invalidated)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (base + n > SIM_CAP_DEPS || !deps_of(c->graph, deps, n))
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
        s->deps[base + i] = (struct sim_node *)deps[i];
    if (r == CUDA_SUCCESS)
        s->ndeps = (int)(base + n);
    pthread_mutex_unlock(&cap_lock);
    return r;
}
SIM_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream h, CUgraphNode *deps, size_t n, unsigned int flags)
{
    return update_deps(h, deps, n, flags, 0);
}
SIM_EXPORT CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream h, CUgraphNode *deps, size_t n,
                                                           unsigned int flags)
{
    return update_deps(h, deps, n, flags, 1);
}
SIM_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream h, CUgraphNode *deps,
                                                         const CUgraphEdgeData *edges, size_t n, unsigned int flags)
{
    return fg_plain_edges(edges, n) ? update_deps(h, deps, n, flags, 0) : CUDA_ERROR_NOT_SUPPORTED;
}
SIM_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream h, CUgraphNode *deps,
                                                              const CUgraphEdgeData *edges, size_t n,
                                                              unsigned int flags)
{
    return fg_plain_edges(edges, n) ? update_deps(h, deps, n, flags, 1) : CUDA_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT CUresult cuStreamBeginCapture(CUstream h) { return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, 0); }
SIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream h)
{
    return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, 1);
}
SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, 0); }
SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode)
{
    return begin_capture(h, mode, 1);
}

static CUresult end_capture(CUstream h, CUgraph *out, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph *g = NULL;
    int own = 1;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = s->cap;
    if (!c) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (c->origin != s) {
        c->invalidated = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->owner, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        int unjoined = 0;
        for (int i = 1; i < c->nstreams; i++)
            unjoined |= c->streams[i]->ops != 0 && c->streams[i]->joined_ops != c->streams[i]->ops;
        r = c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            : unjoined     ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED
                           : CUDA_SUCCESS;
        own = !c->to_graph;
        g = terminate(c);
    }
    pthread_mutex_unlock(&cap_lock);
    if (r == CUDA_SUCCESS) {
        *out = (CUgraph)g;
        return r;
    }
    if (g && own)
        sim_graph_destroy(g);
    if (r != CUDA_ERROR_ILLEGAL_STATE && r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
        *out = NULL;
    return r;
}
SIM_EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *g) { return end_capture(h, g, 0); }
SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *g) { return end_capture(h, g, 1); }

/* A stream's capture: its status, the sequence's id and graph (which the
 * program may add nodes to), and what the stream's next node depends on
 * (the stream's own array, valid until its next captured work); edge data
 * is never kept, so none is given. Always legal; on the legacy stream it
 * reports an implicit dependency without invalidating anything. */
static CUresult capture_info(CUstream h, int pt, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    if (is_legacy(s) && __atomic_load_n(&s->ctx->blocking_captures, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    pthread_mutex_lock(&cap_lock);
    struct sim_capture *c = s->cap;
    *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
              : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                               : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    int active = *status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id && active)
        *id = c->id;
    if (graph)
        *graph = active ? (CUgraph)c->graph : NULL;
    if (deps)
        *deps = active ? (const CUgraphNode *)s->deps : NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = active ? (size_t)s->ndeps : 0;
    pthread_mutex_unlock(&cap_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
    return capture_info(h, 0, status, NULL, NULL, NULL, NULL, NULL);
}
SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *status)
{
    return capture_info(h, 1, status, NULL, NULL, NULL, NULL, NULL);
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                                              CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(h, 0, status, id, graph, deps, NULL, ndeps);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                                                   CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    return capture_info(h, 1, status, id, graph, deps, NULL, ndeps);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                                              CUgraph *graph, const CUgraphNode **deps,
                                              const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(h, 0, status, id, graph, deps, edges, ndeps);
}
SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                                                   CUgraph *graph, const CUgraphNode **deps,
                                                   const CUgraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(h, 1, status, id, graph, deps, edges, ndeps);
}

SIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
