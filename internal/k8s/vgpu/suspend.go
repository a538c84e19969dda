package vgpu

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Suspension instead of eviction: a pod of higher priority that needs the
// GPU room of pods that allow it has them suspended (the driver's process
// checkpoint: their device memory moves to host memory, their CUDA calls
// wait) rather than evicted, and they resume once the room returns.
//
// The state is in two pod conditions, in the pod's status so that only
// those who may write pods' status (the scheduler, the node) set them, not
// whoever may edit the pod:
//   - ConditionSuspend, the scheduler extender's: True, to be suspended
//     (its message names the pod it makes room for); False, to run.
//   - ConditionSuspended, the node's: True once the pod's processes are off
//     the GPU; False once they run again, or (ReasonSuspendFailed) when they
//     could not be suspended, which makes the pod one to evict.
//
// A suspended pod's GPU room goes to pods of higher priority than its own
// only; it keeps its placement, and resumes on the GPUs it had.
const (
	// AnnotationPreemption on a pod: "suspend" lets a pod of higher
	// priority suspend it instead of evicting it; "evict" (the default)
	// does not. A suspended pod's device memory is held in its host
	// memory, which its memory limit must allow.
	AnnotationPreemption = "flexgv.io/preemption"

	ConditionSuspend   corev1.PodConditionType = "flexgv.io/suspend"
	ConditionSuspended corev1.PodConditionType = "flexgv.io/suspended"

	// ReasonSuspendFailed on ConditionSuspended: the node could not
	// suspend the pod (its message says why).
	ReasonSuspendFailed = "SuspendFailed"
)

// preemption reads AnnotationPreemption: whether the pod may be
// suspended, and an error for a value that is not one, or a pod that asks
// for it but cannot be suspended.
func preemption(annotations map[string]string, r Request, ok bool) error {
	v, set := annotations[AnnotationPreemption]
	switch {
	case !set:
		return nil
	case v != "suspend" && v != "evict":
		return fmt.Errorf("%s %q: want suspend or evict", AnnotationPreemption, v)
	case !ok:
		return fmt.Errorf("%s is set but no container asks for %s", AnnotationPreemption, ResourceVGPU)
	case v == "suspend" && r.Remote:
		return fmt.Errorf("%s suspend: a remote vGPU runs on its server, which a node's preemption does not free; leave it out", AnnotationPreemption)
	case v == "suspend" && r.SM > 0:
		return fmt.Errorf("%s suspend: a pod under the node's MPS (%s) cannot be suspended (the driver's checkpoint does not take MPS clients)", AnnotationPreemption, AnnotationSM)
	}
	return nil
}

// PodCondition is pod's condition of type typ, or nil.
func PodCondition(pod *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == typ {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func conditionIs(pod *corev1.Pod, typ corev1.PodConditionType, s corev1.ConditionStatus) bool {
	c := PodCondition(pod, typ)
	return c != nil && c.Status == s
}

// SuspendWanted: the extender asked for pod to be suspended.
func SuspendWanted(pod *corev1.Pod) bool {
	return conditionIs(pod, ConditionSuspend, corev1.ConditionTrue)
}

// Suspended: the node has pod's processes off the GPU.
func Suspended(pod *corev1.Pod) bool {
	return conditionIs(pod, ConditionSuspended, corev1.ConditionTrue)
}

// SuspendFailed: the node could not suspend pod.
func SuspendFailed(pod *corev1.Pod) bool {
	c := PodCondition(pod, ConditionSuspended)
	return c != nil && c.Status == corev1.ConditionFalse && c.Reason == ReasonSuspendFailed
}

// Suspendable: pod allows suspension (a valid request that asks for it)
// and its node has not failed to suspend it.
func Suspendable(pod *corev1.Pod) bool {
	r, ok, err := PodRequest(pod)
	return err == nil && ok && !r.Remote && pod.Annotations[AnnotationPreemption] == "suspend" && !SuspendFailed(pod)
}

// SetCondition sets cond on pod's status (now as its transition time), as
// long as the pod is still the one of that UID.
func SetCondition(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, cond corev1.PodCondition) error {
	cond.LastTransitionTime = metav1.Now()
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   map[string]any{"conditions": []corev1.PodCondition{cond}},
	})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
