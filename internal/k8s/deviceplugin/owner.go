package deviceplugin

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// giveTo hands a file the daemon made for one pod (its tenant, its token)
// to the user its container runs as, which then opens it as the daemon's
// root would. Only that pod has the file mounted, so no other pod gains
// access; what the pod can do with its own file it could do anyway (its
// limits are enforced in its own processes). With only a group known, the
// group gets groupMode. A pod that states neither keeps root's file: an
// image's own non-root USER is unknown here (the shim then says "Permission
// denied"; give runAsUser or fsGroup).
func giveTo(path string, pod *corev1.Pod, container string, groupMode os.FileMode) error {
	uid, gid := vgpu.RunsAs(pod, container)
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
