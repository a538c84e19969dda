// What a process is given of GPU 0's SMs: what the device reports, and how
// many SMs a grid of four blocks per reported SM really runs on.
//     smreach   prints: mps_client 0|1 sms N reached M
#include <cstdio>

#include <cuda.h>
#include <cuda_runtime.h>

#include "../../bench/sm_mark.cuh"

int main()
{
    int mps = 0, sms = 0;
    cudaError_t e = cudaFree(nullptr);
    if (e != cudaSuccess) {
        std::printf("FAILED: no context: %s\n", cudaGetErrorName(e));
        return 1;
    }
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0);
    unsigned *seen, host[1024] = {};
    cudaMalloc(&seen, sizeof host);
    cudaMemset(seen, 0, sizeof host);
    mark<<<4 * sms, 32>>>(seen);
    cudaMemcpy(host, seen, sizeof host, cudaMemcpyDeviceToHost);
    if ((e = cudaGetLastError()) != cudaSuccess) {
        std::printf("FAILED: the kernel: %s\n", cudaGetErrorName(e));
        return 1;
    }
    int reached = 0;
    for (unsigned v : host)
        reached += v != 0;
    std::printf("mps_client %d sms %d reached %d\n", mps, sms, reached);
    return reached > 0 ? 0 : 1;
}
