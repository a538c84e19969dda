/* Arrays' copies, texture and surface objects (api/remote.api):
 *   - a texture or surface object is the driver's value, which the
 *     program's kernels read in their parameters as it is: it is not
 *     named, but each one made here is noted, and a request naming one
 *     the connection did not make is refused (CUDA_ERROR_INVALID_VALUE, as
 *     the driver answers an unknown object) before the driver sees it;
 *   - a resource description holds, by its resType, an array or mipmapped
 *     array (by name: translated, refused unless the connection's) or
 *     device memory (refused unless in the connection's ranges); handles
 *     the driver describes go back by their names;
 *   - a copy with an array side (fgrArrayCopy, fgrArrayRead) has its
 *     extent checked against the array's layout as the driver describes
 *     it, its device side against the connection's ranges, and its host
 *     side is the request's own bytes (or the answer's): never an address
 *     the client gave. */
#include "executor.h"
#include "flexgv/cuda_util.h"

#include <dlfcn.h>
#include <stdlib.h>

static CUresult (*tex_create)(CUtexObject *, const CUDA_RESOURCE_DESC *, const CUDA_TEXTURE_DESC *,
                              const CUDA_RESOURCE_VIEW_DESC *);
static CUresult (*tex_destroy)(CUtexObject);
static CUresult (*tex_res)(CUDA_RESOURCE_DESC *, CUtexObject);
static CUresult (*tex_desc)(CUDA_TEXTURE_DESC *, CUtexObject);
static CUresult (*tex_view)(CUDA_RESOURCE_VIEW_DESC *, CUtexObject);
static CUresult (*surf_create)(CUsurfObject *, const CUDA_RESOURCE_DESC *);
static CUresult (*surf_destroy)(CUsurfObject);
static CUresult (*surf_res)(CUDA_RESOURCE_DESC *, CUsurfObject);
static CUresult (*copy3d)(const CUDA_MEMCPY3D *, CUstream);
static CUresult (*array_desc)(CUDA_ARRAY3D_DESCRIPTOR *, CUarray);
static CUresult (*stream_sync)(CUstream);

/* The objects this connection made: value and kind (1: a surface). */
static struct obj {
    unsigned long long v;
    int surface;
} *objs;
static size_t nobjs, capobjs;

static struct obj *obj_find(unsigned long long v, int surface)
{
    for (size_t i = 0; i < nobjs; i++)
        if (objs[i].v == v && objs[i].surface == surface)
            return &objs[i];
    return NULL;
}

/* Room for one more, before the driver makes it: an object the connection
 * could not note would be one it cannot use. */
static int obj_room(void)
{
    if (nobjs < capobjs)
        return 1;
    size_t cap = capobjs ? capobjs * 2 : 16;
    struct obj *o = realloc(objs, cap * sizeof *o);
    if (!o)
        return 0;
    objs = o, capobjs = cap;
    return 1;
}

static void obj_forget(struct obj *o) { *o = objs[--nobjs]; }

size_t fgr_texture_objects(void) { return nobjs; }

