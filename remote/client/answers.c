/* Answers the client keeps, so that what libraries ask before every launch
 * needs no round trip (PyTorch's step asked the server several hundred
 * times for these, and for nothing else):
 *   a context's device              (cuCtxGetDevice, cuCtxGetDevice_v2)
 *   a primary context's state       (cuDevicePrimaryCtxGetState)
 *   a library kernel's attributes   (cuKernelGetAttribute)
 *   a kernel's function in a context (cuKernelGetFunction)
 *   the value last set of a kernel's attribute (cuKernelSetAttribute again
 *   with it is a success without a round trip, as libraries set it before
 *   each launch)
 *   a function's occupancy    (cuOccupancyMaxActiveBlocksPerMultiprocessor)
 * Each is learnt from the server's first answer, or from the call that made
 * the context, and forgotten by the calls that change it: the primary
 * context's retain, release, reset and flags; setting a kernel's attribute
 * (that kernel's) or a function's (every kernel's, as a function may be a
 * kernel's), and for occupancy any attribute or cache preference; unloading
 * a module or library, destroying a context (everything that names them, as
 * their handles may come back). Only this process changes
 * these: its executor serves no one else. */
#include "client.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

enum kind { FREE, GONE, CTX_DEVICE, KERNEL_ATTR, KERNEL_SET, KERNEL_FUNC, OCCUPANCY };

struct answer {
    uint8_t kind;
    uint64_t a, b, c, v;
};

#define CAP 4096 /* cleared whole when three quarters are taken */
static struct answer tab[CAP];
static unsigned taken;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define PRIMARY_MAX 64
static struct {
    int known, active;
    unsigned flags;
} primary[PRIMARY_MAX];

static unsigned slot(enum kind k, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t h = ((a * 0x9e3779b97f4a7c15ULL ^ b) * 0xff51afd7ed558ccdULL ^ c) * 0xc4ceb9fe1a85ec53ULL ^ k;
    return (unsigned)(h >> 40) & (CAP - 1);
}

static int recall(enum kind k, uint64_t a, uint64_t b, uint64_t c, uint64_t *v)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = slot(k, a, b, c);; i = (i + 1) & (CAP - 1)) {
        struct answer *e = &tab[i];
        if (e->kind == FREE)
            break;
        if (e->kind == k && e->a == a && e->b == b && e->c == c) {
            *v = e->v;
            pthread_mutex_unlock(&lock);
            return 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

static void keep(enum kind k, uint64_t a, uint64_t b, uint64_t c, uint64_t v)
{
    pthread_mutex_lock(&lock);
    if (taken >= CAP / 4 * 3) {
        memset(tab, 0, sizeof tab);
        taken = 0;
    }
    unsigned i = slot(k, a, b, c);
    for (; tab[i].kind != FREE; i = (i + 1) & (CAP - 1))
        if (tab[i].kind == k && tab[i].a == a && tab[i].b == b && tab[i].c == c)
            break;
    taken += tab[i].kind == FREE;
    tab[i] = (struct answer){k, a, b, c, v};
    pthread_mutex_unlock(&lock);
}

/* Forgets answers of kind k (or of every kind) whose first key is a (or any). */
static void forget(int k, int any_a, uint64_t a)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < CAP; i++)
        if (tab[i].kind > GONE && (!k || tab[i].kind == k) && (any_a || tab[i].a == a))
            tab[i].kind = GONE; /* still taken: lookups probe past it */
    pthread_mutex_unlock(&lock);
}

void fgr_answers_forget_all(void) { forget(0, 1, 0); }

/* A forked child has an executor of its own, which knows none of this; a
 * thread of the parent may have held the lock. */
void fgr_answers_forked(void)
{
    pthread_mutex_init(&lock, NULL);
    memset(tab, 0, sizeof tab);
    taken = 0;
    memset(primary, 0, sizeof primary);
}

/* ---- a context's device ---- */

void fgr_answers_ctx_device(CUcontext ctx, CUdevice dev)
{
    if (ctx)
        keep(CTX_DEVICE, (uint64_t)(uintptr_t)ctx, 0, 0, (uint64_t)dev);
}

static CUresult ctx_device(CUdevice *device, CUcontext ctx, int v2)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext c = ctx ? ctx : fgr_current();
    uint64_t v;
    if (fgr_initialized && c && recall(CTX_DEVICE, (uint64_t)(uintptr_t)c, 0, 0, &v)) {
        *device = (CUdevice)v;
        return CUDA_SUCCESS;
    }
    CUresult r = v2 ? fgr_fwd_cuCtxGetDevice_v2(device, ctx) : fgr_fwd_cuCtxGetDevice(device);
    if (r == CUDA_SUCCESS)
        fgr_answers_ctx_device(c, *device);
    return r;
}

FGR_EXPORT CUresult cuCtxGetDevice(CUdevice *device) { return ctx_device(device, NULL, 0); }
FGR_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) { return ctx_device(device, ctx, 1); }

/* ---- the primary context's state ---- */

void fgr_answers_primary_changed(CUdevice dev)
{
    if (dev >= 0 && dev < PRIMARY_MAX)
        __atomic_store_n(&primary[dev].known, 0, __ATOMIC_RELEASE);
}

