// Whether a process's launches can be moved, transparently, onto a green
// context holding part of the SMs, natively: a kernel the application
// resolved in its primary context (as a CUfunction and as a CUkernel),
// launched on a green context's stream, over memory allocated in the
// primary context, ordered with the application's stream by events. Prints
// the SMs each way reaches, and the host cost per launch and the wall time
// per launch of back-to-back launches, plain and moved (ns).
//   green_lane [SMS] [N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <cuda.h>
#include <cuda_runtime.h>

__global__ void empty() {}

#include "sm_mark.cuh"

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        CUresult r_ = (x);                                                                                             \
        if (r_ != CUDA_SUCCESS) {                                                                                      \
            const char *s_ = "?";                                                                                      \
            cuGetErrorName(r_, &s_);                                                                                   \
            std::printf("FAILED %s: %s\n", #x, s_);                                                                    \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

static int sms_reached(CUfunction f, CUstream s, unsigned *seen, int nsm)
{
    cudaMemset(seen, 0, 1024 * sizeof(unsigned));
    void *args[] = {&seen};
    if (cuLaunchKernel(f, 4 * nsm, 1, 1, 32, 1, 1, 0, s, args, nullptr) != CUDA_SUCCESS)
        return -1;
    cuStreamSynchronize(s);
    unsigned host[1024];
    cudaMemcpy(host, seen, sizeof host, cudaMemcpyDeviceToHost);
    int n = 0;
    for (unsigned v : host)
        n += v != 0;
    return n;
}

int main(int argc, char **argv)
{
    unsigned want = argc > 1 ? std::atoi(argv[1]) : 64;
    long n = argc > 2 ? std::atol(argv[2]) : 100000;
    cudaSetDevice(0);
    cudaFree(nullptr); // the primary context, current
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    int mps = 0, nsm = 0;
    cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev);
    cuDeviceGetAttribute(&nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    std::printf("mps_client %d sms %d\n", mps, nsm);

    CUdevResource all, part, rest;
    CK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
    std::printf("min_partition %u alignment %u\n", all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment);
    unsigned groups = 1;
    CK(cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, 0, want));
    CUdevResourceDesc desc;
    CK(cuDevResourceGenerateDesc(&desc, &part, 1));
    CUgreenCtx green;
    CK(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CUstream lane;
    CK(cuGreenCtxStreamCreate(&lane, green, CU_STREAM_NON_BLOCKING, 0));
    std::printf("green_sms %u\n", part.sm.smCount);

    unsigned *seen;
    cudaMalloc(&seen, 1024 * sizeof(unsigned)); // in the primary context
    cudaFunction_t fn;
    cudaKernel_t kn;
    cudaGetFuncBySymbol(&fn, (const void *)mark);
    cudaGetKernel(&kn, (const void *)mark);
    CUstream app;
    CK(cuStreamCreate(&app, CU_STREAM_NON_BLOCKING));
    int reached[3] = {sms_reached((CUfunction)fn, app, seen, nsm), sms_reached((CUfunction)fn, lane, seen, nsm),
                      sms_reached((CUfunction)kn, lane, seen, nsm)};
    std::printf("reached primary_function %d green_function %d green_kernel %d\n", reached[0], reached[1], reached[2]);
    for (int r : reached)
        if (r <= 0) {
            std::printf("FAILED: a kernel did not run (-1: its launch failed)\n");
            return 1;
        }

    // The move: the lane waits for what the application's stream holds, the
    // kernel runs on the lane, the application's stream waits for it.
    CUevent in, out;
    CK(cuEventCreate(&in, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&out, CU_EVENT_DISABLE_TIMING));
    cudaFunction_t ef;
    cudaGetFuncBySymbol(&ef, (const void *)empty);
    CUfunction e = (CUfunction)ef;
    auto moved = [&] {
        cuEventRecord(in, app);
        cuStreamWaitEvent(lane, in, 0);
        cuLaunchKernel(e, 1, 1, 1, 1, 1, 1, 0, lane, nullptr, nullptr);
        cuEventRecord(out, lane);
        cuStreamWaitEvent(app, out, 0);
    };
    auto plain = [&] { cuLaunchKernel(e, 1, 1, 1, 1, 1, 1, 0, app, nullptr, nullptr); };
    auto on_lane = [&] { cuLaunchKernel(e, 1, 1, 1, 1, 1, 1, 0, lane, nullptr, nullptr); };
    for (int pass = 0; pass < 2; pass++) { // the first pass warms up
        long m = pass ? n : 1000;
        for (int way = 0; way < 3; way++) {
            double host = 0;
            cuStreamSynchronize(app);
            cuStreamSynchronize(lane);
            auto t0 = std::chrono::steady_clock::now();
            for (long i = 0; i < m; i++) {
                auto a = std::chrono::steady_clock::now();
                if (way == 0)
                    plain();
                else if (way == 1)
                    on_lane();
                else
                    moved();
                host += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - a).count();
            }
            cuStreamSynchronize(app);
            cuStreamSynchronize(lane);
            double wall = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
            if (pass)
                std::printf("%s host %.1f wall %.1f\n", way == 0 ? "plain" : way == 1 ? "lane" : "moved",
                            host / double(m), wall / double(m));
        }
    }
    // Ordering: a kernel moved onto the lane and a copy on the application's
    // stream after it see each other's order (the copy reads what it wrote).
    cudaMemsetAsync(seen, 0, 1024 * sizeof(unsigned), (cudaStream_t)app);
    void *args[] = {&seen};
    cuEventRecord(in, app);
    cuStreamWaitEvent(lane, in, 0);
    CK(cuLaunchKernel((CUfunction)fn, 4 * nsm, 1, 1, 32, 1, 1, 0, lane, args, nullptr));
    cuEventRecord(out, lane);
    cuStreamWaitEvent(app, out, 0);
    unsigned host[1024];
    cudaMemcpyAsync(host, seen, sizeof host, cudaMemcpyDeviceToHost, (cudaStream_t)app);
    cuStreamSynchronize(app);
    std::set<unsigned> s;
    for (unsigned i = 0; i < 1024; i++)
        if (host[i])
            s.insert(i);
    std::printf("ordered_reached %zu\n", s.size());
    return 0;
}
