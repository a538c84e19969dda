/* Simulated driver: initialization, devices, contexts, errors and entry
 * point resolution. */
#include "sim.h"
#include "flexgv/atomic_caps.h"
#include "flexgv/devprop.h"
#include "flexgv/cuda_util.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CTX_MAGIC 0x43545831u

int sim_initialized;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_ctx *primary[SIM_MAX_DEVICES];
/* A device's primary context while inactive (reset, or released by its
 * last holder): its handle is the device's again once retained, as an
 * H100's driver answers (scripts/gpu-e2e.sh simmodel); invalid meanwhile. */
static struct sim_ctx *idle_primary[SIM_MAX_DEVICES];
static int primary_refs[SIM_MAX_DEVICES];

/* Per-thread context stack; cuCtxSetCurrent replaces its top. */
static __thread struct sim_ctx *ctx_stack[16];
static __thread int ctx_depth;

/* ---- devices: CUDA ordinals and physical devices ---- */

int sim_ndevices;
static int phys_of[SIM_MAX_DEVICES];    /* by ordinal */
static int ordinal_of[SIM_MAX_DEVICES]; /* by physical device, -1 if hidden */

int sim_phys(CUdevice ordinal) { return ordinal >= 0 && ordinal < sim_ndevices ? phys_of[ordinal] : -1; }
CUdevice sim_ordinal(int phys) { return ordinal_of[phys]; }

/* The physical device one CUDA_VISIBLE_DEVICES entry names: an index, or a
 * prefix (at least "GPU-") of exactly one device's UUID; -1 if none. */
static int visible_entry(const char *e, size_t len)
{
    if (len && strspn(e, "0123456789") >= len) {
        long v = strtol(e, NULL, 10);
        return len <= 3 && v < sim->cfg.devices ? (int)v : -1;
    }
    if (len < 4 || strncmp(e, "GPU-", 4) != 0)
        return -1;
    int found = -1;
    for (int d = 0; d < sim->cfg.devices; d++) {
        CUuuid u;
        char text[64];
        sim_uuid(d, &u);
        fg_uuid_text(&u, text, sizeof text);
        if (len <= strlen(text) && strncasecmp(text, e, len) == 0) {
            if (found >= 0)
                return -1; /* ambiguous */
            found = d;
        }
    }
    return found;
}

/* CUDA_VISIBLE_DEVICES selects and orders the ordinals, as the driver does:
 * a comma list of indices or UUIDs, where the first invalid (or repeated)
 * entry ends the list. NVML is not affected. */
static void map_devices(void)
{
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        ordinal_of[d] = -1;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    while (v && n < sim->cfg.devices) {
        while (isspace((unsigned char)*v))
            v++;
        size_t len = strcspn(v, ",");
        size_t trimmed = len;
        while (trimmed && isspace((unsigned char)v[trimmed - 1]))
            trimmed--;
        int d = visible_entry(v, trimmed);
        if (d < 0 || ordinal_of[d] >= 0)
            break;
        ordinal_of[d] = n;
        phys_of[n++] = d;
        if (v[len] != ',')
            break;
        v += len + 1;
    }
    for (; !v && n < sim->cfg.devices; n++) {
        ordinal_of[n] = n;
        phys_of[n] = n;
    }
    sim_ndevices = n;
}

/* An MPS client's first cuInit joins its server (sim_mps_join). */
static int mps_refused;
static void join_mps(void) { mps_refused = sim_mps_client() && sim_mps_join() != 0; }

