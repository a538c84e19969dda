/* The compute policy's hooks (compute.h describes the policy). */
#include "compute.h"

/* Whether this process holds every GPU it is scheduled on uncapped, alone
 * there (then its launches go straight through, counted) or with only
 * processes that run beside it (beside_everywhere). */
static inline __attribute__((always_inline)) int straight_through(void)
{
    int n = __atomic_load_n(&nmine, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        struct gpu *g = mine_list[i];
        if (__atomic_load_n(&g->state, __ATOMIC_RELAXED) != G_READY || LOAD(&g->hdr->holder) != g->mine + 1 ||
            cap_of(g))
            return 0;
        if (FG_UNLIKELY(others_in(g, g->hdr->present)))
            return beside_everywhere(n);
    }
    for (int i = 0; i < n; i++)
        __atomic_store_n(&mine_list[i]->me->launches, mine_list[i]->me->launches + 1, __ATOMIC_RELAXED);
    return n > 0;
}

/* enter's answer for a GPU this process could not join, when refusing. */
static struct gpu refused;

/* The GPU a launch on s is scheduled on, locked, once this process may
 * launch there; NULL: the launch goes straight through; &refused: it is
 * refused. */
static struct gpu *enter(CUstream s)
{
    if (fg_stream_capturing(s, 0) == 1)
        return NULL; /* a graph node: its graph's launch takes the turn */
    int dev = fg_current_device();
    struct gpu *g = scheduled(dev);
    if (!g)
        return dev >= 0 && dev < FG_NDEV && __atomic_load_n(&gpus[dev].state, __ATOMIC_ACQUIRE) == G_REFUSED ? &refused
                                                                                                              : NULL;
    pthread_mutex_lock(&g->lock);
    gate(g);
    mark_start(g, s);
    if (FG_UNLIKELY(g->turn.clock_want))
        turn_clock_start(g, s);
    __atomic_store_n(&g->me->launches, g->me->launches + 1, __ATOMIC_RELAXED);
    return g;
}

/* Tracks what a launch at `at` left running on s, and unlocks g. */
static CUresult leave(struct gpu *g, CUstream s, uint64_t at, CUresult r)
{
    if (r == CUDA_SUCCESS && g->state == G_READY)
        track(g, s, at);
    event_put(g, g->cap.start, 1); /* the launch failed */
    g->cap.start = NULL;
    g->cap.begins = 0;
    pthread_mutex_unlock(&g->lock);
    return r;
}

/* A call that may block for as long as it copies runs with g unlocked (the
 * process's other threads launch meanwhile) and counted in flight (waiters
 * must not see us idle); whether it begins a busy period, and the start
 * event enter recorded for it, are kept aside for its own leave. */
struct begun {
    CUevent start;
    int begins;
};

static struct begun block(struct gpu *g)
{
    struct begun b = {g->cap.start, g->cap.begins};
    g->cap.start = NULL;
    g->cap.begins = 0;
    g->flight.blocked++;
    STORE(&g->me->inflight, g->flight.count + g->flight.blocked);
    pthread_mutex_unlock(&g->lock);
    return b;
}

static void unblock(struct gpu *g, struct begun b)
{
    pthread_mutex_lock(&g->lock);
    g->flight.blocked--;
    STORE(&g->me->inflight, g->flight.count + g->flight.blocked);
    g->cap.start = b.start;
    g->cap.begins = b.begins;
}

/* Launch through the policy: LAUNCH is the program's call on stream s. A
 * process alone on its GPUs, holding them uncapped, goes straight through;
 * so does one the others run beside (beside_us). */
#define SCHEDULED(s, per_thread, LAUNCH)                                                                    \
    do {                                                                                                    \
        if (FG_LIKELY(straight_through()))                                                                  \
            return LAUNCH;                                                                                  \
        CUstream s_ = (per_thread) && (s) == NULL ? CU_STREAM_PER_THREAD : (s);                             \
        struct gpu *g_ = enter(s_);                                                                         \
        if (!g_)                                                                                            \
            return LAUNCH;                                                                                  \
        if (g_ == &refused)                                                                                 \
            return CUDA_ERROR_NOT_PERMITTED;                                                                \
        uint64_t at_ = fg_now_ns();                                                                         \
        return leave(g_, s_, at_, LAUNCH);                                                                  \
    } while (0)

/* A synchronous copy or memset, on the default stream: it takes its turn
 * as a launch does, and what it leaves running (a memset or a device copy
 * returns before it completes) is tracked after it. AFTER is applied to
 * its result: a copy back to the host is also a synchronization. */
