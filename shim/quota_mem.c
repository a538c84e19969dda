/* Memory quotas: plain, pitched, managed and array allocations, and virtual
 * memory management (physical memory held from cuMemCreate until it is both
 * released and unmapped everywhere), each charged what the driver takes for
 * it (flexgv/drvmem.h), not what was asked. Sizes the program passes are
 * checked: a product that overflows is refused as too large for any device. */
#include "memquota.h"
#include "flexgv/cuda_util.h"

/* Charges bytes on dev and reserves a record for the allocation. */
static int admit(int dev, uint64_t bytes, const char *what)
{
    if (!fg_rec_reserve()) {
        static int warned;
        fg_warn_once(&warned, "more live allocations in one process than the quota can track; refused");
        return 0;
    }
    if (!fg_charge(dev, bytes, what)) {
        fg_rec_unreserve();
        return 0;
    }
    return 1;
}

static void unadmit(int dev, uint64_t bytes)
{
    fg_uncharge(dev, bytes);
    fg_rec_unreserve();
}

static void record(uintptr_t key, enum rec_kind kind, int dev, uint64_t bytes)
{
    uintptr_t ctx = fg_current_ctx();
    fg_rec_lock();
    fg_rec_put(key, kind, dev, bytes, ctx);
    fg_rec_unlock();
}

static void forget(uintptr_t key, enum rec_kind kind)
{
    fg_rec_lock();
    struct rec *r = fg_rec_find(key, kind);
    if (r)
        fg_rec_drop(r);
    fg_rec_unlock();
}

#define ALLOC(bytes, what, call, key, kind)        \
    int dev = fg_current_device();                 \
    if (!admit(dev, (bytes), what))                \
        return CUDA_ERROR_OUT_OF_MEMORY;           \
    CUresult r = call;                             \
    if (r == CUDA_SUCCESS)                         \
        record((uintptr_t)(key), kind, dev, (bytes)); \
    else                                           \
        unadmit(dev, (bytes));                     \
    return r

CUresult fg_mem_cuMemAlloc_v2(fg_real_cuMemAlloc_v2 next, CUdeviceptr *dptr, size_t bytesize)
{
    ALLOC(fg_drv_alloc(fg_drv(), bytesize), "cuMemAlloc", next(dptr, bytesize), *dptr, R_MEM);
}

CUresult fg_mem_cuMemAllocManaged(fg_real_cuMemAllocManaged next, CUdeviceptr *dptr, size_t bytesize,
                                     unsigned int flags)
{
    ALLOC(fg_drv_alloc(fg_drv(), bytesize), "cuMemAllocManaged", next(dptr, bytesize, flags), *dptr, R_MEM);
}

/* The pitch is only known afterwards: charge the driver's usual pitch first,
 * then any more padding, and give the allocation back if that does not fit. */
