package deviceplugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/remote"
)

// Remote vGPUs. On a GPU server node (Config.RemoteAddr, with flexgv serve
// --tenant-dir Config.TenantDir beside the daemon) the plugin creates, for
// every pod the extender placed on one of its GPUs, the pod's tenant there
// with its limits, a token file that admits it, and a Secret holding the
// token and the address in Config.SecretNamespace. On a node that runs such
// pods (Config.RemoteSlots) a second plugin advertises flexgv.io/remote-vgpu
// and gives the container the remoting libcuda.so.1, the address and the
// token: the container needs no GPU and no driver.
const (
	// RemoteSecretPrefix starts the name of a remote pod's Secret; its UID follows.
	RemoteSecretPrefix = "flexgv-remote-"
	// LabelRemoteServer on a remote pod's Secret: the server node that made it.
	LabelRemoteServer = "flexgv.io/remote-server"
	// Where the container finds what the remote plugin gives it.
	ContainerRemoteLib   = "/usr/local/flexgv/remote"
	ContainerRemoteToken = "/run/flexgv/remote.token"
	ContainerNvidiaSmi   = "/usr/bin/nvidia-smi"
	// ContainerRemoteAt holds the file "address": the server the pod's
	// programs dial, rewritten when its remote vGPU moves (a folder, so
	// that the container sees the file replaced).
	ContainerRemoteAt = "/run/flexgv/remote-at"
	remoteSocketName  = "flexgv-remote.sock"
	// secretWait bounds how long Allocate waits for the server's Secret.
	secretWait = 15 * time.Second
)

// syncRemote, on a GPU server node, makes the tenant, token file and Secret
// of every live pod placed on its GPUs, and removes those of the others. It
// returns the tenants that must stay.
func (p *Plugin) syncRemote(ctx context.Context) (map[string]bool, error) {
	p.remoteMu.Lock()
	defer p.remoteMu.Unlock()
	pods, err := p.placedHere(ctx)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, pod := range pods {
		server, uuid, ok := vgpu.PodRemoteGPU(pod)
		to, toUUID, moving := vgpu.PodRemoteMove(pod)
		if !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		switch {
		case server == p.cfg.NodeName:
			if moving {
				p.moveAway(ctx, pod, to, toUUID) // served here until it has moved
			}
		case moving && to == p.cfg.NodeName:
			uuid = toUUID // to be served here, with the token it has
		default:
			continue
		}
		name := TenantPrefix + string(pod.UID)
		live[name] = true
		if err := p.serveRemote(ctx, pod, uuid); err != nil {
			p.log.Printf("remote pod %s/%s: %v", pod.Namespace, pod.Name, err)
		} else if server != p.cfg.NodeName {
			p.readyFor(ctx, pod)
		}
	}
	// Tokens and Secrets of pods that are gone.
	files, _ := filepath.Glob(filepath.Join(p.cfg.TenantDir, TenantPrefix+"*.token"))
	for _, f := range files {
		if !live[strings.TrimSuffix(filepath.Base(f), ".token")] {
			os.Remove(f)
		}
	}
	secrets, err := p.client.CoreV1().Secrets(p.cfg.SecretNamespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRemoteServer + "=" + p.cfg.NodeName})
	if err == nil {
		for _, s := range secrets.Items {
			if !live[TenantPrefix+strings.TrimPrefix(s.Name, RemoteSecretPrefix)] {
				p.client.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
			}
		}
	}
	return live, nil
}

// writeAside writes file aside and renames it into place: a reader (flexgv
// serve, a container starting) never sees half of it.
func writeAside(file string, data []byte, mode os.FileMode) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// byServer indexes pods by the server node of their remote vGPU.
const byServer = "remote-server"

