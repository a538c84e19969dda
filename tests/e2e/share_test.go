package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/schedtest"
)

// spinAll starts spinners of 1 ms kernels for seconds under each set of
// flexgv run flags together and returns their reports.
func (e *env) spinAll(seconds string, flags ...[]string) []spin {
	e.t.Helper()
	var ss []*spinner
	for _, f := range flags {
		ss = append(ss, e.spinnerUnder(f, "1000", seconds, "16"))
	}
	return startAll(ss...)
}

// highBesideLow runs a spinner of high priority (its arguments) beside a
// low-priority tenant of `lows` GPU-bound processes, together, and returns
// its report and the low tenant's (shares and host delays summed).
func (e *env) highBesideLow(lows int, high ...string) (spin, spin) {
	e.t.Helper()
	var ss []*spinner
	for range lows {
		ss = append(ss, e.spinnerUnder([]string{"--group", "low", "--priority", "low"}, "1000", "2", "16"))
	}
	ss = append(ss, e.spinnerUnder([]string{"--priority", "high"}, high...))
	rs := startAll(ss...)
	l := rs[0]
	for _, r := range rs[1:lows] {
		l.share += r.share
		l.delayedMs += r.delayedMs
	}
	return rs[lows], l
}

// startAll starts spinners together and returns their reports.
func startAll(ss ...*spinner) []spin {
	for _, s := range ss {
		s.start()
	}
	var out []spin
	for _, s := range ss {
		out = append(out, s.result())
	}
	return out
}

// handoverLoss is the most of the device, in points, that tenants taking
// turns can lose to their hosts: at a hand-over the device waits, drained,
// until the next holder's host launches (a waiter asleep in the shim, not
// in the simulated GPU, whose clock runs on), so each ms the host kept a
// spinner from running can idle the device that ms.
func handoverLoss(ss ...spin) float64 {
	loss := 0.0
	for _, s := range ss {
		if s.wallMs > 0 {
			loss += s.delayedMs * 100 / s.wallMs
		}
	}
	return loss
}

// hostCheck gathers the failures of checks that a host excuses as far as
// it measurably delayed the test's processes.
type hostCheck struct{ errs []string }

func (c *hostCheck) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// hostBound runs body once more when its host-excused checks fail: a
// virtual machine's host can stop a vCPU unseen (a Firecracker guest
// reports no steal time, and run-queue delay misses it), so one run may
// lose more than its measured delays excuse. A mechanism that misses fails
// both runs; what no host excuses is checked with t, in every run.
func hostBound(t *testing.T, body func(c *hostCheck)) {
	t.Helper()
	for try := 1; try <= 2; try++ {
		c := &hostCheck{}
		body(c)
		for _, e := range c.errs {
			if try == 1 {
				t.Logf("run again after: %s", e)
			} else {
				t.Error(e)
			}
		}
		if len(c.errs) == 0 {
			return
		}
	}
}

// lendLoss is the most, in points of over's device time, that a holder of
// higher priority (h) loses to one below it when its host delays it: a
// holder that does not launch for a poll (0.5 ms) looks idle and the GPU
// is lent, and the lower one's kernel (1 ms) and what it has let ahead
// (0.25 ms) run before the holder's next: 3.5 ms at most for each 1 ms
// of delay, on top of the delay itself.
func lendLoss(h, over spin) float64 {
	if over.elapsedMs <= 0 {
		return 0
	}
	return 3.5 * 100 * h.delayedMs / over.elapsedMs
}

// Tenants that contend get the device in proportion to their shares, and
// together lose little of it: 5 points on an idle host (a drained
// hand-over each quantum), and what their hosts delayed them.
func TestSharesDivideAContendedDevice(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
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
			if loss := handoverLoss(got...); total < 95-loss {
				hc.Errorf("shares %v: together %.1f%% of the device, want ≥ 95%% - %.1f (host delays)", c.shares, total, loss)
			}
		}
	})
}

// Shares hold whatever the tenants' kernel lengths: a tenant of 100 µs
// kernels at 70 % beside one of 2 ms kernels at 30 % gets its share of the
// rate it has alone, and together they keep the device busy. The tenant of
// short kernels synchronizes often, so its host is late more often: its
// turns must not pay for time the device's clock stood still (a waiter
// woken late), nor for the other's hand-overs.
func TestSharesHoldForMixedKernelLengths(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		kernels := []string{"2000", "100"}
		shares := []string{"30%", "70%"}
		want := []float64{30, 70}
		// Each alone (on a device of its own): the rate its share is of.
		alone := make([]spin, 2)
		for i := range kernels {
			s := newEnv(t).spinnerUnder([]string{"--compute", shares[i]}, kernels[i], "1", "16")
			s.start()
			alone[i] = s.result()
		}
		e := newEnv(t)
		ss := []*spinner{
			e.spinnerUnder([]string{"--compute", shares[0]}, kernels[0], "3", "16"),
			e.spinnerUnder([]string{"--compute", shares[1]}, kernels[1], "3", "16"),
		}
		for _, s := range ss {
			s.start()
		}
		got := []spin{ss[0].result(), ss[1].result()}
		total := got[0].share + got[1].share
		for i, r := range got {
			t.Logf("%s µs kernels at --compute %s: %.1f%% of the device, alone %.1f%%: %.1f%% of its alone rate (host delays: %.1f%% of its time, alone %.1f%%)",
				kernels[i], shares[i], r.share, alone[i].share, r.share*100/alone[i].share, awakeLoss(r), awakeLoss(alone[i]))
		}
		for i, r := range got {
			// Host delays can idle its turns, or its run alone: as far as
			// they differ between the two, the host moves the ratio.
			slack := 3 + math.Abs(awakeLoss(r)-awakeLoss(alone[i]))
			if of := r.share * 100 / alone[i].share; math.Abs(of-want[i]) > slack {
				hc.Errorf("%s µs kernels at --compute %s got %.1f%% of their alone rate, want %.0f ± %.1f (3 + host delays)",
					kernels[i], shares[i], of, want[i], slack)
			}
		}
		if loss := handoverLoss(got...); total < 95-loss {
			hc.Errorf("together %.1f%% of the device, want ≥ 95%% - %.1f (host delays)", total, loss)
		}
	})
}

