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
 *                         nodes, a child graph node, a clone launched
 *     graphnodes host     a host node, in a graph launched four times
 *     graphnodes hostile  what a connection may not name: a memset node
 *                         outside its memory, a forged graph, an allocation
 *                         node's access descriptors (pointers into the
 *                         program); then a call that is allowed */
#include "common.h"

#include <stdint.h>

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
    sp = set_params(b, 1, 1, ROW, 1, 0);
    printf("then a memset in its memory: %s\n", result_name(cuGraphAddMemsetNode(&node, g, NULL, 0, &sp, ctx)));
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
    CHECK(cuGraphClone(&c, g));
    CHECK(cuGraphGetNodes(c, NULL, &n));
    printf("clone: %zu nodes\n", n);
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

static int calls;

static void host_fn(void *data)
{
    calls += *(int *)data;
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
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(b));
    return 0;
}

int main(int argc, char **argv)
{
    CUcontext ctx = primary_context();
    if (argc > 1 && strcmp(argv[1], "hostile") == 0)
        return hostile(ctx);
    if (argc > 1 && strcmp(argv[1], "host") == 0)
        return host(ctx);
    if (argc > 1 && strcmp(argv[1], "copies") == 0)
        return copies(ctx);
    if (argc > 1 && strcmp(argv[1], "edges") == 0)
        return edges(ctx);
    return run(ctx);
}
