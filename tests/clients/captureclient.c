/* Stream capture and graph memory as a program sees them. Every line is a
 * result (as its CUresult name), a capture status or a size in MiB: what
 * the driver did, never an address or a time, so runs can be compared.
 *     captureclient modes       per capture mode: a stream-ordered allocation
 *                               captured while another thread allocates and
 *                               frees synchronously; then the graph's run
 *     captureclient nodes       explicit allocation and free nodes in two
 *                               graphs: upload, launches, trim
 *     captureclient big MIB [hold]
 *                               a graph allocating MIB MiB: instantiate, launch
 *                               (with hold: then wait for stdin to close), trim
 *     captureclient workspace   a library allocating its workspace inside a
 *                               thread-local capture
 *     captureclient rules       what conflicts with capture in any mode, what
 *                               stays legal, fork and join through events
 *     captureclient threads N   N threads capture and allocate at once
 *     captureclient devices MIB [fork]
 *                               every ordinal's UUID; then hold MIB MiB on
 *                               ordinal 0 until stdin closes (with fork: with a
 *                               forked child that makes no call) */
#include "common.h"

#include <pthread.h>
#include <unistd.h>

#include "flexgv/cuda_util.h"

#define MiB (1ull << 20)

static CUcontext ctx;
static CUstream stream;

static const char *status_name(CUstreamCaptureStatus s)
{
    return s == CU_STREAM_CAPTURE_STATUS_NONE     ? "NONE"
           : s == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "ACTIVE"
                                                  : "INVALIDATED";
}

static const char *mode_name(CUstreamCaptureMode m)
{
    return m == CU_STREAM_CAPTURE_MODE_GLOBAL         ? "global"
           : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "thread_local"
                                                      : "relaxed";
}

static const char *type_name(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "GRAPH";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "MEM_ALLOC";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "MEM_FREE";
    default: return "OTHER";
    }
}

static void status(const char *what, CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = cuStreamIsCapturing(s, &st);
    printf("%s: cuStreamIsCapturing = %s", what, result_name(r));
    if (r == CUDA_SUCCESS)
        printf(" %s", status_name(st));
    printf("\n");
}

static size_t free_now(void)
{
    size_t f, t;
    CHECK(cuMemGetInfo_v2(&f, &t));
    return f;
}

static long mib_delta(size_t before, size_t after)
{
    return ((long long)before - (long long)after) / (long long)MiB;
}

/* The device's graph memory pool, in MiB. */
static void graph_mem(const char *what)
{
    static const CUgraphMem_attribute attrs[] = {CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                                                 CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                                 CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH};
    cuuint64_t v[4];
    for (int i = 0; i < 4; i++)
        CHECK(cuDeviceGetGraphMemAttribute(0, attrs[i], &v[i]));
    printf("%s: graph memory used %llu (high %llu) reserved %llu (high %llu) MiB\n", what, v[0] / MiB, v[1] / MiB,
           v[2] / MiB, v[3] / MiB);
}

/* Empties the graph memory pool between scenarios. */
static void reset_graph_mem(void)
{
    cuuint64_t zero = 0;
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    CHECK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
}

/* Instantiates, launches and synchronizes a captured graph, then frees it. */
static void run_graph(const char *what, CUgraph g)
{
    CUgraphExec x;
    CUresult r = cuGraphInstantiateWithFlags(&x, g, 0);
    printf("%s: cuGraphInstantiateWithFlags = %s\n", what, result_name(r));
    if (r == CUDA_SUCCESS) {
        printf("%s: cuGraphLaunch = %s\n", what, result_name(cuGraphLaunch(x, stream)));
        printf("%s: cuStreamSynchronize = %s\n", what, result_name(cuStreamSynchronize(stream)));
        graph_mem(what);
        CHECK(cuGraphExecDestroy(x));
    }
    CHECK(cuGraphDestroy(g));
}

/* ---- modes ---- */

static pthread_barrier_t barrier;
static CUresult other_alloc, other_free;
static CUdeviceptr other_buf, other_pre;

