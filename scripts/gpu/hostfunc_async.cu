// What a GPU does with host functions beyond order, as the simulated GPU
// models it (tests/clients/hostfunc.c async prints the same lines): the
// caller goes on while its host function waits for it, later work on the
// stream waits for the function, and a graph's host node runs at each
// launch.
#include <cstdio>
#include <ctime>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void spin(long long ns)
{
    long long t0 = clock64();
    while (clock64() - t0 < ns)
        ;
}

static double now()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct Gate {
    volatile int flag, saw, done;
};

static void CUDART_CB wait_for_caller(void *data)
{
    Gate *g = static_cast<Gate *>(data);
    double until = now() + 5;
    while (!g->flag && now() < until)
        ;
    g->saw = g->flag;
    timespec ts = {0, 50000000}; // then works a while
    nanosleep(&ts, nullptr);
    g->done = 1;
}

static void CUDART_CB count_call(void *data) { ++*static_cast<volatile int *>(data); }

int main()
{
    cudaStream_t st;
    cudaEvent_t after;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    Gate g = {};
    spin<<<1, 32, 0, st>>>(100000000);
    CHECK(cudaLaunchHostFunc(st, wait_for_caller, &g));
    g.flag = 1; // only once the call returned
    CHECK(cudaEventRecord(after, st));
    CHECK(cudaEventSynchronize(after));
    std::printf("the caller went on while its host function waited: %s\n", g.saw ? "yes" : "no");
    std::printf("later work waited for the function: %s\n", g.done ? "yes" : "no");

    volatile int calls = 0;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    spin<<<1, 32, 0, st>>>(1000000);
    CHECK(cudaLaunchHostFunc(st, count_call, (void *)&calls));
    CHECK(cudaStreamEndCapture(st, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 2; i++)
        CHECK(cudaGraphLaunch(exec, st));
    CHECK(cudaStreamSynchronize(st));
    std::printf("a captured host function, two launches: ran %d time(s)\n", calls);
    return 0;
}
