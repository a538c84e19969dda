/* The remoting protocol's wire format, shared by the client (the remoting
 * libcuda.so.1) and the executor (the server process that calls the real
 * driver). Every frame is a little-endian u32 length followed by that many
 * bytes. The first frame of a connection authenticates it, and is answered
 * by the server (flexgv serve, internal/remote/auth.go) before any executor
 * runs:
 *     request  u32 FGR_AUTH_MAGIC, u32 FGR_PROTO_VERSION, token (u8 present,
 *              u64 n, n bytes; absent when the client has none)
 *     reply    u32 CUresult (0: accepted), string: the tenant's name, or why
 *              the connection is refused (then closed)
 * Then the executor's handshake (FGR_OP_HELLO: magic, protocol, operations
 * hash, pointer size, transport; answered with the devices), for shm:// the
 * rings' memfd (ring.h), then calls:
 *     request  u16 op, u16 flags, u32 thread, u64 context, arguments
 *     reply    u32 CUresult, results
 * Arguments (tools/gen/remote.go): first every by-value parameter as a u64,
 * then each pointer parameter in order: u8 present, then for buffers and
 * strings a u64 byte count and the bytes. Results: for each out or in-out
 * pointer the client passed, u8 sent, then u64 byte count and the bytes;
 * out buffers are sent only when the call succeeded. A request flagged
 * FGR_FLAG_QUEUED gets no reply: its error, if any, is answered by the next
 * syncpoint (api/remote.api) of the same thread, a tag the client gives
 * each of its threads (0 in the handshake). Readers check every
 * length against what is left of the frame and against the size the
 * parameters imply, and never trust the peer. */
#ifndef FLEXGV_REMOTE_WIRE_H
#define FLEXGV_REMOTE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "flexgv/cuda_types.h"

#define FGR_PROTO_VERSION 27u /* 27: a layout's answer carries its check; 26: device memory copied ahead of a move between hosts (fgrStateShareRead, fgrStateSums); 25: a wait-only request makes its call when nothing came between; 24: a host node's copies over shm:// too (its data area), a state's ranges at the program's addresses; 23: a host node's turn brings the buffers its copy nodes wrote; 22: a failover server's replay (fgrStateAlias), the names' table in a state; 21: a connection moved to another server (fgrState*); 20: IPC between a host's connections, a link state's logs, host functions over sockets (a channel); 19: kernel nodes' parameters read and changed; 18: pinned memory promoted (fgrHostMapAt), graph copies through server buffers; 17: the program's device output; 16: managed memory kept on both sides; 15: host functions over shm:// asynchronous; 14: cuMemRetainAllocationHandle; 13: device memory at addresses the client chooses; 12: the pinned heap, downloads in halves, a launch's extra; 11: queued calls' errors per thread; 10: staging areas; 9: waits pending */

/* An object the driver makes for a context through a private table word
 * (21318c60-... word 51, which cuBLAS calls before its first product): a
 * handle the executor tracks as it does the public ones. */
typedef struct fgrCtxObject_st *fgrCtxObject;
/* A module image on the wire: u8 form, then for INLINE and KEEP a buffer
 * (u8 present, u64 n, n bytes), for BY_HASH its SHA-256 and u64 n. KEEP
 * asks the server to keep it (a client across a network does, for images
 * of FGR_KEEP_IMAGE_MIN bytes or more); BY_HASH names one the handshake
 * listed as kept (at most FGR_MAX_KEPT_IMAGES are listed). */
enum { FGR_IMAGE_ABSENT, FGR_IMAGE_INLINE, FGR_IMAGE_KEEP, FGR_IMAGE_BY_HASH };
#define FGR_KEEP_IMAGE_MIN (64u << 10)
/* Pinned host allocations kernels may use as device memory, kept alike on
 * both sides: at most this large each, and this much per connection. */
#define FGR_MAPPED_MAX (64u << 10)
#define FGR_MAPPED_TOTAL (1u << 20)
/* Pinned allocations the client made alone and kernels came to use
 * (promoted, any size each): at most this much per connection. */
#define FGR_PROMOTED_TOTAL (1ull << 30)
/* The most bytes of such allocations (and managed memory) one write or
 * one read of several carries (the executor's bound on a result). */
#define FGR_MIRROR_BATCH (1u << 20)
/* Coming back, such memory is compared first by a sum of each block of
 * FGR_SUM_BLOCK bytes (fgr_block_sum, on both sides): only blocks whose
 * sums differ travel. At most FGR_MAX_SUMS sums per request. */
