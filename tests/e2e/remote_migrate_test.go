package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// startHeld starts the mover (6 steps, held before step 4, with more
// arguments) after the words of prefix (none: by itself) with env, and waits
// until it is held; it goes on once the file goOn exists.
func startHeld(t *testing.T, e *env, prefix, env []string, more ...string) (cmd *exec.Cmd, out, errb *lockedBuffer, goOn string) {
	t.Helper()
	return startHeldAt(t, e, "4", prefix, env, more...)
}

// lockedBuffer is what a running program wrote, read while it writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startHeldAt is startHeld with the mover held before each step of holds
// ("2,4"); it returns at the first hold.
func startHeldAt(t *testing.T, e *env, holds string, prefix, env []string, more ...string) (cmd *exec.Cmd, out, errb *lockedBuffer, goOn string) {
	t.Helper()
	ready, goOn := filepath.Join(e.dir, "ready"), filepath.Join(e.dir, "go")
	os.Remove(ready)
	os.Remove(goOn)
	argv := append(append(append([]string{}, prefix...), bin("mover"), "6", holds, ready, goOn), more...)
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, errb = &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.WaitDelay = 5 * time.Second // a test that fails kills flexgv run: its program's pipes are not waited for
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return cmd, out, errb, goOn
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mover never reached its hold\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// moverRun starts the mover (6 steps, held before step 4, making calls
// while held) on server from, asks flexgv migrate to move it to server to
// once it is held, lets it go on once the command returned and returns what
// the command printed (with its exit status) and the program's output.
func moverRun(t *testing.T, e *env, from, to *server, env ...string) (migrate result, prog result) {
	t.Helper()
	return moverRunAs(t, e, "busy", from, to, env...)
}

// moverRunAs is moverRun with the mover's mode (busy, and pool or not).
func moverRunAs(t *testing.T, e *env, mode string, from, to *server, env ...string) (migrate result, prog result) {
	t.Helper()
	cmd, out, errb, goOn := startHeld(t, e, nil,
		append(append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+from.addr), env...), mode)
	// The move's second step waits for the new executor to hold the
	// program's structure and comes at a call after: the held program's
	// calls give it one however long that takes, where the program's last
	// steps might not.
	migrate = e.run("flexgv", "migrate", "--server", from.addr, "--to", to.addr, "--all", "--wait", "60s")
	os.WriteFile(goOn, nil, 0o644)
	err := cmd.Wait()
	prog = result{out.String(), errb.String(), 0}
	if ee, ok := err.(*exec.ExitError); ok {
		prog.code = ee.ExitCode()
	}
	return migrate, prog
}

// A running program moved to another server mid-run: its kernel, graph,
// stream, event and device memory (more than one piece of a move) go on
// there with every byte right, its output that of a run that never moved;
// the old executor ends, the new one serves the rest.
func TestRemoteMigrate(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	for _, transport := range []string{"unix", "shm", "tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			var extra []string
			if transport == "tls" { // one certificate for both, which the client trusts
				cert, key := e.cert("server", "127.0.0.1", "localhost")
				extra = []string{"--tls-cert", cert, "--tls-key", key}
				e.extra = append(e.extra, "FLEXGV_REMOTE_CA_FILE="+cert)
			}
			a, b := e.serveNamed("a-"+transport, transport, extra...), e.serveNamed("b-"+transport, transport, extra...)
			m, p := moverRun(t, e, a, b)
			if m.code != 0 || !strings.Contains(m.stdout, "moved to "+b.addr) {
				t.Errorf("flexgv migrate: exit %d\n%s%s", m.code, m.stdout, m.stderr)
			}
			if p.code != 0 || p.stdout != local.stdout {
				t.Errorf("the moved program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
			}
			if !strings.Contains(p.stderr, "moved to the GPU server "+b.addr) {
				t.Errorf("the program was not told it moved:\n%s", p.stderr)
			}
			// Both servers on this host: the allocations went device to
			// device (the module variable and mapped memory through here).
			if !regexp.MustCompile(`the program paused \d+ ms[^;]*; 2\.4 MiB of device memory copied, 2\.4 MiB of it device to device`).MatchString(p.stderr) {
				t.Errorf("the device memory did not move device to device:\n%s", p.stderr)
			}
			a.waitLog(`the program moved to another server`, 10*time.Second)
			a.quiesce()
			b.waitLog(`connected: executor pid`, 10*time.Second)
			b.quiesce()
		})
	}
}

// A program that runs host functions (cuLaunchHostFunc, and a graph's
// host node at every launch) moves: its functions run once a step before
// and after, on the new server, over a socket and over shared memory,
// where its runner ends before the old rings go. Its server killed, it
// goes on at its failover server, from its first checkpoint (every call
// made again) or from one a step: the replay's runs of functions that had
// run are answered without running them, so each still ran once a step.
func TestRemoteMigrateHostFunctions(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6", "0", "none", "none", "hostfn"}, "done")
	for _, transport := range []string{"unix", "shm"} {
		t.Run(transport, func(t *testing.T) {
			a, b := e.serveNamed("a-"+transport, transport), e.serveNamed("b-"+transport, transport)
			m, p := moverRunAs(t, e, "busy,hostfn", a, b)
			if m.code != 0 || p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, "moved to the GPU server "+b.addr) {
				t.Errorf("flexgv migrate: exit %d\n%s%s\nthe program: exit %d\n%s\nwant\n%s\n%s", m.code, m.stdout, m.stderr,
					p.code, p.stdout, local.stdout, p.stderr)
			}
		})
	}
	for _, transport := range []string{"unix", "shm"} {
		for _, every := range []string{"1h", "1ms"} {
			t.Run("failover-"+transport+"-"+every, func(t *testing.T) {
				a, b := e.serveNamed("fa-"+transport+every, transport), e.serveNamed("fb-"+transport+every, transport)
				p := failoverRunMover(t, e, a, b.addr, []string{"hostfn"}, "--checkpoint-every", every)
				if p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, "going on at "+b.addr) {
					t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
				}
			})
		}
	}
}

