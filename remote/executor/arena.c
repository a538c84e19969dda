/* Device memory at addresses the client chooses (remote/client/arena.c).
 * The executor reserves one range of device addresses for the connection;
 * the client names where in it an allocation goes, and the executor backs
 * that many whole pages with physical memory of the request context's
 * device (cuMemCreate, cuMemMap, cuMemSetAccess for it and every device
 * that can reach it, as cuMemAlloc memory is reachable from peers). A
 * client can only map inside its range, over nothing already mapped. The
 * executor's checks of device addresses go by allocation, as the client
 * says of each (several share a page), so that a copy past one's end is
 * refused as the driver refuses it for cuMemAlloc memory.
 *
 * Such memory is not freed with a context by the driver, as cuMemAlloc's
 * is: a context destroyed, or a primary context reset or released for the
 * last time, takes its mappings here. Freeing one waits for its context
 * first, as cuMemFree does (unmapping does not wait). */
#include "executor.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_MAX (1ull << 46) /* bytes of addresses a client may ask for */
#define NOTE_STEP 512u
#define MAX_DEVICES 64

static struct {
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*ctx_device)(CUdevice *);
    CUresult (*count)(int *);
    CUresult (*ctx_sync)(void);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*primary_state)(CUdevice, unsigned int *, int *);
    /* the operations wrapped here */
    CUresult (*ctx_destroy)(CUcontext);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*primary_reset)(CUdevice);
} d;

/* Optional: without it, memory is reachable from its own device only. */
static CUresult (*can_peer)(int *, CUdevice, CUdevice);

static uint64_t base, size, page;

/* made: the kept requests (journal.c) that a new executor makes the
 * mapping again with, while it lives: the one that mapped it, and once the
 * allocation that request placed at its start is freed, that free (first:
 * not yet), else the mapping would come back holding it. */
static struct map {
    uint64_t base, size, ctx;
    CUmemGenericAllocationHandle h;
    struct fgr_link *made;
    int first;
} *maps; /* sorted by base */
static size_t nmaps, capmaps;

static CUcontext primary[MAX_DEVICES]; /* as the driver last gave each */

