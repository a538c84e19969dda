// Package deviceplugin is FlexGV's kubelet device plugin (API v1beta1 over
// a unix socket in the kubelet's device-plugin folder). It advertises
// flexgv.io/vgpu, a number of slots per healthy GPU, and publishes the
// node's GPUs on its Node object (the flexgv.io/inventory annotation, and
// flexgv.io/gpu-memory and gpu-compute capacity) for the scheduler
// extender. When the kubelet allocates vGPUs to a container, it has the
// node daemon create the pod's tenant with the pod's limits on the GPUs the
// extender chose, and hands the container the shim, its tenant file, the
// GPUs' device nodes and the settings that make the shim enforce them.
// Which pod that is, the kubelet's pod-resources API tells. Tenants of pods
// that are gone are deleted.
package deviceplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/sched"
)

// Where a container finds what Allocate gives it.
const (
	ContainerShim   = "/usr/local/flexgv/lib/libflexgv.so"
	ContainerTenant = "/run/flexgv/tenant"
	// ContainerMPSPipe is where a pod given part of the SMs finds the MPS
	// control daemon's pipe folder.
	ContainerMPSPipe = "/run/flexgv/mps"
	// ContainerPreload is the dynamic loader's list of libraries it loads
	// into every program, whatever LD_PRELOAD the image or the pod sets
	// (the kubelet puts a pod's own env after Allocate's, so its
	// LD_PRELOAD would replace the shim's).
	ContainerPreload = "/etc/ld.so.preload"
)

// TenantPrefix starts the name of every tenant the plugin creates; the
// pod's UID follows.
const TenantPrefix = "pod-"

// socketName is the plugin's socket in the kubelet's folder.
const socketName = "flexgv.sock"

// Config is how a device plugin runs.
type Config struct {
	NodeName   string
	PluginDir  string // the kubelet's device-plugin folder, with kubelet.sock
	Slots      int    // vGPUs per GPU
	ContextMiB int64  // what one CUDA context takes, charged per pod per GPU
	Shim       string // libflexgv.so on the node
	DevRoot    string // where the GPUs' device nodes are: /dev
	// PodResources is the kubelet's pod-resources socket, through which
	// Allocate finds the pod being admitted and a container's start is
	// checked to be in the pod it was set up for; "": neither, the pod is
	// told by binding order alone.
	PodResources string
	// RemoteAddr, on a GPU server node: the address (flexgv serve) where it
	// serves its GPUs to remote vGPUs, published for the extender; its
	// tenants are admitted by token files in TenantDir (flexgv serve
	// --tenant-dir). "": it serves none.
	RemoteAddr, TenantDir string
	// RemoteSlots: remote vGPUs this node runs (flexgv.io/remote-vgpu); 0:
	// none. RemoteLib is the folder of the remoting libcuda.so.1 on the
	// node, RemoteTokens where their tokens are kept for the containers.
	RemoteSlots             int
	RemoteLib, RemoteTokens string
	// SecretNamespace, with remote vGPUs served or run: the namespace of
	// the Secrets that carry remote pods' tokens from their server to their
	// node (the chart's own: the daemons may read Secrets there only).
	SecretNamespace string
	// Allocations is the file where allocations whose containers have not
	// started yet are kept, so that a plugin restarted in between (with
	// its daemon) still checks them; "": in memory only.
	Allocations string
	// MPSPipe, where the daemon's MPS is offered to pods: the control
	// daemon's pipe folder, which pods that ask for part of the SMs get;
	// "": they are refused. A Volta or later MPS server shares no /dev/shm
	// with its clients, so each pod keeps its own.
	MPSPipe string
	// SuspendPods: pods are suspended and resumed as the extender asks
	// (suspend.go), which the node publishes; else they are evicted.
	SuspendPods bool
	// ServeAdmin, on a GPU server node: the admin socket of its flexgv
	// serve, through which the programs of remote pods move off it when
	// it is drained (move.go).
	ServeAdmin string
	// CDI is how containers get their GPUs and the driver: CDIAuto, CDIOn
	// or CDIOff; CDISpecDirs where CDI specs are looked for.
	CDI         string
	CDISpecDirs []string
	// DriverLibs, for containers given device nodes: the node's folder of
	// the driver's libraries, mounted into them; "": the runtime brings
	// them.
	DriverLibs string
	// GPUs, where not empty, are the GPUs (UUIDs or indices) the plugin
	// takes; the others are left to other plugins.
	GPUs []string
	// PreloadDir is the folder on the node where the loader's preload
	// lists mounted at ContainerPreload are written.
	PreloadDir string
	// HealthEvery is how often the GPUs are read; SyncEvery how often the
	// tenants are matched to the pods and the socket checked.
	HealthEvery, SyncEvery time.Duration
	Log                    io.Writer
}