CUresult fg_mem_cuMemAllocPitch_v2(fg_real_cuMemAllocPitch_v2 next, CUdeviceptr *dptr, size_t *pPitch,
                                      size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)
{
    const struct fg_drvmem *t = fg_drv();
    uint64_t est;
    if (__builtin_mul_overflow(fg_drv_pitch(t, WidthInBytes), (uint64_t)Height, &est))
        return CUDA_ERROR_OUT_OF_MEMORY;
    est = fg_drv_alloc(t, est);
    int dev = fg_current_device();
    if (!admit(dev, est, "cuMemAllocPitch"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = next(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        unadmit(dev, est);
        return r;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)*pPitch, (uint64_t)Height, &bytes) || (bytes = fg_drv_alloc(t, bytes)) < est)
        bytes = est;
    if (bytes > est && !fg_charge(dev, bytes - est, "cuMemAllocPitch padding")) {
        CUstreamCaptureMode m = fg_relaxed_begin();
        REAL(cuMemFree_v2)(*dptr);
        fg_relaxed_end(m);
        unadmit(dev, est);
        fg_backstop_again(dev);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    record((uintptr_t)*dptr, R_MEM, dev, bytes);
    return r;
}

CUresult fg_mem_cuMemFree_v2(fg_real_cuMemFree_v2 next, CUdeviceptr dptr)
{
    CUresult r = next(dptr);
    if (r == CUDA_SUCCESS && dptr)
        forget((uintptr_t)dptr, R_MEM);
    return r;
}

/* ---- arrays: charged their texel bytes as the driver lays them out; an
 * extent that overflows is refused as too large for any device ---- */

#define ARRAY(bytes_ok, bytes, one_d, what, call, key)                    \
    if (!(bytes_ok))                                                       \
        return CUDA_ERROR_OUT_OF_MEMORY;                                   \
    ALLOC(fg_drv_array(fg_drv(), bytes, one_d), what, call, key, R_ARRAY)

CUresult fg_mem_cuArrayCreate_v2(fg_real_cuArrayCreate_v2 next, CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *a)
{
    uint64_t bytes = 0;
    int ok = !a || fg_array_bytes(a->Width, a->Height, 0, a->Format, a->NumChannels, 1, &bytes);
    ARRAY(ok, bytes, a && !a->Height, "cuArrayCreate", next(pHandle, a), *pHandle);
}

CUresult fg_mem_cuArray3DCreate_v2(fg_real_cuArray3DCreate_v2 next, CUarray *pHandle,
                                      const CUDA_ARRAY3D_DESCRIPTOR *a)
{
    uint64_t bytes = 0;
    int ok = !a || fg_array_bytes(a->Width, a->Height, a->Depth, a->Format, a->NumChannels, 1, &bytes);
    ARRAY(ok, bytes, a && !a->Height && !a->Depth, "cuArray3DCreate", next(pHandle, a), *pHandle);
}

CUresult fg_mem_cuMipmappedArrayCreate(fg_real_cuMipmappedArrayCreate next, CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned int levels)
{
    uint64_t bytes = 0;
    int ok = !a || fg_array_bytes(a->Width, a->Height, a->Depth, a->Format, a->NumChannels, levels, &bytes);
    ARRAY(ok, bytes, a && !a->Height && !a->Depth, "cuMipmappedArrayCreate", next(pHandle, a, levels), *pHandle);
}

CUresult fg_mem_cuArrayDestroy(fg_real_cuArrayDestroy next, CUarray h)
{
    CUresult r = next(h);
    if (r == CUDA_SUCCESS)
        forget((uintptr_t)h, R_ARRAY);
    return r;
}

CUresult fg_mem_cuMipmappedArrayDestroy(fg_real_cuMipmappedArrayDestroy next, CUmipmappedArray h)
{
    CUresult r = next(h);
    if (r == CUDA_SUCCESS)
        forget((uintptr_t)h, R_ARRAY);
    return r;
}

/* ---- virtual memory management ---- */

CUresult fg_mem_cuMemCreate(fg_real_cuMemCreate next, CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return next(handle, size, prop, flags);
    int dev = prop->location.id;
    if (!admit(dev, size, "cuMemCreate"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = next(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        unadmit(dev, size);
        return r;
    }
    fg_rec_lock();
    fg_rec_put((uintptr_t)*handle, R_VMM, dev, size, 0);
    fg_rec_unlock();
    return r;
}

static void vmm_maybe_free(struct rec *h)
{
    if (h->released && h->maps <= 0)
        fg_rec_drop(h);
}

CUresult fg_mem_cuMemRelease(fg_real_cuMemRelease next, CUmemGenericAllocationHandle handle)
{
    CUresult r = next(handle);
    if (r != CUDA_SUCCESS)
        return r;
    fg_rec_lock();
    struct rec *h = fg_rec_find((uintptr_t)handle, R_VMM);
    if (h) {
        h->released = 1;
        vmm_maybe_free(h);
    }
    fg_rec_unlock();
    return r;
}

CUresult fg_mem_cuMemMap(fg_real_cuMemMap next, CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    int reserved = fg_rec_reserve();
    CUresult r = next(ptr, size, offset, handle, flags);
    if (!reserved)
        return r;
    fg_rec_lock();
    struct rec *h = r == CUDA_SUCCESS ? fg_rec_find((uintptr_t)handle, R_VMM) : NULL;
    if (h) {
        h->maps++;
        fg_rec_put((uintptr_t)ptr, R_MAP, -1, 0, (uintptr_t)handle)->span = size;
    } else {
        fg_rec_unreserve();
    }
    fg_rec_unlock();
    return r;
}

struct range {
    CUdeviceptr lo, hi;
    int dropped;
};

static void unmapped(struct rec *m)
{
    uintptr_t handle = m->owner;
    fg_rec_drop(m);
    struct rec *h = fg_rec_find(handle, R_VMM);
    if (h) {
        h->maps--;
        vmm_maybe_free(h);
    }
}

static int unmap_in(struct rec *m, void *arg)
{
    struct range *rg = arg;
    if (m->key >= rg->lo && m->key < rg->hi) {
        unmapped(m);
        rg->dropped = 1;
    }
    return 0;
}

/* One unmap may cover several mappings; usually it is exactly one. */
CUresult fg_mem_cuMemUnmap(fg_real_cuMemUnmap next, CUdeviceptr ptr, size_t size)
{
    CUresult r = next(ptr, size);
    if (r != CUDA_SUCCESS)
        return r;
    fg_rec_lock();
    struct rec *m = fg_rec_find((uintptr_t)ptr, R_MAP);
    if (m && m->span == size) {
        unmapped(m);
    } else {
        /* Dropping a handle's record may shift a mapping's record to a
         * place the scan has passed: scan until nothing more is found. */
        struct range rg = {ptr, ptr + size < ptr ? ~0ull : ptr + size, 1};
        while (rg.dropped) {
            rg.dropped = 0;
            fg_rec_each(R_MAP, unmap_in, &rg);
        }
    }
    fg_rec_unlock();
    return r;
}
