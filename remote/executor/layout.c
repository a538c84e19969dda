/* A function's parameter sizes in one answer: the client would otherwise
 * ask for each parameter in turn, a round trip each, at the first launch of
 * every function.
 *
 * The driver's answer is checked against the compiler's: the
 * EIATTR_KPARAM_INFO of the cubins among the images loaded (by kernel
 * name: a table of names' hashes and sizes, kept for the connection; a
 * name two images give differently, or a text image gives, is not
 * checked). A kernel whose layouts differ is said (launches go by the
 * driver's); how many were checked is said when the connection ends. */
#include "executor.h"
#include "flexgv/cubin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*param_info)(void *, size_t, size_t *, size_t *);
typedef CUresult (*get_name)(const char **, void *);
static param_info func_info, kernel_info;
static get_name func_name, kernel_name;
static CUresult (*ctx_device)(CUdevice *);
static CUresult (*attribute)(int *, CUdevice_attribute, CUdevice);

/* ---- the compiler's layouts, by kernel name ---- */

#define KERNELS_MAX (1u << 21) /* names kept per connection, at most */
#define SIZES_MAX (1u << 24)   /* parameter sizes kept, at most */
#define SAID_MAX 16            /* kernels whose layouts differ said by name, at most */
enum { EMPTY, KNOWN, AMBIGUOUS };

static struct entry {
    uint64_t hash;
    uint32_t at; /* its sizes in the pool */
    uint16_t count;
    uint8_t state, said;
} *table;
static uint32_t cap, used; /* cap: a power of two */
static uint16_t *pool;
static uint32_t pooled, pool_cap;
static unsigned checked, differ;

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ? h : 1;
}

static struct entry *slot(uint64_t hash)
{
    uint32_t i = (uint32_t)hash & (cap - 1);
    while (table[i].state != EMPTY && table[i].hash != hash)
        i = (i + 1) & (cap - 1);
    return &table[i];
}

static int grow(void)
{
    uint32_t c = cap ? 2 * cap : 1024;
    struct entry *t = calloc(c, sizeof *t), *old = table;
    if (!t)
        return -1;
    uint32_t oc = cap;
    table = t, cap = c;
    for (uint32_t i = 0; i < oc; i++)
        if (old[i].state != EMPTY)
            *slot(old[i].hash) = old[i];
    free(old);
    return 0;
}

static void keep(void *ctx, const char *name, size_t len, unsigned count, const unsigned *offsets,
                 const unsigned *sizes)
{
    (void)ctx, (void)offsets;
    if (used >= KERNELS_MAX || (2 * (used + 1) > cap && grow()))
        return;
    struct entry *e = slot(fnv(name, len));
    if (e->state == AMBIGUOUS)
        return;
    if (e->state == KNOWN) { /* another image's kernel of that name: the same, or no check */
        if (e->count != count)
            e->state = AMBIGUOUS;
        for (unsigned i = 0; e->state == KNOWN && i < count; i++)
            if (pool[e->at + i] != sizes[i])
                e->state = AMBIGUOUS;
        return;
    }
    if (pooled + count > SIZES_MAX)
        return;
    if (pooled + count > pool_cap) {
        uint32_t c = pool_cap ? pool_cap : 4096;
        while (c < pooled + count)
            c *= 2;
        uint16_t *p = realloc(pool, c * sizeof *p);
        if (!p)
            return;
        pool = p, pool_cap = c;
    }
    *e = (struct entry){fnv(name, len), pooled, (uint16_t)count, KNOWN, 0};
    for (unsigned i = 0; i < count; i++)
        pool[pooled++] = (uint16_t)sizes[i];
    used++;
}

/* A kernel of a text (PTX) image: compiled by the driver, its layout
 * unknown here, so its name is not checked (another image's kernel of
 * that name may be the one launched). */
static void unknown(const char *name, size_t len)
{
    if (used >= KERNELS_MAX || (2 * (used + 1) > cap && grow()))
        return;
    struct entry *e = slot(fnv(name, len));
    if (e->state == EMPTY)
        used++;
    *e = (struct entry){fnv(name, len), 0, 0, AMBIGUOUS, 0};
}

static int ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '.'; }

/* The cubins of the request context's device, compressed ones too, at
 * most this much decompressed per connection (each image is read again at
 * each load: the bound keeps a program that loads large ones from paying
 * for it at every load). */
#define INFLATE_MAX (256ull << 20)
static uint64_t inflate_left = INFLATE_MAX;

void fgr_layouts_scan(const void *image, uint64_t n)
{
    CUdevice dev;
    int major = 0, minor = 0;
    if (ctx_device && attribute && ctx_device(&dev) == CUDA_SUCCESS &&
        (attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
         attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS))
        major = minor = 0;
    struct fg_cubin_opts o = {fg_cubin_zstd, &inflate_left, (unsigned)(major * 10 + minor)};
    if (fg_cubin_kernels_opt(image, n, keep, NULL, &o) || n < 4 || !memcmp(image, "\x7f" "ELF", 4))
        return;
    const char *t = image, *end = t + strnlen(t, n);
    for (const char *at = t; (at = memmem(at, (size_t)(end - at), ".entry", 6)); at += 6) {
        const char *q = at + 6;
        while (q < end && (*q == ' ' || *q == '\t'))
            q++;
        const char *b = q;
        while (q < end && ident(*q))
            q++;
        if (q > b && (at == t || !ident(at[-1])))
            unknown(b, (size_t)(q - b));
    }
}

