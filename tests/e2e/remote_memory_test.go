package e2e

import (
	"fmt"
	"io"
	"os"
	osuser "os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexgv/flexgv/internal/tenant"
)

// procStatus is a field of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	kb, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return kb << 10
}

// An executor's host memory follows what calls can legitimately carry: a
// result larger than a call of its kind returns is refused before memory
// is made for it, a download's result only once its source was checked; a
// large frame's memory is given back once it was served; a frame longer
// than its operation carries is refused before it is read.
func TestRemoteExecutorMemoryBounded(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	c := dialWire(t, p, s)
	c.setup(4096)
	pid, _ := strconv.Atoi(s.waitLog(`connected: executor pid (\d+)`, 10*time.Second)[1])
	const invalidValue = 1
	peak := procStatus(t, pid, "VmPeak")

	r, res := c.call("cuDeviceGetPCIBusId", w{}.u64(1<<30).u64(0).u8(1))
	if r != invalidValue || len(res) != 1 || res[0] != 0 {
		t.Errorf("cuDeviceGetPCIBusId with len 1 GiB: error %d, results %x; want %d and none", r, res, invalidValue)
	}
	if id := out(t, c.must("cuDeviceGetPCIBusId", w{}.u64(64).u64(0).u8(1))); len(id) != 64 {
		t.Errorf("cuDeviceGetPCIBusId with len 64: %q", id)
	}
	if r, _ := c.call("cuMemcpyDtoH_v2", w{}.u64(0x10000).u64(512<<20).u8(1)); r != invalidValue {
		t.Errorf("a 512 MiB download from memory not the connection's: error %d", r)
	}
	if grown := procStatus(t, pid, "VmPeak") - peak; grown > 64<<20 {
		t.Errorf("the executor's address space grew by %d MiB for refused results", grown>>20)
	}

	// A 1 GiB upload to memory not the connection's: read, refused, and
	// its memory given back.
	rss := procStatus(t, pid, "VmRSS")
	t0 := time.Now()
	defer func() { t.Logf("1 GiB took %v", time.Since(t0)) }()
	data := make([]byte, 1<<30)
	if r, _ := c.call("cuMemcpyHtoD_v2", append(w{}.u64(0x10000).u64(1<<30).u8(1).u64(1<<30), data...)); r != invalidValue {
		t.Errorf("a 1 GiB upload to memory not the connection's: error %d", r)
	}
	data = nil
	c.must("cuCtxSynchronize", w{}) // answered once the frame before was done with
	if grown := int64(procStatus(t, pid, "VmRSS")) - int64(rss); grown > 64<<20 {
		t.Errorf("the executor holds %d MiB more after a refused 1 GiB frame", grown>>20)
	}

	// 1 GiB announced for an operation without a buffer: refused unread.
	c.conn.Write(w{}.u32(1 << 30).u16(p.ops["cuCtxSynchronize"]).u16(0).u32(0).u64(c.ctx))
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if rest, err := io.ReadAll(c.conn); err != nil || len(rest) != 0 {
		t.Errorf("after a 1 GiB header for cuCtxSynchronize: %x %v, want the connection closed", rest, err)
	}
	s.waitLog(`closing the connection: a frame of 1073741824 bytes for cuCtxSynchronize, which carries at most 1048576`, 10*time.Second)
}

