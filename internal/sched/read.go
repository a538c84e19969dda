package sched

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/liveness"
	"github.com/flexgv/flexgv/internal/tenant"
)

// TenantStat is what a GPU's scheduler holds of one live tenant.
type TenantStat struct {
	Name        string  `json:"name"`
	Policy      Policy  `json:"policy"`
	HeldNs      uint64  `json:"held_ns"`     // GPU time it held, or ran beside the holder (under MPS, or in an equal holder's gaps)
	WaitedNs    uint64  `json:"waited_ns"`   // time its processes waited to launch
	Preemptions uint64  `json:"preemptions"` // turns cut short for a higher priority
	Pids        []int32 `json:"pids"`        // its processes on the GPU (their own PID namespace's numbers)
	MPSProcs    int     `json:"mps_procs"`   // those that are MPS clients (their kernels run beside other clients')
	HostBound   float64 `json:"host_bound"`  // of its requests' time, the part not spent waiting for the GPU, as its processes measure it while others share the GPU; 0: not measured
	InFlight    uint64  `json:"in_flight"`   // launches and blocking copies its processes have on the GPU, as they last counted them (0 while alone: not tracked)
	Holder      bool    `json:"holder"`      // one of its processes holds the GPU
	// how much longer lower priorities are kept from running beside it
	// under MPS (its requests found that it cost them); 0: they are not
	BesideOffNs uint64 `json:"beside_off_ns"`
}

// GPU is a snapshot of one GPU's scheduler.
type GPU struct {
	UUID     string       `json:"uuid"`
	Switches uint64       `json:"switches"` // hand-overs so far
	Tenants  []TenantStat `json:"tenants"`
}

// Read takes a snapshot of GPU uuid's scheduler in dir; nil, nil if it has
// none.
func Read(dir, uuid string) (*GPU, error) {
	f, err := os.OpenFile(Path(dir, uuid), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, regionSize)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, regionSize), buf); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	h := (*Header)(unsafe.Pointer(&buf[0]))
	if h.Magic != SchedMagic || h.Version != SchedVersion {
		return nil, fmt.Errorf("%s: not a scheduler region of this flexgv", f.Name())
	}
	if cstr(h.UUID[:]) != uuid || tenant.Shown(uuid) != uuid {
		return nil, fmt.Errorf("%s: not the scheduler region of GPU %q", f.Name(), tenant.Shown(uuid))
	}
	g := &GPU{UUID: uuid, Switches: h.Switches}
	var now unix.Timespec // the shims' clock
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return nil, err
	}
	byIndex := map[int]int{}
	for i := range h.Tenants {
		held, err := liveness.Held(f, TenantLock(i), 1)
		if err != nil {
			return nil, err
		}
		if !held {
			continue
		}
		t := &h.Tenants[i]
		byIndex[i] = len(g.Tenants)
		// (names are written by the shims of any user's tenants)
		g.Tenants = append(g.Tenants, TenantStat{Name: tenant.Shown(cstr(t.Name[:])),
			Policy: Policy{Share: t.Share, Cap: t.Cap, Priority: t.Priority},
			HeldNs: t.HeldNs, WaitedNs: t.WaitedNs, Preemptions: t.Preemptions,
			HostBound: float64(min(t.HostBound, fullShare)) / fullShare, BesideOffNs: ahead(t.BesideOffNs, uint64(now.Nano()))})
	}
	for i := 0; i < MaxSlots; i++ {
		s := (*Slot)(unsafe.Pointer(&buf[SlotLock(i)]))
		if s.State != SlotClaimed {
			continue
		}
		k, ok := byIndex[int(s.Tenant)]
		if held, err := liveness.Held(f, SlotLock(i), 1); err != nil || !held || !ok {
			continue
		}
		g.Tenants[k].Pids = append(g.Tenants[k].Pids, s.Pid)
		if s.MPS == 1 {
			g.Tenants[k].MPSProcs++
		}
		g.Tenants[k].InFlight += uint64(s.Inflight)
		if h.Holder == uint32(i)+1 {
			g.Tenants[k].Holder = true
			// The holder is charged at the end of each quantum, turn or
			// synchronization while others wait:
			// what it has held since then counts too.
			g.Tenants[k].HeldNs += sinceMonotonic(h.SinceNs)
		}
	}
	return g, nil
}

// sinceMonotonic is how long ago a CLOCK_MONOTONIC time the shims wrote
// was; 0 for none, or a time in the future or over a day back (not one
// they wrote).
func sinceMonotonic(ns uint64) uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	now := uint64(ts.Nano())
	if ns == 0 || ns > now || now-ns > uint64(24*time.Hour) {
		return 0
	}
	return now - ns
}

// List reads every GPU scheduler in dir, in UUID order; files it cannot
// read (another version's, one being replaced) are skipped and returned in
// bad.
func List(dir string) (gpus []*GPU, bad []error, err error) {
	m, err := filepath.Glob(filepath.Join(dir, filePrefix+"*"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(m)
	for _, p := range m {
		g, err := Read(dir, strings.TrimPrefix(filepath.Base(p), filePrefix))
		switch {
		case err != nil:
			bad = append(bad, err)
		case g != nil:
			gpus = append(gpus, g)
		}
	}
	return gpus, bad, nil
}

// ahead is how far until (CLOCK_MONOTONIC) is past now; 0 when it is not,
// or when it is further than a shim ever sets (garbage in the region).
func ahead(until, now uint64) uint64 {
	if until <= now || until-now > BesideOffMaxNs {
		return 0
	}
	return until - now
}
