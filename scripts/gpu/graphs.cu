// Graphs built node by node through the CUDA runtime's explicit API: an
// allocation node, a memset node and a kernel node into it, copy nodes
// (device to device, then into pinned memory), a host node checking what
// arrived there, a free node; launched several times, the pinned input
// changed between launches (a copy node reads it at each launch). Then an
// IF conditional node whose body a kernel enables or not, its parameters
// read back; a WHILE node whose body, captured from a stream into the body
// graph, counts down; its executable updated from a graph of the same
// shape. Prints what each launch produced; a failing call is printed and
// ends the program.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void scale(int *p, int n, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = p[i] * k + i;
}

__global__ void decide(cudaGraphConditionalHandle h, const int *flag)
{
    cudaGraphSetConditional(h, *flag);
}

__global__ void mark(int *p, int v)
{
    *p = v;
}

__global__ void countdown(cudaGraphConditionalHandle h, int *count, int *ran)
{
    *ran += 1;
    *count -= 1;
    cudaGraphSetConditional(h, *count > 0);
}

struct Seen {
    const int *host;
    int n, k, fill, calls, right;
};

static void CUDART_CB check(void *data)
{
    Seen *s = static_cast<Seen *>(data);
    s->calls++;
    s->right = 1;
    for (int i = 0; i < s->n; i++)
        if (s->host[i] != s->fill * s->k + i)
            s->right = 0;
}

