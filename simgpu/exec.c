/* Simulated execution: modules and kernels, streams, events, launches.
 *
 * A simulated module image is text:
 *     FLEXGV-SIM-MODULE
 *     kernel NAME [DURATION_US] [builtin=vecadd|fill|add|setcond|printf|params=N|collective]
 *     managed NAME BYTES VALUE
 *     global NAME BYTES VALUE
 * A kernel occupies the device for its duration (default: the configured
 * kernel_us). A collective one (as NCCL's all-reduce) occupies it from
 * its start but runs its duration only while the same collective of every
 * process of its group (FLEXGV_SIM_COLLECTIVE=NAME:RANKS) runs too: a rank
 * whose peers are not on their devices holds its own, spinning. Builtin
 * kernels also compute on the host-backed memory:
 *     vecadd(float *a, float *b, float *c, int n): c = a + b
 *     fill(unsigned *p, unsigned v, int n)
 *     add(unsigned *p, unsigned v, int n): p[i] += v
 *     setcond(CUgraphConditionalHandle h, unsigned *p, int step): *p +=
 *     step, then h's value is *p (as cudaGraphSetConditional sets it)
 *     printf(unsigned v): "device printf: V" on stdout, printed as a
 *     driver prints device printf: through the process's stdio, at the
 *     next synchronization (context, stream, event), then flushed
 * params=N: a kernel of N 8-byte parameters that it does not read.
 * devruntime: it calls device printf or malloc, which a driver reserves
 * memory for at the module's load (flexgv/drvmem.h).
 * local=BYTES: its local memory per thread (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
 * which its first launch reserves for every resident thread as the driver does.
 * managed: a managed variable (__managed__) of BYTES bytes, each VALUE at
 * first, allocated when first asked for (cuModuleGetGlobal,
 * cuLibraryGetManaged) and freed with its module. global: the same of a
 * __device__ variable, device memory (cuModuleGetGlobal).
 * A real cubin (ELF, or a fatbinary's uncompressed ELF entries) loads too:
 * its kernels take the configured time, with the parameter layouts its
 * compiler wrote, and compute nothing. */
#include "sim.h"
#include "flexgv/cubin.h"
#include "flexgv/drvmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOD_MAGIC 0x4d4f4455u
#define FUNC_MAGIC 0x46554e43u
#define KERNEL_MAGIC 0x4b45524eu
#define STREAM_MAGIC 0x5354524du
#define STREAM_GONE_MAGIC 0x5354524fu
#define EVENT_MAGIC 0x45564e54u
#define DEFAULT_DURATION UINT64_MAX

enum builtin { B_NONE, B_VECADD, B_FILL, B_PRINTF, B_ADD, B_SETCOND };

struct sim_func {
    uint32_t magic;
    char name[256];
    uint64_t duration_ns;
    enum builtin builtin;
    unsigned nparams; /* params=N, or a cubin's */
    const unsigned *layout; /* a cubin's: offset and size of each */
    uint32_t kernel; /* KERNEL_MAGIC: its address is the library kernel's handle */
    void *module;    /* the module or library it belongs to */
    int dyn_smem;    /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, as set */
    unsigned local;  /* local=BYTES */
    int devruntime;
    int collective;
};

struct sim_module {
    uint32_t magic;
    int dev;          /* where its data is reserved */
    uint64_t charged; /* its globals and constant banks, as the driver rounds them */
    int nfuncs;
    unsigned *layouts; /* a cubin's kernels' layouts, all in one */
    struct sim_managed {
        char name[64];
        size_t bytes;
        unsigned char value;
        int device; /* a global: device memory, not managed */
        CUdeviceptr p; /* 0 until asked for */
    } managed[4];
    int nmanaged;
    struct sim_func funcs[];
};

/* ---- modules ---- */

static const char MODULE_HEADER[] = "FLEXGV-SIM-MODULE";

/* A real cubin (or fatbinary) loads as kernels of the configured duration
 * with the parameter layouts its compiler wrote (include/flexgv/cubin.h);
 * nothing in them runs. Counted first, then filled in (a compressed cubin
 * is decompressed twice: modules are loaded seldom). */
struct cubin_load {
    struct sim_module *m; /* NULL: counting */
    int n;
    size_t params;
};

static void cubin_kernel(void *ctx, const char *name, size_t len, unsigned count, const unsigned *offsets,
                         const unsigned *sizes)
{
    struct cubin_load *c = ctx;
    if (len >= sizeof ((struct sim_func *)0)->name)
        return; /* a name it could not be asked for by */
    if (c->m) {
        struct sim_func *f = &c->m->funcs[c->m->nfuncs++];
        unsigned *l = c->m->layouts + 2 * c->params;
        *f = (struct sim_func){.magic = FUNC_MAGIC, .kernel = KERNEL_MAGIC, .module = c->m,
                               .duration_ns = DEFAULT_DURATION, .nparams = count, .layout = l};
        memcpy(f->name, name, len);
        for (unsigned i = 0; i < count; i++)
            l[2 * i] = offsets[i], l[2 * i + 1] = sizes[i];
    }
    c->n++;
    c->params += count;
}

static CUresult parse_cubin(const void *image, struct sim_module **out)
{
    uint64_t n = fg_cubin_size(image);
    struct cubin_load c = {0};
    /* The cubins the simulated device (9.0) runs, compressed ones too. */
    const struct fg_cubin_opts o = {fg_cubin_zstd, NULL, 90};
    fg_cubin_kernels_opt(image, n, cubin_kernel, &c, &o);
    struct sim_module *m = calloc(1, sizeof *m + (size_t)c.n * sizeof(struct sim_func));
    unsigned *l = m ? malloc(2 * c.params * sizeof *l + 1) : NULL;
    if (!l) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = MOD_MAGIC;
    m->layouts = l;
    c = (struct cubin_load){m, 0, 0};
    fg_cubin_kernels_opt(image, n, cubin_kernel, &c, &o);
    *out = m;
    return CUDA_SUCCESS;
}

