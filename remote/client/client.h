/* The remoting client: a libcuda.so.1 whose entry points are answered
 * locally or forwarded to an executor over one connection per process. */
#ifndef FLEXGV_REMOTE_CLIENT_H
#define FLEXGV_REMOTE_CLIENT_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

#include "flexgv/proc_table.h"

#include "../proto_gen.h"
#include "../options.h"
#include "../ring.h"
#include "../wire.h"
#include "exports_gen.h"

#define FGR_EXPORT __attribute__((visibility("default")))

/* One forwarded call: it holds the connection from fgr_begin to fgr_end. */
struct fgr_call {
    struct fgr_buf w;
    struct fgr_rd r;
    CUresult result;
    int op;
    /* A call whose one result is a large buffer: the answer's bytes are
     * read straight into it (direct_done) rather than copied out of the
     * receive buffer. */
    void *direct;
    uint64_t direct_n;
    int direct_done;
};

/* FLEXGV_REMOTE_LOG=errors: every forwarded call the server answered with
 * an error, and every entry point a lookup did not find, said on stderr
 * (what a program asked that remote GPUs do not give). */
int fgr_log_errors(void);
void fgr_log_error(const char *what, CUresult r);
extern const char *const fgr_op_names[];
extern const unsigned char fgr_op_syncs[];
extern const unsigned char fgr_op_waits[];
extern const unsigned char fgr_op_places[];

/* Uploads through the staging area of shm:// (stage.c): whether n bytes
 * go that way, and the upload (how: FGR_STAGE_*; queued but for a
 * synchronous copy's last piece). s: the stream, the per-thread default
 * one by its handle. */
struct fgr_ring;
struct fgr_ring *fgr_conn_ring(void); /* NULL but over shm:// */
int fgr_stage_wanted(size_t n);
CUresult fgr_stage_upload(CUdeviceptr dst, const void *src, size_t n, CUstream s, unsigned how, int queued);
void fgr_stage_forked(void);
/* The staging area's running total set to other, the old one answered (a
 * connection moving: each executor counts its own). */
uint64_t fgr_stage_swap(uint64_t other);
/* A detached thread of the client's, with every signal blocked (the
 * program's handlers run on its own threads) and stack bytes of stack (0:
 * the usual): 0, or -1 when none could be made. */
int fgr_thread_start(void *(*fn)(void *), void *arg, size_t stack, const char *name);
/* Whether a server's address takes a connection within ms milliseconds
 * (dialed, then closed): 0, or the errno why not. */
int fgr_reach(const char *addr, int ms);
/* Host functions (hostfn.c): enqueued without waiting, run by the client's
 * host-function thread when due; CUDA_ERROR_NOT_SUPPORTED where they
 * cannot be (a socket without a host-function channel: the caller runs
 * them itself). */
CUresult fgr_hostfn_launch(CUstream s, CUhostFn fn, void *data, unsigned pt);
/* An id for a function the executor's gate hands back: a graph host
 * node's, kept; a user object's destructor, run once (NOT_SUPPORTED as
 * above). fgr_hostfn_forget lets an id go unused. */
CUresult fgr_hostfn_id(CUhostFn fn, void *data, int keep, unsigned long long *id);
void fgr_hostfn_forget(unsigned long long id);
int fgr_hostfn_of(unsigned long long id, CUhostFn *fn, void **data);
void fgr_hostfn_forked(void);
/* The parent's pools of host memory are not the child's (pools.c). */
void fgr_pools_forked(void);
/* Downloads through the downloads' area (one at a time). */
int fgr_stage_down_wanted(size_t n);
CUresult fgr_stage_download(void *dst, CUdeviceptr src, size_t n, CUstream s);

/* The pinned heap of shm:// (heap.c): made at connect (its memfd in *fd,
 * to hand over); an allocation (NULL: none, the program's memory is then
 * its own) and its freeing (0: not the heap's); whether n bytes at p lie in
 * it (*off: where), and copies between it and the device (wait: a
 * synchronous copy). */
