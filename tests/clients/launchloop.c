/* Benchmark client: N launches of an empty kernel and one synchronize,
 * through a pointer resolved the way the CUDA runtime resolves it. Used by
 * bench/ under callgrind to count the instructions the shim adds.
 *     launchloop [N]
 *     launchloop idle MS   one launch, then MS milliseconds without a CUDA
 *                          call: prints whether the kernel ran meanwhile
 *                          (a queued call must reach the GPU by itself)
 *     launchloop issue N   N launches, then prints the microseconds each
 *                          took its caller (the synchronize after them not
 *                          counted)
 *     launchloop queries N N launches, then prints the event queries the
 *                          process made meanwhile, per launch (simulated
 *                          GPU only)
 *     launchloop deep N    the same, of a kernel of the configured
 *                          duration (the GPU then trails the host)
 *     launchloop synced N  the same as queries, each launch followed by
 *                          cuStreamSynchronize of its stream; also prints
 *                          the timed events recorded, per launch */
#include "common.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "idle")) {
        struct launch_env e = open_launch_env("empty");
        fg_pfn_cuStreamQuery query = (fg_pfn_cuStreamQuery)dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuStreamQuery");
        CHECK(e.launch(e.fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        long ms = atol(argv[2]);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        CUresult r = query(NULL);
        printf("ran while the program waited: %s\n", r == CUDA_SUCCESS ? "yes" : r == CUDA_ERROR_NOT_READY ? "no" : "error");
        CHECK(e.sync());
        return 0;
    }
    int issue = argc > 2 && !strcmp(argv[1], "issue"), synced = argc > 2 && !strcmp(argv[1], "synced");
    int deep = argc > 2 && !strcmp(argv[1], "deep");
    int queries = synced || deep || (argc > 2 && !strcmp(argv[1], "queries"));
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    uint64_t (*queried)(void) = (uint64_t(*)(void))dlsym(cuda, "flexgv_sim_event_queries");
    uint64_t (*timed)(void) = (uint64_t(*)(void))dlsym(cuda, "flexgv_sim_timed_records");
    fg_pfn_cuStreamSynchronize stream_sync = (fg_pfn_cuStreamSynchronize)dlsym(cuda, "cuStreamSynchronize");
    if (queries && !queried) {
        fprintf(stderr, "launchloop queries: not on the simulated GPU\n");
        return 2;
    }
    long n = argc > 1 ? atol(argv[argc - 1]) : 100000;
    struct launch_env e = open_launch_env(deep ? "busy" : "empty");
    CHECK(e.sync());
    uint64_t q0 = queries ? queried() : 0, r0 = synced ? timed() : 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        CHECK(e.launch(e.fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
        if (synced)
            CHECK(stream_sync(NULL));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t q1 = queries ? queried() : 0; /* before the synchronize, which may look at all of them */
    uint64_t r1 = synced ? timed() : 0;
    CHECK(e.sync());
    if (queries)
        printf("event_queries_per_launch %.3f\n", (double)(q1 - q0) / (double)n);
    if (synced)
        printf("timed_records_per_launch %.3f\n", (double)(r1 - r0) / (double)n);
    if (issue)
        printf("%.2f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / (double)n);
    return 0;
}
