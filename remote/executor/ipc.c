/* IPC between the programs one host serves (cuIpcGetMemHandle and
 * cuIpcOpenMemHandle; remote/client/arena.c). Each program has an executor
 * of its own, so a handle cannot be the driver's: cuMemAlloc memory here
 * is pages the arena maps (cuMemCreate), which the driver's legacy IPC
 * does not take. A handle names instead the pages holding the allocation:
 * the exporting executor keeps a descriptor of them (the driver's POSIX
 * file descriptor export) under a secret of 128 random bits, and serves
 * it on an abstract unix socket named after itself to the executor that
 * presents the secret, which imports the pages and maps them at the
 * address its client chose. Holding the handle's bytes is what grants the
 * memory, as a driver's IPC handle does; the secret makes them unguessable
 * by other programs of the host. What was exported ends when its
 * allocation is freed (or its context goes): memory already opened stays
 * valid in the opener until it closes it, as the driver keeps it.
 *
 * A physical allocation of the program's own (cuMemExportToShareableHandle)
 * travels the same way: the file descriptor the client gives the program
 * holds the token, which the importing executor presents.
 *
 * Events travel as the driver's own IPC handles: an event is not memory of
 * the executor's and the driver's handle names it host-wide. */
#include "executor.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define TOKEN_MAGIC 0x31494746u /* "FGI1" */
#define EXPORTS_MAX 1024        /* handles a connection keeps at once */

enum { PAGES, HANDLE, POOL }; /* what a token names */

/* A memory handle's bytes (CUipcMemHandle holds 64), or what a shareable
 * handle's file holds. */
struct token {
    uint32_t magic, kind;
    uint64_t server;    /* the exporting executor's socket */
    uint8_t secret[16];
    uint64_t size, off, len; /* its pages, and the allocation in them */
};
_Static_assert(sizeof(struct token) <= sizeof(CUipcMemHandle), "a token fits a handle");

static struct export {
    uint8_t secret[16];
    int kind;
    uint64_t block, size, ptr, len; /* a handle's: 0, 0, the driver's handle, 0 */
    int fd;
} exports[EXPORTS_MAX];
static size_t nexports;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* exports, with the serving thread */
static uint64_t self;                                     /* 0 until the socket serves */

static CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
static CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
static CUresult (*release)(CUmemGenericAllocationHandle);
static CUresult (*open_event)(CUevent *, CUipcEventHandle);
static CUresult (*pool_export_fd)(void *, CUmemoryPool, CUmemAllocationHandleType, unsigned long long);
static CUresult (*pool_import_fd)(CUmemoryPool *, void *, CUmemAllocationHandleType, unsigned long long);
/* the operations wrapped */
static CUresult (*real_release)(CUmemGenericAllocationHandle);
static CUresult (*real_pool_destroy)(CUmemoryPool);

static socklen_t address(struct sockaddr_un *a, uint64_t id)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "flexgv-ipc-%016llx", (unsigned long long)id);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int same_secret(const uint8_t *a, const uint8_t *b)
{
    uint8_t d = 0;
    for (int i = 0; i < 16; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

/* One request: 16 bytes of secret in, the pages' size (0: none) and their
 * descriptor out. Bounded in time, so a peer that says nothing holds no
 * one up for long. */
static void answer(int c)
{
    struct timeval tv = {1, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint8_t secret[16];
    if (recv(c, secret, sizeof secret, MSG_WAITALL) != (ssize_t)sizeof secret)
        return;
    uint64_t size = 0;
    int fd = -1;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nexports; i++)
        if (same_secret(exports[i].secret, secret)) {
            fd = fcntl(exports[i].fd, F_DUPFD_CLOEXEC, 0);
            size = fd >= 0 ? exports[i].size : 0;
            break;
        }
    pthread_mutex_unlock(&lock);
    struct iovec iov = {&size, sizeof size};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        m.msg_control = u.b;
        m.msg_controllen = sizeof u.b;
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof fd);
    }
    sendmsg(c, &m, MSG_NOSIGNAL);
    if (fd >= 0)
        close(fd);
}

static void *serve(void *arg)
{
    int l = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno != EINTR && errno != ECONNABORTED)
                poll(NULL, 0, 10); /* out of descriptors, say: not a busy loop */
            continue;
        }
        answer(c);
        close(c);
    }
    return NULL;
}

/* The socket other executors ask on, from the first export. */
static int listening(void)
{
    if (self)
        return 1;
    uint64_t id;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id || !id)
        return 0;
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t n = address(&a, id);
    pthread_t t;
    pthread_attr_t at;
    if (l < 0 || bind(l, (struct sockaddr *)&a, n) != 0 || listen(l, 16) != 0 || pthread_attr_init(&at) != 0) {
        if (l >= 0)
            close(l);
        return 0;
    }
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int r = pthread_create(&t, &at, serve, (void *)(intptr_t)l);
    pthread_attr_destroy(&at);
    if (r != 0) {
        close(l);
        return 0;
    }
    self = id;
    return 1;
}

