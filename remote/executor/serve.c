/* Serving one request: the argument decoders the generated dispatch uses,
 * and the call itself. Nothing here trusts the frame: every count and
 * length is checked against what is left of it and what the parameters
 * imply; what does not add up makes the frame malformed. */
#include "executor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *fgr_real[FGR_NUM_OPS];
struct fgr_drv fgr_drv;

void *fgr_own(struct fgr_req *q, void *p)
{
    if (!p) {
        q->oom = 1;
        return NULL;
    }
    if (q->nowned == q->capowned) {
        int cap = q->capowned ? 2 * q->capowned : 16;
        void **n = realloc(q->owned, (size_t)cap * sizeof *n);
        if (!n) {
            free(p);
            q->oom = 1;
            return NULL;
        }
        q->owned = n;
        q->capowned = cap;
    }
    q->owned[q->nowned++] = p;
    return p;
}

/* Room for a caller's object, zeroed: small ones aligned as the most
 * demanding object the driver takes (a tensor map: 64 bytes); large ones
 * (copies' bytes) from calloc, whose fresh pages need no zeroing. */
#define SMALL_OBJECT 4096
static void *fgr_zalloc(uint64_t n)
{
    if (n > SMALL_OBJECT)
        return calloc(1, (size_t)n);
    void *p = aligned_alloc(64, SMALL_OBJECT);
    if (p)
        memset(p, 0, (size_t)n);
    return p;
}

void *fgr_get_buf(struct fgr_rd *rd, struct fgr_req *q, uint64_t bytes, int aligned)
{
    if (!fgr_get_u8(rd))
        return NULL;
    uint64_t n = fgr_get_u64(rd);
    if (n != bytes) {
        rd->bad = 1;
        return NULL;
    }
    const void *p = fgr_get_bytes(rd, n);
    if (!p)
        return NULL;
    if (!aligned)
        return (void *)p;
    void *c = fgr_own(q, n > SMALL_OBJECT ? malloc((size_t)n) : aligned_alloc(64, SMALL_OBJECT));
    if (c)
        memcpy(c, p, (size_t)n);
    return c;
}

char *fgr_get_str(struct fgr_rd *rd)
{
    size_t left = rd->left;
    int present = left > 0 && rd->p[0];
    const char *s = fgr_get_cstr(rd);
    if (present && !s)
        rd->bad = 1;
    return (char *)s;
}

void *fgr_get_image(struct fgr_rd *rd, struct fgr_req *q)
{
    static char empty[1];
    const uint8_t *at = rd->p;
    unsigned form = fgr_get_u8(rd);
    uint64_t n;
    const void *p;
    switch (form) {
    case FGR_IMAGE_ABSENT:
        return NULL;
    case FGR_IMAGE_INLINE:
    case FGR_IMAGE_KEEP:
        if (!fgr_get_u8(rd)) {
            rd->bad = 1;
            return NULL;
        }
        n = fgr_get_u64(rd);
        p = fgr_get_bytes(rd, n);
        break;
    case FGR_IMAGE_BY_HASH: {
        const uint8_t *h = fgr_get_bytes(rd, 32);
        n = fgr_get_u64(rd);
        p = h && !rd->bad ? fgr_image_kept(h, n, q) : NULL;
        if (p)
            fgr_journal_image(at, (uint32_t)(rd->p - at), p, n); /* another server may not keep it */
        break;
    }
    default:
        rd->bad = 1;
        return NULL;
    }
    if (!p || n == 0)
        return empty;
    /* The driver reads the image by its own headers: they must say
     * exactly what was sent, or it would read past it. */
    if (fgr_image_size(p, n) != n)
        return empty;
    fgr_layouts_scan(p, n);
    if (form == FGR_IMAGE_KEEP) { /* kept once the driver loaded it */
        q->keep = p;
        q->keep_n = n;
    }
    if (form == FGR_IMAGE_BY_HASH)
        return (void *)p; /* already the request's */
    void *c = fgr_own(q, malloc((size_t)n));
    if (c)
        memcpy(c, p, (size_t)n);
    return c;
}

void **fgr_get_kparams(struct fgr_rd *rd, struct fgr_req *q)
{
    if (!fgr_get_u8(rd))
        return NULL;
    uint32_t n = fgr_get_u32(rd);
    if (n > FGR_MAX_KPARAMS) {
        rd->bad = 1;
        return NULL;
    }
    void **v = fgr_own(q, calloc(n ? n : 1, sizeof *v));
    /* Each parameter 16-byte aligned, as the driver may read it in place. */
    uint8_t *store = fgr_own(q, aligned_alloc(16, FGR_MAX_KPARAM_BYTES + 16 * (size_t)n + 16));
    if (!v || !store)
        return NULL;
    size_t used = 0, total = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t sz = fgr_get_u32(rd);
        total += sz;
        if (total > FGR_MAX_KPARAM_BYTES) {
            rd->bad = 1;
            return NULL;
        }
        const void *p = fgr_get_bytes(rd, sz);
        if (!p)
            return NULL;
        memcpy(store + used, p, sz);
        fgr_moved_words(store + used, sz);
        v[i] = store + used;
        used += ((size_t)sz + 15) & ~(size_t)15;
    }
    return v;
}

