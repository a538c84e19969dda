/* Memory quotas: what code takes on the device. A module's globals and
 * constant banks are reserved when it loads: charged from the image (the
 * cubin the device will run, flexgv/cubin.h) at the driver's rounding,
 * before the driver is asked. Local memory is reserved for every resident
 * thread at the context's per-thread level, which a launch of a kernel
 * needing more raises: that growth is charged before the launch and the
 * launch refused with CUDA_ERROR_OUT_OF_MEMORY when it does not fit. The
 * level lives in the context's R_STACK record (quota_ctx.c), which the
 * stack limit sets too. Launches stay fast: they pass straight through
 * until the program gets hold of a kernel needing more local memory than a
 * context starts with (its local size is asked where its handle is handed
 * out); from then on a launch looks its kernel's size up in a cache, and
 * only one needing more than the context holds looks further. Where
 * another policy diverts launches, this one is not in their way until then
 * either. Loads and first launches also have the backstop read the
 * driver's count at the next charge: the driver may take more then than
 * any rule here knows (device printf and malloc, flexgv/drvmem.h). */
#include "memquota.h"
#include "flexgv/cubin.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- modules ---- */

static uint64_t module_bytes(const void *image, int dev)
{
    if (!image || !fg_cubin_size(image))
        return 0; /* PTX or unknown: the backstop sees what it takes */
    int major = 0, minor = 0;
    fg_real_cuDeviceGetAttribute attr = REAL(cuDeviceGetAttribute);
    if (attr) {
        attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
        attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    }
    const struct fg_cubin_opts o = {fg_cubin_zstd, NULL, (unsigned)(major * 10 + minor)};
    uint64_t data = fg_cubin_data(image, fg_cubin_size(image), &o);
    return data ? fg_drv_module(fg_drv(), data) : 0;
}