/* Sizes as "8 8 4", the first eight at most. */
static const char *listed(char *b, size_t cap, const unsigned *v, unsigned n)
{
    size_t at = 0;
    b[0] = 0;
    for (unsigned i = 0; i < n && i < 8 && at < cap; i++)
        at += (size_t)snprintf(b + at, cap - at, "%s%u%s", i ? " " : "", v[i], i == 7 && n > 8 ? " ..." : "");
    return b;
}

static const char *listed16(char *b, size_t cap, const uint16_t *v, unsigned n)
{
    unsigned w[8];
    for (unsigned i = 0; i < n && i < 8; i++)
        w[i] = v[i];
    return listed(b, cap, w, n);
}

/* The driver's sizes of kernel f against its cubin's, if one was loaded. */
static void check(void *f, int kernel, unsigned n, const unsigned *sizes, unsigned have)
{
    get_name name_of = kernel ? kernel_name : func_name;
    const char *name = NULL;
    if (!cap || !name_of || name_of(&name, f) != CUDA_SUCCESS || !name)
        return;
    struct entry *e = slot(fnv(name, strlen(name)));
    if (e->state != KNOWN)
        return;
    checked++;
    int same = e->count == n;
    for (unsigned i = 0; same && i < n && i < have; i++)
        same = pool[e->at + i] == sizes[i];
    if (same || e->said)
        return;
    e->said = 1;
    if (differ++ >= SAID_MAX)
        return; /* counted: the names come from the client's images */
    char shown[120];
    size_t k = 0;
    for (; name[k] && k < sizeof shown - 1; k++)
        shown[k] = name[k] > ' ' && name[k] < 127 ? name[k] : '?';
    shown[k] = 0;
    char drv[64], bin[64];
    fgr_logf("kernel %s%s: the driver gives %u parameter(s) (%s), its cubin's EIATTR_KPARAM_INFO %u (%s); "
             "launches go by the driver's%s", shown, name[k] ? "..." : "", n, listed(drv, sizeof drv, sizes, n < have ? n : have),
             (unsigned)e->count, listed16(bin, sizeof bin, pool + e->at, e->count),
             differ == SAID_MAX ? " (further kernels that differ are only counted)" : "");
}

static void said_at_exit(void)
{
    if (checked)
        fgr_logf("parameter layouts of %u kernel(s) checked against their cubins' EIATTR_KPARAM_INFO: %u differ",
                 checked, differ);
}

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
CUresult fgr_func_sizes(CUfunction f, unsigned int max, unsigned int *count, unsigned int *sizes,
                        unsigned long long *sum)
{
    int kernel = f && fgr_has(FGR_H_CUkernel, (uint64_t)(uintptr_t)f);
    CUresult r = sizes_of(kernel ? kernel_info : func_info, f, max, count, sizes);
    if (r == CUDA_SUCCESS && *count <= max) /* the whole answer, asked for once */
        check(f, kernel, *count, sizes, max);
    if (r == CUDA_SUCCESS && sum)
        *sum = fgr_layout_check(*count, sizes, *count < max ? *count : max);
    return r;
}

/* A function's or a library kernel's name, copied for the client (which
 * keeps it where the program can hold it). */
static CUresult name_for_client(CUfunction f, char *name, unsigned int cap)
{
    const char *n = NULL;
    if (!name || !cap)
        return CUDA_ERROR_INVALID_VALUE;
    if (cap > FGR_NAME_MAX)
        cap = FGR_NAME_MAX; /* the room api/remote.api gives it, whatever the client says */
    get_name name_of = f && fgr_has(FGR_H_CUkernel, (uint64_t)(uintptr_t)f) ? kernel_name : func_name;
    CUresult r = name_of ? name_of(&n, f) : CUDA_ERROR_NOT_SUPPORTED;
    if (r != CUDA_SUCCESS)
        return r;
    if (!n || strlen(n) >= cap)
        return CUDA_ERROR_INVALID_VALUE;
    strcpy(name, n);
    return CUDA_SUCCESS;
}

void fgr_layout_init(void *driver)
{
    *(void **)&func_info = dlsym(driver, "cuFuncGetParamInfo");
    *(void **)&kernel_info = dlsym(driver, "cuKernelGetParamInfo");
    *(void **)&func_name = dlsym(driver, "cuFuncGetName");
    *(void **)&kernel_name = dlsym(driver, "cuKernelGetName");
    *(void **)&ctx_device = dlsym(driver, "cuCtxGetDevice");
    *(void **)&attribute = dlsym(driver, "cuDeviceGetAttribute");
    atexit(said_at_exit);
    fgr_real[FGR_OP_fgrParamSizes] = (void *)fgr_func_sizes;
    fgr_real[FGR_OP_fgrFuncName] = (void *)name_for_client;
}
