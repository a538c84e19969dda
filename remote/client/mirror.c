/* Memory both the program and kernels use by one address, kept on both
 * sides: small pinned host memory kernels use as device memory, and
 * managed memory.
 *
 * On a GPU, cuMemHostAlloc memory is mapped: its address is also a device
 * address that kernels write (XLA's autotuner has its checkers write a
 * result word there, memsets zero it, copies read it). Remotely the GPU can
 * only reach the server's memory, so an allocation of up to FGR_MAPPED_MAX
 * bytes that asks to be mapped or portable (local.c) is made by the
 * server's driver, and the client maps its own pages at the same address
 * (falling back to client memory alone when that address is taken here).
 * Larger ones, and memory the program pins with cuMemHostRegister, are the
 * client's alone (copies carry them, as cudart's staging buffers), until a
 * call names an address in one as device memory (cuMemHostGetDevicePointer,
 * a kernel's parameter, a memset, a copy's device side): then it is
 * promoted, once, to be kept on both sides too. Its pages here stay where
 * they are (the program's, registered ones may not move); the server maps
 * pages at the same address (fgrHostMapAt, refused where something of its
 * own is there), and the program's bytes go with the next request.
 * Managed memory (cuMemAllocManaged) is made the same way, of any size: the
 * server's driver allocates it, the client maps pages at its address, and
 * when it cannot, the allocation is freed and refused
 * (CUDA_ERROR_NOT_SUPPORTED, said once), never handed out unmapped. A
 * module's managed variables (__managed__) are kept too, named from the
 * start since kernels reach them by address alone.
 *
 * The two copies are made alike: before each request (of managed memory,
 * but a wait for the device), bytes the program changed since the copies
 * last agreed go to the server; after each
 * syncpoint, the server's bytes come back, of those allocations a call has
 * named as a device address (a memset, a copy, a prefetch, a kernel's
 * parameter): one more round trip while any such allocation lives. Staging
 * buffers of copies, named only as host memory, cost nothing.
 * So, as on a GPU, the program's writes before a launch are seen by it,
 * and its kernels' writes are seen after a synchronization. Of the bytes
 * that come back only those the device changed are written here, so what
 * the program writes meanwhile (another thread, memory attached to another
 * stream) stays; bytes written on both sides between two synchronizations
 * are a race on a GPU too, and here the server's win.
 *
 * What changed is found by comparing with the bytes both sides last agreed
 * on (kept per allocation), a page at a time, and only changed pages are
 * looked at byte by byte. Write-protecting pages and catching the faults
 * would make a request's cost follow what was written rather than what is
 * mapped, but it needs a SIGSEGV handler the program may replace, and a
 * system call writing into protected memory (read(2) into a managed buffer)
 * fails with EFAULT instead of faulting: the comparison has neither
 * problem, and costs a pass over the allocations per request, at memory
 * bandwidth. Coming back, only
 * allocations named since they were made are asked for; across a network
 * and past FGR_MIRROR_BATCH bytes in all, the server sums each 64 KiB block
 * and only the blocks whose sums differ from those of the agreed bytes
 * travel, so the bytes sent follow what the device changed. The comparisons still
 * read all the memory kept (here before each call, on both sides at each
 * synchronization), which is why this suits MBs to a few hundred MB, not a
 * GPU's worth (docs/REMOTE.md). */
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
CUresult fgrHostSums(const CUdeviceptr *srcs, const size_t *sizes, unsigned int count, unsigned long long *sums,
                     unsigned int nsums);
CUresult fgrHostMapAt(CUdeviceptr at, size_t bytes, CUdeviceptr *dptr);
CUresult fgr_fwd_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult fgr_fwd_cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name);
CUresult fgr_fwd_cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name);
static void pull(void);

enum { MAX_MIRRORS = 1024, MAX_PINNED = 64, MAX_EDGES = 2 * MAX_MIRRORS };

static struct mirror {
    uintptr_t addr;
    size_t n;
    uint8_t *agreed; /* the bytes both sides held when they last agreed */
    unsigned gen;    /* the connection it was made on (a forked child's is not) */
    int used;        /* named as a device address: its bytes come back at syncpoints */
    int managed;
    void *owner;     /* a library's or module's managed variable: gone with it */
    int borrowed;    /* promoted: its pages here are the program's, never unmapped here */
} mirrors[MAX_MIRRORS];
int fgr_nmirrors; /* read without the lock on every call: atomically */
static int npinned;
/* The first and last pages of allocations, which two may share (counted);
 * the pages between are one allocation's alone. */
