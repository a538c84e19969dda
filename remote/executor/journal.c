/* The connection's state as the requests that made it (a journal), so that
 * a new executor, on another server or GPU, can make it again with every
 * name and device address the client holds unchanged (move.c).
 *
 * A request is kept when it made something the connection may name (own.c
 * tells: each handle, shadow and device range it added), or changed
 * something kept (a function's attribute, a context's limit: the table
 * below); the kept request goes when the last thing it made or changed
 * does, so the journal holds what lives, in the order it was made. Names
 * are the executor's (own.c), so a request made again must mint the same
 * ones: each kept request lists the names it minted, and the new executor
 * is given them in that order. */
#include "executor.h"

#include <stdlib.h>
#include <string.h>

struct rec {
    struct rec *prev, *next; /* in the order made */
    uint32_t live;           /* links to it: what it made or changed that lives */
    uint32_t n;              /* the frame's bytes */
    uint32_t nnames, capnames;
    uint32_t seq;            /* its place in the last state saved */
    uint64_t *names;         /* minted: index << 32 | generation */
    const char *why;         /* NULL, or why what it made cannot be made again */
    struct fgr_link *deps;   /* kept as long as it is: a captured graph's capture */
    uint8_t frame[];
};

struct fgr_link {
    struct rec *r;
    struct fgr_link *next;
};

static struct rec head = {&head, &head, 0, 0, 0, 0, 0, NULL, NULL, NULL};

/* The request being served. */
static struct {
    const uint8_t *body;
    uint32_t n;
    unsigned op;
    struct rec *r; /* made at its first link */
    int on, failed;
    /* what it is kept as instead (fgr_journal_as): the operation, its arguments */
    unsigned as_op;
    uint8_t as_args[64];
    uint32_t as_n;
    /* an image it named by hash: where, and the image */
    const uint8_t *img_at;
    uint32_t img_len;
    const void *img;
    uint64_t img_n;
    /* while a request is made again: the names it is to mint */
    const uint64_t *forced;
    uint32_t nforced, used;
    /* the streams it names (the driver's) */
    uint64_t streams[2];
    uint32_t nstreams;
} cur;

/* Requests that change what they name: what they change (kind, and its
 * parameter: the index among the by-value parameters, the request's
 * leading words; CTX: the request's context; CONN: the connection itself,
 * kept as long), a second one for when the first is NULL, and which
 * parameters say what it sets (a mask of words): a later request of the
 * same operation on the same thing with the same such words replaces the
 * earlier one (ALL: each is kept, as edges added). */
