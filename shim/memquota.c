/* Memory quotas. Every allocation path charges the tenant before the driver
 * is asked (a refusal is CUDA_ERROR_OUT_OF_MEMORY, as from a full GPU) and
 * every release gives it back; contexts are charged what they really take,
 * pools what they really reserve. Inside the tenant the memory views
 * (cuMemGetInfo, cuDeviceTotalMem, NVML) show the quota as the device.
 *
 * What this process holds is kept here, per process: the tenant's shared
 * state (tenant.c) only sees per-device sums. */
#include "shim.h"
#include "flexgv/cuda_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- per-process records: an open-addressing table keyed by handle ---- */

enum kind { R_MEM, R_ARRAY, R_VMM, R_MAP, R_POOL, R_CTX };

struct rec {
    uintptr_t key; /* 0: empty, 1: deleted */
    enum kind kind;
    int dev;
    uint64_t bytes;
    uintptr_t owner; /* R_MEM/R_ARRAY: context; R_MAP: VMM handle */
    int maps;        /* R_VMM: live mappings */
    int released;    /* R_VMM: cuMemRelease seen */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rec *recs;
static size_t cap, used_slots;
static int npools;

static size_t hash(uintptr_t k, int kind) { return (size_t)((k ^ ((uintptr_t)kind << 58)) * 0x9e3779b97f4a7c15ull); }

static struct rec *find(uintptr_t key, enum kind kind)
{
    if (!cap)
        return NULL;
    for (size_t i = hash(key, kind) & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
        if (recs[i].key == 0)
            return NULL;
        if (recs[i].key == key && recs[i].kind == kind)
            return &recs[i];
    }
    return NULL;
}

static struct rec *insert(uintptr_t key, enum kind kind)
{
    if ((used_slots + 1) * 2 > cap) {
        size_t ncap = cap ? cap * 2 : 256;
        struct rec *n = calloc(ncap, sizeof *n);
        if (!n)
            return NULL;
        struct rec *old = recs;
        size_t ocap = cap;
        recs = n;
        cap = ncap;
        used_slots = 0;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].key > 1) {
                struct rec *r = insert(old[i].key, old[i].kind);
                *r = old[i];
            }
        free(old);
    }
    size_t i = hash(key, kind) & (cap - 1);
    while (recs[i].key > 1)
        i = (i + 1) & (cap - 1);
    if (recs[i].key == 0)
        used_slots++;
    memset(&recs[i], 0, sizeof recs[i]);
    recs[i].key = key;
    recs[i].kind = kind;
    return &recs[i];
}

static void drop(struct rec *r) { r->key = 1; }

/* ---- driver queries through the real entry points ---- */

#define REAL(name) ((fg_real_##name)fg_resolve_quiet(FG_API_##name))

static int current_device(void)
{
    CUdevice d;
    fg_real_cuCtxGetDevice f = REAL(cuCtxGetDevice);
    return f && f(&d) == CUDA_SUCCESS ? d : -1;
}

static uintptr_t current_ctx(void)
{
    CUcontext c = NULL;
    fg_real_cuCtxGetCurrent f = REAL(cuCtxGetCurrent);
    if (f)
        f(&c);
    return (uintptr_t)c;
}

/* Device memory this process holds on dev as NVML reports it, or -1 when
 * NVML cannot tell (no NVML, or our pid is not visible from here). */
static long long nvml_self_used(int dev)
{
    fg_real_cuDeviceGetUuid_v2 uuidf = REAL(cuDeviceGetUuid_v2);
    fg_real_nvmlInit_v2 init = REAL(nvmlInit_v2);
    fg_real_nvmlDeviceGetComputeRunningProcesses_v3 procs = REAL(nvmlDeviceGetComputeRunningProcesses_v3);
    nvmlReturn_t (*byuuid)(const char *, nvmlDevice_t *) = (nvmlReturn_t(*)(const char *, nvmlDevice_t *))fg_nvml_sym("nvmlDeviceGetHandleByUUID");
    CUuuid u;
    if (!uuidf || !init || !procs || !byuuid || uuidf(&u, dev) != CUDA_SUCCESS || init() != NVML_SUCCESS)
        return -1;
    char s[64];
    fg_uuid_text(&u, s, sizeof s);
    nvmlDevice_t h;
    nvmlProcessInfo_t info[256];
    unsigned n = 256;
    if (byuuid(s, &h) != NVML_SUCCESS || procs(h, &n, info) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < n; i++)
        if (info[i].pid == (unsigned)getpid())
            return (long long)info[i].usedGpuMemory;
    return 0;
}