#define FGR_SUM_BLOCK (64u << 10)
#define FGR_MAX_SUMS 16384u
#define FGR_MAX_KEPT_IMAGES 65536u
#define FGR_MAGIC 0x4d524746u      /* "FGRM" */
#define FGR_AUTH_MAGIC 0x41524746u /* "FGRA" */
/* Over a socket the handshake's reply ends with u8 n and n bytes (0 or
 * FGR_CHANNEL_SECRET): the secret with which the client may open its
 * host-function channel, a second connection whose authentication frame
 * is FGR_CHANNEL_MAGIC, FGR_PROTO_VERSION, the secret, the token. flexgv
 * serve hands it to this connection's executor. On it the executor sends
 * u64 seq, u64 id, u64 n where a function is due, then n times u64 srv,
 * u64 len and len bytes: a host node's earlier copy nodes' buffers; the
 * client answers u64 seq once it returned (remote/executor/hostfn.c,
 * remote/client/hostfn.c). */
/* The readings fgrNvmlReading asks of the server's NVML, each one call's
 * (its argument: the sensor or clock type the call takes). */
enum {
    FGR_NVML_TEMPERATURE,   /* nvmlDeviceGetTemperature, °C */
    FGR_NVML_POWER,         /* nvmlDeviceGetPowerUsage, mW */
    FGR_NVML_POWER_LIMIT,   /* nvmlDeviceGetEnforcedPowerLimit, mW */
    FGR_NVML_CLOCK,         /* nvmlDeviceGetClockInfo, MHz */
    FGR_NVML_MAX_CLOCK,     /* nvmlDeviceGetMaxClockInfo, MHz */
    FGR_NVML_FAN,           /* nvmlDeviceGetFanSpeed, % */
    FGR_NVML_PSTATE,        /* nvmlDeviceGetPerformanceState */
    FGR_NVML_POWER_MGMT,    /* nvmlDeviceGetPowerManagementLimit, mW */
    FGR_NVML_PERSISTENCE,   /* nvmlDeviceGetPersistenceMode, an nvmlEnableState_t */
    FGR_NVML_COMPUTE_MODE,  /* nvmlDeviceGetComputeMode, an nvmlComputeMode_t */
    FGR_NVML_MIG_MODE,      /* nvmlDeviceGetMigMode: the current mode (argument 0) or the pending one (1) */
    FGR_NVML_READINGS
};

#define FGR_CHANNEL_MAGIC 0x43524746u /* "FGRC" */
#define FGR_CHANNEL_SECRET 32u
/* A token's length in bytes. */
#define FGR_MIN_TOKEN 16u
#define FGR_MAX_TOKEN 1024u
/* The largest buffer one argument carries, and the largest frame. */
#define FGR_MAX_BUF (1ull << 30)
#define FGR_MAX_FRAME ((uint32_t)(FGR_MAX_BUF + (1u << 20)))
#define FGR_MAX_STR 65536u
/* The longest function name (a mangled one, with its NUL) a client asks
 * for. */
#define FGR_NAME_MAX 4096u
/* The longest graph print (cuGraphDebugDotPrint) the client is given. */
#define FGR_DOT_MAX (64u << 20)
/* Kernel parameters: the driver's limit is 32764 bytes in all. */
#define FGR_MAX_KPARAM_BYTES 32768u
#define FGR_MAX_KPARAMS 4096u
/* The dependencies of a capturing stream the client asks for at most (the
 * executor refuses more than fit its answers). */
#define FGR_MAX_CAPTURE_DEPS 4096u
#define FGR_REQ_HDR 16u
#define FGR_FLAG_QUEUED 1u
/* A call that waits for the device (api/remote.api: wait=, after=) whose
 * client lets its other threads go on meanwhile: the executor may answer
 * it FGR_PENDING, u32 ticket, u8 after (1: make the call again once the
 * ticket ended; 0: the ticket's answer is the call's), and tells when
 * tickets end through fgrWaitTickets (remote/executor/wait.c). */
#define FGR_FLAG_MAY_PEND 2u
/* With FGR_FLAG_MAY_PEND: wait first (pending as above when the device is
 * busy) for what the call waits for, and make the call once waited only if
 * the executor served no other request meanwhile; otherwise answered
 * FGR_NOT_MADE, or a ticket whose answer is the wait's. A client that keeps
 * its calls in the order the server makes them (for a failover) sends its
 * waiting calls so: made at once, a call is where it was sent among the
 * others; waited only, it is sent again, holding the connection, and its
 * other threads went on meanwhile. */