static CUresult parse_module(const char *image, struct sim_module **out)
{
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    if (fg_cubin_size(image))
        return parse_cubin(image, out);
    if (strncmp(image, MODULE_HEADER, sizeof MODULE_HEADER - 1) != 0)
        return CUDA_ERROR_INVALID_IMAGE; /* PTX is not simulated */
    int n = 0;
    for (const char *p = image; (p = strstr(p, "\nkernel ")); p++)
        n++;
    struct sim_module *m = calloc(1, sizeof *m + (size_t)n * sizeof(struct sim_func));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->magic = MOD_MAGIC;
    for (const char *p = image; (p = strstr(p, "\nkernel ")) && m->nfuncs < n; p++) {
        struct sim_func *f = &m->funcs[m->nfuncs];
        char line[256], name[96] = "", opt1[64] = "", opt2[64] = "";
        snprintf(line, sizeof line, "%.*s", (int)strcspn(p + 8, "\n"), p + 8); /* options end with their line */
        int got = sscanf(line, "%95s %63s %63s", name, opt1, opt2);
        if (got < 1) {
            free(m);
            return CUDA_ERROR_INVALID_IMAGE;
        }
        f->magic = FUNC_MAGIC;
        f->kernel = KERNEL_MAGIC;
        f->module = m;
        snprintf(f->name, sizeof f->name, "%s", name);
        f->duration_ns = DEFAULT_DURATION;
        const char *opts[2] = {opt1, opt2};
        for (int i = 0; i < 2 && i < got - 1; i++) {
            if (!strcmp(opts[i], "builtin=vecadd"))
                f->builtin = B_VECADD;
            else if (!strcmp(opts[i], "builtin=fill"))
                f->builtin = B_FILL;
            else if (!strcmp(opts[i], "builtin=printf"))
                f->builtin = B_PRINTF;
            else if (!strcmp(opts[i], "builtin=add"))
                f->builtin = B_ADD;
            else if (!strcmp(opts[i], "builtin=setcond"))
                f->builtin = B_SETCOND;
            else if (!strcmp(opts[i], "collective"))
                f->collective = 1;
            else if (!strcmp(opts[i], "devruntime"))
                f->devruntime = 1;
            else if (sscanf(opts[i], "params=%u", &f->nparams) == 1 && f->nparams <= 512)
                continue;
            else if (sscanf(opts[i], "local=%u", &f->local) == 1 && f->local <= 512u << 10)
                continue;
            else {
                char *end;
                double us = strtod(opts[i], &end);
                if (*end || us < 0) {
                    free(m);
                    return CUDA_ERROR_INVALID_IMAGE;
                }
                f->duration_ns = (uint64_t)(us * 1000.0);
            }
        }
        m->nfuncs++;
    }
    for (int device = 0; device <= 1; device++) {
        const char *word = device ? "\nglobal " : "\nmanaged ";
        for (const char *p = image; (p = strstr(p, word)); p++) {
            struct sim_managed *v = &m->managed[m->nmanaged];
            unsigned value;
            if (m->nmanaged == 4 || sscanf(p + strlen(word), "%63s %zu %u", v->name, &v->bytes, &value) != 3 ||
                !v->bytes) {
                free(m);
                return CUDA_ERROR_INVALID_IMAGE;
            }
            v->value = (unsigned char)value;
            v->device = device;
            m->nmanaged++;
        }
    }
    *out = m;
    return CUDA_SUCCESS;
}

static void free_module(struct sim_module *m)
{
    for (int i = 0; i < m->nmanaged; i++)
        if (m->managed[i].p)
            cuMemFree_v2(m->managed[i].p);
    if (m->charged)
        sim_mem_release(m->dev, m->charged);
    m->magic = 0;
    free(m->layouts);
    free(m);
}

/* A cubin's module-wide data (globals, constant banks), and what device
 * printf and malloc take, are reserved on dev at load, as the driver does. */
static CUresult parse_and_reserve(const void *image, int dev, struct sim_module **out)
{
    CUresult r = parse_module(image, out);
    if (r != CUDA_SUCCESS)
        return r;
    const struct fg_drvmem *t = sim_drv();
    const struct fg_cubin_opts o = {fg_cubin_zstd, NULL, 90};
    uint64_t data = fg_cubin_size(image) ? fg_cubin_data(image, fg_cubin_size(image), &o) : 0;
    uint64_t bytes = data ? fg_drv_module(t, data) : 0;
    for (int i = 0; i < (*out)->nfuncs; i++)
        if ((*out)->funcs[i].devruntime) {
            bytes += t->devrt_bytes;
            break;
        }
    if (bytes && sim_mem_reserve(dev, bytes) != 0) {
        free_module(*out);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    (*out)->dev = dev;
    (*out)->charged = bytes;
    return CUDA_SUCCESS;
}

static CUresult load(void **out, const void *image)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_module *m;
    r = parse_and_reserve(image, c->dev, &m);
    if (r == CUDA_SUCCESS)
        *out = m;
    return r;
}

SIM_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) { SIM_GATE(); return load((void **)module, image); }

/* JIT options as a driver checks and answers them: an optimization level
 * past 4 is refused; an info log buffer gets a line, its size option the
 * bytes written (with the NUL). */
CUresult sim_jit_options(unsigned n, const CUjit_option *o, void **v)
{
    if (n && (!o || !v))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        if (o[i] == 7 && (uintptr_t)v[i] > 4) /* CU_JIT_OPTIMIZATION_LEVEL */
            return CUDA_ERROR_INVALID_VALUE;
        if (o[i] != 3) /* CU_JIT_INFO_LOG_BUFFER, its size the option after it */
            continue;
        for (unsigned j = 0; j < n; j++)
            if (o[j] == 4 && v[i] && (uintptr_t)v[j] > 0) {
                int k = snprintf(v[i], (uintptr_t)v[j], "simulated GPU: module loaded");
                v[j] = (void *)(uintptr_t)((size_t)k + 1 < (uintptr_t)v[j] ? (size_t)k + 1 : (uintptr_t)v[j]);
            }
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues)
{
    SIM_GATE();
    CUresult r = sim_jit_options(numOptions, options, optionValues);
    return r ? r : load((void **)module, image);
}

SIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { SIM_GATE(); return load((void **)module, fatCubin); }

long sim_read_text(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (long)n;
}

SIM_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    SIM_GATE();
    if (!fname)
        return CUDA_ERROR_INVALID_VALUE;
    char buf[65536];
    if (sim_read_text(fname, buf, sizeof buf) < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return load((void **)module, buf);
}

static struct sim_module *as_module(void *h) { return h && ((struct sim_module *)h)->magic == MOD_MAGIC ? h : NULL; }

static CUresult unload(void *h)
{
    struct sim_module *m = as_module(h);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    free_module(m);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleUnload(CUmodule hmod) { SIM_GATE(); return unload(hmod); }

static CUresult get_func(void **out, void *h, const char *name)
{
    struct sim_module *m = as_module(h);
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nfuncs; i++)
        if (!strcmp(m->funcs[i].name, name)) {
            *out = &m->funcs[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

/* A managed or global variable of the module: allocated, in the current
 * context, when first asked for. Its other globals are not simulated. */
static CUresult get_managed(CUdeviceptr *dptr, size_t *bytes, void *h, const char *name)
{
    struct sim_module *m = as_module(h);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < m->nmanaged; i++) {
        struct sim_managed *v = &m->managed[i];
        if (strcmp(v->name, name))
            continue;
        if (!v->p) {
            CUresult r = sim_module_variable(&v->p, v->bytes, m->dev, v->device);
            if (r != CUDA_SUCCESS)
                return r;
            memset((void *)(uintptr_t)v->p, v->value, v->bytes);
        }
        if (dptr)
            *dptr = v->p;
        if (bytes)
            *bytes = v->bytes;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
}

SIM_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    SIM_GATE();
    return get_managed(dptr, bytes, hmod, name);
}

SIM_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    SIM_GATE();
    return get_managed(dptr, bytes, library, name);
}

SIM_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    return get_func((void **)hfunc, hmod, name);
}

/* Libraries are context-independent modules. A library's kernel has a
 * handle of its own, which launches and the kernel calls take where a
 * function is asked for, as a driver's do; cuFuncGetParamInfo does not. */
SIM_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                      void **jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                      unsigned int numLibraryOptions)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    (void)libraryOptionValues; /* neither option has a value to read */
    if (!library || (numLibraryOptions && !libraryOptions))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_jit_options(numJitOptions, jitOptions, jitOptionsValues);
    if (r)
        return r;
    struct sim_ctx *c = sim_current_ctx();
    return parse_and_reserve(code, c ? c->dev : 0, (struct sim_module **)library);
}

