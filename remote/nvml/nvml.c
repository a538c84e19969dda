/* The remoting client's NVML (libnvidia-ml.so.1): the common queries about
 * the remote devices, answered with public driver calls to the client's
 * libcuda.so.1 (its DT_NEEDED, found beside it through the rpath $ORIGIN),
 * so that NVML says what the program's CUDA calls say. Identity comes from
 * what the client cached at its handshake and is read once per nvmlInit;
 * memory is asked of the server at every query, and utilization and the
 * readings monitors ask (temperature, power, clocks, fan, performance
 * state) of the server's NVML (through the client's own operations).
 * Every other entry point answers NVML_ERROR_NOT_SUPPORTED (stubs.c).
 *
 * Under the shim (flexgv run --remote) these driver calls go through its
 * hooks like the program's own, and are traced with them. */
#include "flexgv/cuda_api_gen.h"
#include "flexgv/cuda_util.h"

#include "../client/integrity_devices.h"
#include "../wire.h"

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include "flexgv/nvml_util.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FGN_EXPORT __attribute__((visibility("default")))
#define MAX_DEVS 64

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int refs;
static int driver_version, ndev;
/* NVML's devices are CUDA's, in CUDA's order: devs[i] is ordinal i. */
static struct nvml_dev {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    struct fgr_integrity_dev id; /* UUID bytes and PCI location */
    int cc_major, cc_minor;
} devs[MAX_DEVS];

static nvmlReturn_t nvml_result(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return NVML_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED: return NVML_ERROR_UNINITIALIZED;
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_VALUE: return NVML_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_OUT_OF_MEMORY: return NVML_ERROR_MEMORY;
    case CUDA_ERROR_NOT_SUPPORTED: return NVML_ERROR_NOT_SUPPORTED;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return NVML_ERROR_GPU_IS_LOST;
    default: return NVML_ERROR_UNKNOWN;
    }
}

/* The server's devices as the client's libcuda.so.1 names them. cuInit
 * connects (the client says on stderr why it cannot); a client that
 * reaches no server has no driver to speak of. */
static nvmlReturn_t enumerate(void)
{
    int n;
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if ((r = cuDriverGetVersion(&driver_version)) != CUDA_SUCCESS || (r = cuDeviceGetCount(&n)) != CUDA_SUCCESS)
        return nvml_result(r);
    if (n > MAX_DEVS)
        n = MAX_DEVS;
    struct fgr_integrity_dev ids[MAX_DEVS];
    if ((r = fgr_integrity_devices(ids, n)) != CUDA_SUCCESS)
        return nvml_result(r);
    for (int i = 0; i < n; i++) {
        struct nvml_dev *d = &devs[i];
        d->id = ids[i];
        CUuuid u;
        memcpy(u.bytes, ids[i].uuid, sizeof u.bytes);
        fg_uuid_text(&u, d->uuid, sizeof d->uuid);
        if ((r = cuDeviceGetName(d->name, sizeof d->name, i)) != CUDA_SUCCESS ||
            (r = cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, i)) != CUDA_SUCCESS ||
            (r = cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, i)) != CUDA_SUCCESS)
            return nvml_result(r);
    }
    ndev = n;
    return NVML_SUCCESS;
}

/* Reference counted: the devices are read again by an nvmlInit that finds
 * NVML shut down. */
static nvmlReturn_t init(void)
{
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t r = refs ? NVML_SUCCESS : enumerate();
    if (r == NVML_SUCCESS)
        __atomic_fetch_add(&refs, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&init_lock);
    return r;
}

FGN_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(); }
FGN_EXPORT nvmlReturn_t nvmlInit(void) { return init(); }
FGN_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return init();
}

FGN_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&init_lock);
    int n = refs;
    if (n > 0)
        __atomic_store_n(&refs, n - 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    return n > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

FGN_EXPORT const char *nvmlErrorString(nvmlReturn_t result) { return fg_nvml_error_string(result); }

#define REQUIRE_NVML() FG_NVML_REQUIRE(refs)

/* snprintf into an NVML buffer: too short is INSUFFICIENT_SIZE. */
static nvmlReturn_t put_text(char *buf, unsigned int length, const char *text)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, text);
    return NVML_SUCCESS;
}

