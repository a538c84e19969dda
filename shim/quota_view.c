/* Memory quotas: what the tenant sees (the quota as the device in
 * cuMemGetInfo, cuDeviceTotalMem and NVML), the first CUDA call (where a
 * process takes its slot in the tenant), and setup. */
#include "memquota.h"

#include <string.h>

/* Shrinks a device's view to the quota of tenant entry e (free and used
 * are what is left of it and what the tenant holds), clamped so nothing
 * underflows. */
static void virtual_view(int e, unsigned long long *total, unsigned long long *free_b, unsigned long long *used)
{
    uint64_t u = 0, quota = fg_entry_view(e, &u);
    if (!quota)
        return;
    uint64_t room = quota > u ? quota - u : 0;
    if (total)
        *total = quota < *total ? quota : *total;
    if (free_b)
        *free_b = room < *free_b ? room : *free_b;
    if (used)
        *used = u;
}

CUresult fg_mem_cuMemGetInfo_v2(fg_real_cuMemGetInfo_v2 next, size_t *free_b, size_t *total)
{
    CUresult r = next(free_b, total);
    if (r == CUDA_SUCCESS) {
        unsigned long long t = *total, f = *free_b;
        virtual_view(fg_entry_of(fg_current_device()), &t, &f, NULL);
        *total = (size_t)t;
        *free_b = (size_t)f;
    }
    return r;
}

CUresult fg_mem_cuDeviceTotalMem_v2(fg_real_cuDeviceTotalMem_v2 next, size_t *bytes, CUdevice dev)
{
    CUresult r = next(bytes, dev);
    if (r == CUDA_SUCCESS) {
        unsigned long long t = *bytes;
        virtual_view(fg_entry_of(dev), &t, NULL, NULL);
        *bytes = (size_t)t;
    }
    return r;
}

/* The tenant entry of an NVML device: by UUID, which needs no CUDA in this
 * process (nvidia-smi), or by NVML index for a tenant made without NVML. */
static int nvml_entry(nvmlDevice_t d)
{
    nvmlReturn_t (*getuuid)(nvmlDevice_t, char *, unsigned) =
        (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned))fg_nvml_sym("nvmlDeviceGetUUID");
    nvmlReturn_t (*getindex)(nvmlDevice_t, unsigned *) =
        (nvmlReturn_t(*)(nvmlDevice_t, unsigned *))fg_nvml_sym("nvmlDeviceGetIndex");
    char uuid[96];
    unsigned idx;
    if (getuuid && getuuid(d, uuid, sizeof uuid) == NVML_SUCCESS) {
        int e = fg_uuid_entry(uuid);
        if (e >= 0)
            return e;
    }
    return getindex && getindex(d, &idx) == NVML_SUCCESS ? fg_index_entry((int)idx) : -1;
}

nvmlReturn_t fg_mem_nvmlDeviceGetMemoryInfo(fg_real_nvmlDeviceGetMemoryInfo next, nvmlDevice_t d, nvmlMemory_t *m)
{
    nvmlReturn_t r = next(d, m);
    if (r == NVML_SUCCESS)
        virtual_view(nvml_entry(d), &m->total, &m->free, &m->used);
    return r;
}

nvmlReturn_t fg_mem_nvmlDeviceGetMemoryInfo_v2(fg_real_nvmlDeviceGetMemoryInfo_v2 next, nvmlDevice_t d,
                                                  nvmlMemory_v2_t *m)
{
    nvmlReturn_t r = next(d, m);
    if (r == NVML_SUCCESS)
        virtual_view(nvml_entry(d), &m->total, &m->free, &m->used);
    return r;
}

/* The first CUDA call of a process: it takes its slot in the tenant here,
 * and CUDA is refused (with the reason, said once) if it cannot. */
CUresult fg_mem_cuInit(fg_real_cuInit next, unsigned int Flags)
{
    if (!fg_tenant_ready() && fg_tenant_refused())
        return CUDA_ERROR_NOT_PERMITTED;
    return next(Flags);
}

/* Async-signal-safe: a forked child holds no device memory and no records. */
void fg_memquota_after_fork(void)
{
    fg_rec_after_fork();
    fg_ctx_after_fork();
    fg_graph_after_fork();
    fg_tenant_after_fork();
}
