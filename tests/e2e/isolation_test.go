package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/flexgv/flexgv/internal/tenant"
)

// Regression tests for memory isolation: sizes that wrap, races on the
// first context, slots, the record table, hostile tenant files, devices
// named by UUID, PID namespaces.

// shimEnv is the environment of a process preloaded with the shim as a
// member of the tenant file path, without the CLI.
func (e *env) shimEnv(path string) []string {
	return append(e.environ(filepath.Join(build, "sim")), "LD_PRELOAD="+filepath.Join(build, "lib", "libflexgv.so"),
		"FLEXGV_TENANT="+path)
}

// handMade writes a tenant file the way the CLI does, with nslots slots and
// a quota on CUDA device 0 (no UUIDs), and returns its path.
func (e *env) handMade(t *testing.T, nslots uint32, quota uint64) string {
	return e.handMadeFor(t, nslots, quota, "")
}

// handMadeFor is handMade with the quota on the GPU of this UUID.
func (e *env) handMadeFor(t *testing.T, nslots uint32, quota uint64, uuid string) string {
	t.Helper()
	size := int(unsafe.Sizeof(tenant.Header{})) + int(nslots)*int(unsafe.Sizeof(tenant.Slot{}))
	buf := make([]byte, size)
	h := (*tenant.Header)(unsafe.Pointer(&buf[0]))
	h.Magic, h.Version, h.NDevices, h.NSlots = tenant.TenantMagic, tenant.TenantVersion, 1, nslots
	h.CtxBytes = 64 * mib
	h.Devices[0].Quota = quota
	copy(h.Devices[0].UUID[:], uuid)
	copy(h.Name[:], "handmade")
	p := filepath.Join(e.dir, "tenant-handmade")
	if err := os.WriteFile(p, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) shimRun(t *testing.T, path string, argv ...string) result {
	t.Helper()
	cmd := exec.Command(bin(argv[0]), argv[1:]...)
	cmd.Env = e.shimEnv(path)
	return runCmd(t, cmd)
}

// A size near SIZE_MAX once wrapped the charge, was refused by the driver,
// and the give-back clamped the tenant's usage to 0, freeing room that was
// still in use.
func TestHugeSizesCannotWrapTheCharge(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "overflow")
	want := "cuMemAlloc(SIZE_MAX - 10 MiB) -> CUDA_ERROR_OUT_OF_MEMORY\n" +
		"cuMemAllocPitch(SIZE_MAX/2 x 4) -> CUDA_ERROR_OUT_OF_MEMORY\n" +
		"cuArray3DCreate(2^61 x 2^20 x 2^20 x 16 B) -> CUDA_ERROR_OUT_OF_MEMORY\n" +
		"usage unchanged: yes\n" +
		"then cuMemAlloc(1000 MiB) -> CUDA_ERROR_OUT_OF_MEMORY\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("got %q (exit %d, %s), want %q", r.stdout, r.code, r.stderr, want)
	}
}

// Sixteen threads retaining the first primary context at once charge one
// context, not sixteen, and releasing it gives exactly that back.
func TestRacingFirstContextChargedOnce(t *testing.T) {
	e := quotaEnv(t)
	for round := 0; round < 3; round++ {
		r := e.run("flexgv", "run", "--mem", "4GiB", "--", bin("memclient"), "ctxrace", "16")
		want := fmt.Sprintf("one context charged %d, after release and retain %d\n", 64*mib, 64*mib)
		if r.code != 0 || r.stdout != want {
			t.Fatalf("round %d: got %q (exit %d, %s), want %q", round, r.stdout, r.code, r.stderr, want)
		}
	}
}

// When the per-process record table is full, an allocation is refused
// (and said why) instead of succeeding without a record of its charge.
func TestFullRecordTableRefusesTheAllocation(t *testing.T) {
	long(t)
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "4GiB", "--", bin("memclient"), "many", "100000")
	used := 64*mib + 98303*4096
	want := fmt.Sprintf("98303 allocations, then CUDA_ERROR_OUT_OF_MEMORY, tenant uses %d\nall freed: tenant uses %d\n", used, 64*mib)
	if r.code != 0 || r.stdout != want || strings.Count(r.stderr, "more live allocations in one process") != 1 {
		t.Fatalf("got %q (exit %d, %q), want %q", r.stdout, r.code, r.stderr, want)
	}
}

