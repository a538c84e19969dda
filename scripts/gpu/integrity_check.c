/* Checks the remoting client's integrity hash (remote/client/integrity.c)
 * against the real driver: asks the driver's integrity-check function
 * (table d4082055…, word 1) and computes the client's answer from the same
 * inputs, as the CUDA runtime gathers them through public calls. Linked
 * against the real libcuda. Prints PASS or FAIL per version asked; exit
 * status 1 on any FAIL. */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "integrity_devices.h"

static const CUuuid integrity_id = {{(char)0xd4, 0x08, 0x20, 0x55, (char)0xbd, (char)0xe6, 0x70, 0x4b, (char)0x8d, 0x34,
                                     (char)0xba, 0x12, 0x3c, 0x66, (char)0xe1, (char)0xf2}};
static const CUuuid cudart_id = {{0x6b, (char)0xd5, (char)0xfb, 0x6c, 0x5b, (char)0xf4, (char)0xe7, 0x4a, (char)0x89,
                                  (char)0x87, (char)0xd9, 0x39, 0x12, (char)0xfd, (char)0x9d, (char)0xf9}};

#define CHECK(call)                                                              \
    do {                                                                         \
        CUresult r_ = (call);                                                    \
        if (r_ != CUDA_SUCCESS) {                                                \
            printf("FAIL integrity: %s: error %d\n", #call, (int)r_);            \
            return 1;                                                            \
        }                                                                        \
    } while (0)

int main(void)
{
    CHECK(cuInit(0));
    const void *const *it, *const *rt;
    CHECK(cuGetExportTable((const void **)&it, &integrity_id));
    CHECK(cuGetExportTable((const void **)&rt, &cudart_id));
    int dv, n;
    CHECK(cuDriverGetVersion(&dv));
    CHECK(cuDeviceGetCount(&n));
    struct fgr_integrity_dev devs[64];
    if (n > 64)
        n = 64;
    CHECK(fgr_integrity_devices(devs, n));
    typedef CUresult (*check_fn)(unsigned int, uint64_t, uint64_t[2]);
    check_fn real = (check_fn)(uintptr_t)it[1];
    /* Versions a runtime of CUDA 12 and 13 passes, and the fixed answers. */
    static const unsigned versions[] = {13002, 13000, 12082, 13011, 13009};
    int bad = 0;
    for (size_t v = 0; v < sizeof versions / sizeof versions[0]; v++) {
        uint64_t secs = (uint64_t)time(NULL), got[2] = {0, 0}, want[2];
        CHECK(real(versions[v], secs, got));
        struct fgr_integrity_in in = {(uint32_t)dv,         versions[v],         (uint32_t)getpid(),
                                      (uint32_t)pthread_self(), (uintptr_t)rt,   (uintptr_t)it,
                                      (uintptr_t)it[1],     secs};
        fgr_integrity(&in, devs, n, want);
        int same = memcmp(got, want, sizeof got) == 0;
        bad |= !same;
        printf("%s integrity: version %u over %d devices: driver %016llx%016llx, client %016llx%016llx\n",
               same ? "PASS" : "FAIL", versions[v], n, (unsigned long long)got[0], (unsigned long long)got[1],
               (unsigned long long)want[0], (unsigned long long)want[1]);
    }
    return bad;
}
