/* Host functions (remote/ring.h, remote/wire.h): the program's function is
 * the client's, so the executor enqueues a gate of its own where the
 * function is due. The driver runs the gate on its own thread; the gate
 * hands the function's id to the client and sleeps until the client says
 * it has returned, holding the stream as the function would: over shm://
 * through the shared memory, over a socket through the connection's
 * host-function channel, a second connection flexgv serve hands over
 * (--hostfn-fd) and a thread here reads. The executor's loop takes no
 * part, so it may wait for the device meanwhile (a cuMemFree, a
 * synchronous copy) without a deadlock.
 *
 * The client can write the shared memory and the channel: a gate only ever
 * waits for its own answer, and one the client never gives holds this
 * connection's streams alone, as its own function could. The channel's
 * end, or the executor's, releases every gate. */
#include "executor.h"
#include "../futex.h"
#include "../ring.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct fgr_hostfn_area *area;
static uint8_t *area_data; /* FGR_HOSTFN_DATA_BYTES, shared with the client */
static int ending; /* the executor exits: gates return at once */
/* Gates whose function the client runs now, and when the first of them
 * began (move.c asks: a function may wait for the program). */
static uint32_t running;
static uint64_t running_since;
static CUresult (*launch_host)(CUstream, CUhostFn, void *), (*launch_host_pt)(CUstream, CUhostFn, void *);
static CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *), (*is_capturing_pt)(CUstream, CUstreamCaptureStatus *);
static CUresult (*add_host_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_HOST_NODE_PARAMS *);
static CUresult (*host_node_get)(CUgraphNode, CUDA_HOST_NODE_PARAMS *);
static CUresult (*host_node_set)(CUgraphNode, const CUDA_HOST_NODE_PARAMS *);
static CUresult (*exec_host_node_set)(CUgraphExec, CUgraphNode, const CUDA_HOST_NODE_PARAMS *);
static CUresult (*user_object_create)(CUuserObject *, void *, CUhostFn, unsigned int, unsigned int);

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static void run_begins(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t now = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
    if (__atomic_fetch_add(&running, 1, __ATOMIC_ACQ_REL) == 0)
        __atomic_store_n(&running_since, now, __ATOMIC_RELEASE);
}

static void run_ends(void) { __atomic_sub_fetch(&running, 1, __ATOMIC_ACQ_REL); }

uint64_t fgr_hostfn_running_since(void)
{
    return __atomic_load_n(&running, __ATOMIC_ACQUIRE) ? __atomic_load_n(&running_since, __ATOMIC_ACQUIRE) : 0;
}

/* A host node's: the buffers its earlier copy nodes wrote, put in the data
 * area once the gate holds it; how many (0: none, or too many bytes). */
