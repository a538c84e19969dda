/* Benchmark client: N launches of an empty kernel and one synchronize,
 * through a pointer resolved the way the CUDA runtime resolves it. Used by
 * bench/ under callgrind to count the instructions the shim adds. */
#include "common.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    fg_pfn_cuInit init;
    fg_pfn_cuDevicePrimaryCtxRetain retain;
    fg_pfn_cuCtxSetCurrent setcur;
    fg_pfn_cuModuleLoadData load;
    fg_pfn_cuModuleGetFunction getfn;
    fg_pfn_cuLaunchKernel launch;
    fg_pfn_cuCtxSynchronize sync;
    CHECK(gpa("cuInit", (void **)&init, 2000, 0, NULL));
    CHECK(gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 7000, 0, NULL));
    CHECK(gpa("cuCtxSetCurrent", (void **)&setcur, 4000, 0, NULL));
    CHECK(gpa("cuModuleLoadData", (void **)&load, 2000, 0, NULL));
    CHECK(gpa("cuModuleGetFunction", (void **)&getfn, 2000, 0, NULL));
    CHECK(gpa("cuLaunchKernel", (void **)&launch, 4000, 0, NULL));
    CHECK(gpa("cuCtxSynchronize", (void **)&sync, 2000, 0, NULL));
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CHECK(init(0));
    CHECK(retain(&ctx, 0));
    CHECK(setcur(ctx));
    CHECK(load(&mod, SIM_MODULE));
    CHECK(getfn(&f, mod, "empty"));
    for (long i = 0; i < n; i++)
        CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CHECK(sync());
    return 0;
}
