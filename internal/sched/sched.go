// Package sched owns the GPU scheduler regions: one file per GPU
// (gpu-UUID in the state folder) through which the shims of every tenant
// with a compute policy on that GPU take turns (see
// include/flexgv/sched_layout_gen.h and shim/sched.c). The control plane
// creates a region, adds a tenant entry when a tenant with a compute policy
// starts using the GPU, holds a read lock on the entry for as long as the
// tenant lives (the kernel drops it if the holder dies), changes a tenant's
// policy live, and reads what the scheduler did for metrics.
package sched

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/liveness"
)

const (
	filePrefix = "gpu-"
	fileMode   = 0o666 // every user's tenants take turns on the GPU
	// DefaultQuantum is a holder's turn under contention: above the
	// hardware's ~2 ms time slice, short enough for shares to converge in
	// well under a second.
	DefaultQuantum = 10 * time.Millisecond
	// fullShare is 100 % in the region's hundredths of a percent.
	fullShare = 10000
)

var (
	headerSize = int64(unsafe.Sizeof(Header{}))
	tenantSize = int64(unsafe.Sizeof(Tenant{}))
	slotSize   = int64(unsafe.Sizeof(Slot{}))
	regionSize = headerSize + MaxSlots*slotSize
	tenantsOff = int64(unsafe.Offsetof(Header{}.Tenants))
)

// Path is where GPU uuid's region is in dir.
func Path(dir, uuid string) string { return filepath.Join(dir, filePrefix+uuid) }

// TenantLock is the byte a tenant entry's members hold a read lock on.
func TenantLock(i int) int64 { return tenantsOff + int64(i)*tenantSize }

// SlotLock is the byte a process on the GPU holds a write lock on.
func SlotLock(i int) int64 { return headerSize + int64(i)*slotSize }

// Policy is what a tenant asks of a GPU's time. Share and Cap are in
// hundredths of a percent (0: none); Priority runs from 0 to PriorityMax.
type Policy struct {
	Share, Cap, Priority uint32
}

// Active reports whether the policy asks for scheduling at all.
func (p Policy) Active() bool {
	return p.Share != 0 || p.Cap != 0 || p.Priority != PriorityNormal
}

// ParsePriority reads --priority: low, normal, high or 0 to PriorityMax.
func ParsePriority(s string) (uint32, error) {
	switch strings.ToLower(s) {
	case "low":
		return PriorityLow, nil
	case "normal", "":
		return PriorityNormal, nil
	case "high":
		return PriorityHigh, nil
	}
	var n uint32
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n > PriorityMax {
		return 0, fmt.Errorf("--priority %q: use low, normal, high or a number from 0 to %d (higher runs first)", s, PriorityMax)
	}
	return n, nil
}

// PriorityName is how a priority is shown.
func PriorityName(p uint32) string {
	switch p {
	case PriorityLow:
		return "low"
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	}
	return fmt.Sprint(p)
}

// region is a mapped GPU region; admin is held while it is in use.
type region struct {
	f   *os.File
	mem []byte
	hdr *Header
}

func (r *region) close() {
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
	r.f.Close()
}

func (r *region) slot(i int) *Slot {
	return (*Slot)(unsafe.Pointer(&r.mem[SlotLock(i)]))
}

// open maps GPU uuid's region in dir with its admin lock taken, creating
// it (or replacing one of another version that nobody uses) if needed.
func open(dir, uuid string) (*region, error) {
	if len(uuid) == 0 || len(uuid) >= len(Header{}.UUID) {
		return nil, fmt.Errorf("GPU UUID %q: not a GPU UUID this flexgv can key a scheduler by", uuid)
	}
	p := Path(dir, uuid)
	for attempt := 0; attempt < 3; attempt++ {
		f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if errors.Is(err, os.ErrNotExist) {
			if err := create(dir, p, uuid); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("GPU scheduler %s: %w", p, err)
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: AdminLock, Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk); err != nil {
			f.Close()
			return nil, fmt.Errorf("GPU scheduler %s: locking: %w", p, err)
		}
		r, err := mapRegion(f, uuid)
		if err == nil {
			return r, nil
		}
		// Not ours to read: replace it only if nobody else uses it.
		held, herr := liveness.Held(f, 1, 0)
		f.Close()
		if herr != nil || held {
			return nil, fmt.Errorf("GPU scheduler %s: %v (in use: it stays)", p, err)
		}
		os.Remove(p)
	}
	return nil, fmt.Errorf("GPU scheduler %s: keeps changing under us", p)
}