int main()
{
    const int n = 1 << 16, fill = 0x01010101;
    const size_t bytes = n * sizeof(int);
    cudaStream_t st;
    int *dev, *pinned;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&dev, bytes));
    CHECK(cudaMallocHost(&pinned, bytes));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap;
    memset(&ap, 0, sizeof ap);
    ap.bytesize = bytes;
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    cudaGraphNode_t alloc, set, kern, d2d, d2h, host, freed;
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
    int *a = static_cast<int *>(ap.dptr);

    cudaMemsetParams sp;
    memset(&sp, 0, sizeof sp);
    sp.dst = a;
    sp.value = 1;
    sp.elementSize = 1;
    sp.width = bytes;
    sp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&set, g, &alloc, 1, &sp));

    int k = 3, count = n;
    void *args[] = {&a, &count, &k};
    cudaKernelNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.func = (void *)scale;
    kp.gridDim = dim3((n + 255) / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&kern, g, &set, 1, &kp));
    k = 0; // read when the node was added

    CHECK(cudaGraphAddMemcpyNode1D(&d2d, g, &kern, 1, dev, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaGraphAddMemcpyNode1D(&d2h, g, &d2d, 1, pinned, dev, bytes, cudaMemcpyDeviceToHost));
    Seen seen = {pinned, n, 3, fill, 0, 0};
    cudaHostNodeParams hp = {check, &seen};
    CHECK(cudaGraphAddHostNode(&host, g, &d2h, 1, &hp));
    cudaGraphNode_t after[] = {d2h, d2d};
    CHECK(cudaGraphAddMemFreeNode(&freed, g, after, 2, a));

    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
    std::printf("explicit graph: %zu nodes\n", nodes);
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++) {
        memset(pinned, 0, bytes);
        CHECK(cudaGraphLaunch(x, st));
        CHECK(cudaStreamSynchronize(st));
        std::printf("launch %d: host node ran %d times, saw the right bytes: %s; pinned[%d] = %d\n", i, seen.calls,
                    seen.right ? "yes" : "no", n - 1, pinned[n - 1]);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));

    // An IF node: its body marks a word when the kernel before it says so.
    int *flag, *word;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&word, sizeof(int)));
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
    cudaGraphNode_t dnode, cnode, bnode;
    void *dargs[] = {&h, &flag};
    kp.func = (void *)decide;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = dargs;
    CHECK(cudaGraphAddKernelNode(&dnode, g, nullptr, 0, &kp));
    cudaGraphNodeParams &cp = *(cudaGraphNodeParams *)calloc(1, sizeof(cudaGraphNodeParams)); // no default constructor
    memset(&cp, 0, sizeof cp);
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = h;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 1;
    CHECK(cudaGraphAddNode(&cnode, g, &dnode, nullptr, 1, &cp));
    int v = 42;
    void *margs[] = {&word, &v};
    kp.func = (void *)mark;
    kp.kernelParams = margs;
    cudaGraph_t body = cp.conditional.phGraph_out[0];
    CHECK(cudaGraphAddKernelNode(&bnode, body, nullptr, 0, &kp));
    CHECK(cudaGraphInstantiate(&x, g, 0));
    for (int taken = 0; taken < 2; taken++) {
        int got = 0;
        CHECK(cudaMemcpy(flag, &taken, sizeof taken, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(word, 0, sizeof(int)));
        CHECK(cudaGraphLaunch(x, st));
        CHECK(cudaStreamSynchronize(st));
        CHECK(cudaMemcpy(&got, word, sizeof got, cudaMemcpyDeviceToHost));
        std::printf("conditional node with flag %d: body %s (word %d)\n", taken, got == 42 ? "ran" : "skipped", got);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));

    // A WHILE node, its handle 1 at each launch; its body captured from the
    // stream: a kernel counting down and setting the handle to what is left.
    int *remaining;
    CHECK(cudaMalloc(&remaining, sizeof(int)));
    cudaGraph_t graphs[2], captured;
    cudaGraphNode_t whiles[2];
    for (int i = 0; i < 2; i++) {
        CHECK(cudaGraphCreate(&graphs[i], 0));
        cudaGraphConditionalHandle w;
        CHECK(cudaGraphConditionalHandleCreate(&w, graphs[i], 1 - i, cudaGraphCondAssignDefault));
        memset(&cp, 0, sizeof cp);
        cp.type = cudaGraphNodeTypeConditional;
        cp.conditional.handle = w;
        cp.conditional.type = cudaGraphCondTypeWhile;
        cp.conditional.size = 1;
        CHECK(cudaGraphAddNode(&whiles[i], graphs[i], nullptr, nullptr, 0, &cp));
        CHECK(cudaStreamBeginCaptureToGraph(st, cp.conditional.phGraph_out[0], nullptr, nullptr, 0,
                                            cudaStreamCaptureModeRelaxed));
        countdown<<<1, 1, 0, st>>>(w, remaining, word);
        CHECK(cudaStreamEndCapture(st, &captured));
        std::printf("while body captured: %s graph\n", captured == cp.conditional.phGraph_out[0] ? "the body" : "another");
    }
    CHECK(cudaGraphInstantiate(&x, graphs[0], 0));
    for (int round = 0; round < 3; round++) {
        if (round == 2) {
            // The same shape, its handle 0 at each launch: as the driver
            // answers (remotely as natively), the nodes it names the
            // program's.
            cudaGraphExecUpdateResultInfo info;
            memset(&info, 0, sizeof info);
            cudaError_t e = cudaGraphExecUpdate(x, graphs[1], &info);
            std::printf("executable updated: %s, result %d, error node %s\n", cudaGetErrorName(e), (int)info.result,
                        info.errorNode == nullptr       ? "none"
                        : info.errorNode == whiles[1]   ? "the new while node"
                                                        : "another");
        }
        int from = 3 + 2 * (round & 1), left = -1, ran = -1;
        CHECK(cudaMemcpy(remaining, &from, sizeof from, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(word, 0, sizeof(int)));
        CHECK(cudaGraphLaunch(x, st));
        CHECK(cudaStreamSynchronize(st));
        CHECK(cudaMemcpy(&left, remaining, sizeof left, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(&ran, word, sizeof ran, cudaMemcpyDeviceToHost));
        std::printf("while node from %d: body ran %d times, %d left\n", from, ran, left);
    }
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(graphs[0]));
    CHECK(cudaGraphDestroy(graphs[1]));
    CHECK(cudaFree(remaining));
    CHECK(cudaFree(flag));
    CHECK(cudaFree(word));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(dev));
    std::printf("done\n");
    return 0;
}
