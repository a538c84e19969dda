/* Uses the CUDA 13 driver's private export tables the way the CUDA runtime
 * and the libraries on it do (docs/EXPORT-TABLES.md), against the remoting
 * client, which emulates them: every table fetched (through
 * cuGetProcAddress_v2, twice, at one address, read-only, with the driver's
 * size word), context-local storage put, read, replaced and deleted across
 * two contexts and several threads with its destructors run when a context
 * is destroyed or the primary context reset, the primary context named
 * without retaining it, tools TLS, context checks and identity, the tools'
 * callback buffers, the integrity check checked as the runtime checks it
 * (recomputed from the public calls' answers), the context object cuBLAS
 * makes and asks about (forwarded), a module's functions handed to a
 * function of the caller's as cuFFT asks for them, and a word the client
 * does not emulate, called twice. Prints one line per table; exit status 0 when
 * every check passed, failures on stderr as "cudartclient: WHAT". */
#include "common.h"
#include "integrity_devices.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define THREADS 6

typedef CUresult (*export_fn)(const void **, const CUuuid *);
typedef CUresult (*ctxid_fn)(CUcontext, unsigned long long *);
typedef void (*dtor_fn)(CUcontext, void *, void *);
typedef CUresult (*put_fn)(CUcontext, void *, void *, dtor_fn);
typedef CUresult (*delete_fn)(CUcontext, void *);
typedef CUresult (*get_fn)(void **, CUcontext, void *);
typedef CUresult (*primary_fn)(CUcontext *, CUdevice);
typedef CUresult (*tools_ctx_fn)(CUcontext *);
typedef void (*buffer_fn)(void **, size_t *);
typedef CUresult (*unwrap_fn)(CUcontext, unsigned int *, CUcontext *);
typedef unsigned int (*flag_fn)(void);
typedef CUresult (*integrity_fn)(unsigned int, uint64_t, uint64_t[2]);
typedef CUresult (*unknown_fn)(void);
typedef CUresult (*object_fn)(CUcontext, uint64_t, void **, uint64_t);
typedef CUresult (*object_query_fn)(CUcontext, void *, uint64_t *, uint64_t);
typedef void (*each_fn)(void *, CUfunction, const char *, uint64_t, uint64_t, CUmodule);
typedef CUresult (*functions_fn)(CUcontext, CUmodule, each_fn, void *, CUmodule, const void *);

/* The census's tables: UUID bytes in memory order, size word (0: none). */
static const struct {
    const char *name;
    unsigned char uuid[16];
    size_t size;
} tables[] = {
    {"cudart", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, 104},
    {"cls", {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, 0},
    {"toolstls", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, 24},
    {"hooks", {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, 56},
    {"ctxchecks", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, 120},
    {"ctx", {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, 744},
    {"t69a2", {0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9}, 272},
    {"log", {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9}, 24},
    {"integrity", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, 24},
    {"toolsmodule", {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}, 792},
};
enum { CUDART, CLS, TOOLSTLS, HOOKS, CTXCHECKS, CTX, T69A2, LOG, INTEGRITY, TOOLSMODULE, NTABLES };
static const void *const *tab[NTABLES];

#define FN(t, i, type) ((type)(uintptr_t)tab[t][i])

static int failures;

static void check(const char *what, long got, long want)
{
    if (got != want) {
        fprintf(stderr, "cudartclient: %s: got %ld, want %ld\n", what, got, want);
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
}

static int readonly(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int ro = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi)
            ro = perms[0] == 'r' && perms[1] == '-';
    }
    if (f)
        fclose(f);
    return ro;
}

/* ---- the tools' module table: a module's functions ---- */

static struct {
    CUfunction f[4];
    char names[4][16];
    int n;
} seen;

static void keep(void *arg, CUfunction f, const char *name, uint64_t a, uint64_t b, CUmodule m)
{
    check("each's argument", arg == &seen, 1);
    check("each's unknown words", (long)(a | b), 0);
    (void)m;
    if (seen.n < 4) {
        seen.f[seen.n] = f;
        snprintf(seen.names[seen.n++], 16, "%s", name ? name : "(none)");
    }
}

/* As cuFFT gets the kernel of a module it loaded: each function handed to
 * a function of the caller's, which keeps it; how many is the answer. The
 * functions are the module's own, which the caller then asks about. */
static void module_functions(void)
{
    static const char image[] = "FLEXGV-SIM-MODULE\nkernel add 5 builtin=add\nkernel fill 5 builtin=fill\n";
    CUcontext ctx;
    CUmodule mod;
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuModuleLoadData(&mod, image));
    functions_fn functions = FN(TOOLSMODULE, 7, functions_fn);
    check("the module's functions", functions(ctx, mod, keep, &seen, mod, tab[TOOLSMODULE]), 2);
    check("the module's functions handed over", seen.n, 2);
    int named = 0;
    for (int i = 0; i < seen.n && i < 2; i++) {
        CUfunction byname;
        check("a function by name", cuModuleGetFunction(&byname, mod, seen.names[i]), CUDA_SUCCESS);
        named += byname == seen.f[i];
        int threads = 0;
        check("a function's attribute", cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, seen.f[i]),
              CUDA_SUCCESS);
        check("a function's threads", threads > 0, 1);
    }
    check("each function is the module's of its name", named, 2);
    check("no function handed over", functions(ctx, mod, NULL, &seen, mod, NULL), CUDA_ERROR_INVALID_VALUE);
    check("the module gone", cuModuleUnload(mod), CUDA_SUCCESS);
    printf("tools module: %s and %s\n", seen.names[0], seen.names[1]);
}

