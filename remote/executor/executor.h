/* The executor: one process per client connection, calling the real driver
 * for that client alone. When the connection ends, so does the process, and
 * the driver frees everything the client held. */
#ifndef FLEXGV_REMOTE_EXECUTOR_H
#define FLEXGV_REMOTE_EXECUTOR_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>

#include "../proto_gen.h"
#include "../options.h"
#include "../wire.h"

/* An operation's answer when its frame is malformed: the connection closes. */
#define FGR_BAD_FRAME ((CUresult)-1)

/* One request being served: memory it needs until the reply is sent, and
 * the reply being written. */
struct fgr_req {
    struct fgr_buf *reply;
    void **owned;
    int nowned, capowned;
    int oom; /* an allocation failed: the answer is CUDA_ERROR_OUT_OF_MEMORY */
    int bad; /* a length in the frame did not add up */
    int big_used; /* its first large result took the kept buffer (fgr_out) */
    const void *keep; /* a module image to keep once the call succeeded */
    uint64_t keep_n;
};

struct fgr_op_desc {
    const char *name;
    CUresult (*fn)(struct fgr_rd *rd, struct fgr_req *q);
    int syncpoint; /* queued calls' errors surface here */
    uint32_t max_frame; /* the longest request it can carry */
};
/* The longest request of an operation that sends no buffer of a size it
 * chooses (tools/gen: maxFrame), and the largest result of one that is not
 * a download's bytes. */
#define FGR_SMALL_FRAME (1u << 20)
extern const struct fgr_op_desc fgr_ops[FGR_NUM_OPS];

/* An export table the client answers: its fetch, and which operation calls
 * which of the driver's words (a {0, 0} entry ends the list). */
struct fgr_xtable {
    CUuuid uuid;
    int fetch_op;
    struct {
        int op, slot;
    } fns[32];
};
extern const struct fgr_xtable fgr_xtables[];
extern const int fgr_nxtables;
extern void *fgr_real[FGR_NUM_OPS];

/* A buffer of exactly `bytes` (u8 present, u64 n, bytes): into the frame, or
 * copied to aligned memory when aligned is set. NULL when absent. */
void *fgr_get_buf(struct fgr_rd *rd, struct fgr_req *q, uint64_t bytes, int aligned);
char *fgr_get_str(struct fgr_rd *rd);
void *fgr_get_image(struct fgr_rd *rd, struct fgr_req *q);
void fgr_layouts_scan(const void *image, uint64_t n); /* the cubins' parameter layouts, for the check (layout.c) */
/* p, freed when the request is done (NULL stays NULL). */
void *fgr_own(struct fgr_req *q, void *p);
/* Module images kept by hash (images.c): where (NULL: none kept), the
 * handshake's list, keeping one, and one the client named by its hash
 * (NULL, said, when it is not kept). */
void fgr_images_dir(const char *dir);
/* The bytes a folder keeps at most (decimal); -1 when bytes is not a number. */
int fgr_images_max(const char *bytes);
void fgr_images_hello(struct fgr_buf *w);
void fgr_image_keep(const void *p, uint64_t n);
void *fgr_image_kept(const uint8_t h[32], uint64_t n, struct fgr_req *q);
/* The mapped host memory operations (hostmem.c), from the driver's library;
 * forgetting what a context that ended held. */
/* The bytes of pinned host memory a connection may hold here in the heap
 * (heap.c), and again in graph copies' buffers (hostcopy.c): flexgv serve
 * --pinned-max (fgr_pinned_max: bytes; not a number, none), else a quarter
 * of physical memory. */
void fgr_pinned_max(const char *bytes);
uint64_t fgr_pinned_most(void);
void fgr_hostmem_init(void *driver);
void fgr_hostmem_forget(uint64_t ctx);
/* Buffers of graph copy nodes with a side in the client's pageable memory
 * (hostcopy.c), forgotten with their context. */
void fgr_hostcopy_init(void *driver);
/* The same over the driver's functions given (the fuzz tests' own). */
void fgr_hostcopy_use(CUresult (*alloc)(void **, size_t, unsigned int), CUresult (*launch)(CUgraphExec, CUstream));
void fgr_hostcopy_forget(uint64_t ctx);
/* Over a socket: instantiations learn which buffers each host node (one
 * running gate) reads; a gate's, by the node's id (a copy to free; the
 * count). */
