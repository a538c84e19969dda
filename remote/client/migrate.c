/* Moving to another server while the program runs (asked by flexgv serve:
 * remote/executor/move.c). The calling thread holds the connection; the
 * program's other threads wait. The old executor drains the device and
 * gives its state's bytes (what the connection made, as the requests that
 * made it); a new executor of the other server makes it again, with the
 * same names and device addresses, and the device memory's bytes are
 * copied across through this process. Until the new one has everything,
 * the old one is untouched: a move that fails at any step leaves the
 * program where it was, and says why, there and to the server. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t ns = (int64_t)(t.tv_sec - t0->tv_sec) * 1000000000 + (t.tv_nsec - t0->tv_nsec);
    return ns > 0 ? (uint64_t)ns / 1000000 : 0;
}



uint64_t fgr_word(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Whether a program built for the old server's GPUs runs on the new one's:
 * as many, each of the same architecture. */
const char *fgr_same_gpus(const struct fgr_server *a, const struct fgr_server *b)
{
    if (a->ndev != b->ndev)
        return "the target server has another number of GPUs";
    for (int d = 0; d < a->ndev; d++)
        if (a->dev[d].attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] !=
                b->dev[d].attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] ||
            a->dev[d].attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] !=
                b->dev[d].attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR])
            return "the target server's GPUs are of another architecture";
    return NULL;
}

/* The state's bytes from the old executor: NULL, having written why. */
uint8_t *fgr_state_save(uint64_t *n, char *why, size_t nwhy)
{
    unsigned long long bytes = 0;
    CUresult r = fgrStateSave(&bytes, (unsigned)nwhy, why);
    if (r != CUDA_SUCCESS) {
        snprintf(why, nwhy, "this server cannot give the program's state (error %d)", (int)r);
        return NULL;
    }
    if (!bytes)
        return NULL; /* why written there */
    uint8_t *p = malloc(bytes);
    if (!p) {
        snprintf(why, nwhy, "no memory for the program's state (%llu bytes)", bytes);
        return NULL;
    }
    for (uint64_t off = 0; off < bytes; off += FGR_STATE_PIECE) {
        uint64_t k = bytes - off < FGR_STATE_PIECE ? bytes - off : FGR_STATE_PIECE;
        if ((r = fgrStateGet(off, k, p + off)) != CUDA_SUCCESS) {
            snprintf(why, nwhy, "reading the program's state failed (error %d)", (int)r);
            free(p);
            return NULL;
        }
    }
    *n = bytes;
    return p;
}

/* On the new executor (current): the state made again. */
int fgr_state_load(const uint8_t *p, uint64_t n, char *why, size_t nwhy)
{
    CUresult r = CUDA_SUCCESS;
    for (uint64_t off = 0; off < n && r == CUDA_SUCCESS; off += FGR_STATE_PIECE)
        r = fgrStatePut(off, n - off < FGR_STATE_PIECE ? n - off : FGR_STATE_PIECE, p + off);
    unsigned ok = 0;
    if (r == CUDA_SUCCESS)
        r = fgrStateLoad(n, &ok, (unsigned)nwhy, why);
    if (r != CUDA_SUCCESS)
        snprintf(why, nwhy, "the target server cannot take the program's state (error %d)", (int)r);
    return r == CUDA_SUCCESS && ok ? 0 : -1;
}

/* n bytes at p, old (set aside) to new (current), through buf: 0, or -1
 * having written why. */
static int copy_bytes(uint64_t p, uint64_t n, struct fgr_conn_saved *old, uint8_t *buf, uint64_t *total, char *why,
                      size_t nwhy)
{
    int fast = fgr_current() != NULL;
    size_t piece = fast ? FGR_COPY_BUF : FGR_STATE_PIECE;
    for (uint64_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;
        fgr_conn_swap(old);
        CUresult r = fast ? cuMemcpyDtoH_v2(buf, p + off, k) : fgrStateRead(p + off, k, buf);
        fgr_conn_swap(old);
        if (r == CUDA_SUCCESS)
            r = fast ? cuMemcpyHtoD_v2(p + off, buf, k) : fgrStateWrite(p + off, k, buf);
        *total += r == CUDA_SUCCESS ? k : 0;
        if (r != CUDA_SUCCESS) {
            snprintf(why, nwhy, "copying device memory at 0x%llx failed (error %d)", (unsigned long long)(p + off),
                     (int)r);
            return -1;
        }
    }
    return 0;
}

