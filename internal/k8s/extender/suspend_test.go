package extender

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// suspendingNode is node n, whose daemon suspends pods, of slots vGPUs
// per GPU.
func suspendingNode(slots int, gpus ...int64) *corev1.Node {
	n := node("n", gpus...)
	inv, _, _ := vgpu.NodeInventory(n)
	inv.Slots, inv.Suspend = slots, true
	n.Annotations[vgpu.AnnotationInventory] = inv.Encode()
	return n
}

func suspendable(p *corev1.Pod) *corev1.Pod {
	p.Annotations[vgpu.AnnotationPreemption] = "suspend"
	return p
}

// waitFor polls cond until it holds (the informer and the resume loop run
// on their own), failing after a time no machine takes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// condition is pod name's condition typ as the extender's informer shows it.
func (e *Extender) condition(name string, typ corev1.PodConditionType) *corev1.PodCondition {
	obj, ok, _ := e.pods.GetByKey("default/" + name)
	if !ok {
		return nil
	}
	return vgpu.PodCondition(obj.(*corev1.Pod), typ)
}

func setCondition(t *testing.T, e *Extender, name string, c corev1.PodCondition) {
	t.Helper()
	p, err := e.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := vgpu.SetCondition(context.Background(), e.client, p, c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, name+" "+string(c.Type)+" "+string(c.Status)+" seen", func() bool {
		got := e.condition(name, c.Type)
		return got != nil && got.Status == c.Status && got.Reason == c.Reason
	})
}

func preempt(t *testing.T, srv *httptest.Server, p *corev1.Pod) map[string]*extenderv1.MetaVictims {
	t.Helper()
	code, body := post(t, srv, "/preempt", extenderv1.ExtenderPreemptionArgs{Pod: p, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
		"n": {Pods: []*extenderv1.MetaPod{{UID: "uid-c"}}},
	}})
	var res extenderv1.ExtenderPreemptionResult
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("preempt: %d %s", code, body)
	}
	return res.NodeNameToMetaVictims
}

func fits(t *testing.T, srv *httptest.Server, p *corev1.Pod) bool {
	t.Helper()
	names := []string{"n"}
	_, body := post(t, srv, "/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: &names})
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &res); err != nil || res.NodeNames == nil {
		t.Fatalf("filter: %s", body)
	}
	return slices.Contains(*res.NodeNames, "n")
}

