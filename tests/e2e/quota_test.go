package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/flexgv/flexgv/internal/tenant"
)

const mib = 1 << 20

// Contexts take 64 MiB on this simulated GPU; the shim measures it.
func quotaEnv(t *testing.T, extra ...string) *env {
	return newEnv(t, append([]string{"FLEXGV_SIM_CTX_MEM=64MiB", "FLEXGV_SIM_MEM=16GiB"}, extra...)...)
}

// A program whose runtime looks names up through dlsym before libc is set
// up, as a sanitizer's does (AddressSanitizer's __asan_init), is held to
// its quota as any other: the shim's setup waits for libc, which has no
// environment yet, rather than run the program without its limits.
func TestAnEarlyLookupKeepsTheQuota(t *testing.T) {
	e := quotaEnv(t)
	want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS, then free 0\n", (256-64)*mib)
	for _, c := range []struct {
		name string
		argv []string
	}{
		{"a lookup from .preinit_array", []string{bin("memclient"), "early"}},
		// flexgv run preloads ASan's runtime first, as ASan demands.
		{"a program built with AddressSanitizer", []string{filepath.Join(build, "asan", "memclient"), "exact"}},
	} {
		r := e.run("flexgv", append([]string{"run", "--mem", "256MiB", "--ctx-mem", "64MiB", "--"}, c.argv...)...)
		if r.code != 0 || r.stdout != want {
			t.Errorf("%s: exit %d %q, want %q\n%s", c.name, r.code, r.stdout, want, r.stderr)
		}
	}
}

func TestEveryAllocationPathIsCharged(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "4GiB", "--", bin("memclient"), "paths")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 26 {
		t.Fatalf("exit %d, %d checks:\n%s%s", r.code, len(lines), r.stdout, r.stderr)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "ok ") {
			t.Errorf("%s", l)
		}
	}
}

// The pitch of cuMemAllocPitch is known only once the driver has chosen
// it: one that pads rows more than the shim's model of the driver (a row
// of 100 bytes to 4096 where the model says 512) is charged what it took,
// and where that does not fit, refused with nothing left allocated or
// charged, though the model's estimate fit.
func TestPitchPaddedPastTheModelIsCharged(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_PITCH_ALIGN=4096")
	for _, c := range []struct{ height, want string }{
		{"200", "pitch 100 x 200: CUDA_SUCCESS, pitch 4096, charged 851968, then 0\n"},
		// 244 MiB as the model has it, 1953 MiB taken: past the 960 MiB left
		{"500000", "pitch 100 x 500000: CUDA_ERROR_OUT_OF_MEMORY, pitch 0, charged 0, then 0\n"},
	} {
		r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "pitch", "100", c.height)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("got %q (exit %d, %s), want %q", r.stdout, r.code, r.stderr, c.want)
		}
	}
	// the simulated GPU has nothing left of it either
	if r := e.run("memclient", "info"); r.code != 0 || !strings.Contains(r.stdout, "free 17112760320 ") {
		t.Errorf("the device after the refusal: %q (exit %d, %s)", r.stdout, r.code, r.stderr)
	}
}

func TestQuotaBoundaryIsExact(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "exact")
	want := fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS, then free 0\n", (1024-64)*mib)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("got %q (exit %d, %s), want %q", r.stdout, r.code, r.stderr, want)
	}
}

// The device heap kernels malloc from, and thread stacks (reserved for
// every thread the device holds at once: 40 SMs x 2048 on the simulated
// GPU), are device memory: what a program asks beyond the defaults is
// charged to its quota while it holds it.
func TestQuotaChargesDeviceHeapAndStacks(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "heap")
	want := `heap 2 GiB: CUDA_ERROR_OUT_OF_MEMORY
heap 512 MiB: CUDA_SUCCESS, 504 MiB more in use
600 MiB beside it: CUDA_ERROR_OUT_OF_MEMORY
heap 520 MiB: CUDA_SUCCESS
heap back to 8 MiB: CUDA_SUCCESS, 0 MiB more in use
600 MiB then: CUDA_SUCCESS
stack 16 KiB: CUDA_ERROR_OUT_OF_MEMORY
stack 8 KiB: CUDA_SUCCESS, 560 MiB more in use
stack back to 1 KiB: CUDA_SUCCESS, 0 MiB more in use
`
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
	}
	if !strings.Contains(r.stderr, "a device heap (cuCtxSetLimit)") {
		t.Errorf("the refusal does not say what asked:\n%s", r.stderr)
	}
	// A remote tenant's limits are charged on the server, where it cannot
	// reach them.
	tok := e.token("heap")
	s := e.serve("unix", "--tenant", "a:"+tok, "--mem", "1GiB")
	if got := e.remoteAs(s, tok, "memclient", "heap"); got.code != 0 || got.stdout != want {
		t.Errorf("remotely: exit %d\n%s\nwant\n%s\n%s", got.code, got.stdout, want, got.stderr)
	}
}

