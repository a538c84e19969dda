package deviceplugin

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/suspend"
)

// fakeDaemon keeps tenants in memory.
type fakeDaemon struct {
	mu        sync.Mutex
	tenants   map[string]Tenant
	devs      []Device // nil: one GPU, GPU-0
	suspended map[string]bool
	refuse    error // what Suspend and Resume answer, where set
}

func (d *fakeDaemon) Suspend(_ context.Context, name string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.refuse != nil:
		return "", d.refuse
	case d.suspended[name]:
		return "", fmt.Errorf("tenant %s %w", name, suspend.ErrSuspended)
	}
	if d.suspended == nil {
		d.suspended = map[string]bool{}
	}
	d.suspended[name] = true
	return "1 process off the GPU", nil
}

func (d *fakeDaemon) Resume(_ context.Context, name string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.refuse != nil:
		return "", d.refuse
	case !d.suspended[name]:
		return "", fmt.Errorf("tenant %s %w", name, suspend.ErrNotSuspended)
	}
	delete(d.suspended, name)
	return "1 process back on the GPU", nil
}

func (d *fakeDaemon) Devices(context.Context) ([]Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.devs != nil {
		return d.devs, nil
	}
	return []Device{{Index: 0, UUID: "GPU-0", MemoryBytes: 16 << 30}}, nil
}

func (d *fakeDaemon) CreateTenant(_ context.Context, t Tenant) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tenants[t.Name] = t
	return "/state/tenant-" + t.Name, nil
}

func (d *fakeDaemon) DeleteTenant(_ context.Context, name string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.tenants, name)
	return true, nil
}

func (d *fakeDaemon) Tenants(context.Context) ([]Held, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Held
	for n, t := range d.tenants {
		out = append(out, Held{Name: n, Namespace: t.Namespace, Pod: t.Pod})
	}
	return out, nil
}

// fakeKubelet answers pod-resources List with what the test sets.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu          sync.Mutex
	pods        []*podresourcesv1.PodResources
	allocatable []*podresourcesv1.ContainerDevices // nil: GetAllocatableResources unimplemented
}

func (k *fakeKubelet) GetAllocatableResources(ctx context.Context, req *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.allocatable == nil {
		return k.UnimplementedPodResourcesListerServer.GetAllocatableResources(ctx, req)
	}
	return &podresourcesv1.AllocatableResourcesResponse{Devices: k.allocatable}, nil
}

func (k *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *fakeKubelet) set(pods ...*podresourcesv1.PodResources) {
	k.mu.Lock()
	k.pods = pods
	k.mu.Unlock()
}

func listed(name string, devices ...string) *podresourcesv1.PodResources {
	c := &podresourcesv1.ContainerResources{Name: "app"}
	if len(devices) > 0 {
		c.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: string(vgpu.ResourceVGPU), DeviceIds: devices}}
	}
	return &podresourcesv1.PodResources{Name: name, Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{c}}
}

func placedPod(name string, mib int64, boundAt time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Annotations: map[string]string{
			vgpu.AnnotationGPUs: "GPU-0", vgpu.AnnotationBoundAt: boundAt.Format(time.RFC3339Nano),
		}},
		Spec: corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			vgpu.ResourceVGPU: resource.MustParse("1"), vgpu.ResourceMemory: *resource.NewQuantity(mib, resource.DecimalSI),
		}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func startPlugin(t *testing.T, pods ...*corev1.Pod) (*Plugin, *fakeKubelet, *fakeDaemon) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "pod-resources.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, k)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	client := fake.NewClientset()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	shim := filepath.Join(dir, "libflexgv.so")
	os.WriteFile(shim, nil, 0o644)
	d := &fakeDaemon{tenants: map[string]Tenant{}}
	p := New(Config{NodeName: "node", PluginDir: dir, Slots: 4, ContextMiB: 512, Shim: shim, DevRoot: dir,
		PodResources: sock, PreloadDir: dir, CDI: CDIAuto, CDISpecDirs: []string{filepath.Join(dir, "cdi")}, HealthEvery: time.Second, SyncEvery: time.Second, Log: io.Discard}, d, client)
	if err := p.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p, k, d
}

