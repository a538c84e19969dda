/* A tenant's shared usage (include/flexgv/tenant_layout_gen.h; the protocol
 * is described in tools/gen/layout.go): one slot per process, usage per
 * device entry in each slot, the tenant's usage being the sum over claimed
 * slots. Charging adds to our own slot first and then checks the sum (all
 * sequentially consistent), so of two allocations racing for the last bytes
 * at least one sees the other and neither can slip under the quota together.
 *
 * Liveness is an OFD lock on the first byte of each slot, which the kernel
 * drops when its holder dies, whatever PID namespace anyone is in: a slot
 * that is claimed but unlocked belongs to a dead process and whoever locks
 * it next (a claimer or a reaper) zeroes what it held. Nothing shared is
 * ever locked for longer than those few stores.
 *
 * The file is untrusted input: the geometry and the quotas are read once at
 * attach, validated and kept here, so later writes by others cannot lift a
 * limit or make us index out of bounds; a truncation, which would fault our
 * mapping, is caught (SIGBUS on our own accesses only) and makes the tenant
 * refuse further allocations instead of crashing the program.
 *
 * Nothing happens in the constructor beyond reading the environment: the
 * file is mapped at the first CUDA or NVML call that needs it, and a process
 * claims its slot at its first CUDA call, so shells and other programs that
 * never use CUDA cost the tenant nothing. */
#include "shim.h"
#include "flexgv/cuda_util.h"
#include "flexgv/liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *tenant_path;

/* What attach read and validated: never re-read from the file. */
static struct {
    char name[64];
    uint32_t nslots, ndev;
    uint64_t quota[FG_NDEV];
    char uuid[FG_NDEV][48];
    uint64_t ctx_bytes;
    int keyed_by_uuid;
} geo;

static struct fg_tenant_header *hdr;
static struct fg_tenant_slot *slots;
static size_t map_size;
static struct stat mapped; /* the file the mapping is of */

enum { NONE, BUSY, READY, FAILED };
static int attach_state, claim_state;
static int lock_fd = -1; /* our own unmapped open file description: our slot's lock */
/* Descriptors of the tenant file that whoever started us opened for us
 * (FLEXGV_TENANT_FDS=MAP,LOCK): a remote server's executor, run as a user
 * who may not open the file itself. Each is used once, in place of an
 * open; -1 when not given or used. */
static int given_map = -1, given_lock = -1;
static int mine = -1;
/* Changes to our slot's charges (the backstop): made so far << 32 | under
 * way now, one word so that a change costs one atomic add at each end. */
static uint64_t charge_moves;
static int broken;
static int refused_setup;
static int warned_setup, warned_broken, warned_refusal;

/* ---- states that several threads may race to leave ---- */

static void futex_wait(int *addr, int val) { syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0); }
static void futex_wake(int *addr) { syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0); }

/* Runs step once per process (until it succeeds or fails for good); other
 * threads wait for its outcome without spinning. */
