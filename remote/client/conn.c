/* The client's one connection to its executor: connecting, the handshake,
 * forwarded calls and what happens when the server goes away. Calls from
 * all threads take turns on the connection; each request carries the
 * calling thread's current context, which the executor makes current.
 *
 * A call that waits for the device (api/remote.api: wait=, after=) does not
 * hold the connection while the device works: its thread reads the answer
 * without the lock ("the reader"), other threads' queued calls go out
 * meanwhile, and a thread that needs an answer of its own first sends
 * fgrNudge, which makes the executor answer the waiting call "pending"
 * with a ticket (remote/executor/wait.c). Threads holding tickets take
 * turns asking fgrWaitTickets which have ended. */
#include "client.h"
#include "../ring.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t conn_cv = PTHREAD_COND_INITIALIZER; /* reading, ticket_reader or a ticket changed */
static int conn_fd = -1;
static int reading;       /* a waiting call's thread reads its answer without conn_lock */
static int nudged;        /* ... and the executor was told another thread needs it */
static int wanting;       /* threads waiting for that answer, to make a round trip */
static int ticket_reader; /* a thread asks fgrWaitTickets */
/* The threads waiting for tickets to end, each with its ticket. */
static struct ticket_wait {
    uint32_t id;
    int done;
    CUresult result;
    struct ticket_wait *next;
} *ticket_waits;
static void *conn_tls; /* the TLS session over conn_fd (tls://), or NULL */
static struct fgr_ring conn_ring; /* the rings after an shm:// handshake (mapped: conn_ring.m) */
static int conn_broken;       /* lost or refused: every forwarded call fails */
static int failover_due;      /* ... lost, and a failover server keeps its state (failover.c) */
static int program_conn = 1;  /* the connection is the program's, not one a move set beside it */
static char lost_why[256];
static int replaying;         /* the calls since the checkpoint made again there: output not printed again */
static uint32_t replay_last_n; /* the answer, in conn_r, to the call under way when the server was lost */
static CUresult conn_refused; /* refused: what every call then answers */
static struct fgr_buf conn_w;
static uint8_t *conn_r;
static size_t conn_rcap;

struct fgr_server fgr_srv;
int fgr_initialized;
int fgr_keep_images;

/* What programs get once the server is gone: the device is unavailable. */
#define LOST CUDA_ERROR_DEVICE_UNAVAILABLE

void fgr_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("flexgv remote: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The server the connection moved to (migrate.c), once it did. */
static char *moved_to;

static long read_small(const char *path, const char *var, char *buf, size_t cap);

/* FLEXGV_REMOTE_ADDRESS_FILE's address, read at the first connection: a
 * node's daemon rewrites it when a pod's remote vGPU moves, so that a
 * program started after the move dials the new server. */
static char file_address[512];
static int file_address_read;

static void read_address_file(void)
{
    const char *path = getenv("FLEXGV_REMOTE_ADDRESS_FILE");
    file_address_read = 1;
    if (!path || !*path)
        return;
    long n = read_small(path, "FLEXGV_REMOTE_ADDRESS_FILE", file_address, sizeof file_address);
    if (n > 0 && n < (long)sizeof file_address && !memchr(file_address, '\n', (size_t)n) &&
        !memchr(file_address, ' ', (size_t)n)) {
        file_address[n] = 0;
        return;
    }
    if (n >= 0)
        fgr_say("the address file %s (FLEXGV_REMOTE_ADDRESS_FILE) holds no address", path);
    fgr_say("using FLEXGV_REMOTE=%s instead", getenv("FLEXGV_REMOTE") ? getenv("FLEXGV_REMOTE") : "");
    file_address[0] = 0;
}

static const char *address(void)
{
    const char *m = __atomic_load_n(&moved_to, __ATOMIC_ACQUIRE);
    if (m)
        return m;
    if (!file_address_read)
        read_address_file();
    if (file_address[0])
        return file_address;
    const char *a = getenv("FLEXGV_REMOTE");
    return a && *a ? a : NULL;
}

const char *fgr_conn_address(void) { return address(); }

/* A move the server asked for (an FGR_OUTPUT_MOVE frame), made by the next
 * call that finds the connection idle; the thread making it, while it does. */
static char *move_asked;
static int moving;
static pthread_t moving_thread;

int fgr_moving_here(void)
{
    return __atomic_load_n(&moving, __ATOMIC_ACQUIRE) && pthread_equal(moving_thread, pthread_self());
}

/* Whole-buffer I/O on the connection, in TLS for tls:// (fgr_read_all's
 * and fgr_write_all's answers). */
static int conn_write(int fd, const void *p, size_t n)
{
    if (conn_ring.m)
        return fgr_ring_write(&conn_ring, p, n);
    return conn_tls ? fgr_tls_write_all(conn_tls, p, n) : fgr_write_all(fd, p, n);
}

/* ---- queued calls gathered (sockets) ----
 * Over a socket every write is a system call that costs the calling thread
 * several microseconds, more than a queued call's own work. Queued calls
 * are therefore gathered and written together: with the next call that
 * waits for an answer, once BATCH_MAX bytes wait, or by the flusher thread
 * once the first of them has waited batch_ns (FLEXGV_REMOTE_BATCH_US; 0
 * writes each at once). A program that queues work and then waits without
 * a CUDA call sees its work start that much later, never later. Over
 * shm:// a call costs no system call and goes at once. All under
 * conn_lock. */
#define BATCH_MAX (256u << 10)
#define BATCH_FRAME_MAX (64u << 10) /* a larger call is written by itself */
static uint64_t batch_ns = 50000;
static struct {
    uint8_t *p;
    size_t len, cap;
    uint64_t due; /* when the first call waiting goes, at the latest */
} batch;
static struct {
    uint8_t *p;
    size_t cap;
} spare; /* the flusher's other buffer */
static pthread_cond_t batch_cv; /* the flusher's, on CLOCK_MONOTONIC */
static int flusher_running;
/* One write at a time, in order: taken with conn_lock held, or by the
 * flusher, which lets conn_lock go while it writes so that the program's
 * threads gather more meanwhile. conn_close takes it too. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t conn_writes; /* for FLEXGV_REMOTE_LOG=calls, under write_lock */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A setting of microseconds from 0 to max, as nanoseconds into *ns (left
 * as it is when unset): 1, or 0 for a bad value (said). */
static int us_from_env(const char *name, unsigned long long max, uint64_t *ns)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 1;
    char *end;
    errno = 0;
    unsigned long long us = strtoull(v, &end, 10);
    if (errno || *end || *v == '-' || us > max) {
        fgr_say("%s=%s: want microseconds from 0 to %llu", name, v, max);
        return 0;
    }
    *ns = us * 1000;
    return 1;
}

static int batch_append(const void *p, size_t n)
{
    if (batch.len + n > batch.cap) {
        size_t cap = batch.cap ? batch.cap : 16384;
        while (cap < batch.len + n)
            cap *= 2;
        uint8_t *q = realloc(batch.p, cap);
        if (!q)
            return -1;
        batch.p = q;
        batch.cap = cap;
    }
    if (n)
        memcpy(batch.p + batch.len, p, n);
    batch.len += n;
    return 0;
}

static int locked_write(const void *p, size_t n)
{
    pthread_mutex_lock(&write_lock);
    conn_writes++;
    int r = conn_write(conn_fd, p, n);
    pthread_mutex_unlock(&write_lock);
    return r;
}

static int batch_flush(void)
{
    size_t n = batch.len;
    batch.len = 0;
    return n ? locked_write(batch.p, n) : 0;
}

/* Everything gathered, then p: in one write when p is small. */
static int write_conn(const void *p, size_t n)
{
    if (batch.len && n <= BATCH_FRAME_MAX && batch_append(p, n) == 0)
        return batch_flush();
    if (batch_flush())
        return -1;
    return locked_write(p, n);
}

static CUresult lost(const char *why, int err);

