/* Configuration and the state shared by every process using the simulated
 * GPU. The shared file holds counters updated with atomics; nothing shared
 * is ever waited for: a process that dies is found by the kernel releasing
 * its slot's lock, and what it held is returned. */
#include "sim.h"
#include "flexgv/liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SIM_MAGIC 0x4d4953564758464cull /* "LFXGVSIM" */

struct sim_shared *sim;
static int my_proc = -1;

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sim_sleep_until(uint64_t t_ns)
{
    for (;;) {
        uint64_t now = sim_now_ns();
        if (now >= t_ns)
            return;
        uint64_t d = t_ns - now;
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
                {"FLEXGV_SIM_KERNEL_US", "kernel_us"}, {"FLEXGV_SIM_DRIVER_VERSION", "driver_version"}};
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

/* Returns a dead process's memory to its devices (slot lock held). */
static void reap_slot(struct sim_proc_state *p)
{
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        uint64_t b = __atomic_exchange_n(&p->used_bytes[d], 0, __ATOMIC_ACQ_REL);
        if (b)
            __atomic_fetch_sub(&sim->dev[d].used_bytes, b, __ATOMIC_ACQ_REL);
    }
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
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
            __atomic_store_n(&p->pid, me, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&slot_mu);
            return i;
        }
    pthread_mutex_unlock(&slot_mu);
    return -1;
}

/* The child shares the parent's open file description, hence its lock:
 * it takes a description, and a slot, of its own. It holds no device
 * memory yet. slot_mu only orders this process's threads on the parent's
 * description, so the child starts it afresh (a parent thread may have
 * held it at the fork). */
