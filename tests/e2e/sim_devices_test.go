package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// nvmlDevice is one device line of nvmlclient.
type nvmlDevice struct {
	uuid  string
	used  uint64
	procs map[int]uint64
}

func nvmlDevices(t *testing.T, e *env) []nvmlDevice {
	t.Helper()
	r := e.run("nvmlclient")
	if r.code != 0 {
		t.Fatalf("nvmlclient: %+v", r)
	}
	var devs []nvmlDevice
	for _, line := range strings.Split(r.stdout, "\n") {
		if !strings.HasPrefix(line, "device ") {
			continue
		}
		d := nvmlDevice{procs: map[int]uint64{}}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "uuid":
				d.uuid = v
			case "used":
				d.used, _ = strconv.ParseUint(v, 10, 64)
			case "procs":
				for _, p := range strings.Split(v, ",") {
					pid, used, ok := strings.Cut(p, ":")
					if ok {
						n, _ := strconv.Atoi(pid)
						d.procs[n], _ = strconv.ParseUint(used, 10, 64)
					}
				}
			}
		}
		devs = append(devs, d)
	}
	return devs
}

// held is a process started with a pipe on stdin that printed "ready".
type held struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	output string // what it printed up to "ready"
}

func (e *env) startHeld(extraEnv []string, name string, args ...string) *held {
	e.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(e.environ(filepath.Join(build, "sim")), extraEnv...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	var out strings.Builder
	rd := bufio.NewReader(stdout)
	for {
		line, err := rd.ReadString('\n')
		out.WriteString(line)
		if line == "ready\n" {
			break
		}
		if err != nil {
			cmd.Wait()
			e.t.Fatalf("%s %v did not get ready: %q, stderr %q", name, args, out.String(), errb.String())
		}
	}
	go io.Copy(io.Discard, rd)
	return &held{cmd, stdin, out.String()}
}

// finish closes stdin and waits for the process.
func (h *held) finish() {
	h.stdin.Close()
	h.cmd.Wait()
}

// CUDA_VISIBLE_DEVICES selects and orders the CUDA ordinals of the
// simulated driver; UUIDs, memory and NVML stay those of the physical
// devices, and NVML ignores the variable.
func TestSimDevicesVisibleOrdinals(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=3", "FLEXGV_SIM_MEM=4GiB", "FLEXGV_SIM_CTX_MEM=100MiB")
	phys := nvmlDevices(t, e)
	if len(phys) != 3 || phys[0].uuid == phys[1].uuid || phys[1].uuid == phys[2].uuid || phys[0].uuid == phys[2].uuid {
		t.Fatalf("three devices with distinct UUIDs expected: %+v", phys)
	}

	h := e.startHeld([]string{"CUDA_VISIBLE_DEVICES=1"}, bin("captureclient"), "devices", "64")
	want := fmt.Sprintf("devices 1\nordinal 0 uuid %s\ncontext device 0, stream device 0\nready\n", phys[1].uuid)
	if h.output != want {
		t.Fatalf("CUDA_VISIBLE_DEVICES=1:\n%s\nwant:\n%s", h.output, want)
	}
	// Its memory is on the second physical device, as NVML (which ignores
	// CUDA_VISIBLE_DEVICES) shows.
	e2 := *e
	e2.extra = append(append([]string{}, e.extra...), "CUDA_VISIBLE_DEVICES=1")
	devs := nvmlDevices(t, &e2)
	used := uint64(164) << 20
	if len(devs) != 3 || devs[0].used != 0 || devs[1].used != used || devs[1].procs[h.cmd.Process.Pid] != used {
		t.Fatalf("memory of ordinal 0 should be on physical device 1: %+v", devs)
	}
	h.finish()

	for _, c := range []struct{ visible, want string }{
		{phys[2].uuid + ",0", fmt.Sprintf("devices 2\nordinal 0 uuid %s\nordinal 1 uuid %s\n", phys[2].uuid, phys[0].uuid)},
		{"2, " + phys[1].uuid, fmt.Sprintf("devices 2\nordinal 0 uuid %s\nordinal 1 uuid %s\n", phys[2].uuid, phys[1].uuid)},
		{"1,7,0", fmt.Sprintf("devices 1\nordinal 0 uuid %s\n", phys[1].uuid)},
		{"0,0,1", fmt.Sprintf("devices 1\nordinal 0 uuid %s\n", phys[0].uuid)},
	} {
		h := e.startHeld([]string{"CUDA_VISIBLE_DEVICES=" + c.visible}, bin("captureclient"), "devices", "1")
		if !strings.HasPrefix(h.output, c.want) {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q:\n%s\nwant:\n%s", c.visible, h.output, c.want)
		}
		h.finish()
	}
}

// With no visible device cuInit fails as the driver's does. A prefix that
// every UUID shares names none of them.
func TestSimDevicesNoneVisible(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2")
	for _, v := range []string{"", "GPU-f1e96000", "3", "-1", "MIG-1"} {
		e2 := *e
		e2.extra = append(append([]string{}, e.extra...), "CUDA_VISIBLE_DEVICES="+v)
		r := e2.run("captureclient", "devices", "1")
		if r.code != 1 || !strings.Contains(r.stderr, "cuInit(0) failed: 100") {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: want CUDA_ERROR_NO_DEVICE from cuInit, got %+v", v, r)
		}
	}
}

// unshared starts name inside a new PID namespace whose /proc is still the
// outer one, and returns it with its pid as the outer namespace sees it.
func (e *env) unshared(name string, args ...string) (*held, int) {
	e.t.Helper()
	if out, err := exec.Command("unshare", "--pid", "--fork", "true").CombinedOutput(); err != nil {
		e.t.Skipf("cannot create PID namespaces here: %v %s", err, out)
	}
	h := e.startHeld(nil, "unshare", append([]string{"--pid", "--fork", bin(name)}, args...)...)
	ppid := h.cmd.Process.Pid
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ppid, ppid))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		e.t.Fatalf("no child of unshare %d: %v %q", ppid, err, data)
	}
	return h, pid
}

