/* Internal interface of the simulated GPU (libcuda.so.1 and
 * libnvidia-ml.so.1 of simgpu/). Device state that other processes must see
 * (memory in use, busy time, per-process usage) lives in a shared state file;
 * everything else is per process. Devices are indexed by their physical
 * index everywhere inside; CUdevice values handed to programs are CUDA
 * ordinals (CUDA_VISIBLE_DEVICES), converted at the API boundary. */
#ifndef FLEXGV_SIM_H
#define FLEXGV_SIM_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "flexgv/cuda_api_gen.h"
#include "flexgv/proc_table.h"

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_MAX_DEVICES 8
#define SIM_MAX_PROCS 128
#define SIM_BUCKET_NS 100000000ull /* busy time is kept per 100 ms of simulated time */
#define SIM_HIST_BUCKETS 16        /* of which the last 1.6 s */
#define SIM_UTIL_NS 1000000000ull  /* NVML's utilization window */
#define SIM_LANES_PER_DEV 4        /* a process's streams on one device run concurrently in up to 4 lanes */
#define SIM_LANES (SIM_MAX_DEVICES * SIM_LANES_PER_DEV)
#define SIM_RING 128               /* items a lane holds; launching into a full lane waits */
#define SIM_STATE_VERSION 10
#define SIM_STATE_VERSION_TEXT "10" /* in the default state file's name: versions never meet */
#define SIM_GRANULARITY (2ull << 20) /* VMM and graph memory pages */

struct sim_config {
    int devices;
    int sms;
    uint64_t mem_bytes;
    uint64_t ctx_mem_bytes;
    uint64_t kernel_ns;
    int driver_version;
    uint64_t timeslice_ns;
    int machine;          /* in the GPUs' UUIDs: another machine's differ */
    uint64_t pitch_align; /* a pitched row's; 0: the driver model's (drvmem.h) */
};

struct sim_bucket {
    uint64_t epoch;
    uint64_t busy_ns;
};

struct sim_device_state {
    uint64_t used_bytes; /* every process, contexts included */
    struct sim_bucket busy[SIM_HIST_BUCKETS];
};

/* A process's slot. Its owner holds an OFD lock on the slot's first byte
 * for its lifetime: a slot whose lock can be taken belongs to a dead
 * process, whatever PID namespace it lived in. Each claim of the slot is a
 * new incarnation (inc), which tags its queued work. */
struct sim_proc_state {
    int32_t pid;   /* in the namespace of the mounted /proc; 0: free */
    uint32_t inc;  /* 24 bits, never 0 once claimed */
    uint32_t lanes; /* bit per lane this incarnation set up */
    uint32_t mps_sms; /* an MPS client: the SMs it runs on; 0: not one */
    uint64_t due_ns;  /* device time its waiter sleeps until (state.c's clock); 0: none */
    uint64_t used_bytes[SIM_MAX_DEVICES];
    /* Process checkpointing (state.c): its CUprocessState, set by a
     * controller; its threads inside a gated driver call; what a checkpoint
     * took off each device, kept in the process's own memory; where a
     * restore moved each of its devices (physical index + 1, 0: not moved). */
    uint32_t ckpt_state;
    uint32_t gated_calls;
    uint8_t moved_to[SIM_MAX_DEVICES];
    uint64_t host_bytes[SIM_MAX_DEVICES];
    struct sim_bucket busy[SIM_MAX_DEVICES][SIM_HIST_BUCKETS]; /* its kernels' time on each device */
};

/* Work queued in a lane (state.c). A kernel, or a mark: an event record,
 * or a wait until another lane of the process has finished some items. */
struct sim_item {
    uint64_t tag; /* inc << 40 | index + 1, stored last: the item is there */
    union {
        uint64_t dur_ns;  /* a kernel; grows while it is the lane's last and pending; SIM_CLOSED once run */
        uint64_t done_ns; /* a mark: when the device reached it */
    };
    uint64_t arrival_ns;
    uint64_t dep; /* kind, and a wait's lane and count (state.c) */
};

struct sim_lane {
    uint64_t head; /* items reserved by its process */
    uint64_t done; /* inc << 40 | items the device finished, as last committed */
    struct sim_item ring[SIM_RING];
};

/* The devices' schedule up to t_ns (state.c), double-buffered. */
struct sim_sched_lane {
    uint64_t finished;
    uint64_t progress_ns; /* of the head kernel */
};

