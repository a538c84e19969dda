/* What a GEMM library (cuBLASLt) asks of the driver, modelled: the old
 * ABIs it looks up by name when it starts, its libraries loaded with
 * options but no option values, the attributes and functions of their
 * kernels before every launch, tensor maps, and pitched 2D copies; and the
 * context questions a runtime asks around them. Prints what it gets, so
 * that a test can compare a remote run with a local one; the last line
 * (the names looked up) is only the same as the real driver's remotely.
 *     blaslike [REPEAT]   each question asked REPEAT more times (round trips) */
#include "common.h"

#include <stdint.h>

static int repeat;

/* A 2D copy's description: each side host (h) or device (d), x/y offsets. */
static CUDA_MEMCPY2D shape(const void *sh, CUdeviceptr sd, size_t sx, size_t sy, size_t sp, void *dh, CUdeviceptr dd,
                           size_t dx, size_t dy, size_t dp, size_t w, size_t rows)
{
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = sh ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcHost = sh, c.srcDevice = sd, c.srcXInBytes = sx, c.srcY = sy, c.srcPitch = sp;
    c.dstMemoryType = dh ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.dstHost = dh, c.dstDevice = dd, c.dstXInBytes = dx, c.dstY = dy, c.dstPitch = dp;
    c.WidthInBytes = w, c.Height = rows;
    return c;
}

static unsigned sum(const unsigned char *p, size_t n)
{
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s = s * 31 + p[i];
    return s;
}

static void copies(void)
{
    /* 8 rows of 12 bytes, put at x 4, row 1 of a 64-byte pitch on the
     * device, read back into a 16-byte pitch, copied on the device, and
     * between host buffers; a pitch under the width is refused. */
    unsigned char src[8 * 12], back[8 * 16], host2[8 * 16], whole[8 * 12];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    memset(back, 0xee, sizeof back);
    memset(host2, 0xdd, sizeof host2);
    CUdeviceptr d, d2;
    CHECK(cuMemAlloc_v2(&d, 64 * 10));
    CHECK(cuMemAlloc_v2(&d2, 64 * 10));
    CHECK(cuMemsetD8_v2(d, 0, 64 * 10));
    CUDA_MEMCPY2D up = shape(src, 0, 0, 0, 12, NULL, d, 4, 1, 64, 12, 8);
    CUDA_MEMCPY2D down = shape(NULL, 0, 0, 0, 0, back, 0, 0, 0, 16, 12, 8);
    down.srcMemoryType = CU_MEMORYTYPE_DEVICE, down.srcDevice = d, down.srcXInBytes = 4, down.srcY = 1, down.srcPitch = 64;
    CUresult r1 = cuMemcpy2D_v2(&up), r2 = cuMemcpy2D_v2(&down);
    int same = 1;
    for (int row = 0; row < 8; row++)
        same &= !memcmp(back + row * 16, src + row * 12, 12) && back[row * 16 + 12] == 0xee;
    printf("2D up and down: %s %s, %s\n", result_name(r1), result_name(r2), same ? "the same rows, gaps untouched" : "DIFFERENT");
    CUDA_MEMCPY2D across = shape(NULL, d, 4, 1, 64, NULL, d2, 0, 0, 32, 12, 8);
    CUstream s;
    CHECK(cuStreamCreate(&s, 1));
    CUresult r3 = cuMemcpy2DAsync_v2(&across, s);
    CUDA_MEMCPY2D flat = shape(NULL, d2, 0, 0, 32, whole, 0, 0, 0, 12, 12, 8);
    CUresult r4 = cuMemcpy2DAsync_v2(&flat, s), r5 = cuStreamSynchronize(s);
    printf("2D on the device, then to contiguous rows (async): %s %s %s, %s\n", result_name(r3), result_name(r4),
           result_name(r5), memcmp(whole, src, sizeof src) ? "DIFFERENT" : "the same");
    CUDA_MEMCPY2D hh = shape(src, 0, 0, 0, 12, host2, 0, 2, 0, 16, 10, 8);
    CUresult r6 = cuMemcpy2D_v2(&hh);
    printf("2D between host buffers: %s %08x\n", result_name(r6), sum(host2, sizeof host2));
    CUDA_MEMCPY2D narrow = shape(src, 0, 0, 0, 8, NULL, d, 0, 0, 64, 12, 2);
    CUDA_MEMCPY2D none = shape(src, 0, 0, 0, 12, NULL, d, 0, 0, 64, 0, 8);
    printf("2D with a pitch under the width: %s; with no width: %s\n", result_name(cuMemcpy2D_v2(&narrow)),
           result_name(cuMemcpy2D_v2(&none)));
    CUDA_MEMCPY2D outside = shape(src, 0, 0, 0, 12, NULL, d, 0, 9, 64, 12, 2);
    printf("2D past the allocation: %s\n", result_name(cuMemcpy2D_v2(&outside)));
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuMemFree_v2(d));
    CHECK(cuMemFree_v2(d2));
}

