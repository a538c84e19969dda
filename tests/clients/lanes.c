/* Work in flight on two streams that complete out of launch order: a short
 * kernel on stream B, a long one on stream A, another short one on B, then
 * B synchronized. Prints "ready", starts at a line on stdin, prints
 * "queued" with the long kernel still running, then at the next line
 * synchronizes everything.
 *     lanes streams|legacy|perthread LONG_MS
 * streams: A and B are streams of their own; legacy: B is the legacy
 * stream (NULL); perthread: A and B are two threads' per-thread streams. */
#include "common.h"

#include <pthread.h>
#include <unistd.h>

static CUfunction shortk, longk;
static CUstream a;
static pthread_barrier_t launched, finished;

/* The long kernel, from a thread that lives until the end (perthread). */
static void *launch_long(void *arg)
{
    CUcontext *ctx = arg;
    CHECK(cuCtxSetCurrent(*ctx));
    CHECK(cuLaunchKernel(longk, 1, 1, 1, 1, 1, 1, 0, a, NULL, NULL));
    pthread_barrier_wait(&launched);
    pthread_barrier_wait(&finished);
    CHECK(cuStreamSynchronize(a));
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "streams") && strcmp(argv[1], "legacy") && strcmp(argv[1], "perthread"))) {
        fprintf(stderr, "usage: lanes streams|legacy|perthread LONG_MS\n");
        return 2;
    }
    char module[160];
    snprintf(module, sizeof module, "FLEXGV-SIM-MODULE\nkernel short 200\nkernel long %ld\n", atol(argv[2]) * 1000);
    CUcontext ctx;
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, module));
    CHECK(cuModuleGetFunction(&shortk, mod, "short"));
    CHECK(cuModuleGetFunction(&longk, mod, "long"));
    int perthread = !strcmp(argv[1], "perthread");
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
    CUstream b = NULL;
    if (perthread) {
        a = b = CU_STREAM_PER_THREAD;
    } else {
        CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
        if (!strcmp(argv[1], "streams"))
            CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    }
    CHECK(cuLaunchKernel(shortk, 1, 1, 1, 1, 1, 1, 0, b, NULL, NULL));
    pthread_t th;
    pthread_barrier_init(&launched, NULL, 2);
    pthread_barrier_init(&finished, NULL, 2);
    if (perthread) { /* the long kernel on another thread's stream */
        if (pthread_create(&th, NULL, launch_long, &ctx))
            return 1;
        pthread_barrier_wait(&launched);
    } else {
        CHECK(cuLaunchKernel(longk, 1, 1, 1, 1, 1, 1, 0, a, NULL, NULL));
    }
    CHECK(cuLaunchKernel(shortk, 1, 1, 1, 1, 1, 1, 0, b, NULL, NULL));
    CHECK(cuStreamSynchronize(b));
    printf("queued\n");
    fflush(stdout);
    while (read(0, &c, 1) == 1 && c != '\n')
        ;
    if (perthread && (pthread_barrier_wait(&finished), pthread_join(th, NULL)))
        return 1;
    CHECK(cuCtxSynchronize());
    return 0;
}
