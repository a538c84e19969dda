/* Running beside the holder rather than in turns with it. Under MPS, a
 * lower priority's kernels run beside a holder whose requests are bound by
 * its host, and such a holder's launches go through untracked; among
 * equals, with or without MPS, a waiter fills the gaps a host-bound
 * holder leaves on the GPU. What tells is how bound by its host each
 * tenant's requests are, measured here. */
#include "compute.h"

/* Whether holder h (slot + 1) is alive: its lock, looked at once a poll
 * (a dead one is taken from as ever). */
static int holder_alive(struct gpu *g, uint32_t h, uint64_t now)
{
    if (h != g->side.alive_h || now - g->side.alive_at >= POLL_NS) {
        if (!fg_byte_held(g->fd, slot_off(h - 1)))
            return 0;
        g->side.alive_h = h;
        g->side.alive_at = now;
    }
    return 1;
}

/* Whether we may launch beside holder h (slot + 1) without holding the
 * GPU: we and it are MPS clients, so our kernels run beside its own rather
 * than in turns with them, and it is of higher priority and bound by its
 * host (its requests hardly wait for the GPU, which idles through most of
 * them: eager inference), so what we run costs it little. A GPU-bound
 * holder (a CUDA graph's replay, a loop that keeps the GPU busy) waits for
 * the GPU most of its request, and is not run beside; nor is a capped
 * tenant, whose bucket only a holder keeps. */
/* Whether tenant t keeps lower priorities from running beside it now:
 * its processes found that it costs their requests (judge_beside). A time
 * further ahead than it ever sets is not its (garbage in the region). */
static int kept_off(struct fg_sched_tenant *t, uint64_t now)
{
    uint64_t until = LOAD(&t->beside_off_ns);
    return now < until && until - now <= BESIDE_OFF_MAX_NS;
}

int beside(struct gpu *g, uint32_t h, uint64_t now)
{
    if (!g->mps || !h || h > FG_SCHED_SLOTS || cap_of(g) || !LOAD(&g->slots[h - 1].mps))
        return 0;
    struct fg_sched_tenant *ht = tenant_of(g, h - 1);
    if (!ht || LOAD(&ht->priority) <= LOAD(&g->t->priority) || LOAD(&ht->host_bound) < BESIDE_HOST ||
        kept_off(ht, now))
        return 0;
    return holder_alive(g, h, now);
}

/* Whether holder h (slot + 1) is a process of our own tenant, whose turn
 * we share: the turn is the tenant's, and its processes launch in it
 * side by side, as on a GPU of their own (time-sliced by the GPU, or at
 * once under MPS), each keeping what a holder among equals keeps in
 * flight. Taking turns among themselves instead, a host-bound process
 * waited out a GPU-bound sibling's whole quantum at every other turn and
 * kept 37 % of its alone rate (time-slicing leaves it 89 %). The holder's
 * turn pays for what they all ran. Not under a cap: each process pays its
 * own busy time from the bucket they share, and work that overlaps would
 * be paid twice. */
int kin_holds(struct gpu *g, uint32_t h, uint64_t now)
{
    if (!h || h > FG_SCHED_SLOTS || h - 1 == g->mine || cap_of(g) || tenant_of(g, h - 1) != g->t)
        return 0;
    return holder_alive(g, h, now);
}

/* Whether we may fill the gaps of holder h (slot + 1): a tenant of our
 * priority whose requests are bound by its host, so that the GPU idles
 * through much of its turn, which time-slicing would give us. We keep
 * FILL_AHEAD_NS in flight, one launch at least (the holder's next kernel
 * waits for that, or for one long kernel of ours), and pay for what runs
 * in virtual time (pay_fill), so the holder gets more turns for the time
 * we took. What bounds its cost to the holder is its own measure: our
 * kernels delay its requests, which then wait for the GPU more, and below
 * its share of host work (FILL_HOST at least) we stop: a holder whose
 * requests are h0 host work alone keeps about its share / h0 of its rate,
 * or more, which is what its share promises. Not for a cap (only a holder
 * keeps its bucket), nor between gangs, whose collectives must not meet
 * our kernels out of turn. */
