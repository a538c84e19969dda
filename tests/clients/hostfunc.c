/* Host functions and stream callbacks, as the CUDA runtime enqueues them
 * (cudaLaunchHostFunc, cudaStreamAddCallback): each must run once, after the
 * stream's earlier work has ended, with the caller's data. Prints what a
 * program would see, so runs on a local and a remote GPU compare.
 *   hostfunc          order, data, the per-thread variant and bad arguments
 *   hostfunc capture  the result of a host function enqueued in a capture
 *   hostfunc async    what a GPU gives beyond order: the caller goes on
 *                     while the function waits for it, later work waits
 *                     for the function, and a graph's host node runs at
 *                     each launch
 *   hostfunc hang     a function that never returns, then "ready", then
 *                     waits to be killed
 *   hostfunc handoff  threads that wait for each other through the device:
 *                     one waits for its stream, whose host function waits
 *                     for the other thread to get an answer first
 *   hostfunc gated MS a function that waits for the caller while the
 *                     caller asks after its stream for MS ms ("gated" on
 *                     stdout once it is enqueued), then lets it go; then a
 *                     stream capture ended MS ms after it began
 *                     ("capturing" once it is), the device's memory
 *                     asked after meanwhile and for MS ms after
 *   hostfunc word MS  a stream that waits for a word of device memory
 *                     while the caller asks after it for MS ms
 *                     ("waiting" on stdout once it waits), then writes
 *                     the word from another stream */
#include "common.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

enum { KERNEL_US = 200000 };
static const char MODULE[] = "FLEXGV-SIM-MODULE\nkernel slow 200000\n";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct seen {
    int calls;
    double at;
    CUstream stream;
    CUresult status;
};

static void host_fn(void *data)
{
    struct seen *s = data;
    s->calls++;
    s->at = now();
}

static void callback(CUstream stream, CUresult status, void *data)
{
    struct seen *s = data;
    s->calls++;
    s->at = now();
    s->stream = stream;
    s->status = status;
}

/* Waits (up to 5 s) for the caller to set *flag after enqueueing it. */
struct gate {
    volatile int flag, saw, done;
};

static void wait_for_caller(void *data)
{
    struct gate *g = data;
    double until = now() + 5;
    while (!g->flag && now() < until)
        ;
    g->saw = g->flag;
    struct timespec ts = {0, 50000000}; /* then works a while */
    nanosleep(&ts, NULL);
    g->done = 1;
}

static void count_call(void *data) { ++*(volatile int *)data; }

static void never_return(void *data)
{
    (void)data;
    for (;;)
        pause();
}

static int async_checks(CUfunction slow, CUstream st)
{
    struct gate g = {0};
    CUevent after;
    CHECK(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING));
    CHECK(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL));
    CHECK(cuLaunchHostFunc(st, wait_for_caller, &g));
    g.flag = 1; /* only once the call returned */
    CHECK(cuEventRecord(after, st));
    CHECK(cuEventSynchronize(after));
    printf("the caller went on while its host function waited: %s\n", g.saw ? "yes" : "no");
    printf("later work waited for the function: %s\n", g.done ? "yes" : "no");

    volatile int calls = 0;
    CUgraph graph;
    CUgraphExec exec;
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL));
    CHECK(cuLaunchHostFunc(st, count_call, (void *)&calls));
    CHECK(cuStreamEndCapture(st, &graph));
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (int i = 0; i < 2; i++)
        CHECK(cuGraphLaunch(exec, st));
    CHECK(cuStreamSynchronize(st));
    printf("a captured host function, two launches: ran %d time(s)\n", calls);
    return 0;
}

/* The waiting thread of handoff. */
struct handoff {
    CUcontext ctx;
    CUstream st;
    struct gate g;
    volatile int syncing;
    CUresult answer;
};

static void *sync_after_gate(void *data)
{
    struct handoff *h = data;
    CHECK(cuCtxSetCurrent(h->ctx));
    CHECK(cuLaunchHostFunc(h->st, wait_for_caller, &h->g));
    h->syncing = 1;
    h->answer = cuStreamSynchronize(h->st);
    return NULL;
}

static int handoff(CUstream st)
{
    struct handoff h = {.st = st};
    CHECK(cuCtxGetCurrent(&h.ctx));
    pthread_t t;
    if (pthread_create(&t, NULL, sync_after_gate, &h))
        return 1;
    while (!h.syncing)
        usleep(1000);
    usleep(200000); /* the other thread waits in cuStreamSynchronize */
    size_t f, total;
    CHECK(cuMemGetInfo_v2(&f, &total));
    h.g.flag = 1;
    pthread_join(t, NULL);
    printf("a thread's call answered while another waited for it through the device: %s; the wait answered %s\n",
           h.g.saw ? "yes" : "no", result_name(h.answer));
    return 0;
}

/* Whether the server answered every question about the device's memory,
 * asked every 2 ms for ms ms. */
static int ask_for(int ms)
{
    int answered = 1;
    for (double until = now() + ms / 1e3; now() < until;) {
        size_t free_, total;
        answered &= cuMemGetInfo_v2(&free_, &total) == CUDA_SUCCESS;
        usleep(2000);
    }
    return answered;
}

/* What a program that waits for nothing sees of a host function waiting
 * for it, whatever a checkpoint or a move does meanwhile. */
