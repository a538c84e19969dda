/* Keeps the GPU busy with back-to-back kernels and reports what it got:
 *     spinner KERNEL_US SECONDS [DEPTH [WINDOW_MS [API [GAP_US [PAUSE_US]]]]]
 * Prints "ready" once set up, then starts at the first line (or the end) of
 * stdin, so that several can start together. It launches for SECONDS with
 * DEPTH kernels (default 16) in flight on one stream, each between two
 * events, so everything it reports is device time, which CPU contention
 * does not stretch:
 *     window I share PCT seen_ms T   every WINDOW_MS of device time after
 *                                    the start, when asked; T: when the host
 *                                    saw it end (CLOCK_MONOTONIC)
 *     kernels N elapsed_ms E share PCT p50_us P p99_us Q wall_ms W delayed_ms D
 * share: its kernels' time over the time from the start to the last
 * completion (with WINDOW_MS, it launches for SECONDS of device time, if
 * the host gives it that in 3 x SECONDS); W: that time on the host's clock, D: how much of it the
 * host kept this process waiting to run (its run-queue delay); latency: between the events around a kernel, which is from
 * its launch to its completion with DEPTH 1 (otherwise from when its
 * stream reached it). API is how each kernel is launched: launch
 * (cuLaunchKernel, the default), ex (cuLaunchKernelEx), ptsz
 * (cuLaunchKernel_ptsz), graph (cuGraphLaunch of a captured kernel) or
 * sync13 (cuLaunchKernel, each completion waited for with the context
 * synchronization a CUDA 13 runtime resolves: cuCtxSynchronize_v2) or
 * copysync (cuLaunchKernel on the legacy stream, each completion waited
 * for by a synchronous cuMemcpyDtoH of a word) or batch (DEPTH launches,
 * then one cuCtxSynchronize for all of them) or after1 (launch, once one
 * kernel has run on device 1 first) or eager (as batch, with GAP_US of
 * host work after each launch: a request bound by its host, as eager
 * inference is; the latencies reported are the requests', from the first
 * launch to the synchronization's return) or late (as eager, the host
 * asleep for GAP_US instead: a program that looks for its completions
 * late, waiting on something else meanwhile) or twice (as eager, each
 * request two such batches: eager inference that reads a value back in
 * mid-request).
 * GAP_US: idle time after each completion before the next launch, as a
 * server between requests (with DEPTH 1).
 * PAUSE_US: with eager, late and twice, idle time after each request. */
#include "common.h"

#include <time.h>
#include <unistd.h>