void **fgr_get_extra(struct fgr_rd *rd, struct fgr_req *q)
{
    if (!fgr_get_u8(rd))
        return NULL;
    uint32_t n = fgr_get_u32(rd);
    if (n > FGR_MAX_KPARAM_BYTES) {
        rd->bad = 1;
        return NULL;
    }
    const void *p = fgr_get_bytes(rd, n);
    /* The buffer (16-byte aligned, as the driver may read it in place),
     * then the array, then the size it points to. */
    size_t room = ((size_t)n + 15) / 16 * 16;
    uint8_t *m = fgr_own(q, aligned_alloc(16, room + 48));
    if (!m || (n && !p))
        return NULL;
    uint8_t *buf = m;
    void **v = (void **)(m + room);
    size_t *size = (size_t *)(m + room + 5 * sizeof(void *));
    if (!n) {
        v[0] = CU_LAUNCH_PARAM_END;
        return v;
    }
    memcpy(buf, p, n);
    fgr_moved_words(buf, n);
    *size = n;
    v[0] = CU_LAUNCH_PARAM_BUFFER_POINTER, v[1] = buf;
    v[2] = CU_LAUNCH_PARAM_BUFFER_SIZE, v[3] = size;
    v[4] = CU_LAUNCH_PARAM_END;
    return v;
}

CUlaunchConfig *fgr_get_launchcfg(struct fgr_rd *rd, struct fgr_req *q)
{
    if (!fgr_get_u8(rd))
        return NULL;
    CUlaunchConfig *c = fgr_own(q, calloc(1, sizeof *c));
    unsigned v[7];
    for (int i = 0; i < 7; i++)
        v[i] = fgr_get_u32(rd);
    uint64_t s = fgr_get_u64(rd);
    if (!c)
        return NULL;
    c->gridDimX = v[0], c->gridDimY = v[1], c->gridDimZ = v[2];
    c->blockDimX = v[3], c->blockDimY = v[4], c->blockDimZ = v[5];
    c->sharedMemBytes = v[6];
    c->hStream = (CUstream)(uintptr_t)fgr_in(FGR_H_CUstream, s);
    /* Attributes with plain values only: one naming an event or an address
     * would need translating, and the client never sends those. */
    uint32_t n = fgr_get_u32(rd);
    if (n > FGR_MAX_LAUNCH_ATTRS) {
        rd->bad = 1;
        return NULL;
    }
    CUlaunchAttribute *a = n ? fgr_own(q, calloc(n, sizeof *a)) : NULL;
    if (n && !a)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = fgr_get_u32(rd);
        const void *v64 = fgr_get_bytes(rd, sizeof a[i].value);
        if (!v64 || !fgr_launch_attr_sendable(id)) {
            rd->bad = 1;
            return NULL;
        }
        a[i].id = (CUlaunchAttributeID)id;
        memcpy(&a[i].value, v64, sizeof a[i].value);
        if (fgr_launch_attr_has_event(id)) /* the client's name for it; checked before the call */
            a[i].value.launchCompletionEvent.event = (CUevent)(uintptr_t)fgr_in(
                FGR_H_CUevent, (uint64_t)(uintptr_t)a[i].value.launchCompletionEvent.event);
    }
    c->attrs = a;
    c->numAttrs = n;
    return c;
}

int fgr_launchcfg_events_ok(const CUlaunchConfig *c)
{
    for (unsigned i = 0; c && i < c->numAttrs; i++)
        if (fgr_launch_attr_has_event(c->attrs[i].id) &&
            !fgr_has(FGR_H_CUevent, (uint64_t)(uintptr_t)c->attrs[i].value.launchCompletionEvent.event))
            return 0;
    return 1;
}

/* Options as (option, value) pairs: n becomes their number, and an option
 * whose value would point into the executor is a bad frame. A module
 * load's log gets a buffer of its own here, of the size the client sent
 * (remote/options.h). */
