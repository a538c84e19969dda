package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexgv/flexgv/internal/tenant"
)

// stepper is a suspendee under flexgv run: each step launches a kernel,
// synchronizes an event and reads its memory back.
type stepper struct {
	p     *proc
	lines chan string
	n     int
}

// startStepper starts it under flexgv run with args, or alone without.
func (e *env) startStepper(t *testing.T, args ...string) *stepper {
	t.Helper()
	var p *proc
	if len(args) > 0 {
		p = e.spawn(t, "flexgv", append(append([]string{"run"}, args...), "--", bin("suspendee"), "64")...)
	} else {
		p = e.spawn(t, "suspendee", "64")
	}
	s := &stepper{p: p, lines: make(chan string, 64)}
	go func() {
		for p.lines.Scan() {
			s.lines <- p.lines.Text()
		}
		close(s.lines)
	}()
	s.expect(t, "ready")
	return s
}

// hang is how long a step may take before the test calls it stuck: far
// beyond what a step takes on a loaded machine, only so a hang fails.
const hang = 2 * time.Minute

func (s *stepper) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok || l != want {
			t.Fatalf("suspendee printed %q (still running: %v), want %q", l, ok, want)
		}
	case <-time.After(hang):
		t.Fatalf("suspendee printed nothing for %v, want %q", hang, want)
	}
}

// step asks for a step and waits until the program is inside its calls.
func (s *stepper) step(t *testing.T) {
	t.Helper()
	s.n++
	fmt.Fprintln(s.p.stdin, "step")
	s.expect(t, "calling")
}

func (s *stepper) done(t *testing.T) {
	t.Helper()
	s.expect(t, fmt.Sprintf("step %d ok", s.n))
}

// nvmlMiB is what NVML says of device 0: memory used, and the processes
// holding memory there ("pid:MiB ...", "none").
func nvmlMiB(t *testing.T, e *env) (used uint64, procs string) {
	t.Helper()
	var nodes []struct {
		Used uint64 `json:"memory_used"`
	}
	r := e.run("flexgv", "node", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("flexgv node --json: %v %+v", err, r)
	}
	p := e.run("nvmlprocs")
	for _, l := range strings.Split(p.stdout, "\n") {
		if rest, ok := strings.CutPrefix(l, "processes: "); ok {
			return nodes[0].Used >> 20, rest
		}
	}
	t.Fatalf("nvmlprocs: %+v", p)
	return 0, ""
}

func tenantInfo(t *testing.T, e *env, name string) tenant.Info {
	t.Helper()
	var infos []tenant.Info
	r := e.run("flexgv", "ps", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
		t.Fatalf("flexgv ps --json: %v %+v", err, r)
	}
	for _, in := range infos {
		if in.Name == name {
			return in
		}
	}
	t.Fatalf("no tenant %s in flexgv ps: %s", name, r.stdout)
	return tenant.Info{}
}

