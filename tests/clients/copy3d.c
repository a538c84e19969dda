/* 3D copies (cudaMemcpy3D and its async form reach these) between host
 * memory and pitched device memory, into a sub-box and back: prints each
 * slice's sum and whether every byte outside the box stayed, so local and
 * remote runs compare. Then 2D copies under unified addressing (what
 * cudaMemcpy2D with cudaMemcpyDefault becomes, as cuBLASXt copies its
 * tiles), the program's memory on one side. Then batches of 3D copies
 * (cudaMemcpy3DBatchAsync): the host's volume to pitched device memory, on
 * to a 3D array of 4-byte elements and back to the host in a second batch,
 * and what a batch refuses. */
#include "common.h"

#include <stdint.h>

enum { W = 40, H = 6, D = 5, PITCH = 64, HEIGHT = 8 };

static CUDA_MEMCPY3D between(CUmemorytype st, const void *sh, CUdeviceptr sd, size_t spitch, size_t sheight,
                             CUmemorytype dt, void *dh, CUdeviceptr dd, size_t dpitch, size_t dheight)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = st, c.srcHost = sh, c.srcDevice = sd, c.srcPitch = spitch, c.srcHeight = sheight;
    c.dstMemoryType = dt, c.dstHost = dh, c.dstDevice = dd, c.dstPitch = dpitch, c.dstHeight = dheight;
    c.WidthInBytes = W, c.Height = H, c.Depth = D;
    return c;
}

static CUmemcpy3DOperand pointer(CUdeviceptr p, size_t row, size_t layer)
{
    CUmemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    o.op.ptr.ptr = p, o.op.ptr.rowLength = row, o.op.ptr.layerHeight = layer;
    o.op.ptr.locHint.type = CU_MEM_LOCATION_TYPE_HOST;
    return o;
}

static CUmemcpy3DOperand in_array(CUarray a, size_t z)
{
    CUmemcpy3DOperand o;
    memset(&o, 0, sizeof o);
    o.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
    o.op.array.array = a, o.op.array.offset.z = z;
    return o;
}

static CUDA_MEMCPY3D_BATCH_OP batch_op(CUmemcpy3DOperand src, CUmemcpy3DOperand dst, size_t w, size_t h, size_t d)
{
    CUDA_MEMCPY3D_BATCH_OP op;
    memset(&op, 0, sizeof op);
    op.src = src, op.dst = dst, op.extent.width = w, op.extent.height = h, op.extent.depth = d;
    op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    return op;
}

/* The host's W x H x D volume into pitched b, then into an array of
 * W/4 x H x D 4-byte elements; a second batch brings it back packed. */
