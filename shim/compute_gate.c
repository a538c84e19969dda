/* The compute policy's gate: where a launch waits until this process may
 * put one more piece of work on a GPU, as its holder (within its quantum,
 * its cap's credit and what it may keep in flight), beside the holder under
 * MPS, or once it has taken the GPU. */
#include "compute.h"

enum { LAUNCH, AGAIN }; /* what a look at the GPU decided: launch now, or look again */

/* While a lower GPU's turn holds our launches back (gang_turn_over), until
 * that holder has decided: it hands over, or launches on (its turn goes
 * on), or GANG_WAIT_NS pass (it may be waiting for our collective, launched
 * past its last look); while the other gang holds it, until its rank here
 * takes our GPU, for at most a quantum (it may never come). Whether we
 * slept. */
static int gang_waits(struct gpu *g, uint64_t now)
{
    int ending;
    struct gpu *l = gang_turn_over(g, now, &ending);
    uint64_t ends = l ? LOAD(&l->hdr->turn_ends_ns) : 0, seen = ending ? LOAD(&l->slots[ending - 1].launches) : 0;
    if (l && ends != g->gang.turn)
        g->gang.turn = ends, g->gang.from = now, g->gang.launches = seen;
    if (l && (ending ? now - g->gang.from < GANG_WAIT_NS && seen == g->gang.launches
                     : now - g->gang.from < g->quantum)) {
        sleep_on_region(g, l, LOAD(&l->hdr->gen), POLL_NS / 10);
        return 1;
    }
    return 0;
}

/* Asleep until our cap's bucket has earned its debt back, a poll at most. */
static void sleep_for_credit(struct gpu *g, uint32_t cap)
{
    int64_t c = LOAD(&g->t->cap_credit);
    uint64_t ns = (uint64_t)(c < 0 ? -c + 1 : 1) * FULL / cap + 1;
    sleep_on(g, LOAD(&g->hdr->gen), ns < POLL_NS ? ns : POLL_NS);
}

/* Whether our cap's bucket cannot pay for what we have queued (at cap):
 * then we waited for our oldest launch, or with nothing in flight, handed
 * the GPU to the others waiting (if others) and slept. */
static int cap_waits(struct gpu *g, uint32_t cap, int64_t queued, int others, uint64_t now)
{
    earn(g, cap, now);
    if (LOAD(&g->t->cap_credit) > queued && (!g->flight.count || g->flight.avg))
        return 0;
    if (g->flight.count) {
        wait_oldest(g);
    } else {
        /* Our idle time is theirs; but our tenant's own processes share our
         * bucket, as empty for them: they would only hand it back. */
        int next = others ? best_waiter(g, (int)g->mine) : -1;
        if (next >= 0 && tenant_of(g, (uint32_t)next) != g->t)
            hand_over(g, 0);
        sleep_for_credit(g, cap);
    }
    ADD(&g->t->waited_ns, fg_now_ns() - now); /* throttled by the cap */
    return 1;
}

/* Whether our cap's bucket cannot pay for a launch: then we are no
 * waiter, and slept (sleep_for_credit). */
static int cap_asleep(struct gpu *g, uint64_t now)
{
    uint32_t cap = cap_of(g);
    if (!cap)
        return 0;
    earn(g, cap, now);
    if (LOAD(&g->t->cap_credit) > 0)
        return 0;
    if (mask_has(g->hdr->waiting, g->mine))
        mask_clear(g->hdr->waiting, g->mine);
    sleep_for_credit(g, cap);
    return 1;
}

/* Whether a process of another tenant waits for the GPU: the turn we
 * share with the holder of our tenant then ends with its quantum. */
static int stranger_waits(struct gpu *g)
{
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        for (uint64_t m = others_word(g, g->hdr->waiting, w); m; m &= m - 1)
            if (tenant_of(g, w * 64 + (uint32_t)__builtin_ctzll(m)) != g->t)
                return 1;
    return 0;
}

