/* cuGetExportTable: the private tables hold function pointers into the
 * calling process, so none can be forwarded as such. The client answers
 * the tables api/remote.api describes with words of its own (functions
 * that answer locally or forward, copies of data), filling each once per
 * process; any other table is refused, and said. Below are the functions
 * of the words answered locally: what each does is in docs/REMOTE-DESIGN.md
 * ("The private tables, slot by slot"). */
#include "client.h"
#include "integrity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static pthread_mutex_t fetch_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char fetched[64];

/* Tables whose callers do as well without them, refused quietly (said
 * with FLEXGV_REMOTE_LOG=errors): NVRTC's own, da9151d3-..., with which it
 * compiles the same (docs/EXPORT-TABLES.md). */
static const unsigned char quiet_tables[][16] = {
    {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
};

static int quiet(const CUuuid *id)
{
    for (size_t i = 0; i < sizeof quiet_tables / sizeof quiet_tables[0]; i++)
        if (memcmp(quiet_tables[i], id->bytes, 16) == 0)
            return !fgr_log_errors();
    return 0;
}

FGR_EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < fgr_ntables && i < 64; i++) {
        if (memcmp(&fgr_tables[i].uuid, pExportTableId, sizeof(CUuuid)) != 0)
            continue;
        CUresult r = CUDA_SUCCESS;
        if (!__atomic_load_n(&fetched[i], __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(&fetch_lock);
            if (!fetched[i] && (r = fgr_tables[i].fetch()) == CUDA_SUCCESS) {
                /* Read-only from now on, as the driver's tables are. */
                mprotect(fgr_tables[i].words, fgr_tables[i].bytes, PROT_READ);
                __atomic_store_n(&fetched[i], 1, __ATOMIC_RELEASE);
            }
            pthread_mutex_unlock(&fetch_lock);
        }
        if (r == CUDA_SUCCESS)
            *ppExportTable = fgr_tables[i].words;
        return r;
    }
    static int said;
    if (!quiet(pExportTableId) && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        const unsigned char *b = (const unsigned char *)pExportTableId->bytes;
        fprintf(stderr,
                "flexgv remote: cuGetExportTable: table %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x is "
                "not emulated by the remoting client (CUDA_ERROR_NOT_SUPPORTED; later ones are not said)\n",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult fgr_xt_unsupported(int k, const char *table, int word)
{
    if (!__atomic_exchange_n(&fgr_xt_said[k], 1, __ATOMIC_RELAXED))
        fprintf(stderr,
                "flexgv remote: export table %s: word %d is not emulated by the remoting client "
                "(CUDA_ERROR_NOT_SUPPORTED)\n",
                table, word);
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUcontext or_current(CUcontext ctx) { return ctx ? ctx : fgr_current(); }

/* ---- context-local storage: per (context, key), destructors at the end ---- */

struct cls {
    CUcontext ctx;
    void *key, *value;
    void (*dtor)(CUcontext, void *, void *);
    struct cls *next;
};
static struct cls *cls_head;
/* get is the one hot word of all the tables (thousands of calls a run). */
static pthread_rwlock_t cls_lock = PTHREAD_RWLOCK_INITIALIZER;

static struct cls **cls_find(CUcontext ctx, void *key)
{
    struct cls **p = &cls_head;
    while (*p && ((*p)->ctx != ctx || (*p)->key != key))
        p = &(*p)->next;
    return p;
}

CUresult fgr_xt_cls_put(CUcontext ctx, void *key, void *value, void (*dtor)(CUcontext, void *, void *))
{
    if (!(ctx = or_current(ctx)))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_rwlock_wrlock(&cls_lock);
    struct cls *e = *cls_find(ctx, key);
    if (!e && (e = calloc(1, sizeof *e))) {
        *e = (struct cls){ctx, key, NULL, NULL, cls_head};
        cls_head = e;
    }
    if (e) {
        e->value = value;
        e->dtor = dtor;
    }
    pthread_rwlock_unlock(&cls_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fgr_xt_cls_delete(CUcontext ctx, void *key)
{
    if (!(ctx = or_current(ctx)))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_rwlock_wrlock(&cls_lock);
    struct cls **p = cls_find(ctx, key), *e = *p;
    if (e)
        *p = e->next;
    pthread_rwlock_unlock(&cls_lock);
    free(e);
    return CUDA_SUCCESS;
}

CUresult fgr_xt_cls_get(void **value, CUcontext ctx, void *key)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(ctx = or_current(ctx)))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_rwlock_rdlock(&cls_lock);
    struct cls *e = *cls_find(ctx, key);
    if (e)
        *value = e->value;
    pthread_rwlock_unlock(&cls_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- what the client caches per context and per device ---- */

#define IDS 64
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    unsigned long long id;
} ids[IDS];
static unsigned ids_next;
#define PRIMARY_MAX 64
static CUcontext primary[PRIMARY_MAX];

void fgr_ctx_gone(CUcontext ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < IDS; i++)
        if (ids[i].ctx == ctx)
            ids[i].ctx = NULL;
    pthread_mutex_unlock(&cache_lock);
    /* Unlinked under the lock, destroyed outside it: a destructor may call
     * the tables again. */
    struct cls *gone = NULL;
    pthread_rwlock_wrlock(&cls_lock);
    for (struct cls **p = &cls_head; *p;) {
        struct cls *e = *p;
        if (e->ctx == ctx) {
            *p = e->next;
            e->next = gone;
            gone = e;
        } else {
            p = &e->next;
        }
    }
    pthread_rwlock_unlock(&cls_lock);
    while (gone) {
        struct cls *e = gone;
        gone = e->next;
        if (e->dtor)
            e->dtor(ctx, e->key, e->value);
        free(e);
    }
}

void fgr_primary_seen(CUdevice dev, CUcontext ctx)
{
    if (dev >= 0 && dev < PRIMARY_MAX)
        __atomic_store_n(&primary[dev], ctx, __ATOMIC_RELEASE);
}

void fgr_primary_gone(CUdevice dev)
{
    if (dev < 0 || dev >= PRIMARY_MAX)
        return;
    CUcontext ctx = __atomic_exchange_n(&primary[dev], NULL, __ATOMIC_ACQ_REL);
    fgr_ctx_gone(ctx);
    fgr_arena_ctx_gone(ctx);
    fgr_ctx_unstack(ctx);
}

/* ---- CUDART_INTERFACE ---- */

/* The primary context's handle, which the runtime asks for before it
 * retains the context. The client can only learn it by a retain; it keeps
 * that reference, so that the handle stays the one the runtime's retain
 * will get (a driver may make a new one after the last release). */
CUresult fgr_xt_primary_ctx(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= fgr_srv.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    CUcontext c = dev < PRIMARY_MAX ? __atomic_load_n(&primary[dev], __ATOMIC_ACQUIRE) : NULL;
    if (!c) {
        CUresult r = cuDevicePrimaryCtxRetain(&c, dev);
        if (r != CUDA_SUCCESS)
            return r;
    }
    *pctx = c;
    return CUDA_SUCCESS;
}

/* ---- tools: none is attached to a remote program ---- */

CUresult fgr_xt_tools_ctx(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = fgr_current();
    return CUDA_SUCCESS;
}

/* Zeroed buffers the runtime reads its tools' callback switches from; all
 * off. Larger than the sizes said, whatever their unit. */
static uint64_t hooks1[1024], hooks2[16];

void fgr_xt_hooks_buffer1(void **buf, size_t *size)
{
    *buf = hooks1;
    *size = 1024;
}

void fgr_xt_hooks_buffer2(void **buf, size_t *size)
{
    *buf = hooks2;
    *size = 14;
}

/* ---- context checks and identity ---- */

/* No context of the client's is a wrapper of another. */
CUresult fgr_xt_ctx_unwrap(CUcontext ctx, unsigned int *wrapped, CUcontext *inner)
{
    (void)inner;
    if (!or_current(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (wrapped)
        *wrapped = 0;
    return CUDA_SUCCESS;
}

unsigned int fgr_xt_ctx_flag(void) { return 0; }

/* cuCtxGetId, asked once per context: libraries ask it at every call. */
CUresult fgr_xt_ctx_id(CUcontext ctx, unsigned long long *id)
{
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(ctx = or_current(ctx)))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < IDS; i++) {
        if (ids[i].ctx == ctx) {
            *id = ids[i].id;
            pthread_mutex_unlock(&cache_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    unsigned long long v;
    CUresult r = cuCtxGetId(ctx, &v);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&cache_lock);
    unsigned k = ids_next++ % IDS;
    ids[k].ctx = ctx;
    ids[k].id = v;
    pthread_mutex_unlock(&cache_lock);
    *id = v;
    return CUDA_SUCCESS;
}

/* A library's message for the driver's log, which is off unless asked for
 * (CUDA_LOG_FILE on the server's side): dropped. */
void fgr_xt_log(const char *domain, int severity, const char *format, va_list args)
{
    (void)domain, (void)severity, (void)format, (void)args;
}

/* ---- integrity: what the runtime computes from the public answers ---- */

CUresult fgr_xt_integrity(unsigned int version, uint64_t unix_seconds, uint64_t result[2])
{
    if (!result)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fgr_initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    const void **it = fgr_tables[FGR_XT_integrity].words;
    struct fgr_integrity_in in = {
        .driver_version = (uint32_t)fgr_srv.driver_version,
        .version = version,
        .pid = (uint32_t)getpid(),
        .thread = (uint32_t)pthread_self(),
        .cudart_table = (uintptr_t)fgr_tables[FGR_XT_cudart].words,
        .integrity_table = (uintptr_t)it,
        .fn = (uintptr_t)it[1],
        .unix_seconds = unix_seconds,
    };
    struct fgr_integrity_dev *devs = calloc(fgr_srv.ndev ? fgr_srv.ndev : 1, sizeof *devs);
    if (!devs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < fgr_srv.ndev; i++) {
        const struct fgr_device *d = &fgr_srv.dev[i];
        memcpy(devs[i].uuid, d->uuid.bytes, 16);
        devs[i].pci_domain = d->attr[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID];
        devs[i].pci_bus = d->attr[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID];
        devs[i].pci_device = d->attr[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID];
    }
    fgr_integrity(&in, devs, fgr_srv.ndev, result);
    free(devs);
    return CUDA_SUCCESS;
}

/* ---- tools module: a module's functions, for cuFFT's plans ---- */

/* Each function of mod handed to each (with its name), as the driver does
 * for cuFFT, whose each keeps the function it is given; the answer is how
 * many (the driver answers 1 for a module of one function). The functions
 * are the public calls' (cuModuleEnumerateFunctions), so a library uses
 * them as any other. */
CUresult fgr_xt_module_functions(CUcontext ctx, CUmodule mod,
                                 void (*each)(void *, CUfunction, const char *, uint64_t, uint64_t, CUmodule), void *arg,
                                 CUmodule again, const void *caller)
{
    (void)ctx, (void)again, (void)caller;
    unsigned n = 0;
    CUresult r = each ? cuModuleGetFunctionCount(&n, mod) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS || !n)
        return r;
    CUfunction *f = calloc(n, sizeof *f);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = cuModuleEnumerateFunctions(f, n, mod)) == CUDA_SUCCESS)
        for (unsigned i = 0; i < n; i++) {
            const char *name = NULL;
            cuFuncGetName(&name, f[i]);
            each(arg, f[i], name, 0, 0, mod);
        }
    free(f);
    return r == CUDA_SUCCESS ? (CUresult)n : r;
}
