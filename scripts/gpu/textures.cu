// CUDA arrays, textures and surfaces through the CUDA runtime, read by
// kernels: 2D (point and linear filtering, normalized coordinates), pitched
// and linear device memory, a surface written then read back, a layered
// and a cubemap array, a 3D array, a mipmapped array by level, the arrays'
// descriptions and a texture's resource. Prints checksums of what the
// kernels read: the same natively and remotely.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void read2d(cudaTextureObject_t t, float *out, int w, int h, float scale)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h)
        out[y * w + x] = tex2D<float>(t, (x + 0.5f) * scale, (y + 0.5f) * scale);
}

__global__ void read1d(cudaTextureObject_t t, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = tex1Dfetch<float>(t, i);
}

__global__ void write_surface(cudaSurfaceObject_t s, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h)
        surf2Dwrite(make_uchar4(x, y, x ^ y, 7), s, x * sizeof(uchar4), y);
}

__global__ void read_layers(cudaTextureObject_t t, float *out, int w, int h, int layers)
{
    int x = threadIdx.x, y = blockIdx.x, l = blockIdx.y;
    if (x < w && y < h && l < layers)
        out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

__global__ void read_cube(cudaTextureObject_t t, float *out, int n)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) {
        float a = i * 0.37f;
        out[i] = texCubemap<float>(t, __cosf(a), __sinf(a), 0.3f * __sinf(3 * a));
    }
}

__global__ void read3d(cudaTextureObject_t t, float *out, int w, int h, int d)
{
    int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
    if (x < w && y < h && z < d)
        out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.25f, y + 0.5f, z + 0.75f);
}

__global__ void read_lod(cudaTextureObject_t t, float *out, int n, int levels)
{
    int i = threadIdx.x, l = blockIdx.x;
    if (i < n && l < levels)
        out[l * n + i] = tex2DLod<float>(t, (i + 0.5f) / n, 0.5f, (float)l);
}