/* Whether tenant t, another tenant's and further behind us, is capped and
 * has earned half its bucket back: it handed us the GPU for want of
 * credit, and what it earns in a whole quantum of ours can be more than
 * its bucket banks (BURST_NS): at 60 % it earns 6 ms in our 10, banks 5,
 * and got 45 % for its 60 % share. Handed back at any level of credit,
 * it gets its due; half the bucket spaces the hand-overs. */
static int capped_refilled(struct gpu *g, struct fg_sched_tenant *t, uint64_t now)
{
    uint32_t cap = LOAD(&t->cap);
    if (t == g->t || !cap || cap > FULL || !goes_before_us(g, t))
        return 0;
    uint64_t last = LOAD(&t->cap_refilled);
    int64_t c = LOAD(&t->cap_credit);
    if (now > last)
        c += (int64_t)((now - last) * cap / FULL);
    return c >= BURST_NS / 2;
}

/* We hold g: whether we launch now, or look again after handing the GPU
 * over or waiting (for a gang's turn, our cap or our work in flight). */
static int as_holder(struct gpu *g, uint64_t now)
{
    if (!g->turn.holding) { /* our turn starts */
        g->turn.holding = 1;
        STORE(&g->t->last_slot, g->mine + 1);
        turn_clock_settle(g);
        g->turn.clock_want = !g->turn.clock1;
        g->side.ran = g->side.fill = g->side.kin = 0;
        /* since_ns is ahead while the last holder's work left running runs */
        uint64_t since = LOAD(&g->hdr->since_ns);
        g->turn.at = since < now ? since : now;
        STORE(&g->hdr->turn_ends_ns, g->turn.at + g->quantum);
    }
    int others = others_in(g, g->hdr->waiting), present = others_in(g, g->hdr->present);
    int next = others ? best_waiter(g, (int)g->mine) : -1;
    uint32_t np = priority_of(g, next), mp = LOAD(&g->t->priority);
    struct fg_sched_tenant *nt = next >= 0 && np == mp ? tenant_of(g, (uint32_t)next) : NULL;
    if (next >= 0 && np > mp) {
        hand_over(g, 1);
        return AGAIN;
    }
    if (nt && leads(g, nt, g->t) > 0) { /* the gang's other GPUs have gone to it */
        give(g, 0, 0);
        return AGAIN;
    }
    if (gang_waits(g, now))
        return AGAIN;
    /* A loan ends when one further behind wants the GPU back: held on to
     * the end of a quantum, each pause of a tenant between its
     * synchronizations would hand a whole quantum to one ahead of it, and
     * shares would drift toward equal. So does a turn a capped tenant gave
     * up for want of credit, once it has earned enough back. */
    if (nt && (g->turn.lent ? goes_before_us(g, nt) : capped_refilled(g, nt, now))) {
        hand_off(g);
        return AGAIN;
    }
    if (now - g->turn.at >= g->quantum) {
        /* A quantum is over: pay for it, then run on only while we are
         * still the one furthest behind among our equals. */
        pay(g, g->t, 2 * g->quantum, now);
        g->turn.at = now;
        if (nt && goes_before_us(g, nt)) {
            hand_off(g);
            return AGAIN;
        }
        STORE(&g->hdr->turn_ends_ns, now + g->quantum);
    }
    uint32_t cap = cap_of(g);
    int64_t queued = ahead(g, now);
    if (cap && cap_waits(g, cap, queued, others, now))
        return AGAIN;
    /* In flight: what drains at a hand-over (the GPU stays busy meanwhile),
     * or what a cap's debt may reach, with one launch queued behind the
     * running one at least; below a higher priority, what it may find
     * running when it comes. */
    int below = present && higher_present(g);
    if ((present || cap) && g->flight.count >= (below ? 1u : 2u) &&
        (queued >= (below ? AHEAD_BELOW_NS : cap ? AHEAD_SHORT_NS : AHEAD_NS) || g->flight.count >= RING)) {
        wait_oldest(g);
        return AGAIN;
    }
    return LAUNCH;
}

/* Waits until this process may launch one more piece of work on g (g
 * locked throughout, but for waits). */