// placedHere are the pods whose remote vGPU is on this node: from the
// watch of WatchRemote once it runs, else listed. The caller holds remoteMu.
func (p *Plugin) placedHere(ctx context.Context) ([]*corev1.Pod, error) {
	if p.remotePods != nil {
		objs, err := p.remotePods.ByIndex(byServer, p.cfg.NodeName)
		out := make([]*corev1.Pod, len(objs))
		for i, o := range objs {
			out[i] = o.(*corev1.Pod)
		}
		return out, err
	}
	list, err := p.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		server, _, ok := vgpu.PodRemoteGPU(&list.Items[i])
		to, _, _ := vgpu.PodRemoteMove(&list.Items[i])
		if ok && (server == p.cfg.NodeName || to == p.cfg.NodeName) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// WatchRemote, on a GPU server node, watches the cluster's pods and serves
// those placed on its GPUs as their bindings arrive (their containers wait
// for the Secret); once in a while it also sweeps, for what a missed event
// or a failed call left.
func (p *Plugin) WatchRemote(ctx context.Context) {
	f := informers.NewSharedInformerFactory(p.client, 0)
	inf := f.Core().V1().Pods().Informer()
	inf.AddIndexers(cache.Indexers{byServer: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			if server, _, ok := vgpu.PodRemoteGPU(pod); ok {
				if to, _, moving := vgpu.PodRemoteMove(pod); moving {
					return []string{server, to}, nil
				}
				return []string{server}, nil
			}
		}
		return nil, nil
	}})
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	p.remoteMu.Lock()
	p.remotePods = inf.GetIndexer()
	p.remoteMu.Unlock()
	p.mu.Lock()
	p.remoteKick = func() { poke(nil) }
	p.mu.Unlock()
	sweep := time.NewTicker(10 * time.Second)
	defer sweep.Stop()
	for {
		if _, err := p.syncRemote(ctx); err != nil && ctx.Err() == nil {
			p.log.Printf("remote pods: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-sweep.C:
		}
	}
}

// serveRemote makes pod's tenant on GPU uuid, its token file and Secret.
func (p *Plugin) serveRemote(ctx context.Context, pod *corev1.Pod, uuid string) error {
	r, ok, err := vgpu.PodRequest(pod)
	if err != nil || !ok || !r.Remote {
		return fmt.Errorf("not a remote vGPU request: %v", err)
	}
	name := TenantPrefix + string(pod.UID)
	t := Tenant{Name: name, Priority: r.Priority, ContextBytes: uint64(p.cfg.ContextMiB) << 20,
		Namespace: pod.Namespace, Pod: pod.Name, Container: r.Container,
		Devices: []TenantDevice{{UUID: uuid, QuotaBytes: uint64(r.MemoryMiB+p.cfg.ContextMiB) << 20, ComputePct: r.ComputePct, ComputeMax: r.ComputeMax}}}
	if _, err := p.daemon.CreateTenant(ctx, t); err != nil {
		return err
	}
	file := filepath.Join(p.cfg.TenantDir, name+".token")
	secrets := p.client.CoreV1().Secrets(p.cfg.SecretNamespace)
	sname := RemoteSecretPrefix + string(pod.UID)
	secret, err := secrets.Get(ctx, sname, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	token, ferr := os.ReadFile(file)
	if ferr != nil {
		if err == nil && len(secret.Data["token"]) > 0 {
			// The file is gone (a reboot emptied the folder) but not the
			// Secret, whose token the pod's container was given: the same
			// token admits it again.
			token = secret.Data["token"]
			p.log.Printf("remote pod %s/%s: token file made again from its Secret", pod.Namespace, pod.Name)
		} else {
			b := make([]byte, 32)
			rand.Read(b)
			token = []byte(hex.EncodeToString(b))
			p.log.Printf("remote pod %s/%s: tenant %s on %s, %d MiB (+%d MiB context), %d%% compute share",
				pod.Namespace, pod.Name, name, uuid, r.MemoryMiB, p.cfg.ContextMiB, r.ComputePct)
		}
		if err := writeAside(file, token, 0o600); err != nil {
			return err
		}
	}
	if err == nil {
		return nil
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: sname, Labels: map[string]string{LabelRemoteServer: p.cfg.NodeName}},
		Data:       map[string][]byte{"token": token, "address": []byte(p.cfg.RemoteAddr)},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// RemotePlugin advertises flexgv.io/remote-vgpu on a node and hands each
// container its remote vGPU's address and token.
type RemotePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	p *Plugin

	mu    sync.Mutex
	given map[types.UID]bool // pods allocated
}

// Remote returns the node's remote-vGPU plugin; Run runs it.
func (p *Plugin) Remote() *RemotePlugin { return &RemotePlugin{p: p, given: map[types.UID]bool{}} }

// Run serves until ctx ends, registering again after kubelet restarts.
func (rp *RemotePlugin) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := rp.serve(ctx)
		if ctx.Err() != nil {
			return
		}
		rp.p.log.Printf("remote vGPUs: %v; starting again", err)
		sleep(ctx, time.Second)
	}
}

