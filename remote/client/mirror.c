/* Small pinned host memory that kernels use as device memory. On a GPU,
 * cuMemHostAlloc memory is mapped: its address is also a device address
 * that kernels write (XLA's autotuner has its checkers write a result word
 * there, memsets zero it, copies read it). Remotely the GPU can only reach
 * the server's memory, so an allocation of up to FGR_MAPPED_MAX bytes that
 * asks to be mapped or portable (local.c) is made by the server's driver,
 * and the client maps its own pages at the same address (falling back to
 * client memory alone when that address is taken here). The two copies are
 * made alike: before each request, bytes the program changed since the
 * copies last agreed go to the server; after each syncpoint, the server's
 * bytes come back, of those allocations a call has named as a device
 * address (a memset, a copy, a kernel's parameter): one more round trip
 * while any such allocation lives. Staging buffers of copies, named only
 * as host memory, cost nothing.
 * So, as on a GPU, the program's writes before a launch are seen by it,
 * and its kernels' writes are seen after a synchronization. Bytes written
 * on both sides between two synchronizations are a race on a GPU too; here
 * the server's win. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

CUresult fgrHostMapped(CUdeviceptr *dptr, size_t bytes);
CUresult fgrHostMappedFree(CUdeviceptr dptr);
CUresult fgrHostWrite(CUdeviceptr dst, const void *src, size_t bytes);
CUresult fgrHostReadMany(const CUdeviceptr *srcs, const size_t *sizes, unsigned int count, void *dst, size_t bytes);

enum { MAX_MIRRORS = 64, MAX_PAGES = MAX_MIRRORS * (FGR_MAPPED_MAX / 4096 + 2) };

static struct mirror {
    uintptr_t addr;
    size_t n;
    uint8_t *agreed; /* the bytes both sides held when they last agreed */
    unsigned gen;    /* the connection it was made on (a forked child's is not) */
    int used;        /* named as a device address: its bytes come back at syncpoints */
} mirrors[MAX_MIRRORS];
int fgr_nmirrors; /* read without the lock on every call: atomically */
static struct page {
    uintptr_t at;
    int refs;
} pages[MAX_PAGES];
static int npages;
static unsigned gen;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int is_mirror_op(int op)
{
    return op == FGR_OP_fgrHostMapped || op == FGR_OP_fgrHostMappedFree || op == FGR_OP_fgrHostWrite ||
           op == FGR_OP_fgrHostReadMany;
}

static void unmap_pages(uintptr_t first, uintptr_t last, size_t psz)
{
    for (uintptr_t at = first; at <= last; at += psz)
        for (int i = 0; i < npages; i++)
            if (pages[i].at == at) {
                if (--pages[i].refs == 0) {
                    munmap((void *)at, psz);
                    pages[i] = pages[--npages];
                }
                break;
            }
}

/* Maps (or takes another reference on) the pages of [p, p+n) at their own
 * addresses; 0 when one of them is taken by something else here. */
static int map_pages(uintptr_t p, size_t n)
{
    size_t psz = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t first = p & ~(uintptr_t)(psz - 1), last = (p + n - 1) & ~(uintptr_t)(psz - 1);
    for (uintptr_t at = first; at <= last; at += psz) {
        int found = 0;
        for (int i = 0; i < npages && !found; i++)
            if (pages[i].at == at) {
                pages[i].refs++;
                found = 1;
            }
        if (found)
            continue;
        void *m = npages < MAX_PAGES ? mmap((void *)at, psz, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)
                                      : MAP_FAILED;
        if (m != MAP_FAILED && (uintptr_t)m != at)
            munmap(m, psz); /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        if (m == MAP_FAILED || (uintptr_t)m != at) {
            if (at > first)
                unmap_pages(first, at - psz, psz);
            return 0;
        }
        pages[npages++] = (struct page){at, 1};
    }
    return 1;
}