void fgr_hostcopy_learning(void *driver, void (*gate)(void *));
struct fgr_span {
    uint64_t base, len;
};
size_t fgr_hostcopy_early(uint64_t id, struct fgr_span **out);
/* Serves fgrHostMapAt (and fgrHostMappedFree) with the driver's calls
 * that pin memory and end that (fgr_hostmem_init; the fuzz tests give
 * their own). */
void fgr_hostmem_promoting(void *reg, void *unreg);
/* JIT linking's image, read back by the client (link.c), after the
 * driver's entry points are known. */
void fgr_link_init(void *driver);
/* Device memory at addresses the client chooses (arena.c); it wraps the
 * context-destroying operations, so it comes after the driver's are known. */
void fgr_arena_init(void *driver);
/* Physical memory h mapped at [p, p+n) of the connection's range (arena.c). */
CUresult fgr_arena_map_handle(CUdeviceptr p, size_t n, CUmemGenericAllocationHandle h);
/* The memory mapped at block, a mapping's start, and its size: 0, else -1. */
int fgr_arena_block(uint64_t block, uint64_t *n, CUmemGenericAllocationHandle *h);
/* The mapping holding [p, p+n): 0 and its start, else -1. */
int fgr_arena_holding(uint64_t p, uint64_t n, uint64_t *block);
/* IPC between the host's connections (ipc.c): after the arena. Memory
 * freed ends what was exported of the allocations in [lo, hi). */
void fgr_ipc_init(void *driver);
/* The same over the driver's functions given (the fuzz tests' own). */
void fgr_ipc_use(void *export, void *import, void *release);
void fgr_ipc_forget(uint64_t lo, uint64_t hi);
/* A move's copy on one host (move.c): the allocation at p exported as a
 * token (ipc.c's), and the pages a token names fetched (their descriptor,
 * -1 when none; their size, and the allocation's offset in them). */
CUresult fgr_ipc_share(CUdeviceptr p, size_t n, void *token);
int fgr_ipc_fetch(const void *token, uint64_t *size, uint64_t *off, uint64_t *len);
/* The parameter-size operations (layout.c). */
void fgr_layout_init(void *driver);
/* Batches of stream memory operations, their addresses checked (memops.c). */
void fgr_memops_init(void *driver);
/* The sizes of f's parameters (a function's or a library kernel's): the
 * answer to fgrParamSizes. */
CUresult fgr_func_sizes(CUfunction f, unsigned int max, unsigned int *count, unsigned int *sizes,
                        unsigned long long *sum);
/* A line on stderr, naming the executor and its client. */
void fgr_logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The server's log (the executor's stderr before fgr_output_capture;
 * NULL: stderr). */
extern FILE *fgr_log;
/* Captures the program's device output (stdout, stderr: output.c), and
 * sends what was printed since the last time, ahead of an answer. */
void fgr_output_capture(void);
void fgr_output_send(int (*write)(const void *, size_t));
void **fgr_get_kparams(struct fgr_rd *rd, struct fgr_req *q);
/* A launch's extra: the parameter buffer and its size, or just the end. */
void **fgr_get_extra(struct fgr_rd *rd, struct fgr_req *q);
CUlaunchConfig *fgr_get_launchcfg(struct fgr_rd *rd, struct fgr_req *q);
/* Whether every event a launch configuration's attributes name is the connection's. */
int fgr_launchcfg_events_ok(const CUlaunchConfig *c);
void *fgr_get_opts(struct fgr_rd *rd, struct fgr_req *q, int kind, void ***values, unsigned *n);
void fgr_reply_opts_logs(struct fgr_req *q, int kind, const unsigned *o, void *const *v, unsigned n);
/* Memory for an out result, NULL on failure (see fgr_out_failed): zeroed,
 * but for a request's first large one (over 4 KiB), which holds what the
 * connection's earlier results left. */
void *fgr_out(struct fgr_req *q, uint64_t bytes);
CUresult fgr_out_failed(struct fgr_req *q);
void fgr_reply_out(struct fgr_req *q, const void *p, uint64_t bytes, int inout, CUresult r);
/* Waits for a stream, unless it is being captured. */
CUresult fgr_drain(CUstream s, int per_thread);
/* Copies of the program's memory on a capturing stream (captured.c): an
 * upload's source becomes bytes kept for the graph; a download is refused,
 * invalidating the capture. CUDA_SUCCESS on a stream not capturing. */
