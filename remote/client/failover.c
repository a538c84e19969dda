/* Going on at another server when this one dies (flexgv run --remote ADDR
 * --failover ADDR2). At checkpoints the program's state is made again on
 * a new executor of the failover server (migrate.c's state made again,
 * device memory included), which then waits; every call since is kept
 * here, with what its answer was. When the server is lost, the client
 * takes the waiting executor, sends it the kept calls again in their order
 * and checks each answer the program already had: the same, and the
 * program goes on where it was; otherwise (the replay found other data, a
 * call whose result depended on timing the replay does not reproduce) the
 * program gets CUDA_ERROR_DEVICE_UNAVAILABLE, as without a failover, and
 * a message says which call differed. Never different data, silently.
 *
 * Checkpoints are taken at the program's calls when none is under way:
 * the first at its first call, then every FLEXGV_REMOTE_CHECKPOINT_MS, or
 * sooner once the kept calls reach LOG_MAX bytes. A checkpoint that
 * fails (the failover server down, a state that cannot move) keeps the
 * one before, and the calls since it. With a failover server, a call that
 * waits for the device is made where it was sent among the calls kept, or
 * holds the connection while the server makes it (not pending as in
 * conn.c), so that the calls kept are in the order the server made them:
 * it is sent wait-only (conn.c), made once waited if nothing came between,
 * else sent again; its other threads go on meanwhile, so that one it waits
 * for through the device is not kept out. All but fgr_checkpoint under
 * conn.c's lock.
 *
 * FLEXGV_REMOTE_FAILOVER may name several servers, in order: once the
 * program goes on at one, checkpoints are kept on the next (the first at
 * once), and after the last on the program's first server again, should it
 * answer again (restarted), and so on round: two servers that each come
 * back after they die keep the program going for ever. A program moved
 * (flexgv migrate) has the server it moved to as its first from then on.
 *
 * Over shm:// the calls still go through memory shared with the executor,
 * but while they are kept the program's pinned memory is its own and every
 * copy carries its bytes (conn.c, stage.c): pages shared with the executor
 * hold what the program wrote since, not what a kept copy took. */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LOG_MAX (1ull << 30)
/* Answers kept whole (for what the replay may translate), else hashed. */
#define KEPT_ANSWER 64

#define CHAIN_MAX 8
static char *chain[CHAIN_MAX + 1]; /* the failover servers in their order, then the first server */
static int nchain, at;             /* how many; the one checkpoints go to */
static int home = -1;              /* the first server's, when it is not also listed (its own copy) */
static const char *to;         /* chain[at]; NULL: none */
static unsigned failovers;     /* how often the program went on elsewhere */
static uint64_t every_ns = 60ull * 1000000000ull;
static int on;              /* keeping calls: configured, not failed over */
static uint64_t due;        /* when the next checkpoint is due */
static uint64_t backoff;    /* after failed ones, the wait before the next */
static uint64_t taken_at;   /* when the last one was taken */
static struct fgr_conn_saved standby = {.fd = -1};
static int have_standby;
static char last_why[256];  /* why the last checkpoint failed, said once */
static unsigned checkpoints, pause_ms_total, pause_ms_max;
static unsigned unanswered; /* checkpoints not tried: the server did not answer */
static struct fgr_remade latest; /* what the last one took */

struct kept {
    struct kept *next;
    uint8_t *frame;
    uint32_t n;
    uint16_t op;
    uint8_t waits;    /* a round trip: it has an answer */
    uint8_t answered; /* ... which the program had */
    uint8_t passed;   /* not made again: sent to be made if nothing came between, not (yet) answered so */
    uint32_t alen, split; /* its length; the head's, when read in two */
    CUresult result;      /* its first word */
    uint64_t hash;
    uint8_t answer[KEPT_ANSWER];
};
static struct kept *kept, **kept_end = &kept, *last;
static uint64_t kept_bytes, nkept;
static uint64_t kept_gen; /* one more each time the kept calls are dropped */

