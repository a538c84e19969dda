/* Device memory at addresses the client chooses (remote/executor/arena.c).
 * At the first cuMemAlloc the client picks a range of addresses free in
 * its own process (twice its devices' memory), keeps it reserved there,
 * and asks the executor to reserve the same range of device addresses;
 * where the server's driver puts it elsewhere, the client takes that one
 * instead when it is free here too. Allocations are then placed by the
 * client: pointers need no translation, a pointer is never also one of
 * the program's host addresses (so cudaMemcpyDefault tells them apart),
 * and an allocation that fits in memory already mapped costs no round
 * trip.
 *
 * The executor maps whole pages (2 MiB on current GPUs): an allocation of
 * more than a page gets pages of its own; others share a page (a slab) in
 * 512-byte units, as the driver's own small allocations do, and a context
 * keeps one emptied slab for its next ones. Freeing waits for
 * the allocation's context (cuMemFree does), under the lock, so that no
 * other thread is given the memory before that. A context destroyed or
 * reset takes its allocations with it, here and on the executor.
 *
 * A range fragmented past use leaves the allocation to the server's driver
 * (its address is then outside the range). FLEXGV_REMOTE_ARENA=off leaves
 * every one to it, as does a server without the operations; a number of
 * bytes sets the range's size. */
#include "client.h"
#include "../ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define UNIT 512u
#define GIB (1ull << 30)
#define SLICE (64ull << 20)      /* the range is a whole number of these */
#define RANGE_MAX (1ull << 46)   /* what the executor reserves at most */
#define FAR (1ull << 44) /* 16 TiB: where the range is asked for first */