static void tensor_maps(void)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 1 << 16));
    CUtensorMap map;
    cuuint64_t dims[4] = {64, 64, 4, 2}, strides[3] = {256, 256 * 64, 256 * 64 * 4};
    cuuint32_t box[2] = {32, 32}, es[4] = {1, 1, 1, 1};
    void *addr = (void *)(uintptr_t)d;
    CUresult r = cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)7, 2, addr, dims, strides, box, es,
                                        (CUtensorMapInterleave)0, (CUtensorMapSwizzle)0, (CUtensorMapL2promotion)0,
                                        (CUtensorMapFloatOOBfill)0);
    /* (the simulated GPU's own encoding: the address is its second word) */
    printf("tiled map: %s, shape %08x, address %s\n", result_name(r), sum((unsigned char *)&map.opaque[2], 14 * 8),
           map.opaque[1] == d ? "the allocation's" : "ELSEWHERE");
    r = cuTensorMapReplaceAddress(&map, (void *)(uintptr_t)(d + 256));
    printf("address replaced: %s, %s\n", result_name(r), map.opaque[1] == d + 256 ? "moved" : "NOT MOVED");
    printf("refused: rank 0 %s, a misaligned address %s, no dimensions %s, a box of 512 %s\n",
           result_name(cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)7, 0, addr, dims, strides, box, es,
                                              (CUtensorMapInterleave)0, (CUtensorMapSwizzle)0,
                                              (CUtensorMapL2promotion)0, (CUtensorMapFloatOOBfill)0)),
           result_name(cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)7, 2, (char *)addr + 4, dims, strides, box,
                                              es, (CUtensorMapInterleave)0, (CUtensorMapSwizzle)0,
                                              (CUtensorMapL2promotion)0, (CUtensorMapFloatOOBfill)0)),
           result_name(cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)7, 2, addr, NULL, strides, box, es,
                                              (CUtensorMapInterleave)0, (CUtensorMapSwizzle)0,
                                              (CUtensorMapL2promotion)0, (CUtensorMapFloatOOBfill)0)),
           result_name(cuTensorMapEncodeTiled(&map, (CUtensorMapDataType)7, 2, addr, dims, strides,
                                              (cuuint32_t[]){512, 32}, es, (CUtensorMapInterleave)0,
                                              (CUtensorMapSwizzle)0, (CUtensorMapL2promotion)0,
                                              (CUtensorMapFloatOOBfill)0)));
    int lower[2] = {-1, -1}, upper[2] = {1, 1};
    r = cuTensorMapEncodeIm2col(&map, (CUtensorMapDataType)7, 4, addr, dims, strides, lower, upper, 64, 32, es,
                                (CUtensorMapInterleave)0, (CUtensorMapSwizzle)0, (CUtensorMapL2promotion)0,
                                (CUtensorMapFloatOOBfill)0);
    printf("im2col map: %s, shape %08x\n", result_name(r), sum((unsigned char *)&map.opaque[2], 14 * 8));
    r = cuTensorMapEncodeIm2colWide(&map, (CUtensorMapDataType)7, 4, addr, dims, strides, -1, 1, 64, 32, es,
                                    (CUtensorMapInterleave)0, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128,
                                    (CUtensorMapSwizzle)0, (CUtensorMapL2promotion)0, (CUtensorMapFloatOOBfill)0);
    printf("wide im2col map: %s, shape %08x; refused: rank 2 %s, mode 2 %s\n", result_name(r),
           sum((unsigned char *)&map.opaque[2], 14 * 8),
           result_name(cuTensorMapEncodeIm2colWide(&map, (CUtensorMapDataType)7, 2, addr, dims, strides, -1, 1, 64, 32,
                                                   es, (CUtensorMapInterleave)0, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W,
                                                   (CUtensorMapSwizzle)0, (CUtensorMapL2promotion)0,
                                                   (CUtensorMapFloatOOBfill)0)),
           result_name(cuTensorMapEncodeIm2colWide(&map, (CUtensorMapDataType)7, 4, addr, dims, strides, -1, 1, 64, 32,
                                                   es, (CUtensorMapInterleave)0, (CUtensorMapIm2ColWideMode)2,
                                                   (CUtensorMapSwizzle)0, (CUtensorMapL2promotion)0,
                                                   (CUtensorMapFloatOOBfill)0)));
    /* Rows of 64 half-precision channels (128 bytes) fit the 128-byte
     * swizzle, not the 32- or 64-byte ones. */
    printf("wide im2col of 64 halves, swizzles 0-4:");
    for (int sw = 0; sw < 5; sw++)
        printf(" %s", result_name(cuTensorMapEncodeIm2colWide(
                          &map, (CUtensorMapDataType)6, 4, addr, dims, strides, -1, 1, 64, 32, es,
                          (CUtensorMapInterleave)0, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, (CUtensorMapSwizzle)sw,
                          (CUtensorMapL2promotion)0, (CUtensorMapFloatOOBfill)0)));
    printf("\n");
    CHECK(cuMemFree_v2(d));
}

