/* Entry points the client answers itself (api/remote.api: local), the
 * bookkeeping around the wrap ones, and the argument encoders that need
 * client state. */
#include "client.h"
#include "../sha256.h"
#include "flexgv/atomic_caps.h"
#include "flexgv/devprop.h"
#include "flexgv/pointer_attrs.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the context stack: per thread, on the client ---- */

#define STACK_MAX 128
static __thread CUcontext stack[STACK_MAX];
static __thread int depth;

CUcontext fgr_current(void) { return depth ? stack[depth - 1] : NULL; }

CUresult fgr_ctx_push(CUcontext ctx)
{
    if (depth == STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

void fgr_ctx_forget(CUcontext ctx)
{
    if (depth && stack[depth - 1] == ctx)
        depth--;
}

/* A primary context reset or last released stays where it was in this
 * thread's stack, as nothing: the calls after it name no context (a retain
 * needs none), not one the server forgot. */
void fgr_ctx_unstack(CUcontext ctx)
{
    for (int i = 0; ctx && i < depth; i++)
        if (stack[i] == ctx)
            stack[i] = NULL;
}


#define NEED_INIT()                          \
    do {                                     \
        if (!fgr_initialized)                \
            return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

FGR_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return fgr_ctx_push(ctx);
}

FGR_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    if (!depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = stack[--depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

/* The ABIs these replaced, which libraries still look up by name: the same
 * calls. */
FGR_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
FGR_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }
FGR_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
FGR_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }
/* (the old instantiation: no error node, an empty log) */
FGR_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize)
{
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = 0;
    return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

/* First ABIs that are the current ones'. */
FGR_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
    return cuMemHostRegister_v2(p, bytesize, flags);
}
FGR_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
FGR_EXPORT CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
FGR_EXPORT CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

FGR_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx) {
        if (depth)
            depth--;
        return CUDA_SUCCESS;
    }
    if (!depth)
        return fgr_ctx_push(ctx);
    stack[depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = fgr_current();
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult r = fgr_fwd_cuCtxCreate_v2(pctx, flags, dev);
    if (r == CUDA_SUCCESS) {
        fgr_answers_ctx_device(*pctx, dev);
        r = fgr_ctx_push(*pctx);
    }
    return r;
}

/* Execution affinities travel; CUDA-in-graphics parameters name a graphics
 * API object (a D3D12 command queue) of this process, which the server's
 * driver cannot reach: refused, said once. */
FGR_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams && ctxCreateParams->cigParams) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("cuCtxCreate_v4: CUDA-in-graphics parameters (cigParams) name a graphics object of this "
                    "process, which the server's driver cannot reach (CUDA_ERROR_NOT_SUPPORTED)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    const CUexecAffinityParam *aff = ctxCreateParams ? ctxCreateParams->execAffinityParams : NULL;
    int n = ctxCreateParams ? ctxCreateParams->numExecAffinityParams : 0;
    CUresult r = fgrCtxCreateAffinity(pctx, aff, n, flags, dev);
    if (r == CUDA_SUCCESS) {
        fgr_answers_ctx_device(*pctx, dev);
        r = fgr_ctx_push(*pctx);
    }
    return r;
}

/* Whether a context has gone (destroyed, reset or last released): its
 * streams and events went with it, and the server forgot their names. */
static int contexts_gone;

/* A stream's or event's destroy is queued (the program waits for no
 * answer) while no context has gone. After one has, the handle may be one
 * that went with it: the destroy then waits for the server's answer, so
 * that its error is this call's, as the driver answers it, not the next
 * syncpoint's. */
static CUresult destroy(int op, uint64_t h, CUresult (*waited)(uint64_t))
{
    if (__atomic_load_n(&contexts_gone, __ATOMIC_RELAXED))
        return waited(h);
    struct fgr_call c;
    CUresult r = fgr_begin(&c, op, 1);
    if (r != CUDA_SUCCESS)
        return r;
    fgr_put_u64(&c.w, h);
    return fgr_send(&c);
}

static CUresult stream_destroy_waited(uint64_t h) { return fgr_fwd_cuStreamDestroy_v2((CUstream)(uintptr_t)h); }
static CUresult event_destroy_waited(uint64_t h) { return fgr_fwd_cuEventDestroy_v2((CUevent)(uintptr_t)h); }

FGR_EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    return destroy(FGR_OP_cuStreamDestroy_v2, (uint64_t)(uintptr_t)s, stream_destroy_waited);
}

FGR_EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    return destroy(FGR_OP_cuEventDestroy_v2, (uint64_t)(uintptr_t)e, event_destroy_waited);
}

FGR_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    /* The driver runs the destructors while the context still exists. */
    fgr_ctx_gone(ctx);
    CUresult r = fgr_fwd_cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS) {
        __atomic_store_n(&contexts_gone, 1, __ATOMIC_RELAXED);
        fgr_ctx_forget(ctx);
        fgr_arena_ctx_gone(ctx);
        fgr_answers_forget_all();
    }
    return r;
}

FGR_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    fgr_answers_primary_changed(dev);
    CUresult r = fgr_fwd_cuDevicePrimaryCtxRetain(pctx, dev);
    if (r == CUDA_SUCCESS) {
        fgr_primary_seen(dev, *pctx);
        fgr_answers_ctx_device(*pctx, dev);
    }
    return r;
}

