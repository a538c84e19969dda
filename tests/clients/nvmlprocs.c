/* What NVML says of the processes on device 0 (or the index given), as
 * nvidia-smi asks it:
 * how many hold memory there (asked with no room first), their pids with
 * the MiB each holds, and the pids with a utilization sample ("none" when
 * NVML has none). */
#include "nvmlcheck.h"

#include <stdlib.h>

static int by_value(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

static void print_pids(const char *what, unsigned *pids, unsigned n)
{
    qsort(pids, n, sizeof *pids, by_value);
    printf("%s:", what);
    for (unsigned i = 0; i < n; i++)
        if (i == 0 || pids[i] != pids[i - 1])
            printf(" %u", pids[i]);
    printf("%s\n", n ? "" : " none");
}

int main(int argc, char **argv)
{
    nvmlDevice_t d;
    NCHECK(nvmlInit_v2());
    NCHECK(nvmlDeviceGetHandleByIndex_v2(argc > 1 ? (unsigned)atoi(argv[1]) : 0, &d));
    unsigned n = 0;
    nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL);
    printf("asked with no room: %s, %u\n", nvmlErrorString(r), n);
    nvmlProcessInfo_t procs[64];
    n = 64;
    NCHECK(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs));
    printf("processes:");
    for (unsigned i = 0; i < n; i++)
        printf(" %u:%lluMiB", procs[i].pid, procs[i].usedGpuMemory >> 20);
    printf("%s\n", n ? "" : " none");
    /* Samples: as many as NVML says it has (several per process). */
    n = 0;
    r = nvmlDeviceGetProcessUtilization(d, NULL, &n, 0);
    nvmlProcessUtilizationSample_t *s = calloc(n + 16, sizeof *s);
    unsigned *busy = calloc(n + 16, sizeof *busy);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE && s && busy) {
        n += 16;
        r = nvmlDeviceGetProcessUtilization(d, s, &n, 0);
    }
    if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_FOUND) {
        fprintf(stderr, "nvmlDeviceGetProcessUtilization: %s\n", nvmlErrorString(r));
        return 1;
    }
    for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
        busy[i] = s[i].pid;
    print_pids("busy", busy, r == NVML_SUCCESS ? n : 0);
    NCHECK(nvmlShutdown());
    return 0;
}
