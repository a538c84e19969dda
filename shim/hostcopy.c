/* The driver's checkpoint (flexgv suspend) copies a process's device memory
 * into one anonymous private mapping it asks the kernel to populate
 * (MAP_POPULATE), 4 KiB at a time: on an H100, 3.4 s of a 5.2 s checkpoint
 * of 10 GiB was that populate (docs/MEASUREMENTS.md, suspend). Such a
 * mapping, writable and of FG_HOSTCOPY_MIN or more, is made here on huge
 * pages where the kernel offers them (MADV_HUGEPAGE) and handed back at
 * once, populated (MADV_POPULATE_WRITE) meanwhile by up to
 * FG_HOSTCOPY_THREADS threads that take its parts from the start, ahead of
 * the copy that fills it in that order: a page the copy reaches first it
 * faults in itself. The same zeroed memory, sooner. Every other mmap goes
 * straight to the kernel. Where either advice fails (an old kernel, huge
 * pages off) the mapping is still the one asked for, faulted in as written
 * if not populated.
 *
 * The threads must never touch what is mapped at those addresses next: an
 * munmap, mremap or MAP_FIXED mmap over a mapping still being populated
 * stops its threads and waits for them (one part's populate at most)
 * first. Where no thread can be started, or FG_HOSTCOPY_FILLS mappings are
 * being populated already, the caller populates it before it returns. */
#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FG_HOSTCOPY_MIN (256ull << 20)
#define FG_HOSTCOPY_PART (32ull << 20) /* what a thread populates at a time */
#define FG_HOSTCOPY_THREADS 8
#define FG_HOSTCOPY_FILLS 4
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static void *kernel_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* A mapping being populated: its threads take parts at next until len
 * or stop; the last one out frees the slot (p NULL). */
static struct fill {
    char *p;     /* atomic: NULL, a free slot */
    size_t len;
    size_t next; /* atomic */
    int threads; /* atomic */
    int stop;    /* atomic */
} fills[FG_HOSTCOPY_FILLS];
static int filling; /* atomic: slots taken, for munmap's fast path */

#define CLAIMED ((char *)1) /* a slot being set up */

static void leave(struct fill *f)
{
    if (__atomic_sub_fetch(&f->threads, 1, __ATOMIC_ACQ_REL) == 0) {
        __atomic_store_n(&f->p, NULL, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&filling, 1, __ATOMIC_RELEASE);
    }
}

static void *populate(void *arg)
{
    struct fill *f = arg;
    for (;;) {
        size_t at = __atomic_fetch_add(&f->next, FG_HOSTCOPY_PART, __ATOMIC_RELAXED);
        if (at >= f->len || __atomic_load_n(&f->stop, __ATOMIC_ACQUIRE))
            break;
        madvise(f->p + at, f->len - at < FG_HOSTCOPY_PART ? f->len - at : FG_HOSTCOPY_PART, MADV_POPULATE_WRITE);
    }
    leave(f);
    return NULL;
}

/* Threads for a mapping: one per CPU this process may run on, at most
 * FG_HOSTCOPY_THREADS. They come from whatever libc the program runs on
 * (looked up, so that the shim keeps loading where pthread_create is
 * versioned otherwise), detached, with every signal blocked. 0 when none
 * started: the caller populates it. */
static int populate_behind(char *p, size_t len)
{
    typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    typedef int (*detach_fn)(pthread_t);
    void *(*lookup)(void *, const char *) = __atomic_load_n(&fg_real_dlsym, __ATOMIC_ACQUIRE);
    create_fn create = lookup ? (create_fn)lookup(RTLD_DEFAULT, "pthread_create") : NULL;
    detach_fn detach = create ? (detach_fn)lookup(RTLD_DEFAULT, "pthread_detach") : NULL;
    if (!detach)
        return 0;
    struct fill *f = NULL;
    for (int i = 0; i < FG_HOSTCOPY_FILLS && !f; i++) {
        char *none = NULL;
        if (__atomic_compare_exchange_n(&fills[i].p, &none, CLAIMED, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            f = &fills[i];
    }
    if (!f)
        return 0;
    f->len = len;
    __atomic_store_n(&f->next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&f->stop, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&f->threads, 1, __ATOMIC_RELAXED); /* ours, until all are started */
    __atomic_add_fetch(&filling, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&f->p, p, __ATOMIC_RELEASE);
    cpu_set_t cpus;
    long n = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    if (n > FG_HOSTCOPY_THREADS)
        n = FG_HOSTCOPY_THREADS;
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    int started = 0;
    for (long i = 0; i < n; i++) {
        pthread_t t;
        __atomic_add_fetch(&f->threads, 1, __ATOMIC_ACQ_REL);
        if (create(&t, NULL, populate, f) != 0) {
            __atomic_sub_fetch(&f->threads, 1, __ATOMIC_ACQ_REL);
            break;
        }
        detach(t);
        started++;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (!started) /* none will populate it: the caller does */
        __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    leave(f);
    return started;
}

/* Stops the threads populating what [addr, addr + len) overlaps, and waits
 * for them. */
static void stop_fills(const void *addr, size_t len)
{
    if (!__atomic_load_n(&filling, __ATOMIC_ACQUIRE))
        return;
    const char *a = addr;
    for (int i = 0; i < FG_HOSTCOPY_FILLS; i++) {
        struct fill *f = &fills[i];
        char *p = __atomic_load_n(&f->p, __ATOMIC_ACQUIRE);
        if (!p || p == CLAIMED || a >= p + f->len || a + len <= p)
            continue;
        __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
        struct timespec pause = {0, 100000};
        while (__atomic_load_n(&f->p, __ATOMIC_ACQUIRE) == p)
            nanosleep(&pause, NULL);
    }
}

static void after_fork_child(void)
{
    /* The threads are the parent's: none populates here. */
    for (int i = 0; i < FG_HOSTCOPY_FILLS; i++)
        fills[i].p = NULL;
    filling = 0;
}

__attribute__((constructor)) static void hostcopy_init(void) { pthread_atfork(NULL, NULL, after_fork_child); }

FG_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (flags & MAP_FIXED)
        stop_fills(addr, len);
    int asked = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
    if (len < FG_HOSTCOPY_MIN || (flags & ~MAP_NORESERVE) != asked || prot != (PROT_READ | PROT_WRITE))
        return kernel_mmap(addr, len, prot, flags, fd, off);
    void *p = kernel_mmap(addr, len, prot, flags & ~MAP_POPULATE, fd, off);
    if (p != MAP_FAILED) {
        int e = errno; /* the advice's failures are not the caller's */
        madvise(p, len, MADV_HUGEPAGE);
        if (!populate_behind(p, len))
            madvise(p, len, MADV_POPULATE_WRITE);
        errno = e;
    }
    return p;
}

FG_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}

FG_EXPORT int munmap(void *addr, size_t len)
{
    stop_fills(addr, len);
    return (int)syscall(SYS_munmap, addr, len);
}

FG_EXPORT void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    void *to = flags & MREMAP_FIXED ? va_arg(ap, void *) : NULL;
    va_end(ap);
    stop_fills(old, old_len);
    if (flags & MREMAP_FIXED)
        stop_fills(to, len);
    return (void *)syscall(SYS_mremap, old, old_len, len, flags, to);
}