func TestSuspendTakesATenantOffTheGPUAndResumeBringsItBack(t *testing.T) {
	e := quotaEnv(t)
	e.startDaemon(t) // flexgv ps asks it: the mark travels through its API
	s := e.startStepper(t, "--group", "g", "--mem", "2GiB")
	s.step(t)
	s.done(t)
	pid := tenantInfo(t, e, "g").Procs[0].Pid
	if used, procs := nvmlMiB(t, e); used != 128 || procs != fmt.Sprintf("%d:128MiB", pid) {
		t.Fatalf("before: NVML shows %d MiB used, processes %s; want 128 (64 MiB and its context)", used, procs)
	}

	r := e.run("flexgv", "suspend", "g")
	if r.code != 0 || !regexp.MustCompile(`^suspended tenant g: 1 process, 128MiB off the GPU in [0-9.]+m?s \([0-9.]+[mµ]?s waiting for submitted work\)\n$`).MatchString(r.stdout) {
		t.Fatalf("flexgv suspend g: %+v", r)
	}
	if used, procs := nvmlMiB(t, e); used != 0 || procs != "none" {
		t.Errorf("suspended: NVML shows %d MiB used, processes %s; want none", used, procs)
	}
	if ps := e.run("flexgv", "ps"); !strings.Contains(ps.stdout, fmt.Sprintf("%d(128MiB suspended)", pid)) {
		t.Errorf("flexgv ps does not show the tenant suspended:\n%s", ps.stdout)
	}
	if top := e.run("flexgv", "top", "--once"); !strings.Contains(top.stdout, "g (suspended)") {
		t.Errorf("flexgv top does not show the tenant suspended:\n%s", top.stdout)
	}
	// Its next calls block: the step goes no further while it is suspended
	// (the driver holds it until resume, however long the test looks).
	s.step(t)
	select {
	case l := <-s.lines:
		t.Fatalf("suspended, the program went on: %q", l)
	case <-time.After(500 * time.Millisecond):
	}
	if r := e.run("flexgv", "suspend", "g"); r.code != 1 || r.stderr != "flexgv suspend: tenant g is already suspended (flexgv resume g brings it back)\n" {
		t.Errorf("suspending twice: %+v", r)
	}

	r = e.run("flexgv", "resume", "g")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "resumed tenant g: 1 process, 128MiB back on the GPU in ") {
		t.Fatalf("flexgv resume g: %+v", r)
	}
	s.done(t) // every byte read back as written before the suspend
	if used, procs := nvmlMiB(t, e); used != 128 || procs != fmt.Sprintf("%d:128MiB", pid) {
		t.Errorf("resumed: NVML shows %d MiB used, processes %s; want 128 again", used, procs)
	}
	if tenantInfo(t, e, "g").Procs[0].Suspended {
		t.Error("flexgv ps --json still says suspended after resume")
	}
	s.step(t)
	s.done(t)
	if r := e.run("flexgv", "resume", "g"); r.code != 1 || r.stderr != "flexgv resume: tenant g is not suspended\n" {
		t.Errorf("resuming a running tenant: %+v", r)
	}
}

// A suspend killed half-way leaves processes locked, or checkpointed,
// without its mark in the tenant file: resume asks the driver, and
// brings them back all the same.
func TestResumeFinishesWhatAKilledSuspendLeft(t *testing.T) {
	e := quotaEnv(t)
	s := e.startStepper(t, "--group", "g", "--mem", "2GiB")
	pid := tenantInfo(t, e, "g").Procs[0].Pid
	for _, ops := range [][]string{{"lock"}, {"lock", "checkpoint"}} {
		e.ckpt(t, pid, ops...)
		if r := e.run("flexgv", "suspend", "g"); r.code != 1 || !strings.Contains(r.stderr, "another checkpoint tool holds it") {
			t.Errorf("suspending what is %v already: %+v", ops, r)
		}
		r := e.run("flexgv", "resume", "g")
		if r.code != 0 || !strings.HasPrefix(r.stdout, "resumed tenant g: 1 process, ") {
			t.Fatalf("resume after %v: %+v", ops, r)
		}
		s.step(t)
		s.done(t)
	}
}

func TestResumeRefusedWhileTheGPUIsTooFull(t *testing.T) {
	e := quotaEnv(t)
	s := e.startStepper(t, "--group", "g", "--mem", "2GiB")
	if r := e.run("flexgv", "suspend", "g"); r.code != 0 {
		t.Fatalf("flexgv suspend g: %+v", r)
	}
	// Another program takes what the suspend freed, and more: 15 GiB of 16
	// and its context leave less than g's quota.
	stop := e.start(t, "holder", "15360")
	r := e.run("flexgv", "resume", "g")
	want := "flexgv resume: tenant g stays suspended: GPU 0 (" + simUUID0 + ") has 960MiB free, the tenant needs 2GiB (its quota)\n"
	if r.code != 1 || r.stderr != want {
		t.Fatalf("resume with 960 MiB free: %+v\nwant %q", r, want)
	}
	if !tenantInfo(t, e, "g").Procs[0].Suspended {
		t.Error("a refused resume left the tenant marked running")
	}
	stop()
	if r := e.run("flexgv", "resume", "g"); r.code != 0 {
		t.Fatalf("resume once the GPU has room: %+v", r)
	}
	s.step(t)
	s.done(t)
}