// A process in another PID namespace is reported by its pid in the root
// namespace, is never reaped while it lives (not even by a process that
// cannot see it), and its memory comes back once it is killed.
func TestSimDevicesPIDNamespaces(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_MEM=4GiB", "FLEXGV_SIM_CTX_MEM=100MiB")
	outer := e.holder("64")
	inner, innerPid := e.unshared("holder", "32")
	outerUsed, innerUsed := uint64(164)<<20, uint64(132)<<20
	check := func(when string) {
		t.Helper()
		d := nvmlDevices(t, e)[0]
		if d.used != outerUsed+innerUsed || len(d.procs) != 2 || d.procs[outer.Process.Pid] != outerUsed ||
			d.procs[innerPid] != innerUsed {
			t.Fatalf("%s: want pids %d and %d holding %d and %d bytes: %+v", when, outer.Process.Pid, innerPid,
				outerUsed, innerUsed, d)
		}
	}
	check("both alive")

	// A process in yet another namespace sees neither pid; reaping from
	// there must leave both alone.
	r := e.runIn(filepath.Join(build, "sim"), "unshare", "--pid", "--fork", bin("nvmlclient"))
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf(" used=%d ", outerUsed+innerUsed)) {
		t.Fatalf("NVML from another namespace: %+v", r)
	}
	check("after a reaper in another namespace")

	syscall.Kill(innerPid, syscall.SIGKILL)
	inner.cmd.Wait()
	d := nvmlDevices(t, e)[0]
	if d.used != outerUsed || len(d.procs) != 1 || d.procs[outer.Process.Pid] != outerUsed {
		t.Fatalf("the killed process's memory is not back: %+v", d)
	}
}

// A forked child has a slot of its own: the parent's memory comes back when
// the parent is killed, though the child it shared everything with lives on.
func TestSimDevicesForkedChild(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_MEM=4GiB", "FLEXGV_SIM_CTX_MEM=100MiB")
	h := e.startHeld(nil, bin("captureclient"), "devices", "64", "fork")
	d := nvmlDevices(t, e)[0]
	if want := uint64(164) << 20; !strings.HasSuffix(h.output, "forked a child\nready\n") || d.used != want ||
		d.procs[h.cmd.Process.Pid] != want {
		t.Fatalf("the parent should hold %d bytes: %q %+v", want, h.output, d)
	}
	// Only the process: the child keeps its output open until stdin closes.
	h.cmd.Process.Signal(syscall.SIGKILL)
	h.cmd.Process.Wait()
	d = nvmlDevices(t, e)[0]
	h.stdin.Close()
	if d.used != 0 || len(d.procs) != 0 {
		t.Fatalf("the killed parent's memory is not back while its child lives: %+v", d)
	}
}

// Twenty processes that start at once, each in its own PID namespace (so
// all of them are pid 1 there) where possible, attach to one fully
// initialized state file and each get a slot of their own, even with the
// debris of a creator that died in another namespace next to it.
func TestSimDevicesConcurrentAttach(t *testing.T) {
	const n = 20
	e := newEnv(t, "FLEXGV_SIM_MEM=8GiB", "FLEXGV_SIM_CTX_MEM=10MiB")
	prefix := []string{bin("holder")}
	if exec.Command("unshare", "--pid", "--fork", "true").Run() == nil {
		prefix = []string{"unshare", "--pid", "--fork", bin("holder")}
	}
	if err := os.WriteFile(filepath.Join(e.dir, "gpu.state.1.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := make(chan struct{})
	type started struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   string
	}
	res := make([]started, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		cmd := exec.Command(prefix[0], append(prefix[1:], "1")...)
		cmd.Env = e.environ(filepath.Join(build, "sim"))
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		res[i] = started{cmd: cmd, stdin: stdin}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			if err := cmd.Start(); err != nil {
				res[i].out = err.Error()
				res[i].cmd = nil
				return
			}
			res[i].out, _ = bufio.NewReader(stdout).ReadString('\n')
		}(i)
	}
	close(start)
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range res {
			if s.cmd != nil {
				s.stdin.Close()
				s.cmd.Wait()
			}
		}
	})
	for i, s := range res {
		if s.out != "ready\n" {
			t.Fatalf("process %d: %q", i, s.out)
		}
	}
	d := nvmlDevices(t, e)[0]
	each := uint64(11) << 20
	if d.used != n*each || len(d.procs) != n {
		t.Fatalf("want %d processes of %d bytes: %+v", n, each, d)
	}
	for pid, used := range d.procs {
		if pid <= 1 || used != each {
			t.Fatalf("process %d holds %d bytes, want %d: %+v", pid, used, each, d)
		}
	}
}
