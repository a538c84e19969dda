/* Spends device memory the ways a driver charges beyond what is asked,
 * under a quota; prints what the program sees (results, MiB more in use by
 * cuMemGetInfo), then "ready" and holds everything until stdin closes, so
 * that a test can read the driver's own count (NVML) at the peak.
 *     drvclient blocks BYTES      cuMemAlloc blocks of BYTES until refused
 *     drvclient global MIB...     load a cubin with a MIB MiB __device__
 *                                 global for each MIB; then 10 MiB blocks
 *     drvclient local KIB...      launch a kernel needing KIB KiB of local
 *                                 memory per thread, for each KIB
 *     drvclient limits            pending device launches and the printf FIFO
 *     drvclient devruntime        load a module calling device malloc (which
 *                                 the driver reserves for), then 10 MiB
 *                                 blocks until refused
 *     drvclient faults SEED STEPS [THREADS]
 *                                 STEPS random allocations and releases of
 *                                 every kind in each of THREADS threads
 *                                 (default 1), any of which may fail (the
 *                                 simulated GPU's FLEXGV_SIM_FAIL); then all
 *                                 released: prints the calls that failed and
 *                                 what is left in use over the start
 *     drvclient racer ROUNDS     a thread's block is counted and freed
 *                                 while the driver's count is read, twice a
 *                                 round; prints after how many reads the
 *                                 usage shown was larger than a quiet read
 *                                 shows */
#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#define MiB (1ull << 20)

static size_t used_now(void)
{
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t));
    return t - f;
}

static void hold(void)
{
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0)
        ;
}

/* Allocates blocks of size until refused; prints how many. */
static void blocks(size_t size)
{
    CUdeviceptr p;
    int n = 0;
    while (n < 100000 && cuMemAlloc_v2(&p, size) == CUDA_SUCCESS)
        n++;
    printf("%zu-byte blocks: %d\n", size, n);
}

static void put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* An ELF cubin as nvcc writes one for `__device__ char g[bytes];` and an
 * empty kernel k: the global is an .nv.global section that takes no room
 * in the file. */
static size_t make_cubin(uint8_t *out, uint64_t bytes)
{
    static const char names[] = "\0.shstrtab\0.nv.global\0.nv.info.k";
    const size_t strs = 64, shoff = (strs + sizeof names + 7) & ~7ul;
    memset(out, 0, shoff + 4 * 64);
    memcpy(out, "\177ELF\2\1\1", 7);
    put(out + 0x10, 2, 2);      /* ET_EXEC */
    put(out + 0x12, 190, 2);    /* EM_CUDA */
    put(out + 0x14, 1, 4);
    put(out + 0x28, shoff, 8);
    put(out + 0x34, 64, 2);
    put(out + 0x3a, 64, 2);
    put(out + 0x3c, 4, 2);
    put(out + 0x3e, 1, 2);
    memcpy(out + strs, names, sizeof names);
    static const struct {
        unsigned name, type;
        uint64_t off, size;
    } sh[4] = {{0, 0, 0, 0}, {1, 3, 64, sizeof names}, {11, 8, 0, 0}, {22, 0x70000000, 0, 0}};
    for (int i = 0; i < 4; i++) {
        uint8_t *s = out + shoff + 64 * i;
        put(s, sh[i].name, 4);
        put(s + 4, sh[i].type, 4);
        put(s + 24, sh[i].off, 8);
        put(s + 32, i == 2 ? bytes : sh[i].size, 8);
    }
    return shoff + 4 * 64;
}

static void global(int argc, char **argv)
{
    static uint8_t image[4096];
    for (int i = 2; i < argc; i++) {
        uint64_t mib = strtoull(argv[i], NULL, 10);
        make_cubin(image, mib * MiB);
        CUmodule m;
        size_t before = used_now();
        CUresult r = cuModuleLoadData(&m, image);
        printf("module with a %llu MiB global: %s", (unsigned long long)mib, result_name(r));
        printf(", %lld MiB more in use\n", ((long long)used_now() - (long long)before) / (long long)MiB);
    }
    blocks(10 * MiB);
}

static void local(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        char text[128];
        snprintf(text, sizeof text, "FLEXGV-SIM-MODULE\nkernel heavy 0 local=%d\n", atoi(argv[i]) * 1024);
        CUmodule m;
        CUfunction f;
        CHECK(cuModuleLoadData(&m, text));
        CHECK(cuModuleGetFunction(&f, m, "heavy"));
        size_t before = used_now();
        CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        printf("launch needing %s KiB of local memory: %s", argv[i], result_name(r));
        printf(", %lld MiB more in use\n", ((long long)used_now() - (long long)before) / (long long)MiB);
    }
}