// Processes in the last slots of a GPU's scheduler (the last word of its
// masks) take turns as the first ones do.
func TestSharesDivideInTheLastSlots(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		a := e.spinnerUnder([]string{"--compute", "30%"}, "1000", "3", "16")
		b := e.spinnerUnder([]string{"--compute", "70%"}, "1000", "3", "16")
		r := schedtest.Open(t, e.stateDir(), simUUID0)
		for i := 0; i < sched.MaxSlots-2; i++ {
			r.Process(i, 0, int32(100000+i), false)
		}
		a.start()
		b.start()
		ra, rb := a.result(), b.result()
		total := ra.share + rb.share
		t.Logf("slots %d and %d: 30%%: %.1f%% of the busy device, 70%%: %.1f%%", sched.MaxSlots-2, sched.MaxSlots-1,
			ra.share*100/total, rb.share*100/total)
		if loss := handoverLoss(ra, rb); math.Abs(ra.share*100/total-30) > 4 || total < 95-loss {
			hc.Errorf("30/70 in the last slots: %.1f%% and %.1f%% of the busy device, together %.1f%% of it; want 30 ± 4, ≥ 95 - %.1f (host delays) together",
				ra.share*100/total, rb.share*100/total, total, loss)
		}
	})
}

// Tenants that pause after each few kernels (a training loop reading its
// loss back) keep their shares: the device lent to the other during a
// pause comes back when the pause ends, not a quantum later.
func TestSharesHoldAcrossPauses(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		// 5 kernels of 2.7 ms, one synchronization, then 1 ms without work.
		batches := []string{"2700", "4", "5", "0", "batch", "200"}
		a := e.spinnerUnder([]string{"--compute", "30%"}, batches...)
		b := e.spinnerUnder([]string{"--compute", "70%"}, batches...)
		a.start()
		b.start()
		ra, rb := a.result(), b.result()
		total := ra.share + rb.share
		t.Logf("30%%: %.1f%% of the busy device, 70%%: %.1f%% (together %.1f%% of the device)", ra.share*100/total, rb.share*100/total, total)
		if math.Abs(ra.share*100/total-30) > 3 {
			t.Errorf("the 30%% tenant got %.1f%% of the busy device, the 70%% one %.1f%%: want 30 ± 3", ra.share*100/total, rb.share*100/total)
		}
		if loss := handoverLoss(ra, rb); total < 90-loss {
			hc.Errorf("together %.1f%% of the device, want ≥ 90%% - %.1f (host delays)", total, loss)
		}
	})
}

// Idle time is lent: a tenant alone gets the whole device whatever its
// share, but no more than its cap.
func TestAShareIsWorkConserving(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		r := e.spinAll("1", []string{"--compute", "30%"})[0]
		t.Logf("alone under --compute 30%%: %.1f%%", r.share)
		if r.share < 95-awakeLoss(r) {
			hc.Errorf("a lone tenant under --compute 30%% got %.1f%% of the device, want ≥ 95%% - %.1f (host delays)", r.share, awakeLoss(r))
		}
		capBand(t, "under --compute 30% --compute-max 40%", func() spin {
			return e.spinAll("1", []string{"--compute", "30%", "--compute-max", "40%"})[0]
		}, 40)
	})
}

// pairRates runs a and b together (under fa and fb; nil: directly, in
// plain time-slicing) and returns each one's share of the device.
func (e *env) pairRates(fa, fb []string, a, b []string) (spin, spin) {
	e.t.Helper()
	sa, sb := e.spinnerUnder(fa, a...), e.spinnerUnder(fb, b...)
	sa.start()
	sb.start()
	return sa.result(), sb.result()
}

// Among equals, a tenant whose requests are bound by its host leaves the
// device idle through much of its turn; the other fills those gaps, as
// time-slicing would, and pays for what it ran, so that each keeps its
// share of its alone rate and the pair gets what time-slicing gives it.
// Where the fills would slow the host-bound one (requests of one kernel
// each, which then wait behind a 2 ms kernel), its own measure holds them
// back: time-slicing leaves it 29 % of its rate there.
func TestAHostBoundTenantsGapsAreFilled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		busy, host []string // spinner arguments of the GPU-bound tenant (30 %) and the host-bound one (70 %)
		keep       float64  // the host-bound one's rate kept, in % of its alone rate
		together   float64  // the pair's, as a part of time-slicing's
	}{
		// without fills 0.70 of time-slicing's; fills not paid for 0.78
		{"2 ms kernels beside requests of 16 kernels of 100 µs, 200 µs of host work after each",
			[]string{"2000", "2", "16"}, []string{"100", "2", "16", "0", "eager", "200"}, 67, 0.95},
		// without fills 0.81; unchecked fills leave the host-bound one 29 %
		{"2 ms kernels beside requests of one kernel of 100 µs, 600 µs of host work after it",
			[]string{"2000", "2", "16"}, []string{"100", "2", "1", "0", "eager", "600"}, 60, 0.88},
		// fills not paid for: the host-bound one keeps 65 %, as the busy
		// one takes its turns besides
		{"100 µs kernels beside requests of 8 kernels of 500 µs, 600 µs of host work after each",
			[]string{"100", "2", "16"}, []string{"500", "2", "8", "0", "eager", "600"}, 67, 0.88},
	} {
		hostBound(t, func(hc *hostCheck) {
			var alone [2]spin
			for i, a := range [][]string{c.busy, c.host} {
				s := newEnv(t).spinnerUnder([]string{"--compute", "50%"}, a...)
				s.start()
				alone[i] = s.result()
			}
			ta, tb := newEnv(t).pairRates(nil, nil, c.busy, c.host)
			fa, fb := newEnv(t).pairRates([]string{"--compute", "30%"}, []string{"--compute", "70%"}, c.busy, c.host)
			of := func(r spin, i int) float64 { return r.share * 100 / alone[i].share }
			ts, fg := of(ta, 0)+of(tb, 1), of(fa, 0)+of(fb, 1)
			t.Logf("%s: time-slicing %.1f / %.1f %% of alone rates (%.1f together), flexgv 30/70 %.1f / %.1f (%.1f)",
				c.name, of(ta, 0), of(tb, 1), ts, of(fa, 0), of(fb, 1), fg)
			slack := handoverLoss(fa, fb) + math.Abs(awakeLoss(fb)-awakeLoss(alone[1]))
			if of(fa, 0) < 27-slack {
				hc.Errorf("%s: the busy tenant at 30%% got %.1f%% of its alone rate, want ≥ 27 - %.1f (host delays)", c.name, of(fa, 0), slack)
			}
			if of(fb, 1) < c.keep-slack {
				hc.Errorf("%s: the host-bound tenant at 70%% kept %.1f%% of its alone rate, want ≥ %.0f - %.1f (host delays)", c.name, of(fb, 1), c.keep, slack)
			}
			if fg < c.together*ts-slack {
				hc.Errorf("%s: together %.1f%% of their alone rates, time-slicing %.1f: want ≥ %.2f × that - %.1f (host delays)", c.name, fg, ts, c.together, slack)
			}
		})
	}
}