struct alloc {
    uint64_t off, len, id; /* off: in its block */
    unsigned int sync_memops; /* CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, kept here */
};
struct slab {
    struct alloc *a; /* sorted by off */
    int n, cap;
    uint64_t fail; /* no gap of this many bytes or more (until a free) */
};
struct block {
    CUcontext ctx;
    struct slab *slab; /* NULL: one allocation (one.off into the block) */
    struct alloc one;
    int ipc; /* pages another program exported, opened here */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int state;                 /* 0: not asked yet, 1: ready, -1: the server's driver places */
static uint64_t base, size, page;
static int held_here;             /* the range is reserved in this process too */
static struct fgr_heap_range *br; /* blocks, by offset from base */
static struct block *bk;
static int nb, capb;
static uint64_t ids;

static void say_off(const char *why, CUresult r)
{
    fgr_say("device memory is placed by the server's driver: %s (error %d)", why, (int)r);
    state = -1;
}

/* The range, reserved here and on the executor (under lock). */
static int ready(void)
{
    if (state)
        return state > 0;
    const char *e = getenv("FLEXGV_REMOTE_ARENA");
    uint64_t want = 0, hint = 0;
    if (e && !strcmp(e, "off")) {
        state = -1;
        return 0;
    }
    if (e && *e && strcmp(e, "on")) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 10);
        if (errno || *end || *e == '-' || v < SLICE || v > RANGE_MAX) {
            say_off("FLEXGV_REMOTE_ARENA is neither on, off nor a number of bytes from 64 MiB to 64 TiB",
                    CUDA_ERROR_INVALID_VALUE);
            return 0;
        }
        want = v;
    } else {
        int n = 0;
        uint64_t total = 0;
        CUresult r = cuDeviceGetCount(&n);
        for (int i = 0; r == CUDA_SUCCESS && i < n; i++) {
            size_t t = 0;
            r = cuDeviceTotalMem_v2(&t, i);
            total += t;
        }
        if (r != CUDA_SUCCESS || total == 0 || total > RANGE_MAX / 2) {
            say_off("the devices' memory is unknown", r);
            return 0;
        }
        want = 2 * total;
    }
    want = (want + SLICE - 1) / SLICE * SLICE;
    /* Far from where either process maps its libraries and heap (near the
     * top of the address space and just above the program), so that the
     * executor is likely to have it free too; else where this process has
     * room. */
    void *here = mmap((void *)(uintptr_t)FAR, want, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (here == (void *)(uintptr_t)FAR) {
        hint = FAR;
    } else {
        if (here != MAP_FAILED)
            munmap(here, want); /* a kernel that took it as a hint */
        here = mmap(NULL, want + GIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (here != MAP_FAILED) {
            hint = ((uint64_t)(uintptr_t)here + GIB - 1) / GIB * GIB;
            munmap(here, hint - (uint64_t)(uintptr_t)here);
            munmap((void *)(uintptr_t)(hint + want), (uint64_t)(uintptr_t)here + GIB - hint);
        }
    }
    CUdeviceptr b = 0;
    size_t pg = 0;
    CUresult r = fgrArenaReserve(hint, want, &b, &pg);
    if (r != CUDA_SUCCESS || !b || pg < UNIT || pg > SLICE || (pg & (pg - 1)) || b % pg) {
        if (hint)
            munmap((void *)(uintptr_t)hint, want);
        say_off("the server reserves no addresses for it", r == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : r);
        return 0;
    }
    size = want; /* a whole number of pages: pages are powers of two up to a slice */
    if (b != hint && hint) {
        munmap((void *)(uintptr_t)hint, want);
        void *at = mmap((void *)(uintptr_t)b, size, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        held_here = at == (void *)(uintptr_t)b;
        if (at != MAP_FAILED && !held_here)
            munmap(at, size); /* a kernel without MAP_FIXED_NOREPLACE put it elsewhere */
    } else {
        held_here = hint != 0;
    }
    base = b;
    page = pg;
    __atomic_store_n(&state, 1, __ATOMIC_RELEASE); /* in_range reads it without the lock */
    /* Where the program's own memory cannot be, the whole range is the
     * device's; elsewhere, each block as it is mapped. */
    if (held_here)
        fgr_range_add(base, size);
    return 1;
}

static int room(void)
{
    if (nb < capb)
        return 1;
    int c = capb ? 2 * capb : 64;
    struct fgr_heap_range *r = realloc(br, (size_t)c * sizeof *r);
    if (r)
        br = r;
    struct block *k = r ? realloc(bk, (size_t)c * sizeof *k) : NULL;
    if (!k)
        return 0;
    bk = k;
    capb = c;
    return 1;
}

/* What map_block answers when no gap in the range holds the pages: the
 * allocation is then the server driver's to place. */
#define RANGE_FULL ((CUresult)-1)

/* Maps n bytes (whole pages) at the first gap that holds them, for ctx,
 * the first used bytes an allocation: the new block's index, or -1 with *r
 * the reason. */
static int map_block(uint64_t n, uint64_t used, CUcontext ctx, CUresult *r, const CUipcMemHandle *ipc)
{
    uint64_t at = 0;
    int i = 0;
    for (; i < nb && br[i].off - at < n; i++)
        at = br[i].off + br[i].n;
    if (n > size || at > size - n) {
        *r = RANGE_FULL;
        return -1;
    }
    if (!room()) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return -1;
    }
    CUdeviceptr opened;
    if ((*r = ipc ? fgrIpcOpen(ipc, base + at, &opened) : fgrArenaMap(base + at, n, used)) != CUDA_SUCCESS)
        return -1;
    memmove(&br[i + 1], &br[i], (size_t)(nb - i) * sizeof *br);
    memmove(&bk[i + 1], &bk[i], (size_t)(nb - i) * sizeof *bk);
    br[i] = (struct fgr_heap_range){at, n};
    bk[i] = (struct block){ctx, NULL, {0, 0, 0, 0}, ipc != NULL};
    nb++;
    if (!held_here)
        fgr_range_add(base + at, n);
    return i;
}

static void drop_block(int i)
{
    if (!held_here)
        fgr_range_drop(base + br[i].off);
    if (bk[i].slab) {
        free(bk[i].slab->a);
        free(bk[i].slab);
    }
    memmove(&br[i], &br[i + 1], (size_t)(nb - i - 1) * sizeof *br);
    memmove(&bk[i], &bk[i + 1], (size_t)(nb - i - 1) * sizeof *bk);
    nb--;
}

/* n bytes (whole units) in slab s: the offset, or -1. */
static int64_t slab_put(struct slab *s, uint64_t n, uint64_t len)
{
    if (n >= s->fail)
        return -1;
    uint64_t at = 0;
    int j = 0;
    for (; j < s->n && s->a[j].off - at < n; j++)
        at = s->a[j].off + (s->a[j].len + UNIT - 1) / UNIT * UNIT;
    if (at > page - n) {
        s->fail = n;
        return -1;
    }
    if (s->n == s->cap) {
        int c = s->cap ? 2 * s->cap : 16;
        struct alloc *a = realloc(s->a, (size_t)c * sizeof *a);
        if (!a)
            return -1;
        s->a = a;
        s->cap = c;
    }
    memmove(&s->a[j + 1], &s->a[j], (size_t)(s->n - j) * sizeof *s->a);
    s->a[j] = (struct alloc){at, len, ++ids, 0};
    s->n++;
    return (int64_t)at;
}

static CUresult place_small(CUdeviceptr *dptr, size_t len, CUcontext ctx)
{
    uint64_t n = (len + UNIT - 1) / UNIT * UNIT;
    for (int i = 0; i < nb; i++) {
        if (bk[i].ctx != ctx || !bk[i].slab)
            continue;
        int64_t o = slab_put(bk[i].slab, n, len);
        if (o >= 0) {
            *dptr = base + br[i].off + (uint64_t)o;
            return fgrArenaNote(*dptr, len);
        }
    }
    struct slab *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->fail = UINT64_MAX;
    CUresult r;
    int i = map_block(page, len, ctx, &r, NULL);
    if (i < 0) {
        free(s);
        return r;
    }
    bk[i].slab = s;
    if (slab_put(s, n, len) != 0) { /* an empty page's first: at its start */
        fgrArenaFree(base + br[i].off, 1);
        drop_block(i);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = base + br[i].off;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext ctx = fgr_current();
    if (!dptr || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&lock);
    if (!ready()) {
        pthread_mutex_unlock(&lock);
        return fgr_fwd_cuMemAlloc_v2(dptr, bytesize);
    }
    CUresult r;
    if (bytesize <= page) {
        r = place_small(dptr, bytesize, ctx);
    } else {
        uint64_t n = bytesize <= size ? (bytesize + page - 1) / page * page : size + 1;
        int i = map_block(n, bytesize, ctx, &r, NULL);
        if (i >= 0) {
            bk[i].one = (struct alloc){0, bytesize, ++ids, 0};
            *dptr = base + br[i].off;
        }
    }
    pthread_mutex_unlock(&lock);
    /* The range fragmented past use: the server's driver places it (and
     * frees it: its address is outside the range). */
    return r == RANGE_FULL ? fgr_fwd_cuMemAlloc_v2(dptr, bytesize) : r;
}

/* The block holding p and, in it, the allocation (under lock); -1: none. */
static int find(uint64_t p, struct alloc **a)
{
    if (state <= 0 || p < base || p - base >= size)
        return -1;
    int i = fgr_heap_find(br, nb, p - base);
    if (i < 0)
        return -1;
    uint64_t o = p - base - br[i].off;
    *a = NULL;
    if (!bk[i].slab) {
        if (o >= bk[i].one.off && o - bk[i].one.off < bk[i].one.len)
            *a = &bk[i].one;
        return i;
    }
    struct slab *s = bk[i].slab;
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->a[mid].off + s->a[mid].len <= o)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n && s->a[lo].off <= o)
        *a = &s->a[lo];
    return i;
}

