/* Device memory copied ahead of a move between hosts (remote/client/
 * ahead.c). Where the new executor cannot reach the old one's pages (no
 * device to device), the client copies the program's device memory while
 * the program runs, through another connection to the old server, whose
 * executor reads the pages a token names (fgrStateShareRead); at the move's
 * second pause each executor sums the blocks of each range
 * (fgrStateSums) and only those whose sums differ are copied again.
 *
 * The sums of memory of the arena (the program's allocations) are a kernel's
 * (a PTX module loaded once per context): a pass at the GPU's memory
 * bandwidth. The first result is checked against the host's sum of the same
 * block; where they differ, or the kernel cannot run, the sums are the
 * host's (the bytes read back a piece at a time), as they are for other
 * ranges (module variables, mapped pinned memory). */
#include "executor.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    CUresult (*load)(CUmodule *, const void *);
    CUresult (*get)(CUfunction *, CUmodule, const char *);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*ctx_device)(CUdevice *);
    CUresult (*prop)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*addr_free)(CUdeviceptr, size_t);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*release)(CUmemGenericAllocationHandle);
} d;

/* A block's sum as fgr_words_sum computes it: thread t of 256 adds the
 * mixed words t, t+256, ... of its block (FGR_SUM_BLOCK bytes, the last
 * one shorter), the parts are added in shared memory, and the block's
 * bytes are added last. Parameters: the range, its 8-byte words, the sums
 * (one a block). */