static uint32_t put_early(uint64_t id)
{
    struct fgr_span *v = NULL;
    size_t n = id & FGR_HOSTFN_KEEP ? fgr_hostcopy_early(id, &v) : 0;
    uint64_t need = 0;
    for (size_t i = 0; i < n && need <= FGR_HOSTFN_DATA_BYTES; i++)
        need += 16 + (v[i].len > FGR_HOSTFN_DATA_BYTES ? FGR_HOSTFN_DATA_BYTES : (v[i].len + 7) / 8 * 8);
    if (!n || need > FGR_HOSTFN_DATA_BYTES) {
        free(v);
        return 0;
    }
    uint32_t idle = 0;
    while (!__atomic_compare_exchange_n(&area->data_busy, &idle, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        if (__atomic_load_n(&ending, __ATOMIC_ACQUIRE)) {
            free(v);
            return 0;
        }
        idle = 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    uint8_t *p = area_data;
    for (size_t i = 0; i < n; i++) {
        put64(p, v[i].base);
        put64(p + 8, v[i].len);
        memcpy(p + 16, (const void *)(uintptr_t)v[i].base, v[i].len);
        p += 16 + (v[i].len + 7) / 8 * 8;
    }
    free(v);
    return (uint32_t)n;
}

static void gate(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint32_t ndata = put_early(id);
    struct fgr_hostfn_slot *s = NULL;
    while (!s) {
        for (int i = 0; i < FGR_HOSTFN_SLOTS && !s; i++) {
            uint32_t free_ = FGR_HOSTFN_FREE;
            if (__atomic_compare_exchange_n(&area->slot[i].state, &free_, FGR_HOSTFN_CLAIMED, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                s = &area->slot[i];
        }
        if (!s && __atomic_load_n(&ending, __ATOMIC_ACQUIRE)) {
            if (ndata)
                __atomic_store_n(&area->data_busy, 0, __ATOMIC_RELEASE);
            return;
        }
        if (!s) { /* as many functions due at once as there are slots */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    __atomic_store_n(&s->id, id, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ndata, ndata, __ATOMIC_RELAXED);
    run_begins();
    __atomic_store_n(&s->state, FGR_HOSTFN_REACHED, __ATOMIC_RELEASE);
    __atomic_add_fetch(&area->reached_seq, 1, __ATOMIC_ACQ_REL);
    fgr_futex_wake(&area->reached_seq);
    while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == FGR_HOSTFN_REACHED && !__atomic_load_n(&ending, __ATOMIC_ACQUIRE))
        fgr_futex_wait(&s->state, FGR_HOSTFN_REACHED, 1000);
    run_ends();
    __atomic_store_n(&s->state, FGR_HOSTFN_FREE, __ATOMIC_RELEASE);
    if (ndata)
        __atomic_store_n(&area->data_busy, 0, __ATOMIC_RELEASE);
}

/* ---- over a socket: the channel ---- */

static int ctl_fd = -1;                       /* from flexgv serve: the secret, then the channel */
static uint8_t secret[FGR_CHANNEL_SECRET];
static int chan_fd = -1;
static enum { AWAITED, OPEN, CLOSED } chan_state; /* under chan_mu */
static pthread_mutex_t chan_mu = PTHREAD_MUTEX_INITIALIZER, chan_wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t chan_cv = PTHREAD_COND_INITIALIZER;
/* The gates waiting for their answer, each on its own stack. */
static struct waiter {
    uint64_t seq;
    int done;
    struct waiter *next;
} *waiters;
static uint64_t last_seq;

static void chan_close_locked(void)
{
    chan_state = CLOSED;
    if (chan_fd >= 0)
        shutdown(chan_fd, SHUT_RDWR);
    pthread_cond_broadcast(&chan_cv);
}

static void gate_socket(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    pthread_mutex_lock(&chan_mu);
    while (chan_state == AWAITED && !__atomic_load_n(&ending, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&chan_cv, &chan_mu);
    if (chan_state != OPEN || __atomic_load_n(&ending, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&chan_mu);
        return;
    }
    struct waiter me = {++last_seq, 0, waiters};
    waiters = &me;
    pthread_mutex_unlock(&chan_mu);
    run_begins();
    /* A host node's: the buffers its earlier copy nodes wrote, as they are. */
    struct fgr_span *v = NULL;
    size_t n = id & FGR_HOSTFN_KEEP ? fgr_hostcopy_early(id, &v) : 0;
    uint8_t m[24];
    put64(m, me.seq);
    put64(m + 8, id);
    put64(m + 16, n);
    pthread_mutex_lock(&chan_wmu);
    int bad = fgr_write_all(chan_fd, m, sizeof m);
    for (size_t i = 0; i < n && !bad; i++) {
        put64(m, v[i].base);
        put64(m + 8, v[i].len);
        bad = fgr_write_all(chan_fd, m, 16) || fgr_write_all(chan_fd, (const void *)(uintptr_t)v[i].base, v[i].len);
    }
    pthread_mutex_unlock(&chan_wmu);
    free(v);
    pthread_mutex_lock(&chan_mu);
    if (bad)
        chan_close_locked();
    while (!me.done && chan_state == OPEN && !__atomic_load_n(&ending, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&chan_cv, &chan_mu);
    for (struct waiter **w = &waiters; *w; w = &(*w)->next)
        if (*w == &me) {
            *w = me.next;
            break;
        }
    pthread_mutex_unlock(&chan_mu);
    run_ends();
}

/* Takes the channel from flexgv serve, then reads the client's answers:
 * an answer no gate waits for (a hostile client's) changes nothing. */
static void *channel_reader(void *arg)
{
    (void)arg;
    int fd = fgr_recv_fd(ctl_fd);
    pthread_mutex_lock(&chan_mu);
    chan_fd = fd;
    if (fd < 0) {
        chan_close_locked();
        pthread_mutex_unlock(&chan_mu);
        return NULL;
    }
    chan_state = __atomic_load_n(&ending, __ATOMIC_ACQUIRE) ? CLOSED : OPEN;
    pthread_cond_broadcast(&chan_cv);
    pthread_mutex_unlock(&chan_mu);
    uint8_t m[8];
    while (fgr_read_all(fd, m, sizeof m) == 0) {
        uint64_t seq = 0;
        for (int i = 0; i < 8; i++)
            seq |= (uint64_t)m[i] << 8 * i;
        pthread_mutex_lock(&chan_mu);
        for (struct waiter *w = waiters; w; w = w->next)
            if (w->seq == seq)
                w->done = 1;
        pthread_cond_broadcast(&chan_cv);
        pthread_mutex_unlock(&chan_mu);
    }
    pthread_mutex_lock(&chan_mu);
    chan_close_locked();
    pthread_mutex_unlock(&chan_mu);
    return NULL;
}

/* --hostfn-fd: the secret comes first; nonzero when it does not. */
int fgr_hostfn_channel_fd(int fd)
{
    if (fgr_read_all(fd, secret, sizeof secret))
        return -1;
    ctl_fd = fd;
    return 0;
}

static void (*the_gate)(void *) = gate;

/* fgrHostFn: the gate where the function named id is due; one enqueued
 * in a capture becomes the graph's host node and runs at every launch, so
 * its id is marked to be kept. */
static CUresult host_fn(CUstream s, unsigned long long id, unsigned int pt)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = (pt ? is_capturing_pt : is_capturing)(s, &st);
    if (r != CUDA_SUCCESS)
        return r;
    id &= ~FGR_HOSTFN_KEEP;
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        id |= FGR_HOSTFN_KEEP;
    return (pt ? launch_host_pt : launch_host)(s, the_gate, (void *)(uintptr_t)id);
}

/* fgrGraphAddHostNode: the gate as the node's function, for the client's
 * function named id, which every launch runs. */
static CUresult host_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                          size_t numDependencies, unsigned long long id)
{
    CUDA_HOST_NODE_PARAMS p = {the_gate, (void *)(uintptr_t)(id | FGR_HOSTFN_KEEP)};
    return add_host_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

static void *driver_handle;

/* fgrGraphHostNodeGetId: the client's function a host node runs, by id
 * (a node whose function is not the gate is none of the client's). */
static CUresult host_node_id(CUgraphNode hNode, unsigned long long *id)
{
    CUDA_HOST_NODE_PARAMS p;
    CUresult r = id ? host_node_get(hNode, &p) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && p.fn != the_gate)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *id = (unsigned long long)(uintptr_t)p.userData & ~FGR_HOSTFN_KEEP;
    return r;
}

/* fgrGraphHostNodeSetId: the node (hGraphExec NULL) or an executable's
 * copy runs the client's function id from now on. */
static CUresult host_node_set_id(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned long long id)
{
    CUDA_HOST_NODE_PARAMS p = {the_gate, (void *)(uintptr_t)(id | FGR_HOSTFN_KEEP)};
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (hGraphExec)
        return exec_host_node_set ? exec_host_node_set(hGraphExec, hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
    return host_node_set ? host_node_set(hNode, &p) : CUDA_ERROR_NOT_SUPPORTED;
}

/* fgrUserObjectCreate: the gate as the destructor, for the client's
 * function named id, run once when the driver lets the object go. */
static CUresult user_object(CUuserObject *object_out, unsigned long long id, unsigned int initialRefcount,
                            unsigned int flags)
{
    if (!id || (id & FGR_HOSTFN_KEEP))
        return CUDA_ERROR_INVALID_VALUE;
    return user_object_create(object_out, (void *)(uintptr_t)id, the_gate, initialRefcount, flags);
}

/* The host-node operations, once the gate is known. */
static void host_nodes_served(void)
{
    if (user_object_create)
        fgr_real[FGR_OP_fgrUserObjectCreate] = (void *)user_object;
    if (add_host_node)
        fgr_real[FGR_OP_fgrGraphAddHostNode] = (void *)host_node;
    if (host_node_get)
        fgr_real[FGR_OP_fgrGraphHostNodeGetId] = (void *)host_node_id;
    if (host_node_set || exec_host_node_set)
        fgr_real[FGR_OP_fgrGraphHostNodeSetId] = (void *)host_node_set_id;
}

void fgr_hostfn_init(void *driver)
{
    driver_handle = driver;
    *(void **)&add_host_node = dlsym(driver, "cuGraphAddHostNode");
    *(void **)&host_node_get = dlsym(driver, "cuGraphHostNodeGetParams");
    *(void **)&host_node_set = dlsym(driver, "cuGraphHostNodeSetParams");
    *(void **)&exec_host_node_set = dlsym(driver, "cuGraphExecHostNodeSetParams");
    *(void **)&user_object_create = dlsym(driver, "cuUserObjectCreate");
    *(void **)&launch_host = dlsym(driver, "cuLaunchHostFunc");
    *(void **)&launch_host_pt = dlsym(driver, "cuLaunchHostFunc_ptsz");
    *(void **)&is_capturing = dlsym(driver, "cuStreamIsCapturing");
    *(void **)&is_capturing_pt = dlsym(driver, "cuStreamIsCapturing_ptsz");
}

/* At exit (the client gone), before the driver's own teardown, which may
 * wait for the thread a gate holds: every gate returns. */
static void end_gates(void)
{
    __atomic_store_n(&ending, 1, __ATOMIC_RELEASE);
    for (int i = 0; area && i < FGR_HOSTFN_SLOTS; i++)
        fgr_futex_wake(&area->slot[i].state);
    pthread_mutex_lock(&chan_mu);
    chan_close_locked();
    pthread_mutex_unlock(&chan_mu);
}

/* The handshake's last words: over a socket the channel's secret, when
 * flexgv serve gave one and its thread runs; without it fgrHostFn stays
 * unsupported and the client runs functions itself, after their stream's
 * work. */
void fgr_hostfn_hello(struct fgr_buf *w, uint32_t transport)
{
    pthread_t t;
    pthread_attr_t at;
    int offer = transport != FGR_TRANSPORT_SHM && ctl_fd >= 0 && launch_host && launch_host_pt && is_capturing &&
                is_capturing_pt && pthread_attr_init(&at) == 0;
    if (offer) {
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 64 << 10);
        offer = pthread_create(&t, &at, channel_reader, NULL) == 0;
        pthread_attr_destroy(&at);
        if (!offer)
            fgr_logf("no thread for the host-function channel: host functions run on the client after their stream's work");
    }
    fgr_put_u8(w, offer ? FGR_CHANNEL_SECRET : 0);
    if (!offer)
        return;
    fgr_put_bytes(w, secret, sizeof secret);
    the_gate = gate_socket;
    fgr_hostcopy_learning(driver_handle, gate_socket);
    fgr_real[FGR_OP_fgrHostFn] = (void *)host_fn;
    host_nodes_served();
    atexit(end_gates);
}

/* Over shm://. */
void fgr_hostfn_attach(struct fgr_ring *r)
{
    if (!launch_host || !launch_host_pt || !is_capturing || !is_capturing_pt)
        return;
    area = &r->m->hostfn;
    area_data = r->hostfn_data;
    fgr_hostcopy_learning(driver_handle, gate);
    fgr_real[FGR_OP_fgrHostFn] = (void *)host_fn;
    host_nodes_served();
    atexit(end_gates);
}