#define SCHEDULED_BLOCKING(per_thread, AFTER, CALL)                                                         \
    do {                                                                                                    \
        if (FG_LIKELY(straight_through()))                                                                  \
            return CALL;                                                                                    \
        CUstream s_ = (per_thread) ? CU_STREAM_PER_THREAD : NULL;                                           \
        struct gpu *g_ = enter(s_);                                                                         \
        if (!g_)                                                                                            \
            return CALL;                                                                                    \
        if (g_ == &refused)                                                                                 \
            return CUDA_ERROR_NOT_PERMITTED;                                                                \
        struct begun b_ = block(g_);                                                                        \
        uint64_t at_ = fg_now_ns();                                                                         \
        CUresult r_ = CALL;                                                                                 \
        unblock(g_, b_);                                                                                    \
        return AFTER(leave(g_, s_, at_, r_), at_);                                                          \
    } while (0)
#define AS_IS(r, at) (r)
/* A synchronization: synced is told when it began. */
#define SYNCED(CALL)                                                                                        \
    do {                                                                                                    \
        uint64_t at_ = fg_now_ns();                                                                         \
        CUresult r_ = CALL;                                                                                 \
        return synced(r_, at_);                                                                             \
    } while (0)
/* A stream's synchronization: what was tracked on it before it began is
 * known done, without a query. */
#define SYNCED_STREAM(s, per_thread, CALL)                                                                  \
    do {                                                                                                    \
        uint64_t upto_ = __atomic_load_n(&tracked, __ATOMIC_ACQUIRE), at_ = fg_now_ns();                    \
        CUresult r_ = CALL;                                                                                 \
        CUstream s_ = (per_thread) && (s) == NULL ? CU_STREAM_PER_THREAD : (s);                             \
        return synced_on(r_, fg_current_device(), at_, &s_, upto_);                                         \
    } while (0)

CUresult fg_compute_cuLaunchKernelEx(fg_real_cuLaunchKernelEx next, const CUlaunchConfig *config, CUfunction f,
                                     void **params, void **extra)
{
    if (!config)
        return next(config, f, params, extra);
    SCHEDULED(config->hStream, 0, next(config, f, params, extra));
}

CUresult fg_compute_cuLaunchKernelEx_ptsz(fg_real_cuLaunchKernelEx_ptsz next, const CUlaunchConfig *config,
                                          CUfunction f, void **params, void **extra)
{
    if (!config)
        return next(config, f, params, extra);
    SCHEDULED(config->hStream, 1, next(config, f, params, extra));
}

/* A graph launch is bracketed as a whole. */
CUresult fg_compute_cuGraphLaunch(fg_real_cuGraphLaunch next, CUgraphExec exec, CUstream s)
{
    SCHEDULED(s, 0, next(exec, s));
}

CUresult fg_compute_cuGraphLaunch_ptsz(fg_real_cuGraphLaunch_ptsz next, CUgraphExec exec, CUstream s)
{
    SCHEDULED(s, 1, next(exec, s));
}

/* A holder that synchronized with nothing in flight, whose pauses there
 * tend to last (a server between requests), says so in its slot until its
 * next launch: an equal waiting takes the GPU at once (may_take), where it
 * would wait a poll to see it idle. Two servers of one priority, requests
 * of 0.5 ms every 2.5 ms, had p50 1.05 ms, twice their alone time. */
static void mark_paused(struct gpu *g)
{
    if (LOAD(&g->hdr->holder) == g->mine + 1 && !__atomic_load_n(&g->flight.count, __ATOMIC_RELAXED) &&
        __atomic_load_n(&g->turn.gap_avg, __ATOMIC_RELAXED) >= LEND_NS)
        STORE(&g->me->paused, (uint32_t)LOAD(&g->me->launches) + 1);
}

/* After a synchronization (begun at `at`; of stream *s, if s, before which
 * `upto` launches were tracked), what completed is said at once:
 * waiters then see an idle holder without waiting for its next launch; and
 * a holder of higher priority than those waiting, whose pauses after a
 * synchronization tend to be long (a server between requests, not a loop),
 * lends them the GPU at once (it takes it back at its next launch); where
 * they do not, it wakes them to take this pause if it lasts. */
