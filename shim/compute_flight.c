/* The compute policy's launches in flight: each tracked by an event on
 * its stream in a ring per GPU, their completions found with few event
 * queries (reap), what they kept the GPU busy accounted, and their events
 * pooled for reuse. */
#include "compute.h"

uint64_t tracked;

/* Names the stream s stands for, for reap: a stream's work completes in
 * the order it was launched. NULL and CU_STREAM_LEGACY stand for the
 * current context's legacy stream, CU_STREAM_PER_THREAD for this thread's
 * stream in it; any other handle is a stream of its own. */
void lane_of(CUstream s, uintptr_t lane[2])
{
    static __thread char thread_mark;
    uintptr_t v = (uintptr_t)s;
    if (v > (uintptr_t)CU_STREAM_PER_THREAD) {
        lane[0] = v, lane[1] = 0;
        return;
    }
    lane[0] = v == (uintptr_t)CU_STREAM_PER_THREAD ? (uintptr_t)&thread_mark : 1;
    lane[1] = fg_current_ctx();
}

/* The launches on lane tracked before upto have completed (a
 * synchronization after them said so): the next reap need not query them
 * (g locked). */
void known_done(struct gpu *g, const uintptr_t lane[2], uint64_t upto)
{
    g->flight.known[0] = lane[0], g->flight.known[1] = lane[1];
    g->flight.known_upto = upto;
}

static int done_at(fg_real_cuEventQuery query, const struct gpu *g, unsigned i)
{
    return !query || query(g->flight.ring[(g->flight.head + i) % RING].ev) != CUDA_ERROR_NOT_READY;
}

/* How many of a stream's k launches in flight, idx[] oldest first, have
 * completed: a completion implies all before it on that stream, so a few
 * queries tell where asking each would cost an event query (1.4 us on an
 * H200) per launch. The search starts where `guess` (how many the time
 * since they started would have run) says and widens from there: two
 * queries when the guess is right, one when none or all are done and it
 * says so. */
