package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// Files of the daemon in the state folder, next to the tenants.
const (
	lockName     = "daemon.lock"    // held while a daemon runs
	registryName = "daemon.tenants" // the tenants it holds
	registryTmp  = ".daemon.tenants-"
	maxRegistry  = 1 << 20
)

// held is the set of tenants the daemon holds. It is a member of each, so
// none is removed while it runs, and of the scheduler of every GPU where
// the tenant has a compute policy, so that its share, cap and priority
// stay in force while none of its runs is; it records them with their
// quotas and policies in its registry: the next daemon re-adopts those
// still there (a run kept them while no daemon ran) and creates again, with
// the same quotas, those that went with their last member in between. A
// tenant the daemon holds therefore outlives any stop, crash or restart of
// the daemon, until DeleteTenant.
type held struct {
	mu       sync.Mutex
	dir      string
	registry string
	tenants  map[string]heldTenant
}

type heldTenant struct {
	*tenant.Tenant
	created time.Time // which file of that name: names are reused
	spec    tenant.Spec
	sched   map[string]*sched.Member // by GPU UUID, where its policy is active
	labels  map[string]string        // whom it is for (CreateTenantRequest.labels)
}

// record is one registry entry.
type record struct {
	Name     string               `json:"name"`
	Created  int64                `json:"created_unix_nano"`
	Devices  []tenant.DeviceQuota `json:"devices"`
	CtxBytes uint64               `json:"context_bytes"`
	Priority *uint32              `json:"priority,omitempty"` // absent in registries of older daemons: normal
	SM       uint32               `json:"sm,omitempty"`       // percentage of the SMs under MPS; 0: all
	Labels   map[string]string    `json:"labels,omitempty"`
}

// lockState takes the state folder's daemon lock, which the kernel drops
// when the daemon dies: one daemon per folder.
func lockState(dir string) (*os.File, error) {
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errBusy
		}
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return f, nil
}

var errBusy = errors.New("another flexgv daemon runs")

// adopt reads the registry and joins every tenant in it that is still
// the file it recorded, and the schedulers of the GPUs where it has a
// compute policy. It returns the names it holds now, and the schedulers it
// could not join again (their shares are then not enforced by the daemon).
func adopt(dir string) (*held, []string, []error, error) {
	h := &held{dir: dir, registry: filepath.Join(dir, registryName), tenants: map[string]heldTenant{}}
	recs, err := h.load()
	if err != nil {
		return nil, nil, nil, err
	}
	// What a daemon killed while writing its registry left aside.
	if old, err := filepath.Glob(filepath.Join(dir, registryTmp+"*")); err == nil {
		for _, p := range old {
			os.Remove(p)
		}
	}
	// Those still there are joined before anything sweeps tenants without a
	// member, as the last daemon's death left them: one whose process is
	// starting (its file mapped, no slot claimed yet) keeps its file.
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
	}
	back, err := tenant.Rejoin(dir, names)
	if err != nil {
		return nil, nil, nil, err
	}
	infos, _, err := tenant.List(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	var problems []error
	for _, r := range recs {
		prio := uint32(sched.PriorityNormal)
		if r.Priority != nil {
			prio = *r.Priority
		}
		spec := tenant.Spec{Name: r.Name, Devices: r.Devices, CtxBytes: r.CtxBytes, Priority: prio, SM: r.SM}
		t := back[r.Name]
		if t == nil {
			if slices.ContainsFunc(infos, func(in tenant.Info) bool { return in.Name == r.Name }) {
				spec.Devices = nil // there: join it, if it is still the file recorded
			} else if len(r.Devices) == 0 {
				continue
			}
			if t, err = tenant.Acquire(dir, spec); err != nil {
				continue // gone since, or made again by someone else
			}
		}
		info, err := tenant.Read(t.Path)
		if err != nil || (!t.Created && info.Created.UnixNano() != r.Created) {
			t.Release() // a file of that name the daemon did not make
			continue
		}
		// The file is what the shims enforce: an update the daemon died
		// before recording is in it.
		spec.Devices, spec.Priority, spec.SM = t.Devices, t.Priority, t.SM
		ht := heldTenant{t, info.Created, spec, map[string]*sched.Member{}, r.Labels}
		if err := h.joinScheds(ht); err != nil {
			problems = append(problems, err)
		}
		h.tenants[r.Name] = ht
	}
	if err := h.save(); err != nil {
		h.releaseAll()
		return nil, nil, nil, err
	}
	return h, h.names(), problems, nil
}

// policy is what the tenant asks of the GPU of its entry d.
func policy(spec tenant.Spec, d int) sched.Policy {
	return sched.Policy{Share: spec.Devices[d].ComputeShare, Cap: spec.Devices[d].ComputeMax, Priority: spec.Priority}
}