CUresult fgr_mirror_alloc(void **pp, size_t n)
{
    static int said;
    if (n == 0 || n > FGR_MAPPED_MAX)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    CUdeviceptr at = 0;
    uint8_t *agreed = NULL;
    CUresult r = fgr_nmirrors < MAX_MIRRORS ? fgrHostMapped(&at, n) : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS && (!(agreed = calloc(1, n)) || !map_pages((uintptr_t)at, n))) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("pinned memory at 0x%llx: %s; kernels cannot reach it (said once)", (unsigned long long)at,
                    agreed ? "that address is taken in this process" : "no memory");
        fgrHostMappedFree(at);
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r == CUDA_SUCCESS) {
        /* Both sides start zeroed. */
        memset((void *)(uintptr_t)at, 0, n);
        mirrors[fgr_nmirrors] = (struct mirror){(uintptr_t)at, n, agreed, gen, 0};
        __atomic_store_n(&fgr_nmirrors, fgr_nmirrors + 1, __ATOMIC_RELEASE);
        *pp = (void *)(uintptr_t)at;
    } else {
        free(agreed);
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int fgr_mirror_free(void *p)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < fgr_nmirrors; i++)
        if (mirrors[i].addr == (uintptr_t)p) {
            struct mirror m = mirrors[i];
            if (m.gen == gen)
                fgrHostMappedFree((CUdeviceptr)m.addr);
            size_t psz = (size_t)sysconf(_SC_PAGESIZE);
            unmap_pages(m.addr & ~(uintptr_t)(psz - 1), (m.addr + m.n - 1) & ~(uintptr_t)(psz - 1), psz);
            free(m.agreed);
            mirrors[i] = mirrors[fgr_nmirrors - 1];
            __atomic_store_n(&fgr_nmirrors, fgr_nmirrors - 1, __ATOMIC_RELEASE);
            found = 1;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

int fgr_mirror_holds(const void *p)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < fgr_nmirrors && !found; i++)
        found = mirrors[i].gen == gen && (uintptr_t)p >= mirrors[i].addr &&
                (uintptr_t)p - mirrors[i].addr < mirrors[i].n;
    pthread_mutex_unlock(&lock);
    return found;
}

/* The program's changes since the sides agreed, in runs (runs closer than
 * 64 bytes go as one). */
static void push(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < fgr_nmirrors; i++) {
        struct mirror *m = &mirrors[i];
        const uint8_t *now = (const uint8_t *)m->addr;
        if (m->gen != gen || !memcmp(now, m->agreed, m->n))
            continue;
        for (size_t k = 0; k < m->n;) {
            if (now[k] == m->agreed[k]) {
                k++;
                continue;
            }
            size_t end = k + 1, same = 0;
            while (end < m->n && same < 64) {
                same = now[end] == m->agreed[end] ? same + 1 : 0;
                end++;
            }
            end -= same;
            if (fgrHostWrite((CUdeviceptr)(m->addr + k), now + k, end - k) == CUDA_SUCCESS)
                memcpy(m->agreed + k, now + k, end - k);
            k = end;
        }
    }
    pthread_mutex_unlock(&lock);
}

/* The server's bytes of every allocation, in one round trip. */
static void pull(void)
{
    static uint8_t buf[FGR_MAPPED_TOTAL];
    CUdeviceptr srcs[MAX_MIRRORS];
    size_t sizes[MAX_MIRRORS], total = 0;
    int which[MAX_MIRRORS];
    unsigned count = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < fgr_nmirrors; i++)
        if (mirrors[i].gen == gen && __atomic_load_n(&mirrors[i].used, __ATOMIC_RELAXED) &&
            total + mirrors[i].n <= sizeof buf) {
            which[count] = i;
            srcs[count] = (CUdeviceptr)mirrors[i].addr;
            sizes[count++] = mirrors[i].n;
            total += mirrors[i].n;
        }
    if (count && fgrHostReadMany(srcs, sizes, count, buf, total) == CUDA_SUCCESS)
        for (unsigned k = 0, at = 0; k < count; at += (unsigned)sizes[k++]) {
            memcpy(mirrors[which[k]].agreed, buf + at, sizes[k]);
            memcpy((void *)mirrors[which[k]].addr, buf + at, sizes[k]);
        }
    pthread_mutex_unlock(&lock);
}

/* Without the lock (a call building its request holds the connection's):
 * a hint, at worst one more allocation brought back. */
void fgr_mirror_mark(uint64_t p)
{
    int n = __atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && i < MAX_MIRRORS; i++)
        if (p >= mirrors[i].addr && p - mirrors[i].addr < mirrors[i].n)
            __atomic_store_n(&mirrors[i].used, 1, __ATOMIC_RELAXED);
}

void fgr_mirror_before(int op)
{
    if (__atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE) && !is_mirror_op(op))
        push();
}

void fgr_mirror_after(int op, CUresult r)
{
    if (r == CUDA_SUCCESS && fgr_op_syncs[op] && __atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE))
        pull();
}

void fgr_mirror_forked(void)
{
    pthread_mutex_init(&lock, NULL);
    gen++; /* the parent's server copies are not this child's: its pages stay plain memory */
}
