/* Calls that wait for the device, without holding up the connection.
 *
 * The program's threads share one connection, and the executor answers in
 * order. A thread's cuStreamSynchronize made here as it came would hold
 * every other thread's call until the device was done: slower, and a
 * program whose threads depend on each other through the device (one waits
 * for a kernel that another thread's copy releases) would never end.
 *
 * So a call that waits (api/remote.api: wait=, after=) and comes flagged
 * FGR_FLAG_MAY_PEND gets a ticket when the device is still busy: a helper
 * thread waits for what the call waits for (an event recorded on its
 * stream as the call came, its event, or its context), and the request is
 * parked while the loop (main.c) serves what arrives: queued calls at once,
 * as a GPU takes work while a thread waits. When the ticket ends, the
 * parked call is made (for wait=, its answer is the wait's). When another
 * thread needs an answer (a round trip, or fgrNudge saying one is coming),
 * or another ticket ends, the parked call is answered "pending" with its
 * ticket, and the client learns the ticket's end through fgrWaitTickets
 * (remote/client/conn.c). */
#include "executor.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { FREE, WAITING, DONE };

static struct ticket {
    int state;     /* FREE, WAITING, DONE (set by the helper, atomically) */
    uint32_t id;   /* the slot, and a generation above it */
    int kind;      /* FGR_WAIT_* */
    int helped;    /* a helper thread waits for it */
    CUcontext ctx; /* the request's */
    CUevent ev;    /* recorded here for a stream; the call's for FGR_WAIT_EVENT */
    int own_ev;
    int wait_only; /* the request's FGR_FLAG_WAIT_ONLY */
    uint64_t arg;  /* cuCtxSynchronize_v2's context */
    unsigned op;
    uint32_t thread; /* the client's thread that waits */
    CUresult result;
} tickets[FGR_MAX_TICKETS];

static struct {
    CUresult (*setcur)(CUcontext);
    CUresult (*getcur)(CUcontext *);
} d;

int fgr_may_pend;
int fgr_wait_only;
int fgr_wait_then_make;
unsigned fgr_current_op;
int fgr_resume = -1;
int fgr_parked = -1;
uint32_t fgr_thread;

/* The first error of each client thread's queued calls, for that thread's
 * next syncpoint; a thread past the table's room shares one for all. */
#define DEFERRED_THREADS 64
static struct {
    uint32_t thread;
    CUresult err; /* CUDA_SUCCESS: a free entry */
} deferred[DEFERRED_THREADS];
static CUresult deferred_any;

void fgr_defer(uint32_t thread, CUresult r)
{
    int room = -1;
    for (int i = 0; i < DEFERRED_THREADS && r != CUDA_SUCCESS; i++) {
        if (deferred[i].err != CUDA_SUCCESS && deferred[i].thread == thread)
            return; /* the first one stays */
        if (deferred[i].err == CUDA_SUCCESS && room < 0)
            room = i;
    }
    if (r == CUDA_SUCCESS)
        return;
    if (room >= 0)
        deferred[room].thread = thread, deferred[room].err = r;
    else if (deferred_any == CUDA_SUCCESS)
        deferred_any = r;
}

CUresult fgr_deferred_take(uint32_t thread)
{
    for (int i = 0; i < DEFERRED_THREADS; i++)
        if (deferred[i].err != CUDA_SUCCESS && deferred[i].thread == thread) {
            CUresult r = deferred[i].err;
            deferred[i].err = CUDA_SUCCESS;
            return r;
        }
    CUresult r = deferred_any;
    deferred_any = CUDA_SUCCESS;
    return r;
}
static int bell = -1; /* an eventfd: helpers ring it when a ticket ends */
static int waits;     /* the driver has what parking needs */
static uint32_t generation;

static CUresult wait_tickets(unsigned *ids, CUresult *results, unsigned cap, unsigned *count);

void fgr_wait_init(void *driver)
{
    fgr_real[FGR_OP_fgrWaitTickets] = (void *)wait_tickets;
    *(void **)&d.setcur = dlsym(driver, "cuCtxSetCurrent");
    *(void **)&d.getcur = dlsym(driver, "cuCtxGetCurrent");
    bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    waits = fgr_drv.ev_create && fgr_drv.ev_record && fgr_drv.ev_query && fgr_drv.ev_sync && fgr_drv.ev_destroy &&
            d.setcur && d.getcur && bell >= 0;
    if (!waits)
        fgr_logf("waits hold the connection (%s)", bell < 0 ? "no eventfd" : "the driver lacks event functions");
}