static int once_slow(int *state, int (*step)(void))
{
    for (;;) {
        int s = __atomic_load_n(state, __ATOMIC_ACQUIRE);
        if (s == READY || s == FAILED)
            return s == READY;
        int none = NONE;
        if (s == NONE && __atomic_compare_exchange_n(state, &none, BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            s = step() ? READY : FAILED;
            __atomic_store_n(state, s, __ATOMIC_RELEASE);
            futex_wake(state);
            return s == READY;
        }
        if (s == BUSY)
            futex_wait(state, BUSY);
    }
}

static inline int once(int *state, int (*step)(void))
{
    return FG_LIKELY(__atomic_load_n(state, __ATOMIC_ACQUIRE) == READY) || once_slow(state, step);
}

/* ---- faults on the shared mapping ---- */

/* Initial-exec: the shim is preloaded, and this is read on every charge. */
static __thread sigjmp_buf *bus_jmp __attribute__((tls_model("initial-exec")));
static struct sigaction old_bus;

static void on_bus(int sig, siginfo_t *si, void *uc)
{
    char *a = si->si_addr;
    if (bus_jmp && a >= (char *)hdr && a < (char *)hdr + map_size)
        siglongjmp(*bus_jmp, 1);
    fg_sigbus_chain(&old_bus, sig, si, uc); /* not ours */
}

static void mark_broken(void)
{
    __atomic_store_n(&broken, 1, __ATOMIC_RELEASE);
    fg_warn_once(&warned_broken,
                 "tenant %s: its file %s was truncated by another process; allocations are refused from now on",
                 geo.name, tenant_path);
}

/* Every access to the mapping runs inside GUARD: if the file has been
 * truncated under us, the access faults, and we mark the tenant broken and
 * take FALLBACK instead of crashing. */
#define GUARD(fallback, body)                                      \
    do {                                                           \
        if (__atomic_load_n(&broken, __ATOMIC_ACQUIRE)) {          \
            fallback;                                              \
        } else {                                                   \
            sigjmp_buf jb_, *prev_ = bus_jmp;                      \
            if (sigsetjmp(jb_, 0)) {                               \
                bus_jmp = prev_;                                   \
                mark_broken();                                     \
                fallback;                                          \
            } else {                                               \
                bus_jmp = &jb_;                                    \
                body;                                              \
                bus_jmp = prev_;                                   \
            }                                                      \
        }                                                          \
    } while (0)

/* ---- setup ---- */

int fg_refuse_on_error(void)
{
    const char *v = getenv("FLEXGV_ON_ERROR");
    return !v || strcmp(v, "passthrough") != 0;
}

/* Setup failed: say so once, then refuse CUDA or run without the quota. */
static void setup_failed(const char *fmt, const char *a, const char *b)
{
    char msg[400];
    snprintf(msg, sizeof msg, fmt, a, b);
    int refuse = fg_refuse_on_error();
    fg_warn_once(&warned_setup, "%s; %s", msg,
                 refuse ? "CUDA is refused (cuInit fails; FLEXGV_ON_ERROR=passthrough runs without the quota)"
                        : "running without the quota (FLEXGV_ON_ERROR=passthrough)");
    if (refuse)
        __atomic_store_n(&refused_setup, 1, __ATOMIC_RELEASE);
    else
        __atomic_store_n(&fg_quota_on, 0, __ATOMIC_RELEASE);
}

/* Why the tenant file cannot be opened, errno's words; a missing one says
 * who makes it, as the path alone does not (a pod's is a mount). */
static const char *open_error(int err)
{
    if (err == ENOENT)
        return "no such file (flexgv run or the node's flexgv daemon makes it, in shared memory, which a reboot empties; "
               "the daemon makes a pod's again when it starts)";
    return strerror(err);
}

static size_t slot_off(uint32_t i) { return sizeof(struct fg_tenant_header) + (size_t)i * sizeof(struct fg_tenant_slot); }

static int lock_slot(int fd, uint32_t i, short type) { return fg_lock_byte(fd, (off_t)slot_off(i), type); }

/* The tenant file, opened read-write: a given descriptor, else by path. */
static int open_tenant(int *given)
{
    int fd = __atomic_exchange_n(given, -1, __ATOMIC_ACQ_REL);
    return fd >= 0 ? fd : open(tenant_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
}

/* A given descriptor counts only if it is a regular file open for reading
 * and writing (its header is checked as an opened one's); it is not passed
 * on to programs we exec. Its path is not looked at: whoever was given it
 * may not reach the tenants' folder. */
static int given_fd(const char *s, char **end, struct stat *st)
{
    long fd = strtol(s, end, 10);
    if (*end == s || fd < 3 || fd > 1 << 20 || fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0 ||
        (fcntl((int)fd, F_GETFL) & O_ACCMODE) != O_RDWR || syscall(SYS_fstat, (int)fd, st) != 0 || !S_ISREG(st->st_mode))
        return -1;
    return (int)fd;
}
static int given; /* the file was given (FLEXGV_TENANT_FDS) */

static int do_attach(void)
{
    int fd = open_tenant(&given_map);
    if (fd < 0) {
        setup_failed("cannot open tenant %s: %s", tenant_path, open_error(errno));
        return 0;
    }
    /* lseek, not fstat: fstat carries a glibc 2.33 symbol version. */
    off_t size = lseek(fd, 0, SEEK_END);
    struct fg_tenant_header h;
    int ok = size >= (off_t)sizeof h && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
             h.magic == FG_TENANT_MAGIC && h.version == FG_TENANT_VERSION && h.ndevices <= FG_NDEV &&
             h.nslots >= 1 && h.nslots <= FG_TENANT_MAX_SLOTS && (size_t)size >= slot_off(h.nslots);
    if (!ok) {
        close(fd);
        setup_failed("%s is not a tenant of this flexgv version%s", tenant_path, "");
        return 0;
    }
    void *m = mmap(NULL, slot_off(h.nslots), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    /* Raw system call: glibc's fstat carries a newer symbol version. */
    if (syscall(SYS_fstat, fd, &mapped) != 0)
        memset(&mapped, 0, sizeof mapped);
    close(fd);
    if (m == MAP_FAILED) {
        setup_failed("cannot map tenant %s: %s", tenant_path, strerror(errno));
        return 0;
    }
    memcpy(geo.name, h.name, sizeof geo.name - 1);
    geo.nslots = h.nslots;
    geo.ndev = h.ndevices;
    geo.ctx_bytes = h.ctx_bytes;
    for (uint32_t d = 0; d < h.ndevices; d++) {
        geo.quota[d] = h.devices[d].quota;
        memcpy(geo.uuid[d], h.devices[d].uuid, sizeof geo.uuid[d] - 1);
        geo.keyed_by_uuid |= geo.uuid[d][0] != 0;
    }
    map_size = slot_off(h.nslots);
    hdr = m;
    slots = (struct fg_tenant_slot *)(hdr + 1);
    struct sigaction sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old_bus);
    return 1;
}

static int attached(void) { return fg_quota_on && once(&attach_state, do_attach); }

/* ---- slots ---- */

static void zero_slot(struct fg_tenant_slot *s)
{
    __atomic_store_n(&s->nvml_pid, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&s->suspended, 0, __ATOMIC_SEQ_CST);
    for (int d = 0; d < FG_NDEV; d++) {
        __atomic_store_n(&s->used[d], 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->unmodelled[d], 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->moved[d], 0, __ATOMIC_SEQ_CST);
    }
}

static uint32_t hwm(void)
{
    uint32_t n = __atomic_load_n(&hdr->slot_hwm, __ATOMIC_SEQ_CST);
    return n < geo.nslots ? n : geo.nslots;
}

/* Frees the slots of dead processes: their memory died with them. */
static void reap_slots(void)
{
    int fd = __atomic_load_n(&lock_fd, __ATOMIC_ACQUIRE);
    if (fd < 0)
        return;
    for (uint32_t i = 0, n = hwm(); i < n; i++) {
        if ((int)i == mine || __atomic_load_n(&slots[i].state, __ATOMIC_SEQ_CST) != FG_TENANT_SLOT_CLAIMED)
            continue;
        if (lock_slot(fd, i, F_WRLCK) != 0)
            continue; /* its holder lives (or a claimer/reaper is at it) */
        zero_slot(&slots[i]);
        __atomic_store_n(&slots[i].state, (uint32_t)FG_TENANT_SLOT_FREE, __ATOMIC_SEQ_CST);
        lock_slot(fd, i, F_UNLCK);
    }
}

static int claim_slot(void)
{
    for (uint32_t i = 0; i < geo.nslots; i++) {
        if (lock_slot(lock_fd, i, F_WRLCK) != 0)
            continue;
        struct fg_tenant_slot *s = &slots[i];
        zero_slot(s); /* a dead holder's usage, if any, died with it */
        __atomic_store_n(&s->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        __atomic_store_n(&s->claimed_ns, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                         __ATOMIC_RELAXED);
        __atomic_store_n(&s->state, (uint32_t)FG_TENANT_SLOT_CLAIMED, __ATOMIC_SEQ_CST);
        uint32_t h = __atomic_load_n(&hdr->slot_hwm, __ATOMIC_SEQ_CST);
        while (h < i + 1 &&
               !__atomic_compare_exchange_n(&hdr->slot_hwm, &h, i + 1, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            ;
        mine = (int)i;
        return 1;
    }
    return 0;
}

/* Whether the path and our lock's descriptor are still the file we
 * mapped (raw system calls: glibc's stat wrappers carry newer symbol
 * versions). */
static int still_mapped_file(const char *path, int fd)
{
    struct stat a, b;
    if (syscall(SYS_fstat, fd, &b) != 0 || b.st_ino != mapped.st_ino || b.st_dev != mapped.st_dev)
        return 0;
    if (given) /* its path may be out of reach: removed is unlinked */
        return b.st_nlink > 0;
    return syscall(SYS_stat, path, &a) == 0 && a.st_ino == mapped.st_ino && a.st_dev == mapped.st_dev;
}

/* Our liveness locks go through an open file description of our own that
 * is never mapped: a mapping holds its description open, so a lock taken
 * through it would live on in forked children after we die. */
static int open_lock_fd(void)
{
    if (__atomic_load_n(&lock_fd, __ATOMIC_ACQUIRE) >= 0)
        return 1;
    int fd = open_tenant(&given_lock);
    if (fd < 0) {
        setup_failed("cannot open tenant %s: %s", tenant_path, open_error(errno));
        return 0;
    }
    int none = -1;
    if (!__atomic_compare_exchange_n(&lock_fd, &none, fd, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        close(fd); /* another thread was first */
    return 1;
}

static int do_claim(void)
{
    if (!once(&attach_state, do_attach) || !open_lock_fd())
        return 0;
    volatile int ok = 0;
    GUARD(return 0, {
        reap_slots();
        ok = claim_slot();
    });
    if (ok && !still_mapped_file(tenant_path, lock_fd)) {
        /* Removed (or replaced) while nobody held it, e.g. its CLI was
         * killed before this process took its slot: the tenant's other
         * processes, if any, are not in the file we use. */
        setup_failed("tenant file %s was removed%s", tenant_path, "");
        return 0;
    }
    if (!ok) {
        char n[16];
        snprintf(n, sizeof n, "%u", geo.nslots);
        setup_failed("tenant %s has no free process slot (all %s are held by live processes)", geo.name, n);
    }
    return ok;
}

int fg_tenant_ready(void)
{
    if (!fg_quota_on)
        return 0;
    return once(&claim_state, do_claim);
}

int fg_tenant_refused(void) { return __atomic_load_n(&refused_setup, __ATOMIC_ACQUIRE); }

void fg_tenant_init(const char *path)
{
    tenant_path = path;
    const char *fds = getenv("FLEXGV_TENANT_FDS");
    char *end;
    if (fds && *fds) {
        struct stat a, b;
        int m = given_fd(fds, &end, &a), l = *end == ',' ? given_fd(end + 1, &end, &b) : -1;
        if (m >= 0 && l >= 0 && m != l && !*end && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            given_map = m, given_lock = l, given = 1;
        else
            fprintf(stderr, "flexgv: FLEXGV_TENANT_FDS=%s are not two descriptors of tenant file %s; it is opened by "
                            "its path\n", fds, path);
    }
    fg_policy_enable(FG_POLICY_MEM);
}

/* Async-signal-safe: a forked child keeps the mapping but holds no device
 * memory and no slot; it claims its own slot at its first CUDA call. */
void fg_tenant_after_fork(void)
{
    if (!fg_quota_on)
        return;
    int fd = lock_fd;
    if (fd >= 0)
        close(fd); /* the parent's open file description stays the parent's */
    lock_fd = -1;
    /* Those given are the parent's too: the child opens its own by path. */
    if (given_map >= 0)
        close(given_map);
    if (given_lock >= 0)
        close(given_lock);
    given_map = given_lock = -1;
    mine = -1;
    claim_state = NONE;
    charge_moves = 0; /* a thread of the parent's, mid-charge, is not ours */
}

int fg_tenant_has_pid(unsigned pid)
{
    if (!attached() || pid == 0)
        return 0;
    if (pid == (unsigned)getpid())
        return 1;
    for (uint32_t i = 0, n = hwm(); i < n; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_SEQ_CST) == FG_TENANT_SLOT_CLAIMED &&
            ((unsigned)__atomic_load_n(&slots[i].pid, __ATOMIC_RELAXED) == pid ||
             __atomic_load_n(&slots[i].nvml_pid, __ATOMIC_RELAXED) == pid))
            return 1;
    return 0;
}

void fg_tenant_nvml_pid(unsigned pid)
{
    if (mine >= 0 && attached())
        __atomic_store_n(&slots[mine].nvml_pid, pid, __ATOMIC_RELAXED);
}

/* ---- devices: CUDA ordinals to the tenant's UUID-keyed entries ---- */

#define MAX_ORDINALS 64
static int entry_cache[MAX_ORDINALS]; /* entry + 2; 0: not looked up yet */

int fg_uuid_entry(const char *uuid)
{
    if (!attached())
        return -1;
    for (uint32_t e = 0; e < geo.ndev; e++)
        if (geo.uuid[e][0] && strcmp(geo.uuid[e], uuid) == 0)
            return (int)e;
    return -1;
}

int fg_index_entry(int nvml_index)
{
    if (!attached() || geo.keyed_by_uuid)
        return -1;
    return nvml_index >= 0 && (uint32_t)nvml_index < geo.ndev ? nvml_index : -1;
}

static int own_entry_of(int dev);

/* The entry device dev is counted on: its own, or the one flexgv resume
 * --gpu moved this process's memory there to (read at each use: the move
 * happens while the process is held, without its knowing). */
int fg_entry_of(int dev)
{
    int e = own_entry_of(dev);
    if (e < 0 || e >= FG_NDEV || mine < 0)
        return e;
    volatile int m = 0; /* a truncated file reads as not moved (and is marked broken) */
    GUARD((void)0, m = __atomic_load_n(&slots[mine].moved[e], __ATOMIC_ACQUIRE));
    return m > 0 && m <= (int)geo.ndev ? m - 1 : e;
}

static int own_entry_of(int dev)
{
    if (dev < 0 || dev >= MAX_ORDINALS || !attached())
        return -1;
    int c = __atomic_load_n(&entry_cache[dev], __ATOMIC_RELAXED);
    if (c)
        return c - 2;
    int e = -1;
    if (!geo.keyed_by_uuid) {
        e = (uint32_t)dev < geo.ndev ? dev : -1; /* made without NVML: entries are CUDA ordinals */
    } else {
        fg_real_cuDeviceGetUuid_v2 f = (fg_real_cuDeviceGetUuid_v2)fg_resolve_quiet(FG_API_cuDeviceGetUuid_v2);
        CUuuid u;
        char s[64];
        if (!f || f(&u, dev) != CUDA_SUCCESS)
            return -1; /* not cached: the driver may not be up yet */
        fg_uuid_text(&u, s, sizeof s);
        e = fg_uuid_entry(s);
        if (e < 0) {
            /* The CLI listed every GPU it saw: this one it did not. */
            static int warned_unknown;
            fg_warn_once(&warned_unknown, "tenant %s has no entry for device %d (%s): it is not limited", geo.name,
                         dev, s);
        }
    }
    __atomic_store_n(&entry_cache[dev], e + 2, __ATOMIC_RELAXED);
    return e;
}

/* ---- usage ---- */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* Each process's usage is what it charged plus what the driver's own count
 * last showed it holding beyond that (the backstop, below). */
static uint64_t sum_used(int e)
{
    uint64_t sum = 0;
    for (uint32_t i = 0, n = hwm(); i < n; i++)
        if (__atomic_load_n(&slots[i].state, __ATOMIC_SEQ_CST) == FG_TENANT_SLOT_CLAIMED) {
            sum = sat_add(sum, __atomic_load_n(&slots[i].used[e], __ATOMIC_SEQ_CST));
            sum = sat_add(sum, __atomic_load_n(&slots[i].unmodelled[e], __ATOMIC_SEQ_CST));
        }
    return sum;
}

/* ---- the backstop: the driver's own count ----
 * Whatever the charges miss (memory the driver takes that no rule here
 * knows of) shows in NVML's figure for this process. It is read on the
 * allocation path at most every BACKSTOP_NS, at the first allocation after
 * something that may have taken such memory (a module's load, a kernel's
 * first launch: fg_backstop_soon), and again when an allocation is about to
 * be refused (it may have gone down). What it shows beyond our charges is
 * kept in our slot, so the tenant's usage is the larger of the two and
 * every process of the tenant sees it.
 *
 * The driver's figure and ours are taken at different moments, and other
 * threads allocate and free between them. Charges precede the driver's
 * allocation and refunds follow its release, so our charges never lag
 * what the driver holds for them: the figure is compared with charges
 * that stood still throughout its reading (none under way at either end,
 * none made between). Where they kept moving (three tries), the lower of
 * the last kept value and this reading is kept: never more than the driver
 * holds. */
#define BACKSTOP_NS 100000000ull
#define BACKSTOP_TRIES 3
static uint64_t backstop_read[FG_NDEV]; /* CLOCK_MONOTONIC ns of the last read per entry */
static uint32_t backstop_gen, backstop_seen[FG_NDEV];

/* No change under way, and none made since moves was read. */
static int charges_still(uint64_t moves)
{
    return (uint32_t)moves == 0 && __atomic_load_n(&charge_moves, __ATOMIC_SEQ_CST) == moves;
}

void fg_backstop_soon(void) { __atomic_add_fetch(&backstop_gen, 1, __ATOMIC_RELEASE); }

static void backstop(int dev, int e, int force)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t last = __atomic_load_n(&backstop_read[e], __ATOMIC_RELAXED);
    uint32_t gen = __atomic_load_n(&backstop_gen, __ATOMIC_ACQUIRE);
    int due = force || now - last >= BACKSTOP_NS || __atomic_load_n(&backstop_seen[e], __ATOMIC_RELAXED) != gen;
    if (!due || !__atomic_compare_exchange_n(&backstop_read[e], &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return; /* read lately, or another thread reads it now */
    if (mine < 0)
        return;
    for (int i = 0; i < BACKSTOP_TRIES; i++) {
        uint64_t moves = __atomic_load_n(&charge_moves, __ATOMIC_SEQ_CST);
        int still = charges_still(moves);
        long long m = fg_nvml_self_used(dev);
        if (m < 0)
            return;
        uint64_t used = __atomic_load_n(&slots[mine].used[e], __ATOMIC_SEQ_CST);
        uint64_t over = (uint64_t)m > used ? (uint64_t)m - used : 0;
        if (still && charges_still(moves)) {
            __atomic_store_n(&slots[mine].unmodelled[e], over, __ATOMIC_SEQ_CST);
            __atomic_store_n(&backstop_seen[e], gen, __ATOMIC_RELAXED);
            return;
        }
        uint64_t kept = __atomic_load_n(&slots[mine].unmodelled[e], __ATOMIC_SEQ_CST);
        if (over < kept)
            __atomic_store_n(&slots[mine].unmodelled[e], over, __ATOMIC_SEQ_CST);
    }
}

/* A refusal reads the driver's count (fg_charge); one made after the
 * driver allocated (a pitched allocation's padding, known only then) read
 * it with that allocation in it, and the allocation given back since would
 * stay counted as the tenant's, the whole tenant refused for it, until the
 * next reading. */
void fg_backstop_again(int dev)
{
    int e;
    if (!fg_tenant_ready() || (e = fg_entry_of(dev)) < 0)
        return;
    GUARD((void)0, backstop(dev, e, 1));
}

/* Brackets a change of our charges for the backstop's readers. */
static void moving(void) { __atomic_add_fetch(&charge_moves, 1, __ATOMIC_SEQ_CST); }

static void moved(void)
{
    __atomic_add_fetch(&charge_moves, (1ull << 32) - 1, __ATOMIC_SEQ_CST);
}

static int add_mine(int e, uint64_t bytes)
{
    uint64_t *p = &slots[mine].used[e], cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    moving();
    do {
        if (cur > UINT64_MAX - bytes) {
            moved();
            return 0;
        }
    } while (!__atomic_compare_exchange_n(p, &cur, cur + bytes, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    moved();
    return 1;
}

/* Takes bytes from our slot, never below zero whatever was written there. */
static void sub_mine(int e, uint64_t bytes)
{
    uint64_t *p = &slots[mine].used[e], cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    moving();
    while (!__atomic_compare_exchange_n(p, &cur, cur > bytes ? cur - bytes : 0, 1, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
        ;
    moved();
}

static int charge_entry(int e, uint64_t bytes)
{
    uint64_t quota = geo.quota[e];
    if (quota && bytes > quota)
        return 0; /* refused before any sum can wrap */
    int reaped = 0;
    for (int attempt = 0; attempt < 16; attempt++) {
        if (!add_mine(e, bytes))
            return 0;
        if (!quota || sum_used(e) <= quota)
            return 1;
        sub_mine(e, bytes);
        /* Over: either there is no room, or a racer's charge was counted
         * while it, too, was backing out. Retry only in the second case. */
        if (sat_add(sum_used(e), bytes) > quota) {
            if (reaped)
                return 0;
            reap_slots(); /* a dead process may hold what is missing */
            reaped = 1;
        }
    }
    return 0;
}

static void format_size(uint64_t b, char *out, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    double v = (double)b;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(out, n, "%llu%s", (unsigned long long)v, unit[u]);
    else
        snprintf(out, n, "%.2f%s", v, unit[u]);
}

static void refusal(int dev, int e, uint64_t bytes, const char *what)
{
    char q[32], u[32], r[32], x[96] = "";
    volatile uint64_t used = 0, unseen = 0;
    GUARD(used = UINT64_MAX, {
        used = sum_used(e);
        unseen = mine >= 0 ? __atomic_load_n(&slots[mine].unmodelled[e], __ATOMIC_SEQ_CST) : 0;
    });
    format_size(geo.quota[e], q, sizeof q);
    format_size(used, u, sizeof u);
    format_size(bytes, r, sizeof r);
    if (unseen) {
        char s[32];
        format_size(unseen, s, sizeof s);
        snprintf(x, sizeof x, " (%s of it counted by the driver only)", s);
    }
    fg_warn_once(&warned_refusal,
                 "tenant %s: device %d (%s): quota %s, in use %s%s, requested %s (%s): refused with "
                 "CUDA_ERROR_OUT_OF_MEMORY as from a full GPU",
                 geo.name, dev, geo.uuid[e][0] ? geo.uuid[e] : "no UUID", q, u, x, r, what);
}

int fg_charge(int dev, uint64_t bytes, const char *what)
{
    if (!fg_tenant_ready())
        return !fg_tenant_refused();
    int e = fg_entry_of(dev);
    if (e < 0 || bytes == 0)
        return 1; /* a device the tenant does not limit */
    volatile int ok = 0;
    GUARD(return fg_refuse_on_error() ? 0 : 1, {
        backstop(dev, e, 0);
        ok = charge_entry(e, bytes);
        if (!ok) {
            backstop(dev, e, 1);
            ok = charge_entry(e, bytes);
        }
    });
    if (!ok) {
        /* Counted in the header, one atomic add: a process killed at any
         * instruction leaves the count either before or after it. */
        GUARD((void)0, __atomic_fetch_add(&hdr->devices[e].refused, 1, __ATOMIC_RELAXED));
        refusal(dev, e, bytes, what);
    }
    return ok;
}

void fg_force_charge(int dev, uint64_t bytes)
{
    int e = fg_entry_of(dev);
    if (e < 0 || mine < 0 || bytes == 0)
        return;
    GUARD(return, add_mine(e, bytes));
}

void fg_uncharge(int dev, uint64_t bytes)
{
    int e = fg_entry_of(dev);
    if (e < 0 || mine < 0 || bytes == 0)
        return;
    GUARD(return, sub_mine(e, bytes));
}

uint64_t fg_quota_of(int dev)
{
    int e = fg_entry_of(dev);
    return e < 0 ? 0 : geo.quota[e];
}

const char *fg_tenant_name(void) { return attached() ? geo.name : NULL; }

const char *fg_tenant_path(void) { return tenant_path; }

const char *fg_entry_uuid(int e) { return e >= 0 && attached() && (uint32_t)e < geo.ndev ? geo.uuid[e] : NULL; }

/* What a context on dev will take: as last measured there by a process of
 * the tenant (another process's word: only trusted up to the quota), else
 * the tenant's estimate. */
uint64_t fg_ctx_estimate(int dev)
{
    int e = fg_entry_of(dev);
    volatile uint64_t m = 0;
    if (e >= 0)
        GUARD(m = 0, m = __atomic_load_n(&hdr->devices[e].ctx_measured, __ATOMIC_RELAXED));
    if (m && (!geo.quota[e] || m <= geo.quota[e]))
        return m;
    return attached() ? geo.ctx_bytes : 0;
}

void fg_ctx_measured(int dev, uint64_t bytes)
{
    int e = fg_entry_of(dev);
    if (e >= 0)
        GUARD(return, __atomic_store_n(&hdr->devices[e].ctx_measured, bytes, __ATOMIC_RELAXED));
}

/* The quota of entry e and what the tenant's live processes hold there, or
 * 0 when e has no quota. */
uint64_t fg_entry_view(int e, uint64_t *used)
{
    if (e < 0 || !attached() || !geo.quota[e] || !open_lock_fd())
        return 0;
    volatile uint64_t u = 0;
    GUARD(u = geo.quota[e], {
        reap_slots(); /* report what live processes hold */
        u = sum_used(e);
    });
    *used = u;
    return geo.quota[e];
}

uint64_t fg_tenant_used(int dev)
{
    int e = fg_entry_of(dev);
    volatile uint64_t u = 0;
    if (e >= 0)
        GUARD(return UINT64_MAX, u = sum_used(e));
    return u;
}
