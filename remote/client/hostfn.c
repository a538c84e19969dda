/* Host functions, run as a GPU runs them: the caller goes on, and the
 * client's host-function thread runs the function when the executor's gate
 * says the stream got there; the stream waits until it returns. Over
 * shm:// the gate says so through the shared memory (remote/ring.h), over
 * a socket through the host-function channel, a second connection opened
 * at the first function (remote/wire.h). Each function and its data get
 * an id here; an id the gate says was captured stays, since its graph runs
 * it at every launch. Without either (a server that gives no channel, or
 * refuses it), functions run on the calling thread after their stream's
 * work (local.c).
 *
 * With a failover server, the calls a replay makes again include launches
 * of host functions (failover.c): each must run once in all. So while
 * calls are kept an entry that ran is not reused but kept, with how often
 * it ran since the last checkpoint (when every function launched before
 * had returned: a checkpoint drains the streams); when the program goes
 * on elsewhere, the replay's first that many runs of it are answered
 * without running it, once the run under way at the loss (over a socket)
 * has returned. */
#include "client.h"
#include "../futex.h"
#include "../ring.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t returned = PTHREAD_COND_INITIALIZER; /* a run ended */
static struct entry {
    CUhostFn fn;
    void *data;
    size_t next_free; /* 1 + the next free entry, 0: none */
    uint32_t ran;     /* runs started since the last checkpoint, while calls are kept */
    uint32_t skip;    /* runs a replay makes again, to answer without running */
    uint8_t busy;     /* a run under way */
    uint8_t spent;    /* ran once (or forgotten) while calls were kept: freed at the next checkpoint */
} *tab;
static size_t ntab, free_head; /* free_head: 1 + the first free entry, 0: none */
static int thread_running;
/* Over a socket: the channel, and whether it was tried (1) or lost (-1). */
static int chan_fd = -1, chan_tried;
static void *chan_tls;
/* Over shm://: the runner's rings, and whether it is to end (its
 * connection moved) and has (futex words). */
static struct fgr_ring *runner_ring;
static uint32_t runner_stop, runner_gone;

static void release(size_t i)
{
    tab[i] = (struct entry){.next_free = free_head};
    free_head = i + 1;
}

/* An entry done with (mu held): freed, or kept until the next checkpoint
 * while calls are kept, for a replay to find. */
static void done_with(size_t k)
{
    if (fgr_failover_keeping())
        tab[k].spent = 1;
    else
        release(k);
}

/* Runs the function of an id the stream reached, and forgets it unless
 * kept; a run made again by a replay is only waited for. */
static void run(uint64_t id)
{
    uint64_t k = (id & ~FGR_HOSTFN_KEEP) - 1;
    pthread_mutex_lock(&mu);
    struct entry *e = k < ntab && tab[k].fn ? &tab[k] : NULL;
    if (e && e->skip) {
        e->skip--;
        while (tab[k].busy)
            pthread_cond_wait(&returned, &mu);
        if (!tab[k].skip && tab[k].spent && !fgr_failover_keeping())
            release((size_t)k);
        pthread_mutex_unlock(&mu);
        return;
    }
    if (!e) {
        pthread_mutex_unlock(&mu);
        return;
    }
    CUhostFn fn = e->fn;
    void *data = e->data;
    if (fgr_failover_keeping())
        e->ran++;
    e->busy = 1;
    pthread_mutex_unlock(&mu);
    fn(data);
    pthread_mutex_lock(&mu);
    e = &tab[k]; /* tab may have grown meanwhile */
    e->busy = 0;
    pthread_cond_broadcast(&returned);
    if (!(id & FGR_HOSTFN_KEEP) && e->skip)
        e->spent = 1; /* its replayed run is still to come: the id stays its own */
    else if (!(id & FGR_HOSTFN_KEEP))
        done_with((size_t)k);
    pthread_mutex_unlock(&mu);
}

static uint64_t get64(const uint8_t *p);

/* A host node's earlier copies the gate put in the data area, put in place
 * (remote/ring.h); what does not lie within the area is left. */
static void early_from(const uint8_t *data, uint32_t n)
{
    const uint8_t *p = data, *end = data + FGR_HOSTFN_DATA_BYTES;
    for (uint32_t i = 0; i < n && end - p >= 16; i++) {
        uint64_t len = get64(p + 8);
        if (len > (uint64_t)(end - p - 16))
            break;
        fgr_hostcopy_early(get64(p), p + 16, (size_t)len);
        p += 16 + (len + 7) / 8 * 8 < (uint64_t)(end - p) ? 16 + (len + 7) / 8 * 8 : (uint64_t)(end - p);
    }
}

/* Runs each function a gate reached, then sleeps until the next, or
 * until its connection moved. */
