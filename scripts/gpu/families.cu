// The families NVIDIA's samples needed of a remote GPU (issue 34), through
// the runtime and, linked with -lcuda, the driver: the block size of best
// occupancy (a host callback for the dynamic shared memory included), the
// profiler's range, stream attributes set and read back, cuCtxCreate_v4,
// function attributes and names, a module's functions, the context's
// flags, synchronous memory operations, context-wide events, atomics'
// capabilities, the old ABIs of graph calls a CUDA 11 runtime looks up.
// Prints every answer, then a checksum of a kernel run at the block size
// found: its output over a remote GPU must be the same as natively
// (scripts/gpu-remote-cudart.sh).
//     nvcc -O2 -o families families.cu -lcuda
#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_check.h"

// Declared by cuda.h or cudaProfiler.h, by toolkit version.
extern "C" CUresult CUDAAPI cuProfilerStart(void);
extern "C" CUresult CUDAAPI cuProfilerStop(void);

// Reverses each block's elements through shared memory, plus one.
__global__ void fillk(unsigned *p, unsigned v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = v;
}

__global__ void flip(float *x, int n)
{
    extern __shared__ float s[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n)
        x[i] = s[blockDim.x - 1 - threadIdx.x] + 1.f;
}

static size_t smem_of(int blockSize)
{
    return (size_t)blockSize * 96; // more than the kernel uses: moves the best block size
}

static void ctx_v4(const char *what, CUctxCreateParams *p)
{
    CUcontext c = NULL, cur = NULL;
    CUresult r = cuCtxCreate_v4(&c, p, 0, 0);
    if (r == CUDA_SUCCESS) {
        DRV(cuCtxGetCurrent(&cur));
        DRV(cuCtxDestroy(c));
    }
    printf("cuCtxCreate_v4 %s: %s%s\n", what, name(r), r == CUDA_SUCCESS ? (cur == c ? ", current" : ", not current") : "");
}

static void stream_attrs(const char *what, cudaStream_t s)
{
    cudaStreamAttrValue v;
    RT(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &v));
    printf("%s: priority %d", what, v.priority);
    RT(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v));
    printf(" sync policy %d", (int)v.syncPolicy);
    RT(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    printf(" window %s %zu hit %.2f %d miss %d\n", v.accessPolicyWindow.base_ptr ? "at buffer" : "none",
           v.accessPolicyWindow.num_bytes, v.accessPolicyWindow.hitRatio, (int)v.accessPolicyWindow.hitProp,
           (int)v.accessPolicyWindow.missProp);
}

// Events over a whole context (cuCtxRecordEvent, cuCtxWaitEvent): the event
// is reached once what every stream was given before it is done, and a
// stream given work after a context-wide wait starts it only after the
// event. A host function that waits for the program holds the first stream.
static int gate_open;
static void CUDART_CB hold(void *)
{
    while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
        usleep(200);
}