// Processes take a slot at their first CUDA call: hundreds of shells in a
// tenant of two slots cost nothing, and a CUDA process that finds no slot
// is refused with the reason instead of running without the quota.
func TestSlotsAreTakenAtTheFirstCUDACall(t *testing.T) {
	long(t)
	e := quotaEnv(t)
	p := e.handMade(t, 2, 1024*mib)
	r := e.shimRun(t, p, "sh", "-c", `i=0; while [ $i -lt 300 ]; do sh -c : ; i=$((i+1)); done; exec "$0" info`, bin("memclient"))
	want := fmt.Sprintf("free %d total %d device_total %d\n", 960*mib, 1024*mib, 1024*mib)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("after 300 shells: %+v, want %q", r, want)
	}
	holders := make([]*exec.Cmd, 2)
	for i := range holders {
		holders[i] = exec.Command(bin("holder"), "10")
		holders[i].Env = e.shimEnv(p)
		stdin, _ := holders[i].StdinPipe()
		stdout, _ := holders[i].StdoutPipe()
		if err := holders[i].Start(); err != nil {
			t.Fatal(err)
		}
		defer func(c *exec.Cmd, in io.Closer) { in.Close(); c.Wait() }(holders[i], stdin)
		buf := make([]byte, 64)
		stdout.Read(buf) // its context exists once it speaks
	}
	r = e.shimRun(t, p, "memclient", "info")
	if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "tenant handmade has no free process slot") != 1 ||
		!strings.Contains(r.stderr, "CUDA is refused") {
		t.Fatalf("third CUDA process in two slots: %+v", r)
	}
}

// A co-tenant that corrupts the tenant file cannot lift a quota a process
// has already read, nor crash it; one that truncates the file makes the
// process refuse further allocations, also without crashing.
func TestHostileTenantFile(t *testing.T) {
	e := quotaEnv(t)
	for _, c := range []struct {
		name   string
		damage func(p string)
		chunks string
		msg    string
	}{
		{"corrupted", func(p string) {
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			defer f.Close()
			garbage := make([]byte, int(unsafe.Sizeof(tenant.Header{})))
			for i := range garbage {
				garbage[i] = 0xff
			}
			f.WriteAt(garbage[8:], 8) // keep the magic: everything else huge
		}, "allocated 96 chunks", ""},
		{"truncated", func(p string) { os.Truncate(p, 0) }, "allocated 0 chunks", "was truncated by another process"},
	} {
		p := e.handMade(t, 8, 1024*mib)
		cmd := exec.Command(bin("memclient"), "fill", "10")
		cmd.Env = e.shimEnv(p)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var errb strings.Builder
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		proc := &proc{cmd: cmd, stdin: stdin}
		proc.lines = bufio.NewScanner(stdout)
		proc.waitFor(t, "ready")
		c.damage(p)
		io.WriteString(stdin, "go\n")
		proc.waitFor(t, "ready")
		stdin.Close()
		err := cmd.Wait()
		if err != nil || !strings.Contains(proc.out, c.chunks) || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%s tenant file: %v\n%s%s", c.name, err, proc.out, errb.String())
		}
	}
}

