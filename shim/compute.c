/* The compute policy's hooks (compute.h describes the policy). */
#include "compute.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Waits until this process may launch one more piece of work on g (g
 * locked throughout, but for waits). */
static void gate(struct gpu *g)
{
    /* Only MPS clients measure their requests (for beside). */
    uint64_t waited_from = 0, entered = g->mps ? fg_now_ns() : 0;
    int by = 0; /* launching beside the holder */
    if (entered && !__atomic_load_n(&g->side.request_at, __ATOMIC_RELAXED))
        __atomic_store_n(&g->side.request_at, entered, __ATOMIC_RELAXED);
    pause_ends(g, fg_now_ns());
    for (int looked = 0;; looked = 1) {
        if (__atomic_load_n(&g->state, __ATOMIC_ACQUIRE) != G_READY)
            break; /* the region was lost under us */
        uint64_t now = fg_now_ns();
        if (now - g->swept_at >= SWEEP_NS)
            sweep(g, now);
        /* An event query costs an H200's driver 1.4 us, seven times what
         * recording the event did (bench/driver_calls.cu): a launch looks
         * at completions once a REAP_NS, which the estimates below can
         * afford (what is found done late counts as in flight meanwhile:
         * a holder, capped or not, waits early rather than late); after a
         * wait, at every look. */
        if (looked || now - g->flight.reaped_at >= REAP_NS)
            reap(g, now);
        uint32_t h = LOAD(&g->hdr->holder);
        if (h == g->mine + 1) {
            if (!g->turn.holding) { /* our turn starts */
                g->turn.holding = 1;
                g->side.ran = 0;
                g->turn.at = LOAD(&g->hdr->since_ns);
                STORE(&g->hdr->turn_ends_ns, g->turn.at + g->quantum);
            }
            int others = others_in(g, g->hdr->waiting), present = others_in(g, g->hdr->present);
            int next = others ? best_waiter(g, (int)g->mine) : -1;
            uint32_t np = priority_of(g, next), mp = LOAD(&g->t->priority);
            struct fg_sched_tenant *nt = next >= 0 && np == mp ? tenant_of(g, (uint32_t)next) : NULL;
            if (next >= 0 && np > mp) {
                hand_over(g, 1);
                continue;
            }
            if (nt && leads(g, nt, g->t) > 0) { /* the gang's other GPUs have gone to it */
                give(g, 0, 0);
                continue;
            }
            /* Until that holder has decided: it hands over, or launches on
             * (its turn goes on), or GANG_WAIT_NS pass (it may be waiting
             * for our collective, launched past its last look); while the
             * other gang holds it, until its rank here takes our GPU, for
             * at most a quantum (it may never come). */
            int ending;
            struct gpu *l = gang_turn_over(g, now, &ending);
            uint64_t ends = l ? LOAD(&l->hdr->turn_ends_ns) : 0, seen = ending ? LOAD(&l->slots[ending - 1].launches) : 0;
            if (l && ends != g->gang.turn)
                g->gang.turn = ends, g->gang.from = now, g->gang.launches = seen;
            if (l && (ending ? now - g->gang.from < GANG_WAIT_NS && seen == g->gang.launches
                             : now - g->gang.from < g->quantum)) {
                sleep_on_region(g, l, LOAD(&l->hdr->gen), POLL_NS / 10);
                continue;
            }
            /* A loan ends when one further behind wants the GPU back: held
             * on to the end of a quantum, each pause of a tenant between its
             * synchronizations would hand a whole quantum to one ahead of
             * it, and shares would drift toward equal. */
            if (g->turn.lent && nt && before(g, nt, g->t)) {
                hand_over(g, 0);
                continue;
            }
            if (now - g->turn.at >= g->quantum) {
                /* A quantum is over: pay for it, then run on only while we
                 * are still the one furthest behind among our equals. */
                pay(g, g->t, 2 * g->quantum, now);
                g->turn.at = now;
                STORE(&g->hdr->turn_ends_ns, now + g->quantum);
                if (nt && before(g, nt, g->t)) {
                    hand_over(g, 0);
                    continue;
                }
            }
            uint32_t cap = cap_of(g);
            int64_t queued = ahead(g, now);
            if (cap) {
                earn(g, cap, now);
                if (LOAD(&g->t->cap_credit) <= queued || (g->flight.count && !g->flight.avg)) {
                    if (g->flight.count) {
                        wait_oldest(g);
                    } else {
                        if (others)
                            hand_over(g, 0); /* our idle time is theirs */
                        /* Asleep until the bucket has earned its debt back. */
                        uint64_t ns = (uint64_t)(-LOAD(&g->t->cap_credit) + 1) * FULL / cap + 1;
                        sleep_on(g, LOAD(&g->hdr->gen), ns < POLL_NS ? ns : POLL_NS);
                    }
                    ADD(&g->t->waited_ns, fg_now_ns() - now); /* throttled by the cap */
                    continue;
                }
            }
            /* In flight: what drains at a hand-over (the GPU stays busy
             * meanwhile), or what a cap's debt may reach, with one launch
             * queued behind the running one at least; below a higher
             * priority, what it may find running when it comes. */
            int below = present && higher_present(g);
            if ((present || cap) && g->flight.count >= (below ? 1u : 2u) &&
                (queued >= (below ? AHEAD_BELOW_NS : cap ? AHEAD_SHORT_NS : AHEAD_NS) || g->flight.count >= RING)) {
                wait_oldest(g);
                continue;
            }
            break;
        }
        g->turn.holding = 0;
        g->turn.lent = 0; /* a turn handed to us is ours */
        if (!waited_from)
            waited_from = now;
        if (!mask_has(g->hdr->waiting, g->mine)) {
            mask_set(g->hdr->waiting, g->mine);
            catch_up(g, now);
        }
        /* Beside the holder: as much in flight as a holder among equals
         * keeps, and still waiting, so that its pauses are lent to us. */
        if (beside(g, h, now)) {
            if (waited_from) /* what we waited until now; a full queue is not throttling */
                ADD(&g->t->waited_ns, now - waited_from);
            waited_from = 0;
            if (g->flight.count >= 2 && (ahead(g, now) >= AHEAD_NS || g->flight.count >= RING)) {
                wait_oldest(g);
                continue;
            }
            by = g->side.ran = 1;
            break;
        }
        if (may_take(g, h, now) && best_waiter(g, -1) == (int)g->mine && take(g, h, now))
            continue;
        sleep_on(g, LOAD(&g->hdr->gen), POLL_NS);
        /* Waited time is counted as it passes, for readers of the region. */
        uint64_t after = fg_now_ns();
        ADD(&g->t->waited_ns, after - waited_from);
        waited_from = after;
    }
    if (!by && g->hdr && mask_has(g->hdr->waiting, g->mine))
        mask_clear(g->hdr->waiting, g->mine);
    uint64_t left = waited_from || entered ? fg_now_ns() : 0;
    if (waited_from && g->t)
        ADD(&g->t->waited_ns, left - waited_from);
    if (entered)
        __atomic_fetch_add(&g->side.request_gated, left - entered, __ATOMIC_RELAXED);
}

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

