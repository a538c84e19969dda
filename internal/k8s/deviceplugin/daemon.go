package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/suspend"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// Daemon is what the device plugin needs of the node daemon: the node's
// GPUs, and the tenants it keeps for pods.
type Daemon interface {
	// Devices lists the node's GPUs as NVML reports them; an error means
	// NVML could not be read at all.
	Devices(ctx context.Context) ([]Device, error)
	// CreateTenant creates the tenant, or takes over the one of that name
	// with the same limits, and returns its file's path on the node. The
	// daemon holds it, across its own restarts, until DeleteTenant.
	CreateTenant(ctx context.Context, t Tenant) (path string, err error)
	// DeleteTenant lets go of a tenant; removed is false while processes
	// still use it (it goes when the last one exits).
	DeleteTenant(ctx context.Context, name string) (removed bool, err error)
	// Tenants lists the tenants the daemon holds.
	Tenants(ctx context.Context) ([]Held, error)
	// Suspend takes the processes of tenant name off the GPU, Resume
	// brings them back (package suspend); each says what it did. A tenant
	// already so is an error wrapping suspend.ErrSuspended or
	// suspend.ErrNotSuspended.
	Suspend(ctx context.Context, name string) (string, error)
	Resume(ctx context.Context, name string) (string, error)
}

// Held is a tenant the daemon holds, and the pod it was made for ("" where
// the daemon that made it did not record it).
type Held struct {
	Name, Namespace, Pod string
}

// holds reports whether the tenant name is among have.
func holds(have []Held, name string) bool {
	return slices.ContainsFunc(have, func(h Held) bool { return h.Name == name })
}

// Device is one GPU of the node.
type Device struct {
	Index       int
	Minor       int // its device node is /dev/nvidiaMinor; -1: unknown, the index is used
	UUID        string
	MemoryBytes uint64
	MIG         bool // MIG mode on: not advertised
}

// Tenant is what a pod's container is limited to.
type Tenant struct {
	Name     string
	Devices  []TenantDevice
	Priority vgpu.Priority
	// ContextBytes is charged per CUDA context where the shim cannot
	// measure one.
	ContextBytes uint64
	// SM is the percentage of each GPU's SMs under MPS; 0: all.
	SM uint32
	// Pod and Container it is for, in metrics and flexgv ps.
	Namespace, Pod, Container string
}

// TenantDevice is a tenant's limits on one GPU.
type TenantDevice struct {
	UUID       string
	QuotaBytes uint64
	ComputePct int64 // guaranteed share; 0: none
	ComputeMax int64 // cap, percent; 0: none
}

// DaemonAPI is a Daemon over the node daemon's API, called in the
// daemon's own process (flexgv daemon --kubernetes): no socket between.
// Dir is its tenants' folder.
type DaemonAPI struct {
	API flexgvv1.DaemonServer
	Dir string
}

// suspendWait is how long a suspend waits for each process's submitted
// work, as flexgv suspend does by default.
const suspendWait = 30 * time.Second

// Suspend implements Daemon.
func (d DaemonAPI) Suspend(ctx context.Context, name string) (string, error) {
	var warn strings.Builder
	r, err := suspend.Suspend(d.Dir, name, suspendWait, &warn)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d process(es), %s off the GPU in %s%s", r.Procs, tenant.FormatSize(r.Bytes), r.Took.Round(time.Millisecond), warn.String()), nil
}

// Resume implements Daemon.
func (d DaemonAPI) Resume(ctx context.Context, name string) (string, error) {
	var warn strings.Builder
	r, err := suspend.Resume(d.Dir, name, "", &warn)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d process(es), %s back on %s in %s%s", r.Procs, tenant.FormatSize(r.Bytes), r.Where, r.Took.Round(time.Millisecond), warn.String()), nil
}

// Devices implements Daemon.
func (d DaemonAPI) Devices(ctx context.Context) ([]Device, error) {
	resp, err := d.API.ListDevices(ctx, &flexgvv1.ListDevicesRequest{})
	if err != nil {
		return nil, err
	}
	if resp.NvmlError != "" {
		return nil, errors.New(resp.NvmlError)
	}
	out := make([]Device, len(resp.Devices))
	for i, dev := range resp.Devices {
		out[i] = Device{Index: int(dev.Index), Minor: int(dev.MinorNumber), UUID: dev.Uuid, MemoryBytes: dev.MemoryTotalBytes, MIG: dev.MigEnabled}
	}
	return out, nil
}

// CreateTenant implements Daemon: the limits are given per GPU UUID, as
// flexgv run --mem and --compute take them.
func (d DaemonAPI) CreateTenant(ctx context.Context, t Tenant) (string, error) {
	var mem, compute, limit []string
	for _, dev := range t.Devices {
		mem = append(mem, fmt.Sprintf("%s=%dB", dev.UUID, dev.QuotaBytes))
		if dev.ComputePct > 0 {
			compute = append(compute, fmt.Sprintf("%s=%d%%", dev.UUID, dev.ComputePct))
		}
		if dev.ComputeMax > 0 {
			limit = append(limit, fmt.Sprintf("%s=%d%%", dev.UUID, dev.ComputeMax))
		}
	}
	labels := map[string]string{}
	for k, v := range map[string]string{"namespace": t.Namespace, "pod": t.Pod, "container": t.Container} {
		if v != "" {
			labels[k] = v
		}
	}
	sm := ""
	if t.SM > 0 {
		sm = fmt.Sprintf("%d%%", t.SM)
	}
	resp, err := d.API.CreateTenant(ctx, &flexgvv1.CreateTenantRequest{
		Name: t.Name, Memory: strings.Join(mem, ","), Compute: strings.Join(compute, ","), ComputeMax: strings.Join(limit, ","),
		Priority: string(t.Priority), Sm: sm, ContextBytes: t.ContextBytes,
		Labels: labels,
	})
	if err != nil {
		return "", fmt.Errorf("tenant %s: %s", t.Name, status.Convert(err).Message())
	}
	return resp.Tenant.Path, nil
}

// DeleteTenant implements Daemon.
func (d DaemonAPI) DeleteTenant(ctx context.Context, name string) (bool, error) {
	resp, err := d.API.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: name})
	switch status.Code(err) {
	case codes.OK:
		return resp.Removed, nil
	case codes.FailedPrecondition:
		return false, nil
	case codes.NotFound:
		return true, nil
	}
	return false, err
}

// Tenants implements Daemon: whom a tenant is for is in the labels
// CreateTenant gave it.
func (d DaemonAPI) Tenants(ctx context.Context) ([]Held, error) {
	resp, err := d.API.ListTenants(ctx, &flexgvv1.ListTenantsRequest{})
	if err != nil {
		return nil, err
	}
	var out []Held
	for _, t := range resp.Tenants {
		if t.Held {
			out = append(out, Held{Name: t.Name, Namespace: t.Labels["namespace"], Pod: t.Labels["pod"]})
		}
	}
	return out, nil
}
