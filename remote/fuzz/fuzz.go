// Package fuzz runs the executor's request decoders (remote/executor, linked
// here as the files of this folder so that the build sees their changes) on
// arbitrary bytes in this process, over a driver that answers every call
// with CUDA_SUCCESS and touches nothing: what is exercised is the decoding
// of what a client sent, which must never trust it.
package fuzz

/*
#cgo CFLAGS: -I${SRCDIR}/../../include -I${SRCDIR}/../../include/flexgv -std=gnu11
#include <stdlib.h>
#include "fake.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
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
func Serve(op uint16, args []byte) (malformed bool, out []byte) { return serve(op, args, false) }

// ServeWaitOnly is Serve for a request flagged wait-only that another
// request came beside (its call is not made).
func ServeWaitOnly(op uint16, args []byte) (malformed bool, out []byte) { return serve(op, args, true) }

func serve(op uint16, args []byte, waitOnly bool) (malformed bool, out []byte) {
	once.Do(setUp)
	mu.Lock()
	defer mu.Unlock()
	// The C side keeps no pointer to args past the call.
	p := C.CBytes(args)
	defer C.free(p)
	var bad C.int
	if waitOnly {
		bad = C.serve_wait_only(C.unsigned(op), p, C.size_t(len(args)), &reply)
	} else {
		bad = C.serve_one(C.unsigned(op), p, C.size_t(len(args)), &reply)
	}
	if bad != 0 {
		return true, nil
	}
	return false, C.GoBytes(unsafe.Pointer(reply.p), C.int(reply.len))
}

// Handles are the names a client was given for the handles fake_driver
// says the connection has: requests name them so.
type Handles struct{ Module, Function, Graph, Pool, Context, CtxObject, Node uint64 }

// Names are the connection's handles, by the names the client sees.
func Names() Handles {
	once.Do(setUp)
	mu.Lock()
	defer mu.Unlock()
	n := func(kind C.int, v uint64) uint64 { return uint64(C.name_of(kind, C.uint64_t(v))) }
	return Handles{n(C.FGR_H_CUmodule, 7), n(C.FGR_H_CUfunction, 1), n(C.FGR_H_CUgraph, 9),
		n(C.FGR_H_CUmemoryPool, 5), n(C.FGR_H_CUcontext, 3), n(C.FGR_H_fgrCtxObject, 2), n(C.FGR_H_CUgraphNode, 11)}
}

// HostBuffer is the address of a graph copy node's buffer of 64 bytes the
// connection holds; with freed, of one of 4096 bytes it gave back.
func HostBuffer(freed bool) uint64 {
	once.Do(setUp)
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

func setUp() {
	C.fake_driver()
	C.fake_connection()
}

// Frame is a request frame as a client sends it: the header (operation, no
// flags, thread 0, the connection's context by its name), then args.
func Frame(op uint16, args []byte) []byte {
	f := binary.LittleEndian.AppendUint16(nil, op)
	f = append(f, 0, 0, 0, 0, 0, 0)
	f = binary.LittleEndian.AppendUint64(f, Names().Context)
	return append(f, args...)
}

// Input is what the native fuzzer reads (fake.h's run_input): each record
// its length, then its bytes.
func Input(records ...[]byte) []byte {
	var in []byte
	for _, r := range records {
		in = binary.LittleEndian.AppendUint32(in, uint32(len(r)))
		in = append(in, r...)
	}
	return in
}

// StateRecord is a record that loads state, for Input.
func StateRecord(state []byte) []byte { return append([]byte{0xff, 0xff}, state...) }

// Run runs an input of the native fuzzer, in this process, and says how
// many of its frames were answered; a reply that does not say its length
// aborts the process.
func Run(in []byte) int {
	once.Do(setUp)
	mu.Lock()
	defer mu.Unlock()
	p := C.CBytes(in)
	defer C.free(p)
	return int(C.run_input((*C.uint8_t)(p), C.size_t(len(in))))
}

// State serves frames as the executor does, its journal keeping what they
// made, then gives the connection's state as a move would (or why it
// cannot be moved).
func State(frames ...[]byte) ([]byte, error) {
	once.Do(setUp)
	mu.Lock()
	defer mu.Unlock()
	for _, f := range frames {
		p := C.CBytes(f)
		C.serve_frame((*C.uint8_t)(p), C.size_t(len(f)), &reply)
		C.free(p)
	}
	var w C.struct_fgr_buf
	if why := C.save_state(&w); why != nil {
		return nil, errors.New(C.GoString(why))
	}
	defer C.free(unsafe.Pointer(w.p))
	return C.GoBytes(unsafe.Pointer(w.p), C.int(w.len)), nil
}
