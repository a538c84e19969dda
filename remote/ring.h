/* The shared-memory transport (shm:///PATH): after the handshake over the
 * unix socket PATH, the client hands the executor a memfd (SCM_RIGHTS)
 * holding two byte rings, one per direction, and the frames go through
 * them instead of the socket. The socket stays open as a doorbell: a side
 * that waits for the other spins a little, then sleeps on the socket, rung
 * by the other side when it moves on; the socket's end there tells it at
 * once that the other side is gone.
 *
 * The memory is the client's too: the executor reads every index from it
 * once, checks it, and copies a frame out before decoding it, as it does
 * from a socket; an impossible index ends the connection. */
#ifndef FLEXGV_REMOTE_RING_H
#define FLEXGV_REMOTE_RING_H

#include <stddef.h>
#include <stdint.h>

#define FGR_RING_MAGIC 0x47524746u /* "FGRG" */
#define FGR_RING_BYTES (4u << 20)  /* each direction */
/* The staging area after the rings: uploads of FGR_STAGE_MIN bytes or
 * more are written there by the client and copied to the device from it by
 * the executor, which has registered it with the driver (pinned), so the
 * copy is the GPU's DMA and the bytes cross no socket or ring
 * (remote/client/stage.c, remote/executor/stage.c). */
#define FGR_STAGE_BYTES (32u << 20)
#define FGR_STAGE_MIN (64u << 10)
/* After it, the area downloads land in: the executor has the GPU copy
 * there, the client copies out to the program (one at a time). */
#define FGR_STAGE_DOWN_BYTES (8u << 20)
/* Over shm://, the program's pinned host memory (cuMemAllocHost,
 * cuMemHostAlloc) is carved from a second memfd the client hands over
 * after the rings, of this many bytes (sparse: pages exist once written);
 * the executor registers each allocation with the driver, so copies to and
 * from it are the GPU's DMA, asynchronous as natively, with no host copy
 * (remote/client/heap.c, remote/executor/heap.c). */
#define FGR_HEAP_BYTES (64ull << 30)

/* Host functions over shm:// (remote/client/hostfn.c,
 * remote/executor/hostfn.c). Where the program's function is due, the
 * driver runs the executor's gate: it takes a free slot, writes the
 * function's id there, marks it reached and bumps reached_seq; the client's
 * host-function thread runs the function and marks the slot done; the gate
 * then frees the slot and returns, and the stream goes on. Both sides
 * sleep on these words (futexes of the shared mapping), so neither the
 * connection nor the executor's loop is involved: the loop may itself be
 * waiting for the device that waits for the function. */
#define FGR_HOSTFN_SLOTS 64
#define FGR_HOSTFN_KEEP (1ull << 63) /* an id's flag: captured, it runs again */
enum { FGR_HOSTFN_FREE, FGR_HOSTFN_CLAIMED, FGR_HOSTFN_REACHED, FGR_HOSTFN_DONE };
/* ndata: the buffers a host node's earlier copy nodes wrote into the
 * program's pageable memory, which the gate put in the data area (each: u64
 * the executor's name for the side, u64 length, the bytes, padded to 8);
 * the client puts them in place before the function runs. A gate holds
 * the area (data_busy) from writing it until its function is done; copies
 * that do not fit arrive at the next syncpoint, as without it. */
#define FGR_HOSTFN_DATA_BYTES (8u << 20)
struct fgr_hostfn_slot {
    uint64_t id;
    uint32_t state, ndata;
};
struct fgr_hostfn_area {
    uint32_t reached_seq, data_busy;
    uint8_t pad[56];
    struct fgr_hostfn_slot slot[FGR_HOSTFN_SLOTS];
};

/* One direction. head: bytes written, by its producer; tail: bytes read,
 * by its consumer; each bumps its seq after moving and rings the other
 * side when it says it sleeps. */
struct fgr_ring_dir {
    uint64_t head;
    uint32_t head_seq, consumer_sleeps;
    uint8_t pad0[48];
    uint64_t tail;
    uint32_t tail_seq, producer_sleeps;
    uint8_t pad1[48];
};

