/* Small pinned host memory that the client's kernels use as device memory
 * (mapped, "zero-copy"): pages here, registered with the driver so that the
 * GPU reaches them, and the client maps its own pages at the same address
 * (remote/client/mirror.c). Managed memory the connection allocated is kept
 * alike the same way. The client's writes arrive as fgrHostWrite, its
 * reads as fgrHostSums then fgrHostReadMany; all are refused outside such an allocation, so a
 * client cannot make the executor touch device memory or its own. An
 * allocation is forgotten with its context (destroyed, or a primary one
 * reset or released for the last time), as the driver frees it then.
 * Managed memory is read and written here by the CPU while kernels may run:
 * the client asks for it only of a device with concurrent managed access.
 * Larger pinned memory the client made alone comes once a call names it as
 * a device address (promoted): mapped here at the client's address, never
 * over anything this process holds (MAP_FIXED_NOREPLACE), then pinned. */
#include "executor.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static CUresult (*pointer_attr)(void *, CUpointer_attribute, CUdeviceptr);
static CUresult (*host_register)(void *, size_t, unsigned int);
static CUresult (*host_unregister)(void *);

static struct mapped {
    uint64_t base, end;
    uint64_t ctx; /* the context it was made in: the driver frees it with it */
    uint64_t page, len; /* its pages, mapped here */
    int mapped; /* made by fgrHostMapped (else promoted: fgrHostMapAt) */
} *maps;
static size_t nmaps, capmaps, total, promoted;

static struct mapped *mapped_holding(uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < nmaps; i++)
        if (p >= maps[i].base && p <= maps[i].end && n <= maps[i].end - p)
            return &maps[i];
    return NULL;
}

/* Whether [p, p+n) lies in managed memory this connection allocated. */
static int managed_holding(uint64_t p, uint64_t n)
{
    unsigned managed = 0;
    return pointer_attr && n && fgr_mem_in(p, n) &&
           pointer_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)p) == CUDA_SUCCESS && managed;
}

static int holding(uint64_t p, uint64_t n) { return mapped_holding(p, n) || managed_holding(p, n); }

static int room(void)
{
    if (nmaps == capmaps) {
        size_t n = capmaps ? 2 * capmaps : 16;
        struct mapped *m = realloc(maps, n * sizeof *m);
        if (!m)
            return 0;
        maps = m;
        capmaps = n;
    }
    return 1;
}

static uint64_t pinned_most = UINT64_MAX; /* UINT64_MAX: not given yet */

void fgr_pinned_max(const char *bytes)
{
    char *end;
    unsigned long long v = strtoull(bytes, &end, 10);
    pinned_most = *bytes && !*end && v < UINT64_MAX ? (uint64_t)v : 0;
}

uint64_t fgr_pinned_most(void)
{
    if (pinned_most == UINT64_MAX) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        pinned_most = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 : 0;
    }
    return pinned_most;
}

static CUresult map_at(CUdeviceptr at, size_t bytes, CUdeviceptr *dptr);

/* Mapped pinned memory: pages of this executor's, registered, at an
 * address of its choosing in a region (88 to 96 TiB) that neither the
 * driver nor the libraries use, rather than the driver's cuMemHostAlloc,
 * which places it among its own mappings: a new executor of a moved
 * connection places it at the same address (the client holds it), which
 * there would be taken. */
