package tenant

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/liveness"
)

var (
	headerSize = int64(unsafe.Sizeof(Header{}))
	slotSize   = int64(unsafe.Sizeof(Slot{}))
)

// Info is what a tenant holds now.
type Info struct {
	Name     string      `json:"name"`
	OwnerUID uint32      `json:"owner_uid"`
	Created  time.Time   `json:"created"`
	Priority uint32      `json:"priority"` // as flexgv run --priority takes it, a number
	SM       uint32      `json:"sm"`       // percentage of a GPU's SMs under MPS; 0: all
	Devices  []DeviceUse `json:"devices"`
	Procs    []Proc      `json:"processes"`
	// Whom it is for (namespace, pod, container), as the daemon holding it
	// was told; not in the tenant's file.
	Labels map[string]string `json:"labels,omitempty"`
}

// DeviceUse is one device entry of a tenant and what its live processes
// hold there.
type DeviceUse struct {
	Index       int    `json:"index"` // the entry's position
	UUID        string `json:"uuid"`  // empty: the CUDA device of this index
	Quota       uint64 `json:"quota"` // 0: no limit
	Used        uint64 `json:"used"`
	CtxMeasured uint64 `json:"ctx_measured"`  // what one context took, as last measured
	ComputeMax  uint32 `json:"compute_max"`   // cap on the device's time, hundredths of a percent; 0: none
	Share       uint32 `json:"compute_share"` // share of the device's time under contention, hundredths of a percent; 0: none
	Refused     uint64 `json:"refused"`       // allocations refused for the quota since the tenant was created
}

// Proc is one live process of a tenant.
type Proc struct {
	Pid  int      `json:"pid"`  // in the process's own PID namespace
	Used []uint64 `json:"used"` // bytes per device entry
	// Held checkpointed by flexgv suspend: its memory is off the GPU.
	Suspended bool `json:"suspended,omitempty"`
	// Its pid as NVML and the driver's checkpoint API know it (0: not
	// learnt yet); read from the file only, the daemon does not send it.
	NvmlPid int `json:"-"`
}

// List reads every tenant in dir, after removing those without a member.
// Files that are not tenants of this version are skipped and returned in
// bad; other users' tenants this user may not read are skipped silently.
func List(dir string) (infos []Info, bad []error, err error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	sweep(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), filePrefix) {
			continue
		}
		info, err := Read(filepath.Join(dir, e.Name()))
		switch {
		case err == nil:
			infos = append(infos, info)
		case !errors.Is(err, fs.ErrPermission):
			bad = append(bad, err)
		}
	}
	sort.Slice(infos, func(a, b int) bool { return infos[a].Name < infos[b].Name })
	return infos, bad, nil
}

// Read reports a tenant's devices and what its live processes hold, from a
// snapshot of the file: it may have been written by anyone, so it is read,
// not mapped, and checked before it is believed.
func Read(p string) (Info, error) {
	f, err := openTenant(p)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	h, err := readHeader(f, p)
	if err != nil {
		return Info{}, err
	}
	slots := make([]Slot, h.slots)
	if len(slots) > 0 {
		if _, err := f.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&slots[0])), int64(len(slots))*slotSize), headerSize); err != nil {
			return Info{}, fmt.Errorf("%s: %w", p, err)
		}
	}
	info := Info{Name: h.name, OwnerUID: h.raw.OwnerUID, Created: time.Unix(0, int64(h.raw.CreatedNs)), Priority: h.raw.Priority, SM: h.raw.SM, Devices: make([]DeviceUse, len(h.devices)), Procs: []Proc{}}
	for d, dev := range h.devices {
		info.Devices[d] = DeviceUse{Index: d, UUID: dev.UUID, Quota: dev.Quota, CtxMeasured: h.raw.Devices[d].CtxMeasured,
			ComputeMax: dev.ComputeMax, Share: dev.ComputeShare, Refused: h.raw.Devices[d].Refused}
	}
	for i, s := range slots {
		if s.State != SlotClaimed {
			continue
		}
		live, err := liveness.Held(f, headerSize+int64(i)*slotSize, 1)
		if err != nil {
			return Info{}, err
		}
		if !live { // a dead process's slot: what it held is not held
			continue
		}
		// What it charged, and what the driver's own count showed it
		// holding beyond that: its usage is the larger.
		proc := Proc{Pid: int(s.Pid), Used: make([]uint64, len(h.devices)), Suspended: s.Suspended != 0, NvmlPid: int(s.NvmlPid)}
		for d := range proc.Used {
			proc.Used[d] = addSat(s.Used[d], s.Unmodelled[d])
		}
		for d, b := range proc.Used {
			info.Devices[d].Used = addSat(info.Devices[d].Used, b)
		}
		info.Procs = append(info.Procs, proc)
	}
	sort.Slice(info.Procs, func(a, b int) bool { return info.Procs[a].Pid < info.Procs[b].Pid })
	return info, nil
}

