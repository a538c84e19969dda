/* Benchmark client: N launches of an empty kernel and one synchronize,
 * through a pointer resolved the way the CUDA runtime resolves it. Used by
 * bench/ under callgrind to count the instructions the shim adds.
 *     launchloop [N]
 *     launchloop idle MS   one launch, then MS milliseconds without a CUDA
 *                          call: prints whether the kernel ran meanwhile
 *                          (a queued call must reach the GPU by itself)
 *     launchloop issue N   N launches, then prints the microseconds each
 *                          took its caller (the synchronize after them not
 *                          counted) */
#include "common.h"

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
    int issue = argc > 2 && !strcmp(argv[1], "issue");
    long n = argc > 1 ? atol(argv[argc - 1]) : 100000;
    struct launch_env e = open_launch_env("empty");
    CHECK(e.sync());
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++)
        CHECK(e.launch(e.fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(e.sync());
    if (issue)
        printf("%.2f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / (double)n);
    return 0;
}