// Where the pods of lower priority that make room allow it, preemption
// suspends them instead of evicting any pod, even one eviction fewer; the
// pod fits once they are off the GPU, a pod of their priority does not;
// they stay suspended while the pod they made room for runs and resume
// once it is gone. A pod its node failed to suspend is evicted instead.
func TestPreemptionSuspendsInsteadOfEvicting(t *testing.T) {
	// GPUs of 1000 MiB, contexts of 100: n-gpu0 holds a (400) and b (300),
	// both suspendable; n-gpu1 holds c (700), which is not.
	// A suspended pod keeps its vGPU slot: high needs a third.
	e, srv := start(t, suspendingNode(3, 1000, 1000),
		suspendable(placed("a", "400", "n-gpu0", 1)), suspendable(placed("b", "300", "n-gpu0", 1)), placed("c", "700", "n-gpu1", 1))
	high, peer := pod("high", "600"), pod("peer", "600")
	prio, low := int32(10), int32(1)
	high.Spec.Priority, peer.Spec.Priority = &prio, &low
	if _, err := e.client.CoreV1().Pods("default").Create(context.Background(), high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := preempt(t, srv, high); len(v) != 0 {
		t.Fatalf("evicted %v, want none", v)
	}
	for _, name := range []string{"a", "b"} {
		waitFor(t, name+" asked to suspend", func() bool {
			c := e.condition(name, vgpu.ConditionSuspend)
			return c != nil && c.Status == corev1.ConditionTrue && strings.HasPrefix(c.Message, "to make room for pod default/high ")
		})
	}
	if c := e.condition("c", vgpu.ConditionSuspend); c != nil {
		t.Errorf("c asked to suspend: %+v", c)
	}
	// While they are on their way off, no other preemption, and no room.
	if v := preempt(t, srv, high); len(v) != 0 {
		t.Errorf("while suspending: evicted %v", v)
	}
	if fits(t, srv, high) {
		t.Error("high fits before its room is off the GPU")
	}
	for _, name := range []string{"a", "b"} {
		setCondition(t, e, name, corev1.PodCondition{Type: vgpu.ConditionSuspended, Status: corev1.ConditionTrue, Reason: "Suspended"})
	}
	if !fits(t, srv, high) {
		t.Error("high does not fit once a and b are suspended")
	}
	if fits(t, srv, peer) {
		t.Error("a pod of the suspended pods' priority took their room")
	}
	// high placed there, then gone: a and b resume.
	time.Sleep(1500 * time.Millisecond) // a pass of the resume loop while high waits
	if c := e.condition("a", vgpu.ConditionSuspend); c.Status != corev1.ConditionTrue {
		t.Fatalf("a resumed while the pod it made room for waits: %+v", c)
	}
	high.Spec.NodeName, high.Annotations = "n", map[string]string{vgpu.AnnotationGPUs: "n-gpu0"}
	high.Status.Phase = corev1.PodRunning
	if _, err := e.client.CoreV1().Pods("default").Update(context.Background(), high, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if c := e.condition("a", vgpu.ConditionSuspend); c.Status != corev1.ConditionTrue {
		t.Fatalf("a resumed beside high, with no room: %+v", c)
	}
	if err := e.client.CoreV1().Pods("default").Delete(context.Background(), "high", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		waitFor(t, name+" asked to resume", func() bool {
			c := e.condition(name, vgpu.ConditionSuspend)
			return c.Status == corev1.ConditionFalse && c.Reason == "RoomReturned"
		})
	}
	// Asked to resume, they hold their room again before their node says
	// they run.
	if fits(t, srv, pod("again", "600")) {
		t.Error("a pod took the room of pods asked to resume")
	}

	// b's node failed to suspend it: now it is evicted.
	setCondition(t, e, "a", corev1.PodCondition{Type: vgpu.ConditionSuspended, Status: corev1.ConditionFalse, Reason: "Resumed"})
	setCondition(t, e, "b", corev1.PodCondition{Type: vgpu.ConditionSuspended, Status: corev1.ConditionFalse, Reason: vgpu.ReasonSuspendFailed})
	big := pod("big", "800")
	big.Spec.Priority = &prio
	v := preempt(t, srv, big)
	if len(v) != 1 || v["n"] == nil || len(v["n"].Pods) != 1 || v["n"].Pods[0].UID != "uid-c" {
		t.Errorf("victims %+v, want c evicted (one pod) once b cannot be suspended", v["n"])
	}
}

// Suspending frees no vGPU slot: where the GPU of suspendable pods has no
// slot left for the pod, another GPU's pod is evicted.
func TestSuspensionFreesNoSlot(t *testing.T) {
	e, srv := start(t, suspendingNode(2, 1000, 1000),
		suspendable(placed("a", "400", "n-gpu0", 1)), suspendable(placed("b", "300", "n-gpu0", 1)), placed("c", "700", "n-gpu1", 1))
	high := pod("high", "600")
	prio := int32(10)
	high.Spec.Priority = &prio
	v := preempt(t, srv, high)
	if len(v) != 1 || v["n"] == nil || len(v["n"].Pods) != 1 || v["n"].Pods[0].UID != "uid-c" {
		t.Errorf("victims %+v, want c evicted", v["n"])
	}
	if c := e.condition("a", vgpu.ConditionSuspend); c != nil {
		t.Errorf("a asked to suspend: %+v", c)
	}
}

// A node whose daemon does not suspend pods (no --suspend-pods) has them
// evicted, however they allow suspension.
func TestPreemptionEvictsWhereTheNodeDoesNotSuspend(t *testing.T) {
	for _, suspends := range []bool{false, true} {
		n := node("n", 1000)
		if suspends {
			n = suspendingNode(2, 1000)
		}
		e, srv := start(t, n, suspendable(placed("a", "400", "n-gpu0", 1)))
		high := pod("high", "600")
		prio := int32(10)
		high.Spec.Priority = &prio
		v := preempt(t, srv, high)
		evicted := len(v) == 1 && v["n"] != nil && len(v["n"].Pods) == 1 && v["n"].Pods[0].UID == "uid-a"
		if evicted == suspends {
			t.Errorf("node suspends %v: victims %+v", suspends, v)
		}
		if suspends {
			waitFor(t, "a asked to suspend", func() bool { return e.condition("a", vgpu.ConditionSuspend) != nil })
		}
	}
}
