/* One allocation pattern pushed until refused, under a quota, then held for
 * a moment so that a watcher reads the process's peak from NVML (what
 * nvidia-smi shows). scripts/gpu-e2e.sh (section drvmem) checks that peak
 * against the quota.
 *     drvquota blocks BYTES [MAX]     cuMemAlloc blocks of BYTES
 *     drvquota pitch WIDTH HEIGHT     cuMemAllocPitch (4-byte elements)
 *     drvquota array1d WIDTH          1D float arrays
 *     drvquota array2d WIDTH HEIGHT   2D float arrays
 *     drvquota pool BYTES             cuMemAllocAsync from the default pool
 *     drvquota vmm                    cuMemCreate of the minimum granularity
 *     drvquota module CUBIN           load it, then 64 MiB blocks
 *     drvquota local CUBIN KERNEL     launch KERNEL(int *, int) on 32 threads, then 64 MiB blocks
 *     drvquota pending COUNT          set the pending-launch limit, then 64 MiB blocks
 * Prints one line: what was done, how many times, and the result that
 * stopped it. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *name(CUresult r)
{
    const char *s = "?";
    cuGetErrorName(r, &s);
    return s;
}

#define MAXN 200000
static CUdeviceptr ptrs[MAXN];

static void blocks(size_t size, long max, const char *after)
{
    long n = 0;
    CUresult r = CUDA_SUCCESS;
    while (n < max && (r = cuMemAlloc(&ptrs[n], size)) == CUDA_SUCCESS)
        n++;
    printf("%s%s%zu-byte blocks: %ld, then %s\n", after, *after ? "; " : "", size, n,
           n == max ? "the cap" : name(r));
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        printf("no context\n");
        return 1;
    }
    long n = 0;
    CUresult r = CUDA_SUCCESS;
    char line[256] = "";
    if (!strcmp(mode, "blocks")) {
        blocks(strtoull(argv[2], NULL, 10), argc > 3 ? atol(argv[3]) : MAXN, "");
    } else if (!strcmp(mode, "pitch")) {
        size_t pitch, w = strtoull(argv[2], NULL, 10), h = strtoull(argv[3], NULL, 10);
        while (n < MAXN && (r = cuMemAllocPitch(&ptrs[n], &pitch, w, h, 4)) == CUDA_SUCCESS)
            n++;
        printf("pitched %zux%zu: %ld, then %s\n", w, h, n, name(r));
    } else if (!strcmp(mode, "array1d") || !strcmp(mode, "array2d")) {
        CUDA_ARRAY3D_DESCRIPTOR d = {strtoull(argv[2], NULL, 10), argc > 3 ? strtoull(argv[3], NULL, 10) : 0, 0,
                                     CU_AD_FORMAT_FLOAT, 1, 0};
        CUarray a;
        while (n < MAXN && (r = cuArray3DCreate(&a, &d)) == CUDA_SUCCESS)
            n++;
        printf("%s %zux%zu: %ld, then %s\n", mode, d.Width, d.Height, n, name(r));
    } else if (!strcmp(mode, "pool")) {
        size_t size = strtoull(argv[2], NULL, 10);
        CUstream s;
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
        while (n < MAXN && (r = cuMemAllocAsync(&ptrs[n], size, s)) == CUDA_SUCCESS && !cuStreamSynchronize(s))
            n++;
        printf("pool blocks of %zu: %ld, then %s\n", size, n, name(r));
    } else if (!strcmp(mode, "vmm")) {
        CUmemAllocationProp p;
        memset(&p, 0, sizeof p);
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = dev;
        size_t g = 0;
        cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        CUmemGenericAllocationHandle h;
        while (n < MAXN && (r = cuMemCreate(&h, g, &p, 0)) == CUDA_SUCCESS)
            n++;
        printf("cuMemCreate of %zu: %ld, then %s\n", g, n, name(r));
    } else if (!strcmp(mode, "module") || !strcmp(mode, "local")) {
        CUmodule m;
        r = cuModuleLoad(&m, argv[2]);
        snprintf(line, sizeof line, "load %s: %s", argv[2], name(r));
        if (r == CUDA_SUCCESS && !strcmp(mode, "local")) {
            CUfunction f;
            CUdeviceptr out;
            int seed = 7, lsz = 0;
            cuModuleGetFunction(&f, m, argv[3]);
            cuFuncGetAttribute(&lsz, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
            cuMemAlloc(&out, 4096);
            void *args[] = {&out, &seed};
            r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL);
            CUresult s = r == CUDA_SUCCESS ? cuStreamSynchronize(NULL) : r;
            snprintf(line + strlen(line), sizeof line - strlen(line), "; launch of %s (%d B local): %s", argv[3],
                     lsz, name(s));
        }
        blocks(64u << 20, MAXN, line);
    } else if (!strcmp(mode, "pending")) {
        r = cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, strtoull(argv[2], NULL, 10));
        snprintf(line, sizeof line, "pending launches %s: %s", argv[2], name(r));
        blocks(64u << 20, MAXN, line);
    } else {
        return 2;
    }
    fflush(stdout);
    usleep(300000); /* the peak, held for the watcher's samples */
    return 0;
}