// A program that made a pool of its own the device's current one keeps it
// when it moves, and when it goes on at a failover server: its later
// allocations come from that pool (cuDeviceGetMemPool names it, its
// threshold is kept, its used bytes count them) with every byte right. The
// device's default pool, which it named only through a pointer attribute,
// is made again as cuDeviceGetDefaultMemPool gives it.
func TestRemoteMoveKeepsTheCurrentPool(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6", "0", "none", "none", "pool"}, "done")
	t.Run("migrate", func(t *testing.T) {
		a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
		m, p := moverRunAs(t, e, "busy,pool", a, b)
		if m.code != 0 || p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, "moved to the GPU server "+b.addr) {
			t.Errorf("flexgv migrate: exit %d\n%s%s\nthe program: exit %d\n%s\nwant\n%s\n%s", m.code, m.stdout, m.stderr,
				p.code, p.stdout, local.stdout, p.stderr)
		}
	})
	for _, every := range []string{"1h", "1ms"} {
		t.Run("failover-"+every, func(t *testing.T) {
			a, b := e.serveNamed("fa"+every, "unix"), e.serveNamed("fb"+every, "unix")
			p := failoverRunMover(t, e, a, b.addr, []string{"pool"}, "--checkpoint-every", every)
			if p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, "going on at "+b.addr) {
				t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
			}
		})
	}
}

