/* Copies between the program's memory and the device on a stream that is
 * capturing a graph. The graph makes such a copy again at each launch, from
 * or into the host address it was captured with; here that address is the
 * executor's (the request's frame, which the next request reuses, or the
 * staging areas), not the program's. A client that can tell its stream
 * captures gives such a copy a buffer of the server's instead
 * (remote/client/hostcopy.c); what comes here is a driver's without
 * cuStreamGetCaptureInfo, and an array's copies (textures.c).
 *   - An upload is given bytes of its own, kept as long as the connection
 *     (at most FGR_KEPT_MAX in all: the server's memory is not the client's
 *     to fill). The graph copies them as they were at capture; natively it
 *     reads the program's memory at each launch.
 *   - A download cannot reach the program's memory at a launch. It is
 *     refused the way the driver refuses a call illegal in capture: the
 *     stream's synchronization is asked for, which answers
 *     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, so
 *     ending it answers CUDA_ERROR_STREAM_CAPTURE_INVALIDATED instead of a
 *     graph that silently lacks the copy. */
#include "executor.h"

#include <stdlib.h>
#include <string.h>

#define FGR_KEPT_MAX (256ull << 20)
static uint64_t kept_total;

CUstreamCaptureMode fgr_relax(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (!fgr_drv.capture_mode || fgr_drv.capture_mode(&m) != CUDA_SUCCESS)
        return CU_STREAM_CAPTURE_MODE_RELAXED;
    return m;
}

void fgr_unrelax(CUstreamCaptureMode m)
{
    if (m != CU_STREAM_CAPTURE_MODE_RELAXED)
        fgr_drv.capture_mode(&m);
}

int fgr_capturing(CUstream s, int pt)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult (*capturing)(CUstream, CUstreamCaptureStatus *) = pt ? fgr_drv.capturing_pt : fgr_drv.capturing;
    return capturing && capturing(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult fgr_captured_upload(const void **src, size_t n, CUstream s, int pt)
{
    if (!fgr_capturing(s, pt))
        return CUDA_SUCCESS;
    void *kept = kept_total + n <= FGR_KEPT_MAX ? malloc(n ? n : 1) : NULL;
    if (!kept)
        return CUDA_ERROR_OUT_OF_MEMORY;
    kept_total += n;
    memcpy(kept, *src, n);
    *src = kept;
    return CUDA_SUCCESS;
}

CUresult fgr_captured_download(CUstream s, int pt, const char *name)
{
    if (!fgr_capturing(s, pt))
        return CUDA_SUCCESS;
    fgr_logf("%s: a copy into the program's memory cannot be captured into a graph remotely: the capture is invalidated",
             name);
    CUresult (*sync)(CUstream) = pt ? fgr_drv.sync_pt : fgr_drv.sync;
    CUresult r = sync ? sync(s) : CUDA_ERROR_NOT_SUPPORTED;
    return r == CUDA_SUCCESS ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : r;
}
