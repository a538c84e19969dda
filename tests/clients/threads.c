/* Launches from many threads at once through one resolved pointer. */
#include "common.h"

#include <pthread.h>

static fg_pfn_cuLaunchKernel launch;
static fg_pfn_cuCtxSetCurrent setcur;
static CUcontext ctx;
static CUfunction fn;
static int per_thread;

static void *worker(void *arg)
{
    (void)arg;
    CHECK(setcur(ctx));
    for (int i = 0; i < per_thread; i++)
        CHECK(launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 16;
    per_thread = argc > 2 ? atoi(argv[2]) : 2000;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h)
        return 1;
    fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(h, "cuGetProcAddress_v2");
    fg_pfn_cuInit init;
    fg_pfn_cuDevicePrimaryCtxRetain retain;
    fg_pfn_cuModuleLoadData load;
    fg_pfn_cuModuleGetFunction getfn;
    fg_pfn_cuCtxSynchronize sync;
    CHECK(gpa("cuInit", (void **)&init, 2000, 0, NULL));
    CHECK(gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 7000, 0, NULL));
    CHECK(gpa("cuCtxSetCurrent", (void **)&setcur, 4000, 0, NULL));
    CHECK(gpa("cuModuleLoadData", (void **)&load, 2000, 0, NULL));
    CHECK(gpa("cuModuleGetFunction", (void **)&getfn, 2000, 0, NULL));
    CHECK(gpa("cuLaunchKernel", (void **)&launch, 4000, 0, NULL));
    CHECK(gpa("cuCtxSynchronize", (void **)&sync, 2000, 0, NULL));
    CHECK(init(0));
    CHECK(retain(&ctx, 0));
    CHECK(setcur(ctx));
    CUmodule mod;
    CHECK(load(&mod, SIM_MODULE));
    CHECK(getfn(&fn, mod, "empty"));
    pthread_t t[256];
    for (int i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    CHECK(sync());
    count("cuLaunchKernel", (long)nthreads * per_thread);
    count("cuCtxSetCurrent", nthreads + 1);
    print_expects();
    printf("threads: ok\n");
    return 0;
}
