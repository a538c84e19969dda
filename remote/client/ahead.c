/* A program's state made again on another server in two steps (for
 * flexgv migrate, migrate.c, and for checkpoints, failover.c). Making the
 * state's structure again (modules, allocations, graphs) is most of a
 * move's time; it is therefore made on a new executor while the program
 * runs (the loader thread, over that executor's own connection), from the
 * state saved at a first short pause. At a second pause, once the loader
 * ended, the device memory is copied, if the structure is as it was
 * (fgrStateMark's generation); where it changed meanwhile the caller makes
 * the state again in one step. A server lost meanwhile: the loader's
 * executor is let go by whichever of the loader and the program ends
 * last. */
#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned ms_since(uint64_t t0) { return (unsigned)((now_ns() - t0) / 1000000u); }

/* Why the server could not mark the program's state (fgrStateMark). */
static const char *unmarked(CUresult r)
{
    return r == CUDA_ERROR_NOT_READY ? FGR_DRAIN_HOSTFN
           : r == CUDA_ERROR_TIMEOUT ? FGR_DRAIN_SLOW
                                     : "this server cannot mark the program's state";
}

/* The result of the last answer read. */
static __thread uint32_t answered;

/* A request on connection c: 0, or -1 with why written. */
static int send_on(struct fgr_conn_saved *c, const uint8_t *f, size_t fn, char *why, size_t nwhy)
{
    if (c->tls ? fgr_tls_write_all(c->tls, f, fn) : fgr_write_all(c->fd, f, fn)) {
        snprintf(why, nwhy, "the server went away: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* The next answer on connection c (its result, then what follows in *a,
 * *n, at most max bytes): 0, or -1 with why written. */
static int answer_on(struct fgr_conn_saved *c, uint8_t **a, uint32_t *n, uint32_t max, char *why, size_t nwhy)
{
    void *tls = c->tls;
    int fd = c->fd;
    answered = CUDA_ERROR_UNKNOWN;
    for (;;) {
        uint8_t h[8];
        if (tls ? fgr_tls_read_all(tls, h, 8) : fgr_read_all(fd, h, 8)) {
            snprintf(why, nwhy, "the server did not answer");
            return -1;
        }
        uint32_t len = (uint32_t)fgr_word(h, 4), first = (uint32_t)fgr_word(h + 4, 4);
        answered = first;
        uint8_t *b = len >= 4 && len - 4 <= max ? malloc(len - 4 + 1) : NULL;
        if (!b || (len > 4 && (tls ? fgr_tls_read_all(tls, b, len - 4) : fgr_read_all(fd, b, len - 4)))) {
            free(b);
            snprintf(why, nwhy, "the server answered malformed");
            return -1;
        }
        if (first == FGR_OUTPUT) { /* nothing runs there yet: no output to print */
            free(b);
            continue;
        }
        if (first != CUDA_SUCCESS) {
            free(b);
            snprintf(why, nwhy, "the server answered error %u", first);
            return -1;
        }
        *a = b;
        *n = len - 4;
        return 0;
    }
}

static int call_on(struct fgr_conn_saved *c, const uint8_t *f, size_t fn, uint8_t **a, uint32_t *n, uint32_t max,
                   char *why, size_t nwhy)
{
    return send_on(c, f, fn, why, nwhy) ? -1 : answer_on(c, a, n, max, why, nwhy);
}

static int loader_call(struct fgr_ahead *ahead, const uint8_t *f, size_t fn, uint8_t **a, uint32_t *n)
{
    return call_on(&ahead->conn, f, fn, a, n, 1u << 20, ahead->why, sizeof ahead->why);
}

/* A request's header, for op. */
static void begin(struct fgr_buf *w, unsigned op)
{
    w->len = 0;
    fgr_put_u32(w, 0);
    fgr_put_u16(w, (uint16_t)op);
    fgr_put_u16(w, 0);
    fgr_put_u32(w, 0);
    fgr_put_u64(w, 0);
}

/* The next piece, after the one at *i, *off of *k bytes (k 0 before the
 * first), of a range read on the old server: whether there is one. */
static int next_piece(const struct fgr_ahead *a, const uint8_t *ranges, uint32_t nranges, uint32_t *i, uint64_t *off,
                      uint64_t *k)
{
    *off += *k;
    for (; *i < nranges; (*i)++, *off = 0) {
        uint64_t size = fgr_word(ranges + 16 * *i + 8, 8);
        if (*off < size && a->from[*i] == FGR_AHEAD_READ) {
            *k = size - *off < FGR_STATE_PIECE ? size - *off : FGR_STATE_PIECE;
            return 1;
        }
    }
    return 0;
}

/* Reads a piece on the old server (the helper connection, by its range's
 * token): the request. */
static int ask_piece(struct fgr_ahead *a, struct fgr_buf *w, uint32_t i, uint64_t off, uint64_t k, char *why,
                     size_t nwhy)
{
    begin(w, FGR_OP_fgrStateShareRead);
    fgr_put_u64(w, off);
    fgr_put_u64(w, k);
    fgr_put_buf(w, a->tokens + 64 * i, 64);
    fgr_put_u8(w, 1);
    fgr_finish_frame(w);
    return w->oom ? -1 : send_on(&a->helper, w->p, w->len, why, nwhy);
}

/* Each range's bytes copied ahead, while the program runs: by the new
 * executor device to device from the one that holds the checkpoint before,
 * or read on the old server and written to the new executor, the next
 * piece asked for while one is written. Whatever fails, the second pause
 * copies it all. */
static void copy_ahead(struct fgr_ahead *a, struct fgr_buf *w)
{
    char why[256];
    uint32_t nranges = 0, i = 0;
    const uint8_t *ranges = fgr_state_ranges(a->state, a->n, &nranges, why, sizeof why);
    uint64_t copied = 0, pulled = 0, undone = 0, off = 0, k = 0;
    int ok = ranges != NULL;
    for (uint32_t r = 0; ok && r < nranges; r++) {
        if (a->from[r] != FGR_AHEAD_PULL && a->from[r] != FGR_AHEAD_UNDONE)
            continue;
        uint64_t size = fgr_word(ranges + 16 * r + 8, 8);
        uint8_t *ans = NULL;
        uint32_t n = 0;
        begin(w, FGR_OP_fgrStatePull);
        fgr_put_u64(w, fgr_word(ranges + 16 * r, 8));
        fgr_put_u64(w, size);
        fgr_put_buf(w, a->tokens + 64 * r, 64);
        fgr_finish_frame(w);
        ok = !w->oom && call_on(&a->conn, w->p, w->len, &ans, &n, 64, why, sizeof why) == 0;
        free(ans);
        pulled += ok ? size : 0;
        undone += ok && a->from[r] == FGR_AHEAD_UNDONE ? size : 0;
    }
    int more = ok && next_piece(a, ranges, nranges, &i, &off, &k);
    ok = ok && (!more || ask_piece(a, w, i, off, k, why, sizeof why) == 0);
    while (ok && more) {
        uint8_t *ans = NULL, *wa = NULL;
        uint32_t n = 0, wn = 0;
        uint64_t at = fgr_word(ranges + 16 * i, 8) + off, got = k;
        /* Answer: u8 1, u64 k, the bytes. */
        ok = answer_on(&a->helper, &ans, &n, FGR_STATE_PIECE + 64, why, sizeof why) == 0 && n == 9 + got &&
             fgr_word(ans + 1, 8) == got;
        more = ok && next_piece(a, ranges, nranges, &i, &off, &k);
        if (ok && more)
            ok = ask_piece(a, w, i, off, k, why, sizeof why) == 0;
        if (ok) {
            begin(w, FGR_OP_fgrStateWrite);
            fgr_put_u64(w, at);
            fgr_put_u64(w, got);
            fgr_put_buf(w, ans + 9, got);
            fgr_finish_frame(w);
            ok = !w->oom && call_on(&a->conn, w->p, w->len, &wa, &wn, 64, why, sizeof why) == 0;
        }
        free(wa);
        free(ans);
        copied += ok ? got : 0;
    }
    a->m.ahead = ok ? copied + pulled : 0;
    a->m.from_before = ok ? pulled - undone : 0;
    a->m.from_undone = ok ? undone : 0;
    a->copied = ok;
}

static void *loader(void *arg)
{
    struct fgr_ahead *ahead = arg;
    struct fgr_buf w = {0};
    uint8_t *a = NULL;
    uint32_t n = 0;
    int ok = 1;
    for (uint64_t off = 0; ok && off < ahead->n; off += FGR_STATE_PIECE) {
        uint64_t k = ahead->n - off < FGR_STATE_PIECE ? ahead->n - off : FGR_STATE_PIECE;
        begin(&w, FGR_OP_fgrStatePut);
        fgr_put_u64(&w, off);
        fgr_put_u64(&w, k);
        fgr_put_u8(&w, 1);
        fgr_put_u64(&w, k);
        fgr_put_bytes(&w, ahead->state + off, k);
        fgr_finish_frame(&w);
        ok = !w.oom && loader_call(ahead, w.p, w.len, &a, &n) == 0;
        free(a);
        a = NULL;
    }
    if (w.oom)
        snprintf(ahead->why, sizeof ahead->why, "no memory to give the state");
    if (ok) {
        begin(&w, FGR_OP_fgrStateLoad);
        fgr_put_u64(&w, ahead->n);
        fgr_put_u64(&w, sizeof ahead->why - 1);
        fgr_put_u8(&w, 1);
        fgr_put_u8(&w, 1);
        fgr_finish_frame(&w);
        /* Answer: u8 1, u64 4, u32 ok, u8 1, u64 nwhy, why. */
        ok = !w.oom && loader_call(ahead, w.p, w.len, &a, &n) == 0;
        if (ok && (n < 13 + 9 || !fgr_word(a + 9, 4))) {
            snprintf(ahead->why, sizeof ahead->why, "%.*s", n >= 22 ? (int)(n - 22) : 0, n >= 22 ? (const char *)a + 22 : "");
            ok = 0;
        }
        free(a);
    }
    if (ok && ahead->tokens)
        copy_ahead(ahead, &w);
    free(w.p);
    fgr_conn_drop(&ahead->helper);
    free(ahead->tokens);
    free(ahead->from);
    ahead->tokens = ahead->from = NULL;
    __atomic_store_n(&ahead->done, ok ? 1 : 2, __ATOMIC_RELEASE);
    if (__atomic_exchange_n(&ahead->claimed, 1, __ATOMIC_ACQ_REL)) { /* given up: the server was lost meanwhile */
        fgr_conn_drop(&ahead->conn);
        free(ahead->state);
        __atomic_store_n(&ahead->gone, 1, __ATOMIC_RELEASE); /* the struct is the program's again */
    }
    return NULL;
}

static CUresult reaches(struct fgr_ahead *a, const uint8_t *token)
{
    /* Asked of the new executor, of no context yet: fgrStatePull(token, 0, 0). */
    struct fgr_buf w = {0};
    uint8_t *ans = NULL;
    uint32_t n;
    char why[128];
    begin(&w, FGR_OP_fgrStatePull);
    fgr_put_u64(&w, 0);
    fgr_put_u64(&w, 0);
    fgr_put_buf(&w, token, 64);
    fgr_finish_frame(&w);
    int r = w.oom ? -1 : call_on(&a->conn, w.p, w.len, &ans, &n, 64, why, sizeof why);
    free(w.p);
    free(ans);
    return r == 0 ? CUDA_SUCCESS : (CUresult)answered;
}

void fgr_state_held(struct fgr_conn_saved *c, uint8_t kind, const uint8_t *ranges, uint32_t nranges, uint8_t *tokens,
                    uint8_t *src)
{
    if (!c || c->fd < 0)
        return;
    fgr_conn_swap(c);
    for (uint32_t i = 0; i < nranges; i++)
        if (!src[i] &&
            fgrStateShare(fgr_word(ranges + 16 * i, 8), fgr_word(ranges + 16 * i + 8, 8), tokens + 64 * i) == CUDA_SUCCESS)
            src[i] = kind;
    fgr_conn_swap(c);
}

/* Whether the target reaches the old executor's pages (then they move
 * device to device at the second pause) or not, as between hosts: then
 * where the loader copies each range from ahead: the target's executor
 * that holds the checkpoint before (before: on a failover server), where
 * it holds the range (the new executor copies it on that host), else the
 * old executor, read through another connection to the old server. The
 * program's connection current. */
static void plan_copy(struct fgr_ahead *a, const uint8_t *ranges, uint32_t nranges, struct fgr_conn_saved *before)
{
    const char *from = fgr_conn_address();
    uint8_t *tokens = nranges ? calloc(nranges, 64) : NULL, *src = nranges ? calloc(nranges, 1) : NULL;
    char *at = from && strncmp(from, "shm://", 6) ? strdup(from) : NULL;
    /* Memory the driver placed (module variables) or the host's (mapped
     * pinned memory) has no token: the second pause copies it. */
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; tokens && src && at && i < nranges && r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND; i++)
        if (fgrStateShare(fgr_word(ranges + 16 * i, 8), fgr_word(ranges + 16 * i + 8, 8), tokens + 64 * i) ==
            CUDA_SUCCESS)
            r = reaches(a, tokens + 64 * i);
    int read = 0;
    if (r == CUDA_ERROR_NOT_FOUND) {
        fgr_state_held(&a->undone, FGR_AHEAD_UNDONE, ranges, nranges, tokens, src);
        fgr_state_held(before, FGR_AHEAD_PULL, ranges, nranges, tokens, src);
        for (uint32_t i = 0; i < nranges; i++)
            if (!src[i] &&
                fgrStateShare(fgr_word(ranges + 16 * i, 8), fgr_word(ranges + 16 * i + 8, 8), tokens + 64 * i) ==
                    CUDA_SUCCESS)
                read = src[i] = FGR_AHEAD_READ;
        if (read && fgr_conn_dial(at, &a->helper) != 0)
            for (uint32_t i = 0; i < nranges; i++)
                src[i] = src[i] == FGR_AHEAD_READ ? 0 : src[i];
        else if (read)
            fgr_conn_swap(&a->helper); /* the program's current again */
        a->tokens = tokens;
        a->from = src;
        tokens = src = NULL;
    }
    free(tokens);
    free(src);
    free(at);
}

int fgr_ahead_start(struct fgr_ahead *a, const char *to, struct fgr_conn_saved *before, char *why, size_t nwhy)
{
    uint64_t t0 = now_ns();
    uint32_t nranges;
    const uint8_t *ranges = NULL;
    struct fgr_conn_saved undone = {.fd = -1};
    if (a->orphaned && !__atomic_load_n(&a->gone, __ATOMIC_ACQUIRE)) {
        snprintf(why, nwhy, "the attempt given up before is still ending");
        a->pause = 0;
        return -1;
    }
    if (fgr_ahead_undone(a, to)) { /* kept for this attempt */
        undone = a->undone;
        a->undone = (struct fgr_conn_saved){.fd = -1};
    }
    fgr_ahead_drop_undone(a);
    free(a->to);
    *a = (struct fgr_ahead){.conn = {.fd = -1}, .helper = {.fd = -1}, .undone = undone, .to = strdup(to)};
    if (!strncmp(to, "shm://", 6)) {
        snprintf(why, nwhy, "over shm:// the calls go through rings only the program's thread writes");
        return 1; /* in one step */
    }
    a->state = fgr_state_movable(to, why, nwhy) ? fgr_state_save(&a->n, why, nwhy) : NULL;
    if (a->state && !(ranges = fgr_state_ranges(a->state, a->n, &nranges, why, nwhy))) {
        free(a->state);
        a->state = NULL;
    }
    CUresult marked = a->state ? fgrStateMark(&a->generation) : CUDA_SUCCESS;
    if (marked != CUDA_SUCCESS) {
        snprintf(why, nwhy, "%s", unmarked(marked));
        free(a->state);
        a->state = NULL;
    }
    if (!a->state) {
        fgr_conn_drop(&a->undone);
        a->pause = ms_since(t0);
        return -1;
    }
    a->m.state = a->n;
    a->m.at[0] = ms_since(t0);
    const char *no = NULL;
    if (fgr_conn_dial(to, &a->conn) != 0) {
        snprintf(why, nwhy, "cannot connect to %s", to);
        no = why;
    } else {
        no = fgr_same_gpus(&a->conn.srv, &fgr_srv);
        fgr_conn_swap(&a->conn); /* the program's server current again */
        if (!no)
            plan_copy(a, ranges, nranges, before);
    }
    a->m.at[1] = ms_since(t0);
    if (!no && fgr_thread_start(loader, a, 0, "flexgv-remake") != 0)
        no = "no thread to make the state again there";
    a->m.ms = a->pause = ms_since(t0);
    if (no) {
        if (no != why)
            snprintf(why, nwhy, "%s", no);
        fgr_conn_drop(&a->conn);
        fgr_conn_drop(&a->helper);
        fgr_conn_drop(&a->undone);
        free(a->tokens);
        free(a->from);
        a->tokens = a->from = NULL;
        free(a->state);
        a->state = NULL;
        return -1;
    }
    a->loading = 1;
    return 0;
}

const char *fgr_ahead_said(const struct fgr_remade *m)
{
    static __thread char s[256];
    int at = 0;
    s[0] = 0;
    if (m->ahead)
        at += snprintf(s, sizeof s, "; %.1f MiB copied before, while the program ran", m->ahead / 1048576.0);
    if (m->from_before)
        at += snprintf(s + at, sizeof s - (size_t)at, "%s %.1f MiB of it from the checkpoint before on that server",
                       at ? "," : ";", m->from_before / 1048576.0);
    if (m->from_undone)
        snprintf(s + at, sizeof s - (size_t)at, "%s %.1f MiB of it from an attempt there the program's changes undid",
                 at ? "," : ";", m->from_undone / 1048576.0);
    return s;
}

int fgr_ahead_ready(const struct fgr_ahead *a) { return a->loading && __atomic_load_n(&a->done, __ATOMIC_ACQUIRE) != 0; }

/* Whether each GPU of c's server has room for one more copy of the ranges
 * and a context (the next attempt, beside the one kept and the checkpoint
 * before; the ranges' GPUs are not told apart, so each is asked for all):
 * other tenants of those GPUs are not to find them full. */
#define CONTEXT_ROOM (512ull << 20) /* about what a context takes of an H100's */
static int room_for_another(struct fgr_conn_saved *c, const uint8_t *ranges, uint32_t nranges)
{
    uint64_t need = 0;
    for (uint32_t i = 0; ranges && i < nranges; i++)
        need += fgr_word(ranges + 16 * i + 8, 8);
    need += need / 8 + CONTEXT_ROOM;
    fgr_conn_swap(c);
    int ok = ranges != NULL && fgr_srv.ndev > 0;
    for (int d = 0; ok && d < fgr_srv.ndev; d++) {
        size_t total = 0, reserved = 0, used = 0;
        ok = fgrNvmlMemory(d, &total, &reserved, &used) == CUDA_SUCCESS && reserved <= total &&
             used <= total - reserved && total - reserved - used >= need; /* no sum that wraps */
    }
    fgr_conn_swap(c);
    return ok;
}

struct fgr_conn_saved *fgr_ahead_undone(struct fgr_ahead *a, const char *to)
{
    return a->undone.fd >= 0 && a->to && to && !strcmp(a->to, to) ? &a->undone : NULL;
}

void fgr_ahead_drop_undone(struct fgr_ahead *a) { fgr_conn_drop(&a->undone); }

int fgr_ahead_end(struct fgr_ahead *a, char *why, size_t nwhy)
{
    CUresult r;
    uint64_t t0 = now_ns();
    const char *no = NULL;
    unsigned long long generation = 0;
    uint8_t *buf = NULL;
    uint32_t nranges = 0;
    const uint8_t *ranges = fgr_state_ranges(a->state, a->n, &nranges, why, nwhy);
    int changed = 0;
    a->loading = 0;
    if (a->done != 1) {
        no = a->why;
    } else if ((r = fgrStateMark(&generation)) != CUDA_SUCCESS) {
        no = unmarked(r);
    } else if (generation != a->generation) {
        changed = 1;
    } else if (!(buf = malloc(FGR_COPY_BUF))) {
        no = "no memory to copy device memory";
    } else {
        fgr_conn_swap(&a->conn); /* the new executor current, the program's set aside */
        int bad = fgr_state_copy(ranges, nranges, &a->conn, buf, a->copied, NULL, NULL, &a->m, why, nwhy);
        fgr_conn_swap(&a->conn);
        no = bad ? why : NULL;
    }
    free(buf);
    fgr_conn_drop(&a->undone); /* the attempt before: copied from, if it was */
    int keep = changed && a->m.ahead && a->to && room_for_another(&a->conn, ranges, nranges);
    free(a->state);
    a->state = NULL;
    a->pause = ms_since(t0);
    if (no || changed) {
        if (no && no != why)
            snprintf(why, nwhy, "%s", no);
        if (keep) {
            a->undone = a->conn; /* for the next attempt, or the move or checkpoint in one step */
            a->conn = (struct fgr_conn_saved){.fd = -1};
        }
        fgr_conn_drop(&a->conn);
        return changed ? -1 : 0;
    }
    a->m.at[2] = a->pause;
    a->m.ms += a->pause;
    return 1;
}

void fgr_ahead_abandon(struct fgr_ahead *a)
{
    /* A loader still at work uses the state and the connection: it lets
     * them go when it ends. */
    if (a->loading && __atomic_exchange_n(&a->claimed, 1, __ATOMIC_ACQ_REL)) {
        fgr_conn_drop(&a->conn);
        free(a->state);
        a->state = NULL;
    } else if (a->loading) {
        a->orphaned = 1; /* the loader still at work, on this struct */
    }
    fgr_conn_drop(&a->undone); /* a loader copying from it fails, as it would */
    a->loading = 0;
}

void fgr_ahead_forked(struct fgr_ahead *a)
{
    if (a->loading && a->conn.fd >= 0)
        close(a->conn.fd); /* the parent's loader's: it goes on there */
    if (a->loading && a->helper.fd >= 0)
        close(a->helper.fd);
    if (a->undone.fd >= 0)
        close(a->undone.fd); /* the parent's */
    *a = (struct fgr_ahead){.conn = {.fd = -1}, .helper = {.fd = -1}, .undone = {.fd = -1}};
}