// A tenant's turn is shared by its processes: they launch in it side by
// side, as on a GPU of their own, each keeping what a holder among equals
// keeps in flight. When they took turns among themselves, a host-bound
// process waited out a GPU-bound sibling's whole quantum every other turn
// and kept 37 % of its alone rate; before that, the first to hold the GPU
// kept it while it had work (a second GPU-bound process got 2 %). Under a
// cap they take turns, a quantum each (their bucket is one).
func TestATenantsProcessesShareItsTurns(t *testing.T) {
	t.Parallel()
	busy, host := []string{"2000", "2", "16"}, []string{"100", "2", "16", "0", "eager", "200"}
	products := []string{"2660", "2", "5", "0", "batch"} // PyTorch's: five, then a synchronization
	hostBound(t, func(hc *hostCheck) {
		solo := newEnv(t).spinnerUnder([]string{"--compute", "50%"}, host...)
		solo.start()
		alone := solo.result()
		for _, c := range []struct {
			name string
			b    []string
		}{{"two GPU-bound processes", busy}, {"a GPU-bound and a host-bound process", host}} {
			e := newEnv(t)
			group := "g-" + strings.ReplaceAll(c.name, " ", "-")
			a := e.spinnerUnder([]string{"--group", group, "--compute", "50%"}, busy...)
			b := e.spinnerUnder([]string{"--group", group}, c.b...)
			a.start()
			b.start()
			ra, rb := a.result(), b.result()
			t.Logf("%s of one tenant: %.1f%% / %.1f%% of the device (the second alone: %.1f%%)", c.name, ra.share, rb.share, alone.share)
			slack := handoverLoss(ra, rb) + awakeLoss(ra) + awakeLoss(rb)
			if ra.share < 35-slack {
				hc.Errorf("%s of one tenant: the first got %.1f%% of the device, want ≥ 35%% - %.1f (host delays)", c.name, ra.share, slack)
			}
			// The host-bound one's kernels wait for at most one of the
			// other's (2 ms) in flight, as time-sliced: 89 % of its alone
			// rate with flexgv, as without.
			want := 35.0
			if c.b[0] == host[0] {
				want = alone.share * 3 / 4
			}
			if rb.share < want-slack {
				hc.Errorf("%s of one tenant: the second got %.1f%% of the device, want ≥ %.1f%% - %.1f (host delays)", c.name, rb.share, want, slack)
			}
		}
		// Beside another tenant, the two processes' turns are their
		// tenant's share, not a share each.
		for _, load := range [][]string{busy, products} {
			e := newEnv(t)
			a := e.spinnerUnder([]string{"--group", "g-pair", "--compute", "50%"}, load...)
			b := e.spinnerUnder([]string{"--group", "g-pair"}, load...)
			o := e.spinnerUnder([]string{"--group", "g-other", "--compute", "50%"}, load...)
			rs := startAll(a, b, o)
			slack := handoverLoss(rs...) + awakeLoss(rs[0]) + awakeLoss(rs[1]) + awakeLoss(rs[2])
			pair := rs[0].share + rs[1].share
			t.Logf("a tenant of two processes beside a tenant of one, 50/50 (spinner %v): %.1f%% + %.1f%% / %.1f%% of the device (host delays: %.1f points)", load, rs[0].share, rs[1].share, rs[2].share, slack)
			// The two launch no more into a turn that is over, and pay for
			// what they left running into the other's (with neither, their
			// tenant got 59–61 %; with one of the two, 49–55 %), from the
			// end of their tenant's turn: paid from their last completion
			// before it, batches of products cost them 44 % (41.7 % against
			// 52.2 % on an H100).
			if math.Abs(pair-50) > 3+slack || math.Abs(rs[2].share-50) > 3+slack || math.Abs(pair-rs[2].share) > 4+slack {
				hc.Errorf("a tenant of two processes beside a tenant of one, 50/50 (spinner %v): %.1f%% / %.1f%% of the device, want 50%% ± 3 each and within 4 points of each other (± %.1f, host delays)", load, pair, rs[2].share, slack)
			}
			// Taking turns, one of the two got 6 % of the device, the other 44 %.
			if min(rs[0].share, rs[1].share) < 20-slack {
				hc.Errorf("a tenant of two processes beside a tenant of one, 50/50: the two got %.1f%% and %.1f%% of the device, want ≥ 20%% - %.1f each (host delays)", rs[0].share, rs[1].share, slack)
			}
		}
		// Under a cap their bucket is one: a process idle because it is
		// empty lends nothing, is not taken from and hands nothing over, or
		// the GPU would change hands at every launch (the pair got 24 % of
		// a 30 % cap, 7 % on a busy host, with 115,000 hand-overs).
		e := newEnv(t)
		a := e.spinnerUnder([]string{"--group", "g-capped", "--compute-max", "30%"}, busy...)
		b := e.spinnerUnder([]string{"--group", "g-capped"}, busy...)
		a.start()
		b.start()
		ra, rb := a.result(), b.result()
		if ra.wallMs <= 0 || rb.wallMs <= 0 {
			t.Fatalf("a capped process reported no time: %+v %+v", ra, rb)
		}
		// over the host's time, which the cap earns in (capBand)
		sa, sb := ra.share*ra.elapsedMs/ra.wallMs, rb.share*rb.elapsedMs/rb.wallMs
		lost := 1.3 * (ra.delayedMs*100/ra.wallMs + rb.delayedMs*100/rb.wallMs)
		// The GPU changes hands at the end of a quantum (about 200 in two
		// seconds); before, 19,000 times.
		top := e.run("flexgv", "top", "--once", "--json", "--interval", "100ms")
		var v struct {
			GPUs []struct {
				HandOvers uint64 `json:"hand_overs"`
			} `json:"gpus"`
		}
		if err := json.Unmarshal([]byte(top.stdout), &v); err != nil || len(v.GPUs) == 0 {
			t.Fatalf("flexgv top --once --json: %v, %+v", err, top)
		}
		t.Logf("two GPU-bound processes of one tenant capped at 30%%: %.1f%% / %.1f%% of the device (up to %.1f points lost to host delays), %d hand-overs",
			sa, sb, lost, v.GPUs[0].HandOvers)
		if sa+sb > 32 || sa+sb < 28-lost {
			hc.Errorf("two processes of one tenant capped at 30%% got %.1f%% + %.1f%% of the device, want 30%% ± 2 (- %.1f, host delays)", sa, sb, lost)
		}
		if n := v.GPUs[0].HandOvers; n > 2000 {
			hc.Errorf("two processes of one tenant capped at 30%%: %d hand-overs in two seconds, want at most 2000", n)
		}
		// Taking turns beside another tenant, from the one of them that
		// held last: from the holder, every turn went to the same one of
		// the two (0.4 % and 48.4 % of the device).
		e = newEnv(t)
		a = e.spinnerUnder([]string{"--group", "g-capped-pair", "--compute", "50%", "--compute-max", "50%"}, busy...)
		b = e.spinnerUnder([]string{"--group", "g-capped-pair"}, busy...)
		o := e.spinnerUnder([]string{"--group", "g-beside", "--compute", "50%"}, busy...)
		rs := startAll(a, b, o)
		slack := handoverLoss(rs...) + awakeLoss(rs[0]) + awakeLoss(rs[1]) + awakeLoss(rs[2])
		t.Logf("a tenant of two processes capped at 50%% beside a tenant of one at 50%%: %.1f%% + %.1f%% / %.1f%% of the device", rs[0].share, rs[1].share, rs[2].share)
		if min(rs[0].share, rs[1].share) < 20-slack {
			hc.Errorf("a tenant of two processes capped at 50%% beside another: the two got %.1f%% and %.1f%% of the device, want ≥ 20%% - %.1f each (host delays)", rs[0].share, rs[1].share, slack)
		}
	})
}

