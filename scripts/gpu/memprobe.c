/* How the driver spends device memory, path by path: each pattern is
 * measured by the process's own figure in NVML (what nvidia-smi shows) and
 * by cuMemGetInfo, before and after, per block. The table the shim and the
 * simulated GPU charge from (include/flexgv/drvmem.h) is read off its output.
 *     memprobe DIR_WITH_CUBINS
 * The cubins come from memprobe_kernels.cu: g1.cubin, g4097.cubin,
 * g2m1.cubin, g1g.cubin (a global of 1 B, 4097 B, 2 MiB + 1 B, 1 GiB). */
#include <cuda.h>
#include <nvml.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CK(x)                                                                     \
    do {                                                                          \
        CUresult r_ = (x);                                                        \
        if (r_ != CUDA_SUCCESS) {                                                 \
            const char *s_ = "?";                                                 \
            cuGetErrorName(r_, &s_);                                              \
            printf("error %s at %s:%d: %s\n", s_, __FILE__, __LINE__, #x);        \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static nvmlDevice_t nvdev;
static CUdevice dev;
static CUstream st;
static const char *dir;

static long long nvml_used(void)
{
    nvmlProcessInfo_t p[64];
    unsigned n = 64;
    if (nvmlDeviceGetComputeRunningProcesses(nvdev, &n, p) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < n; i++)
        if (p[i].pid == (unsigned)getpid())
            return (long long)p[i].usedGpuMemory;
    return n == 1 ? (long long)p[0].usedGpuMemory : -1;
}

static long long info_used(void)
{
    size_t f, t;
    return cuMemGetInfo(&f, &t) == CUDA_SUCCESS ? (long long)(t - f) : -1;
}

struct snap { long long nv, mi; };
static struct snap snap(void)
{
    cuStreamSynchronize(st);
    cuStreamSynchronize(0);
    struct snap s = {nvml_used(), info_used()};
    return s;
}

/* One line: pattern, bytes asked per block, blocks, what each took by NVML
 * and by cuMemGetInfo (bytes), then what stayed after they were freed. */
static void report(const char *what, unsigned long long bytes, int n, struct snap a, struct snap b, struct snap c)
{
    printf("%-14s bytes=%-11llu n=%-5d nvml_per=%-12.0f info_per=%-12.0f nvml_total=%-12lld left_after_free=%lld\n",
           what, bytes, n, (double)(b.nv - a.nv) / n, (double)(b.mi - a.mi) / n, b.nv - a.nv, c.nv - a.nv);
    fflush(stdout);
}

static CUdeviceptr ptrs[8192];

static void plain(const char *what, unsigned long long s, int n)
{
    struct snap a = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemAlloc(&ptrs[i], s));
    struct snap b = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemFree(ptrs[i]));
    report(what, s, n, a, b, snap());
}

static void pitched(size_t w, size_t h, int n)
{
    size_t pitch = 0;
    struct snap a = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemAllocPitch(&ptrs[i], &pitch, w, h, 4));
    struct snap b = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemFree(ptrs[i]));
    char what[64];
    snprintf(what, sizeof what, "pitch%zux%zu", w, h);
    report(what, (unsigned long long)pitch * h, n, a, b, snap());
    printf("  pitch %zu for width %zu\n", pitch, w);
}

static CUarray arrs[1024];
static void arrays(const char *what, size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned bpe, int n)
{
    CUDA_ARRAY3D_DESCRIPTOR a3 = {w, h, d, f, ch, 0};
    struct snap a = snap();
    for (int i = 0; i < n; i++)
        CK(cuArray3DCreate(&arrs[i], &a3));
    struct snap b = snap();
    for (int i = 0; i < n; i++)
        CK(cuArrayDestroy(arrs[i]));
    report(what, (unsigned long long)w * (h ? h : 1) * (d ? d : 1) * ch * bpe, n, a, b, snap());
}

static void pools(const char *what, unsigned long long s, int n)
{
    CUmemoryPool pool;
    CK(cuDeviceGetDefaultMemPool(&pool, dev));
    struct snap a = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemAllocAsync(&ptrs[i], s, st));
    struct snap b = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemFreeAsync(ptrs[i], st));
    struct snap c = snap();
    report(what, s, n, a, b, c);
    CK(cuMemPoolTrimTo(pool, 0));
    struct snap d = snap();
    printf("  after trim: %lld\n", d.nv - a.nv);
}

