/* Graphs built node by node, as a program sees them: every line a result
 * (by its CUresult name), a node type, a size or the bytes a graph set, so
 * local and remote runs compare.
 *     graphnodes          an allocation node, memset nodes (1D into it, 2D
 *                         into cuMemAlloc memory), a kernel node into it, a
 *                         free outside the graph;
 *                         instantiate, launch, relaunch while the allocation
 *                         is in use, then after it is freed
 *     graphnodes copies   copy nodes: device to device, pinned host memory
 *                         up and back
 *     graphnodes edges    edges added after the nodes, an empty node, root
 *                         nodes, a child graph node; the edges and a
 *                         node's neighbours read back, edges removed and
 *                         added again; a clone launched
 *     graphnodes host     a host node, in a graph launched four times; its
 *                         parameters read back and changed (the
 *                         executable's, the graph's)
 *     graphnodes events   event record and wait nodes, their events read
 *                         back and changed (the graph's, the executable's)
 *     graphnodes params   a memset node's parameters read back and changed
 *                         (the graph's, the executable's), its executable
 *                         copy turned off and on
 *     graphnodes hostread a host node after a copy node into the program's
 *                         memory reads what it copied, and changes it (a
 *                         copy node after it, as the simulated GPU makes
 *                         copies when launched, is not looked at);
 *                         launched three times, the memory cleared before
 *                         each, captured and added; the host node in a
 *                         child graph after the copy node, and with it
 *     graphnodes childparams [pageable]
 *                         an executable's child graph node set to another
 *                         graph's parameters; another topology refused;
 *                         with pageable, a new child that copies into the
 *                         program's memory
 *     graphnodes userobjects
 *                         user objects: the program's references, a graph's
 *                         (moved or its own), an executable's, a clone's;
 *                         each destructor runs once the last goes
 *     graphnodes pageable copies with the program's pageable memory: captured
 *                         (up, a kernel adding to it, down, a copy by
 *                         address) and launched three times with new input;
 *                         copy nodes added (pitched rows up and down, the
 *                         bytes between the rows left alone, host to
 *                         host), relaunched with new input, a clone
 *                         outliving its graph, a child graph, an executable
 *                         updated to another graph's host memory, an
 *                         executable's node set to other memory, the
 *                         graph's node read back and set to other memory; 200
 *                         graphs of an 8 MiB node made and destroyed
 *     graphnodes conditional
 *                         conditional nodes: an IF node whose body a kernel
 *                         enables or not, an IF node with an else body and
 *                         a handle's default value, the handle changed in
 *                         the executable, a WHILE node counting down; the
 *                         nodes' parameters read back, a clone's; body
 *                         counts and handles the driver refuses
 *     graphnodes captureinfo
 *                         a node added to a graph while it is captured:
 *                         the capture's graph and dependencies read, a
 *                         kernel node added after them and made the
 *                         stream's dependencies, captured work after it;
 *                         the graph launched
 *     graphnodes reuse    graphs whose allocation was freed and which were
 *                         destroyed, then a range reserved, mapped, set and
 *                         read where the driver may place it again: over a
 *                         destroyed graph's addresses
 *     graphnodes kernelparams
 *                         a kernel node's parameters, the entry points
 *                         resolved as a CUDA 12 runtime does: read back,
 *                         the executable's changed (another value, another
 *                         output word, another function) and relaunched,
 *                         the graph's unchanged; the graph's node changed,
 *                         the executable not, a new one made from it; a
 *                         library kernel's node, added and captured, read
 *                         back as the kernel; its launch attributes set, read
 *                         back and copied; calls on a memset node, another graph's node,
 *                         without parameters and (given two devices) with
 *                         another device's function refused
 *     graphnodes generic  every kind of node made by cuGraphAddNode (an
 *                         allocation, memsets, a kernel, a copy, a host
 *                         function, a cloned child, events, an empty node,
 *                         a free), each read back by cuGraphNodeGetParams;
 *                         launched; parameters changed by
 *                         cuGraphNodeSetParams and cuGraphExecNodeSetParams
 *                         and launched again; a batch memory operation
 *                         node; an edge with data; a child
 *                         graph moved into its node, its own node set in
 *                         the executable; kinds and values refused
 *     graphnodes hostile  what a connection may not name: a memset node
 *                         outside its memory, a forged graph, an allocation
 *                         node's access descriptors (pointers into the
 *                         program), a conditional node of 2^20 bodies, its
 *                         body graph destroyed alone or used once its node
 *                         is gone; then a call that is allowed; a child
 *                         graph moved into its node, used once its parent
 *                         graph is gone */
#include "common.h"

#include <stdint.h>
#include <unistd.h>

enum { ROW = 64, ROWS = 3, ABYTES = 4096 };

static void print_bytes(const char *what, const unsigned char *b, size_t n)
{
    printf("%s:", what);
    for (size_t i = 0; i < n; i++)
        if (b[i])
            printf(" %zu=%02x", i, b[i]);
    printf("\n");
}

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t bytes)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS set_params(CUdeviceptr dst, unsigned v, unsigned elem, size_t w, size_t h, size_t pitch)
{
    CUDA_MEMSET_NODE_PARAMS p = {dst, pitch, v, elem, w, h};
    return p;
}

static CUDA_MEMCPY3D copy_params(CUmemorytype st, const void *sh, CUdeviceptr sd, CUmemorytype dt, void *dh,
                                 CUdeviceptr dd, size_t w, size_t h, size_t pitch)
{
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = st;
    c.srcHost = sh;
    c.srcDevice = sd;
    c.srcPitch = pitch;
    c.srcHeight = h;
    c.dstMemoryType = dt;
    c.dstHost = dh;
    c.dstDevice = dd;
    c.dstPitch = pitch;
    c.dstHeight = h;
    c.WidthInBytes = w;
    c.Height = h;
    c.Depth = 1;
    return c;
}

/* Not in the hooked table (api/cuda.api): declared here. */
CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx,
                                        unsigned int defaultLaunchValue, unsigned int flags);
CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams);
CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                           const CUgraphEdgeData *dependencyData, size_t numDependencies,
                           CUgraphNodeParams *nodeParams);
CUresult cuGraphNodeGetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams);
CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams);
CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams);
CUresult cuGraphDestroyNode(CUgraphNode hNode);
CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode);
CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,
                                           unsigned int flags);
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);

/* The simulated GPU's kernels for conditional nodes: setcond(h, p, step)
 * adds step to *p and sets h's value to it, as cudaGraphSetConditional
 * does on a device. */
static const char COND_MODULE[] = "FLEXGV-SIM-MODULE\n"
                                  "kernel fill 5 builtin=fill\n"
                                  "kernel add 5 builtin=add\n"
                                  "kernel setcond 5 builtin=setcond\n";

/* A stream, COND_MODULE's fill kernel and bytes of device memory. With
 * FLEXGV_TEST_FILL_IMAGE naming a module of a real fill kernel
 * (scripts/gpu/fill.cu) the same calls run on a real GPU, whose answers the
 * simulated GPU's are checked against. */
static void fill_setup(CUstream *st, CUmodule *mod, CUfunction *fill, CUdeviceptr *w, size_t bytes)
{
    CHECK(cuStreamCreate(st, 0));
    const char *path = getenv("FLEXGV_TEST_FILL_IMAGE");
    if (path && *path) {
        FILE *f = fopen(path, "rb");
        static char image[1 << 20];
        size_t n = f ? fread(image, 1, sizeof image - 1, f) : 0;
        if (!n || n == sizeof image - 1) {
            fprintf(stderr, "FLEXGV_TEST_FILL_IMAGE=%s: not read, or over 1 MiB\n", path);
            exit(2);
        }
        fclose(f);
        CHECK(cuModuleLoadData(mod, image));
    } else
        CHECK(cuModuleLoadData(mod, COND_MODULE));
    CHECK(cuModuleGetFunction(fill, *mod, "fill"));
    CHECK(cuMemAlloc_v2(w, bytes));
}

static CUDA_KERNEL_NODE_PARAMS one_thread(CUfunction f, void **params)
{
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = f;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    return kp;
}

static CUgraphNodeParams cond_params(CUgraphConditionalHandle h, CUgraphConditionalNodeType type, unsigned size,
                                     CUcontext ctx)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    return p;
}

static unsigned word_at(CUdeviceptr p)
{
    unsigned v = 0;
    CHECK(cuMemcpyDtoH_v2(&v, p, sizeof v));
    return v;
}

static void put_word(CUdeviceptr p, unsigned v) { CHECK(cuMemcpyHtoD_v2(p, &v, sizeof v)); }

