package main

// The remoting protocol, generated from api/remote.api joined with
// api/cuda.api: the client stubs of the remoting libcuda.so.1, the
// executor's dispatch, the operation numbers both share and the support
// list in the docs. Wire format and helpers: remote/wire.h.

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// Disposition says where a call is answered.
type Disposition string

const (
	DispLocal Disposition = "local"  // by the client alone, hand-written
	DispSync  Disposition = "sync"   // forwarded, answer awaited
	DispWrap  Disposition = "wrap"   // forwarded, with hand-written client bookkeeping
	DispQueue Disposition = "queued" // forwarded without waiting; errors surface at the next syncpoint
)

// RemoteEntry is one entry point as the remoting client exports it.
type RemoteEntry struct {
	Entry
	Disp  Disposition    // "" when not supported remotely
	Why   string         // why not, as api/remote.api says (unsupported "WHY")
	Note  string         // what the docs' list says of it ("NOTE" last on its line)
	Kinds map[string]Ann // the pointer parameters' kinds (kind.go)
	Drain string         // stream the executor waits for before answering
	// A call that waits for the device: Wait names what its answer is the
	// wait for (a CUstream or CUevent parameter, or "context"), After the
	// stream ("null": the variant's default stream) it waits for before
	// it is made. Either lets the connection's other calls go on meanwhile
	// (remote/executor/wait.c).
	Wait, After string
	// Stage: the buffer parameter of an upload or download that may go
	// through the staging areas of shm:// (remote/client/stage.c).
	Stage string
	Chunk string // byte count by which the client splits a large call into several
	Sync  bool   // a syncpoint: errors of earlier queued calls surface here
	// PinnedWait: a synchronous memset, which natively returns once done
	// when its destination is pinned host memory.
	PinnedWait bool
	UVA        bool   // a copy under unified addressing (dst, src, ByteCount[, hStream]): fgr_uva_copy first
	Extra      bool   // given in api/remote.api (not hooked by the shim)
	Bare       bool   // refused by name and version alone: no prototype, no declaration
	Op         int    // operation number on the wire (forwarded entries), from 1
	Source     string // file:line of the annotation
	Table      *Table // export table this is a function (or the fetch) of
	Slot       int    // its word in the table
	Fetch      bool   // the table's fetch: its data words
	Ret        string // C return type of a table function ("" for CUresult)
	// What the executor checks and records (milestone 7): the device
	// range each by-value CUdeviceptr must lie in, the out CUdeviceptr
	// parameters that return this connection's memory (with the size, ""
	// to ask the driver), the handle or range a successful call destroys,
	// and the parameter whose handle owns what the call returns.
	Dev      map[string]Ann // the device addresses' kinds (kind_addr.go)
	Alloc    map[string]string
	Destroys string
	Owner    string
	// AsHandle: untyped results that hold a handle of a kind when a
	// condition over the parameters holds (cuPointerGetAttribute's
	// context and memory pool): each param, kind, condition.
	AsHandle [][3]string
	// By-value parameters of a table function whose meaning is unknown
	// and that were 0 natively: the driver is given 0 whatever the caller
	// passed (what a caller leaves there may be a register of its own).
	Zero []string
}

// remoteHandles are the handle kinds the executor tracks per connection:
// every by-value one a request carries must be one the connection was
// given, and every one a call returns is recorded.
var remoteHandles = map[string]bool{
	"CUcontext": true, "CUmodule": true, "CUfunction": true, "CUlibrary": true, "CUkernel": true,
	"CUstream": true, "CUevent": true, "CUgraph": true, "CUgraphExec": true, "CUgraphNode": true,
	"CUarray": true, "CUmipmappedArray": true, "CUmemoryPool": true, "CUmemGenericAllocationHandle": true,
	"CUgreenCtx": true, "CUlinkState": true, "fgrCtxObject": true, "CUdevResourceDesc": true,
}

// deviceWide handles outlive the context they were made in.
var deviceWide = map[string]bool{"CUcontext": true, "CUmemoryPool": true, "CUmemGenericAllocationHandle": true,
	"CUgreenCtx": true, "CUdevResourceDesc": true}