FGR_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    __atomic_store_n(&contexts_gone, 1, __ATOMIC_RELAXED);
    fgr_primary_gone(dev);
    fgr_answers_primary_changed(dev);
    fgr_answers_forget_all();
    return fgr_fwd_cuDevicePrimaryCtxReset_v2(dev);
}

/* The last release destroys the primary context's state: only the server
 * knows whether this one was the last. */
FGR_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    fgr_answers_primary_changed(dev);
    CUresult r = fgr_fwd_cuDevicePrimaryCtxRelease_v2(dev);
    unsigned int flags;
    int active;
    if (r == CUDA_SUCCESS && cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
        __atomic_store_n(&contexts_gone, 1, __ATOMIC_RELAXED);
        fgr_primary_gone(dev);
        fgr_answers_forget_all();
    }
    return r;
}

/* ---- initialization and what the handshake cached ---- */

FGR_EXPORT CUresult cuInit(unsigned int Flags)
{
    CUresult r = fgr_connect();
    if (r == CUDA_SUCCESS)
        r = fgr_fwd_cuInit(Flags);
    if (r == CUDA_SUCCESS)
        fgr_initialized = 1;
    return r;
}

FGR_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgr_connect();
    if (r == CUDA_SUCCESS)
        *driverVersion = fgr_srv.driver_version;
    return r;
}

static struct fgr_device *device(CUdevice d)
{
    return d >= 0 && d < fgr_srv.ndev ? &fgr_srv.dev[d] : NULL;
}

FGR_EXPORT CUresult cuDeviceGetCount(int *count)
{
    NEED_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fgr_srv.ndev;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    NEED_INIT();
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fgr_device *d = device(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", d->name);
    return CUDA_SUCCESS;
}

static CUresult uuid(CUuuid *u, CUdevice dev)
{
    NEED_INIT();
    if (!u)
        return CUDA_ERROR_INVALID_VALUE;
    struct fgr_device *d = device(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    *u = d->uuid;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice dev) { return uuid(u, dev); }
FGR_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice dev) { return uuid(u, dev); }

FGR_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    NEED_INIT();
    if (!pi || (int)attrib <= 0 || (int)attrib >= FGR_NATTR)
        return CUDA_ERROR_INVALID_VALUE;
    struct fgr_device *d = device(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (d->attr_result[attrib] != CUDA_SUCCESS)
        return (CUresult)d->attr_result[attrib];
    *pi = d->attr[attrib];
    return CUDA_SUCCESS;
}

/* No host-native atomics remotely: the program's memory and the server's
 * GPU are alike only at requests and syncpoints. */
FGR_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *caps, const CUatomicOperation *ops, unsigned int count,
                                                      CUdevice dev)
{
    NEED_INIT();
    if (!device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return fg_atomic_caps(caps, ops, count, 0);
}

FGR_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev) { return fg_devprop(prop, dev, cuDeviceGetAttribute); }

FGR_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    return fg_compute_capability(major, minor, dev, cuDeviceGetAttribute);
}

/* The server's driver's strings (from the handshake); before a connection,
 * the names this build knows. */
static const char *builtin_name(CUresult e)
{
    switch (e) {
#define X(name, value) \
    case value:        \
        return #name;
#include "flexgv/cuda_results.def"
#undef X
    }
    return NULL;
}

static CUresult error_text(CUresult e, const char **p, int desc)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgr_srv.nerr)
        fgr_connect();
    for (int i = 0; i < fgr_srv.nerr; i++)
        if (fgr_srv.err[i].code == (int)e) {
            *p = desc ? fgr_srv.err[i].desc : fgr_srv.err[i].name;
            return *p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        }
    *p = builtin_name(e);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FGR_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr) { return error_text(error, pStr, 0); }
FGR_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr) { return error_text(error, pStr, 1); }

/* ---- host memory is the client's own ---- */

/* Over shm://, pinned memory comes from the heap the executor shares
 * (heap.c), which kernels reach by its address where the executor could map
 * it at the client's. Otherwise small allocations that ask to be mapped into
 * the device's address space or shared by every context (DEVICEMAP,
 * PORTABLE: cudart asks for both) are also the server's, at the same
 * address, for kernels that use them as device memory (mirror.c; only those
 * a call names as a device address come back at syncpoints, so a copy's
 * staging buffer costs nothing); the rest are the client's alone, carried
 * by copies, until a call names them as device memory (mirror.c promotes
 * them then). Those start a page apart, as the server maps them by pages. */
static CUresult host_place(void **pp, size_t bytes, unsigned int flags);

/* Each pinned allocation's flags, for cuMemHostGetFlags. */
static pthread_mutex_t pinned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pinned_flags {
    uintptr_t base;
    size_t bytes;
    unsigned int flags;
    uint64_t id; /* its BUFFER_ID */
} *pinned;
static size_t npinned, cappinned;