/* ---- contexts: charged what creating one really took ---- */

static uintptr_t primary_ctx[FG_NDEV];
static int primary_refs[FG_NDEV];

static void release_owned_by(uintptr_t ctx)
{
    for (size_t i = 0; i < cap; i++)
        if (recs[i].key > 1 && (recs[i].kind == R_MEM || recs[i].kind == R_ARRAY) && recs[i].owner == ctx) {
            fg_uncharge(recs[i].dev, recs[i].bytes);
            drop(&recs[i]);
        }
}

/* Charges a context about to be created on dev; returns the estimate or
 * UINT64_MAX when the tenant has no room for it. */
static uint64_t ctx_precharge(int dev, long long *before)
{
    uint64_t est = fg_ctx_estimate();
    *before = nvml_self_used(dev);
    return fg_charge(dev, est) ? est : UINT64_MAX;
}

static void ctx_created(uintptr_t ctx, int dev, uint64_t est, long long before)
{
    long long after = before >= 0 ? nvml_self_used(dev) : -1;
    uint64_t bytes = est;
    if (after >= 0 && after >= before)
        bytes = (uint64_t)(after - before); /* measured: what the driver took */
    if (bytes > est)
        fg_force_charge(dev, bytes - est); /* already held: account, never undo */
    else
        fg_uncharge(dev, est - bytes);
    pthread_mutex_lock(&lock);
    struct rec *r = insert(ctx, R_CTX);
    if (r) {
        r->dev = dev;
        r->bytes = bytes;
    }
    pthread_mutex_unlock(&lock);
}

static void ctx_gone(uintptr_t ctx)
{
    pthread_mutex_lock(&lock);
    struct rec *r = find(ctx, R_CTX);
    if (r) {
        fg_uncharge(r->dev, r->bytes);
        drop(r);
    }
    release_owned_by(ctx);
    pthread_mutex_unlock(&lock);
}

CUresult fg_around_cuDevicePrimaryCtxRetain(fg_real_cuDevicePrimaryCtxRetain real, CUcontext *pctx, CUdevice dev)
{
    if (!fg_quota_on || dev < 0 || dev >= FG_NDEV)
        return real(pctx, dev);
    pthread_mutex_lock(&lock);
    int first = primary_refs[dev] == 0;
    pthread_mutex_unlock(&lock);
    long long before = -1;
    uint64_t est = 0;
    if (first && (est = ctx_precharge(dev, &before)) == UINT64_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(pctx, dev);
    if (r != CUDA_SUCCESS) {
        if (first)
            fg_uncharge(dev, est);
        return r;
    }
    if (first)
        ctx_created((uintptr_t)*pctx, dev, est, before);
    pthread_mutex_lock(&lock);
    primary_ctx[dev] = (uintptr_t)*pctx;
    primary_refs[dev]++;
    pthread_mutex_unlock(&lock);
    return r;
}

static void primary_dropped(CUdevice dev, int reset)
{
    if (dev < 0 || dev >= FG_NDEV)
        return;
    pthread_mutex_lock(&lock);
    int gone = primary_refs[dev] > 0 && (reset || --primary_refs[dev] == 0);
    if (reset)
        primary_refs[dev] = 0;
    uintptr_t ctx = primary_ctx[dev];
    pthread_mutex_unlock(&lock);
    if (gone && ctx)
        ctx_gone(ctx);
}

CUresult fg_around_cuDevicePrimaryCtxRelease_v2(fg_real_cuDevicePrimaryCtxRelease_v2 real, CUdevice dev)
{
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS && fg_quota_on)
        primary_dropped(dev, 0);
    return r;
}