static CUresult mapped_alloc(CUdeviceptr *dptr, size_t bytes)
{
    if (!dptr || bytes == 0 || bytes > FGR_MAPPED_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (total + bytes > FGR_MAPPED_TOTAL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t seed = (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32) ^ total;
    CUresult r = CUDA_ERROR_ALREADY_MAPPED;
    for (int i = 0; i < 8 && r == CUDA_ERROR_ALREADY_MAPPED; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        r = map_at((88ull << 40) + (seed >> 33) % (1u << 22) * (2u << 20), bytes, dptr);
    }
    if (r != CUDA_SUCCESS)
        return r;
    maps[nmaps - 1].mapped = 1; /* counted as mapped memory, not promoted */
    promoted -= bytes;
    total += bytes;
    /* A new executor of a moved connection maps it there again. */
    uint8_t args[17];
    for (int i = 0; i < 8; i++) {
        args[i] = (uint8_t)(*dptr >> (8 * i));
        args[8 + i] = (uint8_t)((uint64_t)bytes >> (8 * i));
    }
    args[16] = 1;
    fgr_journal_as(FGR_OP_fgrHostMapAt, args, sizeof args);
    return CUDA_SUCCESS;
}

/* The pages of [at, at+bytes), zeroed, mapped and pinned here at the
 * client's address. A page another promoted allocation holds is taken too:
 * the client keeps its own allocations a page apart. */
static CUresult map_at(CUdeviceptr at, size_t bytes, CUdeviceptr *dptr)
{
    uint64_t psz = (uint64_t)sysconf(_SC_PAGESIZE), first = at & ~(psz - 1), end;
    if (!dptr || !at || !bytes || bytes > FGR_PROMOTED_TOTAL || at + bytes < at ||
        (end = (at + bytes + psz - 1) & ~(psz - 1)) < at)
        return CUDA_ERROR_INVALID_VALUE;
    if (promoted + bytes > FGR_PROMOTED_TOTAL || !room())
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = mmap((void *)(uintptr_t)first, end - first, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED)
        return errno == EEXIST ? CUDA_ERROR_ALREADY_MAPPED
               : errno == ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY
                                 : CUDA_ERROR_INVALID_VALUE;
    if ((uintptr_t)m != first) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        munmap(m, end - first);
        return CUDA_ERROR_ALREADY_MAPPED;
    }
    /* Named by a launch, perhaps captured: not the program's unsafe call. */
    CUstreamCaptureMode mode = fgr_relax();
    CUresult r = host_register(m, end - first, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
    fgr_unrelax(mode);
    if (r != CUDA_SUCCESS) {
        munmap(m, end - first);
        return r;
    }
    maps[nmaps++] = (struct mapped){at, at + bytes, fgr_ctx, first, end - first, 0};
    promoted += bytes;
    *dptr = at;
    return CUDA_SUCCESS;
}

/* Entry i goes (gone: with its context). */
static CUresult unmap(size_t i, int gone)
{
    struct mapped *m = &maps[i];
    CUresult r = host_unregister((void *)(uintptr_t)m->page);
    munmap((void *)(uintptr_t)m->page, m->len); /* the pages go whatever the driver answers */
    if (m->mapped)
        total -= m->end - m->base;
    else
        promoted -= m->end - m->base;
    maps[i] = maps[--nmaps];
    return gone ? CUDA_SUCCESS : r;
}

static CUresult mapped_free(CUdeviceptr dptr)
{
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].base == dptr)
            return unmap(i, 0);
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult mapped_write(CUdeviceptr dst, const void *src, size_t bytes)
{
    if (!src || !holding(dst, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

/* The client's addresses, where the memory is here (managed memory a move
 * placed elsewhere: move.c): the request's own copy, changed in place. */
static void moved_n(CUdeviceptr *p, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (CUdeviceptr)fgr_moved((uint64_t)p[i]);
}

/* Several allocations' bytes, one after another (one round trip however
 * many the client has). */
static CUresult mapped_read(const CUdeviceptr *srcs, const size_t *sizes, unsigned int count, void *dst,
                            size_t bytes)
{
    size_t at = 0;
    if (!dst || (count && (!srcs || !sizes)) || bytes > FGR_MIRROR_BATCH)
        return CUDA_ERROR_INVALID_VALUE; /* the answer has room for that much */
    moved_n((CUdeviceptr *)srcs, count);
    for (unsigned i = 0; i < count; i++)
        if (!holding(srcs[i], sizes[i]) || sizes[i] > bytes - at)
            return CUDA_ERROR_INVALID_VALUE;
        else
            at += sizes[i];
    if (at != bytes)
        return CUDA_ERROR_INVALID_VALUE;
    at = 0;
    for (unsigned i = 0; i < count; i++) {
        memcpy((uint8_t *)dst + at, (const void *)(uintptr_t)srcs[i], sizes[i]);
        at += sizes[i];
    }
    return CUDA_SUCCESS;
}

/* The sums of each allocation's blocks, one after another. */
static CUresult mapped_sums(const CUdeviceptr *srcs, const size_t *sizes, unsigned int count,
                            unsigned long long *sums, unsigned int nsums)
{
    unsigned k = 0;
    if (!sums || (count && (!srcs || !sizes)) || nsums > FGR_MAX_SUMS)
        return CUDA_ERROR_INVALID_VALUE;
    moved_n((CUdeviceptr *)srcs, count);
    for (unsigned i = 0; i < count; i++) {
        uint64_t blocks = (sizes[i] + FGR_SUM_BLOCK - 1) / FGR_SUM_BLOCK;
        if (!holding(srcs[i], sizes[i]) || blocks > nsums - k)
            return CUDA_ERROR_INVALID_VALUE;
        k += (unsigned)blocks;
    }
    if (k != nsums)
        return CUDA_ERROR_INVALID_VALUE;
    k = 0;
    for (unsigned i = 0; i < count; i++)
        for (size_t off = 0; off < sizes[i]; off += FGR_SUM_BLOCK) {
            size_t n = sizes[i] - off < FGR_SUM_BLOCK ? sizes[i] - off : FGR_SUM_BLOCK;
            sums[k++] = fgr_block_sum((const void *)(uintptr_t)(srcs[i] + off), n);
        }
    return CUDA_SUCCESS;
}

void fgr_hostmem_forget(uint64_t ctx)
{
    for (size_t i = 0; i < nmaps;)
        if (maps[i].ctx == ctx) {
            unmap(i, 1);
        } else {
            i++;
        }
}

void fgr_hostmem_promoting(void *reg, void *unreg)
{
    *(void **)&host_register = reg;
    *(void **)&host_unregister = unreg;
    if (!reg || !unreg)
        return; /* fgrHostMapAt stays unsupported */
    fgr_real[FGR_OP_fgrHostMapAt] = (void *)map_at;
    fgr_real[FGR_OP_fgrHostMappedFree] = (void *)mapped_free;
}

void fgr_hostmem_init(void *driver)
{
    *(void **)&pointer_attr = dlsym(driver, "cuPointerGetAttribute");
    fgr_hostmem_promoting(dlsym(driver, "cuMemHostRegister_v2"), dlsym(driver, "cuMemHostUnregister"));
    if (!host_register || !host_unregister)
        return; /* the operations stay unsupported */
    fgr_real[FGR_OP_fgrHostMapped] = (void *)mapped_alloc;
    fgr_real[FGR_OP_fgrHostMappedFree] = (void *)mapped_free;
    fgr_real[FGR_OP_fgrHostWrite] = (void *)mapped_write;
    fgr_real[FGR_OP_fgrHostReadMany] = (void *)mapped_read;
    fgr_real[FGR_OP_fgrHostSums] = (void *)mapped_sums;
}
