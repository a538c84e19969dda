/* Exercises memory quotas the way programs meet them; what it reports is
 * what the program sees (results, cuMemGetInfo), nothing internal.
 *     memclient paths            every allocation path and its release
 *     memclient exact            one byte over the room fails, exactly the room succeeds
 *     memclient early            exact, after a dlsym before libc is set up (as a sanitizer's)
 *     memclient fill CHUNK_MIB   print "ctx", wait for a line on stdin, allocate
 *                                until refused, print the total, wait for stdin to close
 *     memclient threads N CHUNK_MIB   N threads allocate until refused
 *     memclient churn            allocate and free 1 MiB in a loop (prints ready first)
 *     memclient later MIB        prints ready, then at a line on stdin allocates MIB MiB and
 *                                says what it got (nothing else in between looks at the quota)
 *     memclient steps            prints ready, then for each line on stdin: "alloc MIB"
 *                                allocates, "free" frees the last allocation still held,
 *                                each answered with its result
 *     memclient info             cuMemGetInfo and cuDeviceTotalMem
 *     memclient allocloop N      N pairs of cuMemAlloc/cuMemFree of 1 MiB (benchmarks)
 *     memclient uploadloop N     N cuMemcpyHtoDAsync of 4 KiB, then a synchronize (benchmarks)
 *     memclient eventloop N      N pairs of cuEventCreate/cuEventDestroy, then a synchronize (benchmarks)
 *     memclient copyloop N       N synchronous 64 MiB uploads (benchmarks)
 *     memclient copybackloop N   N synchronous 64 MiB downloads (benchmarks)
 *     memclient pinnedcopyloop N, pinnedcopybackloop N   the same with pinned host memory
 *     memclient execinfo         hold 100 MiB, then exec "memclient info"
 *     memclient overflow         hold 600 MiB, then sizes that wrap a 64-bit sum or product
 *     memclient ctxrace N        N threads retain the first primary context at once
 *     memclient many N           up to N live 4 KiB allocations, then free them all
 *     memclient pooldev MIB      allocate MIB MiB from a pool of device 1, device 0 current
 *     memclient graph2dev MIB1 MIB0   launch a graph allocating MIB1 MiB on device 1, then MIB0 on 0
 *     memclient segments         a segment grown by mapping, as PyTorch's expandable segments
 *                                are: the driver's calls through cuGetProcAddress, every result printed */
#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#define MiB (1ull << 20)

static size_t used_now(void)
{
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t));
    return t - f;
}

static int failures;

static void expect_used(const char *what, size_t want)
{
    size_t got = used_now();
    if (got != want) {
        printf("FAIL %s: tenant uses %zu bytes, want %zu\n", what, got, want);
        failures++;
    } else {
        printf("ok %s\n", what);
    }
}

