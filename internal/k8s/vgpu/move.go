package vgpu

import (
	corev1 "k8s.io/api/core/v1"
)

// A remote vGPU moves off a GPU server being drained (cordoned): the
// scheduler extender picks another server and GPU and sets the pod's
// ConditionMove to them (True, its message NODE/UUID); the two servers'
// daemons make the pod's tenant on the new one (with the token the pod
// already has) and move its running programs there (flexgv serve's
// migration), and the old one sets ConditionMoved (True, NODE/UUID) once
// they run there. From then on the pod's remote vGPU is where
// ConditionMoved says (PodRemoteGPU), not where AnnotationRemoteGPU does.
const (
	ConditionMove  corev1.PodConditionType = "flexgv.io/move"
	ConditionMoved corev1.PodConditionType = "flexgv.io/moved"
)

// PodRemoteMove reads where a pod's remote vGPU is to move: the server
// node and GPU the extender asked for, where that is not where it is.
func PodRemoteMove(pod *corev1.Pod) (node, uuid string, ok bool) {
	c := PodCondition(pod, ConditionMove)
	if c == nil || c.Status != corev1.ConditionTrue {
		return "", "", false
	}
	node, uuid, ok = nodeGPU(c.Message)
	if now, _, placed := PodRemoteGPU(pod); !ok || !placed || now == node {
		return "", "", false
	}
	return node, uuid, true
}
