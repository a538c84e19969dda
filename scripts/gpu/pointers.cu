// What programs ask of their pointers and graphs that CuPy's own tests
// check: every pointer attribute of every kind of memory, one by one
// (cuPointerGetAttribute) and all at once (cuPointerGetAttributes, as
// cudaPointerGetAttributes asks), and the runtime's answer; a device pool
// made, allocated from and destroyed; a captured graph printed by
// cuGraphDebugDotPrint into a file the program then reads. Addresses,
// contexts and ids are printed as what they are (the pointer itself, its
// allocation's start, the current context, set or not), so that the output
// remotely can be compared with the output natively
// (scripts/gpu-remote-cudart.sh).
//     nvcc -O2 -o pointers pointers.cu -lcuda
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_check.h"

__global__ void dot_kernel(float *p) { p[threadIdx.x] += 1.0f; }

// An attribute's value as what it is: 8 bytes read (4 for the 32-bit ones).
static void value(char *out, size_t n, int attr, const uint64_t *v, uintptr_t p, uintptr_t base, CUcontext ctx)
{
    uint64_t x = v[0];
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        snprintf(out, n, "%s", !x ? "none" : x == (uintptr_t)ctx ? "the current" : "another");
        return;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        snprintf(out, n, "%s", !x ? "none" : x == p ? "itself" : x == base ? "its start" : "another");
        return;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: // (the driver maps small pinned allocations together)
        snprintf(out, n, "%s", !x ? "none" : x <= base ? "at or before its start" : "after its start");
        return;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        snprintf(out, n, "%s", x ? "set" : "none");
        return;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        snprintf(out, n, "%llu", (unsigned long long)x);
        return;
    default: // 32-bit values
        snprintf(out, n, "%d", (int)(uint32_t)x);
    }
}

// Every attribute but the P2P tokens (a structure NVIDIA deprecated).
static const int attrs[] = {1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
#define NATTRS (int)(sizeof attrs / sizeof attrs[0])

static void describe(const char *what, void *ptr, void *start)
{
    uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)start;
    CUcontext ctx;
    cuCtxGetCurrent(&ctx);
    char v[64];
    printf("%s, one by one:", what);
    for (int i = 0; i < NATTRS; i++) {
        uint64_t buf[4] = {0};
        CUresult r = cuPointerGetAttribute(buf, (CUpointer_attribute)attrs[i], (CUdeviceptr)p);
        value(v, sizeof v, attrs[i], buf, p, base, ctx);
        printf(" %d=%s", attrs[i], r == CUDA_SUCCESS ? v : name(r));
    }
    uint64_t vals[NATTRS][4];
    void *data[NATTRS];
    CUpointer_attribute a[NATTRS];
    memset(vals, 0x5a, sizeof vals);
    for (int i = 0; i < NATTRS; i++) {
        data[i] = vals[i];
        a[i] = (CUpointer_attribute)attrs[i];
    }
    CUresult r = cuPointerGetAttributes(NATTRS, a, data, (CUdeviceptr)p);
    printf("\n%s, at once: %s", what, name(r));
    if (r == CUDA_SUCCESS)
        for (int i = 0; i < NATTRS; i++) {
            value(v, sizeof v, attrs[i], vals[i], p, base, ctx);
            printf(" %d=%s", attrs[i], vals[i][0] == 0x5a5a5a5a5a5a5a5aull ? "unwritten" : v);
        }
    cudaPointerAttributes pa;
    cudaError_t e = cudaPointerGetAttributes(&pa, ptr);
    printf("\n%s, the runtime: %s", what, cudaGetErrorName(e));
    if (e == cudaSuccess)
        printf(" type %d device %d device pointer %s host pointer %s", (int)pa.type, pa.device,
               !pa.devicePointer ? "none" : (uintptr_t)pa.devicePointer == p ? "itself" : "another",
               !pa.hostPointer ? "none" : (uintptr_t)pa.hostPointer == p ? "itself" : "another");
    printf("\n");
}