static int conditional(CUcontext ctx)
{
    CUstream st;
    CUmodule mod;
    CUfunction fill, add, setcond;
    CUdeviceptr w;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuModuleLoadData(&mod, COND_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuModuleGetFunction(&add, mod, "add"));
    CHECK(cuModuleGetFunction(&setcond, mod, "setcond"));
    CHECK(cuMemAlloc_v2(&w, 16));
    CUdeviceptr flag = w, word = w + 4, counter = w + 8, tally = w + 12;
    int zero = 0, one = 1, down = -1;
    unsigned v42 = 42, v1 = 1, v2 = 2;

    /* IF: a kernel node sets the handle from flag; the body fills word. */
    CUgraph g;
    CUgraphConditionalHandle h;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphConditionalHandleCreate(&h, g, ctx, 0, 0));
    void *dargs[] = {&h, &flag, &zero};
    CUDA_KERNEL_NODE_PARAMS kp = one_thread(setcond, dargs);
    CUgraphNode decide, cnode, mark;
    CHECK(cuGraphAddKernelNode_v2(&decide, g, NULL, 0, &kp));
    CUgraphNodeParams cp = cond_params(h, CU_GRAPH_COND_TYPE_IF, 1, ctx);
    CHECK(cuGraphAddNode(&cnode, g, &decide, 1, &cp));
    CUgraph body = cp.conditional.phGraph_out[0];
    void *margs[] = {&word, &v42, &one};
    kp = one_thread(fill, margs);
    CHECK(cuGraphAddKernelNode_v2(&mark, body, NULL, 0, &kp));
    CUgraphNodeType t;
    CHECK(cuGraphNodeGetType(cnode, &t));
    CUgraphNodeParams back;
    memset(&back, 0xff, sizeof back);
    CHECK(cuGraphNodeGetParams(cnode, &back));
    size_t n = 0;
    CHECK(cuGraphGetNodes(back.conditional.phGraph_out[0], NULL, &n));
    printf("IF node: type %d; read back: type %d, kind %d, %u body, %s handle, %s body graph (%zu node)\n", (int)t,
           (int)back.type, (int)back.conditional.type, back.conditional.size,
           back.conditional.handle == h ? "the same" : "another",
           back.conditional.phGraph_out[0] == body ? "the same" : "another", n);
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (unsigned taken = 0; taken < 2; taken++) {
        put_word(flag, taken);
        put_word(word, 0);
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        printf("IF with flag %u: word %u\n", taken, word_at(word));
    }
    CHECK(cuGraphExecDestroy(x));

    /* A clone: its conditional node has bodies of its own, read from it. */
    CUgraph c;
    CUgraphNode cn[4];
    CHECK(cuGraphClone(&c, g));
    n = 4;
    CHECK(cuGraphGetNodes(c, cn, &n));
    for (size_t i = 0; i < n; i++) {
        CHECK(cuGraphNodeGetType(cn[i], &t));
        if (t != CU_GRAPH_NODE_TYPE_CONDITIONAL)
            continue;
        CHECK(cuGraphNodeGetParams(cn[i], &back));
        size_t k = 0;
        CHECK(cuGraphGetNodes(back.conditional.phGraph_out[0], NULL, &k));
        printf("clone's IF node: %s body graph, %zu node in it\n", back.conditional.phGraph_out[0] == body ? "the same" : "its own", k);
    }
    CHECK(cuGraphInstantiateWithFlags(&x, c, 0));
    put_word(flag, 1);
    put_word(word, 0);
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("clone with flag 1: word %u\n", word_at(word));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(c));
    CHECK(cuGraphDestroy(g));

    /* IF with an else body, no kernel deciding: the handle's default
     * value at each launch (0: the else body); then the node given a
     * handle whose default is 1 in the executable alone. */
    CUgraphConditionalHandle h0, h1;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphConditionalHandleCreate(&h0, g, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CHECK(cuGraphConditionalHandleCreate(&h1, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    cp = cond_params(h0, CU_GRAPH_COND_TYPE_IF, 2, ctx);
    CUgraphEdgeData plain;
    memset(&plain, 0, sizeof plain);
    CHECK(cuGraphAddNode_v2(&cnode, g, NULL, NULL, 0, &cp));
    void *then_args[] = {&word, &v1, &one}, *else_args[] = {&word, &v2, &one};
    kp = one_thread(fill, then_args);
    CHECK(cuGraphAddKernelNode_v2(&mark, cp.conditional.phGraph_out[0], NULL, 0, &kp));
    kp = one_thread(fill, else_args);
    CHECK(cuGraphAddKernelNode_v2(&mark, cp.conditional.phGraph_out[1], NULL, 0, &kp));
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    put_word(word, 0);
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("IF/else, default 0: word %u\n", word_at(word));
    CUgraphNodeParams np = cond_params(h1, CU_GRAPH_COND_TYPE_IF, 2, ctx);
    printf("the executable's node given the other handle: %s\n", result_name(cuGraphExecNodeSetParams(x, cnode, &np)));
    put_word(word, 0);
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("IF/else, default 1: word %u\n", word_at(word));
    np = cond_params(h1, CU_GRAPH_COND_TYPE_IF, 1, ctx);
    printf("the node given one body less: %s\n", result_name(cuGraphNodeSetParams(cnode, &np)));
    np = cond_params(h1, CU_GRAPH_COND_TYPE_IF, 2, ctx);
    printf("the node given the other handle: %s\n", result_name(cuGraphNodeSetParams(cnode, &np)));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    /* WHILE, its handle 1 at each launch: the body adds 1 to tally, then
     * counts counter down and sets the handle to what is left. */
    CUgraphConditionalHandle hw;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphConditionalHandleCreate(&hw, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    cp = cond_params(hw, CU_GRAPH_COND_TYPE_WHILE, 1, ctx);
    CHECK(cuGraphAddNode_v2(&cnode, g, NULL, &plain, 0, &cp));
    CUgraphNode step, count;
    void *aargs[] = {&tally, &v1, &one}, *cargs[] = {&hw, &counter, &down};
    kp = one_thread(add, aargs);
    CHECK(cuGraphAddKernelNode_v2(&step, cp.conditional.phGraph_out[0], NULL, 0, &kp));
    kp = one_thread(setcond, cargs);
    CHECK(cuGraphAddKernelNode_v2(&count, cp.conditional.phGraph_out[0], &step, 1, &kp));
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (unsigned from = 3; from <= 5; from += 2) {
        put_word(counter, from);
        put_word(tally, 0);
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        printf("WHILE from %u: body ran %u times, counter %u\n", from, word_at(tally), word_at(counter));
    }

    /* The WHILE graph's executable updated from a graph of its shape
     * whose handle starts at 0 (the body does not run), then refused an
     * update from one whose node is of another kind (that node named). */
    CUgraph g2, g3;
    CUgraphConditionalHandle hz;
    CHECK(cuGraphCreate(&g2, 0));
    CHECK(cuGraphConditionalHandleCreate(&hz, g2, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    cp = cond_params(hz, CU_GRAPH_COND_TYPE_WHILE, 1, ctx);
    CUgraphNode c2, e3;
    CHECK(cuGraphAddNode(&c2, g2, NULL, 0, &cp));
    kp = one_thread(add, aargs);
    CHECK(cuGraphAddKernelNode_v2(&step, cp.conditional.phGraph_out[0], NULL, 0, &kp));
    kp = one_thread(setcond, cargs);
    CHECK(cuGraphAddKernelNode_v2(&count, cp.conditional.phGraph_out[0], &step, 1, &kp));
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    CUresult r = cuGraphExecUpdate_v2(x, g2, &info);
    printf("update from a graph of the same shape: %s, result %d\n", result_name(r), (int)info.result);
    put_word(counter, 3);
    put_word(tally, 0);
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("updated WHILE from 3: body ran %u times, counter %u\n", word_at(tally), word_at(counter));
    CHECK(cuGraphCreate(&g3, 0));
    CHECK(cuGraphAddEmptyNode(&e3, g3, NULL, 0));
    memset(&info, 0, sizeof info);
    r = cuGraphExecUpdate_v2(x, g3, &info);
    printf("update from a graph of an empty node: %s, result %d, error node: %s, from: %s\n", result_name(r),
           (int)info.result, info.errorNode == e3 ? "the empty node" : "another",
           !info.errorFromNode ? "none" : info.errorFromNode == c2 ? "the conditional node" : "another");
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g3));
    CHECK(cuGraphDestroy(g2));

    /* A body filled by capturing a stream into it: a kernel, then (its
     * dependencies cleared) another beside it; the node runs both. */
    CUgraphConditionalHandle hc;
    CUstream cs;
    CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CHECK(cuGraphCreate(&g2, 0));
    CHECK(cuGraphConditionalHandleCreate(&hc, g2, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    cp = cond_params(hc, CU_GRAPH_COND_TYPE_IF, 1, ctx);
    CHECK(cuGraphAddNode(&c2, g2, NULL, 0, &cp));
    body = cp.conditional.phGraph_out[0];
    CHECK(cuStreamBeginCaptureToGraph(cs, body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, cs, margs, NULL));
    CHECK(cuStreamUpdateCaptureDependencies(cs, NULL, 0, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, cs, aargs, NULL));
    CUgraph ended;
    CHECK(cuStreamEndCapture(cs, &ended));
    CHECK(cuGraphGetRootNodes(body, NULL, &n));
    printf("captured into the IF node's body: %s graph, %zu roots\n", ended == body ? "the same" : "another", n);
    CHECK(cuGraphInstantiateWithFlags(&x, g2, 0));
    put_word(word, 0);
    put_word(tally, 0);
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("IF with a captured body: word %u, tally %u\n", word_at(word), word_at(tally));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g2));
    CHECK(cuStreamDestroy_v2(cs));

    /* What the driver refuses: body counts a kind does not have, a
     * handle it did not make. */
    CUgraphNode bad;
    cp = cond_params(hw, CU_GRAPH_COND_TYPE_IF, 3, ctx);
    printf("IF of 3 bodies: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &cp)));
    cp = cond_params(hw, CU_GRAPH_COND_TYPE_WHILE, 2, ctx);
    printf("WHILE of 2 bodies: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &cp)));
    cp = cond_params(hw, CU_GRAPH_COND_TYPE_IF, 0, ctx);
    printf("IF of no body: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &cp)));
    cp = cond_params(12345, CU_GRAPH_COND_TYPE_IF, 1, ctx);
    printf("a made-up handle: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &cp)));
    CHECK(cuGraphGetNodes(g, NULL, &n));
    printf("nodes left: %zu\n", n);
    CHECK(cuGraphDestroy(g));
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree_v2(w));
    return 0;
}

static int run(CUcontext ctx)
{
    CUstream st;
    CUdeviceptr b;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&b, ROW * ROWS));
    CHECK(cuMemsetD8_v2(b, 0, ROW * ROWS));

    CUgraph g;
    CUgraphNode alloc, set1, set2;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(ABYTES);
    CHECK(cuGraphAddMemAllocNode(&alloc, g, NULL, 0, &ap));
    CUdeviceptr a = ap.dptr;
    printf("allocation node: %s\n", a ? "an address" : "no address");
    CUDA_MEMSET_NODE_PARAMS sp = set_params(a + 8, 0x5a, 1, 40, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set1, g, &alloc, 1, &sp, ctx));
    sp = set_params(b + 4, 0x01020304u, 4, 2, ROWS, ROW);
    CHECK(cuGraphAddMemsetNode(&set2, g, NULL, 0, &sp, ctx));

    /* A kernel node filling 4 words from byte 64 of the allocation: its
     * parameters are read when it is added, not when it runs. */
    CUmodule mod;
    CUfunction fill;
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CUdeviceptr at = a + 64;
    unsigned value = 0xc0ffee11u;
    int words = 4;
    void *params[] = {&at, &value, &words};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = fill;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 4;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    CUgraphNode kernel;
    CHECK(cuGraphAddKernelNode_v2(&kernel, g, &set1, 1, &kp));
    value = 0;

    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    CUgraphNode nodes[8];
    printf("nodes: %zu\n", n);
    CHECK(cuGraphGetNodes(g, nodes, &n));
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(nodes[i], &t));
        printf("node %zu: type %d\n", i, (int)t);
    }
    CUDA_MEM_ALLOC_NODE_PARAMS back;
    memset(&back, 0, sizeof back);
    CHECK(cuGraphMemAllocNodeGetParams(alloc, &back));
    printf("allocation node's parameters: %zu bytes, %s address\n", back.bytesize,
           back.dptr == a ? "the same" : "another");

    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    unsigned char ha[96], hb[ROW * ROWS];
    CHECK(cuMemcpyDtoH_v2(ha, a, sizeof ha));
    CHECK(cuMemcpyDtoH_v2(hb, b, sizeof hb));
    print_bytes("allocation", ha, sizeof ha);
    print_bytes("2D set", hb, sizeof hb);

    /* The allocation is still in use: the graph cannot run again. A
     * launch's error may come at the next synchronization (remotely the
     * launch is queued): the first of the two is printed. */
    CUresult r = cuGraphLaunch(x, st);
    CUresult rs = cuStreamSynchronize(st);
    printf("relaunch while allocated: %s\n", result_name(r ? r : rs));
    CHECK(cuMemFreeAsync(a, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemsetD8_v2(b, 0, ROW * ROWS));
    printf("relaunch once freed: %s\n", result_name(cuGraphLaunch(x, st)));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(hb, b, sizeof hb));
    print_bytes("2D set again", hb, sizeof hb);
    CHECK(cuMemFreeAsync(a, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree_v2(b));
    return 0;
}

static int hostile(CUcontext ctx)
{
    CUdeviceptr b;
    CUgraph g;
    CUgraphNode node;
    CHECK(cuMemAlloc_v2(&b, ROW));
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(b + ROW / 2, 1, 1, ROW, 1, 0);
    printf("memset past its allocation: %s\n", result_name(cuGraphAddMemsetNode(&node, g, NULL, 0, &sp, ctx)));
    sp = set_params(b, 1, 1, ROW, 1, 0);
    printf("forged graph: %s\n", result_name(cuGraphAddMemsetNode(&node, (CUgraph)(uintptr_t)0x7f0000001000ull, NULL, 0, &sp, ctx)));
    sp = set_params((CUdeviceptr)(uintptr_t)&sp, 1, 1, 8, 1, 0);
    printf("memset into the program's memory: %s\n", result_name(cuGraphAddMemsetNode(&node, g, NULL, 0, &sp, ctx)));
    CUmemAccessDesc desc;
    memset(&desc, 0, sizeof desc);
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(ABYTES);
    ap.accessDescs = &desc;
    ap.accessDescCount = 1;
    printf("access descriptors: %s\n", result_name(cuGraphAddMemAllocNode(&node, g, NULL, 0, &ap)));
    char pageable[16];
    CUDA_MEMCPY3D cp = copy_params(CU_MEMORYTYPE_HOST, pageable, 0, CU_MEMORYTYPE_DEVICE, NULL, b, 16, 1, 16);
    printf("copy node from pageable memory: %s\n", result_name(cuGraphAddMemcpyNode(&node, g, NULL, 0, &cp, ctx)));
    cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_DEVICE, NULL, b + ROW - 8, 16, 1, 16);
    printf("copy node past its allocation: %s\n", result_name(cuGraphAddMemcpyNode(&node, g, NULL, 0, &cp, ctx)));
    CUgraphConditionalHandle h;
    CHECK(cuGraphConditionalHandleCreate(&h, g, ctx, 0, 0));
    CUgraphNodeParams np = cond_params(h, CU_GRAPH_COND_TYPE_SWITCH, 1u << 20, ctx);
    printf("conditional node of 2^20 bodies: %s\n", result_name(cuGraphAddNode(&node, g, NULL, 0, &np)));
    /* A node's body graph is the node's: destroyed alone it is refused;
     * with its node it is gone, and its name with it. */
    np = cond_params(h, CU_GRAPH_COND_TYPE_IF, 1, ctx);
    CHECK(cuGraphAddNode(&node, g, NULL, 0, &np));
    CUgraph body = np.conditional.phGraph_out[0];
    printf("a conditional node's body destroyed alone: %s\n", result_name(cuGraphDestroy(body)));
    CHECK(cuGraphDestroyNode(node));
    size_t n = 0;
    printf("the body of a destroyed node: %s\n", result_name(cuGraphGetNodes(body, NULL, &n)));
    sp = set_params(b, 1, 1, ROW, 1, 0);
    printf("then a memset in its memory: %s\n", result_name(cuGraphAddMemsetNode(&node, g, NULL, 0, &sp, ctx)));
    /* So is a child graph moved into its node: gone with the node's graph. */
    CUgraph moved, parent;
    CHECK(cuGraphCreate(&moved, 0));
    CHECK(cuGraphCreate(&parent, 0));
    CHECK(cuGraphAddMemsetNode(&node, moved, NULL, 0, &sp, ctx));
    np.type = CU_GRAPH_NODE_TYPE_GRAPH;
    memset(&np.graph, 0, sizeof np.graph);
    np.graph.graph = moved;
    np.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    CHECK(cuGraphAddNode(&node, parent, NULL, 0, &np));
    CHECK(cuGraphDestroy(parent));
    printf("a moved child graph once its parent is gone: %s\n", result_name(cuGraphGetNodes(moved, NULL, &n)));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(b));
    return 0;
}

/* Copy nodes: a pitched device-to-device copy of part of each row; then
 * pinned host memory up and back, the upload reading the host bytes at
 * the launch, not when the node was added. */
static int copies(CUcontext ctx)
{
    CUstream st;
    CUdeviceptr b, c;
    unsigned char hb[ROW * ROWS];
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&b, ROW * ROWS));
    CHECK(cuMemAlloc_v2(&c, ROW * ROWS));
    for (int i = 0; i < ROW * ROWS; i++)
        hb[i] = (unsigned char)(i + 1);
    CHECK(cuMemcpyHtoD_v2(b, hb, sizeof hb));
    CHECK(cuMemsetD8_v2(c, 0, ROW * ROWS));
    CUgraph g;
    CUgraphNode d2d, up, down;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMCPY3D cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_DEVICE, NULL, c, 8, ROWS, ROW);
    cp.srcXInBytes = 4;
    CHECK(cuGraphAddMemcpyNode(&d2d, g, NULL, 0, &cp, ctx));
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(hb, c, sizeof hb));
    print_bytes("device copy", hb, sizeof hb);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    unsigned char *pinned;
    CHECK(cuMemAllocHost_v2((void **)&pinned, 2 * ROW));
    memset(pinned, 0, 2 * ROW);
    CHECK(cuGraphCreate(&g, 0));
    cp = copy_params(CU_MEMORYTYPE_HOST, pinned, 0, CU_MEMORYTYPE_DEVICE, NULL, c, ROW, 1, ROW);
    CUresult r = cuGraphAddMemcpyNode(&up, g, NULL, 0, &cp, ctx);
    printf("pinned upload node: %s\n", result_name(r));
    if (r == CUDA_SUCCESS) {
        cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, c, CU_MEMORYTYPE_HOST, pinned + ROW, 0, ROW, 1, ROW);
        CHECK(cuGraphAddMemcpyNode(&down, g, &up, 1, &cp, ctx));
        CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
        for (int i = 0; i < ROW; i++)
            pinned[i] = (unsigned char)(0x80 + i);
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        print_bytes("pinned round trip", pinned + ROW, ROW);
        CHECK(cuGraphExecDestroy(x));
    }
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree_v2(b));
    CHECK(cuMemFree_v2(c));
    return 0;
}

