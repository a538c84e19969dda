/* Texture and surface objects: what a kernel would read through, checked
 * as the driver checks it when made, and kept for the get-descriptor calls.
 * The simulated kernels do not read them. An object's value is a small
 * number, as the driver's are, never 0. */
#include "sim.h"
#include "flexgv/cuda_util.h"

#include <stdlib.h>
#include <string.h>

struct tobj {
    unsigned long long id;
    int surface;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
    struct tobj *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct tobj *objs;
static unsigned long long last;

static int format_ok(CUarray_format f, unsigned ch)
{
    return fg_format_bytes(f) && (ch == 1 || ch == 2 || ch == 4);
}

/* The resource, as cuTexObjectCreate (surface: cuSurfObjectCreate) takes
 * it: a live array or mipmapped array (a surface: an array made for surface
 * loads and stores), or device memory of the format's elements. */
static CUresult resource_ok(const CUDA_RESOURCE_DESC *r, int surface)
{
    if (r->flags)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned flags = 0;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        if (!r->res.array.hArray)
            return CUDA_ERROR_INVALID_VALUE;
        if (!sim_array_known(r->res.array.hArray, 0, &flags))
            return CUDA_ERROR_INVALID_HANDLE;
        return surface && !(flags & CUDA_ARRAY3D_SURFACE_LDST) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        if (surface || !r->res.mipmap.hMipmappedArray)
            return CUDA_ERROR_INVALID_VALUE;
        return sim_array_known(r->res.mipmap.hMipmappedArray, 1, NULL) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    case CU_RESOURCE_TYPE_LINEAR: {
        const __typeof__(r->res.linear) *l = &r->res.linear;
        if (surface || !format_ok(l->format, l->numChannels) || !l->sizeInBytes ||
            !sim_valid_range(l->devPtr, l->sizeInBytes))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
        const __typeof__(r->res.pitch2D) *p = &r->res.pitch2D;
        uint64_t row, span;
        if (surface || !format_ok(p->format, p->numChannels) || !p->width || !p->height ||
            __builtin_mul_overflow((uint64_t)p->width, fg_format_bytes(p->format) * p->numChannels, &row) ||
            p->pitchInBytes < row || __builtin_mul_overflow((uint64_t)p->pitchInBytes, p->height - 1, &span) ||
            __builtin_add_overflow(span, row, &span) || !sim_valid_range(p->devPtr, span))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult create(unsigned long long *out, const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
                       const CUDA_RESOURCE_VIEW_DESC *v, int surface)
{
    struct sim_ctx *c;
    CUresult e = sim_check_ctx(&c);
    if (e)
        return e;
    if (!out || !r || (!surface && !t))
        return CUDA_ERROR_INVALID_VALUE;
    if ((e = resource_ok(r, surface)) != CUDA_SUCCESS)
        return e;
    /* a view is of an array's texels only */
    if (v && r->resType != CU_RESOURCE_TYPE_ARRAY && r->resType != CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    if (t && (t->filterMode > CU_TR_FILTER_MODE_LINEAR || t->mipmapFilterMode > CU_TR_FILTER_MODE_LINEAR ||
              t->addressMode[0] > CU_TR_ADDRESS_MODE_BORDER || t->addressMode[1] > CU_TR_ADDRESS_MODE_BORDER ||
              t->addressMode[2] > CU_TR_ADDRESS_MODE_BORDER))
        return CUDA_ERROR_INVALID_VALUE;
    struct tobj *o = calloc(1, sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->surface = surface;
    o->res = *r;
    if (t)
        o->tex = *t;
    if (v)
        o->view = *v;
    pthread_mutex_lock(&lock);
    o->id = ++last;
    o->next = objs;
    objs = o;
    pthread_mutex_unlock(&lock);
    *out = o->id;
    return CUDA_SUCCESS;
}

/* The object id names (of its kind), under lock. */
static struct tobj *find(unsigned long long id, int surface)
{
    for (struct tobj *o = objs; o; o = o->next)
        if (o->id == id && o->surface == surface)
            return o;
    return NULL;
}

static CUresult destroy(unsigned long long id, int surface)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    for (struct tobj **p = &objs; *p; p = &(*p)->next)
        if ((*p)->id == id && (*p)->surface == surface) {
            struct tobj *o = *p;
            *p = o->next;
            pthread_mutex_unlock(&lock);
            free(o);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE;
}

enum what { RES, TEX, VIEW };

static CUresult get(void *out, unsigned long long id, int surface, enum what w)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct tobj *o = find(id, surface);
    if (o && w == RES)
        memcpy(out, &o->res, sizeof o->res);
    else if (o && w == TEX)
        memcpy(out, &o->tex, sizeof o->tex);
    else if (o)
        memcpy(out, &o->view, sizeof o->view);
    pthread_mutex_unlock(&lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                      const CUDA_TEXTURE_DESC *pTexDesc, const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
    SIM_GATE();
    return create(pTexObject, pResDesc, pTexDesc, pResViewDesc, 0);
}
SIM_EXPORT CUresult cuTexObjectDestroy(CUtexObject texObject) { SIM_GATE(); return destroy(texObject, 0); }
SIM_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
    SIM_GATE();
    return get(pResDesc, texObject, 0, RES);
}
SIM_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
    SIM_GATE();
    return get(pTexDesc, texObject, 0, TEX);
}
SIM_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *pResViewDesc, CUtexObject texObject)
{
    SIM_GATE();
    return get(pResViewDesc, texObject, 0, VIEW);
}
SIM_EXPORT CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
    SIM_GATE();
    return create(pSurfObject, pResDesc, NULL, NULL, 1);
}
SIM_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject surfObject) { SIM_GATE(); return destroy(surfObject, 1); }
SIM_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
    SIM_GATE();
    return get(pResDesc, surfObject, 1, RES);
}
