/* CUDA arrays, mipmapped arrays, texture and surface objects: 1D, 2D, 3D,
 * layered and cubemap arrays filled and read back through 2D and 3D copies
 * (host, device and array sides), their descriptors, mip levels, objects
 * made, described and destroyed, and refused arguments. Prints what it read
 * so that local and remote runs compare.
 *   arrays              all of the above
 *   arrays hold         makes an array and a texture object, prints their
 *                       values, and keeps them until stdin closes: then
 *                       says whether they still work
 *   arrays use A T WHAT tries WHAT (copy, desc, texdesc, texdestroy, texon:
 *                       with array A or texture object T, another
 *                       process's; past: a copy past its own array's end),
 *                       then shows its own copies still work
 *   arrays planes       a two-plane (NV12) array: its planes' arrays and
 *                       layouts, texels through each, refusals (no kernel:
 *                       runs on a real GPU too)
 *   arrays planegone    a plane described once its array is destroyed (a
 *                       real driver's answer is a crash: H200, 2026-12-06) */
#include "common.h"

#include <stdint.h>

static uint32_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed + (i >> 8));
}

static CUDA_MEMCPY3D c3(size_t w, size_t h, size_t d)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.WidthInBytes = w, c.Height = h, c.Depth = d;
    return c;
}

static void host_src(CUDA_MEMCPY3D *c, const void *p, size_t pitch, size_t height)
{
    c->srcMemoryType = CU_MEMORYTYPE_HOST, c->srcHost = p, c->srcPitch = pitch, c->srcHeight = height;
}
static void host_dst(CUDA_MEMCPY3D *c, void *p, size_t pitch, size_t height)
{
    c->dstMemoryType = CU_MEMORYTYPE_HOST, c->dstHost = p, c->dstPitch = pitch, c->dstHeight = height;
}
static void arr_src(CUDA_MEMCPY3D *c, CUarray a) { c->srcMemoryType = CU_MEMORYTYPE_ARRAY, c->srcArray = a; }
static void arr_dst(CUDA_MEMCPY3D *c, CUarray a) { c->dstMemoryType = CU_MEMORYTYPE_ARRAY, c->dstArray = a; }

static void desc3(const char *what, CUarray a)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult r = cuArray3DGetDescriptor_v2(&d, a);
    if (r)
        printf("%s: descriptor %s\n", what, result_name(r));
    else
        printf("%s: %zux%zux%zu format %d channels %u flags %u\n", what, d.Width, d.Height, d.Depth, (int)d.Format,
               d.NumChannels, d.Flags);
}

static CUarray make3(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned flags)
{
    CUDA_ARRAY3D_DESCRIPTOR ad = {w, h, d, f, ch, flags};
    CUarray a;
    CHECK(cuArray3DCreate_v2(&a, &ad));
    return a;
}

static int hold(void)
{
    primary_context();
    CUarray a = make3(16, 16, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0);
    CUDA_RESOURCE_DESC rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY, rd.res.array.hArray = a;
    CUDA_TEXTURE_DESC td;
    memset(&td, 0, sizeof td);
    CUtexObject t;
    CHECK(cuTexObjectCreate(&t, &rd, &td, NULL));
    printf("%llx %llx\n", (unsigned long long)(uintptr_t)a, t);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin))
        ;
    unsigned char img[16 * 64];
    fill(img, sizeof img, 1);
    CUDA_MEMCPY3D c = c3(64, 16, 1);
    host_src(&c, img, 64, 16), arr_dst(&c, a);
    CUresult r1 = cuMemcpy3D_v2(&c);
    CUresult r2 = cuTexObjectDestroy(t);
    printf("hold: copy %s, destroy %s\n", result_name(r1), result_name(r2));
    return r1 || r2;
}

/* One thing a hostile program tries (each on a connection of its own, so
 * that the server says each refusal), then its own copies. */