func TestMemoryViewsShowTheQuota(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "info")
	want := fmt.Sprintf("free %d total %d device_total %d\n", (1024-64)*mib, 1024*mib, 1024*mib)
	if r.stdout != want {
		t.Fatalf("memclient info: %q, want %q", r.stdout, want)
	}
	// NVML inside the tenant (nvidia-smi's view) sees the quota and the
	// tenant's usage; outside it sees the device.
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "2GiB", "--", bin("holder"), "300")
	defer stop()
	in := e.run("flexgv", "run", "--group", "g", "--", bin("nvmlclient"))
	used := uint64(300+64) * mib
	if !strings.Contains(in.stdout, fmt.Sprintf("total=%d used=%d free=%d total_v2=%d", 2048*mib, used, 2048*mib-used, 2048*mib)) {
		t.Fatalf("NVML inside the tenant:\n%s%s", in.stdout, in.stderr)
	}
	out := e.run("nvmlclient")
	if !strings.Contains(out.stdout, fmt.Sprintf("total=%d used=%d", 16384*mib, used)) {
		t.Fatalf("NVML outside the tenant:\n%s", out.stdout)
	}
}

// What a process held before it exec'd another program is not held after.
func TestExecReleasesWhatTheOldImageHeld(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "execinfo")
	want := fmt.Sprintf("free %d total %d device_total %d\n", (1024-64)*mib, 1024*mib, 1024*mib)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("after exec: %q (%s), want %q", r.stdout, r.stderr, want)
	}
}

var allocatedRE = regexp.MustCompile(`allocated (\d+) chunks, tenant uses (\d+)`)

func TestConcurrentThreadsNeverExceed(t *testing.T) {
	e := quotaEnv(t)
	for round := 0; round < 5; round++ {
		cmd := exec.Command(bin("flexgv"), "run", "--mem", "1GiB", "--", bin("memclient"), "threads", "16", "10")
		cmd.Env = e.environ(filepath.Join(build, "sim"))
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.Output()
		m := allocatedRE.FindStringSubmatch(string(out))
		if err != nil || m == nil {
			t.Fatalf("memclient threads: %v\n%s", err, out)
		}
		chunks, _ := strconv.Atoi(m[1])
		uses, _ := strconv.ParseUint(m[2], 10, 64)
		// 960 MiB of room in 10 MiB chunks: never more than 96; racing
		// threads may not leave a chunk unused.
		if chunks > 96 || uses > 1024*mib || chunks < 96 {
			t.Fatalf("round %d: %d chunks, tenant uses %d of %d", round, chunks, uses, 1024*mib)
		}
	}
}

// start runs a program that prints "ready" and waits for stdin to close;
// stop closes it and waits.
func (e *env) start(t *testing.T, name string, args ...string) func() {
	t.Helper()
	p := e.startProc(t, name, args...)
	return func() { p.stdin.Close(); p.cmd.Wait() }
}

type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	out    string
	stderr *lockedBuffer
}

func (e *env) startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := e.spawn(t, name, args...)
	p.waitFor(t, "ready")
	return p
}

// spawn starts a program on the simulated GPU with its stdin and stdout
// piped; it is killed when the test ends.
func (e *env) spawn(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return e.spawnWith(t, e.environ(filepath.Join(build, "sim")), name, args...)
}

// spawnWith is spawn with the environment env.
func (e *env) spawnWith(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin(name), args...)
	cmd.Env = env
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	errb := &lockedBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	return &proc{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout), stderr: errb}
}

// waitFor reads the program's output up to the line marker.
func (p *proc) waitFor(t *testing.T, marker string) {
	t.Helper()
	for p.lines.Scan() {
		p.out += p.lines.Text() + "\n"
		if p.lines.Text() == marker || p.lines.Text() == "ctx" && marker == "ready" {
			return
		}
	}
	t.Fatalf("%v never printed %q:\n%s%s", p.cmd.Args, marker, p.out, p.stderr.String())
}