/* Says the first object refused on this connection. */
static CUresult refuse_object(const char *call, const char *param, unsigned long long v)
{
    static int said;
    if (!said++)
        fgr_logf("refusing %s: %s=0x%llx is not an object this connection made (error %d; further ones are not "
                 "logged)",
                 call, param, v, (int)CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
}

/* The resource as the driver is to see it. */
static CUresult resource_in(const char *call, CUDA_RESOURCE_DESC *r)
{
    uint64_t name, v;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        name = (uint64_t)(uintptr_t)r->res.array.hArray;
        if (!fgr_has(FGR_H_CUarray, v = fgr_in(FGR_H_CUarray, name)))
            return fgr_refuse(call, "pResDesc->res.array.hArray", name, CUDA_ERROR_INVALID_HANDLE);
        r->res.array.hArray = (CUarray)(uintptr_t)v;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        name = (uint64_t)(uintptr_t)r->res.mipmap.hMipmappedArray;
        if (!fgr_has(FGR_H_CUmipmappedArray, v = fgr_in(FGR_H_CUmipmappedArray, name)))
            return fgr_refuse(call, "pResDesc->res.mipmap.hMipmappedArray", name, CUDA_ERROR_INVALID_HANDLE);
        r->res.mipmap.hMipmappedArray = (CUmipmappedArray)(uintptr_t)v;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
        if (!fgr_mem_in(r->res.linear.devPtr, r->res.linear.sizeInBytes ? r->res.linear.sizeInBytes : 1))
            return fgr_refuse(call, "pResDesc->res.linear.devPtr", r->res.linear.devPtr, CUDA_ERROR_INVALID_VALUE);
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D: {
        const __typeof__(r->res.pitch2D) *p = &r->res.pitch2D;
        uint64_t row, span = 1;
        if (__builtin_mul_overflow((uint64_t)p->width, fg_format_bytes(p->format) * p->numChannels, &row) ||
            (p->height && (__builtin_mul_overflow((uint64_t)p->pitchInBytes, (uint64_t)p->height - 1, &span) ||
                           __builtin_add_overflow(span, row, &span))) ||
            !fgr_mem_in(p->devPtr, span ? span : 1))
            return fgr_refuse(call, "pResDesc->res.pitch2D.devPtr", p->devPtr, CUDA_ERROR_INVALID_VALUE);
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_SUCCESS; /* the driver's to refuse: it names nothing */
    }
}

/* The driver's handles in a description it returned, by their names. */
static void resource_out(CUDA_RESOURCE_DESC *r)
{
    if (r->resType == CU_RESOURCE_TYPE_ARRAY)
        fgr_out_n(FGR_H_CUarray, &r->res.array.hArray, 1);
    else if (r->resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
        fgr_out_n(FGR_H_CUmipmappedArray, &r->res.mipmap.hMipmappedArray, 1);
}

static CUresult create(const char *call, unsigned long long *out, const CUDA_RESOURCE_DESC *r,
                       const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v, int surface)
{
    CUDA_RESOURCE_DESC d;
    CUresult e;
    if (r) {
        d = *r;
        if ((e = resource_in(call, &d)) != CUDA_SUCCESS)
            return e;
    }
    if (!obj_room())
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = surface ? surf_create(out, r ? &d : NULL) : tex_create(out, r ? &d : NULL, t, v);
    if (e == CUDA_SUCCESS && out)
        objs[nobjs++] = (struct obj){*out, surface};
    return e;
}

static CUresult tex_create_own(CUtexObject *out, const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
                               const CUDA_RESOURCE_VIEW_DESC *v)
{
    return create("cuTexObjectCreate", out, r, t, v, 0);
}

static CUresult surf_create_own(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
    return create("cuSurfObjectCreate", out, r, NULL, NULL, 1);
}

static CUresult destroy(const char *call, unsigned long long v, int surface)
{
    struct obj *o = obj_find(v, surface);
    if (!o)
        return refuse_object(call, surface ? "surfObject" : "texObject", v);
    CUresult e = surface ? surf_destroy(v) : tex_destroy(v);
    if (e == CUDA_SUCCESS)
        obj_forget(o);
    return e;
}

static CUresult tex_destroy_own(CUtexObject v) { return destroy("cuTexObjectDestroy", v, 0); }
static CUresult surf_destroy_own(CUsurfObject v) { return destroy("cuSurfObjectDestroy", v, 1); }

static CUresult tex_res_own(CUDA_RESOURCE_DESC *out, CUtexObject v)
{
    if (!obj_find(v, 0))
        return refuse_object("cuTexObjectGetResourceDesc", "texObject", v);
    CUresult e = tex_res(out, v);
    if (e == CUDA_SUCCESS && out)
        resource_out(out);
    return e;
}

static CUresult surf_res_own(CUDA_RESOURCE_DESC *out, CUsurfObject v)
{
    if (!obj_find(v, 1))
        return refuse_object("cuSurfObjectGetResourceDesc", "surfObject", v);
    CUresult e = surf_res(out, v);
    if (e == CUDA_SUCCESS && out)
        resource_out(out);
    return e;
}

static CUresult tex_desc_own(CUDA_TEXTURE_DESC *out, CUtexObject v)
{
    if (!obj_find(v, 0))
        return refuse_object("cuTexObjectGetTextureDesc", "texObject", v);
    return tex_desc(out, v);
}

static CUresult tex_view_own(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject v)
{
    if (!obj_find(v, 0))
        return refuse_object("cuTexObjectGetResourceViewDesc", "texObject", v);
    return tex_view(out, v);
}

/* ---- copies with an array side ---- */

/* Says the first copy refused for its extent on this connection. */
static CUresult refuse_extent(const char *call, const char *side)
{
    static int said;
    if (!said++)
        fgr_logf("refusing %s: the copy's extent lies outside its %s array (error %d; further ones are not logged)",
                 call, side, (int)CUDA_ERROR_INVALID_VALUE);
    return CUDA_ERROR_INVALID_VALUE;
}

/* The extent from (x, y, z) lies in the array: x and the width in bytes,
 * y in rows, z in slices (layers). */
static int in_array(CUarray a, size_t x, size_t y, size_t z, const CUDA_MEMCPY3D *p)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    uint64_t row;
    if (!a || array_desc(&d, a) != CUDA_SUCCESS ||
        __builtin_mul_overflow((uint64_t)d.Width, fg_format_bytes(d.Format) * d.NumChannels, &row))
        return 0;
    uint64_t rows = d.Height ? d.Height : 1, slices = d.Depth ? d.Depth : 1;
    return x <= row && p->WidthInBytes <= row - x && y <= rows && p->Height <= rows - y && z <= slices &&
           p->Depth <= slices - z;
}

/* The device memory the extent covers lies in one of the connection's
 * ranges. */
static int in_device(CUdeviceptr dev, size_t pitch, size_t height, size_t x, size_t y, size_t z,
                     const CUDA_MEMCPY3D *p)
{
    uint64_t w = p->WidthInBytes, h = p->Height, d = p->Depth, start, span, t;
    if ((h > 1 && pitch < w) || (d > 1 && height < h))
        return 0;
    /* start: dev + (z * height + y) * pitch + x; span: up to the last row's end */
    if (__builtin_mul_overflow((uint64_t)z, (uint64_t)height, &t) || __builtin_add_overflow(t, (uint64_t)y, &t) ||
        __builtin_mul_overflow(t, (uint64_t)pitch, &t) || __builtin_add_overflow(t, (uint64_t)x, &t) ||
        __builtin_add_overflow(t, (uint64_t)dev, &start))
        return 0;
    if (__builtin_mul_overflow(d - 1, (uint64_t)height, &t) || __builtin_add_overflow(t, h - 1, &t) ||
        __builtin_mul_overflow(t, (uint64_t)pitch, &t) || __builtin_add_overflow(t, w, &span))
        return 0;
    return fgr_mem_in(start, span);
}

/* Rows packed in the request or the answer: n bytes, exactly the extent. */
static int packed(const void *buf, size_t n, const CUDA_MEMCPY3D *p)
{
    uint64_t t;
    return buf && !__builtin_mul_overflow((uint64_t)p->WidthInBytes, (uint64_t)p->Height, &t) &&
           !__builtin_mul_overflow(t, (uint64_t)p->Depth, &t) && t == n;
}

/* The copy the driver is given: each side an array or device memory the
 * connection holds, or the request's (the answer's) own bytes. */
static CUresult array_copy_check(const char *call, CUDA_MEMCPY3D *q, const void *src, void *dst, size_t n)
{
    int sa = q->srcMemoryType == CU_MEMORYTYPE_ARRAY, da = q->dstMemoryType == CU_MEMORYTYPE_ARRAY;
    if (!q->WidthInBytes || !q->Height || !q->Depth || (!sa && !da) || q->srcLOD || q->dstLOD)
        return fgr_refuse(call, "p", 0, CUDA_ERROR_INVALID_VALUE);
    q->reserved0 = q->reserved1 = NULL;
    switch (q->srcMemoryType) {
    case CU_MEMORYTYPE_ARRAY:
        if (!in_array(q->srcArray, q->srcXInBytes, q->srcY, q->srcZ, q))
            return refuse_extent(call, "source");
        q->srcHost = NULL;
        break;
    case CU_MEMORYTYPE_DEVICE:
        if (!in_device(q->srcDevice, q->srcPitch, q->srcHeight, q->srcXInBytes, q->srcY, q->srcZ, q))
            return fgr_refuse(call, "p->srcDevice", q->srcDevice, CUDA_ERROR_INVALID_VALUE);
        q->srcHost = NULL;
        break;
    case CU_MEMORYTYPE_HOST:
        if (!packed(src, n, q))
            return fgr_refuse(call, "n", n, CUDA_ERROR_INVALID_VALUE);
        q->srcHost = src, q->srcXInBytes = q->srcY = q->srcZ = 0;
        q->srcPitch = q->WidthInBytes, q->srcHeight = q->Height;
        break;
    default:
        return fgr_refuse(call, "p->srcMemoryType", q->srcMemoryType, CUDA_ERROR_INVALID_VALUE);
    }
    switch (q->dstMemoryType) {
    case CU_MEMORYTYPE_ARRAY:
        if (!in_array(q->dstArray, q->dstXInBytes, q->dstY, q->dstZ, q))
            return refuse_extent(call, "destination");
        q->dstHost = NULL;
        break;
    case CU_MEMORYTYPE_DEVICE:
        if (!in_device(q->dstDevice, q->dstPitch, q->dstHeight, q->dstXInBytes, q->dstY, q->dstZ, q))
            return fgr_refuse(call, "p->dstDevice", q->dstDevice, CUDA_ERROR_INVALID_VALUE);
        q->dstHost = NULL;
        break;
    case CU_MEMORYTYPE_HOST:
        if (!packed(dst, n, q))
            return fgr_refuse(call, "n", n, CUDA_ERROR_INVALID_VALUE);
        q->dstHost = dst, q->dstXInBytes = q->dstY = q->dstZ = 0;
        q->dstPitch = q->WidthInBytes, q->dstHeight = q->Height;
        break;
    default:
        return fgr_refuse(call, "p->dstMemoryType", q->dstMemoryType, CUDA_ERROR_INVALID_VALUE);
    }
    /* an upload brings its bytes, a download takes them: not both, nor none
     * when a side is the host's */
    if ((q->srcMemoryType == CU_MEMORYTYPE_HOST) + (q->dstMemoryType == CU_MEMORYTYPE_HOST) != (src || dst ? 1 : 0) ||
        (!src && !dst && n))
        return fgr_refuse(call, "n", n, CUDA_ERROR_INVALID_VALUE);
    return CUDA_SUCCESS;
}

static CUresult array_copy_as(const char *call, const CUDA_MEMCPY3D *p, const void *src, size_t n, CUstream s)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D q = *p;
    CUresult r = array_copy_check(call, &q, n ? src : NULL, NULL, n);
    /* into a graph being captured: bytes that outlive the request */
    if (!r && q.srcMemoryType == CU_MEMORYTYPE_HOST && (r = fgr_captured_upload(&q.srcHost, n, s, 0)) != CUDA_SUCCESS)
        return r;
    return r ? r : copy3d(&q, s);
}