struct sim_sched_proc {
    uint32_t inc;  /* the incarnation this entry describes */
    uint32_t dead; /* found dead: its work is dropped */
    struct sim_sched_lane lanes[SIM_LANES];
};

struct sim_sched_dev {
    int32_t cur; /* the slot holding the device, -1 none */
    uint32_t cur_inc;
    uint64_t slice_end_ns;
};

struct sim_sched {
    uint64_t t_ns;
    struct sim_sched_dev dev[SIM_MAX_DEVICES];
    struct sim_sched_proc procs[SIM_MAX_PROCS];
};

struct sim_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t reserved;
    struct sim_config cfg;
    struct sim_device_state dev[SIM_MAX_DEVICES];
    struct sim_proc_state procs[SIM_MAX_PROCS];
    uint64_t sched_gen; /* sched[sched_gen & 1] is committed; this byte's OFD lock serializes steps */
    uint64_t stall_ns;  /* how long the device's clock has stood still (state.c) */
    uint64_t due_mask[SIM_MAX_PROCS / 64]; /* slots whose due_ns is set */
    struct sim_sched sched[2];
    struct sim_lane lanes[SIM_MAX_PROCS][SIM_LANES]; /* last: sparse until used */
};

/* An event's place in a lane: reached once the lane has finished count
 * items, at ts_ns. */
struct sim_stamp {
    int lane;
    int resolved;
    int untimed; /* ts_ns is not kept */
    uint64_t count;
    uint64_t ts_ns;
};

/* state.c */
extern struct sim_shared *sim;
int sim_attach(void); /* 0 on success; loads config and the shared file */
int sim_sms(void);    /* SMs this process gets: fewer under MPS with an active-thread percentage */
int sim_mps_client(void); /* an MPS control daemon answered when this process attached */
int sim_mps_join(void);   /* joins its MPS server (cuInit): 0, or -1 refused */
uint64_t sim_now_ns(void);                /* the device's clock */
void sim_sleep_until(uint64_t t_ns);      /* until the device's clock reaches t_ns */
/* How the simulated driver rounds and reserves memory (flexgv/drvmem.h):
 * as the real driver of the version it reports. */
const struct fg_drvmem *sim_drv(void);
int sim_mem_reserve(int dev, uint64_t bytes); /* 0 or -1 when the device is full */
/* A module's managed variable, or with device its __device__ one. */
CUresult sim_module_variable(CUdeviceptr *dptr, size_t size, int dev, int device);
/* JIT options as a module load or link takes them: checked as the driver
 * checks them, an info log written where one is asked for. */
CUresult sim_jit_options(unsigned n, const CUjit_option *o, void **v);
/* A module file's text, at most cap - 1 bytes, NUL-ended: its length, or -1. */
long sim_read_text(const char *path, char *buf, size_t cap);
void sim_mem_release(int dev, uint64_t bytes);
void sim_reap_dead(void);
/* Process checkpointing. A driver call that touches the device opens with
 * SIM_GATE(): it waits while a controller holds this process locked, and
 * is counted until it returns, so a lock waits for calls under way. */
int sim_gate_enter(void);
void sim_gate_leave(int *gate);
/* Where this process's physical device dev is now: another after a restore
 * that moved it (its memory and work are counted there). */
int sim_moved(int dev);
#define SIM_GATE() __attribute__((cleanup(sim_gate_leave), unused)) int sim_gate_ = sim_gate_enter()
/* The controller's side, on a target's pid: CUresult values. */
CUresult sim_ckpt_state(int pid, CUprocessState *state);
CUresult sim_ckpt_lock(int pid, unsigned timeout_ms);
CUresult sim_ckpt_checkpoint(int pid);
CUresult sim_ckpt_restore(int pid, const CUcheckpointGpuPair *pairs, unsigned npairs);
CUresult sim_ckpt_unlock(int pid);
void sim_uuid(int dev, CUuuid *uuid);
/* Queues of this process. A count is what a lane must have finished for
 * an item to be done (0: nothing to wait for). */
