// CUDA graph memory nodes through the runtime API, with the graph memory
// pool's own accounting printed after every step.
//     graphmem            (a) cudaMallocAsync/kernels/cudaFreeAsync captured
//                         from a stream, replayed; (b) an explicit graph whose
//                         allocation node is freed by a second graph's free
//                         node; (c) the pool's figures, then trimmed
//     graphmem big MIB    one captured graph that allocates MIB MiB: what
//                         instantiate, upload and launch return
// Every line is deterministic, so a native run and one under the shim can be
// diffed. Exit status 0 when every call succeeded and every checksum matched.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

static const int GRID = 1024, BLOCK = 256;
static int failures;

// Print what a call returned; anything but success counts as a failure (and
// the non-sticky error is cleared so later steps report their own result).
static bool step(const char *what, cudaError_t e)
{
    std::printf("step %s: %s\n", what, cudaGetErrorName(e));
    if (e != cudaSuccess) {
        failures++;
        cudaGetLastError();
    }
    return e == cudaSuccess;
}

static void check(const char *what, bool ok)
{
    std::printf("check %s: %s\n", what, ok ? "ok" : "MISMATCH");
    if (!ok)
        failures++;
}

// The graph memory pool's current figures, in bytes.
static void pool(int dev, const char *when)
{
    uint64_t used = 0, reserved = 0;
    cudaError_t e1 = cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemCurrent, &used);
    cudaError_t e2 = cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemCurrent, &reserved);
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
        step("cudaDeviceGetGraphMemAttribute", e1 != cudaSuccess ? e1 : e2);
        return;
    }
    std::printf("graph memory %s: used %llu reserved %llu\n", when, (unsigned long long)used,
                (unsigned long long)reserved);
}

// seed = *seedp (when given) + add: a counter kept on the device lets every
// replay of a captured graph write different data.
__global__ void fill(unsigned *p, size_t n, const unsigned *seedp, unsigned add)
{
    unsigned seed = (seedp ? *seedp : 0u) + add;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (unsigned)i * 2654435761u + seed * 40503u;
}

__global__ void bump(unsigned *counter)
{
    *counter += 1;
}

// Integer sum of every stride-th element: order-independent, so exact.
__global__ void sum(const unsigned *p, size_t n, size_t stride, unsigned long long *out)
{
    unsigned long long local = 0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k * stride < n; k += (size_t)gridDim.x * blockDim.x)
        local += p[k * stride];
    atomicAdd(out, local);
}

// Sum of every stride-th value fill() writes, as the sum kernel computes it.
static unsigned long long expected_sampled(size_t n, size_t stride, unsigned seed)
{
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i += stride)
        s += (unsigned)((unsigned)i * 2654435761u + seed * 40503u);
    return s;
}