// Check refuses a configuration the plugin cannot work with.
func (c Config) Check() error {
	switch {
	case c.NodeName == "":
		return errors.New("no node name; give --node-name or set NODE_NAME (the downward API's spec.nodeName)")
	case c.Slots < 1:
		return fmt.Errorf("--slots %d: a GPU holds at least one vGPU", c.Slots)
	case c.ContextMiB < 16:
		return fmt.Errorf("--ctx-mem %d MiB: below 16 MiB; no CUDA context takes less", c.ContextMiB)
	case c.HealthEvery <= 0 || c.SyncEvery <= 0:
		return errors.New("--health-interval and --sync-interval must be positive")
	}
	if st, err := os.Stat(c.PluginDir); err != nil || !st.IsDir() {
		return fmt.Errorf("--plugin-dir %s: not a folder (the kubelet's is %s)", c.PluginDir, pluginapi.DevicePluginPath)
	}
	if _, err := os.Stat(c.Shim); err != nil {
		return fmt.Errorf("shim %s: %w", c.Shim, err)
	}
	if (c.RemoteAddr == "") != (c.TenantDir == "") {
		return errors.New("--remote-addr and --tenant-dir go together: the address flexgv serve --tenant-dir DIR listens on, and DIR")
	}
	if c.ServeAdmin != "" && (c.RemoteAddr == "" || !filepath.IsAbs(c.ServeAdmin)) {
		return fmt.Errorf("--serve-admin %q: the absolute path of the admin socket of the flexgv serve of --remote-addr", c.ServeAdmin)
	}
	if c.TenantDir != "" {
		if st, err := os.Stat(c.TenantDir); err != nil || !st.IsDir() {
			return fmt.Errorf("--tenant-dir %s: not a folder", c.TenantDir)
		}
	}
	if (c.RemoteAddr != "" || c.RemoteSlots > 0) && c.SecretNamespace == "" {
		return errors.New("remote vGPUs pass their tokens in Secrets of one namespace: give --secret-namespace or set POD_NAMESPACE (the downward API's metadata.namespace)")
	}
	if slices.Contains(c.GPUs, "") {
		return fmt.Errorf("--gpus %q: an empty GPU name", strings.Join(c.GPUs, ","))
	}
	if err := c.checkDelivery(); err != nil {
		return err
	}
	if c.RemoteSlots < 0 {
		return fmt.Errorf("--remote-slots %d: negative", c.RemoteSlots)
	}
	if c.RemoteSlots == 0 && c.RemoteLib != "" {
		return errors.New("--remote-lib is for --remote-slots: the library of the remote vGPUs this node runs")
	}
	if c.RemoteSlots > 0 {
		if _, err := os.Stat(filepath.Join(c.RemoteLib, "libcuda.so.1")); err != nil {
			return fmt.Errorf("remote vGPUs need the remoting libcuda.so.1: %w", err)
		}
	}
	if st, err := os.Stat(c.PodResources); c.PodResources != "" && (err != nil || st.Mode()&os.ModeSocket == 0) {
		return fmt.Errorf("--pod-resources %s: not the kubelet's socket (\"\" turns the check that a container starts in the allocated pod off)", c.PodResources)
	}
	return nil
}

// Plugin serves the device-plugin API for one node.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg    Config
	daemon Daemon
	client kubernetes.Interface
	log    *log.Logger

	mu      sync.Mutex
	gpus    []vgpu.GPU      // as last read
	shared  map[string]bool // GPUs another nvidia.com/ resource advertises, by UUID
	mig     map[string]bool // GPUs with MIG mode on, by UUID
	unknown map[string]bool // names in cfg.GPUs of no GPU, said
	changed chan struct{}   // closed and replaced when gpus change
	// lent are the requests of the node's suspended pods, published on
	// top of the GPUs' capacity (suspend.go), by pod UID.
	lent map[types.UID]vgpu.Request
	// allocating serializes Allocate: which pod a call is for is decided
	// by which pods have no tenant yet.
	allocating sync.Mutex
	// allocated is the pod each allocation was made for, by its devices,
	// until its container starts (kept in cfg.Allocations); under mu.
	allocated map[string]allocation
	// remoteMu serializes the making of remote pods' tenants and tokens;
	// remotePods, under it, is the watch of the cluster's pods (nil until
	// WatchRemote has listed them).
	remoteMu   sync.Mutex
	remotePods cache.Indexer
	// remoteKick has WatchRemote look again (nil before it runs); under mu.
	remoteKick func()
	// movingOut are the remote pods whose programs are being moved off
	// this server (move.go); said, what was last said of each; under mu.
	movingOut map[types.UID]bool
	said      map[types.UID]string
}