static void *flusher(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&conn_lock);
    for (;;) {
        if (!batch.len) {
            pthread_cond_wait(&batch_cv, &conn_lock);
            continue;
        }
        uint64_t due = batch.due;
        if (now_ns() < due) {
            struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
            pthread_cond_timedwait(&batch_cv, &conn_lock, &ts);
            continue;
        }
        if (conn_fd < 0 || conn_broken) {
            batch.len = 0; /* no connection to write them to */
            continue;
        }
        /* The batch is taken out, and written in order (write_lock held
         * before conn_lock is let go) but without conn_lock. */
        uint8_t *p = batch.p;
        size_t n = batch.len, cap = batch.cap;
        batch.p = spare.p;
        batch.cap = spare.cap;
        batch.len = 0;
        pthread_mutex_lock(&write_lock);
        int fd = conn_fd;
        pthread_mutex_unlock(&conn_lock);
        conn_writes++;
        int err = conn_write(fd, p, n) ? errno : 0;
        pthread_mutex_unlock(&write_lock);
        pthread_mutex_lock(&conn_lock);
        spare.p = p;
        spare.cap = cap;
        if (err && !conn_broken)
            lost("sending a call", err);
    }
    return NULL;
}

int fgr_thread_start(void *(*fn)(void *), void *arg, size_t stack, const char *name)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (stack)
        pthread_attr_setstacksize(&a, stack);
    pthread_t t;
    int e = pthread_create(&t, &a, fn, arg);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e)
        return -1;
    pthread_setname_np(t, name);
    return 0;
}

/* The flusher: 0, or -1 when no thread could be made. */
static int flusher_start(void)
{
    if (flusher_running)
        return 0;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&batch_cv, &a);
    pthread_condattr_destroy(&a);
    if (fgr_thread_start(flusher, NULL, 64 << 10, "flexgv-flush"))
        return -1;
    flusher_running = 1;
    return 0;
}

/* A finished queued call: 1 when gathered, 0 when it is to be written at
 * once (over shm://, not gathering, too large, no flusher), -1 when
 * writing what was gathered failed (errno set). */
static int batch_queued(const struct fgr_buf *w)
{
    if (!batch_ns || conn_ring.m || w->len + w->tail_len > BATCH_FRAME_MAX || flusher_start())
        return 0;
    size_t was = batch.len;
    if (batch_append(w->p, w->len) || (w->tail && batch_append(w->tail, w->tail_len))) {
        batch.len = was;
        return 0;
    }
    if (batch.len >= BATCH_MAX)
        return batch_flush() ? -1 : 1;
    if (!was) {
        batch.due = now_ns() + batch_ns;
        pthread_cond_signal(&batch_cv);
    }
    return 1;
}

static int conn_read(int fd, void *p, size_t n)
{
    if (conn_ring.m)
        return fgr_ring_read(&conn_ring, p, n);
    return conn_tls ? fgr_tls_read_all(conn_tls, p, n) : fgr_read_all(fd, p, n);
}

/* Ends the connection (not in a forked child: the session is the parent's).
 * The shared memory stays mapped: another thread may be writing an upload
 * into it (stage.c), and fails at its next call. */
static void conn_close(int fd)
{
    pthread_mutex_lock(&write_lock);
    if (conn_tls)
        fgr_tls_free(conn_tls);
    conn_tls = NULL;
    close(fd);
    pthread_mutex_unlock(&write_lock);
}

/* The rings once connected over them (conn_fd is set last). */
struct fgr_ring *fgr_conn_ring(void)
{
    return __atomic_load_n(&conn_fd, __ATOMIC_ACQUIRE) >= 0 && conn_ring.m ? &conn_ring : NULL;
}

/* Marks the connection lost and says why, once. Called with conn_lock held. */
static CUresult lost(const char *why, int err)
{
    if (!conn_broken && conn_fd >= 0 && program_conn && fgr_failover_keeping()) {
        failover_due = 1; /* said by the failover */
        snprintf(lost_why, sizeof lost_why, "%s%s%s", why, err ? ": " : "", err ? strerror(err) : "");
    } else if (!conn_broken) {
        if (err)
            fgr_say("lost the GPU server %s: %s: %s; CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE", address(), why,
                strerror(err));
        else
            fgr_say("lost the GPU server %s: %s; CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE", address(), why);
    }
    conn_broken = 1;
    batch.len = 0;
    if (conn_fd >= 0 && reading) {
        shutdown(conn_fd, SHUT_RDWR); /* the reader wakes, and closes it */
    } else if (conn_fd >= 0) {
        conn_close(conn_fd);
        conn_fd = -1;
    }
    pthread_cond_broadcast(&conn_cv);
    return LOST;
}

static int dial_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* A dead peer or a dropped network ends a blocked call within about
 * FGR_TCP_TIMEOUT_S seconds: keepalive probes while waiting for an answer,
 * a user timeout while data is unacknowledged. */
#define FGR_TCP_TIMEOUT_S 15

/* Connects to HOST:PORT within ms milliseconds; host receives HOST
 * (without an IPv6 address's brackets). */
static int dial_tcp_within(const char *hostport, char host[256], int ms)
{
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= 256) {
        errno = EINVAL;
        return -1;
    }
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int gai = getaddrinfo(host, colon + 1, &hints, &ai);
    if (gai) {
        fgr_say("cannot resolve %s: %s", hostport, gai_strerror(gai));
        errno = EHOSTUNREACH;
        return -1;
    }
    int fd = -1, err = ECONNREFUSED;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            socklen_t l = sizeof err;
            if (poll(&p, 1, ms) != 1)
                err = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0)
                err = errno;
            if (err == 0)
                break;
        } else if (errno == 0 || errno == EISCONN) {
            break;
        } else {
            err = errno;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        errno = err;
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &(int){1}, sizeof(int));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &(int){5}, sizeof(int));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &(int){2}, sizeof(int));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &(int){5}, sizeof(int));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &(unsigned){FGR_TCP_TIMEOUT_S * 1000}, sizeof(unsigned));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static int dial_tcp(const char *hostport, char host[256])
{
    return dial_tcp_within(hostport, host, FGR_TCP_TIMEOUT_S * 1000);
}

/* Reads one frame's body (at most max bytes) into a new buffer; NULL, having
 * said why, when there is none. */
static uint8_t *read_frame(int fd, uint32_t max, uint32_t *n, const char *what)
{
    uint8_t lenb[4];
    if (conn_read(fd, lenb, 4)) {
        fgr_say("no %s from %s: %s", what, address(), errno ? strerror(errno) : "the server closed the connection");
        return NULL;
    }
    *n = (uint32_t)lenb[0] | (uint32_t)lenb[1] << 8 | (uint32_t)lenb[2] << 16 | (uint32_t)lenb[3] << 24;
    uint8_t *body = *n >= 4 && *n <= max ? malloc(*n) : NULL;
    if (!body || conn_read(fd, body, *n)) {
        free(body);
        fgr_say("bad %s from %s", what, address());
        return NULL;
    }
    return body;
}

/* The bytes of a small file named by variable var, without trailing white
 * space: their length (cap when there are that many or more), or -1 having
 * said why not. */
