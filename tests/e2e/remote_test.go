package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// server is a flexgv serve on the simulated GPU. Its log (its executors'
// too) goes to a file, so a line an executor wrote before it answered is
// there when the client has the answer.
type server struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
	log  string
}

// Log is what the server and its executors have logged so far.
func (s *server) Log() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// waitLog waits for a line of the server's log matching re and returns its
// submatches.
func (s *server) waitLog(re string, within time.Duration) []string {
	s.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := rx.FindStringSubmatch(s.Log()); m != nil {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("the server did not log %q within %v:\n%s", re, within, s.Log())
	return nil
}

// waitCount waits until the server's log holds at least n lines with sub
// (the server logs a connection as its executor starts, which may be
// after the client is done).
func (s *server) waitCount(sub string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(s.Log(), sub) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// serve starts flexgv serve on a unix socket ("unix") or a free loopback
// TCP port ("tcp", or "tls" with a certificate the clients are given), with
// the simulated GPU as the driver.
func (e *env) serve(transport string, extra ...string) *server {
	e.t.Helper()
	return e.serveNamed("gpu", transport, extra...)
}

// serveRunningOut is serveNamed over unix, the simulated GPU of its
// executors failing a quarter of their device memory reservations as if
// the device were full (FLEXGV_SIM_FAIL, drawn from seed).
func (e *env) serveRunningOut(name string, seed int) *server {
	e.t.Helper()
	saved := e.extra
	e.extra = append(append([]string{}, e.extra...), fmt.Sprintf("FLEXGV_SIM_FAIL=25:%d", seed))
	defer func() { e.extra = saved }()
	return e.serveNamed(name, "unix")
}

// serveNamed is serve on the socket NAME.sock (a second server beside the
// first).
func (e *env) serveNamed(name, transport string, extra ...string) *server {
	e.t.Helper()
	return e.serveIn(nil, name, transport, extra...)
}

// serveApart is serveNamed with the server in a network namespace of its
// own: its executors cannot reach this host's others' (IPC between
// executors goes over abstract sockets), as if on another host, with a
// simulated GPU of its own. The test is skipped where no namespace can be
// made.
func (e *env) serveApart(name, transport string, extra ...string) *server {
	e.t.Helper()
	if err := exec.Command("unshare", "--net", "true").Run(); err != nil {
		e.t.Skipf("no network namespace here (unshare --net: %v)", err)
	}
	return e.serveIn(&syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}, name, transport, extra...)
}

func (e *env) serveIn(attr *syscall.SysProcAttr, name, transport string, extra ...string) *server {
	e.t.Helper()
	var addr string
	switch transport {
	case "unix", "shm": // shm: the same socket, dialled as shm://
		addr = "unix://" + filepath.Join(e.dir, name+".sock")
	case "tcp", "tls":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.t.Fatal(err)
		}
		addr = transport + "://" + l.Addr().String()
		l.Close()
	}
	// Without tenants, TCP is served only when asked to serve anyone.
	if transport != "unix" && transport != "shm" && !slices.Contains(extra, "--tenant") {
		extra = append(extra, "--open")
	}
	// TLS with a certificate for 127.0.0.1 that the clients trust.
	if transport == "tls" && !slices.Contains(extra, "--tls-cert") {
		cert, key := e.cert("server", "127.0.0.1", "localhost")
		extra = append(extra, "--tls-cert", cert, "--tls-key", key)
		if !slices.Contains(e.extra, "FLEXGV_REMOTE_CA_FILE="+cert) {
			e.extra = append(e.extra, "FLEXGV_REMOTE_CA_FILE="+cert)
		}
	}
	e.gpuForAll()
	s := &server{t: e.t, addr: addr}
	s.cmd = exec.Command(bin("flexgv"), append([]string{"serve", "--listen", addr}, extra...)...)
	// A handle the executor gives its driver after destroying it ends it,
	// as a GPU's driver may.
	s.cmd.Env = append(e.environ(filepath.Join(build, "sim")), "FLEXGV_SIM_STRICT_HANDLES=1")
	if attr != nil && attr.Cloneflags&syscall.CLONE_NEWNET != 0 { // another host: a GPU of its own
		s.cmd.Env = append(s.cmd.Env, "FLEXGV_SIM_STATE="+filepath.Join(e.dir, name+"-gpu.state"))
	}
	s.cmd.SysProcAttr = attr
	logf, err := os.CreateTemp(e.dir, name+"-*.log") // a server restarted under the same name logs anew
	if err != nil {
		e.t.Fatal(err)
	}
	s.log = logf.Name()
	defer logf.Close()
	s.cmd.Stderr = logf
	if err := s.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	s.waitLog(`listening on `+regexp.QuoteMeta(addr)+`[ ,]`, 10*time.Second)
	if transport == "shm" {
		s.addr = strings.Replace(addr, "unix://", "shm://", 1)
	}
	return s
}

// gpuForAll lets every user reach the simulated GPU's state, as every user
// reaches a GPU's device nodes: a server run as root runs executors as
// nobody.
func (e *env) gpuForAll() {
	if os.Geteuid() == 0 {
		if st, err := os.Stat(filepath.Dir(e.dir)); err == nil && st.Mode()&os.ModeSticky == 0 { // not /dev/shm itself
			os.Chmod(filepath.Dir(e.dir), 0o755)
		}
		os.Chmod(e.dir, 0o777)
	}
}

// remote runs a client under flexgv run --remote: no simulated GPU on its
// library path, so everything it gets comes from the server.
func (e *env) remote(s *server, name string, args ...string) result {
	e.t.Helper()
	return e.runIn("", "flexgv", append([]string{"run", "--remote", s.addr, "--", bin(name)}, args...)...)
}

// roundTrips is what FLEXGV_REMOTE_LOG=calls said of a run at its exit:
// each call's round trips, by name.
func roundTrips(r result) map[string]int {
	m := map[string]int{}
	for _, l := range regexp.MustCompile(`(?m)^flexgv remote:\s+(\w+)\s+(\d+)\s+\d+$`).FindAllStringSubmatch(r.stderr, -1) {
		m[l[1]], _ = strconv.Atoi(l[2])
	}
	return m
}

// The same programs print the same over either transport as they do with
// the GPU in their own process.
func TestRemoteClientsMatchLocal(t *testing.T) {
	long(t)
	clients := [][]string{
		{"rtlike", "3"}, {"direct", "2"}, {"dlsymclient"}, {"threads", "8", "200"},
		{"forker"}, {"memclient", "paths"}, {"memset2d"}, {"copy3d"}, {"arrays"},
	}
	pids := regexp.MustCompile(`pids( \d+)+`)
	for _, transport := range []string{"unix", "shm", "tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			s := e.serve(transport)
			// Locally on a simulated GPU of their own: the server's
			// executors of the clients before, still exiting, would
			// change what memclient sees used.
			le := newEnv(t)
			for _, c := range clients {
				local := le.run(c[0], c[1:]...)
				if local.code != 0 {
					t.Fatalf("%v locally: exit %d\n%s", c, local.code, local.stderr)
				}
				got := e.remote(s, c[0], c[1:]...)
				if got.code != 0 {
					t.Errorf("%v remotely: exit %d\n%s", c, got.code, got.stderr)
					continue
				}
				want := pids.ReplaceAllString(local.stdout, "pids")
				if g := pids.ReplaceAllString(got.stdout, "pids"); g != want {
					t.Errorf("%v remotely printed\n%s\nlocally\n%s", c, g, want)
				}
			}
			// Each process had an executor of its own: forker's fork and
			// exec children connected by themselves.
			s.waitCount("connected: executor pid", len(clients)+2)
			if n := strings.Count(s.Log(), "connected: executor pid"); n < len(clients)+2 {
				t.Errorf("%d connections for %d programs (forker makes 3):\n%s", n, len(clients), s.Log())
			}
		})
	}
}

