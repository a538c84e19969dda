package vgpu

import corev1 "k8s.io/api/core/v1"

// RunsAs is the user and group a container's processes run as where its
// pod says so, -1 where it does not: the container's securityContext, else
// the pod's; for the group, else the pod's fsGroup (a supplementary group
// of all its processes).
func RunsAs(pod *corev1.Pod, container string) (uid, gid int64) {
	uid, gid = -1, -1
	if sc := pod.Spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		} else if sc.FSGroup != nil {
			gid = *sc.FSGroup
		}
	}
	if c := containerNamed(pod, container); c != nil && c.SecurityContext != nil {
		if c.SecurityContext.RunAsUser != nil {
			uid = *c.SecurityContext.RunAsUser
		}
		if c.SecurityContext.RunAsGroup != nil {
			gid = *c.SecurityContext.RunAsGroup
		}
	}
	return uid, gid
}

// runsAsNonRoot says whether the pod says its container runs as a user
// other than root: a uid, or runAsNonRoot (the image's own user then, not
// root), the container's word before the pod's.
func runsAsNonRoot(pod *corev1.Pod, container string) bool {
	if uid, _ := RunsAs(pod, container); uid >= 0 {
		return uid != 0
	}
	if c := containerNamed(pod, container); c != nil && c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	sc := pod.Spec.SecurityContext
	return sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
}

func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}
