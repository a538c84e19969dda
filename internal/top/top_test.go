package top

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/schedtest"
	"github.com/flexgv/flexgv/internal/tenant"
)

const (
	uuidA = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
	uuidB = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
)

var devices = []gpuinfo.Device{
	{Index: 0, Name: "Test GPU", UUID: uuidA, Total: 16 << 30, Used: 3 << 30, Util: 87},
	{Index: 1, Name: "Test GPU", UUID: uuidB, Total: 16 << 30},
}

// node is a state folder with two tenants taking turns on GPU 0 (infer,
// 30 % at high priority, holding it; train, 50 %) and one with memory only
// there; the returned region is GPU 0's, to count on.
func node(t *testing.T) (Source, *schedtest.Region, [2]int) {
	t.Helper()
	dir := t.TempDir()
	var idx [2]int
	for i, p := range []struct {
		name   string
		policy sched.Policy
		quota  uint64
	}{
		{"infer", sched.Policy{Share: 3000, Priority: sched.PriorityHigh}, 1 << 30},
		{"train", sched.Policy{Share: 5000, Cap: 9000, Priority: sched.PriorityNormal}, 0}, // under MPS at 40 % of the SMs
		{"mem", sched.Policy{Priority: sched.PriorityNormal}, 2 << 30},
	} {
		sm := uint32(0)
		if p.name == "train" {
			sm = 40
		}
		tn, err := tenant.Acquire(dir, tenant.Spec{Name: p.name, Priority: p.policy.Priority, CtxBytes: 64 << 20, SM: sm,
			Devices: []tenant.DeviceQuota{{UUID: uuidA, Quota: p.quota, ComputeShare: p.policy.Share, ComputeMax: p.policy.Cap}, {UUID: uuidB}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tn.Release() })
		if !p.policy.Active() {
			continue
		}
		m, err := sched.Join(dir, uuidA, p.name, p.policy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		idx[i] = m.Index
	}
	r := schedtest.Open(t, dir, uuidA)
	r.Process(0, idx[0], 100, true)
	r.Process(1, idx[1], 200, false)
	r.Process(2, idx[1], 201, false)
	return Source{Dir: dir, Devices: func() ([]gpuinfo.Device, error) { return devices, nil }}, r, idx
}

// Two snapshots a second apart, infer having held the GPU 0.3 s of it and
// train 0.6 s, train waiting 0.4 s and losing 2 turns.
func twoSnapshots(t *testing.T) (Snapshot, Snapshot) {
	t.Helper()
	src, r, idx := node(t)
	r.Run(idx[0], 5_000_000_000, 0, 0)
	r.Switch(10)
	first, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	r.Run(idx[0], 300_000_000, 0, 0)
	r.Run(idx[1], 600_000_000, 400_000_000, 2)
	r.Switch(7)
	second, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	second.At = first.At.Add(time.Second)
	return first, second
}

func row(t *testing.T, out, re string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^` + re + `\s*$`).MatchString(out) {
		t.Errorf("no row matching %q in:\n%s", re, out)
	}
}

func TestRenderShowsTargetsAndAchievedShares(t *testing.T) {
	first, second := twoSnapshots(t)
	out := Render(&first, second)
	row(t, out, `GPU 0  `+uuidA+`  Test GPU  memory 3GiB/16GiB  utilization 87%  hand-overs 17`)
	row(t, out, `  TENANT\s+SHARE\s+ACHIEVED\s+CAP\s+PRIORITY\s+SMS\s+MEMORY\s+PROCS\s+THROTTLED\s+PREEMPTED`)
	// 30 % of 20 characters: 6 achieved, the target on the 6th.
	row(t, out, `  infer \*\s+30%\s+\[#####\|\.{14}\]\s+30\.0%\s+-\s+high\s+-\s+0B/1GiB\s+1\s+0\.0s \(0\.0%\)\s+0`)
	row(t, out, `  train\s+50%\s+\[#{9}\|##\.{8}\]\s+60\.0%\s+90%\s+normal\s+40%\s+0B\s+2\s+0\.4s \(40\.0%\)\s+2`)
	row(t, out, `  mem\s+-\s+-\s+-\s+-\s+normal\s+-\s+0B/2GiB\s+0\s+-\s+-`)
	row(t, out, `GPU 1  `+uuidB+`  Test GPU  memory 0B/16GiB  utilization 0%  hand-overs 0`)
	row(t, out, `  no tenant`)
	if !strings.Contains(out, "achieved over the last 1.0s") {
		t.Errorf("no interval in:\n%s", out)
	}
	// Without an earlier snapshot nothing is achieved yet.
	out = Render(nil, second)
	row(t, out, `  infer \*\s+30%\s+\[\.{5}\|\.{14}\]\s+-\s+-\s+high\s+-\s+0B/1GiB\s+1\s+0\.0s\s+0`)
}

// A tenant whose requests found lower priorities beside them costly (under
// MPS) says for how much longer they take turns with it instead; a time
// further ahead than a shim sets (garbage in the region) is not shown.
func TestRenderShowsLowerPrioritiesKeptOff(t *testing.T) {
	src, r, _ := node(t)
	r.SetBesideOff("infer", 7500*time.Millisecond)
	snap, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	row(t, Render(nil, snap), `  infer \*\s+30%\s+\S+\s+-\s+-\s+high \(turns 8s\)\s+-\s+0B/1GiB\s+1\s+0\.0s\s+0`)
	var b strings.Builder
	if err := WriteJSON(&b, nil, snap); err != nil || !strings.Contains(b.String(), `"beside_off_ns": 74`) {
		t.Errorf("flexgv top --json: %v, want infer's beside_off_ns near 7.5 s:\n%s", err, b.String())
	}
	r.SetBesideOff("infer", time.Hour)
	if snap, err = src.Read(); err != nil {
		t.Fatal(err)
	}
	row(t, Render(nil, snap), `  infer \*\s+30%\s+\S+\s+-\s+-\s+high\s+-\s+0B/1GiB\s+1\s+0\.0s\s+0`)
}

// A tenant whose entry was made again (its counters start at zero) has no
// rate for the interval, rather than a huge one.
func TestRatesAcrossACounterRestart(t *testing.T) {
	first, second := twoSnapshots(t)
	first.GPUs[0].Tenants[2].HeldNs = 1 << 40
	if r := rates(&first, uuidA, second.GPUs[0].Tenants[2], second.At); r.Achieved == r.Achieved {
		t.Errorf("train after a restart of its counters: %+v, want NaN", r)
	}
}

func TestOncePrintsOneSnapshot(t *testing.T) {
	src, _, _ := node(t)
	var b strings.Builder
	if err := Once(context.Background(), src, 50*time.Millisecond, &b, false); err != nil {
		t.Fatal(err)
	}
	row(t, b.String(), `  train\s+50%\s+\[\.{9}\|\.{10}\]\s+0\.0%\s+90%\s+normal\s+40%\s+0B\s+2\s+0\.0s \(0\.0%\)\s+0`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Once(ctx, src, time.Hour, &b, false); !errors.Is(err, context.Canceled) {
		t.Errorf("Once with its context done: %v", err)
	}
	bad := Source{Dir: src.Dir, Devices: func() ([]gpuinfo.Device, error) { return nil, errors.New("NVML: driver not loaded") }}
	b.Reset()
	if err := Once(context.Background(), bad, time.Millisecond, &b, false); err != nil || !strings.Contains(b.String(), "no NVML figures: NVML: driver not loaded") {
		t.Errorf("without NVML: %v\n%s", err, b.String())
	}
	row(t, b.String(), `GPU `+uuidA+`  hand-overs 0`)
}

// The live view: each snapshot shows rates over the one before, a failed
// read keeps the last view with the error, q quits.
func TestModel(t *testing.T) {
	first, second := twoSnapshots(t)
	reads := 0
	m := model{read: func() (Snapshot, error) { reads++; return first, nil }, interval: time.Second}
	if msg := m.Init()(); msg.(sampled).snap.At != first.At || reads != 1 {
		t.Fatalf("the first command reads a snapshot: %+v", msg)
	}
	if v := m.View(); !strings.Contains(v.Content, "reading the state folder") || !v.AltScreen {
		t.Errorf("before the first snapshot: %+v", v)
	}
	var next tea.Cmd
	var tm tea.Model = m
	for _, s := range []Snapshot{first, second} {
		tm, next = tm.Update(sampled{snap: s})
		if next == nil {
			t.Fatal("no next snapshot scheduled")
		}
	}
	if got, want := tm.View().Content, Render(&first, second); !strings.HasPrefix(got, want) {
		t.Errorf("view:\n%s\nwant:\n%s", got, want)
	}
	tm, _ = tm.Update(sampled{err: errors.New("state folder: permission denied")})
	if got := tm.View().Content; !strings.HasPrefix(got, Render(&first, second)) || !strings.Contains(got, "flexgv top: state folder: permission denied") {
		t.Errorf("after a failed read:\n%s", got)
	}
	_, quit := tm.Update(tea.KeyPressMsg{Code: 'q', Text: "q"})
	if quit == nil {
		t.Fatal("q does not quit")
	}
	if _, ok := quit().(tea.QuitMsg); !ok {
		t.Errorf("q: %T", quit())
	}
	if _, cmd := tm.Update(tea.KeyPressMsg{Code: 'x', Text: "x"}); cmd != nil {
		t.Errorf("x does something: %T", cmd())
	}
}

// A tenant never achieves more than all of the GPU's time, even when its
// counters moved a little more than the snapshots' clocks.
func TestAchievedAtMostAll(t *testing.T) {
	first, second := twoSnapshots(t)
	second.GPUs[0].Tenants[0].HeldNs = first.GPUs[0].Tenants[0].HeldNs + 1_001_000_000
	if r := rates(&first, uuidA, second.GPUs[0].Tenants[0], second.At); r.Achieved != 1 {
		t.Errorf("infer held 1.001 s of 1 s: achieved %v, want 1", r.Achieved)
	}
	row(t, Render(&first, second), `  infer \*\s+30%\s+\[#{5}\|#{14}\]\s+100\.0%.*`)
}

// The snapshot's time is when the schedulers were read, after NVML: a slow
// NVML does not shorten the interval the holder's turn is measured over.
func TestSnapshotTimedAfterNVML(t *testing.T) {
	src, _, _ := node(t)
	var answered time.Time
	src.Devices = func() ([]gpuinfo.Device, error) {
		time.Sleep(10 * time.Millisecond)
		answered = time.Now()
		return devices, nil
	}
	s, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	if s.At.Before(answered) {
		t.Errorf("snapshot taken at %v, before NVML answered at %v", s.At, answered)
	}
}

func TestWriteJSON(t *testing.T) {
	first, second := twoSnapshots(t)
	var b strings.Builder
	if err := WriteJSON(&b, &first, second); err != nil {
		t.Fatal(err)
	}
	var v jsonView
	if err := json.Unmarshal([]byte(b.String()), &v); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if v.Interval != 1 || len(v.GPUs) != 2 || v.GPUs[0].UUID != uuidA || v.GPUs[0].MemTotal != 16<<30 || v.GPUs[0].HandOvers != 17 {
		t.Fatalf("GPUs: %s", b.String())
	}
	ts := v.GPUs[0].Tenants
	if len(ts) != 3 || ts[0].Name != "infer" || ts[0].Share != 3000 || ts[0].Achieved == nil || *ts[0].Achieved != 0.3 ||
		!ts[0].Holder || ts[0].Quota != 1<<30 {
		t.Errorf("infer: %+v", ts[0])
	}
	if ts[2].Name != "train" || ts[2].Throttled == nil || *ts[2].Throttled != 0.4 || ts[2].Preemptions != 2 || ts[2].SM != 40 {
		t.Errorf("train: %+v", ts[2])
	}
	if ts[1].Name != "mem" || ts[1].Achieved != nil || ts[1].Scheduled {
		t.Errorf("mem, not scheduled, has no rate: %+v", ts[1])
	}
	if len(v.GPUs[1].Tenants) != 0 || !strings.Contains(b.String(), `"tenants": []`) {
		t.Errorf("GPU 1 has no tenant: %s", b.String())
	}
}