// A program moved twice (a to b at one hold, b to c at the next) ends with
// the output of a run that never moved: b gives its state with the
// program's own addresses, also for the module variable the driver placed
// elsewhere on b (before, c knew it by b's address and the program's
// kernel, given the program's, faulted).
func TestRemoteMigrateTwice(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	a, b, c := e.serveNamed("a", "unix"), e.serveNamed("b", "unix"), e.serveNamed("c", "unix")
	cmd, out, errb, goOn := startHeldAt(t, e, "2,4", nil,
		append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+a.addr), "busy")
	ready := filepath.Join(e.dir, "ready")
	for i, hop := range [][2]*server{{a, b}, {b, c}} {
		if i == 1 { // the mover takes GO (and READY) away, then holds again
			deadline := time.Now().Add(60 * time.Second)
			for {
				_, gErr := os.Stat(goOn)
				_, rErr := os.Stat(ready)
				if gErr != nil && rErr == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the mover did not hold again\n%s", errb.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		m := e.run("flexgv", "migrate", "--server", hop[0].addr, "--to", hop[1].addr, "--all", "--wait", "60s")
		if m.code != 0 || !strings.Contains(m.stdout, "moved to "+hop[1].addr) {
			t.Errorf("flexgv migrate to %s: exit %d\n%s%s", hop[1].addr, m.code, m.stdout, m.stderr)
		}
		os.WriteFile(goOn, nil, 0o644)
	}
	endsWithin(t, cmd, 60*time.Second, "its second move", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout {
		t.Errorf("the program moved twice: exit %d\n%s\nwant\n%s\n%s", code, out.String(), local.stdout, errb.String())
	}
	if !strings.Contains(errb.String(), "moved to the GPU server "+c.addr) {
		t.Errorf("the program was not told it moved to %s:\n%s", c.addr, errb.String())
	}
	c.quiesce()
}

// A move the target cannot take (the program's memory over its tenant's
// quota there) leaves the program where it was: it finishes
// there with the same output, and both flexgv migrate and the program say
// why.
func TestRemoteMigrateRefused(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	// One token, a tenant on each server; on the target one MiB of room
	// beside its context, less than the program's two.
	tok := e.token("mover")
	a := e.serveNamed("a", "unix", "--tenant", "big:"+tok, "--mem", "1GiB", "--ctx-mem", "64MiB")
	b := e.serveNamed("b", "unix", "--tenant", "small:"+tok, "--mem", "65MiB", "--ctx-mem", "64MiB")
	m, p := moverRun(t, e, a, b, "FLEXGV_REMOTE_TOKEN_FILE="+tok)
	const why = "CUDA_ERROR_OUT_OF_MEMORY"
	if m.code == 0 || !strings.Contains(m.stdout, "stayed on") || !strings.Contains(m.stdout, why) {
		t.Errorf("flexgv migrate: exit %d, want a refusal naming %s\n%s%s", m.code, why, m.stdout, m.stderr)
	}
	if p.code != 0 || p.stdout != local.stdout {
		t.Errorf("the program that stayed: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
	}
	if !strings.Contains(p.stderr, "stays on this GPU server: ") || !strings.Contains(p.stderr, why) {
		t.Errorf("the program did not say why it stays:\n%s", p.stderr)
	}
	b.quiesce() // the target's executor ended with the move
}

// stateBytes is a moved connection's state as remote/executor/journal.c
// lays it out, with recs already laid out ({u32 len, frame, u32 nnames,
// u64 names...} each), no device ranges and the names' table given
// ({u32 nnames, u32 gen each, u32 nfree, u32 index each, u32 ngone, {u64
// name, u32 result} each}; nil: none).
// stateVersion is remote/wire.h's FGR_STATE_VERSION.
const stateVersion = 4

func stateBytes(magic uint32, nrecs uint32, recs w, names ...uint32) w {
	b := w{}.u32(magic).u32(stateVersion).u32(1).u32(2).u32(3).u32(4).u32(0).u32(nrecs)
	b = append(b, recs...).u32(0)
	if names == nil {
		return b.u32(0).u32(0).u32(0)
	}
	for _, v := range names {
		b = b.u32(v)
	}
	return b
}

// A hostile client's state bytes make a new executor refuse the state
// with a reason, never crash it or make what the bytes do not say:
// malformed counts, requests that only answer a connection (a nested
// load), names out of reach, bytes that did not all arrive.
func TestRemoteMigrateHostileState(t *testing.T) {
	p := readProtocol(t)
	op := func(name string) uint16 { return p.op(t, name) }
	frame := func(name string, args w) w { return w(request(op(name), args)[4:]) }
	retain := frame("cuDevicePrimaryCtxRetain", w{}.u64(0).u8(1))
	load := frame("fgrStateLoad", w{}.u64(8).u64(64).u8(1).u8(1))
	const magic = 0x53524746
	cases := []struct {
		name  string
		state w
		total uint64 // 0: the state's length
		why   string
	}{
		{"another magic", stateBytes(0x12345678, 0, nil), 0, "not a state this executor reads"},
		{"ranges past the end", w{}.u32(magic).u32(stateVersion).u32(0).u32(0).u32(0).u32(0).u32(0xffffffff), 0, "malformed"},
		{"a record past the end", stateBytes(magic, 1, w{}.u32(1<<20).raw("xx")), 0, "malformed"},
		{"a nested load", stateBytes(magic, 1, w{}.u32(uint32(len(load))).raw(string(load)).u32(0)), 0,
			"fgrStateLoad answered CUDA_ERROR_INVALID_VALUE"},
		{"a name out of reach", stateBytes(magic, 1, w{}.u32(uint32(len(retain))).raw(string(retain)).u32(1).u64(1<<62|1)), 0,
			"making the program's state again here failed: cuDevicePrimaryCtxRetain"},
		{"bytes missing", stateBytes(magic, 0, nil), 1 << 20, "did not all arrive"},
		// The names' table: a free name reused twice, free names left out,
		// more names than can be, a live name the replay did not make.
		{"a free name twice", stateBytes(magic, 0, nil, 2, 1<<31|1, 1<<31|1, 2, 0, 0), 0, "names are malformed"},
		{"free names left out", stateBytes(magic, 0, nil, 2, 1<<31|1, 1<<31|1, 1, 0), 0, "names are malformed"},
		{"too many names", stateBytes(magic, 0, nil, 1<<30), 0, "names are malformed"},
		{"a live name not made", stateBytes(magic, 0, nil, 1, 5, 0), 0, "names do not match"},
		// Names gone with their contexts: more than are kept, one answered
		// with what the driver does not answer for them.
		{"too many gone names", stateBytes(magic, 0, nil, 0, 0, 2000), 0, "gone with their contexts are malformed"},
		{"a gone name answered otherwise", stateBytes(magic, 0, nil, 0, 0, 1, 5, 0, 0), 0, "gone with their contexts are malformed"},
	}
	e := newEnv(t)
	s := e.serve("unix")
	path := strings.TrimPrefix(s.addr, "unix://")
	for _, c := range cases {
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		total := c.total
		if total == 0 {
			total = uint64(len(c.state))
		}
		conn.Write(auth(""))
		conn.Write(p.hello(p.hash))
		conn.Write(request(op("fgrStatePut"), w{}.u64(0).u64(uint64(len(c.state))).u8(1).u64(uint64(len(c.state))).raw(string(c.state))))
		conn.Write(request(op("fgrStateLoad"), w{}.u64(total).u64(256).u8(1).u8(1)))
		// Authentication's answer, the handshake's, Put's, then Load's: ok (a u32) and why.
		var got []byte
		for i := 0; i < 4; i++ {
			var n uint32
			if err := binary.Read(conn, binary.LittleEndian, &n); err != nil {
				t.Fatalf("%s: answer %d: %v\n%s", c.name, i, err, s.Log())
			}
			got = make([]byte, n)
			if _, err := io.ReadFull(conn, got); err != nil {
				t.Fatalf("%s: answer %d: %v", c.name, i, err)
			}
		}
		// result u32, ok: u8 1, u64 4, u32; why: u8 1, u64 256, bytes
		if len(got) < 4+13+9+256 || binary.LittleEndian.Uint32(got) != 0 {
			t.Fatalf("%s: Load answered %x", c.name, got)
		}
		ok := binary.LittleEndian.Uint32(got[4+9:])
		why := strings.TrimRight(string(got[4+13+9:4+13+9+256]), "\x00")
		if ok != 0 || !strings.Contains(why, c.why) {
			t.Errorf("%s: ok %d, why %q; want a refusal saying %q", c.name, ok, why, c.why)
		}
		conn.Close()
	}
	stillServes(t, e, s, "the hostile states")
}

// Across transports: a program moves from a socket to shared memory; back
// it stays, its pinned memory (the heap shm:// shares) being nothing a
// socket's server can share, and says so.
func TestRemoteMigrateAcrossTransports(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	for _, c := range []struct{ from, to, outcome string }{
		{"unix", "shm", "moved to "},
		{"shm", "unix", "which unix:///"},
	} {
		t.Run(c.from+"-"+c.to, func(t *testing.T) {
			a, b := e.serveNamed("a-"+c.from, c.from), e.serveNamed("b-"+c.to, c.to)
			m, p := moverRun(t, e, a, b)
			if !strings.Contains(m.stdout, c.outcome) || !strings.Contains(p.stderr, c.outcome) || p.code != 0 ||
				p.stdout != local.stdout {
				t.Errorf("flexgv migrate: exit %d, want %q\n%s%s\nthe program: exit %d\n%s\n%s", m.code, c.outcome, m.stdout,
					m.stderr, p.code, p.stdout, p.stderr)
			}
		})
	}
}

// stillServes checks, once the server's executors ended, that none ended
// by a signal and that the server still serves a program (after: what it
// was given before).
func stillServes(t *testing.T, e *env, s *server, after string) {
	t.Helper()
	s.quiesce()
	if strings.Contains(s.Log(), "signal:") {
		t.Errorf("an executor crashed:\n%s", s.Log())
	}
	if r := e.remote(s, "rtlike", "1"); r.code != 0 {
		t.Errorf("after %s: exit %d\n%s", after, r.code, r.stderr)
	}
}

// rawConn is a connection to an executor spoken to frame by frame.
type rawConn struct {
	t *testing.T
	c net.Conn
	p protocol
	s *server
}

func dialRaw(t *testing.T, s *server, p protocol) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", strings.TrimPrefix(s.addr, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := &rawConn{t, c, p, s}
	r.c.Write(auth(""))
	r.answer()
	r.c.Write(p.hello(p.hash))
	r.answer()
	return r
}

func (r *rawConn) answer() []byte {
	r.t.Helper()
	var n uint32
	if err := binary.Read(r.c, binary.LittleEndian, &n); err != nil {
		r.t.Fatalf("%v\n%s", err, r.s.Log())
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.c, b); err != nil {
		r.t.Fatal(err)
	}
	return b
}

// call sends op with the context ctx and args, and returns its answer,
// which must be CUDA_SUCCESS.
func (r *rawConn) call(name string, ctx uint64, args w) []byte {
	r.t.Helper()
	body := w{}.u16(r.p.op(r.t, name)).u16(0).u32(1).u64(ctx)
	r.c.Write(append(w{}.u32(uint32(len(body)+len(args))), append(body, args...)...))
	a := r.answer()
	if len(a) < 4 || binary.LittleEndian.Uint32(a) != 0 {
		r.t.Fatalf("%s answered %x", name, a)
	}
	return a
}

// handle is what a call that makes one handle answers: u32 result, u8 1,
// u64 8, the name.
func handle(a []byte) uint64 { return binary.LittleEndian.Uint64(a[13:]) }

// rawServer starts a server over unix:// and dials it raw.
func rawServer(t *testing.T) (protocol, *server, *rawConn) {
	t.Helper()
	p := readProtocol(t)
	s := newEnv(t).serve("unix")
	return p, s, dialRaw(t, s, p)
}

// stateMoved saves x's state (ctx current) and makes it again on a new
// connection to s, which it returns.
func stateMoved(t *testing.T, s *server, p protocol, x *rawConn, ctx uint64) *rawConn {
	t.Helper()
	a := x.call("fgrStateSave", ctx, w{}.u64(256).u8(1).u8(1))
	n := binary.LittleEndian.Uint64(a[13:])
	state := x.call("fgrStateGet", ctx, w{}.u64(0).u64(n).u8(1))[13:]
	if uint64(len(state)) != n {
		t.Fatalf("the state: %d bytes, want %d", len(state), n)
	}
	y := dialRaw(t, s, p)
	y.call("fgrStatePut", 0, w{}.u64(0).u64(n).u8(1).u64(n).raw(string(state)))
	if ok := y.call("fgrStateLoad", 0, w{}.u64(n).u64(256).u8(1).u8(1)); binary.LittleEndian.Uint32(ok[13:]) != 1 {
		t.Fatalf("the state was not taken: %q", ok[26:])
	}
	return y
}

// A state made again on a new executor names what it makes next as the old
// executor would have: what a failover's replay relies on for the handles
// the program was given since the checkpoint. Names freed in one order are
// reused in that order, not another.
func TestRemoteStateNamesAsBefore(t *testing.T) {
	p, s, x := rawServer(t)
	ctx := handle(x.call("cuDevicePrimaryCtxRetain", 0, w{}.u64(0).u8(1)))
	var g [3]uint64
	for i := range g {
		g[i] = handle(x.call("cuGraphCreate", ctx, w{}.u64(0).u8(1)))
	}
	x.call("cuGraphDestroy", ctx, w{}.u64(g[0]))
	x.call("cuGraphDestroy", ctx, w{}.u64(g[2]))
	y := stateMoved(t, s, p, x, ctx)
	for i := 0; i < 3; i++ {
		nx := handle(x.call("cuGraphCreate", ctx, w{}.u64(0).u8(1)))
		ny := handle(y.call("cuGraphCreate", ctx, w{}.u64(0).u8(1)))
		if nx != ny {
			t.Errorf("graph %d: the new executor named it %#x, the old one %#x", i, ny, nx)
		}
	}
}

// A stream gone with its context (a reset primary context) is answered
// on a new executor that took the connection's state as on the old one
// (CUDA_ERROR_INVALID_CONTEXT, as the driver answers), not as a name never
// given; the primary context retained again after its reset moves too (a
// state of two retains of one context was refused before).
func TestRemoteGoneNamesMove(t *testing.T) {
	p, s, x := rawServer(t)
	// names before the context's, one of them free: a new executor would
	// not mint the context's name for it by chance
	g1 := handle(x.call("cuGraphCreate", 0, w{}.u64(0).u8(1)))
	g2 := handle(x.call("cuGraphCreate", 0, w{}.u64(0).u8(1)))
	x.call("cuGraphDestroy", 0, w{}.u64(g1))
	ctx := handle(x.call("cuDevicePrimaryCtxRetain", 0, w{}.u64(0).u8(1)))
	const st = 1<<46 | 0x1000 // streams are named by the client (a shadow name)
	if r := x.result("cuStreamCreate", ctx, w{}.u64(1).u64(st)); r != 0 {
		t.Fatalf("stream: %d", r)
	}
	if r := x.result("cuDevicePrimaryCtxReset_v2", ctx, w{}.u64(0)); r != 0 {
		t.Fatalf("reset: %d", r)
	}
	ctx = handle(x.call("cuDevicePrimaryCtxRetain", 0, w{}.u64(0).u8(1)))
	const invalidContext = 201
	if r := x.result("cuStreamSynchronize", ctx, w{}.u64(st)); r != invalidContext {
		t.Fatalf("the old executor answers the gone stream %d, want %d", r, invalidContext)
	}
	y := stateMoved(t, s, p, x, ctx)
	if r := y.result("cuStreamSynchronize", ctx, w{}.u64(st)); r != invalidContext {
		t.Errorf("the new executor answers the gone stream %d, want %d", r, invalidContext)
	}
	// the context retained again (the driver hands back its handle) keeps
	// its name there, and so does the graph
	if st2 := uint64(st + 0x10); y.result("cuStreamCreate", ctx, w{}.u64(1).u64(st2)) != 0 ||
		y.result("cuStreamSynchronize", ctx, w{}.u64(st2)) != 0 {
		t.Errorf("the new executor has no context of the name the program holds")
	}
	if r := y.result("cuGraphDestroy", 0, w{}.u64(g2)); r != 0 {
		t.Errorf("the new executor answers the graph's name %d", r)
	}
}

// A program that makes nothing new while it runs moves in two steps: its
// state's structure is made on the target while it runs on, and the pause
// is only for the state's bytes and then its device memory. A spinner
// timing its kernels with events goes on there (an event recorded before
// the move counts as recorded where its state lands).
func TestRemoteMigrateTwoSteps(t *testing.T) {
	e := newEnv(t)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	cmd, stdout, errb, _ := startRemote(t, e, a, "spinner", "200", "4")
	m := e.run("flexgv", "migrate", "--server", a.addr, "--to", b.addr, "--all", "--wait", "60s")
	if m.code != 0 || !strings.Contains(m.stdout, "moved to "+b.addr) {
		t.Errorf("flexgv migrate: exit %d\n%s%s", m.code, m.stdout, m.stderr)
	}
	rest, _ := io.ReadAll(stdout)
	err := cmd.Wait()
	if err != nil || !strings.Contains(string(rest), "kernels ") ||
		!strings.Contains(errb.String(), "moved to the GPU server "+b.addr+" (in two steps: ") {
		t.Errorf("the spinner: %v\n%s\n%s", err, rest, errb.String())
	}
}

// A program that changes its state between any two of its calls that wait
// (an event made and destroyed around each, while it is held) is moved in
// one step after three attempts in two steps, each undone, and prints what
// an unmoved run prints.
func TestRemoteMigrateChangingState(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	m, p := moverRunAs(t, e, "busy,grow", a, b)
	if m.code != 0 || !strings.Contains(m.stdout, "moved to "+b.addr) {
		t.Errorf("flexgv migrate: exit %d\n%s%s", m.code, m.stdout, m.stderr)
	}
	want := "moved to the GPU server " + b.addr + " (in one step: the program changed its state under 3 in two steps; the program paused "
	if p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, want) {
		t.Errorf("the moved program: exit %d, want %q\n%s\nwant\n%s\n%s", p.code, want, p.stdout, local.stdout, p.stderr)
	}
}

// The same to a server between hosts (in a network namespace of its own),
// with a 64 MiB buffer a kernel changes while held: the last attempt in two
// steps, whose memory was copied ahead, is kept on the target, and the move
// in one step copies from it there, device to device, so that only the
// blocks that changed since cross between the hosts at the pause.
func TestRemoteMigrateBetweenHostsChangingState(t *testing.T) {
	p := movedApart(t, "busy,grow,churn")
	said := regexp.MustCompile(`\(in one step: the program changed its state under 3 in two steps; the program paused \d+ ms; ([\d.]+) MiB of device memory copied, ([\d.]+) MiB of it device to device, and [\d.]+ MiB of state; ([\d.]+) MiB of it from an attempt there the program's changes undid;`).FindStringSubmatch(p.stderr)
	if said == nil {
		t.Fatalf("the program did not say it moved in one step from the attempt before:\n%s", p.stderr)
	}
	var all, d2d float64
	fmt.Sscan(said[1], &all)
	fmt.Sscan(said[2], &d2d)
	if d2d < 66 || all-d2d > 4 {
		t.Errorf("%.1f MiB copied, %.1f MiB of it device to device on the target: %.1f MiB crossed at the pause\n%s", all, d2d, all-d2d, p.stderr)
	}
}

// A move between the two GPUs of one host, served by two servers of one
// GPU each (--gpus): the target's executor does not see the old GPU, whose
// memory its driver will not import (CUDA_ERROR_INVALID_DEVICE), so the
// memory is copied ahead through the client as between hosts, and only
// what changed meanwhile at the pause; the program prints what an unmoved
// run prints.
func TestRemoteMigrateBetweenGPUs(t *testing.T) {
	e := newEnv(t)
	e.extra = append(e.extra, "FLEXGV_SIM_DEVICES=2")
	local := runsLocally(t, e, []string{"mover", "6", "0", "-", "-", "churn"}, "done")
	a, b := e.serveNamed("a", "unix", "--gpus", "0"), e.serveNamed("b", "unix", "--gpus", "1")
	m, p := moverRunAs(t, e, "busy,churn", a, b)
	if m.code != 0 || p.code != 0 || p.stdout != local.stdout {
		t.Fatalf("flexgv migrate: exit %d\n%s%s\nthe moved program: exit %d\n%s\nwant\n%s\n%s",
			m.code, m.stdout, m.stderr, p.code, p.stdout, local.stdout, p.stderr)
	}
	said := regexp.MustCompile(`\(in two steps: [^;]*; ([\d.]+) MiB of device memory copied, ([\d.]+) MiB of it device to device, and [\d.]+ MiB of state; ([\d.]+) MiB copied before, while the program ran`).FindStringSubmatch(p.stderr)
	if said == nil {
		t.Fatalf("the program did not say it moved with its memory copied ahead:\n%s", p.stderr)
	}
	var paused, ahead float64
	fmt.Sscan(said[1], &paused)
	fmt.Sscan(said[3], &ahead)
	if said[2] != "0.0" || paused > 4 || ahead < 66 {
		t.Errorf("%s MiB at the pause (%s device to device), %s ahead:\n%s", said[1], said[2], said[3], p.stderr)
	}
}

// movedApart runs the mover in mode, its first buffer churned, and moves
// it to a server in a network namespace of its own: the moved program
// ends as a run that never moved.
func movedApart(t *testing.T, mode string) result {
	t.Helper()
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6", "0", "-", "-", "churn"}, "done")
	a, b := e.serveNamed("a", "unix"), e.serveApart("b", "unix")
	m, p := moverRunAs(t, e, mode, a, b)
	if m.code != 0 || !strings.Contains(m.stdout, "moved to "+b.addr) {
		t.Errorf("flexgv migrate: exit %d\n%s%s", m.code, m.stdout, m.stderr)
	}
	if p.code != 0 || p.stdout != local.stdout {
		t.Errorf("the moved program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
	}
	return p
}

// result sends op with ctx and args and returns the CUresult it answered.
func (r *rawConn) result(name string, ctx uint64, args w) uint32 {
	r.t.Helper()
	body := w{}.u16(r.p.op(r.t, name)).u16(0).u32(1).u64(ctx)
	r.c.Write(append(w{}.u32(uint32(len(body)+len(args))), append(body, args...)...))
	return binary.LittleEndian.Uint32(r.answer())
}

// A client's fgrStateAlias (a failover's replay saying where memory the
// driver placed lies now) names only memory of its own connection, from an
// address that names nothing of it, once; without a size, the whole of an
// allocation that starts there: anything else is refused and the executor
// serves on.
func TestRemoteStateAliasHostile(t *testing.T) {
	_, _, x := rawServer(t)
	ctx := handle(x.call("cuDevicePrimaryCtxRetain", 0, w{}.u64(0).u8(1)))
	mem := handle(x.call("cuMemAlloc_v2", ctx, w{}.u64(4096).u8(1)))
	other := handle(x.call("cuMemAlloc_v2", ctx, w{}.u64(8192).u8(1)))
	const free = 0x10000000000 // no memory of the connection's there
	const invalid = 1          // CUDA_ERROR_INVALID_VALUE
	for _, c := range []struct {
		name        string
		old, n, now uint64
		want        uint32
	}{
		{"memory not the connection's", free, 4096, free + 1<<20, invalid},
		{"no size, memory not the connection's", free, 0, free + 1<<20, invalid},
		{"no size, inside an allocation", free, 0, mem + 64, invalid},
		{"past the memory's end", free, 8192, mem, invalid},
		{"from the connection's own memory", mem, 4096, mem, invalid},
		{"its own memory, from a free address", free, 4096, mem, 0},
		{"the same address again", free, 4096, mem, invalid},
		{"no size, a whole allocation", free + 1<<30, 0, other, 0},
		{"inside the allocation aliased without its size", free + 1<<30 + 4096, 16, other, invalid},
	} {
		if got := x.result("fgrStateAlias", ctx, w{}.u64(c.old).u64(c.n).u64(c.now)); got != c.want {
			t.Errorf("%s: answered %d, want %d", c.name, got, c.want)
		}
	}
	x.call("cuMemFree_v2", ctx, w{}.u64(mem))
	x.call("cuMemFree_v2", ctx, w{}.u64(other))
}

// A move to a server whose driver runs out of memory at random points (the
// simulated GPU's FLEXGV_SIM_FAIL, in its executors only) while it makes
// the program's state again: the move happens, or is refused with the call
// that failed there and the program stays where it was; either way it
// prints what a run that never moved prints.
func TestRemoteMigrateTargetRunsOut(t *testing.T) {
	long(t)
	e := newEnv(t)
	local := runsLocally(t, e, []string{"mover", "6"}, "done")
	moved, stayed := 0, 0
	for seed := 1; seed <= 4; seed++ {
		a := e.serveNamed(fmt.Sprintf("a%d", seed), "unix")
		b := e.serveRunningOut(fmt.Sprintf("b%d", seed), seed)
		m, p := moverRun(t, e, a, b)
		switch {
		case m.code == 0 && strings.Contains(m.stdout, "moved to "+b.addr):
			moved++
		case m.code == 1 && strings.Contains(m.stdout, "stayed on "+a.addr+": making the program's state again here failed: ") &&
			strings.Contains(m.stdout, " answered CUDA_ERROR_OUT_OF_MEMORY"):
			stayed++
		default:
			t.Errorf("seed %d: flexgv migrate: exit %d\n%s%s", seed, m.code, m.stdout, m.stderr)
		}
		if p.code != 0 || p.stdout != local.stdout {
			t.Errorf("seed %d: the program: exit %d\n%s\nwant\n%s\n%s", seed, p.code, p.stdout, local.stdout, p.stderr)
		}
		if strings.Contains(a.Log()+b.Log(), "ended (signal") {
			t.Errorf("seed %d: an executor ended by a signal:\n%s\n%s", seed, a.Log(), b.Log())
		}
	}
	if moved == 0 || stayed == 0 {
		t.Errorf("moved %d times, stayed %d times: want both among these seeds", moved, stayed)
	}
}

// A move between hosts (the target server in a network namespace of its
// own, so its executors cannot reach the old one's pages): the device
// memory is copied ahead while the program runs, through another
// connection to the old server, and at the second pause only the blocks
// whose sums changed since are copied again. The program, whose first
// buffer a kernel keeps changing while it is held, ends with every byte
// right and the output of a run that never moved.
func TestRemoteMigrateBetweenHosts(t *testing.T) {
	p := movedApart(t, "busy,churn")
	said := regexp.MustCompile(`moved to the GPU server \S+ \(in two steps: [^;]*; ([\d.]+) MiB of device memory copied, ([\d.]+) MiB of it device to device, and [\d.]+ MiB of state; ([\d.]+) MiB copied before, while the program ran`).FindStringSubmatch(p.stderr)
	if said == nil {
		t.Fatalf("the program did not say it moved with its memory copied ahead:\n%s", p.stderr)
	}
	// 66.4 MiB ahead; at the pause, what changed since (the churned 1 MiB
	// at most, and pieces of what the executors place themselves).
	paused, pulled, ahead := said[1], said[2], said[3]
	if pulled != "0.0" || ahead < "66" || len(ahead) < 4 {
		t.Errorf("copied at the pause %s MiB, device to device %s MiB, ahead %s MiB:\n%s", paused, pulled, ahead, p.stderr)
	}
	var pausedMiB float64
	fmt.Sscan(paused, &pausedMiB)
	if pausedMiB > 4 {
		t.Errorf("%s MiB copied at the pause: more than what changed meanwhile\n%s", paused, p.stderr)
	}
}

// What copies a move's device memory ahead. Sums of two allocations of
// the same bytes agree, and differ once one word differs; sums of memory
// the connection does not hold, of a length that is no whole words, of
// more than it holds, or with another count of sums than its blocks, and
// reads by a forged token, past a piece, or of nothing are refused
// (invalid, or nothing found), and the executor goes on serving.
func TestRemoteStateSumsAndReadsHostile(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	r := dialRaw(t, s, p)
	ctx := handle(r.call("cuDevicePrimaryCtxRetain", 0, w{}.u64(0).u8(1)))
	const block = 64 << 10
	var a, b uint64
	data := strings.Repeat("flexgv s", block/8)
	for _, m := range []*uint64{&a, &b} {
		*m = handle(r.call("cuMemAlloc_v2", ctx, w{}.u64(block).u8(1)))
		r.call("cuMemcpyHtoD_v2", ctx, w{}.u64(*m).u64(block).u8(1).u64(block).raw(data))
	}
	sum := func(m uint64) uint64 {
		return binary.LittleEndian.Uint64(r.call("fgrStateSums", ctx, w{}.u64(m).u64(block).u64(1).u8(1))[13:])
	}
	if sa, sb := sum(a), sum(b); sa != sb {
		t.Errorf("the same bytes summed %x and %x", sa, sb)
	}
	r.call("cuMemcpyHtoD_v2", ctx, w{}.u64(b+block-8).u64(8).u8(1).u64(8).raw("-changed"))
	if sa, sb := sum(a), sum(b); sa == sb {
		t.Errorf("bytes that differ in a word summed alike (%x)", sa)
	}
	forged := w{}.u32(0x31494746).u32(0).u64(12345).raw(strings.Repeat("s", 16)).u64(1 << 20).u64(0).u64(1 << 20)
	forged = forged.raw(strings.Repeat("\x00", 64-len(forged)))
	sums := func(ptr, n, nsums uint64) uint32 {
		return r.result("fgrStateSums", ctx, w{}.u64(ptr).u64(n).u64(nsums).u8(1))
	}
	read := func(token w, off, n uint64) uint32 {
		return r.result("fgrStateShareRead", ctx, w{}.u64(off).u64(n).u8(1).u64(64).raw(string(token)).u8(1))
	}
	for _, c := range []struct {
		name      string
		got, want uint32
	}{
		{"sums of nothing held", sums(1<<40, block, 1), 1},
		{"sums of no whole words", sums(a, 12, 1), 1},
		{"sums of more than is held", sums(a, 4*block, 4), 1},
		{"sums of a null range", sums(0, 0, 0), 1},
		{"more sums than blocks", sums(a, block, 2), 1},
		{"sums past the address space", sums(^uint64(0)-7, 1<<20, 16), 1},
		{"a read by a forged token", read(forged, 0, 4096), 500},
		{"a read by no token", read(w{}.raw(strings.Repeat("\x00", 64)), 0, 4096), 500},
		{"a read past a piece", read(forged, 0, 1<<21), 1},
		{"a read of nothing", read(forged, 0, 0), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: answered %d, want %d", c.name, c.got, c.want)
		}
	}
	r.c.Close()
	stillServes(t, e, s, "the hostile requests")
}

// A move asked for while a host function of the program's waits for the
// program does not wait for the function (the program, paused by the
// move, would never let it go): the program stays, told why, and prints
// what it prints locally. One asked for while a stream capture is open
// waits for the capture to end, which the move's drain would have ended,
// and moves the program with its captured graph.
func TestRemoteMigrateWaitsForNoHostFunction(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"hostfunc", "gated", "1500"}, "then: answered each time")
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	cmd, out, errb, until := startWatched(t, e, a.addr, "hostfunc", "gated", "1500")
	until("gated")
	m := e.run("flexgv", "migrate", "--server", a.addr, "--to", b.addr, "--all", "--wait", "60s")
	if m.code == 0 || !strings.Contains(m.stdout, "stayed on") || !strings.Contains(m.stdout, "a host function of the program's ran on for 250 ms") {
		t.Errorf("flexgv migrate while a host function waits: exit %d, want a refusal naming the function\n%s%s", m.code, m.stdout, m.stderr)
	}
	until("capturing")
	m = e.run("flexgv", "migrate", "--server", a.addr, "--to", b.addr, "--all", "--wait", "60s")
	if m.code != 0 || !strings.Contains(m.stdout, "moved to "+b.addr) {
		t.Errorf("flexgv migrate while a capture is open: exit %d\n%s%s", m.code, m.stdout, m.stderr)
	}
	endsWithin(t, cmd, 60*time.Second, "its moves", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout ||
		!strings.Contains(errb.String(), "stays on this GPU server: a host function") || !strings.Contains(errb.String(), "moved to the GPU server "+b.addr) {
		t.Errorf("the program: exit %d, printed\n%s\nlocally\n%s\n%s", code, out.String(), local.stdout, errb.String())
	}
}

// startWatched starts a test client served by addr: its outputs, and a
// function that waits (30 s at most) until it has printed s.
func startWatched(t *testing.T, e *env, addr, client string, args ...string) (*exec.Cmd, *lockedBuffer, *lockedBuffer, func(s string)) {
	cmd := exec.Command(bin(client), args...)
	cmd.Env = append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+addr)
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	until := func(s string) {
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), s); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never printed %q:\n%s\n%s", client, s, out.String(), errb.String())
			}
		}
	}
	return cmd, out, errb, until
}