static void kernels(void)
{
    CUlibrary lib, owner = NULL;
    CUlibraryOption preserved[] = {(CUlibraryOption)1};
    CUresult r = cuLibraryLoadData(&lib, SIM_MODULE, NULL, NULL, 0, preserved, NULL, 1);
    printf("library with an option and no values: %s\n", result_name(r));
    if (r)
        exit(1);
    /* A large image (its bytes travel by reference) with options after it. */
    size_t big = 100 << 10;
    char *image = malloc(big);
    if (!image)
        exit(1);
    memset(image, '#', big);
    memcpy(image, SIM_MODULE, strlen(SIM_MODULE));
    image[strlen(SIM_MODULE)] = '#';
    memcpy(image + big - 32, "\nkernel last 1\n", 16);
    image[big - 16] = 0;
    CUjit_option level[] = {(CUjit_option)7};
    void *three[] = {(void *)3};
    CUlibrary biglib;
    CUkernel last;
    r = cuLibraryLoadData(&biglib, image, level, three, 1, NULL, NULL, 0);
    CUresult r2 = r ? r : cuLibraryGetKernel(&last, biglib, "last");
    printf("a 100 KiB library with an option after it: %s %s\n", result_name(r), result_name(r2));
    if (r == CUDA_SUCCESS)
        CHECK(cuLibraryUnload(biglib));
    free(image);
    CUkernel k;
    CHECK(cuLibraryGetKernel(&k, lib, "vecadd"));
    r = cuKernelGetLibrary(&owner, k);
    printf("kernel's library: %s, %s\n", result_name(r), owner == lib ? "the one loaded" : "ANOTHER");
    /* The dynamic shared memory limit, set through the kernel, then
     * through its function: each read sees the latest. */
    int v[4] = {-1, -1, -1, -1};
    CUfunction f, f2;
    CUresult g0 = cuKernelGetAttribute(&v[0], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0);
    CUresult s1 = cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, k, 0);
    CUresult g1 = cuKernelGetAttribute(&v[1], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0);
    CHECK(cuKernelGetFunction(&f, k));
    CUresult s2 = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 2048);
    CUresult g2 = cuKernelGetAttribute(&v[2], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0);
    CUresult s3 = cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 30, k, 0);
    CUresult g3 = cuKernelGetAttribute(&v[3], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0);
    printf("dynamic shared memory: %s %d, set %s: %s %d, set by its function %s: %s %d, set too high %s: %s %d\n",
           result_name(g0), v[0], result_name(s1), result_name(g1), v[1], result_name(s2), result_name(g2), v[2],
           result_name(s3), result_name(g3), v[3]);
    /* As before each launch: the same limit set again, the occupancy. */
    int regs = 0, blocks = 0;
    for (int i = 0; i <= repeat; i++) {
        CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096, k, 0));
        CHECK(cuKernelGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0));
        CHECK(cuKernelGetFunction(&f2, k));
        CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 256, 4096, 0));
    }
    CHECK(cuKernelGetAttribute(&v[0], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0));
    printf("registers %d, dynamic shared memory %d, %d blocks; the kernel's function asked again: %s\n", regs, v[0],
           blocks, f2 == f ? "the same" : "ANOTHER");
    CHECK(cuLibraryUnload(lib));
    /* A library loaded anew (its handles may be the old ones): nothing
     * remembered of the old one. */
    CHECK(cuLibraryLoadData(&lib, SIM_MODULE, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&k, lib, "vecadd"));
    CHECK(cuKernelGetAttribute(&v[0], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0));
    printf("reloaded: dynamic shared memory %d\n", v[0]);
    CHECK(cuLibraryUnload(lib));
}