/* The index of the first mapping that ends above p. */
static size_t first_above(uint64_t p)
{
    size_t lo = 0, hi = nmaps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (maps[mid].base + maps[mid].size <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static CUresult arena_reserve(CUdeviceptr hint, size_t want, CUdeviceptr *pbase, size_t *ppage)
{
    if (!pbase || !ppage || want == 0 || want > ARENA_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (base) { /* one per connection */
        *pbase = base;
        *ppage = page;
        return CUDA_SUCCESS;
    }
    int n = 0;
    CUresult r = d.count(&n);
    if (r != CUDA_SUCCESS)
        return r;
    size_t g = 0;
    for (int i = 0; i < n; i++) {
        CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {CU_MEM_LOCATION_TYPE_DEVICE, i}};
        size_t gi = 0;
        if ((r = d.granularity(&gi, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS)
            return r;
        if (gi > g)
            g = gi;
    }
    if (g == 0 || (g & (g - 1)))
        return CUDA_ERROR_NOT_SUPPORTED;
    uint64_t s = (want + g - 1) / g * g;
    CUdeviceptr b = 0;
    /* Where the client asked, if the driver can; elsewhere otherwise (the
     * client learns where). */
    if ((hint % g || d.reserve(&b, s, g, hint, 0) != CUDA_SUCCESS) && (r = d.reserve(&b, s, g, 0, 0)) != CUDA_SUCCESS)
        return r;
    base = b;
    size = s;
    page = g;
    fgr_journal_patch(0, b); /* a new executor of a moved connection asks here */
    *pbase = b;
    *ppage = g;
    return CUDA_SUCCESS;
}

/* Whether [p, p+n) is whole pages of the range with nothing mapped. */
static int fits(uint64_t p, uint64_t n)
{
    if (!base || n == 0 || p % page || n % page || p < base || p - base > size || n > size - (p - base))
        return 0;
    size_t i = first_above(p);
    return i == nmaps || maps[i].base >= p + n;
}

/* Maps physical memory h at [p, p+n) of the range, over nothing mapped,
 * reachable from the request context's device and its peers. */
CUresult fgr_arena_map_handle(CUdeviceptr p, size_t n, CUmemGenericAllocationHandle h)
{
    if (!fits(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    size_t i = first_above(p);
    if (nmaps == capmaps) {
        size_t c = capmaps ? 2 * capmaps : 64;
        struct map *m = realloc(maps, c * sizeof *m);
        if (!m)
            return CUDA_ERROR_OUT_OF_MEMORY;
        maps = m;
        capmaps = c;
    }
    CUdevice dev;
    int ndev = 0;
    CUresult r = d.ctx_device(&dev);
    if (r == CUDA_SUCCESS)
        r = d.count(&ndev);
    if (r != CUDA_SUCCESS || (r = d.map(p, n, 0, h, 0)) != CUDA_SUCCESS)
        return r;
    CUmemAccessDesc acc[MAX_DEVICES];
    size_t k = 0;
    for (int e = 0; e < ndev && k < MAX_DEVICES; e++) {
        int peer = e == dev;
        if (!peer && (!can_peer || can_peer(&peer, e, dev) != CUDA_SUCCESS))
            peer = 0;
        if (peer)
            acc[k++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, e}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
    if ((r = d.access(p, n, acc, k)) != CUDA_SUCCESS) {
        d.unmap(p, n);
        return r;
    }
    memmove(&maps[i + 1], &maps[i], (nmaps - i) * sizeof *maps);
    maps[i] = (struct map){p, n, fgr_ctx, h, fgr_journal_attach(NULL), 1};
    nmaps++;
    return CUDA_SUCCESS;
}

static CUresult arena_map(CUdeviceptr p, size_t n, size_t used)
{
    if (used == 0 || used > n || !fits(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    CUdevice dev;
    CUresult r = d.ctx_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    /* Exportable, so that another program of the host can open it
     * (cuIpcGetMemHandle, ipc.c); as the driver's own where it cannot. */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {CU_MEM_LOCATION_TYPE_DEVICE, dev}};
    CUmemGenericAllocationHandle h;
    if ((r = d.create(&h, n, &prop, 0)) == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) {
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = d.create(&h, n, &prop, 0);
    }
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = fgr_arena_map_handle(p, n, h)) != CUDA_SUCCESS) {
        d.release(h);
        return r;
    }
    fgr_mem_add(p, used, FGR_H_CUcontext, fgr_ctx);
    return CUDA_SUCCESS;
}

/* The physical memory mapped at block (the start of a mapping), and its
 * size: 0, or -1 where no mapping starts there. */
int fgr_arena_block(uint64_t block, uint64_t *n, CUmemGenericAllocationHandle *h)
{
    size_t i = first_above(block);
    if (i == nmaps || maps[i].base != block)
        return -1;
    *n = maps[i].size;
    *h = maps[i].h;
    return 0;
}

/* The mapping holding [p, p+n), or nmaps. */
static size_t holding(uint64_t p, uint64_t n)
{
    size_t i = first_above(p);
    return i < nmaps && maps[i].base <= p && n <= maps[i].base + maps[i].size - p ? i : nmaps;
}

int fgr_arena_holding(uint64_t p, uint64_t n, uint64_t *block)
{
    size_t i = holding(p, n);
    if (i == nmaps)
        return -1;
    *block = maps[i].base;
    return 0;
}

/* An allocation the client placed in memory mapped: the connection's
 * from now on, as far as the executor's checks go. At 512-byte steps, as
 * the client places them: a page holds a bounded number. */
static CUresult arena_note(CUdeviceptr p, size_t n)
{
    size_t i = holding(p, n);
    if (n == 0 || p % NOTE_STEP || i == nmaps || !fgr_mem_clear(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    fgr_mem_add(p, n, FGR_H_CUcontext, maps[i].ctx);
    return CUDA_SUCCESS;
}

static void unmap_at(size_t i)
{
    fgr_ipc_forget(maps[i].base, maps[i].base + maps[i].size);
    fgr_journal_detach(maps[i].made);
    d.unmap(maps[i].base, maps[i].size);
    d.release(maps[i].h);
    fgr_mem_drop_within(maps[i].base, maps[i].base + maps[i].size);
    memmove(&maps[i], &maps[i + 1], (nmaps - i - 1) * sizeof *maps);
    nmaps--;
}

static CUresult arena_free(CUdeviceptr p, unsigned int unmap)
{
    size_t i = holding(p, 1);
    if (!p || i == nmaps || !fgr_mem_base(p))
        return CUDA_ERROR_INVALID_VALUE;
    fgr_drop(FGR_H_MEM, p);
    fgr_ipc_forget(p, p + 1);
    if (!unmap && p == maps[i].base && maps[i].first) {
        maps[i].made = fgr_journal_attach(maps[i].made);
        maps[i].first = 0;
    }
    CUresult r;
    CUcontext c = (CUcontext)(uintptr_t)maps[i].ctx;
    if (maps[i].ctx == fgr_ctx) {
        r = d.ctx_sync();
    } else if ((r = d.push(c)) == CUDA_SUCCESS) {
        r = d.ctx_sync();
        d.pop(&c);
    }
    /* Freed even when the wait reports an earlier launch's error. */
    if (unmap)
        unmap_at(i);
    return r;
}

/* A context gone: its memory with it, its mapped host memory, and what
 * the connection made in it (streams, events, modules, ...), which the
 * driver freed: their names are refused from then on, never handed to
 * the driver. */
static void forget(uint64_t ctx, CUresult why)
{
    for (size_t i = 0; i < nmaps;)
        if (maps[i].ctx == ctx)
            unmap_at(i);
        else
            i++;
    fgr_hostmem_forget(ctx);
    fgr_hostcopy_forget(ctx);
    fgr_drop_with_context(ctx, why);
}

static CUresult ctx_destroy(CUcontext c)
{
    CUresult r = d.ctx_destroy(c);
    if (r == CUDA_SUCCESS)
        forget((uint64_t)(uintptr_t)c, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    return r;
}

static CUresult primary_retain(CUcontext *pc, CUdevice dev)
{
    CUresult r = d.primary_retain(pc, dev);
    if (r == CUDA_SUCCESS && pc && dev >= 0 && dev < MAX_DEVICES) {
        /* brought back under another handle: the gone one's name goes */
        uint64_t was = (uint64_t)(uintptr_t)primary[dev];
        if (was && *pc != primary[dev] && fgr_context_is_idle(was))
            fgr_drop(FGR_H_CUcontext, was);
        primary[dev] = *pc;
    }
    return r;
}

/* A primary context gone (reset, or released by its last holder): what it
 * held; its handle is the device's again once retained. */
static void primary_gone(CUdevice dev)
{
    uint64_t ctx = (uint64_t)(uintptr_t)primary[dev];
    forget(ctx, CUDA_ERROR_INVALID_CONTEXT);
    fgr_context_idle(ctx);
}

static CUresult primary_reset(CUdevice dev)
{
    CUresult r = d.primary_reset(dev);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < MAX_DEVICES)
        primary_gone(dev);
    return r;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult r = d.primary_release(dev);
    unsigned int flags;
    int active = 1;
    if (r == CUDA_SUCCESS && dev >= 0 && dev < MAX_DEVICES && d.primary_state(dev, &flags, &active) == CUDA_SUCCESS &&
        !active)
        primary_gone(dev);
    return r;
}

/* Natively only cuMemMap's memory has a handle; the range's pages, which
 * hold cuMemAlloc's, are the executor's own, so the client is answered as
 * the driver answers for cuMemAlloc memory. A handle retained again counts
 * one more cuMemRelease before the connection loses it. */
static CUresult (*real_retain)(CUmemGenericAllocationHandle *, void *);
static CUresult retain_handle(CUmemGenericAllocationHandle *h, void *addr)
{
    if ((uint64_t)(uintptr_t)addr - base < size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = real_retain(h, addr);
    if (r == CUDA_SUCCESS && h && fgr_has(FGR_H_CUmemGenericAllocationHandle, *h))
        fgr_retain(FGR_H_CUmemGenericAllocationHandle, *h);
    return r;
}

void fgr_arena_init(void *driver)
{
    real_retain = fgr_real[FGR_OP_cuMemRetainAllocationHandle];
    if (real_retain)
        fgr_real[FGR_OP_cuMemRetainAllocationHandle] = (void *)retain_handle;
#define SYM(f, name) (*(void **)&d.f = dlsym(driver, name))
    SYM(reserve, "cuMemAddressReserve");
    SYM(granularity, "cuMemGetAllocationGranularity");
    SYM(create, "cuMemCreate");
    SYM(release, "cuMemRelease");
    SYM(map, "cuMemMap");
    SYM(unmap, "cuMemUnmap");
    SYM(access, "cuMemSetAccess");
    SYM(ctx_device, "cuCtxGetDevice");
    SYM(count, "cuDeviceGetCount");
    SYM(ctx_sync, "cuCtxSynchronize");
    SYM(push, "cuCtxPushCurrent_v2");
    SYM(pop, "cuCtxPopCurrent_v2");
    SYM(primary_state, "cuDevicePrimaryCtxGetState");
#undef SYM
    *(void **)&can_peer = dlsym(driver, "cuDeviceCanAccessPeer");
    d.ctx_destroy = fgr_real[FGR_OP_cuCtxDestroy_v2];
    d.primary_retain = fgr_real[FGR_OP_cuDevicePrimaryCtxRetain];
    d.primary_release = fgr_real[FGR_OP_cuDevicePrimaryCtxRelease_v2];
    d.primary_reset = fgr_real[FGR_OP_cuDevicePrimaryCtxReset_v2];
    /* Contexts are followed where the driver has them, with or without
     * the arena: what ends with one is forgotten (forget). */
    if (d.ctx_destroy && d.primary_retain && d.primary_release && d.primary_reset && d.primary_state) {
        fgr_real[FGR_OP_cuCtxDestroy_v2] = (void *)ctx_destroy;
        fgr_real[FGR_OP_cuDevicePrimaryCtxRetain] = (void *)primary_retain;
        fgr_real[FGR_OP_cuDevicePrimaryCtxRelease_v2] = (void *)primary_release;
        fgr_real[FGR_OP_cuDevicePrimaryCtxReset_v2] = (void *)primary_reset;
    }
    for (size_t i = 0; i < sizeof d / sizeof(void *); i++)
        if (!((void **)&d)[i])
            return; /* the operations stay unsupported: the client allocates as before */
    fgr_real[FGR_OP_fgrArenaReserve] = (void *)arena_reserve;
    fgr_real[FGR_OP_fgrArenaMap] = (void *)arena_map;
    fgr_real[FGR_OP_fgrArenaNote] = (void *)arena_note;
    fgr_real[FGR_OP_fgrArenaFree] = (void *)arena_free;
}
