package k8s

import (
	"cmp"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"

	"github.com/flexgv/flexgv/internal/daemon"
	"github.com/flexgv/flexgv/internal/k8s/deviceplugin"
	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/sched"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
	"github.com/flexgv/flexgv/tests/k8s/hollow"
	"github.com/flexgv/flexgv/tests/k8s/kubelet"
)

// gpuNode is one node of simulated GPUs: its node daemon, which is also
// its device plugin (flexgv daemon --kubernetes), and the kubelet's device
// manager.
type gpuNode struct {
	t        *testing.T
	name     string
	dir      string   // the simulated machine: GPU state, tenant files
	env      []string // of every process on the node
	daemon   *exec.Cmd
	daemonWG sync.WaitGroup
	kubelet  *kubelet.Node
	stdinMu  sync.Mutex
	stdin    map[string]io.WriteCloser // of running containers with stdin: true, by pod name
	extra    []string                  // more flags of its daemon
	hollow   *hollowKubelet            // the kubelet's own code, in place of kubelet
}

// loseGPU makes the node's NVML stop listing GPU index, as when a GPU
// falls off the bus; CUDA programs on it are left alone.
func (n *gpuNode) loseGPU(index int) {
	n.t.Helper()
	if err := os.WriteFile(filepath.Join(n.dir, "nvml-lost"), []byte(fmt.Sprintf("%d\n", index)), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

const (
	nodeGPUs   = 2
	nodeGPUMiB = 16384
	nodeCtxMiB = 512
)

func startGPUNode(t *testing.T, name string, daemonFlags ...string) *gpuNode {
	t.Helper()
	if !privateKubelet {
		t.Skip("the kubelet's device manager needs a mount namespace of its own (root)")
	}
	n := newGPUNode(t, name, daemonFlags)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name}}}
	node, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if node, err = cp.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status = corev1.NodeStatus{Capacity: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("100"),
	}}
	node.Status.Allocatable = node.Status.Capacity
	if _, err := cp.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	n.startKubelet()
	t.Cleanup(func() { n.kubelet.Stop() })
	n.startGPUs()
	return n
}

// machines numbers the simulated machines, so that their GPUs' UUIDs
// differ as real ones do.
var machines atomic.Int32

// newGPUNode is node name's simulated machine, of nodeGPUs GPUs.
func newGPUNode(t *testing.T, name string, daemonFlags []string) *gpuNode {
	n := &gpuNode{t: t, name: name, dir: t.TempDir(), stdin: map[string]io.WriteCloser{}, extra: daemonFlags}
	n.env = []string{
		fmt.Sprintf("FLEXGV_SIM_MACHINE=%d", machines.Add(1)%256),
		"FLEXGV_SIM_STATE=" + filepath.Join(n.dir, "gpu.state"),
		"FLEXGV_STATE_DIR=" + filepath.Join(n.dir, "tenants"),
		fmt.Sprintf("FLEXGV_SIM_DEVICES=%d", nodeGPUs),
		fmt.Sprintf("FLEXGV_SIM_MEM=%dMiB", nodeGPUMiB),
		"FLEXGV_SIM_NVML_LOST=" + filepath.Join(n.dir, "nvml-lost"),
		"LD_LIBRARY_PATH=" + filepath.Join(build, "sim"),
	}
	return n
}

// startGPUs starts the node daemon, which is its device plugin, on the
// node's GPUs and waits for the kubelet to report their vGPUs.
func (n *gpuNode) startGPUs() {
	n.t.Helper()
	// The GPUs' device nodes, as the plugin finds them under /dev.
	devRoot := filepath.Join(n.dir, "dev")
	os.MkdirAll(devRoot, 0o755)
	for _, f := range []string{"nvidia0", "nvidia1", "nvidiactl"} {
		os.WriteFile(filepath.Join(devRoot, f), nil, 0o644)
	}
	n.startDaemon()
	n.waitCapacity(int64(nodeGPUs * slots))
}

func (n *gpuNode) startDaemon() {
	n.t.Helper()
	logPath := filepath.Join(n.dir, "daemon.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(build, "bin", "flexgv"), "daemon", "--metrics-addr", "",
		"--kubernetes", "--node-name", n.name, "--kubeconfig", cp.Kubeconfig, "--shim", filepath.Join(build, "lib", "libflexgv.so"),
		"--plugin-dir", kubeletDir, fmt.Sprintf("--slots=%d", slots), fmt.Sprintf("--ctx-mem=%dMiB", nodeCtxMiB),
		"--dev-root", filepath.Join(n.dir, "dev"), "--pod-resources", n.podResources(), "--cdi-spec-dir", filepath.Join(n.dir, "cdi"),
		"--health-interval", "100ms", "--sync-interval", "100ms")
	cmd.Args = append(cmd.Args, n.extra...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.daemon = cmd
	n.daemonWG.Add(1)
	go func() { cmd.Wait(); n.daemonWG.Done() }()
	n.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		n.daemonWG.Wait()
		if n.t.Failed() {
			b, _ := os.ReadFile(logPath)
			n.t.Logf("flexgv daemon log:\n%s", b)
		}
	})
	sock := daemon.Socket(filepath.Join(n.dir, "tenants"))
	eventually(n.t, 10*time.Second, "flexgv daemon serving on "+sock, func() (bool, error) {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil, err
	})
}

// killDaemon kills the node daemon as a crash would.
func (n *gpuNode) killDaemon() {
	n.daemon.Process.Kill()
	n.daemonWG.Wait()
}

// gpuForAll opens the simulated GPU's state to every user, as the node's
// /dev/nvidia* are: a pod's process or a server's executor run as another
// user reach it through the node's folders.
func (n *gpuNode) gpuForAll() {
	for _, d := range []string{filepath.Dir(n.dir), n.dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			n.t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(n.dir, "gpu.state"), 0o666); err != nil {
		n.t.Fatal(err)
	}
}

// podResources is the kubelet's pod-resources socket.
func (n *gpuNode) podResources() string {
	if n.hollow != nil {
		return n.hollow.cfg.PodResources()
	}
	return filepath.Join(n.dir, "pod-resources.sock")
}

func (n *gpuNode) startKubelet() {
	k, err := kubelet.Start(cp.Client, n.name, n.podResources(), n.runContainer)
	if err != nil {
		n.t.Fatal(err)
	}
	n.kubelet = k
}