// A capped tenant fills no gaps: beside a host-bound equal whose gaps an
// uncapped one would fill, it gets its cap of the device and no more. Its
// bucket is kept only as holder, so a fill would run unpaid (55 % of the
// device against a 20 % cap, without the check).
func TestACappedTenantFillsNoGaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.spinnerUnder([]string{"--compute", "20%", "--compute-max", "20%"}, "2000", "2", "16")
	b := e.spinnerUnder([]string{"--compute", "70%"}, "100", "2", "16", "0", "eager", "200")
	a.start()
	b.start()
	ra, rb := a.result(), b.result()
	if ra.wallMs <= 0 {
		t.Fatalf("the capped tenant reported no time: %+v", ra)
	}
	share := ra.share * ra.elapsedMs / ra.wallMs // over the host's time, which its cap earns in (capBand)
	t.Logf("2 ms kernels capped at 20%%: %.1f%% of the device beside a host-bound tenant at 70%% (%.1f%%)", share, rb.share)
	if share > 20+2 {
		t.Errorf("a tenant capped at 20%% got %.1f%% of the device beside a host-bound one, want at most 20%% + 2", share)
	}
}

// A share holds up to its tenant's cap: at 60 % capped at 60 %, beside a
// tenant at 40 %, it gets its 60 %. Its bucket banks 5 ms, less than what
// it earns in the other's 10 ms quantum: the other's turn ends once the
// bucket has earned half of that back. And the GPU goes to it drained: it
// would pay for the other's work left running. Before, it got 45 % (48 %
// with either change alone), and 30 % at 40 % beside a tenant at 20 %.
func TestACappedShareGetsItsShare(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		cappedBeside(t, hc, 60, []string{"--compute", "60%", "--compute-max", "60%"}, []string{"--compute", "40%"})
	})
}

// cappedBeside runs a GPU-bound tenant under flags, capped at cap %, beside
// one under other, and checks the capped one's part of the host's time (a
// cap earns in it: capBand's bounds, cap ± 2 less host delays); it returns
// the other's report and the points host delays excuse.
func cappedBeside(t *testing.T, hc *hostCheck, cap float64, flags, other []string, spinner ...string) (spin, float64) {
	t.Helper()
	if spinner == nil {
		spinner = []string{"1000", "2", "16"}
	}
	e := newEnv(t)
	got := startAll(e.spinnerUnder(flags, spinner...), e.spinnerUnder(other, spinner...))
	c, o := got[0], got[1]
	if c.wallMs <= 0 {
		t.Fatalf("the capped tenant reported no time: %+v", c)
	}
	share := c.share * c.elapsedMs / c.wallMs
	lost := handoverLoss(c, o)
	what, beside := strings.Join(flags, " "), strings.Join(other, " ")
	t.Logf("%s: %.1f%% of the device; %s: %.1f%% (host delays: %.1f points; spinner %v)", what, share, beside, o.share, lost, spinner)
	if share > cap+2 {
		t.Errorf("%s got %.1f%%, want at most %.0f%% + 2", what, share, cap)
	}
	if share < cap-2-lost {
		hc.Errorf("%s got %.1f%% beside %s, want %.0f%% - 2 - %.1f (host delays)", what, share, beside, cap, lost)
	}
	return o, lost
}

// A tenant of high priority under a cap leaves the GPU to a lower one
// while its bucket cannot pay: at 30 % beside a GPU-bound low tenant, the
// low one gets the rest, less hand-overs. Before, the high one, waiting
// for credit, stayed among those waiting: the low one yielded to it at
// each launch, and it handed the GPU back (30 % and 30 %, the GPU idle the
// rest). Nor does it take the GPU from the low one with work running,
// which its bucket would pay for (21 %): the low one hands over drained, at
// its next launch or synchronization. Both running batches of five 2.66 ms
// products and a synchronization, as PyTorch matrix products do, the high
// one took the GPU a poll after the low one's last launch, while it ran
// (22 %; 23.7 % on an H100).
func TestACappedHighPriorityLeavesTheRest(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		for _, spinner := range [][]string{nil, {"2660", "2", "5", "0", "batch"}} {
			l, lost := cappedBeside(t, hc, 30, []string{"--priority", "high", "--compute-max", "30%"}, []string{"--priority", "low"}, spinner...)
			if l.share < 60-lost {
				hc.Errorf("beside a high-priority tenant capped at 30%%, the low one got %.1f%%, want the rest less 10 points and %.1f (host delays)", l.share, lost)
			}
		}
	})
}