#define FGR_FLAG_WAIT_ONLY 4u
#define FGR_PENDING 0x50524746u /* "FGRP": not a CUresult */
#define FGR_NOT_MADE 0x4e524746u /* "FGRN": a wait-only request waited, its call not made */
/* A frame ahead of an answer, not an answer: u32 FGR_OUTPUT, u8 stream (1:
 * stdout, 2: stderr), then what the driver printed there for the program
 * (device printf, assertions) since the last answer, which the client
 * prints (remote/executor/output.c). */
#define FGR_OUTPUT 0x4f524746u /* "FGRO" */
/* An output frame of stream FGR_OUTPUT_MOVE carries an address: the
 * server asks the client to move to that server (remote/client/migrate.c). */
#define FGR_OUTPUT_MOVE 3
/* The bytes of a connection's state (remote/executor/journal.c): they
 * start with these, then the device ranges to copy (u32 count, {u64 base,
 * u64 size} each). */
#define FGR_STATE_MAGIC 0x53524746u /* "FGRS" */
#define FGR_STATE_VERSION 4u /* 2: the names' table; 3: pointer-like names; 4: names gone with their contexts */
#define FGR_MAX_TICKETS 32
/* Dynamic shared memory sizes per block size that cuOccupancyMaxPotentialBlockSize
 * carries (block sizes 1 to 1024). */
#define FGR_OCC_SIZES 1024u
/* fgrStageUpload's how: the per-thread default stream's variant; a
 * synchronous copy's piece (on the default stream, hStream NULL). */
#define FGR_STAGE_PT 1u
#define FGR_STAGE_SYNC 2u
#define FGR_REP_HDR 4u
/* Every handle a program is given looks like the driver's: a user-space
 * pointer, below 2^47 and 16-byte aligned (programs keep handles in
 * signed integers, test them for > 0, or tag their low bits). The
 * executor's names lie below 2^46 (own.c); streams and events the client
 * names before the server made them (shadow handles) lie in [2^46, 2^47). */
#define FGR_SHADOW_TAG (1ull << 46)
#define FGR_SHADOW_COUNT (1ull << 42) /* shadow handles, 16 bytes apart */
static inline int fgr_is_shadow(uint64_t v) { return v >> 46 == 1 && !(v & 15); }
/* A 64-bit sum of n bytes, four words at a time in four lanes (not
 * cryptographic: the bytes are the program's own, compared with
 * themselves). */