// structHandles are the handles inside structures a request carries.
var structHandles = map[string][][2]string{
	"CUDA_GRAPH_INSTANTIATE_PARAMS": {{"hUploadStream", "CUstream"}},
	"CUlaunchConfig":                {{"hStream", "CUstream"}},
	"CUDA_MEMCPY3D":                 {{"srcArray", "CUarray"}, {"dstArray", "CUarray"}},
}

// structAddrs are the device addresses in structures a request carries:
// the program's, so translated where its memory moved (fgr_moved) before
// they are checked, and translated back in a structure a call answers.
var structAddrs = map[string][]string{
	"CUDA_MEMSET_NODE_PARAMS": {"dst"},
	"CUDA_MEMCPY3D":           {"srcDevice", "dstDevice"},
}

// structConds are what must hold of the other words of a structure a
// request carries (keyed by its type, or by "CALL TYPE" for one call's),
// else the call is refused with its error: $ stands for
// the structure ($dst: its field dst). A device address in it must lie in
// the connection's memory; a pointer into the caller's memory cannot be
// followed, so what it counts must be none. @ stands for the structure's
// pointer.
var structConds = map[string][]structCond{
	"CUDA_MEMSET_NODE_PARAMS":    {{"fgr_mem_in((uint64_t)$dst, fgr_span($pitch,fgr_mul($width,$elementSize),$height))", "dst", "(uint64_t)$dst", "CUDA_ERROR_INVALID_VALUE"}},
	"CUDA_MEM_ALLOC_NODE_PARAMS": {{"$accessDescCount == 0", "accessDescCount", "(uint64_t)$accessDescCount", "CUDA_ERROR_NOT_SUPPORTED"}},
	// A copy node's (an array copy's host side is the request's: textures.c).
	"cuGraphAddMemcpyNode CUDA_MEMCPY3D": {
		{"!fgr_copy3d_arrays(@)", "srcArray", "(uint64_t)0", "CUDA_ERROR_NOT_SUPPORTED"},
		{"fgr_copy3d_in(@)", "srcDevice", "(uint64_t)$srcDevice", "CUDA_ERROR_INVALID_VALUE"},
	},
	"cuGraphExecMemcpyNodeSetParams CUDA_MEMCPY3D": {
		{"!fgr_copy3d_arrays(@)", "srcArray", "(uint64_t)0", "CUDA_ERROR_NOT_SUPPORTED"},
		{"fgr_copy3d_in(@)", "srcDevice", "(uint64_t)$srcDevice", "CUDA_ERROR_INVALID_VALUE"},
	},
	// A kernel node's attribute: one whose value is plain numbers, or an
	// access policy window (a cache hint, never dereferenced).
	"cuGraphKernelNodeSetAttribute CUkernelNodeAttrValue": {
		{"attr == 1 || (fgr_launch_attr_sendable(attr) && !fgr_launch_attr_has_event(attr))", "priority", "(uint64_t)attr", "CUDA_ERROR_INVALID_VALUE"},
	},
	"cuGraphMemcpyNodeSetParams CUDA_MEMCPY3D": {
		{"!fgr_copy3d_arrays(@)", "srcArray", "(uint64_t)0", "CUDA_ERROR_NOT_SUPPORTED"},
		{"fgr_copy3d_in(@)", "srcDevice", "(uint64_t)$srcDevice", "CUDA_ERROR_INVALID_VALUE"},
	},
}

// structCond is a condition on a structure's words: cond, the field it
// names, its value in the refusal's message, the error.
type structCond struct{ cond, field, val, err string }

// structAllocs are the device addresses a call writes into the structure
// an inout parameter carries, each with its size ($ as in structConds):
// memory the connection owns from then on, as alloc's.
var structAllocs = map[string][][2]string{
	"CUDA_MEM_ALLOC_NODE_PARAMS": {{"dptr", "$bytesize"}},
}