func allocate(t *testing.T, p *Plugin, ids ...string) (*pluginapi.AllocateResponse, error) {
	t.Helper()
	return p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
}

// The pod the kubelet is admitting is the one it lists without vGPUs,
// whatever the binding order.
func TestAllocateTakesThePodTheKubeletAdmits(t *testing.T) {
	now := time.Now()
	p, k, d := startPlugin(t, placedPod("a", 1000, now.Add(time.Second)), placedPod("b", 2000, now))
	k.set(listed("a"))
	resp, err := allocate(t, p, "GPU-0-vgpu-0")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.tenants["pod-uid-a"].Devices; len(got) != 1 || got[0].QuotaBytes != (1000+512)<<20 {
		t.Errorf("tenant of a: %+v (tenants %v)", got, d.tenants)
	}
	if got := d.tenants["pod-uid-a"]; got.Namespace != "ns" || got.Pod != "a" || got.Container != "app" {
		t.Errorf("tenant of a is for %s/%s container %s", got.Namespace, got.Pod, got.Container)
	}
	if env := resp.ContainerResponses[0].Envs; env["CUDA_VISIBLE_DEVICES"] != "GPU-0" || env["FLEXGV_TENANT"] != ContainerTenant {
		t.Errorf("env %v", env)
	}
	k.set(listed("a", "GPU-0-vgpu-0"))
	if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"GPU-0-vgpu-0"}}); err != nil {
		t.Errorf("PreStartContainer of a's own devices: %v", err)
	}
	// No pod left that the kubelet admits without vGPUs.
	if _, err := allocate(t, p, "GPU-0-vgpu-1"); err == nil || !strings.Contains(err.Error(), "no pending pod on node node") {
		t.Errorf("allocation without a pod being admitted: %v", err)
	}
}

// Where the kubelet lists two pods without vGPUs, the one bound first is
// taken; if the kubelet gave the devices to the other, its container is
// not started with the wrong limits.
func TestPreStartRefusesAnotherPodsAllocation(t *testing.T) {
	now := time.Now()
	p, k, _ := startPlugin(t, placedPod("a", 1000, now.Add(time.Second)), placedPod("b", 2000, now))
	k.set(listed("a"), listed("b"))
	if _, err := allocate(t, p, "GPU-0-vgpu-0"); err != nil {
		t.Fatal(err)
	}
	k.set(listed("a", "GPU-0-vgpu-0"), listed("b"))
	_, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"GPU-0-vgpu-0"}})
	want := "flexgv: vGPUs GPU-0-vgpu-0 were set up for pod ns/b but the kubelet gave them to pod ns/a, which would run with the other's limits; delete pod ns/a"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("PreStartContainer: %v, want %q", err, want)
	}
	if opts, _ := p.GetDevicePluginOptions(context.Background(), nil); !opts.PreStartRequired {
		t.Error("PreStartContainer not asked for")
	}
}

// A plugin restarted (with its daemon) between an allocation and its
// container's start still refuses a container whose devices went to
// another pod: allocations are kept in a file; one another user made, or
// a damaged one, is not believed.
func TestAllocationsOutliveARestart(t *testing.T) {
	now := time.Now()
	p, k, d := startPlugin(t, placedPod("a", 1000, now.Add(time.Second)), placedPod("b", 2000, now))
	p.cfg.Allocations = filepath.Join(t.TempDir(), "deviceplugin.allocations")
	k.set(listed("a"), listed("b"))
	if _, err := allocate(t, p, "GPU-0-vgpu-0"); err != nil {
		t.Fatal(err)
	}
	restarted := New(p.cfg, d, p.client)
	k.set(listed("a", "GPU-0-vgpu-0"), listed("b"))
	_, err := restarted.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"GPU-0-vgpu-0"}})
	if want := "were set up for pod ns/b but the kubelet gave them to pod ns/a"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("PreStartContainer after a restart: %v, want %q", err, want)
	}
	// The right pod's start is let through, and forgotten from the file.
	k.set(listed("a"), listed("b", "GPU-0-vgpu-0"))
	if _, err := restarted.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"GPU-0-vgpu-0"}}); err != nil {
		t.Errorf("PreStartContainer of b after a restart: %v", err)
	}
	if again := New(p.cfg, d, p.client); len(again.allocated) != 0 {
		t.Errorf("a started container's allocation is still kept: %v", again.allocated)
	}
	os.WriteFile(p.cfg.Allocations, []byte("{not json"), 0o600)
	var logged strings.Builder
	cfg := p.cfg
	cfg.Log = &logged
	if n := New(cfg, d, p.client); len(n.allocated) != 0 || !strings.Contains(logged.String(), "damaged; their containers start unchecked") {
		t.Errorf("a damaged file: %v, log %q", n.allocated, logged.String())
	}
}

