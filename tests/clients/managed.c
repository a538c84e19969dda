/* Managed memory as a program uses it: written on the host, read and
 * written by kernels, memsets and copies, read back on the host after a
 * synchronization (of the context, a stream, an event, a synchronous copy),
 * prefetched and advised, its pointer and range attributes asked. Prints
 * what the program sees, so local and remote runs compare.
 *   managed          the run above
 *   managed attrs    the device attributes a program checks first
 *   managed taken    an allocation at an address the program holds already:
 *                    it must fail, never hand out memory the program
 *                    cannot reach
 *   managed threads  threads, each with its stream and its memory, writing
 *                    it, launching on it and reading the results after
 *                    their own stream's synchronization, all at once */
#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static int range_int(CUmem_range_attribute attr, CUdeviceptr p, size_t n)
{
    int v = 12345;
    CHECK(cuMemRangeGetAttribute(&v, sizeof v, attr, p, n));
    return v;
}

static int attrs(void)
{
    int v;
    primary_context();
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0));
    printf("managed memory: %d\n", v);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0));
    printf("concurrent managed access: %d\n", v);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0));
    printf("pageable memory access: %d\n", v);
    return 0;
}

/* The address of an allocation just freed, held by the program: a server
 * that gives it again must not have it handed out. */
static int taken(void)
{
    primary_context();
    size_t n = 4 << 20;
    CUdeviceptr p, q = 0;
    CHECK(cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemFree_v2(p));
    void *mine = mmap((void *)(uintptr_t)p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                      -1, 0);
    if (mine != (void *)(uintptr_t)p) {
        printf("the address could not be taken\n");
        return 1;
    }
    memset(mine, 7, n);
    CUresult r = cuMemAllocManaged(&q, n, CU_MEM_ATTACH_GLOBAL);
    const char *name = "?";
    cuGetErrorName(r, &name);
    if (r == CUDA_SUCCESS) {
        /* Memory it hands out must be the program's to touch. */
        memset((void *)(uintptr_t)q, 1, n);
        printf("again: %s, at %s address\n", name, q == p ? "the same" : "another");
    } else {
        printf("again: %s, pointer %s\n", name, q ? "set" : "0");
    }
    printf("the program's bytes: %d\n", ((unsigned char *)mine)[n - 1]);
    return 0;
}

static CUcontext ctx;
static CUfunction vecadd_fn;

static void *worker(void *arg)
{
    long t = (long)arg, wrong = 0;
    enum { M = 4096, ROUNDS = 40 };
    CUstream s;
    CUdeviceptr da, db, dc;
    CUresult e;
    if ((e = cuCtxSetCurrent(ctx)) || (e = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) ||
        (e = cuMemAllocManaged(&da, M * sizeof(float), CU_MEM_ATTACH_GLOBAL)) ||
        (e = cuMemAllocManaged(&db, M * sizeof(float), CU_MEM_ATTACH_GLOBAL)) ||
        (e = cuMemAllocManaged(&dc, M * sizeof(float), CU_MEM_ATTACH_GLOBAL)) ||
        (e = cuStreamAttachMemAsync(s, da, 0, CU_MEM_ATTACH_SINGLE)) || (e = cuStreamAttachMemAsync(s, db, 0, CU_MEM_ATTACH_SINGLE)) ||
        (e = cuStreamAttachMemAsync(s, dc, 0, CU_MEM_ATTACH_SINGLE)) || (e = cuStreamSynchronize(s))) {
        fprintf(stderr, "thread %ld, setting up: %s\n", t, result_name(e));
        return (void *)-1L;
    }
    float *a = (float *)(uintptr_t)da, *b = (float *)(uintptr_t)db, *c = (float *)(uintptr_t)dc;
    int n = M;
    void *params[] = {&da, &db, &dc, &n};
    for (int r = 0; r < ROUNDS; r++) {
        for (int j = 0; j < M; j++) {
            a[j] = (float)(r * 7 + j);
            b[j] = (float)(t * 1000 + r);
        }
        e = cuLaunchKernel(vecadd_fn, M / 256, 1, 1, 256, 1, 1, 0, s, params, NULL);
        if (e == CUDA_SUCCESS)
            e = cuStreamSynchronize(s);
        if (e != CUDA_SUCCESS) {
            fprintf(stderr, "thread %ld, round %d: %s\n", t, r, result_name(e));
            return (void *)-1L;
        }
        for (int j = 0; j < M; j++)
            wrong += c[j] != (float)(r * 7 + j) + (float)(t * 1000 + r);
    }
    cuMemFree_v2(da);
    cuMemFree_v2(db);
    cuMemFree_v2(dc);
    cuStreamDestroy_v2(s);
    return (void *)wrong;
}

