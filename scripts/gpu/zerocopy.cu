// Pinned host memory used as device memory ("zero-copy"), as under unified
// addressing a kernel may use it: 8 MiB from cudaHostAlloc (mapped) and
// from cudaMallocHost, each written by a kernel through the host pointer
// itself and through cudaHostGetDevicePointer's, and by cudaMemset, then
// read by the program after a synchronization; prints a checksum of what
// the program sees. Over a remote GPU this needs the pinned heap mapped at
// the program's address (shm://).
//     zerocopy
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void bump(unsigned char *p, size_t n, unsigned char by)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (unsigned char)(p[i] * 3 + by);
}

int main()
{
    const size_t n = 8 << 20;
    for (int how = 0; how < 2; how++) {
        unsigned char *h, *d;
        if (how == 0)
            CHECK(cudaHostAlloc(&h, n, cudaHostAllocMapped));
        else
            CHECK(cudaMallocHost(&h, n));
        for (size_t i = 0; i < n; i++)
            h[i] = (unsigned char)(i * 13);
        CHECK(cudaHostGetDevicePointer(&d, h, 0));
        bump<<<64, 256>>>(h, n, 1);
        bump<<<64, 256>>>(d, n / 2, 2);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        unsigned long after_kernels = checksum(h, n);
        CHECK(cudaMemset(d + n / 4, 9, 4096));
        CHECK(cudaDeviceSynchronize());
        std::printf("%s: device pointer is the host's: %s; after the kernels %lx; after a memset %lx\n",
                    how ? "cudaMallocHost" : "cudaHostAlloc mapped", d == h ? "yes" : "no", after_kernels, checksum(h, n));
        CHECK(cudaFreeHost(h));
    }
    return 0;
}