func TestSuspendRefusesWhatItCannotSuspend(t *testing.T) {
	e := quotaEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"suspend", "nosuch"}, "flexgv suspend: no tenant nosuch (flexgv ps lists them)\n"},
		{[]string{"resume", "nosuch"}, "flexgv resume: no tenant nosuch (flexgv ps lists them)\n"},
	} {
		if r := e.run("flexgv", c.args...); r.code != 1 || r.stderr != c.want {
			t.Errorf("flexgv %v: %+v, want %q", c.args, r, c.want)
		}
	}
	// A group the node daemon holds outlives its runs: none of it is left
	// to suspend.
	e.startDaemon(t)
	if r := e.run("flexgv", "run", "--group", "idle", "--mem", "1GiB", "--", "true"); r.code != 0 {
		t.Fatalf("a run in the group: %+v", r)
	}
	if r := e.run("flexgv", "suspend", "idle"); r.code != 1 || r.stderr != "flexgv suspend: tenant idle has no processes\n" {
		t.Errorf("suspending a tenant without processes: %+v", r)
	}
	if r := e.run("flexgv", "suspend"); r.code != 2 {
		t.Errorf("flexgv suspend without a tenant: %+v", r)
	}
	if r := e.run("flexgv", "suspend", "--timeout", "-1s", "g"); r.code != 2 || !strings.Contains(r.stderr, "negative") {
		t.Errorf("a negative timeout: %+v", r)
	}

	// A driver older than the checkpoint API says so, and leaves the
	// tenant running.
	old := newEnv(t, "FLEXGV_SIM_CTX_MEM=64MiB", "FLEXGV_SIM_DRIVER_VERSION=12040")
	s := old.startStepper(t, "--group", "g", "--mem", "2GiB")
	r := old.run("flexgv", "suspend", "g")
	want := "flexgv suspend: the CUDA driver has no process checkpoint API: it supports CUDA 12.4, the API needs CUDA 12.8 (driver 570) or later\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("suspend on a CUDA 12.4 driver: %+v\nwant %q", r, want)
	}
	s.step(t)
	s.done(t)
}