/* ---- context-local storage ---- */

static int key1, key2, thread_keys[THREADS];
static int destroyed[2][THREADS + 2]; /* [context A, B][key]: destructor calls */
static CUcontext ctx_a, ctx_b;

static void dtor(CUcontext ctx, void *key, void *value)
{
    int k = key == &key1 ? THREADS : key == &key2 ? THREADS + 1 : (int)((int *)key - thread_keys);
    check("destructor's value", (long)(intptr_t)value, (long)(intptr_t)key + (ctx == ctx_b));
    __atomic_add_fetch(&destroyed[ctx == ctx_b][k], 1, __ATOMIC_RELAXED);
}

static void *get(CUcontext ctx, void *key, CUresult want)
{
    void *v = NULL;
    check("context-local get", FN(CLS, 2, get_fn)(&v, ctx, key), want);
    return v;
}

static pthread_barrier_t start;

/* Each thread stores a key of its own in both contexts and reads everyone's. */
static void *cls_thread(void *arg)
{
    int t = (int)(intptr_t)arg;
    CUcontext mine = t % 2 ? ctx_b : ctx_a;
    CHECK(cuCtxSetCurrent(mine));
    void *k = &thread_keys[t];
    check("put in the current context", FN(CLS, 0, put_fn)(NULL, k, (char *)k + (mine == ctx_b), dtor),
          CUDA_SUCCESS);
    CUcontext other = mine == ctx_a ? ctx_b : ctx_a;
    check("put in another context", FN(CLS, 0, put_fn)(other, k, (char *)k + (other == ctx_b), dtor), CUDA_SUCCESS);
    pthread_barrier_wait(&start);
    for (int i = 0; i < 1000; i++) {
        int u = i % THREADS;
        check("value in the current context", get(NULL, &thread_keys[u], CUDA_SUCCESS) == (char *)&thread_keys[u] + (mine == ctx_b), 1);
        check("value in context A", get(ctx_a, &key1, CUDA_SUCCESS) == &key1, 1);
    }
    CUcontext c = NULL;
    check("tools TLS: the thread's context", FN(TOOLSTLS, 2, tools_ctx_fn)(&c), CUDA_SUCCESS);
    check("tools TLS: the thread's context", c == mine, 1);
    return NULL;
}

static void *no_context_thread(void *arg)
{
    (void)arg;
    CUcontext c = ctx_a;
    check("tools TLS without a context", FN(TOOLSTLS, 2, tools_ctx_fn)(&c), CUDA_SUCCESS);
    check("tools TLS without a context", c == NULL, 1);
    unsigned int wrapped = 7;
    check("context check without a context", FN(CTXCHECKS, 2, unwrap_fn)(NULL, &wrapped, NULL),
          CUDA_ERROR_INVALID_CONTEXT);
    get(NULL, &key1, CUDA_ERROR_INVALID_CONTEXT);
    return NULL;
}

