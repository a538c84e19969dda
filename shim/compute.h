/* Compute policy inside the shim: what its parts (compute*.c) share.
 *
 * Shares, priorities and caps of a GPU's time between tenants, through the
 * GPU's scheduler region (include/flexgv/sched_layout_gen.h, created and
 * joined by the control plane; the protocol is described in
 * tools/gen/layout.go).
 *
 * One tenant at a time launches on a GPU: its process that holds it, and
 * beside it the tenant's other processes, uncapped (kin_holds). A holder alone on
 * the GPU launches straight through (a few loads and a counter). With other
 * processes present it keeps the work it has in flight short (completion
 * events, untimed but where a cap's busy period begins), so that the GPU
 * changes hands fast; when they wait, it hands the GPU over at the end of
 * its quantum to the waiting process of highest priority whose tenant has
 * the smallest virtual time (GPU time held over its share: weighted fair
 * queueing), once what it has in flight is short (that runs on, paid by
 * it, while the next holder wakes and launches: a drained GPU would idle
 * meanwhile), and at once, drained, when a higher priority waits. Time
 * held is charged on the host's clock, then settled on the device's: a
 * turn whose length there (two timed events) was shorter gets the
 * difference back (turn_clock_settle). A
 * waiter takes the GPU itself when the holder is free, dead (its slot's
 * lock is gone), idle (no launch over a poll and nothing in flight; a
 * higher priority's pause, 2 ms, or LEND_AFTER_NS after it synchronized
 * where its requests are bound by its host), of lower priority, or past
 * its quantum: a holder that stops launching or is killed stalls nobody.
 * Waiters sleep on a futex in the region, holding no lock.
 *
 * A cap (--compute-max) is a token bucket in the tenant's entry, shared by
 * its processes: it earns cap x elapsed time up to a small burst and pays
 * for the time its launches kept the GPU busy, from a launch (or the
 * previous completion) to a completion. A launch made with nothing in
 * flight begins a busy period: once a millisecond it is bracketed by timed
 * events, so that its time is the device's and a host that sees the
 * completion late is not charged for its own delay, and the ratio of the
 * two learnt; the busy periods between pay the host's view at that ratio.
 * Launches queued behind others keep untimed events (a timed one between
 * back-to-back kernels costs the GPU ~2 us), and their completions, seen
 * one after another, are charged in host time.
 * A capped holder waits, or hands over, while the bucket cannot pay for
 * what it has in flight.
 *
 * The shim's own event calls never change what a launch returns; launches
 * on capturing streams only add graph nodes and pass. If the region cannot
 * be used, the GPU is not scheduled (said once). The region is shared with
 * other users' tenants: a truncation under us is caught (SIGBUS on the
 * region only) and replaces the mapping with private memory, which turns
 * scheduling off on that GPU instead of crashing the program.
 *
 * A process that cannot join its tenant's scheduler (a damaged or foreign
 * file, all process slots taken) has its launches on that GPU refused
 * (CUDA_ERROR_NOT_PERMITTED), as a tenant's memory setup failing refuses
 * CUDA; FLEXGV_ON_ERROR=passthrough lets them through unscheduled.
 *
 * Its parts: compute.c, the hooks (a launch goes straight through, or is
 * gated and then tracked; a synchronization says what completed and may
 * lend the GPU); compute_gate.c, the loop a gated launch waits in;
 * compute_turns.c, who holds the GPU and when it changes hands;
 * compute_gang.c, the order of a gang's turns across GPUs; compute_cap.c,
 * a cap's bucket; compute_flight.c, the launches in flight;
 * compute_beside.c, running beside the holder (under MPS, or in a
 * host-bound equal's gaps); compute_region.c,
 * the scheduler region and this process's slot in it. Each GPU's state,
 * struct gpu, has a part per owner. */
#ifndef FLEXGV_COMPUTE_H
#define FLEXGV_COMPUTE_H

#include "memquota.h"
#include "flexgv/liveness.h"
#include "flexgv/sched_layout_gen.h"

#include <pthread.h>

/* The parts' shared data and functions are the library's own: reached
 * directly, not through the GOT and PLT (a launch reads them). */
#pragma GCC visibility push(hidden)

enum { RING = 256 };                  /* launches tracked in flight per GPU, at most */
#define BURST_NS 5000000ll            /* cap credit an idle tenant may bank */
#define SWEEP_NS 100000000ull         /* dead processes' bits are looked for this often */
/* Timing constants; a build may set them (-D) to measure another choice
 * (scripts/gpu-e2e.sh's shim variants). */
