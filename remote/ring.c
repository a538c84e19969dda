#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#define SPIN_NS 30000L /* a wait spins this long before it sleeps on the socket */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* On the client, one thread may sleep for an answer while another sleeps
 * for room to write, on the same socket: a doorbell one of them drains
 * may have been the other's, so its sleeps are naps, each ending in a new
 * look at the ring. */
#define CLIENT_NAP_MS 2

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

size_t fgr_ring_bytes(uint32_t size, uint32_t stage, uint32_t down)
{
    return sizeof(struct fgr_ring_shm) + 2 * (size_t)size + stage + down + FGR_HOSTFN_DATA_BYTES;
}

static void sides(struct fgr_ring *r, int client)
{
    uint8_t *data = (uint8_t *)(r->m + 1);
    r->out = client ? &r->m->c2s : &r->m->s2c;
    r->in = client ? &r->m->s2c : &r->m->c2s;
    r->out_data = client ? data : data + r->size;
    r->in_data = client ? data + r->size : data;
    r->stage = data + 2 * (size_t)r->size;
    r->down = r->stage + r->stage_size;
    r->hostfn_data = r->down + r->down_size;
    r->out_head = r->in_tail = 0;
}

int fgr_ring_create(struct fgr_ring *r, int sock, int *fdp)
{
    size_t n = fgr_ring_bytes(FGR_RING_BYTES, FGR_STAGE_BYTES, FGR_STAGE_DOWN_BYTES);
    int fd = memfd_create("flexgv-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    /* Sealed at its size: the executor maps it without fear of SIGBUS. */
    void *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)n) == 0 && fcntl(fd, F_ADD_SEALS, SEALS) == 0)
        m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    r->m = m;
    r->size = FGR_RING_BYTES;
    r->stage_size = FGR_STAGE_BYTES;
    r->down_size = FGR_STAGE_DOWN_BYTES;
    r->sock = sock;
    r->nap_ms = CLIENT_NAP_MS;
    r->m->magic = FGR_RING_MAGIC;
    r->m->size = FGR_RING_BYTES;
    r->m->stage_size = FGR_STAGE_BYTES;
    r->m->down_size = FGR_STAGE_DOWN_BYTES;
    sides(r, 1);
    *fdp = fd;
    return 0;
}

/* Maps the heap at want, if that range is free (else NULL). */
static void *heap_at(int fd, uint64_t want)
{
    if (!want || want % FGR_HEAP_BYTES)
        return NULL;
    void *m = mmap((void *)(uintptr_t)want, FGR_HEAP_BYTES, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, fd, 0);
    if (m == MAP_FAILED)
        return NULL;
    if (m != (void *)(uintptr_t)want) { /* a kernel that takes the flag as a hint */
        munmap(m, FGR_HEAP_BYTES);
        return NULL;
    }
    return m;
}

int fgr_heap_create(int *fdp, uint8_t **base)
{
    int fd = memfd_create("flexgv-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)FGR_HEAP_BYTES) != 0 || fcntl(fd, F_ADD_SEALS, SEALS) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    /* Between 16 and 80 TiB, which neither the program's nor the
     * executor's libraries, heap or stack use (mmap hands out addresses
     * near the top): a few tries at random, then wherever the kernel says. */
    void *m = NULL;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    uint64_t seed = (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32);
    for (int i = 0; i < 8 && !m; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        m = heap_at(fd, (16ull << 40) + (seed >> 33) % 1024 * FGR_HEAP_BYTES);
    }
    if (!m) {
        m = mmap(NULL, FGR_HEAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        m = m == MAP_FAILED ? NULL : m;
    }
    /* Not inherited by a forked child, as the driver's pinned memory is not. */
    if (!m || madvise(m, FGR_HEAP_BYTES, MADV_DONTFORK) != 0) {
        int e = errno;
        if (m)
            munmap(m, FGR_HEAP_BYTES);
        close(fd);
        errno = e;
        return -1;
    }
    *fdp = fd;
    *base = m;
    return 0;
}

int fgr_heap_none(void)
{
    int fd = memfd_create("flexgv-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && fcntl(fd, F_ADD_SEALS, SEALS) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        fd = -1;
    }
    return fd;
}

int fgr_heap_map(int fd, uint64_t want, uint8_t **base)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_size != 0 && (uint64_t)st.st_size != FGR_HEAP_BYTES) ||
        seals < 0 || (seals & SEALS) != SEALS) {
        errno = EPROTO;
        return -1;
    }
    *base = NULL;
    if (st.st_size == 0)
        return 0; /* the client has none */
    void *m = heap_at(fd, want);
    if (!m)
        m = mmap(NULL, FGR_HEAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    *base = m;
    return 0;
}

