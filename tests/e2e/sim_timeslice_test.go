package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The simulated GPU time-slices kernels of processes as a GPU without MPS
// does (2 ms slices, round robin, work-conserving). These tests judge what
// the device gave each process by device time (events, NVML), not by wall
// throughput, so a loaded machine cannot make them fail: spinners keep
// 16 ms of work queued and only slow host wake-ups would drain it.

// spinner is a running tests/clients/spinner.
type spinner struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	early []string // lines read before the report (awaitWindow)
	err   *bytes.Buffer
}

// stderr is what the spinner wrote there; read it after result.
func (s *spinner) stderr() string { return s.err.String() }

// spinner starts `spinner ARGS`, set up and waiting for start.
func (e *env) spinner(args ...string) *spinner {
	e.t.Helper()
	return e.spinnerUnder(nil, args...)
}

// spinnerUnder is spinner run by `flexgv run FLAGS --` (nil: directly).
func (e *env) spinnerUnder(flags []string, args ...string) *spinner {
	e.t.Helper()
	return e.clientUnder("spinner", flags, args...)
}

// clientUnder is spinnerUnder for another client of the same protocol
// ("ready", then a line on stdin to start, then a report).
func (e *env) clientUnder(name string, flags []string, args ...string) *spinner {
	e.t.Helper()
	argv := append([]string{bin(name)}, args...)
	if flags != nil {
		argv = append(append(append([]string{bin("flexgv"), "run"}, flags...), "--"), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // killed as a group, flexgv run and all
	cmd.Env = e.environ(filepath.Join(build, "sim"))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	errBuf := &bytes.Buffer{}
	cmd.Stderr = errBuf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	s := &spinner{t: e.t, cmd: cmd, stdin: stdin, lines: make(chan string, 1024), err: errBuf}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	if line := <-s.lines; line != "ready" {
		e.t.Fatalf("spinner %v: %q", args, line)
	}
	return s
}

func (s *spinner) start() { io.WriteString(s.stdin, "go\n") }

// spin is what a spinner reported: shares in percent, latencies in µs.
type spin struct {
	kernels  int
	share    float64
	p50, p99 float64
	windows  []float64
	seen     []time.Duration // when the host saw each window end (CLOCK_MONOTONIC)
	// copier: calls made, and the longest one (ms)
	ops     int
	longest float64
	// the host's view (ms): from the start to the last completion seen,
	// and how long of it the host kept the spinner waiting to run
	wallMs, delayedMs float64
	elapsedMs         float64 // from the start to the last completion, on the device's clock
}

func parseSpin(t *testing.T, line string, into *spin) bool {
	t.Helper()
	f := strings.Fields(line)
	num := func(i int) float64 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			t.Fatalf("spinner line %q: %v", line, err)
		}
		return v
	}
	switch {
	case len(f) == 6 && f[0] == "window":
		into.windows = append(into.windows, num(3))
		into.seen = append(into.seen, time.Duration(num(5)*1e6))
	case len(f) == 4 && f[0] == "ops":
		into.ops, into.longest = int(num(1)), num(3)
		return true
	case len(f) == 14 && f[0] == "kernels":
		into.kernels, into.share, into.p50, into.p99 = int(num(1)), num(5), num(7), num(9)
		into.elapsedMs, into.wallMs, into.delayedMs = num(3), num(11), num(13)
		return true
	default:
		t.Fatalf("spinner printed %q", line)
	}
	return false
}

// resultWithin is result, or a failure if the spinner has not ended
// within d (it is then killed).
func (s *spinner) resultWithin(d time.Duration) spin {
	s.t.Helper()
	timer := time.AfterFunc(d, func() { syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) })
	defer timer.Stop()
	r, err := s.report()
	if err != nil {
		s.t.Fatalf("spinner stalled or failed (given %v): %v, report %+v", d, err, r)
	}
	return r
}

// result waits for the spinner's end and returns its report.
func (s *spinner) result() spin {
	s.t.Helper()
	r, err := s.report()
	if err != nil {
		s.t.Fatalf("spinner: %v, report %+v", err, r)
	}
	return r
}

