package tenant

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/liveness"
)

// change runs do on tenant name's file in dir, opened for writing and
// its header read, under the folder's lock, where the caller owns it.
func change(dir, name string, do func(f *os.File, h header) error) error {
	if err := CheckName(name); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	p := path(dir, name)
	st, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no tenant %s", name)
	}
	if err != nil {
		return err
	}
	if err := checkOwner(name, st); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", name, err)
	}
	defer f.Close()
	h, err := readHeader(f, p)
	if err != nil {
		return err
	}
	return do(f, h)
}

// SetCompute changes the compute part of tenant name in dir, live: each
// entry's share and cap, the tenant's priority and its SM percentage (sm
// 0: all; read by the processes that start later). devs must be the
// tenant's entries (same GPUs, same memory quotas) with the new values:
// memory quotas cannot change, each process's shim reads them once, at its
// start. Processes that start later, and flexgv ps, see the new values;
// those running follow the GPU's scheduler region, which the caller
// updates.
func SetCompute(dir, name string, devs []DeviceQuota, priority, sm uint32) error {
	return change(dir, name, func(f *os.File, h header) error {
		return setCompute(f, h, name, devs, priority, sm)
	})
}

func setCompute(f *os.File, h header, name string, devs []DeviceQuota, priority, sm uint32) error {
	same := func(a, b DeviceQuota) bool { return a.UUID == b.UUID && a.Quota == b.Quota }
	if !slices.EqualFunc(h.devices, devs, same) {
		return fmt.Errorf("tenant %s: its devices or memory quotas are not the ones given (it has %s)", name, formatQuota(h.devices))
	}
	// Mapped, not written with pwrite: the shims that map the file read
	// these words with atomic loads, and must see each whole.
	mem, err := unix.Mmap(int(f.Fd()), 0, int(headerSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", name, err)
	}
	defer unix.Munmap(mem)
	hdr := (*Header)(unsafe.Pointer(&mem[0]))
	for d, dev := range devs {
		atomic.StoreUint32(&hdr.Devices[d].ComputeShare, dev.ComputeShare)
		atomic.StoreUint32(&hdr.Devices[d].ComputeMax, dev.ComputeMax)
	}
	atomic.StoreUint32(&hdr.Priority, priority)
	atomic.StoreUint32(&hdr.SM, sm)
	return nil
}

// SetSuspended marks the live process pid of tenant name in dir (by its
// own pid or the one NVML knows it by) as held checkpointed by flexgv
// suspend, or no longer. The mark lives in the process's slot, so it goes
// with the process: a new one claiming the slot starts unmarked.
func SetSuspended(dir, name string, pid int, suspended bool) error {
	return change(dir, name, func(f *os.File, h header) error {
		return setSuspended(f, h, name, pid, suspended)
	})
}

func setSuspended(f *os.File, h header, name string, pid int, suspended bool) error {
	var flag uint32
	if suspended {
		flag = 1
	}
	return withSlot(f, h, name, pid, func(s *Slot) { atomic.StoreUint32(&s.Suspended, flag) })
}

// withSlot calls do on the slot of the live process pid (its own pid or
// NVML's), mapped shared.
func withSlot(f *os.File, h header, name string, pid int, do func(s *Slot)) error {
	size := headerSize + int64(h.slots)*slotSize
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("tenant %s: %w", name, err)
	}
	defer unix.Munmap(mem)
	for i := 0; i < h.slots; i++ {
		s := (*Slot)(unsafe.Pointer(&mem[headerSize+int64(i)*slotSize]))
		if atomic.LoadUint32(&s.State) != SlotClaimed ||
			(int(atomic.LoadInt32(&s.Pid)) != pid && int(atomic.LoadUint32(&s.NvmlPid)) != pid) {
			continue
		}
		if live, err := liveness.Held(f, headerSize+int64(i)*slotSize, 1); err != nil || !live {
			continue
		}
		do(s)
		return nil
	}
	return fmt.Errorf("tenant %s has no live process %d", name, pid)
}

// MoveCharges moves what the live process pid of tenant name in dir (by
// its own pid or NVML's) is charged on entry from to entry to, as when its
// memory was restored onto another GPU: flexgv ps, and a later move, see
// where it is, and the process's shim counts its later allocations and
// frees there.
func MoveCharges(dir, name string, pid, from, to int) error {
	return change(dir, name, func(f *os.File, h header) error {
		if from < 0 || to < 0 || from >= len(h.devices) || to >= len(h.devices) {
			return fmt.Errorf("tenant %s has no device entries %d and %d", name, from, to)
		}
		return withSlot(f, h, name, pid, func(s *Slot) {
			for _, c := range []*[16]uint64{&s.Used, &s.Unmodelled} {
				b := atomic.SwapUint64(&c[from], 0)
				atomic.AddUint64(&c[to], b)
			}
			// Its shim counts what it does later on the entry it is on now.
			for e := range s.Moved {
				at := e
				if m := int(s.Moved[e]); m > 0 {
					at = m - 1
				}
				switch {
				case at != from:
				case e == to:
					s.Moved[e] = 0
				default:
					s.Moved[e] = byte(to + 1)
				}
			}
		})
	})
}