CUresult fgrNvmlDriverVersion(char *version, unsigned int length);

static char server_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];

static void ask_version(void)
{
    char v[sizeof server_version] = "";
    if (fgrNvmlDriverVersion(v, sizeof v) == CUDA_SUCCESS && memchr(v, 0, sizeof v) && v[0])
        memcpy(server_version, v, sizeof v);
    else
        snprintf(server_version, sizeof server_version, "%d.%d.remote", driver_version / 1000,
                 driver_version % 1000 / 10);
}

/* The server's kernel driver's version, asked once. A server without NVML
 * cannot tell it: the CUDA version its driver supports stands in, marked
 * remote ("13.0.remote"). */
static const char *version_text(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ask_version);
    return server_version;
}

FGN_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    REQUIRE_NVML();
    return put_text(version, length, version_text());
}

/* NVML's API version, then the driver's. */
FGN_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char text[2 * NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    REQUIRE_NVML();
    snprintf(text, sizeof text, "%s.%s", NVML_API_VERSION_STR, version_text());
    return put_text(version, length, text);
}

FGN_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    REQUIRE_NVML();
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = driver_version;
    return NVML_SUCCESS;
}

FGN_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

FGN_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    REQUIRE_NVML();
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)ndev;
    return NVML_SUCCESS;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

static int ordinal(nvmlDevice_t d)
{
    struct nvml_dev *p = (struct nvml_dev *)d;
    return p >= devs && p < devs + ndev ? (int)(p - devs) : -1;
}

#define DEVICE_ARG(d, var)      \
    REQUIRE_NVML();             \
    int var = ordinal(d);       \
    if (var < 0)                \
        return NVML_ERROR_INVALID_ARGUMENT

FGN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    REQUIRE_NVML();
    if (!device || index >= (unsigned)ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&devs[index];
    return NVML_SUCCESS;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    REQUIRE_NVML();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < ndev; i++)
        if (!strcmp(devs[i].uuid, uuid)) {
            *device = (nvmlDevice_t)&devs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

/* "domain:bus:device.function" or "bus:device.function", in hex. */
FGN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device)
{
    REQUIRE_NVML();
    unsigned dom = 0, bus, dv, fn;
    if (!busId || !device ||
        (sscanf(busId, "%x:%x:%x.%x", &dom, &bus, &dv, &fn) != 4 &&
         (dom = 0, sscanf(busId, "%x:%x.%x", &bus, &dv, &fn) != 3)))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < ndev; i++) {
        const struct fgr_integrity_dev *id = &devs[i].id;
        if ((unsigned)id->pci_domain == dom && (unsigned)id->pci_bus == bus && (unsigned)id->pci_device == dv &&
            fn == 0) {
            *device = (nvmlDevice_t)&devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(busId, device);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    DEVICE_ARG(device, d);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)d;
    return NVML_SUCCESS;
}

/* The device nodes are the server's: the client has none. */
FGN_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    DEVICE_ARG(device, d);
    (void)d;
    (void)minor;
    return NVML_ERROR_NOT_SUPPORTED;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_ARG(device, d);
    return put_text(name, length, devs[d].name);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_ARG(device, d);
    return put_text(uuid, length, devs[d].uuid);
}

/* The fields every version of nvmlPciInfo_t has, in the layout of the
 * first (the later ones appended busId). CUDA does not say the PCI
 * device and subsystem ids: they are 0. */
static void pci_prefix(int d, nvmlPciInfo_t *pci)
{
    const struct fgr_integrity_dev *id = &devs[d].id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, (unsigned)id->pci_domain,
             (unsigned)id->pci_bus, (unsigned)id->pci_device);
    pci->domain = (unsigned)id->pci_domain;
    pci->bus = (unsigned)id->pci_bus;
    pci->device = (unsigned)id->pci_device;
    pci->pciDeviceId = 0;
    pci->pciSubSystemId = 0;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_ARG(device, d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    pci_prefix(d, pci);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, pci->domain, pci->bus, pci->device);
    return NVML_SUCCESS;
}

