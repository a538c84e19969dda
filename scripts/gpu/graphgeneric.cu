// Graphs built through the driver's one entry point for every kind of node
// (cuGraphAddNode, CUDA 12.2), as XLA's command buffers build them: an
// event wait, an allocation, a memset, a kernel, a copy, a host function, a
// cloned child graph, an event record, a free and an empty node, each read
// back by cuGraphNodeGetParams; launched; parameters changed in the graph
// and in an executable and launched again; kinds refused; a batch memory
// operation node; an edge with data (a programmatic launch's), given and
// made by a capture of a kernel launched with programmatic stream
// serialization; a child graph moved into its node (CUDA 12.9), its parent
// moved in turn, its own node set in the outermost graph's executable. Prints results by name and
// bytes as they are, so that the output remotely can be compared with the
// output natively (scripts/gpu-remote-cudart.sh).
//     nvcc -O2 -o graphgeneric graphgeneric.cu -lcuda
#include <stdio.h>
#include <string.h>

#include "driver_check.h"

__global__ void fill(unsigned *p, unsigned v) { *p = v; }

// Looked up at the versions that give these ABIs (13.0's header does not
// declare cuGraphNodeGetParams; the edges' entry points have two ABIs).
typedef CUresult (*add_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                           CUgraphNodeParams *);
typedef CUresult (*params_fn)(CUgraphNode, CUgraphNodeParams *);
typedef CUresult (*exec_params_fn)(CUgraphExec, CUgraphNode, CUgraphNodeParams *);
typedef CUresult (*edges_fn)(CUgraph, CUgraphNode *, CUgraphNode *, CUgraphEdgeData *, size_t *);
static edges_fn get_edges;
static add_fn add_node;
static params_fn get_params, set_params;
static exec_params_fn exec_set_params;