/* The same of a module file, mapped to read it. */
static uint64_t file_module_bytes(const char *fname, int dev)
{
    int fd = fname ? open(fname, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return 0;
    off_t size = lseek(fd, 0, SEEK_END);
    void *m = size >= 64 ? mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    uint64_t bytes = fg_cubin_size(m) <= (uint64_t)size ? module_bytes(m, dev) : 0;
    munmap(m, (size_t)size);
    return bytes;
}

#define LOAD(bytes_of_dev, call, handle, owner)                            \
    int dev = fg_current_device();                                        \
    uint64_t bytes = bytes_of_dev;                                        \
    if (!bytes) {                                                         \
        CUresult r0 = call;                                               \
        fg_backstop_soon();                                               \
        return r0;                                                        \
    }                                                                     \
    if (!fg_rec_reserve())                                                \
        return CUDA_ERROR_OUT_OF_MEMORY;                                  \
    if (!fg_charge(dev, bytes, "a module's globals")) {                   \
        fg_rec_unreserve();                                               \
        return CUDA_ERROR_OUT_OF_MEMORY;                                  \
    }                                                                     \
    CUresult r = call;                                                    \
    if (r != CUDA_SUCCESS) {                                              \
        fg_uncharge(dev, bytes);                                          \
        fg_rec_unreserve();                                               \
        return r;                                                         \
    }                                                                     \
    fg_rec_lock();                                                        \
    fg_rec_put((uintptr_t)(handle), R_MODULE, dev, bytes, (owner));       \
    fg_rec_unlock();                                                      \
    fg_backstop_soon();                                                   \
    return r

CUresult fg_mem_cuModuleLoadData(fg_real_cuModuleLoadData next, CUmodule *module, const void *image)
{
    LOAD(module_bytes(image, dev), next(module, image), *module, fg_current_ctx());
}

CUresult fg_mem_cuModuleLoadDataEx(fg_real_cuModuleLoadDataEx next, CUmodule *module, const void *image,
                                   unsigned int n, CUjit_option *options, void **values)
{
    LOAD(module_bytes(image, dev), next(module, image, n, options, values), *module, fg_current_ctx());
}

CUresult fg_mem_cuModuleLoadFatBinary(fg_real_cuModuleLoadFatBinary next, CUmodule *module, const void *fatCubin)
{
    LOAD(module_bytes(fatCubin, dev), next(module, fatCubin), *module, fg_current_ctx());
}

CUresult fg_mem_cuModuleLoad(fg_real_cuModuleLoad next, CUmodule *module, const char *fname)
{
    LOAD(file_module_bytes(fname, dev), next(module, fname), *module, fg_current_ctx());
}

/* A library belongs to no context: charged to the device current at load. */
CUresult fg_mem_cuLibraryLoadData(fg_real_cuLibraryLoadData next, CUlibrary *library, const void *code,
                                  CUjit_option *jo, void **jv, unsigned int njit, CUlibraryOption *lo, void **lv,
                                  unsigned int nlib)
{
    LOAD(module_bytes(code, dev), next(library, code, jo, jv, njit, lo, lv, nlib), *library, 0);
}

static void unloaded(uintptr_t handle)
{
    fg_rec_lock();
    struct rec *r = fg_rec_find(handle, R_MODULE);
    if (r)
        fg_rec_drop(r);
    fg_rec_unlock();
}

CUresult fg_mem_cuModuleUnload(fg_real_cuModuleUnload next, CUmodule hmod)
{
    CUresult r = next(hmod);
    if (r == CUDA_SUCCESS)
        unloaded((uintptr_t)hmod);
    return r;
}

CUresult fg_mem_cuLibraryUnload(fg_real_cuLibraryUnload next, CUlibrary library)
{
    CUresult r = next(library);
    if (r == CUDA_SUCCESS)
        unloaded((uintptr_t)library);
    return r;
}

/* ---- local memory at launch ---- */

/* Kernels' local sizes: a direct-mapped cache of the handle and its size
 * packed with a check of the handle, so that a racing writer can never
 * make one kernel read another's size (a torn pair fails the check and is
 * looked up again). Cleared when a context goes (a handle may come back). */
#define KCACHE 4096
static struct {
    uintptr_t f;
    uint64_t v; /* check << 32 | local size + 1 */
} kcache[KCACHE];

static inline uint32_t kslot(uintptr_t f) { return (uint32_t)((f >> 4) * 0x9e3779b1u) & (KCACHE - 1); }
static inline uint64_t kcheck(uintptr_t f) { return (uint64_t)(uint32_t)((f >> 4) ^ (f >> 36)) << 32; }

static uint64_t local_size(CUfunction f)
{
    uintptr_t k = (uintptr_t)f;
    uint32_t i = kslot(k);
    uint64_t v = __atomic_load_n(&kcache[i].v, __ATOMIC_ACQUIRE);
    if (FG_LIKELY(__atomic_load_n(&kcache[i].f, __ATOMIC_ACQUIRE) == k && (v & ~0xffffffffull) == kcheck(k) &&
                  (v & 0xffffffffu)))
        return (v & 0xffffffffu) - 1;
    fg_backstop_soon(); /* a first launch may reserve what no charge knows of */
    int size = 0;
    fg_real_cuFuncGetAttribute attr = REAL(cuFuncGetAttribute);
    if (!attr || attr(&size, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) != CUDA_SUCCESS || size < 0)
        size = 0; /* a handle the driver will refuse, or cannot say: the backstop sees it */
    __atomic_store_n(&kcache[i].v, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&kcache[i].f, k, __ATOMIC_RELEASE);
    __atomic_store_n(&kcache[i].v, kcheck(k) | ((uint64_t)size + 1), __ATOMIC_RELEASE);
    return (uint64_t)size;
}

void fg_code_ctx_gone(void)
{
    for (int i = 0; i < KCACHE; i++)
        __atomic_store_n(&kcache[i].v, 0, __ATOMIC_RELEASE);
}

struct grow {
    uintptr_t ctx;
    int dev;
    uint64_t level, charged; /* the level wanted, and the growth charged for it */
    int fresh;              /* a record reservation was taken */
};

/* Charges raising the current context's level to need; 0 when the quota
 * has no room (g->charged 0: nothing to raise). */
static int grow_charge(struct grow *g, uint64_t need)
{
    const struct fg_drvmem *t = fg_drv();
    *g = (struct grow){fg_current_ctx(), fg_current_device(), fg_drv_up(need, t->local_align), 0, 0};
    if (!g->ctx)
        return 1;
    fg_rec_lock();
    struct rec *r = fg_rec_find(g->ctx, R_STACK);
    uint64_t level = r ? r->span : t->local_base, had = r ? r->bytes : 0;
    fg_rec_unlock();
    if (g->level <= level)
        return 1;
    uint64_t want = fg_drv_local_extra(t, g->level, fg_resident_threads(g->dev));
    if (want <= had)
        return 1;
    g->fresh = !r;
    if (g->fresh && !fg_rec_reserve())
        return 0;
    if (!fg_charge(g->dev, want - had, "local memory for a kernel launch")) {
        if (g->fresh)
            fg_rec_unreserve();
        return 0;
    }
    g->charged = want - had;
    return 1;
}

/* After the launch: records the level, or gives the growth back. */
static void grow_settle(struct grow *g, CUresult r)
{
    if (!g->charged)
        return;
    if (r != CUDA_SUCCESS) {
        fg_uncharge(g->dev, g->charged);
        if (g->fresh)
            fg_rec_unreserve();
        return;
    }
    const struct fg_drvmem *t = fg_drv();
    uint64_t want = fg_drv_local_extra(t, g->level, fg_resident_threads(g->dev));
    fg_rec_lock();
    struct rec *rec = fg_rec_find(g->ctx, R_STACK);
    if (rec && rec->span >= g->level) {
        /* Another launch raised it meanwhile. */
        fg_uncharge(g->dev, g->charged);
        if (g->fresh)
            fg_rec_unreserve();
    } else {
        uint64_t had = rec ? rec->bytes : 0, owed = want - had;
        if (g->charged > owed)
            fg_uncharge(g->dev, g->charged - owed);
        else
            fg_force_charge(g->dev, owed - g->charged); /* already held: account */
        if (rec) {
            rec->bytes = want;
            rec->span = g->level;
            if (g->fresh)
                fg_rec_unreserve();
        } else {
            fg_rec_put(g->ctx, R_STACK, g->dev, want, 0)->span = g->level;
        }
    }
    fg_rec_unlock();
}

/* The launch hooks this policy acts on once a kernel may grow local
 * memory (they are "mem:ondemand" in api/cuda.api): asked for, and
 * diverted from the pass-through path. */
static void watch_launches(void)
{
    static const int launches[] = {FG_API_cuLaunchKernel, FG_API_cuLaunchKernel_ptsz,
                                   FG_API_cuLaunchKernelEx, FG_API_cuLaunchKernelEx_ptsz,
                                   FG_API_cuLaunchCooperativeKernel, FG_API_cuLaunchCooperativeKernel_ptsz};
    for (unsigned i = 0; i < sizeof launches / sizeof *launches; i++) {
        __atomic_store_n(&fg_ondemand[launches[i]], 1, __ATOMIC_RELEASE);
        __atomic_store_n(&fg_divert[launches[i]], 1, __ATOMIC_RELEASE);
    }
}

/* A kernel handed out: if its local size is beyond what a context starts
 * with, or cannot be told, launches are watched from now on. */
static void handed_out(CUfunction f, CUkernel k)
{
    int size = -1;
    if (f) {
        fg_real_cuFuncGetAttribute attr = REAL(cuFuncGetAttribute);
        if (!attr || attr(&size, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) != CUDA_SUCCESS)
            size = -1;
    } else {
        CUresult (*attr)(int *, CUfunction_attribute, CUkernel, CUdevice) =
            (CUresult(*)(int *, CUfunction_attribute, CUkernel, CUdevice))fg_cuda_sym("cuKernelGetAttribute");
        int dev = fg_current_device();
        if (!attr || dev < 0 || attr(&size, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k, dev) != CUDA_SUCCESS)
            size = -1;
    }
    if (size < 0 || (uint64_t)size > fg_drv()->local_base)
        watch_launches();
}

CUresult fg_mem_cuModuleGetFunction(fg_real_cuModuleGetFunction next, CUfunction *hfunc, CUmodule hmod,
                                    const char *name)
{
    CUresult r = next(hfunc, hmod, name);
    if (r == CUDA_SUCCESS)
        handed_out(*hfunc, NULL);
    return r;
}

CUresult fg_mem_cuKernelGetFunction(fg_real_cuKernelGetFunction next, CUfunction *pFunc, CUkernel kernel)
{
    CUresult r = next(pFunc, kernel);
    if (r == CUDA_SUCCESS)
        handed_out(*pFunc, NULL);
    return r;
}

CUresult fg_mem_cuLibraryGetKernel(fg_real_cuLibraryGetKernel next, CUkernel *pKernel, CUlibrary library,
                                   const char *name)
{
    CUresult r = next(pKernel, library, name);
    if (r == CUDA_SUCCESS)
        handed_out(NULL, *pKernel);
    return r;
}

#define LAUNCH(f, call)                                                   \
    uint64_t need = local_size(f);                                        \
    if (FG_LIKELY(need <= fg_drv()->local_base))                          \
        return call;                                                      \
    struct grow g;                                                        \
    if (!grow_charge(&g, need))                                           \
        return CUDA_ERROR_OUT_OF_MEMORY;                                  \
    CUresult r = call;                                                    \
    grow_settle(&g, r);                                                   \
    return r

CUresult fg_mem_cuLaunchKernel(fg_real_cuLaunchKernel next, CUfunction f, unsigned int gx, unsigned int gy,
                               unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                               CUstream s, void **params, void **extra)
{
    LAUNCH(f, next(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

CUresult fg_mem_cuLaunchKernel_ptsz(fg_real_cuLaunchKernel_ptsz next, CUfunction f, unsigned int gx, unsigned int gy,
                                    unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                                    unsigned int shm, CUstream s, void **params, void **extra)
{
    LAUNCH(f, next(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

CUresult fg_mem_cuLaunchKernelEx(fg_real_cuLaunchKernelEx next, const CUlaunchConfig *config, CUfunction f,
                                 void **params, void **extra)
{
    LAUNCH(f, next(config, f, params, extra));
}

CUresult fg_mem_cuLaunchKernelEx_ptsz(fg_real_cuLaunchKernelEx_ptsz next, const CUlaunchConfig *config, CUfunction f,
                                      void **params, void **extra)
{
    LAUNCH(f, next(config, f, params, extra));
}

CUresult fg_mem_cuLaunchCooperativeKernel(fg_real_cuLaunchCooperativeKernel next, CUfunction f, unsigned int gx,
                                          unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                                          unsigned int bz, unsigned int shm, CUstream s, void **params)
{
    LAUNCH(f, next(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

CUresult fg_mem_cuLaunchCooperativeKernel_ptsz(fg_real_cuLaunchCooperativeKernel_ptsz next, CUfunction f,
                                               unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                               unsigned int by, unsigned int bz, unsigned int shm, CUstream s,
                                               void **params)
{
    LAUNCH(f, next(f, gx, gy, gz, bx, by, bz, shm, s, params));
}