/* At the barrier the main thread is inside its capture; it waits for us. */
static void *other_thread(void *arg)
{
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    pthread_barrier_wait(&barrier);
    other_alloc = cuMemAlloc_v2(&other_buf, MiB);
    other_free = cuMemFree_v2(other_pre);
    pthread_barrier_wait(&barrier);
    return NULL;
}

static void modes(void)
{
    static const CUstreamCaptureMode all[] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                              CU_STREAM_CAPTURE_MODE_RELAXED};
    for (int i = 0; i < 3; i++) {
        const char *m = mode_name(all[i]);
        char what[64];
        pthread_t t;
        CUdeviceptr p = 0;
        CUgraph g = NULL;
        reset_graph_mem();
        CHECK(cuMemAlloc_v2(&other_pre, MiB));
        pthread_barrier_init(&barrier, NULL, 2);
        pthread_create(&t, NULL, other_thread, NULL);
        printf("%s: cuStreamBeginCapture_v2 = %s\n", m, result_name(cuStreamBeginCapture_v2(stream, all[i])));
        printf("%s: cuMemAllocAsync = %s\n", m, result_name(cuMemAllocAsync(&p, 4 * MiB, stream)));
        pthread_barrier_wait(&barrier);
        pthread_barrier_wait(&barrier);
        pthread_join(t, NULL);
        pthread_barrier_destroy(&barrier);
        printf("%s: other thread cuMemAlloc_v2 = %s\n", m, result_name(other_alloc));
        printf("%s: other thread cuMemFree_v2 = %s\n", m, result_name(other_free));
        status(m, stream);
        printf("%s: cuMemFreeAsync = %s\n", m, result_name(cuMemFreeAsync(p, stream)));
        CUresult r = cuStreamEndCapture(stream, &g);
        printf("%s: cuStreamEndCapture = %s, graph %s\n", m, result_name(r), g ? "returned" : "NULL");
        if (other_alloc == CUDA_SUCCESS)
            CHECK(cuMemFree_v2(other_buf));
        if (other_free != CUDA_SUCCESS)
            CHECK(cuMemFree_v2(other_pre));
        snprintf(what, sizeof what, "%s graph", m);
        if (g)
            run_graph(what, g);
    }
}

/* ---- nodes ---- */

static void print_nodes(const char *what, CUgraph g)
{
    size_t n = 0;
    CUgraphNode nodes[8];
    CHECK(cuGraphGetNodes(g, NULL, &n));
    printf("%s: %zu node(s):", what, n);
    n = 8;
    CHECK(cuGraphGetNodes(g, nodes, &n));
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(nodes[i], &t));
        printf(" %s", type_name(t));
        if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            CHECK(cuGraphMemAllocNodeGetParams(nodes[i], &p));
            printf("(%zu MiB on device %d)", p.bytesize / (size_t)MiB, p.poolProps.location.id);
        }
    }
    printf("\n");
}

