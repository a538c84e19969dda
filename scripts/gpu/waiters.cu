// Threads that depend on each other through the GPU: one waits (a stream,
// an event, the device) for a kernel that spins until another thread's copy
// sets a flag. Natively that copy releases the kernel; a remote GPU that
// held the waiting thread's call while the device worked would hold the
// copy too, and the kernel would give up after its bound (5 s), printing
// "no". (A synchronous copy back is left out: natively, on an H200 with
// driver 580, it held the other thread's copy until the kernel gave up.)
//     waiters
#include <cstdio>
#include <cstring>
#include <thread>
#include <chrono>
#include <cuda_runtime.h>

#include "runtime_check.h"

__device__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins until *flag is set, or 5 s; *seen says which.
__global__ void spin(volatile int *flag, int *seen)
{
    unsigned long long t0 = now_ns();
    while (!*flag && now_ns() - t0 < 5000000000ull)
        ;
    *seen = *flag;
}

int main()
{
    const char *hows[] = {"stream", "event", "device"};
    int *flag, *seen;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&seen, sizeof(int)));
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    int *one;
    CHECK(cudaMallocHost(&one, sizeof *one));
    *one = 1;
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    for (const char *how : hows) {
        CHECK(cudaMemset(flag, 0, sizeof(int)));
        CHECK(cudaMemset(seen, 0, sizeof(int)));
        CHECK(cudaDeviceSynchronize());
        int got = 0;
        cudaError_t waited = cudaSuccess;
        std::thread waiter([&] {
            spin<<<1, 1, 0, s1>>>(flag, seen);
            if (!strcmp(how, "stream")) {
                waited = cudaStreamSynchronize(s1);
            } else if (!strcmp(how, "event")) {
                cudaEventRecord(ev, s1);
                waited = cudaEventSynchronize(ev);
            } else {
                waited = cudaDeviceSynchronize();
            }
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        CHECK(cudaMemcpyAsync(flag, one, sizeof *one, cudaMemcpyHostToDevice, s2));
        CHECK(cudaStreamSynchronize(s2));
        waiter.join();
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(&got, seen, sizeof got, cudaMemcpyDeviceToHost));
        printf("%s: the wait answered %s; the kernel was released by the other thread: %s\n", how,
               cudaGetErrorName(waited), got ? "yes" : "no");
    }
    return 0;
}
