package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// spinAll starts spinners of 1 ms kernels for seconds under each set of
// flexgv run flags together and returns their reports.
func (e *env) spinAll(seconds string, flags ...[]string) []spin {
	e.t.Helper()
	var ss []*spinner
	for _, f := range flags {
		ss = append(ss, e.spinnerUnder(f, "1000", seconds, "16"))
	}
	for _, s := range ss {
		s.start()
	}
	var out []spin
	for _, s := range ss {
		out = append(out, s.result())
	}
	return out
}

// Tenants that contend get the device in proportion to their shares, and
// together lose little of it.
func TestSharesDivideAContendedDevice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		shares []string
		want   []float64
	}{
		{[]string{"30%", "70%"}, []float64{30, 70}},
		{[]string{"20%", "30%", "50%"}, []float64{20, 30, 50}},
	} {
		e := newEnv(t)
		var flags [][]string
		for _, s := range c.shares {
			flags = append(flags, []string{"--compute", s})
		}
		got := e.spinAll("3", flags...)
		total := 0.0
		for i, r := range got {
			total += r.share
			t.Logf("--compute %s: %.1f%% of the device (%d kernels)", c.shares[i], r.share, r.kernels)
		}
		for i, r := range got {
			// Of the time the device was busy: what each got of it.
			if math.Abs(r.share*100/total-c.want[i]) > 4 {
				t.Errorf("shares %v: tenant %d got %.1f%% of the busy device, want %.0f%% ± 4", c.shares, i, r.share*100/total, c.want[i])
			}
		}
		if total < 95 {
			t.Errorf("shares %v: together %.1f%% of the device, want ≥ 95%%", c.shares, total)
		}
	}
}

// Idle time is lent: a tenant alone gets the whole device whatever its
// share, but no more than its cap.
func TestAShareIsWorkConserving(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.spinAll("1", []string{"--compute", "30%"})[0]
	t.Logf("alone under --compute 30%%: %.1f%%", r.share)
	if r.share < 95 {
		t.Errorf("a lone tenant under --compute 30%% got %.1f%% of the device, want ~100%%", r.share)
	}
	r = e.spinAll("1", []string{"--compute", "30%", "--compute-max", "40%"})[0]
	t.Logf("alone under --compute 30%% --compute-max 40%%: %.1f%%", r.share)
	if r.share < 35 || r.share > 45 {
		t.Errorf("a lone tenant under --compute-max 40%% got %.1f%% of the device, want 40%% ± 5", r.share)
	}
}

// A high-priority tenant runs as if alone next to a low-priority one, which
// waits while it has work and takes the device back once it is done.
func TestPriorityRunsFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alone := e.spinAll("1", []string{"--priority", "high"})[0]
	hi := e.spinnerUnder([]string{"--priority", "high"}, "1000", "1", "1")
	lo := e.spinnerUnder([]string{"--priority", "low"}, "1000", "2", "16")
	lo.start()
	hi.start()
	h, l := hi.result(), lo.result()
	t.Logf("high alone: %.1f%%, p99 %.0f µs; next to low: %.1f%%, p99 %.0f µs; low: %.1f%% over twice as long",
		alone.share, alone.p99, h.share, h.p99, l.share)
	// Its kernels wait for the low one's at most when a loaded host keeps
	// it from launching for long enough to look idle: bounds for a
	// shared 2-core machine (equal priorities give a 10 ms quantum).
	if h.share < alone.share-15 || h.p50 > 1.1*alone.p50+50 || h.p99 > 4000 {
		t.Errorf("the high-priority tenant next to a low one got %.1f%% (p99 %.0f µs); alone %.1f%% (p99 %.0f µs)",
			h.share, h.p99, alone.share, alone.p99)
	}
	// The low one had the device only once the high one was done: about
	// half of its two seconds.
	if l.share < 40 || l.share > 60 {
		t.Errorf("the low-priority tenant got %.1f%% of its run, want ~50%% (the second half)", l.share)
	}
}

// A holder killed with SIGKILL stalls nobody: its slot's lock goes with it.
func TestAKilledHolderStallsNobody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hi := e.spinnerUnder([]string{"--priority", "high"}, "1000", "30", "16")
	lo := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "2", "16")
	hi.start()
	lo.start()
	time.Sleep(500 * time.Millisecond)
	// The spinner is a child of one of flexgv run's threads.
	kids, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", hi.cmd.Process.Pid))
	pid := 0
	for _, k := range kids {
		b, _ := os.ReadFile(k)
		fmt.Sscan(string(b), &pid)
	}
	if pid == 0 {
		t.Fatalf("no spinner under flexgv run (pid %d)", hi.cmd.Process.Pid)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	r := lo.resultWithin(20 * time.Second)
	t.Logf("after the holder's death: %.1f%% of the device", r.share)
	if r.share < 60 {
		t.Errorf("with the high-priority holder killed after 0.5 s of 2, the other tenant got %.1f%%, want ≥ 60%%", r.share)
	}
}

// A scheduler file truncated under running tenants (it is writable by all
// users) ends scheduling on that GPU, with a word, and crashes nobody.
func TestATruncatedSchedulerCrashesNobody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "1.5", "16")
	b := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "1.5", "16")
	a.start()
	b.start()
	time.Sleep(300 * time.Millisecond)
	regions, _ := filepath.Glob(filepath.Join(e.dir, "tenants", "gpu-*"))
	if len(regions) != 1 {
		t.Fatalf("scheduler files: %v", regions)
	}
	if err := os.Truncate(regions[0], 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*spinner{a, b} {
		r := s.result()
		if r.kernels == 0 {
			t.Errorf("a spinner ran no kernel: %+v", r)
		}
		if !strings.Contains(s.stderr(), "a GPU scheduler file was truncated by another process; that GPU is no longer scheduled") {
			t.Errorf("stderr %q; want the truncation said", s.stderr())
		}
	}
}

// A share changed through the daemon moves what running tenants get.
func TestAShareChangedLiveMovesTheDevice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startDaemon(t)
	a := e.spinnerUnder([]string{"--group", "a", "--compute", "20%"}, "1000", "3", "16", "250")
	b := e.spinnerUnder([]string{"--group", "b", "--compute", "80%"}, "1000", "3", "16", "250")
	a.start()
	b.start()
	time.Sleep(1200 * time.Millisecond)
	for _, u := range [][]string{{"b", "--compute", "20%"}, {"a", "--compute", "80%"}} {
		if r := e.run("flexgv", append([]string{"update"}, u...)...); r.code != 0 {
			t.Fatalf("flexgv update %v: %+v", u, r)
		}
	}
	ra, rb := a.result(), b.result()
	mean := func(w []float64) float64 {
		s := 0.0
		for _, x := range w {
			s += x
		}
		return s / float64(len(w))
	}
	if len(ra.windows) < 11 || len(rb.windows) < 11 {
		t.Fatalf("windows: %v %v", ra.windows, rb.windows)
	}
	before, after := mean(ra.windows[1:4]), mean(ra.windows[7:11])
	t.Logf("a: %.1f%% before, %.1f%% after; b: %.1f%%, %.1f%%", before, after, mean(rb.windows[1:4]), mean(rb.windows[7:11]))
	if before > 30 || after < 70 {
		t.Errorf("a's share of the device went from %.1f%% to %.1f%% when changed from 20%% to 80%%: %v", before, after, ra.windows)
	}
}
