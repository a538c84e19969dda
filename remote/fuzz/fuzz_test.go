package fuzz

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func opOf(t testing.TB, name string) uint16 {
	op, ok := Ops()[name]
	if !ok {
		t.Fatalf("no operation %s", name)
	}
	return op
}

func checkReply(t *testing.T, what string, out []byte) {
	t.Helper()
	if len(out) < 8 || int(binary.LittleEndian.Uint32(out)) != len(out)-4 {
		t.Fatalf("%s: reply of %d bytes says %d", what, len(out), binary.LittleEndian.Uint32(out))
	}
}

// The client's exact encodings are accepted and answered with every result.
func TestValidRequests(t *testing.T) {
	for _, r := range Valid() {
		bad, out := Serve(opOf(t, r.Op), r.Args)
		if bad {
			t.Errorf("%s: a well-formed request is called malformed", r.Op)
			continue
		}
		checkReply(t, r.Op, out)
		if len(out) != r.Reply {
			t.Errorf("%s: reply of %d bytes, want %d", r.Op, len(out), r.Reply)
		}
	}
}

// Every field is required: any request cut short, or with a byte more, is
// malformed.
func TestCutAndPaddedRequests(t *testing.T) {
	for _, r := range Valid() {
		op := opOf(t, r.Op)
		for n := 0; n < len(r.Args); n++ {
			if bad, _ := Serve(op, r.Args[:n]); !bad {
				t.Errorf("%s cut to %d of %d bytes: accepted", r.Op, n, len(r.Args))
			}
		}
		if bad, _ := Serve(op, append(append(w{}, r.Args...), 0)); !bad {
			t.Errorf("%s with a byte more: accepted", r.Op)
		}
	}
}

// What the decoders must refuse although every byte is there.
func TestInconsistentRequests(t *testing.T) {
	for _, c := range []struct {
		name, op string
		args     w
	}{
		{"buffer length other than its count", "cuMemcpyHtoD_v2", w{}.u64(0x1000).u64(16).u8(1).u64(8).raw("abcdefgh")},
		{"string without its NUL", "cuModuleGetFunction", w{}.u64(Names().Module).u8(1).u8(1).u64(3).raw("abc")},
		{"string with a NUL inside", "cuModuleGetFunction", w{}.u64(Names().Module).u8(1).u8(1).u64(4).raw("a\x00c\x00")},
		{"empty string", "cuModuleGetFunction", w{}.u64(Names().Module).u8(1).u8(1).u64(0)},
		{"a parameter buffer over 32 KiB", "cuLaunchKernel", w{}.u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u64(0).u8(0).u8(1).u32(40000).raw(string(make([]byte, 40000)))},
		{"too many kernel parameters", "cuLaunchKernel", w{}.u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u64(0).u8(1).u32(4097)},
		{"kernel parameters over 32 KiB", "cuLaunchKernel", w{}.u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u64(0).u8(1).u32(2).u32(30000).raw(string(make([]byte, 30000))).u32(4000).raw(string(make([]byte, 4000)))},
		// Values that would be addresses in the executor.
		{"a launch attribute naming an address", "cuLaunchKernelEx", w{}.u64(1).u8(1).u32(1).u32(1).u32(1).u32(64).u32(1).u32(1).u32(0).u64(0).u32(1).u32(1).raw(string(make([]byte, 64))).u8(0)},
		{"too many launch attributes", "cuLaunchKernelEx", w{}.u64(1).u8(1).u32(1).u32(1).u32(1).u32(64).u32(1).u32(1).u32(0).u64(0).u32(33).u8(0)},
		{"a JIT info log buffer", "cuModuleLoadDataEx", w{}.u64(1).u8(1).u8(1).u8(1).u64(0).u32(1).u32(3).u64(0x7f0000001000)},
		{"a JIT info log without its size", "cuModuleLoadDataEx", w{}.u64(1).u8(1).u8(1).u8(1).u64(0).u32(1).u32(3).u64(0)},
		{"a JIT log over 64 KiB", "cuModuleLoadDataEx", w{}.u64(1).u8(1).u8(1).u8(1).u64(0).u32(2).u32(3).u64(0).u32(4).u64(1 << 20)},
		{"a link's log over 64 KiB", "cuLinkCreate_v2", w{}.u64(2).u32(2).u32(3).u64(0).u32(4).u64(1 << 20).u8(1)},
		{"a link's log buffer of the client's", "cuLinkCreate_v2", w{}.u64(2).u32(2).u32(3).u64(0x7f0000001000).u32(4).u64(64).u8(1)},
		{"too many JIT options", "cuModuleLoadDataEx", w{}.u64(1).u8(1).u8(1).u8(1).u64(0).u32(65)},
		{"an image of no known form", "cuModuleLoadData", w{}.u8(1).u8(9)},
		{"an image sent inline without its bytes", "cuModuleLoadData", w{}.u8(1).u8(1).u8(0)},
		{"an image's hash cut short", "cuModuleLoadData", w{}.u8(1).u8(3).raw("0123456789")},
	} {
		if bad, _ := Serve(opOf(t, c.op), c.args); !bad {
			t.Errorf("%s (%s): accepted", c.name, c.op)
		}
	}
}

