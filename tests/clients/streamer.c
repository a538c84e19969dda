/* Streams host data to the device, as a training's input does:
 *     streamer MIB
 * copies MIB MiB to one 16 MiB buffer, 16 MiB a copy (each chunk a pattern
 * of its own), reads the last back and prints "streamed MIB MiB ok", or
 * where a byte is wrong "streamed MIB MiB, bad at OFFSET". */
#include "common.h"

enum { CHUNK = 16 << 20 };

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 64, n = mib / 16;
    primary_context();
    unsigned char *host = malloc(CHUNK);
    if (!host || n < 1)
        return 2;
    CUdeviceptr dev;
    CHECK(cuMemAlloc_v2(&dev, CHUNK));
    for (long c = 0; c < n; c++) {
        memset(host, (int)(c * 7 + 1), CHUNK);
        CHECK(cuMemcpyHtoD_v2(dev, host, CHUNK));
    }
    memset(host, 0, CHUNK);
    CHECK(cuMemcpyDtoH_v2(host, dev, CHUNK));
    size_t bad = 0;
    while (bad < CHUNK && host[bad] == (unsigned char)((n - 1) * 7 + 1))
        bad++;
    if (bad < CHUNK)
        printf("streamed %ld MiB, bad at %zu\n", mib, bad);
    else
        printf("streamed %ld MiB ok\n", mib);
    return 0;
}
