/* cuGetProcAddress from a table of exported variants, for the libcuda.so.1
 * implementations of this project (the simulated GPU, the remoting client),
 * whose tables the generator writes. */
#ifndef FLEXGV_PROC_TABLE_H
#define FLEXGV_PROC_TABLE_H

#include <string.h>

#include "cuda_types.h"

/* One exported variant of an entry point. */
struct fg_proc {
    const char *base; /* the name programs ask for */
    const char *name; /* the exported symbol */
    int version;      /* cudaVersion at which it became current */
    int per_thread;   /* a per-thread-default-stream variant */
    void *fn;
};

/* Among the variants of symbol in the tables, the newest whose version is
 * at most cudaVersion; per-thread-default-stream variants when asked for. */
static inline CUresult fg_proc_resolve(const struct fg_proc *const *tables, const int *sizes, int ntables,
                                       const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, known = 0;
    const struct fg_proc *best = NULL, *best_pt = NULL;
    for (int t = 0; t < ntables; t++)
        for (int i = 0; i < sizes[t]; i++) {
            const struct fg_proc *p = &tables[t][i];
            if (strcmp(p->base, symbol) != 0)
                continue;
            known = 1;
            if (p->version > cudaVersion)
                continue;
            const struct fg_proc **slot = p->per_thread ? &best_pt : &best;
            if (!*slot || p->version > (*slot)->version)
                *slot = p;
        }
    if (want_pt && best_pt)
        best = best_pt;
    if (!best) {
        if (status)
            *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

#endif