// New returns a plugin; Run runs it.
func New(cfg Config, d Daemon, client kubernetes.Interface) *Plugin {
	p := &Plugin{cfg: cfg, daemon: d, client: client, log: log.New(cfg.Log, "flexgv device plugin: ", 0), changed: make(chan struct{}),
		shared: map[string]bool{}, mig: map[string]bool{}, unknown: map[string]bool{}, lent: map[types.UID]vgpu.Request{},
		movingOut: map[types.UID]bool{}, said: map[types.UID]string{}}
	p.allocated = loadAllocations(cfg.Allocations, time.Now(), p.log.Printf)
	return p
}

// setAllocated records (pod != "") or forgets the allocation of key, in
// memory and in cfg.Allocations.
func (p *Plugin) setAllocated(key, pod string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for k, a := range p.allocated {
		if now.Sub(a.At) > allocTTL {
			delete(p.allocated, k)
		}
	}
	if pod == "" {
		delete(p.allocated, key)
	} else {
		p.allocated[key] = allocation{pod, now}
	}
	if err := saveAllocations(p.cfg.Allocations, p.allocated); err != nil {
		p.log.Printf("%v (a restart before the container starts would skip its check)", err)
	}
}

// Run serves until ctx ends: it registers with the kubelet, and again
// whenever the kubelet restarts (which removes the plugin's socket).
func (p *Plugin) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := p.refresh(ctx)
		if err == nil {
			break
		}
		p.log.Printf("reading the GPUs from the node daemon: %v; retrying", err)
		sleep(ctx, time.Second)
	}
	go every(ctx, p.cfg.HealthEvery, func() { p.refresh(ctx) })
	if p.cfg.SuspendPods {
		go every(ctx, p.cfg.SyncEvery, func() { p.syncSuspensions(ctx) })
	}
	for ctx.Err() == nil {
		err := p.serve(ctx)
		if ctx.Err() != nil {
			break
		}
		p.log.Printf("%v; starting again", err)
		sleep(ctx, time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// serve serves the vGPU plugin and registers it, until its socket is
// removed or ctx ends.
func (p *Plugin) serve(ctx context.Context) error {
	return p.endpoint(ctx, socketName, vgpu.ResourceVGPU, p, p.options(), func(ctx context.Context) {
		// Serialized with Allocate: an allocation made while the tenants
		// are matched to the pods is not taken for one of a pod gone.
		p.allocating.Lock()
		defer p.allocating.Unlock()
		p.syncTenants(ctx)
		if err := p.rebuild(ctx); err != nil {
			p.log.Print(err)
		}
	})
}

// endpoint serves impl on socket (in the kubelet's folder), registers it
// for resource, and calls sync every SyncEvery, until the socket is removed
// (the kubelet removes every plugin socket when it starts) or ctx ends.
func (p *Plugin) endpoint(ctx context.Context, socket string, resource corev1.ResourceName, impl pluginapi.DevicePluginServer,
	opts *pluginapi.DevicePluginOptions, sync func(context.Context)) error {
	sock := filepath.Join(p.cfg.PluginDir, socket)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, impl)
	go srv.Serve(lis)
	defer srv.Stop()
	if err := p.registerAs(ctx, socket, resource, opts); err != nil {
		return fmt.Errorf("registering with the kubelet: %w", err)
	}
	p.log.Printf("registered %s with the kubelet (%s)", resource, sock)
	tick := time.NewTicker(p.cfg.SyncEvery)
	defer tick.Stop()
	for {
		sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("socket %s is gone (kubelet restarted?)", sock)
		}
	}
}

// registerAs registers the plugin at socket (in the kubelet's folder) for
// resource.
func (p *Plugin) registerAs(ctx context.Context, socket string, resource corev1.ResourceName, opts *pluginapi.DevicePluginOptions) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.cfg.PluginDir, filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: socket, ResourceName: string(resource), Options: opts,
	})
	return err
}