static int in_range(uint64_t p)
{
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE) > 0 && p >= base && p - base < size;
}

/* Whether ctx has an empty slab besides block i (under lock). */
static int spare_slab(CUcontext ctx, int i)
{
    for (int k = 0; k < nb; k++)
        if (k != i && bk[k].ctx == ctx && bk[k].slab && bk[k].slab->n == 0)
            return 1;
    return 0;
}

FGR_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    if (!in_range(dptr)) {
        fgr_managed_forget(dptr);
        return fgr_fwd_cuMemFree_v2(dptr);
    }
    pthread_mutex_lock(&lock);
    struct alloc *a;
    int i = find(dptr, &a);
    if (i < 0 || !a || dptr != base + br[i].off + a->off || bk[i].ipc) { /* opened: cuIpcCloseMemHandle's */
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct slab *s = bk[i].slab;
    int unmap = !s || (s->n == 1 && spare_slab(bk[i].ctx, i));
    CUresult r = fgrArenaFree(dptr, (unsigned)unmap);
    if (unmap) {
        drop_block(i);
    } else {
        int j = (int)(a - s->a);
        memmove(&s->a[j], &s->a[j + 1], (size_t)(s->n - j - 1) * sizeof *s->a);
        s->n--;
        s->fail = UINT64_MAX;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

FGR_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    if (!in_range(dptr))
        return fgr_fwd_cuMemGetAddressRange_v2(pbase, psize, dptr);
    pthread_mutex_lock(&lock);
    struct alloc *a;
    int i = find(dptr, &a);
    if (i >= 0 && a) {
        if (pbase)
            *pbase = base + br[i].off + a->off;
        if (psize)
            *psize = a->len;
    }
    pthread_mutex_unlock(&lock);
    return i >= 0 && a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* What the driver says of cuMemAlloc memory, where memory mapped by pages
 * would differ: the allocation's context, its own range and identity,
 * legacy IPC (which the arena carries) and no handle types. The rest (its
 * device, its type; GPUDirect RDMA and decompression, which a remote
 * program does not have) the server's driver answers. */
FGR_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!in_range(ptr)) { /* the program's pinned memory is its own: answered here */
        CUresult r = fgr_own_pointer_attr(data, (int)attribute, ptr, CUDA_ERROR_NOT_FOUND);
        return r == CUDA_ERROR_NOT_FOUND ? fgr_fwd_cuPointerGetAttribute(data, attribute, ptr) : r;
    }
    pthread_mutex_lock(&lock);
    struct alloc *a;
    int i = find(ptr, &a);
    struct alloc got = a ? *a : (struct alloc){0};
    uint64_t start = i >= 0 && a ? base + br[i].off + a->off : 0;
    CUcontext ctx = i >= 0 ? bk[i].ctx : NULL;
    pthread_mutex_unlock(&lock);
    if (i < 0 || !a)
        return CUDA_ERROR_INVALID_VALUE; /* no allocation there */
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    switch ((int)attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = start;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = got.len;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = got.id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned int *)data = got.sync_memops;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: /* (the arena's side of IPC carries it) */
        *(unsigned int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: /* the program asked for none */
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    }
    return fgr_fwd_cuPointerGetAttribute(data, attribute, ptr);
}