#define CTX -1
#define CONN -2
#define ALL 0x80000000u
static const struct {
    int op, kind, param, kind2, param2;
    uint32_t key;
} changes[] = {
    {FGR_OP_cuFuncSetAttribute, FGR_H_CUfunction, 0, 0, 0, 0x3},
    {FGR_OP_cuFuncSetCacheConfig, FGR_H_CUfunction, 0, 0, 0, 0x1},
    {FGR_OP_cuFuncSetSharedMemConfig, FGR_H_CUfunction, 0, 0, 0, 0x1},
    {FGR_OP_cuKernelSetAttribute, FGR_H_CUkernel, 2, 0, 0, 0xd},
    {FGR_OP_cuKernelSetCacheConfig, FGR_H_CUkernel, 0, 0, 0, 0x5},
    {FGR_OP_cuCtxSetLimit, FGR_H_CUcontext, CTX, 0, 0, 0x1},
    {FGR_OP_cuCtxSetCacheConfig, FGR_H_CUcontext, CTX, 0, 0, 0},
    {FGR_OP_cuCtxSetSharedMemConfig, FGR_H_CUcontext, CTX, 0, 0, 0},
    {FGR_OP_cuStreamSetAttribute, FGR_H_CUstream, 0, 0, 0, 0x3},
    {FGR_OP_cuStreamSetAttribute_ptsz, FGR_H_CUstream, 0, 0, 0, 0x3},
    {FGR_OP_cuMemPoolSetAttribute, FGR_H_CUmemoryPool, 0, 0, 0, 0x3},
    {FGR_OP_cuMemPoolSetAccess, FGR_H_CUmemoryPool, 0, 0, 0, ALL},
    {FGR_OP_cuDeviceSetMemPool, FGR_H_CUmemoryPool, 1, 0, 0, 0x1},
    {FGR_OP_cuMemSetMemPool, FGR_H_CUmemoryPool, 1, 0, 0, 0}, /* a pool is current for its own device only */
    {FGR_OP_cuMemSetAccess, FGR_H_MEM, 0, 0, 0, ALL},
    {FGR_OP_fgrGraphKernelNodeSetParams, FGR_H_CUgraphExec, 0, FGR_H_CUgraphNode, 1, 0x3},
    {FGR_OP_fgrGraphConditionalNodeSetParams, FGR_H_CUgraphExec, 0, FGR_H_CUgraphNode, 1, 0x3},
    {FGR_OP_cuGraphExecMemcpyNodeSetParams, FGR_H_CUgraphExec, 0, 0, 0, 0x3},
    {FGR_OP_cuGraphExecUpdate_v2, FGR_H_CUgraphExec, 0, 0, 0, 0x1},
    {FGR_OP_cuGraphExecChildGraphNodeSetParams, FGR_H_CUgraphExec, 0, 0, 0, 0x3},
    {FGR_OP_cuGraphAddDependencies, FGR_H_CUgraph, 0, 0, 0, ALL},
    {FGR_OP_cuGraphAddDependencies_v2, FGR_H_CUgraph, 0, 0, 0, ALL},
    {FGR_OP_cuDevicePrimaryCtxSetFlags_v2, 0, CONN, 0, 0, 0x1},
    {FGR_OP_cuDeviceSetGraphMemAttribute, 0, CONN, 0, 0, 0x3},
    {FGR_OP_fgrArenaReserve, 0, CONN, 0, 0, 0},
};

/* What a new executor cannot make again as it was. */
static const struct {
    int op;
    const char *why;
} unmovable[] = {
    {FGR_OP_fgrIpcOpen, "memory opened from another program (IPC)"},
    {FGR_OP_fgrIpcImportHandle, "memory imported from another program (IPC)"},
    {FGR_OP_fgrIpcImportPool, "a memory pool imported from another program (IPC)"},
    {FGR_OP_fgrIpcOpenEvent, "an event opened from another program (IPC)"},
    {FGR_OP_cuArrayCreate_v2, "a CUDA array (its contents do not move)"},
    {FGR_OP_cuArray3DCreate_v2, "a CUDA array (its contents do not move)"},
    {FGR_OP_cuMipmappedArrayCreate, "a mipmapped array (its contents do not move)"},
    {FGR_OP_fgrUserObjectCreate, "a user object (its references, and its destructor's turn, do not move)"},
    /* The client's copy of it would not follow the driver's new placement. */
    {FGR_OP_cuMemAllocManaged, "managed memory (the program's copy of it does not follow a move yet)"},
};

void fgr_journal_begin(const uint8_t *body, uint32_t n, unsigned op)
{
    cur.body = body;
    cur.n = n;
    cur.op = op;
    cur.r = NULL;
    cur.img_at = NULL;
    cur.as_n = 0;
    cur.nstreams = 0;
    cur.on = 1;
}

void fgr_journal_stream(uint64_t s)
{
    if (!cur.on)
        return;
    for (uint32_t i = 0; i < cur.nstreams; i++)
        if (cur.streams[i] == s)
            return;
    if (cur.nstreams < 2)
        cur.streams[cur.nstreams++] = s;
}

void fgr_journal_as(unsigned op, const void *args, uint32_t n)
{
    if (!cur.on || n > sizeof cur.as_args || cur.n < FGR_REQ_HDR)
        return;
    cur.as_op = op;
    memcpy(cur.as_args, args, n);
    cur.as_n = n;
}

