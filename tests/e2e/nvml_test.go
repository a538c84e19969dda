package e2e

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holder starts a process that holds memory and keeps the GPU busy.
func (e *env) holder(args ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(bin("holder"), args...)
	cmd.Env = e.environ(filepath.Join(build, "sim"))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		e.t.Fatalf("holder: %q", line)
	}
	return cmd
}

// NVML in another process sees the simulated GPU's configuration, memory in
// use, utilization and processes; a SIGKILLed process's memory comes back.
func TestSimulatedNVML(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2", "FLEXGV_SIM_MEM=8GiB", "FLEXGV_SIM_CTX_MEM=100MiB")
	r := e.run("nvmlclient")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "devices 2\n") ||
		!strings.Contains(r.stdout, "device 1 name=FlexGV Simulated GPU uuid=GPU-f1e96000-5e1d-4000-8000-000000000001 total=8589934592 used=0 ") {
		t.Fatalf("idle GPU: %+v", r)
	}
	// 3000 kernels of 2 ms queue 6 s of device work at once. Utilization
	// covers the last second, so sample after 0.7 s of it: a slower host
	// only makes the busy share larger.
	h := e.holder("512", "3000", "2000")
	used := uint64(512+100) << 20
	time.Sleep(700 * time.Millisecond)
	r = e.run("nvmlclient")
	want := fmt.Sprintf("device 0 name=FlexGV Simulated GPU uuid=GPU-f1e96000-5e1d-4000-8000-000000000000 total=8589934592 used=%d free=%d total_v2=8589934592 util=", used, 8<<30-used)
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, fmt.Sprintf("procs=%d:%d\n", h.Process.Pid, used)) {
		t.Fatalf("busy GPU: want %q and the holder's process:\n%s", want, r.stdout)
	}
	var util int
	fmt.Sscanf(r.stdout[strings.Index(r.stdout, "util=")+5:], "%d", &util)
	if util < 40 {
		t.Errorf("utilization %d%% while kernels are queued", util)
	}
	h.Process.Signal(syscall.SIGKILL)
	h.Wait()
	r = e.run("nvmlclient")
	if !strings.Contains(r.stdout, "device 0 name=FlexGV Simulated GPU uuid=GPU-f1e96000-5e1d-4000-8000-000000000000 total=8589934592 used=0 ") ||
		!strings.Contains(r.stdout, "procs=\n") {
		t.Fatalf("after SIGKILL the memory is not back:\n%s", r.stdout)
	}
}

// Another simulated machine's GPUs have other UUIDs (CUDA's and NVML's
// alike), as two machines' GPUs do; a machine number out of range is
// refused.
func TestSimulatedMachinesDiffer(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2", "FLEXGV_SIM_MACHINE=3")
	r := e.run("nvmlclient")
	if r.code != 0 || !strings.Contains(r.stdout, "device 1 name=FlexGV Simulated GPU uuid=GPU-f1e96000-5e1d-4000-8000-000000000301 ") {
		t.Errorf("machine 3: %+v", r)
	}
	if r := e.run("flexgv", "run", "--mem", "GPU-f1e96000-5e1d-4000-8000-000000000301=1GiB", "--", bin("memclient"), "info"); r.code != 0 {
		t.Errorf("CUDA does not know machine 3's second GPU by its NVML UUID: %+v", r)
	}
	bad := newEnv(t, "FLEXGV_SIM_MACHINE=256")
	if r := bad.run("nvmlclient"); r.code == 0 || !strings.Contains(r.stderr, "invalid FLEXGV_SIM_MACHINE=256") {
		t.Errorf("machine 256: %+v", r)
	}
}

// Memory is shared by every process of the device: allocation past it fails
// with out-of-memory, as on a full GPU.
func TestSimulatedOutOfMemory(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_MEM=1GiB", "FLEXGV_SIM_CTX_MEM=0")
	e.holder("700")
	r := e.run("holder", "400")
	if r.code != 2 || r.stdout != "alloc failed: CUDA_ERROR_OUT_OF_MEMORY\n" {
		t.Fatalf("second holder: %+v", r)
	}
}

// flexgv node reads the node through go-nvml.
func TestNodeCommand(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_DEVICES=2", "FLEXGV_SIM_MEM=4GiB")
	r := e.run("flexgv", "node")
	if r.code != 0 || !strings.Contains(r.stdout, "FlexGV Simulated GPU") || strings.Count(r.stdout, " 4GiB ") != 2 {
		t.Fatalf("flexgv node: %+v", r)
	}
	r = e.runIn(t.TempDir(), "flexgv", "node")
	if r.code == 0 || !strings.Contains(r.stderr, "cannot initialize NVML") {
		t.Fatalf("flexgv node without NVML: %+v", r)
	}
}