func (s *spinner) report() (spin, error) {
	s.t.Helper()
	var r spin
	done := false
	for _, line := range s.early {
		done = parseSpin(s.t, line, &r) || done
	}
	for line := range s.lines {
		done = parseSpin(s.t, line, &r) || done
	}
	err := s.cmd.Wait()
	if err == nil && !done {
		err = fmt.Errorf("no report")
	}
	return r, err
}

// awaitWindow waits until the spinner has reported its window n: its
// device time has reached (n + 1) windows since its start.
func (s *spinner) awaitWindow(n int) {
	s.t.Helper()
	prefix := fmt.Sprintf("window %d ", n)
	for line := range s.lines {
		s.early = append(s.early, line)
		if strings.HasPrefix(line, prefix) {
			return
		}
	}
	s.t.Fatalf("the spinner ended before its window %d: %q", n, s.early)
}

// awakeLoss is the most of a spinner's device time, in points, its host
// can have idled: the device's clock waits for a waiter woken late, but
// not for a process the host keeps from running between two calls (a
// queue that runs dry meanwhile leaves the device idle), at most the time
// the host kept it waiting to run.
func awakeLoss(s spin) float64 {
	if s.elapsedMs <= 0 {
		return 0
	}
	return 100 * s.delayedMs / s.elapsedMs
}

// nvmlUse is what NVML reports of device 0 over the last second.
func (e *env) nvmlUse() (util int, procs map[int]int) {
	e.t.Helper()
	r := e.run("procutil")
	if r.code != 0 {
		e.t.Fatalf("procutil: %+v", r)
	}
	procs = map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var pid, pct int
		if _, err := fmt.Sscanf(line, "util %d", &util); err == nil {
			continue
		}
		if _, err := fmt.Sscanf(line, "proc %d %d", &pid, &pct); err != nil {
			e.t.Fatalf("procutil printed %q", line)
		}
		procs[pid] = pct
	}
	return util, procs
}

// Alone, a process has the whole device: its kernels back to back.
func TestSimTimesliceAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.spinner("1000", "1", "16")
	s.start()
	r := s.result()
	t.Logf("alone: %d kernels, %.1f%% of the device, %.0f ms delayed by the host", r.kernels, r.share, r.delayedMs)
	if r.share < 99-awakeLoss(r) || r.share > 100.5 {
		t.Fatalf("a lone spinner of 1 ms kernels got %.1f%% of the device (%d kernels), want ≥ 99%% - %.1f (host delays)",
			r.share, r.kernels, awakeLoss(r))
	}
}

// Two processes with work share the device half and half, losing nothing
// between them; NVML attributes each its half.
func TestSimTimeslicePair(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.spinner("1000", "1.5", "16", "100"), e.spinner("1000", "1.5", "16", "100")
	a.start()
	b.start()
	a.awaitWindow(10) // NVML's last second of device time is then all theirs
	util, procs := e.nvmlUse()
	ra, rb := a.result(), b.result()
	t.Logf("pair: %.1f%% + %.1f%%; NVML util %d%%, per process %v", ra.share, rb.share, util, procs)
	// A host that idles one's queue (awakeLoss) gives the other that time.
	skew := 5 + max(awakeLoss(ra), awakeLoss(rb))
	if math.Abs(ra.share-50) > skew || math.Abs(rb.share-50) > skew || ra.share+rb.share < 95-awakeLoss(ra)-awakeLoss(rb) {
		t.Errorf("two equal spinners got %.1f%% and %.1f%% of the device, want 50/50 (± %.1f) and ~100%% together",
			ra.share, rb.share, skew)
	}
	pa, pb := float64(procs[a.cmd.Process.Pid]), float64(procs[b.cmd.Process.Pid])
	if util < 90-int(awakeLoss(ra)+awakeLoss(rb)) || len(procs) != 2 || math.Abs(pa-50) > 5+skew || math.Abs(pb-50) > 5+skew {
		t.Errorf("NVML while both spin: util %d%%, per process %v (pids %d, %d), want ~100%% split 50/50",
			util, procs, a.cmd.Process.Pid, b.cmd.Process.Pid)
	}
}

