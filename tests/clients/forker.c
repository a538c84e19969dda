/* One traced run, four processes: a forked child, an exec'd child and a
 * child killed with SIGKILL after its calls. The parent prints the expected
 * totals over all of them. */
#include "common.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void workload(int allocs)
{
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    for (int i = 0; i < allocs; i++) {
        CUdeviceptr p;
        CHECK(cuMemAlloc_v2(&p, 4096));
        CHECK(cuMemFree_v2(p));
    }
}

static void versions(int n)
{
    int v;
    for (int i = 0; i < n; i++)
        CHECK(cuDriverGetVersion(&v));
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "exec-child")) {
        workload(2);
        return 0;
    }
    workload(3);

    pid_t a = fork();
    if (a == 0) {
        versions(5);
        exit(0);
    }
    pid_t b = fork();
    if (b == 0) {
        execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
        _exit(127);
    }
    int fds[2];
    if (pipe(fds))
        return 1;
    pid_t c = fork();
    if (c == 0) {
        versions(7);
        ssize_t w = write(fds[1], "x", 1);
        (void)w;
        for (;;)
            pause();
    }
    char x;
    if (read(fds[0], &x, 1) != 1)
        return 1;
    kill(c, SIGKILL);
    int st;
    waitpid(a, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        return 1;
    waitpid(b, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        return 1;
    waitpid(c, &st, 0);

    count("cuInit", 2);
    count("cuDeviceGet", 2);
    count("cuDevicePrimaryCtxRetain", 2);
    count("cuCtxSetCurrent", 2);
    count("cuMemAlloc_v2", 5);
    count("cuMemFree_v2", 5);
    count("cuDriverGetVersion", 12);
    print_expects();
    printf("forker: ok pids %d %d %d %d\n", (int)getpid(), (int)a, (int)b, (int)c);
    return 0;
}