// Two servers of one priority take the GPU from each other at once
// between requests: a holder that synchronized with nothing in flight,
// whose pauses there tend to last, says so until it launches again, and an
// equal waiting takes the GPU then, where it would wait a poll (0.5 ms) to
// see it idle. Two at 50 %, requests of 0.5 ms every 2.5 ms: p50 as alone
// (509 µs against 500); before, 1045 µs.
func TestEqualServersTakeTheGPUAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	server := func(flags ...string) *spinner {
		return e.spinnerUnder(flags, "500", "3", "1", "0", "launch", "2000")
	}
	alone := startAll(server())[0]
	got := startAll(server("--group", "a", "--compute", "50%"), server("--group", "b", "--compute", "50%"))
	for i, r := range got {
		t.Logf("server %d at 50%%: p50 %.0f µs, p99 %.0f µs (alone: %.0f, %.0f)", i, r.p50, r.p99, alone.p50, alone.p99)
		if r.p50 > alone.p50+250 {
			t.Errorf("server %d at 50%% beside another: p50 %.0f µs, want at most its alone %.0f + 250", i, r.p50, alone.p50)
		}
	}
}

// Shares divide what a higher priority leaves: beside a high-priority
// server (500 µs requests every 2.5 ms), tenants at 30 % and 70 % get 30/70
// of the rest. Virtual times are compared within a priority: a newcomer to
// the queue while the server holds the GPU is not brought up to the
// server's (of another weight), which made the two equal. Before: 50/50.
func TestSharesHoldBesideAHigherPriority(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		server := e.spinnerUnder([]string{"--priority", "high"}, "500", "3", "1", "0", "launch", "2000")
		a := e.spinnerUnder([]string{"--compute", "30%"}, "1000", "3", "16")
		b := e.spinnerUnder([]string{"--compute", "70%"}, "1000", "3", "16")
		got := startAll(server, a, b)
		lows := got[1].share + got[2].share
		t.Logf("high-priority server %.1f%% of the device (p50 %.0f µs); --compute 30%% %.1f%%, 70%% %.1f%%: %.1f%% of what they got",
			got[0].share, got[0].p50, got[1].share, got[2].share, got[1].share*100/lows)
		if lows <= 0 {
			t.Fatalf("the tenants under shares got nothing: %+v", got)
		}
		if f := got[1].share * 100 / lows; math.Abs(f-30) > 4 {
			hc.Errorf("beside a high-priority server, the tenant at 30%% got %.1f%% of what the two under shares got, want 30%% ± 4", f)
		}
	})
}

// A high-priority tenant runs as if alone next to a low-priority one, which
// waits while it has work and takes the device back once it is done.
func TestPriorityRunsFirst(t *testing.T) {
	t.Parallel()
	// The low tenant as one process, and as two, which launch side by
	// side in its turns: both keep their work short below the high one,
	// and launch nothing once it wants the GPU.
	for _, lows := range []int{1, 2} {
		hostBound(t, func(hc *hostCheck) {
			e := newEnv(t)
			// The same program alone is the baseline: one kernel in flight, so
			// each host round trip between kernels idles the device, alone too.
			solo := e.spinnerUnder([]string{"--priority", "high"}, "1000", "1", "1")
			solo.start()
			alone := solo.result()
			h, l := e.highBesideLow(lows, "1000", "1", "1")
			t.Logf("high alone: %.1f%%, p99 %.0f µs; next to low (%d processes): %.1f%%, p99 %.0f µs; low: %.1f%% over twice as long",
				alone.share, alone.p99, lows, h.share, h.p99, l.share)
			// Its kernels wait for the low one's only when its host keeps it from
			// launching long enough to look idle (lendLoss); equal priorities would
			// give it about half the device.
			if h.share < alone.share-5-lendLoss(h, h) || h.p50 > 1.1*alone.p50+50 || h.p99 > 4000 {
				hc.Errorf("the high-priority tenant next to a low one of %d processes got %.1f%% (p50 %.0f µs, p99 %.0f µs), want ≥ %.1f%% - 5 - %.1f (host delays); alone %.1f%% (p50 %.0f µs, p99 %.0f µs)",
					lows, h.share, h.p50, h.p99, alone.share, lendLoss(h, h), alone.share, alone.p50, alone.p99)
			}
			// The low one had the device only once the high one was done (about
			// half of its two seconds), or when lent.
			if l.share < 40-awakeLoss(l) || l.share > 60+lendLoss(h, l) {
				hc.Errorf("the low-priority tenant of %d processes got %.1f%% of its run, want ~50%% (the second half): 40 - %.1f to 60 + %.1f (host delays)",
					lows, l.share, awakeLoss(l), lendLoss(h, l))
			}
		})
	}
}

// A holder killed with SIGKILL stalls nobody: its slot's lock goes with it.
// A miss is run again: the other tenant's host stalled outside its run
// queue (blocked on a page fault under the suite's disk load) idles the
// device unexcused.
func TestAKilledHolderStallsNobody(t *testing.T) {
	t.Parallel()
	hostBound(t, func(hc *hostCheck) {
		e := newEnv(t)
		hi := e.spinnerUnder([]string{"--priority", "high"}, "1000", "30", "16")
		// Windows of 100 ms: when the other tenant had the device, if it misses.
		lo := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "2", "16", "100")
		hi.start()
		began := monotonic()
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
		killed := float64((monotonic() - began).Milliseconds())
		r := lo.resultWithin(20 * time.Second)
		// After the kill the other has the device alone but for a poll (its
		// waiter sees the holder's lock gone) and what its host idled; the
		// kill came at most `killed` into its run on the device's clock, which
		// never runs ahead of the host's.
		least := 100*(r.elapsedMs-killed)/r.elapsedMs - 2 - awakeLoss(r)
		t.Logf("after the holder's death at %.0f ms: %.1f%% of the device's %.0f ms (at least %.1f)", killed, r.share, r.elapsedMs, least)
		if r.share < least {
			hc.Errorf("with the high-priority holder killed %.0f ms into a 2 s run, the other tenant got %.1f%%, want ≥ %.1f%% "+
				"(its share by 100 ms of the device's time: %v; on the host's clock %.0f ms, %.0f of them waiting to run)",
				killed, r.share, least, r.windows, r.wallMs, r.delayedMs)
		}
	})
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
	a := e.spinnerUnder([]string{"--group", "a", "--compute", "20%"}, "1000", "4", "16", "250")
	b := e.spinnerUnder([]string{"--group", "b", "--compute", "80%"}, "1000", "4", "16", "250")
	a.start()
	began := monotonic()
	b.start()
	time.Sleep(1200 * time.Millisecond)
	updating := monotonic()
	for _, u := range [][]string{{"b", "--compute", "20%"}, {"a", "--compute", "80%"}} {
		if r := e.run("flexgv", append([]string{"update"}, u...)...); r.code != 0 {
			t.Fatalf("flexgv update %v: %+v", u, r)
		}
	}
	updated := monotonic()
	ra := a.result()
	b.result()
	mean := func(w []float64) float64 {
		s := 0.0
		for _, x := range w {
			s += x
		}
		return s / float64(len(w))
	}
	// Windows the host saw end before the update, and windows that began
	// a window after it (the tenants' virtual times meet again within a
	// window of 250 ms: a quantum's worth of catching up at most).
	beforeW, afterW := splitWindows(ra, 250*time.Millisecond, began, updating, updated-updating, 250*time.Millisecond)
	if len(beforeW) < 2 || len(afterW) < 2 {
		t.Fatalf("windows %v, before the update %v, after %v", ra.windows, beforeW, afterW)
	}
	before, after := mean(beforeW), mean(afterW)
	t.Logf("a: %.1f%% before (%v), %.1f%% after (%v)", before, beforeW, after, afterW)
	if before > 30 || after < 70 {
		t.Errorf("a's share of the device went from %.1f%% to %.1f%% when changed from 20%% to 80%%: %v", before, after, ra.windows)
	}
}