func mapRegion(f *os.File, uuid string) (*region, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() < regionSize {
		return nil, fmt.Errorf("not a scheduler region of this flexgv (size %d)", st.Size())
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(regionSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	r := &region{f: f, mem: mem, hdr: (*Header)(unsafe.Pointer(&mem[0]))}
	if r.hdr.Magic != SchedMagic || r.hdr.Version != SchedVersion || cstr(r.hdr.UUID[:]) != uuid {
		unix.Munmap(mem)
		r.mem = nil
		return nil, fmt.Errorf("not a scheduler region of this flexgv for %s", uuid)
	}
	return r, nil
}

// create writes a fresh region aside and links it into place: a racing
// creator's link fails and both then open the one that won.
func create(dir, p, uuid string) error {
	f, err := os.CreateTemp(dir, ".gpu-*.tmp")
	if err != nil {
		return fmt.Errorf("GPU scheduler for %s: %w", uuid, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := Header{Magic: SchedMagic, Version: SchedVersion, QuantumUs: uint32(DefaultQuantum / time.Microsecond),
		CreatedNs: uint64(time.Now().UnixNano())}
	copy(h.UUID[:], uuid)
	buf := make([]byte, regionSize)
	copy(buf, unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize))
	if err := f.Chmod(fileMode); err != nil { // the umask must not decide who takes turns
		return fmt.Errorf("GPU scheduler for %s: %w", uuid, err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("GPU scheduler for %s: %w", uuid, err)
	}
	if err := os.Link(f.Name(), p); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("GPU scheduler for %s: %w", uuid, err)
	}
	return nil
}

func cstr(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// live reports whether tenant entry i has a member. The probe goes through
// a descriptor of its own: ours may hold the very lock it looks for.
func (r *region) live(i int) bool {
	f, err := os.Open(r.f.Name())
	if err != nil {
		return false
	}
	defer f.Close()
	held, err := liveness.Held(f, TenantLock(i), 1)
	return err == nil && held
}

// Member is a tenant's membership of a GPU's scheduler, from Join to Close.
type Member struct {
	f     *os.File
	Index int // the tenant's entry
}

// Close ends the membership; the entry lives on while other members do.
func (m *Member) Close() error { return m.f.Close() }

// Join makes the tenant name a member of GPU uuid's scheduler in dir, with
// policy p if it is new there; a tenant that is already there keeps its
// policy. Shares of the GPU's tenants may not add up to more than 100 %.
func Join(dir, uuid, name string, p Policy) (*Member, error) {
	r, err := open(dir, uuid)
	if err != nil {
		return nil, err
	}
	defer r.close()
	idx, free, again := -1, -1, -1
	var sum uint64 // of other tenants' words: wide enough for any garbage
	var others []string
	for i := range r.hdr.Tenants {
		t := &r.hdr.Tenants[i]
		if !r.live(i) {
			if free < 0 {
				free = i
			}
			if again < 0 && cstr(t.Name[:]) == name {
				again = i
			}
			continue
		}
		if cstr(t.Name[:]) == name {
			idx = i
			continue
		}
		share := atomic.LoadUint32(&t.Share)
		sum += uint64(share)
		if share > 0 {
			others = append(others, fmt.Sprintf("%s %s", cstr(t.Name[:]), Percent(share)))
		}
	}
	if idx < 0 {
		if free < 0 {
			return nil, fmt.Errorf("GPU %s already schedules %d tenants, the most it can", uuid, MaxTenants)
		}
		if p.Share > 0 && sum+uint64(p.Share) > fullShare {
			return nil, fmt.Errorf("GPU %s: shares would add up to %s (%s, and %s asks %s); the most is 100%%",
				uuid, Percent64(sum+uint64(p.Share)), strings.Join(others, ", "), name, Percent(p.Share))
		}
		if again >= 0 {
			// Back after a while without members (a restarted daemon): the
			// same entry, its counters going on.
			idx = again
		} else {
			idx = free
			t := &r.hdr.Tenants[idx]
			*t = Tenant{}
			copy(t.Name[:], name)
			atomic.StoreUint64(&t.VTime, atomic.LoadUint64(&r.hdr.VClock))
		}
		set(&r.hdr.Tenants[idx], p)
	}
	f, err := os.OpenFile(r.f.Name(), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err == nil {
		err = liveness.Share(f, TenantLock(idx))
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("GPU scheduler %s: %w", r.f.Name(), err)
	}
	return &Member{f: f, Index: idx}, nil
}

func set(t *Tenant, p Policy) {
	atomic.StoreUint32(&t.Share, p.Share)
	atomic.StoreUint32(&t.Cap, p.Cap)
	atomic.StoreUint32(&t.Priority, p.Priority)
}

// Update changes a live tenant's policy on GPU uuid: its processes follow
// at their next hand-over or launch.
func Update(dir, uuid, name string, p Policy) error {
	r, err := open(dir, uuid)
	if err != nil {
		return err
	}
	defer r.close()
	idx := -1
	var sum uint64 // of other tenants' words: wide enough for any garbage
	for i := range r.hdr.Tenants {
		if !r.live(i) {
			continue
		}
		t := &r.hdr.Tenants[i]
		if cstr(t.Name[:]) == name {
			idx = i
		} else {
			sum += uint64(atomic.LoadUint32(&t.Share))
		}
	}
	if idx < 0 {
		return fmt.Errorf("tenant %s is not scheduled on GPU %s", name, uuid)
	}
	if p.Share > 0 && sum+uint64(p.Share) > fullShare {
		return fmt.Errorf("GPU %s: shares would add up to %s; the most is 100%%", uuid, Percent64(sum+uint64(p.Share)))
	}
	set(&r.hdr.Tenants[idx], p)
	return nil
}

// Percent shows hundredths of a percent.
func Percent(h uint32) string { return Percent64(uint64(h)) }

// Percent64 is Percent of a sum.
func Percent64(h uint64) string {
	if h%100 == 0 {
		return fmt.Sprintf("%d%%", h/100)
	}
	return fmt.Sprintf("%.2f%%", float64(h)/100)
}
