package tenant

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

var oneGiB = []DeviceQuota{{UUID: uuidA, Quota: 1 << 30}, {UUID: uuidB}}

func TestAcquireCreatesJoinsAndRefuses(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil || !a.Created {
		t.Fatalf("create: %+v %v", a, err)
	}
	b, err := Acquire(dir, Spec{Name: "g"})
	if err != nil || b.Created || b.Path != a.Path {
		t.Fatalf("join without quota: %+v %v", b, err)
	}
	if _, err := Acquire(dir, Spec{Name: "g", Devices: []DeviceQuota{{UUID: uuidA, Quota: 2 << 30}, {UUID: uuidB}}}); err == nil ||
		!strings.Contains(err.Error(), "already exists with quota 0=1GiB") {
		t.Fatalf("join with another quota: %v", err)
	}
	if _, err := Acquire(dir, Spec{Name: "nope"}); err == nil || !strings.Contains(err.Error(), "give --mem to create it") {
		t.Fatalf("join a missing group: %v", err)
	}
	if _, err := Acquire(dir, Spec{Name: "bad/name", Devices: oneGiB}); err == nil {
		t.Fatal("a name with a slash was accepted")
	}
	if _, err := Acquire(dir, Spec{Name: "s", Devices: oneGiB, SM: 101}); err == nil || !strings.Contains(err.Error(), "an SM percentage of 101") {
		t.Fatalf("an SM percentage over 100: %v", err)
	}
	if _, err := os.Stat(Path(dir, "s")); !os.IsNotExist(err) {
		t.Fatalf("a refused tenant's file: %v", err)
	}
	long := []DeviceQuota{{UUID: "MIG-" + strings.Repeat("0", 44), Quota: 1}}
	if _, err := Acquire(dir, Spec{Name: "h", Devices: long}); err == nil || !strings.Contains(err.Error(), "longer than a tenant file holds") {
		t.Fatalf("a UUID the file cannot hold: %v", err)
	}
	info, err := Read(a.Path)
	want := []DeviceUse{{Index: 0, UUID: uuidA, Quota: 1 << 30}, {Index: 1, UUID: uuidB}}
	if err != nil || info.Name != "g" || info.OwnerUID != uint32(os.Geteuid()) || len(info.Procs) != 0 ||
		len(info.Devices) != 2 || info.Devices[0] != want[0] || info.Devices[1] != want[1] {
		t.Fatalf("read: %+v %v", info, err)
	}
	if st, err := os.Stat(a.Path); err != nil || st.Mode() != fileMode {
		t.Fatalf("tenant file mode: %v %v", st.Mode(), err)
	}
	// The tenant lasts while any member does.
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if infos, _, _ := List(dir); len(infos) != 1 {
		t.Fatalf("the creator left and the group went with it: %+v", infos)
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if infos, bad, err := List(dir); len(infos) != 0 || bad != nil || err != nil {
		t.Fatalf("released tenant still listed: %+v %v %v", infos, bad, err)
	}
	if _, err := os.Stat(a.Path); !os.IsNotExist(err) {
		t.Fatalf("released tenant file: %v", err)
	}
}

// A member that dies without Release (killed CLI) leaves a file nobody
// locks: the next CLI in the folder removes it, and whatever a dead writer
// left aside.
func TestDeadMembersLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil {
		t.Fatal(err)
	}
	a.member.Close()
	stale := filepath.Join(dir, tmpPrefix+"h-123"+tmpSuffix)
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if infos, bad, err := List(dir); len(infos) != 0 || bad != nil || err != nil {
		t.Fatalf("List: %+v %v %v", infos, bad, err)
	}
	for _, p := range []string{a.Path, stale} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
	// A process still using CUDA (its slot locked) keeps the file.
	b, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil || !b.Created {
		t.Fatalf("recreate: %+v %v", b, err)
	}
	defer lockSlot(t, b.Path, 3).Close()
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Path); err != nil {
		t.Fatalf("removed while a process held a slot: %v", err)
	}
}

// lockSlot holds slot i's byte the way the shim does; closing the file
// drops it, like the process dying.
func lockSlot(t *testing.T, p string, i int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: headerSize + int64(i)*slotSize, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	return f
}

// writeSlot stores a slot as the shim would, and raises the high-water mark.
func writeSlot(t *testing.T, p string, i int, s Slot) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(unsafe.Slice((*byte)(unsafe.Pointer(&s)), slotSize), headerSize+int64(i)*slotSize); err != nil {
		t.Fatal(err)
	}
	editHeader(t, p, func(h *Header) { h.SlotHWM = max(h.SlotHWM, uint32(i+1)) })
}