int fgr_capturing(CUstream s, int per_thread);
CUresult fgr_captured_upload(const void **src, size_t n, CUstream s, int per_thread);
CUresult fgr_captured_download(CUstream s, int per_thread, const char *name);
/* Around the executor's own calls to the driver (the events that say an
 * upload or a wait is done, pinning its buffers): the relaxed capture mode,
 * so that a capture the program began in the global or thread-local mode
 * neither refuses them nor is invalidated by them; fgr_unrelax restores the
 * mode fgr_relax returned. */
CUstreamCaptureMode fgr_relax(void);
void fgr_unrelax(CUstreamCaptureMode m);

/* Calls that wait for the device (wait.c). fgr_wait is made by a waiting
 * call before the driver's: FGR_GO to make the call now, FGR_WAITING when
 * it is parked on a ticket (slot fgr_parked), or the call's answer (made
 * again after its ticket ended: slot fgr_resume). */
#define FGR_GO ((CUresult)-2)
#define FGR_WAITING ((CUresult)-3)
#define FGR_PARKED_ANY (-2) /* fgr_parked of an fgrWaitTickets with none ended yet */
enum { FGR_WAIT_STREAM, FGR_WAIT_EVENT, FGR_WAIT_CONTEXT, FGR_AFTER_STREAM };
CUresult fgr_wait(int kind, uint64_t v, int per_thread);
/* fgr_wait_only: the request's FGR_FLAG_WAIT_ONLY; fgr_wait_then_make:
 * its call is made once waited (no other request served meanwhile). */
extern int fgr_may_pend, fgr_wait_only, fgr_wait_then_make, fgr_resume, fgr_parked;
extern unsigned fgr_current_op;
extern uint32_t fgr_thread; /* the client's thread the request comes from */
/* The first error of a thread's queued calls, kept for its next syncpoint,
 * and taken there. */
void fgr_defer(uint32_t thread, CUresult r);
CUresult fgr_deferred_take(uint32_t thread);
void fgr_wait_init(void *driver);
int fgr_wait_bell(void); /* readable when a ticket may have ended */
void fgr_bell_drain(void);
/* Whether slot's ticket ended (asking the driver when nobody waits for it yet). */
int fgr_ticket_poll(int slot);
int fgr_ticket_can_poll(int slot);
/* Starts a thread to wait for it: 0, or -1 (then fgr_ticket_block waits here). */
int fgr_ticket_help(int slot);
void fgr_ticket_block(int slot);
uint32_t fgr_ticket_id(int slot);
void fgr_ticket_release(int slot);
int fgr_ticket_after(int slot);
int fgr_tickets_done_besides(int slot);
int fgr_tickets_waiting(void);

/* Uploads from the staging area of shm:// (stage.c): the driver's
 * functions, the rings once attached, and retiring completed copies. */
struct fgr_ring;
void fgr_stage_init(void *driver);
void fgr_stage_attach(struct fgr_ring *r);
/* Host functions over shm:// (hostfn.c): the driver's entry points, then
 * the shared memory once attached. */
void fgr_hostfn_init(void *driver);
void fgr_hostfn_attach(struct fgr_ring *r);
/* Over a socket (hostfn.c): --hostfn-fd's secret, read at the start
 * (nonzero without one), and the handshake's offer of the channel. */
int fgr_hostfn_channel_fd(int fd);
void fgr_hostfn_hello(struct fgr_buf *w, uint32_t transport);
/* When the host functions the client runs now began (CLOCK_MONOTONIC,
 * ns; the first of several); 0: none runs. */
uint64_t fgr_hostfn_running_since(void);
/* Graph nodes put together from what the client sent (graphs.c). */
void fgr_graphs_init(void *driver);
/* A copy node's sides lie in the connection's ranges; either is an array. */
int fgr_copy3d_in(const CUDA_MEMCPY3D *c);
int fgr_copy3d_arrays(const CUDA_MEMCPY3D *c);
void fgr_stage_reap(void);
/* The pinned heap of shm:// (heap.c): its operations, and its mapping. */
void fgr_heap_init(void *driver);
/* Texture and surface objects, copies with an array side (textures.c). */
void fgr_textures_init(void *driver);
void fgr_heap_attach(uint8_t *base, uint64_t client_base);

/* The driver's functions the executor needs besides the operations. */
struct fgr_drv {
    CUresult (*sync)(CUstream);
    CUresult (*sync_pt)(CUstream);
    CUresult (*capturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*capturing_pt)(CUstream, CUstreamCaptureStatus *);
    CUresult (*capture_mode)(CUstreamCaptureMode *);
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*host_register)(void *, size_t, unsigned int);
    CUresult (*host_unregister)(void *);
    /* events, for what waits for the device (wait.c, stage.c) */
    CUresult (*ev_create)(CUevent *, unsigned);
    CUresult (*ev_record)(CUevent, CUstream);
    CUresult (*ev_record_pt)(CUevent, CUstream);
    CUresult (*ev_query)(CUevent);
    CUresult (*ev_sync)(CUevent);
    CUresult (*ev_destroy)(CUevent);
};
extern struct fgr_drv fgr_drv;