int fgr_heap_make(int *fd, uint64_t *base);
/* *mapped: whether kernels reach it by its address (the executor mapped
 * the heap at the same address and registered it as device memory). */
void *fgr_heap_alloc(size_t bytes, int *mapped);
int fgr_heap_mapped(const void *p);
/* Whether p is pinned host memory the device reaches (the heap's or a
 * mirror's). */
int fgr_pinned_host(uint64_t p);
int fgr_heap_free(void *p);
/* Whether the program holds memory of the heap. */
int fgr_heap_used(void);
int fgr_heap_holds(const void *p, size_t n, uint64_t *off);
/* Whether n bytes at p lie in one allocation (*off: where): a copy of them
 * is the GPU's from or into the heap; another (over two allocations, or
 * past one's end) goes as a copy of pageable memory does. */
int fgr_heap_copyable(const void *p, size_t n, uint64_t *off);
CUresult fgr_heap_upload(CUdeviceptr dst, uint64_t off, size_t n, CUstream s, int wait);
CUresult fgr_heap_download(uint64_t off, CUdeviceptr src, size_t n, CUstream s, int wait);
void fgr_heap_forked(void);
/* Device memory at addresses the client chooses (arena.c): a context's
 * allocations gone with it, and a forked child's fresh start. */
void fgr_arena_ctx_gone(CUcontext ctx);
void fgr_arena_forked(void);
/* memcpy, split among helper threads when large (pcopy.c). */
void fgr_copy(void *dst, const void *src, size_t n);
void fgr_copy_forked(void);

/* Device ranges the connection was given, and copies under unified
 * addressing with a side in the program's own memory (uva.c): 1 when
 * done here (*r: its result), 0 to forward the copy as it came. */
void fgr_range_add(uint64_t base, uint64_t size);
/* A graph allocation node's range: a free leaves it the connection's. */
void fgr_range_add_kept(uint64_t base, uint64_t size);
/* p lies in a range the connection was given. */
int fgr_range_has(uint64_t p);
void fgr_range_drop(uint64_t base);
/* Whether [p, p+n) is the program's own memory (outside the server's
 * ranges, mapped here): a unified address that names host memory. */
int fgr_uva_host(uint64_t p, size_t n);
int fgr_uva_copy(CUresult *r, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int per_thread, int async);

/* Pinned host memory kernels may use (mirror.c): an allocation of up to
 * FGR_MAPPED_MAX bytes made on both sides at one address
 * (CUDA_ERROR_NOT_SUPPORTED: make it here alone); freeing one (0: not
 * one); the program's changes sent before a request, the server's bytes
 * taken after a syncpoint; a forked child's copies are its own. */
CUresult fgr_mirror_alloc(void **pp, size_t n);
int fgr_mirror_free(void *p);
/* Whether p lies in such an allocation (then it is also a device address). */
int fgr_mirror_holds(const void *p);
void fgr_mirror_before(int op);
void fgr_mirror_after(int op, CUresult r);
void fgr_mirror_forked(void);
/* Graph copy nodes with a side in the program's pageable memory
 * (hostcopy.c). fgr_captures: captures begun and not ended (a copy then
 * asks whether its stream captures); a copy on a capturing stream made a
 * node through a server buffer (1, *r its answer); the capture a stream
 * ends (0: none with such copies), and what ending it made; a copy node
 * added; the bytes of launches done brought back after a syncpoint. */
extern int fgr_captures;
/* No capture begun and not ended in the program: no stream of its is
 * capturing, and s's answer needs no round trip (frameworks ask before
 * most allocations). */
