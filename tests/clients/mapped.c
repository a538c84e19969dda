/* Pinned host memory used as device memory, as XLA's autotuner uses it: a
 * memset and a kernel write it through its address, a copy reads it back,
 * the program reads it after a synchronization and writes it for a later
 * copy to read. A larger allocation only carries copies. Prints what the
 * program sees, so local and remote runs compare. */
#include "common.h"

#include <stdint.h>

static void show(const char *what, const unsigned *p, int n)
{
    printf("%s:", what);
    for (int i = 0; i < n; i++)
        printf(" %u", p[i]);
    printf("\n");
}

int main(void)
{
    CUmodule mod;
    CUfunction fill;
    CUstream st;
    primary_context();
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));

    enum { N = 16 };
    unsigned *h, *other, back[N];
    CHECK(cuMemHostAlloc((void **)&h, N * sizeof *h, CU_MEMHOSTALLOC_PORTABLE));
    CHECK(cuMemHostAlloc((void **)&other, 8, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr dh = (CUdeviceptr)(uintptr_t)h, dother = (CUdeviceptr)(uintptr_t)other;
    CHECK(cuMemsetD32Async(dh, 7, N, st));
    CUdeviceptr p = dh;
    unsigned v = 42;
    int n = 4;
    void *params[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, st, params, NULL));
    CHECK(cuMemsetD32Async(dother, 9, 2, st));
    CHECK(cuMemcpyDtoHAsync_v2(back, dh, sizeof back, st));
    CHECK(cuStreamSynchronize(st));
    show("copied back", back, N);
    show("read by the program", h, N);
    show("the other allocation", other, 2);

    /* One only a kernel names, by its parameter. */
    unsigned *by_kernel;
    CHECK(cuMemHostAlloc((void **)&by_kernel, 4 * sizeof *by_kernel, CU_MEMHOSTALLOC_DEVICEMAP));
    p = (CUdeviceptr)(uintptr_t)by_kernel, v = 9;
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, st, params, NULL));
    CHECK(cuStreamSynchronize(st));
    show("written by a kernel alone", by_kernel, 4);
    CHECK(cuMemFreeHost(by_kernel));

    /* The program's writes, then device work reading them. */
    h[8] = 5;
    h[15] = 6;
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, sizeof back));
    CHECK(cuMemcpyDtoDAsync_v2(dev, dh, sizeof back, st));
    CHECK(cuMemcpyDtoHAsync_v2(back, dev, sizeof back, st));
    CHECK(cuStreamSynchronize(st));
    show("after the program wrote", back, N);
    CHECK(cuMemFreeHost(h));
    CHECK(cuMemFreeHost(other));

    /* Past the size mapped on both sides: copies still carry it. */
    size_t big = 1 << 20;
    unsigned char *b;
    CHECK(cuMemHostAlloc((void **)&b, big, 0));
    memset(b, 3, big);
    CHECK(cuMemcpyHtoD_v2(dev, b, sizeof back));
    CHECK(cuMemcpyDtoH_v2(back, dev, sizeof back));
    show("through a large one", back, 2);
    CHECK(cuMemFreeHost(b));
    CHECK(cuMemFree_v2(dev));
    CHECK(cuStreamDestroy_v2(st));
    printf("mapped: ok\n");
    return 0;
}