/* Edges added after the nodes: a copy node added first, the memset it
 * must follow added after it, then the edge between them (the copy sees
 * the memset's bytes); an empty node joining them; root nodes; a clone
 * launched in place of the graph. */
/* Nodes by letter, for output that compares across runs. */
static const CUgraphNode *lettered;
static size_t nlettered;

static char letter(CUgraphNode h)
{
    for (size_t i = 0; i < nlettered; i++)
        if (lettered[i] == h)
            return (char)('A' + i);
    return h ? '?' : '-';
}

static void print_nodes(const char *what, const CUgraphNode *v, size_t n)
{
    printf("%s:", what);
    for (size_t i = 0; i < n; i++)
        printf(" %c", letter(v[i]));
    printf("\n");
}

/* g's edges, each way of asking: the count, all (with their data), two. */
static void print_edges(CUgraph g)
{
    CUgraphNode from[8], to[8];
    CUgraphEdgeData data[8];
    size_t n = 0;
    CHECK(cuGraphGetEdges(g, NULL, NULL, &n));
    printf("edges: %zu;", n);
    n = 8;
    CHECK(cuGraphGetEdges_v2(g, from, to, data, &n));
    for (size_t i = 0; i < n; i++)
        printf(" %c>%c(%u)", letter(from[i]), letter(to[i]), (unsigned)data[i].type);
    n = 2;
    CHECK(cuGraphGetEdges(g, from, to, &n));
    printf("; the first %zu: %c>%c %c>%c\n", n, letter(from[0]), letter(to[0]), letter(from[1]), letter(to[1]));
}

static int edges(CUcontext ctx)
{
    CUstream st;
    CUdeviceptr x, z;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&x, ROW));
    CHECK(cuMemAlloc_v2(&z, ROW));
    CHECK(cuMemsetD8_v2(x, 0, ROW));
    CHECK(cuMemsetD8_v2(z, 0, ROW));
    CUgraph g, c;
    CUgraphNode copy, set, join, set2;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMCPY3D cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, x, CU_MEMORYTYPE_DEVICE, NULL, z, 16, 1, 16);
    CHECK(cuGraphAddMemcpyNode(&copy, g, NULL, 0, &cp, ctx));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(x, 0x33, 1, 16, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
    size_t n = 0;
    CHECK(cuGraphGetRootNodes(g, NULL, &n));
    printf("roots before the edge: %zu\n", n);
    CHECK(cuGraphAddDependencies(g, &set, &copy, 1));
    CHECK(cuGraphGetRootNodes(g, NULL, &n));
    printf("roots after it: %zu\n", n);
    printf("the edge again: %s\n", result_name(cuGraphAddDependencies(g, &set, &copy, 1)));
    printf("an edge closing a cycle: %s\n", result_name(cuGraphAddDependencies(g, &copy, &set, 1)));
    CUgraphNode deps[] = {set, copy};
    CHECK(cuGraphAddEmptyNode(&join, g, deps, 2));
    sp = set_params(x + 32, 0x44, 1, 8, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set2, g, NULL, 0, &sp, ctx));
    CUgraphEdgeData plain[1];
    memset(plain, 0, sizeof plain);
    CHECK(cuGraphAddDependencies_v2(g, &join, &set2, plain, 1));
    CUgraphNodeType t;
    CHECK(cuGraphNodeGetType(join, &t));
    printf("join node: type %d\n", (int)t);
    /* A child graph setting the end of z, after the join. */
    CUgraph child, inner;
    CUgraphNode cset, cnode;
    CHECK(cuGraphCreate(&child, 0));
    sp = set_params(z + 48, 0x55, 1, 4, 1, 0);
    CHECK(cuGraphAddMemsetNode(&cset, child, NULL, 0, &sp, ctx));
    CHECK(cuGraphAddChildGraphNode(&cnode, g, &join, 1, child));
    CHECK(cuGraphDestroy(child));
    CHECK(cuGraphChildGraphNodeGetGraph(cnode, &inner));
    CHECK(cuGraphGetNodes(inner, NULL, &n));
    printf("child graph node: %zu node inside\n", n);
    /* The graph's shape read back: A copy, B set, C join, D set2, E child. */
    const CUgraphNode named[] = {copy, set, join, set2, cnode};
    lettered = named;
    nlettered = 5;
    print_edges(g);
    CUgraphNode v[4];
    CUgraphEdgeData vd[4];
    n = 4;
    CHECK(cuGraphNodeGetDependencies(join, v, &n));
    print_nodes("the join's dependencies", v, n);
    n = 4;
    CHECK(cuGraphNodeGetDependentNodes_v2(join, v, vd, &n));
    print_nodes("its dependents", v, n);
    n = 0;
    CHECK(cuGraphNodeGetDependentNodes_v2(set2, NULL, NULL, &n));
    printf("set2's dependents: %zu\n", n);
    CHECK(cuGraphRemoveDependencies(g, &join, &set2, 1));
    print_edges(g);
    printf("the edge removed again: %s\n", result_name(cuGraphRemoveDependencies(g, &join, &set2, 1)));
    CUgraphNode in0;
    n = 1;
    CHECK(cuGraphGetNodes(inner, &in0, &n));
    printf("an edge to the child graph's node: %s\n", result_name(cuGraphRemoveDependencies(g, &join, &in0, 1)));
    CHECK(cuGraphRemoveDependencies_v2(g, &set, &copy, plain, 1));
    CHECK(cuGraphAddDependencies(g, &join, &set2, 1));
    CHECK(cuGraphAddDependencies(g, &set, &copy, 1));
    print_edges(g);
    CHECK(cuGraphClone(&c, g));
    CHECK(cuGraphGetNodes(c, NULL, &n));
    printf("clone: %zu nodes\n", n);
    CUgraphNode cjoin;
    CHECK(cuGraphNodeFindInClone(&cjoin, join, c));
    n = 4;
    CHECK(cuGraphNodeGetDependencies(cjoin, v, &n));
    printf("the clone's join found: %zu dependencies, its own nodes %s\n", n, v[0] != set && v[0] != copy ? "yes" : "no");
    printf("a node not of the original: %s\n", result_name(cuGraphNodeFindInClone(&cjoin, cjoin, c)));
    n = 0;
    CHECK(cuGraphGetEdges(c, NULL, NULL, &n));
    printf("the clone's edges: %zu\n", n);
    /* A free node names what it frees. */
    CUgraph gm;
    CUgraphNode malloc_node, free_node;
    CHECK(cuGraphCreate(&gm, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(ABYTES);
    CHECK(cuGraphAddMemAllocNode(&malloc_node, gm, NULL, 0, &ap));
    CHECK(cuGraphAddMemFreeNode(&free_node, gm, &malloc_node, 1, ap.dptr));
    CUdeviceptr freed = 0;
    CHECK(cuGraphMemFreeNodeGetParams(free_node, &freed));
    printf("the free node frees the allocation node's: %s\n", freed == ap.dptr ? "yes" : "no");
    printf("an allocation node's: %s\n", result_name(cuGraphMemFreeNodeGetParams(malloc_node, &freed)));
    CHECK(cuGraphDestroy(gm));
    CUgraphExec e;
    CHECK(cuGraphInstantiateWithFlags(&e, c, 0));
    CHECK(cuGraphLaunch(e, st));
    CHECK(cuStreamSynchronize(st));
    unsigned char hx[ROW], hz[ROW];
    CHECK(cuMemcpyDtoH_v2(hx, x, ROW));
    CHECK(cuMemcpyDtoH_v2(hz, z, ROW));
    print_bytes("x", hx, ROW);
    print_bytes("z", hz, ROW);
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(c));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(x));
    CHECK(cuMemFree_v2(z));
    return 0;
}

/* A memset node's parameters read and changed, on the graph's node and on
 * an executable's copy; an executable's nodes turned off and on. */
static int params(CUcontext ctx)
{
    CUstream st;
    CUdeviceptr b;
    CUgraph g;
    CUgraphNode set, copy;
    unsigned char h[ROW];
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&b, 2 * ROW));
    CHECK(cuMemsetD8_v2(b, 0, 2 * ROW));
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(b, 0x11, 1, 8, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
    CUDA_MEMCPY3D cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_DEVICE, NULL, b + ROW, 8, 1, 8);
    CHECK(cuGraphAddMemcpyNode(&copy, g, &set, 1, &cp, ctx));
    CUDA_MEMSET_NODE_PARAMS got;
    CHECK(cuGraphMemsetNodeGetParams(set, &got));
    printf("memset node: value %#x, element %u, width %zu, height %zu, at the allocation %s\n", got.value,
           got.elementSize, got.width, got.height, got.dst == b ? "yes" : "no");
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    sp = set_params(b, 0x2222, 2, 4, 1, 0);
    CHECK(cuGraphExecMemsetNodeSetParams(x, set, &sp, ctx));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, b + ROW, 8));
    print_bytes("the executable's set to 16-bit 0x2222", h, 8);
    CHECK(cuGraphMemsetNodeGetParams(set, &got));
    printf("the graph's node keeps value %#x\n", got.value);
    sp = set_params(b, 0x33, 1, 8, 1, 0);
    CHECK(cuGraphMemsetNodeSetParams(set, &sp));
    CHECK(cuGraphMemsetNodeGetParams(set, &got));
    printf("the graph's node set: value %#x\n", got.value);
    sp = set_params(b + 4 * ROW, 0x44, 1, 8, 1, 0);
    printf("set outside the memory: %s\n", result_name(cuGraphMemsetNodeSetParams(set, &sp)));
    printf("an executable's set outside it: %s\n", result_name(cuGraphExecMemsetNodeSetParams(x, set, &sp, ctx)));
    unsigned on = 9;
    CHECK(cuGraphNodeGetEnabled(x, set, &on));
    printf("enabled: %u\n", on);
    CHECK(cuMemsetD8_v2(b, 0, 2 * ROW));
    CHECK(cuGraphNodeSetEnabled(x, set, 0));
    CHECK(cuGraphNodeGetEnabled(x, set, &on));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, b + ROW, 8));
    printf("enabled: %u; ", on);
    print_bytes("launched without the memset", h, 8);
    CHECK(cuGraphNodeSetEnabled(x, set, 1));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, b + ROW, 8));
    print_bytes("with it again", h, 8);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(b));
    CHECK(cuStreamDestroy_v2(st));
    return 0;
}

/* Event nodes: a record node and a wait node, their events read back and
 * changed (the graph's, the executable's), the recorded event waited for
 * and timed against one recorded before the launch. */
static int events(CUcontext ctx)
{
    CUstream st, other;
    CUdeviceptr b;
    CUevent before, e1, e2, gate;
    CUgraph g;
    CUgraphNode set, rec, wait;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuStreamCreate(&other, 0));
    CHECK(cuMemAlloc_v2(&b, ROW));
    CHECK(cuEventCreate(&before, 0));
    CHECK(cuEventCreate(&e1, 0));
    CHECK(cuEventCreate(&e2, 0));
    CHECK(cuEventCreate(&gate, 0));
    CHECK(cuEventRecord(gate, other));
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddEventWaitNode(&wait, g, NULL, 0, gate));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(b, 0x5a, 1, ROW, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, &wait, 1, &sp, ctx));
    CHECK(cuGraphAddEventRecordNode(&rec, g, &set, 1, e1));
    CUevent got = NULL;
    CHECK(cuGraphEventRecordNodeGetEvent(rec, &got));
    printf("record node's event: e1 %s\n", got == e1 ? "yes" : "no");
    CHECK(cuGraphEventWaitNodeGetEvent(wait, &got));
    printf("wait node's event: gate %s\n", got == gate ? "yes" : "no");
    printf("a memset node's event: %s\n", result_name(cuGraphEventRecordNodeGetEvent(set, &got)));
    printf("a record node's wait event: %s\n", result_name(cuGraphEventWaitNodeGetEvent(rec, &got)));
    CUgraphNodeType tr, tw;
    CHECK(cuGraphNodeGetType(rec, &tr));
    CHECK(cuGraphNodeGetType(wait, &tw));
    printf("types: record %d, wait %d\n", (int)tr, (int)tw);
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphEventRecordNodeSetEvent(rec, e2));
    CHECK(cuGraphEventRecordNodeGetEvent(rec, &got));
    printf("the graph's node set to e2: %s\n", got == e2 ? "yes" : "no");
    CHECK(cuEventRecord(before, st));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuEventSynchronize(e1));
    float ms = -1;
    CHECK(cuEventElapsedTime_v2(&ms, before, e1));
    printf("the executable recorded e1 (its copy kept it): %s, after the event before it: %s\n",
           result_name(cuEventQuery(e1)), ms >= 0 ? "yes" : "no");
    CHECK(cuGraphExecEventRecordNodeSetEvent(x, rec, e2));
    CHECK(cuGraphExecEventWaitNodeSetEvent(x, wait, before));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("then e2: %s\n", result_name(cuEventQuery(e2)));
    printf("set to no event: %s\n", result_name(cuGraphExecEventRecordNodeSetEvent(x, rec, NULL)));
    unsigned char h[ROW];
    CHECK(cuMemcpyDtoH_v2(h, b, ROW));
    print_bytes("set", h, 4);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuEventDestroy_v2(before));
    CHECK(cuEventDestroy_v2(e1));
    CHECK(cuEventDestroy_v2(e2));
    CHECK(cuEventDestroy_v2(gate));
    CHECK(cuMemFree_v2(b));
    return 0;
}

