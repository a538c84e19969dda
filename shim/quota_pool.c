/* Memory quotas: stream-ordered pools, charged what they reserve (freed
 * memory they keep included), settled after allocations, synchronization,
 * trims and destroys. An allocation on a capturing stream reserves nothing
 * now: it becomes graph memory, charged when the graph runs (quota_graph.c).
 * Each pool is charged to its own device, not the current one; a pool of
 * host memory (CUDA 12.2's) to none. */
#include "memquota.h"

#include <stdlib.h>

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    fg_real_cuMemPoolGetAttribute f = REAL(cuMemPoolGetAttribute);
    if (f)
        f(pool, a, &v);
    return v;
}

/* Brings the charge of pool to what it reserves now (record table unlocked;
 * the driver is asked first). */
static void settle(CUmemoryPool pool)
{
    uint64_t reserved = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    fg_rec_lock();
    struct rec *p = fg_rec_find((uintptr_t)pool, R_POOL);
    if (p && p->dev >= 0) {
        if (reserved > p->bytes)
            fg_force_charge(p->dev, reserved - p->bytes);
        else
            fg_uncharge(p->dev, p->bytes - reserved);
        p->bytes = reserved;
    }
    fg_rec_unlock();
}

struct pools {
    int n, cap;
    CUmemoryPool *pool;
};

static int collect(struct rec *r, void *arg)
{
    struct pools *ps = arg;
    ps->pool[ps->n++] = (CUmemoryPool)r->key;
    return ps->n == ps->cap;
}

void fg_pools_settle(void)
{
    int n = fg_quota_on ? fg_rec_count(R_POOL) : 0;
    if (!n)
        return;
    /* Gathered first: the driver is never asked with the table locked. */
    struct pools ps = {0, n, malloc((size_t)n * sizeof(CUmemoryPool))};
    if (!ps.pool)
        return;
    fg_rec_lock();
    fg_rec_each(R_POOL, collect, &ps);
    fg_rec_unlock();
    for (int i = 0; i < ps.n; i++)
        settle(ps.pool[i]);
    free(ps.pool);
}

/* Records that pool lives on dev (and takes a reservation) unless known. */
static int know_pool(CUmemoryPool pool, int dev)
{
    fg_rec_lock();
    int known = fg_rec_find((uintptr_t)pool, R_POOL) != NULL;
    fg_rec_unlock();
    if (known)
        return 1;
    if (!fg_rec_reserve())
        return 0;
    fg_rec_lock();
    if (fg_rec_find((uintptr_t)pool, R_POOL))
        fg_rec_unreserve();
    else
        fg_rec_put((uintptr_t)pool, R_POOL, dev, 0, 0);
    fg_rec_unlock();
    return 1;
}

