package daemon

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"sync"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// nvml is how the daemon reads the node's GPUs, one read at a time.
type nvml struct {
	mu      sync.Mutex
	gpus    func() ([]gpuinfo.GPU, error)
	devices func() ([]gpuinfo.Device, error)
}

func (n *nvml) GPUs() ([]gpuinfo.GPU, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gpus()
}

func (n *nvml) Devices() ([]gpuinfo.Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.devices()
}

// api serves the local API over the tenants in dir.
type api struct {
	flexgvv1.UnimplementedDaemonServer
	dir  string
	held *held
	nvml *nvml
	log  *log.Logger
}

func newAPI(dir string, h *held, n *nvml, w io.Writer) *api {
	return &api{dir: dir, held: h, nvml: n, log: log.New(w, "flexgv daemon: ", 0)}
}

func (a *api) CreateTenant(_ context.Context, r *flexgvv1.CreateTenantRequest) (*flexgvv1.CreateTenantResponse, error) {
	if err := tenant.CheckName(r.Name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if r.Memory == "" && r.ComputeMax == "" && r.Compute == "" && r.Priority == "" && r.Sm == "" {
		return nil, status.Error(codes.InvalidArgument, "memory, compute, compute_max, priority and sm are empty; give quotas as flexgv run --mem takes them (8GiB, 25%, 0=8GiB,...), shares and caps as --compute and --compute-max do, a priority, an SM percentage, or several")
	}
	var sm uint32
	var err error
	if r.Sm != "" {
		if sm, err = tenant.ParseSM(r.Sm); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if err := mps.Need(mps.PipeDir(), sm); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	prio, err := sched.ParsePriority(r.Priority)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if r.ContextBytes < tenant.MinCtx {
		return nil, status.Errorf(codes.InvalidArgument, "context_bytes %d: below %s; no CUDA context takes less", r.ContextBytes, tenant.FormatSize(tenant.MinCtx))
	}
	// Without NVML, quotas are parsed as flexgv run parses them then.
	gpus, err := a.nvml.GPUs()
	if err != nil {
		gpus = nil
	}
	if gpus == nil && (r.Compute != "" || r.ComputeMax != "" || r.Priority != "") {
		return nil, status.Error(codes.FailedPrecondition, "compute, compute_max and priority need NVML to identify the GPUs, and the daemon has none")
	}
	devs, err := tenant.ParseLimits(tenant.Limits{Mem: r.Memory, ComputeMax: r.ComputeMax, Compute: r.Compute}, gpus)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if devs == nil {
		devs = tenant.Entries(gpus)
	}
	if err := checkLabels(r.Labels); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	info, created, err := a.held.create(tenant.Spec{Name: r.Name, Devices: devs, CtxBytes: r.ContextBytes, Priority: prio, SM: sm}, r.Labels)
	if err != nil {
		return nil, err
	}
	if created {
		a.log.Printf("created tenant %s (--mem %q --compute %q --compute-max %q --priority %q --sm %q)", r.Name, r.Memory, r.Compute, r.ComputeMax, r.Priority, r.Sm)
	}
	return &flexgvv1.CreateTenantResponse{Tenant: a.toProto(info, true), Created: created}, nil
}

// LabelKeys are the labels a tenant may carry (CreateTenantRequest.labels).
var LabelKeys = []string{"namespace", "pod", "container"}

// checkLabels refuses labels other than LabelKeys, and values that are
// empty, over 253 bytes (a Kubernetes name's limit) or not printable.
func checkLabels(l map[string]string) error {
	for k, v := range l {
		if !slices.Contains(LabelKeys, k) {
			return fmt.Errorf("label %q: want one of %s", k, strings.Join(LabelKeys, ", "))
		}
		if v == "" || len(v) > 253 || strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) >= 0 {
			return fmt.Errorf("label %s=%q: want 1 to 253 printable characters without spaces", k, v)
		}
	}
	return nil
}

func (a *api) GetTenant(_ context.Context, r *flexgvv1.GetTenantRequest) (*flexgvv1.Tenant, error) {
	if err := tenant.CheckName(r.Name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// Listed, not read: a tenant nobody is left in is removed, not reported.
	infos, _, err := tenant.List(a.dir)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	i := slices.IndexFunc(infos, func(in tenant.Info) bool { return in.Name == r.Name })
	if i < 0 {
		return nil, status.Errorf(codes.NotFound, "no tenant %s", r.Name)
	}
	return a.toProto(infos[i], a.held.holds(infos[i])), nil
}

func (a *api) ListTenants(context.Context, *flexgvv1.ListTenantsRequest) (*flexgvv1.ListTenantsResponse, error) {
	infos, bad, err := tenant.List(a.dir)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &flexgvv1.ListTenantsResponse{StateDir: a.dir}
	for _, info := range infos {
		resp.Tenants = append(resp.Tenants, a.toProto(info, a.held.holds(info)))
	}
	for _, e := range bad {
		resp.Skipped = append(resp.Skipped, e.Error())
	}
	return resp, nil
}

func (a *api) DeleteTenant(_ context.Context, r *flexgvv1.DeleteTenantRequest) (*flexgvv1.DeleteTenantResponse, error) {
	if err := tenant.CheckName(r.Name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	removed, err := a.held.remove(r.Name)
	if err != nil {
		return nil, err
	}
	a.log.Printf("deleted tenant %s", r.Name)
	return &flexgvv1.DeleteTenantResponse{Removed: removed}, nil
}

func (a *api) ListDevices(context.Context, *flexgvv1.ListDevicesRequest) (*flexgvv1.ListDevicesResponse, error) {
	devs, err := a.nvml.Devices()
	if err != nil {
		return &flexgvv1.ListDevicesResponse{NvmlError: err.Error()}, nil
	}
	resp := &flexgvv1.ListDevicesResponse{}
	for _, d := range devs {
		resp.Devices = append(resp.Devices, &flexgvv1.Device{
			Index: uint32(d.Index), Uuid: d.UUID, Name: d.Name,
			MemoryTotalBytes: d.Total, MemoryUsedBytes: d.Used,
			UtilizationPercent: d.Util, Processes: uint32(d.Processes), MinorNumber: int32(d.Minor),
			MigEnabled: d.MIG,
		})
	}
	return resp, nil
}

func (a *api) toProto(info tenant.Info, held bool) *flexgvv1.Tenant {
	t := &flexgvv1.Tenant{
		Name: info.Name, Path: tenant.Path(a.dir, info.Name), OwnerUid: info.OwnerUID,
		CreatedUnixNano: info.Created.UnixNano(), Held: held, Priority: info.Priority, Sm: info.SM,
	}
	if held {
		t.Labels = a.held.labelsOf(info)
	}
	for _, d := range info.Devices {
		t.Devices = append(t.Devices, &flexgvv1.TenantDevice{
			Index: uint32(d.Index), Uuid: d.UUID, QuotaBytes: d.Quota, UsedBytes: d.Used, ContextBytes: d.CtxMeasured, Refused: d.Refused,
			ComputeMax: d.ComputeMax, ComputeShare: d.Share,
		})
	}
	for _, p := range info.Procs {
		t.Processes = append(t.Processes, &flexgvv1.TenantProcess{Pid: int32(p.Pid), UsedBytes: p.Used, Suspended: p.Suspended})
	}
	return t
}