static int calls;

struct seen {
    unsigned char *before; /* copied into before the node */
    unsigned a;            /* what the node saw */
};

static void host_read_fn(void *data)
{
    struct seen *s = data;
    s->a = s->before[0] | (unsigned)s->before[ROW - 1] << 8;
    s->before[1] = 99; /* the program's own change, which must stay */
}

/* A memset node, a copy node into before, a host node, a copy node into
 * after: added node by node, captured (the same, a stream's work), or with
 * the host node in a child graph after the copy node (child) or in a
 * child graph with it (within). */
enum { HR_ADDED, HR_CAPTURED, HR_CHILD, HR_WITHIN };

static int host_read(CUcontext ctx, int how)
{
    static const char *const names[] = {"added", "captured", "child", "within"};
    int captured = how == HR_CAPTURED;
    CUstream st;
    CUdeviceptr b;
    CUgraph g;
    static unsigned char before[ROW], after[ROW];
    struct seen seen = {before, 0};
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&b, ROW));
    if (captured) {
        CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK(cuMemsetD8Async(b, 7, ROW, st));
        CHECK(cuMemcpyDtoHAsync_v2(before, b, ROW, st));
        CHECK(cuLaunchHostFunc(st, host_read_fn, &seen));
        CHECK(cuMemcpyDtoHAsync_v2(after, b, ROW, st));
        CHECK(cuStreamEndCapture(st, &g));
    } else {
        CUgraphNode set, up, host, down;
        CHECK(cuGraphCreate(&g, 0));
        CUDA_MEMSET_NODE_PARAMS sp = set_params(b, 7, 1, ROW, 1, 0);
        CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
        CUDA_MEMCPY3D c = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_HOST, before, 0, ROW, 1, ROW);
        CUDA_HOST_NODE_PARAMS hp = {host_read_fn, &seen};
        CUgraph child = NULL;
        CUgraphNode in_child;
        if (how != HR_ADDED)
            CHECK(cuGraphCreate(&child, 0));
        if (how == HR_WITHIN)
            CHECK(cuGraphAddMemcpyNode(&in_child, child, NULL, 0, &c, ctx));
        else
            CHECK(cuGraphAddMemcpyNode(&up, g, &set, 1, &c, ctx));
        CUresult r = child ? cuGraphAddHostNode(&host, child, how == HR_WITHIN ? &in_child : NULL, how == HR_WITHIN, &hp)
                           : cuGraphAddHostNode(&host, g, &up, 1, &hp);
        if (how == HR_ADDED)
            printf("cuGraphAddHostNode: %s\n", result_name(r));
        if (r != CUDA_SUCCESS)
            return 0;
        if (child) { /* the child graph in the parent's place of the host node */
            CHECK(cuGraphAddChildGraphNode(&host, g, how == HR_WITHIN ? &set : &up, 1, child));
            CHECK(cuGraphDestroy(child));
        }
        c = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_HOST, after, 0, ROW, 1, ROW);
        CHECK(cuGraphAddMemcpyNode(&down, g, &host, 1, &c, ctx));
    }
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        memset(before, 0, ROW);
        memset(after, 0, ROW);
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        printf("%s launch %d: the host node saw %#x; then before[0..1] %u %u, after[0] %u\n", names[how], i, seen.a,
               before[0], before[1], after[0]);
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamDestroy_v2(st));
    CHECK(cuMemFree_v2(b));
    return 0;
}

static void host_fn(void *data)
{
    calls += *(int *)data;
}

/* A graph of a memset node setting v into ROW bytes at d, then an empty
 * node after it (more: a second memset node, another topology). */
static CUgraph set_then_empty(CUcontext ctx, CUdeviceptr d, unsigned v, int more)
{
    CUgraph g;
    CUgraphNode set, empty;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(d, v, 1, ROW, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
    CHECK(cuGraphAddEmptyNode(&empty, g, &set, 1));
    if (more)
        CHECK(cuGraphAddMemsetNode(&set, g, &empty, 1, &sp, ctx));
    return g;
}

/* An executable's child graph node set to another graph's parameters
 * (cuGraphExecChildGraphNodeSetParams): it runs them, the graph's node
 * does not; another topology and a node that is no child graph's refused.
 * With pageable, the new child copies into the program's memory. */
static int child_params(CUcontext ctx, int pageable)
{
    CUstream st;
    CUdeviceptr a, b;
    unsigned char got[ROW];
    static unsigned char host[ROW];
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&a, ROW));
    CHECK(cuMemAlloc_v2(&b, ROW));
    CUgraph g, c1 = set_then_empty(ctx, b, 2, 0), c5 = set_then_empty(ctx, b, 5, 0), c3 = set_then_empty(ctx, b, 3, 1);
    CUgraphNode set, child;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(a, 1, 1, ROW, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
    CHECK(cuGraphAddChildGraphNode(&child, g, &set, 1, c1));
    CUgraphExec x, y;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    if (pageable) { /* children that copy to device memory, then to the program's */
        CUgraph cd, ch, gp;
        CUgraphNode s2, s5, cp, node;
        CUgraphExec xp;
        CHECK(cuGraphCreate(&cd, 0));
        CHECK(cuGraphCreate(&ch, 0));
        CHECK(cuGraphCreate(&gp, 0));
        CUDA_MEMSET_NODE_PARAMS p2 = set_params(b, 2, 1, ROW, 1, 0), p5 = set_params(b, 5, 1, ROW, 1, 0);
        CHECK(cuGraphAddMemsetNode(&s2, cd, NULL, 0, &p2, ctx));
        CHECK(cuGraphAddMemsetNode(&s5, ch, NULL, 0, &p5, ctx));
        CUDA_MEMCPY3D dd = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_DEVICE, NULL, a, ROW, 1, ROW);
        CUDA_MEMCPY3D dh = copy_params(CU_MEMORYTYPE_DEVICE, NULL, b, CU_MEMORYTYPE_HOST, host, 0, ROW, 1, ROW);
        CHECK(cuGraphAddMemcpyNode(&cp, cd, &s2, 1, &dd, ctx));
        CHECK(cuGraphAddMemcpyNode(&cp, ch, &s5, 1, &dh, ctx));
        CHECK(cuGraphAddChildGraphNode(&node, gp, NULL, 0, cd));
        CHECK(cuGraphInstantiateWithFlags(&xp, gp, 0));
        printf("a child copying into the program's memory: %s\n",
               result_name(cuGraphExecChildGraphNodeSetParams(xp, node, ch)));
        return 0;
    }
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(got, b, ROW));
    printf("child node: %u", got[0]);
    CHECK(cuGraphExecChildGraphNodeSetParams(x, child, c5));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(got, b, ROW));
    printf(", the executable's set to another child's: %u", got[0]);
    CHECK(cuGraphInstantiateWithFlags(&y, g, 0));
    CHECK(cuGraphLaunch(y, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(got, b, ROW));
    printf(", the graph's node: %u\n", got[0]);
    printf("another topology: %s, no child graph's node: %s\n",
           result_name(cuGraphExecChildGraphNodeSetParams(x, child, c3)),
           result_name(cuGraphExecChildGraphNodeSetParams(x, set, c5)));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphExecDestroy(y));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(c1));
    CHECK(cuGraphDestroy(c5));
    CHECK(cuGraphDestroy(c3));
    CHECK(cuStreamDestroy_v2(st));
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    return 0;
}

/* User objects: each destructor adds its object's value to destroyed. */
static int destroyed;

static void destroy_fn(void *data) { __atomic_add_fetch(&destroyed, *(int *)data, __ATOMIC_RELEASE); }

/* What the destructors added by now, once it reached want (a driver may
 * run them on a thread of its own, a little later; 5 s at most). */
static int destroyed_by(int want)
{
    for (int i = 0; i < 500 && __atomic_load_n(&destroyed, __ATOMIC_ACQUIRE) < want; i++)
        usleep(10000);
    return __atomic_load_n(&destroyed, __ATOMIC_ACQUIRE);
}

/* The program's references, a graph's (moved or its own), an executable's
 * and a clone's: a destructor runs once the last goes, and not before. */
static int user_objects(CUcontext ctx)
{
    static int one = 1, ten = 10, hundred = 100;
    CUuserObject a, b, c;
    CHECK(cuUserObjectCreate(&a, &one, destroy_fn, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CHECK(cuUserObjectRetain(a, 2));
    CHECK(cuUserObjectRelease(a, 2));
    printf("a: 1 reference left, destroyed %d\n", destroyed_by(0));
    CHECK(cuUserObjectRelease(a, 1));
    printf("a: released, destroyed %d\n", destroyed_by(1));

    CUstream st;
    CUdeviceptr d;
    CUgraph g, g2;
    CUgraphNode set;
    CUgraphExec x;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&d, ROW));
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(d, 7, 1, ROW, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
    CHECK(cuUserObjectCreate(&b, &ten, destroy_fn, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CHECK(cuGraphRetainUserObject(g, b, 1, CU_GRAPH_USER_OBJECT_MOVE));
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("b: its graph gone, its executable launched, destroyed %d\n", destroyed_by(1));
    CHECK(cuGraphExecDestroy(x));
    printf("b: the executable gone, destroyed %d\n", destroyed_by(11));

    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuUserObjectCreate(&c, &hundred, destroy_fn, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CHECK(cuGraphRetainUserObject(g, c, 2, 0));
    CHECK(cuGraphReleaseUserObject(g, c, 1));
    CHECK(cuUserObjectRelease(c, 1));
    CHECK(cuGraphClone(&g2, g));
    CHECK(cuGraphDestroy(g));
    printf("c: held by a clone alone, destroyed %d\n", destroyed_by(11));
    CHECK(cuGraphDestroy(g2));
    printf("c: the clone gone, destroyed %d\n", destroyed_by(111));

    CUuserObject bad;
    printf("no flag: %s, no reference: %s\n", result_name(cuUserObjectCreate(&bad, &one, destroy_fn, 1, 0)),
           result_name(cuUserObjectCreate(&bad, &one, destroy_fn, 0, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)));
    CHECK(cuStreamDestroy_v2(st));
    CHECK(cuMemFree_v2(d));
    printf("user objects: done\n");
    return 0;
}

/* A host node after a memset node, in a graph launched three times: the
 * program's function runs at each launch. */
static int host(CUcontext ctx)
{
    CUstream st;
    CUdeviceptr b;
    CUgraph g;
    CUgraphNode set, node;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&b, ROW));
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS sp = set_params(b, 7, 1, ROW, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &sp, ctx));
    int step = 10;
    CUDA_HOST_NODE_PARAMS hp = {host_fn, &step};
    CUresult r = cuGraphAddHostNode(&node, g, &set, 1, &hp);
    printf("cuGraphAddHostNode: %s\n", result_name(r));
    if (r != CUDA_SUCCESS)
        return 0;
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (int i = 0; i < 3; i++)
        CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("after 3 launches: host node ran for %d\n", calls);
    step = 1;
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("its data changed, one more: %d\n", calls);
    /* Its parameters read back, and changed: the executable's copy alone,
     * then the graph's node (an executable made after has it). */
    CUDA_HOST_NODE_PARAMS got;
    CHECK(cuGraphHostNodeGetParams(node, &got));
    printf("read back: the same function %s, the same data %s\n", got.fn == host_fn ? "yes" : "no",
           got.userData == &step ? "yes" : "no");
    int hundred = 100, thousand = 1000;
    CUDA_HOST_NODE_PARAMS other = {host_fn, &hundred};
    CHECK(cuGraphExecHostNodeSetParams(x, node, &other));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuGraphHostNodeGetParams(node, &got));
    printf("the executable's set to +100: %d; the graph's node keeps its data: %s\n", calls,
           got.userData == &step ? "yes" : "no");
    other.userData = &thousand;
    CHECK(cuGraphHostNodeSetParams(node, &other));
    CUgraphExec y;
    CHECK(cuGraphInstantiateWithFlags(&y, g, 0));
    CHECK(cuGraphLaunch(y, st));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("the graph's node set to +1000, a new executable and the old one: %d\n", calls);
    printf("a memset node's: %s\n", result_name(cuGraphHostNodeGetParams(set, &got)));
    printf("no function: %s\n", result_name(cuGraphHostNodeSetParams(node, &(CUDA_HOST_NODE_PARAMS){NULL, NULL})));
    CHECK(cuGraphExecDestroy(y));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(b));
    return 0;
}

/* Copies with the program's pageable memory (malloc, the stack, static
 * data): the graph reads and writes those bytes at each launch. */
static unsigned cap_in[8], cap_uva[8];

static void print_words(const char *what, const unsigned *w, size_t n)
{
    printf("%s:", what);
    for (size_t i = 0; i < n; i++)
        printf(" %u", w[i]);
    printf("\n");
}