// joinScheds makes the daemon a member of the scheduler of every GPU where
// t's policy is active and it is not one yet. It joins what it can and
// returns why it could not join the others.
func (h *held) joinScheds(t heldTenant) error {
	var errs []error
	for d, dev := range t.spec.Devices {
		p := policy(t.spec, d)
		if !p.Active() || t.sched[dev.UUID] != nil {
			continue
		}
		if dev.UUID == "" {
			errs = append(errs, fmt.Errorf("tenant %s: device %d has no GPU UUID: compute policies need NVML", t.spec.Name, d))
			continue
		}
		m, err := sched.Join(h.dir, dev.UUID, t.spec.Name, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", t.spec.Name, err))
			continue
		}
		t.sched[dev.UUID] = m
	}
	return errors.Join(errs...)
}

// leaveScheds ends the daemon's membership of t's schedulers; an entry
// lives on while a run of the tenant is a member.
func leaveScheds(t heldTenant) {
	for u, m := range t.sched {
		m.Close()
		delete(t.sched, u)
	}
}

// load reads the registry. Anyone may create files in the state folder:
// one this user did not write is refused, not believed.
func (h *held) load() ([]record, error) {
	f, err := os.OpenFile(h.registry, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry of held tenants: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; !st.Mode().IsRegular() || uid != uint32(os.Geteuid()) {
		return nil, fmt.Errorf("%s is not a registry this user wrote (owner uid %d); remove it", h.registry, uid)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRegistry+1))
	if err != nil {
		return nil, err
	}
	var recs []record
	if len(data) > maxRegistry || json.Unmarshal(data, &recs) != nil {
		return nil, fmt.Errorf("%s is damaged; remove it (tenants held by the last daemon are then not re-adopted)", h.registry)
	}
	return recs, nil
}

// save writes the registry aside and renames it into place, so that it is
// whole whenever the daemon dies.
func (h *held) save() error {
	recs := []record{}
	for _, n := range h.names() {
		t := h.tenants[n]
		prio := t.spec.Priority
		recs = append(recs, record{n, t.created.UnixNano(), t.spec.Devices, t.spec.CtxBytes, &prio, t.spec.SM, t.labels})
	}
	data, _ := json.Marshal(recs)
	f, err := os.CreateTemp(h.dir, registryTmp+"*")
	if err != nil {
		return fmt.Errorf("registry of held tenants: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), h.registry)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("registry of held tenants: %w", err)
	}
	return nil
}

func (h *held) names() []string { return slices.Sorted(maps.Keys(h.tenants)) }

// create creates the tenant spec.Name, or joins one with the same quotas,
// and holds it, for whom labels say (nil: as before).
func (h *held) create(spec tenant.Spec, labels map[string]string) (tenant.Info, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, err := tenant.Acquire(h.dir, spec)
	if err != nil {
		return tenant.Info{}, false, status.Error(codes.FailedPrecondition, err.Error())
	}
	info, err := tenant.Read(t.Path)
	if err != nil {
		t.Release()
		return tenant.Info{}, false, status.Error(codes.Internal, err.Error())
	}
	old, had := h.tenants[spec.Name]
	if had && old.created.Equal(info.Created) {
		t.Release() // a member already
		if labels != nil && !maps.Equal(labels, old.labels) {
			ht := old
			ht.labels = labels
			h.tenants[spec.Name] = ht
			if err := h.save(); err != nil {
				h.tenants[spec.Name] = old
				return tenant.Info{}, false, status.Error(codes.Internal, err.Error())
			}
		}
		return info, false, nil
	}
	if labels == nil && had {
		labels = old.labels
	}
	spec.Devices, spec.Priority, spec.SM = t.Devices, t.Priority, t.SM
	ht := heldTenant{t, info.Created, spec, map[string]*sched.Member{}, labels}
	if err := h.joinScheds(ht); err != nil {
		leaveScheds(ht)
		t.Release()
		return tenant.Info{}, false, status.Error(codes.FailedPrecondition, err.Error())
	}
	h.tenants[spec.Name] = ht
	if err := h.save(); err != nil {
		if had {
			h.tenants[spec.Name] = old
		} else {
			delete(h.tenants, spec.Name)
		}
		leaveScheds(ht)
		t.Release()
		return tenant.Info{}, false, status.Error(codes.Internal, err.Error())
	}
	if had { // the file it held was replaced
		leaveScheds(old)
		old.Release()
	}
	return info, t.Created, nil
}

// remove lets go of a held tenant nobody uses; it is removed unless a run
// still holds it. It reports whether the file is gone.
func (h *held) remove(name string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tenants[name]
	if !ok {
		if _, err := os.Lstat(tenant.Path(h.dir, name)); err == nil {
			return false, status.Errorf(codes.FailedPrecondition, "tenant %s is not held by the daemon: it goes when its last run exits", name)
		}
		return false, status.Errorf(codes.NotFound, "no tenant %s", name)
	}
	info, err := tenant.Read(t.Path)
	if err != nil {
		return false, status.Error(codes.FailedPrecondition, err.Error())
	}
	if n := len(info.Procs); n > 0 {
		pids := make([]string, n)
		for i, p := range info.Procs {
			pids[i] = fmt.Sprint(p.Pid)
		}
		if n == 1 {
			return false, status.Errorf(codes.FailedPrecondition, "tenant %s has 1 process using it (pid %s)", name, pids[0])
		}
		return false, status.Errorf(codes.FailedPrecondition, "tenant %s has %d processes using it (pids %s)", name, n, strings.Join(pids, " "))
	}
	delete(h.tenants, name)
	if err := h.save(); err != nil {
		h.tenants[name] = t
		return false, status.Error(codes.Internal, err.Error())
	}
	leaveScheds(t)
	if err := t.Release(); err != nil {
		return false, status.Error(codes.Internal, err.Error())
	}
	_, err = os.Lstat(t.Path)
	return errors.Is(err, fs.ErrNotExist), nil
}

// holds reports whether info is a tenant the daemon holds.
func (h *held) holds(info tenant.Info) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.tenants[info.Name]
	return ok && t.created.Equal(info.Created)
}

