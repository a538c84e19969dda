/* Turns of the compute policy: who holds a GPU next, by priority, then
 * the gang's order, then weighted fair queueing of virtual time (GPU time
 * held over the tenant's share); taking the GPU from a holder that is free,
 * dead, idle, of lower priority or past its quantum; handing it over; and
 * paying for the time held. */
#include "compute.h"

/* A tenant's weight: its share, else an even part of what no share claims
 * (at least 1 %). */
static uint64_t weight(struct gpu *g, struct fg_sched_tenant *t, uint64_t now)
{
    uint32_t share = LOAD(&t->share);
    if (share)
        return share;
    if (!g->turn.wdefault || now - g->turn.wdefault_at > 100000000ull) {
        uint32_t sum = 0, none = 0;
        for (uint32_t i = 0; i < FG_SCHED_TENANTS; i++) {
            if (!g->hdr->tenants[i].name[0] || !fg_byte_held(g->fd, tenant_off(i)))
                continue;
            uint32_t s = LOAD(&g->hdr->tenants[i].share);
            sum += s;
            none += !s;
        }
        uint32_t left = sum < FULL ? FULL - sum : 0;
        g->turn.wdefault = (left < 100 ? 100 : left) / (none ? none : 1);
        g->turn.wdefault_at = now;
    }
    return g->turn.wdefault ? g->turn.wdefault : 1;
}

/* Charges t for holding the GPU ns: all of it in its counter (readers add
 * the current holder's time since since_ns, so the counter only grows), at
 * most `fair` in its virtual time (time held alone, or idle before it was
 * taken, is not contended time). */
static void charge(struct gpu *g, struct fg_sched_tenant *t, uint64_t ns, uint64_t fair, uint64_t now)
{
    ADD(&t->held_ns, ns);
    ADD(&t->vtime, (ns < fair ? ns : fair) * FULL / weight(g, t, now));
}

/* Charges t, the holder, for its time not yet paid for (since since_ns),
 * at most `fair` of it: each interval is paid once, whether by the holder
 * or by a process that takes the GPU from it at the same moment. A
 * since_ns ahead of now is the last holder's work left running, which it
 * paid for (hand_off): nobody pays for it again. */