static void nodes(void)
{
    CUgraph ga, gf;
    CUgraphNode na, nf;
    CUDA_MEM_ALLOC_NODE_PARAMS ap;
    memset(&ap, 0, sizeof ap);
    ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ap.poolProps.location.id = 0;
    ap.bytesize = 64 * MiB;
    reset_graph_mem();
    CHECK(cuGraphCreate(&ga, 0));
    CHECK(cuGraphCreate(&gf, 0));
    printf("cuGraphAddMemAllocNode = %s\n", result_name(cuGraphAddMemAllocNode(&na, ga, NULL, 0, &ap)));
    printf("cuGraphAddMemFreeNode, another graph = %s\n", result_name(cuGraphAddMemFreeNode(&nf, gf, NULL, 0, ap.dptr)));
    printf("cuGraphAddMemFreeNode, twice = %s\n", result_name(cuGraphAddMemFreeNode(&nf, gf, NULL, 0, ap.dptr)));
    printf("cuGraphAddMemFreeNode, not a graph allocation = %s\n",
           result_name(cuGraphAddMemFreeNode(&nf, gf, NULL, 0, ap.dptr + 4096)));
    print_nodes("allocating graph", ga);
    print_nodes("freeing graph", gf);

    size_t base = free_now();
    CUgraphExec xa, xf, again;
    CHECK(cuGraphInstantiateWithFlags(&xa, ga, 0));
    CHECK(cuGraphInstantiateWithFlags(&xf, gf, 0));
    printf("second instantiation = %s\n", result_name(cuGraphInstantiateWithFlags(&again, ga, 0)));
    printf("instantiated: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    graph_mem("instantiated");
    printf("cuGraphUpload = %s\n", result_name(cuGraphUpload(xa, stream)));
    printf("uploaded: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    graph_mem("uploaded");
    printf("cuGraphLaunch allocating = %s\n", result_name(cuGraphLaunch(xa, stream)));
    graph_mem("allocated");
    printf("cuGraphLaunch allocating again = %s\n", result_name(cuGraphLaunch(xa, stream)));
    printf("cuGraphLaunch freeing = %s\n", result_name(cuGraphLaunch(xf, stream)));
    graph_mem("freed by the other graph");
    printf("cuGraphLaunch allocating again = %s\n", result_name(cuGraphLaunch(xa, stream)));
    printf("cuMemFree_v2 of the graph allocation = %s\n", result_name(cuMemFree_v2(ap.dptr)));
    printf("cuMemFree_v2 again = %s\n", result_name(cuMemFree_v2(ap.dptr)));
    CHECK(cuStreamSynchronize(stream));
    printf("device memory taken %ld MiB\n", mib_delta(base, free_now()));
    graph_mem("freed");
    printf("cuDeviceGraphMemTrim = %s\n", result_name(cuDeviceGraphMemTrim(0)));
    printf("trimmed: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    graph_mem("trimmed");
    cuuint64_t zero = 0, one = 1;
    printf("reset USED_MEM_HIGH = %s\n", result_name(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero)));
    printf("set USED_MEM_HIGH to 1 = %s\n",
           result_name(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one)));
    printf("set USED_MEM_CURRENT = %s\n",
           result_name(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero)));
    graph_mem("reset");

    /* An allocation left in use survives its executable graph, and the
     * launch after a trim takes the memory again. */
    printf("cuGraphLaunch allocating = %s\n", result_name(cuGraphLaunch(xa, stream)));
    CHECK(cuGraphExecDestroy(xa));
    CHECK(cuGraphDestroy(ga));
    printf("executable and graph destroyed: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    graph_mem("destroyed");
    printf("cuGraphLaunch freeing = %s\n", result_name(cuGraphLaunch(xf, stream)));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuDeviceGraphMemTrim(0));
    printf("freed and trimmed: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    CHECK(cuGraphExecDestroy(xf));

    /* A graph that frees its own allocation, uploaded when instantiated. */
    CUgraph gc, parent, child;
    CUgraphNode nc, nfree, nchild;
    ap.bytesize = 32 * MiB;
    CHECK(cuGraphCreate(&gc, 0));
    CHECK(cuGraphAddMemAllocNode(&nc, gc, NULL, 0, &ap));
    printf("free node not after its allocation = %s\n", result_name(cuGraphAddMemFreeNode(&nfree, gc, NULL, 0, ap.dptr)));
    printf("free node after its allocation = %s\n", result_name(cuGraphAddMemFreeNode(&nfree, gc, &nc, 1, ap.dptr)));
    printf("freed in its own graph, freed by another = %s\n", result_name(cuGraphAddMemFreeNode(&nf, gf, NULL, 0, ap.dptr)));
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, .hUploadStream = stream};
    CUgraphExec xc;
    printf("cuGraphInstantiateWithParams with upload = %s", result_name(cuGraphInstantiateWithParams(&xc, gc, &ip)));
    printf(", result %s\n", ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS ? "SUCCESS" : "ERROR");
    printf("uploaded at instantiation: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    printf("cuGraphLaunch = %s\n", result_name(cuGraphLaunch(xc, stream)));
    printf("cuGraphLaunch = %s\n", result_name(cuGraphLaunch(xc, stream)));
    graph_mem("self-freeing graph");
    printf("as a child graph = %s\n", result_name(cuGraphAddChildGraphNode(&nchild, gf, NULL, 0, gc)));
    CHECK(cuGraphExecDestroy(xc));

    /* A graph instantiated to free its allocation on relaunch. */
    CUgraph gd;
    CUgraphExec xd;
    ap.bytesize = 16 * MiB;
    CHECK(cuGraphCreate(&gd, 0));
    CHECK(cuGraphAddMemAllocNode(&na, gd, NULL, 0, &ap));
    ip = (CUDA_GRAPH_INSTANTIATE_PARAMS){.flags = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH};
    CHECK(cuGraphInstantiateWithParams(&xd, gd, &ip));
    printf("auto-free: cuGraphLaunch = %s\n", result_name(cuGraphLaunch(xd, stream)));
    printf("auto-free: cuGraphLaunch again = %s\n", result_name(cuGraphLaunch(xd, stream)));
    graph_mem("auto-free");
    printf("auto-free: cuMemFreeAsync = %s\n", result_name(cuMemFreeAsync(ap.dptr, stream)));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuGraphExecDestroy(xd));

    /* Child graphs (without memory nodes) nest. */
    CHECK(cuGraphCreate(&parent, 0));
    CHECK(cuGraphCreate(&child, 0));
    printf("child graph node = %s\n", result_name(cuGraphAddChildGraphNode(&nchild, parent, NULL, 0, child)));
    print_nodes("parent", parent);
    CUgraph inner;
    printf("cuGraphChildGraphNodeGetGraph = %s\n", result_name(cuGraphChildGraphNodeGetGraph(nchild, &inner)));
    print_nodes("child", inner);
    printf("cuGraphChildGraphNodeGetGraph of an allocation node = %s\n",
           result_name(cuGraphChildGraphNodeGetGraph(na, &inner)));
    CHECK(cuDeviceGraphMemTrim(0));
    printf("all freed and trimmed: device memory taken %ld MiB\n", mib_delta(base, free_now()));
    CHECK(cuGraphDestroy(parent));
    CHECK(cuGraphDestroy(child));
    CHECK(cuGraphDestroy(gd));
    CHECK(cuGraphDestroy(gc));
    CHECK(cuGraphDestroy(gf));
}