static struct page {
    uintptr_t at;
    int refs;
} pages[MAX_EDGES];
static int npages;
static unsigned gen;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Whether this thread holds the lock: the calls it makes meanwhile name
 * memory kept already, and must not promote (which takes the lock). */
static __thread int locked_here;

static void lock_mirrors(void)
{
    pthread_mutex_lock(&lock);
    locked_here = 1;
}

static void unlock_mirrors(void)
{
    locked_here = 0;
    pthread_mutex_unlock(&lock);
}

/* Pinned memory the client holds alone (cuMemHostAlloc's, cuMemHostRegister's)
 * until a call names it as a device address. */
enum { PROMOTED = 1, REFUSED };
static struct held {
    uintptr_t addr;
    size_t n;
    int registered;
    int fate; /* on connection gen: PROMOTED, REFUSED, or 0 (not named yet) */
    unsigned gen;
    uint64_t id; /* its BUFFER_ID (a registered range's) */
} *held;
int fgr_nheld; /* read without the lock on every call naming device memory: atomically */
static int capheld;

static int is_mirror_op(int op)
{
    return op == FGR_OP_fgrHostMapped || op == FGR_OP_fgrHostMappedFree || op == FGR_OP_fgrHostWrite ||
           op == FGR_OP_fgrHostReadMany || op == FGR_OP_fgrHostSums || op == FGR_OP_fgrHostMapAt;
}

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void *map_at(uintptr_t at, size_t n)
{
    void *m = mmap((void *)at, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != MAP_FAILED && (uintptr_t)m != at) {
        munmap(m, n); /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        m = MAP_FAILED;
    }
    return m;
}

static void edge_drop(uintptr_t at, size_t psz)
{
    for (int i = 0; i < npages; i++)
        if (pages[i].at == at) {
            if (--pages[i].refs == 0) {
                munmap((void *)at, psz);
                pages[i] = pages[--npages];
            }
            return;
        }
}

static int edge_take(uintptr_t at, size_t psz)
{
    for (int i = 0; i < npages; i++)
        if (pages[i].at == at) {
            pages[i].refs++;
            return 1;
        }
    if (npages == MAX_EDGES || map_at(at, psz) == MAP_FAILED)
        return 0;
    pages[npages++] = (struct page){at, 1};
    return 1;
}

static void unmap_range(uintptr_t p, size_t n)
{
    size_t psz = page_size();
    uintptr_t first = p & ~(uintptr_t)(psz - 1), last = (p + n - 1) & ~(uintptr_t)(psz - 1);
    if (last > first + psz)
        munmap((void *)(first + psz), last - first - psz);
    edge_drop(first, psz);
    if (last != first)
        edge_drop(last, psz);
}

/* Maps [p, p+n) here at its own address; 0 when some of it is taken by
 * something else here. */
static int map_range(uintptr_t p, size_t n)
{
    size_t psz = page_size();
    uintptr_t first = p & ~(uintptr_t)(psz - 1), last = (p + n - 1) & ~(uintptr_t)(psz - 1);
    if (!edge_take(first, psz))
        return 0;
    if (last != first && !edge_take(last, psz)) {
        edge_drop(first, psz);
        return 0;
    }
    if (last > first + psz && map_at(first + psz, last - first - psz) == MAP_FAILED) {
        edge_drop(first, psz);
        if (last != first)
            edge_drop(last, psz);
        return 0;
    }
    return 1;
}

/* Records [at, at+n) as kept on both sides (lock held): 0 when it cannot
 * be mapped here. Both sides start zeroed. */
static int keep(uintptr_t at, size_t n, int managed, const char **why)
{
    uint8_t *agreed = NULL;
    if (fgr_nmirrors == MAX_MIRRORS || !(agreed = calloc(1, n))) {
        *why = fgr_nmirrors == MAX_MIRRORS ? "too many such allocations (1024)" : "no memory";
        free(agreed);
        return 0;
    }
    if (!map_range(at, n)) {
        *why = "that address is taken in this process";
        free(agreed);
        return 0;
    }
    memset((void *)at, 0, n);
    mirrors[fgr_nmirrors] = (struct mirror){at, n, agreed, gen, 0, managed, NULL, 0};
    __atomic_store_n(&fgr_nmirrors, fgr_nmirrors + 1, __ATOMIC_RELEASE);
    npinned += !managed;
    return 1;
}

