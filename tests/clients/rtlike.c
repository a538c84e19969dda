/* Reaches the driver like the CUDA 12/13 runtime: dlopen libcuda.so.1, dlsym
 * cuGetProcAddress_v2 alone, then resolve every entry point through it with
 * the cudaVersion and flags the runtime uses. Exercises legacy and
 * per-thread-default-stream variants and a resolver obtained from the
 * resolver itself. */
#include "common.h"

#include <stdint.h>

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static gpa_t gpa;

static void *resolve(const char *sym, int version, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    CUresult r = gpa(sym, &p, version, flags, &st);
    count("cuGetProcAddress_v2", 1);
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !p) {
        fprintf(stderr, "cannot resolve %s@%d: %d/%d\n", sym, version, (int)r, (int)st);
        exit(1);
    }
    return p;
}

#define LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM
#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* What the runtime reports as cudaErrorInsufficientDriver. */
        fprintf(stderr, "rtlike: no CUDA driver: %s\n", dlerror());
        return 35;
    }
    gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        fprintf(stderr, "rtlike: driver has no cuGetProcAddress_v2\n");
        return 1;
    }
    /* The resolver asked for itself must keep later lookups hooked too. */
    gpa = (gpa_t)resolve("cuGetProcAddress", 12000, LEGACY);

    fg_pfn_cuInit init = resolve("cuInit", 2000, LEGACY);
    fg_pfn_cuDeviceGet devget = resolve("cuDeviceGet", 2000, LEGACY);
    fg_pfn_cuDevicePrimaryCtxRetain retain = resolve("cuDevicePrimaryCtxRetain", 7000, LEGACY);
    fg_pfn_cuCtxSetCurrent setcur = resolve("cuCtxSetCurrent", 4000, LEGACY);
    fg_pfn_cuMemAlloc_v2 alloc = resolve("cuMemAlloc", 3020, LEGACY);
    fg_pfn_cuMemFree_v2 mfree = resolve("cuMemFree", 3020, LEGACY);
    fg_pfn_cuMemcpyHtoD_v2_ptds htod = resolve("cuMemcpyHtoD", 7000, PTDS);
    fg_pfn_cuMemcpyDtoH_v2 dtoh = resolve("cuMemcpyDtoH", 3020, LEGACY);
    fg_pfn_cuModuleLoadData load = resolve("cuModuleLoadData", 2000, LEGACY);
    fg_pfn_cuModuleGetFunction getfn = resolve("cuModuleGetFunction", 2000, LEGACY);
    fg_pfn_cuLaunchKernel launch = resolve("cuLaunchKernel", 4000, LEGACY);
    fg_pfn_cuLaunchKernel_ptsz launch_pt = resolve("cuLaunchKernel", 7000, PTDS);
    fg_pfn_cuLaunchKernelEx launch_ex = resolve("cuLaunchKernelEx", 11060, LEGACY);
    fg_pfn_cuStreamSynchronize_ptsz sync_pt = resolve("cuStreamSynchronize", 7000, PTDS);
    fg_pfn_cuCtxSynchronize ctxsync = resolve("cuCtxSynchronize", 2000, LEGACY);
    fg_pfn_cuEventCreate evcreate = resolve("cuEventCreate", 2000, LEGACY);
    fg_pfn_cuEventRecord_ptsz evrecord = resolve("cuEventRecord", 7000, PTDS);
    fg_pfn_cuEventSynchronize evsync = resolve("cuEventSynchronize", 2000, LEGACY);
    fg_pfn_cuEventElapsedTime_v2 elapsed = resolve("cuEventElapsedTime", 12080, LEGACY);
    fg_pfn_cuMemAllocAsync_ptsz alloc_async = resolve("cuMemAllocAsync", 11020, PTDS);
    fg_pfn_cuMemFreeAsync_ptsz free_async = resolve("cuMemFreeAsync", 11020, PTDS);
    /* Not hooked: must come back as the driver's own function. */
    CUresult (*busid)(char *, int, CUdevice) = resolve("cuDeviceGetPCIBusId", 4010, LEGACY);

    CUcontext ctx;
    CUdevice dev;
    CHECK(init(0));
    count("cuInit", 1);
    CHECK(devget(&dev, 0));
    count("cuDeviceGet", 1);
    CHECK(retain(&ctx, dev));
    count("cuDevicePrimaryCtxRetain", 1);
    CHECK(setcur(ctx));
    count("cuCtxSetCurrent", 1);

    char bus[32];
    CHECK(busid(bus, sizeof bus, dev));
    Dl_info info;
    if (!dladdr((void *)busid, &info) || !strstr(info.dli_fname, "libcuda")) {
        fprintf(stderr, "rtlike: unhooked cuDeviceGetPCIBusId does not point into the driver\n");
        return 1;
    }

    CUmodule mod;
    CUfunction vecadd, empty;
    CHECK(load(&mod, SIM_MODULE));
    count("cuModuleLoadData", 1);
    CHECK(getfn(&vecadd, mod, "vecadd"));
    CHECK(getfn(&empty, mod, "empty"));
    count("cuModuleGetFunction", 2);

    enum { N = 1024 };
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 2.0f * (float)i;
    }
    CUevent e0, e1;
    CHECK(evcreate(&e0, 0));
    CHECK(evcreate(&e1, 0));
    count("cuEventCreate", 2);
    for (int it = 0; it < iters; it++) {
        CUdeviceptr da, db, dc;
        CHECK(alloc(&da, sizeof a));
        CHECK(alloc(&db, sizeof b));
        CHECK(alloc(&dc, sizeof c));
        count("cuMemAlloc_v2", 3);
        CHECK(htod(da, a, sizeof a));
        CHECK(htod(db, b, sizeof b));
        count("cuMemcpyHtoD_v2_ptds", 2);
        int n = N;
        void *params[] = {&da, &db, &dc, &n};
        CHECK(evrecord(e0, NULL));
        CHECK(launch(vecadd, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
        CHECK(launch_pt(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        CUlaunchConfig cfg = {1, 1, 1, 64, 1, 1, 0, NULL, NULL, 0};
        CHECK(launch_ex(&cfg, empty, NULL, NULL));
        CHECK(evrecord(e1, NULL));
        count("cuEventRecord_ptsz", 2);
        count("cuLaunchKernel", 1);
        count("cuLaunchKernel_ptsz", 1);
        count("cuLaunchKernelEx", 1);
        CUdeviceptr tmp;
        CHECK(alloc_async(&tmp, 4096, NULL));
        CHECK(free_async(tmp, NULL));
        count("cuMemAllocAsync_ptsz", 1);
        count("cuMemFreeAsync_ptsz", 1);
        CHECK(sync_pt(NULL));
        count("cuStreamSynchronize_ptsz", 1);
        CHECK(evsync(e1));
        count("cuEventSynchronize", 1);
        float ms;
        CHECK(elapsed(&ms, e0, e1));
        count("cuEventElapsedTime_v2", 1);
        CHECK(dtoh(c, dc, sizeof c));
        count("cuMemcpyDtoH_v2", 1);
        for (int i = 0; i < N; i++)
            if (c[i] != 3.0f * (float)i) {
                fprintf(stderr, "rtlike: wrong result at %d: %g\n", i, c[i]);
                return 1;
            }
        CHECK(mfree(da));
        CHECK(mfree(db));
        CHECK(mfree(dc));
        count("cuMemFree_v2", 3);
    }
    CHECK(ctxsync());
    count("cuCtxSynchronize", 1);
    print_expects();
    printf("rtlike: ok (%d iterations)\n", iters);
    return 0;
}
