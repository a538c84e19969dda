package cli

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// quotaFlags are the tenant options of flexgv run.
type quotaFlags struct {
	mem, computeMax, compute, priority, group, ctxMem, sm string
	changed                                               func(name string) bool // whether the flag was given
}

// Bounds of what a tenant can work with.
const maxCtxNoDevices = 64 << 30 // the bound for --ctx-mem when NVML cannot say the devices' sizes

func (q *quotaFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&q.mem, "mem", "", "GPU memory quota: SIZE or PCT% for every device, or DEV=SIZE|PCT%,... (sizes in B, KiB, MiB, GiB, KB, MB, GB)")
	c.Flags().StringVar(&q.computeMax, "compute-max", "", "cap on the share of a GPU's time the program's kernels take, even when it is idle: PCT% for every device, or DEV=PCT%,...")
	c.Flags().StringVar(&q.compute, "compute", "", "share of a GPU's time guaranteed while tenants contend (idle time is lent to whoever has work): PCT% for every device, or DEV=PCT%,...")
	c.Flags().StringVar(&q.priority, "priority", "", "low, normal (the default), high, or 0 to 9: while a tenant of higher priority has work, lower ones wait")
	c.Flags().StringVar(&q.sm, "sm", "", "under MPS (flexgv daemon --mps), the percentage of each GPU's SMs the program's kernels may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), from 1 to 100: room left to others, such as a tenant of higher priority")
	c.Flags().StringVar(&q.group, "group", "", "tenant name shared by several runs (created by the first, with its limits)")
	c.Flags().StringVar(&q.ctxMem, "ctx-mem", "512MiB", "device memory charged per CUDA context when it cannot be measured through NVML")
	q.changed = c.Flags().Changed
}

// check refuses flag values no tenant can work with, before anything is
// created, and returns the --ctx-mem size.
func (q *quotaFlags) check() (uint64, error) {
	if q.changed("mem") && q.mem == "" {
		return 0, errors.New("--mem is empty; give a size (8GiB), a percentage (25%) or DEVICE=SIZE,...")
	}
	for _, f := range []struct{ name, v string }{{"compute-max", q.computeMax}, {"compute", q.compute}} {
		if q.changed(f.name) && f.v == "" {
			return 0, fmt.Errorf("--%s is empty; give a percentage (30%%) or DEVICE=PCT,...", f.name)
		}
	}
	if q.changed("priority") {
		if _, err := sched.ParsePriority(q.priority); err != nil || q.priority == "" {
			return 0, fmt.Errorf("--priority %q: use low, normal, high or a number from 0 to %d (higher runs first)", q.priority, sched.PriorityMax)
		}
	}
	if q.changed("sm") {
		if _, err := tenant.ParseSM(q.sm); err != nil {
			return 0, err
		}
	}
	if q.changed("group") && q.group == "" {
		return 0, errors.New("--group is empty; give the tenant's name")
	}
	ctx, err := tenant.ParseSize(q.ctxMem)
	if err != nil {
		return 0, fmt.Errorf("--ctx-mem: %w", err)
	}
	// The default is only charged when NVML cannot measure a context: a
	// device smaller than it must not turn it into an error.
	if !q.changed("ctx-mem") {
		return ctx, nil
	}
	if ctx < tenant.MinCtx {
		return 0, fmt.Errorf("--ctx-mem %s: below %s; no CUDA context takes less", q.ctxMem, tenant.FormatSize(tenant.MinCtx))
	}
	gpus, err := gpuinfo.GPUs()
	if err != nil || len(gpus) == 0 {
		if ctx > maxCtxNoDevices {
			return 0, fmt.Errorf("--ctx-mem %s: above %s (the devices' sizes are unknown)", q.ctxMem, tenant.FormatSize(maxCtxNoDevices))
		}
		return ctx, nil
	}
	least := slices.MinFunc(gpus, func(a, b gpuinfo.GPU) int { return cmp.Compare(a.Total, b.Total) })
	if ctx > least.Total {
		return 0, fmt.Errorf("--ctx-mem %s: more than the smallest device has (%s)", q.ctxMem, tenant.FormatSize(least.Total))
	}
	return ctx, nil
}