static unsigned lane_done(fg_real_cuEventQuery query, const struct gpu *g, const unsigned char *idx, unsigned k,
                          unsigned guess)
{
    unsigned lo = 0, hi = k; /* done below lo, not at hi and above */
    unsigned p = guess < k ? guess : k - 1;
    if (done_at(query, g, idx[p])) {
        lo = p + 1;
        for (unsigned step = 1; lo < hi; step *= 2) {
            unsigned q = lo + step - 1 < hi ? lo + step - 1 : hi - 1;
            if (!done_at(query, g, idx[q])) {
                hi = q;
                break;
            }
            lo = q + 1;
        }
    } else {
        hi = p;
        for (unsigned step = 1; lo < hi; step *= 2) {
            unsigned q = hi - lo > step ? hi - step : lo;
            if (done_at(query, g, idx[q])) {
                lo = q + 1;
                break;
            }
            hi = q;
        }
    }
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (done_at(query, g, idx[mid]))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* An event of ours, timed or not, from its pool or new; NULL if none. */
CUevent event_get(struct gpu *g, int timed)
{
    if (timed ? g->flight.ntpool : g->flight.npool)
        return timed ? g->flight.tpool[--g->flight.ntpool] : g->flight.pool[--g->flight.npool];
    CUevent ev = NULL;
    fg_real_cuEventCreate create = REAL(cuEventCreate);
    if (!create || create(&ev, timed ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    return ev;
}

void event_put(struct gpu *g, CUevent ev, int timed)
{
    if (!ev)
        return;
    if (timed ? g->flight.ntpool < 2 * RING : g->flight.npool < RING) {
        if (timed)
            g->flight.tpool[g->flight.ntpool++] = ev;
        else
            g->flight.pool[g->flight.npool++] = ev;
        return;
    }
    fg_real_cuEventDestroy_v2 destroy = REAL(cuEventDestroy_v2);
    if (destroy)
        destroy(ev);
}

/* Accounts for the launches in flight that have completed, stream by
 * stream. The time since the first of them started is shared among all of
 * them: a process that looks after a long host call finds many done at
 * once, and counting that time as one launch's would make the queue look
 * deeper than it is, and keep too little in flight to cover the host's
 * pauses. What known_done said is done is not queried. */
void reap(struct gpu *g, uint64_t now)
{
    uintptr_t synced[2] = {g->flight.known[0], g->flight.known[1]};
    uint64_t upto = g->flight.known_upto;
    g->flight.known_upto = 0;
    g->flight.reaped_at = now;
    fg_real_cuEventQuery query = REAL(cuEventQuery);
    unsigned n = g->flight.count, done = 0, first = n;
    unsigned char state[RING] = {0}; /* LOOKED: its stream looked at; DONE, LAST: completed */
    unsigned char idx[RING];
    for (unsigned i = 0; i < n; i++) {
        if (state[i])
            continue;
        const struct launch *a = &g->flight.ring[(g->flight.head + i) % RING];
        unsigned k = 0;
        for (unsigned j = i; j < n; j++) {
            const struct launch *b = &g->flight.ring[(g->flight.head + j) % RING];
            if (!state[j] && b->lane[0] == a->lane[0] && b->lane[1] == a->lane[1])
                idx[k++] = (unsigned char)j, state[j] = LOOKED;
        }
        unsigned m = 0;
        if (upto && synced[0] == a->lane[0] && synced[1] == a->lane[1])
            while (m < k && g->flight.ring[(g->flight.head + idx[m]) % RING].seq < upto)
                m++;
        if (m < k) {
            const struct launch *o = &g->flight.ring[(g->flight.head + idx[m]) % RING];
            uint64_t since = o->at > g->flight.last_done ? o->at : g->flight.last_done;
            uint64_t guess = g->flight.avg && now > since ? (now - since) / g->flight.avg : 0;
            m += lane_done(query, g, idx + m, k - m, guess < RING ? (unsigned)guess : RING);
        }
        for (unsigned t = 0; t < m; t++)
            state[idx[t]] = t + 1 == m ? LAST : DONE;
        done += m;
        if (m && idx[0] < first)
            first = idx[0];
    }
    uint64_t at = done ? g->flight.ring[(g->flight.head + first) % RING].at : now, start = at > g->flight.last_done ? at : g->flight.last_done;
    if (done && cap_of(g)) {
        int64_t host = now > start ? (int64_t)(now - start) : 0, paid = device_busy(g, state, n, first, host);
        __atomic_fetch_sub(&g->t->cap_credit, paid >= 0 ? paid : host, __ATOMIC_SEQ_CST);
    }
    if (done && now > start) {
        uint64_t busy = now - start, each = busy / done;
        /* Work run beside the holder is GPU time the tenant had as much as
         * a holder's, for readers of the region; in its virtual time too
         * where it filled an equal's gaps (beside a higher priority under
         * MPS, the holder did not wait for it), or ran on in another
         * tenant's turn after our tenant's (kin_holds; within it, the
         * holder paid). */
        uint32_t h = LOAD(&g->hdr->holder);
        int spilt = g->side.kin && (!h || h > FG_SCHED_SLOTS || tenant_of(g, h - 1) != g->t);
        if (spilt && !g->turn.holding) {
            /* from the end of our tenant's turn: until then its holder paid */
            uint64_t ended = LOAD(&g->t->turn_ended_ns), from = start > ended ? start : ended;
            if (now > from)
                pay_spill(g, now - from, now);
        } else if (g->side.ran && !g->side.kin && !g->turn.holding) {
            ADD(&g->t->held_ns, busy);
            if (g->side.fill)
                pay_fill(g, busy, now);
        }
        for (unsigned i = 0; i < done; i++)
            g->flight.avg = g->flight.avg ? (7 * g->flight.avg + each) / 8 : each;
        g->flight.last_done = now;
    }
    /* What completed goes back to the pool; the rest keeps its order. */
    unsigned kept = 0;
    for (unsigned i = 0; done && i < n; i++) {
        struct launch l = g->flight.ring[(g->flight.head + i) % RING];
        if (state[i] >= DONE) {
            event_put(g, l.ev, l.timed);
            event_put(g, l.start, 1);
        } else
            g->flight.ring[(g->flight.head + kept++) % RING] = l;
    }
    g->flight.count -= done;
    STORE(&g->me->inflight, g->flight.count + g->flight.blocked);
}

/* Waits, unlocked, for the oldest launch in flight; its completion tells
 * that those before it on its stream are done too. */
void wait_oldest(struct gpu *g)
{
    struct launch l = g->flight.ring[g->flight.head];
    pthread_mutex_unlock(&g->lock);
    fg_real_cuEventSynchronize sync = REAL(cuEventSynchronize);
    CUstreamCaptureMode m = fg_relaxed_begin();
    CUresult r = sync ? sync(l.ev) : CUDA_ERROR_NOT_FOUND;
    fg_relaxed_end(m);
    pthread_mutex_lock(&g->lock);
    if (r == CUDA_SUCCESS)
        known_done(g, l.lane, l.seq + 1);
}

/* Puts a launch on s in flight; g is locked. */
void track(struct gpu *g, CUstream s, uint64_t at)
{
    CUevent start = g->cap.start;
    int timed = start != NULL, begins = g->cap.begins;
    CUevent ev = event_get(g, timed);
    g->cap.start = NULL;
    g->cap.begins = 0;
    fg_real_cuEventRecord record = REAL(cuEventRecord);
    if (ev && record && record(ev, s) == CUDA_SUCCESS && g->flight.count < RING) {
        struct launch *l = &g->flight.ring[(g->flight.head + g->flight.count) % RING];
        *l = (struct launch){.ev = ev, .start = start, .at = at, .timed = timed, .begins = begins};
        l->seq = __atomic_fetch_add(&tracked, 1, __ATOMIC_RELEASE);
        lane_of(s, l->lane);
        g->flight.count++;
        STORE(&g->me->inflight, g->flight.count + g->flight.blocked);
    } else {
        event_put(g, ev, timed);
        event_put(g, start, 1);
    }
}