// A pod that asks for part of the SMs becomes a client of the daemon's
// MPS where the node offers it to pods: its tenant has the percentage, its
// container the control daemon's pipe folder and a /dev/shm of its own;
// where the node offers none, its allocation is refused, saying why.
func TestAllocateGivesPartOfTheSMsUnderMPS(t *testing.T) {
	for _, offered := range []bool{true, false} {
		pod := placedPod("a", 1000, time.Now())
		pod.Annotations[vgpu.AnnotationSM] = "25"
		p, k, d := startPlugin(t, pod)
		if offered {
			p.cfg.MPSPipe = "/tmp/mps-pipe"
		}
		k.set(listed("a"))
		resp, err := allocate(t, p, "GPU-0-vgpu-0")
		if !offered {
			if err == nil || !strings.Contains(err.Error(), "asks for flexgv.io/gpu-sm 25, and node node offers pods no MPS") {
				t.Errorf("a pod asking for SMs on a node without MPS for pods: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := d.tenants["pod-uid-a"].SM; got != 25 {
			t.Errorf("tenant's SM percentage %d, want 25", got)
		}
		c := resp.ContainerResponses[0]
		if c.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "25" || c.Envs["CUDA_MPS_PIPE_DIRECTORY"] != ContainerMPSPipe {
			t.Errorf("env %v", c.Envs)
		}
		mounts := map[string]string{}
		for _, m := range c.Mounts {
			mounts[m.ContainerPath] = m.HostPath
		}
		if _, shared := mounts["/dev/shm"]; mounts[ContainerMPSPipe] != "/tmp/mps-pipe" || shared {
			t.Errorf("mounts %v", mounts)
		}
	}
	// Without the annotation, nothing of MPS.
	p, k, _ := startPlugin(t, placedPod("b", 1000, time.Now()))
	p.cfg.MPSPipe = "/tmp/mps-pipe"
	k.set(listed("b"))
	resp, err := allocate(t, p, "GPU-0-vgpu-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.ContainerResponses[0].Mounts {
		if m.ContainerPath == ContainerMPSPipe {
			t.Errorf("a pod that asks for no SMs gets %s", m.ContainerPath)
		}
	}
	if _, set := resp.ContainerResponses[0].Envs["CUDA_MPS_PIPE_DIRECTORY"]; set {
		t.Errorf("a pod that asks for no SMs gets CUDA_MPS_PIPE_DIRECTORY")
	}
}

// A container started again with an allocation the plugin has no record
// of (the kubelet's checkpoint after a reboot) gets its pod's tenant made
// again before it starts, with the pod's limits.
func TestPreStartMakesAgainALostTenant(t *testing.T) {
	pod := placedPod("a", 1000, time.Now())
	pod.Status.Phase = corev1.PodRunning
	p, k, d := startPlugin(t, pod, placedPod("b", 2000, time.Now()))
	k.set(listed("a", "GPU-0-vgpu-0"), listed("b"))
	if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"GPU-0-vgpu-0"}}); err != nil {
		t.Fatal(err)
	}
	if got := d.tenants["pod-uid-a"].Devices; len(got) != 1 || got[0].QuotaBytes != (1000+512)<<20 {
		t.Errorf("tenant of a after PreStartContainer: %+v", got)
	}
	// b, placed here but not given vGPUs by the kubelet yet, is left to Allocate.
	if _, ok := d.tenants["pod-uid-b"]; ok {
		t.Errorf("tenant of b made before its allocation: %v", d.tenants)
	}
}