/* A pool's device, -1 for one of host memory. */
static int pool_device(CUmemoryPool pool)
{
    fg_rec_lock();
    struct rec *p = fg_rec_find((uintptr_t)pool, R_POOL);
    int dev = p ? p->dev : -1;
    fg_rec_unlock();
    if (p)
        return dev;
    /* The host's default or current pool (CUDA 13 names them). */
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    fg_real_cuMemGetMemPool hcur = REAL(cuMemGetMemPool);
    fg_real_cuMemGetDefaultMemPool hdef = REAL(cuMemGetDefaultMemPool);
    CUmemoryPool h = NULL;
    if ((hcur && hcur(&h, &host, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS && h == pool) ||
        (hdef && hdef(&h, &host, CU_MEM_ALLOCATION_TYPE_PINNED) == CUDA_SUCCESS && h == pool))
        return -1;
    /* A device's default or current pool, made before we could see it. */
    int n = 0;
    fg_real_cuDeviceGetCount count = REAL(cuDeviceGetCount);
    fg_real_cuDeviceGetMemPool cur = REAL(cuDeviceGetMemPool);
    fg_real_cuDeviceGetDefaultMemPool def = REAL(cuDeviceGetDefaultMemPool);
    if (count && cur && def && count(&n) == CUDA_SUCCESS)
        for (int d = 0; d < n; d++) {
            CUmemoryPool a = NULL, b = NULL;
            if ((cur(&a, d) == CUDA_SUCCESS && a == pool) || (def(&b, d) == CUDA_SUCCESS && b == pool))
                return d;
        }
    return fg_current_device();
}

static int stream_device(CUstream s, int per_thread)
{
    CUdevice d;
    fg_real_cuStreamGetDevice f = REAL(cuStreamGetDevice);
    if (f && f(per_thread && !s ? CU_STREAM_PER_THREAD : s, &d) == CUDA_SUCCESS)
        return d;
    return fg_current_device();
}

struct async_call {
    void *next;
    CUdeviceptr *dptr;
    size_t size;
    CUmemoryPool pool; /* NULL: the stream's device's current pool */
    CUstream stream;
};

static CUresult call(const struct async_call *c, int from_pool)
{
    if (from_pool)
        return ((fg_real_cuMemAllocFromPoolAsync)c->next)(c->dptr, c->size, c->pool, c->stream);
    return ((fg_real_cuMemAllocAsync)c->next)(c->dptr, c->size, c->stream);
}

static CUresult alloc_async(struct async_call c, int per_thread)
{
    int from_pool = c.pool != NULL;
    if (fg_stream_capturing(c.stream, per_thread) == 1)
        return call(&c, from_pool);
    int dev;
    if (from_pool) {
        if ((dev = pool_device(c.pool)) < 0) {
            know_pool(c.pool, -1); /* host memory: no device's, and not asked again */
            return call(&c, 1);
        }
    } else {
        fg_real_cuDeviceGetMemPool getpool = REAL(cuDeviceGetMemPool);
        dev = stream_device(c.stream, per_thread);
        if (dev < 0 || !getpool || getpool(&c.pool, dev) != CUDA_SUCCESS)
            return call(&c, 0);
    }
    if (!know_pool(c.pool, dev))
        return CUDA_ERROR_OUT_OF_MEMORY;
    settle(c.pool);
    /* Only what the pool does not hold unused must come from the room. */
    uint64_t reserved = pool_attr(c.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    uint64_t used = pool_attr(c.pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    uint64_t cached = reserved > used ? reserved - used : 0;
    uint64_t need = c.size > cached ? fg_drv_up(c.size - cached, fg_drv()->pool_step) : 0; /* the pool's growth */
    if (!fg_charge(dev, need, "stream-ordered allocation"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = call(&c, from_pool);
    settle(c.pool);
    fg_uncharge(dev, need);
    uint64_t quota = fg_quota_of(dev);
    if (r == CUDA_SUCCESS && quota && fg_tenant_used(dev) > quota) {
        /* The pool grew by more than asked (its granularity): give the
         * allocation back and the growth with it. The stream is not
         * capturing; relaxed mode keeps the synchronization from touching
         * captures other threads may have open. */
        CUstreamCaptureMode m = fg_relaxed_begin();
        CUstream s = per_thread && !c.stream ? CU_STREAM_PER_THREAD : c.stream;
        REAL(cuMemFreeAsync)(*c.dptr, s);
        REAL(cuStreamSynchronize)(s);
        REAL(cuMemPoolTrimTo)(c.pool, 0);
        fg_relaxed_end(m);
        settle(c.pool);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

CUresult fg_mem_cuMemAllocAsync(fg_real_cuMemAllocAsync next, CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return alloc_async((struct async_call){(void *)next, dptr, bytesize, NULL, s}, 0);
}

CUresult fg_mem_cuMemAllocAsync_ptsz(fg_real_cuMemAllocAsync_ptsz next, CUdeviceptr *dptr, size_t bytesize,
                                        CUstream s)
{
    return alloc_async((struct async_call){(void *)next, dptr, bytesize, NULL, s}, 1);
}

CUresult fg_mem_cuMemAllocFromPoolAsync(fg_real_cuMemAllocFromPoolAsync next, CUdeviceptr *dptr, size_t bytesize,
                                           CUmemoryPool pool, CUstream s)
{
    if (!pool)
        return next(dptr, bytesize, pool, s);
    return alloc_async((struct async_call){(void *)next, dptr, bytesize, pool, s}, 0);
}

CUresult fg_mem_cuMemAllocFromPoolAsync_ptsz(fg_real_cuMemAllocFromPoolAsync_ptsz next, CUdeviceptr *dptr,
                                                size_t bytesize, CUmemoryPool pool, CUstream s)
{
    if (!pool)
        return next(dptr, bytesize, pool, s);
    return alloc_async((struct async_call){(void *)next, dptr, bytesize, pool, s}, 1);
}

CUresult fg_mem_cuMemPoolCreate(fg_real_cuMemPoolCreate next, CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult r = next(pool, props);
    if (r == CUDA_SUCCESS && props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        know_pool(*pool, props->location.id);
    else if (r == CUDA_SUCCESS && props) /* of host memory */
        know_pool(*pool, -1);
    return r;
}

CUresult fg_mem_cuMemPoolTrimTo(fg_real_cuMemPoolTrimTo next, CUmemoryPool pool, size_t keep)
{
    CUresult r = next(pool, keep);
    if (r == CUDA_SUCCESS)
        settle(pool);
    return r;
}

CUresult fg_mem_cuMemPoolDestroy(fg_real_cuMemPoolDestroy next, CUmemoryPool pool)
{
    CUresult r = next(pool);
    if (r == CUDA_SUCCESS) {
        fg_rec_lock();
        struct rec *p = fg_rec_find((uintptr_t)pool, R_POOL);
        if (p)
            fg_rec_drop(p);
        fg_rec_unlock();
    }
    return r;
}

/* Synchronization is where freed pool memory may have gone back. */
#define SYNC_SETTLES(call)         \
    CUresult r = call;             \
    fg_pools_settle();             \
    fg_graph_settle_all();         \
    return r

CUresult fg_mem_cuStreamSynchronize(fg_real_cuStreamSynchronize next, CUstream s) { SYNC_SETTLES(next(s)); }

CUresult fg_mem_cuStreamSynchronize_ptsz(fg_real_cuStreamSynchronize_ptsz next, CUstream s)
{
    SYNC_SETTLES(next(s));
}

CUresult fg_mem_cuCtxSynchronize(fg_real_cuCtxSynchronize next) { SYNC_SETTLES(next()); }

CUresult fg_mem_cuCtxSynchronize_v2(fg_real_cuCtxSynchronize_v2 next, CUcontext ctx) { SYNC_SETTLES(next(ctx)); }

CUresult fg_mem_cuEventSynchronize(fg_real_cuEventSynchronize next, CUevent e) { SYNC_SETTLES(next(e)); }