// refresh reads the GPUs and publishes them on the node; when they or
// their health changed it tells the kubelet's streams. A GPU the daemon
// no longer lists, or all of them when NVML cannot be read, is unhealthy.
func (p *Plugin) refresh(ctx context.Context) error {
	devs, err := p.daemon.Devices(ctx)
	devs = p.chosen(devs)
	others, known := p.advertisedByOthers(ctx)
	p.mu.Lock()
	if err != nil && p.gpus == nil {
		p.mu.Unlock()
		return err
	}
	var gpus []vgpu.GPU
	for _, d := range devs {
		minor := d.Minor
		if minor < 0 { // NVML does not say: the index is the node on most machines
			minor = d.Index
		}
		other := others[d.UUID]
		if other == "" {
			other = others[strconv.Itoa(d.Index)]
		}
		if other != "" && !p.shared[d.UUID] {
			p.log.Printf("GPU %s (index %d) is advertised by %s too (NVIDIA's device plugin?): not advertised here, so that no pod gets it from both; "+
				"give each plugin its own GPUs (--gpus here, NVIDIA_VISIBLE_DEVICES of the other's container)", d.UUID, d.Index, other)
		}
		if known {
			if p.shared[d.UUID] && other == "" {
				p.log.Printf("GPU %s is no longer advertised by another resource: advertised here", d.UUID)
			}
			p.shared[d.UUID] = other != ""
		}
		if d.MIG != p.mig[d.UUID] {
			if d.MIG {
				p.log.Printf("GPU %s (index %d) has MIG mode on: its memory is split into MIG devices, which FlexGV does not limit; "+
					"not advertised (NVIDIA's device plugin hands out MIG devices; turn MIG off for vGPUs)", d.UUID, d.Index)
			} else {
				p.log.Printf("GPU %s has MIG mode off again: advertised here", d.UUID)
			}
			p.mig[d.UUID] = d.MIG
		}
		gpus = append(gpus, vgpu.GPU{UUID: d.UUID, Index: d.Index, Minor: minor, MemoryMiB: int64(d.MemoryBytes >> 20), Healthy: !p.shared[d.UUID] && !d.MIG})
	}
	for _, old := range p.gpus {
		if !slices.ContainsFunc(gpus, func(g vgpu.GPU) bool { return g.UUID == old.UUID }) {
			old.Healthy = false
			gpus = append(gpus, old)
		}
	}
	// By device node: NVML renumbers its indices when a GPU is lost.
	slices.SortFunc(gpus, func(a, b vgpu.GPU) int { return a.Minor - b.Minor })
	same := slices.Equal(gpus, p.gpus)
	if !same {
		p.gpus = gpus
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.mu.Unlock()
	if err != nil {
		p.log.Printf("reading the GPUs: %v; all marked unhealthy", err)
	}
	// Published every time, not only on change: a Node recreated, or its
	// annotation edited, is put right within one period.
	if err := p.publish(ctx, gpus); err != nil {
		p.log.Printf("publishing the GPUs on node %s: %v", p.cfg.NodeName, err)
	}
	return nil
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// publish writes the inventory on the node, and its memory and compute as
// extended resources of its status, with what suspended pods lent.
func (p *Plugin) publish(ctx context.Context, gpus []vgpu.GPU) error {
	inv := vgpu.Inventory{Slots: p.cfg.Slots, ContextMiB: p.cfg.ContextMiB, GPUs: gpus, Remote: p.cfg.RemoteAddr, MPS: p.cfg.MPSPipe != "",
		Suspend: p.cfg.SuspendPods}
	meta, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{vgpu.AnnotationInventory: inv.Encode()}}})
	nodes := p.client.CoreV1().Nodes()
	if _, err := nodes.Patch(ctx, p.cfg.NodeName, types.MergePatchType, meta, metav1.PatchOptions{}); err != nil {
		return err
	}
	c := inv.Capacity()
	p.mu.Lock()
	for _, r := range p.lent {
		for name, n := range map[corev1.ResourceName]int64{vgpu.ResourceMemory: r.MemoryMiB, vgpu.ResourceCompute: r.ComputePct} {
			q := c[name]
			q.Add(*resource.NewQuantity(n*int64(r.Count), resource.DecimalSI))
			c[name] = q
		}
	}
	p.mu.Unlock()
	st, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": c, "allocatable": c}})
	_, err := nodes.Patch(ctx, p.cfg.NodeName, types.MergePatchType, st, metav1.PatchOptions{}, "status")
	return err
}

func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: p.cfg.PodResources != ""}
}

// GetDevicePluginOptions implements the device-plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

// slotID names vGPU slot i of a GPU.
func slotID(uuid string, i int) string { return fmt.Sprintf("%s-vgpu-%d", uuid, i) }