int fgr_none_capturing(CUstream s);
int fgr_capture_copy(CUresult *r, CUdeviceptr dev, void *host, size_t n, CUstream s, int pt, int d2h);
uint64_t fgr_capture_ending(CUstream s, int pt);
void fgr_capture_ended(uint64_t id, CUresult r, CUgraph *ph);
CUresult fgr_copy_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                       size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx);
void fgr_hostcopy_after(int op, CUresult r);
void fgr_hostcopy_forked(void);
/* A host node's turn brought n bytes of the server buffer srv, which a copy
 * node before it wrote: into the program's memory now (hostfn.c). */
void fgr_hostcopy_early(uint64_t srv, const uint8_t *bytes, size_t n);
/* Managed memory (mirror.c): cuMemAllocManaged is the server's allocation
 * mapped here too; freeing one forgets it (0: not one). */
int fgr_managed_forget(uint64_t p);
/* A library or module unloaded: its managed variables go. */
void fgr_managed_owner_gone(void *owner);
/* A device address a call names: pinned memory kept on both sides is
 * brought back at syncpoints from then on. */
extern int fgr_nmirrors;
void fgr_mirror_mark(uint64_t p);
/* Pinned memory the client made or registered alone (mirror.c): recorded
 * (0: no memory, or registered memory overlapping some already), forgotten
 * when freed or unregistered (0: not such memory; the server's copy goes
 * too), and promoted to be kept on both sides the first time a call names
 * an address p in it as a device address (CUDA_ERROR_NOT_FOUND: p is not
 * in such memory; CUDA_ERROR_NOT_SUPPORTED: refused, said once). */
extern int fgr_nheld;
int fgr_pinned_hold(void *p, size_t n, int registered);
int fgr_pinned_release(void *p, int registered);
CUresult fgr_pinned_promote(uint64_t p);
/* Whether p lies in a range the program registered (its start, size and
 * BUFFER_ID then in *base, *n, *id). */
int fgr_pinned_registered(uint64_t p, uint64_t *base, uint64_t *n, uint64_t *id);
/* A BUFFER_ID for memory the client holds alone: one the driver's never is. */
uint64_t fgr_buffer_id(void);
/* A pointer attribute of the program's own pinned memory (local.c), as the
 * driver answers it of an allocation made or registered in the program:
 * its answer, or none when ptr lies in none. */
CUresult fgr_own_pointer_attr(void *data, int attribute, CUdeviceptr ptr, CUresult none);
static inline void fgr_mirror_named(uint64_t p)
{
    if (__atomic_load_n(&fgr_nheld, __ATOMIC_RELAXED))
        fgr_pinned_promote(p);
    if (__atomic_load_n(&fgr_nmirrors, __ATOMIC_RELAXED))
        fgr_mirror_mark(p);
}

CUresult fgr_begin(struct fgr_call *c, int op, int queued);
/* Sends a queued request and releases the connection: CUDA_SUCCESS unless
 * the connection is lost (the call's own error comes at a syncpoint). */
CUresult fgr_send(struct fgr_call *c);
/* Sends the request and reads the reply up to its results; on failure the
 * connection is released and the error is the call's answer. */
CUresult fgr_roundtrip(struct fgr_call *c);
/* Copies one out (or in-out) result of n bytes into p, if one came back. */
void fgr_get_out(struct fgr_call *c, void *p, uint64_t n, int inout);
/* Releases the connection; the driver's answer, or an error when the reply
 * was malformed. */
CUresult fgr_end(struct fgr_call *c);

/* Reads a regular file under FGR_MAX_BUF whole, NUL-ended (*n without the
 * NUL): CUDA_ERROR_FILE_NOT_FOUND when it cannot. The caller frees *img,
 * NULL when it could not. */
CUresult fgr_read_image(const char *path, char **img, size_t *n);

/* CUDA_ERROR_NOT_SUPPORTED for an entry point (its unsupported index, what
 * the spec's reason) or, idx -1, one of its arguments (what), said once on
 * stderr. */
CUresult fgr_unsupported(int idx, const char *name, const char *what);
/* r, said under FLEXGV_REMOTE_LOG=errors as NAME's refusal on the client
 * (nothing was sent). */
