/* TLS to a tls:// server, with the machine's OpenSSL 3 (libssl.so.3)
 * loaded when a program first connects to one: programs that use unix://
 * or tcp:// never load it, and the library needs no OpenSSL to build.
 * The server's certificate is verified against FLEXGV_REMOTE_CA_FILE, or
 * the system's trusted certificates, and must name the host (or IP
 * address) the program connects to.
 *
 * One thread may read (an answer to a wait, remote/client/conn.c) while
 * another writes, and an OpenSSL session takes one call at a time: each
 * call is made under a lock, on a non-blocking socket, and a side that
 * must wait for the socket waits without the lock. */
#include "client.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The few OpenSSL 3 functions used, by their documented prototypes. */
static struct {
    const void *(*client_method)(void);
    void *(*ctx_new)(const void *);
    void (*ctx_free)(void *);
    int (*ctx_load)(void *, const char *, const char *);
    int (*ctx_default_paths)(void *);
    void (*ctx_set_verify)(void *, int, void *);
    long (*ctx_ctrl)(void *, int, long, void *);
    void *(*ssl_new)(void *);
    void (*ssl_free)(void *);
    int (*set_fd)(void *, int);
    int (*set1_host)(void *, const char *);
    long (*ctrl)(void *, int, long, void *);
    void *(*get0_param)(void *);
    int (*param_ip)(void *, const char *);
    int (*connect)(void *);
    int (*read)(void *, void *, int);
    int (*write)(void *, const void *, int);
    int (*get_error)(const void *, int);
    int (*get_fd)(const void *);
    long (*verify_result)(const void *);
    const char *(*verify_string)(long);
    unsigned long (*err_get)(void);
    void (*err_string)(unsigned long, char *, size_t);
} ossl;

enum {
    SSL_VERIFY_PEER = 1,
    SSL_CTRL_SET_TLSEXT_HOSTNAME = 55,
    TLSEXT_NAMETYPE_host_name = 0,
    SSL_CTRL_SET_MIN_PROTO_VERSION = 123,
    TLS1_3_VERSION = 0x0304,
    SSL_ERROR_WANT_READ = 2,
    SSL_ERROR_WANT_WRITE = 3,
    SSL_ERROR_SYSCALL = 5,
    SSL_ERROR_ZERO_RETURN = 6,
    SSL_CTRL_MODE = 33,
    SSL_MODE_ENABLE_PARTIAL_WRITE = 1,
    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER = 2,
};

/* One lock for every session (the connection's and its host-function
 * channel's), each waiting for its own socket without it. */
static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];

static void load(void)
{
    void *h = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
    int missing = 0;
#define SYM(field, name)                                                                                               \
    do {                                                                                                               \
        *(void **)&ossl.field = dlsym(h, name);                                                                        \
        if (!ossl.field && !missing++)                                                                                 \
            snprintf(load_error, sizeof load_error, "libssl.so.3 has no %s", name);                                   \
    } while (0)
    SYM(client_method, "TLS_client_method");
    SYM(ctx_new, "SSL_CTX_new");
    SYM(ctx_free, "SSL_CTX_free");
    SYM(ctx_load, "SSL_CTX_load_verify_locations");
    SYM(ctx_default_paths, "SSL_CTX_set_default_verify_paths");
    SYM(ctx_set_verify, "SSL_CTX_set_verify");
    SYM(ctx_ctrl, "SSL_CTX_ctrl");
    SYM(ssl_new, "SSL_new");
    SYM(ssl_free, "SSL_free");
    SYM(set_fd, "SSL_set_fd");
    SYM(set1_host, "SSL_set1_host");
    SYM(ctrl, "SSL_ctrl");
    SYM(get0_param, "SSL_get0_param");
    SYM(param_ip, "X509_VERIFY_PARAM_set1_ip_asc"); /* libcrypto, a dependency of libssl */
    SYM(connect, "SSL_connect");
    SYM(read, "SSL_read");
    SYM(write, "SSL_write");
    SYM(get_error, "SSL_get_error");
    SYM(get_fd, "SSL_get_fd");
    SYM(verify_result, "SSL_get_verify_result");
    SYM(verify_string, "X509_verify_cert_error_string");
    SYM(err_get, "ERR_get_error");
    SYM(err_string, "ERR_error_string_n");
#undef SYM
    if (missing)
        ossl.client_method = NULL;
}

/* OpenSSL writes to the socket with write(2), in reads and frees too (an
 * alert to a peer that sent garbage or reset): a peer that is gone would
 * raise SIGPIPE in the program. The calling thread blocks it for the call
 * and takes back a SIGPIPE the call raised. */
struct nopipe {
    sigset_t old;
    int pending;
};

static void nopipe_begin(struct nopipe *np)
{
    sigset_t pipe, pend;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigpending(&pend);
    np->pending = sigismember(&pend, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &np->old);
}

static void nopipe_end(struct nopipe *np)
{
    if (!np->pending) {
        sigset_t pipe, pend;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        sigpending(&pend);
        if (sigismember(&pend, SIGPIPE)) {
            struct timespec zero = {0, 0};
            int e = errno;
            sigtimedwait(&pipe, NULL, &zero);
            errno = e;
        }
    }
    pthread_sigmask(SIG_SETMASK, &np->old, NULL);
}