// A move asked while the program's device work waits for the program (a
// stream waiting for a word the program writes later) gives up draining
// it after 10 s: the program, paused meanwhile, is told why and goes on
// on its server, finishing as an unmoved run.
func TestRemoteMigrateGivesUpOnWorkThatWaits(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"hostfunc", "word", "50"}, "then: CUDA_SUCCESS")
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	cmd, out, errb, until := startWatched(t, e, a.addr, "hostfunc", "word", "12000")
	until("waiting")
	m := e.run("flexgv", "migrate", "--server", a.addr, "--to", b.addr, "--all", "--wait", "60s")
	if m.code == 0 || !strings.Contains(m.stdout, "stayed on") || !strings.Contains(m.stdout, "did not finish in 10 s") {
		t.Errorf("flexgv migrate while a stream waits for the program: exit %d, want a refusal naming the wait\n%s%s", m.code, m.stdout, m.stderr)
	}
	endsWithin(t, cmd, 60*time.Second, "its wait", errb.String)
	if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != local.stdout ||
		!strings.Contains(errb.String(), "stays on this GPU server: the program's device work did not finish in 10 s") {
		t.Errorf("the program: exit %d, printed\n%s\nlocally\n%s\n%s", code, out.String(), local.stdout, errb.String())
	}
}