static void paths(void)
{
    CUdeviceptr p;
    size_t base = used_now(), pitch;

    CHECK(cuMemAlloc_v2(&p, 64 * MiB));
    expect_used("cuMemAlloc_v2 charges", base + 64 * MiB);
    CUmemGenericAllocationHandle none;
    CUresult r = cuMemRetainAllocationHandle(&none, (void *)(uintptr_t)p);
    if (r != CUDA_ERROR_INVALID_VALUE) {
        printf("FAIL cuMemRetainAllocationHandle of cuMemAlloc_v2 memory: %d\n", r);
        failures++;
    }
    CHECK(cuMemFree_v2(p));
    expect_used("cuMemFree_v2 releases", base);

    CHECK(cuMemAllocPitch_v2(&p, &pitch, 1000, 1000, 4));
    /* 1024 x 1000 B: sub-allocated in 64 KiB steps at that size, as the driver does. */
    expect_used("cuMemAllocPitch_v2 charges pitch x height as the driver rounds it", base + MiB);
    CHECK(cuMemFree_v2(p));
    expect_used("pitched memory released", base);

    CHECK(cuMemAllocManaged(&p, 32 * MiB, CU_MEM_ATTACH_GLOBAL));
    expect_used("cuMemAllocManaged charges", base + 32 * MiB);
    CHECK(cuMemFree_v2(p));
    expect_used("managed memory released", base);

    /* Stream-ordered: the pool keeps freed memory until synchronization;
     * it grows in 32 MiB steps, as the driver's. */
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemAllocAsync(&p, 16 * MiB, s));
    expect_used("cuMemAllocAsync charges the pool's reservation", base + 32 * MiB);
    CHECK(cuMemFreeAsync(p, s));
    expect_used("cuMemFreeAsync: the pool still holds it", base + 32 * MiB);
    CHECK(cuMemAllocAsync_ptsz(&p, 8 * MiB, s));
    expect_used("cuMemAllocAsync_ptsz reuses the pool's memory", base + 32 * MiB);
    CHECK(cuMemFreeAsync_ptsz(p, s));
    CHECK(cuStreamSynchronize(s));
    expect_used("synchronization gives the pool's memory back", base);

    CUmemoryPool pool;
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CHECK(cuMemPoolCreate(&pool, &pp));
    CHECK(cuMemAllocFromPoolAsync(&p, 24 * MiB, pool, s));
    expect_used("cuMemAllocFromPoolAsync charges", base + 32 * MiB);
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuMemPoolTrimTo(pool, 0));
    expect_used("cuMemPoolTrimTo gives it back", base);
    /* Made the device's current pool: cuMemAllocAsync takes from it. */
    CUmemoryPool def, cur;
    CHECK(cuDeviceGetDefaultMemPool(&def, 0));
    CHECK(cuDeviceSetMemPool(0, pool));
    CHECK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cuMemAllocAsync(&p, 16 * MiB, s));
    expect_used("cuMemAllocAsync from the current pool charges", base + 32 * MiB);
    cuuint64_t in_pool = 0;
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &in_pool));
    printf("%s the current pool; it holds %llu MiB\n", cur == pool ? "ok" : "FAIL another than", in_pool / MiB);
    failures += cur != pool || in_pool != 16 * MiB;
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemAllocFromPoolAsync_ptsz(&p, 4 * MiB, pool, s));
    CHECK(cuMemPoolDestroy(pool));
    expect_used("cuMemPoolDestroy gives everything back", base);
    /* A current pool destroyed: the default one is current again. */
    CHECK(cuDeviceGetMemPool(&cur, 0));
    printf("%s the default pool current after the destroy\n", cur == def ? "ok" : "FAIL not");
    failures += cur != def;

    /* Virtual memory management: held until released and unmapped. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    CHECK(cuMemCreate(&h, 8 * MiB, &prop, 0));
    expect_used("cuMemCreate charges", base + 8 * MiB);
    CHECK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(cuMemMap(va, 4 * MiB, 0, h, 0));
    CHECK(cuMemMap(va + 4 * MiB, 4 * MiB, 4 * MiB, h, 0));
    /* As NCCL frees its buffers: the handle found from an address inside
     * the mapping, one reference more, each released. */
    CUmemGenericAllocationHandle again = 0;
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 5 * MiB)));
    if (again != h) {
        printf("FAIL cuMemRetainAllocationHandle: another handle than cuMemCreate's\n");
        failures++;
    }
    CHECK(cuMemRelease(again));
    CHECK(cuMemRelease(h));
    expect_used("released but still mapped: still held", base + 8 * MiB);
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
    CHECK(cuMemRelease(again));
    r = cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 8 * MiB));
    if (r != CUDA_ERROR_INVALID_VALUE) {
        printf("FAIL cuMemRetainAllocationHandle past the mapping: %d\n", r);
        failures++;
    }
    CHECK(cuMemUnmap(va, 8 * MiB));
    expect_used("unmapped: given back", base);
    CHECK(cuMemAddressFree(va, 8 * MiB));

    CUarray a2, a3;
    CUmipmappedArray mm;
    CUDA_ARRAY_DESCRIPTOR d2 = {1024, 1024, CU_AD_FORMAT_FLOAT, 4};
    CUDA_ARRAY3D_DESCRIPTOR d3 = {256, 256, 16, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CHECK(cuArrayCreate_v2(&a2, &d2));
    expect_used("cuArrayCreate_v2 charges", base + 16 * MiB);
    CHECK(cuArray3DCreate_v2(&a3, &d3));
    expect_used("cuArray3DCreate_v2 charges", base + 17 * MiB);
    CHECK(cuMipmappedArrayCreate(&mm, &d3, 2));
    /* 1 MiB + 128 KiB: whole 2 MiB pages */
    expect_used("cuMipmappedArrayCreate charges every level", base + 17 * MiB + 2 * MiB);
    /* a two-plane (NV12) array: its luma and its half-size chroma */
    CUarray nv;
    CUDA_ARRAY3D_DESCRIPTOR dn = {2048, 2048, 0, CU_AD_FORMAT_NV12, 3, CUDA_ARRAY3D_VIDEO_ENCODE_DECODE};
    CHECK(cuArray3DCreate_v2(&nv, &dn));
    expect_used("an NV12 array charges both planes", base + 17 * MiB + 2 * MiB + 6 * MiB);
    CHECK(cuArrayDestroy(nv));
    CHECK(cuArrayDestroy(a2));
    CHECK(cuArrayDestroy(a3));
    CHECK(cuMipmappedArrayDestroy(mm));
    expect_used("array destroys give back", base);

    /* A created context costs device memory, and takes its allocations
     * with it when destroyed. */
    CUcontext prim, ctx;
    CHECK(cuCtxGetCurrent(&prim));
    CHECK(cuCtxCreate_v2(&ctx, 0, 0));
    size_t with_ctx = used_now();
    if (with_ctx <= base) {
        printf("FAIL cuCtxCreate_v2 charges nothing\n");
        failures++;
    }
    CHECK(cuMemAlloc_v2(&p, 8 * MiB));
    expect_used("allocation in the created context", with_ctx + 8 * MiB);
    CHECK(cuCtxDestroy_v2(ctx));
    CHECK(cuCtxSetCurrent(prim));
    expect_used("cuCtxDestroy_v2 gives back the context and what it held", base);
}

