/* Moving a connection to another server (remote/client/migrate.c does the
 * moving). flexgv serve asks through the control socket (--control-fd): a
 * line "migrate ADDR", then SIGUSR2 once the executor said "ready" there; the next answer is preceded by an
 * output frame that tells the client ADDR. The client then has this
 * executor drain and give its state's bytes (journal.c) and the bytes of
 * its device memory (device to device on one host: fgrStatePull), makes
 * them again through a new executor of ADDR, and
 * says how it ended (fgrStateDone), which goes back to the server as a
 * line: "moved ADDR MS" or "stayed WHY". */
#include "executor.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    CUresult (*sync)(void);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*getcur)(CUcontext *);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*err_name)(CUresult, const char **);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*addr_free)(CUdeviceptr, size_t);
    CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*ctx_device)(CUdevice *);
    CUresult (*dtod)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*record)(CUevent, CUstream);
    CUresult (*ctx_record)(CUcontext, CUevent);
    CUresult (*ev_create)(CUevent *, unsigned int);
    CUresult (*ev_query)(CUevent);
    CUresult (*ev_destroy)(CUevent);
} d;

/* A result by the driver's name for it. */
static const char *err_name(CUresult r)
{
    static char s[32];
    const char *n = NULL;
    if (d.err_name && d.err_name(r, &n) == CUDA_SUCCESS && n)
        return n;
    snprintf(s, sizeof s, "error %d", (int)r);
    return s;
}

static int control = -1;
static volatile sig_atomic_t rang;
static CUresult (*replay)(const uint8_t *, uint32_t);

static struct fgr_buf saved;     /* the state's bytes, while the client reads them */
static uint8_t *loading;         /* a moved state's bytes, while the client gives them */
static uint64_t nloading, caploading;

static void on_ring(int sig)
{
    (void)sig;
    rang = 1;
}

void fgr_move_poll(int (*write)(const void *, size_t))
{
    if (!rang)
        return;
    rang = 0;
    static char line[1024];
    static size_t have;
    for (;;) {
        ssize_t got = read(control, line + have, sizeof line - 1 - have);
        if (got <= 0)
            break;
        have += (size_t)got;
        char *nl;
        while ((nl = memchr(line, '\n', have))) {
            *nl = 0;
            if (!strncmp(line, "migrate ", 8) && nl - line > 8) {
                size_t n = (size_t)(nl - line) - 8;
                uint8_t f[9 + sizeof line];
                uint32_t len = 5 + (uint32_t)n, magic = FGR_OUTPUT;
                for (int i = 0; i < 4; i++)
                    f[i] = (uint8_t)(len >> (8 * i)), f[4 + i] = (uint8_t)(magic >> (8 * i));
                f[8] = FGR_OUTPUT_MOVE;
                memcpy(f + 9, line + 8, n);
                fgr_logf("asked to move to %s", line + 8);
                if (write(f, 9 + n))
                    return; /* the answer's write fails the same way, and says so */
            } else {
                fgr_logf("the server's control line \"%s\" is not one this executor knows", line);
            }
            have -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, have);
        }
        if (have == sizeof line - 1)
            have = 0; /* a line too long: dropped */
    }
}

static void answer_why(unsigned nwhy, char *why, const char *what)
{
    if (why && nwhy)
        snprintf(why, fgr_min(nwhy, 1024), "%s", what);
}

#define DRAIN_HOSTFN_NS 250000000ull /* a host function running that long may wait for the program */
#define DRAIN_MAX_NS 10000000000ull  /* work not done by then may wait for it too */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The work of context ctx (current), done. The program is paused
 * meanwhile, and its work may wait for it: a host function of its own that
 * waits for the program to go on (CUDA allows it), a stream that waits for
 * a word the program is to write. Such work never ends while the program
 * waits for the drain, so the drain waits for the driver's context-wide
 * event, not in cuCtxSynchronize, and gives up once a host function has
 * run for 250 ms (CUDA_ERROR_NOT_READY) or the work is not done in 10 s
 * (CUDA_ERROR_TIMEOUT): the state is then not taken and the program goes
 * on. A driver without the
 * event (before CUDA 12.5) is waited for. */
