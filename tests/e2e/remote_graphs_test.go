package e2e

import (
	"strings"
	"testing"
)

// A graph built node by node (an allocation node, memset nodes into it
// and into cuMemAlloc memory) does remotely what it does locally over
// every transport: the bytes the nodes set, the nodes' types, the
// allocation node's parameters, a relaunch refused while its allocation
// is in use and allowed once it is freed (the freed address still the
// connection's, since the graph allocates it again).
func TestRemoteGraphNodesMatchLocal(t *testing.T) {
	e := newEnv(t)
	local := e.run("graphnodes")
	if local.code != 0 || !strings.Contains(local.stdout, "2D set again: 4=04") ||
		!strings.Contains(local.stdout, "relaunch once freed: CUDA_SUCCESS") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"graphnodes"}, "unix", "shm", "tcp")
}

// Edges added after their nodes order a launch as locally (the copy sees
// the memset it was made to follow), an edge twice or closing a cycle is
// refused, an empty node joins, root nodes are counted, a child graph
// runs inside, the edges and a node's neighbours read back name the
// nodes the program holds, edges are removed, a clone keeps the edges and
// finds its nodes by the original's, a free node names what it frees, a
// clone runs.
func TestRemoteGraphEdgesMatchLocal(t *testing.T) {
	e := newEnv(t)
	local := e.run("graphnodes", "edges")
	if local.code != 0 || !strings.Contains(local.stdout, "z: 0=33") || !strings.Contains(local.stdout, "48=55") || !strings.Contains(local.stdout, "roots after it: 1") ||
		!strings.Contains(local.stdout, "edges: 5; B>A(0) B>C(0) A>C(0) C>D(0) C>E(0); the first 2: B>A B>C\nthe join's dependencies: B A\nits dependents: D E\nset2's dependents: 0\nedges: 4;") ||
		!strings.Contains(local.stdout, "the clone's join found: 2 dependencies, its own nodes yes\na node not of the original: CUDA_ERROR_INVALID_VALUE\nthe clone's edges: 5\nthe free node frees the allocation node's: yes\n") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"graphnodes", "edges"}, "unix", "shm", "tcp")
}

// Conditional nodes run remotely as locally over every transport: an IF
// node whose body a kernel enables through the handle (the driver's value,
// passed through to the kernel), an IF node with an else body under the
// handle's default value and with the other handle set in the executable,
// a WHILE node counting down, its executable updated from a graph of the
// same shape and refused one of another (the nodes that made it fail named
// as the program knows them), a body filled by capturing a stream into it
// (its dependencies cleared halfway); the bodies the driver created are the
// program's graphs (a kernel node added into each, the same graph read
// back, a clone's own); body counts and a handle the driver refuses are
// refused alike, and nothing is left of them.
func TestRemoteGraphConditionalNodes(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"graphnodes", "conditional"},
		"IF node: type 13; read back: type 13, kind 0, 1 body, the same handle, the same body graph (1 node)",
		"IF with flag 0: word 0\nIF with flag 1: word 42", "clone's IF node: its own body graph, 1 node in it",
		"IF/else, default 0: word 2", "IF/else, default 1: word 1", "WHILE from 5: body ran 5 times, counter 0",
		"IF of 3 bodies: CUDA_ERROR_INVALID_VALUE\nWHILE of 2 bodies: CUDA_ERROR_INVALID_VALUE",
		"update from a graph of the same shape: CUDA_SUCCESS, result 0\nupdated WHILE from 3: body ran 0 times, counter 3",
		"update from a graph of an empty node: CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, result 3, error node: the empty node, from: none",
		"captured into the IF node's body: the same graph, 2 roots\nIF with a captured body: word 42, tally 1",
		"nodes left: 1",
	)
	printsAsLocally(t, local, []string{"graphnodes", "conditional"}, "unix", "shm", "tcp")
}

