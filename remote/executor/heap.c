/* The program's pinned host memory over shm:// (remote/client/heap.c): a
 * memfd the client carves its pinned allocations from, mapped here too.
 * Each allocation is registered with the driver while it lives, so the GPU
 * copies to and from it directly, when the copy runs on its stream, as it
 * does from the program's pinned memory natively (a graph that captured
 * such a copy reads or writes the memory at each launch).
 *
 * Where the heap could be mapped at the client's address, each allocation
 * is also registered as device memory there: kernels and memsets reach it by
 * the program's own pointers, and what they write is in the program's pages
 * (it is then one of the connection's device ranges, for the checks).
 *
 * The memory is the client's too: a copy is made only within one
 * registered allocation, and what the client writes there while the GPU
 * copies is only its own data. */
#include "executor.h"
#include "../ring.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCKS_MAX 65536 /* registered allocations a connection may hold */

static uint8_t *base;                          /* NULL: no heap (a socket) */
static int same;                               /* mapped at the client's address */
static uint64_t registered; /* bytes registered */
static struct fgr_heap_range *blocks; /* registered */
static int nblocks, cap;

static CUresult (*copy)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*copy_back)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*device_pointer)(CUdeviceptr *, void *, unsigned int);

static int find(uint64_t off) { return fgr_heap_find(blocks, nblocks, off); }

static int within(uint64_t off, uint64_t n)
{
    int i = find(off);
    return base && n && i >= 0 && off - blocks[i].off <= blocks[i].n && n <= blocks[i].n - (off - blocks[i].off);
}

static CUresult heap_register(size_t off, size_t n, unsigned *mapped)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    if (!base)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!n || off % page || n % page || off > FGR_HEAP_BYTES || n > FGR_HEAP_BYTES - off)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t most = fgr_pinned_most();
    if (n > most - registered || registered > most)
        return CUDA_ERROR_OUT_OF_MEMORY; /* the client then keeps it as its own */
    int i = find(off);
    if (i >= 0 || nblocks == BLOCKS_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    i = -1 - i;
    if (i < nblocks && blocks[i].off < off + n)
        return CUDA_ERROR_INVALID_VALUE; /* overlaps the next one */
    if (nblocks == cap) {
        int c = cap ? 2 * cap : 64;
        struct fgr_heap_range *b = realloc(blocks, (size_t)c * sizeof *b);
        if (!b)
            return CUDA_ERROR_OUT_OF_MEMORY;
        blocks = b;
        cap = c;
    }
    /* As device memory at the program's address where kernels can use
     * the host pointer itself; else for copies only. */
    unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | (same && device_pointer ? CU_MEMHOSTREGISTER_DEVICEMAP : 0);
    CUstreamCaptureMode m = fgr_relax();
    CUresult r = fgr_drv.host_register ? fgr_drv.host_register(base + off, n, flags) : CUDA_ERROR_NOT_SUPPORTED;
    CUdeviceptr d = 0;
    if (r == CUDA_SUCCESS && (flags & CU_MEMHOSTREGISTER_DEVICEMAP) &&
        (device_pointer(&d, base + off, 0) != CUDA_SUCCESS || d != (CUdeviceptr)(uintptr_t)(base + off))) {
        fgr_drv.host_unregister(base + off);
        flags = CU_MEMHOSTREGISTER_PORTABLE;
        r = fgr_drv.host_register(base + off, n, flags);
    }
    fgr_unrelax(m);
    if (r != CUDA_SUCCESS)
        return r;
    memmove(&blocks[i + 1], &blocks[i], (size_t)(nblocks - i) * sizeof *blocks);
    blocks[i] = (struct fgr_heap_range){off, n};
    nblocks++;
    registered += n;
    *mapped = (flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0;
    if (*mapped)
        fgr_mem_add((uint64_t)(uintptr_t)(base + off), n, 0, 0);
    return CUDA_SUCCESS;
}

static CUresult heap_unregister(size_t off)
{
    int i = find(off);
    if (!base || i < 0 || blocks[i].off != off)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode m = fgr_relax();
    CUresult r = fgr_drv.host_unregister ? fgr_drv.host_unregister(base + off) : CUDA_ERROR_NOT_SUPPORTED;
    fgr_unrelax(m);
    fgr_drop(FGR_H_MEM, (uint64_t)(uintptr_t)(base + off));
    registered -= blocks[i].n;
    memmove(&blocks[i], &blocks[i + 1], (size_t)(nblocks - i - 1) * sizeof *blocks);
    nblocks--;
    return r;
}

/* A synchronous copy's end: natively it fails on a capturing stream and
 * invalidates the capture; its stream's synchronization does the same. */
static CUresult finish(CUresult r, CUstream s)
{
    if (r != CUDA_SUCCESS)
        return r;
    if (fgr_capturing(s, 0))
        return fgr_drv.sync ? fgr_drv.sync(s) : CUDA_ERROR_NOT_SUPPORTED;
    return fgr_drain(s, 0);
}

static CUresult heap_upload(CUdeviceptr dst, size_t off, size_t n, CUstream s)
{
    return within(off, n) ? copy(dst, base + off, n, s) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult heap_upload_wait(CUdeviceptr dst, size_t off, size_t n, CUstream s)
{
    return finish(heap_upload(dst, off, n, s), s);
}

static CUresult heap_download(size_t off, CUdeviceptr src, size_t n, CUstream s)
{
    return within(off, n) ? copy_back(base + off, src, n, s) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult heap_download_wait(size_t off, CUdeviceptr src, size_t n, CUstream s)
{
    return finish(heap_download(off, src, n, s), s);
}

void fgr_heap_init(void *driver)
{
    *(void **)&copy = dlsym(driver, "cuMemcpyHtoDAsync_v2");
    *(void **)&copy_back = dlsym(driver, "cuMemcpyDtoHAsync_v2");
    *(void **)&device_pointer = dlsym(driver, "cuMemHostGetDevicePointer_v2");
    if (!copy || !copy_back)
        return; /* the operations answer CUDA_ERROR_NOT_SUPPORTED */
    fgr_real[FGR_OP_fgrHeapRegister] = (void *)heap_register;
    fgr_real[FGR_OP_fgrHeapUnregister] = (void *)heap_unregister;
    fgr_real[FGR_OP_fgrHeapUpload] = (void *)heap_upload;
    fgr_real[FGR_OP_fgrHeapUploadWait] = (void *)heap_upload_wait;
    fgr_real[FGR_OP_fgrHeapDownload] = (void *)heap_download;
    fgr_real[FGR_OP_fgrHeapDownloadWait] = (void *)heap_download_wait;
}

void fgr_heap_attach(uint8_t *b, uint64_t client_base)
{
    base = b;
    same = b && (uint64_t)(uintptr_t)b == client_base;
    if (b && !same)
        fgr_logf("the pinned heap is at another address than the client's: kernels cannot reach it");
}
