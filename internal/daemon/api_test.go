package daemon

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

const (
	uuid0 = "GPU-00000000-0000-4000-8000-000000000000"
	uuid1 = "GPU-00000000-0000-4000-8000-000000000001"
)

var twoGPUs = []gpuinfo.Device{
	{Index: 0, Name: "GPU Zero", UUID: uuid0, Total: 16 << 30, Used: 1 << 30, Util: 25, Processes: 2},
	{Index: 1, Name: "GPU One", UUID: uuid1, Total: 8 << 30},
}

func fakeNVML(devs []gpuinfo.Device, err error) *nvml {
	return &nvml{
		gpus: func() ([]gpuinfo.GPU, error) {
			var out []gpuinfo.GPU
			for _, d := range devs {
				out = append(out, gpuinfo.GPU{Index: d.Index, UUID: d.UUID, Total: d.Total})
			}
			return out, err
		},
		devices: func() ([]gpuinfo.Device, error) { return devs, err },
	}
}

// newTestAPI is a daemon's API over a fresh state folder, with the daemon
// released when the test ends.
func newTestAPI(t *testing.T, dir string, n *nvml) *api {
	t.Helper()
	h, _, _, err := adopt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.releaseAll)
	return newAPI(dir, h, n, io.Discard)
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("got %v, want %v with %q", err, code, msg)
	}
}

func create(a *api, name, mem string) (*flexgvv1.CreateTenantResponse, error) {
	return a.CreateTenant(context.Background(), &flexgvv1.CreateTenantRequest{Name: name, Memory: mem, ContextBytes: 512 << 20})
}

func TestCreateGetListDelete(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	ctx := context.Background()
	r, err := create(a, "g", "0=1GiB,"+uuid1+"=50%")
	if err != nil || !r.Created || !r.Tenant.Held || r.Tenant.Path != filepath.Join(dir, "tenant-g") {
		t.Fatalf("create: %+v %v", r, err)
	}
	want := []tenant.DeviceQuota{{UUID: uuid0, Quota: 1 << 30}, {UUID: uuid1, Quota: 4 << 30}}
	if got := Quotas(r.Tenant); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("quotas %+v, want %+v", got, want)
	}
	// The same again is the same tenant; other quotas are refused.
	if r, err := create(a, "g", "0=1GiB,"+uuid1+"=4GiB"); err != nil || r.Created {
		t.Fatalf("create again: %+v %v", r, err)
	}
	_, err = create(a, "g", "2GiB")
	wantCode(t, err, codes.FailedPrecondition, "group g already exists with quota 0=1GiB,1=4GiB")

	got, err := a.GetTenant(ctx, &flexgvv1.GetTenantRequest{Name: "g"})
	if err != nil || !got.Held || Info(got).Name != "g" || len(got.Devices) != 2 {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := a.ListTenants(ctx, &flexgvv1.ListTenantsRequest{})
	if err != nil || len(list.Tenants) != 1 || list.StateDir != dir || len(list.Skipped) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// What the API reports is what flexgv ps reads from the files.
	direct, _, _ := tenant.List(dir)
	if via := Info(list.Tenants[0]); !sameInfo(via, direct[0]) {
		t.Fatalf("through the API %+v, from the file %+v", via, direct[0])
	}

	d, err := a.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: "g"})
	if err != nil || !d.Removed {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tenant-g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted tenant's file: %v", err)
	}
	_, err = a.GetTenant(ctx, &flexgvv1.GetTenantRequest{Name: "g"})
	wantCode(t, err, codes.NotFound, "no tenant g")
	_, err = a.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: "g"})
	wantCode(t, err, codes.NotFound, "no tenant g")
}

