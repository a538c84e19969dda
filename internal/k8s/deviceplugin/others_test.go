package deviceplugin

import (
	"bytes"
	"context"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// health is each GPU the plugin advertises, by UUID: healthy or not.
func health(p *Plugin) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for _, g := range p.gpus {
		out[g.UUID] = g.Healthy
	}
	return out
}

// Beside NVIDIA's device plugin: --gpus takes some GPUs only, and a GPU
// that nvidia.com/gpu advertises too (by UUID or by index) is not
// advertised here, said in the log; pods placed on it are refused.
func TestGPUsSharedWithAnotherPluginAreNotAdvertised(t *testing.T) {
	two := []Device{{Index: 0, UUID: "GPU-0", MemoryBytes: 16 << 30}, {Index: 1, UUID: "GPU-1", MemoryBytes: 16 << 30}}
	ctx := context.Background()

	p, k, d := startPlugin(t)
	var logged bytes.Buffer
	p.log = log.New(&logged, "", 0)
	d.devs = two
	p.cfg.GPUs = []string{"1", "GPU-7"}
	p.mu.Lock()
	p.gpus = nil
	p.mu.Unlock()
	p.refresh(ctx)
	p.refresh(ctx)
	if got := health(p); len(got) != 1 || !got["GPU-1"] {
		t.Errorf("with --gpus 1,GPU-7: %v, want GPU-1 alone", got)
	}
	if n := strings.Count(logged.String(), "--gpus names GPU-7, which is no GPU of this node (NVML lists 2)"); n != 1 {
		t.Errorf("the unknown GPU said %d times: %q", n, logged.String())
	}

	for _, ids := range [][]string{{"GPU-0"}, {"0"}} {
		p, k, d = startPlugin(t, placedPod("a", 1000, time.Now()))
		logged.Reset()
		p.log = log.New(&logged, "", 0)
		d.devs = two
		k.set(listed("a"))
		k.allocatable = []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: ids},
			{ResourceName: string(vgpu.ResourceVGPU), DeviceIds: []string{"GPU-1-vgpu-0"}}}
		p.refresh(ctx)
		if got := health(p); len(got) != 2 || got["GPU-0"] || !got["GPU-1"] {
			t.Errorf("nvidia.com/gpu advertising %v: %v, want GPU-0 unhealthy, GPU-1 healthy", ids, got)
		}
		if !strings.Contains(logged.String(), "GPU GPU-0 (index 0) is advertised by nvidia.com/gpu too") {
			t.Errorf("log: %q", logged.String())
		}
		if _, err := allocate(t, p, "GPU-0-vgpu-0"); err == nil || !strings.Contains(err.Error(), "placed on GPU GPU-0, which is unhealthy") {
			t.Errorf("a pod placed on the shared GPU: %v", err)
		}
		// NVIDIA's plugin lets go of it: advertised again.
		k.mu.Lock()
		k.allocatable = []*podresourcesv1.ContainerDevices{}
		k.mu.Unlock()
		p.refresh(ctx)
		if got := health(p); !got["GPU-0"] {
			t.Errorf("GPU-0 no longer advertised by nvidia.com/gpu: %v", got)
		}
	}
}

// A GPU with MIG mode on is not advertised (its MIG devices are not
// limited by FlexGV), said once in the log; with MIG off again it is.
func TestMIGGPUsAreNotAdvertised(t *testing.T) {
	p, _, d := startPlugin(t)
	var logged bytes.Buffer
	p.log = log.New(&logged, "", 0)
	d.devs = []Device{{Index: 0, UUID: "GPU-0", MemoryBytes: 80 << 30, MIG: true}, {Index: 1, UUID: "GPU-1", MemoryBytes: 80 << 30}}
	ctx := context.Background()
	p.refresh(ctx)
	p.refresh(ctx)
	if got := health(p); got["GPU-0"] || !got["GPU-1"] {
		t.Errorf("GPU-0 with MIG on: %v, want it unhealthy, GPU-1 healthy", got)
	}
	if n := strings.Count(logged.String(), "GPU GPU-0 (index 0) has MIG mode on: its memory is split into MIG devices, which FlexGV does not limit; not advertised"); n != 1 {
		t.Errorf("log, said %d times: %q", n, logged.String())
	}
	d.mu.Lock()
	d.devs[0].MIG = false
	d.mu.Unlock()
	p.refresh(ctx)
	if got := health(p); !got["GPU-0"] {
		t.Errorf("GPU-0 with MIG off again: %v", got)
	}
}

// After a reboot emptied the state folders, a running remote pod's token
// is made again from its Secret: on its server, the file flexgv serve
// admits it by (the same token its container was given, not a new one);
// on its node, the file the kubelet's saved mount names, with the
// loader's preload list.
func TestRemoteTokensMadeAgainFromTheirSecrets(t *testing.T) {
	pod := placedPod("r", 0, time.Now())
	pod.Status.Phase = corev1.PodRunning
	pod.Annotations = map[string]string{vgpu.AnnotationRemoteGPU: "node/GPU-0", vgpu.AnnotationRemoteMemory: "1024"}
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{vgpu.ResourceRemoteVGPU: resource.MustParse("1")}
	p, k, _ := startPlugin(t, pod)
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: RemoteSecretPrefix + string(pod.UID), Namespace: "flexgv"},
		Data: map[string][]byte{"token": []byte("the-token"), "address": []byte("tcp://server:7070")}}
	if _, err := p.client.CoreV1().Secrets("flexgv").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p.cfg.SecretNamespace, p.cfg.RemoteAddr, p.cfg.TenantDir = "flexgv", "tcp://server:7070", dir
	p.cfg.RemoteSlots, p.cfg.RemoteLib, p.cfg.RemoteTokens = 1, dir, filepath.Join(dir, "tokens")
	os.Mkdir(p.cfg.RemoteTokens, 0o700)

	if err := p.serveRemote(ctx, pod, "GPU-0"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, TenantPrefix+string(pod.UID)+".token")); string(b) != "the-token" {
		t.Errorf("the server's token file: %q, want the Secret's", b)
	}

	rp := p.Remote()
	rp.forget(ctx) // the kubelet has not given it a remote vGPU: nothing to make
	if _, err := os.Stat(rp.tokenFile(pod.UID)); err == nil {
		t.Errorf("token file made for a pod the kubelet lists without a remote vGPU")
	}
	k.set(&podresourcesv1.PodResources{Name: "r", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{Name: "app",
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: string(vgpu.ResourceRemoteVGPU), DeviceIds: []string{"remote-vgpu-0"}}}}}})
	rp.forget(ctx)
	if b, _ := os.ReadFile(rp.tokenFile(pod.UID)); string(b) != "the-token" {
		t.Errorf("the node's token file: %q, want the Secret's", b)
	}
	if b, _ := os.ReadFile(filepath.Join(p.cfg.PreloadDir, "remote-ld.so.preload")); string(b) != ContainerRemoteLib+"/libcuda.so.1\n" {
		t.Errorf("the remote preload list: %q", b)
	}
}
