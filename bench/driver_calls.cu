// What the driver calls on the compute policy's launch path cost by
// themselves, natively: each timed over N calls between empty kernel
// launches on one stream (the launch timed alone first), ns per call; then
// the wall time per launch of N back-to-back launches and a synchronize,
// without and with an event recorded after each (what a scheduled holder
// does): host and GPU time together; on a stream of its own, then on the
// legacy stream.
//   driver_calls [N]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <cuda.h>
#include <cuda_runtime.h>

__global__ void empty() {}

template <typename F> static double per_call(long n, cudaStream_t s, F call)
{
    double total = 0;
    for (long i = 0; i < n; i++) {
        empty<<<1, 1, 0, s>>>();
        auto t0 = std::chrono::steady_clock::now();
        call();
        total += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    }
    cudaStreamSynchronize(s);
    return total / double(n);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? std::atol(argv[1]) : 100000;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    CUevent done, ev;
    cuEventCreate(&done, CU_EVENT_DISABLE_TIMING);
    cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    cuEventRecord(done, s);
    cudaStreamSynchronize(s);
    per_call(1000, s, [] {}); // warm-up
    CUstreamCaptureStatus st;
    CUdevice d;
    CUcontext c;
    std::printf("launch %.1f\n", per_call(n, s, [&] { empty<<<1, 1, 0, s>>>(); }));
    std::printf("cuStreamIsCapturing %.1f\n", per_call(n, s, [&] { cuStreamIsCapturing(s, &st); }));
    std::printf("cuCtxGetDevice %.1f\n", per_call(n, s, [&] { cuCtxGetDevice(&d); }));
    std::printf("cuCtxGetCurrent %.1f\n", per_call(n, s, [&] { cuCtxGetCurrent(&c); }));
    std::printf("cuEventQuery %.1f\n", per_call(n, s, [&] { cuEventQuery(done); }));
    // The legacy stream (where programs that name no stream launch) too.
    for (cudaStream_t on : {s, (cudaStream_t)0}) {
        const char *sfx = on ? "" : "_legacy";
        std::printf("cuEventRecord%s %.1f\n", sfx, per_call(n, on, [&] { cuEventRecord(ev, (CUstream)on); }));
        for (int with_event = 0; with_event < 2; with_event++) {
            cudaStreamSynchronize(on);
            auto t0 = std::chrono::steady_clock::now();
            for (long i = 0; i < n; i++) {
                empty<<<1, 1, 0, on>>>();
                if (with_event)
                    cuEventRecord(ev, (CUstream)on);
            }
            cudaStreamSynchronize(on);
            double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(n);
            std::printf("%s%s %.1f\n", with_event ? "back_to_back_with_event" : "back_to_back", sfx, ns);
        }
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