struct fgr_ring_shm {
    uint32_t magic, size; /* size: bytes of each direction's data */
    uint32_t stage_size, down_size;
    /* Staging: the client hands out its bytes in order (their running
     * total is what each upload names); released is the running total the
     * executor is done copying from (written by it alone). */
    uint64_t released;
    /* Where the client mapped the pinned heap: the executor maps it at the
     * same address if it can, so that kernels reach it by the program's
     * pointers (written by the client before it hands the heap over). */
    uint64_t heap_base;
    uint8_t pad[32];
    struct fgr_ring_dir c2s, s2c;
    struct fgr_hostfn_area hostfn;
    /* then c2s's data, then s2c's, then the staging area, then the
     * downloads' area, then the host functions' data area */
};

/* One side's view. */
struct fgr_ring {
    struct fgr_ring_shm *m;
    struct fgr_ring_dir *out, *in;
    uint8_t *out_data, *in_data;
    uint8_t *stage, *down; /* the staging area, the downloads' */
    uint8_t *hostfn_data;  /* FGR_HOSTFN_DATA_BYTES */
    uint32_t size, stage_size, down_size;
    int sock;                 /* the connection's socket: its end is the peer's */
    int nap_ms;               /* the longest sleep on it (-1: none) */
    uint64_t out_head, in_tail; /* ours, kept here: the shared copies are only told */
};

/* Bytes of the shared memory: rings of size bytes each way, a staging
 * area of stage bytes, a downloads' area of down bytes and the host
 * functions' data area. */
size_t fgr_ring_bytes(uint32_t size, uint32_t stage, uint32_t down);
/* The client's side: a new memfd of two rings (its descriptor in *fd, to be
 * sent to the executor). 0, or -1 with errno. */
int fgr_ring_create(struct fgr_ring *r, int sock, int *fd);
/* The executor's side, of the memfd fd the client sent: checked, mapped.
 * 0, or -1 with errno (EPROTO: not two rings of ours). */
int fgr_ring_attach(struct fgr_ring *r, int sock, int fd);
void fgr_ring_close(struct fgr_ring *r);
/* As fgr_write_all and fgr_read_all: 0, or -1 with errno (0: the peer is
 * gone; EPROTO: an impossible index). */
int fgr_ring_write(struct fgr_ring *r, const void *p, size_t n);
int fgr_ring_read(struct fgr_ring *r, void *p, size_t n);
/* Whether bytes wait to be read. */
int fgr_ring_readable(struct fgr_ring *r);
/* Sleeps until bytes arrive, the peer goes or fd is readable (the executor
 * waiting for its connection and a ticket at once; it may return early).
 * 0, or -1 once the peer is gone. */
int fgr_ring_sleep_or(struct fgr_ring *r, int fd);
/* The pinned heap's memfd: made and mapped by the client (at *base, an
 * address rarely taken, so that the executor can map it there too), or
 * checked and mapped by the executor (at want if it can). 0, or -1 with
 * errno (EPROTO: not one of ours). */
int fgr_heap_create(int *fd, uint8_t **base);
int fgr_heap_map(int fd, uint64_t want, uint8_t **base);
/* An empty memfd the client hands over instead when it has no heap (the
 * executor then maps none: *base NULL). */
int fgr_heap_none(void);
/* The pinned heap's allocations, on either side: disjoint, sorted by
 * offset; the index of the one offset off lies in, or -1 - the index
 * where one holding it would go. */
struct fgr_heap_range {
    uint64_t off, n;
};
static inline int fgr_heap_find(const struct fgr_heap_range *r, int count, uint64_t off)
{
    int lo = 0, hi = count;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (r[mid].off + r[mid].n <= off)
            lo = mid + 1;
        else if (r[mid].off > off)
            hi = mid;
        else
            return mid;
    }
    return -1 - lo;
}
/* Sends fd over the unix socket sock with one byte; receives it. */
int fgr_send_fd(int sock, int fd);
int fgr_recv_fd(int sock);

#endif
