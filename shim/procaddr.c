/* cuGetProcAddress: CUDA 12/13 runtimes resolve nearly every driver entry
 * point here. The driver answers with the address of one exported variant;
 * mapping that address back (not the requested name) gives the caller the
 * wrapper of exactly the ABI it will call. Asked for "cuGetProcAddress", the
 * driver returns its resolver, which maps to ours, so later lookups stay
 * inside the shim. */
#include "shim.h"

static void swap_in_wrapper(const char *symbol, void **pfn)
{
    if (!pfn || !*pfn || !fg_is_driver_object(*pfn, FG_API_cuInit))
        return;
    int id = fg_lookup_addr(*pfn, symbol);
    if (id < 0)
        return;
    fg_adopt_real(id, *pfn);
    *pfn = fg_wrappers[id];
}

CUresult fg_procaddr_cuGetProcAddress(fg_real_cuGetProcAddress next, const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    CUresult r = next(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS)
        swap_in_wrapper(symbol, pfn);
    return r;
}

CUresult fg_procaddr_cuGetProcAddress_v2(fg_real_cuGetProcAddress_v2 next, const char *symbol, void **pfn,
                                       int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult r = next(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS)
        swap_in_wrapper(symbol, pfn);
    return r;
}
