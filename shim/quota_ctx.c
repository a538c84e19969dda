/* Memory quotas: CUDA contexts, charged what creating one really took on
 * the device, and the driver queries the other quota policies share. */
#include "memquota.h"

#include "flexgv/cuda_util.h"

#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int fg_current_device(void)
{
    CUdevice d;
    fg_real_cuCtxGetDevice f = REAL(cuCtxGetDevice);
    return f && f(&d) == CUDA_SUCCESS ? d : -1;
}

const struct fg_drvmem *fg_drv(void)
{
    static const struct fg_drvmem *t;
    const struct fg_drvmem *r = __atomic_load_n(&t, __ATOMIC_ACQUIRE);
    if (!r) {
        int v = 0;
        fg_real_cuDriverGetVersion f = REAL(cuDriverGetVersion);
        if (f)
            f(&v);
        r = fg_drvmem_for(v);
        __atomic_store_n(&t, r, __ATOMIC_RELEASE);
    }
    return r;
}

uintptr_t fg_current_ctx(void)
{
    CUcontext c = NULL;
    fg_real_cuCtxGetCurrent f = REAL(cuCtxGetCurrent);
    if (f)
        f(&c);
    return (uintptr_t)c;
}

CUstreamCaptureMode fg_relaxed_begin(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    fg_real_cuThreadExchangeStreamCaptureMode f = REAL(cuThreadExchangeStreamCaptureMode);
    if (!f || f(&m) != CUDA_SUCCESS)
        return CU_STREAM_CAPTURE_MODE_RELAXED;
    return m;
}

void fg_relaxed_end(CUstreamCaptureMode saved)
{
    fg_real_cuThreadExchangeStreamCaptureMode f = REAL(cuThreadExchangeStreamCaptureMode);
    if (f && saved != CU_STREAM_CAPTURE_MODE_RELAXED)
        f(&saved);
}