void *fgr_get_opts(struct fgr_rd *rd, struct fgr_req *q, int kind, void ***values, unsigned *n)
{
    uint32_t m = fgr_get_u32(rd);
    *n = 0;
    *values = NULL;
    if (m > FGR_MAX_OPTS) {
        rd->bad = 1;
        return NULL;
    }
    unsigned *o = fgr_own(q, calloc(m ? m : 1, sizeof *o));
    void **v = fgr_own(q, calloc(m ? m : 1, sizeof *v));
    if (!o || !v)
        return NULL;
    for (uint32_t i = 0; i < m; i++) {
        o[i] = fgr_get_u32(rd);
        v[i] = (void *)(uintptr_t)fgr_get_u64(rd);
        int fate = fgr_option_fate(kind, o[i]);
        if (fate == FGR_OPT_LOG ? (fgr_is_log(o[i]) ? v[i] != NULL : (uintptr_t)v[i] > FGR_LOG_MAX)
                                : fate != FGR_OPT_SEND)
            rd->bad = 1;
    }
    for (uint32_t i = 0; i < m && !rd->bad; i++) {
        if (!fgr_is_log(o[i]) || fgr_option_fate(kind, o[i]) != FGR_OPT_LOG)
            continue;
        uint32_t j = 0;
        while (j < m && o[j] != o[i] + 1)
            j++;
        /* (one more byte, zero: the answer's text ends within it) */
        if (j == m || !(v[i] = fgr_own(q, calloc((uintptr_t)v[j] + 1, 1))))
            rd->bad = 1;
    }
    *n = m;
    *values = m ? v : NULL;
    return m ? o : NULL;
}

/* What the driver wrote into a module load's logs (remote/options.h). */
void fgr_reply_opts_logs(struct fgr_req *q, int kind, const unsigned *o, void *const *v, unsigned n)
{
    if (kind != FGR_OPTS_JIT)
        return;
    for (unsigned k = FGR_JIT_INFO_LOG_BUFFER; k <= FGR_JIT_ERROR_LOG_BUFFER; k += 2) {
        const char *text = NULL;
        uint64_t filled = 0;
        for (unsigned i = 0; i < n; i++)
            if (o[i] == k)
                text = v[i];
            else if (o[i] == k + 1)
                filled = (uintptr_t)v[i];
        fgr_put_u64(q->reply, filled);
        fgr_put_buf(q->reply, text, text ? strnlen(text, FGR_LOG_MAX) + 1 : 0);
    }
}

/* A large result (a copy's bytes) goes into one buffer kept from request to
 * request: no fresh pages to fault in each time, and pinned once it is
 * large (the driver then copies from the device straight into it instead
 * of through its own staging; results are complete before they are sent,
 * every such call waits for its stream). What it held before is this
 * connection's own earlier results. */
#define PIN_MIN (1u << 20) /* results this large are copied into pinned memory */

/* Results up to this large keep the buffer for the next request (the
 * client splits large downloads in pieces of 4 MiB by default). */
#define BIG_KEEP (16u << 20)
static void *big;
static size_t cap;
static int pinned, unpinnable;

static void *big_buffer(uint64_t bytes)
{
    if (bytes <= cap && (pinned || unpinnable || cap < PIN_MIN))
        return big;
    CUstreamCaptureMode m = fgr_relax();
    if (bytes > cap) {
        if (pinned && fgr_drv.host_unregister(big) != CUDA_SUCCESS)
            big = NULL; /* its pages stay the driver's: left, not reused */
        else if (big)
            munmap(big, cap);
        pinned = 0;
        size_t page = (size_t)sysconf(_SC_PAGESIZE), n = ((size_t)bytes + page - 1) / page * page;
        void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        big = p == MAP_FAILED ? NULL : p;
        cap = big ? n : 0;
    }
    if (big && !pinned && !unpinnable && cap >= PIN_MIN && fgr_drv.host_register && fgr_drv.host_unregister) {
        CUresult r = fgr_drv.host_register(big, cap, CU_MEMHOSTREGISTER_PORTABLE);
        pinned = r == CUDA_SUCCESS;
        unpinnable = !pinned;
        if (unpinnable)
            fgr_logf("the result buffer cannot be pinned (error %d): downloads go through the driver's staging",
                     (int)r);
    }
    fgr_unrelax(m);
    return big;
}

void *fgr_out(struct fgr_req *q, uint64_t bytes)
{
    if (bytes > FGR_MAX_BUF) {
        q->bad = 1; /* the client refuses such calls before sending them */
        return NULL;
    }
    if (bytes > SMALL_OBJECT && !q->big_used) {
        void *p = big_buffer(bytes);
        if (!p)
            return NULL;
        q->big_used = 1;
        return p;
    }
    return fgr_own(q, fgr_zalloc(bytes));
}

CUresult fgr_out_failed(struct fgr_req *q) { return q->bad ? FGR_BAD_FRAME : CUDA_ERROR_OUT_OF_MEMORY; }

void fgr_reply_out(struct fgr_req *q, const void *p, uint64_t bytes, int inout, CUresult r)
{
    if (!p && (inout || r == CUDA_SUCCESS))
        return; /* not asked for */
    if (!inout && r != CUDA_SUCCESS) { /* a refused call's result had no memory made */
        fgr_put_u8(q->reply, 0);
        return;
    }
    fgr_put_buf(q->reply, p, bytes);
}