static CUresult drain(CUcontext ctx, uint64_t t0)
{
    CUevent ev = NULL;
    if (!d.ctx_record || d.ev_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return d.sync();
    CUresult r = d.ctx_record(ctx, ev);
    if (r != CUDA_SUCCESS) { /* as a driver that has no such event */
        d.ev_destroy(ev);
        return d.sync();
    }
    for (unsigned us = 20; r == CUDA_SUCCESS && d.ev_query(ev) == CUDA_ERROR_NOT_READY; us = us < 1000 ? 2 * us : us) {
        uint64_t now = now_ns(), since = fgr_hostfn_running_since();
        if (since && now - (since > t0 ? since : t0) >= DRAIN_HOSTFN_NS) {
            r = CUDA_ERROR_NOT_READY;
        } else if (now - t0 >= DRAIN_MAX_NS) {
            r = CUDA_ERROR_TIMEOUT;
        } else {
            struct timespec ts = {0, (long)us * 1000};
            nanosleep(&ts, NULL);
        }
    }
    d.ev_destroy(ev);
    return r == CUDA_SUCCESS ? d.sync() : r; /* done: what the device's work ended in */
}

/* Every context the connection holds, drained: the state is what the
 * device finished. A primary context reset (and not retained since) has no
 * work, and cannot be made current. */
static CUresult drain_all(void)
{
    CUresult r = CUDA_SUCCESS;
    uint64_t ctx[64], t0 = now_ns();
    size_t n = fgr_contexts(ctx, 64);
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        CUcontext was;
        if ((r = d.push((CUcontext)(uintptr_t)ctx[i])) == CUDA_ERROR_INVALID_CONTEXT) {
            r = CUDA_SUCCESS;
            continue;
        }
        if (r != CUDA_SUCCESS)
            break;
        r = drain((CUcontext)(uintptr_t)ctx[i], t0);
        d.pop(&was);
    }
    return r;
}

static CUresult state_save(unsigned long long *bytes, unsigned int nwhy, char *why)
{
    free(saved.p);
    saved = (struct fgr_buf){0};
    *bytes = 0;
    CUresult r = drain_all();
    if (r != CUDA_SUCCESS) {
        char s[256];
        snprintf(s, sizeof s, "the device's work ended in %s", err_name(r));
        answer_why(nwhy, why, r == CUDA_ERROR_NOT_READY ? FGR_DRAIN_HOSTFN : r == CUDA_ERROR_TIMEOUT ? FGR_DRAIN_SLOW : s);
        return CUDA_SUCCESS;
    }
    const char *no = fgr_journal_save(&saved);
    if (no) {
        free(saved.p);
        saved = (struct fgr_buf){0};
        answer_why(nwhy, why, no);
        return CUDA_SUCCESS;
    }
    *bytes = saved.len;
    return CUDA_SUCCESS;
}

static CUresult state_get(unsigned long long off, unsigned long long n, void *dst)
{
    if (!dst || n > FGR_STATE_PIECE || off > saved.len || n > saved.len - off)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, saved.p + off, n);
    if (off + n == saved.len) { /* read to its end: not kept */
        free(saved.p);
        saved = (struct fgr_buf){0};
    }
    return CUDA_SUCCESS;
}

static CUresult state_put(unsigned long long off, unsigned long long n, const void *src)
{
    if (!src || n > FGR_STATE_PIECE || off != nloading)
        return CUDA_ERROR_INVALID_VALUE;
    if (nloading + n > caploading) {
        uint64_t cap = caploading ? caploading : 1u << 20;
        while (cap < nloading + n)
            cap *= 2;
        uint8_t *p = realloc(loading, cap);
        if (!p)
            return CUDA_ERROR_OUT_OF_MEMORY;
        loading = p;
        caploading = cap;
    }
    memcpy(loading + nloading, src, n);
    nloading += n;
    return CUDA_SUCCESS;
}