int fg_stream_capturing(CUstream s, int per_thread)
{
    if (per_thread && s == NULL)
        s = CU_STREAM_PER_THREAD;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    fg_real_cuStreamIsCapturing f = REAL(cuStreamIsCapturing);
    if (!f)
        return 0;
    if (f(s, &st) != CUDA_SUCCESS)
        return -1;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- measuring a context through NVML ---- */

#define MAX_PROCS 256

struct nvml_snapshot {
    int ok;
    unsigned n;
    nvmlProcessInfo_t info[MAX_PROCS];
};

/* Our pid as NVML reports it: the driver reports pids in the root PID
 * namespace, which inside a container differ from getpid(); learnt from
 * the process that appears when we create our first context. */
static unsigned nvml_pid;

static void nvml_processes(int dev, struct nvml_snapshot *s)
{
    s->ok = 0;
    fg_real_cuDeviceGetUuid_v2 uuidf = REAL(cuDeviceGetUuid_v2);
    fg_real_nvmlInit_v2 init = REAL(nvmlInit_v2);
    fg_real_nvmlDeviceGetComputeRunningProcesses_v3 procs = REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    nvmlReturn_t (*byuuid)(const char *, nvmlDevice_t *) =
        (nvmlReturn_t(*)(const char *, nvmlDevice_t *))fg_nvml_sym("nvmlDeviceGetHandleByUUID");
    CUuuid u;
    nvmlDevice_t h;
    char text[64];
    static int up; /* NVML initialized once: the backstop asks often */
    if (!uuidf || !init || !procs || !byuuid || uuidf(&u, dev) != CUDA_SUCCESS)
        return;
    if (!__atomic_load_n(&up, __ATOMIC_ACQUIRE)) {
        if (init() != NVML_SUCCESS)
            return;
        __atomic_store_n(&up, 1, __ATOMIC_RELEASE);
    }
    fg_uuid_text(&u, text, sizeof text);
    s->n = MAX_PROCS;
    s->ok = byuuid(text, &h) == NVML_SUCCESS && procs(h, &s->n, s->info) == NVML_SUCCESS;
}

static long long used_by(const struct nvml_snapshot *s, unsigned pid)
{
    for (unsigned i = 0; i < s->n; i++)
        if (s->info[i].pid == pid)
            return (long long)s->info[i].usedGpuMemory;
    return -1;
}

/* What the context just created took, or -1 when NVML cannot tell. */
static long long measured(const struct nvml_snapshot *before, const struct nvml_snapshot *after)
{
    if (!before->ok || !after->ok)
        return -1;
    unsigned me = __atomic_load_n(&nvml_pid, __ATOMIC_RELAXED);
    if (!me && used_by(after, (unsigned)getpid()) >= 0)
        me = (unsigned)getpid();
    if (!me) {
        /* Not visible under our own pid: we are the one process that
         * appeared, or we cannot tell which one we are. */
        unsigned fresh = 0, nfresh = 0;
        for (unsigned i = 0; i < after->n; i++)
            if (used_by(before, after->info[i].pid) < 0) {
                fresh = after->info[i].pid;
                nfresh++;
            }
        if (nfresh != 1)
            return -1;
        me = fresh;
    }
    __atomic_store_n(&nvml_pid, me, __ATOMIC_RELAXED);
    fg_tenant_nvml_pid(me); /* the tenant's NVML lists know us by it */
    long long a = used_by(after, me), b = used_by(before, me);
    if (a < 0)
        return -1;
    return b < 0 ? a : (a >= b ? a - b : -1);
}

long long fg_nvml_self_used(int dev)
{
    struct nvml_snapshot s;
    nvml_processes(dev, &s);
    if (!s.ok)
        return -1;
    unsigned me = __atomic_load_n(&nvml_pid, __ATOMIC_RELAXED);
    return used_by(&s, me ? me : (unsigned)getpid());
}

/* ---- contexts ---- */

struct ctx_charge {
    int dev;
    uint64_t est;
    struct nvml_snapshot before;
};

/* Charges a context about to be created on dev (the estimate, settled once
 * it exists); 0 when the tenant has no room for one. */
static int ctx_precharge(struct ctx_charge *c, int dev)
{
    c->dev = dev;
    c->est = fg_ctx_estimate(dev);
    nvml_processes(dev, &c->before);
    return fg_charge(dev, c->est, "a CUDA context");
}

static void ctx_created(struct ctx_charge *c, uintptr_t ctx)
{
    struct nvml_snapshot *after = malloc(sizeof *after);
    long long m = -1;
    if (after) {
        nvml_processes(c->dev, after);
        m = measured(&c->before, after);
        free(after);
    }
    uint64_t bytes = m >= 0 ? (uint64_t)m : c->est;
    if (m >= 0)
        fg_ctx_measured(c->dev, bytes);
    if (bytes > c->est)
        fg_force_charge(c->dev, bytes - c->est); /* already held: account, never undo */
    else
        fg_uncharge(c->dev, c->est - bytes);
    if (!fg_rec_reserve()) {
        fg_uncharge(c->dev, bytes); /* cannot be tracked: not charged either */
        return;
    }
    fg_rec_lock();
    fg_rec_put(ctx, R_CTX, c->dev, bytes, 0);
    fg_rec_unlock();
}

static int drop_owned(struct rec *r, void *ctx)
{
    if (r->owner == (uintptr_t)ctx)
        fg_rec_drop(r);
    return 0;
}

static void ctx_gone(uintptr_t ctx)
{
    fg_rec_lock();
    struct rec *r = fg_rec_find(ctx, R_CTX);
    if (r)
        fg_rec_drop(r);
    if ((r = fg_rec_find(ctx, R_HEAP)))
        fg_rec_drop(r);
    if ((r = fg_rec_find(ctx, R_STACK)))
        fg_rec_drop(r);
    if ((r = fg_rec_find(ctx, R_PENDING)))
        fg_rec_drop(r);
    fg_rec_each(R_MEM, drop_owned, (void *)ctx);
    fg_rec_each(R_ARRAY, drop_owned, (void *)ctx);
    fg_rec_each(R_MODULE, drop_owned, (void *)ctx);
    fg_rec_unlock();
    fg_code_ctx_gone();
    fg_pools_settle();
    fg_graph_settle_all();
}

static struct ctx_charge *new_charge(void) { return malloc(sizeof(struct ctx_charge)); }

#define CREATE_CTX(dev, call)                                           \
    struct ctx_charge *c = new_charge();                               \
    if (!c)                                                            \
        return CUDA_ERROR_OUT_OF_MEMORY;                               \
    if (!ctx_precharge(c, dev)) {                                      \
        free(c);                                                       \
        return CUDA_ERROR_OUT_OF_MEMORY;                               \
    }                                                                  \
    CUresult r = call;                                                 \
    if (r == CUDA_SUCCESS)                                             \
        ctx_created(c, (uintptr_t)*pctx);                              \
    else                                                               \
        fg_uncharge(dev, c->est);                                      \
    free(c);                                                           \
    return r

CUresult fg_mem_cuCtxCreate_v2(fg_real_cuCtxCreate_v2 next, CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CREATE_CTX(dev, next(pctx, flags, dev));
}

CUresult fg_mem_cuCtxCreate_v4(fg_real_cuCtxCreate_v4 next, CUcontext *pctx, CUctxCreateParams *params,
                                  unsigned int flags, CUdevice dev)
{
    CREATE_CTX(dev, next(pctx, params, flags, dev));
}

CUresult fg_mem_cuCtxDestroy_v2(fg_real_cuCtxDestroy_v2 next, CUcontext ctx)
{
    CUresult r = next(ctx);
    if (r == CUDA_SUCCESS)
        ctx_gone((uintptr_t)ctx);
    return r;
}

/* A green context is a context of its own on part of the SMs: charged and
 * measured as one, under the context it stands for, which what is made in
 * it is charged to, and which goes with it. */
static uintptr_t green_ctx(CUgreenCtx g)
{
    CUcontext c = NULL;
    fg_real_cuCtxFromGreenCtx f = REAL(cuCtxFromGreenCtx);
    return f && f(&c, g) == CUDA_SUCCESS && c ? (uintptr_t)c : (uintptr_t)g;
}

CUresult fg_mem_cuGreenCtxCreate(fg_real_cuGreenCtxCreate next, CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                 unsigned int flags)
{
    struct ctx_charge *c = new_charge();
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!ctx_precharge(c, dev)) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = next(phCtx, desc, dev, flags);
    if (r == CUDA_SUCCESS && phCtx)
        ctx_created(c, green_ctx(*phCtx));
    else
        fg_uncharge(dev, c->est);
    free(c);
    return r;
}

