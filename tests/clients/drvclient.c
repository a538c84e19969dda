/* Spends device memory the ways a driver charges beyond what is asked,
 * under a quota; prints what the program sees (results, MiB more in use by
 * cuMemGetInfo), then "ready" and holds everything until stdin closes, so
 * that a test can read the driver's own count (NVML) at the peak.
 *     drvclient blocks BYTES      cuMemAlloc blocks of BYTES until refused
 *     drvclient global MIB...     load a cubin with a MIB MiB __device__
 *                                 global for each MIB; then 10 MiB blocks
 *     drvclient local KIB...      launch a kernel needing KIB KiB of local
 *                                 memory per thread, for each KIB
 *     drvclient limits            pending device launches and the printf FIFO
 *     drvclient devruntime        load a module calling device malloc (which
 *                                 the driver reserves for), then 10 MiB
 *                                 blocks until refused */
#include "common.h"

#include <stdint.h>
#include <unistd.h>

#define MiB (1ull << 20)

static size_t used_now(void)
{
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t));
    return t - f;
}

static void hold(void)
{
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0)
        ;
}

/* Allocates blocks of size until refused; prints how many. */
static void blocks(size_t size)
{
    CUdeviceptr p;
    int n = 0;
    while (n < 100000 && cuMemAlloc_v2(&p, size) == CUDA_SUCCESS)
        n++;
    printf("%zu-byte blocks: %d\n", size, n);
}

static void put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* An ELF cubin as nvcc writes one for `__device__ char g[bytes];` and an
 * empty kernel k: the global is an .nv.global section that takes no room
 * in the file. */
static size_t make_cubin(uint8_t *out, uint64_t bytes)
{
    static const char names[] = "\0.shstrtab\0.nv.global\0.nv.info.k";
    const size_t strs = 64, shoff = (strs + sizeof names + 7) & ~7ul;
    memset(out, 0, shoff + 4 * 64);
    memcpy(out, "\177ELF\2\1\1", 7);
    put(out + 0x10, 2, 2);      /* ET_EXEC */
    put(out + 0x12, 190, 2);    /* EM_CUDA */
    put(out + 0x14, 1, 4);
    put(out + 0x28, shoff, 8);
    put(out + 0x34, 64, 2);
    put(out + 0x3a, 64, 2);
    put(out + 0x3c, 4, 2);
    put(out + 0x3e, 1, 2);
    memcpy(out + strs, names, sizeof names);
    static const struct {
        unsigned name, type;
        uint64_t off, size;
    } sh[4] = {{0, 0, 0, 0}, {1, 3, 64, sizeof names}, {11, 8, 0, 0}, {22, 0x70000000, 0, 0}};
    for (int i = 0; i < 4; i++) {
        uint8_t *s = out + shoff + 64 * i;
        put(s, sh[i].name, 4);
        put(s + 4, sh[i].type, 4);
        put(s + 24, sh[i].off, 8);
        put(s + 32, i == 2 ? bytes : sh[i].size, 8);
    }
    return shoff + 4 * 64;
}

static void global(int argc, char **argv)
{
    static uint8_t image[4096];
    for (int i = 2; i < argc; i++) {
        uint64_t mib = strtoull(argv[i], NULL, 10);
        make_cubin(image, mib * MiB);
        CUmodule m;
        size_t before = used_now();
        CUresult r = cuModuleLoadData(&m, image);
        printf("module with a %llu MiB global: %s", (unsigned long long)mib, result_name(r));
        printf(", %lld MiB more in use\n", ((long long)used_now() - (long long)before) / (long long)MiB);
    }
    blocks(10 * MiB);
}

static void local(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        char text[128];
        snprintf(text, sizeof text, "FLEXGV-SIM-MODULE\nkernel heavy 0 local=%d\n", atoi(argv[i]) * 1024);
        CUmodule m;
        CUfunction f;
        CHECK(cuModuleLoadData(&m, text));
        CHECK(cuModuleGetFunction(&f, m, "heavy"));
        size_t before = used_now();
        CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        printf("launch needing %s KiB of local memory: %s", argv[i], result_name(r));
        printf(", %lld MiB more in use\n", ((long long)used_now() - (long long)before) / (long long)MiB);
    }
}

static void limit(const char *what, CUlimit l, size_t v)
{
    size_t before = used_now();
    CUresult r = cuCtxSetLimit(l, v);
    printf("%s %zu: %s", what, v, result_name(r));
    printf(", %lld MiB more in use\n", ((long long)used_now() - (long long)before) / (long long)MiB);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    if (!strcmp(mode, "blocks") && argc > 2) {
        blocks((size_t)strtoull(argv[2], NULL, 10));
    } else if (!strcmp(mode, "global")) {
        global(argc, argv);
    } else if (!strcmp(mode, "local")) {
        local(argc, argv);
    } else if (!strcmp(mode, "limits")) {
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1u << 20);
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 65536);
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048);
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 65536);
        limit("printf FIFO", CU_LIMIT_PRINTF_FIFO_SIZE, 64 * MiB);
        blocks(10 * MiB);
    } else if (!strcmp(mode, "devruntime")) {
        static const char text[] = "FLEXGV-SIM-MODULE\nkernel allocating 0 devruntime\n";
        CUmodule m;
        CHECK(cuModuleLoadData(&m, text));
        blocks(10 * MiB);
    } else {
        fprintf(stderr, "usage: drvclient blocks BYTES | global MIB... | local KIB... | limits | devruntime\n");
        return 2;
    }
    hold();
    return 0;
}
