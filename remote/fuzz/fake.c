// A driver that answers every call with CUDA_SUCCESS and touches nothing,
// under the executor's request decoders: what the Go tests of this folder
// and the coverage-guided fuzzer (native/) run them on.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "fake.h"

static unsigned long calls;
static CUresult fake_call(void) { calls++; return CUDA_SUCCESS; }
unsigned long fake_calls(void) { return calls; }
static unsigned char fake_data[4096];
static const void *fake_table[1024];

// The driver's functions the buffers of graph copy nodes use: memory of
// the process, calls counted.
static CUresult fake_host_alloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    calls++;
    *p = calloc(1, n);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult fake_launch(CUgraphExec x, CUstream s) { (void)x; (void)s; calls++; return CUDA_SUCCESS; }
static CUresult fake_sync(CUstream s) { (void)s; calls++; return CUDA_SUCCESS; }
static CUresult fake_record(CUevent e, CUstream s) { (void)e; (void)s; calls++; return CUDA_SUCCESS; }
static CUresult fake_query(CUevent e) { (void)e; calls++; return CUDA_SUCCESS; }
// textures.c is not linked here: the connection holds no texture objects.
size_t fgr_texture_objects(void) { return 0; }
// The arena's side of IPC (arena.c is not linked here): one mapping of
// 64 KiB at 0x1000, the connection's memory; another is mapped anywhere on
// a page. The driver's export is a file of this process.
CUresult fgr_arena_map_handle(CUdeviceptr p, size_t n, CUmemGenericAllocationHandle h)
{
    (void)h;
    return p % 4096 || !n ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
int fgr_arena_holding(uint64_t p, uint64_t n, uint64_t *block)
{
    if (p < 0x1000 || n > 0x10000 || p - 0x1000 > 0x10000 - n)
        return -1;
    *block = 0x1000;
    return 0;
}
int fgr_arena_block(uint64_t block, uint64_t *n, CUmemGenericAllocationHandle *h)
{
    if (block != 0x1000)
        return -1;
    *n = 0x10000;
    *h = 77;
    return 0;
}
static CUresult fake_export(void *fd, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t, unsigned long long f)
{
    (void)h, (void)t, (void)f;
    calls++;
    *(int *)fd = (int)syscall(SYS_memfd_create, "fuzz", 1u);
    return CUDA_SUCCESS;
}
static CUresult fake_import(CUmemGenericAllocationHandle *h, void *fd, CUmemAllocationHandleType t)
{
    (void)fd, (void)t;
    calls++;
    *h = 78;
    return CUDA_SUCCESS;
}
// A buffer of 64 bytes, and one given back.
static CUdeviceptr host_buffer, freed_buffer;

void fake_driver(void)
{
    for (int i = 0; i < 1024; i++)
        fake_table[i] = fake_data;
    for (int op = 1; op < FGR_NUM_OPS; op++)
        fgr_real[op] = (void *)fake_call;
    for (int i = 0; i < fgr_nxtables; i++)
        fgr_real[fgr_xtables[i].fetch_op] = (void *)fake_table;
    // Pinned memory capped as a server's --pinned-max caps it (a quarter of
    // the host's RAM otherwise), so a size an input asks for is refused
    // before this process fills it.
    fgr_pinned_max("67108864");
    fgr_drv.sync = fake_sync;
    fgr_drv.ev_record = fake_record;
    fgr_drv.ev_query = fake_query;
    fgr_hostcopy_use(fake_host_alloc, fake_launch);
    // Promoted pinned memory is mapped in this process, as the executor's.
    fgr_hostmem_promoting((void *)fake_call, (void *)fake_call);
    fgr_ipc_use((void *)fake_export, (void *)fake_import, (void *)fake_call);
}

void fake_connection(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    // What the test requests name: this connection's, as if returned.
    fgr_mem_add(0x1000, 0x10000, 0, 0);
    fgr_add(FGR_H_CUmodule, 7, 0, 0);
    fgr_add(FGR_H_CUfunction, 1, 0, 0);
    fgr_add(FGR_H_CUgraph, 9, 0, 0);
    fgr_add(FGR_H_CUgraphNode, 11, FGR_H_CUgraph, 9);
    fgr_add(FGR_H_CUmemoryPool, 5, 0, 0);
    fgr_add(FGR_H_CUcontext, 3, 0, 0);
    fgr_add(FGR_H_fgrCtxObject, 2, FGR_H_CUcontext, 3);
    CUresult (*alloc)(CUdeviceptr *, size_t) = fgr_real[FGR_OP_fgrGraphHostAlloc];
    CUresult (*release)(CUdeviceptr) = fgr_real[FGR_OP_fgrGraphHostFree];
    alloc(&host_buffer, 64);
    fgr_mem_add(host_buffer, 64, 0, 0);
    alloc(&freed_buffer, 4096);
    fgr_mem_add(freed_buffer, 4096, 0, 0);
    release(freed_buffer);
}

uint64_t buffer_at(int freed) { return freed ? freed_buffer : host_buffer; }
uint64_t own_address(void) { return (uintptr_t)fake_data; }

// name_of: the name the client is given for the driver's handle v.
uint64_t name_of(int kind, uint64_t v)
{
    fgr_out_n(kind, &v, 1);
    return v;
}

// The reply frame in one piece: its tail (large results) appended.
static void whole(struct fgr_buf *out)
{
    const void *tail = out->tail;
    size_t k = out->tail_len;
    out->tail = NULL;
    out->tail_len = 0;
    fgr_put_bytes(out, tail, k);
}

// serve_one: 1 when the request is malformed, else 0 with the reply in *out.
int serve_one(unsigned op, const void *p, size_t n, struct fgr_buf *out)
{
    struct fgr_rd rd = {p, n, 0};
    if (fgr_serve(op, &rd, out, CUDA_SUCCESS) != NULL)
        return 1;
    whole(out);
    return 0;
}

int serve_wait_only(unsigned op, const void *p, size_t n, struct fgr_buf *out)
{
    fgr_may_pend = fgr_wait_only = 1;
    int r = serve_one(op, p, n, out);
    fgr_may_pend = fgr_wait_only = 0;
    return r;
}

// Names the same in every process: the seeds the Go tests write name the
// handles fake_driver gave.
int fgr_names_new_key(uint32_t k[4])
{
    for (int i = 0; i < 4; i++)
        k[i] = 0x9e3779b9u * (uint32_t)(i + 1);
    return 0;
}

int serve_frame(const uint8_t *frame, size_t n, struct fgr_buf *out)
{
    struct fgr_rd rd = {frame, n, 0};
    unsigned op = fgr_get_u16(&rd);
    fgr_get_u16(&rd);
    uint32_t thread = fgr_get_u32(&rd);
    uint64_t ctx = fgr_in(FGR_H_CUcontext, fgr_get_u64(&rd));
    if (rd.bad || n > UINT32_MAX || op == FGR_OP_HELLO || op >= FGR_NUM_OPS)
        return 1;
    fgr_ctx = ctx;
    fgr_current_op = op;
    fgr_thread = thread;
    fgr_may_pend = 0;
    fgr_resume = fgr_parked = -1;
    fgr_journal_begin(frame, (uint32_t)n, op);
    const char *bad = fgr_serve(op, &rd, out, fgr_has(FGR_H_CUcontext, ctx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
    fgr_journal_end(bad ? CUDA_ERROR_INVALID_VALUE : fgr_reply_result(out));
    if (bad)
        return 1;
    whole(out);
    return 0;
}

static CUresult made_current(CUcontext c)
{
    (void)c;
    return CUDA_SUCCESS;
}

static CUresult replayed(const uint8_t *frame, uint32_t n)
{
    return fgr_replay(frame, n, made_current);
}

static const char *error_number(CUresult r)
{
    static char s[32];
    snprintf(s, sizeof s, "error %d", (int)r);
    return s;
}

const char *load_state(const uint8_t *p, size_t n)
{
    static char why[512];
    return fgr_journal_load(p, n, replayed, error_number, why, sizeof why);
}

const char *save_state(struct fgr_buf *w)
{
    return fgr_journal_save(w);
}

int run_input(const uint8_t *data, size_t n)
{
    static struct fgr_buf out;
    int answered = 0;
    for (int first = 1; n >= 4; first = 0) {
        uint32_t k;
        memcpy(&k, data, 4);
        data += 4;
        n -= 4;
        if (k > n)
            k = (uint32_t)n;
        // Each record in its own allocation, so that a read past it is
        // caught (by the sanitizers of the native fuzzer).
        uint8_t *rec = malloc(k ? k : 1);
        if (!rec)
            abort();
        memcpy(rec, data, k);
        data += k;
        n -= k;
        int state = k >= 2 && rec[0] == 0xff && rec[1] == 0xff;
        if (state)
            load_state(rec + 2, k - 2);
        if (first)
            fake_connection();
        if (!state && serve_frame(rec, k, &out) == 0) {
            uint32_t said;
            memcpy(&said, out.p, 4);
            if (out.len < 8 || said != out.len - 4) {
                fprintf(stderr, "a reply of %zu bytes says %u\n", out.len, said);
                abort();
            }
            answered++;
        }
        free(rec);
    }
    return answered;
}