/* ---- big ---- */

static void wait_stdin(void)
{
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
}

static void big(size_t mib, int hold)
{
    CUgraph g;
    CUdeviceptr p;
    reset_graph_mem();
    size_t base = free_now();
    CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    printf("cuMemAllocAsync %zu MiB = %s\n", mib, result_name(cuMemAllocAsync(&p, mib * MiB, stream)));
    printf("cuMemFreeAsync = %s\n", result_name(cuMemFreeAsync(p, stream)));
    printf("cuStreamEndCapture = %s\n", result_name(cuStreamEndCapture(stream, &g)));
    CUgraphExec x;
    CUresult r = cuGraphInstantiateWithFlags(&x, g, 0);
    printf("cuGraphInstantiateWithFlags = %s\n", result_name(r));
    if (r != CUDA_SUCCESS)
        exit(1);
    printf("cuGraphLaunch = %s\n", result_name(cuGraphLaunch(x, stream)));
    printf("cuStreamSynchronize = %s\n", result_name(cuStreamSynchronize(stream)));
    graph_mem("launched");
    printf("device memory taken %ld MiB\n", mib_delta(base, free_now()));
    if (hold)
        wait_stdin();
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuDeviceGraphMemTrim(0));
    printf("trimmed: device memory taken %ld MiB\n", mib_delta(base, free_now()));
}

/* ---- workspace ---- */

/* What a library does with the stream it is given: while capturing it takes
 * its workspace stream-ordered (captured into the graph) and its persistent
 * buffer with cuMemAlloc_v2 in relaxed mode, so as not to break the capture. */