static CUresult host_alloc(void **pp, size_t bytes, unsigned int flags)
{
    CUresult r = host_place(pp, bytes, flags);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&pinned_mu);
    int ok = npinned < cappinned;
    if (!ok) {
        size_t cap = cappinned ? 2 * cappinned : 64;
        struct pinned_flags *more = realloc(pinned, cap * sizeof *more);
        if ((ok = more != NULL)) {
            pinned = more;
            cappinned = cap;
        }
    }
    if (ok)
        pinned[npinned++] = (struct pinned_flags){(uintptr_t)*pp, bytes, flags, fgr_buffer_id()};
    pthread_mutex_unlock(&pinned_mu);
    if (!ok) {
        cuMemFreeHost(*pp);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* The allocation holding p (pinned_mu held): its index, or -1. */
static long pinned_find(uintptr_t p)
{
    for (size_t i = 0; i < npinned; i++)
        if (p - pinned[i].base < pinned[i].bytes)
            return (long)i;
    return -1;
}

FGR_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    NEED_INIT();
    if (!pFlags || !p)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pinned_mu);
    long i = pinned_find((uintptr_t)p);
    if (i >= 0) /* under unified addressing all pinned memory is portable and mapped, as the driver says */
        *pFlags = pinned[i].flags | CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
    pthread_mutex_unlock(&pinned_mu);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult host_place(void **pp, size_t bytes, unsigned int flags)
{
    NEED_INIT();
    if (!pp || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    int want_mapped = (flags & (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != 0, mapped = 0;
    void *h = fgr_heap_alloc(bytes, &mapped);
    if (h && (mapped || !want_mapped)) {
        *pp = h;
        return CUDA_SUCCESS;
    }
    if (want_mapped && fgr_mirror_alloc(pp, bytes) == CUDA_SUCCESS) {
        if (h)
            fgr_heap_free(h);
        return CUDA_SUCCESS;
    }
    if ((*pp = h))
        return CUDA_SUCCESS;
    size_t psz = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes > SIZE_MAX - psz || posix_memalign(pp, psz, (bytes + psz - 1) & ~(psz - 1)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!fgr_pinned_hold(*pp, bytes, 0)) {
        free(*pp);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }

FGR_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return host_alloc(pp, bytesize, Flags);
}

FGR_EXPORT CUresult cuMemFreeHost(void *p)
{
    NEED_INIT();
    pthread_mutex_lock(&pinned_mu);
    long i = pinned_find((uintptr_t)p);
    if (i >= 0 && pinned[i].base == (uintptr_t)p)
        pinned[i] = pinned[--npinned];
    pthread_mutex_unlock(&pinned_mu);
    if (!fgr_mirror_free(p) && !fgr_heap_free(p)) {
        fgr_pinned_release(p, 0);
        free(p);
    }
    return CUDA_SUCCESS;
}

/* Under unified addressing a mapped allocation's device address is its
 * host address: so it is for those kept on both sides; pinned memory the
 * client holds alone is kept on both sides from now on (mirror.c). */
FGR_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    NEED_INIT();
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgr_mirror_holds(p) && !fgr_heap_mapped(p)) {
        CUresult r = fgr_pinned_promote((uintptr_t)p); /* (a refusal says why) */
        if (r == CUDA_ERROR_NOT_FOUND)
            return fgr_unsupported(-1, "cuMemHostGetDevicePointer",
                                   "a device address for memory not pinned, or pinned where the executor "
                                   "could not map it");
        if (r != CUDA_SUCCESS)
            return r;
    }
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Client memory needs no pinning: copies carry its bytes. It is recorded,
 * to be kept on both sides once a call names it as device memory. */
FGR_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    (void)Flags;
    NEED_INIT();
    if (!p || !bytesize || (uintptr_t)p + bytesize < (uintptr_t)p)
        return CUDA_ERROR_INVALID_VALUE;
    return fgr_pinned_hold(p, bytesize, 1) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
}

FGR_EXPORT CUresult cuMemHostUnregister(void *p)
{
    NEED_INIT();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return fgr_pinned_release(p, 1) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* ---- captures ---- */

int fgr_none_capturing(CUstream s)
{
    if (__atomic_load_n(&fgr_captures, __ATOMIC_ACQUIRE) > 0 || !fgr_initialized)
        return 0;
    /* The NULL and per-thread streams are the current context's: without
     * one the driver's answer is an error, asked of it. */
    return (uintptr_t)s > (uintptr_t)CU_STREAM_PER_THREAD || fgr_current();
}

static CUresult is_capturing(CUstream s, CUstreamCaptureStatus *status, int pt)
{
    if (!status || !fgr_none_capturing(s))
        return pt ? fgr_fwd_cuStreamIsCapturing_ptsz(s, status) : fgr_fwd_cuStreamIsCapturing(s, status);
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus, 0);
}

FGR_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return is_capturing(hStream, captureStatus, 1);
}

/* A capture that was invalidated ends with no graph: the driver answers
 * NULL then, which an answer with an error does not carry. */
static CUresult end_capture(CUresult r, CUgraph *phGraph)
{
    if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && phGraph)
        *phGraph = NULL;
    return r;
}

FGR_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    uint64_t id = fgr_capture_ending(hStream, 0);
    CUresult r = end_capture(fgr_fwd_cuStreamEndCapture(hStream, phGraph), phGraph);
    fgr_capture_ended(id, r, phGraph);
    return r;
}

FGR_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    uint64_t id = fgr_capture_ending(hStream, 1);
    CUresult r = end_capture(fgr_fwd_cuStreamEndCapture_ptsz(hStream, phGraph), phGraph);
    fgr_capture_ended(id, r, phGraph);
    return r;
}

/* ---- graph prints ---- */

/* The server's driver prints the graph; its text goes into the program's
 * file, which is here, not on the server. */