SIM_EXPORT CUresult cuInit(unsigned int Flags)
{
    static pthread_once_t mapped = PTHREAD_ONCE_INIT, joined = PTHREAD_ONCE_INIT;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_attach() != 0)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&joined, join_mps);
    if (mps_refused)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&mapped, map_devices);
    if (sim_ndevices == 0)
        return CUDA_ERROR_NO_DEVICE;
    __atomic_store_n(&sim_initialized, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

#define REQUIRE_INIT()                 \
    do {                               \
        if (!sim_initialized)          \
            return CUDA_ERROR_NOT_INITIALIZED; \
    } while (0)

/* Converts an ordinal argument to its physical device. */
#define DEVICE_ARG(dev, var)                 \
    int var = sim_phys(dev);                 \
    if (var < 0)                             \
        return CUDA_ERROR_INVALID_DEVICE

SIM_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    /* Answered before cuInit, as the real driver does. */
    *driverVersion = sim_attach() == 0 ? sim->cfg.driver_version : 13000;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
    REQUIRE_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_ndevices;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    REQUIRE_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_phys(ordinal) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    REQUIRE_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "FlexGV Simulated GPU");
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
    REQUIRE_INIT();
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    DEVICE_ARG(dev, p);
    sim_uuid(p, uuid);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    REQUIRE_INIT();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)sim->cfg.mem_bytes;
    return CUDA_SUCCESS;
}

/* FLEXGV_SIM_ATTRS=NUM=VALUE,...: what the device answers for attributes
 * the simulation does not model (0 otherwise), as a GPU that has them
 * answers, for tests of programs that check them; what they stand for is
 * not simulated. A malformed list is said once and ignored. */
static int given_attr(int attrib)
{
    static int parsed, n, num[64], val[64];
    if (!__atomic_load_n(&parsed, __ATOMIC_ACQUIRE)) {
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&mu);
        const char *s = getenv("FLEXGV_SIM_ATTRS");
        int k = 0, bad = 0;
        while (!parsed && s && *s && !bad) {
            char *end;
            long a = strtol(s, &end, 10), v = 0;
            bad = end == s || *end != '=' || a <= 0 || a > 1000 || k == 64;
            if (!bad) {
                s = end + 1;
                v = strtol(s, &end, 10);
                bad = end == s || (*end && *end != ',');
                num[k] = (int)a;
                val[k++] = (int)v;
                s = *end ? end + 1 : end;
            }
        }
        if (!parsed) {
            if (bad)
                fprintf(stderr, "simulated GPU: FLEXGV_SIM_ATTRS=%s: want NUM=VALUE,... (ignored)\n",
                        getenv("FLEXGV_SIM_ATTRS"));
            n = bad ? 0 : k;
            __atomic_store_n(&parsed, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&mu);
    }
    for (int i = 0; i < n; i++)
        if (num[i] == attrib)
            return val[i];
    return 0;
}

SIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    DEVICE_ARG(dev, p);
    int v;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1500000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = sim_sms(); break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = sim_mps_client(); break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = p + 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2600000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 50 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    default: v = given_attr(attrib); break; /* 0 unless FLEXGV_SIM_ATTRS gives it */
    }
    *pi = v;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
    return fg_devprop(prop, dev, cuDeviceGetAttribute);
}
SIM_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    return fg_compute_capability(major, minor, dev, cuDeviceGetAttribute);
}

/* Atomics with the host as the host-native atomics attribute says; between
 * two devices as a peer link the simulation does not have. */
SIM_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *caps, const CUatomicOperation *ops, unsigned int count,
                                                      CUdevice dev)
{
    REQUIRE_INIT();
    DEVICE_ARG(dev, p);
    (void)p;
    return fg_atomic_caps(caps, ops, count, given_attr(CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED));
}

SIM_EXPORT CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int *caps, const CUatomicOperation *ops, unsigned int count,
                                                     CUdevice src, CUdevice dst)
{
    REQUIRE_INIT();
    DEVICE_ARG(src, ps);
    DEVICE_ARG(dst, pd);
    return ps == pd ? CUDA_ERROR_INVALID_DEVICE : fg_atomic_caps(caps, ops, count, 0);
}

/* Unhooked entry points: the shim must hand these through untouched. */
SIM_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    DEVICE_ARG(dev, p);
    snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", p + 1);
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