// A graph made by stream capture (two streams forked and joined through
// events; kernels, a memset and a host function captured) moves with its
// program, made again by its capture's requests on the new server, and so
// does its executable when the program destroyed the graph once it was
// instantiated: each launch after the move changes the buffers and runs
// the host function as before. So does a graph of memory nodes, whose
// allocation the new server's driver places elsewhere: its memset and copy
// nodes, made again after it, name its memory there. A failover server
// takes checkpoints of such programs.
func TestRemoteMigrateCapturedGraph(t *testing.T) {
	e := newEnv(t)
	for _, mode := range []string{"captured", "captured1", "memnodes"} {
		local := runsLocally(t, e, []string{"mover", "6", "0", "none", "none", mode}, "done")
		t.Run(mode, func(t *testing.T) {
			a, b := e.serveNamed("a-"+mode, "unix"), e.serveNamed("b-"+mode, "unix")
			m, p := moverRunAs(t, e, "busy,"+mode, a, b)
			if m.code != 0 || p.code != 0 || p.stdout != local.stdout || !strings.Contains(p.stderr, "moved to the GPU server "+b.addr) {
				t.Errorf("flexgv migrate: exit %d\n%s%s\nthe program: exit %d\n%s\nwant\n%s\n%s", m.code, m.stdout, m.stderr,
					p.code, p.stdout, local.stdout, p.stderr)
			}
			fa, fb := e.serveNamed("fa-"+mode, "unix"), e.serveNamed("fb-"+mode, "unix")
			f := failoverRunMover(t, e, fa, fb.addr, []string{mode}, "--checkpoint-every", "1ms")
			if f.code != 0 || f.stdout != local.stdout || !strings.Contains(f.stderr, "going on at "+fb.addr) ||
				!strings.Contains(f.stderr, "checkpoint 2 on the failover server") {
				t.Errorf("its server killed: exit %d\n%s\nwant\n%s\n%s", f.code, f.stdout, local.stdout, f.stderr)
			}
		})
	}
}