/* Keeps fd under a new secret and writes the token naming it. */
static CUresult keep(int kind, uint64_t block, uint64_t size, uint64_t ptr, uint64_t len, int fd, void *out)
{
    /* (an object's token holds nothing of it: the driver's values stay here) */
    struct token t = {TOKEN_MAGIC, (uint32_t)kind, self, {0}, size, kind == PAGES ? ptr - block : 0, len};
    if (getrandom(t.secret, sizeof t.secret, 0) != (ssize_t)sizeof t.secret) {
        close(fd);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    pthread_mutex_lock(&lock);
    exports[nexports] = (struct export){{0}, kind, block, size, ptr, len, fd};
    memcpy(exports[nexports].secret, t.secret, sizeof t.secret);
    nexports++;
    pthread_mutex_unlock(&lock);
    memset(out, 0, sizeof(CUipcMemHandle));
    memcpy(out, &t, sizeof t);
    return CUDA_SUCCESS;
}

/* Object v (a physical allocation's handle, or a pool) exported as a
 * POSIX file descriptor and kept under a new token of that kind; the
 * driver refuses one not made exportable. */
static CUresult exported(int kind, uint64_t block, uint64_t size, uint64_t ptr, uint64_t len, uint64_t v, void *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (nexports == EXPORTS_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!listening())
        return CUDA_ERROR_OPERATING_SYSTEM;
    int fd = -1;
    CUresult r = kind == POOL ? pool_export_fd(&fd, (CUmemoryPool)(uintptr_t)v, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                              : export_fd(&fd, (CUmemGenericAllocationHandle)v, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS)
        return r;
    return keep(kind, block, size, ptr, len, fd, out);
}

/* The token of pages exported before, given again: each move or
 * checkpoint shares every allocation, and a handle of its own each time
 * would use up the EXPORTS_MAX a connection keeps (then its memory moves
 * through the client). Whether one was found. */
static int again(int kind, uint64_t block, uint64_t ptr, uint64_t len, void *out)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nexports && !found; i++) {
        const struct export *x = &exports[i];
        if (x->kind == kind && x->block == block && x->ptr == ptr && x->len == len) {
            struct token t = {TOKEN_MAGIC, (uint32_t)kind, self, {0}, x->size, ptr - block, len};
            memcpy(t.secret, x->secret, sizeof t.secret);
            memset(out, 0, sizeof(CUipcMemHandle));
            memcpy(out, &t, sizeof t);
            found = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

/* The pages holding the allocation at ptr (a mapping of the arena's). */
static CUresult ipc_export(CUdeviceptr block, CUdeviceptr ptr, size_t len, void *handle)
{
    uint64_t size;
    CUmemGenericAllocationHandle h;
    if (fgr_arena_block(block, &size, &h) != 0 || ptr < block || ptr - block >= size || len == 0 ||
        len > size - (ptr - block) || !fgr_mem_base(ptr) || !fgr_mem_in(ptr, len))
        return CUDA_ERROR_INVALID_VALUE;
    if (handle && again(PAGES, block, ptr, len, handle))
        return CUDA_SUCCESS;
    return exported(PAGES, block, size, ptr, len, (uint64_t)h, handle);
}

CUresult fgr_ipc_share(CUdeviceptr p, size_t n, void *token)
{
    uint64_t block;
    p = fgr_moved(p); /* the program's address (move.c) */
    if (fgr_arena_holding(p, n, &block) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return ipc_export(block, p, n, token);
}

/* The program's own physical allocation or pool, until it releases or
 * destroys it. */
static CUresult export_object(int kind, uint64_t v, void *token)
{
    return exported(kind, 0, 0, v, 0, v, token);
}

static CUresult ipc_export_handle(CUmemGenericAllocationHandle h, void *token)
{
    return export_object(HANDLE, (uint64_t)h, token);
}

static CUresult ipc_export_pool(CUmemoryPool pool, void *token)
{
    return export_object(POOL, (uint64_t)(uintptr_t)pool, token);
}

/* What was exported of object v of that kind, gone with it. */
static void drop(int kind, uint64_t v)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nexports;)
        if (exports[i].kind == kind && exports[i].ptr == v) {
            close(exports[i].fd);
            exports[i] = exports[--nexports];
        } else {
            i++;
        }
    pthread_mutex_unlock(&lock);
}

static CUresult release_handle(CUmemGenericAllocationHandle h)
{
    CUresult r = real_release(h);
    if (r == CUDA_SUCCESS)
        drop(HANDLE, (uint64_t)h);
    return r;
}

static CUresult destroy_pool(CUmemoryPool pool)
{
    CUresult r = real_pool_destroy(pool);
    if (r == CUDA_SUCCESS)
        drop(POOL, (uint64_t)(uintptr_t)pool);
    return r;
}

void fgr_ipc_forget(uint64_t lo, uint64_t hi)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nexports;)
        if (exports[i].kind == PAGES && exports[i].ptr >= lo && exports[i].ptr < hi) {
            close(exports[i].fd);
            exports[i] = exports[--nexports];
        } else {
            i++;
        }
    pthread_mutex_unlock(&lock);
}

/* The pages a token names, from the executor that exported them: their
 * descriptor, or -1. */