uint64_t sim_submit_kernel(int lane, uint64_t duration_ns);
uint64_t sim_submit_collective(int lane, uint64_t duration_ns); /* FLEXGV_SIM_COLLECTIVE's group */
uint64_t sim_submit_wait(int lane, const struct sim_stamp *st); /* the lane waits for st */
uint64_t sim_submit_host(int lane);                /* a host function's place: the lane waits there... */
void sim_host_release(int lane, uint64_t count);   /* ...until this, once the function has returned */
uint64_t sim_lane_head(int lane);                               /* count of everything submitted */
void sim_wait(int lane, uint64_t count);                        /* sleeps until finished */
int sim_finished(int lane, uint64_t count);
void sim_stamp_record(struct sim_stamp *st, int lane, int timed);
int sim_stamp_time(struct sim_stamp *st, uint64_t *ts_ns); /* 0 while not reached */
void sim_stamp_wait(struct sim_stamp *st);
void sim_stamp_forget(struct sim_stamp *st); /* before the stamp's memory goes */
/* NVML: busy share (percent) of the device, and of each process with busy
 * time, over (since_ns, now] within the last second; returns how many
 * processes, filling at most n. */
unsigned sim_utilization(int dev);
struct sim_proc_util {
    int32_t pid;
    unsigned pct;
};
int sim_proc_utilization(int dev, uint64_t since_ns, struct sim_proc_util *out, int n, uint64_t *now_ns);

/* cuGetProcAddress table (procs_gen.c). */
extern const struct fg_proc sim_procs[];
extern const int sim_nprocs;

/* ---- per-process driver objects ---- */

struct sim_capture;
struct sim_node;
struct sim_func;

struct sim_green;
struct sim_ctx {
    uint32_t magic;
    int dev; /* physical */
    int primary;
    unsigned flags;
    uint64_t charged_bytes;
    struct sim_stream *legacy;
    struct sim_stream *streams; /* those it made, destroyed with it */
    int blocking_captures; /* streams of this context in capture that sync with the legacy stream */
    unsigned long long id; /* unique in the process, as cuCtxGetId answers */
    CUfunc_cache cache;    /* its cache preference (cuCtxSetCacheConfig) */
    size_t heap;           /* its device heap (cuCtxSetLimit), 0 for the default */
    /* Reserved as the driver does (flexgv/drvmem.h), within charged_bytes:
     * local memory at its per-thread level (the stack limit, or grown by a
     * launch), and pending device launches. */
    uint64_t local_level, local_bytes, pending, pending_bytes;
    /* A green context's (green.c): the SMs its kernels run on (0: all of
     * the device's), and the green context it was made for. */
    int sms;
    struct sim_green *green;
};

#define SIM_CAP_DEPS 8

struct sim_stream {
    uint32_t magic;
    struct sim_ctx *ctx;
    int lane;      /* the queue of its device it runs in (state.c) */
    uint64_t last; /* count its lane must finish for its work so far */
    unsigned flags;
    /* Stream capture (capture.c; changed under its lock): the sequence the
     * stream belongs to, what its next captured node depends on, how many
     * nodes it captured and how many of them another stream of the
     * sequence has waited for. */
    struct sim_capture *cap;
    struct sim_node *deps[SIM_CAP_DEPS];
    int ndeps;
    uint64_t ops, joined_ops;
    /* Its attributes (cuStreamSetAttribute): kept and read back. */
    int priority;
    CUsynchronizationPolicy sync_policy;
    CUaccessPolicyWindow window;
    struct sim_stream *prev, *next; /* its context's streams (exec.c) */
    CUresult gone;                  /* its context went: what it is answered (a tombstone) */
};

struct sim_event {
    uint32_t magic;
    unsigned flags;
    int recorded;
    struct sim_stamp stamp;
    /* Last recorded in a capturing stream (capture.c): the sequence's id,
     * then the stream, its position and its dependencies at that point. */
    uint64_t cap_id;
    struct sim_stream *cap_stream;
    uint64_t cap_ops;
    struct sim_node *deps[SIM_CAP_DEPS];
    int ndeps;
};

/* Arguments of a builtin kernel, copied when a launch is captured. */
struct sim_kargs {
    void *ptr[3];
    uint32_t val;
    int32_t n;
};

/* A kernel node: the builtin's arguments it runs with, and what it was
 * given (cuGraphKernelNodeGetParams_v2's answer): its shape, function or
 * kernel and context, and its parameters' bytes at the function's offsets
 * when they fit (kept; argv points at them once asked for). */
#define SIM_KNODE_PARAMS 8
#define SIM_KNODE_BYTES 256
/* The launch attributes a kernel node keeps, by id (ids up to 10). */
#define SIM_KNODE_ATTRS 11