CUresult fgr_mirror_alloc(void **pp, size_t n)
{
    static int said;
    if (n == 0 || n > FGR_MAPPED_MAX)
        return CUDA_ERROR_NOT_SUPPORTED;
    lock_mirrors();
    CUdeviceptr at = 0;
    const char *why = NULL;
    CUresult r = npinned < MAX_PINNED ? fgrHostMapped(&at, n) : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS && !keep((uintptr_t)at, n, 0, &why)) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("pinned memory at 0x%llx: %s; kernels cannot reach it (said once)", (unsigned long long)at, why);
        fgrHostMappedFree(at);
        r = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (r == CUDA_SUCCESS)
        *pp = (void *)(uintptr_t)at;
    unlock_mirrors();
    return r;
}

/* The server makes it; the program gets it only once it is mapped here
 * too, else the call fails (the memory freed there) and says why once. A
 * server whose driver lets the host touch managed memory only while no
 * kernel runs cannot serve it: the executor copies it at any time. */
FGR_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    static int said;
    const char *why = NULL;
    CUcontext ctx = fgr_current();
    CUdevice dev = 0;
    if (ctx && cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev >= 0 && dev < fgr_srv.ndev &&
        !fgr_srv.dev[dev].server_concurrent_managed) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("cuMemAllocManaged: the server's device lets the host touch managed memory only while no "
                    "kernel runs, which keeping it on both sides needs (CUDA_ERROR_NOT_SUPPORTED, said once)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUresult r = fgr_fwd_cuMemAllocManaged(dptr, bytesize, flags);
    if (r != CUDA_SUCCESS)
        return r;
    lock_mirrors();
    int kept = keep((uintptr_t)*dptr, bytesize, 1, &why);
    unlock_mirrors();
    if (kept)
        return CUDA_SUCCESS;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fgr_say("cuMemAllocManaged: %zu bytes at 0x%llx: %s; the program could not reach them "
                "(CUDA_ERROR_NOT_SUPPORTED, said once)",
                bytesize, (unsigned long long)*dptr, why);
    cuMemFree_v2(*dptr);
    *dptr = 0;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* A library's or module's managed variable (what cudart's __managed__
 * variables are): kept as cuMemAllocManaged's memory, but its bytes are the
 * module's from the start, read at once, and it goes with its owner. Asked
 * again, it is kept once. */
static CUresult keep_variable(CUdeviceptr p, size_t n, void *owner, const char *call, const char *name)
{
    static int said;
    const char *why = NULL;
    int kept = 0, fresh = 0;
    lock_mirrors();
    for (int i = 0; i < fgr_nmirrors && !kept; i++)
        kept = mirrors[i].gen == gen && mirrors[i].addr == (uintptr_t)p;
    if (!kept && n && (kept = fresh = keep((uintptr_t)p, n, 1, &why))) {
        mirrors[fgr_nmirrors - 1].owner = owner;
        mirrors[fgr_nmirrors - 1].used = 1;
    }
    unlock_mirrors();
    if (!kept) {
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            fgr_say("%s: managed variable %s (%zu bytes at 0x%llx): %s; the program could not reach it "
                    "(CUDA_ERROR_NOT_SUPPORTED, said once)",
                    call, name ? name : "?", n, (unsigned long long)p, why ? why : "it is empty");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (fresh)
        pull(); /* its initial bytes */
    return CUDA_SUCCESS;
}

FGR_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    CUdeviceptr p = 0;
    size_t n = 0;
    CUresult r = fgr_fwd_cuLibraryGetManaged(&p, &n, library, name);
    if (r == CUDA_SUCCESS)
        r = keep_variable(p, n, library, "cuLibraryGetManaged", name);
    if (r == CUDA_SUCCESS && dptr)
        *dptr = p;
    if (r == CUDA_SUCCESS && bytes)
        *bytes = n;
    return r;
}

/* A module's global may be a managed variable: the server's driver says. */
FGR_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    CUdeviceptr p = 0;
    size_t n = 0;
    unsigned managed = 0;
    CUresult r = fgr_fwd_cuModuleGetGlobal_v2(&p, &n, hmod, name);
    if (r == CUDA_SUCCESS && cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS &&
        managed)
        r = keep_variable(p, n, hmod, "cuModuleGetGlobal", name);
    if (r == CUDA_SUCCESS && dptr)
        *dptr = p;
    if (r == CUDA_SUCCESS && bytes)
        *bytes = n;
    return r;
}