// ListAndWatch implements the device-plugin API: every slot of every GPU,
// healthy as its GPU is, sent again whenever that changes.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		gpus, changed := p.gpus, p.changed
		p.mu.Unlock()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, g := range gpus {
			health := pluginapi.Healthy
			if !g.Healthy {
				health = pluginapi.Unhealthy
			}
			for i := range p.cfg.Slots {
				resp.Devices = append(resp.Devices, &pluginapi.Device{ID: slotID(g.UUID, i), Health: health})
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// GetPreferredAllocation implements the device-plugin API; the plugin
// states no preference (the slots are counters: the GPUs come from the
// pod's placement).
func (p *Plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer implements the device-plugin API. The kubelet calls it
// before starting a container, once it has recorded which pod got which
// devices: a container whose devices went to another pod than Allocate
// inferred would run with that pod's limits, so it is not started.
func (p *Plugin) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	key := devicesKey(req.DevicesIds)
	p.mu.Lock()
	a, ok := p.allocated[key]
	p.mu.Unlock()
	want := a.Pod
	if !ok {
		// An allocation made before: the container is started again (a
		// reboot, a restart), and its tenant may have to be made again.
		if err := p.rebuildLocked(ctx); err != nil {
			return nil, fmt.Errorf("flexgv: %w", err)
		}
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	got, err := p.devicesOwner(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("flexgv: checking which pod got vGPUs %s: %w", key, err)
	}
	if got != want {
		return nil, fmt.Errorf("flexgv: vGPUs %s were set up for pod %s but the kubelet gave them to pod %s, which would run with the other's limits; delete pod %s to have it placed again", key, want, got, got)
	}
	p.setAllocated(key, "")
	return &pluginapi.PreStartContainerResponse{}, nil
}

// devicesKey names a set of device IDs.
func devicesKey(ids []string) string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// podResources lists what the kubelet has allocated to its pods.
func (p *Plugin) podResources(ctx context.Context) ([]*podresourcesv1.PodResources, error) {
	conn, err := grpc.NewClient("unix://"+p.cfg.PodResources, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(lctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	return resp.PodResources, nil
}

// withoutVGPUs names (namespace/name) the pods the kubelet lists with no
// vGPUs allocated.
func (p *Plugin) withoutVGPUs(ctx context.Context) (map[string]bool, error) {
	pods, err := p.podResources(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, pod := range pods {
		if !slices.ContainsFunc(pod.Containers, func(c *podresourcesv1.ContainerResources) bool {
			return slices.ContainsFunc(c.Devices, func(d *podresourcesv1.ContainerDevices) bool {
				return d.ResourceName == string(vgpu.ResourceVGPU) && len(d.DeviceIds) > 0
			})
		}) {
			out[pod.Namespace+"/"+pod.Name] = true
		}
	}
	return out, nil
}

// devicesOwner asks the kubelet which pod (namespace/name) has the vGPUs
// key.
func (p *Plugin) devicesOwner(ctx context.Context, key string) (string, error) {
	pods, err := p.podResources(ctx)
	if err != nil {
		return "", err
	}
	for _, pod := range pods {
		for _, c := range pod.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == string(vgpu.ResourceVGPU) && devicesKey(d.DeviceIds) == key {
					return pod.Namespace + "/" + pod.Name, nil
				}
			}
		}
	}
	return "", errors.New("the kubelet lists no container with them")
}

// Allocate implements the device-plugin API. The kubelet does not say
// which pod a call is for. It admits a node's pods one at a time, each
// known to it (and listed by its pod-resources API) from just before its
// admission, so the call is for the pod placed here by the extender that
// asks for as many vGPUs, has no tenant yet and to which the kubelet has
// allocated no vGPUs; of several, the one bound first, as the kubelet
// receives pods in the order they are bound.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.allocating.Lock()
	defer p.allocating.Unlock()
	// The extender counts a finished pod's GPUs free at once: its tenant
	// must be gone before a new one takes its share.
	p.syncTenants(ctx)
	resp := &pluginapi.AllocateResponse{}
	taken := map[types.UID]bool{}
	for _, creq := range req.ContainerRequests {
		pod, r, err := p.pendingPod(ctx, len(creq.DevicesIds), taken)
		if err != nil {
			return nil, err
		}
		taken[pod.UID] = true
		cresp, err := p.allocate(ctx, pod, r)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		p.setAllocated(devicesKey(creq.DevicesIds), pod.Namespace+"/"+pod.Name)
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// pendingPod finds the pod an allocation of n vGPUs is for.
func (p *Plugin) pendingPod(ctx context.Context, n int, taken map[types.UID]bool) (*corev1.Pod, vgpu.Request, error) {
	pods, err := p.nodePods(ctx)
	if err != nil {
		return nil, vgpu.Request{}, err
	}
	have, err := p.daemon.Tenants(ctx)
	if err != nil {
		return nil, vgpu.Request{}, fmt.Errorf("listing the node daemon's tenants: %w", err)
	}
	// The kubelet knows a pod before it admits it, and lists the devices of
	// the pods it has admitted: the pod being admitted is the one it
	// knows without vGPUs.
	var admitting map[string]bool
	if p.cfg.PodResources != "" {
		if admitting, err = p.withoutVGPUs(ctx); err != nil {
			return nil, vgpu.Request{}, fmt.Errorf("asking the kubelet which pod is being admitted: %w", err)
		}
	}
	var best *corev1.Pod
	var bestReq vgpu.Request
	for i := range pods {
		pod := &pods[i]
		if taken[pod.UID] || pod.Status.Phase != corev1.PodPending || len(vgpu.PodGPUs(pod)) == 0 ||
			holds(have, TenantPrefix+string(pod.UID)) ||
			admitting != nil && !admitting[pod.Namespace+"/"+pod.Name] {
			continue
		}
		r, ok, err := vgpu.PodRequest(pod)
		if err != nil || !ok || r.Count != n {
			continue
		}
		if best == nil || boundBefore(pod, best) {
			best, bestReq = pod, r
		}
	}
	if best == nil {
		return nil, vgpu.Request{}, fmt.Errorf("no pending pod on node %s placed by the flexgv scheduler asks for %d %s (is kube-scheduler configured with the flexgv extender?)", p.cfg.NodeName, n, vgpu.ResourceVGPU)
	}
	return best, bestReq, nil
}

// boundBefore reports whether the extender bound a before b; pods it did
// not stamp come after, by creation.
func boundBefore(a, b *corev1.Pod) bool {
	ta, errA := time.Parse(time.RFC3339Nano, a.Annotations[vgpu.AnnotationBoundAt])
	tb, errB := time.Parse(time.RFC3339Nano, b.Annotations[vgpu.AnnotationBoundAt])
	switch {
	case errA == nil && errB == nil && !ta.Equal(tb):
		return ta.Before(tb)
	case (errA == nil) != (errB == nil):
		return errA == nil
	case !a.CreationTimestamp.Equal(&b.CreationTimestamp):
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

func (p *Plugin) nodePods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := p.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", p.cfg.NodeName).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", p.cfg.NodeName, err)
	}
	return list.Items, nil
}

// allocate creates pod's tenant on its GPUs and says how its container
// joins it.
func (p *Plugin) allocate(ctx context.Context, pod *corev1.Pod, r vgpu.Request) (*pluginapi.ContainerAllocateResponse, error) {
	uuids := vgpu.PodGPUs(pod)
	t, gpus, err := p.tenantOf(pod, r)
	if err != nil {
		return nil, err
	}
	visible := strings.Join(uuids, ",")
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
		"FLEXGV_TENANT":          ContainerTenant,
		"LD_PRELOAD":             ContainerShim,
		"CUDA_VISIBLE_DEVICES":   visible,
		"NVIDIA_VISIBLE_DEVICES": visible,
	}}
	driver, err := p.deliver(resp, gpus)
	if err != nil {
		return nil, err
	}
	path, err := p.makeTenant(ctx, pod, r, t)
	if err != nil {
		return nil, err
	}
	list := preloadShim
	if driver != nil {
		list = preloadDriver
	}
	preload, err := p.preload(list, p.preloadLists()[list]...)
	if err != nil {
		return nil, err
	}
	resp.Mounts = append(resp.Mounts,
		&pluginapi.Mount{ContainerPath: ContainerShim, HostPath: p.cfg.Shim, ReadOnly: true},
		preload,
		// The tenant's file alone: the pod sees no other tenant.
		&pluginapi.Mount{ContainerPath: ContainerTenant, HostPath: path},
	)
	// A share, a cap or a priority other than normal: the daemon made the tenant a
	// member of each GPU's scheduler, whose file the shim finds next to the
	// tenant's.
	if prio, _ := sched.ParsePriority(string(r.Priority)); r.ComputePct > 0 || r.ComputeMax > 0 || prio != sched.PriorityNormal {
		resp.Envs["FLEXGV_COMPUTE"] = "1"
		for _, u := range uuids {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{
				ContainerPath: sched.Path(filepath.Dir(ContainerTenant), u), HostPath: sched.Path(filepath.Dir(path), u),
			})
		}
	}
	// Part of the SMs: a client of the daemon's MPS, confined by it.
	sms := "all SMs"
	if r.SM > 0 {
		resp.Envs["CUDA_MPS_PIPE_DIRECTORY"] = ContainerMPSPipe
		resp.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = fmt.Sprint(r.SM)
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: ContainerMPSPipe, HostPath: p.cfg.MPSPipe})
		sms = fmt.Sprintf("%d%% of the SMs (MPS)", r.SM)
	}
	capped := "no cap"
	if r.ComputeMax > 0 {
		capped = fmt.Sprintf("capped at %d%%", r.ComputeMax)
	}
	p.log.Printf("pod %s/%s: tenant %s on %s, %d MiB (+%d MiB context), %d%% compute share, %s, priority %s, %s each",
		pod.Namespace, pod.Name, t.Name, visible, r.MemoryMiB, p.cfg.ContextMiB, r.ComputePct, capped, r.Priority, sms)
	return resp, nil
}