/* One thing faults() holds, of a kind: memory from cuMemAlloc, pitched,
 * managed, stream-ordered or mapped, a module or library with a global, a
 * CUDA array, a graph that allocates (launched once), a context with a
 * launch's local memory. */
enum { F_ALLOC, F_PITCH, F_MANAGED, F_ASYNC, F_MAPPED, F_MODULE, F_LIBRARY, F_ARRAY, F_GRAPH, F_CONTEXT, F_KINDS };
struct held {
    int kind;
    CUdeviceptr p;
    size_t size;
    CUmemGenericAllocationHandle h;
    CUmodule m;
    CUcontext c;
    CUgraph g;
    CUgraphExec x;
    CUlibrary l;
    CUarray a;
};

static unsigned oom, other, calls;
static CUresult first_other;

/* Counts a call's result: out of memory is what a fault gives. */
static int ok(CUresult r)
{
    __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        __atomic_fetch_add(&oom, 1, __ATOMIC_RELAXED);
    else if (r != CUDA_SUCCESS && __atomic_fetch_add(&other, 1, __ATOMIC_RELAXED) == 0)
        first_other = r;
    return r == CUDA_SUCCESS;
}

static __thread uint64_t rng;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int take(struct held *x, int kind, CUstream s)
{
    static uint8_t image[4096];
    *x = (struct held){.kind = kind, .size = (next() % (8 * MiB)) + 1};
    switch (kind) {
    case F_ALLOC:
        return ok(cuMemAlloc_v2(&x->p, x->size));
    case F_PITCH: {
        size_t pitch;
        return ok(cuMemAllocPitch_v2(&x->p, &pitch, 1 + next() % 4096, 1 + next() % 1024, 4));
    }
    case F_MANAGED:
        return ok(cuMemAllocManaged(&x->p, x->size, CU_MEM_ATTACH_GLOBAL));
    case F_ASYNC:
        return ok(cuMemAllocAsync(&x->p, x->size, s));
    case F_MAPPED: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        size_t g;
        CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        x->size = g * (1 + next() % 4);
        if (!ok(cuMemCreate(&x->h, x->size, &prop, 0)))
            return 0;
        if (ok(cuMemAddressReserve(&x->p, x->size, 0, 0, 0))) {
            if (ok(cuMemMap(x->p, x->size, 0, x->h, 0))) {
                CUmemAccessDesc a = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
                if (ok(cuMemSetAccess(x->p, x->size, &a, 1)))
                    return 1;
                CHECK(cuMemUnmap(x->p, x->size));
            }
            CHECK(cuMemAddressFree(x->p, x->size));
        }
        CHECK(cuMemRelease(x->h));
        return 0;
    }
    case F_MODULE:
        make_cubin(image, (1 + next() % 4) * MiB);
        return ok(cuModuleLoadData(&x->m, image));
    case F_LIBRARY:
        make_cubin(image, (1 + next() % 4) * MiB);
        return ok(cuLibraryLoadData(&x->l, image, NULL, NULL, 0, NULL, NULL, 0));
    case F_ARRAY: {
        CUDA_ARRAY3D_DESCRIPTOR d;
        memset(&d, 0, sizeof d);
        d.Width = 1 + next() % 2048;
        d.Height = 1 + next() % 1024;
        d.Depth = next() % 2 ? 0 : 1 + next() % 8;
        d.Format = CU_AD_FORMAT_FLOAT;
        d.NumChannels = 1 + (unsigned)(next() % 2) * 3;
        return ok(cuArray3DCreate_v2(&x->a, &d));
    }
    case F_GRAPH: {
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        memset(&ap, 0, sizeof ap);
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ap.bytesize = x->size;
        CUgraphNode n;
        CHECK(cuGraphCreate(&x->g, 0));
        if (ok(cuGraphAddMemAllocNode(&n, x->g, NULL, 0, &ap)) &&
            ok(cuGraphInstantiateWithFlags(&x->x, x->g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))) {
            x->p = ap.dptr;
            /* Synchronized: remotely a launch is queued, its error comes
             * at the next synchronization. */
            if (ok(cuGraphLaunch(x->x, s)) && ok(cuStreamSynchronize(s)))
                return 1;
            CHECK(cuGraphExecDestroy(x->x));
        }
        CHECK(cuGraphDestroy(x->g));
        return 0;
    }
    default: {
        if (!ok(cuCtxCreate_v2(&x->c, 0, 0)))
            return 0;
        /* In it, a launch that grows the context's local memory (kept
         * until the context goes). */
        char text[96];
        snprintf(text, sizeof text, "FLEXGV-SIM-MODULE\nkernel heavy 0 local=%d\n", (int)(1 + next() % 2) * 1024);
        CUmodule m;
        CUfunction f;
        if (ok(cuModuleLoadData(&m, text))) {
            CHECK(cuModuleGetFunction(&f, m, "heavy"));
            if (ok(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL)))
                ok(cuCtxSynchronize());
        }
        CUcontext top;
        CHECK(cuCtxPopCurrent_v2(&top)); /* made, it was pushed: the primary is current again */
        return 1;
    }
    }
}