static int threads(void)
{
    enum { T = 4 };
    CUmodule mod;
    pthread_t th[T];
    ctx = primary_context();
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&vecadd_fn, mod, "vecadd"));
    for (long t = 0; t < T; t++)
        pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < T; t++) {
        void *wrong;
        pthread_join(th[t], &wrong);
        printf("thread %d: %ld results wrong\n", t, (long)wrong);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "threads"))
        return threads();
    if (argc > 1 && !strcmp(argv[1], "attrs"))
        return attrs();
    if (argc > 1 && !strcmp(argv[1], "taken"))
        return taken();
    CUmodule mod;
    CUfunction vecadd, fill;
    CUstream st;
    CUevent ev;
    primary_context();
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&vecadd, mod, "vecadd"));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, 0));

    /* Host writes, a kernel reads them and writes, the host reads after the
     * context's synchronization. */
    enum { N = 1 << 18 }; /* 1 MiB of floats each */
    CUdeviceptr da, db, dc;
    CHECK(cuMemAllocManaged(&da, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&db, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocManaged(&dc, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    float *a = (float *)(uintptr_t)da, *b = (float *)(uintptr_t)db, *c = (float *)(uintptr_t)dc;
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)(2 * (i % 1000));
    }
    int n = N;
    void *params[] = {&da, &db, &dc, &n};
    CHECK(cuLaunchKernel(vecadd, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += c[i];
    printf("after the context's synchronization: c[1]=%g c[%d]=%g sum=%.0f\n", c[1], N - 1, c[N - 1], sum);

    /* The host changes a few elements; the device sees them, a stream's
     * synchronization brings its writes back. */
    a[5] = 1000, b[N - 2] = 0.5f;
    CHECK(cuLaunchKernel(vecadd, N / 256, 1, 1, 256, 1, 1, 0, st, params, NULL));
    CHECK(cuStreamSynchronize(st));
    printf("after the program's changes: c[5]=%g c[%d]=%g\n", c[5], N - 2, c[N - 2]);

    /* A kernel writes, an event's synchronization. */
    unsigned v = 77;
    int m = 8;
    void *fparams[] = {&dc, &v, &m};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, st, fparams, NULL));
    CHECK(cuEventRecord(ev, st));
    CHECK(cuEventSynchronize(ev));
    printf("after an event: %u %u %g\n", ((unsigned *)c)[0], ((unsigned *)c)[7], c[8]);

    /* Larger than one round trip carries: a memset, read at its end. */
    size_t big = 9u << 20;
    CUdeviceptr dbig;
    CHECK(cuMemAllocManaged(&dbig, big, CU_MEM_ATTACH_GLOBAL));
    unsigned char *g = (unsigned char *)(uintptr_t)dbig;
    g[big - 1] = 9;
    CHECK(cuMemsetD8Async(dbig, 3, big - 1, st));
    CHECK(cuStreamSynchronize(st));
    printf("a large one: %d %d %d\n", g[0], g[big - 2], g[big - 1]);

    /* Copies: device to managed, managed to device and to the host, with a
     * synchronous copy as the synchronization. */
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, 64));
    CHECK(cuMemsetD32_v2(dev, 5, 16));
    CHECK(cuMemcpyDtoD_v2(dbig + 64, dev, 64));
    unsigned back[4];
    g[200] = 42;
    CHECK(cuMemcpyDtoH_v2(back, dbig + 192, sizeof back));
    printf("copied: %#x %#x %d %d\n", back[0], back[2], g[64], g[200]);
    CHECK(cuMemcpy(dev, dbig + 200, 4));
    CHECK(cuMemcpyDtoH_v2(back, dev, 4));
    printf("copied from managed memory: %u\n", back[0] & 0xff);

    /* A system call writes managed memory (no fault handler in the way),
     * a copy on the device reads what it wrote. */
    int fds[2];
    if (pipe(fds) || write(fds[1], "managed", 8) != 8 || read(fds[0], g + 4096, 8) != 8) {
        printf("the pipe failed\n");
        return 1;
    }
    close(fds[0]);
    close(fds[1]);
    char word[8];
    CHECK(cuMemcpyDtoD_v2(dev, dbig + 4096, 8));
    CHECK(cuMemcpyDtoH_v2(word, dev, 8));
    printf("read(2) into it, copied on the device: %s\n", word);

    /* Prefetches and advice, and what the range says of them. */
    CHECK(cuMemAdvise(da, N * sizeof(float), CU_MEM_ADVISE_SET_READ_MOSTLY, 0));
    CHECK(cuMemAdvise(da, N * sizeof(float), CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
    CHECK(cuMemAdvise(da, N * sizeof(float), CU_MEM_ADVISE_SET_ACCESSED_BY, CU_DEVICE_CPU));
    CHECK(cuMemPrefetchAsync(da, N * sizeof(float), 0, st));
    CHECK(cuStreamSynchronize(st));
    printf("read mostly %d, preferred %d, last prefetched to %d\n",
           range_int(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, da, N * sizeof(float)),
           range_int(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, da, N * sizeof(float)),
           range_int(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, da, N * sizeof(float)));
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    CHECK(cuMemPrefetchAsync_v2(db, N * sizeof(float), host, 0, st));
    CHECK(cuMemAdvise_v2(db, N * sizeof(float), CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    CHECK(cuStreamSynchronize(st));
    int by[3], pref = 0, last = 0;
    void *data[] = {by, &pref, &last};
    size_t sizes[] = {sizeof by, sizeof pref, sizeof last};
    CUmem_range_attribute which[] = {CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION,
                                     CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION};
    CHECK(cuMemRangeGetAttributes(data, sizes, which, 3, da, N * sizeof(float)));
    printf("accessed by %d %d %d\n", by[0], by[1], by[2]);
    CHECK(cuMemRangeGetAttributes(data, sizes, which, 3, db, N * sizeof(float)));
    printf("the second: preferred %d, last prefetched to %d\n", pref, last);
    printf("a range of device memory: %s\n",
           cuMemRangeGetAttribute(&pref, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, dev, 64) == CUDA_ERROR_INVALID_VALUE
               ? "CUDA_ERROR_INVALID_VALUE"
               : "answered");
    /* Still the host's to read after prefetches. */
    printf("after prefetches: a[5]=%g b[%d]=%g\n", a[5], N - 2, b[N - 2]);

    /* What the pointer says it is. */
    unsigned managed = 0, dmanaged = 7;
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dc + 12));
    CUpointer_attribute pa[] = {CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *pd[] = {&dmanaged};
    CHECK(cuPointerGetAttributes(1, pa, pd, dev));
    printf("is managed: %u; device memory: %u\n", managed, dmanaged);

    /* A module's and a library's managed variables (__managed__): their
     * first bytes are the module's, the program's writes reach copies,
     * memsets reach the program. */
    static const char VARS[] = "FLEXGV-SIM-MODULE\n"
                               "kernel fill 5 builtin=fill\n"
                               "managed counter 16 5\n"
                               "managed table 20000 1\n";
    CUmodule vm;
    CUlibrary vl;
    CUdeviceptr pc, pt;
    size_t nc, nt;
    CHECK(cuModuleLoadData(&vm, VARS));
    CHECK(cuModuleGetGlobal_v2(&pc, &nc, vm, "counter"));
    unsigned *counter = (unsigned *)(uintptr_t)pc;
    printf("a module's variable: %zu bytes, %#x\n", nc, counter[0]);
    counter[1] = 10;
    CHECK(cuMemcpyDtoH_v2(back, pc, 8));
    CHECK(cuMemsetD32_v2(pc + 8, 12, 2));
    CHECK(cuCtxSynchronize());
    printf("copied %u %u, then %u %u\n", back[0] & 0xff, back[1], counter[2], counter[3]);
    /* with no context current, as cudart 13 asks */
    CUcontext was;
    CHECK(cuCtxPopCurrent_v2(&was));
    CHECK(cuLibraryLoadData(&vl, VARS, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetManaged(&pt, &nt, vl, "table"));
    CHECK(cuCtxPushCurrent_v2(was));
    unsigned char *table = (unsigned char *)(uintptr_t)pt;
    CUdeviceptr again;
    CHECK(cuLibraryGetManaged(&again, NULL, vl, "table"));
    printf("a library's variable: %zu bytes, %d %d, the same again: %s\n", nt, table[0], table[nt - 1],
           again == pt ? "yes" : "no");
    CHECK(cuMemsetD8_v2(pt + 100, 7, 100));
    CHECK(cuCtxSynchronize());
    printf("after a memset: %d %d %d\n", table[99], table[100], table[199]);
    CHECK(cuModuleUnload(vm));
    CHECK(cuLibraryUnload(vl));

    CHECK(cuMemFree_v2(da));
    CHECK(cuMemFree_v2(db));
    CHECK(cuMemFree_v2(dc));
    CHECK(cuMemFree_v2(dbig));
    CHECK(cuMemFree_v2(dev));
    CHECK(cuEventDestroy_v2(ev));
    CHECK(cuStreamDestroy_v2(st));
    printf("managed: ok\n");
    return 0;
}