// Any byte of a well-formed request changed gives a refusal or an answer,
// never a crash.
func TestChangedBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("takes many seconds: make test runs it, make check (go test -short) does not")
	}
	for _, r := range Valid() {
		op := opOf(t, r.Op)
		for i := range r.Args {
			for _, v := range []byte{0, 1, 0x7f, 0x80, 0xff, r.Args[i] ^ 0x20} {
				a := append(w{}, r.Args...)
				a[i] = v
				if bad, out := Serve(op, a); !bad {
					checkReply(t, r.Op, out)
				}
			}
		}
	}
}

func FuzzServe(f *testing.F) {
	for _, r := range Valid() {
		f.Add(opOf(f, r.Op), []byte(r.Args))
	}
	f.Fuzz(func(t *testing.T, op uint16, args []byte) {
		if bad, out := Serve(op, args); !bad {
			checkReply(t, "fuzzed", out)
		}
	})
}

// A handle or device address this connection was not given is refused
// before the driver is called: a forged stream, event, function or
// context, an address outside its allocations (or one running past the
// end of one), handles inside structures and arrays.
func TestForeignHandlesAndAddressesRefused(t *testing.T) {
	const invalidValue, invalidHandle = 1, 400
	h := Names()
	for _, c := range []struct {
		name, op string
		args     w
		want     uint32
	}{
		{"an unknown stream", "cuStreamSynchronize", w{}.u64(0x7f0000001000), invalidHandle},
		{"an unknown event", "cuEventRecord", w{}.u64(0x7f0000002000).u64(0), invalidHandle},
		{"an unknown function", "cuLaunchKernel", w{}.u64(0x7f0000003000).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u64(0).u8(1).u32(0).u8(0), invalidHandle},
		{"an unknown event in a launch attribute", "cuLaunchKernelEx", w{}.u64(h.Function).u8(1).u32(1).u32(1).u32(1).u32(64).u32(1).u32(1).u32(0).u64(0).u32(1).u32(12).raw("\x00\x20\x00\x00\x00\x7f\x00\x00" + string(make([]byte, 56))).u8(0).u8(0), invalidHandle},
		{"an unknown stream in a launch configuration", "cuLaunchKernelEx", w{}.u64(h.Function).u8(1).u32(1).u32(1).u32(1).u32(64).u32(1).u32(1).u32(0).u64(0x7f0000001000).u32(0).u8(0).u8(0), invalidHandle},
		{"an unknown node among dependencies", "cuGraphAddEmptyNode", w{}.u64(h.Graph).u64(1).u8(1).u8(1).u64(8).u64(0x7f0000004000), invalidHandle},
		{"an unknown module", "cuModuleGetFunction", w{}.u64(8).u8(1).u8(1).u64(4).raw("abc\x00"), invalidHandle},
		// The driver's own values are not names: a client never sees them,
		// and one that guesses them (or an address) is refused.
		{"a module by the driver's value", "cuModuleGetFunction", w{}.u64(7).u8(1).u8(1).u64(4).raw("abc\x00"), invalidHandle},
		{"a context by the driver's value", "xt_ctx_51", w{}.u64(3).u64(0).u64(0).u8(1), 201}, // CUDA_ERROR_INVALID_CONTEXT
		{"a module by a function's name", "cuModuleGetFunction", w{}.u64(h.Function).u8(1).u8(1).u64(4).raw("abc\x00"), invalidHandle},
		// A name is 16-byte aligned below 2^46: the same bits otherwise are
		// no name.
		{"a module's name off its alignment", "cuModuleGetFunction", w{}.u64(h.Module + 8).u8(1).u8(1).u64(4).raw("abc\x00"), invalidHandle},
		{"a module's name past 2^46", "cuModuleGetFunction", w{}.u64(h.Module | 1<<50).u8(1).u8(1).u64(4).raw("abc\x00"), invalidHandle},
		{"an address outside every allocation", "cuMemcpyDtoH_v2", w{}.u64(0x7f0000005000).u64(16).u8(1), invalidValue},
		{"a copy running past its allocation", "cuMemcpyHtoD_v2", w{}.u64(0x10ff8).u64(16).u8(1).u64(16).raw("0123456789abcdef"), invalidValue},
		{"a memset running past its allocation", "cuMemsetD32_v2", w{}.u64(0x10ff0).u64(0).u64(8), invalidValue},
		{"a host address as a copy's source", "cuMemcpy", w{}.u64(0x1000).u64(0x7ffd00000000).u64(8), invalidValue},
		{"a free inside an allocation", "cuMemFree_v2", w{}.u64(0x1008), invalidValue},
		// Results larger than a call of their kind returns: refused before
		// memory is made for them.
		{"a 1 GiB bus id", "cuDeviceGetPCIBusId", w{}.u64(1 << 30).u64(0).u8(1), invalidValue},
		{"a negative bus id length", "cuDeviceGetPCIBusId", w{}.u64(0xffffffff).u64(0).u8(1), invalidValue},
		{"a list of 2^28 kernels", "cuLibraryEnumerateKernels", w{}.u64(1 << 28).u64(0).u8(1), invalidValue},
		{"a download over the frame limit", "cuMemcpyDtoH_v2", w{}.u64(0x1000).u64(1 << 31).u8(1), invalidValue},
		{"an attribute whose size is unknown", "cuMemPoolGetAttribute", w{}.u64(h.Pool).u64(99).u8(1), invalidValue},
		{"an out buffer sized by a huge in-out count", "cuGraphGetNodes", w{}.u64(h.Graph).u8(1).u8(1).u64(8).u64(1 << 60), invalidValue},
		{"a count whose size wraps to zero", "cuGraphGetNodes", w{}.u64(h.Graph).u8(1).u8(1).u64(8).u64(1 << 61), invalidValue},
		// Conditional nodes: more bodies than an answer holds (each would
		// be named), a context or node not the connection's.
		{"a conditional node of 2^20 bodies", "fgrGraphAddConditionalNode", w{}.u64(h.Graph).u64(0).u64(1).u64(2).u64(1 << 20).u64(h.Context).u8(1).u8(0).u8(0).u8(1), invalidValue},
		{"a conditional node of 2^32-1 bodies", "fgrGraphAddConditionalNode", w{}.u64(h.Graph).u64(0).u64(1).u64(2).u64(1<<32 - 1).u64(h.Context).u8(1).u8(0).u8(0).u8(1), invalidValue},
		{"a conditional node in a forged context", "fgrGraphAddConditionalNode", w{}.u64(h.Graph).u64(0).u64(1).u64(0).u64(1).u64(0x7f0000006000).u8(1).u8(0).u8(0).u8(1), 201},
		{"a conditional node after an unknown node", "fgrGraphAddConditionalNode", w{}.u64(h.Graph).u64(1).u64(1).u64(0).u64(1).u64(h.Context).u8(1).u8(1).u64(8).u64(0x7f0000004000).u8(0).u8(1), invalidHandle},
		{"a conditional node's parameters into 2^20 bodies", "fgrGraphConditionalNodeGetParams", w{}.u64(h.Node).u64(1 << 20).u8(1).u8(1).u8(1).u8(1).u8(1), invalidValue},
		{"an unknown node's conditional parameters", "fgrGraphConditionalNodeGetParams", w{}.u64(0x7f0000004000).u64(1).u8(1).u8(1).u8(1).u8(1).u8(1), invalidHandle},
		{"an unknown executable's conditional node", "fgrGraphConditionalNodeSetParams", w{}.u64(0x7f0000007000).u64(h.Node).u64(1).u64(0).u64(1).u64(h.Context), invalidHandle},
		// Kernel nodes' parameters: a node, executable or function not the
		// connection's, a node by a graph's name.
		{"an unknown node's kernel parameters", "fgrGraphKernelNodeGetParams", w{}.u64(0x7f0000004000).u64(16).u8(1).u8(1).u8(1).u8(1).u8(1).u8(1), invalidHandle},
		{"a graph's kernel parameters", "fgrGraphKernelNodeGetParams", w{}.u64(h.Graph).u64(16).u8(1).u8(1).u8(1).u8(1).u8(1).u8(1), invalidHandle},
		{"an unknown node's new kernel parameters", "fgrGraphKernelNodeSetParams", w{}.u64(0).u64(0x7f0000004000).u64(h.Function).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u8(0).u8(0), invalidHandle},
		{"an unknown executable's kernel node", "fgrGraphKernelNodeSetParams", w{}.u64(0x7f0000007000).u64(h.Node).u64(h.Function).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u8(0).u8(0), invalidHandle},
		{"a kernel node set to an unknown function", "fgrGraphKernelNodeSetParams", w{}.u64(0).u64(h.Node).u64(0x7f0000003000).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u8(0).u8(0), invalidHandle},
		// Addresses inside a node's structure: a memset node running past
		// its allocation, a copy node whose host side is not the
		// connection's memory (the executor's own, say) or whose device
		// side runs past its allocation.
		{"a memset node past its allocation", "cuGraphAddMemsetNode", w{}.u64(h.Graph).u64(0).u64(0).u8(1).u8(0).u8(1).u64(40).u64(0x10ff0).u64(0).u32(1).u32(1).u64(32).u64(1), invalidValue},
		{"a copy node from memory not the connection's", "cuGraphAddMemcpyNode", w{}.u64(h.Graph).u64(0).u64(0).u8(1).u8(0).u8(1).u64(200).raw(copy3d(1, 0x7ffd00000000, 2, 0x1000, 16)), invalidValue},
		{"a capture's dependencies into 2^32-1 nodes", "fgrStreamCaptureInfo", w{}.u64(0).u64(1<<32 - 1).u8(1).u8(1).u8(1).u8(1).u8(1), invalidValue},
		{"an unknown stream's capture", "fgrStreamCaptureInfo", w{}.u64(0x7f0000001000).u64(2).u8(1).u8(1).u8(1).u8(1).u8(1), invalidHandle},
		// Graph copy nodes' buffers: a launch writes, a read reads, only
		// inside a buffer the connection holds (not its device memory, not
		// one it gave back), bytes and sizes agreeing.
		{"a launch writing device memory", "fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0).u64(1).u64(8).u8(1).u64(8).u64(0x1000).u8(1).u64(8).u64(8).u8(1).u64(8).raw("abcdefgh"), invalidValue},
		{"a launch writing past its buffer", "fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0).u64(1).u64(8).u8(1).u64(8).u64(HostBuffer(false) + 60).u8(1).u64(8).u64(8).u8(1).u64(8).raw("abcdefgh"), invalidValue},
		{"a launch writing a buffer given back", "fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0).u64(1).u64(8).u8(1).u64(8).u64(HostBuffer(true)).u8(1).u64(8).u64(8).u8(1).u64(8).raw("abcdefgh"), invalidValue},
		{"a launch whose sizes exceed its bytes", "fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0).u64(2).u64(8).u8(1).u64(16).u64(HostBuffer(false)).u64(HostBuffer(false) + 8).u8(1).u64(16).u64(8).u64(1 << 63).u8(1).u64(8).raw("abcdefgh"), invalidValue},
		{"a launch whose sizes fall short of its bytes", "fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0).u64(1).u64(8).u8(1).u64(8).u64(HostBuffer(false)).u8(1).u64(8).u64(4).u8(1).u64(8).raw("abcdefgh"), invalidValue},
		{"a launch after an unknown event", "fgrGraphLaunchHost", w{}.u64(0).u64(0).u64(0x7f0000002000).u64(0).u64(0).u8(0).u8(0).u8(0), invalidHandle},
		{"a read of device memory", "fgrGraphHostRead", w{}.u64(0).u64(0x1000).u64(16).u8(1), invalidValue},
		{"a read past its buffer", "fgrGraphHostRead", w{}.u64(0).u64(HostBuffer(false) + 32).u64(64).u8(1), invalidValue},
		{"a read of a buffer given back", "fgrGraphHostRead", w{}.u64(0).u64(HostBuffer(true)).u64(16).u8(1), invalidValue},
		{"an executable's copy node set from memory not the connection's", "cuGraphExecMemcpyNodeSetParams", w{}.u64(0).u64(h.Node).u64(0).u8(1).u64(200).raw(copy3d(1, 0x7ffd00000000, 2, 0x1000, 16)), invalidValue},
		{"an executable's copy node set past its allocation", "cuGraphExecMemcpyNodeSetParams", w{}.u64(0).u64(h.Node).u64(0).u8(1).u64(200).raw(copy3d(2, 0x1000, 2, 0x10ff8, 16)), invalidValue},
		{"a copy node past its allocation", "cuGraphAddMemcpyNode", w{}.u64(h.Graph).u64(0).u64(0).u8(1).u8(0).u8(1).u64(200).raw(copy3d(2, 0x1000, 2, 0x10ff8, 16)), invalidValue},
		// Pinned memory to map at the client's address: never over the
		// executor's own memory, nor at 0, past 1 GiB or wrapping around.
		{"a mapping over the executor's own memory", "fgrHostMapAt", w{}.u64(OwnAddress()).u64(16).u8(1), 208}, // CUDA_ERROR_ALREADY_MAPPED
		{"a mapping at 0", "fgrHostMapAt", w{}.u64(0).u64(4096).u8(1), invalidValue},
		{"a mapping of no bytes", "fgrHostMapAt", w{}.u64(0x3f5b00000000).u64(0).u8(1), invalidValue},
		{"a mapping of 2 GiB", "fgrHostMapAt", w{}.u64(0x3f5b00000000).u64(2 << 30).u8(1), invalidValue},
		{"a mapping that wraps around", "fgrHostMapAt", w{}.u64(0xfffffffffffff000).u64(0x2000).u8(1), invalidValue},
		{"a mapping whose last page wraps around", "fgrHostMapAt", w{}.u64(0xffffffffffffe010).u64(0x1ff0).u8(1), invalidValue},
	} {
		before := Calls()
		bad, out := Serve(opOf(t, c.op), c.args)
		if bad {
			t.Errorf("%s: called malformed", c.name)
			continue
		}
		checkReply(t, c.name, out)
		if r := binary.LittleEndian.Uint32(out[4:]); r != c.want {
			t.Errorf("%s (%s): answered %d, want %d", c.name, c.op, r, c.want)
		}
		if Calls() != before {
			t.Errorf("%s (%s): the driver was called", c.name, c.op)
		}
	}
	// What the connection owns goes through.
	before := Calls()
	if _, out := Serve(opOf(t, "cuMemcpyDtoH_v2"), w{}.u64(0x10ff0).u64(16).u8(1)); binary.LittleEndian.Uint32(out[4:]) != 0 || Calls() != before+1 {
		t.Errorf("a copy inside the allocation: %x", out)
	}
}

// Promoted pinned memory: a page mapped once, then taken (by the mapping
// or anything of the executor's), its bytes the connection's memory; at
// most 1 GiB in all; freed, its pages and its share go, and it maps again.
// (The executor's driver calls are fakes here: the mappings are real.)
func TestPromotedPinnedMemory(t *testing.T) {
	const at, big = 0x3f6000000000, 0x3f7000000000
	answer := func(op string, args w) uint32 {
		bad, out := Serve(opOf(t, op), args)
		if bad {
			t.Fatalf("%s: called malformed", op)
		}
		return binary.LittleEndian.Uint32(out[4:])
	}
	steps := []struct {
		what string
		op   string
		args w
		want uint32
	}{
		{"mapped", "fgrHostMapAt", w{}.u64(at + 16).u64(8000).u8(1), 0},
		{"written", "fgrHostWrite", w{}.u64(at + 16).u64(8).u8(1).u64(8).raw("abcdefgh"), 0},
		{"written past it", "fgrHostWrite", w{}.u64(at + 8010).u64(8).u8(1).u64(8).raw("abcdefgh"), 1},
		{"its page again", "fgrHostMapAt", w{}.u64(at + 8100).u64(8).u8(1), 208},
		{"1 GiB more", "fgrHostMapAt", w{}.u64(big).u64(1 << 30).u8(1), 2}, // CUDA_ERROR_OUT_OF_MEMORY
		{"freed", "fgrHostMappedFree", w{}.u64(at + 16), 0},
		{"written once freed", "fgrHostWrite", w{}.u64(at + 16).u64(8).u8(1).u64(8).raw("abcdefgh"), 1},
		{"512 MiB once freed", "fgrHostMapAt", w{}.u64(big).u64(1 << 29).u8(1), 0},
		{"freed too", "fgrHostMappedFree", w{}.u64(big), 0},
		{"mapped again", "fgrHostMapAt", w{}.u64(at + 16).u64(8000).u8(1), 0},
		{"freed again", "fgrHostMappedFree", w{}.u64(at + 16), 0},
	}
	for _, s := range steps {
		if r := answer(s.op, s.args); r != s.want {
			t.Errorf("%s (%s): answered %d, want %d", s.what, s.op, r, s.want)
		}
	}
}

// IPC handles: an allocation's pages exported are named by a handle that
// an executor of the host opens (here the same process, through the
// exporter's socket); a handle nobody exported opens nothing, whatever its
// bytes: a forged secret, another size, an offset past its pages, an
// executor that is not there, zeros; what is not an allocation of the
// connection is not exported.
func TestIPCHandles(t *testing.T) {
	const invalidValue = 1
	answer := func(op string, args w) []byte {
		bad, out := Serve(opOf(t, op), args)
		if bad {
			t.Fatalf("%s: called malformed", op)
		}
		checkReply(t, op, out)
		return out
	}
	export := func(block, ptr, n uint64) (uint32, []byte) {
		out := answer("fgrIpcExport", w{}.u64(block).u64(ptr).u64(n).u8(1))
		r := binary.LittleEndian.Uint32(out[4:])
		if r != 0 {
			return r, nil
		}
		return r, out[17:81]
	}
	open := func(h []byte) uint32 {
		out := answer("fgrIpcOpen", w{}.u64(0x3f8000000000).u8(1).u64(64).raw(string(h)).u8(1))
		return binary.LittleEndian.Uint32(out[4:])
	}
	for _, c := range []struct {
		what            string
		block, ptr, len uint64
	}{
		{"pages not mapped", 0x2000, 0x2000, 16},
		{"inside an allocation", 0x1000, 0x1008, 16},
		{"past its pages", 0x1000, 0x1000, 0x20000},
		{"of no bytes", 0x1000, 0x1000, 0},
	} {
		if r, _ := export(c.block, c.ptr, c.len); r != invalidValue {
			t.Errorf("exported %s: answered %d, want %d", c.what, r, invalidValue)
		}
	}
	r, h := export(0x1000, 0x1000, 16)
	if r != 0 || len(h) != 64 {
		t.Fatalf("an allocation exported: answered %d, %d bytes", r, len(h))
	}
	if r := open(h); r != 0 {
		t.Errorf("the handle opened: answered %d", r)
	}
	changed := func(at int, v byte) []byte {
		c := slices.Clone(h)
		c[at] ^= v
		return c
	}
	for _, c := range []struct {
		what string
		h    []byte
	}{
		{"a forged secret", changed(16, 1)},
		{"another size", changed(33, 1)},
		{"an offset past its pages", changed(46, 1)},
		{"a length past its pages", changed(54, 1)},
		{"an executor that is not there", changed(8, 1)},
		{"another magic", changed(0, 1)},
		{"zeros", make([]byte, 64)},
	} {
		if r := open(c.h); r != invalidValue {
			t.Errorf("opened with %s: answered %d, want %d", c.what, r, invalidValue)
		}
	}
}

// The native fuzzer's inputs, run here: its seeds, each request of which is
// answered (the frames and records as the executor and run_input read
// them), and what it found (testdata/native), none of which may abort.
func TestNativeInputs(t *testing.T) {
	seeds, err := Seeds()
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range seeds {
		want := 1
		if strings.Contains(name, "all") {
			want = len(Valid())
		}
		if got := Run(in); got != want {
			t.Errorf("seed %s: %d requests answered, want %d", name, got, want)
		}
	}
	found, _ := filepath.Glob("testdata/native/*")
	for _, f := range found {
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		Run(in)
	}
}

// A request flagged wait-only (remote/wire.h) that another request came
// beside only waits: of a call that waits for the device (api/remote.api:
// wait=, after=) the driver is not asked to make it, and the answer is
// FGR_NOT_MADE without results; any other call is served as it would be.
func TestWaitOnlyNeverMakesTheCall(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join("..", "..", "api", "remote.api"))
	if err != nil {
		t.Fatal(err)
	}
	waits := map[string]bool{}
	for _, l := range strings.Split(string(spec), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(l, "#") || !(strings.Contains(l, " wait=") || strings.Contains(l, " after=")) {
			continue
		}
		name := f[0]
		if name[0] >= '0' && name[0] <= '9' {
			name = f[1]
		}
		waits[strings.SplitN(name, "(", 2)[0]] = true
	}
	const notMade = 0x4e524746
	seen := 0
	extra := []Request{{"cuCtxSynchronize", w{}, 0}, {"cuStreamSynchronize", w{}.u64(0), 0}}
	for _, r := range append(Valid(), extra...) {
		before := Calls()
		bad, out := ServeWaitOnly(opOf(t, r.Op), r.Args)
		if bad {
			t.Fatalf("%s wait-only: malformed", r.Op)
		}
		checkReply(t, r.Op, out)
		if !waits[r.Op] {
			continue
		}
		seen++
		// An out buffer's place says "none" (one byte 0).
		noResults := len(out) == 8 || (len(out) == 9 && out[8] == 0)
		if res := binary.LittleEndian.Uint32(out[4:]); res != notMade || !noResults || Calls() != before {
			t.Errorf("%s wait-only: result %#x, %d bytes, %d driver calls; want %#x, no results, none", r.Op, res, len(out),
				Calls()-before, notMade)
		}
	}
	if seen < 3 {
		t.Fatalf("only %d of the requests wait (%v)", seen, waits)
	}
}
