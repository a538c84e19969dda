/* The compute policy's scheduler regions: mapping a GPU's region, joining
 * our tenant there with a slot of our own, keeping that slot visible and
 * the dead's bits cleared, sleeping on the region's futex, and surviving a
 * truncation of the region under us (SIGBUS). */
#include "compute.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct gpu gpus[FG_NDEV] = {[0 ... FG_NDEV - 1] = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1}};
struct gpu *mine_list[FG_NDEV];
int nmine;
static int enumerated;
static pthread_mutex_t enum_lock = PTHREAD_MUTEX_INITIALIZER;
static const size_t region_size = sizeof(struct fg_sched_header) + FG_SCHED_SLOTS * sizeof(struct fg_sched_slot);
static int warned_region, warned_broken, broken; /* broken: a region was truncated, to be said */
static struct sigaction old_bus;

/* A truncated region: private zeroes in its place, and scheduling off. */
static void on_bus(int sig, siginfo_t *si, void *uc)
{
    char *a = si->si_addr;
    for (int i = 0; i < FG_NDEV; i++) {
        char *h = (char *)__atomic_load_n(&gpus[i].hdr, __ATOMIC_ACQUIRE);
        if (h && a >= h && a < h + region_size) {
            mmap(h, region_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            __atomic_store_n(&gpus[i].state, G_OFF, __ATOMIC_RELEASE);
            __atomic_store_n(&broken, 1, __ATOMIC_RELEASE); /* said at the next launch */
            return;
        }
    }
    fg_sigbus_chain(&old_bus, sig, si, uc); /* not ours */
}

static void install_bus_handler(void)
{
    static int installed;
    if (__atomic_exchange_n(&installed, 1, __ATOMIC_ACQ_REL))
        return;
    struct sigaction sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &old_bus);
}

static void not_scheduled(const char *uuid, const char *why)
{
    fg_warn_once(&warned_region, "GPU %s: %s; its launches are not scheduled (no share, priority or cap applies there)",
                 uuid, why);
}

/* The tenant's policy applies to this GPU, but this process cannot take
 * part: refused, or let through unscheduled if so configured. */
static void cannot_join(struct gpu *g, const char *uuid, const char *why)
{
    if (fg_refuse_on_error()) {
        fg_warn_once(&warned_region, "GPU %s: %s; its launches, copies and memsets are refused "
                                     "(FLEXGV_ON_ERROR=passthrough runs them unscheduled)", uuid, why);
        g->state = G_REFUSED;
    } else {
        not_scheduled(uuid, why);
    }
}