static void give(struct held *x, CUstream s)
{
    switch (x->kind) {
    case F_ASYNC:
        CHECK(cuMemFreeAsync(x->p, s));
        break;
    case F_MAPPED:
        CHECK(cuMemUnmap(x->p, x->size));
        CHECK(cuMemAddressFree(x->p, x->size));
        CHECK(cuMemRelease(x->h));
        break;
    case F_MODULE:
        CHECK(cuModuleUnload(x->m));
        break;
    case F_LIBRARY:
        CHECK(cuLibraryUnload(x->l));
        break;
    case F_ARRAY:
        CHECK(cuArrayDestroy(x->a));
        break;
    case F_GRAPH: /* its allocation lives on until freed */
        CHECK(cuMemFreeAsync(x->p, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuGraphExecDestroy(x->x));
        CHECK(cuGraphDestroy(x->g));
        break;
    case F_CONTEXT:
        CHECK(cuCtxDestroy_v2(x->c));
        break;
    default:
        CHECK(cuMemFree_v2(x->p));
    }
}

struct faulter {
    uint64_t seed;
    int steps;
    CUcontext ctx;
};

/* One thread's share: its own stream and things, all released at its end. */
static void *fault_thread(void *arg)
{
    const struct faulter *f = arg;
    CHECK(cuCtxSetCurrent(f->ctx));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    struct held live[64];
    int n = 0;
    rng = f->seed * 0x9e3779b97f4a7c15ull + 7;
    for (int i = 0; i < f->steps; i++) {
        if (n == 64 || (n > 0 && next() % 3 == 0)) {
            int k = (int)(next() % (uint64_t)n);
            give(&live[k], s);
            live[k] = live[--n];
        } else if (take(&live[n], (int)(next() % F_KINDS), s)) {
            n++;
        }
        if (next() % 8 == 0)
            ok(cuStreamSynchronize(s));
    }
    while (n > 0)
        give(&live[--n], s);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamDestroy_v2(s));
    return NULL;
}

static void faults(uint64_t seed, int steps, int threads, CUcontext ctx)
{
    CHECK(cuCtxSynchronize());
    size_t base = used_now();
    pthread_t t[16];
    struct faulter f[16];
    threads = threads < 1 ? 1 : threads > 16 ? 16 : threads;
    for (int i = 0; i < threads; i++) {
        f[i] = (struct faulter){seed + (uint64_t)i * 1000003, steps, ctx};
        if (pthread_create(&t[i], NULL, fault_thread, &f[i]))
            exit(1);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    CHECK(cuDeviceGraphMemTrim(0)); /* graphs' memory the driver keeps for their next launches */
    /* Under a quota the tenant's usage includes what the driver's own count
     * last showed beyond the charges, read at allocations; a read while
     * other threads were mid-call keeps the lower figure, which may be
     * less than the quiet process shows. An allocation after the reads'
     * interval reads it again. */
    usleep(200 * 1000);
    CUdeviceptr one;
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < 100 && r == CUDA_ERROR_OUT_OF_MEMORY; i++) /* faults may refuse it too */
        r = cuMemAlloc_v2(&one, 1);
    CHECK(r);
    CHECK(cuMemFree_v2(one));
    size_t left = used_now() - base;
    printf("calls %u, out of memory %u, other errors %u (first %s); left in use %zu bytes; in use %llu MiB\n", calls,
           oom, other, other ? result_name(first_other) : "none", left, (unsigned long long)(used_now() / MiB));
}

/* ---- racer: the driver's count read while another thread frees ---- */

enum { IDLE, TAKE, TAKEN, GIVE, BRIEF, GIVEN, QUIT };
struct holder {
    CUcontext ctx;
    int state;
};

/* Told to: takes a 32 MiB block; gives it back 7 ms later; or takes one 2
 * ms later and gives it back 5 ms after that. With NVML answering 10 ms
 * late (the count taken 5 ms in), the block is counted and gone before
 * the answer. */
