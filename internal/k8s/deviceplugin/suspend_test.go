package deviceplugin

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

func suspendPod(t *testing.T, p *Plugin, name string, want corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	pod, err := p.client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := vgpu.SetCondition(ctx, p.client, pod, corev1.PodCondition{Type: vgpu.ConditionSuspend, Status: want}); err != nil {
		t.Fatal(err)
	}
}

func suspendedCondition(t *testing.T, p *Plugin, name string) *corev1.PodCondition {
	t.Helper()
	pod, err := p.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vgpu.PodCondition(pod, vgpu.ConditionSuspended)
}

func nodeMemoryMiB(t *testing.T, p *Plugin) (capacity, allocatable int64) {
	t.Helper()
	n, err := p.client.CoreV1().Nodes().Get(context.Background(), "node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, a := n.Status.Capacity[vgpu.ResourceMemory], n.Status.Allocatable[vgpu.ResourceMemory]
	return c.Value(), a.Value()
}

// A pod the extender asks to suspend is suspended through the daemon and
// said so; meanwhile the node publishes its memory on top of the GPU's, so
// that the pod it makes room for fits the node's totals; asked to run, it
// is resumed and the node's totals are the GPU's again.
func TestSuspensionAsTheExtenderAsks(t *testing.T) {
	low := placedPod("low", 1000, time.Now())
	low.Status.Phase = corev1.PodRunning
	low.Annotations[vgpu.AnnotationPreemption] = "suspend"
	p, _, d := startPlugin(t, low)
	ctx := context.Background()
	if _, err := p.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.refresh(ctx)
	if c, a := nodeMemoryMiB(t, p); c != 16384 || a != 16384 {
		t.Fatalf("the node's memory before: %d/%d MiB", c, a)
	}
	p.syncSuspensions(ctx)
	if d.suspended["pod-uid-low"] || suspendedCondition(t, p, "low") != nil {
		t.Fatal("suspended unasked")
	}

	suspendPod(t, p, "low", corev1.ConditionTrue)
	p.syncSuspensions(ctx)
	if !d.suspended["pod-uid-low"] {
		t.Fatal("not suspended through the daemon")
	}
	if c := suspendedCondition(t, p, "low"); c == nil || c.Status != corev1.ConditionTrue || c.Message != "1 process off the GPU" {
		t.Errorf("condition after the suspend: %+v", c)
	}
	if c, a := nodeMemoryMiB(t, p); c != 16384+1000 || a != 16384+1000 {
		t.Errorf("the node's memory while suspended: %d/%d MiB, want the pod's 1000 on top", c, a)
	}
	p.refresh(ctx) // the health loop's publishing keeps it
	if c, _ := nodeMemoryMiB(t, p); c != 16384+1000 {
		t.Errorf("the node's memory after a refresh: %d MiB", c)
	}
	p.syncSuspensions(ctx) // nothing more to do
	if c := suspendedCondition(t, p, "low"); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("condition after a second sync: %+v", c)
	}
	// A daemon started again publishes what the suspended pod lent too.
	again := New(p.cfg, d, p.client)
	again.refresh(ctx)
	again.syncSuspensions(ctx)
	if c, _ := nodeMemoryMiB(t, p); c != 16384+1000 {
		t.Errorf("the node's memory once the daemon started again: %d MiB", c)
	}
	p = again

	// A resume the daemon cannot make yet is tried again.
	suspendPod(t, p, "low", corev1.ConditionFalse)
	d.refuse = errors.New("the GPU lacks the room")
	p.syncSuspensions(ctx)
	if c := suspendedCondition(t, p, "low"); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("condition after a refused resume: %+v", c)
	}
	d.refuse = nil
	p.syncSuspensions(ctx)
	if d.suspended["pod-uid-low"] {
		t.Fatal("not resumed through the daemon")
	}
	if c := suspendedCondition(t, p, "low"); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "Resumed" {
		t.Errorf("condition after the resume: %+v", c)
	}
	if c, a := nodeMemoryMiB(t, p); c != 16384 || a != 16384 {
		t.Errorf("the node's memory after the resume: %d/%d MiB", c, a)
	}
}

// A pod the daemon cannot suspend is said to have failed, with the
// daemon's reason (the extender evicts it then), and is not tried again;
// a suspended pod that goes gives back what it lent.
func TestSuspensionFailedAndGone(t *testing.T) {
	a, b := placedPod("a", 1000, time.Now()), placedPod("b", 2000, time.Now())
	a.Status.Phase, b.Status.Phase = corev1.PodRunning, corev1.PodRunning
	p, _, d := startPlugin(t, a, b)
	ctx := context.Background()
	if _, err := p.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	suspendPod(t, p, "a", corev1.ConditionTrue)
	d.refuse = errors.New("flexgv suspend: tenant pod-uid-a has no processes")
	p.syncSuspensions(ctx)
	c := suspendedCondition(t, p, "a")
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != vgpu.ReasonSuspendFailed || c.Message != d.refuse.Error() {
		t.Errorf("condition after a failed suspend: %+v", c)
	}
	d.refuse = nil
	p.syncSuspensions(ctx)
	if d.suspended["pod-uid-a"] {
		t.Error("a failed suspend was tried again")
	}

	suspendPod(t, p, "b", corev1.ConditionTrue)
	p.syncSuspensions(ctx)
	if c, _ := nodeMemoryMiB(t, p); c != 16384+2000 {
		t.Errorf("the node's memory while b is suspended: %d MiB", c)
	}
	if err := p.client.CoreV1().Pods("ns").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.syncSuspensions(ctx)
	if c, _ := nodeMemoryMiB(t, p); c != 16384 {
		t.Errorf("the node's memory once b is gone: %d MiB", c)
	}
}
