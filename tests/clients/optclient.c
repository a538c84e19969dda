/* Module and library options, and launch attributes, as a program passes
 * them: prints each call's result (and the info log it got back), so that
 * a test can compare a remote run with a local one. */
#include "common.h"

#include <stdint.h>

static void load_ex(const char *what, unsigned n, CUjit_option *o, void **v)
{
    CUmodule m;
    CUresult r = cuModuleLoadDataEx(&m, SIM_MODULE, n, o, v);
    printf("%s: %s\n", what, result_name(r));
    if (r == CUDA_SUCCESS)
        CHECK(cuModuleUnload(m));
}

int main(void)
{
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    /* CUjit_option numbers: 0 max registers, 3/4 info log and its size,
     * 7 optimization level, 2 wall time (written back). */
    CUjit_option level[] = {(CUjit_option)0, (CUjit_option)7};
    void *good[] = {(void *)32, (void *)3}, *bad[] = {(void *)32, (void *)9};
    load_ex("level 3", 2, level, good);
    load_ex("level 9", 2, level, bad);
    char log[64];
    memset(log, 'x', sizeof log);
    CUjit_option logged[] = {(CUjit_option)3, (CUjit_option)4, (CUjit_option)2};
    void *lv[] = {log, (void *)(uintptr_t)sizeof log, NULL};
    load_ex("with a log", 3, logged, lv);
    printf("log: \"%.*s\", %u bytes\n", (int)strnlen(log, sizeof log), log, (unsigned)(uintptr_t)lv[1]);
    char small[8];
    void *sv[] = {small, (void *)(uintptr_t)sizeof small, NULL};
    load_ex("with a small log", 3, logged, sv);
    printf("small log: \"%.*s\", %u bytes\n", (int)strnlen(small, sizeof small), small, (unsigned)(uintptr_t)sv[1]);
    CUjit_option unknown[] = {(CUjit_option)999};
    void *uv[] = {NULL};
    load_ex("option 999", 1, unknown, uv);
    CUlibrary lib;
    CUlibraryOption lo[] = {(CUlibraryOption)1}; /* binary is preserved */
    void *lov[] = {(void *)1};
    CUresult r = cuLibraryLoadData(&lib, SIM_MODULE, level, good, 2, lo, lov, 1);
    printf("library: %s\n", result_name(r));
    if (r == CUDA_SUCCESS)
        CHECK(cuLibraryUnload(lib));
    /* Launch attributes: a cluster (4) that divides the grid, one that
     * does not, and a completion event (12), then the cluster queries. */
    CUmodule m;
    CUfunction f;
    CHECK(cuModuleLoadData(&m, SIM_MODULE));
    CHECK(cuModuleGetFunction(&f, m, "empty"));
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = 2, attr.value.clusterDim.y = 1, attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {4, 1, 1, 1, 1, 1, 0, NULL, &attr, 1};
    printf("cluster 2 of 4 blocks: %s\n", result_name(cuLaunchKernelEx(&cfg, f, NULL, NULL)));
    int n = -1;
    printf("active clusters: %s", result_name(cuOccupancyMaxActiveClusters(&n, f, &cfg)));
    printf(" %d\n", n);
    printf("potential cluster size: %s", result_name(cuOccupancyMaxPotentialClusterSize(&n, f, &cfg)));
    printf(" %d\n", n);
    /* Refused at the launch or, queued remotely, at the next synchronization. */
    cfg.gridDimX = 3;
    CUresult launched = cuLaunchKernelEx(&cfg, f, NULL, NULL), synced = cuCtxSynchronize();
    printf("cluster 2 of 3 blocks: %s\n", launched != CUDA_SUCCESS ? result_name(launched) : result_name(synced));
    /* A completion event, named by the attribute: recorded behind the
     * launch (one the connection was never given: remote/fuzz). */
    CUevent done;
    CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    cfg.gridDimX = 4;
    attr.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    attr.value.launchCompletionEvent.event = done;
    attr.value.launchCompletionEvent.flags = 0;
    launched = cuLaunchKernelEx(&cfg, f, NULL, NULL);
    synced = cuCtxSynchronize();
    printf("completion event: %s %s, then %s\n", result_name(launched), result_name(synced), result_name(cuEventQuery(done)));

    /* Pointer attributes: inside an allocation, and of host memory. */
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 4096));
    unsigned type = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUresult r1 = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100);
    CUresult r2 = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100);
    CUresult r3 = cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100);
    printf("device memory: %s %s %s, type %u, starts %s, %zu bytes\n", result_name(r1), result_name(r2),
           result_name(r3), type, start == d ? "at the allocation" : "elsewhere", size);
    printf("host memory: %s\n",
           result_name(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)log)));
    CUpointer_attribute both[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    type = 7, size = 7;
    void *out[] = {&type, &size};
    r1 = cuPointerGetAttributes(2, both, out, (CUdeviceptr)(uintptr_t)log);
    printf("host memory, both: %s, type %u, %zu bytes\n", result_name(r1), type, size);
    CHECK(cuMemFree_v2(d));
    /* A library's kernel launched where a function is asked for, as CUDA
     * 12+ runtimes do: its parameters are laid out by the kernel's own
     * info, which cuFuncGetParamInfo does not give. */
    CUkernel k;
    CHECK(cuLibraryLoadData(&lib, SIM_MODULE, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&k, lib, "vecadd"));
    size_t off, sz;
    printf("kernel's layout asked of it as a function: %s\n", result_name(cuFuncGetParamInfo((CUfunction)k, 0, &off, &sz)));
    float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, c[4] = {0};
    CUdeviceptr da, db, dc;
    CHECK(cuMemAlloc_v2(&da, sizeof a));
    CHECK(cuMemAlloc_v2(&db, sizeof b));
    CHECK(cuMemAlloc_v2(&dc, sizeof c));
    CHECK(cuMemcpyHtoD_v2(da, a, sizeof a));
    CHECK(cuMemcpyHtoD_v2(db, b, sizeof b));
    int count = 4;
    void *args[] = {&da, &db, &dc, &count};
    CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 4, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH_v2(c, dc, sizeof c));
    printf("library kernel: %g %g %g %g\n", c[0], c[1], c[2], c[3]);
    /* Cache preferences, as libraries set them on their kernels. */
    CUfunc_cache pref = CU_FUNC_CACHE_PREFER_NONE;
    printf("cache: kernel %s, function %s, a preference of 7 %s", result_name(cuKernelSetCacheConfig(k, CU_FUNC_CACHE_PREFER_SHARED, 0)),
           result_name(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_L1)),
           result_name(cuFuncSetCacheConfig(f, (CUfunc_cache)7)));
    CUresult set = cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_EQUAL), got = cuCtxGetCacheConfig(&pref);
    printf(", context %s %s %d\n", result_name(set), result_name(got), (int)pref);
    CHECK(cuLibraryUnload(lib));
    return 0;
}