int fgr_wait_bell(void) { return bell; }

static void release(struct ticket *t)
{
    if (t->own_ev && t->ev) {
        CUstreamCaptureMode m = fgr_relax();
        fgr_drv.ev_destroy(t->ev);
        fgr_unrelax(m);
    }
    t->ev = NULL;
    t->own_ev = 0;
    __atomic_store_n(&t->state, FREE, __ATOMIC_RELEASE);
}

static void *helper(void *arg)
{
    struct ticket *t = arg;
    CUresult r = d.setcur(t->ctx);
    if (r == CUDA_SUCCESS) {
        if (t->kind == FGR_WAIT_CONTEXT && t->arg)
            r = ((CUresult(*)(CUcontext))fgr_real[t->op])((CUcontext)(uintptr_t)t->arg);
        else if (t->kind == FGR_WAIT_CONTEXT)
            r = ((CUresult(*)(void))fgr_real[t->op])();
        else {
            CUstreamCaptureMode m = fgr_relax();
            r = fgr_drv.ev_sync(t->ev);
            fgr_unrelax(m);
        }
    }
    t->result = r;
    __atomic_store_n(&t->state, DONE, __ATOMIC_RELEASE);
    uint64_t one = 1;
    while (write(bell, &one, sizeof one) < 0 && errno == EINTR)
        ;
    return NULL;
}

static CUresult wait_for(int kind, uint64_t v, int per_thread);

/* A wait-only request is answered when its wait is (parked meanwhile, as
 * any): its call made then if nothing else was served meanwhile, else not
 * (wire.h). */
CUresult fgr_wait(int kind, uint64_t v, int per_thread)
{
    CUresult r = wait_for(kind, v, per_thread);
    return fgr_wait_only && r != FGR_WAITING && !fgr_wait_then_make ? (CUresult)FGR_NOT_MADE : r;
}

static CUresult wait_for(int kind, uint64_t v, int per_thread)
{
    if (fgr_resume >= 0) {
        struct ticket *t = &tickets[fgr_resume];
        fgr_resume = -1;
        CUresult r = t->result;
        /* The driver prints what kernels printed at a synchronization: a
         * wait a query saw end makes one, on its event, done by now. */
        if (r == CUDA_SUCCESS && t->ev && !t->helped) {
            CUstreamCaptureMode m = fgr_relax();
            fgr_drv.ev_sync(t->ev);
            fgr_unrelax(m);
        }
        release(t);
        if (kind == FGR_AFTER_STREAM)
            return r == CUDA_SUCCESS ? FGR_GO : r; /* waited: now the call itself */
        return r;
    }
    if (!fgr_may_pend || !waits)
        return FGR_GO;
    int slot = -1;
    for (int i = 0; i < FGR_MAX_TICKETS && slot < 0; i++)
        if (__atomic_load_n(&tickets[i].state, __ATOMIC_ACQUIRE) == FREE)
            slot = i;
    if (slot < 0)
        return FGR_GO; /* as many waits as tickets: this one holds the connection */
    struct ticket *t = &tickets[slot];
    *t = (struct ticket){
        .state = FREE, .kind = kind, .wait_only = fgr_wait_only, .op = fgr_current_op, .arg = v, .thread = fgr_thread};
    if (d.getcur(&t->ctx) != CUDA_SUCCESS)
        return FGR_GO;
    if (kind == FGR_WAIT_STREAM || kind == FGR_AFTER_STREAM) {
        CUstream s = (CUstream)(uintptr_t)v;
        CUresult (*record)(CUevent, CUstream) = per_thread ? fgr_drv.ev_record_pt : fgr_drv.ev_record;
        /* A capturing stream answers a wait with an error, made as it came. */
        if (!record || fgr_capturing(s, per_thread))
            return FGR_GO;
        CUstreamCaptureMode m = fgr_relax();
        int pending = fgr_drv.ev_create(&t->ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
        t->own_ev = pending;
        pending = pending && record(t->ev, s) == CUDA_SUCCESS && fgr_drv.ev_query(t->ev) == CUDA_ERROR_NOT_READY;
        fgr_unrelax(m);
        if (!pending) {
            release(t);
            return FGR_GO;
        }
    } else if (kind == FGR_WAIT_EVENT) {
        /* The program's event: asked as its wait would be, in its mode. */
        t->ev = (CUevent)(uintptr_t)v;
        if (fgr_drv.ev_query(t->ev) != CUDA_ERROR_NOT_READY)
            return FGR_GO;
    }
    t->id = (uint32_t)slot | (++generation << 8);
    __atomic_store_n(&t->state, WAITING, __ATOMIC_RELEASE);
    fgr_parked = slot;
    return FGR_WAITING;
}

int fgr_ticket_poll(int slot)
{
    struct ticket *t = &tickets[slot];
    int st = __atomic_load_n(&t->state, __ATOMIC_ACQUIRE);
    if (st != WAITING || t->helped || t->kind == FGR_WAIT_CONTEXT)
        return st == DONE;
    CUstreamCaptureMode m = fgr_relax();
    CUresult r = fgr_drv.ev_query(t->ev);
    fgr_unrelax(m);
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    t->result = r;
    __atomic_store_n(&t->state, DONE, __ATOMIC_RELEASE);
    return 1;
}

int fgr_ticket_help(int slot)
{
    struct ticket *t = &tickets[slot];
    if (t->helped || __atomic_load_n(&t->state, __ATOMIC_ACQUIRE) != WAITING)
        return 0;
    pthread_attr_t a;
    pthread_t th;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 << 10);
    int e = pthread_create(&th, &a, helper, t);
    pthread_attr_destroy(&a);
    if (e) {
        fgr_logf("no thread to wait with (%s): a wait holds the connection", strerror(e));
        return -1;
    }
    t->helped = 1;
    return 0;
}

