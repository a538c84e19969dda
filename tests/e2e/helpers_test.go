// Package e2e runs the built flexgv CLI, shim, simulated GPU and test clients
// (make all) the way a user would, and checks what they see.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexgv/flexgv/internal/trace"
	"golang.org/x/sys/unix"
)

var build string

func TestMain(m *testing.M) {
	build = os.Getenv("FLEXGV_BUILD")
	if build == "" {
		build, _ = filepath.Abs(filepath.Join("..", "..", "build"))
	}
	if _, err := os.Stat(filepath.Join(build, "bin", "flexgv")); err != nil {
		os.Stderr.WriteString("e2e: " + build + " has no flexgv build; run make first (make test does)\n")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// env is one isolated simulated machine: its own GPU state file.
type env struct {
	t     *testing.T
	dir   string
	extra []string
}

func newEnv(t *testing.T, extra ...string) *env {
	return &env{t: t, dir: memDir(t), extra: extra}
}

// memDir is a test's folder in shared memory, as the node keeps its state
// (/dev/shm): a file on disk would let the host's other I/O stall a
// process on a page fault, which no clock of the simulated GPU can tell
// from the program's own pause. On a host with little shared memory, the
// test's temporary folder.
func memDir(t *testing.T) string {
	var fs unix.Statfs_t
	if unix.Statfs("/dev/shm", &fs) != nil || fs.Bavail*uint64(fs.Bsize) < 1<<30 || unix.Access("/dev/shm", unix.W_OK) != nil {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "flexgv-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (e *env) environ(libPath string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LD_PRELOAD" || k == "LD_LIBRARY_PATH" || strings.HasPrefix(k, "FLEXGV_") {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "FLEXGV_SIM_STATE="+filepath.Join(e.dir, "gpu.state"), "FLEXGV_STATE_DIR="+filepath.Join(e.dir, "tenants"),
		"XDG_CACHE_HOME="+filepath.Join(e.dir, "cache"), "TMPDIR="+e.dir)
	if libPath != "" {
		out = append(out, "LD_LIBRARY_PATH="+libPath)
	}
	return append(out, e.extra...)
}

// pyContext begins a Python test program: the driver as cu, device 0's
// primary context current as ctx, os imported.
const pyContext = `
import ctypes, os
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
`

// bin is the path of a built program; other names (sh, python3, paths)
// are left to the PATH lookup.
func bin(name string) string {
	if name == "flexgv" {
		return filepath.Join(build, "bin", "flexgv")
	}
	if strings.ContainsRune(name, '/') {
		return name
	}
	if p := filepath.Join(build, "tests", name); fileExists(p) {
		return p
	}
	return name
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// result is what a run showed its user.
type result struct {
	stdout, stderr string
	code           int
}

func (e *env) runIn(libPath, name string, args ...string) result {
	e.t.Helper()
	cmd := exec.Command(bin(name), args...)
	cmd.Env = e.environ(libPath)
	return runCmd(e.t, cmd)
}

// runCmd runs cmd to its end and returns what it showed (128+N for a
// program ended by signal N).
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return result{out.String(), errb.String(), code}
}

// run runs with the simulated GPU on the library path.
func (e *env) run(name string, args ...string) result {
	return e.runIn(filepath.Join(build, "sim"), name, args...)
}

// trace runs a client under flexgv trace --json and returns the summary.
func (e *env) trace(flags []string, client string, args ...string) (trace.Summary, result) {
	e.t.Helper()
	out := filepath.Join(e.dir, "summary.json")
	argv := append([]string{"trace", "--json", "-o", out}, flags...)
	argv = append(argv, "--", bin(client))
	r := e.run("flexgv", append(argv, args...)...)
	data, err := os.ReadFile(out)
	if err != nil {
		e.t.Fatalf("no summary: %v\nstderr: %s", err, r.stderr)
	}
	var s trace.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		e.t.Fatalf("bad summary JSON: %v\n%s", err, data)
	}
	return s, r
}

// expects parses the "expect NAME COUNT" lines a client prints.
func expects(t *testing.T, stdout string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "expect" {
			n, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad expect line %q", sc.Text())
			}
			m[f[1]] = n
		}
	}
	if len(m) == 0 {
		t.Fatalf("client printed no expectations:\n%s", stdout)
	}
	return m
}

// calls is what the summary counted for one entry point.
func calls(s trace.Summary, name string) uint64 {
	for _, a := range s.APIs {
		if a.Name == name {
			return a.Calls
		}
	}
	return 0
}

// checkCounts asserts the trace counted exactly what the client did.
func checkCounts(t *testing.T, s trace.Summary, want map[string]uint64) {
	t.Helper()
	for name, n := range want {
		if got := calls(s, name); got != n {
			t.Errorf("%s: traced %d calls, the program made %d", name, got, n)
		}
	}
}

// long marks a test that takes many seconds: go test -short (make check)
// skips it, make test runs it.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("takes many seconds: make test runs it, make check (go test -short) does not")
	}
}

// endsWithin waits for cmd, started, to end, failing the test where it
// still runs d after what happened (saying what it printed on stderr).
func endsWithin(t *testing.T, cmd *exec.Cmd, d time.Duration, after string, stderr func() string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still runs %v after %s\n%s", filepath.Base(cmd.Path), d, after, stderr())
	}
}