SIM_EXPORT CUresult cuLibraryUnload(CUlibrary library) { SIM_GATE(); return unload(library); }

SIM_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    struct sim_func *f;
    CUresult r = get_func((void **)&f, library, name);
    if (r == CUDA_SUCCESS)
        *pKernel = (CUkernel)&f->kernel;
    return r;
}

/* A module's functions, or a library's kernels, in the order of its image;
 * as many as the array holds. */
static CUresult list_funcs(void **out, unsigned int n, void *h, int kernels)
{
    struct sim_module *m = as_module(h);
    if (!out && n)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    for (unsigned int i = 0; i < n && i < (unsigned)m->nfuncs; i++)
        out[i] = kernels ? (void *)&m->funcs[i].kernel : (void *)&m->funcs[i];
    return CUDA_SUCCESS;
}

static CUresult count_funcs(unsigned int *count, void *h)
{
    struct sim_module *m = as_module(h);
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    *count = (unsigned)m->nfuncs;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) { return count_funcs(count, mod); }
SIM_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib) { return count_funcs(count, lib); }

SIM_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod)
{
    return list_funcs((void **)functions, numFunctions, mod, 0);
}

SIM_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
    return list_funcs((void **)kernels, numKernels, lib, 1);
}

SIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                          void **jitOptionsValues, unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
    SIM_GATE();
    if (!fileName)
        return CUDA_ERROR_INVALID_VALUE;
    char buf[65536];
    if (sim_read_text(fileName, buf, sizeof buf) < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    return cuLibraryLoadData(library, buf, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                             libraryOptionValues, numLibraryOptions);
}

static struct sim_func *as_kernel(void *h)
{
    return h && *(uint32_t *)h == KERNEL_MAGIC ? (struct sim_func *)((char *)h - offsetof(struct sim_func, kernel))
                                               : NULL;
}

/* A function, or a library's kernel standing in for one. */
static struct sim_func *as_func(void *h)
{
    return h && ((struct sim_func *)h)->magic == FUNC_MAGIC ? h : as_kernel(h);
}

SIM_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_func *f = as_kernel(kernel);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

static CUresult get_attr(int *pi, CUfunction_attribute attrib, struct sim_func *f)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pi = attrib == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : attrib == CU_FUNC_ATTRIBUTE_NUM_REGS ? 32
        : attrib == CU_FUNC_ATTRIBUTE_PTX_VERSION || attrib == CU_FUNC_ATTRIBUTE_BINARY_VERSION ? 90
        : attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ? f->dyn_smem
        : attrib == CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES ? (int)f->local : 0;
    return CUDA_SUCCESS;
}

/* Only the dynamic shared memory limit is kept (up to a device's 227 KiB). */
static CUresult set_attr(CUfunction_attribute attrib, int value, struct sim_func *f)
{
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (value < 0 || (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && value > 227 * 1024))
        return CUDA_ERROR_INVALID_VALUE;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        f->dyn_smem = value;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    return get_attr(pi, attrib, as_func(hfunc));
}

SIM_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    return set_attr(attrib, value, as_func(hfunc));
}

/* A kernel's attributes are the same on every simulated device. */
SIM_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
    (void)dev;
    return get_attr(pi, attrib, as_kernel(kernel));
}

SIM_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
    (void)dev;
    return set_attr(attrib, val, as_kernel(kernel));
}

/* Blocks per SM: 2048 threads, 32 blocks and 228 KiB of shared memory,
 * each block taking 1 KiB besides its dynamic share. */
SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
                                                                         size_t dynamicSMemSize, unsigned int flags)
{
    if (!numBlocks || blockSize <= 0 || blockSize > 1024 || flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    if (!as_func(func))
        return CUDA_ERROR_INVALID_HANDLE;
    size_t by_threads = 2048 / (size_t)blockSize, by_smem = (228u << 10) / (dynamicSMemSize + 1024);
    *numBlocks = (int)(by_threads < by_smem ? (by_threads < 32 ? by_threads : 32) : (by_smem < 32 ? by_smem : 32));
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                                size_t dynamicSMemSize)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

/* The block size of best occupancy, as the runtime's own search makes it:
 * from the largest block size the function takes down by warps, the first
 * with the most threads resident per SM; the minimum grid fills every SM. */
SIM_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                              CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                              size_t dynamicSMemSize, int blockSizeLimit,
                                                              unsigned int flags)
{
    struct sim_func *f = as_func(func);
    int most = 0;
    if (!minGridSize || !blockSize || blockSizeLimit < 0 || flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = get_attr(&most, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
    if (r != CUDA_SUCCESS)
        return r;
    int limit = blockSizeLimit && blockSizeLimit < most ? blockSizeLimit : most;
    int best_threads = 0, best_blocks = 0, best_size = 0;
    for (int aligned = (limit + 31) / 32 * 32; aligned > 0; aligned -= 32) {
        int size = aligned < limit ? aligned : limit, blocks;
        size_t smem = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(size) : dynamicSMemSize;
        r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, size, smem, flags);
        if (r != CUDA_SUCCESS)
            return r;
        if (blocks * size > best_threads) {
            best_threads = blocks * size;
            best_blocks = blocks;
            best_size = size;
        }
        if (best_threads == 2048)
            break;
    }
    *minGridSize = best_blocks * sim_sms();
    *blockSize = best_size;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                     CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                     size_t dynamicSMemSize, int blockSizeLimit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0);
}

/* The dynamic shared memory each of numBlocks blocks may take with all of
 * them resident on one SM (none when they do not fit at all). */
SIM_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                            int blockSize)
{
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0 || blockSize > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (!as_func(func))
        return CUDA_ERROR_INVALID_HANDLE;
    if (numBlocks > 32 || (size_t)numBlocks * (size_t)blockSize > 2048) {
        *dynamicSmemSize = 0;
        return CUDA_SUCCESS;
    }
    size_t per = (228u << 10) / (size_t)numBlocks - 1024;
    *dynamicSmemSize = per < (227u << 10) ? per : (227u << 10);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    struct sim_func *f = as_kernel(kernel);
    if (!pLib)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pLib = (CUlibrary)f->module;
    return CUDA_SUCCESS;
}

/* The parameter layout a builtin reads (builtin_args): vecadd(float *x,
 * float *y, float *z, int n), fill(unsigned *p, unsigned v, int n), add
 * (the same, adding v), setcond(CUgraphConditionalHandle h, unsigned *p,
 * int step: *p += step, then h's value is *p); other
 * kernels take their params=N words, or none. Not in api/cuda.api: the shim need not hook it. */
