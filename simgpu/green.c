/* Green contexts (12.4): a context on a share of a device's SMs, as a GPU
 * gives one. A device's, a context's or a green context's SMs are a
 * resource; a split of it gives groups of a granularity (8 SMs, 2 when
 * co-scheduling is ignored, as on compute capability 9.0); a descriptor
 * names one group (or several of one split); a green context made from it
 * has a context of its own, current nowhere until the program makes it so,
 * whose kernels run on those SMs only, so proportionally longer (exec.c).
 * The bytes of a resource before its union are the driver's: here what
 * device it is of and which split made it. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define RES_MAGIC 0x52534746u   /* "FGSR" */
#define DESC_MAGIC 0x44534746u  /* "FGSD" */
#define GREEN_MAGIC 0x4e524746u /* "FGRN" */

struct sim_green {
    uint32_t magic;
    int dev, sms;
    struct sim_ctx *ctx;
};

struct desc {
    uint32_t magic;
    int dev, sms;
};

/* The driver's bytes of a resource: magic, device, split (0: none). Its
 * SMs come in groups of 8 that run together (of 2 when split ignoring
 * that), 2 at the least. */
static void sm_resource(CUdevResource *r, int phys, unsigned sms, uint32_t split)
{
    memset(r, 0, sizeof *r);
    r->type = CU_DEV_RESOURCE_TYPE_SM;
    uint32_t w[3] = {RES_MAGIC, (uint32_t)phys, split};
    memcpy(r->_internal_padding, w, sizeof w);
    r->sm.smCount = sms;
    r->sm.minSmPartitionSize = 2;
    r->sm.smCoscheduledAlignment = sms % 8 ? 2 : 8;
}

/* A resource's device (-1: not one of ours) and split. */
static int resource_of(const CUdevResource *r, uint32_t *split)
{
    uint32_t w[3];
    memcpy(w, r->_internal_padding, sizeof w);
    if (w[0] != RES_MAGIC || (int)w[1] < 0 || (int)w[1] >= sim->cfg.devices)
        return -1;
    *split = w[2];
    return (int)w[1];
}

static struct sim_green *as_green(CUgreenCtx h)
{
    struct sim_green *g = (struct sim_green *)h;
    return g && g->magic == GREEN_MAGIC ? g : NULL;
}

static CUresult get_resource(CUdevResource *resource, CUdevResourceType type, int phys, int sms)
{
    if (!resource)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    sm_resource(resource, phys, (unsigned)(sms ? sms : sim_sms()), 0);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource, CUdevResourceType type)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    int p = sim_phys(device);
    return p < 0 ? CUDA_ERROR_INVALID_DEVICE : get_resource(resource, type, p, 0);
}

SIM_EXPORT CUresult cuCtxGetDevResource(CUcontext hCtx, CUdevResource *resource, CUdevResourceType type)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_ctx_valid(hCtx))
        return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_ctx *c = (struct sim_ctx *)hCtx;
    return get_resource(resource, type, c->dev, c->sms);
}

