/* A program that keeps changing device memory and checking it, to be moved
 * between servers while it runs (flexgv migrate):
 *     mover STEPS [HOLD_AT[,HOLD_AT...] READY GO [busy][,grow][,pool][,hostfn][,many][,churn][,captured[1]][,memnodes][,managed][,texture][,queuederr]]
 * Each step adds the step's number to every word of a buffer and of a
 * module variable (a kernel launched on a stream), and to another buffer
 * twice the last odd step's (an explicit graph's kernel node, in a child
 * graph moved into its node, its executable's parameters changed at odd
 * steps), fills mapped pinned
 * memory, uploads a region of its own (from pinned memory at odd steps,
 * from pageable memory at even ones, each buffer filled again at its next
 * step: what a failover makes again must be what each upload took then),
 * records an event after them, makes and ends two graphs, and checks every
 * word against what it must be by now. With HOLD_AT, before that
 * step it creates the file READY and waits for GO (the test moves it
 * meanwhile), then removes both for the next hold; "busy" asks a stream
 * about its work while it waits, so that a move in two steps ends then;
 * "grow" makes an event before each question and destroys it after;
 * "pool" asks which pool a stream-ordered allocation came from (the
 * device's default one, never asked for), then makes a pool of its own the
 * device's current one, each step allocating from it (cuMemAllocAsync, the
 * step before's freed) and checking that it is still current, its
 * threshold kept and the step's allocation in it; "hostfn" enqueues a host function and launches a graph of a host node
 * each step, and checks that each ran once a step; "many" makes MANY small
 * allocations more, each filled with its own value and checked each step
 * (a state of many device ranges); "churn" makes a buffer first and 64 MiB
 * more, and while held adds 1 to each word of the first every millisecond
 * (a kernel), checking both at each step (not in the sums printed);
 * "captured" makes a graph by stream capture (two streams forked and
 * joined through events: a kernel adding 1 and a memset on one, a kernel
 * adding 2 and a host function on the other, a memset on a third made and
 * destroyed during the capture), launched each step, whose
 * buffers and host function count are checked at each step; "captured1"
 * the same, the graph destroyed once instantiated (each with SIDES
 * captures of a memset open beside the first, their graphs launched each
 * step); "memnodes" launches
 * each step a graph that allocates memory (an allocation node, placed by
 * the driver), sets it, copies it into a buffer checked at each step and
 * frees it; "managed" has a kernel fill managed memory each step, read on
 * the host; "texture" asks after a texture object over device memory
 * each step; "queuederr" launches a kernel of too many threads each step
 * and prints the error, which remotely its next syncpoint gets. It prints each check's sum, so a moved run's output equals an
 * unmoved one's.
 */
#include "common.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* Not in the hooked table (api/cuda.api): declared here. */
CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams);

enum { WORDS = 1 << 18 }; /* 1 MiB each: more than one piece of a move */
enum { UPW = 1 << 14 };   /* an upload's words, 64 KiB: over shm://, through the staging area */
enum { MANY = 400, MANYW = 1024 };
enum { SIDES = 12 };      /* side captures open at once in "captured" */

static const char MODULE[] = "FLEXGV-SIM-MODULE\n"
                             "kernel add 5 builtin=add\n"
                             "kernel fill 5 builtin=fill\n"
                             "global counter 4096 0\n";

/* Whether each of the n words at p is want (else said), their sum added
 * to *sum; host holds them. */
static int words_are(int step, const char *what, CUdeviceptr p, unsigned n, unsigned want, unsigned *host, uint64_t *sum)
{
    CHECK(cuMemcpyDtoH_v2(host, p, (size_t)n * 4));
    for (unsigned i = 0; i < n; i++) {
        if (host[i] != want) {
            printf("step %d: %s[%u] is %u, want %u\n", step, what, i, host[i], want);
            return 0;
        }
        *sum += host[i];
    }
    return 1;
}

static void tick(void *p) { (*(unsigned *)p)++; }

/* A buffer kernels change while the mover is held, and how often they did. */
static struct {
    CUfunction add;
    CUdeviceptr p;
    unsigned n, times;
} churn;

/* Waits for the file at path, asking s about its work meanwhile if busy,
 * an event made and destroyed around each question if grow, adding 1 to
 * the churned buffer before each if there is one. */