// A latency-critical process next to one with long kernels waits for the
// other's time slice: its p99 is about a slice plus its kernel, as on a
// GPU without MPS; alone it sees its kernel time.
func TestSimTimesliceLatency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	probe := e.spinner("100", "0.5", "1")
	probe.start()
	alone := probe.result()
	t.Logf("probe alone: p50 %.1f µs, p99 %.1f µs", alone.p50, alone.p99)
	if alone.p50 < 100 || alone.p50 > 110 || alone.p99 > 500 {
		t.Errorf("a 100 µs probe alone: p50 %.1f µs, p99 %.1f µs, want its kernel time", alone.p50, alone.p99)
	}
	long := e.spinner("10000", "1.5", "4")
	long.start()
	time.Sleep(100 * time.Millisecond)
	probe = e.spinner("100", "1", "1")
	probe.start()
	shared := probe.result()
	other := long.result()
	t.Logf("probe next to 10 ms kernels: p50 %.1f µs, p99 %.1f µs; the other kept %.1f%%", shared.p50, shared.p99, other.share)
	if shared.p50 < 1000 || shared.p99 < 1500 || shared.p99 > 2600 {
		t.Errorf("a 100 µs probe next to 10 ms kernels: p50 %.1f µs, p99 %.1f µs, want about a 2 ms slice plus 100 µs",
			shared.p50, shared.p99)
	}
}

// monotonic is now on CLOCK_MONOTONIC, the clock spinners stamp windows with.
func monotonic() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// splitWindows sorts a spinner's windows around a host event that happened
// between at and at+took, the spinner having started after began (both
// CLOCK_MONOTONIC): before, those the host saw end before it; after, those
// that began, on the device's clock, at least gap after it. The device's
// clock never runs ahead of the host's (it stands still for late waiters),
// so a window that starts d of device time after the spinner's start
// starts no earlier than d after began.
func splitWindows(s spin, window, began, at, took, gap time.Duration) (before, after []float64) {
	for i, share := range s.windows {
		switch {
		case i > 0 && s.seen[i] < at:
			before = append(before, share)
		case began+time.Duration(i)*window >= at+took+gap:
			after = append(after, share)
		}
	}
	return before, after
}

// A process killed while it holds half the device gives it up: the other
// gets all of it from the next slice on, and NVML forgets the dead one.
func TestSimTimesliceKill(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		a, b := e.spinner("1000", "3", "16"), e.spinner("1000", "3", "16", "100")
		a.start()
		began := monotonic()
		b.start()
		time.Sleep(600 * time.Millisecond)
		killedAt := monotonic()
		a.cmd.Process.Signal(syscall.SIGKILL)
		// B's device time past the kill's host time plus 1.1 s is surely past
		// the kill plus 1.1 s of device time: NVML's last second is after it.
		b.awaitWindow(int((killedAt-began+1100*time.Millisecond)/(100*time.Millisecond)) + 1)
		util, procs := e.nvmlUse()
		rb := b.result()
		before, after := splitWindows(rb, 100*time.Millisecond, began, killedAt, 0, 20*time.Millisecond)
		t.Logf("killed at %v; B's windows before %v, after %v; NVML util %d%%, per process %v", killedAt-began, before, after, util, procs)
		if len(before) < 2 || len(after) < 5 {
			t.Fatalf("spinner windows %v (killed at %v)", rb.windows, killedAt-began)
		}
		mean := 0.0
		for _, s := range before {
			mean += s / float64(len(before))
		}
		// Two spinners' 16 ms queues and the clock's wait for late waiters
		// keep both backlogged: time slices alternate, ±1 slice (2 ms) of a
		// 100 ms window each way.
		if mean < 45 || mean > 55 {
			t.Errorf("before the kill, B had %v (mean %.1f%%), want ~50%%", before, mean)
		}
		// Alone after the kill, B's queue runs dry on the device's clock only
		// for its 1 ms grace when the host wakes it late, or while the host
		// keeps it from running between calls (at most rb.delayedMs over these
		// windows), and the dead process's turn ends with its slice.
		sum := 0.0
		for _, s := range after {
			sum += s
		}
		if lost := 100 * rb.delayedMs / (100 * float64(len(after))); sum/float64(len(after)) < 97-lost {
			hc.Errorf("after the kill, B had %v (mean %.1f%%), want ≥ 97%% - %.1f (host delays)", after, sum/float64(len(after)), lost)
		}
		if lost := int(awakeLoss(rb)); util < 90-lost || len(procs) != 1 || procs[b.cmd.Process.Pid] < 90-lost {
			t.Errorf("NVML a second after the kill: util %d%%, per process %v, want B (%d) alone at ~100%%",
				util, procs, b.cmd.Process.Pid)
		}
	})
}