// An executable graph is updated only from a graph of its topology, as
// the driver documents: a node depending on another node, a dependency
// more, an edge of another kind (programmatic), a node of another kind, a
// node more, or a child graph whose nodes are not ordered as they were
// are each refused, naming hGraph's node (and the edge's other end where a
// dependency differs; no node where the node count does; a graph's first
// node where the count of nodes depending on none does), and the
// executable runs as before; the same topology updates it: what an H100's
// driver answers (scripts/gpu-e2e.sh simmodel). Remotely as locally over
// every transport, the nodes named as the program knows them.
func TestGraphExecUpdateByTopology(t *testing.T) {
	e := newEnv(t)
	local := e.run("graphnodes", "topology")
	refused := "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"
	for _, want := range []string{
		"update from the child graph's nodes unordered: " + refused + ", result 2, error node k1, from none; runs 0 1 2 3 4\n",
		"update from a node more: " + refused + ", result 2, error node none, from none; runs 0 1 2 3 4\n",
		"update from C an empty node: " + refused + ", result 3, error node C, from none; runs 0 1 2 3 4\n",
		"update from C after A by a programmatic edge: " + refused + ", result 2, error node C, from A; runs 0 1 2 3 4\n",
		"update from C after A and B: " + refused + ", result 2, error node C, from none; runs 0 1 2 3 4\n",
		"update from C after B, not A: " + refused + ", result 2, error node C, from B; runs 0 1 2 3 4\n",
		"update from the same topology: CUDA_SUCCESS, result 0, error node none, from none; runs 10 11 12 13 14\n",
	} {
		if local.code != 0 || !strings.Contains(local.stdout, want) {
			t.Fatalf("locally: exit %d, no %q in\n%s%s", local.code, want, local.stdout, local.stderr)
		}
	}
	printsAsLocally(t, local, []string{"graphnodes", "topology"}, "unix", "shm", "tcp")
}

// cuGraphAddNode makes every kind of node remotely as locally, over every
// transport (CUDA 12.2's way to build a graph, which XLA's command buffers
// use): an allocation, memsets, a kernel, a copy, a host function, a cloned
// child, event wait and record nodes, an empty node and a free, each read
// back by cuGraphNodeGetParams; their parameters changed in the graph and
// in an executable; a batch memory operation node (its operations read back
// into an array of the node's, an executable's set to others, a write
// outside device memory refused; one launched after its word was freed,
// which writes nothing; one captured from a stream's write of a word); an edge with data refused by the server's driver with
// no node left behind; a child graph moved into its node (CUDA 12.9), the
// program's graph then the node's (not destroyed, instantiated or moved
// alone, nor made to hold the graph that holds it), its own node changed
// in the executable of the graph its parent was moved into; kinds not made
// refused. Each kind went through cuGraphAddNode's refusal before, and
// batch memory operation nodes were not carried.
func TestRemoteGraphNodesOfEveryKind(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"graphnodes", "generic"},
		"nodes: 10; types: 6 10 2 0 1 3 4 7 11 5\n",
		"read back: wait on gate yes; allocation of 256 at its address yes; memset value 0x5a width 16 in the current context yes; kernel fill yes, grid 1; copy of 16 bytes in the current context yes; host function yes with its data yes; child graph of 1 node, its own yes; record of done yes; free of the allocation yes; empty type 5\n",
		"launched: 0=2a 16=5a", " 31=5a 48=33 49=33 50=33 51=33\nhost calls 1, done CUDA_SUCCESS\n",
		"the executable again: 0=07 16=5a", "a new executable: 0=2a 16=44", "host calls 12\n",
		"memset parameters for the kernel node: CUDA_ERROR_INVALID_VALUE\nthe allocation node's set: CUDA_ERROR_NOT_SUPPORTED\n",
		"external semaphore node: CUDA_ERROR_NOT_SUPPORTED\nownership 7: CUDA_ERROR_INVALID_VALUE\nkind 99: CUDA_ERROR_INVALID_VALUE\nmore dependencies than memory holds: CUDA_ERROR_INVALID_VALUE\nnodes still: 10\n",
		"batch node: type 12, 2 operations, the first a 32-bit write of 0x11 where asked, the second of 0x2200000022; its own array yes\n",
		" 32=22 36=22 40=11 48=33", "executable's batch node set: CUDA_SUCCESS\n", " 32=44 36=44 40=33 48=33",
		"the graph's node keeps 0x11\na write outside device memory: CUDA_ERROR_INVALID_VALUE\n17 operations: CUDA_ERROR_NOT_SUPPORTED\nbatch graph nodes: 1\n",
		"a batch node launched after its word was freed: CUDA_SUCCESS\ncaptured write: 1 node of type 12, word 44 before its launch 0; after 0x55\n",
		"a kernel node after a programmatic edge: CUDA_SUCCESS; 1 edge, first to second, port 1 type 1; without its data: CUDA_ERROR_LOSSY_QUERY, "+
			"CUDA_ERROR_LOSSY_QUERY; counted: CUDA_SUCCESS 1; the first's dependent the second, type 1\n"+
			"cloned: 1 edge, port 1 type 1; removed as plain: CUDA_ERROR_INVALID_VALUE, as added: CUDA_SUCCESS\n"+
			"a programmatic edge from a memset: CUDA_ERROR_INVALID_VALUE; a port into a node: CUDA_ERROR_INVALID_VALUE; reserved bytes set: CUDA_ERROR_INVALID_VALUE; kind 2: CUDA_ERROR_INVALID_VALUE; "+
			"port 3: CUDA_ERROR_INVALID_VALUE; the programmatic port on a plain edge: CUDA_ERROR_INVALID_VALUE; a capture after one (not simulated): CUDA_ERROR_NOT_SUPPORTED\nafter a plain edge: 1 edge; a cycle in one call: CUDA_ERROR_INVALID_VALUE, an edge twice in one call: CUDA_ERROR_INVALID_VALUE, removed twice in one: CUDA_ERROR_INVALID_VALUE; edges still 1\n",
		"moved: the node's graph is the program's yes; destroyed alone: CUDA_ERROR_INVALID_VALUE; moved again: CUDA_ERROR_NOT_SUPPORTED; cloned: CUDA_ERROR_NOT_SUPPORTED\nthe graph holding it moved into it: CUDA_ERROR_INVALID_VALUE\ninstantiated alone: CUDA_ERROR_NOT_SUPPORTED\nits node set in the outer graph's executable: CUDA_SUCCESS\n",
		" 56=77 57=77 58=77 59=77\n",
	)
	printsAsLocally(t, local, []string{"graphnodes", "generic"}, "unix", "shm", "tcp")
}

