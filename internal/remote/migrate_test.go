package remote

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as a fake executor that speaks the control
// contract, and as an admin client or socket run as another user.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("FLEXGV_TEST_FAKE_EXECUTOR") == "1":
		fakeExecutor(os.Args[1:])
	case os.Getenv("FLEXGV_TEST_ADMIN_LISTEN") != "":
		// A socket in the admin socket's place, until stdin ends.
		l, err := net.Listen("unix", os.Getenv("FLEXGV_TEST_ADMIN_LISTEN"))
		fmt.Println("listening", err)
		io.Copy(io.Discard, os.Stdin)
		l.Close()
	case os.Getenv("FLEXGV_TEST_ADMIN_CLIENT") != "":
		a, err := AdminCall(os.Getenv("FLEXGV_TEST_ADMIN_CLIENT"), AdminRequest{Op: "migrate", To: "unix:///tmp/b.sock", All: true, WaitMs: 1000})
		fmt.Println(a.Error, err)
	default:
		os.Exit(m.Run())
	}
}

// fakeExecutor tells its client its pid, then (after
// FLEXGV_TEST_FAKE_STARTS_MS) the server that it is ready, and its client
// each migration request it is signalled ("asked TARGET"); each byte the client sends is a call, at
// which it answers a pending request: m moved (then exits), s stayed,
// e exits without an answer.
func fakeExecutor(args []string) {
	ctlFd := -1
	for i, a := range args {
		if a == "--control-fd" && i+1 < len(args) {
			ctlFd, _ = strconv.Atoi(args[i+1])
		}
	}
	if ctlFd < 3 {
		fmt.Fprintln(os.Stderr, "fake executor: no --control-fd")
		os.Exit(2)
	}
	conn, ctl := os.NewFile(3, "conn"), os.NewFile(uintptr(ctlFd), "control")
	fmt.Fprintf(conn, "pid %d\n", os.Getpid())
	// An executor still starting: SIGUSR2 ends it, as it ends a real one
	// before its handler is set.
	if ms, err := strconv.Atoi(os.Getenv("FLEXGV_TEST_FAKE_STARTS_MS")); err == nil {
		early := make(chan os.Signal, 1)
		signal.Notify(early, syscall.SIGUSR2)
		time.Sleep(time.Duration(ms) * time.Millisecond)
		select {
		case <-early:
			os.Exit(4)
		default:
		}
		signal.Stop(early)
	}
	asked := make(chan os.Signal, 1)
	signal.Notify(asked, syscall.SIGUSR2)
	fmt.Fprintf(ctl, "ready\n")
	var mu sync.Mutex
	target := ""
	go func() {
		r := bufio.NewReader(ctl)
		for range asked {
			line, err := r.ReadString('\n')
			if err != nil {
				os.Exit(1)
			}
			mu.Lock()
			target = strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "migrate ")
			fmt.Fprintf(conn, "asked %s\n", target)
			mu.Unlock()
		}
	}()
	b := make([]byte, 1)
	for {
		if _, err := conn.Read(b); err != nil {
			os.Exit(0)
		}
		mu.Lock()
		to := target
		target = ""
		mu.Unlock()
		if to == "" {
			continue
		}
		switch b[0] {
		case 'm':
			fmt.Fprintf(ctl, "moved %s 120\n", to)
			os.Exit(0)
		case 's':
			fmt.Fprintf(ctl, "stayed the target has no GPU like device 0\n")
		case 'e':
			os.Exit(3)
		}
	}
}

// testServer serves on a unix socket with fake executors, tenants a
// and b by their tokens.
func testServer(t *testing.T, env ...string) (*Server, string, *syncBuf) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(Addr{"unix", sock})
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuf{}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Executor: exe, Env: append(append(os.Environ(), "FLEXGV_TEST_FAKE_EXECUTOR=1"), env...), Log: log, PinnedMax: -1,
		Tenants: []*Tenant{NewTenant("a", []byte("token-of-tenant-a"), nil), NewTenant("b", []byte("token-of-tenant-b"), nil)}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, sock, log
}

// fakeClient is a connection whose executor is a fake one.
type fakeClient struct {
	t   *testing.T
	c   net.Conn
	r   *bufio.Reader
	pid int
}

