/* 2D memsets (cudaMemset2D and its async form reach these), each width,
 * into a sub-rectangle of a pitched allocation: prints each row's bytes
 * that changed, so local and remote runs compare. */
#include "common.h"

#include <stdint.h>

enum { W = 64, H = 8 };

int main(void)
{
    CUstream st;
    CUdeviceptr d;
    size_t pitch;
    unsigned char back[H][W * 4];
    primary_context();
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAllocPitch_v2(&d, &pitch, sizeof back[0], H, 4));
    CHECK(cuMemsetD2D8_v2(d, pitch, 0, sizeof back[0], H));
    /* rows 1..6: 8-bit from column 2, 16-bit over 3 elements, 32-bit async */
    CHECK(cuMemsetD2D8_v2(d + pitch + 2, pitch, 0x11, 5, 2));
    CHECK(cuMemsetD2D16_v2(d + 3 * pitch + 4, pitch, 0x2233, 3, 2));
    CHECK(cuMemsetD2D32Async(d + 5 * pitch + 8, pitch, 0x44556677u, 2, 2, st));
    CHECK(cuMemsetD2D8Async(d + 7 * pitch, pitch, 0x99, 1, 1, st));
    CHECK(cuStreamSynchronize(st));
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = d;
    c.srcPitch = pitch;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = back;
    c.dstPitch = sizeof back[0];
    c.WidthInBytes = sizeof back[0];
    c.Height = H;
    CHECK(cuMemcpy2D_v2(&c));
    for (int y = 0; y < H; y++) {
        printf("row %d:", y);
        for (int x = 0; x < (int)sizeof back[0]; x++)
            if (back[y][x])
                printf(" %d=%02x", x, back[y][x]);
        printf("\n");
    }
    CHECK(cuMemFree_v2(d));
    return 0;
}