CUresult fgr_refused_here(const char *name, CUresult r);
/* A line on stderr, "flexgv remote: " first. */
void fgr_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A new shadow handle: the name of a stream or event the server makes when
 * the queued call creating it arrives. */
uint64_t fgr_shadow_new(void);
/* Copies over this many bytes go as several calls (FLEXGV_REMOTE_CHUNK). */
extern size_t fgr_chunk_bytes;
extern const int fgr_nunsupported;

/* What the handshake cached: the driver and its devices. */
struct fgr_device {
    char name[256];
    CUuuid uuid;
    int attr_result[FGR_NATTR], attr[FGR_NATTR];
    /* The server's CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: whether
     * its executor may touch managed memory while kernels run (mirror.c);
     * the program is told 0 (conn.c). */
    int server_concurrent_managed;
};
struct fgr_server {
    int driver_version, ndev;
    struct fgr_device *dev;
    int nerr;
    struct fgr_errstr {
        int code;
        char *name, *desc;
    } *err;
    uint8_t (*kept)[32]; /* module images it keeps, by SHA-256, sorted */
    uint32_t nkept;
    int has_secret; /* over a socket: the host-function channel's secret (remote/wire.h) */
    uint8_t secret[FGR_CHANNEL_SECRET];
};
/* Moving the connection to another server (migrate.c): made by the call
 * that finds one asked for, the others waiting meanwhile. */
void fgr_move(const char *to);
/* A move made in two steps: due once its second can be made, which
 * fgr_move_end makes. */
int fgr_move_due(void);
void fgr_move_end(void);
void fgr_move_forked(void);
/* conn.c's part: a connection set aside (dial: the current one set aside
 * and one to addr made current, 0; else -1, said, and nothing changed),
 * swapped with the current one, dropped (closed), and the address used
 * from now on. */
struct fgr_conn_saved {
    int fd;
    void *tls;
    struct fgr_ring ring; /* its rings over shm:// (mapped: ring.m) */
    uint64_t staged;      /* their staging area's running total */
    struct fgr_server srv;
    int broken;
    CUresult refused;
};
/* A failover server (failover.c; all but fgr_checkpoint under the
 * connection's lock): its settings, read at the first connection (-1,
 * said, when they are bad); whether calls are kept; each call's frame
 * kept as it goes (waits: it has an answer) and the answer the program
 * got; whether a checkpoint is due, and one taken (by a thread the others
 * wait for, as for a move). When the server is lost: the waiting executor
 * (-1, said, when there is none), then the kept calls made again on it
 * through write and answer, *last_n the length of the answer to a kept
 * call that had none yet (the call under way). */
int fgr_failover_setup(const char *primary);
int fgr_failover_keeping(void);
void fgr_failover_keep(int op, const struct fgr_buf *w, int waits);
void fgr_failover_answered(const uint8_t *a, uint32_t n, const void *direct, uint64_t dn);
/* A waiting call sent to be made once waited if nothing comes between
 * (wire.h, FGR_FLAG_WAIT_ONLY): kept where it was sent, passed over by a
 * replay until it is answered as made; not made, it stays passed over. */
struct fgr_kept_ref {
    void *k;
    uint64_t gen; /* the kept calls' generation it belongs to */
};
struct fgr_kept_ref fgr_failover_keep_first(int op, const struct fgr_buf *w);
void fgr_failover_made(struct fgr_kept_ref ref, const uint8_t *a, uint32_t n, const void *direct, uint64_t dn);
/* Whether this thread makes a move or checkpoint now (conn.c). */
int fgr_moving_here(void);
int fgr_checkpoint_due(void);
/* The calls kept passed their bound: a checkpoint is due even while a
 * stream capture is open, to say none can be taken. */
