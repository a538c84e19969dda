package deviceplugin

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// runsAs is the user and group a container's processes run as where its
// pod says so, -1 where it does not: the container's securityContext, else
// the pod's; for the group, else the pod's fsGroup (a supplementary group
// of all its processes).
func runsAs(pod *corev1.Pod, container string) (uid, gid int64) {
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
	for _, c := range pod.Spec.Containers {
		if c.Name != container || c.SecurityContext == nil {
			continue
		}
		if c.SecurityContext.RunAsUser != nil {
			uid = *c.SecurityContext.RunAsUser
		}
		if c.SecurityContext.RunAsGroup != nil {
			gid = *c.SecurityContext.RunAsGroup
		}
	}
	return uid, gid
}

// giveTo hands a file the daemon made for one pod (its tenant, its token)
// to the user its container runs as, which then opens it as the daemon's
// root would. Only that pod has the file mounted, so no other pod gains
// access; what the pod can do with its own file it could do anyway (its
// limits are enforced in its own processes). With only a group known, the
// group gets groupMode. A pod that states neither keeps root's file: an
// image's own non-root USER is unknown here (the shim then says "Permission
// denied"; give runAsUser or fsGroup).
func giveTo(path string, pod *corev1.Pod, container string, groupMode os.FileMode) error {
	uid, gid := runsAs(pod, container)
	if uid < 0 && gid < 0 {
		return nil
	}
	// O_NOFOLLOW: whatever sits at the path, the daemon changes no file it
	// did not make there.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err == nil {
		defer f.Close()
		err = f.Chown(int(uid), int(gid))
		if err == nil && uid < 0 {
			err = f.Chmod(groupMode)
		}
	}
	if err != nil {
		return fmt.Errorf("giving %s to the pod's user %d, group %d: %w", path, uid, gid, err)
	}
	return nil
}