SIM_EXPORT CUresult cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource *resource, CUdevResourceType type)
{
    struct sim_green *g = as_green(hCtx);
    return g ? get_resource(resource, type, g->dev, g->sms) : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups, const CUdevResource *input,
                                                CUdevResource *remaining, unsigned int useFlags, unsigned int minCount)
{
    static uint32_t splits;
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!nbGroups || !input || (result && !*nbGroups) ||
        (useFlags & ~(unsigned)(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                                 CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE)))
        return CUDA_ERROR_INVALID_VALUE;
    if (input->type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    uint32_t from;
    int p = resource_of(input, &from);
    if (p < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* A group of a split cannot be split again (but through a green
     * context made of it). */
    if (from)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    unsigned gran = useFlags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING ? 2 : 8;
    unsigned each = minCount <= gran ? gran : (minCount + gran - 1) / gran * gran;
    unsigned have = input->sm.smCount, groups = have / each;
    if (!groups)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (result && groups > *nbGroups)
        groups = *nbGroups;
    uint32_t split = __atomic_add_fetch(&splits, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; result && i < groups; i++)
        sm_resource(&result[i], p, each, split);
    if (remaining)
        sm_resource(remaining, p, have - groups * each, split);
    *nbGroups = groups;
    return CUDA_SUCCESS;
}

/* Several resources make one descriptor when they are of one split. */
SIM_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources, unsigned int nbResources)
{
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phDesc || !resources || !nbResources)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = -1;
    uint32_t split = 0;
    unsigned sms = 0;
    for (unsigned i = 0; i < nbResources; i++) {
        uint32_t s;
        if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM)
            return CUDA_ERROR_INVALID_RESOURCE_TYPE;
        int p = resource_of(&resources[i], &s);
        if (p < 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (i && (p != dev || s != split || !s))
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        dev = p, split = s;
        sms += resources[i].sm.smCount;
    }
    if (!sms || sms > (unsigned)sim_sms())
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    struct desc *d = malloc(sizeof *d);
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *d = (struct desc){DESC_MAGIC, dev, (int)sms};
    *phDesc = (CUdevResourceDesc)d;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct desc *d = (struct desc *)desc;
    if (!phCtx || !d || d->magic != DESC_MAGIC || flags != CU_GREEN_CTX_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    int p = sim_phys(dev);
    if (p < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (p != d->dev)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_green *g = calloc(1, sizeof *g);
    struct sim_ctx *c = g ? sim_ctx_make(p, d->sms) : NULL;
    if (!c) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *g = (struct sim_green){GREEN_MAGIC, p, d->sms, c};
    c->green = g;
    *phCtx = (CUgreenCtx)g;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    SIM_GATE();
    struct sim_green *g = as_green(hCtx);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    g->magic = 0;
    sim_ctx_end(g->ctx);
    free(g);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    struct sim_green *g = as_green(hCtx);
    if (!pContext)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    *pContext = (CUcontext)g->ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent)
{
    struct sim_green *g = as_green(hCtx);
    return g ? cuCtxRecordEvent((CUcontext)g->ctx, hEvent) : CUDA_ERROR_INVALID_HANDLE;
}

SIM_EXPORT CUresult cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent)
{
    struct sim_green *g = as_green(hCtx);
    return g ? cuCtxWaitEvent((CUcontext)g->ctx, hEvent) : CUDA_ERROR_INVALID_HANDLE;
}

/* Its streams are non-blocking: the legacy stream is not the green
 * context's to wait for. */
SIM_EXPORT CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags, int priority)
{
    SIM_GATE();
    struct sim_green *g = as_green(greenCtx);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags != CU_STREAM_NON_BLOCKING)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_stream_make(g->ctx, phStream, flags, priority);
}

SIM_EXPORT CUresult cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long *greenCtxId)
{
    struct sim_green *g = as_green(greenCtx);
    if (!greenCtxId)
        return CUDA_ERROR_INVALID_VALUE;
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    *greenCtxId = g->ctx->id;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx *phCtx)
{
    struct sim_stream *s;
    if (!phCtx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_stream_arg(hStream, 0, &s);
    if (r == CUDA_SUCCESS)
        *phCtx = (CUgreenCtx)s->ctx->green;
    return r;
}

/* A stream's context; the _v2 form gives a green context's stream as its
 * green context, with no context. */
static CUresult stream_ctx(CUstream hStream, int pt, CUcontext *pCtx, CUgreenCtx *pGreen, int v2)
{
    struct sim_stream *s;
    if (!pCtx || (v2 && !pGreen))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_stream_arg(hStream, pt, &s);
    if (r != CUDA_SUCCESS)
        return r;
    int green = v2 && s->ctx->green;
    *pCtx = green ? NULL : (CUcontext)s->ctx;
    if (v2)
        *pGreen = (CUgreenCtx)s->ctx->green;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) { return stream_ctx(hStream, 0, pctx, NULL, 0); }
SIM_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx) { return stream_ctx(hStream, 1, pctx, NULL, 0); }
SIM_EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    return stream_ctx(hStream, 0, pCtx, pGreenCtx, 1);
}
SIM_EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    return stream_ctx(hStream, 1, pCtx, pGreenCtx, 1);
}