// The CUDA 10 and 11 ABIs that a CUDA 11 runtime looks up at its own
// version (kernel nodes without a kernel handle or context, cuGraphExecUpdate
// with its two results, cuStreamGetCaptureInfo with two) resolve remotely
// and do what they do locally over every transport.
func TestRemoteOldGraphABIs(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"graphnodes", "old"},
		"old kernel node: the same function, grid 1, value 7\nlaunched: 9 9 0\nthe executable's node changed: 11 9\n",
		"update: CUDA_SUCCESS, result 0, error node none; launched: 7\n",
		"update to another shape: CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, result 6; no result: CUDA_SUCCESS\n",
		"capture info: status 0, capturing 1 with an id: 1\n",
	)
	printsAsLocally(t, local, []string{"graphnodes", "old"}, "unix", "shm", "tcp")
}

// What a connection may not name in a node is refused with the driver's
// error, and the executor goes on: a memset node outside the connection's
// memory (past its allocation, or the program's own memory), a forged
// graph, an allocation node's access descriptors (an array in the
// program's memory, not carried), a copy node from the program's pageable
// memory (which a launch could not reach) or past its allocation.
func TestRemoteGraphNodesHostile(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	got := e.remote(s, "graphnodes", "hostile")
	want := `memset past its allocation: CUDA_ERROR_INVALID_VALUE
forged graph: CUDA_ERROR_INVALID_HANDLE
memset into the program's memory: CUDA_ERROR_INVALID_VALUE
access descriptors: CUDA_ERROR_NOT_SUPPORTED
copy node from pageable memory: CUDA_SUCCESS
copy node past its allocation: CUDA_ERROR_INVALID_VALUE
conditional node of 2^20 bodies: CUDA_ERROR_INVALID_VALUE
a conditional node's body destroyed alone: CUDA_ERROR_INVALID_VALUE
the body of a destroyed node: CUDA_ERROR_INVALID_HANDLE
then a memset in its memory: CUDA_SUCCESS
a moved child graph once its parent is gone: CUDA_ERROR_INVALID_HANDLE
`
	if got.code != 0 || got.stdout != want {
		t.Fatalf("exit %d, printed\n%s\nwant\n%s\n%s", got.code, got.stdout, want, got.stderr)
	}
	// The executor refused the first of them itself, before the driver
	// (which might take memory of the executor's own for the node's).
	if !strings.Contains(s.Log(), "refusing cuGraphAddMemsetNode: memsetParams->dst=") {
		t.Errorf("the executor did not say it refused the memset node:\n%s", s.Log())
	}
}

// A host node runs the program's function at each launch, in the program
// (the executor's gate hands it to the client: over shm:// through the
// shared memory, over a socket through the host-function channel).
func TestRemoteGraphHostNode(t *testing.T) {
	e := newEnv(t)
	local := e.run("graphnodes", "host")
	if local.code != 0 || !strings.Contains(local.stdout, "after 3 launches: host node ran for 30\nits data changed, one more: 31\n"+
		"read back: the same function yes, the same data yes\nthe executable's set to +100: 131; the graph's node keeps its data: yes\n"+
		"the graph's node set to +1000, a new executable and the old one: 1231") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"graphnodes", "host"}, "shm", "unix", "tcp", "tls")
}

