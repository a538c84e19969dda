/* The driver's checkpoint (flexgv suspend) copies a process's device memory
 * into one anonymous private mapping it asks the kernel to populate
 * (MAP_POPULATE), 4 KiB at a time: on an H100, 3.4 s of a 5.2 s checkpoint
 * of 10 GiB was that populate (docs/MEASUREMENTS.md, suspend). Such a
 * mapping, writable and of FG_HOSTCOPY_MIN or more, is made here on huge
 * pages where the kernel offers them (MADV_HUGEPAGE) and then populated
 * (MADV_POPULATE_WRITE): the same zeroed, resident memory, in 1.6 s. Every
 * other mmap goes straight to the kernel. Where either advice fails (an old
 * kernel, huge pages off) the mapping is still the one asked for, faulted
 * in as written if not populated. */
#define _GNU_SOURCE
#include "shim.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FG_HOSTCOPY_MIN (256ull << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static void *kernel_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
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
        madvise(p, len, MADV_POPULATE_WRITE);
        errno = e;
    }
    return p;
}

FG_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}
