/* Linked with -lcuda, as NVIDIA's driver API samples are: calls the families
 * those samples need of a remote GPU (occupancy, the profiler's range,
 * stream attributes, cuCtxCreate_v4, function attributes and names, module
 * and library enumeration, context flags, pointer attributes, context-wide
 * events, atomics' capabilities) and prints each
 * answer, so that its output remotely can be compared with its output on
 * the GPU in its own process. With "cig", it also asks cuCtxCreate_v4 for
 * CUDA-in-graphics parameters; with "tex" it only asks for a texture
 * object; with "old", it looks up the entry points of CUDA 2 to 4 as old
 * programs' loaders do; with "features", it prints the device's answers
 * for features programs check before they use them; with "hostpool
 * [MIB]", it allocates from pools of host memory and a device pool. */
#include <stdint.h>
#include <unistd.h>

#include "common.h"

/* Dynamic shared memory growing with the block: 128 bytes a thread. */
static size_t per_thread_smem(int blockSize)
{
    return (size_t)blockSize * 128;
}

static void ctx_v4(const char *what, CUctxCreateParams *p)
{
    CUcontext c = NULL;
    CUresult r = cuCtxCreate_v4(&c, p, 0, 0);
    CUdevice d = -1;
    if (r == CUDA_SUCCESS) {
        CHECK(cuCtxGetDevice(&d));
        CHECK(cuCtxDestroy_v2(c));
    }
    printf("cuCtxCreate_v4 %s: %s device %d\n", what, result_name(r), d);
}

