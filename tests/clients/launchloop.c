/* Benchmark client: N launches of an empty kernel and one synchronize,
 * through a pointer resolved the way the CUDA runtime resolves it. Used by
 * bench/ under callgrind to count the instructions the shim adds. */
#include "common.h"

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    struct launch_env e = open_launch_env("empty");
    for (long i = 0; i < n; i++)
        CHECK(e.launch(e.fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CHECK(e.sync());
    return 0;
}