static void vmm(int n)
{
    CUmemAllocationProp p = {0};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    size_t gmin = 0, grec = 0;
    CK(cuMemGetAllocationGranularity(&gmin, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CK(cuMemGetAllocationGranularity(&grec, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("vmm granularity minimum=%zu recommended=%zu\n", gmin, grec);
    CUmemGenericAllocationHandle h[64];
    struct snap a = snap();
    for (int i = 0; i < n; i++)
        CK(cuMemCreate(&h[i], gmin, &p, 0));
    struct snap b = snap();
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, gmin * n, 0, 0, 0));
    for (int i = 0; i < n; i++)
        CK(cuMemMap(va + gmin * i, gmin, 0, h[i], 0));
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(va, gmin * n, &ad, 1));
    struct snap m = snap();
    printf("  mapped and accessible: %lld more\n", m.nv - b.nv);
    CK(cuMemUnmap(va, gmin * n));
    CK(cuMemAddressFree(va, gmin * n));
    for (int i = 0; i < n; i++)
        CK(cuMemRelease(h[i]));
    report("vmm-create", gmin, n, a, b, snap());
}

/* A limit set, then a kernel that uses what it reserves launched (user,
 * with an int that keeps it from doing anything), then the default again. */
static void limit(const char *what, CUlimit l, size_t v, CUfunction user)
{
    size_t def = 0;
    if (cuCtxGetLimit(&def, l) != CUDA_SUCCESS) {
        printf("limit %s: not supported\n", what);
        return;
    }
    struct snap a = snap();
    CUresult r = cuCtxSetLimit(l, v);
    struct snap b = snap();
    int seed = 7;
    void *args[] = {&seed};
    CUresult lr = user ? cuLaunchKernel(user, 1, 1, 1, 1, 1, 1, 0, st, args, NULL) : CUDA_SUCCESS;
    struct snap c = snap();
    size_t now = 0;
    cuCtxGetLimit(&now, l);
    cuCtxSetLimit(l, def);
    if (user)
        cuLaunchKernel(user, 1, 1, 1, 1, 1, 1, 0, st, args, NULL);
    struct snap d = snap();
    printf("limit %-13s default=%zu set=%zu (%d, reads %zu): at set %lld, after a launch using it (%d) %lld, back to "
           "default %lld\n",
           what, def, v, r, now, b.nv - a.nv, lr, c.nv - a.nv, d.nv - a.nv);
    fflush(stdout);
}

static CUmodule load(const char *name, struct snap *a, struct snap *b)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CUmodule m;
    *a = snap();
    CK(cuModuleLoad(&m, path));
    *b = snap();
    return m;
}

