// Package trace owns the per-run trace region: the shared-memory file the
// shim's per-process counters live in, and the summary made from it.
package trace

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/api"
)

var (
	headerSize = int(unsafe.Sizeof(TraceHeader{}))
	slotHead   = int(unsafe.Sizeof(TraceSlot{}))
	statSize   = int(unsafe.Sizeof(APIStat{}))
)

// SlotSize is the bytes one process slot takes.
func SlotSize() int { return slotHead + len(api.Names)*statSize }

// Region is a trace region file mapped into this process.
type Region struct {
	Path string
	mem  []byte
	f    *os.File // probes the processes' liveness locks
}

// Create makes a new region with nslots process slots in dir (the first is
// the overflow slot) and maps it.
func Create(dir string, nslots int) (*Region, error) {
	if nslots < 2 {
		return nil, fmt.Errorf("a trace needs at least 2 process slots, got %d", nslots)
	}
	f, err := os.CreateTemp(dir, "flexgv-trace-*")
	if err != nil {
		return nil, fmt.Errorf("create trace region: %w", err)
	}
	size := headerSize + nslots*SlotSize()
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("size trace region: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("map trace region: %w", err)
	}
	r := &Region{Path: f.Name(), mem: mem, f: f}
	h := r.header()
	h.Version = TraceVersion
	h.NAPIs = uint32(len(api.Names))
	h.NSlots = uint32(nslots)
	h.SlotSize = uint32(SlotSize())
	h.APIHash = api.Hash
	h.CreatedNs = uint64(time.Now().UnixNano())
	h.NextSlot = 1
	// The magic goes last: the shim only trusts a complete header.
	atomic.StoreUint64(&h.Magic, TraceMagic)
	return r, nil
}

func (r *Region) header() *TraceHeader { return (*TraceHeader)(unsafe.Pointer(&r.mem[0])) }

func slotOffset(i int) int { return headerSize + i*SlotSize() }

func (r *Region) slot(i int) (*TraceSlot, []APIStat) {
	off := slotOffset(i)
	s := (*TraceSlot)(unsafe.Pointer(&r.mem[off]))
	stats := unsafe.Slice((*APIStat)(unsafe.Pointer(&r.mem[off+slotHead])), len(api.Names))
	return s, stats
}

// Close unmaps the region.
func (r *Region) Close() error {
	r.f.Close()
	return unix.Munmap(r.mem)
}

// Remove unmaps and deletes the region file.
func (r *Region) Remove() error {
	r.Close()
	return os.Remove(r.Path)
}

// DefaultDir is where regions are made: shared memory when there is any.
func DefaultDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && unix.Access("/dev/shm", unix.W_OK) == nil {
		return "/dev/shm"
	}
	return filepath.Clean(os.TempDir())
}