/* The old addresses of driver-placed memory the new executor placed
 * elsewhere, reserved here where the driver lets them be: no later
 * allocation takes them, so a client's old address means that memory
 * alone (where one does, own.c refuses the address from then on). */
static void reserve_moved(void)
{
    const uint64_t *m;
    size_t k = fgr_journal_moved(&m);
    if (!k)
        return;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    size_t g = 0;
    if (!d.reserve || !d.addr_free || !d.granularity || d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
        !g || (g & (g - 1)))
        return;
    uint64_t last = 0; /* the end of the last page reserved (the ranges come sorted by old) */
    for (size_t i = 0; i < k; i++) {
        uint64_t lo = m[3 * i] & ~(uint64_t)(g - 1), hi = (m[3 * i] + m[3 * i + 1] + g - 1) & ~(uint64_t)(g - 1);
        if (lo < last)
            lo = last;
        if (lo >= hi)
            continue;
        CUdeviceptr got = 0;
        if (d.reserve(&got, hi - lo, g, lo, 0) != CUDA_SUCCESS)
            continue;
        if (got != lo) { /* elsewhere: of no use */
            d.addr_free(got, hi - lo);
            continue;
        }
        last = hi;
    }
}

/* An event of the state, recorded: it was drained, so complete, where it
 * was saved; times measured across the move count from here. */
static void record_event(uint64_t ev, uint64_t ctx)
{
    CUcontext was;
    if (d.record && d.push((CUcontext)(uintptr_t)ctx) == CUDA_SUCCESS) {
        d.record((CUevent)(uintptr_t)ev, NULL);
        d.pop(&was);
    }
}

static CUresult state_load(unsigned long long total, unsigned int *ok, unsigned int nwhy, char *why)
{
    *ok = 0;
    char buf[512];
    const char *no = total != nloading ? "the state's bytes did not all arrive"
                                       : fgr_journal_load(loading, nloading, replay, err_name, buf, sizeof buf);
    if (!no) {
        reserve_moved();
        fgr_each(FGR_H_CUevent, record_event);
    }
    free(loading);
    loading = NULL;
    nloading = caploading = 0;
    if (no) {
        fgr_logf("cannot take a moved program's state: %s", no);
        answer_why(nwhy, why, no);
    } else {
        *ok = 1;
    }
    return CUDA_SUCCESS;
}

int fgr_some_context(void)
{
    CUcontext c = NULL;
    uint64_t any = 0;
    d.getcur(&c);
    return !c && fgr_contexts(&any, 1) && d.push((CUcontext)(uintptr_t)any) == CUDA_SUCCESS;
}

void fgr_context_done(int pushed)
{
    CUcontext was;
    if (pushed)
        d.pop(&was);
}

static CUresult copy(CUdeviceptr p, size_t n, void *to, const void *from)
{
    if (n > FGR_STATE_PIECE || !fgr_mem_in(p, n) || (!to && !from))
        return CUDA_ERROR_INVALID_VALUE;
    int pushed = fgr_some_context();
    CUresult r = to ? d.dtoh(to, p, n) : d.htod(p, from, n);
    fgr_context_done(pushed);
    return r;
}

/* The pages a token of another executor of this host names, mapped here
 * for as long as the copy into dst takes (n 0: only whether they can be
 * reached from here). Pages this executor cannot take (another host's, or
 * a GPU it does not see, as a server's --gpus leaves it) are not found:
 * the client then copies them itself. */