static CUresult synced_on(CUresult r, int dev, uint64_t at, const CUstream *s, uint64_t upto)
{
    struct gpu *g = r == CUDA_SUCCESS ? scheduled(dev) : NULL;
    if (g)
        note_request(g, at, fg_now_ns());
    if (!g)
        return r;
    if (!__atomic_load_n(&g->flight.count, __ATOMIC_RELAXED) &&
        (LOAD(&g->hdr->holder) != g->mine + 1 || !others_in(g, g->hdr->waiting))) {
        mark_paused(g);
        return r;
    }
    pthread_mutex_lock(&g->lock);
    if (g->state == G_READY) {
        uint64_t now = fg_now_ns();
        if (s) {
            uintptr_t lane[2];
            lane_of(*s, lane);
            known_done(g, lane, upto);
        }
        reap(g, now);
        if (!g->flight.count) {
            __atomic_store_n(&g->turn.idle_at, now, __ATOMIC_RELAXED);
            mark_paused(g);
        }
        /* What the GPU did for us until now is paid at once: taken from
         * while idle after this, we are charged only the idle time. */
        if (LOAD(&g->hdr->holder) == g->mine + 1 && others_in(g, g->hdr->waiting))
            pay(g, g->t, 2 * g->quantum, now);
        int next = g->flight.count || LOAD(&g->hdr->holder) != g->mine + 1 ? -1 : best_waiter(g, (int)g->mine);
        if (next >= 0 && priority_of(g, next) < LOAD(&g->t->priority) && !beside_us(g, now)) {
            if (__atomic_load_n(&g->turn.gap_avg, __ATOMIC_RELAXED) >= LEND_NS)
                hand_over(g, 0);
            else if (LOAD(&g->t->host_bound) >= BESIDE_HOST)
                wake_all(g); /* it takes this pause once it lasts (may_take) */
        }
    }
    pthread_mutex_unlock(&g->lock);
    return r;
}

static CUresult synced(CUresult r, uint64_t at) { return synced_on(r, fg_current_device(), at, NULL, 0); }

/* CUDA 13 runtimes synchronize a device through this one; it names the
 * context (NULL: the current one), whose GPU is the one now idle. */
CUresult fg_compute_cuCtxSynchronize_v2(fg_real_cuCtxSynchronize_v2 next, CUcontext ctx)
{
    uint64_t at = fg_now_ns();
    CUresult r = next(ctx);
    fg_real_cuCtxGetDevice_v2 dev_of = REAL(cuCtxGetDevice_v2);
    CUdevice dev;
    if (!ctx || r != CUDA_SUCCESS || !dev_of || dev_of(&dev, ctx) != CUDA_SUCCESS)
        return synced(r, at);
    return synced_on(r, dev, at, NULL, 0);
}

/* A 2D or 3D copy into host memory is a synchronization too. */
#define COPY2D_BLOCKING(per_thread, c, CALL)                                                                \
    do {                                                                                                    \
        if ((c) && (c)->dstMemoryType == CU_MEMORYTYPE_HOST)                                                \
            SCHEDULED_BLOCKING(per_thread, synced, CALL);                                                   \
        SCHEDULED_BLOCKING(per_thread, AS_IS, CALL);                                                        \
    } while (0)

CUresult fg_compute_cuMemcpy2D_v2(fg_real_cuMemcpy2D_v2 next, const CUDA_MEMCPY2D *c)
{
    COPY2D_BLOCKING(0, c, next(c));
}

CUresult fg_compute_cuMemcpy2D_v2_ptds(fg_real_cuMemcpy2D_v2_ptds next, const CUDA_MEMCPY2D *c)
{
    COPY2D_BLOCKING(1, c, next(c));
}

CUresult fg_compute_cuMemcpy2DUnaligned_v2(fg_real_cuMemcpy2DUnaligned_v2 next, const CUDA_MEMCPY2D *c)
{
    COPY2D_BLOCKING(0, c, next(c));
}

CUresult fg_compute_cuMemcpy2DUnaligned_v2_ptds(fg_real_cuMemcpy2DUnaligned_v2_ptds next, const CUDA_MEMCPY2D *c)
{
    COPY2D_BLOCKING(1, c, next(c));
}

CUresult fg_compute_cuMemcpy3D_v2(fg_real_cuMemcpy3D_v2 next, const CUDA_MEMCPY3D *c)
{
    COPY2D_BLOCKING(0, c, next(c));
}

CUresult fg_compute_cuMemcpy3D_v2_ptds(fg_real_cuMemcpy3D_v2_ptds next, const CUDA_MEMCPY3D *c)
{
    COPY2D_BLOCKING(1, c, next(c));
}

/* The hooks of one of the usual forms (api/cuda.api's compute:FORM), written
 * by the generator with the macros above: launches, copies and memsets
 * occupy the GPU's engines as kernels do its SMs, and take turns too. */
#include "compute_gen.inc"