/* A range copied before: the blocks whose sums differ between old and new
 * copied again (where either cannot sum, all of it). */
static int copy_changed(uint64_t base, uint64_t size, struct fgr_conn_saved *old, uint8_t *buf, uint64_t *total,
                        char *why, size_t nwhy)
{
    static unsigned long long was[FGR_MAX_SUMS], now[FGR_MAX_SUMS]; /* the program's other threads wait */
    const uint64_t span = (uint64_t)FGR_MAX_SUMS * FGR_SUM_BLOCK;
    for (uint64_t at = 0; at < size; at += span) {
        uint64_t k = size - at < span ? size - at : span;
        unsigned ns = (unsigned)((k + FGR_SUM_BLOCK - 1) / FGR_SUM_BLOCK);
        fgr_conn_swap(old);
        CUresult r = base % 8 || k % 8 ? CUDA_ERROR_INVALID_VALUE : fgrStateSums(base + at, k, ns, was);
        fgr_conn_swap(old);
        if (r != CUDA_SUCCESS || fgrStateSums(base + at, k, ns, now) != CUDA_SUCCESS) {
            if (copy_bytes(base + at, k, old, buf, total, why, nwhy))
                return -1;
            continue;
        }
        for (unsigned i = 0; i < ns;) {
            unsigned j = i;
            while (j < ns && was[j] != now[j])
                j++;
            if (j > i) {
                uint64_t from = (uint64_t)i * FGR_SUM_BLOCK, to = (uint64_t)j * FGR_SUM_BLOCK;
                if (copy_bytes(base + at + from, (to < k ? to : k) - from, old, buf, total, why, nwhy))
                    return -1;
            }
            i = j + 1;
        }
    }
    return 0;
}

/* The ranges not yet placed that the executor src holds (an older copy,
 * on the target's host) copied from it by the new one (current), device to
 * device: placed as kind, counted in *from and m. */
static void seed(const uint8_t *ranges, uint32_t nranges, struct fgr_conn_saved *src, uint8_t kind, uint8_t *placed,
                 uint8_t *tokens, uint64_t *from, struct fgr_remade *m)
{
    fgr_state_held(src, kind, ranges, nranges, tokens, placed);
    for (uint32_t j = 0; j < nranges; j++) {
        uint64_t base = fgr_word(ranges + 16 * j, 8), size = fgr_word(ranges + 16 * j + 8, 8);
        if (placed[j] != kind)
            continue;
        if (fgrStatePull(tokens + 64 * j, base, size) != CUDA_SUCCESS) {
            placed[j] = 0;
            continue;
        }
        m->bytes += size;
        m->pulled += size;
        *from += size;
    }
}

/* The device ranges' bytes, old (set aside) to new (current), through buf
 * (FGR_COPY_BUF bytes); the bytes copied in m->bytes, of them device to
 * device in m->pulled. */
int fgr_state_copy(const uint8_t *ranges, uint32_t nranges, struct fgr_conn_saved *old, uint8_t *buf, int ahead,
                   struct fgr_conn_saved *undone, struct fgr_conn_saved *before, struct fgr_remade *m, char *why,
                   size_t nwhy)
{
    int pull = !ahead;
    uint8_t *placed = NULL, *tokens = NULL; /* where the target's host holds a copy */
    uint32_t i = 0;
    for (; i < nranges; i++) {
        uint64_t base = fgr_word(ranges + 16 * i, 8), size = fgr_word(ranges + 16 * i + 8, 8);
        /* On one host, device to device: the new executor copies from the
         * old one's pages (another host's it cannot reach: not tried again,
         * the copies on the target's host taken where there are some). */
        if (pull) {
            uint8_t token[64];
            fgr_conn_swap(old);
            CUresult r = fgrStateShare(base, size, token);
            fgr_conn_swap(old);
            if (r == CUDA_SUCCESS && (r = fgrStatePull(token, base, size)) == CUDA_SUCCESS) {
                m->bytes += size;
                m->pulled += size;
                continue;
            }
            pull = r != CUDA_ERROR_NOT_FOUND;
            if (!pull && (undone || before) && (placed = calloc(nranges, 1)) && (tokens = calloc(nranges, 64))) {
                memset(placed, 0xff, i); /* copied already */
                seed(ranges, nranges, undone, FGR_AHEAD_UNDONE, placed, tokens, &m->from_undone, m);
                seed(ranges, nranges, before, FGR_AHEAD_PULL, placed, tokens, &m->from_before, m);
            }
        }
        if (ahead || (placed && placed[i]) ? copy_changed(base, size, old, buf, &m->bytes, why, nwhy)
                                           : copy_bytes(base, size, old, buf, &m->bytes, why, nwhy))
            break;
    }
    free(placed);
    free(tokens);
    return i == nranges ? 0 : -1;
}