func editHeader(t *testing.T, p string, edit func(*Header)) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize), data)
	edit(&h)
	copy(data, unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize))
	if err := os.WriteFile(p, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// Usage counts claimed slots whose byte a process locks, and nothing else;
// damaged counters saturate instead of wrapping.
func TestReadCountsOnlyLiveSlots(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	big := Slot{State: SlotClaimed, Pid: 11}
	big.Used[0], big.Used[1] = math.MaxUint64-1, 5
	writeSlot(t, a.Path, 0, big)
	writeSlot(t, a.Path, 1, Slot{State: SlotClaimed, Pid: 12, Used: [MaxDevices]uint64{7}}) // dead: not locked
	writeSlot(t, a.Path, 2, Slot{State: SlotFree, Pid: 13, Used: [MaxDevices]uint64{7}})    // locked but free
	writeSlot(t, a.Path, 4, Slot{State: SlotClaimed, Pid: 10, Used: [MaxDevices]uint64{3}})
	for _, i := range []int{0, 2, 4} {
		defer lockSlot(t, a.Path, i).Close()
	}
	info, err := Read(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range info.Procs {
		pids = append(pids, p.Pid)
	}
	if len(pids) != 2 || pids[0] != 10 || pids[1] != 11 {
		t.Errorf("live processes %v, want [10 11]", pids)
	}
	if info.Devices[0].Used != math.MaxUint64 || info.Devices[1].Used != 5 {
		t.Errorf("used %d, %d; want a saturated sum and 5", info.Devices[0].Used, info.Devices[1].Used)
	}
}

// A process's usage is what it charged plus what the driver's own count
// showed beyond that.
func TestReadAddsWhatOnlyTheDriverCounted(t *testing.T) {
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	s := Slot{State: SlotClaimed, Pid: 11}
	s.Used[0], s.Unmodelled[0] = 100, 40
	writeSlot(t, a.Path, 0, s)
	defer lockSlot(t, a.Path, 0).Close()
	info, err := Read(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Devices[0].Used != 140 || len(info.Procs) != 1 || info.Procs[0].Used[0] != 140 {
		t.Errorf("tenant uses %d, process %+v; want 140 both", info.Devices[0].Used, info.Procs)
	}
}

// The state folder is writable by all: whatever is found there is checked,
// and a bad file is an error, never a panic or a hang.
func TestReadRefusesDamagedFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("takes many seconds: make test runs it, make check (go test -short) does not")
	}
	dir := t.TempDir()
	a, err := Acquire(dir, Spec{Name: "g", Devices: oneGiB})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	good, err := os.ReadFile(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "tenant-x")
	fresh := func() {
		t.Helper()
		if err := os.WriteFile(p, append([]byte(nil), good...), 0o640); err != nil {
			t.Fatal(err)
		}
		editHeader(t, p, func(h *Header) { h.Name = [64]byte{'x'} })
	}
	for _, n := range []int{0, 1, 8, int(headerSize) - 1, int(headerSize), len(good) - 1} {
		fresh()
		if err := os.Truncate(p, int64(n)); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("truncated to %d bytes: %v", n, err)
		}
	}
	for _, c := range []struct {
		msg  string
		edit func(*Header)
	}{
		{"not a tenant file", func(h *Header) { h.Magic++ }},
		{fmt.Sprintf("version %d", TenantVersion+1), func(h *Header) { h.Version = TenantVersion + 1 }},
		{"SM percentage 101", func(h *Header) { h.SM = 101 }},
		{"4097 slots", func(h *Header) { h.NSlots = MaxSlots + 1 }},
		{"truncated", func(h *Header) { h.NSlots = MaxSlots }},
		{"17 devices", func(h *Header) { h.NDevices = MaxDevices + 1 }},
		{"name does not match", func(h *Header) { h.Name = [64]byte{'y'} }},
		{"name does not match", func(h *Header) { copy(h.Name[:], strings.Repeat("x", 64)) }},
		{"device 1 has no valid UUID", func(h *Header) { copy(h.Devices[1].UUID[:], strings.Repeat("a", 48)) }},
		{"device 0 has no valid UUID", func(h *Header) { h.Devices[0].UUID[3] = '\n' }},
	} {
		fresh()
		editHeader(t, p, c.edit)
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v", c.msg, err)
		}
	}
	// A high-water mark past the slots is only read up to them.
	fresh()
	editHeader(t, p, func(h *Header) { h.SlotHWM = math.MaxUint32 })
	if _, err := Read(p); err != nil {
		t.Errorf("high-water mark past the slots: %v", err)
	}
	// Random bytes; half of them behind a valid header with one byte of
	// its counts changed, so that the slots are read too.
	fresh()
	header, _ := os.ReadFile(p)
	header = header[:headerSize]
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		data := make([]byte, rng.Intn(2*len(good)))
		rng.Read(data)
		if i%2 == 0 && len(data) >= len(header) {
			copy(data, header)
			data[8+rng.Intn(16)] = byte(rng.Intn(256))
		}
		if err := os.WriteFile(p, data, 0o640); err != nil {
			t.Fatal(err)
		}
		Read(p)
	}
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
	os.Remove(p)
	os.Symlink(a.Path, p)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symbolic link: %v", err)
	}
	// List skips them all and says why; the good tenant is still listed.
	infos, bad, err := List(dir)
	if err != nil || len(infos) != 1 || infos[0].Name != "g" || len(bad) != 1 || !strings.Contains(bad[0].Error(), "tenant-x") {
		t.Errorf("List: %+v, %v, %v", infos, bad, err)
	}
}
