package k8s

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod info %s: %s %s\n%s", pod.Status.Phase, pod.Status.Reason, pod.Status.Message, out)
	}
	// What the program saw: the quota (its memory and one context) as the
	// device's size.
	quota := uint64(2048+nodeCtxMiB) << 20
	if !strings.Contains(out, fmt.Sprintf(" total %d ", quota)) {
		t.Errorf("memclient info under the pod's allocation: %q, want total %d", out, quota)
	}
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