FGR_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (dev >= 0 && dev < PRIMARY_MAX && flags && active) {
        pthread_mutex_lock(&lock);
        int known = primary[dev].known;
        if (known) {
            *flags = primary[dev].flags;
            *active = primary[dev].active;
        }
        pthread_mutex_unlock(&lock);
        if (known)
            return CUDA_SUCCESS;
    }
    CUresult r = fgr_fwd_cuDevicePrimaryCtxGetState(dev, flags, active);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < PRIMARY_MAX && flags && active) {
        pthread_mutex_lock(&lock);
        primary[dev].flags = *flags;
        primary[dev].active = *active;
        primary[dev].known = 1;
        pthread_mutex_unlock(&lock);
    }
    return r;
}

FGR_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    fgr_answers_primary_changed(dev);
    return fgr_fwd_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ---- kernels ---- */

FGR_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    uint64_t v;
    if (pi && recall(KERNEL_ATTR, (uint64_t)(uintptr_t)kernel, (uint64_t)attrib, (uint64_t)dev, &v)) {
        *pi = (int)v;
        return CUDA_SUCCESS;
    }
    CUresult r = fgr_fwd_cuKernelGetAttribute(pi, attrib, kernel, dev);
    if (r == CUDA_SUCCESS)
        keep(KERNEL_ATTR, (uint64_t)(uintptr_t)kernel, (uint64_t)attrib, (uint64_t)dev, (uint64_t)(int64_t)*pi);
    return r;
}

FGR_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    uint64_t k = (uint64_t)(uintptr_t)kernel, v;
    if (recall(KERNEL_SET, k, (uint64_t)attrib, (uint64_t)dev, &v) && (int)v == val)
        return CUDA_SUCCESS;
    forget(KERNEL_ATTR, 0, k);
    forget(KERNEL_SET, 0, k);
    forget(OCCUPANCY, 1, 0);
    CUresult r = fgr_fwd_cuKernelSetAttribute(attrib, val, kernel, dev);
    if (r == CUDA_SUCCESS)
        keep(KERNEL_SET, k, (uint64_t)attrib, (uint64_t)dev, (uint64_t)(int64_t)val);
    return r;
}

FGR_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    forget(KERNEL_ATTR, 1, 0);
    forget(KERNEL_SET, 1, 0);
    forget(OCCUPANCY, 1, 0);
    return fgr_fwd_cuFuncSetAttribute(hfunc, attrib, value);
}

/* ---- occupancy, forgotten with every preference that may change it ---- */

static CUresult occupancy(int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned flags,
                          int with_flags)
{
    /* by function, context (a kernel's function differs by device) and
     * shape; shapes that do not fit the key are always asked */
    uint64_t f = (uint64_t)(uintptr_t)func, ctx = (uint64_t)(uintptr_t)fgr_current(), v;
    int keyed = blockSize >= 0 && blockSize < (1 << 20) && flags < 16 && (uint64_t)dynamicSMemSize < (1ull << 40);
    uint64_t shape = (uint64_t)dynamicSMemSize | (uint64_t)blockSize << 40 | (uint64_t)flags << 60;
    if (numBlocks && keyed && recall(OCCUPANCY, f, ctx, shape, &v)) {
        *numBlocks = (int)v;
        return CUDA_SUCCESS;
    }
    CUresult r = with_flags ? fgr_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                                       dynamicSMemSize, flags)
                            : fgr_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize,
                                                                                dynamicSMemSize);
    if (r == CUDA_SUCCESS && keyed)
        keep(OCCUPANCY, f, ctx, shape, (uint64_t)(int64_t)*numBlocks);
    return r;
}

FGR_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                                size_t dynamicSMemSize)
{
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize, 0, 0);
}

FGR_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                         int blockSize, size_t dynamicSMemSize,
                                                                         unsigned int flags)
{
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize, flags, 1);
}

FGR_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    forget(OCCUPANCY, 1, 0);
    return fgr_fwd_cuFuncSetCacheConfig(hfunc, config);
}

FGR_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    forget(OCCUPANCY, 1, 0);
    return fgr_fwd_cuKernelSetCacheConfig(kernel, config, dev);
}

FGR_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    forget(OCCUPANCY, 1, 0);
    return fgr_fwd_cuCtxSetCacheConfig(config);
}

FGR_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    forget(OCCUPANCY, 1, 0);
    return fgr_fwd_cuFuncSetSharedMemConfig(hfunc, config);
}

FGR_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    forget(OCCUPANCY, 1, 0);
    return fgr_fwd_cuCtxSetSharedMemConfig(config);
}

FGR_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    uint64_t ctx = (uint64_t)(uintptr_t)fgr_current(), v;
    if (pFunc && ctx && recall(KERNEL_FUNC, (uint64_t)(uintptr_t)kernel, ctx, 0, &v)) {
        *pFunc = (CUfunction)(uintptr_t)v;
        return CUDA_SUCCESS;
    }
    CUresult r = fgr_fwd_cuKernelGetFunction(pFunc, kernel);
    if (r == CUDA_SUCCESS && ctx)
        keep(KERNEL_FUNC, (uint64_t)(uintptr_t)kernel, ctx, 0, (uint64_t)(uintptr_t)*pFunc);
    return r;
}
