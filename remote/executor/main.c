/* flexgv-executor --fd N [--driver PATH] [--peer NAME] [--module-cache DIR] [--module-cache-max BYTES] [--pinned-max BYTES] [--hostfn-fd N] [--control-fd N]
 * Serves one client connection (inherited as descriptor N) with the real
 * driver: the handshake, then one call per frame until the client goes.
 * A malformed frame ends the connection with a log line saying why; the
 * process then exits, and the driver frees what the client held. */
#include "executor.h"
#include "../ring.h"
#include "flexgv/cuda_util.h"

#include <nvml.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* How long a new connection has to send its handshake. */
#define HELLO_TIMEOUT_S 10
/* A frame buffer up to this large is kept from one request to the next
 * (a large copy comes in pieces of 4 MiB by default). */
#define KEEP_FRAME (16u << 20)
static struct {
    CUresult (*init)(unsigned);
    CUresult (*version)(int *);
    CUresult (*count)(int *);
    CUresult (*name)(char *, int, CUdevice);
    CUresult (*uuid)(CUuuid *, CUdevice);
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
    CUresult (*errname)(CUresult, const char **);
    CUresult (*errstr)(CUresult, const char **);
    CUresult (*getcur)(CUcontext *);
    CUresult (*setcur)(CUcontext);
    CUresult (*export_table)(const void **, const CUuuid *);
} drv;

/* Ends the connection because of what the client sent. */
__attribute__((noreturn)) static void reject(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fgr_logf("closing the connection: %s", msg);
    exit(3);
}

/* The connection: the socket, or after an shm handshake the rings. */
static int conn_fd = -1;
static struct fgr_ring ring;

static int conn_read(void *p, size_t n) { return ring.m ? fgr_ring_read(&ring, p, n) : fgr_read_all(conn_fd, p, n); }

static int conn_write(const void *p, size_t n) { return ring.m ? fgr_ring_write(&ring, p, n) : fgr_write_all(conn_fd, p, n); }

static struct fgr_buf reply; /* the answer being written */
/* How long a parked call spins on its ticket before a helper thread waits. */
#define WAIT_SPIN_NS 50000L

/* ---- the handshake ---- */

static const int result_codes[] = {
#define X(name, value) value,
#include "flexgv/cuda_results.def"
#undef X
};

static void refuse(struct fgr_buf *w, CUresult r, const char *msg)
{
    w->len = 0;
    fgr_put_u32(w, 0);
    fgr_put_u32(w, (uint32_t)r);
    fgr_put_str(w, msg);
}

/* Writes the handshake's answer into w; nonzero when the client is refused.
 * *transport is what the client asks to talk over next (FGR_TRANSPORT_*). */
static int hello(struct fgr_rd *rd, struct fgr_buf *w, uint32_t *transport)
{
    uint32_t magic = fgr_get_u32(rd), proto = fgr_get_u32(rd);
    uint64_t hash = fgr_get_u64(rd);
    uint32_t ptr = fgr_get_u32(rd);
    *transport = fgr_get_u32(rd);
    if (!fgr_rd_done(rd) || magic != FGR_MAGIC || *transport > FGR_TRANSPORT_SHM)
        reject("the first frame is not a FlexGV handshake");
    char msg[200];
    if (proto != FGR_PROTO_VERSION || hash != FGR_OPS_HASH || ptr != sizeof(void *)) {
        snprintf(msg, sizeof msg,
                 "client protocol %u (operations %016llx, %u-byte pointers), server protocol %u (operations %016llx, "
                 "%zu-byte pointers): use a client and server of the same FlexGV build",
                 proto, (unsigned long long)hash, ptr, FGR_PROTO_VERSION, (unsigned long long)FGR_OPS_HASH,
                 sizeof(void *));
        fgr_logf("refusing the client: %s", msg);
        refuse(w, CUDA_ERROR_NOT_SUPPORTED, msg);
        return 1;
    }
    CUresult r = drv.init ? drv.init(0) : CUDA_ERROR_NOT_SUPPORTED;
    int version = 0, ndev = 0;
    if (r == CUDA_SUCCESS)
        r = drv.version(&version);
    if (r == CUDA_SUCCESS)
        r = drv.count(&ndev);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, sizeof msg, "the server's driver does not start: error %d", (int)r);
        fgr_logf("%s", msg);
        refuse(w, r, msg);
        return 1;
    }
    fgr_put_u32(w, CUDA_SUCCESS);
    fgr_put_u32(w, FGR_PROTO_VERSION);
    fgr_put_u32(w, (uint32_t)version);
    fgr_put_u32(w, (uint32_t)ndev);
    for (int d = 0; d < ndev; d++) {
        char name[256] = "";
        CUuuid u;
        memset(&u, 0, sizeof u);
        drv.name(name, sizeof name, d);
        drv.uuid(&u, d);
        fgr_put_str(w, name);
        fgr_put_bytes(w, &u, sizeof u);
        for (int a = 1; a < FGR_NATTR; a++) {
            int v = 0;
            CUresult ar = drv.attr(&v, (CUdevice_attribute)a, d);
            fgr_put_u32(w, (uint32_t)ar);
            fgr_put_u32(w, (uint32_t)v);
        }
    }
    int n = (int)(sizeof result_codes / sizeof result_codes[0]);
    fgr_put_u32(w, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const char *nm = NULL, *ds = NULL;
        if (drv.errname)
            drv.errname((CUresult)result_codes[i], &nm);
        if (drv.errstr)
            drv.errstr((CUresult)result_codes[i], &ds);
        fgr_put_u32(w, (uint32_t)result_codes[i]);
        fgr_put_str(w, nm);
        fgr_put_str(w, ds);
    }
    fgr_images_hello(w);
    fgr_hostfn_hello(w, *transport);
    return 0;
}

