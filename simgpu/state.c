/* Configuration and the state shared by every process using the simulated
 * GPU: device memory, process slots, and the devices' work queues and
 * schedule. The shared file holds counters updated with atomics; a process
 * that dies is found by the kernel releasing its slot's lock, and what it
 * held is returned.
 *
 * How devices run kernels: time-sliced between processes, as a GPU without
 * MPS does.
 *  - Each process queues its work in lanes of its own slot, lock-free:
 *    SIM_LANES_PER_DEV per device, a stream bound to one (streams beyond
 *    that share lanes, and so run one after the other). A lane holds, in
 *    order, kernels (a duration) and marks (an event record, or a wait for
 *    another lane of the process).
 *    A kernel launched while its lane's last item is a kernel still pending
 *    joins that item (the device runs them back to back either way); a full
 *    lane makes launches wait, as a GPU's push buffer does. Kernels of no
 *    duration are not queued.
 *  - A device runs one process (context) at a time. The holder runs the
 *    head kernel of each of its lanes on the device, all at once and each at
 *    full speed; marks take no device time and are reached when everything
 *    before them in their lane is done.
 *  - Processes with a kernel ready take the device round robin (in slot
 *    order) on a time slice (timeslice_us). The holder keeps it until its
 *    slice ends while others wait, and gives it up at once when it has
 *    nothing ready (work-conserving). A kernel cut at the end of a slice
 *    resumes where it stopped at its process's next turn. A holder alone
 *    keeps the device, its slice renewed on each boundary, so a newcomer
 *    waits for the current slice to end.
 *  - Nothing is decided at launch, since what a kernel gets depends on what
 *    others launch later. Whoever needs a result (a synchronize, a query, an
 *    event's time, NVML) advances the schedule from its last committed state
 *    to now, over the queues as they are: an item counts from when it was
 *    stamped, or from the schedule's time if it became visible later.
 *    Waiters then sleep until the earliest time the schedule, continued over
 *    the work visible now, reaches what they wait for, and look again.
 *  - A step holds one OFD lock (released by the kernel if its holder dies)
 *    and never sleeps. It writes the schedule copy that is not current and
 *    commits by bumping sched_gen, so a process killed at any instruction
 *    leaves the last committed schedule; what it wrote elsewhere (marks'
 *    times, kernels closed to merging, finished counts published to their
 *    lanes, busy time) a later step writes again or is harmless.
 *  - A process found dead when its turn comes (its slot lock free) loses
 *    its queued work, as a context torn down on a GPU does.
 *  - Busy time is credited to the device and to the process in 100 ms
 *    buckets of simulated time: NVML's utilization and per-process
 *    utilization read them.
 * Unlike a GPU: a context switch costs nothing; a process's contexts on one
 * device are scheduled as one; its concurrent kernels do not compete for
 * SMs; marks are reached while another process holds the device (an event
 * is stamped when its stream gets there); copies take no device time;
 * stream priorities and the legacy stream's implicit synchronization are
 * not modelled. Time is the device's clock (below): wall time, but for
 * waiters the host wakes late, which it waits for.
 *
 * Under an MPS control daemon (one answers where CUDA looks for it), every
 * process is an MPS client. One given an active-thread percentage sees
 * that part of the SMs, and its kernels take proportionally longer. MPS
 * clients share the device at once, as one context: while one of them
 * holds it, all of them with a kernel ready run, each at full speed as long
 * as their SMs add up to at most the device's, and all slowed alike past
 * that (40 SMs asked for by kernels of processes that see 30 each: each at
 * 40/60). A process that is not an MPS client takes turns with them. */
#include "sim.h"
#include "flexgv/drvmem.h"
#include "flexgv/liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SIM_MAGIC 0x4d4953564758464cull /* "LFXGVSIM" */

struct sim_shared *sim;
static int my_proc = -1;
static int visible_sms; /* SMs this process gets (mps_sms) */
static int mps_client;  /* an MPS control daemon answered at attach */
static uint64_t my_base;  /* tag of this incarnation's items: inc << TAG_SHIFT */
static uint32_t my_lanes; /* lanes this incarnation has set up */
/* This process's due (its slot's due_ns) is this thread's: one waiting
 * thread's at a time, the one that set it (under the schedule's lock). */
static __thread int due_mine;

/* Items: tags, counts and the dep word. */
#define TAG_SHIFT 40
#define COUNT_MASK ((1ull << TAG_SHIFT) - 1)
#define INC_MASK 0xffffffu
#define SIM_MARK (1ull << 63)
#define SIM_EVENT (1ull << 62)
#define SIM_DEP (1ull << 61)
#define SIM_HOST (1ull << 60)     /* a host function's place: passed once released */
#define SIM_RELEASED (1ull << 59) /* its function returned (set by its process) */
/* A kernel of a collective (kernel ... collective): its group's hash and
 * size, and its place among the process's collectives, which the same
 * place in every member's lanes must reach before any of them progresses. */
#define SIM_COLL (1ull << 58)
#define COLL_RANKS_SHIFT 40 /* 6 bits: the group's size */
#define COLL_GROUP_SHIFT 46 /* 12 bits: its name's hash */
#define COLL_ID_MASK (((1ull << 18) - 1) << COLL_RANKS_SHIFT)
#define COLL_RANKS(dep) ((int)((dep) >> COLL_RANKS_SHIFT) & 63)
#define DEP_LANE(dep) ((int)((dep) >> TAG_SHIFT) & (SIM_LANES - 1))
#define SIM_CLOSED (1ull << 63) /* in a kernel's dur_ns */
_Static_assert(SIM_LANES <= 32 && (SIM_LANES & (SIM_LANES - 1)) == 0, "lanes fit a slot's mask and DEP_LANE");

/* This process's side of the queues: lane_mu sets lanes up, watch_mu
 * guards watch (the event stamps waiting on each lane's items), sched_mu
 * orders this process's threads around the schedule's lock. */
static pthread_mutex_t lane_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sched_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sim_stamp *watch[SIM_LANES][SIM_RING];

/* The device's clock. It runs at wall-clock speed, except that it waits
 * for a waiter the host wakes late. A process asleep until a completion
 * publishes its due time: when the lane it waits on would run dry. The
 * clock stops GRACE_NS past the earliest due (a wake-up's ordinary
 * latency, which a GPU does not wait for either) until that process runs
 * again, at most FREEZE_NS behind the wall. So the device neither idles
 * nor runs others' work during a delay that is the host's and not the
 * program's (a preempted waiter on a busy machine): every process sees the
 * device do the same work in the same device time however late the host
 * runs it, while a program that pauses of its own accord (host work, a
 * sleep, a server between requests) leaves the device idle, as on a GPU.
 * Everything timed in the simulation (arrivals, the schedule, events, busy
 * time) is on this clock. The time it stood still adds up in stall_ns:
 * clock = min(wall - stall, earliest due + GRACE_NS), and at least
 * wall - stall - FREEZE_NS. Dues are set and cleared under the schedule's
 * lock; clearing the one that holds the clock first adds to stall what
 * the clock is behind, so the clock never jumps. */
#define GRACE_NS 1000000ull    /* a waiter this late has the host's wake-up: the device ran on, as a GPU does */
#define FREEZE_NS 100000000ull /* the longest host delay it waits for: a stopped or dead waiter holds it no longer */

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The earliest due but slot `skip`'s (UINT64_MAX: none), and its slot. */
static uint64_t earliest_due(int skip, int *earliest)
{
    uint64_t due = UINT64_MAX;
    *earliest = -1;
    for (int w = 0; w < SIM_MAX_PROCS / 64; w++)
        for (uint64_t m = __atomic_load_n(&sim->due_mask[w], __ATOMIC_ACQUIRE); m; m &= m - 1) {
            int i = w * 64 + __builtin_ctzll(m);
            uint64_t d = __atomic_load_n(&sim->procs[i].due_ns, __ATOMIC_ACQUIRE);
            if (d && d < due && i != skip)
                due = d, *earliest = i;
        }
    return due;
}

/* The clock when it reads r with no due, and the earliest is `due`. */
static uint64_t held_by(uint64_t r, uint64_t due)
{
    if (due > UINT64_MAX - GRACE_NS || r <= due + GRACE_NS)
        return r;
    return r - due - GRACE_NS > FREEZE_NS ? r - FREEZE_NS : due + GRACE_NS;
}

/* The clock at wall time `wall`; *raw: what it would read with no due.
 * Dues are read before the stall: one cleared is seen with its stall. */
static uint64_t clock_at(uint64_t wall, uint64_t *raw, int *earliest)
{
    uint64_t due = earliest_due(-1, earliest);
    *raw = wall - __atomic_load_n(&sim->stall_ns, __ATOMIC_ACQUIRE);
    return held_by(*raw, due);
}

uint64_t sim_now_ns(void)
{
    uint64_t raw;
    int earliest;
    return sim ? clock_at(wall_ns(), &raw, &earliest) : wall_ns();
}

/* Clears slot i's due (schedule lock held): what the clock stood still
 * for it becomes stall, so the clock goes on from where it stood. Only
 * the earliest due holds the clock: clearing another changes nothing, and
 * charging the stall of an earlier one (a dead waiter's) to it would keep
 * the clock at that due for as long as others wait, and it never late
 * enough to be dropped. Without i's, the next due may hold the clock
 * where it stands at a later raw reading: raw need go back only that far. */