void fgr_journal_image(const uint8_t *at, uint32_t len, const void *image, uint64_t n)
{
    if (cur.on && at >= cur.body && at + len <= cur.body + cur.n && n < UINT32_MAX - cur.n) {
        cur.img_at = at;
        cur.img_len = len;
        cur.img = image;
        cur.img_n = n;
    }
}

static struct rec *current(void)
{
    if (!cur.on || cur.failed)
        return NULL;
    if (cur.r)
        return cur.r;
    if (cur.as_n) { /* another request in its place: the header, then its arguments */
        struct rec *r = malloc(sizeof *r + FGR_REQ_HDR + cur.as_n);
        if (!r) {
            cur.failed = 1;
            return NULL;
        }
        *r = (struct rec){head.prev, &head, 0, FGR_REQ_HDR + cur.as_n, 0, 0, 0, NULL, NULL, NULL};
        memcpy(r->frame, cur.body, FGR_REQ_HDR);
        r->frame[0] = (uint8_t)cur.as_op;
        r->frame[1] = (uint8_t)(cur.as_op >> 8);
        memcpy(r->frame + FGR_REQ_HDR, cur.as_args, cur.as_n);
        head.prev->next = r;
        head.prev = r;
        fgr_generation++;
        return cur.r = r;
    }
    /* An image named by its hash is kept inline. */
    uint32_t off = cur.img_at ? (uint32_t)(cur.img_at - cur.body) : cur.n;
    uint32_t skip = cur.img_at ? cur.img_len : 0, put = cur.img_at ? 10 + (uint32_t)cur.img_n : 0;
    uint32_t n = cur.n - skip + put;
    struct rec *r = malloc(sizeof *r + n);
    if (!r) {
        cur.failed = 1; /* said when the state is saved */
        return NULL;
    }
    *r = (struct rec){head.prev, &head, 0, n, 0, 0, 0, NULL, NULL, NULL};
    memcpy(r->frame, cur.body, off);
    if (cur.img_at) {
        uint8_t *w = r->frame + off;
        w[0] = FGR_IMAGE_INLINE;
        w[1] = 1;
        for (int b = 0; b < 8; b++)
            w[2 + b] = (uint8_t)(cur.img_n >> (8 * b));
        memcpy(w + 10, cur.img, cur.img_n);
    }
    memcpy(r->frame + off + put, cur.body + off + skip, cur.n - off - skip);
    for (size_t i = 0; i < sizeof unmovable / sizeof *unmovable; i++)
        if (unmovable[i].op == (int)cur.op)
            r->why = unmovable[i].why;
    head.prev->next = r;
    head.prev = r;
    fgr_generation++;
    return cur.r = r;
}

static void unlink_rec(struct rec *r)
{
    fgr_generation++;
    r->prev->next = r->next;
    r->next->prev = r->prev;
    struct fgr_link *deps = r->deps;
    free(r->names);
    free(r);
    fgr_journal_detach(deps);
}

struct fgr_link *fgr_journal_attach(struct fgr_link *l)
{
    struct rec *r = current();
    if (!r)
        return l;
    for (struct fgr_link *k = l; k; k = k->next)
        if (k->r == r)
            return l;
    struct fgr_link *k = malloc(sizeof *k);
    if (!k) {
        cur.failed = 1;
        return l;
    }
    *k = (struct fgr_link){r, l};
    r->live++;
    return k;
}

struct fgr_link *fgr_journal_share(struct fgr_link *l, const struct fgr_link *of)
{
    for (; of; of = of->next) {
        struct fgr_link *k = l;
        while (k && k->r != of->r)
            k = k->next;
        if (k)
            continue;
        if (!(k = malloc(sizeof *k))) {
            cur.failed = 1;
            return l;
        }
        *k = (struct fgr_link){of->r, l};
        of->r->live++;
        l = k;
    }
    return l;
}

void fgr_journal_detach(struct fgr_link *l)
{
    while (l) {
        struct fgr_link *next = l->next;
        if (--l->r->live == 0)
            unlink_rec(l->r);
        free(l);
        l = next;
    }
}