// A program holding a texture object is not moved: the object's value is
// the driver's, which the program's kernels read as it is, and a new
// server's driver hands out others. It stays, told why, and finishes as
// an unmoved run.
func TestRemoteMigrateRefusesTextureObjects(t *testing.T) {
	e := newEnv(t)
	moverStays(t, e, "texture", "a texture or surface object", e.serveNamed("a", "unix"), e.serveNamed("b", "unix"))
}

// moverStays asks the mover in mode to move from a to b: refused, saying
// why, the program finishing as an unmoved run.
func moverStays(t *testing.T, e *env, mode, why string, a, b *server) {
	t.Helper()
	local := runsLocally(t, e, []string{"mover", "6", "0", "none", "none", mode}, "done")
	m, p := moverRunAs(t, e, "busy,"+mode, a, b)
	if m.code == 0 || !strings.Contains(m.stdout, "stayed on") || !strings.Contains(m.stdout, why) {
		t.Errorf("flexgv migrate: exit %d, want a refusal naming %s\n%s%s", m.code, why, m.stdout, m.stderr)
	}
	if p.code != 0 || p.stdout != local.stdout {
		t.Errorf("the program: exit %d\n%s\nwant\n%s\n%s", p.code, p.stdout, local.stdout, p.stderr)
	}
}