enum { MAX_DEPTH = 32 };

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Time this thread waited on a run queue (ms): the host's delay. */
static double delayed_ms(void)
{
    unsigned long long run, wait = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &run, &wait) != 2)
            wait = 0;
        fclose(f);
    }
    return (double)wait / 1e6;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: spinner KERNEL_US SECONDS [DEPTH [WINDOW_MS [launch|ex|ptsz|graph|sync13|copysync|batch|after1|eager|late|twice [GAP_US [PAUSE_US]]]]]\n");
        return 2;
    }
    double kernel_us = atof(argv[1]), seconds = atof(argv[2]);
    int depth = argc > 3 ? atoi(argv[3]) : 16;
    double window_ms = argc > 4 ? atof(argv[4]) : 0;
    const char *api = argc > 5 ? argv[5] : "launch";
    double gap_us = argc > 6 ? atof(argv[6]) : 0;
    double pause_us = argc > 7 ? atof(argv[7]) : 0;
    if (depth < 1 || depth > MAX_DEPTH)
        depth = 16;
    char module[128];
    snprintf(module, sizeof module, "FLEXGV-SIM-MODULE\nkernel spin %s\n", argv[1]);
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUstream s;
    CUevent start, before[MAX_DEPTH], after[MAX_DEPTH];
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, module));
    CHECK(cuModuleGetFunction(&f, mod, "spin"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* copysync: on the legacy stream, each completion waited for by a
     * synchronous copy of a word, as programs that read a result back do. */
    int copysync = !strcmp(api, "copysync");
    /* batch: DEPTH launches, then one context synchronization for them all,
     * as a training loop that reads a loss back every few kernels does. */
    int late = !strcmp(api, "late"), twice = !strcmp(api, "twice");
    int eager = late || twice || !strcmp(api, "eager"), batch = eager || !strcmp(api, "batch");
    CUdeviceptr word = 0;
    if (copysync) {
        s = NULL;
        CHECK(cuMemAlloc_v2(&word, 4));
    }
    CHECK(cuEventCreate(&start, 0));
    for (int i = 0; i < depth; i++) {
        CHECK(cuEventCreate(&before[i], 0));
        CHECK(cuEventCreate(&after[i], 0));
    }
    CUlaunchConfig cfg = {1, 1, 1, 1, 1, 1, 0, s, NULL, 0};
    CUgraph g;
    CUgraphExec x = NULL;
    fg_pfn_cuCtxSynchronize_v2 ctxsync = NULL;
    if (!strcmp(api, "graph")) {
        CUstream cs;
        CHECK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
        CHECK(cuStreamBeginCapture_v2(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, cs, NULL, NULL));
        CHECK(cuStreamEndCapture(cs, &g));
        CHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    } else if (!strcmp(api, "sync13")) {
        fg_pfn_cuGetProcAddress_v2 gpa = (fg_pfn_cuGetProcAddress_v2)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
        if (!gpa || gpa("cuCtxSynchronize", (void **)&ctxsync, 13000, 0, NULL) != CUDA_SUCCESS) {
            fprintf(stderr, "spinner: cannot resolve cuCtxSynchronize for CUDA 13\n");
            return 1;
        }
    } else if (strcmp(api, "launch") && strcmp(api, "ex") && strcmp(api, "ptsz") && strcmp(api, "after1") && !copysync &&
               !batch) {
        fprintf(stderr, "spinner: unknown API %s\n", api);
        return 2;
    }
    size_t cap = 1024;
    double *lat = malloc(cap * sizeof *lat);
    if (!lat)
        return 1;
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
    if (!strcmp(api, "after1")) {
        CUcontext other;
        CUmodule m1;
        CUfunction f1;
        CHECK(cuDevicePrimaryCtxRetain(&other, 1));
        CHECK(cuCtxSetCurrent(other));
        CHECK(cuModuleLoadData(&m1, module));
        CHECK(cuModuleGetFunction(&f1, m1, "spin"));
        CHECK(cuLaunchKernel(f1, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        CHECK(cuCtxSynchronize());
        CHECK(cuCtxSetCurrent(ctx));
    }

    long launched = 0, completed = 0, window = 0, in_window = 0;
    float end_ms = 0;
    double began = wall_s(), began_delayed = delayed_ms(), ended = began;
    double stop = began + seconds, req_at = 0;
    long requests = 0;
    CHECK(cuEventRecord(start, s));
    for (;;) {
        /* With windows, SECONDS of device time (the windows a test
         * expects), if the host's clock gives them within twice as long. */
        int more = wall_s() < stop ||
                   (window_ms > 0 && end_ms < seconds * 1e3 && wall_s() < stop + 2 * seconds);
        if (launched > completed && (!more || launched - completed == depth || (batch && completed % depth))) {
            int k = (int)(completed % depth);
            float ms;
            unsigned got;
            if (ctxsync)
                CHECK(ctxsync(NULL));
            else if (copysync)
                CHECK(cuMemcpyDtoH_v2(&got, word, sizeof got));
            else if (batch && k == 0) {
                CHECK(cuCtxSynchronize());
                if (eager) /* lat's first entries: the requests' latencies */
                    lat[requests++] = (wall_s() - req_at) * 1e6;
                if (eager && pause_us > 0 && (!twice || requests % 2 == 0))
                    usleep((useconds_t)pause_us);
            } else if (!batch)
                CHECK(cuEventSynchronize(after[k]));
            CHECK(cuEventElapsedTime(&ms, before[k], after[k]));
            if ((size_t)completed == cap) {
                double *n = realloc(lat, 2 * cap * sizeof *lat);
                if (!n)
                    return 1;
                lat = n;
                cap *= 2;
            }
            if (!eager)
                lat[completed] = ms * 1000.0;
            completed++;
            CHECK(cuEventElapsedTime(&end_ms, start, after[k]));
            ended = wall_s();
            for (; window_ms > 0 && end_ms >= (double)(window + 1) * window_ms; window++, in_window = 0) {
                printf("window %ld share %.1f seen_ms %.3f\n", window, (double)in_window * kernel_us / (window_ms * 10.0),
                       wall_s() * 1e3);
                fflush(stdout);
            }
            in_window++;
            if (gap_us > 0 && !eager) {
                struct timespec ts = {(time_t)(gap_us / 1e6), (long)((gap_us - (double)(time_t)(gap_us / 1e6) * 1e6) * 1e3)};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        if (!more)
            break;
        int k = (int)(launched % depth);
        if (k == 0)
            req_at = wall_s();
        CHECK(cuEventRecord(before[k], s));
        if (x)
            CHECK(cuGraphLaunch(x, s));
        else if (!strcmp(api, "ex"))
            CHECK(cuLaunchKernelEx(&cfg, f, NULL, NULL));
        else if (!strcmp(api, "ptsz"))
            CHECK(cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        else
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        CHECK(cuEventRecord(after[k], s));
        launched++;
        if (late)
            usleep((useconds_t)gap_us);
        for (double until = wall_s() + gap_us / 1e6; eager && !late && wall_s() < until;)
            ; /* the host's own work */
    }
    long nlat = eager ? requests : completed;
    qsort(lat, (size_t)nlat, sizeof *lat, by_value);
    double share = end_ms > 0 ? (double)completed * kernel_us / (end_ms * 10.0) : 0;
    printf("kernels %ld elapsed_ms %.3f share %.1f p50_us %.1f p99_us %.1f wall_ms %.3f delayed_ms %.3f\n", completed,
           end_ms, share, nlat ? lat[nlat / 2] : 0.0, nlat ? lat[nlat * 99 / 100] : 0.0, (ended - began) * 1e3,
           delayed_ms() - began_delayed);
    return 0;
}