FGR_EXPORT CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    NEED_INIT();
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    size_t cap = 64u << 10, n = 0;
    char *text = NULL;
    CUresult r;
    for (;;) { /* (again with room for all of it when it did not fit) */
        char *more = realloc(text, cap);
        if (!more) {
            free(text);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        text = more;
        r = fgrGraphDot(hGraph, flags, text, cap, &n);
        if (r != CUDA_SUCCESS || n <= cap)
            break;
        if (n > FGR_DOT_MAX) {
            free(text);
            return fgr_unsupported(-1, "cuGraphDebugDotPrint", "a print of more than 64 MiB");
        }
        cap = n;
    }
    if (r == CUDA_SUCCESS) {
        FILE *f = fopen(path, "w");
        if (!f || fwrite(text, 1, n, f) != n)
            r = CUDA_ERROR_OPERATING_SYSTEM;
        if (f && fclose(f) != 0)
            r = CUDA_ERROR_OPERATING_SYSTEM;
    }
    free(text);
    return r;
}

/* ---- host functions run on the client ---- */

/* The program's function lives here, not on the server. It runs as on a
 * GPU (hostfn.c), over shm:// or a socket's host-function channel. Without
 * either, the client waits for the stream's earlier work, then runs the
 * function on the calling thread before returning, so work enqueued after
 * it starts after it ended, as on a GPU. What differs then: the caller
 * waits (a function that waits for what its caller does next never
 * returns), and a function cannot be captured into a graph (the stream's
 * synchronization ends the capture). */
static CUresult host_wait(const char *name, CUresult (*sync)(CUstream), CUstream s)
{
    NEED_INIT();
    CUresult r = sync(s);
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
        return fgr_unsupported(-1, name, "a host function in a captured stream");
    return r;
}

FGR_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgr_hostfn_launch(hStream, fn, userData, 0);
    if (r != CUDA_ERROR_NOT_SUPPORTED)
        return r;
    r = host_wait("cuLaunchHostFunc", cuStreamSynchronize, hStream);
    if (r == CUDA_SUCCESS)
        fn(userData);
    return r;
}

FGR_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgr_hostfn_launch(hStream, fn, userData, 1);
    if (r != CUDA_ERROR_NOT_SUPPORTED)
        return r;
    r = host_wait("cuLaunchHostFunc", cuStreamSynchronize_ptsz, hStream);
    if (r == CUDA_SUCCESS)
        fn(userData);
    return r;
}

/* A callback also runs after an error of the stream's work, and is told it. */
static CUresult add_callback(CUresult (*sync)(CUstream), CUstream s, CUstreamCallback cb, void *data,
                             unsigned int flags)
{
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = host_wait("cuStreamAddCallback", sync, s);
    if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_NOT_INITIALIZED || r == CUDA_ERROR_INVALID_HANDLE ||
        r == CUDA_ERROR_INVALID_CONTEXT)
        return r;
    cb(s, r, data);
    return r;
}

FGR_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                        unsigned int flags)
{
    return add_callback(cuStreamSynchronize, hStream, callback, userData, flags);
}

FGR_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
                                             unsigned int flags)
{
    return add_callback(cuStreamSynchronize_ptsz, hStream, callback, userData, flags);
}

/* ---- modules: files are read here, images go over whole ---- */

/* A regular file under FGR_MAX_BUF, read whole and ended by a NUL (text
 * images end with theirs); *n leaves the NUL out. */
CUresult fgr_read_image(const char *path, char **img, size_t *n)
{
    *img = NULL;
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size >= FGR_MAX_BUF) {
        fclose(f);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    *n = (size_t)st.st_size;
    *img = malloc(*n + 1);
    CUresult r = !*img ? CUDA_ERROR_OUT_OF_MEMORY : fread(*img, 1, *n, f) != *n ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_SUCCESS;
    fclose(f);
    if (r != CUDA_SUCCESS) {
        free(*img);
        *img = NULL;
        return r;
    }
    (*img)[*n] = '\0';
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    char *img;
    size_t n;
    CUresult r = fgr_read_image(fname, &img, &n);
    if (r == CUDA_SUCCESS)
        r = cuModuleLoadData(module, img);
    free(img);
    return r;
}

FGR_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                          void **jitOptionsValues, unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
    if (!library || !fileName)
        return CUDA_ERROR_INVALID_VALUE;
    char *img;
    size_t n;
    CUresult r = fgr_read_image(fileName, &img, &n);
    if (r == CUDA_SUCCESS)
        r = cuLibraryLoadData(library, img, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                              libraryOptionValues, numLibraryOptions);
    free(img);
    return r;
}

/* ---- names: the server driver's strings, kept here ---- */

/* One copy per function and name, never freed: the program may hold the
 * pointer while the function lives, and after its module is unloaded a
 * handle may come back naming another function. */
static struct fname {
    struct fname *next;
    uint64_t h;
    char name[];
} *fnames;
static pthread_mutex_t fnames_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult name_of(const char **name, void *h)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    char *buf = malloc(FGR_NAME_MAX);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fgrFuncName((CUfunction)h, buf, FGR_NAME_MAX);
    if (r == CUDA_SUCCESS) {
        buf[FGR_NAME_MAX - 1] = '\0';
        pthread_mutex_lock(&fnames_lock);
        struct fname *f = fnames;
        while (f && (f->h != (uint64_t)(uintptr_t)h || strcmp(f->name, buf)))
            f = f->next;
        if (!f && (f = malloc(sizeof *f + strlen(buf) + 1))) {
            f->h = (uint64_t)(uintptr_t)h;
            strcpy(f->name, buf);
            f->next = fnames;
            fnames = f;
        }
        pthread_mutex_unlock(&fnames_lock);
        if (f)
            *name = f->name;
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    free(buf);
    return r;
}

