package k8s

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/flexgv/flexgv/internal/k8s/deviceplugin"
	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/tests/k8s/hollow"
)

// hollowKubelet is a node's kubelet run from the kubelet's own code
// (package hollow), and the container runtime it drives.
type hollowKubelet struct {
	cfg     hollow.Config
	runtime *hollow.Runtime
	kubelet *hollow.Kubelet
	log     string
}

// startHollowNode is a node of simulated GPUs whose kubelet is the
// kubelet's own: it registers the node, admits its pods, has the device
// plugin allocate and runs their containers (test clients of build/tests)
// through its runtime.
func startHollowNode(t *testing.T, name string, daemonFlags ...string) *gpuNode {
	t.Helper()
	if !privateKubelet {
		t.Skip("the kubelet's device manager needs a mount namespace of its own (root)")
	}
	n := newGPUNode(t, name, daemonFlags)
	n.hollow = &hollowKubelet{cfg: hollow.Config{
		NodeName: name, Labels: map[string]string{"pool": name}, RootDir: filepath.Join(n.dir, "kubelet"),
		Kubeconfig: cp.Kubeconfig, Runtime: filepath.Join(n.dir, "cri.sock"),
	}, log: filepath.Join(cp.Dir, strings.ReplaceAll(t.Name(), "/", "_")+"-kubelet.log")}
	r, err := hollow.StartRuntime(n.hollow.cfg.Runtime, filepath.Join(build, "tests"), n.dir, n.env)
	if err != nil {
		t.Fatal(err)
	}
	n.hollow.runtime = r
	n.startHollowKubelet()
	t.Cleanup(func() {
		n.hollow.kubelet.Stop()
		r.Stop()
		cp.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	n.startGPUs()
	return n
}

func (n *gpuNode) startHollowKubelet() {
	n.t.Helper()
	k, err := hollow.Start(n.hollow.cfg, n.hollow.log)
	if err != nil {
		n.t.Fatal(err)
	}
	n.hollow.kubelet = k
	// Up once it serves the pod-resources API, which the daemon checks.
	eventually(n.t, 60*time.Second, "the kubelet serving "+n.podResources(), func() (bool, error) {
		c, err := net.Dial("unix", n.podResources())
		if err == nil {
			c.Close()
		}
		return err == nil, err
	})
	// The node lifecycle controller's part (no controller manager runs
	// here): the ready node's not-ready taint, which the kubelet
	// registered it with, removed.
	eventually(n.t, 30*time.Second, "node "+n.name+" ready and untainted", func() (bool, error) {
		node, err := cp.Client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready := slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		})
		if !ready {
			return false, fmt.Errorf("conditions %v", node.Status.Conditions)
		}
		if len(node.Spec.Taints) == 0 {
			return true, nil
		}
		node.Spec.Taints = nil
		_, err = cp.Client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
		return err == nil, err
	})
}

