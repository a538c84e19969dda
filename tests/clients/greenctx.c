/* Green contexts as a program that partitions a GPU's SMs uses them: the
 * device's SMs, a split into groups (and what a split refuses), a green
 * context on one group with a stream of its own, the same kernel timed
 * there and on the whole device, memory and events in it, and what each
 * stream says of its context. Every line is the same natively, under the
 * shim and over every transport.
 *     greenctx [quota]
 * quota: green contexts made until one is refused (at most 16), and
 * another once they are gone: each is a context, which takes memory. */
#include "common.h"

/* Device time of one spin kernel on s: a first one ahead, so that the
 * timed one starts when it ends (the host's delays between the calls are
 * not timed). */
static float timed(CUfunction spin, CUstream s)
{
    CUevent a, b;
    float ms = 0;
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    CHECK(cuEventRecord(a, s));
    CHECK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
    CHECK(cuEventRecord(b, s));
    CHECK(cuEventSynchronize(b));
    CHECK(cuEventElapsedTime(&ms, a, b));
    CHECK(cuEventDestroy_v2(a));
    CHECK(cuEventDestroy_v2(b));
    return ms;
}

static int quota(void)
{
    CUdevResource all, group;
    CUdevResourceDesc desc;
    CUgreenCtx made[16];
    unsigned n = 1;
    CHECK(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(cuDevSmResourceSplitByCount(&group, &n, &all, NULL, 0, 8));
    CHECK(cuDevResourceGenerateDesc(&desc, &group, 1));
    int k = 0;
    CUresult r = CUDA_SUCCESS;
    while (k < 16 && (r = cuGreenCtxCreate(&made[k], desc, 0, CU_GREEN_CTX_DEFAULT_STREAM)) == CUDA_SUCCESS)
        k++;
    printf("green contexts: %d made, then %s\n", k, k < 16 ? result_name(r) : "no more tried");
    while (k > 0)
        CHECK(cuGreenCtxDestroy(made[--k]));
    r = cuGreenCtxCreate(&made[0], desc, 0, CU_GREEN_CTX_DEFAULT_STREAM);
    printf("once they are gone, another: %s\n", result_name(r));
    return r != CUDA_SUCCESS;
}

int main(int argc, char **argv)
{
    CUcontext primary = primary_context();
    if (argc > 1 && !strcmp(argv[1], "quota"))
        return quota();
    CUdevResource all, groups[4], rest, again[2], none;
    CHECK(cuDeviceGetDevResource(0, &all, CU_DEV_RESOURCE_TYPE_SM));
    unsigned n = 0;
    CHECK(cuDevSmResourceSplitByCount(NULL, &n, &all, NULL, 0, 8));
    printf("device: %u SMs (at least %u a group, %u run together), %u groups of 8 possible\n", all.sm.smCount,
           all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment, n);
    n = 2;
    CHECK(cuDevSmResourceSplitByCount(groups, &n, &all, &rest, 0, 5));
    printf("split into 2 of at least 5: %u groups of %u, %u SMs left\n", n, groups[0].sm.smCount, rest.sm.smCount);
    unsigned m = 2;
    memset(&none, 0, sizeof none);
    printf("split refusals: no resource type %s, more than the device %s, a group split again %s\n",
           result_name(cuDevSmResourceSplitByCount(again, &m, &none, NULL, 0, 8)),
           result_name(cuDevSmResourceSplitByCount(again, &m, &all, NULL, 0, 100000)),
           result_name(cuDevSmResourceSplitByCount(again, &m, &groups[0], NULL, 0, 8)));
    CUdevResourceDesc desc, two;
    CUdevResource mixed[2] = {all, groups[0]};
    printf("descriptors: two groups of one split %s, a group with the device %s\n",
           result_name(cuDevResourceGenerateDesc(&two, groups, 2)), result_name(cuDevResourceGenerateDesc(&two, mixed, 2)));
    CHECK(cuDevResourceGenerateDesc(&desc, groups, 1));

    CUgreenCtx g, sg = NULL;
    printf("green context without its default stream: %s\n", result_name(cuGreenCtxCreate(&g, desc, 0, 0)));
    CHECK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
    CUcontext gc, sc = NULL;
    CHECK(cuCtxFromGreenCtx(&gc, g));
    CUdevResource gr, cr, pr;
    CHECK(cuGreenCtxGetDevResource(g, &gr, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(cuCtxGetDevResource(gc, &cr, CU_DEV_RESOURCE_TYPE_SM));
    CHECK(cuCtxGetDevResource(primary, &pr, CU_DEV_RESOURCE_TYPE_SM));
    printf("SMs: the green context %u, its context %u, the primary context %u\n", gr.sm.smCount, cr.sm.smCount,
           pr.sm.smCount);
    unsigned long long gid = 0, cid = 0;
    CHECK(cuGreenCtxGetId(g, &gid));
    CHECK(cuCtxGetId(gc, &cid));
    printf("ids: the green context's is its context's: %s\n", gid == cid ? "yes" : "no");

    CUstream gs, ps;
    printf("a blocking stream in it: %s\n", result_name(cuGreenCtxStreamCreate(&gs, g, 0, 0)));
    CHECK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
    CHECK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    CHECK(cuCtxSetCurrent(gc));
    CHECK(cuStreamGetGreenCtx(gs, &sg));
    CHECK(cuStreamGetCtx_v2(gs, &sc, &sg));
    CUcontext v1 = NULL;
    CHECK(cuStreamGetCtx(gs, &v1));
    printf("its stream: green context %s, context %s (v1 %s)\n", sg == g ? "its own" : "another",
           sc == NULL ? "none" : "one", v1 == gc ? "its context" : "another");
    CHECK(cuStreamGetCtx_v2(ps, &sc, &sg));
    printf("the primary's stream: green context %s, context %s\n", sg ? "one" : "none", sc == primary ? "the primary" : "another");

    /* The same kernel on the group's SMs and on the whole device. */
    CUmodule mod;
    CUfunction spin;
    CHECK(cuModuleLoadData(&mod, "FLEXGV-SIM-MODULE\nkernel spin 4000\n"));
    CHECK(cuModuleGetFunction(&spin, mod, "spin"));
    float green = timed(spin, gs);
    CHECK(cuCtxSetCurrent(primary));
    float whole = timed(spin, ps);
    printf("a kernel on %u of %u SMs takes %.1f times as long\n", gr.sm.smCount, all.sm.smCount, green / whole);

    /* Memory and events in the green context. */
    CHECK(cuCtxSetCurrent(gc));
    CUdeviceptr d;
    unsigned word = 0;
    CHECK(cuMemAlloc_v2(&d, 4096));
    CHECK(cuMemsetD32Async(d, 42, 1024, gs));
    CUevent ev, never;
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING));
    CHECK(cuGreenCtxRecordEvent(g, ev));
    CHECK(cuEventSynchronize(ev));
    CHECK(cuMemcpyDtoH_v2(&word, d + 4092, 4));
    printf("memory in it: %u; its event: %s; a wait for an event never recorded: %s\n", word,
           result_name(cuEventQuery(ev)), result_name(cuGreenCtxWaitEvent(g, never)));
    CHECK(cuMemFree_v2(d));
    CHECK(cuStreamDestroy_v2(gs));
    CHECK(cuCtxSetCurrent(primary));
    CHECK(cuStreamDestroy_v2(ps));
    printf("green context destroyed: %s\n", result_name(cuGreenCtxDestroy(g)));
    printf("greenctx: done\n");
    return 0;
}