static void stream_attrs(const char *what, CUstream s)
{
    CUstreamAttrValue v;
    CHECK(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_PRIORITY, &v));
    printf("%s priority %d", what, v.priority);
    CHECK(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    printf(" sync policy %d", (int)v.syncPolicy);
    CHECK(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    printf(" window %s %zu hit %.2f %d miss %d\n", v.accessPolicyWindow.base_ptr ? "at buffer" : "none",
           v.accessPolicyWindow.num_bytes, v.accessPolicyWindow.hitRatio, (int)v.accessPolicyWindow.hitProp,
           (int)v.accessPolicyWindow.missProp);
}

/* Events over a whole context: the event is reached once what every stream
 * was given before it is done, and a stream given work after a context-wide
 * wait starts it only after the event. A host function that waits for the
 * program holds the first stream, so what is asked is not a race. */
static int gate_open;
static void hold(void *p)
{
    (void)p;
    while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
        usleep(200);
}

static void ctx_events(void)
{
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    CUstream a, b;
    CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CUevent e1, e2;
    CHECK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    CHECK(cuLaunchHostFunc(a, hold, NULL));
    CHECK(cuCtxRecordEvent(ctx, e1));
    CHECK(cuEventRecord(e2, a));
    CHECK(cuCtxWaitEvent(ctx, e2));
    CUevent e3;
    CHECK(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(e3, b));
    printf("context event while a stream is held: %s, a stream after a context wait: %s", result_name(cuEventQuery(e1)),
           result_name(cuEventQuery(e3)));
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    CHECK(cuEventSynchronize(e1));
    CHECK(cuEventSynchronize(e3));
    printf("; released: %s %s\n", result_name(cuEventQuery(e1)), result_name(cuEventQuery(e3)));
    printf("context event: no event %s, no context %s\n", result_name(cuCtxRecordEvent(ctx, NULL)),
           result_name(cuCtxWaitEvent(NULL, e1)));
    CHECK(cuStreamBeginCapture_v2(b, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUresult during = cuCtxRecordEvent(ctx, e1);
    CUgraph g = NULL;
    CUresult ended = cuStreamEndCapture(b, &g);
    printf("context event during a capture: %s, the capture then %s\n", result_name(during), result_name(ended));
    if (g)
        CHECK(cuGraphDestroy(g));
    CHECK(cuEventDestroy_v2(e1));
    CHECK(cuEventDestroy_v2(e2));
    CHECK(cuEventDestroy_v2(e3));
    CHECK(cuStreamDestroy_v2(a));
    CHECK(cuStreamDestroy_v2(b));
}

static void gone_stream(const char *what, CUstream s)
{
    CUresult sync = cuStreamSynchronize(s);
    printf("%s: synchronize %s, destroy %s\n", what, result_name(sync), result_name(cuStreamDestroy_v2(s)));
}

/* A pool of pinned memory at a location. */
static CUmemPoolProps pool_props(CUmemLocation at)
{
    CUmemPoolProps p;
    memset(&p, 0, sizeof p);
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location = at;
    return p;
}

/* Pools of host memory: the host's current one and one made, each
 * allocated from (bytes), the allocation written by the host and read
 * back by a copy; then a device pool's, as before. */
static int host_pools(size_t bytes)
{
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUstream st;
    CHECK(cuStreamCreate(&st, 0));
    CUmemLocation hl = {CU_MEM_LOCATION_TYPE_HOST, 0}, dl = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemoryPool current, made, dev;
    CUmemPoolProps props = pool_props(hl);
    CHECK(cuMemGetMemPool(&current, &hl, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK(cuMemPoolCreate(&made, &props));
    CHECK(cuMemGetMemPool(&dev, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    CUmemoryPool pools[3] = {current, made, dev};
    const char *what[3] = {"the host's current pool", "a pool of host memory made", "the device's pool"};
    for (int i = 0; i < 3; i++) {
        CUdeviceptr p = 0;
        CUresult r = cuMemAllocFromPoolAsync(&p, bytes, pools[i], st);
        printf("%s: %s", what[i], result_name(r));
        if (r == CUDA_SUCCESS) {
            unsigned type = 0, back = 0, v = 0x5a5a0000u + (unsigned)i;
            CHECK(cuStreamSynchronize(st));
            CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
            if (type == CU_MEMORYTYPE_HOST)
                *(volatile unsigned *)(uintptr_t)p = v; /* the host writes it */
            else
                CHECK(cuMemcpyHtoD_v2(p, &v, sizeof v));
            /* A copy down names device memory: host memory is read through
             * the unified copy. */
            CUresult down = cuMemcpyDtoH_v2(&back, p, sizeof back);
            if (down != CUDA_SUCCESS)
                CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)&back, p, sizeof back));
            printf(", %s memory, %s%s%s", type == CU_MEMORYTYPE_HOST ? "host" : "device",
                   back == v ? "read back" : "read back otherwise", down ? "; a copy down: " : "",
                   down ? result_name(down) : "");
            CHECK(cuMemFreeAsync(p, st));
        }
        printf("\n");
    }
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemPoolDestroy(made));
    return 0;
}

/* What cudaPointerGetAttributes asks of each kind of memory (CuPy's
 * pointerGetAttributes): device memory, cuMemHostAlloc's, registered,
 * managed, pageable; then a device pool made and allocated from, as CuPy's
 * mallocFromPoolAsync test does. */
static int pointers(void)
{
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr dev, managed;
    void *host, *reg = aligned_alloc(4096, 4096), *pageable = malloc(64);
    CHECK(cuMemAlloc_v2(&dev, 64));
    CHECK(cuMemHostAlloc(&host, 64, 0));
    CHECK(cuMemHostRegister_v2(reg, 4096, 0));
    CHECK(cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL));
    const char *what[] = {"device", "cuMemHostAlloc", "registered", "managed", "pageable"};
    CUdeviceptr at[] = {dev, (CUdeviceptr)(uintptr_t)host, (CUdeviceptr)(uintptr_t)reg, managed,
                        (CUdeviceptr)(uintptr_t)pageable};
    for (int i = 0; i < 5; i++) {
        CUcontext c = NULL;
        unsigned type = 9, is_managed = 9;
        int ordinal = -9;
        void *devp = NULL, *hostp = NULL;
        CUpointer_attribute a[] = {CU_POINTER_ATTRIBUTE_CONTEXT,      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED,   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
        void *d[] = {&c, &type, &devp, &hostp, &is_managed, &ordinal};
        CUresult r = cuPointerGetAttributes(6, a, d, at[i]);
        unsigned one = 9;
        CUresult r1 = cuPointerGetAttribute(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at[i]);
        printf("%s: %s, context %s, type %u, device pointer %s, host pointer %s, managed %u, ordinal %d; "
               "the type alone: %s %u\n",
               what[i], result_name(r), !c ? "none" : c == ctx ? "the current" : "another", type,
               !devp ? "none" : (CUdeviceptr)(uintptr_t)devp == at[i] ? "itself" : "another",
               !hostp ? "none" : (CUdeviceptr)(uintptr_t)hostp == at[i] ? "itself" : "another", is_managed,
               ordinal, result_name(r1), r1 == CUDA_SUCCESS ? one : 0);
    }
    CHECK(cuMemFree_v2(managed));
    CHECK(cuMemHostUnregister(reg));
    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFree_v2(dev));
    free(reg);
    free(pageable);

    CUmemoryPool pool;
    CUmemPoolProps props = pool_props((CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 0});
    CUstream st;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr p = 0;
    CUresult r = cuMemAllocFromPoolAsync(&p, 128, pool, st);
    printf("a device pool made: %s, %s", result_name(r), p ? "an address" : "no address");
    if (r == CUDA_SUCCESS)
        printf(", freed %s", result_name(cuMemFreeAsync(p, st)));
    printf(", destroyed %s\n", result_name(cuMemPoolDestroy(pool)));
    CHECK(cuStreamSynchronize(st));
    /* The pool a stream-ordered allocation came from: the device's
     * default one, which the program never asked for. */
    CUdeviceptr q;
    CUmemoryPool of = NULL, dflt;
    CHECK(cuMemAllocAsync(&q, 256, st));
    r = cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, q);
    CHECK(cuDeviceGetDefaultMemPool(&dflt, 0));
    printf("a stream-ordered allocation's pool: %s, %s\n", result_name(r),
           of == dflt ? "the device's default" : of ? "another" : "none");
    CHECK(cuMemFreeAsync(q, st));
    CHECK(cuStreamSynchronize(st));

    /* A captured kernel's graph printed into a file, which is read back. */
    CUmodule mod;
    CUfunction f;
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&f, mod, "vecadd"));
    CUdeviceptr buf;
    CHECK(cuMemAlloc_v2(&buf, 4096));
    int n = 16;
    void *args[] = {&buf, &buf, &buf, &n};
    CUgraph g;
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, st, args, NULL));
    CHECK(cuStreamEndCapture(st, &g));
    char path[] = "/tmp/families-dot-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    size_t plain = 0;
    for (unsigned verbose = 0; verbose < 2; verbose++) {
        r = cuGraphDebugDotPrint(g, path, verbose ? CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE : 0);
        static char text[1 << 16];
        FILE *fp = fopen(path, "r");
        size_t k = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
        if (fp)
            fclose(fp);
        text[k] = 0;
        printf("cuGraphDebugDotPrint%s: %s, %s the kernel's name%s\n", verbose ? " verbose" : "", result_name(r),
               strstr(text, "vecadd") ? "with" : "without",
               verbose ? (k > plain ? ", longer than plain" : ", not longer than plain") : "");
        plain = k;
    }
    printf("cuGraphDebugDotPrint into a folder that does not exist: %s, of no graph: %s, to no path: %s\n",
           result_name(cuGraphDebugDotPrint(g, "/nonexistent-folder/graph.dot", 0)),
           result_name(cuGraphDebugDotPrint(NULL, path, 0)), result_name(cuGraphDebugDotPrint(g, NULL, 0)));
    unlink(path);

    /* Every handle looks like a pointer the driver gives: programs keep
     * handles in signed integers and test them for > 0 (CuPy's pools). */
    CUgraphExec x;
    CUevent ev;
    CUmemoryPool made;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuEventCreate(&ev, 0));
    CHECK(cuMemPoolCreate(&made, &props));
    struct {
        const char *what;
        const void *h;
    } hs[] = {{"context", ctx}, {"stream", st}, {"event", ev}, {"module", mod},  {"function", f},
              {"pool", made},   {"graph", g},   {"executable graph", x}};
    printf("handles like the driver's pointers:");
    int all = 1;
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        uintptr_t v = (uintptr_t)hs[i].h;
        if (!v || v >= 1ull << 47 || v % 8) {
            printf(" not the %s (%#lx)", hs[i].what, (unsigned long)v);
            all = 0;
        }
    }
    printf("%s\n", all ? " all" : "");
    CHECK(cuMemPoolDestroy(made));
    CHECK(cuEventDestroy_v2(ev));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(buf));
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(cuInit(0));

    /* Contexts with creation parameters, and their execution affinity. */
    int support = -1;
    CHECK(cuDeviceGetExecAffinitySupport(&support, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0));
    printf("SM count affinity supported: %d\n", support);
    ctx_v4("without parameters", NULL);
    CUctxCreateParams none = {NULL, 0, NULL};
    ctx_v4("with none", &none);
    CUexecAffinityParam aff = {.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT, .param.smCount.val = 4};
    CUctxCreateParams sm4 = {&aff, 1, NULL};
    ctx_v4("with 4 SMs", &sm4);
    aff.param.smCount.val = 0;
    ctx_v4("with 0 SMs", &sm4);
    if (argc > 1 && !strcmp(argv[1], "video")) {
        /* As nvJPEG and FFmpeg look for the GPU's video engines. */
        void *h = dlopen("libnvcuvid.so.1", RTLD_NOW | RTLD_LOCAL);
        printf("the video decoder's library: %s\n", h ? "loaded" : dlerror());
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "pointers"))
        return pointers();
    if (argc > 1 && !strcmp(argv[1], "hostpool"))
        return host_pools(argc > 2 ? (size_t)atoi(argv[2]) << 20 : 4096);
    if (argc > 1 && !strcmp(argv[1], "refused")) {
        /* Looked up: the simulated GPU has no multicast objects. */
        CUresult (*gran)(size_t *, const void *, int) =
            (CUresult(*)(size_t *, const void *, int))dlsym(RTLD_DEFAULT, "cuMulticastGetGranularity");
        size_t g = 0;
        printf("cuMulticastGetGranularity: %s\n", gran ? result_name(gran(&g, NULL, 0)) : "not exported");
        printf("cuMulticastGetGranularity again: %s\n", gran ? result_name(gran(&g, NULL, 0)) : "not exported");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "gone")) {
        /* A context's streams go with it, destroyed or reset: the driver
         * answers for their handles as for any unknown one. */
        CUdevice d;
        CUcontext c, p;
        CUstream s;
        CHECK(cuDeviceGet(&d, 0));
        CHECK(cuCtxCreate_v4(&c, NULL, 0, d));
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuCtxDestroy_v2(c));
        CHECK(cuDevicePrimaryCtxRetain(&p, d));
        CHECK(cuCtxSetCurrent(p));
        gone_stream("a stream of a destroyed context", s);
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuDevicePrimaryCtxReset_v2(d));
        CHECK(cuDevicePrimaryCtxRetain(&p, d));
        CHECK(cuCtxSetCurrent(p));
        gone_stream("a stream of a reset primary context", s);
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        gone_stream("a stream made after", s);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "primary")) {
        /* A primary context reset, then retained: its handle, and the old
         * one made current (scripts/gpu-e2e.sh's simmodel runs this on a
         * real GPU too). */
        CUdevice d;
        CUcontext a, b;
        CHECK(cuDeviceGet(&d, 0));
        CHECK(cuDevicePrimaryCtxRetain(&a, d));
        CHECK(cuDevicePrimaryCtxReset_v2(d));
        CHECK(cuDevicePrimaryCtxRetain(&b, d));
        printf("a primary context reset and retained: %s handle; the old one made current: %s\n",
               a == b ? "the same" : "another", result_name(cuCtxSetCurrent(a)));
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "old")) {
        /* As the loaders of old programs do: every name must be found. */
        static const char *const names[] = {
            "cuDeviceComputeCapability", "cuDeviceGetProperties", "cuCtxAttach", "cuCtxDetach",
            "cuModuleGetTexRef", "cuFuncSetBlockShape", "cuFuncSetSharedSize", "cuTexRefCreate",
            "cuTexRefDestroy", "cuTexRefSetArray", "cuTexRefSetFormat", "cuTexRefSetAddressMode",
            "cuTexRefSetFilterMode", "cuTexRefSetFlags", "cuTexRefGetArray", "cuTexRefGetAddressMode",
            "cuTexRefGetFilterMode", "cuTexRefGetFormat", "cuTexRefGetFlags", "cuParamSetSize", "cuParamSeti",
            "cuParamSetf", "cuParamSetv", "cuParamSetTexRef", "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync",
            "cuTexRefSetAddress_v2", "cuTexRefGetAddress_v2", "cuTexRefSetAddress2D_v3", "cuModuleGetSurfRef",
            "cuSurfRefSetArray", "cuSurfRefGetArray", "cuIpcOpenMemHandle", "cuMemHostGetFlags", "cuMemHostRegister",
            "cuGraphicsUnregisterResource", "cuGraphicsSubResourceGetMappedArray",
            "cuGraphicsResourceGetMappedPointer_v2", "cuGraphicsResourceSetMapFlags", "cuGraphicsMapResources",
            "cuGraphicsUnmapResources", "cuMemcpyDtoDAsync", "cuCtxDestroy", "cuStreamDestroy", "cuEventDestroy"};
        int missing = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!dlsym(RTLD_DEFAULT, names[i]))
                printf("not exported: %s\n", names[i]), missing++;
        printf("old entry points missing: %d\n", missing);
        CUresult (*cc)(int *, int *, CUdevice) =
            (CUresult(*)(int *, int *, CUdevice))dlsym(RTLD_DEFAULT, "cuDeviceComputeCapability");
        int major = -1, minor = -1, amajor = -2, aminor = -2;
        CHECK(cuDeviceGetAttribute(&amajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
        CHECK(cuDeviceGetAttribute(&aminor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
        if (cc)
            CHECK(cc(&major, &minor, 0));
        printf("cuDeviceComputeCapability: %d.%d, attributes %d.%d\n", major, minor, amajor, aminor);
        CUresult (*props)(CUdevprop *, CUdevice) =
            (CUresult(*)(CUdevprop *, CUdevice))dlsym(RTLD_DEFAULT, "cuDeviceGetProperties");
        CUdevprop dp;
        memset(&dp, 0xff, sizeof dp);
        CUresult rp = props ? props(&dp, 0) : CUDA_ERROR_NOT_FOUND;
        printf("cuDeviceGetProperties: %s, %d threads a block (%d %d %d), grid %d %d %d, %d bytes shared, warp %d, "
               "clock %d kHz, texture alignment %d; no device: %s\n",
               result_name(rp), dp.maxThreadsPerBlock, dp.maxThreadsDim[0], dp.maxThreadsDim[1], dp.maxThreadsDim[2],
               dp.maxGridSize[0], dp.maxGridSize[1], dp.maxGridSize[2], dp.sharedMemPerBlock, dp.SIMDWidth, dp.clockRate,
               dp.textureAlign, props ? result_name(props(&dp, 99)) : "not exported");
        CUresult (*grid)(void) = (CUresult(*)(void))dlsym(RTLD_DEFAULT, "cuLaunchGrid");
        printf("cuLaunchGrid: %s\n", grid ? result_name(grid()) : "not exported");
        printf("cuLaunchGrid again: %s\n", grid ? result_name(grid()) : "not exported");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "features")) {
        /* Features a program checks before it uses them. */
        static const struct {
            const char *name;
            CUdevice_attribute a;
        } f[] = {{"multicast", CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED},
                 {"GPUDirect RDMA", CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED},
                 {"dma-buf", CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED},
                 {"sparse arrays", CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED},
                 {"timeline semaphores", CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED},
                 {"decompression", CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK},
                 {"memory pools", CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED},
                 {"host-native atomics", CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED}};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
            int v = -1;
            CHECK(cuDeviceGetAttribute(&v, f[i].a, 0));
            printf("%s: %d\n", f[i].name, v);
        }
        CUatomicOperation add = CU_ATOMIC_OPERATION_INTEGER_ADD;
        unsigned int caps = 99;
        CHECK(cuDeviceGetHostAtomicCapabilities(&caps, &add, 1, 0));
        printf("host atomic add: %#x\n", caps);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "cig")) {
        CUctxCigParam cig = {1, &cig};
        CUctxCreateParams p = {NULL, 0, &cig};
        ctx_v4("with graphics", &p);
        ctx_v4("with graphics again", &p);
    }

    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUexecAffinityParam got;
    CUresult ra = cuCtxGetExecAffinity(&got, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    printf("cuCtxGetExecAffinity: %s", result_name(ra));
    if (ra == CUDA_SUCCESS)
        printf(" %u SMs", got.param.smCount.val);
    printf("\n");
    CUmodule mod;
    CUfunction f;
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&f, mod, "vecadd"));

    /* The profiler's range. */
    printf("cuProfilerStart: %s\n", result_name(cuProfilerStart()));
    printf("cuProfilerStop: %s\n", result_name(cuProfilerStop()));

    /* Function attributes and preferences. */
    int v;
    CHECK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    printf("max threads per block %d", v);
    CHECK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    printf(" registers %d\n", v);
    printf("cuFuncSetCacheConfig: %s\n", result_name(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED)));

    /* Names, enumeration and loading state: a module's functions, then a
     * library's kernels, loaded from a file. */
    const char *name = NULL, *again = NULL;
    CHECK(cuFuncGetName(&name, f));
    CHECK(cuFuncGetName(&again, f));
    printf("cuFuncGetName: %s, the same string again: %d\n", name, name == again);
    printf("cuFuncGetName of no function: %s\n", result_name(cuFuncGetName(&again, NULL)));
    unsigned int nf = 0;
    CHECK(cuModuleGetFunctionCount(&nf, mod));
    CUfunction fs[8];
    CHECK(cuModuleEnumerateFunctions(fs, nf < 8 ? nf : 8, mod));
    printf("module functions: %u:", nf);
    for (unsigned int i = 0; i < nf && i < 8; i++) {
        CHECK(cuFuncGetName(&name, fs[i]));
        printf(" %s%s", name, fs[i] == f ? " (as looked up)" : "");
    }
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_UNLOADED;
    CHECK(cuFuncIsLoaded(&state, fs[1]));
    printf("\ncuFuncIsLoaded: %s, cuFuncLoad: %s\n", state == CU_FUNCTION_LOADING_STATE_LOADED ? "loaded" : "not loaded",
           result_name(cuFuncLoad(fs[1])));
    char path[] = "/tmp/families-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, SIM_MODULE, sizeof SIM_MODULE) != (ssize_t)sizeof SIM_MODULE)
        return 1;
    close(fd);
    CUlibrary lib;
    CHECK(cuLibraryLoadFromFile(&lib, path, NULL, NULL, 0, NULL, NULL, 0));
    unlink(path);
    printf("cuLibraryLoadFromFile of no file: %s\n",
           result_name(cuLibraryLoadFromFile(&lib, path, NULL, NULL, 0, NULL, NULL, 0)));
    CHECK(cuLibraryGetKernelCount(&nf, lib));
    CUkernel ks[8];
    CHECK(cuLibraryEnumerateKernels(ks, nf < 8 ? nf : 8, lib));
    printf("library kernels: %u:", nf);
    for (unsigned int i = 0; i < nf && i < 8; i++) {
        CHECK(cuKernelGetName(&name, ks[i]));
        printf(" %s", name);
    }
    printf("\n");
    CHECK(cuLibraryUnload(lib));

    /* The context's flags, set and read back. */
    unsigned int flags = 0;
    CHECK(cuCtxGetFlags(&flags));
    printf("context flags %#x", flags);
    CHECK(cuCtxSetFlags(CU_CTX_SCHED_BLOCKING_SYNC));
    CHECK(cuCtxGetFlags(&flags));
    printf(", set %#x, bad: %s\n", flags, result_name(cuCtxSetFlags(0x1000)));
    CHECK(cuCtxSetFlags(0));

    /* Occupancy: blocks per SM, the block size of best occupancy with a
     * fixed, a per-block and no dynamic shared memory, the memory left. */
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&v, f, 128, 0));
    printf("blocks per SM of 128 threads: %d\n", v);
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 256, 16384, 1));
    printf("blocks per SM of 256 threads and 16 KiB: %d\n", v);
    int grid, block;
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
    printf("best block: %d, grid %d\n", block, grid);
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 40000, 0));
    printf("best block with 40000 bytes: %d, grid %d\n", block, grid);
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, per_thread_smem, 0, 0));
    printf("best block with 128 bytes a thread: %d, grid %d\n", block, grid);
    CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, per_thread_smem, 0, 200, 1));
    printf("best block of at most 200 with 128 bytes a thread: %d, grid %d\n", block, grid);
    printf("no function: %s\n", result_name(cuOccupancyMaxPotentialBlockSize(&grid, &block, NULL, NULL, 0, 0)));
    size_t avail;
    CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&avail, f, 2, 256));
    printf("dynamic shared memory of 2 blocks of 256: %zu\n", avail);
    CUlaunchAttribute cl = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = {2, 1, 1}};
    CUlaunchConfig cfg = {.gridDimX = 16, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                          .blockDimZ = 1, .attrs = &cl, .numAttrs = 1};
    CHECK(cuOccupancyMaxPotentialClusterSize(&v, f, &cfg));
    printf("cluster size: %d", v);
    CHECK(cuOccupancyMaxActiveClusters(&v, f, &cfg));
    printf(" active clusters of 2: %d\n", v);

    /* Stream attributes: set, read back, copied to another stream. */
    CUstream s, t;
    CUdeviceptr buf;
    CHECK(cuMemAlloc_v2(&buf, 1 << 20));
    CHECK(cuStreamCreateWithPriority(&s, 1, -1));
    CHECK(cuStreamCreate(&t, 1));
    stream_attrs("created", s);
    CUstreamAttrValue a;
    memset(&a, 0, sizeof a);
    a.priority = -3;
    CHECK(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_PRIORITY, &a));
    a.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
    CHECK(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a));
    memset(&a, 0, sizeof a);
    a.accessPolicyWindow.base_ptr = (void *)(uintptr_t)buf;
    a.accessPolicyWindow.num_bytes = 1 << 20;
    a.accessPolicyWindow.hitRatio = 0.5f;
    a.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    a.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
    CHECK(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &a));
    stream_attrs("set", s);
    CHECK(cuStreamCopyAttributes(t, s));
    stream_attrs("copied", t);
    a.syncPolicy = (CUsynchronizationPolicy)9;
    printf("bad sync policy: %s\n",
           result_name(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a)));
    CHECK(cuStreamDestroy_v2(t));
    CHECK(cuStreamDestroy_v2(s));

    /* Synchronous memory operations asked of an allocation. */
    unsigned int one = 1, sync = 9;
    CHECK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, buf));
    CHECK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, buf));
    printf("sync memops %u, of memory not allocated: %s, another attribute: %s\n", sync,
           result_name(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)(uintptr_t)&one)),
           result_name(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, buf)));

    /* Stream memory operations, one by one and in a batch: two writes, a
     * barrier, a wait the writes meet; one outside the program's memory,
     * and an operation no driver has, refused. */
    CUstreamBatchMemOpParams ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = buf;
    ops[0].writeValue.value = 5;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[1].writeValue.address = buf + 8;
    ops[1].writeValue.value64 = 7ull << 32 | 1;
    ops[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[3].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[3].waitValue.address = buf;
    ops[3].waitValue.value = 5;
    ops[3].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    CHECK(cuStreamBatchMemOp_v2(NULL, 4, ops, 0));
    CHECK(cuStreamWaitValue64_v2(NULL, buf + 8, 7ull << 32, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK(cuCtxSynchronize());
    unsigned long long words[2];
    CHECK(cuMemcpyDtoH_v2(words, buf, sizeof words));
    ops[1].writeValue.address = (CUdeviceptr)(uintptr_t)&one;
    CUresult outside = cuStreamBatchMemOp_v2(NULL, 2, ops, 0);
    CUdeviceptr gone;
    CHECK(cuMemAlloc_v2(&gone, 1 << 20));
    CHECK(cuMemFree_v2(gone));
    ops[1].writeValue.address = gone;
    printf("batch on memory freed: %s\n", result_name(cuStreamBatchMemOp_v2(NULL, 2, ops, 0)));

    /* A batch of copies: up from the program's memory, device to device,
     * down; the legacy stream and an attribute past the batch refused. */
    CUdeviceptr b2;
    CUstream bs;
    CHECK(cuMemAlloc_v2(&b2, 4096));
    CHECK(cuStreamCreate(&bs, CU_STREAM_NON_BLOCKING));
    static unsigned char up[256], down[256];
    for (int i = 0; i < 256; i++)
        up[i] = (unsigned char)(i * 7);
    CUdeviceptr dsts[3] = {buf, b2 + 100, (CUdeviceptr)(uintptr_t)down};
    CUdeviceptr srcs[3] = {(CUdeviceptr)(uintptr_t)up, buf, b2 + 100};
    size_t sizes[3] = {256, 256, 256}, idx[2] = {0, 3};
    CUmemcpyAttributes attr[2] = {{.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM},
                                  {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY}};
    CHECK(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attr, idx, 1, bs));
    CHECK(cuStreamSynchronize(bs));
    printf("copy batch: down[1] %u down[255] %u, the legacy stream: %s, an attribute past the batch: %s\n", down[1],
           down[255], result_name(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attr, idx, 1, CU_STREAM_LEGACY)),
           result_name(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attr, idx, 2, bs)));
    CHECK(cuStreamDestroy_v2(bs));
    CHECK(cuMemFree_v2(b2));

    /* The flags pinned memory was made with; other memory refused. */
    void *ph, *pd;
    unsigned int fh = 99, fd2 = 99, fin = 99, fr = 99;
    static char reg[8192];
    CHECK(cuMemHostAlloc(&ph, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    CHECK(cuMemAllocHost_v2(&pd, 100));
    CHECK(cuMemHostGetFlags(&fh, ph));
    CHECK(cuMemHostGetFlags(&fd2, pd));
    CHECK(cuMemHostGetFlags(&fin, (char *)ph + 4000));
    CHECK(cuMemHostRegister_v2(reg, sizeof reg, 0));
    CUresult rr = cuMemHostGetFlags(&fr, reg);
    CHECK(cuMemHostUnregister(reg));
    CHECK(cuMemFreeHost(ph));
    CHECK(cuMemFreeHost(pd));
    printf("host flags %#x, of cuMemAllocHost's %#x, inside %#x; registered: %s, freed: %s, pageable: %s\n", fh, fd2, fin,
           result_name(rr), result_name(cuMemHostGetFlags(&fr, ph)), result_name(cuMemHostGetFlags(&fr, up)));
    ops[1].operation = (CUstreamBatchMemOpType)9;
    printf("batch: %#llx %#llx, outside the program's memory: %s, an unknown operation: %s\n", words[0], words[1],
           result_name(outside), result_name(cuStreamBatchMemOp_v2(NULL, 2, ops, 0)));
    CHECK(cuMemFree_v2(buf));
    ctx_events();

    /* Pools by location (CUDA 13): the device's current pool set and read. */
    CUmemLocation dl = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, hl = {CU_MEM_LOCATION_TYPE_HOST, 0};
    CUmemoryPool dp = NULL, mp = NULL, cp = NULL, hp = NULL;
    CUmemPoolProps pprops = pool_props(dl);
    CHECK(cuMemGetDefaultMemPool(&dp, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    CHECK(cuMemPoolCreate(&mp, &pprops));
    CHECK(cuMemSetMemPool(&dl, CU_MEM_ALLOCATION_TYPE_PINNED, mp));
    CHECK(cuMemGetMemPool(&cp, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    printf("current pool: %s; no pool: %s", cp == mp ? "the one set" : cp == dp ? "the default" : "another",
           result_name(cuMemSetMemPool(&dl, CU_MEM_ALLOCATION_TYPE_PINNED, NULL)));
    cuuint64_t thr = 1 << 20, thr_got = 0, five = 5, zero64 = 0;
    int reuse = -1, off = 0, after = -1;
    CHECK(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    CHECK(cuMemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr_got));
    CHECK(cuMemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    CHECK(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
    CHECK(cuMemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &after));
    CUresult high5 = cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five);
    printf("; its threshold %llu, opportunistic reuse %d then %d; its used high mark set to 5: %s, to 0: %s, its "
           "used memory set: %s",
           (unsigned long long)thr_got, reuse, after, result_name(high5),
           result_name(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero64)),
           result_name(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero64)));
    CHECK(cuMemPoolDestroy(mp));
    CHECK(cuMemGetMemPool(&cp, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    printf("; after its destroy: %s\n", cp == dp ? "the default" : "another");
    CUresult rhp = cuMemGetMemPool(&hp, &hl, CU_MEM_ALLOCATION_TYPE_PINNED);
    printf("the host's current pool: %s\n", result_name(rhp));

    /* Atomics' capabilities with the host and between devices. */
    CUatomicOperation aops[] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS, CU_ATOMIC_OPERATION_FLOAT_ADD,
                                CU_ATOMIC_OPERATION_MAX};
    unsigned int acaps[4] = {99, 99, 99, 99};
    CUresult rh = cuDeviceGetHostAtomicCapabilities(acaps, aops, 3, 0);
    printf("host atomics: %s %#x %#x %#x; an unknown operation: %s, none asked: %s; between device 0 and itself: %s\n",
           result_name(rh), acaps[0], acaps[1], acaps[2], result_name(cuDeviceGetHostAtomicCapabilities(acaps, aops, 4, 0)),
           result_name(cuDeviceGetHostAtomicCapabilities(acaps, aops, 0, 0)),
           result_name(cuDeviceGetP2PAtomicCapabilities(acaps, aops, 3, 0, 0)));
    printf("families: done\n");
    return 0;
}
