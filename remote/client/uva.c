/* Copies with unified addressing (cuMemcpy, cuMemcpyAsync: what
 * cudaMemcpyDefault becomes) whose pointers may be the program's host
 * memory. On a GPU the driver tells host from device by the address; here
 * the program's host memory is not in the executor, whose checks refuse
 * it. The client keeps the device ranges its connection was given (from
 * the allocating calls' answers, api/remote.api's alloc[SIZE]) and turns a
 * copy with one side in the program's own memory, outside those ranges,
 * into the explicit copy the driver would have made. Anything else goes
 * to the server as it came. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct range {
    uint64_t base, size;
    int kept; /* a graph's allocation: its address stays the graph's when freed */
};

static pthread_rwlock_t ranges_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct range *ranges; /* sorted by base */
static size_t nranges, cap;

/* The index of the first range whose base is above p. */
static size_t above(uint64_t p)
{
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ranges[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int grow(void)
{
    size_t more = cap ? 2 * cap : 256;
    struct range *r = realloc(ranges, more * sizeof *r);
    if (!r)
        return 0;
    ranges = r;
    cap = more;
    return 1;
}

static void range_add(uint64_t base, uint64_t size, int kept)
{
    if (!base || !size)
        return;
    pthread_rwlock_wrlock(&ranges_lock);
    size_t i = above(base);
    if (i && ranges[i - 1].base == base) {
        ranges[i - 1].size = size; /* the address given again */
        ranges[i - 1].kept |= kept;
    } else if (nranges < cap || grow()) {
        memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof *ranges);
        ranges[i] = (struct range){base, size, kept};
        nranges++;
    } /* else not recorded: forwarded unless the program has memory there */
    pthread_rwlock_unlock(&ranges_lock);
}

void fgr_range_add(uint64_t base, uint64_t size) { range_add(base, size, 0); }

/* A graph's allocation node fixes its address for as long as the node
 * lives: each launch allocates it again, so a free does not forget it. */
void fgr_range_add_kept(uint64_t base, uint64_t size) { range_add(base, size, 1); }

void fgr_range_drop(uint64_t base)
{
    pthread_rwlock_wrlock(&ranges_lock);
    size_t i = above(base);
    if (i && ranges[i - 1].base == base && !ranges[i - 1].kept) {
        memmove(&ranges[i - 1], &ranges[i], (nranges - i) * sizeof *ranges);
        nranges--;
    }
    pthread_rwlock_unlock(&ranges_lock);
}

/* Whether p lies in a range the connection was given (a few ranges back:
 * a reservation holds the mappings made in it). */
static int on_server(uint64_t p)
{
    pthread_rwlock_rdlock(&ranges_lock);
    int in = 0;
    for (size_t i = above(p), k = 0; i > 0 && k < 8 && !in; i--, k++)
        in = p - ranges[i - 1].base < ranges[i - 1].size;
    pthread_rwlock_unlock(&ranges_lock);
    return in;
}

int fgr_range_has(uint64_t p) { return on_server(p); }

/* Whether [p, p + n) is the program's own memory: outside the server's
 * ranges, and its first and last pages mapped here. */
static int here(uint64_t p, size_t n)
{
    if (!p || on_server(p))
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    unsigned char v;
    uint64_t last = p + (n ? n - 1 : 0);
    return last >= p && mincore((void *)(uintptr_t)(p & ~(uint64_t)(page - 1)), 1, &v) == 0 &&
           mincore((void *)(uintptr_t)(last & ~(uint64_t)(page - 1)), 1, &v) == 0;
}

int fgr_uva_host(uint64_t p, size_t n) { return here(p, n); }

int fgr_uva_copy(CUresult *r, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int per_thread, int async)
{
    int dh = here(dst, n), sh = here(src, n);
    if (!dh && !sh)
        return 0;
    void *d = (void *)(uintptr_t)dst;
    const void *h = (const void *)(uintptr_t)src;
    if (dh && sh) { /* host to host: in stream order */
        *r = !async ? CUDA_SUCCESS : per_thread ? cuStreamSynchronize_ptsz(s) : cuStreamSynchronize(s);
        if (*r == CUDA_SUCCESS)
            memmove(d, h, n);
    } else if (sh) {
        *r = async ? (per_thread ? cuMemcpyHtoDAsync_v2_ptsz(dst, h, n, s) : cuMemcpyHtoDAsync_v2(dst, h, n, s))
                   : (per_thread ? cuMemcpyHtoD_v2_ptds(dst, h, n) : cuMemcpyHtoD_v2(dst, h, n));
    } else {
        *r = async ? (per_thread ? cuMemcpyDtoHAsync_v2_ptsz(d, src, n, s) : cuMemcpyDtoHAsync_v2(d, src, n, s))
                   : (per_thread ? cuMemcpyDtoH_v2_ptds(d, src, n) : cuMemcpyDtoH_v2(d, src, n));
    }
    return 1;
}