/* ---- NVML, for the client's libnvidia-ml.so.1 ---- */

/* The server's NVML, loaded when first asked (NULL without one). */
struct server_nvml {
    nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*version)(char *, unsigned int);
    nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
    nvmlReturn_t (*mem_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*p2p)(nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t *);
    /* the readings of fgrNvmlReading, by FGR_NVML_*, of the three forms
     * readings[] names */
    union {
        nvmlReturn_t (*with)(nvmlDevice_t, unsigned int, unsigned int *);
        nvmlReturn_t (*plain)(nvmlDevice_t, unsigned int *);
        nvmlReturn_t (*pair)(nvmlDevice_t, unsigned int *, unsigned int *);
    } reading[FGR_NVML_READINGS];
};

/* Each reading's NVML function, and whether it takes an argument
 * (ARG_IN) or gives two values, the argument picking one (ARG_PICKS). */
enum { ARG_NONE, ARG_IN, ARG_PICKS };
static const struct {
    const char *name;
    int arg;
} readings[FGR_NVML_READINGS] = {
    [FGR_NVML_TEMPERATURE] = {"nvmlDeviceGetTemperature", ARG_IN},
    [FGR_NVML_POWER] = {"nvmlDeviceGetPowerUsage", ARG_NONE},
    [FGR_NVML_POWER_LIMIT] = {"nvmlDeviceGetEnforcedPowerLimit", ARG_NONE},
    [FGR_NVML_CLOCK] = {"nvmlDeviceGetClockInfo", ARG_IN},
    [FGR_NVML_MAX_CLOCK] = {"nvmlDeviceGetMaxClockInfo", ARG_IN},
    [FGR_NVML_FAN] = {"nvmlDeviceGetFanSpeed", ARG_NONE},
    /* enums, each an int's size */
    [FGR_NVML_PSTATE] = {"nvmlDeviceGetPerformanceState", ARG_NONE},
    [FGR_NVML_POWER_MGMT] = {"nvmlDeviceGetPowerManagementLimit", ARG_NONE},
    [FGR_NVML_PERSISTENCE] = {"nvmlDeviceGetPersistenceMode", ARG_NONE},
    [FGR_NVML_COMPUTE_MODE] = {"nvmlDeviceGetComputeMode", ARG_NONE},
    [FGR_NVML_MIG_MODE] = {"nvmlDeviceGetMigMode", ARG_PICKS},
};

