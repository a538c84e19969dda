package e2e

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// wire is a client speaking the protocol itself, as a hostile one would:
// it sends whatever handles, addresses and contexts it likes.
type wire struct {
	t    *testing.T
	p    protocol
	conn net.Conn
	ctx  uint64 // the context its requests name
	own  uint64 // its primary context
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

// frame reads one reply frame's body.
func (c *wire) frame() []byte {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var n [4]byte
	if _, err := io.ReadFull(c.conn, n[:]); err != nil {
		c.t.Fatalf("no answer: %v", err)
	}
	body := make([]byte, binary.LittleEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c.conn, body); err != nil {
		c.t.Fatalf("answer cut short: %v", err)
	}
	return body
}

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
// own heap (a handle's value is one), a copy running past its allocation
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
	// Streams are named by the client (shadow handles); A's context is a
	// value of the driver's, an address in A's executor.
	const aStream = 0xf5ad000000000001
	a.queue("cuStreamCreate", w{}.u64(0).u64(aStream))
	aHeap := a.own
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
		{"a context it was not given", "cuCtxSynchronize", w{}, aHeap, invalidContext},
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