/* The request that made it: the first linked, last in the list. */
static const struct rec *maker(const struct fgr_link *l)
{
    while (l && l->next)
        l = l->next;
    return l ? l->r : NULL;
}

unsigned fgr_journal_op(const struct fgr_link *l)
{
    const struct rec *r = maker(l);
    return r && r->n >= 2 ? (unsigned)r->frame[0] | (unsigned)r->frame[1] << 8 : 0;
}

uint32_t fgr_journal_seq(const struct fgr_link *l)
{
    const struct rec *r = maker(l);
    return r ? r->seq : UINT32_MAX;
}

/* While a state is made again: the state's device ranges, each with the
 * request that made it (its place among the requests) and where the
 * request made it again here, matched as the requests are made again
 * (fgr_journal_range): memory the driver placed elsewhere is translated
 * from then on, so that a later request naming it (a graph's memset node
 * on an allocation node's memory) names it here. */
static struct old {
    uint64_t base, size;
    unsigned op;
    uint32_t seq;
    int taken, moved;
    uint64_t now;
} *olds;
static size_t nolds;
static uint32_t replaying = UINT32_MAX; /* the request being made again */
static uint64_t *moved3; /* old, size, now per range placed elsewhere */
static size_t nmoved3;

void fgr_journal_range(uint64_t base, uint64_t size)
{
    if (replaying == UINT32_MAX)
        return;
    for (size_t k = 0; k < nolds; k++)
        if (!olds[k].taken && olds[k].seq == replaying && olds[k].size == size) {
            olds[k].taken = 1;
            olds[k].now = base;
            /* Elsewhere: the old address names it from now on (refused at
             * the end if other memory lies there, or if no room was left
             * to note it). */
            if (base != olds[k].base && fgr_moved_add(olds[k].base, size, base) == 0) {
                olds[k].moved = 1;
                fgr_moved_settle();
            }
            return;
        }
}

size_t fgr_journal_moved(const uint64_t **old_size_now)
{
    *old_size_now = moved3;
    return nmoved3;
}

void fgr_journal_named(uint32_t i, uint32_t gen)
{
    struct rec *r = current();
    if (!r)
        return;
    if (r->nnames == r->capnames) {
        uint32_t cap = r->capnames ? 2 * r->capnames : 2;
        uint64_t *m = realloc(r->names, cap * sizeof *m);
        if (!m) {
            cur.failed = 1;
            return;
        }
        r->names = m;
        r->capnames = cap;
    }
    r->names[r->nnames++] = (uint64_t)i << 32 | gen;
}

int fgr_journal_forced(uint32_t *i, uint32_t *gen)
{
    if (!cur.forced)
        return 0;
    if (cur.used >= cur.nforced) {
        cur.used = cur.nforced + 1; /* more names than it minted: the replay fails */
        *i = UINT32_MAX;
        return 1;
    }
    uint64_t v = cur.forced[cur.used++];
    *i = (uint32_t)(v >> 32);
    *gen = (uint32_t)v;
    return 1;
}

void fgr_journal_misplaced(void)
{
    if (cur.forced)
        cur.used = cur.nforced + 1;
}

int fgr_journal_kept_op(unsigned op)
{
    /* what answers a connection's own traffic, or moves it */
    static const int never[] = {FGR_OP_fgrNudge,    FGR_OP_fgrWaitTickets, FGR_OP_fgrStateSave, FGR_OP_fgrStateGet,
                                FGR_OP_fgrStatePut, FGR_OP_fgrStateLoad,   FGR_OP_fgrStateRead, FGR_OP_fgrStateWrite,
                                FGR_OP_fgrStateDone, FGR_OP_fgrStateShare, FGR_OP_fgrStatePull};
    for (size_t i = 0; i < sizeof never / sizeof *never; i++)
        if (never[i] == (int)op)
            return 0;
    return 1;
}