static int pageable(CUcontext ctx)
{
    CUstream st;
    CUdeviceptr d, dd;
    CUmodule mod;
    CUfunction add;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&d, sizeof cap_in));
    CHECK(cuMemAlloc_v2(&dd, ROW * ROWS));
    CHECK(cuMemsetD8_v2(dd, 0, ROW * ROWS));
    CHECK(cuModuleLoadData(&mod, COND_MODULE));
    CHECK(cuModuleGetFunction(&add, mod, "add"));
    unsigned *out = malloc(sizeof cap_in);
    unsigned step = 100;
    int words = 8;
    void *aargs[] = {&d, &step, &words};

    /* Captured: up, +100, down, and a copy by address (cudaMemcpyDefault). */
    CUgraph g;
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemcpyHtoDAsync_v2(d, cap_in, sizeof cap_in, st));
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, st, aargs, NULL));
    CHECK(cuMemcpyDtoHAsync_v2(out, d, sizeof cap_in, st));
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)cap_uva, d, sizeof cap_uva, st));
    printf("capture: %s\n", result_name(cuStreamEndCapture(st, &g)));
    size_t n = 0;
    CHECK(cuGraphGetNodes(g, NULL, &n));
    printf("captured nodes: %zu\n", n);
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (unsigned k = 0; k < 3; k++) {
        for (unsigned i = 0; i < 8; i++)
            cap_in[i] = k * 10 + i;
        memset(out, 0xff, sizeof cap_in);
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        print_words("launch down", out, 8);
        print_words("launch by address", cap_uva, 8);
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    /* Added: three pitched rows of 8 bytes up, +1 on each word, down into
     * other rows; the bytes between the rows stay the program's. */
    unsigned char rows[ROW * ROWS], back[ROW * ROWS], h2h_src[8], h2h_dst[8];
    memset(back, 0, sizeof back);
    back[0] = 0x33, back[16] = 0x34, back[2 * ROW + 20] = 0x35; /* between the rows: the program's */
    memset(h2h_dst, 0, sizeof h2h_dst);
    for (int i = 0; i < ROW * ROWS; i++)
        rows[i] = (unsigned char)i;
    for (int i = 0; i < 8; i++)
        h2h_src[i] = (unsigned char)(0xa0 + i);
    CUgraphNode up, kern, down, h2h;
    CHECK(cuGraphCreate(&g, 0));
    CUDA_MEMCPY3D cp = copy_params(CU_MEMORYTYPE_HOST, rows, 0, CU_MEMORYTYPE_DEVICE, NULL, dd, 8, ROWS, ROW);
    cp.srcXInBytes = 4;
    printf("pageable upload node: %s\n", result_name(cuGraphAddMemcpyNode(&up, g, NULL, 0, &cp, ctx)));
    unsigned one = 1;
    int rwords = ROW * ROWS / 4;
    void *rargs[] = {&dd, &one, &rwords};
    CUDA_KERNEL_NODE_PARAMS kp = one_thread(add, rargs);
    CHECK(cuGraphAddKernelNode_v2(&kern, g, &up, 1, &kp));
    cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, dd, CU_MEMORYTYPE_HOST, back, 0, 8, ROWS, ROW);
    cp.dstXInBytes = 8;
    printf("pageable download node: %s\n", result_name(cuGraphAddMemcpyNode(&down, g, &kern, 1, &cp, ctx)));
    cp = copy_params(CU_MEMORYTYPE_HOST, h2h_src, 0, CU_MEMORYTYPE_HOST, h2h_dst, 0, 8, 1, 8);
    printf("host to host node: %s\n", result_name(cuGraphAddMemcpyNode(&h2h, g, NULL, 0, &cp, ctx)));
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (int k = 0; k < 2; k++) {
        rows[4] = (unsigned char)(0x40 + k);
        h2h_src[0] = (unsigned char)(0x50 + k);
        CHECK(cuMemsetD8_v2(dd, 0, ROW * ROWS));
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        printf("launch %d ", k);
        print_bytes("rows back", back, sizeof back);
        print_bytes("host to host", h2h_dst, 8);
    }
    CHECK(cuGraphExecDestroy(x));

    /* A clone outlives its graph; a child graph node copies it in. */
    CUgraph c, parent;
    CUgraphNode child;
    CHECK(cuGraphClone(&c, g));
    CHECK(cuGraphDestroy(g));
    rows[4] = 0x77;
    CHECK(cuGraphInstantiateWithFlags(&x, c, 0));
    CHECK(cuMemsetD8_v2(dd, 0, ROW * ROWS));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuCtxSynchronize());
    print_bytes("clone's rows back", back, ROW);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphCreate(&parent, 0));
    CHECK(cuGraphAddChildGraphNode(&child, parent, NULL, 0, c));
    CHECK(cuGraphDestroy(c));
    rows[4] = 0x78;
    CHECK(cuGraphInstantiateWithFlags(&x, parent, 0));
    CHECK(cuMemsetD8_v2(dd, 0, ROW * ROWS));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_bytes("child graph's rows back", back, ROW);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(parent));

    /* An executable updated to a graph of the same shape on other host
     * memory copies that memory from then on. */
    unsigned a_in[8], a_out[8], b_in[8], b_out[8];
    CUgraph ga, gb;
    CUgraphNode n1, n2, a_down;
    for (unsigned i = 0; i < 8; i++)
        a_in[i] = i, b_in[i] = 1000 + i, a_out[i] = b_out[i] = 0;
    CHECK(cuGraphCreate(&ga, 0));
    cp = copy_params(CU_MEMORYTYPE_HOST, a_in, 0, CU_MEMORYTYPE_DEVICE, NULL, d, 32, 1, 32);
    CHECK(cuGraphAddMemcpyNode(&n1, ga, NULL, 0, &cp, ctx));
    cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, d, CU_MEMORYTYPE_HOST, a_out, 0, 32, 1, 32);
    CHECK(cuGraphAddMemcpyNode(&a_down, ga, &n1, 1, &cp, ctx));
    CHECK(cuGraphCreate(&gb, 0));
    cp = copy_params(CU_MEMORYTYPE_HOST, b_in, 0, CU_MEMORYTYPE_DEVICE, NULL, d, 32, 1, 32);
    CHECK(cuGraphAddMemcpyNode(&n1, gb, NULL, 0, &cp, ctx));
    cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, d, CU_MEMORYTYPE_HOST, b_out, 0, 32, 1, 32);
    CHECK(cuGraphAddMemcpyNode(&n2, gb, &n1, 1, &cp, ctx));
    CHECK(cuGraphInstantiateWithFlags(&x, ga, 0));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    printf("update: %s\n", result_name(cuGraphExecUpdate_v2(x, gb, &info)));
    CHECK(cuGraphDestroy(gb));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_words("before the update", a_out, 8);
    print_words("after it", b_out, 8);
    CHECK(cuGraphExecDestroy(x));

    /* An executable's node set to copy into other host memory writes that
     * memory from then on, and no longer the old one. */
    unsigned c_out[8];
    memset(c_out, 0, sizeof c_out);
    memset(a_out, 0, sizeof a_out);
    CHECK(cuGraphInstantiateWithFlags(&x, ga, 0));
    cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, d, CU_MEMORYTYPE_HOST, c_out, 0, 32, 1, 32);
    printf("executable's node set: %s\n", result_name(cuGraphExecMemcpyNodeSetParams(x, a_down, &cp, ctx)));
    for (unsigned i = 0; i < 8; i++)
        a_in[i] = 500 + i;
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_words("the node's new memory", c_out, 8);
    print_words("its old memory", a_out, 8);
    CHECK(cuGraphExecDestroy(x));
    /* The graph's node read back as given, then set to other memory: an
     * executable made after copies there. */
    CUDA_MEMCPY3D back3;
    CHECK(cuGraphMemcpyNodeGetParams(a_down, &back3));
    printf("the graph's node reads back: into a_out %s, from d %s, %zu bytes\n", back3.dstHost == a_out ? "yes" : "no",
           back3.srcDevice == d ? "yes" : "no", back3.WidthInBytes);
    memset(c_out, 0, sizeof c_out);
    memset(a_out, 0, sizeof a_out);
    cp = copy_params(CU_MEMORYTYPE_DEVICE, NULL, d, CU_MEMORYTYPE_HOST, c_out, 0, 16, 1, 16);
    printf("graph's node set: %s\n", result_name(cuGraphMemcpyNodeSetParams(a_down, &cp)));
    CHECK(cuGraphMemcpyNodeGetParams(a_down, &back3));
    printf("it reads back: into c_out %s, %zu bytes\n", back3.dstHost == c_out ? "yes" : "no", back3.WidthInBytes);
    CHECK(cuGraphInstantiateWithFlags(&x, ga, 0));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_words("an executable made after writes c_out", c_out, 8);
    print_words("and not a_out", a_out, 8);
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(ga));

    /* Graphs made and destroyed take no memory with them. */
    size_t big = 8u << 20;
    unsigned char *mem = calloc(1, big);
    CUdeviceptr bd;
    CHECK(cuMemAlloc_v2(&bd, big));
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < 200 && r == CUDA_SUCCESS; i++) {
        CHECK(cuGraphCreate(&g, 0));
        cp = copy_params(CU_MEMORYTYPE_HOST, mem, 0, CU_MEMORYTYPE_DEVICE, NULL, bd, big, 1, big);
        r = cuGraphAddMemcpyNode(&up, g, NULL, 0, &cp, ctx);
        CHECK(cuGraphDestroy(g));
    }
    printf("200 graphs of an 8 MiB node: %s\n", result_name(r));
    free(mem);
    free(out);
    CHECK(cuMemFree_v2(bd));
    CHECK(cuMemFree_v2(d));
    CHECK(cuMemFree_v2(dd));
    CHECK(cuModuleUnload(mod));
    return 0;
}

static int captureinfo(CUcontext ctx)
{
    (void)ctx;
    CUstream st;
    CUdeviceptr w;
    CUmodule mod;
    CUfunction fill, add;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&w, 4));
    CHECK(cuModuleLoadData(&mod, COND_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuModuleGetFunction(&add, mod, "add"));
    unsigned five = 5, ten = 10, hundred = 100;
    int one = 1;
    void *fargs[] = {&w, &five, &one}, *targs[] = {&w, &ten, &one}, *hargs[] = {&w, &hundred, &one};
    CUstreamCaptureStatus status;
    cuuint64_t id = 0;
    CUgraph g = (CUgraph)1, again = NULL, ended = NULL;
    const CUgraphNode *deps = NULL;
    const CUgraphEdgeData *edges = (const CUgraphEdgeData *)1;
    size_t n = 7;
    CUresult r = cuStreamGetCaptureInfo_v2(st, &status, &id, &g, &deps, &n);
    printf("not capturing: %s, status %d, %zu dependencies, %s\n", result_name(r), (int)status, n,
           g ? "a graph" : "no graph");
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, st, fargs, NULL));
    CHECK(cuStreamGetCaptureInfo_v2(st, &status, &id, &g, &deps, &n));
    printf("capturing: status %d, %zu dependencies, %s\n", (int)status, n, g ? "a graph" : "no graph");
    CUgraphNode node;
    CUDA_KERNEL_NODE_PARAMS kp = one_thread(add, targs);
    CHECK(cuGraphAddKernelNode_v2(&node, g, deps, n, &kp));
    CHECK(cuStreamUpdateCaptureDependencies(st, &node, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
    CHECK(cuStreamGetCaptureInfo_v3(st, &status, &id, &again, &deps, &edges, &n));
    printf("after the node: %zu dependencies, %s, edge data %s, the same graph: %s\n", n,
           n == 1 && deps[0] == node ? "the node" : "not the node", edges ? "some" : "none", again == g ? "yes" : "no");
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, st, hargs, NULL));
    r = cuStreamEndCapture(st, &ended);
    printf("end: %s, the capture's graph: %s\n", result_name(r), ended == g ? "yes" : "no");
    CHECK(cuGraphGetNodes(ended, NULL, &n));
    printf("nodes: %zu\n", n);
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, ended, 0));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    printf("word: %u (fill 5, then +10 by the node, then +100)\n", word_at(w));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(ended));
    CHECK(cuModuleUnload(mod));
    CHECK(cuMemFree_v2(w));
    return 0;
}

typedef CUresult (*kget_fn)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*kset_fn)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*kexec_fn)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);

static void *resolve12(const char *name, void *v2)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CHECK(cuGetProcAddress_v2(name, &p, 12000, 0, &found));
    printf("%s at 12000: %s, the _v2 entry point: %s\n", name,
           found == CU_GET_PROC_ADDRESS_SUCCESS ? "found" : "not found", p == v2 ? "yes" : "no");
    if (!p)
        exit(1);
    return p;
}

static void print_kernel_node(const char *what, kget_fn get, CUgraphNode node, CUfunction fill, CUfunction add,
                              CUdeviceptr w)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    CUresult r = get(node, &p);
    if (r != CUDA_SUCCESS) {
        printf("%s: %s\n", what, result_name(r));
        return;
    }
    CUdeviceptr at = *(CUdeviceptr *)p.kernelParams[0];
    printf("%s: %s, grid %ux%ux%u, block %ux%ux%u, shared %u, word %lld, value %u, count %d\n", what,
           p.func == fill ? "fill" : p.func == add ? "add" : "another function", p.gridDimX, p.gridDimY, p.gridDimZ,
           p.blockDimX, p.blockDimY, p.blockDimZ, p.sharedMemBytes, (long long)(at - w) / 4,
           *(unsigned *)p.kernelParams[1], *(int *)p.kernelParams[2]);
}

static void print_four(const char *what, CUdeviceptr w)
{
    unsigned v[4];
    CHECK(cuMemcpyDtoH_v2(v, w, sizeof v));
    printf("%s: %u %u %u %u\n", what, v[0], v[1], v[2], v[3]);
}

