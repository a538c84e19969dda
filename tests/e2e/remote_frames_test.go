package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/remote"
)

// protocol is what the generated protocol header says: the operation
// numbers and the hash a client's handshake must carry.
type protocol struct {
	ops  map[string]uint16
	hash uint64
}

func readProtocol(t *testing.T) protocol {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "remote", "proto_gen.h"))
	if err != nil {
		t.Fatal(err)
	}
	p := protocol{ops: map[string]uint16{}}
	for _, m := range regexp.MustCompile(`FGR_OP_(\w+) = (\d+)`).FindAllStringSubmatch(string(data), -1) {
		n, _ := strconv.Atoi(m[2])
		p.ops[m[1]] = uint16(n)
	}
	m := regexp.MustCompile(`FGR_OPS_HASH 0x([0-9a-f]+)ULL`).FindStringSubmatch(string(data))
	if m == nil || len(p.ops) < 10 {
		t.Fatal("remote/proto_gen.h has no operations or hash")
	}
	p.hash, _ = strconv.ParseUint(m[1], 16, 64)
	return p
}

// op is the number of the operation name.
func (p protocol) op(t *testing.T, name string) uint16 {
	t.Helper()
	o, ok := p.ops[name]
	if !ok {
		t.Fatalf("no operation %s", name)
	}
	return o
}

// w builds frames: little-endian, as remote/wire.h says.
type w []byte

func (b w) u8(v uint8) w   { return append(b, v) }
func (b w) u16(v uint16) w { return binary.LittleEndian.AppendUint16(b, v) }
func (b w) u32(v uint32) w { return binary.LittleEndian.AppendUint32(b, v) }
func (b w) u64(v uint64) w { return binary.LittleEndian.AppendUint64(b, v) }
func (b w) raw(s string) w { return append(b, s...) }

// request is a whole frame: length, header, arguments.
func request(op uint16, args w) []byte {
	body := w{}.u16(op).u16(0).u32(0).u64(0)
	body = append(body, args...)
	return append(w{}.u32(uint32(len(body))), body...)
}

// protoVersion is the protocol's version (remote/wire.h, mirrored in Go).
const protoVersion = remote.ProtoVersion

// auth is the authentication frame that starts every connection: with
// token, or none ("").
func auth(token string) []byte {
	body := w{}.u32(0x41524746).u32(protoVersion)
	if token == "" {
		body = body.u8(0)
	} else {
		body = body.u8(1).u64(uint64(len(token))).raw(token)
	}
	return append(w{}.u32(uint32(len(body))), body...)
}

func (p protocol) hello(hash uint64) []byte {
	return request(0, w{}.u32(0x4d524746).u32(protoVersion).u64(hash).u32(8).u32(0)) // over the socket
}