static void due_clear(int i)
{
    uint64_t raw;
    int earliest, next;
    uint64_t now = clock_at(wall_ns(), &raw, &earliest);
    if (earliest == i && raw > now) {
        uint64_t due = earliest_due(i, &next), to = now;
        if (held_by(now, due) < now) /* the next due holds it too, FREEZE_NS behind */
            to = now + FREEZE_NS < raw ? now + FREEZE_NS : raw;
        __atomic_fetch_add(&sim->stall_ns, raw - to, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&sim->procs[i].due_ns, 0, __ATOMIC_RELEASE);
    __atomic_fetch_and(&sim->due_mask[i / 64], ~(1ull << (i % 64)), __ATOMIC_RELEASE);
}

/* The kernel's default timer slack lets a sleep run ~50 us long; a
 * simulated GPU's completions then reach the host late, and what a
 * process measures from them (a cap's busy time) is off by that much.
 * Sleeps go by the wall; when the device's clock stood still meanwhile
 * (another waiter late), the next look is at least a little later. */
void sim_sleep_until(uint64_t t_ns)
{
    static __thread int slack_set;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
        slack_set = 1;
    }
    for (int slept = 0;; slept = 1) {
        uint64_t now = sim_now_ns();
        if (now >= t_ns)
            return;
        uint64_t d = t_ns - now;
        if (slept && d < 20000)
            d = 20000;
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},         {"B", 1},           {"KiB", 1024.0},  {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0) {
            *out = (uint64_t)(v * units[i].mult);
            return 0;
        }
    return -1;
}

static int set_key(struct sim_config *c, const char *key, const char *val)
{
    uint64_t n;
    if (!strcmp(key, "devices")) {
        if (parse_size(val, &n) || n > SIM_MAX_DEVICES)
            return -1;
        c->devices = (int)n;
    } else if (!strcmp(key, "memory")) {
        if (parse_size(val, &n) || n == 0)
            return -1;
        c->mem_bytes = n;
    } else if (!strcmp(key, "sms")) {
        if (parse_size(val, &n) || n == 0 || n > 1024)
            return -1;
        c->sms = (int)n;
    } else if (!strcmp(key, "context_memory")) {
        if (parse_size(val, &n))
            return -1;
        c->ctx_mem_bytes = n;
    } else if (!strcmp(key, "kernel_us")) {
        char *end;
        double us = strtod(val, &end);
        if (*end || us < 0)
            return -1;
        c->kernel_ns = (uint64_t)(us * 1000.0);
    } else if (!strcmp(key, "timeslice_us")) {
        char *end;
        double us = strtod(val, &end);
        if (*end || !(us >= 1))
            return -1;
        c->timeslice_ns = (uint64_t)(us * 1000.0);
    } else if (!strcmp(key, "pitch_align")) {
        if (parse_size(val, &n) || n == 0 || n > (1u << 20))
            return -1;
        c->pitch_align = n;
    } else if (!strcmp(key, "machine")) {
        if (parse_size(val, &n) || n > 255)
            return -1;
        c->machine = (int)n;
    } else if (!strcmp(key, "driver_version")) {
        if (parse_size(val, &n) || n < 2000)
            return -1;
        c->driver_version = (int)n;
    } else {
        return -2;
    }
    return 0;
}

static void complain(const char *what, const char *key, const char *val)
{
    fprintf(stderr, "flexgv-sim: %s: invalid %s=%s; the simulated GPU refuses to start\n", what, key, val);
}

/* Defaults, then FLEXGV_SIM_CONFIG (key = value lines), then FLEXGV_SIM_*. */
static int load_config(struct sim_config *c)
{
    memset(c, 0, sizeof *c); /* padding too: configurations are compared bytewise */
    c->devices = 1;
    c->sms = 40;
    c->mem_bytes = 16ull << 30;
    c->ctx_mem_bytes = 300ull << 20;
    c->kernel_ns = 10000;
    c->driver_version = 13000;
    c->timeslice_ns = 2000000; /* as measured on an H200 */
    const char *path = getenv("FLEXGV_SIM_CONFIG");
    if (path && *path) {
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "flexgv-sim: cannot read FLEXGV_SIM_CONFIG=%s: %s\n", path, strerror(errno));
            return -1;
        }
        char line[256];
        while (fgets(line, sizeof line, f)) {
            char key[64], val[128];
            if (line[0] == '#' || sscanf(line, " %63[a-z_] = %127s", key, val) != 2)
                continue;
            int rc = set_key(c, key, val);
            if (rc) {
                complain(path, key, val);
                fclose(f);
                return -1;
            }
        }
        fclose(f);
    }
    static const struct {
        const char *env, *key;
    } envs[] = {{"FLEXGV_SIM_DEVICES", "devices"},   {"FLEXGV_SIM_MEM", "memory"},
                {"FLEXGV_SIM_SMS", "sms"},           {"FLEXGV_SIM_CTX_MEM", "context_memory"},
                {"FLEXGV_SIM_KERNEL_US", "kernel_us"}, {"FLEXGV_SIM_DRIVER_VERSION", "driver_version"},
                {"FLEXGV_SIM_TIMESLICE_US", "timeslice_us"}, {"FLEXGV_SIM_MACHINE", "machine"},
                {"FLEXGV_SIM_PITCH_ALIGN", "pitch_align"}};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        const char *v = getenv(envs[i].env);
        if (v && *v && set_key(c, envs[i].key, v)) {
            complain("environment", envs[i].env, v);
            return -1;
        }
    }
    return 0;
}

/* ---- process slots ----
 * A process owns a slot while it holds an OFD lock on the slot's first byte
 * of the state file, taken through an open file description of its own that
 * is never mapped: the kernel drops the lock when the process dies, and
 * neither a forked child (which opens its own) nor an inherited mapping
 * keeps it. Whoever takes the lock of a slot whose pid is set reaps it:
 * that process is dead, in whatever PID namespace it ran. Taking a slot's
 * lock also serializes reapers and claimers across processes; slot_mu does
 * it between the threads of this process, which share one description. */

static int lock_fd = -1;
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static char state_path[4096];

static int slot_lock(int i, short type)
{
    return fg_lock_byte(lock_fd, (off_t)offsetof(struct sim_shared, procs[i]), type);
}

/* This process's pid as the mounted /proc numbers it (the root namespace's
 * for a process unshared without a /proc of its own), as the real driver
 * reports processes to NVML. */
static int32_t host_pid(void)
{
    char buf[32];
    ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = 0;
        char *end;
        long v = strtol(buf, &end, 10);
        if (*end == 0 && v > 0 && v <= INT32_MAX)
            return (int32_t)v;
    }
    return (int32_t)getpid();
}

static void ckpt_byte_lock(int i, short type);

/* Returns a dead process's memory to its devices (slot lock held); what a
 * checkpoint moved to its host memory died with it. A controller working
 * on the slot finishes first. */
static void reap_slot(struct sim_proc_state *p)
{
    int i = (int)(p - sim->procs);
    ckpt_byte_lock(i, F_WRLCK);
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        uint64_t b = __atomic_exchange_n(&p->used_bytes[d], 0, __ATOMIC_ACQ_REL);
        if (b)
            __atomic_fetch_sub(&sim->dev[d].used_bytes, b, __ATOMIC_ACQ_REL);
        __atomic_store_n(&p->host_bytes[d], 0, __ATOMIC_RELEASE);
        __atomic_store_n(&p->moved_to[d], 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&p->ckpt_state, CU_PROCESS_STATE_RUNNING, __ATOMIC_RELEASE);
    __atomic_store_n(&p->gated_calls, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    ckpt_byte_lock(i, F_UNLCK);
}

void sim_reap_dead(void)
{
    if (lock_fd < 0)
        return;
    pthread_mutex_lock(&slot_mu);
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc_state *p = &sim->procs[i];
        if (i == my_proc || __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) == 0 || slot_lock(i, F_WRLCK) != 0)
            continue;
        if (__atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) != 0)
            reap_slot(p);
        slot_lock(i, F_UNLCK);
    }
    pthread_mutex_unlock(&slot_mu);
}

/* Free slots first, then those of dead processes (reaped on the way). The
 * lock is held from before the pid is published, so nobody reaps a slot
 * being claimed. */
static int claim_proc_slot(void)
{
    int32_t me = host_pid();
    pthread_mutex_lock(&slot_mu);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < SIM_MAX_PROCS; i++) {
            struct sim_proc_state *p = &sim->procs[i];
            if ((pass == 0 && __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) != 0) || slot_lock(i, F_WRLCK) != 0)
                continue;
            if (__atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) != 0)
                reap_slot(p);
            /* A new incarnation: no lanes, no busy time, items of its own,
             * running. */
            __atomic_store_n(&p->lanes, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&p->ckpt_state, CU_PROCESS_STATE_RUNNING, __ATOMIC_RELEASE);
            __atomic_store_n(&p->gated_calls, 0, __ATOMIC_RELEASE);
            for (int d = 0; d < SIM_MAX_DEVICES; d++) {
                __atomic_store_n(&p->host_bytes[d], 0, __ATOMIC_RELEASE);
                __atomic_store_n(&p->moved_to[d], 0, __ATOMIC_RELEASE);
            }
            for (int d = 0; d < SIM_MAX_DEVICES; d++)
                for (int b = 0; b < SIM_HIST_BUCKETS; b++)
                    __atomic_store_n(&p->busy[d][b].epoch, 0, __ATOMIC_RELEASE);
            uint32_t inc = (__atomic_load_n(&p->inc, __ATOMIC_ACQUIRE) + 1) & INC_MASK;
            inc += !inc;
            __atomic_store_n(&p->inc, inc, __ATOMIC_RELEASE);
            __atomic_store_n(&p->mps_sms, mps_client ? (uint32_t)visible_sms : 0u, __ATOMIC_RELEASE);
            /* A dead waiter's due goes (the clock skips what it waited). */
            __atomic_store_n(&p->due_ns, 0, __ATOMIC_RELEASE);
            __atomic_fetch_and(&sim->due_mask[i / 64], ~(1ull << (i % 64)), __ATOMIC_RELEASE);
            __atomic_store_n(&p->pid, me, __ATOMIC_RELEASE);
            my_base = (uint64_t)inc << TAG_SHIFT;
            my_lanes = 0;
            pthread_mutex_unlock(&slot_mu);
            return i;
        }
    pthread_mutex_unlock(&slot_mu);
    return -1;
}

