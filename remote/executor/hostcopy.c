/* The server's side of graph copy nodes with a side in the program's
 * pageable memory (remote/client/hostcopy.c): pinned buffers the nodes copy
 * from or into, filled at each launch with the bytes the launch carries,
 * read back once the launch's event is done. Every range the client names
 * must lie in one of its buffers, so it cannot make the executor touch
 * device memory or its own.
 *
 * A graph may still name a buffer the client frees (a hostile client can
 * free one and launch): unpinned, the GPU would reach memory the server
 * reuses. So a freed buffer is kept for the connection, pinned, and given
 * again to a later request it fits; all go with their context. At most
 * fgr_pinned_most() bytes in all (--pinned-max). */
#include "executor.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>


static CUresult (*host_alloc)(void **, size_t, unsigned int);
static CUresult (*graph_launch)(CUgraphExec, CUstream);

static struct buffer {
    uint64_t base, size, used; /* used: 0 once freed, else the bytes asked for */
    uint64_t ctx;
} *bufs;
static size_t nbufs, capbufs;
static uint64_t total;

static int holding(uint64_t p, uint64_t n)
{
    for (size_t i = 0; i < nbufs; i++)
        if (bufs[i].used && p >= bufs[i].base && p - bufs[i].base <= bufs[i].used &&
            n <= bufs[i].used - (p - bufs[i].base))
            return 1;
    return 0;
}

static CUresult buffer_alloc(CUdeviceptr *dptr, size_t bytes)
{
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* A freed one of this context that fits, not more than twice as large. */
    for (size_t i = 0; i < nbufs; i++)
        if (!bufs[i].used && bufs[i].ctx == fgr_ctx && bufs[i].size >= bytes && bufs[i].size / 2 <= bytes) {
            bufs[i].used = bytes;
            memset((void *)(uintptr_t)bufs[i].base, 0, bytes);
            *dptr = bufs[i].base;
            return CUDA_SUCCESS;
        }
    if (bytes > fgr_pinned_most() - total || total > fgr_pinned_most())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (nbufs == capbufs) {
        size_t n = capbufs ? 2 * capbufs : 16;
        struct buffer *b = realloc(bufs, n * sizeof *b);
        if (!b)
            return CUDA_ERROR_OUT_OF_MEMORY;
        bufs = b;
        capbufs = n;
    }
    void *p = NULL;
    /* Pinning is unsafe while a capture in GLOBAL mode is open: the
     * program's capture must not be invalidated by the server's own call. */
    CUstreamCaptureMode mode = fgr_relax();
    CUresult r = host_alloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE);
    fgr_unrelax(mode);
    if (r != CUDA_SUCCESS)
        return r;
    memset(p, 0, bytes);
    bufs[nbufs++] = (struct buffer){(uintptr_t)p, bytes, bytes, fgr_ctx};
    total += bytes;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult buffer_free(CUdeviceptr dptr)
{
    for (size_t i = 0; i < nbufs; i++)
        if (bufs[i].base == dptr && bufs[i].used) {
            bufs[i].used = 0;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* The bytes go into the buffers once the stream's earlier work is done (a
 * launch before may still read them), then the graph runs and done, when
 * given, is recorded after it. */
static CUresult launch_host(CUgraphExec x, CUstream s, CUevent done, const CUdeviceptr *dsts, const size_t *sizes,
                            unsigned int count, const void *src, size_t bytes)
{
    uint64_t at = 0;
    if (count && (!dsts || !sizes || !src))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; i++)
        if (!holding(dsts[i], sizes[i]) || sizes[i] > bytes - at)
            return CUDA_ERROR_INVALID_VALUE;
        else
            at += sizes[i];
    if (at != bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = count ? fgr_drv.sync(s) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    at = 0;
    for (unsigned i = 0; i < count; i++) {
        memcpy((void *)(uintptr_t)dsts[i], (const uint8_t *)src + at, sizes[i]);
        at += sizes[i];
    }
    r = graph_launch(x, s);
    if (r == CUDA_SUCCESS && done)
        r = fgr_drv.ev_record(done, s);
    return r;
}

/* A buffer's bytes once done is (CUDA_ERROR_NOT_READY before). */
static CUresult host_read(CUevent done, CUdeviceptr src, void *dst, size_t bytes)
{
    if (!dst || bytes > FGR_MIRROR_BATCH || !holding(src, bytes))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = done ? fgr_drv.ev_query(done) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        return r;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

void fgr_hostcopy_forget(uint64_t ctx)
{
    for (size_t i = 0; i < nbufs;)
        if (bufs[i].ctx == ctx) {
            total -= bufs[i].size;
            bufs[i] = bufs[--nbufs];
        } else {
            i++;
        }
}

void fgr_hostcopy_use(CUresult (*alloc)(void **, size_t, unsigned int), CUresult (*launch)(CUgraphExec, CUstream))
{
    host_alloc = alloc;
    graph_launch = launch;
    if (!host_alloc || !graph_launch || !fgr_drv.sync || !fgr_drv.ev_record || !fgr_drv.ev_query)
        return; /* the operations stay unsupported */
    fgr_real[FGR_OP_fgrGraphHostAlloc] = (void *)buffer_alloc;
    fgr_real[FGR_OP_fgrGraphHostFree] = (void *)buffer_free;
    fgr_real[FGR_OP_fgrGraphLaunchHost] = (void *)launch_host;
    fgr_real[FGR_OP_fgrGraphHostRead] = (void *)host_read;
}

void fgr_hostcopy_init(void *driver)
{
    CUresult (*alloc)(void **, size_t, unsigned int), (*launch)(CUgraphExec, CUstream);
    *(void **)&alloc = dlsym(driver, "cuMemHostAlloc");
    *(void **)&launch = dlsym(driver, "cuGraphLaunch");
    fgr_hostcopy_use(alloc, launch);
}