// podResourcesAPI calls the kubelet's pod-resources API.
func (n *gpuNode) podResourcesAPI(call func(podresourcesv1.PodResourcesListerClient) error) error {
	conn, err := grpc.NewClient("unix://"+n.podResources(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return call(podresourcesv1.NewPodResourcesListerClient(conn))
}

// podDevices is the vGPUs the kubelet's pod-resources API says pod ns/name
// holds.
func (n *gpuNode) podDevices(ns, name string) []string {
	n.t.Helper()
	var ids []string
	err := n.podResourcesAPI(func(c podresourcesv1.PodResourcesListerClient) error {
		resp, err := c.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
		for _, p := range resp.GetPodResources() {
			if p.Namespace != ns || p.Name != name {
				continue
			}
			for _, ct := range p.Containers {
				for _, d := range ct.Devices {
					if d.ResourceName == string(vgpu.ResourceVGPU) {
						ids = append(ids, d.DeviceIds...)
					}
				}
			}
		}
		return err
	})
	if err != nil {
		n.t.Fatalf("the kubelet's pod-resources API: %v", err)
	}
	slices.Sort(ids)
	return ids
}

// container is what the runtime was asked for pod name's container, once
// it has exited, and what it printed.
func (n *gpuNode) container(ns, name string) (*hollow.Container, string) {
	n.t.Helper()
	c := n.hollow.runtime.Container(ns, name)
	if c == nil {
		n.t.Fatalf("the runtime was asked for no container of pod %s", name)
	}
	var out string
	eventually(n.t, 10*time.Second, "the container of "+name+" exited", func() (bool, error) {
		var ok bool
		out, ok = c.Output()
		return ok, nil
	})
	return c, out
}

func TestHollowKubeletRunsVGPUPod(t *testing.T) {
	n := startHollowNode(t, "hollow-a")
	ns := namespace(t, "hollow-run")
	ctx := context.Background()

	// The kubelet registered the node with the plugin's vGPUs (startGPUs
	// waited for them) and made it ready.
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := node.Status.Capacity[vgpu.ResourceVGPU]; q.Value() != nodeGPUs*slots {
		t.Errorf("capacity %s: %s", vgpu.ResourceVGPU, q.String())
	}

	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "info", n.name, 2048, 30, "memclient", "info"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "info")
	c, out := n.container(ns, "info")
	// What the program saw: the quota (its memory and one context) as the
	// device's size.
	assertInfo(t, pod, out, 2048)
	// What the kubelet gave the runtime: the device plugin's settings.
	gpus := vgpu.PodGPUs(pod)
	want := map[string]string{
		"FLEXGV_TENANT": deviceplugin.ContainerTenant, "LD_PRELOAD": deviceplugin.ContainerShim,
		"CUDA_VISIBLE_DEVICES": gpus[0], "FLEXGV_COMPUTE": "1",
	}
	for k, v := range want {
		if got, _ := c.Env(k); got != v {
			t.Errorf("container env %s=%q, want %q", k, got, v)
		}
	}
	var devs []string
	for _, d := range c.Config.Devices {
		devs = append(devs, d.ContainerPath)
	}
	if len(devs) != 2 || devs[1] != "/dev/nvidiactl" {
		t.Errorf("container devices %v", devs)
	}
	if pod.Status.ContainerStatuses[0].State.Terminated == nil || pod.Status.ContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Errorf("container status %+v", pod.Status.ContainerStatuses)
	}
}

// runAsUser's pod runs its program as that user, with its vGPU (the
// runtime runs it as the user the kubelet asked for; the simulated GPU
// stands open to every user, as a node's /dev/nvidia* do).
func TestHollowNonRootPodUsesItsVGPU(t *testing.T) {
	n := startHollowNode(t, "hollow-u")
	n.gpuForAll()
	ns := namespace(t, "hollow-nonroot")
	user := int64(1000)
	p := clientPod(ns, "info", n.name, 1024, 30, "memclient", "info")
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &user, RunAsGroup: &user}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "info")
	c, out := n.container(ns, "info")
	if u := c.Config.GetLinux().GetSecurityContext().GetRunAsUser(); u == nil || u.Value != user {
		t.Errorf("the runtime was asked to run the container as %v, not uid %d", u, user)
	}
	assertInfo(t, pod, out, 1024)
}

// A pod's own LD_PRELOAD, which the kubelet puts after the plugin's (the
// program sees the pod's), does not free it of its limits: the shim is in
// the preload file the plugin mounts.
func TestHollowPodsOwnPreloadKeepsItsLimits(t *testing.T) {
	n := startHollowNode(t, "hollow-p")
	ns := namespace(t, "hollow-preload")
	p := clientPod(ns, "exact", n.name, 1024, 0, "memclient", "exact")
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LD_PRELOAD", Value: "libm.so.6"}}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "exact")
	_, out := n.container(ns, "exact")
	assertExact(t, pod, out, 1024)
}