static unsigned long long read_out(const unsigned long long *out)
{
    unsigned long long v = 0;
    cudaError_t e = cudaMemcpy(&v, out, sizeof v, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        step("read result", e);
    return v;
}

// Abandon a capture that went wrong, so the stream is usable again.
static void abandon(cudaStream_t s)
{
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(s, &g);
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
}

// (a) Stream capture: bump the counter, allocate, fill, sum, free.
static void captured(int dev, cudaStream_t s, unsigned *counter, unsigned long long *out)
{
    const size_t bytes = 256u << 20, n = bytes / sizeof(unsigned);
    const int launches = 4;
    std::printf("== (a) captured cudaMallocAsync/cudaFreeAsync, %zu MiB, %d launches\n", bytes >> 20, launches);
    // The counter is reset on the capturing stream itself (a plain cudaMemset
    // would go to the legacy stream, which a non-blocking stream ignores).
    if (!step("a.reset counter", cudaMemsetAsync(counter, 0, sizeof *counter, s)) ||
        !step("a.synchronize", cudaStreamSynchronize(s)))
        return;
    if (!step("a.begin capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal)))
        return;
    unsigned *buf = nullptr;
    bool ok = step("a.cudaMallocAsync", cudaMallocAsync((void **)&buf, bytes, s)) &&
              step("a.memset result", cudaMemsetAsync(out, 0, sizeof *out, s));
    if (ok) {
        bump<<<1, 1, 0, s>>>(counter);
        fill<<<GRID, BLOCK, 0, s>>>(buf, n, counter, 0u);
        sum<<<GRID, BLOCK, 0, s>>>(buf, n, 1, out);
        ok = step("a.kernels", cudaGetLastError()) && step("a.cudaFreeAsync", cudaFreeAsync(buf, s));
    }
    if (!ok) {
        abandon(s);
        return;
    }
    cudaGraph_t g;
    if (!step("a.end capture", cudaStreamEndCapture(s, &g)))
        return;
    cudaGraphExec_t ge;
    if (step("a.instantiate", cudaGraphInstantiate(&ge, g, 0))) {
        pool(dev, "after a.instantiate");
        for (int i = 1; i <= launches; i++) {
            char what[64];
            std::snprintf(what, sizeof what, "a.launch %d", i);
            if (!step(what, cudaGraphLaunch(ge, s)) || !step("a.synchronize", cudaStreamSynchronize(s)))
                break;
            unsigned long long got = read_out(out), want = expected_sampled(n, 1, (unsigned)i);
            std::printf("a.launch %d: checksum %#llx\n", i, got);
            std::snprintf(what, sizeof what, "a.launch %d checksum", i);
            check(what, got == want);
            if (i == 1)
                pool(dev, "after a.launch 1");
        }
        step("a.exec destroy", cudaGraphExecDestroy(ge));
    }
    step("a.graph destroy", cudaGraphDestroy(g));
    pool(dev, "after (a)");
}

// (b) Graph A: allocation node, then a kernel filling the allocation.
// Graph B: a kernel summing it, then the free node. A cannot be relaunched
// until B has freed its allocation, so each round launches A then B.
static void explicit_nodes(int dev, cudaStream_t s, unsigned long long *out)
{
    const size_t bytes = 512u << 20;
    const int rounds = 3;
    std::printf("== (b) allocation node in graph A, free node in graph B, %zu MiB, %d rounds\n", bytes >> 20, rounds);
    cudaGraph_t ga, gb;
    if (!step("b.create A", cudaGraphCreate(&ga, 0)) || !step("b.create B", cudaGraphCreate(&gb, 0)))
        return;

    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = dev;
    ap.bytesize = bytes;
    cudaGraphNode_t alloc_node, fill_node, sum_node, free_node;
    if (!step("b.add alloc node", cudaGraphAddMemAllocNode(&alloc_node, ga, nullptr, 0, &ap)))
        return;
    unsigned *buf = (unsigned *)ap.dptr;
    size_t n = bytes / sizeof(unsigned), stride = 1;
    const unsigned *no_seedp = nullptr;
    unsigned seed = 0;

    // kernelParams are copied when the node is added or updated.
    void *fill_args[] = {&buf, &n, &no_seedp, &seed};
    cudaKernelNodeParams fp = {};
    fp.func = (void *)fill;
    fp.gridDim = dim3(GRID);
    fp.blockDim = dim3(BLOCK);
    fp.kernelParams = fill_args;
    void *sum_args[] = {&buf, &n, &stride, &out};
    cudaKernelNodeParams sp = fp;
    sp.func = (void *)sum;
    sp.kernelParams = sum_args;
    bool ok = step("b.add fill node", cudaGraphAddKernelNode(&fill_node, ga, &alloc_node, 1, &fp)) &&
              step("b.add sum node", cudaGraphAddKernelNode(&sum_node, gb, nullptr, 0, &sp)) &&
              step("b.add free node", cudaGraphAddMemFreeNode(&free_node, gb, &sum_node, 1, buf));
    cudaGraphExec_t ea = nullptr, eb = nullptr;
    ok = ok && step("b.instantiate A", cudaGraphInstantiate(&ea, ga, 0)) &&
         step("b.instantiate B", cudaGraphInstantiate(&eb, gb, 0));
    if (ok)
        pool(dev, "after b.instantiate");
    for (int r = 1; ok && r <= rounds; r++) {
        seed = 100u + r;
        char what[64];
        std::snprintf(what, sizeof what, "b.round %d", r);
        ok = step("b.set fill params", cudaGraphExecKernelNodeSetParams(ea, fill_node, &fp)) &&
             step("b.memset result", cudaMemsetAsync(out, 0, sizeof *out, s)) &&
             step("b.launch A", cudaGraphLaunch(ea, s));
        if (ok && r == 1) {
            // A's allocation is live until B runs.
            ok = step("b.synchronize", cudaStreamSynchronize(s));
            pool(dev, "after b.launch A, before B");
        }
        ok = ok && step("b.launch B", cudaGraphLaunch(eb, s)) && step("b.synchronize", cudaStreamSynchronize(s));
        if (!ok)
            break;
        unsigned long long got = read_out(out), want = expected_sampled(n, 1, seed);
        std::printf("%s: checksum %#llx\n", what, got);
        std::snprintf(what, sizeof what, "b.round %d checksum", r);
        check(what, got == want);
        if (r == 1)
            pool(dev, "after b.launch B");
    }
    if (ea)
        step("b.exec destroy A", cudaGraphExecDestroy(ea));
    if (eb)
        step("b.exec destroy B", cudaGraphExecDestroy(eb));
    step("b.graph destroy A", cudaGraphDestroy(ga));
    step("b.graph destroy B", cudaGraphDestroy(gb));
    pool(dev, "after (b)");
}

static void trim_and_report(int dev)
{
    std::printf("== (c) trim\n");
    step("c.device synchronize", cudaDeviceSynchronize());
    pool(dev, "before trim");
    step("c.cudaDeviceGraphMemTrim", cudaDeviceGraphMemTrim(dev));
    pool(dev, "after trim");
    uint64_t used_high = 0, reserved_high = 0;
    if (step("c.high watermarks", cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrUsedMemHigh, &used_high)) &&
        step("c.high watermarks", cudaDeviceGetGraphMemAttribute(dev, cudaGraphMemAttrReservedMemHigh, &reserved_high)))
        std::printf("graph memory high: used %llu reserved %llu\n", (unsigned long long)used_high,
                    (unsigned long long)reserved_high);
}

// One graph allocating MIB MiB: under a smaller quota it must be refused
// with cudaErrorMemoryAllocation, as on a full GPU. The first failing call
// ends the attempt; "big result" names it.
static int big(int dev, cudaStream_t s, unsigned long long *out, size_t mib)
{
    // The whole allocation is written; a sample of it is summed and checked.
    const size_t bytes = mib << 20, n = bytes / sizeof(unsigned), stride = 1u << 20;
    const unsigned seed = 7;
    const unsigned *no_seedp = nullptr;
    std::printf("== big: one graph allocating %zu MiB\n", mib);
    cudaError_t first = cudaSuccess;
    auto note = [&](const char *what, cudaError_t e) {
        if (e != cudaSuccess && first == cudaSuccess)
            first = e;
        return step(what, e);
    };
    if (!note("big.begin capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal)))
        return 1;
    unsigned *buf = nullptr;
    bool ok = note("big.cudaMallocAsync", cudaMallocAsync((void **)&buf, bytes, s)) &&
              note("big.memset result", cudaMemsetAsync(out, 0, sizeof *out, s));
    if (ok) {
        fill<<<GRID, BLOCK, 0, s>>>(buf, n, no_seedp, seed);
        sum<<<GRID, BLOCK, 0, s>>>(buf, n, stride, out);
        ok = note("big.kernels", cudaGetLastError()) && note("big.cudaFreeAsync", cudaFreeAsync(buf, s));
    }
    if (!ok) {
        abandon(s);
    } else {
        cudaGraph_t g;
        if (note("big.end capture", cudaStreamEndCapture(s, &g))) {
            cudaGraphExec_t ge;
            if (note("big.instantiate", cudaGraphInstantiate(&ge, g, 0))) {
                if (note("big.upload", cudaGraphUpload(ge, s)) && note("big.launch", cudaGraphLaunch(ge, s)) &&
                    note("big.synchronize", cudaStreamSynchronize(s))) {
                    pool(dev, "after big.launch");
                    unsigned long long got = read_out(out), want = expected_sampled(n, stride, seed);
                    std::printf("big: checksum %#llx\n", got);
                    check("big checksum", got == want);
                }
                step("big.exec destroy", cudaGraphExecDestroy(ge));
            }
            step("big.graph destroy", cudaGraphDestroy(g));
        }
    }
    step("big.trim", cudaDeviceGraphMemTrim(dev));
    pool(dev, "after big.trim");
    std::printf("big result: %s\n", cudaGetErrorName(first));
    return first == cudaSuccess && failures == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    int dev = 0;
    if (!step("set device", cudaSetDevice(dev)) || !step("init", cudaFree(0)))
        return 1;
    cudaStream_t s;
    unsigned *counter;
    unsigned long long *out;
    if (!step("stream create", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) ||
        !step("cudaMalloc", cudaMalloc((void **)&counter, sizeof *counter)) ||
        !step("cudaMalloc", cudaMalloc((void **)&out, sizeof *out)))
        return 1;
    pool(dev, "at start");
    if (argc >= 3 && !std::strcmp(argv[1], "big"))
        return big(dev, s, out, std::strtoull(argv[2], nullptr, 10));
    if (argc != 1) {
        std::fprintf(stderr, "usage: graphmem [big MIB]\n");
        return 2;
    }
    captured(dev, s, counter, out);
    explicit_nodes(dev, s, out);
    trim_and_report(dev);
    std::printf("graphmem: %s (%d failure(s))\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
