/* Simulated device memory. Every allocation is backed by host memory (so
 * copies move real bytes) and charged to the shared device counter (so
 * out-of-memory is real across processes). Graph allocations are in
 * graph.c; their addresses are registered here. */
#include "sim.h"
#include "flexgv/pointer_attrs.h"
#include "flexgv/memcpy3d_peer.h"
#include "flexgv/memcpy_batch.h"
#include "flexgv/memcpy3d_batch.h"
#include "flexgv/cuda_util.h"
#include "flexgv/drvmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define POOL_MAGIC 0x504f4f4cu
#define VMM_MAGIC 0x564d4d48u
#define ARRAY_MAGIC 0x41525259u

enum alloc_kind { K_DEVICE, K_MANAGED, K_POOL, K_HOST, K_ARRAY, K_GRAPH, K_REGISTERED, K_OPENED };

struct sim_pool {
    uint32_t magic;
    int dev; /* -1: a pool of pinned host memory (CUDA 12.2's), not charged to a device */
    uint64_t reserved; /* device memory the pool holds */
    uint64_t used;     /* of which handed out */
    uint64_t threshold;
    uint64_t reserved_high, used_high;
    unsigned no_reuse; /* bit a: reuse attribute a turned off (all are on at first) */
};

struct alloc {
    uintptr_t base;
    size_t size;
    int dev;
    enum alloc_kind kind;
    struct sim_ctx *ctx;
    struct sim_pool *pool;
    struct sim_gmem *gmem;
    uint64_t charged; /* device memory it takes, as the driver rounds (flexgv/drvmem.h) */
    /* Managed memory's advice and prefetches, for the whole allocation:
     * locations as CUdevice values (CU_DEVICE_CPU the host), each kept
     * with 1 added so that zero is "none". */
    struct advice {
        int read_mostly, preferred, prefetched;
        uint64_t accessed_by; /* bit d: device d; bit 63: the host */
    } adv;
    int shared; /* exported (cuIpcGetMemHandle): the memfd behind it, plus 1 */
    unsigned sync_memops; /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, as set */
    unsigned host_flags;  /* pinned host memory's cuMemHostAlloc flags */
    uint64_t id;          /* CU_POINTER_ATTRIBUTE_BUFFER_ID, given by registry_add */
};

pthread_mutex_t sim_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;
static size_t nallocs, capallocs;
static struct sim_pool default_pools[SIM_MAX_DEVICES];
static struct sim_pool *current_pools[SIM_MAX_DEVICES]; /* NULL: the default pool */
static struct sim_pool host_pool = {.magic = POOL_MAGIC, .dev = -1}, *host_current; /* the host's */

/* ---- allocation registry (sorted by base; callers hold sim_mem_lock) ---- */

static size_t lower_bound(uintptr_t base)
{
    size_t lo = 0, hi = nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (allocs[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int registry_add(struct alloc a)
{
    static uint64_t ids;
    a.id = ++ids;
    if (nallocs == capallocs) {
        size_t cap = capallocs ? capallocs * 2 : 64;
        struct alloc *n = realloc(allocs, cap * sizeof *n);
        if (!n)
            return -1;
        allocs = n;
        capallocs = cap;
    }
    size_t i = lower_bound(a.base);
    memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
    allocs[i] = a;
    nallocs++;
    return 0;
}

/* The allocation that contains p, or NULL. */
static struct alloc *registry_find(uintptr_t p)
{
    size_t i = lower_bound(p + 1);
    if (i == 0)
        return NULL;
    struct alloc *a = &allocs[i - 1];
    return p < a->base + (a->size ? a->size : 1) ? a : NULL;
}

static void registry_remove(struct alloc *a)
{
    size_t i = (size_t)(a - allocs);
    memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
    nallocs--;
}

int sim_registry_add_graph(uintptr_t base, size_t size, int dev, struct sim_gmem *m)
{
    return registry_add((struct alloc){base, size, dev, K_GRAPH, NULL, NULL, m, 0, {0}, 0, 0, 0, 0});
}

void sim_registry_del(uintptr_t base)
{
    struct alloc *a = registry_find(base);
    if (a && a->base == base)
        registry_remove(a);
}

struct sim_gmem *sim_registry_gmem(CUdeviceptr p)
{
    struct alloc *a = registry_find((uintptr_t)p);
    return a && a->base == p && a->kind == K_GRAPH ? a->gmem : NULL;
}

static void *backing(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void sim_array_free(void *a);

static void release_alloc(struct alloc *a)
{
    switch (a->kind) {
    case K_POOL:
        a->pool->used -= a->size;
        break;
    case K_DEVICE:
    case K_MANAGED:
    case K_ARRAY:
        sim_mem_release(a->dev, a->charged);
        break;
    case K_HOST:
    case K_GRAPH:
    case K_REGISTERED:
    case K_OPENED: /* charged to the process that exported it */
        break;
    }
    if (a->shared)
        close(a->shared - 1); /* opened elsewhere, it stays there */
    if (a->kind == K_ARRAY)
        sim_array_free((void *)a->base);
    else if (a->kind != K_REGISTERED) /* the program's own memory */
        munmap((void *)a->base, a->size);
}

/* size bytes on dev, of context c (NULL: of none, as a library's). */
static CUresult alloc_on(CUdeviceptr *dptr, size_t size, enum alloc_kind kind, int dev, struct sim_ctx *c)
{
    uint64_t charged = fg_drv_alloc(sim_drv(), size);
    if (sim_mem_reserve(dev, charged) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = backing(size);
    pthread_mutex_lock(&sim_mem_lock);
    if (!p || registry_add((struct alloc){(uintptr_t)p, size, dev, kind, c, NULL, NULL, charged, {0}, 0, 0, 0, 0}) != 0) {
        pthread_mutex_unlock(&sim_mem_lock);
        if (p)
            munmap(p, size);
        sim_mem_release(dev, charged);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&sim_mem_lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult device_alloc(CUdeviceptr *dptr, size_t size, enum alloc_kind kind)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_capture_check(NULL)) != CUDA_SUCCESS)
        return r;
    return alloc_on(dptr, size, kind, c->dev, c);
}

/* A module's or library's managed variable: made on the device its
 * module was loaded for, with or without a context current, and freed
 * with its module alone. */
CUresult sim_module_variable(CUdeviceptr *dptr, size_t size, int dev, int device)
{
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_on(dptr, size, device ? K_DEVICE : K_MANAGED, dev, NULL);
}

SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { SIM_GATE(); return device_alloc(dptr, bytesize, K_DEVICE); }

SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    SIM_GATE();
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != 0x2)
        return CUDA_ERROR_INVALID_VALUE;
    return device_alloc(dptr, bytesize, K_MANAGED);
}

/* ---- managed memory: prefetches and advice ----
 * Simulated memory is the process's own, so nothing moves: the calls are
 * checked as the driver checks them and remembered, per allocation, for
 * cuMemRangeGetAttribute to answer. */

/* A location as a CUdevice (CU_DEVICE_CPU: the host); -2 when not one. */
static int location_device(CUmemLocation l)
{
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE)
        return l.id >= 0 && l.id < sim_ndevices ? l.id : -2;
    if (l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
        (l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && l.id == 0))
        return CU_DEVICE_CPU;
    return -2;
}

static struct alloc *managed_range(CUdeviceptr p, size_t n)
{
    struct alloc *a = registry_find((uintptr_t)p);
    return a && a->kind == K_MANAGED && n && n <= a->base + a->size - p ? a : NULL;
}

static CUresult prefetch(CUdeviceptr p, size_t n, int dev, unsigned flags, CUstream s, int per_thread)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_stream *st;
    CUresult r = sim_stream_arg(s, per_thread, &st);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags || dev == -2)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev >= 0 && dev >= sim_ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = managed_range(p, n);
    if (a)
        a->adv.prefetched = dev + 1 + 1;
    pthread_mutex_unlock(&sim_mem_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream s)
{
    SIM_GATE();
    return prefetch(p, n, dev == CU_DEVICE_CPU ? -1 : dev < 0 ? -2 : dev, 0, s, 0);
}
SIM_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dev, CUstream s)
{
    SIM_GATE();
    return prefetch(p, n, dev == CU_DEVICE_CPU ? -1 : dev < 0 ? -2 : dev, 0, s, 1);
}
SIM_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation l, unsigned flags, CUstream s)
{
    SIM_GATE();
    return prefetch(p, n, location_device(l), flags, s, 0);
}
SIM_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation l, unsigned flags, CUstream s)
{
    SIM_GATE();
    return prefetch(p, n, location_device(l), flags, s, 1);
}

static CUresult advise(CUdeviceptr p, size_t n, CUmem_advise advice, int dev)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    int needs_place = advice >= CU_MEM_ADVISE_SET_PREFERRED_LOCATION && advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY ||
        (needs_place && (dev == -2 || dev >= sim_ndevices)))
        return needs_place && dev >= sim_ndevices ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = managed_range(p, n);
    uint64_t bit = dev < 0 ? 1ull << 63 : 1ull << (dev % 63);
    if (a)
        switch (advice) {
        case CU_MEM_ADVISE_SET_READ_MOSTLY: a->adv.read_mostly = 1; break;
        case CU_MEM_ADVISE_UNSET_READ_MOSTLY: a->adv.read_mostly = 0; break;
        case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: a->adv.preferred = dev + 1 + 1; break;
        case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: a->adv.preferred = 0; break;
        case CU_MEM_ADVISE_SET_ACCESSED_BY: a->adv.accessed_by |= bit; break;
        case CU_MEM_ADVISE_UNSET_ACCESSED_BY: a->adv.accessed_by &= ~bit; break;
        }
    pthread_mutex_unlock(&sim_mem_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev)
{
    SIM_GATE();
    return advise(p, n, advice, dev == CU_DEVICE_CPU ? -1 : dev < 0 ? -2 : dev);
}
SIM_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation l)
{
    SIM_GATE();
    return advise(p, n, advice, location_device(l));
}

