/* A remote program on a real GPU, through whatever libcuda.so.1 it loads:
 * the handshake's cached device facts, memory, copies, a queued memset, a
 * kernel JIT-compiled from PTX and launched with parameters laid out by
 * cuFuncGetParamInfo, events, and an error surfacing at synchronization.
 * Prints what it got; exit status 0 when every check passed. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flexgv/cuda_api_gen.h"

static int failures;
#define CHECK(call)                                                                          \
    do {                                                                                     \
        CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                            \
            printf("FAIL %s: %d\n", #call, (int)r_);                                        \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry fill(.param .u64 p, .param .u32 v, .param .u32 n)\n{\n"
                          "  .reg .b32 %r<6>;\n  .reg .b64 %rd<4>;\n  .reg .pred %pp;\n"
                          "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [v];\n  ld.param.u32 %r2, [n];\n"
                          "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
                          "  mad.lo.s32 %r3, %r3, %r4, %r5;\n  setp.ge.s32 %pp, %r3, %r2;\n  @%pp bra DONE;\n"
                          "  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.s32 %rd3, %r3, 4;\n"
                          "  add.s64 %rd2, %rd2, %rd3;\n  st.global.u32 [%rd2], %r1;\nDONE:\n  ret;\n}\n";

int main(void)
{
    int n, version, major;
    char name[256];
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGetCount(&n));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    printf("driver %d, %d devices, device 0 %s, compute capability %d\n", version, n, name, major);
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    enum { N = 1 << 20 };
    size_t bytes = N * sizeof(unsigned), freeb, total;
    CUdeviceptr d;
    CUstream s;
    unsigned *h = malloc(bytes);
    CHECK(cuMemAlloc_v2(&d, bytes));
    CHECK(cuMemGetInfo_v2(&freeb, &total));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD32Async(d, 0x11223344u, N, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH_v2(h, d, bytes));
    printf("memset: %s\n", h[0] == 0x11223344u && h[N - 1] == 0x11223344u ? "ok" : "WRONG");

    CUmodule mod;
    CUfunction fill;
    CHECK(cuModuleLoadData(&mod, PTX));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    unsigned v = 0xabcdef01u;
    int count = N;
    void *params[] = {&d, &v, &count};
    CUevent e0, e1;
    CHECK(cuEventCreate(&e0, 0));
    CHECK(cuEventCreate(&e1, 0));
    CHECK(cuEventRecord(e0, s));
    CHECK(cuLaunchKernel(fill, N / 256, 1, 1, 256, 1, 1, 0, s, params, NULL));
    CHECK(cuEventRecord(e1, s));
    CHECK(cuEventSynchronize(e1));
    float ms = -1;
    CHECK(cuEventElapsedTime(&ms, e0, e1));
    memset(h, 0, bytes);
    CHECK(cuMemcpyDtoHAsync_v2(h, d, bytes, s));
    printf("kernel: %s (%.3f ms)\n", h[0] == v && h[N - 1] == v ? "ok" : "WRONG", ms);
    for (int i = 0; i < N; i++)
        h[i] = (unsigned)i;
    CHECK(cuMemcpyHtoD_v2(d, h, bytes));
    memset(h, 0, bytes);
    CHECK(cuMemcpyDtoH_v2(h, d, bytes));
    printf("copies: %s\n", h[12345] == 12345u && h[N - 1] == N - 1 ? "ok" : "WRONG");

    /* A queued launch of an invalid configuration: the error comes back at
     * the next synchronization remotely, at the launch itself locally. */
    CUresult launch = cuLaunchKernel(fill, 1, 1, 1, 4096, 1, 1, 0, s, params, NULL);
    CUresult sync = cuStreamSynchronize(s);
    const char *str = NULL;
    cuGetErrorName(launch != CUDA_SUCCESS ? launch : sync, &str);
    printf("bad launch: launch %d, sync %d (%s)\n", (int)launch, (int)sync, str ? str : "?");
    if ((launch == CUDA_SUCCESS) == (sync == CUDA_SUCCESS))
        failures++;

    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree_v2(d));
    CHECK(cuStreamDestroy_v2(s));
    printf("%s\n", failures ? "remote smoke: FAILED" : "remote smoke: ok");
    return failures != 0;
}
