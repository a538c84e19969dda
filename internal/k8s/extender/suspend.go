package extender

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// Suspension instead of eviction (vgpu/suspend.go has the conditions): the
// extender asks for pods to be suspended and to resume; the node's daemon
// does it and says when it is done.

// suspendFor is the start of ConditionSuspend's message, naming the pod
// the room is for: the resume loop waits for that pod.
const suspendFor = "to make room for pod "

// suspend asks for victims to be suspended for pod.
func (e *Extender) suspend(pod *corev1.Pod, victims []*corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, v := range victims {
		if vgpu.SuspendWanted(v) {
			continue
		}
		err := vgpu.SetCondition(ctx, e.client, v, corev1.PodCondition{
			Type: vgpu.ConditionSuspend, Status: corev1.ConditionTrue, Reason: "Preempted",
			Message: fmt.Sprintf("%s%s/%s (priority %d)", suspendFor, pod.Namespace, pod.Name, podPriority(pod)),
		})
		if err != nil {
			e.log.Printf("asking %s/%s to suspend for %s/%s: %v", v.Namespace, v.Name, pod.Namespace, pod.Name, err)
			continue
		}
		e.log.Printf("suspending %s/%s on %s (GPUs %s) for %s/%s", v.Namespace, v.Name, v.Spec.NodeName,
			strings.Join(podGPUs(v), ","), pod.Namespace, pod.Name)
	}
}

// reconcileLoop resumes suspended pods as room for them returns, and moves
// the remote vGPUs of drained servers (drain.go): on each pod change, and
// every second.
func (e *Extender) reconcileLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-e.wake:
		}
		e.askMoves(ctx, e.movesDue())
		for _, p := range e.resumable() {
			err := vgpu.SetCondition(ctx, e.client, p, corev1.PodCondition{
				Type: vgpu.ConditionSuspend, Status: corev1.ConditionFalse, Reason: "RoomReturned",
				Message: "its GPUs have room for it again",
			})
			if err != nil {
				e.log.Printf("asking %s/%s to resume: %v", p.Namespace, p.Name, err)
				e.mu.Lock()
				delete(e.resuming, p.UID)
				e.mu.Unlock()
				continue
			}
			e.log.Printf("resuming %s/%s on %s: its GPUs have room again", p.Namespace, p.Name, p.Spec.NodeName)
		}
	}
}

// resumable are the suspended pods that fit again where they were, the
// highest priority first (then the longest suspended): each is counted as
// holding its GPUs from here on (e.resuming). A pod is left suspended
// while the pod it made room for waits to be placed, which its room is
// for.
func (e *Extender) resumable() []*corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	var cands []*corev1.Pod
	for _, obj := range e.pods.List() {
		p := obj.(*corev1.Pod)
		if e.yields(p, math.MaxInt64) && p.DeletionTimestamp == nil && !e.waitedFor(p) {
			cands = append(cands, p)
		}
	}
	slices.SortFunc(cands, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(podPriority(b), podPriority(a)),
			vgpu.PodCondition(a, vgpu.ConditionSuspended).LastTransitionTime.Compare(vgpu.PodCondition(b, vgpu.ConditionSuspended).LastTransitionTime.Time),
			strings.Compare(string(a.UID), string(b.UID)))
	})
	var due []*corev1.Pod
	for _, p := range cands {
		if e.fitsAgain(p) {
			e.resuming[p.UID] = true
			due = append(due, p)
		}
	}
	return due
}

// waitedFor: the pod p was suspended for has not been placed yet.
func (e *Extender) waitedFor(p *corev1.Pod) bool {
	key, ok := strings.CutPrefix(vgpu.PodCondition(p, vgpu.ConditionSuspend).Message, suspendFor)
	if !ok {
		return false
	}
	key, _, _ = strings.Cut(key, " ")
	obj, ok, _ := e.pods.GetByKey(key)
	if !ok {
		return false
	}
	w := obj.(*corev1.Pod)
	return w.DeletionTimestamp == nil && w.Spec.NodeName == "" && w.Status.Phase != corev1.PodSucceeded && w.Status.Phase != corev1.PodFailed
}

// fitsAgain: every GPU of suspended pod p has room for it beside what the
// others hold (suspended ones not resuming hold nothing). The caller holds
// e.mu.
func (e *Extender) fitsAgain(p *corev1.Pod) bool {
	r, ok, err := vgpu.PodRequest(p)
	n, nerr := e.nodes.Get(p.Spec.NodeName)
	if err != nil || !ok || nerr != nil {
		return false
	}
	inv, ok, err := vgpu.NodeInventory(n)
	if err != nil || !ok {
		return false
	}
	use, err := e.usedWithout(p.Spec.NodeName, inv.ContextMiB, map[types.UID]bool{p.UID: true}, math.MaxInt64)
	if err != nil {
		return false
	}
	one := r
	one.Count = 1
	for _, uuid := range podGPUs(p) {
		i := slices.IndexFunc(inv.GPUs, func(g vgpu.GPU) bool { return g.UUID == uuid })
		if i < 0 {
			return false
		}
		single := vgpu.Inventory{Slots: inv.Slots, ContextMiB: inv.ContextMiB, GPUs: inv.GPUs[i : i+1], MPS: inv.MPS}
		if _, _, err := vgpu.Choose(single, use, one, e.policy); err != nil {
			return false
		}
	}
	return true
}