int fgr_state_movable(const char *to, char *why, size_t nwhy)
{
    if (strncmp(to, "shm://", 6) && fgr_heap_used())
        snprintf(why, nwhy, "the program's pinned memory is shared with this server (shm://), which %s cannot share", to);
    else
        return 1;
    return 0;
}

const uint8_t *fgr_state_ranges(const uint8_t *state, uint64_t n, uint32_t *nranges, char *why, size_t nwhy)
{
    if (n < 28 || fgr_word(state, 4) != FGR_STATE_MAGIC) {
        snprintf(why, nwhy, "this server's state is not one this client reads");
        return NULL;
    }
    *nranges = (uint32_t)fgr_word(state + 24, 4);
    if (*nranges > (n - 28) / 16) {
        snprintf(why, nwhy, "this server's state is malformed");
        return NULL;
    }
    return state + 28;
}

int fgr_state_remake(const char *to, struct fgr_conn_saved *undone, struct fgr_conn_saved *before,
                     struct fgr_conn_saved *made, struct fgr_remade *m, char *why, size_t nwhy)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *m = (struct fgr_remade){0};
    *made = (struct fgr_conn_saved){.fd = -1};
    uint8_t *state = NULL, *buf = NULL;
    int dialed = 0, done = 0;
    uint32_t nranges = 0;
    const uint8_t *ranges = NULL;
    if (fgr_state_movable(to, why, nwhy))
        state = fgr_state_save(&m->state, why, nwhy);
    uint64_t n = m->state;
    if (state && (ranges = fgr_state_ranges(state, n, &nranges, why, nwhy))) {
        if (!(buf = malloc(FGR_COPY_BUF)))
            snprintf(why, nwhy, "no memory to copy device memory");
        else if ((m->at[0] = (unsigned)ms_since(&t0), fgr_conn_dial(to, made) != 0))
            snprintf(why, nwhy, "cannot connect to %s", to);
        else if ((dialed = 1) && fgr_same_gpus(&made->srv, &fgr_srv))
            snprintf(why, nwhy, "%s", fgr_same_gpus(&made->srv, &fgr_srv));
        else if ((m->at[1] = (unsigned)ms_since(&t0), fgr_state_load(state, n, why, nwhy) == 0) &&
                 (m->at[2] = (unsigned)ms_since(&t0),
                  fgr_state_copy(ranges, nranges, made, buf, 0, undone, before, m, why, nwhy) == 0))
            done = 1;
    }
    free(state);
    free(buf);
    if (dialed)
        fgr_conn_swap(made); /* the old one current again, the new one in made */
    m->ms = (unsigned)ms_since(&t0);
    return done;
}

/* A move under way in two steps (ahead.c): the first made when asked,
 * the second once the new executor holds the structure. */
static struct fgr_ahead moving = {.conn = {.fd = -1}, .helper = {.fd = -1}, .undone = {.fd = -1}};
static char *moving_to;

/* A move in two steps: its attempts, and what the earlier ones paused. */
static unsigned moving_tries, moving_paused;

/* How a move ended: told to the old executor (for flexgv migrate) and to
 * the program; made: the new executor's connection, taken or let go. */