SIM_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr p, size_t n)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data || (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY ? size == 0 || size % 4 : size != 4))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = managed_range(p, n);
    struct alloc got = a ? *a : (struct alloc){0};
    pthread_mutex_unlock(&sim_mem_lock);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    int *v = data, loc;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: *v = got.adv.read_mostly; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: *v = got.adv.preferred - 2; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: *v = got.adv.prefetched - 2; return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        loc = (attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ? got.adv.preferred : got.adv.prefetched) - 2;
        *v = loc == -2 ? CU_MEM_LOCATION_TYPE_INVALID : loc == -1 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        loc = (attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID ? got.adv.preferred : got.adv.prefetched) - 2;
        *v = loc;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        size_t k = 0, slots = size / 4;
        for (int d = 0; d < sim_ndevices && k < slots; d++)
            if (got.adv.accessed_by & (1ull << d))
                v[k++] = d;
        if ((got.adv.accessed_by >> 63) && k < slots)
            v[k++] = CU_DEVICE_CPU;
        while (k < slots)
            v[k++] = CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attrs, size_t count,
                                            CUdeviceptr p, size_t n)
{
    if (count && (!data || !sizes || !attrs))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult r = cuMemRangeGetAttribute(data[i], sizes[i], attrs[i], p, n);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* Attached to a stream, the host or every stream: no memory moves here. */
static CUresult attach(CUstream s, CUdeviceptr p, size_t n, unsigned flags, int per_thread)
{
    struct sim_stream *st;
    CUresult r = sim_stream_arg(s, per_thread, &st);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)p);
    int ok = a && a->kind == K_MANAGED && a->base == p && (n == 0 || n == a->size);
    pthread_mutex_unlock(&sim_mem_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned flags)
{
    SIM_GATE();
    return attach(s, p, n, flags, 0);
}
SIM_EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned flags)
{
    SIM_GATE();
    return attach(s, p, n, flags, 1);
}

SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                       unsigned int ElementSizeBytes)
{
    SIM_GATE();
    if (!pPitch || (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) || WidthInBytes == 0 ||
        Height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = sim->cfg.pitch_align ? (size_t)fg_drv_up(WidthInBytes, sim->cfg.pitch_align)
                                        : (size_t)fg_drv_pitch(sim_drv(), WidthInBytes);
    CUresult r = device_alloc(dptr, pitch * Height, K_DEVICE);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* Frees the allocation starting at p if its kind is in kinds (a mask of
 * 1 << enum alloc_kind); otherwise answers bad. A graph allocation keeps
 * its address: it is only no longer in use. */
static CUresult release_at(uintptr_t p, unsigned kinds, CUresult bad)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find(p);
    if (!p || !a || a->base != p || !(kinds & (1u << a->kind))) {
        pthread_mutex_unlock(&sim_mem_lock);
        return bad;
    }
    if (a->kind == K_GRAPH) {
        int rc = sim_gmem_unuse(a->gmem);
        pthread_mutex_unlock(&sim_mem_lock);
        return rc ? bad : CUDA_SUCCESS;
    }
    struct alloc copy = *a;
    registry_remove(a);
    release_alloc(&copy);
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

#define DEVICE_KINDS ((1u << K_DEVICE) | (1u << K_MANAGED) | (1u << K_POOL) | (1u << K_GRAPH))

static CUresult free_kind(CUdeviceptr dptr, unsigned kinds)
{
    if (dptr == 0)
        return sim_initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
    return release_at((uintptr_t)dptr, kinds, CUDA_ERROR_INVALID_VALUE);
}

SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = sim_capture_check(NULL);
    return r ? r : free_kind(dptr, DEVICE_KINDS);
}

SIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    sim_reap_dead();
    uint64_t used = __atomic_load_n(&sim->dev[sim_moved(c->dev)].used_bytes, __ATOMIC_ACQUIRE);
    *total = (size_t)sim->cfg.mem_bytes;
    *free_bytes = used >= sim->cfg.mem_bytes ? 0 : (size_t)(sim->cfg.mem_bytes - used);
    return CUDA_SUCCESS;
}

/* As a GPU's driver, only with a context current (cudart 13 asks for a
 * library's managed variables before it has made one). */
static int mapped_at(uintptr_t p, uintptr_t *base, size_t *size);

/* Of memory mapped by pages, the mapping holding dptr. */
SIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_current_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)dptr);
    uintptr_t base = a ? a->base : 0;
    size_t size = a ? a->size : 0;
    int ok = a ? a->kind != K_HOST && a->kind != K_REGISTERED && a->kind != K_ARRAY : mapped_at(dptr, &base, &size);
    if (ok) {
        if (pbase)
            *pbase = base;
        if (psize)
            *psize = size;
    }
    pthread_mutex_unlock(&sim_mem_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- pinned host memory (not device memory) ---- */

/* Potentially unsafe during capture, as a device allocation is. */
static CUresult host_alloc(void **pp, size_t size, unsigned flags)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pp || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_capture_check(NULL);
    if (r)
        return r;
    void *p = backing(size);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&sim_mem_lock);
    int rc = registry_add((struct alloc){(uintptr_t)p, size, 0, K_HOST, sim_current_ctx(), NULL, NULL, 0, {0}, 0, 0, flags, 0});
    pthread_mutex_unlock(&sim_mem_lock);
    if (rc) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { SIM_GATE(); return host_alloc(pp, bytesize, 0); }

SIM_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    SIM_GATE();
    if (Flags & ~0xfu)
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize, Flags);
}

/* The flags pinned memory was allocated with (cuMemHostAlloc's, 0 for
 * cuMemAllocHost's), portable and mapped as all pinned memory is under
 * unified addressing (the H200's driver says so of cuMemAllocHost's);
 * other memory, registered memory included, is refused. */
SIM_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    if (!pFlags || !p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)p);
    CUresult r = a && a->kind == K_HOST ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *pFlags = a->host_flags | CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
    pthread_mutex_unlock(&sim_mem_lock);
    return r;
}

/* Potentially unsafe during capture: it synchronizes. */
SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = sim_capture_check(NULL);
    return r ? r : release_at((uintptr_t)p, 1u << K_HOST, CUDA_ERROR_INVALID_VALUE);
}

/* The program's own pages, pinned: host memory the device reaches too. A
 * range overlapping memory already pinned or allocated is refused. */
