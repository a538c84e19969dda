// Copies of the program's memory captured into CUDA graphs, in the
// runtime's default (global) capture mode, as a remote GPU must replay them:
//   - uploads of 4 KiB (a request's frame remotely) and 1 MiB (the staging
//     area over shm://), right after uploads that are not captured, each
//     graph launched once the device and the host's earlier buffers hold
//     other bytes: prints a checksum of what the graph delivered;
//   - a download captured into a graph: "ok" when it is either delivered at
//     the launch or refused with the capture invalidated (a remote GPU
//     refuses it: the program's memory is not there);
//   - a capturing stream's synchronization: refused, and the capture
//     invalidated (what the remote refusal relies on).
// Lines starting "how: " say what happened where a native and a remote run
// may differ.
//     captured
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

int main()
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t sizes[] = {4096, 1 << 20};
    for (size_t n : sizes) {
        unsigned char *src = (unsigned char *)malloc(n), *other = (unsigned char *)malloc(n),
                      *back = (unsigned char *)malloc(n), *d;
        for (size_t i = 0; i < n; i++) {
            src[i] = (unsigned char)(i * 7);
            other[i] = (unsigned char)(255 - i);
        }
        CHECK(cudaMalloc(&d, n));
        for (int i = 0; i < 3; i++)
            CHECK(cudaMemcpyAsync(d, other, n, cudaMemcpyHostToDevice, s));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaStreamEndCapture(s, &g));
        CHECK(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < 3; i++)
            CHECK(cudaMemcpy(d, other, n, cudaMemcpyHostToDevice));
        CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
        std::printf("upload of %zu captured: %lx (%s)\n", n, checksum(back, n), memcmp(back, src, n) ? "differs" : "same");
        CHECK(cudaGraphExecDestroy(ge));
        CHECK(cudaGraphDestroy(g));

        memset(back, 0, n);
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        cudaError_t r = cudaMemcpyAsync(back, d, n, cudaMemcpyDeviceToHost, s);
        cudaError_t end = cudaStreamEndCapture(s, &g);
        const char *how = "neither delivered nor refused";
        if (r == cudaErrorStreamCaptureUnsupported && end == cudaErrorStreamCaptureInvalidated && !g) {
            how = "refused";
        } else if (r == cudaSuccess && end == cudaSuccess) {
            CHECK(cudaGraphInstantiate(&ge, g, 0));
            CHECK(cudaGraphLaunch(ge, s));
            CHECK(cudaStreamSynchronize(s));
            how = memcmp(back, src, n) ? "launched, not delivered" : "delivered";
            CHECK(cudaGraphExecDestroy(ge));
            CHECK(cudaGraphDestroy(g));
        }
        cudaGetLastError();
        std::printf("how: download of %zu captured: %s (%s, %s)\n", n, how, cudaGetErrorName(r),
                     cudaGetErrorName(end));
        std::printf("download of %zu captured: %s\n", n,
                    !strcmp(how, "refused") || !strcmp(how, "delivered") ? "ok" : how);
        CHECK(cudaFree(d));
        free(src);
        free(other);
        free(back);
    }
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaError_t r = cudaStreamSynchronize(s);
    cudaError_t end = cudaStreamEndCapture(s, &g);
    cudaGetLastError();
    std::printf("synchronizing a capturing stream: %s, then ending the capture: %s\n", cudaGetErrorName(r),
                cudaGetErrorName(end));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
