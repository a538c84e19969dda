package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// errMemoryFixed says why an update cannot touch memory quotas.
const errMemoryFixed = "memory quotas cannot change while a tenant lives: each process's shim reads them once, at its start"

func (a *api) UpdateTenant(_ context.Context, r *flexgvv1.UpdateTenantRequest) (*flexgvv1.UpdateTenantResponse, error) {
	if err := tenant.CheckName(r.Name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if r.Compute == "" && r.ComputeMax == "" && r.Priority == "" && r.Sm == "" {
		return nil, status.Error(codes.InvalidArgument, "compute, compute_max, priority and sm are empty; give what to change ("+errMemoryFixed+")")
	}
	gpus, err := a.nvml.GPUs()
	if (err != nil || gpus == nil) && (r.Compute != "" || r.ComputeMax != "" || r.Priority != "") {
		return nil, status.Error(codes.FailedPrecondition, "compute, compute_max and priority need NVML to identify the GPUs, and the daemon has none")
	}
	infos, _, err := tenant.List(a.dir)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	i := slices.IndexFunc(infos, func(in tenant.Info) bool { return in.Name == r.Name })
	if i < 0 {
		return nil, status.Errorf(codes.NotFound, "no tenant %s", r.Name)
	}
	info := infos[i]
	devs := quotas(info)
	if err := mergeCompute("compute_max", r.ComputeMax, gpus, devs, func(d *tenant.DeviceQuota, v uint32) { d.ComputeMax = v }); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := mergeCompute("compute", r.Compute, gpus, devs, func(d *tenant.DeviceQuota, v uint32) { d.ComputeShare = v }); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	for d, dev := range devs {
		if dev.ComputeMax > 0 && dev.ComputeShare > dev.ComputeMax {
			return nil, status.Errorf(codes.InvalidArgument, "device %d: a share of %s is above its cap of %s",
				d, sched.Percent(dev.ComputeShare), sched.Percent(dev.ComputeMax))
		}
	}
	prio := info.Priority
	if r.Priority != "" {
		if prio, err = sched.ParsePriority(r.Priority); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	sm := info.SM
	if r.Sm == "all" {
		sm = 0
	} else if r.Sm != "" {
		if sm, err = tenant.ParseSM(r.Sm); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error()+`, or "all"`)
		}
		if err := mps.Need(mps.PipeDir(), sm); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	if err := checkShares(infos, info.Name, devs); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err := a.held.update(info, devs, prio, sm); err != nil {
		return nil, err
	}
	a.log.Printf("updated tenant %s (compute %q, compute_max %q, priority %q, sm %q)", r.Name, r.Compute, r.ComputeMax, r.Priority, r.Sm)
	now, err := tenant.Read(tenant.Path(a.dir, r.Name))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &flexgvv1.UpdateTenantResponse{Tenant: a.toProto(now, a.held.holds(now))}, nil
}

// quotas are a tenant's entries as it was created with them.
func quotas(info tenant.Info) []tenant.DeviceQuota {
	devs := make([]tenant.DeviceQuota, len(info.Devices))
	for d, dev := range info.Devices {
		devs[d] = tenant.DeviceQuota{UUID: dev.UUID, Quota: dev.Quota, ComputeMax: dev.ComputeMax, ComputeShare: dev.Share}
	}
	return devs
}

// mergeCompute applies an update's shares or caps to a tenant's entries:
// "PCT" or "none" for every entry, or "DEVICE=PCT|none,..." for the GPUs
// named (by NVML index or UUID), whose entries must be in the tenant; the
// others keep theirs. Percentages are checked as flexgv run checks them.
func mergeCompute(field, spec string, gpus []gpuinfo.GPU, devs []tenant.DeviceQuota, set func(*tenant.DeviceQuota, uint32)) error {
	if spec == "" {
		return nil
	}
	for d, dev := range devs {
		if dev.UUID == "" {
			return fmt.Errorf("tenant device %d has no GPU UUID (it was made without NVML): compute policies need one", d)
		}
	}
	if !strings.Contains(spec, "=") {
		v, err := percent(field, spec, spec, gpus)
		if err != nil {
			return err
		}
		for d := range devs {
			set(&devs[d], v)
		}
		return nil
	}
	named := map[int]bool{}
	for _, part := range strings.Split(spec, ",") {
		key, v, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%s %s: %q is not DEVICE=PCT", field, spec, part)
		}
		// The GPU the key names, as flexgv run finds it.
		probe := key + "=100%"
		which, err := tenant.ParseCompute(field, probe, gpus)
		if err != nil {
			return restate(err, field, probe, spec)
		}
		g := slices.IndexFunc(which, func(v uint32) bool { return v != 0 })
		if named[g] {
			return fmt.Errorf("%s %s: device %d is given twice", field, spec, g)
		}
		named[g] = true
		pct, err := percent(field, spec, v, gpus)
		if err != nil {
			return err
		}
		d := slices.IndexFunc(devs, func(dev tenant.DeviceQuota) bool { return dev.UUID == gpus[g].UUID })
		if d < 0 {
			return fmt.Errorf("%s %s: the tenant has no entry for device %d (%s)", field, spec, g, gpus[g].UUID)
		}
		set(&devs[d], pct)
	}
	return nil
}

// percent reads one value of spec: "none" is 0, anything else a percentage
// as flexgv run reads it.
func percent(field, spec, v string, gpus []gpuinfo.GPU) (uint32, error) {
	if strings.EqualFold(strings.TrimSpace(v), "none") {
		return 0, nil
	}
	pcts, err := tenant.ParseCompute(field, v, gpus)
	if err != nil {
		return 0, restate(err, field, v, spec)
	}
	return pcts[0], nil
}

// restate shows a ParseCompute error about a part of spec as one about spec.
func restate(err error, field, part, spec string) error {
	return errors.New(strings.Replace(err.Error(), field+" "+part+":", field+" "+spec+":", 1))
}

// checkShares refuses shares that would make those of a GPU add up to more
// than 100 %, counting every tenant of the node that has one there.
func checkShares(infos []tenant.Info, name string, devs []tenant.DeviceQuota) error {
	for d, dev := range devs {
		if dev.ComputeShare == 0 {
			continue
		}
		sum := dev.ComputeShare
		var others []string
		for _, in := range infos {
			if in.Name == name {
				continue
			}
			for _, o := range in.Devices {
				if o.UUID == dev.UUID && o.Share > 0 {
					sum += o.Share
					others = append(others, in.Name+" "+sched.Percent(o.Share))
				}
			}
		}
		if sum > 10000 {
			return fmt.Errorf("device %d (%s): shares would add up to %s (%s, and %s asks %s); the most is 100%%",
				d, dev.UUID, sched.Percent(sum), strings.Join(others, ", "), name, sched.Percent(dev.ComputeShare))
		}
	}
	return nil
}
