// Pitched 2D copies through the CUDA runtime (cudaMemcpy2D and its async
// form, host to device, device to device, device to host, into a
// sub-rectangle), then a kernel over the result: prints a checksum, the
// same natively and remotely.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void twice(float *p, size_t pitch, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h)
        ((float *)((char *)p + y * pitch))[x] *= 2;
}

int main()
{
    const int w = 300, h = 77;
    static float src[h][w], back[h][w + 5];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            src[y][x] = (float)(y * 1000 + x);
    float *a, *b;
    size_t pa, pb;
    CHECK(cudaMallocPitch(&a, &pa, w * sizeof(float), h));
    CHECK(cudaMallocPitch(&b, &pb, (w + 16) * sizeof(float), h + 3));
    CHECK(cudaMemset2D(b, pb, 0, (w + 16) * sizeof(float), h + 3));
    CHECK(cudaMemcpy2D(a, pa, src, sizeof src[0], w * sizeof(float), h, cudaMemcpyHostToDevice));
    twice<<<dim3((w + 127) / 128, h), 128>>>(a, pa, w, h);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    // into b at column 8, row 2
    CHECK(cudaMemcpy2DAsync((char *)b + 2 * pb + 8 * sizeof(float), pb, a, pa, w * sizeof(float), h,
                            cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    std::memset(back, 0xff, sizeof back);
    CHECK(cudaMemcpy2D(back, sizeof back[0], (char *)b + 2 * pb + 8 * sizeof(float), pb, w * sizeof(float), h,
                       cudaMemcpyDeviceToHost));
    double sum = 0;
    int bad = 0;
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            sum += back[y][x];
            bad += back[y][x] != 2 * src[y][x];
        }
        unsigned gap;
        std::memcpy(&gap, &back[y][w], sizeof gap);
        bad += gap != 0xffffffffu; // the row's tail untouched
    }
    std::printf("memcpy2d: %s, sum %.1f\n", bad ? "WRONG" : "ok", sum);
    return bad != 0;
}