static void exact(void)
{
    size_t f, t;
    CUdeviceptr p;
    CHECK(cuMemGetInfo_v2(&f, &t));
    CUresult over = cuMemAlloc_v2(&p, f + 1);
    CUresult fit = cuMemAlloc_v2(&p, f);
    size_t f2, t2;
    CHECK(cuMemGetInfo_v2(&f2, &t2));
    printf("room %zu: one byte more -> %s, exactly -> %s, then free %zu\n", f,
           over == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "other",
           fit == CUDA_SUCCESS ? "CUDA_SUCCESS" : "other", f2);
}

static size_t chunk;
static CUcontext shared_ctx;

static void *fill_thread(void *arg)
{
    long n = 0;
    CUdeviceptr p;
    CHECK(cuCtxSetCurrent(shared_ctx));
    while (cuMemAlloc_v2(&p, chunk) == CUDA_SUCCESS)
        n++;
    *(long *)arg = n;
    return NULL;
}

static void overflow(void)
{
    CUdeviceptr hold, p;
    size_t pitch;
    CHECK(cuMemAlloc_v2(&hold, 600 * MiB));
    size_t before = used_now();
    printf("cuMemAlloc(SIZE_MAX - 10 MiB) -> %s\n", result_name(cuMemAlloc_v2(&p, SIZE_MAX - 10 * MiB)));
    printf("cuMemAllocPitch(SIZE_MAX/2 x 4) -> %s\n",
           result_name(cuMemAllocPitch_v2(&p, &pitch, SIZE_MAX / 2, 4, 4)));
    CUDA_ARRAY3D_DESCRIPTOR a = {SIZE_MAX / 8, 1u << 20, 1u << 20, CU_AD_FORMAT_FLOAT, 4, 0};
    CUarray arr;
    printf("cuArray3DCreate(2^61 x 2^20 x 2^20 x 16 B) -> %s\n", result_name(cuArray3DCreate_v2(&arr, &a)));
    printf("usage unchanged: %s\n", used_now() == before ? "yes" : "no");
    CUresult r = cuMemAlloc_v2(&p, 1000 * MiB);
    printf("then cuMemAlloc(1000 MiB) -> %s\n", result_name(r));
}