FGR_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc) { return name_of(name, hfunc); }
FGR_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hkernel) { return name_of(name, hkernel); }

FGR_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult r = fgr_fwd_cuModuleUnload(hmod);
    if (r == CUDA_SUCCESS)
        fgr_managed_owner_gone(hmod);
    fgr_kparams_flush();
    fgr_answers_forget_all();
    return r;
}

FGR_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult r = fgr_fwd_cuLibraryUnload(library);
    if (r == CUDA_SUCCESS)
        fgr_managed_owner_gone(library);
    fgr_kparams_flush();
    fgr_answers_forget_all();
    return r;
}

/* The runtime's registration wrapper around a fatbinary. */
struct fatbin_wrapper {
    int magic, version;
    const void *data;
    void *filename_or_fatbins;
};
#define FATBIN_WRAPPER_MAGIC 0x466243b1

void fgr_put_image(struct fgr_buf *w, const void *image)
{
    if (image && ((const struct fatbin_wrapper *)image)->magic == FATBIN_WRAPPER_MAGIC)
        image = ((const struct fatbin_wrapper *)image)->data;
    if (!image) {
        fgr_put_u8(w, FGR_IMAGE_ABSENT);
        return;
    }
    /* An image whose size cannot be told goes as an empty one: the
     * executor answers CUDA_ERROR_INVALID_IMAGE. */
    uint64_t n = fgr_image_size(image, FGR_MAX_BUF);
    if (fgr_keep_images && n >= FGR_KEEP_IMAGE_MIN) {
        uint8_t h[32];
        fgr_sha256(image, (size_t)n, h);
        if (fgr_image_is_kept(h)) {
            fgr_put_u8(w, FGR_IMAGE_BY_HASH);
            fgr_put_bytes(w, h, 32);
            fgr_put_u64(w, n);
            return;
        }
        fgr_put_u8(w, FGR_IMAGE_KEEP);
    } else {
        fgr_put_u8(w, FGR_IMAGE_INLINE);
    }
    fgr_put_buf(w, n ? image : "", n);
}

CUresult fgr_launchcfg_check(const CUlaunchConfig *c, const char *name)
{
    if (!c || !c->numAttrs)
        return CUDA_SUCCESS;
    if (!c->attrs)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->numAttrs > FGR_MAX_LAUNCH_ATTRS)
        return fgr_unsupported(-1, name, "more than 32 launch attributes");
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (!fgr_launch_attr_sendable(c->attrs[i].id)) {
            char what[40];
            snprintf(what, sizeof what, "launch attribute %u", (unsigned)c->attrs[i].id);
            return fgr_unsupported(-1, name, what);
        }
    return CUDA_SUCCESS;
}

void fgr_put_launchcfg(struct fgr_buf *w, const CUlaunchConfig *c)
{
    fgr_put_u8(w, c != NULL);
    if (!c)
        return;
    const unsigned v[7] = {c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                           c->sharedMemBytes};
    for (int i = 0; i < 7; i++)
        fgr_put_u32(w, v[i]);
    fgr_put_u64(w, (uint64_t)(uintptr_t)c->hStream);
    fgr_put_u32(w, c->numAttrs);
    for (unsigned i = 0; i < c->numAttrs; i++) {
        fgr_put_u32(w, (uint32_t)c->attrs[i].id);
        fgr_put_bytes(w, &c->attrs[i].value, sizeof c->attrs[i].value);
    }
}

/* ---- managed memory (mirror.c keeps it on both sides) ---- */

/* A location as the CUdevice of the first prefetch and advice calls
 * (CU_DEVICE_CPU: the host); 0 when it names none of those. */
static int location_device(CUmemLocation l, CUdevice *dev)
{
    switch (l.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: *dev = l.id; return 1;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: *dev = CU_DEVICE_CPU; return 1;
    default: return 0;
    }
}

static CUresult prefetch_v2(CUdeviceptr p, size_t n, CUmemLocation l, unsigned flags, CUstream s, int pt)
{
    CUdevice dev;
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
        return fgr_unsupported(-1, "cuMemPrefetchAsync_v2", "a host NUMA node as the location");
    if (!location_device(l, &dev))
        return CUDA_ERROR_INVALID_VALUE;
    return pt ? cuMemPrefetchAsync_ptsz(p, n, dev, s) : cuMemPrefetchAsync(p, n, dev, s);
}

FGR_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation l, unsigned int flags, CUstream s)
{
    return prefetch_v2(p, n, l, flags, s, 0);
}

FGR_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation l, unsigned int flags, CUstream s)
{
    return prefetch_v2(p, n, l, flags, s, 1);
}