static void *take_give(void *arg)
{
    struct holder *h = arg;
    CHECK(cuCtxSetCurrent(h->ctx));
    CUdeviceptr p = 0;
    for (;;) {
        int s = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
        if (s == QUIT)
            return NULL;
        if (s == TAKE) {
            CHECK(cuMemAlloc_v2(&p, 32 * MiB));
            __atomic_store_n(&h->state, TAKEN, __ATOMIC_RELEASE);
        } else if (s == GIVE || s == BRIEF) {
            if (s == BRIEF) {
                usleep(2000);
                CHECK(cuMemAlloc_v2(&p, 32 * MiB));
            }
            usleep(s == BRIEF ? 5000 : 7000);
            CHECK(cuMemFree_v2(p));
            __atomic_store_n(&h->state, GIVEN, __ATOMIC_RELEASE);
        } else {
            usleep(100);
        }
    }
}

static void await(struct holder *h, int state)
{
    while (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != state)
        usleep(100);
}

/* A 1-byte allocation: the shim reads the driver's count on it, once the
 * reads' 100 ms interval has passed. */
static void alloc_one(void)
{
    CUdeviceptr one;
    CHECK(cuMemAlloc_v2(&one, 1));
    CHECK(cuMemFree_v2(one));
}

/* Each round, twice, the shim reads the driver's count while another
 * thread's block is counted and freed before the read is done (the
 * simulated GPU's NVML answering late: FLEXGV_SIM_NVML_LAG_US): a block
 * held before the read, and one taken during it. What is then shown in use
 * is compared with what a read of the quiet process shows: a count taken
 * mid-call must not make the process look larger than it is. */
static void racer(int rounds, CUcontext ctx)
{
    struct holder h = {ctx, IDLE};
    pthread_t t;
    if (pthread_create(&t, NULL, take_give, &h))
        exit(1);
    int over = 0;
    size_t most = 0;
    for (int r = 0; r < 2 * rounds; r++) {
        int brief = r % 2;
        if (!brief) {
            __atomic_store_n(&h.state, TAKE, __ATOMIC_RELEASE);
            await(&h, TAKEN);
        }
        usleep(120 * 1000);
        __atomic_store_n(&h.state, brief ? BRIEF : GIVE, __ATOMIC_RELEASE);
        alloc_one(); /* the read, while the other thread's block comes and goes */
        await(&h, GIVEN);
        size_t busy = used_now();
        usleep(120 * 1000);
        alloc_one(); /* a quiet read */
        size_t quiet = used_now();
        if (busy > quiet) {
            over++;
            most = busy - quiet > most ? busy - quiet : most;
        }
    }
    __atomic_store_n(&h.state, QUIT, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("reads %d, shown larger than quiet %d (by up to %zu MiB)\n", 2 * rounds, over, most / (size_t)MiB);
}

static void limit(const char *what, CUlimit l, size_t v)
{
    size_t before = used_now();
    CUresult r = cuCtxSetLimit(l, v);
    printf("%s %zu: %s", what, v, result_name(r));
    printf(", %lld MiB more in use\n", ((long long)used_now() - (long long)before) / (long long)MiB);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    CUcontext ctx;
    CHECK(cuInit(0));
    /* Faults may refuse the context's own memory: tried until it is made. */
    CUresult r;
    for (int i = 0; (r = cuDevicePrimaryCtxRetain(&ctx, 0)) == CUDA_ERROR_OUT_OF_MEMORY && i < 100; i++)
        ;
    CHECK(r);
    CHECK(cuCtxSetCurrent(ctx));
    if (!strcmp(mode, "blocks") && argc > 2) {
        blocks((size_t)strtoull(argv[2], NULL, 10));
    } else if (!strcmp(mode, "global")) {
        global(argc, argv);
    } else if (!strcmp(mode, "local")) {
        local(argc, argv);
    } else if (!strcmp(mode, "limits")) {
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 1u << 20);
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 65536);
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 2048);
        limit("pending launches", CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, 65536);
        limit("printf FIFO", CU_LIMIT_PRINTF_FIFO_SIZE, 64 * MiB);
        blocks(10 * MiB);
    } else if (!strcmp(mode, "faults") && argc > 3) {
        faults(strtoull(argv[2], NULL, 10), atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 1, ctx);
    } else if (!strcmp(mode, "racer") && argc > 2) {
        racer(atoi(argv[2]), ctx);
    } else if (!strcmp(mode, "devruntime")) {
        static const char text[] = "FLEXGV-SIM-MODULE\nkernel allocating 0 devruntime\n";
        CUmodule m;
        CHECK(cuModuleLoadData(&m, text));
        blocks(10 * MiB);
    } else {
        fprintf(stderr, "usage: drvclient blocks BYTES | global MIB... | local KIB... | limits | devruntime | faults SEED STEPS [THREADS] | racer ROUNDS\n");
        return 2;
    }
    hold();
    return 0;
}