static CUcontext race_ctx[64];

static void *retain_thread(void *arg)
{
    long i = (long)arg;
    CHECK(cuDevicePrimaryCtxRetain(&race_ctx[i], 0));
    return NULL;
}

static void ctxrace(int n)
{
    pthread_t t[64];
    for (long i = 0; i < n && i < 64; i++)
        pthread_create(&t[i], NULL, retain_thread, (void *)i);
    for (int i = 0; i < n && i < 64; i++)
        pthread_join(t[i], NULL);
    CHECK(cuCtxSetCurrent(race_ctx[0]));
    size_t used = used_now();
    for (int i = 0; i < n && i < 64; i++)
        CHECK(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(cuDevicePrimaryCtxRetain(&race_ctx[0], 0));
    CHECK(cuCtxSetCurrent(race_ctx[0]));
    printf("one context charged %zu, after release and retain %zu\n", used, used_now());
}

static void many(long n)
{
    CUdeviceptr *p = calloc((size_t)n, sizeof *p);
    long got = 0;
    CUresult r = CUDA_SUCCESS;
    while (got < n && (r = cuMemAlloc_v2(&p[got], 4096)) == CUDA_SUCCESS)
        got++;
    printf("%ld allocations, then %s, tenant uses %zu\n", got, result_name(r), used_now());
    for (long i = 0; i < got; i++)
        CHECK(cuMemFree_v2(p[i]));
    printf("all freed: tenant uses %zu\n", used_now());
    free(p);
}

static void pooldev(size_t mib)
{
    CUmemoryPool pool;
    CUmemPoolProps pp;
    CUstream s;
    CUdeviceptr p;
    memset(&pp, 0, sizeof pp);
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 1;
    CHECK(cuMemPoolCreate(&pool, &pp));
    CHECK(cuStreamCreate(&s, 0));
    CUresult r = cuMemAllocFromPoolAsync(&p, mib * MiB, pool, s);
    printf("%zu MiB from device 1's pool -> %s\n", mib, result_name(r));
}

static CUgraphNode alloc_node(CUgraph g, int dev, size_t mib)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUgraphNode n;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = mib * MiB;
    CHECK(cuGraphAddMemAllocNode(&n, g, NULL, 0, &p));
    return n;
}

static void graph2dev(size_t mib1, size_t mib0)
{
    CUgraph g;
    CUgraphExec x;
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuGraphCreate(&g, 0));
    alloc_node(g, 1, mib1);
    alloc_node(g, 0, mib0);
    CHECK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    CUresult r = cuGraphLaunch(x, s);
    printf("graph of %zu MiB on device 1 and %zu MiB on device 0: launch -> %s\n", mib1, mib0, result_name(r));
}

/* PyTorch's expandable segments: a reserved range, pages created (the
 * fabric handle type first, then a file descriptor's) and mapped as it
 * grows, a memset and a stream write into it, its range and attributes
 * asked, a handle exported, then all given back. Entry points are looked
 * up as PyTorch does, by name and CUDA version. */