// The library alone, without flexgv run or the shim, is a driver.
func TestRemoteLibraryAlone(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	e.extra = append(e.extra, "FLEXGV_REMOTE="+s.addr)
	r := e.runIn(filepath.Join(build, "remote"), "rtlike", "2")
	if r.code != 0 || !strings.Contains(r.stdout, "rtlike: ok") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Every variant, by dlsym and by cuGetProcAddress, is the client's own
	// function of exactly that name (NVML too: the client's own, beside it).
	r = e.runIn(filepath.Join(build, "remote")+":"+filepath.Join(build, "sim"), "hookmap")
	if r.code != 0 || !strings.Contains(r.stdout, " 0 mismatches") {
		t.Fatalf("hookmap: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Spinner keeps kernels in flight on a stream of its own between events.
	r = e.runIn(filepath.Join(build, "remote"), "spinner", "200", "0.3")
	if m := regexp.MustCompile(`kernels (\d+) `).FindStringSubmatch(r.stdout); r.code != 0 || m == nil || m[1] == "0" {
		t.Fatalf("spinner: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Without a server, or with a bad address, the program gets a CUDA error
// and a message saying why, not a hang or a crash.
func TestRemoteNoServer(t *testing.T) {
	long(t)
	e := newEnv(t)
	r := e.runIn("", "flexgv", "run", "--remote", "unix://"+filepath.Join(e.dir, "none.sock"), "--", bin("direct"))
	if r.code != 1 || !strings.Contains(r.stderr, "cannot reach the GPU server") || !strings.Contains(r.stderr, "failed: 46") {
		t.Errorf("no server: exit %d\n%s", r.code, r.stderr)
	}
	for _, bad := range []string{"unix://relative.sock", "tcp://host", "tcp://host:0", "http://x:1", "/tmp/x"} {
		r := e.runIn("", "flexgv", "run", "--remote", bad, "--", "true")
		if r.code != 2 || !strings.Contains(r.stderr, "--remote") {
			t.Errorf("--remote %s: exit %d, %q", bad, r.code, r.stderr)
		}
		r = e.runIn("", "flexgv", "serve", "--listen", bad)
		if r.code != 2 || !strings.Contains(r.stderr, "--listen") {
			t.Errorf("serve --listen %s: exit %d, %q", bad, r.code, r.stderr)
		}
	}
	if r := e.runIn("", "flexgv", "run", "--driver", "/dev/null", "--remote", "unix:///x.sock", "--", "true"); r.code != 2 || !strings.Contains(r.stderr, "give one") {
		t.Errorf("--driver with --remote: exit %d, %q", r.code, r.stderr)
	}
	for _, flag := range []string{"--mem=1GiB", "--compute-max=50%", "--group=a"} {
		r := e.runIn("", "flexgv", "run", flag, "--remote", "unix:///x.sock", "--", "true")
		if r.code != 2 || !strings.Contains(r.stderr, "with --remote") {
			t.Errorf("%s with --remote: exit %d, %q", flag, r.code, r.stderr)
		}
	}
	for _, bad := range []string{"0,0", "x", "-1", "0,,1"} {
		r := e.runIn("", "flexgv", "serve", "--listen", "unix://"+filepath.Join(e.dir, "s.sock"), "--gpus", bad)
		if r.code != 2 || !strings.Contains(r.stderr, "--gpus") {
			t.Errorf("serve --gpus %s: exit %d, %q", bad, r.code, r.stderr)
		}
	}
}

// --gpus decides which devices clients see, and the handshake's cached
// device list says so.
func TestRemoteServeGPUs(t *testing.T) {
	long(t)
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
n, bus = ctypes.c_int(), ctypes.create_string_buffer(32)
assert cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(n)) == 0
assert cu.cuDeviceGetPCIBusId(bus, 32, 0) == 0
print(n.value, bus.value.decode())
`
	e := newEnv(t, "FLEXGV_SIM_DEVICES=3")
	for _, c := range []struct{ gpus, want string }{{"", "3 00000000:01:00.0\n"}, {"2", "1 00000000:03:00.0\n"},
		{"2,0", "2 00000000:03:00.0\n"}} {
		var s *server
		if c.gpus == "" {
			s = e.serve("unix")
		} else {
			s = e.serve("unix", "--gpus", c.gpus)
		}
		r := e.remote(s, "python3", "-c", prog)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("--gpus %q: exit %d, %q, want %q\n%s", c.gpus, r.code, r.stdout, c.want, r.stderr)
		}
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// startRemote starts a client that prints a first line, then waits for a
// line on stdin; it returns once the server has given the client an
// executor, with the client's stdout to read on.
func startRemote(t *testing.T, e *env, s *server, name string, args ...string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer, int) {
	t.Helper()
	before := strings.Count(s.Log(), "connected: executor pid")
	cmd := exec.Command(bin(name), args...)
	cmd.Env = append(e.environ(filepath.Join(build, "remote")), "FLEXGV_REMOTE="+s.addr)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdin, _ := cmd.StdinPipe()
	pipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	stdout := bufio.NewReader(pipe)
	if line, _ := stdout.ReadString('\n'); line == "" {
		t.Fatalf("%s printed nothing\n%s", name, errb.String())
	}
	stdin.Write([]byte("\n"))
	m := s.waitLog(fmt.Sprintf(`(?s)(?:connected: executor pid \d+.*){%d}connected: executor pid (\d+)`, before), 10*time.Second)
	pid, _ := strconv.Atoi(m[1])
	return cmd, stdout, &errb, pid
}

// quiesce waits until every executor the server started has ended.
func (s *server) quiesce() {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l := s.Log()
		if strings.Count(l, "connected: executor pid") == strings.Count(l, "ended (") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("executors still running 10 s after their clients ended:\n%s", s.Log())
}

// A server killed in the middle of a run gives the program a CUDA error
// and a message within a bounded time, never a hang.
func TestRemoteServerKilled(t *testing.T) {
	for _, transport := range []string{"unix", "shm", "tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			s := e.serve(transport)
			cmd, _, errb, _ := startRemote(t, e, s, "spinner", "200", "60")
			s.cmd.Process.Signal(syscall.SIGKILL)
			endsWithin(t, cmd, 30*time.Second, "its server was killed", errb.String)
			if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(errb.String(), "lost the GPU server") ||
				!strings.Contains(errb.String(), "failed: 46") {
				t.Errorf("exit %d\n%s", cmd.ProcessState.ExitCode(), errb.String())
			}
		})
	}
}

func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	// A zombie is gone as far as the GPU is concerned.
	return err == nil && !strings.Contains(string(data), ") Z ")
}

// A client that dies frees everything it held: its executor exits, and the
// memory it filled the GPU with is there for the next program.
func TestRemoteClientKilled(t *testing.T) {
	for _, transport := range []string{"unix", "shm"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			s := e.serve(transport)
			first := e.remote(s, "memclient", "exact")
			if first.code != 0 {
				t.Fatalf("exit %d\n%s", first.code, first.stderr)
			}
			s.quiesce()
			cmd, stdout, errb, pid := startRemote(t, e, s, "memclient", "fill", "256")
			// fill prints its total once the GPU is full.
			if line, _ := stdout.ReadString('\n'); line == "" {
				t.Fatalf("fill printed no total\n%s", errb.String())
			}
			if !alive(pid) {
				t.Fatalf("executor %d is gone before its client\nthe client said:\n%s\nthe server:\n%s", pid, errb.String(), s.Log())
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			s.waitLog(fmt.Sprintf(`executor pid %d ended`, pid), 10*time.Second)
			if alive(pid) {
				t.Errorf("executor %d outlived its client", pid)
			}
			again := e.remote(s, "memclient", "exact")
			if strings.Contains(first.stdout, "one byte more -> other") {
				t.Fatalf("exact: %s", first.stdout)
			}
			if again.stdout != first.stdout {
				t.Errorf("after the killed client, the GPU shows\n%s\nbefore\n%s", again.stdout, first.stdout)
			}

		})
	}
}

// A client whose host function never returns (the executor's gate
// waiting for it) holds up its own stream alone: the server serves another
// client meanwhile. Killed, it frees everything all the same: its executor
// exits, the gate released at its exit (over shm:// through the shared
// memory, over a socket by closing the host-function channel).
func TestRemoteClientKilledInAHostFunction(t *testing.T) {
	e := newEnv(t)
	local := e.run("hostfunc")
	for _, transport := range []string{"shm", "unix", "tcp", "tls"} {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			s := e.serve(transport)
			cmd, _, _, pid := startRemote(t, e, s, "hostfunc", "hang")
			time.Sleep(200 * time.Millisecond) // the gate is reached (the kernel before it takes none)
			if other := e.remote(s, "hostfunc"); other.code != 0 || other.stdout != local.stdout {
				t.Errorf("another client meanwhile: exit %d, printed\n%s\nlocally\n%s\n%s", other.code, other.stdout,
					local.stdout, other.stderr)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			s.waitLog(fmt.Sprintf(`executor pid %d ended`, pid), 10*time.Second)
			if alive(pid) {
				t.Errorf("executor %d outlived its client", pid)
			}
		})
	}
}

// runsLocally runs a client (argv) on the simulated GPU in its own process
// and wants it to exit 0 having printed each of wants: what it prints
// there, which printsAsLocally compares remote runs with.
func runsLocally(t *testing.T, e *env, argv []string, wants ...string) result {
	t.Helper()
	local := e.run(argv[0], argv[1:]...)
	for _, want := range wants {
		if local.code != 0 || !strings.Contains(local.stdout, want) {
			t.Fatalf("%v locally: exit %d, no %q in\n%s%s", argv, local.code, want, local.stdout, local.stderr)
		}
	}
	return local
}

// printsAsLocally runs a client (argv) remotely over each transport, against
// a server of its own, and wants it to print what it printed locally.
func printsAsLocally(t *testing.T, local result, argv []string, transports ...string) {
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			e := newEnv(t)
			got := e.remote(e.serve(transport), argv[0], argv[1:]...)
			if got.code != 0 || got.stdout != local.stdout {
				t.Errorf("remotely: exit %d, printed\n%s\nlocally\n%s\n%s", got.code, got.stdout, local.stdout, got.stderr)
			}
		})
	}
}

// A thread that waits for the device (a stream, an event, the context, a
// copy back) does not hold up the program's other threads: their calls are
// answered while it waits, the wait answers what it would locally, and two
// waits at once each end with their own work, over every transport.
func TestRemoteWaitsLetOtherThreadsGoOn(t *testing.T) {
	long(t)
	e := newEnv(t)
	local := e.run("waiters")
	if local.code != 0 || strings.Count(local.stdout, "while it waited: yes; the wait answered CUDA_SUCCESS") != 6 ||
		!strings.Contains(local.stdout, "the shorter ended first: yes") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"waiters"}, "unix", "shm", "tcp", "tls")
}

// The error of a queued call is answered at the next syncpoint of the
// thread that made it, not at another thread's: a memset the executor
// refuses (an address not the connection's) leaves the other thread's
// synchronization clean and fails its own thread's next one.
func TestRemoteQueuedErrorsReachTheirThread(t *testing.T) {
	long(t)
	prog := `
import ctypes, threading
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
made, synced = threading.Event(), threading.Event()
def other():
    cu.cuCtxSetCurrent(ctx)
    print("bad memset", cu.cuMemsetD8Async(ctypes.c_uint64(0x10), ctypes.c_ubyte(1), ctypes.c_size_t(16), None), flush=True)
    made.set()
    synced.wait()
    print("its thread's synchronization", cu.cuCtxSynchronize(), flush=True)
t = threading.Thread(target=other)
t.start()
made.wait()
print("another thread's synchronization", cu.cuCtxSynchronize(), flush=True)
synced.set()
t.join()
print("after", cu.cuCtxSynchronize())
`
	want := "bad memset 0\nanother thread's synchronization 0\nits thread's synchronization 1\nafter 0\n"
	for _, transport := range []string{"unix", "shm"} {
		e := newEnv(t)
		r := e.remote(e.serve(transport), "python3", "-c", prog)
		if r.code != 0 || r.stdout != want {
			t.Errorf("over %s: exit %d, printed\n%s\nwant\n%s\n%s", transport, r.code, r.stdout, want, r.stderr)
		}
	}
}

// Host functions and stream callbacks are the program's own code: they run
// on the client, once each, after the stream's earlier work on the server,
// as they do on a local GPU. Over a socket one enqueued in a capture is
// refused, said; over shm:// host functions run as on a GPU.
func TestRemoteHostFunctions(t *testing.T) {
	long(t)
	e := newEnv(t)
	local := e.run("hostfunc")
	if local.code != 0 || !strings.Contains(local.stdout, "after the kernel: yes") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"hostfunc"}, "unix", "shm", "tcp", "tls")
	// Over every transport they run as on a GPU: the caller goes on while
	// its function waits for it, later work waits for the function, one
	// can be captured, and a graph's host node runs at every launch (over a
	// socket through the host-function channel, a second connection).
	for _, mode := range []string{"async", "capture"} {
		local := e.run("hostfunc", mode)
		if local.code != 0 {
			t.Fatalf("hostfunc %s locally: exit %d\n%s%s", mode, local.code, local.stdout, local.stderr)
		}
		printsAsLocally(t, local, []string{"hostfunc", mode}, "unix", "shm", "tcp", "tls")
	}
	if local := e.run("hostfunc", "async"); !strings.Contains(local.stdout, "went on while its host function waited: yes") ||
		!strings.Contains(local.stdout, "two launches: ran 2 time(s)") {
		t.Errorf("hostfunc async locally:\n%s", local.stdout)
	}
}

// Small pinned host memory is also device memory: a memset and a kernel
// write it through its address, copies read it, the program reads the
// kernel's writes after a synchronization and its own writes reach later
// device work, over every transport as locally.
func TestRemoteMappedHostMemory(t *testing.T) {
	e := newEnv(t)
	local := e.run("mapped")
	if local.code != 0 || !strings.Contains(local.stdout, "read by the program: 42 42 42 42 7") {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	printsAsLocally(t, local, []string{"mapped"}, "unix", "shm", "tcp")
}

// Pinned host memory past 64 KiB, allocated mapped or the program's own
// pages registered, is device memory too once a call names it so: its
// device address is its host address, kernels read the program's writes
// and the program reads theirs after a synchronization, as do copies, also
// of one only a memset and a kernel's parameter name; freed or unregistered
// and made again it works again; over every transport as locally.
func TestRemotePinnedMemoryPastTheMappedSize(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"pinnedbig"}, "allocated, after the kernels: sum 34359466516, [0] 5 [1023] 1028 [1024] 77 ",
		"registered, copied back: 1 1 1 1", "unregistered again: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pinnedbig: ok")
	printsAsLocally(t, local, []string{"pinnedbig"}, "unix", "shm", "tcp")
}

// Device memory shared by IPC handles between two programs of one host,
// each with an executor of its own: the child opens the parent's big and
// small allocations (the small one sharing its page), reads the parent's
// bytes and writes its own, which the parent reads; a handle of memory
// freed since, a forged one and an empty one open nothing; what was opened
// is closed, not freed; over every transport as locally.
func TestRemoteIPCMemory(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"ipcclient"}, "inside an allocation: CUDA_SUCCESS\n",
		"no allocation: CUDA_ERROR_INVALID_VALUE\n", "child: the parent's bytes: yes yes; the small one's size 4096\n",
		"child: freed as its own: CUDA_ERROR_INVALID_VALUE\n", "child: closed again: CUDA_ERROR_INVALID_VALUE\n",
		"parent: the child's bytes: yes yes (child exit 0)\n", "freed handle opened: CUDA_ERROR_INVALID_VALUE\n",
		"forged handle opened: CUDA_ERROR_INVALID_VALUE\n", "zero handle opened: CUDA_ERROR_INVALID_VALUE\n", "ipcclient: ok\n")
	printsAsLocally(t, local, []string{"ipcclient"}, "unix", "shm", "tcp")
}

// A physical allocation shared as NVIDIA's memMapIPCDrv shares it: exported
// as a file descriptor the child inherits, imported, mapped and written
// there, read by the parent; a descriptor of something else imports
// nothing; over every transport as locally.
func TestRemoteIPCPhysicalMemory(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"ipcclient", "vmm"}, "parent: the child's bytes: yes (child exit 0)", "/dev/null imported: no")
	printsAsLocally(t, local, []string{"ipcclient", "vmm"}, "unix", "shm", "tcp")
}

// Pinned memory that cannot be kept on both sides is refused when named
// as device memory, said once, and the program goes on: past 1 GiB, and
// at an address the server holds (beside a small allocation it made; over
// shm:// both are in the heap the executor shares, which kernels reach).
func TestRemotePinnedMemoryRefused(t *testing.T) {
	for _, c := range []struct {
		what, want, said string
		transports       []string
	}{
		{"huge", "2 GiB registered, its device address: CUDA_ERROR_NOT_SUPPORTED\nasked again: CUDA_ERROR_NOT_SUPPORTED\n" +
			"registered twice: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED\nrefuse: ok\n",
			"pinned memory of 2147483648 bytes at 0x%x, named as a device address: over 1 GiB; kernels cannot reach it (said once)",
			[]string{"unix", "shm", "tcp"}},
		{"taken", "beside a small one: CUDA_ERROR_NOT_SUPPORTED\nrefuse: ok\n",
			"pinned memory of 128 bytes at 0x%x, named as a device address: that address is taken on the server; " +
				"kernels cannot reach it (said once)",
			[]string{"unix", "tcp"}},
	} {
		said := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(c.said), "%x", "[0-9a-f]+"))
		for _, transport := range c.transports {
			t.Run(c.what+"/"+transport, func(t *testing.T) {
				e := newEnv(t)
				got := e.remote(e.serve(transport), "pinnedbig", "refuse", c.what)
				if got.code != 0 || got.stdout != c.want || len(said.FindAllString(got.stderr, -1)) != 1 {
					t.Errorf("exit %d, printed\n%s\nwant\n%s\nstderr:\n%s", got.code, got.stdout, c.want, got.stderr)
				}
			})
		}
	}
}

// Managed memory over a remote GPU: the program's writes reach kernels,
// memsets and copies made after them, their writes reach the program after
// a synchronization of the context, a stream, an event or a synchronous
// copy (an allocation larger than one round trip carries too), what a
// system call wrote into it reaches the device, prefetches and advice reach
// the server's driver, whose range and pointer attributes
// say what they do locally; a module's and a library's managed variables
// start with the module's bytes and are kept alike too; over every
// transport as locally.
func TestRemoteManagedMemory(t *testing.T) {
	e := newEnv(t)
	local := runsLocally(t, e, []string{"managed"}, "after the program's changes: c[5]=1010 ", "a large one: 3 3 9",
		"read(2) into it, copied on the device: managed", "a library's variable: 20000 bytes, 1 1, the same again: yes")
	printsAsLocally(t, local, []string{"managed"}, "unix", "shm", "tcp")
}

// Threads, each with its own stream and managed memory attached to it,
// write it, launch on it and check the results after their own stream's
// synchronization, all at once: another thread's requests and
// synchronizations neither lose a thread's writes nor its kernels' results.
func TestRemoteManagedMemoryThreads(t *testing.T) {
	e := newEnv(t)
	local := e.run("managed", "threads")
	if local.code != 0 || strings.Count(local.stdout, ": 0 results wrong") != 4 {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	for _, transport := range []string{"unix", "shm"} {
		e := newEnv(t)
		got := e.remote(e.serve(transport), "managed", "threads")
		if got.code != 0 || got.stdout != local.stdout {
			t.Errorf("over %s: exit %d, printed\n%s\nlocally\n%s\n%s", transport, got.code, got.stdout, local.stdout, got.stderr)
		}
	}
}

// Remotely the program may not touch managed memory while kernels run (it
// is kept alike only at requests and syncpoints): the device says so, as
// one without concurrent managed access does. An allocation the program
// could not reach (its address taken in the program) fails, said once,
// and never ends the program by a signal.
func TestRemoteManagedMemoryLimits(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	if got := e.run("managed", "attrs"); got.code != 0 || !strings.Contains(got.stdout, "concurrent managed access: 1") {
		t.Fatalf("locally: exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}
	want := "managed memory: 1\nconcurrent managed access: 0\npageable memory access: 0\n"
	if got := e.remote(s, "managed", "attrs"); got.code != 0 || got.stdout != want {
		t.Errorf("remotely: exit %d, printed\n%s\nwant\n%s\n%s", got.code, got.stdout, want, got.stderr)
	}
	got := e.remote(s, "managed", "taken")
	want = "again: CUDA_ERROR_NOT_SUPPORTED, pointer 0\nthe program's bytes: 7\n"
	if got.code != 0 || got.stdout != want ||
		strings.Count(got.stderr, "that address is taken in this process; the program could not reach them") != 1 {
		t.Errorf("an address the program holds: exit %d, printed\n%s\nwant\n%s\n%s", got.code, got.stdout, want, got.stderr)
	}
}

// The start of the Python programs: a current context, names for an
// allocation (dev) and pinned memory (h).
// printsOverShm runs the Python program prog over shm:// and wants it to
// print want.
func (e *env) printsOverShm(t *testing.T, prog, want string) {
	t.Helper()
	r := e.remote(e.serve("shm"), "python3", "-c", prog)
	if r.code != 0 || r.stdout != want {
		t.Errorf("over shm://: exit %d, printed\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
}

const contextPrelude = `
import ctypes, os, sys
cu = ctypes.CDLL("libcuda.so.1")
ctx, dev, h = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
`

// Pinned memory only ever named as a copy's host side costs no round trip;
// once a call names it as a device address, it comes back at syncpoints.
func TestRemoteMappedHostMemoryRoundTrips(t *testing.T) {
	long(t)
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	s := e.serve("unix")
	prog := contextPrelude + `
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(64)) == 0
assert cu.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(64), 2) == 0
for i in range(10):
    assert cu.cuMemcpyHtoDAsync_v2(dev, h, ctypes.c_size_t(64), None) == 0
    assert cu.cuCtxSynchronize() == 0
if sys.argv[1] == "named":
    assert cu.cuMemsetD8Async(ctypes.c_uint64(h.value), 1, ctypes.c_size_t(64), None) == 0
    for i in range(10):
        assert cu.cuCtxSynchronize() == 0
    print(ctypes.string_at(h, 4))
`
	staging := e.remote(s, "python3", "-c", prog, "staging")
	if n := roundTrips(staging)["fgrHostReadMany"]; staging.code != 0 || n != 0 {
		t.Errorf("a staging buffer: exit %d, %d round trips for it:\n%s", staging.code, n, staging.stderr)
	}
	named := e.remote(s, "python3", "-c", prog, "named")
	if n := roundTrips(named)["fgrHostReadMany"]; named.code != 0 || n != 10 || named.stdout != "b'\\x01\\x01\\x01\\x01'\n" {
		t.Errorf("named by a memset: exit %d, printed %q, want 10 round trips for it:\n%s", named.code, named.stdout, named.stderr)
	}
}

// The executor writes and reads for the client only inside pinned memory it
// made for it: never device memory, never its own. Such memory's device
// address is its own; so is that of pinned memory only the client held
// until asked for it (past 64 KiB, or past 1 MiB of small ones in all),
// which is kept on both sides from then on.
func TestRemoteMappedHostMemoryBounds(t *testing.T) {
	long(t)
	e := newEnv(t)
	s := e.serve("unix")
	prog := contextPrelude + `
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
assert cu.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(64), 2) == 0
buf = ctypes.create_string_buffer(64)
srcs, sizes = (ctypes.c_uint64 * 1)(dev.value), (ctypes.c_size_t * 1)(64)
print("write into device memory", cu.fgrHostWrite(dev, buf, ctypes.c_size_t(64)), cu.cuCtxSynchronize())
print("read device memory", cu.fgrHostReadMany(srcs, sizes, 1, buf, ctypes.c_size_t(64)))
srcs[0], sizes[0] = h.value, 65
print("read past the pinned memory", cu.fgrHostReadMany(srcs, sizes, 1, buf, ctypes.c_size_t(65)))
sizes[0] = 64
print("read the pinned memory", cu.fgrHostReadMany(srcs, sizes, 1, buf, ctypes.c_size_t(64)))
d, big = ctypes.c_uint64(), ctypes.c_void_p()
print("its device address", cu.cuMemHostGetDevicePointer_v2(ctypes.byref(d), h, 0), d.value == h.value)
assert cu.cuMemHostAlloc(ctypes.byref(big), ctypes.c_size_t(1 << 20), 2) == 0
print("a large one's", cu.cuMemHostGetDevicePointer_v2(ctypes.byref(d), big, 0))
kept = 0
for i in range(20):
    p = ctypes.c_void_p()
    assert cu.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(64 << 10), 2) == 0
    kept += cu.cuMemHostGetDevicePointer_v2(ctypes.byref(d), p, 0) == 0
    if i == 0:
        first = p.value
print("of 20 more of 64 KiB, kept on both sides:", kept)
# One of them named 17 times: over 1 MiB in all, more than any answer holds.
n = 17
srcs, sizes = (ctypes.c_uint64 * n)(*[first] * n), (ctypes.c_size_t * n)(*[64 << 10] * n)
out = ctypes.create_string_buffer(n << 16)
print("read over 1 MiB", cu.fgrHostReadMany(srcs, sizes, n, out, ctypes.c_size_t(n << 16)), cu.cuCtxSynchronize())
`
	r := e.remote(s, "python3", "-c", prog)
	want := "write into device memory 0 1\nread device memory 1\nread past the pinned memory 1\nread the pinned memory 0\n" +
		"its device address 0 True\na large one's 0\nof 20 more of 64 KiB, kept on both sides: 20\nread over 1 MiB 1 0\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, printed\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// A function's parameter layout costs one round trip at its first launch,
// not one per parameter, and none after.
func TestRemoteLayoutInOneRoundTrip(t *testing.T) {
	long(t)
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	s := e.serve("unix")
	r := e.remote(s, "rtlike", "5")
	trips := roundTrips(r)
	// rtlike launches vecadd (4 parameters) 5 times; its other launches
	// pass no parameters.
	if r.code != 0 || trips["fgrParamSizes"] != 1 || trips["cuFuncGetParamInfo"] != 0 {
		t.Errorf("exit %d: parameter sizes %d round trips, cuFuncGetParamInfo %d; want 1 and none\n%s", r.code,
			trips["fgrParamSizes"], trips["cuFuncGetParamInfo"], r.stderr)
	}
	// More parameters than the client's first guess (32): a second answer
	// with room for them all, and the launch carries every one.
	prog := contextPrelude + `
mod, f = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel wide 10 params=40\n") == 0
assert cu.cuModuleGetFunction(ctypes.byref(f), mod, b"wide") == 0
words = [ctypes.c_uint64(i) for i in range(40)]
params = (ctypes.c_void_p * 40)(*[ctypes.cast(ctypes.byref(w), ctypes.c_void_p) for w in words])
for i in range(3):
    print(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None), cu.cuCtxSynchronize())