// A co-tenant that zeroes a process's usage in the tenant file (its slot's
// counters are writable by every process of the tenant) makes its later
// frees take from nothing: they stop at zero rather than wrap to a count
// past any quota, which would have refused the whole tenant from then on.
func TestZeroedUsageFreedStaysAtZero(t *testing.T) {
	e := quotaEnv(t)
	p := e.handMade(t, 8, 1024*mib)
	pr := e.spawnWith(t, e.shimEnv(p), "memclient", "steps")
	pr.waitFor(t, "ready")
	io.WriteString(pr.stdin, "alloc 100\n")
	pr.waitFor(t, "alloc 100: CUDA_SUCCESS")
	// its slot is the first: its whole usage zeroed
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(unsafe.Sizeof(tenant.Header{})) + int64(unsafe.Offsetof(tenant.Slot{}.Used))
	if _, err := f.WriteAt(make([]byte, 8), off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	io.WriteString(pr.stdin, "free\nalloc 800\n")
	pr.stdin.Close() // it ends after these: a wrong answer ends the wait
	pr.waitFor(t, "free: CUDA_SUCCESS")
	pr.waitFor(t, "alloc 800: CUDA_SUCCESS")
}

// A GPU the tenant has no entry for (the CLI saw other GPUs than the
// program does) is not limited, and the program is told so.
func TestUnknownGPUIsSaidNotLimited(t *testing.T) {
	e := quotaEnv(t)
	p := e.handMadeFor(t, 8, 1024*mib, "GPU-00000000-0000-0000-0000-000000000000")
	r := e.shimRun(t, p, "memclient", "info")
	if !strings.HasPrefix(r.stdout, fmt.Sprintf("free %d total %d", 16384*mib-64*mib, 16384*mib)) ||
		strings.Count(r.stderr, "tenant handmade has no entry for device 0 (GPU-") != 1 {
		t.Fatalf("%+v", r)
	}
}

var freeRE = regexp.MustCompile(`^free (\d+) total (\d+) device_total (\d+)\n$`)

// Quotas name GPUs by UUID: under CUDA_VISIBLE_DEVICES=1 the program's
// device 0 is the second GPU, and it is that GPU's quota that applies.
func TestQuotaFollowsTheGPUUnderCUDAVisibleDevices(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2", "CUDA_VISIBLE_DEVICES=1")
	for _, c := range []struct {
		mem   string
		total uint64
	}{{"1=1GiB", 1024 * mib}, {"0=1GiB", 16384 * mib}} {
		r := e.run("flexgv", "run", "--mem", c.mem, "--", bin("memclient"), "info")
		m := freeRE.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil || m[2] != fmt.Sprint(c.total) || m[3] != fmt.Sprint(c.total) {
			t.Errorf("--mem %s with CUDA_VISIBLE_DEVICES=1: %+v; want total %d", c.mem, r, c.total)
		}
	}
}

// A stream-ordered allocation is charged to its pool's device, not to the
// device that happens to be current.
func TestPoolAllocationsChargedToThePoolsDevice(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
	for _, c := range []struct{ mem, want string }{
		{"1=1GiB", "CUDA_ERROR_OUT_OF_MEMORY"},
		{"0=1GiB", "CUDA_SUCCESS"},
	} {
		r := e.run("flexgv", "run", "--mem", c.mem, "--", bin("memclient"), "pooldev", "2048")
		if want := "2048 MiB from device 1's pool -> " + c.want + "\n"; r.code != 0 || r.stdout != want {
			t.Errorf("--mem %s: %+v, want %q", c.mem, r, want)
		}
	}
}

// Pools of host memory hand out host memory: a tenant's GPU quota is not
// charged for it (the host's current pool, known to the shim only by
// asking the driver, and a pool made), while the device's pool still is.
func TestHostPoolsNotChargedToTheGPU(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("families"), "hostpool", "2048")
	for _, want := range []string{"the host's current pool: CUDA_SUCCESS, host memory, read back; a copy down: CUDA_ERROR_INVALID_VALUE\n",
		"a pool of host memory made: CUDA_SUCCESS, host memory, read back; a copy down: CUDA_ERROR_INVALID_VALUE\n",
		"the device's pool: CUDA_ERROR_OUT_OF_MEMORY\n"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("--mem 1GiB, 2 GiB from each pool: exit %d, want %q\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
}

// A graph's allocation nodes are charged to the devices they are on.
func TestGraphMemoryChargedPerDevice(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_DEVICES=2")
	for _, c := range []struct{ mem, mib1, want string }{
		{"1=1GiB", "2048", "CUDA_ERROR_OUT_OF_MEMORY"},
		{"1=1GiB", "512", "CUDA_SUCCESS"},
		{"0=1GiB", "2048", "CUDA_SUCCESS"},
	} {
		r := e.run("flexgv", "run", "--mem", c.mem, "--", bin("memclient"), "graph2dev", c.mib1, "64")
		want := "graph of " + c.mib1 + " MiB on device 1 and 64 MiB on device 0: launch -> " + c.want + "\n"
		if r.code != 0 || r.stdout != want {
			t.Errorf("--mem %s: %+v, want %q", c.mem, r, want)
		}
	}
}

// A refusal says which tenant, device, quota, usage and request it was,
// once, and the program gets the driver's own error.
func TestRefusalExplainsItself(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "32MiB", "--", bin("memclient"), "info")
	msg := regexp.MustCompile(`flexgv: tenant run-\d+: device 0 \(GPU-[0-9a-f-]{36}\): quota 32MiB, in use 0B, ` +
		`requested 512MiB \(a CUDA context\): refused with CUDA_ERROR_OUT_OF_MEMORY as from a full GPU\n`)
	if r.code != 1 || r.stdout != "" || len(msg.FindAllString(r.stderr, -1)) != 1 ||
		!strings.Contains(r.stderr, "cuDevicePrimaryCtxRetain(&shared_ctx, 0) failed: 2") {
		t.Fatalf("context over quota: %+v", r)
	}
	// One byte over the room asks the driver for a 2 MiB page more.
	r = e.run("flexgv", "run", "--mem", "1GiB", "--", bin("memclient"), "exact")
	if !strings.Contains(r.stderr, "quota 1GiB, in use 64MiB, requested 962MiB (cuMemAlloc)") ||
		strings.Count(r.stderr, "flexgv: tenant") != 1 {
		t.Fatalf("allocation over quota, said once: %+v", r)
	}
}

// Under a quota, stream capture (in every mode, with another thread
// allocating, explicit allocation nodes, a library's workspace, what
// capture forbids, many threads) behaves exactly as without flexgv.
func TestCaptureUnderQuotaMatchesNative(t *testing.T) {
	for _, mode := range [][]string{{"modes"}, {"nodes"}, {"workspace"}, {"rules"}, {"threads", "8"}} {
		native := quotaEnv(t).run("captureclient", mode...)
		shimmed := quotaEnv(t).run("flexgv", append([]string{"run", "--mem", "4GiB", "--", bin("captureclient")}, mode...)...)
		if native.code != 0 || shimmed != native {
			t.Errorf("captureclient %v:\nnative (exit %d):\n%s%s\nunder --mem 4GiB (exit %d):\n%s%s", mode,
				native.code, native.stdout, native.stderr, shimmed.code, shimmed.stdout, shimmed.stderr)
		}
	}
}

// Graph memory is charged when the graph runs: a graph whose allocations
// do not fit is refused at launch as on a full GPU (capturing it works, as
// natively) and leaves nothing behind; one that fits is charged what the
// graph memory pool reserves until it is trimmed.
func TestGraphMemoryCharged(t *testing.T) {
	e := quotaEnv(t)
	r := e.run("flexgv", "run", "--mem", "1GiB", "--", bin("captureclient"), "big", "2048")
	for _, want := range []string{"cuMemAllocAsync 2048 MiB = CUDA_SUCCESS\n", "cuStreamEndCapture = CUDA_SUCCESS\n",
		"cuGraphLaunch = CUDA_ERROR_OUT_OF_MEMORY\n", "launched: graph memory used 0 (high 0) reserved 0 (high 0) MiB\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("over-quota graph: no %q in\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if !strings.Contains(r.stderr, "requested 2GiB (CUDA graph memory)") {
		t.Errorf("over-quota graph: no refusal message: %s", r.stderr)
	}
	p := e.spawn(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", bin("captureclient"), "big", "512", "hold")
	p.waitFor(t, "device memory taken 512 MiB")
	if infos := e.ps(t); len(infos) != 1 || infos[0].Devices[0].Used != (64+512)*mib {
		t.Fatalf("while the graph's memory is reserved: %+v, want %d used", infos, (64+512)*mib)
	}
	r = e.run("flexgv", "run", "--group", "g", "--", bin("memclient"), "exact")
	if want := fmt.Sprintf("room %d:", (1024-2*64-512)*mib); !strings.HasPrefix(r.stdout, want) {
		t.Errorf("room next to a reserved graph: %+v, want %q", r, want)
	}
}

// A process killed while a child it forked lives on: the child does not
// keep the dead parent's slot alive, so what the parent held comes back.
func TestForkedChildDoesNotKeepItsParentAlive(t *testing.T) {
	e := quotaEnv(t)
	p := e.spawn(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", bin("captureclient"), "devices", "300", "fork")
	p.waitFor(t, "ready")
	infos := e.ps(t)
	if len(infos) != 1 || len(infos[0].Procs) != 1 || infos[0].Devices[0].Used != (64+300)*mib {
		t.Fatalf("before: %+v", infos)
	}
	if err := syscall.Kill(infos[0].Procs[0].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The parent's slot is free as soon as it is dead (and with no member
	// left, its run removes the tenant).
	for i := 0; i < 100; i++ {
		if infos = e.ps(t); len(infos) == 0 || len(infos[0].Procs) == 0 && infos[0].Devices[0].Used == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after the parent was killed, its child alive: %+v", infos)
}

// Two processes of one tenant in different PID namespaces: neither takes
// the other for dead, and the context of the one whose pid NVML reports
// differently is still measured, not charged 0.
func TestTenantAcrossPIDNamespaces(t *testing.T) {
	if _, err := exec.Command("unshare", "--pid", "--fork", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make PID namespaces here: %v", err)
	}
	e := quotaEnv(t)
	stop := e.start(t, "flexgv", "run", "--group", "g", "--mem", "1GiB", "--", "unshare", "--pid", "--fork", bin("holder"), "300")
	defer stop()
	r := e.run("flexgv", "run", "--group", "g", "--", "unshare", "--pid", "--fork", bin("memclient"), "info")
	// Both contexts (64 MiB each, measured) and the holder's 300 MiB.
	want := fmt.Sprintf("free %d total %d device_total %d\n", (1024-300-2*64)*mib, 1024*mib, 1024*mib)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("second namespace: %+v, want %q", r, want)
	}
	infos := e.ps(t)
	if len(infos) != 1 || len(infos[0].Procs) != 1 {
		t.Fatalf("flexgv ps: the holder in its own namespace must stay alive: %+v", infos)
	}
}
