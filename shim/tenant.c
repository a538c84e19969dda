/* A tenant's shared usage: one slot per process, usage per device in each
 * slot, the tenant's usage being the sum over live slots. Charging adds to
 * our own slot first and then checks the sum (all sequentially consistent),
 * so of two allocations racing for the last bytes at least one sees the
 * other and neither can slip under the quota together. A process killed at
 * any instruction leaves only its own slot behind, which the next process
 * that needs room reaps; nothing is ever locked. */
#include "shim.h"
#include "flexgv/tenant_layout_gen.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int fg_quota_on;
int fg_quota_refused;
static struct fg_tenant_header *tenant;
static struct fg_tenant_slot *slots, *mine;
static int warned;

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks. */
static uint64_t start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return 0;
    unsigned long long v = 0;
    /* After ")": state (3) ... starttime (22): skip 19 fields. */
    for (int field = 3; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p)
        sscanf(p + 1, "%llu", &v);
    return v;
}

static int slot_alive(struct fg_tenant_slot *s, int32_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    uint64_t st = __atomic_load_n(&s->start_ticks, __ATOMIC_ACQUIRE);
    return st == 0 || start_ticks(pid) == st; /* a reused pid is not ours */
}

/* Frees the slots of dead processes: their memory died with them. */
static void reap(void)
{
    uint32_t n = __atomic_load_n(&tenant->slot_hwm, __ATOMIC_SEQ_CST);
    for (uint32_t i = 0; i < n && i < tenant->nslots; i++) {
        struct fg_tenant_slot *s = &slots[i];
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
        if (pid <= 0 || s == mine || slot_alive(s, pid))
            continue;
        if (!__atomic_compare_exchange_n(&s->pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            continue;
        for (int d = 0; d < FG_NDEV; d++)
            __atomic_store_n(&s->used[d], 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->pid, 0, __ATOMIC_RELEASE);
    }
}

static struct fg_tenant_slot *claim(void)
{
    int32_t me = (int32_t)getpid();
    uint64_t ticks = start_ticks(me);
    reap(); /* what dead processes held is nobody's now */
    /* A slot with our pid and start time is this process before an exec:
     * the exec freed everything that image held on the GPU. */
    uint32_t n = __atomic_load_n(&tenant->slot_hwm, __ATOMIC_SEQ_CST);
    for (uint32_t i = 0; i < n && i < tenant->nslots; i++) {
        int32_t pid = me;
        if (__atomic_load_n(&slots[i].start_ticks, __ATOMIC_ACQUIRE) == ticks &&
            __atomic_compare_exchange_n(&slots[i].pid, &pid, -1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            for (int d = 0; d < FG_NDEV; d++)
                __atomic_store_n(&slots[i].used[d], 0, __ATOMIC_SEQ_CST);
            __atomic_store_n(&slots[i].pid, 0, __ATOMIC_RELEASE);
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < tenant->nslots; i++) {
            int32_t zero = 0;
            if (__atomic_compare_exchange_n(&slots[i].pid, &zero, me, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
                for (int d = 0; d < FG_NDEV; d++)
                    __atomic_store_n(&slots[i].used[d], 0, __ATOMIC_SEQ_CST);
                __atomic_store_n(&slots[i].start_ticks, ticks, __ATOMIC_RELEASE);
                /* Sums need not look past the highest slot ever claimed. */
                uint32_t hwm = __atomic_load_n(&tenant->slot_hwm, __ATOMIC_SEQ_CST);
                while (hwm < i + 1 && !__atomic_compare_exchange_n(&tenant->slot_hwm, &hwm, i + 1, 1, __ATOMIC_SEQ_CST,
                                                                    __ATOMIC_SEQ_CST))
                    ;
                return &slots[i];
            }
        }
        reap();
    }
    return NULL;
}

static void release_mine(void)
{
    if (!mine || mine->pid != (int32_t)getpid())
        return;
    /* The driver frees everything a process holds when it exits. */
    for (int d = 0; d < FG_NDEV; d++)
        __atomic_store_n(&mine->used[d], 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&mine->pid, 0, __ATOMIC_RELEASE);
    mine = NULL;
}

static int refuse_on_error(void)
{
    const char *v = getenv("FLEXGV_ON_ERROR");
    return !v || strcmp(v, "passthrough") != 0;
}

static void attach_failed(const char *fmt, const char *path, const char *why)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, path, why);
    int refuse = refuse_on_error();
    fg_warn_once(&warned, "%s; %s", msg,
                 refuse ? "CUDA is refused (cuInit fails; FLEXGV_ON_ERROR=passthrough runs without the quota)"
                        : "running without the quota (FLEXGV_ON_ERROR=passthrough)");
    if (refuse) {
        fg_quota_refused = 1;
        fg_divert[FG_API_cuInit] = 1;
    }
}

void fg_tenant_attach(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        attach_failed("cannot open tenant %s: %s", path, strerror(errno));
        return;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    struct fg_tenant_header h;
    if (size < (off_t)sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != FG_TENANT_MAGIC ||
        h.version != FG_TENANT_VERSION || h.ndevices > FG_NDEV ||
        (size_t)size < sizeof h + (size_t)h.nslots * sizeof(struct fg_tenant_slot)) {
        close(fd);
        attach_failed("%s is not a tenant of this flexgv version%s", path, "");
        return;
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        attach_failed("cannot map tenant %s: %s", path, strerror(errno));
        return;
    }
    tenant = m;
    slots = (struct fg_tenant_slot *)(tenant + 1);
    mine = claim();
    if (!mine) {
        attach_failed("tenant %s has no free process slot%s", path, "");
        return;
    }
    atexit(release_mine);
    fg_quota_on = 1;
    fg_memquota_divert();
}

void fg_tenant_after_fork(void)
{
    /* The child holds no device memory; it gets a slot of its own. */
    if (fg_quota_on)
        mine = claim();
}

uint64_t fg_quota_of(int dev)
{
    if (!fg_quota_on || dev < 0 || (uint32_t)dev >= tenant->ndevices)
        return 0;
    return tenant->quota[dev];
}

uint64_t fg_ctx_estimate(void) { return fg_quota_on ? tenant->ctx_bytes : 0; }

void fg_tenant_reap(void)
{
    if (fg_quota_on)
        reap();
}

uint64_t fg_tenant_used(int dev)
{
    uint64_t sum = 0;
    if (!fg_quota_on || dev < 0 || dev >= FG_NDEV)
        return 0;
    uint32_t n = __atomic_load_n(&tenant->slot_hwm, __ATOMIC_SEQ_CST);
    for (uint32_t i = 0; i < n && i < tenant->nslots; i++)
        if (__atomic_load_n(&slots[i].pid, __ATOMIC_SEQ_CST) > 0)
            sum += __atomic_load_n(&slots[i].used[dev], __ATOMIC_SEQ_CST);
    return sum;
}

int fg_charge(int dev, uint64_t bytes)
{
    if (!fg_quota_on || !mine || dev < 0 || dev >= FG_NDEV || bytes == 0)
        return 1;
    uint64_t quota = fg_quota_of(dev);
    if (quota == 0) {
        __atomic_fetch_add(&mine->used[dev], bytes, __ATOMIC_SEQ_CST);
        return 1;
    }
    int reaped = 0;
    for (int attempt = 0; attempt < 16; attempt++) {
        __atomic_fetch_add(&mine->used[dev], bytes, __ATOMIC_SEQ_CST);
        if (fg_tenant_used(dev) <= quota)
            return 1;
        fg_uncharge(dev, bytes);
        /* Over: either there is no room, or a racer's charge was counted
         * while it, too, was backing out. Retry only in the second case. */
        if (fg_tenant_used(dev) + bytes > quota) {
            if (reaped)
                return 0;
            reap(); /* a dead process may hold what is missing */
            reaped = 1;
        }
    }
    return 0;
}

void fg_force_charge(int dev, uint64_t bytes)
{
    if (fg_quota_on && mine && dev >= 0 && dev < FG_NDEV)
        __atomic_fetch_add(&mine->used[dev], bytes, __ATOMIC_SEQ_CST);
}

void fg_uncharge(int dev, uint64_t bytes)
{
    if (!fg_quota_on || !mine || dev < 0 || dev >= FG_NDEV)
        return;
    /* Never below zero, whatever a caller's bookkeeping says. */
    uint64_t cur = __atomic_load_n(&mine->used[dev], __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(&mine->used[dev], &cur, cur > bytes ? cur - bytes : 0, 1, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
        ;
}