// A program holding managed memory is not moved (its host side would not
// follow the memory's new placement): it stays, told why, and finishes as
// an unmoved run. Asked while its threads write managed memory (their
// writes go to the server before their calls, under the mirrors' lock),
// the move's own calls do not wait for that lock, which a thread holds
// while it waits for the move: the program finishes.
func TestRemoteMigrateRefusesManagedMemory(t *testing.T) {
	e := newEnv(t)
	a, b := e.serveNamed("a", "unix"), e.serveNamed("b", "unix")
	moverStays(t, e, "managed", "managed memory", a, b)
	threads := runsLocally(t, e, []string{"managed", "threads"}, "thread 3: 0 results wrong")
	for round := 0; round < 5; round++ {
		cmd := exec.Command(bin("managed"), "threads")
		cmd.Env = append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+a.addr)
		var out, errb lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		asked, deadline := 0, time.Now().Add(60*time.Second)
		for ended := false; !ended; {
			select {
			case <-done:
				ended = true
			default:
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					<-done
					t.Fatalf("managed threads still runs 60 s after it began, asked to move %d times\n%s", asked, errb.String())
				}
				if e.run("flexgv", "migrate", "--server", a.addr, "--to", b.addr, "--all", "--wait", "2s").code != 2 {
					asked++
				}
			}
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 || out.String() != threads.stdout {
			t.Errorf("managed threads asked to move %d times: exit %d\n%s\nwant\n%s\n%s", asked, code, out.String(), threads.stdout, errb.String())
		}
	}
}