static struct sim_ctx *new_ctx(int dev, int is_primary, unsigned flags)
{
    struct sim_ctx *c = is_primary ? idle_primary[dev] : NULL;
    if (c)
        memset(c, 0, sizeof *c);
    else if (!(c = calloc(1, sizeof *c)))
        return NULL;
    static unsigned long long next_id;
    c->magic = CTX_MAGIC;
    c->dev = dev;
    c->primary = is_primary;
    c->flags = flags;
    c->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    /* A context takes device memory of its own, as on real GPUs. */
    if (sim->cfg.ctx_mem_bytes && sim_mem_reserve(dev, sim->cfg.ctx_mem_bytes) != 0) {
        c->magic = 0;
        if (c != idle_primary[dev])
            free(c);
        return NULL;
    }
    c->charged_bytes = sim->cfg.ctx_mem_bytes;
    if (is_primary)
        idle_primary[dev] = NULL;
    return c;
}

/* gone: what the driver answers for the context's streams from then on
 * (CUDA_ERROR_CONTEXT_IS_DESTROYED, or CUDA_ERROR_INVALID_CONTEXT for a
 * primary context's, as an H100's does). */
static void free_ctx(struct sim_ctx *c, CUresult gone)
{
    sim_ctx_sync(c);
    sim_ctx_streams_gone(c, gone);
    sim_graph_ctx_release(c);
    sim_ctx_release_memory(c);
    if (c->charged_bytes)
        sim_mem_release(c->dev, c->charged_bytes);
    c->magic = 0;
    if (c->primary)
        idle_primary[c->dev] = c;
    else
        free(c);
}