static CUresult param_info(struct sim_func *f, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    static const size_t vecadd[][2] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}}, fill[][2] = {{0, 8}, {8, 4}, {12, 4}},
                        printf_[][2] = {{0, 4}}, setcond[][2] = {{0, 8}, {8, 8}, {16, 4}};
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    const size_t(*layout)[2] = f->builtin == B_VECADD                        ? vecadd
                               : f->builtin == B_FILL || f->builtin == B_ADD ? fill
                               : f->builtin == B_PRINTF                      ? printf_
                               : f->builtin == B_SETCOND                     ? setcond
                                                                             : NULL;
    size_t n = f->builtin == B_VECADD                                                   ? 4
               : f->builtin == B_FILL || f->builtin == B_ADD || f->builtin == B_SETCOND ? 3
               : f->builtin == B_PRINTF                                                 ? 1
                                                                                        : f->nparams;
    if (paramIndex >= n || (!paramOffset && !paramSize))
        return CUDA_ERROR_INVALID_VALUE;
    if (f->layout) {
        if (paramOffset)
            *paramOffset = f->layout[2 * paramIndex];
        if (paramSize)
            *paramSize = f->layout[2 * paramIndex + 1];
        return CUDA_SUCCESS;
    }
    if (!layout) {
        if (paramOffset)
            *paramOffset = 8 * paramIndex;
        if (paramSize)
            *paramSize = 8;
        return CUDA_SUCCESS;
    }
    if (paramOffset)
        *paramOffset = layout[paramIndex][0];
    if (paramSize)
        *paramSize = layout[paramIndex][1];
    return CUDA_SUCCESS;
}

/* Cache preferences: checked and kept (per context), not simulated. */
SIM_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    if (!as_func(hfunc))
        return CUDA_ERROR_INVALID_HANDLE;
    return (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    (void)dev;
    if (!as_kernel(kernel))
        return CUDA_ERROR_INVALID_HANDLE;
    return (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    c->cache = config;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!pconfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pconfig = c->cache;
    return CUDA_SUCCESS;
}

/* Moves what the context reserves in *have to want bytes. */
static CUresult rereserve(struct sim_ctx *c, uint64_t *have, uint64_t want)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_mem_lock);
    if (want > *have && sim_mem_reserve(c->dev, want - *have) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (want < *have)
        sim_mem_release(c->dev, *have - want);
    if (r == CUDA_SUCCESS) {
        c->charged_bytes = c->charged_bytes - *have + want;
        *have = want;
    }
    pthread_mutex_unlock(&sim_mem_lock);
    return r;
}

/* Local memory at per-thread level for every resident thread: set by the
 * stack limit, grown by a launch that needs more (which fails as the driver
 * does when the device has no room for it). */
static CUresult set_local(struct sim_ctx *c, uint64_t level)
{
    const struct fg_drvmem *t = sim_drv();
    uint64_t threads = (uint64_t)sim_sms() * 2048;
    level = fg_drv_up(level > t->local_base ? level : t->local_base, t->local_align);
    CUresult r = rereserve(c, &c->local_bytes, fg_drv_local_extra(t, level, threads));
    if (r == CUDA_SUCCESS)
        c->local_level = level;
    return r;
}

/* Limits: the device heap is kept (the default 8 MiB until set); the stack
 * sets the context's local memory level, pending device launches reserve
 * their room, both as the driver does (flexgv/drvmem.h); the others are
 * accepted and not modelled. */
SIM_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if ((unsigned)limit > 6)
        return CUDA_ERROR_INVALID_VALUE;
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE)
        c->heap = value;
    if (limit == CU_LIMIT_STACK_SIZE)
        return set_local(c, value);
    if (limit == CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT) {
        r = rereserve(c, &c->pending_bytes, fg_drv_pending(sim_drv(), value));
        if (r == CUDA_SUCCESS)
            c->pending = value;
        return r;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!pvalue || (unsigned)limit > 6)
        return CUDA_ERROR_INVALID_VALUE;
    *pvalue = limit == CU_LIMIT_MALLOC_HEAP_SIZE ? (c->heap ? c->heap : 8u << 20)
            : limit == CU_LIMIT_STACK_SIZE ? (c->local_level ? c->local_level : sim_drv()->local_base)
            : limit == CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT ? (c->pending ? c->pending : sim_drv()->pending_base)
            : 0;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    struct sim_func *f = (struct sim_func *)hfunc;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->magic != FUNC_MAGIC)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hkernel)
{
    struct sim_func *f = as_kernel(hkernel);
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

/* Functions load with their module here: none is left for lazy loading. */
SIM_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    if (!as_func(function))
        return CUDA_ERROR_INVALID_HANDLE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuFuncLoad(CUfunction function) { return as_func(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

/* A function only: a library's kernel is refused here, as by a driver. */
SIM_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    struct sim_func *f = (struct sim_func *)func;
    return param_info(f && f->magic == FUNC_MAGIC ? f : NULL, paramIndex, paramOffset, paramSize);
}

SIM_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    return param_info(as_kernel(kernel), paramIndex, paramOffset, paramSize);
}

/* ---- streams ---- */

static __thread struct sim_stream per_thread_stream;

/* The lane a new stream runs in (state.c): the legacy stream has its
 * device's first to itself, the others take the rest in turn. */
static int new_lane(int dev)
{
    static unsigned made;
    unsigned n = __atomic_fetch_add(&made, 1, __ATOMIC_RELAXED);
    return dev * SIM_LANES_PER_DEV + 1 + (int)(n % (SIM_LANES_PER_DEV - 1));
}

/* Streams, events, graphs and executables destroyed stay allocated a
 * while, marked dead, so that a use after the destroy is seen: refused,
 * or with FLEXGV_SIM_STRICT_HANDLES=1 (the tests' GPU servers) the process
 * ends, as a GPU's driver may end it (an executor that asked after a
 * destroyed stream's capture crashed so on an H100). */
enum { GRAVES = 256 };
static void *graves[GRAVES];
static unsigned graves_next;

void sim_bury(uint32_t *magic, void *p)
{
    *magic = SIM_DEAD_MAGIC;
    unsigned i = __atomic_fetch_add(&graves_next, 1, __ATOMIC_RELAXED) % GRAVES;
    free(__atomic_exchange_n(&graves[i], p, __ATOMIC_ACQ_REL));
}

void *sim_dead(const char *what, const void *h)
{
    static int strict = -1;
    if (strict < 0) {
        const char *v = getenv("FLEXGV_SIM_STRICT_HANDLES");
        strict = v && !strcmp(v, "1");
    }
    if (strict) {
        fprintf(stderr, "simulated GPU: a %s used after its destroy (%p), which a GPU's driver may crash on\n", what, h);
        abort();
    }
    return NULL;
}

struct sim_stream *sim_stream_of(struct sim_ctx *ctx, CUstream h, int per_thread)
{
    if (h == CU_STREAM_PER_THREAD || (!h && per_thread)) {
        struct sim_stream *s = &per_thread_stream;
        if (s->ctx != ctx && !s->cap)
            *s = (struct sim_stream){.magic = STREAM_MAGIC, .ctx = ctx, .lane = new_lane(ctx->dev)};
        return s;
    }
    if (!h || h == CU_STREAM_LEGACY) {
        if (!ctx->legacy) {
            struct sim_stream *s = calloc(1, sizeof *s);
            if (!s)
                return NULL;
            *s = (struct sim_stream){.magic = STREAM_MAGIC, .ctx = ctx, .lane = ctx->dev * SIM_LANES_PER_DEV};
            ctx->legacy = s;
        }
        return ctx->legacy;
    }
    struct sim_stream *s = (struct sim_stream *)h;
    return s->magic == STREAM_MAGIC ? s : s->magic == SIM_DEAD_MAGIC ? sim_dead("stream", s) : NULL;
}

CUresult sim_stream_wait(struct sim_stream *s)
{
    sim_wait(s->lane, s->last);
    sim_pools_trim_after_sync(s->ctx->dev);
    return CUDA_SUCCESS;
}

/* Everything this process queued on the context's device. */
void sim_ctx_sync(struct sim_ctx *ctx)
{
    for (int l = ctx->dev * SIM_LANES_PER_DEV; l < (ctx->dev + 1) * SIM_LANES_PER_DEV; l++)
        sim_wait(l, sim_lane_head(l));
    sim_pools_trim_after_sync(ctx->dev);
}

static CUresult gone_stream(CUstream h);

/* The stream a call names, in the current context. */
CUresult sim_stream_arg(CUstream h, int pt, struct sim_stream **out)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r || (r = gone_stream(h)) != CUDA_SUCCESS)
        return r;
    *out = sim_stream_of(c, h, pt);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Each context's streams, linked so that they go with it: a stream of a
 * destroyed or reset context is answered as the driver answers it. */
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