/* Forgets mirror i (lock held); its pages go. */
static void forget(int i)
{
    struct mirror m = mirrors[i];
    if (!m.borrowed)
        unmap_range(m.addr, m.n);
    free(m.agreed);
    npinned -= !m.managed && !m.borrowed;
    mirrors[i] = mirrors[fgr_nmirrors - 1];
    __atomic_store_n(&fgr_nmirrors, fgr_nmirrors - 1, __ATOMIC_RELEASE);
}

int fgr_mirror_free(void *p)
{
    int found = 0;
    lock_mirrors();
    for (int i = 0; i < fgr_nmirrors && !found; i++)
        if (mirrors[i].addr == (uintptr_t)p && !mirrors[i].managed && !mirrors[i].borrowed) {
            if (mirrors[i].gen == gen)
                fgrHostMappedFree((CUdeviceptr)mirrors[i].addr);
            forget(i);
            found = 1;
        }
    unlock_mirrors();
    return found;
}

/* Before cuMemFree sends it: no later pull may ask for it. */
int fgr_managed_forget(uint64_t p)
{
    int found = 0;
    if (!__atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE))
        return 0;
    lock_mirrors();
    for (int i = 0; i < fgr_nmirrors && !found; i++)
        if (mirrors[i].addr == p && mirrors[i].managed) {
            forget(i);
            found = 1;
        }
    unlock_mirrors();
    return found;
}

void fgr_managed_owner_gone(void *owner)
{
    if (!__atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE))
        return;
    lock_mirrors();
    for (int i = 0; i < fgr_nmirrors;)
        if (mirrors[i].owner == owner && mirrors[i].managed)
            forget(i);
        else
            i++;
    unlock_mirrors();
}

/* Records pinned memory the client made or registered alone: 0 when it
 * cannot (no memory), or registered memory overlaps some already. */
int fgr_pinned_hold(void *p, size_t n, int registered)
{
    int ok = 1;
    lock_mirrors();
    for (int i = 0; i < fgr_nheld && ok; i++)
        ok = !registered || (uintptr_t)p + n <= held[i].addr || held[i].addr + held[i].n <= (uintptr_t)p;
    if (ok && fgr_nheld == capheld) {
        int more = capheld ? 2 * capheld : 64;
        struct held *h = realloc(held, (size_t)more * sizeof *h);
        if ((ok = h != NULL))
            held = h, capheld = more;
    }
    if (ok) {
        held[fgr_nheld] = (struct held){(uintptr_t)p, n, registered, 0, 0, registered ? fgr_buffer_id() : 0};
        __atomic_store_n(&fgr_nheld, fgr_nheld + 1, __ATOMIC_RELEASE);
    }
    unlock_mirrors();
    return ok;
}

int fgr_pinned_registered(uint64_t p, uint64_t *base, uint64_t *n, uint64_t *id)
{
    int found = 0;
    lock_mirrors();
    for (int i = 0; i < fgr_nheld && !found; i++)
        if (held[i].registered && p - held[i].addr < held[i].n) {
            *base = held[i].addr;
            *n = held[i].n;
            *id = held[i].id;
            found = 1;
        }
    unlock_mirrors();
    return found;
}

/* Forgets the pinned memory at p (made alone, or registered), and the
 * server's copy of it when it was promoted: 0 when p is not such memory. */
int fgr_pinned_release(void *p, int registered)
{
    int found = 0;
    lock_mirrors();
    for (int i = 0; i < fgr_nheld && !found; i++)
        if (held[i].addr == (uintptr_t)p && held[i].registered == registered) {
            held[i] = held[fgr_nheld - 1];
            __atomic_store_n(&fgr_nheld, fgr_nheld - 1, __ATOMIC_RELEASE);
            found = 1;
        }
    for (int i = 0; found && i < fgr_nmirrors;) /* (a forked child's may be there twice) */
        if (mirrors[i].addr == (uintptr_t)p && mirrors[i].borrowed) {
            if (mirrors[i].gen == gen)
                fgrHostMappedFree((CUdeviceptr)mirrors[i].addr);
            forget(i);
        } else {
            i++;
        }
    unlock_mirrors();
    return found;
}