/* The child shares the parent's open file description, hence its lock:
 * it takes a description, and a slot, of its own. It holds no device
 * memory and no queued work yet. The mutexes only order this process's
 * threads, so the child starts them afresh (a parent thread may have held
 * one at the fork). */
static void after_fork_child(void)
{
    pthread_mutex_init(&slot_mu, NULL);
    pthread_mutex_init(&lane_mu, NULL);
    pthread_mutex_init(&watch_mu, NULL);
    pthread_mutex_init(&sched_mu, NULL);
    memset(watch, 0, sizeof watch);
    due_mine = 0; /* the parent's */
    close(lock_fd);
    lock_fd = open(state_path, O_RDWR | O_CLOEXEC);
    my_proc = lock_fd < 0 ? -1 : claim_proc_slot();
}

/* A file name next to path that no other process uses, whatever PID
 * namespace it runs in. */
static int open_unique(const char *path, char *tmp, size_t n)
{
    for (int tries = 0; tries < 16; tries++) {
        uint64_t r;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = sim_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)tries;
        snprintf(tmp, n, "%s.%016llx.tmp", path, (unsigned long long)r);
        int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/* Opens the state file, creating it initialized if it does not exist. The
 * file is built aside and linked in: link() is atomic and fails if another
 * process linked first, so every process maps the same fully written file. */
static int open_state(const char *path, const struct sim_config *cfg)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT)
        return fd;
    char tmp[4200];
    int t = open_unique(path, tmp, sizeof tmp);
    if (t < 0)
        return -1;
    /* Allocated whole, then written through a mapping. A hole filled on a
     * page fault can block the faulting process on the file system's
     * journal (seconds on a disk busy with other work, while the device's
     * clock runs on), and on a full tmpfs it is a SIGBUS: allocating now
     * fails here instead, with a message. Every user may open it, as every
     * user may open a GPU's device nodes (a server's executors run as
     * another user than the server). */
    struct sim_shared *init = MAP_FAILED;
    if (fchmod(t, 0666) == 0 && posix_fallocate(t, 0, (off_t)sizeof *init) == 0)
        init = mmap(NULL, sizeof *init, PROT_READ | PROT_WRITE, MAP_SHARED, t, 0);
    int ok = init != MAP_FAILED;
    if (ok) {
        init->magic = SIM_MAGIC;
        init->version = SIM_STATE_VERSION;
        init->cfg = *cfg;
        for (int g = 0; g < 2; g++)
            for (int d = 0; d < SIM_MAX_DEVICES; d++)
                init->sched[g].dev[d].cur = -1;
        munmap(init, sizeof *init);
    }
    close(t);
    if (ok && link(tmp, path) != 0 && errno != EEXIST)
        ok = 0;
    unlink(tmp);
    return ok ? open(path, O_RDWR | O_CLOEXEC) : -1;
}

/* Maps the state file and closes fd (the mapping keeps its description). */
static struct sim_shared *map_state(int fd)
{
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct sim_shared))
        m = mmap(NULL, sizeof(struct sim_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    struct sim_shared *s = m;
    if (s->magic != SIM_MAGIC || s->version != SIM_STATE_VERSION) {
        munmap(m, sizeof *s);
        return NULL;
    }
    return s;
}

/* The SMs a process gets: under an MPS control daemon (one answers on
 * CUDA_MPS_PIPE_DIRECTORY's socket `control`; *client says whether),
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of them rounded down to whole pairs, as
 * an H200 gives (25 % of 132: 32); otherwise, as a real driver does, the
 * variable means nothing. */
static int mps_sms(int sms, int *client)
{
    const char *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    *client = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    char *end;
    double p = pct && *pct ? strtod(pct, &end) : 100;
    if (!*client || !(p > 0 && p < 100) || (pct && *end))
        return sms;
    int n = (int)(sms * p / 100) & ~1;
    return n < 2 ? (sms < 2 ? sms : 2) : n;
}

int sim_sms(void) { return visible_sms; }
int sim_mps_client(void) { return mps_client; }

/* An MPS client joins the MPS server at its initialization, as long as the
 * server takes to answer (simgpu/mps_control.c): 0 once it has, -1 if it
 * refused (said on stderr). */
int sim_mps_join(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    char ans[16] = "";
    ssize_t n = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, "client\n", 7) == 7
                    ? read(fd, ans, sizeof ans - 1)
                    : -1;
    if (fd >= 0)
        close(fd);
    if (n == 3 && !memcmp(ans, "ok\n", 3))
        return 0;
    fprintf(stderr, "flexgv-sim: the MPS server did not take this client\n");
    return -1;
}

/* FLEXGV_SIM_FAIL=PERCENT[:SEED]: that share of this process's device
 * memory reservations fail as if the device were full, drawn from SEED
 * (default 1), for tests of what a driver's out-of-memory leaves behind at
 * any point of any call. 0 (unset): none. */
static unsigned fail_pct;
static uint64_t fail_state;

static void fail_setup(void)
{
    const char *e = getenv("FLEXGV_SIM_FAIL");
    if (!e || !*e)
        return;
    char *end;
    unsigned long pct = strtoul(e, &end, 10), seed = 1;
    int bad = end == e;
    if (*end == ':')
        seed = strtoul(end + 1, &end, 10);
    if (bad || *end || pct > 100) {
        fprintf(stderr, "flexgv-sim: FLEXGV_SIM_FAIL=%s: want PERCENT[:SEED], PERCENT from 0 to 100\n", e);
        return;
    }
    fail_pct = (unsigned)pct;
    fail_state = seed * 0x9e3779b97f4a7c15ull + 1;
}

