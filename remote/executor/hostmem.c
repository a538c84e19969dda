/* Small pinned host memory that the client's kernels use as device memory
 * (mapped, "zero-copy"): the driver allocates it here, where the GPU can
 * reach it, and the client maps its own pages at the same address
 * (remote/client/mirror.c). Managed memory the connection allocated is kept
 * alike the same way. The client's writes arrive as fgrHostWrite, its
 * reads as fgrHostSums then fgrHostReadMany; all are refused outside such an allocation, so a
 * client cannot make the executor touch device memory or its own. An
 * allocation is forgotten with its context (destroyed, or a primary one
 * reset or released for the last time), as the driver frees it then.
 * Managed memory is read and written here by the CPU while kernels may run:
 * the client asks for it only of a device with concurrent managed access. */
#include "executor.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static CUresult (*host_alloc)(void **, size_t, unsigned int);
static CUresult (*host_free)(void *);
static CUresult (*pointer_attr)(void *, CUpointer_attribute, CUdeviceptr);

static struct mapped {
    uint64_t base, end;
    uint64_t ctx; /* the context it was made in: the driver frees it with it */
} *maps;
static size_t nmaps, capmaps, total;

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

static CUresult mapped_alloc(CUdeviceptr *dptr, size_t bytes)
{
    if (!dptr || bytes == 0 || bytes > FGR_MAPPED_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (total + bytes > FGR_MAPPED_TOTAL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (nmaps == capmaps) {
        size_t n = capmaps ? 2 * capmaps : 16;
        struct mapped *m = realloc(maps, n * sizeof *m);
        if (!m)
            return CUDA_ERROR_OUT_OF_MEMORY;
        maps = m;
        capmaps = n;
    }
    void *p = NULL;
    CUresult r = host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUDA_SUCCESS)
        return r;
    memset(p, 0, bytes);
    maps[nmaps++] = (struct mapped){(uintptr_t)p, (uintptr_t)p + bytes, fgr_ctx};
    total += bytes;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult mapped_free(CUdeviceptr dptr)
{
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].base == dptr) {
            CUresult r = host_free((void *)(uintptr_t)dptr);
            total -= maps[i].end - maps[i].base;
            maps[i] = maps[--nmaps];
            return r;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult mapped_write(CUdeviceptr dst, const void *src, size_t bytes)
{
    if (!src || !holding(dst, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

/* Several allocations' bytes, one after another (one round trip however
 * many the client has). */
static CUresult mapped_read(const CUdeviceptr *srcs, const size_t *sizes, unsigned int count, void *dst,
                            size_t bytes)
{
    size_t at = 0;
    if (!dst || (count && (!srcs || !sizes)) || bytes > FGR_MIRROR_BATCH)
        return CUDA_ERROR_INVALID_VALUE; /* the answer has room for that much */
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
            total -= maps[i].end - maps[i].base;
            maps[i] = maps[--nmaps];
        } else {
            i++;
        }
}

void fgr_hostmem_init(void *driver)
{
    *(void **)&host_alloc = dlsym(driver, "cuMemHostAlloc");
    *(void **)&host_free = dlsym(driver, "cuMemFreeHost");
    *(void **)&pointer_attr = dlsym(driver, "cuPointerGetAttribute");
    if (!host_alloc || !host_free)
        return; /* the operations stay unsupported */
    fgr_real[FGR_OP_fgrHostMapped] = (void *)mapped_alloc;
    fgr_real[FGR_OP_fgrHostMappedFree] = (void *)mapped_free;
    fgr_real[FGR_OP_fgrHostWrite] = (void *)mapped_write;
    fgr_real[FGR_OP_fgrHostReadMany] = (void *)mapped_read;
    fgr_real[FGR_OP_fgrHostSums] = (void *)mapped_sums;
}
