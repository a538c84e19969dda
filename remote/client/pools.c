/* Pools of host memory (CUDA 12.2's): the server's driver places their
 * allocations in the server's host memory, which this process cannot
 * reach, so a program that used one would fault on its first access. The
 * pools the program made or looked up at a host location are known here,
 * and an allocation from one is refused, said once; the pools themselves
 * (attributes, making one current) are the server's as any other. */
#include "client.h"

#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CUmemoryPool *host_pools;
static size_t nhost, caphost;

static int at_host(const CUmemLocation *l)
{
    return l && (l->type == CU_MEM_LOCATION_TYPE_HOST || l->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                 l->type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
}

static void remember(CUmemoryPool p)
{
    pthread_mutex_lock(&mu);
    int known = 0;
    for (size_t i = 0; i < nhost && !known; i++)
        known = host_pools[i] == p;
    if (!known && nhost == caphost) {
        size_t n = caphost ? 2 * caphost : 8;
        CUmemoryPool *more = realloc(host_pools, n * sizeof *more);
        if (more)
            host_pools = more, caphost = n;
    }
    if (!known && nhost < caphost)
        host_pools[nhost++] = p;
    pthread_mutex_unlock(&mu);
}

static int of_host(CUmemoryPool p)
{
    pthread_mutex_lock(&mu);
    int known = 0;
    for (size_t i = 0; i < nhost && !known; i++)
        known = host_pools[i] == p;
    pthread_mutex_unlock(&mu);
    return known;
}

FGR_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult r = fgr_fwd_cuMemPoolCreate(pool, poolProps);
    if (r == CUDA_SUCCESS && at_host(&poolProps->location))
        remember(*pool);
    return r;
}

FGR_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
    CUresult r = fgr_fwd_cuMemGetDefaultMemPool(pool_out, location, type);
    if (r == CUDA_SUCCESS && at_host(location))
        remember(*pool_out);
    return r;
}

FGR_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
    CUresult r = fgr_fwd_cuMemGetMemPool(pool, location, type);
    if (r == CUDA_SUCCESS && at_host(location))
        remember(*pool);
    return r;
}

FGR_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult r = fgr_fwd_cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&mu);
        for (size_t i = 0; i < nhost; i++)
            if (host_pools[i] == pool)
                host_pools[i] = host_pools[--nhost];
        pthread_mutex_unlock(&mu);
    }
    return r;
}

#define FROM_HOST "a pool of host memory: the server's, which this process cannot reach"

FGR_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (of_host(pool))
        return fgr_unsupported(-1, "cuMemAllocFromPoolAsync", FROM_HOST);
    return fgr_fwd_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
}

FGR_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream)
{
    if (of_host(pool))
        return fgr_unsupported(-1, "cuMemAllocFromPoolAsync", FROM_HOST);
    return fgr_fwd_cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
}

void fgr_pools_forked(void)
{
    pthread_mutex_init(&mu, NULL);
    free(host_pools);
    host_pools = NULL;
    nhost = caphost = 0;
}