static long read_small(const char *path, const char *var, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fgr_say("cannot read %s (%s): %s", path, var, strerror(errno));
        return -1;
    }
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            fgr_say("cannot read %s (%s): %s", path, var, strerror(errno));
            close(fd);
            return -1;
        }
        n += (size_t)k;
        if (k == 0 || n == cap)
            break;
    }
    close(fd);
    while (n && n < cap && (buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\r' || buf[n - 1] == '\n'))
        n--;
    return (long)n;
}

/* The token in FLEXGV_REMOTE_TOKEN_FILE, without trailing white space:
 * its length (0 when the variable is unset), or -1 having said why not. */
static long read_token(char *tok, size_t cap)
{
    const char *path = getenv("FLEXGV_REMOTE_TOKEN_FILE");
    if (!path || !*path)
        return 0;
    long n = read_small(path, "FLEXGV_REMOTE_TOKEN_FILE", tok, cap);
    if (n < 0)
        return -1;
    if (n < FGR_MIN_TOKEN || n > FGR_MAX_TOKEN) {
        fgr_say("the token file %s holds %ld bytes of token%s, want %u to %u", path, n, (size_t)n == cap ? " or more" : "",
            FGR_MIN_TOKEN, FGR_MAX_TOKEN);
        return -1;
    }
    return n;
}

static int kept_cmp(const void *a, const void *b) { return memcmp(a, b, 32); }

/* Authentication: the token, answered by the server before an executor
 * is started for this connection. */
static CUresult authenticate(int fd, char *tok, size_t cap, long n)
{
    struct fgr_buf *w = &conn_w;
    *w = (struct fgr_buf){w->p, 0, w->cap, 0, 0, NULL, 0}; /* copied in: written with conn_write */
    fgr_put_u32(w, 0);
    fgr_put_u32(w, FGR_AUTH_MAGIC);
    fgr_put_u32(w, FGR_PROTO_VERSION);
    fgr_put_buf(w, n ? tok : NULL, (uint64_t)n);
    explicit_bzero(tok, cap);
    if (w->oom)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fgr_finish_frame(w);
    int failed = conn_write(fd, w->p, w->len);
    explicit_bzero(w->p, w->len);
    if (failed) {
        fgr_say("cannot authenticate with %s: %s", address(), strerror(errno));
        return LOST;
    }
    uint32_t len;
    uint8_t *body = read_frame(fd, 1u << 16, &len, "answer to the authentication");
    if (!body)
        return LOST;
    struct fgr_rd r = {body, len, 0};
    CUresult res = (CUresult)fgr_get_u32(&r);
    const char *msg = fgr_get_cstr(&r);
    if (!fgr_rd_done(&r))
        res = LOST, msg = "a malformed answer to the authentication";
    if (res != CUDA_SUCCESS)
        fgr_say("the server %s refused the connection: %s", address(), msg ? msg : "(no reason given)");
    free(body);
    return res;
}

/* The reply to the handshake: the server's protocol, driver, devices and
 * error strings, cached for the process. */
static CUresult hello(int fd, uint32_t transport)
{
    struct fgr_buf *w = &conn_w;
    *w = (struct fgr_buf){w->p, 0, w->cap, 0, 0, NULL, 0}; /* copied in: written with conn_write */
    fgr_put_u32(w, 0);
    fgr_put_u16(w, FGR_OP_HELLO);
    fgr_put_u16(w, 0);
    fgr_put_u32(w, 0);
    fgr_put_u64(w, 0);
    fgr_put_u32(w, FGR_MAGIC);
    fgr_put_u32(w, FGR_PROTO_VERSION);
    fgr_put_u64(w, FGR_OPS_HASH);
    fgr_put_u32(w, (uint32_t)sizeof(void *));
    fgr_put_u32(w, transport);
    if (w->oom)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fgr_finish_frame(w);
    if (conn_write(fd, w->p, w->len)) {
        fgr_say("no handshake with %s: %s", address(), strerror(errno));
        return LOST;
    }
    uint32_t n;
    uint8_t *body = read_frame(fd, 1u << 24, &n, "handshake reply");
    if (!body)
        return LOST;
    struct fgr_rd r = {body, n, 0};
    CUresult res = (CUresult)fgr_get_u32(&r);
    if (res != CUDA_SUCCESS) {
        const char *msg = fgr_get_cstr(&r);
        fgr_say("the server %s refused the connection: %s", address(), msg ? msg : "(no reason given)");
        free(body);
        return res;
    }
    struct fgr_server s = {0};
    fgr_get_u32(&r); /* the server's protocol version, equal to ours (it checked) */
    s.driver_version = (int)fgr_get_u32(&r);
    uint32_t ndev = fgr_get_u32(&r);
    if (ndev > 1024)
        r.bad = 1;
    s.ndev = r.bad ? 0 : (int)ndev;
    s.dev = calloc(s.ndev ? (size_t)s.ndev : 1, sizeof *s.dev);
    for (int d = 0; s.dev && d < s.ndev && !r.bad; d++) {
        const char *name = fgr_get_cstr(&r);
        snprintf(s.dev[d].name, sizeof s.dev[d].name, "%s", name ? name : "");
        const void *u = fgr_get_bytes(&r, sizeof(CUuuid));
        if (u)
            memcpy(&s.dev[d].uuid, u, sizeof(CUuuid));
        for (int a = 1; a < FGR_NATTR; a++) {
            s.dev[d].attr_result[a] = (int)fgr_get_u32(&r);
            s.dev[d].attr[a] = (int)fgr_get_u32(&r);
        }
        /* Managed memory is kept alike here and on the server only at
         * requests and syncpoints (mirror.c): the program may not touch it
         * while kernels run, as on a device without concurrent access, and
         * the device cannot reach its pageable memory or its page tables. */
        s.dev[d].server_concurrent_managed = s.dev[d].attr[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS];
        s.dev[d].attr[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 0;
        s.dev[d].attr[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0;
        s.dev[d].attr[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0;
        s.dev[d].attr[CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST] = 0;
        s.dev[d].attr[CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED] = 0;
        /* What a remote GPU does not give (api/remote.api refuses each), said
         * as a device without it says it, so that programs that check take
         * their own path: multicast objects, GPUDirect RDMA and dma-buf
         * (the NICs and file descriptors of another host), sparse arrays,
         * external semaphores, decompression, graphics' contexts. */
        static const int absent[] = {CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                     CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
                                     CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                                     CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED,
                                     CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED,
                                     CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK,
                                     CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH,
                                     CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED,
                                     CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED};
        for (size_t k = 0; k < sizeof absent / sizeof absent[0]; k++)
            s.dev[d].attr[absent[k]] = 0;
    }
    uint32_t nerr = fgr_get_u32(&r);
    if (nerr > 4096)
        r.bad = 1;
    s.nerr = r.bad ? 0 : (int)nerr;
    s.err = calloc(s.nerr ? (size_t)s.nerr : 1, sizeof *s.err);
    for (int i = 0; s.err && i < s.nerr && !r.bad; i++) {
        s.err[i].code = (int)fgr_get_u32(&r);
        const char *nm = fgr_get_cstr(&r), *ds = fgr_get_cstr(&r);
        s.err[i].name = nm ? strdup(nm) : NULL;
        s.err[i].desc = ds ? strdup(ds) : NULL;
    }
    /* The module images the server keeps, by hash, sorted for lookups. */
    uint32_t nkept = fgr_get_u32(&r);
    if (nkept > FGR_MAX_KEPT_IMAGES)
        r.bad = 1;
    s.nkept = r.bad ? 0 : nkept;
    s.kept = malloc(s.nkept ? (size_t)s.nkept * 32 : 1);
    const void *kept = s.kept ? fgr_get_bytes(&r, (size_t)s.nkept * 32) : NULL;
    if (kept) {
        memcpy(s.kept, kept, (size_t)s.nkept * 32);
        qsort(s.kept, s.nkept, 32, kept_cmp);
    }
    /* Over a socket, the host-function channel's secret (hostfn.c). */
    uint8_t nsecret = fgr_get_u8(&r);
    const void *secret = nsecret == FGR_CHANNEL_SECRET ? fgr_get_bytes(&r, nsecret) : NULL;
    if (nsecret && !secret)
        r.bad = 1;
    if (secret) {
        memcpy(s.secret, secret, sizeof s.secret);
        s.has_secret = 1;
    }
    int ok = s.dev && s.err && s.kept && fgr_rd_done(&r);
    free(body);
    if (!ok) {
        fgr_say("malformed handshake reply from %s", address());
        free(s.dev);
        free(s.kept);
        for (int i = 0; s.err && i < s.nerr; i++) {
            free(s.err[i].name);
            free(s.err[i].desc);
        }
        free(s.err);
        return LOST;
    }
    free(fgr_srv.dev);
    for (int i = 0; i < fgr_srv.nerr; i++) {
        free(fgr_srv.err[i].name);
        free(fgr_srv.err[i].desc);
    }
    free(fgr_srv.err);
    free(fgr_srv.kept);
    fgr_srv = s;
    explicit_bzero(&s, sizeof s);
    return CUDA_SUCCESS;
}

/* Whether the server listed the image of this hash as kept; called with
 * conn_lock held (a call being encoded). */
int fgr_image_is_kept(const uint8_t h[32])
{
    return fgr_srv.kept && bsearch(h, fgr_srv.kept, fgr_srv.nkept, 32, kept_cmp) != NULL;
}

/* Called with conn_lock held. */
size_t fgr_chunk_bytes = 4u << 20;

/* FLEXGV_REMOTE_CHUNK: the most bytes one copy call sends or receives in
 * one frame (4096 to the frame limit; default 4 MiB: on an H200, uploads
 * through PyTorch ran 22-48 % faster than in pieces of 64 MiB, the client
 * sending one piece while the server copies the one before). 0 having said
 * why not. */
static int chunk_from_env(void)
{
    const char *v = getenv("FLEXGV_REMOTE_CHUNK");
    if (!v || !*v)
        return 1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || *v == '-' || n < 4096 || n > FGR_MAX_BUF) {
        fgr_say("FLEXGV_REMOTE_CHUNK=%s: want a number of bytes from 4096 to %llu", v, (unsigned long long)FGR_MAX_BUF);
        return 0;
    }
    fgr_chunk_bytes = (size_t)n;
    return 1;
}

/* FLEXGV_REMOTE_DELAY_US: microseconds added to every round trip, as a
 * longer network path would (0 to 1000000; benchmarks: what latency costs
 * a program). Queued calls are not held up, as on a real path. */
static uint64_t delay_ns;

/* The answer arrives delay_ns later (a spin: a sleep this short would
 * oversleep by tens of microseconds). */
static void delay_added(void)
{
    uint64_t t0 = now_ns();
    while (now_ns() - t0 < delay_ns)
        ;
}

/* FLEXGV_REMOTE_LOG: 1 for errors, 2 for calls, 3 for trace (each call as
 * it goes, and the answer of each that waits, errors among them), 0 for
 * none, -1 for a value it does not know (said; the connection is then
 * refused, as for the other settings). */
enum { LOG_ERRORS = 1, LOG_CALLS = 2, LOG_TRACE = 3 };
static void say_calls(void);
static int log_setting(void)
{
    static int mode = -2;
    int m = __atomic_load_n(&mode, __ATOMIC_ACQUIRE);
    if (m != -2)
        return m;
    const char *v = getenv("FLEXGV_REMOTE_LOG");
    m = !v || !*v                ? 0
        : !strcmp(v, "errors") ? LOG_ERRORS
        : !strcmp(v, "calls")  ? LOG_CALLS
        : !strcmp(v, "trace")  ? LOG_TRACE
                               : -1;
    int was = __atomic_exchange_n(&mode, m, __ATOMIC_ACQ_REL);
    if (m < 0 && was != m)
        fgr_say("FLEXGV_REMOTE_LOG=%s: the settings are errors, calls and trace", v);
    if (m == LOG_CALLS && was != m)
        atexit(say_calls);
    return m;
}

int fgr_log_errors(void) { return log_setting() == LOG_ERRORS || log_setting() == LOG_TRACE; }

/* FLEXGV_REMOTE_LOG=calls: how many calls of each kind waited for the
 * server (round trips) and how many were queued, said at exit; counted
 * under the connection's lock. */
static uint64_t calls_waited[FGR_NUM_OPS], calls_queued[FGR_NUM_OPS];
static uint64_t calls_again; /* sent a second time, once waited */

static void count_again(void)
{
    if (log_setting() == LOG_CALLS)
        calls_again++;
}

static void count_call(int op, int waited)
{
    int m = log_setting();
    if (m == LOG_CALLS && op >= 0 && op < FGR_NUM_OPS)
        (waited ? calls_waited : calls_queued)[op]++;
    if (m == LOG_TRACE && op >= 0 && op < FGR_NUM_OPS)
        fgr_say("[%d] %s%s", (int)syscall(SYS_gettid), fgr_op_names[op] ? fgr_op_names[op] : "(handshake)",
                waited ? "" : " (queued)");
}

static void say_calls(void)
{
    uint64_t w = 0, q = 0;
    for (int i = 0; i < FGR_NUM_OPS; i++) {
        w += calls_waited[i];
        q += calls_queued[i];
    }
    fgr_say("pid %d: %llu round trips, %llu calls queued, %llu writes, %llu calls sent again once waited; by call "
            "(round trips, queued):",
            (int)getpid(), (unsigned long long)w, (unsigned long long)q, (unsigned long long)conn_writes,
            (unsigned long long)calls_again);
    for (;;) { /* most first */
        int top = -1;
        for (int i = 0; i < FGR_NUM_OPS; i++)
            if (calls_waited[i] + calls_queued[i] &&
                (top < 0 || calls_waited[i] + calls_queued[i] > calls_waited[top] + calls_queued[top]))
                top = i;
        if (top < 0)
            break;
        fgr_say("  %-40s %10llu %10llu", fgr_op_names[top] ? fgr_op_names[top] : "(handshake)",
                (unsigned long long)calls_waited[top], (unsigned long long)calls_queued[top]);
        calls_waited[top] = calls_queued[top] = 0;
    }
}

void fgr_log_error(const char *what, CUresult r)
{
    const char *name = NULL;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "an unknown error";
    fgr_say("%s: %s", what, name);
}

CUresult fgr_refused_here(const char *name, CUresult r)
{
    if (r != CUDA_SUCCESS && fgr_log_errors()) {
        char what[128];
        snprintf(what, sizeof what, "%s (refused on the client)", name);
        fgr_log_error(what, r);
    }
    return r;
}

static CUresult failover_locked(void);

static CUresult connect_locked(void)
{
    if (conn_broken && failover_due)
        return failover_locked();
    if (conn_broken)
        return conn_refused ? conn_refused : LOST;
    if (conn_fd >= 0)
        return CUDA_SUCCESS;
    const char *a = address();
    int fd = -1;
    if (!chunk_from_env() || !us_from_env("FLEXGV_REMOTE_DELAY_US", 1000000, &delay_ns) ||
        !us_from_env("FLEXGV_REMOTE_BATCH_US", 100000, &batch_ns) || log_setting() < 0) {
        conn_broken = 1;
        return LOST;
    }
    if (!a) {
        fgr_say("FLEXGV_REMOTE is not set: no GPU server to use (run the program with flexgv run --remote ADDR)");
        conn_broken = 1;
        return LOST;
    }
    if (fgr_failover_setup(a) != 0) {
        conn_broken = 1;
        return LOST;
    }
    /* The token first: a client that has none to give does not connect. */
    char tok[FGR_MAX_TOKEN + 64];
    long ntok = read_token(tok, sizeof tok);
    if (ntok < 0) {
        conn_broken = 1;
        conn_refused = CUDA_ERROR_NOT_PERMITTED;
        return conn_refused;
    }
    char host[256];
    int tls = !strncmp(a, "tls://", 6), shm = !strncmp(a, "shm://", 6);
    /* Across a network, large module images are kept by the server (not
     * with a failover server, which may keep others). */
    fgr_keep_images = (tls || !strncmp(a, "tcp://", 6)) && !fgr_failover_keeping();
    if (!strncmp(a, "unix://", 7)) {
        fd = dial_unix(a + 7);
    } else if (shm) {
        fd = dial_unix(a + 6);
    } else if (!strncmp(a, "tcp://", 6) || tls) {
        fd = dial_tcp(a + 6, host);
    } else {
        explicit_bzero(tok, sizeof tok);
        fgr_say("FLEXGV_REMOTE=%s: want unix:///PATH, shm:///PATH, tcp://HOST:PORT or tls://HOST:PORT", a);
        conn_broken = 1;
        return LOST;
    }
    if (fd < 0) {
        explicit_bzero(tok, sizeof tok);
        fgr_say("cannot reach the GPU server %s: %s", a, strerror(errno));
        conn_broken = 1;
        return LOST;
    }
    if (tls && !(conn_tls = fgr_tls_connect(fd, host, a))) {
        explicit_bzero(tok, sizeof tok);
        close(fd);
        conn_broken = 1;
        return LOST;
    }
    CUresult r = authenticate(fd, tok, sizeof tok, ntok);
    if (r == CUDA_SUCCESS)
        r = hello(fd, shm ? FGR_TRANSPORT_SHM : FGR_TRANSPORT_SOCKET);
    if (r == CUDA_SUCCESS && shm) {
        /* The calls go through rings in memory shared with the executor. */
        int mfd;
        if (fgr_ring_create(&conn_ring, fd, &mfd) != 0) {
            fgr_say("cannot make the shared memory for %s: %s", a, strerror(errno));
            r = LOST;
        } else {
            if (fgr_send_fd(fd, mfd) != 0) {
                fgr_say("cannot hand the shared memory to %s: %s", a, strerror(errno));
                r = LOST;
            }
            close(mfd);
        }
        /* Then the heap pinned host memory is carved from; without one
         * (an address-space limit, say), an empty memory says so. Calls
         * kept for a failover server get none: a copy made again there
         * must carry the bytes it copied, not name pages that have since
         * changed. */
        uint64_t at = 0;
        int heap = !fgr_failover_keeping();
        if (r == CUDA_SUCCESS && heap && fgr_heap_make(&mfd, &at) != 0) {
            fgr_say("no pinned heap shared with %s (%s): pinned memory is the program's own, copied as pageable memory is",
                    a, strerror(errno));
            heap = 0;
        }
        if (r == CUDA_SUCCESS && !heap && (mfd = fgr_heap_none()) < 0) {
            fgr_say("cannot make the shared memory for %s: %s", a, strerror(errno));
            r = LOST;
        }
        if (r == CUDA_SUCCESS) {
            __atomic_store_n(&conn_ring.m->heap_base, at, __ATOMIC_RELEASE);
            if (fgr_send_fd(fd, mfd) != 0) {
                fgr_say("cannot hand the pinned heap to %s: %s", a, strerror(errno));
                r = LOST;
            }
            close(mfd);
        }
    }
    if (r != CUDA_SUCCESS) {
        conn_close(fd);
        conn_broken = 1;
        conn_refused = r == LOST ? CUDA_SUCCESS : r;
        return r;
    }
    __atomic_store_n(&conn_fd, fd, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

int fgr_reach(const char *addr, int ms)
{
    char host[256];
    int tcp = !strncmp(addr, "tcp://", 6) || !strncmp(addr, "tls://", 6);
    int fd = tcp ? dial_tcp_within(addr + 6, host, ms) : dial_unix(addr + (strncmp(addr, "shm://", 6) ? 7 : 6));
    if (fd < 0)
        return errno ? errno : ECONNREFUSED;
    close(fd);
    return 0;
}

/* The host-function channel: dialed as the connection was, authenticated
 * by the token and the secret the handshake gave (remote/wire.h). Its own
 * TLS session; the frames are written and read here alone, not through
 * conn_w or conn_tls. */
int fgr_channel_open(void **tls, int locked)
{
    if (!locked)
        pthread_mutex_lock(&conn_lock);
    int ok = conn_fd >= 0 && !conn_broken && !conn_ring.m && fgr_srv.has_secret;
    uint8_t secret[FGR_CHANNEL_SECRET];
    if (ok)
        memcpy(secret, fgr_srv.secret, sizeof secret);
    if (!locked)
        pthread_mutex_unlock(&conn_lock);
    if (!ok)
        return -1;
    const char *a = address();
    char tok[FGR_MAX_TOKEN + 64], host[256];
    long ntok = read_token(tok, sizeof tok);
    int fd = -1;
    *tls = NULL;
    if (ntok >= 0) {
        int tcp = !strncmp(a, "tcp://", 6) || !strncmp(a, "tls://", 6);
        fd = tcp ? dial_tcp(a + 6, host) : dial_unix(a + 7);
        if (fd < 0)
            fgr_say("cannot open the host-function channel to %s: %s", a, strerror(errno));
    }
    if (fd >= 0 && !strncmp(a, "tls://", 6) && !(*tls = fgr_tls_connect(fd, host, a))) {
        close(fd);
        fd = -1;
    }
    struct fgr_buf w = {0};
    if (fd >= 0) {
        fgr_put_u32(&w, 0);
        fgr_put_u32(&w, FGR_CHANNEL_MAGIC);
        fgr_put_u32(&w, FGR_PROTO_VERSION);
        fgr_put_bytes(&w, secret, sizeof secret);
        fgr_put_buf(&w, ntok ? tok : NULL, (uint64_t)ntok);
        fgr_finish_frame(&w);
    }
    explicit_bzero(tok, sizeof tok);
    explicit_bzero(secret, sizeof secret);
    int failed = fd < 0 || w.oom || (*tls ? fgr_tls_write_all(*tls, w.p, w.len) : fgr_write_all(fd, w.p, w.len));
    if (w.p)
        explicit_bzero(w.p, w.len);
    free(w.p);
    /* The answer: u32 length, u32 CUresult, the tenant's name or why not. */
    uint8_t hdr[8];
    if (!failed && (*tls ? fgr_tls_read_all(*tls, hdr, 8) : fgr_read_all(fd, hdr, 8)))
        failed = 1;
    uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    uint32_t res = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 | (uint32_t)hdr[7] << 24;
    uint8_t *body = !failed && len >= 4 && len <= (1u << 16) ? malloc(len - 4) : NULL;
    if (!failed && (!body || (*tls ? fgr_tls_read_all(*tls, body, len - 4) : fgr_read_all(fd, body, len - 4))))
        failed = 1;
    if (!failed && res != CUDA_SUCCESS) {
        struct fgr_rd r = {body, len - 4, 0};
        const char *msg = fgr_get_cstr(&r);
        fgr_say("the server %s refused the host-function channel: %s", a, msg ? msg : "(no reason given)");
        failed = 1;
    } else if (failed && fd >= 0) {
        fgr_say("cannot open the host-function channel to %s: %s", a, errno ? strerror(errno) : "no answer");
    }
    free(body);
    if (failed && fd >= 0) {
        if (*tls)
            fgr_tls_free(*tls);
        *tls = NULL;
        close(fd);
        fd = -1;
    }
    return fd;
}

void fgr_conn_swap(struct fgr_conn_saved *other)
{
    pthread_mutex_lock(&conn_lock);
    pthread_mutex_lock(&write_lock);
    struct fgr_conn_saved mine = {conn_fd, conn_tls, conn_ring, 0, fgr_srv, conn_broken, conn_refused};
    mine.staged = fgr_stage_swap(other->staged);
    conn_fd = other->fd;
    conn_tls = other->tls;
    conn_ring = other->ring;
    fgr_srv = other->srv;
    conn_broken = other->broken;
    conn_refused = other->refused;
    program_conn = !program_conn;
    *other = mine;
    pthread_mutex_unlock(&write_lock);
    pthread_mutex_unlock(&conn_lock);
}

int fgr_conn_dial(const char *addr, struct fgr_conn_saved *old)
{
    *old = (struct fgr_conn_saved){.fd = -1};
    fgr_conn_swap(old); /* the current one set aside, none in its place */
    pthread_mutex_lock(&conn_lock);
    char *was = __atomic_exchange_n(&moved_to, (char *)addr, __ATOMIC_ACQ_REL);
    CUresult r = connect_locked();
    __atomic_store_n(&moved_to, was, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&conn_lock);
    if (r == CUDA_SUCCESS)
        return 0;
    fgr_conn_swap(old); /* what failed (closed) is dropped */
    fgr_conn_drop(old);
    return -1;
}

void fgr_conn_drop(struct fgr_conn_saved *s)
{
    if (s->fd >= 0) {
        void *tls = s->tls;
        if (tls)
            fgr_tls_free(tls);
        close(s->fd);
    }
    fgr_ring_close(&s->ring);
    free(s->srv.dev);
    for (int i = 0; i < s->srv.nerr; i++) {
        free(s->srv.err[i].name);
        free(s->srv.err[i].desc);
    }
    free(s->srv.err);
    free(s->srv.kept);
    *s = (struct fgr_conn_saved){.fd = -1};
}

static const char *read_answer(struct fgr_call *c, uint32_t *len);

static const uint8_t *replay_answer(uint32_t *n)
{
    struct fgr_call c = {0};
    replaying = 1;
    const char *why = read_answer(&c, n);
    replaying = 0;
    return why ? NULL : conn_r;
}

/* The server was lost: the failover server's executor, which holds the
 * last checkpoint, takes its place and is sent the calls kept since. */
static CUresult failover_locked(void)
{
    failover_due = 0;
    if (conn_fd >= 0) {
        conn_close(conn_fd);
        conn_fd = -1;
    }
    struct fgr_conn_saved s;
    if (fgr_failover_take(&s, lost_why) != 0)
        return LOST;
    int ran = fgr_hostfn_moving(); /* its runner ends before its rings go */
    struct fgr_conn_saved old = {-1, NULL, conn_ring, 0, fgr_srv, 0, 0};
    conn_fd = s.fd;
    conn_tls = s.tls;
    conn_ring = s.ring;
    fgr_srv = s.srv;
    conn_broken = 0;
    conn_refused = CUDA_SUCCESS;
    fgr_conn_drop(&old);
    fgr_conn_moved(fgr_failover_to());
    fgr_hostfn_failover();
    fgr_hostfn_moved(ran, 1);
    CUresult r = fgr_failover_replay(write_conn, replay_answer, &replay_last_n);
    if (r != CUDA_SUCCESS) {
        conn_broken = 1;
        conn_close(conn_fd);
        conn_fd = -1;
    }
    return r;
}

void fgr_conn_moved(const char *addr)
{
    program_conn = 1; /* the new one is the program's now */
    char *a = strdup(addr);
    if (a)
        __atomic_store_n(&moved_to, a, __ATOMIC_RELEASE); /* a former one stays: a thread may be reading it */
}

CUresult fgr_connect(void)
{
    pthread_mutex_lock(&conn_lock);
    CUresult r = connect_locked();
    pthread_mutex_unlock(&conn_lock);
    return r;
}

/* This thread's tag in requests: the executor answers the first error of
 * its queued calls at its next syncpoint, not another thread's. */
static uint32_t thread_tag(void)
{
    static uint32_t last;
    static __thread uint32_t tag;
    if (!tag)
        tag = __atomic_add_fetch(&last, 1, __ATOMIC_RELAXED);
    return tag;
}

/* Waits, with conn_lock held, until no thread reads an answer without it:
 * the executor is told once (fgrNudge, queued) to answer that call now. */
static CUresult wait_for_reader(void)
{
    for (;;) {
        while (reading && !conn_broken) {
            if (!nudged) {
                uint8_t f[4 + FGR_REQ_HDR] = {FGR_REQ_HDR, 0, 0, 0, (uint8_t)FGR_OP_fgrNudge, (uint8_t)(FGR_OP_fgrNudge >> 8),
                                              FGR_FLAG_QUEUED, 0};
                nudged = 1;
                if (write_conn(f, sizeof f))
                    return lost("sending a call", errno);
            }
            wanting++;
            pthread_cond_wait(&conn_cv, &conn_lock);
            wanting--;
        }
        /* Nor a move begun meanwhile, by another thread: its calls' answers
         * are read by it, in the order sent; a call sent now would take
         * one of them as its own. */
        if (!moving || pthread_equal(moving_thread, pthread_self()) || conn_broken)
            break;
        while (moving && !conn_broken)
            pthread_cond_wait(&conn_cv, &conn_lock);
    }
    return conn_broken ? connect_locked() : CUDA_SUCCESS;
}

CUresult fgr_begin(struct fgr_call *c, int op, int queued)
{
    fgr_mirror_before(op);
    CUcontext ctx = fgr_current();
    pthread_mutex_lock(&conn_lock);
    int mover = moving && pthread_equal(moving_thread, pthread_self());
    while (moving && !mover)
        pthread_cond_wait(&conn_cv, &conn_lock);
    CUresult r = connect_locked();
    if (r == CUDA_SUCCESS && !queued)
        r = wait_for_reader();
    /* A move asked for is made when no call is under way, at one of the
     * program's (the client's own, fgr*, may hold its locks): this one
     * waits. Not while a stream capture is open: its state does not
     * move, and draining the device would end the capture (the driver
     * refuses to synchronize a context that captures, and invalidates the
     * capture); at the first call after it ends, unless the calls kept
     * overflow meanwhile (fgr_checkpoint then says why none is taken). */
    if (r == CUDA_SUCCESS && !queued && !mover &&
        (__atomic_load_n(&fgr_captures, __ATOMIC_ACQUIRE) > 0
             ? fgr_checkpoint_overflowing()
             : __atomic_load_n(&move_asked, __ATOMIC_ACQUIRE) || fgr_move_due() || fgr_checkpoint_due()) &&
        !reading && !ticket_waits && !ticket_reader && strncmp(fgr_op_names[op], "fgr", 3)) {
        char *to = __atomic_load_n(&fgr_captures, __ATOMIC_ACQUIRE) > 0 ? NULL
                                                                        : __atomic_exchange_n(&move_asked, NULL, __ATOMIC_ACQ_REL);
        moving_thread = pthread_self();
        __atomic_store_n(&moving, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&conn_lock);
        if (to)
            fgr_move(to);
        else if (fgr_move_due() && !__atomic_load_n(&fgr_captures, __ATOMIC_ACQUIRE))
            fgr_move_end();
        else
            fgr_checkpoint();
        free(to);
        pthread_mutex_lock(&conn_lock);
        __atomic_store_n(&moving, 0, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&conn_cv);
        r = connect_locked();
    }
    /* A new executor has no context before the state it is given. */
    if (mover && (op == FGR_OP_fgrStatePut || op == FGR_OP_fgrStateLoad))
        ctx = NULL;
    if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&conn_lock);
        return r;
    }
    c->w = conn_w;
    c->w.len = 0;
    c->w.oom = 0;
    c->w.by_ref = 1; /* written before the call returns: the caller's bytes need no copy */
    c->w.tail = NULL;
    c->w.tail_len = 0;
    fgr_put_u32(&c->w, 0);
    fgr_put_u16(&c->w, (uint16_t)op);
    fgr_put_u16(&c->w, queued ? FGR_FLAG_QUEUED : 0);
    /* A move's own calls come from no thread of the program's: they take
     * none of its queued calls' errors, which its next syncpoint gets. */
    fgr_put_u32(&c->w, mover ? UINT32_MAX : thread_tag());
    fgr_put_u64(&c->w, (uint64_t)(uintptr_t)ctx);
    c->result = CUDA_ERROR_UNKNOWN;
    c->op = op;
    c->direct = NULL;
    c->direct_n = 0;
    c->direct_done = 0;
    return CUDA_SUCCESS;
}

static void release(struct fgr_call *c)
{
    conn_w = c->w;
    if (ticket_waits || wanting)
        pthread_cond_broadcast(&conn_cv);
    pthread_mutex_unlock(&conn_lock);
}

CUresult fgr_send(struct fgr_call *c)
{
    CUresult r = CUDA_SUCCESS;
    if (c->w.oom) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        fgr_finish_frame(&c->w);
        if (!moving)
            fgr_failover_keep(c->op, &c->w, 0);
        int gathered = batch_queued(&c->w);
        if (gathered < 0 || (!gathered && fgr_buf_write(&c->w, write_conn))) {
            r = lost("sending a call", errno);
            if (failover_due)
                r = connect_locked(); /* made again there with the calls kept */
        }
        count_call(c->op, 0);
    }
    release(c);
    return r;
}

/* Reads the answer to c's request into conn_r (its one large result
 * straight into c->direct): NULL, or why not (errno set; 0 for the
 * server's end). */
/* Prints what the driver printed for the program on the server (an
 * FGR_OUTPUT frame of n bytes, its first word read), through the
 * program's own stdio as the driver does: device printf to stdout, then
 * flushed; assertions to stderr. */
static const char *print_output(uint32_t n)
{
    uint8_t *p = n > 4 ? malloc(n - 4) : NULL;
    if (!p || conn_read(conn_fd, p, n - 4)) {
        free(p);
        return p ? "reading the program's output" : "no memory for the program's output";
    }
    if (p[0] == FGR_OUTPUT_MOVE) {
        char *a = malloc(n - 4);
        if (a) {
            memcpy(a, p + 1, n - 5);
            a[n - 5] = 0;
            free(__atomic_exchange_n(&move_asked, a, __ATOMIC_ACQ_REL));
        }
        free(p);
        return NULL;
    }
    FILE *to = p[0] == 2 ? stderr : stdout;
    if ((p[0] == 1 || p[0] == 2) && !replaying) {
        fwrite(p + 1, 1, n - 5, to);
        fflush(to);
    }
    free(p);
    return NULL;
}

static const char *read_answer(struct fgr_call *c, uint32_t *len)
{
    uint8_t lenb[4];
    uint32_t n;
    for (;;) {
        if (conn_read(conn_fd, lenb, 4))
            return errno ? "waiting for an answer" : "the server closed the connection";
        n = (uint32_t)lenb[0] | (uint32_t)lenb[1] << 8 | (uint32_t)lenb[2] << 16 | (uint32_t)lenb[3] << 24;
        errno = 0;
        if (n < FGR_REP_HDR || n > FGR_MAX_FRAME)
            return "an answer of impossible length";
        if (conn_read(conn_fd, lenb, 4))
            return "reading an answer";
        if (((uint32_t)lenb[0] | (uint32_t)lenb[1] << 8 | (uint32_t)lenb[2] << 16 | (uint32_t)lenb[3] << 24) != FGR_OUTPUT)
            break;
        const char *why = n >= 5 ? print_output(n) : "a malformed output frame";
        if (why)
            return why;
    }
    /* The answer of a call whose one result is large: its head (result,
     * present, length), then the bytes straight where the caller wants them. */
    enum { HEAD = 4 + 1 + 8 };
    size_t now = n;
    if (c->direct && c->direct_n >= FGR_BY_REF_MIN && n == HEAD + c->direct_n)
        now = HEAD;
    if (now > conn_rcap) {
        uint8_t *p = realloc(conn_r, now);
        if (!p) {
            /* The answer cannot be read past: the stream is out of step. */
            errno = ENOMEM;
            return "no memory for an answer";
        }
        conn_r = p;
        conn_rcap = now;
    }
    memcpy(conn_r, lenb, 4); /* its first word, read above */
    if (conn_read(conn_fd, conn_r + 4, now - 4))
        return "reading an answer";
    if (now < n) {
        uint64_t dn = 0;
        for (int i = 0; i < 8; i++)
            dn |= (uint64_t)conn_r[5 + i] << (8 * i);
        int as_expected = conn_r[4] == 1 && dn == c->direct_n;
        /* (an answer of that length with another head cannot be read
         * past: the stream is out of step) */
        errno = 0;
        if (!as_expected)
            return "a malformed answer";
        if (conn_read(conn_fd, c->direct, c->direct_n))
            return "reading an answer";
        c->direct_done = 1;
        n = (uint32_t)now;
    }
    if (delay_ns)
        delay_added();
    *len = n;
    return NULL;
}

/* A waiting call's ticket ended: its answer, with conn_lock held (released
 * while the thread waits). One thread at a time asks which ended. */
static CUresult wait_ticket(uint32_t id)
{
    struct ticket_wait me = {.id = id, .next = ticket_waits};
    ticket_waits = &me;
    while (!me.done && !conn_broken) {
        if (reading || ticket_reader || wanting) {
            pthread_cond_wait(&conn_cv, &conn_lock);
            continue;
        }
        ticket_reader = 1;
        pthread_mutex_unlock(&conn_lock);
        unsigned ids[FGR_MAX_TICKETS], count = 0;
        CUresult res[FGR_MAX_TICKETS];
        CUresult r = fgrWaitTickets(ids, res, FGR_MAX_TICKETS, &count);
        pthread_mutex_lock(&conn_lock);
        ticket_reader = 0;
        for (unsigned i = 0; r == CUDA_SUCCESS && i < count && i < FGR_MAX_TICKETS; i++)
            for (struct ticket_wait *t = ticket_waits; t; t = t->next)
                if (t->id == ids[i] && !t->done) {
                    t->done = 1;
                    t->result = res[i];
                }
        pthread_cond_broadcast(&conn_cv);
    }
    struct ticket_wait **pp = &ticket_waits;
    while (*pp != &me)
        pp = &(*pp)->next;
    *pp = me.next;
    return me.done ? me.result : LOST;
}

/* The round trip of a call that waits for the device (see the top).
 * With first (its calls kept for a failover), the request is flagged
 * wait-only and kept where it is sent: the executor makes it once waited if
 * no other request came between, and its answer is the call's (MADE, its
 * answer in c->r and conn_r); else the call is left to be sent holding the
 * connection (fgr_roundtrip), its frame back in c->w: CUDA_SUCCESS,
 * whether it waited or the connection went meanwhile (the call, sent,
 * finds it lost, and a failover server takes over), or
 * CUDA_ERROR_OUT_OF_MEMORY when the frame could not be put back. Both with
 * conn_lock held. Otherwise the call's answer, as fgr_roundtrip's. */
#define MADE ((CUresult)-4)
static CUresult roundtrip_waiting(struct fgr_call *c, int first)
{
    size_t flen = c->w.len;
    uint8_t *frame = malloc(flen); /* for a call made again (after=) */
    if (!frame) {
        if (first)
            return CUDA_SUCCESS; /* not waited first: the call holds the connection */
        release(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(frame, c->w.p, flen);
    frame[6] |= FGR_FLAG_MAY_PEND | (first ? FGR_FLAG_WAIT_ONLY : 0); /* the header's flags */
    struct fgr_kept_ref kept = first ? fgr_failover_keep_first(c->op, &c->w) : (struct fgr_kept_ref){0};
    conn_w = c->w; /* given back: other threads write while this one reads */
    CUresult r = CUDA_SUCCESS;
    int made = 0;
    for (;;) {
        if (write_conn(frame, flen)) {
            r = lost("sending a call", errno);
            break;
        }
        reading = 1;
        nudged = 0;
        pthread_mutex_unlock(&conn_lock);
        uint32_t n = 0;
        const char *why = read_answer(c, &n);
        int err = errno;
        pthread_mutex_lock(&conn_lock);
        reading = 0;
        pthread_cond_broadcast(&conn_cv);
        c->w = conn_w;
        if (conn_broken && conn_fd >= 0) { /* lost while this thread read */
            conn_close(conn_fd);
            conn_fd = -1;
        }
        if (why || conn_broken) {
            r = why ? lost(why, err) : LOST;
            break;
        }
        c->r = (struct fgr_rd){conn_r, n, 0};
        c->result = (CUresult)fgr_get_u32(&c->r);
        if (first && (uint32_t)c->result == FGR_NOT_MADE)
            break;
        if ((uint32_t)c->result != FGR_PENDING) {
            if (first) {
                made = 1;
                fgr_failover_made(kept, conn_r, n, c->direct_done ? c->direct : NULL, c->direct_done ? c->direct_n : 0);
            }
            break;
        }
        uint32_t id = fgr_get_u32(&c->r);
        int again = fgr_get_u8(&c->r);
        if (!fgr_rd_done(&c->r) || (again && first)) {
            r = lost("a malformed answer", 0);
            break;
        }
        r = wait_ticket(id);
        if (r == LOST || conn_broken) {
            r = LOST;
            break;
        }
        if (first) /* waited: the ticket's answer is the wait's */
            break;
        if (!again || r != CUDA_SUCCESS) {
            c->result = r; /* the wait's answer is the call's */
            c->r = (struct fgr_rd){conn_r, 0, 0};
            r = CUDA_SUCCESS;
            break;
        }
        /* Waited: now the call itself, as a fresh request. */
        if ((r = wait_for_reader()) != CUDA_SUCCESS)
            break;
        count_again();
        c->direct_done = 0;
    }
    if (made) {
        free(frame);
        return MADE;
    }
    if (first) {
        /* The call, as it was, back in the connection's buffer. */
        c->w.len = 0;
        c->w.oom = 0;
        c->w.tail = NULL;
        c->w.tail_len = 0;
        c->direct_done = 0;
        int ok = fgr_reserve(&c->w, flen) == 0;
        if (ok) {
            memcpy(c->w.p, frame, flen);
            c->w.p[6] &= (uint8_t) ~(FGR_FLAG_MAY_PEND | FGR_FLAG_WAIT_ONLY);
            c->w.len = flen;
        }
        free(frame);
        return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    free(frame);
    if (r != CUDA_SUCCESS)
        release(c);
    return r;
}

CUresult fgr_roundtrip(struct fgr_call *c)
{
    CUresult r;
    if (c->w.oom) {
        release(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fgr_finish_frame(&c->w);
    count_call(c->op, 1);
    if ((fgr_op_waits[c->op] || c->op == FGR_OP_fgrWaitTickets) && !c->w.tail) {
        /* With a failover server, a call that waits holds the connection,
         * so that the calls kept are in the order the server made them;
         * but first it waits without holding it, for a thread that would
         * wait for another's later call through the device. */
        if (!fgr_failover_keeping() || c->op == FGR_OP_fgrWaitTickets)
            return roundtrip_waiting(c, 0);
        if (!moving) {
            r = roundtrip_waiting(c, 1);
            if (r == MADE)
                return CUDA_SUCCESS;
            if (r != CUDA_SUCCESS) {
                release(c);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            count_again();
        }
    }
    if (!moving)
        fgr_failover_keep(c->op, &c->w, 1);
    uint32_t n = 0;
    const char *why = fgr_buf_write(&c->w, write_conn) ? "sending a call" : read_answer(c, &n);
    if (why) {
        r = lost(why, errno);
        /* With a failover server, the calls kept are made again there, this
         * one last: its answer there is the program's. */
        if (failover_due && (r = connect_locked()) == CUDA_SUCCESS && !(n = replay_last_n))
            r = LOST;
        if (r != CUDA_SUCCESS) {
            release(c);
            return r;
        }
        c->direct_done = 0;
    } else if (!moving) {
        fgr_failover_answered(conn_r, n, c->direct_done ? c->direct : NULL, c->direct_done ? c->direct_n : 0);
    }
    c->r = (struct fgr_rd){conn_r, n, 0};
    c->result = (CUresult)fgr_get_u32(&c->r);
    return CUDA_SUCCESS;
}

void fgr_get_out(struct fgr_call *c, void *p, uint64_t n, int inout)
{
    (void)inout;
    /* An answer without results: the call failed before it was decoded. */
    if (!p || c->r.left == 0 || !fgr_get_u8(&c->r))
        return;
    if (fgr_get_u64(&c->r) != n) {
        c->r.bad = 1;
        return;
    }
    if (c->direct_done && p == c->direct)
        return; /* read in place */
    const void *b = fgr_get_bytes(&c->r, n);
    if (b && n)
        memcpy(p, b, (size_t)n);
}

CUresult fgr_garbled(const char *op)
{
    char why[96];
    snprintf(why, sizeof why, "a malformed answer to %s", op);
    pthread_mutex_lock(&conn_lock);
    CUresult r = lost(why, 0);
    pthread_mutex_unlock(&conn_lock);
    return r;
}

CUresult fgr_end(struct fgr_call *c)
{
    CUresult r = c->result;
    if (!fgr_rd_done(&c->r))
        r = lost("a malformed answer", 0);
    int op = c->op;
    release(c);
    /* A move's or checkpoint's own asks (fgrState*) fail as they probe
     * (a range another executor lacks, a host out of reach): what they
     * made is said by the move or checkpoint. */
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY && fgr_log_errors() && fgr_op_names[op] &&
        strncmp(fgr_op_names[op], "fgrState", 8))
        fgr_log_error(fgr_op_names[op], r);
    else if (r == CUDA_ERROR_NOT_READY && log_setting() == LOG_TRACE && fgr_op_names[op])
        fgr_say("[%d] %s: not ready", (int)syscall(SYS_gettid), fgr_op_names[op]);
    fgr_mirror_after(op, r);
    fgr_hostcopy_after(op, r);
    return r;
}

uint64_t fgr_shadow_new(void)
{
    static uint64_t n;
    return FGR_SHADOW_TAG | (__atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) % FGR_SHADOW_COUNT) << 4;
}

static unsigned char *said; /* per unsupported entry point: said once */

CUresult fgr_unsupported(int idx, const char *name, const char *what)
{
    static int said_arg;
    if (idx >= 0) {
        if (said && !__atomic_exchange_n(&said[idx], 1, __ATOMIC_RELAXED))
            fgr_say("%s is not supported remotely: %s (CUDA_ERROR_NOT_SUPPORTED)", name, what);
    } else if (fgr_log_errors() || !__atomic_exchange_n(&said_arg, 1, __ATOMIC_RELAXED)) {
        fgr_say("%s: %s cannot be sent to the server yet (CUDA_ERROR_NOT_SUPPORTED)", name, what);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* A forked child must not talk on its parent's connection: it drops its
 * copy and connects afresh (its own executor) when it makes a call. */
static void forked_child(void)
{
    pthread_mutex_init(&conn_lock, NULL);
    pthread_cond_init(&conn_cv, NULL);
    reading = nudged = wanting = ticket_reader = 0;
    ticket_waits = NULL;
    /* The parent's gathered calls are its own; its flusher is not here. */
    batch.len = 0;
    flusher_running = 0;
    pthread_mutex_init(&write_lock, NULL);
    fgr_mirror_forked();
    fgr_hostcopy_forked();
    if (conn_fd >= 0)
        close(conn_fd);
    conn_fd = -1;
    conn_tls = NULL; /* the parent's session: not freed here, where a lock of it may be held */
    fgr_tls_forked();
    fgr_ring_close(&conn_ring); /* our view of the parent's rings */
    fgr_stage_forked();
    fgr_hostfn_forked();
    fgr_pools_forked();
    fgr_heap_forked();
    fgr_copy_forked();
    conn_broken = 0;
    conn_refused = CUDA_SUCCESS;
    failover_due = 0;
    program_conn = 1;
    fgr_failover_forked();
    fgr_move_forked();
    /* A thread of the parent may have been mid-call: its buffers are not ours. */
    conn_w = (struct fgr_buf){0};
    conn_r = NULL;
    conn_rcap = 0;
    fgr_local_forked();
    fgr_answers_forked();
    fgr_arena_forked();
}

__attribute__((constructor)) static void client_init(void)
{
    said = calloc((size_t)fgr_nunsupported + 1, 1);
    pthread_atfork(NULL, NULL, forked_child);
}