struct sim_ctx *sim_current_ctx(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

CUresult sim_check_ctx(struct sim_ctx **out)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_ctx *c = sim_current_ctx();
    if (!c || c->magic != CTX_MAGIC)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

static int valid_ctx(struct sim_ctx *c) { return c && c->magic == CTX_MAGIC; }
int sim_ctx_valid(CUcontext c) { return valid_ctx((struct sim_ctx *)c); }

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_GATE();
    REQUIRE_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    DEVICE_ARG(dev, p);
    pthread_mutex_lock(&ctx_lock);
    if (!primary[p])
        primary[p] = new_ctx(p, 1, 0);
    struct sim_ctx *c = primary[p];
    if (c)
        primary_refs[p]++;
    pthread_mutex_unlock(&ctx_lock);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

static CUresult primary_drop(CUdevice ordinal, int reset)
{
    REQUIRE_INIT();
    DEVICE_ARG(ordinal, dev);
    pthread_mutex_lock(&ctx_lock);
    struct sim_ctx *c = primary[dev];
    if (!c || (!reset && primary_refs[dev] == 0)) {
        pthread_mutex_unlock(&ctx_lock);
        return reset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    }
    if (reset)
        primary_refs[dev] = 0;
    else
        primary_refs[dev]--;
    if (primary_refs[dev] == 0) {
        primary[dev] = NULL;
        for (int i = 0; i < ctx_depth; i++)
            if (ctx_stack[i] == c)
                ctx_stack[i] = NULL;
        free_ctx(c, CUDA_ERROR_INVALID_CONTEXT);
    }
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

/* Not in api/cuda.api (the shim does not hook it): found by dlsym only. */
SIM_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    REQUIRE_INIT();
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = ctx ? (struct sim_ctx *)ctx : sim_current_ctx();
    if (!valid_ctx(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

/* The current context's flags: scheduling, host mapping, local memory
 * resizing and synchronous memory operations, as cuCtxSetFlags takes. */
SIM_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    REQUIRE_INIT();
    struct sim_ctx *c = sim_current_ctx();
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    REQUIRE_INIT();
    struct sim_ctx *c = sim_current_ctx();
    if (!valid_ctx(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS))
        return CUDA_ERROR_INVALID_VALUE;
    c->flags = flags;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { SIM_GATE(); return primary_drop(dev, 0); }
SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { SIM_GATE(); return primary_drop(dev, 1); }

SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    REQUIRE_INIT();
    DEVICE_ARG(dev, p);
    if (flags & ~0x1fu)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&ctx_lock);
    if (primary[p])
        primary[p]->flags = flags;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    REQUIRE_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    DEVICE_ARG(dev, p);
    pthread_mutex_lock(&ctx_lock);
    *active = primary[p] != NULL;
    *flags = primary[p] ? primary[p]->flags : 0;
    pthread_mutex_unlock(&ctx_lock);
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    DEVICE_ARG(dev, p);
    struct sim_ctx *c = new_ctx(p, 0, flags);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ctx_depth == (int)(sizeof ctx_stack / sizeof ctx_stack[0])) {
        free_ctx(c, CUDA_ERROR_CONTEXT_IS_DESTROYED);
        return CUDA_ERROR_INVALID_VALUE;
    }
    ctx_stack[ctx_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_GATE();
    return ctx_create(pctx, flags, dev);
}

SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    SIM_GATE();
    /* CUDA-in-graphics needs a graphics API (D3D12) this GPU has not; an SM
     * count affinity needs an MPS client, whose SMs are already its own. */
    if (params && params->cigParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (params && (params->numExecAffinityParams < 0 || (params->numExecAffinityParams && !params->execAffinityParams)))
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; params && i < params->numExecAffinityParams; i++) {
        const CUexecAffinityParam *a = &params->execAffinityParams[i];
        if (a->type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
            return CUDA_ERROR_INVALID_VALUE;
        if (!sim_mps_client()) /* before the count, as the H200's driver */
            return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
        if (!a->param.smCount.val)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return ctx_create(pctx, flags, dev);
}

/* SM count affinity is an MPS client's (Volta and later). */
SIM_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    REQUIRE_INIT();
    if (!pi || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= sim_ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = sim_mps_client() ? 1 : 0;
    return CUDA_SUCCESS;
}

/* An MPS client's context runs on the SMs it was given. */
SIM_EXPORT CUresult cuCtxGetExecAffinity(CUexecAffinityParam *pExecAffinity, CUexecAffinityType type)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pExecAffinity || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_mps_client())
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    pExecAffinity->type = type;
    pExecAffinity->param.smCount.val = (unsigned)sim_sms();
    return CUDA_SUCCESS;
}

struct sim_ctx *sim_ctx_make(int phys, int sms)
{
    struct sim_ctx *c = new_ctx(phys, 0, 0);
    if (c)
        c->sms = sms;
    return c;
}

void sim_ctx_end(struct sim_ctx *c)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c) {
            memmove(&ctx_stack[i], &ctx_stack[i + 1], sizeof ctx_stack[0] * (size_t)(ctx_depth - i - 1));
            ctx_depth--;
            i--;
        }
    free_ctx(c, CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

/* A green context's context goes with the green context only. */
SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    SIM_GATE();
    REQUIRE_INIT();
    struct sim_ctx *c = (struct sim_ctx *)ctx;
    if (!valid_ctx(c) || c->primary || c->green)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx_end(c);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!valid_ctx((struct sim_ctx *)ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == (int)(sizeof ctx_stack / sizeof ctx_stack[0]))
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = (struct sim_ctx *)ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_ctx *c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!ctx) {
        if (ctx_depth)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!valid_ctx((struct sim_ctx *)ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = (struct sim_ctx *)ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)sim_current_ctx();
    return CUDA_SUCCESS;
}


