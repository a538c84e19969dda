package deviceplugin

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/remote"
)

// The servers' part of moving a remote vGPU off a drained server
// (vgpu/move.go). The new server makes the pod's tenant and its token file
// from the pod's Secret (the token the pod's programs already have) and
// marks the Secret ready for it; then the old one asks its flexgv serve,
// through its admin socket (Config.ServeAdmin), to move the tenant's
// programs there, and once they run there sets ConditionMoved. Its own
// tenant, token and Secret then go as for a pod gone from it.

// AnnotationReadyOn on a remote pod's Secret: the server that holds the
// pod's tenant and token, ready for it to move in.
const AnnotationReadyOn = "flexgv.io/remote-ready-on"

// moveWait bounds how long a move waits for the programs' next calls.
const moveWait = time.Minute

// readyFor marks pod's Secret ready for this server.
func (p *Plugin) readyFor(ctx context.Context, pod *corev1.Pod) {
	secrets := p.client.CoreV1().Secrets(p.cfg.SecretNamespace)
	name := RemoteSecretPrefix + string(pod.UID)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil || s.Annotations[AnnotationReadyOn] == p.cfg.NodeName {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationReadyOn: p.cfg.NodeName}}})
	if _, err := secrets.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		p.log.Printf("remote pod %s/%s: marking its Secret ready here: %v", pod.Namespace, pod.Name, err)
	}
}

// moveAway moves pod's programs to server to (GPU uuid) once that server
// is ready for it, in the background; one move per pod at a time. The
// caller holds remoteMu.
func (p *Plugin) moveAway(ctx context.Context, pod *corev1.Pod, to, uuid string) {
	who := pod.Namespace + "/" + pod.Name
	if p.cfg.ServeAdmin == "" {
		p.sayOnce(pod.UID, "remote pod "+who+" cannot move to "+to+": this daemon was given no --serve-admin")
		return
	}
	p.mu.Lock()
	busy := p.movingOut[pod.UID]
	p.mu.Unlock()
	if busy {
		return
	}
	s, err := p.client.CoreV1().Secrets(p.cfg.SecretNamespace).Get(ctx, RemoteSecretPrefix+string(pod.UID), metav1.GetOptions{})
	if err != nil || s.Annotations[AnnotationReadyOn] != to {
		p.retrySoon()
		return // the new server has not made its tenant yet
	}
	node, err := p.client.CoreV1().Nodes().Get(ctx, to, metav1.GetOptions{})
	inv, ok, ierr := vgpu.Inventory{}, false, error(nil)
	if err == nil {
		inv, ok, ierr = vgpu.NodeInventory(node)
	}
	if err != nil || ierr != nil || !ok || inv.Remote == "" {
		p.sayOnce(pod.UID, "remote pod "+who+" cannot move to "+to+": it publishes no address of its GPU server")
		return
	}
	p.mu.Lock()
	p.movingOut[pod.UID] = true
	p.mu.Unlock()
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.movingOut, pod.UID)
			p.mu.Unlock()
			p.retrySoon()
		}()
		name := TenantPrefix + string(pod.UID)
		a, err := remote.AdminCall(p.cfg.ServeAdmin, remote.AdminRequest{Op: "migrate", To: inv.Remote, Tenant: name, WaitMs: moveWait.Milliseconds()})
		var why []string
		switch {
		case err != nil:
			why = append(why, err.Error())
		case strings.HasPrefix(a.Error, "no executor of tenant"): // no program connected: nothing to move
		case a.Error != "":
			why = append(why, a.Error)
		}
		for _, r := range a.Results {
			if r.Outcome != remote.Moved && r.Outcome != remote.Ended {
				why = append(why, "executor "+r.Peer+": "+string(r.Outcome)+" "+r.Reason)
			}
		}
		if len(why) > 0 {
			p.log.Printf("remote pod %s stays on this server for now (moving to %s): %s", who, to, strings.Join(why, "; "))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = vgpu.SetCondition(ctx, p.client, pod, corev1.PodCondition{
			Type: vgpu.ConditionMoved, Status: corev1.ConditionTrue, Reason: "Migrated", Message: to + "/" + uuid,
		})
		if err != nil {
			p.log.Printf("remote pod %s moved to %s, but saying so failed: %v", who, to, err)
			return
		}
		p.log.Printf("remote pod %s moved to %s (%s): %d program(s)", who, to, inv.Remote, len(a.Results))
	}()
}

// sayOnce logs msg for pod uid where it was not the last said for it.
func (p *Plugin) sayOnce(uid types.UID, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.said[uid] != msg {
		p.said[uid] = msg
		p.log.Print(msg)
	}
}

// retrySoon has the remote pods looked at again after cfg.SyncEvery.
func (p *Plugin) retrySoon() {
	p.mu.Lock()
	kick := p.remoteKick
	p.mu.Unlock()
	if kick != nil {
		time.AfterFunc(p.cfg.SyncEvery, kick)
	}
}