SIM_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || !bytesize || (Flags & ~0xfu) || (uintptr_t)p + bytesize < (uintptr_t)p)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_capture_check(NULL); /* pinning is unsafe during capture */
    if (r)
        return r;
    uintptr_t b = (uintptr_t)p, e = b + bytesize;
    pthread_mutex_lock(&sim_mem_lock);
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i].base < e && b < allocs[i].base + allocs[i].size) {
            pthread_mutex_unlock(&sim_mem_lock);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    int rc = registry_add((struct alloc){b, bytesize, 0, K_REGISTERED, sim_current_ctx(), NULL, NULL, 0, {0}, 0, 0, 0, 0});
    pthread_mutex_unlock(&sim_mem_lock);
    return rc ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* Under unified addressing a pinned page's device address is its host
 * address. */
SIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pdptr || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)p);
    int ok = a && (a->kind == K_HOST || a->kind == K_REGISTERED);
    pthread_mutex_unlock(&sim_mem_lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemHostUnregister(void *p)
{
    SIM_GATE();
    return release_at((uintptr_t)p, 1u << K_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

/* ---- stream-ordered allocation: pools keep freed memory reserved ---- */

/* A pool's location as a device ordinal, -1 for the host (one NUMA node,
 * 0, as the simulated host has). */
static CUresult pool_location(const CUmemLocation *location, CUmemAllocationType type, CUdevice *dev)
{
    if (!location || type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    switch (location->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        *dev = location->id;
        return location->id >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *dev = -1;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        *dev = -1;
        return location->id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static struct sim_pool *default_pool(int dev)
{
    struct sim_pool *p = &default_pools[dev];
    if (p->magic != POOL_MAGIC) {
        p->magic = POOL_MAGIC;
        p->dev = dev;
    }
    return p;
}

static void pool_trim(struct sim_pool *p, uint64_t keep)
{
    if (keep < p->used)
        keep = p->used;
    if (p->reserved > keep) {
        if (p->dev >= 0)
            sim_mem_release(p->dev, p->reserved - keep);
        p->reserved = keep;
    }
}

/* On a capturing stream the allocation becomes an allocation node of the
 * graph, from the graph memory pool of the pool's device. */
static CUresult pool_alloc(CUdeviceptr *dptr, size_t size, struct sim_pool *pool, CUstream hStream, int pt)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!dptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_stream *s = sim_stream_of(c, hStream, pt);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (sim_stream_captured(s)) {
        pthread_mutex_lock(&sim_mem_lock);
        int dev = !pool ? c->dev : pool->magic == POOL_MAGIC ? pool->dev : -1;
        pthread_mutex_unlock(&sim_mem_lock);
        if (dev < 0)
            return CUDA_ERROR_INVALID_VALUE;
        CUdeviceptr p;
        struct sim_node *n = sim_node_alloc(dev, size, &p);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_capture_route(s, n, &r)) {
            if (r == CUDA_SUCCESS)
                *dptr = p;
            return r;
        }
        sim_node_destroy(n);
    }
    pthread_mutex_lock(&sim_mem_lock);
    if (!pool)
        pool = current_pools[c->dev] ? current_pools[c->dev] : default_pool(c->dev);
    else if (pool->magic != POOL_MAGIC) {
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t cached = pool->reserved - pool->used;
    if (cached < size) {
        uint64_t grow = fg_drv_up(size - cached, sim_drv()->pool_step); /* pools grow in steps */
        if (pool->dev >= 0 && sim_mem_reserve(pool->dev, grow) != 0) {
            pthread_mutex_unlock(&sim_mem_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        pool->reserved += grow;
        if (pool->reserved > pool->reserved_high)
            pool->reserved_high = pool->reserved;
    }
    void *p = backing(size);
    if (!p || registry_add((struct alloc){(uintptr_t)p, size, pool->dev, K_POOL, c, pool, NULL, 0, {0}, 0, 0, 0, 0}) != 0) {
        if (p)
            munmap(p, size);
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->used += size;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    pthread_mutex_unlock(&sim_mem_lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    SIM_GATE();
    return pool_alloc(dptr, bytesize, NULL, hStream, 0);
}
SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    SIM_GATE();
    return pool_alloc(dptr, bytesize, NULL, hStream, 1);
}
SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    SIM_GATE();
    return pool ? pool_alloc(dptr, bytesize, (struct sim_pool *)pool, hStream, 0) : CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream)
{
    SIM_GATE();
    return pool ? pool_alloc(dptr, bytesize, (struct sim_pool *)pool, hStream, 1) : CUDA_ERROR_INVALID_VALUE;
}
/* On a capturing stream: a free node, for a graph allocation only. */
static CUresult free_async(CUdeviceptr dptr, CUstream hStream, int pt)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    struct sim_stream *s = sim_stream_of(c, hStream, pt);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (sim_stream_captured(s)) {
        struct sim_node *n = sim_node_free(dptr);
        if (!n)
            return CUDA_ERROR_INVALID_VALUE;
        if (sim_capture_route(s, n, &r))
            return r;
        sim_node_destroy(n);
    }
    return free_kind(dptr, (1u << K_POOL) | (1u << K_GRAPH));
}
SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { SIM_GATE(); return free_async(dptr, hStream, 0); }
SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { SIM_GATE(); return free_async(dptr, hStream, 1); }

SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUdevice ordinal = 0;
    CUresult r = props ? pool_location(&props->location, props->allocType, &ordinal) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS || !pool)
        return r ? r : CUDA_ERROR_INVALID_VALUE;
    if (ordinal >= 0 && sim_phys(ordinal) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = POOL_MAGIC;
    p->dev = ordinal >= 0 ? sim_phys(ordinal) : -1;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    SIM_GATE();
    struct sim_pool *p = (struct sim_pool *)pool;
    if (!p || p->magic != POOL_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    pool_trim(p, minBytesToKeep);
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    SIM_GATE();
    struct sim_pool *p = (struct sim_pool *)pool;
    if (!p || p->magic != POOL_MAGIC || (p >= default_pools && p < default_pools + SIM_MAX_DEVICES) || p == &host_pool)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    /* Outstanding allocations die with the pool. */
    for (size_t i = 0; i < nallocs;) {
        if (allocs[i].kind == K_POOL && allocs[i].pool == p) {
            struct alloc copy = allocs[i];
            registry_remove(&allocs[i]);
            release_alloc(&copy);
        } else {
            i++;
        }
    }
    pool_trim(p, 0);
    p->magic = 0;
    if (p->dev >= 0 && current_pools[p->dev] == p) /* its device's default pool is current again */
        current_pools[p->dev] = NULL;
    if (host_current == p)
        host_current = NULL;
    pthread_mutex_unlock(&sim_mem_lock);
    free(p);
    return CUDA_SUCCESS;
}

/* A device's default pool, or its current one (the default unless set);
 * ordinal -1: the host's. */
static CUresult device_pool(CUmemoryPool *pool, CUdevice ordinal, int current)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal == -1) {
        pthread_mutex_lock(&sim_mem_lock);
        *pool = (CUmemoryPool)(current && host_current ? host_current : &host_pool);
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_SUCCESS;
    }
    int dev = sim_phys(ordinal);
    if (dev < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_mem_lock);
    *pool = (CUmemoryPool)(current && current_pools[dev] ? current_pools[dev] : default_pool(dev));
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

/* What cuMemAllocAsync on the device's streams takes from: a pool of that
 * device. */
static CUresult set_device_pool(CUdevice ordinal, CUmemoryPool pool)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    int dev = ordinal == -1 ? -1 : sim_phys(ordinal);
    if (dev < 0 && ordinal != -1)
        return CUDA_ERROR_INVALID_DEVICE;
    struct sim_pool *p = (struct sim_pool *)pool;
    pthread_mutex_lock(&sim_mem_lock);
    CUresult r = p && p->magic == POOL_MAGIC && p->dev == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && dev < 0)
        host_current = p == &host_pool ? NULL : p;
    else if (r == CUDA_SUCCESS)
        current_pools[dev] = p == &default_pools[dev] ? NULL : p;
    pthread_mutex_unlock(&sim_mem_lock);
    return r;
}

SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return dev < 0 ? CUDA_ERROR_INVALID_DEVICE : device_pool(pool_out, dev, 0);
}
SIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return dev < 0 ? CUDA_ERROR_INVALID_DEVICE : device_pool(pool, dev, 1);
}
SIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    return dev < 0 ? CUDA_ERROR_INVALID_DEVICE : set_device_pool(dev, pool);
}


SIM_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
    CUdevice dev;
    CUresult r = pool_location(location, type, &dev);
    return r ? r : device_pool(pool_out, dev, 0);
}
SIM_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    CUdevice dev;
    CUresult r = pool_location(location, type, &dev);
    return r ? r : device_pool(pool, dev, 1);
}
SIM_EXPORT CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
    CUdevice dev;
    CUresult r = pool_location(location, type, &dev);
    return r ? r : set_device_pool(dev, pool);
}

SIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct sim_pool *p = (struct sim_pool *)pool;
    if (!p || p->magic != POOL_MAGIC || !value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    cuuint64_t v;
    CUresult r = CUDA_SUCCESS;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = !(p->no_reuse >> attr & 1);
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
    pthread_mutex_unlock(&sim_mem_lock);
    if (r == CUDA_SUCCESS)
        *(cuuint64_t *)value = v;
    return r;
}

/* The reuse attributes change nothing here (frees are reused at once);
 * the high-water marks may only be reset (to what is current), as on a GPU. */
SIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct sim_pool *p = (struct sim_pool *)pool;
    if (!p || p->magic != POOL_MAGIC || !value)
        return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t v = attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
                           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
                           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES
                       ? (cuuint64_t) * (int *)value
                       : *(cuuint64_t *)value;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_mem_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->no_reuse = v ? p->no_reuse & ~(1u << attr) : p->no_reuse | 1u << attr;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = v; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (v)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            p->reserved_high = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (v)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            p->used_high = p->used;
        break;
    default: r = CUDA_ERROR_INVALID_VALUE; break; /* the current amounts are read only */
    }
    pthread_mutex_unlock(&sim_mem_lock);
    return r;
}

/* Synchronization releases what default pools hold beyond their threshold. */
void sim_pools_trim_after_sync(int dev)
{
    pthread_mutex_lock(&sim_mem_lock);
    struct sim_pool *p = &default_pools[dev];
    if (p->magic == POOL_MAGIC)
        pool_trim(p, p->threshold);
    pthread_mutex_unlock(&sim_mem_lock);
}

/* Everything a destroyed context owned goes back to the device. */
void sim_ctx_release_memory(struct sim_ctx *ctx)
{
    pthread_mutex_lock(&sim_mem_lock);
    for (size_t i = 0; i < nallocs;) {
        if (allocs[i].ctx == ctx && allocs[i].kind != K_HOST && allocs[i].kind != K_REGISTERED) {
            struct alloc copy = allocs[i];
            registry_remove(&allocs[i]);
            release_alloc(&copy);
        } else {
            i++;
        }
    }
    if (ctx->primary)
        pool_trim(default_pool(ctx->dev), 0);
    pthread_mutex_unlock(&sim_mem_lock);
}

/* ---- virtual memory management ---- */

struct sim_vmm {
    uint32_t magic;
    int dev;
    size_t size;
    int fd;
    int maps;
    int refs; /* the handle's references: cuMemCreate's, and one per retain */
    unsigned types; /* the shareable handles it may be exported as */
    int imported;   /* another process's memory: charged there */
};

struct mapping {
    uintptr_t ptr;
    size_t size;
    struct sim_vmm *h;
    struct mapping *next;
};
static struct mapping *mappings;

static int mapped_at(uintptr_t p, uintptr_t *base, size_t *size)
{
    for (struct mapping *m = mappings; m; m = m->next)
        if (p >= m->ptr && p < m->ptr + m->size) {
            *base = m->ptr;
            *size = m->size;
            return 1;
        }
    return 0;
}

SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

static void vmm_free(struct sim_vmm *h)
{
    if (!h->imported)
        sim_mem_release(h->dev, h->size);
    close(h->fd);
    h->magic = 0;
    free(h);
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                unsigned long long flags)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !prop || flags || size == 0 || size % SIM_GRANULARITY ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        sim_phys(prop->location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = sim_phys(prop->location.id);
    if (sim_mem_reserve(dev, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_vmm *h = calloc(1, sizeof *h);
    /* The device in the name: an importing process finds it there. */
    char name[32];
    snprintf(name, sizeof name, "flexgv-sim-vmm-%d", dev);
    int fd = (int)syscall(SYS_memfd_create, name, 1u /* MFD_CLOEXEC */);
    if (!h || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        free(h);
        if (fd >= 0)
            close(fd);
        sim_mem_release(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct sim_vmm){VMM_MAGIC, dev, size, fd, 0, 1, prop->requestedHandleTypes, 0};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* A POSIX file descriptor of the memory (its memfd), for another process;
 * only of memory made to be exported so. */
SIM_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags)
{
    SIM_GATE();
    struct sim_vmm *h = (struct sim_vmm *)(uintptr_t)handle;
    if (!shareableHandle || flags || !h || h->magic != VMM_MAGIC || h->refs == 0 ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !(h->types & handleType))
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0); /* closed on exec, as the driver's */
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* Memory another process exported: its memfd, its device from the name. */
SIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    int fd = (int)(intptr_t)osHandle, dev = -1;
    char path[64], target[128];
    struct stat st;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || n <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    target[n] = 0;
    if (sscanf(target, "/memfd:flexgv-sim-vmm-%d", &dev) != 1 || dev < 0 || dev >= SIM_MAX_DEVICES ||
        fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    /* Memory of a GPU this process does not see (CUDA_VISIBLE_DEVICES):
     * the driver refuses it so (NCCL between containers of one GPU each). */
    if (dev >= sim->cfg.devices || sim_ordinal(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    struct sim_vmm *h = calloc(1, sizeof *h);
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (!h || own < 0) {
        free(h);
        if (own >= 0)
            close(own);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *h = (struct sim_vmm){VMM_MAGIC, dev, (size_t)st.st_size, own, 0, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SIM_GATE();
    struct sim_vmm *h = (struct sim_vmm *)(uintptr_t)handle;
    pthread_mutex_lock(&sim_mem_lock);
    if (!h || h->magic != VMM_MAGIC || h->refs == 0) {
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* Memory still mapped is freed at its last unmap. */
    if (--h->refs == 0 && h->maps == 0)
        vmm_free(h);
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

/* What the memory was made with: pinned, on its device (an imported
 * handle's device from the name its creator gave it). */
SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    SIM_GATE();
    const struct sim_vmm *h = (const struct sim_vmm *)(uintptr_t)handle;
    if (!prop || !h || h->magic != VMM_MAGIC || h->refs == 0 || sim_ordinal(h->dev) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = sim_ordinal(h->dev);
    prop->requestedHandleTypes = h->types;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags)
{
    SIM_GATE();
    if (!ptr || size == 0 || size % SIM_GRANULARITY || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment < SIM_GRANULARITY)
        alignment = SIM_GRANULARITY;
    /* At the address asked for where it is free, as the driver does. */
    if (addr && addr % alignment == 0) {
        void *at = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (at == (void *)(uintptr_t)addr) {
            *ptr = addr;
            return CUDA_SUCCESS;
        }
        if (at != MAP_FAILED)
            munmap(at, size);
    }
    size_t span = size + alignment;
    char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (start > (uintptr_t)p)
        munmap(p, start - (uintptr_t)p);
    uintptr_t end = (uintptr_t)p + span;
    if (end > start + size)
        munmap((void *)(start + size), end - (start + size));
    *ptr = (CUdeviceptr)start;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_GATE();
    if (!ptr || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags)
{
    SIM_GATE();
    struct sim_vmm *h = (struct sim_vmm *)(uintptr_t)handle;
    if (!ptr || flags || !h || h->magic != VMM_MAGIC || h->refs == 0 || offset + size > h->size)
        return CUDA_ERROR_INVALID_VALUE;
    struct mapping *m = malloc(sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset) == MAP_FAILED) {
        free(m);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&sim_mem_lock);
    *m = (struct mapping){(uintptr_t)ptr, size, h, mappings};
    mappings = m;
    h->maps++;
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

/* The range may cover several mappings, each of them whole. */
SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SIM_GATE();
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    pthread_mutex_lock(&sim_mem_lock);
    int found = 0;
    for (struct mapping *m = mappings; m; m = m->next) {
        int inside = m->ptr >= lo && m->ptr + m->size <= hi;
        int overlaps = m->ptr < hi && m->ptr + m->size > lo;
        if (overlaps && !inside) {
            pthread_mutex_unlock(&sim_mem_lock);
            return CUDA_ERROR_INVALID_VALUE;
        }
        found |= inside;
    }
    if (!found) {
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* Keep the address range reserved, as the driver does. */
    mmap((void *)lo, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    for (struct mapping **pp = &mappings; *pp;) {
        struct mapping *m = *pp;
        if (m->ptr >= lo && m->ptr + m->size <= hi) {
            *pp = m->next;
            if (--m->h->maps == 0 && m->h->refs == 0)
                vmm_free(m->h);
            free(m);
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_SUCCESS;
}

/* The handle of the mapping that holds addr, with one more reference: it
 * may have been released already while still mapped. */
SIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!handle || !addr)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    for (struct mapping *m = mappings; m; m = m->next)
        if ((uintptr_t)addr >= m->ptr && (uintptr_t)addr - m->ptr < m->size) {
            m->h->refs++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
            pthread_mutex_unlock(&sim_mem_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&sim_mem_lock);
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    SIM_GATE();
    if (!ptr || !desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) == 0 ? CUDA_SUCCESS
                                                                               : CUDA_ERROR_INVALID_VALUE;
}

/* ---- arrays ---- */

/* An array keeps its layout and its texels (rows of Width elements,
 * max(Height,1) rows a slice, max(Depth,1) slices: layers for a layered or
 * cubemap one). A mipmapped array holds one such array per level, which
 * cuMipmappedArrayGetLevel hands out and which go with it. Every live one
 * is on the list `arrays` (under sim_mem_lock), so a handle is known before
 * it is used. */
struct sim_array {
    uint32_t magic;
    int dev;
    size_t bytes;
    CUDA_ARRAY3D_DESCRIPTOR d;
    size_t eb; /* element bytes */
    unsigned char *data; /* NULL for a mipmapped array */
    unsigned levels;      /* a mipmapped array's; 0 for an array */
    struct sim_array **level;
    struct sim_array *plane[2]; /* a two-plane (NV12) array's, in its data */
    struct sim_array *next;
};
static struct sim_array *arrays;

static void array_link(struct sim_array *a)
{
    a->next = arrays;
    arrays = a;
}

static void array_unlink(struct sim_array *a)
{
    for (struct sim_array **p = &arrays; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            return;
        }
}

static void array_free(struct sim_array *a);
void sim_array_free(void *a) { array_free(a); }

static void array_free(struct sim_array *a)
{
    for (int p = 0; p < 2; p++)
        if (a->plane[p]) {
            array_unlink(a->plane[p]);
            free(a->plane[p]);
        }
    for (unsigned l = 0; l < a->levels; l++)
        if (a->level && a->level[l]) {
            array_unlink(a->level[l]);
            free(a->level[l]->data);
            free(a->level[l]);
        }
    array_unlink(a);
    free(a->level);
    free(a->data);
    free(a);
}

/* The live array (mip: a mipmapped one) h names, NULL if none; the caller
 * holds sim_mem_lock. */
static struct sim_array *array_find(const void *h, int mip)
{
    for (struct sim_array *a = arrays; a; a = a->next)
        if (a == h)
            return (a->levels > 0) == mip ? a : NULL;
    return NULL;
}

int sim_array_known(const void *h, int mip, unsigned *flags)
{
    pthread_mutex_lock(&sim_mem_lock);
    struct sim_array *a = array_find(h, mip);
    if (a && flags)
        *flags = a->d.Flags;
    pthread_mutex_unlock(&sim_mem_lock);
    return a != NULL;
}

/* Whether the layout is one the driver makes: a known format, 1, 2 or 4
 * channels; a 1D array has no depth; a layered one at least one layer; a
 * cubemap square faces and 6 layers (a multiple of 6 when layered). */
static int layout_ok(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    unsigned known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER;
    /* NV12: three channels (Y, U, V) of a 2D array for the video engines,
     * whose second plane halves both extents (an H100's driver refuses one
     * without CUDA_ARRAY3D_VIDEO_ENCODE_DECODE) */
    if (d->Format == CU_AD_FORMAT_NV12)
        return d->NumChannels == 3 && d->Width && d->Height && !d->Depth && !(d->Width % 2) && !(d->Height % 2) &&
               (d->Flags & CUDA_ARRAY3D_VIDEO_ENCODE_DECODE) &&
               !(d->Flags & ~(CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_VIDEO_ENCODE_DECODE));
    if (!d->Width || !fg_format_bytes(d->Format) || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
        (d->Flags & ~known))
        return 0;
    if (!d->Height && d->Depth && !(d->Flags & CUDA_ARRAY3D_LAYERED))
        return 0;
    if ((d->Flags & CUDA_ARRAY3D_LAYERED) && !d->Depth)
        return 0;
    if (d->Flags & CUDA_ARRAY3D_CUBEMAP) {
        if (d->Width != d->Height || !d->Depth)
            return 0;
        if ((d->Flags & CUDA_ARRAY3D_LAYERED) ? d->Depth % 6 : d->Depth != 6)
            return 0;
    }
    return 1;
}

static struct sim_array *array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, int dev)
{
    struct sim_array *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->magic = ARRAY_MAGIC;
    a->dev = dev;
    a->d = *d;
    a->eb = fg_format_bytes(d->Format) * d->NumChannels; /* 0 for NV12: copied by its planes */
    uint64_t n;
    if (!fg_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1, &n) ||
        !(a->data = calloc(1, n ? n : 1))) {
        free(a);
        return NULL;
    }
    a->bytes = n;
    /* Its planes: the luma, a byte a texel, then the chroma, two bytes a
     * texel of half the width and height. */
    for (int p = 0; p < 2 && d->Format == CU_AD_FORMAT_NV12; p++) {
        struct sim_array *pl = calloc(1, sizeof *pl);
        if (!pl) {
            free(a->plane[0]);
            free(a->data);
            free(a);
            return NULL;
        }
        *pl = (struct sim_array){.magic = ARRAY_MAGIC, .dev = dev, .eb = p + 1u,
                                 .d = {d->Width >> p, d->Height >> p, 0, CU_AD_FORMAT_UNSIGNED_INT8, p + 1u, d->Flags},
                                 .data = a->data + (p ? d->Width * d->Height : 0)};
        pl->bytes = pl->d.Width * pl->d.Height * pl->eb;
        a->plane[p] = pl;
    }
    return a;
}

static CUresult array_create(void **out, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels, int mip)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!out || !d || !layout_ok(d) || (mip && d->Format == CU_AD_FORMAT_NV12))
        return CUDA_ERROR_INVALID_VALUE;
    int layered = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    if (mip) {
        /* at most one level per halving of the largest extent, the layers
         * of a layered one apart */
        size_t most = d->Width > d->Height ? d->Width : d->Height;
        if (!layered && d->Depth > most)
            most = d->Depth;
        unsigned top = 1;
        while (most >>= 1)
            top++;
        if (!levels || levels > top)
            return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t bytes;
    if (!fg_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, mip ? levels : 1, &bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t charged = fg_drv_array(sim_drv(), bytes, !d->Height && !d->Depth);
    if (sim_mem_reserve(c->dev, charged) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_array *a = NULL;
    if (mip) {
        a = calloc(1, sizeof *a);
        if (a) {
            *a = (struct sim_array){.magic = ARRAY_MAGIC, .dev = c->dev, .d = *d, .levels = levels,
                                    .eb = fg_format_bytes(d->Format) * d->NumChannels};
            a->level = calloc(levels, sizeof *a->level);
        }
        CUDA_ARRAY3D_DESCRIPTOR ld = *d;
        for (unsigned l = 0; a && a->level && l < levels; l++) {
            if (!(a->level[l] = array_new(&ld, c->dev)))
                break;
            ld.Width = ld.Width > 1 ? ld.Width / 2 : 1;
            ld.Height = ld.Height > 1 ? ld.Height / 2 : ld.Height;
            if (!layered)
                ld.Depth = ld.Depth > 1 ? ld.Depth / 2 : ld.Depth;
        }
        if (a && (!a->level || !a->level[levels - 1])) {
            for (unsigned l = 0; a->level && l < levels; l++)
                if (a->level[l])
                    free(a->level[l]->data), free(a->level[l]);
            free(a->level);
            free(a);
            a = NULL;
        }
    } else {
        a = array_new(d, c->dev);
    }
    pthread_mutex_lock(&sim_mem_lock);
    if (!a || registry_add((struct alloc){(uintptr_t)a, bytes, c->dev, K_ARRAY, c, NULL, NULL, charged, {0}, 0, 0, 0, 0}) != 0) {
        pthread_mutex_unlock(&sim_mem_lock);
        if (a) {
            a->levels = mip ? levels : 0;
            array_link(a);
            array_free(a);
        }
        sim_mem_release(c->dev, charged);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->bytes = bytes;
    array_link(a);
    for (unsigned l = 0; l < a->levels; l++)
        array_link(a->level[l]);
    for (int p = 0; p < 2; p++)
        if (a->plane[p])
            array_link(a->plane[p]);
    pthread_mutex_unlock(&sim_mem_lock);
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult array_destroy(void *h, int mip)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&sim_mem_lock);
    /* a level is its mipmapped array's to free, not the caller's */
    struct sim_array *a = array_find(h, mip);
    struct alloc *r = a ? registry_find((uintptr_t)a) : NULL;
    pthread_mutex_unlock(&sim_mem_lock);
    if (!r || r->base != (uintptr_t)a)
        return CUDA_ERROR_INVALID_HANDLE;
    return release_at((uintptr_t)h, 1u << K_ARRAY, CUDA_ERROR_INVALID_HANDLE);
}

SIM_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    SIM_GATE();
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
    return array_create((void **)pHandle, &d3, 1, 0);
}

SIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    SIM_GATE();
    return array_create((void **)pHandle, d, 1, 0);
}

SIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                           unsigned int numMipmapLevels)
{
    SIM_GATE();
    return array_create((void **)pHandle, d, numMipmapLevels, 1);
}

SIM_EXPORT CUresult cuArrayDestroy(CUarray hArray) { SIM_GATE(); return array_destroy(hArray, 0); }
SIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) { SIM_GATE(); return array_destroy(h, 1); }

SIM_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray h)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct sim_array *a = array_find(h, 0);
    if (a)
        *out = a->d;
    pthread_mutex_unlock(&sim_mem_lock);
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *out, CUarray h)
{
    SIM_GATE();
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuArray3DGetDescriptor_v2(&d, h);
    if (r == CUDA_SUCCESS)
        *out = (CUDA_ARRAY_DESCRIPTOR){d.Width, d.Height, d.Format, d.NumChannels};
    return r;
}

/* Part i of array h: a mipmapped array's level (mip), else a plane. */
static CUresult array_part(CUarray *out, const void *h, int mip, unsigned i)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct sim_array *a = array_find(h, mip);
    struct sim_array *part = !a ? NULL : mip ? (i < a->levels ? a->level[i] : NULL) : i < 2 ? a->plane[i] : NULL;
    if (part)
        *out = (CUarray)part;
    pthread_mutex_unlock(&sim_mem_lock);
    return !a ? CUDA_ERROR_INVALID_HANDLE : !part ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray h, unsigned int level)
{
    SIM_GATE();
    return array_part(pLevelArray, h, 1, level);
}

/* A two-plane array's plane: the array a program copies that plane's
 * texels through, its array's to free. */
SIM_EXPORT CUresult cuArrayGetPlane(CUarray *pPlaneArray, CUarray h, unsigned int planeIdx)
{
    SIM_GATE();
    return array_part(pPlaneArray, h, 0, planeIdx);
}

/* ---- copies and sets ---- */

/* A device pointer is valid if an allocation or a VMM mapping covers it. */
static int valid_range(CUdeviceptr p, size_t n)
{
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)p);
    int ok = a && a->kind != K_ARRAY && (uintptr_t)p + n <= a->base + a->size;
    /* Or mapped pages, of one mapping or of several mapped side by side. */
    uintptr_t at = (uintptr_t)p, end = at + n;
    for (struct mapping *m = mappings; !ok && m;) {
        if (at >= m->ptr && at < m->ptr + m->size) {
            at = m->ptr + m->size;
            ok = at >= end;
            m = mappings;
        } else {
            m = m->next;
        }
    }
    pthread_mutex_unlock(&sim_mem_lock);
    return ok;
}

int sim_valid_range(CUdeviceptr p, size_t n) { return valid_range(p, n); }

/* Whether p is in memory of a pool of host memory (the H200's driver
 * refuses it as a copy down's device source). */
static int in_host_pool(const void *p)
{
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)p);
    int host = a && a->kind == K_POOL && a->dev < 0;
    pthread_mutex_unlock(&sim_mem_lock);
    return host;
}

