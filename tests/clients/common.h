/* Shared helpers of the test clients: they print "expect NAME COUNT" for
 * every driver entry point they call, so a test can compare what the
 * program did with what flexgv trace reports. */
#ifndef FLEXGV_TEST_COMMON_H
#define FLEXGV_TEST_COMMON_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexgv/cuda_api_gen.h"

#define CHECK(call)                                                                 \
    do {                                                                            \
        CUresult r_ = (call);                                                       \
        if (r_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)r_); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

/* The name of a result, as the program would print it. */
__attribute__((unused)) static const char *result_name(CUresult r)
{
    switch (r) {
#define X(name, value) \
    case value:        \
        return #name;
#include "flexgv/cuda_results.def"
#undef X
    }
    return "CUresult(?)";
}

/* Simulated module with a builtin vector add, a fill, an empty kernel and
 * one of the configured duration (kernel_us). */
static const char SIM_MODULE[] = "FLEXGV-SIM-MODULE\n"
                                 "kernel vecadd 20 builtin=vecadd\n"
                                 "kernel fill 5 builtin=fill\n"
                                 "kernel empty 0\n"
                                 "kernel busy\n";

/* Initializes the driver and makes device 0's primary context current, as
 * a program linked with -lcuda does. */
__attribute__((unused)) static CUcontext primary_context(void)
{
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    return ctx;
}

struct expect {
    const char *name;
    long n;
};

static struct expect expects[256];
static int nexpects;

__attribute__((unused)) static void count(const char *name, long n)
{
    for (int i = 0; i < nexpects; i++)
        if (!strcmp(expects[i].name, name)) {
            expects[i].n += n;
            return;
        }
    expects[nexpects].name = name;
    expects[nexpects++].n = n;
}

__attribute__((unused)) static void print_expects(void)
{
    for (int i = 0; i < nexpects; i++)
        printf("expect %s %ld\n", expects[i].name, expects[i].n);
    fflush(stdout);
}

/* What the launch-loop clients need, resolved the way the CUDA runtime
 * resolves it: dlopen, dlsym cuGetProcAddress_v2, then everything through
 * it. A context is current and `fn` is the module's kernel `kernel`. */
struct launch_env {
    fg_pfn_cuLaunchKernel launch;
    fg_pfn_cuCtxSetCurrent setcur;
    fg_pfn_cuCtxSynchronize sync;
    CUcontext ctx;
    CUfunction fn;
};

__attribute__((unused)) static struct launch_env open_launch_env(const char *kernel)
{
    struct launch_env e;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    fg_pfn_cuInit init;
    fg_pfn_cuDevicePrimaryCtxRetain retain;
    fg_pfn_cuModuleLoadData load;
    fg_pfn_cuModuleGetFunction getfn;
    CHECK(gpa("cuInit", (void **)&init, 2000, 0, NULL));
    CHECK(gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 7000, 0, NULL));
    CHECK(gpa("cuCtxSetCurrent", (void **)&e.setcur, 4000, 0, NULL));
    CHECK(gpa("cuModuleLoadData", (void **)&load, 2000, 0, NULL));
    CHECK(gpa("cuModuleGetFunction", (void **)&getfn, 2000, 0, NULL));
    CHECK(gpa("cuLaunchKernel", (void **)&e.launch, 4000, 0, NULL));
    CHECK(gpa("cuCtxSynchronize", (void **)&e.sync, 2000, 0, NULL));
    CUmodule mod;
    CHECK(init(0));
    CHECK(retain(&e.ctx, 0));
    CHECK(e.setcur(e.ctx));
    CHECK(load(&mod, SIM_MODULE));
    CHECK(getfn(&e.fn, mod, kernel));
    return e;
}

#endif