`
	wide := e.remote(s, "python3", "-c", prog, "")
	trips = roundTrips(wide)
	if wide.code != 0 || wide.stdout != "0 0\n0 0\n0 0\n" || trips["fgrParamSizes"] != 2 {
		t.Errorf("40 parameters: exit %d, printed %q, %d round trips for their sizes (want 2)\n%s", wide.code, wide.stdout,
			trips["fgrParamSizes"], wide.stderr)
	}
	// A library's kernel launched as a function, as CUDA 12+ runtimes do:
	// its sizes in one round trip too.
	prog = contextPrelude + `
lib, k = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuLibraryLoadData(ctypes.byref(lib), b"FLEXGV-SIM-MODULE\nkernel three 10 params=3\n", None, None, 0, None, None, 0) == 0
assert cu.cuLibraryGetKernel(ctypes.byref(k), lib, b"three") == 0
words = [ctypes.c_uint64(i) for i in range(3)]
params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(w), ctypes.c_void_p) for w in words])
for i in range(3):
    print(cu.cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, None, params, None), cu.cuCtxSynchronize())
`
	lib := e.remote(s, "python3", "-c", prog, "")
	trips = roundTrips(lib)
	if lib.code != 0 || lib.stdout != "0 0\n0 0\n0 0\n" || trips["fgrParamSizes"] != 1 {
		t.Errorf("a library's kernel: exit %d, printed %q, %d round trips for its sizes (want 1)\n%s", lib.code, lib.stdout,
			trips["fgrParamSizes"], lib.stderr)
	}
}

// Large results come back through a buffer the executor keeps pinned; it
// grows with them (unpinned, replaced, pinned again) and every byte arrives.
func TestRemoteLargeDownloadsGrow(t *testing.T) {
	long(t)
	e := newEnv(t)
	s := e.serve("unix")
	prog := contextPrelude + `
n = 8 << 20
src = bytes(i * 7 % 251 for i in range(n))
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(n)) == 0
assert cu.cuMemcpyHtoD_v2(dev, src, ctypes.c_size_t(n)) == 0
for k in (2 << 20, 8 << 20, 3 << 20):
    out = ctypes.create_string_buffer(k)
    assert cu.cuMemcpyDtoH_v2(out, dev, ctypes.c_size_t(k)) == 0
    print(k, out.raw == src[:k])