// tenantOf is the tenant pod's request r makes, on the GPUs (returned)
// the extender placed it on.
func (p *Plugin) tenantOf(pod *corev1.Pod, r vgpu.Request) (Tenant, []vgpu.GPU, error) {
	p.mu.Lock()
	gpus := p.gpus
	p.mu.Unlock()
	if r.SM > 0 && p.cfg.MPSPipe == "" {
		return Tenant{}, nil, fmt.Errorf("the pod asks for %s %d, and node %s offers pods no MPS (flexgv daemon --kubernetes --mps --mps-pods)",
			vgpu.AnnotationSM, r.SM, p.cfg.NodeName)
	}
	t := Tenant{Name: TenantPrefix + string(pod.UID), Priority: r.Priority, ContextBytes: uint64(p.cfg.ContextMiB) << 20,
		SM: uint32(r.SM), Namespace: pod.Namespace, Pod: pod.Name, Container: r.Container}
	var on []vgpu.GPU
	for _, u := range vgpu.PodGPUs(pod) {
		i := slices.IndexFunc(gpus, func(g vgpu.GPU) bool { return g.UUID == u })
		if i < 0 {
			return Tenant{}, nil, fmt.Errorf("placed on GPU %s, which node %s does not have", u, p.cfg.NodeName)
		}
		if !gpus[i].Healthy {
			return Tenant{}, nil, fmt.Errorf("placed on GPU %s, which is unhealthy", u)
		}
		t.Devices = append(t.Devices, TenantDevice{UUID: u, QuotaBytes: uint64(r.MemoryMiB+p.cfg.ContextMiB) << 20, ComputePct: r.ComputePct,
			ComputeMax: r.ComputeMax})
		on = append(on, gpus[i])
	}
	return t, on, nil
}