/* The older versions' structures end where busId starts. */
FGN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_ARG(device, d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    pci_prefix(d, pci);
    return NVML_SUCCESS;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v2(device, pci);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    DEVICE_ARG(device, d);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = devs[d].cc_major;
    *minor = devs[d].cc_minor;
    return NVML_SUCCESS;
}

/* A device's memory as the server's NVML says it to the executor
 * (through the client's own operation). */
CUresult fgrNvmlMemory(CUdevice dev, size_t *total, size_t *reserved, size_t *used);

/* cuMemGetInfo in the device's primary context, pushed on this thread and
 * popped after (retain, push, query, pop, release), for a server without
 * NVML: a process with no primary context yet has one made on the server
 * for the query, whose memory then counts as used. */
static CUresult ctx_mem(int d, size_t *total, size_t *free_b)
{
    CUcontext ctx;
    CUresult r = cuDevicePrimaryCtxRetain(&ctx, d);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = cuCtxPushCurrent_v2(ctx)) == CUDA_SUCCESS) {
        r = cuMemGetInfo_v2(free_b, total);
        cuCtxPopCurrent_v2(NULL);
    }
    cuDevicePrimaryCtxRelease_v2(d);
    return r;
}

/* A device's memory, as _v2 splits it: what the server's NVML says to the
 * executor, which under a quota is the tenant's view (its quota as the
 * total, what it holds as used), as the shim's NVML view is locally;
 * asked without a context, so that a monitor's query (nvidia-smi) does
 * not count one it made itself. */
static nvmlReturn_t mem(int d, unsigned long long *total, unsigned long long *reserved, unsigned long long *free_b,
                        unsigned long long *used)
{
    size_t t = 0, r = 0, u = 0, f = 0;
    CUresult cr = fgrNvmlMemory((CUdevice)d, &t, &r, &u);
    if (cr == CUDA_ERROR_NOT_SUPPORTED && (cr = ctx_mem(d, &t, &f)) == CUDA_SUCCESS)
        u = t >= f ? t - f : 0;
    if (cr != CUDA_SUCCESS)
        return nvml_result(cr);
    *total = t;
    *reserved = r;
    *used = u;
    *free_b = t >= r + u ? t - r - u : 0;
    return NVML_SUCCESS;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    DEVICE_ARG(device, d);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long reserved;
    nvmlReturn_t r = mem(d, &memory->total, &reserved, &memory->free, &memory->used);
    if (r == NVML_SUCCESS)
        memory->used += reserved; /* the first version counts it as used */
    return r;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    DEVICE_ARG(device, d);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    return mem(d, &memory->total, &memory->reserved, &memory->free, &memory->used);
}

/* The server's NVML, through the client's own operation. */
CUresult fgrNvmlUtilization(CUdevice dev, unsigned int *gpu, unsigned int *memory);

FGN_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    DEVICE_ARG(device, d);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    return nvml_result(fgrNvmlUtilization((CUdevice)d, &utilization->gpu, &utilization->memory));
}

/* Whether two devices reach each other's memory, as the server's NVML
 * says (through the client's own operation). */
CUresult fgrNvmlP2PStatus(CUdevice dev1, CUdevice dev2, unsigned int index, unsigned int *status);

FGN_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                               nvmlGpuP2PStatus_t *p2pStatus)
{
    DEVICE_ARG(device1, d1);
    DEVICE_ARG(device2, d2);
    if (!p2pStatus)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned st = 0;
    nvmlReturn_t r = nvml_result(fgrNvmlP2PStatus((CUdevice)d1, (CUdevice)d2, (unsigned)p2pIndex, &st));
    if (r == NVML_SUCCESS)
        *p2pStatus = (nvmlGpuP2PStatus_t)st;
    return r;
}

/* Readings of the server's NVML (through the client's own operation):
 * what monitors ask of a GPU (its temperature, power and limits, clocks,
 * fan, performance state) and the modes nvidia-smi shows. */
CUresult fgrNvmlReading(CUdevice dev, unsigned int what, unsigned int arg, unsigned int *value);

