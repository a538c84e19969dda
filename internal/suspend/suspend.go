// Package suspend takes a tenant's processes off the GPU and brings them
// back, through the driver's process checkpoint API (package ckpt): for
// flexgv suspend and resume, and for the node daemon's pods.
package suspend

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/flexgv/flexgv/internal/ckpt"
	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/tenant"
)

// What a suspend of a suspended tenant, or a resume of a running one,
// returns (wrapped).
var (
	ErrSuspended    = errors.New("is already suspended")
	ErrNotSuspended = errors.New("is not suspended")
)

// Result is what a suspend or resume did.
type Result struct {
	Procs int
	Bytes uint64 // the device memory their charges said they held
	Took  time.Duration
	// Of Took, a suspend's wait for the work the processes had submitted
	// (the driver's lock); the rest moved their memory.
	Waited time.Duration
	Where  string // "the GPU", or the GPU a resume restored them onto
}

// target is one process of a tenant as the driver knows it.
type target struct {
	proc tenant.Proc
	pid  int // as NVML and the checkpoint API know it
}

// tenantTargets reads the tenant and its live processes.
func tenantTargets(dir, cmd, name string) (tenant.Info, []target, error) {
	if err := tenant.CheckName(name); err != nil {
		return tenant.Info{}, nil, fmt.Errorf("flexgv %s: %w", cmd, err)
	}
	info, err := tenant.Read(tenant.Path(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return info, nil, fmt.Errorf("flexgv %s: no tenant %s (flexgv ps lists them)", cmd, name)
	}
	if err != nil {
		return info, nil, fmt.Errorf("flexgv %s: %w", cmd, err)
	}
	var ts []target
	for _, p := range info.Procs {
		pid := p.NvmlPid
		if pid == 0 {
			pid = p.Pid
		}
		ts = append(ts, target{p, pid})
	}
	if len(ts) == 0 {
		return info, nil, fmt.Errorf("flexgv %s: tenant %s has no processes", cmd, name)
	}
	return info, ts, nil
}

func openDriver(cmd string) (*ckpt.Driver, error) {
	d, err := ckpt.Open()
	if err != nil {
		return nil, fmt.Errorf("flexgv %s: %w", cmd, err)
	}
	return d, nil
}

// explain turns a driver error about one process into what the user can act on.
func explain(cmd, name string, t target, err error) error {
	switch {
	case ckpt.NotCUDA(err):
		return fmt.Errorf("flexgv %s: process %d of tenant %s is not a CUDA process the driver knows (%v)", cmd, t.pid, name, err)
	case ckpt.TimedOut(err):
		return fmt.Errorf("flexgv %s: process %d of tenant %s did not finish its submitted work in time; it runs on (%v; see --timeout)", cmd, t.pid, name, err)
	case ckpt.OutOfMemory(err):
		return fmt.Errorf("flexgv %s: the GPU lacks the room for process %d of tenant %s; it stays suspended (%v)", cmd, t.pid, name, err)
	}
	return fmt.Errorf("flexgv %s: process %d of tenant %s: %w", cmd, t.pid, name, err)
}

// Suspend takes every process of tenant name (of the tenants in dir) off
// the GPU: all are locked (each given timeout to finish its submitted
// work), then checkpointed; on a failure what was done is undone. Warnings
// go to warn.
func Suspend(dir, name string, timeout time.Duration, warn io.Writer) (Result, error) {
	_, ts, err := tenantTargets(dir, "suspend", name)
	if err != nil {
		return Result{}, err
	}
	var todo []target
	for _, t := range ts {
		if !t.proc.Suspended {
			todo = append(todo, t)
		}
	}
	if len(todo) == 0 {
		return Result{}, fmt.Errorf("flexgv suspend: tenant %s %w (flexgv resume %s brings it back)", name, ErrSuspended, name)
	}
	d, err := openDriver("suspend")
	if err != nil {
		return Result{}, err
	}
	for _, t := range todo {
		st, err := d.State(t.pid)
		if err != nil {
			return Result{}, explain("suspend", name, t, err)
		}
		if st != ckpt.Running {
			return Result{}, fmt.Errorf("flexgv suspend: process %d of tenant %s is %s, not running: another checkpoint tool holds it", t.pid, name, st)
		}
	}
	start := time.Now()
	// The whole tenant stops before any of it leaves the GPU; on a failure
	// what was done is undone, so the tenant is left as it was.
	var locked, saved []target
	undo := func() {
		for _, t := range saved {
			d.Restore(t.pid)
		}
		for _, t := range locked {
			d.Unlock(t.pid)
		}
	}
	for _, t := range todo {
		if err := d.Lock(t.pid, timeout); err != nil {
			undo()
			return Result{}, explain("suspend", name, t, err)
		}
		locked = append(locked, t)
	}
	waited := time.Since(start)
	for _, t := range todo {
		if err := d.Checkpoint(t.pid); err != nil {
			undo()
			return Result{}, explain("suspend", name, t, err)
		}
		saved = append(saved, t)
	}
	for _, t := range todo {
		if err := tenant.SetSuspended(dir, name, t.proc.Pid, true); err != nil {
			fmt.Fprintf(warn, "flexgv suspend: warning: process %d is suspended, but flexgv ps will not say so: %v\n", t.pid, err)
		}
	}
	return Result{Procs: len(todo), Bytes: heldBytes(todo), Took: time.Since(start), Waited: waited, Where: "the GPU"}, nil
}

// heldBytes is what the processes' tenant charges say they hold, all devices.
func heldBytes(ts []target) uint64 {
	var sum uint64
	for _, t := range ts {
		for _, b := range t.proc.Used {
			sum += b
		}
	}
	return sum
}

// Resume brings tenant name's suspended processes back, onto the GPU
// they left or (gpu: a UUID or NVML index) onto that one, once the GPU
// has the tenant's quota free. Warnings go to warn.
func Resume(dir, name, gpu string, warn io.Writer) (Result, error) {
	info, ts, err := tenantTargets(dir, "resume", name)
	if err != nil {
		return Result{}, err
	}
	d, err := openDriver("resume")
	if err != nil {
		return Result{}, err
	}
	// What the driver says, not the marks alone: a suspend killed half-way
	// leaves processes locked, or checkpointed, without its mark.
	var saved, held []target
	for _, t := range ts {
		st, err := d.State(t.pid)
		if err != nil {
			return Result{}, explain("resume", name, t, err)
		}
		switch st {
		case ckpt.Checkpointed:
			saved = append(saved, t)
			held = append(held, t)
		case ckpt.Locked:
			held = append(held, t)
		case ckpt.Failed:
			return Result{}, fmt.Errorf("flexgv resume: process %d of tenant %s failed in the driver's checkpoint or restore and cannot resume", t.pid, name)
		}
	}
	if len(held) == 0 {
		for _, t := range ts {
			if t.proc.Suspended { // marked by a suspend that was undone
				tenant.SetSuspended(dir, name, t.proc.Pid, false)
			}
		}
		return Result{}, fmt.Errorf("flexgv resume: tenant %s %w", name, ErrNotSuspended)
	}
	var onto *move
	if gpu != "" {
		if onto, err = resolveMove(info, gpu); err != nil {
			return Result{}, err
		}
	}
	if onto != nil && d.Version < ckpt.RemapVersion {
		return Result{}, fmt.Errorf("flexgv resume: tenant %s stays suspended: the CUDA driver supports CUDA %s, restoring onto another GPU (--gpu) needs CUDA %s (driver 580) or later; flexgv resume %s brings it back where it was",
			name, ckpt.FormatVersion(d.Version), ckpt.FormatVersion(ckpt.RemapVersion), name)
	}
	if onto != nil && len(saved) < len(held) {
		// A process locked but not checkpointed is still on its GPU.
		return Result{}, fmt.Errorf("flexgv resume: tenant %s was not wholly checkpointed (a suspend stopped half-way): resume it without --gpu first", name)
	}
	if len(saved) > 0 {
		check := checkRoom
		if onto != nil {
			check = onto.checkRoom
		}
		if err := check(info); err != nil {
			return Result{}, err
		}
	}
	start := time.Now()
	var restored []target
	for _, t := range saved {
		if err := restoreOne(d, onto, t.pid); err != nil {
			for _, r := range restored { // all of it stays suspended
				unrestore(warn, d, onto, r.pid)
			}
			if onto != nil && ckpt.NotCUDA(err) {
				return Result{}, fmt.Errorf("flexgv resume: the driver refused to restore process %d of tenant %s onto GPU %d (a GPU of another chip type?); it stays suspended (%v)",
					t.pid, name, onto.gpu.Index, err)
			}
			return Result{}, explain("resume", name, t, err)
		}
		restored = append(restored, t)
	}
	if onto != nil && onto.from != onto.to {
		for _, t := range saved {
			if err := tenant.MoveCharges(dir, name, t.proc.Pid, onto.from, onto.to); err != nil {
				fmt.Fprintf(warn, "flexgv resume: warning: process %d is on GPU %d now, but flexgv ps will count it on its former GPU: %v\n", t.pid, onto.gpu.Index, err)
			}
		}
	}
	for _, t := range held {
		if err := d.Unlock(t.pid); err != nil {
			return Result{}, explain("resume", name, t, err)
		}
		if err := tenant.SetSuspended(dir, name, t.proc.Pid, false); err != nil {
			fmt.Fprintf(warn, "flexgv resume: warning: process %d runs again, but flexgv ps may still say suspended: %v\n", t.pid, err)
		}
	}
	where := "the GPU"
	if onto != nil {
		where = fmt.Sprintf("GPU %d (%s)", onto.gpu.Index, onto.gpu.UUID)
	}
	return Result{Procs: len(held), Bytes: heldBytes(saved), Took: time.Since(start), Where: where}, nil
}

// checkRoom refuses a resume where a GPU of the tenant has less free than
// its quota there (its usage where it has no quota): the tenant was
// promised that much, and would come back into a GPU it cannot use.
func checkRoom(info tenant.Info) error {
	devs, err := gpuinfo.Devices()
	if err != nil {
		return fmt.Errorf("flexgv resume: cannot read the GPUs' free memory: %w", err)
	}
	var short []string
	for _, du := range info.Devices {
		need, what := du.Quota, "its quota"
		if need == 0 {
			need, what = du.Used, "what it holds"
		}
		if need == 0 {
			continue
		}
		for _, g := range devs {
			if du.UUID == "" && g.Index != du.Index || du.UUID != "" && !strings.EqualFold(g.UUID, du.UUID) {
				continue
			}
			if free := g.Total - min(g.Used, g.Total); free < need {
				short = append(short, fmt.Sprintf("GPU %d (%s) has %s free, the tenant needs %s (%s)", g.Index, g.UUID,
					tenant.FormatSize(free), tenant.FormatSize(need), what))
			}
		}
	}
	if len(short) > 0 {
		return fmt.Errorf("flexgv resume: tenant %s stays suspended: %s", info.Name, strings.Join(short, "; "))
	}
	return nil
}
