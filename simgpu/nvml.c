/* Simulated NVML (libnvidia-ml.so.1): reads the same shared state as the
 * simulated driver, so another process (nvidia-smi style tools, the node
 * daemon) sees memory, utilization and processes of every user. */
#include "sim.h"
#include "flexgv/cuda_util.h"

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include "flexgv/nvml_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int nvml_refs;
/* NVML's devices in its order: devs[i] is the simulated device index. */
static struct nvml_dev {
    int index;
} devs[SIM_MAX_DEVICES];
static int nvml_count;

#define REQUIRE_NVML() FG_NVML_REQUIRE(nvml_refs)

/* A GPU that fell off the bus: while the file FLEXGV_SIM_NVML_LOST names
 * exists, the device indices it lists are not enumerated by an nvmlInit
 * that finds NVML uninitialized (the others keep their order), so a node
 * daemon sees them gone while CUDA programs keep running. */
static void enumerate(void)
{
    int lost[SIM_MAX_DEVICES] = {0};
    const char *path = getenv("FLEXGV_SIM_NVML_LOST");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (f) {
        int i;
        while (fscanf(f, " %d", &i) == 1)
            if (i >= 0 && i < SIM_MAX_DEVICES)
                lost[i] = 1;
        fclose(f);
    }
    nvml_count = 0;
    for (int i = 0; i < sim->cfg.devices; i++)
        if (!lost[i])
            devs[nvml_count++].index = i;
}

static nvmlReturn_t init(void)
{
    if (sim_attach() != 0)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (!__atomic_load_n(&nvml_refs, __ATOMIC_ACQUIRE))
        enumerate();
    __atomic_fetch_add(&nvml_refs, 1, __ATOMIC_ACQ_REL);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(); }
SIM_EXPORT nvmlReturn_t nvmlInit(void) { return init(); }
SIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return init();
}

SIM_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    int n = __atomic_load_n(&nvml_refs, __ATOMIC_ACQUIRE);
    while (n > 0 && !__atomic_compare_exchange_n(&nvml_refs, &n, n - 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
    return n > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

SIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result) { return fg_nvml_error_string(result); }

SIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    REQUIRE_NVML();
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    int n = snprintf(version, length, "%d.%d.sim", sim->cfg.driver_version / 1000 * 45 + 5,
                     sim->cfg.driver_version % 1000 / 10);
    return n < 0 || (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    REQUIRE_NVML();
    if (!v)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = sim->cfg.driver_version;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    REQUIRE_NVML();
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)nvml_count;
    return NVML_SUCCESS;
}

static int dev_of(nvmlDevice_t d)
{
    struct nvml_dev *p = (struct nvml_dev *)d;
    if (p < devs || p >= devs + nvml_count)
        return -1;
    return p->index;
}

#define DEVICE_ARG(d, var)                      \
    REQUIRE_NVML();                             \
    int var = dev_of(d);                        \
    if (var < 0)                                \
        return NVML_ERROR_INVALID_ARGUMENT

SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    REQUIRE_NVML();
    if (!device || index >= (unsigned)nvml_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = (nvmlDevice_t)&devs[index];
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    DEVICE_ARG(device, d);
    (void)d;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)((struct nvml_dev *)device - devs);
    return NVML_SUCCESS;
}

/* The device node's number (/dev/nvidiaN): the device's own, whatever
 * NVML's enumeration order (a lost GPU renumbers indices, not nodes). */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
    DEVICE_ARG(device, d);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned)d;
    return NVML_SUCCESS;
}

