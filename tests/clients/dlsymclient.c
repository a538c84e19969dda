/* Reaches the driver like PyTorch: dlsym on the libcuda handle, by exact
 * exported (versioned) name. Covers the variants whose ABIs differ by
 * version (cuStreamBeginCapture vs _v2), RTLD_DEFAULT and RTLD_NEXT lookups,
 * and an unhooked entry point. */
#include "common.h"

#define SYM(var, name)                                          \
    fg_pfn_##name var = (fg_pfn_##name)dlsym(h, #name);          \
    if (!var) {                                                 \
        fprintf(stderr, "dlsymclient: no %s\n", #name);         \
        return 1;                                               \
    }

int main(void)
{
    /* Before the driver is loaded, a global lookup finds nothing, with or
     * without the shim. */
    if (dlsym(RTLD_DEFAULT, "cuInit") != NULL) {
        fprintf(stderr, "dlsymclient: cuInit visible before libcuda was loaded\n");
        return 1;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "dlsymclient: %s\n", dlerror());
        return 1;
    }
    SYM(init, cuInit);
    SYM(retain, cuDevicePrimaryCtxRetain);
    SYM(push, cuCtxPushCurrent_v2);
    SYM(stream_create, cuStreamCreate);
    SYM(capture_v1, cuStreamBeginCapture);
    SYM(capture_v2, cuStreamBeginCapture_v2);
    SYM(end_capture, cuStreamEndCapture);
    SYM(instantiate, cuGraphInstantiateWithFlags);
    SYM(graph_launch, cuGraphLaunch);
    SYM(graph_destroy, cuGraphDestroy);
    SYM(exec_destroy, cuGraphExecDestroy);
    SYM(stream_sync, cuStreamSynchronize);
    SYM(load, cuLibraryLoadData);
    SYM(get_kernel, cuLibraryGetKernel);
    SYM(kernel_fn, cuKernelGetFunction);
    SYM(launch, cuLaunchKernel);
    SYM(mem_create, cuMemCreate);
    SYM(mem_release, cuMemRelease);
    SYM(reserve, cuMemAddressReserve);
    SYM(addr_free, cuMemAddressFree);
    SYM(map, cuMemMap);
    SYM(unmap, cuMemUnmap);
    SYM(granularity, cuMemGetAllocationGranularity);
    SYM(pool_create, cuMemPoolCreate);
    SYM(pool_alloc, cuMemAllocFromPoolAsync);
    SYM(free_async, cuMemFreeAsync);
    SYM(pool_destroy, cuMemPoolDestroy);
    SYM(array_create, cuArrayCreate_v2);
    SYM(array_destroy, cuArrayDestroy);

    /* RTLD_DEFAULT and RTLD_NEXT now see the loaded driver. */
    fg_pfn_cuDeviceGet devget = (fg_pfn_cuDeviceGet)dlsym(RTLD_DEFAULT, "cuDeviceGet");
    fg_pfn_cuDeviceGetCount devcount = (fg_pfn_cuDeviceGetCount)dlsym(RTLD_NEXT, "cuDeviceGetCount");
    CUresult (*bus_id)(char *, int, CUdevice) = (CUresult(*)(char *, int, CUdevice))dlsym(h, "cuDeviceGetPCIBusId");
    if (!devget || !devcount || !bus_id) {
        fprintf(stderr, "dlsymclient: global lookups failed\n");
        return 1;
    }
    Dl_info info;
    if (!dladdr((void *)bus_id, &info) || !strstr(info.dli_fname, "libcuda")) {
        fprintf(stderr, "dlsymclient: cuDeviceGetPCIBusId does not point into the driver\n");
        return 1;
    }

    CUdevice dev;
    CUcontext ctx;
    int n;
    CHECK(init(0));
    CHECK(devget(&dev, 0));
    CHECK(devcount(&n));
    CHECK(retain(&ctx, dev));
    CHECK(push(ctx));
    count("cuInit", 1);
    count("cuDeviceGet", 1);
    count("cuDeviceGetCount", 1);
    count("cuDevicePrimaryCtxRetain", 1);
    count("cuCtxPushCurrent_v2", 1);

    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    CHECK(load(&lib, SIM_MODULE, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(get_kernel(&k, lib, "empty"));
    CHECK(kernel_fn(&f, k));
    count("cuLibraryLoadData", 1);
    count("cuLibraryGetKernel", 1);
    count("cuKernelGetFunction", 1);

    /* Both capture ABIs, each with its own argument count. */
    CUstream s;
    CHECK(stream_create(&s, 0));
    count("cuStreamCreate", 1);
    for (int v = 1; v <= 2; v++) {
        if (v == 1)
            CHECK(capture_v1(s));
        else
            CHECK(capture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
        for (int i = 0; i < 3; i++)
            CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        CUgraph g;
        CUgraphExec x;
        CHECK(end_capture(s, &g));
        CHECK(instantiate(&x, g, 0));
        CHECK(graph_launch(x, s));
        CHECK(graph_launch(x, s));
        CHECK(stream_sync(s));
        CHECK(exec_destroy(x));
        CHECK(graph_destroy(g));
    }
    count("cuStreamBeginCapture", 1);
    count("cuStreamBeginCapture_v2", 1);
    count("cuLaunchKernel", 6);
    count("cuStreamEndCapture", 2);
    count("cuGraphInstantiateWithFlags", 2);
    count("cuGraphLaunch", 4);
    count("cuStreamSynchronize", 2);
    count("cuGraphExecDestroy", 2);
    count("cuGraphDestroy", 2);

    /* Virtual memory management, as PyTorch expandable segments use it. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran;
    CHECK(granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CUmemGenericAllocationHandle mh;
    CUdeviceptr va;
    CHECK(mem_create(&mh, 2 * gran, &prop, 0));
    CHECK(reserve(&va, 2 * gran, 0, 0, 0));
    CHECK(map(va, 2 * gran, 0, mh, 0));
    CHECK(unmap(va, 2 * gran));
    CHECK(mem_release(mh));
    CHECK(addr_free(va, 2 * gran));
    count("cuMemGetAllocationGranularity", 1);
    count("cuMemCreate", 1);
    count("cuMemAddressReserve", 1);
    count("cuMemMap", 1);
    count("cuMemUnmap", 1);
    count("cuMemRelease", 1);
    count("cuMemAddressFree", 1);

    /* An explicit memory pool. */
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = dev;
    CUmemoryPool pool;
    CUdeviceptr pa;
    CHECK(pool_create(&pool, &pp));
    CHECK(pool_alloc(&pa, 1 << 20, pool, s));
    CHECK(free_async(pa, s));
    CHECK(pool_destroy(pool));
    count("cuMemPoolCreate", 1);
    count("cuMemAllocFromPoolAsync", 1);
    count("cuMemFreeAsync", 1);
    count("cuMemPoolDestroy", 1);

    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR ad = {256, 256, CU_AD_FORMAT_FLOAT, 4};
    CHECK(array_create(&arr, &ad));
    CHECK(array_destroy(arr));
    count("cuArrayCreate_v2", 1);
    count("cuArrayDestroy", 1);

    print_expects();
    printf("dlsymclient: ok\n");
    return 0;
}