static int kernelparams(CUcontext ctx)
{
    kget_fn get = (kget_fn)resolve12("cuGraphKernelNodeGetParams", (void *)cuGraphKernelNodeGetParams_v2);
    kset_fn set = (kset_fn)resolve12("cuGraphKernelNodeSetParams", (void *)cuGraphKernelNodeSetParams_v2);
    kexec_fn exec_set =
        (kexec_fn)resolve12("cuGraphExecKernelNodeSetParams", (void *)cuGraphExecKernelNodeSetParams_v2);
    CUstream st;
    CUdeviceptr w;
    CUmodule mod;
    CUfunction fill, add;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuMemAlloc_v2(&w, 16));
    CHECK(cuMemsetD8_v2(w, 0, 16));
    CHECK(cuModuleLoadData(&mod, COND_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuModuleGetFunction(&add, mod, "add"));

    /* fill(w, 7, 1), then a memset of the last word. */
    CUdeviceptr at = w;
    unsigned value = 7;
    int one = 1;
    void *args[] = {&at, &value, &one};
    CUDA_KERNEL_NODE_PARAMS kp = one_thread(fill, args);
    kp.gridDimX = 2;
    kp.blockDimY = 3;
    CUgraph g;
    CUgraphNode node, set_node;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddKernelNode_v2(&node, g, NULL, 0, &kp));
    value = 0; /* read when the node was added */
    CUDA_MEMSET_NODE_PARAMS sp = set_params(w + 12, 0x11, 1, 4, 1, 0);
    CHECK(cuGraphAddMemsetNode(&set_node, g, &node, 1, &sp, ctx));
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_four("first launch", w);
    print_kernel_node("graph's node", get, node, fill, add, w);

    /* Its launch attributes: set, read back, copied to a node of another
     * graph; one naming an event, and one on a memset node, refused. */
    CUkernelNodeAttrValue av;
    memset(&av, 0, sizeof av);
    CHECK(cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_PRIORITY, &av));
    printf("priority at first: %d\n", av.priority);
    av.priority = -2;
    CHECK(cuGraphKernelNodeSetAttribute(node, CU_LAUNCH_ATTRIBUTE_PRIORITY, &av));
    memset(&av, 0, sizeof av);
    av.cooperative = 1;
    CHECK(cuGraphKernelNodeSetAttribute(node, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &av));
    CUgraph g2;
    CUgraphNode node2;
    CHECK(cuGraphCreate(&g2, 0));
    CHECK(cuGraphAddKernelNode_v2(&node2, g2, NULL, 0, &kp));
    CHECK(cuGraphKernelNodeCopyAttributes(node2, node));
    CHECK(cuGraphKernelNodeGetAttribute(node2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &av));
    printf("copied to another node: priority %d, ", av.priority);
    CHECK(cuGraphKernelNodeGetAttribute(node2, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &av));
    printf("cooperative %d\n", av.cooperative);
    printf("an attribute naming an event: %s, ",
           result_name(cuGraphKernelNodeGetAttribute(node, (CUkernelNodeAttrID)12, &av)));
    memset(&av, 0, sizeof av);
    printf("set: %s\n", result_name(cuGraphKernelNodeSetAttribute(node, (CUkernelNodeAttrID)12, &av)));
    printf("a memset node's: %s\n", result_name(cuGraphKernelNodeGetAttribute(set_node, CU_LAUNCH_ATTRIBUTE_PRIORITY, &av)));
    CHECK(cuGraphDestroy(g2));

    /* The executable's node: 9 into word 1, on another grid. */
    CUDA_KERNEL_NODE_PARAMS np;
    memset(&np, 0, sizeof np);
    CHECK(get(node, &np));
    CUdeviceptr at2 = w + 4;
    unsigned value2 = 9;
    void *args2[] = {&at2, &value2, &one};
    np.kernelParams = args2;
    np.gridDimX = 5;
    printf("executable's node set: %s\n", result_name(exec_set(x, node, &np)));
    value2 = 0;
    CHECK(cuMemsetD8_v2(w, 0, 16));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_four("launch after it", w);
    print_kernel_node("graph's node after it", get, node, fill, add, w);

    /* Another function: add 100 to word 1, launched twice. */
    value2 = 100;
    np.func = add;
    printf("executable's node set to add: %s\n", result_name(exec_set(x, node, &np)));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_four("two launches of add", w);

    /* The graph's node: 5 into word 2; the executable still adds. */
    CUDA_KERNEL_NODE_PARAMS back;
    CUdeviceptr at3 = w + 8;
    unsigned value3 = 5;
    void *args3[] = {&at3, &value3, &one};
    CUDA_KERNEL_NODE_PARAMS gp = one_thread(fill, args3);
    printf("graph's node set: %s\n", result_name(set(node, &gp)));
    value3 = 0;
    print_kernel_node("graph's node now", get, node, fill, add, w);
    CHECK(cuMemsetD8_v2(w, 0, 16));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_four("the executable after it", w);
    CHECK(cuMemsetD8_v2(w, 0, 16));
    CUgraphExec x2;
    CHECK(cuGraphInstantiateWithFlags(&x2, g, 0));
    CHECK(cuGraphLaunch(x2, st));
    CHECK(cuStreamSynchronize(st));
    print_four("a new executable", w);

    /* A library's kernel: given as the node's kernel, and launched for a
     * function while a stream is captured (as a CUDA 12 runtime does),
     * read back as the same handle. */
    CUlibrary lib;
    CUkernel kfill;
    CHECK(cuLibraryLoadData(&lib, COND_MODULE, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&kfill, lib, "fill"));
    CUDA_KERNEL_NODE_PARAMS lp = one_thread(NULL, args3);
    lp.kern = kfill;
    CUgraphNode knode;
    CHECK(cuGraphAddKernelNode_v2(&knode, g, NULL, 0, &lp));
    memset(&back, 0, sizeof back);
    CHECK(get(knode, &back));
    printf("a kernel's node: its kernel: %s, a function: %s\n", back.kern == kfill ? "the same" : "another",
           back.func ? "yes" : "no");
    CUgraph cg;
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchKernel((CUfunction)kfill, 1, 1, 1, 1, 1, 1, 0, st, args3, NULL));
    CHECK(cuStreamEndCapture(st, &cg));
    CUgraphNode cnode;
    size_t cn = 1;
    CHECK(cuGraphGetNodes(cg, &cnode, &cn));
    memset(&back, 0, sizeof back);
    CHECK(get(cnode, &back));
    printf("a captured kernel's node: its function the kernel: %s\n",
           (void *)back.func == (void *)kfill || back.kern == kfill ? "yes" : "no");
    CHECK(cuGraphDestroy(cg));

    /* Refused: a node of another kind, another graph's node, no
     * parameters, no executable. */
    printf("memset node read: %s\n", result_name(get(set_node, &back)));
    printf("memset node set: %s\n", result_name(set(set_node, &gp)));
    printf("executable's memset node set: %s\n", result_name(exec_set(x, set_node, &gp)));
    CUgraph other;
    CUgraphNode stranger;
    CHECK(cuGraphCreate(&other, 0));
    CHECK(cuGraphAddKernelNode_v2(&stranger, other, NULL, 0, &gp));
    printf("another graph's node set: %s\n", result_name(exec_set(x, stranger, &gp)));
    printf("no parameters: %s\n", result_name(exec_set(x, node, NULL)));
    printf("no executable: %s\n", result_name(exec_set(NULL, node, &gp)));
    /* A function of another device's context, where there is one. */
    int devices = 0;
    CHECK(cuDeviceGetCount(&devices));
    if (devices > 1) {
        CUdevice d1;
        CUcontext c1;
        CUmodule m1;
        CUfunction f1;
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuDevicePrimaryCtxRetain(&c1, d1));
        CHECK(cuCtxPushCurrent_v2(c1));
        CHECK(cuModuleLoadData(&m1, COND_MODULE));
        CHECK(cuModuleGetFunction(&f1, m1, "fill"));
        CHECK(cuCtxPopCurrent_v2(&c1));
        CUDA_KERNEL_NODE_PARAMS op = one_thread(f1, args3);
        printf("another device's function: %s\n", result_name(exec_set(x, node, &op)));
        CHECK(cuModuleUnload(m1));
        CHECK(cuDevicePrimaryCtxRelease_v2(d1));
    }
    CHECK(cuMemsetD8_v2(w, 0, 16));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    print_four("the executable after the refusals", w);

    CHECK(cuGraphExecDestroy(x2));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(other));
    CHECK(cuGraphDestroy(g));
    CHECK(cuModuleUnload(mod));
    CHECK(cuLibraryUnload(lib));
    CHECK(cuMemFree_v2(w));
    CHECK(cuStreamDestroy_v2(st));
    return 0;
}

/* Kinds of graph for updates by topology (topo_graph): the executable's
 * own, then each way to differ from it. */
enum topo { T_SAME, T_OTHER_DEP, T_MORE_DEPS, T_EDGE_KIND, T_NODE_KIND, T_MORE_NODES, T_CHILD, T_COUNT };
static const char *const topo_what[T_COUNT] = {
    "the same topology", "C after B, not A", "C after A and B", "C after A by a programmatic edge",
    "C an empty node", "a node more", "the child graph's nodes unordered"};

/* A graph of kernel nodes each writing one word of w (node i: word i gets
 * base + i): A; B and C after A; a child graph after B of k1 and k2 after
 * k1 (words 3 and 4); differing as t says. Its nodes into n (A, B, C, the
 * child graph's node, k1 and k2 in it, a node more). */
static CUgraph topo_graph(enum topo t, CUfunction fill, CUdeviceptr w, unsigned base, CUgraphNode n[7])
{
    CUgraph g, child;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphCreate(&child, 0));
    CUdeviceptr at[5];
    unsigned v[5], one = 1;
    void *args[5][3];
    CUDA_KERNEL_NODE_PARAMS kp[5];
    for (int i = 0; i < 5; i++) {
        at[i] = w + 4 * (CUdeviceptr)i, v[i] = base + (unsigned)i;
        args[i][0] = &at[i], args[i][1] = &v[i], args[i][2] = &one;
        kp[i] = one_thread(fill, args[i]);
    }
    memset(n, 0, 7 * sizeof *n);
    CHECK(cuGraphAddKernelNode_v2(&n[0], g, NULL, 0, &kp[0]));
    CHECK(cuGraphAddKernelNode_v2(&n[1], g, &n[0], 1, &kp[1]));
    if (t == T_NODE_KIND)
        CHECK(cuGraphAddEmptyNode(&n[2], g, &n[0], 1));
    else if (t == T_EDGE_KIND) {
        CUgraphEdgeData e;
        memset(&e, 0, sizeof e);
        e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        CHECK(cuGraphAddKernelNode_v2(&n[2], g, NULL, 0, &kp[2]));
        CHECK(cuGraphAddDependencies_v2(g, &n[0], &n[2], &e, 1));
    } else
        CHECK(cuGraphAddKernelNode_v2(&n[2], g, t == T_OTHER_DEP ? &n[1] : &n[0], t == T_MORE_DEPS ? 2 : 1, &kp[2]));
    CHECK(cuGraphAddKernelNode_v2(&n[4], child, NULL, 0, &kp[3]));
    CHECK(cuGraphAddKernelNode_v2(&n[5], child, t == T_CHILD ? NULL : &n[4], t == T_CHILD ? 0 : 1, &kp[4]));
    CHECK(cuGraphAddChildGraphNode(&n[3], g, &n[1], 1, child));
    CHECK(cuGraphDestroy(child));
    /* the node holds a copy of the child graph: k1 and k2 are its nodes */
    size_t two = 2;
    CHECK(cuGraphChildGraphNodeGetGraph(n[3], &child));
    CHECK(cuGraphGetNodes(child, &n[4], &two));
    if (t == T_MORE_NODES)
        CHECK(cuGraphAddEmptyNode(&n[6], g, &n[2], 1));
    return g;
}

/* Updates of an executable graph by topology: a graph of the same one
 * (its kernels' values changed) updates it; one whose node depends on
 * another, has a dependency more, an edge of another kind, is of another
 * kind, or with a node more, or whose child graph's nodes are not ordered
 * as they were, is refused: the node named (and the edge's other end where
 * a dependency differs), the executable running as before. */
static int topology(CUcontext ctx)
{
    (void)ctx;
    static const char *const names[7] = {"A", "B", "C", "the child graph's node", "k1", "k2", "the node more"};
    CUstream st;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr w;
    fill_setup(&st, &mod, &fill, &w, 32);
    CUgraphNode n[7];
    CUgraph g = topo_graph(T_SAME, fill, w, 0, n);
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    CHECK(cuGraphDestroy(g));
    for (int t = T_COUNT - 1; t >= 0; t--) { /* the same topology last: each refusal leaves base 0 */
        g = topo_graph((enum topo)t, fill, w, 10 * (unsigned)t + 10, n);
        CUgraphExecUpdateResultInfo info;
        memset(&info, 0x5a, sizeof info);
        CUresult r = cuGraphExecUpdate_v2(x, g, &info);
        const char *node = info.errorNode ? "another" : "none", *from = info.errorFromNode ? "another" : "none";
        for (int i = 0; i < 7; i++) {
            if (n[i] && info.errorNode == n[i])
                node = names[i];
            if (n[i] && info.errorFromNode == n[i])
                from = names[i];
        }
        CHECK(cuMemsetD8_v2(w, 0, 32));
        CHECK(cuGraphLaunch(x, st));
        CHECK(cuStreamSynchronize(st));
        unsigned words[5];
        CHECK(cuMemcpyDtoH_v2(words, w, sizeof words));
        printf("update from %s: %s, result %d, error node %s, from %s; runs %u %u %u %u %u\n", topo_what[t],
               result_name(r), (int)info.result, node, from, words[0], words[1], words[2], words[3], words[4]);
        CHECK(cuGraphDestroy(g));
    }
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuMemFree_v2(w));
    CHECK(cuModuleUnload(mod));
    CHECK(cuStreamDestroy_v2(st));
    return 0;
}

/* The CUDA 10 and 11 ABIs of kernel nodes, executable updates and capture
 * information, looked up at 11.8 as that runtime does: a kernel node added,
 * read back, changed in the graph and in the executable, an executable
 * updated from another graph, a capture's status. */