struct sim_knode {
    struct sim_func *f;
    struct sim_kargs args;
    CUDA_KERNEL_NODE_PARAMS p; /* no parameter pointers */
    CUlaunchAttributeValue attr[SIM_KNODE_ATTRS];
    int kept;
    unsigned n;
    unsigned char bytes[SIM_KNODE_BYTES];
    void *argv[SIM_KNODE_PARAMS];
};

/* Stream memory operations (memory.c): whether count of them (and flags)
 * are the driver's, each on a word of device memory at its width; the
 * writes of checked ones made at once (a graph's node when it runs: its
 * waits are met, as work is made when it is enqueued). */
CUresult sim_memops_check(unsigned int count, const CUstreamBatchMemOpParams *ops, unsigned int flags);
void sim_memops_apply(unsigned int count, const CUstreamBatchMemOpParams *ops);
/* A batch memory operation node of ctx holding checked operations, at most
 * SIM_MEMOP_NODE_OPS (graph.c). */
#define SIM_MEMOP_NODE_OPS 16
struct sim_node *sim_node_memops(CUcontext ctx, unsigned int count, const CUstreamBatchMemOpParams *ops);

/* core.c */
extern int sim_initialized;
/* Arrays (memory.c): whether h is a live array (mip: mipmapped array), and
 * its flags; whether [p, p+n) is device memory. Under no lock. */
int sim_array_known(const void *h, int mip, unsigned *flags);
int sim_valid_range(CUdeviceptr p, size_t n);
extern int sim_ndevices;         /* CUDA ordinals visible to this process */
int sim_phys(CUdevice ordinal);  /* its physical device, -1 if not visible */
CUdevice sim_ordinal(int phys);  /* -1 if not visible */
struct sim_ctx *sim_current_ctx(void);
CUresult sim_check_ctx(struct sim_ctx **out);
/* Whether c is a live context of ours. */
int sim_ctx_valid(CUcontext c);
const char *sim_result_name(CUresult r);

/* A context on sms of device phys's SMs, current nowhere (green.c), and
 * its end (which a green context's own destroy makes). */
struct sim_ctx *sim_ctx_make(int phys, int sms);
void sim_ctx_end(struct sim_ctx *c);

/* exec.c */
struct sim_stream *sim_stream_of(struct sim_ctx *ctx, CUstream h, int per_thread);
void sim_ctx_streams_gone(struct sim_ctx *ctx, CUresult gone);
CUresult sim_stream_make(struct sim_ctx *c, CUstream *phStream, unsigned int flags, int priority);
CUresult sim_stream_arg(CUstream h, int per_thread, struct sim_stream **out);
CUresult sim_stream_wait(struct sim_stream *s);
void sim_ctx_sync(struct sim_ctx *ctx);
void sim_kernel_run(struct sim_stream *s, struct sim_func *f, const struct sim_kargs *a);
/* Prints device printf's lines so far (at a synchronization, as a driver). */
void sim_device_output(void);
void sim_host_enqueue(struct sim_stream *s, CUhostFn fn, CUstreamCallback cb, CUstream stream, void *data);
/* A handle destroyed: its object marked dead (its magic) and kept a while;
 * sim_dead says what a later use gets (NULL, or the process ends under
 * FLEXGV_SIM_STRICT_HANDLES=1). */
#define SIM_DEAD_MAGIC 0x44454144u
void sim_bury(uint32_t *magic, void *p);
void *sim_dead(const char *what, const void *h);
/* Work of s that waits until ready(arg) (called from another thread) holds;
 * arg is freed then. 0 where it cannot be queued. */
int sim_host_wait_until(struct sim_stream *s, int (*ready)(void *arg), void *arg);

/* memory.c: the registry of device addresses, under sim_mem_lock. */
extern pthread_mutex_t sim_mem_lock;
struct sim_gmem;
void sim_pools_trim_after_sync(int dev);
void sim_ctx_release_memory(struct sim_ctx *ctx);
int sim_registry_add_graph(uintptr_t base, size_t size, int dev, struct sim_gmem *m);
void sim_registry_del(uintptr_t base);
struct sim_gmem *sim_registry_gmem(CUdeviceptr p); /* the graph allocation starting at p */

/* capture.c: stream capture. Work for a stream goes through
 * sim_capture_route when sim_stream_captured says so. */
static inline int sim_stream_captured(struct sim_stream *s)
{
    return __atomic_load_n(&s->cap, __ATOMIC_ACQUIRE) ||
           (s == s->ctx->legacy && __atomic_load_n(&s->ctx->blocking_captures, __ATOMIC_ACQUIRE));
}
/* 0: s is not capturing after all, run the work and free n. Otherwise n
 * was added to the capture or freed, and *r says which. */