// structOutHandles are the handles a call writes into the structures an
// inout parameter carries: renamed before the reply.
var structOutHandles = map[string][][2]string{
	"CUDA_GRAPH_INSTANTIATE_PARAMS": {{"hErrNode_out", "CUgraphNode"}},
	"CUgraphExecUpdateResultInfo":   {{"errorNode", "CUgraphNode"}, {"errorFromNode", "CUgraphNode"}},
}

// Table is a private export table the client answers (cuGetExportTable).
type Table struct {
	UUID  [16]byte
	Name  string
	Words int
	Slots []Slot
}

// Local says the client answers the whole table without the driver: no
// word is forwarded or copied.
func (t *Table) Local() bool {
	for _, sl := range t.Slots {
		if sl.Kind == "sync" || sl.Kind == "data" {
			return false
		}
	}
	return true
}

// Asked says handing the table out takes a round trip: some word is a copy
// of the driver's data, or every function word is forwarded (such a table
// is the server's driver's to hand out or refuse). A table the client
// answers in part itself is handed out at once; a forwarded word of it that
// the server's driver lacks answers CUDA_ERROR_NOT_SUPPORTED.
func (t *Table) Asked() bool {
	local, forwarded := false, false
	for _, sl := range t.Slots {
		switch sl.Kind {
		case "data":
			return true
		case "local":
			local = true
		case "sync":
			forwarded = true
		}
	}
	return forwarded && !local
}

// Slot is one word of a table.
type Slot struct {
	Index int
	Kind  string // size, null, self, data, returns, sync, local, unsupported
	N     int    // data: bytes; returns: the word returned
	Fn    *RemoteEntry
	Proto string // local: the C prototype of the client's function
	Func  string // local: its name
}

// shadowed are the handle kinds a client may name before the server made
// them: it picks the value (a shadow handle, FGR_SHADOW_TAG in its top
// bits), the creating call is queued, and the executor maps the value to
// the driver's handle wherever a request carries one.
var shadowed = map[string]bool{"CUstream": true, "CUevent": true}

// bitsPut and bitsGet carry a by-value table function argument or result
// of type t as a u64.
func bitsPut(t, v string) string {
	switch t {
	case "double":
		return fmt.Sprintf("fgr_f64_bits(%s)", v)
	case "float":
		return fmt.Sprintf("(uint64_t)fgr_f32_bits(%s)", v)
	}
	return scalarPut(Param{Type: t, Name: v})
}

func bitsGet(t, v string) string {
	switch t {
	case "double":
		return fmt.Sprintf("fgr_bits_f64(%s)", v)
	case "float":
		return fmt.Sprintf("fgr_bits_f32((uint32_t)%s)", v)
	case "CUdeviceptr":
		// Where a moved connection's driver-placed memory now is
		// (remote/executor/journal.c).
		return fmt.Sprintf("(CUdeviceptr)fgr_moved(%s)", v)
	}
	if handleTypes[t] || strings.Contains(t, "*") {
		return fmt.Sprintf("(%s)(uintptr_t)%s", t, v)
	}
	return fmt.Sprintf("(%s)%s", t, v)
}

func (r *RemoteEntry) param(name string) *Param {
	for i := range r.Params {
		if r.Params[i].Name == name {
			return &r.Params[i]
		}
	}
	return nil
}

// paramAfter and paramBefore are the parameters next to name, or nil.
func (r *RemoteEntry) paramAfter(name string) *Param {
	for i := 0; i+1 < len(r.Params); i++ {
		if r.Params[i].Name == name {
			return &r.Params[i+1]
		}
	}
	return nil
}

func (r *RemoteEntry) paramBefore(name string) *Param {
	for i := 1; i < len(r.Params); i++ {
		if r.Params[i].Name == name {
			return &r.Params[i-1]
		}
	}
	return nil
}

// Forwarded reports whether the entry has an operation on the wire.
func (r RemoteEntry) Forwarded() bool {
	return r.Disp == DispSync || r.Disp == DispWrap || r.Disp == DispQueue
}

