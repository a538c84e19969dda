// Allocation microbenchmark: N cudaMalloc/cudaFree pairs of BYTES (1 MiB).
// Prints the wall time per pair.    alloc_bench [PAIRS] [BYTES]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 20000;
    size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1 << 20;
    cudaFree(0);
    void *p;
    for (int i = 0; i < 100; i++) {
        cudaMalloc(&p, bytes);
        cudaFree(p);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) {
        if (cudaMalloc(&p, bytes) != cudaSuccess)
            return 1;
        cudaFree(p);
    }
    auto t1 = std::chrono::steady_clock::now();
    std::printf("ns_per_pair %.1f\n", std::chrono::duration<double, std::nano>(t1 - t0).count() / double(n));
    return 0;
}
