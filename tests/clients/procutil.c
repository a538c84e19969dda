/* What NVML reports of device 0's use over the last second:
 *     util PCT
 *     proc PID SM_PCT   for each process whose kernels ran on it
 * NVML is loaded with dlopen, as monitoring tools do. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <dlfcn.h>
#include <nvml.h>
#include <stdio.h>

int main(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*rates)(nvmlDevice_t, nvmlUtilization_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(h, "nvmlDeviceGetUtilizationRates");
    nvmlReturn_t (*procs)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long))dlsym(
            h, "nvmlDeviceGetProcessUtilization");
    if (!init || !handle || !rates || !procs) {
        fprintf(stderr, "procutil: NVML lacks an entry point\n");
        return 1;
    }
    nvmlDevice_t d;
    nvmlUtilization_t u;
    nvmlProcessUtilizationSample_t samples[64];
    unsigned n = 0;
    if (init() != NVML_SUCCESS || handle(0, &d) != NVML_SUCCESS || rates(d, &u) != NVML_SUCCESS) {
        fprintf(stderr, "procutil: NVML failed\n");
        return 1;
    }
    nvmlReturn_t r = procs(d, NULL, &n, 0);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        n = sizeof samples / sizeof samples[0];
        r = procs(d, samples, &n, 0);
    }
    if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_FOUND) {
        fprintf(stderr, "procutil: nvmlDeviceGetProcessUtilization: %d\n", (int)r);
        return 1;
    }
    printf("util %u\n", u.gpu);
    for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
        printf("proc %u %u\n", samples[i].pid, samples[i].smUtil);
    return 0;
}