`
	r := e.remote(s, "python3", "-c", prog)
	if want := "2097152 True\n8388608 True\n3145728 True\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, printed\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
	if log := s.Log(); strings.Contains(log, "cannot be pinned") {
		t.Errorf("the executor could not pin its result buffer:\n%s", log)
	}
}

// An entry point the protocol does not carry answers
// CUDA_ERROR_NOT_SUPPORTED and says so, and the program goes on.
func TestRemoteUnsupported(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	prog := `
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
ok = cu.cuInit(0) == 0
ctx = ctypes.c_void_p()
print("cuInit", cu.cuInit(0))
state = ctypes.c_int()
print("cuCheckpointProcessGetState", cu.cuCheckpointProcessGetState(1, ctypes.byref(state)))
gran = ctypes.c_size_t()
print("cuMulticastGetGranularity", cu.cuMulticastGetGranularity(ctypes.byref(gran), None, 0))
table = ctypes.c_void_p()
nvrtc = (ctypes.c_ubyte * 16)(*bytes.fromhex("da9151d33ae6cc41a5c04f26d533e328"))
print("cuGetExportTable", cu.cuGetExportTable(ctypes.byref(table), nvrtc))
uuid = (ctypes.c_ubyte * 16)(*b"no-such-table-!!")
print("cuGetExportTable", cu.cuGetExportTable(ctypes.byref(table), uuid))
dev = ctypes.c_int()
print("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
`
	r := e.remote(s, "python3", "-c", prog)
	want := "cuInit 0\ncuCheckpointProcessGetState 801\ncuMulticastGetGranularity 801\ncuGetExportTable 801\ncuGetExportTable 801\ncuDeviceGet 0\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d, printed\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
	// NVRTC's own table is refused quietly: NVRTC does as well without it.
	if strings.Contains(r.stderr, "da9151d3") {
		t.Errorf("NVRTC's table was said:\n%s", r.stderr)
	}
	for _, name := range []string{"cuCheckpointProcessGetState is not supported remotely", "cuMulticastGetGranularity is not supported remotely",
		"table 6e6f2d73-7563-682d-7461-626c652d2121 is not emulated"} {
		if !strings.Contains(r.stderr, name) {
			t.Errorf("stderr does not say %q:\n%s", name, r.stderr)
		}
	}
}

// A forked child makes calls of its own while its parent goes on: it gets a
// connection (and an executor) of its own instead of sharing its parent's.
func TestRemoteForkedChildCalls(t *testing.T) {
	prog := `
import ctypes, os, sys
cu = ctypes.CDLL("libcuda.so.1")
def work(n):
    ctx, p = ctypes.c_void_p(), ctypes.c_uint64()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    for i in range(n):
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096)) == 0
        assert cu.cuMemFree_v2(p) == 0
assert cu.cuInit(0) == 0
work(10)
pid = os.fork()
if pid == 0:
    work(300)
    os._exit(0)
work(300)
_, st = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(st))
`
	e := newEnv(t)
	s := e.serve("unix")
	r := e.remote(s, "python3", "-c", prog)
	if r.code != 0 || r.stdout != "child 0\n" {
		t.Fatalf("exit %d, %q\n%s", r.code, r.stdout, r.stderr)
	}
	s.waitCount("connected: executor pid", 2)
	if n := strings.Count(s.Log(), "connected: executor pid"); n != 2 {
		t.Errorf("%d connections for a parent and its child:\n%s", n, s.Log())
	}
}

// The simulated GPU's export tables are answered by the client: every
// slot's result (stack and floating-point arguments, pointers out, the
// table's own address, its data) is what the driver gives locally, from
// threads, a forked child and an exec'd one; the tables' pages are
// read-only. A table the client does not know is refused with
// CUDA_ERROR_NOT_SUPPORTED where the simulated driver says
// CUDA_ERROR_INVALID_VALUE: that is the one difference.
func TestRemoteExportTables(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	local := e.run("exportclient")
	if local.code != 0 {
		t.Fatalf("locally: exit %d\n%s", local.code, local.stderr)
	}
	r := e.remote(s, "exportclient")
	if r.stdout != local.stdout {
		t.Errorf("remotely printed\n%s\nlocally\n%s", r.stdout, local.stdout)
	}
	var failed []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if strings.HasPrefix(l, "exportclient: ") {
			failed = append(failed, strings.TrimPrefix(l, "exportclient: "))
		}
	}
	// The forked child inherits the parent's failure count, hence its line.
	want := "unknown table: got 801, want 1,unknown table: got 801, want 1,unknown table: got 801, want 1," +
		"unknown table: got 801, want 1,forked child: got 1, want 0"
	if r.code != 1 || strings.Join(failed, ",") != want {
		t.Errorf("exit %d, checks failed: %q\n%s", r.code, failed, r.stderr)
	}
}

// Under flexgv trace, calls the remoting client refuses are counted as the
// failed calls they are.
func TestRemoteUnsupportedTraced(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	e.extra = append(e.extra, "FLEXGV_REMOTE="+s.addr)
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
state = ctypes.c_int()
assert cu.cuInit(0) == 0
for i in range(3):
    assert cu.cuCheckpointProcessGetState(1, ctypes.byref(state)) == 801
`
	out := filepath.Join(e.dir, "summary.json")
	r := e.runIn(filepath.Join(build, "remote"), "flexgv", "trace", "--json", "-o", out,
		"--driver", filepath.Join(build, "remote", "libcuda.so.1"), "--", "python3", "-c", prog)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name": "cuCheckpointProcessGetState"`, `"calls": 3`, `"errors": 3`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("summary lacks %s:\n%s", want, data)
		}
	}
}

// SIGTERM stops the server: its executors end (their programs get the
// error), its socket goes; a second server on a live socket is refused,
// and one left behind by a killed server is replaced.
func TestRemoteServeLifecycle(t *testing.T) {
	e := newEnv(t)
	s := e.serve("unix")
	path := strings.TrimPrefix(s.addr, "unix://")
	if r := e.runIn("", "flexgv", "serve", "--listen", s.addr); r.code != 1 || !strings.Contains(r.stderr, "already listening") {
		t.Errorf("a second server: exit %d, %q", r.code, r.stderr)
	}
	cmd, _, errb, pid := startRemote(t, e, s, "spinner", "200", "60")
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, s.Log())
	}
	// The second server found the first without connecting as a client.
	if strings.Contains(s.Log(), "refused") {
		t.Errorf("the second server's check left a refusal in the first one's log:\n%s", s.Log())
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(errb.String(), "lost the GPU server") {
		t.Errorf("the program after its server stopped: %v\n%s", err, errb.String())
	}
	if alive(pid) {
		t.Errorf("executor %d outlived its server", pid)
	}
	if fileExists(path) {
		t.Errorf("%s is still there", path)
	}
	// A socket file nobody listens on is replaced.
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	s2 := e.serve("unix")
	if r := e.remote(s2, "rtlike", "1"); r.code != 0 {
		t.Errorf("over a replaced socket: exit %d\n%s", r.code, r.stderr)
	}
}

// Queued calls (launches, memsets, uploads, event records, ...) return at
// once (an upload has taken the program's bytes when it returns); an
// error of theirs is answered by the next call that waits for the device,
// once, as a GPU's asynchronous errors are. Locally the simulated driver
// answers it at the call itself.
func TestRemoteQueuedErrorsSurfaceAtSync(t *testing.T) {
	prog := pyContext + `
p = ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096)) == 0
print("good memset", cu.cuMemsetD8Async(p, 7, ctypes.c_size_t(4096), None))
print("bad memset", cu.cuMemsetD8Async(ctypes.c_uint64(16), 7, ctypes.c_size_t(4096), None))
print("alloc", cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096)))
print("sync", cu.cuCtxSynchronize())
print("sync again", cu.cuCtxSynchronize())
buf = (ctypes.c_ubyte * 4096)()
print("copy", cu.cuMemcpyDtoH_v2(buf, p, ctypes.c_size_t(4096)))
src = (ctypes.c_ubyte * 4096)(*([5] * 4096))
print("good upload", cu.cuMemcpyHtoDAsync_v2(p, src, ctypes.c_size_t(4096), None))
ctypes.memset(src, 9, 4096)  # pageable memory: the program may reuse it at once
print("bad upload", cu.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(16), src, ctypes.c_size_t(4096), None))
print("sync", cu.cuCtxSynchronize())
print("copy", cu.cuMemcpyDtoH_v2(buf, p, ctypes.c_size_t(4096)), buf[0], buf[4095])
`
	e := newEnv(t)
	s := e.serve("unix")
	local := e.runIn(filepath.Join(build, "sim"), "python3", "-c", prog)
	want := "good memset 0\nbad memset 1\nalloc 0\nsync 0\nsync again 0\ncopy 0\n" +
		"good upload 0\nbad upload 1\nsync 0\ncopy 0 5 5\n"
	if local.code != 0 || local.stdout != want {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	r := e.remote(s, "python3", "-c", prog)
	want = "good memset 0\nbad memset 0\nalloc 0\nsync 1\nsync again 0\ncopy 0\n" +
		"good upload 0\nbad upload 0\nsync 1\ncopy 0 5 5\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("remotely: exit %d\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// Copies under unified addressing (cuMemcpy, cuMemcpyAsync: what
// cudaMemcpyDefault becomes) with a side in the program's own memory work
// as on a GPU, which tells host from device by the address: every
// direction, both ABIs, the same as locally; pinned memory kernels may use
// counts as the device's; a device address the connection was never given
// is still refused.
func TestRemoteUnifiedAddressCopies(t *testing.T) {
	long(t)
	prog := contextPrelude + `
n = 1 << 16
src = (ctypes.c_ubyte * n)(*[(i * 13) % 251 for i in range(n)])
s = ctypes.c_void_p()
assert cu.cuStreamCreate(ctypes.byref(s), 0) == 0
a, b = ctypes.c_uint64(), ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(a), ctypes.c_size_t(n)) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(b), ctypes.c_size_t(n)) == 0
addr = lambda buf: ctypes.c_uint64(ctypes.addressof(buf))
for name in ("cuMemcpy", "cuMemcpy_ptds", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"):
    f = getattr(cu, name)
    tail = (s,) if "Async" in name else ()
    back, same = (ctypes.c_ubyte * n)(), (ctypes.c_ubyte * n)()
    assert cu.cuMemsetD8_v2(a, 0, ctypes.c_size_t(n)) == 0
    r = [f(a, addr(src), ctypes.c_size_t(n), *tail),             # host to device
         f(b, a, ctypes.c_size_t(n), *tail),                     # device to device
         f(addr(back), b, ctypes.c_size_t(n), *tail),            # device to host
         f(addr(same), addr(back), ctypes.c_size_t(n), *tail),   # host to host
         cu.cuCtxSynchronize()]
    print(name, r, bytes(back) == bytes(src), bytes(same) == bytes(src))
# Pinned memory kernels may use is device memory too: a copy from it sees
# what the stream wrote there before, not the program's own copy of it.
h, got = ctypes.c_void_p(), (ctypes.c_ubyte * 64)()
assert cu.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(64), 2) == 0
ctypes.memset(h, 1, 64)
r = [cu.cuMemsetD8Async(ctypes.c_uint64(h.value), 9, ctypes.c_size_t(64), s),
     cu.cuMemcpyAsync(a, ctypes.c_uint64(h.value), ctypes.c_size_t(64), s),
     cu.cuStreamSynchronize(s), cu.cuMemcpyDtoH_v2(got, a, ctypes.c_size_t(64))]
print("from pinned memory", r, set(got))
if len(sys.argv) > 1:  # remotely (the simulated driver would fault on it)
    # inside the range the client reserves for device addresses (twice the
    # device's 16 GiB), where no host mapping can be: 1 TiB away, one was
    # at times (the 64 GiB pinned heap of shm://), and the copy went there
    print("a device address never given", cu.cuMemcpy(ctypes.c_uint64(a.value + (8 << 30)), a, ctypes.c_size_t(16)))
`
	e := newEnv(t)
	local := e.run("python3", "-c", prog)
	want := "cuMemcpy [0, 0, 0, 0, 0] True True\ncuMemcpy_ptds [0, 0, 0, 0, 0] True True\n" +
		"cuMemcpyAsync [0, 0, 0, 0, 0] True True\ncuMemcpyAsync_ptsz [0, 0, 0, 0, 0] True True\n" +
		"from pinned memory [0, 0, 0, 0] {9}\n"
	if local.code != 0 || local.stdout != want {
		t.Fatalf("locally: exit %d\n%s\n%s", local.code, local.stdout, local.stderr)
	}
	s := e.serve("unix")
	for _, transport := range []string{"unix", "shm"} {
		s.addr = transport + "://" + filepath.Join(e.dir, "gpu.sock")
		remote := e.remote(s, "python3", "-c", prog, "remote")
		if remote.code != 0 || remote.stdout != want+"a device address never given 1\n" {
			t.Errorf("over %s: exit %d\n%s\nwant\n%s\n%s", transport, remote.code, remote.stdout, want, remote.stderr)
		}
	}
}

// Copies over FLEXGV_REMOTE_CHUNK bytes go as several calls, each piece
// its own frame: a copy of any size arrives whole and in place, and the
// pieces are separate calls (a copy running past its allocation lands up
// to the piece that leaves it). A synchronous upload's pieces but the last
// are queued: one that fails is answered by the last (a copy across an
// unmapped hole in a reservation lands on both sides and says the error).
func TestRemoteCopiesInPieces(t *testing.T) {
	long(t)
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
ctx, p, small = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
n = (1 << 20) + 123
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(small), ctypes.c_size_t(8192)) == 0
src = (ctypes.c_ubyte * n)(*[(i * 7 + i // 4096) % 251 for i in range(n)])
for up, down in [("cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2"), ("cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2")]:
    a = (None,) if up.endswith("Async_v2") else ()
    dst = (ctypes.c_ubyte * n)()
    assert cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)) == 0
    print(up, getattr(cu, up)(p, src, ctypes.c_size_t(n), *a), down, getattr(cu, down)(dst, p, ctypes.c_size_t(n), *a),
          "same" if bytes(dst) == bytes(src) else "differ")
print("past the end", cu.cuMemcpyHtoD_v2(small, src, ctypes.c_size_t(12288)))
got = (ctypes.c_ubyte * 8192)()
assert cu.cuMemcpyDtoH_v2(got, small, ctypes.c_size_t(8192)) == 0
print("landed", "8192" if bytes(got) == bytes(src)[:8192] else "none" if not any(got) else "other")

G = 2 << 20
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Loc),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", ctypes.c_ubyte * 8)]
class Access(ctypes.Structure):
    _fields_ = [("location", Loc), ("flags", ctypes.c_int)]
va = ctypes.c_uint64()
assert cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(3 * G), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_ulonglong(0)) == 0
for off in (0, 2 * G):  # mapped, a hole, mapped
    h = ctypes.c_ulonglong()
    assert cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(G), ctypes.byref(Prop(1, 0, Loc(1, 0))), ctypes.c_ulonglong(0)) == 0
    assert cu.cuMemMap(ctypes.c_uint64(va.value + off), ctypes.c_size_t(G), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0)) == 0
    assert cu.cuMemSetAccess(ctypes.c_uint64(va.value + off), ctypes.c_size_t(G), ctypes.byref(Access(Loc(1, 0), 3)), ctypes.c_size_t(1)) == 0
