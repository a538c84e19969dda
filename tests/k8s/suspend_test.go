package k8s

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/tests/k8s/hollow"
)

// printedWithin waits for pod name's container to have printed want.
func (n *gpuNode) printedWithin(c *hollow.Container, want string, d time.Duration) {
	n.t.Helper()
	eventually(n.t, d, fmt.Sprintf("pod %s printed %q", c.Pod, want), func() (bool, error) {
		out := c.Printed()
		return strings.Contains(out, want), fmt.Errorf("printed %q", out)
	})
}

// podCondition waits for pod name's condition typ to have status s (and
// reason, where given), and returns the pod.
func podCondition(t *testing.T, ns, name string, typ corev1.PodConditionType, s corev1.ConditionStatus, reason string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 60*time.Second, fmt.Sprintf("pod %s %s %s", name, typ, s), func() (bool, error) {
		var err error
		if pod, err = cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		c := vgpu.PodCondition(pod, typ)
		return c != nil && c.Status == s && (reason == "" || c.Reason == reason), fmt.Errorf("%+v", c)
	})
	return pod
}

// A pod of higher priority that no GPU has room for suspends, on a node
// that suspends pods (--suspend-pods), a pod of lower priority that allows
// it, through the kubelet's own code: no pod is evicted; the suspended
// pod's CUDA calls wait while the other runs on its GPU; once that one is
// gone, it resumes where it was, its device memory as it left it.
func TestHollowPreemptionSuspendsAndResumes(t *testing.T) {
	n := startHollowNode(t, "hollow-s", "--suspend-pods")
	ns := namespace(t, "hollow-suspend")
	ctx := context.Background()
	priorityClasses(t, map[string]int32{"flexgv-test-susp-low": 100, "flexgv-test-susp-high": 1000})
	// A pod of 12 GiB on each GPU: 3.5 GiB left on each beside contexts,
	// 8 GiB of the node's totals.
	lows := map[string]*hollow.Container{}
	for i := range nodeGPUs {
		name := fmt.Sprintf("low-%d", i)
		p := clientPod(ns, name, n.name, 12288, 0, "suspendee", "64")
		p.Spec.Containers[0].Stdin = true
		p.Spec.PriorityClassName = "flexgv-test-susp-low"
		p.Annotations = map[string]string{vgpu.AnnotationPreemption: "suspend"}
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		running(t, ns, name)
		lows[name] = n.hollow.runtime.Container(ns, name)
		n.printedWithin(lows[name], "ready\n", 60*time.Second)
	}
	high := holderPod(ns, "high", n.name, 10240, 0, "10240")
	high.Spec.PriorityClassName = "flexgv-test-susp-high"
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpu := vgpu.PodGPUs(running(t, ns, "high"))[0]
	n.printedWithin(n.hollow.runtime.Container(ns, "high"), "ready\n", 60*time.Second)

	// One low pod suspended, on high's GPU; both still there.
	var off string
	for name := range lows {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s evicted: %v", name, err)
		}
		if vgpu.Suspended(p) {
			if off != "" || vgpu.PodGPUs(p)[0] != gpu {
				t.Errorf("suspended %s (GPU %s) and %q for a pod on %s", name, vgpu.PodGPUs(p)[0], off, gpu)
			}
			off = name
		}
	}
	if off == "" {
		t.Fatal("no low pod suspended")
	}
	// Its next step waits while it is suspended.
	c := lows[off]
	if err := c.Write("step\n"); err != nil {
		t.Fatal(err)
	}
	n.printedWithin(c, "calling\n", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(c.Printed(), "step 1") {
		t.Fatalf("the suspended pod's step went on:\n%s", c.Printed())
	}

	if err := cp.Client.CoreV1().Pods(ns).Delete(ctx, "high", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	podCondition(t, ns, off, vgpu.ConditionSuspended, corev1.ConditionFalse, "Resumed")
	n.printedWithin(c, "step 1 ok\n", 60*time.Second) // every byte as before the suspend
	if err := c.Write("step\n"); err != nil {
		t.Fatal(err)
	}
	n.printedWithin(c, "step 2 ok\n", 60*time.Second)
	p := running(t, ns, off)
	if p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the suspended pod restarted: %+v", p.Status.ContainerStatuses)
	}
	// The node's totals are its GPUs' again.
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := node.Status.Capacity[vgpu.ResourceMemory]; q.Value() != nodeGPUs*nodeGPUMiB {
		t.Errorf("the node's %s after the resume: %s", vgpu.ResourceMemory, q.String())
	}
}