// Under a compute policy, with another tenant on the GPU so that every
// launch, copy and memset takes its turn and is tracked, programs see
// exactly what they see without flexgv: stream capture in every mode, and
// a program that copies, sets and launches on its streams.
func TestComputePolicyChangesNoResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.spinnerUnder([]string{"--compute", "50%"}, "200", "30", "4")
	other.start()
	for _, args := range [][]string{{"captureclient", "modes"}, {"captureclient", "rules"}, {"captureclient", "threads", "8"}, {"direct", "3"}, {"forker"}, {"threads", "8", "200"}} {
		native := e.run(args[0], args[1:]...)
		shimmed := e.run("flexgv", append([]string{"run", "--compute", "50%", "--", bin(args[0])}, args[1:]...)...)
		pids := regexp.MustCompile(`pids[ 0-9]+`) // forker's children differ from run to run
		native.stdout, shimmed.stdout = pids.ReplaceAllString(native.stdout, "pids"), pids.ReplaceAllString(shimmed.stdout, "pids")
		if native.code != 0 || shimmed != native {
			t.Errorf("%v:\nnative (exit %d):\n%s%s\nunder --compute 50%% (exit %d):\n%s%s", args,
				native.code, native.stdout, native.stderr, shimmed.code, shimmed.stdout, shimmed.stderr)
		}
	}
}

// A high-priority server idle between requests lends the device: the low
// tenant gets what it leaves, and each request waits at most for what the
// low one has running.
func TestPriorityLendsIdleTime(t *testing.T) {
	t.Parallel()
	// The low tenant as one process, and as two side by side in its turns
	// (without their own limit below a higher priority, the requests'
	// p50 was 3.4 ms).
	for _, lows := range []int{1, 2} {
		hostBound(t, func(hc *hostCheck) {
			e := newEnv(t)
			alone := e.spinnerUnder([]string{"--priority", "high"}, "500", "1", "1", "0", "launch", "2000")
			alone.start()
			a := alone.result()
			h, l := e.highBesideLow(lows, "500", "2", "1", "0", "launch", "2000")
			t.Logf("high, 500 µs every 2.5 ms: alone p50 %.0f p99 %.0f µs; next to low (%d processes) p50 %.0f p99 %.0f µs; low got %.1f%%",
				a.p50, a.p99, lows, h.p50, h.p99, l.share)
			// Each ms either host is kept from running can idle the device: the
			// low one, a waiter in the shim, takes an idle GPU when its host runs
			// it, and the high one holds its turn until it launches or looks idle.
			if lost := 100 * (l.delayedMs + h.delayedMs) / l.elapsedMs; l.share < 55-lost {
				hc.Errorf("the low-priority tenant of %d processes got %.1f%% of the device next to a server busy ~20%% of the time, want ≥ 55%% - %.1f (host delays)",
					lows, l.share, lost)
			}
			// At most one 1 ms kernel of each low process ahead of a request
			// (bounds for a loaded 2-core machine).
			if n := float64(lows); h.p50 > a.p50+1100*n || h.p99 > a.p99+2500*n {
				t.Errorf("requests next to the low tenant of %d processes: p50 %.0f p99 %.0f µs; alone %.0f / %.0f µs", lows, h.p50, h.p99, a.p50, a.p99)
			}
		})
	}
}

// A tenant that only moves data (synchronous copies and memsets occupy the
// GPU's engines too, 2D, 3D and peer ones among them) takes turns as well: next to a
// higher priority that has work, each of its calls waits until that work
// is done.
func TestPriorityHoldsSynchronousCopies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, abi := range []string{"", "_ptds"} {
		ops := []string{"htod", "dtoh", "dtod", "memcpy", "memset8", "memset16", "memset32", "memset2d", "htod2d", "dtoh2d", "peer", "copy3d"}
		var cs []*spinner
		for _, op := range ops {
			cs = append(cs, e.clientUnder("copier", []string{"--priority", "low"}, "2", op+abi))
		}
		hi := e.spinnerUnder([]string{"--priority", "high"}, "1000", "1", "16")
		for _, c := range cs {
			c.start()
		}
		time.Sleep(200 * time.Millisecond)
		hi.start()
		h := hi.result()
		for i, c := range cs {
			r := c.result()
			t.Logf("%s%s next to 1 s of high-priority kernels (%.1f%% of the device): %d calls, the longest %.0f ms",
				ops[i], abi, h.share, r.ops, r.longest)
			// Sim copies take no time: only the scheduler makes one wait.
			if r.longest < 600 {
				t.Errorf("%s%s of a low-priority tenant went on while a high-priority one ran for 1 s (longest call %.0f ms, %d calls)",
					ops[i], abi, r.longest, r.ops)
			}
		}
	}
}