/* The calls are kept one after the other in chunks of memory (a call kept
 * costs a copy, not an allocation); after a checkpoint the first chunk is
 * used again, the others go. A chunk's pages are made at once, in one
 * call to the kernel: faulted in one by one as calls fill it, they cost
 * the calling thread more than the copies, holding the connection's lock. */
#define CHUNK (4u << 20)
static struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) uint8_t data[];
} *chunks, *chunk_at;

static void *chunk_take(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!chunk_at || chunk_at->cap - chunk_at->used < n) {
        size_t cap = n > CHUNK ? n : CHUNK;
        struct chunk *c = mmap(NULL, sizeof *c + cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (c == MAP_FAILED)
            return NULL;
        *c = (struct chunk){NULL, 0, cap};
        if (chunk_at)
            chunk_at->next = c;
        else
            chunks = c;
        chunk_at = c;
    }
    void *p = chunk_at->data + chunk_at->used;
    chunk_at->used += n;
    return p;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int fgr_failover_setup(const char *primary)
{
    static int done, ok = 1;
    if (done)
        return ok ? 0 : -1;
    done = 1;
    const char *a = getenv("FLEXGV_REMOTE_FAILOVER"), *ms = getenv("FLEXGV_REMOTE_CHECKPOINT_MS");
    if (!a || !*a) {
        if (ms && *ms) {
            fgr_say("FLEXGV_REMOTE_CHECKPOINT_MS is set but FLEXGV_REMOTE_FAILOVER is not: checkpoints are kept on the "
                    "failover server");
            ok = 0;
        }
        return ok ? 0 : -1;
    }
    char *list = strdup(a), *save = NULL;
    for (char *one = list ? strtok_r(list, ",", &save) : NULL; one && ok; one = strtok_r(NULL, ",", &save)) {
        int known = !strncmp(one, "unix://", 7) || !strncmp(one, "shm://", 6) || !strncmp(one, "tcp://", 6) ||
                    !strncmp(one, "tls://", 6);
        if (!known || nchain == CHAIN_MAX) {
            fgr_say("FLEXGV_REMOTE_FAILOVER=%s: want up to %d of unix:///PATH, shm:///PATH, tcp://HOST:PORT or "
                    "tls://HOST:PORT, separated by commas", a, CHAIN_MAX);
            ok = 0;
        } else {
            chain[nchain++] = one;
        }
    }
    if (ok && !nchain) {
        fgr_say("FLEXGV_REMOTE_FAILOVER=%s: no address", a);
        ok = 0;
    }
    /* The program's first server, round again after the last. */
    int listed = 0;
    for (int i = 0; i < nchain; i++)
        listed |= !strcmp(chain[i], primary);
    char *first = ok && !listed ? strdup(primary) : NULL; /* the address file's buffer may be rewritten */
    if (first) {
        home = nchain;
        chain[nchain++] = first;
    }
    if (ok && ms && *ms) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(ms, &end, 10);
        if (errno || *end || *ms == '-' || v < 1 || v > 86400000ull) {
            fgr_say("FLEXGV_REMOTE_CHECKPOINT_MS=%s: want milliseconds from 1 to 86400000", ms);
            ok = 0;
        } else {
            every_ns = v * 1000000ull;
        }
    }
    if (ok) {
        to = chain[0];
        on = 1;
        fgr_keep_images = 0; /* each image sent whole: the failover server keeps other ones */
    }
    return ok ? 0 : -1;
}

int fgr_failover_keeping(void) { return on; }

static int internal_op(int op)
{
    return op == FGR_OP_fgrNudge || op == FGR_OP_fgrWaitTickets || op == FGR_OP_fgrStateSave ||
           op == FGR_OP_fgrStateGet || op == FGR_OP_fgrStatePut || op == FGR_OP_fgrStateLoad ||
           op == FGR_OP_fgrStateRead || op == FGR_OP_fgrStateWrite || op == FGR_OP_fgrStateDone ||
           op == FGR_OP_fgrStateShare || op == FGR_OP_fgrStatePull || op == FGR_OP_fgrStateAlias ||
           op == FGR_OP_fgrStateMark || op == FGR_OP_fgrStateShareRead || op == FGR_OP_fgrStateSums;
}