static void segments(void)
{
    CUresult (*write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = NULL;
    CUdriverProcAddressQueryResult q;
    CUresult r = cuGetProcAddress_v2("cuStreamWriteValue32", (void **)&write32, 12000, 0, &q);
    printf("cuStreamWriteValue32 at 12000: %s, %s\n", result_name(r), write32 && q == CU_GET_PROC_ADDRESS_SUCCESS ? "found" : "not found");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t seg = gran > 2 * MiB ? gran : 2 * MiB;
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 4 * seg, 0, 0, 0));
    CUmemGenericAllocationHandle h[4];
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 4; i++) {
        if (i == 2) { /* grown: the memset and write into what is mapped so far */
            CHECK(cuMemsetD32Async(va, 0x01020304u, 2 * seg / 4, s));
            if (write32)
                CHECK(write32(s, va + 8, 77, 0));
            CHECK(cuStreamSynchronize(s));
        }
        CUmemAllocationProp fp = prop;
        fp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
        r = cuMemCreate(&h[i], seg, &fp, 0);
        if (r == CUDA_SUCCESS)
            CHECK(cuMemRelease(h[i]));
        else if (i == 0)
            printf("a fabric handle's pages: refused\n");
        CHECK(cuMemCreate(&h[i], seg, &prop, 0));
        CHECK(cuMemMap(va + i * seg, seg, 0, h[i], 0));
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CHECK(cuMemSetAccess(va + i * seg, seg, &acc, 1));
    }
    unsigned w[4];
    CHECK(cuMemcpyDtoH_v2(w, va, sizeof w));
    printf("first words: %#x %#x %u %#x\n", w[0], w[1], w[2], w[3]);
    CUdeviceptr b = 0;
    size_t n = 0;
    r = cuMemGetAddressRange_v2(&b, &n, va + seg + 100);
    printf("range of an address in the second segment: %s, from its start %s, %s\n", result_name(r),
           b == va + seg ? "yes" : "no", n == seg ? "one segment" : "another size");
    CUdeviceptr start = 0;
    unsigned ord = 9, type = 0;
    CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 3 * seg + 8));
    CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + 3 * seg));
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 3 * seg));
    printf("the last segment: starts at its start %s, device %u, device memory %s\n", start == va + 3 * seg ? "yes" : "no",
           ord, type == CU_MEMORYTYPE_DEVICE ? "yes" : "no");
    int fd = -1;
    r = cuMemExportToShareableHandle(&fd, h[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    printf("a segment exported: %s, %s\n", result_name(r), fd >= 0 ? "a descriptor" : "none");
    if (fd >= 0)
        close(fd);
    CHECK(cuMemUnmap(va, 4 * seg));
    for (int i = 0; i < 4; i++)
        CHECK(cuMemRelease(h[i]));
    CHECK(cuMemAddressFree(va, 4 * seg));
    CHECK(cuStreamDestroy_v2(s));
    printf("given back\n");
}

/* "early": before libc is set up, a lookup through dlsym, as a sanitizer's
 * runtime (AddressSanitizer's __asan_init) makes its interceptors; then as
 * "exact". */
static void *volatile early_found;
static void early(int argc, char **argv, char **envp)
{
    (void)envp;
    if (argc > 1 && !strcmp(argv[1], "early"))
        early_found = dlsym(RTLD_NEXT, "mmap"); /* not a tail call: the caller is this program */
}
__attribute__((section(".preinit_array"), used)) static void (*const early_hook)(int, char **, char **) = early;

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "paths";
    CHECK(cuInit(0));
    if (!strcmp(mode, "ctxrace")) {
        ctxrace(argc > 2 ? atoi(argv[2]) : 16);
        return 0;
    }
    CHECK(cuDevicePrimaryCtxRetain(&shared_ctx, 0));
    CHECK(cuCtxSetCurrent(shared_ctx));
    if (!strcmp(mode, "segments")) {
        segments();
        return 0;
    }
    if (!strcmp(mode, "paths")) {
        paths();
        return failures != 0;
    }
    if (!strcmp(mode, "pitch") && argc > 3) {
        /* cuMemAllocPitch of WIDTH x HEIGHT bytes: what it answers and what
         * it charged, then what is left charged once freed */
        size_t base = used_now(), pitch = 0, w = strtoull(argv[2], NULL, 0), h = strtoull(argv[3], NULL, 0);
        CUdeviceptr p = 0;
        CUresult r = cuMemAllocPitch_v2(&p, &pitch, w, h, 4);
        printf("pitch %zu x %zu: %s, pitch %zu, charged %zu", w, h, result_name(r), r == CUDA_SUCCESS ? pitch : 0,
               used_now() - base);
        if (r == CUDA_SUCCESS)
            CHECK(cuMemFree_v2(p));
        printf(", then %zu\n", used_now() - base);
        return 0;
    }
    if (!strcmp(mode, "exact") || !strcmp(mode, "early")) {
        exact();
        return 0;
    }
    if (!strcmp(mode, "info")) {
        size_t f, t, total;
        CHECK(cuMemGetInfo_v2(&f, &t));
        CHECK(cuDeviceTotalMem_v2(&total, 0));
        printf("free %zu total %zu device_total %zu\n", f, t, total);
        return 0;
    }
    if (!strcmp(mode, "fill") || !strcmp(mode, "threads")) {
        int nthreads = !strcmp(mode, "threads") && argc > 2 ? atoi(argv[2]) : 1;
        chunk = (size_t)atol(argv[!strcmp(mode, "threads") ? 3 : 2]) * MiB;
        char line[16];
        if (!strcmp(mode, "fill")) {
            printf("ctx\n");
            fflush(stdout);
            if (!fgets(line, sizeof line, stdin))
                return 1;
        }
        pthread_t t[64];
        long got[64] = {0}, total = 0;
        for (int i = 0; i < nthreads && i < 64; i++)
            pthread_create(&t[i], NULL, fill_thread, &got[i]);
        for (int i = 0; i < nthreads && i < 64; i++) {
            pthread_join(t[i], NULL);
            total += got[i];
        }
        printf("allocated %ld chunks, tenant uses %zu\nready\n", total, used_now());
        fflush(stdout);
        while (fgets(line, sizeof line, stdin))
            ;
        return 0;
    }
    if (!strcmp(mode, "overflow")) {
        overflow();
        return 0;
    }
    if (!strcmp(mode, "graph2dev")) {
        graph2dev((size_t)atol(argv[2]), (size_t)atol(argv[3]));
        return 0;
    }
    if (!strcmp(mode, "pooldev")) {
        pooldev((size_t)atol(argv[2]));
        return 0;
    }
    if (!strcmp(mode, "many")) {
        many(argc > 2 ? atol(argv[2]) : 1000);
        return 0;
    }
    if (!strcmp(mode, "execinfo")) {
        CUdeviceptr p;
        CHECK(cuMemAlloc_v2(&p, 100 * MiB));
        execl("/proc/self/exe", argv[0], "info", (char *)NULL);
        return 127;
    }
    if (!strcmp(mode, "allocloop")) {
        long n = argc > 2 ? atol(argv[2]) : 10000;
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            CHECK(cuMemAlloc_v2(&p, MiB));
            CHECK(cuMemFree_v2(p));
        }
        return 0;
    }
    if (!strcmp(mode, "eventloop")) {
        long n = argc > 2 ? atol(argv[2]) : 10000;
        for (long i = 0; i < n; i++) {
            CUevent e;
            CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
            CHECK(cuEventDestroy_v2(e));
        }
        CHECK(cuCtxSynchronize());
        return 0;
    }
    if (!strcmp(mode, "uploadloop")) {
        long n = argc > 2 ? atol(argv[2]) : 10000;
        static char src[4096];
        CUdeviceptr p;
        CHECK(cuMemAlloc_v2(&p, sizeof src));
        for (long i = 0; i < n; i++)
            CHECK(cuMemcpyHtoDAsync_v2(p, src, sizeof src, NULL));
        CHECK(cuCtxSynchronize());
        return 0;
    }
    if (!strcmp(mode, "heap")) { /* the device heap against a quota */
        CUcontext ctx;
        CUdeviceptr p;
        size_t f0, f, t;
        CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
        CHECK(cuCtxSetCurrent(ctx));
        CHECK(cuMemGetInfo_v2(&f0, &t));
        printf("heap 2 GiB: %s\n", result_name(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 2048 * MiB)));
        printf("heap 512 MiB: %s", result_name(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 512 * MiB)));
        CHECK(cuMemGetInfo_v2(&f, &t));
        printf(", %zu MiB more in use\n", (size_t)((f0 - f) / MiB));
        CUresult r = cuMemAlloc_v2(&p, 600 * MiB);
        printf("600 MiB beside it: %s\n", result_name(r));
        printf("heap 520 MiB: %s\n", result_name(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 520 * MiB)));
        printf("heap back to 8 MiB: %s", result_name(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * MiB)));
        CHECK(cuMemGetInfo_v2(&f, &t));
        printf(", %zu MiB more in use\n", (size_t)((f0 - f) / MiB));
        r = cuMemAlloc_v2(&p, 600 * MiB);
        printf("600 MiB then: %s\n", result_name(r));
        if (r == CUDA_SUCCESS)
            CHECK(cuMemFree_v2(p));
        /* Stacks: reserved for every thread the device holds at once. */
        printf("stack 16 KiB: %s\n", result_name(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 16 << 10)));
        printf("stack 8 KiB: %s", result_name(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 8 << 10)));
        CHECK(cuMemGetInfo_v2(&f, &t));
        printf(", %zu MiB more in use\n", (size_t)((f0 - f) / MiB));
        printf("stack back to 1 KiB: %s", result_name(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1 << 10)));
        CHECK(cuMemGetInfo_v2(&f, &t));
        printf(", %zu MiB more in use\n", (size_t)((f0 - f) / MiB));
        return 0;
    }
    if (!strcmp(mode, "copyloop") || !strcmp(mode, "copybackloop") || !strcmp(mode, "pinnedcopyloop") ||
        !strcmp(mode, "pinnedcopybackloop")) { /* synchronous 64 MiB copies: bandwidth */
        int pinned = mode[0] == 'p', back = mode[pinned ? 10 : 4] == 'b';
        long n = argc > 2 ? atol(argv[2]) : 10;
        size_t size = 64 * MiB;
        char *host = NULL;
        CUdeviceptr p;
        if (pinned)
            CHECK(cuMemAllocHost_v2((void **)&host, size));
        else
            host = malloc(size);
        if (!host)
            return 1;
        memset(host, 1, size);
        CHECK(cuMemAlloc_v2(&p, size));
        CHECK(cuMemsetD8_v2(p, 1, size));
        for (long i = 0; i < n; i++)
            CHECK(back ? cuMemcpyDtoH_v2(host, p, size) : cuMemcpyHtoD_v2(p, host, size));
        return 0;
    }
    if (!strcmp(mode, "later") && argc > 2) {
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            return 1;
        CUdeviceptr p;
        printf("later %s: %s\n", argv[2], result_name(cuMemAlloc_v2(&p, strtoull(argv[2], NULL, 0) * MiB)));
        return 0;
    }
    if (!strcmp(mode, "steps")) {
        CUdeviceptr held[64];
        int n = 0;
        char line[64];
        unsigned long long mib;
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
            if (sscanf(line, "alloc %llu", &mib) == 1 && n < 64) {
                CUresult r = cuMemAlloc_v2(&held[n], mib * MiB);
                n += r == CUDA_SUCCESS;
                printf("alloc %llu: %s\n", mib, result_name(r));
            } else if (!strncmp(line, "free", 4) && n > 0) {
                printf("free: %s\n", result_name(cuMemFree_v2(held[--n])));
            } else {
                printf("step %s", line);
            }
            fflush(stdout);
        }
        return 0;
    }
    if (!strcmp(mode, "churn")) {
        printf("ready\n");
        fflush(stdout);
        for (;;) {
            CUdeviceptr p;
            if (cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS)
                cuMemFree_v2(p);
        }
    }
    fprintf(stderr, "memclient: unknown mode %s\n", mode);
    return 2;
}