// Event record and wait nodes run, and their events read back as the
// program's handles and changed (the graph's node, the executable's copy),
// as locally.
func TestRemoteGraphEventNodes(t *testing.T) {
	argv := []string{"graphnodes", "events"}
	local := runsLocally(t, newEnv(t), argv, "record node's event: e1 yes\nwait node's event: gate yes",
		"the executable recorded e1 (its copy kept it): CUDA_SUCCESS, after the event before it: yes\nthen e2: CUDA_SUCCESS")
	printsAsLocally(t, local, argv, "shm", "unix", "tcp")
}

// A memset node's parameters are read and changed, on the graph's node and
// an executable's copy (in the connection's memory alone), and an
// executable's node is turned off and on, as locally.
func TestRemoteGraphNodeParams(t *testing.T) {
	argv := []string{"graphnodes", "params"}
	local := runsLocally(t, newEnv(t), argv, "the executable's set to 16-bit 0x2222: 0=22",
		"enabled: 0; launched without the memset:\nwith it again: 0=22")
	printsAsLocally(t, local, argv, "shm", "unix", "tcp")
}

// An executable's child graph node set to another graph's parameters runs
// them remotely as locally, over every transport; where a child copies
// into the program's pageable memory (server buffers the client cannot
// tell apart), it is refused remotely, said once.
func TestRemoteGraphExecChildParams(t *testing.T) {
	argv := []string{"graphnodes", "childparams"}
	local := runsLocally(t, newEnv(t), argv, "child node: 2, the executable's set to another child's: 5, the graph's node: 2\n",
		"another topology: CUDA_ERROR_INVALID_VALUE, no child graph's node: CUDA_ERROR_INVALID_VALUE\n")
	printsAsLocally(t, local, argv, "shm", "unix", "tcp")
	e := newEnv(t)
	if r := e.run("graphnodes", "childparams", "pageable"); r.code != 0 ||
		!strings.Contains(r.stdout, "a child copying into the program's memory: CUDA_SUCCESS") {
		t.Fatalf("locally: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := e.remote(e.serve("unix"), "graphnodes", "childparams", "pageable")
	if r.code != 0 || !strings.Contains(r.stdout, "a child copying into the program's memory: CUDA_ERROR_NOT_SUPPORTED") ||
		strings.Count(r.stderr, "cuGraphExecChildGraphNodeSetParams: an executable or child graph with copies") != 1 {
		t.Errorf("remotely: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// User objects over every transport as locally: the program's destructor
// runs on its side once the server's driver lets the last reference go (a
// graph's, an executable's, a clone's), not before.
func TestRemoteUserObjects(t *testing.T) {
	argv := []string{"graphnodes", "userobjects"}
	local := runsLocally(t, newEnv(t), argv, "b: its graph gone, its executable launched, destroyed 1\n",
		"c: the clone gone, destroyed 111\n", "user objects: done")
	printsAsLocally(t, local, argv, "shm", "unix", "tcp", "tls")
	// With a failover server, checkpoints every millisecond: each
	// destructor still runs once, and the failover stays.
	e := newEnv(t)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	r := e.runIn("", "flexgv", "run", "--remote", a.addr, "--failover", b.addr, "--checkpoint-every", "1ms", "--",
		bin(argv[0]), argv[1])
	if r.code != 0 || r.stdout != local.stdout ||
		strings.Contains(r.stderr, "no failover from here on") {
		t.Errorf("with a failover server: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// A host node after a copy node into the program's memory sees the bytes
// the copy wrote, and what it changes there stays, over every transport
// (the executor cannot reach the program's pageable memory: the bytes go
// with the host node's turn, on the channel or in the shared memory).
func TestRemoteGraphHostNodeReadsCopies(t *testing.T) {
	e := newEnv(t)
	local := e.run("graphnodes", "hostread")
	if local.code != 0 || strings.Count(local.stdout, "the host node saw 0x707; then before[0..1] 7 99, after[0] 7") != 12 {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"graphnodes", "hostread"}, "shm", "unix", "tcp", "tls")
}

// Copy nodes: device to device; pinned host memory (cuMemAllocHost) up
// and back, read at the launch: over shm:// the executor maps it at the
// program's address, over a socket it is the client's alone and goes
// through a buffer of the server's as pageable memory does.
func TestRemoteGraphCopyNodes(t *testing.T) {
	e := newEnv(t)
	local := e.run("graphnodes", "copies")
	if local.code != 0 || !strings.Contains(local.stdout, "device copy: 0=05") ||
		!strings.Contains(local.stdout, "pinned round trip: 0=80") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	for _, transport := range []string{"shm", "unix"} {
		e := newEnv(t)
		got := e.remote(e.serve(transport), "graphnodes", "copies")
		if got.code != 0 || got.stdout != local.stdout {
			t.Errorf("over %s: exit %d, printed\n%s\nlocally\n%s\n%s", transport, got.code, got.stdout, local.stdout, got.stderr)
		}
	}
}

// Copies with the program's pageable memory in graphs run remotely as
// locally over every transport: captured up and down around a kernel and
// launched with new input each time, copy nodes added on pageable memory
// (pitched rows whose gaps stay the program's, host to host), a clone
// outliving its graph, a child graph, an executable updated to other host
// memory or its node set to other memory (cuGraphExecMemcpyNodeSetParams),
// the graph's node read back as the program gave it and set to other
// memory, and graphs made and destroyed without the server keeping their
// buffers (200 of 8 MiB would pass its bound).
func TestRemoteGraphPageableCopies(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"graphnodes", "pageable"},
		"launch down: 120 121 122 123 124 125 126 127\nlaunch by address: 120 121",
		"launch 1 rows back: 0=33 8=42 9=05 10=06 11=07 12=09 13=09 14=0a 15=0b 16=34 72=45 ",
		"host to host: 0=51 1=a1",
		"clone's rows back: 0=33 8=78 9=05",
		"child graph's rows back: 0=33 8=79 9=05",
		"after it: 1000 1001",
		"the node's new memory: 500 501 502 503 504 505 506 507\nits old memory: 0 0 0 0 0 0 0 0\n",
		"the graph's node reads back: into a_out yes, from d yes, 32 bytes\ngraph's node set: CUDA_SUCCESS\nit reads back: into c_out yes, 16 bytes\n"+
			"an executable made after writes c_out: 500 501 502 503 0 0 0 0\nand not a_out: 0 0 0 0 0 0 0 0\n",
		"200 graphs of an 8 MiB node: CUDA_SUCCESS",
	)
	printsAsLocally(t, local, []string{"graphnodes", "pageable"}, "shm", "unix", "tcp")
}

// A program adds a node to the graph a stream is capturing, as
// cudaStreamGetCaptureInfo lets it (graphConditionalNodes does): the
// capture's graph and dependencies come back, the node is added after them
// and set as the stream's dependencies, and the graph runs it in order,
// over every transport as locally.
func TestRemoteCaptureInfoGraph(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"graphnodes", "captureinfo"},
		"after the node: 1 dependencies, the node, edge data none, the same graph: yes\n",
		"end: CUDA_SUCCESS, the capture's graph: yes\nnodes: 3\nword: 115 ")
	printsAsLocally(t, local, []string{"graphnodes", "captureinfo"}, "shm", "unix", "tcp")
}

// A kernel node's parameters (what jacobiCudaGraphs changes between
// launches) read and changed remotely as locally over every transport,
// the entry points resolved at 12000 as a CUDA 12 runtime does: the
// executable's node runs with another value, output and function from
// its next launch while the graph's node stays; the graph's node changed
// leaves the executable alone and reaches a new one; a library kernel's
// node, added or captured, gives back the program's kernel; its launch
// attributes are set, read back and copied (one naming an event refused
// before it reaches the server); a memset node,
// another graph's node, missing parameters and a function of another
// device's context are refused alike.
func TestRemoteGraphKernelNodeParams(t *testing.T) {
	const twoDevices = "FLEXGV_SIM_DEVICES=2"
	e := newEnv(t, twoDevices)
	local := runsLocally(t, e, []string{"graphnodes", "kernelparams"},
		"cuGraphExecKernelNodeSetParams at 12000: found, the _v2 entry point: yes\n",
		"graph's node: fill, grid 2x1x1, block 1x3x1, shared 0, word 0, value 7, count 1\n",
		"priority at first: 0\ncopied to another node: priority -2, cooperative 1\nan attribute naming an event: CUDA_ERROR_INVALID_VALUE, set: CUDA_ERROR_INVALID_VALUE\na memset node's: CUDA_ERROR_INVALID_VALUE\n",
		"launch after it: 0 9 0 286331153\ngraph's node after it: fill, grid 2x1x1, block 1x3x1, shared 0, word 0, value 7, count 1\n",
		"two launches of add: 0 209 0 286331153\n",
		"graph's node now: fill, grid 1x1x1, block 1x1x1, shared 0, word 2, value 5, count 1\nthe executable after it: 0 100 0 286331153\na new executable: 0 0 5 286331153\n",
		"executable's memset node set: CUDA_ERROR_INVALID_VALUE\nanother graph's node set: CUDA_ERROR_INVALID_VALUE\n",
		"a kernel's node: its kernel: the same, a function: no\na captured kernel's node: its function the kernel: yes\n",
		"another device's function: CUDA_ERROR_INVALID_VALUE\nthe executable after the refusals: 0 100 0 286331153\n",
	)
	for _, transport := range []string{"shm", "unix", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t, twoDevices)
			got := e.remote(e.serve(transport), "graphnodes", "kernelparams")
			if got.code != 0 || got.stdout != local.stdout {
				t.Errorf("remotely: exit %d, printed\n%s\nlocally\n%s\n%s", got.code, got.stdout, local.stdout, got.stderr)
			}
		})
	}
}

