/* Holds device memory and keeps the GPU busy until stdin closes:
 *     holder MIB KERNELS KERNEL_US
 * Prints "ready" once its memory is allocated and its kernels queued. */
#include "common.h"

#include <unistd.h>

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    int kernels = argc > 2 ? atoi(argv[2]) : 0;
    char module[128];
    snprintf(module, sizeof module, "FLEXGV-SIM-MODULE\nkernel busy %s\n", argc > 3 ? argv[3] : "1000");
    CUcontext ctx;
    CUdeviceptr p;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUresult r = cuMemAlloc_v2(&p, mib << 20);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        printf("alloc failed: %s\n", name);
        return 2;
    }
    CUmodule mod;
    CUfunction f;
    CHECK(cuModuleLoadData(&mod, module));
    CHECK(cuModuleGetFunction(&f, mod, "busy"));
    for (int i = 0; i < kernels; i++)
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    return 0;
}