func TestSuspendedProcessKilledLeavesNothingBehind(t *testing.T) {
	e := quotaEnv(t)
	s := e.startStepper(t, "--group", "g", "--mem", "2GiB")
	pid := tenantInfo(t, e, "g").Procs[0].Pid
	if r := e.run("flexgv", "suspend", "g"); r.code != 0 {
		t.Fatalf("flexgv suspend g: %+v", r)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.p.cmd.Wait()
	if used, procs := nvmlMiB(t, e); used != 0 || procs != "none" {
		t.Errorf("after the kill: NVML shows %d MiB used, processes %s", used, procs)
	}
	if ps := e.run("flexgv", "ps", "--json"); ps.stdout != "[]\n" {
		t.Errorf("the killed tenant's charges are left: %s", ps.stdout)
	}
	// The next programs run: none is born suspended in the dead one's
	// place (the lowest free slots of the simulated GPU, its among them).
	for i := 0; i < 4; i++ {
		next := e.startStepper(t)
		next.step(t)
		next.done(t)
	}
	// And the whole GPU is there for them: 16 GiB less four contexts and
	// the holder's own.
	stop := e.start(t, "holder", fmt.Sprint(16384-5*64-4*64))
	stop()
}

// ckpt runs the checkpoint controller on pid and returns its lines.
func (e *env) ckpt(t *testing.T, pid int, ops ...string) string {
	t.Helper()
	r := e.run("ckptctl", append([]string{fmt.Sprint(pid)}, ops...)...)
	if r.code != 0 {
		t.Fatalf("ckptctl %d %v: %+v", pid, ops, r)
	}
	return r.stdout
}

// The simulated driver answers the checkpoint API as NVIDIA documents it:
// each call only from its state, a restore only where the device has the
// room, a lock only once the process's submitted work is done.
func TestSimCheckpointAPIFollowsTheDriversStates(t *testing.T) {
	e := quotaEnv(t)
	a := e.startProc(t, "holder", "1024")
	pid := a.cmd.Process.Pid
	got := e.ckpt(t, pid, "state", "checkpoint", "restore", "unlock", "lock", "lock", "state", "checkpoint", "checkpoint", "unlock", "state")
	want := "state CUDA_SUCCESS 0\ncheckpoint CUDA_ERROR_ILLEGAL_STATE\nrestore CUDA_ERROR_ILLEGAL_STATE\nunlock CUDA_ERROR_ILLEGAL_STATE\n" +
		"lock CUDA_SUCCESS\nlock CUDA_ERROR_ILLEGAL_STATE\nstate CUDA_SUCCESS 1\ncheckpoint CUDA_SUCCESS\n" +
		"checkpoint CUDA_ERROR_ILLEGAL_STATE\nunlock CUDA_ERROR_ILLEGAL_STATE\nstate CUDA_SUCCESS 2\n"
	if got != want {
		t.Errorf("from running to checkpointed:\n%s\nwant\n%s", got, want)
	}
	// Another program takes the device but 1000 MiB: a's 1088 MiB (its
	// memory and context) do not fit, and it stays checkpointed.
	stop := e.start(t, "holder", fmt.Sprint(16384-64-1000))
	if got := e.ckpt(t, pid, "restore", "state"); got != "restore CUDA_ERROR_OUT_OF_MEMORY\nstate CUDA_SUCCESS 2\n" {
		t.Errorf("restore onto a full device:\n%s", got)
	}
	stop()
	if got := e.ckpt(t, pid, "restore", "state", "unlock", "state"); got != "restore CUDA_SUCCESS\nstate CUDA_SUCCESS 1\nunlock CUDA_SUCCESS\nstate CUDA_SUCCESS 0\n" {
		t.Errorf("restore once there is room:\n%s", got)
	}
	if got := e.ckpt(t, 1<<22+1, "state", "lock"); got != "state CUDA_ERROR_OPERATING_SYSTEM -1\nlock CUDA_ERROR_OPERATING_SYSTEM\n" {
		t.Errorf("a pid no CUDA process has:\n%s", got)
	}

	// Five seconds of kernels queued: a lock of 50 ms gives up and leaves
	// the process running; one without a timeout waits for them.
	b := e.startProc(t, "holder", "1", "50", "100000")
	pid = b.cmd.Process.Pid
	if got := e.ckpt(t, pid, "lock:50", "state"); got != "lock:50 CUDA_ERROR_TIMEOUT\nstate CUDA_SUCCESS 0\n" {
		t.Errorf("a lock that times out:\n%s", got)
	}
	if got := e.ckpt(t, pid, "lock", "state", "unlock"); got != "lock CUDA_SUCCESS\nstate CUDA_SUCCESS 1\nunlock CUDA_SUCCESS\n" {
		t.Errorf("a lock that waits:\n%s", got)
	}
}

// nvmlProcs is what NVML lists holding memory on device dev ("pid:MiB ...",
// "none").
func nvmlProcs(t *testing.T, e *env, dev int) string {
	t.Helper()
	p := e.run("nvmlprocs", fmt.Sprint(dev))
	for _, l := range strings.Split(p.stdout, "\n") {
		if rest, ok := strings.CutPrefix(l, "processes: "); ok {
			return rest
		}
	}
	t.Fatalf("nvmlprocs %d: %+v", dev, p)
	return ""
}

// From CUDA 13.0 the driver restores a process onto other GPUs, given
// pairs of UUIDs: every GPU it was checkpointed on, each onto another one.
// Its memory is counted on the new device after, and stays there.
func TestSimCheckpointRestoresOntoAnotherDevice(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
	a := e.startProc(t, "holder", "1024")
	pid := a.cmd.Process.Pid
	mine := fmt.Sprintf("%d:1088MiB", pid) // its memory and its context
	if got := e.ckpt(t, pid, "lock", "checkpoint"); got != "lock CUDA_SUCCESS\ncheckpoint CUDA_SUCCESS\n" {
		t.Fatalf("suspending it:\n%s", got)
	}
	// Refused, each leaving it checkpointed: a GPU it was on left out, a
	// GPU no device has, two of its GPUs onto one.
	for _, op := range []string{"restore:1>0", "restore:0>7", "restore:0>1,1>1"} {
		if got := e.ckpt(t, pid, op, "state"); got != op+" CUDA_ERROR_INVALID_VALUE\nstate CUDA_SUCCESS 2\n" {
			t.Errorf("%s:\n%s", op, got)
		}
	}
	// Device 1 with less free than it holds: it stays checkpointed.
	stop := e.start(t, "env", "CUDA_VISIBLE_DEVICES=1", bin("holder"), fmt.Sprint(16384-64-1000))
	if got := e.ckpt(t, pid, "restore:0>1", "state"); got != "restore:0>1 CUDA_ERROR_OUT_OF_MEMORY\nstate CUDA_SUCCESS 2\n" {
		t.Errorf("onto a full device:\n%s", got)
	}
	stop()
	if got := e.ckpt(t, pid, "restore:0>1,1>0", "unlock"); got != "restore:0>1,1>0 CUDA_SUCCESS\nunlock CUDA_SUCCESS\n" {
		t.Fatalf("onto device 1:\n%s", got)
	}
	if d0, d1 := nvmlProcs(t, e, 0), nvmlProcs(t, e, 1); d0 != "none" || d1 != mine {
		t.Errorf("moved: NVML lists %s on device 0, %s on device 1; want it (%s) on device 1", d0, d1, mine)
	}
	// Moved, it can be moved back (its memory is on device 1 now).
	if got := e.ckpt(t, pid, "lock", "checkpoint", "restore:0>0", "restore:1>0", "unlock"); got !=
		"lock CUDA_SUCCESS\ncheckpoint CUDA_SUCCESS\nrestore:0>0 CUDA_ERROR_INVALID_VALUE\nrestore:1>0 CUDA_SUCCESS\nunlock CUDA_SUCCESS\n" {
		t.Errorf("back onto device 0:\n%s", got)
	}
	if d0, d1 := nvmlProcs(t, e, 0), nvmlProcs(t, e, 1); d0 != mine || d1 != "none" {
		t.Errorf("moved back: NVML lists %s on device 0, %s on device 1", d0, d1)
	}
}

// Before CUDA 13.0 the restore's arguments are all reserved: pairs in them
// are refused, and a restore without any still works.
func TestSimCheckpointRemapNeedsCUDA13(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2", "FLEXGV_SIM_DRIVER_VERSION=12090")
	a := e.startProc(t, "holder", "1024")
	pid := a.cmd.Process.Pid
	if got := e.ckpt(t, pid, "lock", "checkpoint", "restore:0>1", "state", "restore", "unlock"); got != "lock CUDA_SUCCESS\ncheckpoint CUDA_SUCCESS\n"+
		"restore:0>1 CUDA_ERROR_INVALID_VALUE\nstate CUDA_SUCCESS 2\nrestore CUDA_SUCCESS\nunlock CUDA_SUCCESS\n" {
		t.Errorf("pairs on a CUDA 12.9 driver:\n%s", got)
	}
	if d0 := nvmlProcs(t, e, 0); d0 != fmt.Sprintf("%d:1088MiB", pid) {
		t.Errorf("NVML lists %s on device 0", d0)
	}
}

const simUUID1 = "GPU-f1e96000-5e1d-4000-8000-000000000001"

// record keeps every line the stepper's checks consumed.
func (s *stepper) transcript(t *testing.T, steps int, between func()) []string {
	t.Helper()
	lines := []string{"ready"}
	for i := 1; i <= steps; i++ {
		s.step(t)
		lines = append(lines, "calling")
		if i == 2 && between != nil {
			between()
		}
		s.done(t)
		lines = append(lines, fmt.Sprintf("step %d ok", i))
	}
	return lines
}

func TestResumeOntoAnotherGPU(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
	// The same steps uninterrupted, for what the moved run must print.
	ref := e.startStepper(t)
	want := ref.transcript(t, 4, nil)
	ref.p.stdin.Close()
	ref.p.cmd.Wait()

	s := e.startStepper(t, "--group", "g", "--mem", "2GiB")
	pid := tenantInfo(t, e, "g").Procs[0].Pid
	mine := fmt.Sprintf("%d:128MiB", pid)
	got := s.transcript(t, 4, func() {
		// Suspended while its second step has begun, and moved.
		if r := e.run("flexgv", "suspend", "g"); r.code != 0 {
			t.Fatalf("flexgv suspend g: %+v", r)
		}
		r := e.run("flexgv", "resume", "g", "--gpu", simUUID1)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "resumed tenant g: 1 process, 128MiB back on GPU 1 ("+simUUID1+") in ") {
			t.Fatalf("flexgv resume g --gpu %s: %+v", simUUID1, r)
		}
		if d0, d1 := nvmlProcs(t, e, 0), nvmlProcs(t, e, 1); d0 != "none" || d1 != mine {
			t.Errorf("moved: NVML lists %s on GPU 0 and %s on GPU 1; want it (%s) on GPU 1", d0, d1, mine)
		}
		if g := tenantInfo(t, e, "g"); g.Procs[0].Suspended || g.Devices[0].Used != 0 || g.Devices[1].Used != 128<<20 {
			t.Errorf("flexgv ps --json after the move: %+v", g)
		}
	})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("moved, it printed\n%s\nuninterrupted\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Its memory stays on GPU 1, where its kernels ran since.
	p := e.run("nvmlprocs", "1")
	if !strings.Contains(p.stdout, "processes: "+mine+"\n") || !strings.Contains(p.stdout, fmt.Sprintf("busy: %d\n", pid)) {
		t.Errorf("after more steps, NVML on GPU 1:\n%s", p.stdout)
	}
	// What it allocates now is on GPU 1 too.
	fmt.Fprintln(s.p.stdin, "alloc 64")
	s.expect(t, "allocated")
	if d1 := nvmlProcs(t, e, 1); d1 != fmt.Sprintf("%d:192MiB", pid) {
		t.Errorf("allocating after the move: NVML lists %s on GPU 1", d1)
	}
	// And the tenant counts it there, against its quota there.
	if g := tenantInfo(t, e, "g"); g.Devices[0].Used != 0 || g.Devices[1].Used != 192<<20 {
		t.Errorf("flexgv ps --json after allocating on GPU 1: %+v", g.Devices)
	}
	mine = fmt.Sprintf("%d:192MiB", pid)
	// And it can come back, by index.
	if r := e.run("flexgv", "suspend", "g"); r.code != 0 {
		t.Fatalf("flexgv suspend g again: %+v", r)
	}
	if r := e.run("flexgv", "resume", "g", "--gpu", "0"); r.code != 0 || !strings.Contains(r.stdout, "back on GPU 0 ("+simUUID0+")") {
		t.Fatalf("flexgv resume g --gpu 0: %+v", r)
	}
	if d0, d1 := nvmlProcs(t, e, 0), nvmlProcs(t, e, 1); d0 != mine || d1 != "none" {
		t.Errorf("moved back: NVML lists %s on GPU 0 and %s on GPU 1", d0, d1)
	}
	s.step(t)
	s.done(t)
}

// Each refusal says why, exits 1 and leaves the tenant suspended: a later
// resume brings it back.
func TestResumeOntoAnotherGPURefusals(t *testing.T) {
	refused := func(t *testing.T, e *env, want string, args ...string) {
		t.Helper()
		r := e.run("flexgv", append([]string{"resume", "g"}, args...)...)
		if r.code != 1 || r.stderr != want {
			t.Errorf("flexgv resume g %v: %+v\nwant %q", args, r, want)
		}
		if !tenantInfo(t, e, "g").Procs[0].Suspended {
			t.Errorf("flexgv resume g %v left the tenant marked running", args)
		}
	}
	suspended := func(t *testing.T, e *env, mem string) *stepper {
		t.Helper()
		s := e.startStepper(t, "--group", "g", "--mem", mem)
		if r := e.run("flexgv", "suspend", "g"); r.code != 0 {
			t.Fatalf("flexgv suspend g: %+v", r)
		}
		return s
	}
	resumes := func(t *testing.T, e *env, s *stepper, args ...string) {
		t.Helper()
		if r := e.run("flexgv", append([]string{"resume", "g"}, args...)...); r.code != 0 {
			t.Fatalf("flexgv resume g %v after the refusals: %+v", args, r)
		}
		s.step(t)
		s.done(t)
	}

	t.Run("unknown GPU, too full, not suspended", func(t *testing.T) {
		e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
		s := suspended(t, e, "2GiB")
		for _, gpu := range []string{"GPU-f1e96000-5e1d-4000-8000-0000000000ff", "2"} {
			refused(t, e, "flexgv resume: no GPU "+gpu+" on this node (flexgv node lists them); tenant g stays suspended\n", "--gpu", gpu)
		}
		// Another program takes all of GPU 1 but 960 MiB: less than g's
		// quota on the GPU it left.
		stop := e.start(t, "env", "CUDA_VISIBLE_DEVICES=1", bin("holder"), "15360")
		refused(t, e, "flexgv resume: tenant g stays suspended: GPU 1 ("+simUUID1+") has 960MiB free, the tenant needs 2GiB (its quota on GPU 0)\n", "--gpu", simUUID1)
		stop()
		resumes(t, e, s, "--gpu", simUUID1)
		if r := e.run("flexgv", "resume", "g", "--gpu", simUUID0); r.code != 1 || r.stderr != "flexgv resume: tenant g is not suspended\n" {
			t.Errorf("moving a running tenant: %+v", r)
		}
	})
	t.Run("the tenant's quota on the target", func(t *testing.T) {
		e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
		s := suspended(t, e, "0=2GiB,1=64MiB")
		refused(t, e, "flexgv resume: tenant g stays suspended: its quota on GPU 1 ("+simUUID1+") is 64MiB, it would hold 128MiB there\n", "--gpu", "1")
		resumes(t, e, s)
	})
	t.Run("a driver before CUDA 13.0", func(t *testing.T) {
		e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2", "FLEXGV_SIM_DRIVER_VERSION=12090")
		s := suspended(t, e, "2GiB")
		refused(t, e, "flexgv resume: tenant g stays suspended: the CUDA driver supports CUDA 12.9, restoring onto another GPU (--gpu) needs CUDA 13.0 (driver 580) or later; flexgv resume g brings it back where it was\n", "--gpu", simUUID1)
		resumes(t, e, s)
	})
}

// What scripts/gpu-e2e.sh's suspend section asks the H200's driver (one
// GPU): pairs naming a GPU no device has are refused, the process stays
// checkpointed; the GPU onto itself restores.
func TestSimCheckpointRemapOnOneGPU(t *testing.T) {
	e := quotaEnv(t)
	a := e.startProc(t, "holder", "1024")
	got := e.ckpt(t, a.cmd.Process.Pid, "lock", "checkpoint", "restore:0>9", "state", "restore:0>0", "state", "unlock")
	want := "lock CUDA_SUCCESS\ncheckpoint CUDA_SUCCESS\nrestore:0>9 CUDA_ERROR_INVALID_VALUE\nstate CUDA_SUCCESS 2\n" +
		"restore:0>0 CUDA_SUCCESS\nstate CUDA_SUCCESS 1\nunlock CUDA_SUCCESS\n"
	if got != want {
		t.Errorf("remapping on one GPU:\n%s\nwant\n%s", got, want)
	}
}