int fgr_checkpoint_overflowing(void);
void fgr_checkpoint(void);
struct fgr_conn_saved;
int fgr_failover_take(struct fgr_conn_saved *s, const char *lost_why);
CUresult fgr_failover_replay(int (*write)(const void *, size_t), const uint8_t *(*answer)(uint32_t *), uint32_t *last_n);
const char *fgr_failover_to(void);
void fgr_failover_moved(const char *addr); /* the program moved there: its first server from now on */
void fgr_failover_forked(void);

/* A program's state made again elsewhere (migrate.c; failover.c keeps it
 * on its failover server): the old executor's state's bytes (NULL, having
 * written why), the current (new) executor given them (0, or -1 having
 * written why), the device ranges' bytes copied from old (set aside) to
 * the current one through buf (FGR_COPY_BUF bytes: with a context current,
 * through the copy calls' own pipeline; without, a piece at a time; with
 * ahead, the bytes were copied before and only blocks whose sums differ
 * are copied again), and whether a program built for a's GPUs runs on b's
 * (NULL, or why not). */
#define FGR_COPY_BUF (64u << 20)
uint8_t *fgr_state_save(uint64_t *n, char *why, size_t nwhy);
int fgr_state_load(const uint8_t *p, uint64_t n, char *why, size_t nwhy);
struct fgr_remade;
int fgr_state_copy(const uint8_t *ranges, uint32_t nranges, struct fgr_conn_saved *old, uint8_t *buf, int ahead,
                   struct fgr_conn_saved *undone, struct fgr_conn_saved *before, struct fgr_remade *m, char *why,
                   size_t nwhy);
const char *fgr_same_gpus(const struct fgr_server *a, const struct fgr_server *b);
uint64_t fgr_word(const uint8_t *p, int n); /* n little-endian bytes */
/* Whether the program's state can be made again at to (0, having written
 * why not), and where a state's device ranges lie ({u64 base, u64 size}
 * each; NULL having written why when it is not one this client reads). */
int fgr_state_movable(const char *to, char *why, size_t nwhy);
const uint8_t *fgr_state_ranges(const uint8_t *state, uint64_t n, uint32_t *nranges, char *why, size_t nwhy);
/* The whole of it, to the server to: 1 when the state was made again
 * there (its connection in *made, the current one unchanged), else 0
 * having written why (nothing made). What it took in *m. Between hosts,
 * undone and before (or NULL): executors of the target's server that hold
 * an older copy of the program's memory (an attempt the program's changes
 * undid, the checkpoint before); a range one of them holds is copied from
 * it there, device to device, and then only its blocks whose sums differ
 * from the program's cross between the hosts. */
struct fgr_remade {
    uint64_t state, bytes, pulled; /* the state's bytes, device memory copied, of it device to device */
    uint64_t ahead;                /* device memory copied before, while the program ran (between hosts) */
    uint64_t from_before;          /* of the device memory, from the target's checkpoint before, device to device there */
    uint64_t from_undone;          /* ... from an attempt there the program's changes undid */
    unsigned ms, at[3];            /* ms it took; when the state was read, the target reached, the state made again */
};
int fgr_state_remake(const char *to, struct fgr_conn_saved *undone, struct fgr_conn_saved *before,
                     struct fgr_conn_saved *made, struct fgr_remade *m, char *why, size_t nwhy);
/* The same in two steps (ahead.c), each with the program paused: start
 * (before: the target's connection that holds the checkpoint before, or
 * NULL; 0; 1 when only one step can be made, to shm://; -1 having written why);
 * ready once the structure is made there; end (1 made: the new executor's
 * connection in a->conn; 0 not, having written why; -1 the structure
 * changed meanwhile: make it again). pause: the last step's ms. A
 * structure that changed is made again in two steps up to FGR_AHEAD_TRIES
 * times in a row (a training allocates every few seconds; its structure
 * takes about a second to make), then in one. */
#define FGR_AHEAD_TRIES 3
/* Where the loader copies a range from: the target's checkpoint before, the
 * old server (read), the attempt before there that the program undid. */
