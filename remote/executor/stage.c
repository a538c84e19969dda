/* Uploads from the staging area of shm:// (remote/client/stage.c): the
 * client wrote the bytes into memory this process shares with it, which
 * is registered with the driver at the first copy, so the GPU copies
 * them from there (its DMA) while the connection goes on; downloads land in
 * the area after it, from where the client copies them out. Each upload is
 * followed by an event; when it has completed, the area is released up to
 * that upload's end (in order), which the client reads to reuse it.
 *
 * The area is the client's memory too: where and how much an upload names
 * is checked against the area, and the totals must grow; what the client
 * writes there while the GPU copies is only its own data. */
#include "executor.h"
#include "../ring.h"

#include <dlfcn.h>

#define QUEUED_MAX 256 /* uploads in flight; one more waits for the oldest */

static struct fgr_ring *ring;
static int registered; /* 1: registered, -1: could not be (said), 0: not yet */
static uint64_t last_end, released;
static struct entry {
    CUevent ev; /* NULL: nothing to wait for */
    uint64_t end;
} queue[QUEUED_MAX];
static unsigned qhead, qcount;

static CUresult (*copy)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*copy_pt)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*copy_back)(void *, CUdeviceptr, size_t, CUstream);

/* Retires the oldest upload once its copy completed (wait: waits for it);
 * 0 when there is none, or it has not completed. */
/* Registers both areas with the driver, at the first copy (a context is
 * current then). */
static void pin(void)
{
    if (registered)
        return;
    size_t bytes = (size_t)ring->stage_size + ring->down_size;
    CUstreamCaptureMode m = fgr_relax();
    CUresult r = fgr_drv.host_register ? fgr_drv.host_register(ring->stage, bytes, CU_MEMHOSTREGISTER_PORTABLE)
                                       : CUDA_ERROR_NOT_SUPPORTED;
    fgr_unrelax(m);
    registered = r == CUDA_SUCCESS ? 1 : -1;
    if (r != CUDA_SUCCESS)
        fgr_logf("cannot pin the staging areas (error %d): copies are made as with pageable memory", (int)r);
}

static int retire(int wait)
{
    if (!qcount)
        return 0;
    struct entry *e = &queue[(qhead + QUEUED_MAX - qcount) % QUEUED_MAX];
    if (e->ev) {
        CUstreamCaptureMode m = fgr_relax();
        CUresult r = wait ? fgr_drv.ev_sync(e->ev) : fgr_drv.ev_query(e->ev);
        if (r != CUDA_ERROR_NOT_READY)
            fgr_drv.ev_destroy(e->ev);
        fgr_unrelax(m);
        if (r == CUDA_ERROR_NOT_READY)
            return 0;
    }
    released = e->end;
    __atomic_store_n(&ring->m->released, released, __ATOMIC_RELEASE);
    qcount--;
    return 1;
}

void fgr_stage_reap(void)
{
    while (ring && retire(0))
        ;
}

static void push(CUevent ev, uint64_t end)
{
    if (qcount == QUEUED_MAX)
        retire(1);
    queue[qhead] = (struct entry){ev, end};
    qhead = (qhead + 1) % QUEUED_MAX;
    qcount++;
    fgr_stage_reap();
}

