/* JIT linking's image (cuLinkComplete): the driver's, in this process, kept
 * by its link state until that is destroyed; the client asks its size,
 * then reads it in pieces into its own memory. The state's logs, which the
 * driver writes at later calls, go into buffers of the executor's kept
 * with it (and its options with them: the driver may write back into
 * them), which the client reads after those calls (fgrLinkLogs). */
#include "executor.h"
#include "../options.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static CUresult (*complete)(CUlinkState, void **, size_t *);
static CUresult (*destroy)(CUlinkState);
static CUresult (*create)(unsigned int, CUjit_option *, void **, CUlinkState *);

static struct kept {
    CUlinkState state;
    CUjit_option *o;
    void **v;
    char *info, *error;
    unsigned ninfo, nerror; /* their sizes, the last byte a NUL */
    struct kept *next;
} *kept;

static void kept_free(struct kept *k)
{
    free(k->o);
    free(k->v);
    free(k->info);
    free(k->error);
    free(k);
}

/* The options as decoded (each log's buffer the request's, its size the
 * client's), copied for the state, the logs given buffers that last. */
static CUresult link_create(unsigned int n, CUjit_option *o, void **v, CUlinkState *out)
{
    struct kept *k = calloc(1, sizeof *k);
    if (!k || (n && (!(k->o = malloc(n * sizeof *o)) || !(k->v = malloc(n * sizeof *v))))) {
        if (k)
            kept_free(k);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (n) {
        memcpy(k->o, o, n * sizeof *o);
        memcpy(k->v, v, n * sizeof *v);
    }
    for (unsigned i = 0; i < n; i++) {
        if (!fgr_is_log((uint64_t)o[i]))
            continue;
        unsigned size = 0;
        for (unsigned j = 0; j < n; j++)
            if ((uint64_t)o[j] == (uint64_t)o[i] + 1)
                size = (unsigned)(uintptr_t)v[j]; /* at most FGR_LOG_MAX (fgr_get_opts) */
        char *b = calloc(size + 1, 1);
        if (!b) {
            kept_free(k);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        k->v[i] = b;
        if ((uint64_t)o[i] == FGR_JIT_INFO_LOG_BUFFER) {
            free(k->info);
            k->info = b, k->ninfo = size + 1;
        } else {
            free(k->error);
            k->error = b, k->nerror = size + 1;
        }
    }
    CUresult r = create(n, k->o, k->v, out);
    if (r != CUDA_SUCCESS || !out) {
        kept_free(k);
        return r;
    }
    k->state = *out;
    k->next = kept;
    kept = k;
    return r;
}

static struct kept **kept_of(CUlinkState s)
{
    struct kept **p = &kept;
    while (*p && (*p)->state != s)
        p = &(*p)->next;
    return p;
}

/* What the driver wrote into the state's logs so far (empty where it was
 * given none). */
static CUresult link_logs(CUlinkState state, unsigned int ninfo, char *info, unsigned int nerror, char *error)
{
    struct kept *k = *kept_of(state);
    if (info && ninfo)
        memset(info, 0, ninfo);
    if (error && nerror)
        memset(error, 0, nerror);
    if (!k)
        return CUDA_SUCCESS;
    if (info && ninfo && k->info)
        memcpy(info, k->info, (ninfo < k->ninfo ? ninfo : k->ninfo) - 1);
    if (error && nerror && k->error)
        memcpy(error, k->error, (nerror < k->nerror ? nerror : k->nerror) - 1);
    return CUDA_SUCCESS;
}

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
    struct kept **p = kept_of(state), *k = *p;
    if (r == CUDA_SUCCESS && k) {
        *p = k->next;
        kept_free(k);
    }
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
    fgr_real[FGR_OP_fgrLinkLogs] = (void *)link_logs;
    *(void **)&create = fgr_real[FGR_OP_cuLinkCreate_v2];
    if (create)
        fgr_real[FGR_OP_cuLinkCreate_v2] = (void *)link_create;
}