enum { FGR_AHEAD_PULL = 1, FGR_AHEAD_READ = 2, FGR_AHEAD_UNDONE = 3 };
struct fgr_ahead {
    struct fgr_conn_saved conn;
    /* Between hosts, an attempt the program's changes undid, kept (where
     * the target has room for another copy) for the next attempt at the
     * same target (to) to copy from there, device to device, or a move or
     * checkpoint in one step; let go at the end of that. The program's
     * thread's alone. */
    struct fgr_conn_saved undone;
    char *to;
    /* Between hosts: another connection to the old server, and each
     * range's token, with which the loader copies device memory ahead. */
    struct fgr_conn_saved helper;
    uint8_t *tokens;
    uint8_t *from; /* each range's: 0 (not copied ahead), FGR_AHEAD_PULL or FGR_AHEAD_READ */
    int copied;    /* the loader copied it all ahead */
    uint8_t *state;
    uint64_t n;
    unsigned long long generation;
    struct fgr_remade m;
    unsigned pause;
    int loading; /* the loader was started ... */
    int done;    /* ... and ended: 1 made, 2 not (why) */
    int claimed; /* the loader ended, or the program gave it up */
    int orphaned, gone; /* given up while the loader ran; and that loader since ended: a new attempt may start */
    char why[256];
};
int fgr_ahead_start(struct fgr_ahead *a, const char *to, struct fgr_conn_saved *before, char *why, size_t nwhy);
int fgr_ahead_ready(const struct fgr_ahead *a);
/* What was copied ahead, for a line that says what a move took ("" when
 * nothing was). */
const char *fgr_ahead_said(const struct fgr_remade *m);
int fgr_ahead_end(struct fgr_ahead *a, char *why, size_t nwhy);
void fgr_ahead_abandon(struct fgr_ahead *a);
/* Of the ranges not yet placed (src[i] 0), those the executor of c (or
 * none) holds on the target's server: their tokens there, src[i] = kind. */
void fgr_state_held(struct fgr_conn_saved *c, uint8_t kind, const uint8_t *ranges, uint32_t nranges, uint8_t *tokens,
                    uint8_t *src);
/* The undone attempt kept at to, if any (NULL), and letting it go. */
struct fgr_conn_saved *fgr_ahead_undone(struct fgr_ahead *a, const char *to);
void fgr_ahead_drop_undone(struct fgr_ahead *a);
void fgr_ahead_forked(struct fgr_ahead *a);
int fgr_conn_dial(const char *addr, struct fgr_conn_saved *old);
const char *fgr_conn_address(void); /* the server's, as dialled */
void fgr_conn_swap(struct fgr_conn_saved *other);
void fgr_conn_drop(struct fgr_conn_saved *s);
void fgr_conn_moved(const char *addr);
/* Whether host functions run on a thread of their own, bound to this
 * connection's rings or channel (hostfn.c). */
int fgr_hostfn_bound(void);
/* A connection moving (its streams drained): its host-function runner
 * ends (whether one ran); then made again for the new one. */
int fgr_hostfn_moving(void);
void fgr_hostfn_moved(int ran, int locked);
/* With a failover server: a checkpoint taken, and the program going on
 * elsewhere (what its replay runs again is answered, not run). */
void fgr_hostfn_checkpoint(void);
void fgr_hostfn_failover(void);
/* TLS over a connected socket to host (tls.c): the session, or NULL having
 * said why (addr names the server). Whole-buffer I/O as fgr_read_all and
 * fgr_write_all answer it. */
void *fgr_tls_connect(int fd, const char *host, const char *addr);
int fgr_tls_write_all(void *s, const void *p, size_t n);
int fgr_tls_read_all(void *s, void *p, size_t n);
void fgr_tls_free(void *s);
/* In a forked child: the parent's session is not ours, nor its lock. */
void fgr_tls_forked(void);

/* Connects and shakes hands once per process (again in a forked child). */
CUresult fgr_connect(void);
/* Opens the connection's host-function channel (hostfn.c): its socket, with
 * *tls its TLS session for tls://; -1 having said why not. */
