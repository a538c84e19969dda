/* JIT linking (api/remote.api): the link state is the server's. A file is
 * read here and added as data; the linked image is read back here, and is
 * the program's to load until it destroys the state, as the driver's. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define LINK_FILE_MAX (1ull << 30)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct image {
    CUlinkState state;
    void *bytes;
    struct image *next;
} *images;

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
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size >= LINK_FILE_MAX) {
        fclose(f);
        return fgr_unsupported(-1, "cuLinkAddFile_v2", "a file that is not a regular one under 1 GiB");
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fclose(f);
        free(buf);
        return buf ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_OUT_OF_MEMORY;
    }
    fclose(f);
    buf[n] = 0; /* PTX is text, which the driver reads to its end */
    CUresult r = cuLinkAddData_v2(state, type, buf, type == CU_JIT_INPUT_PTX ? n + 1 : n, path, numOptions, options,
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
    pthread_mutex_unlock(&lock);
    if (i)
        free(i->bytes);
    free(i);
    return CUDA_SUCCESS;
}
