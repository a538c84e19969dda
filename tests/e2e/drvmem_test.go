package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The simulated GPU spends memory as the H200's driver does
// (include/flexgv/drvmem.h): these tests hold a program at its peak and
// read the driver's own count of what its process holds, as nvidia-smi
// does, from outside the tenant.

var procRE = regexp.MustCompile(`(\d+):(\d+)MiB`)

// driverMiB is what NVML says the processes on device 0 hold, in MiB.
func driverMiB(t *testing.T, e *env) uint64 {
	t.Helper()
	r := e.run("nvmlprocs")
	line := ""
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "processes:") {
			line = l
		}
	}
	if r.code != 0 || line == "" {
		t.Fatalf("nvmlprocs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var sum uint64
	for _, m := range procRE.FindAllStringSubmatch(line, -1) {
		n, _ := strconv.ParseUint(m[2], 10, 64)
		sum += n
	}
	return sum
}

// atPeak runs drvclient ARGS under --mem QUOTA until it holds its peak,
// checks the driver's count then is within the quota, and returns what the
// program printed.
func atPeak(t *testing.T, e *env, quotaMiB uint64, args ...string) string {
	t.Helper()
	// Contexts take 64 MiB here: the estimate a context is charged before
	// it is measured must fit small quotas too.
	p := e.startProc(t, "flexgv", append([]string{"run", "--mem", strconv.FormatUint(quotaMiB, 10) + "MiB", "--ctx-mem", "64MiB", "--", bin("drvclient")}, args...)...)
	if got := driverMiB(t, e); got > quotaMiB {
		t.Errorf("drvclient %v: the driver counts %d MiB for it under a %d MiB quota:\n%s", args, got, quotaMiB, p.out)
	}
	return p.out
}

// Blocks of 2 MiB + 1 byte take 4 MiB each: charged at the requested size,
// a tenant held nearly twice its quota.
func TestTwoMiBPlusOneBlocksStayWithinTheQuota(t *testing.T) {
	e := quotaEnv(t)
	out := atPeak(t, e, 1024, "blocks", "2097153")
	// (1024 - 64) MiB of room in 4 MiB pages.
	if want := "2097153-byte blocks: 240\n"; !strings.Contains(out, want) {
		t.Errorf("got\n%swant %q", out, want)
	}
	// Sub-allocated small blocks: 512 bytes each, as the driver packs them.
	out = atPeak(t, quotaEnv(t), 65, "blocks", "1")
	if want := "1-byte blocks: 2048\n"; !strings.Contains(out, want) {
		t.Errorf("got\n%swant %q", out, want)
	}
}

// A module's globals are device memory from its load on.
func TestAModuleGlobalIsCharged(t *testing.T) {
	e := quotaEnv(t)
	out := atPeak(t, e, 1024, "global", "1024", "512")
	want := "module with a 1024 MiB global: CUDA_ERROR_OUT_OF_MEMORY, 0 MiB more in use\n" +
		"module with a 512 MiB global: CUDA_SUCCESS, 512 MiB more in use\n" +
		"10485760-byte blocks: 44\n"
	if !strings.Contains(out, want) {
		t.Errorf("got\n%swant\n%s", out, want)
	}
}

// A launch that would grow local memory (every resident thread's: 40 SMs x
// 2048 threads on the simulated GPU) past the quota is refused before it
// runs; one that fits is charged what it grows.
func TestALaunchNeedingMoreLocalMemoryThanLeftIsRefused(t *testing.T) {
	e := quotaEnv(t)
	out := atPeak(t, e, 4096, "local", "64", "8", "4")
	want := "launch needing 64 KiB of local memory: CUDA_ERROR_OUT_OF_MEMORY, 0 MiB more in use\n" +
		"launch needing 8 KiB of local memory: CUDA_SUCCESS, 560 MiB more in use\n" +
		"launch needing 4 KiB of local memory: CUDA_SUCCESS, 0 MiB more in use\n"
	if !strings.Contains(out, want) {
		t.Errorf("got\n%swant\n%s", out, want)
	}
}

// Room for pending device-side launches is reserved when the limit is set
// (9349 bytes each above the default 2048, in 2 MiB pages); the printf FIFO
// takes none on this driver.
func TestLimitsThatReserveMemoryAreCharged(t *testing.T) {
	e := quotaEnv(t)
	out := atPeak(t, e, 4096, "limits")
	want := "pending launches 1048576: CUDA_ERROR_OUT_OF_MEMORY, 0 MiB more in use\n" +
		"pending launches 65536: CUDA_SUCCESS, 586 MiB more in use\n" +
		"pending launches 2048: CUDA_SUCCESS, -586 MiB more in use\n" +
		"pending launches 65536: CUDA_SUCCESS, 586 MiB more in use\n" +
		"printf FIFO 67108864: CUDA_SUCCESS, 0 MiB more in use\n" +
		"10485760-byte blocks: 344\n"
	if !strings.Contains(out, want) {
		t.Errorf("got\n%swant\n%s", out, want)
	}
}

// What no rule knows of (a module calling device malloc: 138 MiB on the
// H200's driver) shows in the driver's count, which the shim reads back:
// allocations stop at the quota by that count, the refusal says so, and
// flexgv ps shows the larger usage.
func TestTheDriversCountCatchesWhatTheModelMisses(t *testing.T) {
	e := quotaEnv(t)
	p := e.startProc(t, "flexgv", "run", "--group", "bs", "--mem", "1GiB", "--", bin("drvclient"), "devruntime")
	if got := driverMiB(t, e); got > 1024 {
		t.Errorf("the driver counts %d MiB under a 1024 MiB quota:\n%s", got, p.out)
	}
	// (1024 - 64 - 138) MiB of room in 10 MiB blocks.
	if want := "10485760-byte blocks: 82\n"; !strings.Contains(p.out, want) {
		t.Errorf("got\n%swant %q", p.out, want)
	}
	infos := e.ps(t)
	if len(infos) != 1 || infos[0].Devices[0].Used < (64+138+820)*mib || infos[0].Devices[0].Used > 1024*mib {
		t.Errorf("flexgv ps: %+v", infos)
	}
	r := e.run("flexgv", "run", "--mem", "1GiB", "--ctx-mem", "64MiB", "--", bin("drvclient"), "devruntime")
	if !strings.Contains(r.stderr, "quota 1GiB, in use 1022MiB (138MiB of it counted by the driver only), requested 10MiB") {
		t.Errorf("the refusal does not say what the driver counted:\n%s", r.stderr)
	}
}

var faultsRE = regexp.MustCompile(`^calls (\d+), out of memory (\d+), other errors (\d+) \(first (\S+)\); left in use (\d+) bytes; in use (\d+) MiB$`)

// faultsLine reads what drvclient faults printed: its calls refused for
// want of memory, and a line that says what else went wrong or was left.
func faultsLine(t *testing.T, out string) (line string, oom int, other, left string, inUse uint64) {
	t.Helper()
	line = strings.TrimSpace(strings.TrimSuffix(out, "ready\n"))
	m := faultsRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("drvclient faults printed\n%s", out)
	}
	oom, _ = strconv.Atoi(m[2])
	inUse, _ = strconv.ParseUint(m[6], 10, 64)
	return line, oom, m[3], m[5], inUse
}