// What a connection made in its primary context goes with the context's
// reset, as the driver frees it: the executor refuses its names from
// then on and never hands the driver a freed handle or address, and the
// context retained again serves as before.
func TestRemoteHandlesForgottenWithTheirContext(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	c := dialWire(t, p, s)
	mem := c.setup(4096)
	const stream, event = 1<<46 | 1<<4, 1<<46 | 2<<4 // names the client gives (wire.h: FGR_SHADOW_TAG)
	c.queue("cuStreamCreate", w{}.u64(0).u64(stream))
	c.queue("cuEventCreate", w{}.u64(0).u64(event))
	c.must("cuEventRecord", w{}.u64(event).u64(stream))
	c.must("cuStreamSynchronize", w{}.u64(stream))
	c.must("cuDevicePrimaryCtxReset_v2", w{}.u64(0))
	c.ctx = 0
	c.own = c.handle("cuDevicePrimaryCtxRetain", w{}.u64(0).u8(1))
	c.ctx = c.own
	const invalidValue, invalidContext = 1, 201 // the driver's answers for what a reset context held
	for _, u := range []struct {
		what, op string
		args     w
		want     uint32
	}{
		{"stream", "cuStreamSynchronize", w{}.u64(stream), invalidContext},
		{"event", "cuEventQuery", w{}.u64(event), invalidContext},
		{"event", "cuEventRecord", w{}.u64(event).u64(0), invalidContext},
		{"memory", "cuMemcpyDtoH_v2", w{}.u64(mem).u64(64).u8(1), invalidValue},
	} {
		if r, _ := c.call(u.op, u.args); r != u.want {
			t.Errorf("%s of the reset context, %s: error %d, want %d", u.what, u.op, r, u.want)
		}
	}
	s.waitLog(`refusing cuStreamSynchronize: hStream=0x[0-9a-f]+ went with its context, a handle \(error 201;`, 10*time.Second)
	// What the context has now works.
	fresh := c.handle("cuMemAlloc_v2", w{}.u64(4096).u8(1))
	c.queue("cuStreamCreate", w{}.u64(0).u64(stream+16))
	c.must("cuStreamSynchronize", w{}.u64(stream+16))
	if r := c.put(fresh, "after the reset"); r != 0 {
		t.Errorf("a copy to memory allocated after the reset: error %d", r)
	}
	c.conn.Close()
	s.quiesce()
	if strings.Contains(s.Log(), "signal:") {
		t.Errorf("the executor crashed:\n%s", s.Log())
	}
}

// Mapped pinned memory is forgotten with the context it was made in: after
// the primary context's reset (the driver frees it then) a read of it is
// refused, never a read of freed memory.
func TestRemoteMappedMemoryForgottenWithItsContext(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix")
	c := dialWire(t, p, s)
	c.setup(4096)
	ptr := c.handle("fgrHostMapped", w{}.u64(4096).u8(1))
	read := func() uint32 {
		r, _ := c.call("fgrHostReadMany", w{}.u64(1).u64(64).u8(1).u64(8).u64(ptr).u8(1).u64(8).u64(64).u8(1))
		return r
	}
	if r := read(); r != 0 {
		t.Fatalf("a read of mapped memory: error %d", r)
	}
	c.must("cuDevicePrimaryCtxReset_v2", w{}.u64(0))
	c.ctx = 0
	if r := read(); r != 1 {
		t.Errorf("a read of mapped memory after its context's reset: error %d, want CUDA_ERROR_INVALID_VALUE", r)
	}
	// Its room is given back: a new context maps as much as before.
	c.setup(4096)
	for i := 0; i < 16; i++ {
		c.handle("fgrHostMapped", w{}.u64(64<<10).u8(1))
	}
}