FGR_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation l)
{
    CUdevice dev = 0;
    if (l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
        return fgr_unsupported(-1, "cuMemAdvise_v2", "a host NUMA node as the location");
    /* (read-mostly advice takes no location) */
    if (!location_device(l, &dev) && advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
        advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION)
        return CUDA_ERROR_INVALID_VALUE;
    return cuMemAdvise(p, n, advice, dev);
}

/* Each attribute in turn, as the driver answers the plural call. */
FGR_EXPORT CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                            size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    if (!numAttributes || !data || !dataSizes || !attributes)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < numAttributes; i++) {
        CUresult r = cuMemRangeGetAttribute(data[i], dataSizes[i], attributes[i], devPtr, count);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

/* Memory the server does not know (or the client's own pinned memory)
 * gets the driver's answers for memory it does not know; of memory it
 * knows, what one lacks reads as zeroes (flexgv/pointer_attrs.h). */
FGR_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                           CUdeviceptr ptr)
{
    if (numAttributes && (!attributes || !data))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (!data[i] || !fg_pointer_attr_size(attributes[i]))
            return CUDA_ERROR_INVALID_VALUE;
    unsigned type;
    CUresult r = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE)
        return r;
    for (unsigned i = 0; i < numAttributes; i++) {
        if (r != CUDA_SUCCESS) {
            fg_pointer_attr_unknown(attributes[i], data[i], ptr);
            continue;
        }
        CUresult ri = attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE
                          ? (memcpy(data[i], &type, sizeof type), CUDA_SUCCESS)
                          : cuPointerGetAttribute(data[i], attributes[i], ptr);
        if (ri == CUDA_ERROR_INVALID_VALUE)
            memset(data[i], 0, fg_pointer_attr_size(attributes[i]));
        else if (ri != CUDA_SUCCESS)
            return ri;
    }
    return CUDA_SUCCESS;
}

uint64_t fgr_buffer_id(void)
{
    static uint64_t n;
    return 1ull << 62 | __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED);
}

/* As the driver answers of cuMemAllocHost's memory and registered ranges
 * (both host memory at the same address for the device), in the current
 * context. */
CUresult fgr_own_pointer_attr(void *data, int attribute, CUdeviceptr ptr, CUresult none)
{
    struct fg_pointer_facts f = {.host = 1, .mapping = 2u << 20};
    pthread_mutex_lock(&pinned_mu);
    long i = pinned_find((uintptr_t)ptr);
    if (i >= 0) {
        f.base = pinned[i].base;
        f.size = pinned[i].bytes;
        f.id = pinned[i].id;
    }
    pthread_mutex_unlock(&pinned_mu);
    if (i < 0 && !fgr_pinned_registered(ptr, &f.base, &f.size, &f.id))
        return none;
    if (i < 0)
        f.mapping = f.size; /* a registered range is its own mapping */
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    CUdevice dev;
    if (cuCtxGetCurrent(&f.ctx) == CUDA_SUCCESS && f.ctx && attribute == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
        cuCtxGetDevice(&dev) == CUDA_SUCCESS)
        f.dev = dev;
    return fg_pointer_attr(attribute, data, ptr, &f);
}

/* ---- module and library options (remote/options.h) ---- */

CUresult fgr_opts_check(int kind, const void *opts, void *const *values, unsigned n, const char *name)
{
    const unsigned *o = opts;
    /* (library options may come without their values: neither option's
     * value is read) */
    if (n && (!o || (!values && kind != FGR_OPTS_LIBRARY)))
        return CUDA_ERROR_INVALID_VALUE;
    if (n > FGR_MAX_OPTS)
        return fgr_unsupported(-1, name, "more than 64 options");
    for (unsigned i = 0; i < n; i++)
        if (fgr_option_fate(kind, o[i]) == FGR_OPT_UNKNOWN) {
            char what[48];
            snprintf(what, sizeof what, "%s option %u", kind == FGR_OPTS_LIBRARY ? "library" : "JIT", o[i]);
            return fgr_unsupported(-1, name, what);
        }
    return CUDA_SUCCESS;
}

/* The size a module load's log buffer option i travels with: 0 when it
 * does not (no buffer, or no size after it). */
static size_t log_size(const unsigned *o, void *const *values, unsigned n, unsigned i)
{
    if (!fgr_is_log(o[i]) || !values[i])
        return 0;
    for (unsigned j = 0; j < n; j++)
        if (o[j] == o[i] + 1) /* its size follows it */
            return (uintptr_t)values[j] < FGR_LOG_MAX ? (uintptr_t)values[j] : FGR_LOG_MAX;
    return 0;
}

/* Whether option i travels, and as what value. */
static int travels(int kind, const unsigned *o, void *const *values, unsigned n, unsigned i, uint64_t *v)
{
    int fate = fgr_option_fate(kind, o[i]);
    *v = values ? (uint64_t)(uintptr_t)values[i] : 0; /* (a library's options may come without) */
    if (fate == FGR_OPT_SEND)
        return 1;
    if (fate != FGR_OPT_LOG)
        return 0;
    for (unsigned b = 0; b < n; b++) /* a log's buffer (as 0) or its size, of a log that travels */
        if (fgr_is_log(o[b]) && (b == i || o[b] + 1 == o[i]) && log_size(o, values, n, b)) {
            *v = b == i ? 0 : log_size(o, values, n, b);
            return 1;
        }
    return 0;
}

/* The options that travel, as (option, value) pairs; of those kept back,
 * log buffers come back empty (their sizes say nothing was written). */