/* The request's by-value parameter k (its words follow the header). */
static uint64_t param(uint32_t k)
{
    uint64_t v = 0;
    uint32_t at = FGR_REQ_HDR + 8 * k;
    if (cur.n >= at + 8)
        memcpy(&v, cur.body + at, 8);
    return v;
}

/* Whether kept request a sets what b (the request being served) sets:
 * the same operation, the same key words. */
static int same_setting(const struct rec *a, uint32_t key)
{
    if (a->n < FGR_REQ_HDR || memcmp(a->frame, cur.body, 2))
        return 0;
    for (uint32_t k = 0; k < 31; k++) {
        uint32_t at = FGR_REQ_HDR + 8 * k;
        if ((key >> k & 1) && (a->n < at + 8 || cur.n < at + 8 || memcmp(a->frame + at, cur.body + at, 8)))
            return 0;
    }
    return 1;
}

/* The connection's own settings: kept as long as it lasts. */
static struct fgr_link *conn_links;

struct fgr_link *fgr_journal_replace(struct fgr_link *l, uint32_t key)
{
    /* The same setting made again, in the same context (a launch that sets
     * its kernel's shared memory each time): the kept one stands for it. */
    for (struct fgr_link *x = l; key != ALL && cur.on && !cur.failed && !cur.r && x; x = x->next)
        if (x->r->n == cur.n && cur.n >= FGR_REQ_HDR && same_setting(x->r, key) &&
            !memcmp(x->r->frame + 8, cur.body + 8, cur.n - 8))
            return l;
    if (key != ALL && cur.on && !cur.failed)
        for (struct fgr_link **k = &l; *k;) {
            struct fgr_link *x = *k;
            if (x->r != cur.r && same_setting(x->r, key)) { /* replaced: made no more */
                *k = x->next;
                if (--x->r->live == 0)
                    unlink_rec(x->r);
                free(x);
            } else {
                k = &x->next;
            }
        }
    return fgr_journal_attach(l);
}

/* Which entry of changes each operation has (1 + its index; 0: none),
 * so that a request served looks only itself up. */
static unsigned char change_at[FGR_NUM_OPS];

static void index_changes(void)
{
    for (size_t i = 0; i < sizeof changes / sizeof *changes; i++)
        change_at[changes[i].op] = (unsigned char)(i + 1);
}

/* Stream captures. A graph made by stream capture is made again as it was
 * made: its capture's requests, from the one that began it to the one
 * that ended it, are kept with the request that ended it (which the graph
 * keeps), and so made again in their order among the others. A request
 * belongs to a capture when a stream it names captures once it is served
 * (its work was captured, it began the capture, or it joined the
 * capture), or it ended the capture of its stream. */
static struct capture {
    uint64_t id, stream; /* the capture's, and the stream that began it */
    struct fgr_link *links;
} *caps;
static unsigned ncaps, caps_cap;

