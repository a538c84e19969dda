// Copies under unified addressing (cudaMemcpyDefault: the driver tells the
// sides apart by address), in every direction, from pageable and pinned
// host memory, synchronous and on a stream; prints a checksum of what
// each copy delivered, so a run on a remote GPU compares with a native one.
//     uva
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void bump(unsigned char *p, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (unsigned char)(p[i] + 1);
}

int main()
{
    const size_t sizes[] = {100, 1 << 20, (size_t)9 << 20}; // small, a piece, several pieces
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (size_t n : sizes) {
        for (int pinned = 0; pinned < 2; pinned++) {
            for (int async = 0; async < 2; async++) {
                unsigned char *a, *b, *d1, *d2;
                if (pinned) {
                    CHECK(cudaMallocHost(&a, n));
                    CHECK(cudaMallocHost(&b, n));
                } else {
                    a = (unsigned char *)malloc(n);
                    b = (unsigned char *)malloc(n);
                }
                CHECK(cudaMalloc(&d1, n));
                CHECK(cudaMalloc(&d2, n));
                for (size_t i = 0; i < n; i++)
                    a[i] = (unsigned char)(i * 7 + n);
                memset(b, 0, n);
                auto copy = [&](void *dst, const void *src) {
                    return async ? cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s)
                                 : cudaMemcpy(dst, src, n, cudaMemcpyDefault);
                };
                CHECK(copy(d1, a));                  // host to device
                bump<<<64, 256, 0, async ? s : 0>>>(d1, n);
                CHECK(copy(d2, d1));                 // device to device
                CHECK(copy(b, d2));                  // device to host
                CHECK(cudaStreamSynchronize(s));
                CHECK(cudaDeviceSynchronize());
                unsigned long back = checksum(b, n);
                CHECK(copy(b, a));                   // host to host
                CHECK(cudaStreamSynchronize(s));
                printf("%zu bytes, %s, %s: device round %lx, host to host %s\n", n, pinned ? "pinned" : "pageable",
                       async ? "on a stream" : "synchronous", back, memcmp(a, b, n) ? "differs" : "equal");
                if (pinned) {
                    CHECK(cudaFreeHost(a));
                    CHECK(cudaFreeHost(b));
                } else {
                    free(a);
                    free(b);
                }
                CHECK(cudaFree(d1));
                CHECK(cudaFree(d2));
            }
        }
    }
    return 0;
}
