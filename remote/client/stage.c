/* Uploads through the staging area (shm:// only): the client writes the
 * program's bytes into the area it shares with the executor, and sends
 * where they are; the executor, which registered the area with the driver,
 * has the GPU copy them from there. One copy on the host, as the driver
 * makes from pageable memory, where a frame took three (into the ring, out
 * of it, and the driver's own staging).
 *
 * The area is handed out in order: each upload takes the next n bytes
 * (skipping the area's end when they would not fit before it), named by
 * the running total of bytes handed out; the executor publishes the total
 * it is done copying from (released), and a client short of room asks it
 * to wait for its copies (fgrStageWait). The bytes are taken when the call
 * returns, as the driver takes pageable memory.
 *
 * Downloads land in an area of their own after it, one at a time: the
 * executor has the GPU copy there (fgrStageDownload, once the stream's
 * earlier work is done), and the client copies them out to the program.
 *
 * Not while calls are kept for a failover server: made again there, a
 * copy must carry its bytes (and a download's be checked), as over a
 * socket. */
#include "client.h"
#include "../ring.h"

#include <string.h>

static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t down_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t handed; /* the running total of bytes handed out */

/* An upload's pieces: an eighth of the area (4 MiB), so that the client
 * writes one while the GPU copies those before it. */
#define UP_PIECE(r) ((r)->stage_size / 8)

int fgr_stage_wanted(size_t n) { return fgr_conn_ring() && n >= FGR_STAGE_MIN && !fgr_failover_keeping(); }

static CUresult upload_piece(struct fgr_ring *r, CUdeviceptr dst, const void *src, size_t n, CUstream s, unsigned how,
                             int queued)
{
    pthread_mutex_lock(&stage_lock);
    uint64_t size = r->stage_size, off = handed % size;
    uint64_t end = handed + (off + n > size ? size - off : 0) + n;
    CUresult res = CUDA_SUCCESS;
    while (end - __atomic_load_n(&r->m->released, __ATOMIC_ACQUIRE) > size && res == CUDA_SUCCESS)
        res = fgrStageWait(end - size);
    if (res == CUDA_SUCCESS) {
        fgr_copy(r->stage + (end - n) % size, src, n);
        handed = end;
        res = queued ? fgrStageUpload(dst, end, n, s, how) : fgrStageUploadLast(dst, end, n, s, how);
    }
    pthread_mutex_unlock(&stage_lock);
    return res;
}

/* A synchronous upload's pieces but the last are queued: the last answers
 * once all are on the device. */
CUresult fgr_stage_upload(CUdeviceptr dst, const void *src, size_t n, CUstream s, unsigned how, int queued)
{
    struct fgr_ring *r = fgr_conn_ring();
    if (!src || !r)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = CUDA_SUCCESS;
    for (size_t off = 0; off < n && res == CUDA_SUCCESS; off += UP_PIECE(r)) {
        size_t k = n - off < UP_PIECE(r) ? n - off : UP_PIECE(r);
        res = upload_piece(r, dst + off, (const char *)src + off, k, s, how, queued || off + k < n);
    }
    return res;
}

int fgr_stage_down_wanted(size_t n) { return fgr_conn_ring() && n >= FGR_STAGE_MIN && !fgr_failover_keeping(); }

CUresult fgr_stage_download(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    struct fgr_ring *r = fgr_conn_ring();
    if (!dst || !r)
        return CUDA_ERROR_INVALID_VALUE;
    /* In pieces of half the area: while the client copies one out, the GPU
     * copies the next into the other half. */
    size_t half = r->down_size / 2, off = 0, k = n < half ? n : half, at = 0;
    pthread_mutex_lock(&down_lock);
    CUresult res = fgrStageDownload(src, k, s);
    while (res == CUDA_SUCCESS) {
        size_t next = off + k, nk = n - next < half ? n - next : half, next_at = half - at;
        if (nk)
            res = fgrStageDownloadAhead(src + next, nk, s, next_at);
        fgr_copy((char *)dst + off, r->down + at, k);
        if (!nk || res != CUDA_SUCCESS)
            break;
        res = fgrStageDownloadWait(next_at);
        off = next, k = nk, at = next_at;
    }
    pthread_mutex_unlock(&down_lock);
    return res;
}

uint64_t fgr_stage_swap(uint64_t other)
{
    pthread_mutex_lock(&stage_lock);
    uint64_t mine = handed;
    handed = other;
    pthread_mutex_unlock(&stage_lock);
    return mine;
}

void fgr_stage_forked(void)
{
    pthread_mutex_init(&stage_lock, NULL);
    pthread_mutex_init(&down_lock, NULL);
    handed = 0;
}