// The corpus of bad frames, each after an accepted authentication: each
// must close its connection with a log line saying why, and leave the
// server serving.
func TestRemoteMalformedFrames(t *testing.T) {
	p := readProtocol(t)
	op := func(name string) uint16 { return p.op(t, name) }
	hello := p.hello(p.hash)
	cases := []struct {
		name    string
		frames  [][]byte
		closeWr bool   // the client stops sending half-way
		log     string // what the executor says
	}{
		{"a call before the handshake", [][]byte{request(op("cuMemAlloc_v2"), w{}.u64(16).u8(1))}, false,
			"the first frame is operation"},
		{"a handshake of something else", [][]byte{request(0, w{}.raw("GET / HTTP/1.1\r\n"))}, false,
			"not a FlexGV handshake"},
		{"a length over the limit", [][]byte{w{}.u32(0xffffffff).raw("xxxx")}, false, "a frame of 4294967295 bytes"},
		{"a length under the header", [][]byte{w{}.u32(3).raw("abc")}, false, "a frame of 3 bytes"},
		{"a frame cut short", [][]byte{w{}.u32(100).raw("0123456789")}, true, "cut short"},
		{"unknown header flags", [][]byte{hello, w{}.u32(16).u16(op("cuCtxSynchronize")).u16(8).u32(0).u64(0)}, false,
			"unknown header flags 0x8"},
		{"a wait-only request that may not pend", [][]byte{hello, w{}.u32(16).u16(op("cuCtxSynchronize")).u16(4).u32(0).u64(0)}, false,
			"a wait-only request that may not pend (flags 0x4)"},
		{"a queued wait-only request", [][]byte{hello, w{}.u32(16).u16(op("cuCtxSynchronize")).u16(7).u32(0).u64(0)}, false,
			"a wait-only request that may not pend (flags 0x7)"},
		{"a nudge that wants an answer", [][]byte{hello, request(op("fgrNudge"), w{})}, false, "fgrNudge is not queued"},
		{"an unknown transport", [][]byte{request(0, w{}.u32(0x4d524746).u32(protoVersion).u64(p.hash).u32(8).u32(7))}, false,
			"not a FlexGV handshake"},
		{"an unknown operation", [][]byte{hello, request(65000, nil)}, false, "unknown operation 65000"},
		{"a stream named without the shadow tag", [][]byte{hello, request(op("cuStreamCreate"), w{}.u64(0).u64(0x3f0000001000))}, false,
			"a malformed request (cuStreamCreate,"},
		{"arguments missing", [][]byte{hello, request(op("cuMemAlloc_v2"), w{}.u8(1))}, false,
			"a malformed request (cuMemAlloc_v2,"},
		{"bytes left over", [][]byte{hello, request(op("cuCtxSynchronize"), w{}.u8(0))}, false,
			"a malformed request (cuCtxSynchronize,"},
		{"a buffer whose length disagrees with its count",
			[][]byte{hello, request(op("cuMemcpyHtoD_v2"), w{}.u64(0x1000).u64(16).u8(1).u64(8).raw("01234567"))}, false,
			"a malformed request (cuMemcpyHtoD_v2,"},
		{"a buffer past the end of the frame",
			[][]byte{hello, request(op("cuMemcpyHtoD_v2"), w{}.u64(0x1000).u64(1<<20).u8(1).u64(1<<20).raw("0123"))}, false,
			"a malformed request (cuMemcpyHtoD_v2,"},
		{"a string without its NUL",
			[][]byte{hello, request(op("cuModuleGetFunction"), w{}.u64(1).u8(1).u8(1).u64(3).raw("abc"))}, false,
			"a malformed request (cuModuleGetFunction,"},
		{"a frame longer than its operation carries",
			[][]byte{hello, request(op("cuCtxSynchronize"), w{}.raw(string(make([]byte, 1<<20))))}, false,
			"for cuCtxSynchronize, which carries at most 1048576"},
		{"too many kernel parameters",
			[][]byte{hello, request(op("cuLaunchKernel"), w{}.u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u64(0).u8(1).u32(5000))},
			false, "a malformed request (cuLaunchKernel,"},
		{"kernel parameters over the driver's limit",
			[][]byte{hello, request(op("cuLaunchKernel"), w{}.u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(1).u64(0).u64(0).u8(1).u32(1).u32(40000))},
			false, "a malformed request (cuLaunchKernel,"},
	}
	e := newEnv(t)
	s := e.serve("unix")
	path := strings.TrimPrefix(s.addr, "unix://")
	closing := regexp.MustCompile(`closing the connection: (.*)`)
	for i, c := range cases {
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		conn.Write(auth(""))
		for _, f := range c.frames {
			conn.Write(f)
		}
		if c.closeWr {
			conn.(*net.UnixConn).CloseWrite()
		}
		// The connection closes: what was answered (the handshake) then EOF,
		// or a reset where the executor left bytes unread.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: the connection stays open: %v", c.name, err)
		}
		conn.Close()
		// This connection's line, the (i+1)th, says why.
		s.waitLog(fmt.Sprintf(`(?s)(?:closing the connection.*){%d}`, i+1), 10*time.Second)
		if m := closing.FindAllStringSubmatch(s.Log(), -1); len(m) != i+1 || !strings.Contains(m[i][1], c.log) {
			t.Errorf("%s: want the executor to say %q, it said:\n%s", c.name, c.log, s.Log())
		}
	}
	s.quiesce()
	if strings.Contains(s.Log(), "signal:") {
		t.Errorf("an executor crashed:\n%s", s.Log())
	}
	if n := strings.Count(s.Log(), "closing the connection"); n != len(cases) {
		t.Errorf("%d connections closed with a reason, %d bad clients:\n%s", n, len(cases), s.Log())
	}
	// The server still serves.
	if r := e.remote(s, "rtlike", "1"); r.code != 0 {
		t.Errorf("after the bad frames: exit %d\n%s", r.code, r.stderr)
	}
}