static void stream_unlink(struct sim_stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else if (s->ctx->streams == s)
        s->ctx->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

static void stream_free(struct sim_stream *s)
{
    sim_capture_stream_gone(s);
    sim_bury(&s->magic, s);
}

/* Its context gone, a stream stays as a tombstone answering `gone` to a
 * synchronization, a query or its destroy, which frees it. */
void sim_ctx_streams_gone(struct sim_ctx *ctx, CUresult gone)
{
    pthread_mutex_lock(&streams_lock);
    while (ctx->streams) {
        struct sim_stream *s = ctx->streams;
        stream_unlink(s);
        sim_capture_stream_gone(s);
        s->magic = STREAM_GONE_MAGIC;
        s->ctx = NULL;
        s->gone = gone;
    }
    pthread_mutex_unlock(&streams_lock);
}

static CUresult gone_stream(CUstream h)
{
    struct sim_stream *s = (struct sim_stream *)h;
    if (!s || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    return s->magic == STREAM_GONE_MAGIC ? s->gone : CUDA_SUCCESS;
}

CUresult sim_stream_make(struct sim_ctx *c, CUstream *phStream, unsigned int flags, int priority)
{
    if (!phStream || (flags & ~1u))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *s = (struct sim_stream){.magic = STREAM_MAGIC, .ctx = c, .lane = new_lane(c->dev), .flags = flags};
    s->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
    pthread_mutex_lock(&streams_lock);
    if ((s->next = c->streams))
        s->next->prev = s;
    c->streams = s;
    pthread_mutex_unlock(&streams_lock);
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    return r ? r : sim_stream_make(c, phStream, Flags, 0);
}

SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    SIM_GATE();
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    return r ? r : sim_stream_make(c, phStream, flags, priority);
}

/* ---- stream attributes: kept per stream and read back ---- */

static CUresult stream_attr(CUstream h, int pt, CUstreamAttrID attr, struct sim_stream **out)
{
    CUresult r = sim_stream_arg(h, pt, out);
    if (r != CUDA_SUCCESS)
        return r;
    return attr == CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW || attr == CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY ||
                   attr == CU_STREAM_ATTRIBUTE_PRIORITY
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

static CUresult get_stream_attr(CUstream h, int pt, CUstreamAttrID attr, CUstreamAttrValue *v)
{
    struct sim_stream *s;
    CUresult r = stream_attr(h, pt, attr, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    memset(v, 0, sizeof *v);
    if (attr == CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW)
        v->accessPolicyWindow = s->window;
    else if (attr == CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY)
        v->syncPolicy = s->sync_policy ? s->sync_policy : CU_SYNC_POLICY_AUTO;
    else
        v->priority = s->priority;
    return CUDA_SUCCESS;
}

/* Priorities clamp to the range a Hopper driver gives (0 to
 * -5), as a driver's do; a window's hit ratio is a fraction. */
static CUresult set_stream_attr(CUstream h, int pt, CUstreamAttrID attr, const CUstreamAttrValue *v)
{
    struct sim_stream *s;
    CUresult r = stream_attr(h, pt, attr, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (attr == CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW) {
        const CUaccessPolicyWindow *w = &v->accessPolicyWindow;
        if (!(w->hitRatio >= 0.0f && w->hitRatio <= 1.0f) || (unsigned)w->hitProp > CU_ACCESS_PROPERTY_PERSISTING ||
            (unsigned)w->missProp > CU_ACCESS_PROPERTY_PERSISTING)
            return CUDA_ERROR_INVALID_VALUE;
        s->window = *w;
    } else if (attr == CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY) {
        if (v->syncPolicy < CU_SYNC_POLICY_AUTO || v->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)
            return CUDA_ERROR_INVALID_VALUE;
        s->sync_policy = v->syncPolicy;
    } else {
        s->priority = v->priority > 0 ? 0 : v->priority < -5 ? -5 : v->priority;
    }
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
    return get_stream_attr(hStream, 0, attr, value_out);
}

SIM_EXPORT CUresult cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
    return get_stream_attr(hStream, 1, attr, value_out);
}

SIM_EXPORT CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    return set_stream_attr(hStream, 0, attr, value);
}

SIM_EXPORT CUresult cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    return set_stream_attr(hStream, 1, attr, value);
}

static CUresult copy_stream_attrs(CUstream dst, CUstream src, int pt)
{
    struct sim_stream *d, *s;
    CUresult r = sim_stream_arg(dst, pt, &d);
    if (r == CUDA_SUCCESS)
        r = sim_stream_arg(src, pt, &s);
    if (r != CUDA_SUCCESS)
        return r;
    d->priority = s->priority;
    d->sync_policy = s->sync_policy;
    d->window = s->window;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) { return copy_stream_attrs(dst, src, 0); }
SIM_EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) { return copy_stream_attrs(dst, src, 1); }

SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    SIM_GATE();
    struct sim_stream *s = (struct sim_stream *)hStream;
    if (!s || s == (struct sim_stream *)CU_STREAM_LEGACY || s == (struct sim_stream *)CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    /* under the lock: its context may be destroyed meanwhile */
    pthread_mutex_lock(&streams_lock);
    uint32_t magic = s->magic;
    if (magic == SIM_DEAD_MAGIC)
        sim_dead("stream", s);
    CUresult r = magic == STREAM_MAGIC ? CUDA_SUCCESS : magic == STREAM_GONE_MAGIC ? s->gone : CUDA_ERROR_INVALID_HANDLE;
    if (magic == STREAM_MAGIC)
        stream_unlink(s);
    pthread_mutex_unlock(&streams_lock);
    if (magic == STREAM_MAGIC)
        stream_free(s);
    else if (magic == STREAM_GONE_MAGIC)
        s->magic = 0, free(s);
    return r;
}

SIM_EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(hStream, 0, &s);
    if (r)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = sim_ordinal(s->ctx->dev);
    return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream h, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r || (r = sim_capture_check(s)) != CUDA_SUCCESS)
        return r;
    r = sim_stream_wait(s);
    sim_device_output();
    return r;
}
SIM_EXPORT CUresult cuStreamSynchronize(CUstream h) { SIM_GATE(); return stream_sync(h, 0); }
SIM_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream h) { SIM_GATE(); return stream_sync(h, 1); }

