// cuBLAS captured into CUDA graphs: cublasSdot writing its result to device
// memory (CUBLAS_POINTER_MODE_DEVICE) and cublasSgemm (host scalars, taken
// by value at capture), captured in cudaStreamCaptureModeGlobal and
// cudaStreamCaptureModeThreadLocal, each graph replayed several times.
// Every replay must reproduce the uncaptured results bit for bit; inputs are
// small integers, so the exact answers are also known on the host.
// Output is deterministic (diffable between a native run and one under the
// shim); exit status 0 when every check passed.
//     nvcc -O2 -o cublas_capture cublas_capture.cu -lcublas
#include <cstdio>
#include <cstring>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

static const int N_DOT = 1 << 20, M = 256, REPLAYS = 5;
static int failures;

static bool cuda(const char *what, cudaError_t e)
{
    std::printf("%s: %s\n", what, cudaGetErrorName(e));
    if (e != cudaSuccess) {
        failures++;
        cudaGetLastError();
    }
    return e == cudaSuccess;
}

static bool blas(const char *what, cublasStatus_t st)
{
    std::printf("%s: %s\n", what, cublasGetStatusName(st));
    if (st != CUBLAS_STATUS_SUCCESS)
        failures++;
    return st == CUBLAS_STATUS_SUCCESS;
}

static void verdict(const char *what, bool ok)
{
    std::printf("%s: %s\n", what, ok ? "PASS" : "FAIL");
    if (!ok)
        failures++;
}

struct Buffers {
    float *x, *y, *dot, *a, *b, *c;
};