#ifndef AHEAD_NS
#define AHEAD_NS 4000000ll            /* tracked work let ahead of completions... */
#endif
#ifndef AHEAD_SHORT_NS
#define AHEAD_SHORT_NS 500000ll       /* ...under a cap... */
#endif
#ifndef AHEAD_BELOW_NS
#define AHEAD_BELOW_NS 250000ll       /* ...or when a higher priority may come */
#endif
#ifndef HANDOFF_NS
#define HANDOFF_NS 3000000ll          /* work left this short runs on as an equal's turn begins */
#endif
#ifndef POLL_NS
#define POLL_NS 500000ull             /* a waiter looks at the holder this often */
#endif
#ifndef LEND_NS
#define LEND_NS 1000000ull            /* a higher priority's pauses after a synchronization lent at once, if this long on average... */
#endif
#ifndef LEND_AFTER_NS
#define LEND_AFTER_NS 300000ull       /* ...else once one has lasted this long */
#endif
#ifndef REAP_NS
#define REAP_NS 100000ull             /* a launch looks at completions at most this often */
#endif
#ifndef TIMED_NS
#define TIMED_NS 1000000ull           /* a cap's busy periods are timed this often, at most */
#endif
#ifndef BESIDE_HOST
#define BESIDE_HOST 7500u             /* a higher holder this bound by its host is run beside under MPS, its short pauses taken */
#endif
#ifndef BESIDE_HURT
#define BESIDE_HURT 1000u             /* ...unless that costs its requests this much of their host-bound share (10 points)... */
#endif
#ifndef BESIDE_OFF_NS
#define BESIDE_OFF_NS 8000000000ull   /* ...then not for this long, doubled at each such cost found again... */
#endif
#ifndef BESIDE_OFF_MAX_NS
#define BESIDE_OFF_MAX_NS FG_BESIDE_OFF_MAX_NS /* ...up to this (each look costs: judge_beside) */
#endif
#ifndef FILL_AHEAD_NS
#define FILL_AHEAD_NS 2000000ll       /* what a fill keeps in flight: what the holder's next kernel may wait for */
#endif
#ifndef FILL_HOST
#define FILL_HOST 6000u               /* an equal holder this bound by its host (and by its share) has its gaps filled */
#endif
#ifndef GANG_AHEAD_NS
#define GANG_AHEAD_NS 200000ull       /* a gang's rank stops this long before its lower GPU's quantum ends... */
#endif
#ifndef GANG_WAIT_NS
#define GANG_WAIT_NS 1000000ull       /* ...and waits at most this long for its holder's decision */
#endif
#define FULL 10000u                   /* 100 % in hundredths */

enum { G_NONE, G_READY, G_OFF, G_REFUSED };
enum { LOOKED = 1, DONE, LAST }; /* what reap found of a launch in flight */

struct launch {
    CUevent ev;
    CUevent start;      /* timed, recorded before it when nothing was in flight (capped only) */
    uint64_t at;        /* host time of the launch */
    uintptr_t lane[2];  /* the stream it runs on (lane_of) */
    uint64_t seq;       /* its place among the launches tracked (`tracked`) */
    int timed;          /* ev is timed too: it has a start */
    int begins;         /* made with nothing in flight, capped: timed, or sampled untimed (mark_start) */
};

/* Our launches in flight on a GPU, oldest first, and the events they use. */
struct flight {
    struct launch ring[RING];
    unsigned head, count;
    unsigned blocked;   /* our threads inside a synchronous copy or memset */
    CUevent pool[RING]; /* completed events, to be recorded again */
    unsigned npool;
    CUevent tpool[2 * RING]; /* the same, timed (a cap's busy periods: starts and ends) */
    unsigned ntpool;
    uintptr_t known[2]; /* a lane whose launches tracked before known_upto have completed (known_done) */
    uint64_t known_upto;
    uint64_t last_done; /* host time of the last completion */
    uint64_t reaped_at; /* when completions were last looked at */
    uint64_t avg;       /* moving average of one launch's busy time (ns); 0: none measured */
};

/* A cap's busy periods: how the launch under way begins one, and what
 * their timing has learnt. */
struct busy {
    CUevent start;      /* timed, recorded by enter for the launch under way */
    int begins;         /* the launch under way begins a capped busy period */
    uint64_t timed_at;  /* when a busy period was last bracketed by timed events */
    uint32_t ratio;     /* device time over host time of those busy periods (hundredths of a percent) */
};