static void ctx_events()
{
    CUcontext ctx;
    DRV(cuCtxGetCurrent(&ctx));
    cudaStream_t a, b;
    RT(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    RT(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaEvent_t e1, e2, e3;
    RT(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    RT(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
    RT(cudaEventCreateWithFlags(&e3, cudaEventDisableTiming));
    RT(cudaLaunchHostFunc(a, hold, NULL));
    DRV(cuCtxRecordEvent(ctx, (CUevent)e1));
    RT(cudaEventRecord(e2, a));
    DRV(cuCtxWaitEvent(ctx, (CUevent)e2));
    RT(cudaEventRecord(e3, b));
    printf("context event while a stream is held: %s, a stream after a context wait: %s",
           cudaGetErrorName(cudaEventQuery(e1)), cudaGetErrorName(cudaEventQuery(e3)));
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    RT(cudaEventSynchronize(e1));
    RT(cudaEventSynchronize(e3));
    printf("; released: %s %s\n", cudaGetErrorName(cudaEventQuery(e1)), cudaGetErrorName(cudaEventQuery(e3)));
    printf("context event: no event %s, no context %s\n", name(cuCtxRecordEvent(ctx, NULL)),
           name(cuCtxWaitEvent(NULL, (CUevent)e1)));
    RT(cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed));
    CUresult during = cuCtxRecordEvent(ctx, (CUevent)e1);
    cudaGraph_t g = NULL;
    cudaError_t ended = cudaStreamEndCapture(b, &g);
    printf("context event during a capture: %s, the capture then %s\n", name(during), cudaGetErrorName(ended));
    if (g)
        RT(cudaGraphDestroy(g));
    cudaGetLastError();
    RT(cudaEventDestroy(e1));
    RT(cudaEventDestroy(e2));
    RT(cudaEventDestroy(e3));
    RT(cudaStreamDestroy(a));
    RT(cudaStreamDestroy(b));
}

// The CUDA 10 and 11 ABIs a CUDA 11 runtime looks up at its own version:
// kernel nodes without a kernel handle or context, cuGraphExecUpdate with
// two results, cuStreamGetCaptureInfo with two.
static void old_abis()
{
    // Their typedefs are in cudaTypedefs.h's internal section only.
    CUresult (*add)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, const CUDA_KERNEL_NODE_PARAMS_v1 *);
    CUresult (*get)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v1 *);
    CUresult (*set)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *);
    CUresult (*xset)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *);
    CUresult (*update)(CUgraphExec, CUgraph, CUgraphNode *, CUgraphExecUpdateResult *);
    CUresult (*info)(CUstream, CUstreamCaptureStatus *, cuuint64_t *);
    CUdriverProcAddressQueryResult q;
    DRV(cuGetProcAddress("cuGraphAddKernelNode", (void **)&add, 11080, 0, &q));
    DRV(cuGetProcAddress("cuGraphKernelNodeGetParams", (void **)&get, 11080, 0, &q));
    DRV(cuGetProcAddress("cuGraphKernelNodeSetParams", (void **)&set, 11080, 0, &q));
    DRV(cuGetProcAddress("cuGraphExecKernelNodeSetParams", (void **)&xset, 11080, 0, &q));
    DRV(cuGetProcAddress("cuGraphExecUpdate", (void **)&update, 11080, 0, &q));
    DRV(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&info, 10020, 0, &q));
    cudaFunction_t fr;
    RT(cudaGetFuncBySymbol(&fr, (const void *)fillk));
    CUfunction fill = (CUfunction)fr;
    unsigned *w;
    RT(cudaMalloc(&w, 64));
    RT(cudaMemset(w, 0, 64));
    CUstream st;
    DRV(cuStreamCreate(&st, 0));
    unsigned v7 = 7, v9 = 9, v11 = 11;
    int four = 4, eight = 8;
    void *args[] = {&w, &v7, &four};
    CUDA_KERNEL_NODE_PARAMS_v1 kp = {};
    kp.func = fill;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    CUgraph g, g2, g3;
    CUgraphNode n, n2, n3a, n3b;
    DRV(cuGraphCreate(&g, 0));
    DRV(add(&n, g, NULL, 0, &kp));
    CUDA_KERNEL_NODE_PARAMS_v1 back = {};
    DRV(get(n, &back));
    printf("old kernel node: %s function, grid %u, value %u\n", back.func == fill ? "the same" : "another",
           back.gridDimX, *(unsigned *)back.kernelParams[1]);
    void *args9[] = {&w, &v9, &eight};
    kp.kernelParams = args9;
    DRV(set(n, &kp));
    CUgraphExec x;
    DRV(cuGraphInstantiate(&x, g, 0));
    unsigned words[16];
    DRV(cuGraphLaunch(x, st));
    DRV(cuStreamSynchronize(st));
    RT(cudaMemcpy(words, w, sizeof words, cudaMemcpyDeviceToHost));
    printf("launched: %u %u %u\n", words[0], words[7], words[8]);
    void *args11[] = {&w, &v11, &four};
    kp.kernelParams = args11;
    DRV(xset(x, n, &kp));
    DRV(cuGraphLaunch(x, st));
    DRV(cuStreamSynchronize(st));
    RT(cudaMemcpy(words, w, sizeof words, cudaMemcpyDeviceToHost));
    printf("the executable's node changed: %u %u\n", words[0], words[7]);
    DRV(cuGraphCreate(&g2, 0));
    kp.kernelParams = args;
    DRV(add(&n2, g2, NULL, 0, &kp));
    CUgraphNode err = (CUgraphNode)1;
    CUgraphExecUpdateResult res = (CUgraphExecUpdateResult)99;
    CUresult r = update(x, g2, &err, &res);
    DRV(cuGraphLaunch(x, st));
    DRV(cuStreamSynchronize(st));
    RT(cudaMemcpy(words, w, sizeof words, cudaMemcpyDeviceToHost));
    printf("update: %s, result %d, error node %s; launched: %u\n", name(r), (int)res, err ? "set" : "none", words[0]);
    DRV(cuGraphCreate(&g3, 0));
    DRV(add(&n3a, g3, NULL, 0, &kp));
    DRV(add(&n3b, g3, &n3a, 1, &kp));
    r = update(x, g3, &err, &res);
    printf("update to another shape: %s, result %d; no result: %s\n", name(r), (int)res, name(update(x, g2, &err, NULL)));
    CUstreamCaptureStatus cs = (CUstreamCaptureStatus)9;
    cuuint64_t id = 0;
    DRV(info(st, &cs, &id));
    printf("capture info: status %d", (int)cs);
    DRV(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED));
    DRV(info(st, &cs, &id));
    CUgraph cg;
    DRV(cuStreamEndCapture(st, &cg));
    printf(", capturing %d with an id: %d\n", (int)cs, id != 0);
    DRV(cuGraphDestroy(cg));
    DRV(cuGraphExecDestroy(x));
    DRV(cuGraphDestroy(g));
    DRV(cuGraphDestroy(g2));
    DRV(cuGraphDestroy(g3));
    DRV(cuStreamDestroy(st));
    RT(cudaFree(w));
}

