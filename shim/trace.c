/* Per-process call counters in the run's shared trace region. Each process
 * owns one slot (claimed with an atomic increment, never reused), so a
 * crashed process's counts stay readable and nothing is ever locked; it
 * holds the slot's liveness lock (flexgv/liveness.h) while it lives. */
#include "shim.h"
#include "flexgv/liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int fg_tracing;
int fg_logging;
struct fg_api_stat *fg_stats;

static struct fg_trace_header *region;
static struct fg_trace_slot *my_slot;
static const char *region_path;
static int region_fd = -1;
static int warned;

extern char *program_invocation_short_name;

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct fg_trace_slot *slot_at(uint32_t i)
{
    return (struct fg_trace_slot *)((char *)region + sizeof *region + (size_t)i * region->slot_size);
}

static void claim_slot(void)
{
    uint32_t i = __atomic_fetch_add(&region->next_slot, 1, __ATOMIC_RELAXED);
    if (i == 0 || i >= region->nslots) {
        i = 0;
        __atomic_fetch_add(&region->overflowed, 1, __ATOMIC_RELAXED);
    }
    struct fg_trace_slot *s = slot_at(i);
    if (i != 0) {
        fg_lock_byte(region_fd, (off_t)((char *)s - (char *)region), F_WRLCK);
        s->pid = (int32_t)getpid();
        s->ppid = (int32_t)getppid();
        s->start_ns = realtime_ns();
        strncpy(s->comm, program_invocation_short_name, sizeof s->comm - 1);
        __atomic_store_n(&s->state, (uint32_t)FG_SLOT_RUNNING, __ATOMIC_RELEASE);
    }
    my_slot = s;
    fg_stats = (struct fg_api_stat *)(s + 1);
}

static void mark_exit(void)
{
    if (my_slot && my_slot != slot_at(0) && my_slot->pid == (int32_t)getpid()) {
        my_slot->end_ns = realtime_ns();
        __atomic_store_n(&my_slot->state, (uint32_t)FG_SLOT_EXITED, __ATOMIC_RELEASE);
    }
}

void fg_trace_attach(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        fg_warn_once(&warned, "tracing disabled: cannot open %s: %s", path, strerror(errno));
        return;
    }
    /* lseek, not fstat: fstat carries a glibc 2.33 symbol version. */
    off_t size = lseek(fd, 0, SEEK_END);
    struct fg_trace_header h;
    if (size < (off_t)sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        fg_warn_once(&warned, "tracing disabled: %s is not a trace region", path);
        close(fd);
        return;
    }
    if (h.magic != FG_TRACE_MAGIC || h.version != FG_TRACE_VERSION || h.napis != FG_NUM_APIS ||
        h.api_hash != FG_API_HASH || h.slot_size < sizeof(struct fg_trace_slot) + FG_NUM_APIS * sizeof(struct fg_api_stat) ||
        (size_t)size < sizeof h + (size_t)h.nslots * h.slot_size) {
        fg_warn_once(&warned, "tracing disabled: %s was made by another flexgv version", path);
        close(fd);
        return;
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fg_warn_once(&warned, "tracing disabled: cannot map %s: %s", path, strerror(errno));
        return;
    }
    region = m;
    region_path = path;
    /* Locks through a description of our own that is never mapped: a
     * mapping keeps its description open in forked children. */
    region_fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    claim_slot();
    atexit(mark_exit);
    fg_tracing = 1;
    memset(fg_divert, 1, sizeof fg_divert);
}

/* Async-signal-safe: the child locks its own slot through an open file
 * description of its own (the inherited one is its parent's). */
void fg_trace_after_fork(void)
{
    if (!region)
        return;
    close(region_fd);
    region_fd = open(region_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    claim_slot();
}

static const char *result_name(int id, int r, char *buf, size_t n)
{
    if (id < FG_NUM_CUDA_APIS) {
        switch (r) {
#define X(name, value) \
    case value:        \
        return #name;
#include "flexgv/cuda_results.def"
#undef X
        }
        snprintf(buf, n, "CUresult(%d)", r);
    } else if (r == 0) {
        return "NVML_SUCCESS";
    } else {
        snprintf(buf, n, "nvmlReturn(%d)", r);
    }
    return buf;
}

void fg_log(int id, int result, uint64_t dt_ns, const char *fmt, ...)
{
    char line[1024], rbuf[32];
    size_t cap = sizeof line - 96;
    int n = snprintf(line, cap, "[flexgv] pid %d %s(", (int)getpid(), fg_api_names[id]);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, cap - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)cap)
        n = (int)cap - 1;
    n += snprintf(line + n, sizeof line - (size_t)n, ") = %s %.1fus\n", result_name(id, result, rbuf, sizeof rbuf),
                  (double)dt_ns / 1000.0);
    /* One write per line keeps lines from different threads whole. */
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
}