/* Makes h kept on both sides (lock held): the server's zeroed pages at its
 * address, which the program's bytes reach with the next request (they
 * differ from the zeroes agreed on). */
static const char *promote(struct held *h)
{
    uint8_t *agreed = NULL;
    CUdeviceptr at = 0;
    if (h->n > FGR_PROMOTED_TOTAL)
        return "over 1 GiB";
    if (fgr_nmirrors == MAX_MIRRORS)
        return "too many allocations kept on both sides (1024)";
    if (!(agreed = calloc(1, h->n)))
        return "no memory for its copy";
    CUresult r = fgrHostMapAt((CUdeviceptr)h->addr, h->n, &at);
    if (r != CUDA_SUCCESS) {
        free(agreed);
        return r == CUDA_ERROR_ALREADY_MAPPED   ? "that address is taken on the server"
               : r == CUDA_ERROR_OUT_OF_MEMORY ? "over 1 GiB of it in all, or no memory on the server"
                                               : "the server could not map it";
    }
    mirrors[fgr_nmirrors] = (struct mirror){h->addr, h->n, agreed, gen, 1, 0, NULL, 1};
    __atomic_store_n(&fgr_nmirrors, fgr_nmirrors + 1, __ATOMIC_RELEASE);
    return NULL;
}

CUresult fgr_pinned_promote(uint64_t p)
{
    static int said;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    const char *reason = NULL;
    uintptr_t at = 0;
    size_t n = 0;
    if (locked_here)
        return CUDA_ERROR_NOT_FOUND;
    /* Memory kept already: no need of the lock. */
    int kept = __atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE);
    for (int i = 0; i < kept && i < MAX_MIRRORS; i++)
        if (mirrors[i].gen == gen && p >= mirrors[i].addr && p - mirrors[i].addr < mirrors[i].n)
            return CUDA_SUCCESS;
    lock_mirrors();
    for (int i = 0; i < fgr_nheld && r == CUDA_ERROR_NOT_FOUND; i++) {
        struct held *h = &held[i];
        if (p < h->addr || p - h->addr >= h->n)
            continue;
        if (h->gen != gen || !h->fate) {
            reason = promote(h);
            h->fate = reason ? REFUSED : PROMOTED;
            h->gen = gen;
            at = h->addr, n = h->n;
        }
        r = h->fate == PROMOTED ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    }
    unlock_mirrors();
    if (reason && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fgr_say("pinned memory of %zu bytes at 0x%llx, named as a device address: %s; kernels cannot reach it "
                "(said once)",
                n, (unsigned long long)at, reason);
    return r;
}

int fgr_mirror_holds(const void *p)
{
    int found = 0;
    lock_mirrors();
    for (int i = 0; i < fgr_nmirrors && !found; i++)
        found = mirrors[i].gen == gen && !mirrors[i].managed && (uintptr_t)p >= mirrors[i].addr &&
                (uintptr_t)p - mirrors[i].addr < mirrors[i].n;
    unlock_mirrors();
    return found;
}

/* Sends bytes [k, end) of m as they are now, from a copy taken first: a
 * thread writing them meanwhile changes what the next request sends, not
 * what this one does. */
static void send_run(struct mirror *m, size_t k, size_t end)
{
    const uint8_t *now = (const uint8_t *)m->addr;
    while (k < end) {
        size_t piece = end - k < FGR_MIRROR_BATCH ? end - k : FGR_MIRROR_BATCH;
        memcpy(m->agreed + k, now + k, piece);
        if (fgrHostWrite((CUdeviceptr)(m->addr + k), m->agreed + k, piece) != CUDA_SUCCESS)
            return;
        k += piece;
    }
}

/* The program's changes since the sides agreed, a page at a time, in runs
 * (runs closer than 64 bytes go as one); of pinned memory alone when
 * pinned_only. */