void fgr_put_opts(struct fgr_buf *w, int kind, const void *opts, void **values, unsigned n)
{
    const unsigned *o = opts;
    uint32_t m = 0;
    uint64_t v;
    for (unsigned i = 0; i < n; i++)
        m += travels(kind, o, values, n, i, &v);
    fgr_put_u32(w, m);
    for (unsigned i = 0; i < n; i++)
        if (travels(kind, o, values, n, i, &v)) {
            fgr_put_u32(w, o[i]);
            fgr_put_u64(w, v);
        }
    if (kind == FGR_OPTS_LIBRARY)
        return;
    for (unsigned i = 0; i < n; i++) {
        if (!fgr_is_log(o[i]) || ((kind == FGR_OPTS_JIT || kind == FGR_OPTS_LINK) && log_size(o, values, n, i)))
            continue; /* it travels: written back (a link's, later: link.c) */
        for (unsigned j = 0; j < n; j++)
            if (o[j] == o[i] + 1 && (uintptr_t)values[j] > 0 && values[i]) {
                *(char *)values[i] = 0;
                values[j] = NULL;
            }
    }
}

/* A module load's logs, as the executor answers them (remote/options.h):
 * for the info log, then the error log, the size the driver wrote back
 * and the text, copied into the program's buffers that travelled. */
void fgr_get_opts_logs(struct fgr_call *c, int kind, const void *opts, void **values, unsigned n)
{
    const unsigned *o = opts;
    if (kind != FGR_OPTS_JIT)
        return;
    for (unsigned k = FGR_JIT_INFO_LOG_BUFFER; k <= FGR_JIT_ERROR_LOG_BUFFER; k += 2) {
        uint64_t filled = fgr_get_u64(&c->r), len = 0;
        const char *text = fgr_get_u8(&c->r) ? fgr_get_bytes(&c->r, len = fgr_get_u64(&c->r)) : NULL;
        for (unsigned i = 0; i < n; i++) {
            size_t cap = o[i] == k ? log_size(o, values, n, i) : 0;
            if (!cap)
                continue;
            size_t m = text && len ? (len < cap ? len : cap) : 0;
            if (m)
                memcpy(values[i], text, m);
            ((char *)values[i])[m ? m - 1 : 0] = 0;
            for (unsigned j = 0; j < n; j++)
                if (o[j] == k + 1)
                    values[j] = (void *)(uintptr_t)(filled < cap ? filled : cap);
        }
    }
}

/* ---- kernel parameters: layouts by function, from the server ---- */

struct layout {
    CUfunction f;
    uint32_t n;
    uint32_t *size;
    struct layout *next;
};
static struct layout *layouts[256];
static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned bucket(CUfunction f) { return (unsigned)(((uintptr_t)f >> 4) * 2654435761u) % 256; }

void fgr_kparams_flush(void)
{
    pthread_mutex_lock(&layout_lock);
    for (int i = 0; i < 256; i++)
        while (layouts[i]) {
            struct layout *l = layouts[i];
            layouts[i] = l->next;
            free(l->size);
            free(l);
        }
    pthread_mutex_unlock(&layout_lock);
}

CUresult fgrParamSizes(CUfunction f, unsigned int max, unsigned int *count, unsigned int *sizes,
                       unsigned long long *check);

/* Pointers among a launch's parameters into pinned memory the client holds
 * alone: kept on both sides from now on, before the launch is sent. */
static void promote_words(const void *buf, size_t n)
{
    for (size_t at = 0; at + sizeof(uint64_t) <= n; at += sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, (const char *)buf + at, sizeof v);
        fgr_pinned_promote(v);
    }
}

static void promote_params(const struct fgr_kparams *kp, void **params)
{
    if (__atomic_load_n(&fgr_nheld, __ATOMIC_RELAXED))
        for (uint32_t i = 0; i < kp->n; i++)
            if (kp->size[i] == sizeof(uint64_t) && params[i])
                promote_words(params[i], sizeof(uint64_t));
}

CUresult fgr_kparams_layout(CUfunction f, void **params, struct fgr_kparams *kp)
{
    kp->n = 0;
    kp->size = NULL;
    if (!params)
        return CUDA_SUCCESS;
    CUresult r = fgr_kparams_of(f, kp);
    if (r == CUDA_SUCCESS)
        promote_params(kp, params);
    return r;
}

