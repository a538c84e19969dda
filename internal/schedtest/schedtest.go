// Package schedtest plays, for tests of the readers of GPU scheduler
// regions (metrics, flexgv top, share plots), the part the shims play in a
// region: counting GPU time, waits and preemptions, and processes taking
// slots. It writes through the mapped region, as the shims do.
package schedtest

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/sched"
)

// Region is GPU uuid's scheduler region in dir, mapped.
type Region struct {
	t   testing.TB
	f   *os.File
	mem []byte
	hdr *sched.Header
}

// Open maps GPU uuid's region in dir, which sched.Join created.
func Open(t testing.TB, dir, uuid string) *Region {
	t.Helper()
	f, err := os.OpenFile(sched.Path(dir, uuid), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	size := int(unsafe.Sizeof(sched.Header{})) + sched.MaxSlots*int(unsafe.Sizeof(sched.Slot{}))
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	r := &Region{t: t, f: f, mem: mem, hdr: (*sched.Header)(unsafe.Pointer(&mem[0]))}
	t.Cleanup(func() { unix.Munmap(mem); f.Close() })
	return r
}

// Run adds to tenant entry i's counters: GPU time held, time waited,
// turns lost to a higher priority.
func (r *Region) Run(i int, heldNs, waitedNs, preemptions uint64) {
	e := &r.hdr.Tenants[i]
	atomic.AddUint64(&e.HeldNs, heldNs)
	atomic.AddUint64(&e.WaitedNs, waitedNs)
	atomic.AddUint64(&e.Preemptions, preemptions)
}

// Switch counts n hand-overs of the GPU.
func (r *Region) Switch(n uint64) { atomic.AddUint64(&r.hdr.Switches, n) }

// Process makes pid a live process of tenant entry i in slot s, holding
// the GPU if holder; it lives until the test ends or the returned file is
// closed.
func (r *Region) Process(s, i int, pid int32, holder bool) *os.File {
	r.t.Helper()
	slot := (*sched.Slot)(unsafe.Pointer(&r.mem[sched.SlotLock(s)]))
	atomic.StoreInt32(&slot.Pid, pid)
	atomic.StoreUint32(&slot.Tenant, uint32(i))
	atomic.StoreUint32(&slot.State, sched.SlotClaimed)
	if holder {
		atomic.StoreUint32(&r.hdr.Holder, uint32(s)+1)
	}
	f, err := os.OpenFile(r.f.Name(), os.O_RDWR, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: sched.SlotLock(s), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { f.Close() })
	return f
}

// SetHostBound writes how host-bound the requests of the tenant named name
// are (hundredths of a percent), as its MPS clients would.
func (r *Region) SetHostBound(name string, v uint32) {
	for i := range r.hdr.Tenants {
		t := &r.hdr.Tenants[i]
		if strings.TrimRight(string(t.Name[:]), "\x00") == name {
			atomic.StoreUint32(&t.HostBound, v)
			return
		}
	}
	r.t.Fatalf("no tenant %q in the region", name)
}

// SetBesideOff makes the tenant named name keep lower priorities from
// running beside it for d from now, as its MPS clients would.
func (r *Region) SetBesideOff(name string, d time.Duration) {
	r.t.Helper()
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		r.t.Fatal(err)
	}
	for i := range r.hdr.Tenants {
		t := &r.hdr.Tenants[i]
		if strings.TrimRight(string(t.Name[:]), "\x00") == name {
			atomic.StoreUint64(&t.BesideOffNs, uint64(now.Nano()+int64(d)))
			return
		}
	}
	r.t.Fatalf("no tenant %q in the region", name)
}

// HeldSince makes the holder's time unpaid since ns (CLOCK_MONOTONIC).
func (r *Region) HeldSince(ns uint64) { atomic.StoreUint64(&r.hdr.SinceNs, ns) }

// Scribble writes random values over every field a shim reads while it
// runs (all but the magic, version and UUID it checked at attach), as a
// hostile or broken process could.
func (r *Region) Scribble(rng *rand.Rand) {
	h := r.hdr
	atomic.StoreUint32(&h.Holder, rng.Uint32())
	for w := range h.Waiting {
		atomic.StoreUint64(&h.Waiting[w], rng.Uint64())
		atomic.StoreUint64(&h.Present[w], rng.Uint64())
	}
	atomic.StoreUint64(&h.SinceNs, rng.Uint64())
	atomic.StoreUint64(&h.VClock, rng.Uint64())
	for i := range h.Tenants {
		t := &h.Tenants[i]
		atomic.StoreUint32(&t.Share, rng.Uint32())
		atomic.StoreUint32(&t.Cap, rng.Uint32())
		atomic.StoreUint32(&t.Priority, rng.Uint32())
		atomic.StoreUint32(&t.HostBound, rng.Uint32())
		atomic.StoreUint64(&t.VTime, rng.Uint64())
		atomic.StoreInt64(&t.CapCredit, int64(rng.Uint64()))
		atomic.StoreUint64(&t.CapRefilled, rng.Uint64())
		if rng.IntN(4) == 0 { // a name's bytes, kept non-empty: an empty one is a free entry
			for b := range t.Name[:8] {
				t.Name[b] = byte(rng.Uint32())
			}
			t.Name[0] |= 0x80
		}
	}
	for s := 0; s < sched.MaxSlots; s++ {
		slot := (*sched.Slot)(unsafe.Pointer(&r.mem[sched.SlotLock(s)]))
		atomic.StoreUint32(&slot.Tenant, rng.Uint32())
		atomic.StoreUint32(&slot.Inflight, rng.Uint32())
		atomic.StoreUint32(&slot.MPS, rng.Uint32())
		atomic.StoreUint64(&slot.Launches, rng.Uint64())
	}
}