/* SYNC_MEMOPS of the arena's memory is kept by the client: the server's
 * driver refuses it on the mapped pages the arena is made of, and what it
 * asks for (synchronous copies) the client's copies of such memory are. */
FGR_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || !in_range(ptr))
        return fgr_fwd_cuPointerSetAttribute(value, attribute, ptr);
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct alloc *a;
    int i = find(ptr, &a);
    if (i >= 0 && a)
        a->sync_memops = *(const unsigned int *)value != 0;
    pthread_mutex_unlock(&lock);
    return i >= 0 && a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* IPC between programs the same host serves (remote/executor/ipc.c): a
 * handle names the pages holding an allocation, which the opener maps in
 * its own range, as many bytes as the exporter's, at the allocation's
 * offset in them. */
FGR_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct alloc *a;
    int i = in_range(dptr) ? find(dptr, &a) : -1;
    int ok = i >= 0 && a && !bk[i].ipc; /* inside an allocation: the allocation, as the driver takes it */
    uint64_t block = ok ? base + br[i].off : 0, start = ok ? block + a->off : 0, len = ok ? a->len : 0;
    pthread_mutex_unlock(&lock);
    if (!ok) {
        static int said;
        if (!in_range(dptr) && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("cuIpcGetMemHandle: only memory from cuMemAlloc in the client's range can be exported, "
                    "not the server driver's own allocations (CUDA_ERROR_INVALID_VALUE)");
        return CUDA_ERROR_INVALID_VALUE;
    }
    return fgrIpcExport(block, start, len, pHandle);
}

FGR_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext ctx = fgr_current();
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Where the exporter's pages and the allocation lie in them: the
     * executor checks them against what the exporter says. */
    uint64_t w[3];
    memcpy(w, handle.reserved + 32, sizeof w);
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (!ready()) {
        pthread_mutex_unlock(&lock);
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("cuIpcOpenMemHandle: device memory is placed by the server's driver here, so opened memory "
                    "has nowhere to go (CUDA_ERROR_NOT_SUPPORTED)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (w[0] && w[0] % page == 0 && w[0] <= size && w[1] < w[0] && w[2] && w[2] <= w[0] - w[1]) {
        int i = map_block(w[0], w[2], ctx, &r, &handle);
        if (i >= 0) {
            bk[i].one = (struct alloc){w[1], w[2], ++ids, 0};
            *pdptr = base + br[i].off + w[1];
        }
    }
    pthread_mutex_unlock(&lock);
    return r == RANGE_FULL ? CUDA_ERROR_OUT_OF_MEMORY : r;
}

FGR_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    struct alloc *a;
    int i = in_range(dptr) ? find(dptr, &a) : -1;
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && a && bk[i].ipc && dptr == base + br[i].off + a->off) {
        r = fgrArenaFree(dptr, 1);
        drop_block(i);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* A context gone (destroyed, or a primary one reset or released for the
 * last time): the executor unmapped its memory. */
void fgr_arena_ctx_gone(CUcontext ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nb;)
        if (bk[i].ctx == ctx)
            drop_block(i);
        else
            i++;
    pthread_mutex_unlock(&lock);
}

/* In a forked child: the parent's range is not the child's connection's.
 * The device ranges uva.c keeps of it are left there (a thread of the
 * parent may have held its lock); the child's range, asked for at the same
 * address, takes their place. */
void fgr_arena_forked(void)
{
    if (state > 0 && held_here)
        munmap((void *)(uintptr_t)base, size);
    for (int i = 0; i < nb; i++)
        if (bk[i].slab) {
            free(bk[i].slab->a);
            free(bk[i].slab);
        }
    nb = 0;
    state = 0;
    held_here = 0;
    pthread_mutex_init(&lock, NULL);
}