int fills(struct gpu *g, uint32_t h, uint64_t now)
{
    if (!h || h > FG_SCHED_SLOTS || cap_of(g) || h - 1 == g->mine)
        return 0;
    struct fg_sched_tenant *ht = tenant_of(g, h - 1);
    uint32_t hcap = ht ? LOAD(&ht->cap) : 0, hshare = ht ? LOAD(&ht->share) : 0;
    if (!ht || ht == g->t || LOAD(&ht->priority) != LOAD(&g->t->priority) || (hcap && hcap <= FULL) ||
        LOAD(&ht->host_bound) < (hshare > FILL_HOST ? hshare : FILL_HOST) || leads(g, ht, g->t))
        return 0;
    return holder_alive(g, h, now);
}

/* Whether every other process on g runs beside us (beside(), from their
 * side): we are an uncapped MPS client whose requests are bound by its
 * host, and they are uncapped MPS clients of lower priority. Turns then buy
 * our requests nothing that MPS does not give them: our launches go
 * through untracked (as a lone holder's do) and our pauses are not lent
 * (the others run meanwhile anyway). On the H200, eager inference so
 * handled over and again at every request, its kernels each tracked, had
 * p99 1.07-1.91x alone where plain MPS had 1.01-1.08x. */
int beside_us(struct gpu *g, uint64_t now)
{
    if (!g->mps || cap_of(g) || LOAD(&g->t->host_bound) < BESIDE_HOST || kept_off(g->t, now))
        return 0;
    uint32_t mp = LOAD(&g->t->priority);
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        for (uint64_t p = others_word(g, g->hdr->present, w); p; p &= p - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(p);
            struct fg_sched_tenant *t = tenant_of(g, i);
            uint32_t cap = t ? LOAD(&t->cap) : 0;
            if (!t || !LOAD(&g->slots[i].mps) || LOAD(&t->priority) >= mp || (cap && cap <= FULL))
                return 0;
        }
    return 1;
}

/* Whether this process holds each of its n GPUs, uncapped, with only
 * processes there that run beside it (beside_us) or none: then its launch
 * goes straight through, counted, a request starting at its first launch
 * (note_request) and a pause at its end (pause_ends). */
int beside_everywhere(int n)
{
    uint64_t now = 0; /* read once, where needed: a lone holder's launch reads it after the checks */
    for (int i = 0; i < n; i++) {
        struct gpu *g = mine_list[i];
        if (__atomic_load_n(&g->state, __ATOMIC_RELAXED) != G_READY || LOAD(&g->hdr->holder) != g->mine + 1 ||
            cap_of(g) || (others_in(g, g->hdr->present) && !beside_us(g, now ? now : (now = fg_now_ns()))))
            return 0;
    }
    if (!now)
        now = fg_now_ns();
    for (int i = 0; i < n; i++) {
        struct gpu *g = mine_list[i];
        __atomic_store_n(&g->me->launches, g->me->launches + 1, __ATOMIC_RELAXED);
        if (g->mps && !__atomic_load_n(&g->side.request_at, __ATOMIC_RELAXED)) {
            __atomic_store_n(&g->side.request_at, now, __ATOMIC_RELAXED);
            __atomic_store_n(&g->side.request_beside, others_in(g, g->hdr->present) != 0, __ATOMIC_RELAXED);
        }
        pause_ends(g, now);
    }
    return 1;
}

/* Whether lower priorities cost our requests more than they are allowed
 * (BESIDE_HURT of their host-bound share, r for the one just ended): MPS
 * does not preempt, and a trainer's kernels on every SM delay each of our
 * kernels they meet (an H100's eager inference beside 4096² products went
 * from 0.93 host-bound to 0.75, its p99 8.7x alone, where turns kept 1.1x
 * and 2.5x). Then they run in turns, lent our pauses, for off_ns, doubled
 * each time the cost is found again, from seconds: each look leaves the
 * requests behind their arrivals (on that H100, for 0.3-6 s after it), so
 * looks a quarter of a second apart kept its p99 at 3-38x alone, looks 8 s
 * apart at 1.24x, as turns only did. Beside a trainer whose kernels leave room
 * (an H200's eager inference kept 1.01x at 0.97 of the trainer's rate),
 * they stay beside. Requests with no one beside say what ours cost
 * alone. */