fives = (ctypes.c_ubyte * (G + 8192))(*([5] * (G + 8192)))
print("across a hole", cu.cuMemcpyHtoD_v2(ctypes.c_uint64(va.value + G - 4096), fives, ctypes.c_size_t(G + 8192)))
ends = []
for at in (G - 4096, 2 * G):
    b = (ctypes.c_ubyte * 4096)()
    assert cu.cuMemcpyDtoH_v2(b, ctypes.c_uint64(va.value + at), ctypes.c_size_t(4096)) == 0
    ends.append(str(b[0]))
print("its ends", " ".join(ends))
`
	e := newEnv(t)
	s := e.serve("unix")
	e.extra = append(e.extra, "FLEXGV_REMOTE_CHUNK=4096")
	r := e.remote(s, "python3", "-c", prog)
	want := "cuMemcpyHtoD_v2 0 cuMemcpyDtoH_v2 0 same\ncuMemcpyHtoDAsync_v2 0 cuMemcpyDtoHAsync_v2 0 same\n" +
		"past the end 1\nlanded 8192\nacross a hole 1\nits ends 5 5\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
	// Whole, a copy past the end is refused before anything lands.
	e.extra = e.extra[:len(e.extra)-1]
	if r := e.remote(s, "python3", "-c", prog); r.code != 0 || !strings.HasSuffix(r.stdout, "past the end 1\nlanded none\nacross a hole 1\nits ends 0 0\n") {
		t.Errorf("in one piece: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	e.extra = append(e.extra, "FLEXGV_REMOTE_CHUNK=100")
	r = e.remote(s, "python3", "-c", "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))")
	if r.stdout != "46\n" || !strings.Contains(r.stderr, "FLEXGV_REMOTE_CHUNK=100: want a number of bytes from 4096") {
		t.Errorf("a chunk of 100 bytes: %q\n%s", r.stdout, r.stderr)
	}
	// The benchmarks' added latency: a bad value refuses the connection too.
	e.extra = append(e.extra[:len(e.extra)-1], "FLEXGV_REMOTE_DELAY_US=2000000")
	r = e.remote(s, "python3", "-c", "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))")
	if r.stdout != "46\n" || !strings.Contains(r.stderr, "FLEXGV_REMOTE_DELAY_US=2000000: want microseconds from 0 to 1000000") {
		t.Errorf("a delay of 2 s: %q\n%s", r.stdout, r.stderr)
	}
	e.extra = append(e.extra[:len(e.extra)-1], "FLEXGV_REMOTE_DELAY_US=50")
	if r = e.remote(s, "python3", "-c", "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))"); r.stdout != "0\n" {
		t.Errorf("a delay of 50 us: %q\n%s", r.stdout, r.stderr)
	}
}

// Over shm://, copies of 64 KiB or more go through the staging areas: the
// bytes land whole for every upload and download entry point (synchronous
// and on a stream, each ABI), uploads larger than the area (32 MiB) wrap
// around it, refused uploads (even more than the area in all) do not stall
// the ones after them, and what the program sees is what it sees over a
// socket, where nothing is staged.
func TestRemoteCopiesThroughTheStagingAreas(t *testing.T) {
	prog := `
import ctypes, os
cu = ctypes.CDLL("libcuda.so.1")
ctx, p, small, st = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_void_p()
n = (80 << 20) + 5
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(small), ctypes.c_size_t(128 << 10)) == 0
assert cu.cuStreamCreate(ctypes.byref(st), 1) == 0
src = (ctypes.c_ubyte * n).from_buffer(bytearray((i * 13 + i // 65536) % 256 for i in range(n)))
dst = (ctypes.c_ubyte * n)()
def check(name, *stream):
    assert cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)) == 0
    r = getattr(cu, name)(p, src, ctypes.c_size_t(n), *stream)
    assert cu.cuCtxSynchronize() == 0
    assert cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n)) == 0
    print(name, r, "same" if bytes(dst) == bytes(src) else "differ")
check("cuMemcpyHtoD_v2")
check("cuMemcpyHtoD_v2_ptds")
check("cuMemcpyHtoDAsync_v2", None)
check("cuMemcpyHtoDAsync_v2_ptsz", None)
check("cuMemcpyHtoDAsync_v2", st)
# Many uploads in a row on a stream, each into its own place.
assert cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)) == 0
k = 3 << 20
for i in range(n // k):
    assert cu.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(p.value + i * k), ctypes.byref(src, i * k), ctypes.c_size_t(k), st) == 0
