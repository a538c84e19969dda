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

/* One request on the loader's connection and its answer (result, then
 * what follows in *a, *n): 0, or -1 with why written. */
static int loader_call(struct fgr_ahead *ahead, const uint8_t *f, size_t fn, uint8_t **a, uint32_t *n)
{
    void *tls = ahead->conn.tls;
    int fd = ahead->conn.fd;
    if (tls ? fgr_tls_write_all(tls, f, fn) : fgr_write_all(fd, f, fn)) {
        snprintf(ahead->why, sizeof ahead->why, "the target server went away: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        uint8_t h[8];
        if (tls ? fgr_tls_read_all(tls, h, 8) : fgr_read_all(fd, h, 8)) {
            snprintf(ahead->why, sizeof ahead->why, "the target server did not answer");
            return -1;
        }
        uint32_t len = (uint32_t)fgr_word(h, 4), first = (uint32_t)fgr_word(h + 4, 4);
        uint8_t *b = len >= 4 && len <= (1u << 20) ? malloc(len - 4 + 1) : NULL;
        if (!b || (len > 4 && (tls ? fgr_tls_read_all(tls, b, len - 4) : fgr_read_all(fd, b, len - 4)))) {
            free(b);
            snprintf(ahead->why, sizeof ahead->why, "the target server answered malformed");
            return -1;
        }
        if (first == FGR_OUTPUT) { /* nothing runs there yet: no output to print */
            free(b);
            continue;
        }
        if (first != CUDA_SUCCESS) {
            free(b);
            snprintf(ahead->why, sizeof ahead->why, "the target server answered error %u", first);
            return -1;
        }
        *a = b;
        *n = len - 4;
        return 0;
    }
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
        w.len = 0;
        fgr_put_u32(&w, 0);
        fgr_put_u16(&w, FGR_OP_fgrStatePut);
        fgr_put_u16(&w, 0);
        fgr_put_u32(&w, 0);
        fgr_put_u64(&w, 0);
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
        w.len = 0;
        fgr_put_u32(&w, 0);
        fgr_put_u16(&w, FGR_OP_fgrStateLoad);
        fgr_put_u16(&w, 0);
        fgr_put_u32(&w, 0);
        fgr_put_u64(&w, 0);
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
    free(w.p);
    __atomic_store_n(&ahead->done, ok ? 1 : 2, __ATOMIC_RELEASE);
    if (__atomic_exchange_n(&ahead->claimed, 1, __ATOMIC_ACQ_REL)) { /* given up: the server was lost meanwhile */
        fgr_conn_drop(&ahead->conn);
        free(ahead->state);
    }
    return NULL;
}

int fgr_ahead_start(struct fgr_ahead *a, const char *to, char *why, size_t nwhy)
{
    uint64_t t0 = now_ns();
    uint32_t nranges;
    *a = (struct fgr_ahead){.conn = {.fd = -1}};
    if (!strncmp(to, "shm://", 6)) {
        snprintf(why, nwhy, "over shm:// the calls go through rings only the program's thread writes");
        return 1; /* in one step */
    }
    a->state = fgr_state_movable(to, why, nwhy) ? fgr_state_save(&a->n, why, nwhy) : NULL;
    if (a->state && !fgr_state_ranges(a->state, a->n, &nranges, why, nwhy)) {
        free(a->state);
        a->state = NULL;
    }
    if (a->state && fgrStateMark(&a->generation) != CUDA_SUCCESS) {
        snprintf(why, nwhy, "this server cannot mark the program's state");
        free(a->state);
        a->state = NULL;
    }
    if (!a->state) {
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
    }
    a->m.at[1] = ms_since(t0);
    if (!no && fgr_thread_start(loader, a, 0, "flexgv-remake") != 0)
        no = "no thread to make the state again there";
    a->m.ms = a->pause = ms_since(t0);
    if (no) {
        if (no != why)
            snprintf(why, nwhy, "%s", no);
        fgr_conn_drop(&a->conn);
        free(a->state);
        a->state = NULL;
        return -1;
    }
    a->loading = 1;
    return 0;
}

int fgr_ahead_ready(const struct fgr_ahead *a) { return a->loading && __atomic_load_n(&a->done, __ATOMIC_ACQUIRE) != 0; }

int fgr_ahead_end(struct fgr_ahead *a, char *why, size_t nwhy)
{
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
    } else if (fgrStateMark(&generation) != CUDA_SUCCESS) {
        no = "this server cannot mark the program's state";
    } else if (generation != a->generation) {
        changed = 1;
    } else if (!(buf = malloc(FGR_COPY_BUF))) {
        no = "no memory to copy device memory";
    } else {
        fgr_conn_swap(&a->conn); /* the new executor current, the program's set aside */
        int r = fgr_state_copy(ranges, nranges, &a->conn, buf, &a->m.bytes, &a->m.pulled, why, nwhy);
        fgr_conn_swap(&a->conn);
        no = r ? why : NULL;
    }
    free(buf);
    free(a->state);
    a->state = NULL;
    a->pause = ms_since(t0);
    if (no || changed) {
        if (no && no != why)
            snprintf(why, nwhy, "%s", no);
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
    }
    a->loading = 0;
}

void fgr_ahead_forked(struct fgr_ahead *a)
{
    if (a->loading && a->conn.fd >= 0)
        close(a->conn.fd); /* the parent's loader's: it goes on there */
    *a = (struct fgr_ahead){.conn = {.fd = -1}};
}
