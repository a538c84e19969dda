/* Calls driver entry points with all-zero arguments (NULL pointers, handle
 * 0, sizes and flags 0), as a careless or hostile program may: each must
 * return. Reads "VERSION NAME" lines (as api/cuda13.names has them) from
 * the file FILE, or stdin without one, makes a
 * context current, then calls each NAME exported by the libcuda.so.1 on
 * the library path, printing the name first (so that a crash or a hang
 * names its call) and its result after. Ends "called N". Names that would
 * end the test by design are left out: cuCtxDestroy, cuCtxPopCurrent and
 * cuDevicePrimaryCtxRelease/Reset take the context away (a later call then
 * answers without one, which other names test), cuProfilerStop. */
#include "common.h"

#include <stdint.h>
#include <unistd.h>

typedef CUresult (*any_fn)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);

int main(int argc, char **argv)
{
    FILE *in = argc > 1 ? fopen(argv[1], "r") : stdin;
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    CUcontext ctx;
    if (!init || !retain || !setcur || init(0) || retain(&ctx, 0) || setcur(ctx)) {
        fprintf(stderr, "no context\n");
        return 1;
    }
    static const char *const skip[] = {"cuCtxDestroy_v2", "cuCtxPopCurrent_v2", "cuDevicePrimaryCtxRelease_v2",
                                       "cuDevicePrimaryCtxReset_v2", "cuProfilerStop", NULL};
    char line[256], name[200];
    unsigned version, n = 0;
    while (fgets(line, sizeof line, in)) {
        if (sscanf(line, "%u %199s", &version, name) != 2)
            continue;
        int skipped = 0;
        for (int i = 0; skip[i]; i++)
            skipped |= !strcmp(name, skip[i]);
        any_fn f = (any_fn)dlsym(h, name);
        if (skipped || !f)
            continue;
        printf("%s", name);
        fflush(stdout);
        CUresult r = f(0, 0, 0, 0, 0, 0, 0, 0);
        printf(" %d\n", (int)r);
        n++;
    }
    printf("called %u\n", n);
    return 0;
}