// makeTenant has the daemon create t, pod's tenant, and gives its file to
// the user of the pod's container.
func (p *Plugin) makeTenant(ctx context.Context, pod *corev1.Pod, r vgpu.Request, t Tenant) (string, error) {
	path, err := p.daemon.CreateTenant(ctx, t)
	if err != nil {
		return "", err
	}
	if err := giveTo(path, pod, r.Container, 0o660); err != nil {
		return "", err
	}
	return path, nil
}

// rebuild makes again the tenants of the pods the kubelet has given vGPUs
// that the daemon does not hold: after a reboot the kubelet reuses the
// allocations it saved (its checkpoint) and restarts their containers
// without asking Allocate, but the tenant files, in shared memory, are
// gone, and so is the daemon's record of them. Only the kubelet's
// pod-resources API says which pods those are (a pod placed here but not
// yet allocated must have no tenant, as Allocate goes by that); without
// it nothing is rebuilt.
func (p *Plugin) rebuild(ctx context.Context) error {
	if p.cfg.PodResources == "" {
		return nil
	}
	listed, err := p.podResources(ctx)
	if err != nil {
		return fmt.Errorf("asking the kubelet which pods have vGPUs: %w", err)
	}
	given := map[string]bool{}
	for _, pod := range listed {
		for _, c := range pod.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == string(vgpu.ResourceVGPU) && len(d.DeviceIds) > 0 {
					given[pod.Namespace+"/"+pod.Name] = true
				}
			}
		}
	}
	pods, err := p.nodePods(ctx)
	if err != nil {
		return err
	}
	have, err := p.daemon.Tenants(ctx)
	if err != nil {
		return fmt.Errorf("listing the node daemon's tenants: %w", err)
	}
	var errs []error
	for i := range pods {
		pod := &pods[i]
		if !given[pod.Namespace+"/"+pod.Name] || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
			len(vgpu.PodGPUs(pod)) == 0 || holds(have, TenantPrefix+string(pod.UID)) {
			continue
		}
		r, ok, err := vgpu.PodRequest(pod)
		if err != nil || !ok {
			continue
		}
		t, _, err := p.tenantOf(pod, r)
		if err == nil {
			_, err = p.makeTenant(ctx, pod, r, t)
		}
		for list, libs := range p.preloadLists() {
			if err == nil {
				_, err = p.preload(list, libs...)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("making again the tenant of pod %s/%s: %w", pod.Namespace, pod.Name, err))
			continue
		}
		p.log.Printf("pod %s/%s: tenant %s made again (the kubelet kept its vGPUs; the daemon had lost it, as after a reboot)",
			pod.Namespace, pod.Name, t.Name)
	}
	return errors.Join(errs...)
}

// The loader's preload lists of containers given vGPUs: the shim, and
// after it the driver's libraries where they are given from DriverLibs.
const (
	preloadShim   = "ld.so.preload"
	preloadDriver = "ld.so.preload-driver"
)

// preloadLists are the lists containers may be given, by name.
func (p *Plugin) preloadLists() map[string][]string {
	lists := map[string][]string{preloadShim: {ContainerShim}}
	if p.cfg.DriverLibs != "" {
		lists[preloadDriver] = append([]string{ContainerShim}, driverPreload(p.cfg.DriverLibs)...)
	}
	return lists
}

// rebuildLocked is rebuild serialized with Allocate.
func (p *Plugin) rebuildLocked(ctx context.Context) error {
	p.allocating.Lock()
	defer p.allocating.Unlock()
	return p.rebuild(ctx)
}