static void push(int pinned_only)
{
    const size_t step = 4096;
    lock_mirrors();
    for (int i = 0; i < fgr_nmirrors; i++) {
        struct mirror *m = &mirrors[i];
        const uint8_t *now = (const uint8_t *)m->addr;
        if (m->gen != gen || (pinned_only && m->managed))
            continue;
        size_t run = 0, run_end = 0; /* the run being gathered: [run, run_end) */
        int open = 0;
        for (size_t pg = 0; pg < m->n; pg += step) {
            size_t lim = m->n - pg < step ? m->n : pg + step;
            if (!memcmp(now + pg, m->agreed + pg, lim - pg))
                continue;
            for (size_t k = pg; k < lim; k++) {
                if (now[k] == m->agreed[k])
                    continue;
                if (open && k - run_end >= 64) {
                    send_run(m, run, run_end);
                    open = 0;
                }
                if (!open)
                    run = k, open = 1;
                run_end = k + 1;
            }
        }
        if (open)
            send_run(m, run, run_end);
    }
    unlock_mirrors();
}

/* Takes the server's bytes of [at, at+n) of m: where they differ from what
 * both last agreed on, the device wrote them. */
static void merge(struct mirror *m, size_t at, const uint8_t *srv, size_t n)
{
    const size_t step = 4096;
    uint8_t *here = (uint8_t *)m->addr + at, *agreed = m->agreed + at;
    for (size_t pg = 0; pg < n; pg += step) {
        size_t lim = n - pg < step ? n : pg + step;
        if (!memcmp(srv + pg, agreed + pg, lim - pg))
            continue;
        for (size_t k = pg; k < lim; k++)
            if (srv[k] != agreed[k])
                here[k] = agreed[k] = srv[k];
    }
}

/* A batch of pieces to bring back (lock held). */
static struct batch {
    CUdeviceptr srcs[64];
    size_t sizes[64], offs[64], total;
    int which[64];
    unsigned count;
    uint8_t *buf;
} batch;

static void batch_read(void)
{
    struct batch *b = &batch;
    CUresult r = fgrHostReadMany(b->srcs, b->sizes, b->count, b->buf, b->total);
    size_t at = 0;
    for (unsigned k = 0; k < b->count; at += b->sizes[k++]) {
        struct mirror *m = &mirrors[b->which[k]];
        if (r == CUDA_SUCCESS)
            merge(m, b->offs[k], b->buf + at, b->sizes[k]);
        else if (fgrHostReadMany(&b->srcs[k], &b->sizes[k], 1, b->buf, b->sizes[k]) == CUDA_SUCCESS)
            merge(m, b->offs[k], b->buf, b->sizes[k]);
        else /* the server no longer has it (its context gone): not asked again until named */
            __atomic_store_n(&m->used, 0, __ATOMIC_RELAXED);
    }
    b->count = 0;
    b->total = 0;
}

/* Bytes [off, off+len) of mirror i to bring back, run on to the piece
 * before when they follow it. */
static void batch_add(int i, size_t off, size_t len)
{
    struct batch *b = &batch;
    while (len) {
        unsigned last = b->count - 1;
        size_t room = FGR_MIRROR_BATCH - b->total;
        if (b->count && room && b->which[last] == i && b->offs[last] + b->sizes[last] == off) {
            size_t add = len < room ? len : room;
            b->sizes[last] += add;
            b->total += add, off += add, len -= add;
            continue;
        }
        if (b->count == 64 || !room) {
            batch_read();
            room = FGR_MIRROR_BATCH;
        }
        size_t piece = len < room ? len : room;
        b->which[b->count] = i;
        b->srcs[b->count] = (CUdeviceptr)(mirrors[i].addr + off);
        b->sizes[b->count] = piece;
        b->offs[b->count++] = off;
        b->total += piece, off += piece, len -= piece;
    }
}

/* Ranges whose blocks' sums are asked first (lock held): a block whose sum
 * there is that of the bytes both sides last agreed on has not changed. */
static struct sums {
    CUdeviceptr srcs[64];
    size_t sizes[64], offs[64];
    int which[64];
    unsigned count, nsums;
    unsigned long long sums[FGR_MAX_SUMS];
} sums;

