// Launch microbenchmark: N launches of an empty kernel, then one
// synchronize. Prints the wall time per launch. On the legacy stream, or
// with "stream" on a non-blocking stream of its own; with "sync" each
// launch is synchronized before the next (every launch then begins a busy
// period: what a cap's timed events cost).
//   launch_bench [LAUNCHES [stream|sync]]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

__global__ void empty() {}

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 200000;
    cudaStream_t s = 0;
    bool sync = argc > 2 && !std::strcmp(argv[2], "sync");
    if (argc > 2 && !sync && (std::strcmp(argv[2], "stream") || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess))
        return 1;
    for (int i = 0; i < 1000; i++)
        empty<<<1, 1, 0, s>>>();
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) {
        empty<<<1, 1, 0, s>>>();
        if (sync)
            cudaStreamSynchronize(s);
    }
    cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    if (cudaGetLastError() != cudaSuccess)
        return 1;
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / double(n);
    std::printf("ns_per_launch %.1f\n", ns);
    return 0;
}
