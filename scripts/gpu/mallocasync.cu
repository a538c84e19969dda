// Stream-ordered allocation (cudaMallocAsync, the default pool) inside a
// quota: allocate 256 MiB blocks until refused, then free them and
// synchronize. Prints what the program saw.
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

int main()
{
    size_t free0, total;
    cudaFree(0);
    cudaMemGetInfo(&free0, &total);
    cudaStream_t s;
    cudaStreamCreate(&s);
    std::vector<void *> blocks;
    cudaError_t e;
    for (;;) {
        void *p;
        e = cudaMallocAsync(&p, 256u << 20, s);
        if (e != cudaSuccess)
            break;
        blocks.push_back(p);
    }
    cudaGetLastError();
    cudaStreamSynchronize(s);
    size_t free1;
    cudaMemGetInfo(&free1, &total);
    for (void *p : blocks)
        cudaFreeAsync(p, s);
    cudaStreamSynchronize(s);
    size_t free2;
    cudaMemGetInfo(&free2, &total);
    std::printf("{\"total\": %zu, \"free_start\": %zu, \"blocks\": %zu, \"error\": \"%s\", \"free_full\": %zu, "
                "\"free_after\": %zu}\n",
                total, free0, blocks.size(), cudaGetErrorName(e), free1, free2);
    return 0;
}