// A client of another build is refused at the handshake with the reason.
func TestRemoteHandshakeRefused(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	conn, err := net.Dial("unix", strings.TrimPrefix(s.addr, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(auth(""))
	conn.Write(p.hello(p.hash + 1))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	reply, err := io.ReadAll(conn)
	if err != nil || len(reply) < 8 {
		t.Fatalf("reply %q: %v", reply, err)
	}
	// First the server's answer to the authentication: accepted (an open
	// server), then the executor's to the handshake.
	if r := binary.LittleEndian.Uint32(reply[4:]); r != 0 {
		t.Fatalf("authentication answered %d: %q", r, reply)
	}
	reply = reply[4+binary.LittleEndian.Uint32(reply):]
	if n := binary.LittleEndian.Uint32(reply); int(n) != len(reply)-4 {
		t.Errorf("reply length word %d for %d bytes", n, len(reply)-4)
	}
	if r := binary.LittleEndian.Uint32(reply[4:]); r != 801 {
		t.Errorf("handshake answered %d, want CUDA_ERROR_NOT_SUPPORTED", r)
	}
	if !strings.Contains(string(reply), "same FlexGV build") {
		t.Errorf("no reason in %q", reply)
	}
	s.waitLog("refusing the client: .*same FlexGV build", 10*time.Second)
}

// A peer that connects and sends no authentication, or part of one, is
// refused by the server after 5 s without an executor; one that sends no
// handshake after it, or part of one, loses its executor after 10 s.
func TestRemoteSilentPeer(t *testing.T) {
	t.Parallel() // it mostly waits
	e := newEnv(t)
	s := e.serve("unix")
	path := strings.TrimPrefix(s.addr, "unix://")
	var conns []net.Conn
	partial := w{}.u32(100).raw("0123")
	sent := [][]byte{nil, partial, auth(""), append(auth(""), partial...)}
	start := time.Now()
	for _, b := range sent {
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write(b)
		conn.SetReadDeadline(start.Add(60 * time.Second))
		conns = append(conns, conn)
	}
	for i, conn := range conns {
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Errorf("after %d bytes: still open after 60 s: %v", len(sent[i]), err)
		}
		if allowed := []time.Duration{5, 5, 10, 10}[i] * time.Second; time.Since(start) < allowed-time.Second {
			t.Errorf("after %d bytes: closed after %v, before the %v allowed", len(sent[i]), time.Since(start), allowed)
		}
	}
	s.quiesce()
	if n := strings.Count(s.Log(), "refused: no authentication within 5s"); n != 2 {
		t.Errorf("%d peers silent before authenticating said, want 2:\n%s", n, s.Log())
	}
	if n := strings.Count(s.Log(), "closing the connection: no handshake within 10 s"); n != 2 {
		t.Errorf("%d peers silent after authenticating said, want 2:\n%s", n, s.Log())
	}
	if n := strings.Count(s.Log(), "connected: executor pid"); n != 2 {
		t.Errorf("%d executors for 2 authenticated peers:\n%s", n, s.Log())
	}
}

// The shared memory of an shm:// connection is the client's too: memory
// that is missing, could shrink, is not the size of ours (the rings, the
// pinned heap) or holds impossible indices ends the
// connection with the reason, and the server serves on.
func TestRemoteSharedMemoryRefused(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	path := strings.TrimPrefix(s.addr, "unix://")
	// remote/ring.h: a 64-byte header (magic, ring size, the staging
	// areas' sizes, ...), then per direction head (u64), head_seq,
	// consumer_sleeps (u32), 48 bytes, tail, tail_seq, producer_sleeps, 48
	// bytes; the host functions' area (64 bytes, 64 slots of 16); then each
	// direction's 4 MiB, the 32 MiB staging area, the 8 MiB downloads' area
	// and the host functions' 8 MiB data area. Then a second memory, the
	// pinned heap of 64 GiB.
	const ringBytes, stageBytes, downBytes, hostfnBytes, c2sHead, c2sHeadSeq = 4 << 20, 32 << 20, 8 << 20, 8 << 20, 64, 72
	size := 64 + 2*128 + 64 + 64*16 + 2*ringBytes + stageBytes + downBytes + hostfnBytes
	sized := func(n int64, seal bool) int {
		fd, err := unix.MemfdCreate("ring", unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		unix.Ftruncate(fd, n)
		if seal {
			unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
		}
		return fd
	}
	memory := func(seal bool) int { return sized(int64(size), seal) }
	rings := func(conn *net.UnixConn) []byte { // good rings, and their memory
		fd := memory(true)
		defer unix.Close(fd)
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint32(m[0:], 0x47524746)
		binary.LittleEndian.PutUint32(m[4:], ringBytes)
		binary.LittleEndian.PutUint32(m[8:], stageBytes)
		binary.LittleEndian.PutUint32(m[12:], downBytes)
		conn.WriteMsgUnix([]byte("R"), unix.UnixRights(fd), nil)
		return m
	}
	for i, c := range []struct {
		name string
		send func(conn *net.UnixConn)
		log  string
	}{
		{"no memory, a byte", func(conn *net.UnixConn) { conn.Write([]byte("R")) }, "no shared memory after an shm handshake"},
		{"memory that can shrink", func(conn *net.UnixConn) {
			fd := memory(false)
			defer unix.Close(fd)
			conn.WriteMsgUnix([]byte("R"), unix.UnixRights(fd), nil)
		}, "the shared memory is not two rings of ours"},
		{"no heap, a byte", func(conn *net.UnixConn) {
			defer unix.Munmap(rings(conn))
			conn.Write([]byte("R"))
		}, "no pinned heap after the rings"},
		{"a heap of another size", func(conn *net.UnixConn) {
			defer unix.Munmap(rings(conn))
			fd := sized(1<<30, true)
			defer unix.Close(fd)
			conn.WriteMsgUnix([]byte("R"), unix.UnixRights(fd), nil)
		}, "the pinned heap is not one of ours"},
		{"a head past the ring", func(conn *net.UnixConn) {
			m := rings(conn)
			defer unix.Munmap(m)
			fd := sized(64<<30, true)
			defer unix.Close(fd)
			conn.WriteMsgUnix([]byte("R"), unix.UnixRights(fd), nil)
			binary.LittleEndian.PutUint64(m[c2sHead:], 2*ringBytes)
			binary.LittleEndian.PutUint32(m[c2sHeadSeq:], 1)
			conn.Write([]byte{0}) // the doorbell, for a reader already asleep
		}, "the shared memory's ring indices are impossible"},
	} {
		raw, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conn := raw.(*net.UnixConn)
		conn.Write(auth(""))
		conn.Write(request(0, w{}.u32(0x4d524746).u32(protoVersion).u64(p.hash).u32(8).u32(1)))
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var lenb [4]byte
		for range 2 { // the authentication's answer, then the handshake's
			if _, err := io.ReadFull(conn, lenb[:]); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if _, err := io.CopyN(io.Discard, conn, int64(binary.LittleEndian.Uint32(lenb[:]))); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		c.send(conn)
		if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: the connection stays open: %v", c.name, err)
		}
		conn.Close()
		s.waitLog(fmt.Sprintf(`(?s)(?:closing the connection.*){%d}`, i+1), 10*time.Second)
		if !strings.Contains(s.Log(), c.log) {
			t.Errorf("%s: want the executor to say %q, it said:\n%s", c.name, c.log, s.Log())
		}
	}
	// And it serves on, through shared memory too.
	s.addr = "shm://" + path
	if r := e.remote(s, "direct", "1"); r.code != 0 {
		t.Errorf("after the refusals: exit %d\n%s", r.code, r.stderr)
	}
}