static void wait_for(const char *path, int busy, int grow, CUstream s)
{
    struct stat st;
    while (stat(path, &st) != 0) {
        if (churn.p) {
            unsigned one = 1;
            void *pc[] = {&churn.p, &one, &churn.n};
            CHECK(cuLaunchKernel(churn.add, 1, 1, 1, 256, 1, 1, 0, s, pc, NULL));
            churn.times++;
        }
        CUevent ev = NULL;
        if (grow) /* between any two questions, what a move makes again changes */
            CHECK(cuEventCreate(&ev, 0));
        if (busy && cuStreamQuery(s) != CUDA_SUCCESS) {
            printf("the stream's work failed while held\n");
            exit(1);
        }
        if (grow)
            CHECK(cuEventDestroy_v2(ev));
        usleep(churn.p ? 1000 : 10000);
    }
}

/* Whether step is one of the comma-separated list. */
static int held_at(const char *list, int step)
{
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (atoi(p) == step)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 8;
    const char *holds = argc > 4 ? argv[2] : NULL;
    int busy = argc > 5 && strstr(argv[5], "busy"), pooled = argc > 5 && strstr(argv[5], "pool");
    int grow = argc > 5 && strstr(argv[5], "grow");
    int hostfn = argc > 5 && strstr(argv[5], "hostfn");
    int many = argc > 5 && strstr(argv[5], "many");
    int churned = argc > 5 && strstr(argv[5], "churn");
    int captured = argc > 5 && strstr(argv[5], "captured"), capfree = argc > 5 && strstr(argv[5], "captured1");
    int memnodes = argc > 5 && strstr(argv[5], "memnodes");
    int managed = argc > 5 && strstr(argv[5], "managed");
    int textured = argc > 5 && strstr(argv[5], "texture");
    int qerr = argc > 5 && strstr(argv[5], "queuederr");
    CUcontext ctx = primary_context();
    /* A module and function made and gone first: what moves is named as
     * its executor named it, not as a new one would. */
    CUmodule gone;
    CUfunction gonefn;
    CHECK(cuModuleLoadData(&gone, MODULE));
    CHECK(cuModuleGetFunction(&gonefn, gone, "fill"));
    CHECK(cuModuleUnload(gone));
    CUmodule mod;
    CUfunction add, fill;
    CHECK(cuModuleLoadData(&mod, MODULE));
    CHECK(cuModuleGetFunction(&add, mod, "add"));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuFuncSetAttribute(add, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
    /* A module variable: the driver places it, another one elsewhere. */
    CUdeviceptr counter;
    size_t counter_bytes;
    unsigned cwords = 1024;
    CHECK(cuModuleGetGlobal_v2(&counter, &counter_bytes, mod, "counter"));
    /* The churned buffer first (read first when copied ahead), the
     * ballast after. */
    enum { CHURNW = 1 << 18, BIGW = 1 << 24 };
    CUdeviceptr big = 0;
    if (churned) {
        CHECK(cuMemAlloc_v2(&churn.p, CHURNW * 4));
        CHECK(cuMemsetD32_v2(churn.p, 0, CHURNW));
        CHECK(cuMemAlloc_v2(&big, BIGW * 4));
        CHECK(cuMemsetD32_v2(big, 7, BIGW));
        churn.add = add;
        churn.n = CHURNW;
    }
    CUstream s;
    CUevent ev;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    CUdeviceptr a, b, scratch;
    CHECK(cuMemAlloc_v2(&a, WORDS * 4));
    CHECK(cuMemAlloc_v2(&b, WORDS * 4));
    CHECK(cuMemAlloc_v2(&scratch, 4096));
    unsigned zero = 0, n = WORDS;
    void *fa[] = {&a, &zero, &n}, *fb[] = {&b, &zero, &n};
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, fa, NULL));
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, fb, NULL));
    CHECK(cuMemFree_v2(scratch)); /* freed: not part of what moves */

    /* The graph: one kernel node adding `inc` to b, in a child graph moved
     * into its node (as XLA's command buffers nest theirs); inc is set per
     * step through the executable's copy of the child's node. */
    unsigned inc = 0;
    void *gp[] = {&b, &inc, &n};
    CUgraph g;
    CUgraphNode node;
    CUgraphExec ge;
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = add;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 256;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = gp;
    CUgraph inner;
    CUgraphNode child;
    CUgraphNodeParams moved;
    CHECK(cuGraphCreate(&inner, 0));
    CHECK(cuGraphAddKernelNode_v2(&node, inner, NULL, 0, &kp));
    CHECK(cuGraphCreate(&g, 0));
    memset(&moved, 0, sizeof moved);
    moved.type = CU_GRAPH_NODE_TYPE_GRAPH;
    moved.graph.graph = inner;
    moved.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    CHECK(cuGraphAddNode(&child, g, NULL, 0, &moved));
    CHECK(cuGraphInstantiateWithFlags(&ge, g, 0));

    /* Mapped pinned memory a kernel writes each step. */
    unsigned *mapped;
    CUdeviceptr mapped_d;
    unsigned mwords = 1024;
    CHECK(cuMemHostAlloc((void **)&mapped, mwords * 4, CU_MEMHOSTALLOC_DEVICEMAP));
    CHECK(cuMemHostGetDevicePointer_v2(&mapped_d, mapped, 0));

    /* Where scratch was, in memory still mapped: what moves must make
     * that mapping again without scratch. */
    CUdeviceptr up;
    unsigned *pinned, *pageable = malloc(UPW * 4);
    CHECK(cuMemAlloc_v2(&up, (size_t)(steps > 0 ? steps : 1) * UPW * 4));
    CHECK(cuMemAllocHost_v2((void **)&pinned, UPW * 4));

    CUmemoryPool pool = NULL;
    CUdeviceptr from_pool = 0;
    unsigned pwords = 4096;
    cuuint64_t threshold = 3u << 20;
    if (pooled) {
        /* The device's default pool, named only by a pointer attribute of
         * memory from it: a move makes that name again. */
        CUdeviceptr first;
        CUmemoryPool of = NULL;
        CHECK(cuMemAllocAsync(&first, 256, s));
        CHECK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, first));
        CHECK(cuMemFreeAsync(first, s));
        CHECK(cuStreamSynchronize(s));
        CUmemPoolProps pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CHECK(cuMemPoolCreate(&pool, &pp));
        CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
        CHECK(cuDeviceSetMemPool(0, pool));
    }

    static unsigned fn_calls, node_calls;
    CUgraph hg;
    CUgraphExec hge = NULL;
    if (hostfn) {
        CUgraphNode hn;
        CUDA_HOST_NODE_PARAMS hp = {tick, &node_calls};
        CHECK(cuGraphCreate(&hg, 0));
        CHECK(cuGraphAddHostNode(&hn, hg, NULL, 0, &hp));
        CHECK(cuGraphInstantiateWithFlags(&hge, hg, 0));
    }

    /* A graph made by stream capture, forked to a second stream and joined
     * back. */
    static unsigned cap_calls;
    CUdeviceptr c1 = 0, c2 = 0, cset = 0, c3 = 0;
    CUgraphExec cge = NULL, sge[SIDES];
    CUdeviceptr sides = 0;
    if (captured) {
        CUstream cs, cs2;
        CUevent fork, join;
        CUgraph cg;
        unsigned one = 1, two = 2, cz = 0;
        CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
        CHECK(cuStreamCreate(&cs2, CU_STREAM_NON_BLOCKING));
        CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
        CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
        CHECK(cuMemAlloc_v2(&c1, WORDS * 4));
        CHECK(cuMemAlloc_v2(&c2, WORDS * 4));
        CHECK(cuMemAlloc_v2(&cset, 4096 * 4));
        CHECK(cuMemAlloc_v2(&c3, 4096 * 4));
        void *z1[] = {&c1, &cz, &n}, *z2[] = {&c2, &cz, &n};
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, z1, NULL));
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, z2, NULL));
        CHECK(cuStreamSynchronize(s));
        void *p1[] = {&c1, &one, &n}, *p2[] = {&c2, &two, &n};
        /* Side captures open around it, more than a few at once: a memset
         * of its own word each, their graphs launched each step. */
        CUstream ss[SIDES];
        CUgraph sg[SIDES];
        CHECK(cuMemAlloc_v2(&sides, SIDES * 4));
        CHECK(cuMemsetD32_v2(sides, 0, SIDES));
        for (unsigned k = 0; k < SIDES; k++) {
            CHECK(cuStreamCreate(&ss[k], CU_STREAM_NON_BLOCKING));
            CHECK(cuStreamBeginCapture_v2(ss[k], CU_STREAM_CAPTURE_MODE_RELAXED));
            CHECK(cuMemsetD32Async(sides + 4 * k, 0x51de0000u + k, 1, ss[k]));
        }
        CHECK(cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, cs, p1, NULL));
        CHECK(cuEventRecord(fork, cs));
        CHECK(cuStreamWaitEvent(cs2, fork, 0));
        /* A stream made during the capture, joined back and destroyed
         * before it ends, as CUDA's graph memory nodes sample does. */
        CUstream cs3;
        CUevent j3;
        CHECK(cuStreamCreate(&cs3, CU_STREAM_NON_BLOCKING));
        CHECK(cuEventCreate(&j3, CU_EVENT_DISABLE_TIMING));
        CHECK(cuStreamWaitEvent(cs3, fork, 0));
        CHECK(cuMemsetD32Async(c3, 0x3333, 4096, cs3));
        CHECK(cuEventRecord(j3, cs3));
        CHECK(cuStreamWaitEvent(cs, j3, 0));
        CHECK(cuStreamDestroy_v2(cs3));
        CHECK(cuEventDestroy_v2(j3));
        CHECK(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, cs2, p2, NULL));
        CHECK(cuLaunchHostFunc(cs2, tick, &cap_calls));
        CHECK(cuEventRecord(join, cs2));
        CHECK(cuMemsetD32Async(cset, 0x5eed, 4096, cs));
        CHECK(cuStreamWaitEvent(cs, join, 0));
        CHECK(cuStreamEndCapture(cs, &cg));
        CHECK(cuGraphInstantiateWithFlags(&cge, cg, 0));
        if (capfree)
            CHECK(cuGraphDestroy(cg));
        for (unsigned k = 0; k < SIDES; k++) {
            CHECK(cuStreamEndCapture(ss[k], &sg[k]));
            CHECK(cuGraphInstantiateWithFlags(&sge[k], sg[k], 0));
        }
    }

    /* A graph of its own memory: allocated, set, copied out, freed. */
    CUdeviceptr mout = 0;
    CUgraphExec mge = NULL;
    enum { MNW = 4096 };
    if (memnodes) {
        CUgraph mg;
        CUgraphNode an, sn, cn, fn;
        CHECK(cuMemAlloc_v2(&mout, MNW * 4));
        CHECK(cuGraphCreate(&mg, 0));
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        memset(&ap, 0, sizeof ap);
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ap.bytesize = MNW * 4;
        CHECK(cuGraphAddMemAllocNode(&an, mg, NULL, 0, &ap));
        CUDA_MEMSET_NODE_PARAMS sp;
        memset(&sp, 0, sizeof sp);
        sp.dst = ap.dptr;
        sp.value = 0x77777777u;
        sp.elementSize = 4;
        sp.width = MNW;
        sp.height = 1;
        CHECK(cuGraphAddMemsetNode(&sn, mg, &an, 1, &sp, ctx));
        CUDA_MEMCPY3D cp;
        memset(&cp, 0, sizeof cp);
        cp.srcMemoryType = cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        cp.srcDevice = ap.dptr;
        cp.dstDevice = mout;
        cp.WidthInBytes = MNW * 4;
        cp.Height = cp.Depth = 1;
        CHECK(cuGraphAddMemcpyNode(&cn, mg, &sn, 1, &cp, ctx));
        CHECK(cuGraphAddMemFreeNode(&fn, mg, &cn, 1, ap.dptr));
        CHECK(cuGraphInstantiateWithFlags(&mge, mg, 0));
    }

    /* Managed memory a kernel fills each step, read on the host. */
    CUdeviceptr mm = 0;
    if (managed)
        CHECK(cuMemAllocManaged(&mm, 4096, CU_MEM_ATTACH_GLOBAL));

    /* A texture object over device memory, asked after each step. */
    CUdeviceptr tbuf = 0;
    CUtexObject tex = 0;
    if (textured) {
        CUDA_RESOURCE_DESC rd;
        CUDA_TEXTURE_DESC td;
        memset(&rd, 0, sizeof rd);
        memset(&td, 0, sizeof td);
        CHECK(cuMemAlloc_v2(&tbuf, 4096 * 4));
        rd.resType = CU_RESOURCE_TYPE_LINEAR, rd.res.linear.devPtr = tbuf;
        rd.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT32, rd.res.linear.numChannels = 1;
        rd.res.linear.sizeInBytes = 4096 * 4;
        CHECK(cuTexObjectCreate(&tex, &rd, &td, NULL));
    }

    static CUdeviceptr smalls[MANY];
    for (unsigned k = 0; many && k < MANY; k++) {
        unsigned kv = 50000 + k, kw = MANYW;
        void *pk[] = {&smalls[k], &kv, &kw};
        CHECK(cuMemAlloc_v2(&smalls[k], MANYW * 4));
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, pk, NULL));
    }

    unsigned *host = malloc(WORDS * 4);
    uint64_t want = 0, wantb = 0;
    for (int step = 1; step <= steps; step++) {
        if (held_at(holds, step)) {
            FILE *f = fopen(argv[3], "w");
            if (f)
                fclose(f);
            wait_for(argv[4], busy, grow, s);
            unlink(argv[3]);
            unlink(argv[4]);
        }
        /* Calls before this step's work: a server lost while held is
         * found lost at the first, before any of it. */
        CHECK(cuStreamSynchronize(s));
        CHECK(cuStreamSynchronize(s));
        unsigned v = (unsigned)step;
        void *pa[] = {&a, &v, &n};
        CHECK(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, s, pa, NULL));
        /* The executable's parameters changed every other step: a moved
         * one keeps the last change. */
        if (step % 2) {
            inc = 2 * v;
            CHECK(cuGraphExecKernelNodeSetParams_v2(ge, node, &kp));
        }
        CHECK(cuGraphLaunch(ge, s));
        wantb += inc;
        void *pc[] = {&counter, &v, &cwords};
        CHECK(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, s, pc, NULL));
        unsigned mv = 1000 + v;
        void *pm[] = {&mapped_d, &mv, &mwords};
        CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, pm, NULL));
        unsigned *src = step % 2 ? pinned : pageable;
        for (unsigned i = 0; i < UPW; i++)
            src[i] = 100 + v;
        CHECK(cuMemcpyHtoDAsync_v2(up + (CUdeviceptr)(step - 1) * UPW * 4, src, UPW * 4, s));
        unsigned pv = 7000 + v;
        if (pooled) {
            if (from_pool)
                CHECK(cuMemFreeAsync(from_pool, s));
            CHECK(cuMemAllocAsync(&from_pool, pwords * 4, s));
            void *pf[] = {&from_pool, &pv, &pwords};
            CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, pf, NULL));
        }
        if (hostfn) {
            CHECK(cuLaunchHostFunc(s, tick, &fn_calls));
            CHECK(cuGraphLaunch(hge, s));
        }
        if (captured) {
            CHECK(cuMemsetD32Async(sides, 0, SIDES, s));
            CHECK(cuMemsetD32Async(c3, 0, 4096, s));
            CHECK(cuGraphLaunch(cge, s));
            for (unsigned k = 0; k < SIDES; k++)
                CHECK(cuGraphLaunch(sge[k], s));
        }
        if (memnodes) {
            CHECK(cuMemsetD32Async(mout, 0, MNW, s));
            CHECK(cuGraphLaunch(mge, s));
        }
        if (qerr) {
            /* A launch the driver refuses, which a remote program learns
             * at its next syncpoint; a checkpoint may begin there. */
            unsigned one = 1, four = 4;
            void *pq[] = {&a, &one, &four};
            CUresult lr = cuLaunchKernel(fill, 1, 1, 1, 4096, 1, 1, 0, s, pq, NULL);
            usleep(2000);
            CUresult sr = cuStreamSynchronize(s);
            printf("step %d: a launch of too many threads: %s\n", step, result_name(lr ? lr : sr));
        }
        CHECK(cuEventRecord(ev, s));
        CHECK(cuEventSynchronize(ev));
        if (hostfn && (fn_calls != (unsigned)step || node_calls != (unsigned)step)) {
            printf("step %d: the host function ran %u times, the host node %u\n", step, fn_calls, node_calls);
            return 1;
        }
        /* Handles made and gone each step, in the order made: a server
         * that goes on for this one names the next ones as it would have. */
        CUgraph t1, t2;
        CHECK(cuGraphCreate(&t1, 0));
        CHECK(cuGraphCreate(&t2, 0));
        CHECK(cuGraphDestroy(t1));
        CHECK(cuGraphDestroy(t2));
        if (mapped[0] != mv || mapped[mwords - 1] != mv) {
            printf("step %d: mapped memory holds %u, want %u\n", step, mapped[0], mv);
            return 1;
        }
        want += v;
        uint64_t sum = 0;
        if (!words_are(step, "counter", counter, cwords, (unsigned)want, host, &sum) ||
            !words_are(step, "a", a, WORDS, (unsigned)want, host, &sum) ||
            !words_are(step, "b", b, WORDS, (unsigned)wantb, host, &sum))
            return 1;
        for (int j = 1; j <= step; j++)
            if (!words_are(step, "uploaded", up + (CUdeviceptr)(j - 1) * UPW * 4, UPW, 100 + (unsigned)j, host, &sum))
                return 1;
        for (unsigned k = 0; many && k < MANY; k++)
            if (!words_are(step, "small", smalls[k], MANYW, 50000 + k, host, &sum))
                return 1;
        if (captured && (!words_are(step, "captured 1", c1, WORDS, (unsigned)step, host, &sum) ||
                         !words_are(step, "captured 2", c2, WORDS, 2 * (unsigned)step, host, &sum) ||
                         !words_are(step, "captured memset", cset, 4096, 0x5eed, host, &sum) ||
                         !words_are(step, "captured on a stream gone", c3, 4096, 0x3333, host, &sum)))
            return 1;
        if (memnodes && !words_are(step, "from the graph's memory", mout, MNW, 0x77777777u, host, &sum))
            return 1;
        if (textured) {
            CUDA_RESOURCE_DESC got;
            CUresult tr = cuTexObjectGetResourceDesc(&got, tex);
            if (tr != CUDA_SUCCESS || got.res.linear.devPtr != tbuf) {
                printf("step %d: the texture object answers %s\n", step, result_name(tr));
                return 1;
            }
        }
        if (managed) {
            unsigned mv2 = 500 + v, mwn = 1024;
            void *pmm[] = {&mm, &mv2, &mwn};
            CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, pmm, NULL));
            CHECK(cuStreamSynchronize(s));
            if (((unsigned *)(uintptr_t)mm)[1023] != mv2) {
                printf("step %d: managed memory holds %u, want %u\n", step, ((unsigned *)(uintptr_t)mm)[1023], mv2);
                return 1;
            }
        }
        unsigned sidew[SIDES] = {0};
        if (captured)
            CHECK(cuMemcpyDtoH_v2(sidew, sides, sizeof sidew));
        for (unsigned k = 0; captured && k < SIDES; k++)
            if (sidew[k] != 0x51de0000u + k) {
                printf("step %d: side capture %u's word holds %#x\n", step, k, sidew[k]);
                return 1;
            }
        if (captured && cap_calls != (unsigned)step) {
            printf("step %d: the captured host function ran %u times\n", step, cap_calls);
            return 1;
        }
        uint64_t unsummed = 0;
        unsigned *bighost = churned ? malloc((size_t)BIGW * 4) : NULL;
        if (churned && (!words_are(step, "churned", churn.p, CHURNW, churn.times, host, &unsummed) ||
                        !words_are(step, "ballast", big, BIGW, 7, bighost, &unsummed)))
            return 1;
        free(bighost);
        if (pooled) {
            CUmemoryPool now;
            cuuint64_t t = 0, used = 0;
            CHECK(cuDeviceGetMemPool(&now, 0));
            CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t));
            CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
            if (now != pool || t != threshold || used < pwords * 4) {
                printf("step %d: the device's pool is %s, its threshold %llu, %llu bytes of it used\n", step,
                       now == pool ? "the program's" : "another", (unsigned long long)t, (unsigned long long)used);
                return 1;
            }
            if (!words_are(step, "pooled", from_pool, pwords, pv, host, &sum))
                return 1;
        }
        printf("step %d: sum %llu\n", step, (unsigned long long)sum);
        fflush(stdout);
    }
    CHECK(cuMemFreeHost(mapped));
    CHECK(cuMemFreeHost(pinned));
    if (pooled) {
        CHECK(cuMemFreeAsync(from_pool, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuMemPoolDestroy(pool));
    }
    CHECK(cuMemFree_v2(up));
    for (unsigned k = 0; many && k < MANY; k++)
        CHECK(cuMemFree_v2(smalls[k]));
    CHECK(cuGraphExecDestroy(ge));
    CHECK(cuGraphDestroy(g));
    CHECK(cuEventDestroy_v2(ev));
    CHECK(cuStreamDestroy_v2(s));
    printf("done\n");
    return 0;
}