// A server run as root runs executors as an unprivileged user, nobody
// unless --executor-user names another (this host has no flexgv-executor);
// they gain no privilege by exec, have bounded processes and files and a
// temporary folder of their own, and still serve a program end to end,
// module images kept included. --executor-user root runs them as root,
// said at start; a user that does not exist or is root by another name is
// refused with why.
func TestRemoteExecutorUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run executors as another user")
	}
	if _, err := osuser.Lookup("flexgv-executor"); err == nil {
		t.Skip("this host has a flexgv-executor user: the default is not nobody")
	}
	p := readProtocol(t)
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2") // as blaslike needs
	s := e.serve("unix")                   // which makes the simulated GPU reachable
	c := dialWire(t, p, s)
	c.setup(4096)
	pid, _ := strconv.Atoi(s.waitLog(`connected: executor pid (\d+)`, 10*time.Second)[1])
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, want := range []string{`(?m)^Uid:\s+65534\s+65534\s+65534\s+65534$`, `(?m)^Gid:\s+65534\s`, `(?m)^Groups:\s*$`, `(?m)^NoNewPrivs:\s+1$`} {
		if !regexp.MustCompile(want).Match(status) {
			t.Errorf("executor %d: no %s in its status:\n%s", pid, want, status)
		}
	}
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, want := range []string{`Max processes\s+4096\s+4096`, `Max open files\s+4096\s+4096`} {
		if !regexp.MustCompile(want).Match(limits) {
			t.Errorf("executor %d: no %s in its limits:\n%s", pid, want, limits)
		}
	}
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	m := regexp.MustCompile("TMPDIR=([^\x00]+)").FindSubmatch(env)
	if m == nil {
		t.Fatalf("executor %d has no TMPDIR", pid)
	}
	if st, err := os.Stat(string(m[1])); err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("the executor's temporary folder %s: %v %v, want the executor user's, mode 0700", m[1], st, err)
	}
	c.conn.Close()
	s.quiesce()
	if _, err := os.Stat(string(m[1])); err == nil {
		t.Errorf("the executor's temporary folder %s outlived it", m[1])
	}

	// A program over TCP, served as nobody: the module image it sent is
	// kept in the root server's cache folder (under XDG_CACHE_HOME, mode
	// 0700), which the executor is given.
	tcp := e.serve("tcp")
	if r := e.remote(tcp, "blaslike"); r.code != 0 {
		t.Fatalf("a program with executors as nobody: exit %d\n%s\n%s", r.code, r.stderr, tcp.Log())
	}
	kept, _ := filepath.Glob(filepath.Join(e.dir, "cache", "flexgv", "modules", "open", "*"))
	if len(kept) == 0 || strings.Contains(tcp.Log(), "cannot keep") {
		t.Errorf("executors as nobody kept %v\n%s", kept, tcp.Log())
	}
	for _, k := range kept {
		if st, err := os.Stat(k); err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
			t.Errorf("kept image %s: %v, want nobody's", k, err)
		}
	}

	// Opting out: as root, said at start.
	asRoot := newEnv(t).serve("unix", "--executor-user", "root")
	if !strings.Contains(asRoot.Log(), "warning: executors run as root (--executor-user root)") {
		t.Errorf("--executor-user root said nothing:\n%s", asRoot.Log())
	}
	c = dialWire(t, p, asRoot)
	c.setup(4096)
	pid, _ = strconv.Atoi(asRoot.waitLog(`connected: executor pid (\d+)`, 10*time.Second)[1])
	if status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); !regexp.MustCompile(`(?m)^Uid:\s+0\s`).Match(status) {
		t.Errorf("with --executor-user root, executor %d:\n%s", pid, status)
	}
	for name, why := range map[string]string{"no-such-user-here": "no user no-such-user-here", "0": "user 0 is root"} {
		r := e.run("flexgv", "serve", "--listen", "unix://"+e.dir+"/z.sock", "--executor-user", name)
		if r.code != 2 || !strings.Contains(r.stderr, "--executor-user "+name+": "+why) {
			t.Errorf("--executor-user %s: exit %d %q", name, r.code, r.stderr)
		}
	}
}

