/* Linked with -lcuda: every driver call binds directly to the exported
 * symbol (the macro-renamed _v2 names a program built with cuda.h uses). */
#include "common.h"

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 5;
    CUdevice dev;
    CUcontext ctx;
    int count_dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count_dev));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate_v2(&ctx, 0, dev));
    count("cuInit", 1);
    count("cuDeviceGetCount", 1);
    count("cuDeviceGet", 1);
    count("cuCtxCreate_v2", 1);

    size_t free_b, total;
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    count("cuMemGetInfo_v2", 1);

    CUmodule mod;
    CUfunction fill;
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    count("cuModuleLoadData", 1);
    count("cuModuleGetFunction", 1);

    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    count("cuStreamCreate", 1);
    for (int it = 0; it < iters; it++) {
        CUdeviceptr p, pitched, managed;
        size_t pitch;
        CHECK(cuMemAlloc_v2(&p, 1 << 20));
        CHECK(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 10, 4));
        CHECK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
        count("cuMemAlloc_v2", 1);
        count("cuMemAllocPitch_v2", 1);
        count("cuMemAllocManaged", 1);
        unsigned v = 0xabcd0000u + (unsigned)it;
        int n = 256;
        void *params[] = {&p, &v, &n};
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, params, NULL));
        count("cuLaunchKernel", 1);
        CHECK(cuMemsetD8Async(managed, 7, 4096, s));
        count("cuMemsetD8Async", 1);
        CHECK(cuStreamSynchronize(s));
        count("cuStreamSynchronize", 1);
        unsigned out[256];
        CHECK(cuMemcpyDtoH_v2(out, p, sizeof out));
        count("cuMemcpyDtoH_v2", 1);
        if (out[0] != v || out[255] != v) {
            fprintf(stderr, "direct: fill kernel wrote %x, want %x\n", out[0], v);
            return 1;
        }
        CHECK(cuMemcpyDtoD_v2(pitched, p, 1024));
        count("cuMemcpyDtoD_v2", 1);
        CHECK(cuMemFree_v2(p));
        CHECK(cuMemFree_v2(pitched));
        CHECK(cuMemFree_v2(managed));
        count("cuMemFree_v2", 3);
    }
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuCtxDestroy_v2(ctx));
    count("cuStreamDestroy_v2", 1);
    count("cuModuleUnload", 1);
    count("cuCtxDestroy_v2", 1);

    /* An error the driver reports must reach the caller unchanged. */
    CUdeviceptr bad;
    CUresult r = cuMemAlloc_v2(&bad, 16);
    count("cuMemAlloc_v2", 1);
    if (r != CUDA_ERROR_INVALID_CONTEXT) {
        fprintf(stderr, "direct: alloc without a context returned %d\n", (int)r);
        return 1;
    }
    print_expects();
    printf("direct: ok\n");
    return 0;
}