static void library_call(const char *what, CUstream s, int relax, CUdeviceptr *persistent)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = cuStreamIsCapturing(s, &st);
    printf("%s: library cuStreamIsCapturing = %s %s\n", what, result_name(r), status_name(st));
    CUdeviceptr ws = 0;
    printf("%s: library cuMemAllocAsync workspace = %s\n", what, result_name(cuMemAllocAsync(&ws, 8 * MiB, s)));
    printf("%s: library cuMemsetD8Async = %s\n", what, result_name(cuMemsetD8Async(ws, 0, 8 * MiB, s)));
    printf("%s: library cuMemFreeAsync workspace = %s\n", what, result_name(cuMemFreeAsync(ws, s)));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (relax) {
        r = cuThreadExchangeStreamCaptureMode(&mode);
        printf("%s: library cuThreadExchangeStreamCaptureMode = %s, was %s\n", what, result_name(r), mode_name(mode));
    }
    printf("%s: library cuMemAlloc_v2 = %s\n", what, result_name(cuMemAlloc_v2(persistent, 4 * MiB)));
    if (relax) {
        r = cuThreadExchangeStreamCaptureMode(&mode);
        printf("%s: library restores its mode = %s, was %s\n", what, result_name(r), mode_name(mode));
    }
}

static void workspace(void)
{
    /* A blocking stream: the legacy stream may not be used meanwhile. */
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    static const int relax[] = {1, 0};
    static const char *const names[] = {"relaxed library", "strict library"};
    for (int i = 0; i < 2; i++) {
        const char *what = names[i];
        CUgraph g = NULL;
        CUdeviceptr persistent = 0;
        reset_graph_mem();
        printf("%s: cuStreamBeginCapture_v2 = %s\n", what,
               result_name(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)));
        library_call(what, s, relax[i], &persistent);
        status("legacy stream", CU_STREAM_LEGACY);
        status(what, s);
        CUresult r = cuStreamEndCapture(s, &g);
        printf("%s: cuStreamEndCapture = %s, graph %s\n", what, result_name(r), g ? "returned" : "NULL");
        if (persistent)
            CHECK(cuMemFree_v2(persistent));
        if (g) {
            print_nodes(what, g);
            CUgraphExec x;
            printf("%s: cuGraphInstantiateWithFlags = %s\n", what, result_name(cuGraphInstantiateWithFlags(&x, g, 0)));
            printf("%s: cuGraphLaunch = %s\n", what, result_name(cuGraphLaunch(x, s)));
            printf("%s: cuStreamSynchronize = %s\n", what, result_name(cuStreamSynchronize(s)));
            graph_mem(what);
            CHECK(cuGraphExecDestroy(x));
            CHECK(cuGraphDestroy(g));
        }
    }
    CHECK(cuStreamDestroy_v2(s));
}

/* ---- rules ---- */

static CUgraph end_capture(const char *what, CUstream s)
{
    CUgraph g = NULL;
    CUresult r = cuStreamEndCapture(s, &g);
    printf("%s: cuStreamEndCapture = %s, graph %s\n", what, result_name(r), g ? "returned" : "NULL");
    return g;
}

static void end_and_drop(const char *what, CUstream s)
{
    CUgraph g = end_capture(what, s);
    if (g)
        CHECK(cuGraphDestroy(g));
}

static void begin(CUstream s, CUstreamCaptureMode mode) { CHECK(cuStreamBeginCapture_v2(s, mode)); }

static CUstream ender_stream;
static CUresult ender_result;

static void *ender(void *arg)
{
    CUgraph g = NULL;
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    ender_result = cuStreamEndCapture(ender_stream, &g);
    if (g)
        CHECK(cuGraphDestroy(g));
    return NULL;
}

static void end_elsewhere(const char *what, CUstream s)
{
    pthread_t t;
    ender_stream = s;
    pthread_create(&t, NULL, ender, NULL);
    pthread_join(t, NULL);
    printf("%s: cuStreamEndCapture from another thread = %s\n", what, result_name(ender_result));
}

