/* The program's pinned host memory over shm:// (remote/executor/heap.c):
 * cuMemAllocHost and cuMemHostAlloc carve it from a memfd shared with the
 * executor, which registers each allocation with the driver. A copy between
 * such memory and the device is then the GPU's DMA straight from or into the
 * program's pages: no host copy, queued without a round trip when
 * asynchronous, and made when it runs on its stream, as natively. Where
 * the executor maps the heap at the address the client did (chosen where
 * mappings rarely are), an allocation is device memory at the program's
 * own pointer too, for kernels and memsets.
 *
 * The heap is sparse: an allocation's pages exist once written, and are
 * given back when it is freed. Like the driver's pinned memory it is not
 * inherited by a forked child; its addresses stay reserved there, so that
 * freeing one of them is recognized (and does nothing). */
#include "client.h"
#include "../ring.h"

#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *heap;     /* this connection's, NULL: none */
static int heap_fd = -1;  /* its memfd, for a server the connection moves to */
static uint8_t *stale[8]; /* a parent's heaps, reserved in a forked child */
static struct fgr_heap_range *blocks; /* allocated */
static unsigned char *mapped_at;       /* by block: kernels reach it by its address */
static int nblocks, cap;

int fgr_heap_make(int *fd, uint64_t *base)
{
    uint8_t *b = __atomic_load_n(&heap, __ATOMIC_ACQUIRE);
    if (b) { /* a connection moving: the same heap, with what it holds */
        if ((*fd = fcntl(heap_fd, F_DUPFD_CLOEXEC, 0)) < 0)
            return -1;
        *base = (uint64_t)(uintptr_t)b;
        return 0;
    }
    if (fgr_heap_create(fd, &b) != 0)
        return -1;
    heap_fd = fcntl(*fd, F_DUPFD_CLOEXEC, 0);
    if (heap_fd < 0) {
        munmap(b, FGR_HEAP_BYTES);
        close(*fd);
        return -1;
    }
    __atomic_store_n(&heap, b, __ATOMIC_RELEASE);
    *base = (uint64_t)(uintptr_t)b;
    return 0;
}

int fgr_heap_used(void)
{
    pthread_mutex_lock(&lock);
    int n = nblocks;
    pthread_mutex_unlock(&lock);
    return n > 0;
}

int fgr_heap_holds(const void *p, size_t n, uint64_t *off)
{
    uint8_t *h = __atomic_load_n(&heap, __ATOMIC_ACQUIRE);
    const uint8_t *q = p;
    if (!h || q < h || q >= h + FGR_HEAP_BYTES || n > FGR_HEAP_BYTES - (uint64_t)(q - h))
        return 0;
    *off = (uint64_t)(q - h);
    return 1;
}

/* The allocation offset off lies in, -1 for none (under lock). */
static int block_of(uint64_t off)
{
    int i = fgr_heap_find(blocks, nblocks, off);
    return i >= 0 ? i : -1;
}

int fgr_heap_copyable(const void *p, size_t n, uint64_t *off)
{
    if (!n || !fgr_heap_holds(p, n, off))
        return 0;
    pthread_mutex_lock(&lock);
    int i = block_of(*off);
    int yes = i >= 0 && n <= blocks[i].n - (*off - blocks[i].off);
    pthread_mutex_unlock(&lock);
    return yes;
}

/* Room for one more block (under lock). */
static int room(void)
{
    if (nblocks < cap)
        return 1;
    int c = cap ? 2 * cap : 64;
    struct fgr_heap_range *b = realloc(blocks, (size_t)c * sizeof *b);
    if (b)
        blocks = b;
    unsigned char *m = b ? realloc(mapped_at, (size_t)c) : NULL;
    if (!m)
        return 0;
    mapped_at = m;
    cap = c;
    return 1;
}