// preload writes the loader's preload list naming libs (container paths)
// as name in PreloadDir and says how a container gets it. LD_PRELOAD alone
// would not do: a pod's own LD_PRELOAD comes after Allocate's and wins, and
// the program would run without its limits.
func (p *Plugin) preload(name string, libs ...string) (*pluginapi.Mount, error) {
	file := filepath.Join(p.cfg.PreloadDir, name)
	want := []byte(strings.Join(libs, "\n") + "\n")
	if have, err := os.ReadFile(file); err != nil || !bytes.Equal(have, want) {
		// Written aside and renamed: a container starting meanwhile never
		// reads half a list.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, want, 0o644); err != nil {
			return nil, fmt.Errorf("the loader's preload list: %w", err)
		}
		if err := os.Rename(tmp, file); err != nil {
			return nil, fmt.Errorf("the loader's preload list: %w", err)
		}
	}
	return &pluginapi.Mount{ContainerPath: ContainerPreload, HostPath: file, ReadOnly: true}, nil
}

// deviceNode is the device node name under DevRoot, if the node has it.
func (p *Plugin) deviceNode(name string) []*pluginapi.DeviceSpec {
	host := filepath.Join(p.cfg.DevRoot, name)
	if _, err := os.Stat(host); err != nil {
		return nil
	}
	return []*pluginapi.DeviceSpec{{ContainerPath: "/dev/" + name, HostPath: host, Permissions: "rw"}}
}

// syncTenants deletes the tenants of pods that are gone or finished; a
// tenant still in use goes once its last process exits. The caller holds
// allocating.
//
// The node's pod listing only names candidates: a listing that lags (an
// API server behind, a partial answer) would otherwise delete the tenant of
// a pod that runs, and the tenants are listed before it, so that one made
// meanwhile is not judged by a listing older than its pod. Each candidate's
// pod is then asked for by name, and its tenant deleted only where the API
// server says that pod is gone or finished.
func (p *Plugin) syncTenants(ctx context.Context) {
	have, err := p.daemon.Tenants(ctx)
	if err != nil {
		p.log.Printf("listing the node daemon's tenants: %v", err)
		return
	}
	pods, err := p.nodePods(ctx)
	if err != nil {
		p.log.Print(err)
		return
	}
	live, present := map[string]bool{}, map[string]bool{}
	if p.cfg.RemoteAddr != "" {
		remote, err := p.syncRemote(ctx)
		if err != nil {
			p.log.Printf("remote pods: %v", err)
			return // tenants of remote pods cannot be told from those that are gone
		}
		for name := range remote {
			live[name] = true
		}
	}
	for _, pod := range pods {
		present[pod.Namespace+"/"+pod.Name] = true
		// A remote vGPU's tenant is its server's (syncRemote), wherever
		// the pod runs.
		if _, _, remote := vgpu.PodRemoteGPU(&pod); !remote && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			live[TenantPrefix+string(pod.UID)] = true
		}
	}
	p.mu.Lock()
	var gone []string
	for key, a := range p.allocated {
		if !present[a.Pod] {
			gone = append(gone, key)
		}
	}
	p.mu.Unlock()
	for _, key := range gone {
		p.setAllocated(key, "")
	}
	for _, t := range have {
		if !strings.HasPrefix(t.Name, TenantPrefix) || live[t.Name] {
			continue
		}
		why, err := p.podGone(ctx, t)
		if err != nil {
			p.log.Printf("tenant %s kept: %v", t.Name, err)
			continue
		}
		removed, err := p.daemon.DeleteTenant(ctx, t.Name)
		switch {
		case err != nil:
			p.log.Printf("deleting tenant %s: %v", t.Name, err)
		case removed:
			p.log.Printf("deleted tenant %s: %s", t.Name, why)
		}
	}
}

// podGone asks the API server for the pod of tenant t and says why the
// tenant may go: its pod is gone or finished. It returns an error where the
// pod is still there or the API server could not say. A tenant that does
// not record its pod (made by an older daemon) has only the node's listing
// to go by.
func (p *Plugin) podGone(ctx context.Context, t Held) (string, error) {
	if t.Namespace == "" || t.Pod == "" {
		return "its pod is gone", nil
	}
	name := t.Namespace + "/" + t.Pod
	// By name, a listing: the node's permissions are to list pods.
	list, err := p.client.CoreV1().Pods(t.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", t.Pod).String()})
	if err != nil {
		return "", fmt.Errorf("asking for its pod %s: %w", name, err)
	}
	uid := types.UID(strings.TrimPrefix(t.Name, TenantPrefix))
	for _, pod := range list.Items {
		if pod.UID != uid {
			continue // another pod of that name, made since
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return fmt.Sprintf("its pod %s has finished (%s)", name, pod.Status.Phase), nil
		}
		if server, _, ok := vgpu.PodRemoteGPU(&pod); ok && server != p.cfg.NodeName {
			return fmt.Sprintf("the remote vGPU of its pod %s is on %s now", name, server), nil
		}
		return "", fmt.Errorf("its pod %s is %s, though the listing of node %s's pods did not show it so", name, pod.Status.Phase, p.cfg.NodeName)
	}
	return fmt.Sprintf("its pod %s is gone", name), nil
}
