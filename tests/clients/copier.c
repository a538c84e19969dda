/* Synchronous copies or memsets in a loop, as a tenant that moves data and
 * launches nothing:
 *     copier SECONDS OP
 * OP: htod, dtoh, dtod, memcpy, memset8, memset16, memset32, memset2d (a
 * 32-bit one), htod2d or dtoh2d (16 rows of 256 bytes), peer (between
 * two allocations of one context) or copy3d (4 slices of 4 such rows, device
 * to device), each optionally
 * with _ptds (the per-thread default stream ABI). Prints "ready", starts at
 * the first line of stdin, calls OP for SECONDS and prints
 *     ops N longest_ms L
 * L: the longest single call, which is how long it waited for its turn. */
#include "common.h"

#include <time.h>
#include <unistd.h>

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

enum { N = 4096 };

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: copier SECONDS htod|dtoh|dtod|memcpy|memset8|memset16|memset32|memset2d|htod2d|dtoh2d|peer|copy3d[_ptds]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    char op[32];
    snprintf(op, sizeof op, "%s", argv[2]);
    char *suffix = strstr(op, "_ptds");
    int pt = suffix && !suffix[5];
    if (pt)
        *suffix = 0;
    CUcontext ctx;
    CUdeviceptr a, b;
    static char host[N];
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc_v2(&a, N));
    CHECK(cuMemAlloc_v2(&b, N));
#define CALL(plain, ptds, ...) (pt ? ptds(__VA_ARGS__) : plain(__VA_ARGS__))
    int k = !strcmp(op, "htod") ? 0 : !strcmp(op, "dtoh") ? 1 : !strcmp(op, "dtod") ? 2 : !strcmp(op, "memcpy") ? 3
          : !strcmp(op, "memset8") ? 4 : !strcmp(op, "memset32") ? 5 : !strcmp(op, "htod2d") ? 6
          : !strcmp(op, "dtoh2d") ? 7 : !strcmp(op, "memset16") ? 8 : !strcmp(op, "memset2d") ? 9
          : !strcmp(op, "peer") ? 10 : !strcmp(op, "copy3d") ? 11 : -1;
    if (k < 0) {
        fprintf(stderr, "copier: unknown op %s\n", argv[2]);
        return 2;
    }
    CUDA_MEMCPY2D up, down;
    memset(&up, 0, sizeof up);
    up.srcMemoryType = CU_MEMORYTYPE_HOST, up.srcHost = host, up.srcPitch = 256;
    up.dstMemoryType = CU_MEMORYTYPE_DEVICE, up.dstDevice = a, up.dstPitch = 256;
    up.WidthInBytes = 256, up.Height = 16;
    down = up;
    down.srcMemoryType = CU_MEMORYTYPE_DEVICE, down.srcDevice = a, down.srcHost = NULL;
    down.dstMemoryType = CU_MEMORYTYPE_HOST, down.dstHost = host, down.dstDevice = 0;
    CUDA_MEMCPY3D box;
    memset(&box, 0, sizeof box);
    box.srcMemoryType = CU_MEMORYTYPE_DEVICE, box.srcDevice = a, box.srcPitch = 256, box.srcHeight = 4;
    box.dstMemoryType = CU_MEMORYTYPE_DEVICE, box.dstDevice = b, box.dstPitch = 256, box.dstHeight = 4;
    box.WidthInBytes = 256, box.Height = 4, box.Depth = 4;
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
    long ops = 0;
    double longest = 0, stop = wall_ms() + seconds * 1e3;
    for (double now = wall_ms(); now < stop; ops++) {
        switch (k) {
        case 0: CHECK(CALL(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds, a, host, N)); break;
        case 1: CHECK(CALL(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, host, a, N)); break;
        case 2: CHECK(CALL(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds, b, a, N)); break;
        case 3: CHECK(CALL(cuMemcpy, cuMemcpy_ptds, b, a, N)); break;
        case 4: CHECK(CALL(cuMemsetD8_v2, cuMemsetD8_v2_ptds, a, 1, N)); break;
        case 5: CHECK(CALL(cuMemsetD32_v2, cuMemsetD32_v2_ptds, a, 1, N / 4)); break;
        case 6: CHECK(CALL(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, &up)); break;
        case 7: CHECK(CALL(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, &down)); break;
        case 8: CHECK(CALL(cuMemsetD16_v2, cuMemsetD16_v2_ptds, a, 1, N / 2)); break;
        case 9: CHECK(CALL(cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds, a, 256, 7, 32, 16)); break;
        case 10: CHECK(CALL(cuMemcpyPeer, cuMemcpyPeer_ptds, b, ctx, a, ctx, N)); break;
        default: CHECK(CALL(cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, &box)); break;
        }
        double after = wall_ms();
        if (after - now > longest)
            longest = after - now;
        now = after;
    }
    printf("ops %ld longest_ms %.1f\n", ops, longest);
    return 0;
}
