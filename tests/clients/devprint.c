/* A program whose kernels print (device printf): its own lines and the
 * device's come out in the order a driver gives them, the device's at the
 * synchronization that collects them, through the same stdio.
 *     devprint */
#include "common.h"

static const char MODULE[] = "FLEXGV-SIM-MODULE\nkernel say 10 builtin=printf\n";

int main(void)
{
    CUcontext ctx;
    CUmodule mod;
    CUfunction say;
    CUstream s;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, MODULE));
    CHECK(cuModuleGetFunction(&say, mod, "say"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    printf("before\n");
    unsigned v = 7;
    void *args[] = {&v};
    CHECK(cuLaunchKernel(say, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    printf("launched\n");
    CHECK(cuCtxSynchronize());
    printf("after a context synchronization\n");
    for (v = 8; v < 10; v++)
        CHECK(cuLaunchKernel(say, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    printf("after a stream synchronization\n");
    return 0;
}