/* After a synchronization (begun at `at`; of stream *s, if s, before which
 * `upto` launches were tracked), what completed is said at once:
 * waiters then see an idle holder without waiting for its next launch; and
 * a holder of higher priority than those waiting, whose pauses after a
 * synchronization tend to be long (a server between requests, not a loop),
 * lends them the GPU at once (it takes it back at its next launch). */
static CUresult synced_on(CUresult r, int dev, uint64_t at, const CUstream *s, uint64_t upto)
{
    struct gpu *g = r == CUDA_SUCCESS ? scheduled(dev) : NULL;
    if (g && g->mps)
        note_request(g, at, fg_now_ns());
    if (!g || (!__atomic_load_n(&g->flight.count, __ATOMIC_RELAXED) &&
               (LOAD(&g->hdr->holder) != g->mine + 1 || !others_in(g, g->hdr->waiting))))
        return r;
    pthread_mutex_lock(&g->lock);
    if (g->state == G_READY) {
        uint64_t now = fg_now_ns();
        if (s) {
            uintptr_t lane[2];
            lane_of(*s, lane);
            known_done(g, lane, upto);
        }
        reap(g, now);
        if (!g->flight.count)
            __atomic_store_n(&g->turn.idle_at, now, __ATOMIC_RELAXED);
        /* What the GPU did for us until now is paid at once: taken from
         * while idle after this, we are charged only the idle time. */
        if (LOAD(&g->hdr->holder) == g->mine + 1 && others_in(g, g->hdr->waiting))
            pay(g, g->t, 2 * g->quantum, now);
        int next = g->flight.count || __atomic_load_n(&g->turn.gap_avg, __ATOMIC_RELAXED) < LEND_NS || LOAD(&g->hdr->holder) != g->mine + 1
                       ? -1
                       : best_waiter(g, (int)g->mine);
        if (next >= 0 && priority_of(g, next) < LOAD(&g->t->priority) && !beside_us(g))
            hand_over(g, 0);
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