CUresult fg_mem_cuGreenCtxDestroy(fg_real_cuGreenCtxDestroy next, CUgreenCtx hCtx)
{
    uintptr_t ctx = green_ctx(hCtx);
    CUresult r = next(hCtx);
    if (r == CUDA_SUCCESS)
        ctx_gone(ctx);
    return r;
}

/* Primary contexts: of many threads retaining one at once, exactly one
 * charges and measures it; the others wait for that (a futex, no spinning)
 * and only count their reference. */
enum { P_NONE, P_CREATING, P_LIVE };
#define MAX_PRIMARY 64
static int pstate[MAX_PRIMARY];
static int prefs[MAX_PRIMARY];
static uintptr_t pctx_of[MAX_PRIMARY];

CUresult fg_mem_cuDevicePrimaryCtxRetain(fg_real_cuDevicePrimaryCtxRetain next, CUcontext *pctx, CUdevice dev)
{
    if (dev < 0 || dev >= MAX_PRIMARY)
        return next(pctx, dev);
    for (;;) {
        int s = __atomic_load_n(&pstate[dev], __ATOMIC_ACQUIRE);
        if (s == P_LIVE) {
            CUresult r = next(pctx, dev);
            if (r == CUDA_SUCCESS)
                __atomic_fetch_add(&prefs[dev], 1, __ATOMIC_ACQ_REL);
            return r;
        }
        if (s == P_CREATING) {
            syscall(SYS_futex, &pstate[dev], FUTEX_WAIT_PRIVATE, P_CREATING, NULL, NULL, 0);
            continue;
        }
        int none = P_NONE;
        if (!__atomic_compare_exchange_n(&pstate[dev], &none, P_CREATING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        struct ctx_charge *c = new_charge();
        CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
        if (c && ctx_precharge(c, dev)) {
            r = next(pctx, dev);
            if (r == CUDA_SUCCESS) {
                ctx_created(c, (uintptr_t)*pctx);
                pctx_of[dev] = (uintptr_t)*pctx;
                __atomic_fetch_add(&prefs[dev], 1, __ATOMIC_ACQ_REL);
            } else {
                fg_uncharge(dev, c->est);
            }
        }
        free(c);
        __atomic_store_n(&pstate[dev], r == CUDA_SUCCESS ? P_LIVE : P_NONE, __ATOMIC_RELEASE);
        syscall(SYS_futex, &pstate[dev], FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
        return r;
    }
}

static void primary_dropped(CUdevice dev, int reset)
{
    if (dev < 0 || dev >= MAX_PRIMARY || __atomic_load_n(&pstate[dev], __ATOMIC_ACQUIRE) != P_LIVE)
        return;
    int left;
    if (reset) {
        __atomic_store_n(&prefs[dev], 0, __ATOMIC_RELEASE);
        left = 0;
    } else {
        left = __atomic_sub_fetch(&prefs[dev], 1, __ATOMIC_ACQ_REL);
    }
    int live = P_LIVE;
    if (left <= 0 &&
        __atomic_compare_exchange_n(&pstate[dev], &live, P_NONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&prefs[dev], 0, __ATOMIC_RELEASE);
        ctx_gone(pctx_of[dev]);
    }
}

CUresult fg_mem_cuDevicePrimaryCtxRelease_v2(fg_real_cuDevicePrimaryCtxRelease_v2 next, CUdevice dev)
{
    CUresult r = next(dev);
    if (r == CUDA_SUCCESS)
        primary_dropped(dev, 0);
    return r;
}

CUresult fg_mem_cuDevicePrimaryCtxReset_v2(fg_real_cuDevicePrimaryCtxReset_v2 next, CUdevice dev)
{
    CUresult r = next(dev);
    if (r == CUDA_SUCCESS)
        primary_dropped(dev, 1);
    return r;
}

/* Async-signal-safe: a forked child holds no context. */
void fg_ctx_after_fork(void)
{
    for (int i = 0; i < MAX_PRIMARY; i++)
        pstate[i] = prefs[i] = 0;
    nvml_pid = 0;
}

/* Limits that reserve device memory (flexgv/drvmem.h): the heap kernels
 * malloc from, the context's local memory level (the stack limit sets it,
 * also downwards; a launch may grow it, quota_launch.c) and room for
 * pending device-side launches. What a program asks beyond the driver's
 * defaults (part of what its context was charged) is charged to the
 * context's device, replaced when the limit changes and given back with
 * the context. The printf FIFO took no device memory (measured); other
 * limits pass. */
#define DEFAULT_HEAP (8ull << 20)

uint64_t fg_resident_threads(int dev)
{
    static uint64_t cache[MAX_PRIMARY];
    uint64_t v = dev >= 0 && dev < MAX_PRIMARY ? __atomic_load_n(&cache[dev], __ATOMIC_RELAXED) : 0;
    if (v)
        return v;
    int sms = 0, per_sm = 0;
    fg_real_cuDeviceGetAttribute attr = REAL(cuDeviceGetAttribute);
    if (!attr || attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
        attr(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) != CUDA_SUCCESS || sms <= 0 ||
        per_sm <= 0)
        return 0;
    v = (uint64_t)sms * (uint64_t)per_sm;
    if (dev >= 0 && dev < MAX_PRIMARY)
        __atomic_store_n(&cache[dev], v, __ATOMIC_RELAXED);
    return v;
}

static uint64_t limit_extra(CUlimit limit, size_t value, int dev)
{
    const struct fg_drvmem *t = fg_drv();
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE)
        return value > DEFAULT_HEAP ? value - DEFAULT_HEAP : 0;
    if (limit == CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT)
        return fg_drv_pending(t, value);
    return fg_drv_local_extra(t, value, fg_resident_threads(dev));
}

static enum rec_kind limit_kind(CUlimit limit)
{
    switch (limit) {
    case CU_LIMIT_MALLOC_HEAP_SIZE:
        return R_HEAP;
    case CU_LIMIT_STACK_SIZE:
        return R_STACK;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
        return R_PENDING;
    default:
        return R_NKINDS;
    }
}

static const char *limit_what(enum rec_kind kind)
{
    return kind == R_HEAP    ? "a device heap (cuCtxSetLimit)"
           : kind == R_STACK ? "thread stacks (cuCtxSetLimit)"
                             : "pending device launches (cuCtxSetLimit)";
}

CUresult fg_mem_cuCtxSetLimit(fg_real_cuCtxSetLimit next, CUlimit limit, size_t value)
{
    uintptr_t ctx = fg_current_ctx();
    enum rec_kind kind = limit_kind(limit);
    if (kind == R_NKINDS || !ctx)
        return next(limit, value);
    const char *what = limit_what(kind);
    int dev = fg_current_device();
    uint64_t extra = limit_extra(limit, value, dev);
    fg_rec_lock();
    struct rec *old = fg_rec_find(ctx, kind);
    uint64_t had = old ? old->bytes : 0;
    fg_rec_unlock();
    /* Only the growth is charged before the driver is asked, so that a
     * limit changed within the quota is never refused for its old size. */
    int fresh = !old && extra;
    if (fresh && !fg_rec_reserve())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (extra > had && !fg_charge(dev, extra - had, what)) {
        if (fresh)
            fg_rec_unreserve();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = next(limit, value);
    if (r != CUDA_SUCCESS) {
        if (extra > had)
            fg_uncharge(dev, extra - had);
        if (fresh)
            fg_rec_unreserve();
        return r;
    }
    if (had > extra)
        fg_uncharge(dev, had - extra);
    fg_rec_lock();
    if ((old = fg_rec_find(ctx, kind))) {
        old->bytes = extra; /* charged as it now stands */
        old->span = value;
        if (!extra)
            fg_rec_drop(old);
        if (fresh)
            fg_rec_unreserve(); /* another thread recorded it meanwhile */
    } else if (extra) {
        fg_rec_put(ctx, kind, dev, extra, 0)->span = value;
    }
    fg_rec_unlock();
    return r;
}
