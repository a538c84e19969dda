package extender

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

func gpuServer(name string, mib int64) *corev1.Node {
	n := node(name, mib)
	inv, _, _ := vgpu.NodeInventory(n)
	inv.Remote, inv.Slots = "tcp://"+name+":7070", 8
	n.Annotations[vgpu.AnnotationInventory] = inv.Encode()
	return n
}

func remotePod(name, mib, on string) *corev1.Pod {
	p := pod(name, "1")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{vgpu.ResourceRemoteVGPU: resource.MustParse("1")}
	p.Annotations = map[string]string{vgpu.AnnotationRemoteMemory: mib, vgpu.AnnotationRemoteGPU: on}
	p.Spec.NodeName = "runner"
	p.Status.Phase = corev1.PodRunning
	return p
}

// usedMiB is what the extender counts on GPU uuid of node.
func (e *Extender) usedMiB(t *testing.T, node, uuid string) int64 {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	use, err := e.used(node, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	return use[uuid].MemoryMiB
}

func cordon(t *testing.T, e *Extender, name string, on bool) {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = on
	if _, err := e.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A GPU server cordoned has its remote vGPUs asked to move to another
// server with room (a full one, or one cordoned, is passed over); while it
// moves, it counts on both; once moved, on the new one alone, and nothing
// more is asked.
func TestDrainedServerRemoteVGPUsMove(t *testing.T) {
	e, _ := start(t, gpuServer("a", 4000), gpuServer("b", 4000), gpuServer("full", 1000), gpuServer("c", 4000),
		remotePod("p", "500", "a/a-gpu0"), remotePod("fill", "800", "full/full-gpu0"), node("runner", 1000))
	cordon(t, e, "c", true)
	cordon(t, e, "a", true)
	waitFor(t, "p asked to move to b", func() bool {
		c := e.condition("p", vgpu.ConditionMove)
		return c != nil && c.Status == corev1.ConditionTrue && c.Message == "b/b-gpu0"
	})
	waitFor(t, "p counted on b while it moves", func() bool { return e.usedMiB(t, "b", "b-gpu0") == 600 })
	if got := e.usedMiB(t, "a", "a-gpu0"); got != 600 {
		t.Errorf("a-gpu0 counts %d MiB while p moves, want 600 (it is still there)", got)
	}
	setCondition(t, e, "p", corev1.PodCondition{Type: vgpu.ConditionMoved, Status: corev1.ConditionTrue, Message: "b/b-gpu0"})
	if got := e.usedMiB(t, "a", "a-gpu0"); got != 0 {
		t.Errorf("a-gpu0 counts %d MiB once p moved", got)
	}
	if got := e.usedMiB(t, "b", "b-gpu0"); got != 600 {
		t.Errorf("b-gpu0 counts %d MiB once p moved, want 600", got)
	}
	if c := e.condition("p", vgpu.ConditionMove); c.Message != "b/b-gpu0" {
		t.Errorf("moved, p was asked again: %+v", c)
	}

}

// A remote vGPU with nowhere to go stays on its cordoned server, said, and
// moves once a server has room for it.
func TestDrainedServerRemoteVGPUWaitsForRoom(t *testing.T) {
	e, _ := start(t, gpuServer("x", 1000), gpuServer("y", 1000),
		remotePod("q", "600", "x/x-gpu0"), remotePod("blocker", "400", "y/y-gpu0"), node("runner", 1000))
	cordon(t, e, "x", true)
	time.Sleep(1500 * time.Millisecond) // a pass of the loop, at least
	if c := e.condition("q", vgpu.ConditionMove); c != nil {
		t.Errorf("q asked to move with no room anywhere: %+v", c)
	}
	e.mu.Lock()
	why := e.unmoved["uid-q"]
	e.mu.Unlock()
	if !strings.Contains(why, "none of 1 GPU servers (1 more cordoned) has a GPU with 600 MiB") {
		t.Errorf("why q stays: %q", why)
	}
	if err := e.client.CoreV1().Pods("default").Delete(context.Background(), "blocker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "q asked to move to y once it has room", func() bool {
		c := e.condition("q", vgpu.ConditionMove)
		return c != nil && c.Message == "y/y-gpu0"
	})
}