// assertExact checks what memclient exact saw in a pod of memMiB: not a
// byte more than its quota (its memory and one context).
func assertExact(t *testing.T, pod *corev1.Pod, out string, memMiB uint64) {
	t.Helper()
	var room uint64
	if _, after, ok := strings.Cut(out, "room "); ok {
		fmt.Sscanf(after, "%d", &room)
	}
	if pod.Status.Phase != corev1.PodSucceeded || room == 0 || room > (memMiB+nodeCtxMiB)<<20 ||
		!strings.Contains(out, "one byte more -> CUDA_ERROR_OUT_OF_MEMORY, exactly -> CUDA_SUCCESS") {
		t.Errorf("memclient exact in pod %s of %d MiB (+%d MiB context): %s %s %q", pod.Name, memMiB, nodeCtxMiB, pod.Status.Phase, pod.Status.Message, out)
	}
}

// assertInfo: pod ran memclient info to its end and saw its quota (memMiB
// and one context) as the device's size.
func assertInfo(t *testing.T, pod *corev1.Pod, out string, memMiB uint64) {
	t.Helper()
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s: %s %s\n%s", pod.Name, pod.Status.Phase, pod.Status.Reason, pod.Status.Message, out)
	}
	if quota := (memMiB + nodeCtxMiB) << 20; !strings.Contains(out, fmt.Sprintf(" total %d ", quota)) {
		t.Errorf("memclient info in pod %s: %q, want total %d", pod.Name, out, quota)
	}
}

// The kubelet restarts while a vGPU pod runs: its container goes on, the
// pod stays running (the device manager's checkpoint has its devices), and
// a new pod gets its vGPU.
func TestHollowKubeletRestart(t *testing.T) {
	n := startHollowNode(t, "hollow-r")
	ns := namespace(t, "hollow-restart")
	ctx := context.Background()
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, holderPod(ns, "holder", n.name, 1024, 0, "256"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running(t, ns, "holder")
	holder := n.hollow.runtime.Container(ns, "holder")
	before := n.podDevices(ns, "holder")
	if len(before) != 1 {
		t.Fatalf("the holder's devices in the kubelet's pod-resources API: %v", before)
	}

	n.hollow.kubelet.Stop()
	n.startHollowKubelet()
	// The node's status still shows the vGPUs: the kubelet's pod-resources
	// API says when the plugin has registered with the new kubelet (a pod
	// admitted before fails, as on any node).
	eventually(t, 20*time.Second, "the plugin's vGPUs allocatable again", func() (bool, error) {
		var vgpus int
		err := n.podResourcesAPI(func(c podresourcesv1.PodResourcesListerClient) error {
			resp, err := c.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
			for _, d := range resp.GetDevices() {
				if d.ResourceName == string(vgpu.ResourceVGPU) {
					vgpus += len(d.DeviceIds)
				}
			}
			return err
		})
		return vgpus == nodeGPUs*slots, fmt.Errorf("%d vGPUs (%v)", vgpus, err)
	})
	// The holder keeps its vGPU: the device manager's checkpoint.
	if after := n.podDevices(ns, "holder"); !slices.Equal(before, after) {
		t.Errorf("the holder's devices after the kubelet's restart: %v, were %v", after, before)
	}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "after", n.name, 1024, 0, "memclient", "exact"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "after")
	_, out := n.container(ns, "after")
	assertExact(t, pod, out, 1024)

	p := running(t, ns, "holder")
	if c := n.hollow.runtime.Container(ns, "holder"); c != holder {
		t.Errorf("the holder's container was made again across the kubelet's restart")
	}
	if _, done := holder.Output(); done {
		t.Errorf("the holder's container ended across the kubelet's restart")
	}
	if p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("holder restarted: %+v", p.Status.ContainerStatuses)
	}
}