static void judge_beside(struct gpu *g, uint32_t r, int with, uint64_t now)
{
    struct side *s = &g->side;
    uint32_t alone = __atomic_load_n(&s->alone_share, __ATOMIC_RELAXED);
    if (!with) {
        __atomic_store_n(&s->alone_share, alone ? (7 * alone + r) / 8 : r, __ATOMIC_RELAXED);
        return;
    }
    uint32_t n = __atomic_load_n(&s->with_n, __ATOMIC_RELAXED);
    uint32_t w = n ? (7 * __atomic_load_n(&s->with_share, __ATOMIC_RELAXED) + r) / 8 : r;
    __atomic_store_n(&s->with_share, w, __ATOMIC_RELAXED);
    __atomic_store_n(&s->with_n, n + 1, __ATOMIC_RELAXED);
    if (alone && n + 1 >= 4 && w + BESIDE_HURT < alone) {
        uint64_t off = __atomic_load_n(&s->off_ns, __ATOMIC_RELAXED);
        off = !off ? BESIDE_OFF_NS : 2 * off < BESIDE_OFF_MAX_NS ? 2 * off : BESIDE_OFF_MAX_NS;
        __atomic_store_n(&s->off_ns, off, __ATOMIC_RELAXED);
        __atomic_store_n(&s->with_n, 0, __ATOMIC_RELAXED);
        STORE(&g->t->beside_off_ns, now + off);
    }
}

/* How bound by its host our tenant's requests are (beside, fills): of a
 * request's time, from its first launch after a synchronization to the
 * end of the one (begun at `at`) that ends it, the part not spent waiting
 * for the GPU, there or in gate. Near 100 % for eager inference, near 0
 * for a CUDA graph's replay. A ratio of moving sums, not a moving ratio:
 * one request slowed much by a fill then weighs as much as the time it
 * lost, so fills keep the holder's requests to their threshold of host
 * work over them all, not merely between the slow ones. */
void note_request(struct gpu *g, uint64_t at, uint64_t now)
{
    uint64_t from = __atomic_exchange_n(&g->side.request_at, 0, __ATOMIC_RELAXED);
    uint64_t gated = __atomic_exchange_n(&g->side.request_gated, 0, __ATOMIC_RELAXED);
    int with = __atomic_exchange_n(&g->side.request_beside, 0, __ATOMIC_RELAXED);
    if (!from || from > at || now <= from)
        return;
    uint64_t issued = at - from > gated ? at - from - gated : 0, took = now - from;
    uint64_t i = __atomic_load_n(&g->side.issued_avg, __ATOMIC_RELAXED);
    uint64_t t = __atomic_load_n(&g->side.took_avg, __ATOMIC_RELAXED);
    i = t ? (7 * i + issued) / 8 : issued;
    t = t ? (7 * t + took) / 8 : took;
    __atomic_store_n(&g->side.issued_avg, i, __ATOMIC_RELAXED);
    __atomic_store_n(&g->side.took_avg, t, __ATOMIC_RELAXED);
    STORE(&g->t->host_bound, t ? (uint32_t)(i > t ? FULL : i * FULL / t) : 0);
    if (g->mps) {
        /* With no other process left on the GPU, what lower priorities cost
         * says nothing of those that come next: looks start again from the
         * first (kept off for minutes, a trainer that leaves room arriving
         * later would take turns all along). */
        if (!others_in(g, g->hdr->present) &&
            (__atomic_load_n(&g->side.off_ns, __ATOMIC_RELAXED) || LOAD(&g->t->beside_off_ns))) {
            __atomic_store_n(&g->side.off_ns, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&g->side.with_n, 0, __ATOMIC_RELAXED);
            STORE(&g->t->beside_off_ns, 0);
        }
        judge_beside(g, (uint32_t)(issued > took ? FULL : issued * FULL / took), with, now);
    }
}