CUresult fg_around_cuDevicePrimaryCtxReset_v2(fg_real_cuDevicePrimaryCtxReset_v2 real, CUdevice dev)
{
    CUresult r = real(dev);
    if (r == CUDA_SUCCESS && fg_quota_on)
        primary_dropped(dev, 1);
    return r;
}

#define CREATE_CTX(call)                                             \
    if (!fg_quota_on)                                                \
        return call;                                                 \
    long long before;                                                \
    uint64_t est = ctx_precharge(dev, &before);                      \
    if (est == UINT64_MAX)                                           \
        return CUDA_ERROR_OUT_OF_MEMORY;                             \
    CUresult r = call;                                               \
    if (r == CUDA_SUCCESS)                                           \
        ctx_created((uintptr_t)*pctx, dev, est, before);             \
    else                                                             \
        fg_uncharge(dev, est);                                       \
    return r

CUresult fg_around_cuCtxCreate_v2(fg_real_cuCtxCreate_v2 real, CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CREATE_CTX(real(pctx, flags, dev));
}

CUresult fg_around_cuCtxCreate_v4(fg_real_cuCtxCreate_v4 real, CUcontext *pctx, CUctxCreateParams *params,
                                  unsigned int flags, CUdevice dev)
{
    CREATE_CTX(real(pctx, params, flags, dev));
}

CUresult fg_around_cuCtxDestroy_v2(fg_real_cuCtxDestroy_v2 real, CUcontext ctx)
{
    CUresult r = real(ctx);
    if (r == CUDA_SUCCESS && fg_quota_on)
        ctx_gone((uintptr_t)ctx);
    return r;
}

/* ---- plain allocations ---- */

static void remember(uintptr_t key, enum kind kind, int dev, uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    struct rec *r = insert(key, kind);
    if (r) {
        r->dev = dev;
        r->bytes = bytes;
        r->owner = current_ctx();
    }
    pthread_mutex_unlock(&lock);
}

static int forget(uintptr_t key, enum kind kind)
{
    pthread_mutex_lock(&lock);
    struct rec *r = find(key, kind);
    int found = r != NULL;
    if (r) {
        fg_uncharge(r->dev, r->bytes);
        drop(r);
    }
    pthread_mutex_unlock(&lock);
    return found;
}

#define ALLOC(bytes, call, key, kind)                  \
    if (!fg_quota_on)                                  \
        return call;                                   \
    int dev = current_device();                        \
    if (!fg_charge(dev, (bytes)))                      \
        return CUDA_ERROR_OUT_OF_MEMORY;               \
    CUresult r = call;                                 \
    if (r == CUDA_SUCCESS)                             \
        remember((uintptr_t)(key), kind, dev, (bytes)); \
    else                                               \
        fg_uncharge(dev, (bytes));                     \
    return r

CUresult fg_around_cuMemAlloc_v2(fg_real_cuMemAlloc_v2 real, CUdeviceptr *dptr, size_t bytesize)
{
    ALLOC(bytesize, real(dptr, bytesize), *dptr, R_MEM);
}

CUresult fg_around_cuMemAllocManaged(fg_real_cuMemAllocManaged real, CUdeviceptr *dptr, size_t bytesize,
                                     unsigned int flags)
{
    ALLOC(bytesize, real(dptr, bytesize, flags), *dptr, R_MEM);
}

/* The pitch is only known afterwards: charge the unpadded size first, then
 * the padding, and give the allocation back if the padding does not fit. */