int main()
{
    RT(cudaSetDevice(0));
    RT(cudaFree(0));
    void *dev, *host, *mapped, *managed, *reg, *pageable = malloc(256), *pooled;
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RT(cudaMalloc(&dev, 256));
    RT(cudaMallocHost(&host, 256));
    RT(cudaHostAlloc(&mapped, 256, cudaHostAllocMapped | cudaHostAllocPortable));
    RT(cudaMallocManaged(&managed, 256));
    if (posix_memalign(&reg, 4096, 4096))
        return 1;
    RT(cudaHostRegister(reg, 4096, cudaHostRegisterDefault));
    RT(cudaMallocAsync(&pooled, 256, s));
    RT(cudaStreamSynchronize(s));
    setvbuf(stdout, NULL, _IOLBF, 0); // each line kept should a call crash
    describe("device memory", dev, dev);
    describe("inside device memory", (char *)dev + 16, dev);
    describe("cudaMallocHost", host, host);
    describe("inside cudaMallocHost", (char *)host + 16, host);
    describe("cudaHostAlloc mapped portable", mapped, mapped);
    describe("managed", managed, managed);
    describe("registered", reg, reg);
    describe("inside registered", (char *)reg + 16, reg);
    describe("from the stream's pool", pooled, pooled);
    describe("pageable", pageable, pageable);
    RT(cudaFreeAsync(pooled, s));
    RT(cudaHostUnregister(reg));
    describe("unregistered", reg, reg);
    RT(cudaFreeHost(host));
    describe("cudaMallocHost freed", host, host);
    RT(cudaFree(managed));
    RT(cudaFreeHost(mapped));
    free(reg);
    free(pageable);

    // A pool made, as CuPy's test makes one.
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    RT(cudaMemPoolCreate(&pool, &props));
    void *p = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(&p, 128, pool, s);
    printf("a pool made: %s, %s", cudaGetErrorName(e), p ? "an address" : "no address");
    if (e == cudaSuccess)
        printf(", freed %s", cudaGetErrorName(cudaFreeAsync(p, s)));
    printf(", destroyed %s\n", cudaGetErrorName(cudaMemPoolDestroy(pool)));
    RT(cudaStreamSynchronize(s));

    // A graph captured, printed into a file, read back.
    cudaGraph_t g;
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    dot_kernel<<<1, 32, 0, s>>>((float *)dev);
    RT(cudaStreamEndCapture(s, &g));
    char path[] = "/tmp/pointers-dot-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    size_t plain = 0;
    for (int verbose = 0; verbose < 2; verbose++) {
        e = cudaGraphDebugDotPrint(g, path, verbose ? cudaGraphDebugDotFlagsVerbose : 0);
        FILE *f = fopen(path, "r");
        static char text[1 << 16];
        size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
        if (f)
            fclose(f);
        text[n] = 0;
        printf("cudaGraphDebugDotPrint%s: %s, %s, %s the kernel's name%s\n", verbose ? " verbose" : "",
               cudaGetErrorName(e), n ? "a file" : "no file", strstr(text, "dot_kernel") ? "with" : "without",
               verbose ? (n > plain ? ", longer than plain" : ", not longer than plain") : "");
        plain = n;
    }
    printf("cuGraphDebugDotPrint into a folder that does not exist: %s, of no graph: %s\n",
           name(cuGraphDebugDotPrint(g, "/nonexistent-folder/graph.dot", 0)), name(cuGraphDebugDotPrint(NULL, path, 0)));
    fflush(stdout); // (the driver may not check the path)
    printf("cuGraphDebugDotPrint to no path: %s\n", name(cuGraphDebugDotPrint(g, NULL, 0)));
    unlink(path);
    RT(cudaGraphDestroy(g));
    RT(cudaFree(dev));
    printf("pointers: done\n");
    return 0;
}