static void contexts(void)
{
    CUcontext p0, c1;
    CUdevice d = -1, d2 = -1;
    unsigned flags = 99;
    int active = -1;
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    printf("device 1's primary context: flags %u active %d", flags, active);
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    printf(", retained: active %d", active);
    CHECK(cuDevicePrimaryCtxSetFlags_v2(1, 4));
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    printf(", flags set: %u", flags);
    CHECK(cuDevicePrimaryCtxRelease_v2(1));
    CHECK(cuDevicePrimaryCtxGetState(1, &flags, &active));
    printf(", released: active %d\n", active);
    CHECK(cuDevicePrimaryCtxRetain(&p0, 0));
    CHECK(cuCtxSetCurrent(p0));
    CHECK(cuCtxCreate_v2(&c1, 0, 1)); /* current now */
    CHECK(cuCtxGetDevice(&d));
    CHECK(cuCtxGetDevice_v2(&d2, p0));
    CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    printf("devices: current %d, the primary's %d (active %d)", d, d2, active);
    for (int i = 0; i < repeat; i++) {
        CHECK(cuCtxGetDevice(&d));
        CHECK(cuCtxGetDevice_v2(&d2, NULL));
        CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    }
    CHECK(cuCtxPopCurrent_v2(NULL));
    CHECK(cuCtxGetDevice(&d));
    printf(", after a pop %d", d);
    CHECK(cuCtxDestroy_v2(c1));
    printf(", of a destroyed context %s\n", result_name(cuCtxGetDevice_v2(&d, c1)));
}

int main(int argc, char **argv)
{
    repeat = argc > 1 ? atoi(argv[1]) : 0;
    CHECK(cuInit(0));
    contexts(); /* leaves the primary context of device 0 current */
    kernels();
    tensor_maps();
    copies();
    /* The names cuBLASLt looks up when it starts (old ABIs among them). */
    static const char *const names[] = {"cuGraphInstantiate", "cuGraphKernelNodeGetParams",
                                        "cuGraphExecKernelNodeSetParams", "cuMemPrefetchAsync", "cuStreamBatchMemOp",
                                        "cuStreamWaitValue32", "cuKernelGetLibrary", "cuMemcpy2DAsync_v2",
                                        "cuTensorMapEncodeTiled"};
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int missing = 0;
    printf("names not found:");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!h || !dlsym(h, names[i]))
            printf(" %s", names[i]), missing++;
    printf("%s\n", missing ? "" : " none");
    return 0;
}
