/* A function's parameter sizes in one answer: the client would otherwise
 * ask for each parameter in turn, a round trip each, at the first launch of
 * every function. */
#include "executor.h"

#include <dlfcn.h>

typedef CUresult (*param_info)(void *, size_t, size_t *, size_t *);
static param_info func_info, kernel_info;

static CUresult sizes_of(param_info info, void *f, unsigned int max, unsigned int *count, unsigned int *sizes)
{
    if (!info)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!count || (max && !sizes))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned n = 0;
    for (;; n++) {
        size_t off, sz;
        CUresult r = info(f, n, &off, &sz);
        if (r == CUDA_ERROR_INVALID_VALUE)
            break; /* past the last parameter (the handle was checked) */
        if (r != CUDA_SUCCESS)
            return r;
        if (n >= FGR_MAX_KPARAMS || sz > FGR_MAX_KPARAM_BYTES)
            return CUDA_ERROR_INVALID_VALUE;
        if (n < max)
            sizes[n] = (unsigned)sz;
    }
    *count = n;
    return CUDA_SUCCESS;
}

/* A library's kernel given for a function (the executor's handle check
 * lets it be one) is asked about as a kernel. */
static CUresult func_sizes(CUfunction f, unsigned int max, unsigned int *count, unsigned int *sizes)
{
    int kernel = f && fgr_has(FGR_H_CUkernel, (uint64_t)(uintptr_t)f);
    return sizes_of(kernel ? kernel_info : func_info, f, max, count, sizes);
}

void fgr_layout_init(void *driver)
{
    *(void **)&func_info = dlsym(driver, "cuFuncGetParamInfo");
    *(void **)&kernel_info = dlsym(driver, "cuKernelGetParamInfo");
    fgr_real[FGR_OP_fgrParamSizes] = (void *)func_sizes;
}