static int old_abis(CUcontext ctx)
{
    (void)ctx;
    __typeof__(&cuGraphAddKernelNode) add;
    __typeof__(&cuGraphKernelNodeGetParams) get;
    __typeof__(&cuGraphKernelNodeSetParams) set;
    __typeof__(&cuGraphExecKernelNodeSetParams) xset;
    __typeof__(&cuGraphExecUpdate) update;
    __typeof__(&cuStreamGetCaptureInfo) info;
    CUdriverProcAddressQueryResult q;
    CHECK(cuGetProcAddress_v2("cuGraphAddKernelNode", (void **)&add, 11080, 0, &q));
    CHECK(cuGetProcAddress_v2("cuGraphKernelNodeGetParams", (void **)&get, 11080, 0, &q));
    CHECK(cuGetProcAddress_v2("cuGraphKernelNodeSetParams", (void **)&set, 11080, 0, &q));
    CHECK(cuGetProcAddress_v2("cuGraphExecKernelNodeSetParams", (void **)&xset, 11080, 0, &q));
    CHECK(cuGetProcAddress_v2("cuGraphExecUpdate", (void **)&update, 11080, 0, &q));
    CHECK(cuGetProcAddress_v2("cuStreamGetCaptureInfo", (void **)&info, 10020, 0, &q));
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr w;
    CUstream st;
    fill_setup(&st, &mod, &fill, &w, 64);
    unsigned v7 = 7, v9 = 9, v11 = 11, four = 4, eight = 8;
    void *args[] = {&w, &v7, &four};
    CUDA_KERNEL_NODE_PARAMS_v1 kp = {.func = fill, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                                     .blockDimY = 1, .blockDimZ = 1, .kernelParams = args};
    CUgraph g;
    CUgraphNode n;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(add(&n, g, NULL, 0, &kp));
    CUDA_KERNEL_NODE_PARAMS_v1 back;
    memset(&back, 0, sizeof back);
    CHECK(get(n, &back));
    printf("old kernel node: %s function, grid %u, value %u\n", back.func == fill ? "the same" : "another",
           back.gridDimX, *(unsigned *)back.kernelParams[1]);
    void *args9[] = {&w, &v9, &eight};
    kp.kernelParams = args9;
    CHECK(set(n, &kp));
    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    unsigned words[16];
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(words, w, sizeof words));
    printf("launched: %u %u %u\n", words[0], words[7], words[8]);
    void *args11[] = {&w, &v11, &four};
    kp.kernelParams = args11;
    CHECK(xset(x, n, &kp));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(words, w, sizeof words));
    printf("the executable's node changed: %u %u\n", words[0], words[7]);
    /* Another graph of the same shape updates the executable; one of another
     * shape is refused, naming the node. */
    CUgraph g2, g3;
    CUgraphNode n2, n3a, n3b;
    CHECK(cuGraphCreate(&g2, 0));
    kp.kernelParams = args;
    CHECK(add(&n2, g2, NULL, 0, &kp));
    CUgraphNode err = (CUgraphNode)1;
    CUgraphExecUpdateResult res = (CUgraphExecUpdateResult)99;
    CUresult r = update(x, g2, &err, &res);
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(words, w, sizeof words));
    printf("update: %s, result %d, error node %s; launched: %u\n", result_name(r), (int)res, err ? "set" : "none",
           words[0]);
    CHECK(cuGraphCreate(&g3, 0));
    CHECK(add(&n3a, g3, NULL, 0, &kp));
    CHECK(add(&n3b, g3, &n3a, 1, &kp));
    r = update(x, g3, &err, &res);
    printf("update to another shape: %s, result %d; no result: %s\n", result_name(r), (int)res,
           result_name(update(x, g2, &err, NULL)));
    CUstreamCaptureStatus cs = (CUstreamCaptureStatus)9;
    cuuint64_t id = 0;
    CHECK(info(st, &cs, &id));
    printf("capture info: status %d", (int)cs);
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(info(st, &cs, &id));
    CUgraph cg;
    CHECK(cuStreamEndCapture(st, &cg));
    printf(", capturing %d with an id: %d\n", (int)cs, id != 0);
    CHECK(cuGraphDestroy(cg));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(g2));
    CHECK(cuGraphDestroy(g3));
    CHECK(cuMemFree_v2(w));
    CHECK(cuStreamDestroy_v2(st));
    return 0;
}

static int generic_calls;

static void generic_fn(void *data) { generic_calls += *(int *)data; }

static CUgraphNodeParams node_of(CUgraphNodeType t)
{
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = t;
    return p;
}

static CUgraphNodeParams memset_node(CUdeviceptr dst, unsigned v, size_t w, CUcontext ctx)
{
    CUgraphNodeParams p = node_of(CU_GRAPH_NODE_TYPE_MEMSET);
    p.memset.dst = dst;
    p.memset.value = v;
    p.memset.elementSize = 1;
    p.memset.width = w;
    p.memset.height = 1;
    p.memset.ctx = ctx;
    return p;
}