/* Maps dev's region, finds our tenant there and claims a slot; g locked. */
static void attach(struct gpu *g, int dev)
{
    g->state = G_OFF;
    const char *uuid = fg_entry_uuid(fg_entry_of(dev)), *name = fg_tenant_name(), *tp = fg_tenant_path();
    if (!uuid || !uuid[0] || !name || !tp)
        return; /* a device the tenant does not hold */
    char path[4096];
    const char *slash = strrchr(tp, '/');
    int n = slash ? snprintf(path, sizeof path, "%.*s/gpu-%s", (int)(slash - tp), tp, uuid)
                  : snprintf(path, sizeof path, "gpu-%s", uuid);
    if (n < 0 || (size_t)n >= sizeof path)
        return cannot_join(g, uuid, "the scheduler's path is too long");
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return not_scheduled(uuid, "the tenant has no scheduler there (its policy does not apply to this GPU)");
    off_t size = lseek(fd, 0, SEEK_END);
    void *m = size >= (off_t)region_size ? mmap(NULL, region_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                         : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED)
        return cannot_join(g, uuid, "its scheduler file is damaged");
    struct fg_sched_header *h = m;
    if (h->magic != FG_SCHED_MAGIC || h->version != FG_SCHED_VERSION || strncmp(h->uuid, uuid, sizeof h->uuid) != 0) {
        munmap(m, region_size);
        return cannot_join(g, uuid, "its scheduler file is not of this flexgv version");
    }
    /* The lock descriptor is never mapped: a mapping would keep it, and
     * our slot, alive in forked children. */
    g->fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    uint32_t t = FG_SCHED_TENANTS;
    for (uint32_t i = 0; g->fd >= 0 && i < FG_SCHED_TENANTS; i++)
        if (strncmp(h->tenants[i].name, name, sizeof h->tenants[i].name) == 0 && fg_byte_held(g->fd, tenant_off(i))) {
            t = i;
            break;
        }
    /* A free slot that still has the turn (its process died holding it)
     * is taken last: from our lock on it until we clear that turn below, a
     * waiter taking the GPU from it would find its holder alive and charge
     * the tenant our slot names (the dead one's entry, perhaps reused, or
     * ours) the time the GPU sat unheld. No process takes the
     * turn of a slot it does not hold, so a slot seen without it stays so. */
    uint32_t s = FG_SCHED_SLOTS;
    for (int pass = 0; pass < 2 && s == FG_SCHED_SLOTS; pass++)
        for (uint32_t i = 0; t < FG_SCHED_TENANTS && i < FG_SCHED_SLOTS; i++)
            if ((pass || LOAD(&h->holder) != i + 1) && fg_lock_byte(g->fd, slot_off(i), F_WRLCK) == 0) {
                s = i;
                break;
            }
    if (s == FG_SCHED_SLOTS) {
        if (g->fd >= 0)
            close(g->fd);
        g->fd = -1;
        munmap(m, region_size);
        return cannot_join(g, uuid, t == FG_SCHED_TENANTS ? "the tenant is not a member of its scheduler"
                                                          : "its scheduler has no free process slot");
    }
    /* Our tenant's entry lives while we do, whoever started us. */
    fg_lock_byte(g->fd, tenant_off(t), F_RDLCK);
    struct fg_sched_slot *me = (struct fg_sched_slot *)(h + 1) + s;
    mask_clear(h->waiting, s); /* a dead process's, if any */
    /* A dead process's turn, left in the slot we took, is nobody's: from
     * it we would be charged the time the GPU sat unheld since. */
    uint32_t dead = s + 1;
    if (__atomic_compare_exchange_n(&h->holder, &dead, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        ADD(&h->gen, 1);
        syscall(SYS_futex, &h->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    mask_set(h->present, s);
    STORE(&me->tenant, t);
    STORE(&me->pid, (int32_t)getpid());
    STORE(&me->inflight, 0);
    /* Under MPS our kernels run beside other clients' (not in turns). */
    fg_real_cuDeviceGetAttribute attr = REAL(cuDeviceGetAttribute);
    int mps = 0;
    g->mps = attr && attr(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && mps == 1;
    STORE(&me->mps, (uint32_t)g->mps);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    STORE(&me->claimed_ns, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    STORE(&me->state, (uint32_t)FG_SCHED_SLOT_CLAIMED);
    g->slots = (struct fg_sched_slot *)(h + 1);
    g->me = me;
    g->t = &h->tenants[t];
    g->tenant = t;
    g->mine = s;
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        g->notme[w] = w == s / 64 ? ~(1ull << s % 64) : ~0ull;
    g->quantum = (uint64_t)(h->quantum_us ? h->quantum_us : 10000) * 1000;
    install_bus_handler();
    __atomic_store_n(&g->hdr, h, __ATOMIC_RELEASE);
    __atomic_store_n(&g->state, G_READY, __ATOMIC_RELEASE);
}

/* Async-signal-safe: a forked child has no slot and nothing in flight; it
 * claims its own slot at its first launch (the parent's mapping is left). */
void fg_compute_after_fork(void)
{
    nmine = 0;
    enumerated = 0;
    enum_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; i < FG_NDEV; i++) {
        struct gpu *g = &gpus[i];
        if (g->fd >= 0)
            close(g->fd); /* the parent's open file description stays the parent's */
        memset(g, 0, sizeof *g);
        g->lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
        g->fd = -1;
    }
}

/* Clears the bits of processes that died, and writes our own slot again:
 * the region is writable by every tenant's processes, and what they
 * scribble must not make us invisible for good. */
void sweep(struct gpu *g, uint64_t now)
{
    g->swept_at = now;
    STORE(&g->me->tenant, g->tenant);
    STORE(&g->me->mps, (uint32_t)g->mps);
    STORE(&g->me->state, (uint32_t)FG_SCHED_SLOT_CLAIMED);
    mask_set(g->hdr->present, g->mine);
    for (uint32_t w = 0; w < FG_SCHED_WORDS; w++)
        for (uint64_t p = others_word(g, g->hdr->present, w); p; p &= p - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(p);
            if (!fg_byte_held(g->fd, slot_off(i))) {
                mask_clear(g->hdr->present, i);
                mask_clear(g->hdr->waiting, i);
            }
        }
}

void wake_all(struct gpu *g)
{
    ADD(&g->hdr->gen, 1);
    syscall(SYS_futex, &g->hdr->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* sleep_on, woken by a change on another GPU's region (r's). */
void sleep_on_region(struct gpu *g, struct gpu *r, uint32_t gen, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    pthread_mutex_unlock(&g->lock);
    syscall(SYS_futex, &r->hdr->gen, FUTEX_WAIT, gen, &ts, NULL, 0);
    pthread_mutex_lock(&g->lock);
}

void sleep_on(struct gpu *g, uint32_t gen, uint64_t ns) { sleep_on_region(g, g, gen, ns); }

static void attach_once(struct gpu *g, int dev)
{
    pthread_mutex_lock(&g->lock);
    if (g->state == G_NONE) {
        attach(g, dev);
        if (g->state == G_READY || g->state == G_REFUSED) /* a refused one is never alone */
            mine_list[__atomic_load_n(&nmine, __ATOMIC_RELAXED)] = g, __atomic_fetch_add(&nmine, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g->lock);
}

/* Attaches every GPU the tenant is scheduled on, once. */
static void enumerate(void)
{
    if (__atomic_load_n(&enumerated, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&enum_lock);
    if (!enumerated) {
        int n = 0;
        fg_real_cuDeviceGetCount count = REAL(cuDeviceGetCount);
        if (count && count(&n) == CUDA_SUCCESS)
            for (int d = 0; d < n && d < FG_NDEV; d++)
                attach_once(&gpus[d], d);
        __atomic_store_n(&enumerated, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&enum_lock);
}

/* dev's state if it is scheduled. */
struct gpu *scheduled(int dev)
{
    enumerate();
    if (dev < 0 || dev >= FG_NDEV)
        return NULL;
    struct gpu *g = &gpus[dev];
    int st = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
    if (FG_UNLIKELY(st == G_NONE)) {
        attach_once(g, dev); /* a device that appeared since */
        st = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
    }
    if (FG_UNLIKELY(__atomic_load_n(&broken, __ATOMIC_RELAXED)))
        fg_warn_once(&warned_broken, "a GPU scheduler file was truncated by another process; that GPU is no longer "
                                     "scheduled");
    return st == G_READY ? g : NULL;
}