int fgr_ring_attach(struct fgr_ring *r, int sock, int fd)
{
    size_t n = fgr_ring_bytes(FGR_RING_BYTES, FGR_STAGE_BYTES, FGR_STAGE_DOWN_BYTES);
    struct stat st;
    /* Only memory that can neither shrink nor grow under us. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != n || seals < 0 ||
        (seals & SEALS) != SEALS) {
        errno = EPROTO;
        return -1;
    }
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    r->m = m;
    r->size = FGR_RING_BYTES;
    r->stage_size = FGR_STAGE_BYTES;
    r->down_size = FGR_STAGE_DOWN_BYTES;
    r->sock = sock;
    r->nap_ms = -1;
    if (LOAD(&r->m->magic) != FGR_RING_MAGIC || LOAD(&r->m->size) != FGR_RING_BYTES ||
        LOAD(&r->m->stage_size) != FGR_STAGE_BYTES || LOAD(&r->m->down_size) != FGR_STAGE_DOWN_BYTES) {
        munmap(m, n);
        r->m = NULL;
        errno = EPROTO;
        return -1;
    }
    sides(r, 0);
    return 0;
}

void fgr_ring_close(struct fgr_ring *r)
{
    if (r->m)
        munmap(r->m, fgr_ring_bytes(r->size, r->stage_size, r->down_size));
    r->m = NULL;
}

/* Sleeps until the socket has something: a doorbell (drained) or its end,
 * or for nap_ms (-1: no limit). 0, or -1 once the peer is gone. */
static int sleep_on_socket(int sock, int nap_ms)
{
    struct pollfd p = {.fd = sock, .events = POLLIN};
    int k = poll(&p, 1, nap_ms);
    if (k == 0)
        return 0;
    if (k < 0)
        return errno == EINTR ? 0 : -1;
    char bells[256];
    k = (int)recv(sock, bells, sizeof bells, MSG_DONTWAIT);
    if (k > 0 || (k < 0 && (errno == EAGAIN || errno == EINTR)))
        return 0;
    return -1;
}

static long elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

/* Waits for *seq to leave seen: 0, or -1 (errno 0) once the peer is gone.
 * Past a short spin it says it sleeps and sleeps on the socket, where the
 * other side rings once it moved *seq and saw it sleep (both in one total
 * order: no wake-up is lost), and where the other side's end shows. */
static int wait_seq(struct fgr_ring *r, uint32_t *seq, uint32_t seen, uint32_t *sleeps)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0;; i++) {
        if (ACQ(seq) != seen)
            return 0;
        relax();
        if ((i & 63) == 63 && elapsed_ns(&t0) > SPIN_NS)
            break;
    }
    __atomic_store_n(sleeps, 1, __ATOMIC_SEQ_CST);
    int gone = 0;
    while (LOAD(seq) == seen)
        if (sleep_on_socket(r->sock, r->nap_ms) != 0) {
            gone = 1;
            break;
        }
    __atomic_store_n(sleeps, 0, __ATOMIC_SEQ_CST);
    errno = 0;
    return gone ? -1 : 0;
}

/* Moves *seq on, and rings the other side's socket if it sleeps (a full
 * socket buffer has rung enough). */