static void *legacy_begin_other(void *arg)
{
    CUdeviceptr p;
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    CUresult r = cuMemAlloc_v2(&p, MiB);
    printf("legacy begin: other thread cuMemAlloc_v2 = %s\n", result_name(r));
    if (r == CUDA_SUCCESS)
        CHECK(cuMemFree_v2(p));
    return NULL;
}

/* Another thread's global capture prohibits only threads in global mode. */
static void *mode_other(void *arg)
{
    static const CUstreamCaptureMode order[] = {CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                CU_STREAM_CAPTURE_MODE_GLOBAL};
    (void)arg;
    CHECK(cuCtxSetCurrent(ctx));
    for (int i = 0; i < 3; i++) {
        CUstreamCaptureMode m = order[i];
        CUdeviceptr p;
        CHECK(cuThreadExchangeStreamCaptureMode(&m));
        CUresult r = cuMemAlloc_v2(&p, MiB);
        printf("other thread in %s mode: cuMemAlloc_v2 = %s\n", mode_name(order[i]), result_name(r));
        if (r == CUDA_SUCCESS)
            CHECK(cuMemFree_v2(p));
    }
    return NULL;
}

static void rules(void)
{
    CUstream blocking, side;
    CUdeviceptr buf;
    unsigned host[4] = {0};
    CHECK(cuStreamCreate(&blocking, 0));
    CHECK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&buf, MiB));

    /* Conflicts, even in relaxed mode. */
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("sync of the capturing stream: cuStreamSynchronize = %s\n", result_name(cuStreamSynchronize(stream)));
    status("after it", stream);
    end_and_drop("after it", stream);
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("query of the capturing stream: cuStreamQuery = %s\n", result_name(cuStreamQuery(stream)));
    end_and_drop("after it", stream);
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("context sync while capturing: cuCtxSynchronize = %s\n", result_name(cuCtxSynchronize()));
    end_and_drop("after it", stream);
    begin(blocking, CU_STREAM_CAPTURE_MODE_RELAXED);
    status("legacy stream", CU_STREAM_LEGACY);
    status("blocking stream after that", blocking);
    printf("legacy stream work: cuMemsetD8Async = %s\n", result_name(cuMemsetD8Async(buf, 0, 16, CU_STREAM_LEGACY)));
    end_and_drop("after it", blocking);
    begin(blocking, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("synchronous copy: cuMemcpyHtoD_v2 = %s\n", result_name(cuMemcpyHtoD_v2(buf, host, sizeof host)));
    end_and_drop("after it", blocking);
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("synchronous copy, non-blocking capture: cuMemcpyHtoD_v2 = %s\n",
           result_name(cuMemcpyHtoD_v2(buf, host, sizeof host)));
    end_and_drop("after it", stream);

    /* Legal during a global capture, and harmless to it. */
    begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CUdevice dev;
    CUmemoryPool pool;
    cuuint64_t v;
    printf("during capture: cuCtxGetDevice = %s\n", result_name(cuCtxGetDevice(&dev)));
    printf("during capture: cuStreamGetDevice = %s\n", result_name(cuStreamGetDevice(stream, &dev)));
    printf("during capture: cuDeviceGetMemPool = %s\n", result_name(cuDeviceGetMemPool(&pool, 0)));
    printf("during capture: cuMemPoolGetAttribute = %s\n",
           result_name(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v)));
    printf("during capture: cuDeviceGetGraphMemAttribute = %s\n",
           result_name(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v)));
    status("after them", stream);
    end_elsewhere("global", stream);
    end_and_drop("global", stream);
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    end_elsewhere("relaxed", stream);
    status("relaxed, ended elsewhere", stream);

    pthread_t t;
    begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    pthread_create(&t, NULL, mode_other, NULL);
    pthread_join(t, NULL);
    end_and_drop("global capture", stream);

    /* The legacy entry point captures in global mode. */
    CHECK(cuStreamBeginCapture(stream));
    pthread_create(&t, NULL, legacy_begin_other, NULL);
    pthread_join(t, NULL);
    end_and_drop("legacy begin", stream);

    /* Fork and join through events; a side stream that is not joined back
     * fails the capture, and a captured event cannot be waited for. */
    CUevent fork, join;
    CUmodule mod;
    CUfunction fill;
    CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    CUresult lr = cuModuleLoadData(&mod, SIM_MODULE);
    if (lr == CUDA_SUCCESS)
        CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    printf("fork: cuEventRecord = %s\n", result_name(cuEventRecord(fork, stream)));
    printf("fork: cuStreamWaitEvent = %s\n", result_name(cuStreamWaitEvent(side, fork, 0)));
    status("side stream", side);
    unsigned value = 7;
    int n = 4;
    void *params[] = {&buf, &value, &n};
    if (lr == CUDA_SUCCESS)
        printf("side: cuLaunchKernel fill = %s\n", result_name(cuLaunchKernel(fill, 1, 1, 1, 4, 1, 1, 0, side, params, NULL)));
    printf("side: cuMemcpyDtoHAsync_v2 = %s\n", result_name(cuMemcpyDtoHAsync_v2(host, buf, sizeof host, side)));
    printf("join: cuEventRecord = %s\n", result_name(cuEventRecord(join, side)));
    printf("join: cuStreamWaitEvent = %s\n", result_name(cuStreamWaitEvent(stream, join, 0)));
    CUgraph g = end_capture("joined", stream);
    status("side stream after the end", side);
    if (g) {
        print_nodes("joined", g);
        CUgraphExec x;
        CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
        printf("joined: host buffer before launch %u %u %u %u\n", host[0], host[1], host[2], host[3]);
        printf("joined: cuGraphLaunch = %s\n", result_name(cuGraphLaunch(x, stream)));
        CHECK(cuStreamSynchronize(stream));
        printf("joined: host buffer after launch %u %u %u %u\n", host[0], host[1], host[2], host[3]);
        CHECK(cuGraphExecDestroy(x));
        CHECK(cuGraphDestroy(g));
    }
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(cuEventRecord(fork, stream));
    CHECK(cuStreamWaitEvent(side, fork, 0));
    printf("unjoined: side cuMemsetD8Async = %s\n", result_name(cuMemsetD8Async(buf, 1, 16, side)));
    printf("captured event: cuEventQuery = %s\n", result_name(cuEventQuery(fork)));
    status("after it", stream);
    end_and_drop("unjoined", stream);
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(cuEventRecord(fork, stream));
    CHECK(cuStreamWaitEvent(side, fork, 0));
    CHECK(cuMemsetD8Async(buf, 1, 16, side));
    end_and_drop("unjoined", stream);
    status("side stream after the end", side);
    CHECK(cuEventRecord(join, side));
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("outside event: cuStreamWaitEvent = %s\n", result_name(cuStreamWaitEvent(stream, join, 0)));
    end_and_drop("after it", stream);
    CUgraph empty;
    CUgraphExec x;
    CHECK(cuGraphCreate(&empty, 0));
    CHECK(cuGraphInstantiateWithFlags(&x, empty, 0));
    begin(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
    printf("executable graph launched into a capture: cuGraphLaunch = %s\n", result_name(cuGraphLaunch(x, stream)));
    end_and_drop("after it", stream);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(empty));
    CHECK(cuMemFree_v2(buf));
    CHECK(cuEventDestroy_v2(fork));
    CHECK(cuEventDestroy_v2(join));
    if (lr == CUDA_SUCCESS)
        CHECK(cuModuleUnload(mod));
    CHECK(cuStreamDestroy_v2(side));
    CHECK(cuStreamDestroy_v2(blocking));
}