// The node reboots while a vGPU pod runs (restartPolicy Always): its
// container dies with the runtime, the node's tmpfs (the daemon's tenant
// state) is emptied; the kubelet's folders stay. The kubelet starts the
// container again with the allocation it saved, and the daemon makes its
// tenant again, so the container holds its memory again under its limits;
// a new pod runs under its own.
func TestHollowNodeReboot(t *testing.T) {
	n := startHollowNode(t, "hollow-b")
	ns := namespace(t, "hollow-reboot")
	ctx := context.Background()
	hp := holderPod(ns, "holder", n.name, 1024, 0, "256")
	hp.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, hp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := running(t, ns, "holder")
	tenant := deviceplugin.TenantPrefix + string(pod.UID)
	held, before := n.heldTenant(tenant)
	if !held || len(before) == 0 {
		t.Fatalf("tenant %s: held %v, quotas %v", tenant, held, before)
	}
	n.waitTenantUses(tenant, 256<<20)

	n.hollow.kubelet.Stop()
	n.hollow.runtime.Stop()
	n.killDaemon()
	if err := os.RemoveAll(filepath.Join(n.dir, "tenants")); err != nil {
		t.Fatal(err)
	}
	r, err := hollow.StartRuntime(n.hollow.cfg.Runtime, filepath.Join(build, "tests"), n.dir, n.env)
	if err != nil {
		t.Fatal(err)
	}
	n.hollow.runtime = r
	t.Cleanup(r.Stop)
	n.startDaemon()
	n.startHollowKubelet()

	eventually(t, 60*time.Second, "the holder's container started again", func() (bool, error) {
		return r.Container(ns, "holder") != nil, nil
	})
	eventually(t, 20*time.Second, "tenant "+tenant+" made again", func() (bool, error) {
		held, after := n.heldTenant(tenant)
		return held && slices.Equal(before, after), fmt.Errorf("held %v, quotas %v, were %v", held, after, before)
	})
	n.waitTenantUses(tenant, 256<<20)
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "after", n.name, 1024, 0, "memclient", "exact"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := finished(t, ns, "after")
	_, out := n.container(ns, "after")
	assertExact(t, p, out, 1024)
}

// The webhook down, a vGPU pod is refused (its limits unchecked, it could
// not run under them); back, the same pod is created, goes through the
// flexgv scheduler and runs on the node under its limits.
func TestHollowWebhookOutage(t *testing.T) {
	n := startHollowNode(t, "hollow-w")
	ns := namespace(t, "hollow-webhook")
	ctx := context.Background()
	kill, start := serveWebhook(t, ns, corev1.DefaultSchedulerName)
	kill()
	p := clientPod(ns, "exact", n.name, 1024, 0, "memclient", "exact")
	eventually(t, 10*time.Second, "a vGPU pod refused while the webhook is down", func() (bool, error) {
		_, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			zero := int64(0)
			cp.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), err
	})
	start()
	created, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a vGPU pod once the webhook is back: %v", err)
	}
	if created.Annotations[vgpu.AnnotationPriority] != "normal" {
		t.Errorf("the pod was not through the webhook: annotations %v", created.Annotations)
	}
	pod := finished(t, ns, "exact")
	_, out := n.container(ns, "exact")
	assertExact(t, pod, out, 1024)
}

// helm install, then helm upgrade, with the chart's webhook as a cluster
// has it: its configurations name its Service, whose endpoint is flexgv
// webhook serving the chart's Secret's certificate, which the API server
// verifies for the Service's name against the caBundle. After the install
// a vGPU pod is admitted through it and runs on the node under its
// limits; after the upgrade (the chart rendered again against the
// cluster, applied over the install, the webhook process left running)
// so is another.
func TestHollowWebhookThroughHelmUpgrade(t *testing.T) {
	ip := hostIPv4(t)
	n := startHollowNode(t, "hollow-u")
	chartNS(t)
	ctx := context.Background()
	caps := chartutil.DefaultCapabilities.Copy()
	// The test's kube-scheduler, with the chart's extenders, is the default.
	values := map[string]any{"scheduler": map[string]any{"name": corev1.DefaultSchedulerName}}
	// Each release's configurations for a namespace of their own: a pod of
	// the second through the webhook shows the API server uses the upgrade's.
	for i, ns := range []string{namespace(t, "hollow-install"), namespace(t, "hollow-upgrade")} {
		objs, err := renderChartFor(values, caps, true)
		if err != nil {
			t.Fatal(err)
		}
		narrowChartWebhook(objs, ns)
		apply(t, objs, "Secret", "Service", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
		if i == 0 {
			webhookEndpoint(t, ip, serveChartWebhook(t, objs, ip))
		}
		p := clientPod(ns, "exact", n.name, 1024, 0, "memclient", "exact")
		// The API server takes up new configurations within moments; dry
		// runs until then.
		eventually(t, 20*time.Second, "a dry run of a vGPU pod of "+ns+" through the chart's webhook", func() (bool, error) {
			tried, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, err
			}
			return tried.Annotations[vgpu.AnnotationPriority] == "normal", fmt.Errorf("annotations %v", tried.Annotations)
		})
		created, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a vGPU pod of %s: %v", ns, err)
		}
		if created.Annotations[vgpu.AnnotationPriority] != "normal" {
			t.Errorf("pod %s/exact was not through the webhook: annotations %v", ns, created.Annotations)
		}
		pod := finished(t, ns, "exact")
		_, out := n.container(ns, "exact")
		assertExact(t, pod, out, 1024)
	}
}