// The dot product into device memory, then C = A * B.
static bool work(cublasHandle_t h, const Buffers &d, const char *tag)
{
    static const float one = 1.0f, zero = 0.0f;
    char what[160];
    std::snprintf(what, sizeof what, "%s cublasSetPointerMode(DEVICE)", tag);
    bool ok = blas(what, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    std::snprintf(what, sizeof what, "%s cublasSdot", tag);
    ok = ok && blas(what, cublasSdot(h, N_DOT, d.x, 1, d.y, 1, d.dot));
    std::snprintf(what, sizeof what, "%s cublasSetPointerMode(HOST)", tag);
    ok = ok && blas(what, cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    std::snprintf(what, sizeof what, "%s cublasSgemm", tag);
    ok = ok && blas(what, cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, d.a, M, d.b, M, &zero, d.c, M));
    return ok;
}

// Copy the results back: the dot product, then C.
static bool fetch(const Buffers &d, float *dot, std::vector<float> &c)
{
    return cudaMemcpy(dot, d.dot, sizeof *dot, cudaMemcpyDeviceToHost) == cudaSuccess &&
           cudaMemcpy(c.data(), d.c, c.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
}

static double checksum(const std::vector<float> &c)
{
    double s = 0;
    for (float v : c)
        s += v;
    return s;
}

// Capture work() in one mode, replay it, and compare each replay with the
// uncaptured results; outputs are poisoned (all bits set: NaN) before each.
static void captured(cublasHandle_t h, cudaStream_t s, const Buffers &d, cudaStreamCaptureMode mode,
                     const char *name, float ref_dot, const std::vector<float> &ref_c)
{
    std::printf("== capture, %s mode\n", name);
    char tag[64];
    std::snprintf(tag, sizeof tag, "%s capture:", name);
    if (!cuda("begin capture", cudaStreamBeginCapture(s, mode)))
        return;
    bool ok = work(h, d, tag);
    cudaGraph_t g = nullptr;
    // End the capture whatever happened, so the stream is usable again.
    ok = cuda("end capture", cudaStreamEndCapture(s, &g)) && ok;
    cudaGraphExec_t ge = nullptr;
    ok = ok && cuda("instantiate", cudaGraphInstantiate(&ge, g, 0));
    int same = 0;
    std::vector<float> c(ref_c.size());
    for (int r = 0; ok && r < REPLAYS; r++) {
        float dot = 0;
        ok = cudaMemsetAsync(d.dot, 0xff, sizeof(float), s) == cudaSuccess &&
             cudaMemsetAsync(d.c, 0xff, c.size() * sizeof(float), s) == cudaSuccess &&
             cuda("replay", cudaGraphLaunch(ge, s)) && cuda("synchronize", cudaStreamSynchronize(s)) &&
             fetch(d, &dot, c);
        if (ok && std::memcmp(&dot, &ref_dot, sizeof dot) == 0 &&
            std::memcmp(c.data(), ref_c.data(), c.size() * sizeof(float)) == 0)
            same++;
    }
    std::printf("%s %d of %d replays bit-identical to the uncaptured results\n", tag, same, REPLAYS);
    char what[160];
    std::snprintf(what, sizeof what, "%s cublasSdot + cublasSgemm replayed", tag);
    verdict(what, ok && same == REPLAYS);
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
}

int main()
{
    if (!cuda("init", cudaFree(0)))
        return 1;
    std::vector<float> hx(N_DOT), hy(N_DOT), ha(M * M), hb(M * M);
    double want_dot = 0;
    for (int i = 0; i < N_DOT; i++) {
        hx[i] = (float)(i % 7 - 3);
        hy[i] = (float)(i % 5 - 2);
        want_dot += (double)hx[i] * hy[i];
    }
    for (int i = 0; i < M * M; i++) {
        ha[i] = (float)(i % 5 - 2);
        hb[i] = (float)(i % 3 - 1);
    }
    // Column-major C = A * B on the host, exact (small integers).
    std::vector<float> want_c(M * M);
    for (int j = 0; j < M; j++)
        for (int i = 0; i < M; i++) {
            double v = 0;
            for (int k = 0; k < M; k++)
                v += (double)ha[i + k * M] * hb[k + j * M];
            want_c[i + j * M] = (float)v;
        }

    Buffers d;
    void *workspace;
    const size_t ws_bytes = 32u << 20;
    if (!cuda("cudaMalloc", cudaMalloc((void **)&d.x, N_DOT * sizeof(float))) ||
        !cuda("cudaMalloc", cudaMalloc((void **)&d.y, N_DOT * sizeof(float))) ||
        !cuda("cudaMalloc", cudaMalloc((void **)&d.dot, sizeof(float))) ||
        !cuda("cudaMalloc", cudaMalloc((void **)&d.a, M * M * sizeof(float))) ||
        !cuda("cudaMalloc", cudaMalloc((void **)&d.b, M * M * sizeof(float))) ||
        !cuda("cudaMalloc", cudaMalloc((void **)&d.c, M * M * sizeof(float))) ||
        !cuda("cudaMalloc workspace", cudaMalloc(&workspace, ws_bytes)))
        return 1;
    cudaMemcpy(d.x, hx.data(), N_DOT * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(d.y, hy.data(), N_DOT * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(d.a, ha.data(), M * M * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(d.b, hb.data(), M * M * sizeof(float), cudaMemcpyHostToDevice);
    if (!cuda("copy inputs", cudaDeviceSynchronize()))
        return 1;

    cudaStream_t s;
    cublasHandle_t h;
    if (!cuda("stream create", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) ||
        !blas("cublasCreate", cublasCreate(&h)) || !blas("cublasSetStream", cublasSetStream(h, s)) ||
        // After cublasSetStream (which resets it): a workspace of our own, so
        // nothing is allocated while a capture is under way.
        !blas("cublasSetWorkspace", cublasSetWorkspace(h, workspace, ws_bytes)))
        return 1;

    // Uncaptured reference; it also loads every kernel the captures use.
    std::printf("== uncaptured\n");
    float ref_dot = 0;
    std::vector<float> ref_c(M * M);
    if (!work(h, d, "uncaptured:") || !cuda("synchronize", cudaStreamSynchronize(s)) || !fetch(d, &ref_dot, ref_c))
        return 1;
    std::printf("uncaptured: dot %.1f (host %.1f), C checksum %.1f (host %.1f)\n", ref_dot, want_dot, checksum(ref_c),
                checksum(want_c));
    bool exact = (double)ref_dot == want_dot;
    for (size_t i = 0; i < ref_c.size(); i++)
        exact = exact && ref_c[i] == want_c[i];
    verdict("uncaptured: results exact", exact);

    captured(h, s, d, cudaStreamCaptureModeGlobal, "global", ref_dot, ref_c);
    captured(h, s, d, cudaStreamCaptureModeThreadLocal, "thread-local", ref_dot, ref_c);

    blas("cublasDestroy", cublasDestroy(h));
    std::printf("cublas_capture: %s (%d failure(s))\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
