// A runtime kernel launched through the driver with its parameters packed
// in one buffer (a launch's `extra`, as OpenMP offloading launches), by
// cuLaunchKernel and by cuLaunchKernelEx; and parameters given both ways,
// which the driver refuses. Prints what the program sees.
//     extra
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void axpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += a * x[i];
}

int main()
{
    const int n = 1 << 20;
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    static float h[1 << 20];
    for (int i = 0; i < n; i++)
        h[i] = (float)(i % 97);
    CHECK(cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)axpy));

    // axpy's parameters at their offsets: a at 0, x at 8, y at 16, n at 24.
    alignas(8) unsigned char buf[28] = {};
    float a = 2.0f;
    std::memcpy(buf, &a, 4);
    std::memcpy(buf + 8, &x, 8);
    std::memcpy(buf + 16, &y, 8);
    std::memcpy(buf + 24, &n, 4);
    size_t size = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUresult r = cuLaunchKernel((CUfunction)f, n / 256, 1, 1, 256, 1, 1, 0, 0, nullptr, extra);
    std::printf("cuLaunchKernel with extra: %d\n", (int)r);

    CUlaunchConfig cfg = {};
    cfg.gridDimX = n / 256, cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256, cfg.blockDimY = cfg.blockDimZ = 1;
    r = cuLaunchKernelEx(&cfg, (CUfunction)f, nullptr, extra);
    std::printf("cuLaunchKernelEx with extra: %d\n", (int)r);

    void *params[] = {&a, &x, &y, (void *)&n};
    r = cuLaunchKernel((CUfunction)f, n / 256, 1, 1, 256, 1, 1, 0, 0, params, extra);
    std::printf("both ways: %d\n", (int)r);

    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("y[1] %g, y[96] %g, y[n-1] %g, checksum %lx\n", h[1], h[96], h[n - 1],
                checksum((const unsigned char *)h, sizeof h));
    return 0;
}