void *fgr_heap_alloc(size_t bytes, int *mapped)
{
    uint8_t *h = __atomic_load_n(&heap, __ATOMIC_ACQUIRE);
    if (!h || !bytes || bytes > FGR_HEAP_BYTES)
        return NULL;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), n = (bytes + page - 1) / page * page, off = 0;
    pthread_mutex_lock(&lock);
    int i = 0;
    for (; i < nblocks && blocks[i].off - off < n; i++) /* the first gap it fits */
        off = blocks[i].off + blocks[i].n;
    void *p = NULL;
    if (off <= FGR_HEAP_BYTES - n && room()) {
        memmove(&blocks[i + 1], &blocks[i], (size_t)(nblocks - i) * sizeof *blocks);
        memmove(&mapped_at[i + 1], &mapped_at[i], (size_t)(nblocks - i));
        blocks[i] = (struct fgr_heap_range){off, n};
        mapped_at[i] = 0;
        nblocks++;
        p = h + off;
    }
    pthread_mutex_unlock(&lock);
    /* The executor pins it; where it cannot, the program gets memory of
     * the client's alone (its copies go as from pageable memory). */
    unsigned on_device = 0;
    CUresult r = p ? fgrHeapRegister(off, n, &on_device) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) {
        fgr_heap_free(p);
        if (r == CUDA_ERROR_NOT_SUPPORTED) /* the executor has no heap: none is tried again */
            __atomic_store_n(&heap, NULL, __ATOMIC_RELEASE);
        return NULL;
    }
    if (p && on_device) {
        pthread_mutex_lock(&lock);
        if ((i = block_of(off)) >= 0)
            mapped_at[i] = 1;
        pthread_mutex_unlock(&lock);
    }
    *mapped = p && on_device;
    return p;
}

int fgr_pinned_host(uint64_t p)
{
    return fgr_heap_mapped((const void *)(uintptr_t)p) || fgr_mirror_holds((const void *)(uintptr_t)p);
}

int fgr_heap_mapped(const void *p)
{
    uint64_t off;
    if (!fgr_heap_holds(p, 1, &off))
        return 0;
    pthread_mutex_lock(&lock);
    int i = block_of(off), yes = i >= 0 && mapped_at[i];
    pthread_mutex_unlock(&lock);
    return yes;
}

int fgr_heap_free(void *p)
{
    uint8_t *q = p;
    for (int k = 0; k < 8; k++)
        if (stale[k] && q >= stale[k] && q < stale[k] + FGR_HEAP_BYTES)
            return 1; /* the parent's: not this child's to free */
    uint64_t off;
    if (!fgr_heap_holds(p, 0, &off))
        return 0;
    pthread_mutex_lock(&lock);
    int i = block_of(off);
    uint64_t n = i >= 0 && blocks[i].off == off ? blocks[i].n : 0;
    pthread_mutex_unlock(&lock);
    if (!n)
        return 1; /* not an allocation's start: nothing to free */
    /* Unpinned first (the executor is done with it), then its pages given
     * back, then its room free for another allocation. */
    fgrHeapUnregister(off);
    madvise(q, n, MADV_REMOVE);
    pthread_mutex_lock(&lock);
    if ((i = block_of(off)) >= 0) {
        memmove(&blocks[i], &blocks[i + 1], (size_t)(nblocks - i - 1) * sizeof *blocks);
        memmove(&mapped_at[i], &mapped_at[i + 1], (size_t)(nblocks - i - 1));
        nblocks--;
    }
    pthread_mutex_unlock(&lock);
    return 1;
}

CUresult fgr_heap_upload(CUdeviceptr dst, uint64_t off, size_t n, CUstream s, int wait)
{
    return wait ? fgrHeapUploadWait(dst, off, n, s) : fgrHeapUpload(dst, off, n, s);
}

CUresult fgr_heap_download(uint64_t off, CUdeviceptr src, size_t n, CUstream s, int wait)
{
    return wait ? fgrHeapDownloadWait(off, src, n, s) : fgrHeapDownload(off, src, n, s);
}

void fgr_heap_forked(void)
{
    pthread_mutex_init(&lock, NULL);
    uint8_t *h = heap;
    heap = NULL;
    if (heap_fd >= 0)
        close(heap_fd);
    heap_fd = -1;
    nblocks = 0;
    /* The mapping was not inherited: its addresses stay reserved, so that
     * no later mapping takes them and a free of one is known. */
    for (int k = 0; h && k < 8; k++) {
        if (stale[k])
            continue;
        if (mmap(h, FGR_HEAP_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1,
                 0) == h)
            stale[k] = h;
        break;
    }
}