// The device's clock waits for a waiter the host runs late: a process
// stopped while it sleeps on its kernel (two 5 ms kernels queued: its
// queue dry soon after) loses only the clock's 1 ms of grace per stop, not
// the 80 ms it was stopped (24 % of its second, on the host's clock), and
// no more than its run-queue delay besides (awakeLoss), nor what a stop
// lasted past the 100 ms the clock waits at most (this test's own host may
// stretch them). A stop that lands while the spinner runs its own code
// (between a completion and its next wait: rare, more so on an idle host)
// is the program's pause, which the device does not wait for: such stops
// are told by the system call the stopped spinner was in, and their whole
// length is allowed besides.
func TestSimClockWaitsForAStoppedWaiter(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		s := e.spinner("5000", "2.5", "2")
		s.start()
		var past, outside time.Duration
		asleep, stops := 0, 0
		for ; asleep < 3 && stops < 8; stops++ {
			time.Sleep(150 * time.Millisecond)
			from := monotonic()
			s.cmd.Process.Signal(syscall.SIGSTOP)
			waited := stoppedInSleep(t, s.cmd.Process.Pid)
			time.Sleep(80 * time.Millisecond)
			s.cmd.Process.Signal(syscall.SIGCONT)
			took := monotonic() - from
			if !waited {
				outside += took
				continue
			}
			asleep++
			past += max(0, took-100*time.Millisecond)
		}
		r := s.result()
		if asleep < 3 {
			t.Fatalf("only %d of %d stops found the spinner asleep on its kernel", asleep, stops)
		}
		lost := awakeLoss(r) + 100*float64((past+outside).Milliseconds())/r.elapsedMs
		t.Logf("stopped %d x 80 ms (%d asleep): %.1f%% of the device (%d kernels), %.0f of %.0f ms delayed by the host, stops %v past 100 ms, %v outside a wait",
			stops, asleep, r.share, r.kernels, r.delayedMs, r.wallMs, past, outside)
		if r.share < 99-lost {
			hc.Errorf("a spinner stopped %d x 80 ms while it waited got %.1f%% of the device, want ≥ 99%% - %.1f (host delays)", asleep, r.share, lost)
		}
	})
}

// stoppedInSleep waits until process pid has stopped and says whether it
// stopped asleep (in nanosleep, which the simulated GPU's waits use),
// rather than running its own code or another call.
func stoppedInSleep(t *testing.T, pid int) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			continue
		}
		sc, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err != nil {
			t.Fatalf("the stopped spinner's system call: %v", err)
		}
		nr, _, _ := strings.Cut(string(sc), " ")
		return nr == strconv.Itoa(unix.SYS_NANOSLEEP) || nr == strconv.Itoa(unix.SYS_CLOCK_NANOSLEEP)
	}
	t.Fatalf("process %d did not stop within 5 s of SIGSTOP", pid)
	return false
}

// Host functions run as on a GPU (scripts/gpu/hostfunc_async.cu prints the
// same on the H200): the caller goes on while its function waits for it,
// the stream's later work waits for the function, and a graph's host node
// runs at each launch; directly and under the shim.
func TestSimHostFunctionsAsOnAGPU(t *testing.T) {
	e := newEnv(t)
	want := "the caller went on while its host function waited: yes\nlater work waited for the function: yes\n" +
		"a captured host function, two launches: ran 2 time(s)\n"
	for _, r := range []result{e.run("hostfunc", "async"), e.run("flexgv", "run", "--mem", "1GiB", "--", bin("hostfunc"), "async")} {
		if r.code != 0 || r.stdout != want {
			t.Errorf("exit %d, printed\n%s\nwant\n%s\n%s", r.code, r.stdout, want, r.stderr)
		}
	}
}
