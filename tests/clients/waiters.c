/* A thread waits for the device while the program's other threads go on,
 * as programs with a loader or a communication thread do. For each way of
 * waiting (a stream, its per-thread variant, an event, the context, a copy
 * back from the legacy stream, an asynchronous copy back), one thread
 * waits for a long kernel while the main thread makes calls that need an
 * answer; prints whether they were all answered before the wait ended,
 * and what the wait answered. Then two threads wait at once for kernels of
 * different lengths, and the shorter wait must end first.
 *     waiters
 * For benchmarks: one thread waits for 20 ms kernels, one after the other,
 * while the main thread makes round trips (cuMemGetInfo) for SECONDS;
 * prints how long those took:
 *     waiters beside SECONDS      -> calls N p50_us X p99_us Y */
#include "common.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define LONG_US 1500000
static const char MODULE[] = "FLEXGV-SIM-MODULE\n"
                             "kernel slow 1500000\n"
                             "kernel shorter 500000\n";

static CUcontext ctx;
static CUfunction slow, shorter;

struct waiter {
    const char *how;
    CUstream s;
    CUevent e;
    CUfunction f;
    CUdeviceptr d;
    CUresult answer;
    int waiting, done; /* atomically */
    double ended;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *wait_one(void *arg)
{
    struct waiter *w = arg;
    CHECK(cuCtxSetCurrent(ctx));
    int legacy = !strcmp(w->how, "copy");
    CHECK(cuLaunchKernel(w->f, 1, 1, 1, 1, 1, 1, 0, legacy ? NULL : w->s, NULL, NULL));
    if (!strcmp(w->how, "event"))
        CHECK(cuEventRecord(w->e, w->s));
    __atomic_store_n(&w->waiting, 1, __ATOMIC_RELEASE);
    unsigned word = 0;
    if (!strcmp(w->how, "stream"))
        w->answer = cuStreamSynchronize(w->s);
    else if (!strcmp(w->how, "stream_ptsz"))
        w->answer = cuStreamSynchronize_ptsz(w->s);
    else if (!strcmp(w->how, "event"))
        w->answer = cuEventSynchronize(w->e);
    else if (!strcmp(w->how, "context"))
        w->answer = cuCtxSynchronize();
    else if (legacy)
        w->answer = cuMemcpyDtoH_v2(&word, w->d, sizeof word);
    else
        w->answer = cuMemcpyDtoHAsync_v2(&word, w->d, sizeof word, w->s);
    if (!legacy && !strcmp(w->how, "copy_async") && w->answer == CUDA_SUCCESS && word != 0x5a5a5a5a)
        w->answer = CUDA_ERROR_UNKNOWN; /* the copy's bytes did not come back */
    w->ended = now();
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Calls that each need the server's answer, made while another thread
 * waits: 1 when all were answered before that wait ended. */
static int others_go_on(struct waiter *w)
{
    while (!__atomic_load_n(&w->waiting, __ATOMIC_ACQUIRE))
        usleep(1000);
    usleep(100000); /* the wait has reached the server */
    for (int i = 0; i < 20; i++) {
        size_t free_b, total_b;
        CUdeviceptr p;
        CHECK(cuMemGetInfo_v2(&free_b, &total_b));
        CHECK(cuMemAlloc_v2(&p, 4096));
        if (cuStreamQuery(w->s) != CUDA_ERROR_NOT_READY && strcmp(w->how, "copy"))
            return 0; /* the kernel cannot be done yet */
    }
    return !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

static int stop_waiting;

/* Waits for one 20 ms kernel after another until told to stop. */
static void *keep_waiting(void *arg)
{
    CUfunction f = arg;
    CUstream s;
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    while (!__atomic_load_n(&stop_waiting, __ATOMIC_ACQUIRE)) {
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        CHECK(cuStreamSynchronize(s));
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int beside(double seconds)
{
    enum { MAX = 1 << 20 };
    CUmodule mod;
    CUfunction f;
    CHECK(cuModuleLoadData(&mod, "FLEXGV-SIM-MODULE\nkernel tick 20000\n"));
    CHECK(cuModuleGetFunction(&f, mod, "tick"));
    pthread_t t;
    pthread_create(&t, NULL, keep_waiting, f);
    usleep(50000);
    double *us = malloc(MAX * sizeof *us), t0 = now();
    int n = 0;
    while (us && n < MAX && now() - t0 < seconds) {
        size_t free_b, total_b;
        double a = now();
        CHECK(cuMemGetInfo_v2(&free_b, &total_b));
        us[n++] = (now() - a) * 1e6;
    }
    __atomic_store_n(&stop_waiting, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    if (!n)
        return 1;
    qsort(us, (size_t)n, sizeof *us, by_value);
    printf("calls %d p50_us %.1f p99_us %.1f\n", n, us[n / 2], us[n * 99 / 100]);
    return 0;
}

int main(int argc, char **argv)
{
    CUmodule mod;
    ctx = primary_context();
    if (argc > 2 && !strcmp(argv[1], "beside"))
        return beside(atof(argv[2]));
    CHECK(cuModuleLoadData(&mod, MODULE));
    CHECK(cuModuleGetFunction(&slow, mod, "slow"));
    CHECK(cuModuleGetFunction(&shorter, mod, "shorter"));
    CUdeviceptr d;
    CHECK(cuMemAlloc_v2(&d, 4096));
    CHECK(cuMemsetD32_v2(d, 0x5a5a5a5a, 1024));

    const char *hows[] = {"stream", "stream_ptsz", "event", "context", "copy", "copy_async"};
    for (unsigned i = 0; i < sizeof hows / sizeof hows[0]; i++) {
        struct waiter w = {.how = hows[i], .f = slow, .d = d};
        CHECK(cuStreamCreate(&w.s, CU_STREAM_NON_BLOCKING));
        CHECK(cuEventCreate(&w.e, CU_EVENT_DISABLE_TIMING));
        pthread_t t;
        pthread_create(&t, NULL, wait_one, &w);
        int went_on = others_go_on(&w);
        pthread_join(t, NULL);
        printf("%s: the other thread's calls answered while it waited: %s; the wait answered %s\n", w.how,
               went_on ? "yes" : "no", result_name(w.answer));
        CHECK(cuStreamDestroy_v2(w.s));
        CHECK(cuEventDestroy_v2(w.e));
    }

    /* Two waits at once: each learns its own end. */
    struct waiter a = {.how = "stream", .f = slow, .d = d}, b = {.how = "stream", .f = shorter, .d = d};
    CHECK(cuStreamCreate(&a.s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b.s, CU_STREAM_NON_BLOCKING));
    pthread_t ta, tb;
    pthread_create(&ta, NULL, wait_one, &a);
    while (!__atomic_load_n(&a.waiting, __ATOMIC_ACQUIRE))
        usleep(1000);
    pthread_create(&tb, NULL, wait_one, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    printf("two waits at once: %s and %s, the shorter ended first: %s\n", result_name(a.answer),
           result_name(b.answer), b.ended < a.ended ? "yes" : "no");
    return 0;
}