// A driver that runs out of memory at any point of any allocating call
// (the simulated GPU's FLEXGV_SIM_FAIL: a share of its reservations fail)
// leaves the tenant's charge as it was: after hundreds of allocations and
// releases of every kind, many refused part-way, from one thread or four
// at once, everything released gives back all that was charged, and the
// charge then is what the driver counts.
func TestOutOfMemoryMidCallLeavesNoCharge(t *testing.T) {
	for _, tc := range []struct{ fail, seed, threads string }{{"0", "1", "1"}, {"30", "1", "1"}, {"30", "2", "1"}, {"60", "3", "1"}, {"30", "4", "4"}} {
		e := quotaEnv(t, "FLEXGV_SIM_FAIL="+tc.fail+":"+tc.seed)
		p := e.startProc(t, "flexgv", "run", "--mem", "8GiB", "--ctx-mem", "64MiB", "--", bin("drvclient"), "faults", tc.seed, "400", tc.threads)
		line, oom, other, left, inUse := faultsLine(t, p.out)
		if (oom > 0) != (tc.fail != "0") || other != "0" || left != "0" {
			t.Errorf("FLEXGV_SIM_FAIL=%s:%s: %s\nwant out-of-memory answers only with faults, no other error, nothing left in use", tc.fail, tc.seed, line)
		}
		if got := driverMiB(t, e); got != inUse {
			t.Errorf("FLEXGV_SIM_FAIL=%s:%s: charged %d MiB at the end, the driver counts %d MiB", tc.fail, tc.seed, inUse, got)
		}
	}
}