static CUresult upload(CUdeviceptr dst, size_t end, size_t n, CUstream s, unsigned how, int last)
{
    if (!ring || !copy || !copy_pt || !fgr_drv.ev_create || !fgr_drv.ev_query || !fgr_drv.ev_sync ||
        !fgr_drv.ev_destroy)
        return CUDA_ERROR_NOT_SUPPORTED; /* a socket, or a driver without these */
    uint64_t size = ring->stage_size;
    if (end <= last_end || end - last_end > size)
        return CUDA_ERROR_INVALID_VALUE; /* not the area's next bytes */
    last_end = end;
    uint64_t off = (end - n) % size;
    int pt = (how & FGR_STAGE_PT) != 0;
    if ((how & ~(FGR_STAGE_PT | FGR_STAGE_SYNC)) || ((how & FGR_STAGE_SYNC) && s) || n == 0 || n > end ||
        off + n > size) {
        push(NULL, end); /* refused, and released all the same */
        return CUDA_ERROR_INVALID_VALUE;
    }
    pin();
    const void *from = ring->stage + off;
    if (fgr_captured_upload(&from, n, s, pt) != CUDA_SUCCESS) {
        push(NULL, end);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = (pt ? copy_pt : copy)(dst, from, n, s);
    CUevent ev = NULL;
    if (r == CUDA_SUCCESS && from == ring->stage + off) {
        /* What says the area is free again; without it, the copy is waited for here. */
        CUresult (*record)(CUevent, CUstream) = pt ? fgr_drv.ev_record_pt : fgr_drv.ev_record;
        CUstreamCaptureMode m = fgr_relax();
        if (fgr_drv.ev_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            ev = NULL;
        } else if (!record || record(ev, s) != CUDA_SUCCESS) {
            fgr_drv.ev_destroy(ev);
            ev = NULL;
        }
        fgr_unrelax(m);
        if (!ev)
            r = fgr_drain(s, pt);
    }
    push(ev, end);
    /* A synchronous copy returns with its bytes on the device. */
    while (last && r == CUDA_SUCCESS && qcount)
        retire(1);
    return r;
}

static CUresult stage_upload(CUdeviceptr dst, size_t end, size_t n, CUstream s, unsigned how)
{
    return upload(dst, end, n, s, how, 0);
}

static CUresult stage_upload_last(CUdeviceptr dst, size_t end, size_t n, CUstream s, unsigned how)
{
    return upload(dst, end, n, s, how, 1);
}

/* A download: after the stream's earlier work (fgr_wait, in the dispatch),
 * into the downloads' area, waited for. */
static CUresult stage_download(CUdeviceptr src, size_t n, CUstream s)
{
    if (!ring || !copy_back || !fgr_drv.ev_create || !fgr_drv.ev_sync || !fgr_drv.ev_destroy)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (n == 0 || n > ring->down_size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgr_captured_download(s, 0, "cuMemcpyDtoHAsync");
    if (r != CUDA_SUCCESS)
        return r;
    pin();
    r = copy_back(ring->down, src, n, s);
    CUevent ev;
    CUstreamCaptureMode m = fgr_relax();
    if (r == CUDA_SUCCESS && fgr_drv.ev_create(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        r = fgr_drv.ev_record(ev, s);
        if (r == CUDA_SUCCESS)
            r = fgr_drv.ev_sync(ev);
        fgr_drv.ev_destroy(ev);
    } else if (r == CUDA_SUCCESS) {
        r = fgr_drain(s, 0);
    }
    fgr_unrelax(m);
    return r;
}

/* The next piece of a download, into the half of the area at `at`,
 * waited for by stage_download_wait. */
static CUevent ahead[2];

static CUresult stage_download_ahead(CUdeviceptr src, size_t n, CUstream s, size_t at)
{
    if (!ring || !copy_back || !fgr_drv.ev_create || !fgr_drv.ev_sync || !fgr_drv.ev_destroy)
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t half = ring->down_size / 2;
    int i = at == half;
    if ((at != 0 && at != half) || n == 0 || n > half || ahead[i])
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgr_captured_download(s, 0, "cuMemcpyDtoHAsync");
    if (r != CUDA_SUCCESS)
        return r;
    pin();
    if ((r = copy_back(ring->down + at, src, n, s)) != CUDA_SUCCESS)
        return r;
    CUstreamCaptureMode m = fgr_relax();
    if ((r = fgr_drv.ev_create(&ahead[i], CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS &&
        (r = fgr_drv.ev_record(ahead[i], s)) != CUDA_SUCCESS) {
        fgr_drv.ev_destroy(ahead[i]);
        ahead[i] = NULL;
    }
    if (r != CUDA_SUCCESS)
        r = fgr_drain(s, 0);
    fgr_unrelax(m);
    return r;
}

static CUresult stage_download_wait(size_t at)
{
    if (!ring || (at != 0 && at != ring->down_size / 2))
        return CUDA_ERROR_INVALID_VALUE;
    CUevent *e = &ahead[at != 0];
    if (!*e)
        return CUDA_SUCCESS; /* waited for when it was made, or refused (its error comes with this answer) */
    CUstreamCaptureMode m = fgr_relax();
    CUresult r = fgr_drv.ev_sync(*e);
    fgr_drv.ev_destroy(*e);
    fgr_unrelax(m);
    *e = NULL;
    return r;
}

static CUresult stage_wait(size_t upto)
{
    if (!ring)
        return CUDA_ERROR_NOT_SUPPORTED;
    while (released < upto && retire(1))
        ;
    if (released < upto && upto - released <= ring->stage_size) {
        /* Nothing is copied from the area: all of it is free (uploads the
         * dispatch refused before they reached us never were queued). */
        released = upto;
        if (last_end < upto)
            last_end = upto;
        __atomic_store_n(&ring->m->released, released, __ATOMIC_RELEASE);
    }
    return released >= upto ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

void fgr_stage_init(void *driver)
{
    *(void **)&copy = dlsym(driver, "cuMemcpyHtoDAsync_v2");
    *(void **)&copy_pt = dlsym(driver, "cuMemcpyHtoDAsync_v2_ptsz");
    *(void **)&copy_back = dlsym(driver, "cuMemcpyDtoHAsync_v2");
    fgr_real[FGR_OP_fgrStageUpload] = (void *)stage_upload;
    fgr_real[FGR_OP_fgrStageUploadLast] = (void *)stage_upload_last;
    fgr_real[FGR_OP_fgrStageWait] = (void *)stage_wait;
    fgr_real[FGR_OP_fgrStageDownload] = (void *)stage_download;
    fgr_real[FGR_OP_fgrStageDownloadAhead] = (void *)stage_download_ahead;
    fgr_real[FGR_OP_fgrStageDownloadWait] = (void *)stage_download_wait;
}

void fgr_stage_attach(struct fgr_ring *r) { ring = r; }