static inline uint64_t fgr_block_sum(const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    uint64_t h[4] = {0x243f6a8885a308d3ull ^ n, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            __builtin_memcpy(&w, b + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * k;
            h[l] ^= h[l] >> 32;
        }
    uint64_t r = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
    for (; i < n; i++)
        r = (r ^ b[i]) * 0x100000001b3ull;
    return r ^ (r >> 29);
}
/* The sum of n bytes of device memory (n a multiple of 8) that both an
 * executor's kernel and its host compute (fgrStateSums): each 64-bit word,
 * its index mixed in, through a bijective mixer, the results added, so
 * that a block's threads may add their parts in any order, and a block
 * that differs from another in one word has another sum. */
static inline uint64_t fgr_words_mix(uint64_t w, uint64_t i)
{
    uint64_t x = w ^ (i * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static inline uint64_t fgr_words_sum(const void *p, size_t n)
{
    uint64_t s = n;
    for (size_t i = 0; i < n / 8; i++) {
        uint64_t w;
        __builtin_memcpy(&w, (const unsigned char *)p + 8 * i, 8);
        s += fgr_words_mix(w, i);
    }
    return s;
}
/* A layout's check (fgrParamSizes): its count and each size mixed with
 * its index, added, so that one count or size changed changes it. */
static inline uint64_t fgr_layout_check(unsigned count, const unsigned *sizes, unsigned k)
{
    uint64_t s = fgr_words_mix(count, ~0ull);
    for (unsigned i = 0; i < k; i++)
        s += fgr_words_mix(sizes[i], i);
    return s;
}
/* What the handshake's last field asks to talk over after it: the socket,
 * or shared-memory rings (ring.h) whose memfd the client sends next. */
#define FGR_TRANSPORT_SOCKET 0u
#define FGR_TRANSPORT_SHM 1u
/* Device attributes cached at the handshake: 1 .. FGR_NATTR-1. */
#define FGR_NATTR 256

/* A growing frame being written. With by_ref, the first large buffer put
 * (FGR_BY_REF_MIN bytes or more) is not copied: it stays the caller's, as
 * the frame's tail, written after p[0..len) (fgr_buf_write), and is copied
 * in only if something is put after it. */
struct fgr_buf {
    uint8_t *p;
    size_t len, cap;
    int oom, by_ref;
    const void *tail;
    size_t tail_len;
};
#define FGR_BY_REF_MIN (64u << 10)

int fgr_reserve(struct fgr_buf *b, size_t n);
void fgr_put_bytes(struct fgr_buf *b, const void *p, size_t n);
void fgr_put_u8(struct fgr_buf *b, uint8_t v);
void fgr_put_u16(struct fgr_buf *b, uint16_t v);
void fgr_put_u32(struct fgr_buf *b, uint32_t v);
void fgr_put_u64(struct fgr_buf *b, uint64_t v);
/* u8 present; when present, u64 n and n bytes. */
void fgr_put_buf(struct fgr_buf *b, const void *p, uint64_t n);
/* Writes a finished frame, its tail after it, with write (0, or -1). */
int fgr_buf_write(const struct fgr_buf *b, int (*write)(const void *, size_t));
/* A string with its NUL, as a buffer. */
void fgr_put_str(struct fgr_buf *b, const char *s);
/* Patches the frame's leading length word. */
void fgr_finish_frame(struct fgr_buf *b);

/* A frame being read: any read past its end marks it bad and yields zeros. */
struct fgr_rd {
    const uint8_t *p;
    size_t left;
    int bad;
};

uint8_t fgr_get_u8(struct fgr_rd *r);
uint16_t fgr_get_u16(struct fgr_rd *r);
uint32_t fgr_get_u32(struct fgr_rd *r);
uint64_t fgr_get_u64(struct fgr_rd *r);
const void *fgr_get_bytes(struct fgr_rd *r, uint64_t n);
/* A string written by fgr_put_str (NULL when absent or bad). */
const char *fgr_get_cstr(struct fgr_rd *r);
static inline int fgr_rd_done(const struct fgr_rd *r) { return !r->bad && r->left == 0; }

/* Whole-buffer socket I/O (files too), restarted on EINTR, never raising
 * SIGPIPE: 0, or -1 with errno (0 for the peer's orderly close). */
int fgr_write_all(int fd, const void *p, size_t n);
int fgr_read_all(int fd, void *p, size_t n);

/* A buffer's size: count times element size, saturated (the limit checks
 * then refuse it) where the product would wrap. */
static inline uint64_t fgr_mul(uint64_t n, uint64_t size)
{
    uint64_t r;
    return __builtin_mul_overflow(n, size, &r) ? UINT64_MAX : r;
}

/* The bytes a pitched region covers (height - 1 pitches, then a row of
 * row bytes), saturated as fgr_mul. */
static inline uint64_t fgr_span(uint64_t pitch, uint64_t row, uint64_t height)
{
    uint64_t r;
    if (height == 0)
        return 0;
    return __builtin_mul_overflow(pitch, height - 1, &r) || __builtin_add_overflow(r, row, &r) ? UINT64_MAX : r;
}

/* n - k, or 0 below k: how many strides a tensor of n dimensions has. */
static inline uint64_t fgr_less(uint64_t n, uint64_t k) { return n > k ? n - k : 0; }

/* The smaller of a and b: an out buffer a client sizes, bounded by what the
 * call can ever write (so a huge count costs the executor nothing). */
static inline uint64_t fgr_min(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Floating-point arguments travel as their bits. */
static inline uint64_t fgr_f64_bits(double v)
{
    uint64_t u;
    __builtin_memcpy(&u, &v, sizeof u);
    return u;
}
static inline double fgr_bits_f64(uint64_t u)
{
    double v;
    __builtin_memcpy(&v, &u, sizeof v);
    return v;
}
static inline uint32_t fgr_f32_bits(float v)
{
    uint32_t u;
    __builtin_memcpy(&u, &v, sizeof u);
    return u;
}
static inline float fgr_bits_f32(uint32_t u)
{
    float v;
    __builtin_memcpy(&v, &u, sizeof v);
    return v;
}

/* Bytes of a module image (fatbinary, 64-bit ELF, or NUL-terminated text)
 * read from at most max bytes, or 0 when that is not enough to tell. */
uint64_t fgr_image_size(const void *image, uint64_t max);

/* Bytes cuMemPoolGetAttribute writes for attr; more than FGR_MAX_BUF when
 * the attribute is unknown here (the client refuses it). */
uint64_t fgr_mempool_attr_bytes(int attr);
uint64_t fgr_pointer_attr_bytes(int attr);

#endif