static int gated(CUfunction slow, CUstream st, int ms)
{
    struct gate g = {0};
    CHECK(cuLaunchHostFunc(st, wait_for_caller, &g));
    printf("gated\n");
    fflush(stdout);
    int queries = 0, ready = 0;
    for (double until = now() + ms / 1e3; now() < until; queries++) {
        CUresult r = cuStreamQuery(st);
        ready += r != CUDA_ERROR_NOT_READY;
        usleep(2000);
    }
    g.flag = 1;
    CHECK(cuStreamSynchronize(st));
    printf("its stream asked after while the function waited: %s; the function saw the caller go on: %s\n",
           queries && !ready ? "not ready each time" : "ready", g.saw ? "yes" : "no");
    CUgraph graph;
    CUgraphExec exec;
    CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL));
    printf("capturing\n");
    fflush(stdout);
    int answered = ask_for(ms); /* calls of the server's meanwhile */
    CUresult ended = cuStreamEndCapture(st, &graph);
    printf("the device's memory asked after while capturing: %s\n", answered ? "answered each time" : "not answered");
    printf("a capture ended %d ms after it began: %s\n", ms, result_name(ended));
    if (ended == CUDA_SUCCESS) {
        CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        CHECK(cuGraphLaunch(exec, st));
        CHECK(cuStreamSynchronize(st));
    }
    answered = ask_for(ms);
    printf("then: %s\n", answered ? "answered each time" : "not answered");
    return 0;
}

/* Device work that waits for the program: the stream's wait ends only
 * once the program writes the word. */
static int word(CUstream st, int ms)
{
    CUstream other;
    CUdeviceptr w;
    CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&w, 4));
    CHECK(cuMemsetD32_v2(w, 0, 1));
    CHECK(cuStreamWaitValue32_v2(st, w, 1, CU_STREAM_WAIT_VALUE_GEQ));
    printf("waiting\n");
    fflush(stdout);
    int queries = 0, ready = 0;
    for (double until = now() + ms / 1e3; now() < until; queries++) {
        ready += cuStreamQuery(st) != CUDA_ERROR_NOT_READY;
        usleep(2000);
    }
    CHECK(cuStreamWriteValue32_v2(other, w, 1, 0));
    CHECK(cuStreamSynchronize(st));
    printf("its stream asked after while it waited for the word: %s; then: %s\n",
           queries && !ready ? "not ready each time" : "ready", result_name(cuStreamQuery(st)));
    return 0;
}

int main(int argc, char **argv)
{
    CUmodule mod;
    CUfunction slow;
    CUstream st;
    primary_context();
    CHECK(cuModuleLoadData(&mod, MODULE));
    CHECK(cuModuleGetFunction(&slow, mod, "slow"));
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));

    if (argc > 1 && !strcmp(argv[1], "async"))
        return async_checks(slow, st);
    if (argc > 1 && !strcmp(argv[1], "handoff"))
        return handoff(st);
    if (argc > 2 && !strcmp(argv[1], "gated"))
        return gated(slow, st, atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "word"))
        return word(st, atoi(argv[2]));
    if (argc > 1 && !strcmp(argv[1], "hang")) {
        CHECK(cuLaunchHostFunc(st, never_return, NULL));
        printf("ready\n");
        fflush(stdout);
        for (;;)
            pause();
    }
    if (argc > 1 && !strcmp(argv[1], "capture")) {
        struct seen s = {0};
        CUgraph g;
        CHECK(cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_RELAXED));
        printf("host function in a capture: %s\n", result_name(cuLaunchHostFunc(st, host_fn, &s)));
        printf("end of the capture: %s\n", result_name(cuStreamEndCapture(st, &g)));
        return 0;
    }

    struct seen fn = {0}, cb = {0}, pt = {0};
    double t0 = now();
    CHECK(cuLaunchKernel(slow, 1, 1, 1, 32, 1, 1, 0, st, NULL, NULL));
    CHECK(cuLaunchHostFunc(st, host_fn, &fn));
    CHECK(cuStreamAddCallback(st, callback, &cb, 0));
    CHECK(cuStreamSynchronize(st));
    printf("host function: ran %d time(s), after the kernel: %s\n", fn.calls,
           fn.at - t0 >= KERNEL_US / 1e6 ? "yes" : "no");
    printf("callback: ran %d time(s), after the host function: %s, its stream: %s, status %s\n", cb.calls,
           cb.at >= fn.at ? "yes" : "no", cb.stream == st ? "yes" : "no", result_name(cb.status));

    /* The per-thread default stream, through its own ABI. */
    t0 = now();
    CHECK(cuLaunchKernel_ptsz(slow, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK(cuLaunchHostFunc_ptsz(NULL, host_fn, &pt));
    CHECK(cuCtxSynchronize());
    printf("per-thread host function: ran %d time(s), after the kernel: %s\n", pt.calls,
           pt.at - t0 >= KERNEL_US / 1e6 ? "yes" : "no");

    printf("no function: %s\n", result_name(cuLaunchHostFunc(st, NULL, NULL)));
    printf("callback with flags: %s\n", result_name(cuStreamAddCallback(st, callback, &cb, 1)));
    printf("callbacks run: %d\n", cb.calls);
    CHECK(cuStreamDestroy_v2(st));
    return 0;
}