func (e *env) ps(t *testing.T) []tenant.Info {
	t.Helper()
	r := e.run("flexgv", "ps", "--json")
	var infos []tenant.Info
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &infos) != nil {
		t.Fatalf("flexgv ps --json: %+v", r)
	}
	return infos
}

func TestProcessesOfAGroupNeverExceed(t *testing.T) {
	e := quotaEnv(t)
	// Four processes create their contexts, then all fill at once.
	procs := make([]*proc, 4)
	for i := range procs {
		procs[i] = e.startProc(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", bin("memclient"), "fill", "10")
	}
	for _, p := range procs {
		io.WriteString(p.stdin, "go\n")
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func(p *proc) { defer wg.Done(); p.waitFor(t, "ready") }(p)
	}
	wg.Wait()
	chunks := 0
	for _, p := range procs {
		m := allocatedRE.FindStringSubmatch(p.out)
		n, _ := strconv.Atoi(m[1])
		chunks += n
	}
	// Four contexts (4 x 64 MiB) and the chunks share 1 GiB.
	if chunks != (1024-4*64)/10 {
		t.Errorf("%d chunks of 10 MiB allocated by the group, want %d", chunks, (1024-4*64)/10)
	}
	infos := e.ps(t)
	if len(infos) != 1 || infos[0].Name != "g" || len(infos[0].Procs) != 4 || infos[0].Devices[0].Used > 1024*mib {
		t.Fatalf("flexgv ps: %+v", infos)
	}
	text := e.run("flexgv", "ps").stdout
	if !regexp.MustCompile(`g\s+0 GPU-[0-9a-f]{8}\s+1GiB\s+\d+\.?\d*MiB`).MatchString(text) {
		t.Errorf("flexgv ps table:\n%s", text)
	}
	for _, p := range procs {
		p.stdin.Close()
		p.cmd.Wait()
	}
	if infos := e.ps(t); len(infos) != 0 {
		t.Fatalf("the group outlived its processes: %+v", infos)
	}
}

func TestSIGKILLMidAllocationLeaksNothing(t *testing.T) {
	e := quotaEnv(t)
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", bin("holder"), "200")
	defer stop()
	// A process of the same tenant allocating and freeing in a loop, killed
	// with SIGKILL wherever it is.
	victim := exec.Command(bin("memclient"), "churn")
	victim.Env = append(e.environ(filepath.Join(build, "sim")), "LD_PRELOAD="+filepath.Join(build, "lib", "libflexgv.so"),
		"FLEXGV_TENANT="+filepath.Join(e.dir, "tenants", "tenant-g"))
	stdout, _ := victim.StdoutPipe()
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(stdout).ReadString('\n')
	for i := 0; i < 3; i++ {
		if len(e.ps(t)[0].Procs) == 2 {
			break
		}
	}
	victim.Process.Signal(syscall.SIGKILL)
	victim.Wait()
	survivor := uint64(64+200) * mib
	infos := e.ps(t)
	if len(infos) != 1 || infos[0].Devices[0].Used != survivor || len(infos[0].Procs) != 1 {
		t.Fatalf("after SIGKILL: %+v, want only the survivor's %d bytes", infos, survivor)
	}
	// The room is back for the next process (its own context included).
	r := e.run("flexgv", "run", "--group", "g", "--", bin("memclient"), "exact")
	room := 1024*mib - survivor - 64*mib
	if !strings.HasPrefix(r.stdout, fmt.Sprintf("room %d: one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS", room)) {
		t.Fatalf("next process: %+v", r)
	}
}

// A process killed while it holds memory leaves its room to the tenant's
// live processes: one already running, refused at first because the dead
// one's charge still stands, finds that process gone (its slot's lock with
// it), takes its charge back and gets the room, with nothing in between
// that would have counted the tenant's processes first (no new process,
// no cuMemGetInfo).
func TestADeadProcessesRoomGoesToALiveOne(t *testing.T) {
	e := quotaEnv(t)
	live := e.startProc(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", bin("memclient"), "later", "800")
	victim := exec.Command(bin("holder"), "700")
	victim.Env = append(e.environ(filepath.Join(build, "sim")), "LD_PRELOAD="+filepath.Join(build, "lib", "libflexgv.so"),
		"FLEXGV_TENANT="+filepath.Join(e.dir, "tenants", "tenant-g"))
	stdout, _ := victim.StdoutPipe()
	hold, _ := victim.StdinPipe() // it holds its memory until this closes
	defer hold.Close()
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	if l, _ := bufio.NewReader(stdout).ReadString('\n'); l != "ready\n" {
		t.Fatalf("the victim: %q", l)
	}
	// 64 MiB a context: 1024 - 2 x 64 - 700 = 196 MiB left while it lives
	victim.Process.Signal(syscall.SIGKILL)
	victim.Wait()
	io.WriteString(live.stdin, "go\n")
	live.waitFor(t, "later 800: CUDA_SUCCESS")
}

func TestBadMemFlagsStopBeforeTheProgram(t *testing.T) {
	e := quotaEnv(t)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--mem", "0"}, "a quota of zero bytes"},
		{[]string{"--mem", "lots"}, `"lots" is not a size`},
		{[]string{"--mem", "20GiB"}, "20GiB is more than device 0 has (16GiB)"},
		{[]string{"--mem", "3=1GiB"}, "there is no device 3"},
		{[]string{"--mem", "150%"}, "not a percentage"},
		{[]string{"--group", "missing"}, "group missing does not exist; give --mem to create it"},
		{[]string{"--group", "bad/name", "--mem", "1GiB"}, "tenant name"},
		{[]string{"--mem", "1GiB", "--ctx-mem", "x"}, "--ctx-mem"},
	} {
		args := append(append([]string{"run"}, c.args...), "--", "sh", "-c", "echo started")
		r := e.run("flexgv", args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("flexgv %s: exit %d, stdout %q, stderr %q; want exit 2 before the program and %q",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, c.msg)
		}
	}
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", bin("holder"), "10")
	defer stop()
	r := e.run("flexgv", "run", "--group", "g", "--mem", "2GiB", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "group g already exists with quota 0=1GiB") {
		t.Errorf("joining with another quota: %+v", r)
	}
}

func TestTenantSetupFailure(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_TENANT=/nonexistent/tenant")
	r := e.run("flexgv", "run", "--", bin("direct"))
	if r.code != 1 || strings.Count(r.stderr, "flexgv: cannot open tenant /nonexistent/tenant: no such file (flexgv run or the node's flexgv daemon makes it") != 1 ||
		!strings.Contains(r.stderr, "cuInit(0) failed: 800") {
		t.Fatalf("refused by default: %+v", r)
	}
	e2 := quotaEnv(t, "FLEXGV_TENANT=/nonexistent/tenant", "FLEXGV_ON_ERROR=passthrough")
	r = e2.run("flexgv", "run", "--", bin("direct"))
	if r.code != 0 || !strings.Contains(r.stderr, "running without the quota") {
		t.Fatalf("passthrough: %+v", r)
	}
}

// Twenty processes of one tenant start at once; each gets its own slot and
// sees the others' contexts.
func TestTwentyProcessesStartTogether(t *testing.T) {
	e := quotaEnv(t)
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "4GiB", "--", bin("holder"), "1")
	defer stop()
	var wg sync.WaitGroup
	results := make([]result, 20)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = e.run("flexgv", "run", "--group", "g", "--", bin("memclient"), "info")
		}(i)
	}
	wg.Wait()
	for i, r := range results {
		var free, total, dev uint64
		if _, err := fmt.Sscanf(r.stdout, "free %d total %d device_total %d", &free, &total, &dev); err != nil || r.code != 0 ||
			total != 4096*mib || free > 4096*mib-65*mib-64*mib {
			t.Errorf("process %d: %+v", i, r)
		}
	}
}

// Without NVML the devices' sizes are unknown: sizes are taken with a
// warning, percentages are refused.
func TestMemWithoutNVML(t *testing.T) {
	e := quotaEnv(t)
	noLib := t.TempDir()
	r := e.runIn(noLib, "flexgv", "run", "--mem", "1GiB", "--", "sh", "-c", "echo started")
	if r.code != 0 || r.stdout != "started\n" || !strings.Contains(r.stderr, "cannot read the devices' sizes") {
		t.Errorf("--mem 1GiB without NVML: %+v", r)
	}
	r = e.runIn(noLib, "flexgv", "run", "--mem", "50%", "--", "sh", "-c", "echo started")
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "percentages need the devices' sizes") {
		t.Errorf("--mem 50%% without NVML: %+v", r)
	}
}