CUresult fg_around_cuMemAllocPitch_v2(fg_real_cuMemAllocPitch_v2 real, CUdeviceptr *dptr, size_t *pPitch,
                                      size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)
{
    if (!fg_quota_on)
        return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    int dev = current_device();
    uint64_t est = (uint64_t)WidthInBytes * Height;
    if (!fg_charge(dev, est))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        fg_uncharge(dev, est);
        return r;
    }
    uint64_t bytes = (uint64_t)*pPitch * Height;
    if (bytes > est && !fg_charge(dev, bytes - est)) {
        REAL(cuMemFree_v2)(*dptr);
        fg_uncharge(dev, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    remember((uintptr_t)*dptr, R_MEM, dev, bytes > est ? bytes : est);
    return r;
}

CUresult fg_around_cuMemFree_v2(fg_real_cuMemFree_v2 real, CUdeviceptr dptr)
{
    CUresult r = real(dptr);
    if (r == CUDA_SUCCESS && fg_quota_on && dptr)
        forget((uintptr_t)dptr, R_MEM);
    return r;
}

/* ---- arrays: charged their texel bytes ---- */

CUresult fg_around_cuArrayCreate_v2(fg_real_cuArrayCreate_v2 real, CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *a)
{
    uint64_t bytes = a ? fg_array_bytes(a->Width, a->Height, 0, a->Format, a->NumChannels, 1) : 0;
    ALLOC(bytes, real(pHandle, a), *pHandle, R_ARRAY);
}

CUresult fg_around_cuArray3DCreate_v2(fg_real_cuArray3DCreate_v2 real, CUarray *pHandle,
                                      const CUDA_ARRAY3D_DESCRIPTOR *a)
{
    uint64_t bytes = a ? fg_array_bytes(a->Width, a->Height, a->Depth, a->Format, a->NumChannels, 1) : 0;
    ALLOC(bytes, real(pHandle, a), *pHandle, R_ARRAY);
}

CUresult fg_around_cuMipmappedArrayCreate(fg_real_cuMipmappedArrayCreate real, CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned int levels)
{
    uint64_t bytes = a ? fg_array_bytes(a->Width, a->Height, a->Depth, a->Format, a->NumChannels, levels) : 0;
    ALLOC(bytes, real(pHandle, a, levels), *pHandle, R_ARRAY);
}

CUresult fg_around_cuArrayDestroy(fg_real_cuArrayDestroy real, CUarray h)
{
    CUresult r = real(h);
    if (r == CUDA_SUCCESS && fg_quota_on)
        forget((uintptr_t)h, R_ARRAY);
    return r;
}

CUresult fg_around_cuMipmappedArrayDestroy(fg_real_cuMipmappedArrayDestroy real, CUmipmappedArray h)
{
    CUresult r = real(h);
    if (r == CUDA_SUCCESS && fg_quota_on)
        forget((uintptr_t)h, R_ARRAY);
    return r;
}

/* ---- virtual memory management: physical memory is held from cuMemCreate
 * until it is both released and unmapped everywhere ---- */

CUresult fg_around_cuMemCreate(fg_real_cuMemCreate real, CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!fg_quota_on || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real(handle, size, prop, flags);
    int dev = prop->location.id;
    if (!fg_charge(dev, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        fg_uncharge(dev, size);
        return r;
    }
    pthread_mutex_lock(&lock);
    struct rec *rec = insert((uintptr_t)*handle, R_VMM);
    if (rec) {
        rec->dev = dev;
        rec->bytes = size;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static void vmm_maybe_free(struct rec *h)
{
    if (h->released && h->maps <= 0) {
        fg_uncharge(h->dev, h->bytes);
        drop(h);
    }
}

CUresult fg_around_cuMemRelease(fg_real_cuMemRelease real, CUmemGenericAllocationHandle handle)
{
    CUresult r = real(handle);
    if (r != CUDA_SUCCESS || !fg_quota_on)
        return r;
    pthread_mutex_lock(&lock);
    struct rec *h = find((uintptr_t)handle, R_VMM);
    if (h) {
        h->released = 1;
        vmm_maybe_free(h);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult fg_around_cuMemMap(fg_real_cuMemMap real, CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = real(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS || !fg_quota_on)
        return r;
    pthread_mutex_lock(&lock);
    struct rec *h = find((uintptr_t)handle, R_VMM);
    if (h) {
        h->maps++;
        struct rec *m = insert((uintptr_t)ptr, R_MAP);
        if (m) {
            m->bytes = size;
            m->owner = (uintptr_t)handle;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* One unmap may cover several mappings. */
CUresult fg_around_cuMemUnmap(fg_real_cuMemUnmap real, CUdeviceptr ptr, size_t size)
{
    CUresult r = real(ptr, size);
    if (r != CUDA_SUCCESS || !fg_quota_on)
        return r;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < cap; i++) {
        struct rec *m = &recs[i];
        if (m->key <= 1 || m->kind != R_MAP || m->key < ptr || m->key >= ptr + size)
            continue;
        struct rec *h = find(m->owner, R_VMM);
        drop(m);
        if (h) {
            h->maps--;
            vmm_maybe_free(h);
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---- stream-ordered pools: charged what they reserve, freed memory they
 * keep included; synchronization, trims and destroys give back the rest ---- */

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    fg_real_cuMemPoolGetAttribute f = REAL(cuMemPoolGetAttribute);
    if (f)
        f(pool, a, &v);
    return v;
}

/* Brings the charge of a pool to what it reserves now (lock held). */
static void pool_settle(struct rec *p)
{
    uint64_t reserved = pool_attr((CUmemoryPool)p->key, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    if (reserved > p->bytes)
        fg_force_charge(p->dev, reserved - p->bytes);
    else
        fg_uncharge(p->dev, p->bytes - reserved);
    p->bytes = reserved;
}

static void pools_settle(void)
{
    if (!__atomic_load_n(&npools, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < cap; i++)
        if (recs[i].key > 1 && recs[i].kind == R_POOL)
            pool_settle(&recs[i]);
    pthread_mutex_unlock(&lock);
}

static CUresult pool_alloc(CUmemoryPool pool, int dev, size_t size, CUdeviceptr *dptr, CUstream stream,
                           CUresult (*call)(void *), void *call_arg)
{
    pthread_mutex_lock(&lock);
    struct rec *p = find((uintptr_t)pool, R_POOL);
    if (!p && (p = insert((uintptr_t)pool, R_POOL)) != NULL) {
        p->dev = dev;
        __atomic_fetch_add(&npools, 1, __ATOMIC_RELAXED);
    }
    if (!p) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool_settle(p);
    /* Only what the pool lacks must come from the tenant's room. */
    uint64_t cached = p->bytes - pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    uint64_t need = size > cached ? size - cached : 0;
    if (!fg_charge(dev, need)) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->bytes += need;
    CUresult r = call(call_arg);
    pool_settle(p);
    uint64_t quota = fg_quota_of(dev);
    if (r == CUDA_SUCCESS && quota && fg_tenant_used(dev) > quota) {
        /* The pool grew by more than asked (its granularity): give the
         * allocation back and the growth with it. */
        REAL(cuMemFreeAsync)(*dptr, stream);
        REAL(cuStreamSynchronize)(stream);
        REAL(cuMemPoolTrimTo)(pool, 0);
        pool_settle(p);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

struct async_call {
    void *real;
    CUdeviceptr *dptr;
    size_t size;
    CUmemoryPool pool;
    CUstream stream;
};

static CUresult call_alloc_async(void *a)
{
    struct async_call *c = a;
    return ((fg_real_cuMemAllocAsync)c->real)(c->dptr, c->size, c->stream);
}

static CUresult call_alloc_from_pool(void *a)
{
    struct async_call *c = a;
    return ((fg_real_cuMemAllocFromPoolAsync)c->real)(c->dptr, c->size, c->pool, c->stream);
}

static CUresult alloc_async(void *real, CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
    int dev = current_device();
    struct async_call c = {real, dptr, size, pool, stream};
    if (!pool) {
        fg_real_cuDeviceGetMemPool getpool = REAL(cuDeviceGetMemPool);
        if (dev < 0 || !getpool || getpool(&c.pool, dev) != CUDA_SUCCESS)
            return ((fg_real_cuMemAllocAsync)real)(dptr, size, stream);
        return pool_alloc(c.pool, dev, size, dptr, stream, call_alloc_async, &c);
    }
    return pool_alloc(pool, dev, size, dptr, stream, call_alloc_from_pool, &c);
}

CUresult fg_around_cuMemAllocAsync(fg_real_cuMemAllocAsync real, CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return fg_quota_on ? alloc_async((void *)real, dptr, bytesize, NULL, s) : real(dptr, bytesize, s);
}

CUresult fg_around_cuMemAllocAsync_ptsz(fg_real_cuMemAllocAsync_ptsz real, CUdeviceptr *dptr, size_t bytesize,
                                        CUstream s)
{
    return fg_quota_on ? alloc_async((void *)real, dptr, bytesize, NULL, s) : real(dptr, bytesize, s);
}

CUresult fg_around_cuMemAllocFromPoolAsync(fg_real_cuMemAllocFromPoolAsync real, CUdeviceptr *dptr, size_t bytesize,
                                           CUmemoryPool pool, CUstream s)
{
    return fg_quota_on && pool ? alloc_async((void *)real, dptr, bytesize, pool, s) : real(dptr, bytesize, pool, s);
}

CUresult fg_around_cuMemAllocFromPoolAsync_ptsz(fg_real_cuMemAllocFromPoolAsync_ptsz real, CUdeviceptr *dptr,
                                                size_t bytesize, CUmemoryPool pool, CUstream s)
{
    return fg_quota_on && pool ? alloc_async((void *)real, dptr, bytesize, pool, s) : real(dptr, bytesize, pool, s);
}

CUresult fg_around_cuMemPoolTrimTo(fg_real_cuMemPoolTrimTo real, CUmemoryPool pool, size_t keep)
{
    CUresult r = real(pool, keep);
    if (r == CUDA_SUCCESS)
        pools_settle();
    return r;
}

CUresult fg_around_cuMemPoolDestroy(fg_real_cuMemPoolDestroy real, CUmemoryPool pool)
{
    CUresult r = real(pool);
    if (r == CUDA_SUCCESS && fg_quota_on) {
        pthread_mutex_lock(&lock);
        struct rec *p = find((uintptr_t)pool, R_POOL);
        if (p) {
            fg_uncharge(p->dev, p->bytes);
            drop(p);
            __atomic_fetch_sub(&npools, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&lock);
    }
    return r;
}

CUresult fg_around_cuStreamSynchronize(fg_real_cuStreamSynchronize real, CUstream s)
{
    CUresult r = real(s);
    pools_settle();
    return r;
}

CUresult fg_around_cuStreamSynchronize_ptsz(fg_real_cuStreamSynchronize_ptsz real, CUstream s)
{
    CUresult r = real(s);
    pools_settle();
    return r;
}

CUresult fg_around_cuCtxSynchronize(fg_real_cuCtxSynchronize real)
{
    CUresult r = real();
    pools_settle();
    return r;
}

CUresult fg_around_cuEventSynchronize(fg_real_cuEventSynchronize real, CUevent e)
{
    CUresult r = real(e);
    pools_settle();
    return r;
}

/* ---- what the tenant sees: the quota as the device ---- */

static void virtual_view(int dev, unsigned long long *total, unsigned long long *free_b, unsigned long long *used)
{
    uint64_t quota = fg_quota_of(dev);
    if (!quota)
        return;
    fg_tenant_reap(); /* report what live processes hold */
    uint64_t u = fg_tenant_used(dev);
    uint64_t room = quota > u ? quota - u : 0; /* clamped: never underflows */
    if (total)
        *total = quota < *total ? quota : *total;
    if (free_b)
        *free_b = room < *free_b ? room : *free_b;
    if (used)
        *used = u;
}

CUresult fg_around_cuMemGetInfo_v2(fg_real_cuMemGetInfo_v2 real, size_t *free_b, size_t *total)
{
    CUresult r = real(free_b, total);
    if (r == CUDA_SUCCESS && fg_quota_on) {
        unsigned long long t = *total, f = *free_b;
        virtual_view(current_device(), &t, &f, NULL);
        *total = (size_t)t;
        *free_b = (size_t)f;
    }
    return r;
}

CUresult fg_around_cuDeviceTotalMem_v2(fg_real_cuDeviceTotalMem_v2 real, size_t *bytes, CUdevice dev)
{
    CUresult r = real(bytes, dev);
    if (r == CUDA_SUCCESS && fg_quota_on) {
        unsigned long long t = *bytes;
        virtual_view(dev, &t, NULL, NULL);
        *bytes = (size_t)t;
    }
    return r;
}

/* The CUDA ordinal of an NVML device: matched by UUID when CUDA is up in
 * this process, else NVML's own index. */
static int nvml_ordinal(nvmlDevice_t d)
{
    nvmlReturn_t (*getuuid)(nvmlDevice_t, char *, unsigned) = (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned))fg_nvml_sym("nvmlDeviceGetUUID");
    nvmlReturn_t (*getindex)(nvmlDevice_t, unsigned *) = (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))fg_nvml_sym("nvmlDeviceGetIndex");
    char want[96];
    int n = 0;
    fg_real_cuDeviceGetCount count = REAL(cuDeviceGetCount);
    fg_real_cuDeviceGetUuid_v2 uuidf = REAL(cuDeviceGetUuid_v2);
    if (getuuid && count && uuidf && getuuid(d, want, sizeof want) == NVML_SUCCESS && count(&n) == CUDA_SUCCESS) {
        for (int i = 0; i < n; i++) {
            CUuuid u;
            char s[64];
            if (uuidf(&u, i) != CUDA_SUCCESS)
                continue;
            fg_uuid_text(&u, s, sizeof s);
            if (!strcmp(s, want))
                return i;
        }
    }
    unsigned idx;
    return getindex && getindex(d, &idx) == NVML_SUCCESS ? (int)idx : -1;
}

nvmlReturn_t fg_around_nvmlDeviceGetMemoryInfo(fg_real_nvmlDeviceGetMemoryInfo real, nvmlDevice_t d, nvmlMemory_t *m)
{
    nvmlReturn_t r = real(d, m);
    if (r == NVML_SUCCESS && fg_quota_on)
        virtual_view(nvml_ordinal(d), &m->total, &m->free, &m->used);
    return r;
}

nvmlReturn_t fg_around_nvmlDeviceGetMemoryInfo_v2(fg_real_nvmlDeviceGetMemoryInfo_v2 real, nvmlDevice_t d,
                                                  nvmlMemory_v2_t *m)
{
    nvmlReturn_t r = real(d, m);
    if (r == NVML_SUCCESS && fg_quota_on)
        virtual_view(nvml_ordinal(d), &m->total, &m->free, &m->used);
    return r;
}

/* Quota set up but the tenant could not be attached: refuse CUDA. */
CUresult fg_around_cuInit(fg_real_cuInit real, unsigned int Flags)
{
    return fg_quota_refused ? CUDA_ERROR_NOT_PERMITTED : real(Flags);
}

/* Divert every hook that has an around function. */
void fg_memquota_divert(void)
{
    for (int i = 0; i < fg_num_around; i++)
        fg_divert[fg_around_ids[i]] = 1;
}

/* A forked child holds no device memory and no records. */
void fg_memquota_after_fork(void)
{
    pthread_mutex_init(&lock, NULL);
    memset(recs, 0, cap * sizeof *recs);
    used_slots = 0;
    npools = 0;
    memset(primary_refs, 0, sizeof primary_refs);
    memset(primary_ctx, 0, sizeof primary_ctx);
    fg_tenant_after_fork();
}