void gate(struct gpu *g)
{
    /* Requests are measured from here (how bound by its host: beside, fills). */
    uint64_t waited_from = 0, entered = fg_now_ns();
    int by = 0; /* launching beside the holder */
    if (!__atomic_load_n(&g->side.request_at, __ATOMIC_RELAXED))
        __atomic_store_n(&g->side.request_at, entered, __ATOMIC_RELAXED);
    pause_ends(g, entered);
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
            if (as_holder(g, now) == AGAIN)
                continue;
            break;
        }
        g->turn.holding = 0;
        g->turn.lent = 0; /* a turn handed to us is ours */
        if (g->turn.clock1)
            turn_clock_settle(g);
        if (!waited_from)
            waited_from = now;
        /* A cap's bucket that cannot pay: nothing to wait for the GPU
         * for, so not among those waiting, whom a holder of lower priority
         * yields to and a holder of ours makes room for: a tenant of high
         * priority capped at 30 % beside a low one left the GPU idle 40 %
         * of the time, the low one yielding at each launch to a waiter
         * that then handed it back. */
        if (cap_asleep(g, now))
            continue;
        if (!mask_has(g->hdr->waiting, g->mine)) {
            mask_set(g->hdr->waiting, g->mine);
            catch_up(g, now);
        }
        /* Beside the holder: as much in flight as a holder among equals
         * keeps, and still waiting, so that its pauses are lent to us.
         * Beside a process of our tenant, once its turn is over and
         * another tenant waits, we launch no more into it (what we left
         * running, we pay for: pay_spill). */
        int kin = kin_holds(g, h, now);
        if (kin || beside(g, h, now)) {
            if (waited_from) /* what we waited until now; a full queue is not throttling */
                ADD(&g->t->waited_ns, now - waited_from);
            waited_from = 0;
            int64_t queued = ahead(g, now);
            if (kin && now >= LOAD(&g->hdr->turn_ends_ns) && stranger_waits(g)) {
                if (g->flight.count)
                    wait_oldest(g);
                else
                    sleep_on(g, LOAD(&g->hdr->gen), POLL_NS / 5);
                continue;
            }
            /* below a higher priority, what it may find running when it comes, as our holder */
            int below = kin && higher_present(g);
            if (g->flight.count >= (below ? 1u : 2u) &&
                (queued >= (below ? AHEAD_BELOW_NS : AHEAD_NS) || g->flight.count >= RING)) {
                wait_oldest(g);
                continue;
            }
            by = g->side.ran = 1;
            g->side.kin = kin, g->side.fill = 0;
            break;
        }
        /* In an equal's gaps: FILL_AHEAD_NS in flight, one launch at least. */
        if (fills(g, h, now)) {
            if (waited_from)
                ADD(&g->t->waited_ns, now - waited_from);
            waited_from = 0;
            if (g->flight.count && (ahead(g, now) >= FILL_AHEAD_NS || g->flight.count >= RING)) {
                wait_oldest(g);
                continue;
            }
            by = g->side.ran = g->side.fill = 1;
            g->side.kin = 0;
            break;
        }
        if (may_take(g, h, now) && best_waiter(g, -1) == (int)g->mine && take(g, h, now))
            continue;
        /* until the holder has been idle long enough to take from, at most a poll */
        uint64_t until = g->turn.look_at > now ? g->turn.look_at - now : POLL_NS;
        sleep_on(g, LOAD(&g->hdr->gen), until < POLL_NS ? until : POLL_NS);
        /* Waited time is counted as it passes, for readers of the region. */
        uint64_t after = fg_now_ns();
        ADD(&g->t->waited_ns, after - waited_from);
        waited_from = after;
    }
    if (!by && g->hdr && mask_has(g->hdr->waiting, g->mine))
        mask_clear(g->hdr->waiting, g->mine);
    uint64_t left = fg_now_ns();
    if (waited_from && g->t)
        ADD(&g->t->waited_ns, left - waited_from);
    __atomic_fetch_add(&g->side.request_gated, left - entered, __ATOMIC_RELAXED);
}