static void *runner(void *arg)
{
    struct fgr_ring *r = arg;
    struct fgr_hostfn_area *a = &r->m->hostfn;
    while (!__atomic_load_n(&runner_stop, __ATOMIC_ACQUIRE)) {
        uint32_t seq = __atomic_load_n(&a->reached_seq, __ATOMIC_ACQUIRE);
        for (int i = 0; i < FGR_HOSTFN_SLOTS; i++) {
            struct fgr_hostfn_slot *s = &a->slot[i];
            if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != FGR_HOSTFN_REACHED)
                continue;
            uint32_t ndata = __atomic_load_n(&s->ndata, __ATOMIC_RELAXED);
            if (ndata)
                early_from(r->hostfn_data, ndata);
            run(__atomic_load_n(&s->id, __ATOMIC_RELAXED));
            __atomic_store_n(&s->state, FGR_HOSTFN_DONE, __ATOMIC_RELEASE);
            fgr_futex_wake(&s->state);
        }
        fgr_futex_wait(&a->reached_seq, seq, 1000);
    }
    __atomic_store_n(&runner_gone, 1, __ATOMIC_RELEASE);
    fgr_futex_wake(&runner_gone);
    return NULL;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << 8 * i;
    return v;
}

/* Over a socket: reads "seq, id, n" where a function is due and the n
 * buffers a host node's earlier copy nodes wrote ("srv, len" and the
 * bytes), puts those in place, runs the function and answers seq. The
 * channel's end (the server gone) ends the thread; the connection's calls
 * then fail on their own. */
static void *socket_runner(void *arg)
{
    int fd = (int)(intptr_t)arg;
    void *tls = chan_tls;
    uint8_t m[24], *buf = NULL;
    size_t cap = 0;
#define READ(p, n) (tls ? fgr_tls_read_all(tls, p, n) : fgr_read_all(fd, p, n))
    while (!READ(m, 24)) {
        uint64_t id = get64(m + 8), n = get64(m + 16);
        int bad = 0;
        for (uint64_t i = 0; i < n && !bad; i++) {
            uint8_t h[16];
            uint64_t len = 0;
            bad = READ(h, 16) || (len = get64(h + 8)) > FGR_MAX_BUF;
            if (!bad && len > cap) {
                uint8_t *more = realloc(buf, len);
                bad = !more;
                buf = more ? more : buf;
                cap = more ? len : cap;
            }
            bad = bad || READ(buf, len);
            if (!bad)
                fgr_hostcopy_early(get64(h), buf, len);
        }
        if (bad)
            break;
        run(id);
        if (tls ? fgr_tls_write_all(tls, m, 8) : fgr_write_all(fd, m, 8))
            break;
    }
#undef READ
    free(buf);
    pthread_mutex_lock(&mu);
    int current = chan_fd == fd;
    if (current)
        chan_tried = -1;
    pthread_mutex_unlock(&mu);
    if (!current) { /* its connection moved: the channel is this thread's alone */
        if (tls)
            fgr_tls_free(tls);
        close(fd);
    }
    return NULL;
}

/* The runner (mu held), with a stack of the usual size: it runs the
 * program's functions. Over a socket the channel is opened first; where
 * it cannot be, the functions run as local.c says, said once. locked:
 * conn.c's lock is held, the connection made. */
static int runner_start(struct fgr_ring *r, int locked)
{
    if (thread_running)
        return 0;
    if (r) {
        __atomic_store_n(&runner_stop, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&runner_gone, 0, __ATOMIC_RELAXED);
        if (fgr_thread_start(runner, r, 0, "flexgv-hostfn"))
            return -1;
        runner_ring = r;
        thread_running = 1;
        return 0;
    }
    if (chan_tried)
        return -1;
    chan_tried = 1;
    if ((!locked && fgr_connect() != CUDA_SUCCESS) || !fgr_srv.has_secret)
        return -1; /* an older server's: no channel, as before */
    chan_fd = fgr_channel_open(&chan_tls, locked);
    if (chan_fd < 0 || fgr_thread_start(socket_runner, (void *)(intptr_t)chan_fd, 0, "flexgv-hostfn")) {
        if (chan_fd >= 0) {
            if (chan_tls)
                fgr_tls_free(chan_tls);
            close(chan_fd);
        }
        chan_fd = -1;
        chan_tls = NULL;
        fgr_say("host functions run on the calling thread after their stream's work, and cannot be captured");
        return -1;
    }
    thread_running = 1;
    return 0;
}

/* More entries, all free (mu held): 0, or -1 without memory. */
static int grow(void)
{
    size_t n = ntab ? 2 * ntab : 64;
    struct entry *t = realloc(tab, n * sizeof *t);
    if (!t)
        return -1;
    tab = t;
    for (size_t i = n; i-- > ntab;)
        release(i);
    ntab = n;
    return 0;
}

CUresult fgr_hostfn_launch(CUstream s, CUhostFn fn, void *data, unsigned pt)
{
    struct fgr_ring *r = fgr_conn_ring();
    pthread_mutex_lock(&mu);
    if (runner_start(r, 0) || (!free_head && grow()) || chan_tried < 0) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_NOT_SUPPORTED; /* run by the caller, then */
    }
    size_t i = free_head - 1;
    free_head = tab[i].next_free;
    tab[i] = (struct entry){.fn = fn, .data = data};
    pthread_mutex_unlock(&mu);
    return fgrHostFn(s, (unsigned long long)i + 1, pt);
}