func sameInfo(a, b tenant.Info) bool {
	if a.Name != b.Name || a.OwnerUID != b.OwnerUID || !a.Created.Equal(b.Created) || len(a.Devices) != len(b.Devices) || len(a.Procs) != len(b.Procs) {
		return false
	}
	for i := range a.Devices {
		if a.Devices[i] != b.Devices[i] {
			return false
		}
	}
	for i := range a.Procs {
		if a.Procs[i].Pid != b.Procs[i].Pid || !equalU64(a.Procs[i].Used, b.Procs[i].Used) {
			return false
		}
	}
	return true
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCreateRefusals(t *testing.T) {
	a := newTestAPI(t, t.TempDir(), fakeNVML(twoGPUs, nil))
	for _, c := range []struct {
		name, mem string
		ctx       uint64
		msg       string
	}{
		{"a/b", "1GiB", 512 << 20, `tenant name "a/b"`},
		{"", "1GiB", 512 << 20, `tenant name ""`},
		{"g", "", 512 << 20, "memory, compute, compute_max, priority and sm are empty"},
		{"g", "1GiB", 0, "context_bytes 0: below 16MiB"},
		{"g", "512KiB", 512 << 20, "512KiB is below 1MiB"},
		{"g", "2=1GiB", 512 << 20, "there is no device 2"},
		{"g", "1=9GiB", 512 << 20, "9GiB is more than device 1 has (8GiB)"},
		{"g", "1.5B", 512 << 20, "not a whole number of bytes"},
	} {
		_, err := a.CreateTenant(context.Background(), &flexgvv1.CreateTenantRequest{Name: c.name, Memory: c.mem, ContextBytes: c.ctx})
		wantCode(t, err, codes.InvalidArgument, c.msg)
	}
	if infos, _, _ := tenant.List(a.dir); len(infos) != 0 {
		t.Fatalf("refused requests left tenants: %+v", infos)
	}
}

// Without NVML quotas are read as flexgv run reads them then: per CUDA
// device index, sizes only.
func TestCreateWithoutNVML(t *testing.T) {
	a := newTestAPI(t, t.TempDir(), fakeNVML(nil, errors.New("no NVML")))
	_, err := create(a, "g", uuid0+"=1GiB")
	wantCode(t, err, codes.InvalidArgument, "naming a device by UUID needs NVML")
	r, err := create(a, "g", "0=1GiB")
	if err != nil || len(r.Tenant.Devices) != tenant.MaxDevices || r.Tenant.Devices[0].Uuid != "" || r.Tenant.Devices[0].QuotaBytes != 1<<30 {
		t.Fatalf("create: %+v %v", r, err)
	}
	d, err := a.ListDevices(context.Background(), &flexgvv1.ListDevicesRequest{})
	if err != nil || len(d.Devices) != 0 || d.NvmlError != "no NVML" {
		t.Fatalf("devices without NVML: %+v %v", d, err)
	}
}

func TestListDevices(t *testing.T) {
	a := newTestAPI(t, t.TempDir(), fakeNVML(twoGPUs, nil))
	d, err := a.ListDevices(context.Background(), &flexgvv1.ListDevicesRequest{})
	if err != nil || len(d.Devices) != 2 || d.NvmlError != "" {
		t.Fatalf("devices: %+v %v", d, err)
	}
	g := d.Devices[0]
	if g.Index != 0 || g.Uuid != uuid0 || g.Name != "GPU Zero" || g.MemoryTotalBytes != 16<<30 || g.MemoryUsedBytes != 1<<30 ||
		g.UtilizationPercent != 25 || g.Processes != 2 || d.Devices[1].Index != 1 {
		t.Fatalf("devices: %+v", d.Devices)
	}
}

// useSlot makes this test a live process of the tenant at p, as the shim
// does at a process's first CUDA call: a claimed slot whose byte it locks.
// Closing the file ends it, as the process dying.
func useSlot(t *testing.T, p string, used uint64) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var h tenant.Header
	hb := unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h))
	s := tenant.Slot{State: tenant.SlotClaimed, Pid: 4242}
	s.Used[0] = used
	_, err = f.ReadAt(hb, 0)
	if err == nil {
		h.SlotHWM = 1
		_, err = f.WriteAt(hb, 0)
	}
	if err == nil {
		_, err = f.WriteAt(unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s)), int64(len(hb)))
	}
	if err == nil {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(len(hb)), Len: 1}
		err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestDeleteRefusedWhileProcessesUseIt(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	ctx := context.Background()
	if _, err := create(a, "g", "1GiB"); err != nil {
		t.Fatal(err)
	}
	proc := useSlot(t, filepath.Join(dir, "tenant-g"), 100<<20)
	_, err := a.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: "g"})
	wantCode(t, err, codes.FailedPrecondition, "tenant g has 1 process using it (pid 4242)")
	if got, err := a.GetTenant(ctx, &flexgvv1.GetTenantRequest{Name: "g"}); err != nil || !got.Held || got.Devices[0].UsedBytes != 100<<20 {
		t.Fatalf("after the refusal: %+v %v", got, err)
	}
	proc.Close()
	if d, err := a.DeleteTenant(ctx, &flexgvv1.DeleteTenantRequest{Name: "g"}); err != nil || !d.Removed {
		t.Fatalf("delete once the process is gone: %+v %v", d, err)
	}
}

