/* The driver's checkpoint (flexgv suspend) copies a process's device memory
 * into one anonymous private mapping it asks the kernel to populate
 * (MAP_POPULATE), 4 KiB at a time: on an H100, 3.4 s of a 5.2 s checkpoint
 * of 10 GiB was that populate (docs/MEASUREMENTS.md, suspend). Such a
 * mapping, writable and of FG_HOSTCOPY_MIN or more, is made here on huge
 * pages where the kernel offers them (MADV_HUGEPAGE) and then populated
 * (MADV_POPULATE_WRITE) by up to FG_HOSTCOPY_THREADS threads, each zeroing
 * its own part: the same zeroed, resident memory, sooner. Every other mmap
 * goes straight to the kernel. Where either advice fails (an old kernel,
 * huge pages off) the mapping is still the one asked for, faulted in as
 * written if not populated. */
#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FG_HOSTCOPY_MIN (256ull << 20)
#define FG_HOSTCOPY_PART (128ull << 20) /* the least a thread populates */
#define FG_HOSTCOPY_THREADS 8
#define FG_HUGE_PAGE (2ull << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static void *kernel_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

struct part {
    char *p;
    size_t len;
};

static void *populate(void *arg)
{
    struct part *pt = arg;
    madvise(pt->p, pt->len, MADV_POPULATE_WRITE);
    return NULL;
}

/* One part per CPU this process may run on, at most FG_HOSTCOPY_THREADS,
 * none under FG_HOSTCOPY_PART; the caller populates the first. The threads
 * come from whatever libc the program runs on (looked up, so that the shim
 * keeps loading where pthread_create is versioned otherwise), block every
 * signal, and are joined before the mapping is handed back. */
static void populate_all(char *p, size_t len)
{
    typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    typedef int (*join_fn)(pthread_t, void **);
    cpu_set_t cpus;
    long n = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    if (n > FG_HOSTCOPY_THREADS)
        n = FG_HOSTCOPY_THREADS;
    if (n > (long)(len / FG_HOSTCOPY_PART))
        n = (long)(len / FG_HOSTCOPY_PART);
    void *(*lookup)(void *, const char *) = __atomic_load_n(&fg_real_dlsym, __ATOMIC_ACQUIRE);
    create_fn create = n > 1 && lookup ? (create_fn)lookup(RTLD_DEFAULT, "pthread_create") : NULL;
    join_fn join = create ? (join_fn)lookup(RTLD_DEFAULT, "pthread_join") : NULL;
    if (!join)
        n = 1;
    size_t step = (len / (size_t)n + FG_HUGE_PAGE - 1) & ~(FG_HUGE_PAGE - 1);
    struct part parts[FG_HOSTCOPY_THREADS];
    pthread_t tids[FG_HOSTCOPY_THREADS];
    int started[FG_HOSTCOPY_THREADS] = {0};
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    for (long i = 0; i < n; i++) {
        size_t at = (size_t)i * step;
        parts[i] = (struct part){p + at, at >= len ? 0 : len - at < step ? len - at : step};
        if (i > 0 && parts[i].len)
            started[i] = create(&tids[i], NULL, populate, &parts[i]) == 0;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    for (long i = 0; i < n; i++)
        if (i == 0 || (!started[i] && parts[i].len))
            populate(&parts[i]);
    for (long i = 1; i < n; i++)
        if (started[i])
            join(tids[i], NULL);
}

FG_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    int asked = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
    if (len < FG_HOSTCOPY_MIN || (flags & ~MAP_NORESERVE) != asked || prot != (PROT_READ | PROT_WRITE))
        return kernel_mmap(addr, len, prot, flags, fd, off);
    void *p = kernel_mmap(addr, len, prot, flags & ~MAP_POPULATE, fd, off);
    if (p != MAP_FAILED) {
        int e = errno; /* the advice's failures are not the caller's */
        madvise(p, len, MADV_HUGEPAGE);
        populate_all(p, len);
        errno = e;
    }
    return p;
}

FG_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}