static void bump(struct fgr_ring *r, uint32_t *seq, uint32_t *sleeps)
{
    __atomic_fetch_add(seq, 1, __ATOMIC_SEQ_CST);
    if (LOAD(sleeps))
        send(r->sock, "b", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

int fgr_ring_write(struct fgr_ring *r, const void *p, size_t n)
{
    const uint8_t *s = p;
    while (n) {
        uint32_t seen = LOAD(&r->out->tail_seq);
        uint64_t used = r->out_head - ACQ(&r->out->tail);
        if (used > r->size) { /* a tail the reader cannot have written */
            errno = EPROTO;
            return -1;
        }
        if (used == r->size) {
            if (wait_seq(r, &r->out->tail_seq, seen, &r->out->producer_sleeps))
                return -1;
            continue;
        }
        size_t k = r->size - used < n ? (size_t)(r->size - used) : n;
        size_t off = (size_t)(r->out_head % r->size), first = r->size - off < k ? r->size - off : k;
        memcpy(r->out_data + off, s, first);
        memcpy(r->out_data, s + first, k - first);
        r->out_head += k;
        REL(&r->out->head, r->out_head);
        bump(r, &r->out->head_seq, &r->out->consumer_sleeps);
        s += k;
        n -= k;
    }
    return 0;
}

int fgr_ring_read(struct fgr_ring *r, void *p, size_t n)
{
    uint8_t *d = p;
    while (n) {
        uint32_t seen = LOAD(&r->in->head_seq);
        uint64_t avail = ACQ(&r->in->head) - r->in_tail;
        if (avail > r->size) { /* a head the writer cannot have written */
            errno = EPROTO;
            return -1;
        }
        if (avail == 0) {
            if (wait_seq(r, &r->in->head_seq, seen, &r->in->consumer_sleeps))
                return -1;
            continue;
        }
        size_t k = avail < n ? (size_t)avail : n;
        size_t off = (size_t)(r->in_tail % r->size), first = r->size - off < k ? r->size - off : k;
        memcpy(d, r->in_data + off, first);
        memcpy(d + first, r->in_data, k - first);
        r->in_tail += k;
        REL(&r->in->tail, r->in_tail);
        bump(r, &r->in->tail_seq, &r->in->producer_sleeps);
        d += k;
        n -= k;
    }
    return 0;
}

int fgr_ring_readable(struct fgr_ring *r) { return ACQ(&r->in->head) != r->in_tail; }

int fgr_ring_sleep_or(struct fgr_ring *r, int fd)
{
    int gone = 0;
    uint32_t seen = LOAD(&r->in->head_seq);
    __atomic_store_n(&r->in->consumer_sleeps, 1, __ATOMIC_SEQ_CST);
    if (LOAD(&r->in->head_seq) == seen && !fgr_ring_readable(r)) {
        struct pollfd p[2] = {{.fd = r->sock, .events = POLLIN}, {.fd = fd, .events = POLLIN}};
        if (poll(p, 2, r->nap_ms) > 0 && p[0].revents) {
            char bells[256];
            ssize_t k = recv(r->sock, bells, sizeof bells, MSG_DONTWAIT);
            gone = k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR);
        }
    }
    __atomic_store_n(&r->in->consumer_sleeps, 0, __ATOMIC_SEQ_CST);
    return gone ? -1 : 0;
}

int fgr_send_fd(int sock, int fd)
{
    char byte = 'R';
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ssize_t k;
    do
        k = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    return k == 1 ? 0 : -1;
}

int fgr_recv_fd(int sock)
{
    char byte;
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    ssize_t k;
    do
        k = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (k < 0 && errno == EINTR);
    int fd = -1;
    for (struct cmsghdr *c = k == 1 ? CMSG_FIRSTHDR(&msg) : NULL; c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (fd < 0)
                fd = got;
            else
                close(got); /* one was asked for */
        }
    }
    if (fd < 0 || (msg.msg_flags & MSG_CTRUNC) || byte != 'R') {
        if (fd >= 0)
            close(fd);
        errno = EPROTO;
        return -1;
    }
    return fd;
}
