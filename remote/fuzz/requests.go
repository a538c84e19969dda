package fuzz

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

type w []byte

func (b w) u8(v uint8) w   { return append(b, v) }
func (b w) u32(v uint32) w { return binary.LittleEndian.AppendUint32(b, v) }
func (b w) u64(v uint64) w { return binary.LittleEndian.AppendUint64(b, v) }
func (b w) raw(s string) w { return append(b, s...) }

// copy3d is a CUDA_MEMCPY3D of n bytes from src to dst, each side of a
// memory type (1 host, 2 device) given with its address.
func copy3d(st uint32, src uint64, dt uint32, dst uint64, n uint64) string {
	side := func(t uint32, p uint64) w {
		b := w{}.u64(0).u64(0).u64(0).u64(0).u32(t).u32(0)
		if t == 1 {
			b = b.u64(p).u64(0)
		} else {
			b = b.u64(0).u64(p)
		}
		return b.u64(0).u64(0).u64(n).u64(1) // array, reserved, pitch, height
	}
	return string(append(append(side(st, src), side(dt, dst)...), w{}.u64(n).u64(1).u64(1)...))
}

// Request is a well-formed request: its operation, its arguments as the
// client encodes them (remote/wire.h), and the reply's length.
type Request struct {
	Op    string
	Args  []byte
	Reply int
}