func (rp *RemotePlugin) serve(ctx context.Context) error {
	return rp.p.endpoint(ctx, remoteSocketName, vgpu.ResourceRemoteVGPU, rp, &pluginapi.DevicePluginOptions{}, rp.forget)
}

// GetDevicePluginOptions implements the device-plugin API.
func (rp *RemotePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements the device-plugin API: the node's slots, always
// healthy (the GPUs are elsewhere).
func (rp *RemotePlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for i := range rp.p.cfg.RemoteSlots {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: fmt.Sprintf("remote-vgpu-%d", i), Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Allocate implements the device-plugin API: for the node's pending pod
// with a remote vGPU not yet given one (the one bound first), it waits
// for the server's Secret, keeps the token in a file of the node's, and
// gives the container the remoting library, the address and the token.
func (rp *RemotePlugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		pods, err := rp.p.nodePods(ctx)
		if err != nil {
			return nil, err
		}
		var pod *corev1.Pod
		for i := range pods {
			c := &pods[i]
			if _, _, ok := vgpu.PodRemoteGPU(c); ok && c.Status.Phase == corev1.PodPending && !rp.given[c.UID] &&
				(pod == nil || boundBefore(c, pod)) {
				pod = c
			}
		}
		if pod == nil {
			return nil, fmt.Errorf("flexgv: no pending pod with a remote vGPU on node %s", rp.p.cfg.NodeName)
		}
		cresp, err := rp.allocate(ctx, pod)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		rp.given[pod.UID] = true
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (rp *RemotePlugin) allocate(ctx context.Context, pod *corev1.Pod) (*pluginapi.ContainerAllocateResponse, error) {
	name := RemoteSecretPrefix + string(pod.UID)
	var secret *corev1.Secret
	deadline := time.Now().Add(secretWait)
	for {
		s, err := rp.p.client.CoreV1().Secrets(rp.p.cfg.SecretNamespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			secret = s
			break
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("no Secret %s from its GPU server within %v: %v", name, secretWait, err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
	token, addr := secret.Data["token"], string(secret.Data["address"])
	if len(token) == 0 || addr == "" {
		return nil, fmt.Errorf("Secret %s has no token or address", name)
	}
	file, err := rp.giveToken(pod, token)
	if err != nil {
		return nil, err
	}
	preload, err := rp.preload()
	if err != nil {
		return nil, err
	}
	if err := rp.giveAddress(pod.UID, addr); err != nil {
		return nil, err
	}
	_, uuid, _ := vgpu.PodRemoteGPU(pod)
	rp.p.log.Printf("pod %s/%s: remote vGPU %s at %s", pod.Namespace, pod.Name, uuid, addr)
	mounts := []*pluginapi.Mount{
		{ContainerPath: ContainerRemoteLib, HostPath: rp.p.cfg.RemoteLib, ReadOnly: true},
		{ContainerPath: ContainerRemoteToken, HostPath: file, ReadOnly: true},
		{ContainerPath: ContainerRemoteAt, HostPath: rp.addressDir(pod.UID), ReadOnly: true},
		preload,
	}
	// NVIDIA's nvidia-smi refuses the remoting NVML; the remote path's
	// answers where programs and people look for it.
	if smi := remote.NvidiaSmi(rp.p.cfg.RemoteLib); smi != "" {
		mounts = append(mounts, &pluginapi.Mount{ContainerPath: ContainerNvidiaSmi, HostPath: smi, ReadOnly: true})
	}
	return &pluginapi.ContainerAllocateResponse{
		Envs: map[string]string{
			"FLEXGV_REMOTE":              addr,
			"FLEXGV_REMOTE_TOKEN_FILE":   ContainerRemoteToken,
			"FLEXGV_REMOTE_ADDRESS_FILE": ContainerRemoteAt + "/address",
			"LD_LIBRARY_PATH":            ContainerRemoteLib,
		},
		Mounts: mounts,
	}, nil
}

// giveToken keeps pod's token in its file on the node, given to the
// pod's user.
func (rp *RemotePlugin) giveToken(pod *corev1.Pod, token []byte) (string, error) {
	file := rp.tokenFile(pod.UID)
	if err := writeAside(file, token, 0o600); err != nil {
		return "", err
	}
	r, _, _ := vgpu.PodRequest(pod)
	return file, giveTo(file, pod, r.Container, 0o440)
}

// giveAddress writes the server's address into pod uid's address folder.
func (rp *RemotePlugin) giveAddress(uid types.UID, addr string) error {
	dir := rp.addressDir(uid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeAside(filepath.Join(dir, "address"), []byte(addr+"\n"), 0o644)
}

// serverAddress is where pod's remote vGPU is served now (after a move,
// the new server's), as that node publishes it.
func (rp *RemotePlugin) serverAddress(ctx context.Context, pod *corev1.Pod) (string, error) {
	server, _, ok := vgpu.PodRemoteGPU(pod)
	if !ok {
		return "", fmt.Errorf("no remote vGPU")
	}
	node, err := rp.p.client.CoreV1().Nodes().Get(ctx, server, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	inv, ok, err := vgpu.NodeInventory(node)
	if err == nil && (!ok || inv.Remote == "") {
		err = fmt.Errorf("node %s publishes no address of its GPU server", server)
	}
	return inv.Remote, err
}

// followMove rewrites the address file of a pod whose remote vGPU moved,
// so that the programs it starts from then on dial the new server (those
// running were moved by the server).
func (rp *RemotePlugin) followMove(ctx context.Context, pod *corev1.Pod) {
	file := filepath.Join(rp.addressDir(pod.UID), "address")
	had, err := os.ReadFile(file)
	if err != nil {
		return // not given here (yet)
	}
	addr, err := rp.serverAddress(ctx, pod)
	if err != nil || strings.TrimSpace(string(had)) == addr {
		return
	}
	if err := rp.giveAddress(pod.UID, addr); err != nil {
		rp.p.log.Printf("remote pod %s/%s: giving it its new server's address: %v", pod.Namespace, pod.Name, err)
		return
	}
	rp.p.log.Printf("remote pod %s/%s: its programs dial %s from now on", pod.Namespace, pod.Name, addr)
}

// preload writes the loader's preload list of remote vGPUs' containers:
// the remoting libraries. An LD_LIBRARY_PATH the image or the pod sets (the
// pod's replaces Allocate's) keeps its own folders and still gets them, as
// a library of that SONAME is loaded.
func (rp *RemotePlugin) preload() (*pluginapi.Mount, error) {
	libs := []string{filepath.Join(ContainerRemoteLib, "libcuda.so.1")}
	if _, err := os.Stat(filepath.Join(rp.p.cfg.RemoteLib, "libnvidia-ml.so.1")); err == nil {
		libs = append(libs, filepath.Join(ContainerRemoteLib, "libnvidia-ml.so.1"))
	}
	return rp.p.preload("remote-ld.so.preload", libs...)
}

// restore makes again, after a reboot emptied the node's state folder, the
// token files (from their Secrets) and the preload list of the pods the
// kubelet lists with remote vGPUs: it starts their containers again with
// the mounts it saved, without Allocate. The caller holds rp.mu.
func (rp *RemotePlugin) restore(ctx context.Context, pods []corev1.Pod) error {
	if rp.p.cfg.PodResources == "" {
		return nil
	}
	listed, err := rp.p.podResources(ctx)
	if err != nil {
		return fmt.Errorf("asking the kubelet which pods have remote vGPUs: %w", err)
	}
	given := map[string]bool{}
	for _, pod := range listed {
		for _, c := range pod.Containers {
			for _, d := range c.Devices {
				if d.ResourceName == string(vgpu.ResourceRemoteVGPU) && len(d.DeviceIds) > 0 {
					given[pod.Namespace+"/"+pod.Name] = true
				}
			}
		}
	}
	var errs []error
	for i := range pods {
		pod := &pods[i]
		if !given[pod.Namespace+"/"+pod.Name] || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, err := os.Stat(rp.tokenFile(pod.UID)); err == nil {
			continue
		}
		secret, err := rp.p.client.CoreV1().Secrets(rp.p.cfg.SecretNamespace).Get(ctx, RemoteSecretPrefix+string(pod.UID), metav1.GetOptions{})
		if err == nil {
			_, err = rp.giveToken(pod, secret.Data["token"])
		}
		if err == nil {
			_, err = rp.preload()
		}
		if err == nil {
			addr, aerr := rp.serverAddress(ctx, pod)
			if aerr != nil {
				addr = string(secret.Data["address"])
			}
			err = rp.giveAddress(pod.UID, addr)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("making again the token file of remote pod %s/%s: %w", pod.Namespace, pod.Name, err))
			continue
		}
		rp.given[pod.UID] = true
		rp.p.log.Printf("remote pod %s/%s: token file made again from its Secret (the kubelet kept its remote vGPU)", pod.Namespace, pod.Name)
	}
	return errors.Join(errs...)
}

func (rp *RemotePlugin) tokenFile(uid types.UID) string {
	return filepath.Join(rp.p.cfg.RemoteTokens, string(uid)+".token")
}

func (rp *RemotePlugin) addressDir(uid types.UID) string {
	return filepath.Join(rp.p.cfg.RemoteTokens, string(uid)+".at")
}

// forget removes the token files of pods that are gone or finished, also
// those a previous run of the daemon gave.
func (rp *RemotePlugin) forget(ctx context.Context) {
	// Under the lock: a pod given its token after the listing would lose it.
	rp.mu.Lock()
	defer rp.mu.Unlock()
	pods, err := rp.p.nodePods(ctx)
	if err != nil {
		return
	}
	live := map[types.UID]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live[p.UID] = true
		}
	}
	for uid := range rp.given {
		if !live[uid] {
			delete(rp.given, uid)
		}
	}
	files, _ := filepath.Glob(filepath.Join(rp.p.cfg.RemoteTokens, "*.token"))
	for _, f := range files {
		if uid := types.UID(strings.TrimSuffix(filepath.Base(f), ".token")); !live[uid] {
			os.Remove(f)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(rp.p.cfg.RemoteTokens, "*.at"))
	for _, d := range dirs {
		if uid := types.UID(strings.TrimSuffix(filepath.Base(d), ".at")); !live[uid] {
			os.RemoveAll(d)
		}
	}
	for i := range pods {
		if live[pods[i].UID] {
			rp.followMove(ctx, &pods[i])
		}
	}
	if err := rp.restore(ctx, pods); err != nil {
		rp.p.log.Print(err)
	}
}

// GetPreferredAllocation implements the device-plugin API: no preference.
func (rp *RemotePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer implements the device-plugin API; not asked for.
func (rp *RemotePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