void pay(struct gpu *g, struct fg_sched_tenant *t, uint64_t fair, uint64_t now)
{
    uint64_t since = LOAD(&g->hdr->since_ns);
    do {
        if (now <= since)
            return;
    } while (!__atomic_compare_exchange_n(&g->hdr->since_ns, &since, now, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    if (t && now - since < (1ull << 62))
        charge(g, t, now - since, fair, now);
}

/* Work we ran in our tenant's turn (kin_holds) that ran on into another
 * tenant's is ours to pay for, all of it: the next holder's turn paid for
 * that time too, and got less of the GPU in it. */
void pay_spill(struct gpu *g, uint64_t ns, uint64_t now) { charge(g, g->t, ns, ns, now); }

/* Work we ran in an equal holder's gaps (fills) is time its turn gave us:
 * in our virtual time, so that the holder's turns come back sooner. But
 * no further than one quantum ahead of the holder: the gaps are its idle
 * time lent, and a debt beyond that would keep us from our share for as
 * long once it leaves none (shares are of contended time; catch_up keeps
 * credit from being banked the same way). On an H100, a matrix-product
 * loop filling a batch-4 training's gaps for 13 s ran 14 s of its virtual
 * time ahead: its kernels, time-sliced with the holder's, last longer on
 * the host's clock than they hold the GPU. */
void pay_fill(struct gpu *g, uint64_t ns, uint64_t now)
{
    uint64_t w = weight(g, g->t, now), add = ns * FULL / w;
    uint32_t h = LOAD(&g->hdr->holder);
    struct fg_sched_tenant *ht = h && h <= FG_SCHED_SLOTS ? tenant_of(g, h - 1) : NULL;
    uint64_t most = ht && ht != g->t ? LOAD(&ht->vtime) + g->quantum * FULL / w : UINT64_MAX;
    uint64_t v = LOAD(&g->t->vtime), next;
    do {
        next = v >= most ? v : add < most - v ? v + add : most;
    } while (next != v && !__atomic_compare_exchange_n(&g->t->vtime, &v, next, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
}

/* Whether a waiter of our priority, of tenant t, goes before us once our
 * turn (or loan) is due to end: by the gang's order, then the lesser
 * virtual time. A process of our own tenant launches in our turn beside
 * us (kin_holds), with nothing to wait for; under a cap it cannot, and
 * it shares our virtual time, never behind it: it goes before us there,
 * as the next in turn (best_waiter's round robin), or the first of a
 * tenant to hold the GPU would keep it while it had work. */
int goes_before_us(struct gpu *g, struct fg_sched_tenant *t)
{
    if (t == g->t)
        return cap_of(g) != 0;
    int l = leads(g, t, g->t);
    return l ? l > 0 : LOAD(&t->vtime) < LOAD(&g->t->vtime);
}

/* The waiting slot to run next: highest priority, then the gang's order,
 * then least virtual time, then the first after the holder (round robin),
 * or among a tenant's processes, after its own last holder: taken from
 * the holder, a capped tenant's turns (its processes take turns) went to
 * the same one of two every time another tenant held between them, and
 * the other got 0.4 % of the GPU. -1 if none. */
int best_waiter(struct gpu *g, int except)
{
    uint32_t holder = LOAD(&g->hdr->holder);
    int best = -1;
    uint32_t bp = 0, bd = 0;
    uint64_t bv = 0;
    struct fg_sched_tenant *bt = NULL;
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        for (uint64_t m = LOAD(&g->hdr->waiting[w]); m; m &= m - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(m);
            struct fg_sched_tenant *t;
            if ((int)i == except || !(t = tenant_of(g, i)))
                continue;
            uint32_t last = LOAD(&t->last_slot), from = (last ? last : holder) % FG_SCHED_SLOTS;
            uint32_t d = (i + FG_SCHED_SLOTS - from) % FG_SCHED_SLOTS;
            uint32_t p = LOAD(&t->priority);
            uint64_t v = LOAD(&t->vtime);
            int l = best < 0 || p != bp ? 0 : leads(g, t, bt);
            if (best < 0 || p > bp || (p == bp && (l > 0 || (!l && (v < bv || (v == bv && d < bd)))))) {
                best = (int)i;
                bp = p;
                bv = v;
                bd = d;
                bt = t;
            }
        }
    return best;
}

/* Whether a process of higher priority than ours is on the GPU. */
int higher_present(struct gpu *g)
{
    uint32_t mp = LOAD(&g->t->priority);
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        for (uint64_t p = others_word(g, g->hdr->present, w); p; p &= p - 1)
            if (priority_of(g, (int)(w * 64 + (uint32_t)__builtin_ctzll(p))) > mp)
                return 1;
    return 0;
}

/* Whether a waiter may take the GPU from holder h (slot + 1). */
int may_take(struct gpu *g, uint32_t h, uint64_t now)
{
    if (!h)
        return 1;
    uint32_t i = h - 1;
    if (i >= FG_SCHED_SLOTS || !fg_byte_held(g->fd, slot_off(i))) {
        mask_clear(g->hdr->waiting, i % FG_SCHED_SLOTS);
        return 1; /* its holder died */
    }
    /* Idle: seen with nothing in flight and no launch over a poll; a
     * higher priority's pause counted from the first look that found
     * nothing in flight (its synchronization woke us), not from the last
     * that found work. */
    uint64_t launches = LOAD(&g->slots[i].launches);
    uint32_t hp = priority_of(g, (int)i), mp = LOAD(&g->t->priority);
    int busy = LOAD(&g->slots[i].inflight) != 0;
    if (h != g->turn.seen_holder || launches != g->turn.seen_launches)
        g->turn.seen_launched_at = now;
    if (h != g->turn.seen_holder || launches != g->turn.seen_launches || busy || (g->turn.seen_busy && hp > mp)) {
        g->turn.seen_holder = h;
        g->turn.seen_launches = launches;
        g->turn.seen_at = now;
    }
    g->turn.seen_busy = busy;
    struct fg_sched_tenant *ht = tenant_of(g, i);
    /* Our tenant's holder idle for want of credit in the bucket we share:
     * we could not launch either. */
    if (ht == g->t && cap_of(g) && LOAD(&g->t->cap_credit) <= 0)
        return 0;
    /* A higher priority is given longer to come back. A pause of one whose
     * requests are bound by its host, after it synchronized (nothing in
     * flight; it woke us then) and not lent at once (synced_on), is taken
     * once it has lasted LEND_AFTER_NS: on an H100, eager inference at
     * half its peak rate pauses 0.2-0.8 ms between requests, too short
     * to be lent at once or to pass for idle. What we then run delays its next request, which waits
     * for the GPU more; below BESIDE_HOST of host work we stop. A
     * GPU-bound one's requests would wait for our work all along. */
    uint64_t idle = hp <= mp ? POLL_NS
                    : busy || !ht || LOAD(&ht->host_bound) < BESIDE_HOST ? 4 * POLL_NS
                                                                          : LEND_AFTER_NS;
    /* An equal paused after a synchronization, between requests (mark_paused) */
    if (hp == mp && !busy && LOAD(&g->slots[i].paused) == (uint32_t)launches + 1)
        return 1;
    g->turn.look_at = g->turn.seen_at + idle;
    /* Capped, we would pay for a lower holder's work still running from
     * our bucket (our first launch would be timed from when it queued):
     * it hands the GPU over drained at its next launch, or we take it once
     * its work is done. Its last launch before a synchronization may run
     * long after it was made (a batch of 2.7 ms products): taken a poll
     * after that launch, a high priority capped at 30 % got 22 %. A holder
     * that launches nothing for a quantum with work in flight is waited
     * for no longer. */
    if (mp > hp && busy && cap_of(g) && now - g->turn.seen_launched_at < g->quantum) {
        g->turn.look_at = g->turn.seen_launched_at + g->quantum;
        return 0;
    }
    if (mp > hp || now - g->turn.seen_at >= idle)
        return 1;
    if (mp == hp && ht && leads(g, g->t, ht) > 0)
        return 1; /* our gang holds the GPUs it shares with the holder's */
    /* Past its quantum and more: a holder blocked in a long wait. */
    uint64_t since = LOAD(&g->hdr->since_ns);
    return mp == hp && now > since && now - since >= g->quantum + g->quantum / 2;
}

/* A newcomer to the queue starts no further back than one quantum behind
 * the last holder: shares are of contended time, not banked idle time. One
 * quantum of the smaller weight of the two: a tenant that paused for a
 * moment (a synchronization) while it was behind a holder of a smaller
 * share is that far behind by right, and clamping it closer would hand its
 * time to the smaller share at every pause. Virtual times are compared
 * within a priority only: under a holder of another priority (vclock is
 * its virtual time, of another weight) the newcomer starts no further back
 * than a quantum behind the least of its equals waiting, as it would
 * behind their holder. */
void catch_up(struct gpu *g, uint64_t now)
{
    uint64_t w = weight(g, g->t, now), floor = 0;
    uint32_t h = LOAD(&g->hdr->holder), mp = LOAD(&g->t->priority);
    struct fg_sched_tenant *ht = h && h <= FG_SCHED_SLOTS ? tenant_of(g, h - 1) : NULL;
    if (ht && LOAD(&ht->priority) == mp) {
        if (weight(g, ht, now) < w)
            w = weight(g, ht, now);
        floor = LOAD(&g->hdr->vclock);
    } else {
        struct fg_sched_tenant *least = NULL;
        for (uint32_t i = 0; i < FG_SCHED_SLOTS; i++) {
            struct fg_sched_tenant *t = mask_has(g->hdr->waiting, i) ? tenant_of(g, i) : NULL;
            if (t && t != g->t && LOAD(&t->priority) == mp && (!least || LOAD(&t->vtime) < floor))
                least = t, floor = LOAD(&t->vtime);
        }
        if (least && weight(g, least, now) < w)
            w = weight(g, least, now);
    }
    uint64_t lag = g->quantum * FULL / w;
    floor = floor > lag ? floor - lag : 0;
    uint64_t v = LOAD(&g->t->vtime);
    while (v < floor && !__atomic_compare_exchange_n(&g->t->vtime, &v, floor, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
}

/* Puts the GPU from holder `from` (slot + 1, 0: none) to us. */
int take(struct gpu *g, uint32_t from, uint64_t now)
{
    uint32_t expect = from;
    if (!__atomic_compare_exchange_n(&g->hdr->holder, &expect, g->mine + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return 0;
    /* A holder gone (its lock with it) held nothing since: its slot's
     * tenant entry may be another tenant's by now. */
    struct fg_sched_tenant *old =
        from && from <= FG_SCHED_SLOTS && fg_byte_held(g->fd, slot_off(from - 1)) ? tenant_of(g, from - 1) : NULL;
    pay(g, old, g->quantum, now); /* idle before it was taken is not contended */
    if (old && old != g->t)
        STORE(&old->turn_ended_ns, now);
    if (old && LOAD(&old->priority) < LOAD(&g->t->priority))
        ADD(&old->preemptions, 1);
    STORE(&g->hdr->vclock, LOAD(&g->t->vtime));
    ADD(&g->hdr->switches, 1);
    /* Lent: taken from one further behind, or from a process of our own
     * tenant (its virtual time is ours), while it was idle; but under a
     * cap, whose bucket they share, such a process is idle because the
     * bucket is empty, and handing the GPU back at each launch would only
     * cost the cap hand-overs. */
    g->turn.lent = old && (old == g->t ? !cap_of(g) : LOAD(&old->vtime) < LOAD(&g->t->vtime));
    wake_all(g);
    wake_followers(g);
    return 1;
}

/* A turn's time on the device's clock. Holders are charged host time,
 * which is the device's on a GPU, but not where the device's clock stands
 * still while the host is late (the simulated GPU waits for a waiter the
 * host wakes late): a turn whose host is often late would pay for time
 * nobody had. Two timed events a turn (before its first launch, after its
 * work) give the turn's length on the device's clock; what it was charged
 * beyond that is given back once the second is there. On a GPU that is
 * what its last work was estimated to take (hand_off) and did not. */
static void clock_drop(struct gpu *g)
{
    event_put(g, g->turn.clock0, 1);
    event_put(g, g->turn.clock1, 1);
    g->turn.clock0 = g->turn.clock1 = NULL;
    g->turn.clock_want = 0;
}

void turn_clock_start(struct gpu *g, CUstream s)
{
    g->turn.clock_want = 0;
    /* Work of ours still queued would stamp the start late. */
    if (!g->turn.holding || g->turn.clock1 || g->flight.count)
        return;
    event_put(g, g->turn.clock0, 1); /* a turn taken from us before its end */
    g->turn.clock0 = NULL;
    fg_real_cuEventRecord record = REAL(cuEventRecord);
    CUevent ev = event_get(g, 1);
    if (ev && record && record(ev, s) == CUDA_SUCCESS) {
        g->turn.clock0 = ev, g->turn.stream = s, g->turn.clock_at = fg_now_ns();
        return;
    }
    event_put(g, ev, 1);
}

/* Our turn ends, paid until host time `until`: its end on the device's
 * clock comes after its work on the stream it began on. */
static void turn_clock_end(struct gpu *g, uint64_t until)
{
    if (!g->turn.clock0 || g->turn.clock1)
        return;
    fg_real_cuEventRecord record = REAL(cuEventRecord);
    CUevent ev = event_get(g, 1);
    if (ev && record && record(ev, g->turn.stream) == CUDA_SUCCESS) {
        g->turn.clock1 = ev, g->turn.clock_end = until;
        return;
    }
    event_put(g, ev, 1);
    clock_drop(g);
}

void turn_clock_settle(struct gpu *g)
{
    if (!g->turn.clock1)
        return;
    fg_real_cuEventElapsedTime_v2 elapsed = REAL(cuEventElapsedTime_v2);
    if (!elapsed)
        elapsed = (fg_real_cuEventElapsedTime_v2)REAL(cuEventElapsedTime);
    float ms;
    CUresult r = elapsed ? elapsed(&ms, g->turn.clock0, g->turn.clock1) : CUDA_ERROR_NOT_FOUND;
    if (r == CUDA_ERROR_NOT_READY)
        return;
    uint64_t now = fg_now_ns(), host = g->turn.clock_end > g->turn.clock_at ? g->turn.clock_end - g->turn.clock_at : 0;
    uint64_t dev = r == CUDA_SUCCESS && ms > 0 ? (uint64_t)((double)ms * 1e6) : host;
    if (dev < host) {
        uint64_t back = (host - dev) * FULL / weight(g, g->t, now), v = LOAD(&g->t->vtime);
        while (!__atomic_compare_exchange_n(&g->t->vtime, &v, v > back ? v - back : 0, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            ;
    }
    clock_drop(g);
}

/* Passes the GPU to the best waiter, if any may have it, paying for our
 * time until now + tail (what we leave running). */
static void pass(struct gpu *g, int preempted, uint64_t now, uint64_t tail)
{
    int next = best_waiter(g, (int)g->mine);
    if (next < 0 || LOAD(&g->hdr->holder) != g->mine + 1)
        return;
    uint32_t expect = g->mine + 1;
    if (!__atomic_compare_exchange_n(&g->hdr->holder, &expect, (uint32_t)next + 1, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST))
        return;
    g->turn.holding = 0;
    /* Time held alone before anyone waited is not charged beyond two quanta. */
    pay(g, g->t, 2 * g->quantum + tail, now + tail);
    turn_clock_end(g, now + tail);
    if (preempted)
        ADD(&g->t->preemptions, 1);
    struct fg_sched_tenant *nt = tenant_of(g, (uint32_t)next);
    if (nt != g->t)
        STORE(&g->t->turn_ended_ns, now + tail);
    STORE(&g->hdr->vclock, nt ? LOAD(&nt->vtime) : 0);
    ADD(&g->hdr->switches, 1);
    wake_all(g);
    wake_followers(g);
}

/* Hands the GPU to the best waiter, if any may have it, drained or not:
 * what a gang leaves running on a GPU it gives to the gang that leads it
 * may be a collective that waits for that very gang's turn elsewhere, and
 * drains only once the GPU is given. */
void give(struct gpu *g, int preempted, int drain)
{
    while (drain && g->flight.count) {
        wait_oldest(g);
        reap(g, fg_now_ns());
    }
    pass(g, preempted, fg_now_ns(), 0);
}

/* Hands the GPU, drained, to the best waiter, if any may have it. */
void hand_over(struct gpu *g, int preempted) { give(g, preempted, 1); }

/* Drained, the GPU would idle from our last completion until the next
 * holder's first launch reaches it (two wake-ups of hosts and a launch):
 * the next holder starts while our last work, short, still runs, and its
 * launches queue behind it. We pay for that work as it is expected to run
 * (since_ns moves there): the next holder's time starts after it. But a
 * capped one would pay for that work from its bucket (its first launch's
 * busy period is timed from when it was queued): to it the GPU goes
 * drained. */
void hand_off(struct gpu *g)
{
    int next = best_waiter(g, (int)g->mine);
    struct fg_sched_tenant *nt = next >= 0 ? tenant_of(g, (uint32_t)next) : NULL;
    uint32_t ncap = nt ? LOAD(&nt->cap) : 0;
    if (ncap && ncap <= FULL) {
        hand_over(g, 0);
        return;
    }
    uint64_t now = fg_now_ns();
    int64_t rest;
    while ((rest = left(g, now)) < 0 || rest > HANDOFF_NS) {
        wait_oldest(g);
        now = fg_now_ns();
        reap(g, now);
    }
    pass(g, 0, now, (uint64_t)rest);
}

/* The pause since the last synchronization, if any, ends at now: how long
 * such pauses last says whether they are lent (synced_on). Atomic: a launch
 * that goes straight through (straight_through) ends it unlocked. */
void pause_ends(struct gpu *g, uint64_t now)
{
    uint64_t idle = __atomic_exchange_n(&g->turn.idle_at, 0, __ATOMIC_RELAXED);
    if (!idle || now < idle)
        return;
    uint64_t gap = now - idle, avg = __atomic_load_n(&g->turn.gap_avg, __ATOMIC_RELAXED);
    __atomic_store_n(&g->turn.gap_avg, avg ? (3 * avg + gap) / 4 : gap, __ATOMIC_RELAXED);
}