/* ---- threads ---- */

enum { ROUNDS = 50 };
static long unexpected;

/* Each thread captures on its own stream in THREAD_LOCAL mode; every other
 * round it also allocates synchronously, which invalidates its own capture
 * and nobody else's. */
static void *capture_thread(void *arg)
{
    (void)arg;
    CUstream s;
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < ROUNDS; i++) {
        CUdeviceptr p, q;
        CUgraph g = NULL;
        int strict = i % 2;
        long bad = cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS;
        bad += cuMemAllocAsync(&p, MiB, s) != CUDA_SUCCESS;
        if (strict)
            bad += cuMemAlloc_v2(&q, MiB) != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        bad += cuMemFreeAsync(p, s) != (strict ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
        bad += cuStreamEndCapture(s, &g) != (strict ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
        if (g) {
            CUgraphExec x;
            bad += cuGraphInstantiateWithFlags(&x, g, 0) != CUDA_SUCCESS;
            bad += cuGraphLaunch(x, s) != CUDA_SUCCESS;
            bad += cuStreamSynchronize(s) != CUDA_SUCCESS;
            bad += cuGraphExecDestroy(x) != CUDA_SUCCESS;
            bad += cuGraphDestroy(g) != CUDA_SUCCESS;
        }
        bad += cuMemAlloc_v2(&q, MiB) != CUDA_SUCCESS;
        bad += cuMemFree_v2(q) != CUDA_SUCCESS;
        __atomic_fetch_add(&unexpected, bad, __ATOMIC_RELAXED);
    }
    CHECK(cuStreamDestroy_v2(s));
    return NULL;
}

static void threads(int n)
{
    pthread_t t[64];
    n = n < 1 ? 1 : n > 64 ? 64 : n;
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, capture_thread, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    cuuint64_t used, reserved;
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
    CHECK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved));
    printf("threads: %d x %d captures, %ld unexpected results; then graph memory used %llu reserved %llu\n", n,
           ROUNDS, unexpected, used, reserved);
}