/* The stream a request names: 0 is its default stream. */
static uint64_t stream_of(uint64_t s)
{
    const char *name = cur.op < FGR_NUM_OPS ? fgr_ops[cur.op].name : NULL;
    size_t n = name ? strlen(name) : 0;
    return s || n < 5 || strcmp(name + n - 5, "_ptsz") ? s : (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD;
}

static struct capture *capture_by_id(uint64_t id)
{
    for (unsigned i = 0; i < ncaps; i++)
        if (caps[i].id == id)
            return &caps[i];
    return NULL;
}

/* A stream or event destroyed while a capture is open (CUDA's graph
 * memory nodes sample destroys a stream that joined back, and the events
 * that joined it, before the capture ends): each open capture keeps what
 * made it, and the destroy, so that a new executor makes and destroys it
 * again in its place among the capture's requests. */
void fgr_journal_gone(const struct fgr_link *made)
{
    if (!cur.on)
        return;
    for (unsigned i = 0; i < ncaps; i++)
        caps[i].links = fgr_journal_attach(fgr_journal_share(caps[i].links, made));
}

static void captured(CUresult r)
{
    if (cur.op == FGR_OP_cuStreamDestroy_v2)
        return; /* its stream is gone: not to be asked after (fgr_journal_gone) */
    int begins = cur.op == FGR_OP_cuStreamBeginCapture || cur.op == FGR_OP_cuStreamBeginCapture_ptsz ||
                 cur.op == FGR_OP_cuStreamBeginCapture_v2 || cur.op == FGR_OP_cuStreamBeginCapture_v2_ptsz ||
                 cur.op == FGR_OP_cuStreamBeginCaptureToGraph || cur.op == FGR_OP_cuStreamBeginCaptureToGraph_ptsz;
    int ends = cur.op == FGR_OP_cuStreamEndCapture || cur.op == FGR_OP_cuStreamEndCapture_ptsz;
    if ((!ncaps && !begins) || !cur.nstreams)
        return;
    uint64_t s = stream_of(cur.streams[0]);
    if (ends) {
        for (unsigned i = 0; i < ncaps; i++)
            if (caps[i].stream == s) {
                struct fgr_link *l = caps[i].links;
                caps[i] = caps[--ncaps];
                if (r == CUDA_SUCCESS && (l = fgr_journal_attach(l)) && cur.r && !cur.r->deps) {
                    /* The graph keeps the request that ended its capture,
                     * which keeps the rest: itself not among them. */
                    struct fgr_link **k = &l;
                    while (*k && (*k)->r != cur.r)
                        k = &(*k)->next;
                    if (*k) {
                        struct fgr_link *self = *k;
                        *k = self->next;
                        cur.r->live--;
                        free(self);
                    }
                    cur.r->deps = l;
                } else {
                    fgr_journal_detach(l);
                }
                return;
            }
        return;
    }
    for (uint32_t k = 0; k < cur.nstreams; k++) {
        uint64_t id = 0;
        s = stream_of(cur.streams[k]);
        if (fgr_capture_of(s, &id) == CU_STREAM_CAPTURE_STATUS_NONE)
            continue;
        struct capture *c = capture_by_id(id);
        if (!c) {
            if (!begins || r != CUDA_SUCCESS || s != stream_of(cur.streams[0]))
                continue; /* begun before this state was kept: ended as it was made */
            if (ncaps == caps_cap) {
                unsigned n = caps_cap ? 2 * caps_cap : 8;
                struct capture *more = realloc(caps, n * sizeof *caps);
                if (!more)
                    return; /* its graph then fails to be made again: the move is refused */
                caps = more;
                caps_cap = n;
            }
            c = &caps[ncaps++];
            *c = (struct capture){id, s, NULL};
        }
        c->links = fgr_journal_attach(c->links);
        return;
    }
}

void fgr_journal_end(CUresult r)
{
    static int indexed;
    if (!indexed) {
        index_changes();
        indexed = 1;
    }
    if (cur.on && r == CUDA_SUCCESS && cur.op < FGR_NUM_OPS && change_at[cur.op]) {
        size_t i = change_at[cur.op] - 1u;
        if (changes[i].param == CONN) {
            conn_links = fgr_journal_replace(conn_links, changes[i].key);
        } else {
            uint64_t w = changes[i].param == CTX ? 0 : param((uint32_t)changes[i].param);
            int kind = changes[i].kind;
            if (changes[i].kind2 && !w) {
                kind = changes[i].kind2;
                w = param((uint32_t)changes[i].param2);
            }
            uint64_t v = changes[i].param == CTX ? fgr_ctx : kind == FGR_H_MEM ? fgr_moved(w) : fgr_in(kind, w);
            fgr_journal_changed(kind, v, changes[i].key);
        }
    }
    if (cur.on)
        captured(r);
    /* A request that made nothing that lives is not kept. */
    if (cur.r && !cur.r->live)
        unlink_rec(cur.r);
    cur.on = 0;
    cur.r = NULL;
}

void fgr_journal_patch(uint32_t k, uint64_t v)
{
    if (cur.r && cur.r->n >= FGR_REQ_HDR + 8 * (k + 1))
        memcpy(cur.r->frame + FGR_REQ_HDR + 8 * k, &v, 8);
}

/* ---- the state's bytes ----
 * u32 FGR_STATE_MAGIC, u32 version, u32 key[4], u32 nranges,
 * {u64 base, u64 size} per device range (the client copies their bytes),
 * u32 nrecs, {u32 frame bytes, frame, u32 nnames, u64 names[]} per kept
 * request, in the order made, then u32 nranges again and for each range
 * the operation (u16) and the request (u32, its place above) that made it:
 * memory the driver placed is found again by them; then the names' table
 * and the names gone with their contexts (own.c: fgr_names_save). */

const char *fgr_journal_save(struct fgr_buf *w)
{
    if (cur.failed)
        return "the executor ran out of memory keeping its state";
    for (struct rec *r = head.next; r != &head; r = r->next)
        if (r->why)
            return r->why;
    if (fgr_texture_objects())
        return "a texture or surface object (the program's kernels read the driver's value for it, which another "
               "driver does not hand out again)";
    uint32_t key[4];
    fgr_names_key(key, 0);
    fgr_put_u32(w, FGR_STATE_MAGIC);
    fgr_put_u32(w, FGR_STATE_VERSION);
    for (int i = 0; i < 4; i++)
        fgr_put_u32(w, key[i]);
    fgr_mem_list(w, 0);
    uint32_t n = 0;
    for (struct rec *r = head.next; r != &head; r = r->next)
        r->seq = n++;
    fgr_put_u32(w, n);
    for (struct rec *r = head.next; r != &head; r = r->next) {
        fgr_put_u32(w, r->n);
        fgr_put_bytes(w, r->frame, r->n);
        fgr_put_u32(w, r->nnames);
        for (uint32_t i = 0; i < r->nnames; i++)
            fgr_put_u64(w, r->names[i]);
    }
    fgr_mem_list(w, 1);
    fgr_names_save(w);
    explicit_bzero(key, sizeof key);
    return w->oom ? "no memory for the state's bytes" : NULL;
}

const char *fgr_journal_load(const uint8_t *p, uint64_t n, CUresult (*replay)(const uint8_t *, uint32_t),
                             const char *(*err_name)(CUresult), char *why, size_t nwhy)
{
    struct fgr_rd rd = {p, n, 0};
    if (fgr_get_u32(&rd) != FGR_STATE_MAGIC || fgr_get_u32(&rd) != FGR_STATE_VERSION)
        return "not a state this executor reads";
    if (head.next != &head || !fgr_names_fresh())
        return "this connection has made state of its own";
    uint32_t key[4];
    for (int i = 0; i < 4; i++)
        key[i] = fgr_get_u32(&rd);
    uint32_t nranges = fgr_get_u32(&rd);
    const uint8_t *ranges = rd.bad || nranges > rd.left / 16 ? NULL : fgr_get_bytes(&rd, (uint64_t)nranges * 16);
    if (!ranges && nranges)
        return "the state's bytes are malformed";
    fgr_names_key(key, 1);
    explicit_bzero(key, sizeof key);
    /* The requests are read over first, for the ranges' makers after them. */
    uint32_t nrecs = fgr_get_u32(&rd);
    struct fgr_rd recs = rd;
    for (uint32_t k = 0; k < nrecs && !rd.bad; k++) {
        fgr_get_bytes(&rd, fgr_get_u32(&rd));
        uint32_t nn = fgr_get_u32(&rd);
        if (nn > rd.left / 8)
            rd.bad = 1;
        else
            fgr_get_bytes(&rd, (uint64_t)nn * 8);
    }
    const uint8_t *ops = fgr_get_u32(&rd) == nranges && nranges <= rd.left / 6 ? fgr_get_bytes(&rd, (uint64_t)nranges * 6) : NULL;
    if (rd.bad || (nranges && !ops))
        return "the state's bytes are malformed";
    free(olds);
    olds = calloc((size_t)nranges + 1, sizeof *olds);
    if (!olds)
        return "no memory to make the state again";
    nolds = nranges;
    for (uint32_t i = 0; i < nranges; i++) {
        for (int b = 0; b < 8; b++) {
            olds[i].base |= (uint64_t)ranges[16 * i + b] << (8 * b);
            olds[i].size |= (uint64_t)ranges[16 * i + 8 + b] << (8 * b);
        }
        olds[i].op = (unsigned)ops[6 * i] | (unsigned)ops[6 * i + 1] << 8;
        for (int b = 0; b < 4; b++)
            olds[i].seq |= (uint32_t)ops[6 * i + 2 + b] << (8 * b);
    }
    for (uint32_t k = 0; k < nrecs && !recs.bad; k++) {
        uint32_t len = fgr_get_u32(&recs);
        const uint8_t *frame = fgr_get_bytes(&recs, len);
        uint32_t nn = fgr_get_u32(&recs);
        const uint8_t *names = !recs.bad && nn <= recs.left / 8 ? fgr_get_bytes(&recs, (uint64_t)nn * 8) : NULL;
        if (!frame || len < FGR_REQ_HDR || (nn && !names))
            return "the state's bytes are malformed";
        uint64_t *forced = nn ? malloc((size_t)nn * 8) : NULL;
        if (nn && !forced)
            return "no memory to make the state again";
        for (uint32_t i = 0; i < nn; i++) {
            uint64_t v = 0;
            for (int b = 0; b < 8; b++)
                v |= (uint64_t)names[8 * i + b] << (8 * b);
            forced[i] = v;
        }
        cur.forced = forced;
        cur.nforced = nn;
        cur.used = 0;
        replaying = k;
        CUresult r = replay(frame, len);
        replaying = UINT32_MAX;
        int all = cur.used == nn;
        cur.forced = NULL;
        free(forced);
        unsigned op = (unsigned)frame[0] | (unsigned)frame[1] << 8;
        const char *name = op < FGR_NUM_OPS && fgr_ops[op].name ? fgr_ops[op].name : "an unknown operation";
        if (r != CUDA_SUCCESS) {
            snprintf(why, nwhy, "making the program's state again here failed: %s answered %s", name, err_name(r));
            return why;
        }
        if (!all) {
            snprintf(why, nwhy, "making the program's state again here failed: %s made other handles", name);
            return why;
        }
    }
    const char *bad = fgr_names_restore(&rd);
    if (bad || !fgr_rd_done(&rd))
        return bad ? bad : "the state's bytes are malformed";
    /* Every range the client will copy is where it was, or (memory the
     * driver placed: a module's variable) where the request that made it
     * placed it here, its old address naming nothing else here. */
    free(moved3);
    moved3 = malloc((size_t)nranges * 24 + 1);
    nmoved3 = 0;
    const char *no = moved3 ? NULL : "no memory to make the state again";
    for (uint32_t i = 0; i < nranges && !no; i++) {
        const struct old *o = &olds[i];
        const char *name = o->op && o->op < FGR_NUM_OPS && fgr_ops[o->op].name ? fgr_ops[o->op].name : "an unknown operation";
        if (!o->taken) {
            snprintf(why, nwhy, "device memory at 0x%llx (%llu bytes, from %s) has no counterpart here",
                     (unsigned long long)o->base, (unsigned long long)o->size, name);
            no = why;
            break;
        }
        if (o->now == o->base)
            continue; /* where it was */
        if (fgr_mem_in(o->base, o->size) || !o->moved) {
            snprintf(why, nwhy, "device memory at 0x%llx (%llu bytes, from %s) was placed elsewhere here, and its "
                     "address is taken", (unsigned long long)o->base, (unsigned long long)o->size, name);
            no = why;
            break;
        }
        moved3[3 * nmoved3] = o->base;
        moved3[3 * nmoved3 + 1] = o->size;
        moved3[3 * nmoved3 + 2] = o->now;
        nmoved3++;
    }
    free(olds);
    olds = NULL;
    nolds = 0;
    return no;
}