static int use(const char *as, const char *ts, const char *what)
{
    primary_context();
    CUarray theirs = (CUarray)(uintptr_t)strtoull(as, NULL, 16);
    CUtexObject t = strtoull(ts, NULL, 16);
    unsigned char img[16 * 64], back[16 * 64];
    fill(img, sizeof img, 2);
    CUarray a = make3(16, 16, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0);
    CUDA_MEMCPY3D c = c3(64, 16, 1);
    host_src(&c, img, 64, 16), arr_dst(&c, theirs);
    CUDA_RESOURCE_DESC rd;
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult r;
    if (!strcmp(what, "copy")) {
        r = cuMemcpy3D_v2(&c);
    } else if (!strcmp(what, "desc")) {
        r = cuArray3DGetDescriptor_v2(&d, theirs);
    } else if (!strcmp(what, "texdesc")) {
        r = cuTexObjectGetResourceDesc(&rd, t);
    } else if (!strcmp(what, "texdestroy")) {
        r = cuTexObjectDestroy(t);
    } else if (!strcmp(what, "texon")) {
        memset(&rd, 0, sizeof rd);
        rd.resType = CU_RESOURCE_TYPE_ARRAY, rd.res.array.hArray = theirs;
        CUDA_TEXTURE_DESC td;
        memset(&td, 0, sizeof td);
        CUtexObject mine;
        r = cuTexObjectCreate(&mine, &rd, &td, NULL);
    } else if (!strcmp(what, "past")) {
        /* its own array, one row past its end */
        c.dstArray = a, c.dstY = 1;
        r = cuMemcpy3D_v2(&c);
    } else {
        fprintf(stderr, "arrays: no such use %s\n", what);
        return 2;
    }
    printf("use %s: %s\n", what, result_name(r));
    c = c3(64, 16, 1);
    host_src(&c, img, 64, 16), arr_dst(&c, a);
    CHECK(cuMemcpy3D_v2(&c));
    CUDA_MEMCPY3D b = c3(64, 16, 1);
    arr_src(&b, a), host_dst(&b, back, 64, 16);
    CHECK(cuMemcpy3D_v2(&b));
    printf("use: own array %s\n", memcmp(img, back, sizeof img) ? "differs" : "round trip ok");
    return 0;
}

/* One plane's texels written from the host and read back: the same? */
static int plane_round_trip(CUarray p, size_t row, size_t rows, unsigned seed, uint32_t *hash)
{
    unsigned char in[64 * 32], out[64 * 32];
    fill(in, row * rows, seed);
    memset(out, 0, sizeof out);
    CUDA_MEMCPY3D c = c3(row, rows, 1);
    host_src(&c, in, row, rows), arr_dst(&c, p);
    CHECK(cuMemcpy3D_v2(&c));
    c = c3(row, rows, 1);
    arr_src(&c, p), host_dst(&c, out, row, rows);
    CHECK(cuMemcpy3D_v2(&c));
    *hash = fnv(out, row * rows);
    return !memcmp(in, out, row * rows);
}

static int planes(void)
{
    primary_context();
    CUDA_ARRAY3D_DESCRIPTOR d = {64, 32, 0, CU_AD_FORMAT_NV12, 3, 0};
    CUarray a, p[2], q;
    printf("nv12 64x32 of 3 channels, not for video: %s\n", result_name(cuArray3DCreate_v2(&a, &d)));
    d.Flags = CUDA_ARRAY3D_VIDEO_ENCODE_DECODE;
    CUresult r = cuArray3DCreate_v2(&a, &d);
    printf("nv12 64x32 of 3 channels for video: %s\n", result_name(r));
    if (r)
        return 0;
    desc3("the array", a);
    for (unsigned i = 0; i < 2; i++) {
        char what[16];
        CHECK(cuArrayGetPlane(&p[i], a, i));
        snprintf(what, sizeof what, "plane %u", i);
        desc3(what, p[i]);
    }
    printf("plane 2: %s\n", result_name(cuArrayGetPlane(&q, a, 2)));
    CHECK(cuArrayGetPlane(&q, a, 0));
    printf("plane 0 again: %s\n", q == p[0] ? "the same array" : "another array");
    uint32_t h0, h1;
    int ok0 = plane_round_trip(p[0], 64, 32, 1, &h0), ok1 = plane_round_trip(p[1], 64, 16, 2, &h1);
    printf("luma: %s, hash %08x; chroma: %s, hash %08x\n", ok0 ? "same" : "differs", h0, ok1 ? "same" : "differs", h1);
    /* the luma still holds its texels once the chroma is written */
    unsigned char in[64 * 32], out[64 * 32];
    fill(in, sizeof in, 1);
    CUDA_MEMCPY3D b = c3(64, 32, 1);
    arr_src(&b, p[0]), host_dst(&b, out, 64, 32);
    CHECK(cuMemcpy3D_v2(&b));
    printf("luma after the chroma: %s\n", memcmp(in, out, sizeof in) ? "differs" : "same");
    b = c3(64, 17, 1);
    arr_src(&b, p[1]), host_dst(&b, out, 64, 17);
    printf("chroma past its 16 rows: %s\n", result_name(cuMemcpy3D_v2(&b)));
    CUDA_ARRAY_DESCRIPTOR pd = {16, 16, CU_AD_FORMAT_UNSIGNED_INT8, 1};
    CUarray plain;
    CHECK(cuArrayCreate_v2(&plain, &pd));
    printf("a plane of a one-plane array: %s\n", result_name(cuArrayGetPlane(&q, plain, 0)));
    CHECK(cuArrayDestroy(plain));
    d.NumChannels = 1;
    printf("nv12 of 1 channel: %s\n", result_name(cuArray3DCreate_v2(&q, &d)));
    d.NumChannels = 3, d.Width = 63;
    printf("nv12 63 wide: %s\n", result_name(cuArray3DCreate_v2(&q, &d)));
    d.Width = 64, d.Depth = 2;
    printf("nv12 of depth 2: %s\n", result_name(cuArray3DCreate_v2(&q, &d)));
    CHECK(cuArrayDestroy(a));
    return 0;
}