// A tenant's executor runs as the unprivileged user too. It could not
// open its tenant file (the node's, root's, mode 0640): it is given the
// file open, twice (a description to map, one to lock its slot through),
// and its quota holds as under root. A tenant whose file is gone is still
// refused CUDA (TestRemoteTenantFailsClosed).
func TestRemoteTenantExecutorUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run executors as another user")
	}
	if _, err := osuser.Lookup("flexgv-executor"); err == nil {
		t.Skip("this host has a flexgv-executor user: the default is not nobody")
	}
	e := quotaEnv(t)
	tok := e.token("a")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "256MiB", "--ctx-mem", "64MiB")
	file := tenant.Path(e.stateDir(), "a")
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o640 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("tenant file %s: %v %v, want root's, mode 0640", file, st, err)
	}
	// Nor can it reach the file by its path.
	if err := os.Chmod(e.stateDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY", (256-64)*mib)
	if r := e.remoteAs(s, tok, "memclient", "exact"); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("memclient exact in tenant a as nobody: exit %d %q, want %q\n%s\n%s", r.code, r.stdout, want, r.stderr, s.Log())
	}
	s.waitLog(`tenant a: device 0 .*quota 256MiB.*refused with CUDA_ERROR_OUT_OF_MEMORY`, 10*time.Second)
	// Descriptors that are not the tenant file's are not used, and said.
	bad := quotaEnv(t, "FLEXGV_TENANT_FDS=1,2")
	r := bad.run("flexgv", "run", "--mem", "256MiB", "--ctx-mem", "64MiB", "--", bin("memclient"), "exact")
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stderr, "FLEXGV_TENANT_FDS=1,2 are not two descriptors of tenant file") {
		t.Errorf("with FLEXGV_TENANT_FDS=1,2: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	e.extra = append(e.extra, "FLEXGV_REMOTE_TOKEN_FILE="+tok)
	_, _, _, pid := startRemote(t, e, s, "holder", "64")
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if !regexp.MustCompile(`(?m)^Uid:\s+65534\s+65534\s+65534\s+65534$`).Match(status) {
		t.Errorf("tenant a's executor %d is not nobody's:\n%s", pid, status)
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	given := 0
	for _, fd := range fds {
		if to, _ := os.Readlink(fd); to == file {
			given++
		}
	}
	// One given description is mapped (its descriptor closed), the other
	// holds the slot's lock.
	maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if given != 1 || !strings.Contains(string(maps), file) {
		t.Errorf("tenant a's executor %d holds %d descriptors of %s, mapped: %v; want the one it locks through, and the mapping",
			pid, given, file, strings.Contains(string(maps), file))
	}
	if r := e.run("flexgv", "ps"); !strings.Contains(r.stdout, strconv.Itoa(pid)) {
		t.Errorf("flexgv ps does not list executor %d in tenant a:\n%s", pid, r.stdout)
	}
}

// Executors' temporary folders live in one folder of their server's. A
// server killed with SIGKILL leaves it behind; the next server to start
// removes it (the dead one no longer holds its lock), and never a live
// server's; a server that stops cleanly removes its own.
func TestRemoteServerLeavesNoTemporaryFolders(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	folders := func() []string {
		f, _ := filepath.Glob(filepath.Join(e.dir, "flexgv-serve-*"))
		return f
	}
	killed := e.serve("unix")
	c := dialWire(t, p, killed)
	c.setup(4096)
	killed.waitLog(`connected: executor pid`, 10*time.Second)
	left := folders()
	if inside, _ := filepath.Glob(filepath.Join(left[0], "executor-*")); len(left) != 1 || len(inside) != 1 {
		t.Fatalf("a server with one executor: folders %v, in the first %v", left, inside)
	}
	killed.cmd.Process.Kill()
	killed.cmd.Wait()
	c.conn.Close()

	live := e.serve("tcp")
	if now := folders(); len(now) != 1 || slices.Contains(now, left[0]) {
		t.Errorf("after a server killed with SIGKILL, the next one's start left %v (the dead one's was %s)", now, left[0])
	}
	mine := folders()
	second := e.serve("tcp")
	if now := folders(); len(now) != 2 || !slices.Contains(now, mine[0]) {
		t.Errorf("a second server's start removed the live one's folder: %v, the live one's %v", now, mine)
	}
	second.cmd.Process.Signal(syscall.SIGTERM)
	second.cmd.Wait()
	live.cmd.Process.Signal(syscall.SIGTERM)
	live.cmd.Wait()
	if now := folders(); len(now) != 0 {
		t.Errorf("servers stopped by SIGTERM left %v", now)
	}
}

// --executor-memory puts each executor in a cgroup v2 with that memory
// limit where the host offers one, and says at start why not where it
// does not; the server serves either way. Bad sizes are refused.
func TestRemoteExecutorMemoryLimit(t *testing.T) {
	p := readProtocol(t)
	e := newEnv(t)
	s := e.serve("unix", "--executor-memory", "1GiB")
	c := dialWire(t, p, s)
	c.setup(4096)
	pid, _ := strconv.Atoi(s.waitLog(`connected: executor pid (\d+)`, 10*time.Second)[1])
	if strings.Contains(s.Log(), "--executor-memory: executors' memory is not limited: ") {
		t.Logf("not limited here: %s", s.Log())
	} else {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		path := strings.TrimSpace(strings.TrimPrefix(string(cg), "0::"))
		if max, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "memory.max")); err != nil || strings.TrimSpace(string(max)) != "1073741824" {
			t.Errorf("executor %d in cgroup %s: memory.max %q %v, want 1073741824", pid, path, max, err)
		}
		// The cgroup goes with its executor.
		c.conn.Close()
		s.quiesce()
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", path)); err == nil {
			t.Errorf("executor %d's cgroup %s outlived it", pid, path)
		}
	}
	for _, bad := range []string{"0", "1MiB", "x"} {
		r := e.run("flexgv", "serve", "--listen", "unix://"+e.dir+"/m.sock", "--executor-memory", bad)
		if r.code != 2 || !strings.Contains(r.stderr, "--executor-memory: \""+bad+"\" is not a size of 64MiB or more") {
			t.Errorf("--executor-memory %s: exit %d %q", bad, r.code, r.stderr)
		}
	}
}