static CUresult array_copy(const CUDA_MEMCPY3D *p, const void *src, size_t n, CUstream s)
{
    return array_copy_as("fgrArrayCopy", p, src, n, s);
}

static CUresult array_copy_wait(const CUDA_MEMCPY3D *p, const void *src, size_t n, CUstream s)
{
    CUresult r = array_copy_as("fgrArrayCopyWait", p, src, n, s);
    return r ? r : stream_sync(s);
}

static CUresult array_read(void *dst, size_t n, const CUDA_MEMCPY3D *p, CUstream s)
{
    if (!p || p->dstMemoryType != CU_MEMORYTYPE_HOST || !dst)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY3D q = *p;
    CUresult r = array_copy_check("fgrArrayRead", &q, NULL, dst, n);
    if (!r)
        r = fgr_captured_download(s, 0, "fgrArrayRead");
    return r ? r : copy3d(&q, s);
}

void fgr_textures_init(void *driver)
{
#define SYM(var, name) *(void **)&var = dlsym(driver, name)
    SYM(tex_create, "cuTexObjectCreate");
    SYM(tex_destroy, "cuTexObjectDestroy");
    SYM(tex_res, "cuTexObjectGetResourceDesc");
    SYM(tex_desc, "cuTexObjectGetTextureDesc");
    SYM(tex_view, "cuTexObjectGetResourceViewDesc");
    SYM(surf_create, "cuSurfObjectCreate");
    SYM(surf_destroy, "cuSurfObjectDestroy");
    SYM(surf_res, "cuSurfObjectGetResourceDesc");
    SYM(copy3d, "cuMemcpy3DAsync_v2");
    SYM(array_desc, "cuArray3DGetDescriptor_v2");
    SYM(stream_sync, "cuStreamSynchronize");
#undef SYM
    /* an entry the driver lacks answers CUDA_ERROR_NOT_SUPPORTED */
#define OWN(op, have, fn) fgr_real[op] = (have) ? (void *)(fn) : NULL
    OWN(FGR_OP_cuTexObjectCreate, tex_create, tex_create_own);
    OWN(FGR_OP_cuTexObjectDestroy, tex_destroy, tex_destroy_own);
    OWN(FGR_OP_cuTexObjectGetResourceDesc, tex_res, tex_res_own);
    OWN(FGR_OP_cuTexObjectGetTextureDesc, tex_desc, tex_desc_own);
    OWN(FGR_OP_cuTexObjectGetResourceViewDesc, tex_view, tex_view_own);
    OWN(FGR_OP_cuSurfObjectCreate, surf_create, surf_create_own);
    OWN(FGR_OP_cuSurfObjectDestroy, surf_destroy, surf_destroy_own);
    OWN(FGR_OP_cuSurfObjectGetResourceDesc, surf_res, surf_res_own);
    int copies = copy3d && array_desc && stream_sync;
    OWN(FGR_OP_fgrArrayCopy, copies, array_copy);
    OWN(FGR_OP_fgrArrayCopyWait, copies, array_copy_wait);
    OWN(FGR_OP_fgrArrayRead, copies, array_read);
#undef OWN
}