/* MIG mode: on for the device indices FLEXGV_SIM_MIG lists (as a GPU an
 * administrator split into MIG devices), off for the others. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    DEVICE_ARG(device, d);
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    int on = 0;
    const char *list = getenv("FLEXGV_SIM_MIG");
    for (const char *c = list ? list : ""; *c;) {
        char *end;
        long i = strtol(c, &end, 10);
        if (end == c) {
            c++;
            continue;
        }
        on |= i == d;
        c = end;
    }
    *currentMode = *pendingMode = on ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    DEVICE_ARG(device, d);
    (void)d;
    if (!name)
        return NVML_ERROR_INVALID_ARGUMENT;
    int n = snprintf(name, length, "FlexGV Simulated GPU");
    return (unsigned)n >= length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

/* Same bytes as cuDeviceGetUuid, in NVML's text form. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    DEVICE_ARG(device, d);
    if (!uuid)
        return NVML_ERROR_INVALID_ARGUMENT;
    CUuuid u;
    char text[NVML_DEVICE_UUID_BUFFER_SIZE];
    sim_uuid(d, &u);
    fg_uuid_text(&u, text, sizeof text);
    if (strlen(text) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(uuid, text);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    REQUIRE_NVML();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nvml_count; i++) {
        char buf[NVML_DEVICE_UUID_BUFFER_SIZE];
        nvmlDeviceGetUUID((nvmlDevice_t)&devs[i], buf, sizeof buf);
        if (!strcmp(buf, uuid)) {
            *device = (nvmlDevice_t)&devs[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static void mem(int d, unsigned long long *total, unsigned long long *free_b, unsigned long long *used)
{
    sim_reap_dead();
    uint64_t u = __atomic_load_n(&sim->dev[d].used_bytes, __ATOMIC_ACQUIRE);
    *total = sim->cfg.mem_bytes;
    *used = u;
    *free_b = u >= sim->cfg.mem_bytes ? 0 : sim->cfg.mem_bytes - u;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    DEVICE_ARG(device, d);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    mem(d, &memory->total, &memory->free, &memory->used);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    DEVICE_ARG(device, d);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->reserved = 0;
    mem(d, &memory->total, &memory->free, &memory->used);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u)
{
    DEVICE_ARG(device, d);
    if (!u)
        return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = sim_utilization(d);
    u->memory = 0;
    return NVML_SUCCESS;
}

/* What monitors read, modelled on a data-center GPU from the device's
 * utilization: warmer and drawing more power the busier it is, its SM
 * clock at the top while busy (at the device attribute's 1500 MHz) and
 * low while idle; no fan of its own (passively cooled, as NVML answers for
 * an H100 or H200). */
#define SIM_POWER_IDLE_MW 60000u
#define SIM_POWER_LIMIT_MW 700000u

static nvmlReturn_t temperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    DEVICE_ARG(device, d);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 30 + sim_utilization(d) * 40 / 100;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                                 unsigned int *temp)
{
    return temperature(device, sensorType, temp);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *t)
{
    if (t && t->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned int v = 0;
    nvmlReturn_t r = temperature(device, t ? t->sensorType : NVML_TEMPERATURE_GPU, t ? &v : NULL);
    if (r == NVML_SUCCESS)
        t->temperature = (int)v;
    return r;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    DEVICE_ARG(device, d);
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    *power = SIM_POWER_IDLE_MW + (SIM_POWER_LIMIT_MW - SIM_POWER_IDLE_MW) / 100 * sim_utilization(d);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    DEVICE_ARG(device, d);
    (void)d;
    if (!limit)
        return NVML_ERROR_INVALID_ARGUMENT;
    *limit = SIM_POWER_LIMIT_MW;
    return NVML_SUCCESS;
}

/* The software power limit: the enforced one, as no one set another. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return nvmlDeviceGetEnforcedPowerLimit(device, limit);
}

/* Where the device sits: bus index + 1, as cuDeviceGetPCIBusId says; the
 * simulation has no PCI vendor or subsystem ids (0, as the remoting
 * client's NVML, which CUDA does not tell them, answers too). */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    DEVICE_ARG(device, d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned char bus = (unsigned char)(d + 1);
    *pci = (nvmlPciInfo_t){.bus = bus};
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0u, bus, 0u);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, 0u, bus, 0u);
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    DEVICE_ARG(device, d);
    (void)d;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9, *minor = 0; /* as cuDeviceGetAttribute says */
    return NVML_SUCCESS;
}

/* A device's fixed setting: *out = value for a device of this NVML. */
#define FIXED(device, out, value)                 \
    do {                                          \
        DEVICE_ARG(device, d_);                   \
        (void)d_;                                 \
        if (!(out))                               \
            return NVML_ERROR_INVALID_ARGUMENT;   \
        *(out) = (value);                         \
        return NVML_SUCCESS;                      \
    } while (0)

/* A simulated device keeps no state between processes to persist, and
 * takes every process (cuDeviceGetAttribute's compute mode 0). */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    FIXED(device, mode, NVML_FEATURE_DISABLED);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    FIXED(device, mode, NVML_COMPUTEMODE_DEFAULT);
}