assert cu.cuStreamSynchronize(st) == 0
assert cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n // k * k)) == 0
print("in a row", "same" if bytes(dst)[:n // k * k] == bytes(src)[:n // k * k] else "differ")
print("past the end", cu.cuMemcpyHtoD_v2(small, src, ctypes.c_size_t(192 << 10)))
check("cuMemcpyHtoD_v2")
# Refusals of more than the area in all, then a good copy.
print("refused", sorted(set(cu.cuMemcpyHtoD_v2(small, src, ctypes.c_size_t(4 << 20)) for _ in range(10))))
check("cuMemcpyHtoD_v2")
for name, stream in [("cuMemcpyDtoH_v2_ptds", ()), ("cuMemcpyDtoHAsync_v2", (None,)), ("cuMemcpyDtoHAsync_v2_ptsz", (None,)),
                     ("cuMemcpyDtoHAsync_v2", (st,))]:
    back = (ctypes.c_ubyte * n)()
    print(name, getattr(cu, name)(back, p, ctypes.c_size_t(n), *stream), "same" if bytes(back) == bytes(src) else "differ")
# Over shm://, a download's next piece named at a place that is no half
# of the area (one that would run past the area's end), or larger than a
# half: refused (queued, so at the next wait, which answers the first
# error), and the next download is whole.
if os.environ["FLEXGV_REMOTE"].startswith("shm:"):
    odd = (4 << 20) + 4096
    ahead = [cu.fgrStageDownloadAhead(p, ctypes.c_size_t(4 << 20), None, ctypes.c_size_t(odd)),
             cu.fgrStageDownloadAhead(p, ctypes.c_size_t(n), None, ctypes.c_size_t(0))]
    print("ahead, misplaced", ahead, cu.fgrStageDownloadWait(ctypes.c_size_t(odd)), cu.fgrStageDownloadWait(ctypes.c_size_t(0)))
else:
    print("ahead, misplaced [0, 0] 1 0")
back = (ctypes.c_ubyte * n)()
print("then", cu.cuMemcpyDtoH_v2(back, p, ctypes.c_size_t(n)), "same" if bytes(back) == bytes(src) else "differ", flush=True)
# A forked child, with a connection (and copying threads) of its own.
pid = os.fork()
if pid == 0:
    c = ctypes.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), 0) == 0 and cu.cuCtxSetCurrent(c) == 0
    q = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(n)) == 0
    back = (ctypes.c_ubyte * n)()
    r = cu.cuMemcpyHtoD_v2(q, src, ctypes.c_size_t(n)), cu.cuMemcpyDtoH_v2(back, q, ctypes.c_size_t(n))
    print("a child", r, "same" if bytes(back) == bytes(src) else "differ", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
`
	var outs []string
	for _, transport := range []string{"shm", "unix"} {
		e := newEnv(t)
		s := e.serve(transport)
		e.extra = append(e.extra, "FLEXGV_REMOTE_LOG=calls")
		r := e.remote(s, "python3", "-c", prog)
		if r.code != 0 {
			t.Fatalf("over %s: exit %d\n%s\n%s", transport, r.code, r.stdout, r.stderr)
		}
		staged := strings.Contains(r.stderr, "fgrStageUploadLast") && strings.Contains(r.stderr, "fgrStageUpload ") &&
			strings.Contains(r.stderr, "fgrStageDownload")
		if staged != (transport == "shm") {
			t.Errorf("over %s, uploads staged: %v\n%s", transport, staged, r.stderr)
		}
		outs = append(outs, r.stdout)
	}
	want := "cuMemcpyHtoD_v2 0 same\ncuMemcpyHtoD_v2_ptds 0 same\ncuMemcpyHtoDAsync_v2 0 same\ncuMemcpyHtoDAsync_v2_ptsz 0 same\n" +
		"cuMemcpyHtoDAsync_v2 0 same\nin a row same\npast the end 1\ncuMemcpyHtoD_v2 0 same\nrefused [1]\ncuMemcpyHtoD_v2 0 same\n" +
		"cuMemcpyDtoH_v2_ptds 0 same\ncuMemcpyDtoHAsync_v2 0 same\ncuMemcpyDtoHAsync_v2_ptsz 0 same\ncuMemcpyDtoHAsync_v2 0 same\n" +
		"ahead, misplaced [0, 0] 1 0\nthen 0 same\na child (0, 0) same\n"
	if outs[0] != want || outs[1] != want {
		t.Errorf("over shm://\n%s\nover unix://\n%s\nwant\n%s", outs[0], outs[1], want)
	}
}

// Over shm://, an upload captured into a graph is copied from a buffer
// the executor keeps for the graph (the staging area is reused), and what
// it keeps for a connection is bounded by flexgv serve --pinned-max: past
// it a captured upload fails with CUDA_ERROR_OUT_OF_MEMORY, and the
// connection goes on.
func TestRemoteCapturedUploadsAreBounded(t *testing.T) {
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
ctx, p, st, g, ge, g2 = (ctypes.c_void_p() for _ in range(6))
p = ctypes.c_uint64()
n = 4 << 20
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
assert cu.cuStreamCreate(ctypes.byref(st), 1) == 0
src = (ctypes.c_ubyte * n).from_buffer(bytearray((i * 7) % 256 for i in range(n)))
assert cu.cuStreamBeginCapture_v2(st, 2) == 0
print("captured upload", cu.cuMemcpyHtoDAsync_v2(p, src, ctypes.c_size_t(n), st))
print("end", cu.cuStreamEndCapture(st, ctypes.byref(g)))
assert cu.cuGraphInstantiateWithFlags(ctypes.byref(ge), g, ctypes.c_ulonglong(0)) == 0
assert cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)) == 0
print("launch", cu.cuGraphLaunch(ge, st), cu.cuStreamSynchronize(st))
dst = (ctypes.c_ubyte * n)()
assert cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n)) == 0
print("the graph's copy", "same" if bytes(dst) == bytes(src) else "differs")
assert cu.cuStreamBeginCapture_v2(st, 2) == 0
rs = [cu.cuMemcpyHtoDAsync_v2(p, src, ctypes.c_size_t(n), st) for _ in range(70)]
print("70 more", sorted(set(rs)), "end", cu.cuStreamEndCapture(st, ctypes.byref(g2)), "then", cu.cuCtxSynchronize())
print("after", cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)), cu.cuCtxSynchronize())
`
	want := "captured upload 0\nend 0\nlaunch 0 0\nthe graph's copy same\n70 more [0, 2] end 0 then 0\nafter 0 0\n"
	e := newEnv(t)
	r := e.remote(e.serve("shm", "--pinned-max", "256MiB"), "python3", "-c", prog)
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, printed\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// A copy from the program's memory captured into a graph over any
// transport and of any size is made at each launch from the program's
// bytes sent with the launch, not from the frame or staging area the
// capturing request came through (which later requests reuse); a copy
// into the program's memory writes it at each launch, there after the
// synchronization. Captures are in the global mode, the runtime's default,
// which forbids the executor's own bookkeeping calls (uploads behind a slow
// kernel are still in flight when the capture begins).
func TestRemoteCapturedCopiesOfProgramMemory(t *testing.T) {
	prog := contextPrelude + `
st, g, ge, mod, slow = (ctypes.c_void_p() for _ in range(5))
p = ctypes.c_uint64()
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel slow 200000\n") == 0
assert cu.cuModuleGetFunction(ctypes.byref(slow), mod, b"slow") == 0
assert cu.cuStreamCreate(ctypes.byref(st), 1) == 0
for n in [4096, 1 << 20]:
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    src = (ctypes.c_ubyte * n).from_buffer(bytearray((i * 7) % 256 for i in range(n)))
    other = (ctypes.c_ubyte * n).from_buffer(bytearray(255 - (i % 256) for i in range(n)))
    for name in ["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"]:
        assert cu.cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, st, None, None) == 0
        for _ in range(3):
            assert cu.cuMemcpyHtoDAsync_v2(p, other, ctypes.c_size_t(n), st) == 0
        assert cu.cuStreamBeginCapture_v2(st, 0) == 0
        print(n, name, "captured", getattr(cu, name)(p, src, ctypes.c_size_t(n), st), "end", cu.cuStreamEndCapture(st, ctypes.byref(g)))
        assert cu.cuGraphInstantiateWithFlags(ctypes.byref(ge), g, ctypes.c_ulonglong(0)) == 0
        # Requests that fill the executor's buffers with other bytes.
        for _ in range(3):
            assert cu.cuMemcpyHtoD_v2(p, other, ctypes.c_size_t(n)) == 0
        print("launch", cu.cuGraphLaunch(ge, st), cu.cuStreamSynchronize(st))
        dst = (ctypes.c_ubyte * n)()
        assert cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n)) == 0
        print("the graph's copy", "same" if bytes(dst) == bytes(src) else "differs")
    for name in ["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"]:
        g = ctypes.c_void_p(1)
        dst = (ctypes.c_ubyte * n)()
        assert cu.cuStreamBeginCapture_v2(st, 0) == 0
        print(n, name, "captured", getattr(cu, name)(dst, p, ctypes.c_size_t(n), st), "end", cu.cuStreamEndCapture(st, ctypes.byref(g)))
        assert cu.cuGraphInstantiateWithFlags(ctypes.byref(ge), g, ctypes.c_ulonglong(0)) == 0
        print("launch", cu.cuGraphLaunch(ge, st), cu.cuStreamSynchronize(st))
        print("the program's copy", "same" if bytes(dst) == bytes(src) else "differs")
    print("after", cu.cuMemcpyHtoD_v2(p, src, ctypes.c_size_t(n)), cu.cuCtxSynchronize())
`
	want := ""
	for _, n := range []string{"4096", "1048576"} {
		want += n + " cuMemcpyHtoDAsync_v2 captured 0 end 0\nlaunch 0 0\nthe graph's copy same\n" +
			n + " cuMemcpyHtoDAsync_v2_ptsz captured 0 end 0\nlaunch 0 0\nthe graph's copy same\n" +
			n + " cuMemcpyDtoHAsync_v2 captured 0 end 0\nlaunch 0 0\nthe program's copy same\n" +
			n + " cuMemcpyDtoHAsync_v2_ptsz captured 0 end 0\nlaunch 0 0\nthe program's copy same\nafter 0 0\n"
	}
	for _, transport := range []string{"unix", "shm", "tcp"} {
		e := newEnv(t)
		r := e.remote(e.serve(transport), "python3", "-c", prog)
		if r.code != 0 || r.stdout != want {
			t.Errorf("over %s: exit %d, printed\n%s\nwant\n%s\n%s", transport, r.code, r.stdout, want, r.stderr)
		}
	}
}

// Over shm://, the program's pinned host memory is shared with the
// executor: copies to and from it, of every entry point, are the GPU's
// straight from or into it (fgrHeap*), the asynchronous ones queued without
// a round trip; what the program reads is the same as over a socket, where
// pinned memory is the client's alone. Freed memory is given back and its
// room reused; a forked child, which does not inherit it (as natively),
// frees a pointer to it harmlessly.
func TestRemotePinnedHostMemoryIsShared(t *testing.T) {
	prog := contextPrelude + `
st = ctypes.c_void_p()
p = ctypes.c_uint64()
n = 3 << 20
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
assert cu.cuStreamCreate(ctypes.byref(st), 1) == 0
def pinned(flags):
    h = ctypes.c_void_p()
    assert cu.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(n), flags) == 0
    return h
a, b = pinned(0), pinned(3)  # plain, and as cudart asks (portable, mapped)
c = ctypes.c_void_p()
assert cu.cuMemAllocHost_v2(ctypes.byref(c), ctypes.c_size_t(100)) == 0
ctypes.memmove(c, bytes(range(100)), 100)
ctypes.memmove(a, bytes((i * 7) % 256 for i in range(n)), n)
want = ctypes.string_at(a, n)
for up, stream in [("cuMemcpyHtoD_v2", ()), ("cuMemcpyHtoD_v2_ptds", ()), ("cuMemcpyHtoDAsync_v2", (st,)),
                   ("cuMemcpyHtoDAsync_v2_ptsz", (None,))]:
    for down, back in [("cuMemcpyDtoH_v2", ()), ("cuMemcpyDtoH_v2_ptds", ()), ("cuMemcpyDtoHAsync_v2", (st,)),
                       ("cuMemcpyDtoHAsync_v2_ptsz", (None,))]:
        assert cu.cuMemsetD8_v2(p, 0, ctypes.c_size_t(n)) == 0
        ctypes.memset(b, 0, n)
        r1 = getattr(cu, up)(p, a, ctypes.c_size_t(n), *stream)
        r2 = getattr(cu, down)(b, p, ctypes.c_size_t(n), *back)
        print(up, down, r1, r2, cu.cuCtxSynchronize(), "same" if ctypes.string_at(b, n) == want else "differs")
assert cu.cuMemcpyHtoD_v2(p, c, ctypes.c_size_t(100)) == 0
assert cu.cuMemcpyDtoH_v2(b, p, ctypes.c_size_t(100)) == 0
print("small", "same" if ctypes.string_at(b, 100) == bytes(range(100)) else "differs")
pid = os.fork()
if pid == 0:
    print("child frees", cu.cuMemFreeHost(a), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("freed", cu.cuMemFreeHost(a), cu.cuMemFreeHost(b), cu.cuMemFreeHost(c))
d = pinned(0)
print("again", "the first's room" if d.value == a.value else "elsewhere", cu.cuMemFreeHost(d))
`
	var outs []string
	for _, transport := range []string{"shm", "unix"} {
		e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
		r := e.remote(e.serve(transport), "python3", "-c", prog)
		if r.code != 0 {
			t.Fatalf("over %s: exit %d\n%s\n%s", transport, r.code, r.stdout, r.stderr)
		}
		trips := roundTrips(r)
		staged := trips["fgrStageUploadLast"] + trips["fgrStageDownload"]
		heap := trips["fgrHeapUploadWait"] + trips["fgrHeapDownloadWait"]
		if transport == "shm" {
			// Of the 16 pairs' 32 copies, the 16 synchronous ones wait
			// (and the small pair's two); the queued ones (8 uploads, 8
			// downloads) are no round trip.
			if staged != 0 || heap != 18 || trips["fgrHeapUpload"] != 0 || trips["fgrHeapDownload"] != 0 ||
				!strings.Contains(r.stderr, "fgrHeapUpload ") || !strings.Contains(r.stderr, "fgrHeapDownload ") {
				t.Errorf("over shm: %d staged, %d heap round trips (want 0 and 18), queued ones %d and %d\n%s", staged,
					heap, trips["fgrHeapUpload"], trips["fgrHeapDownload"], r.stderr)
			}
		} else if heap != 0 || trips["cuMemcpyHtoD_v2"] == 0 {
			t.Errorf("over %s: %d heap copies (want none)\n%s", transport, heap, r.stderr)
		}
		outs = append(outs, r.stdout)
	}
	want := ""
	for _, up := range []string{"cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"} {
		for _, down := range []string{"cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"} {
			want += up + " " + down + " 0 0 0 same\n"
		}
	}
	want += "small same\nchild frees 0\nfreed 0 0 0\n"
	if outs[0] != want+"again the first's room 0\n" {
		t.Errorf("over shm://\n%s\nwant\n%sagain the first's room 0", outs[0], want)
	}
	if !strings.HasPrefix(outs[1], want) {
		t.Errorf("over unix://\n%s\nwant\n%s", outs[1], want)
	}
}

// Over shm://, pinned memory of any size is device memory at the program's
// own address, as natively under unified addressing: the executor maps the
// heap where the client did, so a memset and a kernel write 1 MiB of it
// through its pointer and the program reads their writes after a
// synchronization, with no copy back, and a synchronous memset returns
// once done (the same as in a process with the GPU). Over a socket, such
// memory is kept on both sides once named as device memory: the program
// sees the same.
func TestRemotePinnedHeapIsDeviceMemory(t *testing.T) {
	prog := contextPrelude + `
mod, fill, d = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
slow = ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel fill builtin=fill\nkernel slow 200000\n") == 0
assert cu.cuModuleGetFunction(ctypes.byref(fill), mod, b"fill") == 0
assert cu.cuModuleGetFunction(ctypes.byref(slow), mod, b"slow") == 0
n = 1 << 20
assert cu.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(n), 3) == 0
r = cu.cuMemHostGetDevicePointer_v2(ctypes.byref(d), h, 0)
if r != 0:
    print("not reachable", r)
    sys.exit(0)
print("its device address is its own", d.value == h.value)
assert cu.cuMemsetD32_v2(d, 7, ctypes.c_size_t(n // 4)) == 0
p, v, k = ctypes.c_uint64(d.value + (n >> 1)), ctypes.c_uint32(42), ctypes.c_int(3)
params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in (p, v, k)])
assert cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, None, params, None) == 0
assert cu.cuCtxSynchronize() == 0
words = (ctypes.c_uint32 * (n // 4)).from_address(h.value)
print("read by the program:", words[0], words[n // 8 - 1], words[n // 8], words[n // 8 + 2], words[n // 8 + 3], words[n // 4 - 1])
ctypes.memset(h, 0, n)
# A synchronous memset of pinned memory returns once done, even behind a kernel.
assert cu.cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
assert cu.cuMemsetD8_v2(d, 5, ctypes.c_size_t(16)) == 0
print("after the program's own writes:", words[0], words[4], cu.cuMemFreeHost(h))
`
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	local := e.run("python3", "-c", prog)
	want := "its device address is its own True\nread by the program: 7 7 42 42 7 7\n" +
		"after the program's own writes: 84215045 0 0\n"
	if local.code != 0 || local.stdout != want {
		t.Fatalf("locally: exit %d, printed\n%s\nwant\n%s\n%s", local.code, local.stdout, want, local.stderr)
	}
	shm := e.remote(e.serve("shm"), "python3", "-c", prog)
	if shm.code != 0 || shm.stdout != want || roundTrips(shm)["fgrHostReadMany"] != 0 {
		t.Errorf("over shm://: exit %d, printed\n%s\nwant\n%s\n%s", shm.code, shm.stdout, want, shm.stderr)
	}
	e = newEnv(t)
	sock := e.remote(e.serve("unix"), "python3", "-c", prog)
	if sock.code != 0 || sock.stdout != want {
		t.Errorf("over unix://: exit %d, printed\n%s\n%s", sock.code, sock.stdout, sock.stderr)
	}
}

// The pinned heap is the client's memory too: the executor registers only
// page-aligned ranges inside it that overlap none registered, copies only
// within one registered range, and unregisters only what it registered; a
// refusal leaves the connection serving.
func TestRemotePinnedHeapRefusals(t *testing.T) {
	prog := contextPrelude + `
from ctypes import c_size_t, byref
m = ctypes.c_uint()
G = 1 << 30
assert cu.cuMemAlloc_v2(ctypes.byref(dev), c_size_t(1 << 20)) == 0
print("unaligned", cu.fgrHeapRegister(c_size_t(G + 100), c_size_t(4096), byref(m)))
print("past the end", cu.fgrHeapRegister(c_size_t(64 * G), c_size_t(4096), byref(m)),
      cu.fgrHeapRegister(c_size_t(64 * G - 4096), c_size_t(8192), byref(m)))
print("empty", cu.fgrHeapRegister(c_size_t(G), c_size_t(0), byref(m)))
print("registered", cu.fgrHeapRegister(c_size_t(G), c_size_t(1 << 20), byref(m)))
print("overlapping", cu.fgrHeapRegister(c_size_t(G + 4096), c_size_t(4096), byref(m)),
      cu.fgrHeapRegister(c_size_t(G - 4096), c_size_t(8192), byref(m)))
print("copies across its start and end", cu.fgrHeapUploadWait(dev, c_size_t(G - 4096), c_size_t(8192), None),
      cu.fgrHeapDownloadWait(c_size_t(G + (1 << 20) - 4096), dev, c_size_t(8192), None))
print("copies within", cu.fgrHeapUploadWait(dev, c_size_t(G), c_size_t(1 << 20), None),
      cu.fgrHeapDownloadWait(c_size_t(G + 4096), dev, c_size_t(4096), None))
print("into device memory not the connection's", cu.fgrHeapUploadWait(ctypes.c_uint64(dev.value + (1 << 20)), c_size_t(G), c_size_t(4096), None))
print("unregistering what is not", cu.fgrHeapUnregister(c_size_t(G + 4096)), cu.fgrHeapUnregister(c_size_t(3 * G)))
print("unregistered", cu.fgrHeapUnregister(c_size_t(G)), "then a copy", cu.fgrHeapUploadWait(dev, c_size_t(G), c_size_t(4096), None))
print("serving", cu.cuMemsetD8_v2(dev, 1, c_size_t(16)), cu.cuCtxSynchronize())
`
	want := "unaligned 1\npast the end 1 1\nempty 1\nregistered 0\noverlapping 1 1\ncopies across its start and end 1 1\n" +
		"copies within 0 0\ninto device memory not the connection's 1\nunregistering what is not 1 1\nunregistered 0 then a copy 1\nserving 0 0\n"
	newEnv(t).printsOverShm(t, prog, want)
}

// A connection registers at most 65,536 pinned allocations with the
// executor, which bounds what it keeps for them; one more is refused (the
// client would keep it as its own memory), and one unregistered makes room.
func TestRemotePinnedHeapBlocksBound(t *testing.T) {
	prog := contextPrelude + `
from ctypes import c_size_t, byref
m = ctypes.c_uint()
bad = [i for i in range(65536) if cu.fgrHeapRegister(c_size_t(i * 8192), c_size_t(4096), byref(m)) != 0]
print("65536 registered, refused:", len(bad))
print("one more", cu.fgrHeapRegister(c_size_t(65536 * 8192), c_size_t(4096), byref(m)))
print("one unregistered", cu.fgrHeapUnregister(c_size_t(8192)), "then", cu.fgrHeapRegister(c_size_t(65536 * 8192), c_size_t(4096), byref(m)))
`
	want := "65536 registered, refused: 0\none more 1\none unregistered 0 then 0\n"
	newEnv(t).printsOverShm(t, prog, want)
}

// Over shm://, copies to and from pinned memory captured into a graph read
// and write the program's memory at each launch, as natively: what the
// program writes between two launches is what the second one uploads.
func TestRemotePinnedCopiesCapturedAsNatively(t *testing.T) {
	prog := contextPrelude + `
st, g, ge = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
n = 1 << 20
a, b = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(n)) == 0
assert cu.cuMemHostAlloc(ctypes.byref(a), ctypes.c_size_t(n), 0) == 0
assert cu.cuMemHostAlloc(ctypes.byref(b), ctypes.c_size_t(n), 0) == 0
assert cu.cuStreamCreate(ctypes.byref(st), 1) == 0
assert cu.cuStreamBeginCapture_v2(st, 0) == 0
print("captured", cu.cuMemcpyHtoDAsync_v2(dev, a, ctypes.c_size_t(n), st), cu.cuMemcpyDtoHAsync_v2(b, dev, ctypes.c_size_t(n), st),
      "end", cu.cuStreamEndCapture(st, ctypes.byref(g)))
assert cu.cuGraphInstantiateWithFlags(ctypes.byref(ge), g, ctypes.c_ulonglong(0)) == 0
for v in (3, 9):
    ctypes.memset(a, v, n)
    print("launch", cu.cuGraphLaunch(ge, st), cu.cuStreamSynchronize(st), "the program reads", ctypes.string_at(b, 1)[0], ctypes.string_at(b.value + n - 1, 1)[0])
`
	e := newEnv(t)
	local := e.run("python3", "-c", prog)
	want := "captured 0 0 end 0\nlaunch 0 0 the program reads 3 3\nlaunch 0 0 the program reads 9 9\n"
	if local.code != 0 || local.stdout != want {
		t.Fatalf("locally: exit %d, printed\n%s\nwant\n%s\n%s", local.code, local.stdout, want, local.stderr)
	}
	e.printsOverShm(t, prog, want)
}

// Pinned memory the heap has no room for is the program's own, copied as
// pageable memory is: a 63 GiB allocation (pages untouched, and the
// server let pin that much) leaves too little of the 64 GiB heap for a
// 2 GiB one, whose copies still arrive.
func TestRemotePinnedHeapFull(t *testing.T) {
	prog := contextPrelude + `
big, other = ctypes.c_void_p(), ctypes.c_void_p()
n = 1 << 20
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(n)) == 0
print("63 GiB", cu.cuMemHostAlloc(ctypes.byref(big), ctypes.c_size_t(63 << 30), 0))
print("2 GiB more", cu.cuMemHostAlloc(ctypes.byref(other), ctypes.c_size_t(2 << 30), 0), other.value - big.value >= (63 << 30) or other.value < big.value)
ctypes.memset(other, 5, n)
assert cu.cuMemcpyHtoD_v2(dev, other, ctypes.c_size_t(n)) == 0
ctypes.memset(other, 0, n)
assert cu.cuMemcpyDtoH_v2(other, dev, ctypes.c_size_t(n)) == 0
print("copied", ctypes.string_at(other, n) == bytes([5]) * n, cu.cuMemFreeHost(other), cu.cuMemFreeHost(big))
`
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	r := e.remote(e.serve("shm", "--pinned-max", "100GiB"), "python3", "-c", prog)
	want := "63 GiB 0\n2 GiB more 0 True\ncopied True 0 0\n"
	trips := roundTrips(r)
	if r.code != 0 || r.stdout != want || trips["fgrHeapRegister"] != 1 || trips["fgrStageUploadLast"] == 0 {
		t.Errorf("exit %d, printed\n%s\nwant\n%s(one heap allocation, the other's copies staged)\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// pinnedRoundTrip allocates 1 MiB of pinned memory and copies it to the
// device and back; it prints "pinned 0\ncopied 0 True 0\n".
const pinnedRoundTrip = contextPrelude + `
n = 1 << 20
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(n)) == 0
print("pinned", cu.cuMemHostAlloc(ctypes.byref(h), ctypes.c_size_t(n), 0))
ctypes.memset(h, 5, n)
assert cu.cuMemcpyHtoD_v2(dev, h, ctypes.c_size_t(n)) == 0
ctypes.memset(h, 0, n)
print("copied", cu.cuMemcpyDtoH_v2(h, dev, ctypes.c_size_t(n)), ctypes.string_at(h, n) == bytes([5]) * n, cu.cuMemFreeHost(h))
`

// A client that cannot map the pinned heap (an address-space limit of
// 16 GiB here) says so and goes on without it: its pinned memory is its own,
// copied as pageable memory is.
func TestRemoteWithoutPinnedHeap(t *testing.T) {
	prog := pinnedRoundTrip
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	r := e.remote(e.serve("shm"), "bash", "-c", `ulimit -v 16777216 && exec python3 -c "$1"`, "limited", prog)
	if r.code != 0 || r.stdout != "pinned 0\ncopied 0 True 0\n" || roundTrips(r)["fgrHeapRegister"] != 0 ||
		!strings.Contains(r.stderr, "no pinned heap shared with") {
		t.Errorf("exit %d, printed\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// flexgv serve --pinned-max bounds the pinned host memory a connection's
// executor registers (server-side: a client cannot pin more of the
// server's memory): past it, pinned memory is the program's own and its
// copies still arrive; what is freed makes room again. A bad size is
// refused.
func TestRemotePinnedHeapLimit(t *testing.T) {
	prog := contextPrelude + `
n = 2 << 20
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(n)) == 0
def pinned():
    p = ctypes.c_void_p()
    assert cu.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(n), 0) == 0
    ctypes.memset(p, 7, n)
    assert cu.cuMemcpyHtoD_v2(dev, p, ctypes.c_size_t(n)) == 0
    ctypes.memset(p, 0, n)
    assert cu.cuMemcpyDtoH_v2(p, dev, ctypes.c_size_t(n)) == 0
    return p, ctypes.string_at(p, n) == bytes([7]) * n
a, ok1 = pinned()
b, ok2 = pinned()
print("copied", ok1, ok2, "freed", cu.cuMemFreeHost(a))
c, ok3 = pinned()
print("after", ok3, cu.cuMemFreeHost(b), cu.cuMemFreeHost(c))
`
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	r := e.remote(e.serve("shm", "--pinned-max", "3MiB"), "python3", "-c", prog)
	trips := roundTrips(r)
	// a and c in the heap, b the program's own (staged copies).
	if r.code != 0 || r.stdout != "copied True True freed 0\nafter True 0 0\n" || trips["fgrHeapRegister"] != 3 ||
		trips["fgrHeapUploadWait"] != 2 || trips["fgrStageUploadLast"] != 1 {
		t.Errorf("exit %d, printed\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, bad := range []string{"lots", "-1MiB", "1.5B"} {
		r := e.run("flexgv", "serve", "--listen", "unix://"+filepath.Join(e.dir, "p.sock"), "--pinned-max", bad)
		if r.code != 2 || !strings.Contains(r.stderr, "--pinned-max: \""+bad+"\" is not a size") {
			t.Errorf("--pinned-max %s: exit %d\n%s", bad, r.code, r.stderr)
		}
	}
}

// Threads allocating, using and freeing pinned memory at once over shm://
// each get their own bytes back.
func TestRemotePinnedHeapThreads(t *testing.T) {
	prog := contextPrelude + `
import threading, random
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(8 << 22)) == 0
bad = []
def work(k):
    cu.cuCtxSetCurrent(ctx)
    rnd = random.Random(k)
    d = ctypes.c_uint64(dev.value + (k << 22))
    for i in range(40):
        n = rnd.randrange(1 << 16, 1 << 22)
        p = ctypes.c_void_p()
        if cu.cuMemHostAlloc(ctypes.byref(p), ctypes.c_size_t(n), 3) != 0:
            bad.append("alloc"); return
        ctypes.memset(p, k * 40 + i, n)
        # (an asynchronous copy from pinned memory reads it when it runs)
        r = cu.cuMemcpyHtoDAsync_v2(d, p, ctypes.c_size_t(n), None) or cu.cuStreamSynchronize(None)
        ctypes.memset(p, 255, n)
        r2 = cu.cuMemcpyDtoH_v2(p, d, ctypes.c_size_t(n))
        if r or r2 or ctypes.string_at(p, n) != bytes([k * 40 + i]) * n:
            bad.append((k, i, r, r2))
        cu.cuMemFreeHost(p)
ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
for t in ts: t.start()
for t in ts: t.join()
print("wrong", bad)
`
	e := newEnv(t)
	r := e.remote(e.serve("shm"), "python3", "-c", prog)
	if r.code != 0 || r.stdout != "wrong []\n" {
		t.Errorf("exit %d, printed\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// A copy of pinned memory over two allocations, or past one's end, is no
// single allocation's: over shm:// it goes as from pageable memory and
// arrives whole, as locally.
func TestRemotePinnedCopyAcrossAllocations(t *testing.T) {
	prog := contextPrelude + `
n = 1 << 20
a, b = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(2 * n)) == 0
assert cu.cuMemHostAlloc(ctypes.byref(a), ctypes.c_size_t(n), 0) == 0
assert cu.cuMemHostAlloc(ctypes.byref(b), ctypes.c_size_t(n), 0) == 0
if b.value != a.value + n:
    print("not adjacent"); sys.exit(0)
ctypes.memset(a, 1, n)
ctypes.memset(b, 2, n)
print("across", cu.cuMemcpyHtoD_v2(dev, a, ctypes.c_size_t(2 * n)))
ctypes.memset(a, 0, 2 * n)
print("back", cu.cuMemcpyDtoH_v2(a, dev, ctypes.c_size_t(2 * n)), ctypes.string_at(a, 2 * n) == bytes([1]) * n + bytes([2]) * n)
`
	e := newEnv(t, "FLEXGV_REMOTE_LOG=calls")
	r := e.remote(e.serve("shm"), "python3", "-c", prog)
	if r.code != 0 || r.stdout != "across 0\nback 0 True\n" || roundTrips(r)["fgrStageUploadLast"] == 0 {
		t.Errorf("exit %d, printed\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// An executor that cannot map the pinned heap (an address-space limit of
// 8 GiB more than the server had when it started them) says so and serves
// on: the program's pinned memory is its own, its copies still arrive.
func TestRemoteExecutorWithoutPinnedHeap(t *testing.T) {
	prog := pinnedRoundTrip
	e := newEnv(t)
	s := e.serve("shm")
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	m := regexp.MustCompile(`VmSize:\s+(\d+) kB`).FindSubmatch(status)
	if err != nil || m == nil {
		t.Fatalf("the server's size: %v", err)
	}
	kb, _ := strconv.ParseUint(string(m[1]), 10, 64)
	limit := unix.Rlimit{Cur: kb<<10 + 8<<30, Max: kb<<10 + 8<<30}
	if err := unix.Prlimit(s.cmd.Process.Pid, unix.RLIMIT_AS, &limit, nil); err != nil {
		t.Fatal(err)
	}
	r := e.remote(s, "python3", "-c", prog)
	if r.code != 0 || r.stdout != "pinned 0\ncopied 0 True 0\n" || !strings.Contains(s.Log(), "cannot map the pinned heap") {
		t.Errorf("exit %d, printed\n%s\n%s\nthe server said:\n%s", r.code, r.stdout, r.stderr, s.Log())
	}
}

// A launch whose parameters come packed in one buffer (extra:
// CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE), through cuLaunchKernel and
// cuLaunchKernelEx, runs remotely as locally; both parameters and a
// buffer, or a buffer without its size, are refused, as locally; an extra
// with other entries is not supported remotely, and said.
func TestRemoteLaunchExtra(t *testing.T) {
	prog := contextPrelude + `
import struct
mod, fill = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), b"FLEXGV-SIM-MODULE\nkernel fill builtin=fill\n") == 0
assert cu.cuModuleGetFunction(ctypes.byref(fill), mod, b"fill") == 0
assert cu.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(64)) == 0
def extra(v, n, *more):
    buf = ctypes.create_string_buffer(struct.pack("<QIi", dev.value, v, n))
    size = ctypes.c_size_t(16)
    keep.extend([buf, size])
    return (ctypes.c_void_p * 7)(1, ctypes.cast(buf, ctypes.c_void_p), 2, ctypes.cast(ctypes.byref(size), ctypes.c_void_p), *more, 0)
keep = []
def show(what, r):
    back = (ctypes.c_uint32 * 16)()
    assert cu.cuCtxSynchronize() == 0 and cu.cuMemcpyDtoH_v2(back, dev, ctypes.c_size_t(64)) == 0
    print(what, r, list(back)[:6])
assert cu.cuMemsetD8_v2(dev, 0, ctypes.c_size_t(64)) == 0
show("launch", cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, None, None, extra(7, 3)))
show("per-thread", cu.cuLaunchKernel_ptsz(fill, 1, 1, 1, 32, 1, 1, 0, None, None, extra(8, 4)))
class Config(ctypes.Structure):
    _fields_ = [("g", ctypes.c_uint * 3), ("b", ctypes.c_uint * 3), ("shm", ctypes.c_uint), ("s", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("n", ctypes.c_uint)]
cfg = Config((1, 1, 1), (32, 1, 1), 0, None, None, 0)
show("launch ex", cu.cuLaunchKernelEx(ctypes.byref(cfg), fill, None, extra(9, 5)))
v, n = ctypes.c_uint64(dev.value), ctypes.c_uint32(1)
params = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.byref(v), ctypes.c_void_p), ctypes.cast(ctypes.byref(n), ctypes.c_void_p), ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
show("both", cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, None, params, extra(1, 6)))
no_size = (ctypes.c_void_p * 3)(1, ctypes.cast(keep[0], ctypes.c_void_p), 0)
show("no size", cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, None, None, no_size))
if os.environ.get("FLEXGV_REMOTE"):
    print("another entry", cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, None, None, extra(1, 6, 3, 0)))
`
	e := newEnv(t)
	local := e.run("python3", "-c", prog)
	want := "launch 0 [7, 7, 7, 0, 0, 0]\nper-thread 0 [8, 8, 8, 8, 0, 0]\nlaunch ex 0 [9, 9, 9, 9, 9, 0]\n" +
		"both 1 [9, 9, 9, 9, 9, 0]\nno size 1 [9, 9, 9, 9, 9, 0]\n"
	if local.code != 0 || local.stdout != want {
		t.Fatalf("locally: exit %d, printed\n%s\nwant\n%s\n%s", local.code, local.stdout, want, local.stderr)
	}
	for _, transport := range []string{"unix", "shm", "tcp"} {
		e := newEnv(t)
		r := e.remote(e.serve(transport), "python3", "-c", prog)
		if r.code != 0 || r.stdout != want+"another entry 801\n" ||
			!strings.Contains(r.stderr, "an extra entry other than the parameter buffer and its size") {
			t.Errorf("over %s: exit %d, printed\n%s\n%s", transport, r.code, r.stdout, r.stderr)
		}
	}
}

// Over shm://, a frame larger than a ring (4 MiB each way) streams through
// it, wrapping around, and arrives whole.
func TestRemoteSharedMemoryLargeFrames(t *testing.T) {
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
ctx, p = ctypes.c_void_p(), ctypes.c_uint64()
n = (9 << 20) + 5
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
src = (ctypes.c_ubyte * n).from_buffer(bytearray((i * 13 + i // 65536) % 256 for i in range(n)))
dst = (ctypes.c_ubyte * n)()
for _ in range(3):
    assert cu.cuMemcpyHtoD_v2(p, src, ctypes.c_size_t(n)) == 0
    assert cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n)) == 0
print("same" if bytes(dst) == bytes(src) else "differ")
`
	e := newEnv(t)
	s := e.serve("shm")
	if r := e.remote(s, "python3", "-c", prog); r.code != 0 || r.stdout != "same\n" {
		t.Errorf("exit %d %q\n%s", r.code, r.stdout, r.stderr)
	}
}

// Streams and events are named by the client (shadow handles): creating
// one is queued, used at once it works, and a creation the driver refuses
// answers at the next synchronization, as a queued call's error does; the
// name it was given then names nothing (locally the stream is left NULL).
func TestRemoteShadowHandles(t *testing.T) {
	prog := `
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
ctx, p, s, bad, ev = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096)) == 0
print("stream", cu.cuStreamCreate(ctypes.byref(s), 1), "event", cu.cuEventCreate(ctypes.byref(ev), 0))
print("memset", cu.cuMemsetD8Async(p, 7, ctypes.c_size_t(4096), s), "record", cu.cuEventRecord(ev, s))
print("sync", cu.cuStreamSynchronize(s), cu.cuEventSynchronize(ev))
print("bad stream", cu.cuStreamCreate(ctypes.byref(bad), 0xff))
print("sync", cu.cuCtxSynchronize())
print("on it", cu.cuStreamQuery(bad))
print("destroy", cu.cuEventDestroy_v2(ev), cu.cuStreamDestroy_v2(s), cu.cuCtxSynchronize())
`
	e := newEnv(t)
	s := e.serve("unix")
	local := e.runIn(filepath.Join(build, "sim"), "python3", "-c", prog)
	want := "stream 0 event 0\nmemset 0 record 0\nsync 0 0\nbad stream 1\nsync 0\non it 0\ndestroy 0 0 0\n" // a NULL stream is left
	if local.code != 0 || local.stdout != want {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	r := e.remote(s, "python3", "-c", prog)
	want = "stream 0 event 0\nmemset 0 record 0\nsync 0 0\nbad stream 0\nsync 1\non it 400\ndestroy 0 0 0\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("remotely: exit %d\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
}

// Module and library options: those whose value is the word itself reach
// the server's driver (an optimization level it refuses is refused), the
// info log comes back as the server's driver wrote it, other options
// pointing into the program stay behind, an unknown one is refused.
// Launch attributes travel (a cluster that does not divide the grid is
// refused by the server's driver; a completion event is the server's own
// for the client's name of it). Pointer attributes come from the server. A
// library's kernel launched as a function gets its parameters.
func TestRemoteModuleOptions(t *testing.T) {
	e := newEnv(t)
	local := e.run("optclient")
	if local.code != 0 || !strings.Contains(local.stdout, `log: "simulated GPU: module loaded", 29 bytes`) {
		t.Fatalf("locally: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	s := e.serve("unix")
	got := e.remote(s, "optclient")
	want := `level 3: CUDA_SUCCESS
level 9: CUDA_ERROR_INVALID_VALUE
with a log: CUDA_SUCCESS
log: "simulated GPU: module loaded", 29 bytes
with a small log: CUDA_SUCCESS
small log: "simulat", 8 bytes
option 999: CUDA_ERROR_NOT_SUPPORTED
library: CUDA_SUCCESS
cluster 2 of 4 blocks: CUDA_SUCCESS
active clusters: CUDA_SUCCESS 20
potential cluster size: CUDA_SUCCESS 8
cluster 2 of 3 blocks: CUDA_ERROR_INVALID_VALUE
completion event: CUDA_SUCCESS CUDA_SUCCESS, then CUDA_SUCCESS
device memory: CUDA_SUCCESS CUDA_SUCCESS CUDA_SUCCESS, type 2, starts at the allocation, 4096 bytes
host memory: CUDA_ERROR_INVALID_VALUE
host memory, both: CUDA_SUCCESS, type 0, 7 bytes
kernel's layout asked of it as a function: CUDA_ERROR_INVALID_HANDLE
library kernel: 11 22 33 44
cache: kernel CUDA_SUCCESS, function CUDA_SUCCESS, a preference of 7 CUDA_ERROR_INVALID_VALUE, context CUDA_SUCCESS CUDA_SUCCESS 3
`
	if got.code != 0 || got.stdout != want {
		t.Errorf("remotely: exit %d\n%s\nwant\n%s", got.code, got.stdout, want)
	}
	if !strings.Contains(got.stderr, "cuModuleLoadDataEx: JIT option 999 cannot be sent") {
		t.Errorf("the unknown option was not said:\n%s", got.stderr)
	}
	if strings.Contains(got.stderr, "CUDA_ERROR_INVALID_VALUE") {
		t.Errorf("errors said without FLEXGV_REMOTE_LOG:\n%s", got.stderr)
	}
	// FLEXGV_REMOTE_LOG=errors says every call the server refused and every
	// entry point a lookup did not find; another value is refused.
	e.extra = append(e.extra, "FLEXGV_REMOTE_LOG=errors")
	logged := e.remote(s, "optclient")
	for _, want := range []string{"flexgv remote: cuModuleLoadDataEx: CUDA_ERROR_INVALID_VALUE\n",
		"flexgv remote: cuCtxSynchronize: CUDA_ERROR_INVALID_VALUE\n"} {
		if !strings.Contains(logged.stderr, want) {
			t.Errorf("FLEXGV_REMOTE_LOG=errors: no %q in\n%s", want, logged.stderr)
		}
	}
	lookup := e.remote(s, "python3", "-c", `import ctypes
cu = ctypes.CDLL("libcuda.so.1")
p = ctypes.c_void_p()
print(cu.cuInit(0), cu.cuGetProcAddress_v2(b"cuNoSuchCall", ctypes.byref(p), 13000, 0, None))`)
	if lookup.stdout != "0 500\n" || !strings.Contains(lookup.stderr, `cuGetProcAddress("cuNoSuchCall", 13000): CUDA_ERROR_NOT_FOUND`) {
		t.Errorf("a lookup that found nothing: %q\n%s", lookup.stdout, lookup.stderr)
	}
	e.extra[len(e.extra)-1] = "FLEXGV_REMOTE_LOG=all"
	bad := e.remote(s, "python3", "-c", "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))")
	if bad.stdout != "46\n" || !strings.Contains(bad.stderr, "FLEXGV_REMOTE_LOG=all: the settings are errors, calls and trace") {
		t.Errorf("FLEXGV_REMOTE_LOG=all: %q\n%s", bad.stdout, bad.stderr)
	}
}