// connect authenticates as tenant (a or b) and waits until the server
// holds its executor.
func connect(t *testing.T, s *Server, sock, tenant string) *fakeClient {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write(authFrame(AuthMagic, ProtoVersion, "token-of-tenant-"+tenant))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var n uint32
	if err := binary.Read(c, binary.LittleEndian, &n); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, n)
	if _, err := io.ReadFull(c, reply); err != nil || binary.LittleEndian.Uint32(reply) != 0 {
		t.Fatalf("refused: %q %v", reply, err)
	}
	f := &fakeClient{t: t, c: c, r: bufio.NewReader(c)}
	if _, err := fmt.Sscanf(f.line(), "pid %d", &f.pid); err != nil {
		t.Fatal(err)
	}
	for {
		s.mu.Lock()
		_, held := s.execs[f.pid]
		s.mu.Unlock()
		if held {
			return f
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// line is the next line the executor sent.
func (f *fakeClient) line() string {
	f.t.Helper()
	l, err := f.r.ReadString('\n')
	if err != nil {
		f.t.Fatalf("the executor said %q: %v", l, err)
	}
	return strings.TrimSuffix(l, "\n")
}

// call makes a call of kind k once the executor was asked to move.
func (f *fakeClient) call(k byte) {
	f.t.Helper()
	if l := f.line(); l != "asked unix:///tmp/b.sock" {
		f.t.Fatalf("the executor was %q, want asked unix:///tmp/b.sock", l)
	}
	f.c.Write([]byte{k})
}

// migrate runs Migrate in the background.
func migrate(s *Server, sel Selection, wait time.Duration) chan []MigrateResult {
	ch := make(chan []MigrateResult, 1)
	go func() {
		r, err := s.Migrate(context.Background(), "unix:///tmp/b.sock", sel, wait)
		if err != nil {
			r = []MigrateResult{{Reason: "error: " + err.Error()}}
		}
		ch <- r
	}()
	return ch
}

func describe(rs []MigrateResult) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s %s %s %d %q; ", r.Tenant, r.Outcome, r.Target, r.PauseMs, r.Reason)
	}
	return b.String()
}

// A tenant's executors are asked, the other tenant's not; each answers as
// its program's next call goes: moved (with the pause), stayed (with
// why), or the executor ends without an answer.
func TestMigrateATenantsExecutors(t *testing.T) {
	s, sock, log := testServer(t)
	a1, a2, a3 := connect(t, s, sock, "a"), connect(t, s, sock, "a"), connect(t, s, sock, "a")
	b := connect(t, s, sock, "b")
	got := migrate(s, Selection{Tenant: "a"}, time.Minute)
	a1.call('m')
	a2.call('s')
	a3.call('e')
	rs := <-got
	want := map[int]string{
		a1.pid: `a moved unix:///tmp/b.sock 120 ""; `,
		a2.pid: `a stayed unix:///tmp/b.sock 0 "the target has no GPU like device 0"; `,
		a3.pid: `a ended unix:///tmp/b.sock 0 "the executor ended before moving"; `,
	}
	if len(rs) != 3 {
		t.Fatalf("results %s, want 3", describe(rs))
	}
	for _, r := range rs {
		if d := describe([]MigrateResult{r}); d != want[r.Pid] || r.Peer == "" {
			t.Errorf("executor %d: %s (peer %q), want %s", r.Pid, d, r.Peer, want[r.Pid])
		}
	}
	// b was not asked: a request now is not refused as pending.
	got = migrate(s, Selection{Pid: b.pid}, time.Minute)
	b.call('s')
	if rs := <-got; len(rs) != 1 || rs[0].Outcome != Stayed {
		t.Errorf("tenant b's executor: %s", describe(rs))
	}
	if !strings.Contains(log.String(), fmt.Sprintf("executor pid %d (tenant a, peer local): moved to unix:///tmp/b.sock, paused 120 ms", a1.pid)) {
		t.Errorf("the move is not logged:\n%s", log)
	}
}

// By pid, one executor; with all, every one, sorted by pid.
func TestMigrateByPidAndAll(t *testing.T) {
	s, sock, _ := testServer(t)
	a, b := connect(t, s, sock, "a"), connect(t, s, sock, "b")
	got := migrate(s, Selection{Pid: b.pid}, time.Minute)
	b.call('s')
	if rs := <-got; len(rs) != 1 || rs[0].Pid != b.pid || rs[0].Tenant != "b" || rs[0].Outcome != Stayed {
		t.Fatalf("by pid %d: %s", b.pid, describe(rs))
	}
	got = migrate(s, Selection{All: true}, time.Minute)
	a.call('m')
	b.call('m')
	rs := <-got
	if len(rs) != 2 || rs[0].Pid > rs[1].Pid || rs[0].Outcome != Moved || rs[1].Outcome != Moved {
		t.Errorf("all: %s", describe(rs))
	}
}

// A program that makes no call keeps its request past the wait; a second
// request is refused meanwhile; the answer at its next call is logged.
func TestMigratePendingPastTheWait(t *testing.T) {
	s, sock, log := testServer(t)
	a := connect(t, s, sock, "a")
	rs := <-migrate(s, Selection{Tenant: "a"}, 200*time.Millisecond)
	if len(rs) != 1 || rs[0].Outcome != Pending || rs[0].Reason != "the program made no call within 200ms" {
		t.Fatalf("no call: %s", describe(rs))
	}
	rs = <-migrate(s, Selection{Pid: a.pid}, time.Minute)
	if len(rs) != 1 || rs[0].Outcome != Refused || !strings.Contains(rs[0].Reason, "still pending") {
		t.Fatalf("a second request: %s", describe(rs))
	}
	a.call('s')
	// The executor ends when its client goes: then its answer was read.
	a.c.Close()
	for !strings.Contains(log.String(), fmt.Sprintf("executor pid %d ended", a.pid)) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(log.String(), fmt.Sprintf("executor pid %d (tenant a, peer local): stayed: the target has no GPU like device 0", a.pid)) {
		t.Errorf("the late answer is not logged:\n%s", log)
	}
}