static int generic(CUcontext ctx)
{
    CUstream st;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr w;
    CUevent gate, done;
    CHECK(cuStreamCreate(&st, 0));
    CHECK(cuModuleLoadData(&mod, COND_MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuMemAlloc_v2(&w, 64));
    CHECK(cuMemsetD8_v2(w, 0, 64));
    CHECK(cuEventCreate(&gate, 0));
    CHECK(cuEventCreate(&done, 0));
    CHECK(cuEventRecord(gate, st));

    /* A child graph of one memset, cloned into its node below. */
    CUgraph child, g;
    CUgraphNode n[11];
    CHECK(cuGraphCreate(&child, 0));
    CUgraphNodeParams p = memset_node(w + 48, 0x33, 4, ctx);
    CHECK(cuGraphAddNode(&n[0], child, NULL, 0, &p));

    CHECK(cuGraphCreate(&g, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    p.eventWait.event = gate;
    CHECK(cuGraphAddNode(&n[0], g, NULL, 0, &p));
    CUgraphNodeParams alloc = node_of(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    alloc.alloc = alloc_params(256);
    CHECK(cuGraphAddNode(&n[1], g, &n[0], 1, &alloc));
    CUdeviceptr a = alloc.alloc.dptr;
    p = memset_node(a, 0x5a, 16, ctx);
    CHECK(cuGraphAddNode(&n[2], g, &n[1], 1, &p));
    unsigned v42 = 42, one = 1;
    CUdeviceptr word = w;
    void *fargs[] = {&word, &v42, &one};
    p = node_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel = one_thread(fill, fargs);
    CHECK(cuGraphAddNode(&n[3], g, &n[2], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_MEMCPY);
    p.memcpy.copyCtx = ctx;
    p.memcpy.copyParams = copy_params(CU_MEMORYTYPE_DEVICE, NULL, a, CU_MEMORYTYPE_DEVICE, NULL, w + 16, 16, 1, 16);
    CHECK(cuGraphAddNode(&n[4], g, &n[3], 1, &p));
    int step = 1;
    p = node_of(CU_GRAPH_NODE_TYPE_HOST);
    p.host.fn = generic_fn;
    p.host.userData = &step;
    CHECK(cuGraphAddNode(&n[5], g, &n[4], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = child;
    CHECK(cuGraphAddNode(&n[6], g, &n[5], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    p.eventRecord.event = done;
    CHECK(cuGraphAddNode(&n[7], g, &n[6], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_MEM_FREE);
    p.free.dptr = a;
    CHECK(cuGraphAddNode(&n[8], g, &n[7], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_EMPTY);
    CHECK(cuGraphAddNode(&n[9], g, &n[8], 1, &p));
    size_t count = 0;
    CHECK(cuGraphGetNodes(g, NULL, &count));
    printf("nodes: %zu; types:", count);
    for (int i = 0; i < 10; i++) {
        CUgraphNodeType t;
        CHECK(cuGraphNodeGetType(n[i], &t));
        printf(" %d", (int)t);
    }
    printf("\n");

    /* Each node read back by the generic entry point. */
    CUgraphNodeParams b[10];
    for (int i = 0; i < 10; i++) {
        memset(&b[i], 0xff, sizeof b[i]);
        CHECK(cuGraphNodeGetParams(n[i], &b[i]));
    }
    CUcontext cur;
    CHECK(cuCtxGetCurrent(&cur));
    size_t in_child = 0;
    CHECK(cuGraphGetNodes(b[6].graph.graph, NULL, &in_child));
    printf("read back: wait on gate %s; allocation of %zu at its address %s; memset value %#x width %zu in the "
           "current context %s; kernel fill %s, grid %u; copy of %zu bytes in the current context %s; host "
           "function %s with its data %s; child graph of %zu node, its own %s; record of done %s; free of the "
           "allocation %s; empty type %d\n",
           b[0].eventWait.event == gate ? "yes" : "no", b[1].alloc.bytesize, b[1].alloc.dptr == a ? "yes" : "no",
           b[2].memset.value, b[2].memset.width, b[2].memset.ctx == cur ? "yes" : "no",
           b[3].kernel.func == fill ? "yes" : "no", b[3].kernel.gridDimX, b[4].memcpy.copyParams.WidthInBytes,
           b[4].memcpy.copyCtx == cur ? "yes" : "no", b[5].host.fn == generic_fn ? "yes" : "no",
           b[5].host.userData == &step ? "yes" : "no", in_child, b[6].graph.graph != child ? "yes" : "no",
           b[7].eventRecord.event == done ? "yes" : "no", b[8].free.dptr == a ? "yes" : "no", (int)b[9].type);

    CUgraphExec x;
    CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    unsigned char h[64];
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    print_bytes("launched", h, 64);
    printf("host calls %d, done %s\n", generic_calls, result_name(cuEventQuery(done)));

    /* Changed: the graph's memset node (a new executable sees it), the
     * executable's kernel and host nodes (the graph's stay). */
    p = memset_node(a, 0x44, 16, ctx);
    printf("graph's memset set: %s\n", result_name(cuGraphNodeSetParams(n[2], &p)));
    unsigned v7 = 7;
    void *sargs[] = {&word, &v7, &one};
    p = node_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel = one_thread(fill, sargs);
    printf("executable's kernel set: %s\n", result_name(cuGraphExecNodeSetParams(x, n[3], &p)));
    int ten = 10;
    p = node_of(CU_GRAPH_NODE_TYPE_HOST);
    p.host.fn = generic_fn;
    p.host.userData = &ten;
    printf("executable's host node set: %s\n", result_name(cuGraphExecNodeSetParams(x, n[5], &p)));
    CHECK(cuGraphLaunch(x, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    print_bytes("the executable again", h, 64);
    CUgraphExec y; /* one executable at a time: the graph allocates */
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphInstantiateWithFlags(&y, g, 0));
    CHECK(cuGraphLaunch(y, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    print_bytes("a new executable", h, 64);
    printf("host calls %d\n", generic_calls);

    /* Refused: another kind's parameters, a kind that cannot change, kinds
     * not made, an unknown ownership. */
    p = memset_node(a, 1, 16, ctx);
    printf("memset parameters for the kernel node: %s\n", result_name(cuGraphNodeSetParams(n[3], &p)));
    printf("the allocation node's set: %s\n", result_name(cuGraphNodeSetParams(n[1], &alloc)));
    CUgraphNode bad;
    p = node_of(CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL);
    printf("external semaphore node: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &p)));
    p = node_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = child;
    p.graph.ownership = (CUgraphChildGraphNodeOwnership)7;
    printf("ownership 7: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &p)));
    p = node_of((CUgraphNodeType)99);
    printf("kind 99: %s\n", result_name(cuGraphAddNode(&bad, g, NULL, 0, &p)));
    p = node_of(CU_GRAPH_NODE_TYPE_EMPTY);
    printf("more dependencies than memory holds: %s\n",
           result_name(cuGraphAddNode(&bad, g, n, SIZE_MAX / sizeof(CUgraphNode) + 1, &p)));
    CHECK(cuGraphGetNodes(g, NULL, &count));
    printf("nodes still: %zu\n", count);
    CHECK(cuGraphExecDestroy(y));
    CHECK(cuGraphDestroy(g));

    /* A batch memory operation node: two writes, read back, launched, the
     * executable's set to other values; refused: an address outside device
     * memory, more operations than the simulated GPU keeps in a node. */
    CUgraph bg;
    CUgraphNode bn;
    CUstreamBatchMemOpParams ops[17];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < 17; i++) {
        ops[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        ops[i].writeValue.address = w + 40;
        ops[i].writeValue.value = 0x11;
    }
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[1].writeValue.address = w + 32;
    ops[1].writeValue.value64 = 0x2200000022ull;
    CHECK(cuGraphCreate(&bg, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    p.memOp.ctx = ctx;
    p.memOp.count = 2;
    p.memOp.paramArray = ops;
    CHECK(cuGraphAddNode(&bn, bg, NULL, 0, &p));
    CUgraphNodeParams mb;
    memset(&mb, 0xff, sizeof mb);
    CHECK(cuGraphNodeGetParams(bn, &mb));
    printf("batch node: type %d, %u operations, the first a 32-bit write of %#x %s, the second of %#llx; its own "
           "array %s\n",
           (int)mb.type, mb.memOp.count, mb.memOp.paramArray[0].writeValue.value,
           mb.memOp.paramArray[0].writeValue.address == w + 40 ? "where asked" : "elsewhere",
           (unsigned long long)mb.memOp.paramArray[1].writeValue.value64,
           mb.memOp.paramArray != ops ? "yes" : "no");
    CUgraphExec bx;
    CHECK(cuGraphInstantiateWithFlags(&bx, bg, 0));
    CHECK(cuGraphLaunch(bx, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    print_bytes("batch node launched", h, 64);
    ops[0].writeValue.value = 0x33;
    ops[1].writeValue.value64 = 0x4400000044ull;
    printf("executable's batch node set: %s\n", result_name(cuGraphExecNodeSetParams(bx, bn, &p)));
    CHECK(cuGraphLaunch(bx, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    print_bytes("and launched", h, 64);
    CUDA_BATCH_MEM_OP_NODE_PARAMS kept;
    CHECK(cuGraphBatchMemOpNodeGetParams(bn, &kept));
    printf("the graph's node keeps %#x\n", kept.paramArray[0].writeValue.value);
    ops[2].writeValue.address = (CUdeviceptr)(uintptr_t)&ops[16];
    p.memOp.count = 3;
    printf("a write outside device memory: %s\n", result_name(cuGraphAddNode(&bad, bg, NULL, 0, &p)));
    ops[2].writeValue.address = w + 40;
    p.memOp.count = 17;
    printf("17 operations: %s\n", result_name(cuGraphAddNode(&bad, bg, NULL, 0, &p)));
    CHECK(cuGraphGetNodes(bg, NULL, &count));
    printf("batch graph nodes: %zu\n", count);
    CHECK(cuGraphExecDestroy(bx));
    CHECK(cuGraphDestroy(bg));
    /* A node whose word is freed before the launch: a GPU faults
     * asynchronously; the launch here writes nothing and goes on. */
    CUdeviceptr gone;
    CHECK(cuMemAlloc_v2(&gone, 4096));
    CHECK(cuGraphCreate(&bg, 0));
    ops[0].writeValue.address = gone;
    p.memOp.count = 1;
    CHECK(cuGraphAddNode(&bn, bg, NULL, 0, &p));
    CHECK(cuGraphInstantiateWithFlags(&bx, bg, 0));
    CHECK(cuMemFree_v2(gone));
    CHECK(cuGraphLaunch(bx, st));
    printf("a batch node launched after its word was freed: %s\n", result_name(cuStreamSynchronize(st)));
    CHECK(cuGraphExecDestroy(bx));
    CHECK(cuGraphDestroy(bg));
    /* Captured: a stream's write of a word becomes such a node. */
    CUstream cs;
    CUgraph cg;
    CUgraphNode cn;
    CUgraphNodeType ct;
    size_t one_node = 1;
    CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamWriteValue32_v2(cs, w + 44, 0x55, 0));
    CHECK(cuStreamEndCapture(cs, &cg));
    CHECK(cuGraphGetNodes(cg, &cn, &one_node));
    CHECK(cuGraphNodeGetType(cn, &ct));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    printf("captured write: %zu node of type %d, word 44 before its launch %#x;", one_node, (int)ct, h[44]);
    CHECK(cuGraphInstantiateWithFlags(&bx, cg, 0));
    CHECK(cuGraphLaunch(bx, cs));
    CHECK(cuStreamSynchronize(cs));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    printf(" after %#x\n", h[44]);
    CHECK(cuGraphExecDestroy(bx));
    CHECK(cuGraphDestroy(cg));
    CHECK(cuStreamDestroy_v2(cs));

    /* An edge with data (a programmatic launch's), given by cuGraphAddNode_v2:
     * kept with the edge, read back (a query without room for the data is
     * lossy, a count is not), cloned, removed only as it was added; data
     * the documentation rules out (a port into a node, a programmatic edge
     * from a memset) refused. */
    CUgraph e, ec;
    CUgraphNode k1, k2 = NULL, ms, bad2;
    CHECK(cuGraphCreate(&e, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel = one_thread(fill, fargs);
    CHECK(cuGraphAddNode(&k1, e, NULL, 0, &p));
    CUgraphEdgeData ed, plain_ed;
    memset(&ed, 0, sizeof ed);
    memset(&plain_ed, 0, sizeof plain_ed);
    ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    CUresult r = cuGraphAddNode_v2(&k2, e, &k1, &ed, 1, &p);
    CUgraphNode from[2], to[2], dep[1];
    CUgraphEdgeData got[2];
    size_t ne = 2, nd = 1, counted = 0;
    CHECK(cuGraphGetEdges_v2(e, from, to, got, &ne));
    printf("a kernel node after a programmatic edge: %s; %zu edge, %s, port %u type %u", result_name(r), ne,
           ne && from[0] == k1 && to[0] == k2 ? "first to second" : "elsewhere", ne ? (unsigned)got[0].from_port : 0,
           ne ? (unsigned)got[0].type : 0);
    ne = 2;
    printf("; without its data: %s, %s", result_name(cuGraphGetEdges(e, from, to, &ne)),
           result_name(cuGraphNodeGetDependencies(k2, dep, &nd)));
    printf("; counted: %s", result_name(cuGraphGetEdges(e, NULL, NULL, &counted)));
    nd = 1;
    memset(got, 0, sizeof got);
    CHECK(cuGraphNodeGetDependentNodes_v2(k1, dep, got, &nd));
    printf(" %zu; the first's dependent %s, type %u\n", counted, nd && dep[0] == k2 ? "the second" : "another",
           (unsigned)got[0].type);
    CHECK(cuGraphClone(&ec, e));
    ne = 2;
    CHECK(cuGraphGetEdges_v2(ec, from, to, got, &ne));
    printf("cloned: %zu edge, port %u type %u; removed as plain: %s, as added: %s\n", ne,
           ne ? (unsigned)got[0].from_port : 0, ne ? (unsigned)got[0].type : 0,
           result_name(cuGraphRemoveDependencies_v2(e, &k1, &k2, &plain_ed, 1)),
           result_name(cuGraphRemoveDependencies_v2(e, &k1, &k2, &ed, 1)));
    CHECK(cuGraphDestroy(ec));
    p = memset_node(w + 60, 0x11, 4, ctx);
    CHECK(cuGraphAddNode(&ms, e, NULL, 0, &p));
    printf("a programmatic edge from a memset: %s", result_name(cuGraphAddDependencies_v2(e, &ms, &k2, &ed, 1)));
    memset(&ed, 0, sizeof ed);
    ed.to_port = 1;
    printf("; a port into a node: %s", result_name(cuGraphAddDependencies_v2(e, &k1, &k2, &ed, 1)));
    ed.to_port = 0;
    ed.reserved[4] = 1;
    printf("; reserved bytes set: %s", result_name(cuGraphAddDependencies_v2(e, &k1, &k2, &ed, 1)));
    ed.reserved[4] = 0;
    ed.type = 2;
    printf("; kind 2: %s", result_name(cuGraphAddDependencies_v2(e, &k1, &k2, &ed, 1)));
    ed.type = CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
    ed.from_port = 3;
    printf("; port 3: %s", result_name(cuGraphAddDependencies_v2(e, &k1, &k2, &ed, 1)));
    ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    printf("; the programmatic port on a plain edge: %s", result_name(cuGraphAddDependencies_v2(e, &k1, &k2, &ed, 1)));
    ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    printf("; a capture after one (not simulated): %s\n",
           result_name(cuStreamBeginCaptureToGraph(st, e, &k1, &ed, 1, CU_STREAM_CAPTURE_MODE_RELAXED)));
    memset(&ed, 0, sizeof ed);
    p = node_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel = one_thread(fill, fargs);
    CHECK(cuGraphAddNode_v2(&bad2, e, &k1, &ed, 1, &p));
    ne = 0;
    CHECK(cuGraphGetEdges(e, NULL, NULL, &ne));
    printf("after a plain edge: %zu edge", ne);
    /* edges checked with the ones before them in the same call */
    CUgraphNode ring_from[2] = {k2, bad2}, ring_to[2] = {bad2, k2}, twice_from[2] = {k2, k2}, twice_to[2] = {bad2, bad2};
    printf("; a cycle in one call: %s", result_name(cuGraphAddDependencies(e, ring_from, ring_to, 2)));
    printf(", an edge twice in one call: %s", result_name(cuGraphAddDependencies(e, twice_from, twice_to, 2)));
    CUgraphNode once_from[2] = {k1, k1}, once_to[2] = {bad2, bad2};
    printf(", removed twice in one: %s", result_name(cuGraphRemoveDependencies(e, once_from, once_to, 2)));
    ne = 0;
    CHECK(cuGraphGetEdges(e, NULL, NULL, &ne));
    printf("; edges still %zu\n", ne);
    CHECK(cuGraphDestroy(e));

    /* A child graph moved into its node: the program's graph is the node's,
     * and its own node, set in the executable of the graph holding it (two
     * levels up: its parent moved in turn), changes what it runs. */
    CUgraph moved, parent;
    CUgraphNode inner, mnode;
    CHECK(cuGraphCreate(&moved, 0));
    p = memset_node(w + 56, 0x66, 4, ctx);
    CHECK(cuGraphAddNode(&inner, moved, NULL, 0, &p));
    CHECK(cuGraphCreate(&parent, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = moved;
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    CHECK(cuGraphAddNode(&mnode, parent, NULL, 0, &p));
    CUgraph back = NULL;
    CHECK(cuGraphChildGraphNodeGetGraph(mnode, &back));
    printf("moved: the node's graph is the program's %s; destroyed alone: %s; moved again: %s",
           back == moved ? "yes" : "no", result_name(cuGraphDestroy(moved)),
           result_name(cuGraphAddNode(&bad, parent, NULL, 0, &p)));
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE;
    printf("; cloned: %s\n", result_name(cuGraphAddNode(&bad, parent, NULL, 0, &p)));
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    CUgraph outer;
    CHECK(cuGraphCreate(&outer, 0));
    p.graph.graph = parent;
    CHECK(cuGraphAddNode(&bad, outer, NULL, 0, &p));
    p.graph.graph = outer;
    printf("the graph holding it moved into it: %s\n", result_name(cuGraphAddNode(&bad, moved, NULL, 0, &p)));
    CUgraphExec m;
    printf("instantiated alone: %s\n", result_name(cuGraphInstantiateWithFlags(&m, moved, 0)));
    CHECK(cuGraphInstantiateWithFlags(&m, outer, 0));
    p = memset_node(w + 56, 0x77, 4, ctx);
    printf("its node set in the outer graph's executable: %s\n", result_name(cuGraphExecNodeSetParams(m, inner, &p)));
    CHECK(cuGraphLaunch(m, st));
    CHECK(cuStreamSynchronize(st));
    CHECK(cuMemcpyDtoH_v2(h, w, 64));
    print_bytes("moved child launched", h, 64);
    CHECK(cuGraphExecDestroy(m));
    CHECK(cuGraphDestroy(outer)); /* and the moved graphs with it */

    CHECK(cuGraphDestroy(child));
    CHECK(cuEventDestroy_v2(gate));
    CHECK(cuEventDestroy_v2(done));
    CHECK(cuMemFree_v2(w));
    return 0;
}

/* A graph's allocation keeps its addresses for the graph's life; once the
 * graph is destroyed the driver may hand them out again, here to a range
 * reserved for mapped memory. */
static int reuse(CUcontext ctx)
{
    (void)ctx;
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CUdeviceptr was[3];
    const size_t big = 8u << 20, n = 2u << 20; /* a range inside a graph's */
    for (int i = 0; i < 3; i++) {
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        memset(&ap, 0, sizeof ap);
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ap.bytesize = big;
        CUgraph g;
        CUgraphNode a;
        CUgraphExec x;
        CHECK(cuGraphCreate(&g, 0));
        CHECK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &ap));
        CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
        CHECK(cuGraphLaunch(x, s));
        CHECK(cuMemFreeAsync(ap.dptr, s));
        CHECK(cuStreamSynchronize(s));
        CHECK(cuGraphExecDestroy(x));
        CHECK(cuGraphDestroy(g));
        was[i] = ap.dptr;
    }
    CHECK(cuDeviceGraphMemTrim(0));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    CUdeviceptr p;
    CHECK(cuMemCreate(&h, n, &prop, 0));
    CHECK(cuMemAddressReserve(&p, n, 0, 0, 0));
    int over = 0;
    for (int i = 0; i < 3; i++)
        over |= p < was[i] + big && was[i] < p + n;
    CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUresult rm = cuMemMap(p, n, 0, h, 0);
    CUresult ra = cuMemSetAccess(p, n, &acc, 1);
    CUresult rs = cuMemsetD8_v2(p, 0x5a, n);
    unsigned char b = 0;
    CUresult rd = cuMemcpyDtoH_v2(&b, p + n - 1, 1);
    printf("reserved over a destroyed graph's memory: %s; map %s, access %s, memset %s, read %s %#x\n",
           over ? "yes" : "no", result_name(rm), result_name(ra), result_name(rs), result_name(rd), b);
    CUresult ru = cuMemUnmap(p, n), rf = cuMemAddressFree(p, n), rr = cuMemRelease(h);
    printf("unmap %s, free %s, release %s\n", result_name(ru), result_name(rf), result_name(rr));
    return 0;
}

int main(int argc, char **argv)
{
    CUcontext ctx = primary_context();
    if (argc > 1 && strcmp(argv[1], "hostile") == 0)
        return hostile(ctx);
    if (argc > 1 && strcmp(argv[1], "host") == 0)
        return host(ctx);
    if (argc > 1 && strcmp(argv[1], "events") == 0)
        return events(ctx);
    if (argc > 1 && strcmp(argv[1], "params") == 0)
        return params(ctx);
    if (argc > 1 && strcmp(argv[1], "childparams") == 0)
        return child_params(ctx, argc > 2 && !strcmp(argv[2], "pageable"));
    if (argc > 1 && strcmp(argv[1], "userobjects") == 0)
        return user_objects(ctx);
    if (argc > 1 && strcmp(argv[1], "hostread") == 0)
        return host_read(ctx, HR_ADDED) || host_read(ctx, HR_CAPTURED) || host_read(ctx, HR_CHILD) ||
               host_read(ctx, HR_WITHIN);
    if (argc > 1 && strcmp(argv[1], "pageable") == 0)
        return pageable(ctx);
    if (argc > 1 && strcmp(argv[1], "captureinfo") == 0)
        return captureinfo(ctx);
    if (argc > 1 && strcmp(argv[1], "copies") == 0)
        return copies(ctx);
    if (argc > 1 && strcmp(argv[1], "edges") == 0)
        return edges(ctx);
    if (argc > 1 && strcmp(argv[1], "conditional") == 0)
        return conditional(ctx);
    if (argc > 1 && strcmp(argv[1], "kernelparams") == 0)
        return kernelparams(ctx);
    if (argc > 1 && strcmp(argv[1], "topology") == 0)
        return topology(ctx);
    if (argc > 1 && strcmp(argv[1], "old") == 0)
        return old_abis(ctx);
    if (argc > 1 && strcmp(argv[1], "generic") == 0)
        return generic(ctx);
    if (argc > 1 && strcmp(argv[1], "reuse") == 0)
        return reuse(ctx);
    return run(ctx);
}