// addSat adds without wrapping: a damaged counter must not make a sum small.
func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// openTenant opens a tenant file to read it. Anyone can put files in the
// state folder: no symbolic links are followed, and O_NONBLOCK keeps a
// FIFO from hanging the open before it is refused as not a regular file.
func openTenant(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s: a symbolic link, not a tenant file", p)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a regular file", p)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// header is a tenant header that passed readHeader's checks.
type header struct {
	raw     Header
	name    string
	devices []DeviceQuota
	slots   int // slots worth reading: those below the high-water mark
}

// readHeader reads f's header and checks everything that is later used to
// index or size anything, so that no file can make a reader panic.
func readHeader(f *os.File, p string) (header, error) {
	bad := func(format string, args ...any) (header, error) {
		return header{}, fmt.Errorf("%s: %s", p, fmt.Sprintf(format, args...))
	}
	st, err := f.Stat()
	if err != nil {
		return header{}, err
	}
	var h header
	if st.Size() < headerSize {
		return bad("truncated: %d bytes, less than a tenant header", st.Size())
	}
	if _, err := f.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&h.raw)), headerSize), 0); err != nil {
		return bad("%v", err)
	}
	r := &h.raw
	switch {
	case r.Magic != TenantMagic:
		return bad("not a tenant file")
	case r.Version != TenantVersion:
		return bad("tenant file version %d; this flexgv reads version %d", r.Version, TenantVersion)
	case r.NDevices > MaxDevices || r.NSlots > MaxSlots || r.SM > 100:
		return bad("damaged: %d devices, %d slots, SM percentage %d", r.NDevices, r.NSlots, r.SM)
	case st.Size() < headerSize+int64(r.NSlots)*slotSize:
		return bad("truncated: %d bytes, %d slots need %d", st.Size(), r.NSlots, headerSize+int64(r.NSlots)*slotSize)
	}
	var ok bool
	if h.name, ok = cString(r.Name[:]); !ok || !nameRE.MatchString(h.name) || filepath.Base(p) != filePrefix+h.name {
		return bad("damaged: its name does not match the file's")
	}
	for d := range r.NDevices {
		uuid, ok := cString(r.Devices[d].UUID[:])
		if !ok || strings.ContainsFunc(uuid, func(c rune) bool { return c <= ' ' || c > '~' }) {
			return bad("damaged: device %d has no valid UUID", d)
		}
		h.devices = append(h.devices, DeviceQuota{UUID: uuid, Quota: r.Devices[d].Quota, ComputeMax: r.Devices[d].ComputeMax,
			ComputeShare: r.Devices[d].ComputeShare})
	}
	h.slots = int(min(r.SlotHWM, r.NSlots))
	return h, nil
}

// cString is the NUL-terminated text in b; false if b has no NUL.
func cString(b []byte) (string, bool) {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return "", false
	}
	return string(b[:n]), true
}