static CUresult stream_query(CUstream h, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r || (r = sim_capture_check(s)) != CUDA_SUCCESS)
        return r;
    return sim_finished(s->lane, s->last) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
SIM_EXPORT CUresult cuStreamQuery(CUstream h) { SIM_GATE(); return stream_query(h, 0); }
SIM_EXPORT CUresult cuStreamQuery_ptsz(CUstream h) { SIM_GATE(); return stream_query(h, 1); }

static struct sim_event *as_event(CUevent e)
{
    uint32_t magic = e ? ((struct sim_event *)e)->magic : 0;
    return magic == EVENT_MAGIC ? (struct sim_event *)e : magic == SIM_DEAD_MAGIC ? sim_dead("event", e) : NULL;
}

int sim_event_valid(CUevent e) { return as_event(e) != NULL; }

/* A graph's event nodes, as the stream gets to them (graph.c). */
void sim_event_record_on(CUevent ev, struct sim_stream *s)
{
    struct sim_event *e = as_event(ev);
    if (!e)
        return;
    sim_stamp_record(&e->stamp, s->lane, !(e->flags & CU_EVENT_DISABLE_TIMING));
    s->last = e->stamp.count ? e->stamp.count : s->last;
    e->recorded = 1;
}

void sim_event_wait_on(CUevent ev, struct sim_stream *s)
{
    struct sim_event *e = as_event(ev);
    uint64_t c = e && e->recorded ? sim_submit_wait(s->lane, &e->stamp) : 0;
    if (c)
        s->last = c;
}

static CUresult stream_wait_event(CUstream h, CUevent e, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    struct sim_event *ev = as_event(e);
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    int captured;
    if ((r = sim_capture_wait(s, ev, &captured)) != CUDA_SUCCESS || captured)
        return r;
    uint64_t c = ev->recorded ? sim_submit_wait(s->lane, &ev->stamp) : 0;
    if (c)
        s->last = c;
    return CUDA_SUCCESS;
}
SIM_EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int Flags)
{
    SIM_GATE();
    (void)Flags;
    return stream_wait_event(h, e, 0);
}
SIM_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int Flags)
{
    SIM_GATE();
    (void)Flags;
    return stream_wait_event(h, e, 1);
}

/* ---- launches ---- */

/* The arguments a builtin reads, copied out of the launch's parameters. */
static void builtin_args(struct sim_func *f, void **params, struct sim_kargs *a)
{
    memset(a, 0, sizeof *a);
    if (!params)
        return;
    if (f->builtin == B_VECADD) {
        for (int i = 0; i < 3; i++)
            a->ptr[i] = *(void **)params[i];
        a->n = *(int *)params[3];
    } else if (f->builtin == B_FILL || f->builtin == B_ADD) {
        a->ptr[0] = *(void **)params[0];
        a->val = *(unsigned *)params[1];
        a->n = *(int *)params[2];
    } else if (f->builtin == B_PRINTF) {
        a->val = *(unsigned *)params[0];
    } else if (f->builtin == B_SETCOND) {
        a->ptr[0] = (void *)(uintptr_t) * (uint64_t *)params[0];
        a->ptr[1] = *(void **)params[1];
        a->n = *(int *)params[2];
    }
}

/* Device printf's lines, until a synchronization prints them. */
static pthread_mutex_t printed_lock = PTHREAD_MUTEX_INITIALIZER;
static char *printed;
static size_t nprinted;

void sim_device_output(void)
{
    pthread_mutex_lock(&printed_lock);
    if (nprinted) {
        fwrite(printed, 1, nprinted, stdout);
        fflush(stdout);
        nprinted = 0;
    }
    pthread_mutex_unlock(&printed_lock);
}

static void device_printf(unsigned v)
{
    char line[40];
    int n = snprintf(line, sizeof line, "device printf: %u\n", v);
    pthread_mutex_lock(&printed_lock);
    char *p = nprinted + (size_t)n <= (1u << 20) ? realloc(printed, nprinted + (size_t)n) : NULL; /* the driver's FIFO is 1 MiB too */
    if (p) {
        memcpy(p + nprinted, line, (size_t)n);
        printed = p;
        nprinted += (size_t)n;
    }
    pthread_mutex_unlock(&printed_lock);
}

/* Computes a builtin on the host-backed memory, then queues its device time. */
void sim_kernel_run(struct sim_stream *s, struct sim_func *f, const struct sim_kargs *a)
{
    if (f->builtin == B_VECADD) {
        const float *x = a->ptr[0], *y = a->ptr[1];
        float *z = a->ptr[2];
        for (int i = 0; i < a->n; i++)
            z[i] = x[i] + y[i];
    } else if (f->builtin == B_FILL) {
        unsigned *p = a->ptr[0];
        for (int i = 0; i < a->n; i++)
            p[i] = a->val;
    } else if (f->builtin == B_PRINTF) {
        device_printf(a->val);
    } else if (f->builtin == B_ADD) {
        unsigned *p = a->ptr[0];
        for (int i = 0; i < a->n; i++)
            p[i] += a->val;
    } else if (f->builtin == B_SETCOND) {
        unsigned *p = a->ptr[1];
        *p += (unsigned)a->n;
        sim_cond_set((CUgraphConditionalHandle)(uintptr_t)a->ptr[0], *p);
    }
    uint64_t ns = f->duration_ns == DEFAULT_DURATION ? sim->cfg.kernel_ns : f->duration_ns;
    /* A green context's kernel runs on its SMs only: proportionally longer
     * than on the process's (which sim_submit_kernel scales to the device). */
    if (s->ctx->sms && s->ctx->sms < sim_sms())
        ns = ns * (uint64_t)sim_sms() / (uint64_t)s->ctx->sms;
    uint64_t c = f->collective ? sim_submit_collective(s->lane, ns) : sim_submit_kernel(s->lane, ns);
    if (c)
        s->last = c;
}

/* Parameters given packed in one buffer (extra): pointers into it at the
 * offsets of the function's layout, in out (the first 8; every one must lie
 * in the buffer). *use: what the launch reads its parameters from. */
static CUresult extra_params(CUfunction fn, void **params, void **extra, void *out[8], void ***use)
{
    *use = params;
    if (!extra)
        return CUDA_SUCCESS;
    if (params)
        return CUDA_ERROR_INVALID_VALUE; /* one way or the other */
    char *buf = NULL;
    const size_t *size = NULL;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (!buf || !size)
        return buf || size ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    struct sim_func *f = as_func(fn);
    size_t off, sz;
    for (size_t k = 0; f && param_info(f, k, &off, &sz) == CUDA_SUCCESS; k++) {
        if (off > *size || sz > *size - off)
            return CUDA_ERROR_INVALID_VALUE;
        if (k < 8)
            out[k] = buf + off;
    }
    *use = out;
    return CUDA_SUCCESS;
}

/* The parameters a kernel node keeps (see struct sim_knode), checked as a
 * launch's. */
