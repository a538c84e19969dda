// Package tenant owns tenants' shared state: one file per tenant that the
// CLI creates with its quotas and the shim in every process of the tenant
// maps, holding per-process usage (see include/flexgv/tenant_layout_gen.h).
//
// Who is alive is told by OFD record locks, which the kernel drops when
// their holder dies, in any PID namespace: every CLI run of a tenant holds a
// read lock on byte MemberLock while its program runs, and every process
// using CUDA holds a write lock on the first byte of its slot. A tenant file
// on which nobody holds a lock has no member left and is removed, under the
// state folder's lock, by whichever CLI comes next.
package tenant

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/flexgv/flexgv/internal/liveness"
)

// Slots is how many processes one tenant can have at once.
const Slots = 1024

// Bounds of what a tenant can work with, for whoever creates one.
const (
	MinQuota = 1 << 20  // below this no CUDA program runs
	MinCtx   = 16 << 20 // no CUDA context takes less
)

const (
	filePrefix = "tenant-"  // tenant files: tenant-NAME
	tmpPrefix  = ".tenant-" // being written aside: .tenant-NAME-*.tmp
	tmpSuffix  = ".tmp"
	fileMode   = 0o640 // the owner's processes write; the owner's group may look
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

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

func path(dir, name string) string { return filepath.Join(dir, filePrefix+name) }

// Path is where the tenant name's file is in dir.
func Path(dir, name string) string { return path(dir, name) }

// Spec describes the tenant to create or join.
type Spec struct {
	Name     string
	Devices  []DeviceQuota // nil: join an existing tenant, whatever its quotas
	CtxBytes uint64        // charge per context when the shim cannot measure it
	Priority uint32        // 0 to sched.PriorityMax; with Devices nil, ignored
	SM       uint32        // percentage of a GPU's SMs under MPS, 1 to 100; 0: all; with Devices nil, ignored
}

// Tenant is this run's membership of a tenant, from Acquire to Release.
type Tenant struct {
	Path     string
	Name     string
	Created  bool
	Devices  []DeviceQuota // the tenant's entries, as its file has them
	Priority uint32        // as its file has it
	SM       uint32        // as its file has it
	dir      string
	member   *os.File // holds the member lock
}

// Acquire creates the tenant spec.Name, or joins it if it exists, and makes
// this process a member until Release. Joining with devices that differ
// from the tenant's is an error; joining with none takes the tenant's.
// Creating one needs devices. Only the user who created a tenant (or root)
// may join it.
func Acquire(dir string, spec Spec) (*Tenant, error) {
	if err := CheckName(spec.Name); err != nil {
		return nil, err
	}
	if len(spec.Devices) > MaxDevices {
		return nil, fmt.Errorf("a tenant holds at most %d devices", MaxDevices)
	}
	if spec.SM > 100 {
		return nil, fmt.Errorf("tenant %s: an SM percentage of %d; give 1 to 100, or 0 for all", spec.Name, spec.SM)
	}
	for _, d := range spec.Devices {
		// Cut short, it would match no GPU and its quota would not apply.
		if len(d.UUID) >= len(Device{}.UUID) {
			return nil, fmt.Errorf("device UUID %s is longer than a tenant file holds", d.UUID)
		}
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sweep(dir)
	t := &Tenant{Path: path(dir, spec.Name), Name: spec.Name, dir: dir}
	var h header
	t.member, h, err = join(t.Path, spec)
	t.Devices, t.Priority, t.SM = h.devices, h.raw.Priority, h.raw.SM
	if errors.Is(err, os.ErrNotExist) {
		if spec.Devices == nil {
			return nil, fmt.Errorf("group %s does not exist; give --mem to create it", spec.Name)
		}
		t.member, err = create(dir, t.Path, spec)
		t.Created, t.Devices, t.Priority, t.SM = true, spec.Devices, spec.Priority, spec.SM
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Rejoin makes this process a member again of each tenant named that is
// there, all under one hold of the folder's lock and before any tenant
// without a member is swept. A daemon restarting takes back so the tenants
// it held: its death left them without a member while a process of theirs
// may have mapped its file without claiming a slot yet (one starting), and
// a file removed and made again under it would cost that process its
// tenant. Names not there are left out of the result.
func Rejoin(dir string, names []string) (map[string]*Tenant, error) {
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := map[string]*Tenant{}
	for _, n := range names {
		if CheckName(n) != nil {
			continue
		}
		t := &Tenant{Path: path(dir, n), Name: n, dir: dir}
		var h header
		if t.member, h, err = join(t.Path, Spec{Name: n}); err != nil {
			continue
		}
		t.Devices, t.Priority, t.SM = h.devices, h.raw.Priority, h.raw.SM
		out[n] = t
	}
	return out, nil
}

// CheckName refuses names a tenant file cannot carry.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("tenant name %q: use 1 to 63 letters, digits, '.', '_' or '-'", name)
	}
	return nil
}

// Shown is a name read from memory other users can write, for output (a
// metric's label, a terminal, JSON): the name where a tenant can have it,
// else with every byte a tenant's name cannot carry shown as '?'.
func Shown(name string) string {
	if nameRE.MatchString(name) {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '?'
		}
	}
	return string(b)
}

// join opens the tenant at p and takes the member lock, before the folder
// lock is let go: a last member leaving cannot remove it in between.
func join(p string, spec Spec) (*os.File, header, error) {
	st, err := os.Lstat(p)
	if err != nil {
		return nil, header{}, err
	}
	if err := checkOwner(spec.Name, st); err != nil {
		return nil, header{}, err
	}
	f, err := openTenant(p)
	if err != nil {
		return nil, header{}, fmt.Errorf("group %s: %w", spec.Name, err)
	}
	h, err := readHeader(f, p)
	if err == nil && spec.Devices != nil && (!slices.Equal(h.devices, spec.Devices) || h.raw.Priority != spec.Priority || h.raw.SM != spec.SM) {
		err = fmt.Errorf("group %s already exists with quota %s, priority %d and %s; give the same --mem, --compute, --compute-max, --priority and --sm, or none of them, to join it",
			spec.Name, formatQuota(h.devices), h.raw.Priority, FormatSM(h.raw.SM))
	}
	if err == nil {
		err = liveness.Share(f, MemberLock)
	}
	if err != nil {
		f.Close()
		return nil, header{}, err
	}
	return f, h, nil
}

// checkOwner refuses another user's tenant (root may join any): its
// processes could neither write the file nor trust what its owner writes.
func checkOwner(name string, st os.FileInfo) error {
	uid := st.Sys().(*syscall.Stat_t).Uid
	me := os.Geteuid()
	if me == 0 || int(uid) == me {
		return nil
	}
	who := strconv.Itoa(int(uid))
	if u, err := user.LookupId(who); err == nil {
		who = u.Username
	}
	return fmt.Errorf("group %s belongs to user %s (uid %d); choose another name", name, who, uid)
}

// create writes the tenant aside, takes the member lock and only then
// renames it into place: nobody maps a half-written file or finds one
// without a member.
func create(dir, p string, spec Spec) (*os.File, error) {
	f, err := os.CreateTemp(dir, tmpPrefix+spec.Name+"-*"+tmpSuffix)
	if err != nil {
		return nil, fmt.Errorf("create tenant %s: %w", spec.Name, err)
	}
	err = f.Chmod(fileMode) // explicitly: the umask must not decide who can see it
	if err == nil {
		_, err = f.WriteAt(newFile(spec), 0)
	}
	if err == nil {
		err = liveness.Share(f, MemberLock)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("create tenant %s: %w", spec.Name, err)
	}
	return f, nil
}

// newFile is the content of a new tenant file: the header, then free slots.
func newFile(spec Spec) []byte {
	h := Header{
		Magic: TenantMagic, Version: TenantVersion,
		NDevices: uint32(len(spec.Devices)), NSlots: Slots,
		CreatedNs: uint64(time.Now().UnixNano()), CtxBytes: spec.CtxBytes,
		OwnerUID: uint32(os.Geteuid()), Priority: spec.Priority, SM: spec.SM,
	}
	copy(h.Name[:], spec.Name)
	for i, d := range spec.Devices {
		copy(h.Devices[i].UUID[:], d.UUID)
		h.Devices[i].Quota = d.Quota
		h.Devices[i].ComputeMax = d.ComputeMax
		h.Devices[i].ComputeShare = d.ComputeShare
	}
	buf := make([]byte, headerSize+Slots*slotSize)
	copy(buf, unsafe.Slice((*byte)(unsafe.Pointer(&h)), headerSize))
	return buf
}

// Release ends this run's membership and removes the tenant if nobody else
// holds a lock on it: no other run, and no process still using CUDA.
func (t *Tenant) Release() error {
	t.member.Close()
	unlock, err := lockDir(t.dir)
	if err != nil {
		return err
	}
	defer unlock()
	sweep(t.dir)
	return nil
}

// lockDir makes sure the state folder is there for every user, then takes
// its lock: tenant files are created, joined and removed only under it.
// The kernel drops the lock if its holder dies.
func lockDir(dir string) (func(), error) {
	if err := shareDir(dir); err != nil {
		return nil, fmt.Errorf("tenant state folder %s: %w", dir, err)
	}
	f, err := openLockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("tenant state folder %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("tenant state folder %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// MakeDir creates the state folder as the CLI does, for files that live
// next to the tenants.
func MakeDir(dir string) error { return shareDir(dir) }

// shareDir creates dir, or repairs it if we own it, with mode 01777: every
// user can create tenants there and none can remove another's. The mode is
// set with chmod because mkdir's is cut by the umask.
func shareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o7777 == 0o1777 {
		return nil
	}
	return unix.Chmod(dir, 0o1777)
}

// openLockFile opens the folder's lock file, which every user must be able
// to open: flock needs only a read-only descriptor, and the file is made
// 0666 explicitly since the umask cut its mode. O_NONBLOCK: a FIFO planted
// under its name must not hang every CLI.
func openLockFile(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o666)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &st)
	if err == nil && st.Uid == uint32(os.Geteuid()) && st.Mode&0o777 != 0o666 {
		err = f.Chmod(0o666)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweep removes what dead CLIs left behind: tenant files nobody holds a
// lock on (a CLI killed while no process of its tenant used CUDA), and
// files being written aside when their writer died (creating happens only
// under the folder lock, which the caller holds). Files that are not
// tenants of this version are left alone.
func sweep(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		n, p := e.Name(), filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(n, tmpPrefix) && strings.HasSuffix(n, tmpSuffix):
			os.Remove(p)
		case strings.HasPrefix(n, filePrefix) && orphan(p):
			os.Remove(p)
		}
	}
}

// orphan reports whether p is a tenant file with no member left.
func orphan(p string) bool {
	f, err := openTenant(p)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := readHeader(f, p); err != nil {
		return false
	}
	held, err := liveness.Held(f, 0, 0)
	return err == nil && !held
}