static void drop_kept(void)
{
    if (chunks) {
        for (struct chunk *c = chunks->next, *next; c; c = next) {
            next = c->next;
            munmap(c, sizeof *c + c->cap);
        }
        chunks->next = NULL;
        chunks->used = 0;
        chunk_at = chunks;
    }
    kept = NULL;
    kept_end = &kept;
    last = NULL;
    kept_bytes = nkept = 0;
    kept_gen++;
}

/* Stops keeping calls, said once: the program then runs without a
 * failover, as it would have without one. */
static void give_up(const char *why)
{
    fgr_say("no failover from here on: %s", why);
    on = 0;
    drop_kept();
}

static struct kept *keep(int op, const struct fgr_buf *w, int waits)
{
    if (!on || internal_op(op))
        return NULL;
    size_t n = w->len + w->tail_len;
    /* room for the address fgrHostMapAt adds (fgr_failover_answered) */
    size_t room = op == FGR_OP_fgrHostMapped ? 8 : 0;
    struct kept *k = n <= UINT32_MAX - room ? chunk_take(sizeof *k + n + room) : NULL;
    if (!k) {
        give_up("no memory to keep the program's calls");
        return NULL;
    }
    *k = (struct kept){.frame = (uint8_t *)(k + 1)};
    memcpy(k->frame, w->p, w->len);
    if (w->tail_len)
        memcpy(k->frame + w->len, w->tail, w->tail_len);
    k->frame[6] &= (uint8_t) ~(FGR_FLAG_MAY_PEND | FGR_FLAG_WAIT_ONLY); /* made again, it is answered when done */
    k->n = (uint32_t)n;
    k->op = (uint16_t)op;
    k->waits = (uint8_t)waits;
    *kept_end = k;
    kept_end = &k->next;
    kept_bytes += n;
    nkept++;
    return k;
}

void fgr_failover_keep(int op, const struct fgr_buf *w, int waits)
{
    struct kept *k = keep(op, w, waits);
    last = waits ? k : NULL;
}

struct fgr_kept_ref fgr_failover_keep_first(int op, const struct fgr_buf *w)
{
    last = NULL;
    struct kept *k = keep(op, w, 1);
    if (k)
        k->passed = 1;
    return (struct fgr_kept_ref){k, kept_gen};
}

/* One word into a lane of the hash: multiplied, its high bits folded down. */
static inline uint64_t step(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    return h ^ h >> 29;
}

/* A hash of an answer's bytes, which tells a replay's answer from the one
 * the program had (not a defence: the server answers what it likes
 * anyway). Four lanes take 32 bytes at a time, so that their products do
 * not wait on each other (one lane was hardly faster than a download over
 * a socket). An answer read in two pieces (its head, then its one large
 * result) is hashed as the same two. */