static void module(const char *name)
{
    struct snap a, b;
    CUmodule m = load(name, &a, &b);
    CUdeviceptr g;
    size_t gs = 0;
    CK(cuModuleGetGlobal(&g, &gs, m, "big_global"));
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "touch"));
    CUdeviceptr out;
    CK(cuMemAlloc(&out, 4096));
    struct snap c = snap();
    void *args[] = {&out};
    CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, args, NULL));
    struct snap d = snap();
    CK(cuMemFree(out));
    CK(cuModuleUnload(m));
    struct snap e = snap();
    printf("module %-12s global=%zu: at load %lld, after its first launch %lld more, left after unload %lld\n", name,
           gs, b.nv - a.nv, d.nv - c.nv, e.nv - a.nv);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    dir = argc > 1 ? argv[1] : ".";
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    if (nvmlInit() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex(0, &nvdev) != NVML_SUCCESS) {
        printf("no NVML\n");
        return 1;
    }
    int drv = 0, sms = 0, tpsm = 0;
    cuDriverGetVersion(&drv);
    cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    cuDeviceGetAttribute(&tpsm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
    char dname[128];
    cuDeviceGetName(dname, sizeof dname, dev);
    printf("device %s driver_api %d sms %d threads_per_sm %d resident_threads %d\n", dname, drv, sms, tpsm, sms * tpsm);
    CUcontext ctx;
    struct snap z = {nvml_used(), 0};
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    struct snap c0 = snap();
    printf("context: %lld (nvml before %lld)\n", c0.nv - (z.nv < 0 ? 0 : z.nv), z.nv);

    struct snap a, b;
    CUmodule small = load("g1.cubin", &a, &b);
    CUfunction nothing;
    CK(cuModuleGetFunction(&nothing, small, "nothing"));
    void *nargs[] = {&(int){0}};
    CK(cuLaunchKernel(nothing, 1, 1, 1, 1, 1, 1, 0, st, nargs, NULL));
    printf("module g1.cubin with its first launch: %lld\n", snap().nv - a.nv);

    static const unsigned long long sizes[] = {1, 8, 256, 512, 513, 1024, 4096, 65536, 65537, 131072, 524288,
        1048576, 1048577, 2097151, 2097152, 2097153, 4194304, 4194305, 6291457, 33554433, 67108865,
        1073741824ull, 1073741825ull};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned long long s = sizes[i];
        int n = s <= 65536 ? 8192 : s <= (2u << 20) + 1 ? 256 : s <= (64u << 20) + 1 ? 32 : 2;
        plain("cuMemAlloc", s, n);
    }
    pitched(1, 1024, 64);
    pitched(100, 1024, 64);
    pitched(513, 1024, 64);
    pitched(1000, 1000, 64);
    pitched(4097, 1024, 16);
    pitched(65536, 1024, 16);
    arrays("array1d-f32", 65536, 0, 0, CU_AD_FORMAT_FLOAT, 1, 4, 64);
    arrays("array2d-16u8", 16, 16, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 1, 1024);
    arrays("array2d-f32", 1000, 1000, 0, CU_AD_FORMAT_FLOAT, 1, 4, 64);
    arrays("array2d-4u8", 4096, 4096, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 1, 16);
    arrays("array3d-f32", 128, 128, 128, CU_AD_FORMAT_FLOAT, 1, 4, 16);
    {
        struct snap ma = snap();
        for (int i = 0; i < 4; i++)
            CK(cuMemAllocManaged(&ptrs[i], 64u << 20, CU_MEM_ATTACH_GLOBAL));
        struct snap mb = snap();
        for (int i = 0; i < 4; i++)
            CK(cuMemFree(ptrs[i]));
        report("managed", 64u << 20, 4, ma, mb, snap());
    }
    pools("pool", 1024, 1024);
    pools("pool", 2097153, 64);
    pools("pool", 67108864, 8);
    vmm(16);

    CUfunction up, um, ul = NULL;
    CK(cuModuleGetFunction(&up, small, "use_printf"));
    CK(cuModuleGetFunction(&um, small, "use_malloc"));
    limit("stack", CU_LIMIT_STACK_SIZE, 4096, nothing);
    limit("stack", CU_LIMIT_STACK_SIZE, 16385, nothing);
    limit("printf_fifo", CU_LIMIT_PRINTF_FIFO_SIZE, 64u << 20, up);
    limit("printf_fifo", CU_LIMIT_PRINTF_FIFO_SIZE, (256u << 20) + 1, up);
    limit("heap", CU_LIMIT_MALLOC_HEAP_SIZE, 64u << 20, um);
    limit("heap", CU_LIMIT_MALLOC_HEAP_SIZE, (1u << 30) + 1, um);
    {
        /* Device-side launches: the cubin linked with the device runtime. */
        char path[512], lib[512];
        snprintf(path, sizeof path, "%s/cdp.cubin", dir);
        snprintf(lib, sizeof lib, "%s/lib64/libcudadevrt.a", getenv("CUDA") ? getenv("CUDA") : "/usr/local/cuda");
        CUlinkState ls;
        void *img = NULL;
        size_t isz = 0;
        CUmodule cm;
        if (cuLinkCreate(0, NULL, NULL, &ls) == CUDA_SUCCESS &&
            cuLinkAddFile(ls, CU_JIT_INPUT_CUBIN, path, 0, NULL, NULL) == CUDA_SUCCESS &&
            cuLinkAddFile(ls, CU_JIT_INPUT_LIBRARY, lib, 0, NULL, NULL) == CUDA_SUCCESS &&
            cuLinkComplete(ls, &img, &isz) == CUDA_SUCCESS && cuModuleLoadData(&cm, img) == CUDA_SUCCESS &&
            cuModuleGetFunction(&ul, cm, "use_launch") == CUDA_SUCCESS) {
            limit("pending", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 32768, ul);
            limit("pending", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1u << 20, ul);
        } else {
            printf("limit pending: the device runtime could not be linked\n");
        }
    }
    limit("pending-plain", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1u << 20, nothing);

    module("g4097.cubin");
    module("g2m1.cubin");
    module("g1g.cubin");

    /* Local memory: grown at the launch that needs it, for every thread
     * the device holds at once; kept afterwards. */
    static const char *lk[] = {"local1k", "local4k", "local16k", "local64k"};
    CUdeviceptr out;
    CK(cuMemAlloc(&out, 4096));
    for (int i = 0; i < 4; i++) {
        CUfunction f;
        CK(cuModuleGetFunction(&f, small, lk[i]));
        int lsz = 0;
        CK(cuFuncGetAttribute(&lsz, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
        struct snap la = snap();
        int seed = 7;
        void *args[] = {&out, &seed};
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, args, NULL));
        struct snap lb = snap();
        CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, st, args, NULL));
        struct snap lc = snap();
        printf("local %-9s local_size=%d: first launch %lld (%.1f per resident thread), second %lld\n", lk[i], lsz,
               lb.nv - la.nv, (double)(lb.nv - la.nv) / ((double)sms * tpsm), lc.nv - lb.nv);
        fflush(stdout);
    }
    limit("stack-after", CU_LIMIT_STACK_SIZE, 16385, nothing);
    limit("stack-after", CU_LIMIT_STACK_SIZE, 131072, nothing);
    /* A fresh context: one launch straight to 64 KiB. */
    CUcontext c2;
    struct snap ca = snap();
    CK(cuCtxCreate(&c2, NULL, 0, dev));
    struct snap cb = snap();
    CUmodule m2 = load("g1.cubin", &a, &b);
    CUfunction f64;
    CK(cuModuleGetFunction(&f64, m2, "local64k"));
    CUdeviceptr o2;
    CK(cuMemAlloc(&o2, 4096));
    struct snap la = snap();
    int seed = 3;
    void *args[] = {&o2, &seed};
    CK(cuLaunchKernel(f64, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    struct snap lb = snap();
    printf("fresh context: %lld; local64k at its first launch: %lld\n", cb.nv - ca.nv, lb.nv - la.nv);
    CK(cuCtxDestroy(c2));
    CK(cuCtxSetCurrent(ctx));
    printf("after destroying it: %lld from before it\n", snap().nv - ca.nv);
    return 0;
}