static CUresult state_pull(const void *token, CUdeviceptr dst, size_t n)
{
    uint64_t size, off, len;
    CUmemGenericAllocationHandle h;
    if (token && !n) {
        int fd = fgr_ipc_fetch(token, &size, &off, &len);
        if (fd < 0)
            return CUDA_ERROR_NOT_FOUND;
        /* Refused for a GPU not seen here; any other answer (this
         * executor holds no context yet) leaves the pull to find out. */
        CUresult r = d.import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        if (r == CUDA_ERROR_INVALID_DEVICE)
            return CUDA_ERROR_NOT_FOUND;
        if (r == CUDA_SUCCESS)
            d.release(h);
        return CUDA_SUCCESS;
    }
    dst = fgr_moved(dst);
    if (!token || !n || !fgr_mem_in(dst, n))
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fgr_ipc_fetch(token, &size, &off, &len);
    if (fd < 0)
        return CUDA_ERROR_NOT_FOUND; /* another host's, or gone */
    if (len != n) {
        close(fd);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = d.import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    int pushed = fgr_some_context();
    CUdeviceptr va = 0;
    CUdevice dev = 0;
    if ((r = d.reserve(&va, size, 0, 0, 0)) == CUDA_SUCCESS) {
        if ((r = d.map(va, size, 0, h, 0)) == CUDA_SUCCESS) {
            CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
            if ((r = d.ctx_device(&dev)) == CUDA_SUCCESS) {
                a.location.id = dev;
                if (d.access(va, size, &a, 1) != CUDA_SUCCESS)
                    r = CUDA_ERROR_NOT_FOUND; /* another GPU's, without peer access */
            }
            if (r == CUDA_SUCCESS && (r = d.dtod(dst, va + off, n)) == CUDA_SUCCESS)
                r = d.sync(); /* done before the pages go */
            d.unmap(va, size);
        }
        d.addr_free(va, size);
    }
    d.release(h);
    fgr_context_done(pushed);
    return r;
}

/* The client's old address of driver-placed memory now here (a replay on
 * a failover server): only memory of the connection's, only an address
 * that names nothing of it (one aliased already arrives translated to its
 * memory, and is refused so). */
static CUresult state_alias(CUdeviceptr old, size_t n, CUdeviceptr now)
{
    if (!n) /* the whole allocation at now */
        n = fgr_mem_size(now);
    if (!n || !fgr_mem_in(now, n) || fgr_mem_in(old, n) || old + n < old)
        return CUDA_ERROR_INVALID_VALUE;
    if (fgr_moved_add(old, n, now) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fgr_moved_settle();
    return CUDA_SUCCESS;
}

static CUresult state_mark(unsigned long long *generation)
{
    CUresult r = drain_all();
    *generation = fgr_generation;
    return r;
}

/* The state's addresses are the program's: translated where the driver
 * placed its memory elsewhere here. */
static CUresult state_read(CUdeviceptr p, size_t n, void *dst) { return copy(fgr_moved(p), n, dst, NULL); }
static CUresult state_write(CUdeviceptr p, size_t n, const void *src) { return copy(fgr_moved(p), n, NULL, src); }

static CUresult state_done(unsigned int moved, unsigned int ms, const char *note)
{
    char line[1200];
    int n = moved ? snprintf(line, sizeof line, "moved %s %u\n", note ? note : "", ms)
                  : snprintf(line, sizeof line, "stayed %s\n", note && *note ? note : "(no reason given)");
    if (n > (int)sizeof line - 1)
        line[(n = (int)sizeof line - 1) - 1] = '\n';
    for (char *c = line; c < line + n - 1; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' '; /* one line, whatever the client wrote */
    fgr_logf("%s", moved ? "the program moved to another server" : "the program stays");
    if (control >= 0 && write(control, line, (size_t)n) != n)
        fgr_logf("cannot tell the server how the move ended: %s", strerror(errno));
    return CUDA_SUCCESS;
}

void fgr_move_init(void *driver, int control_fd, CUresult (*replay_fn)(const uint8_t *, uint32_t))
{
    *(void **)&d.sync = dlsym(driver, "cuCtxSynchronize");
    *(void **)&d.push = dlsym(driver, "cuCtxPushCurrent_v2");
    *(void **)&d.pop = dlsym(driver, "cuCtxPopCurrent_v2");
    *(void **)&d.getcur = dlsym(driver, "cuCtxGetCurrent");
    *(void **)&d.dtoh = dlsym(driver, "cuMemcpyDtoH_v2");
    *(void **)&d.htod = dlsym(driver, "cuMemcpyHtoD_v2");
    *(void **)&d.err_name = dlsym(driver, "cuGetErrorName");
    *(void **)&d.reserve = dlsym(driver, "cuMemAddressReserve");
    *(void **)&d.addr_free = dlsym(driver, "cuMemAddressFree");
    *(void **)&d.granularity = dlsym(driver, "cuMemGetAllocationGranularity");
    *(void **)&d.import_fd = dlsym(driver, "cuMemImportFromShareableHandle");
    *(void **)&d.map = dlsym(driver, "cuMemMap");
    *(void **)&d.unmap = dlsym(driver, "cuMemUnmap");
    *(void **)&d.access = dlsym(driver, "cuMemSetAccess");
    *(void **)&d.release = dlsym(driver, "cuMemRelease");
    *(void **)&d.ctx_device = dlsym(driver, "cuCtxGetDevice");
    *(void **)&d.dtod = dlsym(driver, "cuMemcpyDtoD_v2");
    *(void **)&d.record = dlsym(driver, "cuEventRecord");
    *(void **)&d.ev_create = dlsym(driver, "cuEventCreate");
    *(void **)&d.ev_query = dlsym(driver, "cuEventQuery");
    *(void **)&d.ev_destroy = dlsym(driver, "cuEventDestroy_v2");
    if (d.ev_create && d.ev_query && d.ev_destroy)
        *(void **)&d.ctx_record = dlsym(driver, "cuCtxRecordEvent");
    replay = replay_fn;
    fgr_ahead_init(driver);
    if (!d.sync || !d.push || !d.pop || !d.getcur || !d.dtoh || !d.htod)
        return; /* the operations stay unsupported */
    fgr_real[FGR_OP_fgrStateSave] = (void *)state_save;
    fgr_real[FGR_OP_fgrStateGet] = (void *)state_get;
    fgr_real[FGR_OP_fgrStatePut] = (void *)state_put;
    fgr_real[FGR_OP_fgrStateLoad] = (void *)state_load;
    fgr_real[FGR_OP_fgrStateRead] = (void *)state_read;
    fgr_real[FGR_OP_fgrStateWrite] = (void *)state_write;
    fgr_real[FGR_OP_fgrStateDone] = (void *)state_done;
    fgr_real[FGR_OP_fgrStateAlias] = (void *)state_alias;
    fgr_real[FGR_OP_fgrStateMark] = (void *)state_mark;
    /* Device to device on one host, where IPC between executors works. */
    if (fgr_real[FGR_OP_fgrIpcExport] && d.reserve && d.addr_free && d.import_fd && d.map && d.unmap && d.access &&
        d.release && d.ctx_device && d.dtod) {
        fgr_real[FGR_OP_fgrStateShare] = (void *)fgr_ipc_share;
        fgr_real[FGR_OP_fgrStatePull] = (void *)state_pull;
    }
    if (control_fd < 0)
        return;
    control = control_fd;
    fcntl(control, F_SETFD, FD_CLOEXEC);
    fcntl(control, F_SETFL, fcntl(control, F_GETFL) | O_NONBLOCK);
    struct sigaction sa = {0};
    sa.sa_handler = on_ring;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    /* Until now SIGUSR2 would end this process: the server signals only
     * once told. */
    static const char ready[] = "ready\n";
    if (write(control, ready, sizeof ready - 1) != (ssize_t)sizeof ready - 1)
        fgr_logf("cannot tell the server this executor takes moves: %s", strerror(errno));
}