CUresult fgr_kparams_of(CUfunction f, struct fgr_kparams *kp)
{
    kp->n = 0;
    kp->size = NULL;
    pthread_mutex_lock(&layout_lock);
    for (struct layout *l = layouts[bucket(f)]; l; l = l->next)
        if (l->f == f) {
            kp->n = l->n;
            kp->size = l->size;
            pthread_mutex_unlock(&layout_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&layout_lock);
    /* Not under the lock: a call to the server, one for all the sizes (a
     * second when there are more than a first guess holds). A library's
     * kernel stands in for a function (CUDA 12+ runtimes launch those):
     * the server tells them apart. */
    unsigned n = 0, guess = 32, *size = NULL;
    for (;;) {
        unsigned *s = realloc(size, guess * sizeof *size);
        if (!s) {
            free(size);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        size = s;
        unsigned long long sum = 0;
        CUresult r = fgrParamSizes(f, guess, &n, size, &sum);
        if (r == CUDA_SUCCESS && sum != fgr_layout_check(n, size, n < guess ? n : guess))
            r = fgr_garbled("fgrParamSizes");
        if (r == CUDA_ERROR_NOT_SUPPORTED) {
            free(size);
            return fgr_unsupported(-1, "kernel parameters", "a launch whose layout the server cannot tell");
        }
        if (r != CUDA_SUCCESS) {
            free(size);
            return r;
        }
        if (n > FGR_MAX_KPARAMS) { /* more than any launch can take: a garbled answer */
            free(size);
            return CUDA_ERROR_INVALID_VALUE;
        }
        if (n <= guess)
            break;
        guess = n;
    }
    uint64_t total = 0; /* wide: 32-bit sizes that wrap around would pass */
    for (unsigned i = 0; i < n; i++)
        total += size[i];
    if (total > FGR_MAX_KPARAM_BYTES) {
        free(size);
        return CUDA_ERROR_INVALID_VALUE;
    }
    struct layout *l = malloc(sizeof *l);
    if (!l) {
        free(size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *l = (struct layout){f, n, size, NULL};
    pthread_mutex_lock(&layout_lock);
    l->next = layouts[bucket(f)];
    layouts[bucket(f)] = l;
    pthread_mutex_unlock(&layout_lock);
    kp->n = n;
    kp->size = size;
    return CUDA_SUCCESS;
}

void fgr_put_kparams(struct fgr_buf *w, const struct fgr_kparams *kp, void **params)
{
    fgr_put_u8(w, params != NULL);
    if (!params)
        return;
    fgr_put_u32(w, kp->n);
    int mirrors = __atomic_load_n(&fgr_nmirrors, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < kp->n; i++) {
        fgr_put_u32(w, kp->size[i]);
        fgr_put_bytes(w, params[i], kp->size[i]);
        if (mirrors && kp->size[i] == sizeof(uint64_t) && params[i]) {
            /* a pointer to pinned memory kept on both sides, maybe */
            uint64_t v;
            memcpy(&v, params[i], sizeof v);
            fgr_mirror_mark(v);
        }
    }
}

CUresult fgr_extra_check(void **extra, void **params, struct fgr_extra *ex, const char *name)
{
    *ex = (struct fgr_extra){extra != NULL, NULL, 0};
    if (extra && params)
        return CUDA_ERROR_INVALID_VALUE; /* the parameters one way or the other */
    const size_t *size = NULL;
    for (int i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (i >= 16)
            return fgr_unsupported(-1, name, "an extra of more than 8 entries");
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            ex->buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            return fgr_unsupported(-1, name, "an extra entry other than the parameter buffer and its size");
    }
    if (!ex->buf != !size)
        return CUDA_ERROR_INVALID_VALUE; /* a buffer without its size, or a size without a buffer */
    if (size && *size > FGR_MAX_KPARAM_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    ex->n = size ? *size : 0;
    if (ex->n && __atomic_load_n(&fgr_nheld, __ATOMIC_RELAXED))
        promote_words(ex->buf, ex->n);
    return CUDA_SUCCESS;
}

void fgr_put_extra(struct fgr_buf *w, const struct fgr_extra *ex)
{
    fgr_put_u8(w, (uint8_t)ex->present);
    if (!ex->present)
        return;
    fgr_put_u32(w, (uint32_t)ex->n);
    fgr_put_bytes(w, ex->buf, ex->n);
    if (__atomic_load_n(&fgr_nmirrors, __ATOMIC_RELAXED))
        for (size_t at = 0; at + sizeof(uint64_t) <= ex->n; at += sizeof(uint64_t)) {
            /* a pointer to pinned memory kept on both sides, maybe */
            uint64_t v;
            memcpy(&v, (const char *)ex->buf + at, sizeof v);
            fgr_mirror_mark(v);
        }
}

/* ---- entry point resolution from the client's own table ---- */

static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status)
{
    static const struct fg_proc *const tables[] = {fgr_procs};
    CUresult r = fg_proc_resolve(tables, &fgr_nprocs, 1, symbol, pfn, cudaVersion, flags, status);
    if (r != CUDA_SUCCESS && symbol && fgr_log_errors()) {
        char what[160];
        snprintf(what, sizeof what, "cuGetProcAddress(\"%.100s\", %d)", symbol, cudaVersion);
        fgr_log_error(what, r);
    }
    return r;
}

FGR_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return resolve(symbol, pfn, cudaVersion, flags, NULL);
}

FGR_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    return resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ---- the block size of best occupancy ---- */

/* The program's blockSizeToDynamicSMemSize runs here, for every block size
 * the server's driver may try; the driver there answers from those sizes. */
FGR_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                              CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                              size_t dynamicSMemSize, int blockSizeLimit,
                                                              unsigned int flags)
{
    static __thread size_t sizes[FGR_OCC_SIZES];
    unsigned int n = 0;
    if (blockSizeToDynamicSMemSize) {
        n = blockSizeLimit > 0 && (unsigned)blockSizeLimit < FGR_OCC_SIZES ? (unsigned)blockSizeLimit : FGR_OCC_SIZES;
        for (unsigned int b = 1; b <= n; b++)
            sizes[b - 1] = blockSizeToDynamicSMemSize((int)b);
    }
    return fgrOccupancyBlockSize(minGridSize, blockSize, func, n ? sizes : NULL, n, dynamicSMemSize,
                                         blockSizeLimit, flags);
}

FGR_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                     CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                     size_t dynamicSMemSize, int blockSizeLimit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0);
}

/* A forked child: no context pushed, and neither the parent's pinned
 * allocations (not inherited, as the driver's are not) nor a lock a parent's
 * thread held. */
void fgr_local_forked(void)
{
    depth = 0;
    pthread_mutex_init(&pinned_mu, NULL);
    npinned = 0;
    pthread_mutex_init(&fnames_lock, NULL);
}