// A destroyed graph's allocation addresses, handed out again by the
// server's driver (here to a smaller range reserved for mapped memory,
// inside the graph's), are the connection's new memory: the executor keeps
// a graph's range past its allocation's free (each launch of the graph
// uses it), and memory starting inside it was not taken as the
// connection's, so mapping it was refused.
func TestRemoteGraphMemoryAddressesReused(t *testing.T) {
	argv := []string{"graphnodes", "reuse"}
	local := runsLocally(t, newEnv(t), argv,
		"reserved over a destroyed graph's memory: yes; map CUDA_SUCCESS, access CUDA_SUCCESS, memset CUDA_SUCCESS, read CUDA_SUCCESS 0x5a\n",
		"unmap CUDA_SUCCESS, free CUDA_SUCCESS, release CUDA_SUCCESS\n")
	printsAsLocally(t, local, argv, "unix", "shm", "tcp")
}

// Frameworks ask whether a stream captures before most allocations
// (PyTorch's allocator: six times per request of batch-1 inference, each a
// round trip). While no capture is under way in the program the client
// answers itself, as the driver would; during one the server answers.
func TestRemoteCaptureQuestionsWithoutACapture(t *testing.T) {
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
ctx, s, g = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
st, graph, n = ctypes.c_int(9), ctypes.c_void_p(5), ctypes.c_size_t(3)
def ask(what):
    a = [cu.cuStreamIsCapturing(h, ctypes.byref(st)) for h in (s, None)] + [st.value]
    b = cu.cuStreamGetCaptureInfo_v2(s, ctypes.byref(st), None, ctypes.byref(graph), None, ctypes.byref(n))
    print(what, a, b, st.value, graph.value is not None, n.value, flush=True)
ask("no context")
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuStreamCreate(ctypes.byref(s), 1) == 0
for i in range(100):
    ask("idle")
assert cu.cuStreamBeginCapture_v2(s, 2) == 0
ask("capturing")
assert cu.cuStreamEndCapture(s, ctypes.byref(g)) == 0
ask("ended")
`
	e := newEnv(t)
	local := e.run("python3", "-c", prog)
	if local.code != 0 || !strings.Contains(local.stdout, "capturing [0, 0, 0] 0 1 True 0\n") ||
		!strings.Contains(local.stdout, "idle [0, 0, 0] 0 0 False 0\n") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	s := e.serve("unix")
	e.extra = append(e.extra, "FLEXGV_REMOTE_LOG=calls")
	r := e.remote(s, "python3", "-c", prog)
	if r.code != 0 || r.stdout != local.stdout {
		t.Errorf("remotely: exit %d\n%s\nlocally\n%s\n%s", r.code, r.stdout, local.stdout, r.stderr)
	}
	// Asked of the NULL stream without a context (the driver's error), then
	// during the capture: two and one each time.
	if got := roundTrips(r); got["cuStreamIsCapturing"] != 4 || got["fgrStreamCaptureInfo"] != 2 {
		t.Errorf("round trips: cuStreamIsCapturing %d, fgrStreamCaptureInfo %d; want 4 and 2 (the calls made with no context and during the capture)\n%s",
			got["cuStreamIsCapturing"], got["fgrStreamCaptureInfo"], r.stderr)
	}
}