static void *proc(const char *sym, int version)
{
    void *f = NULL;
    CUdriverProcAddressQueryResult q;
    DRV(cuGetProcAddress(sym, &f, version, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    return f;
}

static CUresult add(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeParams *p)
{
    return add_node(n, g, deps, NULL, ndeps, p);
}

static int calls;
static void host_fn(void *data) { calls += *(int *)data; }

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

static CUgraphNodeParams one_thread(CUfunction f, void **args)
{
    CUgraphNodeParams p = node_of(CU_GRAPH_NODE_TYPE_KERNEL);
    p.kernel.func = f;
    p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = args;
    return p;
}

static void print_bytes(const char *what, CUdeviceptr w)
{
    unsigned char h[64];
    DRV(cuMemcpyDtoH(h, w, sizeof h));
    printf("%s:", what);
    for (int i = 0; i < 64; i++)
        if (h[i])
            printf(" %d=%02x", i, h[i]);
    printf("\n");
}

int main()
{
    RT(cudaFree(0));
    CUcontext ctx;
    DRV(cuCtxGetCurrent(&ctx));
    add_node = (add_fn)proc("cuGraphAddNode", 12030);
    // CUDA 13.1's (driver 580 resolves it neither so nor by dlsym): the
    // read-backs below only where the driver gives it.
    get_params = (params_fn)proc("cuGraphNodeGetParams", 12020);
    if (!get_params)
        printf("cuGraphNodeGetParams: not given by this driver\n");
    set_params = (params_fn)proc("cuGraphNodeSetParams", 12020);
    exec_set_params = (exec_params_fn)proc("cuGraphExecNodeSetParams", 12020);
    get_edges = (edges_fn)proc("cuGraphGetEdges", 12030);
    CUfunction fill_fn;
    RT(cudaGetFuncBySymbol((cudaFunction_t *)&fill_fn, (const void *)fill));
    CUstream st;
    CUdeviceptr w;
    CUevent gate, done;
    DRV(cuStreamCreate(&st, 0));
    DRV(cuMemAlloc(&w, 64));
    DRV(cuMemsetD8(w, 0, 64));
    DRV(cuEventCreate(&gate, 0));
    DRV(cuEventCreate(&done, 0));
    DRV(cuEventRecord(gate, st));

    CUgraph child, g;
    CUgraphNode n[10], bad;
    DRV(cuGraphCreate(&child, 0));
    CUgraphNodeParams p = memset_node(w + 48, 0x33, 4, ctx);
    DRV(add(&n[0], child, NULL, 0, &p));
    DRV(cuGraphCreate(&g, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    p.eventWait.event = gate;
    DRV(add(&n[0], g, NULL, 0, &p));
    CUgraphNodeParams alloc = node_of(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    alloc.alloc.bytesize = 256;
    DRV(add(&n[1], g, &n[0], 1, &alloc));
    CUdeviceptr a = alloc.alloc.dptr;
    p = memset_node(a, 0x5a, 16, ctx);
    DRV(add(&n[2], g, &n[1], 1, &p));
    CUdeviceptr word = w;
    unsigned v42 = 42;
    void *fargs[] = {&word, &v42};
    p = one_thread(fill_fn, fargs);
    DRV(add(&n[3], g, &n[2], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_MEMCPY);
    p.memcpy.copyCtx = ctx;
    p.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.srcDevice = a;
    p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.dstDevice = w + 16;
    p.memcpy.copyParams.WidthInBytes = 16;
    p.memcpy.copyParams.Height = 1;
    p.memcpy.copyParams.Depth = 1;
    DRV(add(&n[4], g, &n[3], 1, &p));
    int step = 1;
    p = node_of(CU_GRAPH_NODE_TYPE_HOST);
    p.host.fn = host_fn;
    p.host.userData = &step;
    DRV(add(&n[5], g, &n[4], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = child;
    DRV(add(&n[6], g, &n[5], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    p.eventRecord.event = done;
    DRV(add(&n[7], g, &n[6], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_MEM_FREE);
    p.free.dptr = a;
    DRV(add(&n[8], g, &n[7], 1, &p));
    p = node_of(CU_GRAPH_NODE_TYPE_EMPTY);
    DRV(add(&n[9], g, &n[8], 1, &p));
    size_t count = 0;
    DRV(cuGraphGetNodes(g, NULL, &count));
    printf("nodes: %zu; types:", count);
    for (int i = 0; i < 10; i++) {
        CUgraphNodeType t;
        DRV(cuGraphNodeGetType(n[i], &t));
        printf(" %d", (int)t);
    }
    printf("\n");

    CUgraphNodeParams b[10];
    for (int i = 0; i < 10 && get_params; i++) {
        memset(&b[i], 0, sizeof b[i]); // the driver follows pointers it finds there (0xff bytes crash it)
        CUresult r = get_params(n[i], &b[i]);
        if (r != CUDA_SUCCESS)
            printf("node %d read back: %s\n", i, name(r));
    }
    size_t in_child = 0;
    if (get_params)
        DRV(cuGraphGetNodes(b[6].graph.graph, NULL, &in_child));
    if (get_params)
        printf("read back: wait on gate %s; allocation of %zu at its address %s; memset value %#x width %zu in the "
           "current context %s; kernel fill %s, grid %u; copy of %zu bytes in the current context %s; host "
           "function %s with its data %s; child graph of %zu node, its own %s; record of done %s; free of the "
           "allocation %s; empty type %d\n",
           b[0].eventWait.event == gate ? "yes" : "no", b[1].alloc.bytesize, b[1].alloc.dptr == a ? "yes" : "no",
           b[2].memset.value, b[2].memset.width, b[2].memset.ctx == ctx ? "yes" : "no",
           b[3].kernel.func == fill_fn ? "yes" : "no", b[3].kernel.gridDimX, b[4].memcpy.copyParams.WidthInBytes,
           b[4].memcpy.copyCtx == ctx ? "yes" : "no", b[5].host.fn == host_fn ? "yes" : "no",
           b[5].host.userData == &step ? "yes" : "no", in_child, b[6].graph.graph != child ? "yes" : "no",
           b[7].eventRecord.event == done ? "yes" : "no", b[8].free.dptr == a ? "yes" : "no", (int)b[9].type);

    CUgraphExec x, y;
    DRV(cuGraphInstantiate(&x, g, 0));
    DRV(cuGraphLaunch(x, st));
    DRV(cuStreamSynchronize(st));
    print_bytes("launched", w);
    printf("host calls %d, done %s\n", calls, name(cuEventQuery(done)));
    p = memset_node(a, 0x44, 16, ctx);
    printf("graph's memset set: %s\n", name(set_params(n[2], &p)));
    unsigned v7 = 7;
    void *sargs[] = {&word, &v7};
    p = one_thread(fill_fn, sargs);
    printf("executable's kernel set: %s\n", name(exec_set_params(x, n[3], &p)));
    int ten = 10;
    p = node_of(CU_GRAPH_NODE_TYPE_HOST);
    p.host.fn = host_fn;
    p.host.userData = &ten;
    printf("executable's host node set: %s\n", name(exec_set_params(x, n[5], &p)));
    DRV(cuGraphLaunch(x, st));
    DRV(cuStreamSynchronize(st));
    print_bytes("the executable again", w);
    DRV(cuGraphExecDestroy(x)); // one executable at a time: the graph allocates
    DRV(cuGraphInstantiate(&y, g, 0));
    DRV(cuGraphLaunch(y, st));
    DRV(cuStreamSynchronize(st));
    print_bytes("a new executable", w);
    printf("host calls %d\n", calls);
    p = memset_node(a, 1, 16, ctx);
    printf("memset parameters for the kernel node: %s\n", name(set_params(n[3], &p)));
    printf("the allocation node's set: %s\n", name(set_params(n[1], &alloc)));
    p = node_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = child;
    p.graph.ownership = (CUgraphChildGraphNodeOwnership)7;
    printf("ownership 7: %s\n", name(add(&bad, g, NULL, 0, &p)));
    p = node_of((CUgraphNodeType)99);
    printf("kind 99: %s\n", name(add(&bad, g, NULL, 0, &p)));
    DRV(cuGraphGetNodes(g, NULL, &count));
    printf("nodes still: %zu\n", count);
    DRV(cuGraphExecDestroy(y));
    DRV(cuGraphDestroy(g));

    // A batch memory operation node: two writes, read back, launched, the
    // executable's set to other values.
    CUgraph bg;
    CUgraphNode bn;
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = w + 40;
    ops[0].writeValue.value = 0x11;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[1].writeValue.address = w + 32;
    ops[1].writeValue.value64 = 0x2200000022ull;
    DRV(cuGraphCreate(&bg, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
    p.memOp.ctx = ctx;
    p.memOp.count = 2;
    p.memOp.paramArray = ops;
    DRV(add(&bn, bg, NULL, 0, &p));
    CUgraphNodeParams mb;
    memset(&mb, 0, sizeof mb);
    if (get_params)
        DRV(get_params(bn, &mb));
    if (get_params)
        printf("batch node: type %d, %u operations, the first a 32-bit write of %#x %s, the second of %#llx; its own "
           "array %s\n",
           (int)mb.type, mb.memOp.count, mb.memOp.paramArray[0].writeValue.value,
           mb.memOp.paramArray[0].writeValue.address == w + 40 ? "where asked" : "elsewhere",
           (unsigned long long)mb.memOp.paramArray[1].writeValue.value64, mb.memOp.paramArray != ops ? "yes" : "no");
    CUgraphExec bx;
    DRV(cuGraphInstantiate(&bx, bg, 0));
    DRV(cuGraphLaunch(bx, st));
    DRV(cuStreamSynchronize(st));
    print_bytes("batch node launched", w);
    ops[0].writeValue.value = 0x33;
    ops[1].writeValue.value64 = 0x4400000044ull;
    printf("executable's batch node set: %s\n", name(exec_set_params(bx, bn, &p)));
    DRV(cuGraphLaunch(bx, st));
    DRV(cuStreamSynchronize(st));
    print_bytes("and launched", w);
    CUDA_BATCH_MEM_OP_NODE_PARAMS kept;
    DRV(cuGraphBatchMemOpNodeGetParams(bn, &kept));
    printf("the graph's node keeps %#x\n", kept.paramArray[0].writeValue.value);
    DRV(cuGraphExecDestroy(bx));
    DRV(cuGraphDestroy(bg));
    // Captured: a stream's write of a word becomes such a node.
    CUstream cs;
    CUgraph cg;
    CUgraphNode cn;
    CUgraphNodeType ct;
    size_t one_node = 1;
    unsigned char h44 = 0;
    DRV(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
    DRV(cuStreamWriteValue32(cs, w + 44, 0x55, 0));
    DRV(cuStreamEndCapture(cs, &cg));
    DRV(cuGraphGetNodes(cg, &cn, &one_node));
    DRV(cuGraphNodeGetType(cn, &ct));
    DRV(cuMemcpyDtoH(&h44, w + 44, 1));
    printf("captured write: %zu node of type %d, word 44 before its launch %#x;", one_node, (int)ct, h44);
    DRV(cuGraphInstantiate(&bx, cg, 0));
    DRV(cuGraphLaunch(bx, cs));
    DRV(cuStreamSynchronize(cs));
    DRV(cuMemcpyDtoH(&h44, w + 44, 1));
    printf(" after %#x\n", h44);
    DRV(cuGraphExecDestroy(bx));
    DRV(cuGraphDestroy(cg));
    DRV(cuStreamDestroy(cs));

    // An edge with data: a programmatic launch's, between two kernels.
    CUgraph e;
    CUgraphNode k1, k2 = NULL;
    DRV(cuGraphCreate(&e, 0));
    p = one_thread(fill_fn, fargs);
    DRV(add(&k1, e, NULL, 0, &p));
    CUgraphEdgeData ed;
    memset(&ed, 0, sizeof ed);
    ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    CUresult r = add_node(&k2, e, &k1, &ed, 1, &p);
    DRV(cuGraphGetNodes(e, NULL, &count));
    CUgraphNode from[2], to[2];
    CUgraphEdgeData got[2];
    size_t ne = 2;
    DRV(get_edges(e, from, to, got, &ne));
    printf("a kernel node after a programmatic edge: %s, nodes %zu; edges %zu, port %u type %u\n", name(r), count, ne,
           ne ? (unsigned)got[0].from_port : 0, ne ? (unsigned)got[0].type : 0);
    DRV(cuGraphDestroy(e));

    // What edge a capture makes to a kernel launched with programmatic
    // stream serialization after another kernel.
    CUstream ps;
    CUgraph pg;
    DRV(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    DRV(cuStreamBeginCapture(ps, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV(cuLaunchKernel(fill_fn, 1, 1, 1, 1, 1, 1, 0, ps, fargs, NULL));
    CUlaunchAttribute pa;
    memset(&pa, 0, sizeof pa);
    pa.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pa.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig pcfg = {1, 1, 1, 1, 1, 1, 0, ps, &pa, 1};
    r = cuLaunchKernelEx(&pcfg, fill_fn, fargs, NULL);
    DRV(cuStreamEndCapture(ps, &pg));
    ne = 2;
    DRV(get_edges(pg, from, to, got, &ne));
    printf("captured after programmatic serialization: %s; edges %zu, port %u type %u\n", name(r), ne,
           ne ? (unsigned)got[0].from_port : 0, ne ? (unsigned)got[0].type : 0);
    DRV(cuGraphDestroy(pg));
    DRV(cuStreamDestroy(ps));

    // A child graph moved into its node.
    CUgraph moved, parent, back = NULL;
    CUgraphNode inner, mnode;
    DRV(cuGraphCreate(&moved, 0));
    p = memset_node(w + 56, 0x66, 4, ctx);
    DRV(add(&inner, moved, NULL, 0, &p));
    DRV(cuGraphCreate(&parent, 0));
    p = node_of(CU_GRAPH_NODE_TYPE_GRAPH);
    p.graph.graph = moved;
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
    DRV(add(&mnode, parent, NULL, 0, &p));
    DRV(cuGraphChildGraphNodeGetGraph(mnode, &back));
    printf("moved: the node's graph is the program's %s; moved again: %s\n", back == moved ? "yes" : "no",
           name(add(&bad, parent, NULL, 0, &p)));
    CUgraph outer;
    DRV(cuGraphCreate(&outer, 0));
    p.graph.graph = parent;
    DRV(add(&bad, outer, NULL, 0, &p));
    CUgraphExec m;
    DRV(cuGraphInstantiate(&m, outer, 0));
    p = memset_node(w + 56, 0x77, 4, ctx);
    printf("its node set in the outer graph's executable: %s\n", name(exec_set_params(m, inner, &p)));
    DRV(cuGraphLaunch(m, st));
    DRV(cuStreamSynchronize(st));
    print_bytes("moved child launched", w);
    DRV(cuGraphExecDestroy(m));
    DRV(cuGraphDestroy(outer));
    DRV(cuGraphDestroy(child));
    DRV(cuMemFree(w));
    return 0;
}