static void after_fork_child(void)
{
    pthread_mutex_init(&slot_mu, NULL);
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
    struct sim_shared *init = calloc(1, sizeof *init);
    int ok = init != NULL;
    if (ok) {
        init->magic = SIM_MAGIC;
        init->version = SIM_STATE_VERSION;
        init->cfg = *cfg;
        ok = pwrite(t, init, sizeof *init, 0) == (ssize_t)sizeof *init;
        free(init);
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
    else
        snprintf(state_path, sizeof state_path, "/tmp/flexgv-sim-%d-v" SIM_STATE_VERSION_TEXT ".state", (int)getuid());
    int fd = open_state(state_path, &cfg);
    struct sim_shared *s = fd >= 0 ? map_state(fd) : NULL;
    if (s)
        lock_fd = open(state_path, O_RDWR | O_CLOEXEC);
    if (lock_fd < 0) {
        if (s)
            munmap(s, sizeof *s);
        fprintf(stderr,
                "flexgv-sim: cannot use state file %s (not writable, or made by another version; set "
                "FLEXGV_SIM_STATE to a new path)\n",
                state_path);
        goto out;
    }
    if (memcmp(&s->cfg, &cfg, sizeof cfg) != 0)
        fprintf(stderr, "flexgv-sim: %s was created with another configuration; using the file's\n", state_path);
    sim = s;
    my_proc = claim_proc_slot();
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
    rc = 0;
out:
    pthread_mutex_unlock(&attach_mu);
    return rc;
}

int sim_mem_reserve(int dev, uint64_t bytes)
{
    struct sim_device_state *d = &sim->dev[dev];
    for (int pass = 0; pass < 2; pass++) {
        uint64_t used = __atomic_load_n(&d->used_bytes, __ATOMIC_ACQUIRE);
        while (used <= sim->cfg.mem_bytes && bytes <= sim->cfg.mem_bytes - used) {
            if (__atomic_compare_exchange_n(&d->used_bytes, &used, used + bytes, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                if (my_proc >= 0)
                    __atomic_fetch_add(&sim->procs[my_proc].used_bytes[dev], bytes, __ATOMIC_ACQ_REL);
                return 0;
            }
        }
        sim_reap_dead(); /* a dead process's memory may be what is missing */
    }
    return -1;
}

void sim_mem_release(int dev, uint64_t bytes)
{
    if (my_proc >= 0)
        __atomic_fetch_sub(&sim->procs[my_proc].used_bytes[dev], bytes, __ATOMIC_ACQ_REL);
    __atomic_fetch_sub(&sim->dev[dev].used_bytes, bytes, __ATOMIC_ACQ_REL);
}

void sim_busy(int dev, uint64_t start, uint64_t end)
{
    struct sim_device_state *d = &sim->dev[dev];
    __atomic_fetch_add(&d->busy_total_ns, end - start, __ATOMIC_RELAXED);
    uint64_t horizon = (sim_now_ns() / SIM_BUCKET_NS + SIM_BUCKETS - SIM_UTIL_BUCKETS) * SIM_BUCKET_NS;
    if (end > horizon)
        end = horizon; /* work queued over a minute ahead is not credited */
    for (uint64_t t = start; t < end;) {
        uint64_t epoch = t / SIM_BUCKET_NS;
        uint64_t stop = (epoch + 1) * SIM_BUCKET_NS;
        if (stop > end)
            stop = end;
        struct sim_bucket *b = &d->buckets[epoch % SIM_BUCKETS];
        uint64_t old = __atomic_load_n(&b->epoch, __ATOMIC_ACQUIRE);
        if (old != epoch && __atomic_compare_exchange_n(&b->epoch, &old, epoch, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            __atomic_store_n(&b->busy_ns, 0, __ATOMIC_RELEASE);
        __atomic_fetch_add(&b->busy_ns, stop - t, __ATOMIC_RELAXED);
        t = stop;
    }
}

/* Percent of the last second the device spent running kernels. */
unsigned sim_utilization(int dev)
{
    struct sim_device_state *d = &sim->dev[dev];
    uint64_t now = sim_now_ns(), cur = now / SIM_BUCKET_NS, busy = 0;
    uint64_t window = SIM_UTIL_BUCKETS * SIM_BUCKET_NS;
    for (uint64_t e = cur - SIM_UTIL_BUCKETS + 1; e <= cur; e++) {
        struct sim_bucket *b = &d->buckets[e % SIM_BUCKETS];
        if (__atomic_load_n(&b->epoch, __ATOMIC_ACQUIRE) == e)
            busy += __atomic_load_n(&b->busy_ns, __ATOMIC_RELAXED);
    }
    /* Work queued past now, in the current bucket, is not busy time yet. */
    uint64_t until = __atomic_load_n(&d->busy_until_ns, __ATOMIC_ACQUIRE);
    uint64_t bucket_end = (cur + 1) * SIM_BUCKET_NS;
    if (until > now) {
        uint64_t ahead = (until < bucket_end ? until : bucket_end) - now;
        busy = busy > ahead ? busy - ahead : 0;
    }
    uint64_t pct = busy * 100 / window;
    return pct > 100 ? 100 : (unsigned)pct;
}

/* Kernels of every process share one execution engine per device: a kernel
 * starts when both its stream and the device are free. Returns its end. */
uint64_t sim_enqueue(int dev, uint64_t not_before, uint64_t duration)
{
    struct sim_device_state *d = &sim->dev[dev];
    uint64_t now = sim_now_ns();
    if (not_before < now)
        not_before = now;
    uint64_t until = __atomic_load_n(&d->busy_until_ns, __ATOMIC_ACQUIRE), start;
    do {
        start = until > not_before ? until : not_before;
    } while (!__atomic_compare_exchange_n(&d->busy_until_ns, &until, start + duration, 1, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    if (duration)
        sim_busy(dev, start, start + duration);
    return start + duration;
}

/* The device's UUID; NVML reports the same one in text form. */
void sim_uuid(int dev, CUuuid *uuid)
{
    static const unsigned char base[16] = {0xf1, 0xe9, 0x60, 0x00, 0x5e, 0x1d, 0x40, 0x00,
                                           0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (char)dev;
}