CUresult fgr_drain(CUstream s, int per_thread)
{
    CUresult (*sync)(CUstream) = per_thread ? fgr_drv.sync_pt : fgr_drv.sync;
    if (fgr_capturing(s, per_thread))
        return CUDA_SUCCESS;
    CUstreamCaptureMode m = fgr_relax();
    CUresult r = sync ? sync(s) : CUDA_ERROR_NOT_SUPPORTED;
    fgr_unrelax(m);
    return r;
}

/* What the last request owns: kept until its answer has been written, as
 * large results are written from where the driver put them (the answer's
 * tail, struct fgr_buf), not copied into the answer. */
static struct fgr_req last;

static void release_last(void)
{
    for (int i = 0; i < last.nowned; i++)
        free(last.owned[i]);
    free(last.owned);
    last = (struct fgr_req){0};
}

void fgr_trim(struct fgr_buf *w)
{
    release_last();
    if (w->cap > BIG_KEEP) {
        free(w->p);
        *w = (struct fgr_buf){0};
    }
    if (cap > BIG_KEEP) {
        CUstreamCaptureMode m = fgr_relax();
        if (!pinned || fgr_drv.host_unregister(big) == CUDA_SUCCESS)
            munmap(big, cap); /* else its pages stay the driver's: left, not reused */
        fgr_unrelax(m);
        big = NULL;
        cap = 0;
        pinned = 0;
    }
}

const char *fgr_serve(unsigned op, struct fgr_rd *rd, struct fgr_buf *w, CUresult before)
{
    release_last();
    fgr_in_reset();
    if (op == FGR_OP_HELLO || op >= FGR_NUM_OPS)
        return "an unknown operation";
    struct fgr_req q = {.reply = w};
    w->len = 0;
    w->oom = 0;
    w->by_ref = 1;
    w->tail = NULL;
    w->tail_len = 0;
    fgr_put_u32(w, 0);
    fgr_put_u32(w, 0);
    CUresult r = before;
    if (!fgr_real[op])
        r = CUDA_ERROR_NOT_SUPPORTED; /* this driver lacks the entry point */
    else if (r == CUDA_SUCCESS)
        r = fgr_ops[op].fn(rd, &q);
    if (r == CUDA_SUCCESS && q.keep && !q.bad && !rd->bad)
        fgr_image_keep(q.keep, q.keep_n);
    last = q;
    if (r == FGR_BAD_FRAME || q.bad || rd->bad)
        return "a malformed request";
    if (q.oom || w->oom) {
        /* Not the client's fault: it gets the error, without results. */
        w->len = 4;
        w->oom = 0;
        w->tail = NULL;
        w->tail_len = 0;
        fgr_put_u32(w, 0);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (w->oom)
        return "no memory for an answer";
    for (int i = 0; i < 4; i++)
        w->p[4 + i] = (uint8_t)((uint32_t)r >> (8 * i));
    fgr_finish_frame(w);
    return NULL;
}

CUresult fgr_reply_result(const struct fgr_buf *w)
{
    return (CUresult)((uint32_t)w->p[4] | (uint32_t)w->p[5] << 8 | (uint32_t)w->p[6] << 16 | (uint32_t)w->p[7] << 24);
}

CUresult fgr_replay(const uint8_t *frame, uint32_t n, CUresult (*make_current)(CUcontext))
{
    static struct fgr_buf w;
    struct fgr_rd rd = {frame, n, 0};
    unsigned op = fgr_get_u16(&rd);
    fgr_get_u16(&rd);
    fgr_get_u32(&rd);
    CUcontext ctx = (CUcontext)(uintptr_t)fgr_in(FGR_H_CUcontext, fgr_get_u64(&rd));
    if (rd.bad || op == FGR_OP_HELLO || op >= FGR_NUM_OPS || !fgr_ops[op].fn || !fgr_journal_kept_op(op))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = !fgr_has(FGR_H_CUcontext, (uint64_t)(uintptr_t)ctx) ? CUDA_ERROR_INVALID_CONTEXT
                 : fgr_real[op]                                      ? make_current(ctx)
                                                                     : CUDA_SUCCESS;
    fgr_ctx = (uint64_t)(uintptr_t)ctx;
    fgr_current_op = op;
    fgr_thread = 0;
    fgr_may_pend = fgr_wait_only = fgr_wait_then_make = 0;
    fgr_resume = fgr_parked = -1;
    fgr_journal_begin(frame, n, op);
    const char *bad = fgr_serve(op, &rd, &w, r);
    r = bad ? CUDA_ERROR_INVALID_VALUE : fgr_reply_result(&w);
    fgr_journal_end(r);
    return r;
}
