package e2e

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// corrupter relays TCP connections to a server and spoils one of the
// server's frames on one connection of each run (the plan's), as a broken
// network or a hostile host between the two could.
type corrupter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	plan   spoil
	conns  int
	spoilt int // runs whose frame was spoiled
}

// spoil is what happens to the server's frame number at of a run's
// connection conn: its body's bytes changed, the frame cut and the connection
// closed, or a length that does not fit its body (the stream out of step)
// with the connection closed a second later.
type spoil struct {
	at   int
	how  string // "flip", "head", "cut", "length"; "layout": the first layout's answer
	seed uint64
	conn int // which connection of the run (0: the first)
}

func newCorrupter(t *testing.T, target string) *corrupter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &corrupter{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go c.relay(in)
		}
	}()
	return c
}

func (c *corrupter) next(p spoil) {
	c.mu.Lock()
	c.plan, c.conns = p, 0
	c.mu.Unlock()
}

func (c *corrupter) relay(in net.Conn) {
	defer in.Close()
	out, err := net.Dial("tcp", c.target)
	if err != nil {
		return
	}
	defer out.Close()
	c.mu.Lock()
	p, mine := c.plan, c.conns == c.plan.conn
	c.conns++
	c.mu.Unlock()
	go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
	if !mine { // another (a host-function channel is not made of frames)
		io.Copy(in, out)
		return
	}
	rnd := rand.New(rand.NewPCG(p.seed, 7))
	for i := 0; ; i++ {
		var lenb [4]byte
		if _, err := io.ReadFull(out, lenb[:]); err != nil {
			return
		}
		n := binary.LittleEndian.Uint32(lenb[:])
		body := make([]byte, n)
		if _, err := io.ReadFull(out, body); err != nil {
			return
		}
		if i != p.at && (p.how != "layout" || !isLayout(body)) {
			in.Write(append(lenb[:], body...))
			continue
		}
		c.mu.Lock()
		c.spoilt++
		c.mu.Unlock()
		switch p.how {
		case "flip":
			for k := 1 + rnd.IntN(3); k > 0 && n > 0; k-- {
				at := rnd.IntN(int(n))
				if rnd.IntN(2) == 0 { // the result, the first out's presence and length
					at = rnd.IntN(int(min(n, 24)))
				}
				body[at] ^= byte(1 + rnd.IntN(255))
			}
			in.Write(append(lenb[:], body...))
		case "head": // the length its first result says it has
			if n >= 13 && body[4] == 1 {
				d := uint64(1 + rnd.IntN(4096))
				l := binary.LittleEndian.Uint64(body[5:])
				if rnd.IntN(2) == 0 && l >= d {
					d = -d
				}
				binary.LittleEndian.PutUint64(body[5:], l+d)
			}
			in.Write(append(lenb[:], body...))
		case "layout": // a size one more word, its check kept
			sizes := body[26:]
			binary.LittleEndian.PutUint32(sizes, binary.LittleEndian.Uint32(sizes)+8)
			in.Write(append(lenb[:], body...))
			p.how = ""
		case "cut":
			in.Write(append(lenb[:], body[:rnd.IntN(int(n)+1)]...))
			return
		case "length":
			binary.LittleEndian.PutUint32(lenb[:], rnd.Uint32N(n+64))
			in.Write(append(lenb[:], body...))
			time.Sleep(time.Second)
			return
		}
	}
}

// isLayout tells an answer to a first fgrParamSizes of a function: a
// result, the count (4 bytes), 32 sizes (the client's first guess), the
// check (8 bytes).
func isLayout(b []byte) bool {
	return len(b) == 4+13+9+128+17 && b[4] == 1 && binary.LittleEndian.Uint64(b[5:]) == 4 &&
		b[17] == 1 && binary.LittleEndian.Uint64(b[18:]) == 128 && b[154] == 1 && binary.LittleEndian.Uint64(b[155:]) == 8
}

// The client lays a launch's parameters out by the sizes the server
// answers, reading that much of the program's memory for each: an answer
// changed on its way fails its check, and the server is lost, rather than
// the client reading past the program's parameters.
func TestRemoteClientRefusesAGarbledLayout(t *testing.T) {
	e := newEnv(t)
	s := e.serve("tcp")
	c := newCorrupter(t, strings.TrimPrefix(s.addr, "tcp://"))
	c.next(spoil{at: -1, how: "layout"})
	cmd := exec.Command(bin("rtlike"), "1")
	cmd.Env = append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE=tcp://"+c.ln.Addr().String())
	r := runCmd(t, cmd)
	if c.spoilt != 1 || r.code == 0 || r.code > 128 ||
		!strings.Contains(r.stderr, "a malformed answer to fgrParamSizes; CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE") {
		t.Fatalf("spoiled %d layout answer(s); exit %d\n%s", c.spoilt, r.code, r.stderr)
	}
}

// Whatever a server's answers turn into on their way (bytes changed, a
// frame cut short, a length that does not fit), a remote program is never
// ended by a signal and never waits for ever: the client checks each
// answer against what it asked and gives the program a CUDA error, having
// said the server was lost, or the call's own result. The client is the
// one built with AddressSanitizer, so a read past an answer's buffer or a
// write past the program's fails the test as a crash does.
func TestRemoteClientSurvivesSpoiledAnswers(t *testing.T) {
	long(t)
	e := newEnv(t)
	s := e.serve("tcp")
	c := newCorrupter(t, strings.TrimPrefix(s.addr, "tcp://"))
	runs := spoilRuns(t, e, 3, func(rnd *rand.Rand, plan *spoil) []string {
		if rnd.IntN(4) == 0 { // the authentication's and the handshake's answers
			plan.at = rnd.IntN(2)
		}
		c.next(*plan)
		return []string{"FLEXGV_REMOTE=tcp://" + c.ln.Addr().String()}
	}, s)
	// Most runs reach the frame they spoil (some programs answer fewer).
	if c.spoilt < runs/2 {
		t.Errorf("%d of %d runs had a frame spoiled", c.spoilt, runs)
	}
	t.Logf("%d runs, %d with a frame spoiled", runs, c.spoilt)
}

