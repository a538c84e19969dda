/* Memory quotas: what the tenant sees (the quota as the device in
 * cuMemGetInfo, cuDeviceTotalMem and NVML, its own processes in NVML's
 * lists), the first CUDA call (where a process takes its slot in the
 * tenant), and setup. */
#include "memquota.h"

#include <stddef.h>
#include <stdlib.h>
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

/* NVML's lists of processes, as a tenant sees them: its own processes
 * alone (another tenant's pids, memory and GPU time are not its business).
 * The whole list is asked for, kept to the tenant's, and answered with
 * NVML's rules for the caller's room: INSUFFICIENT_SIZE and the count
 * needed when it is short. A process of the tenant is known by its own
 * pid, which is what NVML gives a caller in the same PID namespace (driver
 * 580 translates pids into the caller's; measured), or by the pid NVML
 * showed it when it made its first context, for a driver that gives pids
 * of the root namespace. A tenant's processes in a namespace of their own
 * are listed to callers in it (a container), not to the tenant's callers
 * outside it. */

/* The whole list from next (at most 64 Ki entries of size bytes): its
 * entries in *all (free it), their number in *n; NVML's error otherwise. */
static nvmlReturn_t whole_list(nvmlReturn_t (*ask)(void *ctx, void *buf, unsigned *n), void *ctx, size_t size,
                               void **all, unsigned *n)
{
    unsigned cap = 64;
    *all = NULL;
    for (;;) {
        void *b = realloc(*all, (size_t)cap * size);
        if (!b) {
            free(*all);
            *all = NULL;
            return NVML_ERROR_MEMORY;
        }
        *all = b;
        *n = cap;
        nvmlReturn_t r = ask(ctx, b, n);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE && *n > cap && *n <= 65536) {
            cap = *n + 16; /* room for a few that start meanwhile */
            continue;
        }
        if (r != NVML_SUCCESS) {
            free(*all);
            *all = NULL;
        }
        return r;
    }
}

/* The tenant's entries (pid at offset pid_off) of the whole list ask
 * gives, answered into the caller's (out, *count) by NVML's rules. */
static nvmlReturn_t own_list(nvmlReturn_t (*ask)(void *ctx, void *buf, unsigned *n), void *ctx, size_t size,
                             size_t pid_off, void *out, unsigned *count)
{
    void *all;
    unsigned n;
    nvmlReturn_t r = whole_list(ask, ctx, size, &all, &n);
    if (r != NVML_SUCCESS)
        return r;
    unsigned kept = 0;
    for (unsigned i = 0; i < n; i++) {
        char *e = (char *)all + (size_t)i * size;
        unsigned pid;
        memcpy(&pid, e + pid_off, sizeof pid);
        if (fg_tenant_has_pid(pid))
            memmove((char *)all + (size_t)kept++ * size, e, size);
    }
    if (kept > *count || (kept && !out))
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    else if (kept)
        memcpy(out, all, (size_t)kept * size);
    *count = kept;
    free(all);
    return r;
}

struct procs_ask {
    nvmlReturn_t (*next)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
    nvmlDevice_t d;
};

static nvmlReturn_t ask_procs(void *ctx, void *buf, unsigned *n)
{
    struct procs_ask *a = ctx;
    return a->next(a->d, n, buf);
}

static nvmlReturn_t own_procs(nvmlReturn_t (*next)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *), nvmlDevice_t d,
                              unsigned *count, nvmlProcessInfo_t *infos)
{
    if (!count)
        return next(d, count, infos);
    struct procs_ask a = {next, d};
    return own_list(ask_procs, &a, sizeof *infos, offsetof(nvmlProcessInfo_t, pid), infos, count);
}

nvmlReturn_t fg_mem_nvmlDeviceGetComputeRunningProcesses_v3(fg_real_nvmlDeviceGetComputeRunningProcesses_v3 next,
                                                             nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos)
{
    return own_procs(next, d, count, infos);
}

nvmlReturn_t fg_mem_nvmlDeviceGetGraphicsRunningProcesses_v3(fg_real_nvmlDeviceGetGraphicsRunningProcesses_v3 next,
                                                              nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos)
{
    return own_procs(next, d, count, infos);
}

nvmlReturn_t fg_mem_nvmlDeviceGetMPSComputeRunningProcesses_v3(
    fg_real_nvmlDeviceGetMPSComputeRunningProcesses_v3 next, nvmlDevice_t d, unsigned *count, nvmlProcessInfo_t *infos)
{
    return own_procs(next, d, count, infos);
}

struct util_ask {
    fg_real_nvmlDeviceGetProcessUtilization next;
    nvmlDevice_t d;
    unsigned long long since;
};

static nvmlReturn_t ask_util(void *ctx, void *buf, unsigned *n)
{
    struct util_ask *a = ctx;
    return a->next(a->d, buf, n, a->since);
}

/* Samples of the tenant's processes only; none is NOT_FOUND, as NVML
 * answers when no process has one. */
nvmlReturn_t fg_mem_nvmlDeviceGetProcessUtilization(fg_real_nvmlDeviceGetProcessUtilization next, nvmlDevice_t d,
                                                    nvmlProcessUtilizationSample_t *samples, unsigned *count,
                                                    unsigned long long since)
{
    if (!count)
        return next(d, samples, count, since);
    struct util_ask a = {next, d, since};
    nvmlReturn_t r =
        own_list(ask_util, &a, sizeof *samples, offsetof(nvmlProcessUtilizationSample_t, pid), samples, count);
    return r == NVML_SUCCESS && *count == 0 ? NVML_ERROR_NOT_FOUND : r;
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
