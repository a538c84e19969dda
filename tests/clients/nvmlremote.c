/* What NVML says of every device, with the calls the remoting client's
 * NVML answers (linked against it), and what it says of those it does not.
 * With "ctx": a context of the program's own is current throughout, and
 * must still be after the NVML calls. */
#include <string.h>
#include <unistd.h>

#include "nvmlcheck.h"

#include "flexgv/cuda_api_gen.h"

int main(int argc, char **argv)
{
    CUcontext mine = NULL, cur = NULL;
    if (argc > 1 && !strcmp(argv[1], "ctx") && (cuInit(0) != CUDA_SUCCESS || cuCtxCreate_v2(&mine, 0, 0) != CUDA_SUCCESS)) {
        fprintf(stderr, "no context of its own\n");
        return 1;
    }
    char drv[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], ver[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    int cuda;
    unsigned n;
    printf("before init: %s\n", nvmlErrorString(nvmlDeviceGetCount_v2(&n)));
    NCHECK(nvmlInit_v2());
    NCHECK(nvmlInitWithFlags(0));
    NCHECK(nvmlSystemGetDriverVersion(drv, sizeof drv));
    NCHECK(nvmlSystemGetNVMLVersion(ver, sizeof ver));
    NCHECK(nvmlSystemGetCudaDriverVersion_v2(&cuda));
    NCHECK(nvmlDeviceGetCount_v2(&n));
    printf("driver %s nvml %s cuda %d\ndevices %u\n", drv, ver, cuda, n);
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d, byuuid, bypci;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        nvmlPciInfo_t pci;
        nvmlMemory_t m;
        nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
        nvmlProcessInfo_t procs[8];
        unsigned np = 8, idx, minor, iu, ip;
        int major, cminor;
        NCHECK(nvmlDeviceGetHandleByIndex_v2(i, &d));
        NCHECK(nvmlDeviceGetIndex(d, &idx));
        NCHECK(nvmlDeviceGetName(d, name, sizeof name));
        NCHECK(nvmlDeviceGetUUID(d, uuid, sizeof uuid));
        NCHECK(nvmlDeviceGetPciInfo_v3(d, &pci));
        NCHECK(nvmlDeviceGetCudaComputeCapability(d, &major, &cminor));
        NCHECK(nvmlDeviceGetMemoryInfo(d, &m));
        NCHECK(nvmlDeviceGetMemoryInfo_v2(d, &m2));
        NCHECK(nvmlDeviceGetComputeRunningProcesses_v3(d, &np, procs));
        NCHECK(nvmlDeviceGetHandleByUUID(uuid, &byuuid));
        NCHECK(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &bypci));
        NCHECK(nvmlDeviceGetIndex(byuuid, &iu));
        NCHECK(nvmlDeviceGetIndex(bypci, &ip));
        printf("device %u index=%u name=%s uuid=%s pci=%s cc=%d.%d total=%llu used=%llu free=%llu total_v2=%llu "
               "procs=%u%s byuuid=%u bypci=%u minor=%s\n",
               i, idx, name, uuid, pci.busId, major, cminor, m.total, m.used, m.free, m2.total, np,
               np == 1 && procs[0].pid == (unsigned)getpid() && procs[0].usedGpuMemory > 0 ? " (this program, holding memory)"
                                                                                          : "",
               iu, ip, nvmlErrorString(nvmlDeviceGetMinorNumber(d, &minor)));
    }
    nvmlDevice_t d0;
    nvmlUtilization_t u;
    unsigned mw;
    if (n && nvmlDeviceGetHandleByIndex_v2(0, &d0) == NVML_SUCCESS) {
        nvmlReturn_t ur = nvmlDeviceGetUtilizationRates(d0, &u);
        printf("utilization: %s gpu=%u memory=%u\n", nvmlErrorString(ur), ur ? 0 : u.gpu, ur ? 0 : u.memory);
        printf("utilization without a place for it: %s\n", nvmlErrorString(nvmlDeviceGetUtilizationRates(d0, NULL)));
        /* What monitors read (PyTorch's torch.cuda.temperature, power_draw
         * and clock_rate among them). */
        unsigned v = 0;
        nvmlTemperature_t tv = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
        nvmlReturn_t rr = nvmlDeviceGetTemperatureV(d0, &tv);
        printf("readings: temperature %s %d", nvmlErrorString(rr), rr ? 0 : tv.temperature);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* as pynvml still asks it */
        rr = nvmlDeviceGetTemperature(d0, NVML_TEMPERATURE_GPU, &v);
        printf(" (the old call %s %u)", nvmlErrorString(rr), rr ? 0 : v);
        rr = nvmlDeviceGetPowerUsage(d0, &mw);
        printf(", power %s %u", nvmlErrorString(rr), rr ? 0 : mw);
        rr = nvmlDeviceGetEnforcedPowerLimit(d0, &v);
        printf(", limit %s %u", nvmlErrorString(rr), rr ? 0 : v);
        for (int c = 0; c < NVML_CLOCK_COUNT; c++) {
            unsigned cur = 0, top = 0;
            nvmlReturn_t r1 = nvmlDeviceGetClockInfo(d0, (nvmlClockType_t)c, &cur), r2 = nvmlDeviceGetMaxClockInfo(d0, (nvmlClockType_t)c, &top);
            printf(", clock %d %s %u max %s %u", c, nvmlErrorString(r1), r1 ? 0 : cur, nvmlErrorString(r2), r2 ? 0 : top);
        }
        rr = nvmlDeviceGetFanSpeed(d0, &v);
        printf(", fan %s", nvmlErrorString(rr));
        nvmlPstates_t ps = NVML_PSTATE_UNKNOWN;
        rr = nvmlDeviceGetPerformanceState(d0, &ps);
        printf(", pstate %s %d\n", nvmlErrorString(rr), rr ? -1 : (int)ps);
        tv.version = 0;
        printf("readings refused: sensor %s, version %s, clock %s, no place %s %s\n",
               nvmlErrorString(nvmlDeviceGetTemperature(d0, NVML_TEMPERATURE_COUNT, &v)),
               nvmlErrorString(nvmlDeviceGetTemperatureV(d0, &tv)),
               nvmlErrorString(nvmlDeviceGetClockInfo(d0, NVML_CLOCK_COUNT, &v)),
               nvmlErrorString(nvmlDeviceGetPowerUsage(d0, NULL)), nvmlErrorString(nvmlDeviceGetPerformanceState(d0, NULL)));
#pragma GCC diagnostic pop
        printf("board id: %s\n", nvmlErrorString(nvmlDeviceGetBoardId(d0, &v)));
        /* Peer status by the server's NVML (NCCL asks it as it starts). */
        for (unsigned j = 0; j < n; j++) {
            nvmlDevice_t dj;
            nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
            NCHECK(nvmlDeviceGetHandleByIndex_v2(j, &dj));
            nvmlReturn_t pr = nvmlDeviceGetP2PStatus(d0, dj, NVML_P2P_CAPS_INDEX_READ, &st);
            printf("p2p read 0-%u: %s status %d\n", j, nvmlErrorString(pr), (int)st);
        }
        printf("p2p without a place for it: %s\n",
               nvmlErrorString(nvmlDeviceGetP2PStatus(d0, d0, NVML_P2P_CAPS_INDEX_READ, NULL)));
    }
    printf("unknown uuid: %s\n", nvmlErrorString(nvmlDeviceGetHandleByUUID("GPU-none", &d0)));
    /* Two inits, two shutdowns: NVML answers until the second. */
    NCHECK(nvmlShutdown());
    printf("after one shutdown: %s\n", nvmlErrorString(nvmlDeviceGetCount_v2(&n)));
    NCHECK(nvmlShutdown());
    printf("after two: %s\n", nvmlErrorString(nvmlDeviceGetCount_v2(&n)));
    printf("a third: %s\n", nvmlErrorString(nvmlShutdown()));
    if (mine) {
        cuCtxGetCurrent(&cur);
        printf("own context %s\n", cur == mine ? "still current" : "lost");
    }
    return 0;
}