static void storage(void)
{
    void *k1 = &key1, *k2 = &key2;
    check("put", FN(CLS, 0, put_fn)(ctx_a, k1, k1, dtor), CUDA_SUCCESS);
    check("put", FN(CLS, 0, put_fn)(ctx_b, k1, (char *)k1 + 1, dtor), CUDA_SUCCESS);
    check("put, then replaced", FN(CLS, 0, put_fn)(ctx_a, k2, NULL, NULL), CUDA_SUCCESS);
    check("replace", FN(CLS, 0, put_fn)(ctx_a, k2, k2, dtor), CUDA_SUCCESS);
    check("get A", get(ctx_a, k1, CUDA_SUCCESS) == k1, 1);
    check("get B", get(ctx_b, k1, CUDA_SUCCESS) == (char *)k1 + 1, 1);
    check("get replaced", get(ctx_a, k2, CUDA_SUCCESS) == k2, 1);
    get(ctx_b, k2, CUDA_ERROR_INVALID_HANDLE);
    check("put, then deleted", FN(CLS, 0, put_fn)(ctx_b, k2, (char *)k2 + 1, dtor), CUDA_SUCCESS);
    check("delete", FN(CLS, 1, delete_fn)(ctx_b, k2), CUDA_SUCCESS);
    get(ctx_b, k2, CUDA_ERROR_INVALID_HANDLE);

    pthread_t th[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, cls_thread, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_create(&th[0], NULL, no_context_thread, NULL);
    pthread_join(th[0], NULL);

    /* Destroying B runs B's destructors once each, and no other. */
    CHECK(cuCtxDestroy_v2(ctx_b));
    for (int k = 0; k < THREADS + 2; k++) {
        check("destructor at destroy, B", destroyed[1][k], k == THREADS + 1 ? 0 : 1); /* key2 was deleted */
        check("no destructor at destroy, A", destroyed[0][k], 0);
    }
    /* Resetting the primary context (A) runs A's. */
    CHECK(cuDevicePrimaryCtxReset_v2(0));
    for (int k = 0; k < THREADS + 2; k++)
        check("destructor at reset, A", destroyed[0][k], 1);
    printf("cls: %d threads, destructors at destroy and reset\n", THREADS);
}

/* ---- integrity: the runtime's own computation from the public answers ---- */

static void integrity_expect(unsigned version, uint64_t secs, int ndev, uint64_t out[2])
{
    int dv;
    CHECK(cuDriverGetVersion(&dv));
    struct fgr_integrity_in in = {(uint32_t)dv,
                                  version,
                                  (uint32_t)getpid(),
                                  (uint32_t)pthread_self(),
                                  (uintptr_t)tab[CUDART],
                                  (uintptr_t)tab[INTEGRITY],
                                  (uintptr_t)tab[INTEGRITY][1],
                                  secs};
    struct fgr_integrity_dev devs[16];
    CHECK(fgr_integrity_devices(devs, ndev < 16 ? ndev : 16));
    fgr_integrity(&in, devs, ndev, out);
}

static int ndev;

static void *integrity_thread(void *arg)
{
    uint64_t got[2], want[2];
    check("integrity", FN(INTEGRITY, 1, integrity_fn)(13002, 1764460800, got), CUDA_SUCCESS);
    integrity_expect(13002, 1764460800, ndev, want);
    check("integrity as the runtime computes it, another thread", memcmp(got, want, sizeof got), 0);
    memcpy(arg, got, sizeof got);
    return NULL;
}

static void integrity(void)
{
    unsigned char d[16];
    static const unsigned char abc[16] = {0xda, 0x85, 0x3b, 0x0d, 0x3f, 0x88, 0xd9, 0x9b,
                                          0x30, 0x28, 0x3a, 0x69, 0xe6, 0xde, 0xd6, 0xbb};
    fgr_md2("abc", 3, d);
    check("MD2 of abc (RFC 1319)", memcmp(d, abc, 16), 0);

    CHECK(cuDeviceGetCount(&ndev));
    uint64_t got[2], again[2], want[2], fewer[2], other[2];
    check("integrity", FN(INTEGRITY, 1, integrity_fn)(13002, 1764460800, got), CUDA_SUCCESS);
    integrity_expect(13002, 1764460800, ndev, want);
    check("integrity as the runtime computes it", memcmp(got, want, sizeof got), 0);
    FN(INTEGRITY, 1, integrity_fn)(13002, 1764460800, again);
    check("integrity stable", memcmp(got, again, sizeof got), 0);
    FN(INTEGRITY, 1, integrity_fn)(13002, 1764460801, again);
    check("integrity depends on the time", memcmp(got, again, sizeof got) != 0, 1);
    integrity_expect(13002, 1764460800, ndev - 1, fewer);
    check("integrity depends on every device", memcmp(got, fewer, sizeof got) != 0, 1);
    pthread_t th;
    pthread_create(&th, NULL, integrity_thread, other);
    pthread_join(th, NULL);
    check("integrity depends on the thread", memcmp(got, other, sizeof got) != 0, 1);
    FN(INTEGRITY, 1, integrity_fn)(13000, 1764460800, again);
    check("integrity of a version ending in 0", again[0] == 0x3341181c03cb675cull && again[1] == 0x8ed383aa1f4cd1e8ull,
          1);
    printf("integrity: as recomputed over %d devices\n", ndev);
}

int main(void)
{
    CHECK(cuInit(0));
    export_fn get_table;
    CHECK(cuGetProcAddress_v2("cuGetExportTable", (void **)&get_table, 13000, 0, NULL));
    for (int i = 0; i < NTABLES; i++) {
        const void *t = NULL, *again = NULL;
        check(tables[i].name, get_table(&t, (const CUuuid *)tables[i].uuid), CUDA_SUCCESS);
        check(tables[i].name, get_table(&again, (const CUuuid *)tables[i].uuid), CUDA_SUCCESS);
        if (!t) {
            fprintf(stderr, "cudartclient: no table %s\n", tables[i].name);
            return 1;
        }
        tab[i] = t;
        check("handed out again at one address", t == again, 1);
        check("read-only", readonly(t), 1);
        if (tables[i].size)
            check("size word", (long)(uintptr_t)tab[i][0], (long)tables[i].size);
        printf("table %s: %zu bytes\n", tables[i].name, tables[i].size);
    }

    /* The primary context, named before and after it is retained. */
    CUcontext named = NULL, retained = NULL;
    check("primary context", FN(CUDART, 2, primary_fn)(&named, 0), CUDA_SUCCESS);
    check("primary context of no device", FN(CUDART, 2, primary_fn)(&named, ndev + 99), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDevicePrimaryCtxRetain(&retained, 0));
    check("the primary context named is the one retained", named == retained, 1);
    ctx_a = retained;
    CHECK(cuCtxSetCurrent(ctx_a));
    CHECK(cuCtxCreate_v2(&ctx_b, 0, 0));
    CHECK(cuCtxSetCurrent(ctx_a));

    unsigned int wrapped = 7;
    check("context check", FN(CTXCHECKS, 2, unwrap_fn)(ctx_b, &wrapped, NULL), CUDA_SUCCESS);
    check("context check: not wrapped", wrapped, 0);
    wrapped = 7;
    check("context check, current", FN(CTXCHECKS, 2, unwrap_fn)(NULL, &wrapped, NULL), CUDA_SUCCESS);
    check("context check, current: not wrapped", wrapped, 0);
    check("context flag", FN(CTXCHECKS, 3, flag_fn)(), 0);

    ctxid_fn ctx_get_id;
    CHECK(cuGetProcAddress_v2("cuCtxGetId", (void **)&ctx_get_id, 12000, 0, NULL));
    unsigned long long ida = 0, idb = 0, want = 0;
    check("context id", FN(CTX, 4, ctxid_fn)(NULL, &ida), CUDA_SUCCESS);
    CHECK(ctx_get_id(ctx_a, &want));
    check("context id is cuCtxGetId's", ida == want, 1);
    check("context id again", FN(CTX, 4, ctxid_fn)(ctx_a, &ida), CUDA_SUCCESS);
    check("context id again", ida == want, 1);
    check("context id of B", FN(CTX, 4, ctxid_fn)(ctx_b, &idb), CUDA_SUCCESS);
    check("contexts' ids differ", ida != idb, 1);

    /* What cuBLAS does before its first product: an object for the current
     * context, then a word about it, both forwarded to the server's driver;
     * an object the server never made is refused. */
    void *obj = NULL;
    uint64_t word = 0;
    check("context object", FN(CTX, 51, object_fn)(ctx_a, 0, &obj, 0), CUDA_SUCCESS);
    check("context object made", obj != NULL, 1);
    check("context object's word", FN(CTX, 39, object_query_fn)(ctx_a, obj, &word, 0), CUDA_SUCCESS);
    check("context object's word is the driver's", (long)word, 7);
    word = 0;
    check("a made-up object", FN(CTX, 39, object_query_fn)(ctx_a, (char *)obj + 64, &word, 0), CUDA_ERROR_INVALID_HANDLE);
    check("a made-up object's word", (long)word, 0);
    /* Arguments of unknown use reach the driver as it was seen given them:
     * 0 (the simulated driver refuses anything else), whatever the caller
     * left there. */
    void *other = NULL;
    check("context object, other second and fourth arguments", FN(CTX, 51, object_fn)(ctx_a, 1, &other, 0x5640),
          CUDA_SUCCESS);
    check("context object's word, another fourth argument", FN(CTX, 39, object_query_fn)(ctx_a, obj, &word, 0x5640),
          CUDA_SUCCESS);

    void *buf = NULL;
    size_t size = 0;
    FN(HOOKS, 2, buffer_fn)(&buf, &size);
    check("callback buffer 1", buf != NULL && size == 1024 && ((unsigned char *)buf)[size - 1] == 0, 1);
    FN(HOOKS, 6, buffer_fn)(&buf, &size);
    check("callback buffer 2", buf != NULL && size == 14 && ((unsigned char *)buf)[size - 1] == 0, 1);

    module_functions();
    storage();
    integrity();

    /* A word no known program calls: refused, twice, said once. */
    check("a word not emulated", FN(T69A2, 19, unknown_fn)(), CUDA_ERROR_NOT_SUPPORTED);
    check("a word not emulated, again", FN(T69A2, 19, unknown_fn)(), CUDA_ERROR_NOT_SUPPORTED);
    return failures != 0;
}
