/* Host functions over shm:// (remote/ring.h): the program's function is
 * the client's, so the executor enqueues a gate of its own where the
 * function is due. The driver runs the gate on its own thread; the gate
 * hands the function's id to the client through the shared memory and
 * sleeps until the client says it has returned, holding the stream as the
 * function would. The executor's loop takes no part, so it may wait for the
 * device meanwhile (a cuMemFree, a synchronous copy) without a deadlock.
 *
 * The client can write the shared memory: a gate only ever waits on its
 * own slot, and one the client never releases holds this connection's
 * stream alone, as its own function could. */
#include "executor.h"
#include "../futex.h"
#include "../ring.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static struct fgr_hostfn_area *area;
static int ending; /* the executor exits: gates return at once */
static CUresult (*launch_host)(CUstream, CUhostFn, void *), (*launch_host_pt)(CUstream, CUhostFn, void *);
static CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *), (*is_capturing_pt)(CUstream, CUstreamCaptureStatus *);
static CUresult (*add_host_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_HOST_NODE_PARAMS *);

static void gate(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    struct fgr_hostfn_slot *s = NULL;
    while (!s) {
        for (int i = 0; i < FGR_HOSTFN_SLOTS && !s; i++) {
            uint32_t free_ = FGR_HOSTFN_FREE;
            if (__atomic_compare_exchange_n(&area->slot[i].state, &free_, FGR_HOSTFN_CLAIMED, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
                s = &area->slot[i];
        }
        if (!s && __atomic_load_n(&ending, __ATOMIC_ACQUIRE))
            return;
        if (!s) { /* as many functions due at once as there are slots */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    __atomic_store_n(&s->id, id, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, FGR_HOSTFN_REACHED, __ATOMIC_RELEASE);
    __atomic_add_fetch(&area->reached_seq, 1, __ATOMIC_ACQ_REL);
    fgr_futex_wake(&area->reached_seq);
    while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == FGR_HOSTFN_REACHED && !__atomic_load_n(&ending, __ATOMIC_ACQUIRE))
        fgr_futex_wait(&s->state, FGR_HOSTFN_REACHED, 1000);
    __atomic_store_n(&s->state, FGR_HOSTFN_FREE, __ATOMIC_RELEASE);
}

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
    return (pt ? launch_host_pt : launch_host)(s, gate, (void *)(uintptr_t)id);
}

/* fgrGraphAddHostNode: the gate as the node's function, for the client's
 * function named id, which every launch runs. */
static CUresult host_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                          size_t numDependencies, unsigned long long id)
{
    CUDA_HOST_NODE_PARAMS p = {gate, (void *)(uintptr_t)(id | FGR_HOSTFN_KEEP)};
    return add_host_node(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

void fgr_hostfn_init(void *driver)
{
    *(void **)&add_host_node = dlsym(driver, "cuGraphAddHostNode");
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
    for (int i = 0; i < FGR_HOSTFN_SLOTS; i++)
        fgr_futex_wake(&area->slot[i].state);
}

/* Over shm:// alone; elsewhere fgrHostFn stays unsupported and the client
 * runs functions itself, after their stream's work. */
void fgr_hostfn_attach(struct fgr_ring *r)
{
    if (!launch_host || !launch_host_pt || !is_capturing || !is_capturing_pt)
        return;
    area = &r->m->hostfn;
    fgr_real[FGR_OP_fgrHostFn] = (void *)host_fn;
    if (add_host_node)
        fgr_real[FGR_OP_fgrGraphAddHostNode] = (void *)host_node;
    atexit(end_gates);
}