static const char SUMS_PTX[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry fgr_sums(.param .u64 base, .param .u64 words, .param .u64 out)\n"
    "{\n"
    "    .reg .pred %p<4>;\n"
    "    .reg .b32 %r<6>;\n"
    "    .reg .b64 %rd<20>;\n"
    "    .shared .align 8 .b64 part[256];\n"
    "    ld.param.u64 %rd1, [base];\n"
    "    ld.param.u64 %rd2, [words];\n"
    "    ld.param.u64 %rd3, [out];\n"
    "    cvta.to.global.u64 %rd1, %rd1;\n"
    "    cvta.to.global.u64 %rd3, %rd3;\n"
    "    mov.u32 %r1, %tid.x;\n"
    "    mov.u32 %r2, %ctaid.x;\n"
    "    cvt.u64.u32 %rd4, %r2;\n"
    "    shl.b64 %rd5, %rd4, 13;\n"
    "    add.u64 %rd6, %rd5, 8192;\n"
    "    min.u64 %rd6, %rd6, %rd2;\n"
    "    sub.u64 %rd9, %rd6, %rd5;\n"
    "    cvt.u64.u32 %rd7, %r1;\n"
    "    mov.u64 %rd8, 0;\n"
    "WORD:\n"
    "    setp.ge.u64 %p1, %rd7, %rd9;\n"
    "    @%p1 bra ADDED;\n"
    "    add.u64 %rd10, %rd5, %rd7;\n"
    "    shl.b64 %rd10, %rd10, 3;\n"
    "    add.u64 %rd10, %rd1, %rd10;\n"
    "    ld.global.u64 %rd11, [%rd10];\n"
    "    mul.lo.s64 %rd12, %rd7, -7046029254386353131;\n"
    "    xor.b64 %rd11, %rd11, %rd12;\n"
    "    shr.u64 %rd13, %rd11, 31;\n"
    "    xor.b64 %rd11, %rd11, %rd13;\n"
    "    mul.lo.s64 %rd11, %rd11, -4658895280553007687;\n"
    "    shr.u64 %rd13, %rd11, 27;\n"
    "    xor.b64 %rd11, %rd11, %rd13;\n"
    "    mul.lo.s64 %rd11, %rd11, -7723592293110705685;\n"
    "    shr.u64 %rd13, %rd11, 31;\n"
    "    xor.b64 %rd11, %rd11, %rd13;\n"
    "    add.u64 %rd8, %rd8, %rd11;\n"
    "    add.u64 %rd7, %rd7, 256;\n"
    "    bra WORD;\n"
    "ADDED:\n"
    "    shl.b32 %r3, %r1, 3;\n"
    "    mov.u32 %r4, part;\n"
    "    add.u32 %r4, %r4, %r3;\n"
    "    st.shared.u64 [%r4], %rd8;\n"
    "    bar.sync 0;\n"
    "    mov.u32 %r5, 128;\n"
    "HALF:\n"
    "    setp.ge.u32 %p2, %r1, %r5;\n"
    "    @%p2 bra WAIT;\n"
    "    shl.b32 %r3, %r5, 3;\n"
    "    add.u32 %r3, %r4, %r3;\n"
    "    ld.shared.u64 %rd14, [%r3];\n"
    "    ld.shared.u64 %rd15, [%r4];\n"
    "    add.u64 %rd15, %rd15, %rd14;\n"
    "    st.shared.u64 [%r4], %rd15;\n"
    "WAIT:\n"
    "    bar.sync 0;\n"
    "    shr.u32 %r5, %r5, 1;\n"
    "    setp.ne.u32 %p3, %r5, 0;\n"
    "    @%p3 bra HALF;\n"
    "    setp.ne.u32 %p1, %r1, 0;\n"
    "    @%p1 bra END;\n"
    "    ld.shared.u64 %rd16, [%r4];\n"
    "    shl.b64 %rd17, %rd9, 3;\n"
    "    add.u64 %rd16, %rd16, %rd17;\n"
    "    shl.b64 %rd18, %rd4, 3;\n"
    "    add.u64 %rd18, %rd3, %rd18;\n"
    "    st.global.u64 [%rd18], %rd16;\n"
    "END:\n"
    "    ret;\n"
    "}\n";
enum { SUMS_THREADS = 256 };
_Static_assert(FGR_SUM_BLOCK == 8192 * 8, "the kernel's blocks are of 8192 words");

/* The kernel in each context it ran in (none: not loaded there), and
 * whether it is trusted: -1 until its first sums matched the host's, then
 * 1, or 0 for good (the host sums). */
enum { MAX_CTX = 16 };
static struct {
    CUcontext ctx;
    CUfunction fn;
} kernels[MAX_CTX];
static int trusted = -1;

static CUfunction kernel_in(CUcontext ctx)
{
    int i = 0;
    for (; i < MAX_CTX && kernels[i].ctx; i++)
        if (kernels[i].ctx == ctx)
            return kernels[i].fn;
    CUmodule m;
    CUfunction fn = NULL;
    if (i == MAX_CTX || d.load(&m, SUMS_PTX) != CUDA_SUCCESS || d.get(&fn, m, "fgr_sums") != CUDA_SUCCESS) {
        fgr_logf("the kernel that sums device memory does not load here: the host sums it");
        trusted = 0;
        return NULL;
    }
    kernels[i].ctx = ctx;
    kernels[i].fn = fn;
    return fn;
}

/* The host's sums of n bytes at p (a piece at a time). */
static CUresult host_sums(CUdeviceptr p, size_t n, unsigned long long *sums)
{
    static uint8_t *buf;
    if (!buf && !(buf = malloc(FGR_STATE_PIECE)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    _Static_assert(FGR_STATE_PIECE % FGR_SUM_BLOCK == 0, "pieces of whole blocks");
    for (size_t off = 0; off < n; off += FGR_STATE_PIECE) {
        size_t k = n - off < FGR_STATE_PIECE ? n - off : FGR_STATE_PIECE;
        CUresult r = d.dtoh(buf, p + off, k);
        if (r != CUDA_SUCCESS)
            return r;
        for (size_t b = 0; b < k; b += FGR_SUM_BLOCK)
            *sums++ = fgr_words_sum(buf + b, k - b < FGR_SUM_BLOCK ? k - b : FGR_SUM_BLOCK);
    }
    return CUDA_SUCCESS;
}

/* The kernel's sums of the arena's memory at p, in a context of the
 * connection on the device that holds it: -1 where it cannot run them. */
static int kernel_sums(CUdeviceptr p, size_t n, unsigned nsums, unsigned long long *sums)
{
    uint64_t block, size;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop;
    if (!trusted || fgr_arena_holding(p, n, &block) || fgr_arena_block(block, &size, &h) ||
        d.prop(&prop, h) != CUDA_SUCCESS)
        return -1;
    uint64_t ctxs[64];
    size_t nctx = fgr_contexts(ctxs, 64);
    for (size_t i = 0; i < nctx && i < 64; i++) {
        CUcontext ctx = (CUcontext)(uintptr_t)ctxs[i], was;
        CUdevice dev;
        if (d.push(ctx) != CUDA_SUCCESS)
            continue;
        if (d.ctx_device(&dev) != CUDA_SUCCESS || dev != prop.location.id) {
            d.pop(&was);
            continue;
        }
        CUfunction fn = kernel_in(ctx);
        CUdeviceptr out = 0;
        CUresult r = CUDA_ERROR_NOT_FOUND;
        if (fn && (r = d.alloc(&out, (size_t)nsums * 8)) == CUDA_SUCCESS) {
            unsigned long long words = n / 8;
            void *args[] = {&p, &words, &out};
            if ((r = d.launch(fn, nsums, 1, 1, SUMS_THREADS, 1, 1, 0, NULL, args, NULL)) == CUDA_SUCCESS)
                r = d.dtoh(sums, out, (size_t)nsums * 8); /* the legacy stream's: once the kernel ran */
            d.free(out);
        }
        d.pop(&was);
        if (fn && r != CUDA_SUCCESS) {
            fgr_logf("the kernel that sums device memory failed (error %d): the host sums it", (int)r);
            trusted = 0;
        }
        return r == CUDA_SUCCESS ? 0 : -1;
    }
    return -1;
}

static CUresult state_sums(CUdeviceptr p, size_t n, unsigned int nsums, unsigned long long *sums)
{
    p = fgr_moved(p);
    if (!sums || !n || n % 8 || p % 8 || nsums != (n + FGR_SUM_BLOCK - 1) / FGR_SUM_BLOCK || nsums > FGR_MAX_SUMS ||
        !fgr_mem_in(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    if (kernel_sums(p, n, nsums, sums) == 0) {
        if (trusted == 1)
            return CUDA_SUCCESS;
        /* Its first sums: the host's of the first block must agree. */
        unsigned long long first;
        size_t k = n < FGR_SUM_BLOCK ? n : FGR_SUM_BLOCK;
        int pushed = fgr_some_context();
        CUresult r = host_sums(p, k, &first);
        fgr_context_done(pushed);
        if (r != CUDA_SUCCESS)
            return r;
        if (first == sums[0]) {
            trusted = 1;
            fgr_logf("device memory summed by a kernel (its first sums checked against the host's)");
            return CUDA_SUCCESS;
        }
        fgr_logf("the kernel's sums of device memory differ from the host's: the host sums it");
        trusted = 0;
    }
    int pushed = fgr_some_context();
    CUresult r = host_sums(p, n, sums);
    fgr_context_done(pushed);
    return r;
}

/* The helper connection's reads: the pages of the last token read, mapped
 * in the primary context of the device that holds them. */
static struct {
    uint8_t token[64];
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    uint64_t size, off, len;
    CUcontext ctx;
} mapped;

static void unmap_last(void)
{
    if (!mapped.va)
        return;
    d.unmap(mapped.va, mapped.size);
    d.addr_free(mapped.va, mapped.size);
    d.release(mapped.h);
    mapped.va = 0;
}

static CUresult map_token(const void *token)
{
    if (mapped.va && !memcmp(mapped.token, token, sizeof mapped.token))
        return CUDA_SUCCESS;
    unmap_last();
    uint64_t size, off, len;
    int fd = fgr_ipc_fetch(token, &size, &off, &len);
    if (fd < 0)
        return CUDA_ERROR_NOT_FOUND;
    CUmemGenericAllocationHandle h;
    CUresult r = d.import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS)
        return r;
    CUmemAllocationProp prop;
    CUdeviceptr va = 0;
    CUmemAccessDesc a = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((r = d.prop(&prop, h)) == CUDA_SUCCESS && (a.location.id = prop.location.id, 1) &&
        (mapped.ctx || (r = d.retain(&mapped.ctx, prop.location.id)) == CUDA_SUCCESS) &&
        (r = d.push(mapped.ctx)) == CUDA_SUCCESS) {
        CUcontext was;
        if ((r = d.reserve(&va, size, 0, 0, 0)) == CUDA_SUCCESS) {
            if ((r = d.map(va, size, 0, h, 0)) == CUDA_SUCCESS && (r = d.access(va, size, &a, 1)) != CUDA_SUCCESS)
                d.unmap(va, size);
            if (r != CUDA_SUCCESS)
                d.addr_free(va, size);
        }
        d.pop(&was);
    }
    if (r != CUDA_SUCCESS) {
        d.release(h);
        return r;
    }
    memcpy(mapped.token, token, sizeof mapped.token);
    mapped.h = h, mapped.va = va, mapped.size = size, mapped.off = off, mapped.len = len;
    return CUDA_SUCCESS;
}

static CUresult share_read(const void *token, unsigned long long offset, unsigned long long n, void *dst)
{
    if (!token || !dst || !n || n > FGR_STATE_PIECE)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = map_token(token);
    if (r != CUDA_SUCCESS)
        return r;
    if (offset >= mapped.len || n > mapped.len - offset)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext was;
    if ((r = d.push(mapped.ctx)) != CUDA_SUCCESS)
        return r;
    r = d.dtoh(dst, mapped.va + mapped.off + offset, n);
    d.pop(&was);
    return r;
}

void fgr_ahead_init(void *driver)
{
    *(void **)&d.load = dlsym(driver, "cuModuleLoadData");
    *(void **)&d.get = dlsym(driver, "cuModuleGetFunction");
    *(void **)&d.launch = dlsym(driver, "cuLaunchKernel");
    *(void **)&d.alloc = dlsym(driver, "cuMemAlloc_v2");
    *(void **)&d.free = dlsym(driver, "cuMemFree_v2");
    *(void **)&d.dtoh = dlsym(driver, "cuMemcpyDtoH_v2");
    *(void **)&d.push = dlsym(driver, "cuCtxPushCurrent_v2");
    *(void **)&d.pop = dlsym(driver, "cuCtxPopCurrent_v2");
    *(void **)&d.ctx_device = dlsym(driver, "cuCtxGetDevice");
    *(void **)&d.prop = dlsym(driver, "cuMemGetAllocationPropertiesFromHandle");
    *(void **)&d.retain = dlsym(driver, "cuDevicePrimaryCtxRetain");
    *(void **)&d.import_fd = dlsym(driver, "cuMemImportFromShareableHandle");
    *(void **)&d.reserve = dlsym(driver, "cuMemAddressReserve");
    *(void **)&d.addr_free = dlsym(driver, "cuMemAddressFree");
    *(void **)&d.map = dlsym(driver, "cuMemMap");
    *(void **)&d.unmap = dlsym(driver, "cuMemUnmap");
    *(void **)&d.access = dlsym(driver, "cuMemSetAccess");
    *(void **)&d.release = dlsym(driver, "cuMemRelease");
    if (!d.dtoh || !d.push || !d.pop)
        return; /* the operations stay unsupported */
    if (!d.load || !d.get || !d.launch || !d.alloc || !d.free || !d.ctx_device || !d.prop)
        trusted = 0;
    fgr_real[FGR_OP_fgrStateSums] = (void *)state_sums;
    if (d.prop && d.retain && d.import_fd && d.reserve && d.addr_free && d.map && d.unmap && d.access && d.release)
        fgr_real[FGR_OP_fgrStateShareRead] = (void *)share_read;
}
