/* JIT linking (api/remote.api): the link state is the server's. A file is
 * read here and added as data; the linked image is read back here, and is
 * the program's to load until it destroys the state, as the driver's. The
 * logs cuLinkCreate was given buffers for are the executor's, kept with
 * the state: read into the program's buffers after each call that writes
 * them (an input refused, the link completed or not). */
#include "client.h"
#include "../options.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct image {
    CUlinkState state;
    void *bytes;
    struct image *next;
} *images;

static struct logs {
    CUlinkState state;
    char *info, *error;     /* the program's buffers, */
    unsigned ninfo, nerror; /* and as much of them as travels */
    struct logs *next;
} *logs;

static struct logs **logs_of(CUlinkState state)
{
    struct logs **p = &logs;
    while (*p && (*p)->state != state)
        p = &(*p)->next;
    return p;
}

/* The size of log buffer option k (and its buffer), as it travels. */
static unsigned log_cap(unsigned k, const CUjit_option *o, void *const *v, unsigned n, char **buf)
{
    uint64_t size = 0;
    *buf = NULL;
    for (unsigned i = 0; i < n; i++)
        if ((unsigned)o[i] == k)
            *buf = v[i];
        else if ((unsigned)o[i] == k + 1)
            size = (uintptr_t)v[i];
    return *buf && size ? (unsigned)(size < FGR_LOG_MAX ? size : FGR_LOG_MAX) : 0;
}

FGR_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
                                    CUlinkState *stateOut)
{
    struct logs l = {0};
    if (options && optionValues && numOptions <= FGR_MAX_OPTS) {
        l.ninfo = log_cap(FGR_JIT_INFO_LOG_BUFFER, options, optionValues, numOptions, &l.info);
        l.nerror = log_cap(FGR_JIT_ERROR_LOG_BUFFER, options, optionValues, numOptions, &l.error);
    }
    CUresult r = fgr_fwd_cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
    if (r != CUDA_SUCCESS || (!l.ninfo && !l.nerror))
        return r;
    struct logs *k = malloc(sizeof *k);
    if (!k)
        return r; /* the logs stay empty */
    *k = l;
    k->state = *stateOut;
    pthread_mutex_lock(&lock);
    k->next = logs;
    logs = k;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The state's logs, as the driver wrote them so far, into the program's
 * buffers. */
static void read_logs(CUlinkState state)
{
    pthread_mutex_lock(&lock);
    struct logs *k = *logs_of(state), l = k ? *k : (struct logs){0};
    pthread_mutex_unlock(&lock);
    if (!k)
        return;
    char *info = l.ninfo ? malloc(l.ninfo) : NULL, *error = l.nerror ? malloc(l.nerror) : NULL;
    if ((l.ninfo && !info) || (l.nerror && !error) ||
        fgrLinkLogs(state, info ? l.ninfo : 0, info, error ? l.nerror : 0, error) != CUDA_SUCCESS) {
        free(info);
        free(error);
        return;
    }
    if (info) {
        memcpy(l.info, info, l.ninfo);
        l.info[l.ninfo - 1] = 0;
    }
    if (error) {
        memcpy(l.error, error, l.nerror);
        l.error[l.nerror - 1] = 0;
    }
    free(info);
    free(error);
}

FGR_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                     const char *name, unsigned int numOptions, CUjit_option *options,
                                     void **optionValues)
{
    CUresult r = fgr_fwd_cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
    if (r != CUDA_SUCCESS)
        read_logs(state);
    return r;
}

/* The image kept for state, taken off the list (NULL: none). */
static struct image *take(CUlinkState state)
{
    for (struct image **p = &images; *p; p = &(*p)->next)
        if ((*p)->state == state) {
            struct image *i = *p;
            *p = i->next;
            return i;
        }
    return NULL;
}

FGR_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
                                     unsigned int numOptions, CUjit_option *options, void **optionValues)
{
    if (!path)
        return CUDA_ERROR_INVALID_VALUE;
    char *buf;
    size_t n;
    CUresult r = fgr_read_image(path, &buf, &n);
    if (r != CUDA_SUCCESS)
        return r;
    /* PTX is text, which the driver reads to its NUL */
    r = cuLinkAddData_v2(state, type, buf, type == CU_JIT_INPUT_PTX ? n + 1 : n, path, numOptions, options,
                         optionValues);
    free(buf);
    return r;
}

FGR_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    size_t n = 0;
    if (!cubinOut || !sizeOut)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = fgrLinkComplete(state, &n);
    read_logs(state);
    if (r != CUDA_SUCCESS)
        return r;
    struct image *i = calloc(1, sizeof *i);
    if (!i || !(i->bytes = malloc(n ? n : 1))) {
        free(i);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t off = 0; off < n && r == CUDA_SUCCESS; off += FGR_MIRROR_BATCH)
        r = fgrLinkRead(state, off, (char *)i->bytes + off, n - off < FGR_MIRROR_BATCH ? n - off : FGR_MIRROR_BATCH);
    if (r != CUDA_SUCCESS) {
        free(i->bytes);
        free(i);
        return r;
    }
    i->state = state;
    pthread_mutex_lock(&lock);
    struct image *old = take(state); /* completed again: the driver's image is the new one */
    i->next = images;
    images = i;
    pthread_mutex_unlock(&lock);
    if (old)
        free(old->bytes);
    free(old);
    *cubinOut = i->bytes;
    *sizeOut = n;
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
    CUresult r = fgr_fwd_cuLinkDestroy(state);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    struct image *i = take(state);
    struct logs **p = logs_of(state), *k = *p;
    if (k)
        *p = k->next;
    pthread_mutex_unlock(&lock);
    if (i)
        free(i->bytes);
    free(i);
    free(k);
    return CUDA_SUCCESS;
}