enum { SYNC, ASYNC };

static CUresult copy(void *dst, const void *src, size_t n, int dev_dst, int dev_src, CUstream s, int async, int pt)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if ((dev_dst && !valid_range((CUdeviceptr)(uintptr_t)dst, n)) ||
        (dev_src && !valid_range((CUdeviceptr)(uintptr_t)src, n)) || (dev_src && !dev_dst && in_host_pool(src)))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_stream *st = sim_stream_of(c, s, pt);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!async) {
        if ((r = sim_capture_check(st)) != CUDA_SUCCESS)
            return r;
        sim_stream_wait(st);
    } else if (sim_stream_captured(st)) {
        struct sim_node *node = sim_node_copy(dst, src, n);
        if (!node)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_capture_route(st, node, &r))
            return r;
        sim_node_destroy(node);
    } else if (dev_src && !dev_dst) {
        /* Bytes for the host are the stream's earlier kernels' results:
         * the caller waits for them (a GPU would return first). */
        sim_stream_wait(st);
    }
    if (n)
        memmove(dst, src, n);
    return CUDA_SUCCESS;
}

#define P(x) ((void *)(uintptr_t)(x))
SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { SIM_GATE(); return copy(P(d), h, n, 1, 0, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *h, size_t n) { SIM_GATE(); return copy(P(d), h, n, 1, 0, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { SIM_GATE(); return copy(h, P(d), n, 0, 1, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *h, CUdeviceptr d, size_t n) { SIM_GATE(); return copy(h, P(d), n, 0, 1, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { SIM_GATE(); return copy(P(d), P(s), n, 1, 1, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { SIM_GATE(); return copy(P(d), P(s), n, 1, 1, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { SIM_GATE(); return copy(P(d), P(s), n, 0, 0, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { SIM_GATE(); return copy(P(d), P(s), n, 0, 0, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream st) { SIM_GATE(); return copy(P(d), h, n, 1, 0, st, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *h, size_t n, CUstream st) { SIM_GATE(); return copy(P(d), h, n, 1, 0, st, ASYNC, 1); }
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream st) { SIM_GATE(); return copy(h, P(d), n, 0, 1, st, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *h, CUdeviceptr d, size_t n, CUstream st) { SIM_GATE(); return copy(h, P(d), n, 0, 1, st, ASYNC, 1); }
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { SIM_GATE(); return copy(P(d), P(s), n, 1, 1, st, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { SIM_GATE(); return copy(P(d), P(s), n, 1, 1, st, ASYNC, 1); }

/* Between contexts, of one device or two: the simulated devices' memory is
 * the host's, so a device copy once both contexts are known. */
static CUresult peer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st, int async, int pt)
{
    if (!sim_ctx_valid(dc) || !sim_ctx_valid(sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    return copy(P(d), P(s), n, 1, 1, st, async, pt);
}
SIM_EXPORT CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    SIM_GATE();
    return peer(d, dc, s, sc, n, NULL, SYNC, 0);
}
SIM_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    SIM_GATE();
    return peer(d, dc, s, sc, n, NULL, SYNC, 1);
}
SIM_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st)
{
    SIM_GATE();
    return peer(d, dc, s, sc, n, st, ASYNC, 0);
}
SIM_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                                           CUstream st)
{
    SIM_GATE();
    return peer(d, dc, s, sc, n, st, ASYNC, 1);
}
SIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { SIM_GATE(); return copy(P(d), P(s), n, 0, 0, st, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { SIM_GATE(); return copy(P(d), P(s), n, 0, 0, st, ASYNC, 1); }

/* A 3D copy (a 2D one is its single slice), row by row. A side is host
 * memory, device memory (checked as cuMemcpy checks, a unified address as
 * neither side) or an array, whose rows are its own: the extent must lie
 * in the array, x in bytes, y in rows, z in slices or layers. */
struct side3 {
    char *p; /* the first row's first byte */
    size_t pitch, height;
    int device;
};

static int side3_of(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t pitch, size_t height,
                    size_t x, size_t y, size_t z, const CUDA_MEMCPY3D *c, struct side3 *s)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
        const char *b = t == CU_MEMORYTYPE_HOST ? host : P(dev);
        if (!b)
            return 0;
        *s = (struct side3){(char *)b + (z * height + y) * pitch + x, pitch, height, t == CU_MEMORYTYPE_DEVICE};
        return 1;
    }
    case CU_MEMORYTYPE_ARRAY: {
        pthread_mutex_lock(&sim_mem_lock);
        struct sim_array *a = array_find(arr, 0);
        int ok = 0;
        if (a) {
            size_t row = a->d.Width * a->eb, rows = a->d.Height ? a->d.Height : 1,
                   slices = a->d.Depth ? a->d.Depth : 1;
            ok = x <= row && c->WidthInBytes <= row - x && y <= rows && c->Height <= rows - y && z <= slices &&
                 c->Depth <= slices - z;
            if (ok)
                *s = (struct side3){(char *)a->data + (z * rows + y) * row + x, row, rows, 0};
        }
        pthread_mutex_unlock(&sim_mem_lock);
        return ok;
    }
    default:
        return 0;
    }
}

/* Both sides of a valid 3D copy, or 0. */
static int sides3(const CUDA_MEMCPY3D *c, struct side3 *src, struct side3 *dst)
{
    return fg_memcpy3d_valid(c) &&
           !(c->Height > 1 && ((c->srcMemoryType != CU_MEMORYTYPE_ARRAY && c->srcPitch < c->WidthInBytes) ||
                               (c->dstMemoryType != CU_MEMORYTYPE_ARRAY && c->dstPitch < c->WidthInBytes))) &&
           side3_of(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcPitch, c->srcHeight, c->srcXInBytes,
                    c->srcY, c->srcZ, c, src) &&
           side3_of(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->dstHeight, c->dstXInBytes,
                    c->dstY, c->dstZ, c, dst);
}

static CUresult copy3d(const CUDA_MEMCPY3D *c, CUstream s, int async, int pt)
{
    struct side3 src, dst;
    if (!sides3(c, &src, &dst))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t i = 0; i < c->Height && c->WidthInBytes; i++) {
            CUresult r = copy(dst.p + (z * dst.height + i) * dst.pitch, src.p + (z * src.height + i) * src.pitch,
                              c->WidthInBytes, dst.device, src.device, s, async, pt);
            if (r)
                return r;
        }
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async, int pt)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D c3 = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost,
        .srcDevice = c->srcDevice, .srcArray = c->srcArray, .srcPitch = c->srcPitch, .srcHeight = c->Height,
        .dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost,
        .dstDevice = c->dstDevice, .dstArray = c->dstArray, .dstPitch = c->dstPitch, .dstHeight = c->Height,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = 1};
    return copy3d(&c3, s, async, pt);
}

SIM_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { SIM_GATE(); return copy2d(c, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c) { SIM_GATE(); return copy2d(c, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { SIM_GATE(); return copy2d(c, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c) { SIM_GATE(); return copy2d(c, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { SIM_GATE(); return copy2d(c, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s) { SIM_GATE(); return copy2d(c, s, ASYNC, 1); }

/* A copy with a 1D array: one row at the offset, in bytes. */
static CUresult row1d(CUmemorytype st, const void *sh, CUdeviceptr sd, CUarray sa, size_t so, CUmemorytype dt, void *dh,
                      CUdeviceptr dd, CUarray da, size_t doff, size_t n, CUstream s, int async, int pt)
{
    CUDA_MEMCPY3D q = {.srcXInBytes = so, .srcMemoryType = st, .srcHost = sh, .srcDevice = sd, .srcArray = sa,
                       .srcPitch = n, .srcHeight = 1, .dstXInBytes = doff, .dstMemoryType = dt, .dstHost = dh,
                       .dstDevice = dd, .dstArray = da, .dstPitch = n, .dstHeight = 1, .WidthInBytes = n,
                       .Height = 1, .Depth = 1};
    if (st != CU_MEMORYTYPE_ARRAY)
        q.srcXInBytes = 0;
    if (dt != CU_MEMORYTYPE_ARRAY)
        q.dstXInBytes = 0;
    return copy3d(&q, s, async, pt);
}
#define H_ CU_MEMORYTYPE_HOST
#define D_ CU_MEMORYTYPE_DEVICE
#define A_ CU_MEMORYTYPE_ARRAY
SIM_EXPORT CUresult cuMemcpyHtoA_v2(CUarray a, size_t o, const void *h, size_t n) { SIM_GATE(); return row1d(H_, h, 0, NULL, 0, A_, NULL, 0, a, o, n, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyHtoA_v2_ptds(CUarray a, size_t o, const void *h, size_t n) { SIM_GATE(); return row1d(H_, h, 0, NULL, 0, A_, NULL, 0, a, o, n, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyAtoH_v2(void *h, CUarray a, size_t o, size_t n) { SIM_GATE(); return row1d(A_, NULL, 0, a, o, H_, h, 0, NULL, 0, n, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyAtoH_v2_ptds(void *h, CUarray a, size_t o, size_t n) { SIM_GATE(); return row1d(A_, NULL, 0, a, o, H_, h, 0, NULL, 0, n, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyDtoA_v2(CUarray a, size_t o, CUdeviceptr d, size_t n) { SIM_GATE(); return row1d(D_, NULL, d, NULL, 0, A_, NULL, 0, a, o, n, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray a, size_t o, CUdeviceptr d, size_t n) { SIM_GATE(); return row1d(D_, NULL, d, NULL, 0, A_, NULL, 0, a, o, n, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr d, CUarray a, size_t o, size_t n) { SIM_GATE(); return row1d(A_, NULL, 0, a, o, D_, NULL, d, NULL, 0, n, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr d, CUarray a, size_t o, size_t n) { SIM_GATE(); return row1d(A_, NULL, 0, a, o, D_, NULL, d, NULL, 0, n, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyAtoA_v2(CUarray da, size_t doff, CUarray sa, size_t so, size_t n) { SIM_GATE(); return row1d(A_, NULL, 0, sa, so, A_, NULL, 0, da, doff, n, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpyAtoA_v2_ptds(CUarray da, size_t doff, CUarray sa, size_t so, size_t n) { SIM_GATE(); return row1d(A_, NULL, 0, sa, so, A_, NULL, 0, da, doff, n, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray a, size_t o, const void *h, size_t n, CUstream s) { SIM_GATE(); return row1d(H_, h, 0, NULL, 0, A_, NULL, 0, a, o, n, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray a, size_t o, const void *h, size_t n, CUstream s) { SIM_GATE(); return row1d(H_, h, 0, NULL, 0, A_, NULL, 0, a, o, n, s, ASYNC, 1); }
SIM_EXPORT CUresult cuMemcpyAtoHAsync_v2(void *h, CUarray a, size_t o, size_t n, CUstream s) { SIM_GATE(); return row1d(A_, NULL, 0, a, o, H_, h, 0, NULL, 0, n, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void *h, CUarray a, size_t o, size_t n, CUstream s) { SIM_GATE(); return row1d(A_, NULL, 0, a, o, H_, h, 0, NULL, 0, n, s, ASYNC, 1); }
#undef H_
#undef D_
#undef A_
CUresult sim_copy3d_check(const CUDA_MEMCPY3D *c)
{
    struct side3 src, dst;
    if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!sides3(c, &src, &dst))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t i = 0; i < c->Height && c->WidthInBytes; i++)
            if ((src.device && !valid_range((CUdeviceptr)(uintptr_t)(src.p + (z * src.height + i) * src.pitch), c->WidthInBytes)) ||
                (dst.device && !valid_range((CUdeviceptr)(uintptr_t)(dst.p + (z * dst.height + i) * dst.pitch), c->WidthInBytes)))
                return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

void sim_copy3d_run(const CUDA_MEMCPY3D *c)
{
    struct side3 src, dst;
    if (!sides3(c, &src, &dst))
        return; /* checked when the node was added */
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t i = 0; i < c->Height; i++)
            memmove(dst.p + (z * dst.height + i) * dst.pitch, src.p + (z * src.height + i) * src.pitch, c->WidthInBytes);
}

SIM_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { SIM_GATE(); return copy3d(c, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c) { SIM_GATE(); return copy3d(c, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s) { SIM_GATE(); return copy3d(c, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s) { SIM_GATE(); return copy3d(c, s, ASYNC, 1); }

static CUresult set(CUdeviceptr d, unsigned v, size_t n, size_t width, CUstream s, int async, int pt)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!valid_range(d, n * width))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_stream *st = sim_stream_of(c, s, pt);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!async) {
        if ((r = sim_capture_check(st)) != CUDA_SUCCESS)
            return r;
        sim_stream_wait(st);
    } else if (sim_stream_captured(st)) {
        struct sim_node *node = sim_node_set(P(d), v, n, width);
        if (!node)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_capture_route(st, node, &r))
            return r;
        sim_node_destroy(node);
    }
    sim_fill(P(d), v, n, width);
    return CUDA_SUCCESS;
}

/* A stream memory operation's word: 4 or 8 bytes, 0 for a barrier or a
 * flush, -1 for no operation of the driver's. */
static int op_width(CUstreamBatchMemOpType t)
{
    return t == CU_STREAM_MEM_OP_WAIT_VALUE_32 || t == CU_STREAM_MEM_OP_WRITE_VALUE_32   ? 4
           : t == CU_STREAM_MEM_OP_WAIT_VALUE_64 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8
           : t == CU_STREAM_MEM_OP_BARRIER || t == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES  ? 0
                                                                                          : -1;
}

static int is_wait(CUstreamBatchMemOpType t)
{
    return t == CU_STREAM_MEM_OP_WAIT_VALUE_32 || t == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}

/* Whether a wait's word meets its condition now. */
static int met(const struct CUstreamMemOpWaitValueParams_st *w, size_t width)
{
    unsigned cond = w->flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH;
    uint64_t v = width == 4 ? w->value : w->value64, x = 0;
    memcpy(&x, P(w->address), width); /* little-endian: the low word for 32 bits */
    return cond == CU_STREAM_WAIT_VALUE_EQ    ? x == v
           : cond == CU_STREAM_WAIT_VALUE_AND ? (x & v) != 0
           : cond == CU_STREAM_WAIT_VALUE_NOR ? (~(x | v) & (width == 4 ? 0xffffffffu : ~0ull)) != 0
           : width == 4                       ? (int32_t)((uint32_t)x - (uint32_t)v) >= 0
                                              : (int64_t)(x - v) >= 0;
}

CUresult sim_memops_check(unsigned int count, const CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    if (flags || !count || count > 256 || !ops)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count; i++) {
        const struct CUstreamMemOpWaitValueParams_st *w = &ops[i].waitValue;
        int width = op_width(w->operation);
        unsigned cond = w->flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH;
        if (width < 0 || (width && (w->address % (unsigned)width || !valid_range(w->address, (size_t)width))))
            return CUDA_ERROR_INVALID_VALUE;
        if (width && (is_wait(w->operation) ? cond > CU_STREAM_WAIT_VALUE_NOR
                                             : w->flags > CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER))
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Checked operations made in order from *at: writes at once, as memsets
 * are; stops at a wait not met (wait) and returns 0. A word freed since
 * is passed over: a GPU would fault, asynchronously. */
static int run_ops(unsigned int count, const CUstreamBatchMemOpParams *ops, unsigned *at, int wait)
{
    for (; *at < count; ++*at) {
        const struct CUstreamMemOpWaitValueParams_st *w = &ops[*at].waitValue;
        int width = op_width(w->operation);
        if (width <= 0 || !valid_range(w->address, (size_t)width))
            continue; /* a barrier, a flush: the writes are made at once */
        if (is_wait(w->operation) && wait && !met(w, (size_t)width))
            return 0;
        if (!is_wait(w->operation))
            memcpy(P(w->address), width == 4 ? (const void *)&ops[*at].writeValue.value
                                             : (const void *)&ops[*at].writeValue.value64, (size_t)width);
    }
    return 1;
}

void sim_memops_apply(unsigned int count, const CUstreamBatchMemOpParams *ops)
{
    unsigned at = 0;
    run_ops(count, ops, &at, 0);
}

/* What is left of a batch whose wait is not met yet: its stream waits
 * there, and the rest is made once the wait is met. */
struct ops_left {
    unsigned count, at;
    CUstreamBatchMemOpParams ops[];
};

static int ops_go_on(void *arg)
{
    struct ops_left *o = arg;
    return run_ops(o->count, o->ops, &o->at, 1);
}

/* Checked operations in s: made, or captured into a batch memory operation
 * node of the stream's capture. */
static CUresult memops(CUstream s, unsigned int count, const CUstreamBatchMemOpParams *ops, int pt)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    struct sim_stream *st = sim_stream_of(c, s, pt);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (sim_stream_captured(st)) {
        struct sim_node *n = count <= SIM_MEMOP_NODE_OPS ? sim_node_memops((CUcontext)c, count, ops) : NULL;
        if (!n)
            return count <= SIM_MEMOP_NODE_OPS ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
        if (sim_capture_route(st, n, &r))
            return r;
        sim_node_destroy(n);
    }
    unsigned at = 0;
    if (run_ops(count, ops, &at, 1))
        return CUDA_SUCCESS;
    struct ops_left *o = malloc(sizeof *o + count * sizeof *ops);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->count = count;
    o->at = at;
    memcpy(o->ops, ops, count * sizeof *ops);
    if (sim_host_wait_until(st, ops_go_on, o))
        return CUDA_SUCCESS;
    free(o);
    return CUDA_ERROR_NOT_SUPPORTED; /* no thread to wait with */
}

/* One operation on a word of width bytes at addr. */
static CUresult one_op(CUstream s, CUstreamBatchMemOpType t, CUdeviceptr addr, uint64_t v, unsigned flags, int pt)
{
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof op);
    op.waitValue.operation = t;
    op.waitValue.address = addr;
    op.waitValue.flags = flags;
    if (op_width(t) == 4)
        op.waitValue.value = (cuuint32_t)v;
    else
        op.waitValue.value64 = v;
    CUresult r = sim_memops_check(1, &op, 0);
    return r ? r : memops(s, 1, &op, pt);
}

static CUresult write_value(CUstream s, CUdeviceptr addr, uint64_t v, size_t width, unsigned flags, int pt)
{
    return one_op(s, width == 4 ? CU_STREAM_MEM_OP_WRITE_VALUE_32 : CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, v, flags,
                  pt);
}

SIM_EXPORT CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
    SIM_GATE();
    return write_value(s, addr, v, 4, flags, 0);
}

SIM_EXPORT CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
    SIM_GATE();
    return write_value(s, addr, v, 8, flags, 0);
}

static CUresult wait_value(CUstream s, CUdeviceptr addr, uint64_t v, size_t width, unsigned flags, int pt)
{
    return one_op(s, width == 4 ? CU_STREAM_MEM_OP_WAIT_VALUE_32 : CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, v, flags,
                  pt);
}

SIM_EXPORT CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
    SIM_GATE();
    return wait_value(s, addr, v, 4, flags, 0);
}

SIM_EXPORT CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
    SIM_GATE();
    return wait_value(s, addr, v, 8, flags, 0);
}

/* Batched copies, one cuMemcpyAsync each (flexgv/memcpy_batch.h), or one
 * cuMemcpy3DAsync each (flexgv/memcpy3d_batch.h); 3D copies between
 * contexts as cuMemcpy3D (flexgv/memcpy3d_peer.h). */
FG_MEMCPY_BATCH_ENTRIES(SIM_EXPORT, cuMemcpyAsync, cuMemcpyAsync_ptsz)
FG_MEMCPY3D_BATCH_ENTRIES(SIM_EXPORT, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz)
FG_MEMCPY3D_PEER_ENTRIES(SIM_EXPORT, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz)

/* A batch: every operation checked first, then made in order. */
SIM_EXPORT CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                          unsigned int flags)
{
    SIM_GATE();
    CUresult r = sim_memops_check(count, ops, flags);
    return r ? r : memops(s, count, ops, 0);
}

void sim_fill(void *dst, unsigned v, size_t n, size_t width)
{
    if (width == 1) {
        memset(dst, (int)(v & 0xff), n);
    } else if (width == 2) {
        uint16_t *p = dst;
        for (size_t i = 0; i < n; i++)
            p[i] = (uint16_t)v;
    } else {
        uint32_t *p = dst;
        for (size_t i = 0; i < n; i++)
            p[i] = v;
    }
}

/* Row by row: each row is a memset of its own (a node each in a capture). */
static CUresult set2d(CUdeviceptr d, size_t pitch, unsigned v, size_t w, size_t h, size_t width, CUstream s, int async,
                      int pt)
{
    if (h > 1 && pitch < w * width)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t y = 0; y < h; y++) {
        CUresult r = set(d + y * pitch, v, w, width, s, async, pt);
        if (r)
            return r;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char uc, size_t n) { SIM_GATE(); return set(d, uc, n, 1, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char uc, size_t n) { SIM_GATE(); return set(d, uc, n, 1, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int ui, size_t n) { SIM_GATE(); return set(d, ui, n, 4, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int ui, size_t n) { SIM_GATE(); return set(d, ui, n, 4, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char uc, size_t n, CUstream s) { SIM_GATE(); return set(d, uc, n, 1, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char uc, size_t n, CUstream s) { SIM_GATE(); return set(d, uc, n, 1, s, ASYNC, 1); }
SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int ui, size_t n, CUstream s) { SIM_GATE(); return set(d, ui, n, 4, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int ui, size_t n, CUstream s) { SIM_GATE(); return set(d, ui, n, 4, s, ASYNC, 1); }
SIM_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short us, size_t n) { SIM_GATE(); return set(d, us, n, 2, NULL, SYNC, 0); }
SIM_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short us, size_t n) { SIM_GATE(); return set(d, us, n, 2, NULL, SYNC, 1); }
SIM_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short us, size_t n, CUstream s) { SIM_GATE(); return set(d, us, n, 2, s, ASYNC, 0); }
SIM_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short us, size_t n, CUstream s) { SIM_GATE(); return set(d, us, n, 2, s, ASYNC, 1); }

#define SET2D(name, type, width, sync, pt)                                                                      \
    SIM_EXPORT CUresult name(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h)                           \
    {                                                                                                           \
        return set2d(d, pitch, v, w, h, width, NULL, sync, pt);                                                 \
    }
#define SET2D_ASYNC(name, type, width, pt)                                                                      \
    SIM_EXPORT CUresult name(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s)               \
    {                                                                                                           \
        return set2d(d, pitch, v, w, h, width, s, ASYNC, pt);                                                   \
    }
SET2D(cuMemsetD2D8_v2, unsigned char, 1, SYNC, 0)
SET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, SYNC, 1)
SET2D(cuMemsetD2D16_v2, unsigned short, 2, SYNC, 0)
SET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, SYNC, 1)
SET2D(cuMemsetD2D32_v2, unsigned int, 4, SYNC, 0)
SET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, SYNC, 1)
SET2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1, 0)
SET2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1, 1)
SET2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2, 0)
SET2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2, 1)
SET2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4, 0)
SET2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4, 1)

/* ---- pointer attributes ---- */

/* What a driver says of memory it allocated; INVALID_VALUE for memory it
 * does not know, NOT_SUPPORTED for what the simulated GPU does not model. */
/* What the driver answers of memory it knows (flexgv/pointer_attrs.h):
 * pinned host memory and registered ranges are host memory, device, pool
 * and managed memory device memory. */
SIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)ptr);
    struct alloc found = a ? *a : (struct alloc){0};
    /* Memory mapped by pages: device memory, the mapping its range. */
    for (struct mapping *m = mappings; !a && m; m = m->next)
        if ((uintptr_t)ptr >= m->ptr && (uintptr_t)ptr < m->ptr + m->size) {
            found = (struct alloc){m->ptr, m->size, m->h->dev, K_DEVICE, NULL, NULL, NULL, 0, {0}, 0, 0, 0, m->ptr};
            a = &found;
        }
    pthread_mutex_unlock(&sim_mem_lock);
    if (!a || found.kind == K_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_pointer_facts f = {
        .ctx = found.pool ? NULL : (CUcontext)found.ctx,
        .pool = (CUmemoryPool)found.pool,
        .base = found.base,
        .size = found.size,
        .id = found.id,
        .mapping = found.kind == K_REGISTERED ? found.size : found.pool ? 32u << 20 : 2u << 20,
        .dev = found.dev < 0 ? 0 : found.dev,
        .host = found.kind == K_HOST || found.kind == K_REGISTERED || found.dev < 0,
        .managed = found.kind == K_MANAGED,
        .device = found.kind == K_DEVICE || found.kind == K_OPENED,
        .sync_memops = found.sync_memops,
    };
    return fg_pointer_attr(attribute, data, ptr, &f);
}

/* The one attribute a program may set: synchronous memory operations on
 * device memory the driver allocated or mapped (0 or 1, as it keeps it). */
SIM_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned v = *(const unsigned *)value != 0;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)ptr);
    if (a && a->kind == K_DEVICE) {
        a->sync_memops = v;
        r = CUDA_SUCCESS;
    }
    /* Mapped pages refuse it, as the H200's driver does. */
    for (struct mapping *m = mappings; !a && m; m = m->next)
        if ((uintptr_t)ptr >= m->ptr && (uintptr_t)ptr < m->ptr + m->size)
            r = CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_unlock(&sim_mem_lock);
    return r;
}

/* Every attribute at once: of memory it knows, what one lacks reads as
 * zeroes; of memory it does not, the driver's defaults. */
SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)
{
    if (n && (!attributes || !data))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned type;
    int known = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == CUDA_SUCCESS;
    for (unsigned i = 0; i < n; i++) {
        if (!data[i] || !fg_pointer_attr_size(attributes[i]))
            return CUDA_ERROR_INVALID_VALUE;
        if (!known) {
            fg_pointer_attr_unknown(attributes[i], data[i], ptr);
            continue;
        }
        CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr);
        if (r == CUDA_ERROR_INVALID_VALUE)
            memset(data[i], 0, fg_pointer_attr_size(attributes[i]));
        else if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* The driver's legacy IPC: cuMemAlloc memory named to another process. An
 * allocation is anonymous memory of this process until it is exported: its
 * bytes then move into a memfd mapped at the same address (after the
 * device's work is done), which the handle names by this process's id and
 * the descriptor's number, and another process maps from /proc. Events
 * are timelines of this process: none travel. */
#define IPC_MAGIC 0x49534746u /* "FGSI" */

struct ipc_handle {
    uint32_t magic;
    int32_t pid, fd, dev;
    uint64_t size;
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(CUipcMemHandle), "a handle fits");

SIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    sim_ctx_sync(c);
    pthread_mutex_lock(&sim_mem_lock);
    struct alloc *a = registry_find((uintptr_t)dptr);
    if (!a || a->kind != K_DEVICE) {
        pthread_mutex_unlock(&sim_mem_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!a->shared) {
        int fd = (int)syscall(SYS_memfd_create, "flexgv-sim-ipc", 1u /* MFD_CLOEXEC */);
        if (fd < 0 || ftruncate(fd, (off_t)a->size) != 0 || pwrite(fd, (void *)a->base, a->size, 0) != (ssize_t)a->size ||
            mmap((void *)a->base, a->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
            if (fd >= 0)
                close(fd);
            pthread_mutex_unlock(&sim_mem_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        a->shared = fd + 1;
    }
    struct ipc_handle h = {IPC_MAGIC, (int32_t)getpid(), a->shared - 1, a->dev, a->size};
    pthread_mutex_unlock(&sim_mem_lock);
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle, &h, sizeof h);
    return CUDA_SUCCESS;
}

/* The allocation's start, mapped here, as the driver opens it. */
SIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    struct ipc_handle h;
    memcpy(&h, &handle, sizeof h);
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) || h.magic != IPC_MAGIC || h.pid <= 0 ||
        h.fd < 0 || !h.size)
        return CUDA_ERROR_INVALID_VALUE;
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    int fd = n > 0 ? open(path, O_RDWR | O_CLOEXEC) : -1;
    struct stat st;
    if (n > 0)
        target[n] = 0;
    /* gone with its allocation, or the number another file's since */
    if (fd < 0 || strncmp(target, "/memfd:flexgv-sim-ipc", 21) || fstat(fd, &st) != 0 || (uint64_t)st.st_size != h.size) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    void *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&sim_mem_lock);
    int rc = registry_add((struct alloc){(uintptr_t)p, h.size, h.dev, K_OPENED, c, NULL, NULL, 0, {0}, 0, 0, 0, 0});
    pthread_mutex_unlock(&sim_mem_lock);
    if (rc != 0) {
        munmap(p, h.size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    SIM_GATE();
    return release_at((uintptr_t)dptr, 1u << K_OPENED, CUDA_ERROR_INVALID_VALUE);
}

SIM_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    (void)pHandle, (void)event;
    return CUDA_ERROR_NOT_SUPPORTED;
}
SIM_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    (void)phEvent, (void)handle;
    return CUDA_ERROR_NOT_SUPPORTED;
}
