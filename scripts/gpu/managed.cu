// Managed memory through the CUDA runtime, as NVIDIA's samples use it
// (UnifiedMemoryStreams, systemWideAtomics, conjugateGradientUM): written on
// the host, computed on by kernels, read back after a synchronization of the
// device, a stream or an event; atomics from many threads; memsets, copies,
// prefetches, advice and what the range and pointer attributes say. Prints
// what the program sees, so native and remote runs compare; the "how: "
// lines say what may differ (whether the host may touch managed memory while
// kernels run: the program takes the path the samples take for each).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x)                                                                            \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

__global__ void axpy(const float *x, const float *y, float *z, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        z[i] = a * x[i] + y[i];
}

__global__ void count(unsigned *counter, int *max, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(counter, 1u);
        atomicMax(max, i);
    }
}

__global__ void add_one(unsigned char *p, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] += 1;
}

#if CUDART_VERSION >= 13000
static cudaError_t prefetch(const void *p, size_t n, int dev, cudaStream_t s)
{
    cudaMemLocation l = {};
    l.type = dev == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    l.id = dev == cudaCpuDeviceId ? 0 : dev;
    return cudaMemPrefetchAsync(p, n, l, 0, s);
}
static cudaError_t advise(const void *p, size_t n, cudaMemoryAdvise a, int dev)
{
    cudaMemLocation l = {};
    l.type = dev == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    l.id = dev == cudaCpuDeviceId ? 0 : dev;
    return cudaMemAdvise(p, n, a, l);
}
#else
static cudaError_t prefetch(const void *p, size_t n, int dev, cudaStream_t s) { return cudaMemPrefetchAsync(p, n, dev, s); }
static cudaError_t advise(const void *p, size_t n, cudaMemoryAdvise a, int dev) { return cudaMemAdvise(p, n, a, dev); }
#endif

int main()
{
    int dev = 0, managed = 0, concurrent = 0, pageable = 0;
    CHECK(cudaSetDevice(dev));
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, dev));
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, dev));
    CHECK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, dev));
    printf("managed memory: %d\n", managed);
    printf("how: concurrent managed access %d, pageable memory access %d\n", concurrent, pageable);

    // Host writes, a kernel, the device's synchronization.
    const int n = 1 << 20; // 4 MiB of floats each
    float *x, *y, *z;
    CHECK(cudaMallocManaged(&x, n * sizeof(float)));
    CHECK(cudaMallocManaged(&y, n * sizeof(float)));
    CHECK(cudaMallocManaged(&z, n * sizeof(float)));
    for (int i = 0; i < n; i++) {
        x[i] = (float)(i % 1000);
        y[i] = 1.0f;
    }
    axpy<<<(n + 255) / 256, 256>>>(x, y, z, 2.0f, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += z[i];
    printf("after the device's synchronization: z[1]=%g z[%d]=%g sum=%.0f\n", z[1], n - 1, z[n - 1], sum);

    // On a stream, its memory attached to it where the host may not touch
    // managed memory while kernels run (as UnifiedMemoryStreams does).
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (!concurrent) {
        CHECK(cudaStreamAttachMemAsync(s, x, 0, cudaMemAttachSingle));
        CHECK(cudaStreamAttachMemAsync(s, z, 0, cudaMemAttachSingle));
        CHECK(cudaStreamAttachMemAsync(s, y, 0, cudaMemAttachSingle));
        CHECK(cudaStreamSynchronize(s));
    }
    x[7] = 500;
    y[n - 3] = 0.25f;
    axpy<<<(n + 255) / 256, 256, 0, s>>>(x, y, z, 3.0f, n);
    CHECK(cudaStreamSynchronize(s));
    printf("after a stream's synchronization: z[7]=%g z[%d]=%g\n", z[7], n - 3, z[n - 3]);

    // Atomics from every thread, read after an event.
    unsigned *counter;
    int *max;
    CHECK(cudaMallocManaged(&counter, sizeof *counter));
    CHECK(cudaMallocManaged(&max, sizeof *max));
    *counter = 5;
    *max = -1;
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    count<<<256, 256>>>(counter, max, 60000);
    CHECK(cudaEventRecord(ev, 0));
    CHECK(cudaEventSynchronize(ev));
    printf("after an event: counter %u, max %d\n", *counter, *max);

    // A memset and a kernel on one larger allocation, a copy out of it.
    size_t big = 12u << 20;
    unsigned char *g;
    CHECK(cudaMallocManaged(&g, big));
    CHECK(cudaMemset(g, 4, big));
    CHECK(cudaDeviceSynchronize());
    g[big - 1] = 9;
    add_one<<<(unsigned)((big + 255) / 256), 256>>>(g, big);
    unsigned char back[4];
    CHECK(cudaMemcpy(back, g + big - 4, 4, cudaMemcpyDefault));
    printf("a larger one: %d %d %d (copied %d %d)\n", g[0], g[big / 2], g[big - 1], back[0], back[3]);
    float *d;
    CHECK(cudaMalloc(&d, 16 * sizeof(float)));
    CHECK(cudaMemcpy(d, z, 16 * sizeof(float), cudaMemcpyDefault));
    CHECK(cudaMemcpy(x, d, 16 * sizeof(float), cudaMemcpyDefault));
    printf("copied through the device: x[7]=%g\n", x[7]);

    // Prefetches and advice, and what the ranges say.
    CHECK(advise(x, n * sizeof(float), cudaMemAdviseSetReadMostly, dev));
    CHECK(advise(y, n * sizeof(float), cudaMemAdviseSetPreferredLocation, dev));
    CHECK(prefetch(y, n * sizeof(float), dev, s));
    CHECK(prefetch(z, n * sizeof(float), cudaCpuDeviceId, s));
    CHECK(cudaStreamSynchronize(s));
    int rm = -5, pref = -5, last = -5, lastz = -5;
    CHECK(cudaMemRangeGetAttribute(&rm, sizeof rm, cudaMemRangeAttributeReadMostly, x, n * sizeof(float)));
    CHECK(cudaMemRangeGetAttribute(&pref, sizeof pref, cudaMemRangeAttributePreferredLocation, y, n * sizeof(float)));
    CHECK(cudaMemRangeGetAttribute(&last, sizeof last, cudaMemRangeAttributeLastPrefetchLocation, y, n * sizeof(float)));
    CHECK(cudaMemRangeGetAttribute(&lastz, sizeof lastz, cudaMemRangeAttributeLastPrefetchLocation, z, n * sizeof(float)));
    printf("read mostly %d, preferred %d, last prefetched to %d and %d\n", rm, pref, last, lastz);
    printf("after prefetches: x[7]=%g y[%d]=%g z[1]=%g\n", x[7], n - 3, y[n - 3], z[1]);

    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, z + 5));
    printf("a managed pointer is %s\n", pa.type == cudaMemoryTypeManaged ? "managed" : "not managed");
    CHECK(cudaPointerGetAttributes(&pa, d));
    printf("a device pointer is %s\n", pa.type == cudaMemoryTypeDevice ? "device" : "not device");

    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(z));
    CHECK(cudaFree(counter));
    CHECK(cudaFree(max));
    CHECK(cudaFree(g));
    CHECK(cudaFree(d));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    printf("managed: ok\n");
    return 0;
}
