// Package tenant owns tenants' shared state: one file per tenant that the
// CLI creates with its quotas and the shim in every process of the tenant
// maps, holding per-process usage (see include/flexgv/tenant_layout_gen.h).
package tenant

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Slots is how many processes one tenant can have at once.
const Slots = 256

var (
	headerSize = int(unsafe.Sizeof(Header{}))
	slotSize   = int(unsafe.Sizeof(Slot{}))
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)
)

// Dir is where tenant files live: $FLEXGV_STATE_DIR, else shared memory.
func Dir() string {
	if d := os.Getenv("FLEXGV_STATE_DIR"); d != "" {
		return d
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm/flexgv"
	}
	return filepath.Join(os.TempDir(), "flexgv")
}

func path(dir, name string) string { return filepath.Join(dir, "tenant-"+name) }

// Spec describes a tenant to create.
type Spec struct {
	Name     string
	Quota    []uint64 // bytes per device, 0 = no limit
	CtxBytes uint64   // charge per context when the shim cannot measure it
}

// Tenant is a tenant this process created or joined.
type Tenant struct {
	Path    string
	Name    string
	Created bool
	dir     string
}

// lockDir serializes creating, joining and removing tenant files between CLI
// processes; the kernel drops the lock if its holder dies.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o1777); err != nil {
		return nil, fmt.Errorf("tenant state folder %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("tenant state folder %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

// Acquire creates the tenant spec.Name, or joins it if it exists. Joining
// with a quota that differs from the existing one is an error; joining with
// none takes the existing quota. Creating one needs a quota.
func Acquire(dir string, spec Spec) (*Tenant, error) {
	if !nameRE.MatchString(spec.Name) {
		return nil, fmt.Errorf("tenant name %q: use 1 to 63 letters, digits, '.', '_' or '-'", spec.Name)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p := path(dir, spec.Name)
	if info, err := Read(p); err == nil {
		if spec.Quota != nil && !sameQuota(info.Quota, spec.Quota) {
			return nil, fmt.Errorf("group %s already exists with quota %s; give the same --mem or none to join it",
				spec.Name, FormatQuota(info.Quota))
		}
		return &Tenant{Path: p, Name: spec.Name, dir: dir}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if spec.Quota == nil {
		return nil, fmt.Errorf("group %s does not exist; give --mem to create it", spec.Name)
	}
	if len(spec.Quota) > MaxDevices {
		return nil, fmt.Errorf("at most %d devices can have a quota", MaxDevices)
	}
	buf := make([]byte, headerSize+Slots*slotSize)
	h := (*Header)(unsafe.Pointer(&buf[0]))
	h.Magic, h.Version = TenantMagic, TenantVersion
	h.NDevices, h.NSlots = uint32(len(spec.Quota)), Slots
	h.CreatedNs = uint64(time.Now().UnixNano())
	h.CtxBytes = spec.CtxBytes
	copy(h.Quota[:], spec.Quota)
	copy(h.Name[:], spec.Name)
	// Written aside and renamed: a process never maps a half-written file.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o666); err != nil {
		return nil, fmt.Errorf("create tenant %s: %w", spec.Name, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("create tenant %s: %w", spec.Name, err)
	}
	return &Tenant{Path: p, Name: spec.Name, Created: true, dir: dir}, nil
}

func sameQuota(a, b []uint64) bool {
	for i := 0; i < MaxDevices; i++ {
		var x, y uint64
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return false
		}
	}
	return true
}

// Release removes the tenant's file once no process of it is alive.
func (t *Tenant) Release() error {
	unlock, err := lockDir(t.dir)
	if err != nil {
		return err
	}
	defer unlock()
	info, err := Read(t.Path)
	if err != nil || len(info.Procs) > 0 {
		return nil
	}
	return os.Remove(t.Path)
}

// Proc is one live process of a tenant.
type Proc struct {
	Pid  int      `json:"pid"`
	Used []uint64 `json:"used"`
}

// Info is what a tenant holds now.
type Info struct {
	Name  string   `json:"name"`
	Quota []uint64 `json:"quota"`
	Used  []uint64 `json:"used"`
	Procs []Proc   `json:"processes"`
}

// Read reports a tenant's quotas and what its live processes hold.
func Read(p string) (Info, error) {
	f, err := os.Open(p)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	if st.Size() < int64(headerSize) {
		return Info{}, fmt.Errorf("%s: not a tenant file", p)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return Info{}, err
	}
	defer unix.Munmap(mem)
	h := (*Header)(unsafe.Pointer(&mem[0]))
	if h.Magic != TenantMagic || h.Version != TenantVersion || h.NDevices > MaxDevices ||
		int64(headerSize)+int64(h.NSlots)*int64(slotSize) > st.Size() {
		return Info{}, fmt.Errorf("%s: not a tenant of this flexgv version", p)
	}
	info := Info{Name: strings.TrimRight(string(h.Name[:]), "\x00"), Quota: append([]uint64(nil), h.Quota[:h.NDevices]...)}
	info.Used = make([]uint64, h.NDevices)
	hwm := int(atomic.LoadUint32(&h.SlotHWM))
	for i := 0; i < hwm && i < int(h.NSlots); i++ {
		s := (*Slot)(unsafe.Pointer(&mem[headerSize+i*slotSize]))
		pid := int(atomic.LoadInt32(&s.Pid))
		if pid <= 0 || !alive(pid, atomic.LoadUint64(&s.StartTicks)) {
			continue
		}
		proc := Proc{Pid: pid, Used: make([]uint64, h.NDevices)}
		for d := range proc.Used {
			proc.Used[d] = atomic.LoadUint64(&s.Used[d])
			info.Used[d] += proc.Used[d]
		}
		info.Procs = append(info.Procs, proc)
	}
	sort.Slice(info.Procs, func(a, b int) bool { return info.Procs[a].Pid < info.Procs[b].Pid })
	return info, nil
}

// List reads every tenant in dir.
func List(dir string) ([]Info, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "tenant-*"))
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, m := range matches {
		if strings.HasSuffix(m, ".tmp") {
			continue
		}
		if info, err := Read(m); err == nil {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// alive reports whether pid runs and is the process that took the slot.
func alive(pid int, ticks uint64) bool {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	if ticks == 0 {
		return true
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return true
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	return err != nil || v == ticks
}

// FormatQuota prints per-device quotas.
func FormatQuota(q []uint64) string {
	var parts []string
	for d, b := range q {
		if b > 0 {
			parts = append(parts, fmt.Sprintf("%d=%s", d, FormatSize(b)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}