static CUresult knode_make(const CUDA_KERNEL_NODE_PARAMS *p, struct sim_knode *k)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_func *f = as_func(p->func ? (void *)p->func : (void *)p->kern);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY || !p->blockDimZ ||
        (uint64_t)p->blockDimX * p->blockDimY * p->blockDimZ > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    void *packed[8], **use;
    CUresult r = extra_params((CUfunction)f, p->kernelParams, p->extra, packed, &use);
    if (r)
        return r;
    memset(k, 0, sizeof *k);
    k->f = f;
    builtin_args(f, use, &k->args);
    k->p = *p;
    k->p.kernelParams = NULL;
    k->p.extra = NULL;
    k->kept = 1;
    size_t off, sz;
    for (size_t i = 0; param_info(f, i, &off, &sz) == CUDA_SUCCESS; i++) {
        if (i >= SIM_KNODE_PARAMS || off > SIM_KNODE_BYTES || sz > SIM_KNODE_BYTES - off) {
            k->kept = 0;
            break;
        }
        if (use)
            memcpy(k->bytes + off, use[i], sz);
        k->n = (unsigned)i + 1;
    }
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream h, void **params, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    struct sim_func *f = as_func(fn);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->local > s->ctx->local_level && (r = set_local(s->ctx, f->local)) != CUDA_SUCCESS)
        return r;
    struct sim_kargs a;
    builtin_args(f, params, &a);
    if (sim_stream_captured(s)) {
        CUDA_KERNEL_NODE_PARAMS p = {.func = fn, .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz,
                                     .blockDimX = bx, .blockDimY = by, .blockDimZ = bz, .kernelParams = params};
        struct sim_knode k;
        if ((r = knode_make(&p, &k)) != CUDA_SUCCESS)
            return r;
        struct sim_node *n = sim_node_kernel(&k);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_capture_route(s, n, &r))
            return r;
        sim_node_destroy(n);
    }
    sim_kernel_run(s, f, &a);
    return CUDA_SUCCESS;
}

/* A kernel node: its parameters are read (copied) when it is added. */
SIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                            size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *p)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_knode k;
    CUresult r = knode_make(p, &k);
    if (r)
        return r;
    return sim_graph_add_node(phGraphNode, hGraph, dependencies, numDependencies, sim_node_kernel(&k));
}

/* A kernel node's parameters as given, in the node's own copy (valid
 * until they change); a node whose parameters did not fit answers
 * CUDA_ERROR_NOT_SUPPORTED. */
SIM_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_knode *k;
    CUresult r = nodeParams ? sim_knode_of(NULL, hNode, &k) : CUDA_ERROR_INVALID_VALUE;
    if (r)
        return r;
    if (!k->kept)
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t off, sz;
    for (unsigned i = 0; i < k->n && param_info(k->f, i, &off, &sz) == CUDA_SUCCESS; i++)
        k->argv[i] = k->bytes + off;
    *nodeParams = k->p;
    nodeParams->kernelParams = k->argv;
    return CUDA_SUCCESS;
}

/* The graph's node changes; executable graphs made from it do not. */
SIM_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_knode *k, made;
    CUresult r = sim_knode_of(NULL, hNode, &k);
    if (r || (r = knode_make(nodeParams, &made)))
        return r;
    *k = made;
    return CUDA_SUCCESS;
}

/* The device a function's module was loaded on (-1: a library's, loaded
 * in every context). */
static int func_dev(const struct sim_func *f)
{
    const struct sim_module *m = as_module(f->module);
    return m ? m->dev : -1;
}

/* The executable's copy of hNode runs with nodeParams from its next
 * launch; the graph's node stays as it was. Anything may change but the
 * device (the context) of the function. */
SIM_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                      const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    SIM_GATE();
    if (!sim_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_knode *k, made;
    CUresult r = hGraphExec ? sim_knode_of(hGraphExec, hNode, &k) : CUDA_ERROR_INVALID_VALUE;
    if (r || (r = knode_make(nodeParams, &made)))
        return r;
    if (func_dev(made.f) != func_dev(k->f))
        return CUDA_ERROR_INVALID_VALUE;
    *k = made;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int shm, CUstream h, void **params,
                                   void **extra)
{
    SIM_GATE();
    (void)shm;
    void *packed[8], **use;
    CUresult r = extra_params(f, params, extra, packed, &use);
    return r ? r : launch(f, gx, gy, gz, bx, by, bz, h, use, 0);
}

SIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                        CUstream h, void **params, void **extra)
{
    SIM_GATE();
    (void)shm;
    void *packed[8], **use;
    CUresult r = extra_params(f, params, extra, packed, &use);
    return r ? r : launch(f, gx, gy, gz, bx, by, bz, h, use, 1);
}

/* The cluster a configuration asks for (1x1x1 without the attribute);
 * INVALID_VALUE if its attributes are unreadable or it does not divide the
 * grid, as a driver refuses such a launch. */
static CUresult cluster_of(const CUlaunchConfig *c, unsigned dim[3])
{
    dim[0] = dim[1] = dim[2] = 1;
    if (c->numAttrs && !c->attrs)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            dim[0] = c->attrs[i].value.clusterDim.x;
            dim[1] = c->attrs[i].value.clusterDim.y;
            dim[2] = c->attrs[i].value.clusterDim.z;
        }
    if (!dim[0] || !dim[1] || !dim[2] || c->gridDimX % dim[0] || c->gridDimY % dim[1] || c->gridDimZ % dim[2])
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* At most 8 blocks per cluster, as a portable cluster on a GPU that has
 * them; as many clusters at once as the SMs hold, one block each. */
SIM_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction f, const CUlaunchConfig *c)
{
    if (!size || !c || !as_func(f))
        return CUDA_ERROR_INVALID_VALUE;
    *size = 8;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c)
{
    unsigned dim[3];
    if (!n || !c || !as_func(f) || cluster_of(c, dim) != CUDA_SUCCESS || dim[0] * dim[1] * dim[2] > 8)
        return CUDA_ERROR_INVALID_VALUE;
    *n = sim_sms() / (int)(dim[0] * dim[1] * dim[2]);
    return CUDA_SUCCESS;
}

static CUresult record(CUevent ev, CUstream h, int pt);

/* A launch whose attributes name events: they are recorded behind it (a
 * completion event when it is done; a programmatic one no earlier). */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, int pt)
{
    unsigned dim[3];
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cluster_of(c, dim);
    if (r != CUDA_SUCCESS)
        return r;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if ((c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT ||
             c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) &&
            !as_event(c->attrs[i].value.launchCompletionEvent.event))
            return CUDA_ERROR_INVALID_HANDLE;
    r = launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ, c->hStream,
               params, pt);
    for (unsigned i = 0; r == CUDA_SUCCESS && i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT ||
            c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT)
            r = record(c->attrs[i].value.launchCompletionEvent.event, c->hStream, pt);
    return r;
}

SIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    SIM_GATE();
    void *packed[8], **use;
    CUresult r = extra_params(f, params, extra, packed, &use);
    return r ? r : launch_ex(config, f, use, 0);
}

SIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    SIM_GATE();
    void *packed[8], **use;
    CUresult r = extra_params(f, params, extra, packed, &use);
    return r ? r : launch_ex(config, f, use, 1);
}

SIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                              CUstream h, void **params)
{
    SIM_GATE();
    (void)shm;
    return launch(f, gx, gy, gz, bx, by, bz, h, params, 0);
}

SIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                   unsigned int bx, unsigned int by, unsigned int bz,
                                                   unsigned int shm, CUstream h, void **params)
{
    SIM_GATE();
    (void)shm;
    return launch(f, gx, gy, gz, bx, by, bz, h, params, 1);
}