// A server lends its pauses whichever way it waits for its results: a
// CUDA 13 runtime synchronizes a device through cuCtxSynchronize_v2,
// resolved at version 13000 (a new ABI), and a program may instead read
// each result back with a synchronous copy. Its 1.5 ms pauses are shorter
// than what the low tenant waits before taking an idle GPU itself, so only
// the lending gives it the GPU.
func TestPriorityLendsAfterEachSynchronization(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ api, how string }{
		{"sync13", "synchronized by cuCtxSynchronize_v2"},
		{"copysync", "read back by cuMemcpyDtoH"},
	} {
		t.Run(c.api, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			hi := e.spinnerUnder([]string{"--priority", "high"}, "500", "2", "1", "0", c.api, "1500")
			lo := e.spinnerUnder([]string{"--priority", "low"}, "1000", "2", "16")
			lo.start()
			hi.start()
			h, l := hi.result(), lo.result()
			t.Logf("high, 500 µs every 2 ms, %s: p50 %.0f p99 %.0f µs; low got %.1f%%", c.how, h.p50, h.p99, l.share)
			if l.share < 25 {
				t.Errorf("the low-priority tenant got %.1f%% of the device next to a server busy ~25%% of the time, want ≥ 25%%", l.share)
			}
		})
	}
}

// A server's pauses between requests, after each synchronization, that
// are shorter than what a lower priority waits before taking an idle GPU
// itself, and too short on average to be lent at once (eager inference at
// half its peak rate on an H100 pauses 0.2-0.8 ms): those of a server
// whose requests are bound by its host are taken once they have lasted;
// those of one whose requests wait for the GPU are not, for they would
// wait for the low tenant's kernels.
func TestPriorityTakesTheShortPausesOfAHostBoundServer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, what string
		req, lo    []string
		hostBound  bool
	}{
		// 16 10 µs kernels, each followed by 50 µs of host time; 0.5 ms idle
		{"host-bound", "16 short kernels with host time between, then 0.5 ms idle",
			[]string{"10", "2", "16", "0", "late", "50", "500"}, []string{"200", "2", "16"}, true},
		// two 250 µs kernels, then 0.7 ms idle
		{"gpu-bound", "two 250 µs kernels, then 0.7 ms idle",
			[]string{"250", "2", "2", "0", "eager", "0", "700"}, []string{"1000", "2", "16"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hostBound(t, func(hc *hostCheck) {
				e := newEnv(t)
				alone := e.spinnerUnder([]string{"--priority", "high"}, c.req...)
				alone.start()
				a := alone.result()
				// the server outlasts the low tenant: all the low one gets is beside it
				hi := e.spinnerUnder([]string{"--priority", "high"}, append([]string{c.req[0], "2.5"}, c.req[2:]...)...)
				lo := e.spinnerUnder([]string{"--priority", "low"}, c.lo...)
				hi.start()
				lo.start()
				h, l := hi.result(), lo.result()
				t.Logf("high, %s: alone p50 %.0f p99 %.0f µs; next to low p50 %.0f p99 %.0f µs; low got %.1f%%",
					c.what, a.p50, a.p99, h.p50, h.p99, l.share)
				lost := 100 * (l.delayedMs + h.delayedMs) / l.elapsedMs
				if c.hostBound {
					// each pause is taken 0.3 ms in, counted from the server's
					// synchronization (it wakes the low tenant, which would
					// otherwise look a poll later): the low tenant's 200 µs
					// kernels fill the rest and spill into the next request
					if l.share < 9-lost {
						hc.Errorf("the low-priority tenant got %.1f%% of the device next to a host-bound server idle 0.5 ms between requests, want ≥ 9%% - %.1f (host delays)",
							l.share, lost)
					}
					if h.p50 > a.p50+400 {
						hc.Errorf("host-bound requests next to the low tenant: p50 %.0f µs, alone %.0f µs: more than one of its kernels ahead of each", h.p50, a.p50)
					}
					return
				}
				// taken, each pause would put one of the low tenant's 1 ms
				// kernels ahead of the next request
				if h.p50 > a.p50+200 {
					hc.Errorf("GPU-bound requests next to the low tenant: p50 %.0f µs, alone %.0f µs (the low one got %.1f%%): its pauses were taken",
						h.p50, a.p50, l.share)
				}
			})
		})
	}
}

// Garbage written over a GPU's scheduler while tenants run (it is writable
// by every user on the GPU) may cost them their shares, never their run:
// they go on launching and end.
func TestSchedulerGarbageHangsNobody(t *testing.T) {
	t.Parallel()
	for _, mps := range []bool{false, true} {
		t.Run(fmt.Sprint("mps=", mps), func(t *testing.T) {
			t.Parallel()
			scribbledScheduler(t, mps)
		})
	}
}

// scribbledScheduler runs two tenants while their GPU's scheduler region
// is scribbled over (both MPS clients if mps: then what decides running
// beside a holder is read from the region too).
func scribbledScheduler(t *testing.T, mps bool) {
	var e *env
	if mps {
		var dir string
		e, dir = newMPSEnv(t)
		startMPS(t, e, dir)
	} else {
		e = newEnv(t)
	}
	a := e.spinnerUnder([]string{"--compute", "30%"}, "1000", "1.5", "16")
	b := e.spinnerUnder([]string{"--compute", "70%", "--priority", "high"}, "1000", "1.5", "16")
	a.start()
	b.start()
	r := schedtest.Open(t, e.stateDir(), simUUID0)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		time.Sleep(50 * time.Millisecond)
		r.Scribble(rng)
	}
	// Its readers show what garbage there is, without failing.
	// (names too: bytes that are not UTF-8 or move a terminal's cursor)
	if top := e.run("flexgv", "top", "--once", "--interval", "200ms"); top.code != 0 || strings.Contains(top.stderr, "panic") ||
		!utf8.ValidString(top.stdout) || strings.ContainsAny(top.stdout, "\x1b\x00") {
		t.Errorf("flexgv top over a scribbled scheduler: %+v", top)
	}
	if ps := e.run("flexgv", "ps"); ps.code != 0 {
		t.Errorf("flexgv ps over a scribbled scheduler: %+v", ps)
	}
	for _, s := range []*spinner{a, b} {
		if res := s.resultWithin(30 * time.Second); res.kernels == 0 {
			t.Errorf("a tenant ran no kernel: %+v", res)
		}
	}
}