/* A graph's host node (graphs.c): an entry never released, since every
 * launch runs it, its id flagged kept; or a user object's destructor
 * (graphs.c), run once. */
CUresult fgr_hostfn_id(CUhostFn fn, void *data, int keep, unsigned long long *id)
{
    struct fgr_ring *r = fgr_conn_ring();
    pthread_mutex_lock(&mu);
    if (runner_start(r, 0) || chan_tried < 0) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (!free_head && grow()) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t i = free_head - 1;
    free_head = tab[i].next_free;
    tab[i] = (struct entry){.fn = fn, .data = data};
    pthread_mutex_unlock(&mu);
    *id = ((unsigned long long)i + 1) | (keep ? FGR_HOSTFN_KEEP : 0);
    return CUDA_SUCCESS;
}

void fgr_hostfn_forget(unsigned long long id)
{
    uint64_t k = (id & ~FGR_HOSTFN_KEEP) - 1;
    pthread_mutex_lock(&mu);
    if (k < ntab && tab[k].fn)
        done_with((size_t)k);
    pthread_mutex_unlock(&mu);
}

/* A checkpoint taken: every function launched before it has returned, so
 * a replay starts after their runs; those kept for one are freed. */
void fgr_hostfn_checkpoint(void)
{
    pthread_mutex_lock(&mu);
    for (size_t k = 0; k < ntab; k++) {
        if (!tab[k].fn)
            continue;
        tab[k].ran = tab[k].skip = 0;
        if (tab[k].spent && !tab[k].busy)
            release(k);
    }
    pthread_mutex_unlock(&mu);
}

/* Going on elsewhere from the last checkpoint: what ran since is what the
 * replay runs again. */
void fgr_hostfn_failover(void)
{
    pthread_mutex_lock(&mu);
    for (size_t k = 0; k < ntab; k++) {
        tab[k].skip = tab[k].ran;
        tab[k].ran = 0;
    }
    pthread_mutex_unlock(&mu);
}

/* The function and data of a host node's id (kept ids only). */
int fgr_hostfn_of(unsigned long long id, CUhostFn *fn, void **data)
{
    uint64_t k = id - 1;
    pthread_mutex_lock(&mu);
    int ok = k < ntab && tab[k].fn;
    if (ok) {
        *fn = tab[k].fn;
        *data = tab[k].data;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

/* A forked child has no runner, and its own connection: it drops its copy
 * of the parent's channel (the parent's session, not freed here). */
void fgr_hostfn_forked(void)
{
    pthread_mutex_init(&mu, NULL);
    thread_running = 0;
    if (chan_fd >= 0)
        close(chan_fd);
    chan_fd = -1;
    chan_tls = NULL;
    chan_tried = 0;
    free(tab);
    tab = NULL;
    ntab = free_head = 0;
}

int fgr_hostfn_bound(void)
{
    pthread_mutex_lock(&mu);
    int bound = thread_running || chan_tried;
    pthread_mutex_unlock(&mu);
    return bound;
}

/* A connection moving, its streams drained (no function under way): its
 * runner ends before its rings go (over shm://), its channel is left to
 * its runner, which ends with the old executor (over a socket). What ran
 * is said: a runner is made again for the new connection. */
int fgr_hostfn_moving(void)
{
    pthread_mutex_lock(&mu);
    int ran = thread_running;
    if (ran && runner_ring) {
        struct fgr_hostfn_area *a = &runner_ring->m->hostfn;
        __atomic_store_n(&runner_stop, 1, __ATOMIC_RELEASE);
        __atomic_fetch_add(&a->reached_seq, 1, __ATOMIC_RELEASE);
        fgr_futex_wake(&a->reached_seq);
        while (!__atomic_load_n(&runner_gone, __ATOMIC_ACQUIRE))
            fgr_futex_wait(&runner_gone, 0, 100);
    } else if (ran && chan_fd >= 0) {
        shutdown(chan_fd, SHUT_RDWR);
    }
    runner_ring = NULL;
    chan_fd = -1;
    chan_tls = NULL;
    chan_tried = 0;
    thread_running = 0;
    pthread_mutex_unlock(&mu);
    return ran;
}

/* The new connection current: its runner, where one ran before (a graph's
 * host nodes, made again there, call the program's functions through it;
 * a replay's functions too, so it is there before the replay). */
void fgr_hostfn_moved(int ran, int locked)
{
    if (!ran)
        return;
    pthread_mutex_lock(&mu);
    int r = runner_start(fgr_conn_ring(), locked);
    pthread_mutex_unlock(&mu);
    if (r)
        fgr_say("host functions of the moved program run on the calling thread from here on");
}