static nvmlReturn_t clock_mhz(nvmlClockType_t type, int busy, unsigned int *clock)
{
    static const unsigned top[NVML_CLOCK_COUNT] = {1500, 1500, 2600, 1200}, idle[NVML_CLOCK_COUNT] = {345, 345, 2600, 765};
    if (!clock || (unsigned)type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *clock = busy ? top[type] : idle[type];
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_ARG(device, d);
    return clock_mhz(type, sim_utilization(d) > 0, clock);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    DEVICE_ARG(device, d);
    (void)d;
    return clock_mhz(type, 1, clock);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    DEVICE_ARG(device, d);
    (void)d;
    (void)speed;
    return NVML_ERROR_NOT_SUPPORTED;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    DEVICE_ARG(device, d);
    (void)d;
    if (!pState)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pState = NVML_PSTATE_0;
    return NVML_SUCCESS;
}

/* A device reaches its own memory; the simulated devices do not reach
 * each other's (no peer access is simulated). */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                               nvmlGpuP2PStatus_t *p2pStatus)
{
    DEVICE_ARG(device1, d1);
    DEVICE_ARG(device2, d2);
    if (!p2pStatus || (unsigned)p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN)
        return NVML_ERROR_INVALID_ARGUMENT;
    *p2pStatus = d1 == d2 ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* One sample per running process whose kernels occupied the device since
 * lastSeenTimeStamp (CPU time in microseconds; 0: as far back as kept),
 * within the last second: the share of that window they had it. */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                        nvmlProcessUtilizationSample_t *utilization,
                                                        unsigned int *processSamplesCount,
                                                        unsigned long long lastSeenTimeStamp)
{
    DEVICE_ARG(device, d);
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t mono = sim_now_ns(), real_us = (uint64_t)rt.tv_sec * 1000000 + (uint64_t)rt.tv_nsec / 1000;
    uint64_t since = 0; /* the same instant on CLOCK_MONOTONIC */
    if (lastSeenTimeStamp >= real_us)
        since = mono;
    else if ((real_us - lastSeenTimeStamp) * 1000 < mono)
        since = mono - (real_us - lastSeenTimeStamp) * 1000;
    sim_reap_dead();
    struct sim_proc_util u[SIM_MAX_PROCS];
    uint64_t now;
    int n = sim_proc_utilization(d, since, u, SIM_MAX_PROCS, &now);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (!utilization || *processSamplesCount < (unsigned)n) {
        *processSamplesCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned long long stamp = (unsigned long long)((int64_t)real_us + ((int64_t)now - (int64_t)mono) / 1000);
    for (int i = 0; i < n; i++)
        utilization[i] = (nvmlProcessUtilizationSample_t){.pid = (unsigned)u[i].pid, .timeStamp = stamp,
                                                          .smUtil = u[i].pct};
    *processSamplesCount = (unsigned)n;
    return NVML_SUCCESS;
}

/* No graphics, and no MPS server: those lists are empty. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    DEVICE_ARG(device, d);
    (void)d;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                   nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

/* A busy driver answers late: the list is taken half the lag into the
 * call and returned half the lag after (FLEXGV_SIM_NVML_LAG_US), true
 * neither when asked nor when given. */
static void lag(void)
{
    static long us = -1;
    if (__atomic_load_n(&us, __ATOMIC_RELAXED) < 0) {
        const char *e = getenv("FLEXGV_SIM_NVML_LAG_US");
        char *end = NULL;
        long v = e && *e ? strtol(e, &end, 10) : 0;
        if (end && (end == e || *end || v < 0 || v > 10000000)) {
            fprintf(stderr, "flexgv-sim: FLEXGV_SIM_NVML_LAG_US=%s: want microseconds from 0 to 10000000\n", e);
            v = 0;
        }
        __atomic_store_n(&us, v, __ATOMIC_RELAXED);
    }
    long half = us / 2;
    if (half > 0)
        nanosleep(&(struct timespec){half / 1000000, (long)(half % 1000000) * 1000}, NULL);
}

/* Processes holding memory on the device (a context counts). */
SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{
    DEVICE_ARG(device, d);
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_reap_dead();
    lag();
    unsigned n = 0;
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        int32_t pid = __atomic_load_n(&sim->procs[i].pid, __ATOMIC_ACQUIRE);
        uint64_t used = __atomic_load_n(&sim->procs[i].used_bytes[d], __ATOMIC_ACQUIRE);
        if (pid <= 0 || used == 0)
            continue;
        if (infos && n < *infoCount)
            infos[n] = (nvmlProcessInfo_t){.pid = (unsigned)pid, .usedGpuMemory = used,
                                           .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF};
        n++;
    }
    nvmlReturn_t r = n > *infoCount ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *infoCount = n;
    lag();
    return r;
}