int fgr_channel_open(void **tls, int locked);
extern struct fgr_server fgr_srv;
extern int fgr_initialized;
/* Whether large module images are sent to be kept by the server (a
 * connection across a network), and whether it keeps one. */
extern int fgr_keep_images;
int fgr_image_is_kept(const uint8_t h[32]);

/* The calling thread's current context (top of its stack), or NULL. */
CUcontext fgr_current(void);
void fgr_ctx_forget(CUcontext ctx);
void fgr_ctx_unstack(CUcontext ctx);
CUresult fgr_ctx_push(CUcontext ctx);
/* In a forked child (local.c): the forking thread's stack named the parent's
 * contexts, and the pinned allocations and locks were the parent's. */
void fgr_local_forked(void);
/* Forgets cached kernel parameter layouts (their functions may be gone). */
void fgr_kparams_flush(void);

/* Kernel parameter layout of a function, from cuFuncGetParamInfo. */
struct fgr_kparams {
    uint32_t n;
    const uint32_t *size;
};
/* (Before the launch is sent, outside the connection's lock, it and
 * fgr_extra_check promote the pinned memory its pointers name.) */
/* An answer that fails a check of its own: the server is lost. */
CUresult fgr_garbled(const char *op);
CUresult fgr_kparams_layout(CUfunction f, void **params, struct fgr_kparams *kp);
/* The layout alone (a kernel node's parameters read back, graphs.c). */
CUresult fgr_kparams_of(CUfunction f, struct fgr_kparams *kp);
void fgr_put_kparams(struct fgr_buf *w, const struct fgr_kparams *kp, void **params);
/* A launch's extra (local.c): the parameters packed in one buffer, which
 * travel as bytes; an extra with other entries is not supported. */
struct fgr_extra {
    int present;
    const void *buf;
    size_t n;
};
CUresult fgr_extra_check(void **extra, void **params, struct fgr_extra *ex, const char *name);
void fgr_put_extra(struct fgr_buf *w, const struct fgr_extra *ex);
void fgr_put_image(struct fgr_buf *w, const void *image);
void fgr_put_launchcfg(struct fgr_buf *w, const CUlaunchConfig *cfg);
CUresult fgr_launchcfg_check(const CUlaunchConfig *cfg, const char *name);
CUresult fgr_opts_check(int kind, const void *opts, void *const *values, unsigned n, const char *name);
void fgr_put_opts(struct fgr_buf *w, int kind, const void *opts, void **values, unsigned n);
void fgr_get_opts_logs(struct fgr_call *c, int kind, const void *opts, void **values, unsigned n);

extern const struct fg_proc fgr_procs[];
extern const int fgr_nprocs;

/* The export tables the client answers: their words, filled by fetch. */
struct fgr_table {
    CUuuid uuid;
    const void **words;
    size_t bytes; /* whole pages */
    CUresult (*fetch)(void);
};
extern const struct fgr_table fgr_tables[];
extern const int fgr_ntables;
/* An export table's word the client does not emulate (index k of them all,
 * said once): CUDA_ERROR_NOT_SUPPORTED. */
CUresult fgr_xt_unsupported(int k, const char *table, int word);
extern unsigned char fgr_xt_said[];
/* A context is going (destroyed, or a primary context reset or released
 * for the last time): its context-local storage's destructors run, what was
 * cached about it is dropped. */
void fgr_ctx_gone(CUcontext ctx);
/* The primary context of a device, as the driver named it. */
void fgr_primary_seen(CUdevice dev, CUcontext ctx);
void fgr_primary_gone(CUdevice dev);
/* Answers kept on the client (answers.c): what the calls that make a
 * context or change one tell, and forgetting. */
void fgr_answers_ctx_device(CUcontext ctx, CUdevice dev);
void fgr_answers_primary_changed(CUdevice dev);
void fgr_answers_forget_all(void);
void fgr_answers_forked(void);

#endif
