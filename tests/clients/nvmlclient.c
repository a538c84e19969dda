/* A small nvidia-smi: what NVML reports for every device. */
#include "nvmlcheck.h"

int main(void)
{
    unsigned n;
    NCHECK(nvmlInit_v2());
    NCHECK(nvmlDeviceGetCount_v2(&n));
    printf("devices %u\n", n);
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        char name[NVML_DEVICE_NAME_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
        nvmlMemory_t m;
        nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
        nvmlUtilization_t u;
        nvmlProcessInfo_t procs[64];
        unsigned np = 64;
        NCHECK(nvmlDeviceGetHandleByIndex_v2(i, &d));
        NCHECK(nvmlDeviceGetName(d, name, sizeof name));
        NCHECK(nvmlDeviceGetUUID(d, uuid, sizeof uuid));
        NCHECK(nvmlDeviceGetMemoryInfo(d, &m));
        NCHECK(nvmlDeviceGetMemoryInfo_v2(d, &m2));
        NCHECK(nvmlDeviceGetUtilizationRates(d, &u));
        NCHECK(nvmlDeviceGetComputeRunningProcesses_v3(d, &np, procs));
        printf("device %u name=%s uuid=%s total=%llu used=%llu free=%llu total_v2=%llu util=%u procs=", i, name, uuid,
               m.total, m.used, m.free, m2.total, u.gpu);
        for (unsigned p = 0; p < np; p++)
            printf("%s%u:%llu", p ? "," : "", procs[p].pid, procs[p].usedGpuMemory);
        printf("\n");
    }
    NCHECK(nvmlShutdown());
    return 0;
}
