// Green contexts on the GPU, as tests/clients/greenctx.c uses them on the
// simulated one: the device's SMs, a split into groups and what a split
// refuses, a green context on one group with a stream of its own, a
// kernel of one block per SM timed there and on the whole device (as many
// waves longer as the SM counts say), memory and events in it, and what
// each stream says of its context. Its output over a remote GPU must be
// the same as natively (scripts/gpu-remote-cudart.sh).
//     nvcc -O2 -o greenctx greenctx.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_check.h"

// Spins for cycles; its shared memory keeps one block per SM.
__global__ void spin(long long cycles)
{
    extern __shared__ char pad[];
    long long t0 = clock64();
    while (clock64() - t0 < cycles)
        pad[threadIdx.x % 64] = 1;
}

// Device time of one kernel of blocks blocks on s, a first one ahead so
// that the timed one starts when it ends.
static float timed(CUstream s, int blocks, size_t shared)
{
    cudaEvent_t a, b;
    float ms = 0;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    spin<<<blocks, 128, shared, (cudaStream_t)s>>>(2000000);
    cudaEventRecord(a, (cudaStream_t)s);
    spin<<<blocks, 128, shared, (cudaStream_t)s>>>(2000000);
    cudaEventRecord(b, (cudaStream_t)s);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms;
}

int main(void)
{
    CUcontext primary;
    DRV(cuInit(0));
    DRV(cuDevicePrimaryCtxRetain(&primary, 0));
    DRV(cuCtxSetCurrent(primary));
    CUdevResource all, groups[4], rest, again[2], none;
    DRV(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned n = 0;
    DRV(cuDevSmResourceSplitByCount(NULL, &n, &all, NULL, 0, 8));
    printf("device: %u SMs (at least %u a group, %u run together), %u groups of 8 possible\n", all.sm.smCount,
           all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment, n);
    n = 2;
    DRV(cuDevSmResourceSplitByCount(groups, &n, &all, &rest, 0, 5));
    printf("split into 2 of at least 5: %u groups of %u, %u SMs left\n", n, groups[0].sm.smCount, rest.sm.smCount);
    unsigned m = 2;
    memset(&none, 0, sizeof none);
    printf("split refusals: no resource type %s, more than the device %s, a group split again %s\n",
           name(cuDevSmResourceSplitByCount(again, &m, &none, NULL, 0, 8)),
           name(cuDevSmResourceSplitByCount(again, &m, &all, NULL, 0, 100000)),
           name(cuDevSmResourceSplitByCount(again, &m, &groups[0], NULL, 0, 8)));
    CUdevResourceDesc desc, two;
    CUdevResource mixed[2] = {all, groups[0]};
    printf("descriptors: two groups of one split %s, a group with the device %s\n",
           name(cuDevResourceGenerateDesc(&two, groups, 2)), name(cuDevResourceGenerateDesc(&two, mixed, 2)));
    DRV(cuDevResourceGenerateDesc(&desc, groups, 1));

    CUgreenCtx g, sg = NULL;
    printf("green context without its default stream: %s\n", name(cuGreenCtxCreate(&g, desc, 0, 0)));
    DRV(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext gc, sc = NULL;
    DRV(cuCtxFromGreenCtx(&gc, g));
    CUdevResource gr, cr, pr;
    DRV(cuGreenCtxGetDevResource(g, &gr, CU_DEV_RESOURCE_TYPE_SM));
    DRV(cuCtxGetDevResource(gc, &cr, CU_DEV_RESOURCE_TYPE_SM));
    DRV(cuCtxGetDevResource(primary, &pr, CU_DEV_RESOURCE_TYPE_SM));
    printf("SMs: the green context %u, its context %u, the primary context %u\n", gr.sm.smCount, cr.sm.smCount,
           pr.sm.smCount);
    unsigned long long gid = 0, cid = 0;
    DRV(cuGreenCtxGetId(g, &gid));
    DRV(cuCtxGetId(gc, &cid));
    printf("ids: the green context's is its context's: %s\n", gid == cid ? "yes" : "no");

    CUstream gs, ps;
    printf("a blocking stream in it: %s\n", name(cuGreenCtxStreamCreate(&gs, g, 0, 0)));
    DRV(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
    DRV(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    DRV(cuCtxSetCurrent(gc));
    DRV(cuStreamGetGreenCtx(gs, &sg));
    DRV(cuStreamGetCtx_v2(gs, &sc, &sg));
    CUcontext v1 = NULL;
    DRV(cuStreamGetCtx(gs, &v1));
    printf("its stream: green context %s, context %s (v1 %s)\n", sg == g ? "its own" : "another",
           sc == NULL ? "none" : "one", v1 == gc ? "its context" : "another");
    DRV(cuStreamGetCtx_v2(ps, &sc, &sg));
    printf("the primary's stream: green context %s, context %s\n", sg ? "one" : "none", sc == primary ? "the primary" : "another");

    // One block per SM of the device: on the group's SMs, as many waves.
    int smem = 0;
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    size_t shared = (size_t)smem * 3 / 4;
    cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    float green = timed(gs, (int)all.sm.smCount, shared);
    DRV(cuCtxSetCurrent(primary));
    float whole = timed(ps, (int)all.sm.smCount, shared);
    double waves = ceil((double)all.sm.smCount / gr.sm.smCount), ratio = green / whole;
    printf("a kernel on %u of %u SMs takes as many times as long as its waves (%.0f): %s\n", gr.sm.smCount,
           all.sm.smCount, waves, fabs(ratio - waves) < 0.25 * waves ? "yes" : "no");

    DRV(cuCtxSetCurrent(gc));
    CUdeviceptr d;
    unsigned word = 0;
    DRV(cuMemAlloc(&d, 4096));
    DRV(cuMemsetD32Async(d, 42, 1024, gs));
    CUevent ev, never;
    DRV(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    DRV(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING));
    DRV(cuGreenCtxRecordEvent(g, ev));
    DRV(cuEventSynchronize(ev));
    DRV(cuMemcpyDtoH(&word, d + 4092, 4));
    printf("memory in it: %u; its event: %s; a wait for an event never recorded: %s\n", word, name(cuEventQuery(ev)),
           name(cuGreenCtxWaitEvent(g, never)));
    DRV(cuMemFree(d));
    DRV(cuStreamDestroy(gs));
    DRV(cuCtxSetCurrent(primary));
    DRV(cuStreamDestroy(ps));
    printf("green context destroyed: %s\n", name(cuGreenCtxDestroy(g)));
    printf("greenctx: done\n");
    return 0;
}