static void batches(CUstream st, unsigned char (*vol)[H][W], CUdeviceptr b)
{
    static unsigned char back[D][H][W];
    CUarray arr;
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = W / 4, .Height = H, .Depth = D, .Format = CU_AD_FORMAT_UNSIGNED_INT32,
                                  .NumChannels = 1};
    CHECK(cuArray3DCreate_v2(&arr, &ad));
    CUDA_MEMCPY3D_BATCH_OP there[2] = {
        batch_op(pointer((CUdeviceptr)(uintptr_t)vol, W, H), pointer(b, PITCH, HEIGHT), W, H, D),
        batch_op(pointer(b, PITCH / 4, HEIGHT), in_array(arr, 0), W / 4, H, D)};
    CHECK(cuMemcpy3DBatchAsync_v2(2, there, 0, st));
    CUDA_MEMCPY3D_BATCH_OP home = batch_op(in_array(arr, 0), pointer((CUdeviceptr)(uintptr_t)back, 0, 0), W / 4, H, D);
    CHECK(cuMemcpy3DBatchAsync_v2_ptsz(1, &home, 0, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    long differ = 0;
    for (size_t i = 0; i < sizeof back; i++)
        differ += ((unsigned char *)back)[i] != ((unsigned char *)vol)[i];
    printf("3D batches, host to device to array and back: %ld bytes differ\n", differ);
    CUDA_MEMCPY3D_BATCH_OP bad[2] = {home, home};
    size_t at = 7;
    bad[1].src.op.array.offset.z = D;
    CUresult past = cuMemcpy3DBatchAsync(2, bad, &at, 0, st);
    printf("12.8's: the second copy past its array: %s at %zu\n", result_name(past), at);
    bad[1] = home, bad[1].extent.depth = 0;
    at = 7;
    CUresult empty = cuMemcpy3DBatchAsync(2, bad, &at, 0, st);
    printf("a copy of no depth: %s at %zu; flags: %s; the legacy stream: %s, per thread: %s\n", result_name(empty), at,
           result_name(cuMemcpy3DBatchAsync_v2(1, &home, 1, st)), result_name(cuMemcpy3DBatchAsync_v2(1, &home, 0, NULL)),
           result_name(cuMemcpy3DBatchAsync_v2_ptsz(1, &home, 0, NULL)));
    bad[0] = there[0], bad[0].dst.op.ptr.rowLength = W - 1;
    CUDA_MEMCPY3D_BATCH_OP mixed = batch_op(in_array(arr, 0), in_array(arr, 1), 1, 1, 1);
    CUarray bytes;
    CUDA_ARRAY3D_DESCRIPTOR bd = {.Width = W, .Height = H, .Depth = D, .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CHECK(cuArray3DCreate_v2(&bytes, &bd));
    CUDA_MEMCPY3D_BATCH_OP sizes = batch_op(in_array(arr, 0), in_array(bytes, 0), 1, 1, 1);
    printf("rows shorter than the copy: %s; between two arrays: %s, of other element sizes: %s\n",
           result_name(cuMemcpy3DBatchAsync_v2(1, bad, 0, st)), result_name(cuMemcpy3DBatchAsync_v2(1, &mixed, 0, st)),
           result_name(cuMemcpy3DBatchAsync_v2(1, &sizes, 0, st)));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuArrayDestroy(arr));
    CHECK(cuArrayDestroy(bytes));
}

int main(void)
{
    static unsigned char vol[D][H][W], back[D + 1][HEIGHT][PITCH];
    CUstream st;
    CUdeviceptr a, b;
    primary_context();
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                vol[z][y][x] = (unsigned char)(z * 50 + y * 7 + x);
    CHECK(cuMemAlloc_v2(&a, (size_t)(D + 1) * HEIGHT * PITCH));
    CHECK(cuMemAlloc_v2(&b, (size_t)(D + 1) * HEIGHT * PITCH));
    CHECK(cuMemsetD8_v2(b, 0xee, (size_t)(D + 1) * HEIGHT * PITCH));
    /* up, packed to pitched */
    CUDA_MEMCPY3D up = between(CU_MEMORYTYPE_HOST, vol, 0, W, H, CU_MEMORYTYPE_DEVICE, NULL, a, PITCH, HEIGHT);
    CHECK(cuMemcpy3D_v2(&up));
    /* device to device, into b at x 3, y 1, z 1, on a stream */
    CUDA_MEMCPY3D across = between(CU_MEMORYTYPE_DEVICE, NULL, a, PITCH, HEIGHT, CU_MEMORYTYPE_DEVICE, NULL, b, PITCH, HEIGHT);
    across.dstXInBytes = 3, across.dstY = 1, across.dstZ = 1;
    CHECK(cuMemcpy3DAsync_v2(&across, st));
    CHECK(cuStreamSynchronize(st));
    /* down, the whole of b */
    CUDA_MEMCPY3D down = between(CU_MEMORYTYPE_DEVICE, NULL, b, PITCH, HEIGHT, CU_MEMORYTYPE_HOST, back, 0, PITCH, HEIGHT);
    down.WidthInBytes = PITCH, down.Height = HEIGHT, down.Depth = D + 1;
    CHECK(cuMemcpy3D_v2_ptds(&down));
    int outside = 1;
    for (int z = 0; z <= D; z++) {
        long sum = 0;
        for (int y = 0; y < HEIGHT; y++)
            for (int x = 0; x < PITCH; x++) {
                int in = z >= 1 && z <= D && y >= 1 && y <= H && x >= 3 && x < 3 + W;
                if (in)
                    sum += back[z][y][x] - vol[z - 1][y - 1][x - 3];
                else if (back[z][y][x] != 0xee)
                    outside = 0;
            }
        printf("slice %d: differs from the source by %ld\n", z, sum);
    }
    printf("outside the box untouched: %s\n", outside ? "yes" : "no");
    CUDA_MEMCPY3D bad = up;
    bad.reserved0 = &bad;
    printf("reserved word set: %s\n", result_name(cuMemcpy3D_v2(&bad)));
    bad = up;
    bad.dstHeight = H - 1;
    printf("slices overlapping: %s\n", result_name(cuMemcpy3D_v2(&bad)));
    /* unified: the program's rows up into a, then back into other rows */
    static unsigned char rows[H][PITCH], again[H][PITCH];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < PITCH; x++)
            rows[y][x] = (unsigned char)(y * 31 + x);
    CUDA_MEMCPY2D u = {.srcMemoryType = CU_MEMORYTYPE_UNIFIED, .srcDevice = (CUdeviceptr)(uintptr_t)rows,
                       .srcPitch = PITCH, .dstMemoryType = CU_MEMORYTYPE_UNIFIED, .dstDevice = a, .dstPitch = PITCH,
                       .WidthInBytes = W, .Height = H};
    CHECK(cuMemcpy2DAsync_v2(&u, st));
    CUDA_MEMCPY2D v = {.srcMemoryType = CU_MEMORYTYPE_UNIFIED, .srcDevice = a, .srcPitch = PITCH,
                       .dstMemoryType = CU_MEMORYTYPE_UNIFIED, .dstDevice = (CUdeviceptr)(uintptr_t)again,
                       .dstPitch = PITCH, .WidthInBytes = W, .Height = H};
    CHECK(cuMemcpy2D_v2(&v));
    CHECK(cuStreamSynchronize(st));
    long diff = 0, untouched = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < PITCH; x++)
            if (x < W)
                diff += again[y][x] != rows[y][x];
            else
                untouched += again[y][x] == 0;
    printf("unified 2D round trip: %ld bytes differ, %ld past the width untouched\n", diff, untouched);
    /* Between contexts (the primary one on both sides): a's first slice
     * into b's second, then down on a stream, as cuMemcpy3D makes them. */
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    CUDA_MEMCPY3D_PEER peer = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcContext = ctx,
                               .srcPitch = PITCH, .srcHeight = HEIGHT, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                               .dstDevice = b, .dstContext = ctx, .dstZ = 1, .dstPitch = PITCH, .dstHeight = HEIGHT,
                               .WidthInBytes = PITCH, .Height = HEIGHT, .Depth = 1};
    CHECK(cuMemcpy3DPeer(&peer));
    static unsigned char slice[HEIGHT][PITCH];
    CUDA_MEMCPY3D_PEER home = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = b, .srcContext = ctx, .srcZ = 1,
                               .srcPitch = PITCH, .srcHeight = HEIGHT, .dstMemoryType = CU_MEMORYTYPE_HOST,
                               .dstHost = slice, .dstContext = ctx, .dstPitch = PITCH, .dstHeight = HEIGHT,
                               .WidthInBytes = PITCH, .Height = HEIGHT, .Depth = 1};
    CHECK(cuMemcpy3DPeerAsync(&home, st));
    CHECK(cuStreamSynchronize(st));
    long peer_sum = 0;
    for (int y = 0; y < HEIGHT; y++)
        for (int x = 0; x < PITCH; x++)
            peer_sum += slice[y][x];
    printf("between contexts: slice sum %ld\n", peer_sum);
    batches(st, vol, b);
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    return 0;
}