int main()
{
    RT(cudaSetDevice(0));
    RT(cudaFree(0));

    // Through the runtime.
    int grid, block, n;
    RT(cudaOccupancyMaxPotentialBlockSize(&grid, &block, flip, 0, 0));
    printf("runtime: best block %d grid %d\n", block, grid);
    RT(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&grid, &block, flip, smem_of));
    printf("runtime: best block with 96 bytes a thread %d grid %d\n", block, grid);
    RT(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, flip, 256, 4096));
    printf("runtime: blocks per SM of 256 threads and 4 KiB: %d\n", n);
    printf("cudaProfilerStart: %s\n", cudaGetErrorName(cudaProfilerStart()));
    printf("cudaProfilerStop: %s\n", cudaGetErrorName(cudaProfilerStop()));

    float *buf;
    RT(cudaMalloc(&buf, 1 << 20));
    cudaStream_t s, t;
    RT(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1));
    RT(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    stream_attrs("created", s);
    cudaStreamAttrValue a = {};
    a.priority = -3;
    RT(cudaStreamSetAttribute(s, cudaStreamAttributePriority, &a));
    a.syncPolicy = cudaSyncPolicyBlockingSync;
    RT(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &a));
    a = cudaStreamAttrValue{};
    a.accessPolicyWindow.base_ptr = buf;
    a.accessPolicyWindow.num_bytes = 1 << 20;
    a.accessPolicyWindow.hitRatio = 0.5f;
    a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    RT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &a));
    stream_attrs("set", s);
    RT(cudaStreamCopyAttributes(t, s));
    stream_attrs("copied", t);

    // Through the driver, as a program linked with -lcuda calls it.
    CUfunction f;
    RT(cudaGetFuncBySymbol((cudaFunction_t *)&f, (const void *)flip));
    int regs, maxThreads;
    DRV(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
    DRV(cuFuncGetAttribute(&maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    printf("driver: registers %d max threads per block %d\n", regs, maxThreads);
    DRV(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10));
    DRV(cuFuncGetAttribute(&n, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    printf("driver: max dynamic shared memory %d\n", n);
    printf("driver: cuFuncSetCacheConfig %s\n", name(cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED)));
    DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0));
    printf("driver: best block %d grid %d\n", block, grid);
    DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, smem_of, 0, 0));
    printf("driver: best block with 96 bytes a thread %d grid %d\n", block, grid);
    DRV(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, f, smem_of, 0, 200,
                                                  CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
    printf("driver: best block of at most 200 with 96 bytes a thread %d grid %d\n", block, grid);
    DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, 512, 50000, 0));
    printf("driver: blocks per SM of 512 threads and 50000 bytes: %d\n", n);
    size_t avail;
    DRV(cuOccupancyAvailableDynamicSMemPerBlock(&avail, f, 2, 256));
    printf("driver: dynamic shared memory of 2 blocks of 256: %zu\n", avail);
    CUlaunchAttribute cl = {};
    cl.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cl.value.clusterDim.x = 2;
    cl.value.clusterDim.y = cl.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {};
    cfg.gridDimX = 16;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 128;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.attrs = &cl;
    cfg.numAttrs = 1;
    DRV(cuOccupancyMaxPotentialClusterSize(&n, f, &cfg));
    printf("driver: cluster size %d", n);
    DRV(cuOccupancyMaxActiveClusters(&n, f, &cfg));
    printf(" active clusters of 2: %d\n", n);
    CUstreamAttrValue v;
    DRV(cuStreamGetAttribute((CUstream)s, CU_STREAM_ATTRIBUTE_PRIORITY, &v));
    printf("driver: stream priority %d\n", v.priority);
    // Names (the runtime's cudaFuncGetName), the function's module and its
    // functions, the loading state, the context's flags, sync memops.
    const char *fname = NULL, *again = NULL;
    RT(cudaFuncGetName(&fname, (const void *)flip));
    DRV(cuFuncGetName(&again, f));
    printf("names: runtime %s driver %s\n", fname, again);
    CUmodule mod;
    DRV(cuFuncGetModule(&mod, f));
    unsigned int nf = 0;
    DRV(cuModuleGetFunctionCount(&nf, mod));
    printf("module functions: %u, cuFuncGetName of no function: %s\n", nf, name(cuFuncGetName(&again, NULL)));
    CUfunctionLoadingState state;
    DRV(cuFuncIsLoaded(&state, f));
    printf("cuFuncIsLoaded %d cuFuncLoad %s\n", (int)state, name(cuFuncLoad(f)));
    unsigned int flags = 0, flags2 = 0;
    DRV(cuCtxGetFlags(&flags));
    DRV(cuCtxSetFlags(flags | CU_CTX_SCHED_BLOCKING_SYNC));
    DRV(cuCtxGetFlags(&flags2));
    printf("context flags %#x set %#x bad %s\n", flags, flags2, name(cuCtxSetFlags(0x100000)));
    DRV(cuCtxSetFlags(flags));
    unsigned int one = 1, sync = 9;
    CUresult rs = cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)buf);
    DRV(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)buf));
    printf("sync memops set %s read %u\n", name(rs), sync);
    // Tensor maps the server's driver encodes: tiled, im2col and CUDA 12.8's
    // wide im2col (for compute capability 10.0 and later: what the driver
    // answers below that); each encoded twice, whose bytes must agree.
    {
        static CUtensorMap m[2] __attribute__((aligned(64)));
        cuuint64_t dims[4] = {64, 8, 8, 2}, strides[3] = {128, 128 * 8, 128 * 8 * 8};
        cuuint32_t box[4] = {64, 8, 1, 1}, es[4] = {1, 1, 1, 1};
        int lower[2] = {-1, -1}, upper[2] = {1, 1};
        CUresult r[3][2];
        int same[3];
        for (int k = 0; k < 3; k++) {
            for (int j = 0; j < 2; j++) {
                memset(&m[j], j * 0x5a, sizeof m[j]);
                if (k == 0)
                    r[k][j] = cuTensorMapEncodeTiled(&m[j], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, buf, dims, strides, box,
                                                     es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                     CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
                else if (k == 1)
                    r[k][j] = cuTensorMapEncodeIm2col(&m[j], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, buf, dims, strides,
                                                      lower, upper, 64, 32, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
                else
                    r[k][j] = cuTensorMapEncodeIm2colWide(
                        &m[j], CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, buf, dims, strides, -1, 1, 64, 32, es,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
            }
            same[k] = r[k][0] == r[k][1] && (r[k][0] || !memcmp(&m[0], &m[1], sizeof m[0]));
        }
        printf("tensor maps: tiled %s, im2col %s, wide im2col %s; encoded alike twice: %d %d %d\n", name(r[0][0]),
               name(r[1][0]), name(r[2][0]), same[0], same[1], same[2]);
    }
    // A batch of copies through the runtime (cudaMemcpyBatchAsync): up from
    // pageable memory, device to device, down; the legacy stream.
    {
        static unsigned char up[256], down[256];
        for (int i = 0; i < 256; i++)
            up[i] = (unsigned char)(i * 7);
        void *b2;
        RT(cudaMalloc(&b2, 4096));
        void *dsts[3] = {buf, (char *)b2 + 100, down};
        void *srcs[3] = {up, buf, (char *)b2 + 100};
        size_t sizes[3] = {256, 256, 256}, idx = 0;
        cudaMemcpyAttributes attr = {};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        RT(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, s));
        RT(cudaStreamSynchronize(s));
        cudaError_t legacy = cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, 0);
        cudaGetLastError();
        printf("copy batch: down[1] %u down[255] %u, the legacy stream: %s\n", down[1], down[255],
               cudaGetErrorName(legacy));
        RT(cudaFree(b2));
    }
    // The flags pinned memory was made with (cudaHostGetFlags).
    {
        void *ph, *pd;
        unsigned int fh = 99, fd = 99;
        RT(cudaHostAlloc(&ph, 4096, cudaHostAllocPortable | cudaHostAllocMapped));
        RT(cudaMallocHost(&pd, 100));
        RT(cudaHostGetFlags(&fh, ph));
        RT(cudaHostGetFlags(&fd, pd));
        printf("host flags %#x, of cudaMallocHost's %#x\n", fh, fd);
        RT(cudaFreeHost(ph));
        RT(cudaFreeHost(pd));
    }
    // A 3D copy between devices' memory (cudaMemcpy3DPeer, one GPU).
    {
        void *to;
        RT(cudaMalloc(&to, 4096));
        RT(cudaMemset(to, 0, 4096));
        cudaMemcpy3DPeerParms p = {};
        p.srcPtr = make_cudaPitchedPtr(buf, 1024, 256, 4);
        p.srcDevice = 0;
        p.dstPtr = make_cudaPitchedPtr(to, 1024, 256, 4);
        p.dstDevice = 0;
        p.extent = make_cudaExtent(1024, 4, 1);
        RT(cudaMemcpy3DPeer(&p));
        unsigned char back[4096];
        RT(cudaMemcpy(back, to, sizeof back, cudaMemcpyDeviceToHost));
        unsigned long sum = 0;
        for (int i = 0; i < 4096; i++)
            sum += back[i] * (unsigned long)(i % 13 + 1);
        printf("3D copy between devices: sum %lu\n", sum);
        RT(cudaFree(to));
    }
    // A batch of stream memory operations through the driver.
    {
        CUstreamBatchMemOpParams ops[3] = {};
        ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        ops[0].writeValue.address = (CUdeviceptr)buf;
        ops[0].writeValue.value = 5;
        ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
        ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
        ops[2].waitValue.address = (CUdeviceptr)buf;
        ops[2].waitValue.value = 5;
        ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
        DRV(cuStreamBatchMemOp((CUstream)s, 3, ops, 0));
        RT(cudaStreamSynchronize(s));
        unsigned int w = 0;
        RT(cudaMemcpy(&w, buf, 4, cudaMemcpyDeviceToHost));
        printf("memory operations batch: %u\n", w);
    }
    printf("cuProfilerStart: %s\n", name(cuProfilerStart()));
    printf("cuProfilerStop: %s\n", name(cuProfilerStop()));

    int support = -1;
    DRV(cuDeviceGetExecAffinitySupport(&support, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0));
    printf("SM count affinity supported: %d\n", support);
    CUexecAffinityParam got = {};
    CUresult ra = cuCtxGetExecAffinity(&got, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    printf("cuCtxGetExecAffinity: %s", name(ra));
    if (ra == CUDA_SUCCESS)
        printf(" %u SMs", got.param.smCount.val);
    printf("\n");
    ctx_v4("without parameters", NULL);
    CUctxCreateParams none = {};
    ctx_v4("with none", &none);
    CUexecAffinityParam aff = {};
    aff.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    aff.param.smCount.val = 8;
    CUctxCreateParams sm = {};
    sm.execAffinityParams = &aff;
    sm.numExecAffinityParams = 1;
    ctx_v4("with 8 SMs", &sm);
    RT(cudaSetDevice(0)); // the primary context current again

    // The kernel at the block size found with the callback.
    DRV(cuOccupancyMaxPotentialBlockSize(&grid, &block, f, smem_of, 0, 0));
    const int count = 1 << 18;
    float *host = (float *)malloc(count * sizeof(float));
    for (int i = 0; i < count; i++)
        host[i] = (float)(i % 1000);
    RT(cudaMemcpyAsync(buf, host, count * sizeof(float), cudaMemcpyHostToDevice, s));
    flip<<<(count + block - 1) / block, block, smem_of(block), s>>>(buf, count);
    RT(cudaGetLastError());
    RT(cudaMemcpyAsync(host, buf, count * sizeof(float), cudaMemcpyDeviceToHost, s));
    RT(cudaStreamSynchronize(s));
    double sum = 0;
    for (int i = 0; i < count; i++)
        sum += host[i] * (double)(i % 7 + 1);
    printf("checksum %.1f\n", sum);
    RT(cudaStreamDestroy(t));
    RT(cudaStreamDestroy(s));
    RT(cudaFree(buf));
    free(host);
    ctx_events();
    old_abis();

    // Pools by location (CUDA 13): the device's current pool set and read.
    CUmemLocation dl = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, hl = {CU_MEM_LOCATION_TYPE_HOST, 0};
    CUmemoryPool dp = NULL, mp = NULL, cp = NULL, hp = NULL;
    CUmemPoolProps pprops;
    memset(&pprops, 0, sizeof pprops);
    pprops.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pprops.location = dl;
    DRV(cuMemGetDefaultMemPool(&dp, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    DRV(cuMemPoolCreate(&mp, &pprops));
    DRV(cuMemSetMemPool(&dl, CU_MEM_ALLOCATION_TYPE_PINNED, mp));
    DRV(cuMemGetMemPool(&cp, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    printf("current pool: %s; no pool: %s", cp == mp ? "the one set" : cp == dp ? "the default" : "another",
           name(cuMemSetMemPool(&dl, CU_MEM_ALLOCATION_TYPE_PINNED, NULL)));
    cuuint64_t thr = 1 << 20, thr_got = 0, five = 5, zero64 = 0;
    int reuse = -1, off = 0, after = -1;
    DRV(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    DRV(cuMemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr_got));
    DRV(cuMemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    DRV(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
    DRV(cuMemPoolGetAttribute(mp, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &after));
    CUresult high5 = cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five);
    printf("; its threshold %llu, opportunistic reuse %d then %d; its used high mark set to 5: %s, to 0: %s, its "
           "used memory set: %s",
           (unsigned long long)thr_got, reuse, after, name(high5),
           name(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero64)),
           name(cuMemPoolSetAttribute(mp, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero64)));
    DRV(cuMemPoolDestroy(mp));
    DRV(cuMemGetMemPool(&cp, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
    printf("; after its destroy: %s\n", cp == dp ? "the default" : "another");
    CUresult rhp = cuMemGetMemPool(&hp, &hl, CU_MEM_ALLOCATION_TYPE_PINNED);
    printf("the host's current pool: %s\n", name(rhp));

    // CUDA 2's device properties, as old programs ask.
    CUdevprop dprop;
    DRV(cuDeviceGetProperties(&dprop, 0));
    printf("device properties: %d threads a block, grid %d, %d bytes shared, warp %d, clock %d kHz, pitch %d, "
           "texture alignment %d\n", dprop.maxThreadsPerBlock, dprop.maxGridSize[0], dprop.sharedMemPerBlock,
           dprop.SIMDWidth, dprop.clockRate, dprop.memPitch, dprop.textureAlign);

    // Atomics' capabilities with the host and between devices.
    CUatomicOperation aops[] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS, CU_ATOMIC_OPERATION_FLOAT_ADD,
                                CU_ATOMIC_OPERATION_MAX};
    unsigned int acaps[4] = {99, 99, 99, 99};
    CUresult rh = cuDeviceGetHostAtomicCapabilities(acaps, aops, 3, 0);
    printf("host atomics: %s %#x %#x %#x; an unknown operation: %s, none asked: %s; between device 0 and itself: %s\n",
           name(rh), acaps[0], acaps[1], acaps[2], name(cuDeviceGetHostAtomicCapabilities(acaps, aops, 4, 0)),
           name(cuDeviceGetHostAtomicCapabilities(acaps, aops, 0, 0)),
           name(cuDeviceGetP2PAtomicCapabilities(acaps, aops, 3, 0, 0)));
    printf("families: done\n");
    return 0;
}
