/* A process for flexgv suspend: holds MIB of device memory filled with a
 * known pattern, a stream and an event, then does one step per line on
 * stdin until it closes:
 *     suspendee MIB
 * Prints "ready" once set up. Each step prints "calling", then launches a
 * kernel on the stream, records and synchronizes the event, reads the
 * memory back and prints "step N ok", or where a byte is wrong "step N bad
 * at OFFSET". A line "alloc MIB" instead allocates MIB more and prints
 * "allocated", or "alloc failed". */
#include "common.h"

#include <unistd.h>

static unsigned char pattern(size_t i) { return (unsigned char)(i * 131 + (i >> 12) * 7 + 3); }

int main(int argc, char **argv)
{
    size_t bytes = (size_t)(argc > 1 ? atol(argv[1]) : 64) << 20;
    primary_context();
    unsigned char *host = malloc(bytes);
    if (!host)
        return 1;
    for (size_t i = 0; i < bytes; i++)
        host[i] = pattern(i);
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, bytes));
    CHECK(cuMemcpyHtoD_v2(dev, host, bytes));
    CUmodule mod;
    CUfunction busy;
    CUstream stream;
    CUevent ev;
    CHECK(cuModuleLoadData(&mod, SIM_MODULE));
    CHECK(cuModuleGetFunction(&busy, mod, "busy"));
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    printf("ready\n");
    fflush(stdout);
    char line[64];
    for (int step = 1; fgets(line, sizeof line, stdin); step++) {
        if (!strncmp(line, "alloc ", 6)) {
            CUdeviceptr more;
            step--;
            printf(cuMemAlloc_v2(&more, (size_t)atol(line + 6) << 20) == CUDA_SUCCESS ? "allocated\n" : "alloc failed\n");
            fflush(stdout);
            continue;
        }
        printf("calling\n");
        fflush(stdout);
        CHECK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
        CHECK(cuEventRecord(ev, stream));
        CHECK(cuEventSynchronize(ev));
        memset(host, 0, bytes);
        CHECK(cuMemcpyDtoH_v2(host, dev, bytes));
        size_t bad = 0;
        while (bad < bytes && host[bad] == pattern(bad))
            bad++;
        if (bad < bytes)
            printf("step %d bad at %zu\n", step, bad);
        else
            printf("step %d ok\n", step);
        fflush(stdout);
    }
    return 0;
}