void fgr_ticket_block(int slot)
{
    helper(&tickets[slot]);
    fgr_bell_drain();
}

uint32_t fgr_ticket_id(int slot) { return tickets[slot].id; }

void fgr_ticket_release(int slot) { release(&tickets[slot]); }

int fgr_ticket_after(int slot) { return tickets[slot].kind == FGR_AFTER_STREAM && !tickets[slot].wait_only; }

int fgr_ticket_can_poll(int slot) { return tickets[slot].kind != FGR_WAIT_CONTEXT; }

int fgr_tickets_done_besides(int slot)
{
    for (int i = 0; i < FGR_MAX_TICKETS; i++)
        if (i != slot && __atomic_load_n(&tickets[i].state, __ATOMIC_ACQUIRE) == DONE)
            return 1;
    return 0;
}

int fgr_tickets_waiting(void)
{
    for (int i = 0; i < FGR_MAX_TICKETS; i++)
        if (__atomic_load_n(&tickets[i].state, __ATOMIC_ACQUIRE) == WAITING)
            return 1;
    return 0;
}

void fgr_bell_drain(void)
{
    uint64_t n;
    while (read(bell, &n, sizeof n) > 0)
        ;
}

/* fgrWaitTickets: the tickets that ended (at most cap), each with its
 * wait's answer; none yet parks the request while any is waiting. A wait
 * that succeeded carries the first error of its thread's queued calls, as
 * its syncpoint's answer would have. */
static CUresult wait_tickets(unsigned *ids, CUresult *results, unsigned cap, unsigned *count)
{
    if (!count || (cap && (!ids || !results)))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned n = 0;
    for (int i = 0; i < FGR_MAX_TICKETS && n < cap; i++) {
        struct ticket *t = &tickets[i];
        if (!fgr_ticket_poll(i))
            continue;
        ids[n] = t->id;
        results[n] = t->result;
        /* (a wait-only request's call, sent again, takes it) */
        if (results[n] == CUDA_SUCCESS && t->kind != FGR_AFTER_STREAM && !t->wait_only)
            results[n] = fgr_deferred_take(t->thread);
        n++;
        release(t);
    }
    if (n == 0 && fgr_may_pend && fgr_tickets_waiting()) {
        fgr_parked = FGR_PARKED_ANY;
        return FGR_WAITING;
    }
    *count = n;
    return CUDA_SUCCESS;
}
