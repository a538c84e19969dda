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
	printsAsLocally(t, local, "graphnodes", "unix", "shm", "tcp")
}

// What a connection may not name in a node is refused with the driver's
// error, and the executor goes on: a memset node outside the connection's
// memory (past its allocation, or the program's own memory), a forged
// graph, an allocation node's access descriptors (an array in the
// program's memory, not carried).
func TestRemoteGraphNodesHostile(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	got := e.remote(s, "graphnodes", "hostile")
	want := `memset past its allocation: CUDA_ERROR_INVALID_VALUE
forged graph: CUDA_ERROR_INVALID_HANDLE
memset into the program's memory: CUDA_ERROR_INVALID_VALUE
access descriptors: CUDA_ERROR_NOT_SUPPORTED
then a memset in its memory: CUDA_SUCCESS
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
