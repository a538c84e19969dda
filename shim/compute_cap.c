/* A cap (--compute-max): its token bucket, in the tenant's entry and shared
 * by the tenant's processes, earns credit as time passes and pays for the
 * time its launches kept the GPU busy, from busy periods timed on the
 * device now and then and the host's view at their learnt ratio between. */
#include "compute.h"

void earn(struct gpu *g, uint32_t cap, uint64_t now)
{
    uint64_t last = LOAD(&g->t->cap_refilled);
    if (now <= last || !__atomic_compare_exchange_n(&g->t->cap_refilled, &last, now, 0, __ATOMIC_SEQ_CST,
                                                    __ATOMIC_SEQ_CST))
        return; /* another process of the tenant earned it */
    uint64_t dt = now - last;
    int64_t add = dt > (uint64_t)BURST_NS * 100 ? BURST_NS : (int64_t)(dt * cap / FULL);
    int64_t c = LOAD(&g->t->cap_credit), next;
    do {
        next = c + add > BURST_NS ? BURST_NS : c + add;
    } while (!__atomic_compare_exchange_n(&g->t->cap_credit, &c, next, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
}

/* The device time the completed launches (state DONE or LAST, the oldest
 * at first) kept the GPU busy, where the oldest began a busy period and
 * each stream's last completion (LAST, which tells for those before it) is
 * its own: timed, from the oldest's start to the latest of them, and the
 * ratio of that to the host's view (`host`) learnt; sampled untimed, the
 * host's view at that ratio. -1 when device time cannot tell (queued
 * behind others, no ratio yet, events of another context): the host's
 * view is charged instead. */
int64_t device_busy(struct gpu *g, const unsigned char *state, unsigned n, unsigned first, int64_t host)
{
    const struct launch *o = &g->flight.ring[(g->flight.head + first) % RING];
    if (!o->begins)
        return -1;
    for (unsigned i = first; i < n; i++)
        if (state[i] == LAST && !g->flight.ring[(g->flight.head + i) % RING].begins)
            return -1;
    if (!o->start)
        return g->cap.ratio ? host * g->cap.ratio / FULL : -1;
    /* _v2 (CUDA 12.8) reports no error of the program's pending work */
    fg_real_cuEventElapsedTime_v2 elapsed = REAL(cuEventElapsedTime_v2);
    if (!elapsed)
        elapsed = (fg_real_cuEventElapsedTime_v2)REAL(cuEventElapsedTime);
    float best = 0;
    for (unsigned i = first; i < n; i++) {
        const struct launch *l = &g->flight.ring[(g->flight.head + i) % RING];
        float ms;
        if (state[i] == LAST && (!elapsed || !l->timed || elapsed(&ms, o->start, l->ev) != CUDA_SUCCESS))
            return -1;
        if (state[i] == LAST && ms > best)
            best = ms;
    }
    int64_t dev = (int64_t)((double)best * 1e6);
    if (host > 0) {
        uint32_t r = dev >= host ? FULL : dev * FULL / host > 0 ? (uint32_t)(dev * FULL / host) : 1;
        g->cap.ratio = g->cap.ratio ? (3 * g->cap.ratio + r) / 4 : r;
    }
    return dev;
}

/* Under a cap, a launch made with nothing in flight begins a busy period
 * at a timed event recorded before it (g locked): once a TIMED_NS, which
 * learns the ratio of device time to what the host sees; the busy periods
 * between are charged the host's view at that ratio. A timed pair costs
 * the host ~2 us and the GPU ~2 us between the kernels it brackets: a loop
 * that synchronizes each launch would pay them at every launch. */
void mark_start(struct gpu *g, CUstream s)
{
    if (g->flight.count || !cap_of(g))
        return;
    g->cap.begins = 1;
    uint64_t now = fg_now_ns();
    if (g->cap.ratio && now - g->cap.timed_at < TIMED_NS)
        return;
    fg_real_cuEventRecord record = REAL(cuEventRecord);
    CUevent ev = event_get(g, 1);
    if (ev && record && record(ev, s) == CUDA_SUCCESS)
        g->cap.start = ev, g->cap.timed_at = now;
    else
        event_put(g, ev, 1);
}