// runContainer runs the container's command, a test client of build/tests,
// as a container runtime would with the device plugin's settings: its
// environment, its mounts (a path the container would see at a mount's
// container path is the mount's host path here) and the node's own
// settings (the simulated GPU's state and libraries).
// A container with stdin: true has it open until the pod is deleted; others
// read an empty one, as in a pod.
func (n *gpuNode) runContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, opts *devicemanager.DeviceRunContainerOptions) (int, string) {
	env := n.containerEnv(opts)
	// The pod's own values come after the device plugin's, as the kubelet
	// puts them: of a name in both, the program sees the pod's.
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	args := slices.Concat(c.Command, c.Args)
	cmd, err := n.containerCommand(opts.Mounts, runAs(pod, c), filepath.Join(build, "tests", args[0]), args[1:]...)
	if err != nil {
		return 127, err.Error()
	}
	cmd.Env = env
	if c.Stdin {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 127, err.Error()
		}
		n.stdinMu.Lock()
		n.stdin[pod.Name] = stdin
		n.stdinMu.Unlock()
		go func() { <-ctx.Done(); stdin.Close() }()
	}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		return 127, err.Error()
	}
	return 0, string(out)
}

// containerEnv is the node's own settings and the device plugin's
// environment, where a path the container would see under a mount's
// container path is under its host path.
func (n *gpuNode) containerEnv(opts *devicemanager.DeviceRunContainerOptions) []string {
	env := slices.Clone(n.env)
	for _, e := range opts.Envs {
		v := e.Value
		for _, m := range opts.Mounts {
			if rest, ok := strings.CutPrefix(v, m.ContainerPath); ok && (rest == "" || rest[0] == '/') {
				v = m.HostPath + rest
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// execInPod runs test client args[0] in pod's container as kubectl exec
// would: with what the device plugin gave the container.
func (n *gpuNode) execInPod(pod string, args ...string) (string, error) {
	opts := n.kubelet.Allocation(pod)
	if opts == nil {
		return "", fmt.Errorf("pod %s has no container here", pod)
	}
	cmd, err := n.containerCommand(opts.Mounts, nil, filepath.Join(build, "tests", args[0]), args[1:]...)
	if err != nil {
		return "", err
	}
	cmd.Env = n.containerEnv(opts)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// containerCommand runs prog as cred (nil: this process's user) with the
// mounts the dynamic loader reads made for real, as the hollow node's
// runtime runs a container (hollow.Command).
func (n *gpuNode) containerCommand(mounts []kubecontainer.Mount, cred *syscall.Credential, prog string, args ...string) (*exec.Cmd, error) {
	var binds [][2]string
	for _, m := range mounts {
		binds = append(binds, [2]string{m.HostPath, m.ContainerPath})
	}
	return hollow.Command(n.dir, binds, cred, prog, args...)
}

// runAs is the user a runtime runs container c of pod as where the pod
// says (the image's own USER stands at root here): nil, this process's.
func runAs(pod *corev1.Pod, c *corev1.Container) *syscall.Credential {
	var uid, gid *int64
	var groups []uint32
	if sc := pod.Spec.SecurityContext; sc != nil {
		uid, gid = sc.RunAsUser, sc.RunAsGroup
		if sc.FSGroup != nil {
			groups = append(groups, uint32(*sc.FSGroup))
		}
	}
	if sc := c.SecurityContext; sc != nil {
		uid, gid = cmp.Or(sc.RunAsUser, uid), cmp.Or(sc.RunAsGroup, gid)
	}
	if uid == nil && gid == nil && groups == nil {
		return nil
	}
	cred := &syscall.Credential{Groups: groups}
	if uid != nil {
		cred.Uid = uint32(*uid)
	}
	if gid != nil {
		cred.Gid = uint32(*gid)
	}
	return cred
}

// writeStdin writes line to the stdin of pod name's container.
func (n *gpuNode) writeStdin(name, line string) {
	n.t.Helper()
	var w io.WriteCloser
	eventually(n.t, 10*time.Second, "the container of "+name+" started", func() (bool, error) {
		n.stdinMu.Lock()
		defer n.stdinMu.Unlock()
		w = n.stdin[name]
		return w != nil, nil
	})
	if _, err := io.WriteString(w, line); err != nil {
		n.t.Fatal(err)
	}
}

// waitCapacity waits for the kubelet to report vgpus healthy vGPUs.
func (n *gpuNode) waitCapacity(vgpus int64) {
	n.t.Helper()
	eventually(n.t, 20*time.Second, fmt.Sprintf("node %s with %d allocatable %s", n.name, vgpus, vgpu.ResourceVGPU), func() (bool, error) {
		node, err := cp.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := node.Status.Allocatable[vgpu.ResourceVGPU]
		return q.Value() == vgpus, fmt.Errorf("allocatable %s", q.String())
	})
}

// tenants names the tenants the node daemon holds.
func (n *gpuNode) tenants() []string {
	n.t.Helper()
	c, err := daemon.Connect(daemon.Socket(filepath.Join(n.dir, "tenants")))
	if err != nil || c == nil {
		n.t.Fatalf("connecting to the node daemon: %v", err)
	}
	defer c.Close()
	resp, err := c.ListTenants(context.Background(), &flexgvv1.ListTenantsRequest{})
	if err != nil {
		n.t.Fatal(err)
	}
	var names []string
	for _, t := range resp.Tenants {
		if t.Held {
			names = append(names, t.Name)
		}
	}
	return names
}

// clientPod is a pod of the node running a test client with one vGPU.
func clientPod(ns, name, pool string, memMiB, computePct int64, command ...string) *corev1.Pod {
	p := vgpuPod(ns, name, pool, memMiB, computePct)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Command = command
	return p
}

// holderPod is a pod whose holder runs until the pod is deleted (its
// stdin, kept open, closes then).
func holderPod(ns, name, pool string, memMiB, computePct int64, holdMiB string) *corev1.Pod {
	p := clientPod(ns, name, pool, memMiB, computePct, "holder", holdMiB)
	p.Spec.Containers[0].Stdin = true
	return p
}

// finished waits for pod name to end and returns it.
func finished(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 60*time.Second, "pod "+name+" finished", func() (bool, error) {
		var err error
		pod, err = cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, fmt.Errorf("phase %s", pod.Status.Phase)
	})
	return pod
}

// unschedulable waits for pod name to be reported unschedulable, unbound,
// with a message that says why.
func unschedulable(t *testing.T, ns, name, why string) {
	t.Helper()
	eventually(t, 20*time.Second, "pod "+name+" reported unschedulable", func() (bool, error) {
		p, err := cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return p.Spec.NodeName == "" && strings.Contains(c.Message, why), fmt.Errorf("node %q, %q", p.Spec.NodeName, c.Message)
			}
		}
		return false, nil
	})
}

// running waits for pod name to run and returns it.
func running(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 60*time.Second, "pod "+name+" running", func() (bool, error) {
		var err error
		pod, err = cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s", pod.Status.Phase)
	})
	return pod
}

func TestDevicePluginGivesThePodItsLimits(t *testing.T) {
	n := startGPUNode(t, "gpu-a")
	ns := namespace(t, "dp-limits")
	ctx := context.Background()

	// The node as the plugin published it.
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, ok, err := vgpu.NodeInventory(node)
	if err != nil || !ok || len(inv.GPUs) != nodeGPUs || inv.Slots != slots || inv.ContextMiB != nodeCtxMiB {
		t.Fatalf("inventory %+v, %v %v", inv, ok, err)
	}
	for _, g := range inv.GPUs {
		if g.MemoryMiB != nodeGPUMiB || !g.Healthy {
			t.Errorf("GPU %+v", g)
		}
	}
	if q := node.Status.Allocatable[vgpu.ResourceMemory]; q.Value() != nodeGPUs*nodeGPUMiB {
		t.Errorf("allocatable %s: %s", vgpu.ResourceMemory, q.String())
	}

	// What the program sees: the quota (its memory and one context) as the
	// device's size, and not a byte more to allocate.
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "info", n.name, 2048, 30, "memclient", "info"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "info")
	out, _ := n.kubelet.Output("info")
	assertInfo(t, pod, out, 2048)
	gpus := vgpu.PodGPUs(pod)
	alloc := n.kubelet.Allocation("info")
	env := map[string]string{}
	for _, e := range alloc.Envs {
		env[e.Name] = e.Value
	}
	want := map[string]string{
		"FLEXGV_TENANT": deviceplugin.ContainerTenant, "LD_PRELOAD": deviceplugin.ContainerShim,
		"CUDA_VISIBLE_DEVICES": gpus[0], "NVIDIA_VISIBLE_DEVICES": gpus[0], "FLEXGV_COMPUTE": "1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("container env %s=%q, want %q", k, env[k], v)
		}
	}
	idx := slices.IndexFunc(inv.GPUs, func(g vgpu.GPU) bool { return g.UUID == gpus[0] })
	var devs []string
	for _, d := range alloc.Devices {
		devs = append(devs, d.PathInContainer)
	}
	if wantDevs := []string{fmt.Sprintf("/dev/nvidia%d", idx), "/dev/nvidiactl"}; !slices.Equal(devs, wantDevs) {
		t.Errorf("container devices %v, want %v", devs, wantDevs)
	}

	// One byte over what is left fails, exactly what is left succeeds.
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "exact", n.name, 1024, 0, "memclient", "exact"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	finished(t, ns, "exact")
	out, _ = n.kubelet.Output("exact")
	var room uint64
	if _, after, ok := strings.Cut(out, "room "); ok {
		fmt.Sscanf(after, "%d", &room)
	}
	if room == 0 || room > (1024+nodeCtxMiB)<<20 || !strings.Contains(out, "one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS") {
		t.Errorf("memclient exact in a pod of 1024 MiB (+%d MiB context): %q", nodeCtxMiB, out)
	}
	if env := n.kubelet.Allocation("exact").Envs; slices.ContainsFunc(env, func(e kubecontainer.EnvVar) bool { return e.Name == "FLEXGV_COMPUTE" }) {
		t.Errorf("FLEXGV_COMPUTE set for a pod without a compute share: %v", env)
	}

	// The compute shares hold too: spinners of a 30 % and a 70 % pod on one
	// GPU, started together, divide it 30:70 (± 5, as flexgv run --compute
	// is checked, and what their hosts delayed them: a tenant the host keeps
	// off the CPU leaves its turn to the other).
	shares := map[string]int64{"spin-30": 30, "spin-70": 70}
	for name, pct := range shares {
		p := clientPod(ns, name, n.name, 256, pct, "spinner", "1000", "3", "16")
		p.Spec.Containers[0].Stdin = true
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var placed []string
	for name := range shares {
		placed = append(placed, vgpu.PodGPUs(running(t, ns, name))...)
	}
	if len(placed) != 2 || placed[0] != placed[1] {
		t.Fatalf("the spinners were placed on %v, not together", placed)
	}
	for name := range shares {
		n.writeStdin(name, "go\n")
	}
	got, total, late := map[string]float64{}, 0.0, 0.0
	for name := range shares {
		finished(t, ns, name)
		out, _ := n.kubelet.Output(name)
		var share, wall, delayed float64
		if _, after, ok := strings.Cut(out, " share "); ok {
			fmt.Sscanf(after, "%f", &share)
			got[name] = share
		}
		if _, after, ok := strings.Cut(out, " wall_ms "); ok {
			fmt.Sscanf(after, "%f delayed_ms %f", &wall, &delayed)
		}
		if wall > 0 {
			late += 100 * delayed / wall
		}
	}
	total = got["spin-30"] + got["spin-70"]
	for name, pct := range shares {
		if share := got[name] * 100 / total; total == 0 || math.Abs(share-float64(pct)) > 5+late {
			t.Errorf("the spinner of %s got %.1f%% of the busy GPU, want %d ± 5 + %.1f (host delays) (all: %v)", name, share, pct, late, got)
		}
	}

	// Pods finished, tenants gone; a running pod's goes when it is deleted.
	eventually(t, 10*time.Second, "tenants of finished pods removed", func() (bool, error) {
		got := n.tenants()
		return len(got) == 0, fmt.Errorf("tenants %v", got)
	})
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, holderPod(ns, "holder", n.name, 1024, 0, "256"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running(t, ns, "holder")
	eventually(t, 10*time.Second, "the holder's tenant", func() (bool, error) {
		got := n.tenants()
		return len(got) == 1, fmt.Errorf("tenants %v", got)
	})
	zero := int64(0)
	if err := cp.Client.CoreV1().Pods(ns).Delete(ctx, "holder", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "tenants of deleted pods removed", func() (bool, error) {
		got := n.tenants()
		return len(got) == 0, fmt.Errorf("tenants %v", got)
	})
}

// A pod that sets LD_PRELOAD itself (the kubelet puts it after the device
// plugin's, so it replaces the shim's) still runs under its limits: the
// loader's own preload list, mounted at /etc/ld.so.preload, names the shim.
// A program built with AddressSanitizer, whose runtime must be the first
// library loaded, runs where the pod preloads that runtime (the loader
// reads LD_PRELOAD before /etc/ld.so.preload), under its limits too.
func TestPodsOwnPreloadKeepsItsLimits(t *testing.T) {
	n := startGPUNode(t, "gpu-p")
	ns := namespace(t, "dp-preload")
	asan := filepath.Join(build, "asan", "memclient")
	for _, c := range []struct{ name, preload, prog string }{
		{"exact", "libm.so.6", "memclient"},
		{"asan", sanitizerRuntime(t, asan), "../asan/memclient"}, // the image is build/tests
	} {
		p := clientPod(ns, c.name, n.name, 1024, 0, c.prog, "exact")
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LD_PRELOAD", Value: c.preload}}
		if _, err := cp.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := finished(t, ns, c.name)
		out, _ := n.kubelet.Output(c.name)
		var room uint64
		if _, after, ok := strings.Cut(out, "room "); ok {
			fmt.Sscanf(after, "%d", &room)
		}
		if pod.Status.Phase != corev1.PodSucceeded || room == 0 || room > (1024+nodeCtxMiB)<<20 ||
			!strings.Contains(out, "one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS") {
			t.Errorf("%s exact with the pod's own LD_PRELOAD=%s, in a pod of 1024 MiB (+%d MiB context): %s %q",
				c.prog, c.preload, nodeCtxMiB, pod.Status.Phase, out)
		}
		var list string
		for _, m := range n.kubelet.Allocation(c.name).Mounts {
			if m.ContainerPath == deviceplugin.ContainerPreload {
				b, _ := os.ReadFile(m.HostPath)
				list = string(b)
			}
		}
		if list != deviceplugin.ContainerShim+"\n" {
			t.Errorf("the container's %s: %q", deviceplugin.ContainerPreload, list)
		}
	}
}

// sanitizerRuntime is the AddressSanitizer runtime prog links (its
// DT_NEEDED name, libasan.so.N).
func sanitizerRuntime(t *testing.T, prog string) string {
	t.Helper()
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatalf("the ASan build of memclient (make builds it where libasan is installed): %v", err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.HasPrefix(l, "libasan.so") {
			return l
		}
	}
	t.Fatalf("%s links no libasan: %v", prog, libs)
	return ""
}

// After a reboot the kubelet starts a pod's container again with the
// allocation it saved (its checkpoint), without Allocate; the tenant files
// and the daemon's record of them, in shared memory, are gone. The daemon
// makes the tenant again with its limits, where the saved mount finds it.
func TestTenantMadeAgainAfterReboot(t *testing.T) {
	n := startGPUNode(t, "gpu-rb")
	ns := namespace(t, "dp-reboot")
	ctx := context.Background()
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, holderPod(ns, "holder", n.name, 1024, 0, "256"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := running(t, ns, "holder")
	tenant := deviceplugin.TenantPrefix + string(pod.UID)
	held, before := n.heldTenant(tenant)
	if !held || len(before) == 0 {
		t.Fatalf("tenant %s: held %v, quotas %v", tenant, held, before)
	}
	alloc := n.kubelet.Allocation("holder")
	// Its container runs (the node goes down with it, or the mounts it
	// starts with would be gone).
	n.waitTenantUses(tenant, 256<<20)

	n.killDaemon()
	state := filepath.Join(n.dir, "tenants")
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	n.startDaemon()
	eventually(t, 10*time.Second, "tenant "+tenant+" made again", func() (bool, error) {
		held, after := n.heldTenant(tenant)
		return held && slices.Equal(before, after), fmt.Errorf("held %v, quotas %v, were %v", held, after, before)
	})

	// A container started with the saved allocation runs under the limits.
	c := pod.Spec.Containers[0]
	c.Command, c.Stdin = []string{"memclient", "exact"}, false
	code, out := n.runContainer(ctx, pod, &c, alloc)
	var room uint64
	if _, after, ok := strings.Cut(out, "room "); ok {
		fmt.Sscanf(after, "%d", &room)
	}
	if code != 0 || room == 0 || room > (1024+nodeCtxMiB)<<20 ||
		!strings.Contains(out, "one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS") {
		t.Errorf("memclient exact with the saved allocation: exit %d %q", code, out)
	}
}

// A GPU in MIG mode (its memory split into MIG devices, NVIDIA's plugin's
// to hand out) is not advertised, and the daemon's log says why.
func TestMIGGPUNotAdvertised(t *testing.T) {
	n := startGPUNode(t, "gpu-mig")
	n.killDaemon()
	n.env = append(n.env, "FLEXGV_SIM_MIG=0")
	n.startDaemon()
	n.waitCapacity(int64((nodeGPUs - 1) * slots))
	node, err := cp.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, _, _ := vgpu.NodeInventory(node)
	var healthy []int
	for _, g := range inv.GPUs {
		if g.Healthy {
			healthy = append(healthy, g.Index)
		}
	}
	if !slices.Equal(healthy, []int{1}) {
		t.Errorf("inventory %+v: healthy GPUs %v, want [1]", inv.GPUs, healthy)
	}
	b, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
	if !regexp.MustCompile(`GPU GPU-\S+ \(index 0\) has MIG mode on: .* not advertised`).Match(b) {
		t.Errorf("the daemon's log does not say why GPU 0 is not advertised:\n%s", b)
	}
}

// wholeGPUPlugin stands for NVIDIA's device plugin: it advertises
// nvidia.com/gpu, devices named by GPU UUID.
type wholeGPUPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	ids []string
}

func (w wholeGPUPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (w wholeGPUPlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range w.ids {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Beside NVIDIA's device plugin: a GPU it advertises is not advertised by
// FlexGV (the kubelet's GetAllocatableResources says which), and is again
// once that plugin is gone.
func TestGPUAdvertisedByNVIDIAsPluginIsLeftToIt(t *testing.T) {
	n := startGPUNode(t, "gpu-nv")
	node, err := cp.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, _, _ := vgpu.NodeInventory(node)
	taken := inv.GPUs[0].UUID
	sock := filepath.Join(kubeletDir, "nvidia-gpu.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, wholeGPUPlugin{ids: []string{taken}})
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+filepath.Join(kubeletDir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: "nvidia-gpu.sock", ResourceName: "nvidia.com/gpu"}); err != nil {
		t.Fatal(err)
	}
	n.waitCapacity(int64((nodeGPUs - 1) * slots))
	b, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
	if !strings.Contains(string(b), "GPU "+taken+" (index 0) is advertised by nvidia.com/gpu too") {
		t.Errorf("the daemon's log does not say why %s is not advertised:\n%s", taken, b)
	}
	// NVIDIA's plugin goes: FlexGV advertises the GPU again.
	srv.Stop()
	os.Remove(sock)
	n.waitCapacity(int64(nodeGPUs * slots))
}

// heldTenant is the daemon's view of tenant name: held, and its quotas.
func (n *gpuNode) heldTenant(name string) (held bool, quotas []uint64) {
	n.t.Helper()
	c, err := daemon.Connect(daemon.Socket(filepath.Join(n.dir, "tenants")))
	if err != nil || c == nil {
		n.t.Fatalf("connecting to the node daemon: %v", err)
	}
	defer c.Close()
	tn, err := c.GetTenant(context.Background(), &flexgvv1.GetTenantRequest{Name: name})
	if err != nil {
		return false, nil
	}
	for _, d := range tn.Devices {
		quotas = append(quotas, d.QuotaBytes)
	}
	return tn.Held, quotas
}

// waitTenantUses waits for tenant to use at least bytes of a GPU.
func (n *gpuNode) waitTenantUses(tenant string, bytes uint64) {
	n.t.Helper()
	eventually(n.t, 20*time.Second, fmt.Sprintf("tenant %s using %d bytes", tenant, bytes), func() (bool, error) {
		c, err := daemon.Connect(daemon.Socket(filepath.Join(n.dir, "tenants")))
		if err != nil || c == nil {
			return false, err
		}
		defer c.Close()
		tn, err := c.GetTenant(context.Background(), &flexgvv1.GetTenantRequest{Name: tenant})
		if err != nil {
			return false, err
		}
		for _, d := range tn.Devices {
			if d.UsedBytes >= bytes {
				return true, nil
			}
		}
		return false, fmt.Errorf("tenant %v", tn.Devices)
	})
}

// ps is what flexgv ps prints on the node.
func (n *gpuNode) ps() string {
	n.t.Helper()
	cmd := exec.Command(filepath.Join(build, "bin", "flexgv"), "ps")
	cmd.Env = append(os.Environ(), "FLEXGV_STATE_DIR="+filepath.Join(n.dir, "tenants"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.t.Fatalf("flexgv ps: %v\n%s", err, out)
	}
	return string(out)
}

func TestDaemonAndKubeletRestartsLoseNoTenant(t *testing.T) {
	n := startGPUNode(t, "gpu-b")
	ns := namespace(t, "dp-restart")
	ctx := context.Background()
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, holderPod(ns, "holder", n.name, 1024, 0, "256"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := running(t, ns, "holder")
	tenant := deviceplugin.TenantPrefix + string(pod.UID)
	held, before := n.heldTenant(tenant)
	if !held || len(before) == 0 {
		t.Fatalf("tenant %s: held %v, quotas %v", tenant, held, before)
	}
	// flexgv ps on the node says which pod's container a tenant is for.
	podRow := regexp.MustCompile(`(?m)^` + tenant + ` .* ` + ns + `/holder/app$`)
	if out := n.ps(); !podRow.MatchString(out) {
		t.Errorf("flexgv ps does not show tenant %s for %s/holder/app:\n%s", tenant, ns, out)
	}

	// The daemon dies mid-way and comes back: it holds the tenant again
	// with the same quotas, and the plugin goes on through it.
	n.killDaemon()
	n.startDaemon()
	held, after := n.heldTenant(tenant)
	if !held || !slices.Equal(before, after) {
		t.Errorf("after the daemon's restart, tenant %s: held %v, quotas %v, were %v", tenant, held, after, before)
	}
	if out := n.ps(); !podRow.MatchString(out) {
		t.Errorf("after the daemon's restart, flexgv ps does not show tenant %s for %s/holder/app:\n%s", tenant, ns, out)
	}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "after-daemon", n.name, 1024, 0, "memclient", "info"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := finished(t, ns, "after-daemon"); p.Status.Phase != corev1.PodSucceeded {
		out, _ := n.kubelet.Output("after-daemon")
		t.Errorf("a pod after the daemon's restart: %s %s\n%s", p.Status.Phase, p.Status.Message, out)
	}

	// The kubelet restarts (removing the plugins' sockets): the plugin
	// registers again and its vGPUs are allocatable again.
	n.kubelet.Stop()
	n.startKubelet()
	eventually(t, 10*time.Second, "the plugin registered with the new kubelet", func() (bool, error) {
		return n.kubelet.Allocatable(vgpu.ResourceVGPU) == nodeGPUs*slots, nil
	})
	n.waitCapacity(int64(nodeGPUs * slots))
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "after-kubelet", n.name, 1024, 0, "memclient", "info"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := finished(t, ns, "after-kubelet"); p.Status.Phase != corev1.PodSucceeded {
		out, _ := n.kubelet.Output("after-kubelet")
		t.Errorf("a pod after the kubelet's restart: %s %s\n%s", p.Status.Phase, p.Status.Message, out)
	}
	if held, _ := n.heldTenant(tenant); !held {
		t.Errorf("tenant %s lost across the restarts", tenant)
	}
}

func TestUnhealthyGPUGetsNoNewPods(t *testing.T) {
	n := startGPUNode(t, "gpu-c")
	ns := namespace(t, "dp-health")
	ctx := context.Background()
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, _, _ := vgpu.NodeInventory(node)
	// The first GPU goes: NVML renumbers the other to index 0, but its
	// device node stays /dev/nvidia1.
	bad, good := inv.GPUs[0].UUID, inv.GPUs[1].UUID
	n.loseGPU(0)
	// The kubelet counts the bad GPU's slots out, the scheduler its memory.
	n.waitCapacity(slots)
	eventually(t, 10*time.Second, "the node's inventory marking "+bad+" unhealthy", func() (bool, error) {
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		inv, _, err := vgpu.NodeInventory(node)
		return err == nil && !inv.GPUs[0].Healthy && inv.GPUs[1].Healthy, err
	})
	// Pods fit on either GPU; each goes to the healthy one until it is full.
	for i := range 3 {
		name := fmt.Sprintf("p-%d", i)
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, holderPod(ns, name, n.name, 6000, 0, "64"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if p := running(t, ns, name); !slices.Equal(vgpu.PodGPUs(p), []string{good}) {
				t.Errorf("pod %s placed on %v, want the healthy %s", name, vgpu.PodGPUs(p), good)
			}
			// The container gets the GPU it was placed on.
			alloc := n.kubelet.Allocation(name)
			if !slices.ContainsFunc(alloc.Envs, func(e kubecontainer.EnvVar) bool { return e.Name == "CUDA_VISIBLE_DEVICES" && e.Value == good }) ||
				alloc.Devices[0].PathInContainer != "/dev/nvidia1" {
				t.Errorf("pod %s on %s got %v and devices %v", name, good, alloc.Envs, alloc.Devices)
			}
		}
	}
	unschedulable(t, ns, "p-2", "")
	n.kubelet.StopContainers()
}

// Two vGPUs land on two GPUs; a priority reaches the tenant.
func TestDevicePluginTwoGPUsAndPriority(t *testing.T) {
	n := startGPUNode(t, "gpu-d")
	ns := namespace(t, "dp-two")
	ctx := context.Background()
	two := clientPod(ns, "two", n.name, 1024, 0, "memclient", "info")
	two.Spec.Containers[0].Resources.Limits[vgpu.ResourceVGPU] = resource.MustParse("2")
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, two, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "two")
	gpus := vgpu.PodGPUs(pod)
	if pod.Status.Phase != corev1.PodSucceeded || len(gpus) != 2 || gpus[0] == gpus[1] {
		t.Fatalf("pod two: %s on %v: %s", pod.Status.Phase, gpus, pod.Status.Message)
	}
	var devs []string
	for _, d := range n.kubelet.Allocation("two").Devices {
		devs = append(devs, d.PathInContainer)
	}
	if !slices.Equal(devs, []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}) && !slices.Equal(devs, []string{"/dev/nvidia1", "/dev/nvidia0", "/dev/nvidiactl"}) {
		t.Errorf("devices of a pod with two vGPUs: %v", devs)
	}

	// A priority reaches the pod's tenant, and its container joins the
	// GPU's scheduler.
	high := holderPod(ns, "high", n.name, 1024, 0, "64")
	high.Annotations = map[string]string{vgpu.AnnotationPriority: "high"}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = running(t, ns, "high")
	c, err := daemon.Connect(daemon.Socket(filepath.Join(n.dir, "tenants")))
	if err != nil || c == nil {
		t.Fatalf("connecting to the node daemon: %v", err)
	}
	defer c.Close()
	tn, err := c.GetTenant(ctx, &flexgvv1.GetTenantRequest{Name: deviceplugin.TenantPrefix + string(pod.UID)})
	if err != nil || tn.Priority != sched.PriorityHigh {
		t.Errorf("tenant of a high priority pod: %v, %v", tn, err)
	}
	alloc := n.kubelet.Allocation("high")
	if !slices.ContainsFunc(alloc.Envs, func(e kubecontainer.EnvVar) bool { return e.Name == "FLEXGV_COMPUTE" && e.Value == "1" }) ||
		!slices.ContainsFunc(alloc.Mounts, func(m kubecontainer.Mount) bool { return m.ContainerPath == "/run/flexgv/gpu-"+vgpu.PodGPUs(pod)[0] }) {
		t.Errorf("a high priority pod's container: env %v, mounts %v", alloc.Envs, alloc.Mounts)
	}

	// A cap (an annotation: it reserves nothing) reaches the pod's tenant
	// on its GPU, its container joins the GPU's scheduler, and a spinner
	// there gets 30 % of the GPU, alone on it (the band of flexgv run
	// --compute-max on the simulated GPU).
	capped := clientPod(ns, "capped", n.name, 256, 0, "spinner", "1000", "2", "16")
	capped.Spec.Containers[0].Stdin = true
	capped.Annotations = map[string]string{vgpu.AnnotationComputeMax: "30"}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, capped, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = running(t, ns, "capped")
	tn, err = c.GetTenant(ctx, &flexgvv1.GetTenantRequest{Name: deviceplugin.TenantPrefix + string(pod.UID)})
	if err != nil || !slices.ContainsFunc(tn.Devices, func(d *flexgvv1.TenantDevice) bool {
		return d.Uuid == vgpu.PodGPUs(pod)[0] && d.ComputeMax == 3000
	}) {
		t.Errorf("tenant of a pod capped at 30%%: %v, %v", tn, err)
	}
	alloc = n.kubelet.Allocation("capped")
	if !slices.ContainsFunc(alloc.Envs, func(e kubecontainer.EnvVar) bool { return e.Name == "FLEXGV_COMPUTE" && e.Value == "1" }) {
		t.Errorf("a capped pod's container: env %v", alloc.Envs)
	}
	n.writeStdin("capped", "go\n")
	finished(t, ns, "capped")
	out, _ := n.kubelet.Output("capped")
	var share float64
	if _, after, ok := strings.Cut(out, " share "); !ok || func() bool { fmt.Sscanf(after, "%f", &share); return share < 23 || share > 33 }() {
		t.Errorf("a spinner capped at 30%% got %q", out)
	}
	n.kubelet.StopContainers()
}

// Records the time from creating pods to their containers running with
// their vGPUs: scheduling, binding, the kubelet's admission (polled every
// 100 ms here) and Allocate, which creates the tenant.
func TestAllocationLatency(t *testing.T) {
	n := startGPUNode(t, "gpu-e")
	ns := namespace(t, "dp-latency")
	ctx := context.Background()
	events := watchPods(t, ns)
	const pods = nodeGPUs * slots
	created := map[string]time.Time{}
	start := time.Now()
	for i := range pods {
		name := fmt.Sprintf("p-%d", i)
		created[name] = time.Now()
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, holderPod(ns, name, n.name, 1024, 10, "16"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var lat []time.Duration
	timeout := time.After(60 * time.Second)
	for len(lat) < pods {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("the API server ended the pods watch after %d pods ran", len(lat))
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Status.Phase != corev1.PodRunning || created[p.Name].IsZero() {
				continue
			}
			lat = append(lat, time.Since(created[p.Name]))
			delete(created, p.Name)
		case <-timeout:
			list, _ := cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			for _, p := range list.Items {
				t.Logf("%s: %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			t.Fatalf("%d of %d pods running after 60s", len(lat), pods)
		}
	}
	all := time.Since(start)
	slices.Sort(lat)
	t.Logf("%d pods created at once, all running with their vGPUs in %s; creation to running: median %s, max %s",
		pods, all.Round(time.Millisecond), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	if got := len(n.tenants()); got != pods {
		t.Errorf("%d tenants for %d running pods", got, pods)
	}
	n.kubelet.StopContainers()
}

// A pod created first but bound second is admitted second: each
// allocation goes to the pod the kubelet is admitting, by binding order,
// and each container gets its own pod's limits.
func TestAllocationFollowsBindingOrder(t *testing.T) {
	n := startGPUNode(t, "gpu-f")
	ns := namespace(t, "dp-order")
	ctx := context.Background()
	resume := n.kubelet.Pause()
	first := clientPod(ns, "created-first", n.name, 2048, 0, "memclient", "info")
	first.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "flexgv.io/test"}}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "created-second", n.name, 1024, 0, "memclient", "info"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := func(name string) {
		eventually(t, 20*time.Second, name+" bound", func() (bool, error) {
			p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", err
		})
	}
	bound("created-second")
	p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, "created-first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.SchedulingGates = nil
	if _, err := cp.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound("created-first")
	resume()
	for name, mib := range map[string]uint64{"created-first": 2048, "created-second": 1024} {
		pod := finished(t, ns, name)
		out, _ := n.kubelet.Output(name)
		if want := fmt.Sprintf(" total %d ", (mib+nodeCtxMiB)<<20); pod.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, want) {
			t.Errorf("pod %s of %d MiB: %s %q, want%s", name, mib, pod.Status.Phase, out, want)
		}
	}
}

// priorityClasses makes the PriorityClasses of values, for the test.
func priorityClasses(t *testing.T, values map[string]int32) {
	t.Helper()
	ctx := context.Background()
	sched := cp.Client.SchedulingV1().PriorityClasses()
	for name, v := range values {
		if _, err := sched.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sched.Delete(ctx, name, metav1.DeleteOptions{}) })
	}
}

// A pod of higher priority that no GPU has room for evicts pods of lower
// priority from one GPU, as many as that GPU needs: kube-scheduler would
// propose victims by the node's totals (one pod here), which frees no GPU
// enough; the extender's preempt verb names both pods of one GPU, and
// only those go.
func TestPreemptionFreesOneGPU(t *testing.T) {
	n := startGPUNode(t, "gpu-p")
	ns := namespace(t, "preempt")
	ctx := context.Background()
	priorityClasses(t, map[string]int32{"flexgv-test-low": 100, "flexgv-test-high": 1000})
	// Two pods of 7 GiB on each GPU: 1 GiB left on each, 4 GiB on the node.
	var low []string
	for i := range 2 * nodeGPUs {
		p := holderPod(ns, fmt.Sprintf("low-%d", i), n.name, 7168, 0, "64")
		p.Spec.PriorityClassName = "flexgv-test-low"
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		low = append(low, p.Name)
	}
	lowGPU := map[string]string{}
	for _, name := range low {
		lowGPU[name] = vgpu.PodGPUs(running(t, ns, name))[0]
	}
	high := holderPod(ns, "high", n.name, 10240, 0, "64")
	high.Spec.PriorityClassName = "flexgv-test-high"
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpu := vgpu.PodGPUs(running(t, ns, "high"))[0]
	var gone, left []string
	for _, name := range low {
		if _, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			gone = append(gone, name)
		} else {
			left = append(left, name)
		}
	}
	if len(gone) != 2 || lowGPU[gone[0]] != gpu || lowGPU[gone[1]] != gpu {
		t.Errorf("evicted %v (GPUs %v) for a pod placed on %s; left %v", gone, lowGPU, gpu, left)
	}
}

// A pod asking for a remote vGPU runs its CUDA program on a GPU server's
// GPU through flexgv serve, under the memory it asked for: the extender
// places it on a server's GPU, the server's daemon makes its tenant, token
// and Secret, and the node's remote plugin gives the container the
// remoting libcuda.so.1, the address and the token (here the node is its
// own server: a pod without device nodes, its GPU work in the server's
// executor). When it ends, its token, Secret and tenant go.
func TestRemoteVGPUPod(t *testing.T) {
	dir := t.TempDir()
	chartNS(t) // the Secrets' namespace, as the chart's
	n, addr, tokens := gpuServer(t, "gpu-r", 2)
	eventually(t, 10*time.Second, "remote vGPUs allocatable", func() (bool, error) {
		return n.kubelet.Allocatable(vgpu.ResourceRemoteVGPU) == 2, nil
	})
	ns := namespace(t, "remote-pod")
	ctx := context.Background()
	p := clientPod(ns, "remote", n.name, 0, 0, "memclient", "info")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{vgpu.ResourceRemoteVGPU: resource.MustParse("1")}
	p.Annotations = map[string]string{vgpu.AnnotationRemoteMemory: "1024"}
	// The pod's own library path replaces the device plugin's (and the
	// simulated driver's folder); the remoting libcuda is preloaded.
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LD_LIBRARY_PATH", Value: filepath.Join(dir, "app-lib")}}
	created := time.Now()
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "remote")
	t.Logf("created to finished (placed, served, allocated, run remotely): %v", time.Since(created).Round(time.Millisecond))
	out, _ := n.kubelet.Output("remote")
	quota := uint64(1024+nodeCtxMiB) << 20
	if pod.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, fmt.Sprintf(" total %d ", quota)) {
		t.Fatalf("pod remote %s: %s\n%s", pod.Status.Phase, pod.Status.Message, out)
	}
	server, uuid, ok := vgpu.PodRemoteGPU(pod)
	if !ok || server != n.name || !strings.HasPrefix(uuid, "GPU-") {
		t.Errorf("placed on %q", pod.Annotations[vgpu.AnnotationRemoteGPU])
	}
	env := map[string]string{}
	for _, e := range n.kubelet.Allocation("remote").Envs {
		env[e.Name] = e.Value
	}
	if env["FLEXGV_REMOTE"] != addr || env["LD_PRELOAD"] != "" || len(n.kubelet.Allocation("remote").Devices) != 0 {
		t.Errorf("the container's env %v, devices %v", env, n.kubelet.Allocation("remote").Devices)
	}
	tenant := deviceplugin.TenantPrefix + string(pod.UID)
	var given string // the node's copy of the token, mounted into the container
	for _, m := range n.kubelet.Allocation("remote").Mounts {
		if m.ContainerPath == deviceplugin.ContainerRemoteToken {
			given = m.HostPath
		}
	}
	if given == "" {
		t.Fatalf("no token mounted: %v", n.kubelet.Allocation("remote").Mounts)
	}
	// nvidia-smi is the remote path's, where programs look for it.
	if !slices.ContainsFunc(n.kubelet.Allocation("remote").Mounts, func(m kubecontainer.Mount) bool {
		return m.ContainerPath == deviceplugin.ContainerNvidiaSmi && m.HostPath == filepath.Join(build, "remote", "bin", "nvidia-smi")
	}) {
		t.Errorf("no nvidia-smi mounted: %v", n.kubelet.Allocation("remote").Mounts)
	}
	eventually(t, 10*time.Second, "the remote pod's tokens, Secret and tenant gone", func() (bool, error) {
		_, ferr := os.Stat(filepath.Join(tokens, tenant+".token"))
		_, gerr := os.Stat(given)
		_, serr := cp.Client.CoreV1().Secrets(chartNamespace).Get(ctx, deviceplugin.RemoteSecretPrefix+string(pod.UID), metav1.GetOptions{})
		return os.IsNotExist(ferr) && os.IsNotExist(gerr) && serr != nil && !slices.Contains(n.tenants(), tenant),
			fmt.Errorf("files %v %v, secret %v, tenants %v", ferr, gerr, serr, n.tenants())
	})
}