// Once answered, an executor may be asked again.
func TestMigrateAgainAfterAnAnswer(t *testing.T) {
	s, sock, _ := testServer(t)
	a := connect(t, s, sock, "a")
	for range 2 {
		got := migrate(s, Selection{Pid: a.pid}, time.Minute)
		a.call('s')
		if rs := <-got; len(rs) != 1 || rs[0].Outcome != Stayed {
			t.Fatalf("%s", describe(rs))
		}
	}
}

// Nothing selected, a bad target, a bad selection: errors that say so.
func TestMigrateRefusesBadRequests(t *testing.T) {
	s, sock, _ := testServer(t)
	ctx := context.Background()
	if _, err := s.Migrate(ctx, "unix:///tmp/b.sock", Selection{All: true}, time.Minute); err == nil || err.Error() != "no executor runs on this server: no program is connected" {
		t.Errorf("no executors: %v", err)
	}
	a := connect(t, s, sock, "a")
	for _, c := range []struct {
		to   string
		sel  Selection
		want string
	}{
		{"unix:///tmp/b.sock", Selection{Tenant: "b"}, "no executor of tenant b runs on this server"},
		{"unix:///tmp/b.sock", Selection{Pid: a.pid + 100000}, fmt.Sprintf("no executor with pid %d runs on this server", a.pid+100000)},
		{"tmp/b.sock", Selection{All: true}, `target address "tmp/b.sock": no scheme`},
		{"http://b:1", Selection{All: true}, `target address "http://b:1": unknown scheme http`},
		{"unix:///tmp/b.sock", Selection{}, "select the executors by one of tenant, pid or all"},
		{"unix:///tmp/b.sock", Selection{Tenant: "a", All: true}, "select the executors by one of tenant, pid or all"},
	} {
		if _, err := s.Migrate(ctx, c.to, c.sel, time.Minute); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want %s", c.to, c.sel, err, c.want)
		}
	}
	// None of these reached the executor: a request now is its first.
	got := migrate(s, Selection{Pid: a.pid}, time.Minute)
	a.call('m')
	if rs := <-got; len(rs) != 1 || rs[0].Outcome != Moved {
		t.Errorf("%s", describe(rs))
	}
}

// Lines an executor writes that answer nothing are ignored (and logged).
func TestParseAnswer(t *testing.T) {
	for line, want := range map[string]answer{
		"moved unix:///tmp/b.sock 120": {moved: true, addr: "unix:///tmp/b.sock", millis: 120},
		"moved tcp://h:7070 0":         {moved: true, addr: "tcp://h:7070"},
		"stayed no room\tthere\x1b[2J": {reason: "no room there [2J"},
		"stayed":                       {reason: "no reason given"},
	} {
		if got, err := parseAnswer(line); err != nil || got != want {
			t.Errorf("%q: %+v %v", line, got, err)
		}
	}
	for _, bad := range []string{"", "moved", "moved unix:///b.sock", "moved b.sock 1", "moved unix:///b.sock -1", "moved unix:///b.sock 1 2", "went away"} {
		if got, err := parseAnswer(bad); err == nil {
			t.Errorf("%q: accepted as %+v", bad, got)
		}
	}
}

// An executor that moved and ended before its answer was collected (the
// one before it in pid order answered later) is reported moved, not ended.
func TestMigrateMovedThenEndedCountsAsMoved(t *testing.T) {
	s, sock, log := testServer(t)
	for range 4 {
		x, y := connect(t, s, sock, "a"), connect(t, s, sock, "a")
		first, second := x, y
		if y.pid < x.pid {
			first, second = y, x
		}
		got := migrate(s, Selection{Tenant: "a"}, time.Minute)
		second.call('m')
		for !strings.Contains(log.String(), fmt.Sprintf("executor pid %d ended", second.pid)) {
			time.Sleep(10 * time.Millisecond)
		}
		first.call('m')
		if rs := <-got; len(rs) != 2 || rs[0].Outcome != Moved || rs[1].Outcome != Moved {
			t.Fatalf("%s", describe(rs))
		}
		// Gone before the next round selects tenant a's executors.
		for !strings.Contains(log.String(), fmt.Sprintf("executor pid %d ended", first.pid)) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// An executor asked before it is ready (still starting: the signal would
// end it) is signalled once it says it is, and moves.
func TestMigrateAnExecutorStillStarting(t *testing.T) {
	s, sock, _ := testServer(t, "FLEXGV_TEST_FAKE_STARTS_MS=500")
	a := connect(t, s, sock, "a")
	got := migrate(s, Selection{All: true}, time.Minute)
	a.call('m')
	if rs := <-got; len(rs) != 1 || rs[0].Outcome != Moved {
		t.Fatalf("results %s, want moved", describe(rs))
	}
}