int sim_capture_route(struct sim_stream *s, struct sim_node *n, CUresult *r);
/* A potentially unsafe call (s NULL) or one that waits for stream s. */
CUresult sim_capture_check(struct sim_stream *s);
CUresult sim_capture_check_ctx(struct sim_ctx *ctx);
CUresult sim_capture_refuse(struct sim_stream *s); /* work that cannot be captured */
CUresult sim_capture_record(struct sim_event *e, struct sim_stream *s, int *captured);
CUresult sim_capture_wait(struct sim_stream *s, struct sim_event *e, int *captured);
CUresult sim_capture_event_use(struct sim_event *e); /* query or synchronize */
void sim_capture_stream_gone(struct sim_stream *s);

/* graph.c: graphs, their nodes, and the graph memory pool. */
struct sim_node *sim_node_kernel(const struct sim_knode *k);
/* The kernel node hNode's parameters: the graph's node (hGraphExec NULL)
 * or its copy in hGraphExec; CUDA_ERROR_INVALID_VALUE for a node unknown
 * there or of another kind. */
CUresult sim_knode_of(CUgraphExec hGraphExec, CUgraphNode hNode, struct sim_knode **k);
/* Adds n to graph after deps (the handles the program gave), or destroys it. */
CUresult sim_graph_add_node(CUgraphNode *out, CUgraph graph, const CUgraphNode *deps, size_t ndeps,
                            struct sim_node *n);
struct sim_node *sim_node_copy(void *dst, const void *src, size_t n);
struct sim_node *sim_node_set(void *dst, unsigned v, size_t n, size_t width);
/* A 3D copy's parameters as cuMemcpy3D checks them (device sides in device
 * memory; no arrays); then the copy itself, on the host-backed memory. */
CUresult sim_copy3d_check(const CUDA_MEMCPY3D *c);
void sim_copy3d_run(const CUDA_MEMCPY3D *c);
struct sim_node *sim_node_host(CUhostFn fn, void *data);
/* n elements of width 1, 2 or 4 bytes at dst set to v (a memset's effect). */
void sim_fill(void *dst, unsigned v, size_t n, size_t width);
struct sim_node *sim_node_alloc(int dev, size_t size, CUdeviceptr *dptr);
struct sim_node *sim_node_free(CUdeviceptr p); /* NULL if p is no graph allocation */
void sim_node_destroy(struct sim_node *n);
struct sim_graph *sim_graph_new(void);

/* userobj.c: the user objects a graph or an executable holds references
 * to, count each. */
struct sim_urefs {
    struct sim_uref {
        struct sim_uobj *o;
        unsigned count;
    } *v;
    size_t n;
};
/* count more references (CU_GRAPH_USER_OBJECT_MOVE: the program's own,
 * moved), or fewer; a copy's own (an executable's, a clone's); all let go,
 * each object whose last they were destroyed. */
CUresult sim_urefs_hold(struct sim_urefs *l, CUuserObject object, unsigned count, unsigned flags);
CUresult sim_urefs_let_go(struct sim_urefs *l, CUuserObject object, unsigned count);
CUresult sim_urefs_copy(struct sim_urefs *to, const struct sim_urefs *from);
void sim_urefs_free(struct sim_urefs *l);
struct sim_graph *sim_graph_of(CUgraph h); /* NULL if h is no live graph */
int sim_node_in(const struct sim_node *n, const struct sim_graph *g);
void sim_graph_destroy(struct sim_graph *g);
CUresult sim_graph_append(struct sim_graph *g, struct sim_node *n, struct sim_node *const *deps, size_t ndeps);
int sim_gmem_unuse(struct sim_gmem *m); /* freed outside a graph (sim_mem_lock held); -1 if not allocated */
void sim_graph_ctx_release(struct sim_ctx *ctx);
/* A conditional handle's value, as a kernel sets it (the builtin setcond). */
void sim_cond_set(CUgraphConditionalHandle h, unsigned value);

/* Events for graphs' event nodes (exec.c): whether e is one, and its
 * record or wait where stream s got to the node. */
int sim_event_valid(CUevent e);
void sim_event_record_on(CUevent e, struct sim_stream *s);
void sim_event_wait_on(CUevent e, struct sim_stream *s);

#endif