static CUresult host_func(CUstream h, CUhostFn fn, void *data, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_stream_captured(s)) {
        struct sim_node *n = sim_node_host(fn, data);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (sim_capture_route(s, n, &r))
            return r;
        sim_node_destroy(n);
    }
    sim_host_enqueue(s, fn, NULL, h, data);
    return CUDA_SUCCESS;
}
SIM_EXPORT CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *data) { SIM_GATE(); return host_func(h, fn, data, 0); }
SIM_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *data) { SIM_GATE(); return host_func(h, fn, data, 1); }

/* The older form: its callback is told the stream and its status, and a
 * captured stream cannot take one (the driver refuses it too). */
static CUresult add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned int flags, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_stream_captured(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sim_host_enqueue(s, NULL, cb, h, data);
    return CUDA_SUCCESS;
}
SIM_EXPORT CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void *data, unsigned int flags)
{
    SIM_GATE();
    return add_callback(h, cb, data, flags, 0);
}
SIM_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void *data, unsigned int flags)
{
    SIM_GATE();
    return add_callback(h, cb, data, flags, 1);
}

/* ---- events ---- */

SIM_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct sim_ctx *c;
    CUresult r = sim_check_ctx(&c);
    if (r)
        return r;
    if (!phEvent || (Flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *e = (struct sim_event){.magic = EVENT_MAGIC, .flags = Flags};
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

/* Timed events this process recorded (each costs a real GPU ~1 us
 * between the kernels around it): flexgv_sim_timed_records. */
static uint64_t timed_records;

SIM_EXPORT uint64_t flexgv_sim_timed_records(void) { return __atomic_load_n(&timed_records, __ATOMIC_RELAXED); }

static CUresult record(CUevent ev, CUstream h, int pt)
{
    struct sim_stream *s;
    CUresult r = sim_stream_arg(h, pt, &s);
    if (r)
        return r;
    struct sim_event *e = as_event(ev);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    int captured;
    if ((r = sim_capture_record(e, s, &captured)) != CUDA_SUCCESS || captured)
        return r;
    sim_stamp_record(&e->stamp, s->lane, !(e->flags & CU_EVENT_DISABLE_TIMING));
    if (!(e->flags & CU_EVENT_DISABLE_TIMING))
        __atomic_fetch_add(&timed_records, 1, __ATOMIC_RELAXED);
    s->last = e->stamp.count ? e->stamp.count : s->last;
    e->recorded = 1;
    return CUDA_SUCCESS;
}
SIM_EXPORT CUresult cuEventRecord(CUevent e, CUstream h) { SIM_GATE(); return record(e, h, 0); }
SIM_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream h) { SIM_GATE(); return record(e, h, 1); }
SIM_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags)
{
    SIM_GATE();
    return flags & ~1u ? CUDA_ERROR_INVALID_VALUE : record(e, h, 0);
}
SIM_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int flags)
{
    SIM_GATE();
    return flags & ~1u ? CUDA_ERROR_INVALID_VALUE : record(e, h, 1);
}

/* ---- context-wide events (12.5) ---- */

/* Everything the context's streams were given until now, as one place: the
 * legacy lane waits for the other lanes' heads (it waits for blocking
 * streams' work anyway), and the event is recorded there. */
/* The context and event of a context-wide call; a capture in the context
 * is invalidated by it. */
static CUresult ctx_event_args(CUcontext hCtx, CUevent ev, struct sim_ctx **c, struct sim_event **e)
{
    *c = (struct sim_ctx *)hCtx;
    if (!sim_ctx_valid(hCtx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!(*e = as_event(ev)))
        return CUDA_ERROR_INVALID_HANDLE;
    return sim_capture_check_ctx(*c);
}

SIM_EXPORT CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent ev)
{
    SIM_GATE();
    struct sim_ctx *c;
    struct sim_event *e;
    CUresult r = ctx_event_args(hCtx, ev, &c, &e);
    if (r)
        return r;
    struct sim_stream *legacy = sim_stream_of(c, NULL, 0);
    if (!legacy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int l = legacy->lane + 1; l < legacy->lane + SIM_LANES_PER_DEV; l++) {
        struct sim_stamp head = {.lane = l, .count = sim_lane_head(l)};
        uint64_t c2 = sim_submit_wait(legacy->lane, &head);
        legacy->last = c2 ? c2 : legacy->last;
    }
    sim_stamp_record(&e->stamp, legacy->lane, !(e->flags & CU_EVENT_DISABLE_TIMING));
    legacy->last = e->stamp.count ? e->stamp.count : legacy->last;
    e->recorded = 1;
    return CUDA_SUCCESS;
}

/* Work given to any stream of the context from now on waits for the event:
 * every lane of its device waits. */
SIM_EXPORT CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent ev)
{
    SIM_GATE();
    struct sim_ctx *c;
    struct sim_event *e;
    CUresult r = ctx_event_args(hCtx, ev, &c, &e);
    if (r || !e->recorded)
        return r;
    for (int l = c->dev * SIM_LANES_PER_DEV; l < (c->dev + 1) * SIM_LANES_PER_DEV; l++)
        sim_submit_wait(l, &e->stamp);
    return CUDA_SUCCESS;
}

/* Event queries this process made, for tests of what a tenant's launches
 * cost the driver (one costs a real driver 1.4 us): flexgv_sim_event_queries. */
static uint64_t event_queries;

SIM_EXPORT uint64_t flexgv_sim_event_queries(void) { return __atomic_load_n(&event_queries, __ATOMIC_RELAXED); }

SIM_EXPORT CUresult cuEventQuery(CUevent ev)
{
    SIM_GATE();
    __atomic_fetch_add(&event_queries, 1, __ATOMIC_RELAXED);
    struct sim_event *e = as_event(ev);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = sim_capture_event_use(e);
    if (r)
        return r;
    uint64_t ts;
    return !e->recorded || sim_stamp_time(&e->stamp, &ts) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_EXPORT CUresult cuEventSynchronize(CUevent ev)
{
    SIM_GATE();
    struct sim_event *e = as_event(ev);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = sim_capture_event_use(e);
    if (r)
        return r;
    if (e->recorded)
        sim_stamp_wait(&e->stamp);
    sim_device_output();
    return CUDA_SUCCESS;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
    struct sim_event *s = as_event(a), *e = as_event(b);
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s || !e || !s->recorded || !e->recorded || ((s->flags | e->flags) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t0, t1;
    if (!sim_stamp_time(&s->stamp, &t0) || !sim_stamp_time(&e->stamp, &t1))
        return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(int64_t)(t1 - t0) / 1e6);
    return CUDA_SUCCESS;
}
SIM_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
SIM_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }

SIM_EXPORT CUresult cuEventDestroy_v2(CUevent ev)
{
    struct sim_event *e = as_event(ev);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    sim_stamp_forget(&e->stamp);
    sim_bury(&e->magic, e);
    return CUDA_SUCCESS;
}

/* The profiler's capture range: nothing to capture here, but asked within a
 * context as a driver's profiler is. */
SIM_EXPORT CUresult cuProfilerStart(void)
{
    struct sim_ctx *c;
    return sim_check_ctx(&c);
}

SIM_EXPORT CUresult cuProfilerStop(void)
{
    struct sim_ctx *c;
    return sim_check_ctx(&c);
}
