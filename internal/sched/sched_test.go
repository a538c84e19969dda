package sched

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const gpu = "GPU-11111111-2222-3333-4444-555555555555"

// mapped maps GPU gpu's region in dir, as a shim does, for the test's
// length.
func mapped(t *testing.T, dir string) []byte {
	t.Helper()
	f, err := os.OpenFile(Path(dir, gpu), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(regionSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// heldNs is tenant entry i of GPU gpu's region in dir.
func heldNs(t *testing.T, dir string, i int) *Tenant {
	return &(*Header)(unsafe.Pointer(&mapped(t, dir)[0])).Tenants[i]
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	g, err := Read(dir, gpu)
	if err != nil || g == nil {
		t.Fatalf("Read: %v, %v", g, err)
	}
	var n []string
	for _, x := range g.Tenants {
		n = append(n, x.Name+"="+Percent(x.Policy.Share)+"/"+PriorityName(x.Policy.Priority))
	}
	return n
}

// Shares on one GPU add up to at most 100 %; members of one tenant share
// its entry, which goes with its last member.
func TestJoinSharesAndLeaves(t *testing.T) {
	dir := t.TempDir()
	a, err := Join(dir, gpu, "a", Policy{Share: 7000, Priority: PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(Path(dir, gpu)); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("region %v, %v; want mode 0666 whatever the umask", st, err)
	}
	_, err = Join(dir, gpu, "b", Policy{Share: 4000, Priority: PriorityNormal})
	if err == nil || !strings.Contains(err.Error(), "shares would add up to 110% (a 70%, and b asks 40%); the most is 100%") {
		t.Errorf("a share over what is left: %v", err)
	}
	b, err := Join(dir, gpu, "b", Policy{Share: 3000, Priority: PriorityHigh})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := Join(dir, gpu, "a", Policy{Share: 100})
	if err != nil || a2.Index != a.Index {
		t.Fatalf("a second member of a: %+v, %v; want entry %d", a2, err, a.Index)
	}
	if got := strings.Join(names(t, dir), " "); got != "a=70%/normal b=30%/high" {
		t.Errorf("tenants %q", got)
	}
	a.Close()
	if got := strings.Join(names(t, dir), " "); got != "a=70%/normal b=30%/high" {
		t.Errorf("with a member of a left: %q", got)
	}
	a2.Close()
	if got := strings.Join(names(t, dir), " "); got != "b=30%/high" {
		t.Errorf("with a gone: %q", got)
	}
	// What a left is free again.
	c, err := Join(dir, gpu, "c", Policy{Share: 7000})
	if err != nil {
		t.Errorf("a share of what a left: %v", err)
	} else {
		c.Close()
	}
	// b back after a time without members: its entry, counters and all.
	atomic.StoreUint64(&heldNs(t, dir, b.Index).HeldNs, 12345)
	b.Close()
	b2, err := Join(dir, gpu, "b", Policy{Share: 2000, Priority: PriorityHigh})
	if err != nil || b2.Index != b.Index || heldNs(t, dir, b2.Index).HeldNs != 12345 {
		t.Errorf("b joined again: %+v, %v; want its entry %d with its counters", b2, err, b.Index)
	}
	b2.Close()
}

func TestUpdate(t *testing.T) {
	dir := t.TempDir()
	a, _ := Join(dir, gpu, "a", Policy{Share: 5000, Priority: PriorityNormal})
	b, _ := Join(dir, gpu, "b", Policy{Share: 5000, Priority: PriorityNormal})
	defer a.Close()
	defer b.Close()
	if err := Update(dir, gpu, "a", Policy{Share: 6000}); err == nil || !strings.Contains(err.Error(), "shares would add up to 110%") {
		t.Errorf("raising a over what is left: %v", err)
	}
	if err := Update(dir, gpu, "a", Policy{Share: 2000, Priority: PriorityLow}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names(t, dir), " "); got != "a=20%/low b=50%/normal" {
		t.Errorf("after the update: %q", got)
	}
	if err := Update(dir, gpu, "z", Policy{}); err == nil || !strings.Contains(err.Error(), "tenant z is not scheduled on GPU") {
		t.Errorf("updating a stranger: %v", err)
	}
}

func TestRegionsOfAnotherKindAreLeftOrReplaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir, gpu), []byte("not a region"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Join(dir, gpu, "a", Policy{Share: 1000})
	if err != nil {
		t.Fatalf("an unused file of another kind is replaced: %v", err)
	}
	m.Close()
	if _, err := Join(dir, "GPU-"+strings.Repeat("x", 60), "a", Policy{}); err == nil || !strings.Contains(err.Error(), "not a GPU UUID") {
		t.Errorf("an overlong UUID: %v", err)
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]uint32{"low": PriorityLow, "NORMAL": PriorityNormal, "high": PriorityHigh, "0": 0, "9": 9} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"10", "-1", "urgent", "1.5", " 3", "03"} {
		if _, err := ParsePriority(in); err == nil || !strings.Contains(err.Error(), "use low, normal, high or a number from 0 to 9") {
			t.Errorf("ParsePriority(%q): %v", in, err)
		}
	}
}

// The holder is charged at the end of each quantum or turn; a snapshot
// counts what it has held since, so GPU time held only grows.
func TestReadCountsTheHoldersTurnSoFar(t *testing.T) {
	dir := t.TempDir()
	m, err := Join(dir, gpu, "a", Policy{Share: 5000})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mem := mapped(t, dir)
	f, err := os.OpenFile(Path(dir, gpu), os.O_RDWR, 0) // holds the slot's lock, as its process would
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := (*Header)(unsafe.Pointer(&mem[0]))
	slot := (*Slot)(unsafe.Pointer(&mem[SlotLock(3)]))
	slot.Tenant, slot.Pid, slot.State = uint32(m.Index), 42, SlotClaimed
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: SlotLock(3), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	h.Tenants[m.Index].HeldNs = 1e9
	h.SinceNs = uint64(ts.Nano()) - 2e9
	h.Holder = 4
	g, err := Read(dir, gpu)
	if err != nil || len(g.Tenants) != 1 || !g.Tenants[0].Holder || g.Tenants[0].HeldNs < 3e9 || g.Tenants[0].HeldNs > 4e9 {
		t.Fatalf("a holder that took the GPU 2 s ago after holding it 1 s: %+v, %v", g, err)
	}
	h.SinceNs = 0 // never written: nothing to add
	if g, err := Read(dir, gpu); err != nil || g.Tenants[0].HeldNs != 1e9 {
		t.Errorf("a holder with no start time: %+v, %v", g, err)
	}
}

// Another tenant's share is read as written, however large: sums cannot
// wrap into room that is not there.
func TestJoinWithGarbageShares(t *testing.T) {
	dir := t.TempDir()
	a, err := Join(dir, gpu, "a", Policy{Share: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	heldNs(t, dir, a.Index).Share = 0xffffffff
	if _, err := Join(dir, gpu, "b", Policy{Share: 1000}); err == nil || !strings.Contains(err.Error(), "shares would add up to") {
		t.Errorf("a share next to one of 0xffffffff: %v", err)
	}
}

// scripts/gpu/region_dump.py reads regions by the generated offsets of
// scripts/gpu/sched_layout_gen.py: it must print what the region holds.
func TestRegionDumpScriptAgrees(t *testing.T) {
	if testing.Short() {
		t.Skip("takes many seconds: make test runs it, make check (go test -short) does not")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	if _, err := Join(dir, gpu, "alpha", Policy{Share: 3000}); err != nil {
		t.Fatal(err)
	}
	if _, err := Join(dir, gpu, "beta", Policy{Share: 7000}); err != nil {
		t.Fatal(err)
	}
	mem := mapped(t, dir)
	hdr := (*Header)(unsafe.Pointer(&mem[0]))
	atomic.StoreUint64(&hdr.Switches, 42)
	for i, v := range []struct {
		vtime, held, waited uint64
		hostBound           uint32
	}{{4e9, 1.5e9, 2e9, 9400}, {3e9, 2.5e9, 7e8, 0}} {
		atomic.StoreUint64(&hdr.Tenants[i].VTime, v.vtime)
		atomic.StoreUint64(&hdr.Tenants[i].HeldNs, v.held)
		atomic.StoreUint64(&hdr.Tenants[i].WaitedNs, v.waited)
		atomic.StoreUint32(&hdr.Tenants[i].HostBound, v.hostBound)
	}
	// Two of beta's processes are MPS clients, in the last slot and one
	// freed since; one of alpha's is not.
	for _, p := range []struct{ slot, tenant, state, mps uint32 }{
		{MaxSlots - 1, 1, SlotClaimed, 1}, {7, 1, SlotClaimed, 1}, {8, 1, SlotFree, 1}, {3, 0, SlotClaimed, 0}} {
		sl := (*Slot)(unsafe.Pointer(&mem[SlotLock(int(p.slot))]))
		atomic.StoreUint32(&sl.Tenant, p.tenant)
		atomic.StoreUint32(&sl.MPS, p.mps)
		atomic.StoreUint32(&sl.State, p.state)
	}
	out, err := exec.Command(py, "../../scripts/gpu/region_dump.py", dir).CombinedOutput()
	want := fmt.Sprintf("quantum_us %d switches 42 | alpha share 3000 held 1500 ms charged 1200 ms waited 2000 ms host-bound 0.94 mps 0 | "+
		"beta share 7000 held 2500 ms charged 2100 ms waited 700 ms host-bound 0.00 mps 2\n", hdr.QuantumUs)
	if err != nil || string(out) != want {
		t.Errorf("region_dump.py: %v\n%s\nwant\n%s", err, out, want)
	}
	// A region cut short, or of another version, is said to be, not read.
	bad := t.TempDir()
	short := append([]byte(nil), mem[:100]...)
	other := append([]byte(nil), mem...)
	binary.LittleEndian.PutUint32(other[8:], SchedVersion-1)
	for name, b := range map[string][]byte{"gpu-short": short, "gpu-other": other} {
		if err := os.WriteFile(filepath.Join(bad, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err = exec.Command(py, "../../scripts/gpu/region_dump.py", bad).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gpu-short: 100 bytes, a region has") ||
		!strings.Contains(string(out), fmt.Sprintf("gpu-other: magic 0x%x version %d, not a region of version %d", SchedMagic, SchedVersion-1, SchedVersion)) {
		t.Errorf("region_dump.py over a short region and one of another version: %v\n%s", err, out)
	}
}

// A name or GPU UUID in a region is written by the shims of any user's
// tenants: one a tenant cannot have is shown with '?' for each byte it
// cannot carry (not bytes that break a metric's label or a terminal), and
// a region naming another GPU than its file is refused.
func TestReadShowsGarbageNamesSafely(t *testing.T) {
	dir := t.TempDir()
	a, err := Join(dir, gpu, "a", Policy{Share: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	copy(heldNs(t, dir, a.Index).Name[:], "a\xff\x1b[2J\n\x00")
	if n := names(t, dir); len(n) != 1 || !strings.HasPrefix(n[0], "a???2J?=") {
		t.Errorf("a name with garbage in it read as %q", n)
	}
	h := (*Header)(unsafe.Pointer(&mapped(t, dir)[0]))
	copy(h.UUID[:], "GPU-other\x00")
	if g, err := Read(dir, gpu); err == nil || !strings.Contains(err.Error(), "not the scheduler region of GPU") {
		t.Errorf("a region naming another GPU: %+v, %v", g, err)
	}
}