// warnQuota warns about quotas smaller than one CUDA context, which no
// program could then create.
func warnQuota(devs []tenant.DeviceQuota, ctx uint64) {
	warn := func(who string, b uint64) {
		fmt.Fprintf(os.Stderr, "flexgv: warning: %s: quota %s is below what one CUDA context takes (about %s, --ctx-mem); "+
			"CUDA programs in this tenant will fail to create a context\n", who, tenant.FormatSize(b), tenant.FormatSize(ctx))
	}
	// One line when all devices have the same quota, as all MaxDevices
	// entries do without NVML.
	uniform := len(devs) > 1
	for _, dev := range devs {
		uniform = uniform && dev.Quota == devs[0].Quota
	}
	if uniform {
		if devs[0].Quota < ctx {
			warn("every device", devs[0].Quota)
		}
		return
	}
	for d, dev := range devs {
		if dev.Quota != 0 && dev.Quota < ctx {
			warn(fmt.Sprintf("device %d", d), dev.Quota)
		}
	}
}

// setup creates or joins the tenant and returns the environment for the
// shim, and what to do once the program has exited.
func (q *quotaFlags) setup() ([]string, func(), error) {
	ctx, err := q.check()
	if err != nil {
		return nil, nil, err
	}
	limits := tenant.Limits{Mem: q.mem, ComputeMax: q.computeMax, Compute: q.compute}
	prio, _ := sched.ParsePriority(q.priority)
	var sm uint32
	if q.sm != "" {
		sm, _ = tenant.ParseSM(q.sm)
	}
	limited := limits != tenant.Limits{} || q.priority != "" || sm != 0
	if !limited && q.group == "" {
		return nil, func() {}, nil
	}
	var devices []tenant.DeviceQuota
	var gpus []gpuinfo.GPU
	var nvmlErr error
	if limited {
		gpus, nvmlErr = gpuinfo.GPUs()
	}
	if (q.computeMax != "" || q.compute != "" || q.priority != "") && nvmlErr != nil {
		// A value wrong whatever the GPUs is said first.
		if _, err := tenant.ParseLimits(limits, nil); err != nil {
			return nil, nil, err
		}
		// Scheduling is by GPU, shared with other tenants: it needs UUIDs.
		return nil, nil, fmt.Errorf("--compute, --compute-max and --priority need NVML to identify the GPUs: %v", nvmlErr)
	}
	if devices, err = tenant.ParseLimits(limits, gpus); err != nil {
		return nil, nil, err
	}
	if devices == nil && (q.priority != "" || sm != 0) {
		devices = tenant.Entries(gpus)
	}
	if q.mem != "" {
		if nvmlErr != nil {
			fmt.Fprintf(os.Stderr, "flexgv: warning: cannot read the devices' sizes (%v); --mem %s is not checked against them\n", nvmlErr, q.mem)
		}
		warnQuota(devices, ctx)
	}
	name := q.group
	if name == "" {
		name = fmt.Sprintf("run-%d", os.Getpid())
	}
	dir, spec := tenant.Dir(), tenant.Spec{Name: name, Devices: devices, CtxBytes: ctx, Priority: prio, SM: sm}
	// A group created with limits belongs to the node daemon if one runs; a
	// run's own tenant, and a group joined by name, need none.
	if q.group != "" && limited {
		if spec.Devices, err = groupViaDaemon(dir, spec, limits, q.priority, q.sm); err != nil {
			return nil, nil, err
		}
	}
	t, err := tenant.Acquire(dir, spec)
	if err != nil {
		return nil, nil, err
	}
	if err := mps.Need(mps.PipeDir(), t.SM); err != nil {
		t.Release()
		return nil, nil, err
	}
	members, err := joinSchedulers(dir, t)
	release := func() {
		for _, m := range members {
			m.Close()
		}
		if err := t.Release(); err != nil {
			fmt.Fprintf(os.Stderr, "flexgv: warning: leaving tenant %s: %v\n", name, err)
		}
	}
	if err != nil {
		release()
		return nil, nil, err
	}
	// The shim diverts launches only when the tenant has a compute policy.
	env := append([]string{"FLEXGV_TENANT=" + t.Path}, mps.Env(mps.PipeDir(), t.SM)...)
	if len(members) > 0 {
		env = append(env, "FLEXGV_COMPUTE=1")
	}
	return env, release, nil
}

// joinSchedulers makes the tenant a member of the scheduler of every GPU
// it has a compute policy on, for as long as the run lasts.
func joinSchedulers(dir string, t *tenant.Tenant) ([]*sched.Member, error) {
	var members []*sched.Member
	for d, dev := range t.Devices {
		p := sched.Policy{Share: dev.ComputeShare, Cap: dev.ComputeMax, Priority: t.Priority}
		if !p.Active() {
			continue
		}
		if dev.UUID == "" {
			return members, fmt.Errorf("device %d of tenant %s has no GPU UUID: compute policies need NVML", d, t.Name)
		}
		m, err := sched.Join(dir, dev.UUID, t.Name, p)
		if err != nil {
			return members, err
		}
		members = append(members, m)
	}
	return members, nil
}