static double sum(const float *d, size_t n)
{
    static float h[1 << 16];
    if (n > sizeof h / sizeof h[0] || cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += h[i] * (double)((i % 7) + 1);
    return s;
}

static cudaTextureObject_t texture(const cudaResourceDesc &r, cudaTextureFilterMode f, bool normalized)
{
    cudaTextureDesc td;
    std::memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = f;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = normalized;
    td.mipmapFilterMode = cudaFilterModePoint;
    td.maxMipmapLevelClamp = 16;
    cudaTextureObject_t t = 0;
    if (cudaCreateTextureObject(&t, &r, &td, nullptr) != cudaSuccess)
        return 0;
    return t;
}

int main()
{
    const int W = 64, H = 48;
    static float img[H][W];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            img[y][x] = (float)((x * 7 + y * 13) % 97) / 7.0f;
    float *out;
    CHECK(cudaMalloc(&out, 1 << 18));
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();

    // 2D array: point and linear filtering
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &fd, W, H));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, img, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc rd;
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeArray, rd.res.array.array = a;
    cudaTextureObject_t tp = texture(rd, cudaFilterModePoint, false), tl = texture(rd, cudaFilterModeLinear, true);
    if (!tp || !tl)
        return std::printf("texture on an array: not made\n"), 1;
    read2d<<<dim3(1, H), W>>>(tp, out, W, H, 1.0f);
    std::printf("array, point: %.4f\n", sum(out, W * H));
    read2d<<<dim3(1, H), W>>>(tl, out, W, H, 0.77f / W);
    std::printf("array, linear: %.4f\n", sum(out, W * H));
    cudaResourceDesc got;
    CHECK(cudaGetTextureObjectResourceDesc(&got, tl));
    std::printf("its resource: type %d, %s array\n", (int)got.resType, got.res.array.array == a ? "the same" : "another");
    cudaChannelFormatDesc cd;
    cudaExtent ext;
    unsigned flags;
    CHECK(cudaArrayGetInfo(&cd, &ext, &flags, a));
    std::printf("array: %d bits, %zux%zux%zu, flags %u\n", cd.x, ext.width, ext.height, ext.depth, flags);

    // again on a stream, back through a 2D copy
    static float back[H][W];
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, img, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice, st));
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaMemcpy2DFromArray(back, W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    std::printf("array round trip: %s\n", std::memcmp(back, img, sizeof img) ? "WRONG" : "ok");

    // pitched and linear device memory
    float *p;
    size_t pitch;
    CHECK(cudaMallocPitch(&p, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(p, pitch, img, W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypePitch2D, rd.res.pitch2D.devPtr = p, rd.res.pitch2D.desc = fd;
    rd.res.pitch2D.width = W, rd.res.pitch2D.height = H, rd.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t tpl = texture(rd, cudaFilterModeLinear, false);
    read2d<<<dim3(1, H), W>>>(tpl, out + W * H, W, H, 0.9f);
    std::printf("pitched, linear: %.4f\n", sum(out + W * H, W * H));
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeLinear, rd.res.linear.devPtr = p, rd.res.linear.desc = fd;
    rd.res.linear.sizeInBytes = W * sizeof(float);
    cudaTextureObject_t t1 = texture(rd, cudaFilterModePoint, false);
    read1d<<<1, W>>>(t1, out, W);
    std::printf("linear: %.4f\n", sum(out, W));

    // a surface written by a kernel, read back
    cudaChannelFormatDesc u4 = cudaCreateChannelDesc<uchar4>();
    cudaArray_t sa;
    CHECK(cudaMallocArray(&sa, &u4, W, H, cudaArraySurfaceLoadStore));
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeArray, rd.res.array.array = sa;
    cudaSurfaceObject_t s;
    CHECK(cudaCreateSurfaceObject(&s, &rd));
    write_surface<<<dim3(1, H), W>>>(s, W, H);
    static unsigned char px[H][W * 4];
    CHECK(cudaMemcpy2DFromArray(px, W * 4, sa, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    std::printf("surface: %lu\n", checksum(&px[0][0], sizeof px));

    // layered: 3 layers
    const int L = 3, LW = 16, LH = 8;
    static float lay[L][LH][LW];
    for (int i = 0; i < L * LH * LW; i++)
        (&lay[0][0][0])[i] = (float)(i % 251);
    cudaArray_t la;
    CHECK(cudaMalloc3DArray(&la, &fd, make_cudaExtent(LW, LH, L), cudaArrayLayered));
    cudaMemcpy3DParms m;
    std::memset(&m, 0, sizeof m);
    m.srcPtr = make_cudaPitchedPtr(lay, LW * sizeof(float), LW, LH);
    m.dstArray = la, m.extent = make_cudaExtent(LW, LH, L), m.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&m));
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeArray, rd.res.array.array = la;
    cudaTextureObject_t tla = texture(rd, cudaFilterModePoint, false);
    read_layers<<<dim3(LH, L), LW>>>(tla, out, LW, LH, L);
    std::printf("layered: %.4f\n", sum(out, L * LH * LW));

    // cubemap: six 16x16 faces
    const int C = 16;
    static float faces[6][C][C];
    for (int i = 0; i < 6 * C * C; i++)
        (&faces[0][0][0])[i] = (float)(i / (C * C)) * 10 + (float)(i % C);
    cudaArray_t ca;
    CHECK(cudaMalloc3DArray(&ca, &fd, make_cudaExtent(C, C, 6), cudaArrayCubemap));
    std::memset(&m, 0, sizeof m);
    m.srcPtr = make_cudaPitchedPtr(faces, C * sizeof(float), C, C);
    m.dstArray = ca, m.extent = make_cudaExtent(C, C, 6), m.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&m));
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeArray, rd.res.array.array = ca;
    cudaTextureObject_t tc = texture(rd, cudaFilterModeLinear, true);
    read_cube<<<4, 256>>>(tc, out, 1024);
    std::printf("cubemap: %.4f\n", sum(out, 1024));

    // 3D: 16x8x4, linear filtering; a box back from it
    const int X = 16, Y = 8, Z = 4;
    static float vol[Z][Y][X], box[2][3][5];
    for (int i = 0; i < X * Y * Z; i++)
        (&vol[0][0][0])[i] = (float)((i * 37) % 101);
    cudaArray_t va;
    CHECK(cudaMalloc3DArray(&va, &fd, make_cudaExtent(X, Y, Z)));
    std::memset(&m, 0, sizeof m);
    m.srcPtr = make_cudaPitchedPtr(vol, X * sizeof(float), X, Y);
    m.dstArray = va, m.extent = make_cudaExtent(X, Y, Z), m.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&m));
    std::memset(&m, 0, sizeof m);
    m.srcArray = va, m.srcPos = make_cudaPos(2, 4, 1); // in elements of the array
    m.dstPtr = make_cudaPitchedPtr(box, 5 * sizeof(float), 5, 3);
    m.extent = make_cudaExtent(5, 3, 2), m.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&m));
    std::printf("3d box: %.1f %.1f\n", box[0][0][0], box[1][2][4]);
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeArray, rd.res.array.array = va;
    cudaTextureObject_t tv = texture(rd, cudaFilterModeLinear, false);
    read3d<<<dim3(Y, Z), X>>>(tv, out, X, Y, Z);
    std::printf("3d: %.4f\n", sum(out, X * Y * Z));

    // mipmapped: 64x64, 4 levels, each level filled with its own value
    const int M = 64, LV = 4;
    cudaMipmappedArray_t mm;
    CHECK(cudaMallocMipmappedArray(&mm, &fd, make_cudaExtent(M, M, 0), LV));
    static float lvl[M * M];
    for (int l = 0; l < LV; l++) {
        cudaArray_t la2;
        CHECK(cudaGetMipmappedArrayLevel(&la2, mm, l));
        int e = M >> l;
        for (int i = 0; i < e * e; i++)
            lvl[i] = (float)(l * 100 + i % e);
        CHECK(cudaMemcpy2DToArray(la2, 0, 0, lvl, e * sizeof(float), e * sizeof(float), e, cudaMemcpyHostToDevice));
    }
    std::memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeMipmappedArray, rd.res.mipmap.mipmap = mm;
    cudaTextureObject_t tm = texture(rd, cudaFilterModePoint, true);
    read_lod<<<LV, 8>>>(tm, out, 8, LV);
    std::printf("mipmapped: %.4f\n", sum(out, 8 * LV));

    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    cudaTextureObject_t ts[] = {tp, tl, tpl, t1, tla, tc, tv, tm};
    for (cudaTextureObject_t t : ts)
        CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaDestroySurfaceObject(s));
    CHECK(cudaFreeMipmappedArray(mm));
    cudaArray_t as[] = {a, sa, la, ca, va};
    for (cudaArray_t x : as)
        CHECK(cudaFreeArray(x));
    CHECK(cudaFree(p));
    CHECK(cudaFree(out));
    std::printf("textures: ok\n");
    return 0;
}
