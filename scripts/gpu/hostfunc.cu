// Host functions and stream callbacks through the CUDA runtime: each round
// a kernel fills device memory, an asynchronous copy brings it into pinned
// memory, and a host function checks it there before the next round's copy
// overwrites it (stream order). A callback closes the stream. Prints what
// each saw.
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void fill(int *p, int n, int base)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = base + i;
}

struct Seen {
    const int *host;
    int n, base, calls, right;
};

static void CUDART_CB check(void *data)
{
    Seen *s = static_cast<Seen *>(data);
    s->calls++;
    s->right = 1;
    for (int i = 0; i < s->n; i++)
        if (s->host[i] != s->base + i)
            s->right = 0;
}

static void CUDART_CB closed(cudaStream_t, cudaError_t status, void *data)
{
    Seen *s = static_cast<Seen *>(data);
    s->calls++;
    s->right = status == cudaSuccess;
}

int main()
{
    const int n = 1 << 20, rounds = 10;
    int *dev, *host;
    cudaStream_t st;
    CHECK(cudaMalloc(&dev, n * sizeof(int)));
    CHECK(cudaMallocHost(&host, n * sizeof(int)));
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    Seen seen[rounds] = {}, last = {};
    for (int r = 0; r < rounds; r++) {
        seen[r] = Seen{host, n, r * 7919, 0, 0};
        fill<<<(n + 255) / 256, 256, 0, st>>>(dev, n, seen[r].base);
        CHECK(cudaMemcpyAsync(host, dev, n * sizeof(int), cudaMemcpyDeviceToHost, st));
        CHECK(cudaLaunchHostFunc(st, check, &seen[r]));
    }
    CHECK(cudaStreamAddCallback(st, closed, &last, 0));
    CHECK(cudaStreamSynchronize(st));
    int calls = 0, right = 0;
    for (int r = 0; r < rounds; r++) {
        calls += seen[r].calls;
        right += seen[r].right;
    }
    std::printf("host functions: %d of %d ran, %d saw their round's data\n", calls, rounds, right);
    std::printf("callback: ran %d time(s), status %s\n", last.calls, last.right ? "success" : "an error");
    CHECK(cudaStreamDestroy(st));
    CHECK(cudaFreeHost(host));
    CHECK(cudaFree(dev));
    return 0;
}