static int fetch(const struct token *t)
{
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0)
        return -1;
    struct sockaddr_un a;
    socklen_t n = address(&a, t->server);
    struct timeval tv = {2, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint64_t size = 0;
    int fd = -1;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = {&size, sizeof size};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
    if (connect(c, (struct sockaddr *)&a, n) == 0 && send(c, t->secret, sizeof t->secret, MSG_NOSIGNAL) == 16 &&
        recvmsg(c, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC) == (ssize_t)sizeof size) {
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
            if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(&fd, CMSG_DATA(h), sizeof fd);
    }
    close(c);
    if (fd >= 0 && size != t->size) { /* not what the token says: refused */
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The descriptor of what a token of that kind names, from the executor
 * that exported it: its pages (token and answer agreeing on their size),
 * or -1. */
static int fetched(const void *handle, int kind, struct token *t)
{
    memcpy(t, handle, sizeof *t);
    if (t->magic != TOKEN_MAGIC || t->kind != (uint32_t)kind || !t->server)
        return -1;
    if (kind == PAGES && (!t->size || t->off >= t->size || !t->len || t->len > t->size - t->off))
        return -1;
    return fetch(t);
}

int fgr_ipc_fetch(const void *token, uint64_t *size, uint64_t *off, uint64_t *len)
{
    struct token t;
    int fd = fetched(token, PAGES, &t);
    *size = t.size, *off = t.off, *len = t.len;
    return fd;
}

static CUresult ipc_open(const void *handle, CUdeviceptr at, CUdeviceptr *dptr)
{
    struct token t;
    if (!handle || !dptr)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fetched(handle, PAGES, &t);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE; /* no such export (freed, or never) */
    CUmemGenericAllocationHandle h;
    CUresult r = import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = fgr_arena_map_handle(at, t.size, h)) != CUDA_SUCCESS) {
        release(h);
        return r;
    }
    fgr_mem_add(at + t.off, t.len, FGR_H_CUcontext, fgr_ctx);
    *dptr = at + t.off;
    return CUDA_SUCCESS;
}

/* The physical allocation or pool a token of that kind names, imported. */
static CUresult import_object(int kind, void *out, const void *token)
{
    struct token t;
    if (!out || !token)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = fetched(token, kind, &t);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *os = (void *)(intptr_t)fd;
    CUresult r = kind == POOL ? pool_import_fd(out, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
                              : import_fd(out, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    return r;
}

static CUresult ipc_import_handle(CUmemGenericAllocationHandle *h, const void *token)
{
    return import_object(HANDLE, h, token);
}

static CUresult ipc_import_pool(CUmemoryPool *pool, const void *token)
{
    return import_object(POOL, pool, token);
}

static CUresult ipc_open_event(CUevent *ph, const void *handle)
{
    CUipcEventHandle e;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&e, handle, sizeof e);
    return open_event(ph, e);
}

void fgr_ipc_use(void *export, void *import, void *rel)
{
    *(void **)&export_fd = export;
    *(void **)&import_fd = import;
    *(void **)&release = rel;
    fgr_real[FGR_OP_fgrIpcExport] = (void *)ipc_export;
    fgr_real[FGR_OP_fgrIpcOpen] = (void *)ipc_open;
    fgr_real[FGR_OP_fgrIpcExportHandle] = (void *)ipc_export_handle;
    fgr_real[FGR_OP_fgrIpcImportHandle] = (void *)ipc_import_handle;
    if (!real_release && fgr_real[FGR_OP_cuMemRelease]) {
        real_release = fgr_real[FGR_OP_cuMemRelease];
        fgr_real[FGR_OP_cuMemRelease] = (void *)release_handle;
    }
}

void fgr_ipc_init(void *driver)
{
    *(void **)&open_event = dlsym(driver, "cuIpcOpenEventHandle");
    if (open_event)
        fgr_real[FGR_OP_fgrIpcOpenEvent] = (void *)ipc_open_event;
    *(void **)&pool_export_fd = dlsym(driver, "cuMemPoolExportToShareableHandle");
    *(void **)&pool_import_fd = dlsym(driver, "cuMemPoolImportFromShareableHandle");
    if (pool_export_fd && pool_import_fd && fgr_real[FGR_OP_cuMemPoolDestroy]) {
        real_pool_destroy = fgr_real[FGR_OP_cuMemPoolDestroy];
        fgr_real[FGR_OP_cuMemPoolDestroy] = (void *)destroy_pool;
        fgr_real[FGR_OP_fgrIpcExportPool] = (void *)ipc_export_pool;
        fgr_real[FGR_OP_fgrIpcImportPool] = (void *)ipc_import_pool;
    }
    void *export = dlsym(driver, "cuMemExportToShareableHandle"), *import = dlsym(driver, "cuMemImportFromShareableHandle"),
         *rel = dlsym(driver, "cuMemRelease");
    /* Only with the arena's operations: cuMemAlloc's pages are what travels. */
    if (export && import && rel && fgr_real[FGR_OP_fgrArenaMap])
        fgr_ipc_use(export, import, rel);
}