/* What this connection may name (own.c): handles by kind, and device
 * memory ranges. The generated dispatch checks every handle and device
 * pointer a request carries, and records what a call returns. */
enum fgr_handle_kind {
    FGR_H_CUcontext = 1,
    FGR_H_CUmodule,
    FGR_H_CUfunction,
    FGR_H_CUlibrary,
    FGR_H_CUkernel,
    FGR_H_CUstream,
    FGR_H_CUevent,
    FGR_H_CUgraph,
    FGR_H_CUgraphExec,
    FGR_H_CUgraphNode,
    FGR_H_CUarray,
    FGR_H_CUmipmappedArray,
    FGR_H_CUmemoryPool,
    FGR_H_CUmemGenericAllocationHandle,
    FGR_H_CUgreenCtx,
    FGR_H_CUlinkState,
    FGR_H_fgrCtxObject,
    FGR_H_CUuserObject,
    FGR_H_CUdevResourceDesc,
    FGR_H_MEM /* a device range, by its base */
};
extern uint64_t fgr_ctx; /* the request's context: the owner of what it creates */
extern const char *fgr_peer;
int fgr_has(int kind, uint64_t v);
/* Each of n handles (pointer-sized) in arr; NULL: none. */
int fgr_has_n(int kind, const void *arr, uint64_t n);
void fgr_add(int kind, uint64_t v, int okind, uint64_t owner);
/* Shadow handles: id (a value the client named, fgr_is_shadow) stands for
 * the driver's handle real of kind, until real is forgotten. */
void fgr_shadow_add(int kind, uint64_t id, uint64_t real);
/* Handles cross the wire by name (own.c), never as the driver's values.
 * fgr_in is the driver's handle of kind that the client's v names (a
 * name, a shadow handle, NULL or a special stream), FGR_BAD_HANDLE when it
 * names none (which fgr_has refuses); fgr_in_n translates n in place.
 * fgr_out_n turns n of the connection's handles into their names in place:
 * -1 when one has none (it is then NULL). Device addresses are not
 * translated: they are the GPU's virtual addresses, which say nothing of
 * the executor's own memory (but for mapped pinned memory, whose device
 * address is its host address under unified addressing: where the
 * connection's own mapped allocations lie), and every one a request
 * names is checked against the connection's ranges before the driver
 * sees it; the driver would validate them besides. */
#define FGR_BAD_HANDLE UINT64_MAX
uint64_t fgr_in(int kind, uint64_t v);
/* Forgets the request's first refused name (each request starts afresh). */
void fgr_in_reset(void);
void fgr_in_n(int kind, void *arr, uint64_t n);
int fgr_out_n(int kind, void *arr, uint64_t n);
/* fgr_out_n of one handle the driver answered of something the connection
 * reaches (the pool a pointer's memory came from): a device's default
 * pool the connection was not given yet is its from now on, owned by
 * nothing, as cuDeviceGetDefaultMemPool would have given it (fgr_own_init:
 * the driver's calls for it). */
int fgr_out_adopt(int kind, void *p);
void fgr_own_init(void *driver);
/* fgr_names_new_key fills the key names are enciphered with: 0, or -1 when no
 * entropy could be had. */
int fgr_names_new_key(uint32_t k[4]);
/* Whether the connection's v is owned by a handle of kind okind. */
int fgr_owned_by(int kind, uint64_t v, int okind);
/* (kind, v) is owned by (okind, owner) from now on: forgotten with it. */
void fgr_own_by(int kind, uint64_t v, int okind, uint64_t owner);
/* One more reference to a handle the connection has: fgr_drop then takes
 * one away before it forgets the handle. */
void fgr_retain(int kind, uint64_t v);
/* Forgets v and everything it owns. */
void fgr_drop(int kind, uint64_t v);
/* What context ctx made, and what that owns, is dropped; ctx stays (a
 * primary context reset: its handle is the device's again once
 * retained). The streams and events among it are answered `why` from then
 * on (CUDA_ERROR_CONTEXT_IS_DESTROYED, or CUDA_ERROR_INVALID_CONTEXT for a
 * primary context's), as the driver answers them. */