static int planegone(void)
{
    primary_context();
    CUDA_ARRAY3D_DESCRIPTOR d = {64, 32, 0, CU_AD_FORMAT_NV12, 3, CUDA_ARRAY3D_VIDEO_ENCODE_DECODE};
    CUarray a, p;
    CHECK(cuArray3DCreate_v2(&a, &d));
    CHECK(cuArrayGetPlane(&p, a, 1));
    CHECK(cuArrayDestroy(a));
    desc3("a plane after its array", p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "planes"))
        return planes();
    if (argc > 1 && !strcmp(argv[1], "planegone"))
        return planegone();
    if (argc > 1 && !strcmp(argv[1], "hold"))
        return hold();
    if (argc > 4 && !strcmp(argv[1], "use"))
        return use(argv[2], argv[3], argv[4]);
    primary_context();
    CUstream st;
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));

    /* 1D: 100 floats through a 2D copy of one row */
    CUDA_ARRAY_DESCRIPTOR d1 = {100, 0, CU_AD_FORMAT_FLOAT, 1};
    CUarray a1;
    CHECK(cuArrayCreate_v2(&a1, &d1));
    float f[100], fb[100];
    for (int i = 0; i < 100; i++)
        f[i] = (float)i * 0.5f;
    CUDA_MEMCPY2D m = {0};
    m.srcMemoryType = CU_MEMORYTYPE_HOST, m.srcHost = f, m.srcPitch = sizeof f;
    m.dstMemoryType = CU_MEMORYTYPE_ARRAY, m.dstArray = a1;
    m.WidthInBytes = sizeof f, m.Height = 1;
    CHECK(cuMemcpy2D_v2(&m));
    memset(fb, 0, sizeof fb);
    CUDA_MEMCPY2D mb = {0};
    mb.srcMemoryType = CU_MEMORYTYPE_ARRAY, mb.srcArray = a1, mb.srcXInBytes = 40;
    mb.dstMemoryType = CU_MEMORYTYPE_HOST, mb.dstHost = fb, mb.dstPitch = sizeof fb;
    mb.WidthInBytes = 200, mb.Height = 1;
    CHECK(cuMemcpy2D_v2(&mb));
    printf("1d: element 10.. read back %s (%g %g)\n", memcmp(fb, f + 10, 200) ? "differs" : "same", fb[0], fb[49]);
    CUDA_ARRAY_DESCRIPTOR dd;
    CHECK(cuArrayGetDescriptor_v2(&dd, a1));
    printf("1d: %zux%zu format %d channels %u\n", dd.Width, dd.Height, (int)dd.Format, dd.NumChannels);
    /* the 1D array copies: host, device and another array */
    CUarray a1b;
    CHECK(cuArrayCreate_v2(&a1b, &d1));
    CUdeviceptr d1d;
    CHECK(cuMemAlloc_v2(&d1d, sizeof f));
    CHECK(cuMemcpyHtoAAsync_v2(a1b, 0, f, sizeof f, st));
    CHECK(cuMemcpyHtoA_v2(a1b, 16, f, 64));
    CHECK(cuMemcpyAtoD_v2(d1d, a1b, 0, sizeof f));
    CHECK(cuMemcpyDtoA_v2(a1, 0, d1d, sizeof f));
    CHECK(cuMemcpyAtoA_v2(a1, 200, a1b, 0, 200));
    memset(fb, 0, sizeof fb);
    CHECK(cuMemcpyAtoH_v2(fb, a1, 0, 200));
    CHECK(cuMemcpyAtoHAsync_v2(fb + 50, a1, 200, 200, st));
    CHECK(cuStreamSynchronize(st));
    printf("1d copies: hash %08x, past the end %s\n", fnv(fb, sizeof fb), result_name(cuMemcpyHtoA_v2(a1, 396, f, 8)));
    CHECK(cuArrayDestroy(a1b));
    CHECK(cuMemFree_v2(d1d));
    /* a 1D array whose row is larger than a piece of a remote copy */
    CUDA_ARRAY_DESCRIPTOR dw = {300000, 0, CU_AD_FORMAT_FLOAT, 1};
    CUarray aw;
    CHECK(cuArrayCreate_v2(&aw, &dw));
    unsigned char *wide = malloc(1200000), *wideb = calloc(1, 1200000);
    for (size_t i = 0; i < 1200000; i++) /* no period of a piece's size */
        wide[i] = (unsigned char)(((uint32_t)i * 2654435761u) >> 13);
    CHECK(cuMemcpyHtoA_v2(aw, 0, wide, 1200000));
    CHECK(cuMemcpyAtoH_v2(wideb, aw, 4, 1199996));
    printf("1d wide: %s\n", memcmp(wide + 4, wideb, 1199996) ? "differs" : "same");
    CHECK(cuArrayDestroy(aw));
    free(wide), free(wideb);

    /* 2D: 64x32 uchar4 from a pitched host image; a sub-rectangle back */
    enum { W2 = 64, H2 = 32, EB2 = 4, HP = 300 };
    CUarray a2 = make3(W2, H2, 0, CU_AD_FORMAT_UNSIGNED_INT8, EB2, CUDA_ARRAY3D_SURFACE_LDST);
    static unsigned char img[H2 * HP], sub[10 * 40];
    fill(img, sizeof img, 3);
    m = (CUDA_MEMCPY2D){0};
    m.srcMemoryType = CU_MEMORYTYPE_HOST, m.srcHost = img, m.srcPitch = HP;
    m.dstMemoryType = CU_MEMORYTYPE_ARRAY, m.dstArray = a2;
    m.WidthInBytes = W2 * EB2, m.Height = H2;
    CHECK(cuMemcpy2DAsync_v2(&m, st));
    CHECK(cuStreamSynchronize(st));
    mb = (CUDA_MEMCPY2D){0};
    mb.srcMemoryType = CU_MEMORYTYPE_ARRAY, mb.srcArray = a2, mb.srcXInBytes = 8, mb.srcY = 5;
    mb.dstMemoryType = CU_MEMORYTYPE_HOST, mb.dstHost = sub, mb.dstPitch = 40;
    mb.WidthInBytes = 40, mb.Height = 10;
    CHECK(cuMemcpy2D_v2_ptds(&mb));
    int ok = 1;
    for (int y = 0; y < 10; y++)
        ok &= !memcmp(sub + y * 40, img + (y + 5) * HP + 8, 40);
    printf("2d: sub-rectangle %s, hash %08x\n", ok ? "same" : "differs", fnv(sub, sizeof sub));
    desc3("2d", a2);

    /* device to array, array to device, array to array */
    CUdeviceptr dev;
    size_t pitch;
    CHECK(cuMemAllocPitch_v2(&dev, &pitch, W2 * EB2, H2, 4));
    m = (CUDA_MEMCPY2D){0};
    m.srcMemoryType = CU_MEMORYTYPE_ARRAY, m.srcArray = a2;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE, m.dstDevice = dev, m.dstPitch = pitch;
    m.WidthInBytes = W2 * EB2, m.Height = H2;
    CHECK(cuMemcpy2D_v2(&m));
    CUarray a2b = make3(W2, H2, 0, CU_AD_FORMAT_UNSIGNED_INT8, EB2, 0);
    CUDA_MEMCPY3D c = c3(W2 * EB2, H2, 1);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = dev, c.srcPitch = pitch, c.srcHeight = H2;
    arr_dst(&c, a2b);
    CHECK(cuMemcpy3DAsync_v2(&c, st));
    CUarray a2c = make3(W2, H2, 0, CU_AD_FORMAT_UNSIGNED_INT8, EB2, 0);
    c = c3(W2 * EB2, H2, 1);
    arr_src(&c, a2b), arr_dst(&c, a2c);
    CHECK(cuMemcpy3DAsync_v2(&c, st));
    CHECK(cuStreamSynchronize(st));
    static unsigned char whole[H2 * W2 * EB2];
    c = c3(W2 * EB2, H2, 1);
    arr_src(&c, a2c), host_dst(&c, whole, W2 * EB2, H2);
    CHECK(cuMemcpy3D_v2(&c));
    ok = 1;
    for (int y = 0; y < H2; y++)
        ok &= !memcmp(whole + y * W2 * EB2, img + y * HP, W2 * EB2);
    printf("2d: through device memory and another array %s\n", ok ? "same" : "differs");

    /* 3D: 16x8x4 floats, a sub-box back */
    enum { W3 = 16, H3 = 8, D3 = 4 };
    CUarray a3 = make3(W3, H3, D3, CU_AD_FORMAT_FLOAT, 1, 0);
    static float vol[D3][H3][W3], box[2][3][5];
    for (int z = 0; z < D3; z++)
        for (int y = 0; y < H3; y++)
            for (int x = 0; x < W3; x++)
                vol[z][y][x] = (float)(z * 1000 + y * 100 + x);
    c = c3(W3 * 4, H3, D3);
    host_src(&c, vol, W3 * 4, H3), arr_dst(&c, a3);
    CHECK(cuMemcpy3D_v2(&c));
    c = c3(5 * 4, 3, 2);
    arr_src(&c, a3), host_dst(&c, box, 5 * 4, 3);
    c.srcXInBytes = 2 * 4, c.srcY = 4, c.srcZ = 1;
    CHECK(cuMemcpy3D_v2(&c));
    printf("3d: box corner %g, far corner %g\n", box[0][0][0], box[1][2][4]);
    desc3("3d", a3);

    /* layered: 3 layers of 8x8 ushort2; only layer 2 written */
    CUarray al = make3(8, 8, 3, CU_AD_FORMAT_UNSIGNED_INT16, 2, CUDA_ARRAY3D_LAYERED);
    static unsigned char layer[8 * 32], layers[3][8 * 32];
    fill(layer, sizeof layer, 7);
    c = c3(32, 8, 1);
    host_src(&c, layer, 32, 8), arr_dst(&c, al);
    c.dstZ = 2;
    CHECK(cuMemcpy3D_v2(&c));
    c = c3(32, 8, 3);
    arr_src(&c, al), host_dst(&c, layers, 32, 8);
    CHECK(cuMemcpy3D_v2(&c));
    printf("layered: layer 0 hash %08x, layer 2 %s\n", fnv(layers[0], sizeof layers[0]),
           memcmp(layers[2], layer, sizeof layer) ? "differs" : "same");
    desc3("layered", al);

    /* cubemap: six 8x8 faces of uchar */
    CUarray ac = make3(8, 8, 6, CU_AD_FORMAT_UNSIGNED_INT8, 1, CUDA_ARRAY3D_CUBEMAP);
    static unsigned char faces[6][64], face4[64];
    fill(&faces[0][0], sizeof faces, 9);
    c = c3(8, 8, 6);
    host_src(&c, faces, 8, 8), arr_dst(&c, ac);
    CHECK(cuMemcpy3D_v2(&c));
    c = c3(8, 8, 1);
    arr_src(&c, ac), host_dst(&c, face4, 8, 8);
    c.srcZ = 4;
    CHECK(cuMemcpy3D_v2(&c));
    printf("cubemap: face 4 %s\n", memcmp(face4, faces[4], 64) ? "differs" : "same");
    desc3("cubemap", ac);

    /* large: 1024x768 uint (3 MiB), up on a stream and down, wide rows */
    enum { WL = 1024, HL = 768 };
    CUarray alg = make3(WL, HL, 0, CU_AD_FORMAT_UNSIGNED_INT32, 1, 0);
    unsigned char *big = malloc((size_t)WL * 4 * HL), *bigb = calloc(1, (size_t)WL * 4 * HL);
    fill(big, (size_t)WL * 4 * HL, 11);
    c = c3(WL * 4, HL, 1);
    host_src(&c, big, WL * 4, HL), arr_dst(&c, alg);
    CHECK(cuMemcpy3DAsync_v2(&c, st));
    c = c3(WL * 4, HL, 1);
    arr_src(&c, alg), host_dst(&c, bigb, WL * 4, HL);
    CHECK(cuMemcpy3DAsync_v2(&c, st));
    CHECK(cuStreamSynchronize(st));
    printf("large: %s, hash %08x\n", memcmp(big, bigb, (size_t)WL * 4 * HL) ? "differs" : "same",
           fnv(bigb, (size_t)WL * 4 * HL));

    /* mipmapped: 64x64 float, 4 levels; level 2 is 16x16 */
    CUDA_ARRAY3D_DESCRIPTOR md = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CUmipmappedArray mm;
    CHECK(cuMipmappedArrayCreate(&mm, &md, 4));
    CUarray l2;
    CHECK(cuMipmappedArrayGetLevel(&l2, mm, 2));
    desc3("mip level 2", l2);
    static float lv[16 * 16], lvb[16 * 16];
    for (int i = 0; i < 256; i++)
        lv[i] = (float)i;
    c = c3(64, 16, 1);
    host_src(&c, lv, 64, 16), arr_dst(&c, l2);
    CHECK(cuMemcpy3D_v2(&c));
    c = c3(64, 16, 1);
    arr_src(&c, l2), host_dst(&c, lvb, 64, 16);
    CHECK(cuMemcpy3D_v2(&c));
    printf("mip level 2: %s\n", memcmp(lv, lvb, sizeof lv) ? "differs" : "same");
    CUarray l9;
    printf("mip level 9: %s\n", result_name(cuMipmappedArrayGetLevel(&l9, mm, 9)));
    CUmipmappedArray mbad;
    printf("mipmapped array of 8 levels for 64x64: %s\n", result_name(cuMipmappedArrayCreate(&mbad, &md, 8)));

    /* texture objects: on an array, a mipmapped array, pitched and linear
     * device memory */
    CUDA_TEXTURE_DESC td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
    td.filterMode = CU_TR_FILTER_MODE_LINEAR;
    td.flags = CU_TRSF_NORMALIZED_COORDINATES;
    td.maxMipmapLevelClamp = 3.0f;
    CUDA_RESOURCE_DESC rd, got;
    CUtexObject tex[4];
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY, rd.res.array.hArray = a2;
    CUDA_RESOURCE_VIEW_DESC vd;
    memset(&vd, 0, sizeof vd);
    vd.format = CU_RES_VIEW_FORMAT_NONE, vd.width = W2, vd.height = H2;
    CHECK(cuTexObjectCreate(&tex[0], &rd, &td, &vd));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY, rd.res.mipmap.hMipmappedArray = mm;
    CHECK(cuTexObjectCreate(&tex[1], &rd, &td, NULL));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_PITCH2D, rd.res.pitch2D.devPtr = dev, rd.res.pitch2D.format = CU_AD_FORMAT_UNSIGNED_INT8;
    rd.res.pitch2D.numChannels = 4, rd.res.pitch2D.width = W2, rd.res.pitch2D.height = H2;
    rd.res.pitch2D.pitchInBytes = pitch;
    CHECK(cuTexObjectCreate(&tex[2], &rd, &td, NULL));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_LINEAR, rd.res.linear.devPtr = dev, rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1, rd.res.linear.sizeInBytes = 1024;
    CHECK(cuTexObjectCreate(&tex[3], &rd, &td, NULL));
    printf("textures: %s\n", tex[0] && tex[1] && tex[2] && tex[3] ? "made" : "a zero object");
    CHECK(cuTexObjectGetResourceDesc(&got, tex[0]));
    printf("texture 0: type %d, its array %s\n", (int)got.resType, got.res.array.hArray == a2 ? "the same" : "another");
    CHECK(cuTexObjectGetResourceDesc(&got, tex[1]));
    printf("texture 1: type %d, its mipmapped array %s\n", (int)got.resType,
           got.res.mipmap.hMipmappedArray == mm ? "the same" : "another");
    CHECK(cuTexObjectGetResourceDesc(&got, tex[2]));
    printf("texture 2: type %d, %s, %zux%zu\n", (int)got.resType, got.res.pitch2D.devPtr == dev ? "its memory" : "other memory",
           got.res.pitch2D.width, got.res.pitch2D.height);
    CUDA_TEXTURE_DESC gt;
    CHECK(cuTexObjectGetTextureDesc(&gt, tex[3]));
    printf("texture 3: filter %d, address %d, flags %u, clamp %g\n", (int)gt.filterMode, (int)gt.addressMode[0], gt.flags,
           gt.maxMipmapLevelClamp);
    CUDA_RESOURCE_VIEW_DESC gv;
    CHECK(cuTexObjectGetResourceViewDesc(&gv, tex[0]));
    printf("texture 0 view: %zux%zu\n", gv.width, gv.height);

    /* surfaces: on an array made for them only */
    CUsurfObject surf;
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY, rd.res.array.hArray = a2;
    CHECK(cuSurfObjectCreate(&surf, &rd));
    CHECK(cuSurfObjectGetResourceDesc(&got, surf));
    printf("surface: type %d, its array %s\n", (int)got.resType, got.res.array.hArray == a2 ? "the same" : "another");
    rd.res.array.hArray = a3;
    CUsurfObject s2;
    printf("surface on an array without surface loads and stores: %s\n", result_name(cuSurfObjectCreate(&s2, &rd)));

    /* refused arguments */
    CUarray bad;
    CUDA_ARRAY3D_DESCRIPTOR bd = {8, 4, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP};
    printf("cubemap of 8x4 faces: %s\n", result_name(cuArray3DCreate_v2(&bad, &bd)));
    bd = (CUDA_ARRAY3D_DESCRIPTOR){8, 8, 0, CU_AD_FORMAT_FLOAT, 3, 0};
    printf("array of 3 channels: %s\n", result_name(cuArray3DCreate_v2(&bad, &bd)));
    c = c3(W3 * 4, H3, 1);
    host_src(&c, vol, W3 * 4, H3), arr_dst(&c, a3);
    c.dstZ = D3;
    printf("copy past the last slice: %s\n", result_name(cuMemcpy3D_v2(&c)));
    c = c3(W3 * 4 + 4, 1, 1);
    arr_src(&c, a3), host_dst(&c, box, W3 * 4 + 4, 1);
    printf("copy of a row wider than the array: %s\n", result_name(cuMemcpy3D_v2(&c)));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_LINEAR, rd.res.linear.devPtr = dev + pitch * H2, rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1, rd.res.linear.sizeInBytes = 1 << 20;
    CUtexObject tbad;
    printf("texture past its memory: %s\n", result_name(cuTexObjectCreate(&tbad, &rd, &td, NULL)));

    /* destroyed, then gone */
    for (int i = 0; i < 4; i++)
        CHECK(cuTexObjectDestroy(tex[i]));
    CHECK(cuSurfObjectDestroy(surf));
    printf("texture 0 once destroyed: %s\n", result_name(cuTexObjectDestroy(tex[0])));
    printf("its description: %s\n", result_name(cuTexObjectGetResourceDesc(&got, tex[0])));
    CHECK(cuMipmappedArrayDestroy(mm));
    CUarray arrs[] = {a1, a2, a2b, a2c, a3, al, ac, alg};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
        CHECK(cuArrayDestroy(arrs[i]));
    printf("array once destroyed: %s\n", result_name(cuArrayDestroy(a1)));
    CHECK(cuMemFree_v2(dev));
    free(big), free(bigb);
    printf("arrays: ok\n");
    return 0;
}