/* ---- devices ---- */

static void devices(size_t mib, int with_child)
{
    int n;
    CHECK(cuDeviceGetCount(&n));
    printf("devices %d\n", n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        CUuuid u;
        char text[64];
        CHECK(cuDeviceGet(&d, i));
        CHECK(cuDeviceGetUuid_v2(&u, d));
        fg_uuid_text(&u, text, sizeof text);
        printf("ordinal %d uuid %s\n", i, text);
    }
    CUdevice dev, sdev;
    CUdeviceptr p;
    CHECK(cuCtxGetDevice(&dev));
    CHECK(cuStreamGetDevice(stream, &sdev));
    printf("context device %d, stream device %d\n", dev, sdev);
    CHECK(cuMemAlloc_v2(&p, mib * MiB));
    int sync[2];
    if (with_child && pipe(sync) == 0) {
        pid_t child = fork();
        if (child == 0) {
            close(sync[0]);
            close(sync[1]); /* the parent reads EOF: this child is set up */
            char buf[64];
            while (read(0, buf, sizeof buf) > 0)
                ;
            _exit(0);
        }
        char b;
        close(sync[1]);
        if (child < 0 || read(sync[0], &b, 1) != 0)
            exit(1);
        printf("forked a child\n");
    }
    wait_stdin();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "modes";
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    if (!strcmp(mode, "modes"))
        modes();
    else if (!strcmp(mode, "nodes"))
        nodes();
    else if (!strcmp(mode, "big") && argc > 2)
        big((size_t)atol(argv[2]), argc > 3 && !strcmp(argv[3], "hold"));
    else if (!strcmp(mode, "workspace"))
        workspace();
    else if (!strcmp(mode, "rules"))
        rules();
    else if (!strcmp(mode, "threads") && argc > 2)
        threads(atoi(argv[2]));
    else if (!strcmp(mode, "devices") && argc > 2)
        devices((size_t)atol(argv[2]), argc > 3 && !strcmp(argv[3], "fork"));
    else {
        fprintf(stderr, "captureclient: unknown mode %s\n", mode);
        return 2;
    }
    fflush(stdout);
    return 0;
}