static const struct server_nvml *server_nvml(void)
{
    static int state; /* 0: not loaded yet, 1: ready, -1: none */
    static struct server_nvml nv;
    if (state == 0) {
        void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        nvmlReturn_t (*init)(void) = h ? (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2") : NULL;
        *(void **)&nv.by_uuid = h ? dlsym(h, "nvmlDeviceGetHandleByUUID") : NULL;
        *(void **)&nv.util = h ? dlsym(h, "nvmlDeviceGetUtilizationRates") : NULL;
        *(void **)&nv.version = h ? dlsym(h, "nvmlSystemGetDriverVersion") : NULL;
        *(void **)&nv.procs = h ? dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3") : NULL;
        *(void **)&nv.p2p = h ? dlsym(h, "nvmlDeviceGetP2PStatus") : NULL;
        *(void **)&nv.mem_v2 = h ? dlsym(h, "nvmlDeviceGetMemoryInfo_v2") : NULL;
        *(void **)&nv.mem = h ? dlsym(h, "nvmlDeviceGetMemoryInfo") : NULL;
        for (int i = 0; i < FGR_NVML_READINGS; i++)
            *(void **)&nv.reading[i] = h ? dlsym(h, readings[i].name) : NULL;
        state = init && nv.by_uuid && nv.util && nv.version && init() == NVML_SUCCESS ? 1 : -1;
        if (state < 0)
            fgr_logf("no NVML here (%s): utilization and the driver's version are not answered",
                     h ? "it does not start" : dlerror());
    }
    return state > 0 ? &nv : NULL;
}

static CUresult from_nvml(nvmlReturn_t r)
{
    if (r == NVML_SUCCESS)
        return CUDA_SUCCESS;
    return r == NVML_ERROR_NOT_SUPPORTED ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_UNKNOWN;
}

/* The server's NVML handle of a CUDA device, by its UUID. */
static CUresult nvml_device(const struct server_nvml *nv, CUdevice dev, nvmlDevice_t *d)
{
    CUuuid u;
    CUresult r = drv.uuid(&u, dev);
    if (r != CUDA_SUCCESS)
        return r;
    char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    fg_uuid_text(&u, text, sizeof text);
    return from_nvml(nv->by_uuid(text, d));
}

/* A device's utilization: over the whole GPU, as NVML measures it, the
 * tenant's work and others'. */
static CUresult nvml_utilization(CUdevice dev, unsigned int *gpu, unsigned int *memory)
{
    const struct server_nvml *nv = server_nvml();
    if (!gpu || !memory)
        return CUDA_ERROR_INVALID_VALUE;
    if (!nv)
        return CUDA_ERROR_NOT_SUPPORTED;
    nvmlDevice_t d;
    nvmlUtilization_t v;
    CUresult r = nvml_device(nv, dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    nvmlReturn_t nr = nv->util(d, &v);
    if (nr != NVML_SUCCESS)
        return from_nvml(nr);
    *gpu = v.gpu;
    *memory = v.memory;
    return CUDA_SUCCESS;
}

/* What this process (the client's executor) holds on a device, as NVML
 * lists it; CUDA_ERROR_NOT_FOUND where it is not listed. */
static CUresult nvml_own_memory(CUdevice dev, size_t *used)
{
    const struct server_nvml *nv = server_nvml();
    if (!used)
        return CUDA_ERROR_INVALID_VALUE;
    if (!nv || !nv->procs)
        return CUDA_ERROR_NOT_SUPPORTED;
    nvmlDevice_t d;
    CUresult r = nvml_device(nv, dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned n = 0;
    nvmlReturn_t nr = nv->procs(d, &n, NULL);
    nvmlProcessInfo_t *all = n ? calloc(n + 16, sizeof *all) : NULL;
    if (nr == NVML_ERROR_INSUFFICIENT_SIZE && !all)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (nr == NVML_ERROR_INSUFFICIENT_SIZE) {
        n += 16;
        nr = nv->procs(d, &n, all);
    }
    r = nr == NVML_SUCCESS ? CUDA_ERROR_NOT_FOUND : from_nvml(nr);
    for (unsigned i = 0; all && nr == NVML_SUCCESS && i < n; i++)
        if (all[i].pid == (unsigned)getpid()) {
            *used = (size_t)all[i].usedGpuMemory;
            r = CUDA_SUCCESS;
        }
    free(all);
    return r;
}

/* A device's memory, as NVML says it to this process: under the shim, its
 * tenant's view. The first version's used holds what _v2 calls reserved. */
static CUresult nvml_memory(CUdevice dev, size_t *total, size_t *reserved, size_t *used)
{
    const struct server_nvml *nv = server_nvml();
    if (!total || !reserved || !used)
        return CUDA_ERROR_INVALID_VALUE;
    if (!nv || (!nv->mem_v2 && !nv->mem))
        return CUDA_ERROR_NOT_SUPPORTED;
    nvmlDevice_t d;
    CUresult r = nvml_device(nv, dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    nvmlMemory_v2_t v2 = {.version = nvmlMemory_v2};
    nvmlMemory_t v1;
    nvmlReturn_t nr = nv->mem_v2 ? nv->mem_v2(d, &v2) : NVML_ERROR_FUNCTION_NOT_FOUND;
    if (nr == NVML_SUCCESS) {
        *total = v2.total, *reserved = v2.reserved, *used = v2.used;
        return CUDA_SUCCESS;
    }
    if (!nv->mem || (nr = nv->mem(d, &v1)) != NVML_SUCCESS)
        return from_nvml(nr);
    *total = v1.total, *reserved = 0, *used = v1.used;
    return CUDA_SUCCESS;
}

/* The server's NVML's answer for two devices and a capability index. */
static CUresult nvml_p2p(CUdevice dev1, CUdevice dev2, unsigned int index, unsigned int *status)
{
    const struct server_nvml *nv = server_nvml();
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    if (!nv || !nv->p2p)
        return CUDA_ERROR_NOT_SUPPORTED;
    nvmlDevice_t a, b;
    CUresult r = nvml_device(nv, dev1, &a);
    if (r == CUDA_SUCCESS)
        r = nvml_device(nv, dev2, &b);
    if (r != CUDA_SUCCESS)
        return r;
    nvmlGpuP2PStatus_t st;
    nvmlReturn_t nr = nv->p2p(a, b, (nvmlGpuP2PCapsIndex_t)index, &st);
    if (nr == NVML_ERROR_INVALID_ARGUMENT)
        return CUDA_ERROR_INVALID_VALUE;
    if (nr == NVML_SUCCESS)
        *status = (unsigned)st;
    return from_nvml(nr);
}

/* A reading of the server's NVML (FGR_NVML_*), as monitors ask it. */
static CUresult nvml_reading(CUdevice dev, unsigned int what, unsigned int arg, unsigned int *value)
{
    const struct server_nvml *nv = server_nvml();
    if (!value || what >= FGR_NVML_READINGS)
        return CUDA_ERROR_INVALID_VALUE;
    if (!nv || !nv->reading[what].plain)
        return CUDA_ERROR_NOT_SUPPORTED;
    nvmlDevice_t d;
    CUresult r = nvml_device(nv, dev, &d);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned int v = 0, two[2] = {0, 0};
    if (readings[what].arg == ARG_PICKS && arg > 1)
        return CUDA_ERROR_INVALID_VALUE;
    nvmlReturn_t nr = readings[what].arg == ARG_IN  ? nv->reading[what].with(d, arg, &v)
                      : readings[what].arg == ARG_NONE ? nv->reading[what].plain(d, &v)
                                                     : nv->reading[what].pair(d, &two[0], &two[1]);
    if (readings[what].arg == ARG_PICKS)
        v = two[arg];
    if (nr == NVML_ERROR_INVALID_ARGUMENT)
        return CUDA_ERROR_INVALID_VALUE;
    if (nr == NVML_SUCCESS)
        *value = v;
    return from_nvml(nr);
}

/* A context the driver makes is pushed onto the making thread's stack. The
 * executor makes each request's context current itself, so the new one is
 * popped again: else every cuCtxCreate would leave that stack one deeper
 * (the program's own stack is the client's). */
static CUresult (*real_ctx_pop)(CUcontext *);
static CUresult popped(CUresult r)
{
    CUcontext top;
    if (r == CUDA_SUCCESS)
        real_ctx_pop(&top);
    return r;
}
static CUresult (*real_ctx_create_v2)(CUcontext *, unsigned int, CUdevice);
static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return popped(real_ctx_create_v2(pctx, flags, dev));
}

/* cuCtxCreate_v4 with the execution affinities the client carried (its
 * CUDA-in-graphics parameters are refused on the client). */
static CUresult (*real_ctx_create_v4)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
static CUresult ctx_create_affinity(CUcontext *pctx, const CUexecAffinityParam *affinity, int numAffinity,
                                    unsigned int flags, CUdevice dev)
{
    if (!affinity && numAffinity <= 0)
        return popped(real_ctx_create_v4(pctx, NULL, flags, dev));
    CUctxCreateParams p = {(CUexecAffinityParam *)affinity, numAffinity, NULL};
    return popped(real_ctx_create_v4(pctx, &p, flags, dev));
}

/* cuOccupancyMaxPotentialBlockSizeWithFlags with the program's dynamic
 * shared memory sizes, smem[b - 1] for block size b, computed on the
 * client: the driver's callback reads them (one request at a time per
 * thread). */
static CUresult (*real_potential)(int *, int *, CUfunction, CUoccupancyB2DSize, size_t, int, unsigned int);
static __thread const size_t *occ_sizes;
static __thread unsigned int occ_nsizes;
static size_t occ_size(int blockSize)
{
    return blockSize > 0 && (unsigned)blockSize <= occ_nsizes ? occ_sizes[blockSize - 1] : 0;
}
static CUresult occupancy_block_size(int *minGridSize, int *blockSize, CUfunction func, const size_t *smem,
                                     unsigned int nsmem, size_t dynamicSMemSize, int blockSizeLimit,
                                     unsigned int flags)
{
    if (nsmem > FGR_OCC_SIZES || (nsmem && !smem))
        return CUDA_ERROR_INVALID_VALUE;
    occ_sizes = smem;
    occ_nsizes = nsmem;
    CUresult r = real_potential(minGridSize, blockSize, func, nsmem ? occ_size : NULL, dynamicSMemSize,
                                blockSizeLimit, flags);
    occ_sizes = NULL;
    occ_nsizes = 0;
    return r;
}

/* The kernel driver's version ("580.95.05"): libraries parse it. */
static CUresult nvml_driver_version(char *version, unsigned int length)
{
    const struct server_nvml *nv = server_nvml();
    if (!version || !length)
        return CUDA_ERROR_INVALID_VALUE;
    if (length > 256)
        length = 256; /* the room api/remote.api gives it */
    return nv ? from_nvml(nv->version(version, length)) : CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- the loop ---- */

static CUresult make_current(CUcontext want)
{
    CUcontext cur = NULL;
    if (drv.getcur(&cur) == CUDA_SUCCESS && cur == want)
        return CUDA_SUCCESS;
    return drv.setcur(want);
}

/* The handshake's frame: answered, and for shm:// the rings taken. */
static void greet(int fd, uint8_t *body, uint32_t n)
{
    struct fgr_rd rd = {body, n, 0};
    unsigned op = fgr_get_u16(&rd), flags = fgr_get_u16(&rd), reserved = fgr_get_u32(&rd);
    fgr_get_u64(&rd);
    if (flags || reserved)
        reject("unknown header flags %#x %#x", flags, reserved);
    if (op != FGR_OP_HELLO)
        reject("the first frame is operation %u, not the handshake", op);
    struct fgr_buf w = {0};
    fgr_put_u32(&w, 0);
    uint32_t transport;
    int refused = hello(&rd, &w, &transport);
    if (w.oom)
        reject("no memory for the handshake's answer");
    fgr_finish_frame(&w);
    int failed = fgr_write_all(fd, w.p, w.len);
    free(w.p);
    if (failed || refused)
        exit(refused ? 3 : 0);
    struct timeval forever = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &forever, sizeof forever);
    if (transport == FGR_TRANSPORT_SHM) {
        /* The rings come next, over the socket (a unix one). */
        int mfd = fgr_recv_fd(fd);
        if (mfd < 0)
            reject("no shared memory after an shm handshake: %s", strerror(errno));
        int bad = fgr_ring_attach(&ring, fd, mfd);
        int e = errno;
        close(mfd);
        if (bad)
            reject("the shared memory is not two rings of ours (%s)", strerror(e));
        fgr_stage_attach(&ring);
        fgr_hostfn_attach(&ring);
        /* Then the pinned heap. */
        uint8_t *heap;
        if ((mfd = fgr_recv_fd(fd)) < 0)
            reject("no pinned heap after the rings: %s", strerror(errno));
        uint64_t want = __atomic_load_n(&ring.m->heap_base, __ATOMIC_ACQUIRE);
        bad = fgr_heap_map(mfd, want, &heap);
        e = errno;
        close(mfd);
        if (bad && e == EPROTO)
            reject("the pinned heap is not one of ours (%s)", strerror(e));
        if (bad) /* an address-space limit here, say: the connection goes on without it */
            fgr_logf("cannot map the pinned heap (%s): the client's pinned memory is copied as pageable memory is",
                     strerror(e));
        fgr_heap_attach(bad ? NULL : heap, want);
    }
}

static void send_reply(struct fgr_buf *w)
{
    fgr_move_poll(conn_write);
    fgr_output_send(conn_write);
    if (fgr_buf_write(w, conn_write)) {
        if (errno)
            reject("answering: %s", strerror(errno));
        exit(0);
    }
}

/* The request parked on a ticket (wait.c): its frame, kept to be served
 * again when the ticket ends. */
static struct {
    uint8_t *body;
    uint32_t n;
    int slot;   /* its ticket, or FGR_PARKED_ANY for fgrWaitTickets */
    int beside; /* another request was served while it was parked */
} parked;
static int answer_now; /* serve the next frame without parking it */

static void serve_frame(uint8_t *body, uint32_t n, int resume);

/* Answers the parked request now: "pending" with its ticket, or for
 * fgrWaitTickets the tickets that ended (maybe none). */
static void answer_parked(void)
{
    uint8_t *b = parked.body;
    uint32_t n = parked.n;
    int slot = parked.slot;
    parked.body = NULL;
    if (slot == FGR_PARKED_ANY) {
        answer_now = 1;
        serve_frame(b, n, -1);
    } else {
        /* Someone must wait for it now: the client asks when it ended. */
        if (!fgr_ticket_poll(slot) && fgr_ticket_help(slot) != 0)
            fgr_ticket_block(slot);
        struct fgr_buf w = {0};
        fgr_put_u32(&w, 0);
        fgr_put_u32(&w, FGR_PENDING);
        fgr_put_u32(&w, fgr_ticket_id(slot));
        fgr_put_u8(&w, (uint8_t)fgr_ticket_after(slot));
        if (w.oom)
            reject("no memory for an answer");
        fgr_finish_frame(&w);
        send_reply(&w);
        free(w.p);
    }
    free(b);
}

/* Whether the connection has bytes to read, now. */
static int input_ready(void)
{
    if (ring.m)
        return fgr_ring_readable(&ring);
    struct pollfd p = {.fd = conn_fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* Waits, with a request parked, until input arrives (1: read it) or a
 * ticket ended (0: the parked request was served or answered). Spins a
 * little first: most waits are short, and a helper thread costs more. */
static int wait_parked(void)
{
    int slot = parked.slot, helped = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (slot >= 0 && fgr_ticket_poll(slot)) {
            uint8_t *b = parked.body;
            parked.body = NULL;
            serve_frame(b, parked.n, slot);
            free(b);
            return 0;
        }
        if (fgr_tickets_done_besides(slot)) {
            answer_parked(); /* the client collects them with fgrWaitTickets */
            return 0;
        }
        if (input_ready())
            return 1;
        if (!helped) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            long ns = (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec);
            if (slot >= 0 && fgr_ticket_can_poll(slot) && ns < WAIT_SPIN_NS)
                continue;
            helped = 1;
            if (slot >= 0 && fgr_ticket_help(slot) != 0) {
                fgr_ticket_block(slot);
                continue;
            }
        }
        /* Sleep until the connection or a helper rings. */
        if (ring.m) {
            if (fgr_ring_sleep_or(&ring, fgr_wait_bell()) != 0)
                return 1; /* the read finds the client gone */
        } else {
            struct pollfd p[2] = {{.fd = conn_fd, .events = POLLIN}, {.fd = fgr_wait_bell(), .events = POLLIN}};
            poll(p, 2, -1);
        }
        fgr_bell_drain();
    }
}

static CUresult replay(const uint8_t *frame, uint32_t n)
{
    return fgr_replay(frame, n, make_current);
}

/* Serves one request frame (resume: the ticket it was parked on, or -1). */
static void serve_frame(uint8_t *body, uint32_t n, int resume)
{
    struct fgr_rd rd = {body, n, 0};
    unsigned op = fgr_get_u16(&rd), flags = fgr_get_u16(&rd);
    uint32_t thread = fgr_get_u32(&rd);
    uint64_t ctx_name = fgr_get_u64(&rd);
    CUcontext ctx = (CUcontext)(uintptr_t)fgr_in(FGR_H_CUcontext, ctx_name);
    if (flags & ~(FGR_FLAG_QUEUED | FGR_FLAG_MAY_PEND | FGR_FLAG_WAIT_ONLY))
        reject("unknown header flags %#x", flags);
    if ((flags & FGR_FLAG_WAIT_ONLY) && (flags & (FGR_FLAG_QUEUED | FGR_FLAG_MAY_PEND)) != FGR_FLAG_MAY_PEND)
        reject("a wait-only request that may not pend (flags %#x)", flags);
    if (op == FGR_OP_HELLO || op >= FGR_NUM_OPS)
        reject("unknown operation %u", op);
    if (op == FGR_OP_fgrNudge && !(flags & FGR_FLAG_QUEUED))
        reject("fgrNudge is not queued");
    if (parked.body && (op == FGR_OP_fgrNudge || !(flags & FGR_FLAG_QUEUED)))
        answer_parked(); /* another thread needs an answer */
    if (parked.body)
        parked.beside = 1;
    if (op == FGR_OP_fgrNudge)
        return;
    /* The context named must be one this connection was given. */
    CUresult r = CUDA_SUCCESS;
    if (!fgr_has(FGR_H_CUcontext, (uint64_t)(uintptr_t)ctx))
        r = fgr_refuse(fgr_ops[op].name, "context", ctx_name, CUDA_ERROR_INVALID_CONTEXT);
    else if (fgr_real[op])
        r = make_current(ctx);
    fgr_ctx = (uint64_t)(uintptr_t)ctx;
    fgr_current_op = op;
    fgr_thread = thread;
    fgr_may_pend = (flags & FGR_FLAG_MAY_PEND) && !(flags & FGR_FLAG_QUEUED) && !answer_now;
    fgr_wait_only = (flags & FGR_FLAG_WAIT_ONLY) != 0;
    /* Made where it came among the requests, or not at all. */
    fgr_wait_then_make = fgr_wait_only && !(resume >= 0 && parked.beside);
    fgr_resume = resume;
    fgr_parked = -1;
    fgr_journal_begin(body, n, op);
    const char *bad = fgr_serve(op, &rd, &reply, r);
    fgr_journal_end(bad ? CUDA_ERROR_INVALID_VALUE : fgr_reply_result(&reply));
    fgr_may_pend = fgr_wait_only = fgr_wait_then_make = answer_now = 0;
    if (fgr_resume >= 0) /* refused before its wait: the ticket is spent */
        fgr_ticket_release(fgr_resume);
    fgr_resume = -1;
    if (bad)
        reject("%s (%s, %u bytes)", bad, fgr_ops[op].name, n);
    r = fgr_reply_result(&reply);
    if (r == FGR_WAITING) {
        /* Kept, to be served again when its ticket ends. */
        parked.body = malloc(n);
        if (!parked.body)
            reject("no memory to keep a waiting call");
        memcpy(parked.body, body, n);
        parked.n = n;
        parked.slot = fgr_parked;
        parked.beside = 0;
        return;
    }
    if (flags & FGR_FLAG_QUEUED) {
        /* No answer: the first error waits for the thread's next syncpoint. */
        fgr_defer(thread, r);
        return;
    }
    /* (a call not made takes no error: the call itself will) */
    CUresult d = fgr_ops[op].syncpoint && r != (CUresult)FGR_NOT_MADE ? fgr_deferred_take(thread) : CUDA_SUCCESS;
    if (d != CUDA_SUCCESS)
        for (int i = 0; i < 4; i++)
            reply.p[4 + i] = (uint8_t)((uint32_t)d >> (8 * i));
    send_reply(&reply);
}

/* Processes (the driver's threads count) and files an executor may have;
 * processes count per user, for all executors of a server's user. */
#define MAX_PROCS 4096
#define MAX_FILES 4096

static void lower(int resource, rlim_t to)
{
    struct rlimit l;
    if (getrlimit(resource, &l) != 0)
        return;
    if (l.rlim_max > to)
        l.rlim_max = to;
    if (l.rlim_cur > l.rlim_max)
        l.rlim_cur = l.rlim_max;
    if (setrlimit(resource, &l) != 0)
        fgr_logf("cannot lower a resource limit (%d): %s", resource, strerror(errno));
}

static void usage(void)
{
    fprintf(stderr, "usage: flexgv-executor --fd N [--driver PATH] [--peer NAME] [--module-cache DIR] [--module-cache-max BYTES] [--pinned-max BYTES] [--hostfn-fd N] [--control-fd N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int fd = -1, hostfn_fd = -1, control_fd = -1;
    const char *driver = "libcuda.so.1";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fd") && i + 1 < argc)
            fd = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--driver") && i + 1 < argc)
            driver = argv[++i];
        else if (!strcmp(argv[i], "--peer") && i + 1 < argc)
            fgr_peer = argv[++i];
        else if (!strcmp(argv[i], "--module-cache") && i + 1 < argc)
            fgr_images_dir(argv[++i]);
        else if (!strcmp(argv[i], "--module-cache-max") && i + 1 < argc) {
            if (fgr_images_max(argv[++i]))
                usage();
        }
        else if (!strcmp(argv[i], "--pinned-max") && i + 1 < argc)
            fgr_pinned_max(argv[++i]);
        else if (!strcmp(argv[i], "--hostfn-fd") && i + 1 < argc)
            hostfn_fd = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--control-fd") && i + 1 < argc)
            control_fd = atoi(argv[++i]);
        else
            usage();
    }
    if (fd < 0 || fcntl(fd, F_GETFD) < 0)
        usage();
    if (hostfn_fd >= 0) {
        fcntl(hostfn_fd, F_SETFD, FD_CLOEXEC);
        errno = 0;
        if (fgr_hostfn_channel_fd(hostfn_fd)) {
            fgr_logf("--hostfn-fd %d: no secret to read (%s)", hostfn_fd, errno ? strerror(errno) : "end of file");
            return 2;
        }
    }
    /* The least the driver needs: no privilege gained by exec (setuid),
     * and bounded processes (threads) and open files. */
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    lower(RLIMIT_NPROC, MAX_PROCS);
    lower(RLIMIT_NOFILE, MAX_FILES);
    /* The supervisor's copy of the socket may have been non-blocking. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    /* A peer that connects and says nothing does not hold an executor. */
    struct timeval hello_wait = {HELLO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hello_wait, sizeof hello_wait);
    fgr_output_capture();
    void *h = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fgr_logf("cannot load the CUDA driver %s: %s", driver, dlerror());
        return 1;
    }
#define SYM(field, name) *(void **)&drv.field = dlsym(h, name)
    SYM(init, "cuInit");
    SYM(version, "cuDriverGetVersion");
    SYM(count, "cuDeviceGetCount");
    SYM(name, "cuDeviceGetName");
    SYM(uuid, "cuDeviceGetUuid");
    SYM(attr, "cuDeviceGetAttribute");
    SYM(errname, "cuGetErrorName");
    SYM(errstr, "cuGetErrorString");
    SYM(getcur, "cuCtxGetCurrent");
    SYM(setcur, "cuCtxSetCurrent");
    *(void **)&fgr_drv.sync = dlsym(h, "cuStreamSynchronize");
    *(void **)&fgr_drv.sync_pt = dlsym(h, "cuStreamSynchronize_ptsz");
    *(void **)&fgr_drv.capturing = dlsym(h, "cuStreamIsCapturing");
    *(void **)&fgr_drv.capturing_pt = dlsym(h, "cuStreamIsCapturing_ptsz");
    *(void **)&fgr_drv.capture_mode = dlsym(h, "cuThreadExchangeStreamCaptureMode");
    *(void **)&fgr_drv.range = dlsym(h, "cuMemGetAddressRange_v2");
    *(void **)&fgr_drv.host_register = dlsym(h, "cuMemHostRegister_v2");
    *(void **)&fgr_drv.host_unregister = dlsym(h, "cuMemHostUnregister");
    *(void **)&fgr_drv.ev_create = dlsym(h, "cuEventCreate");
    *(void **)&fgr_drv.ev_record = dlsym(h, "cuEventRecord");
    *(void **)&fgr_drv.ev_record_pt = dlsym(h, "cuEventRecord_ptsz");
    *(void **)&fgr_drv.ev_query = dlsym(h, "cuEventQuery");
    *(void **)&fgr_drv.ev_sync = dlsym(h, "cuEventSynchronize");
    *(void **)&fgr_drv.ev_destroy = dlsym(h, "cuEventDestroy_v2");
    SYM(export_table, "cuGetExportTable");
#undef SYM
    if (!drv.init || !drv.version || !drv.count || !drv.name || !drv.uuid || !drv.attr || !drv.getcur || !drv.setcur) {
        fgr_logf("%s is not a CUDA driver (entry points missing)", driver);
        return 1;
    }
    for (int op = 1; op < FGR_NUM_OPS; op++)
        fgr_real[op] = dlsym(h, fgr_ops[op].name);
    fgr_real[FGR_OP_fgrNvmlUtilization] = (void *)nvml_utilization;
    fgr_real[FGR_OP_fgrNvmlDriverVersion] = (void *)nvml_driver_version;
    fgr_real[FGR_OP_fgrNvmlOwnMemory] = (void *)nvml_own_memory;
    fgr_real[FGR_OP_fgrNvmlMemory] = (void *)nvml_memory;
    fgr_real[FGR_OP_fgrNvmlP2PStatus] = (void *)nvml_p2p;
    fgr_real[FGR_OP_fgrNvmlReading] = (void *)nvml_reading;
    *(void **)&real_ctx_pop = dlsym(h, "cuCtxPopCurrent_v2");
    *(void **)&real_ctx_create_v2 = dlsym(h, "cuCtxCreate_v2");
    *(void **)&real_ctx_create_v4 = dlsym(h, "cuCtxCreate_v4");
    fgr_real[FGR_OP_cuCtxCreate_v2] = real_ctx_create_v2 && real_ctx_pop ? (void *)ctx_create : NULL;
    fgr_real[FGR_OP_fgrCtxCreateAffinity] = real_ctx_create_v4 && real_ctx_pop ? (void *)ctx_create_affinity : NULL;
    *(void **)&real_potential = dlsym(h, "cuOccupancyMaxPotentialBlockSizeWithFlags");
    fgr_real[FGR_OP_fgrOccupancyBlockSize] = real_potential ? (void *)occupancy_block_size : NULL;
    fgr_own_init(h);
    fgr_hostmem_init(h);
    fgr_wait_init(h);
    fgr_stage_init(h);
    fgr_heap_init(h);
    fgr_textures_init(h);
    fgr_layout_init(h);
    fgr_memops_init(h);
    fgr_arena_init(h);
    fgr_ipc_init(h);
    fgr_hostfn_init(h);
    fgr_graphs_init(h);
    fgr_hostcopy_init(h);
    fgr_move_init(h, control_fd, replay);
    fgr_link_init(h);
    /* The export tables' functions are the driver's words; a table the
     * driver does not have leaves its operations unsupported. */
    for (int i = 0; i < fgr_nxtables; i++) {
        const void *t = NULL;
        if (!drv.export_table || drv.export_table(&t, &fgr_xtables[i].uuid) != CUDA_SUCCESS || !t)
            continue;
        fgr_real[fgr_xtables[i].fetch_op] = (void *)t;
        for (int k = 0; fgr_xtables[i].fns[k].op; k++)
            fgr_real[fgr_xtables[i].fns[k].op] = (void *)((const void *const *)t)[fgr_xtables[i].fns[k].slot];
    }

    conn_fd = fd;
    uint8_t *body = NULL;
    size_t cap = 0;
    int greeted = 0;
    uint8_t hdr[FGR_REQ_HDR];
    for (;;) {
        /* A parked call: serve what comes while its ticket runs. */
        if (parked.body && !wait_parked())
            continue;
        uint8_t lenb[4];
        if (conn_read(lenb, 4)) {
            if (!greeted && (errno == EAGAIN || errno == EWOULDBLOCK))
                reject("no handshake within %d s", HELLO_TIMEOUT_S);
            if (ring.m && errno == EPROTO)
                reject("the shared memory's ring indices are impossible");
            if (errno)
                fgr_logf("connection ended: %s", strerror(errno));
            return 0; /* the client is gone */
        }
        uint32_t n = (uint32_t)lenb[0] | (uint32_t)lenb[1] << 8 | (uint32_t)lenb[2] << 16 | (uint32_t)lenb[3] << 24;
        if (n < FGR_REQ_HDR || n > FGR_MAX_FRAME)
            reject("a frame of %u bytes (a request has %u to %u)", n, FGR_REQ_HDR, FGR_MAX_FRAME);
        /* The header first: a frame longer than its operation can carry
         * (a handshake, one without a buffer of its own size) is refused
         * before memory is taken for it. */
        if (conn_read(hdr, FGR_REQ_HDR)) {
            if (!greeted && (errno == EAGAIN || errno == EWOULDBLOCK))
                reject("no handshake within %d s", HELLO_TIMEOUT_S);
            reject("the frame was cut short (%u bytes announced): %s", n, errno ? strerror(errno) : "end of stream");
        }
        unsigned op = (unsigned)hdr[0] | (unsigned)hdr[1] << 8;
        uint32_t most = greeted && op < FGR_NUM_OPS && fgr_ops[op].fn ? fgr_ops[op].max_frame : FGR_SMALL_FRAME;
        if (n > most)
            reject("a frame of %u bytes for %s, which carries at most %u", n,
                   !greeted ? "the handshake" : op < FGR_NUM_OPS && fgr_ops[op].fn ? fgr_ops[op].name : "an unknown operation", most);
        if (n > cap) {
            free(body);
            body = malloc(n);
            cap = body ? n : 0;
            if (!body)
                reject("no memory for a frame of %u bytes", n);
        }
        memcpy(body, hdr, FGR_REQ_HDR);
        if (n > FGR_REQ_HDR && conn_read(body + FGR_REQ_HDR, n - FGR_REQ_HDR)) {
            if (!greeted && (errno == EAGAIN || errno == EWOULDBLOCK))
                reject("no handshake within %d s", HELLO_TIMEOUT_S);
            reject("the frame was cut short (%u bytes announced): %s", n, errno ? strerror(errno) : "end of stream");
        }
        if (!greeted) {
            greet(fd, body, n);
            greeted = 1;
            continue;
        }
        serve_frame(body, n, -1);
        fgr_stage_reap();
        /* A large frame's memory goes back once it is served: the
         * connection holds its largest call's only while it lasts. */
        if (cap > KEEP_FRAME) {
            free(body);
            body = NULL;
            cap = 0;
        }
        if (!parked.body)
            fgr_trim(&reply);
    }
}