static void sums_check(void)
{
    struct sums *s = &sums;
    CUresult r = fgrHostSums(s->srcs, s->sizes, s->count, s->sums, s->nsums);
    unsigned k = 0;
    for (unsigned j = 0; j < s->count; j++) {
        const struct mirror *m = &mirrors[s->which[j]];
        for (size_t off = 0; off < s->sizes[j]; off += FGR_SUM_BLOCK, k++) {
            size_t n = s->sizes[j] - off < FGR_SUM_BLOCK ? s->sizes[j] - off : FGR_SUM_BLOCK, at = s->offs[j] + off;
            if (r != CUDA_SUCCESS || s->sums[k] != fgr_block_sum(m->agreed + at, n))
                batch_add(s->which[j], at, n);
        }
    }
    s->count = 0;
    s->nsums = 0;
}

/* The server's bytes of every allocation named. Across a network, more
 * than FGR_MIRROR_BATCH bytes in all are compared by their blocks' sums
 * first (one more round trip), and only the blocks that differ come back;
 * otherwise (or over a local socket or shared memory, where copying costs
 * less than summing on both sides) they come back whole. */
static void pull(void)
{
    struct sums *s = &sums;
    size_t total = 0;
    lock_mirrors();
    if (!batch.buf && !(batch.buf = malloc(FGR_MIRROR_BATCH))) {
        unlock_mirrors();
        return;
    }
    for (int i = 0; i < fgr_nmirrors; i++)
        if (mirrors[i].gen == gen && __atomic_load_n(&mirrors[i].used, __ATOMIC_RELAXED))
            total += mirrors[i].n;
    for (int i = 0; i < fgr_nmirrors; i++) {
        struct mirror *m = &mirrors[i];
        if (m->gen != gen || !__atomic_load_n(&m->used, __ATOMIC_RELAXED))
            continue;
        if (total <= FGR_MIRROR_BATCH || !fgr_keep_images) {
            batch_add(i, 0, m->n);
            continue;
        }
        for (size_t off = 0; off < m->n;) {
            if (s->count == 64 || s->nsums == FGR_MAX_SUMS)
                sums_check();
            size_t most = (size_t)(FGR_MAX_SUMS - s->nsums) * FGR_SUM_BLOCK;
            size_t len = m->n - off < most ? m->n - off : most;
            s->which[s->count] = i;
            s->srcs[s->count] = (CUdeviceptr)(m->addr + off);
            s->sizes[s->count] = len;
            s->offs[s->count++] = off;
            s->nsums += (unsigned)((len + FGR_SUM_BLOCK - 1) / FGR_SUM_BLOCK);
            off += len;
        }
    }
    if (s->count)
        sums_check();
    if (batch.count)
        batch_read();
    unlock_mirrors();
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

/* A wait for the device neither starts work nor reads memory: what the
 * program wrote into managed memory before it goes with the next call that
 * may (and the bytes coming back after it leave those writes alone). Pinned
 * memory still goes, for a kernel that polls a flag the program sets before
 * it waits. */
static int is_wait(int op)
{
    switch (op) {
    case FGR_OP_cuCtxSynchronize:
    case FGR_OP_cuCtxSynchronize_v2:
    case FGR_OP_cuStreamSynchronize:
    case FGR_OP_cuStreamSynchronize_ptsz:
    case FGR_OP_cuStreamQuery:
    case FGR_OP_cuStreamQuery_ptsz:
    case FGR_OP_cuEventQuery:
    case FGR_OP_cuEventSynchronize: return 1;
    }
    return 0;
}

/* Not for a move's or checkpoint's own calls: the program's calls wait for
 * those (conn.c), one of them perhaps holding the mirrors while it does
 * (a push under way); what they carry was pushed at the call they began
 * in, and the rest goes where the program then is. */
void fgr_mirror_before(int op)
{
    if (__atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE) && !is_mirror_op(op) && !fgr_moving_here())
        push(is_wait(op));
}

void fgr_mirror_after(int op, CUresult r)
{
    if (r == CUDA_SUCCESS && fgr_op_syncs[op] && __atomic_load_n(&fgr_nmirrors, __ATOMIC_ACQUIRE) && !fgr_moving_here())
        pull();
}

void fgr_mirror_forked(void)
{
    pthread_mutex_init(&lock, NULL);
    gen++; /* the parent's server copies are not this child's: its pages stay plain memory */
}