static nvmlReturn_t reading(nvmlDevice_t device, unsigned int what, unsigned int arg, unsigned int *value)
{
    DEVICE_ARG(device, d);
    if (!value)
        return NVML_ERROR_INVALID_ARGUMENT;
    return nvml_result(fgrNvmlReading((CUdevice)d, what, arg, value));
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                                 unsigned int *temp)
{
    return reading(device, FGR_NVML_TEMPERATURE, (unsigned)sensorType, temp);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    if (temperature && temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int t = 0;
    nvmlReturn_t r = reading(device, FGR_NVML_TEMPERATURE, temperature ? (unsigned)temperature->sensorType : 0,
                             temperature ? &t : NULL);
    if (r == NVML_SUCCESS)
        temperature->temperature = (int)t;
    return r;
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return reading(device, FGR_NVML_POWER, 0, power);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return reading(device, FGR_NVML_POWER_LIMIT, 0, limit);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    return reading(device, FGR_NVML_CLOCK, (unsigned)type, clock);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    return reading(device, FGR_NVML_MAX_CLOCK, (unsigned)type, clock);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return reading(device, FGR_NVML_FAN, 0, speed);
}

/* An enumeration's reading: the unsigned int the server's NVML wrote
 * (each enumeration an int's size), as the caller's type. */
#define ENUM_READING(what, type, out)                                    \
    do {                                                                 \
        unsigned int v_ = 0;                                             \
        nvmlReturn_t r_ = reading(device, what, 0, (out) ? &v_ : NULL); \
        if (r_ == NVML_SUCCESS)                                          \
            *(out) = (type)v_;                                           \
        return r_;                                                       \
    } while (0)

FGN_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    ENUM_READING(FGR_NVML_PSTATE, nvmlPstates_t, pState);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return reading(device, FGR_NVML_POWER_MGMT, 0, limit);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    ENUM_READING(FGR_NVML_PERSISTENCE, nvmlEnableState_t, mode);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    ENUM_READING(FGR_NVML_COMPUTE_MODE, nvmlComputeMode_t, mode);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = reading(device, FGR_NVML_MIG_MODE, 0, currentMode);
    return r == NVML_SUCCESS ? reading(device, FGR_NVML_MIG_MODE, 1, pendingMode) : r;
}

/* What the client's executor holds on a device, as the server's NVML
 * lists it (through the client's own operation). */
CUresult fgrNvmlOwnMemory(CUdevice dev, size_t *used);

/* The running processes: this program alone, which is its executor on
 * the server, with what that holds there (none where it holds nothing, or
 * the server has no NVML to say). Other processes on the server are not
 * the program's business. Each entry is written by fill. */
static nvmlReturn_t own_process(nvmlDevice_t device, unsigned int *infoCount, void *infos,
                                void (*fill)(void *infos, unsigned long long used))
{
    DEVICE_ARG(device, d);
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t used = 0;
    unsigned n = fgrNvmlOwnMemory((CUdevice)d, &used) == CUDA_SUCCESS;
    nvmlReturn_t r = n > *infoCount || (n && !infos) ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    if (r == NVML_SUCCESS && n)
        fill(infos, used);
    *infoCount = n;
    return r;
}

static void fill_v3(void *infos, unsigned long long used)
{
    *(nvmlProcessInfo_t *)infos = (nvmlProcessInfo_t){.pid = (unsigned)getpid(), .usedGpuMemory = used,
                                                      .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF};
}

static void fill_v2(void *infos, unsigned long long used)
{
    *(nvmlProcessInfo_v2_t *)infos = (nvmlProcessInfo_v2_t){.pid = (unsigned)getpid(), .usedGpuMemory = used,
                                                            .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF};
}

static void fill_v1(void *infos, unsigned long long used)
{
    *(nvmlProcessInfo_v1_t *)infos = (nvmlProcessInfo_v1_t){.pid = (unsigned)getpid(), .usedGpuMemory = used};
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{
    return own_process(device, infoCount, infos, fill_v3);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_v2_t *infos)
{
    return own_process(device, infoCount, infos, fill_v2);
}

FGN_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_v1_t *infos)
{
    return own_process(device, infoCount, infos, fill_v1);
}
