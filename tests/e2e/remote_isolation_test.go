package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wire is a client speaking the protocol itself, as a hostile one would:
// it sends whatever handles, addresses and contexts it likes.
type wire struct {
	t      *testing.T
	p      protocol
	conn   net.Conn
	ctx    uint64 // the context its requests name
	own    uint64 // its primary context
	output []byte // what the executor sent of the program's output
}

func dialWire(t *testing.T, p protocol, s *server) *wire {
	t.Helper()
	conn, err := net.Dial("unix", strings.TrimPrefix(s.addr, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &wire{t: t, p: p, conn: conn}
	conn.Write(auth(""))
	conn.Write(p.hello(p.hash))
	for i, what := range []string{"authentication", "handshake"} {
		if r := binary.LittleEndian.Uint32(c.frame()); r != 0 {
			t.Fatalf("%s answered %d (frame %d)", what, r, i)
		}
	}
	return c
}

// frame reads one reply frame's body, past the program's output
// (FGR_OUTPUT frames, kept in c.output).
func (c *wire) frame() []byte {
	c.t.Helper()
	for {
		c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var n [4]byte
		if _, err := io.ReadFull(c.conn, n[:]); err != nil {
			c.t.Fatalf("no answer: %v", err)
		}
		body := make([]byte, binary.LittleEndian.Uint32(n[:]))
		if _, err := io.ReadFull(c.conn, body); err != nil {
			c.t.Fatalf("answer cut short: %v", err)
		}
		if len(body) < 5 || binary.LittleEndian.Uint32(body) != fgrOutput {
			return body
		}
		c.output = append(c.output, body[5:]...)
	}
}

// fgrOutput is remote/wire.h's FGR_OUTPUT.
const fgrOutput = 0x4f524746

// call sends a synchronous request and returns its CUresult and the
// results after it (each out buffer: u8 present, u64 length, bytes).
func (c *wire) call(op string, args w) (uint32, []byte) {
	c.t.Helper()
	o, ok := c.p.ops[op]
	if !ok {
		c.t.Fatalf("no operation %s", op)
	}
	body := w{}.u16(o).u16(0).u32(0).u64(c.ctx)
	body = append(body, args...)
	c.conn.Write(append(w{}.u32(uint32(len(body))), body...))
	r := c.frame()
	return binary.LittleEndian.Uint32(r), r[4:]
}

// queue sends a queued call (no answer; its error waits for the next
// synchronization).
func (c *wire) queue(op string, args w) {
	c.t.Helper()
	o, ok := c.p.ops[op]
	if !ok {
		c.t.Fatalf("no operation %s", op)
	}
	body := w{}.u16(o).u16(1).u32(0).u64(c.ctx)
	body = append(body, args...)
	c.conn.Write(append(w{}.u32(uint32(len(body))), body...))
}

// out is the first out buffer of a reply.
func out(t *testing.T, res []byte) []byte {
	t.Helper()
	if len(res) < 9 || res[0] != 1 || uint64(len(res)-9) < binary.LittleEndian.Uint64(res[1:]) {
		t.Fatalf("no result in %x", res)
	}
	return res[9 : 9+binary.LittleEndian.Uint64(res[1:])]
}

func (c *wire) must(op string, args w) []byte {
	c.t.Helper()
	r, res := c.call(op, args)
	if r != 0 {
		c.t.Fatalf("%s: error %d", op, r)
	}
	return res
}

func (c *wire) handle(op string, args w) uint64 {
	c.t.Helper()
	return binary.LittleEndian.Uint64(out(c.t, c.must(op, args)))
}

// setup makes the client's primary context current and gives it memory.
func (c *wire) setup(bytes uint64) uint64 {
	c.own = c.handle("cuDevicePrimaryCtxRetain", w{}.u64(0).u8(1))
	c.ctx = c.own
	return c.handle("cuMemAlloc_v2", w{}.u64(bytes).u8(1))
}

func (c *wire) put(dptr uint64, data string) uint32 {
	r, _ := c.call("cuMemcpyHtoD_v2", w{}.u64(dptr).u64(uint64(len(data))).u8(1).u64(uint64(len(data))).raw(data))
	return r
}

func (c *wire) get(dptr, n uint64) (uint32, []byte) {
	r, res := c.call("cuMemcpyDtoH_v2", w{}.u64(dptr).u64(n).u8(1))
	if r != 0 {
		return r, nil
	}
	return r, out(c.t, res)
}

// A client reaches only what its connection was given: another
// connection's stream, context or memory, an address in its executor's
// own heap, a copy running past its allocation
// or a host address under unified addressing are refused with the error
// the driver gives for a bad handle or value, the executor says so once,
// and both connections go on working.
func TestRemoteForeignHandlesRefused(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	a := dialWire(t, p, s)
	aMem := a.setup(1 << 20)
	aMem2 := a.handle("cuMemAlloc_v2", w{}.u64(4096).u8(1))
	// Streams are named by the client (shadow handles); A's context by the
	// executor (a name, not an address: TestRemoteHandlesAreNames).
	const aStream = 1<<46 | 1<<4 // (wire.h: FGR_SHADOW_TAG)
	a.queue("cuStreamCreate", w{}.u64(0).u64(aStream))
	aPid, _ := strconv.Atoi(s.waitLog(`connected: executor pid (\d+)`, 10*time.Second)[1])
	aHeap := heapStart(t, aPid)
	if r := a.put(aMem2, "tenant A's secret"); r != 0 {
		t.Fatalf("A's copy: error %d", r)
	}

	b := dialWire(t, p, s)
	bMem := b.setup(4096)
	const invalidValue, invalidContext, invalidHandle = 1, 201, 400
	cases := []struct {
		name string
		op   string
		args w
		ctx  uint64 // a context to name instead of b's own
		want uint32
	}{
		{"another connection's stream", "cuStreamSynchronize", w{}.u64(aStream), 0, invalidHandle},
		{"another connection's stream, queried", "cuStreamQuery", w{}.u64(aStream), 0, invalidHandle},
		{"another connection's memory", "cuMemcpyDtoH_v2", w{}.u64(aMem2).u64(16).u8(1), 0, invalidValue},
		{"the executor's heap (a handle's value)", "cuMemcpyDtoH_v2", w{}.u64(aHeap).u64(64).u8(1), 0, invalidValue},
		{"the executor's heap as a generic copy's source", "cuMemcpy", w{}.u64(bMem).u64(aHeap).u64(64), 0, invalidValue},
		{"a write into the executor's heap", "cuMemsetD8_v2", w{}.u64(aHeap).u64(0).u64(64), 0, invalidValue},
		{"a copy past the end of its allocation", "cuMemcpyDtoH_v2", w{}.u64(bMem + 4088).u64(16).u8(1), 0, invalidValue},
		{"a free of memory it does not own", "cuMemFree_v2", w{}.u64(aMem), 0, invalidValue},
		{"a context it was not given", "cuCtxSynchronize", w{}, a.own, invalidContext},
		{"an address in the executor's heap as its context", "cuCtxSynchronize", w{}, aHeap, invalidContext},
	}
	for _, c := range cases {
		b.ctx = b.own
		if c.ctx != 0 {
			b.ctx = c.ctx
		}
		r, res := b.call(c.op, c.args)
		if r != c.want {
			t.Errorf("%s (%s): error %d, want %d", c.name, c.op, r, c.want)
		}
		if bytes.Contains(res, []byte("secret")) {
			t.Errorf("%s: A's data reached B", c.name)
		}
	}
	b.ctx = b.own

	// Both still work with what is theirs.
	if r := b.put(bMem, "tenant B's own"); r != 0 {
		t.Errorf("B's own copy after the refusals: error %d", r)
	}
	if r, got := b.get(bMem, 14); r != 0 || string(got) != "tenant B's own" {
		t.Errorf("B reads back %q, error %d", got, r)
	}
	if r, _ := a.call("cuStreamSynchronize", w{}.u64(aStream)); r != 0 {
		t.Errorf("A's stream: error %d", r)
	}
	if r, got := a.get(aMem2, 17); r != 0 || string(got) != "tenant A's secret" {
		t.Errorf("A reads back %q, error %d", got, r)
	}
	a.conn.Close()
	b.conn.Close()
	s.quiesce()
	log := s.Log()
	if strings.Contains(log, "signal:") {
		t.Errorf("an executor crashed:\n%s", log)
	}
	// Said once, by B's executor, naming the first refusal.
	lines := regexp.MustCompile(`flexgv-executor\[\d+\] [^:]*: refusing (.*)`).FindAllStringSubmatch(log, -1)
	if len(lines) != 1 || !strings.HasPrefix(lines[0][1], "cuStreamSynchronize: hStream=0x") || !strings.Contains(lines[0][1], "not a handle this connection was given") {
		t.Errorf("want one line for B's first refusal, the log says:\n%s", log)
	}
	if r := e.remote(s, "rtlike", "1"); r.code != 0 {
		t.Errorf("the server after the refusals: exit %d\n%s", r.code, r.stderr)
	}
}

// mapped says whether v is an address inside one of process pid's
// mappings (its heap, stacks, libraries, anonymous memory).
func mapped(t *testing.T, pid int, v uint64) bool {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(maps)), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && v >= lo && v < hi {
			return true
		}
	}
	return false
}