/* Whether this reservation is one FLEXGV_SIM_FAIL makes fail. */
static int fail_now(void)
{
    if (!fail_pct)
        return 0;
    uint64_t x = __atomic_load_n(&fail_state, __ATOMIC_RELAXED), y;
    do { /* xorshift64, shared by the process's threads */
        y = x ^ x << 13;
        y ^= y >> 7;
        y ^= y << 17;
    } while (!__atomic_compare_exchange_n(&fail_state, &x, y, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return y % 100 < fail_pct;
}

/* Once per process, whichever threads call it: attached is set only once
 * this process has its slot, so no charge can miss it. */
int sim_attach(void)
{
    static pthread_mutex_t attach_mu = PTHREAD_MUTEX_INITIALIZER;
    static int attached;
    if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&attach_mu);
    int rc = -1;
    struct sim_config cfg;
    if (attached || load_config(&cfg) != 0) {
        rc = attached ? 0 : -1;
        goto out;
    }
    const char *path = getenv("FLEXGV_SIM_STATE");
    if (path && *path)
        snprintf(state_path, sizeof state_path, "%s", path);
    else /* in memory, as a GPU's state is: no disk stalls its processes */
        snprintf(state_path, sizeof state_path, "%s/flexgv-sim-%d-v" SIM_STATE_VERSION_TEXT ".state",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getuid());
    int fd = open_state(state_path, &cfg);
    struct sim_shared *s = fd >= 0 ? map_state(fd) : NULL;
    if (s)
        lock_fd = open(state_path, O_RDWR | O_CLOEXEC);
    if (lock_fd < 0) {
        if (s)
            munmap(s, sizeof *s);
        fprintf(stderr,
                "flexgv-sim: cannot use state file %s (not writable, no room for it, or made by another version; set "
                "FLEXGV_SIM_STATE to a new path)\n",
                state_path);
        goto out;
    }
    if (memcmp(&s->cfg, &cfg, sizeof cfg) != 0)
        fprintf(stderr, "flexgv-sim: %s was created with another configuration; using the file's\n", state_path);
    sim = s;
    visible_sms = mps_sms(s->cfg.sms, &mps_client);
    fail_setup();
    my_proc = claim_proc_slot();
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
    rc = 0;
out:
    pthread_mutex_unlock(&attach_mu);
    return rc;
}

const struct fg_drvmem *sim_drv(void) { return fg_drvmem_for(sim->cfg.driver_version); }

/* Reserves bytes on device d's count, for whichever process: 0 or -1. */
static int reserve_on(int d, uint64_t bytes)
{
    uint64_t used = __atomic_load_n(&sim->dev[d].used_bytes, __ATOMIC_ACQUIRE);
    while (used <= sim->cfg.mem_bytes && bytes <= sim->cfg.mem_bytes - used)
        if (__atomic_compare_exchange_n(&sim->dev[d].used_bytes, &used, used + bytes, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return 0;
    return -1;
}

static int moved_of(int slot, int dev)
{
    if (slot < 0 || dev < 0 || dev >= SIM_MAX_DEVICES)
        return dev;
    int m = __atomic_load_n(&sim->procs[slot].moved_to[dev], __ATOMIC_ACQUIRE);
    return m ? m - 1 : dev;
}

int sim_moved(int dev) { return moved_of(my_proc, dev); }

int sim_mem_reserve(int dev, uint64_t bytes)
{
    dev = sim_moved(dev);
    if (fail_now())
        return -1;
    for (int pass = 0; pass < 2; pass++) {
        if (reserve_on(dev, bytes) == 0) {
            if (my_proc >= 0)
                __atomic_fetch_add(&sim->procs[my_proc].used_bytes[dev], bytes, __ATOMIC_ACQ_REL);
            return 0;
        }
        sim_reap_dead(); /* a dead process's memory may be what is missing */
    }
    return -1;
}

void sim_mem_release(int dev, uint64_t bytes)
{
    dev = sim_moved(dev);
    if (my_proc >= 0)
        __atomic_fetch_sub(&sim->procs[my_proc].used_bytes[dev], bytes, __ATOMIC_ACQ_REL);
    __atomic_fetch_sub(&sim->dev[dev].used_bytes, bytes, __ATOMIC_ACQ_REL);
}

/* ---- queues: this process's side ---- */

static struct sim_lane *lane_at(int lane) { return &sim->lanes[my_proc][lane]; }

/* Whether this incarnation set the lane up: none of its work is there
 * otherwise. */
static int lane_used(int lane)
{
    return my_proc >= 0 && (__atomic_load_n(&my_lanes, __ATOMIC_ACQUIRE) >> lane & 1);
}

/* What the device finished in one of this process's lanes, as committed. */
static uint64_t published(const struct sim_lane *q)
{
    uint64_t w = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
    return (w & ~COUNT_MASK) == my_base ? w & COUNT_MASK : 0;
}

/* On first use: an empty queue, then the bit that makes steps read it. */
static struct sim_lane *lane_open(int lane)
{
    struct sim_lane *q = lane_at(lane);
    if (!lane_used(lane)) {
        pthread_mutex_lock(&lane_mu);
        if (!(my_lanes >> lane & 1)) {
            __atomic_store_n(&q->head, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&q->done, my_base, __ATOMIC_RELAXED);
            __atomic_fetch_or(&sim->procs[my_proc].lanes, 1u << lane, __ATOMIC_RELEASE);
            __atomic_store_n(&my_lanes, my_lanes | 1u << lane, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&lane_mu);
    }
    return q;
}

/* Queues an item; returns the count that covers it. A kernel joins the
 * lane's last item when that is a kernel still pending when this one
 * arrives (it started no earlier than it arrived, so it cannot have ended):
 * the device runs them back to back either way, and the lane keeps room. */
static uint64_t submit(int lane, uint64_t dur, uint64_t dep, struct sim_stamp *st)
{
    struct sim_lane *q = lane_open(lane);
    uint64_t h = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
    if (!dep && h) { /* a plain kernel joins a plain kernel */
        struct sim_item *c = &q->ring[(h - 1) % SIM_RING];
        if (__atomic_load_n(&c->tag, __ATOMIC_ACQUIRE) == (my_base | h) && !c->dep) {
            uint64_t now = sim_now_ns(), d = __atomic_load_n(&c->dur_ns, __ATOMIC_ACQUIRE);
            while (!(d & SIM_CLOSED) && c->arrival_ns + d > now)
                if (__atomic_compare_exchange_n(&c->dur_ns, &d, d + dur, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                    return h;
        }
    }
    for (;;) {
        h = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
        if (h - published(q) >= SIM_RING)
            sim_wait(lane, h - SIM_RING + 1); /* full, like a GPU's push buffer */
        else if (__atomic_compare_exchange_n(&q->head, &h, h + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
    }
    /* The item this one replaces is finished: a stamp on it takes its time
     * before it goes. */
    struct sim_item *c = &q->ring[h % SIM_RING];
    if (st || ((__atomic_load_n(&c->tag, __ATOMIC_ACQUIRE) & ~COUNT_MASK) == my_base && (c->dep & SIM_EVENT))) {
        pthread_mutex_lock(&watch_mu);
        struct sim_stamp **w = &watch[lane][h % SIM_RING];
        if (*w) {
            (*w)->ts_ns = __atomic_load_n(&c->done_ns, __ATOMIC_ACQUIRE);
            __atomic_store_n(&(*w)->resolved, 1, __ATOMIC_RELEASE);
        }
        *w = st;
        if (st)
            *st = (struct sim_stamp){.lane = lane, .count = h + 1};
        pthread_mutex_unlock(&watch_mu);
    }
    c->dur_ns = dur;
    c->arrival_ns = sim_now_ns();
    c->dep = dep;
    __atomic_store_n(&c->tag, my_base | (h + 1), __ATOMIC_RELEASE);
    return h + 1;
}

uint64_t sim_lane_head(int lane)
{
    return lane_used(lane) ? __atomic_load_n(&lane_at(lane)->head, __ATOMIC_ACQUIRE) : 0;
}

/* fewer SMs, proportionally longer */
static uint64_t scaled(uint64_t duration_ns)
{
    return visible_sms < sim->cfg.sms ? duration_ns * (uint64_t)sim->cfg.sms / (uint64_t)visible_sms : duration_ns;
}

uint64_t sim_submit_kernel(int lane, uint64_t duration_ns)
{
    duration_ns = scaled(duration_ns);
    return my_proc >= 0 && duration_ns ? submit(lane, duration_ns, 0, NULL) : 0;
}

/* FLEXGV_SIM_COLLECTIVE=NAME:RANKS names the group this process's
 * collective kernels belong to (as a communicator does); without it, or
 * alone in it, they are plain kernels. */
static uint64_t coll_id(void)
{
    static uint64_t id = UINT64_MAX;
    uint64_t v = __atomic_load_n(&id, __ATOMIC_RELAXED);
    if (v != UINT64_MAX)
        return v;
    const char *e = getenv("FLEXGV_SIM_COLLECTIVE"), *colon = e ? strrchr(e, ':') : NULL;
    char *end = NULL;
    long ranks = colon && colon > e ? strtol(colon + 1, &end, 10) : 0;
    v = 0;
    if (end && end > colon + 1 && !*end && ranks > 1 && ranks < 64) {
        uint32_t h = 2166136261u; /* FNV-1a */
        for (const char *c = e; c < colon; c++)
            h = (h ^ (unsigned char)*c) * 16777619u;
        v = SIM_COLL | (uint64_t)(h & 0xfff) << COLL_GROUP_SHIFT | (uint64_t)ranks << COLL_RANKS_SHIFT;
    } else if (e && *e) {
        fprintf(stderr, "flexgv-sim: FLEXGV_SIM_COLLECTIVE=%s is not NAME:RANKS (2 to 63); collectives run alone\n", e);
    }
    __atomic_store_n(&id, v, __ATOMIC_RELAXED);
    return v;
}

uint64_t sim_submit_collective(int lane, uint64_t duration_ns)
{
    static uint64_t seq; /* this process's collectives so far */
    uint64_t id = coll_id();
    if (!id || my_proc < 0)
        return sim_submit_kernel(lane, duration_ns);
    return submit(lane, scaled(duration_ns), id | (__atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED) & COUNT_MASK), NULL);
}

uint64_t sim_submit_host(int lane) { return my_proc >= 0 ? submit(lane, 0, SIM_MARK | SIM_HOST, NULL) : 0; }

void sim_host_release(int lane, uint64_t count)
{
    struct sim_item *c = &lane_at(lane)->ring[(count - 1) % SIM_RING];
    if (__atomic_load_n(&c->tag, __ATOMIC_ACQUIRE) == (my_base | count))
        __atomic_fetch_or(&c->dep, SIM_RELEASED, __ATOMIC_ACQ_REL);
}

uint64_t sim_submit_wait(int lane, const struct sim_stamp *st)
{
    if (!st->count || st->lane == lane || st->count > sim_lane_head(st->lane) ||
        published(lane_at(st->lane)) >= st->count)
        return 0; /* nothing to wait for (or a forked child's copy of its parent's event) */
    return submit(lane, 0, SIM_MARK | SIM_DEP | (uint64_t)st->lane << TAG_SHIFT | st->count, NULL);
}

/* ---- the schedule ---- */

#define PREDICT_NS 100000000ull /* a waiter looks again at least this often */
#define LATE_NS 1000000ull      /* a waiter this late is looked at: a dead one's due is dropped */
#define STALL_NS 50000ull       /* or this soon, when part of what it waits for is not visible yet */
#define SLOT_WORDS (SIM_MAX_PROCS / 64)

/* A lane with work, during one step. */
struct act {
    int slot, lane, dev;
    uint64_t base;              /* its incarnation's tag */
    struct sim_lane *q;
    struct sim_sched_lane *s;   /* in the schedule being advanced */
    int ready;                  /* its head item is there: */
    uint64_t dur, arrival, dep; /* what it is */
    int running;                /* a kernel on the device */
    int spinning;               /* a collective on the device whose peers are not all there */
};

static struct act acts[SIM_MAX_PROCS * SIM_LANES];
static int nacts;
static uint64_t relevant[SLOT_WORDS], checked[SLOT_WORDS], alive[SLOT_WORDS]; /* slots, this step */

/* Busy time found by a step, credited once it is committed. */
struct span {
    int dev, slot;
    uint64_t from, to;
};
/* Open spans, per device: [0] the device's, [1 + slot] each process's;
 * those in use listed, so that a step looks at no others. */
static struct span open_span[SIM_MAX_DEVICES][1 + SIM_MAX_PROCS], *spans;
static struct span *opened[SIM_MAX_DEVICES * (1 + SIM_MAX_PROCS)];
static size_t nopened;
static size_t nspans, cap_spans;

/* MPS clients, this step, and the SMs each runs on. */
static uint64_t mps_mask[SLOT_WORDS];
static uint32_t mps_sm[SIM_MAX_PROCS];

static int bit(const uint64_t *m, int i) { return m[i / 64] >> (i % 64) & 1; }
static void set_bit(uint64_t *m, int i) { m[i / 64] |= 1ull << (i % 64); }

/* Whether slot runs while cur holds the device: cur itself, or any MPS
 * client when cur is one. */
static int runs_with(int slot, int cur) { return slot == cur || (cur >= 0 && bit(mps_mask, cur) && bit(mps_mask, slot)); }

/* Whether a process that does not run with cur has a kernel ready. */
static int others_ready(const uint64_t *ready, int cur)
{
    int group = cur >= 0 && bit(mps_mask, cur);
    for (int w = 0; w < SLOT_WORDS; w++)
        if (ready[w] & ~(group ? mps_mask[w] : cur >= 0 && cur / 64 == w ? 1ull << (cur % 64) : 0))
            return 1;
    return 0;
}

/* Whether cur, or an MPS client running with it, has a kernel ready. */
static int holder_ready(const uint64_t *ready, int cur)
{
    if (cur < 0)
        return 0;
    if (!bit(mps_mask, cur))
        return bit(ready, cur);
    for (int w = 0; w < SLOT_WORDS; w++)
        if (ready[w] & mps_mask[w])
            return 1;
    return 0;
}

static off_t sched_byte(void) { return (off_t)offsetof(struct sim_shared, sched_gen); }

static void sched_lock(void)
{
    pthread_mutex_lock(&sched_mu);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = sched_byte(), .l_len = 1};
    while (fcntl(lock_fd, F_OFD_SETLKW, &fl) != 0 && errno == EINTR)
        ;
}

static void sched_unlock(void)
{
    fg_lock_byte(lock_fd, sched_byte(), F_UNLCK);
    pthread_mutex_unlock(&sched_mu);
}

/* Copies the committed schedule's state of every live slot into `to`
 * (an entry for a new incarnation starts empty) and lists lanes with work.
 * Entries of free slots are left stale: a slot is claimed with a new
 * incarnation, which resets its entry. */
static void collect(const struct sim_sched *from, struct sim_sched *to)
{
    nacts = 0;
    memset(relevant, 0, sizeof relevant);
    memset(checked, 0, sizeof checked);
    memset(alive, 0, sizeof alive);
    memset(mps_mask, 0, sizeof mps_mask);
    to->t_ns = from->t_ns;
    memcpy(to->dev, from->dev, sizeof to->dev);
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc_state *p = &sim->procs[i];
        if (!__atomic_load_n(&p->pid, __ATOMIC_ACQUIRE))
            continue;
        uint32_t inc = __atomic_load_n(&p->inc, __ATOMIC_ACQUIRE);
        struct sim_sched_proc *e = &to->procs[i];
        *e = from->procs[i];
        if (e->inc != inc)
            *e = (struct sim_sched_proc){.inc = inc};
        set_bit(relevant, i);
        /* At most the device's: the file is every process's to write, and
         * a sum of SMs must not overflow the slowed kernels' times. */
        uint32_t sms = __atomic_load_n(&p->mps_sms, __ATOMIC_ACQUIRE);
        mps_sm[i] = sms < (uint32_t)sim->cfg.sms ? sms : (uint32_t)sim->cfg.sms;
        if (mps_sm[i])
            set_bit(mps_mask, i);
        if (e->dead)
            continue;
        uint32_t lanes = __atomic_load_n(&p->lanes, __ATOMIC_ACQUIRE);
        for (int l = 0; l < SIM_LANES; l++) {
            struct sim_lane *q = &sim->lanes[i][l];
            if ((lanes >> l & 1) && l / SIM_LANES_PER_DEV < sim->cfg.devices &&
                __atomic_load_n(&q->head, __ATOMIC_ACQUIRE) > e->lanes[l].finished)
                acts[nacts++] = (struct act){.slot = i, .lane = l, .dev = moved_of(i, l / SIM_LANES_PER_DEV),
                                             .base = (uint64_t)inc << TAG_SHIFT, .q = q, .s = &e->lanes[l]};
        }
    }
}

static struct sim_item *head_item(const struct act *a) { return &a->q->ring[a->s->finished % SIM_RING]; }

static void read_head(struct act *a)
{
    struct sim_item *c = head_item(a);
    a->ready = __atomic_load_n(&c->tag, __ATOMIC_ACQUIRE) == (a->base | (a->s->finished + 1));
    if (a->ready) {
        a->dep = __atomic_load_n(&c->dep, __ATOMIC_ACQUIRE);
        a->arrival = c->arrival_ns;
        a->dur = __atomic_load_n(&c->dur_ns, __ATOMIC_ACQUIRE) & ~SIM_CLOSED;
    }
}

/* Passes the marks the lanes have reached by t. */
static void settle(struct sim_sched *S, uint64_t t, int commit)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (int k = 0; k < nacts; k++) {
            struct act *a = &acts[k];
            for (read_head(a); a->ready && (a->dep & SIM_MARK) && a->arrival <= t; read_head(a)) {
                if ((a->dep & SIM_DEP) && S->procs[a->slot].lanes[DEP_LANE(a->dep)].finished < (a->dep & COUNT_MASK))
                    break;
                if ((a->dep & (SIM_HOST | SIM_RELEASED)) == SIM_HOST)
                    break; /* its function has not returned yet */
                if (commit)
                    __atomic_store_n(&head_item(a)->done_ns, t, __ATOMIC_RELEASE);
                a->s->finished++;
                changed = 1;
            }
        }
    }
}

static int alive_slot(int i, uint32_t inc)
{
    if (i == my_proc)
        return 1;
    if (!bit(checked, i)) {
        set_bit(checked, i);
        if (fg_byte_held(lock_fd, (off_t)offsetof(struct sim_shared, procs[i])) &&
            __atomic_load_n(&sim->procs[i].inc, __ATOMIC_ACQUIRE) == inc)
            set_bit(alive, i);
    }
    return bit(alive, i);
}

static void drop(int slot)
{
    int n = 0;
    for (int k = 0; k < nacts; k++)
        if (acts[k].slot != slot)
            acts[n++] = acts[k];
    nacts = n;
}

/* Who holds device d from t, given the slots with a kernel ready on it.
 * Returns 1 when the process whose turn it was is dead: its work is gone,
 * and the caller looks again. */
static int pick(struct sim_sched *S, int d, uint64_t t, const uint64_t *ready)
{
    struct sim_sched_dev *D = &S->dev[d];
    /* Each device slices on a clock of its own, 1/64 slower per index: two
     * GPUs' turns drift past each other, as independent GPUs' do, rather
     * than lock in step (which would hold two jobs' collectives apart for
     * good). */
    uint64_t slice = sim->cfg.timeslice_ns + sim->cfg.timeslice_ns * (uint64_t)d / 64;
    int cur = D->cur;
    if (cur >= 0 && (!bit(relevant, cur) || S->procs[cur].inc != D->cur_inc || S->procs[cur].dead))
        D->cur = cur = -1;
    int cur_ready = holder_ready(ready, cur), others = others_ready(ready, cur);
    /* Past its slice's end, the holder had the device alone (a step stops
     * on the end when others wait): its slice renews on each boundary, if
     * it still lives. */
    if (cur_ready && D->slice_end_ns < t) {
        if (!alive_slot(cur, D->cur_inc)) {
            S->procs[cur].dead = 1;
            drop(cur);
            D->cur = -1;
            return 1;
        }
        D->slice_end_ns += (t - D->slice_end_ns + slice - 1) / slice * slice;
    }
    if (!others || (cur_ready && t < D->slice_end_ns))
        return 0;
    for (int k = 1; k <= SIM_MAX_PROCS; k++) {
        int i = (cur + k + SIM_MAX_PROCS) % SIM_MAX_PROCS;
        if (!bit(ready, i) || (cur_ready && runs_with(i, cur)))
            continue; /* a turn goes to one that did not run */
        if (!alive_slot(i, S->procs[i].inc)) {
            S->procs[i].dead = 1;
            drop(i);
            return 1;
        }
        D->cur = i;
        D->cur_inc = S->procs[i].inc;
        D->slice_end_ns = t + slice;
        return 0;
    }
    return 0;
}

static void push_span(struct span sp)
{
    if (nspans == cap_spans) {
        size_t cap = cap_spans ? 2 * cap_spans : 64;
        struct span *n = realloc(spans, cap * sizeof *n);
        if (!n)
            return; /* busy time is only reported */
        spans = n;
        cap_spans = cap;
    }
    spans[nspans++] = sp;
}

/* Busy time of device d (slot -1), or of a process on it. */
static void busy(int d, int slot, uint64_t from, uint64_t to)
{
    struct span *o = &open_span[d][1 + slot];
    if (o->to && from <= o->to) {
        if (to > o->to)
            o->to = to;
        return;
    }
    if (o->to)
        push_span(*o);
    else
        opened[nopened++] = o;
    *o = (struct span){.dev = d, .slot = slot, .from = from, .to = to};
}

/* A running kernel that reached its duration is done, unless more work
 * joined it meanwhile; committing closes it to more. */
static void finish(struct act *a, int commit)
{
    struct sim_item *c = head_item(a);
    uint64_t d = __atomic_load_n(&c->dur_ns, __ATOMIC_ACQUIRE);
    for (;;) {
        if (a->s->progress_ns < (d & ~SIM_CLOSED))
            return;
        if (!commit || (d & SIM_CLOSED) ||
            __atomic_compare_exchange_n(&c->dur_ns, &d, d | SIM_CLOSED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
    }
    a->s->finished++;
    a->s->progress_ns = 0;
}

/* Whether every member of a's collective runs its matching kernel now. */
static int peers_running(const struct act *a)
{
    int n = 0;
    for (int k = 0; k < nacts; k++) {
        const struct act *b = &acts[k];
        if (b->running && (b->dep & (SIM_COLL | COLL_ID_MASK | COUNT_MASK)) == (a->dep & (SIM_COLL | COLL_ID_MASK | COUNT_MASK)))
            n++;
    }
    return n >= COLL_RANKS(a->dep);
}

/* Advances S from its time towards until. Committing, it records what the
 * devices did (marks' times, kernels closed, busy time); predicting, it
 * leaves the queues alone and stops once this process's lane `lane` has
 * finished count, or when nothing would change any more (*stalled).
 * Returns the time reached. */
static uint64_t run(struct sim_sched *S, uint64_t until, int commit, int lane, uint64_t count, int *stalled)
{
    uint64_t t = S->t_ns;
    for (;;) {
        settle(S, t, commit);
        uint64_t ready[SIM_MAX_DEVICES][SLOT_WORDS] = {{0}};
        for (int k = 0; k < nacts; k++) {
            const struct act *a = &acts[k];
            if (a->ready && !(a->dep & SIM_MARK) && a->arrival <= t)
                set_bit(ready[a->dev], a->slot);
        }
        int again = 0;
        for (int d = 0; d < sim->cfg.devices && !again; d++)
            again = pick(S, d, t, ready[d]);
        if (again)
            continue;
        if ((lane >= 0 && S->procs[my_proc].lanes[lane].finished >= count) || t >= until)
            break;
        /* What runs; MPS clients' SMs asked for on each device, each
         * process counted once. */
        uint64_t asked[SIM_MAX_DEVICES] = {0}, counted[SIM_MAX_DEVICES][SLOT_WORDS] = {{0}};
        for (int k = 0; k < nacts; k++) {
            struct act *a = &acts[k];
            a->running = a->ready && a->arrival <= t && !(a->dep & SIM_MARK) && runs_with(a->slot, S->dev[a->dev].cur);
            if (a->running && bit(mps_mask, a->slot) && !bit(counted[a->dev], a->slot)) {
                set_bit(counted[a->dev], a->slot);
                asked[a->dev] += mps_sm[a->slot];
            }
        }
        for (int k = 0; k < nacts; k++)
            acts[k].spinning = acts[k].running && (acts[k].dep & SIM_COLL) && !peers_running(&acts[k]);
        /* The next thing to happen: an arrival, a kernel's end, a slice's end. */
        uint64_t next = until, sms = (uint64_t)sim->cfg.sms;
        int moving = 0;
        for (int k = 0; k < nacts; k++) {
            struct act *a = &acts[k];
            if (a->ready && a->arrival > t) {
                next = a->arrival < next ? a->arrival : next;
                moving = 1;
            } else if (a->running && !a->spinning) {
                uint64_t left = a->dur > a->s->progress_ns ? a->dur - a->s->progress_ns : 0;
                if (asked[a->dev] > sms) /* slowed: the SMs are shared */
                    left = (left * asked[a->dev] + sms - 1) / sms;
                next = t + left < next ? t + left : next;
                moving = 1;
            }
        }
        for (int d = 0; d < sim->cfg.devices; d++) {
            const struct sim_sched_dev *D = &S->dev[d];
            if (D->cur >= 0 && bit(ready[d], D->cur) && others_ready(ready[d], D->cur) && D->slice_end_ns > t &&
                D->slice_end_ns < next)
                next = D->slice_end_ns;
        }
        if (!moving && lane >= 0) {
            *stalled = 1;
            break;
        }
        for (int k = 0; k < nacts; k++)
            if (acts[k].running) {
                uint64_t d = acts[k].dev;
                if (!acts[k].spinning) /* a spinning collective holds the device, doing nothing */
                    acts[k].s->progress_ns += asked[d] > sms ? (next - t) * sms / asked[d] : next - t;
                if (commit) {
                    busy(acts[k].dev, -1, t, next);
                    busy(acts[k].dev, acts[k].slot, t, next);
                }
            }
        t = next;
        for (int k = 0; k < nacts; k++)
            if (acts[k].running && !acts[k].spinning)
                finish(&acts[k], commit);
    }
    S->t_ns = t;
    return t;
}

/* Tells a lane's process what the device finished (once committed). */
static void publish(const struct act *a)
{
    uint64_t w = __atomic_load_n(&a->q->done, __ATOMIC_ACQUIRE), v = a->base | a->s->finished;
    while ((w & ~COUNT_MASK) == a->base && w < v &&
           !__atomic_compare_exchange_n(&a->q->done, &w, v, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
}

/* Adds busy time to a ring of buckets; what is older than the ring is gone. */
static void credit(struct sim_bucket *ring, uint64_t from, uint64_t to, uint64_t now)
{
    for (uint64_t t = from; t < to;) {
        uint64_t e = t / SIM_BUCKET_NS, stop = (e + 1) * SIM_BUCKET_NS < to ? (e + 1) * SIM_BUCKET_NS : to;
        if (e + SIM_HIST_BUCKETS > now / SIM_BUCKET_NS) {
            struct sim_bucket *b = &ring[e % SIM_HIST_BUCKETS];
            if (__atomic_load_n(&b->epoch, __ATOMIC_ACQUIRE) != e) {
                __atomic_store_n(&b->busy_ns, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&b->epoch, e, __ATOMIC_RELEASE);
            }
            __atomic_fetch_add(&b->busy_ns, stop - t, __ATOMIC_RELAXED);
        }
        t = stop;
    }
}

/* Busy time in (from, now]; a bucket partly in the window counts for that
 * part, its busy time taken as spread evenly. */
static uint64_t busy_in(const struct sim_bucket *ring, uint64_t from, uint64_t now)
{
    uint64_t sum = 0;
    for (uint64_t e = from / SIM_BUCKET_NS; e <= now / SIM_BUCKET_NS; e++) {
        const struct sim_bucket *b = &ring[e % SIM_HIST_BUCKETS];
        if (__atomic_load_n(&b->epoch, __ATOMIC_ACQUIRE) != e)
            continue;
        uint64_t lo = e * SIM_BUCKET_NS, hi = lo + SIM_BUCKET_NS < now ? lo + SIM_BUCKET_NS : now;
        uint64_t v = __atomic_load_n(&b->busy_ns, __ATOMIC_RELAXED);
        if (from > lo && hi > lo)
            v = (uint64_t)((double)v * (double)(hi - from) / (double)(hi - lo));
        sum += v;
    }
    return sum;
}

/* Steps the schedule to now and commits it (lock held). */
static struct sim_sched *advance(void)
{
    uint64_t g = __atomic_load_n(&sim->sched_gen, __ATOMIC_ACQUIRE);
    struct sim_sched *to = &sim->sched[(g + 1) & 1];
    collect(&sim->sched[g & 1], to);
    nspans = 0;
    /* A due the clock stands at, LATE_NS behind, is a waiter the host has
     * not run yet, or a dead one: the clock waits only for the living. */
    uint64_t raw;
    int late;
    uint64_t now = clock_at(wall_ns(), &raw, &late);
    if (late >= 0 && late != my_proc && raw > now + LATE_NS &&
        !fg_byte_held(lock_fd, (off_t)offsetof(struct sim_shared, procs[late]))) {
        due_clear(late);
        now = sim_now_ns();
    }
    if (now > to->t_ns)
        run(to, now, 1, -1, 0, NULL);
    __atomic_store_n(&sim->sched_gen, g + 1, __ATOMIC_RELEASE);
    for (int k = 0; k < nacts; k++)
        publish(&acts[k]);
    for (size_t k = 0; k < nopened; k++) {
        push_span(*opened[k]);
        *opened[k] = (struct span){0};
    }
    nopened = 0;
    for (size_t k = 0; k < nspans; k++) {
        const struct span *sp = &spans[k];
        if (sp->slot < 0)
            credit(sim->dev[sp->dev].busy, sp->from, sp->to, to->t_ns);
        else if (__atomic_load_n(&sim->procs[sp->slot].inc, __ATOMIC_ACQUIRE) == to->procs[sp->slot].inc)
            credit(sim->procs[sp->slot].busy[sp->dev], sp->from, sp->to, to->t_ns);
    }
    return to;
}

/* The earliest time this process's lane could have finished count,
 * continuing the committed schedule S over the work visible now (work
 * launched later only delays it). The other copy serves as scratch. */
static uint64_t predict(const struct sim_sched *S, int lane, uint64_t count)
{
    struct sim_sched *P = &sim->sched[(__atomic_load_n(&sim->sched_gen, __ATOMIC_ACQUIRE) + 1) & 1];
    P->t_ns = S->t_ns;
    memcpy(P->dev, S->dev, sizeof P->dev);
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if (bit(relevant, i))
            P->procs[i] = S->procs[i];
    for (int k = 0; k < nacts; k++)
        acts[k].s = &P->procs[acts[k].slot].lanes[acts[k].lane];
    int stalled = 0;
    uint64_t t = run(P, S->t_ns + PREDICT_NS, 0, lane, count, &stalled);
    return stalled ? S->t_ns + STALL_NS : t;
}

/* ---- waiting ---- */

int sim_finished(int lane, uint64_t count)
{
    if (!lane_used(lane) || published(lane_at(lane)) >= count)
        return 1;
    sched_lock();
    int r = advance()->procs[my_proc].lanes[lane].finished >= count;
    sched_unlock();
    return r;
}

static void due_set(uint64_t t)
{
    if (__atomic_load_n(&sim->procs[my_proc].due_ns, __ATOMIC_ACQUIRE) && !due_mine)
        return; /* another thread's: the clock waits for it already */
    __atomic_store_n(&sim->procs[my_proc].due_ns, t, __ATOMIC_RELEASE);
    __atomic_fetch_or(&sim->due_mask[my_proc / 64], 1ull << (my_proc % 64), __ATOMIC_RELEASE);
    due_mine = 1;
}

static void due_drop(void)
{
    if (due_mine)
        due_clear(my_proc);
    due_mine = 0;
}

/* Sleeps (holding nothing) until the earliest time the lane could be done,
 * then looks again. The device's clock waits at that time until this
 * thread runs again. */
void sim_wait(int lane, uint64_t count)
{
    if (!lane_used(lane))
        return;
    struct sim_lane *q = lane_at(lane);
    uint64_t head = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
    if (count > head)
        count = head; /* a forked child's copy of its parent's streams */
    int slept = 0;
    while (published(q) < count) {
        sched_lock();
        due_drop();
        const struct sim_sched *S = advance();
        uint64_t when = S->procs[my_proc].lanes[lane].finished >= count ? 0 : predict(S, lane, count);
        /* The clock waits for us only once the lane has run dry: until
         * then a late wake-up costs the device nothing. */
        uint64_t all = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE);
        if (when)
            due_set(all > count ? predict(S, lane, all) : when);
        sched_unlock();
        if (!when)
            return;
        sim_sleep_until(when);
        slept = 1;
    }
    if (slept) { /* someone else saw it done first */
        sched_lock();
        due_drop();
        sched_unlock();
    }
}

/* ---- event stamps ---- */

void sim_stamp_forget(struct sim_stamp *st)
{
    if (!st->count || st->untimed)
        return;
    pthread_mutex_lock(&watch_mu);
    struct sim_stamp **w = &watch[st->lane][(st->count - 1) % SIM_RING];
    if (*w == st)
        *w = NULL;
    pthread_mutex_unlock(&watch_mu);
}

/* An untimed stamp (CU_EVENT_DISABLE_TIMING) is a plain mark: nothing
 * watches for its time. */
void sim_stamp_record(struct sim_stamp *st, int lane, int timed)
{
    sim_stamp_forget(st);
    if (my_proc < 0)
        *st = (struct sim_stamp){.resolved = 1, .ts_ns = sim_now_ns()};
    else if (timed)
        submit(lane, 0, SIM_MARK | SIM_EVENT, st);
    else
        *st = (struct sim_stamp){.lane = lane, .count = submit(lane, 0, SIM_MARK, NULL), .untimed = 1};
}

int sim_stamp_time(struct sim_stamp *st, uint64_t *ts_ns)
{
    if (!__atomic_load_n(&st->resolved, __ATOMIC_ACQUIRE)) {
        if (!sim_finished(st->lane, st->count))
            return 0;
        pthread_mutex_lock(&watch_mu);
        if (!st->resolved && !st->untimed) {
            struct sim_stamp **w = &watch[st->lane][(st->count - 1) % SIM_RING];
            /* Not watched any more only in a forked child: taken as reached now. */
            st->ts_ns = *w == st ? __atomic_load_n(&lane_at(st->lane)->ring[(st->count - 1) % SIM_RING].done_ns,
                                                   __ATOMIC_ACQUIRE)
                                 : sim_now_ns();
            if (*w == st)
                *w = NULL;
        }
        __atomic_store_n(&st->resolved, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&watch_mu);
    }
    *ts_ns = st->ts_ns;
    return 1;
}

void sim_stamp_wait(struct sim_stamp *st) { sim_wait(st->lane, st->count); }

/* ---- utilization ---- */

/* Percent of the last second the device spent running kernels. */
unsigned sim_utilization(int dev)
{
    sched_lock();
    uint64_t now = advance()->t_ns;
    uint64_t busy = busy_in(sim->dev[dev].busy, now - SIM_UTIL_NS, now);
    sched_unlock();
    uint64_t pct = (busy * 100 + SIM_UTIL_NS / 2) / SIM_UTIL_NS;
    return pct > 100 ? 100 : (unsigned)pct;
}

int sim_proc_utilization(int dev, uint64_t since_ns, struct sim_proc_util *out, int n, uint64_t *now_ns)
{
    sched_lock();
    uint64_t now = advance()->t_ns, from = now - SIM_UTIL_NS;
    if (since_ns > from)
        from = since_ns;
    int k = 0;
    for (int i = 0; i < SIM_MAX_PROCS && from < now; i++) {
        int32_t pid = __atomic_load_n(&sim->procs[i].pid, __ATOMIC_ACQUIRE);
        uint64_t busy = pid ? busy_in(sim->procs[i].busy[dev], from, now) : 0;
        if (!busy)
            continue;
        uint64_t pct = (busy * 100 + (now - from) / 2) / (now - from);
        if (k < n)
            out[k] = (struct sim_proc_util){.pid = pid, .pct = pct > 100 ? 100 : (unsigned)pct};
        k++;
    }
    sched_unlock();
    *now_ns = now;
    return k;
}

/* The device's UUID; NVML reports the same one in text form. */
void sim_uuid(int dev, CUuuid *uuid)
{
    static const unsigned char base[16] = {0xf1, 0xe9, 0x60, 0x00, 0x5e, 0x1d, 0x40, 0x00,
                                           0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[14] = (char)(sim ? sim->cfg.machine : 0);
    uuid->bytes[15] = (char)dev;
}

/* ---- process checkpointing ----
 * A controller process locks, checkpoints, restores and unlocks another
 * by its pid, as with the driver's checkpoint API. The target's state is
 * its slot's ckpt_state. Its driver calls that touch the device pass a
 * gate: counted in gated_calls while under way, and waiting (on a futex on
 * the shared word, looked at again every 100 ms) while the state is not
 * RUNNING. A lock waits until no call is under way and everything queued
 * is done; a checkpoint moves the process's device memory off the device
 * into host_bytes (the bytes themselves stay in its own memory, as the
 * driver's host copy does); a restore reserves it again or fails as a full
 * device does. A controller holds the slot's second byte while it changes
 * the slot, and a reaper takes that byte too, so a target that dies
 * meanwhile is reaped afterwards, whole. A process is its own controller
 * of nothing: its own pid is not found (its slot's lock is its own). */

static __thread int gate_depth; /* only a thread's outermost call is gated */

static void futex_wait(uint32_t *word, uint32_t val)
{
    struct timespec ts = {0, 100000000};
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

/* Returns 1 + the slot counted in, or 0 when nothing was counted. */
int sim_gate_enter(void)
{
    if (gate_depth++ || my_proc < 0)
        return 0;
    int i = my_proc;
    struct sim_proc_state *p = &sim->procs[i];
    for (;;) {
        __atomic_fetch_add(&p->gated_calls, 1, __ATOMIC_SEQ_CST);
        uint32_t st = __atomic_load_n(&p->ckpt_state, __ATOMIC_SEQ_CST);
        if (st == CU_PROCESS_STATE_RUNNING)
            return i + 1;
        __atomic_fetch_sub(&p->gated_calls, 1, __ATOMIC_SEQ_CST);
        futex_wait(&p->ckpt_state, st);
    }
}

void sim_gate_leave(int *gate)
{
    if (*gate)
        __atomic_fetch_sub(&sim->procs[*gate - 1].gated_calls, 1, __ATOMIC_SEQ_CST);
    gate_depth--;
}

static off_t ckpt_byte(int i) { return (off_t)offsetof(struct sim_shared, procs[i]) + 1; }

static void ckpt_byte_lock(int i, short type)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = ckpt_byte(i), .l_len = 1};
    while (fcntl(lock_fd, type == F_UNLCK ? F_OFD_SETLK : F_OFD_SETLKW, &fl) != 0 && errno == EINTR)
        ;
}

/* The live slot of pid (another process's), or -1; *inc: its incarnation. */
static int find_pid(int pid, uint32_t *inc)
{
    if (!sim || lock_fd < 0 || pid <= 0)
        return -1;
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_proc_state *p = &sim->procs[i];
        if (__atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) != pid)
            continue;
        *inc = __atomic_load_n(&p->inc, __ATOMIC_ACQUIRE);
        if (fg_byte_held(lock_fd, (off_t)offsetof(struct sim_shared, procs[i])) &&
            __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) == pid)
            return i;
    }
    return -1;
}

/* Whether slot i is still incarnation inc of pid (ckpt byte held, or the
 * answer may change at once). */
static int same_proc(int i, int pid, uint32_t inc)
{
    struct sim_proc_state *p = &sim->procs[i];
    return __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) == pid && __atomic_load_n(&p->inc, __ATOMIC_ACQUIRE) == inc &&
           fg_byte_held(lock_fd, (off_t)offsetof(struct sim_shared, procs[i]));
}

/* Finds pid and takes its slot's ckpt byte; -1 (nothing held) if gone. */
static int hold_pid(int pid, uint32_t *inc)
{
    int i = find_pid(pid, inc);
    if (i < 0)
        return -1;
    ckpt_byte_lock(i, F_WRLCK);
    if (same_proc(i, pid, *inc))
        return i;
    ckpt_byte_lock(i, F_UNLCK);
    return -1;
}

CUresult sim_ckpt_state(int pid, CUprocessState *state)
{
    uint32_t inc;
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find_pid(pid, &inc);
    if (i < 0) /* as the driver answers for a process it cannot find (H200, driver 580) */
        return CUDA_ERROR_OPERATING_SYSTEM;
    *state = (CUprocessState)__atomic_load_n(&sim->procs[i].ckpt_state, __ATOMIC_ACQUIRE);
    return CUDA_SUCCESS;
}

/* Whether slot i (incarnation inc) has run everything it queued, the
 * schedule stepped to now. */
static int drained(int i, uint32_t inc)
{
    sched_lock();
    const struct sim_sched *S = advance();
    int done = S->procs[i].inc == inc;
    uint32_t lanes = __atomic_load_n(&sim->procs[i].lanes, __ATOMIC_ACQUIRE);
    for (int l = 0; done && l < SIM_LANES; l++)
        if (lanes >> l & 1)
            done = S->procs[i].lanes[l].finished >= __atomic_load_n(&sim->lanes[i][l].head, __ATOMIC_ACQUIRE);
    sched_unlock();
    return done;
}

/* Locked, it waits (up to timeout_ms, 0: no limit) for its calls under way
 * and its queued work; on timeout it runs again, as the driver leaves it. */
CUresult sim_ckpt_lock(int pid, unsigned timeout_ms)
{
    uint32_t inc;
    int i = hold_pid(pid, &inc);
    if (i < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct sim_proc_state *p = &sim->procs[i];
    uint32_t running = CU_PROCESS_STATE_RUNNING;
    int locked = __atomic_compare_exchange_n(&p->ckpt_state, &running, CU_PROCESS_STATE_LOCKED, 0, __ATOMIC_SEQ_CST,
                                             __ATOMIC_SEQ_CST);
    ckpt_byte_lock(i, F_UNLCK);
    if (!locked)
        return CUDA_ERROR_ILLEGAL_STATE;
    /* Waited for without the byte: a target dying meanwhile is reaped. */
    uint64_t start = wall_ns();
    for (;;) {
        if (!same_proc(i, pid, inc))
            return CUDA_ERROR_INVALID_VALUE;
        if (__atomic_load_n(&p->gated_calls, __ATOMIC_SEQ_CST) == 0 && drained(i, inc))
            return CUDA_SUCCESS;
        if (timeout_ms && wall_ns() - start >= (uint64_t)timeout_ms * 1000000ull)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    ckpt_byte_lock(i, F_WRLCK);
    if (same_proc(i, pid, inc)) {
        __atomic_store_n(&p->ckpt_state, CU_PROCESS_STATE_RUNNING, __ATOMIC_SEQ_CST);
        futex_wake(&p->ckpt_state);
    }
    ckpt_byte_lock(i, F_UNLCK);
    return CUDA_ERROR_TIMEOUT;
}

CUresult sim_ckpt_checkpoint(int pid)
{
    uint32_t inc;
    int i = hold_pid(pid, &inc);
    if (i < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct sim_proc_state *p = &sim->procs[i];
    CUresult r = CUDA_ERROR_ILLEGAL_STATE;
    if (__atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE) == CU_PROCESS_STATE_LOCKED) {
        for (int d = 0; d < SIM_MAX_DEVICES; d++) {
            uint64_t b = __atomic_exchange_n(&p->used_bytes[d], 0, __ATOMIC_ACQ_REL);
            __atomic_fetch_add(&p->host_bytes[d], b, __ATOMIC_ACQ_REL);
            __atomic_fetch_sub(&sim->dev[d].used_bytes, b, __ATOMIC_ACQ_REL);
        }
        __atomic_store_n(&p->ckpt_state, CU_PROCESS_STATE_CHECKPOINTED, __ATOMIC_SEQ_CST);
        r = CUDA_SUCCESS;
    }
    ckpt_byte_lock(i, F_UNLCK);
    return r;
}

/* Where each device's memory goes (physical indices, to[d] for device d):
 * its own, or where a pair sends it. Every device the process holds memory
 * on needs a pair when any is given, a pair's GPUs must be the node's, and
 * no two pairs may share a GPU on either side: CUDA_ERROR_INVALID_VALUE
 * otherwise. */
static CUresult restore_map(const struct sim_proc_state *p, const CUcheckpointGpuPair *pairs, unsigned npairs,
                            int to[SIM_MAX_DEVICES])
{
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        to[d] = d;
    if (!npairs)
        return CUDA_SUCCESS;
    if (!pairs || npairs > SIM_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    int from_dev[SIM_MAX_DEVICES], to_dev[SIM_MAX_DEVICES];
    for (unsigned k = 0; k < npairs; k++) {
        from_dev[k] = to_dev[k] = -1;
        for (int d = 0; d < sim->cfg.devices; d++) {
            CUuuid u;
            sim_uuid(d, &u);
            if (!memcmp(&u, &pairs[k].oldUuid, sizeof u))
                from_dev[k] = d;
            if (!memcmp(&u, &pairs[k].newUuid, sizeof u))
                to_dev[k] = d;
        }
        if (from_dev[k] < 0 || to_dev[k] < 0)
            return CUDA_ERROR_INVALID_VALUE;
        for (unsigned j = 0; j < k; j++)
            if (from_dev[j] == from_dev[k] || to_dev[j] == to_dev[k])
                return CUDA_ERROR_INVALID_VALUE;
    }
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        if (!__atomic_load_n(&p->host_bytes[d], __ATOMIC_ACQUIRE))
            continue;
        unsigned k = 0;
        while (k < npairs && from_dev[k] != d)
            k++;
        if (k == npairs)
            return CUDA_ERROR_INVALID_VALUE;
        to[d] = to_dev[k];
    }
    return CUDA_SUCCESS;
}

/* Everything back on its devices, or where pairs send them, or nothing
 * (and still CHECKPOINTED). A device moved stays moved: the process's
 * later memory and work for it go to the new one. */
CUresult sim_ckpt_restore(int pid, const CUcheckpointGpuPair *pairs, unsigned npairs)
{
    sim_reap_dead(); /* a dead process's memory may be the room it needs; not with a byte held */
    uint32_t inc;
    int i = hold_pid(pid, &inc);
    if (i < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct sim_proc_state *p = &sim->procs[i];
    CUresult r = CUDA_ERROR_ILLEGAL_STATE;
    int to[SIM_MAX_DEVICES];
    if (__atomic_load_n(&p->ckpt_state, __ATOMIC_ACQUIRE) == CU_PROCESS_STATE_CHECKPOINTED &&
        (r = restore_map(p, pairs, npairs, to)) == CUDA_SUCCESS) {
        int d = 0;
        for (; d < SIM_MAX_DEVICES; d++)
            if (reserve_on(to[d], __atomic_load_n(&p->host_bytes[d], __ATOMIC_ACQUIRE)) != 0)
                break;
        if (d < SIM_MAX_DEVICES) {
            while (d-- > 0)
                __atomic_fetch_sub(&sim->dev[to[d]].used_bytes, p->host_bytes[d], __ATOMIC_ACQ_REL);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            for (d = 0; d < SIM_MAX_DEVICES; d++)
                __atomic_fetch_add(&p->used_bytes[to[d]], __atomic_exchange_n(&p->host_bytes[d], 0, __ATOMIC_ACQ_REL),
                                   __ATOMIC_ACQ_REL);
            /* The process's own devices that were on d are on to[d] now. */
            uint8_t moved[SIM_MAX_DEVICES];
            for (int own = 0; own < SIM_MAX_DEVICES; own++) {
                int at = moved_of(i, own);
                moved[own] = (uint8_t)(to[at] == own ? 0 : to[at] + 1);
            }
            for (int own = 0; own < SIM_MAX_DEVICES; own++)
                __atomic_store_n(&p->moved_to[own], moved[own], __ATOMIC_RELEASE);
            __atomic_store_n(&p->ckpt_state, CU_PROCESS_STATE_LOCKED, __ATOMIC_SEQ_CST);
            r = CUDA_SUCCESS;
        }
    }
    ckpt_byte_lock(i, F_UNLCK);
    return r;
}

CUresult sim_ckpt_unlock(int pid)
{
    uint32_t inc;
    int i = hold_pid(pid, &inc);
    if (i < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct sim_proc_state *p = &sim->procs[i];
    uint32_t locked = CU_PROCESS_STATE_LOCKED;
    int ok = __atomic_compare_exchange_n(&p->ckpt_state, &locked, CU_PROCESS_STATE_RUNNING, 0, __ATOMIC_SEQ_CST,
                                         __ATOMIC_SEQ_CST);
    if (ok)
        futex_wake(&p->ckpt_state);
    ckpt_byte_lock(i, F_UNLCK);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_STATE;
}