static void move_ended(int moved, struct fgr_conn_saved *made, const struct fgr_remade *m, const char *to,
                       const char *why, int steps)
{
    fgrStateDone(moved, m->ms, moved ? to : why);
    if (moved) {
        int ran = fgr_hostfn_moving();
        fgr_conn_swap(made); /* the new one for good */
        fgr_conn_moved(to);
        fgr_failover_moved(to);
        fgr_hostfn_moved(ran, 0);
        /* Attempts in two steps the program's calls changed the state under. */
        char again[96] = "";
        if (moving_tries > 1 && steps == 2)
            snprintf(again, sizeof again, ", at attempt %u as the program changed its state under the earlier",
                     moving_tries);
        else if (moving_tries > 1)
            snprintf(again, sizeof again, "in one step: the program changed its state under %u in two steps;",
                     moving_tries);
        if (steps == 2)
            fgr_say("moved to the GPU server %s (in two steps%s: the program paused %u ms, %u to start it and %u to end it; "
                    "%.1f MiB of device memory copied, %.1f MiB of it device to device, and %.1f MiB of state%s; at %u ms "
                    "the state was read, at %u the target reached)",
                    to, again, m->ms, m->ms - m->at[2], m->at[2], m->bytes / 1048576.0, m->pulled / 1048576.0,
                    m->state / 1048576.0, fgr_ahead_said(m), m->at[0], m->at[1]);
        else
            fgr_say("moved to the GPU server %s (%s%sthe program paused %u ms; %.1f MiB of device memory copied, %.1f "
                    "MiB of it device to device, and %.1f MiB of state%s; at %u ms the state was read, at %u the target "
                    "reached, at %u the state made again there)",
                    to, again, *again ? " " : "", m->ms, m->bytes / 1048576.0, m->pulled / 1048576.0,
                    m->state / 1048576.0, fgr_ahead_said(m), m->at[0], m->at[1], m->at[2]);
    } else {
        fgr_say("stays on this GPU server: %s", why);
    }
    fgr_conn_drop(made); /* the old executor ends with its connection */
}

/* The move in one step; before: what an earlier step paused the program. */
static void move_now(const char *to, unsigned before)
{
    char why[1024] = "";
    struct fgr_conn_saved made;
    struct fgr_remade m;
    int moved = fgr_state_remake(to, fgr_ahead_undone(&moving, to), NULL, &made, &m, why, sizeof why);
    fgr_ahead_drop_undone(&moving);
    m.ms += before;
    move_ended(moved, &made, &m, to, why, 1);
}


void fgr_move(const char *to)
{
    char why[1024] = "";
    if (moving_to) {
        fgr_say("a move to %s is asked while one to %s is under way: it is not made", to, moving_to);
        return;
    }
    struct fgr_conn_saved none = {.fd = -1};
    struct fgr_remade m = {0};
    char *target = strdup(to);
    if (!target) {
        move_ended(0, &none, &m, to, "no memory for the move", 2);
        return;
    }
    moving_tries = 1;
    moving_paused = 0;
    int r = fgr_ahead_start(&moving, to, NULL, why, sizeof why);
    if (r > 0) {
        move_now(to, 0);
    } else if (r < 0) {
        m.ms = moving.pause;
        move_ended(0, &none, &m, to, why, 2);
    } else {
        moving_to = target;
        return;
    }
    free(target);
}

int fgr_move_due(void) { return fgr_ahead_ready(&moving); }

void fgr_move_forked(void)
{
    fgr_ahead_forked(&moving);
    moving_to = NULL; /* the parent's move */
}

void fgr_move_end(void)
{
    char why[1024] = "";
    char *to = moving_to;
    unsigned first = moving.m.ms;
    int r = fgr_ahead_end(&moving, why, sizeof why);
    moving_to = NULL;
    if (r < 0) { /* the structure changed meanwhile */
        int again = 1; /* as fgr_ahead_start answers: 1, in one step */
        moving_paused += first + moving.pause;
        if (moving_tries < FGR_AHEAD_TRIES) {
            moving_tries++;
            if ((again = fgr_ahead_start(&moving, to, NULL, why, sizeof why)) == 0) {
                moving_to = to;
                return;
            }
            moving_paused += moving.pause;
        }
        if (again < 0) {
            struct fgr_conn_saved none = {.fd = -1};
            struct fgr_remade m = {.ms = moving_paused};
            move_ended(0, &none, &m, to, why, 2);
        } else {
            move_now(to, moving_paused);
        }
    } else {
        moving.m.ms += moving_paused;
        move_ended(r > 0, &moving.conn, &moving.m, to, why, 2);
    }
    free(to);
}
