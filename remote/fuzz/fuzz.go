// Package fuzz runs the executor's request decoders (remote/executor, linked
// here as the files of this folder so that the build sees their changes) on
// arbitrary bytes in this process, over a driver that answers every call
// with CUDA_SUCCESS and touches nothing: what is exercised is the decoding
// of what a client sent, which must never trust it.
package fuzz

/*
#cgo CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}/../../include/flexgv -std=gnu11
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "executor.h"

static unsigned long calls;
static CUresult fake_call(void) { calls++; return CUDA_SUCCESS; }
static unsigned long fake_calls(void) { return calls; }
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

static void fake_driver(void)
{
    for (int i = 0; i < 1024; i++)
        fake_table[i] = fake_data;
    for (int op = 1; op < FGR_NUM_OPS; op++)
        fgr_real[op] = (void *)fake_call;
    for (int i = 0; i < fgr_nxtables; i++)
        fgr_real[fgr_xtables[i].fetch_op] = (void *)fake_table;
    // What the test requests name: this connection's, as if returned.
    fgr_mem_add(0x1000, 0x10000, 0, 0);
    fgr_add(FGR_H_CUmodule, 7, 0, 0);
    fgr_add(FGR_H_CUfunction, 1, 0, 0);
    fgr_add(FGR_H_CUgraph, 9, 0, 0);
    fgr_add(FGR_H_CUgraphNode, 11, FGR_H_CUgraph, 9);
    fgr_add(FGR_H_CUmemoryPool, 5, 0, 0);
    fgr_add(FGR_H_CUcontext, 3, 0, 0);
    fgr_add(FGR_H_fgrCtxObject, 2, FGR_H_CUcontext, 3);
    // Pinned memory capped as a server's --pinned-max caps it (a quarter of
    // the host's RAM otherwise), so a size an input asks for is refused
    // before this process fills it.
    fgr_pinned_max("67108864");
    fgr_drv.sync = fake_sync;
    fgr_drv.ev_record = fake_record;
    fgr_drv.ev_query = fake_query;
    fgr_hostcopy_use(fake_host_alloc, fake_launch);
    CUresult (*alloc)(CUdeviceptr *, size_t) = fgr_real[FGR_OP_fgrGraphHostAlloc];
    CUresult (*release)(CUdeviceptr) = fgr_real[FGR_OP_fgrGraphHostFree];
    alloc(&host_buffer, 64);
    fgr_mem_add(host_buffer, 64, 0, 0);
    alloc(&freed_buffer, 4096);
    fgr_mem_add(freed_buffer, 4096, 0, 0);
    release(freed_buffer);
    // Promoted pinned memory is mapped in this process, as the executor's.
    fgr_hostmem_promoting((void *)fake_call, (void *)fake_call);
    fgr_ipc_use((void *)fake_export, (void *)fake_import, (void *)fake_call);
}

static uint64_t buffer_at(int freed) { return freed ? freed_buffer : host_buffer; }
static uint64_t own_address(void) { return (uintptr_t)fake_data; }

// name_of: the name the client is given for the driver's handle v.
static uint64_t name_of(int kind, uint64_t v)
{
    fgr_out_n(kind, &v, 1);
    return v;
}

// serve_one: 1 when the request is malformed, else 0 with the reply in *out.
static int serve_one(unsigned op, const void *p, size_t n, struct fgr_buf *out)
{
    struct fgr_rd rd = {p, n, 0};
    if (fgr_serve(op, &rd, out, CUDA_SUCCESS) != NULL)
        return 1;
    // The whole frame in one piece: its tail (large results) appended.
    const void *tail = out->tail;
    size_t k = out->tail_len;
    out->tail = NULL;
    out->tail_len = 0;
    fgr_put_bytes(out, tail, k);
    return 0;
}
*/
import "C"

import (
	"sync"
	"unsafe"
)

var (
	mu    sync.Mutex
	reply C.struct_fgr_buf
	once  sync.Once
)

// Serve decodes and runs one request's arguments for operation op. It
// reports whether they were malformed and, when not, the reply frame.
func Serve(op uint16, args []byte) (malformed bool, out []byte) {
	once.Do(func() { C.fake_driver() })
	mu.Lock()
	defer mu.Unlock()
	// The C side keeps no pointer to args past the call.
	p := C.CBytes(args)
	defer C.free(p)
	if C.serve_one(C.unsigned(op), p, C.size_t(len(args)), &reply) != 0 {
		return true, nil
	}
	return false, C.GoBytes(unsafe.Pointer(reply.p), C.int(reply.len))
}

// Handles are the names a client was given for the handles fake_driver
// says the connection has: requests name them so.
type Handles struct{ Module, Function, Graph, Pool, Context, CtxObject, Node uint64 }

// Names are the connection's handles, by the names the client sees.
func Names() Handles {
	once.Do(func() { C.fake_driver() })
	mu.Lock()
	defer mu.Unlock()
	n := func(kind C.int, v uint64) uint64 { return uint64(C.name_of(kind, C.uint64_t(v))) }
	return Handles{n(C.FGR_H_CUmodule, 7), n(C.FGR_H_CUfunction, 1), n(C.FGR_H_CUgraph, 9),
		n(C.FGR_H_CUmemoryPool, 5), n(C.FGR_H_CUcontext, 3), n(C.FGR_H_fgrCtxObject, 2), n(C.FGR_H_CUgraphNode, 11)}
}

// HostBuffer is the address of a graph copy node's buffer of 64 bytes the
// connection holds; with freed, of one of 4096 bytes it gave back.
func HostBuffer(freed bool) uint64 {
	once.Do(func() { C.fake_driver() })
	f := C.int(0)
	if freed {
		f = 1
	}
	return uint64(C.buffer_at(f))
}

// Calls is how many times the driver has been called.
func Calls() uint64 {
	mu.Lock()
	defer mu.Unlock()
	return uint64(C.fake_calls())
}

// OwnAddress is an address of this process's own memory (the fake
// driver's data), as the executor's would be.
func OwnAddress() uint64 {
	return uint64(C.own_address())
}

// Ops are the operation numbers, by name.
func Ops() map[string]uint16 {
	m := map[string]uint16{}
	for op := 1; op < C.FGR_NUM_OPS; op++ {
		m[C.GoString(C.fgr_ops[op].name)] = uint16(op)
	}
	return m
}