static uint64_t hash_more(uint64_t h, const uint8_t *p, size_t n)
{
    size_t i = 0;
    if (n >= 64) {
        uint64_t a = h, b = ~h, c = h + 1, d = h - 1, w, x, y, z;
        for (; i + 32 <= n; i += 32) {
            memcpy(&w, p + i, 8);
            memcpy(&x, p + i + 8, 8);
            memcpy(&y, p + i + 16, 8);
            memcpy(&z, p + i + 24, 8);
            a = step(a, w);
            b = step(b, x);
            c = step(c, y);
            d = step(d, z);
        }
        h = step(step(step(a, b), c), d);
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = step(h, w);
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
#define HASH0 0xcbf29ce484222325ull

static void answered(struct kept *k, const uint8_t *a, uint32_t n, const void *direct, uint64_t dn)
{
    k->answered = 1;
    k->alen = (uint32_t)(n + dn);
    k->split = dn ? n : 0;
    k->result = n >= 4 ? (CUresult)fgr_word(a, 4) : CUDA_SUCCESS;
    k->hash = hash_more(hash_more(HASH0, a, n), direct, dn);
    if (!dn && n <= KEPT_ANSWER)
        memcpy(k->answer, a, n);
    /* Mapped pinned memory the executor placed: made again where it was
     * (fgrHostMapAt), as a moved state makes it (journal.c). Answer: u32
     * result, u8 1, u64 8, u64 the address. */
    if (k->op == FGR_OP_fgrHostMapped && n == 21 && !fgr_word(a, 4) && k->n == 4 + FGR_REQ_HDR + 9) {
        uint8_t *f = k->frame;
        memmove(f + 4 + FGR_REQ_HDR + 8, f + 4 + FGR_REQ_HDR, 9);
        memcpy(f + 4 + FGR_REQ_HDR, a + 13, 8);
        uint32_t len = k->n + 8 - 4;
        for (int i = 0; i < 4; i++)
            f[i] = (uint8_t)(len >> (8 * i));
        f[4] = (uint8_t)FGR_OP_fgrHostMapAt;
        f[5] = (uint8_t)(FGR_OP_fgrHostMapAt >> 8);
        k->n += 8;
        k->op = FGR_OP_fgrHostMapAt;
    }
}

void fgr_failover_answered(const uint8_t *a, uint32_t n, const void *direct, uint64_t dn)
{
    struct kept *k = last;
    last = NULL;
    if (k)
        answered(k, a, n, direct, dn);
}

void fgr_failover_made(struct fgr_kept_ref ref, const uint8_t *a, uint32_t n, const void *direct, uint64_t dn)
{
    struct kept *k = ref.k;
    if (!k || ref.gen != kept_gen)
        return; /* a checkpoint or a replay since: dropped */
    k->passed = 0;
    answered(k, a, n, direct, dn);
}

/* Answers the program used that a replay need not reproduce: timing,
 * what the device is doing, what another server's driver counts. Their
 * results must still agree (a query's, but for whether the work was done):
 * a failure there is no count of the driver's. */
static int varies(int op)
{
    const char *n = fgr_op_names[op];
    return !n || strstr(n, "Query") || strstr(n, "ElapsedTime") || strstr(n, "GetInfo") ||
           !strncmp(n, "cuDeviceGet", 11) || !strncmp(n, "cuDeviceTotalMem", 16) ||
           !strcmp(n, "cuDeviceComputeCapability") || !strcmp(n, "cuDeviceCanAccessPeer") ||
           !strcmp(n, "cuDevicePrimaryCtxGetState") || strstr(n, "GetId") || !strncmp(n, "cuPointerGetAttribute", 21) ||
           !strcmp(n, "cuMemPoolGetAttribute") || !strcmp(n, "fgrHostSums");
}

/* Whether a varying answer's result (its first word) is the program's. */
static int same_result(const struct kept *k, const uint8_t *a, uint32_t n)
{
    if (n < 4 || k->alen < 4)
        return n < 4 && k->alen < 4;
    CUresult was = k->result, now = (CUresult)fgr_word(a, 4);
    const char *name = fgr_op_names[k->op]; /* NULL for an operation of no name: varies() takes those */
    return was == now || ((was == CUDA_SUCCESS || was == CUDA_ERROR_NOT_READY) &&
                          (now == CUDA_SUCCESS || now == CUDA_ERROR_NOT_READY) && name && strstr(name, "Query"));
}


static void say_checkpoints(void)
{
    if (on)
        fgr_say("pid %d: %u checkpoints on the failover server %s, %u not tried (it did not answer); the program paused "
                "%u ms at most, %u ms in all; the last: %.1f MiB of device memory (%.1f MiB device to device), %.1f MiB "
                "of state, paused %u ms (the state read at %u ms, the server reached at %u; %u ms for the device memory)",
                (int)getpid(), checkpoints, to, unanswered, pause_ms_max, pause_ms_total, latest.bytes / 1048576.0,
                latest.pulled / 1048576.0, latest.state / 1048576.0, latest.ms, latest.at[0], latest.at[1], latest.at[2]);
}

/* With FLEXGV_REMOTE_LOG=errors, what the checkpoints took is said at
 * exit, once one was tried. */
static void summary_at_exit(void)
{
    static int registered;
    if (!registered && fgr_log_errors()) {
        registered = 1;
        atexit(say_checkpoints);
    }
}

/* A checkpoint that could not be taken: tried again later and later,
 * from the interval (at least 1 s) to the interval (at least a minute);
 * why said once. */
static void not_taken(const char *why)
{
    if (!on)
        return; /* the server was lost meanwhile: said there */
    summary_at_exit();
    if (kept_bytes >= LOG_MAX) { /* the calls kept would grow without end */
        char s[512];
        snprintf(s, sizeof s, "the calls kept since the last checkpoint passed %llu MiB, and no checkpoint could be "
                 "taken: %s", LOG_MAX >> 20, why);
        give_up(s);
        return;
    }
    uint64_t lo = every_ns > 1000000000ull ? every_ns : 1000000000ull;
    uint64_t hi = every_ns > 60000000000ull ? every_ns : 60000000000ull;
    backoff = backoff ? (2 * backoff < hi ? 2 * backoff : hi) : lo;
    due = now_ns() + backoff;
    int again = !strncmp(last_why, why, sizeof last_why - 1);
    snprintf(last_why, sizeof last_why, "%s", why);
    if (!again)
        fgr_say("no checkpoint on the failover server %s: %s; %s", to, why,
                have_standby ? "the one before is kept, with the calls since" : "the program has none yet");
}

/* made holds the program's state as it is now: the calls kept before are
 * of no more use. */
static void taken(struct fgr_conn_saved made, const struct fgr_remade *m, int steps, unsigned undone)
{
    struct fgr_conn_saved old = standby;
    standby = made;
    have_standby = 1;
    drop_kept();
    fgr_hostfn_checkpoint();
    taken_at = now_ns();
    due = taken_at + every_ns;
    backoff = 0;
    last_why[0] = 0;
    checkpoints++;
    latest = *m;
    fgr_conn_drop(&old); /* the checkpoint before ends with its executor */
    /* Said with FLEXGV_REMOTE_LOG=errors: each, and at exit what they took. */
    summary_at_exit();
    if (fgr_log_errors()) {
        char after[96] = "";
        if (undone)
            snprintf(after, sizeof after, ", after %u in two steps the program's changes undid", undone);
        fgr_say("checkpoint %u on the failover server %s (in %s%s; the program paused %u ms; %.1f MiB of device memory, "
                "%.1f MiB of it device to device, %.1f MiB of state%s)", checkpoints, to,
                steps == 2 ? "two steps" : "one step", after, m->ms, m->bytes / 1048576.0, m->pulled / 1048576.0,
                m->state / 1048576.0, fgr_ahead_said(m));
    }
}

static void paused(unsigned ms)
{
    pause_ms_total += ms;
    if (ms > pause_ms_max)
        pause_ms_max = ms;
}


/* Checkpoints are taken in two steps where they can be (ahead.c). */
static struct fgr_ahead ahead = {.conn = {.fd = -1}, .helper = {.fd = -1}, .undone = {.fd = -1}};
static unsigned changed; /* two-step checkpoints in a row the structure changed under */
/* Attempts in two steps before one: FGR_AHEAD_TRIES, one after a checkpoint
 * that all of them failed (a program changing its structure all the time
 * then pays for one attempt a checkpoint, not for all). */
static unsigned tries = FGR_AHEAD_TRIES;

/* The server was lost during a checkpoint, whose calls found it so: the
 * program went on elsewhere, and what the checkpoint made (for the server
 * it went on at) is of no use. The next is due at once, for the next. */
static int overtaken(unsigned before, struct fgr_conn_saved *made)
{
    if (failovers == before)
        return 0;
    if (made)
        fgr_conn_drop(made);
    due = 0;
    return 1;
}

void fgr_checkpoint(void)
{
    char why[1024] = "";
    unsigned before = failovers;
    if (__atomic_load_n(&fgr_captures, __ATOMIC_ACQUIRE) > 0) { /* the calls kept overflow (conn.c) */
        not_taken("a stream capture of the program's stays open");
        return;
    }
    if (ahead.loading) {
        int r = fgr_ahead_end(&ahead, why, sizeof why);
        paused(ahead.pause);
        if (overtaken(before, r > 0 ? &ahead.conn : NULL))
            return;
        if (r > 0) {
            changed = 0;
            tries = FGR_AHEAD_TRIES;
            taken(ahead.conn, &ahead.m, 2, 0);
        } else if (r < 0) {
            changed++; /* what the program made meanwhile: taken again now */
            due = 0;
        } else {
            not_taken(why);
        }
        return;
    }
    if (have_standby && changed < tries) {
        int r = fgr_ahead_start(&ahead, to, &standby, why, sizeof why);
        paused(ahead.pause);
        if (overtaken(before, NULL))
            fgr_ahead_abandon(&ahead);
        else if (r < 0)
            not_taken(why);
        return;
    }
    unsigned undone = changed;
    tries = undone ? 1 : FGR_AHEAD_TRIES;
    changed = 0;
    struct fgr_conn_saved made;
    struct fgr_remade m;
    int ok = fgr_state_remake(to, fgr_ahead_undone(&ahead, to), &standby, &made, &m, why, sizeof why);
    fgr_ahead_drop_undone(&ahead);
    m.at[2] = m.ms - m.at[2]; /* the time the device memory took */
    paused(m.ms);
    if (overtaken(before, &made))
        return;
    if (!ok) {
        fgr_conn_drop(&made);
        not_taken(why);
        return;
    }
    taken(made, &m, 1, undone);
}

/* Before a checkpoint dials the failover server, a thread of its own has
 * reached it within REACH_FRESH_NS: a server whose host stops answering
 * (a dial's timeout, 15 s) then costs the program no pause past the first
 * attempt; each later one counts as not taken, tried again later and
 * later. */
#define REACH_FRESH_NS (10ull * 1000000000ull)
static pthread_mutex_t reach_mu = PTHREAD_MUTEX_INITIALIZER;
static int reaching;       /* the thread is dialing */
static int reach_err;      /* its last answer: 0, or why not (errno) */
static uint64_t reach_at;  /* when it last answered */
static const char *reach_to; /* the server it dialed */

static void *reacher(void *arg)
{
    const char *addr = arg;
    int err = fgr_reach(addr, 15000);
    pthread_mutex_lock(&reach_mu);
    reach_err = err;
    reach_at = now_ns();
    reach_to = addr;
    reaching = 0;
    pthread_mutex_unlock(&reach_mu);
    return NULL;
}

/* 1 when the failover server answered lately; else the thread is set
 * dialing (a failed answer, taken once, makes the checkpoint not taken).
 * The first checkpoint, at the program's first call, dials by itself. */
static int reached(void)
{
    char why[600];
    snprintf(why, sizeof why, "cannot connect to %s", to); /* as the checkpoint's own dial says it */
    if (!have_standby && !last_why[0]) { /* the first: reached at once, or not for a second */
        uint64_t t0 = now_ns();
        int err = fgr_reach(to, 1000);
        paused((unsigned)((now_ns() - t0) / 1000000));
        if (!err)
            return 1;
        unanswered++;
        not_taken(why);
        return 0;
    }
    pthread_mutex_lock(&reach_mu);
    uint64_t now = now_ns();
    int fresh = reach_at && reach_to == to && now - reach_at < REACH_FRESH_NS, err = reach_err, ok = fresh && !err;
    if (fresh && err)
        reach_at = 0; /* said once: the next attempt dials again */
    if (!ok && !reaching && !(fresh && err)) {
        reaching = 1;
        if (fgr_thread_start(reacher, (void *)to, 64 << 10, "flexgv-reach"))
            ok = 1, reaching = 0; /* no thread: the checkpoint dials itself */
    }
    pthread_mutex_unlock(&reach_mu);
    if (fresh && err) {
        unanswered++;
        not_taken(why);
    }
    return ok;
}

int fgr_checkpoint_overflowing(void) { return on && kept_bytes >= LOG_MAX; }

int fgr_checkpoint_due(void)
{
    if (!on)
        return 0;
    if (ahead.loading)
        return fgr_ahead_ready(&ahead);
    return (!have_standby || now_ns() >= due || kept_bytes >= LOG_MAX) && reached();
}

/* Whether answer a (n bytes) to kept call k, of memory the driver places,
 * differs from the one the program got only in the address of its first
 * result (u32 0, u8 1, u64 8, u64 address, ...): the driver placed it
 * elsewhere. That address then, and now, and its size where the answer
 * gives it (a module's variable, in memory of the module's: then u8 1,
 * u64 8, u64 size), else 0: the allocation that starts there. */
static int placed_elsewhere(const struct kept *k, const uint8_t *a, uint32_t n, uint64_t *was, uint64_t *now,
                            uint64_t *size)
{
    if (!fgr_op_places[k->op] || n != k->alen || k->split || n > KEPT_ANSWER || n < 21 || fgr_word(a, 4) ||
        a[4] != 1 || fgr_word(a + 5, 8) != 8)
        return 0;
    uint8_t same[KEPT_ANSWER];
    memcpy(same, a, n);
    memcpy(same + 13, k->answer + 13, 8);
    if (hash_more(HASH0, same, n) != k->hash)
        return 0;
    *was = fgr_word(k->answer + 13, 8);
    *now = fgr_word(a + 13, 8);
    int variable = k->op == FGR_OP_cuModuleGetGlobal_v2 || k->op == FGR_OP_cuLibraryGetGlobal ||
                   k->op == FGR_OP_cuLibraryGetManaged;
    *size = variable && n == 4 + 17 + 17 && a[21] == 1 && fgr_word(a + 22, 8) == 8 ? fgr_word(a + 30, 8) : 0;
    return 1;
}

int fgr_failover_take(struct fgr_conn_saved *s, const char *lost_why)
{
    on = 0;
    fgr_ahead_abandon(&ahead); /* a checkpoint under way, or an attempt kept */
    if (!have_standby) {
        fgr_say("lost the GPU server (%s), and there is no failover server to go on at: %s; CUDA calls now fail with "
                "CUDA_ERROR_DEVICE_UNAVAILABLE", lost_why, last_why[0] ? last_why : "no checkpoint was taken");
        drop_kept();
        return -1;
    }
    *s = standby;
    standby = (struct fgr_conn_saved){.fd = -1};
    have_standby = 0;
    failovers++;
    fgr_say("lost the GPU server (%s): going on at %s from the checkpoint of %.1f s ago (%u taken, pauses %u ms at most, "
            "%u in all), making its %llu calls since again",
            lost_why, to, (double)(now_ns() - taken_at) / 1e9, checkpoints, pause_ms_max, pause_ms_total,
            (unsigned long long)nkept);
    return 0;
}

CUresult fgr_failover_replay(int (*write)(const void *, size_t), const uint8_t *(*answer)(uint32_t *), uint32_t *last_n)
{
    *last_n = 0;
    CUresult r = CUDA_SUCCESS;
    uint64_t i = 0;
    for (struct kept *k = kept; k && r == CUDA_SUCCESS; k = k->next, i++) {
        if (k->passed)
            continue; /* sent again, if at all, by its thread */
        if (write(k->frame, k->n)) {
            fgr_say("the failover server %s is gone too: %s", to, strerror(errno));
            r = CUDA_ERROR_DEVICE_UNAVAILABLE;
            break;
        }
        if (!k->waits)
            continue;
        uint32_t n;
        const uint8_t *a = answer(&n);
        if (!a) {
            fgr_say("the failover server %s did not answer call %llu of %llu", to, (unsigned long long)i + 1,
                    (unsigned long long)nkept);
            r = CUDA_ERROR_DEVICE_UNAVAILABLE;
            break;
        }
        if (!k->answered) { /* the call under way when the server was lost: its answer is the program's */
            *last_n = n;
            continue;
        }
        uint32_t h = k->split < n ? k->split : n;
        if ((varies(k->op) && same_result(k, a, n)) ||
            (n == k->alen && hash_more(hash_more(HASH0, a, h), a + h, n - h) == k->hash))
            continue;
        uint64_t was, now, size;
        if (placed_elsewhere(k, a, n, &was, &now, &size)) {
            /* The driver placed it elsewhere here: the program's address
             * is made to name it (fgrStateAlias). */
            uint8_t f[4 + FGR_REQ_HDR + 24];
            memcpy(f + 4, k->frame + 4, FGR_REQ_HDR);
            uint32_t len = FGR_REQ_HDR + 24;
            for (int b = 0; b < 4; b++)
                f[b] = (uint8_t)(len >> (8 * b));
            f[4] = (uint8_t)FGR_OP_fgrStateAlias;
            f[5] = (uint8_t)(FGR_OP_fgrStateAlias >> 8);
            f[6] = f[7] = 0;
            uint64_t v[3] = {was, size, now};
            for (int w = 0; w < 3; w++)
                for (int b = 0; b < 8; b++)
                    f[4 + FGR_REQ_HDR + 8 * w + b] = (uint8_t)(v[w] >> (8 * b));
            const uint8_t *ok = write(f, sizeof f) ? NULL : answer(&n);
            if (ok && n == 4 && !fgr_word(ok, 4))
                continue;
        }
        const char *name = fgr_op_names[k->op] ? fgr_op_names[k->op] : "a call", *got = NULL;
        CUresult here = n >= 4 ? (CUresult)fgr_word(a, 4) : CUDA_SUCCESS;
        if (here != CUDA_SUCCESS && (cuGetErrorName(here, &got) != CUDA_SUCCESS || !got))
            got = "an unknown error";
        fgr_say("cannot go on exactly at %s: made again, %s (call %llu of %llu since the checkpoint) answered otherwise "
                "than the program was answered%s%s%s; CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE",
                to, name, (unsigned long long)i + 1, (unsigned long long)nkept, got ? " (there " : "", got ? got : "",
                got ? ")" : "");
        r = CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    drop_kept();
    if (r != CUDA_SUCCESS)
        return r;
    if (nchain > 1) {
        /* The next server keeps the checkpoints now, the first at once. */
        const char *was = to;
        at = (at + 1) % nchain;
        to = chain[at];
        on = 1;
        due = backoff = 0;
        last_why[0] = 0;
        latest = (struct fgr_remade){0};
        fgr_say("going on at %s; checkpoints from here on at %s", was, to);
    } else {
        fgr_say("going on at %s", to);
    }
    return r;
}

const char *fgr_failover_to(void) { return to; }

void fgr_failover_moved(const char *addr)
{
    char *a = home >= 0 ? strdup(addr) : NULL;
    if (!a)
        return;
    /* The old copy stays: a thread dialing it may still read it. */
    if (to == chain[home])
        to = a;
    chain[home] = a;
}

void fgr_failover_forked(void)
{
    /* The parent's calls and its waiting executor are its own. */
    if (standby.fd >= 0)
        close(standby.fd);
    standby = (struct fgr_conn_saved){.fd = -1};
    have_standby = 0;
    kept = NULL; /* the parent's calls: not the child's */
    kept_end = &kept;
    chunks = chunk_at = NULL;
    last = NULL;
    kept_bytes = nkept = 0;
    kept_gen++;
    backoff = 0;
    fgr_ahead_forked(&ahead);
    pthread_mutex_init(&reach_mu, NULL);
    reaching = reach_err = 0;
    reach_at = 0;
    on = to != NULL;
}