// pointee is the type a pointer parameter points to, without const.
func pointee(t string) string {
	t = strings.TrimSpace(strings.TrimSuffix(t, "*"))
	return strings.TrimSpace(strings.TrimPrefix(t, "const "))
}

// elemSize is the C expression for the size of one pointed-to object.
func elemSize(t string) string {
	if p := pointee(t); p != "void" {
		return "sizeof(" + p + ")"
	}
	return "1"
}

// bytesExpr is the C expression for a buffer's size in bytes.
func bytesExpr(p Param, k Ann) string {
	if k.Count == "" {
		return elemSize(p.Type)
	}
	return fmt.Sprintf("fgr_mul((uint64_t)(%s), %s)", k.Count, elemSize(p.Type))
}

// byteBuffer: the executor can hand the frame's bytes to the driver
// without copying them into aligned memory.
func byteBuffer(t string) bool {
	p := pointee(t)
	return p == "void" || p == "char" || p == "unsigned char"
}

// opsHash identifies the operation table; client and executor built from
// different tables refuse each other at the handshake.
func opsHash(entries []RemoteEntry) uint64 {
	h := fnv.New64a()
	for _, e := range entries {
		if e.Forwarded() {
			fmt.Fprintf(h, "%d %s(%s)", e.Op, e.Name, e.ParamList())
			var names []string
			for n, k := range e.Kinds {
				names = append(names, n+"="+k.Name+"["+k.Count+"]")
			}
			sort.Strings(names)
			fmt.Fprintf(h, "%s drain=%s %s sync=%v\n", strings.Join(names, " "), e.Drain, e.Disp, e.Sync)
		}
	}
	return h.Sum64()
}

// scalarPut is the client's expression encoding a by-value parameter.
func scalarPut(p Param) string {
	if handleTypes[p.Type] || strings.Contains(p.Type, "*") {
		return fmt.Sprintf("(uint64_t)(uintptr_t)%s", p.Name)
	}
	if p.Type == "int" || p.Type == "CUdevice" {
		return fmt.Sprintf("(uint64_t)(int64_t)%s", p.Name)
	}
	return fmt.Sprintf("(uint64_t)%s", p.Name)
}

const remoteHeader = "/* Code generated by tools/gen from api/remote.api and api/cuda.api. DO NOT EDIT. */\n"

// emitRemoteProto writes the operation numbers and the prototypes of the
// entries only the remoting client exports.
func emitRemoteProto(entries []RemoteEntry) string {
	w := &cw{}
	w.WriteString(remoteHeader)
	w.line("#ifndef FLEXGV_REMOTE_PROTO_GEN_H")
	w.line("#define FLEXGV_REMOTE_PROTO_GEN_H")
	w.blank()
	w.line("#include \"flexgv/cuda_api_gen.h\"")
	w.blank()
	w.line("/* Operations on the wire; 0 is the handshake. */")
	w.open("enum fgr_op")
	w.line("FGR_OP_HELLO = 0,")
	n := 0
	for _, e := range entries {
		if e.Forwarded() {
			w.line("FGR_OP_%s = %d,", e.Name, e.Op)
			n = e.Op
		}
	}
	w.line("FGR_NUM_OPS = %d", n+1)
	w.closeWith(";")
	w.blank()
	w.line("#define FGR_OPS_HASH 0x%016xULL", opsHash(entries))
	w.blank()
	w.line("/* The project's own operations (the driver's entry points the shim does")
	w.line(" * not hook are declared in flexgv/cuda_api_gen.h). */")
	for _, e := range entries {
		if e.Extra && !e.Bare && !strings.HasPrefix(e.Name, "cu") {
			w.line("CUresult %s(%s);", e.Name, e.ParamList())
		}
	}
	w.blank()
	w.line("/* Forwarders of the wrap entries, called by their hand-written exports. */")
	for _, e := range entries {
		if e.Disp == DispWrap {
			w.line("CUresult fgr_fwd_%s(%s);", e.Name, e.ParamList())
		}
	}
	w.blank()
	w.line("#endif")
	return w.String()
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