// Valid covers every kind of argument: by value, in and out buffers, an
// out buffer sized by an in-out one, strings, images, kernel parameters,
// launch configurations, a table function and a table's data.
func Valid() []Request {
	const res = 8 // length word and result
	h := Names()
	// A real cubin (nvcc 13.0): the executor reads its kernels' layouts.
	_, here, _, _ := runtime.Caller(0)
	cubin, err := os.ReadFile(filepath.Join(filepath.Dir(here), "../../tests/data/kparam/kparams.cubin"))
	if err != nil {
		panic(err)
	}
	return []Request{
		{"cuModuleLoadData", w{}.u8(1).u8(1).u8(1).u64(uint64(len(cubin))).raw(string(cubin)), res + 1 + 8 + 8},
		{"cuMemcpyHtoD_v2", w{}.u64(0x1000).u64(8).u8(1).u64(8).raw("abcdefgh"), res},
		{"cuMemcpyDtoH_v2", w{}.u64(0x1000).u64(16).u8(1), res + 1 + 8 + 16},
		// 64 KiB: written from the executor's copy, not into the answer.
		{"cuMemcpyDtoH_v2", w{}.u64(0x1000).u64(0x10000).u8(1), res + 1 + 8 + 0x10000},
		{"cuModuleGetFunction", w{}.u64(h.Module).u8(1).u8(1).u64(4).raw("abc\x00"), res + 1 + 8 + 8},
		{"cuModuleLoadData", w{}.u8(1).u8(1).u8(1).u64(19).raw("FLEXGV-SIM-MODULE\n\x00"), res + 1 + 8 + 8},
		// An image to keep, and one named by a hash this executor does not
		// keep (answered CUDA_ERROR_INVALID_IMAGE).
		{"cuModuleLoadData", w{}.u8(1).u8(2).u8(1).u64(19).raw("FLEXGV-SIM-MODULE\n\x00"), res + 1 + 8 + 8},
		{"cuModuleLoadData", w{}.u8(1).u8(3).raw(string(make([]byte, 32))).u64(19), res + 1 + 8 + 8},
		{"cuLaunchKernel", w{}.u64(h.Function).u64(1).u64(1).u64(1).u64(32).u64(1).u64(1).u64(0).u64(0).
			u8(1).u32(2).u32(8).raw("pointer!").u32(4).raw("int!").u8(0), res},
		// The same parameters packed in one buffer (extra), none in kernelParams.
		{"cuLaunchKernel", w{}.u64(h.Function).u64(1).u64(1).u64(1).u64(32).u64(1).u64(1).u64(0).u64(0).
			u8(0).u8(1).u32(12).raw("pointer!int!"), res},
		{"cuLaunchKernelEx", w{}.u64(h.Function).u8(1).u32(1).u32(1).u32(1).u32(64).u32(1).u32(1).u32(0).u64(0).u32(0).u8(0).u8(0), res},
		// With a cluster of two (attribute 4: three numbers in its 64 bytes).
		{"cuLaunchKernelEx", w{}.u64(h.Function).u8(1).u32(2).u32(1).u32(1).u32(64).u32(1).u32(1).u32(0).u64(0).u32(1).u32(4).raw("\x02\x00\x00\x00\x01\x00\x00\x00\x01" + string(make([]byte, 55))).u8(0).u8(0), res},
		// (the module, then each log's size and text: none asked for)
		{"cuModuleLoadDataEx", w{}.u64(1).u8(1).u8(1).u8(1).u64(0).u32(1).u32(7).u64(3), res + 1 + 8 + 8 + 2*(8+1)},
		{"cuGraphGetNodes", w{}.u64(h.Graph).u8(1).u8(1).u64(8).u64(3), res + (1 + 8 + 24) + (1 + 8 + 8)},
		// A conditional node of two bodies (a handle, IF, the context); its
		// parameters read back with room for four bodies.
		{"fgrGraphAddConditionalNode", w{}.u64(h.Graph).u64(0).u64(0x5c0d000000000001).u64(0).u64(2).u64(h.Context).u8(1).u8(0).u8(0).u8(1), res + (1 + 8 + 8) + (1 + 8 + 16)},
		{"fgrGraphConditionalNodeGetParams", w{}.u64(h.Node).u64(4).u8(1).u8(1).u8(1).u8(1).u8(1), res + (1 + 8 + 8) + 2*(1+8+4) + (1 + 8 + 8) + (1 + 8 + 32)},
		// A child graph moved into a node of its own graph's (the driver
		// would refuse it); a batch memory operation node of one 32-bit
		// write into the connection's memory, read back and set.
		{"fgrGraphAddMovedChild", w{}.u64(h.Graph).u64(0).u64(h.Graph).u8(1).u8(0), res + (1 + 8 + 8)},
		{"fgrGraphAddBatchMemOpNode", w{}.u64(h.Graph).u64(0).u64(h.Context).u64(1).u64(0).u8(1).u8(0).u8(1).u64(48).raw(memop(0x1000, 7)), res + (1 + 8 + 8)},
		{"fgrGraphBatchMemOpNodeGetParams", w{}.u64(h.Node).u64(1).u8(1).u8(1).u8(1).u8(1), res + (1 + 8 + 8) + 2*(1+8+4) + (1 + 8 + 48)},
		{"fgrGraphBatchMemOpNodeSetParams", w{}.u64(0).u64(h.Node).u64(h.Context).u64(1).u64(0).u8(1).u64(48).raw(memop(0x1000, 9)), res},
		// A kernel node's parameters read (room for 16 bytes of them), and
		// set on an executable's copy of it.
		{"fgrGraphKernelNodeGetParams", w{}.u64(h.Node).u64(16).u8(1).u8(1).u8(1).u8(1).u8(1).u8(1), res + 2*(1+8+8) + (1 + 8 + 24) + (1 + 8 + 4) + (1 + 8 + 16) + (1 + 8 + 4)},
		{"fgrGraphKernelNodeSetParams", w{}.u64(0).u64(h.Node).u64(h.Function).u64(1).u64(1).u64(1).u64(32).u64(1).u64(1).u64(0).
			u8(1).u32(2).u32(8).raw("pointer!").u32(4).raw("int!").u8(0), res},
		{"cuMemPoolGetAttribute", w{}.u64(h.Pool).u64(7).u8(1), res + 1 + 8 + 8},
		{"cuDeviceGetPCIBusId", w{}.u64(32).u64(0).u8(1), res + 1 + 8 + 32},
		// A function's parameter sizes; mapped pinned memory written and read.
		{"fgrParamSizes", w{}.u64(h.Function).u64(4).u8(1).u8(1).u8(1), res + (1 + 8 + 4) + (1 + 8 + 16) + (1 + 8 + 8)},
		{"fgrHostWrite", w{}.u64(0x1000).u64(8).u8(1).u64(8).raw("abcdefgh"), res},
		{"fgrHostReadMany", w{}.u64(1).u64(8).u8(1).u64(8).u64(0x1000).u8(1).u64(8).u64(8).u8(1), res + 1 + 8 + 8},
		// An executable's copy node set to copy within the allocation.
		{"cuGraphExecMemcpyNodeSetParams", w{}.u64(0).u64(h.Node).u64(0).u8(1).u64(200).raw(copy3d(2, 0x1000, 2, 0x1040, 16)), res},
		// A stream's capture, with room for two dependencies.
		{"fgrStreamCaptureInfo", w{}.u64(0).u64(2).u8(1).u8(1).u8(1).u8(1).u8(1), res + (1 + 8 + 4) + 2*(1+8+8) + (1 + 8 + 16) + (1 + 8 + 8)},
		// A graph copy node's buffer: made, written with a launch, read back.
		{"fgrGraphHostAlloc", w{}.u64(16).u8(1), res + 1 + 8 + 8},
		{"fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0).u64(1).u64(8).u8(1).u64(8).u64(HostBuffer(false) + 8).u8(1).u64(8).u64(8).u8(1).u64(8).raw("abcdefgh"), res},
		{"fgrGraphHostRead", w{}.u64(0).u64(HostBuffer(false)).u64(16).u8(1), res + 1 + 8 + 16},
		// Pinned memory promoted: mapped at the client's address.
		{"fgrHostMapAt", w{}.u64(0x3f5a00000000).u64(0x10000).u8(1), res + 1 + 8 + 8},
		{"xt_simA_2", w{}.u64(0x3ff8000000000000).u64(0x40100000).u64(3), res + 8},
		{"xt_simA", w{}, res + 1 + 8 + 20},
		// The context object cuBLAS makes, and a word about one.
		{"xt_ctx_51", w{}.u64(h.Context).u64(0).u64(0).u8(1), res + 1 + 8 + 8},
		{"xt_ctx_39", w{}.u64(h.Context).u64(h.CtxObject).u64(0).u8(1), res + 1 + 8 + 8},
	}
}

// Seeds are the first inputs of the native fuzzer (native/), by name: each
// well-formed request alone, all of them in one sequence, and the state a
// move would carry (a fresh connection's, then one the requests that name
// none of fake_connection's handles made) loaded before them.
func Seeds() (map[string][]byte, error) {
	ops := Ops()
	h := Names()
	seeds := map[string][]byte{}
	var all, fresh [][]byte
	for i, r := range Valid() {
		op, ok := ops[r.Op]
		if !ok {
			return nil, fmt.Errorf("no operation %s", r.Op)
		}
		f := Frame(op, r.Args)
		all = append(all, f)
		seeds[fmt.Sprintf("%02d-%s", i, r.Op)] = Input(f)
		// A fresh connection, which alone takes a state, has none of them.
		if !names(r.Args, h.Module, h.Function, h.Graph, h.Pool, h.Context, h.CtxObject, h.Node) {
			fresh = append(fresh, f)
		}
	}
	seeds["all"] = Input(all...)
	for _, s := range []struct {
		name   string
		frames [][]byte
	}{{"state-then-all", nil}, {"state-made-then-all", fresh}} {
		state, err := State(s.frames...)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s.name, err)
		}
		seeds[s.name] = Input(append([][]byte{StateRecord(state)}, all...)...)
	}
	return seeds, nil
}

// names reports whether args hold any of the handles' names.
func names(args []byte, handles ...uint64) bool {
	for _, v := range handles {
		if bytes.Contains(args, binary.LittleEndian.AppendUint64(nil, v)) {
			return true
		}
	}
	return false
}

// memop is a stream memory operation's 48 bytes: a 32-bit write of v at addr.
func memop(addr uint64, v uint32) string {
	b := w{}.u32(2).u32(0).u64(addr).u64(uint64(v)).u32(0).u32(0).u64(0).u64(0)
	return string(b)
}