// The tenant's usage includes what the driver's own count showed beyond
// the charges when last read. NVML answering late, as a busy driver may
// (10 ms here, the list taken 5 ms in), another thread's 32 MiB block was
// counted and freed before the answer, the charges read after it: the
// process was shown 32 MiB larger than it was until its next read, and the
// tenant's other processes were refused early meanwhile. Both ways: a
// block held before the read and freed during it, and one taken and freed
// during it (where comparing with the larger of the charges before and
// after would not do).
func TestDriverCountReadMidCallNeverOverstates(t *testing.T) {
	e := quotaEnv(t, "FLEXGV_SIM_NVML_LAG_US=10000")
	p := e.startProc(t, "flexgv", "run", "--mem", "8GiB", "--ctx-mem", "64MiB", "--", bin("drvclient"), "racer", "6")
	if !strings.Contains(p.out, "reads 12, shown larger than quiet 0 ") {
		t.Errorf("got %q, want no read shown larger than a quiet read", p.out)
	}
}

// The same remotely, over each transport, the faults in the server's
// driver: the executor's charges hold as a local tenant's, and a context
// the program makes leaves the executor's own context stack as it was (it
// was pushed there, one deeper at each cuCtxCreate, until the simulated
// GPU's stack was full and refused the next with CUDA_ERROR_INVALID_VALUE).
// What may stay in use is the one emptied 2 MiB page a context keeps for
// its next small allocations (remote/client/arena.c).
func TestRemoteOutOfMemoryMidCallLeavesNoCharge(t *testing.T) {
	for _, tc := range []struct{ transport, fail, seed, steps, threads string }{
		{"unix", "30", "1", "300", "1"}, {"unix", "60", "3", "300", "1"}, {"unix", "30", "4", "100", "4"},
		{"shm", "30", "5", "300", "1"}, {"tcp", "30", "5", "300", "1"}} {
		e := quotaEnv(t, "FLEXGV_SIM_FAIL="+tc.fail+":"+tc.seed)
		tok := e.token("a")
		s := e.serve(strings.Replace(tc.transport, "shm", "unix", 1), "--tenant", "a:"+tok, "--mem", "8GiB", "--ctx-mem", "64MiB")
		if tc.transport == "shm" { // the same server, dialled as shm://
			s = &server{addr: strings.Replace(s.addr, "unix://", "shm://", 1)}
		}
		r := e.remoteAs(s, tok, "drvclient", "faults", tc.seed, tc.steps, tc.threads)
		if r.code != 0 {
			t.Fatalf("%s, FLEXGV_SIM_FAIL=%s:%s: exit %d\n%s%s", tc.transport, tc.fail, tc.seed, r.code, r.stdout, r.stderr)
		}
		line, oom, other, left, _ := faultsLine(t, r.stdout)
		if oom == 0 || other != "0" || (left != "0" && left != "2097152") {
			t.Errorf("%s, FLEXGV_SIM_FAIL=%s:%s: %s\nwant out-of-memory answers, no other error, at most a page left in use", tc.transport, tc.fail, tc.seed, line)
		}
	}
}
