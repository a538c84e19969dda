/* Pinned host memory past 64 KiB used as device memory, as NVIDIA's
 * simpleZeroCopy uses it: allocated mapped (cuMemHostAlloc) and the
 * program's own pages registered (cuMemHostRegister), their device
 * addresses asked for, a kernel adding to what the program wrote and
 * filling from an address inside, a memset and a copy naming one; one only
 * a kernel's parameter names; a forked child's free leaves the parent's
 * alone. Prints what the program sees, so local and
 * remote runs compare. With "refuse huge" or "refuse taken": what cannot
 * be kept on both sides (run remotely only). */
#include "common.h"

#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static const char MODULE[] = "FLEXGV-SIM-MODULE\n"
                             "kernel fill 5 builtin=fill\n"
                             "kernel add 5 builtin=add\n";

enum { N = 1 << 18 }; /* 1 MiB of unsigned */

static CUfunction fill, add;

static void launch(CUfunction f, CUdeviceptr p, unsigned v, int n)
{
    void *params[] = {&p, &v, &n};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
}

/* A sum of all the words and a few of them, as the program reads them. */
static void show(const char *what, const unsigned *p, int n)
{
    unsigned long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += p[i];
    printf("%s: sum %llu, [0] %u [1023] %u [1024] %u [%d] %u\n", what, sum, p[0], p[1023], p[1024], n - 1, p[n - 1]);
}

/* Each refusal is said once: one kind a run. */
static int refuse(const char *what)
{
    CUdeviceptr d;
    if (!strcmp(what, "huge")) {
        /* Past the most kept per connection: its pages are reserved only. */
        size_t huge = (size_t)2 << 30;
        void *r = mmap(NULL, huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED)
            return 1;
        CHECK(cuMemHostRegister_v2(r, huge, CU_MEMHOSTREGISTER_DEVICEMAP));
        printf("2 GiB registered, its device address: %s\n", result_name(cuMemHostGetDevicePointer_v2(&d, r, 0)));
        printf("asked again: %s\n", result_name(cuMemHostGetDevicePointer_v2(&d, r, 0)));
        CHECK(cuMemHostUnregister(r));
        munmap(r, huge);
        CHECK(cuMemHostRegister_v2(&d, sizeof d, 0));
        printf("registered twice: %s\n", result_name(cuMemHostRegister_v2(&d, sizeof d, 0)));
        CHECK(cuMemHostUnregister(&d));
    } else {
        /* Beside a small allocation the server made (its page is the
         * server's driver's there): the address is taken on the server. */
        unsigned char *small;
        CHECK(cuMemHostAlloc((void **)&small, 64, CU_MEMHOSTALLOC_DEVICEMAP));
        CHECK(cuMemHostRegister_v2(small + 64, 128, CU_MEMHOSTREGISTER_DEVICEMAP));
        printf("beside a small one: %s\n", result_name(cuMemHostGetDevicePointer_v2(&d, small + 64, 0)));
        CHECK(cuMemHostUnregister(small + 64));
        CHECK(cuMemFreeHost(small));
    }
    printf("refuse: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    CUmodule mod;
    primary_context();
    CHECK(cuModuleLoadData(&mod, MODULE));
    CHECK(cuModuleGetFunction(&fill, mod, "fill"));
    CHECK(cuModuleGetFunction(&add, mod, "add"));
    if (argc > 2 && !strcmp(argv[1], "refuse"))
        return refuse(argv[2]);

    /* Allocated mapped, written by the program, then a kernel adds to it
     * and fills from an address inside it. */
    unsigned *a;
    CUdeviceptr da;
    CHECK(cuMemHostAlloc((void **)&a, N * sizeof *a, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    for (int i = 0; i < N; i++)
        a[i] = (unsigned)i;
    CHECK(cuMemHostGetDevicePointer_v2(&da, a, 0));
    printf("allocated: device address is the host's: %s\n", da == (CUdeviceptr)(uintptr_t)a ? "yes" : "no");
    launch(add, da, 5, N);
    launch(fill, da + 1024 * sizeof *a, 77, 1000);
    CHECK(cuCtxSynchronize());
    show("allocated, after the kernels", a, N);
    /* A forked child's free is its own copy's: the parent's goes on. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        printf("child frees: %s\n", result_name(cuMemFreeHost(a)));
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    launch(add, da, 1, 4);
    CHECK(cuCtxSynchronize());
    printf("after the child: %u %u %u %u %u\n", a[0], a[1], a[2], a[3], a[4]);

    /* The program's own pages, registered; the program's writes after the
     * first kernel reach the second, whose writes a copy reads. */
    unsigned *b, back[4];
    if (posix_memalign((void **)&b, 4096, N * sizeof *b))
        return 1;
    memset(b, 0, N * sizeof *b);
    CHECK(cuMemHostRegister_v2(b, N * sizeof *b, CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr db;
    CHECK(cuMemHostGetDevicePointer_v2(&db, b + 1024, 0));
    launch(fill, db, 3, 2048);
    CHECK(cuCtxSynchronize());
    b[1024] = 100;
    b[N - 1] = 9;
    launch(add, db - 1024 * sizeof *b, 1, N);
    CHECK(cuMemcpyDtoH_v2(back, db - 1024 * sizeof *b, sizeof back));
    show("registered, after the kernels", b, N);
    printf("registered, copied back: %u %u %u %u\n", back[0], back[1], back[2], back[3]);

    /* Named first by a memset, then by a kernel's parameter; then one by a
     * kernel's parameter alone. */
    unsigned *c;
    CHECK(cuMemAllocHost_v2((void **)&c, N * sizeof *c));
    memset(c, 0, N * sizeof *c);
    CHECK(cuMemsetD32_v2((CUdeviceptr)(uintptr_t)(c + 10), 6, N - 20));
    launch(add, (CUdeviceptr)(uintptr_t)c, 2, N / 2);
    CHECK(cuCtxSynchronize());
    show("named by a memset and a kernel", c, N);

    unsigned *k;
    CHECK(cuMemHostAlloc((void **)&k, N * sizeof *k, 0));
    for (int i = 0; i < N; i++)
        k[i] = 1;
    launch(add, (CUdeviceptr)(uintptr_t)(k + 1), 4, N - 2);
    CHECK(cuCtxSynchronize());
    show("named by a kernel alone", k, N);
    CHECK(cuMemFreeHost(k));

    /* Freed and unregistered: the same again works (the server's copies
     * went with them). */
    CHECK(cuMemFreeHost(a));
    CHECK(cuMemHostUnregister(b));
    printf("unregistered again: %s\n", result_name(cuMemHostUnregister(b)));
    CHECK(cuMemHostRegister_v2(b, N * sizeof *b, CU_MEMHOSTREGISTER_DEVICEMAP));
    CHECK(cuMemHostGetDevicePointer_v2(&db, b, 0));
    launch(fill, db, 8, N);
    CHECK(cuCtxSynchronize());
    show("registered again", b, N);
    CHECK(cuMemHostUnregister(b));
    free(b);
    CHECK(cuMemFreeHost(c));
    printf("pinnedbig: ok\n");
    return 0;
}