// A group a run created without the daemon is the runs'; the daemon takes
// it over only when asked to create it.
func TestDeleteOfATenantNotHeld(t *testing.T) {
	dir := t.TempDir()
	a := newTestAPI(t, dir, fakeNVML(twoGPUs, nil))
	run, err := tenant.Acquire(dir, tenant.Spec{Name: "g", Devices: []tenant.DeviceQuota{{UUID: uuid0, Quota: 1 << 30}, {UUID: uuid1}}, Priority: sched.PriorityNormal})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.DeleteTenant(context.Background(), &flexgvv1.DeleteTenantRequest{Name: "g"})
	wantCode(t, err, codes.FailedPrecondition, "tenant g is not held by the daemon")
	r, err := create(a, "g", "0=1GiB")
	if err != nil || r.Created || !r.Tenant.Held {
		t.Fatalf("taking it over: %+v %v", r, err)
	}
	run.Release()
	if _, err := os.Stat(run.Path); err != nil {
		t.Fatalf("the run left and the group held by the daemon went: %v", err)
	}
}

// A tenant's labels (whom it is for) are shown with it, replaced by a later
// call that gives some, kept by one that gives none and by the next daemon;
// unknown keys and unprintable values are refused.
func TestTenantLabels(t *testing.T) {
	dir := t.TempDir()
	h, _, _, err := adopt(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(dir, h, fakeNVML(twoGPUs, nil), io.Discard)
	ctx := context.Background()
	req := func(l map[string]string) *flexgvv1.CreateTenantRequest {
		return &flexgvv1.CreateTenantRequest{Name: "pod-1", Memory: "1GiB", ContextBytes: 512 << 20, Labels: l}
	}
	pod := map[string]string{"namespace": "ml", "pod": "train-0", "container": "main"}
	if r, err := a.CreateTenant(ctx, req(pod)); err != nil || !maps.Equal(r.Tenant.Labels, pod) {
		t.Fatalf("created: %v %v", r, err)
	}
	again := map[string]string{"namespace": "ml", "pod": "train-0", "container": "side"}
	if r, err := a.CreateTenant(ctx, req(again)); err != nil || r.Created || !maps.Equal(r.Tenant.Labels, again) {
		t.Fatalf("again with other labels: %v %v", r, err)
	}
	if r, err := a.CreateTenant(ctx, req(nil)); err != nil || !maps.Equal(r.Tenant.Labels, again) {
		t.Fatalf("again without labels: %v %v", r, err)
	}
	h.releaseAll()
	h2, _, _, err := adopt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h2.releaseAll)
	a2 := newAPI(dir, h2, fakeNVML(twoGPUs, nil), io.Discard)
	if got, err := a2.GetTenant(ctx, &flexgvv1.GetTenantRequest{Name: "pod-1"}); err != nil || !maps.Equal(got.Labels, again) {
		t.Fatalf("after a restart: %v %v", got, err)
	}
	if l := h2.allLabels(); !maps.Equal(l["pod-1"], again) || len(l) != 1 {
		t.Fatalf("allLabels: %v", l)
	}
	_, err = a2.CreateTenant(ctx, &flexgvv1.CreateTenantRequest{Name: "pod-2", Memory: "1GiB", ContextBytes: 512 << 20, Labels: map[string]string{"team": "x"}})
	wantCode(t, err, codes.InvalidArgument, `label "team": want one of namespace, pod, container`)
	_, err = a2.CreateTenant(ctx, &flexgvv1.CreateTenantRequest{Name: "pod-2", Memory: "1GiB", ContextBytes: 512 << 20, Labels: map[string]string{"pod": "a\nb"}})
	wantCode(t, err, codes.InvalidArgument, "want 1 to 253 printable characters")
}