/* Why the last OpenSSL call failed, into buf. */
static const char *why(char *buf, size_t cap)
{
    unsigned long e = ossl.err_get();
    if (!e)
        return "the connection ended";
    ossl.err_string(e, buf, cap);
    while (ossl.err_get())
        ;
    return buf;
}

void *fgr_tls_connect(int fd, const char *host, const char *addr)
{
    pthread_once(&load_once, load);
    if (!ossl.client_method) {
        fprintf(stderr, "flexgv remote: %s needs OpenSSL 3 (libssl.so.3) on this machine: %s\n", addr, load_error);
        return NULL;
    }
    char buf[256];
    void *ctx = ossl.ctx_new(ossl.client_method());
    if (!ctx) {
        fprintf(stderr, "flexgv remote: TLS: %s\n", why(buf, sizeof buf));
        return NULL;
    }
    ossl.ctx_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    ossl.ctx_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_3_VERSION, NULL);
    const char *ca = getenv("FLEXGV_REMOTE_CA_FILE");
    int ok = ca && *ca ? ossl.ctx_load(ctx, ca, NULL) : ossl.ctx_default_paths(ctx);
    if (ok != 1) {
        fprintf(stderr, "flexgv remote: cannot load the trusted certificates %s: %s\n",
                ca && *ca ? ca : "of the system", why(buf, sizeof buf));
        ossl.ctx_free(ctx);
        return NULL;
    }
    void *s = ossl.ssl_new(ctx);
    ossl.ctx_free(ctx); /* s holds its own reference */
    if (!s) {
        fprintf(stderr, "flexgv remote: TLS: %s\n", why(buf, sizeof buf));
        return NULL;
    }
    unsigned char ip[16];
    int literal = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    /* The certificate must name what the program asked for: a host name
     * (also sent as the server name), or an IP address. */
    ok = ossl.set_fd(s, fd) == 1 &&
         (literal ? ossl.param_ip(ossl.get0_param(s), host) == 1
                  : ossl.set1_host(s, host) == 1 && ossl.ctrl(s, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                                                              (void *)host) == 1);
    if (ok) {
        struct nopipe np;
        nopipe_begin(&np);
        ok = ossl.connect(s) == 1;
        nopipe_end(&np);
    }
    if (!ok) {
        long v = ossl.verify_result(s);
        if (v != 0)
            fprintf(stderr, "flexgv remote: the server %s is not trusted: %s (FLEXGV_REMOTE_CA_FILE=%s)\n", addr,
                    ossl.verify_string(v), ca && *ca ? ca : "unset: the system's certificates");
        else
            fprintf(stderr, "flexgv remote: no TLS with %s: %s\n", addr, why(buf, sizeof buf));
        ossl.ssl_free(s);
        return NULL;
    }
    /* From here on, every call under session_lock (see the top). */
    ossl.ctrl(s, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, NULL);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return s;
}

/* One read or write of up to n bytes under the lock, waiting for the
 * socket without it: the bytes moved, or -1 (errno 0 for an orderly
 * close). */
static int step(void *s, void *p, size_t n, int writing)
{
    int chunk = n > (1u << 30) ? 1 << 30 : (int)n;
    for (;;) {
        pthread_mutex_lock(&session_lock);
        errno = 0;
        int k = writing ? ossl.write(s, p, chunk) : ossl.read(s, p, chunk);
        int e = k > 0 ? 0 : ossl.get_error(s, k), err = errno;
        if (k <= 0 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            while (ossl.err_get())
                ;
        pthread_mutex_unlock(&session_lock);
        if (k > 0)
            return k;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            struct pollfd w = {.fd = ossl.get_fd(s), .events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT};
            if (poll(&w, 1, -1) < 0 && errno != EINTR)
                return -1;
            continue;
        }
        /* An orderly close is errno 0, as fgr_read_all says it. */
        errno = e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && err == 0) ? 0 : err ? err : EPROTO;
        return -1;
    }
}

int fgr_tls_write_all(void *s, const void *p, size_t n)
{
    const char *c = p;
    struct nopipe np;
    nopipe_begin(&np);
    while (n) {
        int k = step(s, (void *)c, n, 1);
        if (k < 0) {
            if (!errno)
                errno = EPROTO;
            nopipe_end(&np);
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    nopipe_end(&np);
    return 0;
}

int fgr_tls_read_all(void *s, void *p, size_t n)
{
    char *c = p;
    struct nopipe np;
    nopipe_begin(&np);
    while (n) {
        int k = step(s, c, n, 0);
        if (k < 0) {
            nopipe_end(&np);
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    nopipe_end(&np);
    return 0;
}

void fgr_tls_free(void *s)
{
    struct nopipe np;
    nopipe_begin(&np);
    pthread_mutex_lock(&session_lock);
    ossl.ssl_free(s);
    pthread_mutex_unlock(&session_lock);
    nopipe_end(&np);
}

void fgr_tls_forked(void)
{
    pthread_mutex_init(&session_lock, NULL);
}