/* Our turns, and what we saw of the holder's. */
struct turn {
    /* what we last saw of the holder, to tell it idle */
    uint32_t seen_holder;
    int seen_busy;                  /* it had work in flight */
    uint64_t seen_launches, seen_at;
    uint64_t seen_launched_at;      /* when its launch count last moved */
    uint64_t look_at;               /* when it will have been idle long enough to take from */
    uint64_t wdefault, wdefault_at; /* weight of a tenant without a share, and when computed */
    uint64_t idle_at, gap_avg; /* when a sync left nothing in flight; how long such pauses last */
    int holding;               /* we held the GPU at our last look, in a turn begun at `at` */
    int lent;                  /* that turn was taken, ahead, from an idle holder: a loan */
    uint64_t at;
    /* the turn on the device's clock (turn_clock): timed events before its
     * first launch (on `stream`, at host time clock_at) and after its work
     * (paid until host time clock_end) */
    int clock_want;
    CUevent clock0, clock1;
    CUstream stream;
    uint64_t clock_at, clock_end;
};

/* The lower GPU's turn end we last waited on (gang_turn_over), since when,
 * and its holder's launches then. */
struct gang {
    uint64_t turn, from, launches;
};

/* What we run beside the holder and what tells whether others may run
 * beside us. */
struct side {
    int ran;                   /* we launched beside the holder since our last turn */
    int fill;                  /* ...in an equal's gaps (paid in virtual time) */
    int kin;                   /* ...in our own tenant's turn (paid by its holder) */
    /* the request under way: its first launch since the last synchronization
     * (0: none) and its time spent in gate since then (atomic) */
    uint64_t request_at, request_gated;
    int request_beside;        /* it began with others running beside us (beside_everywhere) */
    uint64_t issued_avg, took_avg; /* moving sums of requests' host work and time (note_request) */
    /* what lower priorities beside us cost our requests (note_request):
     * each request's host-bound share, averaged over those with no one
     * beside and over those since others ran beside again (with_n of
     * them), and how long they stay off when that costs too much */
    uint32_t alone_share, with_share, with_n;
    uint64_t off_ns;
    uint32_t alive_h;          /* the holder (slot + 1) last seen alive, at alive_at */
    uint64_t alive_at;
};

struct gpu {
    /* the region and our place in it, read by every launch */
    pthread_mutex_t lock; /* this process's threads on this GPU (slow path only) */
    int state;
    struct fg_sched_header *hdr;
    struct fg_sched_slot *slots, *me;
    struct fg_sched_tenant *t; /* our tenant's entry */
    uint32_t mine, tenant;     /* our slot, our tenant entry */
    uint64_t notme[FG_SCHED_WORDS]; /* the masks' words without our bit */
    int fd;                    /* never mapped: holds our slot's lock */
    uint64_t quantum;
    uint64_t swept_at;
    int mps;                   /* our contexts on this GPU are MPS clients */
    struct flight flight; /* compute_flight.c */
    struct busy cap;      /* compute_cap.c */
    struct turn turn;     /* compute_turns.c, compute_gate.c */
    struct gang gang;     /* compute_gate.c */
    struct side side;     /* compute_beside.c, compute_gate.c */
};

/* ---- what every part reads, inline: a launch pays no call for them ---- */

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)

/* Slot i's bit in a mask of the header (present, waiting). */
static inline int mask_has(uint64_t *m, uint32_t i) { return LOAD(&m[i / 64 % FG_SCHED_WORDS]) >> i % 64 & 1; }
static inline void mask_set(uint64_t *m, uint32_t i) { __atomic_fetch_or(&m[i / 64 % FG_SCHED_WORDS], 1ull << i % 64, __ATOMIC_SEQ_CST); }
static inline void mask_clear(uint64_t *m, uint32_t i)
{
    __atomic_fetch_and(&m[i / 64 % FG_SCHED_WORDS], ~(1ull << i % 64), __ATOMIC_SEQ_CST);
}

/* Word w of mask m without our own bit. */
static inline uint64_t others_word(const struct gpu *g, uint64_t *m, uint32_t w)
{
    return LOAD(&m[w]) & g->notme[w];
}

/* Whether a slot other than ours has its bit in m (on every launch of a
 * process alone: no branch per word). */
static inline __attribute__((always_inline)) int others_in(const struct gpu *g, uint64_t *m)
{
    uint64_t any = 0;
#pragma GCC unroll 8
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        any |= others_word(g, m, w);
    return any != 0;
}