// CDI devices as a container runtime resolves them: with NVIDIA's CDI spec
// on the node (devices named by index, as nvidia-ctk names them), the
// device plugin gives the vGPU's GPU as a CDI device; the runtime resolves
// it with the CDI project's library (containerd's and CRI-O's) against the
// node's spec, the container gets that device's and the spec's edits, and
// runs under its limits. A GPU the spec does not name is given by UUID,
// which the runtime cannot resolve: the container is not created, and the
// pod says why.
func TestHollowCDIDevicesResolvedAsARuntimeDoes(t *testing.T) {
	n := startHollowNode(t, "hollow-cdi")
	n.hollow.runtime.CDISpecDirs = []string{filepath.Join(n.dir, "cdi")}
	ns := namespace(t, "hollow-cdi")
	ctx := context.Background()
	spec := func(names ...string) {
		t.Helper()
		var b strings.Builder
		b.WriteString("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: [FLEXGV_TEST_CDI_SPEC=nvidia]\ndevices:\n")
		for _, name := range names {
			fmt.Fprintf(&b, "- name: %q\n  containerEdits:\n    env: [FLEXGV_TEST_CDI_GPU=%s]\n", name, name)
		}
		if err := os.MkdirAll(n.hollow.runtime.CDISpecDirs[0], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.hollow.runtime.CDISpecDirs[0], "nvidia.yaml"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for i := range nodeGPUs {
		names = append(names, fmt.Sprint(i))
	}
	spec(names...)
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "exact", n.name, 1024, 0, "memclient", "exact"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := finished(t, ns, "exact")
	c, out := n.container(ns, "exact")
	assertExact(t, pod, out, 1024)
	var cdiNames []string
	for _, d := range c.Config.CDIDevices {
		cdiNames = append(cdiNames, d.Name)
	}
	gpu, _ := c.Env("FLEXGV_TEST_CDI_GPU")
	if len(cdiNames) != 1 || cdiNames[0] != "nvidia.com/gpu="+gpu || len(c.Config.Devices) != 0 {
		t.Errorf("CDI devices %v, the device's edit %q, device nodes %v", cdiNames, gpu, c.Config.Devices)
	}
	if v, _ := c.Env("FLEXGV_TEST_CDI_SPEC"); v != "nvidia" {
		t.Errorf("the spec's own edit: %q", v)
	}

	// A spec that names none of the node's GPUs: the plugin names them by
	// UUID, which the runtime does not find.
	spec("7")
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, clientPod(ns, "lost", n.name, 1024, 0, "memclient", "exact"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "pod lost refused by the runtime", func() (bool, error) {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, "lost", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil && w.Reason == "CreateContainerError" && strings.Contains(w.Message, "unresolvable CDI devices nvidia.com/gpu=GPU-") {
				return true, nil
			}
		}
		return false, fmt.Errorf("statuses %+v", p.Status.ContainerStatuses)
	})
}