// heapStart is the first address of process pid's heap.
func heapStart(t *testing.T, pid int) uint64 {
	t.Helper()
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	m := regexp.MustCompile(`(?m)^([0-9a-f]+)-[0-9a-f]+ .*\[heap\]$`).FindSubmatch(maps)
	if m == nil {
		t.Fatalf("executor %d has no heap:\n%s", pid, maps)
	}
	v, _ := strconv.ParseUint(string(m[1]), 16, 64)
	return v
}

// The handles a client is given are names, not the executor's pointers:
// none lies in the executor's memory. A name that is made up, an address
// of the executor's heap, another connection's name, one with a bit
// flipped, or one kept past its handle's destruction is refused with the
// driver's error for a bad handle (or context), and the executor goes on
// serving what is the connection's.
func TestRemoteHandlesAreNames(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	a := dialWire(t, p, s)
	a.setup(4096)
	pid, _ := strconv.Atoi(s.waitLog(`connected: executor pid (\d+)`, 10*time.Second)[1])
	aGraph := a.handle("cuGraphCreate", w{}.u64(0).u8(1))
	names := map[string]uint64{
		"primary context": a.own,
		"created context": a.handle("cuCtxCreate_v2", w{}.u64(0).u64(0).u8(1)),
		"graph":           aGraph,
		"memory pool":     a.handle("cuDeviceGetDefaultMemPool", w{}.u64(0).u8(1)),
	}
	for what, v := range names {
		if mapped(t, pid, v) {
			t.Errorf("the %s's handle %#x is an address in executor %d", what, v, pid)
		}
	}
	// The same handle asked for again has the same name.
	if again := a.handle("cuDevicePrimaryCtxRetain", w{}.u64(0).u8(1)); again != a.own {
		t.Errorf("the primary context named %#x, then %#x", a.own, again)
	}

	b := dialWire(t, p, s)
	b.setup(4096)
	bGraph := b.handle("cuGraphCreate", w{}.u64(0).u8(1))
	// A structure that names a handle comes back with the client's name in
	// it, not the driver's handle it stood for.
	const bStream = 1<<46 | 2<<4
	b.queue("cuStreamCreate", w{}.u64(0).u64(bStream))
	res := b.must("cuGraphInstantiateWithParams", w{}.u64(bGraph).u8(1).u8(1).u64(32).u64(0).u64(bStream).u64(0).u64(0))
	exec := binary.LittleEndian.Uint64(out(t, res))
	params := out(t, res[9+8:])
	// B connected second; the server logs a connection as it comes.
	bPid, _ := strconv.Atoi(s.waitLog(`(?s)connected: executor pid \d+.*connected: executor pid (\d+)`, 10*time.Second)[1])
	if up := binary.LittleEndian.Uint64(params[8:]); up != bStream || mapped(t, bPid, exec) {
		t.Errorf("instantiated with upload stream %#x: the stream came back as %#x, the executable is %#x", uint64(bStream), up, exec)
	}
	stale := b.handle("cuGraphCreate", w{}.u64(0).u8(1))
	b.must("cuGraphDestroy", w{}.u64(stale))
	nodes := func(c *wire, g uint64) uint32 {
		r, _ := c.call("cuGraphGetNodes", w{}.u64(g).u8(0).u8(1).u64(8).u64(0))
		return r
	}
	const invalidContext, invalidHandle = 201, 400
	for _, c := range []struct {
		what  string
		graph uint64
	}{
		{"a made-up number", 0x1234},
		{"an address in the executor's heap", heapStart(t, pid)},
		{"another connection's graph", aGraph},
		{"its own graph's name with a bit flipped", bGraph ^ 1<<40},
		{"a destroyed graph's name", stale},
		{"a context's name", b.own},
	} {
		if r := nodes(b, c.graph); r != invalidHandle {
			t.Errorf("cuGraphGetNodes of %s (%#x): error %d, want %d", c.what, c.graph, r, invalidHandle)
		}
	}
	b.ctx = a.own
	if r, _ := b.call("cuCtxSynchronize", w{}); r != invalidContext {
		t.Errorf("a request naming another connection's context: error %d, want %d", r, invalidContext)
	}
	b.ctx = b.own
	// A new graph may reuse the destroyed one's place, never its name.
	if fresh := b.handle("cuGraphCreate", w{}.u64(0).u8(1)); fresh == stale {
		t.Errorf("a new graph has the destroyed one's name %#x", stale)
	}
	if r := nodes(b, stale); r != invalidHandle {
		t.Errorf("the destroyed graph's name after a new graph: error %d", r)
	}
	if r := nodes(b, bGraph); r != 0 {
		t.Errorf("B's own graph after the refusals: error %d", r)
	}
	if r := nodes(a, aGraph); r != 0 {
		t.Errorf("A's own graph: error %d", r)
	}
	a.conn.Close()
	b.conn.Close()
	s.quiesce()
	if log := s.Log(); strings.Contains(log, "signal:") {
		t.Errorf("an executor crashed:\n%s", log)
	}
	// B's first refusal is logged with the name it sent.
	if log := s.Log(); !strings.Contains(log, "refusing cuGraphGetNodes: hGraph=0x1234 is not a handle") {
		t.Errorf("the first refusal does not name what was sent (0x1234):\n%s", log)
	}
	if r := e.remote(s, "rtlike", "1"); r.code != 0 {
		t.Errorf("a program after the refusals: exit %d\n%s", r.code, r.stderr)
	}
}