// labelsOf is what the held tenant info was created for; nil if the daemon
// does not hold that file.
func (h *held) labelsOf(info tenant.Info) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.tenants[info.Name]; ok && t.created.Equal(info.Created) {
		return t.labels
	}
	return nil
}

// allLabels is the labels of every held tenant that has some, by name.
func (h *held) allLabels() map[string]map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]map[string]string{}
	for n, t := range h.tenants {
		if len(t.labels) > 0 {
			out[n] = t.labels
		}
	}
	return out
}

func (h *held) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.tenants)
}

// releaseAll ends the daemon's membership of every tenant, which removes
// those no run holds. The registry stays: a daemon started later re-adopts
// those that are left and creates the others again.
func (h *held) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n, t := range h.tenants {
		leaveScheds(t)
		t.Release()
		delete(h.tenants, n)
	}
}

// update gives tenant info the compute policies devs, priority prio and
// SM percentage sm:
// first the schedulers of its GPUs, so that its running processes follow
// (a GPU's scheduler refuses shares above 100 %), then its file, for
// processes that start later and flexgv ps, then the registry if the
// daemon holds it. A tenant the daemon holds gets its membership of the
// schedulers where its policy becomes active, and leaves those where it
// no longer is. On failure the schedulers are put back as they were.
func (h *held) update(info tenant.Info, devs []tenant.DeviceQuota, prio, sm uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ht, isHeld := h.tenants[info.Name]
	isHeld = isHeld && ht.created.Equal(info.Created)
	old := tenant.Spec{Name: info.Name, Devices: quotas(info), Priority: info.Priority}
	next := tenant.Spec{Name: info.Name, Devices: devs, Priority: prio}
	var changed []int
	var joined []string
	undo := func() {
		for _, d := range changed {
			sched.Update(h.dir, devs[d].UUID, info.Name, policy(old, d))
		}
		for _, u := range joined {
			ht.sched[u].Close()
			delete(ht.sched, u)
		}
	}
	for d, dev := range devs {
		p := policy(next, d)
		if dev.UUID == "" || p == policy(old, d) && !(isHeld && p.Active() && ht.sched[dev.UUID] == nil) {
			continue
		}
		if isHeld && p.Active() && ht.sched[dev.UUID] == nil {
			m, err := sched.Join(h.dir, dev.UUID, info.Name, p)
			if err != nil {
				undo()
				return status.Error(codes.FailedPrecondition, err.Error())
			}
			ht.sched[dev.UUID] = m
			joined = append(joined, dev.UUID)
		}
		// A GPU where no member of the tenant is has nothing to change: its
		// runs join with what the file says.
		g, err := sched.Read(h.dir, dev.UUID)
		if err != nil {
			undo()
			return status.Error(codes.Internal, err.Error())
		}
		if g == nil || !slices.ContainsFunc(g.Tenants, func(t sched.TenantStat) bool { return t.Name == info.Name }) {
			continue
		}
		if err := sched.Update(h.dir, dev.UUID, info.Name, p); err != nil {
			undo()
			return status.Error(codes.FailedPrecondition, err.Error())
		}
		changed = append(changed, d)
	}
	if err := tenant.SetCompute(h.dir, info.Name, devs, prio, sm); err != nil {
		undo()
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	if !isHeld {
		return nil
	}
	for d, dev := range devs {
		if m := ht.sched[dev.UUID]; m != nil && !policy(next, d).Active() {
			m.Close()
			delete(ht.sched, dev.UUID)
		}
	}
	ht.spec.Devices, ht.spec.Priority, ht.spec.SM = devs, prio, sm
	h.tenants[info.Name] = ht
	if err := h.save(); err != nil {
		return status.Errorf(codes.Internal, "tenant %s is updated, but not the daemon's record of it (a restarted daemon re-adopts it as its file says): %v", info.Name, err)
	}
	return nil
}