// Inside a tenant, NVML lists the tenant's own processes alone: another
// tenant's process on the same GPU is in neither the list of processes
// holding memory nor the utilization samples, and an ask with no room is
// answered with the tenant's count; outside any tenant both are listed.
func TestNVMLListsATenantsOwnProcesses(t *testing.T) {
	e := newEnv(t, "FLEXGV_SIM_CTX_MEM=0")
	e.startProc(t, "flexgv", "run", "--group", "a", "--mem", "1GiB", "--", bin("holder"), "16", "200", "10000")
	e.startProc(t, "flexgv", "run", "--group", "b", "--mem", "1GiB", "--", bin("holder"), "32", "200", "10000")
	outside := e.run("nvmlprocs")
	m := regexp.MustCompile(`processes: (\d+):(\d+)MiB (\d+):(\d+)MiB\n`).FindStringSubmatch(outside.stdout)
	if outside.code != 0 || m == nil || !strings.Contains(outside.stdout, "asked with no room: Insufficient Size, 2\n") {
		t.Fatalf("outside any tenant: exit %d\n%s%s", outside.code, outside.stdout, outside.stderr)
	}
	pid := map[string]string{m[2]: m[1], m[4]: m[3]} // by MiB held
	a, b := pid["16"], pid["32"]
	if a == "" || b == "" || !regexp.MustCompile(`busy: (`+a+`|`+b+`)`).MatchString(outside.stdout) {
		t.Fatalf("outside any tenant, no holder busy:\n%s", outside.stdout)
	}
	// (The simulated GPU may run one holder's kernels for a while before
	// the other's: a tenant's samples are its own, or none.)
	sampled := 0
	for _, c := range []struct{ group, pid, mib string }{{"a", a, "16"}, {"b", b, "32"}} {
		in := e.run("flexgv", "run", "--group", c.group, "--", bin("nvmlprocs"))
		want := fmt.Sprintf("asked with no room: Insufficient Size, 1\nprocesses: %s:%sMiB\n", c.pid, c.mib)
		busy := strings.TrimPrefix(in.stdout, want)
		if in.code != 0 || !strings.HasPrefix(in.stdout, want) || (busy != "busy: "+c.pid+"\n" && busy != "busy: none\n") {
			t.Errorf("in tenant %s: exit %d, printed\n%s\nwant\n%sbusy: %s (or none)\n%s", c.group, in.code, in.stdout, want,
				c.pid, in.stderr)
		}
		if busy == "busy: "+c.pid+"\n" {
			sampled++
		}
	}
	if sampled == 0 {
		t.Errorf("neither tenant saw its holder's utilization")
	}
	// A tenant with no process on the GPU sees none.
	none := e.run("flexgv", "run", "--group", "c", "--mem", "1GiB", "--", bin("nvmlprocs"))
	if want := "asked with no room: Success, 0\nprocesses: none\nbusy: none\n"; none.code != 0 || none.stdout != want {
		t.Errorf("in a tenant without processes: exit %d, printed\n%s\nwant\n%s\n%s", none.code, none.stdout, want, none.stderr)
	}
}

// A tenant's process in a PID namespace of its own, whose NVML (as some
// drivers' do) gives pids of the root namespace: it learns its pid there
// when it makes its context, and its tenant's NVML lists it by that pid.
func TestNVMLKnowsATenantsProcessByItsNVMLPid(t *testing.T) {
	if exec.Command("unshare", "-Upf", "--map-root-user", "true").Run() != nil {
		t.Skip("no PID namespace for this user (unshare -Upf)")
	}
	e := newEnv(t, "FLEXGV_SIM_CTX_MEM=100MiB")
	// (unshare without a /proc of its own: the simulated NVML reports the
	// root namespace's pid, the process sees itself as pid 1; its context
	// holds memory, so NVML lists it once the context is made)
	e.startProc(t, "flexgv", "run", "--group", "a", "--mem", "1GiB", "--", "unshare", "-Upf", "--map-root-user",
		bin("holder"), "16", "200", "10000")
	outside := e.run("nvmlprocs")
	m := regexp.MustCompile(`processes: (\d+):116MiB\n`).FindStringSubmatch(outside.stdout)
	if outside.code != 0 || m == nil || m[1] == "1" {
		t.Fatalf("outside any tenant: exit %d\n%s%s", outside.code, outside.stdout, outside.stderr)
	}
	in := e.run("flexgv", "run", "--group", "a", "--", bin("nvmlprocs"))
	if want := "processes: " + m[1] + ":116MiB\n"; in.code != 0 || !strings.Contains(in.stdout, want) {
		t.Errorf("in the tenant: exit %d, printed\n%s\nwant %q\n%s", in.code, in.stdout, want, in.stderr)
	}
}