static inline off_t slot_off(uint32_t i) { return (off_t)(sizeof(struct fg_sched_header) + i * sizeof(struct fg_sched_slot)); }

static inline off_t tenant_off(uint32_t i)
{
    return (off_t)(offsetof(struct fg_sched_header, tenants) + i * sizeof(struct fg_sched_tenant));
}

static inline struct fg_sched_tenant *tenant_of(struct gpu *g, uint32_t slot)
{
    if (slot >= FG_SCHED_SLOTS)
        return NULL; /* a holder number nobody wrote */
    uint32_t t = LOAD(&g->slots[slot].tenant);
    return t < FG_SCHED_TENANTS ? &g->hdr->tenants[t] : NULL;
}

static inline uint32_t priority_of(struct gpu *g, int slot)
{
    struct fg_sched_tenant *t = slot < 0 ? NULL : tenant_of(g, (uint32_t)slot);
    return t ? LOAD(&t->priority) : 0;
}

/* Our tenant's cap (hundredths of a percent; 0: none). A value no CLI
 * writes is no cap; a debt larger than any launch can run up is dropped. */
static inline uint32_t cap_of(struct gpu *g)
{
    uint32_t cap = LOAD(&g->t->cap);
    if (cap > FULL)
        return 0;
    int64_t c = LOAD(&g->t->cap_credit);
    if (cap && (c < -100 * BURST_NS || c > BURST_NS))
        __atomic_compare_exchange_n(&g->t->cap_credit, &c, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cap;
}

/* Work still queued: at least what the oldest launch has been running. */
static inline int64_t ahead(const struct gpu *g, uint64_t now)
{
    if (!g->flight.count)
        return 0;
    uint64_t since = g->flight.ring[g->flight.head].at > g->flight.last_done ? g->flight.ring[g->flight.head].at : g->flight.last_done;
    int64_t running = now > since ? (int64_t)(now - since) : 0;
    int64_t expected = (int64_t)(g->flight.count * g->flight.avg);
    return expected > running ? expected : running;
}

/* Work still to run, expected: what the launches in flight take less what
 * the oldest has run; -1 when nothing measured tells. */
static inline int64_t left(const struct gpu *g, uint64_t now)
{
    if (!g->flight.count)
        return 0;
    if (!g->flight.avg)
        return -1;
    uint64_t since = g->flight.ring[g->flight.head].at > g->flight.last_done ? g->flight.ring[g->flight.head].at : g->flight.last_done;
    int64_t running = now > since ? (int64_t)(now - since) : 0, expected = (int64_t)(g->flight.count * g->flight.avg);
    return expected > running ? expected - running : 0;
}

/* ---- the region and our place in it (compute_region.c) ---- */

extern struct gpu gpus[FG_NDEV];
/* The GPUs this process is scheduled on, all attached at its first launch:
 * while it holds each alone, no launch needs to know its device. */
extern struct gpu *mine_list[FG_NDEV];
extern int nmine;
/* dev's state if it is scheduled (attached at the first call); NULL if not. */
struct gpu *scheduled(int dev);
/* Clears dead processes' bits and writes our slot again (g locked). */
void sweep(struct gpu *g, uint64_t now);
/* Wakes every process asleep on g's region. */
void wake_all(struct gpu *g);
/* Sleeps, g unlocked, at most ns or until r's region changes from gen. */
void sleep_on_region(struct gpu *g, struct gpu *r, uint32_t gen, uint64_t ns);
void sleep_on(struct gpu *g, uint32_t gen, uint64_t ns);

/* ---- launches in flight (compute_flight.c) ---- */

extern uint64_t tracked; /* launches tracked so far, on every GPU (atomic) */
/* Names the stream s stands for: a stream's work completes in order. */
void lane_of(CUstream s, uintptr_t lane[2]);
/* What was tracked on lane before upto is known complete (g locked). */
void known_done(struct gpu *g, const uintptr_t lane[2], uint64_t upto);
/* Pooled events, timed or not (g locked); event_get: NULL if none. */
CUevent event_get(struct gpu *g, int timed);
void event_put(struct gpu *g, CUevent ev, int timed);
/* Accounts for what completed (g locked). */
void reap(struct gpu *g, uint64_t now);
/* Waits, g unlocked, for the oldest launch in flight. */
void wait_oldest(struct gpu *g);
/* Puts a launch at `at` on s in flight (g locked). */
void track(struct gpu *g, CUstream s, uint64_t at);

/* ---- a cap's bucket (compute_cap.c) ---- */

/* Adds what the bucket earned since it last did, at cap. */
void earn(struct gpu *g, uint32_t cap, uint64_t now);
/* Under a cap, a launch on s made with nothing in flight begins a busy
 * period (g locked). */
void mark_start(struct gpu *g, CUstream s);
/* The device time the completed launches of reap's state[] kept the GPU
 * busy; -1 when device time cannot tell. */
int64_t device_busy(struct gpu *g, const unsigned char *state, unsigned n, unsigned first, int64_t host);

/* ---- gang turns (compute_gang.c) ---- */

/* 1 when tenant a leads b on g, -1 when b leads a, 0 when neither does. */
int leads(struct gpu *g, struct fg_sched_tenant *a, struct fg_sched_tenant *b);
/* A lower GPU whose turn means we should not launch on g for now; NULL if
 * none; *ending: its holder (slot + 1) when its quantum is ending. */
struct gpu *gang_turn_over(struct gpu *g, uint64_t now, int *ending);
/* Wakes the waiters of the GPUs above g after a hand-over on g. */
void wake_followers(struct gpu *g);

/* ---- turns, fair queueing and priority (compute_turns.c) ---- */

/* Charges t, the holder, for its time not yet paid for, at most `fair`. */
void pay(struct gpu *g, struct fg_sched_tenant *t, uint64_t fair, uint64_t now);
/* Whether tenant a's turn on g comes before b's, at equal priority. */
int goes_before_us(struct gpu *g, struct fg_sched_tenant *t);
/* The waiting slot to run next, other than `except`; -1 if none. */
int best_waiter(struct gpu *g, int except);
/* Whether a process of higher priority than ours is on the GPU. */
int higher_present(struct gpu *g);
/* Whether a waiter may take the GPU from holder h (slot + 1). */
int may_take(struct gpu *g, uint32_t h, uint64_t now);
/* Brings a newcomer to the queue no further back than the holder allows. */
void catch_up(struct gpu *g, uint64_t now);
/* Puts the GPU from holder `from` (slot + 1, 0: none) to us; 0 if lost. */
int take(struct gpu *g, uint32_t from, uint64_t now);
/* Hands the GPU to the best waiter, if any may have it: drained (drain, or
 * always by hand_over) or not. */
void give(struct gpu *g, int preempted, int drain);
void hand_over(struct gpu *g, int preempted);
/* Hands the GPU to the best waiter of our priority, if any may have it,
 * once what we have in flight is short: it runs on while the next holder
 * begins, paid by us. */
void hand_off(struct gpu *g);
/* The first launch of our turn, on s, starts the turn's time on the
 * device's clock (g locked; once a turn). */
void turn_clock_start(struct gpu *g, CUstream s);
/* A turn's time on the device's clock, once its end is there: what it was
 * charged beyond that is given back (g locked). */
void turn_clock_settle(struct gpu *g);
/* The pause since the last synchronization, if any, ends at now. */
void pause_ends(struct gpu *g, uint64_t now);

/* ---- running beside the holder (compute_beside.c) ---- */

/* Whether we may launch beside holder h (slot + 1) without holding g. */
int beside(struct gpu *g, uint32_t h, uint64_t now);
/* Whether we may fill the gaps of holder h, an equal bound by its host. */
int fills(struct gpu *g, uint32_t h, uint64_t now);
/* Whether holder h is a process of our tenant, whose turn we share. */
int kin_holds(struct gpu *g, uint32_t h, uint64_t now);
/* Charges our tenant for ns of work run on past its turn. */
void pay_spill(struct gpu *g, uint64_t ns, uint64_t now);
/* Charges our tenant's virtual time for ns of work run in a holder's gaps. */
void pay_fill(struct gpu *g, uint64_t ns, uint64_t now);
/* Whether every other process on g runs beside us. */
int beside_us(struct gpu *g, uint64_t now);
/* Whether this process holds each of its n GPUs, uncapped, with only
 * processes that run beside it or none; if so, counts the launch. */
int beside_everywhere(int n);
/* Notes how bound by its host the request that a synchronization begun at
 * `at` ends was. */
void note_request(struct gpu *g, uint64_t at, uint64_t now);

/* ---- the gate of every scheduled launch (compute_gate.c) ---- */

/* Waits until this process may launch one more piece of work on g (g
 * locked throughout, but for waits). */
void gate(struct gpu *g);

#pragma GCC visibility pop

#endif