void fgr_drop_with_context(uint64_t ctx, CUresult why);
/* A primary context gone (reset, or released by its last holder): its
 * handle stays, but no request makes it any more, and the retain that
 * brings it back makes it in the connection's state, under its name. */
void fgr_context_idle(uint64_t ctx);
int fgr_context_is_idle(uint64_t ctx);
/* [p, p+n) lies in one range this connection allocated. */
int fgr_mem_in(uint64_t p, uint64_t n);
/* The size of the connection's range that starts at base (0: none does). */
uint64_t fgr_mem_size(uint64_t base);
/* p starts such a range (or is NULL). */
int fgr_mem_base(uint64_t p);
/* No range holds any of [p, p+n) (n > 0). */
int fgr_mem_clear(uint64_t p, uint64_t n);
/* Forgets the ranges that start in [lo, hi). */
void fgr_mem_drop_within(uint64_t lo, uint64_t hi);
void fgr_mem_add(uint64_t base, uint64_t size, int okind, uint64_t owner);
/* A graph allocation node's range: its address is the graph's for as
 * long as the node lives, allocated again at each launch, so a free
 * leaves it recorded; it goes with its owner. */
void fgr_mem_add_kept(uint64_t base, uint64_t size, int okind, uint64_t owner);
/* Records the range the driver says holds p, or the n bytes at p where
 * it says none. */
void fgr_mem_add_found(uint64_t p, uint64_t n, int okind, uint64_t owner);
/* Says the first refusal of the connection, and answers r. */
CUresult fgr_refuse(const char *call, const char *param, uint64_t v, CUresult r);
/* The same for a result of v bytes, more than a call of its kind returns. */
CUresult fgr_refuse_size(const char *call, const char *param, uint64_t v, CUresult r);

/* The journal (journal.c): the requests that made what the connection
 * holds. begin/end bracket each request served; own.c links what a
 * request made (attach, a list per handle or range) and unlinks it when it
 * goes (detach), says each name minted, and while a request is made again
 * takes the names it is to mint (forced: 1 and the name, 0 when not). */
struct fgr_link;
void fgr_journal_begin(const uint8_t *body, uint32_t n, unsigned op);
/* A stream the request being served names (the driver's): the journal
 * keeps what stream captures take (own.c's fgr_in tells it). */
void fgr_journal_stream(uint64_t s);
/* The texture and surface objects the connection holds (textures.c). */
size_t fgr_texture_objects(void);
/* A stream or event the request being served destroys, with what made it. */
void fgr_journal_gone(const struct fgr_link *made);
/* A stream's capture (graphs.c): its CUstreamCaptureStatus, and its id. */
int fgr_capture_of(uint64_t s, uint64_t *id);
void fgr_journal_end(CUresult r);
struct fgr_link *fgr_journal_attach(struct fgr_link *l);
void fgr_journal_detach(struct fgr_link *l);
/* l, also linked to each request of keeps. */
struct fgr_link *fgr_journal_share(struct fgr_link *l, const struct fgr_link *keeps);
/* The operation of the request that made what l is of, and its place in
 * the state fgr_journal_save makes (0, UINT32_MAX: none). */
unsigned fgr_journal_op(const struct fgr_link *l);
uint32_t fgr_journal_seq(const struct fgr_link *l);
/* A device range a request being made again added (own.c). */
void fgr_journal_range(uint64_t base, uint64_t size);
void fgr_journal_named(uint32_t i, uint32_t gen);
int fgr_journal_forced(uint32_t *i, uint32_t *gen);
/* The forced name could not be given: the request is not made again. */
void fgr_journal_misplaced(void);
/* Whether a request of operation op can be one the journal keeps (a
 * state's bytes name no other). */
int fgr_journal_kept_op(unsigned op);
/* The request being served changed (kind, v): it is kept while that lives,
 * in place of an earlier one that set the same (key: the words that say
 * what, journal.c); replace is the same on a list of links. */
void fgr_journal_changed(int kind, uint64_t v, uint32_t key);
struct fgr_link *fgr_journal_replace(struct fgr_link *l, uint32_t key);
/* Sets by-value parameter k of the request being kept to v (what makes
 * it again as it was: the arena's address, not the hint). */
void fgr_journal_patch(uint32_t k, uint64_t v);
/* The request being served is kept as operation op with these arguments
 * (as its frame has them, at most 64 bytes): what makes it again as it
 * was (memory the driver placed, placed there again). */