// The same with a failover server taking checkpoints every 1 to 30 ms:
// the answers of either server spoiled (the failover server's to a
// checkpoint's connection), the program goes on at the failover server or
// gets a CUDA error, never a signal or a hang. It found a program whose
// host function waited for it hanging in its checkpoint's drain.
func TestRemoteFailoverSurvivesSpoiledAnswers(t *testing.T) {
	long(t)
	e := newEnv(t)
	a, b := e.serveNamed("a", "tcp"), e.serveNamed("b", "tcp")
	ca := newCorrupter(t, strings.TrimPrefix(a.addr, "tcp://"))
	cb := newCorrupter(t, strings.TrimPrefix(b.addr, "tcp://"))
	runs := spoilRuns(t, e, 1, func(rnd *rand.Rand, plan *spoil) []string {
		ca.next(spoil{at: -1})
		cb.next(spoil{at: -1})
		if rnd.IntN(2) == 0 {
			ca.next(*plan)
		} else {
			// After a dial that only reaches it, a checkpoint's
			// connection, which answers few frames.
			plan.at, plan.conn = rnd.IntN(10), 1+rnd.IntN(3)
			cb.next(*plan)
		}
		return []string{"FLEXGV_REMOTE=tcp://" + ca.ln.Addr().String(), "FLEXGV_REMOTE_FAILOVER=tcp://" + cb.ln.Addr().String(),
			"FLEXGV_REMOTE_CHECKPOINT_MS=" + strconv.Itoa(1+rnd.IntN(30))}
	}, a, b)
	if ca.spoilt+cb.spoilt < runs/6 {
		t.Errorf("%d of %d runs had a frame spoiled", ca.spoilt+cb.spoilt, runs)
	}
	t.Logf("%d runs, %d+%d with a frame spoiled", runs, ca.spoilt, cb.spoilt)
}

// spoilRuns runs programs of every family, each with every way of
// spoiling, rounds times (SPOIL_ROUNDS; SPOIL_SEED replays a failure,
// SPOIL_FRAMES reaches deeper answers), on the client built with
// AddressSanitizer: place sets each run's plan on the corrupters and
// gives the run's settings. A run ended by a signal, still running after
// 60 s, or a crashed executor of servers fails the test. It returns how
// many runs it made.
func spoilRuns(t *testing.T, e *env, rounds int, place func(*rand.Rand, *spoil) []string, servers ...*server) int {
	progs := [][]string{{"rtlike", "2"}, {"memclient", "paths"}, {"graphnodes"}, {"hostfunc"}, {"streamer"},
		{"threads"}, {"families"}, {"arrays"}, {"memclient", "copybackloop", "3"}}
	preload, err := os.ReadFile(filepath.Join(build, "asan", "preload"))
	if err != nil {
		t.Fatal(err)
	}
	asan := strings.TrimSpace(string(preload))
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("SPOIL_SEED"), 10, 64); err == nil {
		seed = v // a failure's run again
	}
	t.Logf("seed %d (SPOIL_SEED)", seed)
	rnd := rand.New(rand.NewPCG(seed, 1))
	if n, err := strconv.Atoi(os.Getenv("SPOIL_ROUNDS")); err == nil {
		rounds = n // longer searches by hand
	}
	frames := 48 // most programs' answers before they end
	if n, err := strconv.Atoi(os.Getenv("SPOIL_FRAMES")); err == nil && n > 0 {
		frames = n // deeper searches by hand
	}
	runs := 0
	for round := 0; round < rounds; round++ {
		for _, p := range progs {
			for _, how := range []string{"flip", "head", "cut", "length"} {
				plan := spoil{at: rnd.IntN(frames), how: how, seed: rnd.Uint64()}
				settings := place(rnd, &plan)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, bin(p[0]), p[1:]...)
				cmd.Env = append(append(e.environ(filepath.Join(build, "asan", "remote")), settings...),
					"LD_PRELOAD="+asan, "ASAN_OPTIONS=abort_on_error=1:detect_leaks=0")
				cmd.WaitDelay = 5 * time.Second
				t0 := time.Now()
				r := runCmd(t, cmd)
				if d := time.Since(t0); d > 5*time.Second {
					t.Logf("%v with %+v: %v, exit %d\n%s", p, plan, d, r.code, tail(r.stderr))
				}
				timedOut := ctx.Err() != nil
				cancel()
				runs++
				switch {
				case timedOut:
					t.Errorf("%v with %+v, %v: still running after 60 s\n%s", p, plan, settings, tail(r.stderr))
				case r.code > 128:
					t.Errorf("%v with %+v, %v: ended by signal %d\n%s", p, plan, settings, r.code-128, tail(r.stderr))
				}
			}
		}
	}
	for _, s := range servers {
		s.quiesce()
		if strings.Contains(s.Log(), "signal:") {
			t.Errorf("an executor crashed:\n%s", s.Log())
		}
	}
	return runs
}

// tail is the last lines of a program's stderr.
func tail(s string) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > 24 { // a sanitizer's whole report
		l = l[len(l)-24:]
	}
	return strings.Join(l, "\n")
}
