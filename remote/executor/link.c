/* JIT linking's image (cuLinkComplete): the driver's, in this process, kept
 * by its link state until that is destroyed; the client asks its size,
 * then reads it in pieces into its own memory. */
#include "executor.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static CUresult (*complete)(CUlinkState, void **, size_t *);
static CUresult (*destroy)(CUlinkState);

static struct linked {
    CUlinkState state;
    const void *image;
    size_t size;
} *linked;
static size_t nlinked, caplinked;

static struct linked *find(CUlinkState s)
{
    for (size_t i = 0; i < nlinked; i++)
        if (linked[i].state == s)
            return &linked[i];
    return NULL;
}

static CUresult link_complete(CUlinkState state, size_t *size)
{
    void *image = NULL;
    size_t n = 0;
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = complete(state, &image, &n);
    if (r != CUDA_SUCCESS)
        return r;
    struct linked *l = find(state);
    if (!l) {
        if (nlinked == caplinked) {
            size_t c = caplinked ? 2 * caplinked : 8;
            struct linked *m = realloc(linked, c * sizeof *m);
            if (!m)
                return CUDA_ERROR_OUT_OF_MEMORY;
            linked = m;
            caplinked = c;
        }
        l = &linked[nlinked++];
    }
    *l = (struct linked){state, image, n};
    *size = n;
    return CUDA_SUCCESS;
}

static CUresult link_read(CUlinkState state, size_t off, void *dst, size_t n)
{
    struct linked *l = find(state);
    if (!l)
        return CUDA_ERROR_NOT_READY; /* not completed */
    if (!dst || n > FGR_MIRROR_BATCH || off > l->size || n > l->size - off)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const char *)l->image + off, n);
    return CUDA_SUCCESS;
}

static CUresult link_destroy(CUlinkState state)
{
    CUresult r = destroy(state);
    struct linked *l = find(state);
    if (r == CUDA_SUCCESS && l)
        *l = linked[--nlinked];
    return r;
}

void fgr_link_init(void *driver)
{
    *(void **)&complete = dlsym(driver, "cuLinkComplete");
    *(void **)&destroy = fgr_real[FGR_OP_cuLinkDestroy];
    if (!complete || !destroy)
        return; /* linking stays unsupported */
    fgr_real[FGR_OP_fgrLinkComplete] = (void *)link_complete;
    fgr_real[FGR_OP_fgrLinkRead] = (void *)link_read;
    fgr_real[FGR_OP_cuLinkDestroy] = (void *)link_destroy;
}