void fgr_journal_as(unsigned op, const void *args, uint32_t n);
/* The request being served named a module image by its hash, in the len
 * bytes at at: kept, it holds the image itself. */
void fgr_journal_image(const uint8_t *at, uint32_t len, const void *image, uint64_t n);
/* The state's bytes into w: NULL, or why it cannot move. */
const char *fgr_journal_save(struct fgr_buf *w);
/* Counts each request kept or let go, name made or freed and range of
 * memory added or dropped: a state's structure is unchanged while it is
 * (remote/client/failover.c makes a checkpoint's structure ahead of its
 * memory). */
extern uint64_t fgr_generation;
/* fn for each handle of kind the connection holds, with its owner. */
void fgr_each(int kind, void (*fn)(uint64_t v, uint64_t owner));
/* Makes the state of p again, each request through replay: NULL, or why
 * not (maybe written into why). */
const char *fgr_journal_load(const uint8_t *p, uint64_t n, CUresult (*replay)(const uint8_t *, uint32_t),
                             const char *(*err_name)(CUresult), char *why, size_t nwhy);
/* After a load: the driver-placed ranges the new executor placed
 * elsewhere (old address, size, new address), for the reservation of
 * their old pages; how many. */
size_t fgr_journal_moved(const uint64_t **old_size_now);
/* own.c's part: the names' key (set: taken from key), whether no name was
 * given yet, the free names made usable once the state is made again, the
 * device ranges as the state lists them (ops: the operation that made
 * each instead), and the connection's contexts
 * (at most max of them; how many). */
void fgr_names_key(uint32_t key[4], int set);
int fgr_names_fresh(void);
/* The names' table as the state carries it: each name's generation and
 * whether it is free, and the order free ones are reused in; restored after
 * the live ones were made again, so that the new executor mints what the
 * old one would have (a client replaying its calls since gets the same
 * names). NULL, or why not. */
void fgr_names_save(struct fgr_buf *w);
const char *fgr_names_restore(struct fgr_rd *rd);
void fgr_mem_list(struct fgr_buf *w, int ops);
size_t fgr_contexts(uint64_t *ctx, size_t max);
/* A moved connection's memory that the driver placed (module and library
 * variables) is elsewhere in its new executor: where the client's address
 * p now is (p itself when not such), the same for each 8-byte word of
 * kernel parameters, and the table's entries (own.c). */
uint64_t fgr_moved(uint64_t p);
/* The client's address of p here (the other way: a structure answered). */
uint64_t fgr_unmoved(uint64_t p);
/* What an old address becomes once new memory lies there too: in no
 * range (a call is refused) and not canonical (a kernel faults). */
#define FGR_MOVED_GONE 0xdead000000000000ull
void fgr_moved_words(void *p, size_t n);
int fgr_moved_add(uint64_t old, uint64_t size, uint64_t now);
void fgr_moved_settle(void);
/* Moving to another server (move.c): the operations, and the server's
 * control socket (--control-fd), read when it rang (SIGUSR2). */
void fgr_move_init(void *driver, int control_fd, CUresult (*replay)(const uint8_t *, uint32_t));
/* A context of the connection made current when none is (a copy needs
 * one): whether one was pushed, to pop with fgr_context_done. */
int fgr_some_context(void);
void fgr_context_done(int pushed);
/* Device memory copied ahead of a move between hosts (ahead.c): its
 * operations. */
void fgr_ahead_init(void *driver);
void fgr_move_poll(int (*write)(const void *, size_t));

/* Serves one request (its header read, rd at its arguments) into w, a whole
 * reply frame. before: an error that answers the call without running it
 * (the arguments are then not read). NULL, or why the frame is malformed. */
const char *fgr_serve(unsigned op, struct fgr_rd *rd, struct fgr_buf *w, CUresult before);
/* The result a reply frame w answers. */
CUresult fgr_reply_result(const struct fgr_buf *w);
/* Makes a moved connection's request frame again (journal.c), as the
 * executor serves it but for its answer, which only says whether it
 * succeeded: only requests the journal keeps, in a context of the
 * connection (made current with make_current where the call reaches the
 * driver). */
CUresult fgr_replay(const uint8_t *frame, uint32_t n, CUresult (*make_current)(CUcontext));
/* (w is written with fgr_buf_write; what it refers to lives until the next
 * call of fgr_serve, or fgr_trim.) */
/* Once w was written: gives back what the request owned, and the large
 * buffers (w's own, the results') that a large call grew. */
void fgr_trim(struct fgr_buf *w);

#endif