/* CUDA 13's variants name a context; NULL means the current one. */
static CUresult ctx_named(CUcontext ctx, struct sim_ctx **out)
{
    if (!ctx)
        return sim_check_ctx(out);
    REQUIRE_INIT();
    if (!valid_ctx((struct sim_ctx *)ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = (struct sim_ctx *)ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    struct sim_ctx *c;
    CUresult r = ctx_named(ctx, &c);
    if (r)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = sim_ordinal(c->dev);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = ctx_named(ctx, &c);
    if (r || (r = sim_capture_check_ctx(c)) != CUDA_SUCCESS)
        return r;
    sim_ctx_sync(c);
    sim_device_output();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSynchronize(void) { SIM_GATE(); return cuCtxSynchronize_v2(NULL); }

SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device) { return cuCtxGetDevice_v2(device, NULL); }

/* ---- errors ---- */

const char *sim_result_name(CUresult r)
{
    switch (r) {
#define X(name, value) \
    case value:        \
        return #name;
#include "flexgv/cuda_results.def"
#undef X
    }
    return NULL;
}

SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = sim_result_name(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *pStr = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *pStr = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *pStr = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *pStr = "initialization error"; break;
    case CUDA_ERROR_NO_DEVICE: *pStr = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *pStr = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *pStr = "invalid device context"; break;
    case CUDA_ERROR_INVALID_HANDLE: *pStr = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *pStr = "named symbol not found"; break;
    case CUDA_ERROR_NOT_READY: *pStr = "device not ready"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *pStr = "operation not supported"; break;
    default:
        *pStr = sim_result_name(error);
        if (!*pStr)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- entry point resolution ---- */

/* The stream memory operations' _v2 at 11.7, where they came (the spec has
 * them at 12.0, where they became the default; the ABI is the same). */
static const struct fg_proc unhooked_procs[] = {
    {"cuStreamWriteValue32", "cuStreamWriteValue32_v2", 11070, 0, (void *)cuStreamWriteValue32_v2},
    {"cuStreamWriteValue64", "cuStreamWriteValue64_v2", 11070, 0, (void *)cuStreamWriteValue64_v2},
    {"cuStreamWaitValue32", "cuStreamWaitValue32_v2", 11070, 0, (void *)cuStreamWaitValue32_v2},
    {"cuStreamWaitValue64", "cuStreamWaitValue64_v2", 11070, 0, (void *)cuStreamWaitValue64_v2},
    {"cuStreamBatchMemOp", "cuStreamBatchMemOp_v2", 11070, 0, (void *)cuStreamBatchMemOp_v2},
};

static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status)
{
    static const struct fg_proc *const tables[] = {sim_procs, unhooked_procs};
    const int sizes[] = {sim_nprocs, (int)(sizeof unhooked_procs / sizeof unhooked_procs[0])};
    return fg_proc_resolve(tables, sizes, 2, symbol, pfn, cudaVersion, flags, status);
}

SIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return resolve(symbol, pfn, cudaVersion, flags, NULL);
}

SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    return resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* Process checkpointing: a controller's calls on another process
 * (state.c). */
SIM_EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    REQUIRE_INIT();
    return sim_ckpt_state(pid, state);
}

SIM_EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    REQUIRE_INIT();
    if (args && (args->reserved0 || args->reserved1[0] || args->reserved1[1] || args->reserved1[2] ||
                 args->reserved1[3] || args->reserved1[4] || args->reserved1[5] || args->reserved1[6]))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_ckpt_lock(pid, args ? args->timeoutMs : 0);
}

SIM_EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    (void)args;
    REQUIRE_INIT();
    return sim_ckpt_checkpoint(pid);
}

/* Its arguments are all reserved before CUDA 13.0, and must be zero; from
 * 13.0 they may carry GPU pairs that move the process to other devices. */
SIM_EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    REQUIRE_INIT();
    if (!args)
        return sim_ckpt_restore(pid, NULL, 0);
    static const CUcheckpointRestoreArgs zero;
    int remap = sim->cfg.driver_version >= 13000;
    if (remap ? memcmp(args->reserved, zero.reserved, sizeof zero.reserved) || args->reserved1
              : memcmp(args, &zero, sizeof zero))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_ckpt_restore(pid, args->gpuPairs, args->gpuPairsCount);
}

SIM_EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    (void)args;
    REQUIRE_INIT();
    return sim_ckpt_unlock(pid);
}