// A process that finds every process slot of its GPU's scheduler taken
// cannot take turns: its launches are refused, as a tenant whose memory
// quota cannot be set up is refused CUDA; FLEXGV_ON_ERROR=passthrough lets
// them through unscheduled. Either way it says why, once.
func TestAProcessWithoutASchedulerSlot(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
		said string
		runs bool
	}{
		{"refused", nil, "its launches, copies and memsets are refused (FLEXGV_ON_ERROR=passthrough runs them unscheduled)", false},
		{"passthrough", []string{"FLEXGV_ON_ERROR=passthrough"}, "its launches are not scheduled", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, append([]string{"FLEXGV_SIM_DEVICES=2"}, c.env...)...)
			s := e.spinnerUnder([]string{"--compute", "0=50%,1=50%"}, "1000", "0.3", "4", "0", "after1")
			r := schedtest.Open(t, e.stateDir(), simUUID0)
			for i := 0; i < sched.MaxSlots; i++ {
				r.Process(i, 0, int32(100000+i), false)
			}
			s.start()
			res, err := s.report()
			msg := "has no free process slot; " + c.said
			if strings.Count(s.stderr(), msg) != 1 {
				t.Errorf("stderr %q; want %q once", s.stderr(), msg)
			}
			if c.runs && (err != nil || res.kernels == 0) {
				t.Errorf("unscheduled spinner: %v, %+v", err, res)
			}
			if !c.runs && (err == nil || !strings.Contains(s.stderr(), "failed: 800")) {
				t.Errorf("refused spinner: %v, %+v, stderr %q; want its launch failed with CUDA_ERROR_NOT_PERMITTED (800)", err, res, s.stderr())
			}
		})
	}
}

// A holder that is gone leaves its turn to whoever comes next, and the
// time the GPU then sat unheld is charged to nobody: a tenant that takes
// the GPU from a process long dead has held no more than it ran, whether
// its process took the dead one's slot or another.
func TestTimeAfterAHolderExitsIsNobodys(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"its slot taken again", "another slot"} {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if c == "its slot taken again" {
				first := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "0.2", "4")
				first.start()
				first.result()
				time.Sleep(1500 * time.Millisecond)
			}
			a := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "1", "4")
			b := e.spinnerUnder([]string{"--compute", "50%"}, "1000", "1", "4")
			if c == "another slot" {
				// A holder of tenant entry 0 in the last slot, dead, its
				// time unpaid for the last five seconds.
				r := schedtest.Open(t, e.stateDir(), simUUID0)
				r.Process(sched.MaxSlots-1, 0, 99999, true).Close()
				var now unix.Timespec
				unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
				r.HeldSince(uint64(now.Nano()) - 5e9)
			}
			started := time.Now()
			a.start()
			b.start()
			time.Sleep(500 * time.Millisecond)
			g, err := sched.Read(e.stateDir(), simUUID0)
			ran := time.Since(started)
			if err != nil || g == nil {
				t.Fatalf("the scheduler region: %+v, %v", g, err)
			}
			for _, ts := range g.Tenants {
				if held := time.Duration(ts.HeldNs); held > ran+100*time.Millisecond {
					t.Errorf("tenant %s has held the GPU %v in the %v since it started", ts.Name, held, ran)
				}
			}
			a.result()
			b.result()
		})
	}
}

// What a process counts in flight (what a hand-over drains and other
// tenants' waiters go by) follows each stream, not the order of launch: a
// long kernel launched between two short ones on another stream is still
// counted once they are done, whichever streams they are. A process looks
// at completions a few at a time, taking a completion for one of all
// launched before it on its stream.
func TestInFlightFollowsEachStream(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"streams", "legacy", "perthread"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// Another tenant present: its launches are scheduled, and tracked.
			other := e.spinnerUnder([]string{"--priority", "low"}, "100", "10", "1", "0", "launch", "200000")
			other.start()
			l := e.clientUnder("lanes", []string{"--priority", "high"}, mode, "3000")
			l.start()
			if line := <-l.lines; line != "queued" {
				t.Fatalf("lanes %s: %q, %s", mode, line, l.stderr())
			}
			g, err := sched.Read(e.stateDir(), simUUID0)
			if err != nil || g == nil {
				t.Fatalf("the scheduler region: %+v, %v", g, err)
			}
			seen := false
			for _, ts := range g.Tenants {
				if ts.Policy.Priority != sched.PriorityHigh {
					continue
				}
				seen = true
				if ts.InFlight != 1 {
					t.Errorf("%s: with a 3 s kernel running and the short kernels of another stream done, %d launches counted in flight, want 1",
						mode, ts.InFlight)
				}
			}
			if !seen {
				t.Errorf("%s: the tenant is not on the GPU's scheduler: %+v", mode, g.Tenants)
			}
			l.start()
			if err := l.cmd.Wait(); err != nil {
				t.Fatalf("lanes %s: %v, %s", mode, err, l.stderr())
			}
		})
	}
}

// A holder with another tenant present, or a capped one, looks at its
// launches' completions a few at a time, not one event query per launch
// (1.4 µs each on an H200, a third of an empty kernel's launch): where
// empty kernels complete as fast as they are launched, and where 5 µs
// kernels queue up behind the GPU (the search for the last completion
// starts where the time since says; it cost 0.49 a launch from the
// oldest). A throttled cap, which waits for its oldest launch at each
// launch, stays well under a query a launch too (0.32-0.53 on a busy
// 2-core host, as the host's scheduling of the launching thread varies).
func TestAHolderQueriesFewEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		what, kernelUS, mode string
		flags                []string
		other                bool
		most                 float64
	}{
		{"beside another tenant, empty kernels", "0", "queries", []string{"--priority", "high"}, true, 0.2},
		{"beside another tenant, kernels queued behind the GPU", "5", "deep", []string{"--priority", "high"}, true, 0.2},
		{"capped alone, kernels queued behind the GPU", "5", "deep", []string{"--compute-max", "100%"}, false, 0.2},
		{"throttled by its cap, kernels queued behind the GPU", "5", "deep", []string{"--compute-max", "50%"}, false, 0.6},
	} {
		e := newEnv(t, "FLEXGV_SIM_KERNEL_US="+c.kernelUS)
		if c.other {
			other := e.spinnerUnder([]string{"--priority", "low"}, "100", "10", "1", "0", "launch", "200000")
			other.start()
		}
		r := e.run("flexgv", append(append([]string{"run"}, c.flags...), "--", bin("launchloop"), c.mode, "40000")...)
		var per float64
		if _, err := fmt.Sscanf(r.stdout, "event_queries_per_launch %g", &per); err != nil || r.code != 0 {
			t.Fatalf("launchloop: %+v", r)
		}
		t.Logf("%s: event queries per launch: %.3f", c.what, per)
		if per > c.most {
			t.Errorf("a holder %s made %.3f event queries per launch, want ≤ %g", c.what, per, c.most)
		}
	}
}