// A pod that asks for part of the SMs (flexgv.io/gpu-sm) on a node whose
// daemon offers its MPS to pods runs as a client of that MPS, confined to
// that part: the simulated GPU's 40 SMs are 10 to it at 25 %. A pod that
// asks for none on the same node is no MPS client and sees them all.
// Neither shares /dev/shm with the node's other pods.
func TestPodGivenPartOfTheSMs(t *testing.T) {
	pipe := filepath.Join(t.TempDir(), "mps")
	t.Setenv("PATH", filepath.Join(build, "sim", "bin")+":"+os.Getenv("PATH"))
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", pipe)
	n := startGPUNode(t, "gpu-sm", "--mps", "--mps-pods")
	ns := namespace(t, "dp-sm")
	ctx := context.Background()
	quarter := clientPod(ns, "quarter", n.name, 256, 0, "smcount")
	quarter.Annotations = map[string]string{vgpu.AnnotationSM: "25"}
	for _, p := range []*corev1.Pod{quarter, clientPod(ns, "all", n.name, 256, 0, "smcount")} {
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"quarter": "sms 10 mps 1", "all": "sms 40 mps 0"} {
		pod := finished(t, ns, name)
		if out, _ := n.kubelet.Output(name); pod.Status.Phase != corev1.PodSucceeded || strings.TrimSpace(out) != want {
			t.Errorf("pod %s: %s, %q; want %q", name, pod.Status.Phase, out, want)
		}
	}
	alloc := n.kubelet.Allocation("quarter")
	if slices.ContainsFunc(alloc.Mounts, func(m kubecontainer.Mount) bool { return m.ContainerPath == "/dev/shm" }) ||
		!slices.ContainsFunc(alloc.Mounts, func(m kubecontainer.Mount) bool {
			return m.ContainerPath == deviceplugin.ContainerMPSPipe && m.HostPath == pipe
		}) {
		t.Errorf("mounts of the pod given a quarter of the SMs: %v; want the MPS pipe folder (%s) and no /dev/shm of the node's", alloc.Mounts, pipe)
	}
	// A node whose daemon offers pods no MPS is not given such a pod: the
	// extender says why.
	other := startGPUNode(t, "gpu-nomps")
	elsewhere := clientPod(ns, "elsewhere", other.name, 256, 0, "smcount")
	elsewhere.Annotations = map[string]string{vgpu.AnnotationSM: "25"}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unschedulable(t, ns, "elsewhere", "offers pods no MPS")
	// The pod's tenant, deleted once the pod ended, had the percentage.
	pod, _ := cp.Client.CoreV1().Pods(ns).Get(ctx, "quarter", metav1.GetOptions{})
	log, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
	if want := fmt.Sprintf("created tenant %s%s (", deviceplugin.TenantPrefix, pod.UID); !strings.Contains(string(log), want) ||
		!regexp.MustCompile(regexp.QuoteMeta(want)+`[^\n]*--sm "25%"`).Match(log) {
		t.Errorf("the daemon's log does not show the pod's tenant created with --sm 25%%:\n%s", log)
	}
}

// A pod that runs as a user other than root uses its vGPU: the daemon
// hands the tenant file it made to that user, whose processes the shim in
// them then joins to the tenant, with its limits.
func TestNonRootPodUsesItsVGPU(t *testing.T) {
	n := startGPUNode(t, "gpu-u")
	// A runtime would bind-mount the tenant file; here the container's
	// process reaches it through the node's folders.
	n.gpuForAll()
	ns := namespace(t, "nonroot")
	ctx := context.Background()
	user := int64(1000)
	// With a compute share: the GPU's scheduler file too.
	p := clientPod(ns, "info", n.name, 1024, 30, "memclient", "info")
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &user, RunAsGroup: &user}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "info")
	out, _ := n.kubelet.Output("info")
	assertInfo(t, pod, out, 1024)
}
